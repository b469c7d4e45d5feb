/* Tests of the rootsift family (src/features/rootsift.c, docs/rootsift.md):
 * parity with VLFeat's own pipeline on real photographs, RootSIFT and its
 * quantisation, the record layout, determinism over threads, the maxside
 * downscale and its geometry, degenerate images, options, binary16, the
 * rootsift_ratio distance and the extract CLI.
 *
 * The parity tests need the sample photographs (scripts/fetch-samples.sh);
 * without them those tests say so and the program exits 77 (skipped) after
 * running the others. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vl/sift.h>

#include "algo/f16.h"
#include "features/family.h"
#include "features/rootsift.h"
#include "identify/identify.h"
#include "search/distance.h"
#include "testutil.h"

static const char *samples_dir(void)
{
    const char *s = getenv("PATINA_SAMPLES");
    return s && *s ? s : PATINA_SAMPLES_DIR;
}
static int samples_missing;

/* 1 in a CUDA build (the family then has its GPU path). */
static int cuda_build(void) { return strstr(patina_build_info(), "cuda=yes") != NULL; }

static patina_extractor_t *mkex(const char *spec)
{
    patina_extractor_t *ex = NULL;
    TU_OK(patina_extractor_new(&ex, spec));
    return ex;
}

/* params of an extractor: the parsed struct is the extractor's params. */
static void params_of(rootsift_params_t *p, const char *spec)
{
    patina_extractor_t *ex = mkex(spec);
    const patina_family_t *f = ex->family;
    assert_string_equal(f->name, "rootsift");
    memcpy(p, ex->params, sizeof *p);
    patina_extractor_free(ex);
}

static unsigned char *extract_one(const char *spec, const patina_image_t *img, size_t *bytes)
{
    patina_extractor_t *ex = mkex(spec);
    unsigned char *rec;
    *bytes = patina_extractor_bytes(ex);
    rec = malloc(*bytes);
    TU_OK(ex->family->cpu(ex->params, rec, img)); /* the C reference of one image */
    TU_OK(rs_record_check(rec, *bytes, "test"));
    patina_extractor_free(ex);
    return rec;
}

/* ------------------------------------------------------------ VLFeat list */

/* One feature of VLFeat's own output. */
typedef struct vfeat {
    float x, y, sigma, angle;
    float d[128];
    double peak; /* |interpolated DoG|, by Cramer's rule (independent of rs_peak) */
} vfeat_t;

/* The interpolated DoG value at a VLFeat keypoint: D + 0.5 g.b with
 * H b = -g solved by Cramer's rule (rootsift.c uses VLFeat's elimination;
 * the two agree to rounding). */
static double peak_cramer(const VlSiftFilt *f, const VlSiftKeypoint *k)
{
    const int w = f->octave_width, h = f->octave_height;
    const float *pt = f->dog + k->ix + (ptrdiff_t)k->iy * w + (ptrdiff_t)(k->is - f->s_min) * w * h;
#define A(dx, dy, ds) ((double)pt[(dx) + (ptrdiff_t)(dy) * w + (ptrdiff_t)(ds) * w * h])
    double g[3] = {0.5 * (A(1, 0, 0) - A(-1, 0, 0)), 0.5 * (A(0, 1, 0) - A(0, -1, 0)),
                   0.5 * (A(0, 0, 1) - A(0, 0, -1))};
    double H[3][3], det, b[3] = {0, 0, 0};
    H[0][0] = A(1, 0, 0) + A(-1, 0, 0) - 2 * A(0, 0, 0);
    H[1][1] = A(0, 1, 0) + A(0, -1, 0) - 2 * A(0, 0, 0);
    H[2][2] = A(0, 0, 1) + A(0, 0, -1) - 2 * A(0, 0, 0);
    H[0][1] = H[1][0] = 0.25 * (A(1, 1, 0) + A(-1, -1, 0) - A(-1, 1, 0) - A(1, -1, 0));
    H[0][2] = H[2][0] = 0.25 * (A(1, 0, 1) + A(-1, 0, -1) - A(-1, 0, 1) - A(1, 0, -1));
    H[1][2] = H[2][1] = 0.25 * (A(0, 1, 1) + A(0, -1, -1) - A(0, -1, 1) - A(0, 1, -1));
    det = H[0][0] * (H[1][1] * H[2][2] - H[1][2] * H[2][1]) - H[0][1] * (H[1][0] * H[2][2] - H[1][2] * H[2][0]) +
          H[0][2] * (H[1][0] * H[2][1] - H[1][1] * H[2][0]);
    if (fabs(det) > 1e-300) {
        for (int c = 0; c < 3; c++) {
            double M[3][3];
            memcpy(M, H, sizeof M);
            for (int r = 0; r < 3; r++) M[r][c] = -g[r];
            b[c] = (M[0][0] * (M[1][1] * M[2][2] - M[1][2] * M[2][1]) - M[0][1] * (M[1][0] * M[2][2] - M[1][2] * M[2][0]) +
                    M[0][2] * (M[1][0] * M[2][1] - M[1][1] * M[2][0])) /
                   det;
        }
    }
    (void)h;
    return fabs(A(0, 0, 0) + 0.5 * (g[0] * b[0] + g[1] * b[1] + g[2] * b[2]));
#undef A
}

