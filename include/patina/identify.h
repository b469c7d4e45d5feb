/* Identification: which registered item a photograph shows, or none.
 *
 * References are a collection's `rootsift` records (one per image, m
 * features; docs/rootsift.md). A query is a rootsift record extracted with
 * the same spec at the query budget n. For each query and reference: the
 * 2-NN of every query feature among the reference's features, Lowe's ratio
 * test, a score (distinct reference features hit by default), then RANSAC
 * verification of the best candidates (optionally guided matching), a
 * re-ranking by inliers and an open-set decision: MATCH when the rank-1
 * verified score (the a-contrario significance of its inliers by default,
 * opts.accept) reaches the acceptance threshold (calibrated as a
 * false-accept rate: patina_identify_far_threshold; the default is FAR 1%
 * on the identification benchmark), AMBIGUOUS when rank 2 reaches it too
 * with comparable evidence (opts.ambiguity), else UNKNOWN. docs/identify.md has the details and the defaults' reasons.
 *
 * Batch-first and shardable: one call answers many queries against one
 * reference set; a reference set may hold a shard of a collection (ids
 * with id mod shards == shard), and since a candidate's score depends only
 * on the query and that reference, merging the per-shard top-k by (score,
 * matches, id) gives the unsharded answer. */
#ifndef PATINA_IDENTIFY_H
#define PATINA_IDENTIFY_H

#include <stddef.h>
#include <stdint.h>
#include "patina/api.h"
#include "patina/context.h"
#include "patina/descriptor.h"
#include "patina/image.h"
#include "patina/options.h"
#include "patina/status.h"
#include "patina/store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ reference sets */

/* A set of references held in memory: records of one fixed size in ONE
 * contiguous block (record i at records + i * stride, in id order), their
 * ids, and the rootsift spec they were extracted with. Loaded from a
 * collection (the truth), kept up to date with patina_refset_put/_remove
 * when the caller changes the collection: each change is visible to the
 * next patina_identify, on the CPU and in the GPU's copy (which uploads
 * only what changed). Any number of threads may identify against a set at
 * once; put and remove wait for them (a read-write lock). */
typedef struct patina_refset patina_refset_t;

/* Which references to load. */
typedef struct patina_refset_spec {
    /* The rootsift table ("rootsift:m=384,...", as `patina info` lists it);
     * NULL (the default): the collection's only rootsift table (more than
     * one is PATINA_E_INVALID naming them). */
    const char *table;
    /* Shard `shard` of `shards`: the references whose id % shards == shard.
     * Default 0 of 1 (all). */
    uint32_t shard, shards;
    /* Load from this snapshot of the collection (borrowed; so that keys of
     * the ids can be looked up in the same state with patina_snapshot_get);
     * NULL (the default): a snapshot taken for the load. */
    patina_snapshot_t *snapshot;
} patina_refset_spec_t;

PATINA_API void patina_refset_spec_init(patina_refset_spec_t *spec);

/* Loads the references from one snapshot of collection c (spec NULL =
 * defaults). Every record is checked: a malformed one fails the load with
 * PATINA_E_CORRUPT naming its id. A collection without a rootsift table is
 * PATINA_E_NOTFOUND ("has no rootsift table; index with -f rootsift"); a
 * table of f16 records is PATINA_E_UNAVAILABLE (identification matches u8
 * records). An empty table gives an empty set (every query: no candidate).
 * *rs is NULL on failure; free with patina_refset_free. */
PATINA_API patina_status patina_refset_load(patina_refset_t **rs, patina_collection_t *c,
                                            const patina_refset_spec_t *spec);
PATINA_API void patina_refset_free(patina_refset_t *rs); /* accepts NULL */

/* An empty set for records of the rootsift spec `table` (filled with
 * patina_refset_put): for references kept in memory only, or loaded from
 * another store. PATINA_E_INVALID for a spec that is not rootsift. */
PATINA_API patina_status patina_refset_new(patina_refset_t **rs, const char *table);

