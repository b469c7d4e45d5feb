/* Exact k-NN and range search over one descriptor table.
 *
 * A patina_index_t holds (n, desc_bytes) descriptors and their ids, searched
 * with the extractor's distance (the distance table:
 * tanimoto, l1, l2, std_l2, chi2, intersection, hellinger, cosine; see
 * docs/search.md). Any number of threads may search one index at once.
 * Results are ordered by distance ascending, ties by id ascending (a NaN
 * distance sorts after every number); ids are unique in an index, so the
 * result does not depend on the device, the thread count or the batching.
 *
 * The search is exact and brute force, on the CPU (the context's workers,
 * over queries and, for few queries, over chunks of the index) or on the
 * context's GPU: every distance is the same double on both, bit for bit.
 * Calls are batch-first: nq queries in one call.
 *
 * Device copies. On the GPU the context keeps a copy of each index it
 * searched (uploaded on the first search, within the context's GPU memory
 * budget; the least recently used copies are dropped when memory is short,
 * and a copy outlives its index until then). */
#ifndef PATINA_SEARCH_H
#define PATINA_SEARCH_H

#include <stddef.h>
#include <stdint.h>
#include "patina/context.h"
#include "patina/descriptor.h"
#include "patina/options.h"
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
 * fails with PATINA_E_INVALID, and so does a row a record distance finds
 * malformed (sqfd: an empty signature, a NaN weight; the message names
 * the row). n = 0 gives an empty index. */
PATINA_API patina_status patina_index_new(patina_index_t **idx, const patina_extractor_t *ex,
                                          const uint64_t *ids, const void *descs, size_t n);
/* Loads the extractor's table (named by its canonical spec) from a
 * collection: a snapshot; later writes need a new load. An absent table
 * gives an empty index; a table of another descriptor size, or with a
 * row its record distance finds malformed, fails with PATINA_E_CORRUPT. */
PATINA_API patina_status patina_index_load(patina_index_t **idx, const patina_extractor_t *ex,
                                           patina_collection_t *c);
/* patina_index_load from a snapshot: look the records of its hits up in
 * the same snapshot (patina_snapshot_get) and every hit has one. */
PATINA_API patina_status patina_index_load_snapshot(patina_index_t **idx,
                                                    const patina_extractor_t *ex,
                                                    patina_snapshot_t *snap);
PATINA_API void patina_index_free(patina_index_t *idx); /* accepts NULL */
/* Rows that searches see (added, not removed). */
PATINA_API size_t patina_index_size(const patina_index_t *idx);

/* Live updates. put adds n rows (ids, descs (n, bytes)); an id the index
 * holds already is replaced (update = remove + add). remove drops the ids
 * it holds (others are ignored; *removed, may be NULL, counts the dropped).
 * Both are visible to every search that starts after they return; a search
 * running meanwhile sees the index wholly before or wholly after (a
 * reader-writer lock: searches share it, a change waits for them). Removed
 * rows are dropped for good (compaction) once they are 64 or more and a
 * quarter of the rows. On the GPU an index's device copy follows without a
 * new upload: added rows are appended, removed ones are blanked in place
 * (a copy is remade after a compaction, when an added row leaves CEDD's
 * 0..7 range, and for std_l2, whose sigma changes with every row). A
 * repeated id within one put, or a NaN element, fails with
 * PATINA_E_INVALID and changes nothing. The store stays the truth: apply
 * to the index what was committed to the collection. */
PATINA_API patina_status patina_index_put(patina_index_t *idx, const uint64_t *ids, const void *descs, size_t n);
PATINA_API patina_status patina_index_remove(patina_index_t *idx, const uint64_t *ids, size_t n,
                                             size_t *removed);

