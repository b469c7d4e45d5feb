/* CEDD unit tests: each step of docs/cedd-spec.md checked against the
 * spec's own worked examples and definitions, degenerate shapes first.
 * (The comparison with LIRE itself is test_cedd_lire.c.) */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "features/cedd_ref.h"
#include "patina/cedd.h"

static void fill(patina_image_t *img, int w, int h, int r, int g, int b)
{
    int x, y;
    TU_OK(patina_image_init(img, w, h));
    for (y = 0; y < h; y++)
        for (x = 0; x < w; x++) {
            uint8_t *p = img->data + (size_t)y * img->stride + 3 * (size_t)x;
            p[0] = (uint8_t)r;
            p[1] = (uint8_t)g;
            p[2] = (uint8_t)b;
        }
}

static void assert_all_zero(const uint8_t h[PATINA_CEDD_DIM], const char *what)
{
    int i;
    for (i = 0; i < PATINA_CEDD_DIM; i++)
        if (h[i]) fail_msg("%s: bin %d = %d, want all zero", what, i, h[i]);
}

/* ---------------------------------------------------- §11 worked example */

/* Solid #3366cc: mean (51,102,204) -> HSV (219,191,204) -> F10[8] = 0.4+0.6
 * -> F24[19] = 1 -> all blocks non-edge -> only bin 19 = 7 (compact: bin 8). */
static void test_solid_3366cc(void **state)
{
    const int sizes[][2] = {{2, 2}, {10, 7}, {39, 39}, {40, 40}, {64, 64}, {100, 100}, {640, 480}};
    size_t k;
    int hsv[3];
    double f10[10], f24[24];
    (void)state;

    cedd_hsv(hsv, 0x33, 0x66, 0xcc);
    assert_int_equal(hsv[0], 219);
    assert_int_equal(hsv[1], 191);
    assert_int_equal(hsv[2], 204);
    cedd_fuzzy10(f10, hsv[0], hsv[1], hsv[2]);
    assert_true(f10[8] == 1.0);
    cedd_fuzzy24(f24, f10, hsv[1], hsv[2]);
    assert_true(f24[19] == 1.0);

    for (k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        patina_image_t img;
        uint8_t n[PATINA_CEDD_DIM], c[PATINA_CEDD_DIM], want[PATINA_CEDD_DIM] = {0};
        fill(&img, sizes[k][0], sizes[k][1], 0x33, 0x66, 0xcc);
        TU_OK(patina_cedd_extract(n, &img, 0));
        TU_OK(patina_cedd_extract(c, &img, 1));
        want[19] = 7;
        assert_memory_equal(n, want, PATINA_CEDD_DIM);
        want[19] = 0;
        want[8] = 7;
        assert_memory_equal(c, want, PATINA_CEDD_DIM);
        patina_image_release(&img);
    }
}

/* ------------------------------------------------------------------- §6 */

static void test_hsv(void **state)
{
    static const struct { int rgb[3], hsv[3]; } cases[] = {
        {{200, 200, 100}, {60, 127, 200}},   /* r = g = max > b: red branch first */
        {{200, 100, 200}, {299, 127, 200}},  /* r = b = max > g: 359 + 60*(g-b)/d */
        {{100, 200, 200}, {179, 127, 200}},  /* g = b = max > r: green branch */
        {{255, 0, 0}, {0, 255, 255}},
        {{255, 0, 1}, {358, 255, 255}},      /* 359 - 60/255, truncated */
        {{0, 255, 0}, {119, 255, 255}},      /* 119, not 120 */
        {{0, 0, 255}, {239, 255, 255}},      /* 239, not 240 */
        {{0, 0, 0}, {0, 0, 0}},              /* mx == 0: S = 0 */
        {{77, 77, 77}, {0, 0, 77}},          /* mx == mn: H = 0 */
        {{51, 102, 204}, {219, 191, 204}},
        {{1, 2, 3}, {209, 170, 3}},          /* S = trunc(255 - 255*(1/3)) = 170 */
    };
    size_t k;
    (void)state;
    for (k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int hsv[3];
        cedd_hsv(hsv, cases[k].rgb[0], cases[k].rgb[1], cases[k].rgb[2]);
        if (hsv[0] != cases[k].hsv[0] || hsv[1] != cases[k].hsv[1] || hsv[2] != cases[k].hsv[2])
            fail_msg("hsv(%d,%d,%d) = (%d,%d,%d), want (%d,%d,%d)", cases[k].rgb[0],
                     cases[k].rgb[1], cases[k].rgb[2], hsv[0], hsv[1], hsv[2], cases[k].hsv[0],
                     cases[k].hsv[1], cases[k].hsv[2]);
    }
}

