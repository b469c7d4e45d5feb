/* A block-wide radix select (the kth largest of n unsigned keys), shared by
 * the GPU searches' selection kernels (src/gpu/knn_tc.cuh, src/gpu/sqfd.cu). */
#ifndef PATINA_GPU_RADIX_CUH
#define PATINA_GPU_RADIX_CUH

#include <stdint.h>

/* The value of rank kth (1 = the largest) among n unsigned keys key(i),
 * for the whole block (every thread calls it; blockDim.x a multiple of 32
 * dividing 2048): a three-pass radix select on bits 31-21, 20-10, 9-0.
 * Each pass counts the keys that match the digits found so far into 2048
 * bins (lanes with the same bin add once: the keys crowd into few bins),
 * then finds the bin of the kth largest by a block-wide suffix sum. sh
 * (2048 + 34 words of shared memory) is the caller's. */
template <typename Key>
__device__ uint32_t tc_radix_kth(Key key, uint32_t n, uint32_t kth, uint32_t *sh)
{
    uint32_t *hist = sh, *wsum = sh + 2048, *res = sh + 2048 + 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int per = 2048 / blockDim.x; /* bins per thread */
    const int shifts[3] = {21, 10, 0}, widths[3] = {11, 11, 10};
    uint32_t prefix = 0, mask = 0, k = kth;
    for (int p = 0; p < 3; p++) {
        const int sh_ = shifts[p];
        const uint32_t bm = (1u << widths[p]) - 1u;
        for (int i = threadIdx.x; i < 2048; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        for (uint32_t i0 = 0; i0 < n; i0 += 4 * blockDim.x) {
            uint32_t u[4];
#pragma unroll
            for (int j = 0; j < 4; j++) { /* loads first: four in flight */
                const uint32_t i = i0 + j * blockDim.x + threadIdx.x;
                u[j] = i < n ? key(i) : 0u;
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint32_t i = i0 + j * blockDim.x + threadIdx.x;
                const uint32_t b = i < n && (u[j] & mask) == prefix ? (u[j] >> sh_) & bm : 0xffffffffu;
                const uint32_t same = __match_any_sync(0xffffffffu, b);
                if (b != 0xffffffffu && lane == __ffs(same) - 1) atomicAdd(&hist[b], (uint32_t)__popc(same));
            }
        }
        __syncthreads();
        uint32_t mine = 0;
        for (int j = 0; j < per; j++) mine += hist[threadIdx.x * per + j];
        uint32_t suf = mine; /* inclusive suffix sum within the warp */
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const uint32_t x = __shfl_down_sync(0xffffffffu, suf, o);
            if (lane + o < 32) suf += x;
        }
        if (lane == 0) wsum[warp] = suf;
        __syncthreads();
        uint32_t above = suf - mine;
        for (int w = warp + 1; w < nw; w++) above += wsum[w];
        if (above < k && above + mine >= k) { /* the kth largest is in one of my bins */
            uint32_t acc = above;
            int b = threadIdx.x * per + per - 1;
            for (; b > (int)threadIdx.x * per; b--) {
                if (acc + hist[b] >= k) break;
                acc += hist[b];
            }
            res[0] = k - acc;
            res[1] = prefix | ((uint32_t)b << sh_);
        }
        __syncthreads();
        k = res[0];
        prefix = res[1];
        mask |= bm << sh_;
        __syncthreads();
    }
    return prefix;
}

#endif
