/* The execution context: worker threads, the GPU (opened lazily), image
 * limits and the GPU JPEG decoder's settings. Every call that extracts,
 * indexes or searches runs on a context.
 *
 * Threads. One context may be shared by any number of threads. Calls that
 * use its worker threads take turns, and so do calls that use its GPU
 * (each is serialised inside the context); a CPU call and a GPU call may
 * run at the same time. For parallel CPU work from several threads, give
 * each thread its own context. */
#ifndef PATINA_CONTEXT_H
#define PATINA_CONTEXT_H

#include <stddef.h>
#include <stdint.h>
#include "patina/image.h"
#include "patina/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct patina_context patina_context_t;

typedef struct patina_context_opts {
    int threads;              /* CPU workers; 0 = all online CPUs */
    int gpu_index;            /* CUDA device ordinal (default 0) */
    uint64_t gpu_mem_budget;  /* bytes of device memory the context may hold; 0 = 1/4 of free */
    patina_limits_t limits;   /* image limits (0 fields = defaults) */
    /* The nvJPEG library to load for GPU JPEG decoding (a path or a file
     * name dlopen searches; copied): NULL = libnvjpeg.so.13, .12, .11 in
     * turn. */
    const char *nvjpeg_library;
    /* Host threads feeding the JPEG engines, per decoder: 1..16; 0 = 2
     * (each a decoding state, a parser and a stream; measured rates per
     * lane count: docs/images.md, "JPEG on the GPU"). */
    int nvjpeg_lanes;
} patina_context_opts_t;

/* Online CPUs (>= 1): what threads = 0 means. */
PATINA_API int patina_cpu_count(void);

/* Fills opts with the defaults (every field as documented above). */
PATINA_API void patina_context_opts_init(patina_context_opts_t *opts);

/* opts may be NULL for defaults. Never fails for lack of a GPU: the GPU is
 * opened on first use, and patina_context_resolve says what a device choice
 * means. Bad values (negative threads, lanes out of range) fail with
 * PATINA_E_INVALID. */
PATINA_API patina_status patina_context_new(patina_context_t **ctx, const patina_context_opts_t *opts);
PATINA_API void patina_context_free(patina_context_t *ctx); /* accepts NULL */
PATINA_API int patina_context_threads(const patina_context_t *ctx);
PATINA_API const patina_limits_t *patina_context_limits(const patina_context_t *ctx);

/* Describes the context's GPU memory into buf: the budget, what is held and
 * by whom. PATINA_E_UNAVAILABLE when the context has no usable GPU. */
PATINA_API patina_status patina_context_gpu_memory(patina_context_t *ctx, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
