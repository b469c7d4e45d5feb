/* The signature family on the GPU (src/gpu/signature.cu) against the C
 * reference: every record bit-identical (memcmp) on random images of many
 * sizes (1x1, one row, one column, non-square, grey and RGB, noise, smooth,
 * flat patches), on photographs of samples/, under option sets that reach
 * every rule (grid and random points, seeds, k cropping, iterations, minsize
 * and drop that empty every cluster, join 0, weights=max, bits 8 - chunked
 * co-occurrence keys - and radii 0..12, alpha and form); a memory budget so
 * small that images exceed a batch (the CPU takes them, same bytes); bad
 * images (empty, no pixels) get the CPU's statuses in a batch with good
 * ones. test_lab_margin checks, for all 2^24 colours, the argument that lets
 * the GPU use CUDA's cbrt (docs/signature.md "GPU extraction"). Label gpu:
 * skipped without one (test_lab_margin runs first and needs none).
 * PATINA_TEST_QUICK=1 trims the loops (sanitizers), 2 keeps a tiny set. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "features/family.h"
#include "features/signature.h"
#include "gpu/gpu.h"
#include "patina/descriptor.h"
#include "testutil.h"

static int quick; /* PATINA_TEST_QUICK: 0, 1 (smaller), 2 (tiny) */
static patina_context_t *ctx;

/* Compares n records of dim floats bit for bit; prints the first few
 * differences with image, element and both values. */
static void compare(const float *gpu, const float *cpu, size_t n, size_t dim, const char *what)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t e = 0; e < dim; e++)
            if (memcmp(&gpu[i * dim + e], &cpu[i * dim + e], sizeof(float)) != 0) {
                if (bad < 8)
                    print_message("%s: image %zu element %zu (row %ld col %zu): gpu %.9g (%a) cpu %.9g (%a)\n", what,
                                  i, e, e < 8 ? -1L : (long)((e - 8) / 8), e % 8, (double)gpu[i * dim + e],
                                  (double)gpu[i * dim + e], (double)cpu[i * dim + e], (double)cpu[i * dim + e]);
                bad++;
            }
    if (bad) fail_msg("%s: %zu elements differ", what, bad);
}

/* The CPU and GPU records of n images under spec, through
 * patina_extract_batch, compared; statuses compared too. */
static void check_batch(patina_context_t *c, const char *spec, const patina_image_t *imgs, size_t n, const char *what)
{
    patina_extractor_t *ex;
    size_t bytes;
    float *a, *b;
    patina_status *sa = malloc(n * sizeof *sa), *sb = malloc(n * sizeof *sb);
    char msg[256];
    TU_OK(patina_extractor_new(&ex, spec));
    bytes = patina_extractor_bytes(ex);
    a = malloc(n * bytes);
    b = malloc(n * bytes);
    assert_non_null(a);
    assert_non_null(b);
    TU_OK(patina_extract_batch(c, ex, PATINA_DEVICE_CPU, a, imgs, n, sa));
    TU_OK(patina_extract_batch(c, ex, PATINA_DEVICE_GPU, b, imgs, n, sb));
    for (size_t i = 0; i < n; i++)
        if (sa[i] != sb[i]) fail_msg("%s %s: image %zu status cpu %d gpu %d", what, spec, i, (int)sa[i], (int)sb[i]);
    snprintf(msg, sizeof msg, "%s %s", what, spec);
    compare(b, a, n, bytes / sizeof(float), msg);
    free(a);
    free(b);
    free(sa);
    free(sb);
    patina_extractor_free(ex);
}

static const char *const specs[] = {
    "signature",
    "signature:samples=500,seeds=100,k=16,iters=5,sampling=grid",
    "signature:samples=300,seeds=300,k=8,iters=3,minsize=0,join=0,weights=max,seed=7",
    "signature:samples=1000,seeds=50,k=64,bits=8,radius=5,seed=123",
    "signature:samples=64,seeds=64,k=1,iters=20,minsize=10,drop=3",
    "signature:samples=200,seeds=20,iters=0,radius=0,alpha=0.2,form=heuristic",
    "signature:samples=1500,seeds=300,radius=12,bits=6,join=0.05,form=minus",
    "signature:samples=7,seeds=3,k=2,iters=2,sampling=grid,bits=1,radius=1",
};
#define NSPECS (sizeof specs / sizeof specs[0])

