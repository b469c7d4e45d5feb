/* The declaration tables of the search, identification and indexing options
 * (include/patina/options.h): one entry per option, with the struct field
 * it fills (if any). The _init functions, the library's validation of the
 * structs and the public listing all read these tables; nothing else in
 * the library writes a default or a bound of these options. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "patina/identify.h"
#include "patina/options.h"
#include "patina/pipeline.h"
#include "patina/search.h"

/* How an option is stored in its struct. */
typedef enum field {
    FLD_NONE = 0, /* not a field: an argument of the calls (search's k and range) */
    FLD_SIZE,     /* size_t */
    FLD_INT,      /* int (BOOL too) */
    FLD_U64,      /* uint64_t */
    FLD_DOUBLE,   /* double */
    FLD_ENUM      /* an enum, int-sized: the index of the word in `choices` */
} field_t;

_Static_assert(sizeof(patina_device) == sizeof(int) && sizeof(patina_identify_scoring) == sizeof(int) &&
                   sizeof(patina_identify_model) == sizeof(int) &&
                   sizeof(patina_identify_precision) == sizeof(int) && sizeof(patina_jpeg_decoder) == sizeof(int),
               "FLD_ENUM reads enums as int");

typedef struct entry {
    patina_option_info_t info;
    field_t field;
    size_t offset;
    int limit;        /* over max: PATINA_E_LIMIT (a resource limit), not PATINA_E_INVALID */
    int sentinel;     /* ZERO_DEFAULT: 0 in the struct stands for the default; NEG_DEFAULT: -1 does (both
                       * documented in the struct); 0: no such value */
} entry_t;
enum { ZERO_DEFAULT = 1, NEG_DEFAULT = 2 };

#define STR PATINA_STRINGIFY
/* The largest integer every front end reads exactly (a double's 53 bits). */
#define EXACT_MAX 9007199254740992.0
/* size_t and uint64_t fields with no bound of their own. */
#define U64_MAX_D 18446744073709551615.0

#define OPT_INT(nm, lo, hi, d, h) {.name = nm, .type = PATINA_OPTION_INT, .min = lo, .max = hi, .def = d, .help = h}
#define OPT_DBL(nm, lo, hi, open, d, h)                                                                        \
    {.name = nm, .type = PATINA_OPTION_DOUBLE, .min = lo, .max = hi, .min_open = open, .def = d, .help = h}
#define OPT_BOOL(nm, d, h) {.name = nm, .type = PATINA_OPTION_BOOL, .def = d, .help = h}
#define OPT_ENUM(nm, ch, d, h) {.name = nm, .type = PATINA_OPTION_ENUM, .def = d, .choices = ch, .help = h}

#define S_OFF(f) offsetof(patina_search_opts_t, f)
static const entry_t search_opts[] = {
    {OPT_INT("k", 1, PATINA_K_MAX, STR(PATINA_SEARCH_K_DEFAULT), "the k nearest (a k-NN search)"), FLD_NONE, 0, 1,
     0},
    {OPT_DBL("range", 0, INFINITY, 0, NULL, "every row at distance <= range (a range search, instead of k-NN)"),
     FLD_NONE, 0, 0, 0},
    {OPT_INT("max_hits", 0, EXACT_MAX, "0", "range search: at most this many hits per query, the nearest (0: all)"),
     FLD_SIZE, S_OFF(max_hits), 0, 0},
    {OPT_ENUM("device", "auto|cpu|gpu", "auto",
              "where the search runs: auto (the GPU when usable and worth it), cpu, gpu (or fail)"),
     FLD_ENUM, S_OFF(device), 0, 0},
    {OPT_DBL("ratio", PATINA_RATIO_MIN, PATINA_RATIO_MAX, 1, STR(PATINA_RATIO_DEFAULT),
             "the rootsift_ratio distance: Lowe's ratio of its matcher (other distances ignore it)"),
     FLD_DOUBLE, S_OFF(ratio), 0, 0},
};

