/* lab/lbp: the LBP kernels the library does not ship, and their launches.
 *
 *   the paper's kernels (3x3 kinds, dense (h, w) input, dense (h-2, w-2)
 *   codes, one thread per input pixel; TLBAP literal: th2 = th * max in
 *   binary64, neighbour > th2):
 *     k_global  Algorithms 1 and 2 reading global memory (16x16 or 32x32 blocks)
 *     k_shared  the same after Algorithm 3 stages a (B+2)^2 tile in shared
 *               memory (B = 16 or 32)
 *   k_fast3     the first fused-histogram kernel (fp16x2 codes, per-lane
 *               counters, persistent 4-warp blocks), which k_fast4 replaced
 *   forced instances of the library's templates (lbp_kernels.cuh): k_fast4
 *   with the other rows-in-flight choice, k_prod3 for every histogram, k_circ
 *   for P = 8, R = 1, k_circ8 with another band height.
 * docs/lab/lbp.md has their numbers. Built with the library's CUDA flags
 * (--fmad=false); the kernels are static, so this file's instances and the
 * library's do not clash. */
#include <cuda_runtime.h>

#include <stdlib.h>
#include <string.h>

#include "benchutil.h"
#include "gpu/lbp_kernels.cuh"
#include "lab_lbp.h"

/* ---------------------------------------------------------- the paper */

static __constant__ int c_power[3][3] = {{8, 4, 2}, {16, 0, 1}, {32, 64, 128}};

/* One 3x3 window, literally (Algorithms 1 and 2): `at(i, j)` reads the pixel
 * i rows and j columns from the centre. */
template <int KIND, typename At>
static __device__ __forceinline__ uint8_t window_literal(At at, double th)
{
    int ans = 0;
    const int centre = at(0, 0);
    if (KIND == LBP_KIND_LBP8) {
        for (int i = -1; i <= 1; i++)
            for (int j = -1; j <= 1; j++)
                if (at(i, j) >= centre) ans += c_power[i + 1][j + 1];
    } else if (KIND == LBP_KIND_TLBAP) {
        int mx = at(-1, 0);
        for (int i = -1; i <= 1; i++)
            for (int j = -1; j <= 1; j++)
                if (at(i, j) > mx) mx = at(i, j);
        const double th2 = th * (double)mx;
        for (int i = -1; i <= 1; i++)
            for (int j = -1; j <= 1; j++) {
                const int v = at(i, j);
                if (v > centre && (double)v > th2) ans += c_power[i + 1][j + 1];
            }
    } else {
        int m[9];
        m[0] = 0;
        m[1] = at(0, 1);
        m[2] = at(-1, 1);
        m[3] = at(-1, 0);
        m[4] = at(-1, -1);
        m[5] = at(0, -1);
        m[6] = at(1, -1);
        m[7] = at(1, 0);
        m[8] = at(1, 1);
        for (int i = 1; i <= 8; i++) {
            const int a = i + 1 > 8 ? (i + 1) % 9 + 1 : i + 1;
            const int b = i + 2 > 8 ? (i + 2) % 9 + 1 : i + 2;
            const int d = i - 1 < 1 ? 8 + (i - 1) : i - 1;
            const int e = i - 2 < 1 ? 8 + (i - 2) : i - 2;
            const int s1 = m[a] + m[b], s2 = m[d] + m[e], v2 = 2 * m[i];
            if ((s1 >= v2 && s2 >= v2) || (s1 <= v2 && s2 <= v2)) ans += 1 << (i - 1);
        }
    }
    return (uint8_t)ans;
}

template <int KIND>
static __global__ void k_global(const uint8_t *__restrict__ img, uint8_t *__restrict__ out, int w, int h,
                         double th)
{
    const int row = threadIdx.y + blockIdx.y * blockDim.y;
    const int col = threadIdx.x + blockIdx.x * blockDim.x;
    const uint8_t *im = img + (size_t)blockIdx.z * (size_t)w * (size_t)h;
    if (row < h && col < w && row != 0 && col != 0 && col != w - 1 && row != h - 1) {
        auto at = [&](int i, int j) -> int { return im[(size_t)(row + i) * (size_t)w + (size_t)(col + j)]; };
        out[(size_t)blockIdx.z * (size_t)(w - 2) * (size_t)(h - 2) + (size_t)(row - 1) * (size_t)(w - 2) +
            (size_t)(col - 1)] = window_literal<KIND>(at, th);
    }
}

