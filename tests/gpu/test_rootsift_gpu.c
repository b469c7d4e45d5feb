/* The rootsift family on the GPU (src/gpu/rootsift.cu) against the CPU path
 * (VLFeat; src/features/rootsift.c). The goal is byte-identical records;
 * every test prints how close a run got before it fails, so that one device
 * run tells where a difference starts:
 *   stages     per octave of sample photographs (cropped to at most 1024 x
 *              768, no downscale) and synthetic images: the GPU's Gaussian
 *              levels and DoG against VLFeat's own (vl_sift_get_octave,
 *              f->dog): values that differ and the max |difference|;
 *   records    on every sample photograph (PATINA_SAMPLES, else the build's
 *              samples/) at m=384 and n=768, and on synthetic edge cases
 *              (tiny, flat, very large downscaled, odd sizes, fewer than m
 *              features, exact |peak| ties from a periodic pattern,
 *              first_octave -1 and 1, f16): records identical, and per row
 *              keypoints identical (x, y, scale bits), orientations identical,
 *              geometry within 0.01 px (any row), descriptors identical, max
 *              u8 difference of rows with identical geometry;
 *   determinism the same records whatever the batch (all at once, one by
 *              one, reversed, mixed with other images) and across runs;
 *   family     patina_extract_batch(--device gpu) uses the GPU path and
 *              returns the CPU's statuses for bad images;
 *   device images  photographs and the synthetic cases in device memory
 *              (rows padded: the stride is not 3 w), as the GPU decoders
 *              leave them: their grey levels are made on the device
 *              (k_grey_rgb), and their records and statuses equal those of
 *              the same images in host memory byte for byte, in one batch
 *              mixed with host images, all on the device, and one by one
 *              between one-image calls of host images (whose CUDA graph
 *              must not stand in for a device image's call).
 * Label gpu: skipped (77) without one. PATINA_TEST_QUICK=1: 8 photographs;
 * 2 (the sanitizers' racecheck): one photograph, no 6001x4003 case, the
 * default smoothing kernel only in the stage comparison. An argument runs
 * the tests whose name it matches (cmocka's filter: racecheck takes one at
 * a time). */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vl/sift.h>

#include "core/context.h"
#include "features/family.h"
#include "features/rootsift.h"
#include "gpu/gpu.h"
#include "patina/descriptor.h"
#include "patina/identify.h"
#include "testutil.h"

static int quick;
static patina_gpu_t *G;
static int any_diff; /* a record differed somewhere: the run fails at the end */

static const char *samples_dir(void)
{
    const char *s = getenv("PATINA_SAMPLES");
    return s && *s ? s : PATINA_SAMPLES_DIR;
}

static void params_of(rootsift_params_t *p, const char *spec)
{
    patina_extractor_t *ex = NULL;
    TU_OK(patina_extractor_new(&ex, spec));
    assert_string_equal(ex->family->name, "rootsift");
    memcpy(p, ex->params, sizeof *p);
    patina_extractor_free(ex);
}

/* ------------------------------------------------------------ agreement */

typedef struct agree {
    size_t images, same_records, rows_cpu, rows_gpu, kp_same, ang_same, geo_near, desc_same, geo_same_rows;
    unsigned max_u8;
    double max_f16;
    size_t count_diff;
} agree_t;

static void agree_print(const agree_t *a, const char *what)
{
    const double r = a->rows_cpu ? 100.0 / (double)a->rows_cpu : 0.0;
    print_message("%s: %zu images, records identical %zu (%.2f%%); rows cpu %zu gpu %zu, counts differ in %zu "
                  "images; keypoints identical %.3f%%, orientations identical %.3f%%, geometry within 0.01 px "
                  "%.3f%%, descriptors identical %.3f%%, max u8 descriptor difference %u (f16 %.3g) over %zu rows "
                  "of identical geometry\n",
                  what, a->images, a->same_records, a->images ? 100.0 * (double)a->same_records / (double)a->images : 0.0,
                  a->rows_cpu, a->rows_gpu, a->count_diff, r * (double)a->kp_same, r * (double)a->ang_same,
                  r * (double)a->geo_near, r * (double)a->desc_same, a->max_u8, a->max_f16, a->geo_same_rows);
}

/* Prints the first components where two rows differ (stored values; f16
 * also as bits), so a run tells a rounding step from a different value. */
static void show_components(const unsigned char *rc, const unsigned char *rg, int f16)
{
    for (int k = 0, shown = 0; k < 128 && shown < 4; k++) {
        if (f16) {
            const unsigned hc = (unsigned)(rc[2 * k] | rc[2 * k + 1] << 8), hg = (unsigned)(rg[2 * k] | rg[2 * k + 1] << 8);
            if (hc == hg) continue;
            print_message("      component %d: cpu %.9g (0x%04x) gpu %.9g (0x%04x)\n", k,
                          (double)rs_f16_to_f32((uint16_t)hc), hc, (double)rs_f16_to_f32((uint16_t)hg), hg);
        } else {
            if (rc[k] == rg[k]) continue;
            print_message("      component %d: cpu %u gpu %u\n", k, rc[k], rg[k]);
        }
        shown++;
    }
}

/* Compares n records (cpu, gpu) of `bytes` each; adds to a; prints the
 * first differences of the first few images that differ. */
