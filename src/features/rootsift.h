/* The rootsift family's options, its record check with a message and the
 * extraction entry point that identify uses for queries. The record's layout,
 * its accessors (rs_count, rs_row, rs_row_get, ...) and the matcher that
 * reads it are algo/rootsift_match.h, included here: the CPU extractor
 * (src/features/rootsift.c), identification, the search distance and the
 * public view (include/patina/rootsift.h) read records only through it. */
#ifndef PATINA_FEATURES_ROOTSIFT_H
#define PATINA_FEATURES_ROOTSIFT_H

#include <stddef.h>

#include "algo/rootsift_match.h"
#include "patina/image.h"
#include "patina/status.h"

/* Parsed options (the table is in rootsift.c; docs/rootsift.md). */
typedef struct rootsift_params {
    int m;            /* reference budget: rows of a record */
    int n;            /* query budget (identify); not used by the reference extractor */
    double peak;      /* VLFeat peak threshold, grey levels of a [0, 255] image */
    double edge;      /* VLFeat edge threshold */
    int maxside;      /* longer side above this is downscaled first; 0: never */
    int first_octave; /* VLFeat o_min: -1 doubles the image first */
    int octaves;      /* at most this many octaves; -1: all that fit */
    int levels;       /* levels per octave */
    int quant;        /* RS_QUANT_U8 | RS_QUANT_F16 */
} rootsift_params_t;

/* --------------------------------------------------------------- records */

/* PATINA_OK when rec (bytes long) is a well-formed record: version, quant,
 * m matching bytes, count <= m, qscale > 0. Else PATINA_E_CORRUPT with the
 * reason ("what" names the caller in the message). */
patina_status rs_record_check(const void *rec, size_t bytes, const char *what);

/* ----------------------------------------------------------- extraction */

/* Extracts the `budget` strongest features of img into rec, a record of
 * rs_record_bytes(budget, p->quant) bytes (fully written, zero-padded).
 * References use budget = p->m; identify's queries p->n. A flat or tiny
 * image gives count 0 and PATINA_OK. Thread-safe (no shared state). */
patina_status rs_extract(const rootsift_params_t *p, size_t budget, void *rec, const patina_image_t *img);

/* The same records of n images on the GPU g (src/gpu/rootsift.cu): out (n,
 * rs_record_bytes(budget, p->quant)). Images the GPU leaves (bad, empty,
 * too small, over the budget or its buffers) are extracted here on the CPU
 * with rs_extract's status. st (may be NULL) per image; the return value
 * is an error only when the call failed (then its images have that
 * status and zeros). */
struct patina_gpu;
struct patina_gpu_rootsift_conf;
patina_status rs_extract_gpu(struct patina_gpu *g, const rootsift_params_t *p, size_t budget, void *out,
                             const patina_image_t *imgs, size_t n, patina_status *st);

/* The GPU path's configuration for budget rows (VLFeat's sigmas, filters
 * and fast_expn table from the host's libm); tests use it too. */
patina_status rs_gpu_conf(struct patina_gpu_rootsift_conf *c, const rootsift_params_t *p, size_t budget);

#endif
