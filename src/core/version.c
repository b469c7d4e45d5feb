/* Version, build features and GPU enumeration for `patina info`. */
#include <stdio.h>

#include "core/context.h"
#include "patina/patina.h"

#define STR2(x) #x
#define STR(x) STR2(x)

const char *patina_version(void)
{
    return STR(PATINA_VERSION_MAJOR) "." STR(PATINA_VERSION_MINOR) "." STR(PATINA_VERSION_PATCH);
}

const char *patina_build_info(void)
{
#if PATINA_HAVE_CUDA
    return "cuda=yes cuda-archs=" PATINA_CUDA_ARCHS " jpeg=libjpeg-turbo png=libpng store=lmdb";
#else
    return "cuda=no jpeg=libjpeg-turbo png=libpng store=lmdb";
#endif
}

int patina_gpu_count(void) { return patina_gpu__count(); }

patina_status patina_gpu_describe(int i, char *buf, size_t size)
{
    return patina_gpu__describe(i, buf, size);
}