/* Algorithm 3: the block's (B+2)^2 tile in shared memory, edge threads
 * loading the halo; every load guarded by the image bounds (the paper's
 * version reads past them on partial blocks). */
template <int KIND, int B>
static __global__ void k_shared(const uint8_t *__restrict__ img, uint8_t *__restrict__ out, int w, int h,
                         double th)
{
    __shared__ uint8_t tile[B + 2][B + 2];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int gr = ty + blockIdx.y * B + 1, gc = tx + blockIdx.x * B + 1;
    const int sr = ty + 1, sc = tx + 1;
    const uint8_t *im = img + (size_t)blockIdx.z * (size_t)w * (size_t)h;
    auto in = [&](int r, int c) { return r >= 0 && r < h && c >= 0 && c < w; };
    auto px = [&](int r, int c) -> uint8_t { return im[(size_t)r * (size_t)w + (size_t)c]; };
    if (in(gr, gc)) tile[sr][sc] = px(gr, gc);
    if (ty == 0) {
        if (in(gr - 1, gc)) tile[sr - 1][sc] = px(gr - 1, gc);
        if (tx == 0 && in(gr - 1, gc - 1)) tile[sr - 1][sc - 1] = px(gr - 1, gc - 1);
        if (tx == B - 1 && in(gr - 1, gc + 1)) tile[sr - 1][sc + 1] = px(gr - 1, gc + 1);
    }
    if (ty == B - 1) {
        if (in(gr + 1, gc)) tile[sr + 1][sc] = px(gr + 1, gc);
        if (tx == 0 && in(gr + 1, gc - 1)) tile[sr + 1][sc - 1] = px(gr + 1, gc - 1);
        if (tx == B - 1 && in(gr + 1, gc + 1)) tile[sr + 1][sc + 1] = px(gr + 1, gc + 1);
    }
    if (tx == 0 && in(gr, gc - 1)) tile[sr][sc - 1] = px(gr, gc - 1);
    if (tx == B - 1 && in(gr, gc + 1)) tile[sr][sc + 1] = px(gr, gc + 1);
    __syncthreads();
    if (gr < h - 1 && gc < w - 1) {
        auto at = [&](int i, int j) -> int { return tile[sr + i][sc + j]; };
        out[(size_t)blockIdx.z * (size_t)(w - 2) * (size_t)(h - 2) + (size_t)(gr - 1) * (size_t)(w - 2) +
            (size_t)(gc - 1)] = window_literal<KIND>(at, th);
    }
}


/* ------------------------------------------------------------- k_fast3 */

/* One input row: 9 "even" pairs E[i] = (b[2i], b[2i+1]) and 8 "odd" pairs
 * O[i] = (b[2i+1], b[2i+2]) as biased halves (1024 + b). */
struct hrow {
    uint32_t e[9], o[8];
};


static __device__ __forceinline__ void fast_load(rawrow &r, const uint8_t *row, bool okx, bool okex)
{
    r.q = make_uint4(0, 0, 0, 0);
    r.ex = 0;
    if (okx) r.q = __ldg(reinterpret_cast<const uint4 *>(row));
    if (okex) r.ex = __ldg(reinterpret_cast<const uint32_t *>(row + 16));
}

/* One raw row as biased pairs; the 4 bytes after the lane's 16 come from
 * the next lane by a shuffle (lane 31 loaded them itself). */
static __device__ __forceinline__ void fast_conv(hrow &h, const rawrow &r, int lane)
{
    uint32_t v4 = __shfl_down_sync(FULL, r.q.x, 1);
    if (lane == 31) v4 = r.ex;
    conv_pairs(h.e, h.o, r.q, v4);
}

/* Codes of output pair i (columns 2i, 2i+1 of the lane) as the bits of each
 * half, from rows a (above), m, b (below). */
