/* Registry entries of the `glcm` and `haralick` families: option tables,
 * request parsing, the descriptor vectors, and the full JSON description
 * of an image (`patina extract -f glcm:... --format json`).
 *
 *   glcm      vector: graycoprops properties, (10, nd, na) f64 = [prop][d][a]
 *   haralick  vector: form=meanrange (default): (nd, 2, 14) = [d][mean|range][feature]
 *                     form=offsets: (nd, na, 14); form=both: offsets then meanrange
 * glcm uses the plain L2 distance; haralick the standardised L2 ("std_l2"):
 * the search layer divides each feature by its standard deviation over the
 * searched collection (src/search/knn.c); between two lone vectors (no
 * collection) it is the plain L2. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "features/family.h"
#include "features/glcm_ref.h"
#include "patina/glcm.h"

typedef struct glcm_params {
    int levels;
    int quant;
    char distances[PATINA_OPT_STRMAX];
    char angles[PATINA_OPT_STRMAX];
    char offsets[PATINA_OPT_STRMAX];
    int symmetric;
    int normed;
    char mask[PATINA_OPT_STRMAX];
    int form; /* haralick only: 0 meanrange, 1 offsets, 2 both */
} glcm_params_t;

#define COMMON_OPTS                                                                            \
    {"levels", PATINA_OPT_INT, 2, 256, "32", NULL, "grey levels (2..256)",                     \
     offsetof(glcm_params_t, levels)},                                                         \
    {"quant", PATINA_OPT_ENUM, 0, 0, "uniform", "uniform|none",                                \
     "uniform: q = v*levels/256 of 8-bit grey v; none: q = v (v >= levels is an error)",       \
     offsetof(glcm_params_t, quant)},                                                          \
    {"distances", PATINA_OPT_STRING, 0, 0, "1", NULL, "pixel distances, e.g. 1,2,4",           \
     offsetof(glcm_params_t, distances)},                                                      \
    {"angles", PATINA_OPT_STRING, 0, 0, "0,45,90,135", NULL,                                   \
     "angles in degrees (row offset round(sin*d), column offset round(cos*d))",                \
     offsetof(glcm_params_t, angles)},                                                         \
    {"offsets", PATINA_OPT_STRING, 0, 0, "none", NULL,                                         \
     "explicit offsets dy:dx,... instead of distances x angles (none: use those)",             \
     offsetof(glcm_params_t, offsets)},                                                        \
    {"symmetric", PATINA_OPT_BOOL, 0, 1, "1", NULL, "count (i,j) and (j,i)",                   \
     offsetof(glcm_params_t, symmetric)}

static const patina_optdef_t glcm_opts[] = {
    COMMON_OPTS,
    {"normed", PATINA_OPT_BOOL, 0, 1, "0", NULL,
     "JSON output: matrices divided by their sums instead of counts",
     offsetof(glcm_params_t, normed)},
    {"mask", PATINA_OPT_STRING, 0, 0, "none", NULL,
     "mask image (same size; pairs count only where both pixels are non-zero)",
     offsetof(glcm_params_t, mask)},
};

static const patina_optdef_t haralick_opts[] = {
    COMMON_OPTS,
    {"mask", PATINA_OPT_STRING, 0, 0, "none", NULL,
     "mask image (same size; pairs count only where both pixels are non-zero)",
     offsetof(glcm_params_t, mask)},
    {"form", PATINA_OPT_ENUM, 0, 0, "meanrange", "meanrange|offsets|both",
     "meanrange: mean and range over angles per distance; offsets: per offset; both",
     offsetof(glcm_params_t, form)},
};

/* ------------------------------------------------------------- requests */

static patina_status parse_numbers(double *out, int *n, const char *text, double lo, double hi,
                                   const char *what, const char *opt)
{
    const char *p = text;
    *n = 0;
    for (;;) {
        char *end;
        double v;
        errno = 0;
        v = strtod(p, &end);
        if (end == p || errno || !isfinite(v) || (*end && *end != ','))
            return patina__fail(PATINA_E_INVALID, "%s: option '%s': '%s' is not a list of numbers",
                                what, opt, text);
        if (v < lo || v > hi)
            return patina__fail(PATINA_E_INVALID, "%s: option '%s': %g is out of range [%g, %g]",
                                what, opt, v, lo, hi);
        if (*n >= PATINA_GLCM_MAX_OFFSETS)
            return patina__fail(PATINA_E_LIMIT, "%s: option '%s': more than %d values", what, opt,
                                PATINA_GLCM_MAX_OFFSETS);
        out[(*n)++] = v;
        if (!*end) return PATINA_OK;
        p = end + 1;
    }
}

