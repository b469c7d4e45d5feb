/* Synthetic reference views of the rootsift family (option `views`): images
 * made from a reference at registration, each extracted like the reference
 * and stored as one more row block of its item's record (rootsift.h:
 * "Views"). Identification folds an item's rows back into the item
 * (src/identify/identify.c). What this file is not: a general image
 * library; it makes exactly the views below, deterministically (plain C,
 * doubles, no random parameter), on the grey levels the extractor reads.
 *
 * Views (W x H: the reference's size; docs/identify.md "Reference views"):
 *   SOFT_HALF  area average to 50% (round(W/2) x round(H/2)), then a
 *              Gaussian blur of sigma 1 px: a farther, softer capture;
 *   GEOMETRIC  a perspective view (the top corners moved inwards by 15% of
 *              the width, warped onto the full rectangle) rotated by 30
 *              degrees about the centre and cut to the largest upright
 *              rectangle inside: one inverse mapping per output pixel,
 *              bilinear sampling (edges replicated);
 *   SOFT_FULL  area average to 50%, bicubic (Keys, a = -0.75) back to
 *              W x H, then a Gaussian blur of sigma 1.5 px: a soft capture
 *              at the reference's own resolution.
 *   HALF       area average to 50%, no blur: not a reference view but the
 *              half-size query's image (patina_identify_extract_half).
 * The views of a table (rs_view_kind): views = 1 SOFT_HALF; 2 GEOMETRIC,
 * SOFT_FULL; 3 GEOMETRIC, SOFT_FULL, SOFT_HALF (2's blocks, then 1's).
 * Gaussian blurs: taps exp(-d^2 / 2 sigma^2), d = -r .. r, r = ceil(3 sigma),
 * normalised; borders mirrored without repeating the edge pixel. The view
 * is rounded to grey levels and handed to the extractor as an RGB image of
 * equal channels (whose luma is that grey level). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "features/rootsift.h"

#define PERSPECTIVE_INSET 0.15
#define ROTATION_DEGREES 30.0
#define PI 3.14159265358979323846

int rs_view_kind(int views, int v)
{
    static const int kinds[RS_VIEWS_MAX + 1][RS_VIEWS_MAX] = {
        {0},
        {RS_VIEW_SOFT_HALF},
        {RS_VIEW_GEOMETRIC, RS_VIEW_SOFT_FULL},
        {RS_VIEW_GEOMETRIC, RS_VIEW_SOFT_FULL, RS_VIEW_SOFT_HALF},
    };
    return views >= 1 && views <= RS_VIEWS_MAX && v >= 1 && v <= views ? kinds[views][v - 1] : 0;
}

/* ------------------------------------------------------------ resampling */

static int half(int n) { return (n + 1) / 2; } /* round(n / 2), halves up: at least 1 for n >= 1 */

/* Area average of the (h, w) floats g into (oh, ow): output pixel (i, j)
 * the mean of the input over [i sx, (i+1) sx) x [j sy, (j+1) sy), input
 * pixels weighted by the part they cover (rows first, then columns). */
static int area(float *out, int ow, int oh, const float *g, int w, int h)
{
    const double sx = (double)w / ow, sy = (double)h / oh;
    float *tmp = malloc((size_t)h * (size_t)ow * sizeof *tmp);
    if (!tmp) return 0;
    for (int i = 0; i < ow; i++) {
        const double a = i * sx, b = (i + 1) * sx;
        const int k0 = (int)floor(a), k1 = (int)ceil(b) < w ? (int)ceil(b) : w;
        for (int y = 0; y < h; y++) {
            double acc = 0.0;
            for (int k = k0; k < k1; k++) acc += ((b < k + 1 ? b : k + 1) - (a > k ? a : k)) * g[(size_t)y * w + k];
            tmp[(size_t)y * ow + i] = (float)(acc / sx);
        }
    }
    for (int j = 0; j < oh; j++) {
        const double a = j * sy, b = (j + 1) * sy;
        const int k0 = (int)floor(a), k1 = (int)ceil(b) < h ? (int)ceil(b) : h;
        for (int x = 0; x < ow; x++) {
            double acc = 0.0;
            for (int k = k0; k < k1; k++) acc += ((b < k + 1 ? b : k + 1) - (a > k ? a : k)) * tmp[(size_t)k * ow + x];
            out[(size_t)j * ow + x] = (float)(acc / sy);
        }
    }
    free(tmp);
    return 1;
}