template <int KIND>
static __device__ __forceinline__ uint32_t fast_pair(const hrow &a, const hrow &m, const hrow &b, int i,
                                              const uint16_t *kt)
{
    /* n[k]: right, top-right, top, top-left, left, bottom-left, bottom,
     * bottom-right (bit k, the weights of the C reference) */
    const uint32_t n[8] = {m.e[i + 1], a.e[i + 1], a.o[i], a.e[i], m.e[i], b.e[i], b.o[i], b.e[i + 1]};
    const uint32_t c = m.o[i];
    uint32_t acc;
    if (KIND == LBP_KIND_LBP8) {
        const uint32_t cm1 = hsub(c, H2_ONE); /* n >= c  <=>  n - (c - 1) >= 1 */
        acc = hfma(hsub_sat(n[0], cm1), H2_W(0), 0u);
#pragma unroll
        for (int k = 1; k < 8; k++) acc = hfma(hsub_sat(n[k], cm1), H2_W(k), acc);
    } else if (KIND == LBP_KIND_TLBAP) {
        uint32_t mx = c;
#pragma unroll
        for (int k = 0; k < 8; k++) mx = hmax(mx, n[k]);
        /* k = floor(fl(th * max)) from the table, as biased halves */
        const uint32_t lo = kt[mx & 0xffu], hi = kt[(mx >> 16) & 0xffu];
        const uint32_t thr = hmax(c, __byte_perm(lo, hi, 0x5410)); /* n > c, n > k: n > max(c, k) */
        acc = hfma(hsub_sat(n[0], thr), H2_W(0), 0u);
#pragma unroll
        for (int k = 1; k < 8; k++) acc = hfma(hsub_sat(n[k], thr), H2_W(k), acc);
    } else {
        /* bit k: (s1 - 2v)(s2 - 2v) >= 0 with s1 = n[k+1] + n[k+2],
         * s2 = n[k-1] + n[k-2], v = n[k] (indices mod 8). With
         * D[j] = n[j+1] - n[j]: s1 - 2v = 2D[k] + D[k+1] = P[k] and
         * s2 - 2v = -(D[k-2] + 2D[k-1]) = -R[k-2]; the bit is clear when
         * P[k] * R[k-2] >= 1, i.e. sat(P * R) = 1 (integers up to 765 in
         * magnitude, exact; a product past the fp16 range is an infinity of
         * the right sign). */
        uint32_t D[8], P[8], R[8];
#pragma unroll
        for (int j = 0; j < 8; j++) D[j] = hsub(n[(j + 1) & 7], n[j]);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            P[j] = hfma(D[j], H2_TWO, D[(j + 1) & 7]);
            R[j] = hfma(D[(j + 1) & 7], H2_TWO, D[j]);
        }
        acc = 0x00ff00ffu; /* all bits set, then cleared */
#pragma unroll
        for (int k = 0; k < 8; k++) acc = hfma(hmul_sat(P[k], R[(k + 6) & 7]), H2_NW(k), acc);
    }
    return acc;
}


template <int KIND>
static __device__ __forceinline__ void fast_row(const fast_args &a, const hrow &ra, const hrow &rm, const hrow &rb,
                                         int img, int y, int x0, int nx, uint32_t hbase, const uint16_t *kt)
{
    uint32_t acc[8];
#pragma unroll
    for (int i = 0; i < 8; i++) acc[i] = fast_pair<KIND>(ra, rm, rb, i, kt);
    if (a.codes && x0 < a.opitch)
        *reinterpret_cast<uint4 *>(a.codes + (size_t)img * a.out_img + (size_t)y * (size_t)a.opitch + x0) =
            make_uint4(__byte_perm(acc[0], acc[1], 0x6420), __byte_perm(acc[2], acc[3], 0x6420),
                       __byte_perm(acc[4], acc[5], 0x6420), __byte_perm(acc[6], acc[7], 0x6420));
#pragma unroll
    for (int i = 0; i < 8; i++) {
        fast_red(hbase + ((acc[i] & 0xffu) << 7), 1u);
        fast_red(hbase + (acc[i] >> 9), 1u);
    }
    if (nx < 16) {
        /* the lane's columns past the map's width (the last ones): take
         * them back out */
#pragma unroll
        for (int i = 7; i >= 0; i--) {
            if (2 * i + 1 < nx) break;
            fast_red(hbase + (acc[i] >> 9), 0xffffffffu);
            if (2 * i >= nx) fast_red(hbase + ((acc[i] & 0xffu) << 7), 0xffffffffu);
        }
    }
}

