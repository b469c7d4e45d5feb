/* Exact k-NN for CEDD's Tanimoto distance on the GPU (patina_index_knn_gpu).
 *
 * The distances are the CPU fast path's (src/search/knn.c, top of file)
 * computed the same way: per row, C1 accumulates p[b[i]] * q in double over
 * the query's non-zero bins in bin order, with explicitly rounded multiplies
 * and adds (no contraction), then 100 - 100 * (C1 / ((C2 + C3) - C1)) with
 * the row's C3 and T1 and the query's C2 and T2 computed on the host by the
 * same loops. So every distance is the same double as patina_cedd_tanimoto.
 *
 * The descriptors live bin-major on the device (144 rows of n bytes), so
 * the threads of a warp, one table row each, read 32 consecutive bytes per
 * bin. Selection: a block takes one query and a chunk of 2048 rows, computes
 * their distances into shared memory, sorts them (bitonic network, order =
 * distance ascending, NaN last, ties by id ascending: the CPU's total order)
 * and writes its first min(k, 2048). The host keeps the best k of the
 * chunks' lists in the same order (a bounded heap; a list is left at its
 * first entry that does not beat the worst kept). Exact for any k: with k >= 2048 every row is a candidate.
 *
 * The table (descriptors, ids, T1, C3 and the v/T table) is uploaded once
 * per index and device; calls on one table are serialised by a mutex. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpu/context.h"
#include "gpu/gpu.h"
#include "search/knn.h"

#define KNN_CHUNK 2048
#define KNN_THREADS 1024
#define KNN_DIM 144

struct patina_gpu_knn {
    int device;
    size_t n, ptab_rows;
    uint8_t *descs;       /* (144, n): bin-major, so that a warp's reads of one bin coalesce */
    uint64_t *ids;        /* (n) */
    uint16_t *t1;         /* (n) */
    double *c3;           /* (n) */
    double *ptab;         /* (ptab_rows, 8) */
    cudaStream_t stream;
    pthread_mutex_t lock;
    /* per-call buffers, grown as needed */
    patina_knn_query_t *d_q;
    size_t q_cap;
    double *d_dist;
    uint64_t *d_id;
    size_t cand_cap;      /* entries */
    double *h_dist;       /* pinned */
    uint64_t *h_id;
};

/* a comes after b in the result order */
__device__ __forceinline__ bool after(double da, uint64_t ia, double db, uint64_t ib)
{
    const bool an = isnan(da), bn = isnan(db);
    if (an != bn) return an;
    if (!an) {
        if (da > db) return true;
        if (da < db) return false;
    }
    return ia > ib;
}

__global__ void __launch_bounds__(KNN_THREADS)
k_knn(const uint8_t *__restrict__ descs, const uint64_t *__restrict__ ids,
      const uint16_t *__restrict__ t1, const double *__restrict__ c3,
      const double *__restrict__ ptab, size_t n, const patina_knn_query_t *__restrict__ qs,
      int kk, double *__restrict__ out_d, uint64_t *__restrict__ out_id)
{
    __shared__ double sd[KNN_CHUNK];
    __shared__ uint64_t sid[KNN_CHUNK];
    __shared__ uint8_t qidx[KNN_DIM];
    __shared__ double qv[KNN_DIM];
    const patina_knn_query_t *q = &qs[blockIdx.y];
    const size_t nchunks = gridDim.x, r0 = (size_t)blockIdx.x * KNN_CHUNK;
    const int nnz = q->nnz;
    const double t2 = q->t2, c2 = q->c2;
    int e;
    for (e = threadIdx.x; e < nnz; e += blockDim.x) {
        qidx[e] = q->idx[e];
        qv[e] = q->qv[e];
    }
    __syncthreads();
    for (e = threadIdx.x; e < KNN_CHUNK; e += blockDim.x) {
        const size_t r = r0 + (size_t)e;
        double d;
        uint64_t id;
        if (r < n) {
            const unsigned tr = t1[r];
            const double *p = ptab + (size_t)tr * 8;
            double s = 0.0;
            int j;
            /* descs is bin-major: a warp reads 32 consecutive rows' bytes of one bin;
             * unrolled so that several loads are in flight (the sum stays in order) */
#pragma unroll 8
            for (j = 0; j < nnz; j++) s = __dadd_rn(s, __dmul_rn(p[descs[(size_t)qidx[j] * n + r]], qv[j]));
            if (tr == 0 || t2 == 0.0) d = tr == 0 && t2 == 0.0 ? 0.0 : 100.0;
            else d = __dsub_rn(100.0, __dmul_rn(100.0, __ddiv_rn(s, __dsub_rn(__dadd_rn(c2, c3[r]), s))));
            id = ids[r];
        } else {
            d = __longlong_as_double(0x7ff8000000000000LL); /* NaN, id max: after every row */
            id = ~0ull;
        }
        sd[e] = d;
        sid[e] = id;
    }
    /* bitonic sort of the chunk, ascending */
    for (int size = 2; size <= KNN_CHUNK; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            __syncthreads();
            for (int t = threadIdx.x; t < KNN_CHUNK / 2; t += blockDim.x) {
                const int lo = 2 * t - (t & (stride - 1)), hi = lo + stride;
                const bool up = (lo & size) == 0;
                if (after(sd[lo], sid[lo], sd[hi], sid[hi]) == up) {
                    const double td = sd[lo];
                    const uint64_t ti = sid[lo];
                    sd[lo] = sd[hi];
                    sid[lo] = sid[hi];
                    sd[hi] = td;
                    sid[hi] = ti;
                }
            }
        }
    __syncthreads();
    {
        const size_t base = ((size_t)blockIdx.y * nchunks + blockIdx.x) * (size_t)kk;
        for (e = threadIdx.x; e < kk; e += blockDim.x) {
            out_d[base + e] = sd[e];
            out_id[base + e] = sid[e];
        }
    }
}

