/* Live tables: one searchable table of a collection, kept in step with writes.
 *
 * A live table is what a user searches: one descriptor table of a
 * collection (or a partition of it), with everything derived from it --
 *   - the search index (families searched by a distance: PATINA_CAP_SEARCH),
 *   - the stored pivot table, where one exists (PATINA_CAP_PIVOTS: signature),
 *   - the identification reference set (PATINA_CAP_IDENTIFY: rootsift).
 * Writes made through live tables (patina_tables_put, patina_tables_remove)
 * commit to the collection in one transaction per call and then update
 * every one of those structures, so the next search sees them. Writes made
 * elsewhere (another process, the indexing pipeline) change the
 * collection's version (patina_collection_version); the table notices at
 * its next call and reloads before answering. The front ends (the CLI,
 * `patina serve`, the Python binding) all go through this object: the rules
 * below are stated once, here.
 *
 * Device policy (patina_table_query_t.device and
 * patina_identify_opts_t.device), the same for k-NN, range and identify:
 *   CPU   the CPU (the context's workers).
 *   GPU   the context's GPU, or PATINA_E_UNAVAILABLE when it has none usable
 *         or the GPU engine cannot take the call (k over its limit, data
 *         outside its domain); nothing runs on the CPU instead.
 *   AUTO  (the default) the GPU where the engine finds it worth it and can
 *         take the call (search: tables of 4096 rows or more; pivot tables:
 *         PATINA_PIVOT_AUTO_GPU_ROWS rows or more; identification: u8
 *         tables), else the CPU; never PATINA_E_UNAVAILABLE for want of a GPU.
 * Every device gives the same answer, bit for bit (ties by id). An empty
 * table answers every query with no hit, on any device. HYBRID is not a
 * search device (PATINA_E_INVALID).
 *
 * Partitions. A table may hold one partition of a collection: the rows
 * whose key falls in partition p of P (patina_key_partition). A table
 * opened on a collection loads only those rows and ignores writes of other
 * keys; a detached table (patina_table_new) holds no collection at all and
 * is fed by a stream of changes (patina_table_apply), as a shard process of
 * a cluster is. Since a row's distance or score depends only on the query
 * and that row, merging the partitions' answers by (distance, id) gives
 * the unpartitioned answer.
 *
 * Threads. Any number of threads may search and identify at once; a write
 * or a reload waits for the calls in flight and is seen wholly by the calls
 * that start after it (a writer-preferring read-write lock). */
#ifndef PATINA_TABLE_H
#define PATINA_TABLE_H

#include <stddef.h>
#include <stdint.h>
#include "patina/api.h"
#include "patina/context.h"
#include "patina/descriptor.h"
#include "patina/identify.h"
#include "patina/pivots.h"
#include "patina/search.h"
#include "patina/status.h"
#include "patina/store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct patina_table patina_table_t;

/* The partition (0 .. partitions-1) of a key: the first 8 bytes of the
 * key's SHA-256, read big-endian, modulo partitions (>= 1). Stable across
 * machines and versions: a collection's partitioning is fixed by it. */
PATINA_API uint32_t patina_key_partition(const char *key, uint32_t partitions);

typedef struct patina_table_opts {
    /* Partition `partition` of `partitions` (default 0 of 1: every row). */
    uint32_t partition, partitions;
    /* Filter searches through the collection's stored pivot table when it
     * has one (1, the default); 0: scan every row. */
    int pivots;
    /* Capabilities (PATINA_CAP_*) the table must have: a spec that names no
     * table, or a bare family name, picks among the tables that have them
     * (0, the default: any table). */
    unsigned need;
    /* 1: a table the collection does not have yet opens empty, and the
     * first patina_tables_put that gives it descriptors creates it (0, the
     * default: PATINA_E_NOTFOUND). */
    int create;
} patina_table_opts_t;

PATINA_API void patina_table_opts_init(patina_table_opts_t *opts);

