/* The command line's cluster entry points: `patina cluster create|status`,
 * `patina shard` and `patina index --cluster` (search and identify call
 * the session and front directly from their own files). */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "cli/cli.h"
#include "cluster/cmd.h"
#include "cluster/conn.h"

static int fail(const char *cmd, patina_status s)
{
    cli_error(cmd, "%s", clu_last_error());
    return s == PATINA_E_INVALID || s == PATINA_E_NOTFOUND ? EXIT_USAGE : EXIT_ERROR;
}

/* ------------------------------------------------------------ cluster create */

static int cluster_create(const cli_args_t *a, clu_conn_t *c, const char *coll)
{
    const cli_value_t *fam = cli_get(a, "family");
    clu_config_t cfg;
    patina_status s;
    size_t i;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.name, sizeof cfg.name, "%s", coll);
    cfg.partitions = (uint32_t)cli_get(a, "partitions")->i;
    cfg.replicas = cli_get(a, "replicas")->given ? (int)cli_get(a, "replicas")->i : 0;
    if (fam->count > CLU_TABLES_MAX) {
        cli_error("cluster", "at most %d tables (-f)", CLU_TABLES_MAX);
        return EXIT_USAGE;
    }
    for (i = 0; i < fam->count; i++) snprintf(cfg.tables[cfg.ntables++], CLU_SPEC_MAX + 1, "%s", fam->all[i]);
    if (!fam->count) snprintf(cfg.tables[cfg.ntables++], CLU_SPEC_MAX + 1, "cedd");
    if ((s = clu_collection_create(c, &cfg)) != PATINA_OK) return fail("cluster", s);
    printf("cluster collection %s: %u partitions, %d replica%s, tables:", cfg.name, cfg.partitions, cfg.replicas,
           cli_plural((unsigned)cfg.replicas));
    for (i = 0; i < cfg.ntables; i++) printf(" %s", cfg.tables[i]);
    printf("\n");
    return EXIT_OK;
}

/* ------------------------------------------------------------ cluster status */

static int cluster_status(const cli_args_t *a, clu_conn_t *c, const char *coll)
{
    clu_config_t cfg;
    clu_member_t *m = NULL;
    size_t n = 0, i;
    uint32_t p, covered = 0;
    patina_status s;
    int json = (int)cli_get(a, "json")->i;
    if ((s = clu_collection_config(c, coll, &cfg)) != PATINA_OK) return fail("cluster", s);
    if ((s = clu_members_read(c, &cfg, &m, &n)) != PATINA_OK) return fail("cluster", s);
    for (p = 0; p < cfg.partitions; p++)
        for (i = 0; i < n; i++)
            if (m[i].ready[p]) {
                covered++;
                break;
            }
    if (json) {
        json_t *o = json_object(), *t = json_array(), *ms = json_array(), *ps = json_array();
        char *text;
        for (i = 0; i < cfg.ntables; i++) json_array_append_new(t, json_string(cfg.tables[i]));
        for (i = 0; i < n; i++) {
            json_t *mo = json_object(), *r = json_array(), *h = json_array(), *lg = json_object();
            for (p = 0; p < cfg.partitions; p++) {
                char pn[16];
                if (m[i].ready[p]) json_array_append_new(r, json_integer(p));
                if (!m[i].hosted[p]) continue;
                json_array_append_new(h, json_integer(p));
                snprintf(pn, sizeof pn, "%u", p);
                json_object_set_new(lg, pn, json_integer((json_int_t)m[i].lag[p]));
            }
            json_object_set_new(mo, "name", json_string(m[i].name));
            json_object_set_new(mo, "device", json_string(m[i].device));
            json_object_set_new(mo, "capacity", json_real(m[i].capacity));
            json_object_set_new(mo, "copies", json_integer(m[i].copies));
            json_object_set_new(mo, "hosted", h);
            json_object_set_new(mo, "ready", r);
            json_object_set_new(mo, "lag", lg);
            json_object_set_new(mo, "bytes", json_integer((json_int_t)m[i].bytes));
            json_object_set_new(mo, "gpu_mem", json_integer((json_int_t)m[i].gpu_mem));
            json_object_set_new(mo, "started", json_integer(m[i].started));
            json_array_append_new(ms, mo);
        }
        for (p = 0; p < cfg.partitions; p++) {
            json_t *po = json_object(), *cs = json_array();
            for (i = 0; i < n; i++) {
                json_t *co;
                if (!m[i].hosted[p]) continue;
                co = json_object();
                json_object_set_new(co, "shard", json_string(m[i].name));
                json_object_set_new(co, "ready", json_boolean(m[i].ready[p]));
                json_object_set_new(co, "lag", json_integer((json_int_t)m[i].lag[p]));
                json_array_append_new(cs, co);
            }
            json_object_set_new(po, "partition", json_integer(p));
            json_object_set_new(po, "copies", cs);
            json_array_append_new(ps, po);
        }
        json_object_set_new(o, "collection", json_string(cfg.name));
        json_object_set_new(o, "partitions", json_integer(cfg.partitions));
        json_object_set_new(o, "replicas", json_integer(cfg.replicas));
        json_object_set_new(o, "tables", t);
        json_object_set_new(o, "members", ms);
        json_object_set_new(o, "partition_copies", ps);
        json_object_set_new(o, "covered", json_integer(covered));
        text = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        if (text) printf("%s\n", text);
        free(text);
    } else {
        printf("collection %s: %u partitions (%u with a ready copy), %d replica%s, tables:", cfg.name, cfg.partitions,
               covered, cfg.replicas, cli_plural((unsigned)cfg.replicas));
        for (i = 0; i < cfg.ntables; i++) printf(" %s", cfg.tables[i]);
        printf("\nmembers: %zu\n", n);
        for (i = 0; i < n; i++) {
            uint32_t h = 0, r = 0;
            for (p = 0; p < cfg.partitions; p++) {
                h += m[i].hosted[p];
                r += m[i].ready[p];
            }
            printf("  %-24s device %-5s capacity %-4g partitions %u (%u ready)  %llu bytes  GPU memory %llu\n",
                   m[i].name, m[i].device, m[i].capacity, h, r, (unsigned long long)m[i].bytes,
                   (unsigned long long)m[i].gpu_mem);
        }
        printf("partitions (copies; * = ready, +N = lag):\n");
        for (p = 0; p < cfg.partitions; p++) {
            printf("  %4u:", p);
            for (i = 0; i < n; i++)
                if (m[i].hosted[p]) {
                    printf(" %s%s", m[i].name, m[i].ready[p] ? "*" : "");
                    if (m[i].lag[p]) printf("+%llu", (unsigned long long)m[i].lag[p]);
                }
            printf("\n");
        }
    }
    clu_members_free(m, n);
    return EXIT_OK;
}

