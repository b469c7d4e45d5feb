/* The search index object (include/patina/search.h): an extractor's rows
 * in memory with their ids -- built from descriptors or loaded from a
 * collection (also from a read snapshot) -- what it derives from them once
 * (the Tanimoto fast path's per-row T1 and C3, the standard deviations of
 * std_l2, the SQFD self terms; knn_search.c's header comment says why), its
 * live updates (patina_index_put / _remove: an id map, removal marks and a
 * removal log for the device copies, compaction), its lock and its serial.
 *
 * Not here: the search (knn_search.c: the CPU engine and the dispatch to
 * the GPU), the distances (search/distance.h). */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/sqfd.h"
#include "core/context.h"
#include "gpu/gpu.h"
#include "patina/glcm.h"
#include "search/distance.h"
#include "search/knn.h"
#include "search/knn_internal.h"

static _Atomic uint64_t next_serial = 1;


int patina__index_fast_path(const patina_index_t *idx) { return idx && idx->t1 != NULL; }

/* The index's lock, for searches (const callers: the lock is the index's
 * own mutable state). */
void patina__index_rd_lock(const patina_index_t *ix) { pthread_rwlock_rdlock((pthread_rwlock_t *)&ix->lock); }
void patina__index_rd_unlock(const patina_index_t *ix) { pthread_rwlock_unlock((pthread_rwlock_t *)&ix->lock); }

size_t patina_index_size(const patina_index_t *idx)
{
    size_t n;
    if (!idx) return 0;
    patina__index_rd_lock(idx);
    n = idx->live;
    patina__index_rd_unlock(idx);
    return n;
}

int patina__index_live_row(const patina_index_t *idx, void *out)
{
    size_t r;
    int found = 0;
    if (!idx || !out) return 0;
    patina__index_rd_lock(idx);
    for (r = 0; r < idx->n && !found; r++)
        if (!idx->dead || !idx->dead[r]) {
            memcpy(out, idx->descs + r * idx->bytes, idx->bytes);
            found = 1;
        }
    patina__index_rd_unlock(idx);
    return found;
}

void patina_index_free(patina_index_t *idx)
{
    if (!idx) return;
    patina_extractor_free(idx->ex);
    free(idx->ids);
    free(idx->descs);
    free(idx->t1);
    free(idx->c3);
    free(idx->ptab);
    free(idx->sd);
    free(idx->self);
    free(idx->dead);
    free(idx->rm_log);
    free(idx->map_id);
    free(idx->map_row);
    pthread_rwlock_destroy(&idx->lock);
    free(idx);
}


static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* ------------------------------------------------------------ building */

/* The fast path's T1 and C3 of row r: T1 = sum of the elements, C3 = sum
 * of (b / T1)^2, in element order. */
static void fast_row(patina_index_t *ix, size_t r)
{
    const uint8_t *b = ix->descs + r * ix->dim;
    double t1 = 0.0, c3 = 0.0;
    size_t i;
    for (i = 0; i < ix->dim; i++) t1 += (double)b[i];
    if (t1 != 0.0)
        for (i = 0; i < ix->dim; i++) {
            double p = (double)b[i] / t1;
            c3 += p * p;
        }
    ix->t1[r] = (uint32_t)t1;
    ix->c3[r] = c3;
}

/* PATINA_E_INVALID naming the first id that appears twice among n (where:
 * "in the index", "in one put"), else PATINA_OK. */
static patina_status check_unique(const uint64_t *ids, size_t n, const char *where)
{
    uint64_t *sorted;
    patina_status s = PATINA_OK;
    size_t i;
    if (n < 2) return PATINA_OK;
    if (!(sorted = malloc(n * sizeof *sorted))) return patina__fail(PATINA_E_NOMEM, "search: out of memory");
    memcpy(sorted, ids, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, u64_cmp);
    for (i = 1; i < n; i++)
        if (sorted[i] == sorted[i - 1]) break;
    if (i < n) s = patina__fail(PATINA_E_INVALID, "search: id %llu appears twice %s", (unsigned long long)sorted[i], where);
    free(sorted);
    return s;
}