/* Opens the table `spec` of collection c (any spelling of a family and its
 * options; canonicalised). spec NULL: the collection's only table with the
 * capabilities opts->need (an identification table, PATINA_CAP_IDENTIFY,
 * only when need asks for identification: its records can be searched by
 * rootsift_ratio, but only when named) -- PATINA_E_NOTFOUND when it has
 * none ("has no table for search yet"), PATINA_E_INVALID when it has
 * several (the message lists them). A family name alone ("lbp") names the collection's
 * only table of that family when no table has exactly that spec. A table
 * the collection does not have is PATINA_E_NOTFOUND (unless opts->create),
 * the message listing the tables it has; a table without the capabilities
 * opts->need is PATINA_E_INVALID saying what it is for. The rows are
 * loaded at the first call that needs them (a search, identify, size), so
 * opening is cheap; a damaged table fails that call with PATINA_E_CORRUPT.
 * ctx and c are borrowed and must outlive the table; ctx NULL: a pool of
 * all CPUs per call and no GPU. opts NULL: defaults. */
PATINA_API patina_status patina_table_open(patina_table_t **t, patina_context_t *ctx, patina_collection_t *c,
                                           const char *spec, const patina_table_opts_t *opts);

/* A detached, empty table of `spec` (canonicalised): no collection behind
 * it; rows come only through patina_table_apply. */
PATINA_API patina_status patina_table_new(patina_table_t **t, patina_context_t *ctx, const char *spec,
                                          const patina_table_opts_t *opts);

PATINA_API void patina_table_free(patina_table_t *t); /* accepts NULL */

/* The canonical spec (owned by t), the extractor of its family and options
 * (owned by t: describe queries with it), the family's capabilities
 * (PATINA_CAP_*), the rows it holds, and the version it reflects: the
 * collection's version as of its last load or write, or for a detached
 * table the sequence number of the last change applied. */
PATINA_API const char *patina_table_spec(const patina_table_t *t);
PATINA_API const patina_extractor_t *patina_table_extractor(const patina_table_t *t);
PATINA_API unsigned patina_table_caps(const patina_table_t *t);
PATINA_API size_t patina_table_size(patina_table_t *t);
/* The rows a query is matched against: patina_table_size but for an
 * identification table of reference views (the spec's `views` = V), whose
 * every image is 1 + V rows (the capacity and the matching time count
 * these). */
PATINA_API size_t patina_table_matched_rows(patina_table_t *t);
PATINA_API uint64_t patina_table_version(patina_table_t *t);
/* The pivots of the pivot table searches go through (0: none; they scan). */
PATINA_API size_t patina_table_pivots(patina_table_t *t);

/* Catches up with the collection now: reloads when its version moved (every
 * call does this itself; this is for warming up or for timing).
 * *reloaded (may be NULL) says whether it did. Detached tables: PATINA_OK. */
PATINA_API patina_status patina_table_refresh(patina_table_t *t, int *reloaded);

/* ------------------------------------------------------------------ search */

typedef enum patina_query_kind {
    PATINA_QUERY_KNN = 0,  /* the k nearest */
    PATINA_QUERY_RANGE = 1 /* every row within radius (the nearest max_hits when max_hits > 0) */
} patina_query_kind;

typedef struct patina_table_query {
    patina_query_kind kind;       /* KNN (default) */
    size_t k;                     /* KNN: 1 .. PATINA_K_MAX (default 10) */
    double radius;                /* RANGE: >= 0, not NaN (default 0) */
    size_t max_hits;              /* RANGE: at most this many per query, the nearest (0 = all) */
    patina_device device;         /* AUTO (default), CPU or GPU: the policy above */
    patina_pivot_bound bound;     /* with a pivot table: PTOLEMAIC (default), METRIC or NONE */
    int keys;                     /* 1: fill the hits' keys (patina_table_results_t.keys) */
    patina_search_stats_t *stats; /* when set, filled (summed over the call's queries) */
} patina_table_query_t;

PATINA_API void patina_table_query_init(patina_table_query_t *q);

/* Hits of nq queries, in library memory: query i's hits are
 * hits[offsets[i] .. offsets[i+1]), ordered by distance, ties by id. */
typedef struct patina_table_results {
    size_t nq;
    size_t *offsets;     /* (nq + 1) */
    patina_hit_t *hits;  /* (offsets[nq]) */
    char **keys;         /* (offsets[nq]) with query.keys, else NULL. A hit whose record
                          * another process removed between the table's state and the
                          * lookup makes the table reload and search again (3 times at
                          * most); if that keeps happening such hits are left out, so
                          * every hit listed has its key */
    size_t rows;         /* rows the queries were searched against */
    uint64_t version;    /* the version the answer reflects (patina_table_version) */
} patina_table_results_t;