/* References (items) the set holds, and their rows: with the spec's
 * `views` = V each item is 1 + V rows (its image's record and its views'),
 * which matching scores one by one and folds back into the item. */
PATINA_API size_t patina_refset_size(const patina_refset_t *rs);
PATINA_API size_t patina_refset_rows(const patina_refset_t *rs);
/* The table's spec (owned by rs). */
PATINA_API const char *patina_refset_table(const patina_refset_t *rs);
/* The rows' ids, (rows) non-decreasing (an item's 1 + V rows share its
 * id), and the rows block, (rows, stride) bytes, stride one record of m
 * rows (an item's record is its 1 + V rows); both borrowed from rs, valid
 * until the next put or remove (these calls drop removed slots first). */
PATINA_API const uint64_t *patina_refset_ids(patina_refset_t *rs);
PATINA_API const void *patina_refset_records(patina_refset_t *rs, size_t *stride);

/* Adds reference `id` (>= 1) with its record, or replaces the record of an
 * id the set holds (an update: the same id, new content): all its rows at
 * once (with views, the record is 1 + V records end to end), seen whole or
 * not at all by an identify call. The record is
 * copied and checked: a malformed one is PATINA_E_CORRUPT, one of another
 * spec (m, quant, size) PATINA_E_INVALID; nothing changes then. Use it
 * with patina_collection_put, which keeps ids: the set then matches the
 * collection. */
PATINA_API patina_status patina_refset_put(patina_refset_t *rs, uint64_t id, const void *record, size_t bytes);
/* Removes reference `id` (every row of it); PATINA_E_NOTFOUND when the set does not hold it. */
PATINA_API patina_status patina_refset_remove(patina_refset_t *rs, uint64_t id);

/* What a reference costs and how many fit, for a rootsift table spec. */
typedef struct patina_identify_capacity {
    size_t features;      /* feature rows per record (the spec's m) */
    size_t record_bytes;  /* bytes per reference in host memory (its record: rows and geometry, of
                           * the image and of each view) */
    size_t gpu_bytes;     /* bytes per reference in the GPU's arena (int8 rows padded to 8 rows, per
                           * matched row) */
    size_t gpu_refs;      /* references the context's GPU memory budget holds now; 0 without a GPU */
    size_t host_refs;     /* references the host's available memory holds as records */
    size_t rows;          /* matched rows per reference: 1 + the spec's views (the matching time and
                           * the GPU's slots grow with them) */
} patina_identify_capacity_t;

/* Fills cap for table (a rootsift spec) on ctx (NULL: no GPU counted). The
 * GPU figure is the budget's room now (patina_context_opts_t.gpu_mem_budget;
 * other families' caches are released when identification needs the room);
 * references past it are streamed from pinned host memory. */
PATINA_API patina_status patina_identify_capacity(patina_context_t *ctx, const char *table,
                                                  patina_identify_capacity_t *cap);

/* ------------------------------------------------------------------ queries */

/* Bytes of one query record: a rootsift record of n rows (the spec's n). */
PATINA_API size_t patina_identify_query_bytes(const patina_refset_t *rs);

/* Extracts query records from nq decoded images with the reference set's
 * spec at the query budget n, in parallel on ctx's workers (ctx NULL: a
 * pool of all CPUs for the call). out: (nq, patina_identify_query_bytes)
 * caller memory. st (nq, may be NULL) receives each image's status; the
 * call itself fails only for bad arguments or memory, and an image that
 * fails gets a zero-feature record. A flat image gives a valid record with
 * no features. */
PATINA_API patina_status patina_identify_extract(patina_context_t *ctx, const patina_refset_t *rs, void *out,
                                                 const patina_image_t *images, size_t nq,
                                                 patina_status *st);

/* The half-size query (docs/identify.md "The half-size query"): a
 * photograph taken closer than its reference's (magnified) meets the
 * registered image at about its scale once halved. Extracts, as
 * patina_identify_extract does, the records of the nq images each halved
 * (area average to round(W/2) x round(H/2), no blur); out and st as there.
 * Match them with patina_identify (or patina_table_identify) using
 * patina_identify_half_opts, then patina_identify_fuse_half. */
