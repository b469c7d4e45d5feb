/* The wgmma identification matcher's launches (kernel: idf_wgmma.cuh;
 * declarations: idf_wgmma.h). This translation unit alone is compiled for
 * sm_90a (CMakeLists.txt: patina_wg_obj), the arch-specific target that
 * wgmma needs; src/gpu/identify.cu decides when it runs. */
#include <atomic>

#include <cuda_runtime.h>

#include "gpu/context.h"
#include "gpu/idf_kernels.cuh"
#include "gpu/idf_wgmma.cuh"
#include "gpu/idf_wgmma.h"
#include "gpu/smem_raise.cuh"

/* The one2one and raw instance: consumer warpgroups (2 or 3) and m-tiles
 * in pairs (1, with 2 consumers), as lab/identify/wgmma's wgmma2, wgmma3
 * and wgmma2p rows time them. Three consumers: on an H200 (lab_wgmma,
 * 2026-11-28) one query against 200k references of m = 384, n = 768 took
 * 22.05 ms (9.07 M refs/s, 32.0% of the int8 peak) against 26.44 (wgmma2),
 * 22.01 (wgmma2p) and 37.82 (mma.sync), and it led on the odd shapes
 * (257x768, 3 queries: 15.7 M/s against 12.5 for wgmma2p). The mutual
 * instance (2 consumers, no pairs) is slower than mma.sync there (1.03 against
 * 1.46 M/s): the dispatcher keeps mutual scoring on mma.sync. Both run
 * with the split mode for short queries and the tensor-copy loader
 * (2026-12-01, lab_wgmma's wgmma3t row: 384 x 64, one query against 200k
 * references 5.08 -> 3.15 ms, 65% of the HBM's rate; 384 x 768 21.78 ->
 * 21.56 ms). */
#define IDFW_NCW 3
#define IDFW_PAIRS false

int patina__idf_wg_applies(int prec, int m, int n) { return idfw_supported(prec, m, n); }

size_t patina__idf_wg_smem(int m, int n, int K, int scoring, int pair)
{
    return idfw_smem_bytes(m, n, K, scoring, pair);
}

patina_status patina__idf_wg_launch(const idf_launch_t *L, unsigned gx, unsigned nq, size_t smem, void *stream,
                                    int dev)
{
    static std::atomic<int> raised[2][PGPU_SMEM_DEVICES]; /* [mutual][device]: pgpu_smem_raise's marks */
    const int mutual = L->scoring == IDF_SCORE_MUTUAL;
    void (*k)(const idf_launch_t, const CUtensorMap, int) =
        mutual ? k_idf_match_wg<true, 2, false, true> : k_idf_match_wg<false, IDFW_NCW, IDFW_PAIRS, true>;
    const int threads = mutual ? IDFW_THREADS(2) : IDFW_THREADS(IDFW_NCW);
    CUtensorMap map; /* the loader's tensor copies; without one it loads with cp.async (the same answers) */
    const int tma = idfw_tensor_map(&map, *L);
    PATINA_TRY(pgpu_smem_raise((const void *)k, raised[mutual], dev, smem));
    k<<<dim3(gx, nq), threads, smem, (cudaStream_t)stream>>>(*L, map, tma);
    PGPU_CU(cudaGetLastError());
    return PATINA_OK;
}
