/* The wgmma identification matcher's lab (README.md beside this file):
 * k_idf_match (the library's mma.sync kernel, src/gpu/idf_kernels.cuh,
 * launched as src/gpu/identify.cu launches it) beside k_idf_match_wg
 * (src/gpu/idf_wgmma.cuh) on the same arena, plus a plain C matcher on a subset.
 *
 *   lab_wgmma [--quick] [--reps N] [--timeout S] [--profile SHAPE KERNEL]
 *   lab_wgmma --emulate    the harness checking itself without a GPU: the
 *                          C matcher plays the kernels, one child lies
 *
 * Each kernel runs in a child process of its own (forked before any CUDA
 * call), so a fault of one still leaves the other's rows; the parent (no
 * CUDA; a child still running after S seconds, 120 by default, is killed)
 * compares the per-block candidate lists exactly, checks listed and
 * sampled references against the C matcher, prints one table and exits 1
 * on any difference or failure, 77 without a GPU. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include <cuda_runtime.h>

#include "gpu/idf_kernels.cuh"
#include "gpu/idf_wgmma.cuh"


/* ------------------------------------------------------------------ data */

/* Every byte of every input is a pure function of (shape, indices), so the
 * children and the parent's C matcher see the same data without sharing
 * memory. */
__host__ __device__ static inline uint32_t mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}
__host__ __device__ static inline uint32_t hash4(uint32_t a, uint32_t b, uint32_t c, uint32_t d)
{
    return mix(a * 0x9e3779b9U ^ mix(b + 0x85ebca6bU * mix(c ^ mix(d + 0x27d4eb2fU))));
}

enum { DIST_UNIFORM = 0, DIST_ROOTSIFT = 1 };
enum { CNT_FULL = 0, CNT_MIXED = 1, CNT_TINY = 2 };
enum { QC_FULL = 0, QC_MIXED = 1 };

typedef struct shape {
    const char *name;
    int m, n, nq;
    uint32_t nref;
    int dist, cnt_mode, qc_mode, scoring, K;
    int timed;       /* repetitions timed (0: one run) */
    int cpu_all;     /* the C matcher on every slot (small shapes) */
} shape_t;

static const shape_t SHAPES[] = {
    /* name, m, n, nq, nref, dist, counts, qcounts, scoring, K, timed, all */
    {"384x768 q1 rootsift", 384, 768, 1, 200000, DIST_ROOTSIFT, CNT_FULL, QC_FULL, IDF_SCORE_ONE2ONE, 10, 5, 0},
    {"384x768 q1 uniform", 384, 768, 1, 50000, DIST_UNIFORM, CNT_FULL, QC_FULL, IDF_SCORE_ONE2ONE, 10, 3, 0},
    {"512x1000 q1 mixed", 512, 1000, 1, 100000, DIST_ROOTSIFT, CNT_MIXED, QC_FULL, IDF_SCORE_ONE2ONE, 10, 3, 0},
    {"257x768 q3 mixed", 257, 768, 3, 30000, DIST_ROOTSIFT, CNT_MIXED, QC_MIXED, IDF_SCORE_ONE2ONE, 10, 3, 0},
    {"384x1000 q4 qcounts", 384, 1000, 4, 20000, DIST_ROOTSIFT, CNT_MIXED, QC_MIXED, IDF_SCORE_ONE2ONE, 16, 3, 0},
    {"384x768 q16 batch", 384, 768, 16, 20000, DIST_ROOTSIFT, CNT_FULL, QC_FULL, IDF_SCORE_ONE2ONE, 10, 3, 0},
    {"384x64 q1 short", 384, 64, 1, 200000, DIST_ROOTSIFT, CNT_FULL, QC_FULL, IDF_SCORE_ONE2ONE, 10, 5, 0},
    {"384x115 q1 short", 384, 115, 1, 200000, DIST_ROOTSIFT, CNT_FULL, QC_FULL, IDF_SCORE_ONE2ONE, 10, 5, 0},
    {"384x768 q1 K1024", 384, 768, 1, 8000, DIST_ROOTSIFT, CNT_MIXED, QC_FULL, IDF_SCORE_ONE2ONE, 1024, 0, 0},
    {"384x768 q1 raw", 384, 768, 1, 4000, DIST_ROOTSIFT, CNT_MIXED, QC_FULL, IDF_SCORE_RAW, 10, 0, 0},
    {"384x768 q1 mutual", 384, 768, 1, 4000, DIST_ROOTSIFT, CNT_MIXED, QC_FULL, IDF_SCORE_MUTUAL, 10, 0, 0},
    {"40x100 q3 one2one", 40, 100, 3, 3000, DIST_ROOTSIFT, CNT_MIXED, QC_MIXED, IDF_SCORE_ONE2ONE, 20, 0, 1},
    {"40x100 q3 raw", 40, 100, 3, 3000, DIST_ROOTSIFT, CNT_MIXED, QC_MIXED, IDF_SCORE_RAW, 20, 0, 1},
    {"40x100 q3 mutual", 40, 100, 3, 3000, DIST_ROOTSIFT, CNT_MIXED, QC_MIXED, IDF_SCORE_MUTUAL, 20, 0, 1},
    {"130x70 q2 uniform", 130, 70, 2, 2000, DIST_UNIFORM, CNT_MIXED, QC_MIXED, IDF_SCORE_ONE2ONE, 20, 0, 1},
    {"8x1 q2 tiny", 8, 1, 2, 500, DIST_ROOTSIFT, CNT_MIXED, QC_MIXED, IDF_SCORE_ONE2ONE, 8, 0, 1},
    {"64x64 q2 empty slots", 64, 64, 2, 1000, DIST_ROOTSIFT, CNT_TINY, QC_FULL, IDF_SCORE_ONE2ONE, 8, 0, 1},
    {"130x100 q3 short raw", 130, 100, 3, 2000, DIST_ROOTSIFT, CNT_MIXED, QC_MIXED, IDF_SCORE_RAW, 20, 0, 1},
    {"264x64 q2 short mutual", 264, 64, 2, 2000, DIST_ROOTSIFT, CNT_MIXED, QC_MIXED, IDF_SCORE_MUTUAL, 20, 0, 1},
    {"512x1024 q2 mutual", 512, 1024, 2, 600, DIST_ROOTSIFT, CNT_MIXED, QC_MIXED, IDF_SCORE_MUTUAL, 10, 0, 0},
};
#define NSHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))
#define QUICK_FROM 8 /* --quick: the shapes from this one on (seconds of C matching, no 200k arena) */

