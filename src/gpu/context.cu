/* The CUDA device context: enumeration, the memory plan (streams, pinned
 * staging, device buffers sized from a budget), pinned and device
 * allocations, and the bandwidth probes the benchmark reports against.
 * The descriptor kernels live in one .cu per family (cedd.cu, lbp.cu, ...),
 * their buffers in family states that this context owns (context.h).
 *
 * Every CUDA error becomes a patina status with a message, here at the
 * boundary; nothing prints, nothing exits. */
#include <cuda_runtime.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/context.h"
#include "gpu/tcache.h"

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

/* ------------------------------------------------------- device images */

int patina_gpu_image_on_device(const patina_image_t *img)
{
    cudaPointerAttributes a;
    if (!img || !img->data) return 0;
    if (cudaPointerGetAttributes(&a, img->data) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

patina_status patina_gpu_image_host(patina_image_t *host, const patina_image_t *img)
{
    size_t rb;
    *host = *img;
    host->owned = 0;
    if (!patina_gpu_image_on_device(img) || img->width <= 0 || img->height <= 0) return PATINA_OK;
    rb = 3 * (size_t)img->width;
    host->data = (uint8_t *)malloc(rb * (size_t)img->height);
    host->stride = rb;
    if (!host->data) {
        memset(host, 0, sizeof *host);
        return patina__fail(PATINA_E_NOMEM, "gpu: out of memory for a host copy of a %dx%d device image",
                            img->width, img->height);
    }
    host->owned = 1;
    if (cudaMemcpy2D(host->data, rb, img->data, img->stride, rb, (size_t)img->height, cudaMemcpyDefault) !=
        cudaSuccess) {
        cudaError_t e = cudaGetLastError();
        free(host->data);
        memset(host, 0, sizeof *host);
        return pgpu_fail((int)e, "cudaMemcpy2D(device image to host)", __FILE__, __LINE__);
    }
    return PATINA_OK;
}

/* ------------------------------------------------------- coalesced copies */

patina_status pgpu_copy_flush(pgpu_copy_run_t *r, void *stream)
{
    if (r->bytes)
        PGPU_CU(cudaMemcpyAsync(r->dst, r->src, r->bytes, (cudaMemcpyKind)r->kind, (cudaStream_t)stream));
    r->bytes = 0;
    return PATINA_OK;
}

patina_status pgpu_copy_add(pgpu_copy_run_t *r, uint8_t *dst, const uint8_t *src, size_t bytes,
                            void *stream)
{
    if (r->bytes && r->dst + r->bytes == dst && r->src + r->bytes == src) {
        r->bytes += bytes;
        return PATINA_OK;
    }
    PATINA_TRY(pgpu_copy_flush(r, stream));
    r->dst = dst;
    r->src = src;
    r->bytes = bytes;
    return PATINA_OK;
}

/* ---------------------------------------------------- tagged allocations */

typedef struct pgpu_alloc {
    struct pgpu_alloc *next;
    void *p;
    size_t bytes;
    int pinned;
    pgpu_fam owner;
    const char *tag;
} pgpu_alloc_t;

static const char *const fam_names[PGPU_NFAM] = {"context", "cedd", "lbp", "glcm", "search", "identify", "sqfd",
                                                     "signature", "rootsift"};

/* Releases the states of every family but `keep` (oldest first does not
 * matter: states are independent). */
static void release_others(patina_gpu_t *g, pgpu_fam keep)
{
    for (int f = 0; f < PGPU_NFAM; f++)
        if (f != (int)keep) pgpu_drop_state(g, (pgpu_fam)f);
}

static patina_status track(patina_gpu_t *g, void *p, size_t bytes, int pinned, pgpu_fam owner,
                           const char *tag)
{
    pgpu_alloc_t *a = (pgpu_alloc_t *)malloc(sizeof *a);
    if (!a) return patina__fail(PATINA_E_NOMEM, "gpu: out of host memory");
    a->p = p;
    a->bytes = bytes;
    a->pinned = pinned;
    a->owner = owner;
    a->tag = tag;
    a->next = g->allocs;
    g->allocs = a;
    if (pinned) {
        g->pinned_bytes += bytes;
    } else {
        g->dev_bytes += bytes;
        if (g->dev_bytes > g->dev_peak) g->dev_peak = g->dev_bytes;
    }
    return PATINA_OK;
}

patina_status pgpu_dev_alloc(patina_gpu_t *g, void **p, size_t bytes, pgpu_fam owner, const char *tag)
{
    cudaError_t e;
    *p = NULL;
    if (bytes == 0) bytes = 1;
    if (g->dev_bytes + bytes > g->budget) release_others(g, owner);
    if (g->dev_bytes + bytes > g->budget)
        return patina__fail(PATINA_E_LIMIT,
                            "gpu: %s %s needs %.1f MiB of device memory; %.1f of the budget's %.1f MiB "
                            "are held (raise the GPU memory budget)",
                            fam_names[owner], tag, (double)bytes / MiB, (double)g->dev_bytes / MiB,
                            (double)g->budget / MiB);
    PGPU_CU(cudaSetDevice(g->device));
    e = cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *p = NULL;
        return patina__fail(PATINA_E_NOMEM, "gpu: cannot allocate %.1f MiB of device memory for %s %s: %s",
                            (double)bytes / MiB, fam_names[owner], tag, cudaGetErrorString(e));
    }
    if (track(g, *p, bytes, 0, owner, tag) != PATINA_OK) {
        cudaFree(*p);
        *p = NULL;
        return PATINA_E_NOMEM;
    }
    return PATINA_OK;
}

patina_status pgpu_pin_alloc(patina_gpu_t *g, void **p, size_t bytes, pgpu_fam owner, const char *tag)
{
    cudaError_t e;
    *p = NULL;
    if (bytes == 0) bytes = 1;
    PGPU_CU(cudaSetDevice(g->device));
    e = cudaHostAlloc(p, bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *p = NULL;
        return patina__fail(PATINA_E_NOMEM, "gpu: cannot allocate %.1f MiB of pinned host memory for %s %s: %s",
                            (double)bytes / MiB, fam_names[owner], tag, cudaGetErrorString(e));
    }
    if (track(g, *p, bytes, 1, owner, tag) != PATINA_OK) {
        cudaFreeHost(*p);
        *p = NULL;
        return PATINA_E_NOMEM;
    }
    return PATINA_OK;
}

void pgpu_free(patina_gpu_t *g, void *p)
{
    pgpu_alloc_t **link, *a;
    if (!g || !p) return;
    for (link = &g->allocs; (a = *link) != NULL; link = &a->next)
        if (a->p == p) break;
    if (!a) return; /* not ours: a bug in the caller, but freeing it could be worse */
    *link = a->next;
    (void)cudaSetDevice(g->device);
    if (a->pinned) {
        cudaFreeHost(p);
        g->pinned_bytes -= a->bytes;
    } else {
        cudaFree(p);
        g->dev_bytes -= a->bytes;
    }
    (void)cudaGetLastError();
    free(a);
}

void pgpu_free_n(patina_gpu_t *g, int n, ...)
{
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        void **pp = va_arg(ap, void **);
        pgpu_free(g, *pp);
        *pp = NULL;
    }
    va_end(ap);
}

