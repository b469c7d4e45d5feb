/* The GLCM counting kernels, shared by the library (src/gpu/glcm.cu, which
 * instantiates the ones its policy picks) and the kernel lab (lab/glcm/,
 * which instantiates the others). Every kernel here is `static`: each
 * translation unit that includes this header gets its own copies of the
 * instances it uses, so the library and the lab never clash.
 *
 * What the host hands a counting kernel (glcm.cu's driver builds it):
 *   - Images of quantised levels (values < L; with a mask, bit 7 set on the
 *     pixels outside it for the MK instances) in device slots: a 64-byte
 *     guard before the first row (GLCM_GUARD) and rows glcm_pitch(w) =
 *     roundup(w, 16) + 32 bytes apart, so a thread reads 16 pixels of a row
 *     with one aligned 16-byte load and 16 partner pixels at any dx with five
 *     aligned 4-byte loads and funnel shifts, never outside the slot.
 *   - A task list: bands of first-pixel rows of one image (glcm_task);
 *     persistent blocks take tasks in grid-stride order and add their
 *     private tables to the global counts (u32 atomics) when the next task
 *     belongs to another image (or offset subset) and at the end.
 *   - The launch's offsets (glcm_offs), at most PATINA_GLCM_MAX_OFFSETS.
 * Counts accumulate in u32 with atomics: integer addition commutes, so the
 * counts equal the C reference's whatever the schedule.
 *
 * Kernels: k_count_global (any L, votes in global memory), k_count2 (G
 * offsets per block, C interleaved copies of their tables in shared
 * memory), k_count3 (k_count2 with one offset per block and L = 2^s <= 32,
 * half the instructions per pair), k_count4 (2..32 offsets in one pass,
 * lanes carry the offsets, L = 2^s <= 32), k_count5 (k_count4 with a lane
 * counting a pair of offsets into a joint table, L = 2^s <= 8). Their
 * signature is glcm_count_fn but for k_count_global; what G, L and C mean
 * for each is stated with it. docs/glcm.md describes the algorithms,
 * docs/lab/glcm.md the measurements behind them. */
#ifndef PATINA_GPU_GLCM_KERNELS_CUH
#define PATINA_GPU_GLCM_KERNELS_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "patina/glcm.h"
#include "patina/status.h"

#define GLCM_GUARD 64            /* bytes before the first row of a slot */
#define GLCM_GLOBAL_THREADS 256  /* k_count_global's block */

/* Bytes between rows of an image of width w in a slot. */
static inline size_t glcm_pitch(int w) { return (((size_t)w + 15) & ~(size_t)15) + 32; }

/* One block's work: first-pixel rows [r0, r1) of image `out` (w x h
 * pixels); the slot holds rows [row0, ...) of it, row row0 at device
 * address `base`, rows `pitch` apart. sub: the offset subset the task
 * counts (k_count2/k_count3: offsets [sub*G, sub*G + G) of the launch). */
struct glcm_task {
    const uint8_t *base;
    int row0, pitch, w, h, r0, r1, out, sub;
};

/* The offsets of one launch: n of them, global indices o0 .. o0+n-1 of
 * noff_total per image. */
struct glcm_offs {
    int n, o0, noff_total, pad_;
    int dy[PATINA_GLCM_MAX_OFFSETS], dx[PATINA_GLCM_MAX_OFFSETS];
};

/* k_count2 .. k_count5: (tasks, ntasks, offsets, G, L, C, counts (n, noff_total, L, L)). */
typedef void (*glcm_count_fn)(const glcm_task *, int, glcm_offs, int, int, int, uint32_t *);

static __device__ __forceinline__ int floor_div4(int x) { return x >= 0 ? x >> 2 : -((-x + 3) >> 2); }

/* The 16 bytes that start sh8 / 8 bytes past the aligned word pb, as 4
 * words: 5 aligned loads through the read-only cache, funnel-shifted right
 * by sh8 bits (0, 8, 16 or 24). */
