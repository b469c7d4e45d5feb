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
    o->decoder = PATINA_JPEG_AUTO;
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

patina_status clu_ingest_run(clu_ingest_t *g, const clu_ingest_item_t *items, size_t n, clu_ingest_result_t *res)
{
    patina_input_t in[CLU_INGEST_MAX];
    patina_extract_result_t *xres = NULL;
    patina_index_opts_t io;
    patina_status s = PATINA_OK;
    unsigned char *desc[CLU_TABLES_MAX] = {0};
    const patina_extractor_t *ex[CLU_TABLES_MAX];
    size_t done = 0, i, t;
    if (n > CLU_INGEST_MAX) return clu_fail(PATINA_E_INVALID, "cluster: %zu items in one call (at most %d)", n, CLU_INGEST_MAX);
    memset(res, 0, n * sizeof *res);
    xres = calloc(n ? n : 1, sizeof *xres);
    for (t = 0; t < g->nt; t++) {
        ex[t] = g->ex[t];
        if (!(desc[t] = malloc((n ? n : 1) * g->bytes[t]))) xres = (free(xres), NULL);
    }
    if (!xres) {
        for (t = 0; t < g->nt; t++) free(desc[t]);
        return clu_fail(PATINA_E_NOMEM, "cluster: out of memory for %zu images", n);
    }
    /* Read, decoded and described by the library, with the indexing
     * pipeline's decoder choice (on a GPU run the images stay there). */
    patina_index_opts_init(&io);
    io.device = g->o.device;
    io.jpeg_decoder = g->o.decoder;
    io.strict = g->o.strict;
    io.apply_orientation = g->o.apply_orientation;
    io.batch_memory = g->o.batch_memory;
    for (i = 0; i < n; i++) {
        memset(&in[i], 0, sizeof in[i]);
        in[i].path = items[i].path;
        in[i].data = items[i].data;
        in[i].size = items[i].size;
        in[i].name = items[i].name;
    }
    while (done < n && s == PATINA_OK) {
        size_t taken = 0;
        s = g->nt ? patina_extract_files(g->ctx, ex, g->nt, (void *const *)desc, xres, &taken, in + done, n - done, &io)
                  : clu_fail(PATINA_E_INVALID, "cluster: no table to extract");
        if (s != PATINA_OK) { /* the device or memory, not a file: every item left may be tried again */
            s = clu_fail_lib(s, "cluster: extracting %s", g->nt ? g->specs[0] : "nothing");
            for (i = done; i < n; i++) set_error(&res[i], s, 1, "'%s': not tried (%s)", items[i].name, clu_last_error());
            break;
        }
        for (i = 0; i < taken && s == PATINA_OK; i++) {
            const clu_ingest_item_t *it = &items[done + i];
            clu_ingest_result_t *r = &res[done + i];
            patina_insert_t ins;
            const void *d[CLU_TABLES_MAX];
            patina_status ws;
            if (xres[i].report.warnings) snprintf(r->warning, sizeof r->warning, "%s", xres[i].report.warning);
            if (xres[i].status != PATINA_OK) {
                set_error(r, xres[i].status, 0, "%s", xres[i].error);
                continue;
            }
            memset(&ins, 0, sizeof ins);
            if (it->path) {
                if (file_facts(it->path, &ins) != 0) {
                    set_error(r, PATINA_E_IO, 0, "'%s': cannot read it again", it->name);
                    continue;
                }
            } else {
                patina_sha256(ins.sha256, it->data, it->size);
                ins.size = it->size;
                ins.mtime = it->mtime;
            }
            ins.key = it->key;
            ins.width = xres[i].width;
            ins.height = xres[i].height;
            for (t = 0; t < g->nt; t++) d[t] = desc[t] + i * g->bytes[t];
            ws = clu_writer_put(g->w, &ins, g->specs, d, g->bytes, g->nt, &r->id);
            if (ws != PATINA_OK) /* the store, not the file: worth another try */
                set_error(r, ws, 1, "'%s': %s", it->name, clu_last_error());
        }
        done += taken;
    }
    free(xres);
    for (t = 0; t < g->nt; t++) free(desc[t]);
    return s;
}
