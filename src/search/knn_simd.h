/* The AVX2 filter of the CPU's Tanimoto fast path (src/search/knn_avx2.c),
 * used by search/knn_search.c where pdist_simd() says the AVX2 kernels run. */
#ifndef PATINA_SEARCH_KNN_SIMD_H
#define PATINA_SEARCH_KNN_SIMD_H

#include <stddef.h>
#include <stdint.h>

#include "search/distance_simd.h"

/* Rows per group of the filter. */
#define PTAN_GROUP 16

#if PDIST_HAVE_AVX2
/* L (ceil(dim / 2), 16): L[16 e + j] = elements 2e (low byte) and 2e + 1
 * (high byte; 0 past dim) of row j of `rows` (m <= 16 rows of dim u8 elements,
 * row-major); rows m..15 are zeros. s1[j] = the row's sum of squares. */
void ptan_avx2_layout(const uint8_t *rows, size_t m, size_t dim, uint16_t *L, double s1[PTAN_GROUP]);

/* Bit j: row j of L may lie within the threshold -- not provably outside.
 * With D = sum a b (the query's non-zero element pairs: pe[i] the pair,
 * pv[i] its two elements as L holds them), the row's T1 = t1[j], S1 =
 * s1[j] and the query's T2, S2, row j is left out when
 *   D T1 T2 < tc (S2 T1^2 + S1 T2^2 - D T1 T2)
 * (every term an exact integer in double); a NaN tc leaves nothing out.
 * knn_search.c derives tc from the threshold and proves the bound. */
unsigned ptan_avx2_filter(const uint16_t *L, const uint16_t *pe, const uint16_t *pv, size_t np,
                          const double t1[PTAN_GROUP], const double s1[PTAN_GROUP], double t2, double s2, double tc);
#endif

#endif
