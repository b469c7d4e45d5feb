/* Local texture patterns: the C reference (plain loops, one pixel at a time)
 * and what every implementation shares: configurations, scikit-image's
 * sample points, histogram bins and cells, and the histogram distances.
 *
 * The reference is deliberately naive: circular LBP is a transliteration of
 * scikit-image 0.19's _local_binary_pattern (skimage/feature/_texture.pyx)
 * and bilinear_interpolation (skimage/_shared/interpolation.pxd), lbp8,
 * tlbap and lanadp are the paper's Algorithms 1 and 2 with its weight
 * matrix. Faster code lives in lbp_fast.c (CPU) and src/gpu/lbp.cu. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "features/lbp.h"

/* ------------------------------------------------------------ configuration */

static int parse_grid(const char *s, int *rows, int *cols)
{
    /* "RxC": two decimal numbers in 1..256 without leading zeros. */
    const char *p = s;
    int v[2], k;
    for (k = 0; k < 2; k++) {
        int n = 0, digits = 0;
        if (*p == '0') return -1;
        while (*p >= '0' && *p <= '9') {
            n = n * 10 + (*p++ - '0');
            if (++digits > 3) return -1;
        }
        if (digits == 0 || n < 1 || n > 256) return -1;
        v[k] = n;
        if (k == 0 && *p++ != 'x') return -1;
    }
    if (*p) return -1;
    *rows = v[0];
    *cols = v[1];
    return 0;
}

static uint32_t necklaces(int P); /* rotation classes of P-bit patterns, P <= 16 */

patina_status lbp_conf_resolve(lbp_conf_t *c, int kind, const lbp_opts_t *o, const char *what)
{
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->mapping = o->mapping;
    c->norm = o->norm;
    c->distance = o->distance;
    c->vbins = o->vbins;
    c->hist_elem = o->norm == LBP_NORM_L1 ? PATINA_ELEM_F32 : PATINA_ELEM_U32;
    if (parse_grid(o->grid, &c->grid_rows, &c->grid_cols) != 0)
        return patina__fail(PATINA_E_INVALID,
                            "%s: option 'grid' wants ROWSxCOLS with each in 1..256, got '%s'",
                            what, o->grid);
    if (kind == LBP_KIND_CIRCULAR) {
        int P = o->P;
        c->P = P;
        c->R = o->R;
        c->method = o->method;
        c->border = 0;
        if (P < 1 || P > LBP_MAX_P)
            return patina__fail(PATINA_E_INVALID, "%s: P=%d is out of range [1, 32]", what, P);
        if (!(o->R > 0.0) || !((float)o->R > 0.0f) || !isfinite((float)o->R))
            return patina__fail(PATINA_E_INVALID,
                                "%s: R=%g must be > 0 (and > 0 in single precision)", what, o->R);
        if (o->method != LBP_M_DEFAULT && o->method != LBP_M_ROR && o->mapping != LBP_MAP_NONE)
            return patina__fail(PATINA_E_INVALID,
                                "%s: 'mapping' applies to method=default|ror only (uniform and "
                                "nri_uniform are mappings already)", what);
        switch (o->method) {
        case LBP_M_DEFAULT:
        case LBP_M_ROR: c->ncodes = (uint64_t)1 << P; break;
        case LBP_M_UNIFORM: c->ncodes = (uint64_t)P + 2; break;
        case LBP_M_NRI: c->ncodes = (uint64_t)P * (uint64_t)(P - 1) + 3; break;
        case LBP_M_VAR: c->ncodes = 0; break;
        default: return patina__fail(PATINA_E_INVALID, "%s: bad method %d", what, o->method);
        }
        if (o->method == LBP_M_VAR) {
            c->nbins = (uint32_t)o->vbins;
        } else {
            /* ror codes are rotation minima: binned by their rotation class
             * (ri) unless a coarser mapping is asked for */
            int m = o->method == LBP_M_DEFAULT ? o->mapping
                  : o->method == LBP_M_ROR     ? (o->mapping == LBP_MAP_NONE ? LBP_MAP_RI : o->mapping)
                                               : LBP_MAP_NONE;
            if ((m == LBP_MAP_RI || (m == LBP_MAP_NONE && o->method == LBP_M_DEFAULT)) && P > 16)
                return patina__fail(PATINA_E_INVALID,
                                    "%s: a histogram of %s codes for P=%d would need too many "
                                    "bins; use P <= 16, or mapping=u2|riu2, or method=uniform|"
                                    "nri_uniform", what,
                                    m == LBP_MAP_RI ? "rotation classes of" : "raw", P);
            switch (m) {
            case LBP_MAP_NONE: c->nbins = (uint32_t)c->ncodes; break;
            case LBP_MAP_U2: c->nbins = (uint32_t)(P * (P - 1) + 3); break;
            case LBP_MAP_RI: c->nbins = necklaces(P); break;
            case LBP_MAP_RIU2: c->nbins = (uint32_t)P + 2; break;
            }
        }
    } else {
        c->P = 8;
        c->method = LBP_M_DEFAULT;
        c->border = 1;
        c->ncodes = 256;
        if (kind == LBP_KIND_TLBAP) {
            if (!(o->th > 0.0 && o->th <= 1.0))
                return patina__fail(PATINA_E_INVALID, "%s: th=%g must be in (0, 1]", what, o->th);
            c->th = o->th;
        }
        switch (o->mapping) {
        case LBP_MAP_NONE: c->nbins = 256; break;
        case LBP_MAP_U2: c->nbins = 59; break;
        case LBP_MAP_RI: c->nbins = 36; break;
        case LBP_MAP_RIU2: c->nbins = 10; break;
        default: return patina__fail(PATINA_E_INVALID, "%s: bad mapping %d", what, o->mapping);
        }
    }
    c->code_elem = c->method == LBP_M_VAR   ? PATINA_ELEM_F64
                 : c->ncodes <= 256         ? PATINA_ELEM_U8
                 : c->ncodes <= 65536       ? PATINA_ELEM_U16
                                            : PATINA_ELEM_U32;
    if (lbp_dim(c) > LBP_MAX_DIM)
        return patina__fail(PATINA_E_LIMIT, "%s: %d x %d cells of %u bins is over %u elements",
                            what, c->grid_rows, c->grid_cols, c->nbins, LBP_MAX_DIM);
    return PATINA_OK;
}

