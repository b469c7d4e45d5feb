/* nvJPEG decoding (src/gpu/nvjpeg.c) against libjpeg-turbo, the reference
 * decoder, and the indexing pipeline with --decoder nvjpeg.
 *
 * nvJPEG's pixels are not the reference's: the reference upsamples chroma
 * with libjpeg's triangle ("fancy") filter, as Java ImageIO does, and the
 * JPEG engines replicate it. What this test holds the GPU decoder to:
 *   - with the hardware backend, its RGB equals libjpeg-turbo's with fast
 *     upsampling (TJFLAG_FASTUPSAMPLE) in at least 99.99% of the samples
 *     (measured on the H100: all of them), on synthetic images of awkward
 *     sizes and every subsampling and on the real photographs;
 *   - against the reference pixels, a gross-error bound on the mean
 *     |difference| (4 levels for photographs, measured worst 2.27; 12 for
 *     the synthetic images, whose hard 8-pixel chroma edges are the worst
 *     case for the upsampling difference) -- a swapped or shifted plane or a
 *     wrong colour matrix gives tens of levels;
 *   - CEDD of nvJPEG pixels (computed on the GPU from the device images in
 *     place) stays a near-duplicate of the reference's: Tanimoto distance
 *     <= 5 on LIRE's 0..100 scale for every photograph (measured <= 2.72),
 *     its own reference descriptor is the nearest for >= 95% of them
 *     (measured 100%) and never worse than third;
 *   - what nvJPEG cannot or must not decode (progressive, truncated, not a
 *     JPEG, empty) comes back to the CPU, and the pipeline then indexes the
 *     good files and names the bad ones; nvJPEG with the CPU device is
 *     refused.
 * Skipped (77) without a GPU or without libnvjpeg at run time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "core/internal.h"
#include "gpu/gpu.h"
#include "testutil.h"

/* Gross-error bounds on the mean |difference| to the reference pixels
 * (a swapped or shifted plane, a wrong colour matrix give tens of levels).
 * The synthetic images have hard 8-pixel chroma edges everywhere, the worst
 * case for the upsampling difference. */
#define SYNTH_MEAN 12.0
#define PHOTO_MEAN 4.0

static patina_gpu_t *G;
static patina_jpeg_gpu_t *D;
static int HW;     /* the hardware backend: pixels equal libjpeg-turbo's with fast upsampling */

typedef struct diffstat {
    double mean;       /* mean |a - b| over all samples */
    double within2;    /* fraction of samples with |a - b| <= 2 */
    int max;
} diffstat_t;

/* Copies a device image to a host image (same geometry, tight stride). */
static void download(patina_image_t *host, const patina_image_t *dev)
{
    size_t row = 3 * (size_t)dev->width, y;
    uint8_t *tmp = malloc(dev->stride * (size_t)dev->height);
    assert_non_null(tmp);
    TU_OK(patina_gpu__upload(G, tmp, dev->data, dev->stride * (size_t)dev->height)); /* either way */
    host->width = dev->width;
    host->height = dev->height;
    host->stride = row;
    host->data = malloc(row * (size_t)dev->height);
    host->owned = 1;
    assert_non_null(host->data);
    for (y = 0; y < (size_t)dev->height; y++) memcpy(host->data + y * row, tmp + y * dev->stride, row);
    free(tmp);
}

static diffstat_t compare(const patina_image_t *a, const patina_image_t *b)
{
    diffstat_t d = {0, 0, 0};
    uint64_t sum = 0, near = 0, n = 0;
    int x, y;
    assert_int_equal(a->width, b->width);
    assert_int_equal(a->height, b->height);
    for (y = 0; y < a->height; y++)
        for (x = 0; x < 3 * a->width; x++) {
            int v = abs((int)a->data[(size_t)y * a->stride + (size_t)x] -
                        (int)b->data[(size_t)y * b->stride + (size_t)x]);
            sum += (uint64_t)v;
            near += v <= 2;
            if (v > d.max) d.max = v;
            n++;
        }
    d.mean = n ? (double)sum / (double)n : 0;
    d.within2 = n ? (double)near / (double)n : 1;
    return d;
}