/* VLFeat's pipeline, plainly: every octave, every keypoint, every
 * orientation, its descriptor. The image is the same 8-bit grey, as floats. */
static vfeat_t *vlfeat_all(size_t *n, const patina_image_t *img, double peak, double edge)
{
    const int w = img->width, h = img->height;
    uint8_t *g = malloc((size_t)w * h);
    float *im = malloc((size_t)w * h * sizeof *im);
    size_t cap = 1024;
    vfeat_t *out = malloc(cap * sizeof *out);
    VlSiftFilt *f;
    int err;
    TU_OK(patina_image_to_grey(g, img));
    for (size_t i = 0; i < (size_t)w * h; i++) im[i] = g[i];
    f = vl_sift_new(w, h, -1, 3, 0);
    vl_sift_set_peak_thresh(f, peak);
    vl_sift_set_edge_thresh(f, edge);
    *n = 0;
    for (err = vl_sift_process_first_octave(f, im); !err; err = vl_sift_process_next_octave(f)) {
        vl_sift_detect(f);
        const VlSiftKeypoint *k = vl_sift_get_keypoints(f);
        for (int i = 0; i < vl_sift_get_nkeypoints(f); i++) {
            double ang[4];
            int na = vl_sift_calc_keypoint_orientations(f, ang, &k[i]);
            for (int a = 0; a < na; a++) {
                if (*n == cap) out = realloc(out, (cap *= 2) * sizeof *out);
                vfeat_t *v = &out[(*n)++];
                v->x = k[i].x;
                v->y = k[i].y;
                v->sigma = k[i].sigma;
                v->angle = (float)ang[a];
                v->peak = peak_cramer(f, &k[i]);
                memset(v->d, 0, sizeof v->d); /* as the library: VLFeat may leave it unwritten */
                vl_sift_calc_keypoint_descriptor(f, v->d, &k[i], ang[a]);
            }
        }
    }
    vl_sift_delete(f);
    free(g);
    free(im);
    return out;
}

/* RootSIFT of a VLFeat descriptor, the documented formula. */
static void rootsift_u8(uint8_t q[128], const float d[128])
{
    double l1 = 0;
    for (int k = 0; k < 128; k++) l1 += d[k];
    for (int k = 0; k < 128; k++) {
        double r = l1 > 0 ? sqrt(d[k] / l1) : 0, v = floor(r * 512 + 0.5);
        q[k] = (uint8_t)(v > 255 ? 255 : v);
    }
}

static void rootsift_f16(uint16_t q[128], const float d[128])
{
    double l1 = 0;
    for (int k = 0; k < 128; k++) l1 += d[k];
    for (int k = 0; k < 128; k++) {
        float r = (float)(l1 > 0 ? sqrt(d[k] / l1) : 0);
#ifdef __FLT16_MAX__
        _Float16 hv = (_Float16)r; /* the compiler's conversion, independent of rs_f32_to_f16 */
        memcpy(&q[k], &hv, 2);
#else
        q[k] = rs_f32_to_f16(r);
#endif
    }
}

/* Our record against VLFeat's list: every kept feature is one of VLFeat's
 * (geometry bit-equal), its row equals the documented RootSIFT quantisation
 * of VLFeat's descriptor, rows are by decreasing peak, and nothing left out
 * has a larger peak (ties: equal up to the rounding of two ways of solving
 * the same 3x3 system, 1e-9 relative). */
static void check_parity(const unsigned char *rec, const vfeat_t *v, size_t nv, size_t m, int f16, const char *name)
{
    const size_t cnt = rs_count(rec);
    char *used = calloc(nv ? nv : 1, 1);
    double minkept = INFINITY, prev = INFINITY;
    size_t expect = nv < m ? nv : m;
    if (cnt != expect) fail_msg("%s: count %zu, VLFeat has %zu features, m = %zu", name, cnt, nv, m);
    for (size_t i = 0; i < cnt; i++) {
        float g[4];
        size_t j;
        rs_geom_get(rec, i, g);
        for (j = 0; j < nv; j++)
            if (!used[j] && v[j].x == g[0] && v[j].y == g[1] && v[j].sigma == g[2] && v[j].angle == g[3]) break;
        if (j == nv) fail_msg("%s: row %zu (%g, %g, %g, %g) is not one of VLFeat's features", name, i, g[0], g[1], g[2], g[3]);
        used[j] = 1;
        if (f16) {
            uint16_t q[128];
            rootsift_f16(q, v[j].d);
            assert_memory_equal(rs_row(rec, i), q, 256); /* little-endian host */
        } else {
            uint8_t q[128];
            rootsift_u8(q, v[j].d);
            if (memcmp(rs_row(rec, i), q, 128) != 0) {
                for (int k = 0; k < 128; k++)
                    if (rs_row(rec, i)[k] != q[k])
                        fail_msg("%s: row %zu component %d: %u, expected %u", name, i, k, rs_row(rec, i)[k], q[k]);
            }
        }
        if (v[j].peak > prev * (1 + 1e-9))
            fail_msg("%s: row %zu peak %.17g above the previous row's %.17g", name, i, v[j].peak, prev);
        prev = v[j].peak;
        if (v[j].peak < minkept) minkept = v[j].peak;
    }
    for (size_t j = 0; j < nv; j++)
        if (!used[j] && v[j].peak > minkept * (1 + 1e-9))
            fail_msg("%s: VLFeat feature %zu (peak %.17g) left out, weakest kept %.17g", name, j, v[j].peak, minkept);
    free(used);
}

