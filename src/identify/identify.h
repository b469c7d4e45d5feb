/* Identification's internal building blocks (src/identify/): the 2-NN
 * matchers on RootSIFT rows, the ratio test and scoring rules, and RANSAC
 * verification. The public side (refsets, patina_identify) is
 * include/patina/identify.h; docs/identify.md tells the whole story.
 *
 * The definition (idf_match_ref, the ground truth the GPU matcher is tested
 * against) is plain float: the rows dequantised (u8 / qscale, or the f16
 * values), s = sum_k q[k] r[k] accumulated in float in k order, d^2 = 2 - 2 s
 * (RootSIFT rows are L2-unit), clamped at 0.
 *
 * The fast matcher (idf_match_fast) takes u8 rows and computes the integer
 * dot; for u8 rows at a power-of-two scale (512) the float definition is
 * EXACT: every product q r / 2^18 has at most 16 significant bits and every
 * partial sum is an integer below 128 * 255^2 < 2^24 times 2^-18, so float
 * represents it without rounding. Hence s_float = dot * 2^-18 bit for bit,
 * and every decision (nearest neighbours, ratio test, scoring) of the two
 * matchers is identical (test_identify checks it on random, tie-heavy and
 * real records). One scoring function serves identify and the
 * `rootsift_ratio` search distance (idf_ratio_count). */
#ifndef PATINA_IDENTIFY_INTERNAL_H
#define PATINA_IDENTIFY_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "patina/identify.h"

#define IDF_DIM 128

/* 2-NN of one query against one reference, per query row j < nq:
 *   best[j]  the reference row with the largest similarity (ties: the lower
 *            index), -1 when the reference has no rows;
 *   s1[j]    that similarity; s2[j] the largest among the OTHER rows (a tie
 *            with s1 gives s2 = s1), -1 when the reference has < 2 rows;
 * and per reference row i < nr (for mutual nearest neighbours):
 *   qbest[i] the query row with the largest similarity (ties: the lower
 *            index), -1 when the query has no rows; qs[i] that similarity.
 * Similarities of RootSIFT rows are >= 0, so -1 is a safe "none". */
typedef struct idf_nn {
    int32_t *best;    /* (nq) caller storage */
    float *s1, *s2;   /* (nq) each */
    int32_t *qbest;   /* (nr) */
    float *qs;        /* (nr) */
} idf_nn_t;

/* The plain float matcher, the definition: q (nq, 128) and r (nr, 128)
 * dequantised rows, row-major. */
void idf_match_ref(idf_nn_t *out, const float *q, size_t nq, const float *r, size_t nr);

/* The same result for u8 rows, blocked and vectorisable: qw is the query
 * widened to int16 by idf_widen (nq, 128); four query rows share each
 * reference row; similarities are reported as dot * inv_scale2 (inv_scale2
 * = 1 / (qscale_q qscale_r), a power of two for exactness: 2^-18). qs:
 * (nr) int32 scratch. */
void idf_match_fast(idf_nn_t *out, int32_t *qs, const int16_t *qw, size_t nq, const uint8_t *r, size_t nr,
                    float inv_scale2);
void idf_widen(int16_t *qw, const uint8_t *q, size_t nq);

/* Lowe's ratio test: d1 < ratio * d2 with d^2 = max(0, 2 - 2 s) (in
 * double). No second neighbour (s2 < 0) never passes. */
int idf_ratio_pass(float s1, float s2, double ratio);

/* One tentative correspondence: query row q, reference row r, similarity. */
typedef struct idf_match {
    int32_t q, r;
    float s;
} idf_match_t;

/* The correspondences a scoring rule counts (ordered by query row):
 *   RAW      every query row passing the ratio test (the paper's count);
 *   ONE2ONE  of the passing rows claiming one reference row, only the best
 *            (largest similarity; ties: the lower query row), so the count
 *            is the number of DISTINCT reference rows hit;
 *   MUTUAL   ONE2ONE restricted to pairs that are each other's nearest
 *            neighbour (qbest[r] == q).
 * out: nq entries (caller storage); claim: nr int32 scratch. Returns the
 * number written, which is the score. */
