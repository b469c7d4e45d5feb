/* GLCM on the GPU: co-occurrence counts identical to the C reference
 * (src/features/glcm.c), the properties and Haralick features of whole
 * batches of matrices, and the lab variants of Hong, Zheng & Pan,
 * "Computation of gray-level co-occurrence matrix based on CUDA and its
 * optimization" (../shared/papers/glcm-cuda.txt) for bench/glcm.c.
 *
 * Production path (patina_gpu_glcm_counts and the families):
 *   - Images are quantised on the host (the C reference's rules), packed into
 *     slots of device memory with a pitch of roundup(w, 16) + 32 bytes and a
 *     16-byte guard in front, so that a thread can read 16 pixels of row r
 *     with one 16-byte load and the 16 partner pixels of row r+dy at any dx
 *     with five aligned 4-byte loads and funnel shifts.
 *   - Work is a list of tasks (a band of first-pixel rows of one image),
 *     sized from the launch's work so that every block gets one equal band
 *     (at least 16 K pixels); persistent blocks take tasks in grid-stride
 *     order. k_count5 (2..32 offsets in one pass, L = 2^s <= 8, each lane
 *     counts a pair of offsets into a joint table: one shared atomic per two
 *     pairs; the default on launches of >= 64 K pixels per SM), k_count4
 *     (2..32 offsets in one pass, L = 2^s <= 32, lanes carry the offsets:
 *     the default on other large launches), k_count3 (one
 *     offset per block, L = 2^s <= 32: the default
 *     for one offset) or k_count2 (one block of 640 threads per SM, all of the opt-in
 *     shared memory, the next step's pixels loaded while this one votes)
 *     keeps C copies
 *     of the G sub-GLCMs of the request (G = all offsets when one copy fits),
 *     interleaved cell-major so that lane l votes into word cell*C + l % C:
 *     with C = 32 every lane owns a bank and a warp's atomics never conflict.
 *     A block flushes its copies into the global matrices (atomicAdd of
 *     non-zero sums) when its task's image changes and at the end. When not
 *     even one matrix fits (L > ~238), k_count<false> votes straight into
 *     global memory.
 *   - Images larger than a slot are cut into tiles of first-pixel rows; each
 *     tile is copied with the padding rules of the paper (Scheme 3) in row
 *     form: pad_up = max(0, -min dy) rows above and pad_down = max(0, max dy)
 *     rows below, so every pair whose first pixel is in the tile is counted
 *     by that tile and by no other. Small images are packed many per slot
 *     and counted by one launch. Slots rotate over three streams: the copy
 *     of batch k+1 (pinned source: cudaMemcpy2DAsync straight from the
 *     caller's memory; pageable: through the slot's pinned staging) overlaps
 *     the kernel of batch k.
 *   - Counts accumulate in u32 with atomics: integer addition commutes, so
 *     the result is bit-identical to the C reference whatever the schedule.
 *   - Features: one block per matrix reduces it to the integer moments and
 *     the sums of logarithms of glcm_core.h, in the same order as the C
 *     reference, and calls the same glcm_finish. Haralick's 14th feature
 *     (an eigenvalue problem): one thread per matrix runs the C reference's
 *     solver (glcm_core.h) for L <= 64 (k_mcc), the host above.
 *
 * Device selection: the calling thread's current device (patina_gpu_open
 * makes it current). Resources are per device, created on first use and
 * serialised by a mutex. Nothing prints; every CUDA error becomes a status. */
#include <cuda_runtime.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "algo/glcm_core.h"
#include "features/glcm_ref.h"
#include "gpu/context.h"
#include "gpu/gpu.h"
#include "patina/glcm.h"

#define KTHREADS 256           /* production counting kernel */
#define FTHREADS 256           /* features kernel */
#define NSLOT 3
#define GUARD 64               /* bytes before the first row of a slot */
#define DEF_SLOT_BYTES (32u << 20)
#define DEF_TASK_PIXELS 0       /* 0: tasks sized from the launch's work */
#define DEF_TASK_MIN (1u << 14)
#define MAXDEV 16

/* ------------------------------------------------------------ errors */

#define CK(call) PGPU_CU(call)
#define CKL(what) CK(cudaGetLastError())

/* --------------------------------------------------------- kernels */

/* One block's work: first-pixel rows [r0, r1) of an image of w x h pixels
 * whose row `row0` starts at device address `base` (rows `pitch` apart;
 * rows [row0, ...) of the image that the tile holds). */
struct gtask {
    const uint8_t *base;
    int row0, pitch, w, h, r0, r1, out, sub; /* sub: offset subset (k_count2) */
};

/* The offsets of one launch: n of them, global indices o0 .. o0+n-1 of
 * noff_total per image. */
struct koffs {
    int n, o0, noff_total, pad_;
    int dy[PATINA_GLCM_MAX_OFFSETS], dx[PATINA_GLCM_MAX_OFFSETS];
};

static __device__ __forceinline__ int floor_div4(int x) { return x >= 0 ? x >> 2 : -((-x + 3) >> 2); }

static __device__ __forceinline__ void flush_block(uint32_t *sh, const koffs &ko, int L, int R,
                                                   int cs, int cur, uint32_t *out)
{
    const int LL = L * L;
    for (int i = threadIdx.x; i < ko.n * LL; i += blockDim.x) {
        const int o = i / LL, cell = i - o * LL;
        uint32_t s = 0;
        for (int c = 0; c < R; c++) s += sh[(o * R + c) * cs + cell];
        if (s) atomicAdd(out + ((size_t)cur * ko.noff_total + ko.o0 + o) * LL + cell, s);
    }
}

template <bool SMEM>
__global__ void __launch_bounds__(KTHREADS)
k_count(const gtask *__restrict__ tasks, int ntasks, koffs ko, int L, int R, int cs,
        uint32_t *__restrict__ out)
{
    extern __shared__ uint32_t sh[];
    const int LL = L * L;
    const int nsh = SMEM ? ko.n * R * cs : 0;
    const int copy = (threadIdx.x & 31) & (R - 1);
    int cur = -1;
    if (SMEM) {
        for (int i = threadIdx.x; i < nsh; i += blockDim.x) sh[i] = 0;
        __syncthreads();
    }
    for (int t = blockIdx.x; t < ntasks; t += gridDim.x) {
        const gtask tk = tasks[t];
        if (SMEM && tk.out != cur) { /* uniform over the block: one task per block */
            if (cur >= 0) {
                __syncthreads();
                flush_block(sh, ko, L, R, cs, cur, out);
                __syncthreads();
                for (int i = threadIdx.x; i < nsh; i += blockDim.x) sh[i] = 0;
                __syncthreads();
            }
            cur = tk.out;
        }
        uint32_t *gout = out + (size_t)tk.out * ko.noff_total * LL;
        const int gpr = (tk.w + 15) >> 4;
        const long long ng = (long long)(tk.r1 - tk.r0) * gpr;
        for (long long g = threadIdx.x; g < ng; g += blockDim.x) {
            const int r = tk.r0 + (int)(g / gpr);
            const int x0 = (int)(g % gpr) << 4;
            const uint8_t *ra = tk.base + (long long)(r - tk.row0) * tk.pitch;
            const uint4 a = __ldg(reinterpret_cast<const uint4 *>(ra + x0));
            const uint32_t aw[4] = {a.x, a.y, a.z, a.w};
            for (int o = 0; o < ko.n; o++) {
                const int dy = ko.dy[o], dx = ko.dx[o];
                const int rr = r + dy;
                if (rr < 0 || rr >= tk.h) continue;
                const int xs = max(0, -dx), xe = min(tk.w, tk.w - dx);
                if (x0 + 16 <= xs || x0 >= xe) continue;
                const uint8_t *rb = tk.base + (long long)(rr - tk.row0) * tk.pitch;
                const int xb = x0 + dx, wb = floor_div4(xb), sh8 = (xb - 4 * wb) * 8;
                const uint32_t *pb = reinterpret_cast<const uint32_t *>(rb) + wb;
                uint32_t bw[5];
#pragma unroll
                for (int k = 0; k < 5; k++) bw[k] = __ldg(pb + k);
                uint32_t bsh[4];
#pragma unroll
                for (int k = 0; k < 4; k++) bsh[k] = __funnelshift_r(bw[k], bw[k + 1], sh8);
                uint32_t *H = SMEM ? sh + (o * R + copy) * cs : gout + (size_t)(ko.o0 + o) * LL;
                int run = -1, n = 0;
#pragma unroll
                for (int k = 0; k < 16; k++) {
                    const int x = x0 + k;
                    if (x < xs || x >= xe) continue;
                    const int ia = (aw[k >> 2] >> ((k & 3) * 8)) & 255;
                    const int ib = (bsh[k >> 2] >> ((k & 3) * 8)) & 255;
                    const int idx = ia * L + ib;
                    if (idx == run) {
                        n++;
                    } else {
                        if (n) atomicAdd(H + run, (uint32_t)n);
                        run = idx;
                        n = 1;
                    }
                }
                if (n) atomicAdd(H + run, (uint32_t)n);
            }
        }
    }
    if (SMEM && cur >= 0) {
        __syncthreads();
        flush_block(sh, ko, L, R, cs, cur, out);
    }
}

/* The counting kernel for matrices that fit shared memory (k2): one block
 * of NT threads per SM (640 by default: 20 warps with 95 registers each
 * leave room for the prefetch; 768 at 80 registers spill) holding, for each of the launch's G offsets, C copies
 * (a power of two <= 32) of the L*L counters interleaved cell-major: counter
 * (o, cell) of copy c is word (o*L*L + cell)*C + c, lane l votes into copy
 * l % C. With C = 32 every lane of a warp owns its own bank, so a warp's 32
 * shared atomics are conflict-free whatever the cells (L=32, one offset:
 * 128 KB; L=8: 8 KB); with fewer copies lanes l and l+C can only collide
 * when their cells agree modulo 32/C. Warps of the block share the copies
 * (the atomics make that exact). One atomic per pair, no branches on the
 * data: the address is two IMADs on the bytes of a 16-pixel group and its
 * partner group. Each thread takes two groups per step and issues all their
 * loads before voting, so that several loads are in flight per lane, and
 * (PF) loads the next step's two groups before this step votes; rows and
 * columns of a task advance incrementally (no division in the loop). The
 * host gives each block one band of ~total/grid pixels per launch: with
 * 64 K-pixel tasks a thread made only ~3 steps per task (pipeline ramp and
 * task overhead each time) and a 1024^2 image filled 16 of 132 SMs. */

template <bool FULL>
static __device__ __forceinline__ void vote16(uint32_t *sh, const uint32_t aw[4], const uint32_t bs[4],
                                              uint32_t base, uint32_t sa, uint32_t sb, uint32_t vmask)
{
#pragma unroll
    for (int k = 0; k < 16; k++) {
        if (FULL || ((vmask >> k) & 1u)) {
            const uint32_t ia = (aw[k >> 2] >> ((k & 3) * 8)) & 255u;
            const uint32_t ib = (bs[k >> 2] >> ((k & 3) * 8)) & 255u;
            atomicAdd(reinterpret_cast<uint32_t *>(reinterpret_cast<char *>(sh) + (base + ia * sa + ib * sb)),
                      1u);
        }
    }
}

static __device__ __forceinline__ void flush_k2(uint32_t *sh, const koffs &ko, int olo, int gn, int L, int C,
                                                int cur, uint32_t *out)
{
    const int LL = L * L;
    for (int i = threadIdx.x; i < gn * LL; i += blockDim.x) {
        const int o = i / LL, cell = i - o * LL;
        const uint32_t *p = sh + (size_t)i * C;
        uint32_t s = 0;
        for (int c = 0; c < C; c++) s += p[(c + i) & (C - 1)]; /* rotated: banks differ per thread */
        if (s) atomicAdd(out + ((size_t)cur * ko.noff_total + ko.o0 + olo + o) * LL + cell, s);
    }
}

/* A block's shared table between tasks (uniform over the block): flush()
 * adds it to the global counts, then it is zeroed. */
template <typename F>
static __device__ __forceinline__ void table_renew(uint32_t *sh, int nsh, F flush)
{
    __syncthreads();
    flush();
    __syncthreads();
    for (int i = threadIdx.x; i < nsh; i += blockDim.x) sh[i] = 0;
    __syncthreads();
}

/* A persistent block of k_count2/k_count3 taking task tk (uniform over the
 * block): when tk counts another matrix or offset group than the copies in
 * shared memory hold, those are added to the global counts and cleared. */
static __device__ __forceinline__ void k2_take(uint32_t *sh, int nsh, const koffs &ko, int G, int L, int C,
                                               const gtask &tk, int &cur, int &cursub, uint32_t *out)
{
    if (tk.out == cur && tk.sub == cursub) return;
    if (cur >= 0)
        table_renew(sh, nsh, [&] { flush_k2(sh, ko, cursub * G, min(G, ko.n - cursub * G), L, C, cur, out); });
    cur = tk.out;
    cursub = tk.sub;
}

/* The block's last copies into the global counts. */
static __device__ __forceinline__ void k2_finish(uint32_t *sh, const koffs &ko, int G, int L, int C, int cur,
                                                 int cursub, uint32_t *out)
{
    if (cur < 0) return;
    __syncthreads();
    flush_k2(sh, ko, cursub * G, min(G, ko.n - cursub * G), L, C, cur, out);
}

/* G: offsets per block (the shared layout); a task's `sub` picks offsets
 * [sub*G, sub*G + G) of the launch's ko.n. PF: the next step's two 16-byte
 * groups are loaded before the current step votes (software pipelining). */
template <bool PF, int NT>
__global__ void __launch_bounds__(NT, 1)
k_count2(const gtask *__restrict__ tasks, int ntasks, koffs ko, int G, int L, int C,
         uint32_t *__restrict__ out)
{
    extern __shared__ uint32_t sh[];
    const int LL = L * L;
    const int nsh = G * LL * C;
    const uint32_t lanebyte = (uint32_t)(threadIdx.x & 31 & (C - 1)) * 4u;
    const uint32_t sa = (uint32_t)(L * C * 4), sb = (uint32_t)(C * 4);
    const int bd = (int)blockDim.x, step = 2 * bd;
    int cur = -1, cursub = 0;
    for (int i = threadIdx.x; i < nsh; i += blockDim.x) sh[i] = 0;
    __syncthreads();
    for (int t = blockIdx.x; t < ntasks; t += gridDim.x) {
        const gtask tk = tasks[t];
        const int olo = tk.sub * G, ohi = min(ko.n, olo + G);
        if (olo >= ko.n) continue; /* uniform over the block */
        k2_take(sh, nsh, ko, G, L, C, tk, cur, cursub, out);
        const int gpr = (tk.w + 15) >> 4;
        const int ng = (tk.r1 - tk.r0) * gpr;
        const int half_r = bd / gpr, half_c = bd - half_r * gpr;
        const int step_r = step / gpr, step_c = step - step_r * gpr;
        const uint8_t *tb = tk.base + (long long)(tk.r0 - tk.row0) * tk.pitch; /* row r0 */
        int rA = threadIdx.x / gpr, cA = threadIdx.x - rA * gpr; /* relative row, group of g */
        uint4 a[2];
        if (PF) {
            int rB = rA + half_r, cB = cA + half_c;
            if (cB >= gpr) {
                cB -= gpr;
                rB++;
            }
            a[0] = (int)threadIdx.x < ng ? __ldg(reinterpret_cast<const uint4 *>(tb + (long long)rA * tk.pitch + (cA << 4)))
                                         : make_uint4(0, 0, 0, 0);
            a[1] = (int)threadIdx.x + bd < ng
                       ? __ldg(reinterpret_cast<const uint4 *>(tb + (long long)rB * tk.pitch + (cB << 4)))
                       : make_uint4(0, 0, 0, 0);
        }
        for (int g = threadIdx.x; g < ng; g += step) {
            int rB = rA + half_r, cB = cA + half_c;
            if (cB >= gpr) {
                cB -= gpr;
                rB++;
            }
            const bool okB = g + bd < ng;
            const int r[2] = {tk.r0 + rA, tk.r0 + rB};
            const int x0[2] = {cA << 4, cB << 4};
            /* 16-byte aligned: slots, rows (pitch) and groups are */
            const uint8_t *pa[2] = {tb + (long long)rA * tk.pitch + x0[0], tb + (long long)rB * tk.pitch + x0[1]};
            if (!PF) {
                a[0] = __ldg(reinterpret_cast<const uint4 *>(pa[0]));
                a[1] = okB ? __ldg(reinterpret_cast<const uint4 *>(pa[1])) : make_uint4(0, 0, 0, 0);
            }
            rA += step_r;
            cA += step_c;
            if (cA >= gpr) {
                cA -= gpr;
                rA++;
            }
            uint4 an[2];
            if (PF) {
                int rBn = rA + half_r, cBn = cA + half_c;
                if (cBn >= gpr) {
                    cBn -= gpr;
                    rBn++;
                }
                an[0] = g + step < ng ? __ldg(reinterpret_cast<const uint4 *>(tb + (long long)rA * tk.pitch + (cA << 4)))
                                      : make_uint4(0, 0, 0, 0);
                an[1] = g + step + bd < ng
                            ? __ldg(reinterpret_cast<const uint4 *>(tb + (long long)rBn * tk.pitch + (cBn << 4)))
                            : make_uint4(0, 0, 0, 0);
            }
            for (int o = olo; o < ohi; o++) {
                const int dy = ko.dy[o], dx = ko.dx[o];
                const int xs = max(0, -dx), xe = min(tk.w, tk.w - dx);
                const long long db = (long long)dy * tk.pitch + (dx & ~3); /* dx - dx mod 4 */
                const int sh8 = (dx & 3) * 8;
                const uint32_t base = (uint32_t)((o - olo) * LL * C * 4) + lanebyte;
                uint32_t bw[2][5];
                uint32_t vm[2];
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const int rr = r[u] + dy;
                    vm[u] = 0;
                    if ((u == 0 || okB) && rr >= 0 && rr < tk.h) {
                        const int lo = max(xs - x0[u], 0), hi = min(xe - x0[u], 16);
                        if (hi > lo) vm[u] = ((hi >= 16 ? 0xffffu : ((1u << hi) - 1u)) >> lo) << lo;
                    }
                    const uint32_t *pb = reinterpret_cast<const uint32_t *>(pa[u] + db);
#pragma unroll
                    for (int k = 0; k < 5; k++) bw[u][k] = vm[u] ? __ldg(pb + k) : 0u;
                }
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const uint32_t aw[4] = {u ? a[1].x : a[0].x, u ? a[1].y : a[0].y, u ? a[1].z : a[0].z,
                                            u ? a[1].w : a[0].w};
                    uint32_t bs[4];
#pragma unroll
                    for (int k = 0; k < 4; k++) bs[k] = __funnelshift_r(bw[u][k], bw[u][k + 1], sh8);
                    if (vm[u] == 0xffffu)
                        vote16<true>(sh, aw, bs, base, sa, sb, 0xffffu);
                    else if (vm[u])
                        vote16<false>(sh, aw, bs, base, sa, sb, vm[u]);
                }
            }
            if (PF) {
                a[0] = an[0];
                a[1] = an[1];
            }
        }
    }
    k2_finish(sh, ko, G, L, C, cur, cursub, out);
}

