/* The execution context (include/patina/context.h, core/context.h): worker
 * threads, the lazily opened GPU, limits, nvJPEG settings, the turns that
 * let threads share one context, and the slices of a context over several
 * devices (each an ordinary context of one device, owned by this one). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"

#define NVJPEG_LANES_MAX 16

/* A slice runner: a thread kept for a context's slice i >= 1, which runs
 * that slice's part of the calls that fan out over the slices
 * (patina__context_run_slices). A call claims it (busy), posts its work
 * (seq) and waits for done_seq to match. Both sides spin a little before
 * sleeping on the condition variable: calls follow each other within
 * microseconds in a busy server, and a thread woken from a futex takes tens
 * of microseconds, a large part of a call of a fraction of a millisecond. */
#define RUNNER_SPIN_NS 200000 /* 0.2 ms */

typedef struct slice_runner {
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* seq or done_seq moved, or stop */
    atomic_int busy;          /* claimed by a call */
    atomic_uint_fast64_t seq; /* work posted (bumped per call) */
    atomic_uint_fast64_t done_seq;
    atomic_int stop;
    void (*fn)(void *arg, size_t i); /* the posted work: fn(arg, i) */
    void *arg;
    size_t i;
} slice_runner_t;

struct patina_context {
    patina_context_opts_t opts;
    char nvjpeg_library[1024];   /* opts.nvjpeg_library points here (or is NULL) */
    patina_pool_t *pool;
    pthread_mutex_t workers_mu;  /* the workers' turn (recursive) */
    pthread_mutex_t gpu_mu;      /* the GPU's turn (recursive); guards the fields below */
    patina_gpu_t *gpu;
    int gpu_tried;               /* opened once, lazily */
    patina_status gpu_status;
    char gpu_error[512];
    patina_jpeg_gpu_t *jpeg[2];  /* nvJPEG decoders of the indexing pipeline, opened on first use */
    patina_jpegx_gpu_t *jpegx[2];/* exact decoders of the pipeline (one per window in flight), opened on first use */
    size_t nslices;              /* listed devices (1: this context's own gpu_index, no slices) */
    patina_context_t **slice;    /* (nslices) when nslices > 1: one context per listed device */
    slice_runner_t *runner;      /* (nslices) when nslices > 1: [1 ..) the slices' runners */
    int devices[PATINA_GPUS_MAX]; /* (nslices) their device ordinals */
};

void patina_context_opts_init(patina_context_opts_t *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    patina_limits_init(&o->limits);
    o->nvjpeg_lanes = 2;
}

static int recursive_mutex(pthread_mutex_t *m)
{
    pthread_mutexattr_t a;
    int r;
    if (pthread_mutexattr_init(&a)) return -1;
    r = pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE) || pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
    return r ? -1 : 0;
}

#define GPU_ORDINAL_MAX 1023

/* The device list of opts->gpus into dev (*n entries, >= 1): its own
 * gpu_index without a list, every usable device for "all" (one slice,
 * gpu_index, when there is none). PATINA_E_INVALID for a malformed list,
 * PATINA_E_UNAVAILABLE for a device the machine lacks (when it has any). */
static patina_status parse_gpus(const char *gpus, int gpu_index, int *dev, size_t *n)
{
    const char *p = gpus;
    int usable;
    size_t i;
    *n = 0;
    if (!gpus || !*gpus) {
        dev[(*n)++] = gpu_index;
        return PATINA_OK;
    }
    if (!strcmp(gpus, "all")) {
        usable = patina_gpu__count();
        if (usable <= 0) dev[(*n)++] = gpu_index;
        for (i = 0; usable > 0 && i < (size_t)usable && i < PATINA_GPUS_MAX; i++) dev[(*n)++] = (int)i;
        return PATINA_OK;
    }
    for (;;) {
        const char *start = p;
        int v = 0;
        while (*p >= '0' && *p <= '9' && v <= GPU_ORDINAL_MAX) v = v * 10 + (*p++ - '0');
        if (p == start || (*p != ',' && *p != '\0'))
            return patina__fail(PATINA_E_INVALID,
                                "context: gpus '%s': expected \"all\" or device numbers separated by commas "
                                "(\"0,1\"; \"0,0\" = two slices on device 0)",
                                gpus);
        if (v > GPU_ORDINAL_MAX)
            return patina__fail(PATINA_E_INVALID, "context: gpus '%s': device numbers are 0..%d", gpus,
                                GPU_ORDINAL_MAX);
        if (*n == PATINA_GPUS_MAX)
            return patina__fail(PATINA_E_INVALID, "context: gpus '%s': more than %d devices", gpus, PATINA_GPUS_MAX);
        dev[(*n)++] = v;
        if (!*p++) break;
    }
    /* a device the machine lacks is an error now, when the machine has GPUs at all: otherwise its slice
     * would quietly answer on the CPU */
    usable = patina_gpu__count();
    for (i = 0; usable > 0 && i < *n; i++)
        if (dev[i] >= usable)
            return patina__fail(PATINA_E_UNAVAILABLE, "context: gpus '%s': no CUDA device %d (%d usable: 0..%d)",
                                gpus, dev[i], usable, usable - 1);
    return PATINA_OK;
}

