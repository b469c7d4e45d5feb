/* GPU-only and hybrid CEDD against the C reference (patina_cedd_extract),
 * byte for byte: random images of many sizes (degenerate, no-grid, 20- and
 * 40-grid, odd, large), normal and compact, batches of 1 .. 257 images of
 * mixed sizes, pageable / pinned / device-resident input with padded and odd
 * strides, images split across pieces and batches (tiny capacities), invalid
 * images, the public patina_extract_batch path (GPU, HYBRID, AUTO), and real
 * photographs when $PATINA_SAMPLES (or PATINA_SAMPLES_DIR) has some.
 *
 * Exits 77 (skipped) without a usable GPU. PATINA_TEST_QUICK=1 runs a smaller
 * set, PATINA_TEST_QUICK=2 a tiny one (for compute-sanitizer's racecheck);
 * set (for compute-sanitizer). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "features/cedd_ref.h"
#include "gpu/gpu.h"
#include "testutil.h"

static patina_gpu_t *G;
static patina_pool_t *POOL;
static int QUICK;

typedef struct { int w, h; } size2_t;

static const size2_t SIZES[] = {
    {1, 1},     {1, 50},    {50, 1},    {2, 1},     {2, 2},      {3, 3},     {7, 5},
    {39, 100},  {100, 39},  {40, 40},   {79, 80},   {80, 80},    {159, 81},  {640, 480},
    {641, 479}, {1024, 768}, {2048, 2048}, {3000, 37}, {37, 3000}, {39, 1000}};
#define NSIZES (sizeof SIZES / sizeof SIZES[0])

static int too_big(int w, int h)
{
    return QUICK && (size_t)w * (size_t)h > (QUICK > 1 ? 160u * 120u : 700u * 500u);
}

/* Compares got (n, 144) with the C reference; prints the first mismatches. */
static size_t check(const char *what, const uint8_t *got, const patina_image_t *imgs, size_t n,
                    int compact, const patina_status *st)
{
    size_t i, bad = 0, printed = 0;
    for (i = 0; i < n; i++) {
        uint8_t ref[PATINA_CEDD_DIM];
        int b, img_bad = 0;
        TU_OK(patina_cedd_extract(ref, &imgs[i], compact));
        if (st && st[i] != PATINA_OK) {
            printf("  %s: image %zu (%dx%d): status %s\n", what, i, imgs[i].width, imgs[i].height,
                   patina_status_str(st[i]));
            bad++;
            continue;
        }
        for (b = 0; b < PATINA_CEDD_DIM; b++)
            if (got[i * PATINA_CEDD_DIM + (size_t)b] != ref[b]) {
                if (printed < 8) {
                    printf("  %s: image %zu (%dx%d stride %zu) compact %d bin %d: gpu %u ref %u\n",
                           what, i, imgs[i].width, imgs[i].height, imgs[i].stride, compact, b,
                           got[i * PATINA_CEDD_DIM + (size_t)b], ref[b]);
                    printed++;
                }
                img_bad = 1;
            }
        bad += (size_t)img_bad;
    }
    if (bad) printf("  %s: %zu of %zu images differ\n", what, bad, n);
    return bad;
}

/* Runs GPU-only (and hybrid) on imgs and checks against the C reference on
 * host (host copies of imgs; NULL: imgs themselves). */
static void run_check(const char *what, const patina_image_t *imgs, const patina_image_t *host,
                      size_t n, int compact, int hybrid)
{
    uint8_t *out = malloc(n * PATINA_CEDD_DIM + 1);
    patina_status *st = malloc(n * sizeof *st + 1);
    char label[160];
    size_t bad;
    assert_non_null(out);
    assert_non_null(st);
    memset(out, 0xee, n * PATINA_CEDD_DIM); /* poison: every byte must be written */
    TU_OK(patina_gpu_cedd(G, out, imgs, n, compact, st));
    snprintf(label, sizeof label, "%s gpu", what);
    if (!host) host = imgs;
    bad = check(label, out, host, n, compact, st);
    if (hybrid) {
        memset(out, 0xee, n * PATINA_CEDD_DIM);
        TU_OK(patina_gpu_cedd_hybrid(G, POOL, cedd_block_row_sums, out, imgs, n, compact, st));
        snprintf(label, sizeof label, "%s hybrid", what);
        bad += check(label, out, host, n, compact, st);
    }
    free(out);
    free(st);
    if (bad) fail_msg("%s: %zu mismatching images", what, bad);
}

