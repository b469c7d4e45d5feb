/* Internal view of the CPU search (src/search/knn.c), for tests and for a
 * future GPU path. Not installed. */
#ifndef PATINA_SEARCH_KNN_H
#define PATINA_SEARCH_KNN_H

#include "patina/search.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the index computes CEDD Tanimoto through its exact fast path
 * (cached per-row sums; bit-identical to patina_cedd_tanimoto), 0 when it
 * calls the family's distance for every pair. */
int patina__index_fast_path(const patina_index_t *idx);

/* Rows per chunk below which a query is not split across threads. */
#define PATINA_KNN_MIN_CHUNK 1024

#ifdef __cplusplus
}
#endif
#endif