/* Spins until *a != v (returns 1) or RUNNER_SPIN_NS have passed (0). */
static int spin_while(atomic_uint_fast64_t *a, uint64_t v)
{
    const double until = patina_now() + RUNNER_SPIN_NS * 1e-9;
    for (unsigned n = 0;; n++) {
        if (atomic_load_explicit(a, memory_order_acquire) != v) return 1;
        if ((n & 255) == 255 && patina_now() > until) return 0;
    }
}

static void *runner_main(void *p)
{
    slice_runner_t *r = p;
    uint64_t seen = 0;
    for (;;) {
        if (!spin_while(&r->seq, seen)) {
            pthread_mutex_lock(&r->mu);
            while (atomic_load(&r->seq) == seen && !atomic_load(&r->stop)) pthread_cond_wait(&r->cv, &r->mu);
            pthread_mutex_unlock(&r->mu);
        }
        if (atomic_load(&r->stop)) break;
        seen = atomic_load(&r->seq);
        r->fn(r->arg, r->i);
        atomic_store_explicit(&r->done_seq, seen, memory_order_release);
        pthread_mutex_lock(&r->mu); /* a caller may sleep on the condition */
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
    }
    return NULL;
}

/* Starts the runners of slices 1 .. n-1 (one that cannot start is left
 * out: its slice's part runs on a thread made per call). */
static void start_runners(patina_context_t *c, size_t n)
{
    if (!(c->runner = calloc(n, sizeof *c->runner))) return; /* every call makes its threads */
    for (size_t i = 1; i < n; i++) {
        slice_runner_t *r = &c->runner[i];
        if (pthread_mutex_init(&r->mu, NULL)) continue;
        if (pthread_cond_init(&r->cv, NULL)) {
            pthread_mutex_destroy(&r->mu);
            continue;
        }
        r->started = pthread_create(&r->th, NULL, runner_main, r) == 0;
        if (!r->started) {
            pthread_cond_destroy(&r->cv);
            pthread_mutex_destroy(&r->mu);
        }
    }
}

static void stop_runners(patina_context_t *c)
{
    for (size_t i = 1; c->runner && i < c->nslices; i++) {
        slice_runner_t *r = &c->runner[i];
        if (!r->started) continue;
        pthread_mutex_lock(&r->mu);
        atomic_store(&r->stop, 1);
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        pthread_join(r->th, NULL);
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->mu);
    }
    free(c->runner);
    c->runner = NULL;
}

/* A thread made for one call's part (a runner busy with another call's). */
typedef struct one_off {
    void (*fn)(void *arg, size_t i);
    void *arg;
    size_t i;
} one_off_t;

static void *one_off_main(void *p)
{
    one_off_t *o = p;
    o->fn(o->arg, o->i);
    return NULL;
}

