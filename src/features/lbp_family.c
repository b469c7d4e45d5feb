/* Registry entries of the local-pattern families lbp, lbp8, tlbap and
 * lanadp: option tables, descriptor shape, distances, and the CPU, GPU and
 * code-map functions. The descriptor is the histogram of the code map
 * (docs/lbp.md). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "features/family.h"
#include "features/lbp.h"

#define OPT_MAPPING                                                                            \
    {"mapping", PATINA_OPT_ENUM, 0, 0, "none", "none|u2|ri|riu2",                              \
     "histogram bins of the raw patterns: none, u2 (uniform + 1 bin), ri (rotation "           \
     "invariant), riu2 (both)", offsetof(lbp_opts_t, mapping)}
#define OPT_HIST                                                                               \
    {"grid", PATINA_OPT_STRING, 0, 0, "1x1", NULL,                                             \
     "ROWSxCOLS cells, one histogram each, concatenated in raster order",                      \
     offsetof(lbp_opts_t, grid)},                                                              \
    {"norm", PATINA_OPT_ENUM, 0, 0, "l1", "counts|l1",                                         \
     "counts (u32) or L1-normalised over the whole descriptor (f32)",                          \
     offsetof(lbp_opts_t, norm)},                                                              \
    {"distance", PATINA_OPT_ENUM, 0, 0, "chi2", "chi2|l1|intersection|hellinger",              \
     "distance for search", offsetof(lbp_opts_t, distance)}

static const patina_optdef_t lbp_opts[] = {
    {"P", PATINA_OPT_INT, 1, 32, "8", NULL, "circular neighbours", offsetof(lbp_opts_t, P)},
    {"R", PATINA_OPT_DOUBLE, 0, 1e6, "1", NULL, "radius (> 0; used in single precision)",
     offsetof(lbp_opts_t, R)},
    {"method", PATINA_OPT_ENUM, 0, 0, "default", "default|ror|uniform|nri_uniform|var",
     "scikit-image's local_binary_pattern method", offsetof(lbp_opts_t, method)},
    OPT_MAPPING,
    OPT_HIST,
    {"vbins", PATINA_OPT_INT, 1, 4096, "16", NULL,
     "method=var: histogram bins over sqrt(var) in [0, 128)", offsetof(lbp_opts_t, vbins)},
};

static const patina_optdef_t lbp8_opts[] = {OPT_MAPPING, OPT_HIST};

static const patina_optdef_t tlbap_opts[] = {
    {"th", PATINA_OPT_DOUBLE, 0, 1, "0.9", NULL, "threshold T in (0, 1]: th2 = T * window max",
     offsetof(lbp_opts_t, th)},
    OPT_MAPPING,
    OPT_HIST,
};

/* Every family parses into lbp_opts_t; options a family does not list keep
 * these values (the extractor's params start zeroed). */
static lbp_opts_t opts_of(const void *params)
{
    lbp_opts_t o = *(const lbp_opts_t *)params;
    if (o.grid[0] == '\0') strcpy(o.grid, "1x1");
    if (o.vbins == 0) o.vbins = 16;
    return o;
}

static const char *const kind_name[] = {"lbp", "lbp8", "tlbap", "lanadp"};

/* A configuration from options that check() accepted. */
static lbp_conf_t conf_of(int kind, const void *params)
{
    lbp_conf_t c;
    lbp_opts_t o = opts_of(params);
    if (lbp_conf_resolve(&c, kind, &o, kind_name[kind]) != PATINA_OK) memset(&c, 0, sizeof c);
    return c;
}

static patina_status check_kind(int kind, const void *params)
{
    lbp_conf_t c;
    lbp_opts_t o = opts_of(params);
    return lbp_conf_resolve(&c, kind, &o, kind_name[kind]);
}

static patina_status grey_of(uint8_t **grey, const patina_image_t *img, const char *what)
{
    size_t n;
    *grey = NULL;
    if (!img || img->width < 0 || img->height < 0 ||
        (img->width > 0 && img->height > 0 && (!img->data || img->stride < 3 * (size_t)img->width)))
        return patina__fail(PATINA_E_INVALID, "%s: null or malformed image", what);
    n = (size_t)img->width * (size_t)img->height;
    *grey = malloc(n ? n : 1);
    if (!*grey) return patina__fail(PATINA_E_NOMEM, "%s: out of memory for a %dx%d grey image", what,
                                    img->width, img->height);
    if (n) {
        patina_status s = patina_image_to_grey(*grey, img);
        if (s != PATINA_OK) {
            free(*grey);
            *grey = NULL;
            return s;
        }
    }
    return PATINA_OK;
}

