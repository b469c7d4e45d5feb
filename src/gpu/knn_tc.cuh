/* Exact Tanimoto k-NN and range search on the integer tensor cores
 * (src/gpu/knn.cu drives these kernels; docs/search.md "GPU").
 *
 * Rows are u8 descriptors whose elements are 0..7 (CEDD): the dot product
 * D = sum a_i b_i of a query a and a row b is an exact integer, computed by
 * mma.sync (m16n8k32 / m16n8k16, u8 x u8 -> s32). With the row's T1 = sum b,
 * S1 = sum b^2 and the query's T2, S2, the exact Tanimoto similarity is the
 * rational
 *     t = D T1 T2 / (S2 T1^2 + S1 T2^2 - D T1 T2)     (t = 0 when T1 = 0)
 * and LIRE's distance is 100 (1 - t) up to the reference's rounding. The
 * reference (the CPU's doubles, src/search/knn.c) accumulates 144 rounded
 * quotients in double: its t differs from the exact one by less than 1e-13
 * (relative error of each sum <= 146 u, u = 2^-53; the denominator
 * (C2 + C3) - C1 >= (C2 + C3) / 2 since C1 <= sqrt(C2 C3), so the
 * subtraction at most doubles it; t <= 1).
 *
 * Three passes make the answer exact without a distance matrix:
 *  1. pilot: t in float for the first S rows (the device copy is stored in
 *     a fixed random permutation, so they are a uniform sample) and, per
 *     query, the kth largest of them, theta (k_tc_select). The kth best of a
 *     subset is at most the kth best of all rows, so theta <= t_k (the
 *     exact kth best of the whole table) up to the float error.
 *  2. scan: every row whose t passes theta' = theta (1 - 1e-5) - 1e-9 is
 *     appended to the query's candidate list (row index; an atomic counter
 *     that keeps counting past the list's capacity TC_CAND). t >= theta'
 *     is tested as D >= beta (S2 T1 / T2 + S1 T2 / T1), beta = theta' / (1 +
 *     theta') (the same inequality multiplied out), in float with per-query
 *     beta S2 / T2, beta T2 and per-row T1, S1 / T1: the right side has a
 *     relative error below 8 * 2^-24 < 1e-6 and D is exact, so every row
 *     with exact t >= t_k - 2e-12 passes (every positive t is >= 1/(7 *
 *     (T1 + T2)) > 3e-5, where 1e-5 relative exceeds 2e-12).
 *  3. final (one block per query): the exact t of each candidate from its
 *     integer D (dp4a) in double (numerator and denominator are integers
 *     below 2^53: exact; one rounding in the division), the kth largest
 *     kappa, the candidates with t >= kappa - 1e-9 (normally exactly k plus
 *     exact ties), their reference distances by the CPU's operations in
 *     the CPU's order, sorted by (distance, id), the first k written.
 * A row of the true answer (reference distance <= the kth reference
 * distance) has exact t >= t_k - 2e-13: it is a candidate (2) and a
 * survivor (3). A query whose candidates overflow the list (massive exact
 * ties), whose T2 is 0, or whose survivors do not fit, is flagged and
 * answered by the CPU: the answer is exact in every case.
 *
 * Range search (distance <= r) skips the pilot: theta' from r, then the
 * reference distances of the candidates, those <= r, sorted. */
#ifndef PATINA_GPU_KNN_TC_CUH
#define PATINA_GPU_KNN_TC_CUH

#include <stdint.h>

#include "gpu/knn_layout.cuh"
#include "gpu/ptx.cuh"
#include "gpu/radix.cuh"

#include <cooperative_groups.h>

/* ---------------------------------------------------------------- scan */

/* One stage of a scan block: R rows of RB bytes from src (stored at SRB
 * bytes a row in dst) and their 16-byte infos, by cp.async (the caller
 * commits). */
template <int R, int RB, int SRB, typename Info>
__device__ __forceinline__ void tc_stage(uint8_t *dst, Info *dinfo, const void *src, const Info *info)
{
    const uint8_t *s = (const uint8_t *)src;
    for (int c = threadIdx.x; c < R * RB / 16; c += blockDim.x)
        cp_async16(dst + (c / (RB / 16)) * SRB + (c % (RB / 16)) * 16, s + c * 16);
    for (int c = threadIdx.x; c < R; c += blockDim.x) cp_async16(dinfo + c, info + c);
}

/* The exact t of a row (sums x, dot product D with the query) for a
 * query of T2, T2^2, S2: numerator and denominator are integers below
 * 2^53, exact in double; one rounding in the division. */
__device__ __forceinline__ double tc_exact_t(uint32_t dot, tc_aux_t x, double T2, double T2sq, double S2)
{
    const double num = (double)dot * ((double)x.x * T2);
    const double den = (double)x.y * S2 + (double)x.z * T2sq - num;
    return x.x == 0.f ? 0.0 : num / den;
}

/* One block's share of a scan: rows [r0, r1) (r1 - r0 rounded up to whole
 * stages must lie inside the copy: its rows are padded by TC_R) against
 * the qtiles query tiles from tile qt0 on (qbytes, qinfo: global or
 * shared memory). MODE: 0 = pilot (write t for rows < r1 to dense (nq,
 * ld)), 1 = filter (append passing rows to cand (nq, TC_CAND), count in
 * cnt; with ckey, each candidate's exact t beside it, tc_exact_t of the
 * MMA's D). TPW: query tiles per warp (qtiles / TPW warps share the rows,
 * TC_WARPS * TPW / qtiles row groups each). A warp runs two MMA chains:
 * with TPW = 1 two groups of 8 rows against its tile, with TPW = 2 one
 * group against its two tiles -- each B fragment read from shared memory
 * once for both, half the shared-memory loads and addresses of a pair
 * (the batch's scan, where the epilogue and those loads bound it).
 * Uses the block's dynamic shared memory (tc_scan_smem); every thread of
 * the block calls it. */
