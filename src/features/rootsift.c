/* The `rootsift` family: SIFT keypoints and descriptors by VLFeat, the
 * `budget` strongest by |DoG peak|, RootSIFT (L1 normalisation, element-wise
 * square root), quantised into the fixed-size record of rootsift.h. CPU only;
 * the batch path (src/features/extract.c) spreads images over the pool.
 *
 * Per image (docs/rootsift.md):
 *   1. grey levels: patina_image_to_grey (8-bit luma), as floats in [0, 255]
 *      (the range VLFeat's own `sift` program feeds it: peak is in grey levels);
 *   2. when the longer side exceeds maxside, an area-average downscale to
 *      longer side = maxside (each output pixel the mean of the input area it
 *      covers, fractional coverage weighted);
 *   3. VLFeat's scale space over all octaves (vl_sift_process_*_octave),
 *      vl_sift_detect, per keypoint vl_sift_calc_keypoint_orientations (up to
 *      4 angles, each one feature) and vl_sift_calc_keypoint_descriptor;
 *   4. the `budget` features of largest |peak| are kept, where peak is the
 *      interpolated DoG value VLFeat thresholds (rs_peak below); ties go to
 *      VLFeat's order (octave, detection order, orientation order);
 *   5. RootSIFT r_k = sqrt(d_k / sum_j d_j) in double (sum in index order; a
 *      zero descriptor stays zero), stored as u8 min(255, floor(512 r + 0.5))
 *      or as binary16 of (float) r;
 *   6. geometry mapped back to the original image's pixels.
 * Rows are written strongest first. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <vl/sift.h>

#include "core/internal.h"
#include "features/family.h"
#include "features/rootsift.h"
#include "patina/rootsift.h"

/* ------------------------------------------------------------------ options */

static const patina_optdef_t rootsift_opts[] = {
    {"m", PATINA_OPT_INT, 1, RS_M_MAX, "384", NULL,
     "features kept per reference image (rows of a record; the paper's m)",
     offsetof(rootsift_params_t, m)},
    {"n", PATINA_OPT_INT, 1, RS_N_MAX, "768", NULL,
     "features extracted per query by identify (the paper's n); not used by extract/index",
     offsetof(rootsift_params_t, n)},
    {"peak", PATINA_OPT_DOUBLE, 0, 255, "0", NULL,
     "VLFeat peak threshold on |interpolated DoG|, grey levels of a 0..255 image; the m (n) strongest "
     "are kept anyway, so it only cuts low-contrast images short (0: never; 3.4 = OpenCV's "
     "contrastThreshold 0.04 / 3 levels)",
     offsetof(rootsift_params_t, peak)},
    {"edge", PATINA_OPT_DOUBLE, 1, 1000, "10", NULL,
     "VLFeat edge threshold (principal curvature ratio; Lowe's and VLFeat's 10)",
     offsetof(rootsift_params_t, edge)},
    {"maxside", PATINA_OPT_INT, 0, 65536, "1024", NULL,
     "images whose longer side exceeds this are area-averaged down to it before detection (0: never)",
     offsetof(rootsift_params_t, maxside)},
    {"first_octave", PATINA_OPT_INT, -1, 3, "0", NULL,
     "VLFeat's first octave: -1 doubles the image first (finer features, 4x the work)",
     offsetof(rootsift_params_t, first_octave)},
    {"octaves", PATINA_OPT_INT, -1, 32, "-1", NULL,
     "at most this many octaves (-1: every octave VLFeat fits in the image)",
     offsetof(rootsift_params_t, octaves)},
    {"levels", PATINA_OPT_INT, 1, 8, "3", NULL, "levels per octave (VLFeat's and Lowe's 3)",
     offsetof(rootsift_params_t, levels)},
    {"quant", PATINA_OPT_ENUM, 0, 0, "u8", "u8|f16",
     "stored components: u8 = round(512 x) clipped at 255, or IEEE binary16 of x",
     offsetof(rootsift_params_t, quant)},
    {"views", PATINA_OPT_INT, 0, RS_VIEWS_MAX, "0", NULL,
     "synthetic views of each reference stored with it as more rows of its item, which identify folds "
     "back into the item (0: none; 1: 50% + blur; 2: perspective + 30 degrees, and 50% + blur at full "
     "size; 3: 2's and 1's): x(1 + views) rows and matching time (docs/identify.md)",
     offsetof(rootsift_params_t, views)},
};