static void both(const char *what, const patina_image_t *imgs, size_t n, int compact, int hybrid)
{
    run_check(what, imgs, NULL, n, compact, hybrid);
}

/* A random image with stride 3w + pad (pad may be odd). */
static void padded_image(patina_image_t *img, int w, int h, int kind, size_t pad, tu_rng_t *r)
{
    patina_image_t tight;
    size_t y;
    tu_random_image(&tight, w, h, kind, r);
    if (pad == 0) {
        *img = tight;
        return;
    }
    TU_OK(patina_image_init(img, w + (int)(pad / 3) + 1, h)); /* room for the padded rows */
    img->width = w;
    img->stride = 3 * (size_t)w + pad;
    for (y = 0; y < (size_t)h; y++)
        memcpy(img->data + y * img->stride, tight.data + y * tight.stride, 3 * (size_t)w);
    patina_image_release(&tight);
}

static void release_all(patina_image_t *imgs, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) patina_image_release(&imgs[i]);
}

/* ---------------------------------------------------------------- tests */

static void test_sizes(void **state)
{
    tu_rng_t r;
    size_t s;
    int kind, compact;
    (void)state;
    tu_rng_seed(&r, 1);
    for (s = 0; s < NSIZES; s++) {
        patina_image_t imgs[4];
        char what[64];
        if (too_big(SIZES[s].w, SIZES[s].h)) continue;
        for (kind = 0; kind < 4; kind++) tu_random_image(&imgs[kind], SIZES[s].w, SIZES[s].h, kind, &r);
        for (compact = 0; compact < 2; compact++) {
            snprintf(what, sizeof what, "%dx%d", SIZES[s].w, SIZES[s].h);
            both(what, imgs, 4, compact, 1);      /* the four kinds in one batch */
            both(what, &imgs[1], 1, compact, 0);  /* a batch of one */
        }
        release_all(imgs, 4);
    }
}

/* Mixed sizes: the listed ones, random ones, odd strides. */
static void random_batch(patina_image_t *imgs, size_t n, tu_rng_t *r)
{
    size_t i;
    for (i = 0; i < n; i++) {
        int w, h;
        size_t pad = tu_rng_below(r, 3) == 0 ? tu_rng_below(r, 40) : 0;
        if (tu_rng_below(r, 3) == 0) {
            const size2_t *sz = &SIZES[tu_rng_below(r, NSIZES)];
            w = sz->w;
            h = sz->h;
            if (too_big(w, h) || (size_t)w * (size_t)h > 1100u * 800u) w = h = 90;
        } else {
            w = 1 + (int)tu_rng_below(r, 700);
            h = 1 + (int)tu_rng_below(r, 520);
        }
        padded_image(&imgs[i], w, h, (int)tu_rng_below(r, 4), pad, r);
    }
}

/* Copies images into pinned memory (wrapped, not owned). */
static uint8_t **pin_copies(patina_image_t *dst, const patina_image_t *src, size_t n, int every)
{
    uint8_t **bufs = calloc(n, sizeof *bufs);
    size_t i;
    for (i = 0; i < n; i++) {
        size_t bytes = src[i].stride * (size_t)src[i].height;
        dst[i] = src[i];
        dst[i].owned = 0;
        if (i % (size_t)every != 0 || bytes == 0) continue;
        bufs[i] = patina_gpu_host_alloc(bytes);
        assert_non_null(bufs[i]);
        memcpy(bufs[i], src[i].data, bytes);
        dst[i].data = bufs[i];
    }
    return bufs;
}

static void free_pins(uint8_t **bufs, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) patina_gpu_host_free(bufs[i]);
    free(bufs);
}