static const double RATIO = 0.8;

__host__ __device__ static inline int mpad_of(int m) { return (m + 7) & ~7; }

__host__ __device__ static inline int slot_count(const shape_t &S, int si, uint32_t s)
{
    const uint32_t h = hash4(0xc0u, (uint32_t)si, s, 7u);
    if (S.cnt_mode == CNT_FULL) return S.m;
    if (S.cnt_mode == CNT_TINY) return (int)(h % 4u) == 3 ? 2 + (int)((h >> 8) % 3u) : (int)(h % 3u); /* 0, 1, 2..4 */
    switch (h % 16u) {
    case 0: return 0;
    case 1: return 1;
    case 2: return 2;
    case 3: return 1 + 2 * (int)((h >> 8) % (uint32_t)((S.m + 1) / 2)); /* odd, <= m */
    case 4: return 1 + (int)((h >> 8) % (uint32_t)S.m);
    default: return S.m;
    }
}

__host__ __device__ static inline int query_count(const shape_t &S, int si, int q)
{
    (void)si;
    if (S.qc_mode == QC_FULL) return S.n;
    const int pat[6] = {S.n, S.n / 2 + 1, 0, 63, 1, S.n - 1};
    const int c = pat[q % 6];
    return c < 0 ? 0 : c > S.n ? S.n : c;
}

/* One byte of a descriptor row: uniform, or RootSIFT-like (most values
 * zero or small, a few large). */
__host__ __device__ static inline uint8_t draw(int dist, uint32_t h)
{
    if (dist == DIST_UNIFORM) return (uint8_t)(h >> 24);
    const uint32_t u = h % 100u;
    if (u < 50) return 0;
    if (u < 85) return (uint8_t)((h >> 8) % 24u);
    if (u < 97) return (uint8_t)(24u + (h >> 8) % 80u);
    return (uint8_t)(104u + (h >> 8) % 152u);
}

/* Query q, row r, byte k; rows past the query's count hold garbage (never read). */
__host__ __device__ static inline uint8_t query_byte(const shape_t &S, int si, int q, int r, int k)
{
    return draw(S.dist, hash4(0x51u + (uint32_t)si, (uint32_t)q, (uint32_t)r, (uint32_t)k));
}

/* Reference slot s, row i, byte k (i < count; zero past it). A fifth of
 * the slots copy some rows from a query with noise (ratio tests pass: real
 * scores), some of them twice without noise (exact ties). */