/* Caches T1 and C3 per row; leaves the fast path off for other distances or
 * element types, more than PGPU_KNN_MAXDIM elements, or a row with an
 * element above 7. */
static patina_status build_fast_path(patina_index_t *ix)
{
    size_t r, t;
    int v;
    if (ix->dist_id != PDIST_TANIMOTO || ix->elem != PATINA_ELEM_U8 || ix->dim > PGPU_KNN_MAXDIM) return PATINA_OK;
    for (r = 0; r < ix->n * ix->dim; r++)
        if (ix->descs[r] > 7) return PATINA_OK;
    ix->t_max = 7 * ix->dim;
    ix->t1 = malloc((ix->n ? ix->n : 1) * sizeof *ix->t1);
    ix->c3 = malloc((ix->n ? ix->n : 1) * sizeof *ix->c3);
    ix->ptab = malloc((ix->t_max + 1) * sizeof *ix->ptab);
    if (!ix->t1 || !ix->c3 || !ix->ptab) {
        free(ix->t1);
        free(ix->c3);
        free(ix->ptab);
        ix->t1 = NULL;
        ix->c3 = NULL;
        ix->ptab = NULL;
        return patina__fail(PATINA_E_NOMEM, "search: out of memory building the index");
    }
    for (v = 0; v < 8; v++) ix->ptab[0][v] = 0.0;
    for (t = 1; t <= ix->t_max; t++)
        for (v = 0; v < 8; v++) ix->ptab[t][v] = (double)v / (double)t;
    for (r = 0; r < ix->n; r++) fast_row(ix, r);
    return PATINA_OK;
}

/* sqfd: every row's self term, on all CPUs (a whole index costs what one
 * query's scan does). */
typedef struct self_job {
    patina_index_t *ix;
} self_job_t;

#define SELF_CHUNK 256

static void self_task(void *arg, size_t t, int worker)
{
    patina_index_t *ix = ((self_job_t *)arg)->ix;
    const size_t r0 = t * SELF_CHUNK, r1 = r0 + SELF_CHUNK < ix->n ? r0 + SELF_CHUNK : ix->n;
    (void)worker;
    for (size_t r = r0; r < r1; r++) ix->self[r] = sig_self((const float *)(ix->descs + r * ix->bytes));
}

static patina_status build_self(patina_index_t *ix)
{
    patina_pool_t *pool = NULL;
    self_job_t j = {ix};
    int own = 0;
    if (ix->dist_id != PDIST_SQFD) return PATINA_OK;
    if (!(ix->self = malloc((ix->n ? ix->n : 1) * sizeof *ix->self)))
        return patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu self terms", ix->n);
    if (ix->n >= 4 * SELF_CHUNK) PATINA_TRY(patina__workers_begin(NULL, 0, &pool, &own));
    patina_pool_run(pool, (ix->n + SELF_CHUNK - 1) / SELF_CHUNK, self_task, &j);
    if (pool) patina__workers_end(NULL, pool, own);
    return PATINA_OK;
}

/* A live row and its id (compute_sd sorts them by id). */
typedef struct id_row {
    uint64_t id;
    size_t row;
} id_row_t;

static int id_row_cmp(const void *a, const void *b)
{
    const uint64_t x = ((const id_row_t *)a)->id, y = ((const id_row_t *)b)->id;
    return x < y ? -1 : x > y;
}

/* std_l2: the per-element sigma of the index's live rows, summed in id
 * order -- so that it depends on the rows, not on the order they came in
 * or were changed (sd NULL for other distances and for an empty index). */
