/* Hopper's asynchronous tensor-core path (sm_90a): wgmma descriptors,
 * fences and groups, mbarriers, the tensor memory accelerator's copies and
 * register budgets -- shared by the wgmma kernels of identification
 * (idf_wgmma.cuh) and search (knn_ixw.cuh). Include only in translation
 * units compiled for sm_90a (CMakeLists.txt: patina_wg_obj). */
#ifndef PATINA_GPU_WGMMA_CUH
#define PATINA_GPU_WGMMA_CUH

#include <stdint.h>
#include <string.h>

#include <cuda.h> /* CUtensorMap and its enums (types only: the encoder comes from the runtime) */
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include "gpu/ptx.cuh"

/* Shared-memory matrix descriptor of a K-major operand in the 128-byte
 * swizzle: rows of 128 bytes (a RootSIFT row; a 128-byte slab of a longer
 * row), 8-row atoms of 1024 bytes (the stride-dimension offset); the
 * leading-dimension offset is unused in this mode (a k-step of 32 bytes
 * stays inside the swizzle row). addr is the byte address of the tile's
 * first row plus 32 * k-step, the atoms 1024-aligned (base offset 0). */
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr)
{
    return (uint64_t)((addr & 0x3ffffu) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void mbar_init(uint64_t *b, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b)
{
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(smem_u32(b)) : "memory");
}
/* Waits until the phase of the given parity completed (a fresh barrier is
 * in phase 0: waiting for parity 1 returns at once). */
__device__ __forceinline__ void mbar_wait(uint64_t *b, uint32_t parity)
{
    asm volatile("{\n.reg .pred p;\nLAB_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@p bra.uni DONE;\nbra.uni LAB_WAIT;\nDONE:\n}\n" ::"r"(smem_u32(b)),
                 "r"(parity)
                 : "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/* Arrives on b and adds bytes to the transaction count its phase waits for
 * (the tensor copy's complete_tx takes them off). */
__device__ __forceinline__ void mbar_arrive_tx(uint64_t *b, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
/* The tensor memory accelerator: the box at (x, y) of map into dst (shared
 * memory, in the map's swizzle), completing on bar's transaction count. */
__device__ __forceinline__ void tma_load_2d(void *dst, const CUtensorMap *map, int x, int y, uint64_t *bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
                 "[%4];\n" ::"r"(smem_u32(dst)),
                 "l"(map), "r"(x), "r"(y), "r"(smem_u32(bar))
                 : "memory");
}
__device__ __forceinline__ void tma_prefetch(const CUtensorMap *map)
{
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}
/* Register budget of the calling warpgroup (setmaxnreg; a 384-thread
 * kernel's cap at entry is 65536 / 384 = 168): the loader (and scorer)
 * give registers up, the consumers take them. Each call opens its role's branch of one
 * if/else: ptxas then compiles the consumers for the new budget. */
template <int R> __device__ __forceinline__ void regs_dec()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R> __device__ __forceinline__ void regs_inc()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
__device__ __forceinline__ void named_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/* Pins accumulators after wgmma.wait_group: the compiler must not move
 * their reads above the wait. */
template <int N> __device__ __forceinline__ void wg_pin(int32_t (&d)[N])
{
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+r"(d[i])::"memory");
}

/* A 1-D bulk copy of bytes (a multiple of 16, both addresses 16-aligned)
 * from global src into shared dst, completing on bar's transaction count. */
__device__ __forceinline__ void bulk_load(void *dst, const void *src, uint32_t bytes, uint64_t *bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}

/* The driver's tensor-map encoder, resolved once (a static's
 * initialisation: thread-safe); NULL where the driver has none. Host code. */
static inline PFN_cuTensorMapEncodeTiled_v12000 wg_tensor_encoder(void)
{
    static const PFN_cuTensorMapEncodeTiled_v12000 encode = []() -> PFN_cuTensorMapEncodeTiled_v12000 {
        void *fn = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) !=
                cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            return NULL;
        return (PFN_cuTensorMapEncodeTiled_v12000)fn;
    }();
    return encode;
}

/* The tensor map of a 2-D u8 tensor of `rows` rows of `width` bytes (the
 * row pitch), read in boxes of one 128-byte swizzle row x box_rows rows in
 * the 128-byte swizzle (the layout wg_desc names; a box past the last row
 * is filled with zeros). 1 when *map is made, 0 when not: no encoder in
 * this driver, base not 16-aligned, no rows or more than 2^31 of them.
 * Host code. */
static inline int wg_tensor_map_2d(CUtensorMap *map, const void *base, uint64_t width, uint64_t rows,
                                   uint32_t box_rows)
{
    const PFN_cuTensorMapEncodeTiled_v12000 encode = wg_tensor_encoder();
    memset(map, 0, sizeof *map);
    if (!encode || rows == 0 || rows > 0x7fffffffull || ((uintptr_t)base & 15u)) return 0;
    const cuuint64_t dims[2] = {width, rows}, strides[1] = {width};
    const cuuint32_t box[2] = {128, box_rows}, estr[2] = {1, 1};
    return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, (void *)base, dims, strides, box, estr,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

#endif