/* Frees what a search put in res and zeroes it; accepts NULL and zeroed structs. */
PATINA_API void patina_table_results_release(patina_table_results_t *res);

/* Searches nq descriptors (nq, patina_extractor_bytes of the table's
 * extractor) with the family's distance. res is caller storage, filled
 * (zeroed on failure). PATINA_E_INVALID for a family that is not searched
 * by a distance (rootsift: identify), k = 0, a
 * negative or NaN radius (PATINA_E_LIMIT: k over PATINA_K_MAX), HYBRID, or a malformed query (a record distance
 * names it); PATINA_E_UNAVAILABLE as the device policy says. nq = 0 gives
 * an empty result. */
PATINA_API patina_status patina_table_search(patina_table_t *t, const void *queries, size_t nq,
                                             const patina_table_query_t *q, patina_table_results_t *res);

/* patina_table_search over several tables at once, answering exactly as
 * ONE table holding the union of their rows would: the same hits,
 * distances, order (ties by id), k clamped to the union's rows, range's
 * max_hits over the union, keys (each hit's from the table that holds it),
 * rows summed, version the smallest. The tables must share the spec and
 * the context (PATINA_E_INVALID otherwise, as for a table listed twice,
 * nt = 0 or a family that is not searched by a distance) and hold disjoint
 * ids (the partitions of one collection, a cluster shard's partitions: not
 * checked). One call costs about one search over the union rather than nt
 * searches and a merge: on the CPU the tables' rows are scanned as one run
 * of rows (one job on the context's workers), each query keeping one k-th
 * distance across the tables, so a table is filtered by what the tables
 * before it found; on the GPU, CEDD's k-NN (every query on the engine's fast
 * path) runs one engine pass over the tables' device copies with one
 * threshold per query (q->stats then counts each query once, not once a
 * table); tables the GPU searches otherwise (range, other families) and
 * tables with a pivot table are searched each on its own within the call,
 * and the parts merged. On a context of several devices each
 * slice does the same over the tables' rows of its slice. Exception: a
 * std_l2 distance (haralick) standardises by each table's own rows, so
 * over several tables its answer is each table's answer merged. The read
 * locks are taken in address order, as patina_table_identify_many's. nt = 1
 * is patina_table_search. */
PATINA_API patina_status patina_table_search_many(patina_table_t *const *tables, size_t nt, const void *queries,
                                                  size_t nq, const patina_table_query_t *q,
                                                  patina_table_results_t *res);

/* Merges np answers to the same queries, each over a DISJOINT part of the
 * rows (GPU slices, partitions, a cluster's shards) and each searched with
 * the same q, into the answer over all the rows: k-NN the k nearest, range
 * every hit (the nearest q->max_hits when set), ordered by distance, ties by
 * id -- exactly what one search over the union gives. Keys are carried when
 * every part has them; rows are summed; version is the smallest. out is
 * filled (release with patina_table_results_release; zeroed on failure).
 * Parts built by a caller hold malloc'd offsets, hits and keys. Parts that
 * answer different numbers of queries, or whose offsets decrease, are
 * PATINA_E_INVALID; np = 0 gives an empty answer to no query. */
PATINA_API patina_status patina_table_results_merge(const patina_table_results_t *parts, size_t np,
                                                    const patina_table_query_t *q, patina_table_results_t *out);

/* The fan-out of the table's last search or identification that ran over
 * several slices (a context of several devices; docs/table.md "Several
 * GPUs: slices"), in seconds: what a benchmark reports to show where a
 * call's time goes. With concurrent calls it is one of them, whole. */
typedef struct patina_table_fanout {
    size_t slices;     /* the call's slices (0: no call over slices yet) */
    double total;      /* from the fan-out's start to the merged answer */
    double slice_max;  /* the slowest slice's own part, its start to its end */
    double slice_min;  /* the fastest slice's */
    double start_max;  /* the latest start of a slice's part after the fan-out's (the hand-off) */
    double merge;      /* merging the slices' answers */
} patina_table_fanout_t;

/* Copies the table's last fan-out into *out (zeroed before the first). */
PATINA_API patina_status patina_table_fanout(patina_table_t *t, patina_table_fanout_t *out);