/* ------------------------------------------------------------------- §7 */

static void test_trapezoid(void **state)
{
    const double (*t)[4];
    int k;
    (void)state;
    /* exactly 0 at x = d, exactly 1 on [b, c], for every trapezoid in use */
    for (t = cedd_hue_trap, k = 0; k < 8; k++) {
        if (t[k][2] < t[k][3]) assert_true(cedd_trapezoid(t[k][3], t[k][0], t[k][1], t[k][2], t[k][3]) == 0.0);
        assert_true(cedd_trapezoid(t[k][1], t[k][0], t[k][1], t[k][2], t[k][3]) == 1.0);
        assert_true(cedd_trapezoid(t[k][2], t[k][0], t[k][1], t[k][2], t[k][3]) == 1.0);
    }
    for (k = 0; k < 3; k++)
        if (cedd_val_trap[k][2] < cedd_val_trap[k][3])
            assert_true(cedd_trapezoid(cedd_val_trap[k][3], cedd_val_trap[k][0], cedd_val_trap[k][1],
                                       cedd_val_trap[k][2], cedd_val_trap[k][3]) == 0.0);
    assert_true(cedd_trapezoid(188.0, 0, 0, 68, 188) == 0.0);
    assert_true(cedd_trapezoid(75.0, 0, 0, 10, 75) == 0.0);
    /* outside */
    assert_true(cedd_trapezoid(11.0, 0, 0, 5, 10) == 0.0);
    assert_true(cedd_trapezoid(4.0, 5, 10, 35, 50) == 0.0);
    /* rising edge (x-a)/(b-a) */
    assert_true(cedd_trapezoid(7.0, 5, 10, 35, 50) == 2.0 / 5.0);
    /* falling edge in LIRE's form (x-c)/(c-d)+1, which is not (d-x)/(d-c):
     * at x = 9 of (0,0,5,10) it gives 0.19999999999999996, not 0.2 */
    assert_true(cedd_trapezoid(9.0, 0, 0, 5, 10) == 0.19999999999999996);
    assert_true(cedd_trapezoid(9.0, 0, 0, 5, 10) != 0.2);
    assert_true(cedd_trapezoid(39.0, 5, 10, 35, 50) == (39.0 - 35.0) / (35.0 - 50.0) + 1.0);
    assert_true(cedd_trapezoid(39.0, 5, 10, 35, 50) == 0.7333333333333334);
}

/* ------------------------------------------------------------------- §2 */

static void test_luma_ulp(void **state)
{
    static const int ulp[16] = {23, 46, 57, 59, 92, 114, 118, 127, 184, 205, 223, 228, 236, 241, 249, 254};
    int v, k = 0;
    (void)state;
    for (v = 0; v < 256; v++) {
        double y = cedd_luma(v, v, v);
        if (k < 16 && v == ulp[k]) {
            if (!(y < (double)v && y == nextafter((double)v, 0.0)))
                fail_msg("luma(%d) = %.17g, want one ulp below", v, y);
            k++;
        } else if (y != (double)v) {
            fail_msg("luma(%d) = %.17g, want exactly %d", v, y, v);
        }
    }
    /* the written order matters: 0.299r + 0.587g + 0.114b differs for v = 1 */
    assert_true(cedd_luma(1, 1, 1) == 1.0);
    assert_true(0.299 * 1.0 + 0.587 * 1.0 + 0.114 * 1.0 != 1.0);
    /* why it matters: quadrants 16|23 (one-pixel quadrants, factor 1.0) truncate
     * to A = 16, 22: M3 = 12 < 14, a non-edge block; exact values would give 14 */
    {
        double q[4] = {cedd_luma(16, 16, 16), cedd_luma(23, 23, 23), cedd_luma(16, 16, 16),
                       cedd_luma(23, 23, 23)};
        assert_int_equal(cedd_edges(q, 1.0), 1u);
        q[1] = q[3] = 23.0;
        assert_int_equal(cedd_edges(q, 1.0), 1u << 3);
    }
}