/* ------------------------------------------------------------------- records */

patina_status rs_record_check(const void *rec, size_t bytes, const char *what)
{
    char why[160];
    if (!rs_record_problem(rec, bytes, why, sizeof why)) return PATINA_OK;
    return patina__fail(PATINA_E_CORRUPT, "%s: %s", what, why);
}

/* --------------------------------------------------------------- downscale */

/* Area average of the (h, w) grey image g into (oh, ow) floats: output pixel
 * (i, j) is the mean of the input over [i sx, (i+1) sx) x [j sy, (j+1) sy),
 * sx = w / ow, sy = h / oh, input pixels weighted by the part they cover.
 * Separable: rows first into (h, ow), then columns. */
static patina_status area_downscale(float *out, int ow, int oh, const uint8_t *g, int w, int h)
{
    const double sx = (double)w / ow, sy = (double)h / oh;
    float *tmp = malloc((size_t)h * (size_t)ow * sizeof *tmp);
    if (!tmp) return patina__fail(PATINA_E_NOMEM, "rootsift: out of memory downscaling a %dx%d image", w, h);
    for (int i = 0; i < ow; i++) {
        const double a = i * sx, b = (i + 1) * sx;
        const int k0 = (int)floor(a), k1 = (int)ceil(b) < w ? (int)ceil(b) : w;
        for (int y = 0; y < h; y++) {
            const uint8_t *row = g + (size_t)y * (size_t)w;
            double acc = 0.0;
            for (int k = k0; k < k1; k++) {
                double lo = a > k ? a : k, hi = b < k + 1 ? b : k + 1;
                acc += (hi - lo) * row[k];
            }
            tmp[(size_t)y * (size_t)ow + (size_t)i] = (float)(acc / sx);
        }
    }
    for (int j = 0; j < oh; j++) {
        const double a = j * sy, b = (j + 1) * sy;
        const int k0 = (int)floor(a), k1 = (int)ceil(b) < h ? (int)ceil(b) : h;
        float *o = out + (size_t)j * (size_t)ow;
        for (int x = 0; x < ow; x++) {
            double acc = 0.0;
            for (int k = k0; k < k1; k++) {
                double lo = a > k ? a : k, hi = b < k + 1 ? b : k + 1;
                acc += (hi - lo) * tmp[(size_t)k * (size_t)ow + (size_t)x];
            }
            o[x] = (float)(acc / sy);
        }
    }
    free(tmp);
    return PATINA_OK;
}

/* ------------------------------------------------------------------ peaks */

/* The interpolated DoG value at keypoint k of the current octave: the value
 * vl_sift_detect compares with the peak threshold but does not keep. k's
 * integer position (ix, iy, is) is where VLFeat's refinement ended, and the
 * refinement's last step computed the gradient and Hessian there, so the
 * same arithmetic (float differences, double sums, the same 3x3 Gaussian
 * elimination with partial pivoting) gives the same value:
 *   val = D + 0.5 (Dx b0 + Dy b1 + Ds b2),  H b = -grad D. */
