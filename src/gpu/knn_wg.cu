/* The wgmma scan of the tensor-core filter's launches (kernel: knn_ixw.cuh;
 * declarations: knn_wg.h). This translation unit is compiled for sm_90a
 * (CMakeLists.txt: patina_wg_obj), the arch-specific target that wgmma
 * needs; src/gpu/knn.cu decides when it runs. */
#include <cuda_runtime.h>

#include "algo/distance_ids.h"
#include "gpu/knn_ixw.cuh"
#include "gpu/knn_wg.h"

int patina__ixw_applies(int nk32) { return nk32 == 2 || nk32 == 4 || nk32 == 8; }

/* Rows per block: the grid's blocks (gx query blocks times the row
 * blocks) in whole waves of one block an SM where it can be -- among 2 to 8
 * waves the count that leaves the least of the last wave idle -- and at
 * least 4 chunks a block. */
static uint32_t ixw_rows_per_block(uint32_t n, unsigned gx, int sms)
{
    double best = 2.0;
    unsigned gy = 1;
    for (int w = 2; w <= 8; w++) {
        const unsigned y = (unsigned)((size_t)w * (size_t)sms / gx);
        if (y < 1) continue;
        const double waves = (double)gx * y / sms, whole = (double)(size_t)(waves + 0.999999);
        const double idle = (whole - waves) / whole;
        if (idle < best - 0.005) {
            best = idle;
            gy = y;
        }
    }
    uint32_t rpb = (n + gy - 1) / gy;
    rpb = (rpb + IXW_N - 1) / IXW_N * IXW_N;
    return rpb < 4 * IXW_N ? 4 * IXW_N : rpb;
}

template <int D, int NK32>
static cudaError_t ixw_run(const CUtensorMap &map, const ix_info_t *info, uint32_t n,
                           const int8_t *qbytes, const ix_info_t *qinfo, const float *thr, int nq, uint32_t *cnt,
                           uint32_t *cand, int sms, cudaStream_t s)
{
    const size_t smem = ixw_smem_bytes(NK32);
    cudaError_t e = cudaFuncSetAttribute(k_ixw_scan<D, NK32>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    const unsigned gx = (unsigned)((nq + IXW_Q - 1) / IXW_Q);
    const uint32_t rpb = ixw_rows_per_block(n, gx, sms);
    k_ixw_scan<D, NK32><<<dim3(gx, (n + rpb - 1) / rpb), IXW_THREADS, smem, s>>>(map, info, n, rpb, qbytes,
                                                                                qinfo, thr, nq, cnt, cand);
    return cudaGetLastError();
}

template <int D>
static cudaError_t ixw_of(int nk32, const CUtensorMap &map, const ix_info_t *info, uint32_t n,
                          const int8_t *qbytes, const ix_info_t *qinfo, const float *thr, int nq, uint32_t *cnt,
                          uint32_t *cand, int sms, cudaStream_t s)
{
    switch (nk32) {
    case 2: return ixw_run<D, 2>(map, info, n, qbytes, qinfo, thr, nq, cnt, cand, sms, s);
    case 4: return ixw_run<D, 4>(map, info, n, qbytes, qinfo, thr, nq, cnt, cand, sms, s);
    case 8: return ixw_run<D, 8>(map, info, n, qbytes, qinfo, thr, nq, cnt, cand, sms, s);
    default: return cudaErrorNotSupported;
    }
}

cudaError_t patina__ixw_scan(int dist, int nk32, const int8_t *rows, size_t nrows, const ix_info_t *info, uint32_t n,
                             const int8_t *qbytes, const ix_info_t *qinfo, const float *thr, int nq,
                             uint32_t *cnt, uint32_t *cand, int sms, cudaStream_t stream)
{
    CUtensorMap map;
    if (!patina__ixw_applies(nk32) || n == 0 || nq <= 0 || !ixw_tensor_map(&map, rows, nrows, nk32))
        return cudaErrorNotSupported;
    switch (dist) {
    case PDIST_L2: return ixw_of<PDIST_L2>(nk32, map, info, n, qbytes, qinfo, thr, nq, cnt, cand, sms, stream);
    case PDIST_STD_L2:
        return ixw_of<PDIST_STD_L2>(nk32, map, info, n, qbytes, qinfo, thr, nq, cnt, cand, sms, stream);
    case PDIST_COSINE:
        return ixw_of<PDIST_COSINE>(nk32, map, info, n, qbytes, qinfo, thr, nq, cnt, cand, sms, stream);
    case PDIST_HELLINGER:
        return ixw_of<PDIST_HELLINGER>(nk32, map, info, n, qbytes, qinfo, thr, nq, cnt, cand, sms, stream);
    default: return cudaErrorNotSupported;
    }
}