static void knn_free_buffers(patina_gpu_knn_t *g)
{
    cudaFree(g->d_q);
    cudaFree(g->d_dist);
    cudaFree(g->d_id);
    cudaFreeHost(g->h_dist);
    cudaFreeHost(g->h_id);
    g->d_q = NULL;
    g->d_dist = NULL;
    g->d_id = NULL;
    g->h_dist = NULL;
    g->h_id = NULL;
    g->q_cap = g->cand_cap = 0;
}

void patina_gpu_knn_free(patina_gpu_knn_t *g)
{
    if (!g) return;
    cudaSetDevice(g->device);
    if (g->stream) cudaStreamSynchronize(g->stream);
    knn_free_buffers(g);
    cudaFree(g->descs);
    cudaFree(g->ids);
    cudaFree(g->t1);
    cudaFree(g->c3);
    cudaFree(g->ptab);
    if (g->stream) cudaStreamDestroy(g->stream);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

static patina_status upload(void **dst, const void *src, size_t bytes)
{
    PGPU_CU(cudaMalloc(dst, bytes ? bytes : 1));
    if (bytes) PGPU_CU(cudaMemcpy(*dst, src, bytes, cudaMemcpyHostToDevice));
    return PATINA_OK;
}

patina_status patina_gpu_knn_new(patina_gpu_knn_t **out, int device, size_t n, const uint8_t *descs,
                                 const uint64_t *ids, const uint16_t *t1, const double *c3,
                                 const double *ptab, size_t ptab_rows)
{
    patina_gpu_knn_t *g;
    patina_status s;
    *out = NULL;
    if (device < 0 || device >= patina_gpu__count())
        return patina__fail(PATINA_E_UNAVAILABLE, "gpu search: no CUDA device %d", device);
    PGPU_CU(cudaSetDevice(device));
    g = (patina_gpu_knn_t *)calloc(1, sizeof *g);
    if (!g) return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory");
    g->device = device;
    g->n = n;
    g->ptab_rows = ptab_rows;
    pthread_mutex_init(&g->lock, NULL);
    {   /* the table transposed to bin-major */
        uint8_t *t = (uint8_t *)malloc(n * KNN_DIM + 1);
        size_t r;
        int b;
        if (!t) {
            patina_gpu_knn_free(g);
            return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory");
        }
        for (r = 0; r < n; r++)
            for (b = 0; b < KNN_DIM; b++) t[(size_t)b * n + r] = descs[r * KNN_DIM + (size_t)b];
        s = upload((void **)&g->descs, t, n * KNN_DIM);
        free(t);
    }
    if (s != PATINA_OK ||
        (s = upload((void **)&g->ids, ids, n * sizeof *ids)) != PATINA_OK ||
        (s = upload((void **)&g->t1, t1, n * sizeof *t1)) != PATINA_OK ||
        (s = upload((void **)&g->c3, c3, n * sizeof *c3)) != PATINA_OK ||
        (s = upload((void **)&g->ptab, ptab, ptab_rows * 8 * sizeof(double))) != PATINA_OK) {
        patina_gpu_knn_free(g);
        return s == PATINA_E_GPU ? patina__fail(PATINA_E_NOMEM, "gpu search: cannot hold %zu rows on device %d: %s",
                                                n, device, patina_last_error())
                                 : s;
    }
    if (cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking) != cudaSuccess) {
        patina_gpu_knn_free(g);
        return patina__fail(PATINA_E_GPU, "gpu search: cannot create a stream");
    }
    *out = g;
    return PATINA_OK;
}