static void compare(const unsigned char *cpu, const unsigned char *gpu, size_t n, size_t bytes, agree_t *a,
                    const char *what)
{
    static int shown;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *c = cpu + i * bytes, *g = gpu + i * bytes;
        const size_t nc = rs_count(c), ng = rs_count(g), m = rs_m(c);
        const int f16 = rs_quant(c) == RS_QUANT_F16;
        size_t kp = 0, ang = 0, near = 0, desc = 0;
        a->images++;
        if (!memcmp(c, g, bytes)) {
            a->same_records++;
            a->rows_cpu += nc;
            a->rows_gpu += ng;
            a->kp_same += nc;
            a->ang_same += nc;
            a->geo_near += nc;
            a->desc_same += nc;
            a->geo_same_rows += nc;
            continue;
        }
        any_diff = 1;
        a->rows_cpu += nc;
        a->rows_gpu += ng;
        if (nc != ng || rs_m(g) != m) a->count_diff++;
        for (size_t r = 0; r < nc; r++) {
            float gc[4], gg[4];
            rs_geom_get(c, r, gc);
            if (r < ng) {
                rs_geom_get(g, r, gg);
                if (!memcmp(gc, gg, 12)) {
                    kp++;
                    if (!memcmp(gc + 3, gg + 3, 4)) {
                        ang++;
                        a->geo_same_rows++;
                        const unsigned char *rc = rs_row(c, r), *rg = rs_row(g, r);
                        if (!memcmp(rc, rg, 128 * (f16 ? 2 : 1))) desc++;
                        for (int k = 0; k < 128; k++) {
                            if (f16) {
                                const double d = fabs((double)rs_f16_to_f32((uint16_t)(rc[2 * k] | rc[2 * k + 1] << 8)) -
                                                      (double)rs_f16_to_f32((uint16_t)(rg[2 * k] | rg[2 * k + 1] << 8)));
                                if (d > a->max_f16) a->max_f16 = d;
                            } else {
                                const unsigned d = rc[k] > rg[k] ? rc[k] - rg[k] : rg[k] - rc[k];
                                if (d > a->max_u8) a->max_u8 = d;
                            }
                        }
                    }
                }
            }
            for (size_t q = 0; q < ng; q++) { /* any GPU row within 0.01 px */
                rs_geom_get(g, q, gg);
                if (fabsf(gc[0] - gg[0]) <= 0.01f && fabsf(gc[1] - gg[1]) <= 0.01f &&
                    fabsf(gc[2] - gg[2]) <= 0.01f * (gc[2] > 1 ? gc[2] : 1)) {
                    near++;
                    break;
                }
            }
        }
        a->kp_same += kp;
        a->ang_same += ang;
        a->geo_near += near;
        a->desc_same += desc;
        if (shown < 12) {
            shown++;
            print_message("  %s image %zu: count cpu %zu gpu %zu; rows: keypoints identical %zu, orientations %zu, "
                          "within 0.01 px %zu, descriptors %zu\n",
                          what, i, nc, ng, kp, ang, near, desc);
            for (size_t r = 0, k = 0; r < nc && r < ng && k < 3; r++) {
                float gc[4], gg[4];
                rs_geom_get(c, r, gc);
                rs_geom_get(g, r, gg);
                if (memcmp(gc, gg, 16) || memcmp(rs_row(c, r), rs_row(g, r), 128 * (f16 ? 2 : 1))) {
                    print_message("    row %zu: cpu (%.9g %.9g %.9g %.9g) gpu (%.9g %.9g %.9g %.9g)%s\n", r,
                                  (double)gc[0], (double)gc[1], (double)gc[2], (double)gc[3], (double)gg[0],
                                  (double)gg[1], (double)gg[2], (double)gg[3],
                                  memcmp(rs_row(c, r), rs_row(g, r), 128 * (f16 ? 2 : 1)) ? " descriptor differs" : "");
                    show_components(rs_row(c, r), rs_row(g, r), f16);
                    k++;
                }
            }
            if (memcmp(c, g, 64)) print_message("    headers differ\n");
        }
    }
}

/* CPU and GPU records of n images under spec (budget m, or n when query),
 * compared; statuses must agree. Returns the GPU records (caller frees). */
static unsigned char *run_both(const char *spec, int query, const patina_image_t *imgs, size_t n, agree_t *a,
                               const char *what, size_t *bytes_out)
{
    rootsift_params_t p;
    size_t budget, bytes;
    unsigned char *c, *g;
    patina_status *sc = malloc(n * sizeof *sc), *sg = malloc(n * sizeof *sg);
    params_of(&p, spec);
    budget = (size_t)(query ? p.n : p.m);
    bytes = rs_record_bytes(budget, (uint32_t)p.quant);
    c = malloc(n * bytes);
    g = malloc(n * bytes);
    assert_non_null(c);
    assert_non_null(g);
    for (size_t i = 0; i < n; i++) sc[i] = rs_extract(&p, budget, c + i * bytes, &imgs[i]);
    TU_OK(rs_extract_gpu(G, &p, budget, g, imgs, n, sg));
    for (size_t i = 0; i < n; i++)
        if (sc[i] != sg[i]) fail_msg("%s %s: image %zu status cpu %d gpu %d", what, spec, i, (int)sc[i], (int)sg[i]);
    compare(c, g, n, bytes, a, what);
    free(c);
    free(sc);
    free(sg);
    if (bytes_out) *bytes_out = bytes;
    return g;
}

