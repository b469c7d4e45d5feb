/* The fast CPU path of the local-pattern families: the same codes as the C
 * reference (lbp.c), computed a row at a time with SIMD-friendly loops and
 * spread over a thread pool in bands of rows.
 *
 * 3x3 kinds: 16 pixels per step in 8-bit vector arithmetic (GCC/Clang vector
 * extensions, SSE2 and up). TLBAP's threshold is exact in integers
 * (lbp_tlbap_table); LANADP compares sums against 2v through floor and ceiling
 * averages, which are exact in 8 bits: a+b >= 2v <=> floor((a+b)/2) >= v and
 * a+b <= 2v <=> ceil((a+b)/2) <= v.
 *
 * Circular LBP reproduces scikit-image's binary64 arithmetic operation for
 * operation, reorganised but not re-associated: bilinear interpolation is
 *   top = (1-dc)*tl + dc*tr,  bottom = (1-dc)*bl + dc*br,
 *   t = (1-dr)*top + dr*bottom,
 * where dc depends only on the column and the sample's column offset, and dr
 * only on the row and the row offset. So each input row's "top" values for
 * each distinct column offset are computed once into a ring of rows, and a
 * sample is then one lerp between two of them. When dc (dr) is 0 the
 * expression is exactly tl (top), which skips the work. The comparison
 * t - centre >= 0 is t >= centre for finite binary64 values. Columns and
 * rows outside the image read 0 (scikit-image's mode 'C', cval 0). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algo/clones.h"
#include "features/lbp.h"


typedef uint8_t u8x16 __attribute__((vector_size(16)));
typedef double f64x4 __attribute__((vector_size(32)));
typedef int64_t i64x4 __attribute__((vector_size(32)));

static inline u8x16 ld16(const uint8_t *p)
{
    u8x16 v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Unaligned 4-double loads and stores (macros: a function returning a
 * 32-byte vector would change the ABI between the AVX2 clone and the
 * default one). */
#define ld4(p) (__extension__({ f64x4 v_; memcpy(&v_, (p), sizeof v_); v_; }))
#define st4(p, v) do { f64x4 s_ = (v); memcpy((p), &s_, sizeof s_); } while (0)

/* ------------------------------------------------------------- 3x3 rows */

/* Codes of one output row: centres at m[1 .. n], rows a (above), m, b
 * (below). out has n entries. */
static void row_lbp8(uint8_t *out, const uint8_t *a, const uint8_t *m, const uint8_t *b, int n)
{
    int x = 0;
    for (; x + 16 <= n; x += 16) {
        u8x16 c = ld16(m + x + 1);
        u8x16 code = (u8x16)(ld16(m + x + 2) >= c) & 1;
        code |= (u8x16)(ld16(a + x + 2) >= c) & 2;
        code |= (u8x16)(ld16(a + x + 1) >= c) & 4;
        code |= (u8x16)(ld16(a + x) >= c) & 8;
        code |= (u8x16)(ld16(m + x) >= c) & 16;
        code |= (u8x16)(ld16(b + x) >= c) & 32;
        code |= (u8x16)(ld16(b + x + 1) >= c) & 64;
        code |= (u8x16)(ld16(b + x + 2) >= c) & 128;
        memcpy(out + x, &code, 16);
    }
    for (; x < n; x++) {
        int nb[8] = {m[x + 2], a[x + 2], a[x + 1], a[x], m[x], b[x], b[x + 1], b[x + 2]};
        out[x] = (uint8_t)lbp8_code(nb, m[x + 1]);
    }
}

static inline u8x16 vmax8(u8x16 p, u8x16 q)
{
    u8x16 gt = (u8x16)(p > q);
    return (p & gt) | (q & ~gt);
}

