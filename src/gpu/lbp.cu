/* Local texture patterns on the GPU (docs/lbp.md): the same codes as the C
 * reference (src/features/lbp.c) and the fast CPU path, byte for byte.
 *
 * Lab kernels (the paper, kept for bench/lbp.c), 3x3 kinds only, dense
 * (h, w) input and dense (h-2, w-2) output, one thread per input pixel:
 *   k_global  Algorithms 1 and 2 reading global memory (16x16 or 32x32 blocks)
 *   k_shared  the same after Algorithm 3 stages a (B+2)^2 tile in shared
 *             memory (B = 16 or 32)
 * TLBAP there is literal: th2 = th * max in binary64, neighbour > th2.
 *
 * Production kernel, 3x3 kinds (k_prod3): batches of equal-sized images per
 * launch (blockIdx.z), pitched input (rows 16-byte aligned). A warp covers
 * 512 output columns, 16 per lane: each lane loads its 16 input bytes of a
 * row with one 16-byte load, gets the next two bytes from its neighbour lane
 * by a shuffle, and slides a 3-row window down RW rows in registers, so
 * every input byte is read once per warp. Codes are computed 4 pixels per
 * 32-bit word with byte-SIMD intrinsics (__vcmpgeu4, __vmaxu4, __vhaddu4,
 * __vavgu4), with the same integer forms as the fast CPU path (TLBAP:
 * n > floor(fl(th*max)) from a 256-entry table; LANADP: floor and ceiling
 * averages against v). Histograms are fused: each warp has its own copy in
 * shared memory, codes are run-length merged per lane before an atomic add,
 * and the block adds its copies to the image's counts in global memory
 * (integer atomics: exact in any order). The code map is written only when
 * asked for.
 *
 * Production kernel, circular LBP (k_circ): one pixel per thread, the
 * reference's binary64 bilinear arithmetic (lbp_bilinear in lbp_core.h;
 * built with --fmad=false, so nothing is contracted), fused histogram.
 *
 * Memory here is allocated per call with the stream-ordered allocator
 * (cudaMallocAsync: the pool keeps it between calls); the calls use the
 * current device, which patina_gpu_open selects for the calling thread. */
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "features/lbp.h"
#include "gpu/gpu.h"

#define FULL 0xffffffffu
#define PROD_TY 4        /* warps per block of k_prod3 */
#define PROD_RW 16       /* output rows per warp */
#define PROD_COLS 512    /* output columns per warp */

static patina_status cuda_fail(cudaError_t e, const char *what, int line)
{
    return patina__fail(e == cudaErrorMemoryAllocation ? PATINA_E_NOMEM : PATINA_E_GPU,
                        "gpu: lbp: %s: %s (%s, lbp.cu:%d)", what, cudaGetErrorString(e),
                        cudaGetErrorName(e), line);
}

