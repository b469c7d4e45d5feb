/* The float filter of the definition path (src/gpu/knn.cu drives these
 * kernels; docs/search.md "GPU"): every distance but Tanimoto, exact.
 *
 * The exact answer is the definition's doubles (k_def_final ranks the
 * candidates with them); this filter only has to find a candidate set that
 * surely holds every row of the answer and its ties, cheaply. It computes
 * a float key per (query, row) -- a monotone function of the distance --
 * with a proven bound M(q, r) = mq + mr on its error, and keeps the rows
 * with key <= U + mq + mr, U the kth smallest "upper key" key + mq + mr of
 * a pilot sample (the copy's first rows, a uniform sample since the copy is
 * stored in a random permutation). The kth smallest upper key of a sample
 * is >= the kth smallest true key of the sample >= that of the table, so
 * every row whose true key is at most the table's kth is a candidate.
 * Every bound is evaluated with rounding upwards (__fadd_ru, __fmul_ru,
 * the host's nextafterf), so rounding cannot shrink it.
 *
 * Keys, stored values x (the row's elements as floats, after a transform)
 * and per-row norms N (the double sums, rounded up to float), with n the
 * number of elements, u = 2^-24 and c = (n + 16) u (1 + 2^-10):
 *   l1            key = sum |q - x|          N = sum |x|    M = c (Nq + Nr)
 *   l2, std_l2    key = Nq + Nr - 2 q.x      N = sum x^2    M = c (Nq + Nr)
 *                 (std_l2: x = v / sigma; the key is the squared distance)
 *   chi2          key = sum (q-x)^2/(q+x)    N = sum x      M = c (Nq + Nr)
 *   intersection  key = 1 - sum min(q, x) / max(Nq, Nr), N = sum x, M = c
 *   hellinger     key = 1 - q.x / (Nq Nr), x = sqrt(v), N = sqrt(sum v), M = c
 *                 (the distance is sqrt(max(key, 0)))
 *   cosine        key = 1 - q.x / (Nq Nr)    N = sqrt(sum x^2)          M = c
 * with the definitions' special cases for zero sums (key 0 or 1 exactly).
 * Why M bounds the error (inputs rounded to float: relative u each):
 *  - l1: |fl(q - x) - (q - x)| <= 2.01 u (|q| + |x|); the float sum of n
 *    non-negative terms errs by <= gamma_n of their sum <= (n + 1) u (Nq +
 *    Nr): total <= (n + 4) u (Nq + Nr).
 *  - l2: |sum q_f^2 - sum q^2| <= 2.01 u Nq (then one rounding); the dot
 *    product's FMA chain errs by <= gamma_n sum |q x| <= gamma_n (Nq + Nr)
 *    / 2, doubled by the factor 2; the final additions <= 4 u (Nq + Nr):
 *    total <= (n + 12) u (Nq + Nr).
 *  - chi2 (q, x >= 0): each term errs by <= 10.5 u (q + x) (the inputs,
 *    the subtraction, the square, __fdividef's 2 ulp); the sum of n
 *    non-negative terms <= gamma_n (Nq + Nr): total <= (n + 12) u (Nq + Nr).
 *  - intersection (q, x >= 0): sum min errs by <= (n + 1) u of itself, and
 *    sum min <= min(Nq, Nr); one division and N's roundings: the quotient
 *    (<= 1) errs by <= (n + 4) u, an absolute bound.
 *  - hellinger, cosine: |q.x| <= sum |q_i x_i| <= Nq Nr (Cauchy-Schwarz), so
 *    the dot product's error relative to Nq Nr is <= gamma_n + 2 u, the
 *    normalisers' roundings and the division add <= 6 u: <= (n + 8) u.
 * The definitions' own doubles differ from the real values by less than
 * (n + 5) 2^-53 relative to the same norms, and rows whose distances tie
 * after the definition's final rounding (a sqrt, a division) have keys
 * within a few 2^-52 of each other: c's (1 + 2^-10) covers both with a
 * wide margin. Underflow cannot occur: the copy is made only when every
 * non-zero |x| lies in [2^-60, 2^40] (products >= 2^-120, sums of at most
 * 2^20 terms < 2^101), and chi2 / intersection / hellinger only when no
 * element is negative; otherwise the definition kernels run alone.
 *
 * The scan keeps 32 queries per block in shared memory (a chunk of
 * elements at a time) and one row per thread (the copy is element-major,
 * so a warp's loads are coalesced): per element, one load and 8 shared
 * float4 broadcasts feed 32 accumulations. */
#ifndef PATINA_GPU_KNN_FX_CUH
#define PATINA_GPU_KNN_FX_CUH

#include <stdint.h>

#include "algo/distance_ids.h"
#include "gpu/knn_layout.cuh"
#include "gpu/knn_tc.cuh"

template <int D>
__device__ __forceinline__ float fx_acc(float a, float q, float x)
{
    if constexpr (D == PDIST_L1) {
        return __fadd_rn(a, fabsf(__fsub_rn(q, x)));
    } else if constexpr (D == PDIST_CHI2) {
        const float s = __fadd_rn(q, x), t = __fsub_rn(q, x);
        return s > 0.f ? __fadd_rn(a, __fdividef(__fmul_rn(t, t), s)) : a;
    } else if constexpr (D == PDIST_INTERSECTION) {
        return __fadd_rn(a, fminf(q, x));
    } else { /* l2, std_l2, hellinger, cosine: a dot product */
        return __fmaf_rn(q, x, a);
    }
}

