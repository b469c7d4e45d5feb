/* The wgmma identification matcher's entry points (src/gpu/identify_wg.cu,
 * the kernel in idf_wgmma.cuh), for src/gpu/identify.cu's dispatch. That
 * file alone is compiled for sm_90a, and only when the build targets sm_90
 * with CUDA >= 12 (PATINA_HAVE_WGMMA=1); the caller runs it only on a
 * compute capability 9.0 device. Include after gpu/idf_kernels.cuh
 * (idf_launch_t). */
#ifndef PATINA_GPU_IDF_WGMMA_H
#define PATINA_GPU_IDF_WGMMA_H

#include <stddef.h>

#include "patina/patina.h"

#define IDFW_QMAX 1024 /* query rows at most (all resident in the block's shared memory) */

/* Whether the wgmma kernel takes a launch of this precision (IDF_PREC_*),
 * m rows per slot (padded) and n rows per query. */
int patina__idf_wg_applies(int prec, int m, int n);

/* Dynamic shared memory of one block of the wgmma kernel (pair: a launch
 * with L.qsplit, the companions scored apart). */
size_t patina__idf_wg_smem(int m, int n, int K, int scoring, int pair);

/* Launches the wgmma kernel on L: grid (gx, nq), smem from
 * patina__idf_wg_smem, on stream (a cudaStream_t), device dev (its dynamic
 * shared-memory limit is raised once per size). A launch error becomes the
 * status and message. */
patina_status patina__idf_wg_launch(const idf_launch_t *L, unsigned gx, unsigned nq, size_t smem, void *stream,
                                    int dev);

#endif
