/* The signature family's record layout, its checks, the sampling plan and
 * the SQFD definition. One internal header: the CPU extractor
 * (src/features/signature.c), the search distance (src/search/distance.c,
 * src/search/sqfd.c) and the public view (include/patina/signature.h) read
 * records only through what is declared here (docs/signature.md).
 *
 * A feature signature has a variable number of weighted centroids, but a
 * collection stores one FIXED-size record per image (the search engine
 * streams records as one strided array), so a record has room for K rows
 * (the option k) and says how many are used. Every element is an f32 in
 * the host's byte order (the family's element type is F32, so the search
 * engine's NaN check covers every field):
 *
 *   element   field
 *   0         count    centroids used, 1 <= count <= K (an integer)
 *   1         K        rows in this record (an integer)
 *   2         alpha    the similarity parameter (float of the option)
 *   3         form     0 gaussian exp(-alpha d^2), 1 heuristic
 *                      1 / (alpha + d), 2 minus -d
 *   4         version  SIG_VERSION
 *   5..7      0
 *   8 + 8 i   row i (i < K): weight, x, y, L, a, b, contrast, entropy
 *             (OpenCV's PCTSignatures column order); rows [count, K) zero
 *
 * Elements: 8 + 8 K (a row per centroid plus one header row). */
#ifndef PATINA_FEATURES_SIGNATURE_H
#define PATINA_FEATURES_SIGNATURE_H

#include <stddef.h>
#include <stdint.h>

#include "patina/image.h"
#include "patina/status.h"

#define SIG_COLS 8        /* floats per centroid row: weight + 7 features */
#define SIG_FEATURES 7    /* x, y, L, a, b, contrast, entropy */
#define SIG_HEADER 8      /* header floats (one row) */
#define SIG_VERSION 1
#define SIG_K_MAX 1024    /* bound of the option k */
#define SIG_SAMPLES_MAX (1 << 20)

enum { SIG_FORM_GAUSSIAN = 0, SIG_FORM_HEURISTIC = 1, SIG_FORM_MINUS = 2 };
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

/* Elements of a record of K rows. */
static inline size_t sig_dim(size_t K) { return SIG_HEADER + SIG_COLS * K; }

/* Checks a record of n elements: the header (count in [1, K], K matching
 * n, alpha > 0, a known form, the version) and every used row (finite
 * features, a finite weight >= 0). PATINA_E_INVALID with a message naming
 * `what` and the reason. */
patina_status sig_record_check(const float *rec, size_t n, const char *what);
/* The same test, quiet (no message): non-zero when the record is valid. */
int sig_record_valid(const float *rec, size_t n);

/* SQFD of two records of n elements each (the definition, in double):
 *   S = Sqq + Soo - 2 Sqo,  Sxy = sum_i sum_j wx_i wy_j f(x_i, y_j)
 * (i over x's rows, j over y's, row order), d(x_i, y_j) the L2 distance of
 * the 7 features (differences of the floats taken in double), f by the
 * query's form and alpha; the result sqrt(S), 0 when rounding (or the
 * minus form on unequal total weights) makes S negative. NaN when either
 * record fails sig_record_check or their alpha or form differ. */
double sig_sqfd(const float *q, const float *o, size_t n);

/* The same, for callers that hold rows rather than records: q (nq, 8) and
 * o (no, 8) rows as above, alpha and form given. No checks. */
double sig_sqfd_rows(const float *q, size_t nq, const float *o, size_t no, double alpha, int form);

/* Self terms (the search keeps one per row; docs/signature.md "Self
 * terms"). For valid records (sig_record_check):
 *   sig_self(x)           Sxx = sum_i sum_j wx_i wx_j f(x_i, x_j) by x's own
 *                         alpha and form: the definition's self block, the
 *                         same double as inside sig_sqfd
 *   sig_cross(q, o)       Sqo by q's alpha and form, the definition's cross
 *                         block (i over q's rows, j over o's)
 *   sig_sqfd_self(q, sqq, o, soo)  with sqq = sig_self(q), soo = sig_self(o):
 *                         sig_sqfd(q, o, n) bit for bit (the same three
 *                         doubles, (Sqq + Soo) - 2 Sqo, clamped), NaN when the
 *                         alpha or form differ. No record checks.
 * sig_self_rows: Sxx of rows (nx, 8), alpha and form given. */
double sig_self(const float *rec);
double sig_cross(const float *q, const float *o);
double sig_sqfd_self(const float *q, double sqq, const float *o, double soo);
double sig_self_rows(const float *x, size_t nx, double alpha, int form);

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
