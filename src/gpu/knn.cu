/* Exact k-NN on the GPU for every distance of the table
 * (src/search/distance.h), with the same doubles and the same order as the
 * CPU search (src/search/knn.c).
 *
 * Distances. Each kernel performs the definition's operations in the
 * definition's order (built with --fmad=false: nothing is contracted), so
 * every distance is the CPU's double bit for bit:
 *   - Tanimoto fast path (u8 rows whose elements are all <= 7, e.g. CEDD):
 *     per row, C1 accumulates p[b[i]] * q over the query's non-zero elements
 *     in order, then 100 - 100 * (C1 / ((C2 + C3) - C1)) with the row's T1
 *     and C3 and the query's T2 and C2 computed on the host by the CPU's
 *     loops. Rows live element-major on the device (dim rows of n bytes), so
 *     a warp's threads, one row each, read 32 consecutive bytes of an element.
 *   - every other case: the definition's loop over the row's elements
 *     (row-major, one thread a row), the query and the per-element sigma of
 *     std_l2 read as doubles from device memory (broadcast through L1).
 * Selection: a block takes one query and a chunk of 2048 rows, computes
 * their distances into shared memory, sorts them (bitonic network; order =
 * distance ascending, NaN last, ties by id ascending: the CPU's total order)
 * and writes its first min(k, 2048). The host keeps the best k of the
 * chunks' lists in the same order (a bounded heap; a list is left at its
 * first entry that does not beat the worst kept). Exact for any k.
 *
 * Memory. The search state of a device context (pgpu_state(g,
 * PGPU_FAM_SEARCH)) holds the device copies of the indexes searched, keyed
 * by the index's serial and dropped least recently used first when the
 * budget is short, plus the per-call buffers. Calls run under the context's
 * GPU turn (core/context.h), so no copy can be dropped while a search reads
 * it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "algo/distance_ids.h"
#include "algo/hits.h"
#include "gpu/context.h"
#include "gpu/gpu.h"

#define KNN_CHUNK 2048
#define KNN_THREADS 1024
#define KNN_CACHE 8 /* device copies kept at most */

/* One index on the device. */
typedef struct knn_copy {
    uint64_t serial;
    uint64_t used;           /* the state's clock at its last search (LRU) */
    size_t n, dim, bytes;
    uint8_t *descs;          /* fast path: (dim, n) element-major; else (n, bytes) */
    uint64_t *ids;           /* (n) */
    uint32_t *t1;            /* fast path: (n) */
    double *c3;              /* fast path: (n) */
    double *ptab;            /* fast path: (ptab_rows, 8) */
    double *sd;              /* std_l2: (dim) */
} knn_copy_t;

typedef struct knn_state {
    knn_copy_t copy[KNN_CACHE];
    uint64_t clock;
    /* per-call buffers, grown as needed */
    patina_knn_query_t *d_q; /* fast-path queries */
    size_t q_cap;
    double *d_qv;            /* raw queries as doubles (q_cap2, dim) */
    size_t qv_cap;           /* doubles */
    double *d_dist;
    uint64_t *d_id;
    double *h_dist;          /* pinned */
    uint64_t *h_id;
    size_t cand_cap;         /* entries */
} knn_state_t;

/* ------------------------------------------------------------- kernels */

/* a comes after b in the result order */
__device__ __forceinline__ bool after(double da, uint64_t ia, double db, uint64_t ib)
{
    const bool an = isnan(da), bn = isnan(db);
    if (an != bn) return an;
    if (!an) {
        if (da > db) return true;
        if (da < db) return false;
    }
    return ia > ib;
}

/* Sorts the block's chunk (sd, sid) ascending and writes its first kk. */
__device__ __forceinline__ void sort_and_write(double *sd, uint64_t *sid, int kk, double *out_d,
                                               uint64_t *out_id)
{
    for (int size = 2; size <= KNN_CHUNK; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            __syncthreads();
            for (int t = threadIdx.x; t < KNN_CHUNK / 2; t += blockDim.x) {
                const int lo = 2 * t - (t & (stride - 1)), hi = lo + stride;
                const bool up = (lo & size) == 0;
                if (after(sd[lo], sid[lo], sd[hi], sid[hi]) == up) {
                    const double td = sd[lo];
                    const uint64_t ti = sid[lo];
                    sd[lo] = sd[hi];
                    sid[lo] = sid[hi];
                    sd[hi] = td;
                    sid[hi] = ti;
                }
            }
        }
    __syncthreads();
    const size_t base = ((size_t)blockIdx.y * gridDim.x + blockIdx.x) * (size_t)kk;
    for (int e = threadIdx.x; e < kk; e += blockDim.x) {
        out_d[base + e] = sd[e];
        out_id[base + e] = sid[e];
    }
}

