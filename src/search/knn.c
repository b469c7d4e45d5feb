/* Exact k-NN and range search (include/patina/search.h) on the CPU, and the
 * dispatch to the GPU search (src/gpu/knn.cu).
 *
 * What it is: brute force. Every query is compared with every row of the
 * index by the extractor's distance, taken from the distance table
 * (search/distance.h); per (query, chunk of rows) a bounded max-heap keeps
 * the best k; chunks of one query are merged afterwards. Queries are taken
 * in blocks (up to QB_MAX): a task runs its block over a range of rows, tile
 * by tile, so each group of rows is read once per block and serves all its
 * queries from cache (pdist_block; the Tanimoto fast path runs each query
 * over the tile). Work is spread over the context's workers (or a pool made
 * per call without a context): over blocks of queries when there are at
 * least as many blocks as threads, else each query's rows are cut into
 * chunks (at least PATINA_KNN_MIN_CHUNK rows) so that one query on a large
 * index uses every thread.
 *
 * Order: distance ascending, ties by id ascending; NaN distances (a broken
 * distance function) sort after every number. ids are unique in an index,
 * so this is a total order and the result does not depend on the number of
 * threads, the chunking or the device.
 *
 * Standardised L2 (std_l2): the per-element standard deviation of the
 * index's rows is computed when it is built, and every distance is
 * sqrt(sum ((a_k - b_k) / sd_k)^2) with it, so elements of very different
 * scales count alike within that collection.
 *
 * Tanimoto fast path (u8 rows whose elements are all <= 7, e.g. CEDD).
 * LIRE's Tanimoto (query = a, row = b) accumulates, in double and in element
 * order, C1 += p*q, C2 += q*q, C3 += p*p with p = b[i]/T1, q = a[i]/T2. Each
 * accumulator is its own sequence of roundings, so:
 *   - C3 and T1 depend on the row only: computed once per row at build time
 *     by the same loop, they are the same doubles;
 *   - C2 and T2 depend on the query only: computed once per query;
 *   - p takes at most 8 values per row (elements are 0..7): P[T1][v] = v/T1
 *     is the same division, looked up in a (7 dim + 1, 8) table;
 *   - C1 gets +0.0 from every element where the query is 0, and
 *     x + (+0.0) == x exactly for every x >= +0.0, so those elements are
 *     skipped and C1 runs over the query's non-zero elements only, in order.
 * The final 100 - 100 * (C1 / ((C2 + C3) - C1)) is the same expression.
 * Nothing is reassociated, so the doubles are identical (tests/test_search.c
 * checks every pair bit for bit). Queries with an element above 7 use the
 * definition. Four rows run at once for instruction-level parallelism; each
 * keeps its own sequential C1. With AVX2, an exact integer filter (the dot
 * products a.b of 16 rows at once, search/knn_avx2.c) first leaves out the
 * rows provably farther than the query's current k-th hit or radius; only
 * the others get their distance (tanimoto_tile_filtered has the bound).
 *
 * SQFD self terms (signature records). SQFD^2 = (Sqq + Soo) - 2 Sqo: Soo
 * depends on the row only and is kept per row (computed once when the row
 * is added, on all CPUs for a whole index), Sqq is computed once per query
 * and call, so a distance costs only the cross block Sqo -- a third of the
 * similarity evaluations for signatures of equal length. sig_sqfd_self
 * evaluates the definition's expression with the same three doubles, so
 * every distance is sig_sqfd's bit for bit (tests/test_signature.c). On
 * the GPU (src/gpu/sqfd.cu) the cross terms are filtered in float with a
 * proven error bound and the candidates get these same doubles here
 * (sqfd_gpu below). */
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
#include "search/knn_simd.h"

#define K_MAX 1000000
#define TILE 256          /* rows whose distances are computed before selection */
#define QB_MAX 32         /* queries per block (a task's queries share each group of rows) */
#define QB_BYTES (256u << 10) /* a block's queries as doubles at most */
#define GPU_MIN_ROWS 4096 /* AUTO runs smaller indexes on the CPU */

struct patina_index {
    patina_extractor_t *ex;   /* owned copy of the caller's extractor */
    const pdist_def_t *dist;  /* the extractor's distance */
    pdist_t dist_id;
    patina_elem elem;
    size_t n, dim, bytes;
    uint64_t serial;          /* names the index's device copies (never reused) */
    uint64_t *ids;            /* (n) unique */
    uint8_t *descs;           /* (n, bytes) row-major */
    /* Tanimoto fast path; t1 == NULL when not used */
    uint32_t *t1;             /* (n) T1 = sum of the row's elements */
    double *c3;               /* (n) C3 = sum of p*p in element order */
    double (*ptab)[8];        /* (t_max + 1, 8): ptab[T][v] = v / T; row 0 zeros */
    size_t t_max;             /* 7 * dim */
    /* sqfd: each row's self term Soo (sig_self); NULL for other distances */
    double *self;             /* (cap) */
    /* standardised L2: per-element sigma of the live rows */
    double *sd;               /* (dim) or NULL */
    /* live updates (patina_index_put / _remove) */
    pthread_rwlock_t lock;    /* searches read; put, remove and compaction write */
    size_t cap;               /* rows allocated in ids, descs, t1, c3, dead */
    size_t live;              /* rows not removed */
    uint8_t *dead;            /* (cap) 1 = removed; NULL while nothing is */
    uint64_t dead_gen;        /* removals since the last compaction */
    uint32_t *rm_log;         /* (rm_cap) the rows removed since the last compaction, in order:
                                 a device copy applies the ones it has not seen */
    size_t rm_cap;
    uint64_t *map_id;         /* id -> row, open addressing (linear probing); */
    uint32_t *map_row;        /* built at the first change: (map_cap) */
    size_t map_cap, map_n;
};

static _Atomic uint64_t next_serial = 1;

/* A query prepared for the fast path: its sum T2, C2 = sum q^2, and its
 * non-zero elements (index, q = a / T2) in order (the GPU's final pass
 * rebuilds the same from the query's bytes, gpu/knn_tc.cuh). */
typedef struct tq {
    int fast; /* 0: an element above 7, not for the fast path */
    int nnz;
    double t2, c2;
    uint16_t idx[PGPU_KNN_MAXDIM];
    double qv[PGPU_KNN_MAXDIM];
    /* the AVX2 filter's view (knn_simd.h): S2 = sum a^2, the non-zero
     * element pairs (pe) and their two elements (pv, low byte first) */
    double s2;
    int np;
    uint16_t pe[PGPU_KNN_MAXDIM / 2], pv[PGPU_KNN_MAXDIM / 2];
} tq_t;

int patina__index_fast_path(const patina_index_t *idx) { return idx && idx->t1 != NULL; }

/* The index's lock, for searches (const callers: the lock is the index's
 * own mutable state). */
static void rd_lock(const patina_index_t *ix) { pthread_rwlock_rdlock((pthread_rwlock_t *)&ix->lock); }
static void rd_unlock(const patina_index_t *ix) { pthread_rwlock_unlock((pthread_rwlock_t *)&ix->lock); }