template <int KIND>
static __device__ __forceinline__ void fast_task(const fast_args &a, int img, int strip, int band, int lane,
                                          uint32_t hbase, const uint16_t *kt)
{
    const int x0 = strip * PROD_COLS + lane * 16;
    const int y0 = band * a.rb, y1 = min(y0 + a.rb, a.mh);
    const int nx = a.mw - x0;
    const bool okx = x0 < a.pitch, okex = lane == 31 && x0 + 16 < a.pitch;
    const uint8_t *in = a.in + (size_t)img * a.in_img + (okx ? x0 : 0);
    const size_t pitch = (size_t)a.pitch;
    const int ylast = y1 + 1; /* last input row */
    rawrow q[6];
    hrow h0, h1, h2;
    {
        rawrow r0, r1;
        fast_load(r0, in + (size_t)y0 * pitch, okx, okex);
        fast_load(r1, in + (size_t)(y0 + 1) * pitch, okx, okex);
#pragma unroll
        for (int k = 0; k < 6; k++) {
            q[k].q = make_uint4(0, 0, 0, 0);
            q[k].ex = 0;
            if (y0 + 2 + k <= ylast) fast_load(q[k], in + (size_t)(y0 + 2 + k) * pitch, okx, okex);
        }
        fast_conv(h0, r0, lane);
        fast_conv(h1, r1, lane);
    }
    for (int y = y0; y < y1; y += 3) {
        fast_conv(h2, q[0], lane);
        q[0] = q[3];
        if (y + 8 <= ylast) fast_load(q[3], in + (size_t)(y + 8) * pitch, okx, okex);
        fast_row<KIND>(a, h0, h1, h2, img, y, x0, nx, hbase, kt);
        if (y + 1 >= y1) break;
        fast_conv(h0, q[1], lane);
        q[1] = q[4];
        if (y + 9 <= ylast) fast_load(q[4], in + (size_t)(y + 9) * pitch, okx, okex);
        fast_row<KIND>(a, h1, h2, h0, img, y + 1, x0, nx, hbase, kt);
        if (y + 2 >= y1) break;
        fast_conv(h1, q[2], lane);
        q[2] = q[5];
        if (y + 10 <= ylast) fast_load(q[5], in + (size_t)(y + 10) * pitch, okx, okex);
        fast_row<KIND>(a, h2, h0, h1, img, y + 2, x0, nx, hbase, kt);
    }
}

/* k_fast3: 3x3 whole-image histograms (and code maps when asked) with the
 * machinery of lbp_kernels.cuh: 4 blocks of 4 warps per SM (3 for LANADP,
 * for its registers) walk the (image, strip, band) tasks; each lane keeps
 * six input rows in flight in predicated loads and takes the 4 bytes after
 * its 16 from its neighbour by a shuffle; lbp8's bits are sat(n - (c - 1)). */
