/* The execution context's internal interface (src/core/context.c), for the
 * modules that run work on a context: extraction (src/features/extract.c),
 * the indexing pipeline and the search. Public side: include/patina/context.h.
 *
 * Turns. A context's workers and its GPU are each used by one caller at a
 * time: a call takes the turn (the _acquire functions), does its work, and
 * gives it back. The locks are recursive, so a call that holds a turn may
 * call another library function that takes it again (the pipeline holds
 * both for a whole run and extracts batches inside it). Take the workers
 * before the GPU when a call needs both. */
#ifndef PATINA_CORE_CONTEXT_H
#define PATINA_CORE_CONTEXT_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"
#include "patina/context.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Devices: what the core calls of the GPU side. Declared here (the
 * core never includes src/gpu/), implemented by src/gpu: its .cu files and
 * nvjpeg.c with CUDA, nogpu.c (no device, "unavailable") without. The rest
 * of the GPU interface, for the modules above the core, is gpu/gpu.h. */

/* A device context: the device, its streams, pinned staging buffers and a
 * scratch arena sized from a memory budget; one thread at a time. */
typedef struct patina_gpu patina_gpu_t;
/* A JPEG decoder on a device (nvJPEG loaded at run time; gpu/gpu.h). */
typedef struct patina_jpeg_gpu patina_jpeg_gpu_t;

/* Usable CUDA devices (0 when the driver or a device is missing). */
int patina_gpu__count(void);
patina_status patina_gpu__describe(int i, char *buf, size_t size);

/* Opens device `index`. budget: bytes of device memory the context's
 * families may hold together (0 = a quarter of free memory); they allocate
 * on first use (gpu/context.h). PATINA_E_UNAVAILABLE without a usable GPU. */
patina_status patina_gpu_open(patina_gpu_t **g, int index, uint64_t budget);
void patina_gpu_close(patina_gpu_t *g); /* accepts NULL */

/* A decoder on g's device: the JPEG engines where the device has them,
 * else nvJPEG's GPU Huffman backend, fed by `lanes` host threads (1..16),
 * with the library (a path or file name; NULL: the usual names). One
 * calling thread at a time. */
patina_status patina_gpu_jpeg_open(patina_jpeg_gpu_t **d, patina_gpu_t *g, const char *library,
                                   int lanes);
void patina_gpu_jpeg_close(patina_jpeg_gpu_t *d); /* accepts NULL */

/* The exact JPEG decoder on a device (gpu/gpu.h, src/gpu/jpeg_exact.cu): its
 * memory is allocated on first use: pinned staging and device buffers for
 * the coefficients of one round of images (a size derived from g's budget,
 * 64..256 MiB), the component planes, and an arena for the RGB images of the
 * last call. One thread at a time. */
typedef struct patina_jpegx_gpu patina_jpegx_gpu_t;
patina_status patina_gpu_jpegx_open(patina_jpegx_gpu_t **d, patina_gpu_t *g);
void patina_gpu_jpegx_close(patina_jpegx_gpu_t *d); /* accepts NULL */

/* The device context's memory in words: budget, bytes held, and each
 * allocation with its owner and purpose. */
void patina_gpu__plan(const patina_gpu_t *g, char *buf, size_t size);

/* ---- Slices: a context over a list of G > 1 devices (include/patina/context.h)
 * holds G slice contexts, one per listed device, each with its own device
 * state, budget, GPU turn and worker pool (the context's threads shared
 * out, at least one each). A slice is an ordinary context to the engines:
 * a table calls them with the slice's context and the slice's rows. The
 * context's own GPU calls (extraction, the pipeline) go to slice 0's
 * device; its own workers stay its own. */

/* G (1 for NULL or a context of one device). */
size_t patina__context_slices(const patina_context_t *ctx);
/* Slice i (< G) of ctx; ctx itself when G is 1 (NULL stays NULL). */
patina_context_t *patina__context_slice(patina_context_t *ctx, size_t i);
/* Runs fn(arg, i) for i in [0, n) at once and returns when all are done:
 * i = 0 in the calling thread, i >= 1 on slice i's runner, a thread the
 * context keeps (spinning briefly between calls, then asleep). A runner
 * busy with another call's part, or one that could not be started, is
 * replaced by a thread made for this call (else the calling thread runs
 * that part afterwards). ctx NULL or of one device: threads per call. */
void patina__context_run_slices(patina_context_t *ctx, size_t n, void (*fn)(void *arg, size_t i), void *arg);

/* ---- Turns */

/* The options the context was made with (defaults filled in). */
const patina_context_opts_t *patina__context_opts(const patina_context_t *ctx);

/* The context's worker pool, for the caller's turn. */
patina_pool_t *patina__context_workers_acquire(patina_context_t *ctx);
void patina__context_workers_release(patina_context_t *ctx);

/* The workers of one call: ctx's (its turn, held until
 * patina__workers_end), else a pool of `threads` (0: every CPU) made for
 * the call (*own = 1), else NULL when one thread would do (patina_pool_run
 * then runs inline). */
patina_status patina__workers_begin(patina_context_t *ctx, int threads, patina_pool_t **pool, int *own);
void patina__workers_end(patina_context_t *ctx, patina_pool_t *pool, int own);

/* The context's GPU, opened on first use (later calls repeat the first
 * failure), for the caller's turn: on success the caller must release it;
 * on failure nothing is held. */
patina_status patina__context_gpu_acquire(patina_context_t *ctx, patina_gpu_t **g);
void patina__context_gpu_release(patina_context_t *ctx);

/* Whether the context's GPU can be opened (opens it; never fails). */
int patina__context_gpu_usable(patina_context_t *ctx);

/* The indexing pipeline's two nvJPEG decoders (one per window in flight),
 * opened once per context with its nvJPEG settings: creating them costs far
 * more than a batch. The caller holds the GPU turn. */
patina_status patina__context_jpeg(patina_context_t *ctx, patina_jpeg_gpu_t *out[2]);

/* The exact GPU JPEG decoders of the pipeline (gpu.h: patina_gpu_jpegx_*),
 * two (one per window in flight: patina_index_files; patina_extract_files
 * uses the first), opened once per context and kept: their staging is
 * pinned memory, which costs far more to create than a batch takes to
 * decode. Each one's images are valid until its next call. The caller holds
 * the workers' turn for as long as it uses the decoders or their images
 * (one user at a time). */
patina_status patina__context_jpegx(patina_context_t *ctx, patina_jpegx_gpu_t *out[2]);

#ifdef __cplusplus
}
#endif
#endif
