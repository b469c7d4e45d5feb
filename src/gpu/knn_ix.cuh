/* The tensor-core filter of the definition path for the distances that
 * reduce to a dot product -- l2, std_l2, cosine, hellinger -- on vectors of
 * at most IX_MAXDIM (256) elements (src/gpu/knn.cu drives it; docs/search.md
 * "GPU"). It plays the float filter's part (knn_fx.cuh: a key per (query,
 * row), a proven bound M(q, r) on its error, the pilot's kth smallest key
 * + M, the rows with key - M at most that), with the dot product on the
 * integer tensor cores instead of the FP32 lanes.
 *
 * Two int8 limbs. Each vector x (the filter's values: v, v / sigma, or
 * sqrt(v)) with scale s = max |x| / 127 (a float) is written
 *     x = s (Q1 + Q2 / 254) + e,   Q1 = round(x / s), Q2 = round(254 (x / s - Q1)),
 * Q1, Q2 in [-127, 127], |e_i| <= s / 508. The integer dot products
 * hi = Q1.R1, mid = Q1.R2 + Q2.R1, lo = Q2.R2 are exact (mma.sync
 * m16n8k32 s8 x s8 -> s32, or dp4a in the final pass), and
 *     q.r = s_q s_r (hi + (mid + lo / 254) / 254) + q^.e_r + e_q.r^ + e_q.e_r
 * with q^ = s_q (Q1 + Q2 / 254). With A = s (|Q1| + |Q2| / 254) >= |x^|
 * and E = |e| (Euclidean norms, computed in double and rounded up, per
 * row at upload and per query), Cauchy-Schwarz bounds the last three
 * terms by A_q E_r + E_q A_r + E_q E_r, and the float evaluation of the
 * first (ix_comb: five roundings on terms bounded by A_q A_r) errs by <=
 * 5.02 u A_q A_r (u = 2^-24). So |dot_f - q.r| <= Md = A_q E_r + E_q A_r + E_q E_r +
 * 10 u A_q A_r, and
 *   l2, std_l2       key = Nq + Nr - 2 dot_f (N = sum x^2)   M = 2 Md + 8 u (Nq + Nr)
 *   cosine, hellinger key = 1 - dot_f Wq Wr, W = 1 / |x| rounded up (hellinger:
 *                     |x| = sqrt of the sum of v)  M = Md Wq Wr (1 + 2^-20) + 12 u
 * (the products with W, rounded up by at most 2 u each, and the three
 * roundings of the key add at most 7 u (1 + Md Wq Wr) + u; the
 * definitions' zero cases exact, W = 0 marking a zero vector); u carries a
 * factor (1 + 2^-10) for the definitions' own doubles, as in knn_fx.cuh, and
 * M is evaluated with upward rounding, as a query's terms times a row's
 * (knn_ix_key.cuh's ix_bound). The residual e is at most 1/508 of the
 * scale per element, so the bound stays as tight as the float filter's on
 * histograms and features alike, while the dot product costs four int8
 * MMAs per 32 elements.
 *
 * The scan is the Tanimoto engine's (knn_tc.cuh) with the limbs: rows
 * [R1 | R2] staged through shared memory by cp.async, 16 queries per warp
 * held as A fragments, two 8-row MMA chains interleaved.
 *
 * The final pass (k_ix_final) filters once more before the definition's
 * doubles: the scan keeps every row within the pilot's kth upper key, about
 * a thousand a query by the pilot's design, and ranking those in doubles
 * reads each one's elements scattered over the element-major copy. So the
 * candidates' keys and bounds are formed again from their limbs (one
 * contiguous row each, dp4a), the kth smallest upper key among them
 * (key + M) bounds the answer's kth key as the pilot's did, and only the
 * candidates with key <= that + M -- the answer, its ties, a few more --
 * get their distances in doubles (a warp a row). */
#ifndef PATINA_GPU_KNN_IX_CUH
#define PATINA_GPU_KNN_IX_CUH

