/* The signature family on the GPU (docs/signature.md "GPU extraction"):
 * PCT feature signatures of a batch of RGB images, the same bytes as the C
 * reference (src/features/signature.c). Not the SQFD search (src/gpu/sqfd.cu).
 *
 * Kernels, per batch of images:
 *   k_features  one thread per (image, sampling point): the pixel, its
 *               x, y, L*a*b* and the contrast and entropy of the grey-level
 *               co-occurrences in its window -> samples (img, N, 8);
 *   k_cluster   one block per image: OpenCV's k-means rules on the samples
 *               (joins, drops, iterations, the heaviest k, the weights) ->
 *               the record (img, 8 + 8K).
 *
 * Identity with the CPU. Every float and double operation is an explicit
 * round-to-nearest intrinsic in the CPU's order (the build also passes
 * --fmad=false); every sum the CPU makes in sample order is made in that
 * order by one thread. The three C library functions of the reference:
 *   pow  (sRGB -> linear): the 256 values come from the host (sig_srgb_linear);
 *   cbrt (L*a*b*): CUDA's cbrt (1 ulp). The rounded L*, a*, b* of every one
 *        of the 2^24 colours are the same for any cube root within 2 ulps of
 *        both the host's and the exact one (checked exhaustively by
 *        tests/gpu/test_signature_gpu.c: test_lab_margin);
 *   logf (entropy): the host's logf is not correctly rounded (0.7% of the
 *        arguments a window can produce differ from the nearest float), so
 *        the GPU takes (float)log((double)v) only where that provably equals
 *        the host's logf(v) - the double is more than 2 ulps from where its
 *        float rounding changes, and rounds to the host's value - and the
 *        host's logf(v) from a table (the exceptions, built on the host for
 *        the radius on first use) for every other argument. The arguments
 *        are finite: v = c / (4AB), A, B in 1..2r+1, 1 <= c <= 4AB.
 *
 * Memory (state PGPU_FAM_SIGNATURE in the device context): two slots, one
 * per context stream, each with pinned RGB staging and device RGB (at most
 * 64 MiB), the batch's image table, and per image the samples, the
 * assignments, two centroid tables and the record (device; records also
 * pinned), sized for the plan and grown on demand within a quarter of the
 * budget per slot; the plan (points, seeds, sRGB table, logf exceptions).
 * The host stages batch k + 1 while the GPU works on batch k. */
#include <cuda_runtime.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/context.h"

#define MiB ((size_t)1 << 20)
#define SIG_SLOTS 2
#define SIG_BATCH_MAX 256     /* images per batch (k_features' grid y) */
#define SIG_FEAT_THREADS 128
#define SIG_CL_THREADS 256    /* k_cluster: a multiple of 32, at most 1024 */
#define SIG_CHUNK 256         /* co-occurrence keys counted per pass (per thread, local) */
#define COLS 8                /* floats per sample / centroid row (features/signature.h SIG_COLS) */
#define HEADER 8              /* record header floats (SIG_HEADER) */

/* ------------------------------------------------------------- kernels */

struct sig_item {
    size_t rgb_off; /* in the batch's RGB buffer: (h, 3w) packed */
    int w, h;
};

/* What the kernels read of the configuration. */
struct sig_kconf {
    int samples, seeds, k, iters, minsize, bits, radius, weights, form;
    float join, drop, alpha;
    int nlog;                  /* logf exceptions */
    size_t dim;                /* record floats */
};

__constant__ double c_M[3][3] = {{0.412453, 0.357580, 0.180423},
                                 {0.212671, 0.715160, 0.072169},
                                 {0.019334, 0.119193, 0.950227}};
__constant__ double c_white[3] = {0.950456, 1.0, 1.088754};

/* The grey level of a pixel, as the CPU's grey_at (integers). */
__device__ __forceinline__ int grey_at(const uint8_t *rgb, int w, int x, int y, int bits)
{
    const uint8_t *p = rgb + ((size_t)y * (size_t)w + (size_t)x) * 3;
    const uint32_t s = 9798u * 257u * p[0] + 19235u * 257u * p[1] + 3735u * 257u * p[2];
    return (int)(((s + 16384u) >> 15) >> (16 - bits));
}

/* The host's logf(v) for an argument of a window (see the file comment). */
__device__ __forceinline__ float host_logf(float v, const uint32_t *keys, const float *vals, int n)
{
    const uint32_t b = __float_as_uint(v);
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (keys[mid] < b) lo = mid + 1;
        else hi = mid;
    }
    if (lo < n && keys[lo] == b) return vals[lo];
    return __double2float_rn(log((double)v));
}

/* The CPU's f(t) of CIE L*a*b*. */
__device__ __forceinline__ double lab_f(double t)
{
    return t > 0.008856 ? cbrt(t) : __dadd_rn(__dmul_rn(7.787, t), 16.0 / 116.0);
}

