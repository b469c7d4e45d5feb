/* Identification's internal building blocks (src/identify/): the 2-NN
 * matchers on quantised RootSIFT rows, the ratio test and scoring rules, and
 * RANSAC verification. The public side (refsets, patina_identify) is
 * include/patina/identify.h; docs/identify.md tells the whole story.
 *
 * Similarity is the EXACT integer dot product of the stored u8 rows
 * (s = sum_k q[k] r[k], at most 128 * 255^2 < 2^31): the plain matcher
 * (idf_match_ref, the ground truth the GPU matcher is tested against) and
 * the fast one (idf_match_fast) compute the same integers, and every
 * decision (nearest neighbours, ratio test, scoring) is a function of those
 * integers only, so their decisions are identical by construction. Floats
 * appear only where distances are reported: d^2 = 2 - 2 s / qscale^2
 * (RootSIFT rows are L2-unit), clamped at 0. */
#ifndef PATINA_IDENTIFY_INTERNAL_H
#define PATINA_IDENTIFY_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "patina/identify.h"

#define IDF_DIM 128

/* 2-NN of one query against one reference, per query row j < nq:
 *   best[j]  the reference row with the largest dot (ties: the lower index),
 *            -1 when the reference has no rows;
 *   s1[j]    that dot; s2[j] the largest dot among the OTHER rows (a tie with
 *            s1 gives s2 = s1), -1 when the reference has fewer than 2 rows;
 * and per reference row i < nr (for mutual nearest neighbours):
 *   qbest[i] the query row with the largest dot (ties: the lower index),
 *            -1 when the query has no rows. */
typedef struct idf_nn {
    int32_t *best, *s1, *s2; /* (nq) each, caller storage */
    int32_t *qbest, *qs;     /* (nr) each, caller storage; qs: qbest's dot */
} idf_nn_t;

/* The plain matcher: one dot product per pair, the definition. q: (nq, 128)
 * u8 row-major, r: (nr, 128) u8 row-major. */
void idf_match_ref(idf_nn_t *out, const uint8_t *q, size_t nq, const uint8_t *r, size_t nr);

/* The same result, blocked and vectorisable: qw is the query widened to
 * int16 by idf_widen (nq, 128); four query rows share each reference row. */
void idf_match_fast(idf_nn_t *out, const int16_t *qw, size_t nq, const uint8_t *r, size_t nr);
void idf_widen(int16_t *qw, const uint8_t *q, size_t nq);

/* Lowe's ratio test on integer dots: d1 < ratio * d2 with d^2 = max(0, 2 -
 * 2 s / scale2), scale2 = qscale^2 (262144 for u8 at 512). No second
 * neighbour (s2 < 0) never passes. */
int idf_ratio_pass(int32_t s1, int32_t s2, double scale2, double ratio);

/* One tentative correspondence: query row q, reference row r, their dot. */
typedef struct idf_match {
    int32_t q, r, s;
} idf_match_t;

/* The correspondences a scoring rule counts (ordered by query row):
 *   RAW      every query row passing the ratio test (the paper's count);
 *   ONE2ONE  of the passing rows claiming one reference row, only the best
 *            (largest dot; ties: the lower query row), so the count is the
 *            number of DISTINCT reference rows hit;
 *   MUTUAL   ONE2ONE restricted to pairs that are each other's nearest
 *            neighbour (qbest[r] == q).
 * out: nq entries (caller storage); claim: nr int32 scratch. Returns the
 * number written, which is the score. */
size_t idf_score(idf_match_t *out, int32_t *claim, const idf_nn_t *nn, size_t nq, size_t nr, double scale2,
                 double ratio, patina_identify_scoring scoring);

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

/* RANSAC over n correspondences: query points qp (n, 2), reference points
 * rp (n, 2). Inliers: |model(q) - r| <= thr. Adaptive stopping (confidence
 * 0.999) capped at max_iter; the best model is refitted on its inliers by
 * least squares and kept if that does not lose inliers. Returns the inlier
 * count (0 when n is below the model's minimal sample or every sample is
 * degenerate); inl (n bytes, may be NULL) receives the inlier mask and
 * model (may be NULL) the model. Deterministic for a given seed. */
size_t idf_ransac(idf_model_t *model, unsigned char *inl, const double *qp, const double *rp, size_t n,
                  patina_identify_model kind, double thr, int max_iter, uint64_t seed);

/* Fits `kind` exactly to a minimal sample (2, 3 or 4 points); 0 when the
 * sample is degenerate (coincident or collinear points). */
int idf_fit_minimal(idf_model_t *m, patina_identify_model kind, const double *qp, const double *rp,
                    const size_t *idx);

/* Maps a query point through the model; 0 when it maps to infinity. */
int idf_model_apply(const idf_model_t *m, double x, double y, double *ox, double *oy);

#endif