/* one byte permute (PRMT) */
static __device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel)
{
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}

/* k_count3 (variant 4, the default when a block counts one offset and L is
 * a power of two <= 32): k_count2's layout, tasks and prefetch with about
 * half the instructions per pair (~7 instead of ~14 in the SASS loop).
 *   - A group whose 16 pixels and partners lie inside the image for every
 *     lane of the warp (one row and one column test per group against the
 *     task's interior, the intersection over the block's offsets, computed
 *     once per task; __all_sync, since a warp whose lanes disagree would run
 *     both paths) takes a path without masks or predicated loads; the other
 *     groups (image edges, the last groups of a task) take k_count2's path.
 *   - Cell index without extraction: with L = 2^s, the A side of a group is
 *     turned once per step into alo = per-byte (a << s) & 0xff and (s = 5)
 *     ahi = per-byte a >> (8 - s); per offset, bc = alo | b holds the low
 *     byte of a * L + b for four pairs, and one PRMT per pair puts that
 *     byte and the matching ahi byte (or zero) into a register: the address
 *     is then one IMAD (idx * 4C + base) and the ATOMS.
 *   - Rows, columns and byte offsets advance incrementally (32-bit offsets
 *     from the task's first row; a slot is far below 2 GiB).
 * HI: s = 5 (L = 32), the index needs two bytes. ONE: one offset per block
 * (its invariants leave the loop).
 * MK (entry 31: one offset, L = 32, under a mask): bit 7 of a pixel marks
 * it outside the mask, as in k_count4's flagged instances. On the fast
 * path a pair with such a pixel on either side has its index bytes zeroed,
 * i.e. it is counted in cell (0, 0) of the lane's copy, and vote16p returns
 * how many; the kernel takes them back before each flush. Branch-free: the
 * fast path stays one PRMT and one ATOMS per pair plus ~5 instructions per
 * 4 pairs. On the edge path (vote16) those pairs leave the vote mask. */
template <bool HI, bool MK = false>
static __device__ __forceinline__ uint32_t vote16p(uint32_t *sh, const uint32_t aw[4], const uint32_t alo[4],
                                                   const uint32_t ahi[4], const uint32_t bs[4], uint32_t basel,
                                                   uint32_t sb)
{
    static_assert(!MK || HI, "masks in bit 7: L = 32 only");
    uint32_t dummy = 0;
#pragma unroll
    for (int w = 0; w < 4; w++) {
        uint32_t bc = alo[w] | bs[w], ah = ahi[w];
        if (MK) { /* alo and ahi hold no bit 7 of the first pixels: aw's */
            const uint32_t inv = (aw[w] | bs[w]) & 0x80808080u;
            const uint32_t invb = prmt(inv, 0u, 0xba98u); /* 0xff bytes where a pixel is outside */
            bc &= ~invb;
            ah &= ~invb;
            dummy += __popc(inv);
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t idx;
            if (HI) {
                /* bytes: bc[k], ahi[k], then ahi[k]'s sign (its byte is < 4: zero) twice */
                const uint32_t sel = ((0xcu | k) << 12) | ((0xcu | k) << 8) | ((4u + k) << 4) | (uint32_t)k;
                idx = prmt(bc, ah, sel);
            } else {
                idx = prmt(bc, 0u, 0x4440u | (uint32_t)k); /* bc[k], then zero bytes */
            }
            atomicAdd(reinterpret_cast<uint32_t *>(reinterpret_cast<char *>(sh) + (idx * sb + basel)), 1u);
        }
    }
    return dummy;
}

/* The 16 pairs of a group with a pixel outside the mask (bit 7 on either
 * side), as a vote mask: bit k for pair k */
static __device__ __forceinline__ uint32_t flagged16(const uint32_t aw[4], const uint32_t bs[4])
{
    uint32_t m = 0;
#pragma unroll
    for (int w = 0; w < 4; w++) {
        const uint32_t x = ((aw[w] | bs[w]) >> 7) & 0x01010101u; /* bits 0, 8, 16, 24 */
        m |= ((x * 0x01020408u) >> 24) << (4 * w);                /* to bits 24..27: no carries */
    }
    return m;
}

template <bool HI, bool ONE, int NT, bool MK = false>
__global__ void __launch_bounds__(NT, 1)
k_count3(const gtask *__restrict__ tasks, int ntasks, koffs ko, int G, int L, int C,
         uint32_t *__restrict__ out)
{
    static_assert(!MK || (HI && ONE), "flagged: one offset per block, L = 32");
    extern __shared__ uint32_t sh[];
    const int LL = L * L;
    const int nsh = G * LL * C;
    const uint32_t lanebyte = (uint32_t)(threadIdx.x & 31 & (C - 1)) * 4u;
    const uint32_t sa = (uint32_t)(L * C * 4), sb = (uint32_t)(C * 4);
    const int s = __ffs(L) - 1;
    const uint32_t mlo = ((0xffu << s) & 0xffu) * 0x01010101u;
    const int bd = (int)blockDim.x, step = 2 * bd;
    int cur = -1, cursub = 0;
    uint32_t dummy = 0; /* MK: this thread's pairs counted in cell (0, 0) since the last flush */
    for (int i = threadIdx.x; i < nsh; i += blockDim.x) sh[i] = 0;
    __syncthreads();
    for (int t = blockIdx.x; t < ntasks; t += gridDim.x) {
        const gtask tk = tasks[t];
        const int olo = tk.sub * G, ohi = ONE ? olo + 1 : min(ko.n, olo + G);
        if (olo >= ko.n) continue; /* uniform over the block */
        if (MK && cur >= 0 && (tk.out != cur || tk.sub != cursub)) { /* block-uniform: before the flush */
            atomicSub(reinterpret_cast<uint32_t *>(reinterpret_cast<char *>(sh) + lanebyte), dummy);
            dummy = 0;
        }
        k2_take(sh, nsh, ko, G, L, C, tk, cur, cursub, out);
        const int pitch = tk.pitch;
        const int gpr = (tk.w + 15) >> 4;
        const int ng = (tk.r1 - tk.r0) * gpr;
        const int half_r = bd / gpr, half_c = bd - half_r * gpr;
        const int step_r = step / gpr, step_c = step - step_r * gpr;
        const int half_off = half_r * pitch + half_c * 16, step_off = step_r * pitch + step_c * 16;
        const int wrap = pitch - gpr * 16;
        const uint8_t *tb = tk.base + (long long)(tk.r0 - tk.row0) * pitch; /* row r0 */
        /* the interior: relative rows [frow0, frow0 + frows) and groups
         * [fcol0, fcol0 + fcols) whose 16 pixels have all their partners */
        int rlo = 0, rhi = tk.h, xlo = 0, xhi = tk.w;
        for (int o = olo; o < ohi; o++) {
            rlo = max(rlo, -ko.dy[o]);
            rhi = min(rhi, tk.h - ko.dy[o]);
            xlo = max(xlo, -ko.dx[o]);
            xhi = min(xhi, tk.w - ko.dx[o]);
        }
        const int frow0 = rlo - tk.r0, fcol0 = (xlo + 15) >> 4, fc1 = xhi > 0 ? xhi >> 4 : 0;
        const uint32_t frows = rhi > rlo ? (uint32_t)(rhi - rlo) : 0u;
        const uint32_t fcols = fc1 > fcol0 ? (uint32_t)(fc1 - fcol0) : 0u;
        int rA = threadIdx.x / gpr, cA = threadIdx.x - rA * gpr;
        int offA = rA * pitch + cA * 16;
        int rB = rA + half_r, cB = cA + half_c, offB = offA + half_off;
        if (cB >= gpr) {
            cB -= gpr;
            rB++;
            offB += wrap;
        }
        /* ONE: the offset's partner base, shift and matrix, out of the loop */
        const uint8_t *tbd1 = tb + ((long long)ko.dy[olo] * pitch + (ko.dx[olo] & ~3));
        const int sh81 = (ko.dx[olo] & 3) * 8;
        uint4 a[2];
        a[0] = (int)threadIdx.x < ng ? __ldg(reinterpret_cast<const uint4 *>(tb + offA)) : make_uint4(0, 0, 0, 0);
        a[1] = (int)threadIdx.x + bd < ng ? __ldg(reinterpret_cast<const uint4 *>(tb + offB)) : make_uint4(0, 0, 0, 0);
        for (int g = threadIdx.x; g < ng; g += step) {
            const bool okB = g + bd < ng;
            /* warp-uniform choice: a warp whose lanes disagree would run both paths */
            const unsigned am = __activemask();
            const bool fullA = __all_sync(am, (uint32_t)(rA - frow0) < frows && (uint32_t)(cA - fcol0) < fcols);
            const bool fullB = __all_sync(am, okB && (uint32_t)(rB - frow0) < frows && (uint32_t)(cB - fcol0) < fcols);
            int rAn = rA + step_r, cAn = cA + step_c, offAn = offA + step_off;
            if (cAn >= gpr) {
                cAn -= gpr;
                rAn++;
                offAn += wrap;
            }
            int rBn = rAn + half_r, cBn = cAn + half_c, offBn = offAn + half_off;
            if (cBn >= gpr) {
                cBn -= gpr;
                rBn++;
                offBn += wrap;
            }
            uint4 an[2];
            an[0] = g + step < ng ? __ldg(reinterpret_cast<const uint4 *>(tb + offAn)) : make_uint4(0, 0, 0, 0);
            an[1] = g + step + bd < ng ? __ldg(reinterpret_cast<const uint4 *>(tb + offBn)) : make_uint4(0, 0, 0, 0);
            uint32_t alo[2][4], ahi[2][4];
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const uint32_t aw[4] = {a[u].x, a[u].y, a[u].z, a[u].w};
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    alo[u][k] = (aw[k] << s) & mlo;
                    ahi[u][k] = HI ? (aw[k] >> 3) & 0x03030303u : 0u;
                }
            }
            if (fullA && fullB) {
                for (int o = olo; o < ohi; o++) {
                    const uint8_t *tbd = ONE ? tbd1 : tb + ((long long)ko.dy[o] * pitch + (ko.dx[o] & ~3));
                    const int sh8 = ONE ? sh81 : (ko.dx[o] & 3) * 8;
                    const uint32_t basel = ONE ? lanebyte : (uint32_t)((o - olo) * LL * C * 4) + lanebyte;
                    const uint32_t *pb[2] = {reinterpret_cast<const uint32_t *>(tbd + (uint32_t)offA),
                                             reinterpret_cast<const uint32_t *>(tbd + (uint32_t)offB)};
                    uint32_t bw[2][5];
#pragma unroll
                    for (int u = 0; u < 2; u++)
#pragma unroll
                        for (int k = 0; k < 5; k++) bw[u][k] = __ldg(pb[u] + k);
#pragma unroll
                    for (int u = 0; u < 2; u++) {
                        uint32_t bs[4];
#pragma unroll
                        for (int k = 0; k < 4; k++) bs[k] = __funnelshift_r(bw[u][k], bw[u][k + 1], sh8);
                        const uint32_t aw[4] = {u ? a[1].x : a[0].x, u ? a[1].y : a[0].y, u ? a[1].z : a[0].z,
                                                u ? a[1].w : a[0].w};
                        dummy += vote16p<HI, MK>(sh, aw, alo[u], ahi[u], bs, basel, sb);
                    }
                }
            } else {
                const int r[2] = {tk.r0 + rA, tk.r0 + rB};
                const int x0[2] = {cA << 4, cB << 4};
                const uint8_t *pa[2] = {tb + offA, tb + offB};
                for (int o = olo; o < ohi; o++) {
                    const int dy = ko.dy[o], dx = ko.dx[o];
                    const int xs = max(0, -dx), xe = min(tk.w, tk.w - dx);
                    const long long db = (long long)dy * pitch + (dx & ~3);
                    const int sh8 = (dx & 3) * 8;
                    const uint32_t base = (uint32_t)((o - olo) * LL * C * 4) + lanebyte;
#pragma unroll
                    for (int u = 0; u < 2; u++) {
                        const int rr = r[u] + dy;
                        uint32_t vm = 0;
                        if ((u == 0 || okB) && rr >= 0 && rr < tk.h) {
                            const int lo = max(xs - x0[u], 0), hi = min(xe - x0[u], 16);
                            if (hi > lo) vm = ((hi >= 16 ? 0xffffu : ((1u << hi) - 1u)) >> lo) << lo;
                        }
                        const uint32_t aw[4] = {u ? a[1].x : a[0].x, u ? a[1].y : a[0].y, u ? a[1].z : a[0].z,
                                                u ? a[1].w : a[0].w};
                        if (u ? fullB : fullA) { /* this group is inside for the whole warp */
                            const uint32_t *pb = reinterpret_cast<const uint32_t *>(pa[u] + db);
                            uint32_t bs[4], bw[5];
#pragma unroll
                            for (int k = 0; k < 5; k++) bw[k] = __ldg(pb + k);
#pragma unroll
                            for (int k = 0; k < 4; k++) bs[k] = __funnelshift_r(bw[k], bw[k + 1], sh8);
                            dummy += vote16p<HI, MK>(sh, aw, alo[u], ahi[u], bs, base, sb);
                            continue;
                        }
                        if (!vm) continue;
                        const uint32_t *pb = reinterpret_cast<const uint32_t *>(pa[u] + db);
                        uint32_t bw[5];
#pragma unroll
                        for (int k = 0; k < 5; k++) bw[k] = __ldg(pb + k);
                        uint32_t bs[4];
#pragma unroll
                        for (int k = 0; k < 4; k++) bs[k] = __funnelshift_r(bw[k], bw[k + 1], sh8);
                        if (MK) {
                            vm &= ~flagged16(aw, bs);
                            if (!vm) continue;
                        }
                        if (vm == 0xffffu)
                            vote16<true>(sh, aw, bs, base, sa, sb, vm);
                        else
                            vote16<false>(sh, aw, bs, base, sa, sb, vm);
                    }
                }
            }
            a[0] = an[0];
            a[1] = an[1];
            rA = rAn;
            cA = cAn;
            offA = offAn;
            rB = rBn;
            cB = cBn;
            offB = offBn;
        }
    }
    if (MK && cur >= 0) atomicSub(reinterpret_cast<uint32_t *>(reinterpret_cast<char *>(sh) + lanebyte), dummy);
    k2_finish(sh, ko, G, L, C, cur, cursub, out);
}

