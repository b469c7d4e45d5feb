/* Local texture patterns (lbp, lbp8, tlbap, lanadp): the internal interface
 * shared by the C reference (lbp.c), the multi-threaded CPU path
 * (lbp_fast.c), the family entries (lbp_family.c), the tests, the lab and
 * the benchmark. The CUDA side does not include it: it takes the contract
 * that lbp_gpu_conf fills (gpu/gpu.h). docs/lbp.md describes the family.
 *
 * A configuration (lbp_conf_t) is resolved once from a family's parsed
 * options; everything else takes it. Images enter as 8-bit grey, (h, w)
 * row-major with rows `stride` bytes apart (colour images go through
 * patina_image_to_grey, the project's one rule). */
#ifndef PATINA_LBP_H
#define PATINA_LBP_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"
#include "algo/lbp_core.h"
#include "patina/descriptor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { LBP_NORM_COUNTS = 0, LBP_NORM_L1 };
/* The distance option's values (lbp_family.c maps them to the search's ids). */
enum { LBP_DIST_CHI2 = 0, LBP_DIST_L1, LBP_DIST_INTERSECTION, LBP_DIST_HELLINGER };

#define LBP_MAX_DIM (1u << 22) /* histogram elements per descriptor */

/* Parsed options: one struct for the four families' option tables. */
typedef struct lbp_opts {
    int P;
    double R;
    int method;
    double th;
    int mapping;
    char grid[PATINA_OPT_STRMAX];
    int norm;
    int distance;
    int vbins;
} lbp_opts_t;

/* A resolved configuration. */
typedef struct lbp_conf {
    int kind;          /* LBP_KIND_* */
    int P;             /* samples: circular 1..32, else 8 */
    double R;          /* circular: the radius as given */
    int method;        /* circular: LBP_M_*; the 3x3 kinds use LBP_M_DEFAULT */
    double th;         /* tlbap: 0 < th <= 1 */
    int mapping;       /* LBP_MAP_* (histogram bins of raw patterns) */
    int grid_rows, grid_cols;
    int norm;          /* LBP_NORM_* */
    int distance;      /* LBP_DIST_* */
    int vbins;         /* method=var: histogram bins over sqrt(var) in [0, 128) */
    /* derived */
    int border;        /* 1 for the 3x3 kinds: (h-2) x (w-2) output; 0 for circular */
    uint64_t ncodes;   /* every code < ncodes (0 for var) */
    uint32_t nbins;    /* histogram bins per cell */
    patina_elem code_elem;  /* U8, U16, U32, or F64 for var */
    patina_elem hist_elem;  /* U32 counts or F32 L1 */
} lbp_conf_t;

/* Resolves options for a kind; fails with a message naming `what` when the
 * combination is invalid (e.g. a 2^P-bin histogram for P > 16). */
patina_status lbp_conf_resolve(lbp_conf_t *c, int kind, const lbp_opts_t *o, const char *what);

/* The GPU's input contract (gpu/gpu.h: patina_gpu_lbp_conf_t) of c: kind,
 * grid, bins, sample offsets and tables (borrowed from lbp_bin_table, which
 * never frees them). PATINA_E_NOMEM when a table cannot be built. */
struct patina_gpu_lbp_conf;
patina_status lbp_gpu_conf(struct patina_gpu_lbp_conf *g, const lbp_conf_t *c);

/* Code-map shape for an image: circular h x w, 3x3 kinds max(h-2,0) x max(w-2,0). */
void lbp_map_shape(const lbp_conf_t *c, int w, int h, int *mw, int *mh);

/* Elements of the descriptor: grid_rows * grid_cols * nbins. */
size_t lbp_dim(const lbp_conf_t *c);

/* ------------------------------------------------------------ sample points */

/* scikit-image's sample offsets (see docs/lbp.md): R rounded to binary32
 * (its Cython signature takes `float R`), then
 *   rp[k] = round5(-R * sin(2*pi*k/P)), cp[k] = round5(R * cos(2*pi*k/P))
 * where round5(x) = rint(x * 1e5) / 1e5 (numpy.round(x, 5)). */
void lbp_circle(double rp[LBP_MAX_P], double cp[LBP_MAX_P], int P, double R);

/* ------------------------------------------------------------ code maps */

/* Allocates map (width x height of elem). */
patina_status lbp_map_alloc(patina_codemap_t *map, int w, int h, patina_elem elem);

/* Value of map element i as a double (codes are exact). */
double lbp_map_get(const patina_codemap_t *map, size_t i);

/* The C reference: plain loops, one pixel at a time, scikit-image's
 * arithmetic for circular LBP and the paper's Algorithms 1-2 for the 3x3
 * kinds. Fills a new map (released with patina_codemap_release). */
patina_status lbp_ref_codes(patina_codemap_t *map, const lbp_conf_t *c, const uint8_t *grey,
                            int w, int h, size_t stride);

/* The reference's code of one sign pattern (signed_texture[k] = sample k
 * >= centre, 0 or 1) for a method other than var: scikit-image's loops. */
uint32_t lbp_ref_code(const int *signed_texture, int P, int method);

/* The fast CPU path: the same codes, rows split over `pool` (may be NULL). */
patina_status lbp_fast_codes(patina_codemap_t *map, const lbp_conf_t *c, const uint8_t *grey,
                             int w, int h, size_t stride, patina_pool_t *pool);

/* Histogram counts straight from the image with the fast path, without a
 * code map: counts is (lbp_dim) u32. */
patina_status lbp_fast_counts(uint32_t *counts, const lbp_conf_t *c, const uint8_t *grey, int w,
                              int h, size_t stride, patina_pool_t *pool);

/* ------------------------------------------------------------- histograms */

/* Histogram bin of a code (not var); bins < c->nbins. */
uint32_t lbp_bin(const lbp_conf_t *c, uint32_t code);

/* Histogram bin of a var value: sqrt(var) in vbins equal bins of [0, 128);
 * NaN (flat neighbourhood) and values <= 0 go to bin 0. */
uint32_t lbp_var_bin(const lbp_conf_t *c, double var);

/* Bin lookup table for codes < ncodes (only when ncodes <= 2^16; NULL
 * otherwise): shared, built once, never freed. */
const uint32_t *lbp_bin_table(const lbp_conf_t *c);

/* Sign pattern -> code table of a method (not var) for P <= 16 (NULL
 * otherwise or when out of memory): shared, built once, never freed. */
const uint32_t *lbp_code_table(int P, int method);

/* Cell of map pixel (x, y) in the grid: row-major cell index. Cell
 * boundaries are floor(i * mh / grid_rows) (and likewise for columns). */
int lbp_cell_row(const lbp_conf_t *c, int mh, int y);
int lbp_cell_col(const lbp_conf_t *c, int mw, int x);

/* Counts (lbp_dim u32, zeroed here) from a code map: plain loops. */
void lbp_hist_counts(uint32_t *counts, const lbp_conf_t *c, const patina_codemap_t *map);

/* The descriptor from counts: a copy for counts, or count / total as float
 * (total = all counts; zeros when total is 0) for L1. */
void lbp_hist_finish(void *out, const lbp_conf_t *c, const uint32_t *counts);

/* ------------------------------------------------------------- tlbap */

/* k[m] = floor(fl(th * m)) for m = 0..255: a neighbour n > th*max (binary64)
 * exactly when n > k[max]. */
void lbp_tlbap_table(int k[256], double th);

#ifdef __cplusplus
}
#endif
#endif
