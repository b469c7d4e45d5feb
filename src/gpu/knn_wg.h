/* The wgmma scan of the tensor-core filter (src/gpu/knn_wg.cu, the kernel
 * in knn_ixw.cuh), for src/gpu/knn.cu's dispatch. That file alone is
 * compiled for sm_90a, and only when the build targets sm_90 with CUDA >=
 * 12 (PATINA_HAVE_WGMMA=1); the caller runs it only on a compute
 * capability 9.0 device. */
#ifndef PATINA_GPU_KNN_WG_H
#define PATINA_GPU_KNN_WG_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "gpu/knn_layout.cuh"

/* Whether the wgmma scan takes limbs of nk32 32-byte k-steps (2, 4, 8). */
int patina__ixw_applies(int nk32);

/* The filter's scan (k_ix_scan's MODE 1) of rows [0, n) of a copy whose
 * limbs rows (nrows allocated rows of 2 x 32 nk32 bytes) and infos info
 * are on the current device, for nq queries (qbytes, qinfo, thr), into cnt / cand;
 * dist a PDIST_* dot-product distance, sms the device's multiprocessors,
 * stream a cudaStream_t. cudaErrorNotSupported (nothing launched) where no
 * tensor map can be made: the caller takes the mma.sync scan. */
cudaError_t patina__ixw_scan(int dist, int nk32, const int8_t *rows, size_t nrows, const ix_info_t *info, uint32_t n,
                             const int8_t *qbytes, const ix_info_t *qinfo, const float *thr, int nq,
                             uint32_t *cnt, uint32_t *cand, int sms, cudaStream_t stream);

#endif