template <int NK32, int T16, int MODE, int TPW>
__device__ __forceinline__ void tc_scan_rows(const uint8_t *__restrict__ rows, const tc_aux_t *__restrict__ aux,
                                             uint32_t r0, uint32_t r1, const uint8_t *qbytes,
                                             const tc_qinfo_t *qinfo, int nq, int qtiles, int qt0,
                                             float *__restrict__ dense, size_t ld, uint32_t *cnt, uint32_t *cand,
                                             double *ckey)
{
    constexpr int DP = NK32 * 32 + T16 * 16; /* bytes per row */
    extern __shared__ __align__(16) uint8_t smem[];
    uint8_t *srows = smem;                                          /* (STAGES, R, DP) */
    tc_aux_t *saux = (tc_aux_t *)(smem + TC_STAGES * TC_R * DP); /* (STAGES, R) */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g4 = lane >> 2, t4 = lane & 3;
    const int wtiles = qtiles / TPW; /* warps over the query tiles */
    const int mytile = warp % wtiles, rl = warp / wtiles, nrl = TC_WARPS / wtiles;
    /* tile j's two query rows; the MMA chains below: with TPW 2, chain u is tile u on one row
     * group; with TPW 1, the one tile on two row groups nrl apart */
    int q0[TPW], q1[TPW];
    uint32_t a[TPW][NK32 > 0 ? NK32 : 1][4], at0[TPW], at1[TPW];
    float qa[TPW][2][4], fa[TPW][2], fb[TPW][2];
    bool all[TPW][2];

    if (r0 >= r1) return;
#pragma unroll
    for (int j = 0; j < TPW; j++) {
        q0[j] = ((qt0 * qtiles) + mytile * TPW + j) * 16 + g4;
        q1[j] = q0[j] + 8;
        /* the query tile's A fragments, loaded once (rows past nq are zero) */
#pragma unroll
        for (int ks = 0; ks < NK32; ks++) tc_frag_a(a[j][ks], qbytes, DP, q0[j], q1[j], nq, ks * 32 + t4 * 4);
        at0[j] = at1[j] = 0;
        if (T16) {
            const int c = NK32 * 32 + t4 * 4;
            at0[j] = q0[j] < nq ? *(const uint32_t *)(qbytes + (size_t)q0[j] * DP + c) : 0u;
            at1[j] = q1[j] < nq ? *(const uint32_t *)(qbytes + (size_t)q1[j] * DP + c) : 0u;
        }
        for (int h = 0; h < 2; h++) {
            const int q = h ? q1[j] : q0[j];
            const float4 v = q < nq ? qinfo[q] : make_float4(0.f, 0.f, 0.f, 0.f);
            qa[j][h][0] = v.x; /* T2 */
            qa[j][h][1] = v.y; /* T2^2 */
            qa[j][h][2] = v.z; /* S2 */
            qa[j][h][3] = v.w; /* theta' */
            /* the filter t >= theta' as D >= beta (S2 T1 / T2 + S1 T2 / T1),
             * beta = theta' / (1 + theta'): D >= fa T1 + fb (S1 / T1); every
             * row passes when theta' < 0; padding queries (and T2 = 0, theta'
             * = +inf: NaN) never pass */
            const float beta = v.w / (1.0f + v.w);
            fa[j][h] = q < nq ? beta * v.z / v.x : HUGE_VALF;
            fb[j][h] = q < nq ? beta * v.x : HUGE_VALF;
            all[j][h] = q < nq && v.w < 0.f;
        }
    }

    const uint32_t nst = (r1 - r0 + TC_R - 1) / TC_R;
    auto load = [&](uint32_t st) {
        if (st < nst) {
            const int buf = st % TC_STAGES;
            tc_stage<TC_R, DP, DP>(srows + (size_t)buf * TC_R * DP, saux + buf * TC_R,
                                   rows + (size_t)(r0 + st * TC_R) * DP, aux + r0 + st * TC_R);
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
        const uint8_t *sr = srows + (size_t)buf * TC_R * DP;
        const tc_aux_t *sa = saux + buf * TC_R;
        const uint32_t base = r0 + st * TC_R;
        /* two chains at a time, so that each MMA's latency is covered by the other chain's */
        for (int g0 = rl; g0 < TC_R / 8; g0 += (TPW == 1 ? 2 : 1) * nrl) {
            int32_t d[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
            const uint8_t *b0 = sr + (size_t)(g0 * 8 + g4) * DP + t4 * 4;
            const uint8_t *b1 = TPW == 1 ? b0 + (size_t)nrl * 8 * DP : b0;
#pragma unroll
            for (int ks = 0; ks < NK32; ks++) {
                const uint32_t x0 = *(const uint32_t *)(b0 + ks * 32), x1 = *(const uint32_t *)(b0 + ks * 32 + 16);
                mma_u8(d[0], a[0][ks], x0, x1);
                if (TPW == 2) mma_u8(d[1], a[TPW - 1][ks], x0, x1);
                else mma_u8(d[1], a[0][ks], *(const uint32_t *)(b1 + ks * 32), *(const uint32_t *)(b1 + ks * 32 + 16));
            }
            if (T16) {
                const uint32_t x0 = *(const uint32_t *)(b0 + NK32 * 32);
                mma_u8_k16(d[0], at0[0], at1[0], x0);
                mma_u8_k16(d[1], at0[TPW - 1], at1[TPW - 1], TPW == 2 ? x0 : *(const uint32_t *)(b1 + NK32 * 32));
            }
            /* d[u][0], d[u][1]: query q0, rows c, c + 1; d[u][2], d[u][3]: query q1 */
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int j = TPW == 2 ? u : 0; /* the chain's tile */
                const int c0 = (TPW == 2 ? g0 : g0 + u * nrl) * 8 + t4 * 2;
                const tc_aux_t x0 = sa[c0], x1 = sa[c0 + 1];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int h = e >> 1, c = c0 + (e & 1);
                    const uint32_t r = base + c;
                    const int q = h ? q1[j] : q0[j];
                    const tc_aux_t x = (e & 1) ? x1 : x0;
                    if (MODE == 0) {
                        const float num = (float)d[u][e] * (x.x * qa[j][h][0]);
                        const float den = fmaf(x.y, qa[j][h][2], x.z * qa[j][h][1]) - num;
                        if (q < nq && r < r1) dense[(size_t)q * ld + r] = __fdiv_rn(num, den);
                    } else if ((all[j][h] || (float)d[u][e] >= fmaf(fb[j][h], x.w, fa[j][h] * x.x)) && r < r1) {
                        const uint32_t pos = atomicAdd(&cnt[q], 1u);
                        if (pos < TC_CAND) {
                            cand[(size_t)q * TC_CAND + pos] = r;
                            if (ckey)
                                ckey[(size_t)q * TC_CAND + pos] =
                                    tc_exact_t((uint32_t)d[u][e], x, (double)qa[j][h][0], (double)qa[j][h][1],
                                               (double)qa[j][h][2]);
                        }
                    }
                }
            }
        }
    }
    cp_async_wait<0>();
}

/* The scan as a kernel: block (x, y) takes rows [x rows_per_block, +
 * rows_per_block) of the first n and query tiles from y qtiles on. */
