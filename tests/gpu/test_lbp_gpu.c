/* The LBP family's production GPU path against the C reference, byte for
 * byte (lbp, lbp8, tlbap, lanadp):
 *   - the kernels on grey batches (patina_gpu__lbp_grey): every option family
 *     (kinds, TLBAP thresholds with and without the fp16 fma, mappings,
 *     circular methods and geometries, var), whole-image histograms (the wide
 *     layout, and the 4-warp layout the dispatcher takes on GPUs with less
 *     shared memory per block), grids of cells (k_fast4's cells and k_prod3's
 *     narrow ones), code maps with and without histograms, at sizes from 1x1
 *     to 1031x1029 (most not multiples of a block or of 16) and batches of
 *     1-400 images;
 *   - the batched family path (patina_gpu_lbp) on RGB images: mixed sizes in
 *     one call, pageable, pinned and device input with padded strides,
 *     invalid and empty images, many batches, and images larger than a batch
 *     (streamed in row chunks);
 *   - the registered families through patina_extract_batch (GPU = CPU), and
 *     real photographs when $PATINA_SAMPLES (or PATINA_SAMPLES_DIR) has some.
 * The variants that the dispatcher does not pick are the lab's (lab/lbp).
 * Label `gpu`: exits 77 (skipped) without a usable GPU. PATINA_TEST_QUICK=1
 * runs a smaller set (for compute-sanitizer), PATINA_TEST_QUICK=2 a tiny one
 * (racecheck follows every shared-memory access). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "features/lbp.h"
#include "gpu/gpu.h"
#include "testutil.h"

static patina_gpu_t *G;
static int QUICK;

/* Quick modes: images of more pixels than this are left out. */
static int too_big(int w, int h)
{
    return QUICK > 1 && (size_t)w * (size_t)h > 40000u;
}

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

static patina_gpu_lbp_conf_t gconf(const lbp_conf_t *c)
{
    patina_gpu_lbp_conf_t g;
    TU_OK(lbp_gpu_conf(&g, c));
    return g;
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
            for (size_t p = 0; p < px; p++) g[(size_t)i * px + p] &= 0xe0; /* ties, flat areas */
    }
    return g;
}

/* The first mismatching code of image i, for the message. */
static void fail_codes(const patina_codemap_t *ref, const unsigned char *got, int mw, const char *what,
                       const char *mode, int w, int h, int i, int n)
{
    size_t mpx = (size_t)ref->width * (size_t)ref->height;
    for (size_t p = 0; p < mpx; p++) {
        patina_codemap_t g = *ref;
        double a = lbp_map_get(ref, p), b;
        g.data = (void *)got;
        b = lbp_map_get(&g, p);
        if (!(a == b || (isnan(a) && isnan(b))))
            fail_msg("%s, %s, %dx%d image %d of %d: code at (%zu,%zu) gpu %.17g, reference %.17g", what, mode,
                     w, h, i, n, p % (size_t)mw, p / (size_t)mw, b, a);
    }
}

static void fail_counts(const uint32_t *got, const uint32_t *want, size_t dim, const char *what, const char *mode,
                        int w, int h, int i, int n)
{
    for (size_t b = 0; b < dim; b++)
        if (got[b] != want[b])
            fail_msg("%s, %s, %dx%d image %d of %d: bin %zu gpu %u, reference %u", what, mode, w, h, i, n, b,
                     got[b], want[b]);
}

/* The grey entry on one batch in three modes (histograms only, code maps
 * and histograms, code maps only) against the reference's maps and counts
 * (use_fast: the fast CPU path as the reference, for large images; it is
 * the C reference's equal by tests/test_lbp.c). */