static void test_batches(void **state)
{
    static const size_t counts[] = {1, 3, 17, 64, 257};
    tu_rng_t r;
    size_t c;
    (void)state;
    tu_rng_seed(&r, 2);
    for (c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        size_t n = counts[c];
        patina_image_t *imgs, *pinned;
        uint8_t **bufs;
        char what[64];
        if (QUICK && n > (QUICK > 1 ? 3 : 17)) continue;
        imgs = calloc(n, sizeof *imgs);
        pinned = calloc(n, sizeof *pinned);
        random_batch(imgs, n, &r);
        snprintf(what, sizeof what, "batch %zu pageable", n);
        both(what, imgs, n, (int)(c & 1), 1);
        bufs = pin_copies(pinned, imgs, n, 1);
        snprintf(what, sizeof what, "batch %zu pinned", n);
        both(what, pinned, n, (int)(c & 1) ^ 1, 0);
        free_pins(bufs, n);
        bufs = pin_copies(pinned, imgs, n, 2);
        snprintf(what, sizeof what, "batch %zu mixed pinned/pageable", n);
        both(what, pinned, n, 0, 0);
        free_pins(bufs, n);
        release_all(imgs, n);
        free(imgs);
        free(pinned);
    }
}

/* Images already in device memory are read in place. */
static void test_device_input(void **state)
{
    const size_t n = 9;
    patina_image_t imgs[9], dev[9];
    tu_rng_t r;
    size_t i;
    (void)state;
    tu_rng_seed(&r, 3);
    random_batch(imgs, n, &r);
    patina_image_release(&imgs[0]); /* replaced by padded ones */
    patina_image_release(&imgs[1]);
    padded_image(&imgs[0], 640, 480, 1, 0, &r);
    padded_image(&imgs[1], 641, 479, 2, 7, &r);
    for (i = 0; i < n; i++) {
        size_t bytes = imgs[i].stride * (size_t)imgs[i].height;
        dev[i] = imgs[i];
        dev[i].owned = 0;
        if (!bytes) continue;
        dev[i].data = patina_gpu__dev_alloc(G, bytes);
        assert_non_null(dev[i].data);
        TU_OK(patina_gpu__upload(G, dev[i].data, imgs[i].data, bytes));
    }
    {
        uint8_t out[9 * PATINA_CEDD_DIM];
        patina_status st[9];
        int compact;
        for (compact = 0; compact < 2; compact++) {
            memset(out, 0xee, sizeof out);
            TU_OK(patina_gpu_cedd(G, out, dev, n, compact, st));
            if (check("device input", out, imgs, n, compact, st)) fail_msg("device input differs");
        }
        /* the hybrid path cannot read device memory: per-image INVALID */
        TU_OK(patina_gpu_cedd_hybrid(G, POOL, cedd_block_row_sums, out, dev, 2, 0, st));
        assert_int_equal(st[0], PATINA_E_INVALID);
    }
    for (i = 0; i < n; i++) patina_gpu__dev_free(G, dev[i].data);
    release_all(imgs, n);
}

/* Tiny capacities: images split into block-row pieces and parts of block
 * rows, spread over many batches, with the histogram carried between. */