/* k_count4 (variants 6-8; the default, 9, on launches of >= 16 K pixels per
 * SM): lanes, not blocks, carry the offset, so that one pass over the image
 * counts 2..32 offsets with conflict-free shared atomics whatever their
 * number (L = 2^s <= 32).
 *   - Lane l of a warp counts offset l / m (m = 32 / P lanes per offset,
 *     P = G rounded up to a power of two; lanes of the P - G pseudo-offsets
 *     repeat a real offset and their counters are never flushed). The table
 *     keeps one column per lane: counter (row, lane) at word row * RS + lane
 *     (RS = 32 for L = 32: 128 KB; RS = 64 for L <= 16: 64 KB at L = 16,
 *     16 KB at L = 8), so every warp-wide ATOMS hits 32 distinct banks for
 *     any data.
 *   - Groups are aligned on the partner side: group c of a lane of offset
 *     (dy, dx) pairs partners [16c, 16c + 16) of row r + dy (one aligned
 *     16-byte load) with first pixels [16c - dx, 16c - dx + 16) of row r
 *     (five 4-byte loads and funnel shifts). Lanes of offsets with the same
 *     dy read the same partner lines and all lanes read first pixels from
 *     one row, so a warp's load touches few lines although its lanes count
 *     up to 32 offsets.
 *   - The shared address is one PRMT per pair, no IMAD: the funnel shift
 *     that aligns the first pixels also shifts them left by s bits, and one
 *     LOP3 per 4 pairs merges the partner bytes into bc = per-byte
 *     (a << s | b) & 0xff. L <= 16: address = lane*4 | bc[k] << 8 (row =
 *     a*L + b, RS = 64). L = 32: the two high bits of a go to address bits
 *     7 and 16 (per-byte masks of the first pixels shifted by 4, built once
 *     per 4 pairs): address = lane*4 | a3 << 7 | bc[k] << 8 | a4 << 16, a
 *     dense 17-bit address (row = a3 | bc << 1 | a4 << 9).
 *   - Windows (below) inside the interior of every offset vote without
 *     masks (one warp-uniform test, no vote instruction); others mask.
 *   - The flush (flush_k4) adds the m columns of each offset with shuffles;
 *     one global atomic per non-zero cell.
 *   - MK (entries 29, 30; L = 32 under a mask, which a sentinel level would
 *     push to 33 levels and k_count2): bit 7 of a pixel marks it outside;
 *     a pair with such a pixel is counted as (0, 0) in the lane's own
 *     counter and taken back before the flush (vote16q). */

/* v, kept in a register: the compiler may not recompute it in a loop from
 * the values it came from (it did, for the loop invariants of k_count4). */
static __device__ __forceinline__ int opaque(int v)
{
    asm volatile("" : "+r"(v));
    return v;
}

/* Five consecutive words of a row from bit q (relative to a 16-byte aligned
 * group start; may be negative): LD = 0 five 4-byte loads at byte
 * ld_base(q); 1 three aligned 8-byte loads from there and a select (si =
 * ld_sel(q): the word base is odd). Two aligned 16-byte loads and a 4-way
 * select were tried (fewer lines per warp request) and measured slower in
 * k_count4 and k_count5 (docs/glcm.md). */
template <int LD>
static __device__ __forceinline__ int ld_base(int q)
{
    return LD == 1 ? 8 * (q >> 6) : 4 * (q >> 5);
}
template <int LD>
static __device__ __forceinline__ int ld_sel(int q)
{
    return LD == 1 ? (q >> 5) & 1 : 0;
}
template <int LD>
static __device__ __forceinline__ void load5(uint32_t r[5], const uint8_t *p, int si)
{
    if (LD == 1) {
        const uint2 *p2 = reinterpret_cast<const uint2 *>(p);
        const uint2 w0 = __ldg(p2), w1 = __ldg(p2 + 1), w2 = __ldg(p2 + 2);
        const uint32_t wd[6] = {w0.x, w0.y, w1.x, w1.y, w2.x, w2.y};
#pragma unroll
        for (int k = 0; k < 5; k++) r[k] = si ? wd[k + 1] : wd[k];
    } else {
        const uint32_t *p4 = reinterpret_cast<const uint32_t *>(p);
#pragma unroll
        for (int k = 0; k < 5; k++) r[k] = __ldg(p4 + k);
    }
}

/* k_count4 / k_count5: a task's windows. A warp takes windows of `win`
 * consecutive groups of 16 pixels (linear index over the task's rows, so a
 * window may wrap to the next row), the block's warps `stride` groups apart:
 * gpr groups per row, ng in all, the stride as rows, groups and bytes, wrap
 * the bytes from a row's last group to the next row. The interior for every
 * offset is task rows [f0, f0 + frn) and windows whose first group c has
 * 0 <= c - fcol0 <= fcl; SIGN = 1: groups of partners (k_count4: partner
 * column x has x - dx in [0, w)), -1: groups of first pixels (k_count5: x +
 * dx in [0, w)). */
struct kwin {
    int pitch, w, h, nr, gpr, ng, stride_r, stride_c, stride_off, wrap, f0, fcol0, fcl;
    uint32_t frn;
    const uint8_t *tb; /* row r0 of the task */
};

template <int SIGN>
static __device__ __forceinline__ kwin kwin_make(const gtask &tk, const koffs &ko, int win, int stride)
{
    kwin g;
    g.pitch = tk.pitch;
    g.w = tk.w;
    g.h = tk.h;
    g.nr = tk.r1 - tk.r0;
    g.gpr = opaque((g.w + 15) >> 4);
    g.ng = opaque(g.nr * g.gpr);
    g.stride_r = opaque(stride / g.gpr);
    g.stride_c = opaque(stride - g.stride_r * g.gpr);
    g.stride_off = opaque(g.stride_r * g.pitch + g.stride_c * 16);
    g.wrap = opaque(g.pitch - g.gpr * 16);
    g.tb = tk.base + (long long)(tk.r0 - tk.row0) * g.pitch;
    int rlo = 0, rhi = g.h, xlo = 0, xhi = g.w;
    for (int o = 0; o < ko.n; o++) {
        rlo = max(rlo, -ko.dy[o]);
        rhi = min(rhi, g.h - ko.dy[o]);
        xlo = max(xlo, SIGN * ko.dx[o]);
        xhi = min(xhi, g.w + SIGN * ko.dx[o]);
    }
    const int f1 = min(rhi - tk.r0, g.nr);
    g.f0 = opaque(max(rlo - tk.r0, 0));
    g.fcol0 = opaque((xlo + 15) >> 4);
    g.fcl = opaque((xhi > 0 ? xhi >> 4 : 0) - g.fcol0 - win);
    g.frn = (uint32_t)opaque(f1 > g.f0 && g.fcl >= 0 ? f1 - g.f0 : 0);
    return g;
}

/* the window (rw, cw) inside the interior */
static __device__ __forceinline__ bool kwin_inside(const kwin &g, int rw, int cw)
{
    return (uint32_t)(rw - g.f0) < g.frn && (uint32_t)(cw - g.fcol0) <= (uint32_t)g.fcl;
}

/* next window of the warp: (rw, cw) advanced, returns the bytes its
 * pointers advance (> 0) */
/* (row r, group c) of group c0 of window row rw (c0 may pass the row's gpr
 * groups: the window wraps to the next rows) */
static __device__ __forceinline__ void kwin_group(int gpr, int rw, int c0, int &r, int &c)
{
    r = rw;
    c = c0;
    if (c >= gpr) {
        r += c / gpr;
        c -= (c / gpr) * gpr;
    }
}

static __device__ __forceinline__ uint32_t kwin_step(const kwin &g, int &rw, int &cw)
{
    cw += g.stride_c;
    rw += g.stride_r;
    uint32_t adv = (uint32_t)g.stride_off;
    if (cw >= g.gpr) {
        cw -= g.gpr;
        rw++;
        adv += (uint32_t)g.wrap;
    }
    return adv;
}

/* k_count4 / k_count5 taking a task of image `out`: when the image changes,
 * the table goes to the previous image's counts (flush(cur)), zeroed. */
template <typename F>
static __device__ __forceinline__ void ktask_switch(int &cur, int out, uint32_t *sh, int nsh, F flush)
{
    if (out == cur) return; /* uniform over the block */
    if (cur >= 0) table_renew(sh, nsh, [&] { flush(cur); });
    cur = out;
}

/* One lane's 16 pairs: raw = five words from the first pixels' word base,
 * tA = bit shift that aligns them (and shifts each left by s = S), b = the
 * 16 partner bytes, mb = per-byte (1 << s) - 1, lw = lane*4 (L = 32: in bytes
 * 0 and 2), vm = pairs to vote (FULL: all).
 * MK (L = 32 only): a pixel with bit 7 set is outside the mask (levels use
 * bits 0..4), and a pair with such a pixel on either side, or outside vm,
 * is counted as the pair (0, 0) instead, in the lane's own counter of cell
 * (0, 0) (word `lane` of the table); the function returns how many, and the
 * kernel takes them back before the flush. Branch-free: an if around the
 * atomic became a branch per pair (ptxas does not predicate ATOMS.POPC.INC),
 * which ran 2.3 times slower. In the aligned word fa = raw >> tA first pixel
 * k's bit 7 is bit 8k + s + 7 (tA + s is 8, 16, 24 or 32, so the last one,
 * bit 159 of raw, is loaded), i.e. bit 8k + 7 of fa >> s. */
template <bool HI, bool FULL, bool MK = false>
static __device__ __forceinline__ uint32_t vote16q(char *shc, const uint32_t raw[5], const uint4 &b, uint32_t tA,
                                                   uint32_t mb, uint32_t lw, uint32_t vm)
{
    static_assert(!MK || HI, "masks in bit 7: L = 32 only");
    const uint32_t bw[4] = {b.x, b.y, b.z, b.w};
    uint32_t fa[5], x2[5], dummy = 0;
#pragma unroll
    for (int w = 0; w < 4; w++) fa[w] = __funnelshift_r(raw[w], raw[w + 1], tA);
    fa[4] = raw[4] >> tA;
    if (HI) {
#pragma unroll
        for (int w = 0; w < 4; w++) x2[w] = __funnelshift_r(raw[w], raw[w + 1], tA + 1); /* a << 4 */
        x2[4] = raw[4] >> (tA + 1); /* only its bit 0 (a[15] bit 4) is used */
    }
#pragma unroll
    for (int w = 0; w < 4; w++) {
        uint32_t bc = (fa[w] & ~mb) | bw[w];
        uint32_t ra = lw, rb = lw;
        if (HI) { /* bytes 0/2: lane*4 | a3 << 7 of pairs 0/2 (ra), 1/3 (rb); bytes 1/3: a4 */
            ra = x2[w] & 0x01800180u;
            rb = prmt(x2[w], x2[w + 1], 0x4321u) & 0x01800180u;
        }
        if (MK) { /* bit 8k + 7: pair k not counted; byte k 0xff; its address bytes zeroed */
            uint32_t inv = (__funnelshift_r(fa[w], fa[w + 1], 5) | bw[w]) & 0x80808080u;
            if (!FULL) inv |= ((((~vm >> (4 * w)) & 0xfu) * 0x00204081u) & 0x01010101u) << 7;
            const uint32_t invb = prmt(inv, 0u, 0xba98u); /* sign bytes */
            bc &= ~invb;
            ra &= ~prmt(invb, 0u, 0x2200u);
            rb &= ~prmt(invb, 0u, 0x3311u);
            dummy += __popc(inv);
        }
        if (HI) {
            ra |= lw;
            rb |= lw;
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            /* HI: bytes r[2j], bc[k], r[2j+1], sign of r[2j+1] (zero); else lw[0], bc[k], 0, 0 */
            const uint32_t sel = HI ? (k < 2 ? 0xd504u : 0xf726u) | ((uint32_t)k << 4) : 0x5504u | ((uint32_t)k << 4);
            const uint32_t addr = prmt(bc, (k & 1) ? rb : ra, sel);
            if (MK || FULL || ((vm >> (4 * w + k)) & 1u)) atomicAdd(reinterpret_cast<uint32_t *>(shc + addr), 1u);
        }
    }
    return dummy;
}

/* The k_count4 table into the global counts. Warp w takes 32 rows at a time
 * (rows 32w.., then 32(w + warps)..): it reads each row (conflict-free), adds
 * the m lanes of each offset with shuffles and writes the offset's sum back
 * into word (o + row) % 32 of that row (already read), then lane l reads
 * row 32w + l's sum of each offset (banks (o + row) % 32: conflict-free) and
 * adds it to the global counts: one atomic per non-zero cell, a warp's 32
 * atomics on 32 neighbouring cells of one matrix (coalesced). */