static void run_grey(const lbp_conf_t *c, int w, int h, int n, int use_fast, tu_rng_t *r, const char *what)
{
    static const char *const modes[3] = {"histograms", "codes + histograms", "codes only"};
    const patina_gpu_lbp_conf_t gc = gconf(c);
    const size_t dim = lbp_dim(c), px = (size_t)w * (size_t)h, esz = patina_elem_size(c->code_elem);
    uint8_t *g = batch(w, h, n, r);
    patina_codemap_t *ref = calloc((size_t)n, sizeof *ref);
    uint32_t *ref_counts = calloc(dim * (size_t)n, sizeof *ref_counts);
    int mw, mh;
    lbp_map_shape(c, w, h, &mw, &mh);
    const size_t mpx = (size_t)mw * (size_t)mh;
    unsigned char *codes = malloc(mpx * (size_t)n * esz + 1);
    uint32_t *counts = malloc(dim * (size_t)n * sizeof *counts + 1);
    for (int i = 0; i < n; i++) {
        if (use_fast)
            TU_OK(lbp_fast_codes(&ref[i], c, g + (size_t)i * px, w, h, (size_t)w, NULL));
        else
            TU_OK(lbp_ref_codes(&ref[i], c, g + (size_t)i * px, w, h, (size_t)w));
        lbp_hist_counts(ref_counts + (size_t)i * dim, c, &ref[i]);
    }
    for (int m = 0; m < 3; m++) {
        const int want_codes = m > 0, want_counts = m < 2;
        memset(codes, 0xee, mpx * (size_t)n * esz);
        memset(counts, 0xee, dim * (size_t)n * sizeof *counts);
        TU_OK(patina_gpu__lbp_grey(G, &gc, g, w, h, n, want_codes ? codes : NULL, want_counts ? counts : NULL,
                                   NULL));
        for (int i = 0; i < n; i++) {
            if (want_codes && mpx && memcmp(codes + (size_t)i * mpx * esz, ref[i].data, mpx * esz) != 0)
                fail_codes(&ref[i], codes + (size_t)i * mpx * esz, mw, what, modes[m], w, h, i, n);
            if (want_counts && memcmp(counts + (size_t)i * dim, ref_counts + (size_t)i * dim, dim * 4) != 0)
                fail_counts(counts + (size_t)i * dim, ref_counts + (size_t)i * dim, dim, what, modes[m], w, h, i,
                            n);
        }
    }
    for (int i = 0; i < n; i++) patina_codemap_release(&ref[i]);
    free(ref);
    free(ref_counts);
    free(codes);
    free(counts);
    free(g);
}

static const int SIZES_3X3[][3] = {
    /* w, h, batch */
    {3, 3, 1},     {4, 5, 2},   {17, 5, 3},   {33, 34, 1},  {256, 256, 2}, {1000, 37, 3},
    {513, 300, 1}, {530, 67, 8}, {1029, 131, 2}, {2, 9, 1},  {1024, 96, 5}, {1030, 515, 3},
};
#define N3 (sizeof SIZES_3X3 / sizeof SIZES_3X3[0])

static void run_sizes(const lbp_conf_t *c, const char *what, tu_rng_t *r)
{
    for (size_t s = 0; s < N3; s++) {
        if ((QUICK && (s % 3) != 0) || too_big(SIZES_3X3[s][0], SIZES_3X3[s][1])) continue;
        run_grey(c, SIZES_3X3[s][0], SIZES_3X3[s][1], SIZES_3X3[s][2], 0, r, what);
    }
}

/* 3x3 kinds, whole-image histograms: k_fast4's wide layout (H100/H200),
 * then its 4-warp layout (narrow); code maps alone: k_prod3. */
