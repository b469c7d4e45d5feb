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

#include "core/internal.h"
#include "gpu/gpu.h"
#include "patina/context.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
#endif