static void test_parity_vlfeat(void **state)
{
    char **files;
    size_t nf = tu_list_files(samples_dir(), "jpg,png", &files), tested = 0;
    (void)state;
    if (nf == 0) {
        fprintf(stderr, "test_rootsift: no sample photographs under %s (scripts/fetch-samples.sh): "
                        "VLFeat parity not tested\n", samples_dir());
        samples_missing = 1;
        return;
    }
    for (size_t i = 0; i < nf && tested < 6; i += nf / 6 + 1) {
        patina_image_t img = {0};
        size_t nv, bytes;
        vfeat_t *v;
        if (patina_image_load(&img, files[i], NULL) != PATINA_OK) continue;
        if (img.width < 64 || img.height < 64 || (size_t)img.width * img.height > 1200000) {
            patina_image_release(&img);
            continue;
        }
        v = vlfeat_all(&nv, &img, 3.4, 10);
        {
            /* all kept (m large), the strongest 100, and fp16 */
            /* a peak threshold, so that VLFeat's list stays short (the default, 0, keeps every extremum) */
            unsigned char *a = extract_one("rootsift:maxside=0,m=4096,peak=3.4", &img, &bytes);
            unsigned char *b = extract_one("rootsift:maxside=0,m=100,peak=3.4", &img, &bytes);
            unsigned char *c = extract_one("rootsift:maxside=0,m=100,quant=f16,peak=3.4", &img, &bytes);
            print_message("%s: %dx%d, VLFeat %zu features\n", files[i], img.width, img.height, nv);
            check_parity(a, v, nv, 4096, 0, files[i]);
            check_parity(b, v, nv, 100, 0, files[i]);
            check_parity(c, v, nv, 100, 1, files[i]);
            /* VLFeat kept only features whose |peak| exceeds the threshold */
            for (size_t j = 0; j < nv; j++) assert_true(v[j].peak > 3.4 * (1 - 1e-9));
            free(a);
            free(b);
            free(c);
        }
        free(v);
        patina_image_release(&img);
        tested++;
    }
    assert_true(tested > 0);
    tu_free_list(files, nf);
}

/* A texture of nb random Gaussian blobs (light and dark, sigma 2..14 px):
 * distinct keypoints with distinct descriptors. */
static void blob_texture(patina_image_t *img, int w, int h, int nb, uint64_t seed)
{
    tu_rng_t r;
    double *v = calloc((size_t)w * h, sizeof *v);
    tu_rng_seed(&r, seed);
    for (int b = 0; b < nb; b++) {
        double cx = tu_rng_below(&r, (uint32_t)w), cy = tu_rng_below(&r, (uint32_t)h);
        double s = 2 + tu_rng_below(&r, 1300) / 100.0, amp = (double)tu_rng_below(&r, 160) - 80;
        int x0 = (int)(cx - 3 * s), x1 = (int)(cx + 3 * s), y0 = (int)(cy - 3 * s), y1 = (int)(cy + 3 * s);
        for (int y = y0 < 0 ? 0 : y0; y <= y1 && y < h; y++)
            for (int x = x0 < 0 ? 0 : x0; x <= x1 && x < w; x++)
                v[(size_t)y * w + x] += amp * exp(-((x - cx) * (x - cx) + (y - cy) * (y - cy)) / (2 * s * s));
    }
    TU_OK(patina_image_init(img, w, h));
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double t = 128 + v[(size_t)y * w + x];
            uint8_t *p = img->data + (size_t)y * img->stride + 3 * (size_t)x;
            p[0] = p[1] = p[2] = (uint8_t)(t < 0 ? 0 : t > 255 ? 255 : lround(t));
        }
    free(v);
}

/* ---------------------------------------------------------- RootSIFT rows */

/* Rows dequantise to L2-unit vectors: u8 within 128 * (0.5/512)^2 + the
 * cross term, |norm - 1| <= 0.02 (clipped components aside, which the test
 * counts); f16 within 2e-3 (11 significant bits per component). */