template <int NK32, int T16, int MODE, int TPW>
__global__ void __launch_bounds__(TC_WARPS * 32)
k_tc_scan(const uint8_t *__restrict__ rows, const tc_aux_t *__restrict__ aux, uint32_t n,
          uint32_t rows_per_block, const uint8_t *__restrict__ qbytes, const tc_qinfo_t *__restrict__ qinfo,
          int nq, int qtiles, float *__restrict__ dense, size_t ld, uint32_t *__restrict__ cnt,
          uint32_t *__restrict__ cand)
{
    const uint32_t r0 = blockIdx.x * rows_per_block;
    tc_scan_rows<NK32, T16, MODE, TPW>(rows, aux, r0, min(n, r0 + rows_per_block), qbytes, qinfo, nq, qtiles,
                                       (int)blockIdx.y, dense, ld, cnt, cand, NULL);
}

/* -------------------------------------------------------------- select */

/* The kth largest of n unsigned keys key(i) for the whole block, as
 * tc_radix_kth (sh: its shared words); kth = 1 (a k = 1 search's every
 * select) is the largest key, found by one block-wide reduction
 * (tc_block_minmax) in place of the radix select's passes of 2048 bins.
 * n >= kth. FEW: tc_radix_kth's, for a few keys in shared memory. */
template <bool FEW = false, typename Key>
__device__ __forceinline__ uint32_t tc_kth(Key key, uint32_t n, uint32_t kth, uint32_t *sh)
{
    if (kth != 1) return tc_radix_kth<FEW>(key, n, kth, sh);
    uint32_t lo, hi;
    tc_block_minmax(key, n, sh, &lo, &hi);
    return hi;
}

/* The scan's threshold theta' = theta (1 - 1e-5) - 1e-9 from theta's bits
 * (the pilot's kth largest t). */
__device__ __forceinline__ float tc_theta(uint32_t bits) { return __uint_as_float(bits) * (1.0f - 1e-5f) - 1e-9f; }

/* Per query (one block each): theta = the kth largest of its n pilot values
 * (non-negative floats: their bits order like unsigned integers);
 * qinfo[q].w = theta (1 - 1e-5) - 1e-9 (queries with T2 = 0 keep the
 * host's +inf). Also zeroes the query's candidate count and flag for the
 * scan and the final pass. */
__global__ void __launch_bounds__(TC_TSEL_THREADS)
k_tc_select(const float *__restrict__ dense, size_t ld, uint32_t n, uint32_t kth, tc_qinfo_t *__restrict__ qinfo,
            uint32_t *__restrict__ cnt, uint8_t *__restrict__ flag)
{
    __shared__ uint32_t sh[TC_RADIX_WORDS];
    const float *v = dense + (size_t)blockIdx.x * ld;
    if (threadIdx.x == 0) {
        cnt[blockIdx.x] = 0;
        flag[blockIdx.x] = 0;
    }
    const uint32_t bits = tc_kth([v](uint32_t i) { return __float_as_uint(v[i]); }, n, kth, sh);
    if (threadIdx.x == 0 && qinfo[blockIdx.x].x != 0.f) qinfo[blockIdx.x].w = tc_theta(bits);
}

/* --------------------------------------------------------- measurement */

/* k_tc_one's measurement (a.prof): %globaltimer readings in ns -- block 0's
 * start, the last block's start, block 0 past the first barrier and past
 * theta, the last block's scan end, the final block past the second
 * barrier and at its end -- and the scan's candidate count; in the final
 * ranking, the final block past the query's preparation (none where it
 * prepared the query during the pilot), the candidates' gathering, kappa's
 * select and the survivors' reference distances. */
enum { TC_PROF_START, TC_PROF_LAST_START, TC_PROF_PILOT, TC_PROF_THETA, TC_PROF_SCAN, TC_PROF_SYNC, TC_PROF_END,
       TC_PROF_CAND, TC_PROF_F_PREP, TC_PROF_F_GATHER, TC_PROF_F_KTH, TC_PROF_F_REF, TC_PROF };

__device__ __forceinline__ unsigned long long tc_clock(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Block blk's reading into slot i (every thread of the block past the
 * step); max: every block's, the latest kept. a.prof is uniform, so the
 * barrier is too. */
__device__ __forceinline__ void tc_prof_mark(unsigned long long *prof, int i, bool max, unsigned blk = 0)
{
    if (!prof || (!max && blockIdx.x != blk)) return;
    __syncthreads();
    if (threadIdx.x == 0) {
        if (max) atomicMax(prof + i, tc_clock());
        else prof[i] = tc_clock();
    }
}

/* --------------------------------------------------------------- final */

/* a comes after b in the result order: distance ascending, NaN last, ties
 * by id ascending (the CPU's order). */
__device__ __forceinline__ bool tc_after(double da, uint64_t ia, double db, uint64_t ib)
{
    const bool an = isnan(da), bn = isnan(db);
    if (an != bn) return an;
    if (!an) {
        if (da > db) return true;
        if (da < db) return false;
    }
    return ia > ib;
}

/* Bitonic sort of (x, y) pairs, n a power of two, by `before(i, j)`. */
template <typename X, typename Y, typename Less>
__device__ void tc_bitonic(X *x, Y *y, int n, Less before)
{
    for (int size = 2; size <= n; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            __syncthreads();
            for (int t = threadIdx.x; t < n / 2; t += blockDim.x) {
                const int lo = 2 * t - (t & (stride - 1)), hi = lo + stride;
                const bool up = (lo & size) == 0;
                if (before(x[hi], y[hi], x[lo], y[lo]) == up) {
                    const X tx = x[lo];
                    const Y ty = y[lo];
                    x[lo] = x[hi];
                    y[lo] = y[hi];
                    x[hi] = tx;
                    y[hi] = ty;
                }
            }
        }
    __syncthreads();
}

__device__ __forceinline__ int tc_pow2(int n)
{
    int p = 1;
    while (p < n) p <<= 1;
    return p;
}

/* Sorts the block's m hits (key = distance, sid = id; room for the next
 * power of two) in the result order and writes the first nout to out_d /
 * out_id. */
__device__ void tc_sort_hits(double *key, uint64_t *sid, int m, int nout, double *out_d, uint64_t *out_id)
{
    const int p2 = tc_pow2(m);
    if (m <= 32) { /* a k-NN's few hits: each placed by its rank, no network of block barriers */
        __syncthreads(); /* key / sid written by the block */
        if ((int)threadIdx.x < m) {
            const int i = (int)threadIdx.x;
            const double k = key[i];
            const uint64_t id = sid[i];
            int rank = 0; /* the hits before it (equal ones by place) */
            for (int j = 0; j < m; j++) {
                const double kj = key[j];
                const uint64_t ij = sid[j];
                rank += tc_after(k, id, kj, ij) || (j < i && !tc_after(kj, ij, k, id));
            }
            if (rank < nout) {
                out_d[rank] = k;
                out_id[rank] = id;
            }
        }
        __syncthreads();
        return;
    }
    for (int i = m + threadIdx.x; i < p2; i += blockDim.x) {
        key[i] = __longlong_as_double(0x7ff8000000000000LL);
        sid[i] = ~0ull;
    }
    tc_bitonic(key, sid, p2, [](double da, uint64_t ia, double db, uint64_t ib) { return tc_after(db, ib, da, ia); });
    for (int i = threadIdx.x; i < nout; i += blockDim.x) {
        out_d[i] = key[i];
        out_id[i] = sid[i];
    }
}