void *pgpu_stream(patina_gpu_t *g, int k) { return g->stream[k]; }

patina_status pgpu_sync(patina_gpu_t *g)
{
    PGPU_CU(cudaSetDevice(g->device));
    for (int k = 0; k < PGPU_STREAMS; k++)
        if (g->stream[k]) PGPU_CU(cudaStreamSynchronize((cudaStream_t)g->stream[k]));
    return PATINA_OK;
}

/* ---------------------------------------------------------- family states */

void *pgpu_state(patina_gpu_t *g, pgpu_fam fam) { return g->fam[fam].state; }

void pgpu_set_state(patina_gpu_t *g, pgpu_fam fam, void *state, pgpu_release_fn release)
{
    pgpu_drop_state(g, fam);
    g->fam[fam].state = state;
    g->fam[fam].release = release;
}

void pgpu_drop_state(patina_gpu_t *g, pgpu_fam fam)
{
    void *st = g->fam[fam].state;
    if (!st) return;
    g->fam[fam].state = NULL;
    if (g->fam[fam].release) g->fam[fam].release(g, st);
    g->fam[fam].release = NULL;
}

/* ------------------------------------------------------------- open/close */

void patina_gpu_close(patina_gpu_t *g)
{
    int i;
    if (!g) return;
    (void)cudaSetDevice(g->device);
    (void)pgpu_sync(g);
    for (i = PGPU_NFAM - 1; i >= 0; i--) pgpu_drop_state(g, (pgpu_fam)i);
    tcache_close(g); /* empty now: the states dropped their entries */
    while (g->allocs) pgpu_free(g, g->allocs->p); /* whatever a family left */
    for (i = 0; i < PGPU_STREAMS; i++)
        if (g->stream[i]) cudaStreamDestroy((cudaStream_t)g->stream[i]);
    (void)cudaGetLastError();
    patina_pool_free(g->pool);
    free(g);
}

