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
 * T1, T1^2, S1 (floats), T1 (u32), C3 (double) and ids. A call of one
 * query with k <= TC_ONE_KMAX runs the three passes in one cooperative
 * launch (k_tc_one, tc_one below) with one download of its answer.
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
 * it.
 *
 * This file: the kernels and the engines on a resident copy; the copies
 * themselves are knn_copy.cu's, the streamed paths and the entry points
 * knn_stream.cu's (what crosses them: knn_internal.cuh). */
#include "gpu/knn_internal.cuh" /* first: gpu.h, then the kernels */
#include "gpu/knn_fx.cuh"
#include "gpu/knn_ix.cuh"
#include "gpu/knn_tc.cuh"
#if PATINA_HAVE_WGMMA
#include "gpu/knn_wg.h"
#endif

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

/* The dot-product distances' definitions in two parts: the terms of
 * element i (query x, row y, sigma sdi), summed in order into d, sa, sb
 * (t1, t2 are 0 where a distance has no second and third sum), and the
 * distance from the sums: src/search/distance.c's operations. */
template <int D>
__device__ __forceinline__ void def_terms(double x, double y, double sdi, double &t0, double &t1, double &t2)
{
    t1 = t2 = 0.0;
    if constexpr (D == PDIST_L2 || D == PDIST_STD_L2) {
        double v = __dsub_rn(x, y);
        if constexpr (D == PDIST_STD_L2) v = __ddiv_rn(v, sdi);
        t0 = __dmul_rn(v, v);
    } else if constexpr (D == PDIST_HELLINGER) {
        t0 = __dsqrt_rn(__dmul_rn(x, y));
        t1 = x;
        t2 = y;
    } else { /* cosine */
        t0 = __dmul_rn(x, y);
        t1 = __dmul_rn(x, x);
        t2 = __dmul_rn(y, y);
    }
}

template <int D>
__device__ __forceinline__ double def_finish(double d, double sa, double sb)
{
    if constexpr (D == PDIST_L2 || D == PDIST_STD_L2) {
        return __dsqrt_rn(d);
    } else if constexpr (D == PDIST_HELLINGER) {
        if (sa == 0.0 && sb == 0.0) return 0.0;
        if (sa == 0.0 || sb == 0.0) return 1.0;
        d = __dsub_rn(1.0, __ddiv_rn(d, __dsqrt_rn(__dmul_rn(sa, sb))));
        return d > 0.0 ? __dsqrt_rn(d) : 0.0;
    } else {
        if (sa == 0.0 && sb == 0.0) return 0.0;
        if (sa == 0.0 || sb == 0.0) return 1.0;
        return __dsub_rn(1.0, __ddiv_rn(d, __dsqrt_rn(__dmul_rn(sa, sb))));
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
    } else { /* l2, std_l2, hellinger, cosine: def_terms / def_finish */
        for (i = 0; i < dim; i++) {
            double t0, t1, t2;
            def_terms<D>(a[i], elem_at(elem, b, i * st), sd ? sd[i] : 1.0, t0, t1, t2);
            d = __dadd_rn(d, t0);
            if constexpr (D == PDIST_HELLINGER || D == PDIST_COSINE) {
                sa = __dadd_rn(sa, t1);
                sb = __dadd_rn(sb, t2);
            }
        }
        return def_finish<D>(d, sa, sb);
    }
}

/* The same distance for the dot-product distances with a warp a row (every
 * lane returns it): the lanes form 32 elements' terms at once (their loads
 * in one round trip), and every lane sums them in order, so the sums are
 * distance_of's. */
template <int D>
__device__ double distance_of_warp(const double *__restrict__ a, const uint8_t *__restrict__ b, int elem, size_t dim,
                                   const double *__restrict__ sd, size_t st)
{
    const int lane = threadIdx.x & 31;
    double d = 0.0, sa = 0.0, sb = 0.0;
    for (size_t i0 = 0; i0 < dim; i0 += 32) {
        const size_t i = i0 + lane;
        double t0 = 0.0, t1 = 0.0, t2 = 0.0;
        if (i < dim) def_terms<D>(a[i], elem_at(elem, b, i * st), sd ? sd[i] : 1.0, t0, t1, t2);
        const int nj = dim - i0 < 32 ? (int)(dim - i0) : 32;
        for (int j = 0; j < nj; j++) {
            d = __dadd_rn(d, __shfl_sync(0xffffffffu, t0, j));
            if constexpr (D == PDIST_HELLINGER || D == PDIST_COSINE) {
                sa = __dadd_rn(sa, __shfl_sync(0xffffffffu, t1, j));
                sb = __dadd_rn(sb, __shfl_sync(0xffffffffu, t2, j));
            }
        }
    }
    return def_finish<D>(d, sa, sb);
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
    __shared__ uint32_t sh[TC_RADIX_WORDS];
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

/* The final pass of the tensor-core filter (knn_ix.cuh), k-NN: per query
 * (a block), the candidates' keys and bounds again from their limbs, the
 * kth smallest upper key among them, and the definition's doubles for the
 * candidates within it (a warp a row), sorted by (distance, id). rows /
 * info: the copy's limbs; qbytes / qinfo the queries'. Flags as
 * k_def_final. Shared memory: TC_CAND floats twice (the keys and bounds,
 * then the doubles over them), TC_CAND ids and TC_CAND row numbers. */
template <int D, int NK32>
__global__ void __launch_bounds__(TC_FINAL_THREADS)
k_ix_final(const int8_t *__restrict__ rows, const ix_info_t *__restrict__ info, const uint8_t *__restrict__ descs,
           const uint64_t *__restrict__ ids, size_t n, size_t dim, size_t esize, int elem,
           const double *__restrict__ sdv, const double *__restrict__ qv, const int8_t *__restrict__ qbytes,
           const ix_info_t *__restrict__ qinfo, const uint32_t *__restrict__ cnt, const uint32_t *__restrict__ cand,
           int take, double *__restrict__ out_d, uint64_t *__restrict__ out_id, uint8_t *__restrict__ flag)
{
    constexpr int RB = 2 * NK32 * 32;
    extern __shared__ __align__(16) uint8_t smem[];
    float *fkey = (float *)smem, *fm = fkey + TC_CAND;         /* (TC_CAND) each */
    double *dkey = (double *)smem;                              /* over them, after the survivors are known */
    uint64_t *sid = (uint64_t *)(smem + TC_CAND * sizeof(double)); /* (TC_CAND) */
    uint32_t *surv = (uint32_t *)(sid + TC_CAND);                /* (TC_CAND) */
    __shared__ __align__(16) int8_t sq[RB];
    __shared__ uint32_t sh[TC_RADIX_WORDS];
    __shared__ int s_n;
    const int q = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t c = cnt[q];
    const uint32_t *cq = cand + (size_t)q * TC_CAND;
    if (c > TC_CAND || c < (uint32_t)take) {
        if (threadIdx.x == 0) flag[q] = 1;
        return;
    }
    for (int i = threadIdx.x; i < RB / 16; i += blockDim.x)
        ((int4 *)sq)[i] = ((const int4 *)(qbytes + (size_t)q * RB))[i];
    if (threadIdx.x == 0) s_n = 0;
    const ix_info_t qi = qinfo[q];
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < c; i += blockDim.x) {
        const uint32_t r = cq[i];
        const ix_info_t ri = info[r];
        int32_t hi, mid, lo;
        ix_sums<NK32 * 32>(sq, rows + (size_t)r * RB, hi, mid, lo);
        fkey[i] = ix_key<D>(ix_comb(hi, mid, lo), qi, ri);
        fm[i] = ix_bound<D>(qi, ri);
    }
    __syncthreads();
    /* the kth smallest upper key (the kth largest of ~ord) */
    const float th =
        fx_unord(~tc_radix_kth<true>([&](uint32_t i) { return ~fx_ord(__fadd_ru(fkey[i], fm[i])); }, c, (uint32_t)take, sh));
    for (uint32_t i = threadIdx.x; i < c; i += blockDim.x)
        if (fkey[i] <= __fadd_ru(th, fm[i])) surv[atomicAdd(&s_n, 1)] = cq[i];
    __syncthreads();
    const int ns = s_n;
    for (int j = warp; j < ns; j += (int)(blockDim.x >> 5)) {
        const uint32_t r = surv[j];
        const double d = distance_of_warp<D>(qv + (size_t)q * dim, descs + (size_t)r * esize, elem, dim, sdv, n);
        if (lane == 0) {
            dkey[j] = d;
            sid[j] = ids[r];
        }
    }
    __syncthreads();
    tc_sort_hits(dkey, sid, ns, take, out_d + (size_t)q * take, out_id + (size_t)q * take);
}

