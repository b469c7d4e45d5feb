/* The pivot tables' persistence (include/patina/pivots.h): save, load (also
 * from a read snapshot) and drop, as a collection's auxiliary blob named by
 * the family's spec; a loaded table is checked against the collection's
 * records.
 *
 * Not here: the table's building and updates (pivots.c), the searches
 * (pivots_search.c, pivots_gpu.c), the collection itself (src/store). */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/sqfd.h"
#include "core/context.h"
#include "core/internal.h"
#include "patina/pivots.h"
#include "search/pivots_internal.h"

/* ------------------------------------------------------------ persistence */

/* Blob "pivots:<spec>", host byte order (like the records):
 *   "PTNAPIV1", u32 version, u32 np, u64 n, u64 record bytes,
 *   np u64 pivot ids, np records, (np, np) f64 pivot distances,
 *   n (u64 id, u64 FNV-1a of the record), (n, np) f64 table. */
#define HDR_BYTES (8 + 4 + 4 + 8 + 8)

static patina_status blob_name(char *buf, size_t cap, const patina_extractor_t *ex)
{
    if ((size_t)snprintf(buf, cap, "pivots:%s", patina_extractor_spec(ex)) >= cap)
        return patina__fail(PATINA_E_LIMIT, "pivots: spec '%s' too long", patina_extractor_spec(ex));
    return PATINA_OK;
}

static size_t blob_size(size_t np, size_t n, size_t bytes)
{
    return HDR_BYTES + np * 8 + np * bytes + np * np * 8 + n * 16 + n * np * 8;
}

static patina_status pivot_save_unlocked(const patina_pivot_index_t *pi, patina_collection_t *c)
{
    char name[512];
    uint8_t *b, *p;
    size_t size;
    uint32_t v32;
    uint64_t v64;
    patina_status s;
    if (!pi || !c) return patina__fail(PATINA_E_INVALID, "pivots: null argument");
    PATINA_TRY(blob_name(name, sizeof name, pi->ex));
    size = blob_size(pi->np, pi->n, pi->bytes);
    if (!(b = malloc(size))) return patina__pivot_nomem("saving");
    p = b;
    memcpy(p, MAGIC, 8), p += 8;
    v32 = FMT_VERSION, memcpy(p, &v32, 4), p += 4;
    v32 = (uint32_t)pi->np, memcpy(p, &v32, 4), p += 4;
    v64 = pi->n, memcpy(p, &v64, 8), p += 8;
    v64 = pi->bytes, memcpy(p, &v64, 8), p += 8;
    memcpy(p, pi->pids, pi->np * 8), p += pi->np * 8;
    memcpy(p, pi->precs, pi->np * pi->bytes), p += pi->np * pi->bytes;
    memcpy(p, pi->pp, pi->np * pi->np * 8), p += pi->np * pi->np * 8;
    for (size_t r = 0; r < pi->n; r++) {
        v64 = patina__pivot_fnv64(pi->recs + r * pi->dim, pi->bytes);
        memcpy(p, &pi->ids[r], 8), p += 8;
        memcpy(p, &v64, 8), p += 8;
    }
    memcpy(p, pi->tab, pi->n * pi->np * 8);
    s = patina_collection_put_aux(c, name, b, size);
    free(b);
    return s;
}

patina_status patina_pivot_index_drop(patina_collection_t *c, const patina_extractor_t *ex)
{
    char name[512];
    if (!c || !ex) return patina__fail(PATINA_E_INVALID, "pivots: null argument");
    PATINA_TRY(blob_name(name, sizeof name, ex));
    return patina_collection_put_aux(c, name, NULL, 0);
}

static patina_status bad_blob(const char *name, const char *why)
{
    return patina__fail(PATINA_E_CORRUPT, "pivots: stored table '%s' is damaged: %s", name, why);
}