#include <stdint.h>

#include "algo/distance_ids.h"
#include "gpu/knn_fx.cuh"
#include "gpu/knn_ix_key.cuh"
#include "gpu/knn_layout.cuh"
#include "gpu/knn_tc.cuh"
#include "gpu/ptx.cuh"

/* The three integer sums of query limbs qb with row limbs rb (2 DP bytes
 * each, [Q1 | Q2], 16-byte aligned) by dp4a: the MMAs' sums exactly. */
template <int DP>
__device__ __forceinline__ void ix_sums(const int8_t *qb, const int8_t *rb, int32_t &hi, int32_t &mid, int32_t &lo)
{
    hi = mid = lo = 0;
#pragma unroll 4
    for (int w = 0; w < DP / 16; w++) {
        const int4 a = ((const int4 *)qb)[w], b = ((const int4 *)(qb + DP))[w];
        const int4 x = ((const int4 *)rb)[w], y = ((const int4 *)(rb + DP))[w];
        hi = __dp4a(a.x, x.x, __dp4a(a.y, x.y, __dp4a(a.z, x.z, __dp4a(a.w, x.w, hi))));
        mid = __dp4a(a.x, y.x, __dp4a(a.y, y.y, __dp4a(a.z, y.z, __dp4a(a.w, y.w, mid))));
        mid = __dp4a(b.x, x.x, __dp4a(b.y, x.y, __dp4a(b.z, x.z, __dp4a(b.w, x.w, mid))));
        lo = __dp4a(b.x, y.x, __dp4a(b.y, y.y, __dp4a(b.z, y.z, __dp4a(b.w, y.w, lo))));
    }
}

/* MODE 0 (pilot): dense[q * ld + r] = key + M (rounded up) for rows r < n;
 * MODE 1 (filter): rows with key <= thr[q] + M appended to the query's
 * candidate list (M only evaluated for keys within the query's largest M,
 * from rmax: the table's largest A, E and N or W). rows: (n + IX_R, 2 DP)
 * bytes [R1 | R2], zero padded; qbytes: (nq, 2 DP) the same for the
 * queries. */
