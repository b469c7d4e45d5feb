/* The fused 2-NN matching kernel of identification (src/gpu/identify.cu):
 * tensor-core dot products of a query's RootSIFT rows with each reference's
 * rows, the top 2 per query row reduced in registers, Lowe's ratio test,
 * the scoring rule and a per-block candidate list -- the similarity matrix
 * never leaves the registers.
 *
 * The arithmetic is exact. Rows are u8 at scale 512 (docs/rootsift.md); the
 * int8 kernel multiplies them on the integer tensor cores (mma.sync
 * m16n8k32, u8 x u8 -> s32), the fp16 kernel on the half-precision ones
 * (m16n8k16, f16 x f16 -> f32) from an arena of the same values as binary16
 * (integers 0..255, exact). Every dot is an integer below 128 * 255^2 < 2^23:
 * s32 holds it, and so does an f32 accumulator whatever order the hardware
 * adds in (every partial sum is an integer below 2^24). The CPU matchers
 * compute the same integers (idf_match_fast) or the same floats
 * (idf_match_ref: dot * 2^-18 exactly), so neighbours, ratio tests and
 * scores are the CPU's bit for bit, not approximately.
 *
 * Top 2 without branches. A (row, column) dot d becomes one key whose
 * order is "larger dot, then lower column" -- the CPU's order (ties keep
 * the lower index; a tie with the best is the second): for references of
 * at most 512 rows the u32 (d + 1) * 512 + (511 - c) (d < 2^23: it fits),
 * for larger ones the u64 (d + 1) << 32 | (2^32 - 1 - c). Per row the pair
 * (b, s) of the largest and second largest key is updated with min/max
 * only; columns past the reference's count give key 0, below every real
 * key.
 *
 * Layout of one block: W warps, each holding RPW query rows in registers
 * (the A fragments, loaded once when the query fits in one pass); the
 * reference rows stream through shared memory in chunks of CH rows
 * (cp.async, STAGES deep, 16-byte chunks swizzled so that ldmatrix reads
 * are free of bank conflicts). After a reference's last chunk, the 4 lanes
 * sharing a row merge their top 2, the ratio test runs in double exactly as
 * idf_ratio_pass does, the passing rows' nearest columns are recorded, and
 * the scoring rule counts (distinct columns: a bitmask; raw: rows; mutual:
 * rows whose column's best row is themselves). A score > 0 enters the
 * block's candidate list: the best K keys (score << 32 | ~slot), sorted. */
#ifndef PATINA_GPU_IDF_KERNELS_CUH
#define PATINA_GPU_IDF_KERNELS_CUH

#include <stdint.h>

#include "gpu/ptx.cuh"

#define IDF_D 128          /* RootSIFT dimension */
#define IDF_CH 128         /* reference rows per shared-memory chunk */
#define IDF_STAGES 3       /* chunks in flight */
#define IDF_SEG 512        /* references of at most this many rows use u32 keys */
#define IDF_MAXW 12        /* warps per block */
#define IDF_KMAX 1024      /* candidates per block list */

enum { IDF_PREC_INT8 = 0, IDF_PREC_FP16 = 1 };
enum { IDF_SCORE_ONE2ONE = 0, IDF_SCORE_RAW = 1, IDF_SCORE_MUTUAL = 2 };

