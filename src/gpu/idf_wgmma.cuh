/* The fused 2-NN matcher of identification on Hopper's asynchronous tensor
 * cores (wgmma, sm_90a): the same candidates as k_idf_match
 * (src/gpu/idf_kernels.cuh, int8, keys u32) bit for bit, from the same
 * launch description (idf_launch_t) and the same arena (slots of m rows x
 * 128 u8, m a multiple of 8, rows past count zero).
 *
 * What it is not: the fp16 arena, references of more than IDF_SEG rows
 * (u64 keys) and queries of more than IDFW_QMAX rows stay with k_idf_match
 * (idfw_supported says which launches this kernel takes). Compiled only in
 * src/gpu/identify_wg.cu (sm_90a); lab/identify/wgmma holds it to
 * k_idf_match list for list.
 *
 * Exactness is k_idf_match's, by the same construction: u8 x u8 -> s32
 * dots are exact integers (< 128 * 255^2 < 2^23); a (row, column) dot d is
 * the u32 key d * 512 + (1023 - column), so that "larger key" is "larger
 * dot, then lower column" (the CPU's order); per query row the largest and
 * second largest key over the reference's columns; the ratio test in the
 * same floats and doubles; the same scores and the same sorted list.
 * Maxima do not depend on the order they are taken in, so the different
 * tiling gives the same keys.
 *
 * Layout of one block (1 + NCW warpgroups; NCW = 2 or 3 consumers):
 *   warpgroup 0, warps 0-1: the loader. Streams the block's reference rows
 *     in chunks of IDFW_N rows through idfw_stages(n) stages (8 for a query
 *     of at most IDFW_SHORT_N rows, else 4), in the 128-byte swizzle that
 *     wgmma's descriptors name. With a tensor map (idfw_tensor_map, the
 *     normal case) one thread issues a tensor copy per chunk that completes
 *     on the chunk's "full" mbarrier (transaction bytes): as many copies in
 *     flight as stages are free, and no issue slots taken from the
 *     consumers. Without one, both warps copy 16-byte pieces with cp.async
 *     and publish a chunk once it landed (cp.async.wait_group, then
 *     fence.proxy.async: the tensor cores read through the async proxy).
 *   warpgroup 0, warps 2-3: the scorer. Per reference, from the consumers'
 *     per-row results (double-buffered: it scores reference s while the
 *     consumers match s + 1): the score, then the block's candidate list.
 *   warpgroups 1..NCW: the consumers. The query's rows sit in shared
 *     memory for the whole block (loaded once, swizzled); consumer c takes
 *     the query's 64-row m-tiles c, c + NCW, ...; per chunk and m-tile one
 *     wgmma m64n128k32 chain (4 k-steps, both operands from shared memory)
 *     into 64 s32 accumulators per thread, then the top-2 update of each
 *     thread's 2 rows over its 64 columns. The consumers' MMAs and
 *     epilogues interleave on the SM's tensor cores and ALUs. PAIRS: the
 *     m-tiles go in pairs, both chains issued before the first's epilogue
 *     (two accumulator sets: the consumers take 232 registers with
 *     setmaxnreg), so each consumer's own MMAs also run under its epilogue.
 *     SPLIT, a query of fewer m-tiles than consumers (the first pass's
 *     short queries, half_view_features): the consumers split the chunks
 *     instead (chunk i to consumer i mod NCW, each on every m-tile) and
 *     leave their partial top 2 per row to the scorer, which merges them
 *     (maxima: the order does not matter) and runs the ratio test.
 *
 * Ratio test and scoring per reference: after a reference's last chunk the
 * 4 lanes sharing a row merge their top 2, the row's ratio test gives its
 * result (best column + 1, or 0), the scorer counts (one2one: distinct
 * columns; raw: rows; mutual: rows whose column's best row is themselves,
 * from column maxima the consumers keep with shared-memory atomics). */
#ifndef PATINA_GPU_IDF_WGMMA_CUH
#define PATINA_GPU_IDF_WGMMA_CUH

#include <stdint.h>
#include <string.h>