int clu_cli_cluster(const cli_args_t *a)
{
    const char *verb = a->operands[0], *coll = a->operands[1];
    clu_conn_t *c = NULL;
    patina_status s;
    int rc;
    if (strcmp(verb, "create") && strcmp(verb, "status")) {
        cli_error("cluster", "unknown action '%s' (create or status)", verb);
        return EXIT_USAGE;
    }
    if (!clu_name_ok(coll)) {
        cli_error("cluster", "collection name '%s' is not [A-Za-z0-9_-]{1,%d}", coll, CLU_NAME_MAX);
        return EXIT_USAGE;
    }
    if ((s = clu_connect(&c, cli_get(a, "cluster")->text)) != PATINA_OK) return fail("cluster", s) == EXIT_USAGE ? EXIT_USAGE : EXIT_ERROR;
    rc = !strcmp(verb, "create") ? cluster_create(a, c, coll) : cluster_status(a, c, coll);
    clu_disconnect(c);
    return rc;
}

/* ------------------------------------------------------------------ shard */

static volatile int shard_stop;

static void on_signal(int sig)
{
    (void)sig;
    shard_stop = 1;
}

int clu_cli_shard(const cli_args_t *a)
{
    clu_shard_opts_t o;
    struct sigaction sa;
    patina_status s;
    clu_shard_opts_init(&o);
    if (cli_get(a, "gpus")->given) o.gpus = cli_get(a, "gpus")->text;
    if (cli_get(a, "gpu-mem")->given) o.gpu_mem = cli_get(a, "gpu-mem")->bytes;
    if (cli_get(a, "name")->given) o.name = cli_get(a, "name")->text;
    if (cli_get(a, "capacity")->given) o.capacity = cli_get(a, "capacity")->num;
    o.copies = (int)cli_get(a, "copies")->i;
    if (patina_device_parse(&o.device, cli_get(a, "device")->text) != PATINA_OK) return EXIT_USAGE;
    o.metrics_port = cli_get(a, "metrics-port")->given ? (int)cli_get(a, "metrics-port")->i : 0;
    o.threads = cli_get(a, "jobs")->given ? (int)cli_get(a, "jobs")->i : 0;
    o.workers = (int)cli_get(a, "workers")->i;
    o.load_parallel = (int)cli_get(a, "load-parallel")->i;
    if (cli_get(a, "synthetic")->given) {
        const char *v = cli_get(a, "synthetic")->text;
        unsigned long long n = 0, seed = 1;
        char *end = NULL;
        n = strtoull(v, &end, 10);
        if (end && *end == ':') seed = strtoull(end + 1, &end, 10);
        if (!end || *end || n == 0 || n > (1ull << 40)) {
            cli_error("shard", "--synthetic '%s': N[:SEED] with 1 <= N <= 2^40", v);
            return EXIT_USAGE;
        }
        o.synthetic = n;
        o.synthetic_seed = seed;
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    s = clu_shard_run(cli_get(a, "cluster")->text, a->operands[0], &o, &shard_stop);
    if (s != PATINA_OK) return fail("shard", s) == EXIT_USAGE ? EXIT_USAGE : EXIT_ERROR;
    return EXIT_OK;
}

/* ------------------------------------------------------------ index --cluster */

static void on_skip(void *user, const char *path, patina_status s, const char *msg)
{
    (void)user;
    (void)path;
    (void)s;
    cli_error("index", "%s", msg);
}

/* The key of a file: its real path relative to root when under it, else absolute. */
static char *file_key(const char *root, const char *path)
{
    char real[PATH_MAX];
    size_t n = strlen(root);
    if (!realpath(path, real)) return strdup(path);
    if (!strncmp(real, root, n) && real[n] == '/') return strdup(real + n + 1);
    if (!strcmp(root, "/")) return strdup(real + 1);
    return strdup(real);
}

/* Size, SHA-256 and mtime of a file's content. */
static int file_facts(const char *path, patina_insert_t *it)
{
    FILE *f = fopen(path, "rb");
    patina_sha256_ctx_t h;
    unsigned char buf[1 << 16];
    size_t n;
    struct stat st;
    if (!f) return -1;
    patina_sha256_init(&h);
    it->size = 0;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        patina_sha256_update(&h, buf, n);
        it->size += n;
    }
    patina_sha256_final(&h, it->sha256);
    if (fstat(fileno(f), &st) == 0) it->mtime = (int64_t)st.st_mtime;
    fclose(f);
    return 0;
}

