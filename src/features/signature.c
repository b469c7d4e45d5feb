/* The `signature` family: feature signatures after Kruliš, Lokoč and Skopal's
 * PCT signatures (the design OpenCV contrib's xfeatures2d::PCTSignatures
 * implements), one fixed-size record per image (features/signature.h,
 * docs/signature.md). The C reference; the batch path (src/features/extract.c)
 * spreads images over the pool. The GPU path (src/gpu/signature.cu, entry
 * sig_gpu below) gives the same bytes.
 *
 * Per image:
 *   1. a sampling plan fixed by the options (sig_plan): `samples` points in
 *      [0, 1)^2, random (seeded) or a regular grid, and `seeds` of them
 *      picked (seeded) as initial centroids; the same for every image;
 *   2. per point a 7-D feature (sample_one): x, y (pixel / side), CIE
 *      L*a*b* of the pixel rounded to integers and divided by 100, 127, 127,
 *      contrast / 25 and entropy / 4 of the grey-level co-occurrences in a
 *      window around it (OpenCV's normalisers);
 *   3. k-means in float with OpenCV's rules, operation for operation:
 *      centroids closer than `join` merged (the earlier one dropped), after
 *      iteration t clusters of <= t * minsize samples dropped, `iters`
 *      iterations, the first nearest centroid wins ties; no cluster left:
 *      one centroid, the mean of all samples;
 *   4. at most k centroids kept, the heaviest (a stable sort: ties keep
 *      their order); weight = cluster size / samples (weights=samples) or
 *      / the largest size (weights=max, OpenCV's). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "algo/sqfd.h"
#include "core/internal.h"
#include "features/family.h"
#include "features/signature.h"
#include "patina/signature.h"

/* ------------------------------------------------------------------ options */

static const patina_optdef_t sig_opts[] = {
    {"k", PATINA_OPT_INT, 1, SIG_K_MAX, "64", NULL,
     "at most this many centroids per image (the record's rows; the heaviest are kept)",
     offsetof(sig_params_t, k)},
    {"samples", PATINA_OPT_INT, 1, SIG_SAMPLES_MAX, "2000", NULL,
     "sampling points per image (OpenCV's initSampleCount)", offsetof(sig_params_t, samples)},
    {"sampling", PATINA_OPT_ENUM, 0, 0, "random", "random|grid",
     "random: uniform points from seed; grid: a regular grid of ceil(sqrt(samples)) columns",
     offsetof(sig_params_t, sampling)},
    {"seed", PATINA_OPT_INT, 0, 2147483647, "1", NULL,
     "seed of the random points and of the initial centroids (the same for every image)",
     offsetof(sig_params_t, seed)},
    {"seeds", PATINA_OPT_INT, 1, SIG_SAMPLES_MAX, "400", NULL,
     "initial centroids: this many sampling points picked by seed (<= samples; OpenCV's initSeedCount)",
     offsetof(sig_params_t, seeds)},
    {"iters", PATINA_OPT_INT, 0, 1000, "10", NULL, "k-means iterations (OpenCV's iterationCount)",
     offsetof(sig_params_t, iters)},
    {"minsize", PATINA_OPT_INT, 0, SIG_SAMPLES_MAX, "2", NULL,
     "after iteration t (1, 2, ...) clusters of at most t * minsize samples are dropped (OpenCV's clusterMinSize)",
     offsetof(sig_params_t, minsize)},
    {"join", PATINA_OPT_DOUBLE, 0, 100, "0.2", NULL,
     "centroids at L2 distance <= join are merged (OpenCV's joiningDistance)", offsetof(sig_params_t, join)},
    {"drop", PATINA_OPT_DOUBLE, 0, SIG_SAMPLES_MAX, "0", NULL,
     "clusters of at most this many samples are dropped after each merge (OpenCV's dropThreshold)",
     offsetof(sig_params_t, drop)},
    {"bits", PATINA_OPT_INT, 1, 8, "4", NULL, "grey bits for contrast and entropy (OpenCV's grayscaleBits)",
     offsetof(sig_params_t, bits)},
    {"radius", PATINA_OPT_INT, 0, 64, "3", NULL,
     "window radius for contrast and entropy (OpenCV's windowRadius)", offsetof(sig_params_t, radius)},
    {"weights", PATINA_OPT_ENUM, 0, 0, "samples", "samples|max",
     "centroid weight = cluster size / samples, or / the largest cluster's size (OpenCV's)",
     offsetof(sig_params_t, weights)},
    {"alpha", PATINA_OPT_DOUBLE, 0, 1e6, "1", NULL,
     "SQFD similarity parameter, > 0 (the paper's 3, 0.2, 0.01; stored as a float in each record)",
     offsetof(sig_params_t, alpha)},
    {"form", PATINA_OPT_ENUM, 0, 0, "gaussian", "gaussian|heuristic|minus",
     "SQFD similarity: exp(-alpha d^2), 1 / (alpha + d) or -d, d the L2 distance of centroids",
     offsetof(sig_params_t, form)},
};

