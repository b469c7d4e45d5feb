/* CEDD internals shared by the C reference, the hybrid pipeline's CPU stage
 * and the GPU code's host side. See cedd_core.h for the per-block arithmetic. */
#ifndef PATINA_CEDD_REF_H
#define PATINA_CEDD_REF_H

#include <stddef.h>
#include <stdint.h>
#include "algo/cedd_core.h"
#include "patina/image.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Block count of a geometry (nbx*nby; 0 for images under 2 pixels wide/high). */
size_t cedd_block_count(const cedd_geom_t *g);

/* Block sums of one block row `by` into out[0 .. nbx): quadrant Y sums in
 * row-major order within each quadrant, and integer RGB sums. */
void cedd_block_row_sums(cedd_block_t *out, const patina_image_t *img, const cedd_geom_t *g,
                         int by);

/* All block sums, raster order: out has cedd_block_count(g) entries. */
void cedd_block_sums(cedd_block_t *out, const patina_image_t *img, const cedd_geom_t *g);

/* The descriptor from all block sums (raster order). */
void cedd_from_blocks(uint8_t out[CEDD_BINS], const cedd_block_t *blocks, const cedd_geom_t *g,
                      int compact);

#ifdef __cplusplus
}
#endif
#endif