static void test_unit_rows(void **state)
{
    patina_image_t img;
    tu_rng_t r;
    size_t bytes;
    (void)state;
    (void)r;
    blob_texture(&img, 400, 300, 150, 5);
    for (int f16 = 0; f16 < 2; f16++) {
        unsigned char *rec = extract_one(f16 ? "rootsift:quant=f16" : "rootsift", &img, &bytes);
        assert_true(rs_count(rec) > 10);
        for (size_t i = 0; i < rs_count(rec); i++) {
            float v[128];
            double n2 = 0;
            rs_row_get(rec, i, v);
            for (int k = 0; k < 128; k++) n2 += (double)v[k] * v[k];
            if (fabs(sqrt(n2) - 1) > (f16 ? 2e-3 : 0.02))
                fail_msg("row %zu (%s): norm %.9g", i, f16 ? "f16" : "u8", sqrt(n2));
        }
        for (size_t i = rs_count(rec); i < rs_m(rec); i++) { /* padding rows are zero */
            float g[4];
            for (size_t k = 0; k < 128 * rs_elem_bytes(rs_quant(rec)); k++) assert_int_equal(rs_row(rec, i)[k], 0);
            rs_geom_get(rec, i, g);
            assert_true(g[0] == 0 && g[1] == 0 && g[2] == 0 && g[3] == 0);
        }
        free(rec);
    }
    patina_image_release(&img);
}

/* ---------------------------------------------------------- layout, header */

static void test_layout(void **state)
{
    patina_extractor_t *ex;
    patina_image_t img;
    tu_rng_t r;
    size_t bytes;
    unsigned char *rec;
    patina_rootsift_info_t info;
    (void)state;
    ex = mkex("rootsift");
    assert_string_equal(patina_extractor_spec(ex),
                        "rootsift:m=384,n=768,peak=0,edge=1e+01,maxside=1024,first_octave=0,octaves=-1,"
                        "levels=3,quant=u8");
    assert_int_equal(patina_extractor_bytes(ex), 64 + 384 * (128 + 16));
    assert_int_equal(patina_extractor_elem(ex), PATINA_ELEM_U8);
    assert_string_equal(patina_extractor_distance_name(ex), "rootsift_ratio");
    /* the GPU path exists in CUDA builds (tests/gpu/test_rootsift_gpu.c) */
    assert_int_equal(patina_extractor_has_device(ex, PATINA_DEVICE_GPU), cuda_build());
    assert_false(patina_extractor_has_device(ex, PATINA_DEVICE_HYBRID));
    patina_extractor_free(ex);
    ex = mkex("rootsift:m=10,quant=f16");
    assert_int_equal(patina_extractor_bytes(ex), 64 + 10 * (256 + 16));
    patina_extractor_free(ex);

    tu_rng_seed(&r, 9);
    tu_random_image(&img, 300, 200, 2, &r);
    rec = extract_one("rootsift:m=50", &img, &bytes);
    /* the header, byte by byte (little-endian) */
    assert_int_equal(rec[4], 1);
    assert_int_equal(rec[8], 50);
    assert_int_equal(rec[12], 0);
    assert_int_equal(rs_qscale(rec), 512.0f);
    assert_true(rs_downscale(rec) == 1.0f);
    assert_int_equal(rs_size(rec, 0), 300);
    assert_int_equal(rs_size(rec, 1), 200);
    assert_int_equal(rs_size(rec, 2), 300);
    assert_int_equal(rs_size(rec, 3), 200);
    for (int k = 40; k < 64; k++) assert_int_equal(rec[k], 0);
    TU_OK(patina_rootsift_info(&info, rec, bytes));
    assert_int_equal(info.count, rs_count(rec));
    assert_int_equal(info.m, 50);
    assert_int_equal(info.f16, 0);
    {
        float g[4], v[128];
        TU_OK(patina_rootsift_feature(g, v, rec, bytes, 0));
        assert_true(g[2] > 0);
        assert_int_equal(patina_rootsift_feature(g, v, rec, bytes, info.count), PATINA_E_INVALID);
    }
    /* corrupt records: clear errors */
    assert_int_equal(patina_rootsift_info(&info, rec, bytes - 1), PATINA_E_CORRUPT);
    rec[0] = 51; /* count > m */
    assert_int_equal(patina_rootsift_info(&info, rec, bytes), PATINA_E_CORRUPT);
    assert_non_null(strstr(patina_last_error(), "count"));
    rec[0] = 0;
    rec[4] = 9;
    assert_int_equal(patina_rootsift_info(&info, rec, bytes), PATINA_E_CORRUPT);
    assert_non_null(strstr(patina_last_error(), "version"));
    free(rec);
    patina_image_release(&img);
}

/* ------------------------------------------------------------ determinism */