/* ------------------------------------------------------------------- §4 */

/* Edge lists for quadrant means A1..A4 (quad_factor 1.0 keeps them as given),
 * worked out from the spec's mask formulas independently of the C code. */
static void test_edges(void **state)
{
    static const struct { double a[4]; unsigned mask; } cases[] = {
        {{0, 0, 0, 0}, 1u << 0},
        {{6, 0, 0, 0}, 1u << 0},          /* Max = 12 < 14 */
        {{7, 0, 0, 0}, 1u << 1},          /* M1 = 14: edge, ratio 1 */
        {{0, 0, 0, 10}, 1u << 1},
        {{0, 0, 20, 45}, 1u << 1 | 1u << 2},
        {{0, 0, 10, 25}, 1u << 1 | 1u << 2 | 1u << 4},
        {{0, 0, 25, 10}, 1u << 1 | 1u << 2 | 1u << 5},
        {{0, 15, 5, 10}, 1u << 1 | 1u << 3},
        {{0, 10, 0, 25}, 1u << 1 | 1u << 3 | 1u << 4},
        {{0, 25, 0, 10}, 1u << 1 | 1u << 3 | 1u << 5},
        {{0, 0, 5, 15}, 1u << 1 | 1u << 4},
        {{0, 0, 15, 5}, 1u << 1 | 1u << 5},
        {{0, 0, 5, 10}, 1u << 2},
        {{0, 5, 15, 25}, 1u << 2 | 1u << 4},
        {{5, 0, 25, 15}, 1u << 2 | 1u << 5},
        {{0, 5, 0, 10}, 1u << 3},
        {{0, 15, 5, 25}, 1u << 3 | 1u << 4},
        {{5, 25, 0, 15}, 1u << 3 | 1u << 5},
        {{0, 5, 5, 10}, 1u << 4},
        {{5, 0, 10, 5}, 1u << 5},
        {{100, 100, 0, 0}, 1u << 2},
        {{100, 0, 100, 0}, 1u << 3},
        {{100, 50, 50, 0}, 1u << 4},
        {{50, 100, 0, 50}, 1u << 5},
    };
    size_t k;
    (void)state;
    for (k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        uint32_t m = cedd_edges(cases[k].a, 1.0);
        if (m != cases[k].mask)
            fail_msg("edges(%g,%g,%g,%g) = %#x, want %#x", cases[k].a[0], cases[k].a[1],
                     cases[k].a[2], cases[k].a[3], m, cases[k].mask);
    }
    /* the factor 4/(Sx*Sy) multiplies the sum before the truncation */
    {
        double q[4] = {4 * 6.9, 0, 0, 0};
        assert_int_equal(cedd_edges(q, 0.25), 1u);        /* trunc(6.9) = 6 -> Max 12 */
    }
}

/* ------------------------------------------------------------------- §3 */

static void test_geometry(void **state)
{
    static const struct { int w, h, nbx, nby, sx, sy; } cases[] = {
        {640, 480, 40, 40, 16, 12},
        {1500, 1100, 40, 40, 36, 26},
        {159, 100, 40, 40, 2, 2},       /* 159/40 = 3 -> 2: only 80 columns used */
        {159, 81, 40, 40, 2, 2},
        {39, 1000, 19, 500, 2, 2},      /* no grid: every 2x2 block */
        {7, 5, 3, 2, 2, 2},
        {2, 2, 1, 1, 2, 2},
        {3, 3, 1, 1, 2, 2},
        {39, 39, 19, 19, 2, 2},
        {40, 40, 20, 20, 2, 2},
        {41, 79, 20, 20, 2, 2},         /* 41/20 = 2, 79/20 = 3 -> 2 */
        {79, 80, 20, 20, 2, 4},
        {80, 80, 40, 40, 2, 2},
        {2100, 3, 1050, 1, 2, 2},
        {1, 1, 0, 0, 2, 2},
        {1, 50, 0, 0, 2, 2},
        {50, 1, 0, 0, 2, 2},
        {0, 0, 0, 0, 2, 2},
    };
    size_t k;
    cedd_geom_t g;
    (void)state;
    for (k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        g = cedd_geometry(cases[k].w, cases[k].h);
        if (g.nbx != cases[k].nbx || g.nby != cases[k].nby || g.sx != cases[k].sx || g.sy != cases[k].sy)
            fail_msg("geometry %dx%d = %d x %d blocks of %dx%d, want %d x %d of %dx%d", cases[k].w,
                     cases[k].h, g.nbx, g.nby, g.sx, g.sy, cases[k].nbx, cases[k].nby, cases[k].sx,
                     cases[k].sy);
        assert_true(g.quad_factor == 4.0 / (double)(g.sx * g.sy));
        assert_int_equal(cedd_block_count(&g), (size_t)cases[k].nbx * (size_t)cases[k].nby);
    }
    g = cedd_geometry(640, 480);
    assert_true(g.quad_factor == 0.020833333333333332);
    g = cedd_geometry(2, 2);
    assert_true(g.quad_factor == 1.0);
}