/* ------------------------------------------------------------ images */

/* An owned w x h RGB image from a grey function. */
static void grey_image(patina_image_t *img, int w, int h, double (*fn)(int, int, void *), void *arg)
{
    memset(img, 0, sizeof *img);
    img->width = w;
    img->height = h;
    img->stride = 3 * (size_t)w;
    img->data = malloc(img->stride * (size_t)(h > 0 ? h : 1) + 1);
    img->owned = 1;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double v = fn(x, y, arg);
            unsigned char u = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v + 0.5);
            unsigned char *q = (unsigned char *)img->data + (size_t)y * img->stride + 3 * (size_t)x;
            q[0] = q[1] = q[2] = u;
        }
}

static double f_flat(int x, int y, void *a)
{
    (void)x;
    (void)y;
    (void)a;
    return 117;
}

/* Identical Gaussian blobs on a grid of period 24 px: equal |peak| at
 * every interior copy (the same sums over the same values). */
static double f_periodic(int x, int y, void *a)
{
    const double dx = (x % 24) - 12, dy = (y % 24) - 12;
    (void)a;
    return 40 + 170 * exp(-(dx * dx + dy * dy) / (2 * 3.0 * 3.0));
}

/* A few blobs on a smooth ramp: fewer features than m. */
static double f_few(int x, int y, void *a)
{
    const int *wh = a;
    double v = 60 + 60.0 * x / wh[0];
    for (int k = 0; k < 5; k++) {
        const double cx = wh[0] * (k + 1) / 6.0, cy = wh[1] * (k % 2 ? 0.3 : 0.7), s = 3 + 2 * k;
        const double dx = x - cx, dy = y - cy;
        v += (k % 2 ? -90 : 90) * exp(-(dx * dx + dy * dy) / (2 * s * s));
    }
    return v;
}

/* Blobs at pseudo-random places, of several sizes, light and dark. */
static double f_blobs(int x, int y, void *a)
{
    const int *wh = a;
    double v = 128;
    for (int k = 0; k < 60; k++) {
        const double cx = (double)((k * 7919 + 13) % wh[0]), cy = (double)((k * 104729 + 7) % wh[1]);
        const double s = 2 + (k % 7) * 1.7, dx = x - cx, dy = y - cy;
        v += (k % 2 ? -70 : 70) * exp(-(dx * dx + dy * dy) / (2 * s * s));
    }
    return v + 8 * sin(x * 0.37) * cos(y * 0.23);
}

/* Synthetic edge cases: owned images in *out, their names in names. */
static size_t synthetic(patina_image_t **out, const char ***names)
{
    static const char *nm[16];
    patina_image_t *v = calloc(16, sizeof *v);
    size_t n = 0;
    tu_rng_t r;
    static int wh[16][2];
    tu_rng_seed(&r, 29);
#define ADD(name, stmt)     \
    do {                    \
        nm[n] = name;       \
        stmt;               \
        n++;                \
    } while (0)
    ADD("1x1", tu_random_image(&v[n], 1, 1, 0, &r));
    ADD("3x5", tu_random_image(&v[n], 3, 5, 0, &r));
    ADD("4x4", tu_random_image(&v[n], 4, 4, 0, &r));
    ADD("9x7 noise", tu_random_image(&v[n], 9, 7, 0, &r));
    ADD("31x17 noise", tu_random_image(&v[n], 31, 17, 0, &r));
    ADD("flat 200x120", grey_image(&v[n], 200, 120, f_flat, NULL));
    ADD("periodic 241x193 (ties)", grey_image(&v[n], 241, 193, f_periodic, NULL));
    wh[n][0] = 333, wh[n][1] = 211;
    ADD("few 333x211", grey_image(&v[n], 333, 211, f_few, wh[n]));
    wh[n][0] = 1023, wh[n][1] = 767;
    ADD("blobs 1023x767", grey_image(&v[n], 1023, 767, f_blobs, wh[n]));
    wh[n][0] = 257, wh[n][1] = 1029;
    ADD("blobs 257x1029 (downscaled)", grey_image(&v[n], 257, 1029, f_blobs, wh[n]));
    ADD("noise 1025x1 ", tu_random_image(&v[n], 1025, 1, 0, &r));
    ADD("edges 515x387", tu_random_image(&v[n], 515, 387, 2, &r));
    if (quick < 2) ADD("smooth 6001x4003 (downscaled)", tu_random_image(&v[n], 6001, 4003, 1, &r));
#undef ADD
    *out = v;
    *names = nm;
    return n;
}

static void release_all(patina_image_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++) patina_image_release(&v[i]);
    free(v);
}

/* Sample photographs, decoded (at most maxn). */
static size_t photos(patina_image_t **out, size_t maxn)
{
    char **files;
    const size_t nf = tu_list_files(samples_dir(), "jpg,png", &files);
    patina_image_t *v = calloc(nf ? nf : 1, sizeof *v);
    size_t n = 0;
    if (quick >= 2) maxn = 1;
    for (size_t i = 0; i < nf && n < maxn; i++)
        if (patina_image_load(&v[n], files[i], NULL) == PATINA_OK) n++;
    tu_free_list(files, nf);
    *out = v;
    return n;
}

/* ------------------------------------------------------------ tests */

