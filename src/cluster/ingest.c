/* Indexing into a cluster collection: files (or their bytes) decoded,
 * extracted with the collection's tables on a context's device and written
 * through a clu_writer (so each write is confirmed as every write is).
 * `patina index --cluster` runs it on the files it walks; the workers of
 * bulk indexing (work.c: `patina worker`, `patina shard`) on the items they
 * take from the work queue. It does not walk folders, print or retry. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cluster/cluster.h"

struct clu_ingest {
    patina_context_t *ctx;            /* borrowed */
    clu_writer_t *w;                  /* borrowed */
    clu_ingest_opts_t o;
    size_t nt;
    patina_extractor_t *ex[CLU_TABLES_MAX];
    const char *specs[CLU_TABLES_MAX]; /* the configuration's canonical specs */
    size_t bytes[CLU_TABLES_MAX];
    clu_config_t cfg;
};

void clu_ingest_opts_init(clu_ingest_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->device = PATINA_DEVICE_AUTO;
}

patina_status clu_ingest_new(clu_ingest_t **out, patina_context_t *ctx, clu_writer_t *w, const clu_config_t *cfg,
                             const clu_ingest_opts_t *o)
{
    clu_ingest_t *g = calloc(1, sizeof *g);
    const char *fam = o->family && *o->family ? o->family : NULL;
    size_t t;
    *out = NULL;
    if (!g) return clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
    g->ctx = ctx;
    g->w = w;
    g->o = *o;
    g->o.family = NULL; /* borrowed by the caller only for this call */
    g->cfg = *cfg;
    for (t = 0; t < cfg->ntables; t++) {
        patina_extractor_t *e = NULL;
        int take = !fam;
        if (patina_extractor_new(&e, cfg->tables[t]) != PATINA_OK) continue;
        if (fam) { /* -f SPEC names one table; -f FAMILY (no options) the tables of that family */
            patina_extractor_t *f = NULL;
            if (patina_extractor_new(&f, fam) == PATINA_OK)
                take = !strcmp(patina_extractor_spec(f), cfg->tables[t]) ||
                       (!strchr(fam, ':') && !strcmp(fam, patina_extractor_family(e)));
            patina_extractor_free(f);
        }
        if (!take) {
            patina_extractor_free(e);
            continue;
        }
        g->ex[g->nt] = e;
        g->specs[g->nt] = g->cfg.tables[t];
        g->bytes[g->nt] = patina_extractor_bytes(e);
        g->nt++;
    }
    if (!g->nt) {
        clu_ingest_free(g);
        return clu_fail(PATINA_E_INVALID, "cluster collection %s has no table '%s' (patina cluster create %s -f ...)",
                        cfg->name, fam ? fam : "", cfg->name);
    }
    *out = g;
    return PATINA_OK;
}

void clu_ingest_free(clu_ingest_t *g)
{
    size_t t;
    if (!g) return;
    for (t = 0; t < g->nt; t++) patina_extractor_free(g->ex[t]);
    free(g);
}

size_t clu_ingest_tables(const clu_ingest_t *g, const char **specs)
{
    size_t t;
    for (t = 0; specs && t < g->nt; t++) specs[t] = g->specs[t];
    return g->nt;
}

/* Size, SHA-256 and mtime of a file's content (read again: what is written
 * is what was read when the record is made). */
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

/* The reason image img failed in patina_extract_batch with status st: the
 * batch ran on worker threads, whose messages are not this thread's, so the
 * image is extracted again alone on the CPU, on this thread. */
static void extract_error(char *buf, size_t size, clu_ingest_t *g, size_t t, const patina_image_t *img,
                          const char *name, patina_status st)
{
    unsigned char *tmp = malloc(g->bytes[t] + 1);
    patina_status one = PATINA_OK;
    patina_clear_error();
    if (tmp && patina_extract_batch(g->ctx, g->ex[t], PATINA_DEVICE_CPU, tmp, img, 1, &one) == PATINA_OK &&
        one != PATINA_OK && *patina_last_error())
        snprintf(buf, size, "'%s': %s failed: %s", name, patina_extractor_family(g->ex[t]), patina_last_error());
    else
        snprintf(buf, size, "'%s': %s failed (%s)", name, patina_extractor_family(g->ex[t]), patina_status_str(st));
    free(tmp);
}

