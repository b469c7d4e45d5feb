/* The signature record's layout and the Signature Quadratic Form Distance on
 * it: the arithmetic that the signature family (src/features/signature.c,
 * which writes records and checks them with a message) and the search
 * (src/search/distance.c, knn*.c, pivots*.c, which compare them) share. One
 * definition (src/algo/sqfd.c), plain double loops in row order, the ground
 * truth that the fast paths and the GPU kernels (src/gpu/sqfd.cu) reproduce.
 * Not here: extraction (sampling, k-means: features/signature.h), the
 * search engines, messages (callers turn sig_record_problem's text into a
 * status).
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
#ifndef PATINA_ALGO_SQFD_H
#define PATINA_ALGO_SQFD_H

#include <stddef.h>

#define SIG_COLS 8        /* floats per centroid row: weight + 7 features */
#define SIG_FEATURES 7    /* x, y, L, a, b, contrast, entropy */
#define SIG_HEADER 8      /* header floats (one row) */
#define SIG_VERSION 1
#define SIG_K_MAX 1024    /* bound of the option k */

enum { SIG_FORM_GAUSSIAN = 0, SIG_FORM_HEURISTIC = 1, SIG_FORM_MINUS = 2 };

/* Elements of a record of K rows. */
static inline size_t sig_dim(size_t K) { return SIG_HEADER + SIG_COLS * K; }

/* Checks a record of n elements: the header (count in [1, K], K matching
 * n, alpha > 0, a known form, the version) and every used row (finite
 * features, a finite weight >= 0). 0 when the record is valid; otherwise 1
 * and, when msg is not NULL, what is wrong in msg (cap bytes, e.g.
 * "signature record says K = 3 in 40 elements"; no prefix). */
int sig_record_problem(const float *rec, size_t n, char *msg, size_t cap);
/* The same test, quiet: non-zero when the record is valid. */
int sig_record_valid(const float *rec, size_t n);

/* SQFD of two records of n elements each (the definition, in double):
 *   S = Sqq + Soo - 2 Sqo,  Sxy = sum_i sum_j wx_i wy_j f(x_i, y_j)
 * (i over x's rows, j over y's, row order), d(x_i, y_j) the L2 distance of
 * the 7 features (differences of the floats taken in double), f by the
 * query's form and alpha; the result sqrt(S), 0 when rounding (or the
 * minus form on unequal total weights) makes S negative. NaN when either
 * record fails sig_record_valid or their alpha or form differ. */
double sig_sqfd(const float *q, const float *o, size_t n);

/* The same, for callers that hold rows rather than records: q (nq, 8) and
 * o (no, 8) rows as above, alpha and form given. No checks. */
double sig_sqfd_rows(const float *q, size_t nq, const float *o, size_t no, double alpha, int form);

/* Self terms (the search keeps one per row; docs/signature.md "Self
 * terms"). For valid records:
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

#endif