/* libjpeg-turbo with fast (replicating) chroma upsampling: what the
 * hardware decoder is expected to resemble more closely than the reference,
 * which uses the triangle ("fancy") filter like Java ImageIO. */
static void decode_fast(patina_image_t *img, const unsigned char *jpeg, size_t len)
{
    tjhandle tj = tjInitDecompress();
    int w, h, sub, cs;
    assert_non_null(tj);
    assert_int_equal(tjDecompressHeader3(tj, jpeg, (unsigned long)len, &w, &h, &sub, &cs), 0);
    img->width = w;
    img->height = h;
    img->stride = 3 * (size_t)w;
    img->data = malloc(img->stride * (size_t)h);
    img->owned = 1;
    assert_non_null(img->data);
    assert_int_equal(tjDecompress2(tj, jpeg, (unsigned long)len, img->data, w, (int)img->stride, h,
                                   TJPF_RGB, TJFLAG_FASTUPSAMPLE), 0);
    tjDestroy(tj);
}

/* A smooth colour image with some texture: what a camera gives, not noise
 * (JPEG at q90 on noise makes differences that tell nothing). */
static void synth(patina_image_t *img, int w, int h, unsigned seed)
{
    int x, y;
    img->width = w;
    img->height = h;
    img->stride = 3 * (size_t)w;
    img->data = malloc(img->stride * (size_t)h + 1);
    img->owned = 1;
    assert_non_null(img->data);
    for (y = 0; y < h; y++)
        for (x = 0; x < w; x++) {
            uint8_t *p = img->data + (size_t)y * img->stride + 3 * (size_t)x;
            double fx = (double)x / (w > 1 ? w - 1 : 1), fy = (double)y / (h > 1 ? h - 1 : 1);
            p[0] = (uint8_t)(128 + 100 * sin(6.0 * fx + seed) * cos(4.0 * fy));
            p[1] = (uint8_t)(40 + 170 * fx * fy);
            p[2] = (uint8_t)(((x / 8 + y / 8 + (int)seed) & 1) ? 200 : 60);
        }
}

static unsigned char *encode(const patina_image_t *img, int subsamp, int flags, unsigned long *size)
{
    tjhandle tj = tjInitCompress();
    unsigned char *jpeg = NULL;
    assert_non_null(tj);
    *size = 0;
    if (subsamp == TJSAMP_GRAY) {
        /* grey source: the G channel */
        size_t n = (size_t)img->width * (size_t)img->height, i;
        uint8_t *g = malloc(n);
        for (i = 0; i < n; i++) g[i] = img->data[(i / (size_t)img->width) * img->stride + 3 * (i % (size_t)img->width) + 1];
        assert_int_equal(tjCompress2(tj, g, img->width, img->width, img->height, TJPF_GRAY, &jpeg,
                                     size, TJSAMP_GRAY, 90, flags), 0);
        free(g);
    } else {
        assert_int_equal(tjCompress2(tj, img->data, img->width, (int)img->stride, img->height, TJPF_RGB,
                                     &jpeg, size, subsamp, 90, flags), 0);
    }
    tjDestroy(tj);
    return jpeg;
}

/* Synthetic JPEGs: sizes (odd, tiny, not multiples of the MCU), the usual
 * subsamplings, grey; one batch, each compared with libjpeg-turbo. */