PATINA_API patina_status patina_identify_extract_half(patina_context_t *ctx, const patina_refset_t *rs, void *out,
                                                      const patina_image_t *images, size_t nq,
                                                      patina_status *st);

/* ------------------------------------------------------------------ matching */

typedef enum patina_identify_scoring {
    PATINA_SCORE_ONE2ONE = 0, /* distinct reference features hit (default) */
    PATINA_SCORE_RAW = 1,     /* query features passing the ratio test (the paper's) */
    PATINA_SCORE_MUTUAL = 2   /* one-to-one restricted to mutual nearest neighbours */
} patina_identify_scoring;

typedef enum patina_identify_model {
    PATINA_MODEL_SIMILARITY = 0, /* rotation, uniform scale, translation: 2-point samples (default) */
    PATINA_MODEL_AFFINE = 1,     /* 3-point samples */
    PATINA_MODEL_HOMOGRAPHY = 2  /* 4-point samples, normalised DLT */
} patina_identify_model;

typedef enum patina_identify_decision {
    PATINA_DECISION_UNKNOWN = 0, /* no candidate reaches the threshold, or no query features */
    PATINA_DECISION_MATCH = 1,   /* rank 1 is accepted */
    PATINA_DECISION_AMBIGUOUS = 2 /* ranks 1 and 2 are both verified and reach the threshold, and rank 2
                                   * holds at least `ambiguity` times rank 1's score: the query shows
                                   * content of both (items that share photographed content); the two
                                   * keys are hits 0 and 1 (k >= 2) */
} patina_identify_decision;

/* What the acceptance threshold is compared with (opts.accept). */
typedef enum patina_identify_accept {
    PATINA_ACCEPT_SIGNIFICANCE = 0, /* a-contrario significance -log10 NFA of the verified inliers (default) */
    PATINA_ACCEPT_INLIERS = 1       /* the verified inlier count (the rule before 2026-11-30) */
} patina_identify_accept;

typedef enum patina_identify_precision {
    PATINA_PRECISION_INT8 = 0, /* u8 x u8 -> s32 tensor cores on the stored rows */
    PATINA_PRECISION_FP16 = 1  /* f16 x f16 -> f32 tensor cores on the same values (an f16 copy) */
} patina_identify_precision;