/* Samples (img, N, 8): column 0 zero, 1..7 the features (sample_one). */
__global__ void k_features(const uint8_t *__restrict__ rgb_all, const sig_item *__restrict__ items,
                           const float *__restrict__ pts, const double *__restrict__ lin,
                           const uint32_t *__restrict__ log_keys, const float *__restrict__ log_vals,
                           sig_kconf C, float *__restrict__ samp_all)
{
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= C.samples) return;
    const sig_item it = items[blockIdx.y];
    const uint8_t *rgb = rgb_all + it.rgb_off;
    const int w = it.w, h = it.h, r = C.radius, L = 1 << C.bits;
    float *f = samp_all + ((size_t)blockIdx.y * (size_t)C.samples + (size_t)s) * COLS;
    int x = __float2int_rz(__fmul_rn(pts[2 * s], __int2float_rn(w)));
    int y = __float2int_rz(__fmul_rn(pts[2 * s + 1], __int2float_rn(h)));
    if (x > w - 1) x = w - 1;
    if (y > h - 1) y = h - 1;
    if (x < 0) x = 0;
    if (y < 0) y = 0;

    /* L*a*b* (lab_of), in double */
    double lab[3];
    {
        const uint8_t *p = rgb + ((size_t)y * (size_t)w + (size_t)x) * 3;
        const double l0 = lin[p[0]], l1 = lin[p[1]], l2 = lin[p[2]];
        double sum[3], fr[3];
        for (int k = 0; k < 3; k++) {
            sum[k] = __dadd_rn(__dadd_rn(__dmul_rn(c_M[k][0], l0), __dmul_rn(c_M[k][1], l1)),
                               __dmul_rn(c_M[k][2], l2));
            fr[k] = lab_f(__ddiv_rn(sum[k], c_white[k]));
        }
        lab[0] = sum[1] > 0.008856 ? __dsub_rn(__dmul_rn(116.0, fr[1]), 16.0) : __dmul_rn(903.3, sum[1]);
        lab[1] = __dmul_rn(500.0, __dsub_rn(fr[0], fr[1]));
        lab[2] = __dmul_rn(200.0, __dsub_rn(fr[1], fr[2]));
    }

    /* contrast and entropy (contrast_entropy): the co-occurrences counted
     * SIG_CHUNK keys (a * L + b, a >= b) at a time, and the nonzero ones
     * taken in ascending key order - the CPU's (a, then b <= a) order */
    float c = 0.0f, e = 0.0f;
    {
        const int x0 = x > r ? x - r : 0, y0 = y > r ? y - r : 0;
        const int x1 = w - 1 < x + r + 1 ? w - 1 : x + r + 1, y1 = h - 1 < y + r + 1 ? h - 1 : y + r + 1;
        if (x1 > x0 && y1 > y0) {
            const float norm = __int2float_rn((x1 - x0) * (y1 - y0) * 4);
            int kmin = L * L, kmax = -1;
            uint32_t cnt[SIG_CHUNK];
#define SIG_KEY(a, b) ((a) > (b) ? (a) * L + (b) : (b) * L + (a))
            if (L * L > SIG_CHUNK) /* the keys' range, to skip empty chunks */
                for (int j = y0; j < y1; j++)
                    for (int i = x0; i < x1; i++) {
                        const int g = grey_at(rgb, w, i, j, C.bits), dn = grey_at(rgb, w, i, j + 1, C.bits),
                                  rt = grey_at(rgb, w, i + 1, j, C.bits), dg = grey_at(rgb, w, i + 1, j + 1, C.bits);
                        const int k4[4] = {SIG_KEY(g, dn), SIG_KEY(g, rt), SIG_KEY(g, dg), SIG_KEY(rt, dn)};
                        for (int q = 0; q < 4; q++) {
                            kmin = k4[q] < kmin ? k4[q] : kmin;
                            kmax = k4[q] > kmax ? k4[q] : kmax;
                        }
                    }
            else {
                kmin = 0;
                kmax = L * L - 1;
            }
            for (int k0 = kmin; k0 <= kmax; k0 += SIG_CHUNK) {
                for (int q = 0; q < SIG_CHUNK; q++) cnt[q] = 0;
                for (int j = y0; j < y1; j++)
                    for (int i = x0; i < x1; i++) {
                        const int g = grey_at(rgb, w, i, j, C.bits), dn = grey_at(rgb, w, i, j + 1, C.bits),
                                  rt = grey_at(rgb, w, i + 1, j, C.bits), dg = grey_at(rgb, w, i + 1, j + 1, C.bits);
                        const unsigned k4[4] = {(unsigned)(SIG_KEY(g, dn) - k0), (unsigned)(SIG_KEY(g, rt) - k0),
                                                (unsigned)(SIG_KEY(g, dg) - k0), (unsigned)(SIG_KEY(rt, dn) - k0)};
                        for (int q = 0; q < 4; q++)
                            if (k4[q] < SIG_CHUNK) cnt[k4[q]]++;
                    }
                for (int q = 0; q < SIG_CHUNK; q++)
                    if (cnt[q]) {
                        const int key = k0 + q, a = key / L, b = key - a * L;
                        const float v = __fdiv_rn(__uint2float_rn(cnt[q]), norm);
                        c = __fadd_rn(c, __fmul_rn(__int2float_rn((b - a) * (b - a)), v));
                        e = __fsub_rn(e, __fmul_rn(v, host_logf(v, log_keys, log_vals, C.nlog)));
                    }
            }
#undef SIG_KEY
        }
    }
    f[0] = 0.0f;
    f[1] = __fdiv_rn(__int2float_rn(x), __int2float_rn(w));
    f[2] = __fdiv_rn(__int2float_rn(y), __int2float_rn(h));
    f[3] = __double2float_rn(__ddiv_rn(floor(__dadd_rn(lab[0], 0.5)), 100.0));
    f[4] = __double2float_rn(__ddiv_rn(floor(__dadd_rn(lab[1], 0.5)), 127.0));
    f[5] = __double2float_rn(__ddiv_rn(floor(__dadd_rn(lab[2], 0.5)), 127.0));
    f[6] = __fdiv_rn(c, 25.0f);
    f[7] = __fdiv_rn(e, 4.0f);
}

