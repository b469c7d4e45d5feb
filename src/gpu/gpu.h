/* The library's C view of the CUDA side. Implemented by the .cu files in src/gpu when
 * nvcc is found, and by src/gpu/nogpu.c (every call: "unavailable")
 * otherwise. CUDA errors become statuses here, at the boundary.
 *
 * A patina_gpu_t is a device context: the device, its streams, pinned
 * staging buffers and a scratch arena sized from a memory budget. One
 * context is used by one thread at a time. */
#ifndef PATINA_GPU_H
#define PATINA_GPU_H

#include <stddef.h>
#include <stdint.h>
#include "core/internal.h"
#include "patina/image.h"
#include "patina/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct patina_gpu patina_gpu_t;

/* Usable CUDA devices (0 when the driver or a device is missing). */
int patina_gpu__count(void);
patina_status patina_gpu__describe(int i, char *buf, size_t size);

/* Opens device `index`. budget: bytes of device memory for batches (0 =
 * a quarter of free memory). PATINA_E_UNAVAILABLE without a usable GPU. */
patina_status patina_gpu_open(patina_gpu_t **g, int index, uint64_t budget);
void patina_gpu_close(patina_gpu_t *g); /* accepts NULL */

/* Pinned (page-locked) host memory, for callers that want the fastest
 * host-to-device path. NULL on failure or without a GPU. */
void *patina_gpu_host_alloc(size_t bytes);
void patina_gpu_host_free(void *p);

/* GPU-only CEDD of n host images (any stride; pinned memory is copied
 * directly, pageable memory through pinned staging): out is (n, 144).
 * st[i] per image (may be NULL). Batched, streams overlap copy and compute. */
patina_status patina_gpu_cedd(patina_gpu_t *g, uint8_t *out, const patina_image_t *imgs, size_t n,
                              int compact, patina_status *st);

/* Hybrid CEDD: CPU workers of `pool` compute each image's block sums
 * (cedd_block_sums) into pinned buffers while the GPU turns earlier ones
 * into descriptors; only the block sums cross PCIe. Same output. */
patina_status patina_gpu_cedd_hybrid(patina_gpu_t *g, patina_pool_t *pool, uint8_t *out,
                                     const patina_image_t *imgs, size_t n, int compact,
                                     patina_status *st);

#ifdef __cplusplus
}
#endif
#endif
