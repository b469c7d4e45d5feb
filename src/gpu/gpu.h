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

/* ---- local texture patterns: lbp, lbp8, tlbap, lanadp (src/gpu/lbp.cu) ---- */

struct lbp_conf; /* src/features/lbp.h */

/* Histogram descriptors of n host images (any stride, RGB converted to grey
 * on the device with the project's rule): out is (n, dim) of c->hist_elem,
 * the same bytes as the CPU. st[i] per image (may be NULL). */
patina_status patina_gpu_lbp(patina_gpu_t *g, const struct lbp_conf *c, void *out,
                             const patina_image_t *imgs, size_t n, patina_status *st);

/* Kernel lab (bench/lbp.c, tests/gpu/test_lbp_gpu.c). Variants: the paper's
 * global-memory and shared-memory (Algorithm 3) kernels with 16x16 and 32x32
 * blocks (3x3 kinds only), and the production kernel writing code maps or
 * only fused histograms. */
enum {
    PATINA_LBP_LAB_GLOBAL16 = 0,
    PATINA_LBP_LAB_GLOBAL32,
    PATINA_LBP_LAB_SHARED16,
    PATINA_LBP_LAB_SHARED32,
    PATINA_LBP_LAB_CODES,   /* production kernel, code maps out */
    PATINA_LBP_LAB_HIST,    /* production kernel, histogram counts only */
    PATINA_LBP_LAB_COUNT
};
const char *patina_gpu_lbp_lab_name(int variant);

/* Runs `variant` on a batch of n grey images (h, w) u8 stored back to back
 * in host memory: uploads them once, launches the kernel reps times (after
 * one warm-up), and copies back the code maps (n, mh, mw) of c->code_elem
 * into `codes` and/or the histogram counts (n, dim) u32 into `counts` (each
 * may be NULL; the lab variants give codes only). ms (may be NULL): median
 * time of one launch in milliseconds, measured with CUDA events. */
patina_status patina_gpu_lbp_lab(int variant, const struct lbp_conf *c, const uint8_t *grey,
                                 int w, int h, int n, void *codes, uint32_t *counts, int reps,
                                 double *ms);

/* Device-to-device cudaMemcpy bandwidth in GB/s (bytes read + written per
 * second), median of reps copies of `bytes`: the reference for "fraction of
 * the copy bandwidth". */
patina_status patina_gpu_lbp_copy_bandwidth(size_t bytes, int reps, double *gbps);

#ifdef __cplusplus
}
#endif
#endif