/* Builds the table's device copies now, so that the next call uploads
 * nothing: an identification table's GPU mirror of its references on each
 * of its slices' devices (every slice of a multi-GPU context), for the
 * default identification options (patina_identify_opts_init: precision,
 * arena slots), as its first identification would -- a shard warms a
 * partition before it answers for it. Nothing is done, PATINA_OK, where
 * such a call would not use a GPU: a CPU context or no usable GPU, f16
 * records, an empty table. A searched table (k-NN, range, SQFD) runs one
 * search of k = 1 for one of its own rows with the default query (device
 * AUTO): each slice's device copy and a pivot table's device side are made
 * as its first search would make them. Nothing is done without a usable
 * GPU; a table under the GPU's minimum rows gets that search on the CPU
 * over its few rows, which copies nothing. A copy stays until the
 * table cache drops it for memory (another table's need) or the table
 * lets its rows go. Loads the table first when it must (as a search
 * would). */
PATINA_API patina_status patina_table_warm(patina_table_t *t);

/* ---------------------------------------------------------- identification */

/* Bytes of one query record for identify (the spec at its query budget n). */
PATINA_API size_t patina_table_query_bytes(patina_table_t *t);

/* Query records of nq decoded images (patina_identify_extract on the
 * table's spec): out (nq, patina_table_query_bytes), st (nq, may be NULL).
 * ctx: whose workers extract (NULL: the table's context), so that threads
 * with contexts of their own describe queries in parallel. */
PATINA_API patina_status patina_table_identify_extract(patina_table_t *t, patina_context_t *ctx, void *out,
                                                       const patina_image_t *images, size_t nq, patina_status *st);

/* The half-size queries' records of nq decoded images
 * (patina_identify_extract_half on the table's spec), as above. */
PATINA_API patina_status patina_table_identify_extract_half(patina_table_t *t, patina_context_t *ctx, void *out,
                                                            const patina_image_t *images, size_t nq,
                                                            patina_status *st);

/* patina_identify against the table's references (opts NULL: defaults;
 * opts->device follows the policy above). keys (nq * k, may be NULL)
 * receives each hit's key (malloc'd, free with patina_free; NULL past
 * nhits). PATINA_E_INVALID for a family without PATINA_CAP_IDENTIFY. */
PATINA_API patina_status patina_table_identify(patina_table_t *t, const void *queries, size_t nq,
                                               const patina_identify_opts_t *opts, patina_identify_hit_t *hits,
                                               patina_identify_result_t *results, char **keys);

/* patina_table_identify over several tables at once, answering exactly as
 * ONE table holding the union of their rows would: the same hits, scores,
 * matches, inliers, verified flags, decisions and keys. The tables must
 * share the spec and the context (PATINA_E_INVALID otherwise, as for a
 * table listed twice or a family without PATINA_CAP_IDENTIFY) and hold
 * disjoint ids (the partitions of one collection, a cluster shard's
 * partitions: not checked). Each table is matched where it lives -- on the
 * context's CPU workers or against its own GPU mirror, slice by slice on a
 * context of several devices -- and the candidates of all are merged before
 * RANSAC, which verifies only the union's best verify_top once (one table
 * per call would verify verify_top per table). k, verify_top and the
 * clamping of k to the rows count the union. A caller that merges such
 * answers further (patina_identify_merge) asks each for k =
 * patina_identify_part_k, as for one table. keys as patina_table_identify:
 * each hit's key from the table that holds it. nt = 1 is
 * patina_table_identify. The tables' read locks are taken in address order,
 * so calls over overlapping sets of tables do not deadlock with each other
 * or with writers. */
PATINA_API patina_status patina_table_identify_many(patina_table_t *const *tables, size_t nt, const void *queries,
                                                    size_t nq, const patina_identify_opts_t *opts,
                                                    patina_identify_hit_t *hits, patina_identify_result_t *results,
                                                    char **keys);

/* patina_table_identify with the half-size query (include/patina/identify.h):
 * the queries with opts, their half-size queries (half_queries, (nq,
 * patina_table_query_bytes), from patina_table_identify_extract_half) with
 * patina_identify_half_opts(opts, half_features), then
 * patina_identify_fuse_half with margin (keys follow their hits; taken
 * (nq, may be NULL) receives 1 where the half-size query's answer was
 * taken: its hits' points, patina_table_identify_pairs of the half-size
 * query, lie on the halved photograph). The calibrated default threshold
 * (opts->threshold PATINA_THRESHOLD_CALIBRATED) is
 * patina_identify_far_threshold_half's at PATINA_FAR_DEFAULT. */