/* One launch: queries against a range of reference slots. */
typedef struct idf_launch {
    const void *refs;          /* (nref, m, 128) u8 or f16, slot-major */
    const uint16_t *count;     /* (nref) valid rows per slot; 0: empty slot */
    uint32_t slot0;            /* slot number of refs[0] (for the keys) */
    uint32_t nref;             /* slots in this launch */
    int m;                     /* rows per slot */
    const void *queries;       /* (nq, n, 128) u8 or f16 */
    const uint16_t *qcount;    /* (nq) valid rows per query */
    int n;                     /* rows per query */
    int npass;                 /* ceil(max qcount / (W * RPW)) */
    int K;                     /* candidates per block list (<= IDF_KMAX) */
    int scoring;
    double rr;                 /* ratio^2 */
    float inv_scale2;          /* 2^-18: similarity = dot * this */
    uint64_t *out;             /* (nq, gridDim.x, K) keys, best first, 0 past the end */
    int accumulate;            /* 1: each block's list starts from what out holds */
    /* Pairs (the wgmma kernel only; NULL for k_idf_match): query y's rows
     * [qsplit[y], qcount[y]) are a second query's (its companion: the
     * half-size query beside its photograph), scored apart into out2 (the
     * layout of out), the rows read once for both */
    const uint16_t *qsplit;
    uint64_t *out2;
} idf_launch_t;

/* Primitives (cp.async, ldmatrix, mma): gpu/ptx.cuh. */

/* Keys: KEY_T is uint32_t (m <= 512) or unsigned long long. */
template <typename KT> struct idf_key;
template <> struct idf_key<uint32_t> {
    /* base: the key of dot 0 at column col, i.e. 1023 - col (col < 512) */
    static __device__ __forceinline__ uint32_t base(int col) { return 1023u - (uint32_t)col; }
    static __device__ __forceinline__ uint32_t make(int32_t d, uint32_t base) { return (uint32_t)d * 512u + base; }
    static __device__ __forceinline__ uint32_t dot1(uint32_t k) { return k >> 9; } /* dot + 1; 0: none */
    static __device__ __forceinline__ int col(uint32_t k) { return (int)(511u - (k & 511u)); }
};
template <> struct idf_key<unsigned long long> {
    static __device__ __forceinline__ unsigned long long base(int col)
    {
        return (1ull << 32) | (unsigned long long)(0xffffffffu - (uint32_t)col);
    }
    static __device__ __forceinline__ unsigned long long make(int32_t d, unsigned long long base)
    {
        return ((unsigned long long)(uint32_t)d << 32) + base;
    }
    static __device__ __forceinline__ uint32_t dot1(unsigned long long k) { return (uint32_t)(k >> 32); }
    static __device__ __forceinline__ int col(unsigned long long k) { return (int)(0xffffffffu - (uint32_t)k); }
};

/* Top-2 update of one row with two new keys. */
template <typename KT> __device__ __forceinline__ void top2_add2(KT &b, KT &s, KT v0, KT v1)
{
    const KT hi = v0 > v1 ? v0 : v1, lo = v0 > v1 ? v1 : v0;
    const KT t = b < hi ? b : hi;
    s = s > lo ? s : lo;
    s = s > t ? s : t;
    b = b > hi ? b : hi;
}

/* Merge of two top-2 pairs. */
template <typename KT> __device__ __forceinline__ void top2_merge(KT &b, KT &s, KT b2, KT s2)
{
    const KT t = b < b2 ? b : b2;
    s = s > s2 ? s : s2;
    s = s > t ? s : t;
    b = b > b2 ? b : b2;
}

/* Per-element type of an instance. */
template <int PREC> struct idf_prec;
template <> struct idf_prec<IDF_PREC_INT8> {
    static constexpr int RPW = 64;       /* query rows per warp */
    static constexpr int ROWB = IDF_D;   /* bytes per row */
    static constexpr int KSTEP = 32;     /* k per mma */
};
template <> struct idf_prec<IDF_PREC_FP16> {
    static constexpr int RPW = 32;
    static constexpr int ROWB = 2 * IDF_D;
    static constexpr int KSTEP = 16;
};

/* The swizzled byte offset of 16-byte chunk c of row r in a chunk buffer
 * whose rows are ROWB bytes: chunk c ^ (r & 7) within each group of 8. */
template <int ROWB> __device__ __forceinline__ uint32_t swz(int r, int c)
{
    return (uint32_t)(r * ROWB + ((c ^ (r & 7)) << 4));
}

/* Key into a descending list of K keys (the smallest at K-1): one thread;
 * rare once the list is full, so a plain insertion. */
