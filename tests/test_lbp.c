/* Local texture patterns (lbp, lbp8, tlbap, lanadp): hand-computed windows
 * (the paper's Figure 2 among them), degenerate images, the fast CPU path
 * against the C reference on random images, histograms and mappings, each
 * distance against its textbook definition, and the registered families.
 * Parity with scikit-image itself is tests/test_lbp_skimage.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "features/lbp.h"
#include "search/distance.h"
#include "testutil.h"

static lbp_conf_t conf(int kind, const char *opts_text)
{
    lbp_opts_t o;
    lbp_conf_t c;
    /* the families' defaults, then the test's options */
    memset(&o, 0, sizeof o);
    o.P = 8;
    o.R = 1.0;
    o.method = LBP_M_DEFAULT;
    o.th = 0.9;
    o.mapping = LBP_MAP_NONE;
    strcpy(o.grid, "1x1");
    o.norm = LBP_NORM_COUNTS;
    o.distance = LBP_DIST_CHI2;
    o.vbins = 16;
    if (opts_text) {
        char buf[256], *tok, *save = NULL;
        snprintf(buf, sizeof buf, "%s", opts_text);
        for (tok = strtok_r(buf, ";", &save); tok; tok = strtok_r(NULL, ";", &save)) {
            if (!strncmp(tok, "P=", 2)) o.P = atoi(tok + 2);
            else if (!strncmp(tok, "R=", 2)) o.R = atof(tok + 2);
            else if (!strncmp(tok, "th=", 3)) o.th = atof(tok + 3);
            else if (!strncmp(tok, "method=", 7)) o.method = atoi(tok + 7);
            else if (!strncmp(tok, "mapping=", 8)) o.mapping = atoi(tok + 8);
            else if (!strncmp(tok, "grid=", 5)) snprintf(o.grid, sizeof o.grid, "%s", tok + 5);
            else if (!strncmp(tok, "norm=", 5)) o.norm = atoi(tok + 5);
            else if (!strncmp(tok, "vbins=", 6)) o.vbins = atoi(tok + 6);
            else fail_msg("bad test option %s", tok);
        }
    }
    TU_OK(lbp_conf_resolve(&c, kind, &o, "test"));
    return c;
}

static uint32_t code_at(const patina_codemap_t *m, int x, int y)
{
    return (uint32_t)lbp_map_get(m, (size_t)y * (size_t)m->width + (size_t)x);
}

/* The one code of a 3x3 window (rows top to bottom). */
static uint32_t window(int kind, const char *opts, const uint8_t v[9])
{
    lbp_conf_t c = conf(kind, opts);
    patina_codemap_t ref, fast;
    uint32_t code;
    TU_OK(lbp_ref_codes(&ref, &c, v, 3, 3, 3));
    TU_OK(lbp_fast_codes(&fast, &c, v, 3, 3, 3, NULL));
    assert_int_equal(ref.width, 1);
    assert_int_equal(ref.height, 1);
    code = code_at(&ref, 0, 0);
    assert_int_equal(code_at(&fast, 0, 0), code);
    patina_codemap_release(&ref);
    patina_codemap_release(&fast);
    return code;
}

/* ------------------------------------------------------------ hand windows */

static void test_lbp8_windows(void **state)
{
    (void)state;
    /* weights {{8,4,2},{16,0,1},{32,64,128}}; bit when neighbour >= centre */
    {
        const uint8_t v[9] = {10, 20, 30, 40, 50, 60, 70, 80, 90};
        assert_int_equal(window(LBP_KIND_LBP8, NULL, v), 1 + 32 + 64 + 128);
    }
    {
        const uint8_t v[9] = {50, 49, 51, 50, 50, 0, 255, 50, 49}; /* ties count */
        /* TL 50 (8) yes, T 49 no, TR 51 (2) yes, L 50 (16) yes, R 0 no,
         * BL 255 (32) yes, B 50 (64) yes, BR 49 no */
        assert_int_equal(window(LBP_KIND_LBP8, NULL, v), 8 + 2 + 16 + 32 + 64);
    }
    {
        const uint8_t flat[9] = {7, 7, 7, 7, 7, 7, 7, 7, 7};
        assert_int_equal(window(LBP_KIND_LBP8, NULL, flat), 255);
    }
}

static void test_tlbap_figure2(void **state)
{
    /* Figure 2 of the paper: centre 13, the window's highest value 17,
     * threshold 0.9, so th2 = 0.9 * 17 = 15.3. (The text of the paper gives
     * the caption's numbers, not every pixel: the other values here are ours,
     * chosen so that each case of the AND shows.)
     *     12 17 14
     *     15 13 16
     *     10 13  9
     * (A) neighbour > 13: T 17 (4), TR 14 (2), L 15 (16), R 16 (1) -> 23
     *     (B 13 is equal: not strictly greater)
     * (C) neighbour > 15.3: T 17 (4), R 16 (1)                  -> 5
     * (D) A AND C                                               -> 5 */
    const uint8_t v[9] = {12, 17, 14, 15, 13, 16, 10, 13, 9};
    (void)state;
    assert_int_equal(window(LBP_KIND_TLBAP, "th=0.9", v), 5);
    /* th = 1: th2 = max, so nothing exceeds it */
    assert_int_equal(window(LBP_KIND_TLBAP, "th=1", v), 0);
    /* a small th leaves plain strict LBP: 23 */
    assert_int_equal(window(LBP_KIND_TLBAP, "th=0.01", v), 23);
    /* lbp8 on the same window also counts the equal bottom pixel (64) */
    assert_int_equal(window(LBP_KIND_LBP8, NULL, v), 23 + 64);
    {
        /* th2 exactly on an integer: 0.5 * 30 = 15; 15 is not > 15 */
        const uint8_t w[9] = {15, 16, 0, 0, 10, 0, 0, 30, 0};
        /* TL 15 > 10 but not > 15; T 16 (4) yes; B 30 (64) yes */
        assert_int_equal(window(LBP_KIND_TLBAP, "th=0.5", w), 4 + 64);
    }
}