static void row_tlbap(uint8_t *out, const uint8_t *a, const uint8_t *m, const uint8_t *b, int n,
                      const int *kt)
{
    int x = 0, l;
    for (; x + 16 <= n; x += 16) {
        u8x16 c = ld16(m + x + 1);
        u8x16 nb[8] = {ld16(m + x + 2), ld16(a + x + 2), ld16(a + x + 1), ld16(a + x),
                       ld16(m + x),     ld16(b + x),     ld16(b + x + 1), ld16(b + x + 2)};
        u8x16 mx = c, k, code = {0};
        uint8_t lane[16];
        for (l = 0; l < 8; l++) mx = vmax8(mx, nb[l]);
        memcpy(lane, &mx, 16);
        for (l = 0; l < 16; l++) lane[l] = (uint8_t)kt[lane[l]];
        memcpy(&k, lane, 16);
        for (l = 0; l < 8; l++) code |= (u8x16)(nb[l] > c) & (u8x16)(nb[l] > k) & (uint8_t)(1u << l);
        memcpy(out + x, &code, 16);
    }
    for (; x < n; x++) {
        int nb[8] = {m[x + 2], a[x + 2], a[x + 1], a[x], m[x], b[x], b[x + 1], b[x + 2]};
        int c = m[x + 1];
        out[x] = (uint8_t)tlbap_code_k(nb, c, kt[lbp_max9(nb, c)]);
    }
}

static void row_lanadp(uint8_t *out, const uint8_t *a, const uint8_t *m, const uint8_t *b, int n)
{
    int x = 0, k;
    for (; x + 16 <= n; x += 16) {
        u8x16 nb[8] = {ld16(m + x + 2), ld16(a + x + 2), ld16(a + x + 1), ld16(a + x),
                       ld16(m + x),     ld16(b + x),     ld16(b + x + 1), ld16(b + x + 2)};
        u8x16 lo[8], hi[8], code = {0};
        for (k = 0; k < 8; k++) {        /* pair (k, k+1): floor and ceiling of the mean */
            u8x16 p = nb[k], q = nb[(k + 1) & 7], half = (p ^ q) >> 1;
            lo[k] = (p & q) + half;
            hi[k] = (p | q) - half;
        }
        for (k = 0; k < 8; k++) {
            /* s1 = n[k+1] + n[k+2]: pair k+1; s2 = n[k-2] + n[k-1]: pair k-2 */
            int j1 = (k + 1) & 7, j2 = (k + 6) & 7;
            u8x16 v = nb[k];
            u8x16 ge = (u8x16)(lo[j1] >= v) & (u8x16)(lo[j2] >= v);
            u8x16 le = (u8x16)(hi[j1] <= v) & (u8x16)(hi[j2] <= v);
            code |= (ge | le) & (uint8_t)(1u << k);
        }
        memcpy(out + x, &code, 16);
    }
    for (; x < n; x++) {
        int nb[8] = {m[x + 2], a[x + 2], a[x + 1], a[x], m[x], b[x], b[x + 1], b[x + 2]};
        out[x] = (uint8_t)lanadp_code(nb);
    }
}

/* -------------------------------------------------------- circular tables */

/* Per image, read-only, shared by the workers. */
typedef struct circ {
    int P, w, h, span, K;       /* ring of K = 2*span+1 input rows */
    int nu;                     /* distinct column offsets */
    double rp[LBP_MAX_P];
    int u_of[LBP_MAX_P];        /* sample -> column offset index */
    int off[LBP_MAX_P];         /* per offset: floor(cp) */
    int isint[LBP_MAX_P];       /* per offset: cp is an integer (dc == 0 everywhere) */
    double *dc, *omdc;          /* per offset: (nu, w) dc and 1 - dc */
    int pad;                    /* zero columns each side of a converted row */
} circ_t;

static void circ_free(circ_t *t)
{
    free(t->dc);
    free(t->omdc);
}