static patina_status knn_locked(patina_gpu_knn_t *g, const patina_knn_query_t *qs, size_t nq,
                                size_t k, patina_hit_t *hits, size_t *counts)
{
    const size_t nchunks = (g->n + KNN_CHUNK - 1) / KNN_CHUNK;
    const int kk = (int)(k < KNN_CHUNK ? k : KNN_CHUNK);
    const size_t per_query = nchunks * (size_t)kk;
    const size_t take = k < g->n ? k : g->n;
    /* queries per launch: candidates within ~128 MiB, grid y <= 65535 */
    size_t qb = ((size_t)128 << 20) / (per_query * 16);
    patina_hit_t *merge;
    size_t q0, i;
    if (qb < 1) qb = 1;
    if (qb > 65535) qb = 65535;
    if (qb > nq) qb = nq;
    PGPU_CU(cudaSetDevice(g->device));
    if (g->q_cap < qb || g->cand_cap < qb * per_query) {
        knn_free_buffers(g);
        PGPU_CU(cudaMalloc((void **)&g->d_q, qb * sizeof *g->d_q));
        PGPU_CU(cudaMalloc((void **)&g->d_dist, qb * per_query * sizeof(double)));
        PGPU_CU(cudaMalloc((void **)&g->d_id, qb * per_query * sizeof(uint64_t)));
        PGPU_CU(cudaMallocHost((void **)&g->h_dist, qb * per_query * sizeof(double)));
        PGPU_CU(cudaMallocHost((void **)&g->h_id, qb * per_query * sizeof(uint64_t)));
        g->q_cap = qb;
        g->cand_cap = qb * per_query;
    }
    merge = (patina_hit_t *)malloc((take ? take : 1) * sizeof *merge);
    if (!merge) return patina__fail(PATINA_E_NOMEM, "gpu search: out of memory merging %zu candidates", per_query);
    for (q0 = 0; q0 < nq; q0 += qb) {
        const size_t m = nq - q0 < qb ? nq - q0 : qb;
        cudaError_t e;
        dim3 grid((unsigned)nchunks, (unsigned)m);
        e = cudaMemcpyAsync(g->d_q, qs + q0, m * sizeof *qs, cudaMemcpyHostToDevice, g->stream);
        if (e == cudaSuccess) {
            k_knn<<<grid, KNN_THREADS, 0, g->stream>>>(g->descs, g->ids, g->t1, g->c3, g->ptab, g->n,
                                                       g->d_q, kk, g->d_dist, g->d_id);
            e = cudaGetLastError();
        }
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(g->h_dist, g->d_dist, m * per_query * sizeof(double),
                                cudaMemcpyDeviceToHost, g->stream);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(g->h_id, g->d_id, m * per_query * sizeof(uint64_t),
                                cudaMemcpyDeviceToHost, g->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(g->stream);
        if (e != cudaSuccess) {
            free(merge);
            return pgpu_fail((int)e, "gpu search: k_knn", __FILE__, __LINE__);
        }
        for (size_t q = 0; q < m; q++) {
            /* The best `take` of the chunks' sorted lists: a bounded max-heap
             * (merge[0] = the worst kept); a chunk's list is left at its
             * first entry that does not beat the worst kept. */
            size_t nm = 0, c;
            for (c = 0; c < nchunks; c++) {
                const size_t valid = g->n - c * KNN_CHUNK < KNN_CHUNK ? g->n - c * KNN_CHUNK : KNN_CHUNK;
                const size_t use = valid < (size_t)kk ? valid : (size_t)kk;
                const size_t base = (q * nchunks + c) * (size_t)kk;
                for (i = 0; i < use; i++) {
                    patina_hit_t x;
                    x.distance = g->h_dist[base + i];
                    x.id = g->h_id[base + i];
                    if (nm < take) {
                        patina__hit_heap_up(merge, nm++, x);
                    } else if (patina__hit_cmp(&x, &merge[0]) < 0) {
                        merge[0] = x;
                        patina__hit_heap_down(merge, nm, 0);
                    } else {
                        break; /* the rest of this chunk's list is worse still */
                    }
                }
            }
            qsort(merge, nm, sizeof *merge, patina__hit_qsort_cmp);
            memcpy(hits + (q0 + q) * k, merge, take * sizeof *merge);
            counts[q0 + q] = take;
        }
    }
    free(merge);
    return PATINA_OK;
}

patina_status patina_gpu_knn(patina_gpu_knn_t *g, const patina_knn_query_t *qs, size_t nq, size_t k,
                             patina_hit_t *hits, size_t *counts)
{
    patina_status s;
    if (g->n == 0 || nq == 0) return PATINA_OK;
    pthread_mutex_lock(&g->lock);
    s = knn_locked(g, qs, nq, k, hits, counts);
    pthread_mutex_unlock(&g->lock);
    return s;
}