template <int S>
static __device__ __forceinline__ void flush_k4(uint32_t *sh, const koffs &ko, int lm, int cur, uint32_t *out)
{
    constexpr int L = 1 << S, LL = L * L, RS = S == 5 ? 32 : 64;
    const int lane = (int)(threadIdx.x & 31), m = 1 << lm, o = lane >> lm, nw = (int)(blockDim.x >> 5);
    for (int r0 = (int)(threadIdx.x >> 5) * 32; r0 < LL; r0 += nw * 32) {
        const int nrow = min(32, LL - r0);
        for (int r = r0; r < r0 + nrow; r++) {
            uint32_t v = sh[r * RS + lane];
            for (int d = 1; d < m; d <<= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
            if ((lane & (m - 1)) == 0) sh[r * RS + ((o + r) & 31)] = v; /* the row was read */
            __syncwarp();
        }
        if (lane < nrow) {
            const int r = r0 + lane;
            int a, b;
            if (S == 5) { /* row = a3 | ((a & 7) << 5 | b) << 1 | a4 << 9 */
                const int bc = (r >> 1) & 255;
                b = bc & 31;
                a = (bc >> 5) | ((r & 1) << 3) | ((r >> 9) << 4);
            } else {
                a = r >> S;
                b = r & (L - 1);
            }
            uint32_t *dst = out + ((size_t)cur * ko.noff_total + ko.o0) * LL + a * L + b;
            for (int oo = 0; oo < ko.n; oo++) {
                const uint32_t v = sh[r * RS + ((oo + r) & 31)];
                if (v) atomicAdd(dst + (size_t)oo * LL, v);
            }
        }
        __syncwarp();
    }
}

/* G = ko.n offsets (2..32), L = 2^S, C = log2 m. A warp takes windows of
 * U*m consecutive partner groups (linear index over the task's rows, so a
 * window may wrap to the next row); lane l takes groups l % m + m*u (u < U)
 * of the window for offset l / m, so that each load instruction of the warp
 * reads, per offset, m neighbouring groups (64 bytes for 8 offsets). A
 * window inside the interior (one warp-uniform test on the warp's row and
 * first column, no vote) loads and votes without masks, the partners with
 * one aligned 16-byte load per group, the first pixels with five 4-byte
 * loads (load5: or three aligned 8-byte loads and a select); any other
 * window takes the masked path, group by group. Per-lane pointers advance
 * with the window. */
template <int S, int U, int LD, int NT, bool MK = false>
__global__ void __launch_bounds__(NT, 1)
k_count4(const gtask *__restrict__ tasks, int ntasks, koffs ko, int G, int L, int C,
         uint32_t *__restrict__ out)
{
    constexpr bool HI = S == 5;
    constexpr int RS = HI ? 32 : 64, NSH = (1 << (2 * S)) * RS;
    constexpr uint32_t MB = ((1u << S) - 1u) * 0x01010101u;
    extern __shared__ uint32_t sh[];
    char *shc = reinterpret_cast<char *>(sh);
    const int lm = C, m = 1 << lm, lane = (int)(threadIdx.x & 31), kq = lane & (m - 1);
    const uint32_t lw = HI ? (uint32_t)lane * 0x40004u : (uint32_t)lane * 4u;
    const int oe = (lane >> lm) < G ? (lane >> lm) : (lane >> lm) - G; /* pseudo-offset lanes repeat one */
    const int win = U << lm, stride = opaque((int)(blockDim.x >> 5) * win);
    int cur = -1;
    uint32_t dummy = 0; /* MK: this thread's pairs counted as (0, 0) since the last flush */
    (void)L;
    for (int i = threadIdx.x; i < NSH; i += blockDim.x) sh[i] = 0;
    __syncthreads();
    for (int t = blockIdx.x; t < ntasks; t += gridDim.x) {
        const gtask tk = tasks[t];
        if (MK && tk.out != cur && cur >= 0) { /* block-uniform: the pairs counted as (0, 0) leave */
            atomicSub(&sh[lane], dummy);
            dummy = 0;
        }
        ktask_switch(cur, tk.out, sh, NSH, [&](int c) { flush_k4<S>(sh, ko, lm, c, out); });
        const kwin g = kwin_make<1>(tk, ko, win, stride);
        const int pitch = g.pitch, w = g.w, h = g.h, nr = g.nr, gpr = g.gpr;
        const uint8_t *tb = g.tb;
        /* this lane's offset; beyond the image it has no pair: clamp (no overflow) */
        const int dy = min(max(ko.dy[oe], -h), h), dx = min(max(ko.dx[oe], -w - 16), w + 16);
        const int qa = -8 * dx - S;                           /* first bit of a << S, group start 0 */
        const int ja = ld_sel<LD>(qa);                        /* LD > 0: word select */
        const uint8_t *tbB = tb + (long long)dy * pitch;      /* partners of row r0, group 0 */
        const uint8_t *tbA = tb + 4 * (qa >> 5);              /* word of that first bit (floor) */
        const uint32_t tA = (uint32_t)opaque(qa & 31);
        const int rdy = tk.r0 + dy, xa = dx, xb = min(w, w + dx); /* pairs: x0 + i in [xa, xb) */
        const int us = opaque(16 << lm);                      /* bytes between a lane's groups */
        int gw = (int)(threadIdx.x >> 5) * win;
        int rw = gw / gpr, cw = gw - rw * gpr;
        /* fast-path pointers of the lane's first group in the window */
        const uint8_t *pa = tb + ld_base<LD>(qa) + ((long long)rw * pitch + (cw + kq) * 16);
        const uint8_t *pb = tbB + ((long long)rw * pitch + (cw + kq) * 16);
        for (; gw < g.ng; gw += stride) { /* warp-uniform */
            if (kwin_inside(g, rw, cw)) {
                uint32_t raw[U][5];
                uint4 b[U];
#pragma unroll
                for (int u = 0; u < U; u++) b[u] = __ldg(reinterpret_cast<const uint4 *>(pb + u * us));
#pragma unroll
                for (int u = 0; u < U; u++) load5<LD>(raw[u], pa + u * us, ja);
#pragma unroll
                for (int u = 0; u < U; u++) dummy += vote16q<HI, true, MK>(shc, raw[u], b[u], tA, MB, lw, 0xffffu);
            } else {
#pragma unroll 1
                for (int u = 0; u < U; u++) {
                    int r, c;
                    kwin_group(gpr, rw, cw + kq + (u << lm), r, c);
                    uint32_t vm = 0;
                    if (r < nr && (unsigned)(r + rdy) < (unsigned)h) {
                        const int x0 = c << 4, lo = max(xa - x0, 0), hi = min(xb - x0, 16);
                        if (hi > lo) vm = ((hi >= 16 ? 0xffffu : ((1u << hi) - 1u)) >> lo) << lo;
                    }
                    if (vm) {
                        const int off = r * pitch + c * 16;
                        const uint32_t *p4 = reinterpret_cast<const uint32_t *>(tbA + off);
                        uint32_t raw[5];
#pragma unroll
                        for (int k = 0; k < 5; k++) raw[k] = __ldg(p4 + k);
                        const uint4 b = __ldg(reinterpret_cast<const uint4 *>(tbB + off));
                        dummy += vote16q<HI, false, MK>(shc, raw, b, tA, MB, lw, vm);
                    }
                }
            }
            const uint32_t adv = kwin_step(g, rw, cw);
            pa += adv;
            pb += adv;
        }
    }
    if (cur >= 0) {
        if (MK) atomicSub(&sh[lane], dummy);
        __syncthreads();
        flush_k4<S>(sh, ko, lm, cur, out);
    }
}

/* k_count5 (variants 10, 11; L = 2^s <= 8, 2..32 offsets): k_count4 with
 * each lane counting a pair of offsets (o1, o2) = (2p, 2p + 1) into one
 * joint table of (a, b1, b2) triples, so that one shared atomic counts two
 * pairs (k_count4 needs one per pair: at 16384^2 and 8 offsets its shared
 * atomics alone take ~0.51 ms on the H100, 2 L1 cycles each).
 *   - Lane l counts offset pair l / m (m = 32 / P lanes per pair, P = the
 *     ceil(G / 2) pairs rounded up to a power of two; lanes of pseudo-pairs
 *     repeat a real pair and are never flushed; for odd G the last pair is
 *     (G - 1, G - 1) and only its first marginal is flushed).
 *   - Table: one column per lane, word R * 32 + lane, R = a << 2s | b1 << s
 *     | b2 for the L^3 triples, then 2 L^2 rows of single pairs (o1, then
 *     o2) for the windows on the image's border; 80 KB at L = 8.
 *   - Groups are aligned on the first pixels (one 16-byte load); each
 *     offset's partners come from five 4-byte loads and a funnel shift that
 *     also shifts o1's left by s - 1 bits. Per 4 pixels, byte-parallel
 *     words hi = R >> 1 = a << (2s - 1) | b1 << (s - 1) | b2 >> 1 and lo =
 *     lane*4 | (b2 & 1) << 7; two PRMT give each pixel's 16-bit address
 *     lane*4 | R << 7 in a half word.
 *   - The flush (flush_k5) adds, per cell (a, b) and lane, the L triples of
 *     each marginal and the single row, sums the m lanes of a pair with
 *     shuffles, one global atomic per non-zero cell. */
template <int S>
static __device__ __forceinline__ void vote_joint(char *shc, const uint4 &a, const uint32_t r1[5], uint32_t t1,
                                                  const uint32_t r2[5], uint32_t t2, uint32_t lw4)
{
    const uint32_t aw[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
    for (int w = 0; w < 4; w++) {
        const uint32_t b1 = __funnelshift_r(r1[w], r1[w + 1], t1); /* bytes b1 << (s - 1) */
        const uint32_t b2 = __funnelshift_r(r2[w], r2[w + 1], t2); /* bytes b2 */
        /* the low s - 1 bits of b1's bytes hold the previous byte's top bits
         * (outside the image for the group's first byte at column 0): they
         * take b2 >> 1 instead, one LOP3 */
        constexpr uint32_t M = ((1u << (S - 1)) - 1u) * 0x01010101u;
        const uint32_t hi = (aw[w] << (2 * S - 1)) | (b1 & ~M) | ((b2 >> 1) & M);
        const uint32_t lo = ((b2 << 7) & 0x80808080u) | lw4;
        const uint32_t x01 = prmt(lo, hi, 0x5140u), x23 = prmt(lo, hi, 0x7362u);
        atomicAdd(reinterpret_cast<uint32_t *>(shc + (x01 & 0xffffu)), 1u);
        atomicAdd(reinterpret_cast<uint32_t *>(shc + (x01 >> 16)), 1u);
        atomicAdd(reinterpret_cast<uint32_t *>(shc + (x23 & 0xffffu)), 1u);
        atomicAdd(reinterpret_cast<uint32_t *>(shc + (x23 >> 16)), 1u);
    }
}

/* k_count5: one group's loads (first pixels at pa, partners of o1 / o2 at
 * pb1 / pb2: five words each, load5) */
template <int LD>
static __device__ __forceinline__ void k5_load(uint4 &av, uint32_t r1[5], uint32_t r2[5], const uint8_t *pa,
                                               const uint8_t *pb1, const uint8_t *pb2, int j1, int j2)
{
    av = __ldg(reinterpret_cast<const uint4 *>(pa));
    load5<LD>(r1, pb1, j1);
    load5<LD>(r2, pb2, j2);
}

template <int S>
static __device__ __forceinline__ void flush_k5(uint32_t *sh, const koffs &ko, int G, int lm, int cur,
                                                uint32_t *out)
{
    constexpr int L = 1 << S, LL = L * L, L3 = L * L * L;
    const int lane = (int)(threadIdx.x & 31), m = 1 << lm, p = lane >> lm, nw = (int)(blockDim.x >> 5);
    const int o1 = 2 * p, o2 = 2 * p + 1;
    const bool real = o1 < G && (lane & (m - 1)) == 0;
    for (int cell = (int)(threadIdx.x >> 5); cell < LL; cell += nw) {
        const int a = cell >> S, b = cell & (L - 1);
        uint32_t v1 = sh[(L3 + cell) * 32 + lane], v2 = sh[(L3 + LL + cell) * 32 + lane];
#pragma unroll
        for (int k = 0; k < L; k++) {
            v1 += sh[((a << (2 * S)) | (b << S) | k) * 32 + lane]; /* b1 = b: sum over b2 */
            v2 += sh[((a << (2 * S)) | (k << S) | b) * 32 + lane]; /* b2 = b: sum over b1 */
        }
        for (int d = 1; d < m; d <<= 1) {
            v1 += __shfl_xor_sync(0xffffffffu, v1, d);
            v2 += __shfl_xor_sync(0xffffffffu, v2, d);
        }
        if (real) {
            uint32_t *dst = out + ((size_t)cur * ko.noff_total + ko.o0) * LL + cell;
            if (v1) atomicAdd(dst + (size_t)o1 * LL, v1);
            if (o2 < G && v2) atomicAdd(dst + (size_t)o2 * LL, v2);
        }
    }
}

/* G = ko.n offsets (2..32), L = 2^S <= 8, C = log2 m. Windows as k_count4
 * (U*m consecutive groups of 16 first pixels, lane l takes groups l % m +
 * m*u); a window inside the interior of every offset takes the joint vote,
 * any other counts single pairs group by group. */
template <int S, int U, int LD, int NT>
__global__ void __launch_bounds__(NT, 1)
k_count5(const gtask *__restrict__ tasks, int ntasks, koffs ko, int G, int L, int C,
         uint32_t *__restrict__ out)
{
    constexpr int LQ = 1 << S, L3 = LQ * LQ * LQ, NSH = (L3 + 2 * LQ * LQ) * 32;
    extern __shared__ uint32_t sh[];
    char *shc = reinterpret_cast<char *>(sh);
    const int lm = C, m = 1 << lm, lane = (int)(threadIdx.x & 31), kq = lane & (m - 1);
    const int np = (G + 1) >> 1, p0 = lane >> lm, p = p0 < np ? p0 : p0 - np; /* pseudo-pair lanes repeat one */
    const int o1 = 2 * p, o2 = min(2 * p + 1, G - 1);
    const uint32_t lw4 = (uint32_t)lane * 0x04040404u;
    const int win = U << lm, stride = opaque((int)(blockDim.x >> 5) * win);
    int cur = -1;
    (void)L;
    for (int i = threadIdx.x; i < NSH; i += blockDim.x) sh[i] = 0;
    __syncthreads();
    for (int t = blockIdx.x; t < ntasks; t += gridDim.x) {
        const gtask tk = tasks[t];
        ktask_switch(cur, tk.out, sh, NSH, [&](int c) { flush_k5<S>(sh, ko, G, lm, c, out); });
        const kwin g = kwin_make<-1>(tk, ko, win, stride);
        const int pitch = g.pitch, w = g.w, h = g.h, nr = g.nr, gpr = g.gpr;
        const uint8_t *tb = g.tb;
        /* this lane's offsets; beyond the image they have no pair: clamp */
        const int dy1 = min(max(ko.dy[o1], -h), h), dx1 = min(max(ko.dx[o1], -w - 16), w + 16);
        const int dy2 = min(max(ko.dy[o2], -h), h), dx2 = min(max(ko.dx[o2], -w - 16), w + 16);
        const int q1 = 8 * dx1 - (S - 1), q2 = 8 * dx2; /* first bit of b1 << (s-1), of b2, group start 0 */
        const int j1 = ld_sel<LD>(q1), j2 = ld_sel<LD>(q2); /* load5's word selects */
        const uint8_t *tb1 = tb + (long long)dy1 * pitch + ld_base<LD>(q1);
        const uint8_t *tb2 = tb + (long long)dy2 * pitch + ld_base<LD>(q2);
        const uint32_t t1 = (uint32_t)opaque(q1 & 31), t2 = (uint32_t)opaque(q2 & 31);
        const int us = opaque(16 << lm); /* bytes between a lane's groups */
        int gw = (int)(threadIdx.x >> 5) * win;
        int rw = gw / gpr, cw = gw - rw * gpr;
        const long long off0 = (long long)rw * pitch + (cw + kq) * 16;
        const uint8_t *pa = tb + off0, *pb1 = tb1 + off0, *pb2 = tb2 + off0;
        for (; gw < g.ng; gw += stride) { /* warp-uniform */
            if (kwin_inside(g, rw, cw)) {
                uint4 av[U];
                uint32_t r1[U][5], r2[U][5];
#pragma unroll
                for (int u = 0; u < U; u++)
                    k5_load<LD>(av[u], r1[u], r2[u], pa + u * us, pb1 + u * us, pb2 + u * us, j1, j2);
#pragma unroll
                for (int u = 0; u < U; u++) vote_joint<S>(shc, av[u], r1[u], t1, r2[u], t2, lw4);
            } else {
#pragma unroll 1
                for (int u = 0; u < U; u++) {
                    int r, c;
                    kwin_group(gpr, rw, cw + kq + (u << lm), r, c);
                    if (r >= nr) continue;
                    const int x0 = c << 4;
                    const bool in1 = (unsigned)(tk.r0 + r + dy1) < (unsigned)h && x0 + dx1 >= 0 && x0 + 16 + dx1 <= w;
                    const bool in2 = (unsigned)(tk.r0 + r + dy2) < (unsigned)h && x0 + dx2 >= 0 && x0 + 16 + dx2 <= w;
                    if (in1 && in2 && x0 + 16 <= w) { /* every pair of the group exists: joint */
                        const long long off = (long long)r * pitch + x0;
                        uint4 a1;
                        uint32_t s1[5], s2[5];
                        k5_load<LD>(a1, s1, s2, tb + off, tb1 + off, tb2 + off, j1, j2);
                        vote_joint<S>(shc, a1, s1, t1, s2, t2, lw4);
                        continue;
                    }
#pragma unroll 1
                    for (int oo = 0; oo < 2; oo++) { /* single pairs of o1, then o2 */
                        if (oo && o2 == o1) break;
                        const int dy = oo ? dy2 : dy1, dx = oo ? dx2 : dx1;
                        if ((unsigned)(tk.r0 + r + dy) >= (unsigned)h) continue;
                        const int lo = max(max(0, -dx) - x0, 0), hi = min(min(w, w - dx) - x0, 16);
                        if (hi <= lo) continue;
                        const uint8_t *ra = tb + (long long)r * pitch + x0;
                        const uint8_t *rb = tb + (long long)(r + dy) * pitch + x0 + dx;
                        uint32_t *col = sh + (L3 + oo * LQ * LQ) * 32 + lane;
                        for (int i = lo; i < hi; i++) atomicAdd(col + ((ra[i] << S) | rb[i]) * 32, 1u);
                    }
                }
            }
            const uint32_t adv = kwin_step(g, rw, cw);
            pa += adv;
            pb1 += adv;
            pb2 += adv;
        }
    }
    if (cur >= 0) {
        __syncthreads();
        flush_k5<S>(sh, ko, G, lm, cur, out);
    }
}

typedef void (*k2_fn_t)(const gtask *, int, koffs, int, int, int, uint32_t *);
static const struct {
    k2_fn_t fn;
    int threads;
} k2_variants[] = {{k_count2<false, 768>, 768}, /* 0: the previous kernel (no prefetch) */
                   {k_count2<true, 768>, 768},  /* 1: prefetch, 80 registers (spills 20 bytes) */
                   {k_count2<true, 512>, 512},  /* 2: prefetch, 16 warps */
                   {k_count2<true, 640>, 640},  /* 3: prefetch, 20 warps, 95 registers */
                   /* 4 (the default): k_count3 at 640 threads when the block counts one
                    * offset and L is a power of two <= 32, else 3; 5: the same at 768
                    * threads. Entries 4..7: k_count3<L == 32, one offset, threads>. With
                    * several offsets per block (ONE = false: spills, and slower at 8
                    * offsets on the H100, see docs/glcm.md) k_count2 stays. */
                   {k_count3<false, true, 640>, 640},
                   {k_count3<true, true, 640>, 640},
                   {k_count3<false, true, 768>, 768},
                   {k_count3<true, true, 768>, 768},
                   /* 6: k_count4 for 2..32 offsets and L = 2^s <= 32 (entries 8..12:
                    * L = 2..32, two groups per lane and window), k_count3 (4) for one
                    * offset, else 3; 7: the same with four groups per lane (entries
                    * 13..17); 8: two groups, first pixels by 8-byte loads (entries
                    * 18..22). 9 (the default, no entry of its own): 7 when a launch
                    * gives each SM >= 1 M pixels, 6 when >= 16 K, else 4 (measured:
                    * docs/glcm.md) */
                   {k_count4<1, 2, 0, 640>, 640},
                   {k_count4<2, 2, 0, 640>, 640},
                   {k_count4<3, 2, 0, 640>, 640},
                   {k_count4<4, 2, 0, 640>, 640},
                   {k_count4<5, 2, 0, 640>, 640},
                   {k_count4<1, 4, 0, 640>, 640},
                   {k_count4<2, 4, 0, 640>, 640},
                   {k_count4<3, 4, 0, 640>, 640},
                   {k_count4<4, 4, 0, 640>, 640},
                   {k_count4<5, 4, 0, 640>, 640},
                   {k_count4<1, 2, 1, 640>, 640},
                   {k_count4<2, 2, 1, 640>, 640},
                   {k_count4<3, 2, 1, 640>, 640},
                   {k_count4<4, 2, 1, 640>, 640},
                   {k_count4<5, 2, 1, 640>, 640},
                   /* 10: k_count5 (joint pairs of offsets) for 2..32 offsets and L =
                    * 2^s <= 8, two groups per lane and window (entries 23..25: L = 2,
                    * 4, 8), else as 6; 11: the same with partners by 8-byte loads
                    * (entries 26..28), else as 7 */
                   {k_count5<1, 2, 0, 640>, 640},
                   {k_count5<2, 2, 0, 640>, 640},
                   {k_count5<3, 2, 0, 640>, 640},
                   {k_count5<1, 2, 1, 640>, 640},
                   {k_count5<2, 2, 1, 640>, 640},
                   {k_count5<3, 2, 1, 640>, 640},
                   /* 29, 30: k_count4 for L = 32 with two / four groups per lane, on
                    * images whose bit 7 marks pixels outside a mask (make_plan's
                    * `flagged`: taken instead of 12 (or 22) / 17) */
                   {k_count4<5, 2, 0, 640, true>, 640},
                   {k_count4<5, 4, 0, 640, true>, 640},
                   /* 31: k_count3 for one offset at L = 32 on flagged images (taken
                    * instead of 5) */
                   {k_count3<true, true, 640, true>, 640}};
#define K2VARIANTS 12 /* what PATINA_GLCM_K2 may pick (9: the default policy, make_plan) */
#define K2FNS 32     /* entries of k2_variants */

/* P + P^T for nmat matrices. */
__global__ void k_symmetrise(uint32_t *P, long long nmat, int L)
{
    const long long LL = (long long)L * L, n = nmat * LL;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
         e += (long long)gridDim.x * blockDim.x) {
        const long long m = e / LL;
        const int cell = (int)(e - m * LL), i = cell / L, j = cell - i * L;
        uint32_t *M = P + m * LL;
        if (i < j) {
            const uint32_t s = M[i * L + j] + M[j * L + i];
            M[i * L + j] = s;
            M[j * L + i] = s;
        } else if (i == j) {
            M[cell] *= 2;
        }
    }
}

/* One block per matrix: the moments of glcm_core.h in the C reference's
 * order, then glcm_finish. props (nmat, 10), har (nmat, 14) (may be NULL);
 * har[13] (mcc) is left 0 here: k_mcc (levels <= MCC_GPU_MAX_LEVELS) or the
 * host fills it. */
__global__ void __launch_bounds__(FTHREADS)
k_features(const uint32_t *__restrict__ counts, int L, double *props, double *har)
{
    __shared__ unsigned long long rows[PATINA_GLCM_MAX_LEVELS], cols[PATINA_GLCM_MAX_LEVELS];
    __shared__ unsigned long long diff[PATINA_GLCM_MAX_LEVELS];
    __shared__ unsigned long long sum[2 * PATINA_GLCM_MAX_LEVELS - 1];
    __shared__ unsigned long long part_sij[FTHREADS];
    __shared__ unsigned __int128 part_q[FTHREADS];
    __shared__ double part_en[PATINA_GLCM_MAX_LEVELS], part_eb[PATINA_GLCM_MAX_LEVELS],
        part_mi[PATINA_GLCM_MAX_LEVELS];
    __shared__ glcm_moments_t m;
    const int LL = L * L, tid = threadIdx.x;
    const uint32_t *P = counts + (size_t)blockIdx.x * LL;
    unsigned long long sij = 0;
    unsigned __int128 q = 0;
    for (int i = tid; i < 2 * PATINA_GLCM_MAX_LEVELS - 1; i += blockDim.x) {
        sum[i] = 0;
        if (i < PATINA_GLCM_MAX_LEVELS) rows[i] = cols[i] = diff[i] = 0;
    }
    __syncthreads();
    for (int cell = tid; cell < LL; cell += blockDim.x) {
        const unsigned long long c = P[cell];
        if (!c) continue;
        const int i = cell / L, j = cell - i * L;
        atomicAdd(&rows[i], c);
        atomicAdd(&cols[j], c);
        atomicAdd(&diff[i > j ? i - j : j - i], c);
        atomicAdd(&sum[i + j], c);
        sij += c * (unsigned long long)i * (unsigned long long)j;
        q += (unsigned __int128)c * c;
    }
    part_sij[tid] = sij;
    part_q[tid] = q;
    __syncthreads();
    if (tid == 0) {
        memset(&m, 0, sizeof m);
        for (int k = 0; k < (int)blockDim.x; k++) {
            m.Sij += part_sij[k];
            m.Q += part_q[k];
        }
        for (int i = 0; i < L; i++) {
            const unsigned long long ui = (unsigned long long)i;
            m.T += rows[i];
            m.Si += ui * rows[i];
            m.Sj += ui * cols[i];
            m.Sii += ui * ui * rows[i];
            m.Sjj += ui * ui * cols[i];
        }
        for (int k = 0; k < L; k++) {
            m.d1 += (unsigned long long)k * diff[k];
            m.d2 += (unsigned long long)k * (unsigned long long)k * diff[k];
            m.hom += (double)diff[k] / (1.0 + (double)k * (double)k);
        }
        for (int k = 0; k < 2 * L - 1; k++) {
            m.s1 += (unsigned long long)k * sum[k];
            m.s2 += (unsigned long long)k * (unsigned long long)k * sum[k];
        }
    }
    __syncthreads();
    if (m.T != 0) {
        const double T = (double)m.T;
        for (int i = tid; i < L; i += blockDim.x) { /* per-row partials, j in order */
            const uint32_t *row = P + (size_t)i * L;
            double en = 0, eb = 0, mi = 0;
            for (int j = 0; j < L; j++) {
                if (row[j] == 0) continue;
                const double c = (double)row[j], p = c / T;
                en -= p * log(p);
                eb -= glcm_plogp2(p);
                mi += glcm_mi_term(row[j], m.T, rows[i], cols[j]);
            }
            part_en[i] = en;
            part_eb[i] = eb;
            part_mi[i] = mi;
        }
        __syncthreads();
        if (tid == 0) {
            for (int i = 0; i < L; i++) {
                m.ent_nat += part_en[i];
                m.hxy += part_eb[i];
                m.mi += part_mi[i];
            }
            for (int k = 0; k < L; k++) {
                m.hx -= glcm_plogp2((double)rows[k] / T);
                m.hy -= glcm_plogp2((double)cols[k] / T);
                m.hd -= glcm_plogp2((double)diff[k] / T);
            }
            for (int k = 0; k < 2 * L - 1; k++) m.hs -= glcm_plogp2((double)sum[k] / T);
        }
    }
    if (tid == 0)
        glcm_finish(&m, 0.0, props ? props + (size_t)blockIdx.x * GLCM_NPROPS : NULL, 1,
                    har ? har + (size_t)blockIdx.x * GLCM_NHAR : NULL);
}

/* ----------------------------------------------------- lab kernels */

/* Scheme 1: one thread per pixel, a global atomic per pair. */
__global__ void k_s1(const uint8_t *__restrict__ q, int w, int h, int pitch, int L, int dy, int dx,
                     uint32_t *P)
{
    const long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (p >= (long long)w * h) return;
    const int r = (int)(p / w), c = (int)(p - (long long)r * w), rr = r + dy, cc = c + dx;
    if (rr < 0 || rr >= h || cc < 0 || cc >= w) return;
    atomicAdd(&P[q[(long long)r * pitch + c] * L + q[(long long)rr * pitch + cc]], 1u);
}

/* Scheme 2 (and the kernel of Scheme 3): R sub-GLCMs of L*L words in each
 * block's shared memory, thread i votes into sub-GLCM i mod R; the first
 * pixels are the linear range [s, e) of an image of width w (pitch w),
 * whose linear pixel `base` is at buf[0]. */
__global__ void k_s2(const uint8_t *__restrict__ buf, long long base, long long s, long long e,
                     int w, int h, int L, int dy, int dx, int R, uint32_t *P)
{
    extern __shared__ uint32_t sub[];
    const int LL = L * L;
    for (int i = threadIdx.x; i < R * LL; i += blockDim.x) sub[i] = 0;
    __syncthreads();
    uint32_t *mine = sub + (threadIdx.x % R) * LL;
    const long long lin = (long long)dy * w + dx;
    for (long long p = s + blockIdx.x * (long long)blockDim.x + threadIdx.x; p < e;
         p += (long long)gridDim.x * blockDim.x) {
        const int r = (int)(p / w), c = (int)(p - (long long)r * w);
        if (r + dy < 0 || r + dy >= h || c + dx < 0 || c + dx >= w) continue;
        atomicAdd(&mine[buf[p - base] * L + buf[p + lin - base]], 1u);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < LL; i += blockDim.x) {
        uint32_t t = 0;
        for (int c = 0; c < R; c++) t += sub[c * LL + i];
        if (t) atomicAdd(&P[i], t);
    }
}

/* -------------------------------------------------------- workspace */

struct slot_t {
    cudaStream_t s;
    cudaEvent_t done;
    uint8_t *d_buf, *h_stage;  /* GUARD + cap bytes each */
    size_t cap;
    gtask *d_tasks, *h_tasks;
    size_t task_cap;
    int used;                  /* has work in flight (done is recorded) */
};

struct ws_t {
    int dev, sms, smem_optin, smem_sm;
    slot_t sl[NSLOT];
    uint32_t *d_counts;
    size_t counts_cap;   /* elements */
    double *d_feat;      /* props then har */
    size_t feat_cap;     /* matrices */
    int attr_set;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static ws_t *g_ws[MAXDEV];
static size_t g_slot_bytes = DEF_SLOT_BYTES, g_task_pixels = DEF_TASK_PIXELS;
/* Counting knobs (the lab overrides them from the environment for bench_glcm):
 * g_k2_var: the counting kernel variant (k2_variants; 9, the default:
 * k_count5 for 2..32 offsets and L = 2^s <= 8 on launches of >= 64 K pixels
 * per SM, k_count4 for 2..32 offsets and L = 2^s <= 32 on other large ones, k_count3
 * for one offset, else k_count2 variant 3); g_split: offset subsets when
 * fewer than 32 copies fit (0, 1: none, the default; measured: it helps hash
 * noise, hurts smooth images at 16384^2); g_task_min: smallest
 * automatic task in pixels. */
#define K2_DEFAULT 9
static int g_k2_var = K2_DEFAULT, g_split = 0;
static size_t g_task_min = DEF_TASK_MIN;

/* Test hook, read at each production call (under g_mu): PATINA_GLCM_K2 picks
 * the counting variant (tests/gpu runs the production path under several). */
static void k2_from_env(void)
{
    const char *v = getenv("PATINA_GLCM_K2");
    g_k2_var = v && atoi(v) >= 0 && atoi(v) < K2VARIANTS ? atoi(v) : K2_DEFAULT;
}

static patina_status ws_get(ws_t **out)
{
    int dev = 0;
    ws_t *w;
    *out = NULL;
    CK(cudaGetDevice(&dev));
    if (dev < 0 || dev >= MAXDEV) return patina__fail(PATINA_E_UNAVAILABLE, "gpu: glcm: device %d", dev);
    if (g_ws[dev]) {
        *out = g_ws[dev];
        return PATINA_OK;
    }
    w = (ws_t *)calloc(1, sizeof *w);
    if (!w) return patina__fail(PATINA_E_NOMEM, "gpu: glcm: out of memory");
    w->dev = dev;
    /* test hook: the production path with an offset split (tests/gpu with
     * PATINA_GLCM_SPLIT set); PATINA_GLCM_K2: k2_from_env */
    if (getenv("PATINA_GLCM_SPLIT")) g_split = atoi(getenv("PATINA_GLCM_SPLIT"));
    CK(cudaDeviceGetAttribute(&w->sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaDeviceGetAttribute(&w->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    CK(cudaDeviceGetAttribute(&w->smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    for (int k = 0; k < NSLOT; k++) {
        CK(cudaStreamCreateWithFlags(&w->sl[k].s, cudaStreamNonBlocking));
        CK(cudaEventCreateWithFlags(&w->sl[k].done, cudaEventDisableTiming));
    }
    g_ws[dev] = w;
    *out = w;
    return PATINA_OK;
}

static patina_status slot_wait(slot_t *s)
{
    if (s->used) {
        CK(cudaEventSynchronize(s->done));
        s->used = 0;
    }
    return PATINA_OK;
}

static patina_status slot_reserve(slot_t *s, size_t bytes, size_t tasks)
{
    PATINA_TRY(slot_wait(s));
    if (s->cap < bytes) {
        if (s->d_buf) CK(cudaFree(s->d_buf));
        if (s->h_stage) CK(cudaFreeHost(s->h_stage));
        s->d_buf = NULL;
        s->h_stage = NULL;
        s->cap = 0;
        CK(cudaMalloc((void **)&s->d_buf, GUARD + bytes));
        CK(cudaHostAlloc((void **)&s->h_stage, GUARD + bytes, cudaHostAllocDefault));
        CK(cudaMemset(s->d_buf, 0, GUARD));
        s->cap = bytes;
    }
    if (s->task_cap < tasks) {
        if (s->d_tasks) CK(cudaFree(s->d_tasks));
        if (s->h_tasks) CK(cudaFreeHost(s->h_tasks));
        s->d_tasks = NULL;
        s->h_tasks = NULL;
        s->task_cap = 0;
        CK(cudaMalloc((void **)&s->d_tasks, tasks * sizeof(gtask)));
        CK(cudaHostAlloc((void **)&s->h_tasks, tasks * sizeof(gtask), cudaHostAllocDefault));
        s->task_cap = tasks;
    }
    return PATINA_OK;
}

static patina_status ws_counts(ws_t *w, size_t elems)
{
    if (w->counts_cap >= elems) return PATINA_OK;
    for (int k = 0; k < NSLOT; k++) PATINA_TRY(slot_wait(&w->sl[k]));
    if (w->d_counts) CK(cudaFree(w->d_counts));
    w->d_counts = NULL;
    w->counts_cap = 0;
    CK(cudaMalloc((void **)&w->d_counts, (elems ? elems : 1) * sizeof(uint32_t)));
    w->counts_cap = elems;
    return PATINA_OK;
}

static patina_status ws_feat(ws_t *w, size_t nmat)
{
    if (w->feat_cap >= nmat) return PATINA_OK;
    if (w->d_feat) CK(cudaFree(w->d_feat));
    w->d_feat = NULL;
    w->feat_cap = 0;
    CK(cudaMalloc((void **)&w->d_feat, (nmat ? nmat : 1) * (GLCM_NPROPS + GLCM_NHAR) * sizeof(double)));
    w->feat_cap = nmat;
    return PATINA_OK;
}

static int is_pinned(const void *p)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeHost;
}

static size_t pitch_of(int w) { return (((size_t)w + 15) & ~(size_t)15) + 32; }

/* ------------------------------------------------------ counting plan */

struct plan_t {
    int L, R, G, smem, global;   /* copies (k_count4: lanes per offset), offsets per block, bytes, vote into global */
    int S, k2;                   /* offset subsets per launch (blocks specialise), k2 variant */
    int grid, sms;               /* persistent blocks, SMs */
    int pad_up, pad_down;        /* padding rows of a tile */
};

static int pow2_floor(int x)
{
    int p = 1;
    while (p * 2 <= x) p *= 2;
    return p;
}

/* flagged: the images carry a mask in bit 7 (L = 32; a pixel with it set
 * is outside); k_count4 (2..32 offsets) and k_count3 (one offset, 640
 * threads) read it, so the plan fails (PATINA_E_LIMIT) where another kernel
 * would count: the caller then uses a sentinel level. */
static patina_status make_plan(ws_t *w, plan_t *pl, int L, const patina_glcm_offset_t *off,
                               size_t noff, int max_h, size_t launch_px, int flagged)
{
    /* k_count2: one block per SM takes all of the SM's opt-in shared memory
     * for G offsets x R interleaved copies (R a power of two <= 32). */
    const long long LL4 = (long long)L * L * 4, budget = w->smem_optin;
    int per_sm = 0;
    memset(pl, 0, sizeof *pl);
    pl->L = L;
    if ((long long)noff * LL4 <= budget) {
        pl->G = (int)noff;
        pl->R = pow2_floor((int)(budget / ((long long)noff * LL4)));
        if (pl->R > 32) pl->R = 32;
    } else if (LL4 <= budget) {
        pl->G = (int)(budget / LL4);
        pl->R = 1;
    } else {
        pl->global = 1;
        pl->G = (int)noff;
        pl->R = 1;
    }
    pl->S = 1;
    if (!pl->global && pl->G == (int)noff && pl->R < 32) {
        /* Fewer than 32 copies: lanes collide on banks. Split the offsets
         * into S subsets; the S blocks of a band each hold one subset with
         * more copies and read the same rows (L2 hits). */
        int S = g_split > 0 ? g_split : 1;
        while (S > 1 && (S - 1) * (((int)noff + S - 1) / S) >= (int)noff) S--; /* no empty subset */
        if (S > 1) {
            pl->S = S;
            pl->G = ((int)noff + S - 1) / S;
            pl->R = pow2_floor((int)(budget / ((long long)pl->G * LL4)));
            if (pl->R > 32) pl->R = 32;
        }
    }
    pl->k2 = g_k2_var;
    if (pl->k2 == 9) { /* the default: k_count4 where it was measured faster (docs/glcm.md) */
        const size_t per_block = launch_px / (size_t)(w->sms > 0 ? w->sms : 1);
        pl->k2 = per_block >= ((size_t)1 << 20) ? 7 : per_block >= ((size_t)1 << 14) ? 6 : 4;
        /* k_count5 for L <= 8 (else it falls back to k_count4): 11 (8-byte
         * partner loads) from 1 M pixels per SM, 10 from 64 K. H100, 8
         * offsets, L = 8, slow / drastic image (docs/glcm.md): 16384^2 0.43 /
         * 0.43 ms (k_count4 0.57 / 0.59), 8192^2 0.130 / 0.134 (0.173 /
         * 0.172), 4096^2 0.048 / 0.052 (0.055 / 0.054); 2048^2 (32 K per SM)
         * mixed: 0.025 / 0.032 (0.028 / 0.027), kept on k_count4 */
        if (L <= 8 && per_block >= ((size_t)1 << 16)) pl->k2 = per_block >= ((size_t)1 << 20) ? 11 : 10;
    }
    /* first k2_variants entry (L = 2) of the selected k_count5 / k_count4
     * instances; a k_count5 variant where it does not apply runs its
     * k_count4 counterpart */
    const int jent = pl->k2 == 10 ? 23 : pl->k2 == 11 ? 26 : -1;
    int fent = pl->k2 == 6 ? 8 : pl->k2 == 7 ? 13 : pl->k2 == 8 ? 18 : -1;
    const bool pow2 = L >= 2 && (L & (L - 1)) == 0, multi = noff >= 2 && noff <= 32;
    if (jent >= 0 && pow2 && L <= 8 && multi) {
        /* k_count5: pairs of offsets per lane, one joint table column per
         * lane (R: lanes per pair, 32 / ceil(noff / 2) rounded up to a power
         * of two) */
        int P = 1;
        while (P < ((int)noff + 1) / 2) P *= 2;
        pl->G = (int)noff;
        pl->S = 1;
        pl->R = 32 / P;
        pl->k2 = jent + __builtin_ctz((unsigned)L) - 1;
        pl->smem = (int)(((long long)L * L * L + 2LL * L * L) * 32 * 4);
    } else if ((fent >= 0 || jent >= 0) && pow2 && L <= 32 && multi) {
        if (jent >= 0) fent = pl->k2 == 10 ? 8 : 13; /* 6, 7 */
        /* k_count4: all offsets in one pass, one table column per lane (R: lanes
         * per offset, 32 / noff rounded up to a power of two) */
        int P = 1;
        while (P < (int)noff) P *= 2;
        pl->G = (int)noff;
        pl->S = 1;
        pl->R = 32 / P;
        pl->k2 = fent + __builtin_ctz((unsigned)L) - 1;
        if (flagged) pl->k2 = fent == 13 ? 30 : 29;
        pl->smem = (int)((long long)L * L * (L == 32 ? 32 : 64) * 4);
    } else {
        if (pl->k2 >= 4) /* k_count3 (640 or 768 threads): one offset per block, L = 2^s <= 32 */
            pl->k2 = (L & (L - 1)) == 0 && L <= 32 && pl->G == 1 ? 4 + 2 * (pl->k2 == 5) + (L == 32) : 3;
        if (flagged && pl->k2 == 5) pl->k2 = 31;
        pl->smem = pl->global ? 0 : (int)(pl->G * pl->R * LL4);
    }
    if (flagged && (pl->k2 < 29 || L != 32)) return PATINA_E_LIMIT; /* no message: the caller falls back */
    if (!w->attr_set) {
        for (int v = 0; v < K2FNS; v++)
            CK(cudaFuncSetAttribute(k2_variants[v].fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    w->smem_optin));
        w->attr_set = 1;
    }
    if (pl->global)
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_count<false>, KTHREADS, 0));
    else
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k2_variants[pl->k2].fn,
                                                         k2_variants[pl->k2].threads, pl->smem));
    if (per_sm < 1) per_sm = 1;
    pl->grid = per_sm * w->sms;
    pl->sms = w->sms;
    for (size_t o = 0; o < noff; o++) {
        int dy = off[o].dy;
        if (dy >= max_h || dy <= -max_h) continue; /* no pair at all */
        if (-dy > pl->pad_up) pl->pad_up = -dy;
        if (dy > pl->pad_down) pl->pad_down = dy;
    }
    return PATINA_OK;
}

/* Rows of a task for images of width w in a launch of about launch_px
 * first pixels: one task per block and offset subset (the blocks take equal
 * bands: no tail), at least g_task_min pixels (a flush per block costs);
 * g_task_pixels (tests) fixes the size instead. */
static size_t rows_per_task(const plan_t *pl, size_t launch_px, int w)
{
    size_t px = g_task_pixels, rows;
    if (!px && pl->global) { /* k_count: many small blocks; ~64 K-pixel tasks unless few */
        px = (launch_px + (size_t)pl->sms - 1) / (size_t)pl->sms;
        if (px > ((size_t)1 << 16)) px = (size_t)1 << 16;
        if (px < g_task_min) px = g_task_min;
    } else if (!px) {
        const size_t blocks = (size_t)pl->grid / (size_t)pl->S > 0 ? (size_t)pl->grid / (size_t)pl->S : 1;
        px = (launch_px + blocks - 1) / blocks;
        if (px < g_task_min) px = g_task_min;
    }
    rows = (px + (size_t)w - 1) / (size_t)w;
    return rows < 1 ? 1 : rows;
}

static patina_status launch_count(ws_t *w, slot_t *s, const plan_t *pl, int ntasks,
                                  const patina_glcm_offset_t *off, size_t noff, uint32_t *d_out)
{
    const int cs = pl->L * pl->L + 1;
    const size_t per_launch = (size_t)pl->G * (size_t)pl->S;
    for (size_t o0 = 0; o0 < noff; o0 += per_launch) {
        koffs ko;
        int grid = ntasks < pl->grid ? ntasks : pl->grid;
        memset(&ko, 0, sizeof ko);
        ko.n = (int)(noff - o0 < per_launch ? noff - o0 : per_launch);
        ko.o0 = (int)o0;
        ko.noff_total = (int)noff;
        for (int o = 0; o < ko.n; o++) {
            ko.dy[o] = off[o0 + (size_t)o].dy;
            ko.dx[o] = off[o0 + (size_t)o].dx;
        }
        if (grid < 1) grid = 1;
        if (pl->global)
            k_count<false><<<grid, KTHREADS, 0, s->s>>>(s->d_tasks, ntasks, ko, pl->L, 1, cs, d_out);
        else
            k2_variants[pl->k2].fn<<<grid, k2_variants[pl->k2].threads, pl->smem, s->s>>>(
                s->d_tasks, ntasks, ko, pl->G, pl->L,
                pl->k2 >= 8 && pl->k2 <= 30 ? __builtin_ctz((unsigned)pl->R) : pl->R, /* k_count4/5: log2 */
                d_out);
        CKL("k_count");
    }
    (void)w;
    return PATINA_OK;
}

/* Counts of n images into d_out (n, noff, L, L), zeroed here; symmetrised
 * when asked. Returns with all work queued on slot 0's stream completed up
 * to the symmetrisation (the caller synchronises slot 0). */
/* The tallest image and the pixels of a batch: what make_plan is given. */
static void batch_extent(const patina_gpu_grey_t *imgs, size_t n, int *max_h, size_t *total_px)
{
    *max_h = 0;
    *total_px = 0;
    for (size_t i = 0; i < n; i++) {
        if (imgs[i].h > *max_h) *max_h = imgs[i].h;
        if (imgs[i].w > 0 && imgs[i].h > 0) *total_px += (size_t)imgs[i].w * (size_t)imgs[i].h;
    }
}

static patina_status run_counts(ws_t *w, uint32_t *d_out, const patina_gpu_grey_t *imgs, size_t n,
                                int L, const patina_glcm_offset_t *off, size_t noff, int symmetric,
                                int flagged)
{
    const size_t LL = (size_t)L * L;
    plan_t pl;
    int max_h = 0, k = 0;
    size_t cap = g_slot_bytes, total_px = 0, launch_px;
    size_t used = 0, ntasks = 0, i;
    slot_t *s;
    batch_extent(imgs, n, &max_h, &total_px);
    PATINA_TRY(make_plan(w, &pl, L, off, noff, max_h, total_px < cap ? total_px : cap, flagged));
    /* a slot must hold at least one row of the widest image with its padding */
    for (i = 0; i < n; i++) {
        size_t need = pitch_of(imgs[i].w) * (size_t)(pl.pad_up + pl.pad_down + 1);
        if (imgs[i].w > 0 && imgs[i].h > 0 && need > cap) cap = need;
    }
    launch_px = total_px < cap ? total_px : cap; /* a launch holds at most a slot */
    for (int j = 0; j < NSLOT; j++) PATINA_TRY(slot_reserve(&w->sl[j], cap, 1024));
    s = &w->sl[0];
    CK(cudaMemsetAsync(d_out, 0, n * noff * LL * sizeof(uint32_t), s->s));
    CK(cudaStreamSynchronize(s->s));

    for (i = 0; i <= n; i++) {
        const patina_gpu_grey_t *im = i < n ? &imgs[i] : NULL;
        int pinned = im && im->h > 0 && im->w > 0 ? is_pinned(im->q) : 0;
        size_t pitch = im ? pitch_of(im->w) : 0;
        int rows_cap = im ? (int)(cap / pitch) : 0;
        int tile = rows_cap - pl.pad_up - pl.pad_down;
        int t0 = 0;
        if (im && (im->w <= 0 || im->h <= 0 || noff == 0)) continue;
        if (im && im->h <= rows_cap) tile = im->h;
        for (;;) {
            int t1 = 0, lo = 0, hi = 0;
            size_t bytes = 0, rows_task, need_tasks = 0;
            if (im) {
                t1 = t0 + tile < im->h ? t0 + tile : im->h;
                lo = t0 - pl.pad_up > 0 ? t0 - pl.pad_up : 0;
                hi = t1 + pl.pad_down < im->h ? t1 + pl.pad_down : im->h;
                bytes = pitch * (size_t)(hi - lo);
                rows_task = rows_per_task(&pl, launch_px, im->w);
                need_tasks = ((size_t)(t1 - t0) + rows_task - 1) / rows_task * (size_t)pl.S;
            } else {
                rows_task = 1;
            }
            /* flush the batch when this chunk does not fit, or at the end */
            if (!im || used + bytes > cap || ntasks + need_tasks > s->task_cap) {
                if (ntasks) {
                    CK(cudaMemcpyAsync(s->d_tasks, s->h_tasks, ntasks * sizeof(gtask),
                                       cudaMemcpyHostToDevice, s->s));
                    PATINA_TRY(launch_count(w, s, &pl, (int)ntasks, off, noff, d_out));
                    CK(cudaEventRecord(s->done, s->s));
                    s->used = 1;
                    k = (k + 1) % NSLOT;
                    s = &w->sl[k];
                    PATINA_TRY(slot_wait(s));
                }
                used = 0;
                ntasks = 0;
                if (!im) break;
                if (need_tasks > s->task_cap)
                    PATINA_TRY(slot_reserve(s, cap, need_tasks + 1024));
            }
            {
                uint8_t *dst = s->d_buf + GUARD + used;
                const uint8_t *src = im->q + (size_t)lo * im->stride;
                if (pinned) {
                    CK(cudaMemcpy2DAsync(dst, pitch, src, im->stride, (size_t)im->w,
                                         (size_t)(hi - lo), cudaMemcpyHostToDevice, s->s));
                } else {
                    uint8_t *stg = s->h_stage + GUARD + used;
                    for (int r = 0; r < hi - lo; r++)
                        memcpy(stg + (size_t)r * pitch, src + (size_t)r * im->stride, (size_t)im->w);
                    CK(cudaMemcpyAsync(dst, stg, bytes, cudaMemcpyHostToDevice, s->s));
                }
                for (int r = t0; r < t1; r += (int)rows_task)
                    for (int sub = 0; sub < pl.S; sub++) { /* a band's subsets run side by side */
                        gtask *tk = &s->h_tasks[ntasks++];
                        tk->base = dst;
                        tk->row0 = lo;
                        tk->pitch = (int)pitch;
                        tk->w = im->w;
                        tk->h = im->h;
                        tk->r0 = r;
                        tk->r1 = r + (int)rows_task < t1 ? r + (int)rows_task : t1;
                        tk->out = (int)i;
                        tk->sub = sub;
                    }
                used += bytes;
            }
            t0 = t1;
            if (t0 >= im->h) break;
        }
    }
    /* every slot's kernels finish before the symmetrisation on slot 0 */
    for (int j = 0; j < NSLOT; j++)
        if (w->sl[j].used) CK(cudaStreamWaitEvent(w->sl[0].s, w->sl[j].done, 0));
    if (symmetric && n && noff) {
        long long nm = (long long)(n * noff);
        int blocks = (int)((nm * (long long)LL + 255) / 256);
        if (blocks > 8 * w->sms) blocks = 8 * w->sms;
        k_symmetrise<<<blocks, 256, 0, w->sl[0].s>>>(d_out, nm, L);
        CKL("k_symmetrise");
    }
    return PATINA_OK;
}

static patina_status sync_all(ws_t *w)
{
    for (int j = 0; j < NSLOT; j++) {
        CK(cudaStreamSynchronize(w->sl[j].s));
        w->sl[j].used = 0;
    }
    return PATINA_OK;
}

static patina_status check_levels(int levels, size_t noff)
{
    if (levels < 2 || levels > PATINA_GLCM_MAX_LEVELS)
        return patina__fail(PATINA_E_INVALID, "gpu: glcm: levels=%d is out of range [2, 256]", levels);
    if (noff > PATINA_GLCM_MAX_OFFSETS)
        return patina__fail(PATINA_E_LIMIT, "gpu: glcm: %zu offsets (at most %d)", noff,
                            PATINA_GLCM_MAX_OFFSETS);
    return PATINA_OK;
}

/* ------------------------------------------------------ entry points */

extern "C" patina_status patina_gpu_glcm_counts(patina_gpu_t *g, uint32_t *counts,
                                                const patina_gpu_grey_t *imgs, size_t n,
                                                int levels, const patina_glcm_offset_t *off,
                                                size_t noff, int symmetric)
{
    ws_t *w;
    patina_status s;
    const size_t per = noff * (size_t)levels * (size_t)levels;
    (void)g;
    PATINA_TRY(check_levels(levels, noff));
    if (n == 0 || noff == 0) return PATINA_OK;
    if (!counts || !imgs || !off) return patina__fail(PATINA_E_INVALID, "gpu: glcm: null argument");
    for (size_t i = 0; i < n; i++) {
        if (imgs[i].w < 0 || imgs[i].h < 0 ||
            (imgs[i].w > 0 && imgs[i].h > 0 && (!imgs[i].q || imgs[i].stride < (size_t)imgs[i].w)))
            return patina__fail(PATINA_E_INVALID, "gpu: glcm: image %zu: bad shape", i);
        PATINA_TRY(glcm_check_size(imgs[i].w, imgs[i].h, symmetric, "gpu: glcm"));
    }
    pthread_mutex_lock(&g_mu);
    k2_from_env();
    s = ws_get(&w);
    if (s == PATINA_OK) s = ws_counts(w, n * per);
    if (s == PATINA_OK) s = run_counts(w, w->d_counts, imgs, n, levels, off, noff, symmetric, 0);
    if (s == PATINA_OK) {
        cudaError_t e = cudaMemcpyAsync(counts, w->d_counts, n * per * sizeof(uint32_t),
                                        cudaMemcpyDeviceToHost, w->sl[0].s);
        if (e != cudaSuccess) s = pgpu_fail((int)e, "copy counts back", __FILE__, __LINE__);
    }
    if (s == PATINA_OK)
        s = sync_all(w);
    else
        (void)cudaDeviceSynchronize();
    pthread_mutex_unlock(&g_mu);
    return s;
}

/* Features of nmat device matrices into host props (nmat, 10) / har
 * (nmat, 14); har's mcc column is left 0. */
/* Haralick's 14th feature on the GPU up to this many levels (one thread per
 * matrix runs the C reference's solver from glcm_core.h, O(L^3) serial work
 * and 2 L^2 + 3 L doubles of scratch); above it the host computes it. */
#define MCC_GPU_MAX_LEVELS 64

/* har[m][13] = MCC of matrices m0 .. m0 + n - 1 (one thread each); work:
 * wstride doubles per thread. The same operations in the same order as the
 * C reference (no contraction, IEEE division and sqrt, glcm_hyp for
 * hypot), so the values are the host's bit for bit. */
__global__ void k_mcc(const uint32_t *__restrict__ counts, int L, long long n, double *har, double *work,
                      size_t wstride)
{
    const long long m = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (m >= n) return;
    const uint32_t *P = counts + m * (long long)L * L;
    uint64_t rows[MCC_GPU_MAX_LEVELS], cols[MCC_GPU_MAX_LEVELS], T = 0;
    for (int i = 0; i < L; i++) rows[i] = cols[i] = 0;
    for (int i = 0; i < L; i++)
        for (int j = 0; j < L; j++) {
            rows[i] += P[i * L + j];
            cols[j] += P[i * L + j];
        }
    for (int i = 0; i < L; i++) T += rows[i];
    har[m * GLCM_NHAR + 13] = glcm_mcc_core(P, L, rows, cols, T, work + (size_t)m * wstride);
}

static patina_status features_dev(ws_t *w, double *props, double *har, const uint32_t *d_counts,
                                  size_t nmat, int levels)
{
    double *dp, *dh;
    if (nmat == 0) return PATINA_OK;
    PATINA_TRY(ws_feat(w, nmat));
    dp = w->d_feat;
    dh = w->d_feat + nmat * GLCM_NPROPS;
    for (size_t m0 = 0; m0 < nmat; m0 += 65535) { /* grid.x limit for old devices is moot; keep chunks */
        size_t cnt = nmat - m0 < 65535 ? nmat - m0 : 65535;
        k_features<<<(unsigned)cnt, FTHREADS, 0, w->sl[0].s>>>(
            d_counts + m0 * (size_t)levels * levels, levels, dp + m0 * GLCM_NPROPS,
            dh + m0 * GLCM_NHAR);
        CKL("k_features");
    }
    if (har && levels <= MCC_GPU_MAX_LEVELS) { /* in chunks of <= 64 MiB of scratch */
        const size_t wstride = 2 * (size_t)levels * levels + 3 * (size_t)levels;
        size_t chunk = ((size_t)64 << 20) / (wstride * sizeof(double));
        double *work;
        if (chunk > nmat) chunk = nmat;
        CK(cudaMalloc((void **)&work, chunk * wstride * sizeof(double)));
        for (size_t m0 = 0; m0 < nmat; m0 += chunk) {
            const size_t cnt = nmat - m0 < chunk ? nmat - m0 : chunk;
            k_mcc<<<(unsigned)((cnt + 63) / 64), 64, 0, w->sl[0].s>>>(
                d_counts + m0 * (size_t)levels * levels, levels, (long long)cnt, dh + m0 * GLCM_NHAR, work, wstride);
        }
        const cudaError_t e = cudaGetLastError();
        (void)cudaStreamSynchronize(w->sl[0].s);
        (void)cudaFree(work);
        if (e != cudaSuccess) return pgpu_fail((int)e, "k_mcc", __FILE__, __LINE__);
    }
    if (props)
        CK(cudaMemcpyAsync(props, dp, nmat * GLCM_NPROPS * sizeof(double), cudaMemcpyDeviceToHost,
                           w->sl[0].s));
    if (har)
        CK(cudaMemcpyAsync(har, dh, nmat * GLCM_NHAR * sizeof(double), cudaMemcpyDeviceToHost,
                           w->sl[0].s));
    CK(cudaStreamSynchronize(w->sl[0].s));
    return PATINA_OK;
}

/* Haralick's 14th feature of one host matrix (the C reference's solver). */
static double host_mcc(const uint32_t *P, int L)
{
    uint64_t rows[PATINA_GLCM_MAX_LEVELS] = {0}, cols[PATINA_GLCM_MAX_LEVELS] = {0}, T = 0;
    for (int i = 0; i < L; i++)
        for (int j = 0; j < L; j++) {
            rows[i] += P[(size_t)i * L + j];
            cols[j] += P[(size_t)i * L + j];
        }
    for (int i = 0; i < L; i++) T += rows[i];
    return glcm_mcc(P, L, rows, cols, T);
}

extern "C" patina_status patina_gpu_glcm_features_of(patina_gpu_t *g, double *props, double *har,
                                                     const uint32_t *counts, size_t nmat,
                                                     int levels)
{
    ws_t *w;
    patina_status s;
    const size_t LL = (size_t)levels * (size_t)levels;
    (void)g;
    PATINA_TRY(check_levels(levels, 0));
    if (nmat == 0) return PATINA_OK;
    if (!counts) return patina__fail(PATINA_E_INVALID, "gpu: glcm: null counts");
    pthread_mutex_lock(&g_mu);
    s = ws_get(&w);
    if (s == PATINA_OK) s = ws_counts(w, nmat * LL);
    if (s == PATINA_OK) {
        /* on the features' stream: a cudaMemcpy from pageable memory on the
         * legacy stream may still be in flight when a kernel on a
         * non-blocking stream starts */
        cudaError_t e = cudaMemcpyAsync(w->d_counts, counts, nmat * LL * sizeof(uint32_t),
                                        cudaMemcpyHostToDevice, w->sl[0].s);
        if (e != cudaSuccess) s = pgpu_fail((int)e, "upload counts", __FILE__, __LINE__);
    }
    if (s == PATINA_OK) s = features_dev(w, props, har, w->d_counts, nmat, levels);
    pthread_mutex_unlock(&g_mu);
    if (s == PATINA_OK && har)
        if (levels > MCC_GPU_MAX_LEVELS)
            for (size_t m = 0; m < nmat; m++) har[m * GLCM_NHAR + 13] = host_mcc(counts + m * LL, levels);
    return s;
}

/* The L x L blocks of nmat L1 x L1 matrices (L1 > L): a mask's sentinel
 * level L (and the unused levels above it) dropped. */
__global__ void k_drop_level(const uint32_t *__restrict__ src, uint32_t *__restrict__ dst, long long nmat, int L,
                             int L1i)
{
    const long long LL = (long long)L * L, n = nmat * LL, L1 = L1i;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
         e += (long long)gridDim.x * blockDim.x) {
        const long long m = e / LL;
        const int c = (int)(e - m * LL), i = c / L, j = c - i * L;
        dst[e] = src[m * L1 * L1 + i * L1 + j];
    }
}

/* Whether run_counts on these images would count 32 levels with k_count4
 * or k_count3 (which read a mask from bit 7 of the pixels): the same plan. */
static int flags_plan_ok(ws_t *w, const patina_gpu_grey_t *imgs, size_t n, const patina_glcm_offset_t *off,
                         size_t noff)
{
    plan_t pl;
    int max_h;
    size_t total;
    batch_extent(imgs, n, &max_h, &total);
    return make_plan(w, &pl, 32, off, noff, max_h, total < g_slot_bytes ? total : g_slot_bytes, 1) == PATINA_OK;
}

/* A mask (levels <= 255): pixels outside it get the extra level L and the
 * counts are made with Lc > L levels (L + 1 rounded up to a power of two
 * when that is <= 32, so that the power-of-two kernels k_count3/4/5 take it;
 * else L + 1), so a pair with a pixel outside lands in row or column L, and
 * the L x L block holds exactly the pairs whose two pixels are inside -- the
 * C reference's rule, with the unmasked kernels. L = 32 would need 33 levels
 * (k_count2, about twice as slow): where the plan is k_count4 (2..32
 * offsets) or k_count3 (one offset) the pixels outside get bit 7 instead
 * and the flagged instance skips their pairs (counts at 32 levels, no extra
 * level to drop). */
extern "C" patina_status patina_gpu_glcm_family(patina_gpu_t *g, double *out,
                                                const struct glcm_req *r, int haralick, int form,
                                                const char *mask, const patina_image_t *imgs,
                                                size_t n, patina_status *st)
{
    const int masked = mask && strcmp(mask, "none") != 0;
    const size_t noff = glcm_noff(r), L = (size_t)r->levels, LL = L * L;
    int flagged = masked && L == 32; /* bit 7 marks the outside (until the plan says otherwise) */
    size_t Lc = L + (masked ? 1 : 0), LLc;
    uint8_t *mk = NULL;
    int mkw = -1, mkh = -1;
    uint32_t *d_sub = NULL;
    const size_t dim = haralick ? (form == 0 ? (size_t)r->nd * 2 * GLCM_NHAR
                                   : form == 1 ? noff * GLCM_NHAR
                                               : noff * GLCM_NHAR + (size_t)r->nd * 2 * GLCM_NHAR)
                                : GLCM_NPROPS * noff;
    patina_gpu_grey_t *gi = NULL;
    uint8_t **qs = NULL;
    uint32_t *counts = NULL;
    double *props = NULL, *har = NULL;
    patina_status s = PATINA_OK, *stat = st;
    ws_t *w;
    (void)g;
    if (n == 0) return PATINA_OK;
    if (masked && L > 255)
        return patina__fail(PATINA_E_INVALID, "gpu: glcm: a mask needs levels <= 255 on the GPU");
    gi = (patina_gpu_grey_t *)calloc(n, sizeof *gi);
    qs = (uint8_t **)calloc(n, sizeof *qs);
    counts = (uint32_t *)malloc(n * noff * LL * sizeof *counts + 1);
    props = (double *)malloc(n * noff * GLCM_NPROPS * sizeof *props + 1);
    har = (double *)malloc(n * noff * GLCM_NHAR * sizeof *har + 1);
    if (!stat) stat = (patina_status *)calloc(n, sizeof *stat);
    if (!gi || !qs || !counts || !props || !har || !stat) {
        s = patina__fail(PATINA_E_NOMEM, "gpu: glcm: out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) { /* grey and levels by the C reference's rules */
        const patina_image_t *im = &imgs[i];
        stat[i] = PATINA_OK;
        if (!im || im->width < 0 || im->height < 0 ||
            (im->width > 0 && im->height > 0 && (!im->data || im->stride < 3 * (size_t)im->width)))
            stat[i] = patina__fail(PATINA_E_INVALID, "glcm: bad image");
        else
            stat[i] = glcm_check_size(im->width, im->height, r->symmetric, "glcm");
        if (stat[i] == PATINA_OK) stat[i] = glcm_grey_levels(&qs[i], im, r->levels, r->quant);
        if (stat[i] == PATINA_OK && masked) { /* loaded again only for another size */
            if (im->width != mkw || im->height != mkh) {
                free(mk);
                mkw = mkh = -1;
                stat[i] = glcm_load_mask(&mk, mask, im->width, im->height);
                if (stat[i] == PATINA_OK) {
                    mkw = im->width;
                    mkh = im->height;
                }
            }
            if (stat[i] == PATINA_OK)
                for (size_t p = 0; p < (size_t)im->width * (size_t)im->height; p++)
                    if (!mk[p]) qs[i][p] = flagged ? (uint8_t)(qs[i][p] | 0x80u) : (uint8_t)L;
        }
        if (stat[i] != PATINA_OK) {
            free(qs[i]);
            qs[i] = NULL;
        }
        if (stat[i] == PATINA_OK) {
            gi[i].q = qs[i];
            gi[i].w = im->width;
            gi[i].h = im->height;
            gi[i].stride = (size_t)im->width;
        }
    }
    pthread_mutex_lock(&g_mu);
    k2_from_env();
    s = ws_get(&w);
    if (s == PATINA_OK && flagged && !flags_plan_ok(w, gi, n, r->off, noff)) {
        flagged = 0; /* another kernel counts: the sentinel level after all */
        for (size_t i = 0; i < n; i++)
            if (gi[i].q)
                for (size_t p = 0; p < (size_t)gi[i].w * (size_t)gi[i].h; p++)
                    if (qs[i][p] & 0x80u) qs[i][p] = (uint8_t)L;
    }
    if (flagged)
        Lc = L;
    else if (masked && Lc <= 32)
        while (Lc & (Lc - 1)) Lc++; /* the next power of two */
    LLc = Lc * Lc;
    if (s == PATINA_OK) s = ws_counts(w, n * noff * LLc);
    if (s == PATINA_OK) s = run_counts(w, w->d_counts, gi, n, (int)Lc, r->off, noff, r->symmetric, flagged);
    if (s == PATINA_OK && Lc != L) {
        cudaError_t e = cudaMalloc((void **)&d_sub, n * noff * LL * sizeof(uint32_t) + 4);
        if (e == cudaSuccess) {
            k_drop_level<<<256, 256, 0, w->sl[0].s>>>(w->d_counts, d_sub, (long long)(n * noff), (int)L, (int)Lc);
            e = cudaGetLastError();
        }
        if (e != cudaSuccess) s = pgpu_fail((int)e, "glcm: mask level", __FILE__, __LINE__);
    }
    if (s == PATINA_OK) s = features_dev(w, props, har, d_sub ? d_sub : w->d_counts, n * noff, r->levels);
    if (s == PATINA_OK && haralick && r->levels > MCC_GPU_MAX_LEVELS) { /* the host's MCC */
        cudaError_t e = cudaMemcpy(counts, d_sub ? d_sub : w->d_counts, n * noff * LL * sizeof(uint32_t),
                                   cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) s = pgpu_fail((int)e, "copy counts back", __FILE__, __LINE__);
    }
    if (s == PATINA_OK)
        s = sync_all(w);
    else
        (void)cudaDeviceSynchronize();
    if (d_sub) (void)cudaFree(d_sub);
    pthread_mutex_unlock(&g_mu);
    if (s != PATINA_OK) goto done;
    for (size_t i = 0; i < n; i++) {
        double *o = out + i * dim;
        if (stat[i] != PATINA_OK) {
            memset(o, 0, dim * sizeof *o);
            continue;
        }
        if (!haralick) {
            for (size_t k = 0; k < GLCM_NPROPS; k++)
                for (size_t j = 0; j < noff; j++) o[k * noff + j] = props[(i * noff + j) * GLCM_NPROPS + k];
            continue;
        }
        if (r->levels > MCC_GPU_MAX_LEVELS)
            for (size_t j = 0; j < noff; j++)
                har[(i * noff + j) * GLCM_NHAR + 13] = host_mcc(counts + (i * noff + j) * LL, r->levels);
        if (form == 1 || form == 2)
            memcpy(o, har + i * noff * GLCM_NHAR, noff * GLCM_NHAR * sizeof *o);
        if (form == 0 || form == 2)
            patina_haralick_aggregate(o + (form == 2 ? noff * GLCM_NHAR : 0),
                                      har + i * noff * GLCM_NHAR, noff, (size_t)r->na);
    }
done:
    if (qs)
        for (size_t i = 0; i < n; i++) free(qs[i]);
    free(qs);
    free(mk);
    free(gi);
    free(counts);
    free(props);
    free(har);
    if (stat != st) free(stat);
    return s;
}

extern "C" void patina_gpu__glcm_set_caps(size_t slot_bytes, size_t task_pixels)
{
    pthread_mutex_lock(&g_mu);
    g_slot_bytes = slot_bytes ? slot_bytes : DEF_SLOT_BYTES;
    g_task_pixels = task_pixels ? task_pixels : DEF_TASK_PIXELS;
    pthread_mutex_unlock(&g_mu);
}

/* --------------------------------------------------------------- lab */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n ? v[n / 2] : 0.0;
}

extern "C" patina_status patina_gpu__glcm_bandwidth(double *d2d_gbps, double *h2d_gbps,
                                                    size_t bytes)
{
    void *a = NULL, *b = NULL, *h = NULL;
    cudaEvent_t e0, e1;
    double t[5];
    float ms;
    patina_status s = PATINA_OK;
    *d2d_gbps = *h2d_gbps = 0;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess ||
        cudaHostAlloc(&h, bytes, cudaHostAllocDefault) != cudaSuccess) {
        s = pgpu_fail((int)cudaGetLastError(), "bandwidth buffers", __FILE__, __LINE__);
        goto out;
    }
    memset(h, 1, bytes);
    for (int kind = 0; kind < 2; kind++) {
        for (int rep = -1; rep < 5; rep++) {
            cudaEventRecord(e0);
            if (kind == 0)
                cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
            else
                cudaMemcpy(a, h, bytes, cudaMemcpyHostToDevice);
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&ms, e0, e1);
            if (rep >= 0) t[rep] = ms;
        }
        if (kind == 0)
            *d2d_gbps = 2.0 * (double)bytes / (median(t, 5) * 1e-3) / 1e9; /* read + write */
        else
            *h2d_gbps = (double)bytes / (median(t, 5) * 1e-3) / 1e9;
    }
    if (cudaGetLastError() != cudaSuccess) s = patina__fail(PATINA_E_GPU, "gpu: glcm: bandwidth probe failed");
