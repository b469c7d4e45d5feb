/* The one colour-to-grey rule of every grey-level descriptor (LBP family,
 * GLCM, ...), for the C path (src/core/grey.c: patina_image_to_grey) and the
 * CUDA kernels (src/gpu/lbp_kernels.cuh: k_grey) alike: ITU-R BT.601 luma in
 * 14-bit fixed point with rounding,
 *   Y = (4899 R + 9617 G + 1868 B + 8192) >> 14,
 * which is exactly OpenCV's cv::cvtColor(RGB2GRAY) on 8-bit input, and
 * gives back v for a grey pixel r = g = b = v (the weights sum to 16384).
 * Integers only: both sides give the same byte. Not here: image storage or
 * loops over pixels. */
#ifndef PATINA_ALGO_GREY_H
#define PATINA_ALGO_GREY_H

#include <stdint.h>

#ifdef __CUDACC__
#define GREY_FN static __host__ __device__ __forceinline__
#else
#define GREY_FN static inline
#endif

/* The grey level of an 8-bit RGB pixel. */
GREY_FN uint8_t grey_bt601(unsigned r, unsigned g, unsigned b)
{
    return (uint8_t)((4899u * r + 9617u * g + 1868u * b + 8192u) >> 14);
}

#endif