/* Index i mirrored into [0, n) without repeating the edge (..., 2, 1, 0, 1, 2, ...). */
static int mirror(int i, int n)
{
    if (n == 1) return 0;
    while (i < 0 || i >= n) i = i < 0 ? -i : 2 * n - 2 - i;
    return i;
}

/* Gaussian blur of the (h, w) floats g in place (separable). */
static int blur(float *g, int w, int h, double sigma)
{
    const int r = (int)ceil(3.0 * sigma);
    double taps[64], sum = 0.0;
    float *tmp = malloc((size_t)w * (size_t)h * sizeof *tmp);
    if (!tmp || 2 * r + 1 > 64) {
        free(tmp);
        return 0;
    }
    for (int d = -r; d <= r; d++) sum += taps[d + r] = exp(-(double)d * d / (2.0 * sigma * sigma));
    for (int d = 0; d <= 2 * r; d++) taps[d] /= sum;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double acc = 0.0;
            for (int d = -r; d <= r; d++) acc += taps[d + r] * g[(size_t)y * w + mirror(x + d, w)];
            tmp[(size_t)y * w + x] = (float)acc;
        }
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double acc = 0.0;
            for (int d = -r; d <= r; d++) acc += taps[d + r] * tmp[(size_t)mirror(y + d, h) * w + x];
            g[(size_t)y * w + x] = (float)acc;
        }
    free(tmp);
    return 1;
}

/* Keys' cubic convolution weights (a = -0.75) of the 4 taps around t in [0, 1). */
static void cubic_weights(double t, double wt[4])
{
    const double a = -0.75, x0 = 1 + t, x1 = t, x2 = 1 - t, x3 = 2 - t;
    wt[0] = ((a * x0 - 5 * a) * x0 + 8 * a) * x0 - 4 * a;
    wt[1] = ((a + 2) * x1 - (a + 3)) * x1 * x1 + 1;
    wt[2] = ((a + 2) * x2 - (a + 3)) * x2 * x2 + 1;
    wt[3] = ((a * x3 - 5 * a) * x3 + 8 * a) * x3 - 4 * a;
}

static int clampi(int i, int n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }

/* Bicubic resize of the (h, w) floats g into (oh, ow): output pixel x reads
 * the input around (x + 0.5) w / ow - 0.5 (pixel centres aligned), edges
 * replicated; rows first, then columns. */
static int bicubic(float *out, int ow, int oh, const float *g, int w, int h)
{
    float *tmp = malloc((size_t)h * (size_t)ow * sizeof *tmp);
    if (!tmp) return 0;
    for (int x = 0; x < ow; x++) {
        const double s = (x + 0.5) * w / ow - 0.5;
        const int i0 = (int)floor(s);
        double wt[4];
        cubic_weights(s - i0, wt);
        for (int y = 0; y < h; y++) {
            double acc = 0.0;
            for (int k = 0; k < 4; k++) acc += wt[k] * g[(size_t)y * w + clampi(i0 - 1 + k, w)];
            tmp[(size_t)y * ow + x] = (float)acc;
        }
    }
    for (int y = 0; y < oh; y++) {
        const double s = (y + 0.5) * h / oh - 0.5;
        const int i0 = (int)floor(s);
        double wt[4];
        cubic_weights(s - i0, wt);
        for (int x = 0; x < ow; x++) {
            double acc = 0.0;
            for (int k = 0; k < 4; k++) acc += wt[k] * tmp[(size_t)clampi(i0 - 1 + k, h) * ow + x];
            out[(size_t)y * ow + x] = (float)acc;
        }
    }
    free(tmp);
    return 1;
}

/* --------------------------------------------------------- the geometric view */

/* The homography h (3x3 row-major, h[8] = 1) taking the four points src[i]
 * to dst[i] (x, y pairs): the 8x8 linear system by Gaussian elimination
 * with partial pivoting. 0 when it is singular. */