out:
    cudaFree(a);
    cudaFree(b);
    cudaFreeHost(h);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return s;
}

/* Scheme 3: the image as one linear array of w*h pixels cut into K tiles of
 * first pixels [s_i, e_i); tile i is copied with Pad = dy*w + dx extra
 * pixels after it (before it for a negative offset), two streams alternate
 * copy -> kernel. mode 0: overlapped run; 1: copies only; 2: kernels only
 * (tiles already resident). Returns elapsed ms. */
static patina_status scheme3(const uint8_t *hq, int w, int h, int L, patina_glcm_offset_t o, int K,
                             int R, int block, int maxgrid, uint8_t *dbuf[2], size_t tile_cap,
                             uint32_t *d_P, cudaStream_t st[2], int mode, double *ms)
{
    const long long N = (long long)w * h, lin = (long long)o.dy * w + o.dx;
    const long long pad_hi = lin > 0 ? lin : 0, pad_lo = lin < 0 ? -lin : 0;
    cudaEvent_t e0, e1, ed[2];
    float f;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventCreate(&ed[0]));
    CK(cudaEventCreate(&ed[1]));
    CK(cudaEventRecord(e0, st[0]));
    CK(cudaStreamWaitEvent(st[1], e0, 0));
    for (int i = 0; i < K; i++) {
        const long long s0 = N * i / K, s1 = N * (i + 1) / K;
        long long lo = s0 - pad_lo, hi = s1 + pad_hi;
        if (lo < 0) lo = 0;
        if (hi > N) hi = N;
        cudaStream_t ss = st[i & 1];
        if ((size_t)(hi - lo) > tile_cap) return patina__fail(PATINA_E_INTERNAL, "gpu: glcm: scheme 3 tile");
        if (mode != 2)
            CK(cudaMemcpyAsync(dbuf[i & 1], hq + lo, (size_t)(hi - lo), cudaMemcpyHostToDevice, ss));
        if (mode != 1) {
            int grid = (int)((s1 - s0 + block - 1) / block);
            if (grid > maxgrid) grid = maxgrid; /* blocks loop over their part of the tile */
            if (grid < 1) grid = 1;
            k_s2<<<grid, block, (size_t)R * L * L * 4, ss>>>(dbuf[i & 1], lo, s0, s1, w, h, L, o.dy,
                                                             o.dx, R, d_P);
            CKL("k_s2 (scheme 3)");
        }
    }
    CK(cudaEventRecord(ed[1], st[1]));
    CK(cudaStreamWaitEvent(st[0], ed[1], 0));
    CK(cudaEventRecord(e1, st[0]));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&f, e0, e1));
    *ms = f;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaEventDestroy(ed[0]);
    cudaEventDestroy(ed[1]);
    return PATINA_OK;
}