static void test_3x3_whole(void **state)
{
    const lbp_conf_t confs[] = {
        mkconf(LBP_KIND_LBP8, 8, 1, 0, LBP_MAP_NONE, "1x1", 0.9),
        mkconf(LBP_KIND_LBP8, 8, 1, 0, LBP_MAP_RI, "1x1", 0.9),
        mkconf(LBP_KIND_TLBAP, 8, 1, 0, LBP_MAP_NONE, "1x1", 0.9),  /* threshold as an fp16 fma */
        mkconf(LBP_KIND_TLBAP, 8, 1, 0, LBP_MAP_U2, "1x1", 0.5),    /* fma */
        mkconf(LBP_KIND_TLBAP, 8, 1, 0, LBP_MAP_NONE, "1x1", 0.37), /* threshold table */
        mkconf(LBP_KIND_LANADP, 8, 1, 0, LBP_MAP_NONE, "1x1", 0.9),
        mkconf(LBP_KIND_LANADP, 8, 1, 0, LBP_MAP_RIU2, "1x1", 0.9),
    };
    const char *layouts[2] = {"default layout", "4-warp layout"};
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 42);
    for (int narrow = 0; narrow < 2; narrow++) {
        TU_OK(patina_gpu__lbp_set_caps(G, 0, 0, narrow));
        for (size_t k = 0; k < sizeof confs / sizeof confs[0]; k++) run_sizes(&confs[k], layouts[narrow], &r);
        if (!QUICK) {
            /* large images (fast CPU path as the reference) */
            run_grey(&confs[5], 1024, 1024, 3, 1, &r, layouts[narrow]);
            run_grey(&confs[2], 1031, 1029, 2, 1, &r, layouts[narrow]);
            /* the wide layout's groups across images: 400 images of 3 strips
             * and 7-13 bands, ~4 groups per block, so that each histogram
             * half holds several images in turn */
            run_grey(&confs[0], 1030, 200, 400, 1, &r, layouts[narrow]);
            run_grey(&confs[4], 1030, 200, 400, 1, &r, layouts[narrow]);
            run_grey(&confs[5], 1030, 200, 400, 1, &r, layouts[narrow]);
        }
    }
    TU_OK(patina_gpu__lbp_set_caps(G, 0, 0, 0));
    {
        /* the timed entry (launches queued behind k_busy) gives the same counts */
        const patina_gpu_lbp_conf_t gc = gconf(&confs[0]);
        const int w = QUICK > 1 ? 40 : 300, h = QUICK > 1 ? 30 : 200;
        uint8_t *g = batch(w, h, 3, &r);
        uint32_t a[3 * 256], b[3 * 256];
        patina_gpu_lbp_timing_t tm = {2, 0, 0};
        TU_OK(patina_gpu__lbp_grey(G, &gc, g, w, h, 3, NULL, a, NULL));
        TU_OK(patina_gpu__lbp_grey(G, &gc, g, w, h, 3, NULL, b, &tm));
        assert_memory_equal(a, b, sizeof a);
        assert_true(tm.ms_alone > 0 && tm.ms_stream > 0);
        free(g);
    }
}

/* 3x3 kinds, grids of cells: k_fast4's cell instances where every cell is at
 * least 16 columns wide (many cells per 512-column strip, cells of exactly
 * 16, a lane across every border), k_prod3 for narrower cells (its
 * histogram copies per warp, per block, or in global memory). */
static void test_3x3_grids(void **state)
{
    const lbp_conf_t confs[] = {
        mkconf(LBP_KIND_LBP8, 8, 1, 0, LBP_MAP_NONE, "4x4", 0.9),
        mkconf(LBP_KIND_LBP8, 8, 1, 0, LBP_MAP_U2, "2x30", 0.9),
        mkconf(LBP_KIND_TLBAP, 8, 1, 0, LBP_MAP_RIU2, "3x5", 0.5),
        mkconf(LBP_KIND_TLBAP, 8, 1, 0, LBP_MAP_NONE, "5x3", 0.37),
        mkconf(LBP_KIND_TLBAP, 8, 1, 0, LBP_MAP_U2, "3x2", 0.37),
        mkconf(LBP_KIND_LANADP, 8, 1, 0, LBP_MAP_NONE, "1x63", 0.9),
        mkconf(LBP_KIND_LANADP, 8, 1, 0, LBP_MAP_RI, "7x2", 0.9),
        mkconf(LBP_KIND_LANADP, 8, 1, 0, LBP_MAP_RIU2, "4x5", 0.9),
        mkconf(LBP_KIND_LBP8, 8, 1, 0, LBP_MAP_RI, "16x16", 0.9),
        mkconf(LBP_KIND_LBP8, 8, 1, 0, LBP_MAP_NONE, "64x64", 0.9), /* k_prod3, global-memory histogram */
    };
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 7);
    for (size_t k = 0; k < sizeof confs / sizeof confs[0]; k++) run_sizes(&confs[k], "grid", &r);
    if (!QUICK) run_grey(&confs[0], 1024, 1024, 2, 1, &r, "grid 1024^2");
}