__host__ __device__ static inline uint8_t ref_byte(const shape_t &S, int si, uint32_t s, int i, int k)
{
    const uint32_t hs = hash4(0xa1u, (uint32_t)si, s, 0u);
    if (hs % 5u == 0) {
        const uint32_t hr = hash4(0xa2u, (uint32_t)si, s, (uint32_t)i);
        if (hr % 3u == 0) {
            const int q = (int)((hs >> 8) % (uint32_t)S.nq);
            int qn = query_count(S, si, q);
            if (qn == 0) qn = S.n; /* the copied rows of an empty query are garbage rows */
            const int i2 = (hr >> 4) % 7u == 0 && i > 0 ? i - 1 : i; /* a twin of the row before */
            const uint32_t hr2 = hash4(0xa2u, (uint32_t)si, s, (uint32_t)i2);
            const int r = (int)((hr2 >> 8) % (uint32_t)qn);
            const int v = query_byte(S, si, q, r, k);
            const int noise = (hr2 >> 20) % 5u == 0 ? 0 : (int)(hash4(0xa3u, s, (uint32_t)i2, (uint32_t)k) % 9u) - 4;
            const int x = v + noise;
            return (uint8_t)(x < 0 ? 0 : x > 255 ? 255 : x);
        }
    }
    return draw(S.dist, hash4(0xa4u + (uint32_t)si, s, (uint32_t)i, (uint32_t)k));
}

__global__ void k_gen_refs(shape_t S, int si, uint8_t *refs, uint16_t *count)
{
    const int mp = mpad_of(S.m);
    const size_t total = (size_t)S.nref * mp * 128;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        const uint32_t s = (uint32_t)(e / ((size_t)mp * 128));
        const int i = (int)(e / 128 % mp), k = (int)(e % 128);
        const int cnt = slot_count(S, si, s);
        refs[e] = i < cnt ? ref_byte(S, si, s, i, k) : 0;
        if (i == 0 && k == 0) count[s] = (uint16_t)cnt;
    }
}

__global__ void k_gen_queries(shape_t S, int si, uint8_t *qs, uint16_t *qcount)
{
    const size_t total = (size_t)S.nq * S.n * 128;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        const int q = (int)(e / ((size_t)S.n * 128)), r = (int)(e / 128 % S.n), k = (int)(e % 128);
        qs[e] = query_byte(S, si, q, r, k);
        if (r == 0 && k == 0) qcount[q] = (uint16_t)query_count(S, si, q);
    }
}

/* ------------------------------------------------------ GPU runs (children) */

enum { IMPL_MMA = 0, IMPL_WG2 = 1, IMPL_WG3 = 2, IMPL_WG2P = 3, IMPL_WG3S = 4, IMPL_WG3T = 5, NIMPL = 6 };
/* wgmmaN: N consumer warpgroups; p: m-tiles in pairs, two accumulator sets */
static const char *IMPL_NAME[NIMPL] = {"mma.sync", "wgmma2", "wgmma3", "wgmma2p", "wgmma3s", "wgmma3t"};

/* One record per shape in a child's file. */
typedef struct rec_hdr {
    int32_t status;   /* 0 ok, else the cudaError_t (or -1: not run) */
    int32_t gx;       /* blocks per query */
    float ms;         /* median time of a launch */
    float peak_tops;  /* dense int8 peak: SMs x SM clock x 8192 ops (bench_identify_gpu's) */
    uint32_t nkeys;   /* nq * gx * K keys follow */
} rec_hdr_t;

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "lab_wgmma: %s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            return (int)e_;                                                                     \
        }                                                                                       \
    } while (0)

static int launch_impl(int impl, const idf_launch_t &L, dim3 grid, int warps, int scoring, cudaStream_t st)
{
    if (impl == IMPL_MMA) {
        const size_t smem = idf_smem_bytes(IDF_PREC_INT8, L.m, L.n, L.K, scoring);
        CK(cudaFuncSetAttribute(k_idf_match<IDF_PREC_INT8, uint32_t>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)smem));
        k_idf_match<IDF_PREC_INT8, uint32_t><<<grid, warps * 32, smem, st>>>(L);
    } else {
        /* mutual: the two-consumer instance in both (its column maxima need registers) */
        const size_t smem = idfw_smem_bytes(L.m, L.n, L.K, scoring, 0);
        const bool split = impl == IMPL_WG3S || impl == IMPL_WG3T, three = impl == IMPL_WG3 || split;
        void (*k)(const idf_launch_t, const CUtensorMap, int) =
            scoring == IDF_SCORE_MUTUAL
                ? (split ? k_idf_match_wg<true, 2, false, true> : k_idf_match_wg<true, 2, false, false>)
            : split             ? k_idf_match_wg<false, 3, false, true>
            : impl == IMPL_WG3  ? k_idf_match_wg<false, 3, false, false>
            : impl == IMPL_WG2P ? k_idf_match_wg<false, 2, true, false>
                                : k_idf_match_wg<false, 2, false, false>;
        const int threads = scoring != IDF_SCORE_MUTUAL && three ? IDFW_THREADS(3) : IDFW_THREADS(2);
        CUtensorMap map;
        const int tma = impl == IMPL_WG3T ? idfw_tensor_map(&map, L) : (memset(&map, 0, sizeof map), 0);
        if (impl == IMPL_WG3T && !tma) {
            fprintf(stderr, "lab_wgmma: no tensor map for this launch\n");
            return 1;
        }
        CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        k<<<grid, threads, smem, st>>>(L, map, tma);
    }
    CK(cudaGetLastError());
    return 0;
}