void lbp_map_shape(const lbp_conf_t *c, int w, int h, int *mw, int *mh)
{
    *mw = lbp_map_side(c->kind, w);
    *mh = lbp_map_side(c->kind, h);
}

size_t lbp_dim(const lbp_conf_t *c)
{
    return (size_t)c->grid_rows * (size_t)c->grid_cols * (size_t)c->nbins;
}

/* ------------------------------------------------------------ sample points */

void lbp_circle(double rp[LBP_MAX_P], double cp[LBP_MAX_P], int P, double R)
{
    /* numpy: rr = -R * np.sin(2 * np.pi * np.arange(P) / P), with R the
     * binary32 value widened to double, then np.round(rr, 5), which is
     * rint(rr * 1e5) / 1e5. */
    const double two_pi = 2.0 * 3.141592653589793;
    double Rf = (double)(float)R;
    int k;
    for (k = 0; k < P; k++) {
        double theta = two_pi * (double)k / (double)P;
        double rr = -Rf * sin(theta);
        double cc = Rf * cos(theta);
        rp[k] = rint(rr * 100000.0) / 100000.0;
        cp[k] = rint(cc * 100000.0) / 100000.0;
    }
}

/* ------------------------------------------------------------ code maps */

patina_status lbp_map_alloc(patina_codemap_t *map, int w, int h, patina_elem elem)
{
    size_t n = (size_t)w * (size_t)h;
    memset(map, 0, sizeof *map);
    map->elem = elem;
    if (w < 0 || h < 0) return patina__fail(PATINA_E_INVALID, "lbp: bad map size %dx%d", w, h);
    if (n) {
        map->data = malloc(n * patina_elem_size(elem));
        if (!map->data)
            return patina__fail(PATINA_E_NOMEM, "lbp: out of memory for a %dx%d code map", w, h);
    }
    map->width = w;
    map->height = h;
    return PATINA_OK;
}

