/* Private to the GLCM GPU side, its tests, its benchmark and its lab: the
 * driver's knobs and the internal entry points that take them. The library
 * itself always runs with the defaults (knobs NULL): these exist so that
 * tests can force tiles, tasks and kernel choices that only large inputs
 * would reach, and so that the lab can run its own counting kernels through
 * the production driver (lab/glcm/). */
#ifndef PATINA_GPU_GLCM_H
#define PATINA_GPU_GLCM_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

struct pgpu_glcm_chooser; /* a counting-kernel choice (src/gpu/glcm_kernels.cuh) */

/* Zero in every field means the production default. */
typedef struct pgpu_glcm_knobs {
    size_t slot_bytes;  /* image bytes per slot (an image larger than a slot is cut
                         * into tiles of rows); 0: planned from the context's budget */
    size_t task_pixels; /* first pixels per task; 0: sized from each launch's work */
    size_t task_min;    /* smallest task sized from a launch's work; 0: 16 K pixels */
    size_t policy_px;   /* pixels per SM the kernel policy assumes (it picks kernels by
                         * the work of a launch); 0: each launch's own */
    const struct pgpu_glcm_chooser *chooser; /* the counting kernel (the lab's);
                                              * NULL: the production policy */
} pgpu_glcm_knobs_t;

/* patina_gpu_glcm_counts with knobs (k may be NULL). */
patina_status pgpu_glcm_counts(patina_gpu_t *g, const pgpu_glcm_knobs_t *k, uint32_t *counts,
                               const patina_gpu_grey_t *imgs, size_t n, int levels,
                               const patina_glcm_offset_t *off, size_t noff, int symmetric);

/* patina_gpu_glcm_features with knobs (k may be NULL). */
patina_status pgpu_glcm_features(patina_gpu_t *g, const pgpu_glcm_knobs_t *k, double *props,
                                 double *har, const pgpu_glcm_src_t *src, int levels,
                                 const patina_glcm_offset_t *off, size_t noff, int symmetric,
                                 patina_status *st);

/* What pgpu_glcm_time measured and ran. */
typedef struct pgpu_glcm_timing {
    int reps;          /* in: timed requests (>= 1) */
    double ms_stream;  /* per request, `reps` requests queued back to back behind a
                        * warm-up (CUDA events around all): the throughput figure */
    double ms_single;  /* median of `reps` requests each timed alone (events around
                        * one request, the GPU idle before it): latency, including
                        * the host's submission */
    int launches;      /* kernel launches per request */
    int threads;       /* per block */
    int copies;        /* k_count2/3: copies of each table; k_count4/5: lanes per
                        * offset (pair); 0: global votes */
    int levels_counted;/* levels of the counted matrices (a mask's sentinel level
                        * raises them; dropped before the counts are returned) */
    char kernel[64];   /* the counting kernel, e.g. "k_count5<L=8,LD=1>" */
} pgpu_glcm_timing_t;

/* Times the counting kernel(s) of one request on n images resident in
 * device memory (uploaded once into one slot, untimed): one launch covers
 * them all, as a slot of a batch does. counts (n, noff, levels, levels): the
 * counts of the last request (symmetrised when asked), for checking. */
patina_status pgpu_glcm_time(patina_gpu_t *g, const pgpu_glcm_knobs_t *k, pgpu_glcm_timing_t *t,
                             uint32_t *counts, const patina_gpu_grey_t *imgs, size_t n, int levels,
                             const patina_glcm_offset_t *off, size_t noff, int symmetric);

#ifdef __cplusplus
}
#endif
#endif