void patina__context_run_slices(patina_context_t *ctx, size_t n, void (*fn)(void *arg, size_t i), void *arg)
{
    enum { ON_RUNNER = 1, ON_THREAD = 2 };
    int how[PATINA_GPUS_MAX];
    uint64_t posted[PATINA_GPUS_MAX];
    pthread_t th[PATINA_GPUS_MAX];
    one_off_t oo[PATINA_GPUS_MAX];
    size_t i;
    if (n > PATINA_GPUS_MAX) n = PATINA_GPUS_MAX;
    for (i = 1; i < n; i++) {
        slice_runner_t *r = ctx && ctx->runner && i < ctx->nslices ? &ctx->runner[i] : NULL;
        int idle = 0;
        how[i] = 0;
        if (r && r->started && atomic_compare_exchange_strong(&r->busy, &idle, 1)) {
            r->fn = fn;
            r->arg = arg;
            r->i = i;
            posted[i] = atomic_load(&r->seq) + 1;
            pthread_mutex_lock(&r->mu); /* the runner may sleep on the condition */
            atomic_store_explicit(&r->seq, posted[i], memory_order_release);
            pthread_cond_broadcast(&r->cv);
            pthread_mutex_unlock(&r->mu);
            how[i] = ON_RUNNER;
            continue;
        }
        oo[i] = (one_off_t){fn, arg, i};
        if (pthread_create(&th[i], NULL, one_off_main, &oo[i]) == 0) how[i] = ON_THREAD;
    }
    fn(arg, 0);
    for (i = 1; i < n; i++) {
        slice_runner_t *r = how[i] == ON_RUNNER ? &ctx->runner[i] : NULL;
        if (r) {
            if (!spin_while(&r->done_seq, posted[i] - 1)) {
                pthread_mutex_lock(&r->mu);
                while (atomic_load(&r->done_seq) != posted[i]) pthread_cond_wait(&r->cv, &r->mu);
                pthread_mutex_unlock(&r->mu);
            }
            atomic_store(&r->busy, 0);
        } else if (how[i] == ON_THREAD) {
            pthread_join(th[i], NULL);
        } else {
            fn(arg, i); /* no thread could be made: here, afterwards */
        }
    }
}

/* The slices of c over its n > 1 devices: contexts of one device each, the
 * threads shared out. */
static patina_status new_slices(patina_context_t *c, size_t n)
{
    int share = patina_pool_size(c->pool) / (int)n;
    size_t i;
    if (!(c->slice = calloc(n, sizeof *c->slice))) return patina__fail(PATINA_E_NOMEM, "context: out of memory");
    c->nslices = n;
    for (i = 0; i < n; i++) {
        patina_context_opts_t o = c->opts;
        o.gpus = NULL;
        o.gpu_index = c->devices[i];
        o.threads = share > 0 ? share : 1;
        PATINA_TRY(patina_context_new(&c->slice[i], &o));
    }
    start_runners(c, n);
    return PATINA_OK;
}

patina_status patina_context_new(patina_context_t **ctx, const patina_context_opts_t *opts)
{
    patina_context_t *c;
    patina_context_opts_t o;
    patina_status s;
    int devices[PATINA_GPUS_MAX];
    size_t ndev = 0;
    if (!ctx) return patina__fail(PATINA_E_INVALID, "context: null output pointer");
    *ctx = NULL;
    patina_context_opts_init(&o);
    if (opts) o = *opts;
    if (o.threads < 0) return patina__fail(PATINA_E_INVALID, "context: negative thread count %d", o.threads);
    if (o.threads > 4096) return patina__fail(PATINA_E_INVALID, "context: %d threads is too many (max 4096)", o.threads);
    if (o.gpu_index < 0) return patina__fail(PATINA_E_INVALID, "context: negative GPU index %d", o.gpu_index);
    if (o.nvjpeg_lanes < 0 || o.nvjpeg_lanes > NVJPEG_LANES_MAX)
        return patina__fail(PATINA_E_INVALID, "context: nvjpeg_lanes %d is outside 0..%d", o.nvjpeg_lanes,
                            NVJPEG_LANES_MAX);
    if (o.limits.max_pixels == 0) o.limits.max_pixels = PATINA_DEFAULT_MAX_PIXELS;
    if (o.limits.max_file_bytes == 0) o.limits.max_file_bytes = PATINA_DEFAULT_MAX_FILE_BYTES;
    if (o.nvjpeg_lanes == 0) o.nvjpeg_lanes = 2;
    PATINA_TRY(parse_gpus(o.gpus, o.gpu_index, devices, &ndev));
    if (ndev == 1) o.gpu_index = devices[0];
    o.gpus = NULL; /* the list lives on as devices (patina_context_devices) */
    c = calloc(1, sizeof *c);
    if (!c) return patina__fail(PATINA_E_NOMEM, "context: out of memory");
    c->opts = o;
    c->nslices = 1;
    memcpy(c->devices, devices, ndev * sizeof *devices);

    if (o.nvjpeg_library) {
        if (strlen(o.nvjpeg_library) >= sizeof c->nvjpeg_library) {
            free(c);
            return patina__fail(PATINA_E_INVALID, "context: nvjpeg_library path is longer than %zu bytes",
                                sizeof c->nvjpeg_library - 1);
        }
        snprintf(c->nvjpeg_library, sizeof c->nvjpeg_library, "%s", o.nvjpeg_library);
        c->opts.nvjpeg_library = c->nvjpeg_library;
    }
    if (recursive_mutex(&c->workers_mu)) {
        free(c);
        return patina__fail(PATINA_E_NOMEM, "context: cannot create a lock");
    }
    if (recursive_mutex(&c->gpu_mu)) {
        pthread_mutex_destroy(&c->workers_mu);
        free(c);
        return patina__fail(PATINA_E_NOMEM, "context: cannot create a lock");
    }
    s = patina_pool_new(&c->pool, c->opts.threads);
    if (s != PATINA_OK) {
        pthread_mutex_destroy(&c->gpu_mu);
        pthread_mutex_destroy(&c->workers_mu);
        free(c);
        return s;
    }
    if (ndev > 1 && (s = new_slices(c, ndev)) != PATINA_OK) {
        patina_context_free(c);
        return s;
    }
    *ctx = c;
    return PATINA_OK;
}

