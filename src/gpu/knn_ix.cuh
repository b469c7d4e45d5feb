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
 * m16n8k32 s8 x s8 -> s32; |hi|, |mid|, |lo| < 2^24 for n <= 520, so their
 * float conversions are exact too), and
 *     q.r = s_q s_r (hi + (mid + lo / 254) / 254) + q^.e_r + e_q.r^ + e_q.e_r
 * with q^ = s_q (Q1 + Q2 / 254). With A = s (|Q1| + |Q2| / 254) >= |x^|
 * and E = |e| (Euclidean norms, computed in double and rounded up, per
 * row at upload and per query), Cauchy-Schwarz bounds the last three
 * terms by A_q E_r + E_q A_r + E_q E_r, and the float evaluation of the
 * first (five roundings on terms bounded by A_q A_r) errs by <= 8 u A_q A_r
 * (u = 2^-24). So |dot_f - q.r| <= Md = A_q E_r + E_q A_r + E_q E_r +
 * 10 u A_q A_r, and
 *   l2, std_l2       key = Nq + Nr - 2 dot_f (N = sum x^2)   M = 2 Md + 8 u (Nq + Nr)
 *   cosine, hellinger key = 1 - dot_f Wq Wr, W = 1 / |x| rounded up (hellinger:
 *                     |x| = sqrt of the sum of v)  M = Md Wq Wr (1 + 2^-20) + 12 u
 * (the products with W, rounded up by at most 2 u each, and the three
 * roundings of the key add at most 7 u (1 + Md Wq Wr) + u; the
 * definitions' zero cases exact, M = 0 there, W = 0 marking a zero
 * vector); u carries a factor
 * (1 + 2^-10) for the definitions' own doubles, as in knn_fx.cuh, and M is
 * evaluated with upward rounding. The residual e is at most 1/508 of the
 * scale per element, so the bound stays as tight as the float filter's on
 * histograms and features alike, while the dot product costs four int8
 * MMAs per 32 elements.
 *
 * The kernel is the Tanimoto engine's scan (knn_tc.cuh) with the limbs:
 * rows [R1 | R2] staged through shared memory by cp.async, 16 queries per
 * warp held as A fragments, two 8-row MMA chains interleaved. */
#ifndef PATINA_GPU_KNN_IX_CUH
#define PATINA_GPU_KNN_IX_CUH

#include <stdint.h>

#include "algo/distance_ids.h"
#include "gpu/knn_fx.cuh"
#include "gpu/knn_layout.cuh"
#include "gpu/knn_tc.cuh"
#include "gpu/ptx.cuh"

#define IX_U (0x1p-24f * (1.0f + 0x1p-10f))

/* key and its bound M for one (query, row) from the integer sums */
template <int D>
__device__ __forceinline__ void ix_key(int32_t hi, int32_t mid, int32_t lo, const ix_info_t &q, const ix_info_t &r,
                                       float &key, float &m)
{
    const float comb = __fadd_rn((float)hi, __fmul_rn(__fadd_rn((float)mid, __fmul_rn((float)lo, 1.0f / 254.0f)),
                                                      1.0f / 254.0f));
    const float dot = __fmul_rn(comb, __fmul_rn(q.x, r.x));
    float md = __fmul_ru(q.y, r.z);
    md = __fmaf_ru(q.z, r.y, md);
    md = __fmaf_ru(q.z, r.z, md);
    md = __fmaf_ru(__fmul_ru(10.0f * IX_U, q.y), r.y, md);
    if constexpr (D == PDIST_L2 || D == PDIST_STD_L2) {
        key = __fsub_rn(__fadd_rn(q.w, r.w), __fmul_rn(2.0f, dot));
        m = __fmaf_ru(2.0f, md, __fmul_ru(8.0f * IX_U, __fadd_ru(q.w, r.w)));
    } else { /* cosine, hellinger: w = 1 / |x|, 0 for a zero vector */
        if (q.w == 0.f || r.w == 0.f) {
            key = q.w == 0.f && r.w == 0.f ? 0.f : 1.f;
            m = 0.f;
        } else {
            key = __fsub_rn(1.0f, __fmul_rn(__fmul_rn(dot, q.w), r.w));
            m = __fmaf_ru(__fmul_ru(__fmul_ru(md, q.w), r.w), 1.0f + 0x1p-20f, 12.0f * IX_U);
        }
    }
}

/* MODE 0 (pilot): dense[q * ld + r] = key + M (rounded up) for rows r < n;
 * MODE 1 (filter): rows with key <= thr[q] + M appended to the query's
 * candidate list. rows: (n + IX_R, 2 DP) bytes [R1 | R2], zero padded;
 * qbytes: (nq, 2 DP) the same for the queries. */
template <int D, int NK32, int MODE>
__global__ void __launch_bounds__(TC_WARPS * 32)
k_ix_scan(const int8_t *__restrict__ rows, const ix_info_t *__restrict__ info, uint32_t n, uint32_t rows_per_block,
          const int8_t *__restrict__ qbytes, const ix_info_t *__restrict__ qinfo, const float *__restrict__ thr, int nq,
          int qtiles, float *__restrict__ dense, size_t ld, uint32_t *__restrict__ cnt, uint32_t *__restrict__ cand)
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
    float qt[2];

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
                    float key, m;
                    if (q >= nq || r >= r1) continue;
                    ix_key<D>(hi[u][e], mid[u][e], lo[u][e], qi[h], si[c], key, m);
                    if constexpr (MODE == 0) {
                        dense[(size_t)q * ld + r] = __fadd_ru(key, m);
                    } else if (key <= __fadd_ru(qt[h], m)) {
                        const uint32_t pos = atomicAdd(&cnt[q], 1u);
                        if (pos < TC_CAND) cand[(size_t)q * TC_CAND + pos] = r;
                    }
                }
            }
        }
    }
    cp_async_wait<0>();
}

#endif