/* L2 distance of columns 1..7 of two rows, in float (row_dist). */
__device__ __forceinline__ float row_dist(const float *a, const float *b)
{
    float s = 0.0f;
    for (int d = 1; d < COLS; d++) {
        const float t = __fsub_rn(a[d], b[d]);
        s = __fadd_rn(s, __fmul_rn(t, t));
    }
    return __fsqrt_rn(s);
}

/* Exclusive prefix of flag over the block (every thread calls it); *total
 * gets the block's count. sh: 33 ints of shared memory. */
__device__ int block_scan(int flag, int *total, int *sh)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const unsigned m = __ballot_sync(0xffffffffu, flag);
    const int pre = __popc(m & ((1u << lane) - 1u));
    if (lane == 0) sh[warp] = __popc(m);
    __syncthreads();
    if (threadIdx.x == 0) {
        int acc = 0;
        for (int k = 0; k < nw; k++) {
            const int t = sh[k];
            sh[k] = acc;
            acc += t;
        }
        sh[32] = acc;
    }
    __syncthreads();
    const int r = sh[warp] + pre;
    *total = sh[32];
    __syncthreads();
    return r;
}

/* Stable compaction of rows src[0 .. n) into dst: rows whose weight
 * (column 0) is > thr; mean = 0: copied (drop_light), mean = 1: written as
 * the sums' means with the weight kept (the end of an iteration). Returns
 * the rows kept (the same in every thread). */
__device__ int compact(float *dst, const float *src, int n, float thr, int mean, int *sh)
{
    int kept = 0;
    for (int base = 0; base < n; base += blockDim.x) {
        const int i = base + threadIdx.x;
        const int f = i < n && src[i * COLS] > thr;
        int total;
        const int pos = kept + block_scan(f, &total, sh);
        if (f) {
            const float wi = src[i * COLS];
            dst[pos * COLS] = wi;
            for (int d = 1; d < COLS; d++) dst[pos * COLS + d] = mean ? __fdiv_rn(src[i * COLS + d], wi) : src[i * COLS + d];
        }
        kept += total;
    }
    __syncthreads();
    return kept;
}

/* join_close: a centroid with a later live one within join gets weight 0.
 * Whether row i goes depends only on rows after it, whose weights the CPU
 * has not changed when it reaches i, so every row is decided at once.
 * flag: n ints of scratch. */
__device__ void join_close(float *cl, int n, float join, int *flag)
{
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        int f = 0;
        if (cl[i * COLS] != 0.0f)
            for (int j = i + 1; j < n; j++)
                if (cl[j * COLS] > 0.0f && row_dist(cl + i * COLS, cl + j * COLS) <= join) {
                    f = 1;
                    break;
                }
        flag[i] = f;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        if (flag[i]) cl[i * COLS] = 0.0f;
    __syncthreads();
}