template <int D>
__device__ __forceinline__ float fx_key(float acc, float nq, float nr)
{
    if constexpr (D == PDIST_L2 || D == PDIST_STD_L2) {
        return __fsub_rn(__fadd_rn(nq, nr), __fmul_rn(2.f, acc));
    } else if constexpr (D == PDIST_INTERSECTION) {
        const float mx = fmaxf(nq, nr);
        return mx == 0.f ? 0.f : __fsub_rn(1.f, __fdiv_rn(acc, mx));
    } else if constexpr (D == PDIST_HELLINGER || D == PDIST_COSINE) {
        if (nq == 0.f && nr == 0.f) return 0.f;
        if (nq == 0.f || nr == 0.f) return 1.f;
        return __fsub_rn(1.f, __fdiv_rn(acc, __fmul_rn(nq, nr)));
    } else {
        return acc;
    }
}

/* MODE 0 (pilot): dense[q * n + r] = key + mq + mr (rounded up) for rows
 * r < n; MODE 1 (filter): rows with key <= info.z + mr appended to the
 * query's candidate list (cand (nq, TC_CAND); cnt counts past the list's
 * capacity). rows: element-major, (dim, ld). qv: (nq, dim). QB queries per
 * block (1, 8 or 32: small batches do not pay for 32 accumulators). */
template <int D, int MODE, int QB>
__global__ void __launch_bounds__(FX_ROWS)
k_fx_scan(const float *__restrict__ rows, size_t ld, const fx_aux_t *__restrict__ aux, uint32_t n, int dim,
          const float *__restrict__ qv, const fx_qinfo_t *__restrict__ qinfo, int nq, float *__restrict__ dense,
          uint32_t *__restrict__ cnt, uint32_t *__restrict__ cand)
{
    __shared__ __align__(16) float qs[FX_DC][QB];
    __shared__ fx_qinfo_t qis[QB];
    const uint32_t r = blockIdx.x * FX_ROWS + threadIdx.x;
    const int q0 = blockIdx.y * QB;
    const bool live = r < n;
    float acc[QB];
#pragma unroll
    for (int j = 0; j < QB; j++) acc[j] = 0.f;
    if (threadIdx.x < QB && q0 + (int)threadIdx.x < nq) qis[threadIdx.x] = qinfo[q0 + threadIdx.x];

    for (int i0 = 0; i0 < dim; i0 += FX_DC) {
        const int len = dim - i0 < FX_DC ? dim - i0 : FX_DC;
        __syncthreads();
        for (int t = threadIdx.x; t < FX_DC * QB; t += FX_ROWS) {
            const int i = t % FX_DC, j = t / FX_DC;
            qs[i][j] = i < len && q0 + j < nq ? qv[(size_t)(q0 + j) * dim + i0 + i] : 0.f;
        }
        __syncthreads();
        const float *col = rows + (size_t)i0 * ld + (live ? r : 0);
#pragma unroll 8
        for (int i = 0; i < len; i++) {
            const float x = col[(size_t)i * ld];
            if constexpr (QB % 4 == 0) {
#pragma unroll
                for (int j = 0; j < QB; j += 4) {
                    const float4 q4 = *(const float4 *)&qs[i][j];
                    acc[j] = fx_acc<D>(acc[j], q4.x, x);
                    acc[j + 1] = fx_acc<D>(acc[j + 1], q4.y, x);
                    acc[j + 2] = fx_acc<D>(acc[j + 2], q4.z, x);
                    acc[j + 3] = fx_acc<D>(acc[j + 3], q4.w, x);
                }
            } else {
#pragma unroll
                for (int j = 0; j < QB; j++) acc[j] = fx_acc<D>(acc[j], qs[i][j], x);
            }
        }
    }
    if (!live) return;
    const fx_aux_t ra = aux[r];
#pragma unroll
    for (int j = 0; j < QB; j++) {
        const int q = q0 + j;
        if (q >= nq) break;
        const fx_qinfo_t qi = qis[j];
        const float key = fx_key<D>(acc[j], qi.y, ra.y);
        if constexpr (MODE == 0) {
            dense[(size_t)q * n + r] = __fadd_ru(key, __fadd_ru(qi.x, ra.x));
        } else if (key <= __fadd_ru(qi.z, ra.x)) {
            const uint32_t pos = atomicAdd(&cnt[q], 1u);
            if (pos < TC_CAND) cand[(size_t)q * TC_CAND + pos] = r;
        }
    }
}

/* floats in their order as unsigned integers */
__device__ __forceinline__ uint32_t fx_ord(float f)
{
    const uint32_t u = __float_as_uint(f);
    return (u >> 31) ? ~u : u | 0x80000000u;
}

__device__ __forceinline__ float fx_unord(uint32_t o)
{
    return __uint_as_float((o >> 31) ? o & 0x7fffffffu : ~o);
}

/* Per query (the float keys of both filters): U = the kth smallest pilot
 * upper key, written to out[q * os] plus add[q * as] when add is given
 * (rounded up: the FP32 filter's U + mq); zeroes the query's count and
 * flag. */
__global__ void __launch_bounds__(TC_TSEL_THREADS)
k_fl_select(const float *__restrict__ dense, uint32_t S, uint32_t kth, float *out, int os, const float *add, int as,
            uint32_t *__restrict__ cnt, uint8_t *__restrict__ flag)
{
    __shared__ uint32_t sh[TC_RADIX_WORDS];
    const float *v = dense + (size_t)blockIdx.x * S;
    if (threadIdx.x == 0) {
        cnt[blockIdx.x] = 0;
        flag[blockIdx.x] = 0;
    }
    /* the kth largest of ~ord is the kth smallest */
    const uint32_t b = tc_radix_kth([v](uint32_t i) { return ~fx_ord(v[i]); }, S, kth, sh);
    if (threadIdx.x == 0) {
        const float u = fx_unord(~b);
        out[(size_t)blockIdx.x * os] = add ? __fadd_ru(u, add[(size_t)blockIdx.x * as]) : u;
    }
}

#endif
