/* The execution context: worker threads, the GPU or GPUs (opened lazily),
 * image limits and the GPU JPEG decoder's settings. Every call that
 * extracts, indexes or searches runs on a context.
 *
 * Devices. A context uses one GPU (gpu_index) or a list of them (gpus:
 * "all", "0,1", ...). With a list of G > 1 devices, each listed device is
 * a slice: its own device state, memory budget, turn and worker threads
 * (the context's threads shared out); a live table (patina/table.h) splits
 * its rows over the slices and runs every call on all of them at once. A
 * device may be listed twice ("0,0": two slices on one GPU). Calls that
 * are not a table's (extraction, indexing, patina_index_knn) use the first
 * listed device.
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
    int threads;              /* CPU workers; 0 = patina_cpu_count() */
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
    /* The devices (copied): NULL or "" = the one device gpu_index; "all" =
     * every usable CUDA device (none: one slice, no usable GPU: the CPU
     * answers); else a comma-separated list of device ordinals, at most
     * PATINA_GPUS_MAX entries, repeats allowed ("0,0"). A list of one is
     * that device, as gpu_index. gpu_mem_budget holds for each listed
     * device (0: a quarter of its free memory when it opens). */
    const char *gpus;
} patina_context_opts_t;

#define PATINA_GPUS_MAX 64

/* The CPUs this process may use (>= 1): what threads = 0 means. The
 * online CPUs, fewer when the calling thread's affinity mask (taskset, a
 * container's cpuset) holds fewer, or a cgroup v2 CPU quota
 * (/sys/fs/cgroup/cpu.max, rounded up to whole CPUs: a Kubernetes CPU
 * limit) allows fewer. */
PATINA_API int patina_cpu_count(void);

/* Fills opts with the defaults (every field as documented above). */
PATINA_API void patina_context_opts_init(patina_context_opts_t *opts);

/* opts may be NULL for defaults. Never fails for lack of a GPU: the GPU is
 * opened on first use, and patina_context_resolve says what a device choice
 * means. Bad values (negative threads, lanes out of range, a malformed gpus
 * list: not "all", an empty entry, a number out of 0..1023, more than
 * PATINA_GPUS_MAX entries) fail with PATINA_E_INVALID. A listed device the
 * machine does not have fails with PATINA_E_UNAVAILABLE here when the
 * machine has a usable GPU; on one without any, the list is kept (its
 * slices answer on the CPU, and device GPU is PATINA_E_UNAVAILABLE). */
PATINA_API patina_status patina_context_new(patina_context_t **ctx, const patina_context_opts_t *opts);
PATINA_API void patina_context_free(patina_context_t *ctx); /* accepts NULL */
PATINA_API int patina_context_threads(const patina_context_t *ctx);
PATINA_API const patina_limits_t *patina_context_limits(const patina_context_t *ctx);

/* The context's devices: how many slices it has (1 without a list of
 * several), their device ordinals written to devices[0 .. min(count, cap))
 * (devices may be NULL with cap 0). */
PATINA_API size_t patina_context_devices(const patina_context_t *ctx, int *devices, size_t cap);

/* Describes the context's GPU memory into buf: per device, the budget, what
 * is held and by whom (one line per device when it has several).
 * PATINA_E_UNAVAILABLE when a device cannot be opened. */
PATINA_API patina_status patina_context_gpu_memory(patina_context_t *ctx, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
