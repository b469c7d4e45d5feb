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

/* Copies the index's first live row (patina_extractor_bytes of its
 * extractor) into out; 1 when there is one, 0 for an empty index. */
int patina__index_live_row(const patina_index_t *idx, void *out);

/* a += b: the counters of two searches' statistics (parts of one call). */
static inline void patina__search_stats_add(patina_search_stats_t *a, const patina_search_stats_t *b)
{
    a->gpu_tensor += b->gpu_tensor;
    a->gpu_filter += b->gpu_filter;
    a->gpu_exact += b->gpu_exact;
    a->cpu += b->cpu;
    a->chunks += b->chunks;
    a->host_bytes += b->host_bytes;
    a->pivot_dists += b->pivot_dists;
    a->pruned += b->pruned;
    a->computed += b->computed;
}

/* The indexes ixs[0 .. nix) -- of one spec, with disjoint ids -- searched
 * as ONE index holding the union of their rows: the same hits, distances
 * and order. k >= 1: k-NN into hits (nq, k), counts[q] = min(k, the
 * union's rows), padded as patina_index_knn; k = 0: range within radius
 * into lists (nq), as patina_index_range (opts->max_hits counts the
 * union). The indexes the CPU searches (opts->device, per index as
 * patina_index_knn decides) are scanned in one job, one after the other
 * within each chunk of rows, so the later ones are filtered by the k-th
 * distance the earlier ones gave; those the GPU searches (and std_l2
 * indexes, standardised by their own rows, when there are several) are
 * searched one by one and every part merged by (distance, id). The
 * indexes' read locks are taken in address order. Not in the public API:
 * patina_table_search_many is (src/table/table.c). */
patina_status patina__index_search_many(patina_context_t *ctx, const patina_index_t *const *ixs, size_t nix,
                                        const void *queries, size_t nq, size_t k, double radius,
                                        const patina_search_opts_t *opts, patina_hit_t *hits, patina_hit_t **lists,
                                        size_t *counts);

/* Rows per chunk below which a query is not split across threads. */
#define PATINA_KNN_MIN_CHUNK 1024

#ifdef __cplusplus
}
#endif
#endif