#define I_OFF(f) offsetof(patina_identify_opts_t, f)
static const entry_t identify_opts[] = {
    {OPT_INT("k", 1, PATINA_K_MAX, STR(PATINA_IDENTIFY_K_DEFAULT),
             "candidates per query (more than the references: all of them)"),
     FLD_SIZE, I_OFF(k), 1, 0},
    {OPT_DBL("ratio", PATINA_RATIO_MIN, PATINA_RATIO_MAX, 1, STR(PATINA_RATIO_DEFAULT),
             "Lowe's ratio test: a query feature matches when its nearest reference feature is closer than "
             "ratio times the second nearest"),
     FLD_DOUBLE, I_OFF(ratio), 0, 0},
    {OPT_ENUM("scoring", "one2one|raw|mutual", "one2one",
              "candidate score: distinct reference features hit (one2one), query features passing the ratio "
              "test (raw), or one2one of mutual nearest neighbours"),
     FLD_ENUM, I_OFF(scoring), 0, 0},
    {OPT_BOOL("verify", "1", "RANSAC-verify the best candidates"), FLD_INT, I_OFF(verify), 0, 0},
    {OPT_INT("verify_top", 0, PATINA_K_MAX, STR(PATINA_VERIFY_TOP_DEFAULT),
             "how many candidates (the best by matches) are verified"),
     FLD_SIZE, I_OFF(verify_top), 1, 0},
    {OPT_ENUM("model", "similarity|affine|homography", "similarity", "RANSAC model from query to reference keypoints"),
     FLD_ENUM, I_OFF(model), 0, 0},
    {OPT_DBL("ransac_threshold", 0, 1, 1, STR(PATINA_RANSAC_THRESHOLD_DEFAULT),
             "inlier distance as a fraction of the reference image's longer side"),
     FLD_DOUBLE, I_OFF(ransac_threshold), 0, 0},
    {OPT_INT("iterations", 1, PATINA_ITERATIONS_MAX, STR(PATINA_ITERATIONS_DEFAULT),
             "RANSAC iteration cap (adaptive stopping at 99.9% confidence)"),
     FLD_INT, I_OFF(iterations), 0, 0},
    {OPT_BOOL("shape_check", "1", "inliers must also agree with the model in keypoint scale and orientation"),
     FLD_INT, I_OFF(shape_check), 0, 0},
    {OPT_INT("seed", 0, U64_MAX_D, "0", "RANSAC seed (results are deterministic for a seed)"), FLD_U64,
     I_OFF(seed), 0, 0},
    /* no default value: the default (PATINA_THRESHOLD_CALIBRATED, -1 in the struct) is the references'
     * table's calibration at a false-accept rate of 1%, which the call resolves */
    {OPT_DBL("threshold", 0, PATINA_THRESHOLD_MAX, 0, NULL,
             "accept rank 1 when its score (see accept; matches when not verified) is >= threshold (default: the "
             "references' calibration for accept at a false-accept rate of 1%)"),
     FLD_DOUBLE, I_OFF(threshold), 0, NEG_DEFAULT},
    {OPT_ENUM("device", "auto|cpu|gpu", "auto", "where matching runs: auto (the GPU when usable), cpu, gpu"),
     FLD_ENUM, I_OFF(device), 0, 0},
    {OPT_ENUM("precision", "int8|fp16", "int8", "GPU tensor cores: int8 (the stored rows) or fp16; exact either way"),
     FLD_ENUM, I_OFF(precision), 0, 0},
    {OPT_INT("gpu_arena_slots", 0, U64_MAX_D, "0",
             "GPU: references kept on the device at most (0: as many as the memory budget holds)"),
     FLD_SIZE, I_OFF(gpu_arena_slots), 0, 0},
    {OPT_BOOL("guided", "0",
              "after RANSAC, match again inside the neighbourhoods its model predicts (guided_ratio, one-to-one) "
              "and verify those; kept when they give more inliers"),
     FLD_INT, I_OFF(guided), 0, 0},
    {OPT_DBL("guided_ratio", PATINA_RATIO_MIN, PATINA_RATIO_MAX, 1, STR(PATINA_GUIDED_RATIO_DEFAULT),
             "the guided matches' ratio test: the nearest reference feature inside the predicted neighbourhood "
             "must be closer than this times the nearest one elsewhere"),
     FLD_DOUBLE, I_OFF(guided_ratio), 0, 0},
    {OPT_DBL("ambiguity", 0, 1, 0, STR(PATINA_AMBIGUITY_DEFAULT),
             "answer ambiguous (both keys) only when the verified rank 2 of another item reaches the threshold "
             "and holds at least this fraction of rank 1's score; 0: whenever it reaches the threshold"),
     FLD_DOUBLE, I_OFF(ambiguity), 0, 0},
    {OPT_DBL("distinct", 0, PATINA_THRESHOLD_MAX, 0, "0",
             "accept rank 1 only when its score exceeds the verified rank 2's by at least this margin, rank 2 "
             "counting 0 when the two references are siblings (sibling_inliers); 0: off"),
     FLD_DOUBLE, I_OFF(distinct), 0, 0},
    {OPT_DBL("sibling_inliers", 1, PATINA_THRESHOLD_MAX, 0, STR(PATINA_SIBLING_INLIERS_DEFAULT),
             "distinct: two references are siblings when one's record verifies against the other's rows with "
             "at least this many inliers"),
     FLD_DOUBLE, I_OFF(sibling_inliers), 0, 0},
    {OPT_ENUM("accept", "significance|inliers", "significance",
              "what the threshold is compared with: the a-contrario significance of rank 1's inliers "
              "(-log10 of the expected number of false alarms given its correspondences, the model and the "
              "reference's area), or their count"),
     FLD_ENUM, I_OFF(accept), 0, 0},
    {OPT_INT("view_candidates", 0, PATINA_K_MAX, "0",
             "references with views: match the items' first rows, then every row of the best N items by "
             "those (0: every row of every item)"),
     FLD_SIZE, I_OFF(view_candidates), 0, 0},
    {OPT_INT("first_features", 0, 16384 /* the rootsift option n's bound, RS_N_MAX */, "0",
             "match every reference with each query's F strongest features, then its best candidates again "
             "with all of them (0: all features at once)"),
     FLD_SIZE, I_OFF(first_features), 0, 0},
    {OPT_INT("half_view_features", 0, 16384 /* RS_N_MAX, as first_features */, "0",
             "the view pass over references with a half-size view: the first pass also matches each item's "
             "half-size view with the query's H strongest features (0: the first rows alone)"),
     FLD_SIZE, I_OFF(half_view_features), 0, 0},
};

