/* Parallel Huffman entropy decoding of baseline JPEGs on the GPU (jpeg_huff.h):
 * the steps of src/algo/jpeg_huff_core.h, whose C reference is
 * patina__jpegh_decode (src/image/jpeg_huff.c), each a kernel over every
 * chunk (or interval) of the batch, many images per launch:
 *
 *   jh_k_zero      each image's coefficients to zero (the decode writes only
 *                  non-zero ones)
 *   jh_k_init      one thread per chunk: decode from a guessed start
 *   jh_k_round     JH_ROUNDS Jacobi rounds: chunks whose predecessor's exit
 *                  changed decode again (double-buffered states); a round
 *                  after one with nothing marked returns at once
 *   jh_k_settle    a warp per restart interval: the chunks still marked, in
 *                  order, by one lane (usually none), and each chunk's first
 *                  block (a warp prefix sum)
 *   jh_k_write     one thread per chunk: coefficients written, anomalies
 *                  flagged in the image's flag
 *   jh_k_dcscan    a warp per interval: each chunk's DC offsets (prefix sums)
 *   jh_k_dcfix     a warp per chunk: offsets added to its blocks' DC values
 *
 * The order of threads cannot change a result: every step reads what the
 * previous kernel wrote and writes places no other thread of the step reads
 * or writes (the rounds read one state buffer and write the other;
 * test_jpeg_huff runs the reference with chunks in both orders). */
#include <cuda_runtime.h>
#include <stdint.h>

#include "gpu/context.h"
#include "gpu/gpu.h"
#include "gpu/jpeg_huff.h"
#include "gpu/warp.cuh"

#define JHG_THREADS 128

__global__ void __launch_bounds__(256) jh_k_zero(const __grid_constant__ jh_batch_t b)
{
    for (uint32_t m = blockIdx.y; m < b.nimg; m += gridDim.y) {
        const jh_img_t *im = b.img + m;
        int4 *p = (int4 *)(b.coef + im->coef * 64); /* a block of 64 s16 = 128 bytes = 8 int4 */
        unsigned long long n = (unsigned long long)im->nblocks * 8;
        for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
             i += (unsigned long long)gridDim.x * blockDim.x)
            p[i] = make_int4(0, 0, 0, 0);
    }
}

__global__ void __launch_bounds__(JHG_THREADS) jh_k_init(const __grid_constant__ jh_batch_t b)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < b.nchunk) jh_step_init(&b, i);
}

__global__ void __launch_bounds__(JHG_THREADS) jh_k_round(const __grid_constant__ jh_batch_t b, int r)
{
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < b.nchunk) jh_step_round(&b, r, i);
}

/* jh_step_settle of interval j: the same result, a warp at a time when no
 * chunk is still marked (then it is g0 = the exclusive prefix sum of the
 * block counts, and with `same` tables each exit's block of the MCU from the
 * inclusive one), else jh_step_settle itself on lane 0. */
__global__ void __launch_bounds__(JHG_THREADS) jh_k_settle(const __grid_constant__ jh_batch_t b, int r)
{
    uint32_t j = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (j >= b.niv) return; /* whole warps */
    uint32_t m = jh_find_img_iv(&b, j), v = j - b.img[m].iv0;
    if (__any_sync(0xFFFFFFFFu, jh_settle_marked(&b, r, m, v, lane, 32))) {
        if (lane == 0) jh_step_settle(&b, r, m, v);
        return;
    }
    const jh_img_t *im = b.img + m;
    const jh_iv_t *iv = JH_IVS(&b, im) + v;
    jh_state_t *st = b.st[r & 1];
    uint32_t carry = 0, end = iv->c0 + iv->nc, nblk = (uint32_t)im->sc.nblk;
    for (uint32_t c0 = iv->c0; c0 < end; c0 += 32) {
        uint32_t c = c0 + lane, i = im->c0 + c, nb = c < end ? st[i].nb : 0, x = pgpu_warp_scan(nb, lane);
        if (c < end) {
            b.g0[i] = carry + x - nb;
            if (im->sc.same) st[i].blkn = (uint8_t)((carry + x) % nblk);
        }
        carry += __shfl_sync(0xFFFFFFFFu, x, 31);
    }
}

static __device__ const uint8_t jhg_zigzag[64] = JH_ZIGZAG;

__global__ void __launch_bounds__(JHG_THREADS) jh_k_write(const __grid_constant__ jh_batch_t b, int r)
{
    __shared__ uint8_t zz[64]; /* the coefficient stores' addresses wait on it: shared, not L1 */
    uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (threadIdx.x < 64) zz[threadIdx.x] = jhg_zigzag[threadIdx.x];
    __syncthreads();
    if (i < b.nchunk) jh_step_write(&b, r, i, zz);
}

/* jh_step_dcscan of interval j, a warp at a time: per component the
 * exclusive prefix sum of the chunks' DC sums (modulo 2^32, as the
 * reference's running sum). */