static void map_set(patina_codemap_t *map, size_t i, uint32_t code)
{
    switch (map->elem) {
    case PATINA_ELEM_U8: ((uint8_t *)map->data)[i] = (uint8_t)code; break;
    case PATINA_ELEM_U16: ((uint16_t *)map->data)[i] = (uint16_t)code; break;
    case PATINA_ELEM_U32: ((uint32_t *)map->data)[i] = code; break;
    default: break;
    }
}

double lbp_map_get(const patina_codemap_t *map, size_t i)
{
    switch (map->elem) {
    case PATINA_ELEM_U8: return ((const uint8_t *)map->data)[i];
    case PATINA_ELEM_U16: return ((const uint16_t *)map->data)[i];
    case PATINA_ELEM_U32: return ((const uint32_t *)map->data)[i];
    case PATINA_ELEM_F32: return ((const float *)map->data)[i];
    case PATINA_ELEM_F64: return ((const double *)map->data)[i];
    }
    return 0.0;
}

void patina_codemap_release(patina_codemap_t *map)
{
    if (!map) return;
    free(map->data);
    memset(map, 0, sizeof *map);
}

/* scikit-image's get_pixel2d in mode 'C' with cval 0. */
static double pixel_or_zero(const uint8_t *img, long rows, long cols, size_t stride, long r,
                            long c)
{
    if (r < 0 || r >= rows || c < 0 || c >= cols) return 0.0;
    return (double)img[(size_t)r * stride + (size_t)c];
}

/* scikit-image's bilinear_interpolation, statement by statement. */
static double bilinear(const uint8_t *img, long rows, long cols, size_t stride, double r,
                       double c)
{
    long minr = (long)floor(r), minc = (long)floor(c);
    long maxr = (long)ceil(r), maxc = (long)ceil(c);
    double dr = r - (double)minr, dc = c - (double)minc;
    double top_left = pixel_or_zero(img, rows, cols, stride, minr, minc);
    double top_right = pixel_or_zero(img, rows, cols, stride, minr, maxc);
    double bottom_left = pixel_or_zero(img, rows, cols, stride, maxr, minc);
    double bottom_right = pixel_or_zero(img, rows, cols, stride, maxr, maxc);
    double top = (1 - dc) * top_left + dc * top_right;
    double bottom = (1 - dc) * bottom_left + dc * bottom_right;
    return (1 - dr) * top + dr * bottom;
}

static uint32_t rotate_right(uint32_t value, int length)
{
    return (value >> 1) | ((value & 1u) << (length - 1));
}

uint32_t lbp_ref_code(const int *signed_texture, int P, int method)
{
    int i;
    if (method == LBP_M_UNIFORM || method == LBP_M_NRI) {
        int changes = 0;
        for (i = 0; i < P - 1; i++) changes += signed_texture[i] != signed_texture[i + 1];
        if (method == LBP_M_NRI) {
            /* uniform patterns: n_ones and the number of right rotations
             * ('rot_index') from the reference position, found from the
             * first one and the first zero */
            if (changes <= 2) {
                int n_ones = 0, first_one = -1, first_zero = -1;
                for (i = 0; i < P; i++) {
                    if (signed_texture[i]) {
                        n_ones++;
                        if (first_one == -1) first_one = i;
                    } else if (first_zero == -1) {
                        first_zero = i;
                    }
                }
                if (n_ones == 0) return 0;
                if (n_ones == P) return (uint32_t)(P * (P - 1) + 1);
                {
                    int rot_index = first_one == 0 ? n_ones - first_zero : P - first_one;
                    return (uint32_t)(1 + (n_ones - 1) * P + rot_index);
                }
            }
            return (uint32_t)(P * (P - 1) + 2);
        }
        if (changes <= 2) {
            uint32_t n = 0;
            for (i = 0; i < P; i++) n += (uint32_t)signed_texture[i];
            return n;
        }
        return (uint32_t)(P + 1);
    }
    {
        /* default: weights 2^i, unsigned (scikit-image's int32 weights
         * overflow at P = 32: docs/lbp.md) */
        uint32_t code = 0;
        for (i = 0; i < P; i++) code += (uint32_t)signed_texture[i] << i;
        if (method == LBP_M_ROR) {
            /* the least of the P right rotations */
            uint32_t chain = code, best = code;
            for (i = 1; i < P; i++) {
                chain = rotate_right(chain, P);
                if (chain < best) best = chain;
            }
            code = best;
        }
        return code;
    }
}

