/* CEDD on the GPU: the GPU-only design and the hybrid CPU+GPU design of
 * Bampis et al. (docs/references.md), giving the same bytes as
 * the C reference (src/features/cedd.c) on every input.
 *
 * Exactness (spec §15). The only arithmetic here that is not in cedd_core.h
 * (shared verbatim with the reference) is the order of additions, kept as
 * the reference's:
 *   - quadrant Y sums: one thread per quadrant of a block adds its pixels'
 *     luminance (cedd_luma) sequentially, row by row and left to right, in
 *     double, starting at 0.0 -- the reference's order;
 *   - RGB block sums are integers (uint32, wrapping like the reference's), so
 *     any order gives the same value: the four quadrant threads' sums are
 *     combined with warp shuffles;
 *   - histogram: one thread per bin adds every block's cedd_bin_term in block
 *     raster order, also across the pieces and batches an image is split
 *     into (the running 144 doubles are carried in device memory, and a
 *     batch that continues an image waits for the previous batch's kernel 3);
 *     no atomics;
 *   - finishing: one thread sums the 144 bins in index order, then each bin
 *     is divided and quantised (cedd_quantise/cedd_qtable_of) in parallel,
 *     which is cedd_finish's per-element loop.
 * Builds with --fmad=false (CMakeLists.txt), so nothing is contracted.
 *
 * Kernel 1 (GPU-only): block sums. A CTA of 160 threads takes up to 40
 * blocks of one block row of one image, 4 threads per block (one per
 * quadrant). Pixel rows are staged through shared memory with 16-byte
 * coalesced loads, a top row and the matching bottom row together, so all
 * four quadrant threads work on every pass. Rows too wide for shared memory
 * are read from global memory directly. Output: cedd_block_t (48 B) a block.
 * Kernel 2 (both designs): cedd_block_contrib of every block of the batch,
 * one thread a block (the whole GPU busy), 200 B a block to device memory.
 * Kernel 3 (both designs): one CTA per image run in the batch stages the
 * contributions through shared memory and 144 threads add their terms to
 * their bins in raster order; the CTA that reaches an image's last block
 * finishes the descriptor.
 *
 * Host side: images are cut into pieces that fit a slot (context.h), batches
 * go round-robin to PGPU_SLOTS streams. Pinned input is copied straight from
 * the caller's memory (cudaMemcpy(2D)Async, contiguous pieces merged into one
 * copy); pageable input is first copied into the slot's pinned staging by
 * host threads while the GPU runs earlier batches; device input is read in
 * place. The hybrid design runs cedd_block_row_sums on the caller's pool
 * into the slot's pinned block buffer while the GPU finishes earlier batches,
 * and sends only the block sums (48 B a block) over PCIe. */
#include <cuda_runtime.h>

#include <stdlib.h>
#include <string.h>

#include "gpu/cedd_glue.h"
#include "gpu/context.h"

#define K1_THREADS 160          /* 4 quadrant threads x 40 blocks */
#define K1_MAXB (K1_THREADS / 4)
#define K1_SMEM (32 * 1024)     /* staged rows per CTA (<= 48 KB, no opt-in needed) */
#define KC_THREADS 128          /* contributions: one thread a block */
#define K2_THREADS 160          /* accumulation: >= CEDD_BINS */
#define KA_CHUNK 64             /* blocks per accumulation chunk (12.8 KB) */
#define STAGE_PIECE (1u << 20)  /* bytes per host staging-copy task */
#define FULL_MASK 0xffffffffu

/* ----------------------------------------------------------- memory plan
 * ("planned GPU memory"): PGPU_SLOTS slots, one per
 * context stream. A slot holds everything one batch needs, allocated on the
 * first call from the context's budget:
 *   device: pixel input (in_cap bytes), block sums (blk_cap x 48 B), block
 *           contributions (blk_cap x 200 B), the batch's piece and segment
 *           tables, descriptors out (seg_cap x 144 B)
 *   pinned: staging for pageable pixels (in_cap), block sums for the hybrid
 *           CPU stage (blk_cap x 48 B), tables, descriptors out.
 * Batches are cut to fit a slot; an image larger than a slot is split into
 * pieces (whole block rows, or parts of one block row) that may span several
 * batches, with the 144-bin running histogram carried between them. Batch k
 * uses slot k % PGPU_SLOTS, so while the GPU works on batch k the host fills
 * the staging (or computes block sums) of batch k+1 and copies of batch k+1
 * overlap kernels of batch k. */

#define PGPU_SLOTS PGPU_STREAMS /* one slot per context stream */
#define PGPU_CARRY 4 /* running-histogram ring between batches (> PGPU_SLOTS) */

/* One piece of an image, as kernel 1 sees it: a rectangle of nbx x nby blocks
 * of sx x sy pixels (whole block rows, or a part of one block row), whose
 * first pixel is at src (device address) with rows `pitch` bytes apart. Its
 * block sums go to the batch's block buffer from index blk0, raster order. */
typedef struct pgpu_piece {
    const uint8_t *src;
    uint64_t pitch;
    uint64_t blk0;
    int32_t nbx, nby;
    int32_t sx, sy;
    int32_t nbc;      /* blocks per thread block (CTA) along a block row */
    int32_t nchunk;   /* CTAs per block row: ceil(nbx / nbc) */
    int32_t rows;     /* row pairs staged in shared memory per pass; 0 = read global directly */
    uint32_t task0;   /* first CTA of this piece in the launch */
} pgpu_piece_t;

/* A run of consecutive blocks of one image within a batch (kernel 2: one CTA
 * each). first: the run starts at the image's block 0 (else it continues the
 * carried histogram); last: it ends at the image's final block (then its
 * descriptor goes to row `out` of the batch's output). */
typedef struct pgpu_seg {
    uint64_t blk0;
    uint32_t nblk;
    int32_t w, h;
    int32_t first, last;
    int32_t out;
    int32_t pad_;
} pgpu_seg_t;

/* Host-side bookkeeping of a piece (not sent to the device). */
typedef struct pgpu_hpiece {
    const uint8_t *hsrc;   /* host (or device) address of the first pixel */
    size_t hstride;        /* image stride */
    size_t rowbytes;       /* bytes used per pixel row = nbx*sx*3 */
    size_t rows;           /* pixel rows = nby*sy */
    size_t doff;           /* offset in the slot's pixel input (and staging) */
    size_t dpitch;         /* pitch there: rowbytes rounded up to 16 */
    size_t img;            /* image index */
    int by0, bx0;          /* first block row / column in the image */
    int kind;              /* PGPU_MEM_* */
    uint32_t task0, ntask; /* host tasks (staging row chunks, or hybrid block rows) */
} pgpu_hpiece_t;