static __device__ __forceinline__ void load16_shifted(const uint32_t *pb, int sh8, uint32_t out[4])
{
    uint32_t bw[5];
#pragma unroll
    for (int k = 0; k < 5; k++) bw[k] = __ldg(pb + k);
#pragma unroll
    for (int k = 0; k < 4; k++) out[k] = __funnelshift_r(bw[k], bw[k + 1], sh8);
}

/* Matrices too large for shared memory (L above ~238 levels): every pair
 * goes straight to the global counts with an atomic; a thread merges runs
 * of equal consecutive pairs of its 16-pixel group into one atomic. Tasks
 * as the other kernels, many small blocks. */
static __global__ void __launch_bounds__(GLCM_GLOBAL_THREADS)
k_count_global(const glcm_task *__restrict__ tasks, int ntasks, glcm_offs ko, int L, uint32_t *__restrict__ out)
{
    const int LL = L * L;
    for (int t = blockIdx.x; t < ntasks; t += gridDim.x) {
        const glcm_task tk = tasks[t];
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
                uint32_t bsh[4];
                load16_shifted(pb, sh8, bsh);
                uint32_t *H = gout + (size_t)(ko.o0 + o) * LL;
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
}

/* k_count2, for matrices that fit shared memory: one block of NT threads
 * per SM (the library uses 640: 20 warps with 95 registers each leave room
 * for the prefetch) holding, for each of the block's G offsets, C copies
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
 * host gives each block one band of ~launch pixels / grid per launch, so a
 * thread makes many steps per task and every SM gets the same work. */

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

static __device__ __forceinline__ void flush_k2(uint32_t *sh, const glcm_offs &ko, int olo, int gn, int L, int C,
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
static __device__ __forceinline__ void k2_take(uint32_t *sh, int nsh, const glcm_offs &ko, int G, int L, int C,
                                               const glcm_task &tk, int &cur, int &cursub, uint32_t *out)
{
    if (tk.out == cur && tk.sub == cursub) return;
    if (cur >= 0)
        table_renew(sh, nsh, [&] { flush_k2(sh, ko, cursub * G, min(G, ko.n - cursub * G), L, C, cur, out); });
    cur = tk.out;
    cursub = tk.sub;
}

/* The block's last copies into the global counts. */
static __device__ __forceinline__ void k2_finish(uint32_t *sh, const glcm_offs &ko, int G, int L, int C, int cur,
                                                 int cursub, uint32_t *out)
{
    if (cur < 0) return;
    __syncthreads();
    flush_k2(sh, ko, cursub * G, min(G, ko.n - cursub * G), L, C, cur, out);
}

/* G: offsets per block (the shared layout); a task's `sub` picks offsets
 * [sub*G, sub*G + G) of the launch's ko.n. C: copies. PF: the next step's
 * two 16-byte groups are loaded before the current step votes (software
 * pipelining). */
template <bool PF, int NT>
static __global__ void __launch_bounds__(NT, 1)
k_count2(const glcm_task *__restrict__ tasks, int ntasks, glcm_offs ko, int G, int L, int C,
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
        const glcm_task tk = tasks[t];
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

/* k_count3 (one offset per block, L a power of two <= 32): k_count2's
 * layout, tasks and prefetch with about half the instructions per pair (~7
 * instead of ~14 in the SASS loop).
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
 * MK (one offset, L = 32, under a mask): bit 7 of a pixel marks
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
static __global__ void __launch_bounds__(NT, 1)
k_count3(const glcm_task *__restrict__ tasks, int ntasks, glcm_offs ko, int G, int L, int C,
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
        const glcm_task tk = tasks[t];
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
                            uint32_t bs[4];
                            load16_shifted(pb, sh8, bs);
                            dummy += vote16p<HI, MK>(sh, aw, alo[u], ahi[u], bs, base, sb);
                            continue;
                        }
                        if (!vm) continue;
                        const uint32_t *pb = reinterpret_cast<const uint32_t *>(pa[u] + db);
                        uint32_t bs[4];
                        load16_shifted(pb, sh8, bs);
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

/* k_count4: lanes, not blocks, carry the offset, so that one pass over the image
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
 *   - MK (L = 32 under a mask, where a sentinel level would need 33
 *     levels and k_count2): bit 7 of a pixel marks it outside;
 *     a pair with such a pixel is counted as (0, 0) in the lane's own
 *     counter and taken back before the flush (vote16q). */

/* v, kept in a register: the compiler may not recompute it in a loop from
 * the values it came from (it would, for the loop invariants of k_count4). */
static __device__ __forceinline__ int opaque(int v)
{
    asm volatile("" : "+r"(v));
    return v;
}

/* Five consecutive words of a row from bit q (relative to a 16-byte aligned
 * group start; may be negative): LD = 0 five 4-byte loads at byte
 * ld_base(q); 1 three aligned 8-byte loads from there and a select (si =
 * ld_sel(q): the word base is odd). */
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
static __device__ __forceinline__ kwin kwin_make(const glcm_task &tk, const glcm_offs &ko, int win, int stride)
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

/* next window of the warp: (rw, cw) advanced, returns the bytes its
 * pointers advance (> 0) */
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
 * kernel takes them back before the flush. Branch-free, because ptxas does
 * not predicate ATOMS.POPC.INC: an if around the atomic would be a branch
 * per pair. In the aligned word fa = raw >> tA first pixel
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
static __device__ __forceinline__ void flush_k4(uint32_t *sh, const glcm_offs &ko, int lm, int cur, uint32_t *out)
{
    constexpr int L = 1 << S, LL = L * L, RS = S == 5 ? 32 : 64;
    const int lane = (int)(threadIdx.x & 31), m = 1 << lm, o = lane >> lm, nw = (int)(blockDim.x >> 5);
    for (int r0 = (int)(threadIdx.x >> 5) * 32; r0 < LL; r0 += nw * 32) {
        const int nrow = min(32, LL - r0);
        for (int r = r0; r < r0 + nrow; r++) {
            uint32_t v = sh[r * RS + lane];
            for (int d = 1; d < m; d <<= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
            __syncwarp(); /* every lane has read the row before any lane writes it (m = 1: no shuffle orders them) */
            if ((lane & (m - 1)) == 0) sh[r * RS + ((o + r) & 31)] = v;
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
static __global__ void __launch_bounds__(NT, 1)
k_count4(const glcm_task *__restrict__ tasks, int ntasks, glcm_offs ko, int G, int L, int C,
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
        const glcm_task tk = tasks[t];
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

/* k_count5 (L = 2^s <= 8, 2..32 offsets): k_count4 with each lane
 * counting a pair of offsets (o1, o2) = (2p, 2p + 1) into one joint table
 * of (a, b1, b2) triples, so that one shared atomic counts two pairs
 * (k_count4 needs one per pair, and its shared atomics, 2 L1 cycles each,
 * bound it).
 *   - Lane l counts offset pair l / m (m = 32 / P lanes per pair, P = the
 *     ceil(G / 2) pairs rounded up to a power of two; lanes of pseudo-pairs
 *     repeat a real pair and are never flushed; for odd G the last pair is
 *     (G - 1, G - 1) and only its first marginal is flushed).
 *   - Table: one column per lane, word R * 32 + lane, R = a << 2s | b1 << s
 *     | b2 for the L^3 triples, then 2 L^2 rows of single pairs (o1, then
 *     o2) for the windows on the image's border; 80 KB at L = 8.
 *   - Groups are aligned on the first pixels (one 16-byte load); each
 *     offset's partners come from five words (load5: LD = 0 five 4-byte
 *     loads, 1 three 8-byte loads and a select) and a funnel shift that
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
static __device__ __forceinline__ void flush_k5(uint32_t *sh, const glcm_offs &ko, int G, int lm, int cur,
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
static __global__ void __launch_bounds__(NT, 1)
k_count5(const glcm_task *__restrict__ tasks, int ntasks, glcm_offs ko, int G, int L, int C,
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
        const glcm_task tk = tasks[t];
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

/* ------------------------------------------------------------- plans */

/* How a plan's kernel reads its (G, L, C) arguments. */
enum {
    GLCM_KIND_GLOBAL = 0, /* k_count_global (fn unused) */
    GLCM_KIND_COPIES,     /* k_count2 / k_count3: C = copies of each table */
    GLCM_KIND_LANES       /* k_count4 / k_count5: C = log2(lanes per offset or pair) */
};

/* A counting plan. The driver (glcm.cu) fills the request; a chooser fills
 * the kernel; the driver then sizes the launch. */
struct glcm_plan {
    /* the request */
    int L;            /* levels counted */
    int noff;         /* offsets per image */
    int flagged;      /* pixels carry a mask in bit 7: the kernel must read it */
    size_t px_per_sm; /* first pixels per SM in a launch (the policy's measure of work) */
    int smem_optin;   /* shared memory a block may opt in to (bytes) */
    /* the kernel */
    int kind;         /* GLCM_KIND_* */
    glcm_count_fn fn;
    int threads;      /* per block */
    int smem;         /* dynamic shared memory per block (bytes) */
    int G;            /* offsets per block */
    int R;            /* copies (COPIES) or lanes per offset / pair (LANES) */
    int S;            /* offset subsets: S blocks share a band, each counts G offsets */
    const char *name; /* for reports */
    /* the launch */
    int grid;              /* persistent blocks */
    int pad_up, pad_down;  /* padding rows of a tile */
};

/* Picks the counting kernel of a plan. Returns PATINA_E_LIMIT, with no
 * message, when pl->flagged and no kernel it would pick reads flags (the
 * driver then encodes the mask as a sentinel level instead). */
struct pgpu_glcm_chooser {
    patina_status (*choose)(const struct pgpu_glcm_chooser *self, glcm_plan *pl);
    const void *arg;
};

static inline int glcm_pow2_floor(int x)
{
    int p = 1;
    while (p * 2 <= x) p *= 2;
    return p;
}

/* k_count2's shared layout for pl: G offsets per block with R copies each
 * (R the largest power of two <= 32 that fits the opt-in shared memory,
 * all offsets in one block when one copy of each fits), or votes in global
 * memory (GLCM_KIND_GLOBAL) when not even one matrix fits. S = 1. */
static inline void glcm_copies_plan(glcm_plan *pl)
{
    const long long LL4 = (long long)pl->L * pl->L * 4, budget = pl->smem_optin;
    pl->kind = GLCM_KIND_COPIES;
    pl->S = 1;
    if ((long long)pl->noff * LL4 <= budget) {
        pl->G = pl->noff;
        pl->R = glcm_pow2_floor((int)(budget / ((long long)pl->noff * LL4)));
        if (pl->R > 32) pl->R = 32;
    } else if (LL4 <= budget) {
        pl->G = (int)(budget / LL4);
        pl->R = 1;
    } else {
        pl->kind = GLCM_KIND_GLOBAL;
        pl->G = pl->noff;
        pl->R = 1;
    }
    pl->smem = pl->kind == GLCM_KIND_GLOBAL ? 0 : (int)(pl->G * pl->R * LL4);
}

/* Lanes per offset (k_count4: n = offsets) or per offset pair (k_count5:
 * n = pairs): 32 / n rounded up to a power of two. */
static inline int glcm_lanes(int n)
{
    int P = 1;
    while (P < n) P *= 2;
    return 32 / P;
}

#endif