static double rs_peak(const VlSiftFilt *f, const VlSiftKeypoint *k)
{
    const int w = f->octave_width, h = f->octave_height;
    const ptrdiff_t xo = 1, yo = w, so = (ptrdiff_t)w * h;
    const vl_sift_pix *pt = f->dog + k->ix * xo + k->iy * yo + (k->is - f->s_min) * so;
#define D(dx, dy, ds) (pt[(dx) * xo + (dy) * yo + (ds) * so])
    double Dx = 0.5 * (D(1, 0, 0) - D(-1, 0, 0));
    double Dy = 0.5 * (D(0, 1, 0) - D(0, -1, 0));
    double Ds = 0.5 * (D(0, 0, 1) - D(0, 0, -1));
    double A[3][3], b[3];
    (void)h;
    A[0][0] = D(1, 0, 0) + D(-1, 0, 0) - 2.0 * D(0, 0, 0);
    A[1][1] = D(0, 1, 0) + D(0, -1, 0) - 2.0 * D(0, 0, 0);
    A[2][2] = D(0, 0, 1) + D(0, 0, -1) - 2.0 * D(0, 0, 0);
    A[0][1] = A[1][0] = 0.25 * (D(1, 1, 0) + D(-1, -1, 0) - D(-1, 1, 0) - D(1, -1, 0));
    A[0][2] = A[2][0] = 0.25 * (D(1, 0, 1) + D(-1, 0, -1) - D(-1, 0, 1) - D(1, 0, -1));
    A[1][2] = A[2][1] = 0.25 * (D(0, 1, 1) + D(0, -1, -1) - D(0, -1, 1) - D(0, 1, -1));
    b[0] = -Dx;
    b[1] = -Dy;
    b[2] = -Ds;
    for (int j = 0; j < 3; j++) { /* forward elimination, pivot = largest |A[i][j]|, i >= j */
        double pv = 0.0, pa = 0.0, t;
        int pi = -1;
        for (int i = j; i < 3; i++)
            if (fabs(A[i][j]) > pa) {
                pv = A[i][j];
                pa = fabs(A[i][j]);
                pi = i;
            }
        if (pa < 1e-10f) { /* singular: VLFeat takes no step */
            b[0] = b[1] = b[2] = 0.0;
            break;
        }
        for (int jj = j; jj < 3; jj++) {
            t = A[pi][jj];
            A[pi][jj] = A[j][jj];
            A[j][jj] = t;
            A[j][jj] /= pv;
        }
        t = b[j];
        b[j] = b[pi];
        b[pi] = t;
        b[j] /= pv;
        for (int ii = j + 1; ii < 3; ii++) {
            double x = A[ii][j];
            for (int jj = j; jj < 3; jj++) A[ii][jj] -= x * A[j][jj];
            b[ii] -= x * b[j];
        }
    }
    for (int i = 2; i > 0; i--) /* back substitution */
        for (int ii = i - 1; ii >= 0; ii--) b[ii] -= b[i] * A[ii][i];
    return D(0, 0, 0) + 0.5 * (Dx * b[0] + Dy * b[1] + Ds * b[2]);
#undef D
}

/* --------------------------------------------------------------- selection */

typedef struct feat {
    double peak;        /* |interpolated DoG| */
    uint64_t seq;       /* VLFeat order: octave, keypoint, orientation */
    float x, y, sigma, angle; /* detected image's coordinates */
    float d[RS_DIM];    /* VLFeat's SIFT descriptor */
} feat_t;

/* a ranks before b: larger peak, then earlier in VLFeat's order. */
static int better(const feat_t *a, const feat_t *b)
{
    return a->peak > b->peak || (a->peak == b->peak && a->seq < b->seq);
}

static int cmp_better(const void *pa, const void *pb)
{
    const feat_t *a = pa, *b = pb;
    return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

/* The kept features: a binary heap with the weakest at the root. */
typedef struct keep {
    feat_t *f;
    size_t n, cap;
} keep_t;

static void heap_down(keep_t *k, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < k->n && better(&k->f[w], &k->f[l])) w = l;
        if (r < k->n && better(&k->f[w], &k->f[r])) w = r;
        if (w == i) return;
        feat_t t = k->f[i];
        k->f[i] = k->f[w];
        k->f[w] = t;
        i = w;
    }
}

