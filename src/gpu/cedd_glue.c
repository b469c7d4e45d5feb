/* C glue for the CUDA host code: the C reference's block geometry and
 * finishing step (cedd_core.h), compiled as C with the reference's flags, so
 * the .cu host code plans with exactly the functions the reference uses. In
 * CUDA translation units cedd_core.h's functions are device-only. */
#include "gpu/context.h"

cedd_geom_t pgpu_cedd_geometry(int w, int h) { return cedd_geometry(w, h); }

void pgpu_cedd_finish(uint8_t out[CEDD_BINS], const double hist[CEDD_BINS], int compact)
{
    cedd_finish(out, hist, compact);
}