#define X_OFF(f) offsetof(patina_index_opts_t, f)
static const entry_t index_opts[] = {
    {OPT_ENUM("device", "auto|cpu|gpu|hybrid", "auto", "where descriptors are computed"), FLD_ENUM, X_OFF(device),
     0, 0},
    {OPT_INT("batch", 1, PATINA_BATCH_MAX, STR(PATINA_BATCH_DEFAULT), "images per batch and per transaction"),
     FLD_SIZE, X_OFF(batch), 1, 1},
    /* the text of PATINA_DEFAULT_BATCH_MEMORY (tests/test_core.c checks it) */
    {OPT_INT("batch_memory", 1, PATINA_BATCH_MEMORY_MAX, "1073741824",
             "bytes of images (encoded + decoded) the pipeline holds at once"),
     FLD_U64, X_OFF(batch_memory), 1, 1},
    {OPT_BOOL("strict", "0", "decoder warnings fail the file"), FLD_INT, X_OFF(strict), 0, 0},
    {OPT_BOOL("apply_orientation", "0", "JPEGs turned upright by their EXIF orientation (0: as stored, LIRE's pixels)"),
     FLD_INT, X_OFF(apply_orientation), 0, 0},
    {OPT_BOOL("skip_duplicates", "0", "a new key whose content is stored under another key is reported and not "
              "indexed"),
     FLD_INT, X_OFF(skip_duplicates), 0, 0},
    {OPT_ENUM("jpeg_decoder", "libjpeg|nvjpeg|exact-gpu|auto", "auto",
              "JPEG decoder: libjpeg (CPU), exact-gpu (the same pixels, IDCT and colour on the GPU), nvjpeg "
              "(close pixels), auto (exact-gpu when every family runs on the GPU and reads device images, "
              "else libjpeg)"),
     FLD_ENUM, X_OFF(jpeg_decoder), 0, 0},
    {OPT_INT("video_max_delay_ms", 1, 3600000, "1000",
             "video: a batch of frames is stored at the latest this many milliseconds after its first frame "
             "was decoded (a live stream's frames are searchable within about this delay)"),
     FLD_U64, X_OFF(video_max_delay_ms), 0, ZERO_DEFAULT},
};