static patina_status circ_init(circ_t *t, const lbp_conf_t *c, int w, int h)
{
    double rp[LBP_MAX_P], cp[LBP_MAX_P], ucp[LBP_MAX_P];
    int k, u, x, maxoff = 0;
    memset(t, 0, sizeof *t);
    lbp_circle(rp, cp, c->P, c->R);
    t->P = c->P;
    t->w = w;
    t->h = h;
    for (k = 0; k < c->P; k++) {
        t->rp[k] = rp[k];
        for (u = 0; u < t->nu; u++)
            if (ucp[u] == cp[k]) break;
        if (u == t->nu) ucp[t->nu++] = cp[k];
        t->u_of[k] = u;
        if ((int)ceil(fabs(rp[k])) > t->span) t->span = (int)ceil(fabs(rp[k]));
    }
    t->span += 1;
    t->K = 2 * t->span + 1;
    t->dc = malloc(sizeof(double) * (size_t)t->nu * (size_t)(w > 0 ? w : 1));
    t->omdc = malloc(sizeof(double) * (size_t)t->nu * (size_t)(w > 0 ? w : 1));
    if (!t->dc || !t->omdc) {
        circ_free(t);
        return patina__fail(PATINA_E_NOMEM, "lbp: out of memory for sample tables");
    }
    for (u = 0; u < t->nu; u++) {
        double f = floor(ucp[u]);
        t->off[u] = (int)f;
        t->isint[u] = f == ucp[u];
        if (abs(t->off[u]) + 1 > maxoff) maxoff = abs(t->off[u]) + 1;
        for (x = 0; x < w; x++) {
            double cc = (double)x + ucp[u];
            double minc = floor(cc);
            /* the ring rows read columns x + off and x + off + 1: that is
             * scikit-image's floor/ceil of x + cp as long as the sum does not
             * round across an integer (it cannot for |x| < 2^31) */
            if (minc != (double)x + f) {
                circ_free(t);
                return patina__fail(PATINA_E_INTERNAL, "lbp: column %d offset %.17g rounds", x,
                                    ucp[u]);
            }
            t->dc[(size_t)u * (size_t)w + (size_t)x] = cc - minc;
            t->omdc[(size_t)u * (size_t)w + (size_t)x] = 1 - (cc - minc);
        }
    }
    t->pad = maxoff + 1;
    return PATINA_OK;
}

/* Per worker scratch for one band. */
typedef struct circ_scratch {
    double *ring;       /* (K, nu, w) */
    int *ring_row;      /* input row held by each slot (INT32_MIN: none) */
    double *zero;       /* w zeros */
    double *conv;       /* w + 2*pad: one input row as doubles, zero-padded */
    double *centre;     /* w */
    int64_t *bits;      /* w (i64 lanes, to match the f64 compare masks) */
} circ_scratch_t;

static void scratch_free(circ_scratch_t *s)
{
    free(s->ring);
    free(s->ring_row);
    free(s->zero);
    free(s->conv);
    free(s->centre);
    free(s->bits);
    memset(s, 0, sizeof *s);
}

static int scratch_init(circ_scratch_t *s, const circ_t *t)
{
    size_t w = (size_t)t->w + 4; /* room for the vector tails */
    int i;
    memset(s, 0, sizeof *s);
    s->ring = malloc(sizeof(double) * (size_t)t->K * (size_t)t->nu * w);
    s->ring_row = malloc(sizeof(int) * (size_t)t->K);
    s->zero = calloc(w, sizeof(double));
    s->conv = malloc(sizeof(double) * (w + 2 * (size_t)t->pad));
    s->centre = malloc(sizeof(double) * w);
    s->bits = malloc(sizeof(int64_t) * w);
    if (!s->ring || !s->ring_row || !s->zero || !s->conv || !s->centre || !s->bits) {
        scratch_free(s);
        return -1;
    }
    for (i = 0; i < t->K; i++) s->ring_row[i] = INT32_MIN;
    return 0;
}

/* "top" values of input row y for every column offset: the ring slot of y. */
PATINA_CLONES
static void horizontal(double *slot, const circ_t *t, double *conv, const uint8_t *row)
{
    const int w = t->w, pad = t->pad;
    int u, x;
    memset(conv, 0, sizeof(double) * (size_t)(w + 2 * pad));
    for (x = 0; x < w; x++) conv[pad + x] = (double)row[x];
    for (u = 0; u < t->nu; u++) {
        double *o = slot + (size_t)u * (size_t)(w + 4);
        const double *p = conv + pad + t->off[u];
        if (t->isint[u]) {
            memcpy(o, p, sizeof(double) * (size_t)w);
            continue;
        }
        {
            const double *dc = t->dc + (size_t)u * (size_t)w, *om = t->omdc + (size_t)u * (size_t)w;
            for (x = 0; x + 4 <= w; x += 4)
                st4(o + x, ld4(om + x) * ld4(p + x) + ld4(dc + x) * ld4(p + x + 1));
            for (; x < w; x++) o[x] = om[x] * p[x] + dc[x] * p[x + 1];
        }
    }
}