static int run_shape(int impl, int si, int reps_scale, int sms, float peak_tops, FILE *out)
{
    const shape_t &S = SHAPES[si];
    const int mp = mpad_of(S.m);
    uint8_t *d_refs = NULL, *d_q = NULL;
    uint16_t *d_count = NULL, *d_qcount = NULL;
    uint64_t *d_out = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    rec_hdr_t h = {0, 0, 0.f, 0.f, 0};
    std::vector<uint64_t> keys;
    std::vector<float> times;
    int qmax = 0, warps, npass, rc = 0;
    size_t gx;
    idf_launch_t L;
    for (int q = 0; q < S.nq; q++) qmax = std::max(qmax, query_count(S, si, q));
    gx = idf_blocks_per_query((size_t)S.nq, (size_t)sms, (S.nref + 7) / 8);
    warps = std::min(IDF_MAXW, std::max(1, (qmax + 63) / 64));
    npass = std::max(1, (qmax + warps * 64 - 1) / (warps * 64));
    h.gx = (int32_t)gx;
    h.peak_tops = peak_tops;
    h.nkeys = (uint32_t)((size_t)S.nq * gx * S.K);

#define CKR(x)                                                                                  \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "lab_wgmma: %s: %s:%d: %s: %s\n", S.name, __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            rc = (int)e_;                                                                       \
            goto done;                                                                          \
        }                                                                                       \
    } while (0)

    CKR(cudaMalloc(&d_refs, (size_t)S.nref * mp * 128));
    CKR(cudaMalloc(&d_count, (size_t)S.nref * 2 + 2));
    CKR(cudaMalloc(&d_q, (size_t)S.nq * S.n * 128));
    CKR(cudaMalloc(&d_qcount, (size_t)S.nq * 2));
    CKR(cudaMalloc(&d_out, (size_t)h.nkeys * 8));
    k_gen_refs<<<4 * sms, 256>>>(S, si, d_refs, d_count);
    CKR(cudaGetLastError());
    k_gen_queries<<<sms, 256>>>(S, si, d_q, d_qcount);
    CKR(cudaGetLastError());
    CKR(cudaDeviceSynchronize());
    CKR(cudaEventCreate(&e0));
    CKR(cudaEventCreate(&e1));

    memset(&L, 0, sizeof L);
    L.refs = d_refs;
    L.count = d_count;
    L.slot0 = 0;
    L.nref = S.nref;
    L.m = mp;
    L.queries = d_q;
    L.qcount = d_qcount;
    L.n = S.n;
    L.npass = npass;
    L.K = S.K;
    L.scoring = S.scoring;
    L.rr = RATIO * RATIO;
    L.inv_scale2 = 1.0f / 262144.0f;
    L.out = d_out;
    L.accumulate = 0;
    {
        const int runs = 1 + S.timed * reps_scale;
        for (int r = 0; r < runs; r++) {
            float ms = 0;
            /* stale lists must not pass for results: poison them */
            CKR(cudaMemset(d_out, 0xa5, (size_t)h.nkeys * 8));
            CKR(cudaEventRecord(e0));
            if ((rc = launch_impl(impl, L, dim3((unsigned)gx, (unsigned)S.nq), warps, S.scoring, 0))) goto done;
            CKR(cudaEventRecord(e1));
            CKR(cudaEventSynchronize(e1));
            CKR(cudaGetLastError());
            CKR(cudaEventElapsedTime(&ms, e0, e1));
            if (r > 0 || runs == 1) times.push_back(ms);
        }
        std::sort(times.begin(), times.end());
        h.ms = times[times.size() / 2];
    }
    keys.resize(h.nkeys);
    CKR(cudaMemcpy(keys.data(), d_out, (size_t)h.nkeys * 8, cudaMemcpyDeviceToHost));
done:
    h.status = rc;
    if (rc) h.nkeys = 0;
    fwrite(&h, sizeof h, 1, out);
    if (h.nkeys) fwrite(keys.data(), 8, h.nkeys, out);
    fflush(out);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(d_refs);
    cudaFree(d_count);
    cudaFree(d_q);
    cudaFree(d_qcount);
    cudaFree(d_out);
    return rc;
