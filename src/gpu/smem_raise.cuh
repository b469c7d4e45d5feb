/* Raising a kernel's dynamic shared-memory limit once per size and device.
 * The attribute belongs to the process and setting it at every launch costs
 * host time, so each kernel keeps its per-device high-water marks (`raised`,
 * zero-initialised, 64 devices) and the limit only grows, under one lock: a
 * launch that reads a mark at least its size finds the attribute at least
 * that large, whatever another thread raises meanwhile. */
#ifndef PATINA_GPU_SMEM_RAISE_CUH
#define PATINA_GPU_SMEM_RAISE_CUH

#include <atomic>
#include <mutex>

#include <cuda_runtime.h>

#include "gpu/context.h"

#define PGPU_SMEM_DEVICES 64

static inline patina_status pgpu_smem_raise(const void *fn, std::atomic<int> *raised, int dev, size_t smem)
{
    static std::mutex lock; /* per translation unit: its kernels' attributes */
    const int marked = dev >= 0 && dev < PGPU_SMEM_DEVICES;
    if (smem <= 48u * 1024 || (marked && (int)smem <= raised[dev].load())) return PATINA_OK;
    std::lock_guard<std::mutex> hold(lock);
    if (marked && (int)smem <= raised[dev].load()) return PATINA_OK;
    PGPU_CU(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    if (marked) raised[dev].store((int)smem);
    return PATINA_OK;
}

#endif