/* One image per block: kmeans + sig_cluster. */
__global__ void __launch_bounds__(SIG_CL_THREADS) k_cluster(const float *__restrict__ samp_all,
                                                            const int *__restrict__ seed_idx, float *cl_all,
                                                            float *tmp_all, int *best_all, float *out_all, sig_kconf C)
{
    __shared__ int sh[33];
    __shared__ float s_norm;
    const int N = C.samples, S = C.seeds, K = C.k;
    const float *samp = samp_all + (size_t)blockIdx.x * (size_t)N * COLS;
    float *A = cl_all + (size_t)blockIdx.x * (size_t)S * COLS;
    float *B = tmp_all + (size_t)blockIdx.x * (size_t)S * COLS;
    int *best = best_all + (size_t)blockIdx.x * (size_t)N;
    float *out = out_all + (size_t)blockIdx.x * C.dim;
    int n = S;

    for (int q = threadIdx.x; q < S * COLS; q += blockDim.x) {
        const int i = q / COLS, d = q - i * COLS;
        A[q] = d == 0 ? 1.0f : samp[(size_t)seed_idx[i] * COLS + d];
    }
    __syncthreads();
    join_close(A, n, C.join, best);
    n = compact(B, A, n, C.drop, 0, sh);
    { float *t = A; A = B; B = t; }
    for (int it = 0; it < C.iters && n > 0; it++) {
        /* every sample to its nearest centroid, the first of equals */
        for (int s = threadIdx.x; s < N; s += blockDim.x) {
            const float *x = samp + (size_t)s * COLS;
            int b = 0;
            float bd = row_dist(A, x);
            for (int c = 1; c < n; c++) {
                const float d = row_dist(A + c * COLS, x);
                if (d < bd) {
                    bd = d;
                    b = c;
                }
            }
            best[s] = b;
        }
        __syncthreads();
        /* sizes and sums, each in sample order by one thread */
        for (int q = threadIdx.x; q < n * COLS; q += blockDim.x) {
            const int c = q / COLS, d = q - c * COLS;
            if (d == 0) {
                int cnt = 0;
                for (int s = 0; s < N; s++) cnt += best[s] == c;
                B[q] = (float)cnt; /* exact: cnt <= N <= 2^20 */
            } else {
                float acc = 0.0f;
                for (int s = 0; s < N; s++)
                    if (best[s] == c) acc = __fadd_rn(acc, samp[(size_t)s * COLS + d]);
                B[q] = acc;
            }
        }
        __syncthreads();
        n = compact(A, B, n, (float)((it + 1) * C.minsize), 1, sh);
        if (n == 0) break;
        join_close(A, n, C.join, best);
        n = compact(B, A, n, C.drop, 0, sh);
        { float *t = A; A = B; B = t; }
    }
    if (n == 0) { /* one centroid: the mean of all samples */
        if (threadIdx.x < COLS) {
            const int d = threadIdx.x;
            float acc = 0.0f;
            if (d > 0) {
                for (int s = 0; s < N; s++) acc = __fadd_rn(acc, samp[(size_t)s * COLS + d]);
                acc = __fdiv_rn(acc, (float)N);
            } else {
                acc = (float)N;
            }
            A[d] = acc;
        }
        n = 1;
        __syncthreads();
    }
    /* the record: rows in order, or the K heaviest (a stable order: rank =
     * heavier rows + equal rows before) */
    for (size_t q = threadIdx.x; q < C.dim; q += blockDim.x) out[q] = 0.0f;
    __syncthreads();
    float *rows = out + HEADER;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        int rank = i;
        if (n > K) {
            const float wi = A[i * COLS];
            rank = 0;
            for (int j = 0; j < n; j++) {
                const float wj = A[j * COLS];
                rank += wj > wi || (wj == wi && j < i);
            }
        }
        if (rank < K)
            for (int d = 0; d < COLS; d++) rows[rank * COLS + d] = A[i * COLS + d];
    }
    if (n > K) n = K;
    __syncthreads();
    if (C.weights == 1) { /* SIG_WEIGHTS_MAX: w * (1 / largest) */
        if (threadIdx.x == 0) {
            float mx = rows[0];
            for (int i = 1; i < n; i++)
                if (rows[i * COLS] > mx) mx = rows[i * COLS];
            s_norm = __fdiv_rn(1.0f, mx);
        }
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += blockDim.x) rows[i * COLS] = __fmul_rn(rows[i * COLS], s_norm);
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) rows[i * COLS] = __fdiv_rn(rows[i * COLS], (float)N);
    }
    if (threadIdx.x == 0) {
        out[0] = (float)n;
        out[1] = (float)K;
        out[2] = C.alpha;
        out[3] = (float)C.form;
        out[4] = 1.0f; /* SIG_VERSION */
    }
}

/* ------------------------------------------------------------- the state */

struct sig_slot {
    cudaStream_t stream;
    cudaEvent_t done;
    int busy;
    uint8_t *h_stage, *d_rgb;     /* rgb_cap bytes */
    sig_item *h_items, *d_items;  /* SIG_BATCH_MAX */
    float *d_samp, *d_cl, *d_tmp, *d_out, *h_out; /* per image: N*8, S*8, S*8, dim, dim floats */
    int *d_best;                  /* per image N */
    size_t cap_samp, cap_cl, cap_tmp, cap_out, cap_hout, cap_best; /* bytes allocated */
    size_t idx[SIG_BATCH_MAX];    /* the batch's images (indexes in the call) */
    int nimg;
};

struct sig_state {
    size_t rgb_cap;
    sig_slot slot[SIG_SLOTS];
    float *d_pts;
    int *d_seeds;
    double *d_lin;
    size_t cap_pts, cap_seeds;
    uint32_t *d_log_keys;         /* logf exceptions for log_radius, sorted */
    float *d_log_vals;
    int nlog, log_radius;         /* -1: none yet */
};

