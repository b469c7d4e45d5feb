/* GPU = C reference, byte for byte, for lbp, lbp8, tlbap and lanadp: every
 * kernel variant (the paper's global- and shared-memory kernels at 16x16 and
 * 32x32, the production kernel writing code maps, the production kernel's
 * fused histograms) at several image sizes (1x1 .. 1031x1029, most not
 * multiples of the block or of 16) and batch sizes, and the registered
 * families through patina_extract_batch(device=gpu) against device=cpu.
 * Label `gpu`: exits 77 (skipped) without a usable GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "features/lbp.h"
#include "gpu/gpu.h"
#include "testutil.h"

static lbp_conf_t mkconf(int kind, int P, double R, int method, int mapping, const char *grid,
                         double th)
{
    lbp_opts_t o;
    lbp_conf_t c;
    memset(&o, 0, sizeof o);
    o.P = P;
    o.R = R;
    o.method = method;
    o.mapping = mapping;
    o.th = th;
    snprintf(o.grid, sizeof o.grid, "%s", grid);
    o.norm = LBP_NORM_COUNTS;
    o.vbins = 16;
    TU_OK(lbp_conf_resolve(&c, kind, &o, "test"));
    return c;
}

/* n grey images (h, w) back to back: noise, smooth, patches, few levels. */
static uint8_t *batch(int w, int h, int n, tu_rng_t *r)
{
    size_t px = (size_t)w * (size_t)h;
    uint8_t *g = malloc(px * (size_t)n + 1);
    for (int i = 0; i < n; i++) {
        patina_image_t img;
        if (px == 0) continue;
        tu_random_image(&img, w, h, i % 3, r);
        TU_OK(patina_image_to_grey(g + (size_t)i * px, &img));
        patina_image_release(&img);
        if (i % 4 == 3)
            for (size_t p = 0; p < px; p++) g[(size_t)i * px + p] &= 0xe0; /* ties */
    }
    return g;
}

/* Compares one variant's output with the reference maps/histograms. */
static void check_variant(int variant, const lbp_conf_t *c, const uint8_t *g, int w, int h, int n,
                          const patina_codemap_t *ref, const uint32_t *ref_counts, const char *what)
{
    int mw, mh;
    size_t mpx, esz = patina_elem_size(c->code_elem), dim = lbp_dim(c);
    unsigned char *codes;
    uint32_t *counts;
    double ms = 0;
    lbp_map_shape(c, w, h, &mw, &mh);
    mpx = (size_t)mw * (size_t)mh;
    codes = calloc(mpx * (size_t)n * esz + 1, 1);
    counts = calloc(dim * (size_t)n + 1, sizeof *counts);
    TU_OK(patina_gpu_lbp_lab(variant, c, g, w, h, n, codes, counts, 1, &ms, NULL));
    for (int i = 0; i < n; i++) {
        if (variant != PATINA_LBP_LAB_HIST && mpx &&
            memcmp(codes + (size_t)i * mpx * esz, ref[i].data, mpx * esz) != 0) {
            for (size_t p = 0; p < mpx; p++) {
                double a = lbp_map_get(&ref[i], p), b;
                patina_codemap_t got = ref[i];
                got.data = codes + (size_t)i * mpx * esz;
                b = lbp_map_get(&got, p);
                if (!(a == b || (isnan(a) && isnan(b))))
                    fail_msg("%s, %s, %dx%d image %d of %d: code at (%zu,%zu) gpu %.17g, reference %.17g",
                             what, patina_gpu_lbp_lab_name(variant), w, h, i, n, p % (size_t)mw,
                             p / (size_t)mw, b, a);
            }
        }
        if ((variant == PATINA_LBP_LAB_HIST || variant == PATINA_LBP_LAB_CODES) &&
            memcmp(counts + (size_t)i * dim, ref_counts + (size_t)i * dim, dim * sizeof *counts) != 0) {
            for (size_t b = 0; b < dim; b++)
                if (counts[(size_t)i * dim + b] != ref_counts[(size_t)i * dim + b])
                    fail_msg("%s, %s, %dx%d image %d of %d: bin %zu gpu %u, reference %u", what,
                             patina_gpu_lbp_lab_name(variant), w, h, i, n, b,
                             counts[(size_t)i * dim + b], ref_counts[(size_t)i * dim + b]);
        }
    }
    free(codes);
    free(counts);
}

