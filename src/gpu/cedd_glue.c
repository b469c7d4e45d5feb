/* C glue for the CUDA host code (cedd_glue.h): the C reference's block
 * geometry and finishing step (algo/cedd_core.h), compiled as C with the
 * reference's flags. */
#include "gpu/cedd_glue.h"

cedd_geom_t pgpu_cedd_geometry(int w, int h) { return cedd_geometry(w, h); }

void pgpu_cedd_finish(uint8_t out[CEDD_BINS], const double hist[CEDD_BINS], int compact)
{
    cedd_finish(out, hist, compact);
}