/* Levels and DoG per octave against VLFeat's, with smoothing kernels
 * `variant` (patina_gpu__rootsift_smoothing; the default is selected again
 * after). */
static const char *const smooth_name[2] = {"reg", "tile"};
static void stage_compare(const patina_image_t *img, const char *name, const char *spec, int variant)
{
    rootsift_params_t p;
    patina_gpu_rootsift_conf_t *c = malloc(sizeof *c);
    const int w = img->width < 1024 ? img->width : 1024, h = img->height < 768 ? img->height : 768;
    uint8_t *grey = malloc((size_t)img->width * img->height);
    float *im = malloc((size_t)w * h * sizeof *im);
    VlSiftFilt *f;
    int O, most, err, k = 0;
    params_of(&p, spec);
    TU_OK(rs_gpu_conf(c, &p, (size_t)p.m));
    TU_OK(patina_image_to_grey(grey, img));
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) im[(size_t)y * w + x] = grey[(size_t)y * img->width + x];
    if (w < 8 || h < 8) goto out;
    most = (int)floor(log2((double)(w < h ? w : h))) - p.first_octave - 3;
    O = most < 1 ? 1 : most;
    f = vl_sift_new(w, h, O, p.levels, p.first_octave);
    vl_sift_set_peak_thresh(f, p.peak);
    vl_sift_set_edge_thresh(f, p.edge);
    for (err = vl_sift_process_first_octave(f, im); err == VL_ERR_OK; err = vl_sift_process_next_octave(f), k++) {
        const int ow = vl_sift_get_octave_width(f), oh = vl_sift_get_octave_height(f);
        const size_t pl = (size_t)ow * oh;
        float *lev = malloc((size_t)(p.levels + 3) * pl * sizeof *lev), *dog = malloc((size_t)(p.levels + 2) * pl * sizeof *dog);
        double dl = 0, dd = 0;
        size_t nl = 0, nd = 0;
        TU_OK(patina_gpu__rootsift_smoothing(G, variant));
        TU_OK(patina_gpu__rootsift_octave(G, c, im, w, h, O, k, lev, dog));
        TU_OK(patina_gpu__rootsift_smoothing(G, 0));
        vl_sift_detect(f); /* computes f->dog */
        for (int s = -1; s <= p.levels + 1; s++) {
            const float *v = vl_sift_get_octave(f, s), *gv = lev + (size_t)(s + 1) * pl;
            for (size_t i = 0; i < pl; i++)
                if (memcmp(&v[i], &gv[i], 4)) {
                    nl++;
                    if (fabs((double)v[i] - gv[i]) > dl) dl = fabs((double)v[i] - gv[i]);
                }
        }
        for (int s = 0; s < p.levels + 2; s++) {
            const float *v = f->dog + (size_t)s * pl, *gv = dog + (size_t)s * pl;
            for (size_t i = 0; i < pl; i++)
                if (memcmp(&v[i], &gv[i], 4)) {
                    nd++;
                    if (fabs((double)v[i] - gv[i]) > dd) dd = fabs((double)v[i] - gv[i]);
                }
        }
        print_message("  stages (%s smoothing) %s %s octave %d (%dx%d): levels differ %zu/%zu (max %.3g), DoG differ "
                      "%zu/%zu (max %.3g); VLFeat keypoints %d\n",
                      smooth_name[variant], name, spec, p.first_octave + k, ow, oh, nl, (size_t)(p.levels + 3) * pl, dl, nd,
                      (size_t)(p.levels + 2) * pl, dd, vl_sift_get_nkeypoints(f));
        if (nl || nd) any_diff = 1;
        free(lev);
        free(dog);
    }
    vl_sift_delete(f);
out:
    free(c);
    free(grey);
    free(im);
}

static void test_stages(void **state)
{
    patina_image_t *v;
    const char **names;
    size_t n = synthetic(&v, &names), np;
    (void)state;
    for (int sv = 0; sv < (quick >= 2 ? 1 : 2); sv++) { /* both smoothing kernels */
        for (size_t i = 0; i < n; i++) stage_compare(&v[i], names[i], "rootsift", sv);
        stage_compare(&v[8], names[8], "rootsift:first_octave=-1", sv);
        stage_compare(&v[8], names[8], "rootsift:first_octave=1,levels=2", sv);
        stage_compare(&v[8], names[8], "rootsift:levels=1", sv); /* widths over k_smooth's: k_conv_vh */
    }
    release_all(v, n);
    np = photos(&v, quick ? 2 : 4);
    for (int sv = 0; sv < 2; sv++)
        for (size_t i = 0; i < np; i++) stage_compare(&v[i], "photo", "rootsift", sv);
    release_all(v, np);
}