/* One pixel of circular LBP, as _local_binary_pattern's loop body: the
 * code, or for var the variance (NaN when it is 0). */
static double circular_pixel(const uint8_t *img, int w, int h, size_t stride, int r, int c,
                             int P, int method, const double *rp, const double *cp)
{
    double texture[LBP_MAX_P];
    int signed_texture[LBP_MAX_P];
    double centre = (double)img[(size_t)r * stride + (size_t)c];
    int i;

    for (i = 0; i < P; i++)
        texture[i] = bilinear(img, h, w, stride, (double)r + rp[i], (double)c + cp[i]);
    for (i = 0; i < P; i++) signed_texture[i] = texture[i] - centre >= 0 ? 1 : 0;

    if (method == LBP_M_VAR) {
        /* biased variance, as a running sum and sum of squares */
        double sum_ = 0.0, var_ = 0.0;
        for (i = 0; i < P; i++) {
            sum_ += texture[i];
            var_ += texture[i] * texture[i];
        }
        var_ = (var_ - (sum_ * sum_) / P) / P;
        return var_ != 0 ? var_ : NAN;
    }
    return (double)lbp_ref_code(signed_texture, P, method);
}

/* The 3x3 kinds, one window centred at (r, c) (1 <= r < h-1, 1 <= c < w-1),
 * following Algorithms 1 and 2 literally. */
static uint32_t window_code(const lbp_conf_t *conf, const uint8_t *img, size_t stride, int r,
                            int c)
{
    static const int power[3][3] = {{8, 4, 2}, {16, 0, 1}, {32, 64, 128}};
    const uint8_t *at = img + (size_t)r * stride + (size_t)c;
    int centre = at[0];
    uint32_t ans = 0;
    int i, j;

    if (conf->kind == LBP_KIND_LBP8) {
        for (i = -1; i <= 1; i++)
            for (j = -1; j <= 1; j++)
                if (at[(ptrdiff_t)i * (ptrdiff_t)stride + j] >= centre) ans += (uint32_t)power[i + 1][j + 1];
        return ans;
    }
    if (conf->kind == LBP_KIND_TLBAP) {
        int max = at[-(ptrdiff_t)stride];
        double th2;
        for (i = -1; i <= 1; i++)
            for (j = -1; j <= 1; j++)
                if (at[(ptrdiff_t)i * (ptrdiff_t)stride + j] > max) max = at[(ptrdiff_t)i * (ptrdiff_t)stride + j];
        th2 = conf->th * (double)max;
        for (i = -1; i <= 1; i++)
            for (j = -1; j <= 1; j++) {
                int v = at[(ptrdiff_t)i * (ptrdiff_t)stride + j];
                if (v > centre && (double)v > th2) ans += (uint32_t)power[i + 1][j + 1];
            }
        return ans;
    }
    {
        /* LANADP: mapping[1..8] = right, top-right, top, top-left, left,
         * bottom-left, bottom, bottom-right; power[i] = 2^(i-1). */
        static const int pw[9] = {0, 1, 2, 4, 8, 16, 32, 64, 128};
        const ptrdiff_t s = (ptrdiff_t)stride;
        int m[9];
        m[0] = 0;
        m[1] = at[1];
        m[2] = at[-s + 1];
        m[3] = at[-s];
        m[4] = at[-s - 1];
        m[5] = at[-1];
        m[6] = at[s - 1];
        m[7] = at[s];
        m[8] = at[s + 1];
        for (i = 1; i <= 8; i++) {
            /* circularIndex: i < 1 -> 8 + i; i > 8 -> (i % 9) + 1 */
            int a = i + 1 > 8 ? (i + 1) % 9 + 1 : i + 1;
            int b = i + 2 > 8 ? (i + 2) % 9 + 1 : i + 2;
            int d = i - 1 < 1 ? 8 + (i - 1) : i - 1;
            int e = i - 2 < 1 ? 8 + (i - 2) : i - 2;
            int sum1 = m[a] + m[b], sum2 = m[d] + m[e], value2 = 2 * m[i];
            /* avg1 >= value <=> sum1 >= 2 value, exactly */
            if ((sum1 >= value2 && sum2 >= value2) || (sum1 <= value2 && sum2 <= value2))
                ans += (uint32_t)pw[i];
        }
        return ans;
    }
}