static int homography(double h[9], const double src[8], const double dst[8])
{
    double a[8][9];
    for (int i = 0; i < 4; i++) {
        const double x = src[2 * i], y = src[2 * i + 1], u = dst[2 * i], v = dst[2 * i + 1];
        const double r0[9] = {x, y, 1, 0, 0, 0, -u * x, -u * y, u}, r1[9] = {0, 0, 0, x, y, 1, -v * x, -v * y, v};
        memcpy(a[2 * i], r0, sizeof r0);
        memcpy(a[2 * i + 1], r1, sizeof r1);
    }
    for (int c = 0; c < 8; c++) {
        int p = c;
        for (int r = c + 1; r < 8; r++)
            if (fabs(a[r][c]) > fabs(a[p][c])) p = r;
        if (fabs(a[p][c]) < 1e-12) return 0;
        if (p != c)
            for (int k = 0; k < 9; k++) {
                double t = a[c][k];
                a[c][k] = a[p][k];
                a[p][k] = t;
            }
        for (int r = 0; r < 8; r++) {
            double f;
            if (r == c) continue;
            f = a[r][c] / a[c][c];
            for (int k = c; k < 9; k++) a[r][k] -= f * a[c][k];
        }
    }
    for (int i = 0; i < 8; i++) h[i] = a[i][8] / a[i][i];
    h[8] = 1;
    return 1;
}

/* The largest upright rectangle inside a w x h rectangle rotated by angle
 * (radians), its sides truncated to whole pixels. */
static void rotated_rect(int w, int h, double angle, int *cw, int *ch)
{
    const double lng = w > h ? w : h, sht = w > h ? h : w, s = fabs(sin(angle)), c = fabs(cos(angle));
    double wr, hr;
    if (sht <= 2.0 * s * c * lng || fabs(s - c) < 1e-10) {
        const double x = 0.5 * sht;
        wr = w >= h ? x / s : x / c;
        hr = w >= h ? x / c : x / s;
    } else {
        const double cos2a = c * c - s * s;
        wr = (w * c - h * s) / cos2a;
        hr = (h * c - w * s) / cos2a;
    }
    *cw = (int)wr;
    *ch = (int)hr;
}

/* The geometric view's geometry for a W x H reference: its size and the
 * mapping of a view pixel to the reference (rotation undone, then the
 * perspective's inverse). */
typedef struct geo {
    int cw, ch;      /* the view's size */
    double x0, y0;   /* the crop's corner on the rotated canvas */
    double a[6];     /* rotated canvas -> warped image (the rotation's inverse) */
    double hinv[9];  /* warped image -> reference (the perspective's inverse) */
} geo_t;

static int geo_init(geo_t *g, int W, int H)
{
    const double t = ROTATION_DEGREES * PI / 180.0, c = cos(t), s = sin(t);
    const double rect[8] = {0, 0, W, 0, W, H, 0, H};
    const double quad[8] = {PERSPECTIVE_INSET * W, 0, (1 - PERSPECTIVE_INSET) * W, 0, W, H, 0, H};
    const int nw = (int)(H * s + W * c), nh = (int)(H * c + W * s);
    /* the rotation about the reference's centre onto an nw x nh canvas:
     * p' = R p + tr, R = [c s; -s c] (counter-clockwise on screen) */
    const double cx = W / 2.0, cy = H / 2.0;
    const double tx = (1 - c) * cx - s * cy + nw / 2.0 - cx, ty = s * cx + (1 - c) * cy + nh / 2.0 - cy;
    rotated_rect(W, H, t, &g->cw, &g->ch);
    if (g->cw < 1 || g->ch < 1) return 0;
    g->x0 = (nw - g->cw) / 2;
    g->y0 = (nh - g->ch) / 2;
    /* p = R^T (p' - tr) */
    g->a[0] = c;
    g->a[1] = -s;
    g->a[2] = -(c * tx - s * ty);
    g->a[3] = s;
    g->a[4] = c;
    g->a[5] = -(s * tx + c * ty);
    return homography(g->hinv, rect, quad);
}

static void geo_map(const geo_t *g, double u, double v, double *x, double *y)
{
    const double bx = u + g->x0, by = v + g->y0;
    const double wx = g->a[0] * bx + g->a[1] * by + g->a[2], wy = g->a[3] * bx + g->a[4] * by + g->a[5];
    const double d = g->hinv[6] * wx + g->hinv[7] * wy + g->hinv[8];
    *x = (g->hinv[0] * wx + g->hinv[1] * wy + g->hinv[2]) / d;
    *y = (g->hinv[3] * wx + g->hinv[4] * wy + g->hinv[5]) / d;
}