enum { PGPU_MEM_NONE = 0, PGPU_MEM_PAGEABLE, PGPU_MEM_PINNED, PGPU_MEM_DEVICE };

typedef struct pgpu_slot {
    void *stream;           /* cudaStream_t: the context's stream of this slot */
    void *done;             /* cudaEvent_t: after the batch's last operation */
    void *k2_done;          /* cudaEvent_t: after the batch's kernel 3 (accumulation) */
    void *prof[6];          /* timing events around kernels 1, 2 and 3 (profiling only) */
    int busy;               /* holds a batch not yet harvested */
    int profiled;           /* its kernels were timed */
    /* device */
    uint8_t *d_in;
    cedd_block_t *d_blk;
    cedd_contrib_t *d_con;  /* blk_cap contributions, 200 B each */
    pgpu_piece_t *d_pieces;
    pgpu_seg_t *d_segs;
    uint8_t *d_out;
    /* pinned host */
    uint8_t *h_stage;
    cedd_block_t *h_blk;
    pgpu_piece_t *h_pieces;
    pgpu_seg_t *h_segs;
    uint8_t *h_out;
    /* host */
    pgpu_hpiece_t *hp;
    size_t *out_img;        /* image of each output row */
    /* the batch in the slot */
    size_t npieces, nsegs, nout, in_used, blk_used;
    uint32_t ntasks, nhtasks;
    size_t smem;
} pgpu_slot_t;


/* CEDD's state in a device context (pgpu_state(g, PGPU_FAM_CEDD)): the
 * memory plan and the slots, allocated on the first CEDD call. */
typedef struct pgpu_cedd {
    /* planned capacities per slot, and the ones in force (<= planned) */
    size_t in_plan, blk_plan, unit_plan;
    size_t in_cap, blk_cap, unit_cap;
    pgpu_slot_t slot[PGPU_SLOTS];
    double *d_carry;                  /* PGPU_CARRY x 144 running histograms between batches */
    /* profiling (patina_gpu__profile): kernel times summed over batches */
    int profile;
    double prof_ms[4];
    uint64_t prof_batches;
} pgpu_cedd_t;

/* ================================================================ kernels */

/* (double)v for 0 <= v < 2^31, exactly: 2^52 + v is representable, so the
 * subtraction is exact. One DADD instead of a 64-bit conversion, which runs
 * at a quarter of the FP64 rate. */
static __device__ __forceinline__ double exact_double(int v)
{
    return __hiloint2double(0x43300000, v) - 4503599627370496.0;
}

/* Adds n pixels (3 bytes each, from p) to a quadrant's running sums. */
static __device__ __forceinline__ void sum_run(const uint8_t *p, int n, double &acc, uint32_t &r,
                                               uint32_t &g, uint32_t &b)
{
    for (int j = 0; j < n; j++, p += 3) {
        const int pr = p[0], pg = p[1], pb = p[2];
        acc += cedd_luma_d(exact_double(pr), exact_double(pg), exact_double(pb));
        r += (uint32_t)pr;
        g += (uint32_t)pg;
        b += (uint32_t)pb;
    }
}

/* Stages 2p pixel rows of L bytes into shared memory: rows i0..i0+p-1 (top
 * half of the block row) into slots 0..p-1 and rows hy+i0.. (bottom half)
 * into slots p..2p-1, slot t at sm + t*sp. A row starting at global address a
 * lands at offset (a & 15) of its slot, so whole aligned 16-byte chunks are
 * moved with one vector load each; the partial chunks at either end of a row
 * go byte by byte (never reading outside the row). Warp w takes rows w,
 * w+nwarps, ...; its lanes take the row's 16-byte chunks. */
static __device__ __forceinline__ void stage_rows(uint8_t *sm, size_t sp, const uint8_t *seg0,
                                                  uint64_t pitch, int i0, int hy, int p, size_t L)
{
    const int lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
    for (int t = threadIdx.x >> 5; t < 2 * p; t += nwarps) {
        const int row = t < p ? i0 + t : hy + i0 + (t - p);
        const uint8_t *a = seg0 + (size_t)row * pitch, *e = a + L;
        const uint8_t *a0 = (const uint8_t *)((uintptr_t)a & ~(uintptr_t)15);
        uint8_t *d0 = sm + (size_t)t * sp;
        /* Two independent loads in flight per lane before the stores (four
         * cost registers: 6 instead of 9 CTAs per SM). */
        for (const uint8_t *c = a0 + 16 * lane; c < e; c += 2 * 16 * 32) {
            uint4 v[2];
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const uint8_t *cu = c + u * 16 * 32;
                if (cu >= a && cu + 16 <= e) v[u] = __ldcs((const uint4 *)cu); /* streamed: read once */
            }
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const uint8_t *cu = c + u * 16 * 32;
                uint8_t *d = d0 + (cu - a0);
                if (cu >= a && cu + 16 <= e) {
                    *(uint4 *)d = v[u];
                } else if (cu < e) {
                    for (int k = 0; k < 16; k++)
                        if (cu + k >= a && cu + k < e) d[k] = cu[k];
                }
            }
        }
    }
}

/* Kernel 1: block sums of all pieces of a batch. CTA blockIdx.x belongs to
 * the piece with the largest task0 <= blockIdx.x. */
