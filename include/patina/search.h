/* Exact k-NN and range search over one descriptor table.
 *
 * A patina_index_t is an immutable snapshot: (n, desc_bytes) descriptors and
 * their ids, searched with the extractor's distance. Any number of threads
 * may search one index at once; each call brings its own scratch.
 * Results are ordered by distance ascending, ties by id ascending (a NaN
 * distance sorts after every number); ids are unique in an index, so the
 * result does not depend on the thread count.
 *
 * The search is exact and brute force (src/search/knn.c), multi-threaded
 * over queries and, for fewer queries than threads, over chunks of the
 * index. For CEDD the Tanimoto distance runs through a fast path with
 * per-row sums cached at build time that returns the same doubles as
 * patina_cedd_tanimoto, bit for bit; patina_index_knn_gpu runs that k-NN
 * on a GPU (src/gpu/knn.cu) with the same result. */
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

/* Builds an index from caller arrays (copied; the extractor is copied too,
 * so the caller may free it). ids (n), descs (n, bytes). A repeated id
 * fails with PATINA_E_INVALID. n = 0 gives an empty index. */
PATINA_API patina_status patina_index_new(patina_index_t **idx, const patina_extractor_t *ex,
                                          const uint64_t *ids, const void *descs, size_t n);
/* Loads the extractor's table (named by its canonical spec) from a
 * collection: a snapshot; later writes need a new load. An absent table
 * gives an empty index; a table of another descriptor size fails with
 * PATINA_E_CORRUPT. */
PATINA_API patina_status patina_index_load(patina_index_t **idx, const patina_extractor_t *ex,
                                           patina_collection_t *c);
/* patina_index_load from a snapshot: look the records of its hits up in
 * the same snapshot (patina_snapshot_get) and every hit has one. */
PATINA_API patina_status patina_index_load_snapshot(patina_index_t **idx,
                                                    const patina_extractor_t *ex,
                                                    patina_snapshot_t *snap);
PATINA_API void patina_index_free(patina_index_t *idx); /* accepts NULL */
PATINA_API size_t patina_index_size(const patina_index_t *idx);

/* k nearest for each of nq queries (nq, bytes): hits is (nq, k) in caller
 * memory; counts[q] = min(k, n); slots past counts[q] are padded with
 * {id 0, distance +inf}. threads 0 = all CPUs (a pool is started per call;
 * tiny problems run on the calling thread). k = 0 fails with
 * PATINA_E_INVALID, k > 1e6 with PATINA_E_LIMIT. nq = 0 does nothing. */
PATINA_API patina_status patina_index_knn(const patina_index_t *idx, const void *queries, size_t nq,
                                          size_t k, int threads, patina_hit_t *hits, size_t *counts);

/* patina_index_knn on CUDA device `gpu` (0 = the first): the same hits and
 * the same doubles. CEDD Tanimoto indexes only (PATINA_E_UNAVAILABLE for
 * other families, and without a GPU); the table is copied to the device on
 * the first call and kept with the index. Queries that are not CEDD
 * descriptors (a bin above 7) are answered on the CPU. */
PATINA_API patina_status patina_index_knn_gpu(const patina_index_t *idx, int gpu, const void *queries,
                                              size_t nq, size_t k, patina_hit_t *hits, size_t *counts);

/* Every item with distance <= radius, per query: hits[q] malloc'd (NULL
 * when there are none; the caller frees each), counts[q] its length; with
 * max_hits > 0, the nearest max_hits of them (0 = unlimited). hits and
 * counts are caller arrays of nq. A NaN radius fails; on failure every
 * hits[q] is NULL. */
PATINA_API patina_status patina_index_range(const patina_index_t *idx, const void *queries, size_t nq,
                                            double radius, size_t max_hits, int threads,
                                            patina_hit_t **hits, size_t *counts);

#ifdef __cplusplus
}
#endif
#endif
