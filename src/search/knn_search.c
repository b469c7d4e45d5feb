/* The search engine: exact k-NN and range search (include/patina/search.h)
 * on the CPU, and the dispatch to the GPU search (src/gpu/knn.cu). Not
 * here: the index object it searches (knn.c: rows, building, live updates;
 * the struct is in search/knn_internal.h).
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
#include "search/knn_internal.h"
#include "search/knn_simd.h"

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
/* ---------------------------------------------------------------- ordering */
/* The result order and the bounded heap are in search/knn.h (shared with
 * the GPU search's host merge). */
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

/* --------------------------------------------------------------- distances */

/* 1 when query a takes the fast path (no element above 7: prepare_query's test). */
static int query_fast(const uint8_t *a, size_t dim)
{
    for (size_t i = 0; i < dim; i++)
        if (a[i] > 7) return 0;
    return 1;
}

static void prepare_query(tq_t *q, const uint8_t *a, size_t dim)
{
    double t2 = 0.0, c2 = 0.0;
    size_t i;
    q->nnz = 0;
    if (!(q->fast = query_fast(a, dim))) return;
    for (i = 0; i < dim; i++) t2 += (double)a[i];
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
static void tile_distances(const patina_index_t *ix, const double *param, const uint8_t *queries, const tq_t *tq,
                           const double *qself, const double *thr, size_t nb, size_t r0, size_t cnt, void *pscratch,
                           double *dist)
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
        pdist_block(ix->dist_id, ix->elem, queries, nb, rows, ix->bytes, cnt, ix->dim, param, thr, pscratch, dist,
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
            pdist_block(ix->dist_id, ix->elem, queries + q * ix->bytes, 1, rows, ix->bytes, cnt, ix->dim, param,
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
    /* The rows searched: the indexes ixs[0 .. nix) one after the other, as
     * one run of rows (index i's row r is row base[i] + r); a chunk may span
     * several of them and keeps one heap per query across them, so a later
     * index is filtered with the k-th distance the earlier ones gave. */
    const patina_index_t *const *ixs;
    const size_t *base;       /* (nix + 1) */
    size_t nix, n, live;      /* rows in all (removed ones included) and rows not removed */
    const patina_index_t *ix; /* ixs[0]: the layout (dim, bytes, distance) every index shares */
    const uint8_t *queries;   /* (nq, bytes) */
    const tq_t *tq;           /* (nq) or NULL (used on the indexes with the fast path) */
    const double *qself;      /* sqfd: (nq) the queries' self terms, or NULL */
    const double *ratio;      /* rootsift_ratio's ratio (the distance's parameter; std_l2's is each index's sd) */
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

/* Rows [r0, r1) of index ix (local rows), tile by tile, into the block's
 * heaps hp (k-NN, range with max_hits) or its lists (range). */
static int search_rows(job_t *jb, const patina_index_t *ix, size_t q0, size_t nb, size_t c, size_t r0, size_t r1,
                       heap_t *hp, double *thr, double *dist)
{
    const double *param = ix->dist->ratio ? jb->ratio : ix->sd;
    const tq_t *tq = jb->tq && ix->t1 ? jb->tq + q0 : NULL;
    const double *qself = jb->qself && ix->self ? jb->qself + q0 : NULL;
    size_t r, i, j;
    for (r = r0; r < r1; r += TILE) {
        const size_t cnt = r1 - r < TILE ? r1 - r : TILE;
        for (i = 0; i < nb; i++) { /* a row farther than thr[i] cannot enter query i's result */
            thr[i] = jb->range ? jb->radius : HUGE_VAL;
            if ((!jb->range || jb->max_hits) && hp[i].n == hp[i].cap && hp[i].n && hp[i].h[0].distance < thr[i])
                thr[i] = hp[i].h[0].distance;
        }
        tile_distances(ix, param, jb->queries + q0 * ix->bytes, tq, qself, thr, nb, r, cnt, dist + nb * TILE, dist);
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
                    if (!h) return 0;
                    vec->h = h;
                    vec->cap = ncap;
                }
                vec->h[vec->n].id = ix->ids[r + j];
                vec->h[vec->n++].distance = dq[j];
            }
        }
    }
    return 1;
}