__global__ void __launch_bounds__(K1_THREADS)
k_block_sums(const pgpu_piece_t *__restrict__ pieces, int npieces, cedd_block_t *__restrict__ blk)
{
    extern __shared__ __align__(16) uint8_t sm[];
    __shared__ pgpu_piece_t pc;
    if (threadIdx.x == 0) {
        int lo = 0, hi = npieces - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            if (pieces[mid].task0 <= blockIdx.x) lo = mid;
            else hi = mid - 1;
        }
        pc = pieces[lo];
    }
    __syncthreads();

    const unsigned local = blockIdx.x - pc.task0;
    const int by = (int)(local / (unsigned)pc.nchunk);
    const int bx0 = (int)(local - (unsigned)by * (unsigned)pc.nchunk) * pc.nbc;
    const int nb = min(pc.nbc, pc.nbx - bx0);
    const int sx = pc.sx, hx = sx >> 1, hy = pc.sy >> 1;
    const int q = threadIdx.x, b = q >> 2, k = q & 3; /* k: 0 TL, 1 TR, 2 BL, 3 BR */
    const int active = b < nb, bottom = k >> 1;
    const size_t colq = ((size_t)b * (size_t)sx + (size_t)(k & 1) * (size_t)hx) * 3;
    const size_t L = (size_t)nb * (size_t)sx * 3;
    const uint8_t *seg0 = pc.src + (size_t)by * (size_t)pc.sy * pc.pitch + (size_t)bx0 * (size_t)sx * 3;
    double acc = 0.0;
    uint32_t sr = 0, sg = 0, sb = 0;

    if (pc.rows == 0) {
        if (active)
            for (int i = 0; i < hy; i++)
                sum_run(seg0 + (size_t)(bottom * hy + i) * pc.pitch + colq, hx, acc, sr, sg, sb);
    } else {
        const size_t sp = ((L + 30) >> 4) << 4;
        for (int i0 = 0; i0 < hy; i0 += pc.rows) {
            const int p = min(pc.rows, hy - i0);
            stage_rows(sm, sp, seg0, pc.pitch, i0, hy, p, L);
            __syncthreads();
            if (active)
                for (int rr = 0; rr < p; rr++) {
                    const uint8_t *a = seg0 + (size_t)(bottom * hy + i0 + rr) * pc.pitch;
                    sum_run(sm + (size_t)(bottom * p + rr) * sp + ((uintptr_t)a & 15) + colq, hx,
                            acc, sr, sg, sb);
                }
            __syncthreads();
        }
    }

    /* The block's 4 quadrant threads are lanes 4b..4b+3 of one warp. */
    sr += __shfl_xor_sync(FULL_MASK, sr, 1);
    sg += __shfl_xor_sync(FULL_MASK, sg, 1);
    sb += __shfl_xor_sync(FULL_MASK, sb, 1);
    sr += __shfl_xor_sync(FULL_MASK, sr, 2);
    sg += __shfl_xor_sync(FULL_MASK, sg, 2);
    sb += __shfl_xor_sync(FULL_MASK, sb, 2);
    const double q1 = __shfl_down_sync(FULL_MASK, acc, 1);
    const double q2 = __shfl_down_sync(FULL_MASK, acc, 2);
    const double q3 = __shfl_down_sync(FULL_MASK, acc, 3);
    if (active && k == 0) {
        cedd_block_t o;
        o.q[0] = acc;
        o.q[1] = q1;
        o.q[2] = q2;
        o.q[3] = q3;
        o.rgb[0] = sr;
        o.rgb[1] = sg;
        o.rgb[2] = sb;
        o.pad_ = 0;
        blk[pc.blk0 + (size_t)by * (size_t)pc.nbx + (size_t)bx0 + (size_t)b] = o;
    }
}

/* Kernel 2: what every block of the batch contributes (cedd_block_contrib),
 * one thread a block. The CTA's results are gathered in shared memory and
 * written out with coalesced 8-byte stores. */
__global__ void __launch_bounds__(KC_THREADS)
k_contrib(const pgpu_seg_t *__restrict__ segs, int nsegs, const cedd_block_t *__restrict__ blk,
          cedd_contrib_t *__restrict__ con, uint64_t nblk, int compact)
{
    __shared__ cedd_contrib_t cs[KC_THREADS];
    const uint64_t base = (uint64_t)blockIdx.x * KC_THREADS, i = base + threadIdx.x;
    if (i < nblk) {
        int lo = 0, hi = nsegs - 1; /* the run holding block i: largest blk0 <= i */
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            if (segs[mid].blk0 <= i) lo = mid;
            else hi = mid - 1;
        }
        const cedd_geom_t g = cedd_geometry(segs[lo].w, segs[lo].h);
        const cedd_block_t b = blk[i];
        cs[threadIdx.x] = cedd_block_contrib(&b, &g, compact);
    }
    __syncthreads();
    {
        const uint64_t n = min((uint64_t)KC_THREADS, nblk - base) * (sizeof(cedd_contrib_t) / 8);
        const double *src = (const double *)cs;
        double *dst = (double *)(con + base);
        for (uint64_t k = threadIdx.x; k < n; k += KC_THREADS) dst[k] = src[k];
    }
}

/* Kernel 3: per image run of the batch, one thread per bin adds every
 * block's term (cedd_bin_term) in raster order; the run that ends an image
 * finishes it. Contributions come through shared memory in chunks of
 * KA_CHUNK blocks, the next chunk's loads issued before the current chunk is
 * summed. carry_in holds the running histogram of an image continued from
 * the previous batch; carry_out receives the one this batch leaves
 * unfinished. */
__global__ void __launch_bounds__(K2_THREADS)
k_accumulate(const pgpu_seg_t *__restrict__ segs, const cedd_contrib_t *__restrict__ con,
             const double *carry_in, double *carry_out, uint8_t *__restrict__ out, int compact)
{
    constexpr int W = (int)(sizeof(cedd_contrib_t) / 8);           /* 25 doubles a block */
    constexpr int PER = (KA_CHUNK * W + K2_THREADS - 1) / K2_THREADS; /* prefetched per thread */
    __shared__ cedd_contrib_t cbuf[KA_CHUNK];
    __shared__ double hist[CEDD_BINS];
    __shared__ double total;
    const pgpu_seg_t s = segs[blockIdx.x];
    const int tid = threadIdx.x;
    const double *src = (const double *)(con + s.blk0);
    double acc = 0.0, next[PER];
    uint32_t c0;
    int k;

    if (tid < CEDD_BINS && !s.first) acc = carry_in[tid];
    for (k = 0; k < PER; k++) { /* first chunk */
        const uint32_t w = (uint32_t)(tid + k * K2_THREADS);
        next[k] = w < min((uint32_t)KA_CHUNK, s.nblk) * W ? __ldcs(src + w) : 0.0;
    }
    for (c0 = 0; c0 < s.nblk; c0 += KA_CHUNK) {
        const uint32_t nb = min((uint32_t)KA_CHUNK, s.nblk - c0);
        const uint32_t nn = c0 + KA_CHUNK < s.nblk ? min((uint32_t)KA_CHUNK, s.nblk - c0 - KA_CHUNK) : 0;
        for (k = 0; k < PER; k++) {
            const uint32_t w = (uint32_t)(tid + k * K2_THREADS);
            if (w < nb * W) ((double *)cbuf)[w] = next[k];
        }
        for (k = 0; k < PER; k++) { /* next chunk's loads in flight while this one is summed */
            const uint32_t w = (uint32_t)(tid + k * K2_THREADS);
            next[k] = w < nn * W ? __ldcs(src + (size_t)(c0 + KA_CHUNK) * W + w) : 0.0;
        }
        __syncthreads();
        if (tid < CEDD_BINS) {
            uint32_t j = 0;
            /* 8 terms evaluated independently, then added in block order:
             * the same additions in the same order, without their loads and
             * selects in the dependency chain. */
            for (; j + 8 <= nb; j += 8) {
                double t[8];
#pragma unroll
                for (int u = 0; u < 8; u++) t[u] = cedd_bin_term(&cbuf[j + u], tid, compact);
#pragma unroll
                for (int u = 0; u < 8; u++) acc += t[u];
            }
            for (; j < nb; j++)
                acc += cedd_bin_term(&cbuf[j], tid, compact);
        }
        __syncthreads();
    }
    if (!s.last) {
        if (tid < CEDD_BINS) carry_out[tid] = acc;
        return;
    }
    if (tid < CEDD_BINS) hist[tid] = acc;
    __syncthreads();
    if (tid == 0) {
        double sum = 0.0;
        for (int i = 0; i < CEDD_BINS; i++)
            sum += hist[i];
        total = sum;
    }
    __syncthreads();
    if (tid < CEDD_BINS)
        out[(size_t)s.out * CEDD_BINS + (size_t)tid] =
            cedd_quantise(hist[tid] / total, cedd_qtable_of(tid, compact));
}