patina_status glcm_req_parse(glcm_req_t *r, int levels, int quant, int symmetric, int normed,
                             const char *distances, const char *angles, const char *offsets,
                             const char *what)
{
    memset(r, 0, sizeof *r);
    if (levels < 2 || levels > 256)
        return patina__fail(PATINA_E_INVALID, "%s: levels=%d is out of range [2, 256]", what,
                            levels);
    r->levels = levels;
    r->quant = quant;
    r->symmetric = symmetric;
    r->normed = normed;
    if (offsets && strcmp(offsets, "none") != 0) {
        const char *p = offsets;
        int n = 0;
        for (;;) {
            char *end;
            long dy, dx;
            errno = 0;
            dy = strtol(p, &end, 10);
            if (end == p || *end != ':') goto bad;
            p = end + 1;
            dx = strtol(p, &end, 10);
            if (end == p || errno || (*end && *end != ',')) goto bad;
            if (dy < -(1L << 20) || dy > (1L << 20) || dx < -(1L << 20) || dx > (1L << 20))
                return patina__fail(PATINA_E_INVALID, "%s: offset %ld:%ld is out of range", what,
                                    dy, dx);
            if (n >= PATINA_GLCM_MAX_OFFSETS)
                return patina__fail(PATINA_E_LIMIT, "%s: more than %d offsets", what,
                                    PATINA_GLCM_MAX_OFFSETS);
            r->off[n].dy = (int)dy;
            r->off[n].dx = (int)dx;
            n++;
            if (!*end) break;
            p = end + 1;
        }
        r->nd = 1;
        r->na = n;
        r->explicit_offsets = 1;
        return PATINA_OK;
    bad:
        return patina__fail(PATINA_E_INVALID, "%s: option 'offsets': '%s' is not dy:dx,dy:dx,...",
                            what, offsets);
    }
    PATINA_TRY(parse_numbers(r->dist, &r->nd, distances, 0, 1 << 20, what, "distances"));
    PATINA_TRY(parse_numbers(r->angle, &r->na, angles, -3600, 3600, what, "angles"));
    if (r->nd * r->na > PATINA_GLCM_MAX_OFFSETS)
        return patina__fail(PATINA_E_LIMIT, "%s: %d distances x %d angles is more than %d offsets",
                            what, r->nd, r->na, PATINA_GLCM_MAX_OFFSETS);
    for (int d = 0; d < r->nd; d++)
        for (int a = 0; a < r->na; a++)
            r->off[d * r->na + a] = patina_glcm_offset(r->dist[d], r->angle[a]);
    return PATINA_OK;
}

static patina_status params_req(glcm_req_t *r, const glcm_params_t *p, const char *what)
{
    return glcm_req_parse(r, p->levels, p->quant, p->symmetric, p->normed, p->distances,
                          p->angles, p->offsets, what);
}

patina_status glcm_grey_levels(uint8_t **q, const patina_image_t *img, int levels, int quant)
{
    size_t n = (size_t)(img->width > 0 ? img->width : 0) * (size_t)(img->height > 0 ? img->height : 0);
    patina_status s;
    *q = malloc(n ? n : 1);
    if (!*q) return patina__fail(PATINA_E_NOMEM, "glcm: out of memory for a %dx%d image",
                                 img->width, img->height);
    s = patina_image_to_grey(*q, img);
    if (s == PATINA_OK) s = patina_glcm_quantize(*q, *q, n, levels, (patina_glcm_quant)quant);
    if (s != PATINA_OK) {
        free(*q);
        *q = NULL;
    }
    return s;
}

