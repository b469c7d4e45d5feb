/* The LBP family's CUDA kernels and their launch planning, shared by the
 * library (src/gpu/lbp.cu, which instantiates the production kernels) and
 * the kernel lab (lab/lbp/, which instantiates the other variants). Every
 * kernel and helper here is `static`: each translation unit that includes
 * this header gets its own copies, so the library and a lab program can
 * instantiate the same templates without clashing. Internal to src/gpu and
 * lab/; nothing here includes src/features (the input contract is
 * patina_gpu_lbp_conf_t, gpu/gpu.h).
 *
 * Results: the codes and counts of the C reference (src/features/lbp.c),
 * byte for byte. Build with --fmad=false: the circular kernels evaluate the
 * reference's binary64 expressions and nothing may be contracted.
 *
 * Kernels (docs/lbp.md describes the algorithms, docs/lab/lbp.md how they
 * were found):
 *   k_prod3   3x3 kinds: a warp slides a 3-row window over 512 columns,
 *             byte-SIMD codes, run-length merged histograms; grids of cells
 *             narrower than 16 columns and code maps without histograms
 *   k_fast4   3x3 kinds with fused histograms: fp16x2 arithmetic, per-lane
 *             counters, persistent blocks; the wide layout (one 16-warp block
 *             per SM) for whole-image histograms, 4-warp blocks for grids of
 *             cells and where a block cannot have the wide layout's shared
 *             memory
 *   k_circ    circular LBP, any P and R: one pixel per thread, the
 *             reference's bilinear interpolation
 *   k_circ8   circular LBP with P = 8, R = 1: the same arithmetic
 *             reorganised per column
 *   k_grey    RGB to grey by the project's rule (algo/grey.h)
 *   k_busy    keeps the GPU busy (timings of launches queued back to back) */
#ifndef PATINA_GPU_LBP_KERNELS_CUH
#define PATINA_GPU_LBP_KERNELS_CUH

#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "algo/grey.h"
#include "algo/lbp_core.h"
#include "gpu/gpu.h"

static_assert(PGPU_LBP_MAX_P == LBP_MAX_P, "gpu.h's sample arrays hold LBP_MAX_P offsets");

#define FULL 0xffffffffu
#define PROD_TY 4        /* warps per block of k_prod3 */
#define PROD_RW 16       /* output rows per warp */
#define PROD_COLS 512    /* output columns per warp */

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
static __device__ __forceinline__ uint32_t shift1(uint32_t lo, uint32_t hi) { return __byte_perm(lo, hi, 0x4321); }
static __device__ __forceinline__ uint32_t shift2(uint32_t lo, uint32_t hi) { return __byte_perm(lo, hi, 0x5432); }

struct rowv {
    uint32_t v[5]; /* 16 bytes of this lane + the first 4 of the next lane */
};