/* Circular LBP: P = 8, R = 1 runs on k_circ8 (every method and mapping,
 * grids whose histograms take one copy per lane, one per block or global
 * memory; var too), the other configurations on k_circ (halo staged in
 * shared memory or read from global memory, var or codes). Images 3, 7, ...
 * of a batch have
 * 8 grey levels (flat areas: samples equal to the centre, where the
 * interpolation's last bit decides). */
static void test_circular(void **state)
{
    static const int sizes[][3] = {{1, 1, 1}, {2, 2, 3}, {3, 3, 1}, {1, 17, 2}, {37, 29, 2},
                                   {256, 256, 1}, {130, 67, 4}, {300, 261, 4}, {129, 1, 2}};
    const lbp_conf_t confs[] = {
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_DEFAULT, LBP_MAP_NONE, "1x1", 0),
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_UNIFORM, LBP_MAP_NONE, "2x2", 0),
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_VAR, LBP_MAP_NONE, "1x1", 0),
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_ROR, LBP_MAP_NONE, "3x2", 0),
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_NRI, LBP_MAP_NONE, "1x1", 0),
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_DEFAULT, LBP_MAP_U2, "2x3", 0),
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_DEFAULT, LBP_MAP_RIU2, "1x1", 0),
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_DEFAULT, LBP_MAP_NONE, "4x4", 0),   /* one copy per block */
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_DEFAULT, LBP_MAP_NONE, "16x16", 0), /* global memory */
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_VAR, LBP_MAP_NONE, "2x2", 0),
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_VAR, LBP_MAP_NONE, "16x16", 0),   /* var, one copy per block */
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_VAR, LBP_MAP_NONE, "64x64", 0),   /* var, global memory */
        mkconf(LBP_KIND_CIRCULAR, 16, 2, LBP_M_NRI, LBP_MAP_NONE, "3x1", 0),
        mkconf(LBP_KIND_CIRCULAR, 16, 2, LBP_M_DEFAULT, LBP_MAP_NONE, "1x1", 0), /* 65536 bins: global */
        mkconf(LBP_KIND_CIRCULAR, 24, 3, LBP_M_UNIFORM, LBP_MAP_NONE, "1x1", 0),
        mkconf(LBP_KIND_CIRCULAR, 8, 1.5, LBP_M_ROR, LBP_MAP_NONE, "1x1", 0),
        mkconf(LBP_KIND_CIRCULAR, 12, 2.7, LBP_M_VAR, LBP_MAP_NONE, "2x2", 0),
        mkconf(LBP_KIND_CIRCULAR, 32, 3, LBP_M_DEFAULT, LBP_MAP_U2, "1x1", 0),  /* codes past any table */
        mkconf(LBP_KIND_CIRCULAR, 20, 2.2, LBP_M_ROR, LBP_MAP_RIU2, "1x1", 0),
        mkconf(LBP_KIND_CIRCULAR, 6, 9.5, LBP_M_VAR, LBP_MAP_NONE, "1x1", 0),    /* halo > 8: global reads */
        mkconf(LBP_KIND_CIRCULAR, 8, 7.0, LBP_M_DEFAULT, LBP_MAP_NONE, "1x1", 0), /* halo exactly 8 */
        mkconf(LBP_KIND_CIRCULAR, 12, 8.5, LBP_M_UNIFORM, LBP_MAP_NONE, "2x1", 0), /* halo 10, codes */
    };
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 43);
    for (size_t k = 0; k < sizeof confs / sizeof confs[0]; k++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            if ((QUICK && (s % 3) != 1) || too_big(sizes[s][0], sizes[s][1])) continue;
            run_grey(&confs[k], sizes[s][0], sizes[s][1], sizes[s][2], 0, &r, "circular");
        }
    if (QUICK) return;
    run_grey(&confs[1], 1024, 1024, 4, 1, &r, "circular 1024^2");
    run_grey(&confs[0], 1031, 1029, 4, 1, &r, "circular 1031x1029");
    run_grey(&confs[14], 640, 480, 2, 1, &r, "circular P=24 640x480");
}

