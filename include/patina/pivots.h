/* Pivot tables: exact SQFD search that skips most distances (family `signature`).
 *
 * A pivot index holds a collection's signature records, P pivots chosen
 * among them (kept by value: their ids and records) and the table of every
 * row's SQFD to every pivot. A query computes its P distances to the
 * pivots; each row then gets a lower bound of its distance to the query
 * from the table, and only rows the bound cannot exclude get their SQFD:
 *   metric     max_i |d(q,p_i) - d(o,p_i)|                       (triangle)
 *   ptolemaic  the metric bound and max_{i<j} |d(q,p_i) d(o,p_j) -
 *              d(q,p_j) d(o,p_i)| / d(p_i,p_j)              (Ptolemy's)
 * Both hold for SQFD with the gaussian and the heuristic similarity (the
 * distance is a norm in a Hilbert space there: metric and ptolemaic); the
 * minus form is not a metric on signatures of different total weight and
 * is refused. Every bound is lowered by a proven rounding slack (see
 * docs/signature.md "Pivot tables"), so results are exactly those of the
 * scan (patina_index_knn / _range on the same rows): the same hits, the
 * same doubles, ties by id; NaN distances (a query of another alpha) are
 * never pruned and sort last.
 *
 * Range: rows whose bound exceeds the radius are skipped. k-NN: rows are
 * visited in blocks in the order of their metric bound, the k-th distance
 * found so far is the radius (it shrinks as hits come), a row whose bound
 * exceeds it is skipped, and the search stops at the first block whose
 * smallest bound exceeds it (the paper's scheme, on the CPU).
 *
 * Threads: queries spread over the context's workers; a single query
 * (fewer queries than workers) spreads its rows. Searches may run at once
 * on one index; _put and _remove must not run with any other call on it.
 * Persisted with a collection as the auxiliary blob "pivots:<spec>"
 * (patina_collection_put_aux); loading matches stored rows to the table's
 * rows by id and a hash of the record, and computes the rows of records
 * added or changed since (rows of removed images are dropped), so a stored
 * table never gives wrong bounds. */
#ifndef PATINA_PIVOTS_H
#define PATINA_PIVOTS_H

#include <stddef.h>
#include <stdint.h>
#include "patina/api.h"
#include "patina/context.h"
#include "patina/descriptor.h"
#include "patina/search.h"
#include "patina/status.h"
#include "patina/store.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PATINA_PIVOTS_MAX 1024

typedef enum patina_pivot_select {
    PATINA_PIVOTS_FARTHEST = 0, /* farthest-first: each pivot the row farthest from those chosen */
    PATINA_PIVOTS_RANDOM = 1    /* distinct rows at random (seeded) */
} patina_pivot_select;

typedef enum patina_pivot_bound {
    PATINA_BOUND_PTOLEMAIC = 0, /* metric and ptolemaic bounds (default) */
    PATINA_BOUND_METRIC = 1,    /* triangle bounds only */
    PATINA_BOUND_NONE = 2       /* no filtering: every row's distance (the scan) */
} patina_pivot_bound;

typedef struct patina_pivot_opts {
    size_t pivots;               /* P, 1 .. PATINA_PIVOTS_MAX and at most the rows (default 32) */
    patina_pivot_select select;  /* default FARTHEST */
    uint64_t seed;               /* of RANDOM, and of FARTHEST's starting row (default 1) */
} patina_pivot_opts_t;

PATINA_API void patina_pivot_opts_init(patina_pivot_opts_t *opts);

/* Where the filter and the distances run (docs/signature.md "Filter
 * strategies"); every strategy gives the same answer. The GPU ones need a
 * context with a usable GPU (else PATINA_E_UNAVAILABLE); queries the GPU
 * cannot take (another alpha, outside its domain) run on the CPU. */
typedef enum patina_pivot_strategy {
    PATINA_PIVOT_CPU = 0,      /* bounds and distances on the CPU's workers (default) */
    PATINA_PIVOT_PIPELINE = 1, /* the paper's: query-to-pivot distances on the GPU; the CPU's bounds
                                * send the surviving rows to the GPU in blocks (8000 for range; 64
                                * with at most 2 pending for k-NN, the radius refined as they return) */
    PATINA_PIVOT_GPU = 2,      /* the bounds evaluated on the GPU as well (a pilot of the rows of
                                * smallest bound gives the k-NN radius), survivors' SQFD there */
    PATINA_PIVOT_AUTO = 3      /* PATINA_PIVOT_GPU for tables of PATINA_PIVOT_AUTO_GPU_ROWS rows or
                                * more, the CPU's for smaller ones, and the CPU's too when the GPU
                                * cannot take the call (no context or GPU: never
                                * PATINA_E_UNAVAILABLE) -- what `patina search --device auto` and
                                * `patina serve` on a GPU use */
} patina_pivot_strategy;

/* Below this many rows PATINA_PIVOT_AUTO stays on the CPU (its filter is as
 * quick there as the GPU's launches). */
#define PATINA_PIVOT_AUTO_GPU_ROWS 256

