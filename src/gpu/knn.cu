/* Exact k-NN and range search on the GPU for every distance of the table
 * (src/search/distance.h), with the same doubles and the same order as the
 * CPU search (src/search/knn.c).
 *
 * Tanimoto on u8 rows whose elements are 0..7 (CEDD; the CPU's "fast
 * path"): the tensor-core engine of gpu/knn_tc.cuh -- exact integer dot
 * products on the integer tensor cores, a pilot threshold from a random
 * sample of rows, a filtering scan that keeps only candidates, and an exact
 * final ranking per query in the reference's doubles. No distance matrix
 * is written; k <= TC_KMAX; range search the same way. A query the engine
 * cannot settle (massive exact ties overflowing its candidate list, an
 * all-zero query) is flagged and answered by the CPU, so the answer is the
 * CPU's in every case. The device copy stores the rows in a fixed random
 * permutation (so that its first rows are a uniform sample) with per-row
 * T1, T1^2, S1 (floats), T1 (u32), C3 (double) and ids.
 *
 * Every other case: the definition's loop over a row's elements (element-major,
 * one thread a row, built with --fmad=false: the CPU's doubles bit for bit)
 * in the same three passes -- a pilot of the first rows, a scan keeping the
 * rows with a distance at most the pilot's kth smallest, the candidates
 * sorted by (distance, id) per query (k_def_*). The distances are the
 * definition's doubles throughout, so no error bound is involved. k <=
 * PGPU_KNN_KMAX here too.
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
#include "gpu/knn_fx.cuh"
#include "gpu/knn_ix.cuh"
#include "gpu/knn_tc.cuh"

#define KNN_CACHE 8 /* device copies kept at most */

/* One index on the device. */
typedef struct knn_copy {
    uint64_t serial;
    uint64_t used;           /* the state's clock at its last search (LRU) */
    size_t n, dim, bytes;
    int tc;                  /* the tensor-core Tanimoto layout (below) */
    int dp;                  /* tc: bytes per device row (144 or 256) */
    uint8_t *descs;          /* tc: (n + TC_R, dp) permuted, zero padded; else (n, bytes) */
    uint64_t *ids;           /* (n), in the rows' order */
    tc_aux_t *aux;           /* tc: (cap + TC_R) */
    uint32_t *t1;            /* tc: (cap) */
    double *c3;              /* tc: (cap) */
    double *ptab;            /* tc: (ptab_rows, 8) */
    double *sd;              /* std_l2: (dim) */
    float *fx;               /* definition path: the float filter's values (dim, n) (knn_fx.cuh); NULL: none */
    fx_aux_t *fxa;           /* (n) its per-row mr, Nr */
    int8_t *ix;              /* definition path, dot-product distances: the tensor-core filter's limbs
                              * (n + IX_R, 2 ixdp) (knn_ix.cuh); NULL: none */
    ix_info_t *ixi;          /* (n + IX_R) */
    int ixdp;                /* bytes per limb (32, 64, 128 or 256) */
    /* live updates (tc): device row i < nperm holds host row perm[i] (host
     * memory); rows past nperm were appended in host order; removed rows
     * are blanked and flagged in dead */
    size_t cap, nperm, src_n; /* rows allocated; permuted; host rows seen */
    uint32_t *perm, *inv;    /* device row -> host row, host row -> device row (< nperm) */
    uint32_t *d_rm;          /* (TC_RM_CHUNK) removed device rows, a chunk at a time */
    uint8_t *dead;           /* tc: (cap) device flags */
    uint64_t dead_gen;
} knn_copy_t;

/* The pinned host tier of a tensor-core index too large for the device
 * (search_tier, below): its device layout in pinned memory, the values
 * the final pass reads resident on the device, two chunk buffers. */
typedef struct knn_tier {
    uint64_t serial;          /* the index's (0: none) */
    size_t dim, n, cap, nperm, src_n;
    int dp;
    uint64_t dead_gen;
    uint32_t *perm, *inv;     /* device row -> host row, host row -> device row (< nperm) */
    uint8_t *rows;            /* pinned (cap, dp) */
    tc_aux_t *aux;            /* pinned (cap) */
    uint32_t *t1;             /* device (cap) */
    double *c3;               /* device (cap) */
    uint64_t *ids;            /* device (cap) */
    uint8_t *dead;            /* device (cap) */
    double *ptab;             /* device */
    uint32_t *d_rm;           /* device (TC_RM_CHUNK) */
    size_t R;                 /* rows a chunk buffer holds (0: none yet) */
    uint8_t *b_rows[2];       /* device (R + TC_R, dp) */
    tc_aux_t *b_aux[2];       /* device (R + TC_R) */
    uint8_t *h_res[2];        /* pinned: a chunk's results (res_bytes each) */
    size_t res_bytes;
    void *ev[6];              /* cudaEvent_t: uploaded[2], released[2], results[2] */
} knn_tier_t;

/* The uploads of a definition-path copy (a chunk of an index searched in
 * chunks), kept in pinned memory so that the next call uploads them again
 * without laying the rows out: what put() sent, field by field. */
#define IMAGE_PUTS 8
typedef struct copy_image {
    int valid, failed, nput;
    size_t n, src_n;
    uint64_t dead_gen;
    int ixdp;
    struct {
        size_t field;            /* offsetof the device pointer in knn_copy_t */
        void *host;              /* pinned */
        size_t bytes;
        const char *tag;
    } put[IMAGE_PUTS];
} copy_image_t;

/* The images of one chunking (rows per chunk) of one index state (serial,
 * rows, removals): any change makes them stale. */
typedef struct chunk_images {
    uint64_t serial, dead_gen;
    size_t n, rows, count;
    copy_image_t *img;
} chunk_images_t;

typedef struct knn_state {
    knn_copy_t copy[KNN_CACHE];
    knn_tier_t tier;
    chunk_images_t ci;
    copy_image_t *rec;           /* put() records into it (NULL: no) */
    const copy_image_t *replay;  /* copy_of uploads it instead of laying out (NULL: no) */
    size_t replayed;             /* bytes uploaded from images (added to, by image_replay) */
    uint64_t clock;
    /* per-call buffers of the definition path, for def_q queries, def_s
     * pilot rows, def_take answers and def_dim elements (grown as needed) */
    size_t def_q, def_s, def_take, def_dim;
    double *d_qv;            /* (def_q, def_dim) queries as doubles */
    double *d_dense;         /* (def_q, def_s) pilot distances */
    uint32_t *d_thr, *d_dcnt, *d_dcand; /* (def_q), (def_q), (def_q, TC_CAND) */
    double *d_dist, *h_dist; /* (def_q, def_take) answers; pinned mirror */
    uint64_t *d_id, *h_id;
    uint8_t *d_dflag, *h_dflag;
    float *d_fq;             /* (def_q, def_dim) queries as the float filter's values */
    fx_qinfo_t *d_fqi;       /* (def_q) */
    uint32_t *d_dn, *h_dn;   /* (def_q) range hits */
    int8_t *d_iq;            /* (def_q, 2 IX_MAXDIM) queries as the tensor-core filter's limbs */
    ix_info_t *d_iqi;        /* (def_q) */
    float *d_ithr;           /* (def_q) its thresholds */
    int sms;                 /* the device's multiprocessors */
    /* per-call buffers of the tensor-core engine, for tq_cap queries: the
     * inputs (query rows, qinfo, prepared queries) and the outputs
     * (counts, flags, distances, ids) each packed into one region, so that
     * a call makes one upload and one download (tc_io) */
    size_t tq_cap, tq_dense, tq_out; /* queries; pilot floats; output entries */
    uint8_t *d_in, *h_in, *d_out, *h_out;
    float *d_pilot;          /* (tq_dense) */
    uint32_t *d_cnt, *d_cand;
} knn_state_t;

/* ------------------------------------------------------------- kernels */


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

/* The definition of distance D between query a (dim doubles) and row b
 * (element i at b[i * st], in elements: the copies are element-major, so
 * a warp's threads read consecutive elements), operation for operation as
 * src/search/distance.c. */
template <int D>
__device__ double distance_of(const double *__restrict__ a, const uint8_t *__restrict__ b, int elem, size_t dim,
                              const double *__restrict__ sd, size_t st)
{
    double d = 0.0, sa = 0.0, sb = 0.0;
    size_t i;
    if constexpr (D == PDIST_TANIMOTO) {
        double t1 = 0.0, t2 = 0.0, c1 = 0.0, c2 = 0.0, c3 = 0.0;
        for (i = 0; i < dim; i++) {
            t1 = __dadd_rn(t1, elem_at(elem, b, i * st));
            t2 = __dadd_rn(t2, a[i]);
        }
        if (t1 == 0.0 && t2 == 0.0) return 0.0;
        if (t1 == 0.0 || t2 == 0.0) return 100.0;
        for (i = 0; i < dim; i++) {
            const double p = __ddiv_rn(elem_at(elem, b, i * st), t1), q = __ddiv_rn(a[i], t2);
            c1 = __dadd_rn(c1, __dmul_rn(p, q));
            c2 = __dadd_rn(c2, __dmul_rn(q, q));
            c3 = __dadd_rn(c3, __dmul_rn(p, p));
        }
        return __dsub_rn(100.0, __dmul_rn(100.0, __ddiv_rn(c1, __dsub_rn(__dadd_rn(c2, c3), c1))));
    } else if constexpr (D == PDIST_L1) {
        for (i = 0; i < dim; i++) d = __dadd_rn(d, fabs(__dsub_rn(a[i], elem_at(elem, b, i * st))));
        return d;
    } else if constexpr (D == PDIST_L2 || D == PDIST_STD_L2) {
        for (i = 0; i < dim; i++) {
            double x = __dsub_rn(a[i], elem_at(elem, b, i * st));
            if constexpr (D == PDIST_STD_L2) x = __ddiv_rn(x, sd ? sd[i] : 1.0);
            d = __dadd_rn(d, __dmul_rn(x, x));
        }
        return __dsqrt_rn(d);
    } else if constexpr (D == PDIST_CHI2) {
        for (i = 0; i < dim; i++) {
            const double x = a[i], y = elem_at(elem, b, i * st), s = __dadd_rn(x, y);
            if (s > 0.0) {
                const double t = __dsub_rn(x, y);
                d = __dadd_rn(d, __ddiv_rn(__dmul_rn(t, t), s));
            }
        }
        return d;
    } else if constexpr (D == PDIST_INTERSECTION) {
        for (i = 0; i < dim; i++) {
            const double x = a[i], y = elem_at(elem, b, i * st);
            d = __dadd_rn(d, x < y ? x : y);
            sa = __dadd_rn(sa, x);
            sb = __dadd_rn(sb, y);
        }
        if (sa == 0.0 && sb == 0.0) return 0.0;
        return __dsub_rn(1.0, __ddiv_rn(d, sa > sb ? sa : sb));
    } else if constexpr (D == PDIST_HELLINGER) {
        for (i = 0; i < dim; i++) {
            const double x = a[i], y = elem_at(elem, b, i * st);
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
            const double x = a[i], y = elem_at(elem, b, i * st);
            d = __dadd_rn(d, __dmul_rn(x, y));
            sa = __dadd_rn(sa, __dmul_rn(x, x));
            sb = __dadd_rn(sb, __dmul_rn(y, y));
        }
        if (sa == 0.0 && sb == 0.0) return 0.0;
        if (sa == 0.0 || sb == 0.0) return 1.0;
        return __dsub_rn(1.0, __ddiv_rn(d, __dsqrt_rn(__dmul_rn(sa, sb))));
    }
}

/* ---- the definition path's pilot, filter and final passes ----
 * The same shape as the tensor-core engine, in the definition's doubles:
 * every key is the CPU's distance itself, so the candidate set {d <= theta},
 * theta the kth smallest distance of the pilot sample (>= the kth smallest
 * of the table), holds the answer with its ties; no error bound is needed.
 * Distances order as unsigned integers through dkey (NaN last); the
 * selection works on their high 32 bits, so theta is the top of the kth
 * smallest's 2^-20-wide bucket (a few more candidates, never fewer). */

__device__ __forceinline__ unsigned long long dkey(double d)
{
    const unsigned long long u = (unsigned long long)__double_as_longlong(d);
    if (isnan(d)) return ~0ull;
    return (u >> 63) ? ~u : u | (1ull << 63);
}

template <int D>
__global__ void __launch_bounds__(256)
k_def_pilot(const uint8_t *__restrict__ descs, size_t n, size_t S, size_t dim, size_t esize, int elem,
            const double *__restrict__ sdv, const double *__restrict__ qv, double *__restrict__ dense)
{
    const size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r < S)
        dense[(size_t)blockIdx.y * S + r] =
            distance_of<D>(qv + (size_t)blockIdx.y * dim, descs + r * esize, elem, dim, sdv, n);
}

/* theta per query: the high word of the kth smallest pilot distance's key;
 * zeroes the query's count and flag. */
__global__ void __launch_bounds__(TC_SEL_THREADS)
k_def_select(const double *__restrict__ dense, size_t S, uint32_t kth, uint32_t *__restrict__ thr,
             uint32_t *__restrict__ cnt, uint8_t *__restrict__ flag)
{
    __shared__ uint32_t sh[2048 + 34];
    const double *v = dense + (size_t)blockIdx.x * S;
    if (threadIdx.x == 0) {
        cnt[blockIdx.x] = 0;
        flag[blockIdx.x] = 0;
    }
    /* the kth largest of ~hi is the kth smallest hi */
    const uint32_t b = tc_radix_kth([v](uint32_t i) { return ~(uint32_t)(dkey(v[i]) >> 32); }, (uint32_t)S, kth, sh);
    if (threadIdx.x == 0) thr[blockIdx.x] = ~b;
}

template <int D>
__global__ void __launch_bounds__(256)
k_def_scan(const uint8_t *__restrict__ descs, size_t n, size_t dim, size_t esize, int elem,
           const double *__restrict__ sdv, const double *__restrict__ qv, const uint32_t *__restrict__ thr,
           uint32_t *__restrict__ cnt, uint32_t *__restrict__ cand)
{
    const size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int q = blockIdx.y;
    if (r >= n) return;
    const double d = distance_of<D>(qv + (size_t)q * dim, descs + r * esize, elem, dim, sdv, n);
    if ((uint32_t)(dkey(d) >> 32) <= thr[q]) {
        const uint32_t pos = atomicAdd(&cnt[q], 1u);
        if (pos < TC_CAND) cand[(size_t)q * TC_CAND + pos] = (uint32_t)r;
    }
}

/* One block per query: its candidates' distances (the definition again),
 * sorted by (distance, id); k-NN (RANGE 0): the first take written; range
 * (RANGE 1): those <= radius, all of them, their number in out_n. More
 * candidates than the list holds: flagged. */
template <int D, int RANGE>
__global__ void __launch_bounds__(TC_FINAL_THREADS)
k_def_final(const uint8_t *__restrict__ descs, const uint64_t *__restrict__ ids, size_t n, size_t dim, size_t esize,
            int elem, const double *__restrict__ sdv, const double *__restrict__ qv, const uint32_t *__restrict__ cnt,
            const uint32_t *__restrict__ cand, int take, double radius, double *__restrict__ out_d,
            uint64_t *__restrict__ out_id, uint32_t *__restrict__ out_n, uint8_t *__restrict__ flag)
{
    extern __shared__ __align__(16) uint8_t smem[];
    double *key = (double *)smem;                /* (TC_CAND) */
    uint64_t *sid = (uint64_t *)(key + TC_CAND); /* (TC_CAND) */
    __shared__ int s_n;
    const int q = blockIdx.x;
    const uint32_t c = cnt[q];
    if (c > TC_CAND || (!RANGE && c < (uint32_t)take)) {
        if (threadIdx.x == 0) flag[q] = 1;
        return;
    }
    if (threadIdx.x == 0) s_n = 0;
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < c; i += blockDim.x) {
        const uint32_t r = cand[(size_t)q * TC_CAND + i];
        const double d = distance_of<D>(qv + (size_t)q * dim, descs + (size_t)r * esize, elem, dim, sdv, n);
        if (RANGE) {
            if (d <= radius) {
                const int pos = atomicAdd(&s_n, 1);
                key[pos] = d;
                sid[pos] = ids[r];
            }
        } else {
            key[i] = d;
            sid[i] = ids[r];
        }
    }
    __syncthreads();
    const int m = RANGE ? s_n : (int)c;
    tc_sort_hits(key, sid, m, RANGE ? m : take, out_d + (size_t)q * (RANGE ? TC_CAND : take),
                 out_id + (size_t)q * (RANGE ? TC_CAND : take));
    if (RANGE && threadIdx.x == 0) out_n[q] = (uint32_t)m;
}