/* ----------------------------------------------------- the batched path */

/* The CPU's counts of RGB image img (the fast path, equal to the C
 * reference by tests/test_lbp.c). */
static void cpu_counts(uint32_t *out, const lbp_conf_t *c, const patina_image_t *img)
{
    const size_t px = (size_t)img->width * (size_t)img->height;
    uint8_t *g = malloc(px ? px : 1);
    if (px) TU_OK(patina_image_to_grey(g, img));
    TU_OK(lbp_fast_counts(out, c, g, img->width, img->height, (size_t)img->width, NULL));
    free(g);
}

/* An RGB image with stride 3w + pad in pageable memory, or a copy in pinned
 * (where = 1) or device memory of G (where = 2; *host keeps the pageable
 * original for the reference). */
static void make_image(patina_image_t *img, patina_image_t *host, int w, int h, size_t pad, int where,
                       tu_rng_t *r)
{
    memset(host, 0, sizeof *host);
    host->width = w;
    host->height = h;
    host->stride = 3 * (size_t)w + pad;
    host->data = calloc(host->stride * (size_t)(h > 0 ? h : 1) + 1, 1);
    host->owned = 1;
    if (w > 0 && h > 0) {
        patina_image_t tight;
        tu_random_image(&tight, w, h, (w + h) % 4, r);
        for (int y = 0; y < h; y++)
            memcpy(host->data + (size_t)y * host->stride, tight.data + (size_t)y * tight.stride, 3 * (size_t)w);
        patina_image_release(&tight);
    }
    *img = *host;
    img->owned = 0;
    if (where == 1) {
        img->data = patina_gpu_host_alloc(host->stride * (size_t)h + 1);
        assert_non_null(img->data);
        memcpy(img->data, host->data, host->stride * (size_t)h);
    } else if (where == 2) {
        img->data = patina_gpu__dev_alloc(G, host->stride * (size_t)h + 1);
        assert_non_null(img->data);
        TU_OK(patina_gpu__upload(G, img->data, host->data, host->stride * (size_t)h));
    }
}

static void free_image(patina_image_t *img, patina_image_t *host, int where)
{
    if (where == 1) patina_gpu_host_free(img->data);
    else if (where == 2) patina_gpu__dev_free(G, img->data);
    free(host->data);
}

/* patina_gpu_lbp on n images (host: the pageable originals) against the
 * CPU, image by image; st_want (may be NULL): expected statuses. */
