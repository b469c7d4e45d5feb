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

__device__ __forceinline__ int cell_of(int i, int parts, int len)
{
    return (int)((((long long)i + 1) * parts - 1) / len);
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

/* ----------------------------------------------------- production, circular */

/* By value (kernel parameters): concurrent launches with different P, R
 * cannot disturb each other. */
struct circ_args {
    double rp[LBP_MAX_P], cp[LBP_MAX_P]; /* scikit-image's sample offsets */
    const uint8_t *in;
    size_t in_img;
    int pitch, w, h;
    int P, method;
    void *codes;            /* (n, h, w) of elem, dense, or NULL */
    int elem_size;          /* 1, 2, 4, or 8 (var) */
    uint32_t *counts;
    int dim, nbins, grid_rows, grid_cols, vbins, mapping;
    const uint32_t *bins;   /* code -> bin (ncodes <= 65536), or NULL */
    int shared_hist;
    int span;               /* tile halo: every sample lies within span-1 pixels */
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
template <bool TILE>
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
    if (a.counts && a.shared_hist)
        for (int i = tid; i < a.dim; i += nt) sh[i] = 0;
    if (TILE) {
        const int tn = tw * (CIRC_BY + 2 * a.span);
        for (int i = tid; i < tn; i += nt) {
            const int r = ty0 + i / tw, c = tx0 + i % tw;
            tile[i] = r >= 0 && r < a.h && c >= 0 && c < a.w ? in[(size_t)r * (size_t)a.pitch + (size_t)c] : 0;
        }
    }
    if (TILE || (a.counts && a.shared_hist)) __syncthreads();
    auto fetch = [&](long r, long c) -> double {
        if (TILE) return (double)tile[(r - ty0) * tw + (c - tx0)];
        return px_or_zero(in, a.pitch, a.w, a.h, r, c);
    };
    if (x < a.w && y < a.h) {
        const double centre = (double)in[(size_t)y * (size_t)a.pitch + (size_t)x];
        uint32_t bits = 0;
        double sum = 0.0, sq = 0.0;
        for (int k = 0; k < a.P; k++) {
            const double yy = (double)y + a.rp[k], xx = (double)x + a.cp[k];
            const long minr = (long)floor(yy), maxr = (long)ceil(yy);
            const long minc = (long)floor(xx), maxc = (long)ceil(xx);
            const double t = lbp_bilinear(fetch(minr, minc), fetch(minr, maxc), fetch(maxr, minc),
                                          fetch(maxr, maxc), yy - (double)minr, xx - (double)minc);
            bits |= (uint32_t)(t - centre >= 0) << k;
            sum += t;
            sq += t * t;
        }
        const size_t o = ((size_t)img * (size_t)a.h + (size_t)y) * (size_t)a.w + (size_t)x;
        uint32_t bin;
        if (a.method == LBP_M_VAR) {
            double v = (sq - (sum * sum) / (double)a.P) / (double)a.P;
            if (v == 0) v = __longlong_as_double(0x7ff8000000000000ll); /* the reference's NAN bits */
            if (a.codes) ((double *)a.codes)[o] = v;
            bin = 0;
            if (v > 0.0) {
                const double s = sqrt(v) * (double)a.vbins / 128.0;
                bin = s >= (double)a.vbins ? (uint32_t)a.vbins - 1 : (uint32_t)s;
            }
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
            if (a.shared_hist) atomicAdd(&sh[idx], 1u);
            else atomicAdd(&gcount[idx], 1u);
        }
    }
    if (a.counts && a.shared_hist) {
        __syncthreads();
        for (int i = tid; i < a.dim; i += nt)
            if (sh[i]) atomicAdd(&gcount[i], sh[i]);
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
};

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

/* Launches the production kernel for n images of w x h (pitched input). */
static cudaError_t launch_prod(const lbp_conf_t *c, const dev_tables *t, const uint8_t *in, int pitch,
                               int w, int h, int n, void *codes, int opitch, uint32_t *counts,
                               cudaStream_t s)
{
    int mw, mh;
    lbp_map_shape(c, w, h, &mw, &mh);
    if (mw == 0 || mh == 0 || n == 0) return cudaSuccess;
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
        a.shared_hist = counts && (size_t)a.dim * sizeof(uint32_t) <= 44 * 1024;
        {
            double m = 0.0;
            for (int k = 0; k < c->P; k++) {
                m = fabs(a.rp[k]) > m ? fabs(a.rp[k]) : m;
                m = fabs(a.cp[k]) > m ? fabs(a.cp[k]) : m;
            }
            a.span = (int)ceil(m) + 1;
        }
        const dim3 block(CIRC_BX, CIRC_BY);
        const dim3 grid((unsigned)((w + CIRC_BX - 1) / CIRC_BX), (unsigned)((h + CIRC_BY - 1) / CIRC_BY), (unsigned)n);
        const size_t smem = a.shared_hist ? (size_t)a.dim * sizeof(uint32_t) : 0;
        if (a.span <= CIRC_SMAX)
            k_circ<true><<<grid, block, smem, s>>>(a);
        else
            k_circ<false><<<grid, block, smem, s>>>(a);
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

extern "C" patina_status patina_gpu_lbp_lab(int variant, const struct lbp_conf *c, const uint8_t *grey,
                                            int w, int h, int n, void *codes, uint32_t *counts,
                                            int reps, double *ms)
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
    memset(&t, 0, sizeof t);
    if (ms) *ms = 0.0;
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
        if (lab) {
            if (mw > 0 && mh > 0 && n > 0) CU(launch_lab(variant, c, din, w, h, n, (uint8_t *)dout, s));
        } else {
            CU(launch_prod(c, &t, din, pitch, w, h, n, variant == PATINA_LBP_LAB_CODES ? dout : NULL,
                           opitch, variant == PATINA_LBP_LAB_HIST || counts ? dcounts : NULL, s));
        }
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