typedef struct patina_identify_opts {
    size_t k;                 /* candidates per query (5); 0 is PATINA_E_INVALID; more than
                               * the references is clamped to their number */
    double ratio;             /* Lowe's ratio, in (0, 1] (0.8) */
    patina_identify_scoring scoring; /* ONE2ONE */
    int verify;               /* RANSAC-verify the top candidates (1) */
    size_t verify_top;        /* how many candidates are verified (10); 0 = none */
    patina_identify_model model; /* SIMILARITY */
    double ransac_threshold;  /* inlier distance, as a fraction of the reference image's longer
                               * side in its original pixels (0.01: 10 px on 1024) */
    int iterations;           /* RANSAC iteration cap (1000); adaptive stopping at 0.999 */
    int shape_check;          /* 1 (default): an inlier's keypoints must also agree with the model in
                               * scale (within x1.5) and orientation (within 30 degrees) */
    uint64_t seed;            /* RANSAC seed (0); results are deterministic for a seed */
    double threshold;         /* acceptance: rank-1 score >= threshold -> MATCH (in the unit of
                               * `accept` when verified, else in matches). Default
                               * PATINA_THRESHOLD_CALIBRATED (-1): the references' own calibration
                               * for `accept` at FAR 1% on bench/identify, resolved by the call from
                               * their spec (patina_identify_far_threshold_opts) and reported in
                               * patina_identify_result_t.threshold */
    patina_device device;     /* AUTO (the GPU when the context has a usable one and the table is
                               * u8, else the CPU), CPU or GPU: the same candidates either way */
    patina_identify_precision precision; /* GPU tensor cores: INT8 (default) or FP16; exact either way */
    size_t gpu_arena_slots;   /* GPU: references kept on the device at most (0: as many as the
                               * context's GPU memory budget holds; the rest streams from pinned
                               * host memory) */
    int guided;               /* 1: after RANSAC, match again inside the neighbourhoods the model
                               * predicts (looser ratio, one-to-one) and verify those
                               * correspondences; kept when they give more inliers (0: off, the
                               * default: on the benchmark it lifts content-sharing impostors more
                               * than weak genuine queries; docs/identify.md) */
    double guided_ratio;      /* the guided matches' ratio test, in (0, 1] (0.9) */
    double ambiguity;         /* the margin of AMBIGUOUS, in [0, 1] (0.5): a verified rank 2 of another
                               * item that reaches the threshold makes the answer AMBIGUOUS when its
                               * score is >= ambiguity x rank 1's, else rank 1 is the MATCH; 0: whenever
                               * it reaches the threshold (the rule before this option). The
                               * false-accept rate does not depend on it (an impostor answered
                               * AMBIGUOUS is accepted as much as one answered MATCH) */
    double distinct;          /* the distinctness margin D (0: off, the default): rank 1 is accepted only
                               * when its score exceeds the verified rank 2's by at least D, rank 2
                               * counting 0 when its reference and rank 1's are siblings -- one's
                               * image record verifies against the other's rows with at least
                               * sibling_inliers inliers, checked on the references themselves
                               * (no query involved; only for the queries the margin would reject).
                               * A query that fails the margin is UNKNOWN. On the identification
                               * benchmark (views=2) threshold 4 with distinct 3 rejects 2.75% of
                               * genuine queries at FAR 0.57%, against 4.0% for the threshold alone
                               * (docs/identify.md). Merging parts' answers needs the references
                               * fetched: patina_identify_merge_siblings (patina_identify_merge
                               * refuses it), as a cluster's front end does */
    double sibling_inliers;   /* S of `distinct`, >= 1 (13: PATINA_SIBLING_INLIERS_DEFAULT) */
    patina_identify_accept accept; /* SIGNIFICANCE (default): a verified candidate's score is the
                               * a-contrario significance of its inliers, -log10 NFA with
                               * NFA = (n - s) C(n, k) C(k, s) alpha^(k - s) for k inliers among n
                               * correspondences, s the model's sample size and alpha the chance that
                               * a point of the reference falls within the inlier distance of where
                               * the model maps it (pi r^2 / the reference's area), clipped at 0:
                               * k inliers out of few correspondences (a small query) weigh more than
                               * k out of many (an impostor's chance draws). INLIERS: the count */
    size_t view_candidates;   /* references with views (spec views > 0): 0 (default) matches every row
                               * of every item; N > 0 matches the items' first rows (the registered
                               * image), then the other rows of the best N items by those, each item
                               * folded into its best row as before. Matching costs one row per item
                               * instead of 1 + views (on the GPU, a copy of the first rows only),
                               * and an item whose first row ranks below N is not rescued by its
                               * views (docs/identify.md, "Reference views"). No effect without views */
    size_t first_features;    /* 0 (default): queries are matched with all their features. F > 0: the
                               * first pass over every reference matches each query's F strongest
                               * features only (a record's rows are strongest first), then its best
                               * max(k, verify_top, view_candidates) candidates are matched again with
                               * all of them -- every row of their items, views included -- and
                               * ordered by those matches before verification. Matching costs about
                               * F / n of the full pass (the GPU's time is linear in the query's
                               * rows); a reference whose F-feature matches rank below the candidates
                               * is not rescued (docs/identify.md, "The first pass's features") */
    size_t half_view_features; /* the view pass (view_candidates > 0) over references whose views hold
                               * the half-size view (spec views 1 or 3): 0 (default) ranks the items
                               * by their first rows alone; H > 0 also matches each item's half-size
                               * view with the query's H strongest features in the first pass, the
                               * item ranked by the better of the two rows, so that a query taken
                               * at about half the scale finds its item among the candidates.
                               * The first pass reads the half-size views too (on one H200 about
                               * 17 ms more at a million items with H = 64) and the GPU keeps a copy
                               * of them beside the first rows'. PATINA_E_INVALID for
                               * references without a half-size view; no effect without the view
                               * pass (every row is matched then) (docs/identify.md, "The half-size
                               * view in the first pass") */
} patina_identify_opts_t;