void patina_context_free(patina_context_t *ctx)
{
    size_t i;
    if (!ctx) return;
    patina_gpu_jpeg_close(ctx->jpeg[0]); /* before the device they run on (slice 0's, when sliced) */
    patina_gpu_jpeg_close(ctx->jpeg[1]);
    patina_gpu_jpegx_close(ctx->jpegx[0]);
    patina_gpu_jpegx_close(ctx->jpegx[1]);
    stop_runners(ctx);
    for (i = 0; ctx->slice && i < ctx->nslices; i++) patina_context_free(ctx->slice[i]);
    free(ctx->slice);
    patina_gpu_close(ctx->gpu);
    patina_pool_free(ctx->pool);
    pthread_mutex_destroy(&ctx->gpu_mu);
    pthread_mutex_destroy(&ctx->workers_mu);
    free(ctx);
}

const patina_context_opts_t *patina__context_opts(const patina_context_t *ctx) { return &ctx->opts; }

size_t patina__context_slices(const patina_context_t *ctx) { return ctx && ctx->slice ? ctx->nslices : 1; }

patina_context_t *patina__context_slice(patina_context_t *ctx, size_t i)
{
    return ctx && ctx->slice && i < ctx->nslices ? ctx->slice[i] : ctx;
}

size_t patina_context_devices(const patina_context_t *ctx, int *devices, size_t cap)
{
    size_t n, i;
    if (!ctx) return 0;
    n = ctx->slice ? ctx->nslices : 1;
    for (i = 0; devices && i < n && i < cap; i++) devices[i] = ctx->slice ? ctx->devices[i] : ctx->opts.gpu_index;
    return n;
}

int patina_context_threads(const patina_context_t *ctx) { return patina_pool_size(ctx->pool); }
const patina_limits_t *patina_context_limits(const patina_context_t *ctx) { return &ctx->opts.limits; }

patina_pool_t *patina__context_workers_acquire(patina_context_t *ctx)
{
    pthread_mutex_lock(&ctx->workers_mu);
    return ctx->pool;
}

void patina__context_workers_release(patina_context_t *ctx) { pthread_mutex_unlock(&ctx->workers_mu); }

patina_status patina__workers_begin(patina_context_t *ctx, int threads, patina_pool_t **pool, int *own)
{
    *own = 0;
    *pool = NULL;
    if (ctx) {
        *pool = patina__context_workers_acquire(ctx);
        return PATINA_OK;
    }
    if ((threads > 0 ? threads : patina_cpu_count()) <= 1) return PATINA_OK;
    PATINA_TRY(patina_pool_new(pool, threads));
    *own = 1;
    return PATINA_OK;
}

void patina__workers_end(patina_context_t *ctx, patina_pool_t *pool, int own)
{
    if (own) patina_pool_free(pool);
    else if (ctx) patina__context_workers_release(ctx);
}

/* With the GPU's turn held: opens the GPU once; later calls repeat the
 * first outcome. */
