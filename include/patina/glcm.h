/* Grey-level co-occurrence matrices (GLCM), scikit-image's graycoprops
 * properties and Haralick's 14 texture features (docs/glcm.md).
 *
 * The counts are exactly scikit-image's graycomatrix (0.19.3): for an offset
 * (dy, dx) the matrix P[i][j] counts the pixel pairs (r, c), (r+dy, c+dx)
 * that both lie in the image (and in the mask, when one is given) with grey
 * levels i and j; symmetric adds the transpose. An offset comes from a
 * distance d and an angle θ (degrees) as
 *   dy = round(sin(θ·π/180)·d),  dx = round(cos(θ·π/180)·d)
 * with round(x) = (long)(x > 0 ? x + 0.5 : x - 0.5) in binary64, which is
 * what scikit-image computes (rows grow downwards, so θ = 90° pairs a pixel
 * with the one below it).
 *
 * Layouts: counts are (noff, levels, levels) u32, row-major, P[o][i][j];
 * offsets of a (distances x angles) request are ordered o = d*na + a.
 * Properties are (PATINA_GLCM_NPROPS, noff) f64; Haralick features are
 * (noff, PATINA_HARALICK_N) f64.
 *
 * Nothing here allocates what the caller must free unless it says so. */
#ifndef PATINA_GLCM_H
#define PATINA_GLCM_H

#include <stddef.h>
#include <stdint.h>
#include "patina/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PATINA_GLCM_MAX_OFFSETS 64   /* offsets per request */
#define PATINA_GLCM_MAX_LEVELS 256
#define PATINA_GLCM_NPROPS 10        /* graycoprops properties */
#define PATINA_HARALICK_N 14         /* Haralick's features */

typedef struct patina_glcm_offset {
    int dy, dx;   /* row and column displacement of the second pixel */
} patina_glcm_offset_t;

typedef enum patina_glcm_quant {
    PATINA_GLCM_QUANT_UNIFORM = 0, /* q = v * levels / 256 (integer division) of 8-bit grey v */
    PATINA_GLCM_QUANT_NONE = 1     /* q = v; a value >= levels is an error */
} patina_glcm_quant;

/* Names of the properties in output order: contrast, dissimilarity,
 * homogeneity, ASM, energy, correlation, mean, variance, std, entropy
 * (scikit-image's names). NULL out of range. */
PATINA_API const char *patina_glcm_prop_name(int k);
/* Haralick's features in his order, as short names: asm, contrast,
 * correlation, sum_of_squares, idm, sum_average, sum_variance, sum_entropy,
 * entropy, difference_variance, difference_entropy, imc1, imc2, mcc. */
PATINA_API const char *patina_haralick_name(int k);

/* The offset of (distance, angle in degrees), scikit-image's rule above. */
PATINA_API patina_glcm_offset_t patina_glcm_offset(double distance, double angle_deg);

/* Grey levels of an 8-bit grey image: q (n) u8 from grey (n) u8 (may alias).
 * PATINA_E_INVALID when quant is NONE and a value is >= levels. */
PATINA_API patina_status patina_glcm_quantize(uint8_t *q, const uint8_t *grey, size_t n, int levels,
                                              patina_glcm_quant quant);

/* Co-occurrence counts of a quantised image q ((h, stride) u8, values <
 * levels, not checked) for noff offsets. mask (h, mstride) u8 may be NULL;
 * a pair counts only when both its pixels have a non-zero mask value.
 * counts (noff, levels, levels) u32 is overwritten. threads: 1 = calling
 * thread only; 0 = all CPUs (small images always run on one thread).
 * Identical results for every thread count. */
PATINA_API patina_status patina_glcm_counts(uint32_t *counts, const uint8_t *q, int w, int h, size_t stride,
                                            const uint8_t *mask, size_t mstride, int levels,
                                            const patina_glcm_offset_t *off, size_t noff, int symmetric,
                                            int threads);

/* The plain reference: one loop per offset, as scikit-image writes it. Same
 * contract as patina_glcm_counts (single thread). Kept for testing. */
PATINA_API patina_status patina_glcm_counts_ref(uint32_t *counts, const uint8_t *q, int w, int h,
                                                size_t stride, const uint8_t *mask, size_t mstride,
                                                int levels, const patina_glcm_offset_t *off, size_t noff,
                                                int symmetric);

/* graycoprops of each matrix, computed on the matrix divided by its sum (an
 * all-zero matrix gives 0 for every property but correlation, which is 1, as
 * in scikit-image). props (PATINA_GLCM_NPROPS, noff) f64. */
PATINA_API void patina_glcm_props(double *props, const uint32_t *counts, int levels, size_t noff);

/* Haralick's 14 features of each normalised matrix: feats (noff, 14) f64.
 * Zero-count matrices give zeros (correlation 1). */
PATINA_API void patina_haralick(double *feats, const uint32_t *counts, int levels, size_t noff);

/* Mean and range (max - min) over groups of `group` consecutive rows of
 * feats (noff, 14): out (noff/group, 2, 14) = [g][mean|range][feature]. */
PATINA_API void patina_haralick_aggregate(double *out, const double *feats, size_t noff, size_t group);

/* Per-feature mean and standard deviation (population, divisor n) of n
 * feature vectors (n, dim) f64; sd is 1 where a feature is constant. */
PATINA_API patina_status patina_feature_stats(double *mean, double *sd, const double *vecs, size_t n,
                                              size_t dim);
/* Standardised Euclidean distance sqrt(sum ((a-b)/sd)^2). */
PATINA_API double patina_std_l2(const double *a, const double *b, const double *sd, size_t dim);

#ifdef __cplusplus
}
#endif
#endif