static patina_status sig_check(const void *params)
{
    const sig_params_t *p = params;
    if (!(p->alpha > 0.0) || !isfinite((float)p->alpha) || (float)p->alpha <= 0.0f)
        return patina__fail(PATINA_E_INVALID, "signature: alpha=%g must be > 0 (and a positive float)",
                            p->alpha);
    if (p->seeds > p->samples)
        return patina__fail(PATINA_E_INVALID,
                            "signature: seeds=%d is more than samples=%d (the initial centroids are sampling "
                            "points: give seeds=%d or fewer)", p->seeds, p->samples, p->samples);
    return PATINA_OK;
}

/* ------------------------------------------------------------------ records */

patina_status sig_record_check(const float *rec, size_t n, const char *what)
{
    char why[256];
    if (!sig_record_problem(rec, n, why, sizeof why)) return PATINA_OK;
    return patina__fail(PATINA_E_INVALID, "%s: %s", what, why);
}

/* ------------------------------------------------------------ sampling plan */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A float in [0, 1) with 24 random bits (exact). */
static float unit_float(uint64_t *s) { return (float)(splitmix64(s) >> 40) * 0x1p-24f; }

patina_status sig_plan(const sig_params_t *p, float *pts, int *seeds)
{
    const int N = p->samples;
    uint64_t s = (uint64_t)(uint32_t)p->seed;
    int *perm = malloc((size_t)N * sizeof *perm);
    if (!perm) return patina__fail(PATINA_E_NOMEM, "signature: out of memory for %d sampling points", N);
    if (p->sampling == SIG_SAMPLING_GRID) {
        int g = 1;
        while ((long)g * g < N) g++;
        for (int i = 0; i < N; i++) {
            pts[2 * i] = ((float)(i % g) + 0.5f) / (float)g;
            pts[2 * i + 1] = ((float)(i / g) + 0.5f) / (float)g;
        }
    } else {
        for (int i = 0; i < N; i++) {
            pts[2 * i] = unit_float(&s);
            pts[2 * i + 1] = unit_float(&s);
        }
    }
    /* Initial centroids: a partial Fisher-Yates shuffle of the point
     * indexes from a stream of its own (the grid and the random points
     * pick alike). */
    s = (uint64_t)(uint32_t)p->seed ^ 0x5eed5eed5eed5eedull;
    for (int i = 0; i < N; i++) perm[i] = i;
    for (int i = 0; i < p->seeds; i++) {
        int j = i + (int)(splitmix64(&s) % (uint64_t)(N - i)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
        seeds[i] = perm[i];
    }
    free(perm);
    return PATINA_OK;
}

/* ----------------------------------------------------------------- features */

/* The grey level of pixel (x, y) in bits bits: OpenCV's GrayscaleBitmap
 * (channels scaled to 16 bits by 257, luma as OpenCV 5.0's 16-bit
 * BGR2GRAY - BT.601 in 15-bit fixed point with rounding, checked on all
 * 2^24 colours - then the top bits):
 * ((9798 R + 19235 G + 3735 B) 257 + 2^14) >> 15 >> (16 - bits). Only the
 * windows around the sampling points are ever needed, so levels are
 * computed there rather than for the whole image. */
static inline int grey_at(const patina_image_t *img, int x, int y, int bits)
{
    const uint8_t *p = img->data + (size_t)y * img->stride + 3 * (size_t)x;
    const uint32_t s = 9798u * 257u * p[0] + 19235u * 257u * p[1] + 3735u * 257u * p[2];
    return (int)(((s + 16384u) >> 15) >> (16 - bits));
}

/* The sRGB transfer function of an 8-bit channel value, in double (the
 * GPU path takes these 256 values from sig_srgb_linear, so that both sides
 * use the host C library's pow). */
static double srgb_linear(int c)
{
    const double v = c / 255.0;
    return v <= 0.04045 ? v / 12.92 : pow((v + 0.055) / 1.055, 2.4);
}

void sig_srgb_linear(double lin[256])
{
    for (int c = 0; c < 256; c++) lin[c] = srgb_linear(c);
}

/* CIE L*a*b* of an 8-bit sRGB pixel (D65), in double: the sRGB transfer
 * function, OpenCV's RGB -> XYZ matrix and white point, and its f(t). */
static void lab_of(double lab[3], const uint8_t *rgb)
{
    static const double M[3][3] = {{0.412453, 0.357580, 0.180423},
                                   {0.212671, 0.715160, 0.072169},
                                   {0.019334, 0.119193, 0.950227}};
    static const double white[3] = {0.950456, 1.0, 1.088754};
    double lin[3], f[3];
    for (int c = 0; c < 3; c++) lin[c] = srgb_linear(rgb[c]);
    for (int r = 0; r < 3; r++) {
        double t = (M[r][0] * lin[0] + M[r][1] * lin[1] + M[r][2] * lin[2]) / white[r];
        f[r] = t > 0.008856 ? cbrt(t) : 7.787 * t + 16.0 / 116.0;
    }
    {
        double Y = (M[1][0] * lin[0] + M[1][1] * lin[1] + M[1][2] * lin[2]);
        lab[0] = Y > 0.008856 ? 116.0 * f[1] - 16.0 : 903.3 * Y;
    }
    lab[1] = 500.0 * (f[0] - f[1]);
    lab[2] = 200.0 * (f[1] - f[2]);
}

/* Contrast and entropy of the co-occurrences in the window of pixel (x, y)
 * (OpenCV's GrayscaleBitmap::getContrastEntropy): for every pixel (i, j) of
 * [x - r, x + r] x [y - r, y + r] clipped so that (i + 1, j + 1) is in the
 * image, the four pairs (i,j)-(i,j+1), (i,j)-(i+1,j), (i,j)-(i+1,j+1),
 * (i+1,j)-(i,j+1), unordered; p = count / (4 pixels); contrast = sum
 * (a - b)^2 p, entropy = -sum p ln p, both float, over (a >= b) in row
 * order. co is (L, L) zeros on entry and on return; win holds the
 * window's grey levels, (2r + 2)^2 bytes. */
static void contrast_entropy(float *contrast, float *entropy, const patina_image_t *img, int bits, int r, int x,
                             int y, uint32_t *co, uint8_t *win)
{
    const int L = 1 << bits, w = img->width, h = img->height;
    const int x0 = x > r ? x - r : 0, y0 = y > r ? y - r : 0;
    const int x1 = w - 1 < x + r + 1 ? w - 1 : x + r + 1, y1 = h - 1 < y + r + 1 ? h - 1 : y + r + 1;
    const int ww = x1 - x0 + 1; /* pixels x0..x1, y0..y1 are read */
    float c = 0.0f, e = 0.0f, norm;
    for (int j = y0; j <= y1; j++)
        for (int i = x0; i <= x1; i++) win[(j - y0) * ww + (i - x0)] = (uint8_t)grey_at(img, i, j, bits);
#define G(i, j) win[((j) - y0) * ww + ((i) - x0)]
#define PAIR(a, b) co[(a) > (b) ? (a) * L + (b) : (b) * L + (a)]++
    for (int j = y0; j < y1; j++)
        for (int i = x0; i < x1; i++) {
            const int p = G(i, j), down = G(i, j + 1), right = G(i + 1, j), diag = G(i + 1, j + 1);
            PAIR(p, down);
            PAIR(p, right);
            PAIR(p, diag);
            PAIR(right, down);
        }
#undef PAIR
#undef G
    norm = (float)((x1 - x0) * (y1 - y0) * 4);
    for (int a = 0; a < L; a++)
        for (int b = 0; b <= a; b++)
            if (co[a * L + b]) {
                const float v = (float)co[a * L + b] / norm;
                c += (float)((b - a) * (b - a)) * v;
                e -= v * logf(v);
                co[a * L + b] = 0;
            }
    *contrast = c;
    *entropy = e;
}

/* The 7 features of one sampling point (x, y in [0, 1)): OpenCV's sampler
 * with unit weights; co and win the scratch of contrast_entropy. */
static void sample_one(float f[SIG_FEATURES], const patina_image_t *img, int bits, int radius, float px, float py,
                       uint32_t *co, uint8_t *win)
{
    const int w = img->width, h = img->height;
    /* OpenCV: (int)(point * side) in float; a product that rounds up to the
     * side is clamped to the last pixel (OpenCV would read outside). */
    int x = (int)(px * (float)w), y = (int)(py * (float)h);
    double lab[3];
    float c, e;
    if (x > w - 1) x = w - 1;
    if (y > h - 1) y = h - 1;
    if (x < 0) x = 0;
    if (y < 0) y = 0;
    lab_of(lab, img->data + (size_t)y * img->stride + 3 * (size_t)x);
    contrast_entropy(&c, &e, img, bits, radius, x, y, co, win);
    f[0] = (float)x / (float)w;
    f[1] = (float)y / (float)h;
    f[2] = (float)(floor(lab[0] + 0.5) / 100.0);
    f[3] = (float)(floor(lab[1] + 0.5) / 127.0);
    f[4] = (float)(floor(lab[2] + 0.5) / 127.0);
    f[5] = c / 25.0f;
    f[6] = e / 4.0f;
}

/* ------------------------------------------------------------------ k-means */

/* L2 distance of the features (columns 1..7) of two rows, in float. */
static float row_dist(const float *a, const float *b)
{
    float s = 0.0f;
    for (int d = 1; d < SIG_COLS; d++) {
        const float t = a[d] - b[d];
        s += t * t;
    }
    return sqrtf(s);
}

/* Merges close centroids: a centroid with a later live one within join
 * gets weight 0 (OpenCV's joinCloseClusters). */
static void join_close(float *cl, int n, float join)
{
    for (int i = 0; i < n - 1; i++) {
        if (cl[i * SIG_COLS] == 0.0f) continue;
        for (int j = i + 1; j < n; j++)
            if (cl[j * SIG_COLS] > 0.0f && row_dist(cl + i * SIG_COLS, cl + j * SIG_COLS) <= join) {
                cl[i * SIG_COLS] = 0.0f;
                break;
            }
    }
}

/* Keeps the rows of weight > drop, in order; returns their number. */
static int drop_light(float *cl, int n, float drop)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        if (cl[i * SIG_COLS] > drop) {
            if (m != i) memcpy(cl + m * SIG_COLS, cl + i * SIG_COLS, SIG_COLS * sizeof *cl);
            m++;
        }
    return m;
}