/* ============================================================== host side */

/* ------------------------------------------------------------ the state */

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* The plan: per slot, a fifth of the slot's share for block sums and
 * contributions (248 B a block, at most 196,608 blocks = 122 VGA frames, so
 * a batch's 39 MiB of contributions stays in the 50 MB L2 between the
 * kernels that write and read them), ~1 MiB of tables and output for up to
 * 4096 pieces, the rest (at most 64 MiB, 72 VGA frames) for pixels. Batches
 * of 64 MiB already run the copy engine at full PCIe speed; more would only
 * cost pinned memory. */
static patina_status cedd_plan(pgpu_cedd_t *c, uint64_t budget)
{
    const size_t min_slot = 4u << 20;
    size_t per_slot = (size_t)(budget / PGPU_SLOTS), blk_bytes, tab;
    if (per_slot < min_slot)
        return patina__fail(PATINA_E_LIMIT,
                            "gpu: cedd: memory budget %.1f MiB is below its minimum %.1f MiB (%d slots of %.0f MiB)",
                            (double)budget / (1 << 20), PGPU_SLOTS * (double)min_slot / (1 << 20), PGPU_SLOTS,
                            (double)min_slot / (1 << 20));
    c->unit_plan = 4096;
    tab = c->unit_plan * (sizeof(pgpu_piece_t) + sizeof(pgpu_seg_t) + CEDD_BINS);
    blk_bytes = per_slot / 5;
    c->blk_plan = blk_bytes / (sizeof(cedd_block_t) + sizeof(cedd_contrib_t));
    if (c->blk_plan > 196608) c->blk_plan = 196608;
    blk_bytes = c->blk_plan * (sizeof(cedd_block_t) + sizeof(cedd_contrib_t));
    c->in_plan = per_slot - blk_bytes - tab;
    if (c->in_plan > (64u << 20)) c->in_plan = 64u << 20;
    c->in_plan &= ~(size_t)0xffff;
    c->in_cap = c->in_plan;
    c->blk_cap = c->blk_plan;
    c->unit_cap = c->unit_plan;
    return PATINA_OK;
}

#define DEV(p, bytes, tag) PATINA_TRY(pgpu_dev_alloc(g, (void **)&(p), (bytes), PGPU_FAM_CEDD, tag))
#define PIN(p, bytes, tag) PATINA_TRY(pgpu_pin_alloc(g, (void **)&(p), (bytes), PGPU_FAM_CEDD, tag))

static patina_status open_slot(patina_gpu_t *g, pgpu_cedd_t *c, pgpu_slot_t *s, int k)
{
    cudaEvent_t ev;
    s->stream = pgpu_stream(g, k);
    PGPU_CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    s->done = ev;
    PGPU_CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    s->k2_done = ev;
    for (int e = 0; e < 6; e++) {
        PGPU_CU(cudaEventCreate(&ev));
        s->prof[e] = ev;
    }
    DEV(s->d_in, c->in_plan, "pixel input");
    DEV(s->d_blk, c->blk_plan * sizeof(cedd_block_t), "block sums");
    DEV(s->d_con, c->blk_plan * sizeof(cedd_contrib_t), "block contributions");
    DEV(s->d_pieces, c->unit_plan * sizeof(pgpu_piece_t), "piece table");
    DEV(s->d_segs, c->unit_plan * sizeof(pgpu_seg_t), "segment table");
    DEV(s->d_out, c->unit_plan * CEDD_BINS, "descriptors");
    PIN(s->h_stage, c->in_plan, "pixel staging");
    PIN(s->h_blk, c->blk_plan * sizeof(cedd_block_t), "block sums");
    PIN(s->h_pieces, c->unit_plan * sizeof(pgpu_piece_t), "piece table");
    PIN(s->h_segs, c->unit_plan * sizeof(pgpu_seg_t), "segment table");
    PIN(s->h_out, c->unit_plan * CEDD_BINS, "descriptors");
    s->hp = (pgpu_hpiece_t *)calloc(c->unit_plan, sizeof *s->hp);
    s->out_img = (size_t *)calloc(c->unit_plan, sizeof *s->out_img);
    if (!s->hp || !s->out_img) return patina__fail(PATINA_E_NOMEM, "gpu: cedd: out of host memory");
    return PATINA_OK;
}

static void close_slot(patina_gpu_t *g, pgpu_slot_t *s)
{
    if (s->stream) cudaStreamSynchronize((cudaStream_t)s->stream);
    pgpu_free_n(g, 11, &s->d_in, &s->d_blk, &s->d_con, &s->d_pieces, &s->d_segs, &s->d_out, &s->h_stage,
                &s->h_blk, &s->h_pieces, &s->h_segs, &s->h_out);
    if (s->done) cudaEventDestroy((cudaEvent_t)s->done);
    if (s->k2_done) cudaEventDestroy((cudaEvent_t)s->k2_done);
    for (int e = 0; e < 6; e++)
        if (s->prof[e]) cudaEventDestroy((cudaEvent_t)s->prof[e]);
    free(s->hp);
    free(s->out_img);
    memset(s, 0, sizeof *s);
}

static void cedd_release(patina_gpu_t *g, void *state)
{
    pgpu_cedd_t *c = (pgpu_cedd_t *)state;
    (void)cudaSetDevice(g->device);
    for (int k = 0; k < PGPU_SLOTS; k++) close_slot(g, &c->slot[k]);
    pgpu_free(g, c->d_carry);
    (void)cudaGetLastError();
    free(c);
}