static void test_determinism(void **state)
{
    enum { N = 6 };
    patina_image_t imgs[N];
    patina_extractor_t *ex = mkex("rootsift:m=200");
    size_t bytes = patina_extractor_bytes(ex);
    unsigned char *out[3];
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 21);
    for (int i = 0; i < N; i++) tu_random_image(&imgs[i], 200 + 37 * i, 180 + 11 * i, i % 3, &r);
    for (int run = 0; run < 3; run++) {
        patina_context_opts_t o;
        patina_context_t *ctx;
        patina_status st[N];
        patina_context_opts_init(&o);
        o.threads = run == 0 ? 1 : 4;
        TU_OK(patina_context_new(&ctx, &o));
        out[run] = malloc(N * bytes);
        TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, out[run], imgs, N, st));
        for (int i = 0; i < N; i++) TU_OK(st[i]);
        patina_context_free(ctx);
    }
    assert_memory_equal(out[0], out[1], N * bytes); /* 1 thread = 4 threads */
    assert_memory_equal(out[1], out[2], N * bytes); /* two runs */
    /* without CUDA, AUTO runs on the CPU and GPU is refused clearly */
    if (!cuda_build()) {
        patina_context_t *ctx;
        patina_device got;
        TU_OK(patina_context_new(&ctx, NULL));
        TU_OK(patina_context_resolve(ctx, ex, PATINA_DEVICE_AUTO, &got));
        assert_int_equal(got, PATINA_DEVICE_CPU);
        assert_int_equal(patina_context_resolve(ctx, ex, PATINA_DEVICE_GPU, &got), PATINA_E_UNAVAILABLE);
        assert_non_null(strstr(patina_last_error(), "rootsift: no gpu implementation"));
        patina_context_free(ctx);
    }
    for (int i = 0; i < 3; i++) free(out[i]);
    for (int i = 0; i < N; i++) patina_image_release(&imgs[i]);
    patina_extractor_free(ex);
}

/* --------------------------------------------------------------- maxside */

/* A grey image with dark Gaussian blobs (centre, sigma) on a light ground. */
static void blob_image(patina_image_t *img, int w, int h, const double (*blobs)[3], int nb)
{
    TU_OK(patina_image_init(img, w, h));
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double v = 200;
            for (int b = 0; b < nb; b++) {
                double dx = x - blobs[b][0], dy = y - blobs[b][1], s = blobs[b][2];
                v -= 150 * exp(-(dx * dx + dy * dy) / (2 * s * s));
            }
            uint8_t *p = img->data + (size_t)y * img->stride + 3 * (size_t)x;
            p[0] = p[1] = p[2] = (uint8_t)lround(v);
        }
}

static void test_maxside(void **state)
{
    static const double blobs[2][3] = {{2500.5, 1200.25, 60}, {700, 2300, 90}};
    patina_image_t img;
    size_t bytes;
    unsigned char *rec;
    (void)state;
    blob_image(&img, 4000, 3000, blobs, 2);
    rec = extract_one("rootsift:maxside=1024,m=20", &img, &bytes);
    assert_int_equal(rs_size(rec, 0), 1024);
    assert_int_equal(rs_size(rec, 1), 768);
    assert_int_equal(rs_size(rec, 2), 4000);
    assert_int_equal(rs_size(rec, 3), 3000);
    assert_true(fabsf(rs_downscale(rec) - 4000.0f / 1024.0f) < 1e-6f);
    assert_true(rs_count(rec) >= 2);
    /* each blob has a keypoint within 2 original pixels (half a detected
     * pixel) of its centre, at a scale of the blob's size */
    for (int b = 0; b < 2; b++) {
        double best = INFINITY, sc = 0;
        for (size_t i = 0; i < rs_count(rec); i++) {
            float g[4];
            rs_geom_get(rec, i, g);
            double d = hypot(g[0] - blobs[b][0], g[1] - blobs[b][1]);
            if (d < best) {
                best = d;
                sc = g[2];
            }
        }
        print_message("blob %d: nearest keypoint %.3f px away, scale %.1f (blob sigma %.0f)\n", b, best, sc,
                      blobs[b][2]);
        assert_true(best < 2.0);
        assert_true(sc > blobs[b][2] / 2 && sc < blobs[b][2] * 2);
    }
    free(rec);
    patina_image_release(&img);
}

/* The area average keeps the mean: a half-black, half-white image
 * downscaled by 3 has a grey column at the edge (checked through the
 * detected size only; the average itself is exercised by test_maxside). */
static void test_maxside_off(void **state)
{
    static const double blob[1][3] = {{300, 200, 12}};
    patina_image_t img;
    size_t bytes;
    unsigned char *rec;
    (void)state;
    blob_image(&img, 1500, 400, blob, 1);
    rec = extract_one("rootsift:maxside=0", &img, &bytes);
    assert_int_equal(rs_size(rec, 0), 1500);
    assert_true(rs_downscale(rec) == 1.0f);
    free(rec);
    rec = extract_one("rootsift:maxside=1500", &img, &bytes); /* not above: untouched */
    assert_int_equal(rs_size(rec, 0), 1500);
    free(rec);
    rec = extract_one("rootsift:maxside=500", &img, &bytes);
    assert_int_equal(rs_size(rec, 0), 500);
    assert_int_equal(rs_size(rec, 1), 133); /* round(400 / 3) */
    free(rec);
    patina_image_release(&img);
}