static void test_synthetic(void **state)
{
    static const char *const specs[] = {"rootsift", "rootsift:m=50", "rootsift:quant=f16,m=100",
                                        "rootsift:first_octave=-1,m=200", "rootsift:first_octave=1,levels=4",
                                        "rootsift:peak=3.4,edge=5,maxside=700"};
    patina_image_t *v;
    const char **names;
    const size_t n = synthetic(&v, &names);
    (void)state;
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        agree_t a;
        memset(&a, 0, sizeof a);
        free(run_both(specs[s], 0, v, n, &a, specs[s], NULL));
        agree_print(&a, specs[s]);
    }
    /* the GPU's own f16 rows against its u8 rows of the same features: within
     * the two roundings (1/1024 + 1/4096), or the f16 step is not the only
     * difference */
    {
        rootsift_params_t p8, p16;
        size_t b8, b16, rows = 0;
        unsigned char *g8, *g16;
        double mx = 0.0;
        patina_status *st = malloc(n * sizeof *st);
        params_of(&p8, "rootsift:m=100");
        params_of(&p16, "rootsift:quant=f16,m=100");
        b8 = rs_record_bytes(100, RS_QUANT_U8);
        b16 = rs_record_bytes(100, RS_QUANT_F16);
        g8 = malloc(n * b8);
        g16 = malloc(n * b16);
        TU_OK(rs_extract_gpu(G, &p8, 100, g8, v, n, st));
        TU_OK(rs_extract_gpu(G, &p16, 100, g16, v, n, st));
        for (size_t i = 0; i < n; i++)
            for (size_t r = 0; r < rs_count(g8 + i * b8) && r < rs_count(g16 + i * b16); r++) {
                float a[128], b[128];
                rs_row_get(g8 + i * b8, r, a);
                rs_row_get(g16 + i * b16, r, b);
                rows++;
                for (int k = 0; k < 128; k++)
                    if (fabs((double)a[k] - b[k]) > mx) mx = fabs((double)a[k] - b[k]);
            }
        print_message("gpu f16 vs gpu u8 rows (m=100): %zu rows, max |f16 - u8/512| %.3g (bound %.3g)\n", rows, mx,
                      1.0 / 1024 + 1.0 / 4096);
        if (mx > 1.0 / 1024 + 1.0 / 4096) any_diff = 1;
        free(g8);
        free(g16);
        free(st);
    }
    /* the fallback paths give the same records (all at once): the
     * shared-tile smoothing (wide filters') at every width; every rank's
     * orientations by the gated round; both */
    for (int var = 0; var < 3; var++) {
        static const struct {
            int smooth, orient;
            const char *name;
        } vars[3] = {{1, 0, "rootsift, tile smoothing"},
                     {0, 1, "rootsift, orientations by the gated round"},
                     {1, 1, "rootsift, tile smoothing, orientations by the gated round"}};
        agree_t a;
        memset(&a, 0, sizeof a);
        TU_OK(patina_gpu__rootsift_smoothing(G, vars[var].smooth));
        TU_OK(patina_gpu__rootsift_orientations(G, vars[var].orient));
        free(run_both("rootsift", 0, v, n, &a, vars[var].name, NULL));
        TU_OK(patina_gpu__rootsift_smoothing(G, 0));
        TU_OK(patina_gpu__rootsift_orientations(G, 0));
        agree_print(&a, vars[var].name);
    }
    /* each case alone too (names say which) */
    for (size_t i = 0; i < n; i++) {
        agree_t a;
        memset(&a, 0, sizeof a);
        free(run_both("rootsift", 0, &v[i], 1, &a, names[i], NULL));
        if (a.same_records != 1) agree_print(&a, names[i]);
    }
    release_all(v, n);
}

static void test_photos(void **state)
{
    patina_image_t *v;
    const size_t n = photos(&v, quick ? 8 : 100000);
    (void)state;
    if (n == 0) {
        print_message("no sample photographs under %s (scripts/fetch-samples.sh): photo parity not tested\n",
                      samples_dir());
        free(v);
        return;
    }
    {
        agree_t a, b;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        free(run_both("rootsift", 0, v, n, &a, "photos m=384", NULL));
        agree_print(&a, "photos m=384 (references)");
        free(run_both("rootsift", 1, v, n, &b, "photos n=768", NULL));
        agree_print(&b, "photos n=768 (queries)");
    }
    release_all(v, n);
}

/* The same record whatever the batch and run. */
static void test_determinism(void **state)
{
    patina_image_t *v, *s, *mix;
    const char **names;
    const size_t n = photos(&v, quick ? 4 : 12), ns = synthetic(&s, &names);
    rootsift_params_t p;
    size_t bytes;
    unsigned char *all, *one, *rev, *mixed;
    patina_status *st;
    (void)state;
    if (n == 0) {
        release_all(v, n);
        release_all(s, ns);
        return;
    }
    params_of(&p, "rootsift");
    bytes = rs_record_bytes((size_t)p.m, (uint32_t)p.quant);
    all = malloc(n * bytes);
    one = malloc(n * bytes);
    rev = malloc(n * bytes);
    mixed = malloc((n + ns) * bytes);
    st = malloc((n + ns) * sizeof *st);
    mix = malloc((n + ns) * sizeof *mix);
    TU_OK(rs_extract_gpu(G, &p, (size_t)p.m, all, v, n, st));
    for (size_t i = 0; i < n; i++) TU_OK(rs_extract_gpu(G, &p, (size_t)p.m, one + i * bytes, &v[i], 1, st));
    for (size_t i = 0; i < n; i++) mix[i] = v[n - 1 - i];
    TU_OK(rs_extract_gpu(G, &p, (size_t)p.m, rev, mix, n, st));
    for (size_t i = 0; i < n + ns; i++) mix[i] = i % 2 && i / 2 < ns ? s[i / 2] : v[(i / 2) % n]; /* interleaved */
    TU_OK(rs_extract_gpu(G, &p, (size_t)p.m, mixed, mix, n + ns, st));
    {
        size_t bad_one = 0, bad_rev = 0, bad_mix = 0;
        for (size_t i = 0; i < n; i++) {
            bad_one += memcmp(all + i * bytes, one + i * bytes, bytes) != 0;
            bad_rev += memcmp(all + i * bytes, rev + (n - 1 - i) * bytes, bytes) != 0;
        }
        for (size_t i = 0; i < n + ns; i++)
            if (!(i % 2 && i / 2 < ns)) bad_mix += memcmp(all + ((i / 2) % n) * bytes, mixed + i * bytes, bytes) != 0;
        {
            unsigned char *again = malloc(n * bytes);
            size_t bad_run = 0;
            TU_OK(rs_extract_gpu(G, &p, (size_t)p.m, again, v, n, st));
            for (size_t i = 0; i < n; i++) bad_run += memcmp(all + i * bytes, again + i * bytes, bytes) != 0;
            print_message("determinism over %zu photographs: differ one-by-one %zu, reversed %zu, mixed with "
                          "synthetic %zu, second run %zu\n", n, bad_one, bad_rev, bad_mix, bad_run);
            free(again);
            assert_int_equal(bad_run, 0);
        }
        assert_int_equal(bad_one, 0);
        assert_int_equal(bad_rev, 0);
        assert_int_equal(bad_mix, 0);
    }
    free(all);
    free(one);
    free(rev);
    free(mixed);
    free(st);
    free(mix);
    release_all(v, n);
    release_all(s, ns);
}

