/* GLCM features on the GPU: the ten properties and Haralick's fourteen
 * features of whole batches of co-occurrence matrices (k_features, k_mcc
 * and their host side), and the entry points that return them:
 * pgpu_glcm_features / patina_gpu_glcm_features (images counted by
 * glcm.cu's counting path, chunk by chunk) and patina_gpu_glcm_features_of
 * (the caller's matrices). Not here: the counting kernels
 * (glcm_kernels.cuh), their driver, the GLCM state of a device context and
 * the checks of a request (glcm.cu); what crosses the two files is in
 * glcm_internal.cuh.
 *
 * Features: one block per matrix reduces it to the integer moments and the
 * sums of logarithms of src/algo/glcm_core.h, in the C reference's order,
 * and calls the same glcm_finish; Haralick's 14th feature runs the C
 * reference's eigenvalue solver (glcm_core.h), one thread per matrix for
 * L <= 64 (k_mcc), on the context's host threads above. The buffers are the
 * context's GLCM state's. Nothing prints; every CUDA error becomes a
 * status. */
#include <cuda_runtime.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "algo/glcm_core.h"
#include "gpu/context.h"
#include "gpu/glcm.h"
#include "gpu/glcm_internal.cuh"
#include "gpu/gpu.h"
#include "patina/glcm.h"

#define FTHREADS 256                  /* k_features */
#define MCC_GPU_MAX_LEVELS 64         /* Haralick's 14th feature on the GPU up to this many levels */
#define MCC_WORK_MAX ((size_t)64 << 20) /* bytes of k_mcc scratch */

#define CK(call) PGPU_CU(call)
#define CKL() CK(cudaGetLastError())

/* ------------------------------------------------------------ kernels */

/* One block per matrix: the moments of glcm_core.h in the C reference's
 * order, then glcm_finish. props (nmat, 10), har (nmat, 14); har[13] (mcc)
 * is left 0 here: k_mcc (levels <= MCC_GPU_MAX_LEVELS) or the host fills
 * it. */
static __global__ void __launch_bounds__(FTHREADS)
k_features(const uint32_t *__restrict__ counts, int L, double *props, double *har)
{
    __shared__ unsigned long long rows[PATINA_GLCM_MAX_LEVELS], cols[PATINA_GLCM_MAX_LEVELS];
    __shared__ unsigned long long diff[PATINA_GLCM_MAX_LEVELS];
    __shared__ unsigned long long sum[2 * PATINA_GLCM_MAX_LEVELS - 1];
    __shared__ unsigned long long part_sij[FTHREADS];
    __shared__ unsigned __int128 part_q[FTHREADS];
    __shared__ double part_en[PATINA_GLCM_MAX_LEVELS], part_eb[PATINA_GLCM_MAX_LEVELS],
        part_mi[PATINA_GLCM_MAX_LEVELS];
    __shared__ glcm_moments_t m;
    const int LL = L * L, tid = threadIdx.x;
    const uint32_t *P = counts + (size_t)blockIdx.x * LL;
    unsigned long long sij = 0;
    unsigned __int128 q = 0;
    for (int i = tid; i < 2 * PATINA_GLCM_MAX_LEVELS - 1; i += blockDim.x) {
        sum[i] = 0;
        if (i < PATINA_GLCM_MAX_LEVELS) rows[i] = cols[i] = diff[i] = 0;
    }
    __syncthreads();
    for (int cell = tid; cell < LL; cell += blockDim.x) {
        const unsigned long long c = P[cell];
        if (!c) continue;
        const int i = cell / L, j = cell - i * L;
        atomicAdd(&rows[i], c);
        atomicAdd(&cols[j], c);
        atomicAdd(&diff[i > j ? i - j : j - i], c);
        atomicAdd(&sum[i + j], c);
        sij += c * (unsigned long long)i * (unsigned long long)j;
        q += (unsigned __int128)c * c;
    }
    part_sij[tid] = sij;
    part_q[tid] = q;
    __syncthreads();
    if (tid == 0) {
        memset(&m, 0, sizeof m);
        for (int k = 0; k < (int)blockDim.x; k++) {
            m.Sij += part_sij[k];
            m.Q += part_q[k];
        }
        for (int i = 0; i < L; i++) {
            const unsigned long long ui = (unsigned long long)i;
            m.T += rows[i];
            m.Si += ui * rows[i];
            m.Sj += ui * cols[i];
            m.Sii += ui * ui * rows[i];
            m.Sjj += ui * ui * cols[i];
        }
        for (int k = 0; k < L; k++) {
            m.d1 += (unsigned long long)k * diff[k];
            m.d2 += (unsigned long long)k * (unsigned long long)k * diff[k];
            m.hom += (double)diff[k] / (1.0 + (double)k * (double)k);
        }
        for (int k = 0; k < 2 * L - 1; k++) {
            m.s1 += (unsigned long long)k * sum[k];
            m.s2 += (unsigned long long)k * (unsigned long long)k * sum[k];
        }
    }
    __syncthreads();
    if (m.T != 0) {
        const double T = (double)m.T;
        for (int i = tid; i < L; i += blockDim.x) { /* per-row partials, j in order */
            const uint32_t *row = P + (size_t)i * L;
            double en = 0, eb = 0, mi = 0;
            for (int j = 0; j < L; j++) {
                if (row[j] == 0) continue;
                const double c = (double)row[j], p = c / T;
                en -= p * log(p);
                eb -= glcm_plogp2(p);
                mi += glcm_mi_term(row[j], m.T, rows[i], cols[j]);
            }
            part_en[i] = en;
            part_eb[i] = eb;
            part_mi[i] = mi;
        }
        __syncthreads();
        if (tid == 0) {
            for (int i = 0; i < L; i++) {
                m.ent_nat += part_en[i];
                m.hxy += part_eb[i];
                m.mi += part_mi[i];
            }
            for (int k = 0; k < L; k++) {
                m.hx -= glcm_plogp2((double)rows[k] / T);
                m.hy -= glcm_plogp2((double)cols[k] / T);
                m.hd -= glcm_plogp2((double)diff[k] / T);
            }
            for (int k = 0; k < 2 * L - 1; k++) m.hs -= glcm_plogp2((double)sum[k] / T);
        }
    }
    if (tid == 0)
        glcm_finish(&m, 0.0, props ? props + (size_t)blockIdx.x * GLCM_NPROPS : NULL, 1,
                    har ? har + (size_t)blockIdx.x * GLCM_NHAR : NULL);
}