__device__ __forceinline__ double qnan() { return __longlong_as_double(0x7ff8000000000000LL); }

__global__ void __launch_bounds__(KNN_THREADS)
k_knn_fast(const uint8_t *__restrict__ descs, const uint64_t *__restrict__ ids,
           const uint32_t *__restrict__ t1, const double *__restrict__ c3,
           const double *__restrict__ ptab, size_t n, const patina_knn_query_t *__restrict__ qs,
           int kk, double *__restrict__ out_d, uint64_t *__restrict__ out_id)
{
    __shared__ double sd[KNN_CHUNK];
    __shared__ uint64_t sid[KNN_CHUNK];
    __shared__ uint16_t qidx[PGPU_KNN_MAXDIM];
    __shared__ double qv[PGPU_KNN_MAXDIM];
    const patina_knn_query_t *q = &qs[blockIdx.y];
    const size_t r0 = (size_t)blockIdx.x * KNN_CHUNK;
    const int nnz = q->nnz;
    const double t2 = q->t2, c2 = q->c2;
    int e;
    for (e = threadIdx.x; e < nnz; e += blockDim.x) {
        qidx[e] = q->idx[e];
        qv[e] = q->qv[e];
    }
    __syncthreads();
    for (e = threadIdx.x; e < KNN_CHUNK; e += blockDim.x) {
        const size_t r = r0 + (size_t)e;
        double d = qnan();
        uint64_t id = ~0ull; /* past the end: after every row */
        if (r < n) {
            const unsigned tr = t1[r];
            const double *p = ptab + (size_t)tr * 8;
            double s = 0.0;
            /* unrolled so that several loads are in flight (the sum stays in order) */
#pragma unroll 8
            for (int j = 0; j < nnz; j++) s = __dadd_rn(s, __dmul_rn(p[descs[(size_t)qidx[j] * n + r]], qv[j]));
            if (tr == 0 || t2 == 0.0) d = tr == 0 && t2 == 0.0 ? 0.0 : 100.0;
            else d = __dsub_rn(100.0, __dmul_rn(100.0, __ddiv_rn(s, __dsub_rn(__dadd_rn(c2, c3[r]), s))));
            id = ids[r];
        }
        sd[e] = d;
        sid[e] = id;
    }
    sort_and_write(sd, sid, kk, out_d, out_id);
}

__device__ __forceinline__ double elem_at(int elem, const uint8_t *row, size_t i)
{
    switch (elem) {
    case PATINA_ELEM_U8: return (double)row[i];
    case PATINA_ELEM_U16: return (double)((const uint16_t *)row)[i];
    case PATINA_ELEM_U32: return (double)((const uint32_t *)row)[i];
    case PATINA_ELEM_F32: return (double)((const float *)row)[i];
    default: return ((const double *)row)[i];
    }
}

/* The definition of distance D between query a (dim doubles) and row b,
 * operation for operation as src/search/distance.c. */