static void heap_push(keep_t *k, const feat_t *x)
{
    size_t i;
    if (k->n == k->cap) { /* full: x replaces the weakest when it ranks before it */
        if (!better(x, &k->f[0])) return;
        k->f[0] = *x;
        heap_down(k, 0);
        return;
    }
    i = k->n++;
    k->f[i] = *x;
    while (i > 0 && better(&k->f[(i - 1) / 2], &k->f[i])) {
        feat_t t = k->f[i];
        k->f[i] = k->f[(i - 1) / 2];
        k->f[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

/* ----------------------------------------------------------------- VLFeat */

/* vl_sift_new rewrites VLFeat's global exp() table (fast_expn_init) with the
 * same values each time; creation is serialised so that no two threads write
 * it at once. */
static pthread_mutex_t vl_new_lock = PTHREAD_MUTEX_INITIALIZER;

/* SIFT of the (h, w) float image im: the strongest features into keep. */
static patina_status run_sift(keep_t *keep, const rootsift_params_t *p, const float *im, int w, int h)
{
    const int omin = p->first_octave;
    const int mind = w < h ? w : h;
    int octaves, err;
    uint64_t seq = 0;
    VlSiftFilt *f;
    /* The first octave's size: VLFeat needs a 3x3x3 neighbourhood. */
    const long ow = omin < 0 ? (long)w << -omin : (long)w >> omin, oh = omin < 0 ? (long)h << -omin : (long)h >> omin;
    if (ow < 4 || oh < 4) return PATINA_OK; /* too small to hold a keypoint: count 0 */
    /* VLFeat indexes its gradient buffer with int: 2 w h (levels + 3) < 2^31. */
    if ((double)ow * (double)oh * 2.0 * (p->levels + 3) >= 2147483647.0)
        return patina__fail(PATINA_E_LIMIT,
                            "rootsift: a %dx%d image at first_octave=%d is too large for VLFeat "
                            "(set maxside)", w, h, omin);
    {
        int most = (int)floor(log2((double)mind)) - omin - 3; /* vl_sift_new's "all" */
        if (most < 1) most = 1;
        octaves = p->octaves < 0 || p->octaves > most ? most : p->octaves;
    }
    pthread_mutex_lock(&vl_new_lock);
    f = vl_sift_new(w, h, octaves, p->levels, omin);
    pthread_mutex_unlock(&vl_new_lock);
    if (!f) return patina__fail(PATINA_E_NOMEM, "rootsift: VLFeat could not allocate a %dx%d scale space", w, h);
    vl_sift_set_peak_thresh(f, p->peak);
    vl_sift_set_edge_thresh(f, p->edge);
    for (err = vl_sift_process_first_octave(f, im); err == VL_ERR_OK; err = vl_sift_process_next_octave(f)) {
        const VlSiftKeypoint *keys;
        int nk;
        vl_sift_detect(f);
        keys = vl_sift_get_keypoints(f);
        nk = vl_sift_get_nkeypoints(f);
        for (int i = 0; i < nk; i++) {
            double angles[4];
            feat_t ft;
            int na;
            ft.peak = fabs(rs_peak(f, &keys[i]));
            /* Every orientation of this keypoint has this peak and comes
             * later than what is kept: it cannot displace an equal one. */
            if (keep->n == keep->cap && !(ft.peak > keep->f[0].peak)) {
                seq += 4;
                continue;
            }
            na = vl_sift_calc_keypoint_orientations(f, angles, &keys[i]);
            for (int a = 0; a < na; a++) {
                ft.seq = seq + (uint64_t)a;
                ft.x = keys[i].x;
                ft.y = keys[i].y;
                ft.sigma = keys[i].sigma;
                ft.angle = (float)angles[a];
                /* VLFeat leaves the descriptor unwritten for a keypoint
                 * whose rounded y is the last row: zeros, not the previous
                 * feature's values */
                memset(ft.d, 0, sizeof ft.d);
                vl_sift_calc_keypoint_descriptor(f, ft.d, &keys[i], angles[a]);
                heap_push(keep, &ft);
            }
            seq += 4;
        }
    }
    vl_sift_delete(f);
    return PATINA_OK;
}

/* ---------------------------------------------------------------- records */

/* Writes the header and rows of a record of `budget` rows. */
static void write_record(unsigned char *rec, size_t budget, const rootsift_params_t *p, const keep_t *keep,
                         int w, int h, int W, int H, double sx, double sy, float down)
{
    const uint32_t q = (uint32_t)p->quant;
    const size_t eb = rs_elem_bytes(q);
    unsigned char *geo = rec + RS_HEADER + budget * RS_DIM * eb;
    memset(rec, 0, rs_record_bytes(budget, q));
    rs_put_header(rec, (uint32_t)keep->n, (uint32_t)budget, q, down, (uint32_t)w, (uint32_t)h, (uint32_t)W, (uint32_t)H);
    for (size_t i = 0; i < keep->n; i++) {
        const feat_t *ft = &keep->f[i];
        unsigned char *row = rec + RS_HEADER + i * RS_DIM * eb;
        double l1 = 0.0;
        for (int k = 0; k < RS_DIM; k++) l1 += ft->d[k];
        for (int k = 0; k < RS_DIM; k++) {
            double r = l1 > 0.0 ? sqrt(ft->d[k] / l1) : 0.0;
            if (q == RS_QUANT_F16) {
                uint16_t hv = rs_f32_to_f16((float)r);
                row[2 * k] = (unsigned char)hv;
                row[2 * k + 1] = (unsigned char)(hv >> 8);
            } else {
                double v = floor(r * RS_U8_SCALE + 0.5);
                row[k] = (unsigned char)(v > 255.0 ? 255.0 : v);
            }
        }
        /* detected pixel centres x -> original (x + 0.5) sx - 0.5 */
        rs_put_f32(geo + 16 * i + 0, (float)((ft->x + 0.5) * sx - 0.5));
        rs_put_f32(geo + 16 * i + 4, (float)((ft->y + 0.5) * sy - 0.5));
        rs_put_f32(geo + 16 * i + 8, (float)(ft->sigma * (double)down));
        rs_put_f32(geo + 16 * i + 12, ft->angle);
    }
}

/* The detection size of a W x H image (the maxside downscale) and the
 * geometry's scales. */
static void rs_detect_size(const rootsift_params_t *p, int W, int H, int *w, int *h, double *sx, double *sy,
                           float *down)
{
    *w = W;
    *h = H;
    *sx = *sy = 1.0;
    *down = 1.0f;
    if (p->maxside > 0 && (W > p->maxside || H > p->maxside)) {
        const double L = W > H ? W : H, fct = L / p->maxside;
        *w = (int)lround(W / fct);
        *h = (int)lround(H / fct);
        if (*w < 1) *w = 1;
        if (*h < 1) *h = 1;
        *sx = (double)W / *w;
        *sy = (double)H / *h;
        *down = (float)fct;
    }
}

/* The octaves VLFeat processes for a w x h detection image: 0 when the
 * first octave is under 4 pixels on a side (count 0), -1 when it is too
 * large for VLFeat's int indexing (PATINA_E_LIMIT). */
static int rs_octaves(const rootsift_params_t *p, int w, int h)
{
    const int omin = p->first_octave, mind = w < h ? w : h;
    const long ow = omin < 0 ? (long)w << -omin : (long)w >> omin, oh = omin < 0 ? (long)h << -omin : (long)h >> omin;
    int most;
    if (ow < 4 || oh < 4) return 0;
    if ((double)ow * (double)oh * 2.0 * (p->levels + 3) >= 2147483647.0) return -1;
    most = (int)floor(log2((double)mind)) - omin - 3; /* vl_sift_new's "all" */
    if (most < 1) most = 1;
    return p->octaves < 0 || p->octaves > most ? most : p->octaves;
}

patina_status rs_extract(const rootsift_params_t *p, size_t budget, void *rec, const patina_image_t *img)
{
    const int W = img ? img->width : 0, H = img ? img->height : 0;
    int w = W, h = H;
    double sx = 1.0, sy = 1.0;
    float down = 1.0f;
    uint8_t *grey = NULL;
    float *im = NULL;
    keep_t keep = {NULL, 0, budget};
    patina_status s = PATINA_OK;
    if (!p || !rec || !img || budget < 1 || budget > RS_N_MAX)
        return patina__fail(PATINA_E_INVALID, "rootsift: bad arguments (budget %zu)", budget);
    if (W < 0 || H < 0 || (W > 0 && H > 0 && (!img->data || img->stride < 3 * (size_t)W)))
        return patina__fail(PATINA_E_INVALID, "rootsift: bad image");
    if (W == 0 || H == 0) goto write; /* nothing to detect in: count 0 */
    rs_detect_size(p, W, H, &w, &h, &sx, &sy, &down);
    grey = malloc((size_t)W * (size_t)H);
    im = malloc((size_t)w * (size_t)h * sizeof *im);
    keep.f = malloc(budget * sizeof *keep.f);
    if (!grey || !im || !keep.f) {
        s = patina__fail(PATINA_E_NOMEM, "rootsift: out of memory for a %dx%d image", W, H);
        goto done;
    }
    if ((s = patina_image_to_grey(grey, img)) != PATINA_OK) goto done;
    if (w != W || h != H) {
        if ((s = area_downscale(im, w, h, grey, W, H)) != PATINA_OK) goto done;
    } else {
        for (size_t i = 0; i < (size_t)W * (size_t)H; i++) im[i] = grey[i];
    }
    if ((s = run_sift(&keep, p, im, w, h)) != PATINA_OK) goto done;
    qsort(keep.f, keep.n, sizeof *keep.f, cmp_better);
write:
    write_record(rec, budget, p, &keep, w, h, W, H, sx, sy, down);
done:
    free(grey);
    free(im);
    free(keep.f);
    return s;
}

/* --------------------------------------------------------------------- GPU */

/* _vl_sift_smooth's filter for sigma: W = max(ceil(4 sigma), 1), taps
 * exp(-d^2 / 2) of d = (j - W) / sigma in float, over their float sum. */
static int rs_gauss_taps(float *taps, double sigma)
{
    const int W = (int)fmax(ceil(4.0 * sigma), 1.0);
    float acc = 0;
    if (2 * W + 1 > PGPU_RS_MAXTAPS) return -1;
    for (int j = 0; j < 2 * W + 1; j++) {
        float d = (float)(j - W) / (float)sigma;
        taps[j] = (float)exp(-0.5 * (d * d));
        acc += taps[j];
    }
    for (int j = 0; j < 2 * W + 1; j++) taps[j] /= acc;
    return W;
}

/* The GPU configuration for budget rows: VLFeat's sigmas and filters and
 * fast_expn's table, computed here with the host's libm as VLFeat does. */
patina_status rs_gpu_conf(patina_gpu_rootsift_conf_t *c, const rootsift_params_t *p, size_t budget)
{
    const int S = p->levels, omin = p->first_octave, s_min = -1, s_max = S + 1;
    const double sigmak = pow(2.0, 1.0 / S), sigma0 = 1.6 * sigmak, sigman = 0.5;
    const double dsigma0 = sigma0 * sqrt(1.0 - 1.0 / (sigmak * sigmak));
    memset(c, 0, sizeof *c);
    c->levels = S;
    c->first_octave = omin;
    c->peak = p->peak;
    c->edge = p->edge;
    c->sigma0 = sigma0;
    c->budget = (int)budget;
    c->quant = p->quant;
    c->qscale = p->quant == RS_QUANT_F16 ? RS_F16_SCALE : RS_U8_SCALE;
    c->rec_bytes = rs_record_bytes(budget, (uint32_t)p->quant);
    {
        const double sa = sigma0 * pow(sigmak, s_min), sb = sigman * pow(2.0, -omin);
        c->w0 = sa > sb ? rs_gauss_taps(c->filt0, sqrt(sa * sa - sb * sb)) : 0;
    }
    for (int s = s_min + 1; s <= s_max; s++) c->fw[s - s_min - 1] = rs_gauss_taps(c->filt[s - s_min - 1], dsigma0 * pow(sigmak, s));
    for (int k = 0; k < 257; k++) c->expn[k] = exp(-(double)k * (25.0 / 256));
    if (c->w0 < 0) return patina__fail(PATINA_E_LIMIT, "rootsift: gpu: first filter too wide");
    for (int l = 0; l < S + 2; l++)
        if (c->fw[l] < 0) return patina__fail(PATINA_E_LIMIT, "rootsift: gpu: levels=%d needs filters too wide", S);
    return PATINA_OK;
}

/* rs_extract on a host view of img (an image decoded on the GPU comes to
 * the host for it). */
static patina_status rs_extract_host(const rootsift_params_t *p, size_t budget, void *out, const patina_image_t *img)
{
    patina_image_t host;
    patina_status s = patina_gpu_image_host(&host, img);
    if (s == PATINA_OK) s = rs_extract(p, budget, out, &host);
    else memset(out, 0, rs_record_bytes(budget, (uint32_t)p->quant));
    patina_image_release(&host);
    return s;
}

patina_status rs_extract_gpu(patina_gpu_t *g, const rootsift_params_t *p, size_t budget, void *out,
                             const patina_image_t *imgs, size_t n, patina_status *st)
{
    const size_t bytes = rs_record_bytes(budget, (uint32_t)p->quant);
    unsigned char *o = out;
    patina_gpu_rootsift_conf_t *c = NULL;
    patina_gpu_rootsift_item_t *it = NULL;
    size_t *map = NULL, m = 0;
    patina_status *mine = NULL, s = PATINA_OK;
    if (n == 0) return PATINA_OK;
    if (!p || !out || budget < 1 || budget > RS_N_MAX)
        return patina__fail(PATINA_E_INVALID, "rootsift: bad arguments (budget %zu)", budget);
    c = malloc(sizeof *c);
    it = malloc(n * sizeof *it);
    map = malloc(n * sizeof *map);
    mine = malloc(n * sizeof *mine);
    if (!c || !it || !map || !mine) {
        s = patina__fail(PATINA_E_NOMEM, "rootsift: out of memory for a GPU batch of %zu images", n);
        goto done;
    }
    if ((s = rs_gpu_conf(c, p, budget)) != PATINA_OK) goto done;
    /* the images the GPU takes; the others (bad, empty, too small, too
     * large for VLFeat) get the CPU path's record and status here */
    for (size_t i = 0; i < n; i++) {
        const patina_image_t *img = &imgs[i];
        int w, h, oc = 0;
        double sx, sy;
        float down;
        if (img->width > 0 && img->height > 0 && img->data && img->stride >= 3 * (size_t)img->width) {
            rs_detect_size(p, img->width, img->height, &w, &h, &sx, &sy, &down);
            oc = rs_octaves(p, w, h);
        }
        if (oc > PGPU_RS_MAXOCT) oc = 0;
        if (oc <= 0) {
            patina_status si = rs_extract_host(p, budget, o + i * bytes, img);
            if (st) st[i] = si;
            continue;
        }
        it[m].img = img;
        it[m].w = w;
        it[m].h = h;
        it[m].octaves = oc;
        it[m].sx = sx;
        it[m].sy = sy;
        it[m].down = down;
        it[m].out = o + i * bytes; /* the GPU writes the record in place */
        map[m++] = i;
    }
    if (m == 0) goto done;
    s = patina_gpu_rootsift(g, c, NULL, it, m, mine);
    for (size_t j = 0; j < m; j++) {
        unsigned char *dst = o + map[j] * bytes;
        patina_status sj = s != PATINA_OK ? s : mine[j];
        if (sj == PATINA_E_LIMIT && s == PATINA_OK) sj = rs_extract_host(p, budget, dst, &imgs[map[j]]); /* the CPU's */
        else if (sj != PATINA_OK) memset(dst, 0, bytes);
        if (st) st[map[j]] = sj;
    }
done:
    if (s != PATINA_OK && st && !mine)
        for (size_t i = 0; i < n; i++) st[i] = s;
    free(c);
    free(it);
    free(map);
    free(mine);
    return s;
}

/* With views, one batch of n (1 + views) images, item-major (image i,
 * then its views), so that the records land in place as item records; the
 * views are made on the host (from a host copy of an image decoded on the
 * GPU). An item's status: its first block's that failed. */
static patina_status rootsift_gpu(patina_gpu_t *g, const void *params, void *out, const patina_image_t *imgs, size_t n,
                                  patina_status *st)
{
    const rootsift_params_t *p = params;
    const size_t R = (size_t)(1 + p->views);
    patina_image_t *batch;
    patina_status *bst, *vst, s = PATINA_OK;
    if (p->views == 0 || n == 0) return rs_extract_gpu(g, p, (size_t)p->m, out, imgs, n, st);
    batch = calloc(n * R, sizeof *batch);
    bst = calloc(n * R, sizeof *bst);
    vst = calloc(n, sizeof *vst);
    if (!batch || !bst || !vst) {
        free(batch);
        free(bst);
        free(vst);
        return patina__fail(PATINA_E_NOMEM, "rootsift: out of memory for a GPU batch of %zu images", n);
    }
    for (size_t i = 0; i < n; i++) {
        patina_image_t host;
        memset(&host, 0, sizeof host);
        vst[i] = patina_gpu_image_host(&host, &imgs[i]);
        batch[i * R] = imgs[i];
        for (size_t v = 1; v < R && vst[i] == PATINA_OK; v++) /* a view not made stays empty: no features */
            vst[i] = rs_view_make(&batch[i * R + v], &host, rs_view_kind(p->views, (int)v));
        patina_image_release(&host);
        if (vst[i] != PATINA_OK) patina_clear_error();
    }
    s = rs_extract_gpu(g, p, (size_t)p->m, out, batch, n * R, bst);
    for (size_t i = 0; i < n; i++) {
        if (st) {
            st[i] = PATINA_OK;
            for (size_t v = 0; v < R && st[i] == PATINA_OK; v++) st[i] = bst[i * R + v];
            if (st[i] == PATINA_OK) st[i] = vst[i];
        }
        for (size_t v = 1; v < R; v++) patina_image_release(&batch[i * R + v]);
    }
    free(batch);
    free(bst);
    free(vst);
    return s;
}

/* ----------------------------------------------------------------- matching */

/* --------------------------------------------------------------- public view */

patina_status patina_rootsift_info(patina_rootsift_info_t *info, const void *record, size_t bytes)
{
    if (!info) return patina__fail(PATINA_E_INVALID, "rootsift: null info");
    memset(info, 0, sizeof *info);
    PATINA_TRY(rs_record_check(record, bytes, "rootsift"));
    info->count = rs_count(record);
    info->m = rs_m(record);
    info->f16 = rs_quant(record) == RS_QUANT_F16;
    info->qscale = rs_qscale(record);
    info->downscale = rs_downscale(record);
    info->width = rs_size(record, 0);
    info->height = rs_size(record, 1);
    info->orig_width = rs_size(record, 2);
    info->orig_height = rs_size(record, 3);
    return PATINA_OK;
}

patina_status patina_rootsift_feature(float geom[4], float *stored, const void *record, size_t bytes, size_t i)
{
    if (!geom) return patina__fail(PATINA_E_INVALID, "rootsift: null geometry output");
    PATINA_TRY(rs_record_check(record, bytes, "rootsift"));
    if (i >= rs_count(record))
        return patina__fail(PATINA_E_INVALID, "rootsift: feature %zu of a record holding %u", i,
                            (unsigned)rs_count(record));
    rs_geom_get(record, i, geom);
    if (stored) {
        const unsigned char *r = rs_row(record, i);
        for (int k = 0; k < RS_DIM; k++)
            stored[k] = rs_quant(record) == RS_QUANT_F16 ? rs_f16_to_f32((uint16_t)(r[2 * k] | r[2 * k + 1] << 8))
                                                         : (float)r[k];
    }
    return PATINA_OK;
}

/* ------------------------------------------------------------------- family */

size_t rs_item_bytes(const rootsift_params_t *p)
{
    return (size_t)(1 + p->views) * rs_record_bytes((size_t)p->m, (uint32_t)p->quant);
}

patina_status rs_extract_item(const rootsift_params_t *p, void *rec, const patina_image_t *img)
{
    const size_t bytes = rs_record_bytes((size_t)p->m, (uint32_t)p->quant);
    patina_status s = rs_extract(p, (size_t)p->m, rec, img), first = s;
    for (int v = 1; v <= p->views; v++) {
        unsigned char *blk = (unsigned char *)rec + (size_t)v * bytes;
        patina_image_t view;
        memset(&view, 0, sizeof view);
        s = img ? rs_view_make(&view, img, rs_view_kind(p->views, v)) : PATINA_E_INVALID;
        if (s == PATINA_OK) s = rs_extract(p, (size_t)p->m, blk, &view);
        if (s != PATINA_OK) { /* a block without features, as for a flat image */
            patina_image_t empty;
            memset(&empty, 0, sizeof empty);
            if (rs_extract(p, (size_t)p->m, blk, &empty) != PATINA_OK) memset(blk, 0, bytes);
            if (first == PATINA_OK) first = s;
        }
        patina_image_release(&view);
    }
    return first;
}

static size_t rootsift_dim(const void *params)
{
    return rs_item_bytes(params);
}

static patina_status rootsift_cpu(const void *params, void *out, const patina_image_t *img)
{
    return rs_extract_item(params, out, img);
}

const patina_family_t patina_family_rootsift = {
    .name = "rootsift",
    .uses = PATINA_CAP_IDENTIFY | PATINA_CAP_SEARCH | PATINA_CAP_KEYPOINTS,
    .help = "local features: VLFeat SIFT, the m strongest by |DoG peak|, RootSIFT, quantised with "
            "keypoint geometry (one fixed-size record per image; docs/rootsift.md)",
    .opts = rootsift_opts,
    .nopts = sizeof rootsift_opts / sizeof rootsift_opts[0],
    .terse_from = 9, /* views */
    .elem = PATINA_ELEM_U8,
    .dim = rootsift_dim,
    .check = NULL,
    .distance = PDIST_ROOTSIFT_RATIO,
    .cpu = rootsift_cpu,
    .gpu = PATINA_HAVE_CUDA ? rootsift_gpu : NULL,
    .hybrid = NULL,
    .gpu_reads_device = 1,
};