static const double *ring_get(circ_scratch_t *s, const circ_t *t, const uint8_t *grey,
                              size_t stride, int y, int u)
{
    int slot;
    if (y < 0 || y >= t->h) return s->zero;
    slot = y % t->K;
    if (s->ring_row[slot] != y) {
        horizontal(s->ring + (size_t)slot * (size_t)t->nu * (size_t)(t->w + 4), t, s->conv,
                   grey + (size_t)y * stride);
        s->ring_row[slot] = y;
    }
    return s->ring + ((size_t)slot * (size_t)t->nu + (size_t)u) * (size_t)(t->w + 4);
}

/* One sample of an output row: its two ring rows and row weights. */
typedef struct samp {
    const double *hmin, *hmax;
    double dr, omdr;
    int flat;               /* dr == 0: the sample is hmin exactly */
} samp_t;

/* All P samples of one output row, four pixels at a time with everything in
 * registers: bits[x] = the sign pattern, and for var the biased variance
 * (sum and sum of squares accumulated in sample order, as scikit-image). */
PATINA_CLONES
static void circ_row(const samp_t *sm, int P, int w, const double *centre, int64_t *bits,
                     double *var)
{
    const double Pd = (double)P;
    int x = 0, k;
    for (; x + 8 <= w; x += 8) {
            /* two vectors per step: independent chains for the pipelines */
            const f64x4 c0 = ld4(centre + x), c1 = ld4(centre + x + 4);
            i64x4 b0 = {0, 0, 0, 0}, b1 = {0, 0, 0, 0};
            f64x4 s0 = {0, 0, 0, 0}, s1 = {0, 0, 0, 0}, q0 = {0, 0, 0, 0}, q1 = {0, 0, 0, 0};
            for (k = 0; k < P; k++) {
                const int64_t bit = (int64_t)1 << k;
                const i64x4 vbit = {bit, bit, bit, bit};
                f64x4 v0, v1;
                if (sm[k].flat) {
                    v0 = ld4(sm[k].hmin + x);
                    v1 = ld4(sm[k].hmin + x + 4);
                } else {
                    const f64x4 om = {sm[k].omdr, sm[k].omdr, sm[k].omdr, sm[k].omdr};
                    const f64x4 d = {sm[k].dr, sm[k].dr, sm[k].dr, sm[k].dr};
                    v0 = om * ld4(sm[k].hmin + x) + d * ld4(sm[k].hmax + x);
                    v1 = om * ld4(sm[k].hmin + x + 4) + d * ld4(sm[k].hmax + x + 4);
                }
                b0 |= (v0 >= c0) & vbit;
                b1 |= (v1 >= c1) & vbit;
                if (var) {
                    s0 += v0;
                    s1 += v1;
                    q0 += v0 * v0;
                    q1 += v1 * v1;
                }
            }
            memcpy(bits + x, &b0, sizeof b0);
            memcpy(bits + x + 4, &b1, sizeof b1);
            if (var) {
                st4(var + x, (q0 - (s0 * s0) / Pd) / Pd);
                st4(var + x + 4, (q1 - (s1 * s1) / Pd) / Pd);
            }
        }
    for (; x + 4 <= w; x += 4) {
        const f64x4 c = ld4(centre + x);
        i64x4 b = {0, 0, 0, 0};
        f64x4 sum = {0, 0, 0, 0}, sq = {0, 0, 0, 0};
        for (k = 0; k < P; k++) {
            const int64_t bit = (int64_t)1 << k;
            const i64x4 vbit = {bit, bit, bit, bit};
            f64x4 v;
            if (sm[k].flat) {
                v = ld4(sm[k].hmin + x);
            } else {
                const f64x4 om = {sm[k].omdr, sm[k].omdr, sm[k].omdr, sm[k].omdr};
                const f64x4 d = {sm[k].dr, sm[k].dr, sm[k].dr, sm[k].dr};
                v = om * ld4(sm[k].hmin + x) + d * ld4(sm[k].hmax + x);
            }
            b |= (v >= c) & vbit;
            if (var) {
                sum += v;
                sq += v * v;
            }
        }
        memcpy(bits + x, &b, sizeof b);
        if (var) st4(var + x, (sq - (sum * sum) / Pd) / Pd);
    }
    for (; x < w; x++) {
        int64_t b = 0;
        double sum = 0.0, sq = 0.0;
        for (k = 0; k < P; k++) {
            double v = sm[k].flat ? sm[k].hmin[x] : sm[k].omdr * sm[k].hmin[x] + sm[k].dr * sm[k].hmax[x];
            b |= v >= centre[x] ? (int64_t)1 << k : 0;
            if (var) {
                sum += v;
                sq += v * v;
            }
        }
        bits[x] = b;
        if (var) var[x] = (sq - (sum * sum) / Pd) / Pd;
    }
}