static float bilinear(const float *g, int w, int h, double x, double y)
{
    const int x0 = (int)floor(x), y0 = (int)floor(y);
    const double fx = x - x0, fy = y - y0;
    const float *r0 = g + (size_t)clampi(y0, h) * w, *r1 = g + (size_t)clampi(y0 + 1, h) * w;
    const int a = clampi(x0, w), b = clampi(x0 + 1, w);
    return (float)((1 - fy) * ((1 - fx) * r0[a] + fx * r0[b]) + fy * ((1 - fx) * r1[a] + fx * r1[b]));
}

/* ------------------------------------------------------------------ views */

patina_status rs_view_make(patina_image_t *out, const patina_image_t *img, int kind)
{
    const int W = img->width, H = img->height;
    int w = 0, h = 0;
    uint8_t *grey = NULL;
    float *g = NULL, *v = NULL, *t = NULL;
    int ok = 1;
    memset(out, 0, sizeof *out);
    if (W <= 0 || H <= 0) return PATINA_OK; /* an empty view of an empty image */
    if (kind < RS_VIEW_SOFT_HALF || kind > RS_VIEW_HALF)
        return patina__fail(PATINA_E_INVALID, "rootsift: no view kind %d", kind);
    grey = malloc((size_t)W * H);
    g = malloc((size_t)W * H * sizeof *g);
    if (!grey || !g) goto nomem;
    {
        patina_status s = patina_image_to_grey(grey, img);
        if (s != PATINA_OK) {
            free(grey);
            free(g);
            return s;
        }
    }
    for (size_t i = 0; i < (size_t)W * H; i++) g[i] = grey[i];
    if (kind == RS_VIEW_GEOMETRIC) {
        geo_t geo;
        if (!geo_init(&geo, W, H)) { /* too thin to cut a rotated rectangle from: an empty view */
            free(grey);
            free(g);
            return PATINA_OK;
        }
        w = geo.cw;
        h = geo.ch;
        if (!(v = malloc((size_t)w * h * sizeof *v))) goto nomem;
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                double sx, sy;
                geo_map(&geo, x, y, &sx, &sy);
                v[(size_t)y * w + x] = bilinear(g, W, H, sx, sy);
            }
    } else {
        const int hw = half(W), hh = half(H);
        if (!(t = malloc((size_t)hw * hh * sizeof *t))) goto nomem;
        ok = area(t, hw, hh, g, W, H);
        if (ok && (kind == RS_VIEW_SOFT_HALF || kind == RS_VIEW_HALF)) {
            w = hw;
            h = hh;
            v = t;
            t = NULL;
            if (kind == RS_VIEW_SOFT_HALF) ok = blur(v, w, h, 1.0);
        } else if (ok) {
            w = W;
            h = H;
            if (!(v = malloc((size_t)w * h * sizeof *v))) goto nomem;
            ok = bicubic(v, w, h, t, hw, hh) && blur(v, w, h, 1.5);
        }
        if (!ok) goto nomem;
    }
    out->data = malloc((size_t)w * h * 3);
    if (!out->data) goto nomem;
    out->width = w;
    out->height = h;
    out->stride = (size_t)w * 3;
    out->owned = 1;
    for (size_t i = 0; i < (size_t)w * h; i++) {
        const double x = floor((double)v[i] + 0.5);
        const uint8_t q = (uint8_t)(x < 0 ? 0 : x > 255 ? 255 : x);
        out->data[3 * i] = out->data[3 * i + 1] = out->data[3 * i + 2] = q;
    }
    free(grey);
    free(g);
    free(v);
    free(t);
    return PATINA_OK;
nomem:
    free(grey);
    free(g);
    free(v);
    free(t);
    return patina__fail(PATINA_E_NOMEM, "rootsift: out of memory making a view of a %dx%d image", W, H);
}

int rs_view_point(int kind, int W, int H, double x, double y, double *ox, double *oy)
{
    if (W <= 0 || H <= 0) return 0;
    switch (kind) {
    case RS_VIEW_SOFT_HALF: /* pixel centres aligned: x = (u + 0.5) W / w - 0.5 */
    case RS_VIEW_HALF:
        *ox = (x + 0.5) * W / half(W) - 0.5;
        *oy = (y + 0.5) * H / half(H) - 0.5;
        return 1;
    case RS_VIEW_SOFT_FULL:
        *ox = x;
        *oy = y;
        return 1;
    case RS_VIEW_GEOMETRIC: {
        geo_t geo;
        if (!geo_init(&geo, W, H)) return 0;
        geo_map(&geo, x, y, ox, oy);
        return 1;
    }
    default: return 0;
    }
}