template <int KIND>
static __global__ void __launch_bounds__(32 * FAST_WARPS, FAST_BPS(KIND))
    k_fast3(fast_args a, const uint8_t *__restrict__ ktab_g, const uint8_t *__restrict__ btab_g)
{
    extern __shared__ uint4 fsm[];
    uint32_t *hist = reinterpret_cast<uint32_t *>(fsm);
    uint16_t *ktab = reinterpret_cast<uint16_t *>(hist + FAST_HIST_WORDS);
    const int lane = threadIdx.x, warp = threadIdx.y, tid = warp * 32 + lane;
    for (int i = tid; i < FAST_HIST_WORDS / 4; i += 32 * FAST_WARPS) fsm[i] = make_uint4(0, 0, 0, 0);
    if (KIND == LBP_KIND_TLBAP)
        for (int i = tid; i < 256; i += 32 * FAST_WARPS) ktab[i] = (uint16_t)(0x6400u | ktab_g[i]);
    __syncthreads();
    const uint32_t hbase = (uint32_t)__cvta_generic_to_shared(hist) + (uint32_t)(lane * 4);
    const long long p0 = a.pairs * blockIdx.x / gridDim.x, p1 = a.pairs * (blockIdx.x + 1) / gridDim.x;
    const int tasks = a.bands * ((a.mw + PROD_COLS - 1) / PROD_COLS);
    int cur = -1;
    for (long long p = p0; p < p1; p++) {
        const int img = (int)(p / a.pairs_img);
        const int t = (int)(p - (long long)img * a.pairs_img) * FAST_WARPS + warp;
        if (img != cur) {
            if (cur >= 0) fast_flush(a, hist, cur, tid, btab_g);
            cur = img;
        }
        if (t < tasks) fast_task<KIND>(a, img, t / a.bands, t % a.bands, lane, hbase, ktab);
    }
    if (cur >= 0) fast_flush(a, hist, cur, tid, btab_g);
}

/* ------------------------------------------------------------- launches */

extern "C" const char *lab_name(int v)
{
    static const char *const names[LAB_NVARIANTS] = {
        "paper global 16x16", "paper global 32x32", "paper shared 16x16", "paper shared 32x32", "k_fast3",
        "k_fast4 other rows in flight", "k_prod3", "k_circ (P=8, R=1)", "k_circ8 band"};
    return v >= 0 && v < LAB_NVARIANTS ? names[v] : "?";
}

static bool paper(int v) { return v <= LAB_SHARED32; }

/* LAB_ROWS_ALT's TLBAP instance takes the threshold as an fp16 fma only. */
static bool tlbap_fma(const patina_gpu_lbp_conf_t *c)
{
    uint32_t t, k;
    return tlbap_fma_consts(c->ktab, c->th, &t, &k) != 0;
}

extern "C" int lab_applies(int v, const patina_gpu_lbp_conf_t *c, int w, int h)
{
    int mw, mh;
    lbp_map_wh(c, w, h, &mw, &mh);
    if (lbp_conf_check(c)) return 0;
    switch (v) {
    case LAB_GLOBAL16:
    case LAB_GLOBAL32:
    case LAB_SHARED16:
    case LAB_SHARED32: return c->kind != LBP_KIND_CIRCULAR && w >= 3 && h >= 3;
    case LAB_FAST3: return c->kind != LBP_KIND_CIRCULAR && !lbp_cells(c);
    case LAB_ROWS_ALT: return c->kind != LBP_KIND_CIRCULAR && !lbp_cells(c) && (c->kind != LBP_KIND_TLBAP || tlbap_fma(c));
    case LAB_PROD3: return c->kind != LBP_KIND_CIRCULAR && prod_fits(mh);
    case LAB_CIRC: return circ8_ok(c) && circ_fits(h);
    case LAB_C8BAND: return circ8_ok(c);
    }
    return 0;
}

extern "C" int lab_counts(int v) { return !paper(v); }

typedef void (*fast_kernel)(fast_args, const uint8_t *, const uint8_t *);

static cudaError_t launch_fast(fast_kernel k, const fast_shape &sh, const patina_gpu_lbp_conf_t *c,
                               const lbp_dev_tables &t, const uint8_t *in, int pitch, int w, int h, int n,
                               void *codes, int opitch, uint32_t *counts, cudaStream_t s)
{
    int dev = 0, sms = 0;
    cudaError_t e;
    fast_args a;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
    if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return e;
    const unsigned nb = fast_plan(a, c, t, sms, sh, in, pitch, w, h, n, codes, opitch, counts);
    const size_t smem = fast_smem(sh);
    if ((e = cudaFuncSetAttribute((const void *)k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)) !=
        cudaSuccess)
        return e;
    k<<<nb, dim3(32, sh.nw), smem, s>>>(a, t.ktab, t.btab);
    return cudaGetLastError();
}