/* Centroids of samples (N, 8) from the seeds: cl (seeds, 8) out, column 0
 * the cluster size; returns the number of clusters (>= 1). tmp (seeds, 8)
 * scratch. */
static int kmeans(const sig_params_t *p, const float *samp, int N, const int *seeds, float *cl, float *tmp)
{
    const float join = (float)p->join, drop = (float)p->drop;
    int n = p->seeds;
    for (int i = 0; i < n; i++) {
        memcpy(cl + i * SIG_COLS, samp + (size_t)seeds[i] * SIG_COLS, SIG_COLS * sizeof *cl);
        cl[i * SIG_COLS] = 1.0f;
    }
    join_close(cl, n, join);
    n = drop_light(cl, n, drop);
    for (int it = 0; it < p->iters && n > 0; it++) {
        int last = 0;
        memset(tmp, 0, (size_t)n * SIG_COLS * sizeof *tmp);
        for (int i = 0; i < n; i++) cl[i * SIG_COLS] = 0.0f;
        for (int s = 0; s < N; s++) {
            const float *x = samp + (size_t)s * SIG_COLS;
            int best = 0;
            float bd = row_dist(cl, x);
            for (int c = 1; c < n; c++) {
                const float d = row_dist(cl + c * SIG_COLS, x);
                if (d < bd) {
                    bd = d;
                    best = c;
                }
            }
            for (int d = 1; d < SIG_COLS; d++) tmp[best * SIG_COLS + d] += x[d];
            cl[best * SIG_COLS] += 1.0f;
        }
        for (int i = 0; i < n; i++) {
            const float wi = cl[i * SIG_COLS];
            if (wi > (float)((it + 1) * p->minsize)) {
                for (int d = 1; d < SIG_COLS; d++) cl[last * SIG_COLS + d] = tmp[i * SIG_COLS + d] / wi;
                cl[last * SIG_COLS] = wi;
                last++;
            }
        }
        n = last;
        if (n == 0) break;
        join_close(cl, n, join);
        n = drop_light(cl, n, drop);
    }
    if (n == 0) { /* every cluster was dropped: one, the mean of all samples */
        memset(cl, 0, SIG_COLS * sizeof *cl);
        for (int s = 0; s < N; s++)
            for (int d = 1; d < SIG_COLS; d++) cl[d] += samp[(size_t)s * SIG_COLS + d];
        for (int d = 1; d < SIG_COLS; d++) cl[d] /= (float)N;
        cl[0] = (float)N;
        n = 1;
    }
    return n;
}