#include <cuda.h> /* CUtensorMap and its enums (types only: the encoder comes from the runtime) */
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include "gpu/idf_kernels.cuh"
#include "gpu/idf_wgmma.h"
#include "gpu/ptx.cuh"
#include "gpu/wgmma.cuh"

#define IDFW_N 128       /* reference rows per chunk = the wgmma's N */
#define IDFW_NST 4       /* chunk stages of a long query (idfw_stages) */
#define IDFW_NST_SHORT 8 /* ... of a query of at most IDFW_SHORT_N rows */
#define IDFW_SHORT_N 256
#define IDFW_NCW_MAX 3   /* consumer warpgroups at most (the split mode's partial results) */
#define IDFW_SPLIT_ROWS (64 * (IDFW_NCW_MAX - 1)) /* query rows of a block in the split mode at most */
#define IDFW_THREADS(NCW) (128 * (1 + (NCW))) /* loader + scorer warpgroup, NCW consumer warpgroups */

/* ------------------------------------------------------------ primitives */

/* d (+)= A B: A 64 x 32 u8 (K-major, shared memory), B 128 x 32 u8
 * (K-major, shared memory), d 64 x 128 s32 in the warpgroup's registers;
 * scale_d 0: d = A B. */
__device__ __forceinline__ void idfw_mma(int32_t (&d)[64], uint64_t da, uint64_t db, int scale_d)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.s32.u8.u8 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "%64, %65, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]),
                   "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]),
                   "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]),
                   "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]),
                   "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]),
                   "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]),
                   "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]),
                   "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
                   "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]),
                   "+r"(d[63])
                 : "l"(da), "l"(db), "r"(scale_d)
                 : "memory");
}

/* ---------------------------------------------------------------- sizing */

/* The tensor map of a launch's reference rows for the loader's tensor
 * copies: a 2-D u8 tensor of nref x m rows of 128 bytes, boxes of IDFW_N
 * rows in the 128-byte swizzle (the layout wgmma's descriptors name; a box
 * past the last row is filled with zeros, columns the kernel masks). 1 when
 * *map is made, 0 when the launch keeps the cp.async loader (no rows, more
 * than 2^31 of them, or no encoder in this driver). Host code. */
static inline int idfw_tensor_map(CUtensorMap *map, const idf_launch_t &L)
{
    return wg_tensor_map_2d(map, L.refs, IDF_D, (uint64_t)L.nref * (uint64_t)L.m, IDFW_N);
}

/* Chunk stages of a launch of n query rows: more for short queries, whose
 * blocks are bound by the references' stream (the query's shared memory
 * leaves room); the loader keeps half of them in flight. */
__host__ __device__ static inline int idfw_stages(int n) { return n <= IDFW_SHORT_N ? IDFW_NST_SHORT : IDFW_NST; }

/* Whether this kernel takes a launch: int8 arena, u32 keys, the query's
 * rows resident. */
static inline int idfw_supported(int prec, int m, int n)
{
    return prec == IDF_PREC_INT8 && m <= IDF_SEG && n >= 1 && n <= IDFW_QMAX;
}

/* Dynamic shared memory: 1024 bytes of alignment slack, the query
 * (n rounded to 64 rows), the stages, the barriers, the list (K), the
 * column maxima (mutual: 2 x m), the per-row results (2 x n), the split
 * mode's partial top 2 (2 x IDFW_NCW_MAX x IDFW_SPLIT_ROWS), the column
 * mask (m / 32 + 1 words); pairs (L.qsplit): the companion's mask and
 * list (K, 8-aligned) too. */
static inline size_t idfw_smem_bytes(int m, int n, int K, int scoring, int pair)
{
    const int nst = idfw_stages(n);
    const size_t mw = 4 * (size_t)((m + 31) / 32 + 1);
    return 1024 + (size_t)((n + 63) & ~63) * IDF_D + (size_t)nst * IDFW_N * IDF_D + 8 * (2 * nst + 4) +
           8 * (size_t)K + (scoring == IDF_SCORE_MUTUAL ? 16 * (size_t)m : 0) + 8 * (size_t)n +
           16 * (size_t)IDFW_NCW_MAX * IDFW_SPLIT_ROWS + mw + (pair ? mw + 8 + 8 * (size_t)K : 0);
}