__device__ __forceinline__ void idf_list_insert(uint64_t *list, int K, uint64_t key)
{
    if (key <= list[K - 1]) return;
    int p = K - 1;
    while (p > 0 && list[p - 1] < key) {
        list[p] = list[p - 1];
        p--;
    }
    list[p] = key;
}

/* Blocks per query (gridDim.x) for bq queries on sms SMs (one block each
 * at a time), at most maxgx: the fewest, from two waves up, whose last
 * wave is fullest -- blocks take equal slices, so a partial last wave
 * idles SMs (16 queries in 17 blocks each: 272 blocks, 3 waves of 132,
 * 69% busy; in 33 blocks: 4 full waves). */
static inline size_t idf_blocks_per_query(size_t bq, size_t sms, size_t maxgx)
{
    size_t best = 1, gx;
    double best_eff = -1;
    if (maxgx < 1) return 1;
    for (gx = 1; gx <= maxgx && gx <= 8 * sms; gx++) {
        const size_t t = bq * gx, waves = (t + sms - 1) / sms;
        const double eff = (double)t / (double)(waves * sms);
        if (waves < 2 && gx < maxgx && bq * maxgx >= 2 * sms) continue; /* two waves at least when possible */
        if (eff > best_eff + 1e-9) {
            best_eff = eff;
            best = gx;
        }
        if (eff > 0.999) break;
    }
    return best;
}

/* Dynamic shared memory of a block: the chunk stages, the list (K), the
 * column maxima (mutual: m), the per-row results (n), the column bitmask. */
static inline size_t idf_smem_bytes(int prec, int m, int n, int K, int scoring)
{
    const size_t rowb = prec == IDF_PREC_FP16 ? 2 * IDF_D : IDF_D;
    return IDF_STAGES * IDF_CH * rowb + 8 * (size_t)K + (scoring == IDF_SCORE_MUTUAL ? 8 * (size_t)m : 0) +
           4 * (size_t)n + 4 * (size_t)((m + 31) / 32);
}

/* ------------------------------------------------------------------ kernel
 *
 * grid (gx, nq): block x of query y takes slots [x * per, (x+1) * per) of
 * the launch, per = ceil(nref / gx). KT: uint32_t when m <= IDF_SEG, else
 * unsigned long long. */