#define DEV(p, bytes, tag) PATINA_TRY(pgpu_dev_alloc(g, (void **)&(p), (bytes), PGPU_FAM_SIGNATURE, tag))
#define PIN(p, bytes, tag) PATINA_TRY(pgpu_pin_alloc(g, (void **)&(p), (bytes), PGPU_FAM_SIGNATURE, tag))

static void sig_release(patina_gpu_t *g, void *state)
{
    sig_state *S = (sig_state *)state;
    (void)cudaSetDevice(g->device);
    for (int k = 0; k < SIG_SLOTS; k++) {
        sig_slot *s = &S->slot[k];
        if (s->stream) cudaStreamSynchronize(s->stream);
        pgpu_free_n(g, 10, &s->h_stage, &s->d_rgb, &s->h_items, &s->d_items, &s->d_samp, &s->d_cl, &s->d_tmp,
                    &s->d_out, &s->h_out, &s->d_best);
        if (s->done) cudaEventDestroy(s->done);
    }
    pgpu_free_n(g, 5, &S->d_pts, &S->d_seeds, &S->d_lin, &S->d_log_keys, &S->d_log_vals);
    (void)cudaGetLastError();
    free(S);
}

static patina_status open_slot(patina_gpu_t *g, sig_state *S, sig_slot *s, int k)
{
    cudaEvent_t ev;
    s->stream = (cudaStream_t)pgpu_stream(g, k);
    PGPU_CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    s->done = ev;
    PIN(s->h_stage, S->rgb_cap, "RGB staging");
    DEV(s->d_rgb, S->rgb_cap, "RGB input");
    PIN(s->h_items, SIG_BATCH_MAX * sizeof(sig_item), "image table");
    DEV(s->d_items, SIG_BATCH_MAX * sizeof(sig_item), "image table");
    return PATINA_OK;
}

/* g's signature state, made on first use: RGB buffers of at most 64 MiB
 * per slot (an eighth of the budget each when that is less). */
static patina_status sig_state_of(patina_gpu_t *g, sig_state **out)
{
    sig_state *S = (sig_state *)pgpu_state(g, PGPU_FAM_SIGNATURE);
    patina_status s = PATINA_OK;
    *out = S;
    if (S) return PATINA_OK;
    S = (sig_state *)calloc(1, sizeof *S);
    if (!S) return patina__fail(PATINA_E_NOMEM, "gpu: signature: out of host memory");
    S->log_radius = -1;
    S->rgb_cap = (size_t)(g->budget / 8);
    if (S->rgb_cap > 64 * MiB) S->rgb_cap = 64 * MiB;
    S->rgb_cap &= ~(size_t)0xffff;
    pgpu_set_state(g, PGPU_FAM_SIGNATURE, S, sig_release);
    if (S->rgb_cap < MiB)
        s = patina__fail(PATINA_E_LIMIT, "gpu: signature: memory budget %.1f MiB is below its minimum 8 MiB",
                         (double)g->budget / (double)MiB);
    for (int k = 0; s == PATINA_OK && k < SIG_SLOTS; k++) s = open_slot(g, S, &S->slot[k], k);
    if (s != PATINA_OK) {
        pgpu_drop_state(g, PGPU_FAM_SIGNATURE);
        return s;
    }
    *out = S;
    return PATINA_OK;
}

/* A device buffer of at least `need` bytes (contents not kept). */
static patina_status grow(patina_gpu_t *g, void **p, size_t *cap, size_t need, const char *tag)
{
    if (*cap >= need && *p) return PATINA_OK;
    pgpu_free(g, *p);
    *p = NULL;
    *cap = 0;
    PATINA_TRY(pgpu_dev_alloc(g, p, need, PGPU_FAM_SIGNATURE, tag));
    *cap = need;
    return PATINA_OK;
}

/* Arguments v = c / (4AB) (floats, as the CPU computes them) for A, B in
 * 1..2r+1 and 1 <= c <= 4AB where (float)log((double)v) is not provably the
 * host's logf(v): the double, moved by up to 2 ulps either way, does not
 * round to logf(v). Sorted by the float's bits (v > 0: by value), unique. */
struct logx {
    uint32_t key;
    float val;
};

static int cmp_logx(const void *a, const void *b)
{
    const uint32_t x = ((const logx *)a)->key, y = ((const logx *)b)->key;
    return x < y ? -1 : x > y;
}