/* ------------------------------------------------------------------ kernel */

/* The first slot at or after s with at least 2 rows (fewer cannot pass a
 * ratio test: score 0), or r1. */
__device__ __forceinline__ uint32_t idfw_next(const idf_launch_t &L, uint32_t s, uint32_t r1)
{
    while (s < r1 && L.count[s] < 2) s++;
    return s;
}

/* Top-2 of one row's keys v[0..2J) of one tile into (b, s), in 4
 * independent chains merged at the end (instruction-level parallelism).
 * The tile's keys leave out off, this thread's first column in the
 * reference (the same for all of them, so their order is the same): it is
 * taken off the tile's two best only, and a key 0 (no column) stays 0
 * (a key of a column is at least 1023 - 127 > off). */
template <int J>
__device__ __forceinline__ void idfw_top2(uint32_t &b, uint32_t &s, const uint32_t (&v)[2 * J], uint32_t off)
{
    uint32_t cb[4] = {0u, 0u, 0u, 0u}, cs[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int j = 0; j < J; j++) top2_add2<uint32_t>(cb[j & 3], cs[j & 3], v[2 * j], v[2 * j + 1]);
    top2_merge<uint32_t>(cb[0], cs[0], cb[1], cs[1]);
    top2_merge<uint32_t>(cb[2], cs[2], cb[3], cs[3]);
    top2_merge<uint32_t>(cb[0], cs[0], cb[2], cs[2]);
    top2_merge<uint32_t>(b, s, max(cb[0], off) - off, max(cs[0], off) - off);
}

/* A query row's result from its best and second keys over the reference's
 * columns: best column + 1 if Lowe's test passes, else 0 --
 * idf_ratio_pass on the float similarities dot * 2^-18 (exact). */
__device__ __forceinline__ int idfw_ratio(const idf_launch_t &L, uint32_t b, uint32_t s)
{
    const uint32_t d1 = b >> 9, d2 = s >> 9; /* dot + 1; 0: none */
    if (!d1 || !d2) return 0;
    const float f1 = (float)(d1 - 1u) * L.inv_scale2, f2 = (float)(d2 - 1u) * L.inv_scale2;
    double e1 = __dsub_rn(2.0, 2.0 * (double)f1), e2 = __dsub_rn(2.0, 2.0 * (double)f2);
    if (e1 < 0) e1 = 0;
    if (e2 < 0) e2 = 0;
    return e1 < __dmul_rn(L.rr, e2) ? (int)(511u - (b & 511u)) + 1 : 0;
}

/* grid (gx, nq), IDFW_THREADS(NCW) threads, idfw_smem_bytes of dynamic shared
 * memory: block x of query y takes slots [x * per, (x+1) * per) of the
 * launch, per = ceil(nref / gx) -- k_idf_match's partition, so that the
 * per-block lists are the same too. L.npass is ignored (one pass:
 * n <= IDFW_QMAX). MUTUAL: L.scoring is IDF_SCORE_MUTUAL. NCW: consumer
 * warpgroups (registers: 168 a thread with 2, 128 with 3). SPLIT: a block
 * whose query has fewer 64-row m-tiles than NCW splits the references'
 * chunks among the consumers instead (chunk i to consumer i mod NCW, every
 * consumer on every m-tile); their partial top 2 per row meet in shared
 * memory, where the scorer merges them and runs the ratio test. Without it
 * a 64-row query would keep one consumer busy and the others idle. */