/* Codes of one row from sign patterns (methods other than default and var,
 * without a table: P > 16). Cloned for hardware popcount. */
PATINA_CLONES
static void pattern_codes(uint32_t *codes, const int64_t *bits, int w, int P, int method)
{
    int x;
    for (x = 0; x < w; x++) codes[x] = lbp_pattern_code((uint32_t)bits[x], P, method);
}

/* ------------------------------------------------------------- the bands */

typedef struct job {
    const lbp_conf_t *c;
    const uint8_t *grey;
    int w, h;
    size_t stride;
    int mw, mh;
    int band;                   /* output rows per task */
    const circ_t *circ;         /* circular only */
    const uint32_t *codetab;    /* circular, P <= 16: sign pattern -> code */
    int kt[256];                /* tlbap thresholds */
    patina_codemap_t *map;      /* codes out, or NULL */
    uint32_t *counts;           /* (workers, dim) histogram counts, or NULL */
    size_t dim;
    const uint32_t *bins;       /* code -> bin table, or NULL */
    int *cellcol;               /* mw: grid column of each map column */
    int failed;                 /* a worker ran out of memory */
} job_t;

static void emit_row(job_t *j, int worker, int y, const uint32_t *codes32, const uint8_t *codes8,
                     const double *vars)
{
    const lbp_conf_t *c = j->c;
    int x;
    if (j->map) {
        size_t base = (size_t)y * (size_t)j->mw;
        switch (j->map->elem) {
        case PATINA_ELEM_U8:
            if (codes8)
                memcpy((uint8_t *)j->map->data + base, codes8, (size_t)j->mw);
            else
                for (x = 0; x < j->mw; x++) ((uint8_t *)j->map->data)[base + x] = (uint8_t)codes32[x];
            break;
        case PATINA_ELEM_U16:
            for (x = 0; x < j->mw; x++) ((uint16_t *)j->map->data)[base + x] = (uint16_t)codes32[x];
            break;
        case PATINA_ELEM_U32:
            memcpy((uint32_t *)j->map->data + base, codes32, sizeof(uint32_t) * (size_t)j->mw);
            break;
        case PATINA_ELEM_F64:
            memcpy((double *)j->map->data + base, vars, sizeof(double) * (size_t)j->mw);
            break;
        default: break;
        }
    }
    if (j->counts) {
        uint32_t *h = j->counts + (size_t)worker * j->dim +
                      (size_t)lbp_cell_row(c, j->mh, y) * (size_t)c->grid_cols * c->nbins;
        if (c->grid_cols == 1) {
            if (vars)
                for (x = 0; x < j->mw; x++) h[lbp_var_bin(c, vars[x])]++;
            else if (codes8)
                for (x = 0; x < j->mw; x++) h[j->bins[codes8[x]]]++;
            else if (j->bins)
                for (x = 0; x < j->mw; x++) h[j->bins[codes32[x]]]++;
            else
                for (x = 0; x < j->mw; x++) h[lbp_bin(c, codes32[x])]++;
        } else {
            for (x = 0; x < j->mw; x++) {
                uint32_t b = vars ? lbp_var_bin(c, vars[x])
                           : codes8 ? j->bins[codes8[x]]
                           : j->bins ? j->bins[codes32[x]]
                                     : lbp_bin(c, codes32[x]);
                h[(size_t)j->cellcol[x] * c->nbins + b]++;
            }
        }
    }
}