patina_status lbp_ref_codes(patina_codemap_t *map, const lbp_conf_t *c, const uint8_t *grey,
                            int w, int h, size_t stride)
{
    int mw, mh, r, x;
    if (w < 0 || h < 0 || (w > 0 && h > 0 && (!grey || stride < (size_t)w)))
        return patina__fail(PATINA_E_INVALID, "lbp: bad grey image %dx%d stride %zu", w, h, stride);
    lbp_map_shape(c, w, h, &mw, &mh);
    PATINA_TRY(lbp_map_alloc(map, mw, mh, c->code_elem));
    map->code_limit = c->ncodes;
    if (c->kind == LBP_KIND_CIRCULAR) {
        double rp[LBP_MAX_P], cp[LBP_MAX_P];
        lbp_circle(rp, cp, c->P, c->R);
        for (r = 0; r < mh; r++)
            for (x = 0; x < mw; x++) {
                double v = circular_pixel(grey, w, h, stride, r, x, c->P, c->method, rp, cp);
                size_t i = (size_t)r * (size_t)mw + (size_t)x;
                if (c->method == LBP_M_VAR)
                    ((double *)map->data)[i] = v;
                else
                    map_set(map, i, (uint32_t)v);
            }
    } else {
        for (r = 0; r < mh; r++)
            for (x = 0; x < mw; x++)
                map_set(map, (size_t)r * (size_t)mw + (size_t)x,
                        window_code(c, grey, stride, r + 1, x + 1));
    }
    return PATINA_OK;
}

/* ------------------------------------------------------------- histograms */

static uint32_t ror_min(uint32_t v, int P) { return lbp_pattern_code(v, P, LBP_M_ROR); }

/* Rank of each rotation-minimal P-bit pattern among all of them (P <= 16),
 * built once per P. */
static _Atomic(uint32_t *) ri_tables[17];

static const uint32_t *ri_table(int P)
{
    uint32_t *t = atomic_load(&ri_tables[P]);
    if (!t) {
        uint32_t n = 1u << P, v, rank = 0;
        uint32_t *mine = malloc(sizeof *mine * n), *expected = NULL;
        if (!mine) return NULL;
        for (v = 0; v < n; v++) mine[v] = ror_min(v, P) == v ? rank++ : UINT32_MAX;
        if (atomic_compare_exchange_strong(&ri_tables[P], &expected, mine)) {
            t = mine;
        } else {
            free(mine);
            t = expected;
        }
    }
    return t;
}

static uint32_t necklaces(int P)
{
    uint32_t n = 1u << P, v, count = 0;
    for (v = 0; v < n; v++) count += ror_min(v, P) == v;
    return count;
}

static uint32_t bin_of(int P, int method, int mapping, uint32_t code, const uint32_t *ri)
{
    if (method == LBP_M_ROR && (mapping == LBP_MAP_NONE || mapping == LBP_MAP_RI)) return ri[code];
    if (method != LBP_M_DEFAULT && method != LBP_M_ROR) return code;
    switch (mapping) {
    case LBP_MAP_U2: return lbp_pattern_code(code, P, LBP_M_NRI);
    case LBP_MAP_RIU2: return lbp_pattern_code(code, P, LBP_M_UNIFORM);
    case LBP_MAP_RI: return ri[ror_min(code, P)];
    default: return code;
    }
}

uint32_t lbp_bin(const lbp_conf_t *c, uint32_t code)
{
    const uint32_t *ri = NULL;
    int need_ri = c->mapping == LBP_MAP_RI || (c->method == LBP_M_ROR && c->mapping == LBP_MAP_NONE);
    if (need_ri) {
        ri = ri_table(c->P);
        if (!ri) return 0; /* out of memory: lbp_bin_table reports it */
    }
    return bin_of(c->P, c->method, c->mapping, code, ri);
}