static void check_batch(const lbp_conf_t *c, const patina_image_t *imgs, const patina_image_t *host, size_t n,
                        const patina_status *st_want, const char *what)
{
    const patina_gpu_lbp_conf_t gc = gconf(c);
    const size_t dim = lbp_dim(c);
    uint32_t *got = malloc(n * dim * sizeof *got + 1), *want = malloc(dim * sizeof *want);
    patina_status *st = malloc(n * sizeof *st + 1);
    memset(got, 0xee, n * dim * sizeof *got);
    TU_OK(patina_gpu_lbp(G, &gc, got, imgs, n, st));
    for (size_t i = 0; i < n; i++) {
        const patina_status sw = st_want ? st_want[i] : PATINA_OK;
        if (st[i] != sw)
            fail_msg("%s: image %zu (%dx%d): status %s, want %s", what, i, host[i].width, host[i].height,
                     patina_status_str(st[i]), patina_status_str(sw));
        if (sw == PATINA_OK) cpu_counts(want, c, &host[i]);
        else memset(want, 0, dim * sizeof *want);
        if (memcmp(got + i * dim, want, dim * sizeof *want) != 0)
            for (size_t b = 0; b < dim; b++)
                if (got[i * dim + b] != want[b])
                    fail_msg("%s: image %zu (%dx%d stride %zu): bin %zu gpu %u, cpu %u", what, i, host[i].width,
                             host[i].height, host[i].stride, b, got[i * dim + b], want[b]);
    }
    free(got);
    free(want);
    free(st);
}

/* Mixed sizes in one call (runs of equal sizes in a random order), padded
 * and odd strides, pageable, pinned and device memory, empty and tiny
 * images; once with the planned capacities, once with batches of at most 5
 * images, once with 256 KiB batches (the larger images then go in row
 * chunks), for each kind. */
static void test_batched(void **state)
{
    static const int sizes[][2] = {{64, 48},   {1, 1},   {2, 7},      {3, 3},   {64, 48},   {97, 61},
                                   {64, 48},   {0, 5},   {1, 40},     {40, 1},  {33, 1025}, {640, 480},
                                   {300, 261}, {97, 61}, {1031, 517}, {64, 48}, {640, 480}, {513, 300}};
    const size_t n = QUICK > 1 ? 10 : sizeof sizes / sizeof sizes[0]; /* tiny: the small ones */
    const lbp_conf_t confs[] = {
        mkconf(LBP_KIND_LBP8, 8, 1, 0, LBP_MAP_NONE, "1x1", 0.9),
        mkconf(LBP_KIND_TLBAP, 8, 1, 0, LBP_MAP_RIU2, "1x1", 0.37),
        mkconf(LBP_KIND_LANADP, 8, 1, 0, LBP_MAP_NONE, "3x3", 0.9),
        mkconf(LBP_KIND_LBP8, 8, 1, 0, LBP_MAP_U2, "16x16", 0.9),
        mkconf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_UNIFORM, LBP_MAP_NONE, "1x1", 0),
        mkconf(LBP_KIND_CIRCULAR, 16, 2, LBP_M_VAR, LBP_MAP_NONE, "2x2", 0),
    };
    const size_t caps[3][2] = {{0, 0}, {0, 5}, {QUICK > 1 ? 4096 : 256 << 10, 0}};
    patina_image_t *imgs = calloc(n, sizeof *imgs), *host = calloc(n, sizeof *host);
    int *where = calloc(n, sizeof *where);
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 45);
    for (size_t i = 0; i < n; i++) {
        where[i] = (int)(i % 3);
        make_image(&imgs[i], &host[i], sizes[i][0], sizes[i][1], (i % 4) * 5 + (i % 2), where[i], &r);
    }
    for (size_t k = 0; k < sizeof confs / sizeof confs[0]; k++)
        for (int cp = 0; cp < 3; cp++) {
            char what[96];
            if ((QUICK && cp == 1) || (QUICK > 1 && k % 2)) continue;
            snprintf(what, sizeof what, "batched, conf %zu, caps %zu B / %zu images", k, caps[cp][0], caps[cp][1]);
            TU_OK(patina_gpu__lbp_set_caps(G, caps[cp][0], caps[cp][1], 0));
            check_batch(&confs[k], imgs, host, n, NULL, what);
            /* one image alone, the first and the last */
            check_batch(&confs[k], imgs, host, 1, NULL, what);
            check_batch(&confs[k], imgs + n - 1, host + n - 1, 1, NULL, what);
        }
    TU_OK(patina_gpu__lbp_set_caps(G, 0, 0, 0));
    for (size_t i = 0; i < n; i++) free_image(&imgs[i], &host[i], where[i]);
    free(imgs);
    free(host);
    free(where);
}

