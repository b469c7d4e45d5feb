/* The paper's Algorithm 2, batched (cublas_2nn.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cublas_2nn.h"

struct lab_2nn {
    size_t m, mpad, n, batch;
    int fp16_out;
    cublasHandle_t h;
    cudaStream_t s;
    __half *d_refs;    /* (cap, mpad, 128) */
    uint16_t *d_count; /* (cap) */
    size_t nref, cap;
    __half *d_q;       /* (n, 128) */
    size_t qn;
    void *d_S;         /* (batch, n, mpad) column-major per reference: S_b[i + j mpad] */
    int32_t *d_best;   /* (batch, n) passing best row, or -1 */
    uint32_t *d_score; /* (cap) */
};

/* u8 -> binary16: the integer (fp32 outputs: exact dots) or value / 512
 * (fp16 outputs: dots below 1, as the paper's scale factor keeps them). */
__global__ void k_to_half(__half *dst, const uint8_t *src, size_t n, float scale)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2half_rn((float)src[i] * scale);
}

/* Top 2 per (reference, query row): one thread scans the m similarities of
 * its column; the CPU's order (larger, then lower row); the ratio test on
 * d^2 = 2 - 2 s of the RootSIFT similarities s = S / unit. */
template <typename T>
__global__ void k_top2(const T *S, const uint16_t *count, size_t b0, size_t nb, size_t mpad, size_t n, size_t qn,
                       double rr, float unit, int32_t *best)
{
    const size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (t >= nb * n) return;
    const size_t b = t / n, j = t % n;
    const int cnt = count[b0 + b];
    int32_t res = -1;
    if (j < qn && cnt >= 2) {
        const T *col = S + (b * n + j) * mpad;
        float s1 = -1.f, s2 = -1.f;
        int bi = -1;
        for (int i = 0; i < cnt; i++) {
            const float v = (float)col[i];
            if (v > s1) {
                s2 = s1;
                s1 = v;
                bi = i;
            } else if (v > s2) {
                s2 = v;
            }
        }
        const float f1 = s1 / unit, f2 = s2 / unit;
        double e1 = 2.0 - 2.0 * (double)f1, e2 = 2.0 - 2.0 * (double)f2;
        if (e1 < 0) e1 = 0;
        if (e2 < 0) e2 = 0;
        if (e1 < rr * e2) res = bi;
    }
    best[t] = res;
}

/* One-to-one score per reference: distinct rows hit (one block each). */
__global__ void k_score(const int32_t *best, size_t b0, size_t n, uint32_t *score)
{
    __shared__ uint32_t mask[4096 / 32];
    const size_t b = blockIdx.x;
    for (int i = threadIdx.x; i < 4096 / 32; i += blockDim.x) mask[i] = 0;
    __syncthreads();
    for (size_t j = threadIdx.x; j < n; j += blockDim.x) {
        const int32_t r = best[b * n + j];
        if (r >= 0) atomicOr(&mask[r >> 5], 1u << (r & 31));
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        uint32_t c = 0;
        for (int i = threadIdx.x; i < 4096 / 32; i += 32) c += __popc(mask[i]);
        for (int o = 16; o; o >>= 1) c += __shfl_xor_sync(0xffffffffu, c, o);
        if (threadIdx.x == 0) score[b0 + b] = c;
    }
}

lab_2nn_t *lab_2nn_new(size_t m, size_t n, size_t batch, int fp16_out, char *err, size_t errlen)
{
    lab_2nn_t *l = (lab_2nn_t *)calloc(1, sizeof *l);
    if (!l || m > 4096) {
        snprintf(err, errlen, "lab_2nn: bad arguments or out of memory");
        free(l);
        return NULL;
    }
    l->m = m;
    l->mpad = (m + 7) & ~(size_t)7;
    l->n = n;
    l->batch = batch;
    l->fp16_out = fp16_out;
    if (cublasCreate(&l->h) != CUBLAS_STATUS_SUCCESS || cudaStreamCreate(&l->s) != cudaSuccess ||
        cublasSetStream(l->h, l->s) != CUBLAS_STATUS_SUCCESS ||
        cudaMalloc(&l->d_q, n * 128 * sizeof(__half)) != cudaSuccess ||
        cudaMalloc(&l->d_S, batch * n * l->mpad * (fp16_out ? 2 : 4)) != cudaSuccess ||
        cudaMalloc(&l->d_best, batch * n * sizeof(int32_t)) != cudaSuccess) {
        snprintf(err, errlen, "lab_2nn: CUDA/cuBLAS set-up failed (%s)", cudaGetErrorString(cudaGetLastError()));
        lab_2nn_free(l);
        return NULL;
    }
    cublasSetMathMode(l->h, CUBLAS_DEFAULT_MATH);
    return l;
}

void lab_2nn_free(lab_2nn_t *l)
{
    if (!l) return;
    cudaFree(l->d_refs);
    cudaFree(l->d_count);
    cudaFree(l->d_q);
    cudaFree(l->d_S);
    cudaFree(l->d_best);
    cudaFree(l->d_score);
    if (l->h) cublasDestroy(l->h);
    if (l->s) cudaStreamDestroy(l->s);
    free(l);
}