static patina_status compute_sd(patina_index_t *ix)
{
    double *mean, *rows;
    id_row_t *order;
    size_t r, k, m = 0;
    patina_status s;
    if (ix->dist_id != PDIST_STD_L2) return PATINA_OK;
    free(ix->sd);
    ix->sd = NULL;
    if (ix->live == 0) return PATINA_OK;
    mean = malloc(ix->dim * sizeof *mean + 1);
    ix->sd = malloc(ix->dim * sizeof *ix->sd + 1);
    rows = malloc(ix->live * ix->dim * sizeof *rows + 1);
    order = malloc(ix->live * sizeof *order + 1);
    if (!mean || !ix->sd || !rows || !order) {
        free(mean);
        free(rows);
        free(order);
        free(ix->sd);
        ix->sd = NULL;
        return patina__fail(PATINA_E_NOMEM, "search: out of memory");
    }
    for (r = 0; r < ix->n; r++)
        if (!ix->dead || !ix->dead[r]) order[m++] = (id_row_t){ix->ids[r], r};
    qsort(order, m, sizeof *order, id_row_cmp);
    for (r = 0; r < m; r++)
        for (k = 0; k < ix->dim; k++)
            rows[r * ix->dim + k] = pdist_elem(ix->elem, ix->descs + order[r].row * ix->bytes, k);
    s = patina_feature_stats(mean, ix->sd, rows, ix->live, ix->dim);
    free(mean);
    free(rows);
    free(order);
    return s;
}

/* Takes ownership of ids and descs (freed on failure too). */
static patina_status index_build(patina_index_t **out, const patina_extractor_t *ex, uint64_t *ids,
                                 uint8_t *descs, size_t n, int ids_sorted)
{
    patina_index_t *ix;
    patina_status s;
    size_t i;
    ix = calloc(1, sizeof *ix);
    if (!ix) {
        free(ids);
        free(descs);
        return patina__fail(PATINA_E_NOMEM, "search: out of memory");
    }
    if (patina__rwlock_init(&ix->lock) != 0) {
        free(ix);
        free(ids);
        free(descs);
        return patina__fail(PATINA_E_NOMEM, "search: no lock");
    }
    ix->ids = ids;
    ix->descs = descs;
    ix->n = ix->cap = ix->live = n;
    ix->bytes = patina_extractor_bytes(ex);
    ix->dim = patina_extractor_dim(ex);
    ix->elem = patina_extractor_elem(ex);
    ix->serial = atomic_fetch_add(&next_serial, 1);
    s = patina_extractor_new(&ix->ex, patina_extractor_spec(ex));
    if (s != PATINA_OK) goto fail;
    {
        int d = pdist_find(patina_extractor_distance_name(ex));
        if (d < 0) {
            s = patina__fail(PATINA_E_INTERNAL, "search: unknown distance '%s'",
                             patina_extractor_distance_name(ex));
            goto fail;
        }
        ix->dist_id = (pdist_t)d;
        ix->dist = pdist_get(ix->dist_id);
    }
    /* ids must be unique: the tie rule (then the result) depends on it. */
    if (!ids_sorted) {
        if ((s = check_unique(ids, n, "in the index")) != PATINA_OK) goto fail;
    } else {
        for (i = 1; i < n; i++)
            if (ids[i] <= ids[i - 1]) {
                s = patina__fail(PATINA_E_INVALID, "search: ids not strictly ascending at row %zu", i);
                goto fail;
            }
    }
    /* A record distance checks every row once (a malformed record would
     * have no distance): the caller's rows are bad input, a collection's
     * (ids_sorted: they come from the store) a corrupt table; the message
     * names the row and its id. */
    if (pdist_check(ix->dist_id))
        for (i = 0; i < n; i++) {
            char w[96];
            snprintf(w, sizeof w, "search: row %zu (id %llu)%s", i, (unsigned long long)ids[i],
                     ids_sorted ? " of the stored table" : "");
            if ((s = pdist_check(ix->dist_id)(descs + i * ix->bytes, ix->dim, w)) != PATINA_OK) {
                if (ids_sorted) s = PATINA_E_CORRUPT;
                goto fail;
            }
        }
    if ((s = build_fast_path(ix)) != PATINA_OK) goto fail;
    if ((s = build_self(ix)) != PATINA_OK) goto fail;
    if ((s = compute_sd(ix)) != PATINA_OK) goto fail;
    *out = ix;
    return PATINA_OK;
fail:
    patina_index_free(ix);
    return s;
}