/* ------------------------------------------------------------ degenerate */

static void test_degenerate(void **state)
{
    static const int sizes[][2] = {{1, 1}, {2, 3}, {3, 3}, {8, 8}, {1, 500}, {17, 9}, {64, 64}};
    size_t bytes;
    (void)state;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        patina_image_t img;
        unsigned char *rec;
        tu_rng_t r;
        /* flat: no extremum anywhere */
        TU_OK(patina_image_init(&img, sizes[s][0], sizes[s][1]));
        memset(img.data, 128, img.stride * (size_t)img.height);
        for (int fo = -1; fo <= 1; fo++) {
            char spec[64];
            snprintf(spec, sizeof spec, "rootsift:m=16,first_octave=%d", fo);
            rec = extract_one(spec, &img, &bytes);
            assert_int_equal(rs_count(rec), 0);
            assert_int_equal(rs_m(rec), 16);
            free(rec);
        }
        patina_image_release(&img);
        /* noise of the same size: any count, a valid record */
        tu_rng_seed(&r, 3 + s);
        tu_random_image(&img, sizes[s][0], sizes[s][1], 0, &r);
        for (int fo = -1; fo <= 1; fo++) {
            char spec[64];
            snprintf(spec, sizeof spec, "rootsift:m=16,peak=0,first_octave=%d", fo);
            rec = extract_one(spec, &img, &bytes);
            assert_true(rs_count(rec) <= 16);
            free(rec);
        }
        patina_image_release(&img);
    }
    {
        patina_image_t img;
        TU_OK(patina_image_init(&img, 1000, 800));
        memset(img.data, 77, img.stride * (size_t)img.height);
        unsigned char *rec = extract_one("rootsift", &img, &bytes);
        assert_int_equal(rs_count(rec), 0);
        free(rec);
        patina_image_release(&img);
    }
}

/* ---------------------------------------------------------------- options */

static void test_options(void **state)
{
    static const char *bad[] = {"rootsift:m=0",       "rootsift:m=4097",     "rootsift:n=0",
                                "rootsift:quant=u4",  "rootsift:peak=-1",    "rootsift:edge=0.5",
                                "rootsift:levels=0",  "rootsift:maxside=-1", "rootsift:first_octave=-2",
                                "rootsift:octaves=-2", "rootsift:sigma=2"};
    rootsift_params_t p;
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        patina_extractor_t *ex = NULL;
        const char *opt = strchr(bad[i], ':') + 1;
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)(strchr(opt, '=') - opt), opt);
        assert_int_equal(patina_extractor_new(&ex, bad[i]), PATINA_E_INVALID);
        assert_null(ex);
        if (!strstr(patina_last_error(), name)) fail_msg("'%s': message '%s' does not name the option", bad[i], patina_last_error());
    }
    params_of(&p, "rootsift:m=4096,n=16384,quant=f16,peak=0,maxside=0,octaves=2,first_octave=-1");
    assert_int_equal(p.m, 4096);
    assert_int_equal(p.n, 16384);
    assert_int_equal(p.quant, RS_QUANT_F16);
    assert_int_equal(p.octaves, 2);
}

/* --------------------------------------------------------------- binary16 */

static void test_f16(void **state)
{
    tu_rng_t r;
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) { /* every binary16 round-trips */
        float f = rs_f16_to_f32((uint16_t)h);
        if (isnan(f)) continue;
        assert_int_equal(rs_f32_to_f16(f), h);
    }
#ifdef __FLT16_MAX__
    tu_rng_seed(&r, 1);
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = (uint32_t)tu_rng_next(&r);
        float f;
        _Float16 hv;
        uint16_t want;
        if (i < 1000000) u = (u & 0x807fffffu) | ((uint32_t)(96 + tu_rng_below(&r, 50)) << 23); /* near the range */
        memcpy(&f, &u, 4);
        if (isnan(f)) continue;
        hv = (_Float16)f;
        memcpy(&want, &hv, 2);
        if (rs_f32_to_f16(f) != want) fail_msg("%.9g (0x%08x): 0x%04x, _Float16 0x%04x", f, u, rs_f32_to_f16(f), want);
        assert_true(rs_f16_to_f32(want) == (float)hv);
    }
#else
    (void)r;
    print_message("no _Float16 in this compiler: conversion checked by round trips only\n");
#endif
}

/* algo/f16.h's conversion, the one the CPU records and the GPU kernel
 * (gpu/rootsift.cu) both use: every float of [2^-26, 2) -- all RootSIFT
 * components and the f16 subnormals below them -- at a stride of 3 bit
 * patterns, against the compiler's _Float16 and rs_f32_to_f16. */
