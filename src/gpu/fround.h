/* Private to src/gpu: the host-side rounding the search engines' error
 * bounds share (gpu/knn_internal.cuh, gpu/sqfd_internal.cuh). */
#ifndef PATINA_GPU_FROUND_H
#define PATINA_GPU_FROUND_H

#include <math.h>

/* x rounded to a float upwards (x below float's range): a float never
 * below x. */
static inline float pgpu_f_up(double x)
{
    float f = (float)x;
    if ((double)f < x) f = nextafterf(f, INFINITY);
    return f;
}

#endif
