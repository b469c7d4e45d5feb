/* Exact k-NN and range search over one descriptor table.
 *
 * A patina_index_t is an immutable snapshot: (n, desc_bytes) descriptors and
 * their ids, searched with the extractor's distance. Any number of threads
 * may search one index at once; each call brings its own scratch.
 * Results are ordered by distance ascending, ties by id ascending. */
#ifndef PATINA_SEARCH_H
#define PATINA_SEARCH_H

#include <stddef.h>
#include <stdint.h>
#include "patina/descriptor.h"
#include "patina/status.h"
#include "patina/store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct patina_hit {
    uint64_t id;
    double distance;
} patina_hit_t;

typedef struct patina_index patina_index_t;

/* Builds an index from caller arrays (copied). ids (n), descs (n, bytes). */
patina_status patina_index_new(patina_index_t **idx, const patina_extractor_t *ex,
                               const uint64_t *ids, const void *descs, size_t n);
/* Loads the extractor's table from a collection. An absent table gives an
 * empty index. */
patina_status patina_index_load(patina_index_t **idx, const patina_extractor_t *ex,
                                patina_collection_t *c);
void patina_index_free(patina_index_t *idx); /* accepts NULL */
size_t patina_index_size(const patina_index_t *idx);

/* k nearest for each of nq queries (nq, bytes): hits is (nq, k); counts[q]
 * = min(k, n). threads 0 = all CPUs. k = 0 or k > 1e6 fails. */
patina_status patina_index_knn(const patina_index_t *idx, const void *queries, size_t nq,
                               size_t k, int threads, patina_hit_t *hits, size_t *counts);

/* Every item with distance <= radius, per query: *hits[q] malloc'd (caller
 * frees each and the array), counts[q] its length, at most max_hits each
 * (0 = unlimited). */
patina_status patina_index_range(const patina_index_t *idx, const void *queries, size_t nq,
                                 double radius, size_t max_hits, int threads,
                                 patina_hit_t **hits, size_t *counts);

#ifdef __cplusplus
}
#endif
#endif