/* Fills opts with the defaults above (the table of include/patina/options.h,
 * set PATINA_OPTIONS_IDENTIFY: every bound and default is declared there).
 * patina_identify and patina_identify_pairs check opts against that table:
 * PATINA_E_INVALID naming the option, PATINA_E_LIMIT for k or verify_top
 * over PATINA_K_MAX. */
PATINA_API void patina_identify_opts_init(patina_identify_opts_t *opts);

/* "unknown", "match" or "ambiguous" (the CLI's and the server's words); NULL
 * for another value. */
PATINA_API const char *patina_identify_decision_name(patina_identify_decision d);

/* The acceptance threshold for a target false-accept rate: the smallest
 * rank-1 score (the default rule's: the significance) at which at most
 * `far` of the impostor queries of the identification benchmark
 * (bench/identify, clean impostors, the default options;
 * docs/identify-bench.md) were accepted, for references without views. far in
 * [PATINA_FAR_MIN, 1]: 1 gives 0 (every query with a candidate is
 * accepted); below PATINA_FAR_MIN the benchmark cannot tell (no impostor
 * accepted is all it measures): PATINA_E_INVALID. The default threshold is
 * the one for far = 0.01. */
PATINA_API patina_status patina_identify_far_threshold(double far, double *threshold);
/* The same for references of the rootsift spec `table`: its reference
 * views (the spec's `views`) have a calibration of their own (more rows
 * per item give impostors more chances; docs/identify.md).
 * views = 0 gives patina_identify_far_threshold's. PATINA_E_INVALID for a
 * spec that is not rootsift. */
PATINA_API patina_status patina_identify_far_threshold_table(const char *table, double far, double *threshold);
/* The same for the acceptance rule opts->accept (opts NULL: the default,
 * significance) and, with views, the view pass (opts->view_candidates > 0
 * has a significance table of its own); table NULL: references without
 * views. */
PATINA_API patina_status patina_identify_far_threshold_opts(const char *table, const patina_identify_opts_t *opts,
                                                            double far, double *threshold);
/* The same with the half-size query beside (patina_identify_fuse_half at
 * PATINA_HALF_QUERY_MARGIN): the calibrated settings (significance; no
 * reference views, or views 3 with the view pass and half_view_features)
 * take the stricter of their own run's row and the options' (views 3: at
 * FAR 0.1% 20.47 against 20; no views: 3.03 against 3 at 1%); every other
 * setting the options' row (not calibrated with the half-size query). */
PATINA_API patina_status patina_identify_far_threshold_half(const char *table, const patina_identify_opts_t *opts,
                                                            double far, double *threshold);

/* One candidate of a query. */
typedef struct patina_identify_hit {
    uint64_t id;       /* the reference's image id */
    double score;      /* the decision's score: when verified, the significance of its inliers
                        * (opts.accept SIGNIFICANCE) or their count (INLIERS); else matches.
                        * Hits are ranked by inliers, not by it */
    uint32_t matches;  /* the scoring rule's count */
    uint32_t inliers;  /* RANSAC inliers (0 when not verified) */
    int verified;      /* 1 when RANSAC ran on this candidate */
} patina_identify_hit_t;

/* The answer for one query. */
typedef struct patina_identify_result {
    patina_identify_decision decision;
    size_t nhits;            /* hits written, <= k */
    uint32_t query_features; /* features of the query record */
    double threshold;        /* the acceptance threshold the decision applied (the default resolved) */
} patina_identify_result_t;

