/* The distance table: every distance a family can name, with its definition
 * on the CPU and whether the GPU search implements it (src/gpu/knn.cu).
 * Families name their distance by id in the registry (features/family.h);
 * the search engine reads only this table and never a family's name.
 *
 * Definitions, for descriptors a (the query), b (a stored row) of n elements
 * read as doubles, sums in element order (docs/search.md):
 *   tanimoto      LIRE's Tanimoto (CEDD), on p = b/Tb, q = a/Ta:
 *                 100 - 100 * (C1 / ((C2 + C3) - C1)), C1 = sum p q,
 *                 C2 = sum q q, C3 = sum p p; 0 if both sums are 0, 100 if one is
 *   l1            sum |a - b|
 *   l2            sqrt(sum (a - b)^2)
 *   std_l2        sqrt(sum ((a - b) / sd)^2), sd per element from the index's
 *                 rows (1 for a single pair)
 *   chi2          sum (a - b)^2 / (a + b) over elements with a + b > 0
 *   intersection  1 - sum min(a, b) / max(sum a, sum b)   (0 if both are empty)
 *   hellinger     sqrt(1 - sum sqrt(a b) / sqrt(sum a * sum b))
 *                 (0 if both are empty, 1 if one is)
 *   cosine        1 - sum a b / sqrt(sum a a * sum b b) (0 if both are
 *                 zero vectors, 1 if one is)
 * Record distances (.record = 1) read a family's whole record rather than a
 * vector of elements (n is the record's bytes):
 *   rootsift_ratio  1 / (1 + s), s = identification's one-to-one score of
 *                 a (query) against b (reference) at Lowe's ratio r (the
 *                 search's patina_search_opts_t.ratio, PATINA_RATIO_DEFAULT
 *                 0.8 by default, passed as the definition's parameter): the
 *                 number of distinct features of b that are the nearest
 *                 neighbour of some feature of a passing the ratio test
 *                 (idf_ratio_count, src/algo/rootsift_match.c: the same matcher and
 *                 scoring as `patina identify` before verification): 1 when
 *                 nothing matches, towards 0 as more of b is matched; NaN for
 *                 a malformed record. Identification (RANSAC, the open-set
 *                 decision) is patina_identify's job.
 *   sqfd          the Signature Quadratic Form Distance of two signature
 *                 records (algo/sqfd.h, n their floats): sqrt of
 *                 Sqq + Soo - 2 Sqo, Sxy = sum_i sum_j wx_i wy_j f(x_i, y_j)
 *                 in double, f = exp(-alpha d^2), 1 / (alpha + d) or -d by
 *                 the query record's alpha and form (src/algo/sqfd.c); 0
 *                 when rounding makes the sum negative; NaN for a malformed
 *                 record or records of different alpha or form.
 * Every implementation (the CPU's fast paths, the GPU's kernels) returns the
 * same double as the definition, bit for bit: the same operations in the
 * same order, no contraction into FMA. */
#ifndef PATINA_SEARCH_DISTANCE_H
#define PATINA_SEARCH_DISTANCE_H

#include <stddef.h>

#include "algo/distance_ids.h"
#include "patina/descriptor.h"
#include "patina/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pdist_def {
    const char *name;
    /* The definition above for one pair. sd is the distance's parameter:
     * std_l2's sd (n; NULL: 1), rootsift_ratio's Lowe ratio (one double, a
     * search option: patina_search_opts_t.ratio; NULL: PATINA_RATIO_DEFAULT);
     * the other distances ignore it. */
    double (*pair)(patina_elem e, const void *a, const void *b, size_t n, const double *sd);
    int gpu;    /* the GPU search computes it (src/gpu/knn.cu) */
    int record; /* compares whole records of a family's layout, not element-wise vectors */
    int ratio;  /* its parameter is Lowe's ratio (patina_search_opts_t.ratio), not an index's sd */
} pdist_def_t;

/* The entry of a distance (NULL out of range). */
const pdist_def_t *pdist_get(pdist_t d);

/* A record distance's check of one record of n elements (a query, a row
 * added or indexed): PATINA_OK, or an error whose message, prefixed by
 * what, says what is wrong. pdist_check gives it, or NULL for distances
 * that need none (sqfd has one: algo/sqfd.h). */
typedef patina_status (*pdist_check_fn)(const void *rec, size_t n, const char *what);
pdist_check_fn pdist_check(pdist_t d);

/* The id of a name, or -1. */
int pdist_find(const char *name);

/* Scratch bytes pdist_block needs for nq queries of n elements. */
size_t pdist_block_scratch(size_t nq, size_t n);

/* out[q * ld + r] = distance d of query q to row r, for q < nq, r < cnt:
 * queries (nq rows) and rows (cnt rows) of `bytes` bytes, n elements
 * each; sd as for the definition. Every value is the definition's double,
 * bit for bit. Rows are taken four at a time and each group serves every
 * query of the block while it is in cache: AVX2 (one row per lane, the
 * definition's operations in its order) where the CPU has it and the
 * portable path is not forced, else the portable x4 variants.
 * thr (nq) or NULL: a row provably farther than thr[q] from query q may
 * get +inf instead of its distance (the AVX2 path's std_l2 filter skips
 * the divisions there); every row within thr[q], ties included, gets its
 * distance. scratch: pdist_block_scratch(nq, n) bytes,
 * any alignment (the caller's; not kept). */
void pdist_block(pdist_t d, patina_elem e, const uint8_t *queries, size_t nq, const uint8_t *rows, size_t bytes,
                 size_t cnt, size_t n, const double *sd, const double *thr, void *scratch, double *out, size_t ld);

/* 1 when pdist_block runs the AVX2 kernels: an x86-64 build by GCC or
 * Clang, a CPU with AVX2 and the portable path not forced; else 0. */
int pdist_simd(void);

/* The fewest queries a pdist_block call should take for d's kernels to
 * pay (Hellinger's filter on AVX2 takes blocks of PDIST_HELL_BLOCK or more:
 * a search plans its blocks of queries at least this large where it has
 * that many, splitting the rows among the threads instead); 1 otherwise. */
#define PDIST_HELL_BLOCK 8
size_t pdist_block_min(pdist_t d);

/* Forces the portable C path (on != 0) or allows the AVX2 kernels again
 * (on = 0), process-wide, for the calls that start afterwards. For tests
 * and benchmarks that compare the two paths (they give the same doubles);
 * the library itself never calls it. */
void pdist_force_portable(int on);

/* Element i of a descriptor of type e, as a double (exact for every type). */
double pdist_elem(patina_elem e, const void *p, size_t i);

/* The n elements of p as doubles into out (pdist_elem's values, a loop per
 * type rather than a call per element). */
void pdist_elems(patina_elem e, const void *p, size_t n, double *out);

/* The index of the first NaN among the n elements of p, or n (never for the
 * integer types). */
size_t pdist_first_nan(patina_elem e, const void *p, size_t n);

#ifdef __cplusplus
}
#endif
#endif