/* ---------------------------------------------------------- the state */

static void copy_free(patina_gpu_t *g, knn_copy_t *c)
{
    pgpu_free_n(g, 13, &c->descs, &c->ids, &c->aux, &c->t1, &c->c3, &c->ptab, &c->sd, &c->dead, &c->d_rm, &c->fx,
                &c->fxa, &c->ix, &c->ixi);
    free(c->perm);
    free(c->inv);
    memset(c, 0, sizeof *c);
}

static void buffers_free(patina_gpu_t *g, knn_state_t *st)
{
    pgpu_free_n(g, 18, &st->d_qv, &st->d_dense, &st->d_thr, &st->d_dcnt, &st->d_dcand, &st->d_dist, &st->h_dist,
                &st->d_id, &st->h_id, &st->d_dflag, &st->h_dflag, &st->d_fq, &st->d_fqi, &st->d_dn, &st->h_dn,
                &st->d_iq, &st->d_iqi, &st->d_ithr);
    st->def_q = st->def_s = st->def_take = st->def_dim = 0;
}

static void tc_buffers_free(patina_gpu_t *g, knn_state_t *st)
{
    pgpu_free_n(g, 7, &st->d_in, &st->h_in, &st->d_out, &st->h_out, &st->d_pilot, &st->d_cnt, &st->d_cand);
    st->tq_cap = st->tq_dense = st->tq_out = 0;
}

static void tier_buffers_free(patina_gpu_t *g, knn_tier_t *t)
{
    pgpu_free_n(g, 6, &t->b_rows[0], &t->b_rows[1], &t->b_aux[0], &t->b_aux[1], &t->h_res[0], &t->h_res[1]);
    t->R = t->res_bytes = 0;
}

static void tier_free(patina_gpu_t *g, knn_tier_t *t)
{
    (void)cudaStreamSynchronize((cudaStream_t)pgpu_stream(g, 0));
    (void)cudaStreamSynchronize((cudaStream_t)pgpu_stream(g, 1));
    tier_buffers_free(g, t);
    pgpu_free_n(g, 8, &t->rows, &t->aux, &t->t1, &t->c3, &t->ids, &t->dead, &t->ptab, &t->d_rm);
    for (int i = 0; i < 6; i++)
        if (t->ev[i]) (void)cudaEventDestroy((cudaEvent_t)t->ev[i]);
    free(t->perm);
    free(t->inv);
    memset(t, 0, sizeof *t);
}

static void image_free(patina_gpu_t *g, copy_image_t *im)
{
    for (int i = 0; i < im->nput; i++) pgpu_free(g, im->put[i].host);
    memset(im, 0, sizeof *im);
}

static void images_free(patina_gpu_t *g, chunk_images_t *ci)
{
    for (size_t i = 0; i < ci->count; i++) image_free(g, &ci->img[i]);
    free(ci->img);
    memset(ci, 0, sizeof *ci);
}

static void knn_release(patina_gpu_t *g, void *state)
{
    knn_state_t *st = (knn_state_t *)state;
    (void)cudaStreamSynchronize((cudaStream_t)pgpu_stream(g, 0));
    tier_free(g, &st->tier);
    images_free(g, &st->ci);
    for (int i = 0; i < KNN_CACHE; i++)
        if (st->copy[i].serial) copy_free(g, &st->copy[i]);
    buffers_free(g, st);
    tc_buffers_free(g, st);
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
    st->sms = g->sm_count;
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

/* Device memory for a copy's field *dst, filled from src; recorded in
 * st->rec (a pinned copy of src, uploaded from there) when set. */
static patina_status put(patina_gpu_t *g, knn_state_t *st, knn_copy_t *c, void **dst, const void *src,
                         size_t bytes, const char *tag)
{
    copy_image_t *im = st->rec;
    PATINA_TRY(sdev(g, st, c, dst, bytes, tag));
    if (im && bytes && !im->failed) {
        void *h = NULL;
        if (im->nput < IMAGE_PUTS && pgpu_pin_alloc(g, &h, bytes, PGPU_FAM_SEARCH, "chunk image") == PATINA_OK) {
            memcpy(h, src, bytes);
            im->put[im->nput].field = (size_t)((uint8_t *)dst - (uint8_t *)c);
            im->put[im->nput].host = h;
            im->put[im->nput].bytes = bytes;
            im->put[im->nput++].tag = tag;
            src = h;
        } else { /* no pinned memory: this chunk is laid out every time */
            patina_clear_error();
            im->failed = 1;
        }
    }
    if (bytes) PGPU_CU(cudaMemcpy(*dst, src, bytes, cudaMemcpyHostToDevice));
    return PATINA_OK;
}

/* A definition-path copy made from its image: the recorded uploads, from
 * pinned memory, and the copy's sizes. */
static patina_status image_replay(patina_gpu_t *g, knn_state_t *st, knn_copy_t *c, const copy_image_t *im)
{
    c->n = im->n;
    c->src_n = im->src_n;
    c->dead_gen = im->dead_gen;
    c->ixdp = im->ixdp;
    for (int i = 0; i < im->nput; i++) {
        void **dst = (void **)((uint8_t *)c + im->put[i].field);
        PATINA_TRY(sdev(g, st, c, dst, im->put[i].bytes, im->put[i].tag));
        PGPU_CU(cudaMemcpy(*dst, im->put[i].host, im->put[i].bytes, cudaMemcpyHostToDevice));
        st->replayed += im->put[i].bytes;
    }
    return PATINA_OK;
}

#define TC_RM_CHUNK 8192 /* removed rows applied per launch */

/* Flags removed rows of a tier (its rows are blanked in pinned memory). */
__global__ void k_tier_flag(uint8_t *__restrict__ dead, const uint32_t *__restrict__ rm, uint32_t n)
{
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) dead[rm[i]] = 1;
}

/* Blanks removed rows of a tensor-core copy (device rows rm[0 .. n)): zero
 * bytes and a zero row's sums (t = 0: they pass no filter that a live row
 * could fail), and flags them for the final pass, which skips them. */
__global__ void k_tc_blank(uint8_t *__restrict__ rows, tc_aux_t *__restrict__ aux, uint8_t *__restrict__ dead,
                           const uint32_t *__restrict__ rm, uint32_t n, int dp)
{
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const uint32_t r = rm[i];
        for (int b = 0; b < dp; b += 4) *(uint32_t *)(rows + (size_t)r * dp + b) = 0u;
        aux[r] = make_float4(0.f, 0.f, 1.f, 1e30f);
        dead[r] = 1;
    }
}

/* Host rows [h0, h0 + m) laid out as device rows: row i (dp bytes, zero
 * padded), its sums, T1, C3 and id from host row map ? map[i] : h0 + i. */
static void tc_lay_rows(const pgpu_knn_index_t *idx, const uint32_t *map, size_t h0, size_t m, size_t dp,
                        uint8_t *rows, tc_aux_t *aux, uint32_t *t1, double *c3, uint64_t *ids)
{
    for (size_t i = 0; i < m; i++) {
        const size_t h = map ? map[i] : h0 + i;
        const uint8_t *b = idx->descs + h * idx->bytes;
        uint32_t s1 = 0, tt = idx->t1[h];
        for (size_t e = 0; e < idx->dim; e++) s1 += (uint32_t)b[e] * b[e];
        memcpy(rows + i * dp, b, idx->dim);
        memset(rows + i * dp + idx->dim, 0, dp - idx->dim);
        aux[i] = tt ? make_float4((float)tt, (float)tt * (float)tt, (float)s1, (float)s1 / (float)tt)
                    : make_float4(0.f, 0.f, 1.f, 1e30f);
        t1[i] = tt;
        c3[i] = idx->c3[h];
        ids[i] = idx->ids[h];
    }
}

/* Host rows [h0, h0 + m) laid out as device rows (tc_lay_rows), copied to
 * the copy's rows [d0, d0 + m). */