extern "C" patina_status patina_gpu__glcm_lab(patina_glcm_lab_t *lab, uint32_t *counts,
                                              const uint8_t *q, int w, int h, size_t stride,
                                              int levels, const patina_glcm_offset_t *off,
                                              size_t noff, int symmetric)
{
    const size_t LL = (size_t)levels * (size_t)levels;
    const int reps = lab->reps > 0 ? lab->reps : 1;
    const int scheme = lab->scheme;
    double *t = NULL;
    uint8_t *hq = NULL, *dq = NULL, *dbuf[2] = {NULL, NULL};
    uint32_t *dP = NULL;
    cudaStream_t st[2] = {NULL, NULL};
    cudaEvent_t e0 = NULL, e1 = NULL;
    patina_status s = PATINA_OK;
    ws_t *ws = NULL;
    size_t knobs[4];
    float f;
    lab->ms = lab->h2d_ms = lab->kernel_ms = 0;
    PATINA_TRY(check_levels(levels, noff));
    PATINA_TRY(glcm_check_size(w, h, symmetric, "gpu: glcm lab"));
    if (w <= 0 || h <= 0 || noff == 0) return patina__fail(PATINA_E_INVALID, "gpu: glcm lab: empty request");
    t = (double *)malloc(sizeof(double) * (size_t)reps);
    if (!t) return patina__fail(PATINA_E_NOMEM, "gpu: glcm lab: out of memory");
    pthread_mutex_lock(&g_mu);
#define LAB_CK(call)                                                                           \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            s = pgpu_fail((int)e_, #call, __FILE__, __LINE__);                                 \
            goto out;                                                                          \
        }                                                                                      \
    } while (0)