template <bool VAR, bool CODES>
static void c8_launch(dim3 grid, size_t smem, cudaStream_t s, const circ_args &a)
{
    if (a.copies == 32) k_circ8<VAR, CODES, 32><<<grid, C8_BX, smem, s>>>(a);
    else if (a.copies == 1) k_circ8<VAR, CODES, 1><<<grid, C8_BX, smem, s>>>(a);
    else k_circ8<VAR, CODES, 0><<<grid, C8_BX, smem, s>>>(a);
}

/* One launch of variant v on n images in din (the paper's: dense (h, w);
 * the others: rows `pitch` bytes apart). */
static cudaError_t lab_launch(int v, const patina_gpu_lbp_conf_t *c, const lbp_dev_tables &t, int band,
                              const uint8_t *din, int pitch, int w, int h, int n, void *codes, int opitch,
                              uint32_t *counts, cudaStream_t s)
{
    const bool cw = codes != NULL;
    {
        int mw, mh;
        lbp_map_wh(c, w, h, &mw, &mh);
        if (mw == 0 || mh == 0 || n == 0) return cudaSuccess; /* no code: nothing to launch, as the library */
    }
    if (paper(v)) {
        const int B = v == LAB_GLOBAL16 || v == LAB_SHARED16 ? 16 : 32;
        const dim3 block(B, B);
        uint8_t *out = (uint8_t *)codes;
        const double th = c->th;
        if (v == LAB_GLOBAL16 || v == LAB_GLOBAL32) {
            const dim3 grid((unsigned)((w + B - 1) / B), (unsigned)((h + B - 1) / B), (unsigned)n);
            switch (c->kind) {
            case LBP_KIND_LBP8: k_global<LBP_KIND_LBP8><<<grid, block, 0, s>>>(din, out, w, h, th); break;
            case LBP_KIND_TLBAP: k_global<LBP_KIND_TLBAP><<<grid, block, 0, s>>>(din, out, w, h, th); break;
            default: k_global<LBP_KIND_LANADP><<<grid, block, 0, s>>>(din, out, w, h, th); break;
            }
            return cudaGetLastError();
        }
        const dim3 grid((unsigned)((w - 2 + B - 1) / B), (unsigned)((h - 2 + B - 1) / B), (unsigned)n);
#define LAB_SHARED(BB)                                                                                       \
    switch (c->kind) {                                                                                       \
    case LBP_KIND_LBP8: k_shared<LBP_KIND_LBP8, BB><<<grid, block, 0, s>>>(din, out, w, h, th); break;       \
    case LBP_KIND_TLBAP: k_shared<LBP_KIND_TLBAP, BB><<<grid, block, 0, s>>>(din, out, w, h, th); break;     \
    default: k_shared<LBP_KIND_LANADP, BB><<<grid, block, 0, s>>>(din, out, w, h, th); break;                \
    }
        if (B == 16) {
            LAB_SHARED(16)
        } else {
            LAB_SHARED(32)
        }
#undef LAB_SHARED
        return cudaGetLastError();
    }
    switch (v) {
    case LAB_FAST3: {
        const fast_shape sh = {FAST_WARPS, FAST_BPS(c->kind), false, false};
        switch (c->kind) {
        case LBP_KIND_LBP8: return launch_fast(k_fast3<LBP_KIND_LBP8>, sh, c, t, din, pitch, w, h, n, codes, opitch, counts, s);
        case LBP_KIND_TLBAP: return launch_fast(k_fast3<LBP_KIND_TLBAP>, sh, c, t, din, pitch, w, h, n, codes, opitch, counts, s);
        default: return launch_fast(k_fast3<LBP_KIND_LANADP>, sh, c, t, din, pitch, w, h, n, codes, opitch, counts, s);
        }
    }
    case LAB_ROWS_ALT: {
        fast_shape sh = {FAST_WARPS, 5, false, true};
        fast_kernel k;
        switch (c->kind) {
        case LBP_KIND_LBP8:
            k = cw ? k_fast4<LBP_KIND_LBP8, true, false, 3, 5> : k_fast4<LBP_KIND_LBP8, false, false, 3, 5>;
            break;
        case LBP_KIND_TLBAP:
            k = cw ? k_fast4<LBP_KIND_TLBAP, true, true, 3, 5> : k_fast4<LBP_KIND_TLBAP, false, true, 3, 5>;
            break;
        default:
            sh.bps = 3;
            k = cw ? k_fast4<LBP_KIND_LANADP, true, false, 6, 3> : k_fast4<LBP_KIND_LANADP, false, false, 6, 3>;
            break;
        }
        return launch_fast(k, sh, c, t, din, pitch, w, h, n, codes, opitch, counts, s);
    }
    case LAB_PROD3: return prod_launch(c, t, din, pitch, w, h, n, codes, opitch, counts, s);
    case LAB_CIRC: {
        circ_args a;
        circ_plan(a, c, t, din, pitch, w, h, codes, counts);
        const dim3 grid = circ_grid(w, h, n), block(CIRC_BX, CIRC_BY);
        const size_t smem = circ_smem(a);
        if (c->method == LBP_M_VAR) k_circ<true, true><<<grid, block, smem, s>>>(a);
        else k_circ<true, false><<<grid, block, smem, s>>>(a);
        return cudaGetLastError();
    }
    case LAB_C8BAND: {
        circ_args a;
        circ_plan(a, c, t, din, pitch, w, h, codes, counts);
        a.band = band < 1 ? C8_BAND : band;
        if ((h + a.band - 1) / a.band > 65535) a.band = (h + 65534) / 65535; /* the grid's limit */
        const dim3 grid = circ8_grid(a, n);
        const size_t smem = circ_smem(a);
        if (c->method == LBP_M_VAR) cw ? c8_launch<true, true>(grid, smem, s, a) : c8_launch<true, false>(grid, smem, s, a);
        else cw ? c8_launch<false, true>(grid, smem, s, a) : c8_launch<false, false>(grid, smem, s, a);
        return cudaGetLastError();
    }
    }
    return cudaErrorInvalidValue;
}

