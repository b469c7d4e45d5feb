/* Identification's internal building blocks (src/identify/): RANSAC
 * verification. The 2-NN matchers on RootSIFT rows, the ratio test and the
 * scoring rules that identify shares with the `rootsift_ratio` search
 * distance are algo/rootsift_match.h (included here). The public side
 * (refsets, patina_identify) is include/patina/identify.h; docs/identify.md
 * tells the whole story. */
#ifndef PATINA_IDENTIFY_INTERNAL_H
#define PATINA_IDENTIFY_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "algo/rootsift_match.h"
#include "patina/identify.h"

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

/* Guided matching with a verified model m: for each query row i < nq, the
 * reference rows j whose keypoint lies within thr of m(query keypoint i)
 * (and, with shapes, agrees in scale and orientation as an inlier must)
 * are compared with it (the definition's float similarity of the
 * dequantised rows qf (nq, 128) and rf (nr, 128)); the most similar one
 * (ties: the lower j) is kept when it passes the ratio test against the
 * nearest reference row other than itself (nn: the 2-NN pass of this
 * pair: s2 when it is best[i], else s1). One-to-one: of the query rows
 * keeping one reference row, the most similar (ties: the lower query row).
 * qg (nq, 4) and rg (nr, 4): x, y, log scale, angle of each keypoint.
 * out: nq entries, by query row; claim: nr scratch. Returns the count. */
size_t idf_guided(idf_match_t *out, int32_t *claim, const idf_model_t *m, const double *qg, size_t nq,
                  const double *rg, size_t nr, const float *qf, const float *rf, const idf_nn_t *nn, double thr,
                  double ratio, int shapes);

/* Maps a query point through the model; 0 when it maps to infinity. */
int idf_model_apply(const idf_model_t *m, double x, double y, double *ox, double *oy);

/* ---------------------------------------------------------------- decision */

/* The open-set decision of a query (patina_identify and
 * patina_identify_merge: one rule): nh candidates listed, s1 rank 1's
 * score, s2 rank 2's verified inliers (-1 when rank 2 is missing or not
 * verified). UNKNOWN without a candidate or when s1 < o->threshold;
 * AMBIGUOUS when rank 2 is verified, reaches the threshold too and holds
 * at least o->ambiguity times s1 (the query shows verified content of
 * both, with comparable evidence); MATCH otherwise. */
patina_identify_decision idf_decide(double s1, double s2, size_t nh, const patina_identify_opts_t *o);

/* The a-contrario significance of k inliers among n correspondences
 * (opts.accept SIGNIFICANCE): -log10 NFA with the ORSA form (Moisan and
 * Stival 2004; Moisan, Moulon and Monasse 2012)
 *     NFA = (n - s) C(n, k) C(k, s) alpha^(k - s),
 * s the model's minimal sample (2, 3, 4), alpha = min(1, pi r^2 / (w h))
 * the chance that a uniformly random point of the w x h reference falls
 * within the inlier distance r of a prediction. Clipped at 0 (and 0 when
 * k <= s: a minimal sample fits exactly). A function of the pair only, so
 * parts and merges agree. */
double idf_significance(size_t n, size_t k, patina_identify_model model, double w, double h, double r);

/* opts.distinct on a query idf_decide decided (one rule for patina_identify
 * and the merge): *d becomes UNKNOWN unless rank 1's score s1 exceeds r2
 * (rank 2's verified inliers, 0 when missing or not verified) by
 * o->distinct, r2 counting 0 when the two references are siblings:
 * sib(user, &inliers) gives at least o->sibling_inliers (asked only then,
 * and only when s1 alone meets the margin). Nothing changes with distinct
 * 0 or an UNKNOWN decision. */
patina_status idf_distinct(patina_identify_decision *d, double s1, double r2, const patina_identify_opts_t *o,
                           patina_status (*sib)(void *user, size_t *inliers), void *user);

/* ------------------------------------------------------ several sets at once */