/* The ignored right and bottom strips (§3) really are ignored. */
static void test_ignored_strips(void **state)
{
    tu_rng_t r;
    patina_image_t a, b;
    uint8_t ha[PATINA_CEDD_DIM], hb[PATINA_CEDD_DIM];
    int x, y;
    (void)state;
    tu_rng_seed(&r, 7);
    tu_random_image(&a, 159, 101, 2, &r);     /* scanned: [0,80) x [0,80) */
    TU_OK(patina_image_init(&b, 159, 101));
    for (y = 0; y < 101; y++)
        for (x = 0; x < 159; x++) {
            uint8_t *p = b.data + (size_t)y * b.stride + 3 * (size_t)x;
            const uint8_t *q = a.data + (size_t)y * a.stride + 3 * (size_t)x;
            int keep = x < 80 && y < 80;
            p[0] = keep ? q[0] : 255;
            p[1] = keep ? q[1] : 0;
            p[2] = keep ? q[2] : (uint8_t)(x * y);
        }
    TU_OK(patina_cedd_extract(ha, &a, 0));
    TU_OK(patina_cedd_extract(hb, &b, 0));
    assert_memory_equal(ha, hb, PATINA_CEDD_DIM);
    patina_image_release(&a);
    patina_image_release(&b);
}

/* ------------------------------------------------------------------ §10 */

static void test_degenerate_sizes(void **state)
{
    static const int sizes[][2] = {{1, 1}, {1, 2}, {2, 1}, {1, 50}, {50, 1}, {1, 2000}, {3000, 1}};
    size_t k;
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 11);
    for (k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        patina_image_t img;
        uint8_t h[PATINA_CEDD_DIM];
        char what[64];
        int kind;
        for (kind = 0; kind < 4; kind++) {
            tu_random_image(&img, sizes[k][0], sizes[k][1], kind, &r);
            snprintf(what, sizeof what, "%dx%d kind %d", sizes[k][0], sizes[k][1], kind);
            TU_OK(patina_cedd_extract(h, &img, 0));
            assert_all_zero(h, what);
            TU_OK(patina_cedd_extract(h, &img, 1));
            assert_all_zero(h, what);
            patina_image_release(&img);
        }
    }
    {   /* an empty image */
        patina_image_t img;
        uint8_t h[PATINA_CEDD_DIM];
        memset(h, 9, sizeof h);
        patina_image_wrap(&img, NULL, 0, 0, 0);
        TU_OK(patina_cedd_extract(h, &img, 0));
        assert_all_zero(h, "0x0");
    }
    {   /* 2x2 is the smallest image with a block: one pixel per quadrant */
        patina_image_t img;
        uint8_t h[PATINA_CEDD_DIM];
        fill(&img, 2, 2, 255, 255, 255);
        TU_OK(patina_cedd_extract(h, &img, 0));
        assert_int_equal(h[0], 7);           /* white, non-edge */
        patina_image_release(&img);
    }
}