/* The same records whatever the memory budget, i.e. whatever the pipeline
 * does with them: contexts of 256 MiB (an image of ~100 MB needs more than
 * half the arena: alone on all of it, the pipeline drained around it, or
 * the CPU's when over half the budget), 512 MiB and 1 GiB (sub-batches of
 * one to a few images through both slots), against the default context's
 * records in one call. */
static void test_pipeline(void **state)
{
    static const uint64_t budgets[] = {(uint64_t)256 << 20, (uint64_t)512 << 20, (uint64_t)1 << 30};
    patina_image_t *v, *s, *mix;
    const char **names;
    const size_t n = photos(&v, quick ? 6 : 24), ns = synthetic(&s, &names);
    rootsift_params_t p;
    size_t bytes, nm;
    unsigned char *ref, *got;
    patina_status *st;
    (void)state;
    if (n == 0) {
        release_all(v, n);
        release_all(s, ns);
        return;
    }
    nm = n + ns;
    params_of(&p, "rootsift");
    bytes = rs_record_bytes((size_t)p.m, (uint32_t)p.quant);
    ref = malloc(nm * bytes);
    got = malloc(nm * bytes);
    st = malloc(nm * sizeof *st);
    mix = malloc(nm * sizeof *mix);
    for (size_t i = 0; i < nm; i++) mix[i] = i % 2 && i / 2 < ns ? s[i / 2] : v[(i / 2) % n];
    TU_OK(rs_extract_gpu(G, &p, (size_t)p.m, ref, mix, nm, st));
    for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++) {
        patina_gpu_t *g;
        double ms[PGPU_RS_STAGES];
        size_t batches = 0, bad = 0;
        TU_OK(patina_gpu_open(&g, 0, budgets[b]));
        TU_OK(rs_extract_gpu(g, &p, (size_t)p.m, got, mix, nm, st));
        patina_gpu__rootsift_times(g, ms, &batches);
        patina_gpu_close(g);
        for (size_t i = 0; i < nm; i++) bad += memcmp(ref + i * bytes, got + i * bytes, bytes) != 0;
        print_message("pipeline: budget %llu MiB, %zu images, %zu GPU sub-batches, %zu records differ\n",
                      (unsigned long long)(budgets[b] >> 20), nm, batches, bad);
        if (bad) any_diff = 1;
        assert_int_equal(bad, 0);
        if (b + 1 == sizeof budgets / sizeof budgets[0]) assert_true(batches > 1); /* the slots took turns */
    }
    free(ref);
    free(got);
    free(st);
    free(mix);
    release_all(v, n);
    release_all(s, ns);
}

/* Through the family table and a context: --device gpu works, bad images
 * get the CPU's statuses. */
static void test_family(void **state)
{
    patina_context_t *ctx;
    patina_context_opts_t o;
    patina_extractor_t *ex;
    patina_image_t im[3];
    tu_rng_t r;
    patina_status sc[3], sg[3];
    size_t bytes;
    unsigned char *a, *b;
    (void)state;
    tu_rng_seed(&r, 7);
    memset(im, 0, sizeof im);
    tu_random_image(&im[0], 300, 200, 2, &r);
    im[1].width = 10;
    im[1].height = 10; /* no pixels */
    im[1].stride = 30;
    tu_random_image(&im[2], 64, 64, 0, &r);
    patina_context_opts_init(&o);
    TU_OK(patina_context_new(&ctx, &o));
    TU_OK(patina_extractor_new(&ex, "rootsift"));
    assert_true(patina_extractor_has_device(ex, PATINA_DEVICE_GPU));
    bytes = patina_extractor_bytes(ex);
    a = malloc(3 * bytes);
    b = malloc(3 * bytes);
    (void)patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, a, im, 3, sc);
    (void)patina_extract_batch(ctx, ex, PATINA_DEVICE_GPU, b, im, 3, sg);
    for (int i = 0; i < 3; i++) assert_int_equal(sc[i], sg[i]);
    for (int i = 0; i < 3; i++)
        if (sc[i] == PATINA_OK && memcmp(a + i * bytes, b + i * bytes, bytes)) {
            print_message("family: image %d differs\n", i);
            any_diff = 1;
        }
    free(a);
    free(b);
    patina_extractor_free(ex);
    patina_context_free(ctx);
    patina_image_release(&im[0]);
    patina_image_release(&im[2]);
}