static void band_3x3(job_t *j, int worker, int y0, int y1)
{
    uint8_t *codes = malloc((size_t)j->mw + 16);
    int y;
    if (!codes) {
        j->failed = 1;
        return;
    }
    for (y = y0; y < y1; y++) {
        const uint8_t *a = j->grey + (size_t)y * j->stride;
        const uint8_t *m = a + j->stride, *b = m + j->stride;
        switch (j->c->kind) {
        case LBP_KIND_LBP8: row_lbp8(codes, a, m, b, j->mw); break;
        case LBP_KIND_TLBAP: row_tlbap(codes, a, m, b, j->mw, j->kt); break;
        default: row_lanadp(codes, a, m, b, j->mw); break;
        }
        emit_row(j, worker, y, NULL, codes, NULL);
    }
    free(codes);
}

static void band_circular(job_t *j, int worker, int y0, int y1)
{
    const circ_t *t = j->circ;
    const lbp_conf_t *c = j->c;
    const int var = c->method == LBP_M_VAR, w = j->w, P = c->P;
    circ_scratch_t s;
    uint32_t *codes = malloc(sizeof(uint32_t) * (size_t)(w > 0 ? w : 1));
    double *vars = var ? malloc(sizeof(double) * (size_t)(w > 0 ? w : 1)) : NULL;
    int y, k, x;
    if (!codes || (var && !vars) || scratch_init(&s, t) != 0) {
        free(codes);
        free(vars);
        j->failed = 1;
        return;
    }
    for (y = y0; y < y1; y++) {
        const uint8_t *row = j->grey + (size_t)y * j->stride;
        samp_t sm[LBP_MAX_P];
        for (x = 0; x < w; x++) s.centre[x] = (double)row[x];
        /* all ring rows first (ring_get may compute a row), then the samples */
        for (k = 0; k < P; k++) {
            double yy = (double)y + t->rp[k];
            double minr = floor(yy), maxr = ceil(yy);
            sm[k].hmin = ring_get(&s, t, j->grey, j->stride, (int)minr, t->u_of[k]);
            sm[k].hmax = ring_get(&s, t, j->grey, j->stride, (int)maxr, t->u_of[k]);
            sm[k].dr = yy - minr;
            sm[k].omdr = 1 - sm[k].dr;
            sm[k].flat = sm[k].dr == 0.0;
        }
        circ_row(sm, P, w, s.centre, s.bits, var ? vars : NULL);
        if (var) {
            for (x = 0; x < w; x++)
                if (vars[x] == 0) vars[x] = NAN;
        } else if (c->method == LBP_M_DEFAULT) {
            for (x = 0; x < w; x++) codes[x] = (uint32_t)s.bits[x];
        } else if (j->codetab) {
            for (x = 0; x < w; x++) codes[x] = j->codetab[s.bits[x]];
        } else {
            pattern_codes(codes, s.bits, w, P, c->method);
        }
        emit_row(j, worker, y, codes, NULL, vars);
    }
    scratch_free(&s);
    free(codes);
    free(vars);
}

static void run_band(void *arg, size_t i, int worker)
{
    job_t *j = arg;
    int y0 = (int)i * j->band, y1 = y0 + j->band;
    if (y1 > j->mh) y1 = j->mh;
    if (j->c->kind == LBP_KIND_CIRCULAR)
        band_circular(j, worker, y0, y1);
    else
        band_3x3(j, worker, y0, y1);
}