#undef CKR
}

/* A child: every shape with one kernel, records into path. Stops at the
 * first CUDA error (the context is likely lost); the parent reports the
 * shapes without a record as not run. */
static int child(int impl, const char *path, int first, int last, int reps_scale)
{
    FILE *f = fopen(path, "wb");
    cudaDeviceProp pr;
    int clock_khz = 0;
    if (!f) return 2;
    CK(cudaGetDeviceProperties(&pr, 0));
    CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    const float peak = (float)((double)pr.multiProcessorCount * clock_khz * 1e3 * 8192.0 / 1e12);
    if (impl != IMPL_MMA && pr.major != 9) {
        fprintf(stderr, "lab_wgmma: wgmma needs sm_90 (this device is sm_%d%d)\n", pr.major, pr.minor);
        fclose(f);
        return 3;
    }
    for (int si = first; si < last; si++)
        if (run_shape(impl, si, reps_scale, pr.multiProcessorCount, peak, f)) break;
    fclose(f);
    return 0;
}

/* ------------------------------------------------------------- C matcher */

/* The score of query q against slot s, from the definitions: per query row
 * the best and second best dot over the slot's rows (ties: the lower row
 * is the best, a tie with the best is the second), Lowe's ratio test on the
 * similarities dot * 2^-18 as idf_ratio_pass computes it, then the rule:
 * raw counts passing rows, one2one the distinct best columns of passing
 * rows, mutual those of passing rows that are their column's best row
 * (ties: the lower row). */
static int cpu_score(const shape_t &S, int si, int q, uint32_t s, const uint8_t *qrows, std::vector<uint8_t> &rbuf)
{
    const int qn = query_count(S, si, q), cnt = slot_count(S, si, s);
    if (qn == 0 || cnt < 2) return 0;
    rbuf.resize((size_t)cnt * 128);
    for (int i = 0; i < cnt; i++)
        for (int k = 0; k < 128; k++) rbuf[(size_t)i * 128 + k] = ref_byte(S, si, s, i, k);
    std::vector<int32_t> best(qn), colbest(cnt, -1), colrow(cnt, -1);
    std::vector<char> pass(qn), used(cnt, 0);
    const float inv = 1.0f / 262144.0f;
    for (int j = 0; j < qn; j++) {
        const uint8_t *a = qrows + (size_t)j * 128;
        int32_t b = -1, sec = -1, bi = -1;
        for (int i = 0; i < cnt; i++) {
            const uint8_t *r = rbuf.data() + (size_t)i * 128;
            int32_t d = 0;
            for (int k = 0; k < 128; k++) d += (int32_t)a[k] * (int32_t)r[k];
            if (d > b) {
                sec = b;
                b = d;
                bi = i;
            } else if (d > sec) {
                sec = d;
            }
            if (d > colbest[i]) {
                colbest[i] = d;
                colrow[i] = j;
            }
        }
        best[j] = bi;
        const float s1 = (float)b * inv, s2 = (float)sec * inv;
        double d1 = 2.0 - 2.0 * (double)s1, d2 = 2.0 - 2.0 * (double)s2;
        if (d1 < 0) d1 = 0;
        if (d2 < 0) d2 = 0;
        pass[j] = d1 < RATIO * RATIO * d2;
    }
    int score = 0;
    for (int j = 0; j < qn; j++) {
        if (!pass[j]) continue;
        if (S.scoring == IDF_SCORE_RAW) {
            score++;
            continue;
        }
        if (S.scoring == IDF_SCORE_MUTUAL && colrow[best[j]] != j) continue;
        if (!used[best[j]]) {
            used[best[j]] = 1;
            score++;
        }
    }
    return score;
}

/* The harness's own check (--emulate, no GPU needed): children that make
 * the per-block lists with the C matcher (3 blocks per query, the kernels'
 * partition) on the shapes the C matcher covers whole; the last child
 * flips one key, which the comparison must report. */