static void test_bad_arguments(void **state)
{
    patina_image_t img;
    uint8_t h[PATINA_CEDD_DIM], px[12] = {0};
    (void)state;
    patina_image_wrap(&img, px, 2, 2, 6);
    assert_int_equal(patina_cedd_extract(NULL, &img, 0), PATINA_E_INVALID);
    assert_int_equal(patina_cedd_extract(h, NULL, 0), PATINA_E_INVALID);
    patina_image_wrap(&img, NULL, 2, 2, 6);
    assert_int_equal(patina_cedd_extract(h, &img, 0), PATINA_E_INVALID);
    patina_image_wrap(&img, px, 2, 2, 5);                 /* stride < 3*width */
    assert_int_equal(patina_cedd_extract(h, &img, 0), PATINA_E_INVALID);
}

/* ------------------------------------------------------------------ §11 */

static void test_quantise(void **state)
{
    /* the decision midpoints the spec lists, table by table */
    static const double mid[4][7] = {
        {0.0119551107, 0.0425935887, 0.0876878536, 0.146520509, 0.220051398, 0.301388133, 0.44826296},
        {0.0113499195, 0.0413707404, 0.0904783408, 0.150916938, 0.207630084, 0.27989635, 0.423181397},
        {0.00264172027, 0.00788007321, 0.0145247046, 0.0226053123, 0.0325863994, 0.0454023173, 0.066115312},
        {0.0058470219, 0.0174431822, 0.0328585614, 0.0522257729, 0.0779809499, 0.115021202, 0.199936997}};
    int t, j;
    (void)state;
    for (t = 0; t < 4; t++) {
        assert_int_equal(cedd_quantise(0.0, t), 0);
        assert_int_equal(cedd_quantise(1.0, t), 7);
        assert_int_equal(cedd_quantise(NAN, t), 0);
        for (j = 0; j < 7; j++) {
            assert_int_equal(cedd_quantise(mid[t][j] * (1 - 1e-7), t), j);
            assert_int_equal(cedd_quantise(mid[t][j] * (1 + 1e-7), t), j + 1);
        }
        for (j = 0; j < 8; j++)     /* a centre itself */
            assert_int_equal(cedd_quantise(cedd_qtab[t][j] / 1000000.0, t), j);
    }
    /* table of each bin, normal and compact (§11, §14) */
    assert_int_equal(cedd_qtable_of(23, 0), 0);
    assert_int_equal(cedd_qtable_of(24, 0), 1);
    assert_int_equal(cedd_qtable_of(48, 0), 2);
    assert_int_equal(cedd_qtable_of(95, 0), 2);
    assert_int_equal(cedd_qtable_of(96, 0), 3);
    assert_int_equal(cedd_qtable_of(143, 0), 3);
    assert_int_equal(cedd_qtable_of(9, 1), 0);
    assert_int_equal(cedd_qtable_of(10, 1), 1);
    assert_int_equal(cedd_qtable_of(20, 1), 2);
    assert_int_equal(cedd_qtable_of(39, 1), 2);
    assert_int_equal(cedd_qtable_of(40, 1), 3);
    assert_int_equal(cedd_qtable_of(59, 1), 3);
}

/* ------------------------------------------------------------------ §13 */

/* The spec's definition, in long double, for a sanity bound. */
static long double tanimoto_textbook(const uint8_t *a, const uint8_t *b)
{
    long double ta = 0, tb = 0, ab = 0, aa = 0, bb = 0;
    int i;
    for (i = 0; i < PATINA_CEDD_DIM; i++) {
        ta += a[i];
        tb += b[i];
    }
    if (ta == 0 && tb == 0) return 0;
    if (ta == 0 || tb == 0) return 100;
    for (i = 0; i < PATINA_CEDD_DIM; i++) {
        long double p = b[i] / tb, q = a[i] / ta;
        ab += p * q;
        aa += q * q;
        bb += p * p;
    }
    return 100 - 100 * (ab / (aa + bb - ab));
}

static void random_desc(uint8_t h[PATINA_CEDD_DIM], tu_rng_t *r, int density)
{
    int i;
    for (i = 0; i < PATINA_CEDD_DIM; i++)
        h[i] = tu_rng_below(r, 100) < (uint32_t)density ? (uint8_t)tu_rng_below(r, 8) : 0;
}

