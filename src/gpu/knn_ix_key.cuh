/* The tensor-core filter's key and bound for one (query, row) from the
 * three exact integer sums of their limbs (the derivation: knn_ix.cuh's
 * opening comment) -- apart from the kernels so that both scans, the
 * mma.sync one (knn_ix.cuh) and the wgmma one (knn_ixw.cuh, compiled for
 * sm_90a on its own), evaluate the same operations in the same order and
 * so keep the same candidates. */
#ifndef PATINA_GPU_KNN_IX_KEY_CUH
#define PATINA_GPU_KNN_IX_KEY_CUH

#include <stdint.h>

#include "algo/distance_ids.h"
#include "gpu/knn_layout.cuh"

#define IX_U (0x1p-24f * (1.0f + 0x1p-10f))

/* The three integer sums as one float, comb = hi + (mid + lo / 254) / 254
 * up to the error below, in few instructions: hi converted exactly (|hi|
 * <= 256 * 127^2 < 2^22), mid * 254 + lo exact in 32 bits (|.| <= 2 * 256 *
 * 127^2 * 254 + 256 * 127^2 = 2,101,673,216 < 2^31) and rounded once, then
 * one FMA with 1/254^2 (itself rounded). Against C = hi + mid / 254 + lo /
 * 254^2: the conversion, the constant and the FMA err by <= u |T| / 254^2
 * each, the FMA also by u |hi|, so |comb - C| <= 3.01 u (|hi| + |mid| / 254
 * + |lo| / 254^2) <= 3.01 u A_q A_r / (s_q s_r) (Cauchy-Schwarz on each
 * limb product); dot = comb (s_q s_r) adds two roundings: <= 5.02 u A_q A_r
 * in all, inside the 10 u the bound allows. */
static_assert(IX_MAXDIM * 127 * 127 < (1 << 22), "hi's exact conversion");
static_assert((long long)IX_MAXDIM * 127 * 127 * (2 * 254 + 1) < 2147483647LL, "mid * 254 + lo in 32 bits");
__device__ __forceinline__ float ix_comb(int32_t hi, int32_t mid, int32_t lo)
{
    return __fmaf_rn(__int2float_rn(mid * 254 + lo), 1.0f / 64516.0f, __int2float_rn(hi));
}

/* The key of one (query, row) from comb, as a query's terms and a row's
 * (ix_kq, ix_kr: formed once each, so that a scan's pair costs few
 * operations):
 *   l2, std_l2:        p = 2 s (exact), w = N;  key = (N_q + N_r) - comb (p_q s_r)
 *                      -- 2 dot to the bit, dot = comb (s_q s_r) (doubling
 *                      is exact), as knn_ix.cuh's analysis has it;
 *   cosine, hellinger: p = s W (rounded), z = 1 for a zero vector (W = 0),
 *                      else 0;  key = (1 - (comb p_q) p_r) - z_q z_r.
 * The second product has four roundings on comb s_q s_r W_q W_r, as
 * dot = comb (s_q s_r) then (dot W_q) W_r had: grouping the first two as
 * dot's and the last two as the products with W, knn_ix.cuh's bound holds
 * as derived. The definitions' zero cases come out exact: one zero vector
 * gives p = 0, so 1 - 0 = 1 (minus 0); both give 1 - 0 - 1 = 0. */
template <int D>
__device__ __forceinline__ float3 ix_kq(const ix_info_t &q)
{
    if constexpr (D == PDIST_L2 || D == PDIST_STD_L2) return make_float3(2.0f * q.x, q.w, 0.0f);
    else return make_float3(__fmul_rn(q.x, q.w), 0.0f, q.w == 0.f ? 1.0f : 0.0f);
}

template <int D>
__device__ __forceinline__ float3 ix_kr(const ix_info_t &r)
{
    if constexpr (D == PDIST_L2 || D == PDIST_STD_L2) return make_float3(r.x, r.w, 0.0f);
    else return make_float3(__fmul_rn(r.x, r.w), 0.0f, r.w == 0.f ? 1.0f : 0.0f);
}