size_t patina_index_size(const patina_index_t *idx)
{
    size_t n;
    if (!idx) return 0;
    rd_lock(idx);
    n = idx->live;
    rd_unlock(idx);
    return n;
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

/* ---------------------------------------------------------------- ordering */
/* The result order and the bounded heap are in search/knn.h (shared with
 * the GPU search's host merge). */

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Max-heap of the best `cap` hits so far: h[0] is the worst kept. */
typedef struct heap {
    patina_hit_t *h;
    size_t n, cap;
} heap_t;

static void heap_push(heap_t *hp, double d, uint64_t id)
{
    patina_hit_t x = {id, d};
    if (hp->n < hp->cap) {
        patina__hit_heap_up(hp->h, hp->n++, x);
        return;
    }
    if (d > hp->h[0].distance) return; /* the common case, without NaN tests */
    if (patina__hit_cmp(&x, &hp->h[0]) >= 0) return;
    hp->h[0] = x;
    patina__hit_heap_down(hp->h, hp->n, 0);
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
static patina_status check_nan(const patina_index_t *ix, const void *rows, size_t n, const char *what)
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
        for (i = 0; i < ix->dim; i++)
            if (isnan(pdist_elem(ix->elem, (const uint8_t *)rows + r * ix->bytes, i)))
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

patina_status patina_index_put(patina_index_t *idx, const uint64_t *ids, const void *descs, size_t n)
{
    patina_status s = PATINA_OK;
    const uint8_t *d = descs;
    size_t i;
    if (!idx) return patina__fail(PATINA_E_INVALID, "search: null index");
    if (n == 0) return PATINA_OK;
    if (!ids || !descs) return patina__fail(PATINA_E_INVALID, "search: null ids or descriptors");
    PATINA_TRY(check_unique(ids, n, "in one put"));
    PATINA_TRY(check_nan(idx, d, n, "descriptor"));
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

/* --------------------------------------------------------------- distances */

static void prepare_query(tq_t *q, const uint8_t *a, size_t dim)
{
    double t2 = 0.0, c2 = 0.0;
    size_t i;
    q->fast = 0;
    q->nnz = 0;
    for (i = 0; i < dim; i++) {
        if (a[i] > 7) return;
        t2 += (double)a[i];
    }
    q->fast = 1;
    q->t2 = t2;
    q->np = 0;
    q->s2 = 0.0;
    for (i = 0; i < dim; i += 2) {
        const unsigned lo = a[i], hi = i + 1 < dim ? a[i + 1] : 0;
        q->s2 += (double)(lo * lo + hi * hi);
        if (lo | hi) {
            q->pe[q->np] = (uint16_t)(i / 2);
            q->pv[q->np++] = (uint16_t)(lo | hi << 8);
        }
    }
    if (t2 != 0.0)
        for (i = 0; i < dim; i++) {
            double v = (double)a[i] / t2;
            c2 += v * v;
            if (a[i]) {
                q->idx[q->nnz] = (uint16_t)i;
                q->qv[q->nnz++] = v;
            }
        }
    q->c2 = c2;
}

static inline double tanimoto_finish(const tq_t *q, unsigned t1, double c3, double c1)
{
    if (t1 == 0 || q->t2 == 0.0) return t1 == 0 && q->t2 == 0.0 ? 0.0 : 100.0;
    return 100.0 - 100.0 * (c1 / ((q->c2 + c3) - c1));
}

/* out[j] = Tanimoto(query, row r0 + j) for j < cnt, bit-identical to
 * patina_cedd_tanimoto (see the top of the file). */
static void tanimoto_rows(const patina_index_t *ix, const tq_t *q, size_t r0, size_t cnt, double *out)
{
    const size_t D = ix->dim;
    const uint8_t *base = ix->descs + r0 * D;
    const uint32_t *t1 = ix->t1 + r0;
    const double *c3 = ix->c3 + r0;
    const int nnz = q->nnz;
    size_t r = 0;
    int j;
    for (; r + 4 <= cnt; r += 4) {
        const uint8_t *b0 = base + r * D, *b1 = b0 + D, *b2 = b1 + D, *b3 = b2 + D;
        const double *p0 = ix->ptab[t1[r]], *p1 = ix->ptab[t1[r + 1]], *p2 = ix->ptab[t1[r + 2]],
                     *p3 = ix->ptab[t1[r + 3]];
        double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
        for (j = 0; j < nnz; j++) {
            unsigned i = q->idx[j];
            double w = q->qv[j];
            s0 += p0[b0[i]] * w;
            s1 += p1[b1[i]] * w;
            s2 += p2[b2[i]] * w;
            s3 += p3[b3[i]] * w;
        }
        out[r] = tanimoto_finish(q, t1[r], c3[r], s0);
        out[r + 1] = tanimoto_finish(q, t1[r + 1], c3[r + 1], s1);
        out[r + 2] = tanimoto_finish(q, t1[r + 2], c3[r + 2], s2);
        out[r + 3] = tanimoto_finish(q, t1[r + 3], c3[r + 3], s3);
    }
    for (; r < cnt; r++) {
        const uint8_t *b = base + r * D;
        const double *p = ix->ptab[t1[r]];
        double s = 0.0;
        for (j = 0; j < nnz; j++) s += p[b[q->idx[j]]] * q->qv[j];
        out[r] = tanimoto_finish(q, t1[r], c3[r], s);
    }
}

#if PDIST_HAVE_AVX2
/* Distance of one row to a fast-path query: tanimoto_rows's operations. */
static double tanimoto_row(const patina_index_t *ix, const tq_t *q, size_t r)
{
    const uint8_t *b = ix->descs + r * ix->dim;
    const double *p = ix->ptab[ix->t1[r]];
    double s = 0.0;
    for (int j = 0; j < q->nnz; j++) s += p[b[q->idx[j]]] * q->qv[j];
    return tanimoto_finish(q, ix->t1[r], ix->c3[r], s);
}

/* The fast path with the AVX2 filter: dist (nb, TILE) holds the distances
 * of the rows that may lie within thr[q] (each query's threshold: its
 * heap's worst once full, the radius, or +inf) and +inf for the others,
 * which cannot enter the result: their distance is above thr[q].
 *
 * Why: with the integers D = a.b, T1, T2, S1 = b.b, S2 = a.a, LIRE's
 * similarity is the rational t = D T1 T2 / (S2 T1^2 + S1 T2^2 - D T1 T2)
 * and the distance 100 (1 - t). The definition's double differs from
 * 100 (1 - t) by less than 1e-11: C1, C2, C3 are sums of at most 256
 * non-negative terms, each within 3 roundings, so each is within 260 u
 * (u = 2^-53) relative; the denominator (C2 + C3) - C1 >= (C2 + C3) / 2
 * (Cauchy-Schwarz), so it is within about 800 u, the quotient (t <= 1)
 * within about 1100 u, and 100 (1 - t) within 100 * 1100 u + one rounding
 * (< 2e-11). The filter drops a row when D T1 T2 < tc den with tc =
 * (100 - thr - MARGIN) / 100 (all integers exact in double, the product
 * within u): then 100 (1 - t) > thr + MARGIN - 1e-13 and the definition's
 * distance > thr + MARGIN - 1e-10 > thr. A row at thr (a tie that may
 * enter by its id) is always kept; so are zero rows and zero queries (a
 * zero denominator keeps the row) and everything while thr is +inf. */
#define TAN_MARGIN 1e-9
static void tanimoto_tile_filtered(const patina_index_t *ix, const tq_t *tq, const double *thr, size_t nb, size_t r0,
                                   size_t cnt, double *dist)
{
    uint16_t L[PTAN_GROUP * (PGPU_KNN_MAXDIM / 2)];
    double t1[PTAN_GROUP], s1[PTAN_GROUP];
    size_t g, q, j;
    for (g = 0; g < cnt; g += PTAN_GROUP) {
        const size_t m = cnt - g < PTAN_GROUP ? cnt - g : PTAN_GROUP;
        ptan_avx2_layout(ix->descs + (r0 + g) * ix->dim, m, ix->dim, L, s1);
        for (j = 0; j < PTAN_GROUP; j++) t1[j] = j < m ? (double)ix->t1[r0 + g + j] : 0.0;
        for (q = 0; q < nb; q++) {
            const tq_t *tq1 = &tq[q];
            double *out = dist + q * TILE + g;
            unsigned keep;
            if (!tq1->fast) continue;
            keep = isinf(thr[q]) ? 0xffffu
                                 : ptan_avx2_filter(L, tq1->pe, tq1->pv, (size_t)tq1->np, t1, s1, tq1->t2, tq1->s2,
                                                    (100.0 - thr[q] - TAN_MARGIN) / 100.0);
            for (j = 0; j < m; j++) out[j] = keep >> j & 1 ? tanimoto_row(ix, tq1, r0 + g + j) : HUGE_VAL;
        }
    }
}
#endif

/* dist (nb, TILE) = the distances of the block's nb queries (queries, and
 * their fast-path preparations tq or NULL) to rows [r0, r0 + cnt), cnt <=
 * TILE. The distance table takes the whole block (each group of rows is
 * read once for all of them); with the Tanimoto fast path each query runs
 * over the tile, which stays in cache between them, and with AVX2 only the
 * rows that may lie within the query's threshold thr[q] get their distance
 * (the others +inf, see tanimoto_tile_filtered). */
static void tile_distances(const patina_index_t *ix, const uint8_t *queries, const tq_t *tq, const double *qself,
                           const double *thr, size_t nb, size_t r0, size_t cnt, void *pscratch, double *dist)
{
    const uint8_t *rows = ix->descs + r0 * ix->bytes;
    size_t q;
    int filtered = 0;
    if (qself) { /* sqfd with self terms: the cross block only, sig_sqfd's doubles */
        for (q = 0; q < nb; q++) {
            const float *qr = (const float *)(queries + q * ix->bytes);
            for (size_t j = 0; j < cnt; j++)
                dist[q * TILE + j] = sig_sqfd_self(qr, qself[q], (const float *)(rows + j * ix->bytes), ix->self[r0 + j]);
        }
        return;
    }
    if (!tq) {
        pdist_block(ix->dist_id, ix->elem, queries, nb, rows, ix->bytes, cnt, ix->dim, ix->sd, thr, pscratch, dist,
                    TILE);
        return;
    }
#if PDIST_HAVE_AVX2
    if (pdist_simd()) {
        tanimoto_tile_filtered(ix, tq, thr, nb, r0, cnt, dist);
        filtered = 1;
    }
#endif
    for (q = 0; q < nb; q++) {
        if (tq[q].fast) {
            if (!filtered) tanimoto_rows(ix, &tq[q], r0, cnt, dist + q * TILE);
        } else
            pdist_block(ix->dist_id, ix->elem, queries + q * ix->bytes, 1, rows, ix->bytes, cnt, ix->dim, ix->sd,
                        thr + q, pscratch, dist + q * TILE, TILE);
    }
}

/* ------------------------------------------------------------------- jobs */

/* A growable hit list (range search without max_hits). */
typedef struct hitvec {
    patina_hit_t *h;
    size_t n, cap;
} hitvec_t;

/* Tasks are (block of qb queries, chunk of rows); results are kept per
 * (query, chunk) slot, slot = q * nchunks + chunk. */
typedef struct job {
    const patina_index_t *ix;
    const uint8_t *queries;   /* (nq, bytes) */
    const tq_t *tq;           /* (nq) or NULL */
    const double *qself;      /* sqfd: (nq) the queries' self terms, or NULL */
    size_t nq, qb, nblocks, nchunks, chunk;
    int range;
    /* knn */
    size_t k;
    patina_hit_t *final;      /* (nq, k) the caller's hits */
    patina_hit_t *scratch;    /* (nq * nchunks, cap) when nchunks > 1 */
    size_t cap;
    size_t *cnt;              /* (nq * nchunks) hits per slot */
    /* range */
    double radius;
    size_t max_hits;
    hitvec_t *vec;            /* (nq * nchunks) */
    atomic_int nomem;
} job_t;

static void search_task(void *arg, size_t t, int worker)
{
    job_t *jb = arg;
    const patina_index_t *ix = jb->ix;
    const size_t b = t / jb->nchunks, c = t % jb->nchunks, q0 = b * jb->qb;
    const size_t nb = jb->nq - q0 < jb->qb ? jb->nq - q0 : jb->qb;
    const size_t r0 = c * jb->chunk, r1 = r0 + jb->chunk < ix->n ? r0 + jb->chunk : ix->n;
    double *dist = malloc(nb * TILE * sizeof *dist + pdist_block_scratch(nb, ix->dim)); /* (nb, TILE), then pdist's */
    double *thr = malloc(nb * sizeof *thr);
    heap_t *hp = calloc(nb, sizeof *hp);
    size_t r, i, j;
    (void)worker;

    if (!dist || !hp || !thr) {
        atomic_store(&jb->nomem, 1);
        goto done;
    }
    for (i = 0; i < nb; i++) {
        const size_t q = q0 + i, slot = q * jb->nchunks + c;
        if (!jb->range) {
            hp[i].h = jb->nchunks == 1 ? jb->final + q * jb->k : jb->scratch + slot * jb->cap;
            hp[i].cap = jb->nchunks == 1 ? (jb->k < ix->live ? jb->k : ix->live) : jb->cap;
        } else if (jb->max_hits) {
            hp[i].h = jb->vec[slot].h;
            hp[i].cap = jb->vec[slot].cap;
        }
    }
    for (r = r0; r < r1; r += TILE) {
        const size_t cnt = r1 - r < TILE ? r1 - r : TILE;
        for (i = 0; i < nb; i++) { /* a row farther than thr[i] cannot enter query i's result */
            thr[i] = jb->range ? jb->radius : HUGE_VAL;
            if ((!jb->range || jb->max_hits) && hp[i].n == hp[i].cap && hp[i].n && hp[i].h[0].distance < thr[i])
                thr[i] = hp[i].h[0].distance;
        }
        tile_distances(ix, jb->queries + q0 * ix->bytes, jb->tq ? jb->tq + q0 : NULL, jb->qself ? jb->qself + q0 : NULL,
                       thr, nb, r, cnt, dist + nb * TILE, dist);
        for (i = 0; i < nb; i++) {
            const double *dq = dist + i * TILE;
            hitvec_t *vec;
            if (!jb->range || jb->max_hits) {
                for (j = 0; j < cnt; j++)
                    if ((!jb->range || dq[j] <= jb->radius) && !(ix->dead && ix->dead[r + j]))
                        heap_push(&hp[i], dq[j], ix->ids[r + j]);
                continue;
            }
            vec = &jb->vec[(q0 + i) * jb->nchunks + c];
            for (j = 0; j < cnt; j++) {
                if (!(dq[j] <= jb->radius) || (ix->dead && ix->dead[r + j])) continue;
                if (vec->n == vec->cap) {
                    size_t ncap = vec->cap ? 2 * vec->cap : 64;
                    patina_hit_t *h = realloc(vec->h, ncap * sizeof *h);
                    if (!h) {
                        atomic_store(&jb->nomem, 1);
                        goto done;
                    }
                    vec->h = h;
                    vec->cap = ncap;
                }
                vec->h[vec->n].id = ix->ids[r + j];
                vec->h[vec->n++].distance = dq[j];
            }
        }
    }
    for (i = 0; i < nb; i++) {
        const size_t slot = (q0 + i) * jb->nchunks + c;
        if (!jb->range) {
            qsort(hp[i].h, hp[i].n, sizeof *hp[i].h, patina__hit_qsort_cmp);
            jb->cnt[slot] = hp[i].n;
        } else if (jb->max_hits) {
            qsort(hp[i].h, hp[i].n, sizeof *hp[i].h, patina__hit_qsort_cmp);
            jb->vec[slot].n = hp[i].n;
        } else if (jb->vec[slot].n) {
            qsort(jb->vec[slot].h, jb->vec[slot].n, sizeof *jb->vec[slot].h, patina__hit_qsort_cmp);
        }
    }
done:
    free(dist);
    free(thr);
    free(hp);
}

/* Merges the sorted chunk lists of query q into out (at most `limit`);
 * returns the count. */
static size_t merge_lists(patina_hit_t *out, size_t limit, patina_hit_t *const *lists,
                          const size_t *lens, size_t nlists, size_t *pos)
{
    size_t m = 0, l;
    memset(pos, 0, nlists * sizeof *pos);
    while (m < limit) {
        size_t best = nlists;
        for (l = 0; l < nlists; l++)
            if (pos[l] < lens[l] &&
                (best == nlists || patina__hit_cmp(&lists[l][pos[l]], &lists[best][pos[best]]) < 0))
                best = l;
        if (best == nlists) break;
        out[m++] = lists[best][pos[best]++];
    }
    return m;
}

/* Resolves threads, the blocks of queries and the chunking of each
 * query's rows. A block holds up to QB_MAX queries (their doubles within
 * QB_BYTES, so they stay in L2 while a group of rows serves them all),
 * fewer where that leaves less than two blocks per thread; when there are
 * fewer blocks than threads, each query's rows are cut into chunks. */
static void plan(const patina_index_t *ix, size_t nq, int threads, int *nthreads, size_t *qb, size_t *nblocks,
                 size_t *nchunks, size_t *chunk)
{
    size_t want, maxc, b = (nq + 2 * (size_t)threads - 1) / (2 * (size_t)threads);
    if (b > QB_MAX) b = QB_MAX;
    if (b > QB_BYTES / (ix->dim * sizeof(double) + 1)) b = QB_BYTES / (ix->dim * sizeof(double) + 1);
    *qb = b < 1 ? 1 : b;
    *nblocks = nq ? (nq + *qb - 1) / *qb : 0;
    *nchunks = 1;
    if (*nblocks < (size_t)threads && ix->n >= 2 * PATINA_KNN_MIN_CHUNK) {
        want = (4 * (size_t)threads + *nblocks - 1) / *nblocks;
        maxc = ix->n / PATINA_KNN_MIN_CHUNK;
        *nchunks = want < maxc ? want : maxc;
    }
    *chunk = ix->n ? (ix->n + *nchunks - 1) / *nchunks : 1;
    *nchunks = ix->n ? (ix->n + *chunk - 1) / *chunk : 1;
    /* Tiny problems are not worth waking threads for. */
    if ((double)ix->n * (double)nq < 4096.0) threads = 1;
    if ((size_t)threads > *nblocks * *nchunks) threads = (int)(*nblocks * *nchunks);
    *nthreads = threads < 1 ? 1 : threads;
}

/* Runs the job's tasks on the context's workers (taking its turn), or
 * without a context on a pool of nthreads made for this call. */
static patina_status run_job(patina_context_t *ctx, job_t *jb, int nthreads)
{
    patina_pool_t *pool = NULL;
    const size_t ntasks = jb->nblocks * jb->nchunks;
    int own;
    if (nthreads <= 1) {
        patina_pool_run(NULL, ntasks, search_task, jb);
        return PATINA_OK;
    }
    PATINA_TRY(patina__workers_begin(ctx, nthreads, &pool, &own));
    patina_pool_run(pool, ntasks, search_task, jb);
    patina__workers_end(ctx, pool, own);
    return PATINA_OK;
}

static int cpu_threads(patina_context_t *ctx)
{
    return ctx ? patina_context_threads(ctx) : patina_cpu_count();
}

/* sqfd: the queries' self terms Sqq (NULL for other distances). The
 * queries were checked (check_nan runs the record check). */
static patina_status prepare_self(const patina_index_t *ix, const uint8_t *queries, size_t nq, double **out)
{
    *out = NULL;
    if (!ix->self || nq == 0) return PATINA_OK;
    if (!(*out = malloc(nq * sizeof **out)))
        return patina__fail(PATINA_E_NOMEM, "search: out of memory preparing %zu queries", nq);
    for (size_t q = 0; q < nq; q++) (*out)[q] = sig_self((const float *)(queries + q * ix->bytes));
    return PATINA_OK;
}

static patina_status prepare_queries(const patina_index_t *ix, const uint8_t *queries, size_t nq,
                                     tq_t **out)
{
    size_t q;
    *out = NULL;
    if (!ix->t1 || ix->n == 0) return PATINA_OK;
    *out = malloc(nq * sizeof **out);
    if (!*out) return patina__fail(PATINA_E_NOMEM, "search: out of memory preparing %zu queries", nq);
    for (q = 0; q < nq; q++) prepare_query(&(*out)[q], queries + q * ix->dim, ix->dim);
    return PATINA_OK;
}

void patina_search_opts_init(patina_search_opts_t *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->device = PATINA_DEVICE_AUTO;
}

/* The device a search runs on. The GPU answers k-NN (k <= PGPU_KNN_KMAX)
 * and range search for every distance of the table and for sqfd (not
 * rootsift_ratio); AUTO takes it for indexes of GPU_MIN_ROWS rows or more
 * (sqfd: SQFD_GPU_MIN_ROWS, a distance costing thousands of exps). */
#define SQFD_GPU_MIN_ROWS 256
static patina_status search_device(patina_context_t *ctx, const patina_index_t *ix,
                                   const patina_search_opts_t *o, int range, size_t k, patina_device *dev)
{
    const int has = ix->dist->gpu || ix->self != NULL, can = has && (range || k <= PGPU_KNN_KMAX);
    const size_t min_rows = ix->self ? SQFD_GPU_MIN_ROWS : GPU_MIN_ROWS;
    switch (o->device) {
    case PATINA_DEVICE_CPU: *dev = PATINA_DEVICE_CPU; return PATINA_OK;
    case PATINA_DEVICE_AUTO:
        *dev = can && ctx && ix->n >= min_rows && patina__context_gpu_usable(ctx) ? PATINA_DEVICE_GPU
                                                                                : PATINA_DEVICE_CPU;
        return PATINA_OK;
    case PATINA_DEVICE_GPU:
        if (!ctx) return patina__fail(PATINA_E_INVALID, "search: a GPU search needs a context");
        if (!has)
            return patina__fail(PATINA_E_UNAVAILABLE, "search: distance %s has no GPU implementation",
                                ix->dist->name);
        if (!can)
            return patina__fail(PATINA_E_UNAVAILABLE, "search: k = %zu is over the GPU's limit of %d (device cpu or auto)",
                                k, PGPU_KNN_KMAX);
        *dev = PATINA_DEVICE_GPU;
        return PATINA_OK;
    case PATINA_DEVICE_HYBRID: break;
    }
    return patina__fail(PATINA_E_INVALID, "search: device %s is not a search device",
                        patina_device_name(o->device) ? patina_device_name(o->device) : "(unknown)");
}

/* The checks of patina_index_knn (nq = 0 is valid and does nothing). */
static patina_status knn_args(const patina_index_t *idx, const void *queries, size_t nq, size_t k,
                              const patina_hit_t *hits, const size_t *counts)
{
    if (!idx) return patina__fail(PATINA_E_INVALID, "search: null index");
    if (k == 0) return patina__fail(PATINA_E_INVALID, "search: k = 0");
    if (k > K_MAX) return patina__fail(PATINA_E_LIMIT, "search: k = %zu is over the limit of %d", k, K_MAX);
    if (nq == 0) return PATINA_OK;
    if (!queries || !hits || !counts) return patina__fail(PATINA_E_INVALID, "search: null queries, hits or counts");
    if (nq > SIZE_MAX / sizeof *hits / k) return patina__fail(PATINA_E_LIMIT, "search: %zu queries x k = %zu is too many", nq, k);
    return check_nan(idx, queries, nq, "query");
}

/* counts[q] = min(k, n); slots past it padded with {id 0, +inf}. */
static void knn_pad(const patina_index_t *idx, size_t nq, size_t k, patina_hit_t *hits, size_t *counts)
{
    size_t q, i, per = k < idx->live ? k : idx->live;
    for (q = 0; q < nq; q++) {
        counts[q] = per;
        for (i = per; i < k; i++) {
            hits[q * k + i].id = 0;
            hits[q * k + i].distance = HUGE_VAL;
        }
    }
}

static patina_status knn_impl(patina_context_t *ctx, const patina_index_t *idx, const void *queries,
                              size_t nq, size_t k, const patina_search_opts_t *opts_in, patina_hit_t *hits,
                              size_t *counts);
static patina_status range_impl(patina_context_t *ctx, const patina_index_t *idx, const void *queries,
                                size_t nq, double radius, const patina_search_opts_t *opts_in,
                                patina_hit_t **hits, size_t *counts);

/* The queries flagged in cpu[] (n of nq) answered on the CPU: gathered,
 * searched, scattered back (k-NN: hits/counts rows; range: hits[q] lists). */
static patina_status cpu_rest(patina_context_t *ctx, const patina_index_t *ix, const uint8_t *queries, size_t nq,
                              const uint8_t *cpu, size_t k, int range, double radius, size_t max_hits,
                              patina_hit_t *hits, patina_hit_t **rhits, size_t *counts)
{
    patina_search_opts_t o;
    size_t n = 0, q, j = 0;
    uint8_t *sub;
    patina_hit_t *sh = NULL, **srh = NULL;
    size_t *sc = NULL;
    patina_status s;
    for (q = 0; q < nq; q++) n += cpu[q] != 0;
    if (n == 0) return PATINA_OK;
    patina_search_opts_init(&o);
    o.device = PATINA_DEVICE_CPU;
    o.max_hits = max_hits;
    sub = malloc(n * ix->bytes);
    sc = malloc(n * sizeof *sc);
    if (range) srh = calloc(n, sizeof *srh);
    else sh = malloc(n * k * sizeof *sh);
    if (!sub || !sc || (range ? !srh : !sh)) {
        s = patina__fail(PATINA_E_NOMEM, "search: out of memory");
        goto done;
    }
    for (q = 0; q < nq; q++)
        if (cpu[q]) memcpy(sub + j++ * ix->bytes, queries + q * ix->bytes, ix->bytes);
    s = range ? range_impl(ctx, ix, sub, n, radius, &o, srh, sc) : knn_impl(ctx, ix, sub, n, k, &o, sh, sc);
    for (q = 0, j = 0; s == PATINA_OK && q < nq; q++) {
        if (!cpu[q]) continue;
        if (range) {
            rhits[q] = srh[j];
            srh[j] = NULL;
        } else {
            memcpy(hits + q * k, sh + j * k, k * sizeof *sh);
        }
        counts[q] = sc[j++];
    }
done:
    for (j = 0; srh && j < n; j++) free(srh[j]);
    free(srh);
    free(sh);
    free(sc);
    free(sub);
    return s;
}

/* The index as the GPU search sees it (borrowed arrays). */
static void gpu_view(const patina_index_t *ix, pgpu_knn_index_t *view)
{
    memset(view, 0, sizeof *view);
    view->serial = ix->serial;
    view->n = ix->n;
    view->dim = ix->dim;
    view->bytes = ix->bytes;
    view->elem = ix->elem;
    view->dist = (int)ix->dist_id;
    view->ids = ix->ids;
    view->descs = ix->descs;
    view->sd = ix->sd;
    view->live = ix->live;
    view->dead = ix->dead;
    view->dead_gen = ix->dead_gen;
    view->rm_log = ix->rm_log;
}

static void view_fast(const patina_index_t *ix, pgpu_knn_index_t *view)
{
    view->t1 = ix->t1;
    view->c3 = ix->c3;
    view->ptab = &ix->ptab[0][0];
    view->ptab_rows = ix->t_max + 1;
}

/* A GPU call's account: paths[] from the GPU, the rest on the CPU. */
static void note_stats(patina_search_stats_t *st, const size_t paths[5], const uint8_t *cpu, size_t nq)
{
    if (!st) return;
    st->gpu_tensor = paths[0];
    st->gpu_filter = paths[1];
    st->gpu_exact = paths[2];
    st->chunks = paths[3];
    st->host_bytes = paths[4];
    st->cpu = 0;
    for (size_t q = 0; q < nq; q++) st->cpu += cpu[q] != 0;
}

/* The queries' elements as doubles (the definition kernels' input). */
static patina_status queries_as_doubles(const patina_index_t *ix, const uint8_t *queries, size_t nq, double **out)
{
    double *qv = malloc(nq * ix->dim * sizeof *qv + 1);
    *out = qv;
    if (!qv) return patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu queries", nq);
    for (size_t q = 0; q < nq; q++)
        for (size_t i = 0; i < ix->dim; i++) qv[q * ix->dim + i] = pdist_elem(ix->elem, queries + q * ix->bytes, i);
    return PATINA_OK;
}

/* The GPU search under the context's GPU turn: the device copy of the index
 * is made or found, used and kept in the context while the turn is held, so
 * no other thread can drop it meanwhile. The queries the GPU leaves to the
 * CPU are answered after the turn. */
static patina_status knn_gpu(patina_context_t *ctx, const patina_index_t *ix, const uint8_t *queries,
                             size_t nq, size_t k, patina_hit_t *hits, size_t *counts, patina_search_stats_t *stats)
{
    size_t paths[5] = {0, 0, 0, 0, 0};
    pgpu_knn_index_t view;
    patina_gpu_t *g;
    tq_t *tq = NULL;
    double *qv = NULL;
    uint8_t *cpu = NULL;
    patina_status s;
    size_t q;
    gpu_view(ix, &view);
    PATINA_TRY(prepare_queries(ix, queries, nq, &tq));
    for (q = 0; tq && q < nq; q++)
        if (!tq[q].fast) break;
    if (tq && q == nq) { /* every query takes the fast path */
        view_fast(ix, &view);
    } else if (ix->dist_id == PDIST_TANIMOTO && ix->t1) {
        /* A query with an element above 7: the definition for all of them,
         * on a device copy of its own (row-major). */
        view.serial = ix->serial | (UINT64_C(1) << 63);
    }
    if (!view.t1 && (s = queries_as_doubles(ix, queries, nq, &qv)) != PATINA_OK) { /* the definition kernels' input */
        free(tq);
        return s;
    }
    if (!(cpu = malloc(nq))) {
        free(tq);
        free(qv);
        return patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu queries", nq);
    }
    s = patina__context_gpu_acquire(ctx, &g);
    if (s == PATINA_OK) {
        s = patina_gpu_knn(g, &view, queries, qv, nq, k, hits, counts, cpu, paths);
        patina__context_gpu_release(ctx);
    }
    if (s == PATINA_OK) s = cpu_rest(ctx, ix, queries, nq, cpu, k, 0, 0.0, 0, hits, NULL, counts);
    if (s == PATINA_OK) note_stats(stats, paths, cpu, nq);
    free(cpu);
    free(tq);
    free(qv);
    return s;
}

/* Range search on the GPU: the fast path when every query takes it, else
 * the definition path (as knn_gpu); the queries the GPU leaves go to the
 * CPU. */
static patina_status range_gpu(patina_context_t *ctx, const patina_index_t *ix, const uint8_t *queries,
                               size_t nq, double radius, size_t max_hits, patina_hit_t **hits, size_t *counts,
                               patina_search_stats_t *stats)
{
    size_t paths[5] = {0, 0, 0, 0, 0};
    pgpu_knn_index_t view;
    patina_gpu_t *g;
    tq_t *tq = NULL;
    double *qv = NULL;
    uint8_t *cpu = NULL;
    patina_status s;
    size_t q;
    gpu_view(ix, &view);
    PATINA_TRY(prepare_queries(ix, queries, nq, &tq));
    for (q = 0; tq && q < nq; q++)
        if (!tq[q].fast) break;
    if (tq && q == nq) {
        view_fast(ix, &view);
    } else {
        if (ix->dist_id == PDIST_TANIMOTO && ix->t1) view.serial = ix->serial | (UINT64_C(1) << 63);
        if ((s = queries_as_doubles(ix, queries, nq, &qv)) != PATINA_OK) {
            free(tq);
            return s;
        }
    }
    if (!(cpu = malloc(nq))) {
        free(tq);
        free(qv);
        return patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu queries", nq);
    }
    s = patina__context_gpu_acquire(ctx, &g);
    if (s == PATINA_OK) {
        s = patina_gpu_range(g, &view, queries, qv, nq, radius, max_hits, hits, counts, cpu, paths);
        patina__context_gpu_release(ctx);
    }
    if (s == PATINA_OK) s = cpu_rest(ctx, ix, queries, nq, cpu, 0, 1, radius, max_hits, NULL, hits, counts);
    if (s == PATINA_OK) note_stats(stats, paths, cpu, nq);
    free(cpu);
    free(tq);
    free(qv);
    return s;
}

/* ---- SQFD on the GPU: the GPU filters (src/gpu/sqfd.cu), the CPU ranks ----
 * The GPU hands back, per query, rows that hold the whole answer (proven
 * error bound on its float SQFDs); their distances are computed here with
 * sig_sqfd_self (the definition's doubles) and ranked by (distance, id), so
 * the answer is the CPU search's bit for bit. */

typedef struct sq_rank {
    const patina_index_t *ix;
    const uint8_t *queries;
    const double *qself;
    uint32_t **cand;
    size_t *ncand;
    uint8_t *cpu;
    size_t k;             /* k-NN (0: range) */
    double radius;
    size_t max_hits;
    patina_hit_t *hits;   /* k-NN (nq, k) */
    patina_hit_t **rhits; /* range */
    size_t *counts;
    atomic_int nomem;
} sq_rank_t;

static void sq_rank_task(void *arg, size_t q, int worker)
{
    sq_rank_t *j = arg;
    const patina_index_t *ix = j->ix;
    const float *qr = (const float *)(j->queries + q * ix->bytes);
    const size_t nc = j->ncand[q];
    patina_hit_t *h;
    size_t i, m = 0;
    (void)worker;
    if (j->cpu[q]) return;
    if (nc == 0) {
        if (j->k) j->cpu[q] = 1; /* cannot happen (at least min(k, n) candidates): the CPU answers */
        return;
    }
    if (!(h = malloc(nc * sizeof *h))) {
        atomic_store(&j->nomem, 1);
        return;
    }
    for (i = 0; i < nc; i++) {
        const uint32_t r = j->cand[q][i];
        const double d = sig_sqfd_self(qr, j->qself[q], (const float *)(ix->descs + (size_t)r * ix->bytes), ix->self[r]);
        if (!j->k && !(d <= j->radius)) continue;
        h[m].id = ix->ids[r];
        h[m++].distance = d;
    }
    qsort(h, m, sizeof *h, patina__hit_qsort_cmp);
    if (j->k) {
        const size_t per = j->counts[q];
        if (m < per) {
            j->cpu[q] = 1;
        } else {
            memcpy(j->hits + q * j->k, h, per * sizeof *h);
        }
        free(h);
        return;
    }
    if (j->max_hits && m > j->max_hits) m = j->max_hits;
    j->counts[q] = m;
    if (m == 0) {
        free(h);
        return;
    }
    j->rhits[q] = h;
}

/* k-NN (k > 0; hits padded by the caller) or range (k = 0) on the GPU.
 * auto_dev: a GPU that cannot take the index (its copy beyond the memory
 * budget) leaves the call to the CPU instead of failing it. */
static patina_status sqfd_gpu(patina_context_t *ctx, const patina_index_t *ix, const uint8_t *queries, size_t nq,
                              size_t k, double radius, size_t max_hits, patina_hit_t *hits, patina_hit_t **rhits,
                              size_t *counts, patina_search_stats_t *stats, int auto_dev)
{
    pgpu_sqfd_index_t view;
    pgpu_sqfd_stats_t gst;
    sq_rank_t j;
    patina_gpu_t *g;
    patina_pool_t *pool = NULL;
    double *qself = NULL;
    uint32_t **cand = calloc(nq, sizeof *cand);
    size_t *ncand = calloc(nq, sizeof *ncand), q;
    uint8_t *cpu = malloc(nq);
    patina_status s;
    int own = 0;
    if (!cand || !ncand || !cpu) {
        free(cand);
        free(ncand);
        free(cpu);
        return patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu queries", nq);
    }
    memset(&view, 0, sizeof view);
    memset(&gst, 0, sizeof gst);
    view.serial = ix->serial;
    view.gen = ix->dead_gen;
    view.n = ix->n;
    view.dim = ix->dim;
    view.recs = (const float *)ix->descs;
    view.self = ix->self;
    view.dead = ix->dead;
    s = prepare_self(ix, queries, nq, &qself);
    if (s == PATINA_OK && (s = patina__context_gpu_acquire(ctx, &g)) == PATINA_OK) {
        s = patina_gpu_sqfd(g, &view, (const float *)queries, qself, nq, k, radius, cand, ncand, cpu, &gst);
        patina__context_gpu_release(ctx);
    }
    if (s != PATINA_OK && auto_dev && (s == PATINA_E_LIMIT || s == PATINA_E_NOMEM || s == PATINA_E_UNAVAILABLE)) {
        patina_clear_error(); /* AUTO: the CPU answers every query */
        memset(cpu, 1, nq);
        s = PATINA_OK;
    }
    if (s == PATINA_OK) {
        memset(&j, 0, sizeof j);
        j.ix = ix;
        j.queries = queries;
        j.qself = qself;
        j.cand = cand;
        j.ncand = ncand;
        j.cpu = cpu;
        j.k = k;
        j.radius = radius;
        j.max_hits = max_hits;
        j.hits = hits;
        j.rhits = rhits;
        j.counts = counts;
        if (nq > 1) s = patina__workers_begin(ctx, 0, &pool, &own);
        if (s == PATINA_OK) {
            patina_pool_run(pool, nq, sq_rank_task, &j);
            if (pool) patina__workers_end(ctx, pool, own);
            if (atomic_load(&j.nomem)) s = patina__fail(PATINA_E_NOMEM, "search: out of memory ranking candidates");
        }
    }
    if (s == PATINA_OK)
        s = cpu_rest(ctx, ix, queries, nq, cpu, k, k == 0, radius, max_hits, hits, rhits, counts);
    if (s == PATINA_OK && stats) {
        stats->cpu = 0;
        for (q = 0; q < nq; q++) stats->cpu += cpu[q] != 0;
        stats->gpu_filter = nq - stats->cpu;
        stats->chunks = gst.chunks;
        stats->host_bytes = gst.host_bytes;
    }
    for (q = 0; q < nq; q++) free(cand[q]);
    free(cand);
    free(ncand);
    free(cpu);
    free(qself);
    return s;
}

static patina_status knn_impl(patina_context_t *ctx, const patina_index_t *idx, const void *queries,
                              size_t nq, size_t k, const patina_search_opts_t *opts_in, patina_hit_t *hits,
                              size_t *counts)
{
    patina_search_opts_t opts;
    patina_device dev;
    job_t jb;
    tq_t *tq = NULL;
    double *qself = NULL;
    patina_status s;
    size_t q, per, *pos = NULL;
    patina_hit_t **lists = NULL;
    int nthreads;

    PATINA_TRY(knn_args(idx, queries, nq, k, hits, counts));
    patina_search_opts_init(&opts);
    if (opts_in) opts = *opts_in;
    PATINA_TRY(search_device(ctx, idx, &opts, 0, k, &dev));
    if (opts.stats) memset(opts.stats, 0, sizeof *opts.stats);
    if (nq == 0) return PATINA_OK;
    knn_pad(idx, nq, k, hits, counts);
    if (idx->live == 0) return PATINA_OK;
    if (dev == PATINA_DEVICE_GPU && idx->self)
        return sqfd_gpu(ctx, idx, queries, nq, k, 0.0, 0, hits, NULL, counts, opts.stats,
                        opts.device == PATINA_DEVICE_AUTO);
    if (dev == PATINA_DEVICE_GPU) return knn_gpu(ctx, idx, queries, nq, k, hits, counts, opts.stats);
    if (opts.stats) opts.stats->cpu = nq;
    per = counts[0];

    memset(&jb, 0, sizeof jb);
    plan(idx, nq, cpu_threads(ctx), &nthreads, &jb.qb, &jb.nblocks, &jb.nchunks, &jb.chunk);
    jb.ix = idx;
    jb.queries = queries;
    jb.nq = nq;
    jb.k = k;
    jb.final = hits;
    jb.cap = k < jb.chunk ? k : jb.chunk;
    s = prepare_queries(idx, queries, nq, &tq);
    jb.tq = tq;
    if (s == PATINA_OK) s = prepare_self(idx, queries, nq, &qself);
    jb.qself = qself;
    if (s == PATINA_OK && !(jb.cnt = malloc(nq * jb.nchunks * sizeof *jb.cnt)))
        s = patina__fail(PATINA_E_NOMEM, "search: out of memory");
    if (s == PATINA_OK && jb.nchunks > 1) {
        if (nq * jb.nchunks > SIZE_MAX / sizeof *jb.scratch / jb.cap ||
            !(jb.scratch = malloc(nq * jb.nchunks * jb.cap * sizeof *jb.scratch)) ||
            !(lists = malloc(jb.nchunks * sizeof *lists)) || !(pos = malloc(jb.nchunks * sizeof *pos)))
            s = patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu x %zu partial results",
                             nq * jb.nchunks, jb.cap);
    }
    if (s == PATINA_OK) s = run_job(ctx, &jb, nthreads);
    if (s == PATINA_OK && atomic_load(&jb.nomem)) s = patina__fail(PATINA_E_NOMEM, "search: out of memory");
    if (s == PATINA_OK && jb.nchunks > 1) {
        /* Merge each query's chunk lists (each sorted) into its k best. */
        for (q = 0; q < nq; q++) {
            size_t c;
            for (c = 0; c < jb.nchunks; c++) lists[c] = jb.scratch + (q * jb.nchunks + c) * jb.cap;
            if (merge_lists(hits + q * k, per, lists, jb.cnt + q * jb.nchunks, jb.nchunks, pos) != per)
                s = patina__fail(PATINA_E_INTERNAL, "search: merge lost hits");
        }
    }
    free(pos);
    free(lists);
    free(jb.scratch);
    free(jb.cnt);
    free(tq);
    free(qself);
    return s;
}

static patina_status range_impl(patina_context_t *ctx, const patina_index_t *idx, const void *queries,
                                size_t nq, double radius, const patina_search_opts_t *opts_in,
                                patina_hit_t **hits, size_t *counts)
{
    patina_search_opts_t opts;
    patina_device dev;
    job_t jb;
    tq_t *tq = NULL;
    double *qself = NULL;
    patina_status s;
    size_t q, t, nslots, max_hits, *pos = NULL, *lens = NULL;
    patina_hit_t **lists = NULL;
    int nthreads;

    if (!idx) return patina__fail(PATINA_E_INVALID, "search: null index");
    if (isnan(radius)) return patina__fail(PATINA_E_INVALID, "search: radius is NaN");
    if (radius < 0.0) return patina__fail(PATINA_E_INVALID, "search: radius %g is negative", radius);
    patina_search_opts_init(&opts);
    if (opts_in) opts = *opts_in;
    PATINA_TRY(search_device(ctx, idx, &opts, 1, 0, &dev));
    if (opts.stats) memset(opts.stats, 0, sizeof *opts.stats);
    max_hits = opts.max_hits;
    if (nq == 0) return PATINA_OK;
    if (!queries || !hits || !counts) return patina__fail(PATINA_E_INVALID, "search: null queries, hits or counts");
    for (q = 0; q < nq; q++) {
        hits[q] = NULL;
        counts[q] = 0;
    }
    PATINA_TRY(check_nan(idx, queries, nq, "query"));
    if (idx->live == 0) return PATINA_OK;
    if (dev == PATINA_DEVICE_GPU) {
        s = idx->self ? sqfd_gpu(ctx, idx, queries, nq, 0, radius, max_hits, NULL, hits, counts, opts.stats,
                                 opts.device == PATINA_DEVICE_AUTO)
                      : range_gpu(ctx, idx, queries, nq, radius, max_hits, hits, counts, opts.stats);
        if (s != PATINA_OK)
            for (q = 0; q < nq; q++) {
                free(hits[q]);
                hits[q] = NULL;
                counts[q] = 0;
            }
        return s;
    }
    if (opts.stats) opts.stats->cpu = nq;

    memset(&jb, 0, sizeof jb);
    plan(idx, nq, cpu_threads(ctx), &nthreads, &jb.qb, &jb.nblocks, &jb.nchunks, &jb.chunk);
    jb.ix = idx;
    jb.queries = queries;
    jb.nq = nq;
    jb.range = 1;
    jb.radius = radius;
    jb.max_hits = max_hits;
    nslots = nq * jb.nchunks;
    s = prepare_queries(idx, queries, nq, &tq);
    jb.tq = tq;
    if (s == PATINA_OK) s = prepare_self(idx, queries, nq, &qself);
    jb.qself = qself;
    if (s == PATINA_OK && (!(jb.vec = calloc(nslots, sizeof *jb.vec)) ||
                           !(lists = malloc(jb.nchunks * sizeof *lists)) ||
                           !(lens = malloc(jb.nchunks * sizeof *lens)) ||
                           !(pos = malloc(jb.nchunks * sizeof *pos))))
        s = patina__fail(PATINA_E_NOMEM, "search: out of memory");
    if (s == PATINA_OK && max_hits) {
        /* Each (query, chunk) slot keeps its nearest max_hits in a heap. */
        size_t cap = max_hits < jb.chunk ? max_hits : jb.chunk;
        for (t = 0; t < nslots && s == PATINA_OK; t++) {
            jb.vec[t].cap = cap;
            if (!(jb.vec[t].h = malloc(cap * sizeof *jb.vec[t].h)))
                s = patina__fail(PATINA_E_NOMEM, "search: out of memory");
        }
    }
    if (s == PATINA_OK) s = run_job(ctx, &jb, nthreads);
    if (s == PATINA_OK && atomic_load(&jb.nomem))
        s = patina__fail(PATINA_E_NOMEM, "search: out of memory collecting range hits");
    for (q = 0; q < nq && s == PATINA_OK; q++) {
        size_t c, total = 0;
        for (c = 0; c < jb.nchunks; c++) {
            lists[c] = jb.vec[q * jb.nchunks + c].h;
            lens[c] = jb.vec[q * jb.nchunks + c].n;
            total += lens[c];
        }
        if (max_hits && total > max_hits) total = max_hits;
        if (total == 0) continue;
        if (!(hits[q] = malloc(total * sizeof *hits[q]))) {
            s = patina__fail(PATINA_E_NOMEM, "search: out of memory");
            break;
        }
        counts[q] = merge_lists(hits[q], total, lists, lens, jb.nchunks, pos);
    }
    if (s != PATINA_OK)
        for (q = 0; q < nq; q++) {
            free(hits[q]);
            hits[q] = NULL;
            counts[q] = 0;
        }
    for (t = 0; jb.vec && t < nslots; t++) free(jb.vec[t].h);
    free(jb.vec);
    free(pos);
    free(lens);
    free(lists);
    free(tq);
    free(qself);
    return s;
}

/* The public calls hold the index's read lock for the whole search (GPU
 * and CPU parts): a put or remove waits for them, and they for it. */
patina_status patina_index_knn(patina_context_t *ctx, const patina_index_t *idx, const void *queries,
                               size_t nq, size_t k, const patina_search_opts_t *opts, patina_hit_t *hits,
                               size_t *counts)
{
    patina_status s;
    if (!idx) return patina__fail(PATINA_E_INVALID, "search: null index");
    rd_lock(idx);
    s = knn_impl(ctx, idx, queries, nq, k, opts, hits, counts);
    rd_unlock(idx);
    return s;
}

patina_status patina_index_range(patina_context_t *ctx, const patina_index_t *idx, const void *queries,
                                 size_t nq, double radius, const patina_search_opts_t *opts,
                                 patina_hit_t **hits, size_t *counts)
{
    patina_status s;
    if (!idx) return patina__fail(PATINA_E_INVALID, "search: null index");
    rd_lock(idx);
    s = range_impl(ctx, idx, queries, nq, radius, opts, hits, counts);
    rd_unlock(idx);
    return s;
}