static void test_synthetic(void **state)
{
    static const int sizes[][2] = {{1, 1}, {7, 5}, {17, 33}, {640, 480}, {641, 479}, {1000, 3}, {3, 1000}, {1920, 1080}};
    static const int subs[] = {TJSAMP_444, TJSAMP_422, TJSAMP_420, TJSAMP_GRAY};
    enum { NS = sizeof sizes / sizeof sizes[0], NB = sizeof subs / sizeof subs[0], N = NS * NB };
    unsigned char *jpeg[N];
    unsigned long len[N];
    const void *data[N];
    size_t size[N];
    patina_image_t src[NS], gpu[N];
    patina_status st[N];
    size_t i, ok = 0;
    (void)state;
    for (i = 0; i < NS; i++) synth(&src[i], sizes[i][0], sizes[i][1], (unsigned)i);
    for (i = 0; i < N; i++) {
        jpeg[i] = encode(&src[i / NB], subs[i % NB], 0, &len[i]);
        data[i] = jpeg[i];
        size[i] = len[i];
    }
    TU_OK(patina_gpu_jpeg_decode(D, gpu, data, size, N, st));
    for (i = 0; i < N; i++) {
        patina_image_t cpu, got, fast;
        diffstat_t d, f;
        if (st[i] != PATINA_OK) {
            printf("  %dx%d sub %d: left to the CPU (%s)\n", sizes[i / NB][0], sizes[i / NB][1],
                   subs[i % NB], patina_status_str(st[i]));
            continue;
        }
        ok++;
        TU_OK(patina_image_decode(&cpu, jpeg[i], len[i], NULL, "synthetic"));
        decode_fast(&fast, jpeg[i], len[i]);
        download(&got, &gpu[i]);
        d = compare(&cpu, &got);
        f = compare(&fast, &got);
        printf("  %4dx%-4d sub %d: vs reference mean |d| %.3f within 2 %.4f max %3d | "
               "vs fast upsampling mean %.3f within 2 %.4f max %3d\n", sizes[i / NB][0],
               sizes[i / NB][1], subs[i % NB], d.mean, d.within2, d.max, f.mean, f.within2, f.max);
        if (HW) assert_true(f.within2 >= 0.9999);
        else assert_true(d.mean <= SYNTH_MEAN);
        patina_image_release(&cpu);
        patina_image_release(&fast);
        patina_image_release(&got);
    }
    printf("  synthetic: %zu of %d decoded by nvJPEG (%s backend)\n", ok, N, patina_gpu_jpeg_backend(D));
    /* Baseline 4:2:0 VGA is the case the pipeline is built for. */
    assert_int_equal(st[3 * NB + 2], PATINA_OK);
    assert_true(ok >= N / 2);
    for (i = 0; i < N; i++) tjFree(jpeg[i]);
    for (i = 0; i < NS; i++) patina_image_release(&src[i]);
}

/* What must come back to the CPU: truncated, not a JPEG, empty; a
 * progressive JPEG either decodes closely or comes back. The good image in
 * the same call still decodes. */
static void test_refused(void **state)
{
    patina_image_t src, gpu[5];
    unsigned long l0, l1;
    unsigned char *good, *prog;
    static const unsigned char png[8] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
    const void *data[5];
    size_t size[5];
    patina_status st[5];
    (void)state;
    synth(&src, 320, 240, 3);
    good = encode(&src, TJSAMP_420, 0, &l0);
    prog = encode(&src, TJSAMP_420, TJFLAG_PROGRESSIVE, &l1);
    data[0] = good, size[0] = l0;
    data[1] = good, size[1] = l0 / 2;         /* truncated */
    data[2] = png, size[2] = sizeof png;      /* not a JPEG */
    data[3] = good, size[3] = 0;              /* empty */
    data[4] = prog, size[4] = l1;
    TU_OK(patina_gpu_jpeg_decode(D, gpu, data, size, 5, st));
    assert_int_equal(st[0], PATINA_OK);
    assert_int_not_equal(st[1], PATINA_OK);
    assert_int_not_equal(st[2], PATINA_OK);
    assert_int_not_equal(st[3], PATINA_OK);
    printf("  progressive: %s\n", st[4] == PATINA_OK ? "decoded by nvJPEG" : "left to the CPU");
    if (st[4] == PATINA_OK) {
        patina_image_t cpu, got;
        diffstat_t d;
        TU_OK(patina_image_decode(&cpu, prog, l1, NULL, "progressive"));
        download(&got, &gpu[4]);
        d = compare(&cpu, &got);
        assert_true(d.mean <= SYNTH_MEAN);
        patina_image_release(&cpu);
        patina_image_release(&got);
    }
    tjFree(good);
    tjFree(prog);
    patina_image_release(&src);
}


/* 1 when the JPEG's frame is baseline or extended sequential Huffman
 * (SOF0 / SOF1), what nvJPEG's engines take: the markers from SOI to the
 * first SOFn. */