/* g's CEDD state, made (planned and allocated) on first use. */
static patina_status cedd_state(patina_gpu_t *g, pgpu_cedd_t **out)
{
    pgpu_cedd_t *c = (pgpu_cedd_t *)pgpu_state(g, PGPU_FAM_CEDD);
    patina_status s;
    *out = c;
    if (c) return PATINA_OK;
    c = (pgpu_cedd_t *)calloc(1, sizeof *c);
    if (!c) return patina__fail(PATINA_E_NOMEM, "gpu: cedd: out of host memory");
    pgpu_set_state(g, PGPU_FAM_CEDD, c, cedd_release);
    s = cedd_plan(c, g->budget);
    if (s == PATINA_OK)
        s = pgpu_dev_alloc(g, (void **)&c->d_carry, PGPU_CARRY * CEDD_BINS * sizeof(double), PGPU_FAM_CEDD,
                           "carried histograms");
    for (int k = 0; s == PATINA_OK && k < PGPU_SLOTS; k++) s = open_slot(g, c, &c->slot[k], k);
    if (s != PATINA_OK) {
        pgpu_drop_state(g, PGPU_FAM_CEDD);
        return s;
    }
    *out = c;
    return PATINA_OK;
}

void patina_gpu__profile(patina_gpu_t *g, int on, double ms[4], uint64_t *batches)
{
    pgpu_cedd_t *c = NULL;
    if (cedd_state(g, &c) != PATINA_OK) {
        if (ms) memset(ms, 0, 4 * sizeof *ms);
        if (batches) *batches = 0;
        return;
    }
    if (ms) memcpy(ms, c->prof_ms, sizeof c->prof_ms);
    if (batches) *batches = c->prof_batches;
    memset(c->prof_ms, 0, sizeof c->prof_ms);
    c->prof_batches = 0;
    c->profile = on != 0;
}

patina_status patina_gpu__set_caps(patina_gpu_t *g, size_t pixel_bytes, size_t blocks, size_t units)
{
    pgpu_cedd_t *c;
    PATINA_TRY(cedd_state(g, &c));
    c->in_cap = pixel_bytes && pixel_bytes < c->in_plan ? pixel_bytes : c->in_plan;
    c->blk_cap = blocks && blocks < c->blk_plan ? blocks : c->blk_plan;
    c->unit_cap = units && units < c->unit_plan ? units : c->unit_plan;
    return PATINA_OK;
}


typedef struct job {
    patina_gpu_t *g;
    pgpu_cedd_t *c;          /* g's CEDD state */
    pgpu_cedd_rows_fn rows;  /* hybrid: the CPU stage (the C reference's block row sums) */
    uint8_t *out;
    const patina_image_t *imgs;
    size_t n;
    int compact, hybrid;
    patina_status *st;
    patina_pool_t *cpu;      /* hybrid: the caller's workers */
    unsigned char *kind;     /* per image: PGPU_MEM_*; NONE = finished on the host */
    uint64_t dev_chunk[1024]; /* 2 MiB VA chunks known to hold this GPU's memory (+1; 0 empty) */
    unsigned char *done;     /* per image: descriptor written */
    /* planner cursor: image, next block row and column */
    size_t img;
    int by, bx;
    uint64_t batch;          /* batches issued so far */
    int prev;                /* slot of the previous batch, -1 */
} job_t;

/* Which memory an image's pixels are in; PGPU_MEM_NONE if they are device
 * memory of another device. cudaPointerGetAttributes costs about a
 * microsecond, as much as a VGA frame's kernels, so device memory is
 * remembered per 2 MiB chunk of virtual addresses: under unified addressing
 * device allocations are reserved in 2 MiB granules, so such a chunk never
 * also holds host memory or another device's memory. (Host memory is asked
 * every time: pinned and pageable memory can share a chunk.) */
static int mem_kind(job_t *j, const void *p)
{
    const uint64_t chunk = ((uint64_t)(uintptr_t)p >> 21) + 1;
    uint64_t *slot = &j->dev_chunk[(chunk * 0x9E3779B97F4A7C15ull) >> 54];
    cudaPointerAttributes a;
    if (*slot == chunk) return PGPU_MEM_DEVICE;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return PGPU_MEM_PAGEABLE;
    }
    switch (a.type) {
    case cudaMemoryTypeHost: return PGPU_MEM_PINNED;
    case cudaMemoryTypeDevice:
        if (a.device != j->g->device) return PGPU_MEM_NONE;
        *slot = chunk;
        return PGPU_MEM_DEVICE;
    case cudaMemoryTypeManaged: return a.device == j->g->device ? PGPU_MEM_DEVICE : PGPU_MEM_NONE;
    default: return PGPU_MEM_PAGEABLE;
    }
}

/* Checks image i like the C reference does, finishes images without blocks
 * on the host, and records where the pixels live. */
static void classify(job_t *j, size_t i)
{
    const patina_image_t *im = &j->imgs[i];
    patina_status s = PATINA_OK;
    cedd_geom_t gm;
    j->kind[i] = PGPU_MEM_NONE;
    if (im->width > 0 && im->height > 0 && !im->data)
        s = patina__fail(PATINA_E_INVALID, "cedd: image %zu: null pixel data", i);
    else if (im->width < 0 || im->height < 0 ||
             (im->width > 0 && im->stride < 3 * (size_t)im->width))
        s = patina__fail(PATINA_E_INVALID, "cedd: image %zu: bad shape %dx%d stride %zu", i,
                         im->width, im->height, im->stride);
    if (s == PATINA_OK) {
        gm = pgpu_cedd_geometry(im->width, im->height);
        if (gm.nbx == 0 || gm.nby == 0) {
            double zero[CEDD_BINS] = {0};
            pgpu_cedd_finish(j->out + i * CEDD_BINS, zero, j->compact); /* all zeros (NaN -> 0) */
            j->done[i] = 1;
            if (j->st) j->st[i] = PATINA_OK;
            return;
        }
        {
            const uint8_t *last = im->data + (size_t)(im->height - 1) * im->stride + 3 * (size_t)im->width - 1;
            int k0 = mem_kind(j, im->data), k1 = mem_kind(j, last);
            if (k0 == PGPU_MEM_NONE || k1 != k0 || (j->hybrid && k0 == PGPU_MEM_DEVICE))
                s = patina__fail(PATINA_E_INVALID,
                                 j->hybrid ? "cedd: image %zu: the hybrid path needs host memory"
                                           : "cedd: image %zu: pixels are not in host memory or this GPU's memory",
                                 i);
            else if (!j->hybrid && k0 != PGPU_MEM_DEVICE &&
                     (size_t)gm.sx * 3 * (size_t)gm.sy > j->c->in_cap)
                s = patina__fail(PATINA_E_LIMIT,
                                 "cedd: image %zu: one %dx%d block does not fit the GPU's %zu-byte batch",
                                 i, gm.sx, gm.sy, j->c->in_cap);
            else
                j->kind[i] = (unsigned char)k0;
        }
    }
    if (s != PATINA_OK) {
        memset(j->out + i * CEDD_BINS, 0, CEDD_BINS);
        j->done[i] = 1;
        if (j->st) j->st[i] = s;
    }
}