patina_status patina_index_new(patina_index_t **idx, const patina_extractor_t *ex,
                               const uint64_t *ids, const void *descs, size_t n)
{
    uint64_t *ic = NULL;
    uint8_t *dc = NULL;
    size_t bytes;
    if (!idx) return patina__fail(PATINA_E_INVALID, "search: null index pointer");
    *idx = NULL;
    if (!ex) return patina__fail(PATINA_E_INVALID, "search: null extractor");
    if (n && (!ids || !descs)) return patina__fail(PATINA_E_INVALID, "search: null ids or descriptors");
    bytes = patina_extractor_bytes(ex);
    if (n) {
        if (n > SIZE_MAX / bytes / 2) return patina__fail(PATINA_E_LIMIT, "search: %zu rows is too many", n);
        ic = malloc(n * sizeof *ic);
        dc = malloc(n * bytes);
        if (!ic || !dc) {
            free(ic);
            free(dc);
            return patina__fail(PATINA_E_NOMEM, "search: out of memory copying %zu descriptors", n);
        }
        memcpy(ic, ids, n * sizeof *ic);
        memcpy(dc, descs, n * bytes);
    }
    return index_build(idx, ex, ic, dc, n, 0);
}

/* The index of ex's table, loaded from collection c or, when c is NULL,
 * from snapshot snap (what: the source's name for the null-argument error). */
static patina_status index_load_from(patina_index_t **idx, const patina_extractor_t *ex,
                                     patina_collection_t *c, patina_snapshot_t *snap,
                                     const char *what)
{
    uint64_t *ids = NULL;
    uint8_t *descs = NULL;
    size_t n = 0, bytes = 0;
    patina_status s;
    if (!idx) return patina__fail(PATINA_E_INVALID, "search: null index pointer");
    *idx = NULL;
    if (!ex || (!c && !snap)) return patina__fail(PATINA_E_INVALID, "search: null extractor or %s", what);
    if (c) s = patina_collection_load(c, patina_extractor_spec(ex), &ids, &descs, &n, &bytes);
    else s = patina_snapshot_load(snap, patina_extractor_spec(ex), &ids, &descs, &n, &bytes);
    if (s == PATINA_E_NOTFOUND) {
        patina_clear_error();
        return index_build(idx, ex, NULL, NULL, 0, 1);
    }
    if (s != PATINA_OK) return s;
    if (n && bytes != patina_extractor_bytes(ex)) {
        free(ids);
        free(descs);
        return patina__fail(PATINA_E_CORRUPT, "search: table '%s' holds %zu-byte descriptors; %s has %zu",
                            patina_extractor_spec(ex), bytes, patina_extractor_family(ex),
                            patina_extractor_bytes(ex));
    }
    return index_build(idx, ex, ids, descs, n, 1); /* the store returns ids in order */
}

patina_status patina_index_load(patina_index_t **idx, const patina_extractor_t *ex,
                                patina_collection_t *c)
{
    return index_load_from(idx, ex, c, NULL, "collection");
}

patina_status patina_index_load_snapshot(patina_index_t **idx, const patina_extractor_t *ex,
                                         patina_snapshot_t *snap)
{
    return index_load_from(idx, ex, NULL, snap, "snapshot");
}

/* Rows of a floating-point family must be numbers (queries and added rows
 * alike): a NaN element has no distance (the order would be arbitrary);
 * a record distance first checks each record itself (pdist_check).
 * what names them in the message ("query", "descriptor"). */