static patina_status cpu_kind(int kind, const void *params, void *out, const patina_image_t *img)
{
    lbp_conf_t c = conf_of(kind, params);
    uint8_t *grey;
    uint32_t *counts;
    patina_status s;
    PATINA_TRY(grey_of(&grey, img, kind_name[kind]));
    counts = malloc(lbp_dim(&c) * sizeof *counts);
    if (!counts) {
        free(grey);
        return patina__fail(PATINA_E_NOMEM, "%s: out of memory for the histogram", kind_name[kind]);
    }
    s = lbp_fast_counts(counts, &c, grey, img->width, img->height, (size_t)img->width, NULL);
    if (s == PATINA_OK) lbp_hist_finish(out, &c, counts);
    free(counts);
    free(grey);
    return s;
}

static patina_status codemap_kind(int kind, const void *params, patina_codemap_t *map,
                                  const patina_image_t *img, patina_pool_t *pool)
{
    lbp_conf_t c = conf_of(kind, params);
    uint8_t *grey;
    patina_status s;
    memset(map, 0, sizeof *map);
    PATINA_TRY(grey_of(&grey, img, kind_name[kind]));
    s = lbp_fast_codes(map, &c, grey, img->width, img->height, (size_t)img->width, pool);
    free(grey);
    return s;
}

patina_status lbp_gpu_conf(patina_gpu_lbp_conf_t *g, const lbp_conf_t *c)
{
    memset(g, 0, sizeof *g);
    g->kind = c->kind;
    g->P = c->P;
    g->method = c->method;
    g->mapping = c->mapping;
    g->grid_rows = c->grid_rows;
    g->grid_cols = c->grid_cols;
    g->nbins = (int)c->nbins;
    g->vbins = c->vbins;
    g->dim = lbp_dim(c);
    g->code_bytes = (int)patina_elem_size(c->code_elem);
    g->th = c->th;
    if (c->kind == LBP_KIND_CIRCULAR) {
        lbp_circle(g->rp, g->cp, c->P, c->R);
    } else {
        int k[256], m;
        lbp_tlbap_table(k, c->kind == LBP_KIND_TLBAP ? c->th : 1.0);
        for (m = 0; m < 256; m++) g->ktab[m] = (uint8_t)k[m];
    }
    if (c->method != LBP_M_VAR && c->ncodes <= 65536) {
        g->bins = lbp_bin_table(c);
        if (!g->bins) return patina__fail(PATINA_E_NOMEM, "lbp: out of memory for a bin table");
        g->ncodes = (uint32_t)c->ncodes;
    }
    return PATINA_OK;
}

/* The GPU writes each image's counts into its row of out (u32, the size of
 * either element type); norm=l1 is finished here, as on the CPU
 * (lbp_hist_finish). Images the kernels cannot take (PATINA_E_LIMIT: beyond
 * a launch grid, or a grey image past the GPU memory budget) are computed
 * on the CPU, with the same bytes; when the call itself fails, its images
 * keep their statuses and zeros. */
static patina_status gpu_kind(int kind, patina_gpu_t *g, const void *params, void *out,
                              const patina_image_t *imgs, size_t n, patina_status *st)
{
    lbp_conf_t c = conf_of(kind, params);
    patina_gpu_lbp_conf_t gc;
    patina_status *mine = st, s;
    const size_t dim = lbp_dim(&c), bytes = dim * sizeof(uint32_t);
    uint32_t *counts = NULL;
    size_t i;
    if (n == 0) return PATINA_OK;
    PATINA_TRY(lbp_gpu_conf(&gc, &c));
    if (!mine && !(mine = malloc(n * sizeof *mine)))
        return patina__fail(PATINA_E_NOMEM, "%s: out of memory for %zu statuses", kind_name[kind], n);
    if (c.norm == LBP_NORM_L1 && !(counts = malloc(bytes))) {
        if (mine != st) free(mine);
        return patina__fail(PATINA_E_NOMEM, "%s: out of memory for the histogram", kind_name[kind]);
    }
    s = patina_gpu_lbp(g, &gc, (uint32_t *)out, imgs, n, mine);
    for (i = 0; i < n; i++) {
        unsigned char *o = (unsigned char *)out + i * bytes;
        if (s == PATINA_OK && mine[i] == PATINA_E_LIMIT) { /* the C reference, on a host view */
            patina_image_t host;
            mine[i] = patina_gpu_image_host(&host, &imgs[i]);
            if (mine[i] == PATINA_OK) mine[i] = cpu_kind(kind, params, o, &host);
            patina_image_release(&host);
            if (mine[i] != PATINA_OK) memset(o, 0, bytes);
        } else if (mine[i] == PATINA_OK && counts) {
            memcpy(counts, o, bytes);
            lbp_hist_finish(o, &c, counts);
        }
    }
    free(counts);
    if (mine != st) free(mine);
    return s;
}