static const struct {
    const char *name;
    const entry_t *e;
    size_t n;
} sets[] = {
    [PATINA_OPTIONS_SEARCH] = {"search", search_opts, sizeof search_opts / sizeof search_opts[0]},
    [PATINA_OPTIONS_IDENTIFY] = {"identify", identify_opts, sizeof identify_opts / sizeof identify_opts[0]},
    [PATINA_OPTIONS_INDEX] = {"index", index_opts, sizeof index_opts / sizeof index_opts[0]},
};
#define NSETS (sizeof sets / sizeof sets[0])

const char *patina_option_set_name(patina_option_set set) { return (unsigned)set < NSETS ? sets[set].name : NULL; }

size_t patina_options_count(patina_option_set set) { return (unsigned)set < NSETS ? sets[set].n : 0; }

patina_status patina_options_get(patina_option_info_t *info, patina_option_set set, size_t i)
{
    if (!info) return patina__fail(PATINA_E_INVALID, "options: info is NULL");
    memset(info, 0, sizeof *info);
    if ((unsigned)set >= NSETS) return patina__fail(PATINA_E_INVALID, "options: no option set %d", (int)set);
    if (i >= sets[set].n)
        return patina__fail(PATINA_E_INVALID, "options: %s has no option %zu (it has %zu)", sets[set].name, i,
                            sets[set].n);
    *info = sets[set].e[i].info;
    return PATINA_OK;
}

static const entry_t *find(patina_option_set set, const char *name)
{
    if ((unsigned)set >= NSETS || !name) return NULL;
    for (size_t i = 0; i < sets[set].n; i++)
        if (!strcmp(sets[set].e[i].info.name, name)) return &sets[set].e[i];
    return NULL;
}

patina_status patina_options_find(patina_option_info_t *info, patina_option_set set, const char *name)
{
    const entry_t *e = find(set, name);
    if (!info) return patina__fail(PATINA_E_INVALID, "options: info is NULL");
    memset(info, 0, sizeof *info);
    if (!e)
        return patina__fail(PATINA_E_NOTFOUND, "options: %s has no option '%s'",
                            (unsigned)set < NSETS ? sets[set].name : "(no set)", name ? name : "(null)");
    *info = e->info;
    return PATINA_OK;
}

/* The one bounds check: INT and DOUBLE values against [min, max] (min
 * excluded when min_open); INT values must be integers. */