template <int D>
__device__ double distance_of(const double *__restrict__ a, const uint8_t *__restrict__ b, int elem, size_t dim,
                              const double *__restrict__ sd)
{
    double d = 0.0, sa = 0.0, sb = 0.0;
    size_t i;
    if constexpr (D == PDIST_TANIMOTO) {
        double t1 = 0.0, t2 = 0.0, c1 = 0.0, c2 = 0.0, c3 = 0.0;
        for (i = 0; i < dim; i++) {
            t1 = __dadd_rn(t1, elem_at(elem, b, i));
            t2 = __dadd_rn(t2, a[i]);
        }
        if (t1 == 0.0 && t2 == 0.0) return 0.0;
        if (t1 == 0.0 || t2 == 0.0) return 100.0;
        for (i = 0; i < dim; i++) {
            const double p = __ddiv_rn(elem_at(elem, b, i), t1), q = __ddiv_rn(a[i], t2);
            c1 = __dadd_rn(c1, __dmul_rn(p, q));
            c2 = __dadd_rn(c2, __dmul_rn(q, q));
            c3 = __dadd_rn(c3, __dmul_rn(p, p));
        }
        return __dsub_rn(100.0, __dmul_rn(100.0, __ddiv_rn(c1, __dsub_rn(__dadd_rn(c2, c3), c1))));
    } else if constexpr (D == PDIST_L1) {
        for (i = 0; i < dim; i++) d = __dadd_rn(d, fabs(__dsub_rn(a[i], elem_at(elem, b, i))));
        return d;
    } else if constexpr (D == PDIST_L2 || D == PDIST_STD_L2) {
        for (i = 0; i < dim; i++) {
            double x = __dsub_rn(a[i], elem_at(elem, b, i));
            if constexpr (D == PDIST_STD_L2) x = __ddiv_rn(x, sd ? sd[i] : 1.0);
            d = __dadd_rn(d, __dmul_rn(x, x));
        }
        return __dsqrt_rn(d);
    } else if constexpr (D == PDIST_CHI2) {
        for (i = 0; i < dim; i++) {
            const double x = a[i], y = elem_at(elem, b, i), s = __dadd_rn(x, y);
            if (s > 0.0) {
                const double t = __dsub_rn(x, y);
                d = __dadd_rn(d, __ddiv_rn(__dmul_rn(t, t), s));
            }
        }
        return d;
    } else if constexpr (D == PDIST_INTERSECTION) {
        for (i = 0; i < dim; i++) {
            const double x = a[i], y = elem_at(elem, b, i);
            d = __dadd_rn(d, x < y ? x : y);
            sa = __dadd_rn(sa, x);
            sb = __dadd_rn(sb, y);
        }
        if (sa == 0.0 && sb == 0.0) return 0.0;
        return __dsub_rn(1.0, __ddiv_rn(d, sa > sb ? sa : sb));
    } else if constexpr (D == PDIST_HELLINGER) {
        for (i = 0; i < dim; i++) {
            const double x = a[i], y = elem_at(elem, b, i);
            d = __dadd_rn(d, __dsqrt_rn(__dmul_rn(x, y)));
            sa = __dadd_rn(sa, x);
            sb = __dadd_rn(sb, y);
        }
        if (sa == 0.0 && sb == 0.0) return 0.0;
        if (sa == 0.0 || sb == 0.0) return 1.0;
        d = __dsub_rn(1.0, __ddiv_rn(d, __dsqrt_rn(__dmul_rn(sa, sb))));
        return d > 0.0 ? __dsqrt_rn(d) : 0.0;
    } else { /* PDIST_COSINE */
        for (i = 0; i < dim; i++) {
            const double x = a[i], y = elem_at(elem, b, i);
            d = __dadd_rn(d, __dmul_rn(x, y));
            sa = __dadd_rn(sa, __dmul_rn(x, x));
            sb = __dadd_rn(sb, __dmul_rn(y, y));
        }
        if (sa == 0.0 && sb == 0.0) return 0.0;
        if (sa == 0.0 || sb == 0.0) return 1.0;
        return __dsub_rn(1.0, __ddiv_rn(d, __dsqrt_rn(__dmul_rn(sa, sb))));
    }
}

template <int D>
__global__ void __launch_bounds__(KNN_THREADS)
k_knn(const uint8_t *__restrict__ descs, const uint64_t *__restrict__ ids, size_t n, size_t dim, size_t bytes,
      int elem, const double *__restrict__ sdv, const double *__restrict__ qv, int kk,
      double *__restrict__ out_d, uint64_t *__restrict__ out_id)
{
    __shared__ double sd[KNN_CHUNK];
    __shared__ uint64_t sid[KNN_CHUNK];
    const double *a = qv + (size_t)blockIdx.y * dim;
    const size_t r0 = (size_t)blockIdx.x * KNN_CHUNK;
    for (int e = threadIdx.x; e < KNN_CHUNK; e += blockDim.x) {
        const size_t r = r0 + (size_t)e;
        double d = qnan();
        uint64_t id = ~0ull;
        if (r < n) {
            d = distance_of<D>(a, descs + r * bytes, elem, dim, sdv);
            id = ids[r];
        }
        sd[e] = d;
        sid[e] = id;
    }
    sort_and_write(sd, sid, kk, out_d, out_id);
}

/* ---------------------------------------------------------- the state */