/* Shared-memory bytes of one staged row of nb blocks of width sx (room for
 * a start misaligned by up to 15 bytes, rounded to 16). */
static size_t row_span(int nb, int sx) { return ((((size_t)nb * (size_t)sx * 3) + 30) >> 4) << 4; }

/* Kernel 1 launch shape of a piece: blocks per CTA, and staged row pairs. */
static void shape_piece(pgpu_piece_t *p)
{
    int nbc = p->nbx < K1_MAXB ? p->nbx : K1_MAXB, rows = 1;
    while (nbc > 1 && 2 * row_span(nbc, p->sx) > K1_SMEM) nbc--;
    if (2 * row_span(nbc, p->sx) > K1_SMEM) { /* one block's row pair is too wide: read global */
        nbc = p->nbx < K1_MAXB ? p->nbx : K1_MAXB;
        rows = 0;
    }
    p->nchunk = (p->nbx + nbc - 1) / nbc;
    p->nbc = (p->nbx + p->nchunk - 1) / p->nchunk; /* balance the CTAs of a row */
    if (rows) rows = (int)min_sz(K1_SMEM / (2 * row_span(p->nbc, p->sx)), (size_t)(p->sy / 2));
    p->rows = rows;
}

static size_t piece_smem(const pgpu_piece_t *p)
{
    return p->rows ? 2 * (size_t)p->rows * row_span(p->nbc, p->sx) : 0;
}

/* Appends blocks [by, by+nby) x [bx, bx+nbx) of image i to the batch. */
static void add_piece(job_t *j, pgpu_slot_t *s, size_t i, const cedd_geom_t *gm, int by, int bx,
                      int nbx, int nby, size_t *seg_img)
{
    const patina_image_t *im = &j->imgs[i];
    pgpu_piece_t *p = &s->h_pieces[s->npieces];
    pgpu_hpiece_t *h = &s->hp[s->npieces];
    const size_t nblk = (size_t)nbx * (size_t)nby;
    const int kind = j->kind[i];
    pgpu_seg_t *sg;

    h->hsrc = im->data + (size_t)by * (size_t)gm->sy * im->stride + (size_t)bx * (size_t)gm->sx * 3;
    h->hstride = im->stride;
    h->rowbytes = (size_t)nbx * (size_t)gm->sx * 3;
    h->rows = (size_t)nby * (size_t)gm->sy;
    h->img = i;
    h->by0 = by;
    h->bx0 = bx;
    h->kind = kind;
    h->doff = s->in_used;
    h->dpitch = h->rowbytes;
    h->task0 = s->nhtasks;
    h->ntask = 0;

    p->blk0 = s->blk_used;
    p->nbx = nbx;
    p->nby = nby;
    p->sx = gm->sx;
    p->sy = gm->sy;
    p->task0 = s->ntasks;
    if (kind == PGPU_MEM_DEVICE) {
        p->src = h->hsrc;
        p->pitch = im->stride;
    } else {
        p->src = s->d_in + h->doff;
        p->pitch = h->dpitch;
    }
    if (j->hybrid) {
        h->ntask = (uint32_t)nby;             /* one CPU task per block row */
    } else {
        if (kind != PGPU_MEM_DEVICE) s->in_used += h->rowbytes * h->rows;
        if (kind == PGPU_MEM_PAGEABLE)
            h->ntask = (uint32_t)((h->rowbytes * h->rows + STAGE_PIECE - 1) / STAGE_PIECE);
        shape_piece(p);
        s->ntasks += (uint32_t)(nby * p->nchunk);
        if (piece_smem(p) > s->smem) s->smem = piece_smem(p);
    }
    s->nhtasks += h->ntask;
    s->npieces++;

    /* Segments: consecutive pieces of one image form one run. */
    if (s->nsegs && *seg_img == i) {
        sg = &s->h_segs[s->nsegs - 1];
        sg->nblk += (uint32_t)nblk;
    } else {
        sg = &s->h_segs[s->nsegs++];
        sg->blk0 = s->blk_used;
        sg->nblk = (uint32_t)nblk;
        sg->w = im->width;
        sg->h = im->height;
        sg->first = by == 0 && bx == 0;
        sg->last = 0;
        sg->out = -1;
        sg->pad_ = 0;
        *seg_img = i;
    }
    s->blk_used += nblk;
    if (by + nby == gm->nby && bx + nbx == gm->nbx) {
        sg->last = 1;
        sg->out = (int32_t)s->nout;
        s->out_img[s->nout++] = i;
    }
}

/* Plans the next batch into slot s: whole block rows while they fit, then a
 * part of one block row to fill the rest (so any image fits, in pieces). */
static void fill(job_t *j, pgpu_slot_t *s)
{
    const pgpu_cedd_t *c = j->c;
    size_t seg_img = 0;
    s->npieces = s->nsegs = s->nout = s->in_used = s->blk_used = 0;
    s->ntasks = s->nhtasks = 0;
    s->smem = 0;
    while (j->img < j->n && s->npieces < c->unit_cap) {
        const size_t i = j->img;
        const patina_image_t *im = &j->imgs[i];
        cedd_geom_t gm;
        int pixels, nbx = 0, nby = 0;
        size_t in_free, blk_free;
        if (j->kind[i] == PGPU_MEM_NONE) {
            j->img++;
            continue;
        }
        gm = pgpu_cedd_geometry(im->width, im->height);
        pixels = !j->hybrid && j->kind[i] != PGPU_MEM_DEVICE;
        in_free = c->in_cap - s->in_used;
        blk_free = c->blk_cap - s->blk_used;
        if (j->bx == 0) {
            size_t k = (size_t)(gm.nby - j->by);
            if (pixels) k = min_sz(k, in_free / ((size_t)gm.nbx * (size_t)gm.sx * 3 * (size_t)gm.sy));
            k = min_sz(k, blk_free / (size_t)gm.nbx);
            if (k > 0) {
                nby = (int)k;
                nbx = gm.nbx;
            }
        }
        if (nby == 0) {
            size_t m = (size_t)(gm.nbx - j->bx);
            if (pixels) m = min_sz(m, in_free / ((size_t)gm.sx * 3 * (size_t)gm.sy));
            m = min_sz(m, blk_free);
            if (m == 0) break; /* batch full */
            nby = 1;
            nbx = (int)m;
        }
        add_piece(j, s, i, &gm, j->by, j->bx, nbx, nby, &seg_img);
        if (nbx == gm.nbx && j->bx == 0) {
            j->by += nby;
        } else {
            j->bx += nbx;
            if (j->bx == gm.nbx) {
                j->bx = 0;
                j->by++;
            }
        }
        if (j->by == gm.nby) {
            j->img++;
            j->by = j->bx = 0;
        }
    }
}