static void test_lanadp_windows(void **state)
{
    (void)state;
    {
        /* neighbours 1..8 = right, top-right, top, top-left, left,
         * bottom-left, bottom, bottom-right = 10,20,...,80:
         *   TL 40  T 30  TR 20
         *   L  50  C  x  R  10
         *   BL 60  B 70  BR 80
         * i=1 v=10: a1=(20+30)/2 a2=(80+70)/2 both >= 10        -> 1
         * i=2 v=20: a1=(30+40)/2 a2=(10+80)/2 both >= 20        -> 2
         * i=3..6: one mean above, one below                     -> 0
         * i=7 v=70: a1=(80+10)/2 a2=(60+50)/2 both <= 70        -> 64
         * i=8 v=80: a1=(10+20)/2 a2=(70+60)/2 both <= 80        -> 128 */
        const uint8_t v[9] = {40, 30, 20, 50, 99, 10, 60, 70, 80};
        assert_int_equal(window(LBP_KIND_LANADP, NULL, v), 1 + 2 + 64 + 128);
    }
    {
        /* exact means, not integer division: for i=1 (right, v=10),
         * a1 = (10+11)/2 = 10.5 >= 10 but a2 = (9+10)/2 = 9.5 < 10, and
         * a1 > 10 so "both <=" fails too: bit 0 clear. Integer division
         * (10 and 9) would set it. Other neighbours:
         *   TL 11 T 11 TR 10 / L 10 R 10 / BL 10 B 10 BR 9 */
        const uint8_t v[9] = {11, 11, 10, 10, 0, 10, 10, 10, 9};
        uint32_t code = window(LBP_KIND_LANADP, NULL, v);
        assert_int_equal(code & 1u, 0);
        /* n = [10,10,11,11,10,10,10,9] (right..bottom-right):
         * k=1 v=10: s1=11+11=22, s2=10+9=19 -> mixed            0
         * k=2 v=11: s1=11+10=21, s2=10+10=20 both <= 22         4
         * k=3 v=11: s1=10+10=20, s2=11+10=21 both <= 22         8
         * k=4 v=10: s1=10+10=20, s2=11+11=22 both >= 20        16
         * k=5 v=10: s1=10+9=19, s2=10+11=21 mixed               0
         * k=6 v=10: s1=9+10=19, s2=10+10=20 both <= 20         64
         * k=7 v=9:  s1=10+10=20, s2=10+10=20 both >= 18       128 */
        assert_int_equal(code, 4 + 8 + 16 + 64 + 128);
    }
    {
        const uint8_t flat[9] = {3, 3, 3, 3, 3, 3, 3, 3, 3};
        assert_int_equal(window(LBP_KIND_LANADP, NULL, flat), 255);
    }
}