__global__ void __launch_bounds__(JHG_THREADS) jh_k_dcscan(const __grid_constant__ jh_batch_t b)
{
    uint32_t j = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (j >= b.niv) return; /* whole warps */
    uint32_t m = jh_find_img_iv(&b, j);
    const jh_img_t *im = b.img + m;
    const jh_iv_t *iv = JH_IVS(&b, im) + (j - im->iv0);
    uint32_t carry[4] = {0, 0, 0, 0}, end = iv->c0 + iv->nc;
    for (uint32_t c0 = iv->c0; c0 < end; c0 += 32) {
        uint32_t c = c0 + lane;
        int32_t *d = b.dc + (uint64_t)(im->c0 + c) * 4;
        for (int k = 0; k < 4; k++) {
            uint32_t t = c < end ? (uint32_t)d[k] : 0, x = pgpu_warp_scan(t, lane);
            if (c < end) d[k] = (int32_t)(carry[k] + x - t);
            carry[k] += __shfl_sync(0xFFFFFFFFu, x, 31);
        }
    }
}

__global__ void __launch_bounds__(JHG_THREADS) jh_k_dcfix(const __grid_constant__ jh_batch_t b, int r)
{
    uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t i = (uint32_t)(t >> 5);
    if (i < b.nchunk) jh_step_dcfix_lane(&b, r, i, (uint32_t)(t & 31), 32);
}

/* Scratch bytes per chunk: its guessed decode's boundaries, three states
 * (two rounds', the guess's), two dirty flags, g0, four DC sums; and per
 * batch the rounds' live flags. */
#define JHG_PER_CHUNK \
    (JH_REC * sizeof(jh_rec_t) + 3 * sizeof(jh_state_t) + 2 + sizeof(uint32_t) + 4 * sizeof(int32_t))
#define JHG_LIVE_BYTES ((JH_ROUNDS + 1) * sizeof(uint32_t))

void patina__jhg_free(jhg_scratch_t *sc)
{
    if (!sc) return;
    if (sc->mem) cudaFree(sc->mem);
    sc->mem = NULL;
    sc->bytes = 0;
}

patina_status patina__jhg_run(jhg_scratch_t *sc, jh_batch_t *b, cudaStream_t s, int sm_count)
{
    size_t n = b->nchunk, need = n * JHG_PER_CHUNK + JHG_LIVE_BYTES + 64;
    uint8_t *p;
    unsigned gc, gi;
    if (b->nimg == 0 || n == 0) return PATINA_OK;
    if (need > sc->bytes) {
        size_t want = need + need / 4;
        PGPU_CU(cudaStreamSynchronize(s)); /* the old scratch may be in use by a previous batch */
        patina__jhg_free(sc);
        if (cudaMalloc(&sc->mem, want) != cudaSuccess) {
            (void)cudaGetLastError();
            sc->mem = NULL;
            return patina__fail(PATINA_E_NOMEM, "jpegh: cannot allocate %.1f MiB of device memory for the decoder's state",
                                (double)want / (1024.0 * 1024.0));
        }
        sc->bytes = want;
    }
    /* carve: boundaries and states (8-byte aligned first), then sums, g0, flags */
    p = (uint8_t *)sc->mem;
    b->rec = (jh_rec_t *)p;
    p += n * JH_REC * sizeof(jh_rec_t);
    b->gx = (jh_state_t *)p;
    p += n * sizeof(jh_state_t);
    b->st[0] = (jh_state_t *)p;
    b->st[1] = b->st[0] + n;
    p += 2 * n * sizeof(jh_state_t);
    p = (uint8_t *)(((uintptr_t)p + 15) & ~(uintptr_t)15);
    b->dc = (int32_t *)p;
    p += 4 * n * sizeof(int32_t);
    b->g0 = (uint32_t *)p;
    p += n * sizeof(uint32_t);
    b->live = (uint32_t *)p;
    p += JHG_LIVE_BYTES;
    b->dirty[0] = p;
    b->dirty[1] = p + n;
    gc = (unsigned)((n + JHG_THREADS - 1) / JHG_THREADS);
    gi = (unsigned)((b->niv * 32 + JHG_THREADS - 1) / JHG_THREADS); /* a warp per interval */
    PGPU_CU(cudaMemsetAsync(b->live, 0, JHG_LIVE_BYTES, s));
    {
        unsigned zx = (unsigned)(sm_count > 0 ? sm_count : 16), zy = b->nimg < 65535 ? b->nimg : 65535;
        jh_k_zero<<<dim3(zx, zy), 256, 0, s>>>(*b);
        PGPU_CU(cudaGetLastError());
    }
    jh_k_init<<<gc, JHG_THREADS, 0, s>>>(*b);
    PGPU_CU(cudaGetLastError());
    for (int r = 0; r < JH_ROUNDS; r++) {
        jh_k_round<<<gc, JHG_THREADS, 0, s>>>(*b, r);
        PGPU_CU(cudaGetLastError());
    }
    jh_k_settle<<<gi, JHG_THREADS, 0, s>>>(*b, JH_ROUNDS);
    PGPU_CU(cudaGetLastError());
    jh_k_write<<<gc, JHG_THREADS, 0, s>>>(*b, JH_ROUNDS);
    PGPU_CU(cudaGetLastError());
    jh_k_dcscan<<<gi, JHG_THREADS, 0, s>>>(*b);
    PGPU_CU(cudaGetLastError());
    jh_k_dcfix<<<(unsigned)((n * 32 + JHG_THREADS - 1) / JHG_THREADS), JHG_THREADS, 0, s>>>(*b, JH_ROUNDS);
    PGPU_CU(cudaGetLastError());
    return PATINA_OK;
}

