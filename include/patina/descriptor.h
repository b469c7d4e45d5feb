/* Descriptor families and batch extraction.
 *
 * A family (cedd, later lbp, glcm, ...) is registered once in a table
 * (src/features/registry.c): name, options with defaults and bounds, output
 * shape and element type, default distance, CPU function, GPU and hybrid
 * functions (or none). Everything else is driven by that table.
 *
 * An extractor is a family plus parsed options, created from one string
 * form: "cedd", "cedd:compact=1". Its canonical spec (every option spelled
 * out in table order) names the descriptor table in a collection.
 *
 * Extraction is batch-first: one image is a batch of one. The device decides
 * where it runs; all devices give identical bytes for integer descriptors.
 *
 * Memory. Descriptors, records and queries handed to any call of the
 * library (and its outputs of them) may sit at any address: rows from a
 * network message or a packed file need no copying by the caller. Rows
 * whose address their elements could not be read at (floats and 32-bit
 * words at an address not a multiple of 4, doubles of 8) are copied by the
 * call into aligned memory first, at the cost of that copy. */
#ifndef PATINA_DESCRIPTOR_H
#define PATINA_DESCRIPTOR_H

#include <stddef.h>
#include <stdint.h>
#include "patina/context.h"
#include "patina/image.h"
#include "patina/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum patina_device {
    PATINA_DEVICE_AUTO = 0, /* GPU when one is usable, else CPU */
    PATINA_DEVICE_CPU,      /* C reference, multi-threaded over the batch */
    PATINA_DEVICE_GPU,      /* whole descriptor on the GPU ("GPU-only") */
    PATINA_DEVICE_HYBRID    /* CPU computes block sums, GPU the rest */
} patina_device;

/* "auto", "cpu", "gpu", "hybrid"; NULL for out-of-range values. */
PATINA_API const char *patina_device_name(patina_device d);
/* Parses a device name; PATINA_E_INVALID with a message otherwise. */
PATINA_API patina_status patina_device_parse(patina_device *d, const char *name);

typedef enum patina_elem {
    PATINA_ELEM_U8 = 0,
    PATINA_ELEM_U16,
    PATINA_ELEM_U32,
    PATINA_ELEM_F32,
    PATINA_ELEM_F64
} patina_elem;

/* Size in bytes of one element. */
PATINA_API size_t patina_elem_size(patina_elem e);

typedef struct patina_extractor patina_extractor_t;

/* Number of registered families and their names/one-line help. */
PATINA_API size_t patina_family_count(void);
PATINA_API const char *patina_family_name(size_t i);
PATINA_API const char *patina_family_help(size_t i);

/* The options of family `family` (< patina_family_count), as its table
 * declares them once: what the CLI's help, the HTTP server and bindings
 * list. Every string is static (never freed); `choices` is NULL except for
 * ENUM options. */
typedef enum patina_option_type {
    PATINA_OPTION_INT = 0,  /* an integer in [min, max] */
    PATINA_OPTION_DOUBLE,   /* a number in [min, max] */
    PATINA_OPTION_BOOL,     /* 0 or 1 (also true/false/yes/no) */
    PATINA_OPTION_ENUM,     /* one of `choices`, "a|b|c" */
    PATINA_OPTION_STRING    /* text (may hold ','; a list or a path) */
} patina_option_type;

typedef struct patina_option_info {
    const char *name;
    patina_option_type type;
    double min, max;        /* INT and DOUBLE: bounds (inclusive, but see min_open); 0 otherwise */
    const char *def;        /* the default, as text */
    const char *choices;    /* ENUM: "a|b|c"; NULL otherwise */
    const char *help;       /* one line ("" when none) */
    int min_open;           /* 1: min itself is excluded (a value must be > min); 0: included */
} patina_option_info_t;

/* What a family can do: front ends ask these instead of comparing names. */
enum {
    PATINA_CAP_SEARCH = 1u << 0,   /* records searched by a distance (k-NN, range: patina_table_search);
                                    * rootsift too (rootsift_ratio), though its use is identification */
    PATINA_CAP_IDENTIFY = 1u << 1, /* local features: identification (patina_table_identify) */
    PATINA_CAP_PIVOTS = 1u << 2,   /* searches can be filtered by a pivot table (include/patina/pivots.h) */
    PATINA_CAP_GPU = 1u << 3,      /* extraction on the GPU is compiled in (PATINA_DEVICE_GPU) */
    PATINA_CAP_HYBRID = 1u << 4,   /* hybrid CPU/GPU extraction is compiled in */
    PATINA_CAP_CODEMAP = 1u << 5,  /* per-pixel code maps (patina_extract_codemap) */
    PATINA_CAP_JSON = 1u << 6,     /* a JSON description beyond the vector (patina_extractor_json) */
    PATINA_CAP_KEYPOINTS = 1u << 7, /* records of keypoints: read with patina_rootsift_info/_feature */
    PATINA_CAP_CENTROIDS = 1u << 8  /* records of weighted centroids: patina_signature_info/_centroid */
};

/* The capabilities (PATINA_CAP_*) of family i (0 for an out-of-range index)
 * and of an extractor's family with its options. */