/* The Tanimoto distance from the row's dot s with the query (s summed in
 * the CPU's order), the row's T1 and C3 and the query's T2 and C2:
 * src/search/knn.c's tanimoto_rows for one row, operation for operation. */
__device__ __forceinline__ double tc_tanimoto(double s, uint32_t t1, double c3, double t2, double c2)
{
    if (t1 == 0 || t2 == 0.0) return t1 == 0 && t2 == 0.0 ? 0.0 : 100.0;
    return __dsub_rn(100.0, __dmul_rn(100.0, __ddiv_rn(s, __dsub_rn(__dadd_rn(c2, c3), s))));
}

/* The reference distance of device row r to query fq, one thread. */
__device__ __forceinline__ double tc_reference(const uint8_t *__restrict__ row, uint32_t t1, double c3,
                                               const double *__restrict__ ptab, const uint16_t *qidx,
                                               const double *qv, int nnz, double t2, double c2)
{
    const double *p = ptab + (size_t)t1 * 8;
    double s = 0.0;
    for (int j = 0; j < nnz; j++) s = __dadd_rn(s, __dmul_rn(p[row[qidx[j]]], qv[j]));
    return tc_tanimoto(s, t1, c3, t2, c2);
}

/* The reference distances of the m rows sid[0 .. m) (row indices) into
 * key[0 .. m), their ids into sid: tc_reference's value, bit for bit, with
 * half a warp a row (two rows a warp at once: a k-NN's survivors, ten or so,
 * in one round). The lanes form the products P[row[qidx[j]]] qv[j] at once
 * (the row's bytes read in one round trip, not one after another) into
 * the half-warp's part of prod (DP doubles each: prod[h] for half-warps
 * h of ngroups / 2 and more), and one lane sums them in the CPU's order.
 * For few rows: the latency of one row's loads is what a thread a row
 * pays; many rows keep tc_reference. */
template <int DP>
__device__ void tc_reference_warps(const uint8_t *__restrict__ rows, const uint32_t *__restrict__ t1,
                                   const double *__restrict__ c3, const double *__restrict__ ptab,
                                   const uint64_t *__restrict__ ids, const uint16_t *qidx, const double *qv, int nnz,
                                   double t2, double c2, int m, double *key, uint64_t *sid, double *const prod[2],
                                   int ngroups)
{
    const int lane = threadIdx.x & 15, grp = threadIdx.x >> 4;
    const unsigned half = (threadIdx.x & 16) ? 0xffff0000u : 0x0000ffffu;
    double *pw = prod[grp >= ngroups / 2] + (size_t)(grp % (ngroups / 2)) * DP;
    if (grp < ngroups)
        for (int i = grp; i < m; i += ngroups) {
            const uint32_t r = (uint32_t)sid[i], t = t1[r];
            const double c3r = c3[r];
            const uint64_t id = ids[r];
            const uint8_t *row = rows + (size_t)r * DP;
            const double *p = ptab + (size_t)t * 8;
            for (int j = lane; j < nnz; j += 16) pw[j] = __dmul_rn(p[row[qidx[j]]], qv[j]);
            __syncwarp(half);
            if (lane == 0) {
                double s = 0.0;
                for (int j = 0; j < nnz; j++) s = __dadd_rn(s, pw[j]);
                key[i] = tc_tanimoto(s, t, c3r, t2, c2);
                sid[i] = id;
            }
            __syncwarp(half);
        }
    __syncthreads();
}

/* A query as src/search/knn.c's prepare_query makes it, in shared memory
 * (tc_final_prep): its bytes, q = a / T2 of its non-zero elements and
 * their indices in order, their number, C2. */
template <int DP>
struct tc_fprep {
    uint32_t qw[DP / 4];
    uint16_t qidx[PGPU_KNN_MAXDIM];
    double qv[PGPU_KNN_MAXDIM];
    double qall[DP]; /* a / T2, every element */
    double c2;
    int nnz;
};

/* Prepares the query qrow (DP bytes) of sum t2 into fp, the same
 * operations on the same doubles as the CPU: q = a / T2 per element, C2 =
 * the sum of q^2 over every element in order, the non-zero elements'
 * indices and q in order. The quotients and squares in parallel (each one
 * rounding, as the CPU's; the squares in scratch, DP doubles), the
 * non-zero elements placed by one warp a 32-element piece after the pieces
 * before it (their counts in rsh), the sum by one thread in order. Every
 * thread of the block calls it. */
template <int DP>
__device__ void tc_final_prep(const uint8_t *qrow, double t2, tc_fprep<DP> *fp, double *scratch, uint32_t *rsh)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int i = threadIdx.x; i < DP / 4; i += blockDim.x) fp->qw[i] = ((const uint32_t *)qrow)[i];
    __syncthreads();
    const uint8_t *qb = (const uint8_t *)fp->qw;
    for (int i = threadIdx.x; i < DP; i += blockDim.x) {
        const double v = __ddiv_rn((double)qb[i], t2);
        fp->qall[i] = v;
        scratch[i] = __dmul_rn(v, v);
    }
    for (int p = warp; p < (DP + 31) / 32; p += nw) {
        const int i = p * 32 + lane;
        const uint32_t bal = __ballot_sync(0xffffffffu, i < DP && qb[i]);
        if (lane == 0) rsh[p] = (uint32_t)__popc(bal);
    }
    __syncthreads();
    for (int p = warp; p < (DP + 31) / 32; p += nw) {
        const int i = p * 32 + lane;
        const bool nz = i < DP && qb[i];
        const uint32_t bal = __ballot_sync(0xffffffffu, nz);
        if (nz) {
            int pos = __popc(bal & ((1u << lane) - 1u));
            for (int j = 0; j < p; j++) pos += (int)rsh[j];
            fp->qidx[pos] = (uint16_t)i;
            fp->qv[pos] = fp->qall[i];
        }
    }
    if (threadIdx.x == 0) {
        double c2 = 0.0;
        int nz = 0;
        for (int i = 0; i < DP; i++) c2 = __dadd_rn(c2, scratch[i]);
        for (int p = 0; p < (DP + 31) / 32; p++) nz += (int)rsh[p];
        fp->c2 = c2;
        fp->nnz = nz;
    }
    __syncthreads();
}

