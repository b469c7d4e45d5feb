/* The tensor-core filter's scan (MODE 1 of k_ix_scan, knn_ix.cuh) on
 * Hopper's asynchronous tensor cores (wgmma, sm_90a): the same candidates,
 * from the same limbs, keys and bounds (knn_ix_key.cuh), for a batch of
 * queries over the rows of a filter copy. Compiled only in
 * src/gpu/knn_wg.cu; src/gpu/knn.cu decides when it runs.
 *
 * Why: the mma.sync scan spends its time around the MMAs, not in them
 * (docs/lab/search.md, 2026-12-01: tensor pipe 27-43% active, 113-128
 * registers and ~100 KB of shared memory a block, two blocks an SM, 8
 * cycles between a warp's instructions): each warp loads every row's B
 * fragments from shared memory for its 16 queries, and its epilogue waits
 * on its own MMAs. Here the rows go from global memory to shared memory by
 * the tensor memory accelerator, the tensor cores read them there without
 * a register in between, and two consumer warpgroups take turns: one's
 * epilogue runs while the other's MMAs do.
 *
 * Layout of one block (384 threads, one block an SM):
 *   warpgroup 0: the loader. One thread streams the block's rows in chunks
 *     of IXW_N (64) rows through IXW_ST stages: per chunk the 2 DP bytes of
 *     each row as 128-byte slabs (tensor copies in the 128-byte swizzle
 *     that wgmma's descriptors name) and the chunk's 64 row infos (a bulk
 *     copy), all completing on the stage's "full" mbarrier.
 *   warpgroups 1 and 2: the consumers, 64 queries each (the block's 128).
 *     A consumer holds its queries' limbs [Q1 | Q2] as wgmma A fragments in
 *     registers for the whole block (64 registers at 256 elements) and per
 *     chunk runs the three products -- hi = Q1.R1, mid = Q1.R2 + Q2.R1,
 *     lo = Q2.R2, one wgmma m64n32k32 s8 per k-step, product and half
 *     chunk -- as two commit groups, rows 0-31 and 32-63, into two sets of
 *     three 64 x 32 s32 accumulators: the epilogue of the first half runs
 *     while the tensor cores work on the second. The epilogue forms every
 *     pair's key and bound without a branch (a bit a pair that passes),
 *     then puts the few passing rows into the block's list of their query
 *     in shared memory, which goes to the global list in one atomic a
 *     query when the block is done. (The next chunk's first half is not
 *     issued under the second half's epilogue: with accumulators read
 *     across the loop's turn, ptxas serialises every wgmma.)
 *
 * Measured (one H200, bench_knn --ix-kernel mma|wgmma, 1M rows, k = 10;
 * docs/lab/search.md 2026-12-01, late): 256-D hellinger, 4096 queries,
 * 21.5 -> 14.8 ms; 256 queries 1.61 -> 1.19 ms; glcm (40 elements) 8.8 ->
 * 8.4 ms. The epilogue, not the tensor cores, sets the pace: two consumer
 * warps a scheduler (the A fragments and accumulators take 232 registers).
 *
 * Exactness: the three sums are exact integers whatever order the tensor
 * cores add in; the key and the bound are the same float operations as
 * k_ix_scan's (knn_ix_key.cuh), and k_ix_scan's extra first test (the
 * query's cut against the table's largest row terms) passes every pair
 * the second passes, so the candidate set is the same (the order in a
 * query's list may differ: the final pass does not depend on it). */
#ifndef PATINA_GPU_KNN_IXW_CUH
#define PATINA_GPU_KNN_IXW_CUH

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "gpu/knn_ix_key.cuh"
#include "gpu/knn_layout.cuh"
#include "gpu/wgmma.cuh"

#define IXW_N 64          /* rows per chunk (two wgmma N of 32) */
#define IXW_Q 128         /* queries per block: two consumer warpgroups of 64 */
#define IXW_THREADS 384   /* the loader's warpgroup and two consumers */
#define IXW_SLAB (IXW_N * 128) /* bytes of one 128-byte slab of a chunk */
#define IXW_SLOTS 48      /* candidates of a query a block keeps in shared memory (more go to global memory at once) */

