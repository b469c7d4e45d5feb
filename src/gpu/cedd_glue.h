/* The C side of CEDD's GPU host code: the C reference's block geometry and
 * finishing step (algo/cedd_core.h), compiled as C with the reference's flags
 * (cedd_glue.c), so the .cu host code plans with exactly the functions the
 * reference uses; in CUDA translation units cedd_core.h's functions are
 * device-only. */
#ifndef PATINA_GPU_CEDD_GLUE_H
#define PATINA_GPU_CEDD_GLUE_H

#include <stdint.h>

#include "algo/cedd_core.h"

#ifdef __cplusplus
extern "C" {
#endif

cedd_geom_t pgpu_cedd_geometry(int w, int h);
void pgpu_cedd_finish(uint8_t out[CEDD_BINS], const double hist[CEDD_BINS], int compact);

#ifdef __cplusplus
}
#endif
#endif