static patina_status log_exceptions(logx **out, int *nout, int r)
{
    const int side = 2 * r + 1, maxn = 4 * side * side;
    unsigned char *seen = (unsigned char *)calloc((size_t)maxn + 1, 1);
    logx *v = NULL;
    size_t n = 0, cap = 0;
    if (!seen) return patina__fail(PATINA_E_NOMEM, "gpu: signature: out of host memory");
    for (int a = 1; a <= side; a++)
        for (int b = 1; b <= side; b++) {
            const int nn = 4 * a * b;
            if (seen[nn]) continue;
            seen[nn] = 1;
            const float norm = (float)nn;
            for (int c = 1; c <= nn; c++) {
                const float x = (float)c / norm, lf = logf(x);
                const double d = log((double)x);
                double lo = d, hi = d;
                for (int k = 0; k < 2; k++) {
                    lo = nextafter(lo, -INFINITY);
                    hi = nextafter(hi, INFINITY);
                }
                if ((float)lo == lf && (float)hi == lf) continue;
                if (n == cap) {
                    cap = cap ? 2 * cap : 1024;
                    logx *t = (logx *)realloc(v, cap * sizeof *v);
                    if (!t) {
                        free(v);
                        free(seen);
                        return patina__fail(PATINA_E_NOMEM, "gpu: signature: out of host memory");
                    }
                    v = t;
                }
                memcpy(&v[n].key, &x, 4);
                v[n++].val = lf;
            }
        }
    free(seen);
    if (n) qsort(v, n, sizeof *v, cmp_logx);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (m == 0 || v[i].key != v[m - 1].key) v[m++] = v[i];
    *out = v;
    *nout = (int)m;
    return PATINA_OK;
}

/* The plan on the device: points, seeds, the sRGB table (every call: a few
 * KB), the logf exceptions (when the radius changes). */
static patina_status plan_ready(patina_gpu_t *g, sig_state *S, const patina_gpu_sig_conf_t *c)
{
    PATINA_TRY(grow(g, (void **)&S->d_pts, &S->cap_pts, (size_t)c->samples * 2 * sizeof(float), "sampling points"));
    PATINA_TRY(grow(g, (void **)&S->d_seeds, &S->cap_seeds, (size_t)c->seeds * sizeof(int), "initial centroids"));
    if (!S->d_lin) DEV(S->d_lin, 256 * sizeof(double), "sRGB table");
    /* on slot 0's stream and waited for: the context's streams do not
     * synchronise with the legacy default stream, and a pageable copy may
     * return before its DMA is done */
    const cudaStream_t st = S->slot[0].stream;
    PGPU_CU(cudaMemcpyAsync(S->d_pts, c->pts, (size_t)c->samples * 2 * sizeof(float), cudaMemcpyHostToDevice, st));
    PGPU_CU(cudaMemcpyAsync(S->d_seeds, c->seed_idx, (size_t)c->seeds * sizeof(int), cudaMemcpyHostToDevice, st));
    PGPU_CU(cudaMemcpyAsync(S->d_lin, c->lin, 256 * sizeof(double), cudaMemcpyHostToDevice, st));
    PGPU_CU(cudaStreamSynchronize(st));
    if (S->log_radius != c->radius) {
        logx *v = NULL;
        int n = 0;
        patina_status s;
        pgpu_free_n(g, 2, &S->d_log_keys, &S->d_log_vals);
        S->log_radius = -1;
        PATINA_TRY(log_exceptions(&v, &n, c->radius));
        uint32_t *k = (uint32_t *)malloc(((size_t)n + 1) * sizeof *k);
        float *f = (float *)malloc(((size_t)n + 1) * sizeof *f);
        s = k && f ? PATINA_OK : patina__fail(PATINA_E_NOMEM, "gpu: signature: out of host memory");
        for (int i = 0; s == PATINA_OK && i < n; i++) {
            k[i] = v[i].key;
            f[i] = v[i].val;
        }
        if (s == PATINA_OK)
            s = pgpu_dev_alloc(g, (void **)&S->d_log_keys, ((size_t)n + 1) * 4, PGPU_FAM_SIGNATURE, "logf exceptions");
        if (s == PATINA_OK)
            s = pgpu_dev_alloc(g, (void **)&S->d_log_vals, ((size_t)n + 1) * 4, PGPU_FAM_SIGNATURE, "logf exceptions");
        if (s == PATINA_OK && n) {
            cudaError_t e = cudaMemcpyAsync(S->d_log_keys, k, (size_t)n * 4, cudaMemcpyHostToDevice, st);
            if (e == cudaSuccess) e = cudaMemcpyAsync(S->d_log_vals, f, (size_t)n * 4, cudaMemcpyHostToDevice, st);
            if (e == cudaSuccess) e = cudaStreamSynchronize(st);
            if (e != cudaSuccess) s = pgpu_fail((int)e, "cudaMemcpy(logf exceptions)", __FILE__, __LINE__);
        }
        free(v);
        free(k);
        free(f);
        if (s != PATINA_OK) return s;
        S->nlog = n;
        S->log_radius = c->radius;
    }
    return PATINA_OK;
}

/* Per-image scratch of a plan in bytes: samples, assignments, two centroid
 * tables, the record. */