/* har[m][13] = MCC of matrices m0 .. m0 + n - 1 (one thread each); work:
 * wstride doubles per thread. The same operations in the same order as the
 * C reference (no contraction, IEEE division and sqrt, glcm_hyp for
 * hypot), so the values are the host's bit for bit. */
static __global__ void k_mcc(const uint32_t *__restrict__ counts, int L, long long n, double *har, double *work,
                      size_t wstride)
{
    const long long m = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (m >= n) return;
    const uint32_t *P = counts + m * (long long)L * L;
    uint64_t rows[MCC_GPU_MAX_LEVELS], cols[MCC_GPU_MAX_LEVELS], T = 0;
    for (int i = 0; i < L; i++) rows[i] = cols[i] = 0;
    for (int i = 0; i < L; i++)
        for (int j = 0; j < L; j++) {
            rows[i] += P[i * L + j];
            cols[j] += P[i * L + j];
        }
    for (int i = 0; i < L; i++) T += rows[i];
    har[m * GLCM_NHAR + 13] = glcm_mcc_core(P, L, rows, cols, T, work + (size_t)m * wstride);
}
/* ------------------------------------------------------------ features */

typedef struct mcc_job {
    const uint32_t *counts; /* (nmat, L, L) host */
    int L;
    double *har;            /* (nmat, 14) */
} mcc_job_t;

/* Haralick's 14th feature of host matrix m: the C reference's solver. */
static void mcc_task(void *arg, size_t m, int worker)
{
    const mcc_job_t *j = (const mcc_job_t *)arg;
    const size_t L = (size_t)j->L;
    const uint32_t *P = j->counts + m * L * L;
    uint64_t rows[PATINA_GLCM_MAX_LEVELS] = {0}, cols[PATINA_GLCM_MAX_LEVELS] = {0}, T = 0;
    double *work = (double *)malloc((2 * L * L + 3 * L) * sizeof(double));
    (void)worker;
    if (!work) { /* no guess: NaN, as the C reference */
        j->har[m * GLCM_NHAR + 13] = (double)NAN;
        return;
    }
    for (size_t i = 0; i < L; i++)
        for (size_t k = 0; k < L; k++) {
            rows[i] += P[i * L + k];
            cols[k] += P[i * L + k];
        }
    for (size_t i = 0; i < L; i++) T += rows[i];
    j->har[m * GLCM_NHAR + 13] = glcm_mcc_core(P, j->L, rows, cols, T, work);
    free(work);
}