patina_status patina_gpu_open(patina_gpu_t **out, int index, uint64_t budget)
{
    patina_gpu_t *g;
    cudaDeviceProp p;
    size_t freeb = 0, total = 0;
    int n = patina_gpu__count(), i;
    patina_status s = PATINA_OK;

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
    g->cc = p.major * 10 + p.minor;
    if (cudaDeviceGetAttribute(&g->clock_khz, cudaDevAttrClockRate, g->device) != cudaSuccess) {
        (void)cudaGetLastError();
        g->clock_khz = 0;
    }
    if (cudaDeviceGetAttribute(&g->mem_clock_khz, cudaDevAttrMemoryClockRate, g->device) != cudaSuccess ||
        cudaDeviceGetAttribute(&g->mem_bus_bits, cudaDevAttrGlobalMemoryBusWidth, g->device) != cudaSuccess) {
        (void)cudaGetLastError();
        g->mem_clock_khz = 0;
        g->mem_bus_bits = 0;
    }
    g->total_mem = p.totalGlobalMem;
    g->smem_optin = (int)p.sharedMemPerBlockOptin;
    g->smem_sm = (int)p.sharedMemPerMultiprocessor;
    snprintf(g->name, sizeof g->name, "%s", p.name);
    for (i = 0; s == PATINA_OK && i < PGPU_STREAMS; i++) {
        cudaStream_t st;
        cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
        if (e != cudaSuccess) s = pgpu_fail((int)e, "cudaStreamCreateWithFlags", __FILE__, __LINE__);
        else g->stream[i] = st;
    }
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
    const pgpu_alloc_t *a;
    size_t used = 0;
    int k;
    k = snprintf(buf, size, "%s: budget %.0f MiB; %.1f MiB device (peak %.1f), %.1f MiB pinned", g->name,
                 (double)g->budget / MiB, (double)g->dev_bytes / MiB, (double)g->dev_peak / MiB,
                 (double)g->pinned_bytes / MiB);
    if (k > 0) used = (size_t)k < size ? (size_t)k : size;
    /* per owner and tag, newest first */
    for (a = g->allocs; a && used + 1 < size; a = a->next) {
        k = snprintf(buf + used, size - used, "; %s %s %.1f MiB%s", fam_names[a->owner], a->tag,
                     (double)a->bytes / MiB, a->pinned ? " pinned" : "");
        if (k < 0) break;
        used += (size_t)k < size - used ? (size_t)k : size - used - 1;
    }
}

/* -------------------------------------------------------------- bandwidth */

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void pgpu_sort_doubles(double *v, size_t n) { qsort(v, n, sizeof *v, cmp_double); }

static patina_status time_copies(patina_gpu_t *g, void *dst, const void *src, size_t bytes,
                                 int reps, double *ms)
{
    cudaStream_t st = (cudaStream_t)g->stream[0];
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
        pgpu_sort_doubles(ms, (size_t)reps);
        *gbps = (kind == 0 ? 1.0 : 2.0) * (double)bytes / (ms[0] * 1e-3) / 1e9; /* the best */
    }
    if (kind == 0) patina_gpu_host_free(src);
    else patina_gpu__dev_free(g, src);
    patina_gpu__dev_free(g, dst);
    return s;
}