static void run_case(const lbp_conf_t *c, int w, int h, int n, int use_fast, tu_rng_t *r,
                     const char *what)
{
    uint8_t *g = batch(w, h, n, r);
    patina_codemap_t *ref = calloc((size_t)n, sizeof *ref);
    uint32_t *ref_counts = calloc(lbp_dim(c) * (size_t)n, sizeof *ref_counts);
    size_t px = (size_t)w * (size_t)h;
    int v;
    for (int i = 0; i < n; i++) {
        if (use_fast)
            TU_OK(lbp_fast_codes(&ref[i], c, g + (size_t)i * px, w, h, (size_t)w, NULL));
        else
            TU_OK(lbp_ref_codes(&ref[i], c, g + (size_t)i * px, w, h, (size_t)w));
        lbp_hist_counts(ref_counts + (size_t)i * lbp_dim(c), c, &ref[i]);
    }
    for (v = 0; v < PATINA_LBP_LAB_COUNT; v++) {
        if (c->kind == LBP_KIND_CIRCULAR && v <= PATINA_LBP_LAB_SHARED32) continue;
        if (v <= PATINA_LBP_LAB_SHARED32 && (w < 3 || h < 3)) continue; /* nothing to launch */
        check_variant(v, c, g, w, h, n, ref, ref_counts, what);
    }
    for (int i = 0; i < n; i++) patina_codemap_release(&ref[i]);
    free(ref);
    free(ref_counts);
    free(g);
}

static void test_3x3_kinds(void **state)
{
    static const int sizes[][3] = {
        /* w, h, batch */
        {3, 3, 1}, {4, 5, 2}, {17, 5, 3}, {33, 34, 1}, {256, 256, 2}, {1000, 37, 3},
        {513, 300, 1}, {530, 67, 8}, {1029, 131, 2}, {2, 9, 1},
    };
    const lbp_conf_t confs[] = {
        mkconf(LBP_KIND_LBP8, 8, 1, 0, LBP_MAP_NONE, "1x1", 0.9),
        mkconf(LBP_KIND_TLBAP, 8, 1, 0, LBP_MAP_NONE, "1x1", 0.9),
        mkconf(LBP_KIND_TLBAP, 8, 1, 0, LBP_MAP_U2, "3x2", 0.37),
        mkconf(LBP_KIND_LANADP, 8, 1, 0, LBP_MAP_NONE, "1x1", 0.9),
        mkconf(LBP_KIND_LANADP, 8, 1, 0, LBP_MAP_RIU2, "4x5", 0.9),
        mkconf(LBP_KIND_LBP8, 8, 1, 0, LBP_MAP_RI, "16x16", 0.9),
        mkconf(LBP_KIND_LBP8, 8, 1, 0, LBP_MAP_NONE, "64x64", 0.9), /* global-memory histogram */
        mkconf(LBP_KIND_TLBAP, 8, 1, 0, LBP_MAP_NONE, "1x1", 0.37), /* k_fast4: threshold table */
        mkconf(LBP_KIND_TLBAP, 8, 1, 0, LBP_MAP_RIU2, "1x1", 0.5),  /* k_fast4: threshold fma */
    };
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 42);
    for (size_t k = 0; k < sizeof confs / sizeof confs[0]; k++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            run_case(&confs[k], sizes[s][0], sizes[s][1], sizes[s][2], 0, &r, "3x3");
    /* one large batch of 1024^2 images, fast CPU path as the reference
     * (fast = reference is tests/test_lbp.c) */
    run_case(&confs[3], 1024, 1024, 3, 1, &r, "3x3 1024^2");
    run_case(&confs[1], 1031, 1029, 2, 1, &r, "3x3 1031x1029");
}

/* Every instance of the histogram kernels (PATINA_LBP_KERNEL: the default,
 * k_fast4's wide layout for whole-image histograms; "narrow", its 4-warp
 * blocks; k_fast4 with 6 or 3 rows in flight, the old k_fast3, k_prod3 for
 * grids) on whole-image histograms and grids of cells, with and without code
 * maps (the lab variants), whatever the default picks for each kind. */