static void copy_free(patina_gpu_t *g, knn_copy_t *c)
{
    pgpu_free_n(g, 6, &c->descs, &c->ids, &c->t1, &c->c3, &c->ptab, &c->sd);
    memset(c, 0, sizeof *c);
}

static void buffers_free(patina_gpu_t *g, knn_state_t *st)
{
    pgpu_free_n(g, 6, &st->d_q, &st->d_qv, &st->d_dist, &st->d_id, &st->h_dist, &st->h_id);
    st->q_cap = st->qv_cap = st->cand_cap = 0;
}

static void knn_release(patina_gpu_t *g, void *state)
{
    knn_state_t *st = (knn_state_t *)state;
    (void)cudaStreamSynchronize((cudaStream_t)pgpu_stream(g, 0));
    for (int i = 0; i < KNN_CACHE; i++)
        if (st->copy[i].serial) copy_free(g, &st->copy[i]);
    buffers_free(g, st);
    (void)cudaGetLastError();
    free(st);
}

static patina_status knn_state(patina_gpu_t *g, knn_state_t **out)
{
    knn_state_t *st = (knn_state_t *)pgpu_state(g, PGPU_FAM_SEARCH);
    *out = st;
    if (st) return PATINA_OK;
    st = (knn_state_t *)calloc(1, sizeof *st);
    if (!st) return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory");
    pgpu_set_state(g, PGPU_FAM_SEARCH, st, knn_release);
    *out = st;
    return PATINA_OK;
}

/* The least recently used copy other than `keep` (NULL: none). */
static knn_copy_t *lru(knn_state_t *st, const knn_copy_t *keep)
{
    knn_copy_t *best = NULL;
    for (int i = 0; i < KNN_CACHE; i++) {
        knn_copy_t *c = &st->copy[i];
        if (c->serial && c != keep && (!best || c->used < best->used)) best = c;
    }
    return best;
}

/* Device memory for the search: when the budget is short, drops the least
 * recently used copies (never `keep`) and tries again. */
static patina_status sdev(patina_gpu_t *g, knn_state_t *st, const knn_copy_t *keep, void **p, size_t bytes,
                          const char *tag)
{
    for (;;) {
        patina_status s = pgpu_dev_alloc(g, p, bytes, PGPU_FAM_SEARCH, tag);
        knn_copy_t *victim;
        if (s != PATINA_E_LIMIT && s != PATINA_E_NOMEM) return s;
        if (!(victim = lru(st, keep))) return s;
        copy_free(g, victim);
        patina_clear_error();
    }
}

static patina_status put(patina_gpu_t *g, knn_state_t *st, knn_copy_t *c, void **dst, const void *src,
                         size_t bytes, const char *tag)
{
    PATINA_TRY(sdev(g, st, c, dst, bytes, tag));
    if (bytes) PGPU_CU(cudaMemcpy(*dst, src, bytes, cudaMemcpyHostToDevice));
    return PATINA_OK;
}

/* The device copy of idx, made now if g has none. */
static patina_status copy_of(patina_gpu_t *g, knn_state_t *st, const pgpu_knn_index_t *idx, knn_copy_t **out)
{
    knn_copy_t *c = NULL;
    patina_status s;
    int i;
    *out = NULL;
    for (i = 0; i < KNN_CACHE; i++)
        if (st->copy[i].serial == idx->serial) {
            c = &st->copy[i];
            c->used = ++st->clock;
            *out = c;
            return PATINA_OK;
        }
    for (i = 0; i < KNN_CACHE && !c; i++)
        if (!st->copy[i].serial) c = &st->copy[i];
    if (!c) {
        c = lru(st, NULL);
        copy_free(g, c);
    }
    c->serial = idx->serial;
    c->used = ++st->clock;
    c->n = idx->n;
    c->dim = idx->dim;
    c->bytes = idx->bytes;
    if (idx->t1) { /* element-major for the fast path */
        uint8_t *t = (uint8_t *)malloc(idx->n * idx->dim + 1);
        if (!t) {
            copy_free(g, c);
            return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory");
        }
        for (size_t r = 0; r < idx->n; r++)
            for (size_t b = 0; b < idx->dim; b++) t[b * idx->n + r] = idx->descs[r * idx->dim + b];
        s = put(g, st, c, (void **)&c->descs, t, idx->n * idx->dim, "descriptors");
        free(t);
        if (s == PATINA_OK) s = put(g, st, c, (void **)&c->t1, idx->t1, idx->n * sizeof *idx->t1, "row sums");
        if (s == PATINA_OK) s = put(g, st, c, (void **)&c->c3, idx->c3, idx->n * sizeof *idx->c3, "row squares");
        if (s == PATINA_OK)
            s = put(g, st, c, (void **)&c->ptab, idx->ptab, idx->ptab_rows * 8 * sizeof(double), "value table");
    } else {
        s = put(g, st, c, (void **)&c->descs, idx->descs, idx->n * idx->bytes, "descriptors");
        if (s == PATINA_OK && idx->sd)
            s = put(g, st, c, (void **)&c->sd, idx->sd, idx->dim * sizeof(double), "sigma");
    }
    if (s == PATINA_OK) s = put(g, st, c, (void **)&c->ids, idx->ids, idx->n * sizeof *idx->ids, "ids");
    if (s != PATINA_OK) {
        copy_free(g, c);
        return s;
    }
    *out = c;
    return PATINA_OK;
}