/* A device copy of img (owned by the caller: patina_gpu__dev_free on
 * ->data), its rows `pad` bytes longer than 3 w. */
static void dev_copy(patina_image_t *d, const patina_image_t *img, size_t pad)
{
    const size_t rb = 3 * (size_t)img->width, stride = rb + pad;
    uint8_t *h = calloc((size_t)img->height, stride);
    assert_non_null(h);
    for (int y = 0; y < img->height; y++) memcpy(h + (size_t)y * stride, img->data + (size_t)y * img->stride, rb);
    memset(d, 0, sizeof *d);
    d->width = img->width;
    d->height = img->height;
    d->stride = stride;
    d->data = patina_gpu__dev_alloc(G, stride * (size_t)img->height);
    assert_non_null(d->data);
    TU_OK(patina_gpu__upload(G, d->data, h, stride * (size_t)img->height));
    free(h);
    assert_true(patina_gpu_image_on_device(d));
}

/* Records and statuses of a against b (n each): the images that differ. */
static size_t rec_diff(const unsigned char *a, const patina_status *sa, const unsigned char *b, const patina_status *sb,
                       size_t n, size_t bytes, const char *what)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (sa[i] != sb[i] || (sa[i] == PATINA_OK && memcmp(a + i * bytes, b + i * bytes, bytes))) {
            if (bad < 5) print_message("  device images, %s: image %zu differs (status %d vs %d)\n", what, i,
                                       (int)sa[i], (int)sb[i]);
            bad++;
        }
    return bad;
}

static void test_device_images(void **state)
{
    patina_image_t *v, *s, *host, *dev, *mixed;
    const char **names;
    const size_t np = photos(&v, quick ? 4 : 8), ns = synthetic(&s, &names), n = np + ns;
    rootsift_params_t p;
    size_t bytes, bad = 0;
    unsigned char *rh, *rm, *rd, *r1;
    patina_status *sh, *sm, *sd, *s1;
    (void)state;
    params_of(&p, "rootsift");
    bytes = rs_record_bytes((size_t)p.m, (uint32_t)p.quant);
    host = calloc(n, sizeof *host);
    dev = calloc(n, sizeof *dev);
    mixed = calloc(n, sizeof *mixed);
    rh = malloc(n * bytes);
    rm = malloc(n * bytes);
    rd = malloc(n * bytes);
    r1 = malloc(4 * bytes);
    sh = calloc(n, sizeof *sh);
    sm = calloc(n, sizeof *sm);
    sd = calloc(n, sizeof *sd);
    s1 = calloc(4, sizeof *s1);
    for (size_t i = 0; i < n; i++) {
        host[i] = i < np ? v[i] : s[i - np];
        host[i].owned = 0;
        dev_copy(&dev[i], &host[i], 1 + i % 7);
        mixed[i] = i % 2 ? host[i] : dev[i];
    }
    TU_OK(rs_extract_gpu(G, &p, (size_t)p.m, rh, host, n, sh));
    TU_OK(rs_extract_gpu(G, &p, (size_t)p.m, rm, mixed, n, sm));
    TU_OK(rs_extract_gpu(G, &p, (size_t)p.m, rd, dev, n, sd));
    bad += rec_diff(rh, sh, rm, sm, n, bytes, "mixed batch");
    bad += rec_diff(rh, sh, rd, sd, n, bytes, "all on the device");
    for (size_t i = 0; i < n; i++) { /* host, host (graph captured), device, host (graph replayed) */
        const patina_image_t seq[4] = {host[i], host[i], dev[i], host[i]};
        for (int k = 0; k < 4; k++) TU_OK(rs_extract_gpu(G, &p, (size_t)p.m, r1 + k * bytes, &seq[k], 1, &s1[k]));
        for (int k = 0; k < 4; k++) {
            char what[96];
            snprintf(what, sizeof what, "one-image call %d of %s", k, i < np ? "a photograph" : names[i - np]);
            if (rec_diff(rh + i * bytes, &sh[i], r1 + k * bytes, &s1[k], 1, bytes, what)) bad++;
        }
    }
    print_message("device images: %zu photographs and %zu synthetic images, in device memory with padded rows: "
                  "%zu records or statuses differ from the host images'\n", np, ns, bad);
    for (size_t i = 0; i < n; i++) patina_gpu__dev_free(G, dev[i].data);
    free(host);
    free(dev);
    free(mixed);
    free(rh);
    free(rm);
    free(rd);
    free(r1);
    free(sh);
    free(sm);
    free(sd);
    free(s1);
    release_all(v, np);
    release_all(s, ns);
    if (bad) any_diff = 1;
    assert_int_equal(bad, 0);
}

/* identify's queries: patina_identify_extract with a context that has the
 * GPU extracts them there; the records and the answers (CPU matching, so
 * that only the extraction differs) equal those of CPU extraction (ctx
 * NULL). References: half the photographs (or synthetic images), CPU
 * records; queries: all of them. */