static void set_error(clu_ingest_result_t *r, patina_status s, int retry, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void set_error(clu_ingest_result_t *r, patina_status s, int retry, const char *fmt, ...)
{
    va_list ap;
    r->status = s;
    r->retry = retry;
    va_start(ap, fmt);
    vsnprintf(r->error, sizeof r->error, fmt, ap);
    va_end(ap);
}

/* Loads items[0 .. n) (a prefix: *taken), all path items or all data items. */
static patina_status load(clu_ingest_t *g, const clu_ingest_item_t *items, size_t n, patina_image_t *images,
                          patina_load_result_t *lres, size_t *taken)
{
    size_t m, i;
    if (items[0].path) {
        const char *paths[CLU_INGEST_MAX];
        patina_load_opts_t lo;
        for (m = 0; m < n && items[m].path; m++) paths[m] = items[m].path;
        patina_load_opts_init(&lo);
        lo.strict = g->o.strict;
        lo.apply_orientation = g->o.apply_orientation;
        if (g->o.batch_memory) lo.batch_memory = g->o.batch_memory;
        if (patina_load_files(g->ctx, images, lres, taken, paths, m, &lo) != PATINA_OK)
            return clu_fail_lib(PATINA_E_INVALID, "cluster: loading files");
        return PATINA_OK;
    }
    for (m = 0; m < n && !items[m].path; m++) {}
    for (i = 0; i < m; i++) { /* the bytes of a message: decoded on this thread */
        patina_decode_opts_t d;
        patina_decode_opts_init(&d);
        d.limits = *patina_context_limits(g->ctx);
        d.strict = g->o.strict;
        d.apply_orientation = g->o.apply_orientation;
        memset(&lres[i], 0, sizeof lres[i]);
        patina_clear_error();
        lres[i].status = patina_image_decode_with(&images[i], &lres[i].report, items[i].data, items[i].size, &d,
                                                  items[i].name);
        if (lres[i].status != PATINA_OK)
            snprintf(lres[i].error, sizeof lres[i].error, "%s",
                     *patina_last_error() ? patina_last_error() : patina_status_str(lres[i].status));
    }
    *taken = m;
    return PATINA_OK;
}

patina_status clu_ingest_run(clu_ingest_t *g, const clu_ingest_item_t *items, size_t n, clu_ingest_result_t *res)
{
    patina_image_t images[CLU_INGEST_MAX];
    patina_load_result_t *lres = NULL;
    patina_status sts[CLU_INGEST_MAX], s = PATINA_OK;
    unsigned char *desc[CLU_TABLES_MAX] = {0};
    size_t done = 0, i, t;
    if (n > CLU_INGEST_MAX) return clu_fail(PATINA_E_INVALID, "cluster: %zu items in one call (at most %d)", n, CLU_INGEST_MAX);
    memset(res, 0, n * sizeof *res);
    lres = calloc(n ? n : 1, sizeof *lres);
    for (t = 0; t < g->nt; t++)
        if (!(desc[t] = malloc((n ? n : 1) * g->bytes[t]))) lres = (free(lres), NULL);
    if (!lres) {
        for (t = 0; t < g->nt; t++) free(desc[t]);
        return clu_fail(PATINA_E_NOMEM, "cluster: out of memory for %zu images", n);
    }
    while (done < n && s == PATINA_OK) {
        size_t taken = 0, nimg = 0, slot[CLU_INGEST_MAX];
        int bad[CLU_INGEST_MAX] = {0};
        memset(images, 0, sizeof images);
        if ((s = load(g, items + done, n - done, images, lres, &taken)) != PATINA_OK) {
            for (i = done; i < n; i++) set_error(&res[i], s, 1, "'%s': not tried (%s)", items[i].name, clu_last_error());
            break;
        }
        for (i = 0; i < taken; i++) {
            clu_ingest_result_t *r = &res[done + i];
            if (lres[i].report.warnings) snprintf(r->warning, sizeof r->warning, "%s", lres[i].report.warning);
            if (lres[i].status != PATINA_OK) {
                set_error(r, lres[i].status, 0, "%s", lres[i].error);
                continue;
            }
            images[nimg] = images[i];
            slot[nimg++] = done + i;
        }
        for (t = 0; t < g->nt && nimg; t++) {
            s = patina_extract_batch(g->ctx, g->ex[t], g->o.device, desc[t], images, nimg, sts);
            if (s != PATINA_OK) { /* the device, not a file: every item of the batch may be tried again */
                s = clu_fail_lib(s, "cluster: extracting %s", g->specs[t]);
                break;
            }
            for (i = 0; i < nimg; i++)
                if (sts[i] != PATINA_OK && !bad[i]) {
                    clu_ingest_result_t *r = &res[slot[i]];
                    extract_error(r->error, sizeof r->error, g, t, &images[i], items[slot[i]].name, sts[i]);
                    r->status = sts[i];
                    bad[i] = 1;
                }
        }
        for (i = 0; i < nimg && s == PATINA_OK; i++) {
            const clu_ingest_item_t *it = &items[slot[i]];
            clu_ingest_result_t *r = &res[slot[i]];
            patina_insert_t in;
            const void *d[CLU_TABLES_MAX];
            patina_status ws;
            if (bad[i]) continue;
            memset(&in, 0, sizeof in);
            if (it->path) {
                if (file_facts(it->path, &in) != 0) {
                    set_error(r, PATINA_E_IO, 0, "'%s': cannot read it again", it->name);
                    continue;
                }
            } else {
                patina_sha256(in.sha256, it->data, it->size);
                in.size = it->size;
                in.mtime = it->mtime;
            }
            in.key = it->key;
            in.width = images[i].width;
            in.height = images[i].height;
            for (t = 0; t < g->nt; t++) d[t] = desc[t] + i * g->bytes[t];
            ws = clu_writer_put(g->w, &in, g->specs, d, g->bytes, g->nt, &r->id);
            if (ws != PATINA_OK) /* the store, not the file: worth another try */
                set_error(r, ws, 1, "'%s': %s", it->name, clu_last_error());
        }
        for (i = 0; i < nimg; i++) patina_image_release(&images[i]);
        if (s != PATINA_OK) { /* this batch and the rest: not done */
            for (i = 0; i < nimg; i++)
                if (!bad[i]) set_error(&res[slot[i]], s, 1, "'%s': %s", items[slot[i]].name, clu_last_error());
            for (i = done + taken; i < n; i++) set_error(&res[i], s, 1, "'%s': not tried (%s)", items[i].name, clu_last_error());
        }
        done += taken;
    }
    free(lres);
    for (t = 0; t < g->nt; t++) free(desc[t]);
    return s;
}