/* The index from a blob and the table's current rows (ids ascending). */
static patina_status from_blob(patina_pivot_index_t **out, patina_context_t *ctx, const patina_extractor_t *ex,
                               const char *name, const uint8_t *b, size_t size, const uint64_t *ids,
                               const uint8_t *descs, size_t n, size_t *refreshed)
{
    uint32_t ver, np32;
    uint64_t sn, sbytes;
    const uint8_t *rows, *stab;
    patina_pivot_index_t *pi;
    patina_pool_t *pool;
    patina_status s;
    size_t *todo = NULL, ntodo = 0, same_id = 0, dropped, i, j;
    int own, have_form = 0;
    if (size < HDR_BYTES || memcmp(b, MAGIC, 8) != 0) return bad_blob(name, "no header");
    memcpy(&ver, b + 8, 4);
    memcpy(&np32, b + 12, 4);
    memcpy(&sn, b + 16, 8);
    memcpy(&sbytes, b + 24, 8);
    if (ver != FMT_VERSION) return bad_blob(name, "unknown version");
    if (sbytes != patina_extractor_bytes(ex)) return bad_blob(name, "records of another size");
    if (np32 == 0 || np32 > PATINA_PIVOTS_MAX) return bad_blob(name, "pivot count out of range");
    if (sn > (size - HDR_BYTES) / 16 || size != blob_size(np32, (size_t)sn, (size_t)sbytes))
        return bad_blob(name, "wrong size");
    if (!(pi = patina__pivot_alloc_index(ex, np32, &s))) return s;
    {
        const uint8_t *p = b + HDR_BYTES;
        memcpy(pi->pids, p, pi->np * 8), p += pi->np * 8;
        memcpy(pi->precs, p, pi->np * pi->bytes), p += pi->np * pi->bytes;
        memcpy(pi->pp, p, pi->np * pi->np * 8), p += pi->np * pi->np * 8;
        rows = p;
        stab = p + sn * 16;
    }
    for (i = 0; i < pi->np; i++) {
        if (!sig_record_valid(pi->precs + i * pi->dim, pi->dim) ||
            (i && ((double)pi->precs[i * pi->dim + 2] != pi->alpha || (int)pi->precs[i * pi->dim + 3] != pi->form))) {
            patina_pivot_index_free(pi);
            return bad_blob(name, "a malformed pivot record");
        }
        if (i == 0) {
            pi->alpha = (double)pi->precs[2];
            pi->form = (int)pi->precs[3];
            have_form = 1;
        }
        patina__pivot_note_extent(pi, pi->precs + i * pi->dim);
        pi->pself[i] = sig_self(pi->precs + i * pi->dim);
    }
    if (pi->form == SIG_FORM_MINUS) {
        patina_pivot_index_free(pi);
        return bad_blob(name, "pivots of the minus form");
    }
    if ((s = patina__pivot_check_batch(pi, ids, (const float *)descs, n, &have_form)) != PATINA_OK ||
        (s = patina__pivot_reserve_rows(pi, n)) != PATINA_OK ||
        !(todo = malloc((n ? n : 1) * sizeof *todo))) {
        patina_pivot_index_free(pi);
        if (s != PATINA_OK) {
            if (s == PATINA_E_INVALID) patina__prefix_error("pivots: the collection's table");
            return s == PATINA_E_INVALID ? PATINA_E_CORRUPT : s;
        }
        return patina__pivot_nomem("loading");
    }
    /* match rows by id (both ascending) and record hash */
    for (i = 0, j = 0; i < n; i++) {
        const float *rec = (const float *)(descs + i * pi->bytes);
        uint64_t sid = 0, sh = 0;
        pi->ids[i] = ids[i];
        memcpy(pi->recs + i * pi->dim, rec, pi->bytes);
        patina__pivot_note_extent(pi, rec);
        while (j < sn) {
            memcpy(&sid, rows + j * 16, 8);
            if (sid >= ids[i]) break;
            j++;
        }
        if (j < sn && sid == ids[i]) {
            same_id++;
            memcpy(&sh, rows + j * 16 + 8, 8);
            if (sh == patina__pivot_fnv64(rec, pi->bytes)) {
                memcpy(pi->tab + i * pi->np, stab + j * pi->np * 8, pi->np * 8);
                continue;
            }
        }
        todo[ntodo++] = i;
    }
    pi->n = n;
    /* stored distances must be numbers >= 0 (rows to compute are set below) */
    for (i = 0, j = 0; i < n; i++) {
        if (j < ntodo && todo[j] == i) {
            j++;
            continue;
        }
        for (size_t p = 0; p < pi->np; p++)
            if (!(pi->tab[i * pi->np + p] >= 0.0)) {
                free(todo);
                patina_pivot_index_free(pi);
                return bad_blob(name, "a distance that is not a number >= 0");
            }
    }
    dropped = (size_t)sn - same_id; /* stored rows of images no longer in the table */
    {   /* every row's self term, then the table rows to compute */
        float *tmp = malloc((ntodo ? ntodo : 1) * pi->bytes);
        double *trow = malloc((ntodo ? ntodo : 1) * pi->np * sizeof *trow);
        double *tself = malloc((ntodo ? ntodo : 1) * sizeof *tself);
        if (!tmp || !trow || !tself || (s = patina__workers_begin(ctx, 0, &pool, &own)) != PATINA_OK) {
            free(tmp);
            free(trow);
            free(tself);
            free(todo);
            patina_pivot_index_free(pi);
            return s != PATINA_OK ? s : patina__pivot_nomem("loading");
        }
        patina__pivot_self_terms(pool, pi->recs, n, pi->dim, pi->self);
        for (i = 0; i < ntodo; i++) {
            memcpy(tmp + i * pi->dim, pi->recs + todo[i] * pi->dim, pi->bytes);
            tself[i] = pi->self[todo[i]];
        }
        if (ntodo) patina__pivot_table_rows(pool, pi, tmp, tself, ntodo, trow);
        patina__workers_end(ctx, pool, own);
        for (i = 0; i < ntodo; i++) memcpy(pi->tab + todo[i] * pi->np, trow + i * pi->np, pi->np * sizeof *trow);
        free(tmp);
        free(trow);
        free(tself);
    }
    free(todo);
    if (refreshed) *refreshed = ntodo + dropped;
    *out = pi;
    return PATINA_OK;
}