static void test_f16_shared(void **state)
{
    size_t n = 0;
    (void)state;
    for (uint32_t u = (uint32_t)(127 - 26) << 23; u < (uint32_t)128 << 23; u += 3, n++) {
        float f;
        uint16_t got;
        memcpy(&f, &u, 4);
        got = f16_from_f32(f);
        if (got != f16_from_f32_bits(u) || got != rs_f32_to_f16(f)) fail_msg("0x%08x: helpers disagree", u);
#ifdef __FLT16_MAX__
        {
            _Float16 hv = (_Float16)f;
            uint16_t want;
            memcpy(&want, &hv, 2);
            if (got != want) fail_msg("%.9g (0x%08x): 0x%04x, _Float16 0x%04x", (double)f, u, got, want);
        }
#endif
    }
    assert_true(n > 70000000);
    assert_int_equal(f16_from_f32(0.0f), 0);
    assert_int_equal(f16_from_f32(-0.0f), 0x8000);
    assert_int_equal(f16_from_f32(65520.0f), 0x7c00); /* rounds up to inf */
    assert_int_equal(f16_from_f32(65519.0f), 0x7bff);
}

/* ---------------------------------------------------------------- distance */

static void test_ratio_distance(void **state)
{
    patina_extractor_t *ex = mkex("rootsift:m=150");
    patina_image_t a, b, flat;
    tu_rng_t r;
    size_t bytes = patina_extractor_bytes(ex);
    unsigned char *ra = malloc(bytes), *rb = malloc(bytes), *rf = malloc(bytes);
    double self, other;
    (void)state;
    (void)r;
    blob_texture(&a, 320, 240, 120, 1);
    blob_texture(&b, 320, 240, 120, 2);
    TU_OK(patina_image_init(&flat, 100, 100));
    memset(flat.data, 9, flat.stride * 100);
    TU_OK(ex->family->cpu(ex->params, ra, &a));
    TU_OK(ex->family->cpu(ex->params, rb, &b));
    TU_OK(ex->family->cpu(ex->params, rf, &flat));
    self = patina_extractor_distance(ex, ra, ra);
    other = patina_extractor_distance(ex, ra, rb);
    print_message("self %.6f (count %u), other %.6f\n", self, rs_count(ra), other);
    /* against itself every feature's nearest is itself (d1 = 0 < 0.8 d2)
     * unless two rows are equal */
    assert_true(idf_ratio_count(ra, bytes, ra, bytes, 0.8, PATINA_SCORE_ONE2ONE) >= (long)rs_count(ra) * 9 / 10);
    assert_true(self < other);
    assert_true(patina_extractor_distance(ex, rf, ra) == 1.0); /* nothing to match */
    assert_true(patina_extractor_distance(ex, ra, rf) == 1.0);
    ra[8] = 7; /* m no longer matches the size: malformed */
    assert_true(isnan(patina_extractor_distance(ex, ra, rb)));
    free(ra);
    free(rb);
    free(rf);
    patina_image_release(&a);
    patina_image_release(&b);
    patina_image_release(&flat);
    patina_extractor_free(ex);
}

/* ------------------------------------------------------------------- CLI */

static size_t count_char(const char *s, char c)
{
    size_t n = 0;
    for (; *s; s++) n += *s == c;
    return n;
}