patina_status glcm_load_mask(uint8_t **mask, const char *path, int w, int h)
{
    patina_image_t m = {0};
    patina_status s;
    *mask = NULL;
    PATINA_TRY(patina_image_load(&m, path, NULL));
    if (m.width != w || m.height != h) {
        int mw = m.width, mh = m.height;
        patina_image_release(&m);
        return patina__fail(PATINA_E_INVALID, "glcm: mask '%s' is %dx%d, the image %dx%d", path,
                            mw, mh, w, h);
    }
    *mask = malloc((size_t)w * (size_t)h + 1);
    if (!*mask) {
        patina_image_release(&m);
        return patina__fail(PATINA_E_NOMEM, "glcm: out of memory for the mask");
    }
    s = patina_image_to_grey(*mask, &m);
    patina_image_release(&m);
    if (s != PATINA_OK) {
        free(*mask);
        *mask = NULL;
    }
    return s;
}

/* Counts of one image for a request: (noff, L, L) u32, malloc'd. */
static patina_status image_counts(uint32_t **counts, const glcm_req_t *r, const char *maskpath,
                                  const patina_image_t *img, int threads)
{
    uint8_t *q = NULL, *mask = NULL;
    size_t L = (size_t)r->levels;
    patina_status s;
    *counts = NULL;
    if (!img || img->width < 0 || img->height < 0 ||
        (img->width > 0 && img->height > 0 && (!img->data || img->stride < 3 * (size_t)img->width)))
        return patina__fail(PATINA_E_INVALID, "glcm: bad image");
    PATINA_TRY(glcm_check_size(img->width, img->height, r->symmetric, "glcm"));
    PATINA_TRY(glcm_grey_levels(&q, img, r->levels, r->quant));
    if (maskpath && strcmp(maskpath, "none") != 0) {
        s = glcm_load_mask(&mask, maskpath, img->width, img->height);
        if (s != PATINA_OK) {
            free(q);
            return s;
        }
    }
    *counts = malloc(glcm_noff(r) * L * L * sizeof **counts + 1);
    if (!*counts) {
        free(q);
        free(mask);
        return patina__fail(PATINA_E_NOMEM, "glcm: out of memory for counts");
    }
    s = patina_glcm_counts(*counts, q, img->width, img->height, (size_t)img->width, mask,
                           (size_t)img->width, r->levels, r->off, glcm_noff(r), r->symmetric,
                           threads);
    free(q);
    free(mask);
    if (s != PATINA_OK) {
        free(*counts);
        *counts = NULL;
    }
    return s;
}

/* ------------------------------------------------------------ families */

static patina_status glcm_check(const void *params)
{
    glcm_req_t r;
    return params_req(&r, params, "glcm");
}

static patina_status haralick_check(const void *params)
{
    glcm_req_t r;
    return params_req(&r, params, "haralick");
}

static size_t glcm_dim(const void *params)
{
    glcm_req_t r;
    if (params_req(&r, params, "glcm") != PATINA_OK) return 0;
    return PATINA_GLCM_NPROPS * glcm_noff(&r);
}

static size_t haralick_dim_req(const glcm_req_t *r, int form)
{
    size_t per_offset = glcm_noff(r) * PATINA_HARALICK_N;
    size_t meanrange = (size_t)r->nd * 2 * PATINA_HARALICK_N;
    return form == 0 ? meanrange : form == 1 ? per_offset : per_offset + meanrange;
}

static size_t haralick_dim(const void *params)
{
    glcm_req_t r;
    if (params_req(&r, params, "haralick") != PATINA_OK) return 0;
    return haralick_dim_req(&r, ((const glcm_params_t *)params)->form);
}

/* The haralick vector of a request from counts. */
static patina_status haralick_vector(double *out, const glcm_req_t *r, int form,
                                     const uint32_t *counts)
{
    size_t noff = glcm_noff(r);
    double *f = malloc(noff * PATINA_HARALICK_N * sizeof *f + 1);
    if (!f) return patina__fail(PATINA_E_NOMEM, "haralick: out of memory");
    patina_haralick(f, counts, r->levels, noff);
    if (form == 1 || form == 2) memcpy(out, f, noff * PATINA_HARALICK_N * sizeof *f);
    if (form == 0 || form == 2)
        patina_haralick_aggregate(out + (form == 2 ? noff * PATINA_HARALICK_N : 0), f, noff,
                                  (size_t)r->na);
    free(f);
    return PATINA_OK;
}