/* ------------------------------------------------------------- search */

/* ---- the tensor-core engine (gpu/knn_tc.cuh) ---- */


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

#define IN(st, io, T, o) ((T *)((st)->d_in + (io)->o))
#define OUT(st, io, T, o) ((T *)((st)->d_out + (io)->o))

/* The batch's scan takes two query tiles a warp (k_tc_scan's TPW, half the
 * shared-memory loads of a pair) from this many queries on: 16 tiles a
 * block, 256 queries. */
#define TC_TPW2_MIN 129

/* The scan of rows [0, n) of c for nq queries (their rows and infos on the
 * device): MODE 0 the pilot into dense (nq rows of ld floats, the first n
 * of each), MODE 1 the filter into cnt / cand. */
template <int NK32, int T16, int MODE>
static cudaError_t tc_scan_of(const knn_copy_t *c, const uint8_t *qbytes, const tc_qinfo_t *qinfo, float *dense,
                              size_t ld, uint32_t *cnt, uint32_t *cand, uint32_t n, int nq, int sms, cudaStream_t s)
{
    /* the pilot (MODE 0) is a few thousand rows: short blocks, whose setup
     * (the query tiles' fragments) weighs most with many tiles a block */
    const int two = MODE == 1 && nq >= TC_TPW2_MIN;
    const int qtiles = MODE == 0 ? (nq > 16 ? 2 : 1) : two ? 16 : nq > 64 ? 8 : nq > 32 ? 4 : nq > 16 ? 2 : 1;
    const unsigned gy = (unsigned)((nq + 16 * qtiles - 1) / (16 * qtiles));
    const uint32_t rpb = tc_rows_per_block(n, gy, sms);
    const dim3 grid((n + rpb - 1) / rpb, gy);
    const size_t smem = tc_scan_smem(NK32 * 32 + T16 * 16);
    const void *fn = two ? (const void *)k_tc_scan<NK32, T16, MODE, 2> : (const void *)k_tc_scan<NK32, T16, MODE, 1>;
    cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    if (two)
        k_tc_scan<NK32, T16, MODE, 2><<<grid, TC_WARPS * 32, smem, s>>>(c->descs, c->aux, n, rpb, qbytes, qinfo, nq,
                                                                        qtiles, dense, ld, cnt, cand);
    else
        k_tc_scan<NK32, T16, MODE, 1><<<grid, TC_WARPS * 32, smem, s>>>(c->descs, c->aux, n, rpb, qbytes, qinfo, nq,
                                                                        qtiles, dense, ld, cnt, cand);
    return cudaGetLastError();
}

template <int NK32, int T16, int MODE>
static cudaError_t tc_scan(const knn_copy_t *c, const knn_state_t *st, const tc_io_t *io, uint32_t n, int nq,
                           int sms, cudaStream_t s)
{
    return tc_scan_of<NK32, T16, MODE>(c, st->d_in, IN(st, io, tc_qinfo_t, o_qinfo), st->d_pilot, (size_t)n, st->d_cnt,
                                       st->d_cand, n, nq, sms, s);
}

/* The final pass of nq queries over c's candidates in cnt / cand into the
 * output region out (laid out by io), the queries' rows and infos in the
 * call's input region. */
template <int DP, int RANGE>
static cudaError_t tc_final_to(const knn_copy_t *c, const knn_state_t *st, const tc_io_t *io, const uint32_t *cnt,
                               const uint32_t *cand, uint8_t *out, int nq, int take, int partial, int kstride,
                               double radius, cudaStream_t s)
{
    const size_t smem = tc_final_smem();
    cudaError_t e = cudaFuncSetAttribute(k_tc_final<DP, RANGE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem);
    if (e != cudaSuccess) return e;
    k_tc_final<DP, RANGE><<<nq, TC_FINAL_THREADS, smem, s>>>(
        c->descs, c->aux, c->t1, c->c3, c->ptab, c->ids, c->dead, st->d_in, IN(st, io, tc_qinfo_t, o_qinfo), cnt,
        cand, take, partial, kstride, radius, (double *)(out + io->o_outd), (uint64_t *)(out + io->o_outid),
        (uint32_t *)out, out + io->o_flag);
    return cudaGetLastError();
}

template <int DP, int RANGE>
static cudaError_t tc_final(const knn_copy_t *c, const knn_state_t *st, const tc_io_t *io, int nq, int take,
                            int partial, int kstride, double radius, cudaStream_t s)
{
    return tc_final_to<DP, RANGE>(c, st, io, st->d_cnt, st->d_cand, st->d_out, nq, take, partial, kstride, radius, s);
}

/* The per-call buffers for qb queries of at most `per` output entries
 * each and `dense` pilot floats (grown, never shrunk). */
