/* Library-internal GLCM pieces shared by the C reference (glcm.c), the
 * family entries (glcm_family.c), the tests, the benchmark and the lab.
 * The public contract is include/patina/glcm.h; the arithmetic the GPU
 * shares is in src/algo/glcm_core.h. */
#ifndef PATINA_GLCM_REF_H
#define PATINA_GLCM_REF_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"
#include "patina/glcm.h"
#include "patina/image.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A parsed request: levels, quantisation, symmetry and the offsets of a
 * (distances x angles) grid, o = d*na + a; explicit offsets are one
 * "distance" with na = noff. */
typedef struct glcm_req {
    int levels;
    int quant;       /* patina_glcm_quant */
    int symmetric;
    int normed;
    int nd, na;      /* noff = nd * na */
    patina_glcm_offset_t off[PATINA_GLCM_MAX_OFFSETS];
    double dist[PATINA_GLCM_MAX_OFFSETS];   /* the distances (nd), for output only */
    double angle[PATINA_GLCM_MAX_OFFSETS];  /* the angles in degrees (na) */
    int explicit_offsets;
} glcm_req_t;

static inline size_t glcm_noff(const glcm_req_t *r) { return (size_t)r->nd * (size_t)r->na; }

/* Parses the option strings: distances "1,2", angles "0,45" (degrees),
 * offsets "none" or "dy:dx,dy:dx". `what` names the family in messages. */
patina_status glcm_req_parse(glcm_req_t *r, int levels, int quant, int symmetric, int normed,
                             const char *distances, const char *angles, const char *offsets,
                             const char *what);

/* Counts with a caller's pool (NULL: calling thread only). */
patina_status glcm_counts_pool(patina_pool_t *pool, uint32_t *counts, const uint8_t *q, int w,
                               int h, size_t stride, const uint8_t *mask, size_t mstride,
                               int levels, const patina_glcm_offset_t *off, size_t noff,
                               int symmetric);

/* Adds the transpose to each of the noff (levels x levels) matrices. */
void glcm_symmetrise(uint32_t *counts, int levels, size_t noff);

/* Checks that an image can be counted without overflowing u32 cells. */
patina_status glcm_check_size(int w, int h, int symmetric, const char *what);

/* Grey + quantisation of an image into a malloc'd (h, w) buffer. */
patina_status glcm_grey_levels(uint8_t **q, const patina_image_t *img, int levels, int quant);

/* The mask of an image: a file loaded and turned to grey ((h, w) u8,
 * malloc'd); PATINA_E_INVALID when its size differs from w x h. */
patina_status glcm_load_mask(uint8_t **mask, const char *path, int w, int h);

/* Haralick's maximal correlation coefficient of one normalised matrix given
 * as counts (levels x levels) and their marginals. */
double glcm_mcc(const uint32_t *counts, int levels, const uint64_t *rows, const uint64_t *cols,
                uint64_t total);

#ifdef __cplusplus
}
#endif
#endif
