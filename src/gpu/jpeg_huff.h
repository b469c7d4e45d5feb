/* The parallel Huffman decoder's kernels (src/gpu/jpeg_huff.cu), for the
 * exact decoder (src/gpu/jpeg_exact.cu): the steps of
 * src/algo/jpeg_huff_core.h, one thread per chunk (or interval), on a batch
 * staged by patina__jpegh_stage (src/image/jpeg_huff.h) and copied to the
 * device. CUDA side only. */
#ifndef PATINA_GPU_JPEG_HUFF_H
#define PATINA_GPU_JPEG_HUFF_H

#include <cuda_runtime.h>

#include "algo/jpeg_huff_core.h"
#include "core/internal.h"

/* The kernels' scratch (chunk states, flags, block and DC sums), grown to the
 * largest batch seen; zeroed: no scratch. */
typedef struct jhg_scratch {
    void *mem;
    size_t bytes;
} jhg_scratch_t;

/* Runs the steps on stream s: b's base, img (nimg entries, nblocks set),
 * coef and flags are device pointers, nimg, nchunk and niv set; st, dirty, g0
 * and dc are taken from *sc (grown here, which waits for s). Zeroes each
 * image's coefficients first. Asynchronous: the coefficients and flags are
 * there once s reaches this point. */
patina_status patina__jhg_run(jhg_scratch_t *sc, jh_batch_t *b, cudaStream_t s, int sm_count);
void patina__jhg_free(jhg_scratch_t *sc);

#endif