static patina_status check_entry(patina_option_set set, const entry_t *e, double v)
{
    const patina_option_info_t *o = &e->info;
    int below = o->min_open ? !(v > o->min) : !(v >= o->min);
    if (o->type != PATINA_OPTION_INT && o->type != PATINA_OPTION_DOUBLE)
        return patina__fail(PATINA_E_INVALID, "%s: option '%s' is not a number", sets[set].name, o->name);
    if (e->limit && v > o->max)
        return patina__fail(PATINA_E_LIMIT, "%s: %s = %.15g is over the limit of %.15g", sets[set].name, o->name, v,
                            o->max);
    if (below || !(v <= o->max) || (o->type == PATINA_OPTION_INT && v != floor(v)))
        return patina__fail(PATINA_E_INVALID, "%s: %s = %.15g is outside %c%.15g, %.15g]%s", sets[set].name, o->name,
                            v, o->min_open ? '(' : '[', o->min, o->max,
                            o->type == PATINA_OPTION_INT ? " (an integer)" : "");
    return PATINA_OK;
}

patina_status patina_options_check(patina_option_set set, const char *name, double value)
{
    const entry_t *e = find(set, name);
    if (!e)
        return patina__fail(PATINA_E_INVALID, "options: %s has no option '%s'",
                            (unsigned)set < NSETS ? sets[set].name : "(no set)", name ? name : "(null)");
    return check_entry(set, e, value);
}

/* The index of word v in choices "a|b|c", or -1. */
static int choice_index(const char *choices, const char *v)
{
    size_t vl = strlen(v);
    int i = 0;
    for (const char *p = choices; p; i++) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == vl && !strncmp(p, v, l)) return i;
        p = bar ? bar + 1 : NULL;
    }
    return -1;
}

static int choice_count(const char *choices)
{
    int n = 1;
    for (const char *p = choices; *p; p++) n += *p == '|';
    return n;
}

/* The field's value as a double (exact up to 2^53). */
static double field_get(const entry_t *e, const void *opts)
{
    const char *f = (const char *)opts + e->offset;
    switch (e->field) {
    case FLD_SIZE: return (double)*(const size_t *)(const void *)f;
    case FLD_INT:
    case FLD_ENUM: return (double)*(const int *)(const void *)f;
    case FLD_U64: return (double)*(const uint64_t *)(const void *)f;
    case FLD_DOUBLE: return *(const double *)(const void *)f;
    case FLD_NONE: break;
    }
    return NAN;
}

void patina__options_init(patina_option_set set, void *opts)
{
    for (size_t i = 0; (unsigned)set < NSETS && i < sets[set].n; i++) {
        const entry_t *e = &sets[set].e[i];
        char *f = (char *)opts + e->offset;
        double v;
        if (e->field == FLD_NONE || !e->info.def) continue;
        v = e->info.type == PATINA_OPTION_ENUM ? (double)choice_index(e->info.choices, e->info.def)
                                                : strtod(e->info.def, NULL);
        switch (e->field) {
        case FLD_SIZE: *(size_t *)(void *)f = (size_t)v; break;
        case FLD_INT:
        case FLD_ENUM: *(int *)(void *)f = (int)v; break;
        case FLD_U64: *(uint64_t *)(void *)f = (uint64_t)v; break;
        case FLD_DOUBLE: *(double *)(void *)f = v; break;
        case FLD_NONE: break;
        }
    }
}

patina_status patina__options_validate(patina_option_set set, const void *opts)
{
    for (size_t i = 0; (unsigned)set < NSETS && i < sets[set].n; i++) {
        const entry_t *e = &sets[set].e[i];
        double v;
        if (e->field == FLD_NONE) continue;
        v = field_get(e, opts);
        if (e->sentinel == ZERO_DEFAULT && v == 0) continue;
        if (e->sentinel == NEG_DEFAULT && v == -1.0) continue;
        switch (e->info.type) {
        case PATINA_OPTION_INT:
        case PATINA_OPTION_DOUBLE: PATINA_TRY(check_entry(set, e, v)); break;
        case PATINA_OPTION_ENUM:
            if (!(v >= 0 && v < choice_count(e->info.choices)))
                return patina__fail(PATINA_E_INVALID, "%s: %s = %.0f is not one of %s", sets[set].name,
                                    e->info.name, v, e->info.choices);
            break;
        default: break; /* BOOL: any int, nonzero is true */
        }
    }
    return PATINA_OK;
}