/* Identifies nq queries (records of patina_identify_query_bytes, (nq, that)
 * row-major) against rs. hits: (nq, k) caller memory, query q's candidates
 * at hits[q * k ...], best first: the verified candidates (the top
 * verify_top by matches) by inliers, then matches, then id; then the
 * others by matches, then id; candidates with 0 matches are not listed.
 * Slots past results[q].nhits are zeroed. results: (nq) caller memory.
 * A query without features gets nhits 0 and UNKNOWN (not an error).
 * PATINA_E_INVALID for k = 0, bad options or null pointers;
 * PATINA_E_CORRUPT for a malformed query record (naming its index);
 * device GPU: PATINA_E_UNAVAILABLE without a usable GPU in ctx or for data
 * its kernels do not take (f16 tables; more than 1024 candidates), and
 * PATINA_E_INVALID with ctx NULL. ctx NULL: a pool of all CPUs for the
 * call (and the CPU). nq = 0 does nothing. */
PATINA_API patina_status patina_identify(patina_context_t *ctx, patina_refset_t *rs, const void *queries,
                                         size_t nq, const patina_identify_opts_t *opts,
                                         patina_identify_hit_t *hits, patina_identify_result_t *results);

/* The half-size query's margin by default: its answer replaces the query's
 * when its rank-1 score less this is larger (without a margin every
 * impostor would get a second chance at the threshold; on the
 * identification benchmark every margin from 6 to 15 gives the same
 * figures, docs/identify-bench.md). */
#define PATINA_HALF_QUERY_MARGIN 10.0

/* The options of the half-size queries' call from the queries' (*out from
 * *opts, NULL: the defaults): the first pass with their `features`
 * strongest (first_features; 0 keeps opts'), no half-size views (a half of
 * a half), everything else as opts. PATINA_E_INVALID for a null out. */
PATINA_API patina_status patina_identify_half_opts(const patina_identify_opts_t *opts, size_t features,
                                                   patina_identify_opts_t *out);

/* Fuses the half-size queries' answers (half_hits (nq, k), half_results
 * (nq): patina_identify with patina_identify_half_opts) into the queries'
 * (hits, results, in place; the same k): per query, when the half-size
 * query's rank-1 score less margin (>= 0) is larger than the query's, its
 * hits replace the query's with every score less margin (at least 0), and
 * the decision is made again on those scores (results[q].threshold and
 * opts' ambiguity; an UNKNOWN of the half-size query's stays UNKNOWN: the
 * distinctness rule's veto). taken (nq, may be NULL): 1 where the
 * half-size query's answer was taken, else 0. opts NULL: the defaults. */
PATINA_API patina_status patina_identify_fuse_half(size_t nq, size_t k, double margin,
                                                   const patina_identify_opts_t *opts, patina_identify_hit_t *hits,
                                                   patina_identify_result_t *results,
                                                   const patina_identify_hit_t *half_hits,
                                                   const patina_identify_result_t *half_results,
                                                   unsigned char *taken);

/* patina_identify with the half-size query beside: the queries with opts,
 * their half-size queries (half_queries (nq), patina_identify_extract_half)
 * with patina_identify_half_opts(opts, half_features), then
 * patina_identify_fuse_half with margin (taken as there, may be NULL).
 * The calibrated default threshold (opts->threshold
 * PATINA_THRESHOLD_CALIBRATED) is patina_identify_far_threshold_half's at
 * PATINA_FAR_DEFAULT for rs's spec. With a first pass on the strongest
 * features (opts->first_features > 0) both go through one call, and on an
 * H200-class GPU (int8, one2one or raw scoring) each query and its
 * half-size query share one pass over the references: the same answers
 * as the two calls, for about the cost of the query's rows plus the
 * half-size query's arithmetic. */
PATINA_API patina_status patina_identify_half(patina_context_t *ctx, patina_refset_t *rs, const void *queries,
                                              const void *half_queries, size_t nq, size_t half_features,
                                              double margin, const patina_identify_opts_t *opts,
                                              patina_identify_hit_t *hits, patina_identify_result_t *results,
                                              unsigned char *taken);