static patina_status glcm_cpu(const void *params, void *out, const patina_image_t *img)
{
    const glcm_params_t *p = params;
    glcm_req_t r;
    uint32_t *counts;
    PATINA_TRY(params_req(&r, p, "glcm"));
    PATINA_TRY(image_counts(&counts, &r, p->mask, img, 1));
    patina_glcm_props(out, counts, r.levels, glcm_noff(&r));
    free(counts);
    return PATINA_OK;
}

static patina_status haralick_cpu(const void *params, void *out, const patina_image_t *img)
{
    const glcm_params_t *p = params;
    glcm_req_t r;
    uint32_t *counts;
    patina_status s;
    PATINA_TRY(params_req(&r, p, "haralick"));
    PATINA_TRY(image_counts(&counts, &r, p->mask, img, 1));
    s = haralick_vector(out, &r, p->form, counts);
    free(counts);
    return s;
}

/* --------------------------------------------------------------- JSON */

typedef struct sbuf {
    char *s;
    size_t n, cap;
    int failed;
} sbuf_t;

static void sb_printf(sbuf_t *b, const char *fmt, ...) PATINA_PRINTF(2, 3);

static void sb_printf(sbuf_t *b, const char *fmt, ...)
{
    va_list ap;
    int len;
    if (b->failed) return;
    for (;;) {
        size_t room = b->cap - b->n;
        va_start(ap, fmt);
        len = vsnprintf(b->s ? b->s + b->n : NULL, room, fmt, ap);
        va_end(ap);
        if (len < 0) {
            b->failed = 1;
            return;
        }
        if ((size_t)len < room) {
            b->n += (size_t)len;
            return;
        }
        {
            size_t ncap = b->cap ? b->cap * 2 : 65536;
            char *ns;
            while (ncap < b->n + (size_t)len + 1) ncap *= 2;
            ns = realloc(b->s, ncap);
            if (!ns) {
                b->failed = 1;
                return;
            }
            b->s = ns;
            b->cap = ncap;
        }
    }
}

static void sb_double(sbuf_t *b, double v)
{
    if (isfinite(v))
        sb_printf(b, "%.17g", v);
    else
        sb_printf(b, "null");
}

/* values (nd*na) laid out [d][a] with stride `step`, as [[..],[..]]. */
static void sb_grid(sbuf_t *b, const double *v, size_t step, int nd, int na)
{
    sb_printf(b, "[");
    for (int d = 0; d < nd; d++) {
        sb_printf(b, "%s[", d ? "," : "");
        for (int a = 0; a < na; a++) {
            if (a) sb_printf(b, ",");
            sb_double(b, v[((size_t)d * (size_t)na + (size_t)a) * step]);
        }
        sb_printf(b, "]");
    }
    sb_printf(b, "]");
}