static void test_fast_instances(void **state)
{
    static const char *const kernels[] = {"default", "narrow", "d6", "d3", "fast3", "prod3"};
    static const int sizes[][3] = {{3, 3, 1}, {17, 5, 3}, {530, 67, 8}, {1029, 131, 2}, {1024, 96, 5}, {1030, 515, 3}};
    const lbp_conf_t confs[] = {
        mkconf(LBP_KIND_LBP8, 8, 1, 0, LBP_MAP_NONE, "1x1", 0.9),
        mkconf(LBP_KIND_TLBAP, 8, 1, 0, LBP_MAP_U2, "1x1", 0.5),   /* threshold fma */
        mkconf(LBP_KIND_TLBAP, 8, 1, 0, LBP_MAP_NONE, "1x1", 0.37), /* threshold table */
        mkconf(LBP_KIND_LANADP, 8, 1, 0, LBP_MAP_RIU2, "1x1", 0.9),
        /* grids: k_fast4's cell path where cells are >= 16 columns wide
         * (many cells per 512-column strip, cells of exactly 16, a lane
         * across every border), k_prod3 otherwise */
        mkconf(LBP_KIND_LBP8, 8, 1, 0, LBP_MAP_NONE, "4x4", 0.9),
        mkconf(LBP_KIND_LBP8, 8, 1, 0, LBP_MAP_U2, "2x30", 0.9),
        mkconf(LBP_KIND_TLBAP, 8, 1, 0, LBP_MAP_RIU2, "3x5", 0.5),
        mkconf(LBP_KIND_TLBAP, 8, 1, 0, LBP_MAP_NONE, "5x3", 0.37),
        mkconf(LBP_KIND_LANADP, 8, 1, 0, LBP_MAP_NONE, "1x63", 0.9),
        mkconf(LBP_KIND_LANADP, 8, 1, 0, LBP_MAP_RI, "7x2", 0.9),
    };
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 7);
    for (size_t k = 0; k < sizeof kernels / sizeof kernels[0]; k++) {
        if (k == 0) unsetenv("PATINA_LBP_KERNEL");
        else setenv("PATINA_LBP_KERNEL", kernels[k], 1);
        for (size_t c = 0; c < sizeof confs / sizeof confs[0]; c++)
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
                run_case(&confs[c], sizes[s][0], sizes[s][1], sizes[s][2], 0, &r, kernels[k]);
    }
    unsetenv("PATINA_LBP_KERNEL");
    /* the wide layout's groups across images: 400 images of 3 strips and
     * 7-13 bands, ~4 groups per block, so that each histogram half holds
     * several images in turn (fast CPU path as the reference) */
    run_case(&confs[0], 1030, 200, 400, 1, &r, "default, groups across images");
    run_case(&confs[3], 1030, 200, 400, 1, &r, "default, groups across images");
}

/* Circular LBP: P = 8, R = 1 runs on k_circ8 (every method and mapping, grids
 * whose histograms take one copy per lane, one per block or global memory),
 * the other configurations on k_circ; the whole test runs again with
 * PATINA_LBP_KERNEL=circ (k_circ for everything). Images 3, 7, ... of a
 * batch have 8 grey levels (flat areas: samples equal to the centre, where
 * the interpolation's last bit decides). */
