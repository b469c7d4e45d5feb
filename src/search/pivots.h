/* Internal view of the pivot tables (src/search/pivots*.c; the hooks are in
 * pivots_search.c), for their tests. */
#ifndef PATINA_SEARCH_PIVOTS_H
#define PATINA_SEARCH_PIVOTS_H

#include "patina/pivots.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The bounds the search uses for query q (a checked record) and row r,
 * slack included: *metric the triangle bound, *ptolemaic the largest
 * Ptolemy bound over pivot pairs (0 with one pivot), *eps the query's
 * distance slack, *R_of_d the pruning radius for radius d (a row is
 * skipped at radius d only when a bound exceeds it). */
void patina__pivot_bounds(const patina_pivot_index_t *pi, const float *q, size_t r, double d, double *metric,
                          double *ptolemaic, double *eps, double *R_of_d);
/* Row r's id and record (for tests). */
uint64_t patina__pivot_row_id(const patina_pivot_index_t *pi, size_t r);

#ifdef __cplusplus
}
#endif
#endif
