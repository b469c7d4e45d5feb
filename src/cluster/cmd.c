/* The command line's cluster entry points: `patina cluster create|status`,
 * `patina shard` and `patina index --cluster` (search and identify call
 * the session and front directly from their own files). */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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
    {
        clu_retry_t r;
        clu_retry_init(&r, CLU_START_WAIT_MS);
        while ((s = clu_members_read(c, &cfg, &m, &n)) != PATINA_OK && clu_retry(&r, s)) {}
        if (s != PATINA_OK) return fail("cluster", s);
    }
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
            json_object_set_new(mo, "leaving", json_boolean(m[i].leaving));
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
            printf("  %-24s device %-5s capacity %-4g partitions %u (%u ready)  %llu bytes  GPU memory %llu%s\n",
                   m[i].name, m[i].device, m[i].capacity, h, r, (unsigned long long)m[i].bytes,
                   (unsigned long long)m[i].gpu_mem, m[i].leaving ? "  leaving (handing over)" : "");
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

static void worker_opts(const cli_args_t *a, clu_worker_opts_t *w)
{
    clu_worker_opts_init(w);
    if (cli_get(a, "root")->given) w->root = cli_get(a, "root")->text;
    if (cli_get(a, "gpus")->given) w->gpus = cli_get(a, "gpus")->text;
    if (cli_get(a, "jobs")->given) w->threads = (int)cli_get(a, "jobs")->i;
    if (cli_get(a, "work-batch")->given) w->batch = (int)cli_get(a, "work-batch")->i;
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
    o.drain_timeout_s = (int)cli_get(a, "drain-timeout")->i;
    if (cli_get(a, "test-stall-reassign")->given) o.test_stall_reassign_s = (int)cli_get(a, "test-stall-reassign")->i;
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
    o.work = !cli_get(a, "no-work")->i;
    worker_opts(a, &o.work_opts);
    o.work_opts.name = o.name;
    o.work_opts.device = o.device;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    s = clu_shard_run(cli_get(a, "cluster")->text, a->operands[0], &o, &shard_stop);
    if (s != PATINA_OK) return fail("shard", s) == EXIT_USAGE ? EXIT_USAGE : EXIT_ERROR;
    return EXIT_OK;
}

/* ----------------------------------------------------------------- worker */