template <int D, int NK32, int MODE>
__global__ void __launch_bounds__(TC_WARPS * 32)
k_ix_scan(const int8_t *__restrict__ rows, const ix_info_t *__restrict__ info, uint32_t n, uint32_t rows_per_block,
          ix_info_t rmax, const int8_t *__restrict__ qbytes, const ix_info_t *__restrict__ qinfo,
          const float *__restrict__ thr, int nq, int qtiles, float *__restrict__ dense, size_t ld,
          uint32_t *__restrict__ cnt, uint32_t *__restrict__ cand)
{
    /* bytes per limb, per row, per row in shared memory (16 more: the 8
     * rows of an MMA's B fragment fall in distinct banks) */
    constexpr int DP = NK32 * 32, RB = 2 * DP, SRB = RB + 16;
    extern __shared__ __align__(16) uint8_t smem[];
    uint8_t *srows = smem;                                           /* (STAGES, IX_R, SRB) */
    ix_info_t *sinfo = (ix_info_t *)(smem + TC_STAGES * IX_R * SRB); /* (STAGES, IX_R) */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g4 = lane >> 2, t4 = lane & 3;
    const int mytile = warp % qtiles, rl = warp / qtiles, nrl = TC_WARPS / qtiles;
    const int q0 = (blockIdx.y * qtiles + mytile) * 16 + g4, q1 = q0 + 8;
    const uint32_t r0 = blockIdx.x * rows_per_block;
    const uint32_t r1 = min(n, r0 + rows_per_block);
    uint32_t a1[NK32][4], a2[NK32][4];
    ix_info_t qi[2];
    float qt[2], qcut[2];

    if (r0 >= r1) return;
#pragma unroll
    for (int ks = 0; ks < NK32; ks++) {
        tc_frag_a(a1[ks], qbytes, RB, q0, q1, nq, ks * 32 + t4 * 4);
        tc_frag_a(a2[ks], qbytes, RB, q0, q1, nq, ks * 32 + t4 * 4 + DP);
    }
    for (int h = 0; h < 2; h++) {
        const int q = h ? q1 : q0;
        qi[h] = q < nq ? qinfo[q] : make_float4(0.f, 0.f, 0.f, 0.f);
        qt[h] = MODE == 1 && q < nq ? thr[q] : 0.f;
        /* no row's M exceeds the query's M against the table's largest A, E,
         * N or W: a key above thr + that is out without its own M */
        qcut[h] = MODE == 1 ? __fadd_ru(qt[h], ix_bound<D>(qi[h], rmax)) : 0.f;
    }

    const uint32_t nst = (r1 - r0 + IX_R - 1) / IX_R;
    auto load = [&](uint32_t st) {
        if (st < nst) {
            const int buf = st % TC_STAGES;
            tc_stage<IX_R, RB, SRB>(srows + (size_t)buf * IX_R * SRB, sinfo + buf * IX_R,
                                    rows + (size_t)(r0 + st * IX_R) * RB, info + r0 + st * IX_R);
        }
        cp_async_commit();
    };
#pragma unroll
    for (int s = 0; s < TC_STAGES - 1; s++) load(s);
    for (uint32_t st = 0; st < nst; st++) {
        cp_async_wait<TC_STAGES - 2>();
        __syncthreads();
        load(st + TC_STAGES - 1);
        const int buf = st % TC_STAGES;
        const uint8_t *sr = srows + (size_t)buf * IX_R * SRB;
        const ix_info_t *si = sinfo + buf * IX_R;
        const uint32_t base = r0 + st * IX_R;
        for (int g0 = rl; g0 < IX_R / 8; g0 += 2 * nrl) {
            int32_t hi[2][4] = {}, mid[2][4] = {}, lo[2][4] = {};
            const uint8_t *bb[2] = {sr + (size_t)(g0 * 8 + g4) * SRB + t4 * 4,
                                    sr + (size_t)((g0 + nrl) * 8 + g4) * SRB + t4 * 4};
#pragma unroll
            for (int ks = 0; ks < NK32; ks++)
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const uint8_t *b = bb[u] + ks * 32;
                    const uint32_t x0 = *(const uint32_t *)b, x1 = *(const uint32_t *)(b + 16);
                    const uint32_t y0 = *(const uint32_t *)(b + DP), y1 = *(const uint32_t *)(b + DP + 16);
                    mma_s8(hi[u], a1[ks], x0, x1);
                    mma_s8(mid[u], a1[ks], y0, y1);
                    mma_s8(mid[u], a2[ks], x0, x1);
                    mma_s8(lo[u], a2[ks], y0, y1);
                }
            /* [u][0], [u][1]: query q0, rows c, c + 1; [u][2], [u][3]: query q1 */
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int c0 = (g0 + u * nrl) * 8 + t4 * 2;
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int h = e >> 1, c = c0 + (e & 1);
                    const uint32_t r = base + c;
                    const int q = h ? q1 : q0;
                    if (q >= nq || r >= r1) continue;
                    const ix_info_t ri = si[c];
                    const float key = ix_key<D>(ix_comb(hi[u][e], mid[u][e], lo[u][e]), qi[h], ri);
                    if constexpr (MODE == 0) {
                        dense[(size_t)q * ld + r] = __fadd_ru(key, ix_bound<D>(qi[h], ri));
                    } else if (key <= qcut[h]) { /* few pairs: their own M */
                        if (key <= __fadd_ru(qt[h], ix_bound<D>(qi[h], ri))) {
                            const uint32_t pos = atomicAdd(&cnt[q], 1u);
                            if (pos < TC_CAND) cand[(size_t)q * TC_CAND + pos] = r;
                        }
                    }
                }
            }
        }
    }
    cp_async_wait<0>();
}

#endif
