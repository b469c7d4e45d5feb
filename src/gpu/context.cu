/* The CUDA device context: enumeration, the memory plan (streams, pinned
 * staging, device buffers sized from a budget), pinned and device
 * allocations, and the bandwidth probes the benchmark reports against.
 * The descriptor kernels live in one .cu per family (cedd.cu).
 *
 * Every CUDA error becomes a patina status with a message, here at the
 * boundary; nothing prints, nothing exits. */
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/context.h"

#define MiB (1024.0 * 1024.0)

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

patina_status pgpu_fail(int cuda_error, const char *what, const char *file, int line)
{
    cudaError_t e = (cudaError_t)cuda_error;
    (void)cudaGetLastError(); /* clear a non-sticky error so later calls can run */
    return patina__fail(e == cudaErrorMemoryAllocation ? PATINA_E_NOMEM : PATINA_E_GPU,
                        "gpu: %s: %s (%s) [%s:%d]", what, cudaGetErrorString(e),
                        cudaGetErrorName(e), base_name(file), line);
}

int patina_gpu__count(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

patina_status patina_gpu__describe(int i, char *buf, size_t size)
{
    cudaDeviceProp p;
    int n = patina_gpu__count();
    if (size) buf[0] = '\0';
    if (i < 0 || i >= n)
        return patina__fail(PATINA_E_UNAVAILABLE, "gpu: no CUDA device %d (%d usable)", i, n);
    PGPU_CU(cudaGetDeviceProperties(&p, i));
    snprintf(buf, size, "%s, sm_%d%d, %d SMs, %.1f GiB", p.name, p.major, p.minor,
             p.multiProcessorCount, (double)p.totalGlobalMem / (1024.0 * MiB));
    return PATINA_OK;
}

/* ------------------------------------------------------------------ memory */

void *patina_gpu_host_alloc(size_t bytes)
{
    void *p = NULL;
    if (bytes == 0) bytes = 1;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

void patina_gpu_host_free(void *p)
{
    if (p && cudaFreeHost(p) != cudaSuccess) (void)cudaGetLastError();
}

void *patina_gpu__dev_alloc(patina_gpu_t *g, size_t bytes)
{
    void *p = NULL;
    if (!g || cudaSetDevice(g->device) != cudaSuccess || cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

void patina_gpu__dev_free(patina_gpu_t *g, void *p)
{
    if (!g || !p) return;
    if (cudaSetDevice(g->device) != cudaSuccess || cudaFree(p) != cudaSuccess)
        (void)cudaGetLastError();
}

patina_status patina_gpu__upload(patina_gpu_t *g, void *dst, const void *src, size_t bytes)
{
    PGPU_CU(cudaSetDevice(g->device));
    PGPU_CU(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
    return PATINA_OK;
}

/* ------------------------------------------------------------- open/close */

static patina_status dev_alloc(patina_gpu_t *g, void **p, size_t bytes, const char *what)
{
    cudaError_t e = cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *p = NULL;
        return patina__fail(PATINA_E_NOMEM, "gpu: cannot allocate %.1f MiB of device memory for %s: %s",
                            (double)bytes / MiB, what, cudaGetErrorString(e));
    }
    g->dev_bytes += bytes;
    return PATINA_OK;
}

static patina_status pin_alloc(patina_gpu_t *g, void **p, size_t bytes, const char *what)
{
    cudaError_t e = cudaHostAlloc(p, bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *p = NULL;
        return patina__fail(PATINA_E_NOMEM, "gpu: cannot allocate %.1f MiB of pinned host memory for %s: %s",
                            (double)bytes / MiB, what, cudaGetErrorString(e));
    }
    g->pinned_bytes += bytes;
    return PATINA_OK;
}

static patina_status open_slot(patina_gpu_t *g, pgpu_slot_t *s)
{
    cudaStream_t st;
    cudaEvent_t ev;
    PGPU_CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    s->stream = st;
    PGPU_CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    s->done = ev;
    PGPU_CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    s->k2_done = ev;
    for (int k = 0; k < 6; k++) {
        PGPU_CU(cudaEventCreate(&ev));
        s->prof[k] = ev;
    }
    PATINA_TRY(dev_alloc(g, (void **)&s->d_in, g->in_plan, "pixel input"));
    PATINA_TRY(dev_alloc(g, (void **)&s->d_blk, g->blk_plan * sizeof(cedd_block_t), "block sums"));
    PATINA_TRY(dev_alloc(g, (void **)&s->d_con, g->blk_plan * sizeof(cedd_contrib_t), "block contributions"));
    PATINA_TRY(dev_alloc(g, (void **)&s->d_pieces, g->unit_plan * sizeof(pgpu_piece_t), "piece table"));
    PATINA_TRY(dev_alloc(g, (void **)&s->d_segs, g->unit_plan * sizeof(pgpu_seg_t), "segment table"));
    PATINA_TRY(dev_alloc(g, (void **)&s->d_out, g->unit_plan * CEDD_BINS, "descriptors"));
    PATINA_TRY(pin_alloc(g, (void **)&s->h_stage, g->in_plan, "pixel staging"));
    PATINA_TRY(pin_alloc(g, (void **)&s->h_blk, g->blk_plan * sizeof(cedd_block_t), "block sums"));
    PATINA_TRY(pin_alloc(g, (void **)&s->h_pieces, g->unit_plan * sizeof(pgpu_piece_t), "piece table"));
    PATINA_TRY(pin_alloc(g, (void **)&s->h_segs, g->unit_plan * sizeof(pgpu_seg_t), "segment table"));
    PATINA_TRY(pin_alloc(g, (void **)&s->h_out, g->unit_plan * CEDD_BINS, "descriptors"));
    s->hp = (pgpu_hpiece_t *)calloc(g->unit_plan, sizeof *s->hp);
    s->out_img = (size_t *)calloc(g->unit_plan, sizeof *s->out_img);
    if (!s->hp || !s->out_img) return patina__fail(PATINA_E_NOMEM, "gpu: out of host memory");
    return PATINA_OK;
}

static void close_slot(pgpu_slot_t *s)
{
    if (s->stream) cudaStreamSynchronize((cudaStream_t)s->stream);
    cudaFree(s->d_in);
    cudaFree(s->d_blk);
    cudaFree(s->d_con);
    cudaFree(s->d_pieces);
    cudaFree(s->d_segs);
    cudaFree(s->d_out);
    cudaFreeHost(s->h_stage);
    cudaFreeHost(s->h_blk);
    cudaFreeHost(s->h_pieces);
    cudaFreeHost(s->h_segs);
    cudaFreeHost(s->h_out);
    if (s->done) cudaEventDestroy((cudaEvent_t)s->done);
    if (s->k2_done) cudaEventDestroy((cudaEvent_t)s->k2_done);
    for (int k = 0; k < 6; k++)
        if (s->prof[k]) cudaEventDestroy((cudaEvent_t)s->prof[k]);
    if (s->stream) cudaStreamDestroy((cudaStream_t)s->stream);
    free(s->hp);
    free(s->out_img);
    memset(s, 0, sizeof *s);
}

void patina_gpu_close(patina_gpu_t *g)
{
    int i;
    if (!g) return;
    if (cudaSetDevice(g->device) == cudaSuccess)
        for (i = 0; i < PGPU_SLOTS; i++) close_slot(&g->slot[i]);
    cudaFree(g->d_carry);
    (void)cudaGetLastError();
    patina_pool_free(g->pool);
    free(g);
}

/* The plan: per slot, a fifth of the slot's share for block sums and
 * contributions (248 B a block, at most 196,608 blocks = 122 VGA frames, so
 * a batch's 39 MiB of contributions stays in the 50 MB L2 between the
 * kernels that write and read them), ~1 MiB of tables and output for up to
 * 4096 pieces, the rest (at most 64 MiB, 72 VGA frames) for pixels. Batches
 * of 64 MiB already run the copy engine at full PCIe speed; more would only
 * cost pinned memory. */
static patina_status plan(patina_gpu_t *g, uint64_t budget)
{
    const size_t min_slot = 4u << 20;
    size_t per_slot = (size_t)(budget / PGPU_SLOTS), blk_bytes, tab;
    if (per_slot < min_slot)
        return patina__fail(PATINA_E_INVALID,
                            "gpu: memory budget %.1f MiB is below the minimum %.1f MiB (%d slots of %.0f MiB)",
                            (double)budget / MiB, PGPU_SLOTS * (double)min_slot / MiB, PGPU_SLOTS,
                            (double)min_slot / MiB);
    g->unit_plan = 4096;
    tab = g->unit_plan * (sizeof(pgpu_piece_t) + sizeof(pgpu_seg_t) + CEDD_BINS);
    blk_bytes = per_slot / 5;
    g->blk_plan = blk_bytes / (sizeof(cedd_block_t) + sizeof(cedd_contrib_t));
    if (g->blk_plan > 196608) g->blk_plan = 196608;
    blk_bytes = g->blk_plan * (sizeof(cedd_block_t) + sizeof(cedd_contrib_t));
    g->in_plan = per_slot - blk_bytes - tab;
    if (g->in_plan > (64u << 20)) g->in_plan = 64u << 20;
    g->in_plan &= ~(size_t)0xffff;
    g->in_cap = g->in_plan;
    g->blk_cap = g->blk_plan;
    g->unit_cap = g->unit_plan;
    return PATINA_OK;
}

patina_status patina_gpu_open(patina_gpu_t **out, int index, uint64_t budget)
{
    patina_gpu_t *g;
    cudaDeviceProp p;
    size_t freeb = 0, total = 0;
    int n = patina_gpu__count(), i;
    patina_status s;

    *out = NULL;
    if (n == 0)
        return patina__fail(PATINA_E_UNAVAILABLE, "gpu: no usable CUDA device (driver missing or no GPU)");
    if (index < 0 || index >= n)
        return patina__fail(PATINA_E_UNAVAILABLE, "gpu: no CUDA device %d (%d usable)", index, n);
    PGPU_CU(cudaSetDevice(index));
    PGPU_CU(cudaGetDeviceProperties(&p, index));
    PGPU_CU(cudaMemGetInfo(&freeb, &total));
    if (budget == 0) budget = freeb / 4;
    if (budget > freeb)
        return patina__fail(PATINA_E_LIMIT, "gpu: memory budget %.1f MiB exceeds the %.1f MiB free on device %d",
                            (double)budget / MiB, (double)freeb / MiB, index);
    g = (patina_gpu_t *)calloc(1, sizeof *g);
    if (!g) return patina__fail(PATINA_E_NOMEM, "gpu: out of host memory");
    g->device = index;
    g->budget = budget;
    g->sm_count = p.multiProcessorCount;
    snprintf(g->name, sizeof g->name, "%s", p.name);
    s = plan(g, budget);
    if (s == PATINA_OK) s = dev_alloc(g, (void **)&g->d_carry, PGPU_CARRY * CEDD_BINS * sizeof(double), "carry");
    for (i = 0; s == PATINA_OK && i < PGPU_SLOTS; i++) s = open_slot(g, &g->slot[i]);
    if (s == PATINA_OK) {
        int t = patina_cpu_count();
        s = patina_pool_new(&g->pool, t < 16 ? t : 16);
    }
    if (s != PATINA_OK) {
        patina_gpu_close(g);
        return s;
    }
    *out = g;
    return PATINA_OK;
}

void patina_gpu__plan(const patina_gpu_t *g, char *buf, size_t size)
{
    snprintf(buf, size,
             "%s: budget %.0f MiB; %d slots x (%.1f MiB pixels, %zu block sums, %zu pieces); "
             "%.1f MiB device, %.1f MiB pinned",
             g->name, (double)g->budget / MiB, PGPU_SLOTS, (double)g->in_cap / MiB, g->blk_cap,
             g->unit_cap, (double)g->dev_bytes / MiB, (double)g->pinned_bytes / MiB);
}

void patina_gpu__profile(patina_gpu_t *g, int on, double ms[4], uint64_t *batches)
{
    if (ms) memcpy(ms, g->prof_ms, sizeof g->prof_ms);
    if (batches) *batches = g->prof_batches;
    memset(g->prof_ms, 0, sizeof g->prof_ms);
    g->prof_batches = 0;
    g->profile = on != 0;
}

void patina_gpu__set_caps(patina_gpu_t *g, size_t pixel_bytes, size_t blocks, size_t units)
{
    g->in_cap = pixel_bytes && pixel_bytes < g->in_plan ? pixel_bytes : g->in_plan;
    g->blk_cap = blocks && blocks < g->blk_plan ? blocks : g->blk_plan;
    g->unit_cap = units && units < g->unit_plan ? units : g->unit_plan;
}

/* -------------------------------------------------------------- bandwidth */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static patina_status time_copies(patina_gpu_t *g, void *dst, const void *src, size_t bytes,
                                 int reps, double *ms)
{
    cudaStream_t st = (cudaStream_t)g->slot[0].stream;
    cudaEvent_t a, b;
    int r;
    PGPU_CU(cudaEventCreate(&a));
    PGPU_CU(cudaEventCreate(&b));
    for (r = 0; r < 4; r++) /* warm-up: the link and clocks may need to wake */
        PGPU_CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, st));
    for (r = 0; r < reps; r++) {
        float t = 0.0f;
        PGPU_CU(cudaEventRecord(a, st));
        PGPU_CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, st));
        PGPU_CU(cudaEventRecord(b, st));
        PGPU_CU(cudaEventSynchronize(b));
        PGPU_CU(cudaEventElapsedTime(&t, a, b));
        ms[r] = t;
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return PATINA_OK;
}

patina_status patina_gpu__bandwidth(patina_gpu_t *g, int kind, size_t bytes, int reps,
                                    double *gbps)
{
    void *src = NULL, *dst = NULL;
    double ms[64];
    patina_status s;
    *gbps = 0.0;
    if (reps < 1) reps = 1;
    if (reps > 64) reps = 64;
    PGPU_CU(cudaSetDevice(g->device));
    if (kind == 0) {
        src = patina_gpu_host_alloc(bytes);
        if (!src) return patina__fail(PATINA_E_NOMEM, "gpu: bandwidth: no pinned memory");
        memset(src, 0x5a, bytes);
    } else {
        src = patina_gpu__dev_alloc(g, bytes);
        if (src) cudaMemset(src, 0x5a, bytes);
    }
    dst = patina_gpu__dev_alloc(g, bytes);
    if (!src || !dst) {
        s = patina__fail(PATINA_E_NOMEM, "gpu: bandwidth: cannot allocate 2 x %.0f MiB", (double)bytes / MiB);
    } else {
        s = time_copies(g, dst, src, bytes, reps, ms);
    }
    if (s == PATINA_OK) {
        qsort(ms, (size_t)reps, sizeof ms[0], cmp_double);
        *gbps = (kind == 0 ? 1.0 : 2.0) * (double)bytes / (ms[0] * 1e-3) / 1e9; /* the best */
    }
    if (kind == 0) patina_gpu_host_free(src);
    else patina_gpu__dev_free(g, src);
    patina_gpu__dev_free(g, dst);
    return s;
}