static void test_cli(void **state)
{
    char *dir = tu_tempdir("rootsift"), *cdir = tu_tempdir("rootsift-coll"), *out = NULL, *err = NULL;
    const char *img = tu_path(dir, "a.jpg"), *flat = tu_path(dir, "flat.pgm"), *coll = tu_path(cdir, "coll");
    static const char flatpgm[] = "P5 16 16 255\n";
    unsigned char buf[sizeof flatpgm - 1 + 256];
    (void)state;
    tu_write_jpeg(img, 320, 240, 2, 90, 4);
    memcpy(buf, flatpgm, sizeof flatpgm - 1);
    memset(buf + sizeof flatpgm - 1, 100, 256);
    assert_int_equal(tu_write_file(flat, buf, sizeof buf), 0);
    {
        const char *argv[] = {PATINA_CLI, "extract", "-f", "rootsift:m=40", img, flat, NULL};
        assert_int_equal(tu_exec(&out, &err, 0, 120, argv), 0);
        /* CSV: PATH,COUNT,I,X,Y,SCALE,ANGLE,D0..D127 per keypoint; flat: PATH,0 */
        size_t lines = count_char(out, '\n');
        char *line = out, *nl;
        size_t count = (size_t)atoi(strchr(out, ',') + 1), i = 0;
        assert_true(count > 0 && count <= 40);
        assert_int_equal(lines, count + 1);
        for (; (nl = strchr(line, '\n')); line = nl + 1, i++) {
            *nl = 0;
            if (i < count) {
                assert_int_equal(count_char(line, ','), 6 + 128);
                assert_int_equal(strncmp(line, img, strlen(img)), 0);
            } else {
                char want[4200];
                snprintf(want, sizeof want, "%s,0", flat);
                assert_string_equal(line, want);
            }
        }
        free(out);
        free(err);
    }
    {
        const char *argv[] = {PATINA_CLI, "extract", "-f", "rootsift:m=40", "--format", "json", img, NULL};
        assert_int_equal(tu_exec(&out, &err, 0, 120, argv), 0);
        assert_non_null(strstr(out, "\"count\":"));
        assert_non_null(strstr(out, "\"keypoints\":[{\"x\":"));
        assert_non_null(strstr(out, "\"scale\":"));
        assert_non_null(strstr(out, "\"angle\":"));
        assert_non_null(strstr(out, "\"descriptor\":["));
        assert_non_null(strstr(out, "\"qscale\":512"));
        assert_int_equal(count_char(out, '\n'), 1);
        free(out);
        free(err);
    }
    { /* bin: the header, then per image its path and the record the library extracts */
        const char *argv[] = {PATINA_CLI, "extract", "-f", "rootsift:m=40", "--format", "bin", img, flat, NULL};
        patina_extractor_t *ex = NULL;
        patina_image_t im;
        size_t len = 0, bytes, at, k;
        unsigned char *want;
        const char *spec;
        assert_int_equal(tu_exec_len(&out, &len, &err, 0, 120, argv), 0);
        TU_OK(patina_extractor_new(&ex, "rootsift:m=40"));
        spec = patina_extractor_spec(ex);
        bytes = patina_extractor_bytes(ex);
        want = malloc(bytes);
        assert_true(len > 20 && !memcmp(out, "PATINADS", 8));
        assert_int_equal(rs_get_u32((unsigned char *)out + 8), 1);
        assert_int_equal(rs_get_u32((unsigned char *)out + 12), strlen(spec));
        assert_memory_equal(out + 16, spec, strlen(spec));
        at = 16 + strlen(spec);
        assert_int_equal(rs_get_u32((unsigned char *)out + at), bytes);
        at += 4;
        for (k = 0; k < 2; k++) {
            const char *path = k ? flat : img;
            assert_true(at + 4 <= len);
            assert_int_equal(rs_get_u32((unsigned char *)out + at), strlen(path));
            assert_memory_equal(out + at + 4, path, strlen(path));
            at += 4 + strlen(path);
            assert_true(at + bytes <= len);
            TU_OK(patina_image_load(&im, path, NULL));
            TU_OK(ex->family->cpu(ex->params, want, &im));
            patina_image_release(&im);
            assert_memory_equal(out + at, want, bytes);
            at += bytes;
        }
        assert_int_equal(at, len);
        free(want);
        patina_extractor_free(ex);
        free(out);
        free(err);
    }
    if (!cuda_build()) {
        const char *argv[] = {PATINA_CLI, "extract", "-f", "rootsift", "--device", "gpu", img, NULL};
        assert_int_not_equal(tu_exec(&out, &err, 0, 120, argv), 0);
        assert_non_null(strstr(err, "rootsift: no gpu implementation"));
        free(out);
        free(err);
    }
    {
        const char *argv[] = {PATINA_CLI, "extract", "-f", "rootsift:m=0", img, NULL};
        assert_int_equal(tu_exec(&out, &err, 0, 120, argv), 2);
        assert_non_null(strstr(err, "'m'"));
        free(out);
        free(err);
    }
    { /* index: one record per image; search ranks the image itself first */
        const char *argv[] = {PATINA_CLI, "index", coll, dir, "-f", "rootsift:m=60", NULL};
        const char *sargv[] = {PATINA_CLI, "search", coll, img, "-f", "rootsift:m=60", "-k", "2", NULL};
        int rc = tu_exec(&out, &err, 0, 120, argv);
        if (rc != 0) fail_msg("index: %d: %s", rc, err);
        free(out);
        free(err);
        rc = tu_exec(&out, &err, 0, 120, sargv);
        if (rc != 0) fail_msg("search: %d: %s", rc, err);
        print_message("search: %s", out);
        assert_non_null(strstr(out, "a.jpg"));
        free(out);
        free(err);
    }
    tu_remove_tree(dir);
    tu_remove_tree(cdir);
    free(dir);
    free(cdir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_options),    cmocka_unit_test(test_f16),         cmocka_unit_test(test_f16_shared),         cmocka_unit_test(test_layout),
        cmocka_unit_test(test_unit_rows),  cmocka_unit_test(test_degenerate),  cmocka_unit_test(test_maxside_off),
        cmocka_unit_test(test_maxside),    cmocka_unit_test(test_determinism), cmocka_unit_test(test_ratio_distance),
        cmocka_unit_test(test_cli),        cmocka_unit_test(test_parity_vlfeat),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (rc == 0 && samples_missing) {
        fprintf(stderr, "test_rootsift: skipped (no sample photographs for the VLFeat parity test)\n");
        return 77;
    }
    return rc;
}
