/* The k-NN engines' constants and per-row / per-query layouts
 * (gpu/knn_tc.cuh: the tensor-core Tanimoto engine; knn_fx.cuh: the float
 * filter; knn_ix.cuh: the tensor-core filter), apart from their kernels so
 * that the files holding device copies (knn_internal.cuh) can use them
 * without compiling the kernels again. */
#ifndef PATINA_GPU_KNN_LAYOUT_CUH
#define PATINA_GPU_KNN_LAYOUT_CUH

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

/* ---- the tensor-core engine (knn_tc.cuh) ---- */

#define TC_WARPS 8          /* warps per scan block */
#define TC_R 128            /* rows per shared-memory stage */
#define TC_STAGES 3
#define TC_CAND 4096        /* candidates per query */
#define TC_KMAX PGPU_KNN_KMAX /* k on the GPU */
#define TC_FINAL_THREADS 512
#define TC_SEL_THREADS 1024
#define TC_TSEL_THREADS 256 /* the pilot selects' block (k_tc_select, k_fl_select): thousands of values a query */

/* Bytes a tensor-core device row of dim elements: CEDD's 144, else
 * padded to 256 (PGPU_KNN_MAXDIM). */
static inline int tc_dp(size_t dim) { return dim == 144 ? 144 : 256; }

/* The one-query kernel's packed rows (k_tc_one's pilot and scan read them:
 * a single query's scan is a read of the table, and these are half its
 * bytes): two elements a byte (the fast path's elements are <= 7), element
 * 2 i in the low nibble of byte i, zero padded, then the row's T1 and
 * S1 / T1 (tc_aux_t's x and w: the scan's filter) as floats in the last 8
 * bytes; 80 bytes a row at 144 elements, 144 at 256. */
#define TC_PK_BYTES(dp) ((dp) == 144 ? 80 : 144)

/* Per query: T2, T2^2, S2 (exact integers as floats) and the filter's
 * threshold theta' (scan) -- written by k_tc_select or the host (range). */
typedef float4 tc_qinfo_t;

/* Per row: T1, T1^2, S1 as floats (exact integers) and S1 / T1; a zero row
 * holds (0, 0, 1, 1e30) so that its t is 0 / T2^2 = 0 (its distance is
 * 100) and it passes the filter only when every row does. */
typedef float4 tc_aux_t;

/* ---- the float filter (knn_fx.cuh) ---- */

#define FX_ROWS 256 /* rows per block, one per thread */
#define FX_QB 32    /* queries per block */
#define FX_DC 64    /* elements per shared-memory chunk */

/* Per query: mq, Nq, the scan's threshold U + mq (rounded up), unused. */
typedef float4 fx_qinfo_t;

/* Per row: mr, Nr. */
typedef float2 fx_aux_t;

/* ---- the tensor-core filter (knn_ix.cuh) ---- */

#define IX_MAXDIM 256 /* elements at most (the query fragments fit the registers; sums < 2^24) */
#define IX_R 64       /* rows per shared-memory stage */

/* Per row and per query: s, A, E, and N (l2, std_l2) or W (cosine,
 * hellinger) (knn_ix.cuh). */
typedef float4 ix_info_t;

/* ---- query fragments (the tensor-core scans) ---- */

/* A query tile's A fragment of an m16n8k32 (byte column c): rows q0 and
 * q1 = q0 + 8 of qbytes (stride bytes a query), zero past nq. It is also
 * a warp's share of a wgmma m64nNk32 A operand held in registers (warp w of
 * the warpgroup: rows 16 w .. 16 w + 15), which knn_ixw.cuh uses. */
__device__ __forceinline__ void tc_frag_a(uint32_t a[4], const void *qbytes, size_t stride, int q0, int q1, int nq,
                                          int c)
{
    const uint8_t *b = (const uint8_t *)qbytes;
    a[0] = q0 < nq ? *(const uint32_t *)(b + (size_t)q0 * stride + c) : 0u;
    a[1] = q1 < nq ? *(const uint32_t *)(b + (size_t)q1 * stride + c) : 0u;
    a[2] = q0 < nq ? *(const uint32_t *)(b + (size_t)q0 * stride + c + 16) : 0u;
    a[3] = q1 < nq ? *(const uint32_t *)(b + (size_t)q1 * stride + c + 16) : 0u;
}

#endif