#define CU(call)                                                                               \
    do {                                                                                       \
        cudaError_t cu_e_ = (call);                                                            \
        if (cu_e_ != cudaSuccess) {                                                            \
            st_ = cuda_fail(cu_e_, #call, __LINE__);                                           \
            goto done;                                                                         \
        }                                                                                      \
    } while (0)

/* ------------------------------------------------------------ lab kernels */

__constant__ int c_power[3][3] = {{8, 4, 2}, {16, 0, 1}, {32, 64, 128}};

/* One 3x3 window, literally (Algorithms 1 and 2): `at(i, j)` reads the pixel
 * i rows and j columns from the centre. */
template <int KIND, typename At>
__device__ __forceinline__ uint8_t window_literal(At at, double th)
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
__global__ void k_global(const uint8_t *__restrict__ img, uint8_t *__restrict__ out, int w, int h,
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
__global__ void k_shared(const uint8_t *__restrict__ img, uint8_t *__restrict__ out, int w, int h,
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

/* ------------------------------------------------------- production, 3x3 */

/* Parameters of one production launch (by value). */
struct prod_args {
    const uint8_t *in;      /* (n, h, pitch) */
    size_t in_img;          /* bytes per image: h * pitch */
    int pitch, w, h, mw, mh;
    uint8_t *codes;         /* (n, mh, opitch), or NULL */
    size_t out_img;         /* bytes per image: mh * opitch */
    int opitch;
    uint32_t *counts;       /* (n, dim), or NULL */
    int dim, nbins, grid_rows, grid_cols;
    int copies;             /* shared histogram copies (0: global atomics) */
};

/* bytes k..k+3 of the 8 bytes {hi:lo} */
__device__ __forceinline__ uint32_t shift1(uint32_t lo, uint32_t hi) { return __byte_perm(lo, hi, 0x4321); }
__device__ __forceinline__ uint32_t shift2(uint32_t lo, uint32_t hi) { return __byte_perm(lo, hi, 0x5432); }

struct rowv {
    uint32_t v[5]; /* 16 bytes of this lane + the first 4 of the next lane */
};

__device__ __forceinline__ void load_row(rowv &r, const uint8_t *row, int x0, int pitch, int lane)
{
    uint4 q = make_uint4(0, 0, 0, 0);
    if (x0 < pitch) q = *reinterpret_cast<const uint4 *>(row + x0);
    r.v[0] = q.x;
    r.v[1] = q.y;
    r.v[2] = q.z;
    r.v[3] = q.w;
    uint32_t next = __shfl_down_sync(FULL, q.x, 1);
    if (lane == 31) next = x0 + 16 < pitch ? *reinterpret_cast<const uint32_t *>(row + x0 + 16) : 0u;
    r.v[4] = next;
}

/* Four codes (one per byte) of output word j from rows a, m, b. */
template <int KIND>
__device__ __forceinline__ uint32_t word_codes(const rowv &a, const rowv &m, const rowv &b, int j,
                                               const uint8_t *ktab)
{
    const uint32_t aL = a.v[j], aC = shift1(a.v[j], a.v[j + 1]), aR = shift2(a.v[j], a.v[j + 1]);
    const uint32_t mL = m.v[j], c = shift1(m.v[j], m.v[j + 1]), mR = shift2(m.v[j], m.v[j + 1]);
    const uint32_t bL = b.v[j], bC = shift1(b.v[j], b.v[j + 1]), bR = shift2(b.v[j], b.v[j + 1]);
    const uint32_t n[8] = {mR, aR, aC, aL, mL, bL, bC, bR};
    uint32_t code = 0;
    if (KIND == LBP_KIND_LBP8) {
#pragma unroll
        for (int k = 0; k < 8; k++) code |= __vcmpgeu4(n[k], c) & (0x01010101u << k);
    } else if (KIND == LBP_KIND_TLBAP) {
        uint32_t mx = c;
#pragma unroll
        for (int k = 0; k < 8; k++) mx = __vmaxu4(mx, n[k]);
        const uint32_t kw = (uint32_t)ktab[mx & 0xff] | (uint32_t)ktab[(mx >> 8) & 0xff] << 8 |
                            (uint32_t)ktab[(mx >> 16) & 0xff] << 16 | (uint32_t)ktab[mx >> 24] << 24;
        const uint32_t thr = __vmaxu4(c, kw); /* n > c and n > k  <=>  n > max(c, k) */
#pragma unroll
        for (int k = 0; k < 8; k++) code |= __vcmpgtu4(n[k], thr) & (0x01010101u << k);
    } else {
        uint32_t lo[8], hi[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            lo[k] = __vhaddu4(n[k], n[(k + 1) & 7]); /* floor((a+b)/2) */
            hi[k] = __vavgu4(n[k], n[(k + 1) & 7]);  /* ceil((a+b)/2) */
        }
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int j1 = (k + 1) & 7, j2 = (k + 6) & 7;
            const uint32_t ge = __vcmpgeu4(lo[j1], n[k]) & __vcmpgeu4(lo[j2], n[k]);
            const uint32_t le = __vcmpleu4(hi[j1], n[k]) & __vcmpleu4(hi[j2], n[k]);
            code |= (ge | le) & (0x01010101u << k);
        }
    }
    return code;
}

/* num / den for 0 <= num, 0 < den: a 32-bit division when num fits (the
 * usual case; a 64-bit one is several times longer) */
__device__ __forceinline__ int div_nn(long long num, int den)
{
    return (unsigned long long)num >> 32 ? (int)(num / den) : (int)((unsigned)num / (unsigned)den);
}

/* the cell (column or row) of index i of a side of len cut in parts cells */
__device__ __forceinline__ int cell_of(int i, int parts, int len)
{
    return div_nn(((long long)i + 1) * parts - 1, len);
}

/* Flushes a run of `run` equal bins `idx` into the histogram. */
__device__ __forceinline__ void flush(uint32_t *h, uint32_t *g, int idx, uint32_t run)
{
    if (run == 0) return;
    if (h) atomicAdd(&h[idx], run);
    else atomicAdd(&g[idx], run);
}

template <int KIND>
__global__ void __launch_bounds__(32 * PROD_TY) k_prod3(prod_args a, const uint8_t *__restrict__ ktab_g,
                                                        const uint8_t *__restrict__ btab_g)
{
    extern __shared__ uint32_t smem[];
    __shared__ uint8_t ktab[256];
    __shared__ uint8_t btab[256];
    const int lane = threadIdx.x, warp = threadIdx.y, tid = warp * 32 + lane;
    const int nthreads = 32 * PROD_TY;
    const int img = blockIdx.z;
    const int x0 = blockIdx.x * PROD_COLS + lane * 16;
    const int y0 = (blockIdx.y * PROD_TY + warp) * PROD_RW;
    const uint8_t *in = a.in + (size_t)img * a.in_img;
    uint32_t *gcount = a.counts ? a.counts + (size_t)img * (size_t)a.dim : NULL;
    uint32_t *hist = NULL;

    for (int i = tid; i < 256; i += nthreads) {
        if (KIND == LBP_KIND_TLBAP) ktab[i] = ktab_g[i];
        btab[i] = btab_g[i];
    }
    if (a.counts && a.copies) {
        for (int i = tid; i < a.copies * a.dim; i += nthreads) smem[i] = 0;
        hist = smem + (size_t)(a.copies == PROD_TY ? warp : 0) * (size_t)a.dim;
    }
    __syncthreads();

    if (y0 < a.mh) {
        const int y1 = min(y0 + PROD_RW, a.mh);
        rowv r0, r1, r2;
        load_row(r0, in + (size_t)y0 * (size_t)a.pitch, x0, a.pitch, lane);
        load_row(r1, in + (size_t)(y0 + 1) * (size_t)a.pitch, x0, a.pitch, lane);
        int run_idx = 0;
        uint32_t run = 0;
        for (int y = y0; y < y1; y++) {
            load_row(r2, in + (size_t)(y + 2) * (size_t)a.pitch, x0, a.pitch, lane);
            uint32_t cw[4];
#pragma unroll
            for (int j = 0; j < 4; j++) cw[j] = word_codes<KIND>(r0, r1, r2, j, ktab);
            if (a.codes && x0 < a.opitch)
                *reinterpret_cast<uint4 *>(a.codes + (size_t)img * a.out_img + (size_t)y * (size_t)a.opitch + x0) =
                    make_uint4(cw[0], cw[1], cw[2], cw[3]);
            if (a.counts && x0 < a.mw) {
                const int nx = min(16, a.mw - x0);
                const int rowcell = cell_of(y, a.grid_rows, a.mh) * a.grid_cols;
                if (a.grid_cols == 1) {
                    const int base = rowcell * a.nbins;
                    const uint32_t b0 = cw[0] & 0xffu;
                    if (nx == 16 && cw[0] == b0 * 0x01010101u && cw[1] == cw[0] && cw[2] == cw[0] &&
                        cw[3] == cw[0]) {
                        /* 16 equal codes (flat or regular areas): one run */
                        const int idx = base + btab[b0];
                        if (idx == run_idx) {
                            run += 16;
                        } else {
                            flush(hist, gcount, run_idx, run);
                            run_idx = idx;
                            run = 16;
                        }
                    } else {
#pragma unroll
                        for (int j = 0; j < 4; j++)
#pragma unroll
                            for (int b = 0; b < 4; b++) {
                                if (4 * j + b >= nx) break;
                                const int idx = base + btab[(cw[j] >> (8 * b)) & 0xffu];
                                if (idx == run_idx) {
                                    run++;
                                } else {
                                    flush(hist, gcount, run_idx, run);
                                    run_idx = idx;
                                    run = 1;
                                }
                            }
                    }
                } else {
                    int cc = x0 < a.mw ? cell_of(x0, a.grid_cols, a.mw) : 0;
                    /* cell i covers [floor(i*mw/C), floor((i+1)*mw/C)) */
                    int next = cc + 1 < a.grid_cols ? (int)(((long long)(cc + 1) * a.mw) / a.grid_cols) : 0x7fffffff;
#pragma unroll
                    for (int j = 0; j < 4; j++)
#pragma unroll
                        for (int b = 0; b < 4; b++) {
                            const int q = 4 * j + b;
                            if (q >= nx) break;
                            while (x0 + q >= next) {
                                cc++;
                                next = cc + 1 < a.grid_cols ? (int)(((long long)(cc + 1) * a.mw) / a.grid_cols) : 0x7fffffff;
                            }
                            const int idx = (rowcell + cc) * a.nbins + btab[(cw[j] >> (8 * b)) & 0xffu];
                            if (idx == run_idx) {
                                run++;
                            } else {
                                flush(hist, gcount, run_idx, run);
                                run_idx = idx;
                                run = 1;
                            }
                        }
                }
            }
            r0 = r1;
            r1 = r2;
        }
        if (a.counts) flush(hist, gcount, run_idx, run);
    }
    if (a.counts && a.copies) {
        __syncthreads();
        for (int i = tid; i < a.dim; i += nthreads) {
            uint32_t s = 0;
            for (int c = 0; c < a.copies; c++) s += smem[(size_t)c * (size_t)a.dim + (size_t)i];
            if (s) atomicAdd(&gcount[i], s);
        }
    }
}

/* ------------------------------------------- production, 3x3, histograms */

/* k_fast3: the 3x3 kinds when histograms over the whole image are asked for
 * (grid 1x1; the code map too when asked; k_prod3 does the rest). Same
 * tiling as k_prod3 (a warp: 512 output columns, 16 per lane, a window
 * sliding down its rows), with three changes, measured on an H100 (256
 * images of 1024^2, lbp8 histograms: k_prod3 0.527 ms; fp16 + per-lane
 * histograms + persistent grid at 6 warps per SM 0.381 ms; 12 warps 0.246
 * ms; 16 warps 0.190 ms -- the kernel is bound by issue and latency, not by
 * DRAM, so occupancy and instruction count are what move it):
 *
 * - Arithmetic on the fp16x2 pipe. A byte b becomes the half 1024 + b
 *   (0x6400 | b, one byte permute per two pixels), so every comparison of
 *   the three kinds is exact small-integer fp16 arithmetic: saturating
 *   sub/mul give the 0/1 bits (n >= c: sat(n - (c - 1)); n > t: sat(n - t);
 *   LANADP's "both sums on one side of 2v": (s1 - 2v)(s2 - 2v) >= 0, see
 *   fast_pair), and a fused multiply-add by 2^(k-24) (an fp16 subnormal
 *   whose bits are 1 << k; f16 arithmetic keeps subnormals) builds the code
 *   directly as the integer bits of each half. The byte-SIMD compares of
 *   k_prod3 (__vcmpgeu4 ...) are emulated on sm_90 with several integer
 *   instructions each, and the integer pipe has half the fp16x2 rate.
 * - Per-lane histograms: counter (code, lane) at byte offset code * 128 +
 *   lane * 4 of a 32 KB block histogram shared by the block's warps, so the
 *   32 atomic adds of one instruction always hit 32 different banks (no
 *   conflicts, no run-length merging), and each address is one or two
 *   instructions from the code bits. The block adds its 32 columns per code
 *   (code -> bin through the mapping's table) to the image's counts when it
 *   moves on to the next image. Lanes past the map's width count their last
 *   columns and take them back out.
 * - A persistent grid: 4 blocks of 4 warps per multiprocessor (3 for LANADP,
 *   which needs more registers) walk the (image, strip, band) tasks in
 *   order; the band height (at most 32 rows) is chosen so that a single
 *   image still gives every warp a task; each lane keeps six input rows in
 *   flight ahead of the window. */

#define FAST_WARPS 4
#define FAST_HIST_WORDS (256 * 32) /* 32 counters per code, one per lane */
/* blocks per multiprocessor (32 KB of histogram each): as many as the
 * registers allow */
#define FAST_BPS(kind) ((kind) == LBP_KIND_LANADP ? 3 : 4)
/* k_fast4's wide layout (whole-image histograms): one block of WIDE_WARPS
 * warps per multiprocessor, counter (code, lane) at byte code * 256 + lane *
 * 4 of a histogram whose shared address is a multiple of 65536, so that a
 * pixel's counter address is one byte permute: the code byte of its acc
 * half as byte 1, the lane's byte 0 and the histogram's bytes 2, 3 from one
 * register (f4_alo, f4_ahi). The dynamic shared memory holds the histogram
 * at the first such address (up to 64 KB of padding before it) and the
 * TLBAP table after it. */
#define WIDE_WARPS 16
#define WIDE_SMEM (2 * 65536 + 512)

struct fast_args {
    const uint8_t *in;
    size_t in_img;
    int pitch, mw, mh;
    uint8_t *codes;
    size_t out_img;
    int opitch;
    uint32_t *counts;
    int dim;
    int rb;                 /* output rows per warp task */
    int bands;              /* tasks per strip */
    long long pairs_img;    /* task groups per image (tasks padded to a whole group) */
    long long pairs;        /* task groups: n * pairs_img, or (cross) ceil(tasks / warps per block) */
    /* k_fast4's wide layout: slots per image (>= WIDE_WARPS; tasks_img of
     * them are tasks), n images; groups of WIDE_WARPS slots run on into the
     * next image (at most two images, counted in the histogram's halves by
     * image parity) */
    int slots, tasks_img, n;
    uint32_t tq_t, tq_c;    /* TLBAP, k_fast4: 1024 + k(m) = fma(1024 + m, t, c) in fp16x2 (tq_t = 0: table) */
    /* k_fast4 with a grid of cells (grid = 1): tasks never cross a cell row
     * (bands per cell row, a multiple of FAST_WARPS), every cell >= 16
     * columns wide; groups = strips * grid_rows (block histogram epochs) */
    int grid, grid_rows, grid_cols, nbins, groups;
};

__device__ __forceinline__ uint32_t hsub_sat(uint32_t a, uint32_t b)
{
    uint32_t d;
    asm("sub.rn.sat.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ uint32_t hsub(uint32_t a, uint32_t b)
{
    uint32_t d;
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ uint32_t hneg(uint32_t a)
{
    uint32_t d;
    asm("neg.f16x2 %0, %1;" : "=r"(d) : "r"(a));
    return d;
}
__device__ __forceinline__ uint32_t hmul_sat(uint32_t a, uint32_t b)
{
    uint32_t d;
    asm("mul.rn.sat.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
__device__ __forceinline__ uint32_t hfma(uint32_t a, uint32_t b, uint32_t c)
{
    uint32_t d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ uint32_t hmax(uint32_t a, uint32_t b)
{
    uint32_t d;
    asm("max.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

#define H2_ONE 0x3c003c00u   /* 1.0 */
#define H2_TWO 0x40004000u   /* 2.0 */
#define H2_W(k) (0x00010001u << (k))                  /* 2^(k-24): bits 1 << k */
#define H2_NW(k) (0x80008000u | (0x00010001u << (k))) /* -2^(k-24) */

struct rawrow {
    uint4 q;
    uint32_t ex; /* lane 31: the 4 bytes after its 16 */
};

/* One input row: 9 "even" pairs E[i] = (b[2i], b[2i+1]) and 8 "odd" pairs
 * O[i] = (b[2i+1], b[2i+2]) as biased halves (1024 + b). */
struct hrow {
    uint32_t e[9], o[8];
};

__device__ __forceinline__ void fast_load(rawrow &r, const uint8_t *row, bool okx, bool okex)
{
    r.q = make_uint4(0, 0, 0, 0);
    r.ex = 0;
    if (okx) r.q = __ldg(reinterpret_cast<const uint4 *>(row));
    if (okex) r.ex = __ldg(reinterpret_cast<const uint32_t *>(row + 16));
}

/* 16 bytes q and the next 4 (v4) as biased fp16 pairs (1024 + b): 9 "even"
 * pairs e[i] = (b[2i], b[2i+1]) and 8 "odd" pairs o[i] = (b[2i+1], b[2i+2]). */
__device__ __forceinline__ void conv_pairs(uint32_t e[9], uint32_t o[8], const uint4 &q, uint32_t v4)
{
    const uint32_t K = 0x64646464u;
    e[0] = __byte_perm(q.x, K, 0x4140);
    e[1] = __byte_perm(q.x, K, 0x4342);
    e[2] = __byte_perm(q.y, K, 0x4140);
    e[3] = __byte_perm(q.y, K, 0x4342);
    e[4] = __byte_perm(q.z, K, 0x4140);
    e[5] = __byte_perm(q.z, K, 0x4342);
    e[6] = __byte_perm(q.w, K, 0x4140);
    e[7] = __byte_perm(q.w, K, 0x4342);
    e[8] = __byte_perm(v4, K, 0x4140);
#pragma unroll
    for (int i = 0; i < 8; i++) o[i] = __byte_perm(e[i], e[i + 1], 0x5432);
}

__device__ __forceinline__ void fast_conv(hrow &h, const rawrow &r, int lane)
{
    uint32_t v4 = __shfl_down_sync(FULL, r.q.x, 1);
    if (lane == 31) v4 = r.ex;
    conv_pairs(h.e, h.o, r.q, v4);
}

/* Codes of output pair i (columns 2i, 2i+1 of the lane) as the bits of each
 * half, from rows a (above), m, b (below). */
template <int KIND>
__device__ __forceinline__ uint32_t fast_pair(const hrow &a, const hrow &m, const hrow &b, int i,
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

__device__ __forceinline__ void fast_red(uint32_t addr, uint32_t v)
{
    asm volatile("red.shared.add.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

/* One output row of a lane: codes (when asked), histogram counts. */
template <int KIND>
__device__ __forceinline__ void fast_row(const fast_args &a, const hrow &ra, const hrow &rm, const hrow &rb,
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
__device__ __forceinline__ void fast_task(const fast_args &a, int img, int strip, int band, int lane,
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

/* Adds the block's histogram to image img's counts and clears it: NW warps
 * per block, code c's 32 counters at hist + c * STRIDE words. */
template <int NW = FAST_WARPS, int STRIDE = 32>
__device__ __forceinline__ void fast_flush(const fast_args &a, uint32_t *hist, int img, int tid,
                                           const uint8_t *__restrict__ btab)
{
    __syncthreads();
    uint32_t *g = a.counts + (size_t)img * (size_t)a.dim;
    for (int code = tid; code < 256; code += 32 * NW) {
        uint4 *row = reinterpret_cast<uint4 *>(hist + code * STRIDE);
        uint32_t s = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int kk = (k + tid) & 7; /* rotated: no bank conflicts */
            const uint4 v = row[kk];
            s += v.x + v.y + v.z + v.w;
            row[kk] = make_uint4(0, 0, 0, 0);
        }
        if (s) atomicAdd(&g[btab[code]], s);
    }
    __syncthreads();
}

template <int KIND>
__global__ void __launch_bounds__(32 * FAST_WARPS, FAST_BPS(KIND))
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

/* First row (column) of cell k of n over a map side of m: the smallest y with
 * lbp_cell_row(y) = k. */
__device__ __forceinline__ int cell_start(int k, int n, int m) { return div_nn((long long)k * m + n, n) - 1; }

/* k_fast4's flush: fast_flush for one image; with a grid (key = image *
 * groups + strip * grid_rows + cell row) lane l's counters belong to the cell
 * column of its first column. A cell's lanes are contiguous: segment k of the
 * strip is cell column cc(lane 0) + k (cells are >= 16 columns wide, so every
 * cell of the strip has a lane; `starts` marks each segment's first lane).
 * Thread t takes codes t, t + 128 as fast_flush does (a row's 8 quads of
 * counters from a rotated start, 16-byte loads without bank conflicts), adds
 * each segment's counters and emits one global atomic per non-zero segment
 * sum when it crosses a segment's start. H100, lbp8 grid=4x4: the segmented
 * warp scan it replaces (5 dependent shuffles per code and warp) took about
 * 10% of the kernel's instructions. */
template <bool GRID>
__device__ __forceinline__ void f4_flush(const fast_args &a, uint32_t *hist, int key, int tid,
                                         const uint8_t *__restrict__ btab)
{
    if (!GRID) {
        fast_flush(a, hist, key, tid, btab);
        return;
    }
    __syncthreads();
    const int img = key / a.groups, grp = key - img * a.groups;
    const int strip = grp / a.grid_rows, crow = grp - strip * a.grid_rows;
    const int lane = tid & 31, xs = strip * PROD_COLS;
    const int x = min(xs + lane * 16, a.mw - 1); /* lanes past the map count nothing net */
    const int cc = cell_of(x, a.grid_cols, a.mw);
    const int ccp = __shfl_up_sync(FULL, cc, 1);
    const uint32_t starts = __ballot_sync(FULL, lane == 0 || cc != ccp);
    const int cc0 = __shfl_sync(FULL, cc, 0);
    uint32_t *g = a.counts + (size_t)img * (size_t)a.dim + (size_t)(crow * a.grid_cols + cc0) * (size_t)a.nbins;
    for (int code = tid; code < 256; code += 32 * FAST_WARPS) {
        uint4 *row = reinterpret_cast<uint4 *>(hist + code * 32);
        uint32_t *gb = g + btab[code];
        const int q0 = code & 7;
        int seg = __popc(starts & ((2u << (4 * q0)) - 1u)) - 1; /* segment of lane 4 q0 */
        uint32_t sum = 0;
#define F4_EMIT(next)                                                  \
    do {                                                               \
        if (sum) atomicAdd(gb + (size_t)seg * (size_t)a.nbins, sum);   \
        sum = 0;                                                       \
        seg = (next);                                                  \
    } while (0)
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int q = (q0 + k) & 7;
            const uint4 v = row[q];
            row[q] = make_uint4(0, 0, 0, 0);
            const uint32_t sb = (starts >> (4 * q)) & 15u;
            if (k > 0 && (sb & 1u)) F4_EMIT(q == 0 ? 0 : seg + 1); /* lane 0 starts segment 0 */
            sum += v.x;
            if (sb & 2u) F4_EMIT(seg + 1);
            sum += v.y;
            if (sb & 4u) F4_EMIT(seg + 1);
            sum += v.z;
            if (sb & 8u) F4_EMIT(seg + 1);
            sum += v.w;
        }
        F4_EMIT(0);
#undef F4_EMIT
    }
    __syncthreads();
}

/* k_fast4: k_fast3 with fewer instructions per pixel; it replaces k_fast3 on
 * the whole-image histogram path (PATINA_LBP_KERNEL=fast3 selects the old one
 * for comparisons). Same tiling, per-lane histograms and persistent grid.
 * H100, 256 x 1024^2, histograms: lbp8 1407 -> 1655 GB/s, TLBAP 997 -> 1450,
 * LANADP 816 -> 1040 (same run; SASS of lbp8's row: 12.75 instructions per
 * pixel, was 17.5).
 * - The row loop is unrolled D rows deep (D = 6, or 3) over static rings
 *   (three converted rows, D raw rows in flight): no register moves between
 *   rows. Loads are unconditional (no predicated merges, which made ptxas
 *   copy the ring): the row index is clamped to the task's last input row,
 *   and each lane loads the 4 bytes after its 16 itself (an L1 hit) instead
 *   of a shuffle from its neighbour.
 * - No code-map branch in the histogram-only instance (template CODES);
 *   the take-back of partial lanes behind one warp-uniform test.
 * - Histogram addresses: three instructions per pair of pixels (and, lo;
 *   lea; lea.hi).
 * - Band height: for large batches, the height whose last round of task
 *   groups is fullest (ceil(groups / blocks) * (rows + 3) least).
 * - TLBAP: the window maximum from per-row horizontal maxima (each input row's
 *   max of three computed once, for the three output rows that use it; 3-way
 *   fp16 max), and the threshold k(m) = floor(th * m) as one fp16 fma,
 *   1024 + k(m) = fma(1024 + m, t, c), with t and c found on the host and
 *   checked there for all 256 maxima (the shared-memory table when no pair
 *   exists for th: th = 0.9, 0.5, 0.25, 0.75, 0.8 have one, 0.37, 0.7 not).
 * - LANADP: the differences of adjacent ring neighbours are differences of
 *   vertically or horizontally adjacent pixels, each shared by four windows:
 *   computed once per input row (horizontal, 16 per lane) and once per pair
 *   of rows (vertical, 9 per lane) instead of 8 per pair of output pixels;
 *   P7, R7 of a pair are -R3, -P3 of the next. D = 3 and 4 blocks per SM
 *   (127 registers: 16 warps instead of 12).
 * - The wide layout (WIDE, whole-image histograms; the default where a block
 *   may have 129 KB of shared memory): one block of 16 warps per SM, counter
 *   addresses one PRMT per pixel instead of 1.5 instructions, and groups of
 *   16 tasks that run on into the next image (two histogram halves by image
 *   parity), so no group slot idles at an image's end. H100, 1024 x 1024^2,
 *   histograms, launches back to back: lbp8 1848 -> 1959 GB/s, TLBAP 1538 ->
 *   1604, LANADP 1040 -> 1198; H200 lbp8 2022. */

/* One converted input row of k_fast4: pairs as k_fast3 (e, o); TLBAP also
 * the horizontal max of three hm[i] = max(e[i], o[i], e[i+1]) (the window
 * columns of output pair i); LANADP the horizontal differences he[i] = o[i] -
 * e[i], ho[i] = e[i+1] - o[i] and v[i] = (next row's e[i]) - e[i]. */
template <int KIND>
struct frow {
    uint32_t e[9], o[8];
    uint32_t hm[KIND == LBP_KIND_TLBAP ? 8 : 1];
    uint32_t he[KIND == LBP_KIND_LANADP ? 8 : 1], ho[KIND == LBP_KIND_LANADP ? 8 : 1];
    uint32_t v[KIND == LBP_KIND_LANADP ? 9 : 1];
};


template <int KIND>
__device__ __forceinline__ void f4_conv(frow<KIND> &h, const rawrow &r)
{
    const uint32_t v4 = r.ex; /* the 4 bytes after the lane's 16 (own load: no shuffle) */
    conv_pairs(h.e, h.o, r.q, v4);
    if (KIND == LBP_KIND_TLBAP) {
#pragma unroll
        for (int i = 0; i < 8; i++) h.hm[i] = hmax(hmax(h.e[i], h.o[i]), h.e[i + 1]);
    }
    if (KIND == LBP_KIND_LANADP) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            h.he[i] = hsub(h.o[i], h.e[i]);
            h.ho[i] = hsub(h.e[i + 1], h.o[i]);
        }
    }
}

/* LANADP: v of the row above from this row's e */
template <int KIND>
__device__ __forceinline__ void f4_vert(frow<KIND> &up, const frow<KIND> &down)
{
    if (KIND == LBP_KIND_LANADP) {
#pragma unroll
        for (int i = 0; i < 9; i++) up.v[i] = hsub(down.e[i], up.e[i]);
    }
}

/* Codes of output pair i from rows a, m, b (as fast_pair). */
template <int KIND, bool TF>
__device__ __forceinline__ uint32_t f4_pair(const frow<KIND> &a, const frow<KIND> &m, const frow<KIND> &b, int i,
                                            const uint16_t *kt, uint32_t tq_t, uint32_t tq_c, const uint32_t *P3,
                                            const uint32_t *R3)
{
    uint32_t acc;
    if (KIND == LBP_KIND_LANADP) {
        /* D[j] = n[j+1] - n[j] from the shared differences:
         * D0 = -a.v[i+1], D1 = -a.ho[i], D2 = -a.he[i], D3 = a.v[i],
         * D4 = m.v[i], D5 = b.he[i], D6 = b.ho[i], D7 = -m.v[i+1];
         * P[j] = 2 D[j] + D[j+1], R[j] = D[j] + 2 D[j+1] (see fast_pair) */
        const uint32_t T2 = H2_TWO, M2 = 0xc000c000u; /* 2, -2 */
        uint32_t P[8], R[8];
        P[0] = hfma(a.v[i + 1], M2, hneg(a.ho[i]));
        R[0] = hfma(a.ho[i], M2, hneg(a.v[i + 1]));
        P[1] = hfma(a.ho[i], M2, hneg(a.he[i]));
        R[1] = hfma(a.he[i], M2, hneg(a.ho[i]));
        P[2] = hfma(a.he[i], M2, a.v[i]);
        R[2] = hfma(a.v[i], T2, hneg(a.he[i]));
        P[3] = P3[i];
        R[3] = R3[i];
        P[4] = hfma(m.v[i], T2, b.he[i]);
        R[4] = hfma(b.he[i], T2, m.v[i]);
        P[5] = hfma(b.he[i], T2, b.ho[i]);
        R[5] = hfma(b.ho[i], T2, b.he[i]);
        P[6] = hfma(b.ho[i], T2, hneg(m.v[i + 1]));
        R[6] = hfma(m.v[i + 1], M2, b.ho[i]);
        /* P7 = 2 D7 + D0 = -(a.v[i+1] + 2 m.v[i+1]) = -R3[i+1], R7 = -P3[i+1] */
        P[7] = hneg(R3[i + 1]);
        R[7] = hneg(P3[i + 1]);
        acc = 0x00ff00ffu;
#pragma unroll
        for (int k = 0; k < 8; k++) acc = hfma(hmul_sat(P[k], R[(k + 6) & 7]), H2_NW(k), acc);
        return acc;
    }
    const uint32_t n[8] = {m.e[i + 1], a.e[i + 1], a.o[i], a.e[i], m.e[i], b.e[i], b.o[i], b.e[i + 1]};
    const uint32_t c = m.o[i];
    uint32_t thr;
    if (KIND == LBP_KIND_LBP8) {
        /* n >= c  <=>  not c > n  <=>  sat(c - n) = 0: the code is 255 minus
         * the bits of c > n (no threshold to compute, as LANADP) */
        acc = 0x00ff00ffu;
#pragma unroll
        for (int k = 0; k < 8; k++) acc = hfma(hsub_sat(c, n[k]), H2_NW(k), acc);
        return acc;
    } else {
        const uint32_t mx = hmax(hmax(a.hm[i], m.hm[i]), b.hm[i]);
        uint32_t k;
        if (TF) {
            k = hfma(mx, tq_t, tq_c);
        } else {
            const uint32_t lo = kt[mx & 0xffu], hi = kt[(mx >> 16) & 0xffu];
            k = __byte_perm(lo, hi, 0x5410);
        }
        thr = hmax(c, k); /* n > c, n > k: n > max(c, k) */
    }
    acc = hfma(hsub_sat(n[0], thr), H2_W(0), 0u);
#pragma unroll
    for (int k = 1; k < 8; k++) acc = hfma(hsub_sat(n[k], thr), H2_W(k), acc);
    return acc;
}

/* The wide layout's counter addresses of acc's low and high half from lb =
 * histogram address | lane * 4 (see WIDE_WARPS). */
__device__ __forceinline__ uint32_t f4_alo(uint32_t acc, uint32_t lb) { return __byte_perm(acc, lb, 0x7604); }
__device__ __forceinline__ uint32_t f4_ahi(uint32_t acc, uint32_t lb) { return __byte_perm(acc, lb, 0x7624); }

__device__ __forceinline__ uint32_t f4_lo(uint32_t acc, uint32_t hbase)
{
    uint32_t d;
    asm("{ .reg .b32 t; and.b32 t, %1, 255; shl.b32 t, t, 7; add.u32 %0, t, %2; }"
        : "=r"(d) : "r"(acc), "r"(hbase));
    return d;
}

/* With a grid: the histogram address of pixel p (0..15 of the lane; half
 * H = p & 1 of its pair's acc) as hbase + (w >> 9), w = (code << 16) | (f <<
 * 8) built by one byte permute, where f = fl[p >> 2] byte p & 3 is 0x08 for
 * the lane's columns in the next cell column: +4, the next lane's counters,
 * which belong to that cell (cells are >= 16 columns wide). */
template <int P>
__device__ __forceinline__ uint32_t f4_gaddr(uint32_t acc, const uint32_t *fl, uint32_t hbase)
{
    constexpr unsigned sel = (P & 1) ? (0x3200u | ((4u + (P & 3)) << 4)) : (0x1000u | ((4u + (P & 3)) << 4));
    return hbase + (__byte_perm(acc, fl[P >> 2], sel) >> 9);
}

/* k_fast4 with a grid, per thread of the block: (fb, offset) = lane 31's
 * first column (0..15) in the next cell column (16 if none, and for the other
 * lanes) and the offset of that cell's bins in counts. Those columns are
 * taken back from the block histogram and added to that cell with global
 * atomics. In shared memory (read only on the take-back branch) rather than
 * in registers. */
static __shared__ int2 f4_fsl[32 * FAST_WARPS];

template <int KIND, bool CODES, bool TF, bool GRID, bool WIDE>
__device__ __forceinline__ void f4_row(const fast_args &a, const frow<KIND> &ra, const frow<KIND> &rm,
                                       const frow<KIND> &rb, int img, int y, int x0, int nx, bool part, uint32_t hbase,
                                       const uint32_t *fl, const uint16_t *kt, const uint8_t *__restrict__ btab)
{
    uint32_t acc[8], P3[9], R3[9];
    if (KIND == LBP_KIND_LANADP) {
        /* P3 = 2 D3 + D4 = 2 a.v[i] + m.v[i], R3 = D3 + 2 D4, for i = 0..8:
         * pair i's P7 and R7 are -R3 and -P3 of i + 1 */
#pragma unroll
        for (int i = 0; i < 9; i++) {
            P3[i] = hfma(ra.v[i], H2_TWO, rm.v[i]);
            R3[i] = hfma(rm.v[i], H2_TWO, ra.v[i]);
        }
    }
#pragma unroll
    for (int i = 0; i < 8; i++) acc[i] = f4_pair<KIND, TF>(ra, rm, rb, i, kt, a.tq_t, a.tq_c, P3, R3);
    if (CODES && x0 < a.opitch)
        *reinterpret_cast<uint4 *>(a.codes + (size_t)img * a.out_img + (size_t)y * (size_t)a.opitch + x0) =
            make_uint4(__byte_perm(acc[0], acc[1], 0x6420), __byte_perm(acc[2], acc[3], 0x6420),
                       __byte_perm(acc[4], acc[5], 0x6420), __byte_perm(acc[6], acc[7], 0x6420));
    if (GRID) {
#define F4G_RED(i)                                         \
    fast_red(f4_gaddr<2 * (i)>(acc[i], fl, hbase), 1u);     \
    fast_red(f4_gaddr<2 * (i) + 1>(acc[i], fl, hbase), 1u);
        F4G_RED(0) F4G_RED(1) F4G_RED(2) F4G_RED(3) F4G_RED(4) F4G_RED(5) F4G_RED(6) F4G_RED(7)
#undef F4G_RED
    } else if (WIDE) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            fast_red(f4_alo(acc[i], hbase), 1u);
            fast_red(f4_ahi(acc[i], hbase), 1u);
        }
    } else {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            fast_red(f4_lo(acc[i], hbase), 1u);
            fast_red(hbase + (acc[i] >> 9), 1u);
        }
    }
    if (part) { /* warp-uniform, one branch for the others */
        if (nx < 16) {
#pragma unroll
            for (int i = 7; i >= 0; i--) {
                if (2 * i + 1 < nx) break;
                fast_red(WIDE ? f4_ahi(acc[i], hbase) : hbase + (acc[i] >> 9), 0xffffffffu);
                if (2 * i >= nx) fast_red(WIDE ? f4_alo(acc[i], hbase) : f4_lo(acc[i], hbase), 0xffffffffu);
            }
        }
        const int2 fs = GRID ? f4_fsl[threadIdx.y * 32 + threadIdx.x] : make_int2(16, 0);
        if (GRID && fs.x < 16) {
            uint32_t *fcell = a.counts + (unsigned)fs.y;
#pragma unroll
            for (int i = 15; i >= 0; i--) {
                if (i < fs.x) break;
                if (i >= nx) continue; /* past the map: taken back above */
                const uint32_t w = acc[i >> 1];
                fast_red((i & 1) ? hbase + (w >> 9) : f4_lo(w, hbase), 0xffffffffu);
                atomicAdd(fcell + btab[(i & 1) ? (w >> 16) & 0xffu : w & 0xffu], 1u);
            }
        }
    }
}

/* base + row * pitch in one wide multiply-add */
__device__ __forceinline__ const uint8_t *f4_rowptr(const uint8_t *base, unsigned row, unsigned pitch)
{
    unsigned long long p;
    asm("mad.wide.u32 %0, %1, %2, %3;" : "=l"(p) : "r"(row), "r"(pitch), "l"(base));
    return reinterpret_cast<const uint8_t *>(p);
}

template <int KIND, bool CODES, bool TF, int D, bool GRID, bool WIDE>
__device__ __forceinline__ void f4_task(const fast_args &a, int img, int strip, int crow, int band, int lane,
                                        uint32_t hbase, const uint16_t *kt, const uint8_t *__restrict__ btab)
{
    const int x0 = strip * PROD_COLS + lane * 16;
    const int r0 = cell_start(crow, a.grid_rows, a.mh);
    const int r1 = crow + 1 < a.grid_rows ? cell_start(crow + 1, a.grid_rows, a.mh) : a.mh;
    const int y0 = r0 + band * a.rb, y1 = min(y0 + a.rb, r1);
    if (y0 >= r1) return; /* warp-uniform: a padding task */
    const int nx = a.mw - x0;
    /* grid: the lane's columns belong to cell column cc, those from fb on
     * (if any) to cc + 1 (cells are at least 16 columns wide). Lanes 0..30
     * count those in the next lane's counters (flag bytes fl, f4_gaddr);
     * lane 31's next lane is in another strip: it takes them back and adds
     * them to cc + 1 in global memory (f4_fsl, the take-back branch). */
    int fb = 16, cc = 0;
    uint32_t fl[4] = {0, 0, 0, 0};
    if (GRID && nx > 0) {
        cc = cell_of(x0, a.grid_cols, a.mw);
        if (cc + 1 < a.grid_cols) fb = cell_start(cc + 1, a.grid_cols, a.mw) - x0;
    }
    if (GRID) {
        if (lane == 31 && fb < 16) {
            f4_fsl[threadIdx.y * 32 + lane] = make_int2(fb, img * a.dim + (crow * a.grid_cols + cc + 1) * a.nbins);
        } else {
            f4_fsl[threadIdx.y * 32 + lane] = make_int2(16, 0);
            if (fb < 16) {
#pragma unroll
                for (int r = 0; r < 4; r++) { /* bytes of pixels 4r + j >= fb */
                    const int k = fb - 4 * r;
                    fl[r] = k <= 0 ? 0x08080808u : (k >= 4 ? 0u : 0x08080808u << (8 * k));
                }
            }
            fb = 16;
        }
    }
    const bool okx = x0 < a.pitch;
    const unsigned pitch = (unsigned)a.pitch;
    /* loads are unconditional (no predicated register merges): rows past
     * the task's last input row re-read that row; lanes past the pitch read
     * the row's first bytes; the 4 bytes after a lane's 16 are its own load
     * (an L1 hit: no shuffle), past the row's end for the last lane (the
     * next row, or for the last row of a batch the slack of at least 16
     * bytes that every input allocation has: values never used, those
     * columns are past the map) */
    const bool part = __any_sync(FULL, nx < 16 || fb < 16); /* a lane takes columns back */
    const uint8_t *base = a.in + (size_t)img * a.in_img + (okx ? x0 : 0);
    const int ylast = y1 + 1; /* last input row */
    rawrow q[D]; /* D raw rows in flight (a multiple of 3) */
    frow<KIND> h[3];
#define F4_LOAD(r, row)                                                                              \
    do {                                                                                             \
        const unsigned rr_ = (unsigned)min((row), ylast);                                            \
        (r).q = __ldg(reinterpret_cast<const uint4 *>(f4_rowptr(base, rr_, pitch)));                 \
        (r).ex = __ldg(reinterpret_cast<const uint32_t *>(f4_rowptr(base, rr_, pitch) + 16));        \
    } while (0)
    {
        rawrow r0, r1;
        F4_LOAD(r0, y0);
        F4_LOAD(r1, y0 + 1);
#pragma unroll
        for (int k = 0; k < D; k++) F4_LOAD(q[k], y0 + 2 + k);
        f4_conv<KIND>(h[0], r0);
        f4_conv<KIND>(h[1], r1);
        f4_vert<KIND>(h[0], h[1]);
    }
    for (int y = y0;; y += D) {
#pragma unroll
        for (int u = 0; u < D; u++) {
            frow<KIND> &ra = h[u % 3], &rm = h[(u + 1) % 3], &rb = h[(u + 2) % 3];
            f4_conv<KIND>(rb, q[u]);
            f4_vert<KIND>(rm, rb);
            F4_LOAD(q[u], y + u + 2 + D);
            f4_row<KIND, CODES, TF, GRID, WIDE>(a, ra, rm, rb, img, y + u, x0, nx, part, hbase, fl, kt, btab);
            if (y + u + 1 >= y1) return;
        }
    }
#undef F4_LOAD
}

/* D: raw rows in flight, BPS: blocks per multiprocessor (registers), GRID:
 * a grid of cells (a.grid; its own instances keep the 1x1 ones' registers) */
template <int KIND, bool CODES, bool TF, int D, int BPS, bool GRID = false, bool WIDE = false>
__global__ void __launch_bounds__(32 * (WIDE ? WIDE_WARPS : FAST_WARPS), BPS)
    k_fast4(fast_args a, const uint8_t *__restrict__ ktab_g, const uint8_t *__restrict__ btab_g)
{
    static_assert(!(GRID && WIDE), "the wide layout has no grid of cells");
    constexpr int NW = WIDE ? WIDE_WARPS : FAST_WARPS;
    extern __shared__ uint4 fsm[];
    uint32_t *hist = reinterpret_cast<uint32_t *>(fsm);
    if (WIDE) { /* the first shared address that is a multiple of 65536 */
        const uint32_t s0 = (uint32_t)__cvta_generic_to_shared(fsm);
        hist = reinterpret_cast<uint32_t *>(reinterpret_cast<char *>(fsm) + ((0x10000u - (s0 & 0xffffu)) & 0xffffu));
    }
    uint16_t *ktab = reinterpret_cast<uint16_t *>(hist + (WIDE ? 256 * 64 : FAST_HIST_WORDS));
    const int lane = threadIdx.x, warp = threadIdx.y, tid = warp * 32 + lane;
    if (WIDE) {
        uint4 *h4 = reinterpret_cast<uint4 *>(hist);
        for (int i = tid; i < 256 * 16; i += 32 * NW) h4[i] = make_uint4(0, 0, 0, 0);
    } else {
        for (int i = tid; i < FAST_HIST_WORDS / 4; i += 32 * NW) fsm[i] = make_uint4(0, 0, 0, 0);
    }
    if (KIND == LBP_KIND_TLBAP && !TF)
        for (int i = tid; i < 256; i += 32 * NW) ktab[i] = (uint16_t)(0x6400u | ktab_g[i]);
    __syncthreads();
    /* narrow: the lane's counter of code 0; wide: lb for f4_alo, f4_ahi */
    const uint32_t hbase = (uint32_t)__cvta_generic_to_shared(hist) + (uint32_t)(lane * 4);
    const long long p0 = a.pairs * blockIdx.x / gridDim.x, p1 = a.pairs * (blockIdx.x + 1) / gridDim.x;
    const int bpg = a.bands * a.grid_rows; /* tasks per strip */
    const int tasks = bpg * ((a.mw + PROD_COLS - 1) / PROD_COLS);
    if (WIDE) {
        /* group p: slots p * NW + warp of the flat list (image, slot), a.slots
         * slots per image (its tasks, then idle ones), slots >= NW: a group
         * spans at most two images. Image i counts in half i & 1 (byte 0 of
         * the address + 128), flushed when image i + 2 takes it (every warp is
         * past image i: groups run in order between barriers) and at the
         * end. (img, t): the group's first slot, advanced without divisions. */
        const long long s0 = p0 * NW;
        int img = (int)(s0 / a.slots), t = (int)(s0 - (long long)img * a.slots);
        int held0 = -1, held1 = -1; /* the image in each half */
        for (long long p = p0; p < p1; p++) {
            const int i1 = min(t + NW - 1 >= a.slots ? img + 1 : img, a.n - 1);
#pragma unroll
            for (int k = 0; k < 2; k++) {
                const int i = k ? i1 : img;
                int &held = (i & 1) ? held1 : held0;
                if (held != i) {
                    if (held >= 0) fast_flush<NW, 64>(a, hist + 32 * (i & 1), held, tid, btab_g);
                    held = i;
                }
            }
            int wi = img, wt = t + warp;
            if (wt >= a.slots) {
                wt -= a.slots;
                wi++;
            }
            if (wi < a.n && wt < a.tasks_img) {
                const int strip = wt / bpg, r = wt - strip * bpg;
                f4_task<KIND, CODES, TF, D, GRID, WIDE>(a, wi, strip, r / a.bands, r % a.bands, lane,
                                                        hbase | (uint32_t)((wi & 1) << 7), ktab, btab_g);
            }
            t += NW;
            if (t >= a.slots) {
                t -= a.slots;
                img++;
            }
        }
        if (held0 >= 0) fast_flush<NW, 64>(a, hist, held0, tid, btab_g);
        if (held1 >= 0) fast_flush<NW, 64>(a, hist + 32, held1, tid, btab_g);
        return;
    }
    /* the block histogram's epoch: the image, and with a grid the (strip,
     * cell row) group, the same for the block's warps (bands per cell row
     * are a multiple of FAST_WARPS) */
    int cur = -1;
    for (long long p = p0; p < p1; p++) {
        const int img = (int)(p / a.pairs_img);
        const int t4 = (int)(p - (long long)img * a.pairs_img) * NW, t = t4 + warp;
        const int key = GRID ? img * a.groups + t4 / a.bands : img;
        if (key != cur) {
            if (cur >= 0) f4_flush<GRID>(a, hist, cur, tid, btab_g);
            cur = key;
        }
        if (t < tasks) {
            const int strip = t / bpg, r = t - strip * bpg;
            f4_task<KIND, CODES, TF, D, GRID, WIDE>(a, img, strip, r / a.bands, r % a.bands, lane, hbase, ktab,
                                                    btab_g);
        }
    }
    if (cur >= 0) f4_flush<GRID>(a, hist, cur, tid, btab_g);
}

/* ----------------------------------------------------- production, circular */

/* By value (kernel parameters): concurrent launches with different P, R
 * cannot disturb each other. */
struct circ_args {
    double rp[LBP_MAX_P], cp[LBP_MAX_P]; /* scikit-image's sample offsets */
    double rf[LBP_MAX_P], cf[LBP_MAX_P]; /* floor(rp), floor(cp) */
    const uint8_t *in;
    size_t in_img;
    int pitch, w, h;
    int P, method;
    void *codes;            /* (n, h, w) of elem, dense, or NULL */
    int elem_size;          /* 1, 2, 4, or 8 (var) */
    uint32_t *counts;
    int dim, nbins, grid_rows, grid_cols, vbins, mapping;
    const uint32_t *bins;   /* code -> bin (ncodes <= 65536), or NULL */
    int span;               /* tile halo: every sample lies within span-1 pixels */
    int copies;             /* histogram copies in shared memory (32: one per lane, 1, or 0: global atomics) */
    int band;               /* k_circ8: output rows per block */
};

#define CIRC_BX 32
#define CIRC_BY 8
#define CIRC_SMAX 8         /* largest halo staged in shared memory (R up to ~7) */

__device__ __forceinline__ double px_or_zero(const uint8_t *in, int pitch, int w, int h, long r, long c)
{
    if (r < 0 || r >= h || c < 0 || c >= w) return 0.0;
    return (double)in[(size_t)r * (size_t)pitch + (size_t)c];
}

/* TILE: the block's pixels plus a halo of `span` in shared memory, zeros
 * outside the image (scikit-image's cval); else bounds-checked global reads. */
/* var from the samples' sum and sum of squares (scikit-image's formula; 0
 * becomes the reference's NaN bits) into *v, and its histogram bin */
__device__ __forceinline__ uint32_t circ_var(double sum, double sq, int P, int vbins, double *v)
{
    double var = (sq - (sum * sum) / (double)P) / (double)P;
    if (var == 0) var = __longlong_as_double(0x7ff8000000000000ll);
    *v = var;
    if (!(var > 0.0)) return 0;
    const double s = sqrt(var) * (double)vbins / 128.0;
    return s >= (double)vbins ? (uint32_t)vbins - 1 : (uint32_t)s;
}

/* v (0 .. 2^31 - 1) as a binary64, exactly: 2^52 + v with the 2^52 taken away */
__device__ __forceinline__ double c8_dbl(uint32_t v)
{
    return __hiloint2double(0x43300000, (int)v) - 4503599627370496.0;
}

/* TILE: the block's pixels and halo in shared memory; VAR: method var (the
 * samples' sum and sum of squares). A sample's corners are y + floor(rp)
 * and x + floor(cp) (and + 1): y + rp is rounded by at most half an ulp of
 * y, far less than rp's distance to an integer (rp is a multiple of 1e-5),
 * so floor(y + rp) = y + floor(rp); the weights dr = (y + rp) - (y +
 * floor(rp)) and dc are the reference's. Where rp (cp) is an integer, dr
 * (dc) is 0 and the reference's expression is exactly its top (left) half:
 * those samples skip the other half. Histogram copies: a.copies (32: one per
 * lane, 1, 0: global atomics). */
template <bool TILE, bool VAR>
__global__ void __launch_bounds__(CIRC_BX * CIRC_BY) k_circ(circ_args a)
{
    extern __shared__ uint32_t sh[];
    __shared__ uint8_t tile[TILE ? (CIRC_BY + 2 * CIRC_SMAX) * (CIRC_BX + 2 * CIRC_SMAX) : 1];
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x, nt = blockDim.x * blockDim.y;
    const int img = blockIdx.z;
    const uint8_t *in = a.in + (size_t)img * a.in_img;
    uint32_t *gcount = a.counts ? a.counts + (size_t)img * (size_t)a.dim : NULL;
    const int tw = CIRC_BX + 2 * a.span, ty0 = blockIdx.y * CIRC_BY - a.span, tx0 = blockIdx.x * CIRC_BX - a.span;
    for (int i = tid; i < a.copies * a.dim; i += nt) sh[i] = 0;
    if (TILE) {
        const int tn = tw * (CIRC_BY + 2 * a.span);
        for (int i = tid; i < tn; i += nt) {
            const int r = ty0 + i / tw, c = tx0 + i % tw;
            tile[i] = r >= 0 && r < a.h && c >= 0 && c < a.w ? in[(size_t)r * (size_t)a.pitch + (size_t)c] : 0;
        }
    }
    if (TILE || a.copies) __syncthreads();
    auto fetch = [&](long r, long c) -> double {
        if (TILE) return c8_dbl(tile[(r - ty0) * tw + (c - tx0)]);
        return px_or_zero(in, a.pitch, a.w, a.h, r, c);
    };
    if (x < a.w && y < a.h) {
        const double centre = c8_dbl(in[(size_t)y * (size_t)a.pitch + (size_t)x]);
        const double yd = c8_dbl((uint32_t)y), xd = c8_dbl((uint32_t)x);
        uint32_t bits = 0;
        double sum = 0.0, sq = 0.0;
        for (int k = 0; k < a.P; k++) {
            const long minr = (long)y + (long)a.rf[k], minc = (long)x + (long)a.cf[k];
            const bool ri = a.rp[k] == a.rf[k], ci = a.cp[k] == a.cf[k]; /* uniform over the block */
            double t;
            if (ri && ci) {
                t = fetch(minr, minc);
            } else if (ri) {
                const double dc = (xd + a.cp[k]) - (xd + a.cf[k]);
                t = (1 - dc) * fetch(minr, minc) + dc * fetch(minr, minc + 1);
            } else if (ci) {
                const double dr = (yd + a.rp[k]) - (yd + a.rf[k]);
                t = (1 - dr) * fetch(minr, minc) + dr * fetch(minr + 1, minc);
            } else {
                const double dr = (yd + a.rp[k]) - (yd + a.rf[k]), dc = (xd + a.cp[k]) - (xd + a.cf[k]);
                t = lbp_bilinear(fetch(minr, minc), fetch(minr, minc + 1), fetch(minr + 1, minc),
                                 fetch(minr + 1, minc + 1), dr, dc);
            }
            bits |= (uint32_t)(t >= centre) << k;
            if (VAR) {
                sum += t;
                sq += t * t;
            }
        }
        const size_t o = ((size_t)img * (size_t)a.h + (size_t)y) * (size_t)a.w + (size_t)x;
        uint32_t bin;
        if (VAR) {
            double v;
            bin = circ_var(sum, sq, a.P, a.vbins, &v);
            if (a.codes) ((double *)a.codes)[o] = v;
        } else {
            const uint32_t code = lbp_pattern_code(bits, a.P, a.method);
            if (a.codes) {
                if (a.elem_size == 1) ((uint8_t *)a.codes)[o] = (uint8_t)code;
                else if (a.elem_size == 2) ((uint16_t *)a.codes)[o] = (uint16_t)code;
                else ((uint32_t *)a.codes)[o] = code;
            }
            if (a.bins) bin = a.bins[code];
            else if (a.mapping == LBP_MAP_U2) bin = lbp_pattern_code(code, a.P, LBP_M_NRI);
            else if (a.mapping == LBP_MAP_RIU2) bin = lbp_pattern_code(code, a.P, LBP_M_UNIFORM);
            else bin = code; /* uniform, nri_uniform */
        }
        if (a.counts) {
            const int idx = (cell_of(y, a.grid_rows, a.h) * a.grid_cols + cell_of(x, a.grid_cols, a.w)) * a.nbins + (int)bin;
            if (a.copies == 32) atomicAdd(&sh[idx * 32 + (tid & 31)], 1u);
            else if (a.copies == 1) atomicAdd(&sh[idx], 1u);
            else atomicAdd(&gcount[idx], 1u);
        }
    }
    if (a.copies) {
        __syncthreads();
        for (int i = tid; i < a.dim; i += nt) {
            uint32_t sum = 0;
            if (a.copies == 32)
                for (int j = 0; j < 32; j++) sum += sh[i * 32 + ((j + i) & 31)]; /* rotated: banks differ */
            else
                sum = sh[i];
            if (sum) atomicAdd(&gcount[i], sum);
        }
    }
}

/* Production kernel for circular LBP with P = 8, R = 1 (scikit-image's most
 * used configuration; the host checks the sample geometry, circ8_ok). The
 * reference's binary64 arithmetic, operation for operation, reorganised as
 * the CPU fast path does (lbp_fast.c) but not re-associated:
 *   - Samples 0, 2, 4, 6 lie on pixels (rp, cp in {0, +-1}: dr = dc = 0, and
 *     the bilinear expression is then exactly that pixel): integer compares.
 *   - Samples 1, 3, 5, 7 are at (-d, d), (-d, -d), (d, -d), (d, d) with 0 < d
 *     < 1. Their column weight dc = (x + cp) - floor(x + cp) depends only on
 *     the column and the sign of cp, so a thread keeps one column for a band
 *     of rows, computes dc and 1 - dc once, and for each input row the two
 *     "top" values (1 - dc) I[r][minc] + dc I[r][maxc] (cp = +d: minc = x;
 *     -d: x - 1). The row weight dr = (y + rp) - floor(y + rp) depends only
 *     on the row and the sign of rp, and each sample is then (1 - dr) top +
 *     dr bottom of two of the ring's three rows.
 *   - floor(y + rp) = y + floor(rp): y + rp is rounded by at most half an ulp
 *     of y (< 2^-31 below 2^22 rows) and rp is a multiple of 1e-5, so the
 *     sum cannot cross an integer. Rows and columns outside the image read 0.
 * 34 binary64 operations per pixel. Histogram copies: one per lane (bins x
 * 32 words) when that fits, else one per block, else global atomics.
 * Nsight Compute (H200, 32 x 1024^2, uniform, histograms): 162.6 M warp
 * instructions against k_circ's 207.4 M, issue 77% busy; 174 GB/s against 29.
 * Tried and slower: rows loaded 2 or 4 rows ahead (106-117 GB/s), bands of
 * 16 or 128 rows, and the row loop unrolled by 3 with 6 blocks per SM (135 M
 * instructions, but fewer warps: 161 GB/s). */
#define C8_BX 128   /* columns of a block, one per thread */
#define C8_BAND 32  /* output rows of a block (default; circ_args.band) */


/* VAR: method var (binary64 codes, variance bins); CODES: write the code
 * map; COPIES: histogram copies in shared memory (32: one per lane, 1, or 0:
 * global atomics). Other methods and mappings: the code and the bin of each
 * of the 256 sign patterns from two tables in shared memory. */
template <bool VAR, bool CODES, int COPIES>
__global__ void __launch_bounds__(C8_BX) k_circ8(circ_args a)
{
    extern __shared__ uint32_t sh[];
    __shared__ uint8_t ctab[256];  /* sign pattern -> code */
    __shared__ uint16_t btab[256]; /* sign pattern -> bin */
    const int tid = threadIdx.x, lane = tid & 31;
    const int x = blockIdx.x * C8_BX + tid;
    const int y0 = blockIdx.y * a.band, y1 = min(y0 + a.band, a.h);
    const int img = blockIdx.z;
    uint32_t *gcount = a.counts ? a.counts + (size_t)img * (size_t)a.dim : NULL;
    for (int i = tid; i < COPIES * a.dim; i += C8_BX) sh[i] = 0;
    if (!VAR)
        for (int i = tid; i < 256; i += C8_BX) {
            const uint32_t code = lbp_pattern_code((uint32_t)i, 8, a.method);
            ctab[i] = (uint8_t)code;
            btab[i] = (uint16_t)(a.bins                        ? a.bins[code]
                                 : a.mapping == LBP_MAP_U2   ? lbp_pattern_code(code, 8, LBP_M_NRI)
                                 : a.mapping == LBP_MAP_RIU2 ? lbp_pattern_code(code, 8, LBP_M_UNIFORM)
                                                             : code);
        }
    __syncthreads();
    if (x < a.w && y0 < y1) {
        const bool hasl = x > 0, hasr = x + 1 < a.w;
        const size_t pitch = (size_t)a.pitch;
        /* column weights of cp = +d (minc = x) and cp = -d (minc = x - 1) */
        const double dcP = ((double)x + a.cp[1]) - (double)x, omP = 1 - dcP;
        const double dcN = ((double)x + a.cp[3]) - (double)(x - 1), omN = 1 - dcN;
        /* ring of input rows y - 1, y, y + 1: pixels (x - 1, x, x + 1) and
         * tops; row y + 2 in flight, its three bytes packed in one word */
        uint32_t v[3][3];
        double tP[3], tN[3];
        const uint8_t *rowp = a.in + (size_t)img * a.in_img + (long long)(y0 - 1) * (long long)a.pitch + x;
        auto load = [&](const uint8_t *p, int r) -> uint32_t {
            if (r < 0 || r >= a.h) return 0u;
            const uint32_t l = hasl ? __ldg(p - 1) : 0u, r8 = hasr ? __ldg(p + 1) : 0u;
            return l | (uint32_t)__ldg(p) << 8 | r8 << 16;
        };
        auto unpack = [&](uint32_t w, uint32_t *q) {
            q[0] = w & 0xffu;
            q[1] = (w >> 8) & 0xffu;
            q[2] = w >> 16;
        };
        auto tops = [&](const uint32_t *q, double &p, double &n) {
            const double l = c8_dbl(q[0]), m = c8_dbl(q[1]), r = c8_dbl(q[2]);
            p = omP * m + dcP * r;
            n = omN * l + dcN * m;
        };
        unpack(load(rowp, y0 - 1), v[0]);
        unpack(load(rowp + pitch, y0), v[1]);
        unpack(load(rowp + 2 * pitch, y0 + 1), v[2]);
        rowp += 3 * pitch; /* row y + 2 */
        uint32_t nx = load(rowp, y0 + 2);
        tops(v[0], tP[0], tN[0]);
        tops(v[1], tP[1], tN[1]);
        tops(v[2], tP[2], tN[2]);
        /* the cell row of y, the first row of the next one, and the
         * histogram words of this thread's cell */
        const int ccol = cell_of(x, a.grid_cols, a.w);
        int crow = cell_of(y0, a.grid_rows, a.h);
        int cnext = crow + 1 < a.grid_rows ? cell_start(crow + 1, a.grid_rows, a.h) : a.h;
        const int cstride = a.grid_cols * a.nbins; /* bins of a cell row */
        int hb = (crow * a.grid_cols + ccol) * a.nbins;
        const size_t o0 = ((size_t)img * (size_t)a.h + (size_t)y0) * (size_t)a.w + (size_t)x;
        uint8_t *cp8 = CODES && !VAR ? (uint8_t *)a.codes + o0 : NULL;
        double *cpv = CODES && VAR ? (double *)a.codes + o0 : NULL;
        double yd = (double)y0; /* y as a binary64, kept exact by adding 1 */
        for (int y = y0; y < y1; y++, yd += 1.0) {
            /* row weights of rp = -d (minr = y - 1) and rp = +d (minr = y) */
            const double drN = (yd + a.rp[1]) - (yd - 1.0), omdrN = 1 - drN;
            const double drP = (yd + a.rp[5]) - yd, omdrP = 1 - drP;
            const double t1 = omdrN * tP[0] + drN * tP[1];
            const double t3 = omdrN * tN[0] + drN * tN[1];
            const double t5 = omdrP * tN[1] + drP * tN[2];
            const double t7 = omdrP * tP[1] + drP * tP[2];
            const uint32_t c = v[1][1];
            const double cd = c8_dbl(c);
            while (y >= cnext) {
                crow++;
                hb += cstride;
                cnext = crow + 1 < a.grid_rows ? cell_start(crow + 1, a.grid_rows, a.h) : a.h;
            }
            uint32_t bin;
            if (VAR) {
                /* scikit-image's sum and sum of squares, in sample order */
                const double t[8] = {c8_dbl(v[1][2]), t1, c8_dbl(v[0][1]), t3, c8_dbl(v[1][0]), t5, c8_dbl(v[2][1]), t7};
                double sum = 0.0, sq = 0.0, var;
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    sum += t[k];
                    sq += t[k] * t[k];
                }
                bin = circ_var(sum, sq, 8, a.vbins, &var);
                if (CODES) {
                    *cpv = var;
                    cpv += a.w;
                }
            } else {
                const uint32_t bits = (uint32_t)(v[1][2] >= c) | (uint32_t)(t1 >= cd) << 1 |
                                      (uint32_t)(v[0][1] >= c) << 2 | (uint32_t)(t3 >= cd) << 3 |
                                      (uint32_t)(v[1][0] >= c) << 4 | (uint32_t)(t5 >= cd) << 5 |
                                      (uint32_t)(v[2][1] >= c) << 6 | (uint32_t)(t7 >= cd) << 7;
                if (CODES) {
                    *cp8 = ctab[bits];
                    cp8 += a.w;
                }
                bin = btab[bits];
            }
            if (a.counts) {
                if (COPIES == 32) atomicAdd(&sh[(hb + (int)bin) * 32 + lane], 1u);
                else if (COPIES == 1) atomicAdd(&sh[hb + (int)bin], 1u);
                else atomicAdd(&gcount[hb + (int)bin], 1u);
            }
            /* the ring moves down one row */
#pragma unroll
            for (int j = 0; j < 3; j++) {
                v[0][j] = v[1][j];
                v[1][j] = v[2][j];
            }
            unpack(nx, v[2]);
            rowp += pitch;
            if (y + 3 <= y1) nx = load(rowp, y + 3); /* rows up to y1 are read */
            tP[0] = tP[1];
            tN[0] = tN[1];
            tP[1] = tP[2];
            tN[1] = tN[2];
            tops(v[2], tP[2], tN[2]);
        }
    }
    if (COPIES) {
        __syncthreads();
        for (int i = tid; i < a.dim; i += C8_BX) {
            uint32_t sum = 0;
            if (COPIES == 32)
                for (int j = 0; j < 32; j++) sum += sh[i * 32 + ((j + i) & 31)]; /* rotated: banks differ */
            else
                sum = sh[i];
            if (sum) atomicAdd(&gcount[i], sum);
        }
    }
}

/* ------------------------------------------------------------ RGB to grey */

__global__ void k_grey(const uint8_t *__restrict__ rgb, size_t rgb_pitch, uint8_t *__restrict__ grey,
                       int pitch, int w, int h)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    for (int y = blockIdx.y; x < w && y < h; y += gridDim.y) {
        const uint8_t *p = rgb + (size_t)y * rgb_pitch + 3 * (size_t)x;
        grey[(size_t)y * (size_t)pitch + (size_t)x] =
            (uint8_t)((4899u * p[0] + 9617u * p[1] + 1868u * p[2] + 8192u) >> 14);
    }
}

/* --------------------------------------------------------------- host side */

/* Device-side tables of a configuration. */
struct dev_tables {
    uint8_t *ktab, *btab;   /* 3x3 kinds: 256 entries each */
    uint32_t *bins;         /* circular: code -> bin, or NULL */
    uint32_t tq_t, tq_c;    /* TLBAP threshold as an fp16 fma (0: none, the table) */
};

/* binary16 helpers for the TLBAP threshold search (positive finite values) */
static double half_value(unsigned b)
{
    const unsigned e = (b >> 10) & 31u, m = b & 1023u;
    const double v = e ? ldexp((double)(1024u + m), (int)e - 25) : ldexp((double)m, -24);
    return (b & 0x8000u) ? -v : v;
}

/* v rounded to binary16, to nearest even (|v| < 65520) */
static double half_round(double v)
{
    const double a = fabs(v);
    int ex;
    double q;
    if (a < ldexp(1.0, -14)) {
        q = ldexp(1.0, -24);
    } else {
        frexp(a, &ex); /* a in [2^(ex-1), 2^ex) */
        q = ldexp(1.0, ex - 11);
    }
    return copysign(rint(a / q) * q, v);
}

static unsigned half_bits(double v) /* v representable in binary16 */
{
    const double a = fabs(v);
    unsigned b;
    int ex;
    if (a < ldexp(1.0, -14)) {
        b = (unsigned)(a / ldexp(1.0, -24));
    } else {
        const double f = frexp(a, &ex); /* [0.5, 1) */
        b = ((unsigned)(ex - 1 + 15) << 10) | (unsigned)((2.0 * f - 1.0) * 1024.0);
    }
    return b | (v < 0 ? 0x8000u : 0u);
}

/* TLBAP's threshold k(m) = floor(fl(th * m)) (k[], the exact table) as one
 * binary16 fma of the biased maximum: 1024 + k(m) = fl16(fma(1024 + m, t, c))
 * for every m in 0..255 with k(m) > 0, and fl16(...) <= 1024 where k(m) = 0
 * (the kernel takes max(centre, that), and the biased centre is >= 1024),
 * with t near th. Returns 0 when no (t, c) is found. */
static int tlbap_fma_consts(const int k[256], double th, uint32_t *tq_t, uint32_t *tq_c)
{
    const unsigned tb = half_bits(half_round(th));
    for (int dt = 0; dt <= 32; dt++) {
        const unsigned cand_t = (dt & 1) ? tb + (unsigned)(dt + 1) / 2 : tb - (unsigned)dt / 2;
        if (cand_t == 0 || cand_t >= 0x7c00u) continue;
        const double t = half_value(cand_t);
        double lo = -1e9, hi = 1e9; /* c in [lo, hi] is needed */
        for (int m = 0; m < 256; m++) {
            const double base = t * (1024.0 + m), want = 1024.0 + k[m];
            if (k[m] > 0 && want - 0.5 - base > lo) lo = want - 0.5 - base;
            if (want + 0.5 - base < hi) hi = want + 0.5 - base;
        }
        if (lo > hi) continue;
        const double mid = half_round(0.5 * (lo + hi));
        const unsigned cb = half_bits(mid);
        for (int dc = -4; dc <= 4; dc++) {
            const unsigned mag = (cb & 0x7fffu), sign = cb & 0x8000u;
            if ((int)mag + dc < 0 || (int)mag + dc >= 0x7c00) continue;
            const unsigned cand_c = sign | (unsigned)((int)mag + dc);
            const double c = half_value(cand_c);
            int ok = 1;
            for (int m = 0; m < 256 && ok; m++) {
                const double r = half_round(t * (1024.0 + m) + c);
                ok = k[m] > 0 ? r == 1024.0 + k[m] : r <= 1024.0;
            }
            if (ok) {
                *tq_t = cand_t * 0x10001u;
                *tq_c = cand_c * 0x10001u;
                return 1;
            }
        }
    }
    return 0;
}

static patina_status tables_init(dev_tables *t, const lbp_conf_t *c, cudaStream_t s)
{
    patina_status st_ = PATINA_OK;
    memset(t, 0, sizeof *t);
    if (c->kind != LBP_KIND_CIRCULAR) {
        uint8_t k8[512];
        int k[256];
        const uint32_t *bt = lbp_bin_table(c);
        if (!bt) return patina__fail(PATINA_E_NOMEM, "gpu: lbp: out of memory for a bin table");
        lbp_tlbap_table(k, c->kind == LBP_KIND_TLBAP ? c->th : 1.0);
        if (c->kind == LBP_KIND_TLBAP && !tlbap_fma_consts(k, c->th, &t->tq_t, &t->tq_c)) t->tq_t = t->tq_c = 0;
        for (int i = 0; i < 256; i++) {
            k8[i] = (uint8_t)k[i];
            k8[256 + i] = (uint8_t)bt[i];
        }
        CU(cudaMallocAsync((void **)&t->ktab, 512, s));
        t->btab = t->ktab + 256;
        CU(cudaMemcpyAsync(t->ktab, k8, 512, cudaMemcpyHostToDevice, s));
        CU(cudaStreamSynchronize(s)); /* k8 is on this stack frame */
    } else if (c->method != LBP_M_VAR && c->ncodes <= 65536) {
        const uint32_t *bt = lbp_bin_table(c);
        if (!bt) return patina__fail(PATINA_E_NOMEM, "gpu: lbp: out of memory for a bin table");
        CU(cudaMallocAsync((void **)&t->bins, sizeof(uint32_t) * (size_t)c->ncodes, s));
        CU(cudaMemcpyAsync(t->bins, bt, sizeof(uint32_t) * (size_t)c->ncodes, cudaMemcpyHostToDevice, s));
    }
done:
    return st_;
}

static void tables_free(dev_tables *t, cudaStream_t s)
{
    if (t->ktab) cudaFreeAsync(t->ktab, s);
    if (t->bins) cudaFreeAsync(t->bins, s);
    memset(t, 0, sizeof *t);
}

static int smem_copies(int dim)
{
    const size_t one = (size_t)dim * sizeof(uint32_t);
    if (one * PROD_TY <= 32 * 1024) return PROD_TY;
    if (one <= 46 * 1024) return 1;
    return 0;
}

typedef void (*fast_kernel)(fast_args, const uint8_t *, const uint8_t *);

static cudaError_t fast_launch(fast_kernel k, unsigned nb, dim3 block, size_t smem, cudaStream_t s,
                               const fast_args &a, const dev_tables *t)
{
    cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    k<<<nb, block, smem, s>>>(a, t->ktab, t->btab);
    return cudaGetLastError();
}

/* Whether k_circ8 computes this circular configuration: P = 8 and the
 * samples of R = 1 as scikit-image rounds them (axis samples on pixels,
 * diagonal ones at (-d, d), (-d, -d), (d, -d), (d, d), 0 < d < 1), codes of
 * one byte (binary64 for var). */
static bool circ8_ok(const lbp_conf_t *c, const circ_args *a)
{
    static const double axr[4] = {0, -1, 0, 1}, axc[4] = {1, 0, -1, 0};
    if (c->P != 8 || a->elem_size != (c->method == LBP_M_VAR ? 8 : 1)) return false;
    for (int k = 0; k < 4; k++)
        if (a->rp[2 * k] != axr[k] || a->cp[2 * k] != axc[k]) return false;
    const double d = a->cp[1];
    return d > 0 && d < 1 && a->rp[1] == -d && a->cp[3] == -d && a->rp[3] == -d && a->rp[5] == d &&
           a->cp[5] == -d && a->rp[7] == d && a->cp[7] == d;
}

template <bool VAR, bool CODES>
static void c8_launch(dim3 grid, size_t smem, cudaStream_t s, const circ_args &a)
{
    if (a.copies == 32) k_circ8<VAR, CODES, 32><<<grid, C8_BX, smem, s>>>(a);
    else if (a.copies == 1) k_circ8<VAR, CODES, 1><<<grid, C8_BX, smem, s>>>(a);
    else k_circ8<VAR, CODES, 0><<<grid, C8_BX, smem, s>>>(a);
}

/* Launches the production kernel for n images of w x h (pitched input). */
static cudaError_t launch_prod(const lbp_conf_t *c, const dev_tables *t, const uint8_t *in, int pitch,
                               int w, int h, int n, void *codes, int opitch, uint32_t *counts,
                               cudaStream_t s)
{
    int mw, mh;
    lbp_map_shape(c, w, h, &mw, &mh);
    if (mw == 0 || mh == 0 || n == 0) return cudaSuccess;
    const bool cells = c->grid_rows > 1 || c->grid_cols > 1;
    const char *kv = getenv("PATINA_LBP_KERNEL");
    const bool old3 = kv && !strcmp(kv, "fast3");
    /* k_fast4 takes grids whose cells are at least 16 columns wide (a lane's
     * 16 columns then cross at most one cell border); k_prod3 the others */
    if (c->kind != LBP_KIND_CIRCULAR && counts &&
        (!cells || (!old3 && mw / c->grid_cols >= 16 && !(kv && !strcmp(kv, "prod3"))))) {
        fast_args a;
        int dev = 0, sms = 0, smem_optin = 0;
        cudaError_t e;
        if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
        if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return e;
        if ((e = cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) != cudaSuccess)
            return e;
        const int strips = (mw + PROD_COLS - 1) / PROD_COLS;
        /* d3: 3 rows in flight and one more block per SM (fewer registers):
         * the default for LANADP (16 warps per SM instead of 12: H100 256 x
         * 1024^2 1040 vs 976 GB/s); lbp8 gains nothing (1646 vs 1655) and
         * TLBAP spills (1112 vs 1450). PATINA_LBP_KERNEL=fast3|narrow|d6|d3|prod3
         * picks the kernel for comparisons (bench_lbp; prod3: grids of cells
         * on k_prod3). */
        const bool d3 = !old3 && (c->kind != LBP_KIND_TLBAP || t->tq_t) &&
                        (kv ? !strcmp(kv, "d3") : c->kind == LBP_KIND_LANADP);
        /* whole-image histograms: the wide layout (WIDE_WARPS) where a block
         * may have its shared memory (H100/H200 227 KB; not on GPUs with
         * 100 KB or less); "narrow", "d3", "d6" pick the 4-warp blocks */
        const bool wide = !old3 && !cells && smem_optin >= WIDE_SMEM &&
                          !(kv && (!strcmp(kv, "narrow") || !strcmp(kv, "d3") || !strcmp(kv, "d6")));
        const int nw = wide ? WIDE_WARPS : FAST_WARPS;
        const int bps = wide ? 1 : d3 ? (c->kind == LBP_KIND_LANADP ? 4 : 5) : FAST_BPS(c->kind);
        const long long warps = (long long)sms * bps * nw;
        const long long rows = (long long)n * strips * mh; /* warp rows of work */
        a.in = in;
        a.pitch = pitch;
        a.in_img = (size_t)h * (size_t)pitch;
        a.mw = mw;
        a.mh = mh;
        a.codes = (uint8_t *)codes;
        a.opitch = opitch;
        a.out_img = (size_t)mh * (size_t)opitch;
        a.counts = counts;
        a.dim = (int)lbp_dim(c);
        a.grid = cells;
        a.grid_rows = c->grid_rows;
        a.grid_cols = c->grid_cols;
        a.nbins = (int)c->nbins;
        a.groups = strips * c->grid_rows;
        /* bands of a task strip (grid: per cell row, padded to a multiple of
         * FAST_WARPS so that a block's warps share a cell row) and the task
         * groups of FAST_WARPS for band height rb */
        const int chmax = (mh + c->grid_rows - 1) / c->grid_rows;
        const auto nbands = [&](int rb) -> int {
            return cells ? ((chmax + rb - 1) / rb + FAST_WARPS - 1) / FAST_WARPS * FAST_WARPS : (mh + rb - 1) / rb;
        };
        /* the wide layout's groups run on into the next image when an
         * image has at least a group of tasks */
        const auto cross_ok = [&](int rb) -> bool { return wide && (long long)nbands(rb) * strips >= nw; };
        const auto ngroups = [&](int rb) -> long long {
            if (cells) return (long long)nbands(rb) / FAST_WARPS * c->grid_rows * strips * n;
            if (cross_ok(rb)) return ((long long)nbands(rb) * strips * n + nw - 1) / nw;
            return ((long long)nbands(rb) * strips + nw - 1) / nw * n;
        };
        /* band height: every warp busy for one image, at most 32 rows (2
         * halo rows re-read per band) */
        a.rb = (int)((rows + warps - 1) / warps);
        if (a.rb > 32) a.rb = 32;
        if (a.rb < 1) a.rb = 1;
        const long long maxb = (long long)sms * bps;
        if (a.rb >= 16 && !old3) {
            /* large batches: the band height whose last round of task groups
             * is fullest (a block walks ceil(groups / blocks) groups; a task
             * costs about its rows + 3) */
            long long best = -1;
            int brb = a.rb;
            for (int rb = a.rb; rb >= 16; rb--) {
                const long long groups = ngroups(rb);
                const long long nbk = groups < maxb ? groups : maxb;
                const long long cost = (groups + nbk - 1) / nbk * (rb + 3);
                if (best < 0 || cost < best) {
                    best = cost;
                    brb = rb;
                }
            }
            a.rb = brb;
        }
        a.bands = nbands(a.rb);
        a.pairs = ngroups(a.rb);
        a.pairs_img = a.pairs / n;
        a.tasks_img = a.bands * strips;
        a.slots = cross_ok(a.rb) ? a.tasks_img : (int)a.pairs_img * nw; /* wide */
        a.n = n;
        const unsigned nb = (unsigned)(a.pairs < maxb ? a.pairs : maxb);
        const size_t smem = wide ? WIDE_SMEM : FAST_HIST_WORDS * sizeof(uint32_t) + 256 * sizeof(uint16_t);
        const dim3 block(32, nw);
        a.tq_t = t->tq_t;
        a.tq_c = t->tq_c;
        if (old3) {
            switch (c->kind) {
            case LBP_KIND_LBP8: e = fast_launch(k_fast3<LBP_KIND_LBP8>, nb, block, smem, s, a, t); break;
            case LBP_KIND_TLBAP: e = fast_launch(k_fast3<LBP_KIND_TLBAP>, nb, block, smem, s, a, t); break;
            default: e = fast_launch(k_fast3<LBP_KIND_LANADP>, nb, block, smem, s, a, t); break;
            }
            return e;
        }
        const bool cw = codes != NULL, tf = t->tq_t != 0;
        if (cells) { /* one instance per kind (registers as the 1x1 default) */
            switch (c->kind) {
#define F4G(K, TF_, D_, B_)                                                                                 \
    (cw ? fast_launch(k_fast4<K, true, TF_, D_, B_, true>, nb, block, smem, s, a, t)                          \
        : fast_launch(k_fast4<K, false, TF_, D_, B_, true>, nb, block, smem, s, a, t))
            case LBP_KIND_LBP8: e = F4G(LBP_KIND_LBP8, false, 6, 4); break;
            case LBP_KIND_TLBAP: e = tf ? F4G(LBP_KIND_TLBAP, true, 6, 4) : F4G(LBP_KIND_TLBAP, false, 6, 4); break;
            default: e = F4G(LBP_KIND_LANADP, false, 3, 4); break;
#undef F4G
            }
            return e;
        }
        if (wide) {
            switch (c->kind) {
#define F4W(K, TF_, D_)                                                                                     \
    (cw ? fast_launch(k_fast4<K, true, TF_, D_, 1, false, true>, nb, block, smem, s, a, t)                   \
        : fast_launch(k_fast4<K, false, TF_, D_, 1, false, true>, nb, block, smem, s, a, t))
            case LBP_KIND_LBP8: e = F4W(LBP_KIND_LBP8, false, 6); break;
            case LBP_KIND_TLBAP: e = tf ? F4W(LBP_KIND_TLBAP, true, 6) : F4W(LBP_KIND_TLBAP, false, 6); break;
            default: e = F4W(LBP_KIND_LANADP, false, 3); break;
#undef F4W
            }
            return e;
        }
        switch (c->kind) {
        case LBP_KIND_LBP8:
            if (d3)
                e = cw ? fast_launch(k_fast4<LBP_KIND_LBP8, true, false, 3, 5>, nb, block, smem, s, a, t)
                       : fast_launch(k_fast4<LBP_KIND_LBP8, false, false, 3, 5>, nb, block, smem, s, a, t);
            else
                e = cw ? fast_launch(k_fast4<LBP_KIND_LBP8, true, false, 6, 4>, nb, block, smem, s, a, t)
                       : fast_launch(k_fast4<LBP_KIND_LBP8, false, false, 6, 4>, nb, block, smem, s, a, t);
            break;
        case LBP_KIND_TLBAP:
            if (tf && d3)
                e = cw ? fast_launch(k_fast4<LBP_KIND_TLBAP, true, true, 3, 5>, nb, block, smem, s, a, t)
                       : fast_launch(k_fast4<LBP_KIND_TLBAP, false, true, 3, 5>, nb, block, smem, s, a, t);
            else if (tf)
                e = cw ? fast_launch(k_fast4<LBP_KIND_TLBAP, true, true, 6, 4>, nb, block, smem, s, a, t)
                       : fast_launch(k_fast4<LBP_KIND_TLBAP, false, true, 6, 4>, nb, block, smem, s, a, t);
            else
                e = cw ? fast_launch(k_fast4<LBP_KIND_TLBAP, true, false, 6, 4>, nb, block, smem, s, a, t)
                       : fast_launch(k_fast4<LBP_KIND_TLBAP, false, false, 6, 4>, nb, block, smem, s, a, t);
            break;
        default:
            if (d3)
                e = cw ? fast_launch(k_fast4<LBP_KIND_LANADP, true, false, 3, 4>, nb, block, smem, s, a, t)
                       : fast_launch(k_fast4<LBP_KIND_LANADP, false, false, 3, 4>, nb, block, smem, s, a, t);
            else
                e = cw ? fast_launch(k_fast4<LBP_KIND_LANADP, true, false, 6, 3>, nb, block, smem, s, a, t)
                       : fast_launch(k_fast4<LBP_KIND_LANADP, false, false, 6, 3>, nb, block, smem, s, a, t);
            break;
        }
        return e;
    }
    if (c->kind != LBP_KIND_CIRCULAR) {
        prod_args a;
        a.in = in;
        a.pitch = pitch;
        a.in_img = (size_t)h * (size_t)pitch;
        a.w = w;
        a.h = h;
        a.mw = mw;
        a.mh = mh;
        a.codes = (uint8_t *)codes;
        a.opitch = opitch;
        a.out_img = (size_t)mh * (size_t)opitch;
        a.counts = counts;
        a.dim = (int)lbp_dim(c);
        a.nbins = (int)c->nbins;
        a.grid_rows = c->grid_rows;
        a.grid_cols = c->grid_cols;
        a.copies = counts ? smem_copies(a.dim) : 0;
        const dim3 block(32, PROD_TY);
        const dim3 grid((unsigned)((mw + PROD_COLS - 1) / PROD_COLS),
                        (unsigned)((mh + PROD_TY * PROD_RW - 1) / (PROD_TY * PROD_RW)), (unsigned)n);
        const size_t smem = (size_t)a.copies * (size_t)a.dim * sizeof(uint32_t);
        switch (c->kind) {
        case LBP_KIND_LBP8: k_prod3<LBP_KIND_LBP8><<<grid, block, smem, s>>>(a, t->ktab, t->btab); break;
        case LBP_KIND_TLBAP: k_prod3<LBP_KIND_TLBAP><<<grid, block, smem, s>>>(a, t->ktab, t->btab); break;
        default: k_prod3<LBP_KIND_LANADP><<<grid, block, smem, s>>>(a, t->ktab, t->btab); break;
        }
        return cudaGetLastError();
    }
    {
        circ_args a;
        memset(&a, 0, sizeof a);
        lbp_circle(a.rp, a.cp, c->P, c->R);
        a.in = in;
        a.in_img = (size_t)h * (size_t)pitch;
        a.pitch = pitch;
        a.w = w;
        a.h = h;
        a.P = c->P;
        a.method = c->method;
        a.codes = codes;
        a.elem_size = (int)patina_elem_size(c->code_elem);
        a.counts = counts;
        a.dim = (int)lbp_dim(c);
        a.nbins = (int)c->nbins;
        a.grid_rows = c->grid_rows;
        a.grid_cols = c->grid_cols;
        a.vbins = c->vbins;
        a.mapping = c->mapping;
        a.bins = t->bins;
        /* histogram copies: one per lane when bins x 32 words fit 48 KB, else
         * one per block when it fits 44 KB, else global atomics */
        a.copies = !counts                                              ? 0
                   : (size_t)a.dim * 32 * sizeof(uint32_t) <= 48 * 1024 ? 32
                   : (size_t)a.dim * sizeof(uint32_t) <= 44 * 1024      ? 1
                                                                        : 0;
        for (int k = 0; k < c->P; k++) {
            a.rf[k] = floor(a.rp[k]);
            a.cf[k] = floor(a.cp[k]);
        }
        {
            double m = 0.0;
            for (int k = 0; k < c->P; k++) {
                m = fabs(a.rp[k]) > m ? fabs(a.rp[k]) : m;
                m = fabs(a.cp[k]) > m ? fabs(a.cp[k]) : m;
            }
            a.span = (int)ceil(m) + 1;
        }
        if (circ8_ok(c, &a) && !(kv && !strcmp(kv, "circ"))) {
            a.band = C8_BAND;
            if (const char *e = getenv("PATINA_LBP_C8")) /* band (experiments) */
                if (sscanf(e, "%d", &a.band) != 1 || a.band < 1) return cudaErrorInvalidValue;
            if ((h + a.band - 1) / a.band > 65535) a.band = (h + 65534) / 65535; /* the grid's limit */
            const dim3 grid8((unsigned)((w + C8_BX - 1) / C8_BX), (unsigned)((h + a.band - 1) / a.band),
                             (unsigned)n);
            const size_t sm8 = (size_t)a.copies * (size_t)a.dim * sizeof(uint32_t);
            if (c->method == LBP_M_VAR)
                codes ? c8_launch<true, true>(grid8, sm8, s, a) : c8_launch<true, false>(grid8, sm8, s, a);
            else
                codes ? c8_launch<false, true>(grid8, sm8, s, a) : c8_launch<false, false>(grid8, sm8, s, a);
            return cudaGetLastError();
        }
        const dim3 block(CIRC_BX, CIRC_BY);
        const dim3 grid((unsigned)((w + CIRC_BX - 1) / CIRC_BX), (unsigned)((h + CIRC_BY - 1) / CIRC_BY), (unsigned)n);
        const size_t smem = (size_t)a.copies * (size_t)a.dim * sizeof(uint32_t);
        const bool var = c->method == LBP_M_VAR, tile = a.span <= CIRC_SMAX;
        if (tile && var) k_circ<true, true><<<grid, block, smem, s>>>(a);
        else if (tile) k_circ<true, false><<<grid, block, smem, s>>>(a);
        else if (var) k_circ<false, true><<<grid, block, smem, s>>>(a);
        else k_circ<false, false><<<grid, block, smem, s>>>(a);
        return cudaGetLastError();
    }
}

static int pitch16(int w) { return (w + 15) / 16 * 16; }

/* Whether one image fits the production kernels' launch grids. */
static int launchable(const lbp_conf_t *c, int w, int h)
{
    int mw, mh;
    lbp_map_shape(c, w, h, &mw, &mh);
    if (c->kind != LBP_KIND_CIRCULAR) return (mh + PROD_TY * PROD_RW - 1) / (PROD_TY * PROD_RW) <= 65535;
    return (h + CIRC_BY - 1) / CIRC_BY <= 65535;
}

extern "C" patina_status patina_gpu_lbp(patina_gpu_t *g, const struct lbp_conf *c, void *out,
                                        const patina_image_t *imgs, size_t n, patina_status *st)
{
    patina_status st_ = PATINA_OK;
    cudaStream_t s = NULL;
    dev_tables t;
    size_t dim, ebytes;
    uint32_t *hcounts = NULL, *dcounts = NULL;
    uint8_t *drgb = NULL, *dgrey = NULL;
    size_t cap_rgb = 0, cap_grey = 0;
    (void)g;
    memset(&t, 0, sizeof t);
    if (!c || (n && (!out || !imgs))) return patina__fail(PATINA_E_INVALID, "gpu: lbp: null argument");
    dim = lbp_dim(c);
    ebytes = dim * patina_elem_size(c->hist_elem);
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if ((st_ = tables_init(&t, c, s)) != PATINA_OK) goto done;
    hcounts = (uint32_t *)malloc(dim * sizeof *hcounts);
    if (!hcounts) {
        st_ = patina__fail(PATINA_E_NOMEM, "gpu: lbp: out of memory");
        goto done;
    }
    CU(cudaMallocAsync((void **)&dcounts, dim * sizeof *dcounts, s));
    for (size_t i = 0; i < n; i++) {
        const patina_image_t *im = &imgs[i];
        unsigned char *o = (unsigned char *)out + i * ebytes;
        if (im->width < 0 || im->height < 0 ||
            (im->width > 0 && im->height > 0 && (!im->data || im->stride < 3 * (size_t)im->width))) {
            memset(o, 0, ebytes);
            if (st) st[i] = patina__fail(PATINA_E_INVALID, "gpu: lbp: image %zu is malformed", i);
            continue;
        }
        const int w = im->width, h = im->height, pitch = pitch16(w > 0 ? w : 1);
        const size_t need_rgb = (size_t)h * 3 * (size_t)w, need_grey = (size_t)(h + 2) * (size_t)pitch + 16;
        if (!launchable(c, w, h)) {
            /* beyond the launch grid's limits (over ~4 million rows): the
             * CPU path, same bytes */
            uint8_t *gh = (uint8_t *)malloc((size_t)w * (size_t)h);
            patina_status si = gh ? patina_image_to_grey(gh, im)
                                  : patina__fail(PATINA_E_NOMEM, "gpu: lbp: out of memory");
            if (si == PATINA_OK) si = lbp_fast_counts(hcounts, c, gh, w, h, (size_t)w, NULL);
            free(gh);
            if (si == PATINA_OK) lbp_hist_finish(o, c, hcounts);
            else memset(o, 0, ebytes);
            if (st) st[i] = si;
            continue;
        }
        CU(cudaMemsetAsync(dcounts, 0, dim * sizeof *dcounts, s));
        if ((size_t)w * (size_t)h > 0) {
            if (need_rgb > cap_rgb) {
                if (drgb) CU(cudaFreeAsync(drgb, s));
                drgb = NULL;
                CU(cudaMallocAsync((void **)&drgb, need_rgb, s));
                cap_rgb = need_rgb;
            }
            if (need_grey > cap_grey) {
                if (dgrey) CU(cudaFreeAsync(dgrey, s));
                dgrey = NULL;
                CU(cudaMallocAsync((void **)&dgrey, need_grey, s));
                cap_grey = need_grey;
            }
            CU(cudaMemcpy2DAsync(drgb, 3 * (size_t)w, im->data, im->stride, 3 * (size_t)w, (size_t)h,
                                 cudaMemcpyHostToDevice, s));
            k_grey<<<dim3((unsigned)((w + 255) / 256), (unsigned)(h < 65535 ? h : 65535)), 256, 0, s>>>(
                drgb, 3 * (size_t)w, dgrey, pitch, w, h);
            CU(cudaGetLastError());
            CU(launch_prod(c, &t, dgrey, pitch, w, h, 1, NULL, 0, dcounts, s));
        }
        CU(cudaMemcpyAsync(hcounts, dcounts, dim * sizeof *dcounts, cudaMemcpyDeviceToHost, s));
        CU(cudaStreamSynchronize(s));
        lbp_hist_finish(o, c, hcounts);
        if (st) st[i] = PATINA_OK;
    }
done:
    if (s) {
        if (drgb) cudaFreeAsync(drgb, s);
        if (dgrey) cudaFreeAsync(dgrey, s);
        if (dcounts) cudaFreeAsync(dcounts, s);
        tables_free(&t, s);
        cudaStreamSynchronize(s);
        cudaStreamDestroy(s);
    }
    free(hcounts);
    return st_;
}

/* ------------------------------------------------------------------- lab */

extern "C" const char *patina_gpu_lbp_lab_name(int variant)
{
    static const char *const names[] = {"global 16x16", "global 32x32", "shared 16x16",
                                        "shared 32x32", "production (codes)", "production (hist)"};
    return variant >= 0 && variant < PATINA_LBP_LAB_COUNT ? names[variant] : "?";
}

static cudaError_t launch_lab(int variant, const lbp_conf_t *c, const uint8_t *din, int w, int h,
                              int n, uint8_t *dout, cudaStream_t s)
{
    const int B = variant == PATINA_LBP_LAB_GLOBAL16 || variant == PATINA_LBP_LAB_SHARED16 ? 16 : 32;
    const dim3 block(B, B);
    const double th = c->th;
    if (variant == PATINA_LBP_LAB_GLOBAL16 || variant == PATINA_LBP_LAB_GLOBAL32) {
        const dim3 grid((unsigned)((w + B - 1) / B), (unsigned)((h + B - 1) / B), (unsigned)n);
        switch (c->kind) {
        case LBP_KIND_LBP8: k_global<LBP_KIND_LBP8><<<grid, block, 0, s>>>(din, dout, w, h, th); break;
        case LBP_KIND_TLBAP: k_global<LBP_KIND_TLBAP><<<grid, block, 0, s>>>(din, dout, w, h, th); break;
        default: k_global<LBP_KIND_LANADP><<<grid, block, 0, s>>>(din, dout, w, h, th); break;
        }
    } else {
        const dim3 grid((unsigned)((w - 2 + B - 1) / B), (unsigned)((h - 2 + B - 1) / B), (unsigned)n);
#define LAB_SHARED(BB)                                                                               \
        switch (c->kind) {                                                                     \
        case LBP_KIND_LBP8: k_shared<LBP_KIND_LBP8, BB><<<grid, block, 0, s>>>(din, dout, w, h, th); break; \
        case LBP_KIND_TLBAP: k_shared<LBP_KIND_TLBAP, BB><<<grid, block, 0, s>>>(din, dout, w, h, th); break; \
        default: k_shared<LBP_KIND_LANADP, BB><<<grid, block, 0, s>>>(din, dout, w, h, th); break; \
        }
        if (B == 16) {
            LAB_SHARED(16)
        } else {
            LAB_SHARED(32)
        }
#undef LAB_SHARED
    }
    return cudaGetLastError();
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Keeps the GPU busy for ns nanoseconds (one thread): benchmarks queue their
 * launches behind it. */
__global__ void k_busy(long long ns)
{
    long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

extern "C" patina_status patina_gpu_lbp_lab(int variant, const struct lbp_conf *c, const uint8_t *grey,
                                            int w, int h, int n, void *codes, uint32_t *counts,
                                            int reps, double *ms, double *ms_stream)
{
    patina_status st_ = PATINA_OK;
    cudaStream_t s = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    dev_tables t;
    uint8_t *din = NULL;
    void *dout = NULL;
    uint32_t *dcounts = NULL;
    double *times = NULL;
    int mw, mh;
    const int lab = variant <= PATINA_LBP_LAB_SHARED32;
    const int pitch = lab ? w : pitch16(w);
    int opitch = 0;
    size_t dim = lbp_dim(c), in_bytes, out_bytes = 0;
    /* one launch of the variant (the results in dout, dcounts) */
    const auto launch = [&]() -> cudaError_t {
        if (lab)
            return mw > 0 && mh > 0 && n > 0 ? launch_lab(variant, c, din, w, h, n, (uint8_t *)dout, s) : cudaSuccess;
        return launch_prod(c, &t, din, pitch, w, h, n, variant == PATINA_LBP_LAB_CODES ? dout : NULL, opitch,
                           variant == PATINA_LBP_LAB_HIST || counts ? dcounts : NULL, s);
    };
    memset(&t, 0, sizeof t);
    if (ms) *ms = 0.0;
    if (ms_stream) *ms_stream = 0.0;
    if (variant < 0 || variant >= PATINA_LBP_LAB_COUNT || w < 0 || h < 0 || n < 0 || !grey)
        return patina__fail(PATINA_E_INVALID, "gpu: lbp lab: bad arguments");
    if (lab && c->kind == LBP_KIND_CIRCULAR)
        return patina__fail(PATINA_E_INVALID, "gpu: lbp lab: the paper's kernels are 3x3 only");
    if (n > 65535 || !launchable(c, w, h))
        return patina__fail(PATINA_E_LIMIT, "gpu: lbp lab: %d images of %dx%d exceed a launch", n, w, h);
    if (variant == PATINA_LBP_LAB_HIST) codes = NULL;
    if (lab) counts = NULL;
    if (reps < 1) reps = 1;
    lbp_map_shape(c, w, h, &mw, &mh);
    in_bytes = (size_t)n * (size_t)h * (size_t)pitch + 32 + 2 * (size_t)pitch;
    if (lab) {
        out_bytes = (size_t)n * (size_t)mw * (size_t)mh;
    } else if (c->kind != LBP_KIND_CIRCULAR) {
        opitch = pitch16(mw > 0 ? mw : 1);
        out_bytes = (size_t)n * (size_t)mh * (size_t)opitch;
    } else {
        out_bytes = (size_t)n * (size_t)mw * (size_t)mh * patina_elem_size(c->code_elem);
    }
    times = (double *)malloc(sizeof(double) * (size_t)reps);
    if (!times) return patina__fail(PATINA_E_NOMEM, "gpu: lbp lab: out of memory");
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    if ((st_ = tables_init(&t, c, s)) != PATINA_OK) goto done;
    CU(cudaMallocAsync((void **)&din, in_bytes, s));
    CU(cudaMemsetAsync(din, 0, in_bytes, s));
    if (out_bytes) CU(cudaMallocAsync(&dout, out_bytes, s));
    if (!lab) CU(cudaMallocAsync((void **)&dcounts, (size_t)n * dim * sizeof(uint32_t) + 4, s));
    if ((size_t)w * (size_t)h * (size_t)n > 0)
        CU(cudaMemcpy2DAsync(din, (size_t)pitch, grey, (size_t)w, (size_t)w, (size_t)h * (size_t)n,
                             cudaMemcpyHostToDevice, s));
    for (int r = -1; r < reps; r++) {
        if (dcounts) CU(cudaMemsetAsync(dcounts, 0, (size_t)n * dim * sizeof(uint32_t), s));
        CU(cudaEventRecord(e0, s));
        CU(launch());
        CU(cudaEventRecord(e1, s));
        CU(cudaEventSynchronize(e1));
        if (r >= 0) {
            float f = 0.0f;
            CU(cudaEventElapsedTime(&f, e0, e1));
            times[r] = (double)f;
        }
    }
    if (codes && out_bytes && mw > 0 && mh > 0 && n > 0) {
        if (!lab && c->kind != LBP_KIND_CIRCULAR)
            CU(cudaMemcpy2DAsync(codes, (size_t)mw, dout, (size_t)opitch, (size_t)mw, (size_t)mh * (size_t)n,
                                 cudaMemcpyDeviceToHost, s));
        else
            CU(cudaMemcpyAsync(codes, dout, out_bytes, cudaMemcpyDeviceToHost, s));
    }
    if (counts && dcounts)
        CU(cudaMemcpyAsync(counts, dcounts, (size_t)n * dim * sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
    CU(cudaStreamSynchronize(s));
    qsort(times, (size_t)reps, sizeof *times, cmp_double);
    if (ms) *ms = times[reps / 2];
    if (ms_stream && mw > 0 && mh > 0 && n > 0) {
        /* the GPU busy for 2 ms while the host queues e0, the reps launches
         * and e1 (counts accumulate over them: the results are above) */
        float f = 0.0f;
        k_busy<<<1, 1, 0, s>>>(2000000);
        CU(cudaGetLastError());
        CU(cudaEventRecord(e0, s));
        for (int r = 0; r < reps; r++) CU(launch());
        CU(cudaEventRecord(e1, s));
        CU(cudaEventSynchronize(e1));
        CU(cudaEventElapsedTime(&f, e0, e1));
        *ms_stream = (double)f / reps;
    }
done:
    if (s) {
        if (din) cudaFreeAsync(din, s);
        if (dout) cudaFreeAsync(dout, s);
        if (dcounts) cudaFreeAsync(dcounts, s);
        tables_free(&t, s);
        cudaStreamSynchronize(s);
        cudaStreamDestroy(s);
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    free(times);
    return st_;
}

extern "C" patina_status patina_gpu_lbp_copy_bandwidth(size_t bytes, int reps, double *gbps)
{
    patina_status st_ = PATINA_OK;
    void *a = NULL, *b = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double *times = NULL;
    *gbps = 0.0;
    if (reps < 1) reps = 1;
    times = (double *)malloc(sizeof(double) * (size_t)reps);
    if (!times) return patina__fail(PATINA_E_NOMEM, "gpu: lbp: out of memory");
    CU(cudaMalloc(&a, bytes));
    CU(cudaMalloc(&b, bytes));
    CU(cudaMemset(a, 1, bytes));
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    for (int r = -1; r < reps; r++) {
        CU(cudaEventRecord(e0, 0));
        CU(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0));
        CU(cudaEventRecord(e1, 0));
        CU(cudaEventSynchronize(e1));
        if (r >= 0) {
            float f = 0.0f;
            CU(cudaEventElapsedTime(&f, e0, e1));
            times[r] = (double)f;
        }
    }
    qsort(times, (size_t)reps, sizeof *times, cmp_double);
    *gbps = 2.0 * (double)bytes / (times[reps / 2] * 1e-3) / 1e9;
done:
    if (a) cudaFree(a);
    if (b) cudaFree(b);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    free(times);
    return st_;
}