patina_status patina__index_check_nan(const patina_index_t *ix, const void *rows, size_t n, const char *what)
{
    size_t r, i;
    const pdist_check_fn check = pdist_check(ix->dist_id);
    if (check) /* a record distance's own check says what is wrong */
        for (r = 0; r < n; r++) {
            char w[64];
            snprintf(w, sizeof w, "search: %s %zu", what, r);
            PATINA_TRY(check((const uint8_t *)rows + r * ix->bytes, ix->dim, w));
        }
    if (ix->elem != PATINA_ELEM_F32 && ix->elem != PATINA_ELEM_F64) return PATINA_OK;
    for (r = 0; r < n; r++)
        if ((i = pdist_first_nan(ix->elem, (const uint8_t *)rows + r * ix->bytes, ix->dim)) < ix->dim)
            return patina__fail(PATINA_E_INVALID, "search: %s %zu has a NaN at element %zu", what, r, i);
    return PATINA_OK;
}

/* ------------------------------------------------------------ live updates */

#define MAP_EMPTY UINT32_MAX

static size_t map_slot(const patina_index_t *ix, uint64_t id)
{
    uint64_t h = id * 0x9e3779b97f4a7c15ull;
    return (size_t)(h ^ (h >> 29)) & (ix->map_cap - 1);
}

/* The row of live id, or SIZE_MAX. */
static size_t map_find(const patina_index_t *ix, uint64_t id)
{
    size_t i = map_slot(ix, id);
    for (; ix->map_row[i] != MAP_EMPTY; i = (i + 1) & (ix->map_cap - 1))
        if (ix->map_id[i] == id) return ix->map_row[i];
    return SIZE_MAX;
}

static void map_set(patina_index_t *ix, uint64_t id, size_t row)
{
    size_t i = map_slot(ix, id);
    for (; ix->map_row[i] != MAP_EMPTY; i = (i + 1) & (ix->map_cap - 1))
        if (ix->map_id[i] == id) break;
    if (ix->map_row[i] == MAP_EMPTY) ix->map_n++;
    ix->map_id[i] = id;
    ix->map_row[i] = (uint32_t)row;
}

/* Deletes id (linear probing: the entries after the hole move back). */
static void map_del(patina_index_t *ix, uint64_t id)
{
    const size_t mask = ix->map_cap - 1;
    size_t i = map_slot(ix, id), j;
    for (; ix->map_row[i] != MAP_EMPTY; i = (i + 1) & mask)
        if (ix->map_id[i] == id) break;
    if (ix->map_row[i] == MAP_EMPTY) return;
    ix->map_row[i] = MAP_EMPTY;
    ix->map_n--;
    for (j = (i + 1) & mask; ix->map_row[j] != MAP_EMPTY; j = (j + 1) & mask) {
        const size_t home = map_slot(ix, ix->map_id[j]);
        /* j's entry may fill the hole at i unless its home lies in (i, j] */
        if (i <= j ? (home > i && home <= j) : (home > i || home <= j)) continue;
        ix->map_id[i] = ix->map_id[j];
        ix->map_row[i] = ix->map_row[j];
        ix->map_row[j] = MAP_EMPTY;
        i = j;
    }
}

/* (Re)builds the map for `want` live ids at most, from the live rows. */
static patina_status map_build(patina_index_t *ix, size_t want)
{
    size_t cap = 16, r;
    while (cap < 2 * want) cap <<= 1;
    free(ix->map_id);
    free(ix->map_row);
    ix->map_id = malloc(cap * sizeof *ix->map_id);
    ix->map_row = malloc(cap * sizeof *ix->map_row);
    ix->map_cap = cap;
    ix->map_n = 0;
    if (!ix->map_id || !ix->map_row) {
        free(ix->map_id);
        free(ix->map_row);
        ix->map_id = NULL;
        ix->map_row = NULL;
        ix->map_cap = 0;
        return patina__fail(PATINA_E_NOMEM, "search: out of memory for the id map");
    }
    for (r = 0; r < cap; r++) ix->map_row[r] = MAP_EMPTY;
    for (r = 0; r < ix->n; r++)
        if (!ix->dead || !ix->dead[r]) map_set(ix, ix->ids[r], r);
    return PATINA_OK;
}