static size_t per_image(const patina_gpu_sig_conf_t *c, size_t dim)
{
    return (size_t)c->samples * (COLS * sizeof(float) + sizeof(int)) + 2 * (size_t)c->seeds * COLS * sizeof(float) +
           dim * sizeof(float);
}

/* Every slot's scratch for batches of `imgs` images. */
static patina_status scratch_ready(patina_gpu_t *g, sig_state *S, const patina_gpu_sig_conf_t *c, size_t dim,
                                   size_t imgs)
{
    for (int k = 0; k < SIG_SLOTS; k++) {
        sig_slot *s = &S->slot[k];
        const size_t samp = imgs * (size_t)c->samples * COLS * sizeof(float),
                     best = imgs * (size_t)c->samples * sizeof(int),
                     cl = imgs * (size_t)c->seeds * COLS * sizeof(float), out = imgs * dim * sizeof(float);
        PATINA_TRY(grow(g, (void **)&s->d_samp, &s->cap_samp, samp, "samples"));
        PATINA_TRY(grow(g, (void **)&s->d_best, &s->cap_best, best, "assignments"));
        PATINA_TRY(grow(g, (void **)&s->d_cl, &s->cap_cl, cl, "centroids"));
        PATINA_TRY(grow(g, (void **)&s->d_tmp, &s->cap_tmp, cl, "centroid sums"));
        PATINA_TRY(grow(g, (void **)&s->d_out, &s->cap_out, out, "records"));
        if (s->cap_hout < out || !s->h_out) {
            pgpu_free(g, s->h_out);
            s->h_out = NULL;
            s->cap_hout = 0;
            PIN(s->h_out, out, "records");
            s->cap_hout = out;
        }
    }
    return PATINA_OK;
}

struct sig_job {
    patina_gpu_t *g;
    sig_state *S;
    const patina_gpu_sig_conf_t *c;
    sig_kconf kc;
    float *out;
    const patina_image_t *imgs;
    size_t n, next, batch, per_batch;
    patina_status *st;
};

/* Waits for slot si's batch and hands its records to the caller. */
static patina_status harvest(sig_job *j, int si)
{
    sig_slot *s = &j->S->slot[si];
    if (!s->busy) return PATINA_OK;
    s->busy = 0;
    PGPU_CU(cudaEventSynchronize(s->done));
    for (int k = 0; k < s->nimg; k++) {
        memcpy(j->out + s->idx[k] * j->kc.dim, s->h_out + (size_t)k * j->kc.dim, j->kc.dim * sizeof(float));
        j->st[s->idx[k]] = PATINA_OK;
    }
    return PATINA_OK;
}

/* Fills slot si with the next images that fit (staged into its pinned
 * buffer) and issues its copies, kernels and the records' copy back. */
static patina_status submit(sig_job *j, int si)
{
    sig_state *S = j->S;
    sig_slot *s = &S->slot[si];
    size_t used = 0;
    unsigned char dev[SIG_BATCH_MAX]; /* 1: the image is in device memory (decoded on the GPU) */
    s->nimg = 0;
    while (j->next < j->n && (size_t)s->nimg < j->per_batch) {
        const patina_image_t *im = &j->imgs[j->next];
        const size_t rb = 3 * (size_t)im->width, bytes = rb * (size_t)im->height;
        if (bytes > S->rgb_cap) {
            j->st[j->next++] = patina__fail(PATINA_E_LIMIT, "gpu: signature: image of %dx%d exceeds a batch (%zu MiB)",
                                            im->width, im->height, S->rgb_cap / MiB);
            continue;
        }
        if (used + bytes > S->rgb_cap) break;
        dev[s->nimg] = (unsigned char)(patina_gpu_image_on_device(im) != 0);
        if (!dev[s->nimg]) /* device images are copied on the device below */
            for (int y = 0; y < im->height; y++)
                memcpy(s->h_stage + used + (size_t)y * rb, im->data + (size_t)y * im->stride, rb);
        s->h_items[s->nimg].rgb_off = used;
        s->h_items[s->nimg].w = im->width;
        s->h_items[s->nimg].h = im->height;
        s->idx[s->nimg++] = j->next++;
        used += (bytes + 15) & ~(size_t)15;
        if (used > S->rgb_cap) used = S->rgb_cap;
    }
    if (s->nimg == 0) return PATINA_OK;
    const cudaStream_t st = s->stream;
    PGPU_CU(cudaMemcpyAsync(s->d_rgb, s->h_stage, used, cudaMemcpyHostToDevice, st));
    for (int k = 0; k < s->nimg; k++) /* after the staged copy, on the same stream: these bytes win */
        if (dev[k]) {
            const patina_image_t *im = &j->imgs[s->idx[k]];
            const size_t rb = 3 * (size_t)im->width;
            PGPU_CU(cudaMemcpy2DAsync(s->d_rgb + s->h_items[k].rgb_off, rb, im->data, im->stride, rb,
                                      (size_t)im->height, cudaMemcpyDeviceToDevice, st));
        }
    PGPU_CU(cudaMemcpyAsync(s->d_items, s->h_items, (size_t)s->nimg * sizeof(sig_item), cudaMemcpyHostToDevice, st));
    const dim3 grid((unsigned)((j->c->samples + SIG_FEAT_THREADS - 1) / SIG_FEAT_THREADS), (unsigned)s->nimg);
    k_features<<<grid, SIG_FEAT_THREADS, 0, st>>>(s->d_rgb, s->d_items, S->d_pts, S->d_lin, S->d_log_keys,
                                                  S->d_log_vals, j->kc, s->d_samp);
    PGPU_CU(cudaGetLastError());
    k_cluster<<<(unsigned)s->nimg, SIG_CL_THREADS, 0, st>>>(s->d_samp, S->d_seeds, s->d_cl, s->d_tmp, s->d_best,
                                                           s->d_out, j->kc);
    PGPU_CU(cudaGetLastError());
    PGPU_CU(cudaMemcpyAsync(s->h_out, s->d_out, (size_t)s->nimg * j->kc.dim * sizeof(float), cudaMemcpyDeviceToHost, st));
    PGPU_CU(cudaEventRecord(s->done, st));
    s->busy = 1;
    return PATINA_OK;
}

