/* The options of search, identification and indexing, declared once.
 *
 * Each option of patina_search_opts_t (and the k and radius arguments of
 * the search calls), patina_identify_opts_t and patina_index_opts_t that a
 * front end exposes has one entry in a table of the library: its name,
 * type, bounds, default and help, read with patina_options_get in the same
 * patina_option_info_t that describes the families' options. The _init
 * functions fill the structs from that table, the library validates the
 * structs against it (a value out of bounds fails naming the option), and
 * the front ends take their bounds and defaults from it: the CLI's flags
 * (`patina search --help` shows these bounds), the server's parameters and
 * its OpenAPI document, the Python binding's keyword defaults (tested).
 *
 * The limits below are the bounds of that table, as constants for code
 * that needs them at compile time (array sizes, option tables). */
#ifndef PATINA_OPTIONS_H
#define PATINA_OPTIONS_H

#include <stddef.h>
#include "patina/api.h"
#include "patina/descriptor.h"
#include "patina/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ limits */

/* k of a k-NN search (patina_index_knn, patina_pivot_index_knn) and the
 * candidates per query of identification (patina_identify_opts_t.k):
 * 1 .. PATINA_K_MAX; more is PATINA_E_LIMIT. */
#define PATINA_K_MAX 1000000
/* Lowe's ratio (patina_identify_opts_t.ratio, patina_search_opts_t.ratio):
 * > PATINA_RATIO_MIN (excluded) and <= PATINA_RATIO_MAX. */
#define PATINA_RATIO_MIN 0.0
#define PATINA_RATIO_MAX 1.0
/* RANSAC iteration cap (patina_identify_opts_t.iterations): 1 .. this. */
#define PATINA_ITERATIONS_MAX 1000000
/* The acceptance threshold (patina_identify_opts_t.threshold): 0 .. this. */
#define PATINA_THRESHOLD_MAX 1e9
/* Images per indexing batch (patina_index_opts_t.batch): 1 .. this. */
#define PATINA_BATCH_MAX 65536
/* Bytes of images the indexing pipeline holds (patina_index_opts_t.batch_memory): 1 .. this (1 PiB). */
#define PATINA_BATCH_MEMORY_MAX 1125899906842624.0

/* Defaults of the numeric options, for C code that needs them as numbers
 * (the server's parameters) or as text (PATINA_STRINGIFY: the CLI's option
 * tables). The table's defaults are these, spelled by PATINA_STRINGIFY. */
#define PATINA_SEARCH_K_DEFAULT 10
#define PATINA_IDENTIFY_K_DEFAULT 5
#define PATINA_RATIO_DEFAULT 0.8
#define PATINA_VERIFY_TOP_DEFAULT 10
#define PATINA_RANSAC_THRESHOLD_DEFAULT 0.01
#define PATINA_ITERATIONS_DEFAULT 1000
/* The acceptance threshold of a set without reference views at a false-accept
 * rate of 1% with accept = INLIERS (inliers). */
#define PATINA_THRESHOLD_DEFAULT 13
/* The same with accept = SIGNIFICANCE, the default (-log10 NFA):
 * patina_identify_far_threshold(0.01). */
#define PATINA_SIGNIFICANCE_DEFAULT 3
/* ... for a set of reference views = 1, 2 and 3. */
#define PATINA_SIGNIFICANCE_VIEWS1 3.9
#define PATINA_SIGNIFICANCE_VIEWS2 2.5
#define PATINA_SIGNIFICANCE_VIEWS3 3
/* patina_identify_opts_t.threshold's default: the calibration of the
 * references' own table for the acceptance rule (opts.accept) at a false-accept
 * rate of 1%, resolved by the call. Any other negative value is
 * PATINA_E_INVALID. */
#define PATINA_THRESHOLD_CALIBRATED (-1.0)
/* The false-accept rate of that default. */
#define PATINA_FAR_DEFAULT 0.01
#define PATINA_GUIDED_RATIO_DEFAULT 0.9
/* patina_identify_opts_t.ambiguity's default: a verified rank 2 of another
 * item makes the answer AMBIGUOUS only when it holds at least half rank 1's
 * inliers (docs/identify-bench.md, "The ambiguity margin"). */
#define PATINA_AMBIGUITY_DEFAULT 0.5
/* patina_identify_opts_t.sibling_inliers' default: two references are
 * siblings (photographs of shared content) when one's record verifies
 * against the other's rows with at least this many inliers; 13 is the
 * calibrated threshold of a table without views, inside the range (4 .. 13)
 * where the benchmark's answers do not change (docs/lab/identify.md,
 * "siblings found among the references themselves"). */
#define PATINA_SIBLING_INLIERS_DEFAULT 13
/* The smallest false-accept rate patina_identify_far_threshold takes (one
 * impostor query in the benchmark's 373 is 0.27%; none accepted is < 0.27%). */
#define PATINA_FAR_MIN 0.001
#define PATINA_BATCH_DEFAULT 256

/* A macro's value as a string literal: PATINA_STRINGIFY(PATINA_RATIO_DEFAULT) is "0.8". */
#define PATINA_STRINGIFY_(x) #x
#define PATINA_STRINGIFY(x) PATINA_STRINGIFY_(x)

/* ------------------------------------------------------------------ tables */

typedef enum patina_option_set {
    PATINA_OPTIONS_SEARCH = 0, /* k, range (arguments of the search calls), max_hits, device, ratio */
    PATINA_OPTIONS_IDENTIFY,   /* patina_identify_opts_t */
    PATINA_OPTIONS_INDEX       /* patina_index_opts_t */
} patina_option_set;

/* The name of a set ("search", "identify", "index"); NULL out of range. */
PATINA_API const char *patina_option_set_name(patina_option_set set);

/* Options of a set: 0 for an out-of-range set. Names are the structs' field
 * names (verify_top); the CLI writes them with '-' (--verify-top). */
PATINA_API size_t patina_options_count(patina_option_set set);

/* Option i (< patina_options_count(set)) into info (caller storage); every
 * string is static. `def` is NULL for an option with no default (search's
 * range: not a range search unless given). PATINA_E_INVALID for an
 * out-of-range set or index. */
PATINA_API patina_status patina_options_get(patina_option_info_t *info, patina_option_set set, size_t i);

/* The option called `name` into info; PATINA_E_NOTFOUND when the set has
 * none (info is zeroed then). */
PATINA_API patina_status patina_options_find(patina_option_info_t *info, patina_option_set set, const char *name);

/* Checks one numeric value of option `name` against its declared bounds:
 * PATINA_OK; PATINA_E_LIMIT over the maximum of a limit (k: "search: k =
 * 1000001 is over the limit of 1000000"); otherwise PATINA_E_INVALID for a
 * value out of bounds (NaN included), naming the option and its bounds
 * ("identify: ratio = 0 is outside (0, 1]"), or for a name the set does
 * not hold or an option that is not INT or DOUBLE. The one check the
 * library's calls run on their options, for front ends that check a value
 * before they build a struct. */
PATINA_API patina_status patina_options_check(patina_option_set set, const char *name, double value);

#ifdef __cplusplus
}
#endif
#endif