static void test_tanimoto(void **state)
{
    uint8_t z[PATINA_CEDD_DIM] = {0}, a[PATINA_CEDD_DIM] = {0}, b[PATINA_CEDD_DIM] = {0};
    tu_rng_t r;
    int k;
    (void)state;
    assert_true(patina_cedd_tanimoto(z, z) == 0.0);
    a[5] = 3;
    assert_true(patina_cedd_tanimoto(a, z) == 100.0);
    assert_true(patina_cedd_tanimoto(z, a) == 100.0);
    assert_true(patina_cedd_tanimoto(a, a) == 0.0);
    b[6] = 7;
    b[140] = 1;
    assert_true(patina_cedd_tanimoto(a, b) == 100.0);     /* disjoint */
    assert_true(patina_cedd_tanimoto(b, a) == 100.0);
    /* scale-invariant: a and 2a are identical after normalisation */
    memset(a, 0, sizeof a);
    memset(b, 0, sizeof b);
    a[0] = 1; a[1] = 3;
    b[0] = 2; b[1] = 6;
    assert_true(patina_cedd_tanimoto(a, b) == 0.0);

    tu_rng_seed(&r, 99);
    for (k = 0; k < 20000; k++) {
        double ab, ba;
        long double ref;
        random_desc(a, &r, (int)tu_rng_below(&r, 101));
        if (k % 4 == 0) {           /* near-identical pairs */
            memcpy(b, a, sizeof b);
            b[tu_rng_below(&r, 144)] = (uint8_t)tu_rng_below(&r, 8);
        } else {
            random_desc(b, &r, (int)tu_rng_below(&r, 101));
        }
        ab = patina_cedd_tanimoto(a, b);
        ba = patina_cedd_tanimoto(b, a);
        if (memcmp(&ab, &ba, sizeof ab))
            fail_msg("not symmetric bit for bit: %.17g vs %.17g", ab, ba);
        if (k % 7 == 0 && patina_cedd_tanimoto(a, a) != 0.0) fail_msg("d(a,a) != 0");
        /* absolute tolerance: sums of at most 144 terms of size <= 1 in
         * double, result scaled by 100: far below 1e-9 */
        ref = tanimoto_textbook(a, b);
        if (fabsl((long double)ab - ref) > 1e-9L)
            fail_msg("tanimoto %.17g vs textbook %.17Lg", ab, ref);
        assert_true(ab >= 0.0 && ab <= 100.0);
    }
}

/* ------------------------------------------------------------------ §12 */

static void test_pack(void **state)
{
    uint8_t h[PATINA_CEDD_DIM] = {0}, back[PATINA_CEDD_DIM], p[PATINA_CEDD_PACKED_MAX];
    size_t len;
    tu_rng_t r;
    int k, i;
    (void)state;

    len = patina_cedd_pack(p, h);                 /* all zero: one byte, (0<<4|0)-128 */
    assert_int_equal(len, 1);
    assert_int_equal(p[0], 0x80);
    h[143] = 1;                                   /* last bin non-zero: all 72 */
    assert_int_equal(patina_cedd_pack(p, h), 72);
    assert_int_equal(p[71], (uint8_t)(1 - 128));
    memset(h, 0, sizeof h);
    h[142] = 7;                                   /* final zero run starts at 143 */
    assert_int_equal(patina_cedd_pack(p, h), 72);
    memset(h, 0, sizeof h);
    h[141] = 7;                                   /* ... at 142 */
    assert_int_equal(patina_cedd_pack(p, h), 72);
    memset(h, 0, sizeof h);
    h[140] = 7;                                   /* ... at 141 */
    assert_int_equal(patina_cedd_pack(p, h), 71);
    memset(h, 0, sizeof h);
    h[0] = 7;                                     /* ... at 1 */
    assert_int_equal(patina_cedd_pack(p, h), 1);
    assert_int_equal(p[0], (uint8_t)((7 << 4) - 128));
    h[1] = 5;                                     /* ... at 2 */
    assert_int_equal(patina_cedd_pack(p, h), 2);
    assert_int_equal(p[0], (uint8_t)((7 << 4 | 5) - 128));
    assert_int_equal(p[1], 0x80);

    tu_rng_seed(&r, 5);
    for (k = 0; k < 5000; k++) {
        int last = -1;
        random_desc(h, &r, (int)tu_rng_below(&r, 101));
        if (k % 5 == 0) {
            int from = (int)tu_rng_below(&r, 145);
            memset(h + from, 0, (size_t)(PATINA_CEDD_DIM - from));
        }
        for (i = 0; i < PATINA_CEDD_DIM; i++)
            if (h[i]) last = i;
        len = patina_cedd_pack(p, h);
        /* length rule: floor(p/2)+1, p = first index of the final zero run */
        assert_int_equal(len, (size_t)(last == 143 ? 72 : (last + 1) / 2 + 1));
        memset(back, 9, sizeof back);
        TU_OK(patina_cedd_unpack(back, p, len));
        assert_memory_equal(back, h, PATINA_CEDD_DIM);
    }
}