static void search_task(void *arg, size_t t, int worker)
{
    job_t *jb = arg;
    const size_t b = t / jb->nchunks, c = t % jb->nchunks, q0 = b * jb->qb;
    const size_t nb = jb->nq - q0 < jb->qb ? jb->nq - q0 : jb->qb;
    const size_t r0 = c * jb->chunk, r1 = r0 + jb->chunk < jb->n ? r0 + jb->chunk : jb->n;
    double *dist = malloc(nb * TILE * sizeof *dist + pdist_block_scratch(nb, jb->ix->dim)); /* (nb, TILE), then pdist's */
    double *thr = malloc(nb * sizeof *thr);
    heap_t *hp = calloc(nb, sizeof *hp);
    size_t i, x;
    (void)worker;

    if (!dist || !hp || !thr) {
        atomic_store(&jb->nomem, 1);
        goto done;
    }
    for (i = 0; i < nb; i++) {
        const size_t q = q0 + i, slot = q * jb->nchunks + c;
        if (!jb->range) {
            hp[i].h = jb->nchunks == 1 ? jb->final + q * jb->k : jb->scratch + slot * jb->cap;
            hp[i].cap = jb->nchunks == 1 ? (jb->k < jb->live ? jb->k : jb->live) : jb->cap;
        } else if (jb->max_hits) {
            hp[i].h = jb->vec[slot].h;
            hp[i].cap = jb->vec[slot].cap;
        }
    }
    /* the indexes the chunk's rows fall in, in order, each over its part of [r0, r1) */
    for (x = 0; x < jb->nix; x++) {
        const size_t b0 = jb->base[x], b1 = jb->base[x + 1];
        if (b1 <= r0 || b0 >= r1) continue;
        if (!search_rows(jb, jb->ixs[x], q0, nb, c, (r0 > b0 ? r0 : b0) - b0, (r1 < b1 ? r1 : b1) - b0, hp, thr,
                         dist)) {
            atomic_store(&jb->nomem, 1);
            goto done;
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
 * fewer where that leaves less than two blocks per thread but not fewer
 * than qb_min (the distance's pdist_block_min: Hellinger's filter takes
 * blocks of 8); when there are fewer blocks than threads, each query's rows
 * are cut into chunks. */
static void plan(size_t n, size_t dim, size_t nq, size_t qb_min, int threads, int *nthreads, size_t *qb,
                 size_t *nblocks, size_t *nchunks, size_t *chunk)
{
    size_t want, maxc, b = (nq + 2 * (size_t)threads - 1) / (2 * (size_t)threads);
    if (b < qb_min) b = qb_min < nq ? qb_min : nq; /* the distance's kernels pay from qb_min queries a block */
    if (b > QB_MAX) b = QB_MAX;
    if (b > QB_BYTES / (dim * sizeof(double) + 1)) b = QB_BYTES / (dim * sizeof(double) + 1);
    *qb = b < 1 ? 1 : b;
    *nblocks = nq ? (nq + *qb - 1) / *qb : 0;
    *nchunks = 1;
    if (*nblocks < (size_t)threads && n >= 2 * PATINA_KNN_MIN_CHUNK) {
        want = (4 * (size_t)threads + *nblocks - 1) / *nblocks;
        maxc = n / PATINA_KNN_MIN_CHUNK;
        *nchunks = want < maxc ? want : maxc;
    }
    *chunk = n ? (n + *nchunks - 1) / *nchunks : 1;
    *nchunks = n ? (n + *chunk - 1) / *chunk : 1;
    /* Tiny problems are not worth waking threads for. */
    if ((double)n * (double)nq < 4096.0) threads = 1;
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
    patina__options_init(PATINA_OPTIONS_SEARCH, o);
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

/* The checks of patina_index_knn past k's (nq = 0 is valid and does
 * nothing). */
static patina_status knn_args(const patina_index_t *idx, const void *queries, size_t nq, size_t k,
                              const patina_hit_t *hits, const size_t *counts)
{
    if (!idx) return patina__fail(PATINA_E_INVALID, "search: null index");
    if (nq == 0) return PATINA_OK;
    if (!queries || !hits || !counts) return patina__fail(PATINA_E_INVALID, "search: null queries, hits or counts");
    if (nq > SIZE_MAX / sizeof *hits / k) return patina__fail(PATINA_E_LIMIT, "search: %zu queries x k = %zu is too many", nq, k);
    return patina__index_check_nan(idx, queries, nq, "query");
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

static patina_status search_impl(patina_context_t *ctx, const patina_index_t *idx, const void *queries, size_t nq,
                                 const pgpu_req_t *rq, const patina_search_opts_t *opts_in, patina_hit_t *hits,
                                 patina_hit_t **lists, size_t *counts);

/* The queries flagged in cpu[] (n of nq) answered on the CPU: gathered,
 * searched, scattered back (k-NN: hits/counts rows; range: rhits[q] lists). */
static patina_status cpu_rest(patina_context_t *ctx, const patina_index_t *ix, const uint8_t *queries, size_t nq,
                              const uint8_t *cpu, const pgpu_req_t *rq, patina_hit_t *hits, patina_hit_t **rhits,
                              size_t *counts)
{
    const size_t k = rq->k, max_hits = rq->max_hits;
    const int range = k == 0;
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
    s = search_impl(ctx, ix, sub, n, rq, &o, sh, srh, sc);
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
    for (size_t q = 0; q < nq; q++) pdist_elems(ix->elem, queries + q * ix->bytes, ix->dim, qv + q * ix->dim);
    return PATINA_OK;
}

/* The GPU search under the context's GPU turn: the device copy of the index
 * is made or found, used and kept in the context while the turn is held, so
 * no other thread can drop it meanwhile. The fast path when every query
 * takes it, else the definition path; the queries the GPU leaves to the
 * CPU are answered after the turn. k-NN (rq->k >= 1) into hits, range
 * into lists. */
static patina_status gpu_search(patina_context_t *ctx, const patina_index_t *ix, const uint8_t *queries, size_t nq,
                                const pgpu_req_t *rq, patina_hit_t *hits, patina_hit_t **lists, size_t *counts,
                                patina_search_stats_t *stats)
{
    size_t paths[5] = {0, 0, 0, 0, 0};
    pgpu_knn_index_t view;
    patina_gpu_t *g;
    double *qv = NULL;
    uint8_t *cpu = NULL;
    patina_status s;
    size_t q;
    /* the fast path's test alone (no element above 7), not its prepared
     * queries: the GPU prepares its own, and a prepared query is kilobytes,
     * which for a batch of thousands cost more than the search (page faults
     * of a fresh allocation: 4.8 ms of 10.7 for 4096 CEDD queries) */
    int fast = ix->t1 && ix->n > 0;
    gpu_view(ix, &view);
    for (q = 0; fast && q < nq; q++) fast = query_fast(queries + q * ix->dim, ix->dim);
    if (fast) { /* every query takes the fast path */
        view_fast(ix, &view);
    } else if (ix->dist_id == PDIST_TANIMOTO && ix->t1) {
        /* A query with an element above 7: the definition for all of them,
         * on a device copy of its own (row-major). */
        view.serial = ix->serial | (UINT64_C(1) << 63);
    }
    if (!view.t1 && (s = queries_as_doubles(ix, queries, nq, &qv)) != PATINA_OK) /* the definition kernels' input */
        return s;
    if (!(cpu = malloc(nq))) {
        free(qv);
        return patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu queries", nq);
    }
    s = patina__context_gpu_acquire(ctx, &g);
    if (s == PATINA_OK) {
        s = patina_gpu_knn(g, &view, queries, qv, nq, rq, hits, lists, counts, cpu, paths);
        patina__context_gpu_release(ctx);
    }
    if (s == PATINA_OK) s = cpu_rest(ctx, ix, queries, nq, cpu, rq, hits, lists, counts);
    if (s == PATINA_OK) note_stats(stats, paths, cpu, nq);
    free(cpu);
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
    size_t nq;
    const size_t *first;  /* (nq + 1): query q's candidates are [first[q], first[q + 1]) of dist */
    double *dist;         /* (first[nq]) their reference distances */
    size_t k;             /* k-NN (0: range) */
    double radius;
    size_t max_hits;
    size_t chunk;         /* candidates per distance task (sq_rank) */
    patina_hit_t *hits;   /* k-NN (nq, k) */
    patina_hit_t **rhits; /* range */
    size_t *counts;
    atomic_int nomem;
} sq_rank_t;

/* Candidates per task of the distances, at most: a reference SQFD costs
 * some 10-30 us (thousands of exps), so a task is at most a few hundred;
 * the candidates of one query are spread over the workers, so a single
 * query (whose candidates may be hundreds when its rows have duplicates)
 * does not rank on one thread while the others wait. Fewer candidates
 * than four tasks per worker take smaller tasks, down to one candidate: a
 * single query's 10-20 candidates in tasks of 8 kept two or three workers
 * busy for 100-250 us while the rest waited, the larger part of a one-query
 * call (and the part that did not shrink when a table's rows were split over
 * several GPUs, each slice ranking its own candidates). */
#define SQ_RANK_CHUNK 8

/* The reference distances of candidates [t chunk, + chunk) (flat over the
 * queries). */
static void sq_dist_task(void *arg, size_t t, int worker)
{
    sq_rank_t *j = arg;
    const patina_index_t *ix = j->ix;
    const size_t total = j->first[j->nq], a = t * j->chunk, b = a + j->chunk < total ? a + j->chunk : total;
    size_t lo = 0, hi = j->nq, i;
    (void)worker;
    while (hi - lo > 1) { /* the query holding candidate a: first[lo] <= a < first[lo + 1] */
        const size_t mid = lo + (hi - lo) / 2;
        if (j->first[mid] <= a) lo = mid;
        else hi = mid;
    }
    for (i = a; i < b; i++) {
        while (i >= j->first[lo + 1]) lo++;
        {
            const float *qr = (const float *)(j->queries + lo * ix->bytes);
            const uint32_t r = j->cand[lo][i - j->first[lo]];
            j->dist[i] = sig_sqfd_self(qr, j->qself[lo], (const float *)(ix->descs + (size_t)r * ix->bytes), ix->self[r]);
        }
    }
}

/* Query q's answer from its candidates' distances (sq_dist_task). */
static void sq_rank_task(void *arg, size_t q, int worker)
{
    sq_rank_t *j = arg;
    const patina_index_t *ix = j->ix;
    const size_t nc = j->first[q + 1] - j->first[q];
    const double *dq = j->dist + j->first[q];
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
        const double d = dq[i];
        if (!j->k && !(d <= j->radius)) continue;
        h[m].id = ix->ids[j->cand[q][i]];
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

/* Ranks the candidates the GPU left (j filled but first and dist): their
 * distances spread over the context's workers, then each query's sorted. */
static patina_status sq_rank(patina_context_t *ctx, sq_rank_t *j)
{
    patina_pool_t *pool = NULL;
    size_t *first = malloc((j->nq + 1) * sizeof *first), q, tasks;
    int own = 0;
    patina_status s = PATINA_OK;
    if (!first) return patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu queries", j->nq);
    first[0] = 0;
    for (q = 0; q < j->nq; q++) first[q + 1] = first[q] + (j->cpu[q] ? 0 : j->ncand[q]);
    j->first = first;
    if (!(j->dist = malloc((first[j->nq] ? first[j->nq] : 1) * sizeof *j->dist))) {
        const size_t total = first[j->nq];
        free(first);
        j->first = NULL;
        return patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu candidates", total);
    }
    if (first[j->nq] > 1 || j->nq > 1) s = patina__workers_begin(ctx, 0, &pool, &own);
    {
        const size_t per = 4 * (size_t)(pool ? patina_pool_size(pool) : 1);
        j->chunk = (first[j->nq] + per - 1) / per;
        if (j->chunk < 1) j->chunk = 1;
        if (j->chunk > SQ_RANK_CHUNK) j->chunk = SQ_RANK_CHUNK;
    }
    tasks = (first[j->nq] + j->chunk - 1) / j->chunk;
    if (s == PATINA_OK) {
        patina_pool_run(pool, tasks, sq_dist_task, j);
        patina_pool_run(pool, j->nq, sq_rank_task, j);
        if (pool) patina__workers_end(ctx, pool, own);
        if (atomic_load(&j->nomem)) s = patina__fail(PATINA_E_NOMEM, "search: out of memory ranking candidates");
    }
    free(j->dist);
    free(first);
    j->dist = NULL;
    j->first = NULL;
    return s;
}

/* k-NN (rq->k > 0; hits padded by the caller) or range (rq->k = 0, into
 * rhits) on the GPU. auto_dev: a GPU that cannot take the index (its copy
 * beyond the memory budget) leaves the call to the CPU instead of failing
 * it. */
static patina_status sqfd_gpu(patina_context_t *ctx, const patina_index_t *ix, const uint8_t *queries, size_t nq,
                              const pgpu_req_t *rq, patina_hit_t *hits, patina_hit_t **rhits, size_t *counts,
                              patina_search_stats_t *stats, int auto_dev)
{
    pgpu_sqfd_index_t view;
    pgpu_sqfd_stats_t gst;
    sq_rank_t j;
    patina_gpu_t *g;
    double *qself = NULL;
    uint32_t **cand = calloc(nq, sizeof *cand);
    size_t *ncand = calloc(nq, sizeof *ncand), q;
    uint8_t *cpu = malloc(nq);
    patina_status s;
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
        s = patina_gpu_sqfd(g, &view, (const float *)queries, qself, nq, rq, cand, ncand, cpu, &gst);
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
        j.k = rq->k;
        j.radius = rq->radius;
        j.max_hits = rq->max_hits;
        j.hits = hits;
        j.rhits = rhits;
        j.counts = counts;
        j.nq = nq;
        s = sq_rank(ctx, &j);
    }
    if (s == PATINA_OK)
        s = cpu_rest(ctx, ix, queries, nq, cpu, rq, hits, rhits, counts);
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

/* The rows of indexes ixs[0 .. nix) as one run (job_t), their queries
 * prepared: jb filled but the kind's fields; *tq and *qself to free. */
static patina_status job_rows(patina_context_t *ctx, job_t *jb, const patina_index_t *const *ixs, size_t nix,
                              size_t *base, const void *queries, size_t nq, const double *ratio, int *nthreads,
                              tq_t **tq, double **qself)
{
    size_t x;
    const patina_index_t *fast = NULL, *self = NULL;
    memset(jb, 0, sizeof *jb);
    *tq = NULL;
    *qself = NULL;
    base[0] = 0;
    for (x = 0; x < nix; x++) {
        base[x + 1] = base[x] + ixs[x]->n;
        jb->live += ixs[x]->live;
        if (ixs[x]->t1 && ixs[x]->n && !fast) fast = ixs[x];
        if (ixs[x]->self && !self) self = ixs[x];
    }
    jb->ixs = ixs;
    jb->nix = nix;
    jb->base = base;
    jb->n = base[nix];
    jb->ix = ixs[0];
    jb->ratio = ratio;
    jb->queries = queries;
    jb->nq = nq;
    plan(jb->n, ixs[0]->dim, nq, pdist_block_min(ixs[0]->dist_id), cpu_threads(ctx), nthreads, &jb->qb,
         &jb->nblocks, &jb->nchunks, &jb->chunk);
    if (fast) PATINA_TRY(prepare_queries(fast, queries, nq, tq));
    jb->tq = *tq;
    if (self) PATINA_TRY(prepare_self(self, queries, nq, qself));
    jb->qself = *qself;
    return PATINA_OK;
}

/* k-NN on the CPU over the indexes ixs[0 .. nix) as one (hits padded,
 * counts[q] = min(k, their live rows) > 0). */
static patina_status cpu_knn(patina_context_t *ctx, const patina_index_t *const *ixs, size_t nix, const void *queries,
                             size_t nq, size_t k, const patina_search_opts_t *o, patina_hit_t *hits, size_t *counts)
{
    const patina_search_opts_t opts = *o;
    job_t jb;
    tq_t *tq = NULL;
    double *qself = NULL;
    patina_status s;
    size_t q, per = counts[0], *pos = NULL, *base = malloc((nix + 1) * sizeof *base);
    patina_hit_t **lists = NULL;
    int nthreads;

    if (!base) return patina__fail(PATINA_E_NOMEM, "search: out of memory");
    s = job_rows(ctx, &jb, ixs, nix, base, queries, nq, &opts.ratio, &nthreads, &tq, &qself);
    jb.k = k;
    jb.final = hits;
    jb.cap = k < jb.chunk ? k : jb.chunk;
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
    free(base);
    return s;
}

/* Range search on the CPU over the indexes ixs[0 .. nix) as one (hits[]
 * cleared, some row live). */
static patina_status cpu_range(patina_context_t *ctx, const patina_index_t *const *ixs, size_t nix,
                               const void *queries, size_t nq, double radius, const patina_search_opts_t *o,
                               patina_hit_t **hits, size_t *counts)
{
    const patina_search_opts_t opts = *o;
    const size_t max_hits = opts.max_hits;
    job_t jb;
    tq_t *tq = NULL;
    double *qself = NULL;
    patina_status s;
    size_t q, t, nslots = 0, *pos = NULL, *lens = NULL, *base = malloc((nix + 1) * sizeof *base);
    patina_hit_t **lists = NULL;
    int nthreads;

    if (!base) return patina__fail(PATINA_E_NOMEM, "search: out of memory");
    s = job_rows(ctx, &jb, ixs, nix, base, queries, nq, &opts.ratio, &nthreads, &tq, &qself);
    jb.range = 1;
    jb.radius = radius;
    jb.max_hits = max_hits;
    nslots = nq * jb.nchunks;
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
    free(base);
    return s;
}

/* One search: k-NN (rq->k >= 1, checked by the caller; into hits, padded)
 * or range (rq->k = 0; into lists, max_hits from the options). */
static patina_status search_impl(patina_context_t *ctx, const patina_index_t *idx, const void *queries, size_t nq,
                                 const pgpu_req_t *rq, const patina_search_opts_t *opts_in, patina_hit_t *hits,
                                 patina_hit_t **lists, size_t *counts)
{
    const int range = rq->k == 0;
    patina_search_opts_t opts;
    patina_device dev = PATINA_DEVICE_CPU;
    pgpu_req_t req = *rq;
    patina_status s;
    size_t q;

    if (!range) {
        PATINA_TRY(knn_args(idx, queries, nq, rq->k, hits, counts));
    } else {
        if (!idx) return patina__fail(PATINA_E_INVALID, "search: null index");
        PATINA_TRY(patina_options_check(PATINA_OPTIONS_SEARCH, "range", rq->radius));
    }
    patina_search_opts_init(&opts);
    if (opts_in) opts = *opts_in;
    PATINA_TRY(patina__options_validate(PATINA_OPTIONS_SEARCH, &opts));
    PATINA_TRY(search_device(ctx, idx, &opts, range, rq->k, &dev));
    if (opts.stats) memset(opts.stats, 0, sizeof *opts.stats);
    if (nq == 0) return PATINA_OK;
    if (!range) {
        knn_pad(idx, nq, rq->k, hits, counts);
    } else {
        req.max_hits = opts.max_hits;
        if (!queries || !lists || !counts)
            return patina__fail(PATINA_E_INVALID, "search: null queries, hits or counts");
        for (q = 0; q < nq; q++) {
            lists[q] = NULL;
            counts[q] = 0;
        }
        PATINA_TRY(patina__index_check_nan(idx, queries, nq, "query"));
    }
    if (idx->live == 0) return PATINA_OK;
    if (dev == PATINA_DEVICE_GPU) {
        s = idx->self ? sqfd_gpu(ctx, idx, queries, nq, &req, hits, lists, counts, opts.stats,
                                 opts.device == PATINA_DEVICE_AUTO)
                      : gpu_search(ctx, idx, queries, nq, &req, hits, lists, counts, opts.stats);
        if (s != PATINA_OK && range)
            for (q = 0; q < nq; q++) {
                free(lists[q]);
                lists[q] = NULL;
                counts[q] = 0;
            }
        return s;
    }
    if (opts.stats) opts.stats->cpu = nq;
    return range ? cpu_range(ctx, &idx, 1, queries, nq, req.radius, &opts, lists, counts)
                 : cpu_knn(ctx, &idx, 1, queries, nq, req.k, &opts, hits, counts);
}

/* The public calls hold the index's read lock for the whole search (GPU
 * and CPU parts): a put or remove waits for them, and they for it. */
patina_status patina_index_knn(patina_context_t *ctx, const patina_index_t *idx, const void *queries,
                               size_t nq, size_t k, const patina_search_opts_t *opts, patina_hit_t *hits,
                               size_t *counts)
{
    const pgpu_req_t rq = {k, 0.0, 0};
    patina_status s;
    void *qcopy = NULL;
    if (!idx) return patina__fail(PATINA_E_INVALID, "search: null index");
    PATINA_TRY(patina_options_check(PATINA_OPTIONS_SEARCH, "k", (double)k));
    PATINA_TRY(patina__rows(&queries, nq, idx->bytes, PATINA_ROW_ALIGN(patina_elem_size(idx->elem)), &qcopy, "search"));
    patina__index_rd_lock(idx);
    s = search_impl(ctx, idx, queries, nq, &rq, opts, hits, NULL, counts);
    patina__index_rd_unlock(idx);
    free(qcopy);
    return s;
}

patina_status patina_index_range(patina_context_t *ctx, const patina_index_t *idx, const void *queries,
                                 size_t nq, double radius, const patina_search_opts_t *opts,
                                 patina_hit_t **hits, size_t *counts)
{
    const pgpu_req_t rq = {0, radius, 0};
    patina_status s;
    void *qcopy = NULL;
    if (!idx) return patina__fail(PATINA_E_INVALID, "search: null index");
    PATINA_TRY(patina__rows(&queries, nq, idx->bytes, PATINA_ROW_ALIGN(patina_elem_size(idx->elem)), &qcopy, "search"));
    patina__index_rd_lock(idx);
    s = search_impl(ctx, idx, queries, nq, &rq, opts, NULL, hits, counts);
    patina__index_rd_unlock(idx);
    free(qcopy);
    return s;
}

/* ------------------------------------------------- several indexes as one */

static int cmp_index_addr(const void *a, const void *b)
{
    const uintptr_t x = (uintptr_t) * (const patina_index_t *const *)a, y = (uintptr_t) * (const patina_index_t *const *)b;
    return x < y ? -1 : x > y;
}

/* One part of a search over several indexes: the CPU's group, or one index
 * searched alone (the GPU, std_l2). */
typedef struct many_part {
    patina_hit_t *hits;   /* k-NN: (nq, k) */
    patina_hit_t **lists; /* range: (nq) */
    size_t *counts;       /* (nq) */
    patina_search_stats_t stats;
} many_part_t;

static patina_status search_many_locked(patina_context_t *ctx, const patina_index_t *const *ixs, size_t nix,
                                        const void *queries, size_t nq, size_t k, double radius,
                                        const patina_search_opts_t *o, patina_hit_t *hits, patina_hit_t **lists,
                                        size_t *counts, int together);

/* k-NN over n >= 2 indexes that the GPU searches, every one and every
 * query on the Tanimoto fast path, as one table: one pass of the engine
 * over their copies (patina_gpu_knn_many). The queries it leaves are
 * searched again index by index and merged (search_many_locked, not
 * together); so are all of them when the GPU cannot take the indexes
 * together. hits (nq, k), counts as search_many_locked's. */
static patina_status gpu_knn_together(patina_context_t *ctx, const patina_index_t *const *ixs, size_t n,
                                      const uint8_t *queries, size_t nq, size_t k, const patina_search_opts_t *o,
                                      patina_hit_t *hits, size_t *counts)
{
    size_t paths[5] = {0, 0, 0, 0, 0}, nr = 0, i, j;
    pgpu_knn_index_t *views = calloc(n, sizeof *views);
    const pgpu_knn_index_t **vp = malloc(n * sizeof *vp);
    uint8_t *cpu = malloc(nq), *sub = NULL;
    patina_hit_t *sh = NULL;
    size_t *sc = NULL;
    patina_search_opts_t so = *o;
    patina_search_stats_t rest;
    patina_gpu_t *g;
    int taken = 0;
    patina_status s;
    if (!views || !vp || !cpu) {
        s = patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu indexes", n);
        goto out;
    }
    for (i = 0; i < n; i++) {
        gpu_view(ixs[i], &views[i]);
        view_fast(ixs[i], &views[i]);
        vp[i] = &views[i];
    }
    if ((s = patina__context_gpu_acquire(ctx, &g)) != PATINA_OK) goto out;
    s = patina_gpu_knn_many(g, vp, n, queries, nq, k, hits, counts, cpu, paths, &taken);
    patina__context_gpu_release(ctx);
    if (s != PATINA_OK) goto out;
    if (!taken) { /* each on its own */
        s = search_many_locked(ctx, ixs, n, queries, nq, k, 0.0, o, hits, NULL, counts, 0);
        goto out;
    }
    note_stats(o->stats, paths, cpu, nq);
    if (o->stats) o->stats->cpu = 0;
    for (i = 0; i < nq; i++) nr += cpu[i] != 0;
    if (nr == 0) goto out;
    /* the queries left: gathered, searched index by index, scattered back */
    sub = malloc(nr * ixs[0]->bytes);
    sh = malloc(nr * k * sizeof *sh);
    sc = malloc(nr * sizeof *sc);
    if (!sub || !sh || !sc) {
        s = patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu queries", nr);
        goto out;
    }
    for (i = 0, j = 0; i < nq; i++)
        if (cpu[i]) memcpy(sub + j++ * ixs[0]->bytes, queries + i * ixs[0]->bytes, ixs[0]->bytes);
    so.stats = o->stats ? &rest : NULL;
    s = search_many_locked(ctx, ixs, n, sub, nr, k, 0.0, &so, sh, NULL, sc, 0);
    for (i = 0, j = 0; s == PATINA_OK && i < nq; i++) {
        if (!cpu[i]) continue;
        memcpy(hits + i * k, sh + j * k, k * sizeof *sh);
        counts[i] = sc[j++];
    }
    if (s == PATINA_OK && o->stats) patina__search_stats_add(o->stats, &rest);
out:
    free(views);
    free(vp);
    free(cpu);
    free(sub);
    free(sh);
    free(sc);
    return s;
}

/* The search of patina__index_search_many with every index's read lock
 * held; together: the GPU's fast-path indexes in one pass when there are
 * several (gpu_knn_together). */
static patina_status search_many_locked(patina_context_t *ctx, const patina_index_t *const *ixs, size_t nix,
                                        const void *queries, size_t nq, size_t k, double radius,
                                        const patina_search_opts_t *o, patina_hit_t *hits, patina_hit_t **lists,
                                        size_t *counts, int together)
{
    const int range = k == 0;
    const pgpu_req_t rq = {k, radius, range ? o->max_hits : 0};
    const patina_index_t **group = malloc(nix * sizeof *group), **alone = malloc(nix * sizeof *alone);
    const patina_index_t **tog = malloc(nix * sizeof *tog);
    many_part_t *parts = calloc(nix + 1, sizeof *parts);
    patina_hit_t **pl = malloc((nix + 1) * sizeof *pl);
    size_t *pn = malloc((nix + 1) * sizeof *pn), *pos = malloc((nix + 1) * sizeof *pos);
    size_t ng = 0, na = 0, nt = 0, np = 0, x, q, p, live = 0, glive = 0, per;
    int fast = !range && together && nq > 0;
    patina_search_opts_t po = *o;
    patina_status s = PATINA_OK;
    if (!group || !alone || !tog || !parts || !pl || !pn || !pos) {
        s = patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu indexes", nix);
        goto out;
    }
    for (x = 0; x < nix; x++) {
        patina_device dev = PATINA_DEVICE_CPU;
        if ((s = search_device(ctx, ixs[x], o, range, k, &dev)) != PATINA_OK) goto out;
        live += ixs[x]->live;
        if (!ixs[x]->live) continue;
        /* std_l2 standardises by the index's own rows: each is its own
         * search; the GPU's fast-path indexes may go together */
        if (dev == PATINA_DEVICE_GPU && fast && ixs[x]->t1 && !ixs[x]->self) tog[nt++] = ixs[x];
        else if (dev == PATINA_DEVICE_GPU || (ixs[x]->sd && nix > 1)) alone[na++] = ixs[x];
        else {
            group[ng++] = ixs[x];
            glive += ixs[x]->live;
        }
    }
    for (q = 0; nt && q < nq; q++) /* the fast path: every query too */
        if (!query_fast((const uint8_t *)queries + q * tog[0]->bytes, tog[0]->dim)) break;
    if (nt == 1 || (nt && q < nq)) { /* not together: each on its own */
        for (x = 0; x < nt; x++) alone[na++] = tog[x];
        nt = 0;
    }
    if (o->stats) memset(o->stats, 0, sizeof *o->stats);
    per = k < live ? k : live;
    if (!range)
        for (q = 0; q < nq; q++) {
            counts[q] = per;
            for (x = per; x < k; x++) hits[q * k + x] = (patina_hit_t){0, HUGE_VAL};
        }
    if (!nq || !live) goto out;
    if (ng && !na && !nt) { /* the common case: the CPU over every index, one job, no merge */
        if (o->stats) o->stats->cpu = nq;
        s = range ? cpu_range(ctx, group, ng, queries, nq, radius, o, lists, counts)
                  : cpu_knn(ctx, group, ng, queries, nq, k, o, hits, counts);
        goto out;
    }
    /* part 0: the CPU's group (when any), then the GPU's indexes together
     * (when any), then the others */
    for (p = 0; p < (ng ? 1 : 0) + (nt ? 1 : 0) + na && s == PATINA_OK; p = ++np) {
        many_part_t *m = &parts[p];
        const int is_group = ng && p == 0, is_tog = nt && p == (ng ? 1 : 0);
        m->counts = calloc(nq, sizeof *m->counts);
        if (range) m->lists = calloc(nq, sizeof *m->lists);
        else if (nq <= SIZE_MAX / sizeof *m->hits / k) m->hits = malloc(nq * k * sizeof *m->hits);
        if (!m->counts || (range ? !m->lists : !m->hits)) {
            s = patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu queries", nq);
            break;
        }
        po.stats = o->stats ? &m->stats : NULL;
        if (is_group) {
            const size_t gper = k < glive ? k : glive;
            for (q = 0; q < nq; q++) m->counts[q] = gper;
            if (po.stats) po.stats->cpu = nq;
            s = range ? cpu_range(ctx, group, ng, queries, nq, radius, &po, m->lists, m->counts)
                      : cpu_knn(ctx, group, ng, queries, nq, k, &po, m->hits, m->counts);
        } else if (is_tog) {
            s = gpu_knn_together(ctx, tog, nt, queries, nq, k, &po, m->hits, m->counts);
        } else {
            s = search_impl(ctx, alone[p - (ng ? 1 : 0) - (nt ? 1 : 0)], queries, nq, &rq, &po, m->hits, m->lists,
                            m->counts);
        }
    }
    if (s != PATINA_OK) goto out;
    for (q = 0; q < nq && s == PATINA_OK; q++) { /* each query's sorted lists merged */
        size_t total = 0;
        for (p = 0; p < np; p++) {
            pl[p] = range ? parts[p].lists[q] : parts[p].hits + q * k;
            pn[p] = parts[p].counts[q];
            total += pn[p];
        }
        if (!range) {
            if (merge_lists(hits + q * k, per, pl, pn, np, pos) != per)
                s = patina__fail(PATINA_E_INTERNAL, "search: merge lost hits");
            continue;
        }
        if (o->max_hits && total > o->max_hits) total = o->max_hits;
        if (!total) continue;
        if (!(lists[q] = malloc(total * sizeof *lists[q]))) {
            s = patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu hits", total);
            break;
        }
        counts[q] = merge_lists(lists[q], total, pl, pn, np, pos);
    }
    for (p = 0; o->stats && p < np; p++) patina__search_stats_add(o->stats, &parts[p].stats);
out:
    for (p = 0; parts && p < nix + 1; p++) {
        for (q = 0; parts[p].lists && q < nq; q++) free(parts[p].lists[q]);
        free(parts[p].lists);
        free(parts[p].hits);
        free(parts[p].counts);
    }
    if (s != PATINA_OK && range)
        for (q = 0; q < nq; q++) {
            free(lists[q]);
            lists[q] = NULL;
            counts[q] = 0;
        }
    free(parts);
    free(group);
    free(alone);
    free(tog);
    free(pl);
    free(pn);
    free(pos);
    return s;
}

patina_status patina__index_search_many(patina_context_t *ctx, const patina_index_t *const *ixs, size_t nix,
                                        const void *queries, size_t nq, size_t k, double radius,
                                        const patina_search_opts_t *opts_in, patina_hit_t *hits, patina_hit_t **lists,
                                        size_t *counts)
{
    const patina_index_t **order;
    patina_search_opts_t opts;
    patina_status s;
    size_t x, q;
    if (!ixs || nix == 0) return patina__fail(PATINA_E_INVALID, "search: no index");
    for (x = 0; x < nix; x++) {
        if (!ixs[x]) return patina__fail(PATINA_E_INVALID, "search: index %zu is NULL", x);
        if (ixs[x]->dist_id != ixs[0]->dist_id || ixs[x]->bytes != ixs[0]->bytes ||
            strcmp(patina_extractor_spec(ixs[x]->ex), patina_extractor_spec(ixs[0]->ex)))
            return patina__fail(PATINA_E_INVALID, "search: index %zu is '%s', index 0 '%s' (one spec per call)", x,
                                patina_extractor_spec(ixs[x]->ex), patina_extractor_spec(ixs[0]->ex));
    }
    patina_search_opts_init(&opts);
    if (opts_in) opts = *opts_in;
    PATINA_TRY(patina__options_validate(PATINA_OPTIONS_SEARCH, &opts));
    if (k) {
        PATINA_TRY(patina_options_check(PATINA_OPTIONS_SEARCH, "k", (double)k));
        PATINA_TRY(knn_args(ixs[0], queries, nq, k, hits, counts));
    } else {
        PATINA_TRY(patina_options_check(PATINA_OPTIONS_SEARCH, "range", radius));
        if (nq && (!queries || !lists || !counts))
            return patina__fail(PATINA_E_INVALID, "search: null queries, hits or counts");
        for (q = 0; q < nq; q++) {
            lists[q] = NULL;
            counts[q] = 0;
        }
        if (nq) PATINA_TRY(patina__index_check_nan(ixs[0], queries, nq, "query"));
    }
    if (!(order = malloc(nix * sizeof *order))) return patina__fail(PATINA_E_NOMEM, "search: out of memory");
    memcpy(order, ixs, nix * sizeof *order);
    qsort(order, nix, sizeof *order, cmp_index_addr); /* locks in address order */
    for (x = 0; x < nix; x++)
        if (!x || order[x] != order[x - 1]) patina__index_rd_lock(order[x]);
    s = search_many_locked(ctx, ixs, nix, queries, nq, k, radius, &opts, hits, lists, counts, 1);
    for (x = nix; x-- > 0;)
        if (!x || order[x] != order[x - 1]) patina__index_rd_unlock(order[x]);
    free(order);
    return s;
}
