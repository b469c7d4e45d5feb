/* lab/lbp: the LBP kernel lab's variants (variants.cu) as the lab program
 * (lab_lbp.c) sees them. Not part of libpatina. */
#ifndef PATINA_LAB_LBP_H
#define PATINA_LAB_LBP_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    /* the paper's kernels: 3x3 codes only, dense (h, w) input */
    LAB_GLOBAL16 = 0,
    LAB_GLOBAL32,
    LAB_SHARED16,
    LAB_SHARED32,
    LAB_FAST3,    /* k_fast3: 3x3 whole-image histograms (codes too when asked) */
    LAB_ROWS_ALT, /* k_fast4, 4-warp blocks, the other rows in flight: lbp8 and TLBAP (fp16
                   * threshold) 3 rows at 5 blocks per SM, LANADP 6 rows at 3 blocks per SM;
                   * whole-image histograms */
    LAB_PROD3,    /* k_prod3 for every 3x3 histogram (whole image and any grid) */
    LAB_CIRC,     /* k_circ for P = 8, R = 1 (the library runs k_circ8 there) */
    LAB_C8BAND,   /* k_circ8 with a chosen band height */
    LAB_NVARIANTS
};

const char *lab_name(int v);

/* Whether variant v computes configuration c on w x h images (the paper's
 * kernels need at least 3 x 3; LAB_ROWS_ALT for TLBAP needs a threshold
 * that is one fp16 fma). */
int lab_applies(int v, const patina_gpu_lbp_conf_t *c, int w, int h);
/* Whether v gives histogram counts (else code maps only). */
int lab_counts(int v);

/* Runs variant v on n grey images (h, w) u8 back to back in host memory
 * (band: LAB_C8BAND's rows per block): uploads them once, launches reps
 * times after a warm-up, copies back the code maps (n, mh, mw) of
 * c->code_bytes into codes and the counts (n, dim) u32 into counts (either
 * may be NULL). ms: median of single launches (events around each, the
 * host's submission included); ms_stream: per launch, reps launches queued
 * back to back behind a busy GPU. Either may be NULL. CUDA's current device. */
patina_status lab_run(int v, const patina_gpu_lbp_conf_t *c, int band, const uint8_t *grey, int w, int h, int n,
                      void *codes, uint32_t *counts, int reps, double *ms, double *ms_stream);

#ifdef __cplusplus
}
#endif
#endif