static int child_emulate(int impl, const char *path, int first)
{
    FILE *f = fopen(path, "wb");
    if (!f) return 2;
    for (int si = first; si < NSHAPES; si++) {
        const shape_t &S = SHAPES[si];
        rec_hdr_t h = {0, 3, 0.f, 1.f, 0};
        const uint32_t per = (S.nref + 2) / 3;
        h.nkeys = (uint32_t)(S.nq * 3 * S.K);
        std::vector<uint64_t> keys(h.nkeys, 0);
        if (!S.cpu_all) h.status = h.nkeys = 0, h.gx = 0;
        for (int q = 0; S.cpu_all && q < S.nq; q++) {
            std::vector<uint8_t> qrows((size_t)S.n * 128), rbuf;
            for (int j = 0; j < S.n; j++)
                for (int k = 0; k < 128; k++) qrows[(size_t)j * 128 + k] = query_byte(S, si, q, j, k);
            for (uint32_t b = 0; b < 3; b++) {
                std::vector<uint64_t> l;
                for (uint32_t s = b * per; s < std::min(S.nref, (b + 1) * per); s++) {
                    const int sc = cpu_score(S, si, q, s, qrows.data(), rbuf);
                    if (sc > 0) l.push_back(((uint64_t)sc << 32) | (0xffffffffu - s));
                }
                std::sort(l.begin(), l.end(), [](uint64_t a, uint64_t c) { return a > c; });
                for (size_t i = 0; i < l.size() && i < (size_t)S.K; i++) keys[((size_t)q * 3 + b) * S.K + i] = l[i];
            }
        }
        if (impl == NIMPL - 1 && si == NSHAPES - 2 && h.nkeys) keys[0] ^= 1ull << 32; /* a wrong score */
        fwrite(&h, sizeof h, 1, f);
        if (h.nkeys) fwrite(keys.data(), 8, h.nkeys, f);
    }
    fclose(f);
    return 0;
}

/* ---------------------------------------------------------------- parent */

typedef struct result {
    rec_hdr_t h;
    std::vector<uint64_t> keys;
    int have;
} result_t;

/* Runs one child to its end, or kills it after timeout_s (a kernel that
 * never finishes, e.g. waiting on a barrier nobody arrives at): exit code
 * 128 + 9 then, and the shapes it finished keep their records. */
static int run_child(int impl, const char *path, int first, int reps_scale, int emulate, int timeout_s,
                     int *exit_code)
{
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) _exit(emulate ? child_emulate(impl, path, first) : child(impl, path, first, NSHAPES, reps_scale));
    int st = 0;
    for (long waited_ms = 0;; waited_ms += 50) {
        const pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) return -1;
        if (waited_ms >= 1000L * timeout_s) {
            fprintf(stderr, "lab_wgmma: %s: no end after %d s: killed\n", IMPL_NAME[impl], timeout_s);
            kill(pid, SIGKILL);
            if (waitpid(pid, &st, 0) < 0) return -1;
            break;
        }
        usleep(50000);
    }
    *exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    return 0;
}

static void read_results(const char *path, int first, std::vector<result_t> &res)
{
    FILE *f = fopen(path, "rb");
    res.assign(NSHAPES, result_t());
    for (int si = 0; si < NSHAPES; si++) res[si].have = 0;
    if (!f) return;
    for (int si = first; si < NSHAPES; si++) {
        result_t &r = res[si];
        if (fread(&r.h, sizeof r.h, 1, f) != 1) break;
        r.keys.resize(r.h.nkeys);
        if (r.h.nkeys && fread(r.keys.data(), 8, r.h.nkeys, f) != r.h.nkeys) break;
        r.have = 1;
    }
    fclose(f);
}

/* Query q's best K over its gx block lists (identify.cu's merge). */
static std::vector<uint64_t> merged(const result_t &r, const shape_t &S, int q)
{
    std::vector<uint64_t> t;
    const size_t per = (size_t)r.h.gx * S.K;
    for (size_t i = 0; i < per; i++)
        if (r.keys[(size_t)q * per + i]) t.push_back(r.keys[(size_t)q * per + i]);
    std::sort(t.begin(), t.end(), [](uint64_t a, uint64_t b) { return a > b; });
    if ((int)t.size() > S.K) t.resize(S.K);
    return t;
}

/* The C matcher against one shape's merged lists: every slot when
 * S.cpu_all (the exact list), else listed slots (their scores) and a sample
 * (none above the list). Returns the number of disagreements, the first
 * one described in first. */