/* Query q's final ranking by the whole block (any multiple of 32 threads
 * dividing 2048). RANGE 0: the k nearest (take = min(k, n)) into
 * out_d / out_id (nq, k) and out_n[q] = take; with `partial` (a chunk of a
 * streamed table, whose candidates may be fewer than take) the nearest
 * min(take, live candidates) and out_n[q] their number. RANGE 1: every
 * candidate with distance <= radius, sorted, into (nq, TC_CAND), out_n[q]
 * their number. flag[q] = 1 when the query must be answered by the CPU.
 * qbytes, qinfo: global or shared memory; cnt and cand are read through
 * L2 (ld.cg), so that a kernel that wrote them before a grid-wide barrier
 * reads them here. ckey (k-NN; NULL: none): the candidates' exact t as
 * the scan wrote them (the same tc_exact_t), else computed here. Uses the
 * block's dynamic shared memory (tc_final_smem). prof (NULL: none): the
 * block's readings of the steps (k_tc_one's measurement). fp: the query
 * as the CPU prepares it (tc_final_prep), made here unless `prepared`. */
template <int DP, int RANGE>
__device__ __forceinline__ void
tc_final_query(int q, const uint8_t *__restrict__ rows, const tc_aux_t *__restrict__ aux,
               const uint32_t *__restrict__ t1, const double *__restrict__ c3, const double *__restrict__ ptab,
               const uint64_t *__restrict__ ids, const uint8_t *__restrict__ dead, const uint8_t *qbytes,
               const tc_qinfo_t *qinfo, const uint32_t *cnt, const uint32_t *cand, const double *ckey, int take,
               int partial, int kstride, double radius, double *__restrict__ out_d, uint64_t *__restrict__ out_id,
               uint32_t *__restrict__ out_n, uint8_t *__restrict__ flag, unsigned long long *prof,
               tc_fprep<DP> *fp, bool prepared)
{
    extern __shared__ __align__(16) uint8_t smem[];
    double *key = (double *)smem;                         /* (TC_CAND) */
    uint64_t *sid = (uint64_t *)(key + TC_CAND);          /* (TC_CAND) */
    uint32_t *sidx = (uint32_t *)(sid + TC_CAND);         /* (TC_CAND) */
    __shared__ int s_n, s_live;
    __shared__ uint32_t rsh[TC_RADIX_WORDS];
    const uint32_t c = __ldcg(cnt + q);
    const double t2 = qinfo[q].x; /* T2, an integer: exact */
    const int lane = threadIdx.x & 31;

    if (threadIdx.x == 0) out_n[q] = 0;
    if (c > TC_CAND || (!RANGE && !partial && c < (uint32_t)take) || t2 == 0.0) {
        if (threadIdx.x == 0) flag[q] = 1;
        return;
    }
    /* the query as the CPU prepares it (the squares in key, free until the
     * gather), unless the caller did */
    if (!prepared) tc_final_prep<DP>(qbytes + (size_t)q * DP, t2, fp, key, rsh);
    if (threadIdx.x == 0) {
        s_n = 0;
        s_live = 0;
    }
    __syncthreads();
    tc_prof_mark(prof, TC_PROF_F_PREP, false, blockIdx.x);
    const uint32_t *qw = fp->qw;
    const uint16_t *qidx = fp->qidx;
    const double *qv = fp->qv;
    const int nnz = fp->nnz;
    const double c2 = fp->c2;
    const int n = (int)c;
    const uint32_t *cq = cand + (size_t)q * TC_CAND;

    if (RANGE) {
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            const uint32_t r = __ldcg(cq + i);
            if (dead[r]) continue;
            const double d = tc_reference(rows + (size_t)r * DP, t1[r], c3[r], ptab, qidx, qv, nnz, t2, c2);
            if (d <= radius) {
                const int pos = atomicAdd(&s_n, 1);
                key[pos] = d;
                sid[pos] = ids[r];
            }
        }
        __syncthreads();
        tc_sort_hits(key, sid, s_n, s_n, out_d + (size_t)q * kstride, out_id + (size_t)q * kstride);
        if (threadIdx.x == 0) out_n[q] = (uint32_t)s_n;
        return;
    }

    /* exact t of every live candidate: the scan's, or D by dp4a here */
    const tc_qinfo_t qi = qinfo[q];
    const double T2 = qi.x, T2sq = qi.y, S2 = qi.z;
    if (ckey) {
        /* four candidates a thread at once: their loads in flight together,
         * then the removed rows (live updates) left out; the live ones
         * appended a warp at a time (one atomic a warp) */
        const double *kq = ckey + (size_t)q * TC_CAND;
        for (int i0 = 0; i0 < n; i0 += 4 * (int)blockDim.x) {
            uint32_t r[4];
            double tv[4];
            bool live[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int i = i0 + j * (int)blockDim.x + (int)threadIdx.x;
                r[j] = i < n ? __ldcg(cq + i) : 0u;
                tv[j] = i < n ? __ldcg(kq + i) : 0.0;
            }
#pragma unroll
            for (int j = 0; j < 4; j++) live[j] = i0 + j * (int)blockDim.x + (int)threadIdx.x < n && !dead[r[j]];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint32_t bal = __ballot_sync(0xffffffffu, live[j]);
                int base = 0;
                if (lane == 0 && bal) base = atomicAdd(&s_live, __popc(bal));
                base = __shfl_sync(0xffffffffu, base, 0);
                if (live[j]) {
                    const int pos = base + __popc(bal & ((1u << lane) - 1u));
                    key[pos] = tv[j];
                    sidx[pos] = r[j];
                }
            }
        }
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            const uint32_t r = __ldcg(cq + i);
            if (dead[r]) continue; /* a removed row (live updates) */
            const uint32_t *rw = (const uint32_t *)(rows + (size_t)r * DP);
            unsigned dot = 0;