static size_t dim_of(int kind, const void *params)
{
    lbp_conf_t c = conf_of(kind, params);
    return lbp_dim(&c);
}

static patina_elem elem_for(const void *params)
{
    return opts_of(params).norm == LBP_NORM_L1 ? PATINA_ELEM_F32 : PATINA_ELEM_U32;
}

static pdist_t distance_for(const void *params)
{
    static const pdist_t ids[] = {PDIST_CHI2, PDIST_L1, PDIST_INTERSECTION, PDIST_HELLINGER};
    int d = opts_of(params).distance;
    return d >= 0 && d < 4 ? ids[d] : PDIST_CHI2;
}

/* The CUDA kernels: src/gpu/lbp.cu. */
#define LBP_WITH_GPU 1

/* One set of entry points per family. */
#define LBP_FAMILY(NAME, KIND, OPTS, HELP)                                                      \
    static patina_status fam_##NAME##_check(const void *p) { return check_kind(KIND, p); }            \
    static size_t fam_##NAME##_dim(const void *p) { return dim_of(KIND, p); }                         \
    static patina_status fam_##NAME##_cpu(const void *p, void *out, const patina_image_t *img)        \
    {                                                                                           \
        return cpu_kind(KIND, p, out, img);                                                     \
    }                                                                                           \
    static patina_status fam_##NAME##_gpu(patina_gpu_t *g, const void *p, void *out,                  \
                                    const patina_image_t *imgs, size_t n, patina_status *st)    \
    {                                                                                           \
        return gpu_kind(KIND, g, p, out, imgs, n, st);                                          \
    }                                                                                           \
    static patina_status fam_##NAME##_codemap(const void *p, patina_codemap_t *map,                   \
                                        const patina_image_t *img, patina_pool_t *pool)         \
    {                                                                                           \
        return codemap_kind(KIND, p, map, img, pool);                                           \
    }                                                                                           \
    const patina_family_t patina_family_##NAME = {                                              \
        .name = #NAME,                                                                          \
        .uses = PATINA_CAP_SEARCH,                                                              \
        .help = HELP,                                                                           \
        .opts = OPTS,                                                                           \
        .nopts = sizeof OPTS / sizeof OPTS[0],                                                  \
        .elem = PATINA_ELEM_F32,                                                                \
        .dim = fam_##NAME##_dim,                                                                      \
        .check = fam_##NAME##_check,                                                                  \
        .distance = PDIST_CHI2,                                                                 \
        .cpu = fam_##NAME##_cpu,                                                                      \
        .gpu = PATINA_HAVE_CUDA && LBP_WITH_GPU ? fam_##NAME##_gpu : NULL,                            \
        .hybrid = NULL,                                                                         \
        .elem_for = elem_for,                                                                   \
        .distance_for = distance_for,                                                           \
        .codemap = fam_##NAME##_codemap,                                                              \
        .gpu_reads_device = 1,                                                                  \
    };

LBP_FAMILY(lbp, LBP_KIND_CIRCULAR, lbp_opts,
           "circular LBP histogram, codes identical to scikit-image local_binary_pattern "
           "(P, R, method)")
LBP_FAMILY(lbp8, LBP_KIND_LBP8, lbp8_opts, "classic 3x3 LBP histogram (neighbour >= centre)")
LBP_FAMILY(tlbap, LBP_KIND_TLBAP, tlbap_opts,
           "threshold local binary AND pattern histogram (Algorithm 1, th=T)")
LBP_FAMILY(lanadp, LBP_KIND_LANADP, lbp8_opts,
           "local adjacent neighbourhood average difference pattern histogram (Algorithm 2)")