uint32_t lbp_var_bin(const lbp_conf_t *c, double var)
{
    double s;
    uint32_t b;
    if (!(var > 0.0)) return 0;
    s = sqrt(var) * (double)c->vbins / 128.0;
    b = s >= (double)c->vbins ? (uint32_t)c->vbins - 1 : (uint32_t)s;
    return b;
}

/* Code -> bin tables per (P, method, mapping) for codes < 2^16. */
static _Atomic(uint32_t *) bin_tables[LBP_MAX_P + 1][4][4];

const uint32_t *lbp_bin_table(const lbp_conf_t *c)
{
    uint32_t *t;
    int P = c->P;
    if (c->method == LBP_M_VAR || c->ncodes > 65536 || c->mapping < 0 || c->mapping > 3)
        return NULL;
    t = atomic_load(&bin_tables[P][c->method][c->mapping]);
    if (!t) {
        uint32_t n = (uint32_t)c->ncodes, v, *expected = NULL;
        uint32_t *mine = malloc(sizeof *mine * n);
        if (!mine) return NULL;
        for (v = 0; v < n; v++) mine[v] = lbp_bin(c, v);
        if (atomic_compare_exchange_strong(&bin_tables[P][c->method][c->mapping], &expected, mine)) {
            t = mine;
        } else {
            free(mine);
            t = expected;
        }
    }
    return t;
}

/* Pattern -> code tables per (P, method) for P <= 16. */
static _Atomic(uint32_t *) code_tables[17][4];

const uint32_t *lbp_code_table(int P, int method)
{
    uint32_t *t;
    if (P < 1 || P > 16 || method < LBP_M_DEFAULT || method > LBP_M_NRI) return NULL;
    t = atomic_load(&code_tables[P][method]);
    if (!t) {
        uint32_t n = 1u << P, v, *expected = NULL;
        uint32_t *mine = malloc(sizeof *mine * n);
        if (!mine) return NULL;
        for (v = 0; v < n; v++) mine[v] = lbp_pattern_code(v, P, method);
        if (atomic_compare_exchange_strong(&code_tables[P][method], &expected, mine)) {
            t = mine;
        } else {
            free(mine);
            t = expected;
        }
    }
    return t;
}

int lbp_cell_row(const lbp_conf_t *c, int mh, int y)
{
    return (int)((((int64_t)y + 1) * c->grid_rows - 1) / mh);
}

int lbp_cell_col(const lbp_conf_t *c, int mw, int x)
{
    return (int)((((int64_t)x + 1) * c->grid_cols - 1) / mw);
}

void lbp_hist_counts(uint32_t *counts, const lbp_conf_t *c, const patina_codemap_t *map)
{
    int x, y;
    memset(counts, 0, lbp_dim(c) * sizeof *counts);
    for (y = 0; y < map->height; y++) {
        int cr = lbp_cell_row(c, map->height, y);
        for (x = 0; x < map->width; x++) {
            size_t i = (size_t)y * (size_t)map->width + (size_t)x;
            size_t cell = (size_t)cr * (size_t)c->grid_cols + (size_t)lbp_cell_col(c, map->width, x);
            uint32_t bin = c->method == LBP_M_VAR ? lbp_var_bin(c, ((const double *)map->data)[i])
                                                   : lbp_bin(c, (uint32_t)lbp_map_get(map, i));
            counts[cell * c->nbins + bin]++;
        }
    }
}

void lbp_hist_finish(void *out, const lbp_conf_t *c, const uint32_t *counts)
{
    size_t n = lbp_dim(c), i;
    if (c->norm == LBP_NORM_COUNTS) {
        memcpy(out, counts, n * sizeof *counts);
    } else {
        uint64_t total = 0;
        float *f = out;
        for (i = 0; i < n; i++) total += counts[i];
        for (i = 0; i < n; i++) f[i] = total ? (float)((double)counts[i] / (double)total) : 0.0f;
    }
}

/* ------------------------------------------------------------- tlbap */

void lbp_tlbap_table(int k[256], double th)
{
    int m;
    for (m = 0; m < 256; m++) k[m] = (int)floor(th * (double)m);
}