size_t patina_gpu__knn_cached(patina_gpu_t *g)
{
    knn_state_t *st = (knn_state_t *)pgpu_state(g, PGPU_FAM_SEARCH);
    size_t n = 0;
    for (int i = 0; st && i < KNN_CACHE; i++) n += st->copy[i].serial != 0;
    return n;
}

/* ------------------------------------------------------------- search */

static cudaError_t launch(const knn_copy_t *c, const pgpu_knn_index_t *idx, const knn_state_t *st, dim3 grid,
                          int kk, cudaStream_t s)
{
    if (c->t1) {
        k_knn_fast<<<grid, KNN_THREADS, 0, s>>>(c->descs, c->ids, c->t1, c->c3, c->ptab, c->n, st->d_q, kk,
                                                st->d_dist, st->d_id);
        return cudaGetLastError();
    }
#define K(D)                                                                                                   \
    k_knn<D><<<grid, KNN_THREADS, 0, s>>>(c->descs, c->ids, c->n, c->dim, c->bytes, (int)idx->elem, c->sd,     \
                                          st->d_qv, kk, st->d_dist, st->d_id)
    switch (idx->dist) {
    case PDIST_TANIMOTO: K(PDIST_TANIMOTO); break;
    case PDIST_L1: K(PDIST_L1); break;
    case PDIST_L2: K(PDIST_L2); break;
    case PDIST_STD_L2: K(PDIST_STD_L2); break;
    case PDIST_CHI2: K(PDIST_CHI2); break;
    case PDIST_INTERSECTION: K(PDIST_INTERSECTION); break;
    case PDIST_HELLINGER: K(PDIST_HELLINGER); break;
    case PDIST_COSINE: K(PDIST_COSINE); break;
    default: return cudaErrorInvalidValue;
    }
#undef K
    return cudaGetLastError();
}