#pragma unroll
            for (int w = 0; w < DP / 4; w++) dot = __dp4a(rw[w], qw[w], dot);
            const int pos = atomicAdd(&s_live, 1);
            key[pos] = tc_exact_t(dot, aux[r], T2, T2sq, S2);
            sidx[pos] = r;
        }
    }
    __syncthreads();
    tc_prof_mark(prof, TC_PROF_F_GATHER, false, blockIdx.x);
    const int nl = s_live;
    if (nl < take && !partial) { /* fewer live candidates than answers: the CPU's */
        if (threadIdx.x == 0) flag[q] = 1;
        return;
    }
    if (nl < take) take = nl; /* a chunk's: its live candidates, maybe none */
    if (take == 0) return;
    /* kappa: the take-th largest t, to 2^-20 relative (the high 32 bits of
     * a non-negative double order like unsigned integers), less 1e-9; the
     * survivors (t >= kappa) are compacted to the front */
    const uint32_t hi = tc_kth<true>(
        [key](uint32_t i) { return (uint32_t)((unsigned long long)__double_as_longlong(key[i]) >> 32); }, (uint32_t)nl,
        (uint32_t)take, rsh);
    const double kappa = __longlong_as_double((long long)((unsigned long long)hi << 32)) - 1e-9;
    for (int i = threadIdx.x; i < nl; i += blockDim.x)
        if (key[i] >= kappa) {
            const int pos = atomicAdd(&s_n, 1);
            sid[pos] = sidx[i]; /* row index, widened; the ids replace it below */
        }
    __syncthreads();
    tc_prof_mark(prof, TC_PROF_F_KTH, false, blockIdx.x);
    const int m = s_n;
    /* sidx is free now, and key past the survivors: the half-warps'
     * products (TC_CAND / 2 doubles in each) */
    const int ngr = min((int)(blockDim.x >> 4), 2 * (TC_CAND / 2 / DP));
    if (m <= 4 * ngr && m <= TC_CAND / 2) {
        double *const prod[2] = {(double *)sidx, key + TC_CAND / 2};
        tc_reference_warps<DP>(rows, t1, c3, ptab, ids, qidx, qv, nnz, t2, c2, m, key, sid, prod, ngr);
    } else {
        for (int i = threadIdx.x; i < m; i += blockDim.x) {
            const uint32_t r = (uint32_t)sid[i];
            key[i] = tc_reference(rows + (size_t)r * DP, t1[r], c3[r], ptab, qidx, qv, nnz, t2, c2);
            sid[i] = ids[r];
        }
    }
    tc_prof_mark(prof, TC_PROF_F_REF, false, blockIdx.x);
    tc_sort_hits(key, sid, m, take, out_d + (size_t)q * kstride, out_id + (size_t)q * kstride);
    if (threadIdx.x == 0) out_n[q] = (uint32_t)take;
}

/* One block per query: tc_final_query for query blockIdx.x. */
template <int DP, int RANGE>
__global__ void __launch_bounds__(TC_FINAL_THREADS)
k_tc_final(const uint8_t *__restrict__ rows, const tc_aux_t *__restrict__ aux, const uint32_t *__restrict__ t1,
           const double *__restrict__ c3, const double *__restrict__ ptab, const uint64_t *__restrict__ ids,
           const uint8_t *__restrict__ dead, const uint8_t *__restrict__ qbytes,
           const tc_qinfo_t *__restrict__ qinfo, const uint32_t *__restrict__ cnt, const uint32_t *__restrict__ cand,
           int take, int partial, int kstride, double radius, double *__restrict__ out_d,
           uint64_t *__restrict__ out_id, uint32_t *__restrict__ out_n, uint8_t *__restrict__ flag)
{
    __shared__ tc_fprep<DP> fp;
    tc_final_query<DP, RANGE>((int)blockIdx.x, rows, aux, t1, c3, ptab, ids, dead, qbytes, qinfo, cnt, cand, NULL,
                              take, partial, kstride, radius, out_d, out_id, out_n, flag, NULL, &fp, false);
}

/* ------------------------------------------------- one query, one launch */

/* One query's share of a scan without the tensor cores (a GEMV: no stages,
 * no block barrier) over the packed rows (knn_layout.cuh: TC_PK_BYTES(DP)
 * a row, half the u8 row and its sums): each warp takes groups of 32
 * rows (U at once, their loads in flight together), its lanes read them as
 * consecutive 16-byte pieces (PR = TC_PK_BYTES(DP) / 16 a row: every load
 * of the warp is contiguous), each piece's nibble words unpacked by two
 * masks (the even elements, then the odd ones) into dp4a against the
 * query's words qp (2 j: the even elements of word j, 2 j + 1: the odd
 * ones; zero for the last piece's two float words, whose products are then
 * 0) -- the same exact integer D as the tensor cores' tc_scan_rows -- the
 * pieces' sums through the warp's part of `part` (shared memory,
 * tc_gemv_pk_words a warp), and the lane holding a row's last piece hands
 * its T1 and S1 / T1 (the filter's only per-row values) to the row's lane
 * there too. Then lane i holds row i's D and applies tc_scan_rows's float
 * tests (MODE 0: the pilot's t into dense[r], reading the row's aux for
 * T1^2 and S1; 1: the filter, candidates and their exact t -- from their
 * aux -- into cnt / cand / ckey), so the same t, candidates and keys.
 * Rows [r0, r1); the 32-row groups may read past r1 inside the copy's
 * padding (its rows are padded by TC_R, and r1 - r0 is whole TC_R stages
 * or ends at the copy's n). qp and qi (T2, T2^2, S2, theta') in shared
 * memory. Every thread of the block calls it. */
template <int DP>
__host__ __device__ constexpr int tc_gemv_pk_words(void)
{
    return 32 * (TC_PK_BYTES(DP) / 16) + 64; /* PR is odd (5, 9): no skew; then T1, S1 / T1 of 32 rows */
}

