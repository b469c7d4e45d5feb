/* The paper's block-wise SQFD kernel (blockwise.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "blockwise.h"

#define BW_THREADS 256 /* the paper's group size */

struct lab_bw {
    float *d_rows;  /* (n, dim) */
    float *d_q;     /* (dim) */
    double *d_out;  /* (n) */
    size_t n, dim, block;
    cudaStream_t s;
};

template <typename T> __device__ __forceinline__ T bw_exp(T x);
template <> __device__ __forceinline__ float bw_exp<float>(float x) { return expf(x); }
template <> __device__ __forceinline__ double bw_exp<double>(double x) { return exp(x); }
template <typename T> __device__ __forceinline__ T bw_sqrt(T x);
template <> __device__ __forceinline__ float bw_sqrt<float>(float x) { return sqrtf(x); }
template <> __device__ __forceinline__ double bw_sqrt<double>(double x) { return sqrt(x); }

/* One thread group per distance: row r0 + blockIdx.x against the query. */
template <typename T>
__global__ void __launch_bounds__(BW_THREADS)
k_bw(const float *__restrict__ rows, size_t dim, size_t r0, const float *__restrict__ q, double *__restrict__ out)
{
    extern __shared__ float sm[]; /* (n + m, 8): the query's rows, then the row's */
    __shared__ T part[BW_THREADS];
    const size_t r = r0 + blockIdx.x;
    const float *o = rows + r * dim;
    const int n = (int)q[0], m = (int)o[0], L = n + m, form = (int)q[3];
    const T alpha = (T)q[2];
    for (int i = threadIdx.x; i < 8 * n; i += BW_THREADS) sm[i] = q[8 + i];
    for (int i = threadIdx.x; i < 8 * m; i += BW_THREADS) sm[8 * n + i] = o[8 + i];
    __syncthreads();
    T acc = (T)0;
    for (int t = threadIdx.x; t < L * L; t += BW_THREADS) { /* the irregular mapping: item t of the matrix */
        const int i = t / L, j = t - i * L;
        const float *a = sm + 8 * i, *b = sm + 8 * j;
        T d2 = (T)0, f;
        for (int k = 1; k < 8; k++) {
            const T x = (T)a[k] - (T)b[k];
            d2 += x * x;
        }
        f = form == 0 ? bw_exp<T>(-alpha * d2) : form == 1 ? (T)1 / (alpha + bw_sqrt<T>(d2)) : -bw_sqrt<T>(d2);
        acc += (i < n ? (T)a[0] : -(T)a[0]) * (j < n ? (T)b[0] : -(T)b[0]) * f;
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x == 0) { /* thread 0 sums the partial sums (the paper's) */
        T s = (T)0;
        for (int i = 0; i < BW_THREADS; i++) s += part[i];
        out[r] = s > (T)0 ? sqrt((double)s) : 0.0;
    }
}

static void say(char *err, size_t len, const char *what, cudaError_t e)
{
    if (err && len) snprintf(err, len, "%s: %s", what, cudaGetErrorString(e));
}

lab_bw_t *lab_bw_new(const float *recs, size_t n, size_t dim, size_t block, char *err, size_t errlen)
{
    lab_bw_t *l = (lab_bw_t *)calloc(1, sizeof *l);
    cudaError_t e;
    if (!l) return NULL;
    l->n = n;
    l->dim = dim;
    l->block = block ? block : 1;
    if ((e = cudaStreamCreateWithFlags(&l->s, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMalloc((void **)&l->d_rows, n * dim * sizeof(float) + 4)) != cudaSuccess ||
        (e = cudaMalloc((void **)&l->d_q, dim * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&l->d_out, n * sizeof(double) + 8)) != cudaSuccess ||
        (e = cudaMemcpy(l->d_rows, recs, n * dim * sizeof(float), cudaMemcpyHostToDevice)) != cudaSuccess) {
        say(err, errlen, "lab_bw_new", e);
        lab_bw_free(l);
        return NULL;
    }
    return l;
}

void lab_bw_free(lab_bw_t *l)
{
    if (!l) return;
    if (l->d_rows) (void)cudaFree(l->d_rows);
    if (l->d_q) (void)cudaFree(l->d_q);
    if (l->d_out) (void)cudaFree(l->d_out);
    if (l->s) (void)cudaStreamDestroy(l->s);
    (void)cudaGetLastError();
    free(l);
}

/* Every block of rows launched (one launch per block of l->block rows). */
static cudaError_t pass(lab_bw_t *l, const float *q, int dbl)
{
    const size_t smem = 2 * (l->dim - 8) * sizeof(float);
    cudaError_t e = cudaMemcpyAsync(l->d_q, q, l->dim * sizeof(float), cudaMemcpyHostToDevice, l->s);
    if (e == cudaSuccess && smem > 48 * 1024) {
        e = dbl ? cudaFuncSetAttribute(k_bw<double>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)
                : cudaFuncSetAttribute(k_bw<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    }
    for (size_t r0 = 0; e == cudaSuccess && r0 < l->n; r0 += l->block) {
        const unsigned nb = (unsigned)(l->n - r0 < l->block ? l->n - r0 : l->block);
        if (dbl) k_bw<double><<<nb, BW_THREADS, smem, l->s>>>(l->d_rows, l->dim, r0, l->d_q, l->d_out);
        else k_bw<float><<<nb, BW_THREADS, smem, l->s>>>(l->d_rows, l->dim, r0, l->d_q, l->d_out);
        e = cudaGetLastError();
    }
    return e;
}

int lab_bw_run(lab_bw_t *l, const float *q, int dbl, double *d)
{
    cudaError_t e = pass(l, q, dbl);
    if (e == cudaSuccess) e = cudaMemcpyAsync(d, l->d_out, l->n * sizeof(double), cudaMemcpyDeviceToHost, l->s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(l->s);
    if (e != cudaSuccess) {
        fprintf(stderr, "lab_bw_run: %s\n", cudaGetErrorString(e));
        (void)cudaGetLastError();
        return -1;
    }
    return 0;
}

static int cmp_f(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

double lab_bw_time(lab_bw_t *l, const float *q, int dbl, int reps)
{
    cudaEvent_t a, b;
    float *t = (float *)malloc((size_t)(reps > 0 ? reps : 1) * sizeof *t), ms = 0.f;
    cudaError_t e;
    double med = -1.0;
    if (!t) return -1.0;
    if (cudaEventCreate(&a) != cudaSuccess || cudaEventCreate(&b) != cudaSuccess) {
        free(t);
        return -1.0;
    }
    e = pass(l, q, dbl); /* warm-up */
    if (e == cudaSuccess) e = cudaStreamSynchronize(l->s);
    for (int i = 0; e == cudaSuccess && i < reps; i++) {
        e = cudaEventRecord(a, l->s);
        if (e == cudaSuccess) e = pass(l, q, dbl);
        if (e == cudaSuccess) e = cudaEventRecord(b, l->s);
        if (e == cudaSuccess) e = cudaEventSynchronize(b);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, a, b);
        t[i] = ms;
    }
    if (e == cudaSuccess) {
        qsort(t, (size_t)reps, sizeof *t, cmp_f);
        med = t[reps / 2];
    } else {
        fprintf(stderr, "lab_bw_time: %s\n", cudaGetErrorString(e));
        (void)cudaGetLastError();
    }
    (void)cudaEventDestroy(a);
    (void)cudaEventDestroy(b);
    free(t);
    return med;
}