static patina_status run_job(sig_job *j)
{
    patina_status s = PATINA_OK, s2;
    while (s == PATINA_OK && j->next < j->n) {
        const int si = (int)(j->batch % SIG_SLOTS);
        if ((s = harvest(j, si)) != PATINA_OK) break;
        s = submit(j, si);
        j->batch++;
    }
    for (int k = 0; k < SIG_SLOTS; k++) { /* oldest first */
        s2 = harvest(j, (int)((j->batch + (size_t)k) % SIG_SLOTS));
        if (s == PATINA_OK) s = s2;
    }
    if (s != PATINA_OK)
        for (int k = 0; k < SIG_SLOTS; k++) {
            cudaStreamSynchronize(j->S->slot[k].stream);
            j->S->slot[k].busy = 0;
        }
    return s;
}

patina_status patina_gpu_signature(patina_gpu_t *g, const patina_gpu_sig_conf_t *c, float *out,
                                   const patina_image_t *imgs, size_t n, patina_status *st)
{
    sig_job j;
    patina_status s;
    size_t dim, pi, per;
    if (!g || !c || !st || (n && (!out || !imgs))) return patina__fail(PATINA_E_INVALID, "gpu: signature: null argument");
    if (n == 0) return PATINA_OK;
    dim = HEADER + COLS * (size_t)c->k;
    memset(out, 0, n * dim * sizeof(float));
    for (size_t i = 0; i < n; i++) st[i] = PATINA_E_UNAVAILABLE;
    memset(&j, 0, sizeof j);
    s = cudaSetDevice(g->device) == cudaSuccess ? PATINA_OK : patina__fail(PATINA_E_UNAVAILABLE, "gpu: signature: device");
    if (s == PATINA_OK) s = sig_state_of(g, &j.S);
    /* a quarter of the budget per slot for the images' scratch */
    pi = per_image(c, dim);
    per = (size_t)(g->budget / 4) / pi;
    if (per > SIG_BATCH_MAX) per = SIG_BATCH_MAX;
    if (s == PATINA_OK && per == 0) {
        s = patina__fail(PATINA_E_LIMIT, "gpu: signature: %.1f MiB of scratch per image exceed the memory budget",
                         (double)pi / (double)MiB);
        for (size_t i = 0; i < n; i++) st[i] = s;
        return PATINA_OK; /* the caller computes them on the CPU */
    }
    if (s == PATINA_OK) s = plan_ready(g, j.S, c);
    if (s == PATINA_OK) s = scratch_ready(g, j.S, c, dim, per);
    if (s == PATINA_OK) {
        j.g = g;
        j.c = c;
        j.out = out;
        j.imgs = imgs;
        j.n = n;
        j.st = st;
        j.per_batch = per;
        j.kc.samples = c->samples;
        j.kc.seeds = c->seeds;
        j.kc.k = c->k;
        j.kc.iters = c->iters;
        j.kc.minsize = c->minsize;
        j.kc.bits = c->bits;
        j.kc.radius = c->radius;
        j.kc.weights = c->weights;
        j.kc.form = c->form;
        j.kc.join = c->join;
        j.kc.drop = c->drop;
        j.kc.alpha = c->alpha;
        j.kc.nlog = j.S->nlog;
        j.kc.dim = dim;
        s = run_job(&j);
    }
    if (s != PATINA_OK) {
        (void)cudaGetLastError();
        for (size_t i = 0; i < n; i++)
            if (st[i] != PATINA_OK && st[i] != PATINA_E_LIMIT) {
                st[i] = s;
                memset(out + i * dim, 0, dim * sizeof(float));
            }
    }
    return s;
}