/* Identification over disjoint parts of the references (GPU slices,
 * partitions, a cluster's shards): ask every part with the same options
 * but k = patina_identify_part_k(opts) (max(k, verify_top) when verifying),
 * then patina_identify_merge gives exactly the answer of one call over the
 * union (opts->k hits, the same order, scores, inliers and decision).
 * part_hits[p] is (nq, patina_identify_part_k(opts)), part_results[p] is
 * (nq); hits (nq, opts->k) and results (nq) are caller memory. A part that
 * lists more candidates than part_k, or leaves one of the union's best
 * verify_top unverified (asked with other options), is PATINA_E_INVALID.
 * The merge decides with opts->threshold as a number: the calibrated
 * default (PATINA_THRESHOLD_CALIBRATED, opts NULL too) depends on the
 * parts' table, which it does not know, and is PATINA_E_INVALID; give that
 * table's (patina_identify_far_threshold_table(spec, 0.01)). */
PATINA_API size_t patina_identify_part_k(const patina_identify_opts_t *opts);
PATINA_API patina_status patina_identify_merge(const patina_identify_hit_t *const *part_hits,
                                               const patina_identify_result_t *const *part_results, size_t np,
                                               size_t nq, const patina_identify_opts_t *opts,
                                               patina_identify_hit_t *hits, patina_identify_result_t *results);

/* opts.distinct's sibling check for a merge, whose parts carry no rows:
 * asked only for the queries the margin would otherwise reject, with the
 * ids of the merged ranks 1 and 2 of query `query`; sets *inliers to what
 * patina_identify_siblings gives for the two references (the merge
 * compares it with opts.sibling_inliers). A failure fails the merge. */
typedef patina_status (*patina_sibling_fn)(void *user, size_t query, uint64_t a, uint64_t b, size_t *inliers);

/* patina_identify_merge with opts.distinct applied through `sibling`
 * (the caller fetches the two references, e.g. a cluster's front end from
 * their partitions). patina_identify_merge is this with sibling NULL, and
 * refuses distinct > 0 (PATINA_E_INVALID). */
PATINA_API patina_status patina_identify_merge_siblings(const patina_identify_hit_t *const *part_hits,
                                                        const patina_identify_result_t *const *part_results,
                                                        size_t np, size_t nq, const patina_identify_opts_t *opts,
                                                        patina_sibling_fn sibling, void *user,
                                                        patina_identify_hit_t *hits,
                                                        patina_identify_result_t *results);

/* The sibling check of opts.distinct on references a and b of rs: each
 * one's image record (its item's first row) verified against the other's
 * rows with opts' matching and verification options; *inliers receives the
 * larger count (siblings when it reaches opts->sibling_inliers).
 * PATINA_E_NOTFOUND when rs does not hold both; opts NULL: the defaults. */
PATINA_API patina_status patina_identify_siblings(patina_refset_t *rs, uint64_t a, uint64_t b,
                                                  const patina_identify_opts_t *opts, size_t *inliers);

/* The verified keypoint pairs of one candidate, for drawing: repeats the
 * matching and RANSAC verification of patina_identify for query record
 * `query` (patina_identify_query_bytes, as passed to patina_identify) and
 * reference `id` with the same options (the same seed, hence the same
 * inliers: for a verified hit, *n equals its `inliers`), whether or not
 * patina_identify verified that candidate. pairs: (cap, 4) floats, caller
 * memory, each inlier as (query x, query y, reference x, reference y) in
 * the pixels of the images the records were extracted from, in query
 * feature order; *n receives the number of inliers, which may exceed cap
 * (only the first cap are written; cap 0 just counts). Runs on the CPU in
 * the calling thread. PATINA_E_NOTFOUND when rs does not hold id;
 * PATINA_E_INVALID for null pointers or bad options; PATINA_E_CORRUPT for
 * a malformed query record. */
PATINA_API patina_status patina_identify_pairs(patina_refset_t *rs, const void *query, uint64_t id,
                                               const patina_identify_opts_t *opts, float *pairs, size_t cap,
                                               size_t *n);

#ifdef __cplusplus
}
#endif
#endif