static void test_circular_hand(void **state)
{
    /* P=4, R=1: samples exactly at right, top, left, bottom (scikit-image
     * rounds cos(pi/2) = 6e-17 to 0), outside the image reads 0.
     *   1 2 3
     *   4 5 6
     *   7 8 9 */
    const uint8_t img[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    lbp_conf_t c = conf(LBP_KIND_CIRCULAR, "P=4;R=1");
    patina_codemap_t m;
    double rp[LBP_MAX_P], cp[LBP_MAX_P];
    (void)state;
    lbp_circle(rp, cp, 4, 1.0);
    assert_true(rp[0] == 0.0 && cp[0] == 1.0);
    assert_true(rp[1] == -1.0 && cp[1] == 0.0);
    assert_true(rp[2] == 0.0 && cp[2] == -1.0);
    assert_true(rp[3] == 1.0 && cp[3] == 0.0);
    lbp_circle(rp, cp, 8, 1.0);
    assert_true(rp[1] == -0.70711 && cp[1] == 0.70711);
    assert_true(rp[5] == 0.70711 && cp[5] == -0.70711);
    /* R is used in single precision: 2.7f */
    lbp_circle(rp, cp, 4, 2.7);
    assert_true(cp[0] == rint((double)2.7f * 1e5) / 1e5);

    TU_OK(lbp_ref_codes(&m, &c, img, 3, 3, 3));
    assert_int_equal(m.width, 3);
    assert_int_equal(m.height, 3);
    /* centre 5: right 6 (1), top 2, left 4, bottom 8 (8) */
    assert_int_equal(code_at(&m, 1, 1), 9);
    /* corner 1: right 2 (1), top 0, left 0, bottom 4 (8) */
    assert_int_equal(code_at(&m, 0, 0), 9);
    /* corner 9: right 0, top 6 < 9, left 8 < 9, bottom 0 -> 0 */
    assert_int_equal(code_at(&m, 2, 2), 0);
    patina_codemap_release(&m);

    /* uniform for P=4 on the centre: pattern 1001 has 2 changes over
     * samples 0..3 -> number of ones = 2 */
    c = conf(LBP_KIND_CIRCULAR, "P=4;R=1;method=2");
    TU_OK(lbp_ref_codes(&m, &c, img, 3, 3, 3));
    assert_int_equal(code_at(&m, 1, 1), 2);
    patina_codemap_release(&m);
    /* ror: 1001 -> rotations 1001 1100 0110 0011 -> 3 */
    c = conf(LBP_KIND_CIRCULAR, "P=4;R=1;method=1");
    TU_OK(lbp_ref_codes(&m, &c, img, 3, 3, 3));
    assert_int_equal(code_at(&m, 1, 1), 3);
    patina_codemap_release(&m);
    /* var of the centre's samples {6,2,4,8}: mean 5, var (1+9+1+9)/4 = 5 */
    c = conf(LBP_KIND_CIRCULAR, "P=4;R=1;method=4");
    TU_OK(lbp_ref_codes(&m, &c, img, 3, 3, 3));
    assert_true(((double *)m.data)[4] == 5.0);
    patina_codemap_release(&m);
}

/* The bit-operation pattern codes (lbp_core.h) against the reference loops,
 * exhaustively for P <= 12 and on random patterns up to P = 32. */
static void test_pattern_codes(void **state)
{
    tu_rng_t r;
    int P, method, k;
    (void)state;
    tu_rng_seed(&r, 7);
    for (P = 1; P <= 32; P++)
        for (method = LBP_M_DEFAULT; method <= LBP_M_NRI; method++) {
            uint64_t n = P <= 12 ? (1ull << P) : 5000, i;
            for (i = 0; i < n; i++) {
                uint32_t bits = P <= 12 ? (uint32_t)i : (uint32_t)tu_rng_next(&r);
                int s[32];
                if (P < 32) bits &= (1u << P) - 1u;
                if (P > 12 && (i & 3) == 0) { /* uniform-looking runs too */
                    int a = (int)tu_rng_below(&r, (uint32_t)P), len = (int)tu_rng_below(&r, (uint32_t)P);
                    bits = 0;
                    for (k = 0; k < len; k++) bits |= 1u << ((a + k) % P);
                }
                for (k = 0; k < P; k++) s[k] = (int)((bits >> k) & 1u);
                if (lbp_pattern_code(bits, P, method) != lbp_ref_code(s, P, method))
                    fail_msg("P=%d method=%d bits=%#x: %u vs reference %u", P, method, bits,
                             lbp_pattern_code(bits, P, method), lbp_ref_code(s, P, method));
            }
        }
}

static void test_tlbap_threshold_table(void **state)
{
    static const double ths[] = {0.9, 1.0, 0.5, 1.0 / 3.0, 0.1, 0.7, 0.99999, 1e-9, 0.3};
    int k[256];
    size_t t;
    int m, n;
    (void)state;
    for (t = 0; t < sizeof ths / sizeof ths[0]; t++) {
        lbp_tlbap_table(k, ths[t]);
        for (m = 0; m < 256; m++)
            for (n = 0; n < 256; n++)
                if ((n > k[m]) != ((double)n > ths[t] * (double)m))
                    fail_msg("th=%.17g max=%d n=%d", ths[t], m, n);
    }
}

/* ------------------------------------------------------------ shapes */

static void check_fast_equals_ref(const lbp_conf_t *c, const uint8_t *g, int w, int h,
                                  size_t stride, patina_pool_t *pool, const char *what)
{
    patina_codemap_t ref, fast;
    size_t n, i;
    uint32_t *cr = malloc(lbp_dim(c) * sizeof *cr), *cf = malloc(lbp_dim(c) * sizeof *cf);
    TU_OK(lbp_ref_codes(&ref, c, g, w, h, stride));
    TU_OK(lbp_fast_codes(&fast, c, g, w, h, stride, pool));
    assert_int_equal(ref.width, fast.width);
    assert_int_equal(ref.height, fast.height);
    assert_int_equal(ref.elem, fast.elem);
    n = (size_t)ref.width * (size_t)ref.height;
    for (i = 0; i < n; i++) {
        double a = lbp_map_get(&ref, i), b = lbp_map_get(&fast, i);
        if (!(a == b || (isnan(a) && isnan(b)))) /* exact, var included */
            fail_msg("%s: kind %d P=%d R=%g method %d %dx%d: pixel %zu (%zu,%zu): fast %.17g ref %.17g",
                     what, c->kind, c->P, c->R, c->method, w, h, i, i % (size_t)ref.width,
                     i / (size_t)ref.width, b, a);
    }
    lbp_hist_counts(cr, c, &ref);
    TU_OK(lbp_fast_counts(cf, c, g, w, h, stride, pool));
    assert_memory_equal(cr, cf, lbp_dim(c) * sizeof *cr);
    {
        uint64_t total = 0;
        for (i = 0; i < lbp_dim(c); i++) total += cr[i];
        assert_int_equal(total, n);
    }
    patina_codemap_release(&ref);
    patina_codemap_release(&fast);
    free(cr);
    free(cf);
}

static const char *const all_confs[][2] = {
    {"0", NULL},
    {"1", NULL},
    {"2", "th=0.9"},
    {"2", "th=0.31"},
    {"3", NULL},
    {"0", "P=8;R=1;method=1"},
    {"0", "P=8;R=1;method=2"},
    {"0", "P=8;R=1;method=3"},
    {"0", "P=8;R=1;method=4"},
    {"0", "P=16;R=2"},
    {"0", "P=16;R=2;method=2"},
    {"0", "P=24;R=3;method=2"},
    {"0", "P=24;R=3;method=3"},
    {"0", "P=24;R=3;method=0;mapping=1"},
    {"0", "P=24;R=3;method=1;mapping=3"},
    {"0", "P=12;R=2;method=1;mapping=1"},
    {"0", "P=24;R=3;method=4"},
    {"0", "P=8;R=1.5"},
    {"0", "P=12;R=2.7;method=3"},
    {"0", "P=5;R=0.5;method=1"},
    {"0", "P=32;R=3;method=2"},
    {"0", "P=32;R=4.2;method=0;mapping=3"},
    {"0", "P=1;R=1"},
    {"0", "P=3;R=7.9;method=4"},
    {"1", "mapping=1;grid=3x2"},
    {"3", "mapping=2;grid=2x5"},
    {"0", "P=8;R=1;mapping=3;grid=4x4"},
};
#define NCONFS (sizeof all_confs / sizeof all_confs[0])

static void test_degenerate_shapes(void **state)
{
    static const int shapes[][2] = {{1, 1}, {2, 2}, {3, 3}, {17, 1}, {1, 17}, {2, 9}, {9, 2},
                                    {4, 3}, {0, 0}, {0, 5}};
    uint8_t g[17 * 17];
    tu_rng_t r;
    size_t s, k, i;
    (void)state;
    tu_rng_seed(&r, 3);
    for (i = 0; i < sizeof g; i++) g[i] = (uint8_t)tu_rng_below(&r, 256);
    for (k = 0; k < NCONFS; k++) {
        lbp_conf_t c = conf(atoi(all_confs[k][0]), all_confs[k][1]);
        for (s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int w = shapes[s][0], h = shapes[s][1], mw, mh;
            patina_codemap_t m;
            lbp_map_shape(&c, w, h, &mw, &mh);
            TU_OK(lbp_ref_codes(&m, &c, g, w, h, (size_t)(w ? w : 1)));
            assert_int_equal(m.width, mw);
            assert_int_equal(m.height, mh);
            if (c.border) {
                assert_int_equal(mw, w > 2 ? w - 2 : 0);
                assert_int_equal(mh, h > 2 ? h - 2 : 0);
            } else {
                assert_int_equal(mw, w);
                assert_int_equal(mh, h);
            }
            patina_codemap_release(&m);
            check_fast_equals_ref(&c, g, w, h, (size_t)(w ? w : 1), NULL, "degenerate");
        }
    }
    /* one pixel, circular: every sample is outside or mixes in zeros */
    {
        const uint8_t one = 5;
        lbp_conf_t c = conf(LBP_KIND_CIRCULAR, "P=4;R=1");
        patina_codemap_t m;
        TU_OK(lbp_ref_codes(&m, &c, &one, 1, 1, 1));
        assert_int_equal(code_at(&m, 0, 0), 0); /* 0 - 5 < 0 everywhere */
        patina_codemap_release(&m);
        c = conf(LBP_KIND_CIRCULAR, "P=4;R=1;method=4");
        TU_OK(lbp_ref_codes(&m, &c, &one, 1, 1, 1));
        assert_true(isnan(((double *)m.data)[0])); /* all samples 0: var 0 -> NaN */
        patina_codemap_release(&m);
    }
}

/* Random images of several kinds and sizes (not multiples of 16 or 4),
 * through a padded stride, with one thread and with a pool. */
static void test_fast_equals_reference(void **state)
{
    static const int sizes[][2] = {{37, 29}, {64, 16}, {19, 53}, {130, 7}, {33, 33}};
    patina_pool_t *pool;
    tu_rng_t r;
    size_t k, s;
    int kind;
    (void)state;
    TU_OK(patina_pool_new(&pool, 3));
    tu_rng_seed(&r, 11);
    for (s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (kind = 0; kind < 4; kind++) {
            int w = sizes[s][0], h = sizes[s][1], x, y;
            size_t stride = (size_t)w + 5;
            uint8_t *g = malloc(stride * (size_t)h);
            patina_image_t img;
            tu_random_image(&img, w, h, kind, &r);
            TU_OK(patina_image_to_grey(g, &img)); /* packed (h, w) ... */
            for (y = h - 1; y >= 0; y--)          /* ... moved to the padded stride */
                memmove(g + (size_t)y * stride, g + (size_t)y * (size_t)w, (size_t)w);
            if (kind == 0 && s % 2 == 0) /* few levels: many exact ties */
                for (y = 0; y < h; y++)
                    for (x = 0; x < w; x++) g[(size_t)y * stride + (size_t)x] &= 0xc0;
            for (k = 0; k < NCONFS; k++) {
                lbp_conf_t c = conf(atoi(all_confs[k][0]), all_confs[k][1]);
                check_fast_equals_ref(&c, g, w, h, stride, NULL, "random, 1 thread");
                check_fast_equals_ref(&c, g, w, h, stride, pool, "random, pool");
            }
            patina_image_release(&img);
            free(g);
        }
    patina_pool_free(pool);
}

/* A taller image, so that the pool really splits it into bands. */
static void test_fast_bands(void **state)
{
    const int w = 61, h = 301;
    uint8_t *g = malloc((size_t)w * h);
    patina_pool_t *pool;
    patina_image_t img;
    tu_rng_t r;
    size_t k;
    (void)state;
    TU_OK(patina_pool_new(&pool, 4));
    tu_rng_seed(&r, 5);
    tu_random_image(&img, w, h, 1, &r);
    TU_OK(patina_image_to_grey(g, &img));
    for (k = 0; k < NCONFS; k++) {
        lbp_conf_t c = conf(atoi(all_confs[k][0]), all_confs[k][1]);
        check_fast_equals_ref(&c, g, w, h, (size_t)w, pool, "bands");
    }
    patina_image_release(&img);
    patina_pool_free(pool);
    free(g);
}

/* ------------------------------------------------------------ histograms */

static void test_mappings(void **state)
{
    lbp_conf_t c;
    uint32_t v, seen[256];
    int n;
    (void)state;
    /* 8-bit patterns: u2 has 58 uniform patterns + 1 bin; ri 36 rotation
     * classes; riu2 P+2 = 10 */
    c = conf(LBP_KIND_LBP8, "mapping=1");
    assert_int_equal(c.nbins, 59);
    memset(seen, 0, sizeof seen);
    for (v = 0; v < 256; v++) seen[lbp_bin(&c, v)]++;
    for (n = 0; n < 59; n++) assert_true(seen[n] > 0);
    assert_int_equal(seen[58], 256 - 58); /* the non-uniform bin */
    c = conf(LBP_KIND_LBP8, "mapping=2");
    assert_int_equal(c.nbins, 36);
    memset(seen, 0, sizeof seen);
    for (v = 0; v < 256; v++) {
        uint32_t b = lbp_bin(&c, v), rot = ((v >> 1) | (v << 7)) & 255u;
        assert_int_equal(lbp_bin(&c, rot), b); /* rotation invariant */
        seen[b]++;
    }
    for (n = 0; n < 36; n++) assert_true(seen[n] > 0);
    c = conf(LBP_KIND_LBP8, "mapping=3");
    assert_int_equal(c.nbins, 10);
    assert_int_equal(lbp_bin(&c, 0x0f), 4);
    assert_int_equal(lbp_bin(&c, 0xf0), 4);
    assert_int_equal(lbp_bin(&c, 0x55), 9);
    /* circular: bins per method */
    assert_int_equal(conf(LBP_KIND_CIRCULAR, "P=8;method=2").nbins, 10);
    assert_int_equal(conf(LBP_KIND_CIRCULAR, "P=8;method=3").nbins, 59);
    assert_int_equal(conf(LBP_KIND_CIRCULAR, "P=8;method=1").nbins, 36);
    assert_int_equal(conf(LBP_KIND_CIRCULAR, "P=16;method=1").nbins, 4116);
    assert_int_equal(conf(LBP_KIND_CIRCULAR, "P=24;method=3").nbins, 24 * 23 + 3);
    assert_int_equal(conf(LBP_KIND_CIRCULAR, "P=8;method=4;vbins=7").nbins, 7);
    assert_int_equal(conf(LBP_KIND_CIRCULAR, "P=16").nbins, 65536);
    c = conf(LBP_KIND_CIRCULAR, "P=8;method=4;vbins=16");
    assert_int_equal(lbp_var_bin(&c, NAN), 0);
    assert_int_equal(lbp_var_bin(&c, -1e-9), 0);
    assert_int_equal(lbp_var_bin(&c, 64.0), 1);   /* sqrt 8 -> 8*16/128 = 1 */
    assert_int_equal(lbp_var_bin(&c, 16256.25), 15);
    assert_int_equal(lbp_var_bin(&c, 1e9), 15);
    /* element types of the code maps */
    assert_int_equal(conf(LBP_KIND_CIRCULAR, "P=8").code_elem, PATINA_ELEM_U8);
    assert_int_equal(conf(LBP_KIND_CIRCULAR, "P=9").code_elem, PATINA_ELEM_U16);
    assert_int_equal(conf(LBP_KIND_CIRCULAR, "P=17;mapping=1").code_elem, PATINA_ELEM_U32);
    assert_int_equal(conf(LBP_KIND_CIRCULAR, "P=32;method=3").code_elem, PATINA_ELEM_U16);
    assert_int_equal(conf(LBP_KIND_CIRCULAR, "P=32;method=2").code_elem, PATINA_ELEM_U8);
}

static void test_grid_cells(void **state)
{
    lbp_conf_t c = conf(LBP_KIND_LBP8, "grid=3x4");
    int mh = 10, mw = 7, y, x, prev = 0;
    (void)state;
    /* boundaries floor(i*mh/3) = 0, 3, 6 */
    for (y = 0; y < mh; y++) {
        int cr = lbp_cell_row(&c, mh, y);
        int want = y < 3 ? 0 : y < 6 ? 1 : 2;
        assert_int_equal(cr, want);
    }
    /* columns: floor(i*7/4) = 0, 1, 3, 5 */
    for (x = 0; x < mw; x++) {
        int cc = lbp_cell_col(&c, mw, x);
        int want = x < 1 ? 0 : x < 3 ? 1 : x < 5 ? 2 : 3;
        assert_int_equal(cc, want);
        assert_true(cc >= prev);
        prev = cc;
    }
    /* more cells than rows: some stay empty */
    c = conf(LBP_KIND_LBP8, "grid=4x1");
    assert_int_equal(lbp_cell_row(&c, 2, 0), 1);
    assert_int_equal(lbp_cell_row(&c, 2, 1), 3);
}

static void test_hist_finish(void **state)
{
    lbp_conf_t c = conf(LBP_KIND_LBP8, "mapping=3;norm=1");
    uint32_t counts[10] = {1, 2, 3, 4, 0, 0, 0, 0, 0, 10};
    float f[10];
    double s = 0.0;
    int i;
    (void)state;
    lbp_hist_finish(f, &c, counts);
    for (i = 0; i < 10; i++) {
        assert_true(f[i] == (float)(counts[i] / 20.0));
        s += f[i];
    }
    assert_true(fabs(s - 1.0) < 1e-6);
    memset(counts, 0, sizeof counts);
    lbp_hist_finish(f, &c, counts);
    for (i = 0; i < 10; i++) assert_true(f[i] == 0.0f);
}

/* ------------------------------------------------------------ distances */

/* Each distance against its one-line definition, computed here from the
 * formula on doubles, on several vector pairs (u32 counts and f32). */
/* The search's definition of the distance an lbp `distance` option names. */
static double lbp_distance(int option, patina_elem e, const void *a, const void *b, size_t n)
{
    static const pdist_t ids[] = {PDIST_CHI2, PDIST_L1, PDIST_INTERSECTION, PDIST_HELLINGER};
    return pdist_get(ids[option])->pair(e, a, b, n, NULL);
}

static double def_chi2(const double *a, const double *b, int n)
{
    double d = 0;
    for (int i = 0; i < n; i++)
        if (a[i] + b[i] != 0) d += pow(a[i] - b[i], 2) / (a[i] + b[i]);
    return d;
}
static double def_l1(const double *a, const double *b, int n)
{
    double d = 0;
    for (int i = 0; i < n; i++) d += fabs(a[i] - b[i]);
    return d;
}
static double def_intersection(const double *a, const double *b, int n)
{
    double m = 0, sa = 0, sb = 0;
    for (int i = 0; i < n; i++) {
        m += fmin(a[i], b[i]);
        sa += a[i];
        sb += b[i];
    }
    return sa + sb == 0 ? 0 : 1 - m / fmax(sa, sb);
}
static double def_hellinger(const double *a, const double *b, int n)
{
    /* (1/sqrt 2) || sqrt(p) - sqrt(q) ||_2 for p = a / sum a, q = b / sum b */
    double sa = 0, sb = 0, d = 0;
    for (int i = 0; i < n; i++) {
        sa += a[i];
        sb += b[i];
    }
    if (sa == 0 && sb == 0) return 0;
    if (sa == 0 || sb == 0) return 1;
    for (int i = 0; i < n; i++) d += pow(sqrt(a[i] / sa) - sqrt(b[i] / sb), 2);
    return sqrt(d / 2);
}

static void test_distances(void **state)
{
    static const double pairs[][2][6] = {
        {{1, 0, 3, 0, 0, 0}, {2, 2, 1, 0, 0, 0}},
        {{5, 5, 5, 5, 5, 5}, {5, 5, 5, 5, 5, 5}},
        {{0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0}},
        {{0, 0, 0, 0, 0, 0}, {0, 1, 0, 0, 7, 0}},
        {{9, 0, 0, 0, 0, 1}, {0, 3, 3, 3, 0, 0}},
        {{100, 3, 0, 17, 2, 8}, {90, 13, 1, 15, 0, 11}},
    };
    size_t p;
    int e, i;
    (void)state;
    /* the first pair by hand: chi2 = 1/3 + 4/2 + 4/4; l1 = 5;
     * intersection = 1 - (1+0+1)/5; hellinger from the Bhattacharyya form */
    {
        uint32_t a[3] = {1, 0, 3}, b[3] = {2, 2, 1};
        assert_true(fabs(lbp_distance(LBP_DIST_CHI2, PATINA_ELEM_U32, a, b, 3) - (1.0 / 3 + 2 + 1)) < 1e-15);
        assert_true(lbp_distance(LBP_DIST_L1, PATINA_ELEM_U32, a, b, 3) == 5.0);
        assert_true(fabs(lbp_distance(LBP_DIST_INTERSECTION, PATINA_ELEM_U32, a, b, 3) - 0.6) < 1e-15);
        assert_true(fabs(lbp_distance(LBP_DIST_HELLINGER, PATINA_ELEM_U32, a, b, 3) -
                         sqrt(1 - (sqrt(2.0) + sqrt(3.0)) / sqrt(20.0))) < 1e-15);
    }
    for (p = 0; p < sizeof pairs / sizeof pairs[0]; p++)
        for (e = 0; e < 2; e++) {
            const double *a = pairs[p][0], *b = pairs[p][1];
            uint32_t ua[6], ub[6];
            float fa[6], fb[6];
            double sa = 0, sb = 0, na[6], nb[6];
            const void *va, *vb;
            patina_elem el = e ? PATINA_ELEM_F32 : PATINA_ELEM_U32;
            for (i = 0; i < 6; i++) {
                sa += a[i];
                sb += b[i];
            }
            for (i = 0; i < 6; i++) {
                ua[i] = (uint32_t)a[i];
                ub[i] = (uint32_t)b[i];
                /* f32: L1-normalised as the descriptor would be */
                fa[i] = sa ? (float)(a[i] / sa) : 0.0f;
                fb[i] = sb ? (float)(b[i] / sb) : 0.0f;
                na[i] = e ? (double)fa[i] : a[i];
                nb[i] = e ? (double)fb[i] : b[i];
            }
            va = e ? (const void *)fa : (const void *)ua;
            vb = e ? (const void *)fb : (const void *)ub;
            assert_true(fabs(lbp_distance(LBP_DIST_CHI2, el, va, vb, 6) - def_chi2(na, nb, 6)) < 1e-12);
            assert_true(fabs(lbp_distance(LBP_DIST_L1, el, va, vb, 6) - def_l1(na, nb, 6)) < 1e-12);
            assert_true(fabs(lbp_distance(LBP_DIST_INTERSECTION, el, va, vb, 6) -
                             def_intersection(na, nb, 6)) < 1e-12);
            assert_true(fabs(lbp_distance(LBP_DIST_HELLINGER, el, va, vb, 6) -
                             def_hellinger(na, nb, 6)) < 1e-7);
            /* symmetric, and zero on identical inputs */
            for (int d = 0; d < 4; d++) {
                assert_true(lbp_distance(d, el, va, vb, 6) == lbp_distance(d, el, vb, va, 6));
                assert_true(lbp_distance(d, el, va, va, 6) == 0.0);
            }
        }
    /* zero-length vectors */
    for (int d = 0; d < 4; d++) assert_true(lbp_distance(d, PATINA_ELEM_U32, NULL, NULL, 0) == 0.0);
}

/* ------------------------------------------------------------ families */

static void test_families(void **state)
{
    static const struct { const char *spec, *canon; size_t dim; patina_elem el; const char *dist; } ok[] = {
        {"lbp", "lbp:P=8,R=1,method=default,mapping=none,grid=1x1,norm=l1,distance=chi2,vbins=16",
         256, PATINA_ELEM_F32, "chi2"},
        {"lbp:P=8,R=1,method=uniform", NULL, 10, PATINA_ELEM_F32, "chi2"},
        {"lbp:P=24,R=3,method=nri_uniform,grid=2x2,norm=counts", NULL, 4 * 555,
         PATINA_ELEM_U32, "chi2"},
        {"lbp:P=16,R=2,method=ror,distance=hellinger", NULL, 4116, PATINA_ELEM_F32, "hellinger"},
        {"lbp:P=8,R=1.5,method=var,vbins=32", NULL, 32, PATINA_ELEM_F32, "chi2"},
        {"lbp:P=24,R=3,method=ror,mapping=riu2", NULL, 26, PATINA_ELEM_F32, "chi2"},
        {"lbp8", "lbp8:mapping=none,grid=1x1,norm=l1,distance=chi2", 256, PATINA_ELEM_F32, "chi2"},
        {"lbp8:mapping=u2,grid=4x4", NULL, 16 * 59, PATINA_ELEM_F32, "chi2"},
        {"tlbap", "tlbap:th=0.9,mapping=none,grid=1x1,norm=l1,distance=chi2", 256,
         PATINA_ELEM_F32, "chi2"},
        {"tlbap:th=0.5,norm=counts,distance=l1", NULL, 256, PATINA_ELEM_U32, "l1"},
        {"lanadp:mapping=riu2,distance=intersection", NULL, 10, PATINA_ELEM_F32, "intersection"},
    };
    static const char *const bad[] = {
        "lbp:P=0", "lbp:P=33", "lbp:R=0", "lbp:R=-1", "lbp:method=median",
        "lbp:P=24,R=3", "lbp:P=17,method=ror", "lbp:method=uniform,mapping=u2",
        "lbp:P=17,method=ror,mapping=ri",
        "lbp:grid=0x1", "lbp:grid=4", "lbp:grid=4X4", "lbp:grid=04x4", "lbp:grid=300x1",
        "tlbap:th=0", "tlbap:th=1.5", "lbp8:th=0.5", "lanadp:P=8", "lbp:R=1e-50",
        "lbp:P=16,grid=16x16",
    };
    size_t i;
    (void)state;
    for (i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        patina_extractor_t *ex;
        TU_OK(patina_extractor_new(&ex, ok[i].spec));
        if (ok[i].canon) assert_string_equal(patina_extractor_spec(ex), ok[i].canon);
        assert_int_equal(patina_extractor_dim(ex), ok[i].dim);
        assert_int_equal(patina_extractor_elem(ex), ok[i].el);
        assert_string_equal(patina_extractor_distance_name(ex), ok[i].dist);
        assert_true(patina_extractor_has_codemap(ex));
        patina_extractor_free(ex);
    }
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        patina_extractor_t *ex = NULL;
        patina_status s = patina_extractor_new(&ex, bad[i]);
        if (s == PATINA_OK) fail_msg("'%s' was accepted", bad[i]);
        assert_null(ex);
        assert_true(strlen(patina_last_error()) > 0);
    }
}

/* extract_batch on the CPU = the histogram of the reference code map of the
 * image's grey version; the code-map call = the reference map. */
static void test_family_extract(void **state)
{
    static const char *const specs[] = {
        "lbp:P=8,R=1,method=uniform,norm=counts", "lbp:P=16,R=2,method=nri_uniform,grid=2x3",
        "lbp:P=8,R=2.5,method=var", "lbp8:grid=3x3,norm=counts", "tlbap:th=0.8",
        "lanadp:mapping=ri,norm=counts", "lbp:P=12,R=1.3,method=ror,norm=counts",
    };
    patina_context_t *ctx;
    patina_context_opts_t co = {0};
    patina_image_t imgs[3];
    tu_rng_t r;
    size_t s, i;
    (void)state;
    co.threads = 2;
    TU_OK(patina_context_new(&ctx, &co));
    tu_rng_seed(&r, 9);
    tu_random_image(&imgs[0], 45, 31, 1, &r);
    tu_random_image(&imgs[1], 2, 2, 0, &r);
    tu_random_image(&imgs[2], 70, 66, 2, &r);
    for (s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        patina_extractor_t *ex;
        size_t bytes;
        unsigned char *out;
        patina_status st[3];
        lbp_opts_t o;
        TU_OK(patina_extractor_new(&ex, specs[s]));
        bytes = patina_extractor_bytes(ex);
        out = malloc(3 * bytes);
        TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, out, imgs, 3, st));
        /* the same options, resolved directly */
        {
            const char *colon = strchr(specs[s], ':');
            char fam[16];
            int kind;
            snprintf(fam, sizeof fam, "%.*s", (int)(colon - specs[s]), specs[s]);
            kind = !strcmp(fam, "lbp") ? 0 : !strcmp(fam, "lbp8") ? 1 : !strcmp(fam, "tlbap") ? 2 : 3;
            memset(&o, 0, sizeof o);
            (void)o;
            for (i = 0; i < 3; i++) {
                uint8_t *g = malloc((size_t)imgs[i].width * (size_t)imgs[i].height);
                patina_codemap_t ref, got;
                lbp_conf_t c;
                uint32_t *counts;
                unsigned char *want = malloc(bytes);
                assert_int_equal(st[i], PATINA_OK);
                TU_OK(patina_image_to_grey(g, &imgs[i]));
                /* re-derive the conf from the extractor's canonical spec */
                {
                    lbp_opts_t oo;
                    const char *sp = strchr(patina_extractor_spec(ex), ':') + 1;
                    char buf[512], *tok, *save = NULL;
                    memset(&oo, 0, sizeof oo);
                    oo.P = 8; oo.R = 1; oo.th = 0.9; oo.vbins = 16;
                    snprintf(buf, sizeof buf, "%s", sp);
                    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                        char *eq = strchr(tok, '=');
                        *eq = 0;
                        if (!strcmp(tok, "P")) oo.P = atoi(eq + 1);
                        else if (!strcmp(tok, "R")) oo.R = atof(eq + 1);
                        else if (!strcmp(tok, "th")) oo.th = atof(eq + 1);
                        else if (!strcmp(tok, "vbins")) oo.vbins = atoi(eq + 1);
                        else if (!strcmp(tok, "grid")) snprintf(oo.grid, sizeof oo.grid, "%s", eq + 1);
                        else if (!strcmp(tok, "norm")) oo.norm = !strcmp(eq + 1, "l1");
                        else if (!strcmp(tok, "mapping"))
                            oo.mapping = !strcmp(eq + 1, "u2") ? 1 : !strcmp(eq + 1, "ri") ? 2 : !strcmp(eq + 1, "riu2") ? 3 : 0;
                        else if (!strcmp(tok, "method"))
                            oo.method = !strcmp(eq + 1, "ror") ? 1 : !strcmp(eq + 1, "uniform") ? 2
                                      : !strcmp(eq + 1, "nri_uniform") ? 3 : !strcmp(eq + 1, "var") ? 4 : 0;
                    }
                    TU_OK(lbp_conf_resolve(&c, kind, &oo, "test"));
                }
                counts = malloc(lbp_dim(&c) * sizeof *counts);
                TU_OK(lbp_ref_codes(&ref, &c, g, imgs[i].width, imgs[i].height, (size_t)imgs[i].width));
                lbp_hist_counts(counts, &c, &ref);
                lbp_hist_finish(want, &c, counts);
                assert_memory_equal(out + i * bytes, want, bytes);
                TU_OK(patina_extract_codemap(ctx, ex, &got, &imgs[i]));
                assert_int_equal(got.width, ref.width);
                assert_int_equal(got.height, ref.height);
                assert_int_equal(got.elem, ref.elem);
                if (ref.data)
                    for (size_t p = 0; p < (size_t)ref.width * (size_t)ref.height; p++) {
                        double a = lbp_map_get(&ref, p), b = lbp_map_get(&got, p);
                        assert_true(a == b || (isnan(a) && isnan(b)));
                    }
                patina_codemap_release(&ref);
                patina_codemap_release(&got);
                free(counts);
                free(want);
                free(g);
            }
        }
        /* distance of a descriptor to itself */
        assert_true(patina_extractor_distance(ex, out, out) == 0.0);
        free(out);
        patina_extractor_free(ex);
    }
    for (i = 0; i < 3; i++) patina_image_release(&imgs[i]);
    /* a family without code maps */
    {
        patina_extractor_t *ex;
        patina_codemap_t m;
        patina_image_t img;
        tu_random_image(&img, 8, 8, 0, &r);
        TU_OK(patina_extractor_new(&ex, "cedd"));
        assert_false(patina_extractor_has_codemap(ex));
        assert_int_equal(patina_extract_codemap(ctx, ex, &m, &img), PATINA_E_UNAVAILABLE);
        patina_extractor_free(ex);
        patina_image_release(&img);
    }
    patina_context_free(ctx);
}