int clu_cli_worker(const cli_args_t *a)
{
    clu_worker_opts_t o;
    struct sigaction sa;
    struct stat st;
    patina_status s;
    worker_opts(a, &o);
    if (cli_get(a, "name")->given) o.name = cli_get(a, "name")->text;
    if (cli_get(a, "max-pixels")->given) o.max_pixels = (uint64_t)cli_get(a, "max-pixels")->i;
    if (patina_device_parse(&o.device, cli_get(a, "device")->text) != PATINA_OK) return EXIT_USAGE;
    if (o.name && !clu_name_ok(o.name)) {
        cli_error("worker", "--name '%s' is not [A-Za-z0-9_-]{1,%d}", o.name, CLU_NAME_MAX);
        return EXIT_USAGE;
    }
    if (stat(o.root, &st) != 0 || !S_ISDIR(st.st_mode)) {
        cli_error("worker", "--root '%s' is not a directory", o.root);
        return EXIT_USAGE;
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    s = clu_worker_run(cli_get(a, "cluster")->text, a->operands[0], &o, &shard_stop);
    if (s != PATINA_OK) return fail("worker", s) == EXIT_USAGE ? EXIT_USAGE : EXIT_ERROR;
    return EXIT_OK;
}

/* ------------------------------------------------------------ index --cluster */

static int clu_cli_distribute(const cli_args_t *a, const char *root);

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

/* ------------------------------------------------ index --cluster --distribute */

static void print_tables(const clu_ingest_t *g)
{
    const char *specs[CLU_TABLES_MAX];
    size_t nt = clu_ingest_tables(g, specs), t;
    fprintf(stderr, "table%s", nt == 1 ? "" : "s");
    for (t = 0; t < nt; t++) fprintf(stderr, " %s", specs[t]);
}


typedef struct job {
    size_t n, ndone, written, failed, redelivered, nworkers;
    uint8_t *done;          /* (n) the file's first result came */
    uint64_t *seq;          /* (n) its item's stream sequence (0: not queued) */
    char **files;           /* borrowed */
    char workers[64][CLU_NAME_MAX + 1];
    int tty, quiet;
} job_t;

static void job_line_clear(const job_t *j)
{
    if (j->tty && !j->quiet) fputs("\r\033[K", stderr);
}

static void job_result(job_t *j, const clu_work_result_t *r, const char *jobid)
{
    size_t w;
    if (strcmp(r->job, jobid) || r->index >= j->n || j->done[r->index]) return; /* a repeat: counted once */
    j->done[r->index] = 1;
    j->ndone++;
    if (r->delivered > 1) j->redelivered++;
    for (w = 0; w < j->nworkers && strcmp(j->workers[w], r->worker); w++) {}
    if (w == j->nworkers && w < 64) snprintf(j->workers[j->nworkers++], CLU_NAME_MAX + 1, "%s", r->worker);
    if (r->warning[0]) {
        job_line_clear(j);
        cli_error("index", "%s", r->warning);
    }
    if (r->status == PATINA_OK) {
        j->written++;
        return;
    }
    j->failed++;
    job_line_clear(j);
    cli_error("index", "%s (worker %s)", r->message[0] ? r->message : patina_status_str(r->status), r->worker);
}

/* JetStream gave up on an item (MaxDeliver deliveries, none acked): its file
 * failed; the message is deleted from the work stream. */
static void job_advisory(job_t *j, clu_conn_t *c, const clu_work_names_t *nm, const char *data, int n)
{
    json_t *o = json_loadb(data, (size_t)(n > 0 ? n : 0), 0, NULL);
    uint64_t seq = o ? (uint64_t)json_integer_value(json_object_get(o, "stream_seq")) : 0;
    long long deliveries = o ? (long long)json_integer_value(json_object_get(o, "deliveries")) : 0;
    size_t lo = 0, hi = j->n;
    json_decref(o);
    while (lo < hi) { /* seq[] increases with the index (published in order; 0 = not queued, done) */
        size_t mid = lo + (hi - lo) / 2;
        if (j->seq[mid] && j->seq[mid] < seq) lo = mid + 1;
        else if (!j->seq[mid]) lo = mid + 1;
        else hi = mid;
    }
    if (!seq || lo >= j->n || j->seq[lo] != seq || j->done[lo]) return;
    j->done[lo] = 1;
    j->ndone++;
    j->failed++;
    job_line_clear(j);
    cli_error("index", "'%s': given up after %lld deliveries: no worker finished it (each died or could not write "
                       "it; the workers' logs say why)", j->files[lo], deliveries);
    js_DeleteMsg(c->js, nm->stream, seq, NULL, NULL);
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void job_progress(const job_t *j, double t0)
{
    double el = mono_s() - t0;
    if (j->quiet) return;
    if (j->tty) {
        int width = 30, fill = j->n ? (int)((double)width * (double)j->ndone / (double)j->n) : width;
        fprintf(stderr, "\r\033[K[%.*s%*s] %zu/%zu %3.0f%% %.1f img/s, %zu worker%s", fill,
                "##############################", width - fill, "", j->ndone, j->n,
                j->n ? 100.0 * (double)j->ndone / (double)j->n : 100.0, el > 0 ? (double)j->ndone / el : 0,
                j->nworkers, cli_plural(j->nworkers));
    } else {
        fprintf(stderr, "patina index: %zu/%zu files done (%zu failed), %zu worker%s, %.1f s\n", j->ndone, j->n,
                j->failed, j->nworkers, cli_plural(j->nworkers), el);
    }
}

static void job_id(char out[17])
{
    static const char hex[] = "0123456789abcdef";
    uint8_t r[8] = {0};
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f ? fread(r, 1, sizeof r, f) : 0;
    int i;
    if (f) fclose(f);
    if (got != sizeof r) { /* no /dev/urandom: time and pid */
        uint64_t v = (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid() ^ (uint64_t)(mono_s() * 1e9);
        memcpy(r, &v, 8);
    }
    for (i = 0; i < 8; i++) {
        out[2 * i] = hex[r[i] >> 4];
        out[2 * i + 1] = hex[r[i] & 15];
    }
    out[16] = '\0';
}

static int clu_cli_distribute(const cli_args_t *a, const char *root)
{
    const char *coll = a->operands[0];
    const cli_value_t *fam = cli_get(a, "family");
    clu_session_t *ss = NULL;
    clu_ingest_t *g = NULL;
    clu_ingest_opts_t io;
    clu_conn_t *c;
    const clu_config_t *cfg;
    clu_front_opts_t fo;
    clu_work_names_t nm;
    natsSubscription *rsub = NULL, *asub = NULL;
    jsSubOptions so;
    jsErrCode jerr = 0;
    patina_walk_opts_t wopts;
    patina_walk_stats_t wstats;
    job_t j;
    char jobid[17], subj[256], **files = NULL;
    size_t nfiles = 0, i, queued = 0, sent_bytes = 0;
    int64_t ack_wait = 0, limit;
    double t0 = mono_s(), last_progress, last_result;
    patina_status s;
    natsStatus ns;
    int rc = EXIT_OK, send = (int)cli_get(a, "send-bytes")->i;

    memset(&j, 0, sizeof j);
    j.quiet = (int)cli_get(a, "quiet")->i;
    j.tty = isatty(2);
    clu_front_opts_init(&fo);
    if ((s = clu_session_open(&ss, cli_get(a, "cluster")->text, coll, &fo)) != PATINA_OK) return fail("index", s);
    cfg = clu_session_config(ss);
    c = clu_session_conn(ss);
    clu_work_names(&nm, coll);
    clu_ingest_opts_init(&io); /* the tables -f names: checked here, extracted by the workers */
    io.family = fam->given ? fam->text : NULL;
    if ((s = clu_ingest_new(&g, NULL, NULL, cfg, &io)) != PATINA_OK) {
        rc = fail("index", s);
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
    j.n = nfiles;
    j.files = files;
    j.done = calloc(nfiles + 1, 1);
    j.seq = calloc(nfiles + 1, sizeof *j.seq);
    if (!j.done || !j.seq) {
        cli_error("index", "out of memory for %zu files", nfiles);
        rc = EXIT_ERROR;
        goto out;
    }
    if (cli_get(a, "ack-wait")->given) ack_wait = (int64_t)(cli_get(a, "ack-wait")->num * 1000.0);
    if ((s = clu_work_setup(c, cfg, ack_wait, &ack_wait)) != PATINA_OK) {
        rc = fail("index", s);
        goto out;
    }
    job_id(jobid);
    clu_work_job_subject(subj, sizeof subj, coll, jobid);
    jsSubOptions_Init(&so); /* the results from the stream's start: none is missed, even across a reconnection */
    so.Ordered = true;
    so.Config.DeliverPolicy = js_DeliverAll;
    ns = js_SubscribeSync(&rsub, c->js, subj, NULL, &so, &jerr);
    if (ns == NATS_OK) ns = natsConnection_SubscribeSync(&asub, c->nc, nm.advisory);
    if (ns != NATS_OK) {
        rc = fail("index", clu_nats_fail(ns, "index: subscribing to the results on %s", subj));
        goto out;
    }
    /* a message's bytes stay well under the server's max_payload: key, path and the rest fit in 16 KiB */
    limit = natsConnection_GetMaxPayload(c->nc) - 16384;
    if (!j.quiet)
        fprintf(stderr, "patina index: job %s: %zu file%s to the workers of %s (stream %s%s)\n", jobid, nfiles,
                cli_plural(nfiles), coll, nm.stream, send ? ", bytes of files up to the size limit" : "");
    last_progress = last_result = mono_s();
    for (i = 0; i < nfiles; i++) {
        clu_work_item_t it;
        clu_buf_t b = {0};
        jsPubAck *pa = NULL;
        void *data = NULL;
        size_t size = 0;
        char *key = file_key(root, files[i]);
        struct stat st;
        natsMsg *m = NULL;
        memset(&it, 0, sizeof it);
        it.job = jobid;
        it.index = i;
        it.key = key ? key : files[i];
        it.path = "";
        it.family = fam->given ? fam->text : "";
        it.strict = (int)cli_get(a, "strict")->i;
        it.apply_orientation = (int)cli_get(a, "exif-orientation")->i;
        if (send && stat(files[i], &st) == 0 && st.st_size <= limit &&
            patina_file_read(&data, &size, files[i], NULL) == PATINA_OK && (int64_t)size <= limit) {
            it.has_data = 1;
            it.data = data;
            it.size = size;
            it.mtime = (int64_t)st.st_mtime;
            sent_bytes++;
        } else if (key && key[0] != '/') {
            it.path = key;
            free(data);
            data = NULL;
        } else {
            job_line_clear(&j);
            cli_error("index", "'%s': not below --root %s: a worker reads a file by its path below its own --root%s",
                      files[i], root, send ? " (and it is over the size limit of --send-bytes)" : " (or --send-bytes)");
            j.done[i] = 1;
            j.ndone++;
            j.failed++;
            free(key);
            free(data);
            continue;
        }
        s = clu_work_item_encode(&b, &it);
        if (s == PATINA_OK) {
            ns = js_Publish(&pa, c->js, nm.subject, b.p, (int)b.n, NULL, &jerr);
            if (ns != NATS_OK) s = clu_nats_fail(ns, "index: putting '%s' on stream %s", files[i], nm.stream);
        }
        clu_buf_release(&b);
        free(key);
        free(data);
        if (s != PATINA_OK) {
            size_t k;
            job_line_clear(&j);
            cli_error("index", "%s; %zu file%s not queued", clu_last_error(), nfiles - i, cli_plural(nfiles - i));
            for (k = i; k < nfiles; k++)
                if (!j.done[k]) {
                    j.done[k] = 1;
                    j.ndone++;
                    j.failed++;
                }
            rc = EXIT_ERROR;
            break;
        }
        j.seq[i] = pa->Sequence;
        jsPubAck_Destroy(pa);
        queued++;
        while (natsSubscription_NextMsg(&m, rsub, 0) == NATS_OK) { /* results already in */
            clu_work_result_t r;
            if (clu_work_result_decode(&r, natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m)) == PATINA_OK)
                job_result(&j, &r, jobid);
            natsMsg_Destroy(m);
            last_result = mono_s();
        }
    }
    while (j.ndone < j.n) {
        natsMsg *m = NULL;
        double now;
        ns = natsSubscription_NextMsg(&m, rsub, 250);
        if (ns == NATS_OK) {
            clu_work_result_t r;
            if (clu_work_result_decode(&r, natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m)) == PATINA_OK)
                job_result(&j, &r, jobid);
            natsMsg_Destroy(m);
            last_result = mono_s();
        }
        while (natsSubscription_NextMsg(&m, asub, 0) == NATS_OK) {
            job_advisory(&j, c, &nm, natsMsg_GetData(m), natsMsg_GetDataLength(m));
            natsMsg_Destroy(m);
        }
        now = mono_s();
        if (now - last_progress >= (j.tty ? 0.25 : 5.0)) {
            job_progress(&j, t0);
            last_progress = now;
        }
        if (now - last_result >= 30.0) {
            job_line_clear(&j);
            cli_error("index", "job %s: no result for 30 s, %zu file%s waiting: is a worker running (patina worker %s "
                               "--cluster URL, or patina shard)?", jobid, j.n - j.ndone, cli_plural(j.n - j.ndone), coll);
            last_result = now;
        }
    }
    job_line_clear(&j);
    if (!j.quiet) {
        fprintf(stderr, "index: job %s: %zu written, %zu failed of %zu file%s to cluster collection %s by %zu "
                        "worker%s (", jobid, j.written, j.failed, nfiles, cli_plural(nfiles), coll, j.nworkers,
                cli_plural(j.nworkers));
        print_tables(g);
        fprintf(stderr, "); %zu sent as bytes, %zu delivered more than once (AckWait %lld ms); %.2f s\n", sent_bytes,
                j.redelivered, (long long)ack_wait, mono_s() - t0);
    }
    if (j.failed && rc == EXIT_OK) rc = EXIT_PARTIAL;
    (void)queued;
out:
    if (rsub) natsSubscription_Destroy(rsub);
    if (asub) natsSubscription_Destroy(asub);
    for (i = 0; i < nfiles; i++) free(files[i]);
    free(files);
    free(j.done);
    free(j.seq);
    clu_ingest_free(g);
    clu_session_close(ss);
    return rc;
}

/* The chosen tables of the collection ("-f"), with a message when none. */
static void ingest_opts(const cli_args_t *a, clu_ingest_opts_t *io, patina_device device)
{
    clu_ingest_opts_init(io);
    io->family = cli_get(a, "family")->given ? cli_get(a, "family")->text : NULL;
    io->device = device;
    io->strict = (int)cli_get(a, "strict")->i;
    io->apply_orientation = (int)cli_get(a, "exif-orientation")->i;
    io->batch_memory = cli_get(a, "batch-memory")->bytes;
    if (cli_get(a, "decoder")->set) (void)patina_jpeg_decoder_parse(&io->decoder, cli_get(a, "decoder")->text);
}

int clu_cli_index(const cli_args_t *a)
{
    const cli_value_t *rootv = cli_get(a, "root");
    const char *coll = a->operands[0];
    clu_session_t *ss = NULL;
    clu_writer_t *w = NULL;
    clu_ingest_t *g = NULL;
    patina_context_t *ctx = NULL;
    clu_ingest_item_t *items = NULL;
    clu_ingest_result_t *res = NULL;
    clu_ingest_opts_t io;
    size_t i, nfiles = 0, done = 0, written = 0;
    char **files = NULL, **keys = NULL, root[PATH_MAX];
    patina_walk_opts_t wopts;
    patina_walk_stats_t wstats;
    patina_status s;
    patina_device device;
    const clu_config_t *cfg;
    clu_front_opts_t fo;
    int rc = EXIT_OK, quiet = (int)cli_get(a, "quiet")->i;

    if (patina_device_parse(&device, cli_get(a, "device")->text) != PATINA_OK) return EXIT_USAGE;
    if (!realpath(rootv->given ? rootv->text : ".", root)) {
        cli_error("index", "--root '%s' is not a directory", rootv->given ? rootv->text : ".");
        return EXIT_USAGE;
    }
    if (cli_get(a, "distribute")->i) return clu_cli_distribute(a, root);
    if (cli_get(a, "send-bytes")->i) {
        cli_error("index", "--send-bytes goes with --distribute");
        return EXIT_USAGE;
    }
    clu_front_opts_init(&fo);
    if ((s = clu_session_open(&ss, cli_get(a, "cluster")->text, coll, &fo)) != PATINA_OK) return fail("index", s);
    cfg = clu_session_config(ss);
    if ((s = clu_writer_new(&w, clu_session_conn(ss), cfg, clu_session_front(ss))) != PATINA_OK) {
        rc = fail("index", s);
        goto out;
    }
    if (cli_context(&ctx, a) != 0) {
        rc = EXIT_ERROR;
        goto out;
    }
    ingest_opts(a, &io, device);
    if ((s = clu_ingest_new(&g, ctx, w, cfg, &io)) != PATINA_OK) {
        rc = fail("index", s);
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
    items = calloc(CLU_INGEST_MAX, sizeof *items);
    res = calloc(CLU_INGEST_MAX, sizeof *res);
    keys = calloc(CLU_INGEST_MAX, sizeof *keys);
    if (!items || !res || !keys) {
        cli_error("index", "out of memory");
        rc = EXIT_ERROR;
        goto out;
    }
    while (done < nfiles && rc != EXIT_ERROR) {
        size_t n = nfiles - done < CLU_INGEST_MAX ? nfiles - done : CLU_INGEST_MAX;
        for (i = 0; i < n; i++) {
            keys[i] = file_key(root, files[done + i]);
            items[i] = (clu_ingest_item_t){.name = files[done + i], .path = files[done + i],
                                           .key = keys[i] ? keys[i] : files[done + i]};
        }
        s = clu_ingest_run(g, items, n, res);
        for (i = 0; i < n; i++) {
            if (res[i].warning[0]) cli_error("index", "%s", res[i].warning);
            if (res[i].status == PATINA_OK) {
                written++;
            } else if (res[i].retry) { /* the store or the device: stop here, as before */
                if (rc != EXIT_ERROR) cli_error("index", "%s", res[i].error);
                rc = EXIT_ERROR;
            } else {
                cli_error("index", "%s", res[i].error);
                if (rc == EXIT_OK) rc = EXIT_PARTIAL;
            }
            free(keys[i]);
            keys[i] = NULL;
        }
        if (s != PATINA_OK) rc = EXIT_ERROR;
        done += n;
    }
    if (!quiet) {
        fprintf(stderr, "index: %zu image%s written to cluster collection %s (%u partitions, ", written,
                cli_plural(written), coll, cfg->partitions);
        print_tables(g);
        fprintf(stderr, ")\n");
    }
out:
    for (i = 0; i < nfiles; i++) free(files[i]);
    free(files);
    free(items);
    free(res);
    free(keys);
    clu_ingest_free(g);
    clu_writer_free(w);
    patina_context_free(ctx);
    clu_session_close(ss);
    return rc;
}
