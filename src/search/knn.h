/* Internal view of the search (src/search/knn.c, knn_search.c), for its tests. */
#ifndef PATINA_SEARCH_KNN_H
#define PATINA_SEARCH_KNN_H

#include "algo/hits.h"
#include "patina/search.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when the index computes Tanimoto through its exact fast path (cached
 * per-row sums; bit-identical to the definition), 0 when it calls the
 * distance table's definition for every pair. */
int patina__index_fast_path(const patina_index_t *idx);

/* Rows per chunk below which a query is not split across threads. */
#define PATINA_KNN_MIN_CHUNK 1024

#ifdef __cplusplus
}
#endif
#endif