/* Random images: sizes from 1x1 up, each kind (noise, smooth, patches, grey). */
static void test_random(void **state)
{
    static const int sizes[][2] = {{1, 1}, {1, 7}, {9, 1}, {2, 2}, {3, 5}, {16, 16}, {31, 47},
                                   {100, 60}, {257, 129}, {640, 480}};
    const size_t nsizes = quick > 1 ? 4 : quick ? 8 : sizeof sizes / sizeof sizes[0];
    const size_t nspecs = quick > 1 ? 2 : NSPECS;
    patina_image_t imgs[4 * 10];
    size_t n = 0;
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 18);
    for (size_t si = 0; si < nsizes; si++)
        for (int kind = 0; kind < 4; kind++) tu_random_image(&imgs[n++], sizes[si][0], sizes[si][1], kind, &r);
    for (size_t k = 0; k < nspecs; k++) {
        check_batch(ctx, specs[k], imgs, n, "random batch");
        if (k == 0) /* one image per call too */
            for (size_t i = 0; i < n; i += 5) check_batch(ctx, specs[k], &imgs[i], 1, "random single");
    }
    for (size_t i = 0; i < n; i++) patina_image_release(&imgs[i]);
}

/* Photographs of samples/ under the default spec and two others. */
static void test_photos(void **state)
{
    const char *dir = getenv("PATINA_SAMPLES");
    char **list = NULL;
    const size_t max = quick ? 2 : 12;
    patina_image_t imgs[12];
    size_t n, k = 0;
    (void)state;
    if (quick > 1) return;
    if (!dir || !*dir) dir = PATINA_SAMPLES_DIR;
    n = tu_list_files(dir, "jpg,jpeg,png", &list);
    for (size_t i = 0; i < n && k < max; i += 1 + n / max)
        if (patina_image_load(&imgs[k], list[i], NULL) == PATINA_OK) k++;
    tu_free_list(list, n);
    if (k == 0) {
        print_message("no sample photographs under %s (scripts/fetch-samples.sh)\n", dir);
        return;
    }
    check_batch(ctx, specs[0], imgs, k, "photos");
    check_batch(ctx, "signature:samples=4000,seeds=800,k=128,weights=max,sampling=grid", imgs, k, "photos");
    check_batch(ctx, specs[3], imgs, k, "photos");
    for (size_t i = 0; i < k; i++) patina_image_release(&imgs[i]);
}

/* A 16 MiB budget: 2 MiB of RGB per batch, so a 1000x800 image is left to
 * the CPU (PATINA_E_LIMIT inside, OK outside), and batches are cut short. */
static void test_small_budget(void **state)
{
    patina_context_opts_t o;
    patina_context_t *c;
    patina_image_t imgs[6];
    tu_rng_t r;
    (void)state;
    memset(&o, 0, sizeof o);
    patina_context_opts_init(&o);
    o.gpu_mem_budget = (uint64_t)16 << 20;
    TU_OK(patina_context_new(&c, &o));
    tu_rng_seed(&r, 5);
    for (int i = 0; i < 6; i++) tu_random_image(&imgs[i], i == 2 ? 1000 : 300 + 40 * i, i == 2 ? 800 : 500, i % 4, &r);
    check_batch(c, "signature:samples=800,seeds=120", imgs, 6, "small budget");
    for (int i = 0; i < 6; i++) patina_image_release(&imgs[i]);
    patina_context_free(c);
}