/* Room for `more` rows (arrays grown by half at least). */
static patina_status grow(patina_index_t *ix, size_t more)
{
    size_t cap = ix->cap, need = ix->n + more;
    void *p;
    if (need <= cap) return PATINA_OK;
    if (need > UINT32_MAX - 1) return patina__fail(PATINA_E_LIMIT, "search: %zu rows is too many", need);
    cap = cap + cap / 2 > need ? cap + cap / 2 : need;
#define GROW(f, sz)                                                                                      \
    do {                                                                                                 \
        if (!(p = realloc(ix->f, cap * (sz) + 1))) return patina__fail(PATINA_E_NOMEM, "search: out of memory"); \
        ix->f = p;                                                                                       \
    } while (0)
    GROW(ids, sizeof *ix->ids);
    GROW(descs, ix->bytes);
    if (ix->t1) {
        GROW(t1, sizeof *ix->t1);
        GROW(c3, sizeof *ix->c3);
    }
    if (ix->self) GROW(self, sizeof *ix->self);
    if (ix->dead) {
        GROW(dead, 1);
        memset(ix->dead + ix->cap, 0, cap - ix->cap);
    }
#undef GROW
    ix->cap = cap;
    return PATINA_OK;
}

/* Marks row r removed. */
static patina_status kill_row(patina_index_t *ix, size_t r)
{
    if (!ix->dead && !(ix->dead = calloc(ix->cap + 1, 1)))
        return patina__fail(PATINA_E_NOMEM, "search: out of memory");
    if (ix->dead_gen == ix->rm_cap) {
        const size_t cap = ix->rm_cap ? 2 * ix->rm_cap : 1024;
        uint32_t *p = realloc(ix->rm_log, cap * sizeof *p);
        if (!p) return patina__fail(PATINA_E_NOMEM, "search: out of memory");
        ix->rm_log = p;
        ix->rm_cap = cap;
    }
    ix->dead[r] = 1;
    ix->rm_log[ix->dead_gen++] = (uint32_t)r;
    ix->live--;
    map_del(ix, ix->ids[r]);
    return PATINA_OK;
}

/* Drops the removed rows when they are many (>= 64 and a quarter): the
 * rows keep their order; a new serial (device copies are remade). */
static patina_status maybe_compact(patina_index_t *ix)
{
    size_t r, w = 0, ndead = ix->n - ix->live;
    if (!ix->dead || ndead < 64 || ndead * 4 < ix->n) return PATINA_OK;
    for (r = 0; r < ix->n; r++) {
        if (ix->dead[r]) continue;
        if (w != r) {
            ix->ids[w] = ix->ids[r];
            memcpy(ix->descs + w * ix->bytes, ix->descs + r * ix->bytes, ix->bytes);
            if (ix->t1) {
                ix->t1[w] = ix->t1[r];
                ix->c3[w] = ix->c3[r];
            }
            if (ix->self) ix->self[w] = ix->self[r];
        }
        w++;
    }
    ix->n = w;
    memset(ix->dead, 0, ix->cap);
    ix->dead_gen = 0; /* a new serial: copies start afresh */
    ix->serial = atomic_fetch_add(&next_serial, 1);
    return map_build(ix, ix->live);
}

/* The changes common to put and remove, after the rows changed: std_l2's
 * sigma (a new serial: every distance changed), compaction. */