patina_status tc_buffers(patina_gpu_t *g, knn_state_t *st, const knn_copy_t *c, size_t qb, size_t dense,
                         size_t per)
{
    tc_io_t io;
    if (st->tq_cap >= qb && st->tq_dense >= dense && st->tq_out >= qb * per) return PATINA_OK;
    if (qb < st->tq_cap) qb = st->tq_cap;
    if (dense < st->tq_dense) dense = st->tq_dense;
    if (qb * per < st->tq_out) per = (st->tq_out + qb - 1) / qb;
    tc_buffers_free(g, st);
    tc_layout(&io, qb, 256, per);
#define DEV(p, n, tag) PATINA_TRY(tcache_dev_alloc(g, PGPU_FAM_SEARCH, c, (void **)&st->p, (n) * sizeof *st->p, tag))
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

/* A range search's scan threshold theta': t >= 1 - r / 100, less the
 * margins (gpu/knn_tc.cuh); -inf from radius 100 on (every row). */
static float tc_range_theta(double radius)
{
    const double t = 1.0 - radius / 100.0;
    return radius >= 100.0 ? -HUGE_VALF : nextafterf((float)t * (1.0f - 1e-5f) - 1e-9f, -HUGE_VALF);
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
    if (range) theta = tc_range_theta(radius);
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
            k_tc_select<<<(unsigned)m, TC_TSEL_THREADS, 0, s>>>(st->d_pilot, S, (uint32_t)S, (uint32_t)take,
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

/* ---- one query, one launch (k_tc_one) ---- */

static int knn_one_mode = PGPU_KNN_ONE_DEFAULT; /* patina_gpu__knn_one */

void patina_gpu__knn_one(int mode) { knn_one_mode = mode; }

/* The measurement of the one-launch path (patina_gpu__knn_prof): the
 * switch and the last measured call's figures. Calls run under the
 * context's GPU turn; the switch is a benchmark's, set between calls. */
static int knn_prof_on;
static pgpu_knn_prof_t knn_prof;

void patina_gpu__knn_prof(int on) { knn_prof_on = on; }

void patina_gpu__knn_prof_last(pgpu_knn_prof_t *out)
{
    if (out) *out = knn_prof;
}

static double prof_now_us(void) { return patina_now() * 1e6; }

/* k_tc_one's readings (TC_PROF slots, ns) into knn_prof. */
static void prof_phases(const unsigned long long *t)
{
    const double ns = 1e-3;
    knn_prof.spread_us = (double)(t[TC_PROF_LAST_START] - t[TC_PROF_START]) * ns;
    knn_prof.pilot_us = (double)(t[TC_PROF_PILOT] - t[TC_PROF_START]) * ns;
    knn_prof.theta_us = (double)(t[TC_PROF_THETA] - t[TC_PROF_PILOT]) * ns;
    knn_prof.scan_us = (double)(t[TC_PROF_SCAN] - t[TC_PROF_THETA]) * ns;
    knn_prof.sync_us = (double)(t[TC_PROF_SYNC] - t[TC_PROF_SCAN]) * ns;
    knn_prof.final_us = (double)(t[TC_PROF_END] - t[TC_PROF_SYNC]) * ns;
    /* the final ranking's steps (a step not reached, a flagged query's, reads 0) */
    {
        const int st[6] = {TC_PROF_SYNC, TC_PROF_F_PREP, TC_PROF_F_GATHER, TC_PROF_F_KTH, TC_PROF_F_REF, TC_PROF_END};
        double *f[5] = {&knn_prof.f_prep_us, &knn_prof.f_gather_us, &knn_prof.f_kth_us, &knn_prof.f_ref_us,
                        &knn_prof.f_sort_us};
        for (int i = 0; i < 5; i++)
            *f[i] = t[st[i]] && t[st[i + 1]] >= t[st[i]] ? (double)(t[st[i + 1]] - t[st[i]]) * ns : 0.0;
    }
    knn_prof.cand = (size_t)t[TC_PROF_CAND];
}

/* k_tc_one's dynamic shared memory: the GEMV's partial sums or the final
 * pass's lists, whichever is larger (theta's values are staged in it too
 * when they fit). */
static size_t tc_one_smem(int dp)
{
    const size_t a = (size_t)TC_WARPS * 4 * (dp == 144 ? tc_gemv_pk_words<144>() : tc_gemv_pk_words<256>()),
                 b = tc_final_smem();
    return a > b ? a : b;
}

/* k_tc_one for a row width: the kernel, its dynamic shared memory and its
 * blocks per SM, asked once per state (slot 0: 144 bytes, 1: 256; -1: no
 * cooperative launch on this device). */
template <int NK32, int T16>
static cudaError_t tc_one_kernel(knn_state_t *st, int slot, const void **fn, size_t *smem)
{
    *fn = (const void *)k_tc_one<NK32, T16>;
    *smem = tc_one_smem(NK32 * 32 + T16 * 16);
    if (st->one_bps[slot] == 0) {
        int dev = 0, coop = 0, nb = 0;
        cudaError_t e = cudaGetDevice(&dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev);
        if (e == cudaSuccess) e = cudaFuncSetAttribute(*fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)*smem);
        if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, *fn, TC_WARPS * 32, *smem);
        if (e != cudaSuccess) return e;
        st->one_bps[slot] = coop && nb > 0 ? nb : -1;
    }
    return cudaSuccess;
}

static uint32_t stages_of(uint32_t rows, uint32_t blocks)
{
    const uint32_t r = (rows + blocks - 1) / blocks;
    return (r + TC_R - 1) / TC_R * TC_R;
}

/* The k-NN of one query (row q of the index's bytes) with a pilot of S
 * rows in one launch and one download (take <= TC_ONE_KMAX), or (list set)
 * its range search within `radius` (S 0, take TC_CAND: the hits, at most
 * max_hits unless 0, in a list of their own). *done = 0: the device cannot
 * (no cooperative launch or no packed rows; nothing was run), else cpu[0]
 * = 1 when the engine could not settle the query (the same flag as
 * tc_knn_pass's), or its answer in hits (list) / counts[0]. */
static patina_status tc_one(patina_gpu_t *g, knn_state_t *st, const knn_copy_t *c, const uint8_t *q, size_t take,
                            size_t S, patina_hit_t *hits, size_t *counts, uint8_t *cpu, size_t *paths, int *done,
                            patina_hit_t **list, double radius, size_t max_hits)
{
    cudaStream_t s = (cudaStream_t)pgpu_stream(g, 0);
    int slot = c->dp == 144 ? 0 : 1;
    const void *fn;
    void *args[1];
    size_t smem, dense;
    uint32_t most, grid, t2 = 0, s2 = 0;
    tc_one_args_t a;
    tc_io_t io;
    cudaError_t e = cudaSuccess;
    const int prof = knn_prof_on;
    unsigned long long pt[TC_PROF];
    double t0 = prof ? prof_now_us() : 0.0, t1 = 0.0;
    *done = 0;
    for (size_t i = 0; i < c->dim; i++) {
        t2 += q[i];
        s2 += (uint32_t)q[i] * q[i];
    }
    if (t2 == 0) { /* an all-zero query: the CPU's, as the engine flags it */
        *done = 1;
        cpu[0] = 1;
        return PATINA_OK;
    }
    e = slot == 0 ? tc_one_kernel<4, 1>(st, slot, &fn, &smem) : tc_one_kernel<8, 0>(st, slot, &fn, &smem);
    if (e != cudaSuccess) return pgpu_fail((int)e, "gpu search: one-launch k-NN (k_tc_one)", __FILE__, __LINE__);
    if (st->one_bps[slot] < 0 || !c->pk) return PATINA_OK; /* no cooperative launch, or no packed rows */
    memset(&a, 0, sizeof a);
    a.n = (uint32_t)c->n;
    a.S = (uint32_t)S;
    a.take = (uint32_t)take;
    a.stage_cap = (uint32_t)(smem / sizeof(float));
    /* whole stages a block; as many blocks as the rows need, at most the
     * resident ones */
    most = (uint32_t)st->one_bps[slot] * (uint32_t)g->sm_count;
    a.rpb_scan = stages_of(a.n, most);
    a.rpb_pilot = a.S ? stages_of(a.S, most) : 0;
    if (a.rpb_pilot < TC_ONE_PILOT_ROWS) a.rpb_pilot = TC_ONE_PILOT_ROWS; /* fewer, fuller lists: one round each */
    a.plists = (a.S + a.rpb_pilot - 1) / a.rpb_pilot;
    grid = (a.n + a.rpb_scan - 1) / a.rpb_scan;
    if (a.plists > grid) grid = a.plists;
    /* in the pilot buffer, each part 16-byte aligned (read in 16-byte
     * pieces): the pilot values, the pilot blocks' slice maxima when they
     * fit the shared memory and are at least take (else theta is selected
     * from the S values; a range query has neither), the candidates' keys */
    size_t o_top = (S + 3) / 4 * 4 + 4, o_key = o_top; /* floats */
    if (!list && (size_t)a.plists * TC_WARPS <= a.stage_cap && (size_t)a.plists * TC_WARPS >= take &&
        knn_one_mode == PGPU_KNN_ONE_DEFAULT)
        o_key += (size_t)a.plists * TC_WARPS + 4;
    o_key = (o_key + 3) / 4 * 4; /* the keys' doubles 16-byte aligned */
    dense = o_key + 2 * (size_t)TC_CAND;
    const size_t o_prof = dense; /* the measurement's u64 slots (8-byte aligned: o_key is a multiple of 4) */
    if (prof) dense += 2 * (size_t)TC_PROF;
    if (prof) {
        for (int i = 0; i < 2 && e == cudaSuccess; i++)
            if (!st->prof_ev[i]) e = cudaEventCreate(&st->prof_ev[i]);
        if (e != cudaSuccess) return pgpu_fail((int)e, "gpu search: one-launch k-NN (events)", __FILE__, __LINE__);
    }
    PATINA_TRY(tc_buffers(g, st, c, 1, dense, take));
    tc_layout(&io, 1, (size_t)c->dp, take);
    a.rows = c->descs;
    a.pk = c->pk;
    a.aux = c->aux;
    a.t1 = c->t1;
    a.c3 = c->c3;
    a.ptab = c->ptab;
    a.ids = c->ids;
    a.dead = c->dead;
    a.dense = st->d_pilot;
    if (o_key > o_top) a.top = st->d_pilot + o_top;
    a.ckey = (double *)(st->d_pilot + o_key);
    a.cnt = st->d_cnt;
    a.cand = st->d_cand;
    /* the answer: written by the kernel straight into the pinned h_out
     * (mapped: one address space), no copy; where h_out is not mapped, into
     * d_out, downloaded after the launch */
    uint8_t *out = st->d_out;
    if (st->h_out_of != st->h_out) { /* asked once per output buffer */
        void *hp = NULL;
        if (cudaHostGetDevicePointer(&hp, st->h_out, 0) != cudaSuccess) {
            (void)cudaGetLastError(); /* not mapped: the download */
            hp = NULL;
        }
        st->h_out_dev = (uint8_t *)hp;
        st->h_out_of = st->h_out;
    }
    if (st->h_out_dev) out = st->h_out_dev;
    a.out_n = (uint32_t *)out;
    a.flag = out + io.o_flag;
    a.out_d = (double *)(out + io.o_outd);
    a.out_id = (uint64_t *)(out + io.o_outid);
    memcpy(a.q, q, c->dim);
    a.qinfo = make_float4((float)t2, (float)t2 * (float)t2, (float)s2, list ? tc_range_theta(radius) : 0.f);
    a.range = list != NULL;
    a.radius = radius;
    if (knn_one_mode == PGPU_KNN_ONE_L2) a.stage_cap = 0; /* theta's select through L2 */
    if (prof) {
        a.prof = (unsigned long long *)(st->d_pilot + o_prof);
        e = cudaMemsetAsync(a.prof, 0, TC_PROF * sizeof *a.prof, s);
        if (e == cudaSuccess) e = cudaEventRecord(st->prof_ev[0], s);
        if (e != cudaSuccess) return pgpu_fail((int)e, "gpu search: one-launch k-NN (k_tc_one)", __FILE__, __LINE__);
        t1 = prof_now_us();
        knn_prof.prep_us = t1 - t0;
    }
    args[0] = &a;
    e = cudaLaunchCooperativeKernel(fn, dim3(grid), dim3(TC_WARPS * 32), args, smem, s);
    if (e == cudaErrorCooperativeLaunchTooLarge) { /* fewer SMs than asked for (a shared device): not here */
        (void)cudaGetLastError();
        st->one_bps[slot] = -1;
        return PATINA_OK;
    }
    if (prof) {
        t0 = prof_now_us();
        knn_prof.launch_us = t0 - t1;
        if (e == cudaSuccess) e = cudaEventRecord(st->prof_ev[1], s);
    }
    if (e == cudaSuccess && out == st->d_out)
        e = cudaMemcpyAsync(st->h_out, st->d_out, io.out_bytes, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) return pgpu_fail((int)e, "gpu search: one-launch k-NN (k_tc_one)", __FILE__, __LINE__);
    if (prof) { /* the readings after the answer, so that they do not delay it */
        float ms = 0.f;
        t1 = prof_now_us();
        knn_prof.wait_us = t1 - t0;
        e = cudaEventElapsedTime(&ms, st->prof_ev[0], st->prof_ev[1]);
        if (e == cudaSuccess) e = cudaMemcpy(pt, a.prof, sizeof pt, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) return pgpu_fail((int)e, "gpu search: one-launch k-NN (measurement)", __FILE__, __LINE__);
        knn_prof.kernel_us = (double)ms * 1e3;
        prof_phases(pt);
        knn_prof.valid = 1;
        t0 = t1;
        t1 = prof_now_us(); /* the conversion's time from here */
        knn_prof.meas_us = t1 - t0;
    }
    *done = 1;
    cpu[0] = st->h_out[io.o_flag];
    if (!cpu[0] && list) { /* the range's hits, sorted */
        size_t n = *(const uint32_t *)st->h_out;
        if (max_hits && n > max_hits) n = max_hits;
        if (paths) paths[0]++;
        if (n) {
            *list = (patina_hit_t *)malloc(n * sizeof **list);
            if (!*list) return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory for %zu hits", n);
            for (size_t j = 0; j < n; j++) (*list)[j] = tc_result(st, &io, take, 0, j);
        }
        counts[0] = n;
    } else if (!cpu[0]) {
        for (size_t j = 0; j < take; j++) hits[j] = tc_result(st, &io, take, 0, j);
        counts[0] = take;
        if (paths) paths[0]++;
    }
    if (prof) knn_prof.out_us = prof_now_us() - t1;
    return PATINA_OK;
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
#define DEV(p, n, tag) PATINA_TRY(tcache_dev_alloc(g, PGPU_FAM_SEARCH, c, (void **)&st->p, (n) * sizeof *st->p, tag))
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

static int ix_kernel_mode = PGPU_IX_KERNEL_AUTO; /* patina_gpu__ix_kernel */

void patina_gpu__ix_kernel(int mode) { ix_kernel_mode = mode; }

/* Batches from this many queries on take the wgmma scan (a block holds 128
 * queries: below this its tensor cores mostly multiply zeros). */
#define IXW_MIN_Q 64

/* The tensor-core filter over the first n rows for m queries (MODE as
 * k_ix_scan): 2 to 8 tiles of 16 queries per block, or the wgmma scan. */
template <int D, int NK32, int MODE>
static cudaError_t ix_scan(const knn_copy_t *c, const knn_state_t *st, uint32_t n, size_t m, cudaStream_t s)
{
#if PATINA_HAVE_WGMMA
    /* the wgmma scan (knn_ixw.cuh) on Hopper, for batches */
    if (MODE == 1 && st->cc == 90 && patina__ixw_applies(NK32) && ix_kernel_mode != PGPU_IX_KERNEL_MMA &&
        (m >= IXW_MIN_Q || ix_kernel_mode == PGPU_IX_KERNEL_WGMMA)) {
        const cudaError_t e = patina__ixw_scan(D, NK32, c->ix, c->n + IX_R, c->ixi, n, st->d_iq, st->d_iqi,
                                               st->d_ithr, (int)m, st->d_dcnt, st->d_dcand, st->sms, s);
        if (e != cudaErrorNotSupported) return e;
    }
#endif
    /* the pilot (a few thousand rows): two tiles a block, as tc_scan_of's */
    const int qtiles = MODE == 0 || m <= 32 ? 2 : m > 64 ? 8 : 4;
    const unsigned gy = (unsigned)((m + 16 * qtiles - 1) / (16 * qtiles));
    const size_t smem = (size_t)TC_STAGES * IX_R * (2 * (size_t)NK32 * 32 + 16 + sizeof(ix_info_t));
    uint32_t rpb = tc_rows_per_block(n, gy, st->sms);
    int per_sm = 0;
    cudaError_t e = cudaFuncSetAttribute(k_ix_scan<D, NK32, MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    if (MODE == 1 &&
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_ix_scan<D, NK32, MODE>, TC_WARPS * 32, smem) ==
            cudaSuccess &&
        per_sm > 0) {
        /* the scan in two whole waves: blocks of equal rows, as many as the
         * SMs hold twice (a wave and a half left a third of the GPU idle for
         * the last blocks; measured) */
        const size_t gx = (size_t)2 * st->sms * per_sm / gy;
        if (gx >= 1) {
            rpb = (uint32_t)((n + gx - 1) / gx);
            rpb = (rpb + IX_R - 1) / IX_R * IX_R;
            if (rpb < 4 * IX_R) rpb = 4 * IX_R;
        }
    }
    k_ix_scan<D, NK32, MODE><<<dim3((n + rpb - 1) / rpb, gy), TC_WARPS * 32, smem, s>>>(
        c->ix, c->ixi, n, rpb, c->ixmax, st->d_iq, st->d_iqi, st->d_ithr, (int)m, qtiles, (float *)st->d_dense,
        (size_t)n, st->d_dcnt, st->d_dcand);
    return cudaGetLastError();
}

/* The tensor-core filter's final pass (k_ix_final) for m queries */
template <int D, int NK32>
static cudaError_t ix_final_of(const knn_copy_t *c, const knn_state_t *st, size_t m, size_t take, size_t es,
                               int elem, cudaStream_t s)
{
    const size_t smem = (size_t)TC_CAND * (2 * sizeof(float) + sizeof(uint64_t) + sizeof(uint32_t));
    cudaError_t e = cudaFuncSetAttribute(k_ix_final<D, NK32>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    k_ix_final<D, NK32><<<(unsigned)m, TC_FINAL_THREADS, smem, s>>>(
        c->ix, c->ixi, c->descs, c->ids, c->n, c->dim, es, elem, c->sd, st->d_qv, st->d_iq, st->d_iqi, st->d_dcnt,
        st->d_dcand, (int)take, st->d_dist, st->d_id, st->d_dflag);
    return cudaGetLastError();
}

template <int D>
static cudaError_t ix_final(const knn_copy_t *c, const knn_state_t *st, size_t m, size_t take, size_t es, int elem,
                            cudaStream_t s)
{
    if constexpr (D == PDIST_L2 || D == PDIST_STD_L2 || D == PDIST_COSINE || D == PDIST_HELLINGER) {
        switch (c->ixdp) {
        case 32: return ix_final_of<D, 1>(c, st, m, take, es, elem, s);
        case 64: return ix_final_of<D, 2>(c, st, m, take, es, elem, s);
        case 128: return ix_final_of<D, 4>(c, st, m, take, es, elem, s);
        default: return ix_final_of<D, 8>(c, st, m, take, es, elem, s);
        }
    }
    return cudaErrorInvalidValue;
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

/* The filter's inputs for m queries, QPREP_CHUNK queries a task over the
 * context's workers (their limbs or floats: 8 ms for 4096 256-D queries on
 * one thread). */
#define QPREP_CHUNK 64
typedef struct qprep_job {
    qfilt_t *f;
    const knn_copy_t *c;
    const pgpu_knn_index_t *idx;
    const double *qv;
    size_t m;
    int range, ix; /* ix: the tensor-core filter's inputs, else the float filter's */
    double key;
    uint8_t *bad; /* (chunks) a query of the chunk outside the filter's domain */
} qprep_job_t;

static void qprep_task(void *arg, size_t t, int worker)
{
    qprep_job_t *jb = (qprep_job_t *)arg;
    qfilt_t *f = jb->f;
    const size_t dim = jb->idx->dim, end = (t + 1) * QPREP_CHUNK < jb->m ? (t + 1) * QPREP_CHUNK : jb->m;
    (void)worker;
    for (size_t j = t * QPREP_CHUNK; j < end; j++) {
        const double *v = jb->qv + j * dim;
        if (jb->ix) {
            const int dp = jb->c->ixdp;
            if (!ix_vector(jb->idx->dist, [v](size_t i) { return v[i]; }, dim, jb->idx->sd, dp, f->iq + j * 2 * dp,
                           &f->iqi[j])) {
                jb->bad[t] = 1;
                return;
            }
            f->ithr[j] = jb->range ? pgpu_f_up(jb->key) : 0.f;
        } else {
            float mq, nq;
            if (!fx_vector(jb->idx->dist, [v](size_t i) { return v[i]; }, dim, jb->idx->sd, f->qf + j * dim, 1, &mq,
                           &nq)) {
                jb->bad[t] = 1;
                return;
            }
            f->qi[j] = make_float4(mq, nq, jb->range ? pgpu_f_up((double)pgpu_f_up(jb->key) + (double)mq) : 0.f, 0.f);
        }
    }
}

/* The filter's inputs for m queries (qv, doubles); f->kind says which
 * filter takes them (every query must be in its domain, else the
 * definition kernels do). Range: the thresholds from the radius. 0 when
 * out of memory. */
static int qfilt_prepare(patina_gpu_t *g, qfilt_t *f, const knn_copy_t *c, const pgpu_knn_index_t *idx,
                         const double *qv, size_t m, int range, double radius)
{
    const int sq = idx->dist == PDIST_L2 || idx->dist == PDIST_STD_L2 || idx->dist == PDIST_HELLINGER;
    const size_t chunks = (m + QPREP_CHUNK - 1) / QPREP_CHUNK;
    qprep_job_t jb = {f, c, idx, qv, m, range, 0, sq ? radius * radius : radius, NULL};
    f->kind = 0;
    for (size_t j = 0; range && j < m; j++) f->thr[j] = dkey_hi(radius);
    if (!c->ix && !c->fx) return 1;
    if (!(jb.bad = (uint8_t *)malloc(chunks + 1))) return 0;
    for (int pass = 0; pass < 2 && f->kind == 0; pass++) {
        size_t t = 0;
        jb.ix = pass == 0;
        if (jb.ix ? !c->ix : !c->fx) continue;
        memset(jb.bad, 0, chunks);
        patina_pool_run(chunks > 1 ? g->pool : NULL, chunks, qprep_task, &jb);
        while (t < chunks && !jb.bad[t]) t++;
        if (t == chunks) f->kind = jb.ix ? 2 : 1;
    }
    free(jb.bad);
    return 1;
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
        k_fl_select<<<(unsigned)m, TC_TSEL_THREADS, 0, s>>>(dense, (uint32_t)S, (uint32_t)take, st->d_ithr, 1, NULL, 0,
                                                           st->d_dcnt, st->d_dflag);
    } else if (f->kind == 1) {
        fx_launch<D, 0>(c, st, (uint32_t)S, m, s);
        /* the threshold U + mq into qinfo.z */
        k_fl_select<<<(unsigned)m, TC_TSEL_THREADS, 0, s>>>(dense, (uint32_t)S, (uint32_t)take, (float *)st->d_fqi + 2,
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
    } else if (f->kind == 2) {
        if ((e = ix_final<D>(c, st, m, take, es, (int)idx->elem, s)) != cudaSuccess) return e;
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
            else if (!qfilt_prepare(g, &f, c, idx, bq, m, 0, 0.0)) f.kind = 0; /* out of memory: the definition kernels */
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
        if (!qfilt_prepare(g, &f, c, idx, bq, m, 1, radius)) f.kind = 0;
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
    if (knn_prof_on) {
        const double t0 = prof_now_us();
        memset(&knn_prof, 0, sizeof knn_prof);
        PATINA_TRY(search_begin(g, idx, &st, &c));
        knn_prof.begin_us = prof_now_us() - t0;
    } else {
        PATINA_TRY(search_begin(g, idx, &st, &c));
    }
    if (!c->tc) return def_knn(g, st, c, idx, qv, nq, k, hits, counts, cpu, paths);
    S = tc_pilot_rows(c->n, take);
    {
        int done = 0; /* one query: one launch when the device allows it */
        if (nq == 1 && take <= TC_ONE_KMAX && knn_one_mode)
            PATINA_TRY(tc_one(g, st, c, queries, take, tc_one_pilot_rows(c->n, take), hits, counts, cpu, paths, &done,
                              NULL, 0.0, 0));
        if (!done) {
            const double t0 = knn_prof_on ? prof_now_us() : 0;
            PATINA_TRY(tc_knn_pass(g, st, c, idx, queries, NULL, nq, k, S, hits, counts, cpu, paths));
            if (knn_prof_on) {
                knn_prof.batch = 1;
                knn_prof.pass_us = prof_now_us() - t0;
            }
        }
    }
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
        const double t0 = knn_prof_on ? prof_now_us() : 0;
        s = tc_knn_pass(g, st, c, idx, queries, which, nr, k, c->n, hits, counts, again, paths);
        if (knn_prof_on) {
            knn_prof.retried = nr;
            knn_prof.retry_us = prof_now_us() - t0;
        }
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
    if (nq == 1 && knn_one_mode) { /* one query: one launch when the device allows it */
        int done = 0;
        PATINA_TRY(tc_one(g, st, c, queries, TC_CAND, 0, NULL, counts, cpu, paths, &done, hits, radius, max_hits));
        if (done) return PATINA_OK;
    }
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

patina_status search_resident(patina_gpu_t *g, const pgpu_knn_index_t *idx, const uint8_t *queries,
                              const double *qv, size_t nq, const pgpu_req_t *rq, patina_hit_t *hits,
                              patina_hit_t **lists, size_t *counts, uint8_t *cpu, size_t *paths)
{
    if (rq->k) { /* timed whole when the measurement is on */
        const double t0 = knn_prof_on ? prof_now_us() : 0;
        const patina_status s = knn_resident(g, idx, queries, qv, nq, rq->k, hits, counts, cpu, paths);
        if (knn_prof_on) {
            knn_prof.resident_us = prof_now_us() - t0;
            if (nq > 1) knn_prof.batch = 1; /* the other engines' batches too: their whole search */
        }
        return s;
    }
    return range_resident(g, idx, queries, qv, nq, rq->radius, rq->max_hits, lists, counts, cpu, paths);
}

/* ---- the pinned host tier: one pass over its chunks (knn_stream.cu) ---- */

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
patina_status tier_pass(patina_gpu_t *g, knn_state_t *st, knn_tier_t *t, const uint8_t *q, size_t qbytes,
                        size_t m, size_t take, size_t S, size_t qp, int range, double radius,
                        const uint32_t *which, size_t q0, size_t k, patina_hit_t *hits, patina_hit_t **lists,
                        size_t *counts, uint8_t *fl, patina_hit_t *tmp, size_t chunks[2])
{
    cudaStream_t cs = (cudaStream_t)pgpu_stream(g, 0), us = (cudaStream_t)tcache_copy_stream(g);
    cudaEvent_t *res = (cudaEvent_t *)t->ev_res;
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
            {
                void *const dst[2] = {v.descs, v.aux};
                const void *const src[2] = {tcache_host_at(&t->host, 0, j * t->R), tcache_host_at(&t->host, 1, j * t->R)};
                const size_t bytes[2] = {v.n * (size_t)dp, v.n * sizeof(tc_aux_t)};
                e = (cudaError_t)tcache_chunk_send(g, &t->stream, j, cs, 2, dst, src, bytes);
            }
            /* the pilot (chunk 0, k-NN): thresholds for every query, qp at a time */
            for (size_t p0 = 0; j == 0 && !range && p0 < m && e == cudaSuccess; p0 += qp) {
                const size_t pm = m - p0 < qp ? m - p0 : qp;
                const uint8_t *qb = st->d_in + p0 * (size_t)dp;
                tc_qinfo_t *qi = IN(st, &io, tc_qinfo_t, o_qinfo) + p0;
                e = dp == 144 ? tc_scan_of<4, 1, 0>(&v, qb, qi, st->d_pilot, S, NULL, NULL, (uint32_t)S, (int)pm,
                                                    g->sm_count, cs)
                              : tc_scan_of<8, 0, 0>(&v, qb, qi, st->d_pilot, S, NULL, NULL, (uint32_t)S, (int)pm,
                                                    g->sm_count, cs);
                if (e == cudaSuccess) {
                    k_tc_select<<<(unsigned)pm, TC_TSEL_THREADS, 0, cs>>>(st->d_pilot, S, (uint32_t)S, (uint32_t)take,
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
            if (e == cudaSuccess) e = (cudaError_t)tcache_chunk_done(&t->stream, j, cs);
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

/* ---- several copies as one table (patina_gpu_knn_many) ----
 * One pass of the tensor-core engine over the copies of several indexes
 * for each batch of queries, as over one table of their union: the pilot
 * is the union's sample (the first rows of each copy, whose rows are
 * randomly permuted, in proportion to its rows: as many in all as one table
 * of the union would take), so every query gets its threshold from it (the
 * kth best of a subset of the union is at most the kth best of the union);
 * each copy is scanned with it and ranked by its own final pass (partial:
 * a copy may hold fewer than k candidates, or none), and the host merges
 * the copies' sorted answers by (distance, id) while the next copy runs.
 * A query some copy could not settle is flagged for the caller. */

/* The pass's second set of device buffers (counts, candidates, outputs for
 * qb queries: the first set is the call's, st->d_cnt ...), two pinned
 * result buffers of `bytes` each, and the events (grown, never shrunk). */
static patina_status many_buffers(patina_gpu_t *g, knn_state_t *st, const knn_copy_t *keep, size_t qb, size_t bytes)
{
    for (int i = 0; i < 2; i++) {
        if (!st->many_ev[i]) PGPU_CU(cudaEventCreateWithFlags(&st->many_ev[i], cudaEventDisableTiming));
        if (!st->many_sev[i]) PGPU_CU(cudaEventCreateWithFlags(&st->many_sev[i], cudaEventDisableTiming));
    }
    if (st->many_bytes >= bytes && st->many_q >= qb) return PATINA_OK;
    if (qb < st->many_q) qb = st->many_q;
    if (bytes < st->many_bytes) bytes = st->many_bytes;
    pgpu_free_n(g, 5, &st->h_many[0], &st->h_many[1], &st->d_cnt2, &st->d_cand2, &st->d_out2);
    st->many_bytes = st->many_q = 0;
    for (int i = 0; i < 2; i++)
        PATINA_TRY(pgpu_pin_alloc(g, (void **)&st->h_many[i], bytes, PGPU_FAM_SEARCH, "results of several tables"));
    PATINA_TRY(tcache_dev_alloc(g, PGPU_FAM_SEARCH, keep, (void **)&st->d_cnt2, qb * sizeof *st->d_cnt2, "candidates"));
    PATINA_TRY(tcache_dev_alloc(g, PGPU_FAM_SEARCH, keep, (void **)&st->d_cand2, qb * TC_CAND * sizeof *st->d_cand2,
                                "candidates"));
    PATINA_TRY(tcache_dev_alloc(g, PGPU_FAM_SEARCH, keep, (void **)&st->d_out2, bytes, "results"));
    st->many_bytes = bytes;
    st->many_q = qb;
    return PATINA_OK;
}

/* One batch of m queries (rows q, `bytes` apart) over the nt copies c[],
 * the pilot the first pil[j] rows of each (S of them in all): hits rows
 * q0 .. q0 + m of stride k, counts, fl (flags, indexed from q0 like them).
 * Copy j's scan runs on stream 0 into buffer set j & 1, its final pass and
 * the download of its answers on stream 2, so that copy j's final pass
 * runs beside copy j + 1's scan; the host merges copy j - 1's answers
 * meanwhile. */
static patina_status many_batch(patina_gpu_t *g, knn_state_t *st, knn_copy_t *const *c, size_t nt,
                                const uint32_t *pil, size_t S, const uint8_t *q, size_t bytes, size_t m, size_t take,
                                size_t q0, size_t k, patina_hit_t *hits, size_t *counts, uint8_t *fl,
                                patina_hit_t *tmp)
{
    cudaStream_t cs = (cudaStream_t)pgpu_stream(g, 0), fs = (cudaStream_t)pgpu_stream(g, 2);
    const int dp = c[0]->dp, sms = g->sm_count;
    uint32_t *cnt[2] = {st->d_cnt, st->d_cnt2}, *cand[2] = {st->d_cand, st->d_cand2};
    uint8_t *out[2] = {st->d_out, st->d_out2};
    patina_status s = PATINA_OK;
    cudaError_t e;
    tc_io_t io;
    size_t i, j, at = 0;
    for (i = 0; i < m; i++) counts[q0 + i] = 0;
    e = tc_queries(st, c[0]->dim, dp, q, bytes, m, (int)take, 0, 0.0, &io, cs);
    for (j = 0; j < nt && e == cudaSuccess; at += pil[j++]) { /* the pilot: each copy's share, side by side */
        const tc_qinfo_t *qi = IN(st, &io, tc_qinfo_t, o_qinfo);
        if (!pil[j]) continue;
        e = dp == 144 ? tc_scan_of<4, 1, 0>(c[j], st->d_in, qi, st->d_pilot + at, S, NULL, NULL, pil[j], (int)m, sms, cs)
                      : tc_scan_of<8, 0, 0>(c[j], st->d_in, qi, st->d_pilot + at, S, NULL, NULL, pil[j], (int)m, sms, cs);
    }
    if (e == cudaSuccess) { /* the thresholds; k_tc_select also zeroes set 0's counts and flags */
        k_tc_select<<<(unsigned)m, TC_TSEL_THREADS, 0, cs>>>(st->d_pilot, S, (uint32_t)S, (uint32_t)take,
                                                           IN(st, &io, tc_qinfo_t, o_qinfo), st->d_cnt,
                                                           OUT(st, &io, uint8_t, o_flag));
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemsetAsync(st->d_out2 + io.o_flag, 0, m, cs); /* set 1's flags */
    for (j = 0; j <= nt && e == cudaSuccess && s == PATINA_OK; j++) {
        if (j < nt) {
            const knn_copy_t *v = c[j];
            const int b = (int)(j & 1);
            /* set b is free once copy j - 2's final pass and download are done */
            if (j >= 2) e = cudaStreamWaitEvent(cs, st->many_ev[b], 0);
            if (e == cudaSuccess && j) e = cudaMemsetAsync(cnt[b], 0, m * sizeof *cnt[b], cs);
            if (e == cudaSuccess)
                e = dp == 144 ? tc_scan_of<4, 1, 1>(v, st->d_in, IN(st, &io, tc_qinfo_t, o_qinfo), NULL, 0, cnt[b],
                                                    cand[b], (uint32_t)v->n, (int)m, sms, cs)
                              : tc_scan_of<8, 0, 1>(v, st->d_in, IN(st, &io, tc_qinfo_t, o_qinfo), NULL, 0, cnt[b],
                                                    cand[b], (uint32_t)v->n, (int)m, sms, cs);
            if (e == cudaSuccess) e = cudaEventRecord(st->many_sev[b], cs);
            if (e == cudaSuccess) e = cudaStreamWaitEvent(fs, st->many_sev[b], 0);
            if (e == cudaSuccess)
                e = dp == 144 ? tc_final_to<144, 0>(v, st, &io, cnt[b], cand[b], out[b], (int)m, (int)take, 1,
                                                    (int)take, 0.0, fs)
                              : tc_final_to<256, 0>(v, st, &io, cnt[b], cand[b], out[b], (int)m, (int)take, 1,
                                                    (int)take, 0.0, fs);
            /* each set's flags stay set from copy to copy; the counts are each copy's */
            if (e == cudaSuccess) e = cudaMemcpyAsync(st->h_many[b], out[b], io.out_bytes, cudaMemcpyDeviceToHost, fs);
            if (e == cudaSuccess) e = cudaEventRecord(st->many_ev[b], fs);
        }
        if (j >= 1 && e == cudaSuccess) { /* copy j - 1's answers, while copy j runs */
            const int b = (int)((j - 1) & 1);
            e = cudaEventSynchronize(st->many_ev[b]);
            if (e == cudaSuccess)
                s = tier_merge(st->h_many[b], &io, m, take, k, NULL, q0, hits, NULL, counts, fl, tmp);
        }
    }
    if (e != cudaSuccess || s != PATINA_OK) {
        (void)cudaStreamSynchronize(cs);
        (void)cudaStreamSynchronize(fs);
    }
    if (e != cudaSuccess) return pgpu_fail((int)e, "gpu search: several tables", __FILE__, __LINE__);
    for (i = 0; s == PATINA_OK && i < m; i++) /* the union holds take rows under every threshold: else the caller's */
        if (counts[q0 + i] < take) fl[q0 + i] = 1;
    return s;
}

patina_status patina_gpu_knn_many(patina_gpu_t *g, const pgpu_knn_index_t *const *idx, size_t nt,
                                  const uint8_t *queries, size_t nq, size_t k, patina_hit_t *hits, size_t *counts,
                                  uint8_t *cpu, size_t *paths, int *taken)
{
    knn_state_t *st;
    knn_copy_t **c = NULL;
    uint32_t *pil = NULL;
    patina_hit_t *tmp = NULL;
    size_t live = 0, rows = 0, pinned = 0, take, S = 0, want, qb = 1, q0, j;
    patina_status s = PATINA_OK;
    tc_io_t io;
    if (taken) *taken = 0;
    if (!g || !idx || !queries || !hits || !counts || !cpu || !taken || k == 0)
        return patina__fail(PATINA_E_INVALID, "gpu search: bad argument");
    if (nt < 2 || nt >= KNN_CACHE || k > TC_KMAX || nq == 0) return PATINA_OK;
    for (j = 0; j < nt; j++) {
        const pgpu_knn_index_t *x = idx[j];
        if (!x || !x->t1 || x->dim > PGPU_KNN_MAXDIM || x->dim != idx[0]->dim || x->bytes != idx[0]->bytes ||
            x->dist != idx[0]->dist || x->live == 0)
            return PATINA_OK;
        live += x->live;
    }
    take = k < live ? k : live;
    PGPU_CU(cudaSetDevice(g->device));
    PATINA_TRY(knn_state(g, &st));
    for (j = 0; j < nt; j++)
        if (st->tier.serial == idx[j]->serial) return PATINA_OK; /* streamed: on its own */
    c = (knn_copy_t **)calloc(nt, sizeof *c);
    pil = (uint32_t *)calloc(nt, sizeof *pil);
    tmp = (patina_hit_t *)malloc(k * sizeof *tmp);
    if (!c || !pil || !tmp) {
        s = patina__fail(PATINA_E_NOMEM, "gpu search: out of memory for %zu tables", nt);
        goto out;
    }
    /* every copy made or brought up to date, and pinned: making the next
     * (or the buffers) cannot drop one */
    for (j = 0; j < nt && s == PATINA_OK; j++)
        if ((s = copy_of(g, st, idx[j], &c[j])) == PATINA_OK) {
            tcache_pin(g, c[j], 1);
            pinned++;
            rows += c[j]->n;
        }
    if (s == PATINA_OK) {
        /* the union's pilot: what one table of its rows would take, each
         * copy's share in proportion to its rows (rounded up) */
        want = tc_pilot_rows(rows, take);
        for (j = 0; j < nt; j++) {
            const size_t sj = (want * c[j]->n + rows - 1) / rows;
            pil[j] = (uint32_t)(sj < c[j]->n ? sj : c[j]->n);
            S += pil[j];
        }
        qb = TC_PILOT_BYTES / (S * sizeof(float));
        if (qb < 1) qb = 1;
        if (qb > TC_KNN_BATCH) qb = TC_KNN_BATCH;
        if (qb > nq) qb = nq;
        /* a batch's answers of one copy within 64 MiB (k up to 1024) */
        while (qb > 1 && qb * take * (sizeof(double) + sizeof(uint64_t)) > ((size_t)64 << 20)) qb /= 2;
        tc_layout(&io, qb, (size_t)c[0]->dp, take);
        s = tc_buffers(g, st, c[0], qb, qb * S, take);
        if (s == PATINA_OK) s = many_buffers(g, st, c[0], qb, io.out_bytes);
    }
    if (too_big(s)) { /* not together: each on its own */
        patina_clear_error();
        s = PATINA_OK;
        goto out;
    }
    if (s != PATINA_OK) goto out;
    *taken = 1;
    memset(cpu, 0, nq);
    for (q0 = 0; q0 < nq && s == PATINA_OK; q0 += qb) {
        const size_t m = nq - q0 < qb ? nq - q0 : qb;
        s = many_batch(g, st, c, nt, pil, S, queries + q0 * idx[0]->bytes, idx[0]->bytes, m, take, q0, k, hits,
                       counts, cpu, tmp);
    }
    for (j = 0; s == PATINA_OK && paths && j < nq; j++) paths[0] += !cpu[j];
out:
    for (j = 0; j < pinned; j++) tcache_pin(g, c[j], 0);
    free(c);
    free(pil);
    free(tmp);
    return s;
}