template <int PREC, typename KT>
__global__ void __launch_bounds__(IDF_MAXW * 32, 1) k_idf_match(const idf_launch_t L)
{
    typedef idf_prec<PREC> P;
    typedef idf_key<KT> KP;
    constexpr int RPW = P::RPW, MT = RPW / 16, ROWB = P::ROWB, NCH = ROWB / 16;
    constexpr int KS = IDF_D / P::KSTEP; /* mma k-steps per row */
    extern __shared__ __align__(128) unsigned char sm[];
    unsigned char *stage = sm;                                                /* STAGES x CH x ROWB */
    uint64_t *list = (uint64_t *)(sm + IDF_STAGES * IDF_CH * ROWB);           /* (K) */
    unsigned long long *colbest = (unsigned long long *)(list + L.K);        /* (m) mutual only */
    int32_t *rowres = (int32_t *)(colbest + (L.scoring == IDF_SCORE_MUTUAL ? L.m : 0)); /* (n) */
    uint32_t *mask = (uint32_t *)(rowres + L.n);                              /* (m / 32) */
    __shared__ int s_raw;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nthr = blockDim.x, W = nthr >> 5;
    const int g = lane >> 2, c4 = lane & 3;
    const int q = blockIdx.y;
    const int qn = L.qcount[q];
    const uint32_t per = (L.nref + gridDim.x - 1) / gridDim.x;
    const uint32_t r0 = min(L.nref, blockIdx.x * per), r1 = min(L.nref, r0 + per);
    const int rows_pass = W * RPW;
    const unsigned char *qbase = (const unsigned char *)L.queries + (size_t)q * L.n * ROWB;
    const unsigned char *rbase = (const unsigned char *)L.refs;
    const size_t slot_bytes = (size_t)L.m * ROWB;

    uint64_t *lout = L.out + ((size_t)q * gridDim.x + blockIdx.x) * (size_t)L.K;
    for (int i = threadIdx.x; i < L.K; i += nthr) list[i] = L.accumulate ? lout[i] : 0;
    for (int i = threadIdx.x; i < (L.m + 31) / 32; i += nthr) mask[i] = 0;
    if (L.scoring == IDF_SCORE_MUTUAL)
        for (int i = threadIdx.x; i < L.m; i += nthr) colbest[i] = 0;
    if (threadIdx.x == 0) s_raw = 0;

    /* The A fragments of this warp's rows in the current pass (rows past
     * the query's count are zero). */
    uint32_t a[MT][KS][4];
    auto load_a = [&](int pass) {
        const int rb = pass * rows_pass + warp * RPW;
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const int ra = rb + mt * 16 + g, rc = ra + 8;
            const unsigned char *pa = qbase + (size_t)ra * ROWB, *pc = qbase + (size_t)rc * ROWB;
            const bool va = ra < qn, vc = rc < qn;
#pragma unroll
            for (int ks = 0; ks < KS; ks++) {
                /* int8: k = 32 ks + 4 c4 (+16); fp16: halves 16 ks + 2 c4 (+8): bytes 32 ks + 4 c4 (+16) */
                const int off = ks * 32 + c4 * 4;
                a[mt][ks][0] = va ? __ldg((const uint32_t *)(pa + off)) : 0u;
                a[mt][ks][1] = vc ? __ldg((const uint32_t *)(pc + off)) : 0u;
                a[mt][ks][2] = va ? __ldg((const uint32_t *)(pa + off + 16)) : 0u;
                a[mt][ks][3] = vc ? __ldg((const uint32_t *)(pc + off + 16)) : 0u;
            }
        }
    };

    /* Work items: (slot, pass, chunk) over the block's slots of >= 2 rows
     * (fewer cannot pass a ratio test: score 0). */
    struct cursor {
        uint32_t slot;
        int pass, chunk, cnt;
    };
    auto seek = [&](cursor &cu, uint32_t s) {
        while (s < r1 && L.count[s] < 2) s++;
        cu.slot = s;
        cu.cnt = s < r1 ? (int)L.count[s] : 0;
        cu.pass = cu.chunk = 0;
    };
    auto advance = [&](cursor &cu) {
        if ((cu.chunk + 1) * IDF_CH < cu.cnt) {
            cu.chunk++;
        } else if (cu.pass + 1 < L.npass) {
            cu.chunk = 0;
            cu.pass++;
        } else {
            seek(cu, cu.slot + 1);
        }
    };
    auto issue = [&](const cursor &cu, int st) {
        if (cu.slot < r1) {
            const int rows = min(IDF_CH, cu.cnt - cu.chunk * IDF_CH);
            const unsigned char *src = rbase + (size_t)cu.slot * slot_bytes + (size_t)cu.chunk * IDF_CH * ROWB;
            unsigned char *dst = stage + st * IDF_CH * ROWB;
            /* whole 8-row groups: the slot's rows are padded to a multiple of
             * 8, and columns past count are masked below */
            const int units = ((rows + 7) & ~7) * NCH;
            for (int u = threadIdx.x; u < units; u += nthr) {
                const int r = u / NCH, c = u % NCH;
                cp_async16(dst + swz<ROWB>(r, c), src + (size_t)r * ROWB + c * 16);
            }
        }
        cp_async_commit();
    };

    cursor ld, cm; /* the next item to load, the next to compute */
    seek(ld, r0);
    cm = ld;
    __syncthreads();
