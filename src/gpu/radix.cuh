/* A block-wide radix select (the kth largest of n unsigned keys), shared by
 * the GPU searches' selection kernels (src/gpu/knn_tc.cuh, src/gpu/sqfd.cu). */
#ifndef PATINA_GPU_RADIX_CUH
#define PATINA_GPU_RADIX_CUH

#include <stdint.h>

/* Shared words tc_radix_kth needs (the caller's): 2048 bins, 32 warp
 * sums, 4 results. */
#define TC_RADIX_WORDS (2048 + 36)

/* The smallest and the largest of n unsigned keys key(i) (n >= 1), for
 * the whole block: every thread gets both. sh: at least 64 words of shared
 * memory, free again on return. */
template <typename Key>
__device__ void tc_block_minmax(Key key, uint32_t n, uint32_t *sh, uint32_t *lo_out, uint32_t *hi_out)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    uint32_t lo = 0xffffffffu, hi = 0u;
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
        const uint32_t u = key(i);
        lo = min(lo, u);
        hi = max(hi, u);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
        hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o));
    }
    if (lane == 0) {
        sh[warp] = lo;
        sh[32 + warp] = hi;
    }
    __syncthreads();
    lo = 0xffffffffu;
    hi = 0u;
    for (int w = 0; w < nw; w++) {
        lo = min(lo, sh[w]);
        hi = max(hi, sh[32 + w]);
    }
    __syncthreads();
    *lo_out = lo;
    *hi_out = hi;
}

/* The value of rank kth (1 = the largest) among n unsigned keys key(i),
 * for the whole block (every thread calls it; blockDim.x a multiple of 32
 * dividing 2048): a radix select on bits 31-21, 20-10, 9-0. Each pass
 * counts the keys that match the digits found so far into 2048 bins (lanes
 * with the same bin add once: the keys crowd into few bins), then finds the
 * bin of the kth largest by a block-wide suffix sum. sh (TC_RADIX_WORDS
 * words of shared memory) is the caller's, free again on return.
 * FEW: for a few keys in shared memory (a single query's selects, where
 * each pass's barriers are the cost, not the reads): the bits every key
 * shares (a float's sign and exponent) are found first, from the keys'
 * minimum and maximum, and skipped, the passes taking the bits below them
 * 11 at a time; and when the kth largest's bin holds at most 32 keys,
 * they are gathered and one warp ranks them, with no further pass. More
 * reads of the keys: slower where they come from global memory (the
 * batches' selects). */
template <bool FEW = false, typename Key>
__device__ uint32_t tc_radix_kth(Key key, uint32_t n, uint32_t kth, uint32_t *sh)
{
    uint32_t *hist = sh, *wsum = sh + 2048, *res = sh + 2048 + 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const int per = 2048 / blockDim.x; /* bins per thread */
    uint32_t k = kth;
    int bits = 32;                  /* the bits left to select */
    uint32_t mask = 0u, prefix = 0u; /* the digits found so far */
    if (FEW) { /* the bits every key shares: those of the smallest and the largest */
        uint32_t lo, hi;
        tc_block_minmax(key, n, sh, &lo, &hi);
        if (lo == hi) return lo; /* every key the same */
        bits = 32 - __clz(lo ^ hi);
        mask = bits == 32 ? 0u : ~0u << bits;
        prefix = lo & mask;
    }
    while (bits > 0) {
        const int w = bits < 11 ? bits : 11, sh_ = bits - w;
        const uint32_t bm = (1u << w) - 1u;
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
        for (int v = warp + 1; v < nw; v++) above += wsum[v];
        if (above < k && above + mine >= k) { /* the kth largest is in one of my bins */
            uint32_t acc = above;
            int b = threadIdx.x * per + per - 1;
            for (; b > (int)threadIdx.x * per; b--) {
                if (acc + hist[b] >= k) break;
                acc += hist[b];
            }
            res[0] = k - acc;
            res[1] = prefix | ((uint32_t)b << sh_);
            res[2] = hist[b];
        }
        __syncthreads();
        k = res[0];
        prefix = res[1];
        const uint32_t inbin = res[2];
        mask |= bm << sh_;
        bits = sh_;
        __syncthreads();
        if (FEW && bits > 0 && inbin <= 32) { /* a few keys with these digits (one: k = 1): the kth by one warp */
            if (threadIdx.x == 0) res[3] = 0;
            __syncthreads();
            for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
                const uint32_t u = key(i);
                if ((u & mask) == prefix) hist[atomicAdd(&res[3], 1u)] = u;
            }
            __syncthreads();
            if (threadIdx.x < 32) {
                const uint32_t u = (uint32_t)lane < inbin ? hist[lane] : 0u;
                uint32_t gt = 0, ge = 0;
                for (uint32_t j = 0; j < inbin; j++) {
                    const uint32_t v = hist[j];
                    gt += v > u;
                    ge += v >= u;
                }
                if ((uint32_t)lane < inbin && gt < k && ge >= k) res[1] = u; /* equal keys write the same */
            }
            __syncthreads();
            prefix = res[1];
            __syncthreads();
            return prefix;
        }
    }
    return prefix;
}

#endif