static int jpeg_is_baseline(const void *data, size_t size)
{
    const unsigned char *b = data;
    size_t i = 2;
    if (size < 4 || b[0] != 0xFF || b[1] != 0xD8) return 0;
    while (i + 4 <= size && b[i] == 0xFF) {
        const unsigned m = b[i + 1];
        if (m == 0xFF) { /* fill byte */
            i++;
            continue;
        }
        if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) return m == 0xC0 || m == 0xC1;
        i += 2 + ((size_t)b[i + 2] << 8 | b[i + 3]);
    }
    return 0;
}
/* Real photographs: pixels, CEDD distance and retrieval. */
static void test_samples(void **state)
{
    const char *dir = getenv("PATINA_SAMPLES");
    char **files = NULL;
    size_t nf, i, j, n = 0, same = 0, self = 0, gpu_ok = 0;
    uint8_t *ref, *got;
    patina_image_t *dev;
    void **data;
    size_t *size;
    patina_status *st;
    double worst_t = 0, sum_t = 0, worst_mean = 0, worst_w2 = 1, worst_fast = 0, worst_fast_w2 = 1;
    double sum_mean = 0, sum_fast = 0;
    size_t worst_rank = 0, baseline = 0;
    (void)state;
    if (!dir || !*dir) dir = PATINA_SAMPLES_DIR;
    nf = tu_list_files(dir, "jpg,jpeg", &files);
    if (nf == 0) {
        printf("  samples: no JPEG photographs under '%s' (set PATINA_SAMPLES); skipped\n", dir);
        tu_free_list(files, nf);
        return;
    }
    data = calloc(nf, sizeof *data);
    size = calloc(nf, sizeof *size);
    st = calloc(nf, sizeof *st);
    dev = calloc(nf, sizeof *dev);
    ref = calloc(nf, PATINA_CEDD_DIM);
    got = calloc(nf, PATINA_CEDD_DIM);
    assert_true(data && size && st && dev && ref && got);
    for (i = 0; i < nf; i++) {
        TU_OK(patina_file_read(&data[n], &size[n], files[i], NULL));
        baseline += jpeg_is_baseline(data[n], size[n]);
        n++;
    }
    TU_OK(patina_gpu_jpeg_decode(D, dev, (const void *const *)data, size, n, st));
    for (i = 0; i < n; i++) {
        patina_image_t cpu, host, fast;
        diffstat_t d, f;
        if (st[i] != PATINA_OK) {
            printf("  %s: left to the CPU\n", files[i]);
            continue;
        }
        gpu_ok++;
        TU_OK(patina_image_decode(&cpu, data[i], size[i], NULL, files[i]));
        decode_fast(&fast, data[i], size[i]);
        download(&host, &dev[i]);
        d = compare(&cpu, &host);
        f = compare(&fast, &host);
        if (d.mean > worst_mean) worst_mean = d.mean;
        if (d.within2 < worst_w2) worst_w2 = d.within2;
        if (f.mean > worst_fast) worst_fast = f.mean;
        if (f.within2 < worst_fast_w2) worst_fast_w2 = f.within2;
        sum_mean += d.mean;
        sum_fast += f.mean;
        assert_true(d.mean <= PHOTO_MEAN);
        if (HW) assert_true(f.within2 >= 0.9999);
        patina_image_release(&fast);
        TU_OK(patina_cedd_extract(ref + i * PATINA_CEDD_DIM, &cpu, 0));
        patina_image_release(&cpu);
        patina_image_release(&host);
    }
    /* CEDD of the device images, read in place by the GPU kernels. */
    {
        patina_image_t *ok_imgs = calloc(n, sizeof *ok_imgs);
        size_t *idx = calloc(n, sizeof *idx), m = 0;
        uint8_t *tmp = calloc(n, PATINA_CEDD_DIM);
        for (i = 0; i < n; i++)
            if (st[i] == PATINA_OK) idx[m] = i, ok_imgs[m++] = dev[i];
        TU_OK(patina_gpu_cedd(G, tmp, ok_imgs, m, 0, NULL));
        for (j = 0; j < m; j++) memcpy(got + idx[j] * PATINA_CEDD_DIM, tmp + j * PATINA_CEDD_DIM, PATINA_CEDD_DIM);
        free(ok_imgs);
        free(idx);
        free(tmp);
    }
    for (i = 0; i < n; i++) {
        double t, best = 1e300, mine;
        size_t arg = 0, rank = 1;
        if (st[i] != PATINA_OK) continue;
        mine = patina_cedd_tanimoto(got + i * PATINA_CEDD_DIM, ref + i * PATINA_CEDD_DIM);
        t = patina_cedd_tanimoto(ref + i * PATINA_CEDD_DIM, got + i * PATINA_CEDD_DIM);
        same += memcmp(ref + i * PATINA_CEDD_DIM, got + i * PATINA_CEDD_DIM, PATINA_CEDD_DIM) == 0;
        sum_t += t;
        if (t > worst_t) worst_t = t;
        for (j = 0; j < n; j++) {
            double u;
            if (st[j] != PATINA_OK) continue;
            u = patina_cedd_tanimoto(got + i * PATINA_CEDD_DIM, ref + j * PATINA_CEDD_DIM);
            if (u < best || (u == best && j == i)) best = u, arg = j;
            rank += j != i && u < mine;
        }
        self += arg == i;
        if (rank > worst_rank) worst_rank = rank;
        if (arg != i)
            printf("  %s: nearest reference descriptor is %s (%.4f), its own is rank %zu (%.4f)\n",
                   files[i], files[arg], best, rank, mine);
    }
    printf("  samples: pixels vs reference: mean |d| %.3f (worst image %.3f), within 2 >= %.4f; "
           "vs fast upsampling: mean %.3f (worst %.3f), within 2 >= %.4f\n",
           gpu_ok ? sum_mean / (double)gpu_ok : 0, worst_mean, worst_w2,
           gpu_ok ? sum_fast / (double)gpu_ok : 0, worst_fast, worst_fast_w2);
    printf("  samples: %zu JPEGs (%zu baseline), %zu decoded by nvJPEG; worst mean |d| %.3f; CEDD identical %zu, "
           "Tanimoto mean %.4f max %.4f; nearest neighbour is itself for %zu of %zu (worst rank %zu)\n",
           n, baseline, gpu_ok, worst_mean, same, gpu_ok ? sum_t / (double)gpu_ok : 0, worst_t, self, gpu_ok,
           worst_rank);
    /* every baseline photograph is nvJPEG's (a few may be refused by the
     * engine's checks); progressive ones are left to the CPU by design */
    assert_true(gpu_ok * 10 >= baseline * 9);
    assert_true(gpu_ok <= baseline);
    assert_true(worst_t <= 5.0);            /* LIRE's scale: 0 .. 100 */
    assert_true(self * 100 >= gpu_ok * 95);
    assert_true(worst_rank <= 3);
    for (i = 0; i < n; i++) free(data[i]);
    free(data);
    free(size);
    free(st);
    free(dev);
    free(ref);
    free(got);
    tu_free_list(files, nf);
}