/* ------------------------------------------------------------ code map files */

static void test_codemap_files(void **state)
{
    char *dir = tu_tempdir("lbpmap");
    char path[512];
    patina_codemap_t m;
    unsigned char buf[256];
    FILE *f;
    size_t got;
    (void)state;
    assert_non_null(dir);
    /* 8-bit */
    TU_OK(lbp_map_alloc(&m, 3, 2, PATINA_ELEM_U16));
    for (int i = 0; i < 6; i++) ((uint16_t *)m.data)[i] = (uint16_t)(i * 50);
    snprintf(path, sizeof path, "%s/a.pgm", dir);
    TU_OK(patina_codemap_write(&m, path));
    f = fopen(path, "rb");
    got = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_int_equal(got, 11 + 6);
    assert_memory_equal(buf, "P5\n3 2\n255\n", 11);
    assert_int_equal(buf[11 + 5], 250);
    /* 16-bit big-endian */
    ((uint16_t *)m.data)[5] = 300;
    TU_OK(patina_codemap_write(&m, path));
    f = fopen(path, "rb");
    got = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_int_equal(got, 13 + 12);
    assert_memory_equal(buf, "P5\n3 2\n65535\n", 13);
    assert_int_equal(buf[13 + 10], 1);
    assert_int_equal(buf[13 + 11], 300 - 256);
    patina_codemap_release(&m);
    /* wider than 16 bits: PAM, 4 big-endian bytes a pixel */
    TU_OK(lbp_map_alloc(&m, 2, 1, PATINA_ELEM_U32));
    ((uint32_t *)m.data)[0] = 0x01020304u;
    ((uint32_t *)m.data)[1] = 0xfffffffeu;
    TU_OK(patina_codemap_write(&m, path));
    f = fopen(path, "rb");
    got = fread(buf, 1, sizeof buf, f);
    fclose(f);
    {
        const char *hdr = "P7\nWIDTH 2\nHEIGHT 1\nDEPTH 2\nMAXVAL 65535\nTUPLTYPE PATINA_CODE32\nENDHDR\n";
        size_t hl = strlen(hdr);
        assert_int_equal(got, hl + 8);
        assert_memory_equal(buf, hdr, hl);
        assert_memory_equal(buf + hl, "\x01\x02\x03\x04\xff\xff\xff\xfe", 8);
    }
    patina_codemap_release(&m);
    /* empty map: a header only */
    TU_OK(lbp_map_alloc(&m, 0, 0, PATINA_ELEM_U8));
    TU_OK(patina_codemap_write(&m, path));
    patina_codemap_release(&m);
    /* var: PFM, bottom row first, little-endian float */
    TU_OK(lbp_map_alloc(&m, 1, 2, PATINA_ELEM_F64));
    ((double *)m.data)[0] = 1.5;
    ((double *)m.data)[1] = -2.0;
    snprintf(path, sizeof path, "%s/v.pfm", dir);
    TU_OK(patina_codemap_write(&m, path));
    f = fopen(path, "rb");
    got = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_int_equal(got, 12 + 8);
    assert_memory_equal(buf, "Pf\n1 2\n-1.0\n", 12);
    {
        float a, b;
        memcpy(&a, buf + 12, 4);
        memcpy(&b, buf + 16, 4);
        assert_true(a == -2.0f && b == 1.5f); /* little-endian host assumed */
    }
    patina_codemap_release(&m);
    /* unwritable */
    snprintf(path, sizeof path, "%s/no/such/dir.pgm", dir);
    TU_OK(lbp_map_alloc(&m, 1, 1, PATINA_ELEM_U8));
    assert_int_equal(patina_codemap_write(&m, path), PATINA_E_IO);
    patina_codemap_release(&m);
    patina_codemap_release(NULL);
    tu_remove_tree(dir);
    free(dir);
}