patina_status patina_gpu__jpegh_decode(patina_gpu_t *g, const void *base, size_t bytes, const struct jh_img *img,
                                       uint32_t nimg, uint32_t nchunk, uint32_t niv, int16_t *coef, size_t blocks,
                                       uint32_t *flags, double *seconds)
{
    patina_status st = PATINA_OK;
    jhg_scratch_t sc = {NULL, 0};
    uint8_t *d_base = NULL;
    jh_img_t *d_img = NULL;
    int16_t *d_coef = NULL;
    uint32_t *d_flags = NULL;
    cudaStream_t s = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    jh_batch_t b;
    if (!g) return patina__fail(PATINA_E_UNAVAILABLE, "jpegh: no GPU context");
    if (seconds) *seconds = 0;
    PGPU_CU(cudaSetDevice(g->device));
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess || cudaEventCreate(&e0) != cudaSuccess ||
        cudaEventCreate(&e1) != cudaSuccess || cudaMalloc((void **)&d_base, bytes + 8) != cudaSuccess ||
        cudaMalloc((void **)&d_img, (size_t)nimg * sizeof(jh_img_t) + 1) != cudaSuccess ||
        cudaMalloc((void **)&d_coef, blocks * 128 + 16) != cudaSuccess ||
        cudaMalloc((void **)&d_flags, (size_t)nimg * sizeof(uint32_t) + 4) != cudaSuccess) {
        (void)cudaGetLastError();
        st = patina__fail(PATINA_E_NOMEM, "jpegh: cannot allocate the test batch on the device");
        goto done;
    }
    memset(&b, 0, sizeof b);
    b.base = d_base;
    b.img = d_img;
    b.coef = d_coef;
    b.flags = d_flags;
    b.nimg = nimg;
    b.nchunk = nchunk;
    b.niv = niv;
    if (cudaMemcpyAsync(d_base, base, bytes, cudaMemcpyHostToDevice, s) != cudaSuccess ||
        cudaMemsetAsync(d_base + bytes, 0, 8, s) != cudaSuccess ||
        cudaMemcpyAsync(d_img, img, (size_t)nimg * sizeof(jh_img_t), cudaMemcpyHostToDevice, s) != cudaSuccess ||
        cudaMemsetAsync(d_flags, 0, (size_t)nimg * sizeof(uint32_t), s) != cudaSuccess ||
        cudaMemsetAsync(d_coef, 0x5A, blocks * 128, s) != cudaSuccess) { /* garbage: the kernels zero it */
        st = pgpu_fail((int)cudaGetLastError(), "jpegh test batch upload", __FILE__, __LINE__);
        goto done;
    }
    /* a first run sizes the scratch (outside the timing) */
    st = patina__jhg_run(&sc, &b, s, g->sm_count);
    if (st == PATINA_OK && cudaMemsetAsync(d_flags, 0, (size_t)nimg * sizeof(uint32_t), s) != cudaSuccess)
        st = pgpu_fail((int)cudaGetLastError(), "cudaMemsetAsync", __FILE__, __LINE__);
    if (st == PATINA_OK && cudaEventRecord(e0, s) != cudaSuccess)
        st = pgpu_fail((int)cudaGetLastError(), "cudaEventRecord", __FILE__, __LINE__);
    if (st == PATINA_OK) st = patina__jhg_run(&sc, &b, s, g->sm_count);
    if (st == PATINA_OK && cudaEventRecord(e1, s) != cudaSuccess)
        st = pgpu_fail((int)cudaGetLastError(), "cudaEventRecord", __FILE__, __LINE__);
    if (st == PATINA_OK) {
        cudaError_t e = cudaStreamSynchronize(s);
        if (e == cudaSuccess) e = cudaMemcpy(coef, d_coef, blocks * 128, cudaMemcpyDeviceToHost);
        if (e == cudaSuccess) e = cudaMemcpy(flags, d_flags, (size_t)nimg * sizeof(uint32_t), cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) st = pgpu_fail((int)e, "jpegh test batch", __FILE__, __LINE__);
        else if (seconds) {
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            *seconds = ms / 1000.0;
        }
    }
done:
    if (s) cudaStreamSynchronize(s);
    patina__jhg_free(&sc);
    cudaFree(d_base);
    cudaFree(d_img);
    cudaFree(d_coef);
    cudaFree(d_flags);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (s) cudaStreamDestroy(s);
    return st;
}