static patina_status open_gpu(patina_context_t *ctx)
{
    if (!ctx->gpu_tried) {
        ctx->gpu_tried = 1;
        ctx->gpu_status = patina_gpu_open(&ctx->gpu, ctx->opts.gpu_index, ctx->opts.gpu_mem_budget);
        if (ctx->gpu_status != PATINA_OK)
            snprintf(ctx->gpu_error, sizeof ctx->gpu_error, "%s", patina_last_error());
    }
    if (ctx->gpu_status != PATINA_OK) return patina__fail(ctx->gpu_status, "%s", ctx->gpu_error);
    return PATINA_OK;
}

patina_status patina__context_gpu_acquire(patina_context_t *ctx, patina_gpu_t **g)
{
    patina_status s;
    *g = NULL;
    if (ctx->slice) return patina__context_gpu_acquire(ctx->slice[0], g); /* the first listed device */
    pthread_mutex_lock(&ctx->gpu_mu);
    s = open_gpu(ctx);
    if (s != PATINA_OK) {
        pthread_mutex_unlock(&ctx->gpu_mu);
        return s;
    }
    *g = ctx->gpu;
    return PATINA_OK;
}

void patina__context_gpu_release(patina_context_t *ctx)
{
    if (ctx->slice) patina__context_gpu_release(ctx->slice[0]);
    else pthread_mutex_unlock(&ctx->gpu_mu);
}

int patina__context_gpu_usable(patina_context_t *ctx)
{
    patina_gpu_t *g;
    if (patina_gpu__count() == 0) return 0;
    if (patina__context_gpu_acquire(ctx, &g) != PATINA_OK) {
        patina_clear_error();
        return 0;
    }
    patina__context_gpu_release(ctx);
    return 1;
}

patina_status patina__context_jpeg(patina_context_t *ctx, patina_jpeg_gpu_t *out[2])
{
    patina_gpu_t *g;
    patina_status s = PATINA_OK;
    PATINA_TRY(patina__context_gpu_acquire(ctx, &g));
    for (int k = 0; k < 2 && s == PATINA_OK; k++)
        if (!ctx->jpeg[k])
            s = patina_gpu_jpeg_open(&ctx->jpeg[k], g, ctx->opts.nvjpeg_library, ctx->opts.nvjpeg_lanes);
    if (s == PATINA_OK) {
        out[0] = ctx->jpeg[0];
        out[1] = ctx->jpeg[1];
    }
    patina__context_gpu_release(ctx);
    return s;
}

patina_status patina__context_jpegx(patina_context_t *ctx, patina_jpegx_gpu_t *out[2])
{
    patina_gpu_t *g;
    patina_status s = PATINA_OK;
    out[0] = out[1] = NULL;
    PATINA_TRY(patina__context_gpu_acquire(ctx, &g));
    for (int k = 0; k < 2 && s == PATINA_OK; k++)
        if (!ctx->jpegx[k]) s = patina_gpu_jpegx_open(&ctx->jpegx[k], g);
    if (s == PATINA_OK) {
        out[0] = ctx->jpegx[0];
        out[1] = ctx->jpegx[1];
    }
    patina__context_gpu_release(ctx);
    return s;
}

patina_status patina_context_gpu_memory(patina_context_t *ctx, char *buf, size_t size)
{
    patina_gpu_t *g;
    size_t i, used = 0;
    if (!ctx || (!buf && size)) return patina__fail(PATINA_E_INVALID, "context: null argument");
    if (size) buf[0] = '\0';
    if (!ctx->slice) {
        PATINA_TRY(patina__context_gpu_acquire(ctx, &g));
        patina_gpu__plan(g, buf, size);
        patina__context_gpu_release(ctx);
        return PATINA_OK;
    }
    /* one line per listed device: "device D (slice i of G): <its plan>" */
    for (i = 0; i < ctx->nslices; i++) {
        int k;
        PATINA_TRY(patina__context_gpu_acquire(ctx->slice[i], &g));
        k = used < size ? snprintf(buf + used, size - used, "%sdevice %d (slice %zu of %zu): ", i ? "\n" : "",
                                   ctx->devices[i], i, ctx->nslices)
                        : 0;
        if (k > 0) used += (size_t)k < size - used ? (size_t)k : size - used - 1;
        if (used + 1 < size) patina_gpu__plan(g, buf + used, size - used);
        used += used < size ? strlen(buf + used) : 0;
        patina__context_gpu_release(ctx->slice[i]);
    }
    return PATINA_OK;
}