static patina_status lab_fail(cudaError_t e, const char *what, int line)
{
    (void)cudaGetLastError();
    return patina__fail(PATINA_E_GPU, "lab lbp: %s: %s (variants.cu:%d)", what, cudaGetErrorString(e), line);
}

#define LCU(call)                                                                                            \
    do {                                                                                                     \
        cudaError_t lcu_e_ = (call);                                                                         \
        if (lcu_e_ != cudaSuccess) {                                                                         \
            st = lab_fail(lcu_e_, #call, __LINE__);                                                          \
            goto done;                                                                                       \
        }                                                                                                    \
    } while (0)

extern "C" patina_status lab_run(int v, const patina_gpu_lbp_conf_t *c, int band, const uint8_t *grey, int w,
                                 int h, int n, void *codes, uint32_t *counts, int reps, double *ms,
                                 double *ms_stream)
{
    patina_status st = PATINA_OK;
    cudaStream_t s = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    uint8_t *din = NULL, *dout = NULL, *dtab = NULL, *htab = NULL;
    uint32_t *dcounts = NULL;
    double *times = NULL;
    lbp_dev_tables t;
    int mw, mh, opitch = 0;
    const bool lab_paper = paper(v), m3 = c->kind != LBP_KIND_CIRCULAR;
    const int pitch = lab_paper ? w : lbp_pitch16(w);
    size_t in_bytes, out_bytes = 0, tab_bytes;
    const size_t count_bytes = (size_t)n * c->dim * sizeof(uint32_t);
    if (ms) *ms = 0.0;
    if (ms_stream) *ms_stream = 0.0;
    if (v < 0 || v >= LAB_NVARIANTS || w < 0 || h < 0 || n < 1 || n > 65535 || !grey || !lab_applies(v, c, w, h))
        return patina__fail(PATINA_E_INVALID, "lab lbp: %s does not apply to these arguments", lab_name(v));
    if (reps < 1) reps = 1;
    if (lab_paper) counts = NULL;
    lbp_map_wh(c, w, h, &mw, &mh);
    in_bytes = (size_t)n * (size_t)h * (size_t)pitch + LBP_GREY_SLACK + 2 * (size_t)pitch;
    if (lab_paper) {
        out_bytes = (size_t)n * (size_t)mw * (size_t)mh;
    } else if (m3) {
        opitch = lbp_pitch16(mw);
        out_bytes = (size_t)n * (size_t)mh * (size_t)opitch;
    } else {
        out_bytes = (size_t)n * (size_t)mw * (size_t)mh * (size_t)c->code_bytes;
    }
    if (!lab_paper && !codes) out_bytes = 0;
    times = (double *)malloc(sizeof(double) * (size_t)reps);
    htab = (uint8_t *)malloc(LBP_TAB_BYTES);
    if (!times || !htab) {
        st = patina__fail(PATINA_E_NOMEM, "lab lbp: out of memory");
        goto done;
    }
    LCU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    LCU(cudaEventCreate(&e0));
    LCU(cudaEventCreate(&e1));
    LCU(cudaMalloc((void **)&dtab, LBP_TAB_BYTES));
    tab_bytes = lbp_tables_host(htab, &t, dtab, c);
    if (tab_bytes) LCU(cudaMemcpy(dtab, htab, tab_bytes, cudaMemcpyHostToDevice));
    LCU(cudaMalloc((void **)&din, in_bytes));
    LCU(cudaMemset(din, 0, in_bytes));
    if (out_bytes) LCU(cudaMalloc((void **)&dout, out_bytes));
    if (!lab_paper) LCU(cudaMalloc((void **)&dcounts, count_bytes + 4));
    if ((size_t)w * (size_t)h > 0)
        LCU(cudaMemcpy2D(din, (size_t)pitch, grey, (size_t)w, (size_t)w, (size_t)h * (size_t)n,
                         cudaMemcpyHostToDevice));
    for (int r = -1; r < reps; r++) {
        float f = 0.0f;
        if (dcounts) LCU(cudaMemsetAsync(dcounts, 0, count_bytes, s));
        LCU(cudaEventRecord(e0, s));
        LCU(lab_launch(v, c, t, band, din, pitch, w, h, n, dout, opitch, dcounts, s));
        LCU(cudaEventRecord(e1, s));
        LCU(cudaEventSynchronize(e1));
        LCU(cudaEventElapsedTime(&f, e0, e1));
        if (r >= 0) times[r] = (double)f;
    }
    if (codes && dout && mw > 0 && mh > 0) {
        if (!lab_paper && m3)
            LCU(cudaMemcpy2D(codes, (size_t)mw, dout, (size_t)opitch, (size_t)mw, (size_t)mh * (size_t)n,
                             cudaMemcpyDeviceToHost));
        else
            LCU(cudaMemcpy(codes, dout, out_bytes, cudaMemcpyDeviceToHost));
    }
    if (counts && dcounts) LCU(cudaMemcpy(counts, dcounts, count_bytes, cudaMemcpyDeviceToHost));
    qsort(times, (size_t)reps, sizeof *times, bench_cmp_double);
    if (ms) *ms = times[reps / 2];
    if (ms_stream && mw > 0 && mh > 0) {
        /* the GPU busy for 2 ms while the host queues e0, the launches and e1 */
        float f = 0.0f;
        LCU(busy_launch(2000000, s));
        LCU(cudaEventRecord(e0, s));
        for (int r = 0; r < reps; r++) LCU(lab_launch(v, c, t, band, din, pitch, w, h, n, dout, opitch, dcounts, s));
        LCU(cudaEventRecord(e1, s));
        LCU(cudaEventSynchronize(e1));
        LCU(cudaEventElapsedTime(&f, e0, e1));
        *ms_stream = (double)f / reps;
    }
done:
    if (s) cudaStreamSynchronize(s);
    cudaFree(din);
    cudaFree(dout);
    cudaFree(dcounts);
    cudaFree(dtab);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (s) cudaStreamDestroy(s);
    (void)cudaGetLastError();
    free(times);
    free(htab);
    return st;
}