static int upload_half(__half *dst, const uint8_t *src, size_t n, float scale, cudaStream_t s)
{
    uint8_t *tmp = NULL;
    if (cudaMalloc(&tmp, n ? n : 1) != cudaSuccess) return -1;
    if (cudaMemcpyAsync(tmp, src, n, cudaMemcpyHostToDevice, s) != cudaSuccess) return -1;
    k_to_half<<<1024, 256, 0, s>>>(dst, tmp, n, scale);
    if (cudaStreamSynchronize(s) != cudaSuccess) return -1;
    cudaFree(tmp);
    return 0;
}

int lab_2nn_set_refs(lab_2nn_t *l, const uint8_t *const *rows, const uint16_t *counts, size_t nref)
{
    const float scale = l->fp16_out ? 1.0f / 512.0f : 1.0f;
    uint8_t *pad = (uint8_t *)calloc(nref * l->mpad * 128 + 1, 1);
    if (!pad) return -1;
    for (size_t i = 0; i < nref; i++) memcpy(pad + i * l->mpad * 128, rows[i], l->m * 128);
    cudaFree(l->d_refs);
    cudaFree(l->d_count);
    cudaFree(l->d_score);
    l->d_refs = NULL;
    l->d_count = NULL;
    l->d_score = NULL;
    l->nref = nref;
    if (cudaMalloc(&l->d_refs, (nref * l->mpad * 128 + 1) * sizeof(__half)) != cudaSuccess ||
        cudaMalloc(&l->d_count, (nref + 1) * sizeof(uint16_t)) != cudaSuccess ||
        cudaMalloc(&l->d_score, (nref + 1) * sizeof(uint32_t)) != cudaSuccess ||
        cudaMemcpy(l->d_count, counts, nref * sizeof(uint16_t), cudaMemcpyHostToDevice) != cudaSuccess ||
        upload_half(l->d_refs, pad, nref * l->mpad * 128, scale, l->s)) {
        free(pad);
        return -1;
    }
    free(pad);
    return 0;
}

int lab_2nn_set_query(lab_2nn_t *l, const uint8_t *rows, size_t qn)
{
    if (qn > l->n) return -1;
    l->qn = qn;
    if (cudaMemset(l->d_q, 0, l->n * 128 * sizeof(__half)) != cudaSuccess) return -1;
    return upload_half(l->d_q, rows, qn * 128, l->fp16_out ? 1.0f / 512.0f : 1.0f, l->s);
}

/* Every batch: GEMM, top 2, score (scores stay on the device). */
static int run_device(lab_2nn_t *l, double ratio)
{
    const float one = 1.0f, zero = 0.0f;
    const __half hone = __float2half(1.0f), hzero = __float2half(0.0f);
    const float unit = l->fp16_out ? 1.0f : 262144.0f; /* similarity = S / unit */
    for (size_t b0 = 0; b0 < l->nref; b0 += l->batch) {
        const size_t nb = l->nref - b0 < l->batch ? l->nref - b0 : l->batch;
        /* S_b (mpad x n, column-major) = R_b (mpad x 128) Q^T: A = R_b stored
         * as (128 x mpad) column-major, transposed; B = Q as (128 x n). */
        cublasStatus_t st = cublasGemmStridedBatchedEx(
            l->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)l->mpad, (int)l->n, 128,
            l->fp16_out ? (const void *)&hone : (const void *)&one, l->d_refs + b0 * l->mpad * 128, CUDA_R_16F, 128,
            (long long)(l->mpad * 128), l->d_q, CUDA_R_16F, 128, 0,
            l->fp16_out ? (const void *)&hzero : (const void *)&zero, l->d_S, l->fp16_out ? CUDA_R_16F : CUDA_R_32F,
            (int)l->mpad, (long long)(l->mpad * l->n), (int)nb,
            l->fp16_out ? CUBLAS_COMPUTE_16F : CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS) return -1;
        const size_t threads = nb * l->n;
        if (l->fp16_out)
            k_top2<__half><<<(unsigned)((threads + 255) / 256), 256, 0, l->s>>>(
                (const __half *)l->d_S, l->d_count, b0, nb, l->mpad, l->n, l->qn, ratio * ratio, unit, l->d_best);
        else
            k_top2<float><<<(unsigned)((threads + 255) / 256), 256, 0, l->s>>>(
                (const float *)l->d_S, l->d_count, b0, nb, l->mpad, l->n, l->qn, ratio * ratio, unit, l->d_best);
        k_score<<<(unsigned)nb, 256, 0, l->s>>>(l->d_best, b0, l->n, l->d_score);
    }
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

int lab_2nn_run(lab_2nn_t *l, double ratio, uint32_t *scores)
{
    if (run_device(l, ratio)) return -1;
    if (cudaMemcpyAsync(scores, l->d_score, l->nref * sizeof(uint32_t), cudaMemcpyDeviceToHost, l->s) !=
            cudaSuccess ||
        cudaStreamSynchronize(l->s) != cudaSuccess)
        return -1;
    return 0;
}

static int cmp_d(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double lab_2nn_time(lab_2nn_t *l, double ratio, int reps)
{
    cudaEvent_t a, b;
    double *t = (double *)malloc((size_t)(reps > 0 ? reps : 1) * sizeof *t), med;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    run_device(l, ratio); /* warm-up */
    for (int i = 0; i < reps; i++) {
        float ms = 0;
        cudaEventRecord(a, l->s);
        if (run_device(l, ratio)) {
            med = -1;
            goto out;
        }
        cudaEventRecord(b, l->s);
        cudaEventSynchronize(b);
        cudaEventElapsedTime(&ms, a, b);
        t[i] = ms;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_d);
    med = t[reps / 2];
out:
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    free(t);
    return med;
}