/* The pipeline: a folder of JPEGs (one truncated, one progressive) and a
 * PNG, indexed with --decoder nvjpeg, fixed and adaptive shares. */
static void test_pipeline(void **state)
{
    char *dir = tu_tempdir("nvjpeg"), path[4096], col[4096];
    const char *paths[1];
    char **files = NULL;
    size_t nfiles = 0, missing = 0, i;
    patina_context_t *ctx;
    patina_extractor_t *ex;
    double shares[2] = {0.0, -1.0};   /* default (all nvJPEG supports), adaptive */
    int k;
    (void)state;
    for (i = 0; i < 40; i++) {
        patina_image_t src;
        unsigned long len;
        unsigned char *j;
        synth(&src, 200 + (int)i * 7, 150 + (int)i * 3, (unsigned)i);
        j = encode(&src, i % 3 == 0 ? TJSAMP_444 : TJSAMP_420, i == 7 ? TJFLAG_PROGRESSIVE : 0, &len);
        snprintf(path, sizeof path, "%s/img_%03zu.jpg", dir, i);
        assert_int_equal(tu_write_file(path, j, i == 11 ? len / 3 : len), 0);
        tjFree(j);
        patina_image_release(&src);
    }
    {
        static const unsigned char png[] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0};
        snprintf(path, sizeof path, "%s/broken.png", dir);
        assert_int_equal(tu_write_file(path, png, sizeof png), 0);
    }
    paths[0] = dir;
    TU_OK(patina_expand_paths(&files, &nfiles, paths, 1, &missing, NULL, NULL));
    assert_int_equal(nfiles, 41);
    TU_OK(patina_context_new(&ctx, NULL));
    TU_OK(patina_extractor_new(&ex, "cedd"));
    for (k = 0; k < 2; k++) {
        patina_collection_t *c;
        patina_index_opts_t o;
        patina_index_stats_t s;
        memset(&o, 0, sizeof o);
        o.device = PATINA_DEVICE_GPU;
        o.jpeg_decoder = PATINA_JPEG_NVJPEG;
        o.nvjpeg_share = shares[k];
        o.batch = 8;
        snprintf(col, sizeof col, "%s/col%d", dir, k);
        TU_OK(patina_collection_open(&c, col, PATINA_OPEN_CREATE, 0));
        TU_OK(patina_index_files(ctx, c, ex, (const char *const *)files, nfiles, &o, &s));
        printf("  pipeline (share %s): indexed %llu, failed %llu, nvJPEG decoded %llu\n",
               k ? "adaptive" : "default", (unsigned long long)s.indexed, (unsigned long long)s.failed,
               (unsigned long long)s.gpu_decoded);
        assert_int_equal(s.indexed, 39);   /* 40 JPEGs - the truncated one */
        assert_int_equal(s.failed, 2);     /* truncated JPEG, broken PNG */
        assert_true(s.gpu_decoded >= (k ? 1u : 37u));
        patina_collection_close(c);
    }
    {   /* refused combinations */
        patina_collection_t *c;
        patina_index_opts_t o;
        patina_index_stats_t s;
        memset(&o, 0, sizeof o);
        o.device = PATINA_DEVICE_CPU;
        o.jpeg_decoder = PATINA_JPEG_NVJPEG;
        snprintf(col, sizeof col, "%s/col-cpu", dir);
        TU_OK(patina_collection_open(&c, col, PATINA_OPEN_CREATE, 0));
        assert_int_equal(patina_index_files(ctx, c, ex, (const char *const *)files, nfiles, &o, &s),
                         PATINA_E_INVALID);
        patina_collection_close(c);
    }
    for (i = 0; i < nfiles; i++) free(files[i]);
    free(files);
    patina_extractor_free(ex);
    patina_context_free(ctx);
    tu_remove_tree(dir);
    free(dir);
}

static int setup(void **state)
{
    char why[256];
    (void)state;
    if (patina_gpu_open(&G, 0, 0) != PATINA_OK) {
        printf("gpu_open failed: %s\n", patina_last_error());
        return -1;
    }
    if (!patina_gpu_jpeg_available(NULL, why, sizeof why)) return -1;
    {
        double t0 = patina_now();
        if (patina_gpu_jpeg_open(&D, G, NULL, 3) != PATINA_OK) {
            printf("nvjpeg open failed: %s\n", patina_last_error());
            return -1;
        }
        HW = !strcmp(patina_gpu_jpeg_backend(D), "hardware");
        printf("  nvJPEG: %s, %s backend, %d lanes, opened in %.3f s\n", why,
               patina_gpu_jpeg_backend(D), patina_gpu_jpeg_lanes(D), patina_now() - t0);
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    patina_gpu_jpeg_close(D);
    patina_gpu_close(G);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synthetic),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_samples),
        cmocka_unit_test(test_pipeline),
    };
    char why[256];
    tu_require_gpu();
    if (!patina_gpu_jpeg_available(NULL, why, sizeof why)) {
        printf("SKIPPED: %s\n", why);
        return 77;
    }
    return cmocka_run_group_tests(tests, setup, teardown);
}