static void test_circular(void **state)
{
    static const int sizes[][3] = {{1, 1, 1}, {2, 2, 3}, {3, 3, 1}, {1, 17, 2}, {37, 29, 2},
                                   {256, 256, 1}, {130, 67, 4}, {300, 261, 4}, {129, 1, 2}};
    const lbp_conf_t confs[] = {
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_DEFAULT, LBP_MAP_NONE, "1x1", 0),
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_UNIFORM, LBP_MAP_NONE, "2x2", 0),
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_VAR, LBP_MAP_NONE, "1x1", 0),
        mkconf(LBP_KIND_CIRCULAR, 16, 2, LBP_M_NRI, LBP_MAP_NONE, "3x1", 0),
        mkconf(LBP_KIND_CIRCULAR, 16, 2, LBP_M_DEFAULT, LBP_MAP_NONE, "1x1", 0), /* 65536 bins: global */
        mkconf(LBP_KIND_CIRCULAR, 24, 3, LBP_M_UNIFORM, LBP_MAP_NONE, "1x1", 0),
        mkconf(LBP_KIND_CIRCULAR, 8, 1.5, LBP_M_ROR, LBP_MAP_NONE, "1x1", 0),
        mkconf(LBP_KIND_CIRCULAR, 12, 2.7, LBP_M_VAR, LBP_MAP_NONE, "2x2", 0),
        mkconf(LBP_KIND_CIRCULAR, 32, 3, LBP_M_DEFAULT, LBP_MAP_U2, "1x1", 0),
        mkconf(LBP_KIND_CIRCULAR, 20, 2.2, LBP_M_ROR, LBP_MAP_RIU2, "1x1", 0),
        mkconf(LBP_KIND_CIRCULAR, 6, 9.5, LBP_M_VAR, LBP_MAP_NONE, "1x1", 0),  /* halo > 8: global reads */
        mkconf(LBP_KIND_CIRCULAR, 8, 7.0, LBP_M_DEFAULT, LBP_MAP_NONE, "1x1", 0), /* halo exactly 8 */
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_ROR, LBP_MAP_NONE, "3x2", 0),
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_NRI, LBP_MAP_NONE, "1x1", 0),
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_DEFAULT, LBP_MAP_U2, "2x3", 0),
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_DEFAULT, LBP_MAP_RIU2, "1x1", 0),
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_DEFAULT, LBP_MAP_NONE, "4x4", 0),   /* one copy per block */
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_DEFAULT, LBP_MAP_NONE, "16x16", 0), /* global memory */
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_VAR, LBP_MAP_NONE, "2x2", 0),
    };
    static const char *const kernels[] = {NULL, "circ"};
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 43);
    for (size_t kv = 0; kv < 2; kv++) {
        if (kernels[kv]) setenv("PATINA_LBP_KERNEL", kernels[kv], 1);
        for (size_t k = 0; k < sizeof confs / sizeof confs[0]; k++)
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
                run_case(&confs[k], sizes[s][0], sizes[s][1], sizes[s][2], 0, &r, "circular");
    }
    unsetenv("PATINA_LBP_KERNEL");
    run_case(&confs[1], 1024, 1024, 4, 1, &r, "circular 1024^2");
    run_case(&confs[0], 1031, 1029, 4, 1, &r, "circular 1031x1029");
}

/* The families: device=gpu gives the bytes of device=cpu. */
static void test_families(void **state)
{
    static const char *const specs[] = {
        "lbp", "lbp:P=8,R=1,method=uniform,grid=4x4,norm=counts", "lbp:P=16,R=2,method=var",
        "lbp:P=24,R=3,method=nri_uniform", "lbp8", "lbp8:mapping=u2,grid=2x3,norm=counts",
        "tlbap:th=0.9", "tlbap:th=0.5,mapping=riu2", "lanadp", "lanadp:grid=3x3,distance=l1",
    };
    static const int sizes[][2] = {{1, 1}, {2, 2}, {3, 3}, {1, 40}, {40, 1}, {97, 61}, {640, 480}, {33, 1025}};
    patina_context_t *ctx;
    patina_image_t imgs[8];
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 44);
    TU_OK(patina_context_new(&ctx, NULL));
    for (int i = 0; i < 8; i++) tu_random_image(&imgs[i], sizes[i][0], sizes[i][1], i % 4, &r);
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        patina_extractor_t *ex;
        size_t bytes;
        unsigned char *a, *b;
        patina_status sa[8], sb[8];
        TU_OK(patina_extractor_new(&ex, specs[s]));
        assert_true(patina_extractor_has_device(ex, PATINA_DEVICE_GPU));
        bytes = patina_extractor_bytes(ex);
        a = malloc(8 * bytes);
        b = malloc(8 * bytes);
        TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, a, imgs, 8, sa));
        TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_GPU, b, imgs, 8, sb));
        for (int i = 0; i < 8; i++) {
            assert_int_equal(sa[i], PATINA_OK);
            assert_int_equal(sb[i], PATINA_OK);
            if (memcmp(a + (size_t)i * bytes, b + (size_t)i * bytes, bytes) != 0)
                fail_msg("%s: image %dx%d: gpu descriptor differs from cpu", specs[s], sizes[i][0],
                         sizes[i][1]);
        }
        free(a);
        free(b);
        patina_extractor_free(ex);
    }
    for (int i = 0; i < 8; i++) patina_image_release(&imgs[i]);
    patina_context_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_3x3_kinds),
        cmocka_unit_test(test_fast_instances),
        cmocka_unit_test(test_circular),
        cmocka_unit_test(test_families),
    };
    tu_require_gpu();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