typedef struct patina_pivot_search_opts {
    patina_pivot_bound bound;      /* default PTOLEMAIC */
    size_t max_hits;               /* range: at most this many, the nearest (0 = all) */
    patina_search_stats_t *stats;  /* when set, filled: .cpu, .gpu_filter, .pivot_dists, .pruned, .computed */
    patina_pivot_strategy strategy; /* default PATINA_PIVOT_CPU */
} patina_pivot_search_opts_t;

PATINA_API void patina_pivot_search_opts_init(patina_pivot_search_opts_t *opts);

typedef struct patina_pivot_index patina_pivot_index_t;

/* Builds a pivot index over n signature records (ids (n) unique, records
 * (n, patina_extractor_bytes(ex)); both copied, as is ex): chooses the
 * pivots and computes the table (n * P distances, on ctx's workers; ctx
 * NULL: a pool of all CPUs for the call). opts NULL = defaults.
 * PATINA_E_INVALID: ex is not a "signature" extractor, its form is minus,
 * a malformed record (the message names it), a repeated id, n = 0 ("empty
 * collection"), P = 0, or P > n; PATINA_E_LIMIT: P > PATINA_PIVOTS_MAX. */
PATINA_API patina_status patina_pivot_index_new(patina_pivot_index_t **pi, patina_context_t *ctx,
                                                const patina_extractor_t *ex, const uint64_t *ids,
                                                const void *records, size_t n, const patina_pivot_opts_t *opts);

/* patina_pivot_index_new over the collection's table of ex. An absent or
 * empty table fails with PATINA_E_INVALID ("empty collection"). */
PATINA_API patina_status patina_pivot_index_build(patina_pivot_index_t **pi, patina_context_t *ctx,
                                                  const patina_extractor_t *ex, patina_collection_t *c,
                                                  const patina_pivot_opts_t *opts);

/* Writes the index (pivots, table) to the collection as "pivots:<spec>",
 * replacing a stored one. */
PATINA_API patina_status patina_pivot_index_save(const patina_pivot_index_t *pi, patina_collection_t *c);
/* Deletes the stored table of ex (none stored: PATINA_OK). */
PATINA_API patina_status patina_pivot_index_drop(patina_collection_t *c, const patina_extractor_t *ex);

/* Loads the stored table of ex with the collection's current records (one
 * snapshot): PATINA_E_NOTFOUND when none is stored; PATINA_E_CORRUPT for a
 * damaged blob or a malformed stored record. Rows of records added or
 * changed since it was saved are computed; *refreshed (may be NULL)
 * receives how many rows were computed plus how many stored rows of
 * removed images were dropped (save again to keep
 * them). The _snapshot form reads that snapshot (its hits' records are
 * there to look up). */
PATINA_API patina_status patina_pivot_index_load(patina_pivot_index_t **pi, patina_context_t *ctx,
                                                 const patina_extractor_t *ex, patina_collection_t *c,
                                                 size_t *refreshed);
PATINA_API patina_status patina_pivot_index_load_snapshot(patina_pivot_index_t **pi, patina_context_t *ctx,
                                                          const patina_extractor_t *ex,
                                                          patina_snapshot_t *snap, size_t *refreshed);

PATINA_API void patina_pivot_index_free(patina_pivot_index_t *pi); /* accepts NULL */
PATINA_API size_t patina_pivot_index_size(const patina_pivot_index_t *pi);   /* rows */
PATINA_API size_t patina_pivot_index_pivots(const patina_pivot_index_t *pi); /* P */
/* The pivots' ids (P; borrowed, valid until the index changes). A pivot
 * stays a pivot when its image is removed: it is kept by value. */
PATINA_API const uint64_t *patina_pivot_index_pivot_ids(const patina_pivot_index_t *pi);

/* Adds n rows (an id held already is replaced), each with its P pivot
 * distances; removes ids (others ignored; *removed may be NULL). A
 * malformed record or a repeated id in one put fails with PATINA_E_INVALID
 * and changes nothing. Safe beside searches in other threads: searches and
 * save hold the table's read lock, put and remove its write lock, so a
 * search sees a change whole or not at all. */
PATINA_API patina_status patina_pivot_index_put(patina_pivot_index_t *pi, patina_context_t *ctx,
                                                const uint64_t *ids, const void *records, size_t n);
PATINA_API patina_status patina_pivot_index_remove(patina_pivot_index_t *pi, const uint64_t *ids, size_t n,
                                                   size_t *removed);

/* k-NN and range search as patina_index_knn / patina_index_range (the same
 * arguments, results and padding), filtered by the pivot table; where the
 * work runs: opts->strategy. */
PATINA_API patina_status patina_pivot_index_knn(patina_context_t *ctx, const patina_pivot_index_t *pi,
                                                const void *queries, size_t nq, size_t k,
                                                const patina_pivot_search_opts_t *opts, patina_hit_t *hits,
                                                size_t *counts);
PATINA_API patina_status patina_pivot_index_range(patina_context_t *ctx, const patina_pivot_index_t *pi,
                                                  const void *queries, size_t nq, double radius,
                                                  const patina_pivot_search_opts_t *opts, patina_hit_t **hits,
                                                  size_t *counts);

#ifdef __cplusplus
}
#endif
#endif