/* ------------------------------------------------------------ CLI --map */

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf;
    long len;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)len + 1);
    *n = fread(buf, 1, (size_t)len, f);
    fclose(f);
    return buf;
}

/* `patina extract -f FAMILY --map DIR IMAGE` writes DIR/<base>.pgm holding
 * the reference code map: 8-bit, 16-bit big-endian, PAM and PFM cases. */
static void test_cli_map(void **state)
{
    static const struct { const char *spec; int kind; const char *opts; const char *ext; int bytes; } cases[] = {
        {"lbp8", LBP_KIND_LBP8, NULL, "pgm", 1},
        {"tlbap:th=0.7", LBP_KIND_TLBAP, "th=0.7", "pgm", 1},
        {"lanadp", LBP_KIND_LANADP, NULL, "pgm", 1},
        {"lbp:P=8,R=1,method=uniform", LBP_KIND_CIRCULAR, "P=8;R=1;method=2", "pgm", 1},
        {"lbp:P=16,R=2", LBP_KIND_CIRCULAR, "P=16;R=2", "pgm", 2},
        {"lbp:P=20,R=2.5,mapping=riu2", LBP_KIND_CIRCULAR, "P=20;R=2.5;mapping=3", "pgm", 4},
        {"lbp:P=8,R=1,method=var", LBP_KIND_CIRCULAR, "P=8;R=1;method=4", "pfm", 8},
    };
    char *dir = tu_tempdir("lbpcli");
    char img[512], out[512], *log = NULL;
    const int w = 29, h = 23;
    uint8_t g[29 * 23];
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 77);
    for (int i = 0; i < w * h; i++) g[i] = (uint8_t)(tu_rng_below(&r, 4) * 70 + (i % 7 == 0));
    snprintf(img, sizeof img, "%s/some.photo.pgm", dir);
    {
        char hdr[32];
        int n = snprintf(hdr, sizeof hdr, "P5\n%d %d\n255\n", w, h);
        unsigned char buf[32 + 29 * 23];
        memcpy(buf, hdr, (size_t)n);
        memcpy(buf + n, g, sizeof g);
        assert_int_equal(tu_write_file(img, buf, (size_t)n + sizeof g), 0);
    }
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        lbp_conf_t c = conf(cases[k].kind, cases[k].opts);
        patina_codemap_t ref;
        unsigned char *file;
        size_t n, hl;
        char hdr[160];
        int rc = tu_run(&log, "%s extract -f '%s' --map '%s/maps' '%s' 2>&1", PATINA_CLI, cases[k].spec, dir, img);
        if (rc != 0) fail_msg("%s: exit %d: %s", cases[k].spec, rc, log ? log : "");
        assert_non_null(strstr(log, "some.photo.pgm,")); /* the histogram line */
        free(log);
        snprintf(out, sizeof out, "%s/maps/some.photo.%s", dir, cases[k].ext);
        file = slurp(out, &n);
        if (!file) fail_msg("%s: no %s", cases[k].spec, out);
        TU_OK(lbp_ref_codes(&ref, &c, g, w, h, (size_t)w));
        if (cases[k].bytes == 8)
            snprintf(hdr, sizeof hdr, "Pf\n%d %d\n-1.0\n", ref.width, ref.height);
        else if (cases[k].bytes == 4)
            snprintf(hdr, sizeof hdr, "P7\nWIDTH %d\nHEIGHT %d\nDEPTH 2\nMAXVAL 65535\nTUPLTYPE PATINA_CODE32\nENDHDR\n",
                     ref.width, ref.height);
        else
            snprintf(hdr, sizeof hdr, "P5\n%d %d\n%d\n", ref.width, ref.height, cases[k].bytes == 1 ? 255 : 65535);
        hl = strlen(hdr);
        assert_true(n >= hl);
        if (memcmp(file, hdr, hl) != 0) fail_msg("%s: header '%.*s'", cases[k].spec, (int)hl, file);
        {
            int bytes = cases[k].bytes == 8 ? 4 : cases[k].bytes;
            assert_int_equal(n, hl + (size_t)ref.width * (size_t)ref.height * (size_t)bytes);
            for (int y = 0; y < ref.height; y++)
                for (int x = 0; x < ref.width; x++) {
                    size_t i = (size_t)y * (size_t)ref.width + (size_t)x;
                    double want = lbp_map_get(&ref, i);
                    if (bytes == 4 && cases[k].bytes == 8) {
                        /* PFM: bottom row first, float32 little-endian */
                        size_t j = (size_t)(ref.height - 1 - y) * (size_t)ref.width + (size_t)x;
                        float v;
                        memcpy(&v, file + hl + 4 * j, 4);
                        assert_true(v == (float)want || (isnan(v) && isnan(want)));
                    } else {
                        uint32_t v = 0;
                        for (int b = 0; b < bytes; b++) v = v << 8 | file[hl + (size_t)bytes * i + (size_t)b];
                        if (v != (uint32_t)want) fail_msg("%s: code (%d,%d) %u, want %u", cases[k].spec, x, y, v, (uint32_t)want);
                    }
                }
        }
        patina_codemap_release(&ref);
        free(file);
    }
    /* a family without code maps is a usage error */
    assert_int_equal(tu_run(NULL, "%s extract -f cedd --map '%s/maps' '%s' >/dev/null 2>&1", PATINA_CLI, dir, img), 2);
    tu_remove_tree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lbp8_windows),
        cmocka_unit_test(test_tlbap_figure2),
        cmocka_unit_test(test_lanadp_windows),
        cmocka_unit_test(test_circular_hand),
        cmocka_unit_test(test_pattern_codes),
        cmocka_unit_test(test_tlbap_threshold_table),
        cmocka_unit_test(test_degenerate_shapes),
        cmocka_unit_test(test_fast_equals_reference),
        cmocka_unit_test(test_fast_bands),
        cmocka_unit_test(test_mappings),
        cmocka_unit_test(test_grid_cells),
        cmocka_unit_test(test_hist_finish),
        cmocka_unit_test(test_distances),
        cmocka_unit_test(test_families),
        cmocka_unit_test(test_family_extract),
        cmocka_unit_test(test_codemap_files),
        cmocka_unit_test(test_cli_map),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