static long cpu_check(int si, const result_t &r, char *first, size_t fsz)
{
    const shape_t &S = SHAPES[si];
    long bad = 0;
    first[0] = 0;
    for (int q = 0; q < S.nq; q++) {
        const std::vector<uint64_t> lst = merged(r, S, q);
        std::vector<uint8_t> qrows((size_t)S.n * 128);
        for (int j = 0; j < S.n; j++)
            for (int k = 0; k < 128; k++) qrows[(size_t)j * 128 + k] = query_byte(S, si, q, j, k);
        std::vector<uint32_t> slots;
        if (S.cpu_all) {
            for (uint32_t s = 0; s < S.nref; s++) slots.push_back(s);
        } else {
            for (size_t i = 0; i < lst.size(); i++)
                if (i < 48 || i + 16 >= lst.size()) slots.push_back(0xffffffffu - (uint32_t)lst[i]);
            for (uint32_t s = 0; s < 32 && s < S.nref; s++) slots.push_back(s);
            for (uint32_t i = 0; i < 32; i++) slots.push_back(hash4(0x77u, (uint32_t)si, (uint32_t)q, i) % S.nref);
        }
        std::vector<int> sc(slots.size());
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1)
#endif
        for (long i = 0; i < (long)slots.size(); i++) {
            std::vector<uint8_t> rbuf;
            sc[i] = cpu_score(S, si, q, slots[i], qrows.data(), rbuf);
        }
        std::vector<uint64_t> ref;
        for (size_t i = 0; i < slots.size(); i++)
            if (sc[i] > 0) ref.push_back(((uint64_t)sc[i] << 32) | (0xffffffffu - slots[i]));
        std::sort(ref.begin(), ref.end(), [](uint64_t a, uint64_t b) { return a > b; });
        ref.erase(std::unique(ref.begin(), ref.end()), ref.end());
        if (S.cpu_all) {
            if ((int)ref.size() > S.K) ref.resize(S.K);
            for (size_t i = 0; i < std::max(ref.size(), lst.size()); i++) {
                const uint64_t a = i < ref.size() ? ref[i] : 0, b = i < lst.size() ? lst[i] : 0;
                if (a != b && bad++ == 0)
                    snprintf(first, fsz, "q%d #%zu: C slot %u score %u, GPU slot %u score %u", q, i,
                             a ? 0xffffffffu - (uint32_t)a : 0, (unsigned)(a >> 32), b ? 0xffffffffu - (uint32_t)b : 0,
                             (unsigned)(b >> 32));
            }
        } else {
            const uint64_t last = (int)lst.size() == S.K ? lst.back() : 1;
            for (size_t i = 0; i < slots.size(); i++) {
                const uint64_t key = sc[i] > 0 ? ((uint64_t)sc[i] << 32) | (0xffffffffu - slots[i]) : 0;
                const bool listed = std::find(lst.begin(), lst.end(),
                                              key ? key : ~0ull) != lst.end();
                bool inlist_slot = false;
                for (uint64_t k : lst)
                    if (0xffffffffu - (uint32_t)k == slots[i]) inlist_slot = true;
                const bool ok = inlist_slot ? listed : key < last;
                if (!ok && bad++ == 0)
                    snprintf(first, fsz, "q%d slot %u: C score %d, %s", q, slots[i], sc[i],
                             inlist_slot ? "listed with another score" : "above the GPU list's last but not listed");
            }
        }
    }
    return bad;
}