patina_status patina_gpu_knn(patina_gpu_t *g, const pgpu_knn_index_t *idx,
                             const patina_knn_query_t *fq, const double *qv, size_t nq, size_t k,
                             patina_hit_t *hits, size_t *counts)
{
    knn_state_t *st;
    knn_copy_t *c;
    cudaStream_t s;
    const size_t nchunks = (idx->n + KNN_CHUNK - 1) / KNN_CHUNK;
    const int kk = (int)(k < KNN_CHUNK ? k : KNN_CHUNK);
    const size_t per_query = nchunks * (size_t)kk;
    const size_t take = k < idx->n ? k : idx->n;
    size_t qb, q0, i;
    patina_hit_t *merge;
    patina_status rs = PATINA_OK;

    if (!g || !idx || !hits || !counts || k == 0 || (idx->t1 ? !fq : !qv))
        return patina__fail(PATINA_E_INVALID, "gpu search: bad argument");
    if (idx->dist < 0 || idx->dist >= PDIST_COUNT)
        return patina__fail(PATINA_E_INVALID, "gpu search: unknown distance %d", idx->dist);
    if (idx->t1 && idx->dim > PGPU_KNN_MAXDIM)
        return patina__fail(PATINA_E_INVALID, "gpu search: fast path over %d elements", PGPU_KNN_MAXDIM);
    if (idx->n == 0 || nq == 0) return PATINA_OK;
    PGPU_CU(cudaSetDevice(g->device));
    s = (cudaStream_t)pgpu_stream(g, 0);
    PATINA_TRY(knn_state(g, &st));
    PATINA_TRY(copy_of(g, st, idx, &c));
    /* queries per launch: candidates within ~128 MiB, grid y <= 65535 */
    qb = ((size_t)128 << 20) / (per_query * 16);
    if (qb < 1) qb = 1;
    if (qb > 65535) qb = 65535;
    if (qb > nq) qb = nq;
    if (st->cand_cap < qb * per_query || (idx->t1 ? st->q_cap < qb : st->qv_cap < qb * idx->dim)) {
        buffers_free(g, st);
        if (idx->t1) PATINA_TRY(sdev(g, st, c, (void **)&st->d_q, qb * sizeof *st->d_q, "queries"));
        else PATINA_TRY(sdev(g, st, c, (void **)&st->d_qv, qb * idx->dim * sizeof(double), "queries"));
        PATINA_TRY(sdev(g, st, c, (void **)&st->d_dist, qb * per_query * sizeof(double), "candidates"));
        PATINA_TRY(sdev(g, st, c, (void **)&st->d_id, qb * per_query * sizeof(uint64_t), "candidate ids"));
        PATINA_TRY(pgpu_pin_alloc(g, (void **)&st->h_dist, qb * per_query * sizeof(double), PGPU_FAM_SEARCH,
                                  "candidates"));
        PATINA_TRY(pgpu_pin_alloc(g, (void **)&st->h_id, qb * per_query * sizeof(uint64_t), PGPU_FAM_SEARCH,
                                  "candidate ids"));
        if (idx->t1) st->q_cap = qb;
        else st->qv_cap = qb * idx->dim;
        st->cand_cap = qb * per_query;
    }
    merge = (patina_hit_t *)malloc((take ? take : 1) * sizeof *merge);
    if (!merge) {
        return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory merging %zu candidates", per_query);
    }
    for (q0 = 0; q0 < nq && rs == PATINA_OK; q0 += qb) {
        const size_t m = nq - q0 < qb ? nq - q0 : qb;
        const dim3 grid((unsigned)nchunks, (unsigned)m);
        cudaError_t e;
        if (idx->t1) {
            e = cudaMemcpyAsync(st->d_q, fq + q0, m * sizeof *fq, cudaMemcpyHostToDevice, s);
        } else {
            e = cudaMemcpyAsync(st->d_qv, qv + q0 * idx->dim, m * idx->dim * sizeof *qv, cudaMemcpyHostToDevice, s);
        }
        if (e == cudaSuccess) e = launch(c, idx, st, grid, kk, s);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(st->h_dist, st->d_dist, m * per_query * sizeof(double), cudaMemcpyDeviceToHost, s);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(st->h_id, st->d_id, m * per_query * sizeof(uint64_t), cudaMemcpyDeviceToHost, s);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s);
        if (e != cudaSuccess) {
            rs = pgpu_fail((int)e, "gpu search: k_knn", __FILE__, __LINE__);
            break;
        }
        for (size_t q = 0; q < m; q++) {
            /* The best `take` of the chunks' sorted lists: a bounded max-heap
             * (merge[0] = the worst kept); a chunk's list is left at its
             * first entry that does not beat the worst kept. */
            size_t nm = 0, ch;
            for (ch = 0; ch < nchunks; ch++) {
                const size_t valid = idx->n - ch * KNN_CHUNK < KNN_CHUNK ? idx->n - ch * KNN_CHUNK : KNN_CHUNK;
                const size_t use = valid < (size_t)kk ? valid : (size_t)kk;
                const size_t base = (q * nchunks + ch) * (size_t)kk;
                for (i = 0; i < use; i++) {
                    patina_hit_t x;
                    x.distance = st->h_dist[base + i];
                    x.id = st->h_id[base + i];
                    if (nm < take) {
                        patina__hit_heap_up(merge, nm++, x);
                    } else if (patina__hit_cmp(&x, &merge[0]) < 0) {
                        merge[0] = x;
                        patina__hit_heap_down(merge, nm, 0);
                    } else {
                        break; /* the rest of this chunk's list is worse still */
                    }
                }
            }
            qsort(merge, nm, sizeof *merge, patina__hit_qsort_cmp);
            memcpy(hits + (q0 + q) * k, merge, take * sizeof *merge);
            counts[q0 + q] = take;
        }
    }
    free(merge);
    return rs;
}