static patina_status after_change(patina_index_t *ix, int changed)
{
    if (!changed) return PATINA_OK;
    if (ix->dist_id == PDIST_STD_L2) {
        PATINA_TRY(compute_sd(ix));
        ix->serial = atomic_fetch_add(&next_serial, 1);
    }
    return maybe_compact(ix);
}

static patina_status index_put(patina_index_t *idx, const uint64_t *ids, const uint8_t *d, size_t n);

patina_status patina_index_put(patina_index_t *idx, const uint64_t *ids, const void *descs, size_t n)
{
    patina_status s;
    void *copy;
    if (!idx) return patina__fail(PATINA_E_INVALID, "search: null index");
    if (n == 0) return PATINA_OK;
    if (!ids || !descs) return patina__fail(PATINA_E_INVALID, "search: null ids or descriptors");
    PATINA_TRY(check_unique(ids, n, "in one put"));
    PATINA_TRY(patina__rows(&descs, n, idx->bytes, PATINA_ROW_ALIGN(patina_elem_size(idx->elem)), &copy, "search"));
    s = index_put(idx, ids, descs, n);
    free(copy);
    return s;
}

static patina_status index_put(patina_index_t *idx, const uint64_t *ids, const uint8_t *d, size_t n)
{
    patina_status s = PATINA_OK;
    size_t i;
    PATINA_TRY(patina__index_check_nan(idx, d, n, "descriptor"));
    pthread_rwlock_wrlock(&idx->lock);
    if (!idx->map_id) s = map_build(idx, idx->live + n);
    else if (2 * (idx->map_n + n) > idx->map_cap) s = map_build(idx, idx->map_n + n);
    if (s == PATINA_OK) s = grow(idx, n);
    for (i = 0; s == PATINA_OK && i < n; i++) {
        const size_t old = map_find(idx, ids[i]), r = idx->n;
        const uint8_t *row = d + i * idx->bytes;
        if (old != SIZE_MAX && (s = kill_row(idx, old)) != PATINA_OK) break;
        idx->ids[r] = ids[i];
        memcpy(idx->descs + r * idx->bytes, row, idx->bytes);
        if (idx->dead) idx->dead[r] = 0;
        if (idx->t1) {
            size_t e;
            for (e = 0; e < idx->dim && row[e] <= 7; e++) {}
            if (e < idx->dim) { /* not a CEDD row: the definition from now on */
                free(idx->t1);
                free(idx->c3);
                free(idx->ptab);
                idx->t1 = NULL;
                idx->c3 = NULL;
                idx->ptab = NULL;
                idx->serial = atomic_fetch_add(&next_serial, 1);
            }
        }
        idx->n++;
        idx->live++;
        if (idx->t1) fast_row(idx, r);
        if (idx->self) idx->self[r] = sig_self((const float *)row);
        map_set(idx, ids[i], r);
    }
    if (s == PATINA_OK) s = after_change(idx, 1);
    pthread_rwlock_unlock(&idx->lock);
    return s;
}

patina_status patina_index_remove(patina_index_t *idx, const uint64_t *ids, size_t n, size_t *removed)
{
    patina_status s = PATINA_OK;
    size_t i, m = 0;
    if (removed) *removed = 0;
    if (!idx) return patina__fail(PATINA_E_INVALID, "search: null index");
    if (n == 0) return PATINA_OK;
    if (!ids) return patina__fail(PATINA_E_INVALID, "search: null ids");
    pthread_rwlock_wrlock(&idx->lock);
    if (!idx->map_id) s = map_build(idx, idx->live);
    for (i = 0; s == PATINA_OK && i < n; i++) {
        const size_t r = map_find(idx, ids[i]);
        if (r == SIZE_MAX) continue; /* absent or removed already */
        if ((s = kill_row(idx, r)) == PATINA_OK) m++;
    }
    if (s == PATINA_OK) s = after_change(idx, m > 0);
    pthread_rwlock_unlock(&idx->lock);
    if (removed) *removed = m;
    return s;
}