static void test_unpack_errors(void **state)
{
    uint8_t h[PATINA_CEDD_DIM], in[PATINA_CEDD_PACKED_MAX + 1];
    int i;
    (void)state;
    memset(in, 0x80, sizeof in);
    assert_int_equal(patina_cedd_unpack(h, in, 0), PATINA_E_INVALID);
    assert_int_equal(patina_cedd_unpack(h, in, PATINA_CEDD_PACKED_MAX + 1), PATINA_E_INVALID);
    assert_int_equal(patina_cedd_unpack(h, NULL, 3), PATINA_E_INVALID);
    in[0] = 0x88;                                 /* +128 = 0x08: low nibble 8 */
    assert_int_equal(patina_cedd_unpack(h, in, 1), PATINA_E_CORRUPT);
    in[0] = 0x00;                                 /* +128 = 0x80: high nibble 8 */
    assert_int_equal(patina_cedd_unpack(h, in, 1), PATINA_E_CORRUPT);
    in[0] = 0x7f;                                 /* 0xff */
    assert_int_equal(patina_cedd_unpack(h, in, 1), PATINA_E_CORRUPT);
    /* zero fill after the given bytes */
    memset(h, 7, sizeof h);
    in[0] = (uint8_t)((3 << 4 | 4) - 128);
    TU_OK(patina_cedd_unpack(h, in, 1));
    assert_int_equal(h[0], 3);
    assert_int_equal(h[1], 4);
    for (i = 2; i < PATINA_CEDD_DIM; i++) assert_int_equal(h[i], 0);
    /* every valid byte decodes to its two nibbles */
    for (i = 0; i < 64; i++) {
        in[0] = (uint8_t)(((i >> 3) << 4 | (i & 7)) - 128);
        TU_OK(patina_cedd_unpack(h, in, 1));
        assert_int_equal(h[0], i >> 3);
        assert_int_equal(h[1], i & 7);
    }
}

/* ----------------------------------------------------- decomposition, §14 */

/* cedd_block_sums + cedd_from_blocks (the hybrid/GPU split) equals
 * patina_cedd_extract, and compact leaves bins 60..143 zero. */
static void test_block_decomposition(void **state)
{
    static const int sizes[][2] = {
        {2, 2},   {3, 3},   {7, 5},   {16, 9},   {39, 39},  {39, 100}, {40, 40},  {41, 79},
        {79, 80}, {80, 80}, {81, 83}, {159, 81}, {123, 97}, {200, 150}, {320, 240}, {640, 480},
        {2100, 3}, {3000, 4}, {39, 1000}, {1500, 1100}};
    size_t k;
    tu_rng_t r;
    int nonzero_compact = 0;
    (void)state;
    tu_rng_seed(&r, 2024);
    for (k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int kind;
        for (kind = 0; kind < 4; kind++) {
            patina_image_t img, padded;
            cedd_geom_t g = cedd_geometry(sizes[k][0], sizes[k][1]);
            size_t nb = cedd_block_count(&g);
            cedd_block_t *blocks = malloc((nb ? nb : 1) * sizeof *blocks);
            uint8_t a[PATINA_CEDD_DIM], b[PATINA_CEDD_DIM], c[PATINA_CEDD_DIM];
            int compact, y, i;
            assert_non_null(blocks);
            tu_random_image(&img, sizes[k][0], sizes[k][1], kind, &r);
            /* the same pixels with a padded stride */
            padded.width = img.width;
            padded.height = img.height;
            padded.stride = img.stride + 13;
            padded.data = malloc(padded.stride * (size_t)img.height);
            padded.owned = 0;
            assert_non_null(padded.data);
            memset(padded.data, 0xA5, padded.stride * (size_t)img.height);
            for (y = 0; y < img.height; y++)
                memcpy(padded.data + (size_t)y * padded.stride, img.data + (size_t)y * img.stride,
                       3 * (size_t)img.width);
            cedd_block_sums(blocks, &img, &g);
            for (compact = 0; compact < 2; compact++) {
                TU_OK(patina_cedd_extract(a, &img, compact));
                cedd_from_blocks(b, blocks, &g, compact);
                TU_OK(patina_cedd_extract(c, &padded, compact));
                if (memcmp(a, b, PATINA_CEDD_DIM) || memcmp(a, c, PATINA_CEDD_DIM))
                    fail_msg("%dx%d kind %d compact %d: extract, blocks and padded stride differ",
                             sizes[k][0], sizes[k][1], kind, compact);
                if (compact) {
                    for (i = 60; i < PATINA_CEDD_DIM; i++)
                        if (a[i]) fail_msg("%dx%d compact bin %d = %d", sizes[k][0], sizes[k][1], i, a[i]);
                    for (i = 0; i < 60; i++) nonzero_compact += a[i] != 0;
                }
            }
            free(padded.data);
            free(blocks);
            patina_image_release(&img);
        }
    }
    assert_true(nonzero_compact > 0);
}