size_t idf_score(idf_match_t *out, int32_t *claim, const idf_nn_t *nn, size_t nq, size_t nr, double ratio,
                 patina_identify_scoring scoring);

/* 2^-18 = 1 / 512^2: the similarity of two u8 rows at scale 512 is their
 * integer dot times this, exactly. */
#define IDF_INV_SCALE2 (1.0f / 262144.0f)

/* 1 when the record's rows are u8 at scale 512 (the fast matcher's exact
 * case), 0 otherwise (f16, or another scale: the float definition). */
int idf_exact_u8(const void *rec);

/* The record's count rows, dequantised as the definition reads them
 * (rs_row_get): v (count, 128) floats. */
void idf_dequantise(float *v, const void *rec);

/* The score of records a (query) and b (reference), rootsift records of
 * abytes and bbytes (u8 or f16), under `scoring` at `ratio`: the fast
 * matcher when both are u8, else the float definition on dequantised rows
 * (equal results). -1 when a record is malformed or memory runs out. The
 * `rootsift_ratio` search distance is 1 / (1 + this) with ONE2ONE at the
 * search's ratio (patina_search_opts_t.ratio). */
long idf_ratio_count(const void *a, size_t abytes, const void *b, size_t bbytes, double ratio,
                     patina_identify_scoring scoring);

/* ------------------------------------------------------------------ RANSAC */

/* A model mapping query points to reference points: the 3x3 row-major
 * matrix h (homogeneous coordinates, h[8] = 1). Similarity: h[0] = h[4],
 * h[3] = -h[1]; similarity and affine: last row 0 0 1. */
typedef struct idf_model {
    patina_identify_model kind;
    double h[9];
} idf_model_t;

/* Deterministic PRNG (splitmix64 seeding a xorshift64*), no global state. */
typedef struct idf_rng {
    uint64_t s;
} idf_rng_t;
void idf_rng_seed(idf_rng_t *g, uint64_t seed);
uint64_t idf_rng_next(idf_rng_t *g);

/* Keypoint shape agreement (idf_ransac with shapes): the scale ratio of an
 * inlier's keypoints within this factor of the model's scale, their
 * orientation difference within this many degrees of its rotation. SIFT's
 * scales are known to about a third of an octave and its orientations to
 * about 10 degrees; chance correspondences agree with a random model far
 * less often. */
#define IDF_SHAPE_SCALE 1.5
#define IDF_SHAPE_ANGLE 30.0

/* RANSAC over n correspondences: query points qp (n, 2), reference points
 * rp (n, 2). Inliers: |model(q) - r| <= thr, and, when qsh and rsh (n, 2:
 * log scale, orientation in radians of each keypoint) are given, keypoint
 * shapes that agree with the model (IDF_SHAPE_*). Adaptive stopping (confidence
 * 0.999) capped at max_iter; the best model is refitted on its inliers by
 * least squares and kept if that does not lose inliers. Returns the inlier
 * count (0 when n is below the model's minimal sample or every sample is
 * degenerate); inl (n bytes, may be NULL) receives the inlier mask and
 * model (may be NULL) the model. Deterministic for a given seed. */
size_t idf_ransac(idf_model_t *model, unsigned char *inl, const double *qp, const double *rp, const double *qsh,
                  const double *rsh, size_t n, patina_identify_model kind, double thr, int max_iter, uint64_t seed);

/* Fits `kind` exactly to a minimal sample (2, 3 or 4 points); 0 when the
 * sample is degenerate (coincident or collinear points). */
int idf_fit_minimal(idf_model_t *m, patina_identify_model kind, const double *qp, const double *rp,
                    const size_t *idx);

/* Maps a query point through the model; 0 when it maps to infinity. */
int idf_model_apply(const idf_model_t *m, double x, double y, double *ox, double *oy);

#endif