/* Many equal images: several batches on every stream (80 images of 1024^2
 * with the planned 64 MiB of RGB per batch; quick: 12 of 320x240 in 1 MiB
 * batches), then the same images one per batch. */
static void test_many(void **state)
{
    const size_t n = QUICK ? (QUICK > 1 ? 6 : 12) : 80;
    const int s = QUICK ? (QUICK > 1 ? 64 : 320) : 1024, hs = QUICK ? (QUICK > 1 ? 48 : 240) : 1024;
    const lbp_conf_t c = mkconf(LBP_KIND_LBP8, 8, 1, 0, LBP_MAP_NONE, "1x1", 0.9);
    patina_image_t *imgs = calloc(n, sizeof *imgs), *host = calloc(n, sizeof *host);
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 46);
    for (size_t i = 0; i < n; i++) make_image(&imgs[i], &host[i], s, hs, 0, 0, &r);
    TU_OK(patina_gpu__lbp_set_caps(G, QUICK ? (QUICK > 1 ? 16u << 10 : 1u << 20) : 0, 0, 0));
    check_batch(&c, imgs, host, n, NULL, "many images");
    TU_OK(patina_gpu__lbp_set_caps(G, 0, 1, 0));
    check_batch(&c, imgs, host, QUICK ? 4 : 12, NULL, "one image per batch");
    TU_OK(patina_gpu__lbp_set_caps(G, 0, 0, 0));
    for (size_t i = 0; i < n; i++) free_image(&imgs[i], &host[i], 0);
    free(imgs);
    free(host);
}

/* Invalid images get PATINA_E_INVALID and zeros, their neighbours their
 * counts; a bad configuration is refused. */
static void test_invalid(void **state)
{
    const lbp_conf_t c = mkconf(LBP_KIND_TLBAP, 8, 1, 0, LBP_MAP_NONE, "2x2", 0.9);
    patina_gpu_lbp_conf_t bad = gconf(&c);
    patina_image_t imgs[5], host[5];
    patina_status want[5] = {PATINA_OK, PATINA_E_INVALID, PATINA_OK, PATINA_E_INVALID, PATINA_E_INVALID};
    uint32_t counts[4 * 256];
    uint8_t *keep;
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 47);
    for (int i = 0; i < 5; i++) make_image(&imgs[i], &host[i], 50 + i, 40, 0, 0, &r);
    keep = host[1].data;
    imgs[1].data = host[1].data = NULL;          /* no pixels */
    imgs[3].stride = host[3].stride = 10;        /* stride < 3w */
    imgs[4].width = host[4].width = -1;          /* negative width */
    check_batch(&c, imgs, host, 5, want, "invalid images");
    bad.dim = 7;
    assert_int_equal(patina_gpu_lbp(G, &bad, counts, imgs, 1, NULL), PATINA_E_INVALID);
    bad = gconf(&c);
    bad.kind = 9;
    assert_int_equal(patina_gpu_lbp(G, &bad, counts, imgs, 1, NULL), PATINA_E_INVALID);
    host[1].data = keep;
    for (int i = 0; i < 5; i++) free(host[i].data);
}

/* The families: device=gpu gives the bytes of device=cpu (l1 norms finished
 * on the host, u32 counts as they are). */
