/* Warp-level device helpers shared by the kernels. */
#ifndef PATINA_GPU_WARP_CUH
#define PATINA_GPU_WARP_CUH

#include <stdint.h>

/* Inclusive prefix sum of x over the lanes of a full warp (every lane
 * calls it; lane = threadIdx.x & 31): lane i gets x_0 + ... + x_i. */
static __device__ __forceinline__ uint32_t pgpu_warp_scan(uint32_t x, uint32_t lane)
{
    for (uint32_t o = 1; o < 32; o <<= 1) {
        const uint32_t y = __shfl_up_sync(0xFFFFFFFFu, x, o);
        if (lane >= o) x += y;
    }
    return x;
}

#endif