/* Features of nmat device matrices (levels x levels) into host props
 * (nmat, 10) and har (nmat, 14), either may be NULL; queued on slot 0
 * behind what is there, synchronised on return. */
static patina_status features_dev(patina_gpu_t *g, glcm_state *c, double *props, double *har,
                                  const uint32_t *d_counts, size_t nmat, int levels)
{
    const size_t LL = (size_t)levels * (size_t)levels;
    const cudaStream_t st = c->sl[0].s;
    double *dp, *dh;
    if (nmat == 0 || (!props && !har)) return PATINA_OK;
    PATINA_TRY(glcm_grow_dev(g, (void **)&c->d_feat, &c->feat_cap, nmat * (GLCM_NPROPS + GLCM_NHAR), sizeof(double),
                        "features"));
    dp = c->d_feat;
    dh = c->d_feat + nmat * GLCM_NPROPS;
    for (size_t m0 = 0; m0 < nmat; m0 += 65535) { /* grid.x chunks */
        const size_t cnt = nmat - m0 < 65535 ? nmat - m0 : 65535;
        k_features<<<(unsigned)cnt, FTHREADS, 0, st>>>(d_counts + m0 * LL, levels, dp + m0 * GLCM_NPROPS,
                                                        dh + m0 * GLCM_NHAR);
        CKL();
    }
    if (har && levels <= MCC_GPU_MAX_LEVELS) { /* scratch of at most MCC_WORK_MAX per launch */
        const size_t wstride = 2 * LL + 3 * (size_t)levels;
        size_t chunk = MCC_WORK_MAX / (wstride * sizeof(double));
        if (chunk > nmat) chunk = nmat;
        PATINA_TRY(glcm_grow_dev(g, (void **)&c->d_work, &c->work_cap, chunk * wstride, sizeof(double), "mcc scratch"));
        for (size_t m0 = 0; m0 < nmat; m0 += chunk) {
            const size_t cnt = nmat - m0 < chunk ? nmat - m0 : chunk;
            k_mcc<<<(unsigned)((cnt + 63) / 64), 64, 0, st>>>(d_counts + m0 * LL, levels, (long long)cnt,
                                                              dh + m0 * GLCM_NHAR, c->d_work, wstride);
            CKL();
        }
    }
    if (props)
        CK(cudaMemcpyAsync(props, dp, nmat * GLCM_NPROPS * sizeof(double), cudaMemcpyDeviceToHost, st));
    if (har) CK(cudaMemcpyAsync(har, dh, nmat * GLCM_NHAR * sizeof(double), cudaMemcpyDeviceToHost, st));
    if (har && levels > MCC_GPU_MAX_LEVELS) { /* O(L^3) per matrix: the host's threads */
        mcc_job_t j;
        uint32_t *hc = (uint32_t *)malloc(nmat * LL * sizeof *hc);
        if (!hc) return patina__fail(PATINA_E_NOMEM, "gpu: glcm: out of host memory for %zu matrices", nmat);
        j.counts = hc;
        j.L = levels;
        j.har = har;
        {
            cudaError_t e = cudaMemcpyAsync(hc, d_counts, nmat * LL * sizeof *hc, cudaMemcpyDeviceToHost, st);
            if (e == cudaSuccess) e = cudaStreamSynchronize(st);
            if (e != cudaSuccess) {
                free(hc);
                return pgpu_fail((int)e, "copy counts back", __FILE__, __LINE__);
            }
        }
        if (g->pool)
            patina_pool_run(g->pool, nmat, mcc_task, &j);
        else
            for (size_t m = 0; m < nmat; m++) mcc_task(&j, m, 0);
        free(hc);
    }
    CK(cudaStreamSynchronize(st));
    return PATINA_OK;
}
/* ------------------------------------------------------------ entry points */