/* Where a search runs, and limits. */
/* How a search call answered its queries (patina_search_opts_t.stats). */
typedef struct patina_search_stats {
    size_t gpu_tensor; /* the integer tensor cores: CEDD's Tanimoto, or the filter of the dot-product
                        * distances (l2, std_l2, cosine, hellinger; then the definition's doubles) */
    size_t gpu_filter; /* the GPU's FP32 filter, then the definition's doubles on its candidates */
    size_t gpu_exact;  /* the GPU's definition kernels alone (data outside the filter's domain, retries) */
    size_t cpu;        /* the CPU (device CPU, or queries the GPU left to it) */
    size_t chunks;     /* chunks of rows streamed through the GPU: the index's copy did not fit its
                        * device budget (0: resident; the engines' counts are then the first chunk's,
                        * except for CEDD's pinned host tier, which counts every query) */
    size_t host_bytes; /* bytes uploaded from pinned host memory when streamed: CEDD's host tier (the
                        * index's device layout kept in page-locked memory), or the chunks' device
                        * layouts of other indexes kept there by the previous call (0: resident, or
                        * chunks laid out afresh) */
    /* Pivot-table searches (include/patina/pivots.h); 0 elsewhere. Summed over the call's queries. */
    size_t pivot_dists; /* query-to-pivot distances computed */
    size_t pruned;      /* rows a lower bound excluded without their distance */
    size_t computed;    /* rows whose distance was computed; pruned + computed = rows per query
                         * (k-NN stops where the smallest remaining bound exceeds the k-th distance:
                         * the rows left then count as pruned) */
} patina_search_stats_t;

typedef struct patina_search_opts {
    /* AUTO (the default): the context's GPU when it has a usable one, the
     * index has at least 4096 rows (256 for sqfd) and the GPU serves the
     * call (every distance but rootsift_ratio; k-NN: k <= 1024), else the
     * CPU. GPU: the GPU or PATINA_E_UNAVAILABLE. CPU: the CPU. HYBRID is
     * not a search device. */
    patina_device device;
    /* Range search: at most this many hits per query, the nearest
     * (0 = unlimited). */
    size_t max_hits;
    /* When set, filled by the call: which engine answered how many queries
     * (docs/search.md "Devices"). */
    patina_search_stats_t *stats;
    /* The rootsift_ratio distance (rootsift tables): Lowe's ratio of its
     * matcher, in (0, 1] (PATINA_RATIO_DEFAULT, as identification's); other
     * distances ignore it. */
    double ratio;
} patina_search_opts_t;

/* Fills opts with the defaults above (the table of include/patina/options.h,
 * set PATINA_OPTIONS_SEARCH). The search calls check opts against that
 * table's bounds (PATINA_E_INVALID naming the option). */
PATINA_API void patina_search_opts_init(patina_search_opts_t *opts);

/* k nearest for each of nq queries (nq, bytes): hits is (nq, k) in caller
 * memory; counts[q] = min(k, n); slots past counts[q] are padded with
 * {id 0, distance +inf}. ctx gives the workers and the GPU; ctx NULL runs
 * on the CPU with all CPUs (a pool started per call). opts NULL = defaults.
 * k = 0 fails with PATINA_E_INVALID, k > PATINA_K_MAX with PATINA_E_LIMIT. nq = 0
 * does nothing. */
PATINA_API patina_status patina_index_knn(patina_context_t *ctx, const patina_index_t *idx,
                                          const void *queries, size_t nq, size_t k,
                                          const patina_search_opts_t *opts, patina_hit_t *hits,
                                          size_t *counts);

/* Every item with distance <= radius, per query: hits[q] malloc'd (NULL
 * when there are none; the caller frees each), counts[q] its length; with
 * opts->max_hits > 0, the nearest max_hits of them. hits and counts are
 * caller arrays of nq. A NaN or negative radius fails (PATINA_E_INVALID);
 * on failure every hits[q] is NULL. Devices as for patina_index_knn
 * (opts->device): the GPU answers range search for every distance but
 * rootsift_ratio, which runs on the CPU (device GPU: PATINA_E_UNAVAILABLE);
 * the same hits on either. */
PATINA_API patina_status patina_index_range(patina_context_t *ctx, const patina_index_t *idx,
                                            const void *queries, size_t nq, double radius,
                                            const patina_search_opts_t *opts, patina_hit_t **hits,
                                            size_t *counts);

#ifdef __cplusplus
}
#endif
#endif