int main(int argc, char **argv)
{
    int first = 0, reps_scale = 1, emulate = 0, timeout_s = 120, prof_shape = -1, prof_impl = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            first = QUICK_FROM;
        else if (!strcmp(argv[i], "--emulate"))
            emulate = 1;
        else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
            timeout_s = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps_scale = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--profile") && i + 2 < argc) {
            prof_shape = atoi(argv[++i]);
            prof_impl = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: lab_wgmma [--quick] [--reps N] [--timeout S] [--emulate] [--profile SHAPE KERNEL]\n");
            return 2;
        }
    }
    if (prof_shape >= 0) { /* one shape, one kernel, in this process (for Nsight Compute): no checks */
        if (prof_shape >= NSHAPES || prof_impl < 0 || prof_impl >= NIMPL) {
            fprintf(stderr, "lab_wgmma: --profile: shape 0..%d, kernel 0..%d\n", NSHAPES - 1, NIMPL - 1);
            return 2;
        }
        printf("lab_wgmma: profiling %s with %s\n", SHAPES[prof_shape].name, IMPL_NAME[prof_impl]);
        return child(prof_impl, "/dev/null", prof_shape, prof_shape + 1, reps_scale);
    }
    char path[NIMPL][256];
    int code[NIMPL] = {-1, -1, -1, -1, -1, -1};
    std::vector<result_t> res[NIMPL];
    for (int impl = 0; impl < NIMPL; impl++) {
        snprintf(path[impl], sizeof path[impl], "/tmp/lab_wgmma.%d.%s", (int)getpid(), IMPL_NAME[impl]);
        if (run_child(impl, path[impl], first, reps_scale, emulate, timeout_s, &code[impl])) {
            perror("lab_wgmma: fork");
            return 2;
        }
        read_results(path[impl], first, res[impl]);
        remove(path[impl]);
    }
    if (code[0] == 0 && !res[0][first].have) code[0] = 100;
    if (!res[0][first].have && !res[1][first].have && code[0] < 128 && code[1] < 128) {
        /* neither child got a device (and none was killed): no GPU here */
        fprintf(stderr, "lab_wgmma: no CUDA device (children exited %d, %d, %d, %d)\n", code[0], code[1], code[2],
                code[3]);
        return 77;
    }

    int failures = 0;
    {
        float peak = 0;
        for (int si = first; si < NSHAPES && !peak; si++)
            for (int impl = 0; impl < NIMPL && !peak; impl++)
                if (res[impl][si].have) peak = res[impl][si].h.peak_tops;
        printf("lab_wgmma: ratio %.2f; %%peak of %.0f TOPS (dense int8: SMs x SM clock x 8192, as "
               "bench_identify_gpu); refs/s = slots x queries / time\n",
               RATIO, peak);
    }
    printf("%-22s %8s %3s %4s %-8s %9s %11s %7s %6s %6s  %s\n", "shape", "refs", "nq", "K", "kernel", "ms",
           "refs/s", "%peak", "equal", "C ok", "first difference");
    for (int si = first; si < NSHAPES; si++) {
        const shape_t &S = SHAPES[si];
        if (emulate && !S.cpu_all) continue;
        /* useful int8 ops: 2 x 128 x (query rows) x (rows of slots with >= 2 rows) */
        double qrows = 0, rrows = 0;
        for (int q = 0; q < S.nq; q++) qrows += query_count(S, si, q);
        for (uint32_t s = 0; s < S.nref; s++) {
            const int c = slot_count(S, si, s);
            rrows += c >= 2 ? c : 0;
        }
        const double ops = 2.0 * 128.0 * qrows * rrows;
        long mma_bad = -1;        /* the C check of mma.sync's lists (equal lists: the same answer) */
        char mma_msg[200] = "";
        for (int impl = 0; impl < NIMPL; impl++) {
            const result_t &r = res[impl][si];
            char diff[256] = "", cmsg[200] = "";
            const char *eq = "-", *cok = "-";
            if (!r.have || r.h.status) {
                if (r.have)
                    snprintf(diff, sizeof diff, "CUDA error %d (child exit %d)", (int)r.h.status, code[impl]);
                else
                    snprintf(diff, sizeof diff, "not run (child exit %d)", code[impl]);
                printf("%-22s %8u %3d %4d %-8s %9s %11s %7s %6s %6s  %s\n", S.name, S.nref, S.nq, S.K,
                       IMPL_NAME[impl], "-", "-", "-", "no", "-", diff);
                failures++;
                continue;
            }
            if (impl != IMPL_MMA) {
                const result_t &a = res[0][si];
                if (!a.have || a.h.status) {
                    eq = "?";
                } else if (a.h.gx != r.h.gx || a.keys.size() != r.keys.size()) {
                    eq = "no";
                    snprintf(diff, sizeof diff, "list shapes differ");
                } else {
                    eq = "yes";
                    for (size_t i = 0; i < r.keys.size(); i++)
                        if (a.keys[i] != r.keys[i]) {
                            const size_t per = (size_t)r.h.gx * S.K;
                            eq = "no";
                            snprintf(diff, sizeof diff,
                                     "q%zu block %zu #%zu: mma.sync %016llx, %s %016llx", i / per,
                                     i % per / S.K, i % S.K, (unsigned long long)a.keys[i], IMPL_NAME[impl],
                                     (unsigned long long)r.keys[i]);
                            break;
                        }
                }
                if (strcmp(eq, "yes")) failures++;
            }
            long bad;
            if (impl != IMPL_MMA && mma_bad >= 0 && !strcmp(eq, "yes")) {
                bad = mma_bad;
                snprintf(cmsg, sizeof cmsg, "%s", mma_msg);
            } else {
                bad = cpu_check(si, r, cmsg, sizeof cmsg);
            }
            if (impl == IMPL_MMA) {
                mma_bad = bad;
                snprintf(mma_msg, sizeof mma_msg, "%s", cmsg);
            }
            cok = bad ? "no" : "yes";
            if (bad) {
                failures++;
                if (!diff[0]) snprintf(diff, sizeof diff, "C: %s", cmsg);
            }
            printf("%-22s %8u %3d %4d %-8s %9.3f %11.4g %6.1f%% %6s %6s  %s\n", S.name, S.nref, S.nq, S.K,
                   IMPL_NAME[impl], r.h.ms, (double)S.nref * S.nq / (r.h.ms * 1e-3),
                   100.0 * ops / (r.h.ms * 1e-3) / ((double)r.h.peak_tops * 1e12), eq, cok, diff);
        }
        fflush(stdout);
    }
    printf("lab_wgmma: %s (%d failure%s; children exited %d, %d, %d, %d)\n", failures ? "FAILED" : "all equal",
           failures, failures == 1 ? "" : "s", code[0], code[1], code[2], code[3]);
    return failures ? 1 : 0;
}