static void test_families(void **state)
{
    static const char *const specs[] = {
        "lbp", "lbp:P=8,R=1,method=uniform,grid=4x4,norm=counts", "lbp:P=16,R=2,method=var",
        "lbp:P=24,R=3,method=nri_uniform", "lbp8", "lbp8:mapping=u2,grid=2x3,norm=counts",
        "tlbap:th=0.9", "tlbap:th=0.5,mapping=riu2", "lanadp", "lanadp:grid=3x3,distance=l1",
    };
    static const int sizes[][2] = {{1, 1}, {2, 2}, {3, 3}, {1, 40}, {40, 1}, {97, 61}, {640, 480}, {33, 1025}};
    const int n = QUICK > 1 ? 6 : 8; /* tiny: up to 97x61 */
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
        TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, a, imgs, (size_t)n, sa));
        TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_GPU, b, imgs, (size_t)n, sb));
        for (int i = 0; i < n; i++) {
            assert_int_equal(sa[i], PATINA_OK);
            assert_int_equal(sb[i], PATINA_OK);
            if (memcmp(a + (size_t)i * bytes, b + (size_t)i * bytes, bytes) != 0)
                fail_msg("%s: image %dx%d: gpu descriptor differs from cpu", specs[s], sizes[i][0],
                         sizes[i][1]);
        }
        /* no status array */
        TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_GPU, b, imgs, (size_t)n, NULL));
        assert_memory_equal(a, b, (size_t)n * bytes);
        free(a);
        free(b);
        patina_extractor_free(ex);
    }
    for (int i = 0; i < 8; i++) patina_image_release(&imgs[i]);
    patina_context_free(ctx);
}

/* Real photographs, if any are present: every kind through the families. */
static void test_samples(void **state)
{
    static const char *const specs[] = {"lbp8", "tlbap", "lanadp:grid=4x4", "lbp:method=uniform",
                                        "lbp:P=16,R=2,method=uniform,norm=counts"};
    const char *dir = getenv("PATINA_SAMPLES");
    const size_t max = QUICK ? 4 : 40;
    char **files = NULL;
    size_t nf, n = 0;
    patina_image_t *imgs;
    patina_context_t *ctx;
    (void)state;
    if (QUICK > 1) {
        printf("  samples: left out in the tiny mode (photographs are large)\n");
        return;
    }
    if (!dir || !*dir) dir = PATINA_SAMPLES_DIR;
    nf = tu_list_files(dir, "jpg,jpeg,png", &files);
    if (nf == 0) {
        printf("  samples: no photographs under '%s' (set PATINA_SAMPLES); skipped\n", dir);
        tu_free_list(files, nf);
        return;
    }
    imgs = calloc(nf < max ? nf : max, sizeof *imgs);
    for (size_t i = 0; i < nf && n < max; i++)
        if (patina_image_load(&imgs[n], files[i], NULL) == PATINA_OK) n++;
    printf("  samples: %zu photographs from '%s'\n", n, dir);
    TU_OK(patina_context_new(&ctx, NULL));
    for (size_t s = 0; s < sizeof specs / sizeof specs[0] && n; s++) {
        patina_extractor_t *ex;
        size_t bytes;
        unsigned char *a, *b;
        TU_OK(patina_extractor_new(&ex, specs[s]));
        bytes = patina_extractor_bytes(ex);
        a = malloc(n * bytes);
        b = malloc(n * bytes);
        TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, a, imgs, n, NULL));
        TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_GPU, b, imgs, n, NULL));
        for (size_t i = 0; i < n; i++)
            if (memcmp(a + i * bytes, b + i * bytes, bytes) != 0)
                fail_msg("%s: photograph %zu (%dx%d): gpu descriptor differs from cpu", specs[s], i,
                         imgs[i].width, imgs[i].height);
        free(a);
        free(b);
        patina_extractor_free(ex);
    }
    patina_context_free(ctx);
    for (size_t i = 0; i < n; i++) patina_image_release(&imgs[i]);
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

int main(void)
{
    const char *q = getenv("PATINA_TEST_QUICK");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_3x3_whole), cmocka_unit_test(test_3x3_grids), cmocka_unit_test(test_circular),
        cmocka_unit_test(test_batched),   cmocka_unit_test(test_many),      cmocka_unit_test(test_invalid),
        cmocka_unit_test(test_families),  cmocka_unit_test(test_samples),
    };
    tu_require_gpu();
    QUICK = q && *q ? atoi(q) : 0;
    return cmocka_run_group_tests(tests, setup, teardown);
}
