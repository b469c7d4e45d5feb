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
    int views;        /* synthetic views per reference (0 .. RS_VIEWS_MAX): rows blocks 1 .. views */
} rootsift_params_t;

/* ----------------------------------------------------------------- views */

/* With views = V > 0 a reference's record is 1 + V records of m rows laid
 * end to end (each a whole record: header, rows, geometry, its own image
 * size): block 0 extracted from the image, block v from its view
 * rs_view_kind(V, v). Identification holds each block as one row of the
 * item (src/identify/identify.c); queries are single records of n rows. */
#define RS_VIEWS_MAX 3
enum { RS_VIEW_SOFT_HALF = 1, RS_VIEW_GEOMETRIC = 2, RS_VIEW_SOFT_FULL = 3, RS_VIEW_HALF = 4 };
/* RS_VIEW_HALF is no reference view (rs_view_kind never names it): the
 * half-size query's image (patina_identify_extract_half). */

/* The kind of view v (1 .. views) of a table with `views` views; 0 for none. */
int rs_view_kind(int views, int v);

/* Makes view `kind` of img (rootsift_views.c tells what each is): *out an
 * RGB image of equal channels, owned (patina_image_release), empty (0 x 0)
 * for an empty image or one too thin for the view. */
patina_status rs_view_make(patina_image_t *out, const patina_image_t *img, int kind);

/* Maps a point (x, y) of view `kind` of a W x H image to that image's
 * pixels (for drawing a view's correspondences on the reference); 0 when
 * the view does not exist for that size. */
int rs_view_point(int kind, int W, int H, double x, double y, double *ox, double *oy);

/* Extracts a reference's whole record (1 + p->views blocks of m rows) from
 * img: rec of rs_item_bytes(p) bytes. The status of the first block that
 * failed (its block then holds no features), else PATINA_OK. */
patina_status rs_extract_item(const rootsift_params_t *p, void *rec, const patina_image_t *img);

/* Bytes of a reference's record: (1 + views) records of m rows. */
size_t rs_item_bytes(const rootsift_params_t *p);

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