static patina_status glcm_json(const void *params, char **out, const patina_image_t *img)
{
    const glcm_params_t *p = params;
    glcm_req_t r;
    uint32_t *counts = NULL;
    double *props = NULL, *har = NULL, *agg = NULL;
    size_t noff, L, k;
    sbuf_t b = {0};
    patina_status s;
    *out = NULL;
    PATINA_TRY(params_req(&r, p, "glcm"));
    noff = glcm_noff(&r);
    L = (size_t)r.levels;
    PATINA_TRY(image_counts(&counts, &r, p->mask, img, 0));
    props = malloc(PATINA_GLCM_NPROPS * noff * sizeof *props);
    har = malloc(PATINA_HARALICK_N * noff * sizeof *har);
    agg = malloc(2 * PATINA_HARALICK_N * (size_t)r.nd * sizeof *agg);
    if (!props || !har || !agg) {
        s = patina__fail(PATINA_E_NOMEM, "glcm: out of memory");
        goto done;
    }
    patina_glcm_props(props, counts, r.levels, noff);
    patina_haralick(har, counts, r.levels, noff);
    patina_haralick_aggregate(agg, har, noff, (size_t)r.na);

    sb_printf(&b, "\"levels\":%d,\"symmetric\":%s,\"normed\":%s,", r.levels,
              r.symmetric ? "true" : "false", r.normed ? "true" : "false");
    if (!r.explicit_offsets) {
        sb_printf(&b, "\"distances\":[");
        for (int d = 0; d < r.nd; d++) {
            if (d) sb_printf(&b, ",");
            sb_double(&b, r.dist[d]);
        }
        sb_printf(&b, "],\"angles\":[");
        for (int a = 0; a < r.na; a++) {
            if (a) sb_printf(&b, ",");
            sb_double(&b, r.angle[a]);
        }
        sb_printf(&b, "],");
    }
    sb_printf(&b, "\"offsets\":[");
    for (int d = 0; d < r.nd; d++) {
        sb_printf(&b, "%s[", d ? "," : "");
        for (int a = 0; a < r.na; a++) {
            const patina_glcm_offset_t *o = &r.off[d * r.na + a];
            sb_printf(&b, "%s[%d,%d]", a ? "," : "", o->dy, o->dx);
        }
        sb_printf(&b, "]");
    }
    sb_printf(&b, "],\"glcm\":[");
    for (int d = 0; d < r.nd; d++) {
        sb_printf(&b, "%s[", d ? "," : "");
        for (int a = 0; a < r.na; a++) {
            const uint32_t *P = counts + ((size_t)d * (size_t)r.na + (size_t)a) * L * L;
            uint64_t T = 0;
            size_t i, j;
            if (r.normed)
                for (i = 0; i < L * L; i++) T += P[i];
            sb_printf(&b, "%s[", a ? "," : "");
            for (i = 0; i < L; i++) {
                sb_printf(&b, "%s[", i ? "," : "");
                for (j = 0; j < L; j++) {
                    if (j) sb_printf(&b, ",");
                    if (!r.normed)
                        sb_printf(&b, "%u", (unsigned)P[i * L + j]);
                    else if (T == 0 || P[i * L + j] == 0)
                        sb_printf(&b, "0");
                    else
                        sb_double(&b, (double)P[i * L + j] / (double)T);
                }
                sb_printf(&b, "]");
            }
            sb_printf(&b, "]");
        }
        sb_printf(&b, "]");
    }
    sb_printf(&b, "],\"props\":{");
    for (k = 0; k < PATINA_GLCM_NPROPS; k++) {
        sb_printf(&b, "%s\"%s\":", k ? "," : "", patina_glcm_prop_name((int)k));
        sb_grid(&b, props + k * noff, 1, r.nd, r.na);
    }
    sb_printf(&b, "},\"haralick\":{");
    for (k = 0; k < PATINA_HARALICK_N; k++) {
        sb_printf(&b, "%s\"%s\":", k ? "," : "", patina_haralick_name((int)k));
        sb_grid(&b, har + k, PATINA_HARALICK_N, r.nd, r.na);
    }
    sb_printf(&b, "},\"haralick_mean\":{");
    for (k = 0; k < PATINA_HARALICK_N; k++) {
        sb_printf(&b, "%s\"%s\":", k ? "," : "", patina_haralick_name((int)k));
        sb_grid(&b, agg + k, 2 * PATINA_HARALICK_N, r.nd, 1);
    }
    sb_printf(&b, "},\"haralick_range\":{");
    for (k = 0; k < PATINA_HARALICK_N; k++) {
        sb_printf(&b, "%s\"%s\":", k ? "," : "", patina_haralick_name((int)k));
        sb_grid(&b, agg + PATINA_HARALICK_N + k, 2 * PATINA_HARALICK_N, r.nd, 1);
    }
    sb_printf(&b, "}");
    if (b.failed) {
        s = patina__fail(PATINA_E_NOMEM, "glcm: out of memory for JSON");
        free(b.s);
        goto done;
    }
    *out = b.s;
    s = PATINA_OK;
done:
    free(counts);
    free(props);
    free(har);
    free(agg);
    return s;
}

/* ------------------------------------------------------------------ GPU */

/* The families on the GPU: the grey levels (the C reference's rules) and
 * the masks are made here, the counts and their features by the GPU
 * primitive patina_gpu_glcm_features, and the vectors finished here. The
 * GPU's host threads call gpu_rows to write each image's levels straight
 * into pinned staging, a batch while the previous one counts. */