/* Stages of a chunk of rows of nk32 k-steps a limb: the shared memory a
 * block may take (about 200 KB) over a stage's bytes, at most 8. */
__host__ __device__ constexpr int ixw_stages(int nk32) { return nk32 >= 8 ? 6 : 8; }

/* Dynamic shared memory of a block: 1024 bytes of alignment slack, the
 * stages (slabs and row infos), the full and empty barriers, the block's
 * candidate lists (a count and IXW_SLOTS rows a query). */
__host__ __device__ static inline size_t ixw_smem_bytes(int nk32)
{
    const size_t st = (size_t)ixw_stages(nk32);
    return 1024 + st * ((size_t)nk32 / 2 * IXW_SLAB + IXW_N * sizeof(ix_info_t)) + 16 * st +
           4 * (size_t)IXW_Q * (1 + IXW_SLOTS);
}

/* d (+)= A B: A 64 x 32 s8 in registers (a[4]: this thread's share, the
 * m16n8k32 fragment of its warp's 16 rows), B 32 x 32 s8 (K-major, shared
 * memory, descriptor db), d 64 x 32 s32 in the warpgroup's registers;
 * ACC 0: d = A B. */
template <int ACC>
__device__ __forceinline__ void ixw_mma(int32_t (&d)[16], const uint32_t (&a)[4], uint64_t db)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k32.s32.s8.s8 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
                 "{%16, %17, %18, %19}, %20, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]),
                   "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]),
                   "+r"(d[14]), "+r"(d[15])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(ACC)
                 : "memory");
}

/* The tensor map of a copy's limbs for the loader: a 2-D u8 tensor of
 * rows x 2 DP bytes, boxes of 128 bytes x IXW_N rows in the 128-byte
 * swizzle. 1 when *map is made, 0 when not (no encoder in this driver, an
 * unaligned base, or too many rows). Host code. */
static inline int ixw_tensor_map(CUtensorMap *map, const int8_t *rows, size_t nrows, int nk32)
{
    return wg_tensor_map_2d(map, rows, (uint64_t)nk32 * 64, nrows, IXW_N);
}

/* grid (ceil(nq / IXW_Q), ceil(n / rpb)), IXW_THREADS threads,
 * ixw_smem_bytes(NK32): block (x, y) filters queries [128 x, 128 x + 128)
 * against rows [y rpb, min(n, (y + 1) rpb)) (rpb a multiple of IXW_N), as
 * k_ix_scan's MODE 1: rows with key <= thr[q] + M go to the query's list.
 * tmap: ixw_tensor_map of the rows; info, qbytes, qinfo, thr, cnt,
 * cand: k_ix_scan's. Blocks of the same rows are neighbours in launch
 * order, so a chunk is read from DRAM once and from L2 by the others. */