#define LAB_TRY(expr)                                                                          \
    do {                                                                                       \
        s = (expr);                                                                            \
        if (s != PATINA_OK) goto out;                                                          \
    } while (0)
    /* bench_glcm's variants: PATINA_GLCM_K2 (k_count2 variant), PATINA_GLCM_SPLIT (offset
     * subsets, 0 = policy), PATINA_GLCM_TASKPX (fixed task pixels, 0 = from
     * the launch), PATINA_GLCM_TASKMIN; restored on return */
    knobs[0] = (size_t)g_k2_var;
    knobs[1] = g_split;
    knobs[2] = g_task_pixels;
    knobs[3] = g_task_min;
    if (getenv("PATINA_GLCM_K2")) {
        g_k2_var = atoi(getenv("PATINA_GLCM_K2"));
        if (g_k2_var < 0 || g_k2_var >= K2VARIANTS) g_k2_var = 0;
    }
    if (getenv("PATINA_GLCM_SPLIT")) g_split = atoi(getenv("PATINA_GLCM_SPLIT"));
    if (getenv("PATINA_GLCM_TASKPX")) g_task_pixels = (size_t)atol(getenv("PATINA_GLCM_TASKPX"));
    if (getenv("PATINA_GLCM_TASKMIN")) g_task_min = (size_t)atol(getenv("PATINA_GLCM_TASKMIN"));
    LAB_TRY(ws_get(&ws));
    LAB_CK(cudaEventCreate(&e0));
    LAB_CK(cudaEventCreate(&e1));
    LAB_CK(cudaMalloc((void **)&dP, noff * LL * sizeof(uint32_t)));
    /* a pinned, contiguous (pitch w) copy of the image, untimed */
    if (stride == (size_t)w && is_pinned(q)) {
        hq = (uint8_t *)q;
    } else {
        LAB_CK(cudaHostAlloc((void **)&hq, (size_t)w * h, cudaHostAllocDefault));
        for (int r = 0; r < h; r++) memcpy(hq + (size_t)r * w, q + (size_t)r * stride, (size_t)w);
    }
    if (scheme == 1 || scheme == 2) {
        const int block = lab->block > 0 ? lab->block : scheme == 1 ? 256 : (levels <= 8 ? 1024 : 512);
        int R = lab->copies > 0 ? lab->copies : (int)(49152 / (LL * 4) / 2);
        if (R < 1) R = 1;
        if (R > block) R = block;
        if ((size_t)R * LL * 4 > (size_t)ws->smem_optin) R = (int)(ws->smem_optin / (LL * 4));
        if (scheme == 2 && R < 1) {
            s = patina__fail(PATINA_E_LIMIT, "gpu: glcm lab: scheme 2 needs L*L*4 bytes of shared memory");
            goto out;
        }
        lab->copies = R;
        lab->block = block;
        LAB_CK(cudaMalloc((void **)&dq, (size_t)w * h));
        LAB_CK(cudaMemcpy(dq, hq, (size_t)w * h, cudaMemcpyHostToDevice));
        if (scheme == 2)
            LAB_CK(cudaFuncSetAttribute(k_s2, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        ws->smem_optin));
        for (int rep = -1; rep < reps; rep++) {
            LAB_CK(cudaMemset(dP, 0, noff * LL * sizeof(uint32_t)));
            LAB_CK(cudaEventRecord(e0));
            for (size_t o = 0; o < noff; o++) {
                if (scheme == 1) {
                    long long npx = (long long)w * h;
                    k_s1<<<(unsigned)((npx + block - 1) / block), block>>>(dq, w, h, w, levels, off[o].dy,
                                                                        off[o].dx, dP + o * LL);
                } else {
                    int per_sm = 0;
                    LAB_CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_s2, block,
                                                                         (size_t)R * LL * 4));
                    if (per_sm < 1) per_sm = 1;
                    k_s2<<<per_sm * ws->sms, block, (size_t)R * LL * 4>>>(
                        dq, 0, 0, (long long)w * h, w, h, levels, off[o].dy, off[o].dx, R, dP + o * LL);
                }
            }
            LAB_CK(cudaGetLastError());
            LAB_CK(cudaEventRecord(e1));
            LAB_CK(cudaEventSynchronize(e1));
            LAB_CK(cudaEventElapsedTime(&f, e0, e1));
            if (rep >= 0) t[rep] = f;
        }
        lab->ms = median(t, reps);
        if (symmetric) {
            k_symmetrise<<<256, 256>>>(dP, (long long)noff, levels);
            LAB_CK(cudaGetLastError());
        }
        LAB_CK(cudaMemcpy(counts, dP, noff * LL * sizeof(uint32_t), cudaMemcpyDeviceToHost));
    } else if (scheme == 3) {
        const int K = lab->tiles > 0 ? lab->tiles : 8;
        const int block = levels <= 8 ? 1024 : 512;
        const long long N = (long long)w * h;
        int R = (int)(49152 / (LL * 4) / 2), per_sm = 0;
        long long maxpad = 0;
        double tc[3];
        if (R < 1) R = 1;
        if ((size_t)R * LL * 4 > (size_t)ws->smem_optin) {
            s = patina__fail(PATINA_E_LIMIT, "gpu: glcm lab: scheme 3 needs L*L*4 bytes of shared memory");
            goto out;
        }
        LAB_CK(cudaFuncSetAttribute(k_s2, cudaFuncAttributeMaxDynamicSharedMemorySize, ws->smem_optin));
        LAB_CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_s2, block, (size_t)R * LL * 4));
        if (per_sm < 1) per_sm = 1;
        for (size_t o = 0; o < noff; o++) {
            long long lin = (long long)off[o].dy * w + off[o].dx;
            if (lin < 0) lin = -lin;
            if (lin > maxpad) maxpad = lin;
        }
        {
            size_t cap = (size_t)((N + K - 1) / K + maxpad + 16);
            LAB_CK(cudaMalloc((void **)&dbuf[0], cap));
            LAB_CK(cudaMalloc((void **)&dbuf[1], cap));
            LAB_CK(cudaStreamCreateWithFlags(&st[0], cudaStreamNonBlocking));
            LAB_CK(cudaStreamCreateWithFlags(&st[1], cudaStreamNonBlocking));
            lab->copies = R;
            lab->block = block;
            lab->tiles = K;
            for (int mode = 0; mode < 3; mode++) {
                for (int rep = -1; rep < reps; rep++) {
                    double sum = 0, ms;
                    LAB_CK(cudaMemset(dP, 0, noff * LL * sizeof(uint32_t)));
                    LAB_CK(cudaDeviceSynchronize());
                    for (size_t o = 0; o < noff; o++) {
                        LAB_TRY(scheme3(hq, w, h, levels, off[o], K, R, block, per_sm * ws->sms,
                                        dbuf, cap, dP + o * LL, st, mode, &ms));
                        sum += ms;
                    }
                    if (rep >= 0) t[rep] = sum;
                }
                tc[mode] = median(t, reps);
                if (mode == 0) { /* the overlapped run leaves the right counts */
                    LAB_CK(cudaDeviceSynchronize());
                    if (symmetric) {
                        k_symmetrise<<<256, 256>>>(dP, (long long)noff, levels);
                        LAB_CK(cudaGetLastError());
                    }
                    LAB_CK(cudaMemcpy(counts, dP, noff * LL * sizeof(uint32_t), cudaMemcpyDeviceToHost));
                }
            }
            lab->ms = tc[0];
            lab->h2d_ms = tc[1];
            lab->kernel_ms = tc[2];
        }
    } else if (scheme == 4 || scheme == 5) {
        patina_gpu_grey_t gi;
        gi.q = hq;
        gi.w = w;
        gi.h = h;
        gi.stride = (size_t)w;
        LAB_TRY(ws_counts(ws, noff * LL));
        if (scheme == 5) { /* streamed from pinned host memory, end to end */
            for (int rep = -1; rep < reps; rep++) {
                double t0 = patina_now();
                LAB_TRY(run_counts(ws, ws->d_counts, &gi, 1, levels, off, noff, symmetric, lab->flags));
                LAB_CK(cudaMemcpyAsync(counts, ws->d_counts, noff * LL * sizeof(uint32_t),
                                       cudaMemcpyDeviceToHost, ws->sl[0].s));
                LAB_TRY(sync_all(ws));
                if (rep >= 0) t[rep] = (patina_now() - t0) * 1e3;
            }
            lab->ms = median(t, reps);
        } else { /* resident: one upload, then the counting kernel alone */
            plan_t pl;
            const size_t pitch = pitch_of(w);
            slot_t *sl = &ws->sl[0];
            size_t ntasks, nbands, rows_task;
            LAB_TRY(make_plan(ws, &pl, levels, off, noff, h, (size_t)w * (size_t)h, lab->flags));
            rows_task = rows_per_task(&pl, (size_t)w * (size_t)h, w);
            nbands = ((size_t)h + rows_task - 1) / rows_task;
            ntasks = nbands * (size_t)pl.S;
            LAB_TRY(slot_reserve(sl, pitch * (size_t)h, ntasks));
            LAB_CK(cudaMemcpy2D(sl->d_buf + GUARD, pitch, hq, (size_t)w, (size_t)w, (size_t)h,
                                cudaMemcpyHostToDevice));
            for (size_t k = 0; k < ntasks; k++) {
                gtask *tk = &sl->h_tasks[k];
                const size_t band = k / (size_t)pl.S;
                tk->base = sl->d_buf + GUARD;
                tk->row0 = 0;
                tk->pitch = (int)pitch;
                tk->w = w;
                tk->h = h;
                tk->r0 = (int)(band * rows_task);
                tk->r1 = (int)((band + 1) * rows_task < (size_t)h ? (band + 1) * rows_task : (size_t)h);
                tk->out = 0;
                tk->sub = (int)(k % (size_t)pl.S);
            }
            LAB_CK(cudaMemcpy(sl->d_tasks, sl->h_tasks, ntasks * sizeof(gtask), cudaMemcpyHostToDevice));
            for (int rep = -1; rep < reps; rep++) {
                LAB_CK(cudaMemsetAsync(ws->d_counts, 0, noff * LL * sizeof(uint32_t), sl->s));
                LAB_CK(cudaEventRecord(e0, sl->s));
                LAB_TRY(launch_count(ws, sl, &pl, (int)ntasks, off, noff, ws->d_counts));
                LAB_CK(cudaEventRecord(e1, sl->s));
                LAB_CK(cudaEventSynchronize(e1));
                LAB_CK(cudaEventElapsedTime(&f, e0, e1));
                if (rep >= 0) t[rep] = f;
            }
            lab->ms = median(t, reps);
            lab->copies = pl.global ? 0 : pl.R;
            lab->block = pl.global ? KTHREADS : k2_variants[pl.k2].threads;
            lab->tiles = (int)((noff + (size_t)(pl.G * pl.S) - 1) / (size_t)(pl.G * pl.S)); /* launches */
            if (symmetric) {
                k_symmetrise<<<256, 256, 0, sl->s>>>(ws->d_counts, (long long)noff, levels);
                LAB_CK(cudaGetLastError());
            }
            LAB_CK(cudaMemcpyAsync(counts, ws->d_counts, noff * LL * sizeof(uint32_t),
                                   cudaMemcpyDeviceToHost, sl->s));
            LAB_CK(cudaStreamSynchronize(sl->s));
        }
    } else {
        s = patina__fail(PATINA_E_INVALID, "gpu: glcm lab: unknown scheme %d", scheme);
    }
out:
    if (s != PATINA_OK) (void)cudaDeviceSynchronize();
    if (hq && hq != q) cudaFreeHost(hq);
    cudaFree(dq);
    cudaFree(dP);
    cudaFree(dbuf[0]);
    cudaFree(dbuf[1]);
    if (st[0]) cudaStreamDestroy(st[0]);
    if (st[1]) cudaStreamDestroy(st[1]);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    g_k2_var = (int)knobs[0];
    g_split = (int)knobs[1];
    g_task_pixels = knobs[2];
    g_task_min = knobs[3];
    pthread_mutex_unlock(&g_mu);
    free(t);
    return s;
#undef LAB_CK
#undef LAB_TRY
}