static void test_split(void **state)
{
    static const size2_t big[] = {{2048, 2048}, {641, 479}, {3000, 37}, {39, 1000}, {1, 1},
                                  {80, 80},     {159, 81},  {7, 5},     {1024, 768}, {640, 480}};
    static const size_t caps[][3] = {{64 << 10, 500, 7}, {200 << 10, 1601, 3}, {30000, 40, 64},
                                     {1 << 20, 100000, 1}};
    const size_t n = sizeof big / sizeof big[0];
    patina_image_t imgs[10], pinned[10], dev[10];
    uint8_t **bufs;
    tu_rng_t r;
    size_t i, c;
    (void)state;
    tu_rng_seed(&r, 4);
    for (i = 0; i < n; i++) {
        int w = big[i].w, h = big[i].h;
        if (too_big(w, h)) w = h = 300;
        padded_image(&imgs[i], w, h, (int)(i % 4), i % 3 ? 0 : 5, &r);
    }
    bufs = pin_copies(pinned, imgs, n, 2);
    for (i = 0; i < n; i++) {
        size_t bytes = imgs[i].stride * (size_t)imgs[i].height;
        dev[i] = imgs[i];
        dev[i].owned = 0;
        dev[i].data = bytes ? patina_gpu__dev_alloc(G, bytes) : NULL;
        if (bytes) TU_OK(patina_gpu__upload(G, dev[i].data, imgs[i].data, bytes));
    }
    for (c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        char what[96];
        TU_OK(patina_gpu__set_caps(G, caps[c][0], caps[c][1], caps[c][2]));
        snprintf(what, sizeof what, "split caps %zu/%zu/%zu pageable", caps[c][0], caps[c][1], caps[c][2]);
        both(what, imgs, n, (int)(c & 1), 1);
        snprintf(what, sizeof what, "split caps %zu/%zu/%zu pinned", caps[c][0], caps[c][1], caps[c][2]);
        both(what, pinned, n, 0, 0);
        snprintf(what, sizeof what, "split caps %zu/%zu/%zu device", caps[c][0], caps[c][1], caps[c][2]);
        run_check(what, dev, imgs, n, 1, 0); /* the reference reads the host copies */
    }
    TU_OK(patina_gpu__set_caps(G, 0, 0, 0));
    for (i = 0; i < n; i++) patina_gpu__dev_free(G, dev[i].data);
    free_pins(bufs, n);
    release_all(imgs, n);
}

static void test_invalid(void **state)
{
    patina_image_t imgs[4];
    uint8_t out[4 * PATINA_CEDD_DIM], ref[PATINA_CEDD_DIM];
    patina_status st[4];
    tu_rng_t r;
    int pass;
    (void)state;
    tu_rng_seed(&r, 5);
    tu_random_image(&imgs[0], 100, 90, 1, &r);
    tu_random_image(&imgs[1], 100, 90, 2, &r);
    tu_random_image(&imgs[3], 120, 90, 0, &r);
    imgs[2] = imgs[1];
    imgs[2].owned = 0;
    imgs[2].stride = 10; /* < 3w */
    for (pass = 0; pass < 2; pass++) {
        uint8_t *bad_data = imgs[1].data;
        imgs[1].data = NULL; /* null data, w,h > 0 */
        memset(out, 0xee, sizeof out);
        if (pass == 0) TU_OK(patina_gpu_cedd(G, out, imgs, 4, 0, st));
        else TU_OK(patina_gpu_cedd_hybrid(G, POOL, cedd_block_row_sums, out, imgs, 4, 0, st));
        imgs[1].data = bad_data;
        assert_int_equal(st[0], PATINA_OK);
        assert_int_equal(st[1], PATINA_E_INVALID);
        assert_int_equal(st[2], PATINA_E_INVALID);
        assert_int_equal(st[3], PATINA_OK);
        TU_OK(patina_cedd_extract(ref, &imgs[3], 0));
        assert_memory_equal(out + 3 * PATINA_CEDD_DIM, ref, PATINA_CEDD_DIM);
        memset(ref, 0, sizeof ref);
        assert_memory_equal(out + 1 * PATINA_CEDD_DIM, ref, PATINA_CEDD_DIM);
        assert_memory_equal(out + 2 * PATINA_CEDD_DIM, ref, PATINA_CEDD_DIM);
    }
    patina_image_release(&imgs[0]);
    patina_image_release(&imgs[1]);
    patina_image_release(&imgs[3]);
}