/* Block sums are what the spec says: quadrant Y sums added sequentially in
 * row-major order, integer RGB sums over the whole block. Checked on a 2x2
 * image (one pixel a quadrant) and on one 4x4 block of a 160x160 image. */
static void test_block_sums(void **state)
{
    patina_image_t img;
    cedd_geom_t g;
    cedd_block_t blk[1];
    uint8_t px[2 * 2 * 3] = {10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120};
    (void)state;
    patina_image_wrap(&img, px, 2, 2, 6);
    g = cedd_geometry(2, 2);
    cedd_block_sums(blk, &img, &g);
    assert_true(blk[0].q[0] == cedd_luma(10, 20, 30));
    assert_true(blk[0].q[1] == cedd_luma(40, 50, 60));
    assert_true(blk[0].q[2] == cedd_luma(70, 80, 90));
    assert_true(blk[0].q[3] == cedd_luma(100, 110, 120));
    assert_int_equal(blk[0].rgb[0], 10 + 40 + 70 + 100);
    assert_int_equal(blk[0].rgb[1], 20 + 50 + 80 + 110);
    assert_int_equal(blk[0].rgb[2], 30 + 60 + 90 + 120);
    {   /* 160x160: Sx = Sy = 4, quadrants of 2x2 pixels summed row-major */
        tu_rng_t r;
        cedd_block_t *all;
        double want[4] = {0, 0, 0, 0};
        int i, j;
        tu_rng_seed(&r, 3);
        tu_random_image(&img, 160, 160, 0, &r);
        g = cedd_geometry(160, 160);
        all = malloc(cedd_block_count(&g) * sizeof *all);
        assert_non_null(all);
        cedd_block_sums(all, &img, &g);
        /* block (bx 3, by 2): pixels x 12..15, y 8..11 */
        for (i = 8; i < 12; i++)
            for (j = 12; j < 16; j++) {
                const uint8_t *p = img.data + (size_t)i * img.stride + 3 * (size_t)j;
                want[(i >= 10 ? 2 : 0) + (j >= 14)] += cedd_luma(p[0], p[1], p[2]);
            }
        for (i = 0; i < 4; i++) assert_true(all[2 * 40 + 3].q[i] == want[i]);
        free(all);
        patina_image_release(&img);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_solid_3366cc),
        cmocka_unit_test(test_hsv),
        cmocka_unit_test(test_trapezoid),
        cmocka_unit_test(test_luma_ulp),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_geometry),
        cmocka_unit_test(test_ignored_strips),
        cmocka_unit_test(test_degenerate_sizes),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_quantise),
        cmocka_unit_test(test_tanimoto),
        cmocka_unit_test(test_pack),
        cmocka_unit_test(test_unpack_errors),
        cmocka_unit_test(test_block_decomposition),
        cmocka_unit_test(test_block_sums),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