/* One identification over nsets DISJOINT reference sets of one spec (no id
 * in two sets: the caller's contract), answering exactly as one set holding
 * their union would -- the same hits, scores, inliers, decisions -- in
 * three stages, so that a caller may match the sets where they live (a
 * table's slices on their own devices, in threads of its own):
 *   idf_many_begin   checks the options, the queries and the sets' spec,
 *                    takes every set's read lock (in address order, held
 *                    until idf_many_free) and plans from the union's size:
 *                    hits min(k, references), verified min(verify_top,
 *                    references), candidates kept per set the larger;
 *   idf_many_match   set i's best candidates by (matches, id), on ctx (its
 *                    workers or its GPU's mirror of the set, by the options'
 *                    device policy); distinct sets may be matched at once
 *                    from different threads;
 *   idf_many_match_sets  sets [set0, set0 + nsets) on ctx at once: those the
 *                    policy gives to the GPU in one patina_gpu_identify_many
 *                    call (one pass over their mirrors, one wait), the
 *                    others on ctx's workers; the same candidates as
 *                    idf_many_match on each;
 *   idf_many_finish  merges the sets' lists, verifies the union's best
 *                    verify_top once (RANSAC on ctx's workers), ranks and
 *                    decides into hits (nq, k) and results (nq); hit_set
 *                    (nq, k; may be NULL) receives each hit's set index.
 * patina_identify is these stages over one set. */
/* After patina_identify_fuse_half: the keys (nq, k; malloc'd) of each
 * query whose half-size answer was taken (taken[q]) become the half-size
 * query's (half_keys, left NULL there), the replaced ones freed. Nothing
 * when keys or half_keys is NULL. */
void idf_keys_take(size_t nq, size_t k, const unsigned char *taken, char **keys, char **half_keys);

typedef struct idf_many idf_many_t;
patina_status idf_many_begin(idf_many_t **m, patina_refset_t *const *sets, size_t nsets, const void *queries,
                             size_t nq, const patina_identify_opts_t *opts);
/* idf_many_begin of nq / 2 queries and their half-size queries (queries:
 * the nq / 2 queries' records, then their half-size queries' in the same
 * order), as patina_identify with opts and with
 * patina_identify_half_opts(opts, half_features) would answer them: the
 * companions' first pass on their half_features strongest features and no
 * half-size view pass. On a GPU whose kernel takes it, a query and its
 * companion go through the first pass as one pair (the references read
 * once). opts->first_features and half_features > 0 (else the two
 * differ past the first pass: PATINA_E_INVALID). */
patina_status idf_many_begin_half(idf_many_t **m, patina_refset_t *const *sets, size_t nsets, const void *queries,
                                  size_t nq, const patina_identify_opts_t *opts, size_t half_features);
/* The half-size query's options (patina_identify_half): *o from opts with
 * the calibrated default threshold resolved for table's spec
 * (patina_identify_far_threshold_half), *ho the half-size queries'
 * (patina_identify_half_opts(o, half_features)); margin checked. */
patina_status idf_half_prepare(const char *table, const patina_identify_opts_t *opts, size_t half_features,
                               double margin, patina_identify_opts_t *o, patina_identify_opts_t *ho);
/* The nq query records, then the nq half-size ones, in one new buffer
 * (idf_many_begin_half's layout); NULL when out of memory. */
unsigned char *idf_half_join(const void *queries, const void *half_queries, size_t nq, size_t qbytes);
patina_status idf_many_match(idf_many_t *m, size_t set, patina_context_t *ctx);
patina_status idf_many_match_sets(idf_many_t *m, size_t set0, size_t nsets, patina_context_t *ctx);
patina_status idf_many_finish(idf_many_t *m, patina_context_t *ctx, patina_identify_hit_t *hits,
                              patina_identify_result_t *results, uint32_t *hit_set);
void idf_many_free(idf_many_t *m); /* accepts NULL */

/* Drops the mirror of rs that ctx's GPU holds (when rs was last matched
 * there), for the owner of rs about to free it: a table calls it when it
 * lets a set go, so that a dropped partition frees its device memory at
 * once. Mirrors of sets freed without it stay until the table cache drops
 * them for memory or the context closes. ctx must be alive (a table's). */
void patina__refset_gpu_forget(patina_context_t *ctx, patina_refset_t *rs);

/* Builds ctx's GPU mirror of rs now, or brings it up to date, as the first
 * identification with options o would (its device, precision and arena
 * slots), so that that call uploads nothing. PATINA_OK with nothing done
 * where such a call would not use the GPU: no usable GPU in ctx, device
 * cpu, f16 records, an empty set. */
patina_status patina__refset_gpu_warm(patina_context_t *ctx, patina_refset_t *rs, const patina_identify_opts_t *o);

#endif