static void test_identify_queries(void **state)
{
    patina_image_t *v;
    const char **names;
    size_t n = photos(&v, quick ? 8 : 24), nref, qb, same_q = 0;
    patina_refset_t *rs;
    patina_context_t *ctx;
    patina_context_opts_t co;
    patina_identify_opts_t o;
    rootsift_params_t p;
    unsigned char *rec, *qc, *qg;
    patina_status *st;
    patina_identify_hit_t *hc, *hg;
    patina_identify_result_t *rc, *rg;
    (void)state;
    if (n < 2) {
        release_all(v, n);
        n = synthetic(&v, &names);
    }
    TU_OK(patina_refset_new(&rs, "rootsift"));
    params_of(&p, "rootsift");
    rec = malloc(rs_record_bytes((size_t)p.m, RS_QUANT_U8));
    nref = (n + 1) / 2;
    for (size_t i = 0; i < nref; i++) {
        TU_OK(rs_extract(&p, (size_t)p.m, rec, &v[i]));
        TU_OK(patina_refset_put(rs, 1000 + i, rec, rs_record_bytes((size_t)p.m, RS_QUANT_U8)));
    }
    qb = patina_identify_query_bytes(rs);
    qc = malloc(n * qb);
    qg = malloc(n * qb);
    st = malloc(n * sizeof *st);
    patina_context_opts_init(&co);
    TU_OK(patina_context_new(&ctx, &co));
    TU_OK(patina_identify_extract(NULL, rs, qc, v, n, st));
    {
        double ms[PGPU_RS_STAGES];
        size_t before, after;
        patina_gpu_t *g;
        TU_OK(patina__context_gpu_acquire(ctx, &g));
        patina_gpu__rootsift_times(g, ms, &before);
        patina__context_gpu_release(ctx);
        TU_OK(patina_identify_extract(ctx, rs, qg, v, n, st));
        TU_OK(patina__context_gpu_acquire(ctx, &g));
        patina_gpu__rootsift_times(g, ms, &after);
        patina__context_gpu_release(ctx);
        assert_true(after > 0); /* the queries went through the GPU */
    }
    for (size_t i = 0; i < n; i++) same_q += !memcmp(qc + i * qb, qg + i * qb, qb);
    patina_identify_opts_init(&o);
    o.k = 5;
    o.device = PATINA_DEVICE_CPU;
    hc = calloc(n * o.k, sizeof *hc);
    hg = calloc(n * o.k, sizeof *hg);
    rc = calloc(n, sizeof *rc);
    rg = calloc(n, sizeof *rg);
    TU_OK(patina_identify(ctx, rs, qc, n, &o, hc, rc));
    TU_OK(patina_identify(ctx, rs, qg, n, &o, hg, rg));
    {
        size_t same_a = 0;
        for (size_t i = 0; i < n; i++)
            same_a += rc[i].decision == rg[i].decision && rc[i].nhits == rg[i].nhits &&
                      rc[i].query_features == rg[i].query_features &&
                      !memcmp(hc + i * o.k, hg + i * o.k, o.k * sizeof *hc);
        print_message("identify queries: %zu images against %zu references: query records identical %zu, answers "
                      "identical %zu (GPU vs CPU extraction)\n", n, nref, same_q, same_a);
        if (same_q != n) any_diff = 1;
        assert_int_equal(same_a, n);
    }
    free(hc);
    free(hg);
    free(rc);
    free(rg);
    free(qc);
    free(qg);
    free(st);
    free(rec);
    patina_context_free(ctx);
    patina_refset_free(rs);
    release_all(v, n);
}

/* Last: fails when any record or stage above differed (after printing). */
static void test_identical(void **state)
{
    (void)state;
    double ms[PGPU_RS_STAGES];
    size_t batches;
    patina_gpu__rootsift_times(G, ms, &batches);
    print_message("GPU stage time over the tests' %zu batches (ms): upload %.1f, downscale %.1f, smoothing %.1f, "
                  "DoG+gradients %.1f, detection+refinement+orientations %.1f, selection %.1f, descriptors %.1f, "
                  "download %.1f\n",
                  batches, ms[0], ms[1], ms[2], ms[3], ms[4], ms[5], ms[6], ms[7]);
    if (any_diff) fail_msg("GPU records or stages differ from the CPU's (see the measures above)");
}

static int setup(void **state)
{
    (void)state;
    if (patina_gpu_open(&G, 0, 0) != PATINA_OK) {
        printf("gpu_open failed: %s\n", patina_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    char plan[1024];
    (void)state;
    patina_gpu__plan(G, plan, sizeof plan);
    printf("  %s\n", plan);
    patina_gpu_close(G);
    return 0;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stages),      cmocka_unit_test(test_synthetic), cmocka_unit_test(test_photos),
        cmocka_unit_test(test_determinism), cmocka_unit_test(test_pipeline),  cmocka_unit_test(test_family),
        cmocka_unit_test(test_identify_queries), cmocka_unit_test(test_device_images),
        cmocka_unit_test(test_identical),
    };
    quick = getenv("PATINA_TEST_QUICK") ? atoi(getenv("PATINA_TEST_QUICK")) : 0;
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* one test (a sanitizer's run): its name, * and ? allowed */
    tu_require_gpu();
    return cmocka_run_group_tests(tests, setup, teardown);
}
