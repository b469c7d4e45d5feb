/* Private to src/gpu: the device context behind patina_gpu_t.
 *
 * One context per (patina_context_t, device) owns everything the GPU side
 * holds: the device, PGPU_STREAMS non-blocking streams shared by every
 * family, the host threads that stage pageable input, and every device and
 * pinned allocation, each tagged with its owner and purpose so that memory
 * use can be reported (patina_gpu__plan).
 *
 * Families keep their buffers and plans in a state object that the context
 * owns (pgpu_state / pgpu_set_state): created on a family's first call,
 * released by patina_gpu_close, or earlier when another family needs the
 * memory. Device memory is planned from the context's budget: pgpu_dev_alloc
 * refuses what would exceed it, after first releasing the states of the other
 * families (they are caches; a family's state is rebuilt on its next call).
 * Nothing lives in file-scope variables, so closing the context frees all
 * (compute-sanitizer --leak-check full is clean).
 *
 * A context is used by one thread at a time (patina_context_t serialises
 * its callers); the calls below are not thread-safe on one context. */
#ifndef PATINA_GPU_CONTEXT_H
#define PATINA_GPU_CONTEXT_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"
#include "gpu/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PGPU_STREAMS 3

/* The families whose state a context may hold. */
typedef enum pgpu_fam {
    PGPU_FAM_CONTEXT = 0, /* the context's own allocations (probes) */
    PGPU_FAM_CEDD,
    PGPU_FAM_LBP,
    PGPU_FAM_GLCM,
    PGPU_FAM_SEARCH,
    PGPU_FAM_IDENTIFY,
    PGPU_FAM_SQFD,
    PGPU_FAM_SIGNATURE,
    PGPU_FAM_ROOTSIFT,
    PGPU_NFAM
} pgpu_fam;

/* Releases a family's state: waits for its work, frees its allocations
 * (pgpu_free) and the state itself. */
typedef void (*pgpu_release_fn)(patina_gpu_t *g, void *state);

struct pgpu_alloc;  /* one tagged allocation (context.cu) */
struct pgpu_tcache; /* the table cache's registry (gpu/tcache.h) */

struct patina_gpu {
    int device;
    char name[256];
    int sm_count;
    int cc;                    /* compute capability, major * 10 + minor (90: Hopper, whose wgmma kernels run) */
    int clock_khz;             /* the SMs' clock (cudaDevAttrClockRate), for peak rates */
    int mem_clock_khz;         /* the memory's peak clock (cudaDevAttrMemoryClockRate; 0: unknown) */
    int mem_bus_bits;          /* its bus width (cudaDevAttrGlobalMemoryBusWidth): peak bytes/s = 2 clock bits / 8 */
    uint64_t total_mem;        /* device memory (bytes) */
    int smem_optin;            /* shared memory a block may opt in to (bytes) */
    int smem_sm;               /* shared memory per SM (bytes) */
    uint64_t budget;           /* device bytes the families may hold together */
    uint64_t dev_bytes;        /* device bytes held now (tagged allocations) */
    uint64_t pinned_bytes;     /* pinned host bytes held now */
    uint64_t dev_peak;         /* most device bytes held at once */
    void *stream[PGPU_STREAMS];/* cudaStream_t, non-blocking, shared by the families */
    struct pgpu_alloc *allocs; /* tagged allocations, newest first */
    struct {
        void *state;
        pgpu_release_fn release;
    } fam[PGPU_NFAM];
    patina_pool_t *pool;       /* host threads for staging copies */
    struct pgpu_tcache *tcache;/* the tables the engines hold on the device (gpu/tcache.h) */
};

/* patina_status from a CUDA error code: "gpu: <what>: <message> (<name>)". */
patina_status pgpu_fail(int cuda_error, const char *what, const char *file, int line);

/* In a function returning patina_status: a failed CUDA call returns
 * pgpu_fail's status, naming the call, the file and the line. */
#define PGPU_CU(call)                                                                          \
    do {                                                                                       \
        cudaError_t pgpu_e_ = (call);                                                          \
        if (pgpu_e_ != cudaSuccess) return pgpu_fail((int)pgpu_e_, #call, __FILE__, __LINE__); \
    } while (0)

/* In a function returning patina_status with a variable `status` and a
 * cleanup label: a failed CUDA call stores pgpu_fail's status in `status`
 * and jumps to `label`. */
#define PGPU_CU_GOTO(call, status, label)                                                      \
    do {                                                                                       \
        cudaError_t pgpu_e_ = (call);                                                          \
        if (pgpu_e_ != cudaSuccess) {                                                          \
            (status) = pgpu_fail((int)pgpu_e_, #call, __FILE__, __LINE__);                     \
            goto label;                                                                        \
        }                                                                                      \
    } while (0)

/* One pending asynchronous copy that grows while the pieces added are
 * contiguous in both source and destination, so that adjacent pieces travel
 * as one copy. Start it as {NULL, NULL, 0, kind}; kind: a cudaMemcpyKind. */
typedef struct pgpu_copy_run {
    uint8_t *dst;
    const uint8_t *src;
    size_t bytes;
    int kind;
} pgpu_copy_run_t;

/* Adds a piece of `bytes` from src to dst on stream (a cudaStream_t):
 * extends the pending copy when it continues it, else issues the pending
 * one and starts a new one. */
patina_status pgpu_copy_add(pgpu_copy_run_t *r, uint8_t *dst, const uint8_t *src, size_t bytes,
                            void *stream);
/* Issues the pending copy, if any, on stream. */
patina_status pgpu_copy_flush(pgpu_copy_run_t *r, void *stream);

/* Sorts v[0..n) ascending (timings: the median is v[n / 2], the best v[0]). */
void pgpu_sort_doubles(double *v, size_t n);

/* Device memory for family `owner` (tag: what it holds, for reports), within
 * the budget: other families' states are released first when needed;
 * PATINA_E_LIMIT when it still does not fit, PATINA_E_NOMEM when the device
 * refuses. *p is NULL on failure. */
patina_status pgpu_dev_alloc(patina_gpu_t *g, void **p, size_t bytes, pgpu_fam owner,
                             const char *tag);
/* Pinned (page-locked) host memory, tagged likewise (not in the budget). */
patina_status pgpu_pin_alloc(patina_gpu_t *g, void **p, size_t bytes, pgpu_fam owner,
                             const char *tag);
/* Frees an allocation of either kind made above (NULL: nothing). */
void pgpu_free(patina_gpu_t *g, void *p);
/* Frees n such allocations, given as pointers to the variables that hold
 * them, and sets those variables to NULL: pgpu_free_n(g, 2, &a, &b). */
void pgpu_free_n(patina_gpu_t *g, int n, ...);

/* The context's stream k (0 <= k < PGPU_STREAMS), as a cudaStream_t. */
void *pgpu_stream(patina_gpu_t *g, int k);
/* Waits for every stream of the context. */
patina_status pgpu_sync(patina_gpu_t *g);

/* A family's state (NULL before its first call or after a release). */
void *pgpu_state(patina_gpu_t *g, pgpu_fam fam);
/* Hands a new state to the context, which releases it with `release`. */
void pgpu_set_state(patina_gpu_t *g, pgpu_fam fam, void *state, pgpu_release_fn release);
/* Releases a family's state now (nothing when it has none). */
void pgpu_drop_state(patina_gpu_t *g, pgpu_fam fam);

#ifdef __cplusplus
}
#endif
#endif