template <int D, int NK32>
__global__ void __launch_bounds__(IXW_THREADS, 1)
    k_ixw_scan(const __grid_constant__ CUtensorMap tmap, const ix_info_t *__restrict__ info, uint32_t n,
               uint32_t rpb, const int8_t *__restrict__ qbytes, const ix_info_t *__restrict__ qinfo,
               const float *__restrict__ thr, int nq, uint32_t *__restrict__ cnt, uint32_t *__restrict__ cand)
{
    static_assert(NK32 % 2 == 0 && NK32 <= 8, "limbs of whole 128-byte slabs pairs");
    constexpr int DP = NK32 * 32, RB = 2 * DP, NS = RB / 128, KS = 2 * NK32; /* slabs, k-steps a row */
    constexpr int ST = ixw_stages(NK32), STB = NS * IXW_SLAB;
    extern __shared__ __align__(1024) unsigned char ixw_sm_raw[];
    unsigned char *sm = ixw_sm_raw + ((1024u - (smem_u32(ixw_sm_raw) & 1023u)) & 1023u);
    unsigned char *stage = sm;                                      /* (ST, NS, IXW_N, 128) swizzled */
    ix_info_t *sinfo = (ix_info_t *)(stage + (size_t)ST * STB);     /* (ST, IXW_N) */
    uint64_t *full = (uint64_t *)(sinfo + ST * IXW_N), *empty = full + ST;
    uint32_t *lcnt = (uint32_t *)(empty + ST); /* (IXW_Q) the block's candidates of each query */
    uint32_t *lcand = lcnt + IXW_Q;           /* (IXW_Q, IXW_SLOTS) their rows */
    const int tid = threadIdx.x, wg = tid >> 7;
    const uint32_t r0 = blockIdx.y * rpb;
    const uint32_t r1 = min(n, r0 + rpb);

    if (r0 >= r1) return; /* uniform over the block */
    const uint32_t nch = (r1 - r0 + IXW_N - 1) / IXW_N;
    for (int l = tid; l < IXW_Q; l += IXW_THREADS) lcnt[l] = 0;
    if (tid == 0) {
        for (int i = 0; i < ST; i++) {
            mbar_init(&full[i], 1);    /* the loader's thread, then the copies' bytes */
            mbar_init(&empty[i], 256); /* the consumers' threads */
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        regs_dec<40>(); /* the consumers take them */
        if (tid == 0) {
            tma_prefetch(&tmap);
            int st = 0;
            uint32_t ph = 0;
            for (uint32_t i = 0; i < nch; i++) {
                const uint32_t row = r0 + i * IXW_N;
                mbar_wait(&empty[st], ph ^ 1u); /* a fresh barrier: parity 1 passes */
                mbar_arrive_tx(&full[st], STB + IXW_N * (uint32_t)sizeof(ix_info_t));
#pragma unroll
                for (int j = 0; j < NS; j++)
                    tma_load_2d(stage + (size_t)st * STB + j * IXW_SLAB, &tmap, j * 128, (int)row, &full[st]);
                bulk_load(sinfo + st * IXW_N, info + row, IXW_N * (uint32_t)sizeof(ix_info_t), &full[st]);
                if (++st == ST) {
                    st = 0;
                    ph ^= 1u;
                }
            }
        }
        return;
    }

    regs_inc<232>();
    /* ---------------- consumers */
    const int ct = tid & 127, w = ct >> 5, lane = tid & 31, g4 = lane >> 2, t4 = lane & 3;
    const int q0 = (int)blockIdx.x * IXW_Q + (wg - 1) * 64 + w * 16 + g4, q1 = q0 + 8;
    const int ql0 = (wg - 1) * 64 + w * 16 + g4; /* q0 in the block (q1: ql0 + 8) */
    uint32_t a[KS][4];
#pragma unroll
    for (int ks = 0; ks < KS; ks++) tc_frag_a(a[ks], qbytes, RB, q0, q1, nq, ks * 32 + t4 * 4);
    float3 qk[2], qb[2]; /* the queries' terms of the key and of the bound */
    float qt[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int q = h ? q1 : q0;
        const ix_info_t qi = q < nq ? qinfo[q] : make_float4(0.f, 0.f, 0.f, 0.f);
        qk[h] = ix_kq<D>(qi);
        qb[h] = ix_qterms<D>(qi);
        qt[h] = q < nq ? thr[q] : -INFINITY; /* past the batch: no pair passes */
    }
    const uint32_t sbase = smem_u32(stage);
    /* k-step ks of rows [32 hf, 32 hf + 32) of the chunk in stage st: slab
     * ks / 4, 32 bytes a k-step in it, 4096 bytes (four 8-row atoms) a half */
    auto desc = [&](int st, int hf, int ks) {
        return wg_desc(sbase + (uint32_t)(st * STB + (ks >> 2) * IXW_SLAB + hf * 4096 + (ks & 3) * 32));
    };
    /* the three products of one half chunk, one commit group */
    auto issue = [&](int32_t(&hi)[16], int32_t(&mid)[16], int32_t(&lo)[16], int st, int hf) {
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < NK32; ks++) {
            if (ks == 0) {
                ixw_mma<0>(hi, a[ks], desc(st, hf, ks));
                ixw_mma<0>(mid, a[ks], desc(st, hf, NK32 + ks));
                ixw_mma<0>(lo, a[NK32 + ks], desc(st, hf, NK32 + ks));
            } else {
                ixw_mma<1>(hi, a[ks], desc(st, hf, ks));
                ixw_mma<1>(mid, a[ks], desc(st, hf, NK32 + ks));
                ixw_mma<1>(lo, a[NK32 + ks], desc(st, hf, NK32 + ks));
            }
            ixw_mma<1>(mid, a[NK32 + ks], desc(st, hf, ks));
        }
        wg_commit();
    };
    /* The epilogue of one half chunk: acc[4j + e]: query q0 (e < 2) or q1,
     * row 32 hf + 8 j + 2 t4 + (e & 1) of the chunk. Every pair's key and
     * its own bound, without a branch (the 16 pairs interleave), a bit for
     * each pair that passes; then the few set bits, each a place in the
     * block's list of its query (shared memory; past its room, straight to
     * the global list). k_ix_scan tests the query's cut (the table's
     * largest row terms) first and the pair's bound only where that
     * passes; the pair's bound alone gives the same set. */
    auto epilogue = [&](const int32_t(&hi)[16], const int32_t(&mid)[16], const int32_t(&lo)[16], int st, int hf,
                        uint32_t base, uint32_t lim) {
        const ix_info_t *si = sinfo + st * IXW_N + 32 * hf;
        uint32_t pass = 0;
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e1 = 0; e1 < 2; e1++) {
                const uint32_t c = 8 * j + 2 * t4 + e1;
                const ix_info_t ri = si[c];
                const float3 rk = ix_kr<D>(ri), rb = ix_rterms<D>(ri);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int e = 4 * j + 2 * h + e1;
                    const float key = ix_key_of<D>(ix_comb(hi[e], mid[e], lo[e]), qk[h], rk);
                    pass |= 32 * hf + c < lim && key <= __fadd_ru(qt[h], ix_bound_of<D>(qb[h], rb)) ? 1u << e : 0u;
                }
            }
        while (pass) {
            const int e = __ffs(pass) - 1, h = (e >> 1) & 1;
            pass &= pass - 1u;
            const uint32_t r = base + 32 * hf + 8 * (e >> 2) + 2 * t4 + (e & 1);
            const uint32_t p = atomicAdd(&lcnt[ql0 + 8 * h], 1u);
            if (p < IXW_SLOTS) {
                lcand[(ql0 + 8 * h) * IXW_SLOTS + p] = r;
            } else {
                const int q = h ? q1 : q0;
                const uint32_t pos = atomicAdd(&cnt[q], 1u);
                if (pos < TC_CAND) cand[(size_t)q * TC_CAND + pos] = r;
            }
        }
    };
    /* Per chunk both halves' MMAs, then the first half's epilogue under the
     * second's MMAs (wait_group 1: the older group done), then the second's */
    int32_t xh[16], xm[16], xl[16], yh[16], ym[16], yl[16];
    int st = 0;
    uint32_t ph = 0;
    for (uint32_t i = 0; i < nch; i++) {
        const uint32_t base = r0 + i * IXW_N, lim = min((uint32_t)IXW_N, r1 - base);
        mbar_wait(&full[st], ph);
        issue(xh, xm, xl, st, 0);
        issue(yh, ym, yl, st, 1);
        wg_wait<1>();
        wg_pin(xh);
        wg_pin(xm);
        wg_pin(xl);
        epilogue(xh, xm, xl, st, 0, base, lim);
        wg_wait<0>();
        wg_pin(yh);
        wg_pin(ym);
        wg_pin(yl);
        epilogue(yh, ym, yl, st, 1, base, lim);
        mbar_arrive(&empty[st]);
        if (++st == ST) {
            st = 0;
            ph ^= 1u;
        }
    }
    /* the block's lists into the queries' global lists: one atomic a query */
    named_sync(1, 256);
    for (int l = tid - 128; l < IXW_Q; l += 256) {
        const int q = (int)blockIdx.x * IXW_Q + l;
        const uint32_t m = min(lcnt[l], (uint32_t)IXW_SLOTS);
        if (q >= nq || m == 0) continue;
        const uint32_t pos = atomicAdd(&cnt[q], m);
        for (uint32_t k = 0; k < m && pos + k < TC_CAND; k++) cand[(size_t)q * TC_CAND + pos + k] = lcand[l * IXW_SLOTS + k];
    }
}

#endif
