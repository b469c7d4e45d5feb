/* The signature family's internals: its options, its record check with a
 * message, the sampling plan and the extraction steps. The CPU extractor
 * (src/features/signature.c), the GPU path and the public view
 * (include/patina/signature.h) use it (docs/signature.md); the search does
 * not (it reads records through algo/sqfd.h).
 *
 * The record layout and the SQFD definition are in algo/sqfd.h (shared with
 * the search); this header adds the family's options, its checks with a
 * message and its extraction steps. */
#ifndef PATINA_FEATURES_SIGNATURE_H
#define PATINA_FEATURES_SIGNATURE_H

#include <stddef.h>
#include <stdint.h>

#include "algo/sqfd.h"
#include "patina/image.h"
#include "patina/status.h"

#define SIG_SAMPLES_MAX (1 << 20)

enum { SIG_SAMPLING_RANDOM = 0, SIG_SAMPLING_GRID = 1 };
enum { SIG_WEIGHTS_SAMPLES = 0, SIG_WEIGHTS_MAX = 1 };

/* Parsed options (the table is in signature.c; docs/signature.md). */
typedef struct sig_params {
    int k;          /* record rows K: at most this many centroids */
    int samples;    /* sampling points per image */
    int sampling;   /* SIG_SAMPLING_* */
    int seed;       /* of the sampling points and the initial centroids */
    int seeds;      /* initial centroids (sampling points picked by seed) */
    int iters;      /* k-means iterations */
    int minsize;    /* after iteration t (from 1) clusters of <= t * minsize samples go */
    double join;    /* centroids closer than this (L2, <=) are merged */
    double drop;    /* clusters of weight (samples) <= drop go */
    int bits;       /* grey bits for contrast / entropy */
    int radius;     /* window radius for contrast / entropy */
    int weights;    /* SIG_WEIGHTS_* */
    double alpha;   /* similarity parameter (> 0) */
    int form;       /* SIG_FORM_* */
} sig_params_t;

/* Checks a record of n elements: the header (count in [1, K], K matching
 * n, alpha > 0, a known form, the version) and every used row (finite
 * features, a finite weight >= 0; algo/sqfd.h sig_record_problem).
 * PATINA_E_INVALID with a message naming `what` and the reason. */
patina_status sig_record_check(const float *rec, size_t n, const char *what);

/* The sampling plan of p, the same for every image: pts (samples, 2)
 * floats in [0, 1) (x then y; pixel (int)(x * width), (int)(y * height)),
 * seeds (p->seeds) distinct indexes into pts, the initial centroids in
 * order. Caller storage. PATINA_E_NOMEM when its scratch cannot be had. */
patina_status sig_plan(const sig_params_t *p, float *pts, int *seeds);

/* The samples of an image: samp (samples, 8), column 0 zero, columns 1..7
 * the features of each point of pts (OpenCV's sampler with unit weights).
 * An image without pixels fails with PATINA_E_INVALID. */
patina_status sig_samples(const sig_params_t *p, const float *pts, float *samp, const patina_image_t *img);

/* The clustering of samples (samples, 8) from the initial centroids seeds
 * into a record out (sig_dim(p->k) floats): k-means, at most k heaviest,
 * the weights, the header. */
patina_status sig_cluster(const sig_params_t *p, const float *samp, const int *seeds, float *out);

/* The CPU's checks of an image: PATINA_E_INVALID ("signature: bad image",
 * "signature: empty image (WxH): no signature") or PATINA_OK. */
patina_status sig_image_check(const patina_image_t *img);

/* The sRGB transfer function of the 256 channel values, in double, as the
 * CPU computes it (the GPU path uploads these). */
void sig_srgb_linear(double lin[256]);

/* Extraction with a given plan (the family's CPU function calls it with
 * sig_plan's): out is sig_dim(p->k) floats. */
patina_status sig_extract_with(const sig_params_t *p, const float *pts, const int *seeds, float *out,
                               const patina_image_t *img);

#endif