PATINA_API unsigned patina_family_caps(size_t i);
PATINA_API unsigned patina_extractor_caps(const patina_extractor_t *ex);

/* Options of a family: 0 for an out-of-range index. */
PATINA_API size_t patina_family_option_count(size_t family);
/* Option i (< patina_family_option_count(family)) into info (caller
 * storage); PATINA_E_INVALID for an out-of-range family or option. */
PATINA_API patina_status patina_family_option(patina_option_info_t *info, size_t family, size_t i);

/* Parses "family[:key=value,...]". Unknown family or option, bad values and
 * out-of-bounds values fail with PATINA_E_INVALID and say which. */
PATINA_API patina_status patina_extractor_new(patina_extractor_t **ex, const char *spec);
PATINA_API void patina_extractor_free(patina_extractor_t *ex); /* accepts NULL */

/* Canonical spec, e.g. "cedd:compact=0". Owned by the extractor. */
PATINA_API const char *patina_extractor_spec(const patina_extractor_t *ex);
PATINA_API const char *patina_extractor_family(const patina_extractor_t *ex);
PATINA_API size_t patina_extractor_dim(const patina_extractor_t *ex);      /* elements */
PATINA_API patina_elem patina_extractor_elem(const patina_extractor_t *ex);
PATINA_API size_t patina_extractor_bytes(const patina_extractor_t *ex);    /* dim * elem size */
PATINA_API const char *patina_extractor_distance_name(const patina_extractor_t *ex);
/* Whether the family has a GPU / hybrid implementation compiled in. */
PATINA_API int patina_extractor_has_device(const patina_extractor_t *ex, patina_device d);

/* The family's distance between two descriptors of this extractor
 * (rootsift_ratio at Lowe's ratio PATINA_RATIO_DEFAULT; a search takes its
 * patina_search_opts_t.ratio). */
PATINA_API double patina_extractor_distance(const patina_extractor_t *ex, const void *a, const void *b);

/* Whether the family describes an image in JSON beyond its descriptor vector
 * (glcm: count matrices, properties and Haralick features). */
PATINA_API int patina_extractor_has_json(const patina_extractor_t *ex);
/* That description for one image (CPU, all threads), as JSON object members
 * without braces, in a malloc'd string the caller frees with free().
 * PATINA_E_UNAVAILABLE for families without one. */
PATINA_API patina_status patina_extractor_json(const patina_extractor_t *ex, const patina_image_t *img,
                                               char **json);

/* Resolves `want` for an extractor to the device that will run: AUTO becomes
 * GPU when a GPU is usable and the family has a kernel, else CPU. Asking for
 * GPU or HYBRID without a usable GPU fails with PATINA_E_UNAVAILABLE. */
PATINA_API patina_status patina_context_resolve(patina_context_t *ctx, const patina_extractor_t *ex,
                                                patina_device want, patina_device *got);

/* Extracts n descriptors: out is (n, patina_extractor_bytes) row-major.
 * status[i] (may be NULL) receives each image's status; the call fails only
 * for errors that concern the whole batch (device failure, bad arguments). */
PATINA_API patina_status patina_extract_batch(patina_context_t *ctx, const patina_extractor_t *ex,
                                              patina_device device, void *out,
                                              const patina_image_t *images, size_t n,
                                              patina_status *status);

/* ------------------------------------------------------------- code maps
 * The per-pixel codes behind a histogram family (lbp, lbp8, tlbap, lanadp;
 * docs/lbp.md): the family's descriptor is a histogram of this map. */

typedef struct patina_codemap {
    int width, height;    /* may be 0 (e.g. lbp8 of an image under 3x3) */
    patina_elem elem;     /* U8, U16 or U32 codes; F64 values for lbp method=var */
    uint64_t code_limit;  /* every code is < code_limit (0 for F64 maps) */
    void *data;           /* (height, width) row-major, owned; NULL when empty */
} patina_codemap_t;

/* Whether the extractor's family has code maps. */
PATINA_API int patina_extractor_has_codemap(const patina_extractor_t *ex);

/* The code map of one image, computed on the CPU with ctx's threads (ctx may
 * be NULL: one thread). map is caller storage, filled here (empty on
 * failure); free its pixels with patina_codemap_release. Families without
 * code maps fail with PATINA_E_UNAVAILABLE. */
PATINA_API patina_status patina_extract_codemap(patina_context_t *ctx, const patina_extractor_t *ex,
                                                patina_codemap_t *map, const patina_image_t *img);

/* Frees the pixels and zeroes the struct. Accepts NULL and empty maps. */
PATINA_API void patina_codemap_release(patina_codemap_t *map);

/* Writes a map to `path` (docs/lbp.md, "Code map files"): binary PGM, 8-bit
 * (maxval 255) when every code is < 256, else 16-bit big-endian (maxval
 * 65535) when every code is < 65536; larger codes as a PAM of depth 2
 * (maxval 65535, TUPLTYPE PATINA_CODE32: each pixel's code as 4 big-endian
 * bytes); F64 maps as PFM ("Pf", float32 little-endian, bottom row first). */
PATINA_API patina_status patina_codemap_write(const patina_codemap_t *map, const char *path);

#ifdef __cplusplus
}
#endif
#endif