typedef struct gpu_mask {
    int w, h;
    uint8_t *m;          /* (h, w) u8, NULL when it failed to load */
    patina_status st;
} gpu_mask_t;

typedef struct gpu_job {
    const glcm_req_t *r;
    const patina_image_t *imgs;
    const uint8_t **mask; /* (n): the mask of each image, NULL: none */
} gpu_job_t;

/* pgpu_glcm_rows_fn: grey and levels of rows [r0, r1) of image i, the
 * mask encoded as the GPU asks. */
static patina_status gpu_rows(void *arg, size_t i, int r0, int r1, uint8_t *dst, size_t pitch,
                              unsigned out_and, unsigned out_or)
{
    const gpu_job_t *j = arg;
    const patina_image_t *img = &j->imgs[i];
    const size_t w = (size_t)img->width;
    for (int r = r0; r < r1; r++) {
        uint8_t *d = dst + (size_t)(r - r0) * pitch;
        patina_image_t row = *img;
        patina_status s;
        row.data = img->data + (size_t)r * img->stride;
        row.height = 1;
        s = patina_image_to_grey(d, &row);
        if (s == PATINA_OK) s = patina_glcm_quantize(d, d, w, j->r->levels, (patina_glcm_quant)j->r->quant);
        if (s != PATINA_OK) { /* the image fails; its bytes must still be valid levels */
            for (int z = r0; z < r1; z++) memset(dst + (size_t)(z - r0) * pitch, 0, w);
            return s;
        }
        if (j->mask[i]) {
            const uint8_t *m = j->mask[i] + (size_t)r * w;
            for (size_t x = 0; x < w; x++)
                if (!m[x]) d[x] = (uint8_t)((d[x] & out_and) | out_or);
        }
    }
    return PATINA_OK;
}

/* The mask for a w x h image: loaded once per size (masks[0 .. *nm)). */
static patina_status gpu_mask_for(const uint8_t **out, gpu_mask_t *masks, size_t *nm, const char *path,
                                  int w, int h)
{
    gpu_mask_t *m = NULL;
    for (size_t k = 0; k < *nm; k++)
        if (masks[k].w == w && masks[k].h == h) m = &masks[k];
    if (!m) {
        m = &masks[(*nm)++];
        m->w = w;
        m->h = h;
        m->st = glcm_load_mask(&m->m, path, w, h);
    }
    *out = m->m;
    return m->st;
}

/* The glcm (haralick = 0) or haralick (form) vectors of n images. */
/* Whether the GPU makes the levels of device images itself (gpu_batch). */
static int levels_on_device(const glcm_req_t *r, const char *maskpath)
{
    return strcmp(maskpath, "none") == 0 && r->quant == PATINA_GLCM_QUANT_UNIFORM;
}