#pragma unroll
    for (int st = 0; st < IDF_STAGES - 1; st++) {
        issue(ld, st);
        if (ld.slot < r1) advance(ld);
    }
    if (L.npass == 1) load_a(0);

    KT tb[MT][2], ts[MT][2]; /* top 2 per row: rows g and g + 8 of each m-tile */
    int it = 0;
    while (cm.slot < r1) {
        const int st = it % IDF_STAGES;
        cp_async_wait<IDF_STAGES - 2>();
        __syncthreads();
        issue(ld, (it + IDF_STAGES - 1) % IDF_STAGES);
        if (ld.slot < r1) advance(ld);

        const int prow0 = cm.pass * rows_pass + warp * RPW; /* this warp's first row in the pass */
        const bool warp_rows = prow0 < qn;
        if (cm.chunk == 0) {
            if (L.npass > 1 && warp_rows) load_a(cm.pass);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) tb[mt][0] = tb[mt][1] = ts[mt][0] = ts[mt][1] = 0;
        }
        const int rows = min(IDF_CH, cm.cnt - cm.chunk * IDF_CH);
        const uint32_t sbase = smem_u32(stage + st * IDF_CH * ROWB);
        if (warp_rows) {
            for (int n0 = 0; n0 < rows; n0 += 8) {
                const int col = cm.chunk * IDF_CH + n0; /* the tile's first column in the reference */
                uint32_t bf[NCH];                       /* B: rows n0..n0+7, every 16-byte chunk */
#pragma unroll
                for (int h = 0; h < NCH / 4; h++)
                    ldsm_x4(bf[4 * h], bf[4 * h + 1], bf[4 * h + 2], bf[4 * h + 3],
                            sbase + swz<ROWB>(n0 + (lane & 7), (lane >> 3) + 4 * h));
                const bool ok0 = n0 + 2 * c4 < rows, ok1 = n0 + 2 * c4 + 1 < rows;
                const KT k0 = KP::base(col + 2 * c4), k1 = KP::base(col + 2 * c4 + 1);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    int32_t d[4];
                    if (PREC == IDF_PREC_INT8) {
                        d[0] = d[1] = d[2] = d[3] = 0;
#pragma unroll
                        for (int ks = 0; ks < KS; ks++) mma_u8(d, a[mt][ks], bf[2 * ks], bf[2 * ks + 1]);
                    } else {
                        float f[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                        for (int ks = 0; ks < KS; ks++) mma_f16(f, a[mt][ks], bf[2 * ks], bf[2 * ks + 1]);
#pragma unroll
                        for (int e = 0; e < 4; e++) d[e] = __float2int_rn(f[e]); /* exact integers */
                    }
                    top2_add2<KT>(tb[mt][0], ts[mt][0], ok0 ? KP::make(d[0], k0) : (KT)0,
                                  ok1 ? KP::make(d[1], k1) : (KT)0);
                    top2_add2<KT>(tb[mt][1], ts[mt][1], ok0 ? KP::make(d[2], k0) : (KT)0,
                                  ok1 ? KP::make(d[3], k1) : (KT)0);
                    if (L.scoring == IDF_SCORE_MUTUAL) {
                        /* each column's best row: key (dot << 32) | ~row, max over the
                         * warp's rows (lanes of one c4 share the columns) */
                        const int rowA = prow0 + mt * 16 + g, rowB = rowA + 8;
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            unsigned long long ka =
                                rowA < qn ? ((unsigned long long)(uint32_t)d[e] << 32) | (0xffffffffu - (uint32_t)rowA)
                                          : 0ull;
                            const unsigned long long kb =
                                rowB < qn ? ((unsigned long long)(uint32_t)d[2 + e] << 32) | (0xffffffffu - (uint32_t)rowB)
                                          : 0ull;
                            ka = ka > kb ? ka : kb;
#pragma unroll
                            for (int o = 4; o < 32; o <<= 1) {
                                const unsigned long long x = __shfl_xor_sync(0xffffffffu, ka, o);
                                ka = ka > x ? ka : x;
                            }
                            if (g == 0 && (e ? ok1 : ok0) && ka) atomicMax(&colbest[col + 2 * c4 + e], ka);
                        }
                    }
                }
            }
        }

        const bool last_chunk = (cm.chunk + 1) * IDF_CH >= cm.cnt;
        if (last_chunk && warp_rows) {
            /* merge the 4 lanes of each row; lane c4 then tests m-tiles mt = c4 (mod 4) */
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int o = 1; o < 4; o <<= 1) {
                        const KT b2 = __shfl_xor_sync(0xffffffffu, tb[mt][h], o);
                        const KT s2 = __shfl_xor_sync(0xffffffffu, ts[mt][h], o);
                        top2_merge<KT>(tb[mt][h], ts[mt][h], b2, s2);
                    }
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                if ((mt & 3) != c4) continue;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int row = prow0 + mt * 16 + g + 8 * h;
                    if (row >= qn) continue;
                    const uint32_t d1 = KP::dot1(tb[mt][h]), d2 = KP::dot1(ts[mt][h]);
                    int res = 0;
                    if (d1 && d2) {
                        /* idf_ratio_pass on the float similarities dot * 2^-18 (exact) */
                        const float f1 = (float)(d1 - 1u) * L.inv_scale2, f2 = (float)(d2 - 1u) * L.inv_scale2;
                        double e1 = __dsub_rn(2.0, 2.0 * (double)f1), e2 = __dsub_rn(2.0, 2.0 * (double)f2);
                        if (e1 < 0) e1 = 0;
                        if (e2 < 0) e2 = 0;
                        if (e1 < __dmul_rn(L.rr, e2)) res = KP::col(tb[mt][h]) + 1;
                    }
                    rowres[row] = res;
                }
            }
        }
        if (last_chunk && cm.pass + 1 == L.npass) {
            /* every row of the query has its result: the slot's score */
            __syncthreads();
            if (L.scoring == IDF_SCORE_RAW) {
                int cnt = 0;
                for (int r = threadIdx.x; r < qn; r += nthr) cnt += rowres[r] > 0;
                cnt = __reduce_add_sync(0xffffffffu, cnt);
                if (lane == 0 && cnt) atomicAdd(&s_raw, cnt);
            } else {
                for (int r = threadIdx.x; r < qn; r += nthr) {
                    const int cc = rowres[r] - 1;
                    if (cc < 0) continue;
                    if (L.scoring == IDF_SCORE_MUTUAL &&
                        (uint32_t)(colbest[cc] & 0xffffffffull) != 0xffffffffu - (uint32_t)r)
                        continue;
                    atomicOr(&mask[cc >> 5], 1u << (cc & 31));
                }
            }
            __syncthreads();
            if (warp == 0) {
                int cnt = 0;
                if (L.scoring == IDF_SCORE_RAW) {
                    cnt = s_raw;
                    __syncwarp(); /* every lane has read it before lane 0 resets it */
                } else {
                    for (int i = lane; i < (cm.cnt + 31) / 32; i += 32) {
                        cnt += __popc(mask[i]);
                        mask[i] = 0;
                    }
                    cnt = __reduce_add_sync(0xffffffffu, cnt);
                }
                if (lane == 0) {
                    s_raw = 0;
                    if (cnt > 0) { /* into the sorted list (one thread; rare once the list is full) */
                        idf_list_insert(list, L.K, ((uint64_t)cnt << 32) | (0xffffffffu - (L.slot0 + cm.slot)));
                    }
                }
            }
            if (L.scoring == IDF_SCORE_MUTUAL)
                for (int i = threadIdx.x; i < cm.cnt; i += nthr) colbest[i] = 0;
            /* the next slot's rowres/mask/colbest writes come after the
             * barrier at the top of the next iteration */
        }
        advance(cm);
        it++;
    }
    cp_async_wait<0>();
    __syncthreads();
    for (int i = threadIdx.x; i < L.K; i += nthr) lout[i] = list[i];
}

#endif