static __device__ __forceinline__ void load_row(rowv &r, const uint8_t *row, int x0, int pitch, int lane)
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
static __device__ __forceinline__ uint32_t word_codes(const rowv &a, const rowv &m, const rowv &b, int j,
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
static __device__ __forceinline__ int div_nn(long long num, int den)
{
    return (unsigned long long)num >> 32 ? (int)(num / den) : (int)((unsigned)num / (unsigned)den);
}

/* the cell (column or row) of index i of a side of len cut in parts cells */
static __device__ __forceinline__ int cell_of(int i, int parts, int len)
{
    return div_nn(((long long)i + 1) * parts - 1, len);
}

/* Flushes a run of `run` equal bins `idx` into the histogram. */
static __device__ __forceinline__ void flush(uint32_t *h, uint32_t *g, int idx, uint32_t run)
{
    if (run == 0) return;
    if (h) atomicAdd(&h[idx], run);
    else atomicAdd(&g[idx], run);
}

template <int KIND>
static __global__ void __launch_bounds__(32 * PROD_TY) k_prod3(prod_args a, const uint8_t *__restrict__ ktab_g,
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

/* The fused-histogram kernels of the 3x3 kinds (k_fast4 here, k_fast3 in
 * the lab) share this machinery. Tiling as k_prod3: a warp covers 512
 * output columns, 16 per lane, with a window sliding down its rows.
 *
 * - Arithmetic on the fp16x2 pipe. A byte b becomes the half 1024 + b
 *   (0x6400 | b, one byte permute per two pixels), so every comparison of
 *   the three kinds is exact small-integer fp16 arithmetic: saturating
 *   sub/mul give the 0/1 bits (n > t: sat(n - t); LANADP's "both sums on one
 *   side of 2v": (s1 - 2v)(s2 - 2v) >= 0, see f4_pair), and a fused
 *   multiply-add by 2^(k-24) (an fp16 subnormal whose bits are 1 << k; f16
 *   arithmetic keeps subnormals) builds the code directly as the integer
 *   bits of each half. sm_90 emulates the byte-SIMD compares of k_prod3
 *   (__vcmpgeu4 ...) with several integer instructions each, and its integer
 *   pipe has half the fp16x2 rate.
 * - Per-lane histograms: counter (code, lane) at byte offset code * 128 +
 *   lane * 4 of a 32 KB block histogram shared by the block's warps (the
 *   wide layout: code * 256 + lane * 4, see WIDE_WARPS), so the 32 atomic
 *   adds of one instruction always hit 32 different banks (no conflicts, no
 *   run-length merging), and each address is one or two instructions from
 *   the code bits. The block adds its 32 columns per code (code -> bin
 *   through the mapping's table) to the image's counts when it moves on to
 *   the next image. Lanes past the map's width count their last columns and
 *   take them back out.
 * - A persistent grid: blocks walk the (image, strip, band) tasks in order;
 *   the band height (at most 32 rows) is chosen so that a single image still
 *   gives every warp a task. The kernel is bound by instruction issue and
 *   latency, not by DRAM: occupancy and instructions per pixel move it. */

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

static __device__ __forceinline__ uint32_t hsub_sat(uint32_t a, uint32_t b)
{
    uint32_t d;
    asm("sub.rn.sat.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
static __device__ __forceinline__ uint32_t hsub(uint32_t a, uint32_t b)
{
    uint32_t d;
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
static __device__ __forceinline__ uint32_t hneg(uint32_t a)
{
    uint32_t d;
    asm("neg.f16x2 %0, %1;" : "=r"(d) : "r"(a));
    return d;
}
static __device__ __forceinline__ uint32_t hmul_sat(uint32_t a, uint32_t b)
{
    uint32_t d;
    asm("mul.rn.sat.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}
static __device__ __forceinline__ uint32_t hfma(uint32_t a, uint32_t b, uint32_t c)
{
    uint32_t d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
static __device__ __forceinline__ uint32_t hmax(uint32_t a, uint32_t b)
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
static __device__ __forceinline__ void conv_pairs(uint32_t e[9], uint32_t o[8], const uint4 &q, uint32_t v4)
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

static __device__ __forceinline__ void fast_red(uint32_t addr, uint32_t v)
{
    asm volatile("red.shared.add.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

/* One output row of a lane: codes (when asked), histogram counts. */
template <int NW = FAST_WARPS, int STRIDE = 32>
static __device__ __forceinline__ void fast_flush(const fast_args &a, uint32_t *hist, int img, int tid,
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

/* First row (column) of cell k of n over a map side of m: the smallest y with
 * lbp_cell_row(y) = k. */
static __device__ __forceinline__ int cell_start(int k, int n, int m) { return div_nn((long long)k * m + n, n) - 1; }

/* k_fast4's flush: fast_flush for one image; with a grid (key = image *
 * groups + strip * grid_rows + cell row) lane l's counters belong to the cell
 * column of its first column. A cell's lanes are contiguous: segment k of the
 * strip is cell column cc(lane 0) + k (cells are >= 16 columns wide, so every
 * cell of the strip has a lane; `starts` marks each segment's first lane).
 * Thread t takes codes t, t + 128 as fast_flush does (a row's 8 quads of
 * counters from a rotated start, 16-byte loads without bank conflicts), adds
 * each segment's counters and emits one global atomic per non-zero segment
 * sum when it crosses a segment's start. */
template <bool GRID>
static __device__ __forceinline__ void f4_flush(const fast_args &a, uint32_t *hist, int key, int tid,
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

/* k_fast4: the 3x3 kinds with fused histograms (the machinery above).
 * - The row loop is unrolled D rows deep (D = 6, or 3) over static rings
 *   (three converted rows, D raw rows in flight): no register moves between
 *   rows. Loads are unconditional (predicated merges would make ptxas copy
 *   the ring): the row index is clamped to the task's last input row, and
 *   each lane loads the 4 bytes after its 16 itself (an L1 hit) rather than
 *   taking them from its neighbour by a shuffle.
 * - No code-map branch in the histogram-only instances (template CODES);
 *   the take-back of partial lanes behind one warp-uniform test.
 * - Band height: for large batches, the height whose last round of task
 *   groups is fullest (ceil(groups / blocks) * (rows + 3) least).
 * - lbp8: n >= c <=> not c > n: the code is 255 minus the bits sat(c - n),
 *   accumulated from 255 with weights -2^(k-24).
 * - TLBAP: the window maximum from per-row horizontal maxima (each input
 *   row's max of three computed once, for the three output rows that use it;
 *   3-way fp16 max), and the threshold k(m) = floor(th * m) as one fp16 fma,
 *   1024 + k(m) = fma(1024 + m, t, c), with t and c found on the host and
 *   checked there for all 256 maxima (tlbap_fma_consts; the shared-memory
 *   table when no pair exists for th: th = 0.9, 0.5, 0.25, 0.75, 0.8 have
 *   one, 0.37, 0.7 not).
 * - LANADP: the differences of adjacent ring neighbours are differences of
 *   vertically or horizontally adjacent pixels, each shared by four windows:
 *   computed once per input row (horizontal, 16 per lane) and once per pair
 *   of rows (vertical, 9 per lane) instead of 8 per pair of output pixels;
 *   P7, R7 of a pair are -R3, -P3 of the next. D = 3 and 4 blocks per SM
 *   (127 registers: 16 warps per SM).
 * - The wide layout (WIDE, whole-image histograms where a block may have
 *   WIDE_SMEM of shared memory): one block of 16 warps per SM, a counter
 *   address is one PRMT per pixel, and groups of 16 tasks run on into the
 *   next image (two histogram halves by image parity), so no group slot
 *   idles at an image's end.
 * - Grids of cells (GRID, cells at least 16 columns wide): a lane's counters
 *   belong to the cell column of its first column; see f4_task and f4_flush. */

/* One converted input row of k_fast4: pairs (e, o) as conv_pairs; TLBAP also
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
static __device__ __forceinline__ void f4_conv(frow<KIND> &h, const rawrow &r)
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
static __device__ __forceinline__ void f4_vert(frow<KIND> &up, const frow<KIND> &down)
{
    if (KIND == LBP_KIND_LANADP) {
#pragma unroll
        for (int i = 0; i < 9; i++) up.v[i] = hsub(down.e[i], up.e[i]);
    }
}

/* Codes of output pair i (columns 2i, 2i+1 of the lane) as the bits of each
 * half, from rows a (above), m, b (below). Neighbours n[k]: right,
 * top-right, top, top-left, left, bottom-left, bottom, bottom-right (bit k,
 * the weights of the C reference). LANADP: bit k is (s1 - 2v)(s2 - 2v) >= 0
 * with s1 = n[k+1] + n[k+2], s2 = n[k-1] + n[k-2], v = n[k] (indices mod
 * 8); with D[j] = n[j+1] - n[j], s1 - 2v = 2D[k] + D[k+1] = P[k] and
 * s2 - 2v = -(D[k-2] + 2D[k-1]) = -R[k-2], so the bit is clear exactly when
 * P[k] * R[k-2] >= 1, i.e. sat(P * R) = 1 (integers up to 765 in magnitude,
 * exact; a product past the fp16 range is an infinity of the right sign). */
template <int KIND, bool TF>
static __device__ __forceinline__ uint32_t f4_pair(const frow<KIND> &a, const frow<KIND> &m, const frow<KIND> &b, int i,
                                            const uint16_t *kt, uint32_t tq_t, uint32_t tq_c, const uint32_t *P3,
                                            const uint32_t *R3)
{
    uint32_t acc;
    if (KIND == LBP_KIND_LANADP) {
        /* D[j] = n[j+1] - n[j] from the shared differences:
         * D0 = -a.v[i+1], D1 = -a.ho[i], D2 = -a.he[i], D3 = a.v[i],
         * D4 = m.v[i], D5 = b.he[i], D6 = b.ho[i], D7 = -m.v[i+1];
         * P[j] = 2 D[j] + D[j+1], R[j] = D[j] + 2 D[j+1] */
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
static __device__ __forceinline__ uint32_t f4_alo(uint32_t acc, uint32_t lb) { return __byte_perm(acc, lb, 0x7604); }
static __device__ __forceinline__ uint32_t f4_ahi(uint32_t acc, uint32_t lb) { return __byte_perm(acc, lb, 0x7624); }

static __device__ __forceinline__ uint32_t f4_lo(uint32_t acc, uint32_t hbase)
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
static __device__ __forceinline__ uint32_t f4_gaddr(uint32_t acc, const uint32_t *fl, uint32_t hbase)
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
static __device__ __forceinline__ void f4_row(const fast_args &a, const frow<KIND> &ra, const frow<KIND> &rm,
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
static __device__ __forceinline__ const uint8_t *f4_rowptr(const uint8_t *base, unsigned row, unsigned pitch)
{
    unsigned long long p;
    asm("mad.wide.u32 %0, %1, %2, %3;" : "=l"(p) : "r"(row), "r"(pitch), "l"(base));
    return reinterpret_cast<const uint8_t *>(p);
}

template <int KIND, bool CODES, bool TF, int D, bool GRID, bool WIDE>
static __device__ __forceinline__ void f4_task(const fast_args &a, int img, int strip, int crow, int band, int lane,
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
static __global__ void __launch_bounds__(32 * (WIDE ? WIDE_WARPS : FAST_WARPS), BPS)
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

static __device__ __forceinline__ double px_or_zero(const uint8_t *in, int pitch, int w, int h, long r, long c)
{
    if (r < 0 || r >= h || c < 0 || c >= w) return 0.0;
    return (double)in[(size_t)r * (size_t)pitch + (size_t)c];
}

/* var from the samples' sum and sum of squares (scikit-image's formula; 0
 * becomes the reference's NaN bits) into *v, and its histogram bin */
static __device__ __forceinline__ uint32_t circ_var(double sum, double sq, int P, int vbins, double *v)
{
    double var = (sq - (sum * sum) / (double)P) / (double)P;
    if (var == 0) var = __longlong_as_double(0x7ff8000000000000ll);
    *v = var;
    if (!(var > 0.0)) return 0;
    const double s = sqrt(var) * (double)vbins / 128.0;
    return s >= (double)vbins ? (uint32_t)vbins - 1 : (uint32_t)s;
}

/* v (0 .. 2^31 - 1) as a binary64, exactly: 2^52 + v with the 2^52 taken away */
static __device__ __forceinline__ double c8_dbl(uint32_t v)
{
    return __hiloint2double(0x43300000, (int)v) - 4503599627370496.0;
}

/* TILE: the block's pixels plus a halo of `span` in shared memory, zeros
 * outside the image (scikit-image's cval), else bounds-checked global reads;
 * VAR: method var (the
 * samples' sum and sum of squares). A sample's corners are y + floor(rp)
 * and x + floor(cp) (and + 1): y + rp is rounded by at most half an ulp of
 * y, far less than rp's distance to an integer (rp is a multiple of 1e-5),
 * so floor(y + rp) = y + floor(rp); the weights dr = (y + rp) - (y +
 * floor(rp)) and dc are the reference's. Where rp (cp) is an integer, dr
 * (dc) is 0 and the reference's expression is exactly its top (left) half:
 * those samples skip the other half. Histogram copies: a.copies (32: one per
 * lane, 1, 0: global atomics). */
template <bool TILE, bool VAR>
static __global__ void __launch_bounds__(CIRC_BX * CIRC_BY) k_circ(circ_args a)
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
 * 32 words) when that fits, else one per block, else global atomics. */
#define C8_BX 128   /* columns of a block, one per thread */
#define C8_BAND 32  /* output rows of a block (circ_args.band) */

/* VAR: method var (binary64 codes, variance bins); CODES: write the code
 * map; COPIES: histogram copies in shared memory (32: one per lane, 1, or 0:
 * global atomics). Other methods and mappings: the code and the bin of each
 * of the 256 sign patterns from two tables in shared memory. */
template <bool VAR, bool CODES, int COPIES>
static __global__ void __launch_bounds__(C8_BX) k_circ8(circ_args a)
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

/* n images (blockIdx.z) of w x h from RGB (rows rgb_pitch bytes apart,
 * rgb_img bytes per image) to grey (rows `pitch` bytes apart, grey_img bytes
 * per image) by the project's rule (algo/grey.h, as patina_image_to_grey). */
static __global__ void k_grey(const uint8_t *__restrict__ rgb, size_t rgb_pitch, size_t rgb_img,
                              uint8_t *__restrict__ grey, int pitch, size_t grey_img, int w, int h)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    rgb += (size_t)blockIdx.z * rgb_img;
    grey += (size_t)blockIdx.z * grey_img;
    for (int y = blockIdx.y; x < w && y < h; y += gridDim.y) {
        const uint8_t *p = rgb + (size_t)y * rgb_pitch + 3 * (size_t)x;
        grey[(size_t)y * (size_t)pitch + (size_t)x] = grey_bt601(p[0], p[1], p[2]);
    }
}

/* Launches k_grey for n images (n <= 65535). */
static inline cudaError_t grey_launch(const uint8_t *rgb, size_t rgb_pitch, size_t rgb_img, uint8_t *grey,
                                      int pitch, size_t grey_img, int w, int h, int n, cudaStream_t s)
{
    if (w <= 0 || h <= 0 || n <= 0) return cudaSuccess;
    k_grey<<<dim3((unsigned)((w + 255) / 256), (unsigned)(h < 65535 ? h : 65535), (unsigned)n), 256, 0, s>>>(
        rgb, rgb_pitch, rgb_img, grey, pitch, grey_img, w, h);
    return cudaGetLastError();
}

/* ------------------------------------------------------------------ timing */

/* Keeps the GPU busy for ns nanoseconds (one thread): timings queue their
 * launches behind it, so that the host's submission is not in them. */
static __global__ void k_busy(long long ns)
{
    long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

static inline cudaError_t busy_launch(long long ns, cudaStream_t s)
{
    k_busy<<<1, 1, 0, s>>>(ns);
    return cudaGetLastError();
}

/* ------------------------------------------------------- launch planning */

/* Grey rows on the device are padded to 16 bytes (k_prod3 and k_fast4 load
 * 16 bytes a lane); every grey buffer has LBP_GREY_SLACK bytes after its
 * last row (k_fast4's last lane reads 4 bytes past a row's end). */
#define LBP_GREY_SLACK 64

static inline int lbp_pitch16(int w) { return (w > 0 ? w + 15 : 16) / 16 * 16; }

/* A configuration's tables in device memory. */
struct lbp_dev_tables {
    const uint8_t *ktab;    /* 3x3: TLBAP thresholds k(m), 256 entries */
    const uint8_t *btab;    /* 3x3: code -> bin, 256 entries */
    const uint32_t *bins;   /* circular: code -> bin, or NULL (var; codes over 2^16) */
    uint32_t tq_t, tq_c;    /* TLBAP: the threshold as one fp16x2 fma (tq_t = 0: none, ktab) */
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
static int tlbap_fma_consts(const uint8_t k[256], double th, uint32_t *tq_t, uint32_t *tq_c)
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


/* Code-map shape of a w x h image (algo/lbp_core.h: lbp_map_side). */
static inline void lbp_map_wh(const patina_gpu_lbp_conf_t *c, int w, int h, int *mw, int *mh)
{
    *mw = lbp_map_side(c->kind, w);
    *mh = lbp_map_side(c->kind, h);
}

static inline bool lbp_cells(const patina_gpu_lbp_conf_t *c) { return c->grid_rows > 1 || c->grid_cols > 1; }

/* k_prod3's histogram copies per block: one per warp when they fit 32 KB,
 * else one per block when it fits 46 KB, else global atomics. */
static inline int smem_copies(int dim)
{
    const size_t one = (size_t)dim * sizeof(uint32_t);
    if (one * PROD_TY <= 32 * 1024) return PROD_TY;
    if (one <= 46 * 1024) return 1;
    return 0;
}

/* The fields of prod_args and fast_args that describe the data: grey
 * input rows `pitch` bytes apart (h * pitch bytes per image), the code map's
 * mw x mh with rows `opitch` bytes apart (codes, or NULL), the histograms
 * (counts, or NULL) and c's bins and grid. */
template <class A>
static inline void set_io(A &a, const patina_gpu_lbp_conf_t *c, const uint8_t *in, int pitch, int h, int mw, int mh,
                          void *codes, int opitch, uint32_t *counts)
{
    a.in = in;
    a.pitch = pitch;
    a.in_img = (size_t)h * (size_t)pitch;
    a.mw = mw;
    a.mh = mh;
    a.codes = (uint8_t *)codes;
    a.opitch = opitch;
    a.out_img = (size_t)mh * (size_t)opitch;
    a.counts = counts;
    a.dim = (int)c->dim;
    a.nbins = c->nbins;
    a.grid_rows = c->grid_rows;
    a.grid_cols = c->grid_cols;
}

/* The launch of k_prod3 on n images of w x h: fills a and returns the grid
 * (smem: its dynamic shared memory). The grid's y extent must be <= 65535
 * (prod_fits). */
static inline dim3 prod_plan(prod_args &a, size_t *smem, const patina_gpu_lbp_conf_t *c, const uint8_t *in,
                             int pitch, int w, int h, int n, void *codes, int opitch, uint32_t *counts)
{
    int mw, mh;
    lbp_map_wh(c, w, h, &mw, &mh);
    memset(&a, 0, sizeof a);
    set_io(a, c, in, pitch, h, mw, mh, codes, opitch, counts);
    a.w = w;
    a.h = h;
    a.copies = counts ? smem_copies(a.dim) : 0;
    *smem = (size_t)a.copies * (size_t)a.dim * sizeof(uint32_t);
    return dim3((unsigned)((mw + PROD_COLS - 1) / PROD_COLS),
                (unsigned)((mh + PROD_TY * PROD_RW - 1) / (PROD_TY * PROD_RW)), (unsigned)n);
}

static inline bool prod_fits(int mh) { return (mh + PROD_TY * PROD_RW - 1) / (PROD_TY * PROD_RW) <= 65535; }

/* Launches k_prod3 for c's kind on n images of w x h (prod_plan) on stream
 * s; the launch's error. */
static inline cudaError_t prod_launch(const patina_gpu_lbp_conf_t *c, const lbp_dev_tables &t, const uint8_t *in,
                                      int pitch, int w, int h, int n, void *codes, int opitch, uint32_t *counts,
                                      cudaStream_t s)
{
    prod_args a;
    size_t smem;
    const dim3 grid = prod_plan(a, &smem, c, in, pitch, w, h, n, codes, opitch, counts);
    const dim3 block(32, PROD_TY);
    switch (c->kind) {
    case LBP_KIND_LBP8: k_prod3<LBP_KIND_LBP8><<<grid, block, smem, s>>>(a, t.ktab, t.btab); break;
    case LBP_KIND_TLBAP: k_prod3<LBP_KIND_TLBAP><<<grid, block, smem, s>>>(a, t.ktab, t.btab); break;
    default: k_prod3<LBP_KIND_LANADP><<<grid, block, smem, s>>>(a, t.ktab, t.btab); break;
    }
    return cudaGetLastError();
}

/* Whether k_fast4 computes these histograms: 3x3 kinds, whole-image
 * histograms or grids whose cells are at least 16 columns wide (a lane's 16
 * columns then cross at most one cell border). */
static inline bool fast_ok(const patina_gpu_lbp_conf_t *c, int mw)
{
    return c->kind != LBP_KIND_CIRCULAR && (!lbp_cells(c) || mw / c->grid_cols >= 16);
}

/* A persistent launch of k_fast4 (or the lab's k_fast3). */
struct fast_shape {
    int nw;    /* warps per block: WIDE_WARPS (wide) or FAST_WARPS */
    int bps;   /* blocks per multiprocessor (the instance's __launch_bounds__) */
    bool wide; /* the wide layout: whole-image histograms only */
    bool fit;  /* large batches: the band height whose last round of task groups is fullest */
};

static inline size_t fast_smem(const fast_shape &sh)
{
    return sh.wide ? WIDE_SMEM : FAST_HIST_WORDS * sizeof(uint32_t) + 256 * sizeof(uint16_t);
}

/* Fills a for n images of w x h (grey rows `pitch` bytes apart, h * pitch
 * bytes per image; codes rows `opitch` bytes apart, or NULL; counts (n,
 * dim)) and returns the blocks of the persistent grid (sms multiprocessors). */
static inline unsigned fast_plan(fast_args &a, const patina_gpu_lbp_conf_t *c, const lbp_dev_tables &t, int sms,
                                 const fast_shape &sh, const uint8_t *in, int pitch, int w, int h, int n,
                                 void *codes, int opitch, uint32_t *counts)
{
    int mw, mh;
    lbp_map_wh(c, w, h, &mw, &mh);
    const bool cells = lbp_cells(c);
    const int strips = (mw + PROD_COLS - 1) / PROD_COLS;
    const int nw = sh.nw, bps = sh.bps;
    const bool wide = sh.wide;
    const long long warps = (long long)sms * bps * nw;
    const long long rows = (long long)n * strips * mh; /* warp rows of work */
    memset(&a, 0, sizeof a);
    set_io(a, c, in, pitch, h, mw, mh, codes, opitch, counts);
    a.grid = cells;
    a.groups = strips * c->grid_rows;
    /* bands of a task strip (grid: per cell row, padded to a multiple of
     * FAST_WARPS so that a block's warps share a cell row) and the task
     * groups of nw for band height rb */
    const int chmax = (mh + c->grid_rows - 1) / c->grid_rows;
    const auto nbands = [&](int rb) -> int {
        return cells ? ((chmax + rb - 1) / rb + FAST_WARPS - 1) / FAST_WARPS * FAST_WARPS : (mh + rb - 1) / rb;
    };
    /* the wide layout's groups run on into the next image when an image has
     * at least a group of tasks */
    const auto cross_ok = [&](int rb) -> bool { return wide && (long long)nbands(rb) * strips >= nw; };
    const auto ngroups = [&](int rb) -> long long {
        if (cells) return (long long)nbands(rb) / FAST_WARPS * c->grid_rows * strips * n;
        if (cross_ok(rb)) return ((long long)nbands(rb) * strips * n + nw - 1) / nw;
        return ((long long)nbands(rb) * strips + nw - 1) / nw * n;
    };
    /* band height: every warp busy for one image, at most 32 rows (2 halo
     * rows re-read per band) */
    a.rb = (int)((rows + warps - 1) / warps);
    if (a.rb > 32) a.rb = 32;
    if (a.rb < 1) a.rb = 1;
    const long long maxb = (long long)sms * bps;
    if (a.rb >= 16 && sh.fit) {
        /* large batches: the band height whose last round of task groups is
         * fullest (a block walks ceil(groups / blocks) groups; a task costs
         * about its rows + 3) */
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
    a.tq_t = t.tq_t;
    a.tq_c = t.tq_c;
    return (unsigned)(a.pairs < maxb ? a.pairs : maxb);
}

/* The launch of k_circ or k_circ8 on n images of w x h (grey rows `pitch`
 * bytes apart; codes (n, h, w) of c->code_bytes, dense, or NULL). Histogram
 * copies: one per lane when bins x 32 words fit 48 KB, else one per block
 * when it fits 44 KB, else global atomics. */
static inline void circ_plan(circ_args &a, const patina_gpu_lbp_conf_t *c, const lbp_dev_tables &t,
                             const uint8_t *in, int pitch, int w, int h, void *codes, uint32_t *counts)
{
    memset(&a, 0, sizeof a);
    for (int k = 0; k < c->P; k++) {
        a.rp[k] = c->rp[k];
        a.cp[k] = c->cp[k];
        a.rf[k] = floor(a.rp[k]);
        a.cf[k] = floor(a.cp[k]);
    }
    a.in = in;
    a.in_img = (size_t)h * (size_t)pitch;
    a.pitch = pitch;
    a.w = w;
    a.h = h;
    a.P = c->P;
    a.method = c->method;
    a.codes = codes;
    a.elem_size = c->code_bytes;
    a.counts = counts;
    a.dim = (int)c->dim;
    a.nbins = c->nbins;
    a.grid_rows = c->grid_rows;
    a.grid_cols = c->grid_cols;
    a.vbins = c->vbins;
    a.mapping = c->mapping;
    a.bins = t.bins;
    a.copies = !counts                                              ? 0
               : (size_t)a.dim * 32 * sizeof(uint32_t) <= 48 * 1024 ? 32
               : (size_t)a.dim * sizeof(uint32_t) <= 44 * 1024      ? 1
                                                                    : 0;
    double m = 0.0;
    for (int k = 0; k < c->P; k++) {
        m = fabs(a.rp[k]) > m ? fabs(a.rp[k]) : m;
        m = fabs(a.cp[k]) > m ? fabs(a.cp[k]) : m;
    }
    a.span = (int)ceil(m) + 1;
    a.band = C8_BAND;
    if ((h + a.band - 1) / a.band > 65535) a.band = (h + 65534) / 65535; /* the grid's limit */
}

/* Whether k_circ8 computes this circular configuration: P = 8 and the
 * samples of R = 1 as scikit-image rounds them (axis samples on pixels,
 * diagonal ones at (-d, d), (-d, -d), (d, -d), (d, d), 0 < d < 1), codes of
 * one byte (binary64 for var). */
static inline bool circ8_ok(const patina_gpu_lbp_conf_t *c)
{
    static const double axr[4] = {0, -1, 0, 1}, axc[4] = {1, 0, -1, 0};
    if (c->kind != LBP_KIND_CIRCULAR || c->P != 8 || c->code_bytes != (c->method == LBP_M_VAR ? 8 : 1))
        return false;
    for (int k = 0; k < 4; k++)
        if (c->rp[2 * k] != axr[k] || c->cp[2 * k] != axc[k]) return false;
    const double d = c->cp[1];
    return d > 0 && d < 1 && c->rp[1] == -d && c->cp[3] == -d && c->rp[3] == -d && c->rp[5] == d &&
           c->cp[5] == -d && c->rp[7] == d && c->cp[7] == d;
}

/* k_circ's grid: one thread per pixel, blocks of CIRC_BX x CIRC_BY. */
static inline dim3 circ_grid(int w, int h, int n)
{
    return dim3((unsigned)((w + CIRC_BX - 1) / CIRC_BX), (unsigned)((h + CIRC_BY - 1) / CIRC_BY), (unsigned)n);
}

static inline bool circ_fits(int h) { return (h + CIRC_BY - 1) / CIRC_BY <= 65535; }

/* k_circ8's grid: a thread per column, blocks of C8_BX columns and a.band rows. */
static inline dim3 circ8_grid(const circ_args &a, int n)
{
    return dim3((unsigned)((a.w + C8_BX - 1) / C8_BX), (unsigned)((a.h + a.band - 1) / a.band), (unsigned)n);
}

static inline size_t circ_smem(const circ_args &a) { return (size_t)a.copies * (size_t)a.dim * sizeof(uint32_t); }

/* Device tables of configuration c in dev (LBP_TAB_BYTES): ktab at 0, btab
 * at 256, circular bins at 512; host: the same bytes to upload. tq_t, tq_c
 * from tlbap_fma_consts. Returns the bytes to upload. */
#define LBP_TAB_BYTES (512 + 65536 * sizeof(uint32_t))
static inline size_t lbp_tables_host(uint8_t *host, lbp_dev_tables *t, const uint8_t *dev,
                                     const patina_gpu_lbp_conf_t *c)
{
    memset(t, 0, sizeof *t);
    if (c->kind != LBP_KIND_CIRCULAR) {
        memcpy(host, c->ktab, 256);
        for (int i = 0; i < 256; i++) host[256 + i] = (uint8_t)c->bins[i];
        if (c->kind == LBP_KIND_TLBAP && !tlbap_fma_consts(c->ktab, c->th, &t->tq_t, &t->tq_c))
            t->tq_t = t->tq_c = 0;
        t->ktab = dev;
        t->btab = dev + 256;
        return 512;
    }
    if (!c->bins) return 0;
    memcpy(host + 512, c->bins, (size_t)c->ncodes * sizeof(uint32_t));
    t->bins = (const uint32_t *)(dev + 512);
    return 512 + (size_t)c->ncodes * sizeof(uint32_t);
}

/* The contract's checks: what the kernels rely on. NULL when c is usable,
 * else what is wrong. */
static inline const char *lbp_conf_check(const patina_gpu_lbp_conf_t *c)
{
    if (c->kind < LBP_KIND_CIRCULAR || c->kind > LBP_KIND_LANADP) return "unknown kind";
    if (c->grid_rows < 1 || c->grid_cols < 1 || c->nbins < 1) return "bad grid or bins";
    if (c->dim != (size_t)c->grid_rows * (size_t)c->grid_cols * (size_t)c->nbins || c->dim > (1u << 22))
        return "dim is not grid_rows * grid_cols * nbins (at most 2^22)";
    if (c->kind != LBP_KIND_CIRCULAR) {
        if (!c->bins || c->ncodes < 256 || c->nbins > 256) return "a 3x3 kind needs a 256-entry bin table";
        if (c->code_bytes != 1) return "3x3 codes are bytes (code_bytes 1)";
        for (int i = 0; i < 256; i++)
            if (c->bins[i] >= (uint32_t)c->nbins) return "a bin table entry is out of range";
        return NULL;
    }
    if (c->P < 1 || c->P > LBP_MAX_P) return "P is out of 1..32";
    if (c->method < LBP_M_DEFAULT || c->method > LBP_M_VAR) return "unknown method";
    if (c->code_bytes != 1 && c->code_bytes != 2 && c->code_bytes != 4 && c->code_bytes != 8)
        return "code_bytes is not 1, 2, 4 or 8";
    if (c->method == LBP_M_VAR) return c->vbins >= 1 && c->vbins == c->nbins ? NULL : "var needs vbins = nbins";
    /* codes the method gives: every one needs a table entry, or a bin rule */
    const uint64_t codes = c->method == LBP_M_UNIFORM ? (uint64_t)c->P + 2
                           : c->method == LBP_M_NRI   ? (uint64_t)c->P * (uint64_t)(c->P - 1) + 3
                                                      : (uint64_t)1 << c->P;
    if (c->bins) return c->ncodes >= codes && c->ncodes <= 65536 ? NULL : "the bin table does not cover the codes";
    if (c->mapping != LBP_MAP_U2 && c->mapping != LBP_MAP_RIU2 && c->method != LBP_M_UNIFORM &&
        c->method != LBP_M_NRI)
        return "codes without a bin table need the u2 or riu2 mapping";
    return NULL;
}

#endif