/* Bad images among good ones: the CPU's statuses, zeros, the others right. */
static void test_bad_images(void **state)
{
    patina_image_t imgs[5];
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 9);
    tu_random_image(&imgs[0], 40, 30, 1, &r);
    memset(&imgs[1], 0, sizeof imgs[1]); /* 0x0 */
    tu_random_image(&imgs[2], 5, 9, 0, &r);
    memset(&imgs[3], 0, sizeof imgs[3]);
    imgs[3].width = 4;
    imgs[3].height = 4; /* no pixels */
    tu_random_image(&imgs[4], 17, 3, 3, &r);
    check_batch(ctx, "signature:samples=100,seeds=10", imgs, 5, "bad images");
    {
        patina_extractor_t *ex;
        float *rec;
        patina_status st[5];
        TU_OK(patina_extractor_new(&ex, "signature:samples=100,seeds=10"));
        rec = malloc(5 * patina_extractor_bytes(ex));
        TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_GPU, rec, imgs, 5, st));
        assert_int_equal(st[1], PATINA_E_INVALID);
        assert_int_equal(st[3], PATINA_E_INVALID);
        assert_int_equal(st[0], PATINA_OK);
        free(rec);
        patina_extractor_free(ex);
    }
    patina_image_release(&imgs[0]);
    patina_image_release(&imgs[2]);
    patina_image_release(&imgs[4]);
}

/* The L*a*b* argument: for every 8-bit colour, the rounded L*, a*, b* are
 * the same for every cube root in [min - 2 ulps, max + 2 ulps] of the host's
 * cbrt and the exact one (cbrtl), so CUDA's cbrt (1 ulp) gives the CPU's
 * integers. The rest of lab_of is IEEE arithmetic both sides do alike;
 * rounding is monotone, so the interval's ends decide. */
static const double M[3][3] = {{0.412453, 0.357580, 0.180423},
                               {0.212671, 0.715160, 0.072169},
                               {0.019334, 0.119193, 0.950227}};
static const double white[3] = {0.950456, 1.0, 1.088754};

static double ulps(double x, int k)
{
    for (int i = 0; i < (k < 0 ? -k : k); i++) x = nextafter(x, k < 0 ? -INFINITY : INFINITY);
    return x;
}

static void test_lab_margin(void **state)
{
    double lin[256];
    long bad = 0, step = quick ? 97 : 1;
    (void)state;
    sig_srgb_linear(lin);
    for (long col = 0; col < (1L << 24); col += step) {
        const int c[3] = {(int)(col >> 16), (int)(col >> 8) & 255, (int)col & 255};
        double lo[3], hi[3], Y = 0.0, L1, L2;
        for (int k = 0; k < 3; k++) {
            const double s = M[k][0] * lin[c[0]] + M[k][1] * lin[c[1]] + M[k][2] * lin[c[2]], t = s / white[k];
            if (k == 1) Y = s;
            if (t > 0.008856) {
                const double g = cbrt(t), e = (double)cbrtl((long double)t);
                lo[k] = ulps(g < e ? g : e, -2);
                hi[k] = ulps(g < e ? e : g, 2);
            } else {
                lo[k] = hi[k] = 7.787 * t + 16.0 / 116.0;
            }
        }
        if (Y > 0.008856) {
            L1 = 116.0 * lo[1] - 16.0;
            L2 = 116.0 * hi[1] - 16.0;
        } else {
            L1 = L2 = 903.3 * Y;
        }
        if (floor(L1 + 0.5) != floor(L2 + 0.5) ||
            floor(500.0 * (lo[0] - hi[1]) + 0.5) != floor(500.0 * (hi[0] - lo[1]) + 0.5) ||
            floor(200.0 * (lo[1] - hi[2]) + 0.5) != floor(200.0 * (hi[1] - lo[2]) + 0.5)) {
            if (bad < 8) print_message("colour %d %d %d: a cube root within 2 ulps moves L*a*b*\n", c[0], c[1], c[2]);
            bad++;
        }
    }
    assert_int_equal(bad, 0);
}

static int setup(void **state)
{
    patina_context_opts_t o;
    (void)state;
    patina_context_opts_init(&o);
    return patina_context_new(&ctx, &o) == PATINA_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    patina_context_free(ctx);
    return 0;
}

int main(void)
{
    const struct CMUnitTest cpu_tests[] = {
        cmocka_unit_test(test_lab_margin),
    };
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_images),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_small_budget),
        cmocka_unit_test(test_photos),
    };
    int rc;
    quick = getenv("PATINA_TEST_QUICK") ? atoi(getenv("PATINA_TEST_QUICK")) : 0;
    if ((rc = cmocka_run_group_tests_name("signature lab margin", cpu_tests, NULL, NULL)) != 0) return rc;
    tu_require_gpu();
    return cmocka_run_group_tests(tests, setup, teardown);
}