static patina_status gpu_batch(patina_gpu_t *g, double *out, const glcm_req_t *r, int haralick, int form,
                               const char *maskpath, const patina_image_t *imgs, size_t n,
                               patina_status *st)
{
    const int masked = strcmp(maskpath, "none") != 0;
    const size_t noff = glcm_noff(r), dim = haralick ? haralick_dim_req(r, form) : PATINA_GLCM_NPROPS * noff;
    int *w = calloc(n ? n : 1, sizeof *w), *h = calloc(n ? n : 1, sizeof *h);
    const uint8_t **mask = calloc(n ? n : 1, sizeof *mask);
    gpu_mask_t *masks = calloc(n ? n : 1, sizeof *masks);
    patina_status *pre = calloc(n ? n : 1, sizeof *pre), *rows_st = calloc(n ? n : 1, sizeof *rows_st);
    double *props = haralick ? NULL : malloc(n * noff * PATINA_GLCM_NPROPS * sizeof *props + 1);
    double *har = haralick ? malloc(n * noff * PATINA_HARALICK_N * sizeof *har + 1) : NULL;
    size_t nm = 0;
    patina_status s = PATINA_OK;
    if (!w || !h || !mask || !masks || !pre || !rows_st || (!props && !har)) {
        s = patina__fail(PATINA_E_NOMEM, "glcm: out of memory for a batch of %zu images", n);
        goto done;
    }
    for (size_t i = 0; i < n; i++) { /* what fails before counting fails alone, as on the CPU */
        const patina_image_t *im = &imgs[i];
        if (im->width < 0 || im->height < 0 ||
            (im->width > 0 && im->height > 0 && (!im->data || im->stride < 3 * (size_t)im->width)))
            pre[i] = patina__fail(PATINA_E_INVALID, "glcm: bad image");
        else
            pre[i] = glcm_check_size(im->width, im->height, r->symmetric, "glcm");
        if (pre[i] == PATINA_OK && masked)
            pre[i] = gpu_mask_for(&mask[i], masks, &nm, maskpath, im->width, im->height);
        if (pre[i] == PATINA_OK) {
            w[i] = im->width;
            h[i] = im->height;
        }
    }
    {
        gpu_job_t job = {r, imgs, mask};
        pgpu_glcm_src_t src = {n, w, h, masked, gpu_rows, &job, NULL, r->levels};
        patina_image_t *dev = NULL;
        if (levels_on_device(r, maskpath)) /* images decoded on the GPU: their levels are made there */
            for (size_t i = 0; i < n; i++)
                if (pre[i] == PATINA_OK && w[i] > 0 && h[i] > 0 && patina_gpu_image_on_device(&imgs[i])) {
                    if (!dev && !(dev = calloc(n, sizeof *dev))) {
                        s = patina__fail(PATINA_E_NOMEM, "glcm: out of memory for a batch of %zu images", n);
                        goto done;
                    }
                    dev[i] = imgs[i];
                }
        src.dev = dev;
        s = patina_gpu_glcm_features(g, props, har, &src, r->levels, r->off, noff, r->symmetric, rows_st);
        free(dev);
    }
    if (s != PATINA_OK) goto done;
    for (size_t i = 0; i < n; i++) {
        double *o = out + i * dim;
        const patina_status si = pre[i] != PATINA_OK ? pre[i] : rows_st[i];
        if (st) st[i] = si;
        if (si != PATINA_OK) {
            memset(o, 0, dim * sizeof *o);
            continue;
        }
        if (!haralick) { /* (noff, 10) -> [property][offset] */
            for (size_t k = 0; k < PATINA_GLCM_NPROPS; k++)
                for (size_t j = 0; j < noff; j++)
                    o[k * noff + j] = props[(i * noff + j) * PATINA_GLCM_NPROPS + k];
            continue;
        }
        if (form == 1 || form == 2) memcpy(o, har + i * noff * PATINA_HARALICK_N, noff * PATINA_HARALICK_N * sizeof *o);
        if (form == 0 || form == 2)
            patina_haralick_aggregate(o + (form == 2 ? noff * PATINA_HARALICK_N : 0),
                                      har + i * noff * PATINA_HARALICK_N, noff, (size_t)r->na);
    }
done:
    for (size_t k = 0; k < nm; k++) free(masks[k].m);
    free(w);
    free(h);
    free(mask);
    free(masks);
    free(pre);
    free(rows_st);
    free(props);
    free(har);
    return s;
}

/* Images decoded on the GPU (device pixels). Without a mask and with uniform
 * quantisation their levels are made on the device (pgpu_glcm_src_t.dev:
 * the pixels stay there); a mask or quant=none is applied on the host
 * (gpu_rows, the C reference's rules), so for those such images come to the
 * host first. *views = NULL when no image has to come (use imgs), else (n)
 * views: host copies of those, the other images borrowed; free_views frees
 * them. */
static void free_views(patina_image_t *views, size_t n);

static patina_status host_views(patina_image_t **views, const patina_image_t *imgs, size_t n, int on_device)
{
    size_t i, ndev = 0;
    *views = NULL;
    if (!on_device)
        for (i = 0; i < n; i++) ndev += patina_gpu_image_on_device(&imgs[i]) != 0;
    if (!ndev) return PATINA_OK;
    if (!(*views = calloc(n, sizeof **views)))
        return patina__fail(PATINA_E_NOMEM, "glcm: out of memory for %zu image views", n);
    for (i = 0; i < n; i++) {
        patina_status s = patina_gpu_image_host(&(*views)[i], &imgs[i]);
        if (s != PATINA_OK) { /* out of memory, or a CUDA error: the call fails */
            free_views(*views, i);
            *views = NULL;
            return s;
        }
    }
    return PATINA_OK;
}