template <int D>
__device__ __forceinline__ float ix_key_of(float comb, const float3 &q, const float3 &r)
{
    const float x = __fmul_rn(__fmul_rn(comb, q.x), r.x);
    if constexpr (D == PDIST_L2 || D == PDIST_STD_L2) return __fsub_rn(__fadd_rn(q.y, r.y), x);
    else return __fmaf_rn(-q.z, r.z, __fsub_rn(1.0f, x));
}

template <int D>
__device__ __forceinline__ float ix_key(float comb, const ix_info_t &q, const ix_info_t &r)
{
    return ix_key_of<D>(comb, ix_kq<D>(q), ix_kr<D>(r));
}

/* Its bound M, as a query's terms times a row's (so that a scan forms the
 * query's once, each row's once, and a pair's in three operations):
 *   Md = A_q E_r + E_q A_r + E_q E_r + 10 u A_q A_r
 *      = A_q a_r + E_q b_r,   a_r = E_r + 10 u A_r,   b_r = A_r + E_r;
 *   l2, std_l2:        M = (2 A_q) a_r + (2 E_q) b_r + 8 u N_q + 8 u N_r
 *   cosine, hellinger: M = (A_q W_q c) (a_r W_r) + (E_q W_q c) (b_r W_r) + 12 u,
 *                      c = 1 + 2^-20
 * (knn_ix.cuh's bound, regrouped). Every operation rounds upwards on
 * non-negative operands, so each term is at least its exact value and M
 * at least the bound; and M grows with r's A, E and N (or W): with r the
 * table's largest of each (c->ixmax) it bounds every row's M for query q.
 * A zero vector (W = 0; its key is exact) gets M = 12 u, a hair wider than
 * it needs. x, y, z of the terms multiply and add as M = x_q x_r + y_q y_r
 * + (z_q + z_r). */
template <int D>
__device__ __forceinline__ float3 ix_qterms(const ix_info_t &q)
{
    if constexpr (D == PDIST_L2 || D == PDIST_STD_L2) {
        return make_float3(2.0f * q.y, 2.0f * q.z, __fmul_ru(8.0f * IX_U, q.w));
    } else {
        return make_float3(__fmul_ru(__fmul_ru(q.y, q.w), 1.0f + 0x1p-20f),
                           __fmul_ru(__fmul_ru(q.z, q.w), 1.0f + 0x1p-20f), 12.0f * IX_U);
    }
}

template <int D>
__device__ __forceinline__ float3 ix_rterms(const ix_info_t &r)
{
    const float a = __fmaf_ru(10.0f * IX_U, r.y, r.z), b = __fadd_ru(r.y, r.z);
    if constexpr (D == PDIST_L2 || D == PDIST_STD_L2) {
        return make_float3(a, b, __fmul_ru(8.0f * IX_U, r.w));
    } else {
        return make_float3(__fmul_ru(a, r.w), __fmul_ru(b, r.w), 0.0f);
    }
}

template <int D>
__device__ __forceinline__ float ix_bound_of(const float3 &qt, const float3 &rt)
{
    if constexpr (D == PDIST_L2 || D == PDIST_STD_L2)
        return __fmaf_ru(qt.x, rt.x, __fmaf_ru(qt.y, rt.y, __fadd_ru(qt.z, rt.z)));
    else /* z_q + z_r = 12 u */
        return __fmaf_ru(qt.x, rt.x, __fmaf_ru(qt.y, rt.y, 12.0f * IX_U));
}

template <int D>
__device__ __forceinline__ float ix_bound(const ix_info_t &q, const ix_info_t &r)
{
    return ix_bound_of<D>(ix_qterms<D>(q), ix_rterms<D>(r));
}

#endif