PATINA_API patina_status patina_table_identify_half(patina_table_t *t, const void *queries, const void *half_queries,
                                                    size_t nq, size_t half_features, double margin,
                                                    const patina_identify_opts_t *opts, patina_identify_hit_t *hits,
                                                    patina_identify_result_t *results, char **keys,
                                                    unsigned char *taken);

/* patina_identify_pairs against the table's references. */
PATINA_API patina_status patina_table_identify_pairs(patina_table_t *t, const void *query, uint64_t id,
                                                     const patina_identify_opts_t *opts, float *pairs, size_t cap,
                                                     size_t *n);

/* ------------------------------------------------------------------ writes */

/* Writes n images to the collection of the live tables tables[0 .. nt) --
 * all open on one collection handle -- in ONE transaction: the records
 * (items; items[i].desc is ignored) and, for each table t with descs[t]
 * not NULL, its descriptors ((n, bytes) in the items' order). Then every
 * table follows: rows put where it got descriptors; where it got none and
 * an existing key's content (SHA-256) changed, the row is dropped (the
 * store dropped it). Keys outside a table's partition leave the table as
 * it is. ids (n, may be NULL) receives the images' ids. A table that was
 * out of date before the write, or that another process wrote to during
 * it, reloads at its next call instead. The collection's rules of
 * patina_collection_put_tables hold (replacement keeps the id, all or
 * nothing, PATINA_E_FULL). At least one descs[t] must be set. */
PATINA_API patina_status patina_tables_put(patina_table_t *const *tables, size_t nt, const patina_insert_t *items,
                                           size_t n, const void *const *descs, uint64_t *ids);

/* Removes n images by id from the collection of tables[0 .. nt), one
 * transaction each, and their rows from every table. *removed (may be NULL)
 * counts the images removed; an id without a record is PATINA_E_NOTFOUND
 * after the others were removed. */
PATINA_API patina_status patina_tables_remove(patina_table_t *const *tables, size_t nt, const uint64_t *ids,
                                              size_t n, size_t *removed);

/* Writes the table's derived data that the collection keeps (its pivot
 * table, brought up to date) when it changed since it was stored: rows of
 * images written since (by anyone) computed, rows of removed images
 * dropped. *changed (may be NULL) receives how many rows changed (0:
 * nothing was written). A partition's table writes nothing (the stored
 * table covers every partition). */
PATINA_API patina_status patina_table_save(patina_table_t *t, size_t *changed);

/* Builds a pivot table over the table's rows (PATINA_CAP_PIVOTS families;
 * opts NULL: defaults), stores it with the collection and filters the
 * table's searches through it; pivots 0 in opts drops the stored one. */
PATINA_API patina_status patina_table_build_pivots(patina_table_t *t, const patina_pivot_opts_t *opts);

/* One change of a stream (detached tables): PUT adds or replaces row id
 * with desc (the table's descriptor size, borrowed), REMOVE drops it. */
typedef enum patina_change_op { PATINA_CHANGE_PUT = 0, PATINA_CHANGE_REMOVE = 1 } patina_change_op;
typedef struct patina_change {
    patina_change_op op;
    uint64_t id;          /* >= 1 */
    const char *key;      /* the image's key (PUT: required; decides the partition) */
    const void *desc;     /* PUT: the descriptor, patina_extractor_bytes bytes */
} patina_change_t;

/* Applies n changes in order to a detached table, as one step visible
 * whole to searches; rows whose key is outside the table's partition are
 * skipped (*applied, may be NULL, counts the others). seq becomes the
 * table's version. A change without an id, a key (PUT) or a descriptor
 * (PUT) fails the call before anything changes (PATINA_E_INVALID naming
 * it); a descriptor an engine refuses (a malformed record) fails it there,
 * the changes before it applied and the version not advanced. Tables
 * opened on a collection: PATINA_E_INVALID (write through
 * patina_tables_put). */
PATINA_API patina_status patina_table_apply(patina_table_t *t, const patina_change_t *changes, size_t n,
                                            uint64_t seq, size_t *applied);

#ifdef __cplusplus
}
#endif
#endif