static patina_status tc_put_rows(patina_gpu_t *g, knn_copy_t *c, const pgpu_knn_index_t *idx, const uint32_t *map,
                                 size_t h0, size_t m, size_t d0)
{
    const size_t dp = (size_t)c->dp;
    uint8_t *rows = (uint8_t *)malloc(m * dp + 1);
    tc_aux_t *aux = (tc_aux_t *)malloc(m * sizeof *aux + 1);
    uint32_t *t1 = (uint32_t *)malloc(m * sizeof *t1 + 1);
    double *c3 = (double *)malloc(m * sizeof *c3 + 1);
    uint64_t *ids = (uint64_t *)malloc(m * sizeof *ids + 1);
    patina_status s = PATINA_OK;
    (void)g;
    if (!rows || !aux || !t1 || !c3 || !ids) {
        s = patina__fail(PATINA_E_NOMEM, "gpu search: out of memory laying out %zu rows", m);
        goto done;
    }
    tc_lay_rows(idx, map, h0, m, dp, rows, aux, t1, c3, ids);
    if (cudaMemcpy(c->descs + d0 * dp, rows, m * dp, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(c->aux + d0, aux, m * sizeof *aux, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(c->t1 + d0, t1, m * sizeof *t1, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(c->c3 + d0, c3, m * sizeof *c3, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(c->ids + d0, ids, m * sizeof *ids, cudaMemcpyHostToDevice) != cudaSuccess)
        s = pgpu_fail((int)cudaGetLastError(), "gpu search: uploading rows", __FILE__, __LINE__);
done:
    free(rows);
    free(aux);
    free(t1);
    free(c3);
    free(ids);
    return s;
}

/* Brings the copy's removed rows up to the index's: the rows removed since
 * it last looked (the index's removal log), mapped to device rows, blanked
 * and flagged -- work in proportion to the changes. */
/* The rows removed since *dead_gen (the index's removal log), mapped to
 * device rows (inv below nperm; appended rows keep their host row) and
 * sent to d_rm a chunk at a time; each chunk then either blanked in the
 * pinned rows of `tier` and flagged in dead, or (tier NULL) blanked in the
 * device rows and flagged by k_tc_blank. */
static patina_status sync_removed(patina_gpu_t *g, const pgpu_knn_index_t *idx, uint64_t *dead_gen,
                                  const uint32_t *inv, size_t nperm, uint32_t *d_rm, knn_tier_t *tier, uint8_t *rows,
                                  tc_aux_t *aux, uint8_t *dead, int dp)
{
    cudaStream_t st = (cudaStream_t)pgpu_stream(g, 0);
    uint32_t buf[1024];
    cudaError_t e = cudaSuccess;
    while (*dead_gen < idx->dead_gen && e == cudaSuccess) {
        size_t m = idx->dead_gen - *dead_gen, done = 0;
        if (m > TC_RM_CHUNK) m = TC_RM_CHUNK;
        while (done < m && e == cudaSuccess) { /* through a small host buffer */
            const size_t b = m - done < 1024 ? m - done : 1024;
            for (size_t i = 0; i < b; i++) {
                const uint32_t h = idx->rm_log[*dead_gen + done + i];
                buf[i] = h < nperm ? inv[h] : h;
                if (tier) {
                    memset(tier->rows + (size_t)buf[i] * (size_t)dp, 0, (size_t)dp);
                    tier->aux[buf[i]] = make_float4(0.f, 0.f, 1.f, 1e30f);
                }
            }
            e = cudaMemcpy(d_rm + done, buf, b * sizeof *buf, cudaMemcpyHostToDevice);
            done += b;
        }
        if (e == cudaSuccess) {
            const unsigned grid = (unsigned)((m + 255) / 256);
            if (tier) k_tier_flag<<<grid, 256, 0, st>>>(dead, d_rm, (uint32_t)m);
            else k_tc_blank<<<grid, 256, 0, st>>>(rows, aux, dead, d_rm, (uint32_t)m, dp);
            e = cudaGetLastError();
        }
        if (e == cudaSuccess) e = cudaStreamSynchronize(st);
        *dead_gen += m;
    }
    if (e != cudaSuccess) return pgpu_fail((int)e, "gpu search: removed rows", __FILE__, __LINE__);
    return PATINA_OK;
}

static patina_status tc_sync_dead(patina_gpu_t *g, knn_copy_t *c, const pgpu_knn_index_t *idx)
{
    return sync_removed(g, idx, &c->dead_gen, c->inv, c->nperm, c->d_rm, NULL, c->descs, c->aux, c->dead, c->dp);
}

/* A fixed pseudo-random permutation of 0 .. n-1 (xorshift, Fisher-Yates):
 * device copies store their rows in it, so that the first rows are a
 * uniform sample for the pilot. */
static void make_perm(uint32_t *perm, size_t n)
{
    uint64_t x = 0x243f6a8885a308d3ull ^ n;
    size_t i;
    for (i = 0; i < n; i++) perm[i] = (uint32_t)i;
    for (i = n; i > 1; i--) {
        size_t j;
        uint32_t t;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        j = (size_t)(x % i);
        t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

/* ---- the float filter's values (knn_fx.cuh) ---- */

static double host_elem(int elem, const uint8_t *row, size_t i)
{
    switch (elem) {
    case PATINA_ELEM_U8: return (double)row[i];
    case PATINA_ELEM_U16: { uint16_t v; memcpy(&v, row + 2 * i, 2); return (double)v; }
    case PATINA_ELEM_U32: { uint32_t v; memcpy(&v, row + 4 * i, 4); return (double)v; }
    case PATINA_ELEM_F32: { float v; memcpy(&v, row + 4 * i, 4); return (double)v; }
    default: { double v; memcpy(&v, row + 8 * i, 8); return v; }
    }
}

/* x rounded to a float upwards */
static float f_up(double x)
{
    float f = (float)x;
    if ((double)f < x) f = nextafterf(f, INFINITY);
    return f;
}

static int fx_has(int dist) { return dist != PDIST_TANIMOTO && dist >= 0 && dist < PDIST_ROOTSIFT_RATIO; }

/* The filter's values of one row or query of dim elements (element i of
 * the source at get(i)): x[i * xs] (floats), its margin share m and norm N
 * (knn_fx.cuh's table). 0 when the vector is outside the filter's domain
 * (a value out of [2^-60, 2^40] in magnitude, a negative element where the
 * distance needs none, a non-finite value). */
template <typename Get>
static int fx_vector(int dist, Get get, size_t dim, const double *sd, float *x, size_t xs, float *m, float *nrm)
{
    const double c = (double)(dim + 16) * 0x1p-24 * (1.0 + 0x1p-10), tiny = (double)dim * 0x1p-120;
    double nn = 0.0; /* the norm's sum */
    for (size_t i = 0; i < dim; i++) {
        const double v = get(i);
        double t = v, a;
        float f;
        if (!isfinite(v)) return 0;
        if (v < 0.0 && (dist == PDIST_CHI2 || dist == PDIST_INTERSECTION || dist == PDIST_HELLINGER)) return 0;
        if (dist == PDIST_STD_L2) t = v / (sd ? sd[i] : 1.0);
        if (dist == PDIST_HELLINGER) t = sqrt(v);
        a = fabs(t);
        if (!isfinite(t) || (a != 0.0 && (a < 0x1p-60 || a > 0x1p40))) return 0;
        f = (float)t;
        x[i * xs] = f;
        switch (dist) {
        case PDIST_L1: nn += fabs((double)f); break;
        case PDIST_L2: case PDIST_STD_L2: case PDIST_COSINE: nn += (double)f * (double)f; break;
        default: nn += v; break; /* chi2, intersection, hellinger: the sum */
        }
    }
    switch (dist) {
    case PDIST_INTERSECTION: *nrm = (float)nn; *m = f_up(c + tiny); break;
    case PDIST_HELLINGER: case PDIST_COSINE: *nrm = (float)sqrt(nn); *m = f_up(c + tiny); break;
    default: *nrm = (float)nn; *m = f_up(c * nn + tiny); break;
    }
    return 1;
}

/* The float filter's copy of a definition-path copy whose rows (elem
 * typed, element-major (dim, n)) are `rows`: c->fx / c->fxa, or none when
 * a row is outside the filter's domain (the definition kernels alone). */
static patina_status fx_upload(patina_gpu_t *g, knn_state_t *st, knn_copy_t *c, const pgpu_knn_index_t *idx,
                               const uint8_t *rows)
{
    const size_t n = c->n, dim = c->dim, es = idx->bytes / idx->dim;
    float *x;
    fx_aux_t *a;
    patina_status s;
    if (!fx_has(idx->dist) || n == 0 || dim > ((size_t)1 << 20)) return PATINA_OK;
    x = (float *)malloc(n * dim * sizeof *x + 1);
    a = (fx_aux_t *)malloc(n * sizeof *a + 1);
    if (!x || !a) {
        free(x);
        free(a);
        return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory");
    }
    for (size_t r = 0; r < n; r++) {
        const int elem = (int)idx->elem;
        if (!fx_vector(idx->dist, [&](size_t i) { return host_elem(elem, rows + (i * n + r) * es, 0); }, dim, idx->sd,
                       x + r, n, &a[r].x, &a[r].y)) {
            free(x);
            free(a);
            return PATINA_OK; /* the definition kernels alone */
        }
    }
    s = put(g, st, c, (void **)&c->fx, x, n * dim * sizeof *x, "filter values");
    if (s == PATINA_OK) s = put(g, st, c, (void **)&c->fxa, a, n * sizeof *a, "filter norms");
    free(x);
    free(a);
    if (s != PATINA_OK) pgpu_free_n(g, 2, &c->fx, &c->fxa);
    return s;
}

static int ix_has(int dist, size_t dim)
{
    return (dist == PDIST_L2 || dist == PDIST_STD_L2 || dist == PDIST_COSINE || dist == PDIST_HELLINGER) && dim >= 1 &&
           dim <= IX_MAXDIM;
}

static int ix_dp(size_t dim) { return dim <= 32 ? 32 : dim <= 64 ? 64 : dim <= 128 ? 128 : 256; }

/* The tensor-core filter's limbs of one row or query (element i at
 * get(i)): out (2 dp bytes: Q1 then Q2, zero padded) and its s, A, E, N or
 * W (knn_ix.cuh). 0 when the vector is outside the filter's domain (a
 * non-finite value, a negative element for hellinger, a value above 2^60). */
template <typename Get>
static int ix_vector(int dist, Get get, size_t dim, const double *sd, int dp, int8_t *out, ix_info_t *info)
{
    double x[IX_MAXDIM], mx = 0.0, n2 = 0.0, sum = 0.0, e2 = 0.0, q1n = 0.0, q2n = 0.0;
    float s;
    memset(out, 0, 2 * (size_t)dp);
    for (size_t i = 0; i < dim; i++) {
        const double v = get(i);
        double t = v;
        if (!isfinite(v)) return 0;
        if (dist == PDIST_HELLINGER) {
            if (v < 0.0) return 0;
            t = sqrt(v);
        }
        if (dist == PDIST_STD_L2) t = v / (sd ? sd[i] : 1.0);
        if (!isfinite(t) || fabs(t) > 0x1p60) return 0;
        x[i] = t;
        if (fabs(t) > mx) mx = fabs(t);
        n2 += t * t;
        sum += v;
    }
    s = (float)(mx / 127.0);
    if (mx > 0.0 && s == 0.0f) return 0; /* below float's range */
    for (size_t i = 0; i < dim && s > 0.0f; i++) {
        const double y = x[i] / (double)s, a = nearbyint(y), b = nearbyint((y - a) * 254.0);
        const double e = x[i] - (double)s * (a + b / 254.0);
        if (fabs(a) > 127.0 || fabs(b) > 127.0) return 0;
        out[i] = (int8_t)a;
        out[dp + i] = (int8_t)b;
        e2 += e * e;
        q1n += a * a;
        q2n += b * b;
    }
    info->x = s;
    info->y = f_up((double)s * (sqrt(q1n) + sqrt(q2n) / 254.0) * (1.0 + 0x1p-40));
    info->z = f_up(sqrt(e2) * (1.0 + 0x1p-40));
    if (dist == PDIST_L2 || dist == PDIST_STD_L2) {
        info->w = (float)n2;
    } else { /* 1 / |x| rounded up; 0 for a zero vector */
        const double nn = dist == PDIST_HELLINGER ? sqrt(sum) : sqrt(n2);
        info->w = nn > 0.0 ? f_up(1.0 / nn * (1.0 + 0x1p-50)) : 0.0f;
        if (nn > 0.0 && !(info->w > 0.0f && isfinite(info->w))) return 0;
    }
    return 1;
}

/* The tensor-core filter's copy (c->ix / c->ixi) of a definition-path copy
 * whose rows (elem typed, element-major (dim, n)) are `rows`; 0 in *made
 * when a row is outside its domain. */
static patina_status ix_upload(patina_gpu_t *g, knn_state_t *st, knn_copy_t *c, const pgpu_knn_index_t *idx,
                               const uint8_t *rows, int *made)
{
    const size_t n = c->n, dim = c->dim, es = idx->bytes / idx->dim;
    const int dp = ix_dp(dim);
    int8_t *q;
    ix_info_t *in;
    patina_status s;
    *made = 0;
    if (!ix_has(idx->dist, dim) || n == 0) return PATINA_OK;
    q = (int8_t *)calloc((n + IX_R) * 2 * (size_t)dp, 1);
    in = (ix_info_t *)calloc(n + IX_R, sizeof *in);
    if (!q || !in) {
        free(q);
        free(in);
        return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory");
    }
    for (size_t r = 0; r < n; r++) {
        const int elem = (int)idx->elem;
        if (!ix_vector(idx->dist, [&](size_t i) { return host_elem(elem, rows + (i * n + r) * es, 0); }, dim, idx->sd,
                       dp, q + r * 2 * dp, &in[r])) {
            free(q);
            free(in);
            return PATINA_OK;
        }
    }
    s = put(g, st, c, (void **)&c->ix, q, (n + IX_R) * 2 * (size_t)dp, "filter limbs");
    if (s == PATINA_OK) s = put(g, st, c, (void **)&c->ixi, in, (n + IX_R) * sizeof *in, "filter norms");
    free(q);
    free(in);
    if (s != PATINA_OK) {
        pgpu_free_n(g, 2, &c->ix, &c->ixi);
        return s;
    }
    c->ixdp = dp;
    *made = 1;
    return PATINA_OK;
}

/* The tensor-core layout of a Tanimoto fast-path index: rows in a fixed
 * random permutation (xorshift, Fisher-Yates; the pilot samples the first
 * rows), padded to dp bytes, room for a quarter more rows (appended by
 * later puts) and TC_R zero rows after them (stages read whole chunks). */
static patina_status tc_upload(patina_gpu_t *g, knn_state_t *st, knn_copy_t *c, const pgpu_knn_index_t *idx)
{
    const size_t n = idx->n, dp = (size_t)c->dp, cap = n + n / 4 + 1024;
    patina_status s;
    size_t i;
    c->perm = (uint32_t *)malloc(n * sizeof *c->perm + 1);
    c->inv = (uint32_t *)malloc(n * sizeof *c->inv + 1);
    if (!c->perm || !c->inv) return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory laying out %zu rows", n);
    make_perm(c->perm, n);
    for (i = 0; i < n; i++) c->inv[c->perm[i]] = (uint32_t)i;
    c->cap = cap;
    c->nperm = n;
    c->dead_gen = 0;
    s = sdev(g, st, c, (void **)&c->descs, (cap + TC_R) * dp, "descriptors");
    if (s == PATINA_OK) s = sdev(g, st, c, (void **)&c->aux, (cap + TC_R) * sizeof *c->aux, "row sums");
    if (s == PATINA_OK) s = sdev(g, st, c, (void **)&c->t1, cap * sizeof *c->t1, "row sums");
    if (s == PATINA_OK) s = sdev(g, st, c, (void **)&c->c3, cap * sizeof *c->c3, "row squares");
    if (s == PATINA_OK) s = sdev(g, st, c, (void **)&c->ids, cap * sizeof *c->ids, "ids");
    if (s == PATINA_OK) s = sdev(g, st, c, (void **)&c->dead, cap, "removed rows");
    if (s == PATINA_OK) s = sdev(g, st, c, (void **)&c->d_rm, TC_RM_CHUNK * sizeof *c->d_rm, "removed rows");
    if (s == PATINA_OK &&
        (cudaMemset(c->descs, 0, (cap + TC_R) * dp) != cudaSuccess ||
         cudaMemset(c->aux, 0, (cap + TC_R) * sizeof *c->aux) != cudaSuccess || cudaMemset(c->dead, 0, cap) != cudaSuccess))
        s = pgpu_fail((int)cudaGetLastError(), "gpu search: clearing a copy", __FILE__, __LINE__);
    if (s == PATINA_OK && n) s = tc_put_rows(g, c, idx, c->perm, 0, n, 0);
    if (s == PATINA_OK)
        s = put(g, st, c, (void **)&c->ptab, idx->ptab, idx->ptab_rows * 8 * sizeof(double), "value table");
    c->n = c->src_n = n;
    if (s == PATINA_OK) s = tc_sync_dead(g, c, idx);
    return s;
}

/* A found tensor-core copy brought up to its index: rows added since are
 * appended (a copy without room for them is remade: returns 1 in *remake),
 * removed rows blanked. */
static patina_status tc_follow(patina_gpu_t *g, knn_copy_t *c, const pgpu_knn_index_t *idx, int *remake)
{
    *remake = 0;
    if (idx->n > c->src_n) {
        const size_t m = idx->n - c->src_n;
        if (c->n + m > c->cap) {
            *remake = 1;
            return PATINA_OK;
        }
        PATINA_TRY(tc_put_rows(g, c, idx, NULL, c->src_n, m, c->n));
        c->n += m;
        c->src_n = idx->n;
    }
    return tc_sync_dead(g, c, idx);
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
            int remake = 0;
            c = &st->copy[i];
            c->used = ++st->clock;
            if (c->tc) {
                if ((s = tc_follow(g, c, idx, &remake)) != PATINA_OK) {
                    copy_free(g, c);
                    return s;
                }
            } else {
                remake = c->src_n != idx->n || c->dead_gen != idx->dead_gen;
            }
            if (!remake) {
                *out = c;
                return PATINA_OK;
            }
            copy_free(g, c); /* remade below */
            break;
        }
    { /* a copy that cannot fit the budget is refused before its layout (seconds for 10M rows) */
        const double need = idx->t1 ? (double)(idx->n + idx->n / 4 + 1024 + TC_R) *
                                          (double)((idx->dim == 144 ? 144 : 256) + sizeof(tc_aux_t) + 21)
                                    : (double)idx->live * (double)(idx->bytes + sizeof(uint64_t));
        if (need > (double)g->budget)
            return patina__fail(PATINA_E_LIMIT, "gpu search: a copy of %zu rows needs %.0f MiB, over the budget (%.0f MiB)",
                                idx->n, need / 1048576.0, (double)g->budget / 1048576.0);
    }
    c = NULL;
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
    if (idx->t1) {
        c->tc = 1;
        c->dp = idx->dim == 144 ? 144 : 256;
        s = tc_upload(g, st, c, idx);
    } else if (st->replay) { /* a chunk laid out by an earlier call */
        s = image_replay(g, st, c, st->replay);
    } else {
        /* the definition kernels: the live rows, permuted (the pilot's
         * sample is the first rows) */
        uint8_t *rows;
        uint64_t *ids;
        uint32_t *perm;
        size_t r, w = 0;
        c->src_n = idx->n;
        c->dead_gen = idx->dead_gen;
        c->n = idx->live;
        rows = (uint8_t *)malloc(idx->live * idx->bytes + 1);
        ids = (uint64_t *)malloc(idx->live * sizeof *ids + 1);
        perm = (uint32_t *)malloc(idx->n * sizeof *perm + 1);
        if (!rows || !ids || !perm) {
            free(rows);
            free(ids);
            free(perm);
            copy_free(g, c);
            return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory");
        }
        make_perm(perm, idx->n);
        {
            const size_t es = idx->bytes / idx->dim, live = idx->live; /* element-major: (dim, live) */
            for (r = 0; r < idx->n; r++)
                if (!idx->dead || !idx->dead[perm[r]]) {
                    const uint8_t *src = idx->descs + (size_t)perm[r] * idx->bytes;
                    for (size_t e = 0; e < idx->dim; e++) memcpy(rows + (e * live + w) * es, src + e * es, es);
                    ids[w++] = idx->ids[perm[r]];
                }
        }
        free(perm);
        s = put(g, st, c, (void **)&c->descs, rows, c->n * idx->bytes, "descriptors");
        if (s == PATINA_OK && idx->sd)
            s = put(g, st, c, (void **)&c->sd, idx->sd, idx->dim * sizeof(double), "sigma");
        if (s == PATINA_OK) s = put(g, st, c, (void **)&c->ids, ids, c->n * sizeof *ids, "ids");
        if (s == PATINA_OK) {
            int made = 0;
            s = ix_upload(g, st, c, idx, rows, &made);
            if (s == PATINA_OK && !made) s = fx_upload(g, st, c, idx, rows);
        }
        free(rows);
        free(ids);
        if (st->rec && s == PATINA_OK && !st->rec->failed) {
            st->rec->n = c->n;
            st->rec->src_n = c->src_n;
            st->rec->dead_gen = c->dead_gen;
            st->rec->ixdp = c->ixdp;
            st->rec->valid = 1;
        }
    }
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

/* ---- the tensor-core engine (gpu/knn_tc.cuh) ---- */

#define TC_PILOT_MIN 8192                 /* rows of the pilot sample at least */
#define TC_PILOT_BYTES ((size_t)512 << 20) /* pilot values per launch at most */
#define TC_KNN_BATCH 4096                 /* queries per launch, k-NN */
#define TC_RANGE_BATCH 256                /* queries per launch, range */

/* Rows of the pilot sample: enough that the kth best of the sample ranks
 * about `want`th in the table (candidates ~ take n / S), at least
 * TC_PILOT_MIN, at most the table. The rank of a sample's kth best spreads
 * like a Gamma(k) variable: for k = 1 it is geometric (P(rank > 8 x mean)
 * ~ e^-8), so small k aims lower; from k = 10 on the spread is narrow.
 * A query whose candidates still overflow is retried with the whole table
 * as its pilot (tc_retry). */
static size_t tc_pilot_rows(size_t n, size_t take)
{
    const size_t want = take < 10 ? TC_CAND / 8 : take < 100 ? TC_CAND / 4 : TC_CAND / 2;
    size_t s = (take * n + want - 1) / want;
    if (s < TC_PILOT_MIN) s = TC_PILOT_MIN;
    return s < n ? s : n;
}

/* Rows per scan block: about 6 blocks per SM over the grid for batches
 * (two waves of three: long blocks keep the stage pipeline full), 12 for a
 * single query group (shorter blocks balance the memory-bound scan better;
 * measured), whole stages. */
static uint32_t tc_rows_per_block(size_t n, unsigned qgroups, int sms)
{
    size_t want = (size_t)sms * (qgroups > 1 ? 6 : 12) / (qgroups ? qgroups : 1), rpb;
    if (want < 1) want = 1;
    rpb = (n + want - 1) / want;
    rpb = (rpb + TC_R - 1) / TC_R * TC_R;
    if (rpb < 4 * TC_R) rpb = 4 * TC_R;
    return (uint32_t)rpb;
}

static size_t tc_scan_smem(int dp) { return (size_t)TC_STAGES * TC_R * ((size_t)dp + sizeof(tc_aux_t)); }
static size_t tc_final_smem(void) { return (size_t)TC_CAND * (sizeof(double) + sizeof(uint64_t) + sizeof(uint32_t)); }

/* Where one call's inputs and outputs lie in the packed regions, for m
 * queries and `per` output entries per query. */
typedef struct tc_io {
    size_t in_bytes, out_bytes;
    size_t o_qinfo;                   /* in: query rows at 0 */
    size_t o_flag, o_outd, o_outid;   /* out: counts at 0 */
} tc_io_t;

static size_t al256(size_t x) { return (x + 255) & ~(size_t)255; }

static void tc_layout(tc_io_t *io, size_t m, size_t dp, size_t per)
{
    io->o_qinfo = al256(m * dp);
    io->in_bytes = io->o_qinfo + m * sizeof(tc_qinfo_t);
    io->o_flag = al256(m * sizeof(uint32_t));
    io->o_outd = al256(io->o_flag + m);
    io->o_outid = al256(io->o_outd + m * per * sizeof(double));
    io->out_bytes = io->o_outid + m * per * sizeof(uint64_t);
}

#define IN(st, io, T, o) ((T *)((st)->d_in + (io)->o))
#define OUT(st, io, T, o) ((T *)((st)->d_out + (io)->o))

/* The scan of rows [0, n) of c for nq queries (their rows and infos on the
 * device): MODE 0 the pilot into dense (nq, n), MODE 1 the filter into
 * cnt / cand. */
template <int NK32, int T16, int MODE>
static cudaError_t tc_scan_of(const knn_copy_t *c, const uint8_t *qbytes, const tc_qinfo_t *qinfo, float *dense,
                              uint32_t *cnt, uint32_t *cand, uint32_t n, int nq, int sms, cudaStream_t s)
{
    const int qtiles = nq > 64 ? 8 : nq > 32 ? 4 : nq > 16 ? 2 : 1;
    const unsigned gy = (unsigned)((nq + 16 * qtiles - 1) / (16 * qtiles));
    const uint32_t rpb = tc_rows_per_block(n, gy, sms);
    const dim3 grid((n + rpb - 1) / rpb, gy);
    const size_t smem = tc_scan_smem(NK32 * 32 + T16 * 16);
    cudaError_t e = cudaFuncSetAttribute(k_tc_scan<NK32, T16, MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem);
    if (e != cudaSuccess) return e;
    k_tc_scan<NK32, T16, MODE><<<grid, TC_WARPS * 32, smem, s>>>(c->descs, c->aux, n, rpb, qbytes, qinfo, nq,
                                                                 qtiles, dense, (size_t)n, cnt, cand);
    return cudaGetLastError();
}

template <int NK32, int T16, int MODE>
static cudaError_t tc_scan(const knn_copy_t *c, const knn_state_t *st, const tc_io_t *io, uint32_t n, int nq,
                           int sms, cudaStream_t s)
{
    return tc_scan_of<NK32, T16, MODE>(c, st->d_in, IN(st, io, tc_qinfo_t, o_qinfo), st->d_pilot, st->d_cnt,
                                       st->d_cand, n, nq, sms, s);
}

template <int DP, int RANGE>
static cudaError_t tc_final(const knn_copy_t *c, const knn_state_t *st, const tc_io_t *io, int nq, int take,
                            int partial, int kstride, double radius, cudaStream_t s)
{
    const size_t smem = tc_final_smem();
    cudaError_t e = cudaFuncSetAttribute(k_tc_final<DP, RANGE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem);
    if (e != cudaSuccess) return e;
    k_tc_final<DP, RANGE><<<nq, TC_FINAL_THREADS, smem, s>>>(
        c->descs, c->aux, c->t1, c->c3, c->ptab, c->ids, c->dead, st->d_in, IN(st, io, tc_qinfo_t, o_qinfo),
        st->d_cnt, st->d_cand, take, partial, kstride, radius,
        OUT(st, io, double, o_outd), OUT(st, io, uint64_t, o_outid), (uint32_t *)st->d_out,
        OUT(st, io, uint8_t, o_flag));
    return cudaGetLastError();
}

/* The per-call buffers for qb queries of at most `per` output entries
 * each and `dense` pilot floats (grown, never shrunk). */
static patina_status tc_buffers(patina_gpu_t *g, knn_state_t *st, const knn_copy_t *c, size_t qb, size_t dense,
                                size_t per)
{
    tc_io_t io;
    if (st->tq_cap >= qb && st->tq_dense >= dense && st->tq_out >= qb * per) return PATINA_OK;
    if (qb < st->tq_cap) qb = st->tq_cap;
    if (dense < st->tq_dense) dense = st->tq_dense;
    if (qb * per < st->tq_out) per = (st->tq_out + qb - 1) / qb;
    tc_buffers_free(g, st);
    tc_layout(&io, qb, 256, per);
#define DEV(p, n, tag) PATINA_TRY(sdev(g, st, c, (void **)&st->p, (n) * sizeof *st->p, tag))
#define PIN(p, n, tag) PATINA_TRY(pgpu_pin_alloc(g, (void **)&st->p, (n) * sizeof *st->p, PGPU_FAM_SEARCH, tag))
    DEV(d_in, io.in_bytes, "queries");
    PIN(h_in, io.in_bytes, "queries");
    DEV(d_out, io.out_bytes, "results");
    PIN(h_out, io.out_bytes, "results");
    DEV(d_pilot, dense ? dense : 1, "pilot");
    DEV(d_cnt, qb, "candidates");
    DEV(d_cand, qb * TC_CAND, "candidates");
#undef DEV
#undef PIN
    st->tq_cap = qb;
    st->tq_dense = dense;
    st->tq_out = qb * per;
    return PATINA_OK;
}

/* The inputs of m queries (rows q, qbytes apart) in the per-call buffers
 * (io laid out for kstride results a query), uploaded on stream s: the
 * rows padded to dp bytes and their infos, with range's threshold (else
 * k_tc_select writes it). */
static cudaError_t tc_queries(knn_state_t *st, size_t dim, int dp, const uint8_t *q, size_t qbytes, size_t m,
                              int kstride, int range, double radius, tc_io_t *io, cudaStream_t s)
{
    tc_qinfo_t *qi;
    float theta = 0.f;
    tc_layout(io, m, (size_t)dp, (size_t)kstride);
    qi = (tc_qinfo_t *)(st->h_in + io->o_qinfo);
    if (range) { /* t >= 1 - r / 100, less the margins (gpu/knn_tc.cuh) */
        const double t = 1.0 - radius / 100.0;
        theta = radius >= 100.0 ? -HUGE_VALF : nextafterf((float)t * (1.0f - 1e-5f) - 1e-9f, -HUGE_VALF);
    }
    memset(st->h_in, 0, m * (size_t)dp);
    for (size_t i = 0; i < m; i++) {
        const uint8_t *a = q + i * qbytes;
        uint32_t t2 = 0, s2 = 0;
        for (size_t e2 = 0; e2 < dim; e2++) {
            t2 += a[e2];
            s2 += (uint32_t)a[e2] * a[e2];
        }
        memcpy(st->h_in + i * (size_t)dp, a, dim);
        /* an all-zero query is the CPU's (theta' = +inf: no candidates) */
        qi[i] = make_float4((float)t2, (float)t2 * (float)t2, (float)s2, t2 ? theta : HUGE_VALF);
    }
    return cudaMemcpyAsync(st->d_in, st->h_in, io->in_bytes, cudaMemcpyHostToDevice, s);
}

/* One launch group of m queries (rows q) through the engine: k-NN (range
 * 0; take results per query; a pilot of the first S rows) or range (up to
 * TC_CAND per query). The results are read with tc_result; *flag (m) = 1: the CPU
 * answers that query. */
static patina_status tc_batch(patina_gpu_t *g, knn_state_t *st, const knn_copy_t *c, const uint8_t *q,
                              size_t qbytes, size_t m, size_t take, size_t S, int range, double radius, tc_io_t *io,
                              size_t *maxn)
{
    cudaStream_t s = (cudaStream_t)pgpu_stream(g, 0);
    const int kstride = range ? TC_CAND : (int)take;
    cudaError_t e = tc_queries(st, c->dim, c->dp, q, qbytes, m, kstride, range, radius, io, s);
    size_t i;
    if (e == cudaSuccess && !range) { /* the pilot; k_tc_select also zeroes the counts and flags */
        e = c->dp == 144 ? tc_scan<4, 1, 0>(c, st, io, (uint32_t)S, (int)m, g->sm_count, s)
                         : tc_scan<8, 0, 0>(c, st, io, (uint32_t)S, (int)m, g->sm_count, s);
        if (e == cudaSuccess) {
            k_tc_select<<<(unsigned)m, TC_SEL_THREADS, 0, s>>>(st->d_pilot, S, (uint32_t)S, (uint32_t)take,
                                                               IN(st, io, tc_qinfo_t, o_qinfo), st->d_cnt,
                                                               OUT(st, io, uint8_t, o_flag));
            e = cudaGetLastError();
        }
    } else if (e == cudaSuccess) {
        e = cudaMemsetAsync(st->d_cnt, 0, m * sizeof *st->d_cnt, s);
        if (e == cudaSuccess) e = cudaMemsetAsync(st->d_out + io->o_flag, 0, m, s);
    }
    if (e == cudaSuccess)
        e = c->dp == 144 ? tc_scan<4, 1, 1>(c, st, io, (uint32_t)c->n, (int)m, g->sm_count, s)
                         : tc_scan<8, 0, 1>(c, st, io, (uint32_t)c->n, (int)m, g->sm_count, s);
    if (e == cudaSuccess) {
        if (c->dp == 144) e = range ? tc_final<144, 1>(c, st, io, (int)m, 0, 0, kstride, radius, s)
                                    : tc_final<144, 0>(c, st, io, (int)m, (int)take, 0, kstride, 0.0, s);
        else e = range ? tc_final<256, 1>(c, st, io, (int)m, 0, 0, kstride, radius, s)
                       : tc_final<256, 0>(c, st, io, (int)m, (int)take, 0, kstride, 0.0, s);
    }
    if (e == cudaSuccess && !range) { /* everything in one copy */
        e = cudaMemcpyAsync(st->h_out, st->d_out, io->out_bytes, cudaMemcpyDeviceToHost, s);
        *maxn = take;
    } else if (e == cudaSuccess) { /* counts and flags, then as many columns as the longest answer */
        const uint32_t *n = (const uint32_t *)st->h_out;
        const uint8_t *fl = st->h_out + io->o_flag;
        e = cudaMemcpyAsync(st->h_out, st->d_out, io->o_outd, cudaMemcpyDeviceToHost, s);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s);
        *maxn = 0;
        for (i = 0; e == cudaSuccess && i < m; i++)
            if (!fl[i] && n[i] > *maxn) *maxn = n[i];
        if (e == cudaSuccess && *maxn) {
            e = cudaMemcpy2DAsync(st->h_out + io->o_outd, *maxn * sizeof(double), st->d_out + io->o_outd,
                                  (size_t)kstride * sizeof(double), *maxn * sizeof(double), m,
                                  cudaMemcpyDeviceToHost, s);
            if (e == cudaSuccess)
                e = cudaMemcpy2DAsync(st->h_out + io->o_outid, *maxn * sizeof(uint64_t), st->d_out + io->o_outid,
                                      (size_t)kstride * sizeof(uint64_t), *maxn * sizeof(uint64_t), m,
                                      cudaMemcpyDeviceToHost, s);
        }
    }
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) return pgpu_fail((int)e, "gpu search: tensor-core engine", __FILE__, __LINE__);
    return PATINA_OK;
}

/* Result j of query i of the last tc_batch (rows of stride maxn). */
static patina_hit_t tc_result(const knn_state_t *st, const tc_io_t *io, size_t maxn, size_t i, size_t j)
{
    patina_hit_t h;
    h.distance = ((const double *)(st->h_out + io->o_outd))[i * maxn + j];
    h.id = ((const uint64_t *)(st->h_out + io->o_outid))[i * maxn + j];
    return h;
}

/* The definition path's buffers (grown, never shrunk). */
static patina_status def_buffers(patina_gpu_t *g, knn_state_t *st, const knn_copy_t *c, size_t qb, size_t S,
                                 size_t take, size_t dim)
{
    if (st->def_q >= qb && st->def_s >= S && st->def_take >= take && st->def_dim >= dim) return PATINA_OK;
    if (qb < st->def_q) qb = st->def_q;
    if (S < st->def_s) S = st->def_s;
    if (take < st->def_take) take = st->def_take;
    if (dim < st->def_dim) dim = st->def_dim;
    buffers_free(g, st);
#define DEV(p, n, tag) PATINA_TRY(sdev(g, st, c, (void **)&st->p, (n) * sizeof *st->p, tag))
#define PIN(p, n, tag) PATINA_TRY(pgpu_pin_alloc(g, (void **)&st->p, (n) * sizeof *st->p, PGPU_FAM_SEARCH, tag))
    DEV(d_qv, qb * dim, "queries");
    DEV(d_dense, qb * S, "pilot");
    DEV(d_thr, qb, "pilot");
    DEV(d_dcnt, qb, "candidates");
    DEV(d_dcand, qb * TC_CAND, "candidates");
    DEV(d_dist, qb * take, "results");
    DEV(d_id, qb * take, "results");
    DEV(d_dflag, qb, "results");
    DEV(d_fq, qb * dim, "queries");
    DEV(d_fqi, qb, "queries");
    DEV(d_dn, qb, "results");
    PIN(h_dn, qb, "results");
    DEV(d_iq, qb * 2 * IX_MAXDIM, "queries");
    DEV(d_iqi, qb, "queries");
    DEV(d_ithr, qb, "queries");
    PIN(h_dist, qb * take, "results");
    PIN(h_id, qb * take, "results");
    PIN(h_dflag, qb, "results");
#undef DEV
#undef PIN
    st->def_q = qb;
    st->def_s = S;
    st->def_take = take;
    st->def_dim = dim;
    return PATINA_OK;
}

/* The float filter over the first n rows for m queries (MODE as
 * k_fx_scan), with a query tile that fits the batch. */
template <int D, int MODE>
static void fx_launch(const knn_copy_t *c, const knn_state_t *st, uint32_t n, size_t m, cudaStream_t s)
{
    const unsigned bx = (n + FX_ROWS - 1) / FX_ROWS;
    float *dense = MODE == 0 ? (float *)st->d_dense : NULL;
    uint32_t *cnt = MODE == 1 ? st->d_dcnt : NULL, *cand = MODE == 1 ? st->d_dcand : NULL;
    if (m == 1)
        k_fx_scan<D, MODE, 1><<<dim3(bx, 1), FX_ROWS, 0, s>>>(c->fx, c->n, c->fxa, n, (int)c->dim, st->d_fq, st->d_fqi,
                                                             (int)m, dense, cnt, cand);
    else if (m <= 8)
        k_fx_scan<D, MODE, 8><<<dim3(bx, 1), FX_ROWS, 0, s>>>(c->fx, c->n, c->fxa, n, (int)c->dim, st->d_fq, st->d_fqi,
                                                             (int)m, dense, cnt, cand);
    else
        k_fx_scan<D, MODE, FX_QB><<<dim3(bx, (unsigned)((m + FX_QB - 1) / FX_QB)), FX_ROWS, 0, s>>>(
            c->fx, c->n, c->fxa, n, (int)c->dim, st->d_fq, st->d_fqi, (int)m, dense, cnt, cand);
}

/* The tensor-core filter over the first n rows for m queries (MODE as
 * k_ix_scan): 2 to 8 tiles of 16 queries per block. */
template <int D, int NK32, int MODE>
static cudaError_t ix_scan(const knn_copy_t *c, const knn_state_t *st, uint32_t n, size_t m, cudaStream_t s)
{
    const int qtiles = m > 64 ? 8 : m > 32 ? 4 : 2;
    const unsigned gy = (unsigned)((m + 16 * qtiles - 1) / (16 * qtiles));
    const uint32_t rpb = tc_rows_per_block(n, gy, st->sms);
    const size_t smem = (size_t)TC_STAGES * IX_R * (2 * (size_t)NK32 * 32 + 16 + sizeof(ix_info_t));
    cudaError_t e = cudaFuncSetAttribute(k_ix_scan<D, NK32, MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    k_ix_scan<D, NK32, MODE><<<dim3((n + rpb - 1) / rpb, gy), TC_WARPS * 32, smem, s>>>(
        c->ix, c->ixi, n, rpb, st->d_iq, st->d_iqi, st->d_ithr, (int)m, qtiles, (float *)st->d_dense, (size_t)n,
        st->d_dcnt, st->d_dcand);
    return cudaGetLastError();
}

template <int D, int MODE>
static cudaError_t ix_launch(const knn_copy_t *c, const knn_state_t *st, uint32_t n, size_t m, cudaStream_t s)
{
    if constexpr (D == PDIST_L2 || D == PDIST_STD_L2 || D == PDIST_COSINE || D == PDIST_HELLINGER) {
        switch (c->ixdp) {
        case 32: return ix_scan<D, 1, MODE>(c, st, n, m, s);
        case 64: return ix_scan<D, 2, MODE>(c, st, n, m, s);
        case 128: return ix_scan<D, 4, MODE>(c, st, n, m, s);
        default: return ix_scan<D, 8, MODE>(c, st, n, m, s);
        }
    }
    return cudaErrorInvalidValue;
}

/* hi32 of the key of d (k_def_*'s dkey, on the host) */
static uint32_t dkey_hi(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    u = (u >> 63) ? ~u : u | (1ull << 63);
    return (uint32_t)(u >> 32);
}

/* The queries of one launch group as a filter sees them: kind 0 the
 * definition kernels alone, 1 the float filter (qf, qi), 2 the tensor-core
 * filter (iq, iqi, ithr). Range thresholds: qi[].z / ithr, else thr (the
 * definition kernels' hi32 keys). */
typedef struct qfilt {
    int kind;
    float *qf;
    fx_qinfo_t *qi;
    int8_t *iq;
    ix_info_t *iqi;
    float *ithr;
    uint32_t *thr;
} qfilt_t;

static void qfilt_free(qfilt_t *f)
{
    free(f->qf);
    free(f->qi);
    free(f->iq);
    free(f->iqi);
    free(f->ithr);
    free(f->thr);
    memset(f, 0, sizeof *f);
}

/* Host buffers for qb queries of c's filter; 0 when out of memory. */
static int qfilt_alloc(qfilt_t *f, const knn_copy_t *c, size_t qb, size_t dim)
{
    memset(f, 0, sizeof *f);
    f->thr = (uint32_t *)malloc(qb * sizeof *f->thr + 1);
    if (c->fx) {
        f->qf = (float *)malloc(qb * dim * sizeof *f->qf + 1);
        f->qi = (fx_qinfo_t *)malloc(qb * sizeof *f->qi + 1);
    }
    if (c->ix) {
        f->iq = (int8_t *)malloc(qb * 2 * (size_t)c->ixdp + 1);
        f->iqi = (ix_info_t *)malloc(qb * sizeof *f->iqi + 1);
        f->ithr = (float *)malloc(qb * sizeof *f->ithr + 1);
    }
    if (!f->thr || (c->fx && (!f->qf || !f->qi)) || (c->ix && (!f->iq || !f->iqi || !f->ithr))) {
        qfilt_free(f);
        return 0;
    }
    return 1;
}

/* The filter's inputs for m queries (qv, doubles); f->kind says which
 * filter takes them (every query must be in its domain, else the
 * definition kernels do). Range: the thresholds from the radius. */
static void qfilt_prepare(qfilt_t *f, const knn_copy_t *c, const pgpu_knn_index_t *idx, const double *qv, size_t m,
                          int range, double radius)
{
    const size_t dim = idx->dim;
    const int sq = idx->dist == PDIST_L2 || idx->dist == PDIST_STD_L2 || idx->dist == PDIST_HELLINGER;
    const double key = sq ? radius * radius : radius;
    size_t j;
    f->kind = 0;
    for (j = 0; range && j < m; j++) f->thr[j] = dkey_hi(radius);
    if (c->ix) {
        for (j = 0; j < m; j++) {
            const double *v = qv + j * dim;
            if (!ix_vector(idx->dist, [v](size_t i) { return v[i]; }, dim, idx->sd, c->ixdp, f->iq + j * 2 * c->ixdp,
                           &f->iqi[j]))
                break;
            f->ithr[j] = range ? f_up(key) : 0.f;
        }
        if (j == m) {
            f->kind = 2;
            return;
        }
    }
    if (c->fx) {
        for (j = 0; j < m; j++) {
            const double *v = qv + j * dim;
            float mq, nq;
            if (!fx_vector(idx->dist, [v](size_t i) { return v[i]; }, dim, idx->sd, f->qf + j * dim, 1, &mq, &nq))
                break;
            f->qi[j] = make_float4(mq, nq, range ? f_up((double)f_up(key) + (double)mq) : 0.f, 0.f);
        }
        if (j == m) f->kind = 1;
    }
}

/* One launch group of m queries (qv, doubles; f their filter's inputs).
 * k-NN (range 0): a pilot of S rows, its kth, the scan, the final ranking;
 * answers in h_dist / h_id (m, take). Range: the thresholds from the
 * radius, the scan, the final filter; h_dn[q] hits at h_dist / h_id + q *
 * *ld (*ld = the most hits of a query). h_dflag set for the queries left
 * unanswered. */
template <int D>
static cudaError_t def_batch(knn_state_t *st, const knn_copy_t *c, const pgpu_knn_index_t *idx, const double *qv,
                             const qfilt_t *f, size_t m, size_t take, size_t S, int range, double radius, size_t *ld,
                             cudaStream_t s)
{
    const size_t smem = (size_t)TC_CAND * (sizeof(double) + sizeof(uint64_t)), es = c->bytes / c->dim;
    float *dense = (float *)st->d_dense;
    cudaError_t e = cudaMemcpyAsync(st->d_qv, qv, m * idx->dim * sizeof *qv, cudaMemcpyHostToDevice, s);
    if (e != cudaSuccess) return e;
    if (f->kind == 1 &&
        ((e = cudaMemcpyAsync(st->d_fq, f->qf, m * idx->dim * sizeof *f->qf, cudaMemcpyHostToDevice, s)) != cudaSuccess ||
         (e = cudaMemcpyAsync(st->d_fqi, f->qi, m * sizeof *f->qi, cudaMemcpyHostToDevice, s)) != cudaSuccess))
        return e;
    if (f->kind == 2 &&
        ((e = cudaMemcpyAsync(st->d_iq, f->iq, m * 2 * (size_t)c->ixdp, cudaMemcpyHostToDevice, s)) != cudaSuccess ||
         (e = cudaMemcpyAsync(st->d_iqi, f->iqi, m * sizeof *f->iqi, cudaMemcpyHostToDevice, s)) != cudaSuccess ||
         (range && (e = cudaMemcpyAsync(st->d_ithr, f->ithr, m * sizeof *f->ithr, cudaMemcpyHostToDevice, s)) !=
                       cudaSuccess)))
        return e;
    if (range) {
        if ((e = cudaMemsetAsync(st->d_dcnt, 0, m * sizeof *st->d_dcnt, s)) != cudaSuccess ||
            (e = cudaMemsetAsync(st->d_dflag, 0, m, s)) != cudaSuccess ||
            (f->kind == 0 &&
             (e = cudaMemcpyAsync(st->d_thr, f->thr, m * sizeof *f->thr, cudaMemcpyHostToDevice, s)) != cudaSuccess))
            return e;
    } else if (f->kind == 2) {
        if ((e = ix_launch<D, 0>(c, st, (uint32_t)S, m, s)) != cudaSuccess) return e;
        k_fl_select<<<(unsigned)m, TC_SEL_THREADS, 0, s>>>(dense, (uint32_t)S, (uint32_t)take, st->d_ithr, 1, NULL, 0,
                                                           st->d_dcnt, st->d_dflag);
    } else if (f->kind == 1) {
        fx_launch<D, 0>(c, st, (uint32_t)S, m, s);
        /* the threshold U + mq into qinfo.z */
        k_fl_select<<<(unsigned)m, TC_SEL_THREADS, 0, s>>>(dense, (uint32_t)S, (uint32_t)take, (float *)st->d_fqi + 2,
                                                           4, (const float *)st->d_fqi, 4, st->d_dcnt, st->d_dflag);
    } else {
        k_def_pilot<D><<<dim3((unsigned)((S + 255) / 256), (unsigned)m), 256, 0, s>>>(
            c->descs, c->n, S, c->dim, es, (int)idx->elem, c->sd, st->d_qv, st->d_dense);
        k_def_select<<<(unsigned)m, TC_SEL_THREADS, 0, s>>>(st->d_dense, S, (uint32_t)take, st->d_thr, st->d_dcnt,
                                                            st->d_dflag);
    }
    if (f->kind == 2) {
        if ((e = ix_launch<D, 1>(c, st, (uint32_t)c->n, m, s)) != cudaSuccess) return e;
    } else if (f->kind == 1) {
        fx_launch<D, 1>(c, st, (uint32_t)c->n, m, s);
    } else {
        k_def_scan<D><<<dim3((unsigned)((c->n + 255) / 256), (unsigned)m), 256, 0, s>>>(
            c->descs, c->n, c->dim, es, (int)idx->elem, c->sd, st->d_qv, st->d_thr, st->d_dcnt, st->d_dcand);
    }
    if (range) {
        if ((e = cudaFuncSetAttribute(k_def_final<D, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)) !=
            cudaSuccess)
            return e;
        k_def_final<D, 1><<<(unsigned)m, TC_FINAL_THREADS, smem, s>>>(
            c->descs, c->ids, c->n, c->dim, es, (int)idx->elem, c->sd, st->d_qv, st->d_dcnt, st->d_dcand, 0, radius,
            st->d_dist, st->d_id, st->d_dn, st->d_dflag);
    } else {
        if ((e = cudaFuncSetAttribute(k_def_final<D, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)) !=
            cudaSuccess)
            return e;
        k_def_final<D, 0><<<(unsigned)m, TC_FINAL_THREADS, smem, s>>>(
            c->descs, c->ids, c->n, c->dim, es, (int)idx->elem, c->sd, st->d_qv, st->d_dcnt, st->d_dcand, (int)take,
            0.0, st->d_dist, st->d_id, NULL, st->d_dflag);
    }
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    if ((e = cudaMemcpyAsync(st->h_dflag, st->d_dflag, m, cudaMemcpyDeviceToHost, s)) != cudaSuccess) return e;
    if (range) {
        size_t mx = 0;
        if ((e = cudaMemcpyAsync(st->h_dn, st->d_dn, m * sizeof *st->h_dn, cudaMemcpyDeviceToHost, s)) != cudaSuccess ||
            (e = cudaStreamSynchronize(s)) != cudaSuccess)
            return e;
        for (size_t j = 0; j < m; j++)
            if (!st->h_dflag[j] && st->h_dn[j] > mx) mx = st->h_dn[j];
        *ld = mx;
        if (mx == 0) return cudaSuccess;
        if ((e = cudaMemcpy2DAsync(st->h_dist, mx * sizeof(double), st->d_dist, TC_CAND * sizeof(double),
                                   mx * sizeof(double), m, cudaMemcpyDeviceToHost, s)) != cudaSuccess ||
            (e = cudaMemcpy2DAsync(st->h_id, mx * sizeof(uint64_t), st->d_id, TC_CAND * sizeof(uint64_t),
                                   mx * sizeof(uint64_t), m, cudaMemcpyDeviceToHost, s)) != cudaSuccess)
            return e;
    } else {
        *ld = take;
        if ((e = cudaMemcpyAsync(st->h_dist, st->d_dist, m * take * sizeof(double), cudaMemcpyDeviceToHost, s)) !=
                cudaSuccess ||
            (e = cudaMemcpyAsync(st->h_id, st->d_id, m * take * sizeof(uint64_t), cudaMemcpyDeviceToHost, s)) !=
                cudaSuccess)
            return e;
    }
    return cudaStreamSynchronize(s);
}

static cudaError_t def_dispatch(knn_state_t *st, const knn_copy_t *c, const pgpu_knn_index_t *idx, const double *qv,
                                const qfilt_t *f, size_t m, size_t take, size_t S, int range, double radius, size_t *ld,
                                cudaStream_t s)
{
#define DB(D) def_batch<D>(st, c, idx, qv, f, m, take, S, range, radius, ld, s)
    switch (idx->dist) {
    case PDIST_TANIMOTO: return DB(PDIST_TANIMOTO);
    case PDIST_L1: return DB(PDIST_L1);
    case PDIST_L2: return DB(PDIST_L2);
    case PDIST_STD_L2: return DB(PDIST_STD_L2);
    case PDIST_CHI2: return DB(PDIST_CHI2);
    case PDIST_INTERSECTION: return DB(PDIST_INTERSECTION);
    case PDIST_HELLINGER: return DB(PDIST_HELLINGER);
    case PDIST_COSINE: return DB(PDIST_COSINE);
    default: return cudaErrorInvalidValue;
    }
#undef DB
}

/* The definition path: every other distance (and Tanimoto queries with an
 * element above 7), exact by the definition's doubles (k_def_final): the
 * float filter (knn_fx.cuh) finds the candidates when the copy and the
 * queries are in its domain, else the definition kernels do. Queries
 * whose candidates overflow are retried by the definition kernels with the
 * whole table as pilot, then left to the CPU (cpu[q] = 1). k <=
 * PGPU_KNN_KMAX. */
static patina_status def_knn(patina_gpu_t *g, knn_state_t *st, knn_copy_t *c, const pgpu_knn_index_t *idx,
                             const double *qv, size_t nq, size_t k, patina_hit_t *hits, size_t *counts, uint8_t *cpu,
                             size_t *paths)
{
    cudaStream_t s = (cudaStream_t)pgpu_stream(g, 0);
    const size_t take = k < c->n ? k : c->n, dim = idx->dim;
    for (int pass = 0; pass < 2; pass++) {
        const size_t S = pass ? c->n : tc_pilot_rows(c->n, take);
        size_t qb = TC_PILOT_BYTES / (S * sizeof(double)), q0, j, nr = 0, ld;
        uint32_t *which = NULL;
        double *gq = NULL;
        qfilt_t f;
        if (pass) { /* the overflowing queries again */
            for (j = 0; j < nq; j++) nr += cpu[j];
            if (nr == 0 || (S == tc_pilot_rows(c->n, take) && !c->fx && !c->ix)) return PATINA_OK;
            which = (uint32_t *)malloc(nr * sizeof *which);
            if (!which) return PATINA_OK; /* the CPU answers them */
            for (j = 0, nr = 0; j < nq; j++)
                if (cpu[j]) which[nr++] = (uint32_t)j;
        } else {
            nr = nq;
        }
        if (qb < 1) qb = 1;
        if (qb > TC_KNN_BATCH) qb = TC_KNN_BATCH;
        if (qb > 65535) qb = 65535;
        if (qb > nr) qb = nr;
        memset(&f, 0, sizeof f);
        if (def_buffers(g, st, c, qb, S, take, dim) != PATINA_OK || (which && !(gq = (double *)malloc(qb * dim * sizeof *gq))) ||
            !qfilt_alloc(&f, c, qb, dim)) {
            free(which);
            free(gq);
            qfilt_free(&f);
            if (pass) {
                patina_clear_error();
                return PATINA_OK; /* the CPU answers them */
            }
            return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory");
        }
        for (q0 = 0; q0 < nr; q0 += qb) {
            const size_t m = nr - q0 < qb ? nr - q0 : qb;
            const double *bq = qv + q0 * dim;
            cudaError_t e;
            if (which) {
                for (j = 0; j < m; j++) memcpy(gq + j * dim, qv + (size_t)which[q0 + j] * dim, dim * sizeof *gq);
                bq = gq;
            }
            if (pass) f.kind = 0; /* the retry: the definition kernels */
            else qfilt_prepare(&f, c, idx, bq, m, 0, 0.0);
            e = def_dispatch(st, c, idx, bq, &f, m, take, S, 0, 0.0, &ld, s);
            if (e != cudaSuccess) {
                free(which);
                free(gq);
                qfilt_free(&f);
                return pgpu_fail((int)e, "gpu search: definition kernels", __FILE__, __LINE__);
            }
            for (j = 0; j < m; j++) {
                const size_t row = which ? which[q0 + j] : q0 + j;
                cpu[row] = st->h_dflag[j];
                if (cpu[row]) continue;
                for (size_t i = 0; i < take; i++) {
                    hits[row * k + i].distance = st->h_dist[j * take + i];
                    hits[row * k + i].id = st->h_id[j * take + i];
                }
                counts[row] = take;
                if (paths) paths[f.kind == 2 ? 0 : f.kind == 1 ? 1 : 2]++;
            }
        }
        free(which);
        free(gq);
        qfilt_free(&f);
    }
    return PATINA_OK;
}


/* Range search on the definition path: every row within radius, by the
 * float filter or the definition kernels (as def_knn); a query with more
 * than TC_CAND candidates is left to the CPU. */
static patina_status def_range(patina_gpu_t *g, knn_state_t *st, knn_copy_t *c, const pgpu_knn_index_t *idx,
                               const double *qv, size_t nq, double radius, size_t max_hits, patina_hit_t **hits,
                               size_t *counts, uint8_t *cpu, size_t *paths)
{
    cudaStream_t s = (cudaStream_t)pgpu_stream(g, 0);
    const size_t dim = idx->dim, qb = nq < TC_RANGE_BATCH ? nq : TC_RANGE_BATCH;
    qfilt_t f;
    patina_status ret = PATINA_OK;
    PATINA_TRY(def_buffers(g, st, c, qb, 1, TC_CAND, dim));
    if (!qfilt_alloc(&f, c, qb, dim)) return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory");
    for (size_t q0 = 0; q0 < nq && ret == PATINA_OK; q0 += qb) {
        const size_t m = nq - q0 < qb ? nq - q0 : qb;
        const double *bq = qv + q0 * dim;
        size_t ld = 0;
        cudaError_t e;
        qfilt_prepare(&f, c, idx, bq, m, 1, radius);
        e = def_dispatch(st, c, idx, bq, &f, m, TC_CAND, 1, 1, radius, &ld, s);
        if (e != cudaSuccess) {
            ret = pgpu_fail((int)e, "gpu search: definition kernels", __FILE__, __LINE__);
            break;
        }
        for (size_t j = 0; j < m; j++) {
            size_t n = st->h_dn[j];
            if (st->h_dflag[j]) {
                cpu[q0 + j] = 1;
                continue;
            }
            if (paths) paths[f.kind == 2 ? 0 : f.kind == 1 ? 1 : 2]++;
            if (max_hits && n > max_hits) n = max_hits;
            counts[q0 + j] = n;
            if (n == 0) continue;
            hits[q0 + j] = (patina_hit_t *)malloc(n * sizeof **hits);
            if (!hits[q0 + j]) {
                ret = patina__fail(PATINA_E_NOMEM, "gpu search: out of memory for %zu hits", n);
                break;
            }
            for (size_t i = 0; i < n; i++) {
                hits[q0 + j][i].distance = st->h_dist[j * ld + i];
                hits[q0 + j][i].id = st->h_id[j * ld + i];
            }
        }
    }
    qfilt_free(&f);
    return ret;
}

static patina_status search_begin(patina_gpu_t *g, const pgpu_knn_index_t *idx, knn_state_t **st,
                                  knn_copy_t **c)
{
    if (idx->dist < 0 || idx->dist >= PDIST_COUNT)
        return patina__fail(PATINA_E_INVALID, "gpu search: unknown distance %d", idx->dist);
    if (idx->t1 && idx->dim > PGPU_KNN_MAXDIM)
        return patina__fail(PATINA_E_INVALID, "gpu search: fast path over %d elements", PGPU_KNN_MAXDIM);
    PGPU_CU(cudaSetDevice(g->device));
    PATINA_TRY(knn_state(g, st));
    return copy_of(g, *st, idx, c);
}

/* k-NN of nq queries with a pilot of S rows: queries (all, rows of the
 * index's bytes) indexed through which[] when given (the i-th query is
 * queries[which[i]] and writes hits/counts row which[i]); cpu[i] = 1 for a
 * query left unanswered. */
static patina_status tc_knn_pass(patina_gpu_t *g, knn_state_t *st, const knn_copy_t *c,
                                 const pgpu_knn_index_t *idx, const uint8_t *queries, const uint32_t *which,
                                 size_t nq, size_t k, size_t S, patina_hit_t *hits, size_t *counts, uint8_t *cpu,
                                 size_t *paths)
{
    const size_t take = k < idx->live ? k : idx->live, bytes = idx->bytes;
    size_t qb, q0;
    uint8_t *gather = NULL;
    patina_status s = PATINA_OK;
    qb = TC_PILOT_BYTES / (S * sizeof(float));
    if (qb < 1) qb = 1;
    if (qb > TC_KNN_BATCH) qb = TC_KNN_BATCH;
    if (qb > nq) qb = nq;
    PATINA_TRY(tc_buffers(g, st, c, qb, qb * S, take));
    if (which && !(gather = (uint8_t *)malloc(qb * bytes)))
        return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory");
    for (q0 = 0; q0 < nq && s == PATINA_OK; q0 += qb) {
        const size_t m = nq - q0 < qb ? nq - q0 : qb;
        size_t maxn, i;
        tc_io_t io;
        const uint8_t *qs = queries + q0 * bytes;
        if (which) {
            for (i = 0; i < m; i++) memcpy(gather + i * bytes, queries + (size_t)which[q0 + i] * bytes, bytes);
            qs = gather;
        }
        s = tc_batch(g, st, c, qs, bytes, m, take, S, 0, 0.0, &io, &maxn);
        for (i = 0; s == PATINA_OK && i < m; i++) {
            const size_t row = which ? which[q0 + i] : q0 + i;
            cpu[q0 + i] = st->h_out[io.o_flag + i];
            if (cpu[q0 + i]) continue;
            for (size_t j = 0; j < take; j++) hits[row * k + j] = tc_result(st, &io, maxn, i, j);
            counts[row] = take;
            if (paths) paths[0]++;
        }
    }
    free(gather);
    return s;
}

static patina_status knn_resident(patina_gpu_t *g, const pgpu_knn_index_t *idx, const uint8_t *queries,
                                  const double *qv, size_t nq, size_t k, patina_hit_t *hits, size_t *counts,
                                  uint8_t *cpu, size_t *paths)
{
    knn_state_t *st;
    knn_copy_t *c;
    const size_t take = k < idx->live ? k : idx->live;
    size_t S;
    patina_status s = PATINA_OK;

    memset(cpu, 0, nq);
    if (idx->live == 0 || nq == 0) return PATINA_OK;
    PATINA_TRY(search_begin(g, idx, &st, &c));
    if (!c->tc) return def_knn(g, st, c, idx, qv, nq, k, hits, counts, cpu, paths);
    S = tc_pilot_rows(c->n, take);
    PATINA_TRY(tc_knn_pass(g, st, c, idx, queries, NULL, nq, k, S, hits, counts, cpu, paths));
    /* the overflowing queries again, the whole table as their pilot: the
     * candidates are then the k best and their exact ties */
    if (S < c->n) {
        size_t nr = 0, i, j = 0;
        uint32_t *which;
        uint8_t *again;
        for (i = 0; i < nq; i++) nr += cpu[i];
        if (nr == 0) return PATINA_OK;
        which = (uint32_t *)malloc(nr * sizeof *which);
        again = (uint8_t *)malloc(nr);
        if (!which || !again) {
            free(which);
            free(again);
            return PATINA_OK; /* the CPU answers them */
        }
        for (i = 0; i < nq; i++)
            if (cpu[i]) which[j++] = (uint32_t)i;
        s = tc_knn_pass(g, st, c, idx, queries, which, nr, k, c->n, hits, counts, again, paths);
        for (j = 0; s == PATINA_OK && j < nr; j++) cpu[which[j]] = again[j];
        free(which);
        free(again);
    }
    return s;
}

static patina_status range_resident(patina_gpu_t *g, const pgpu_knn_index_t *idx, const uint8_t *queries,
                                    const double *qv, size_t nq, double radius, size_t max_hits, patina_hit_t **hits,
                                    size_t *counts, uint8_t *cpu, size_t *paths)
{
    knn_state_t *st;
    knn_copy_t *c;
    size_t qb, q0;

    memset(cpu, 0, nq);
    if (idx->live == 0 || nq == 0) return PATINA_OK;
    PATINA_TRY(search_begin(g, idx, &st, &c));
    if (!c->tc) return def_range(g, st, c, idx, qv, nq, radius, max_hits, hits, counts, cpu, paths);
    qb = nq < TC_RANGE_BATCH ? nq : TC_RANGE_BATCH;
    PATINA_TRY(tc_buffers(g, st, c, qb, 0, TC_CAND));
    for (q0 = 0; q0 < nq; q0 += qb) {
        const size_t m = nq - q0 < qb ? nq - q0 : qb;
        size_t maxn;
        tc_io_t io;
        PATINA_TRY(tc_batch(g, st, c, queries + q0 * idx->bytes, idx->bytes, m, 0, 0, 1, radius, &io, &maxn));
        for (size_t i = 0; i < m; i++) {
            size_t n = ((const uint32_t *)st->h_out)[i];
            if (st->h_out[io.o_flag + i]) {
                cpu[q0 + i] = 1;
                continue;
            }
            if (paths) paths[0]++;
            if (max_hits && n > max_hits) n = max_hits;
            if (n == 0) continue;
            hits[q0 + i] = (patina_hit_t *)malloc(n * sizeof **hits);
            if (!hits[q0 + i]) return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory for %zu hits", n);
            for (size_t j = 0; j < n; j++) hits[q0 + i][j] = tc_result(st, &io, maxn, i, j);
            counts[q0 + i] = n;
        }
    }
    return PATINA_OK;
}

/* ---- indexes larger than the device: streamed in chunks of rows ----
 * When an index's device copy (or a call's buffers) does not fit the
 * context's device budget, the rows are searched a chunk at a time: each
 * chunk a sub-index of its own (its rows, ids, sums and removed flags at an
 * offset; a copy made, searched by the engines above and dropped), the
 * per-query answers merged by (distance, id) -- the k best of a union are
 * among the k best of its parts, and a range answer is the union. A chunk
 * that still does not fit halves the chunk size (down to CHUNK_MIN rows).
 * A query any chunk leaves to the CPU is the CPU's as a whole. */

#define CHUNK_MIN 4096

static uint64_t chunk_serial(void)
{
    static uint64_t next = 0;
    return (UINT64_C(3) << 62) | __atomic_add_fetch(&next, 1, __ATOMIC_RELAXED);
}

/* Drops g's copy of the index with this serial (a chunk's, after use). */
static void drop_copy(patina_gpu_t *g, uint64_t serial)
{
    knn_state_t *st = (knn_state_t *)pgpu_state(g, PGPU_FAM_SEARCH);
    for (int i = 0; st && i < KNN_CACHE; i++)
        if (st->copy[i].serial == serial) copy_free(g, &st->copy[i]);
}

/* The sub-index of rows [a, b): rm (b - a) its removal log (local rows). */
static void chunk_view(const pgpu_knn_index_t *idx, size_t a, size_t b, uint32_t *rm, pgpu_knn_index_t *v)
{
    *v = *idx;
    v->serial = chunk_serial();
    v->n = b - a;
    v->ids = idx->ids + a;
    v->descs = idx->descs + a * idx->bytes;
    if (idx->t1) {
        v->t1 = idx->t1 + a;
        v->c3 = idx->c3 + a;
    }
    v->dead = idx->dead ? idx->dead + a : NULL;
    v->live = 0;
    v->dead_gen = 0;
    v->rm_log = rm;
    for (size_t r = a; r < b; r++) {
        if (idx->dead && idx->dead[r]) rm[v->dead_gen++] = (uint32_t)(r - a);
        else v->live++;
    }
}

static int hit_before(const patina_hit_t *x, const patina_hit_t *y)
{
    return x->distance < y->distance || (x->distance == y->distance && x->id < y->id);
}

static int too_big(patina_status s) { return s == PATINA_E_LIMIT || s == PATINA_E_NOMEM; }

static int by_hit(const void *x, const void *y)
{
    const patina_hit_t *a = (const patina_hit_t *)x, *b = (const patina_hit_t *)y;
    return hit_before(a, b) ? -1 : hit_before(b, a);
}

static void free_lists(patina_hit_t **hits, size_t nq)
{
    for (size_t q = 0; q < nq; q++) {
        free(hits[q]);
        hits[q] = NULL;
    }
}

/* One chunked search: k-NN (lists NULL: hits (nq, k)) or range (lists:
 * hits[q] malloc'd, at most max_hits); a chunk's answers in ch / chl, cc,
 * ccpu (per-call scratch). */
typedef struct chunk_call {
    size_t k;
    double radius;
    size_t max_hits;
    patina_hit_t *hits, **lists;
    size_t *counts;
    patina_hit_t *ch, **chl, *mg;
    size_t *cc;
    uint8_t *ccpu;
} chunk_call_t;

/* The chunk's answer for query q merged into the call's. */
static patina_status chunk_merge(chunk_call_t *cl, size_t q)
{
    if (!cl->lists) { /* the k best of the two sorted lists */
        patina_hit_t *dst = cl->hits + q * cl->k, *src = cl->ch + q * cl->k;
        size_t i = 0, j = 0, m = 0;
        while (m < cl->k && (i < cl->counts[q] || j < cl->cc[q]))
            cl->mg[m++] = j >= cl->cc[q] || (i < cl->counts[q] && !hit_before(&src[j], &dst[i])) ? dst[i++] : src[j++];
        memcpy(dst, cl->mg, m * sizeof *cl->mg);
        cl->counts[q] = m;
        return PATINA_OK;
    }
    if (cl->cc[q]) { /* the union, sorted, cut at max_hits */
        patina_hit_t *u = (patina_hit_t *)realloc(cl->lists[q], (cl->counts[q] + cl->cc[q]) * sizeof *u);
        size_t m = cl->counts[q] + cl->cc[q];
        if (!u) return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory for hits");
        memcpy(u + cl->counts[q], cl->chl[q], cl->cc[q] * sizeof *u);
        qsort(u, m, sizeof *u, by_hit);
        if (cl->max_hits && m > cl->max_hits) m = cl->max_hits;
        cl->lists[q] = u;
        cl->counts[q] = m;
    }
    return PATINA_OK;
}

/* ---- indexes larger than the device: a pinned host tier, streamed ----
 * A tensor-core (CEDD) index whose device copy does not fit the budget
 * keeps its device layout -- the rows in the fixed random permutation,
 * padded to dp bytes, with their sums (dp + 16 bytes a row) -- in pinned
 * host memory, built once and then kept up to date like a device copy
 * (appended rows laid out, removed rows blanked). Only the values the
 * final pass reads per candidate stay on the device: T1, C3, the id and
 * the removed flag (21 bytes a row). A call streams the rows through two
 * device buffers of R rows: the copy stream uploads chunk j + 1 while the
 * compute stream scans chunk j, so for small batches the PCIe link never
 * waits for the scan and for large ones the scan never waits for the link.
 *
 * The pilot threshold comes from the first rows of chunk 0, a uniform
 * sample of the whole table (the permutation), so it is the whole table's
 * threshold and holds for every chunk: the candidates of all chunks
 * together include the k best. Each chunk's candidates are ranked by the
 * final pass on the chunk (its best min(k, live candidates) by (distance,
 * id), exact as in the resident engine), and the host merges the chunks'
 * lists by (distance, id) while the next chunk runs: the k best of a union
 * are among the k best of its parts. Range search: the radius' threshold,
 * the chunks' hits united. A query some chunk cannot settle (its
 * candidates overflow) is tried once more with all of chunk 0 as its
 * pilot, then left to the CPU. */

#define TIER_BUF_BYTES ((size_t)256 << 20) /* a chunk buffer's rows and sums at most */
#define TIER_RANGE_BATCH 1024               /* range queries a pass at most (each pass reads the table) */


/* Host rows [h0, h0 + m) into the tier's rows [d0, d0 + m) (map as for
 * tc_lay_rows): rows and sums into pinned memory, the final pass's values
 * uploaded, through pieces of at most 65536 rows. */
static patina_status tier_put_rows(knn_tier_t *t, const pgpu_knn_index_t *idx, const uint32_t *map, size_t h0,
                                   size_t m, size_t d0)
{
    const size_t piece = 65536, dp = (size_t)t->dp;
    const size_t pm = m < piece ? m : piece;
    uint32_t *t1 = (uint32_t *)malloc(pm * sizeof *t1 + 1);
    double *c3 = (double *)malloc(pm * sizeof *c3 + 1);
    uint64_t *ids = (uint64_t *)malloc(pm * sizeof *ids + 1);
    patina_status s = PATINA_OK;
    if (!t1 || !c3 || !ids) s = patina__fail(PATINA_E_NOMEM, "gpu search: out of memory laying out %zu rows", m);
    for (size_t i = 0; s == PATINA_OK && i < m; i += piece) {
        const size_t b = m - i < piece ? m - i : piece, d = d0 + i;
        tc_lay_rows(idx, map ? map + i : NULL, h0 + i, b, dp, t->rows + d * dp, t->aux + d, t1, c3, ids);
        if (cudaMemcpy(t->t1 + d, t1, b * sizeof *t1, cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemcpy(t->c3 + d, c3, b * sizeof *c3, cudaMemcpyHostToDevice) != cudaSuccess ||
            cudaMemcpy(t->ids + d, ids, b * sizeof *ids, cudaMemcpyHostToDevice) != cudaSuccess)
            s = pgpu_fail((int)cudaGetLastError(), "gpu search: uploading a tier's values", __FILE__, __LINE__);
    }
    free(t1);
    free(c3);
    free(ids);
    return s;
}

/* The rows removed since the tier last looked: blanked in pinned memory
 * (zero bytes, a zero row's sums), flagged on the device. */
static patina_status tier_sync_dead(patina_gpu_t *g, knn_tier_t *t, const pgpu_knn_index_t *idx)
{
    return sync_removed(g, idx, &t->dead_gen, t->inv, t->nperm, t->d_rm, t, NULL, NULL, t->dead, t->dp);
}

/* The tier of idx: made now (room for a quarter more rows), or brought up
 * to the index (rows appended, a tier without room for them remade;
 * removed rows blanked). */
static patina_status tier_of(patina_gpu_t *g, knn_state_t *st, const pgpu_knn_index_t *idx, knn_tier_t **out)
{
    knn_tier_t *t = &st->tier;
    patina_status s = PATINA_OK;
    *out = NULL;
    if (t->serial == idx->serial && idx->n > t->src_n && t->n + (idx->n - t->src_n) > t->cap) tier_free(g, t);
    if (t->serial != idx->serial) {
        const size_t n = idx->n, cap = n + n / 4 + 1024;
        tier_free(g, t);
        t->serial = idx->serial;
        t->dim = idx->dim;
        t->dp = idx->dim == 144 ? 144 : 256;
        t->cap = cap;
        t->perm = (uint32_t *)malloc(n * sizeof *t->perm + 1);
        t->inv = (uint32_t *)malloc(n * sizeof *t->inv + 1);
        if (!t->perm || !t->inv) s = patina__fail(PATINA_E_NOMEM, "gpu search: out of memory for a tier of %zu rows", n);
#define TDEV(p, m, tag) \
    if (s == PATINA_OK) s = sdev(g, st, NULL, (void **)&t->p, (m) * sizeof *t->p, tag)
#define TPIN(p, m, tag) \
    if (s == PATINA_OK) s = pgpu_pin_alloc(g, (void **)&t->p, (m) * sizeof *t->p, PGPU_FAM_SEARCH, tag)
        TDEV(t1, cap, "tier row sums");
        TDEV(c3, cap, "tier row squares");
        TDEV(ids, cap, "tier ids");
        TDEV(dead, cap, "tier removed rows");
        TDEV(d_rm, TC_RM_CHUNK, "tier removed rows");
        TDEV(ptab, idx->ptab_rows * 8, "value table");
        TPIN(rows, cap * (size_t)t->dp, "tier rows");
        TPIN(aux, cap, "tier row sums");
#undef TDEV
#undef TPIN
        for (int i = 0; s == PATINA_OK && i < 6; i++) {
            cudaEvent_t ev;
            if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess)
                s = pgpu_fail((int)cudaGetLastError(), "gpu search: events", __FILE__, __LINE__);
            else t->ev[i] = ev;
        }
        if (s == PATINA_OK && (cudaMemset(t->dead, 0, cap) != cudaSuccess ||
                               cudaMemcpy(t->ptab, idx->ptab, idx->ptab_rows * 8 * sizeof(double),
                                          cudaMemcpyHostToDevice) != cudaSuccess))
            s = pgpu_fail((int)cudaGetLastError(), "gpu search: a tier", __FILE__, __LINE__);
        if (s == PATINA_OK) {
            make_perm(t->perm, n);
            for (size_t i = 0; i < n; i++) t->inv[t->perm[i]] = (uint32_t)i;
            s = tier_put_rows(t, idx, t->perm, 0, n, 0);
        }
        t->n = t->nperm = t->src_n = n;
    } else if (idx->n > t->src_n) {
        const size_t m = idx->n - t->src_n;
        s = tier_put_rows(t, idx, NULL, t->src_n, m, t->n);
        if (s == PATINA_OK &&
            cudaMemset(t->dead + t->n, 0, m) != cudaSuccess)
            s = pgpu_fail((int)cudaGetLastError(), "gpu search: a tier", __FILE__, __LINE__);
        t->n += m;
        t->src_n = idx->n;
    }
    if (s == PATINA_OK) s = tier_sync_dead(g, t, idx);
    if (s != PATINA_OK) {
        tier_free(g, t);
        return s;
    }
    *out = t;
    return PATINA_OK;
}

/* The chunk buffers (rows for R rows; halved while they do not fit, down
 * to CHUNK_MIN) and the pinned result buffers for res bytes each. */
static patina_status tier_buffers(patina_gpu_t *g, knn_state_t *st, knn_tier_t *t, size_t res)
{
    const size_t row = (size_t)t->dp + sizeof(tc_aux_t);
    size_t want = TIER_BUF_BYTES / row;
    patina_status s;
    if (want > t->n) want = (t->n + TC_R - 1) / TC_R * TC_R;
    if (want < CHUNK_MIN) want = CHUNK_MIN;
    if (!t->R) { /* kept for the tier's life (an earlier call may have settled on less) */
        pgpu_free_n(g, 4, &t->b_rows[0], &t->b_rows[1], &t->b_aux[0], &t->b_aux[1]);
        t->R = 0;
        for (;;) {
            s = sdev(g, st, NULL, (void **)&t->b_rows[0], (want + TC_R) * (size_t)t->dp, "tier chunk");
            if (s == PATINA_OK) s = sdev(g, st, NULL, (void **)&t->b_rows[1], (want + TC_R) * (size_t)t->dp, "tier chunk");
            if (s == PATINA_OK) s = sdev(g, st, NULL, (void **)&t->b_aux[0], (want + TC_R) * sizeof(tc_aux_t), "tier chunk");
            if (s == PATINA_OK) s = sdev(g, st, NULL, (void **)&t->b_aux[1], (want + TC_R) * sizeof(tc_aux_t), "tier chunk");
            if (s == PATINA_OK) break;
            pgpu_free_n(g, 4, &t->b_rows[0], &t->b_rows[1], &t->b_aux[0], &t->b_aux[1]);
            if (!too_big(s) || want / 2 < CHUNK_MIN) return s;
            patina_clear_error();
            want /= 2;
        }
        t->R = want;
        /* the padding after a chunk's rows: read by whole stages, never used */
        for (int b = 0; b < 2; b++)
            if (cudaMemset(t->b_rows[b], 0, (want + TC_R) * (size_t)t->dp) != cudaSuccess ||
                cudaMemset(t->b_aux[b], 0, (want + TC_R) * sizeof(tc_aux_t)) != cudaSuccess)
                return pgpu_fail((int)cudaGetLastError(), "gpu search: tier chunks", __FILE__, __LINE__);
    }
    if (t->res_bytes < res) {
        pgpu_free_n(g, 2, &t->h_res[0], &t->h_res[1]);
        t->res_bytes = 0;
        PATINA_TRY(pgpu_pin_alloc(g, (void **)&t->h_res[0], res, PGPU_FAM_SEARCH, "tier results"));
        PATINA_TRY(pgpu_pin_alloc(g, (void **)&t->h_res[1], res, PGPU_FAM_SEARCH, "tier results"));
        t->res_bytes = res;
    }
    return PATINA_OK;
}

/* Chunk j of the tier as a copy the engine's kernels read: the rows and
 * sums in buffer b, the final pass's values at the chunk's offset. */
static void tier_view(const knn_tier_t *t, size_t j, int b, knn_copy_t *v)
{
    const size_t a = j * t->R;
    memset(v, 0, sizeof *v);
    v->tc = 1;
    v->dp = t->dp;
    v->dim = t->dim;
    v->n = t->n - a < t->R ? t->n - a : t->R;
    v->descs = t->b_rows[b];
    v->aux = t->b_aux[b];
    v->t1 = t->t1 + a;
    v->c3 = t->c3 + a;
    v->ids = t->ids + a;
    v->dead = t->dead + a;
    v->ptab = t->ptab;
}

/* A chunk's answers (the pinned copy res of the final pass's outputs) into
 * the call's: k-NN (lists NULL) the k best of the two sorted lists (tmp:
 * k entries), range the hits appended (sorted at the end). */
static patina_status tier_merge(const uint8_t *res, const tc_io_t *io, size_t m, size_t kstride, size_t k,
                                const uint32_t *which, size_t q0, patina_hit_t *hits, patina_hit_t **lists,
                                size_t *counts, uint8_t *fl, patina_hit_t *tmp)
{
    const uint32_t *cn = (const uint32_t *)res;
    const double *od = (const double *)(res + io->o_outd);
    const uint64_t *oi = (const uint64_t *)(res + io->o_outid);
    for (size_t i = 0; i < m; i++) {
        const size_t row = which ? which[q0 + i] : q0 + i, nc = cn[i];
        const double *sd = od + i * kstride;
        const uint64_t *si = oi + i * kstride;
        if (res[io->o_flag + i]) fl[q0 + i] = 1;
        if (fl[q0 + i] || nc == 0) continue;
        if (!lists) {
            patina_hit_t *dst = hits + row * k;
            size_t a = 0, b = 0, w = 0;
            while (w < k && (a < counts[row] || b < nc)) {
                const int take_b = a >= counts[row] ||
                                   (b < nc && (sd[b] < dst[a].distance || (sd[b] == dst[a].distance && si[b] < dst[a].id)));
                if (take_b) {
                    tmp[w].distance = sd[b];
                    tmp[w++].id = si[b++];
                } else tmp[w++] = dst[a++];
            }
            memcpy(dst, tmp, w * sizeof *tmp);
            counts[row] = w;
        } else {
            patina_hit_t *u = (patina_hit_t *)realloc(lists[row], (counts[row] + nc) * sizeof *u);
            if (!u) return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory for hits");
            for (size_t j = 0; j < nc; j++) {
                u[counts[row] + j].distance = sd[j];
                u[counts[row] + j].id = si[j];
            }
            lists[row] = u;
            counts[row] += nc;
        }
    }
    return PATINA_OK;
}

/* One pass of m queries (the rows of queries[which[q0 + i]] or queries[q0 +
 * i]) over the whole tier: k-NN (take results, a pilot of S rows of chunk
 * 0) or range. fl[q0 + i] = 1: a chunk could not settle query i. */
static patina_status tier_pass(patina_gpu_t *g, knn_state_t *st, knn_tier_t *t, const uint8_t *q, size_t qbytes,
                               size_t m, size_t take, size_t S, size_t qp, int range, double radius,
                               const uint32_t *which, size_t q0, size_t k, patina_hit_t *hits, patina_hit_t **lists,
                               size_t *counts, uint8_t *fl, patina_hit_t *tmp, size_t chunks[2])
{
    cudaStream_t cs = (cudaStream_t)pgpu_stream(g, 0), us = (cudaStream_t)pgpu_stream(g, 1);
    cudaEvent_t *up = (cudaEvent_t *)t->ev, *rel = up + 2, *res = up + 4;
    const int kstride = range ? TC_CAND : (int)take, dp = t->dp;
    const size_t nch = (t->n + t->R - 1) / t->R;
    patina_status s = PATINA_OK;
    cudaError_t e;
    tc_io_t io;
    e = tc_queries(st, t->dim, dp, q, qbytes, m, kstride, range, radius, &io, cs);
    if (e == cudaSuccess) e = cudaMemsetAsync(st->d_out + io.o_flag, 0, m, cs);
    for (size_t j = 0; j <= nch && e == cudaSuccess && s == PATINA_OK; j++) {
        if (j < nch) {
            const int b = (int)(j & 1);
            knn_copy_t v;
            tier_view(t, j, b, &v);
            /* upload chunk j into buffer b, once chunk j - 2 has left it */
            if (j >= 2) e = cudaStreamWaitEvent(us, rel[b], 0);
            if (e == cudaSuccess)
                e = cudaMemcpyAsync(v.descs, t->rows + j * t->R * (size_t)dp, v.n * (size_t)dp,
                                    cudaMemcpyHostToDevice, us);
            if (e == cudaSuccess)
                e = cudaMemcpyAsync(v.aux, t->aux + j * t->R, v.n * sizeof(tc_aux_t), cudaMemcpyHostToDevice, us);
            if (e == cudaSuccess) e = cudaEventRecord(up[b], us);
            if (e == cudaSuccess) e = cudaStreamWaitEvent(cs, up[b], 0);
            /* the pilot (chunk 0, k-NN): thresholds for every query, qp at a time */
            for (size_t p0 = 0; j == 0 && !range && p0 < m && e == cudaSuccess; p0 += qp) {
                const size_t pm = m - p0 < qp ? m - p0 : qp;
                const uint8_t *qb = st->d_in + p0 * (size_t)dp;
                tc_qinfo_t *qi = IN(st, &io, tc_qinfo_t, o_qinfo) + p0;
                e = dp == 144 ? tc_scan_of<4, 1, 0>(&v, qb, qi, st->d_pilot, NULL, NULL, (uint32_t)S, (int)pm,
                                                    g->sm_count, cs)
                              : tc_scan_of<8, 0, 0>(&v, qb, qi, st->d_pilot, NULL, NULL, (uint32_t)S, (int)pm,
                                                    g->sm_count, cs);
                if (e == cudaSuccess) {
                    k_tc_select<<<(unsigned)pm, TC_SEL_THREADS, 0, cs>>>(st->d_pilot, S, (uint32_t)S, (uint32_t)take,
                                                                        qi, st->d_cnt + p0,
                                                                        OUT(st, &io, uint8_t, o_flag) + p0);
                    e = cudaGetLastError();
                }
            }
            if (e == cudaSuccess) e = cudaMemsetAsync(st->d_cnt, 0, m * sizeof *st->d_cnt, cs);
            if (e == cudaSuccess)
                e = dp == 144 ? tc_scan<4, 1, 1>(&v, st, &io, (uint32_t)v.n, (int)m, g->sm_count, cs)
                              : tc_scan<8, 0, 1>(&v, st, &io, (uint32_t)v.n, (int)m, g->sm_count, cs);
            if (e == cudaSuccess) {
                if (dp == 144) e = range ? tc_final<144, 1>(&v, st, &io, (int)m, 0, 0, kstride, radius, cs)
                                         : tc_final<144, 0>(&v, st, &io, (int)m, (int)take, 1, kstride, 0.0, cs);
                else e = range ? tc_final<256, 1>(&v, st, &io, (int)m, 0, 0, kstride, radius, cs)
                               : tc_final<256, 0>(&v, st, &io, (int)m, (int)take, 1, kstride, 0.0, cs);
            }
            if (e == cudaSuccess) e = cudaEventRecord(rel[b], cs);
            if (e == cudaSuccess)
                e = cudaMemcpyAsync(t->h_res[b], st->d_out, io.out_bytes, cudaMemcpyDeviceToHost, cs);
            if (e == cudaSuccess) e = cudaEventRecord(res[b], cs);
            /* the flags stay set across chunks; the counts are each chunk's */
        }
        if (j >= 1 && e == cudaSuccess) { /* chunk j - 1's answers, while chunk j runs */
            const int b = (int)((j - 1) & 1);
            e = cudaEventSynchronize(res[b]);
            if (e == cudaSuccess)
                s = tier_merge(t->h_res[b], &io, m, (size_t)kstride, k, which, q0, hits, lists, counts, fl, tmp);
        }
    }
    if (e != cudaSuccess) {
        (void)cudaStreamSynchronize(us);
        (void)cudaStreamSynchronize(cs);
        return pgpu_fail((int)e, "gpu search: streaming a tier", __FILE__, __LINE__);
    }
    if (s != PATINA_OK) {
        (void)cudaStreamSynchronize(us);
        (void)cudaStreamSynchronize(cs);
    }
    chunks[0] += nch;
    chunks[1] += t->n * ((size_t)dp + sizeof(tc_aux_t));
    return s;
}

/* k-NN (lists NULL: hits (nq, k)) or range (lists: hits[q] malloc'd, at
 * most max_hits) of nq queries through the tier of idx. */
static patina_status search_tier(patina_gpu_t *g, const pgpu_knn_index_t *idx, const uint8_t *queries, size_t nq,
                                 size_t k, double radius, size_t max_hits, patina_hit_t *hits, patina_hit_t **lists,
                                 size_t *counts, uint8_t *cpu, size_t *paths)
{
    const int range = lists != NULL;
    const size_t take = range ? 0 : k < idx->live ? k : idx->live, bytes = idx->bytes;
    const size_t call_bytes = g->budget / 8, pilot_bytes = call_bytes < TC_PILOT_BYTES ? call_bytes : TC_PILOT_BYTES;
    knn_state_t *st;
    knn_tier_t *t;
    size_t qb, S = 0, qp = 1, chunks[2] = {0, 0}, nfl = 0;
    uint8_t *fl = NULL;
    uint32_t *which = NULL;
    patina_hit_t *tmp = NULL;
    patina_status s;
    tc_io_t io;

    memset(cpu, 0, nq);
    memset(counts, 0, nq * sizeof *counts);
    if (idx->live == 0 || nq == 0) return PATINA_OK;
    if (idx->dim > PGPU_KNN_MAXDIM)
        return patina__fail(PATINA_E_INVALID, "gpu search: fast path over %d elements", PGPU_KNN_MAXDIM);
    PGPU_CU(cudaSetDevice(g->device));
    PATINA_TRY(knn_state(g, &st));
    PATINA_TRY(tier_of(g, st, idx, &t));
    /* queries a pass: their outputs and candidate lists within an eighth
     * of the budget (each pass reads the whole table) */
    qb = call_bytes / ((range ? TC_CAND : take) * (sizeof(double) + sizeof(uint64_t)) + TC_CAND * sizeof(uint32_t) +
                       256 + sizeof(tc_qinfo_t));
    if (qb > (range ? TIER_RANGE_BATCH : TC_KNN_BATCH)) qb = range ? TIER_RANGE_BATCH : TC_KNN_BATCH;
    if (qb > nq) qb = nq;
    if (qb < 1) qb = 1;
    tc_layout(&io, qb, 256, range ? TC_CAND : take);
    /* the per-call buffers first (their pilot within an eighth of the
     * budget), then the chunk buffers from what is left */
    if (!range) {
        S = tc_pilot_rows(t->n, take);
        if (S > TIER_BUF_BYTES / ((size_t)t->dp + sizeof(tc_aux_t))) S = TIER_BUF_BYTES / ((size_t)t->dp + sizeof(tc_aux_t));
        qp = pilot_bytes / (S * sizeof(float));
        if (qp < 1) qp = 1;
        if (qp > qb) qp = qb;
    }
    s = tc_buffers(g, st, NULL, qb, qp * S, range ? TC_CAND : take);
    if (too_big(s) && t->R) { /* the chunk buffers give way (remade below, maybe smaller) */
        patina_clear_error();
        tier_buffers_free(g, t);
        s = tc_buffers(g, st, NULL, qb, qp * S, range ? TC_CAND : take);
    }
    PATINA_TRY(s);
    PATINA_TRY(tier_buffers(g, st, t, io.out_bytes));
    if (S > t->R) S = t->R;
    if (S > t->n) S = t->n;
    fl = (uint8_t *)calloc(nq + 1, 1);
    tmp = (patina_hit_t *)malloc((k ? k : 1) * sizeof *tmp);
    if (!fl || !tmp) {
        free(fl);
        free(tmp);
        return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory");
    }
    s = PATINA_OK;
    for (size_t q0 = 0; q0 < nq && s == PATINA_OK; q0 += qb) {
        const size_t m = nq - q0 < qb ? nq - q0 : qb;
        s = tier_pass(g, st, t, queries + q0 * bytes, bytes, m, take, S, qp, range, radius, NULL, q0, k, hits,
                      lists, counts, fl, tmp, chunks);
    }
    for (size_t q = 0; s == PATINA_OK && q < nq; q++) nfl += fl[q];
    /* k-NN: the unsettled queries once more, all of chunk 0 as their pilot */
    if (s == PATINA_OK && nfl && !range && S < (t->n < t->R ? t->n : t->R) &&
        (which = (uint32_t *)malloc(nfl * sizeof *which)) != NULL) {
        uint8_t *gather = (uint8_t *)malloc(qb * bytes + 1), *fl2 = (uint8_t *)calloc(nfl + 1, 1);
        const size_t S2 = t->n < t->R ? t->n : t->R;
        size_t j = 0, qp2 = pilot_bytes / (S2 * sizeof(float));
        if (qp2 < 1) qp2 = 1;
        for (size_t q = 0; q < nq; q++)
            if (fl[q]) {
                which[j++] = (uint32_t)q;
                counts[q] = 0;
            }
        s = gather && fl2 ? tc_buffers(g, st, NULL, qb, (qp2 < qb ? qp2 : qb) * S2, take) : PATINA_E_NOMEM;
        if (s == PATINA_OK)
            for (size_t q0 = 0; q0 < nfl && s == PATINA_OK; q0 += qb) {
                const size_t m = nfl - q0 < qb ? nfl - q0 : qb;
                for (size_t i = 0; i < m; i++) memcpy(gather + i * bytes, queries + (size_t)which[q0 + i] * bytes, bytes);
                s = tier_pass(g, st, t, gather, bytes, m, take, S2, qp2 < m ? qp2 : m, 0, 0.0, which, q0, k, hits,
                              NULL, counts, fl2, tmp, chunks);
            }
        if (s == PATINA_OK)
            for (j = 0; j < nfl; j++) fl[which[j]] = fl2[j];
        if (too_big(s)) { /* no room for the retry: they stay the CPU's */
            patina_clear_error();
            s = PATINA_OK;
        }
        free(gather);
        free(fl2);
        free(which);
    }
    for (size_t q = 0; s == PATINA_OK && q < nq; q++) {
        if (fl[q] || counts[q] < take) { /* the CPU's */
            cpu[q] = 1;
            counts[q] = 0;
            if (range) {
                free(lists[q]);
                lists[q] = NULL;
            }
            continue;
        }
        if (paths) paths[0]++;
        if (range && counts[q]) {
            qsort(lists[q], counts[q], sizeof **lists, by_hit);
            if (max_hits && counts[q] > max_hits) counts[q] = max_hits;
        }
    }
    if (s == PATINA_OK && paths) {
        paths[3] += chunks[0];
        paths[4] += chunks[1];
    }
    if (s != PATINA_OK && range) free_lists(lists, nq);
    free(fl);
    free(tmp);
    return s;
}

/* Whether g streams idx through a tier (it did last time). */
static int tiered(patina_gpu_t *g, const pgpu_knn_index_t *idx)
{
    const knn_state_t *st = (const knn_state_t *)pgpu_state(g, PGPU_FAM_SEARCH);
    return idx->t1 && st && st->tier.serial == idx->serial;
}

static void tier_drop(patina_gpu_t *g)
{
    knn_state_t *st = (knn_state_t *)pgpu_state(g, PGPU_FAM_SEARCH);
    if (st) tier_free(g, &st->tier);
}

/* The chunks of rows, each a sub-index searched by the resident engines
 * and dropped, the answers merged; the chunk size halves while a chunk
 * does not fit (down to CHUNK_MIN rows). */
static patina_status search_chunked(patina_gpu_t *g, const pgpu_knn_index_t *idx, const uint8_t *queries,
                                    const double *qv, size_t nq, chunk_call_t *cl, uint8_t *cpu, size_t *paths)
{
    const size_t n = idx->n;
    size_t rows = n / 2 + 1;
    uint32_t *rm = NULL;
    knn_state_t *st = (knn_state_t *)pgpu_state(g, PGPU_FAM_SEARCH);
    chunk_images_t *ci;
    patina_status s = PATINA_OK;
    if (st && st->ci.serial == idx->serial && st->ci.rows && st->ci.rows < rows)
        rows = st->ci.rows; /* where the last call of this index settled */
    for (;;) {
        size_t a, chunks = 0, p[3] = {0, 0, 0};
        free(rm);
        if (!(rm = (uint32_t *)malloc(rows * sizeof *rm + 1))) {
            s = patina__fail(PATINA_E_NOMEM, "gpu search: out of memory");
            break;
        }
        memset(cpu, 0, nq);
        memset(cl->counts, 0, nq * sizeof *cl->counts);
        if (cl->lists) free_lists(cl->lists, nq);
        if ((s = knn_state(g, &st)) != PATINA_OK) break;
        st->replayed = 0;
        ci = &st->ci;
        if (!idx->t1 && (ci->serial != idx->serial || ci->n != n || ci->dead_gen != idx->dead_gen || ci->rows != rows)) {
            /* the chunks' images (made by the first call, replayed by the next) */
            images_free(g, ci);
            ci->img = (copy_image_t *)calloc((n + rows - 1) / rows, sizeof *ci->img);
            if (ci->img) {
                ci->serial = idx->serial;
                ci->n = n;
                ci->dead_gen = idx->dead_gen;
                ci->rows = rows;
                ci->count = (n + rows - 1) / rows;
            }
        }
        for (a = 0; a < n && s == PATINA_OK; a += rows) {
            const size_t b = n - a < rows ? n : a + rows, ic = a / rows;
            copy_image_t *im = !idx->t1 && ci->count > ic ? &ci->img[ic] : NULL;
            pgpu_knn_index_t v;
            chunk_view(idx, a, b, rm, &v);
            chunks++;
            if (v.live == 0) continue;
            memset(cl->cc, 0, nq * sizeof *cl->cc);
            if (im && im->valid) st->replay = im;
            else if (im) {
                image_free(g, im);
                st->rec = im;
            }
            s = cl->lists ? range_resident(g, &v, queries, qv, nq, cl->radius, cl->max_hits, cl->chl, cl->cc, cl->ccpu,
                                           a == 0 ? p : NULL)
                          : knn_resident(g, &v, queries, qv, nq, cl->k, cl->ch, cl->cc, cl->ccpu, a == 0 ? p : NULL);
            st->rec = NULL;
            st->replay = NULL;
            if (im && !im->valid) image_free(g, im); /* a failed or partial recording */
            drop_copy(g, v.serial);
            for (size_t q = 0; s == PATINA_OK && q < nq; q++) {
                if (cl->ccpu[q]) cpu[q] = 1;
                if (!cpu[q]) s = chunk_merge(cl, q);
            }
            if (cl->lists) free_lists(cl->chl, nq);
        }
        if (s == PATINA_OK) {
            for (size_t q = 0; cl->lists && q < nq; q++)
                if (cpu[q]) { /* the CPU's as a whole */
                    free(cl->lists[q]);
                    cl->lists[q] = NULL;
                    cl->counts[q] = 0;
                }
            if (paths) {
                paths[0] += p[0];
                paths[1] += p[1];
                paths[2] += p[2];
                paths[3] += chunks;
                paths[4] += st->replayed;
            }
            break;
        }
        if (!too_big(s) || rows / 2 < CHUNK_MIN) break;
        patina_clear_error();
        s = PATINA_OK;
        rows /= 2;
    }
    if (s != PATINA_OK && cl->lists) free_lists(cl->lists, nq);
    free(rm);
    return s;
}

patina_status patina_gpu_knn(patina_gpu_t *g, const pgpu_knn_index_t *idx, const uint8_t *queries,
                             const double *qv, size_t nq, size_t k, patina_hit_t *hits, size_t *counts,
                             uint8_t *cpu, size_t *paths)
{
    patina_status s;
    if (!g || !idx || !hits || !counts || !cpu || k == 0 || (idx->t1 ? !queries : !qv))
        return patina__fail(PATINA_E_INVALID, "gpu search: bad argument");
    if (k > TC_KMAX)
        return patina__fail(PATINA_E_UNAVAILABLE, "gpu search: k = %zu is over the GPU's %d", k, TC_KMAX);
    if (tiered(g, idx)) { /* streamed before: streamed again */
        s = search_tier(g, idx, queries, nq, k, 0.0, 0, hits, NULL, counts, cpu, paths);
        if (!too_big(s)) return s;
        patina_clear_error();
        tier_drop(g);
    }
    s = knn_resident(g, idx, queries, qv, nq, k, hits, counts, cpu, paths);
    if (!too_big(s) || idx->n < 2 * CHUNK_MIN) return s;
    patina_clear_error();
    drop_copy(g, idx->serial);
    if (idx->t1) {
        s = search_tier(g, idx, queries, nq, k, 0.0, 0, hits, NULL, counts, cpu, paths);
        if (!too_big(s)) return s;
        patina_clear_error();
        tier_drop(g);
    }
    {
        chunk_call_t cl;
        memset(&cl, 0, sizeof cl);
        cl.k = k;
        cl.hits = hits;
        cl.counts = counts;
        cl.ch = (patina_hit_t *)malloc(nq * k * sizeof *cl.ch + 1);
        cl.mg = (patina_hit_t *)malloc(k * sizeof *cl.mg);
        cl.cc = (size_t *)malloc(nq * sizeof *cl.cc + 1);
        cl.ccpu = (uint8_t *)malloc(nq + 1);
        s = cl.ch && cl.mg && cl.cc && cl.ccpu ? search_chunked(g, idx, queries, qv, nq, &cl, cpu, paths)
                                               : patina__fail(PATINA_E_NOMEM, "gpu search: out of memory");
        free(cl.ch);
        free(cl.mg);
        free(cl.cc);
        free(cl.ccpu);
    }
    return s;
}

patina_status patina_gpu_range(patina_gpu_t *g, const pgpu_knn_index_t *idx, const uint8_t *queries,
                               const double *qv, size_t nq, double radius, size_t max_hits, patina_hit_t **hits,
                               size_t *counts, uint8_t *cpu, size_t *paths)
{
    patina_status s;
    if (!g || !idx || !hits || !counts || !cpu || (idx->t1 ? !queries : !qv) || isnan(radius))
        return patina__fail(PATINA_E_INVALID, "gpu search: bad argument");
    if (tiered(g, idx)) {
        s = search_tier(g, idx, queries, nq, 0, radius, max_hits, NULL, hits, counts, cpu, paths);
        if (!too_big(s)) return s;
        patina_clear_error();
        tier_drop(g);
    }
    s = range_resident(g, idx, queries, qv, nq, radius, max_hits, hits, counts, cpu, paths);
    if (!too_big(s) || idx->n < 2 * CHUNK_MIN) return s;
    patina_clear_error();
    free_lists(hits, nq);
    drop_copy(g, idx->serial);
    if (idx->t1) {
        s = search_tier(g, idx, queries, nq, 0, radius, max_hits, NULL, hits, counts, cpu, paths);
        if (!too_big(s)) return s;
        patina_clear_error();
        tier_drop(g);
    }
    {
        chunk_call_t cl;
        memset(&cl, 0, sizeof cl);
        cl.radius = radius;
        cl.max_hits = max_hits;
        cl.lists = hits;
        cl.counts = counts;
        cl.chl = (patina_hit_t **)calloc(nq + 1, sizeof *cl.chl);
        cl.cc = (size_t *)malloc(nq * sizeof *cl.cc + 1);
        cl.ccpu = (uint8_t *)malloc(nq + 1);
        s = cl.chl && cl.cc && cl.ccpu ? search_chunked(g, idx, queries, qv, nq, &cl, cpu, paths)
                                       : patina__fail(PATINA_E_NOMEM, "gpu search: out of memory");
        free(cl.chl);
        free(cl.cc);
        free(cl.ccpu);
    }
    return s;
}