/* The public path: patina_extract_batch on GPU, HYBRID and AUTO. */
static void test_extract_batch(void **state)
{
    static const patina_device devs[] = {PATINA_DEVICE_GPU, PATINA_DEVICE_HYBRID, PATINA_DEVICE_AUTO};
    const size_t n = QUICK ? (QUICK > 1 ? 3 : 9) : 40;
    patina_context_t *ctx;
    patina_extractor_t *ex[2];
    patina_image_t *imgs = calloc(n, sizeof *imgs);
    uint8_t *cpu = malloc(n * PATINA_CEDD_DIM), *got = malloc(n * PATINA_CEDD_DIM);
    patina_device resolved;
    tu_rng_t r;
    size_t d;
    int e;
    (void)state;
    tu_rng_seed(&r, 6);
    random_batch(imgs, n, &r);
    TU_OK(patina_context_new(&ctx, NULL));
    TU_OK(patina_extractor_new(&ex[0], "cedd"));
    TU_OK(patina_extractor_new(&ex[1], "cedd:compact=1"));
    TU_OK(patina_context_resolve(ctx, ex[0], PATINA_DEVICE_AUTO, &resolved));
    assert_int_equal(resolved, PATINA_DEVICE_GPU);
    for (e = 0; e < 2; e++) {
        TU_OK(patina_extract_batch(ctx, ex[e], PATINA_DEVICE_CPU, cpu, imgs, n, NULL));
        for (d = 0; d < sizeof devs / sizeof devs[0]; d++) {
            patina_status *st = malloc(n * sizeof *st);
            size_t i;
            memset(got, 0xee, n * PATINA_CEDD_DIM);
            TU_OK(patina_extract_batch(ctx, ex[e], devs[d], got, imgs, n, st));
            for (i = 0; i < n; i++) assert_int_equal(st[i], PATINA_OK);
            if (memcmp(got, cpu, n * PATINA_CEDD_DIM) != 0) {
                check(patina_device_name(devs[d]), got, imgs, n, e, NULL);
                fail_msg("extract_batch %s (%s) differs from the CPU", patina_device_name(devs[d]),
                         patina_extractor_spec(ex[e]));
            }
            free(st);
        }
    }
    patina_extractor_free(ex[0]);
    patina_extractor_free(ex[1]);
    patina_context_free(ctx);
    release_all(imgs, n);
    free(imgs);
    free(cpu);
    free(got);
}

/* Real photographs, if any are present. */
static void test_samples(void **state)
{
    const char *dir = getenv("PATINA_SAMPLES");
    const char *lim = getenv("PATINA_SAMPLES_MAX");
    size_t max = lim ? (size_t)strtoul(lim, NULL, 10) : (QUICK ? (QUICK > 1 ? 1 : 8) : 300);
    char **files = NULL;
    size_t nf, i, n = 0, failed = 0;
    patina_image_t *imgs;
    (void)state;
    if (!dir || !*dir) dir = PATINA_SAMPLES_DIR;
    nf = tu_list_files(dir, "jpg,jpeg,png", &files);
    if (nf == 0) {
        printf("  samples: no photographs under '%s' (set PATINA_SAMPLES); skipped\n", dir);
        tu_free_list(files, nf);
        return;
    }
    imgs = calloc(nf, sizeof *imgs);
    for (i = 0; i < nf && i < max; i++) {
        if (patina_image_load(&imgs[n], files[i], NULL) == PATINA_OK) n++;
        else failed++;
    }
    printf("  samples: %zu photographs from '%s' (%zu failed to load)\n", n, dir, failed);
    if (n) {
        both("samples", imgs, n, 0, 1);
        both("samples", imgs, n, 1, 1);
    }
    release_all(imgs, n);
    free(imgs);
    tu_free_list(files, nf);
}

static int setup(void **state)
{
    (void)state;
    if (patina_gpu_open(&G, 0, 0) != PATINA_OK) {
        printf("gpu_open failed: %s\n", patina_last_error());
        return -1;
    }
    if (patina_pool_new(&POOL, 0) != PATINA_OK) return -1;
    {
        char plan[512];
        patina_gpu__plan(G, plan, sizeof plan);
        printf("  %s\n", plan);
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    patina_pool_free(POOL);
    patina_gpu_close(G);
    return 0;
}

int main(void)
{
    const char *q = getenv("PATINA_TEST_QUICK");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invalid),      cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_batches),      cmocka_unit_test(test_device_input),
        cmocka_unit_test(test_split),        cmocka_unit_test(test_extract_batch),
        cmocka_unit_test(test_samples),
    };
    tu_require_gpu();
    QUICK = q && *q ? atoi(q) : 0;
    return cmocka_run_group_tests(tests, setup, teardown);
}