template <bool MUTUAL, int NCW, bool PAIRS, bool SPLIT>
__global__ void __launch_bounds__(IDFW_THREADS(NCW), 1)
    k_idf_match_wg(const idf_launch_t L, const __grid_constant__ CUtensorMap tmap, const int tma)
{
    static_assert(!PAIRS || NCW == 2, "PAIRS: 40 + 2 x 232 registers a thread, 384 threads (and MTW even)");
    static_assert(NCW <= IDFW_NCW_MAX, "the split mode's partial results hold IDFW_NCW_MAX consumers");
    /* the consumers at 232 registers (two accumulator sets; the column maxima) */
    constexpr bool BIGREGS = NCW == 2 && (PAIRS || MUTUAL);
    constexpr int NT = IDFW_THREADS(NCW), NC = 128 * NCW; /* threads: all, consumers */
    constexpr int MTW = (IDFW_QMAX / 64 + NCW - 1) / NCW;  /* m-tiles per consumer at most */
    extern __shared__ __align__(1024) unsigned char idfw_sm_raw[];
    __shared__ int s_part[4]; /* the scorer's two warps' counts: the query's, the companion's */
    unsigned char *sm = idfw_sm_raw + ((1024u - (smem_u32(idfw_sm_raw) & 1023u)) & 1023u);
    const int QR = (L.n + 63) & ~63;
    const int nst = idfw_stages(L.n), lgst = nst == 8 ? 3 : 2; /* a power of two */
    unsigned char *qsm = sm;                                    /* (QR, 128) u8, swizzled */
    unsigned char *stage = qsm + (size_t)QR * IDF_D;            /* nst x (N, 128) u8, swizzled */
    uint64_t *bar = (uint64_t *)(stage + nst * IDFW_N * IDF_D); /* full, empty (nst each), rfull, rempty (2) */
    uint64_t *full = bar, *empty = bar + nst, *rfull = bar + 2 * nst, *rempty = bar + 2 * nst + 2;
    uint64_t *list = bar + 2 * nst + 4;                         /* (K) */
    constexpr bool mutual = MUTUAL; /* L.scoring == IDF_SCORE_MUTUAL (its own instance: the column
                                    * maxima cost registers the other rules do not need) */
    unsigned long long *colbest = (unsigned long long *)(list + L.K); /* (2, m) mutual only */
    int32_t *rowres = (int32_t *)(colbest + (mutual ? 2 * L.m : 0)); /* (2, n) */
    uint2 *part = (uint2 *)(rowres + 2 * L.n);                        /* (2, NCW_MAX, SPLIT_ROWS) split */
    uint32_t *mask = (uint32_t *)(part + 2 * IDFW_NCW_MAX * IDFW_SPLIT_ROWS); /* (m / 32 + 1) */
    const int mwords = (L.m + 31) / 32 + 1;
    uint32_t *mask2 = mask + mwords;                                               /* pairs: (m / 32 + 1) */
    uint64_t *list2 = (uint64_t *)(((uintptr_t)(mask2 + mwords) + 7) & ~(uintptr_t)7); /* pairs: (K) */

    const int tid = threadIdx.x, wg = tid >> 7;
    const int q = blockIdx.y;
    const int qn = min((int)L.qcount[q], L.n);
    const bool pair = L.qsplit != NULL; /* rows [qa, qn) are the companion's */
    const int qa = pair ? min((int)L.qsplit[q], qn) : qn;
    const int nmt = (qn + 63) >> 6; /* m-tiles with valid rows */
    const bool split = SPLIT && nmt < NCW; /* uniform over the block */
    const uint32_t per = (L.nref + gridDim.x - 1) / gridDim.x;
    const uint32_t r0 = min(L.nref, blockIdx.x * per), r1 = min(L.nref, r0 + per);
    const unsigned char *qbase = (const unsigned char *)L.queries + (size_t)q * L.n * IDF_D;
    const unsigned char *rbase = (const unsigned char *)L.refs;
    const size_t slot_bytes = (size_t)L.m * IDF_D;
    uint64_t *lout = L.out + ((size_t)q * gridDim.x + blockIdx.x) * (size_t)L.K;
    uint64_t *lout2 = pair ? L.out2 + ((size_t)q * gridDim.x + blockIdx.x) * (size_t)L.K : NULL;

    if (qn == 0) { /* no row: every score is 0, the lists stay as they were */
        if (!L.accumulate)
            for (int i = tid; i < L.K; i += NT) {
                lout[i] = 0;
                if (pair) lout2[i] = 0;
            }
        return;
    }
    for (int i = tid; i < L.K; i += NT) {
        list[i] = L.accumulate ? lout[i] : 0;
        if (pair) list2[i] = L.accumulate ? lout2[i] : 0;
    }
    for (int i = tid; i < mwords; i += NT) {
        mask[i] = 0;
        if (pair) mask2[i] = 0;
    }
    if (mutual)
        for (int i = tid; i < 2 * L.m; i += NT) colbest[i] = 0;
    if (tid == 0) {
        for (int i = 0; i < nst; i++) {
            mbar_init(&full[i], tma ? 1 : 64);      /* the loader's thread(s) */
            mbar_init(&empty[i], split ? 128 : NC); /* the threads of the consumer(s) of its chunks */
        }
        for (int i = 0; i < 2; i++) {
            mbar_init(&rfull[i], NC); /* the consumers' threads */
            mbar_init(&rempty[i], 64); /* the scorer's threads */
        }
    }
    /* the query's valid rows, by everyone (rows past qn are never used) */
    for (int u = tid; u < qn * 8; u += NT)
        cp_async16(qsm + swz<IDF_D>(u >> 3, u & 7), qbase + (size_t)u * 16);
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();

    if (wg == 0) {
        if (BIGREGS) regs_dec<40>(); /* the consumers take them */
        if (tid < 64 && tma) {
            /* ---------------- loader, tensor copies: one thread, a copy per
             * chunk, as many in flight as stages are free */
            if (tid == 0) {
                tma_prefetch(&tmap);
                uint32_t i = 0;
                for (uint32_t s = idfw_next(L, r0, r1); s < r1; s = idfw_next(L, s + 1, r1)) {
                    const int cnt = L.count[s];
                    for (int c0 = 0; c0 < cnt; c0 += IDFW_N, i++) {
                        const int st = (int)(i & (uint32_t)(nst - 1));
                        mbar_wait(&empty[st], ((i >> lgst) & 1u) ^ 1u);
                        mbar_arrive_tx(&full[st], IDFW_N * IDF_D);
                        tma_load_2d(stage + st * IDFW_N * IDF_D, &tmap, 0, (int)(s * (uint32_t)L.m + (uint32_t)c0),
                                    &full[st]);
                    }
                }
            }
        } else if (tid < 64) {
            /* ---------------- loader, cp.async: chunks of the block's slots, in
             * order; nst / 2 in flight before the oldest is published */
            const uint32_t la = (uint32_t)nst / 2;
            uint32_t i = 0;
            for (uint32_t s = idfw_next(L, r0, r1); s < r1; s = idfw_next(L, s + 1, r1)) {
                const int cnt = L.count[s];
                const unsigned char *src0 = rbase + (size_t)s * slot_bytes;
                for (int c0 = 0; c0 < cnt; c0 += IDFW_N, i++) {
                    const int st = (int)(i & (uint32_t)(nst - 1));
                    mbar_wait(&empty[st], ((i >> lgst) & 1u) ^ 1u);
                    /* whole 8-row groups (slots are padded to 8 rows with zeros);
                     * rows past them keep stale values, masked as columns >= count */
                    const int rows = min(IDFW_N, cnt - c0), units = ((rows + 7) & ~7) * 8;
                    unsigned char *dst = stage + st * IDFW_N * IDF_D;
                    const unsigned char *src = src0 + (size_t)c0 * IDF_D;
                    for (int u = tid; u < units; u += 64)
                        cp_async16(dst + swz<IDF_D>(u >> 3, u & 7), src + (size_t)u * 16);
                    cp_async_commit();
                    if (i >= la) { /* chunk i - la landed: publish it */
                        if (nst == IDFW_NST_SHORT)
                            cp_async_wait<IDFW_NST_SHORT / 2>();
                        else
                            cp_async_wait<IDFW_NST / 2>();
                        fence_proxy_async();
                        mbar_arrive(&full[(i - la) & (uint32_t)(nst - 1)]);
                    }
                }
            }
            cp_async_wait<0>();
            fence_proxy_async();
            for (uint32_t j = i >= la ? i - la : 0; j < i; j++) mbar_arrive(&full[j & (uint32_t)(nst - 1)]);
        } else {
            /* ---------------- scorer: each slot's score, the block's list */
            const int t = tid - 64, lane = tid & 31, sw = t >> 5;
            uint32_t k = 0;
            for (uint32_t s = idfw_next(L, r0, r1); s < r1; s = idfw_next(L, s + 1, r1), k++) {
                const int cnt = L.count[s], p = (int)(k & 1);
                const int32_t *rr = rowres + p * L.n;
                const uint2 *pp = part + p * IDFW_NCW_MAX * IDFW_SPLIT_ROWS;
                unsigned long long *cbp = colbest + (mutual ? p * L.m : 0);
                mbar_wait(&rfull[p], (k >> 1) & 1u);
                int c = 0, c2 = 0; /* the query's rows [0, qa), the companion's [qa, qn) */
                for (int r = t; r < qn; r += 64) {
                    int res;
                    if (split) { /* the consumers' partial top 2, then the ratio test */
                        uint32_t b = pp[r].x, s2 = pp[r].y;
#pragma unroll
                        for (int cw = 1; cw < NCW; cw++)
                            top2_merge<uint32_t>(b, s2, pp[cw * IDFW_SPLIT_ROWS + r].x, pp[cw * IDFW_SPLIT_ROWS + r].y);
                        res = idfw_ratio(L, b, s2);
                    } else {
                        res = rr[r];
                    }
                    const bool second = r >= qa; /* uniform per row; pairs only */
                    if (L.scoring == IDF_SCORE_RAW) {
                        if (second) c2 += res > 0;
                        else c += res > 0;
                        continue;
                    }
                    const int cc = res - 1;
                    if (cc < 0) continue;
                    if (mutual && (uint32_t)(cbp[cc] & 0xffffffffull) != 0xffffffffu - (uint32_t)r) continue;
                    atomicOr(&(second ? mask2 : mask)[cc >> 5], 1u << (cc & 31));
                }
                named_sync(1, 64);
                if (L.scoring != IDF_SCORE_RAW)
                    for (int i = t; i < (cnt + 31) / 32; i += 64) {
                        c += __popc(mask[i]);
                        mask[i] = 0;
                        if (pair) {
                            c2 += __popc(mask2[i]);
                            mask2[i] = 0;
                        }
                    }
                if (mutual)
                    for (int i = t; i < cnt; i += 64) cbp[i] = 0;
                c = __reduce_add_sync(0xffffffffu, c);
                if (pair) c2 = __reduce_add_sync(0xffffffffu, c2);
                if (lane == 0) {
                    s_part[sw] = c;
                    s_part[2 + sw] = c2;
                }
                named_sync(1, 64);
                const int score = s_part[0] + s_part[1], score2 = s_part[2] + s_part[3];
                mbar_arrive(&rempty[p]); /* rowres[p], part[p], colbest[p] free again */
                const uint64_t low = 0xffffffffu - (L.slot0 + s);
                if (t == 0 && score > 0) idf_list_insert(list, L.K, ((uint64_t)score << 32) | low);
                if (pair && t == 32 && score2 > 0) idf_list_insert(list2, L.K, ((uint64_t)score2 << 32) | low);
            }
            named_sync(1, 64);
            for (int i = t; i < L.K; i += 64) {
                lout[i] = list[i];
                if (pair) lout2[i] = list2[i];
            }
        }
    } else {
        if (BIGREGS) regs_inc<232>();
        /* ---------------- consumers */
        const int cw = wg - 1, ct = tid & 127, w = ct >> 5, lane = tid & 31, g = lane >> 2, c4 = lane & 3;
        const uint32_t qaddr = smem_u32(qsm), saddr = smem_u32(stage);
        /* 512 in a register the compiler cannot see into: the keys are then
         * IMAD (the FMA pipe, a constant addend) rather than LEA on the
         * integer pipe that the top 2 already keeps busy */
        const uint32_t k512 = __shfl_sync(0xffffffffu, 512u, 0);
        /* m-tile slot mt of this consumer: m-tile NCW mt + cw, or in the split
         * mode m-tile mt (every consumer on every m-tile) */
        auto mtile_of = [&](int mt) { return split ? mt : NCW * mt + cw; };
        uint32_t i = 0, k = 0;
        for (uint32_t s = idfw_next(L, r0, r1); s < r1; s = idfw_next(L, s + 1, r1), k++) {
            const int cnt = L.count[s], p = (int)(k & 1);
            unsigned long long *cbp = colbest + (mutual ? p * L.m : 0);
            mbar_wait(&rempty[p], ((k >> 1) & 1u) ^ 1u);
            uint32_t tb[MTW][2], ts[MTW][2];
#pragma unroll
            for (int mt = 0; mt < MTW; mt++) tb[mt][0] = tb[mt][1] = ts[mt][0] = ts[mt][1] = 0;
            for (int c0 = 0; c0 < cnt; c0 += IDFW_N, i++) {
                if (split && (int)(i % NCW) != cw) continue; /* another consumer's chunk */
                const int st = (int)(i & (uint32_t)(nst - 1));
                mbar_wait(&full[st], (i >> lgst) & 1u);
                const int rows = min(IDFW_N, cnt - c0);
                const uint32_t sb = saddr + st * IDFW_N * IDF_D;
                /* a key is (dot + 1) * 512 + 511 - column: made here as dot * 512
                 * + 1023 - (8j + e), a constant of the register, and the
                 * thread's first column off taken off its best two (idfw_top2) */
                const uint32_t off = (uint32_t)(c0 + 2 * c4);
                /* per m-tile: the MMAs into one accumulator set, then the epilogue */
                auto issue = [&](int32_t(&acc)[64], int mtile) {
                    const uint32_t qa = qaddr + mtile * 64 * IDF_D;
                    wg_fence();
#pragma unroll
                    for (int ks = 0; ks < 4; ks++) idfw_mma(acc, wg_desc(qa + 32 * ks), wg_desc(sb + 32 * ks), ks);
                    wg_commit();
                };
                auto epilogue = [&](int32_t(&acc)[64], uint32_t &tb0, uint32_t &ts0, uint32_t &tb1, uint32_t &ts1,
                                    int mtile) {
                    /* acc[4j + e]: row g, column 8j + 2c4 + e; acc[4j + 2 + e]: row g + 8 */
                    uint32_t v0[32], v1[32];
                    if (rows == IDFW_N) {
#pragma unroll
                        for (int j = 0; j < 16; j++)
#pragma unroll
                            for (int e = 0; e < 2; e++) {
                                const uint32_t base = 1023u - (uint32_t)(8 * j + e);
                                v0[2 * j + e] = (uint32_t)acc[4 * j + e] * k512 + base;
                                v1[2 * j + e] = (uint32_t)acc[4 * j + 2 + e] * k512 + base;
                            }
                    } else {
#pragma unroll
                        for (int j = 0; j < 16; j++)
#pragma unroll
                            for (int e = 0; e < 2; e++) {
                                const uint32_t base = 1023u - (uint32_t)(8 * j + e);
                                const bool ok = 8 * j + 2 * c4 + e < rows;
                                v0[2 * j + e] = ok ? (uint32_t)acc[4 * j + e] * k512 + base : 0u;
                                v1[2 * j + e] = ok ? (uint32_t)acc[4 * j + 2 + e] * k512 + base : 0u;
                            }
                    }
                    idfw_top2<16>(tb0, ts0, v0, off);
                    idfw_top2<16>(tb1, ts1, v1, off);
                    if (mutual) {
                        /* each column's best row: (dot << 32) | ~row, max over the
                         * warp's 16 rows (lanes of one c4 share the columns), then
                         * over warps and m-tiles with shared-memory atomics */
                        const int rowA = mtile * 64 + w * 16 + g, rowB = rowA + 8;
#pragma unroll
                        for (int j = 0; j < 16; j++)
#pragma unroll
                            for (int e = 0; e < 2; e++) {
                                const int col = 8 * j + 2 * c4 + e;
                                unsigned long long ka =
                                    rowA < qn ? ((unsigned long long)(uint32_t)acc[4 * j + e] << 32) |
                                                    (0xffffffffu - (uint32_t)rowA)
                                              : 0ull;
                                const unsigned long long kb =
                                    rowB < qn ? ((unsigned long long)(uint32_t)acc[4 * j + 2 + e] << 32) |
                                                    (0xffffffffu - (uint32_t)rowB)
                                              : 0ull;
                                ka = ka > kb ? ka : kb;
#pragma unroll
                                for (int o = 4; o < 32; o <<= 1) {
                                    const unsigned long long x = __shfl_xor_sync(0xffffffffu, ka, o);
                                    ka = ka > x ? ka : x;
                                }
                                if (g == 0 && col < rows && ka) atomicMax(&cbp[c0 + col], ka);
                            }
                    }
                };
                if (!PAIRS || split) {
#pragma unroll
                    for (int mt = 0; mt < MTW; mt++) {
                        const int mtile = mtile_of(mt);
                        if (mtile >= nmt) continue; /* uniform over the warpgroup */
                        int32_t acc[64];
                        issue(acc, mtile);
                        wg_wait<0>();
                        wg_pin(acc);
                        epilogue(acc, tb[mt][0], ts[mt][0], tb[mt][1], ts[mt][1], mtile);
                    }
                } else {
                    /* m-tiles in pairs: both chains issued, the second's MMAs
                     * run under the first's epilogue; no group crosses a
                     * branch (ptxas serialises wgmma otherwise). A pair's
                     * second m-tile past the query repeats the first's
                     * MMAs, its epilogue skipped. */
#pragma unroll
                    for (int mt = 0; mt < MTW; mt += 2) {
                        const int ma = NCW * mt + cw, mb = ma + NCW;
                        if (ma >= nmt) continue; /* uniform over the warpgroup */
                        const bool vb = mb < nmt;
                        int32_t acc0[64], acc1[64];
                        issue(acc0, ma);
                        wg_pin(acc0);
                        issue(acc1, vb ? mb : ma);
                        wg_pin(acc1);
                        wg_wait<1>();
                        wg_pin(acc0);
                        epilogue(acc0, tb[mt][0], ts[mt][0], tb[mt][1], ts[mt][1], ma);
                        wg_wait<0>();
                        wg_pin(acc1);
                        if (vb)
                            epilogue(acc1, tb[mt + 1][0], ts[mt + 1][0], tb[mt + 1][1], ts[mt + 1][1], mb);
                    }
                }
                mbar_arrive(&empty[st]);
            }
            /* the slot's rows: merge the 4 lanes of each row, then the ratio
             * test (split: the partial top 2 to the scorer, which merges the
             * consumers' and tests) */
            uint2 *pp = part + (p * IDFW_NCW_MAX + cw) * IDFW_SPLIT_ROWS;
#pragma unroll
            for (int mt = 0; mt < MTW; mt++) {
                const int mtile = mtile_of(mt);
                if (mtile >= nmt) continue;
#pragma unroll
                for (int h = 0; h < 2; h++) {
#pragma unroll
                    for (int o = 1; o < 4; o <<= 1) {
                        const uint32_t b2 = __shfl_xor_sync(0xffffffffu, tb[mt][h], o);
                        const uint32_t s2 = __shfl_xor_sync(0xffffffffu, ts[mt][h], o);
                        top2_merge<uint32_t>(tb[mt][h], ts[mt][h], b2, s2);
                    }
                    const int row = mtile * 64 + w * 16 + g + 8 * h;
                    if (c4 != h + 2 * (mt & 1) || row >= qn) continue;
                    if (split)
                        pp[row] = make_uint2(tb[mt][h], ts[mt][h]);
                    else
                        rowres[p * L.n + row] = idfw_ratio(L, tb[mt][h], ts[mt][h]);
                }
            }
            mbar_arrive(&rfull[p]);
        }
    }
}

#endif