/* Host task t of slot s -> its piece (largest task0 <= t). */
static size_t task_piece(const pgpu_slot_t *s, uint32_t t)
{
    size_t lo = 0, hi = s->npieces - 1;
    while (lo < hi) {
        size_t mid = (lo + hi + 1) / 2;
        if (s->hp[mid].task0 <= t) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

typedef struct host_stage {
    job_t *j;
    pgpu_slot_t *s;
} host_stage_t;

/* GPU-only, pageable input: copy a chunk of a piece's rows into staging. */
static void stage_task(void *arg, size_t t, int worker)
{
    host_stage_t *hs = (host_stage_t *)arg;
    const pgpu_slot_t *s = hs->s;
    const pgpu_hpiece_t *h = &s->hp[task_piece(s, (uint32_t)t)];
    const size_t c = t - h->task0;
    const size_t r0 = h->rows * c / h->ntask, r1 = h->rows * (c + 1) / h->ntask;
    uint8_t *dst = s->h_stage + h->doff;
    size_t r;
    (void)worker;
    if (h->hstride == h->rowbytes) {
        memcpy(dst + r0 * h->rowbytes, h->hsrc + r0 * h->rowbytes, (r1 - r0) * h->rowbytes);
        return;
    }
    for (r = r0; r < r1; r++)
        memcpy(dst + r * h->rowbytes, h->hsrc + r * h->hstride, h->rowbytes);
}

/* Hybrid CPU stage: block sums of one block row of a piece (the C
 * reference's cedd_block_row_sums), straight into pinned memory. */
static void sums_task(void *arg, size_t t, int worker)
{
    host_stage_t *hs = (host_stage_t *)arg;
    const pgpu_slot_t *s = hs->s;
    const size_t pi = task_piece(s, (uint32_t)t);
    const pgpu_hpiece_t *h = &s->hp[pi];
    const pgpu_piece_t *p = &s->h_pieces[pi];
    const patina_image_t *im = &hs->j->imgs[h->img];
    const int r = (int)(t - h->task0);
    patina_image_t view = *im;
    cedd_geom_t part = pgpu_cedd_geometry(im->width, im->height);
    (void)worker;
    view.data = im->data + (size_t)h->bx0 * (size_t)part.sx * 3;
    part.nbx = p->nbx;
    hs->j->rows(s->h_blk + p->blk0 + (size_t)r * (size_t)p->nbx, &view, &part, h->by0 + r);
}

static patina_status copy_pixels(pgpu_slot_t *s, cudaStream_t st)
{
    pgpu_copy_run_t run = {NULL, NULL, 0, cudaMemcpyHostToDevice};
    size_t i;
    for (i = 0; i < s->npieces; i++) {
        const pgpu_hpiece_t *h = &s->hp[i];
        uint8_t *dst = s->d_in + h->doff;
        if (h->kind == PGPU_MEM_PAGEABLE) {
            PATINA_TRY(pgpu_copy_add(&run, dst, s->h_stage + h->doff, h->rowbytes * h->rows, st));
        } else if (h->kind == PGPU_MEM_PINNED) {
            if (h->hstride == h->rowbytes || h->rows == 1) {
                PATINA_TRY(pgpu_copy_add(&run, dst, h->hsrc, h->rowbytes * h->rows, st));
            } else {
                PATINA_TRY(pgpu_copy_flush(&run, st));
                PGPU_CU(cudaMemcpy2DAsync(dst, h->dpitch, h->hsrc, h->hstride, h->rowbytes, h->rows,
                                     cudaMemcpyHostToDevice, st));
            }
        }
    }
    return pgpu_copy_flush(&run, st);
}

/* Issues the planned batch of slot si: host stage, copies, kernels, output. */
static patina_status submit(job_t *j, int si)
{
    patina_gpu_t *g = j->g;
    pgpu_cedd_t *c = j->c;
    pgpu_slot_t *s = &c->slot[si];
    cudaStream_t st = (cudaStream_t)s->stream;
    host_stage_t hs = {j, s};
    /* Running histograms between batches: batch b writes ring entry b % 4
     * and batch b+1 reads it. Batch b+4 (the next writer of that entry) is
     * issued only after batch b+1 was harvested (same slot, 3 slots), so no
     * device-side ordering is needed for the ring itself. */
    double *carry_in = c->d_carry + CEDD_BINS * ((j->batch + PGPU_CARRY - 1) % PGPU_CARRY);
    double *carry_out = c->d_carry + CEDD_BINS * (j->batch % PGPU_CARRY);

    if (s->nhtasks)
        patina_pool_run(j->hybrid ? j->cpu : g->pool, s->nhtasks, j->hybrid ? sums_task : stage_task, &hs);
    PGPU_CU(cudaMemcpyAsync(s->d_segs, s->h_segs, s->nsegs * sizeof(pgpu_seg_t), cudaMemcpyHostToDevice, st));
    if (j->hybrid) {
        PGPU_CU(cudaMemcpyAsync(s->d_blk, s->h_blk, s->blk_used * sizeof(cedd_block_t),
                           cudaMemcpyHostToDevice, st));
    } else {
        PGPU_CU(cudaMemcpyAsync(s->d_pieces, s->h_pieces, s->npieces * sizeof(pgpu_piece_t),
                           cudaMemcpyHostToDevice, st));
        PATINA_TRY(copy_pixels(s, st));
        if (c->profile) PGPU_CU(cudaEventRecord((cudaEvent_t)s->prof[0], st));
        k_block_sums<<<s->ntasks, K1_THREADS, s->smem, st>>>(s->d_pieces, (int)s->npieces, s->d_blk);
        PGPU_CU(cudaGetLastError());
        if (c->profile) PGPU_CU(cudaEventRecord((cudaEvent_t)s->prof[1], st));
    }
    if (c->profile) PGPU_CU(cudaEventRecord((cudaEvent_t)s->prof[2], st));
    k_contrib<<<(unsigned)((s->blk_used + KC_THREADS - 1) / KC_THREADS), KC_THREADS, 0, st>>>(
        s->d_segs, (int)s->nsegs, s->d_blk, s->d_con, (uint64_t)s->blk_used, j->compact);
    PGPU_CU(cudaGetLastError());
    if (c->profile) PGPU_CU(cudaEventRecord((cudaEvent_t)s->prof[3], st));
    /* An image continued from the previous batch: its bins carry on from
     * that batch's kernel 3, so wait for it (only then). */
    if (j->prev >= 0 && !s->h_segs[0].first)
        PGPU_CU(cudaStreamWaitEvent(st, (cudaEvent_t)c->slot[j->prev].k2_done, 0));
    if (c->profile) PGPU_CU(cudaEventRecord((cudaEvent_t)s->prof[4], st));
    k_accumulate<<<(unsigned)s->nsegs, K2_THREADS, 0, st>>>(s->d_segs, s->d_con, carry_in, carry_out,
                                                            s->d_out, j->compact);
    PGPU_CU(cudaGetLastError());
    PGPU_CU(cudaEventRecord((cudaEvent_t)s->k2_done, st));
    if (c->profile) PGPU_CU(cudaEventRecord((cudaEvent_t)s->prof[5], st));
    s->profiled = c->profile;
    if (s->nout)
        PGPU_CU(cudaMemcpyAsync(s->h_out, s->d_out, s->nout * CEDD_BINS, cudaMemcpyDeviceToHost, st));
    PGPU_CU(cudaEventRecord((cudaEvent_t)s->done, st));
    s->busy = 1;
    j->prev = si;
    j->batch++;
    return PATINA_OK;
}

/* Waits for slot si's batch and hands its descriptors to the caller. */
static patina_status harvest(job_t *j, int si)
{
    pgpu_slot_t *s = &j->c->slot[si];
    size_t r;
    if (!s->busy) return PATINA_OK;
    s->busy = 0;
    PGPU_CU(cudaEventSynchronize((cudaEvent_t)s->done));
    if (s->profiled) {
        float a = 0.0f, b = 0.0f, c = 0.0f;
        if (!j->hybrid) PGPU_CU(cudaEventElapsedTime(&a, (cudaEvent_t)s->prof[0], (cudaEvent_t)s->prof[1]));
        PGPU_CU(cudaEventElapsedTime(&b, (cudaEvent_t)s->prof[2], (cudaEvent_t)s->prof[3]));
        PGPU_CU(cudaEventElapsedTime(&c, (cudaEvent_t)s->prof[4], (cudaEvent_t)s->prof[5]));
        j->c->prof_ms[0] += a;
        j->c->prof_ms[1] += b;
        j->c->prof_ms[2] += c;
        j->c->prof_batches++;
    }
    for (r = 0; r < s->nout; r++) {
        const size_t i = s->out_img[r];
        memcpy(j->out + i * CEDD_BINS, s->h_out + r * CEDD_BINS, CEDD_BINS);
        j->done[i] = 1;
        if (j->st) j->st[i] = PATINA_OK;
    }
    return PATINA_OK;
}

static patina_status run(job_t *j)
{
    patina_gpu_t *g = j->g;
    pgpu_cedd_t *c;
    patina_status s = PATINA_OK, s2;
    size_t i;
    int k;

    PGPU_CU(cudaSetDevice(g->device));
    PATINA_TRY(cedd_state(g, &c));
    j->c = c;
    j->kind = (unsigned char *)calloc(j->n, 2);
    if (!j->kind) return patina__fail(PATINA_E_NOMEM, "gpu: out of host memory");
    j->done = j->kind + j->n;
    j->prev = -1;
    {
        const double t0 = c->profile ? patina_now() : 0.0;
        for (i = 0; i < j->n; i++) classify(j, i);
        if (c->profile) c->prof_ms[3] += (patina_now() - t0) * 1e3;
    }

    while (s == PATINA_OK && j->img < j->n) {
        const int si = (int)(j->batch % PGPU_SLOTS);
        s = harvest(j, si);
        if (s != PATINA_OK) break;
        fill(j, &c->slot[si]);
        if (c->slot[si].nsegs == 0) break;
        s = submit(j, si);
    }
    for (k = 0; k < PGPU_SLOTS; k++) { /* oldest first */
        s2 = harvest(j, (int)((j->batch + (uint64_t)k) % PGPU_SLOTS));
        if (s == PATINA_OK) s = s2;
    }
    if (s != PATINA_OK) {
        /* Nothing may still read the caller's memory when we return. */
        for (k = 0; k < PGPU_SLOTS; k++) {
            cudaStreamSynchronize((cudaStream_t)c->slot[k].stream);
            c->slot[k].busy = 0;
        }
        (void)cudaGetLastError();
        for (i = 0; i < j->n; i++)
            if (!j->done[i]) {
                memset(j->out + i * CEDD_BINS, 0, CEDD_BINS);
                if (j->st) j->st[i] = s;
            }
    }
    free(j->kind);
    return s;
}

/* Both entry points: the same job, with or without the CPU block-sum stage. */
static patina_status start(patina_gpu_t *g, uint8_t *out, const patina_image_t *imgs, size_t n,
                           int compact, patina_status *st, patina_pool_t *pool, pgpu_cedd_rows_fn rows)
{
    job_t j;
    const int hybrid = rows != NULL;
    if (!g || (n && (!out || !imgs)) || (hybrid && !pool))
        return patina__fail(PATINA_E_INVALID, "gpu cedd%s: null argument", hybrid ? " hybrid" : "");
    if (n == 0) return PATINA_OK;
    memset(&j, 0, sizeof j);
    j.g = g;
    j.out = out;
    j.imgs = imgs;
    j.n = n;
    j.compact = compact != 0;
    j.st = st;
    j.hybrid = hybrid;
    j.cpu = pool;
    j.rows = rows;
    return run(&j);
}

patina_status patina_gpu_cedd(patina_gpu_t *g, uint8_t *out, const patina_image_t *imgs, size_t n,
                              int compact, patina_status *st)
{
    return start(g, out, imgs, n, compact, st, NULL, NULL);
}

patina_status patina_gpu_cedd_hybrid(patina_gpu_t *g, patina_pool_t *pool, pgpu_cedd_rows_fn rows,
                                     uint8_t *out, const patina_image_t *imgs, size_t n, int compact,
                                     patina_status *st)
{
    return start(g, out, imgs, n, compact, st, pool, rows);
}