static void free_views(patina_image_t *views, size_t n)
{
    if (!views) return;
    for (size_t i = 0; i < n; i++) patina_image_release(&views[i]);
    free(views);
}

/* A mask at levels = 256 leaves no spare level for the GPU: the C reference
 * runs the batch. */
static patina_status cpu_batch(patina_status (*one)(const void *, void *, const patina_image_t *),
                               const void *params, void *out, size_t bytes,
                               const patina_image_t *imgs, size_t n, patina_status *st)
{
    for (size_t i = 0; i < n; i++) {
        patina_status s = one(params, (unsigned char *)out + i * bytes, &imgs[i]);
        if (s != PATINA_OK) memset((unsigned char *)out + i * bytes, 0, bytes);
        if (st) st[i] = s;
    }
    return PATINA_OK;
}

/* Device images (decoded on the GPU) are read where they are when their
 * levels can be made on the device (levels_on_device, pgpu_glcm_src_t.dev);
 * otherwise host_views brings them to the host first. */
static patina_status glcm_gpu(patina_gpu_t *g, const void *params, void *out,
                              const patina_image_t *imgs, size_t n, patina_status *st)
{
    const glcm_params_t *p = params;
    glcm_req_t r;
    patina_image_t *views;
    patina_status s;
    PATINA_TRY(params_req(&r, p, "glcm"));
    PATINA_TRY(host_views(&views, imgs, n, levels_on_device(&r, p->mask)));
    if (strcmp(p->mask, "none") != 0 && r.levels > 255)
        s = cpu_batch(glcm_cpu, params, out, glcm_dim(params) * sizeof(double), views ? views : imgs, n, st);
    else
        s = gpu_batch(g, out, &r, 0, 0, p->mask, views ? views : imgs, n, st);
    free_views(views, n);
    return s;
}

static patina_status haralick_gpu(patina_gpu_t *g, const void *params, void *out,
                                  const patina_image_t *imgs, size_t n, patina_status *st)
{
    const glcm_params_t *p = params;
    glcm_req_t r;
    patina_image_t *views;
    patina_status s;
    PATINA_TRY(params_req(&r, p, "haralick"));
    PATINA_TRY(host_views(&views, imgs, n, levels_on_device(&r, p->mask)));
    if (strcmp(p->mask, "none") != 0 && r.levels > 255)
        s = cpu_batch(haralick_cpu, params, out, haralick_dim(params) * sizeof(double), views ? views : imgs, n,
                      st);
    else
        s = gpu_batch(g, out, &r, 1, p->form, p->mask, views ? views : imgs, n, st);
    free_views(views, n);
    return s;
}

const patina_family_t patina_family_glcm = {
    .name = "glcm",
    .uses = PATINA_CAP_SEARCH,
    .help = "grey-level co-occurrence matrices: scikit-image's graycoprops properties per offset "
            "(JSON: counts, properties, Haralick features)",
    .opts = glcm_opts,
    .nopts = sizeof glcm_opts / sizeof glcm_opts[0],
    .elem = PATINA_ELEM_F64,
    .dim = glcm_dim,
    .check = glcm_check,
    .distance = PDIST_L2,
    .cpu = glcm_cpu,
    .gpu = glcm_gpu,
    .hybrid = NULL,
    .json = glcm_json,
    .gpu_reads_device = 1,
};

const patina_family_t patina_family_haralick = {
    .name = "haralick",
    .uses = PATINA_CAP_SEARCH,
    .help = "Haralick's 14 texture features of the GLCM: mean and range over angles per "
            "distance (form=offsets: per offset)",
    .opts = haralick_opts,
    .nopts = sizeof haralick_opts / sizeof haralick_opts[0],
    .elem = PATINA_ELEM_F64,
    .dim = haralick_dim,
    .check = haralick_check,
    .distance = PDIST_STD_L2,
    .cpu = haralick_cpu,
    .gpu = haralick_gpu,
    .hybrid = NULL,
    .json = NULL,
    .gpu_reads_device = 1,
};