extern "C" patina_status pgpu_glcm_features(patina_gpu_t *g, const pgpu_glcm_knobs_t *k, double *props,
                                            double *har, const pgpu_glcm_src_t *sp, int levels,
                                            const patina_glcm_offset_t *off, size_t noff, int symmetric,
                                            patina_status *st)
{
    glcm_state *c;
    glcm_source src;
    patina_status s = PATINA_OK;
    size_t chunk, n;
    PATINA_TRY(glcm_check_request(g, levels, off, noff));
    if (!sp) return patina__fail(PATINA_E_INVALID, "gpu: glcm: null image source");
    n = sp->n;
    if (st)
        for (size_t i = 0; i < n; i++) st[i] = PATINA_OK;
    if (n == 0 || noff == 0) return PATINA_OK;
    if (!sp->w || !sp->h || !sp->rows) return patina__fail(PATINA_E_INVALID, "gpu: glcm: incomplete image source");
    for (size_t i = 0; i < n; i++) PATINA_TRY(glcm_check_size(i, sp->w[i], sp->h[i], symmetric));
    if (sp->masked && levels > 255)
        return patina__fail(PATINA_E_INVALID, "gpu: glcm: a mask needs levels <= 255 (a spare level) on the GPU");
    CK(cudaSetDevice(g->device));
    PATINA_TRY(glcm_state_get(g, &c));
    memset(&src, 0, sizeof src);
    src.n = n;
    src.src = sp;
    src.masked = sp->masked;
    chunk = glcm_chunk_images(g, noff, levels, glcm_levels_max(levels, sp->masked), 1);
    for (size_t i0 = 0; s == PATINA_OK && i0 < n; i0 += chunk) {
        const size_t i1 = n - i0 < chunk ? n : i0 + chunk;
        uint32_t *d = NULL;
        s = glcm_count_chunk(g, c, k, &src, i0, i1, levels, off, noff, symmetric, &d, st);
        if (s == PATINA_OK)
            s = features_dev(g, c, props ? props + i0 * noff * GLCM_NPROPS : NULL,
                             har ? har + i0 * noff * GLCM_NHAR : NULL, d, (i1 - i0) * noff, levels);
        if (s == PATINA_OK)
            s = glcm_sync_all(c);
        else
            (void)glcm_sync_all(c);
    }
    return s;
}

extern "C" patina_status patina_gpu_glcm_features(patina_gpu_t *g, double *props, double *har,
                                                  const pgpu_glcm_src_t *src, int levels,
                                                  const patina_glcm_offset_t *off, size_t noff, int symmetric,
                                                  patina_status *st)
{
    return pgpu_glcm_features(g, NULL, props, har, src, levels, off, noff, symmetric, st);
}

extern "C" patina_status patina_gpu_glcm_features_of(patina_gpu_t *g, double *props, double *har,
                                                     const uint32_t *counts, size_t nmat, int levels)
{
    const size_t LL = (size_t)levels * (size_t)levels;
    glcm_state *c;
    patina_status s = PATINA_OK;
    size_t chunk;
    PATINA_TRY(glcm_check_request(g, levels, NULL, 0));
    if (nmat == 0) return PATINA_OK;
    if (!counts) return patina__fail(PATINA_E_INVALID, "gpu: glcm: null counts");
    CK(cudaSetDevice(g->device));
    PATINA_TRY(glcm_state_get(g, &c));
    chunk = glcm_chunk_images(g, 1, levels, levels, 1);
    for (size_t m0 = 0; s == PATINA_OK && m0 < nmat; m0 += chunk) {
        const size_t cnt = nmat - m0 < chunk ? nmat - m0 : chunk;
        s = glcm_grow_dev(g, (void **)&c->d_counts, &c->counts_cap, cnt * LL, sizeof(uint32_t), "counts");
        if (s == PATINA_OK) { /* on slot 0's stream, ahead of the kernels that read it */
            cudaError_t e = cudaMemcpyAsync(c->d_counts, counts + m0 * LL, cnt * LL * sizeof(uint32_t),
                                            cudaMemcpyHostToDevice, c->sl[0].s);
            if (e != cudaSuccess) s = pgpu_fail((int)e, "upload counts", __FILE__, __LINE__);
        }
        if (s == PATINA_OK)
            s = features_dev(g, c, props ? props + m0 * GLCM_NPROPS : NULL, har ? har + m0 * GLCM_NHAR : NULL,
                             c->d_counts, cnt, levels);
        if (s != PATINA_OK) (void)glcm_sync_all(c);
    }
    return s;
}