static patina_status load_common(patina_pivot_index_t **out, patina_context_t *ctx, const patina_extractor_t *ex,
                                 patina_collection_t *c, patina_snapshot_t *snap, size_t *refreshed)
{
    char name[512];
    void *blob = NULL;
    size_t size = 0, n = 0, bytes = 0;
    uint64_t *ids = NULL;
    uint8_t *descs = NULL;
    patina_snapshot_t *own = NULL;
    patina_status s;
    if (!out || (!c && !snap)) return patina__fail(PATINA_E_INVALID, "pivots: null argument");
    *out = NULL;
    if (refreshed) *refreshed = 0;
    PATINA_TRY(patina__pivot_check_extractor(ex));
    PATINA_TRY(blob_name(name, sizeof name, ex));
    if (!snap) {
        PATINA_TRY(patina_snapshot_new(&own, c));
        snap = own;
    }
    s = patina_snapshot_get_aux(snap, name, &blob, &size);
    if (s == PATINA_OK) {
        s = patina_snapshot_load(snap, patina_extractor_spec(ex), &ids, &descs, &n, &bytes);
        if (s == PATINA_E_NOTFOUND) s = PATINA_OK; /* no rows: every stored row is dropped */
        if (s == PATINA_OK && n && bytes != patina_extractor_bytes(ex))
            s = patina__fail(PATINA_E_CORRUPT, "pivots: table '%s' holds rows of %zu bytes, not %zu",
                             patina_extractor_spec(ex), bytes, patina_extractor_bytes(ex));
        /* the copies are ours: our own snapshot (its read transaction and the
         * store's map lock) ends before the context's workers are taken */
        patina_snapshot_free(own);
        own = NULL;
        if (s == PATINA_OK) s = from_blob(out, ctx, ex, name, blob, size, ids, descs, n, refreshed);
    }
    free(blob);
    free(ids);
    free(descs);
    patina_snapshot_free(own);
    return s;
}

patina_status patina_pivot_index_load(patina_pivot_index_t **out, patina_context_t *ctx,
                                      const patina_extractor_t *ex, patina_collection_t *c, size_t *refreshed)
{
    return load_common(out, ctx, ex, c, NULL, refreshed);
}

patina_status patina_pivot_index_load_snapshot(patina_pivot_index_t **out, patina_context_t *ctx,
                                               const patina_extractor_t *ex, patina_snapshot_t *snap,
                                               size_t *refreshed)
{
    return load_common(out, ctx, ex, NULL, snap, refreshed);
}

patina_status patina_pivot_index_save(const patina_pivot_index_t *pi, patina_collection_t *c)
{
    patina_status s;
    if (!pi) return pivot_save_unlocked(pi, c);
    patina__pivot_rd(pi);
    s = pivot_save_unlocked(pi, c);
    patina__pivot_un(pi);
    return s;
}