static patina_status run(job_t *j, patina_pool_t *pool)
{
    int workers = patina_pool_size(pool);
    size_t tasks;
    /* about four bands per worker, at least 8 rows each */
    j->band = j->mh / (4 * workers);
    if (j->band < 8) j->band = 8;
    tasks = (size_t)((j->mh + j->band - 1) / j->band);
    patina_pool_run(pool, tasks, run_band, j);
    if (j->failed) return patina__fail(PATINA_E_NOMEM, "lbp: out of memory for row buffers");
    return PATINA_OK;
}

static patina_status prepare(job_t *j, const lbp_conf_t *c, const uint8_t *grey, int w, int h,
                             size_t stride, circ_t *circ)
{
    memset(j, 0, sizeof *j);
    if (w < 0 || h < 0 || (w > 0 && h > 0 && (!grey || stride < (size_t)w)))
        return patina__fail(PATINA_E_INVALID, "lbp: bad grey image %dx%d stride %zu", w, h, stride);
    j->c = c;
    j->grey = grey;
    j->w = w;
    j->h = h;
    j->stride = stride;
    lbp_map_shape(c, w, h, &j->mw, &j->mh);
    if (c->kind == LBP_KIND_TLBAP) lbp_tlbap_table(j->kt, c->th);
    if (c->kind == LBP_KIND_CIRCULAR && j->mw > 0 && j->mh > 0) {
        if (c->method != LBP_M_DEFAULT && c->method != LBP_M_VAR && c->P <= 16) {
            j->codetab = lbp_code_table(c->P, c->method);
            if (!j->codetab) return patina__fail(PATINA_E_NOMEM, "lbp: out of memory for a code table");
        }
        PATINA_TRY(circ_init(circ, c, w, h));
        j->circ = circ;
    }
    return PATINA_OK;
}

patina_status lbp_fast_codes(patina_codemap_t *map, const lbp_conf_t *c, const uint8_t *grey,
                             int w, int h, size_t stride, patina_pool_t *pool)
{
    job_t j;
    circ_t circ;
    patina_status s;
    memset(map, 0, sizeof *map);
    PATINA_TRY(prepare(&j, c, grey, w, h, stride, &circ));
    s = lbp_map_alloc(map, j.mw, j.mh, c->code_elem);
    if (s == PATINA_OK) {
        map->code_limit = c->ncodes;
        j.map = map;
        if (j.mw > 0 && j.mh > 0) s = run(&j, pool);
        if (s != PATINA_OK) patina_codemap_release(map);
    }
    if (j.circ) circ_free(&circ);
    return s;
}

patina_status lbp_fast_counts(uint32_t *counts, const lbp_conf_t *c, const uint8_t *grey, int w,
                              int h, size_t stride, patina_pool_t *pool)
{
    job_t j;
    circ_t circ;
    patina_status s = PATINA_OK;
    size_t dim = lbp_dim(c), k;
    int workers = patina_pool_size(pool), x, wk;
    memset(counts, 0, dim * sizeof *counts);
    PATINA_TRY(prepare(&j, c, grey, w, h, stride, &circ));
    if (j.mw == 0 || j.mh == 0) goto out;
    j.dim = dim;
    j.bins = c->method == LBP_M_VAR ? NULL : lbp_bin_table(c);
    if (c->kind != LBP_KIND_CIRCULAR && !j.bins) {
        s = patina__fail(PATINA_E_NOMEM, "lbp: out of memory for the bin table");
        goto out;
    }
    j.counts = workers == 1 ? counts : calloc((size_t)workers * dim, sizeof *counts);
    j.cellcol = malloc(sizeof(int) * (size_t)j.mw);
    if (!j.counts || !j.cellcol) {
        s = patina__fail(PATINA_E_NOMEM, "lbp: out of memory for histograms");
        goto out;
    }
    for (x = 0; x < j.mw; x++) j.cellcol[x] = lbp_cell_col(c, j.mw, x);
    s = run(&j, pool);
    if (s == PATINA_OK && workers > 1)
        for (wk = 0; wk < workers; wk++)
            for (k = 0; k < dim; k++) counts[k] += j.counts[(size_t)wk * dim + k];
out:
    if (j.counts != counts) free(j.counts);
    free(j.cellcol);
    if (j.circ) circ_free(&circ);
    return s;
}