template <int DP, int MODE>
__device__ __forceinline__ uint32_t tc_gemv_pk(const uint8_t *__restrict__ pk, const tc_aux_t *__restrict__ aux,
                                               uint32_t r0, uint32_t r1, const uint32_t *qp, const tc_qinfo_t *qi,
                                               float *__restrict__ dense, uint32_t *cnt, uint32_t *cand,
                                               double *ckey, int32_t *part)
{
    uint32_t best = 0u; /* MODE 0: the largest t of the lane's rows (float bits; 0: none) */
    /* two groups of 32 rows in flight a warp: U PR 16-byte loads a lane
     * (10 at DP 144, 5 KB a warp; three groups: 124 registers, a slower
     * scan -- 3.2 against 3.5 TB/s, docs/lab/search.md) */
    constexpr int PR = TC_PK_BYTES(DP) / 16, U = 2;
    static_assert(PR % 2 == 1, "tc_gemv_pk: the partial sums' layout assumes an odd piece count");
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int32_t *wp = part + warp * tc_gemv_pk_words<DP>();
    float *wx = (float *)(wp + 32 * PR); /* (32, 2): T1, S1 / T1 */
    const float4 v = *qi;
    const float beta = v.w / (1.0f + v.w);
    const float fa = beta * v.z / v.x, fb = beta * v.x;
    const bool all = v.w < 0.f;
    for (uint32_t g0 = r0 + (uint32_t)warp * 32; g0 < r1; g0 += U * (uint32_t)blockDim.x) {
        uint4 w[U][PR];
        tc_aux_t xa[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const uint32_t g = g0 + (uint32_t)u * blockDim.x;
            if (g < r1) { /* warp-uniform */
                const uint4 *src = (const uint4 *)(pk + (size_t)g * TC_PK_BYTES(DP));
#pragma unroll
                for (int j = 0; j < PR; j++) w[u][j] = __ldg(src + lane + 32 * j);
                if (MODE == 0) xa[u] = __ldg(aux + g + lane); /* padded past r1, as the rows */
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const uint32_t g = g0 + (uint32_t)u * blockDim.x;
            if (g >= r1) break; /* warp-uniform */
#pragma unroll
            for (int j = 0; j < PR; j++) {
                const int p = lane + 32 * j, c = p % PR; /* piece p: row p / PR, bytes 16 c .. 16 c + 15 */
                const uint4 qa = *(const uint4 *)(qp + 8 * c), qb = *(const uint4 *)(qp + 8 * c + 4);
                const uint32_t m = 0x0F0F0F0Fu;
                uint32_t d = __dp4a(w[u][j].x & m, qa.x, 0u);
                d = __dp4a((w[u][j].x >> 4) & m, qa.y, d);
                d = __dp4a(w[u][j].y & m, qa.z, d);
                d = __dp4a((w[u][j].y >> 4) & m, qa.w, d);
                d = __dp4a(w[u][j].z & m, qb.x, d);
                d = __dp4a((w[u][j].z >> 4) & m, qb.y, d);
                d = __dp4a(w[u][j].w & m, qb.z, d);
                d = __dp4a((w[u][j].w >> 4) & m, qb.w, d);
                wp[p] = (int32_t)d;
                if (c == PR - 1) {
                    wx[2 * (p / PR)] = __uint_as_float(w[u][j].z);
                    wx[2 * (p / PR) + 1] = __uint_as_float(w[u][j].w);
                }
            }
            __syncwarp();
            uint32_t dot = 0;
#pragma unroll
            for (int c = 0; c < PR; c++) dot += (uint32_t)wp[lane * PR + c];
            const float x1 = wx[2 * lane], xw = wx[2 * lane + 1];
            __syncwarp(); /* the sums read before the next group writes them */
            const uint32_t r = g + (uint32_t)lane;
            if (r >= r1) continue;
            if (MODE == 0) {
                const float num = (float)dot * (xa[u].x * v.x);
                const float den = fmaf(xa[u].y, v.z, xa[u].z * v.y) - num;
                const float t = __fdiv_rn(num, den);
                dense[r] = t;
                best = max(best, __float_as_uint(t));
            } else if (all || (float)dot >= fmaf(fb, xw, fa * x1)) {
                const uint32_t pos = atomicAdd(cnt, 1u);
                if (pos < TC_CAND) {
                    cand[pos] = r;
                    ckey[pos] = tc_exact_t(dot, __ldg(aux + r), (double)v.x, (double)v.y, (double)v.z);
                }
            }
        }
    }
    return best;
}

/* k_tc_one's arguments, passed by value: the query travels in them (no
 * upload). */
typedef struct tc_one_args {
    const uint8_t *rows;       /* the copy's (knn_copy_t) */
    const uint8_t *pk;         /* its packed rows (the pilot and the scan read them) */
    const tc_aux_t *aux;
    const uint32_t *t1;
    const double *c3, *ptab;
    const uint64_t *ids;
    const uint8_t *dead;
    uint32_t n, S, take;       /* rows; pilot rows (the first S); results (<= n) */
    uint32_t rpb_pilot, rpb_scan; /* rows per block in the pilot and in the scan (whole stages) */
    uint32_t plists;           /* blocks that write pilot maxima (top) */
    uint32_t stage_cap;        /* pilot values the dynamic shared memory holds (floats) */
    float *dense;              /* (S rounded up to 4) the pilot's t */
    float *top;                /* (plists, TC_WARPS) those blocks' slices' largest pilot values; NULL: select from dense */
    uint32_t *cnt, *cand;      /* (1), (TC_CAND) */
    double *ckey;              /* (TC_CAND) the candidates' exact t */
    double *out_d;             /* (take) */
    uint64_t *out_id;          /* (take) */
    uint32_t *out_n;           /* (1) */
    uint8_t *flag;             /* (1) */
    unsigned long long *prof;  /* (TC_PROF) zeroed; NULL: not measured (tc_one_prof) */
    uint32_t range;            /* 1: a range query (S 0, no pilot; theta' in qinfo.w, radius), else k-NN */
    double radius;
    tc_qinfo_t qinfo;          /* T2 (> 0), T2^2, S2; w: a range query's theta' (else unused) */
    uint32_t q[PGPU_KNN_MAXDIM / 4]; /* the query row, zero padded to DP bytes */
} tc_one_args_t;

/* One k-NN query through the whole engine in one cooperative launch (grid
 * <= the blocks that fit on the device at once, so that the barriers
 * cannot deadlock), T2 > 0:
 *  1. the pilot over the first S rows, split among the first `plists`
 *     blocks (rpb_pilot rows each: one round of loads); with `top`, each
 *     of them then writes the largest pilot value of each of its TC_WARPS
 *     slices (keys as k_tc_select orders them: float bits as unsigned; an
 *     empty slice's is key 0, the smallest) -- a subset of the S values,
 *     so its take-th largest is at most theirs and theta stays below the
 *     table's kth best; it equals the S values' take-th largest unless two
 *     of their take largest share a slice of 64 or more rows (then the
 *     next value: a slightly looser theta, never a wrong one). The host
 *     asks for the maxima only where they are at least take; where fewer
 *     of them are real (the others an empty slice's 0), the table is below
 *     64 take <= 4096 rows and theta (0) lets all of them through;
 *  2. a grid barrier; every block selects theta itself from the lists (or
 *     from the S values) -- the same values, the same kth, so every block
 *     gets the same theta with no second barrier; from shared memory when
 *     they fit, else read through L2;
 *  3. every block scans its rows [blockIdx.x rpb_scan, + rpb_scan) into
 *     the one candidate list, each candidate's exact t beside it (from
 *     the integer D: the final pass reads no row for it); a grid barrier;
 *  4. the last block ranks the candidates (tc_final_query; it prepared
 *     the query during the pilot where it had no pilot rows).
 * A range query (a.range) has no pilot and no theta (its theta' comes from
 * the radius, in qinfo.w): the scan after the first barrier, then the
 * final block's range pass (every candidate within the radius, sorted, at
 * most TC_CAND).
 * The pilot and the scan run by tc_gemv_pk (dp4a on the packed rows): the
 * same D and the same tests as the tensor cores' tc_scan_rows, which waste
 * their 16-query tile on one query (the one-launch kernel with the MMA
 * scan, measured against the unpacked dp4a scan: docs/lab/search.md).
 * The scan and final passes are the multi-launch path's device functions
 * (same arithmetic), so the answer and the flag are the same. The barriers
 * (cooperative_groups' grid sync: release / acquire at device scope) order
 * the global writes before them against the reads after them; those reads
 * go through L2 (ld.cg, cp.async.cg). */
template <int NK32, int T16>
__global__ void __launch_bounds__(TC_WARPS * 32)
k_tc_one(const tc_one_args_t a)
{
    constexpr int DP = NK32 * 32 + T16 * 16;
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ __align__(16) uint32_t sq[DP / 4];
    __shared__ __align__(16) uint32_t sqp[TC_PK_BYTES(DP) / 2]; /* the query for tc_gemv_pk */
    __shared__ tc_qinfo_t sqi;
    __shared__ uint32_t rsh[TC_RADIX_WORDS];
    __shared__ tc_fprep<DP> fp; /* the final block's prepared query */
    cooperative_groups::grid_group grid = cooperative_groups::this_grid();
    const uint8_t *qb = (const uint8_t *)sq;
    const unsigned fb = gridDim.x - 1; /* the final block: the last, whose scan share is the shortest */
    const bool early = blockIdx.x == fb && (size_t)fb * a.rpb_pilot >= a.S;
    float *sv = (float *)smem; /* values staged for a select */

    if (a.prof && threadIdx.x == 0) {
        const unsigned long long t = tc_clock();
        if (blockIdx.x == 0) a.prof[TC_PROF_START] = t;
        atomicMax(a.prof + TC_PROF_LAST_START, t);
    }
    for (int i = threadIdx.x; i < DP / 4; i += blockDim.x) sq[i] = a.q[i];
    /* word j of the packed rows (bytes 4 j .. 4 j + 3) holds elements 8 j
     * .. 8 j + 7: qp[2 j] the query's even ones, qp[2 j + 1] its odd ones
     * (zero past DP and for the two float words) */
    for (int i = threadIdx.x; i < TC_PK_BYTES(DP) / 2; i += blockDim.x) {
        const int j = i >> 1, o = i & 1;
        const uint8_t *qe = (const uint8_t *)a.q;
        uint32_t w = 0;
        if (4 * j < TC_PK_BYTES(DP) - 8)
            for (int b = 0; b < 4; b++) {
                const int e = 8 * j + 2 * b + o;
                if (e < DP) w |= (uint32_t)qe[e] << (8 * b);
            }
        sqp[i] = w;
    }
    if (threadIdx.x == 0) {
        sqi = a.qinfo;
        if (blockIdx.x == 0) {
            *a.cnt = 0;
            *a.flag = 0;
            *a.out_n = 0;
        }
    }
    __syncthreads();
    /* 1. the pilot, and the largest value of each of this block's TC_WARPS
     * slices of it (a warp's rows), from the warps' registers */
    {
        const uint32_t r0 = blockIdx.x * a.rpb_pilot;
        const uint32_t m = r0 < a.S ? min(a.S, r0 + a.rpb_pilot) - r0 : 0u;
        const uint32_t mine =
            m ? tc_gemv_pk<DP, 0>(a.pk, a.aux, r0, r0 + m, sqp, &sqi, a.dense, NULL, NULL, NULL, (int32_t *)smem) : 0u;
        if (a.top && blockIdx.x < a.plists) { /* a slice: the rows of one warp (64 of them at 512 rows a block) */
            const uint32_t best = __reduce_max_sync(0xffffffffu, mine);
            if ((threadIdx.x & 31) == 0)
                a.top[(size_t)blockIdx.x * TC_WARPS + (threadIdx.x >> 5)] = __uint_as_float(best);
        }
        /* the last block ranks the candidates at the end: where it has no
         * pilot rows, it prepares the query for that now, while the pilot
         * blocks work */
        if (early) tc_final_prep<DP>(qb, (double)sqi.x, &fp, (double *)smem, rsh);
    }
    grid.sync();
    tc_prof_mark(a.prof, TC_PROF_PILOT, false);
    /* 2. theta (k_tc_select's, for one query; a range query's came with it) */
    if (!a.range) {
        const float *v = a.top ? a.top : a.dense;
        const uint32_t nv = a.top ? a.plists * TC_WARPS : a.S;
        uint32_t bits;
        if (nv <= a.stage_cap) {
            /* whole 16-byte pieces, then the last nv % 4 values (nothing
             * past nv is read) */
            for (uint32_t c = threadIdx.x; c < nv / 4; c += blockDim.x) cp_async16(sv + 4 * c, v + 4 * c);
            cp_async_commit();
            if (threadIdx.x < nv % 4) sv[nv / 4 * 4 + threadIdx.x] = __ldcg(v + nv / 4 * 4 + threadIdx.x);
            cp_async_wait<0>();
            __syncthreads();
            bits = tc_kth<true>([sv](uint32_t i) { return __float_as_uint(sv[i]); }, nv, a.take, rsh);
        } else {
            bits = tc_kth([v](uint32_t i) { return __float_as_uint(__ldcg(v + i)); }, nv, a.take, rsh);
        }
        if (threadIdx.x == 0) sqi.w = tc_theta(bits);
        __syncthreads();
    }
    tc_prof_mark(a.prof, TC_PROF_THETA, false);
    /* 3. the filtering scan */
    {
        const uint32_t r0 = blockIdx.x * a.rpb_scan;
        if (r0 < a.n)
            tc_gemv_pk<DP, 1>(a.pk, a.aux, r0, min(a.n, r0 + a.rpb_scan), sqp, &sqi, NULL, a.cnt, a.cand, a.ckey,
                              (int32_t *)smem);
    }
    tc_prof_mark(a.prof, TC_PROF_SCAN, true);
    grid.sync();
    if (a.prof && blockIdx.x == fb && threadIdx.x == 0) {
        a.prof[TC_PROF_SYNC] = tc_clock();
        a.prof[TC_PROF_CAND] = __ldcg(a.cnt);
    }
    /* 4. the final ranking */
    if (blockIdx.x == fb) {
        if (a.range)
            tc_final_query<DP, 1>(0, a.rows, a.aux, a.t1, a.c3, a.ptab, a.ids, a.dead, qb, &sqi, a.cnt, a.cand, NULL, 0,
                                  0, TC_CAND, a.radius, a.out_d, a.out_id, a.out_n, a.flag, a.prof, &fp, early);
        else
            tc_final_query<DP, 0>(0, a.rows, a.aux, a.t1, a.c3, a.ptab, a.ids, a.dead, qb, &sqi, a.cnt, a.cand,
                                  a.ckey, (int)a.take, 0, (int)a.take, 0.0, a.out_d, a.out_id, a.out_n, a.flag, a.prof,
                                  &fp, early);
        tc_prof_mark(a.prof, TC_PROF_END, false, fb);
    }
}

#endif