/* Stable order of rows by weight, heaviest first (insertion sort on an
 * index: n is at most `seeds`, and this runs only when n > k). */
static void heaviest_first(int *order, const float *cl, int n)
{
    for (int i = 0; i < n; i++) {
        int j = i;
        order[i] = i;
        while (j > 0 && cl[order[j - 1] * SIG_COLS] < cl[i * SIG_COLS]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
}

patina_status sig_image_check(const patina_image_t *img)
{
    const size_t npix = (size_t)(img && img->width > 0 ? img->width : 0) *
                        (size_t)(img && img->height > 0 ? img->height : 0);
    if (!img || (npix && (!img->data || img->stride < 3 * (size_t)img->width)))
        return patina__fail(PATINA_E_INVALID, "signature: bad image");
    if (npix == 0)
        return patina__fail(PATINA_E_INVALID, "signature: empty image (%dx%d): no signature", img->width,
                            img->height);
    return PATINA_OK;
}

patina_status sig_samples(const sig_params_t *p, const float *pts, float *samp, const patina_image_t *img)
{
    const size_t side = 2 * (size_t)p->radius + 2;
    uint8_t *win;
    uint32_t *co;
    PATINA_TRY(sig_image_check(img));
    win = malloc(side * side);
    co = calloc((size_t)1 << (2 * p->bits), sizeof *co);
    if (!win || !co) {
        free(win);
        free(co);
        return patina__fail(PATINA_E_NOMEM, "signature: out of memory for the sampling windows");
    }
    for (int i = 0; i < p->samples; i++) {
        samp[(size_t)i * SIG_COLS] = 0.0f;
        sample_one(samp + (size_t)i * SIG_COLS + 1, img, p->bits, p->radius, pts[2 * i], pts[2 * i + 1], co, win);
    }
    free(win);
    free(co);
    return PATINA_OK;
}

patina_status sig_cluster(const sig_params_t *p, const float *samp, const int *seeds, float *out)
{
    const int N = p->samples, K = p->k;
    float *cl = malloc((size_t)p->seeds * SIG_COLS * sizeof *cl);
    float *tmp = malloc((size_t)p->seeds * SIG_COLS * sizeof *tmp);
    int *order = malloc((size_t)p->seeds * sizeof *order), n;
    memset(out, 0, sig_dim((size_t)K) * sizeof *out);
    if (!cl || !tmp || !order) {
        free(cl);
        free(tmp);
        free(order);
        return patina__fail(PATINA_E_NOMEM, "signature: out of memory for %d centroids", p->seeds);
    }
    n = kmeans(p, samp, N, seeds, cl, tmp);
    if (n > K) {
        heaviest_first(order, cl, n);
        for (int i = 0; i < K; i++)
            memcpy(out + SIG_HEADER + (size_t)i * SIG_COLS, cl + (size_t)order[i] * SIG_COLS, SIG_COLS * sizeof *out);
        n = K;
    } else {
        memcpy(out + SIG_HEADER, cl, (size_t)n * SIG_COLS * sizeof *out);
    }
    {
        float *rows = out + SIG_HEADER, norm;
        if (p->weights == SIG_WEIGHTS_MAX) { /* OpenCV's: w * (1 / largest) */
            float mx = rows[0];
            for (int i = 1; i < n; i++)
                if (rows[i * SIG_COLS] > mx) mx = rows[i * SIG_COLS];
            norm = 1.0f / mx;
            for (int i = 0; i < n; i++) rows[i * SIG_COLS] = rows[i * SIG_COLS] * norm;
        } else {
            for (int i = 0; i < n; i++) rows[i * SIG_COLS] = rows[i * SIG_COLS] / (float)N;
        }
    }
    out[0] = (float)n;
    out[1] = (float)K;
    out[2] = (float)p->alpha;
    out[3] = (float)p->form;
    out[4] = (float)SIG_VERSION;
    free(cl);
    free(tmp);
    free(order);
    return PATINA_OK;
}

patina_status sig_extract_with(const sig_params_t *p, const float *pts, const int *seeds, float *out,
                               const patina_image_t *img)
{
    float *samp = malloc((size_t)p->samples * SIG_COLS * sizeof *samp);
    patina_status s;
    memset(out, 0, sig_dim((size_t)p->k) * sizeof *out);
    if (!samp) return patina__fail(PATINA_E_NOMEM, "signature: out of memory for %d samples", p->samples);
    s = sig_samples(p, pts, samp, img);
    if (s == PATINA_OK) s = sig_cluster(p, samp, seeds, out);
    free(samp);
    return s;
}

/* ------------------------------------------------------------------- family */

static size_t sig_family_dim(const void *params)
{
    const sig_params_t *p = params;
    return sig_dim((size_t)p->k);
}

static patina_status sig_cpu(const void *params, void *out, const patina_image_t *img)
{
    const sig_params_t *p = params;
    float *pts = malloc((size_t)p->samples * 2 * sizeof *pts);
    int *seeds = malloc((size_t)p->seeds * sizeof *seeds);
    patina_status s;
    memset(out, 0, sig_dim((size_t)p->k) * sizeof(float));
    if (!pts || !seeds) {
        free(pts);
        free(seeds);
        return patina__fail(PATINA_E_NOMEM, "signature: out of memory for the sampling plan");
    }
    s = sig_plan(p, pts, seeds);
    if (s == PATINA_OK) s = sig_extract_with(p, pts, seeds, out, img);
    free(pts);
    free(seeds);
    return s;
}

/* The GPU path (src/gpu/signature.cu): images the CPU would refuse get the
 * CPU's status and message here, the rest go to the GPU in one call;
 * images it leaves (PATINA_E_LIMIT: larger than a batch, or a plan beyond
 * the memory budget) are computed on the CPU, with the same bytes. When
 * the call itself fails, its images keep that status and zeros. */
static patina_status sig_gpu(patina_gpu_t *g, const void *params, void *out, const patina_image_t *imgs, size_t n,
                             patina_status *st)
{
    const sig_params_t *p = params;
    const size_t dim = sig_dim((size_t)p->k);
    float *pts = NULL, *o = out;
    int *seeds = NULL;
    double lin[256];
    patina_gpu_sig_conf_t c;
    patina_image_t *sub = NULL;
    size_t *map = NULL, m = 0;
    patina_status *mine = NULL, s = PATINA_OK;
    if (n == 0) return PATINA_OK;
    memset(out, 0, n * dim * sizeof(float));
    pts = malloc((size_t)p->samples * 2 * sizeof *pts);
    seeds = malloc((size_t)p->seeds * sizeof *seeds);
    sub = malloc(n * sizeof *sub);
    map = malloc(n * sizeof *map);
    mine = malloc(n * sizeof *mine);
    if (!pts || !seeds || !sub || !map || !mine) {
        s = patina__fail(PATINA_E_NOMEM, "signature: out of memory for a GPU batch of %zu images", n);
        goto done;
    }
    if ((s = sig_plan(p, pts, seeds)) != PATINA_OK) goto done;
    sig_srgb_linear(lin);
    for (size_t i = 0; i < n; i++) {
        patina_status si = sig_image_check(&imgs[i]);
        if (st) st[i] = si;
        if (si == PATINA_OK) {
            sub[m] = imgs[i];
            map[m++] = i;
        }
    }
    memset(&c, 0, sizeof c);
    c.samples = p->samples;
    c.seeds = p->seeds;
    c.k = p->k;
    c.iters = p->iters;
    c.minsize = p->minsize;
    c.bits = p->bits;
    c.radius = p->radius;
    c.weights = p->weights;
    c.form = p->form;
    c.join = (float)p->join;
    c.drop = (float)p->drop;
    c.alpha = (float)p->alpha;
    c.pts = pts;
    c.seed_idx = seeds;
    c.lin = lin;
    s = m ? patina_gpu_signature(g, &c, o, sub, m, mine) : PATINA_OK;
    /* the GPU wrote image j's record at row j: move it to the caller's row
     * (map[j] >= j, so from the last one down nothing is overwritten early) */
    for (size_t j = m; j-- > 0;) {
        float *dst = o + map[j] * dim;
        if (map[j] != j) {
            memcpy(dst, o + j * dim, dim * sizeof(float));
            memset(o + j * dim, 0, dim * sizeof(float));
        }
        if (s == PATINA_OK && mine[j] == PATINA_E_LIMIT) { /* the C reference, on a host view */
            patina_image_t host;
            mine[j] = patina_gpu_image_host(&host, &imgs[map[j]]);
            if (mine[j] == PATINA_OK) mine[j] = sig_extract_with(p, pts, seeds, dst, &host);
            patina_image_release(&host);
        }
        if (s != PATINA_OK) mine[j] = s;
        if (mine[j] != PATINA_OK) memset(dst, 0, dim * sizeof(float));
        if (st) st[map[j]] = mine[j];
    }
done:
    if (s != PATINA_OK && st && !mine)
        for (size_t i = 0; i < n; i++) st[i] = s;
    free(pts);
    free(seeds);
    free(sub);
    free(map);
    free(mine);
    return s;
}

const patina_family_t patina_family_signature = {
    .name = "signature",
    .uses = PATINA_CAP_SEARCH | PATINA_CAP_PIVOTS | PATINA_CAP_CENTROIDS,
    .help = "feature signatures (PCT): k-means centroids of sampled 7-D features (x, y, L*a*b*, contrast, "
            "entropy) with weights, compared by SQFD (one fixed-size record per image; docs/signature.md)",
    .opts = sig_opts,
    .nopts = sizeof sig_opts / sizeof sig_opts[0],
    .elem = PATINA_ELEM_F32,
    .dim = sig_family_dim,
    .check = sig_check,
    .distance = PDIST_SQFD,
    .cpu = sig_cpu,
    .gpu = PATINA_HAVE_CUDA ? sig_gpu : NULL,
    .hybrid = NULL,
    .gpu_reads_device = 1,
};

/* ------------------------------------------------------------- public view */

/* record as n floats: itself when it is aligned, else a copy in *tmp
 * (freed by the caller) */
static patina_status record_of(const float **rec, size_t *n, const void *record, size_t bytes, void **tmp)
{
    *tmp = NULL;
    if (!record || bytes % sizeof(float))
        return patina__fail(PATINA_E_INVALID, "signature: %s record of %zu bytes", record ? "a" : "null", bytes);
    PATINA_TRY(patina__rows(&record, 1, bytes, PATINA_ROW_ALIGN(sizeof(float)), tmp, "signature"));
    *rec = record;
    *n = bytes / sizeof(float);
    return PATINA_OK;
}

patina_status patina_signature_info(patina_signature_info_t *info, const void *record, size_t bytes)
{
    const float *r = NULL;
    void *tmp;
    size_t n = 0;
    patina_status s;
    if (!info) return patina__fail(PATINA_E_INVALID, "signature: null info");
    memset(info, 0, sizeof *info);
    PATINA_TRY(record_of(&r, &n, record, bytes, &tmp));
    if ((s = sig_record_check(r, n, "signature")) == PATINA_OK) {
        info->count = (uint32_t)r[0];
        info->k = (uint32_t)r[1];
        info->alpha = r[2];
        info->form = (int)r[3];
    }
    free(tmp);
    return s;
}

patina_status patina_signature_centroid(float row[PATINA_SIGNATURE_COLS], const void *record, size_t bytes,
                                        size_t i)
{
    const float *r = NULL;
    void *tmp;
    size_t n = 0;
    patina_status s;
    if (!row) return patina__fail(PATINA_E_INVALID, "signature: null row");
    PATINA_TRY(record_of(&r, &n, record, bytes, &tmp));
    if ((s = sig_record_check(r, n, "signature")) == PATINA_OK) {
        if (i >= (size_t)r[0]) s = patina__fail(PATINA_E_INVALID, "signature: centroid %zu of %zu", i, (size_t)r[0]);
        else memcpy(row, r + SIG_HEADER + SIG_COLS * i, SIG_COLS * sizeof *row);
    }
    free(tmp);
    return s;
}

patina_status patina_signature_pack(const patina_extractor_t *ex, void *record, const float *rows, size_t n)
{
    const sig_params_t *p;
    float *out;
    size_t dim;
    patina_status s;
    if (!ex || ex->family != &patina_family_signature)
        return patina__fail(PATINA_E_INVALID, "signature: pack needs a signature extractor");
    if (!record || (n && !rows)) return patina__fail(PATINA_E_INVALID, "signature: null record or rows");
    p = (const sig_params_t *)ex->params;
    if (n == 0) return patina__fail(PATINA_E_INVALID, "signature: empty signature (no centroids)");
    if (n > (size_t)p->k)
        return patina__fail(PATINA_E_LIMIT, "signature: %zu centroids; the record holds k = %d", n, p->k);
    dim = sig_dim((size_t)p->k);
    /* a record at an address floats cannot be stored at is written through an aligned copy */
    out = ((uintptr_t)record & (sizeof(float) - 1)) ? malloc(dim * sizeof *out) : record;
    if (!out) return patina__fail(PATINA_E_NOMEM, "signature: out of memory");
    memset(out, 0, dim * sizeof *out);
    memcpy(out + SIG_HEADER, rows, n * SIG_COLS * sizeof *out);
    out[0] = (float)n;
    out[1] = (float)p->k;
    out[2] = (float)p->alpha;
    out[3] = (float)p->form;
    out[4] = (float)SIG_VERSION;
    s = sig_record_check(out, dim, "signature");
    if (out != record) {
        memcpy(record, out, dim * sizeof *out);
        free(out);
    }
    return s;
}

patina_status patina_signature_sqfd(double *d, const void *query, const void *other, size_t bytes)
{
    const float *q = NULL, *o = NULL;
    void *tq = NULL, *to = NULL;
    size_t n = 0;
    patina_status s;
    if (!d) return patina__fail(PATINA_E_INVALID, "signature: null distance");
    *d = NAN;
    s = record_of(&q, &n, query, bytes, &tq);
    if (s == PATINA_OK) s = record_of(&o, &n, other, bytes, &to);
    if (s == PATINA_OK) s = sig_record_check(q, n, "signature: query");
    if (s == PATINA_OK) s = sig_record_check(o, n, "signature: other");
    if (s == PATINA_OK && (q[2] != o[2] || q[3] != o[3]))
        s = patina__fail(PATINA_E_INVALID, "signature: records of different alpha or form (%g/%g, %g/%g)",
                         (double)q[2], (double)o[2], (double)q[3], (double)o[3]);
    if (s == PATINA_OK) *d = sig_sqfd(q, o, n);
    free(tq);
    free(to);
    return s;
}