int clu_cli_index(const cli_args_t *a)
{
    const cli_value_t *fam = cli_get(a, "family"), *rootv = cli_get(a, "root");
    const char *coll = a->operands[0];
    clu_session_t *ss = NULL;
    clu_writer_t *w = NULL;
    patina_context_t *ctx = NULL;
    patina_extractor_t *ex[CLU_TABLES_MAX] = {0};
    const char *specs[CLU_TABLES_MAX];
    size_t bytes[CLU_TABLES_MAX], nt = 0, i, t, nfiles = 0, done = 0, written = 0;
    unsigned char *desc[CLU_TABLES_MAX] = {0};
    char **files = NULL, root[PATH_MAX];
    patina_walk_opts_t wopts;
    patina_walk_stats_t wstats;
    patina_load_opts_t lopts;
    patina_image_t *images = NULL;
    patina_load_result_t *lres = NULL;
    patina_status *sts = NULL, s;
    patina_device device;
    const clu_config_t *cfg;
    clu_front_opts_t fo;
    int rc = EXIT_OK, quiet = (int)cli_get(a, "quiet")->i;

    if (patina_device_parse(&device, cli_get(a, "device")->text) != PATINA_OK) return EXIT_USAGE;
    if (!realpath(rootv->given ? rootv->text : ".", root)) {
        cli_error("index", "--root '%s' is not a directory", rootv->given ? rootv->text : ".");
        return EXIT_USAGE;
    }
    clu_front_opts_init(&fo);
    if ((s = clu_session_open(&ss, cli_get(a, "cluster")->text, coll, &fo)) != PATINA_OK) return fail("index", s);
    cfg = clu_session_config(ss);
    for (t = 0; t < cfg->ntables; t++) {
        patina_extractor_t *e = NULL;
        int take = !fam->given;
        if (patina_extractor_new(&e, cfg->tables[t]) != PATINA_OK) continue;
        if (fam->given) {
            patina_extractor_t *g = NULL;
            if (patina_extractor_new(&g, fam->text) == PATINA_OK)
                take = !strcmp(patina_extractor_spec(g), cfg->tables[t]) ||
                       (!strchr(fam->text, ':') && !strcmp(fam->text, patina_extractor_family(e)));
            patina_extractor_free(g);
        }
        if (!take) {
            patina_extractor_free(e);
            continue;
        }
        ex[nt] = e;
        specs[nt] = cfg->tables[t];
        bytes[nt] = patina_extractor_bytes(e);
        nt++;
    }
    if (!nt) {
        cli_error("index", "cluster collection %s has no table '%s' (patina cluster create %s -f ...)", coll,
                  fam->text, coll);
        rc = EXIT_USAGE;
        goto out;
    }
    if ((s = clu_writer_new(&w, clu_session_conn(ss), cfg, clu_session_front(ss))) != PATINA_OK) {
        rc = fail("index", s);
        goto out;
    }
    if (cli_context(&ctx, a) != 0) {
        rc = EXIT_ERROR;
        goto out;
    }
    patina_walk_opts_init(&wopts);
    cli_walk_filters(a, &wopts);
    wopts.on_error = on_skip;
    s = patina_walk(&files, &nfiles, (const char *const *)a->operands + 1, a->noperands - 1, &wopts, &wstats);
    if (s != PATINA_OK) {
        cli_status_error("index", s);
        rc = EXIT_ERROR;
        goto out;
    }
    if (wstats.skipped) rc = EXIT_PARTIAL;
    images = calloc(nfiles + 1, sizeof *images);
    lres = calloc(nfiles + 1, sizeof *lres);
    sts = calloc(nfiles + 1, sizeof *sts);
    for (t = 0; t < nt; t++) desc[t] = malloc((nfiles + 1) * bytes[t]);
    for (t = 0; t < nt; t++)
        if (!desc[t]) images = NULL;
    if (!images || !lres || !sts) {
        cli_error("index", "out of memory for %zu files", nfiles);
        rc = EXIT_ERROR;
        goto out;
    }
    patina_load_opts_init(&lopts);
    lopts.strict = (int)cli_get(a, "strict")->i;
    lopts.apply_orientation = (int)cli_get(a, "exif-orientation")->i;
    lopts.batch_memory = cli_get(a, "batch-memory")->bytes;
    while (done < nfiles) {
        size_t taken = 0, nimg = 0;
        size_t *slot = NULL;
        int *bad = NULL;
        if ((s = patina_load_files(ctx, images, lres, &taken, (const char *const *)files + done, nfiles - done,
                                   &lopts)) != PATINA_OK) {
            cli_status_error("index", s);
            rc = EXIT_ERROR;
            goto out;
        }
        slot = calloc(taken + 1, sizeof *slot);
        bad = calloc(taken + 1, sizeof *bad);
        if (!slot || !bad) {
            free(slot);
            free(bad);
            cli_error("index", "out of memory");
            rc = EXIT_ERROR;
            goto out;
        }
        for (i = 0; i < taken; i++) {
            if (lres[i].status != PATINA_OK) {
                cli_error("index", "%s", lres[i].error);
                rc = EXIT_PARTIAL;
                continue;
            }
            if (lres[i].report.warnings) cli_error("index", "%s", lres[i].report.warning);
            images[nimg] = images[i];
            slot[nimg++] = i;
        }
        for (t = 0; t < nt && nimg; t++) {
            s = patina_extract_batch(ctx, ex[t], device, desc[t], images, nimg, sts);
            if (s != PATINA_OK) {
                cli_status_error("index", s);
                rc = EXIT_ERROR;
                break;
            }
            for (i = 0; i < nimg; i++)
                if (sts[i] != PATINA_OK && !bad[i]) {
                    char msg[PATINA_ERROR_MAX];
                    cli_extract_error(msg, sizeof msg, ctx, ex[t], &images[i], files[done + slot[i]], sts[i]);
                    cli_error("index", "%s", msg);
                    bad[i] = 1;
                    rc = EXIT_PARTIAL;
                }
        }
        for (i = 0; i < nimg && rc != EXIT_ERROR; i++) {
            const char *path = files[done + slot[i]];
            patina_insert_t it;
            const void *d[CLU_TABLES_MAX];
            char *key;
            if (bad[i]) continue;
            memset(&it, 0, sizeof it);
            if (file_facts(path, &it) != 0 || !(key = file_key(root, path))) {
                cli_error("index", "'%s': cannot read it again", path);
                rc = EXIT_PARTIAL;
                continue;
            }
            it.key = key;
            it.width = images[i].width;
            it.height = images[i].height;
            for (t = 0; t < nt; t++) d[t] = desc[t] + i * bytes[t];
            s = clu_writer_put(w, &it, specs, d, bytes, nt, NULL);
            free(key);
            if (s != PATINA_OK) {
                cli_error("index", "'%s': %s", path, clu_last_error());
                rc = EXIT_ERROR;
                break;
            }
            written++;
        }
        for (i = 0; i < nimg; i++) patina_image_release(&images[i]);
        free(slot);
        free(bad);
        done += taken;
        if (rc == EXIT_ERROR) break;
    }
    if (!quiet)
        fprintf(stderr, "index: %zu image%s written to cluster collection %s (%u partitions, table%s", written,
                cli_plural(written), coll, cfg->partitions, nt == 1 ? "" : "s");
    for (t = 0; t < nt && !quiet; t++) fprintf(stderr, " %s", specs[t]);
    if (!quiet) fprintf(stderr, ")\n");
out:
    for (i = 0; i < nfiles; i++) free(files[i]);
    free(files);
    free(images);
    free(lres);
    free(sts);
    for (t = 0; t < CLU_TABLES_MAX; t++) {
        free(desc[t]);
        patina_extractor_free(ex[t]);
    }
    clu_writer_free(w);
    patina_context_free(ctx);
    clu_session_close(ss);
    return rc;
}
