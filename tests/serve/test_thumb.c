/* Unit tests of src/serve/thumb.c, the server's thumbnails: the size rule
 * (never enlarged, the longer side N, 1xN images), the area downscale
 * against averages computed by hand (2x2 blocks, a 3-to-2 resampling with
 * half-covered pixels) and against its definition (every thumbnail pixel
 * the overlap-weighted mean of the source pixels, each overlap computed
 * directly) on odd sizes, one-row and one-column images and a padded
 * stride; the JPEG encoding (decoded back with the library's loader); and
 * the cache (hits, misses, least recently used out first, the byte bound). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "serve/internal.h"

static void test_size(void **state)
{
    int w, h;
    (void)state;
    thumb_size(2560, 1600, 256, &w, &h);
    assert_int_equal(w, 256);
    assert_int_equal(h, 160);
    thumb_size(1707, 2560, 256, &w, &h); /* 170.7 rounds to 171 */
    assert_int_equal(w, 171);
    assert_int_equal(h, 256);
    thumb_size(100, 80, 256, &w, &h); /* never enlarged */
    assert_int_equal(w, 100);
    assert_int_equal(h, 80);
    thumb_size(256, 10, 256, &w, &h);
    assert_int_equal(w, 256);
    assert_int_equal(h, 10);
    thumb_size(1, 5000, 32, &w, &h); /* the short side stays at least 1 */
    assert_int_equal(w, 1);
    assert_int_equal(h, 32);
    thumb_size(5000, 1, 32, &w, &h);
    assert_int_equal(w, 32);
    assert_int_equal(h, 1);
}

/* The definition: the overlap of source pixel i ([i, i+1) scaled by d/s)
 * with thumbnail pixel x ([x, x+1)), in units of 1/(s*d): the length of
 * [i*d, (i+1)*d) & [x*s, (x+1)*s). */
static uint64_t overlap(int i, int x, int s, int d)
{
    uint64_t lo = (uint64_t)i * d > (uint64_t)x * s ? (uint64_t)i * d : (uint64_t)x * s;
    uint64_t hi = (uint64_t)(i + 1) * d < (uint64_t)(x + 1) * s ? (uint64_t)(i + 1) * d : (uint64_t)(x + 1) * s;
    return hi > lo ? hi - lo : 0;
}

static void reference(uint8_t *dst, int dw, int dh, const uint8_t *src, int sw, int sh, size_t stride)
{
    int x, y, i, j, c;
    for (y = 0; y < dh; y++)
        for (x = 0; x < dw; x++)
            for (c = 0; c < 3; c++) {
                uint64_t sum = 0, area = 0;
                for (j = 0; j < sh; j++)
                    for (i = 0; i < sw; i++) {
                        uint64_t w = overlap(i, x, sw, dw) * overlap(j, y, sh, dh);
                        sum += w * src[(size_t)j * stride + 3 * (size_t)i + (size_t)c];
                        area += w;
                    }
                assert_int_equal(area, (uint64_t)sw * (uint64_t)sh); /* every pixel wholly covered */
                dst[(size_t)y * 3 * dw + 3 * (size_t)x + (size_t)c] = (uint8_t)((sum + area / 2) / area);
            }
}

static void test_by_hand(void **state)
{
    /* 4x2 -> 2x1: each thumbnail pixel the mean of a 2x2 block */
    static const uint8_t src[2 * 12] = {
        10, 0, 255, 20, 0, 255, 100, 1, 0, 200, 2, 0,
        30, 0, 255, 41, 1, 255, 100, 1, 0, 201, 2, 1,
    };
    /* 3x1 -> 2x1: [a, b, c] -> [(2a + b) / 3, (b + 2c) / 3], b half in each */
    static const uint8_t row3[9] = {0, 30, 255, 90, 60, 0, 255, 90, 100};
    uint8_t dst[6];
    (void)state;
    assert_int_equal(thumb_downscale(dst, 2, 1, src, 4, 2, 12), 0);
    assert_int_equal(dst[0], 25);  /* (10 + 20 + 30 + 41) / 4 = 25.25 */
    assert_int_equal(dst[1], 0);   /* 1 / 4 rounds down */
    assert_int_equal(dst[2], 255);
    assert_int_equal(dst[3], 150); /* (100 + 200 + 100 + 201) / 4 = 150.25 */
    assert_int_equal(dst[4], 2);   /* 6 / 4 = 1.5 rounds half up */
    assert_int_equal(dst[5], 0);   /* 1 / 4 */
    assert_int_equal(thumb_downscale(dst, 2, 1, row3, 3, 1, 9), 0);
    assert_int_equal(dst[0], 30);  /* (0 + 90) / 3 */
    assert_int_equal(dst[1], 40);  /* (60 + 60) / 3 */
    assert_int_equal(dst[2], 170); /* (510 + 0) / 3 */
    assert_int_equal(dst[3], 200); /* (90 + 510) / 3 */
    assert_int_equal(dst[4], 80);  /* (60 + 180) / 3 */
    assert_int_equal(dst[5], 67);  /* (0 + 200) / 3 = 66.7 */
    /* a constant image stays constant (no ringing, no drift) */
    {
        uint8_t flat[7 * 5 * 3], out[3 * 2 * 3];
        memset(flat, 173, sizeof flat);
        assert_int_equal(thumb_downscale(out, 3, 2, flat, 7, 5, 21), 0);
        for (size_t k = 0; k < sizeof out; k++) assert_int_equal(out[k], 173);
    }
    /* bad sizes: enlarging, empty */
    assert_int_equal(thumb_downscale(dst, 2, 1, row3, 1, 1, 3), -1);
    assert_int_equal(thumb_downscale(dst, 0, 1, row3, 3, 1, 9), -1);
    assert_int_equal(thumb_downscale(dst, 2, 1, row3, 3, 1, 8), -1); /* stride under 3 * width */
}

static void test_definition(void **state)
{
    /* (sw, sh, dw, dh): odd sizes, prime ratios, one row, one column, 1x1,
     * no change, and a long side cut to 1/7 */
    static const int cases[][4] = {{7, 5, 3, 2},  {13, 11, 5, 4},  {1, 9, 1, 4},    {9, 1, 4, 1},    {1, 1, 1, 1},
                                   {6, 4, 6, 4},  {64, 3, 9, 1},   {31, 17, 31, 9}, {100, 1, 33, 1}, {5, 7, 1, 1},
                                   {23, 29, 7, 11}, {2, 2, 1, 1}};
    size_t t;
    unsigned seed = 12345;
    (void)state;
    for (t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        int sw = cases[t][0], sh = cases[t][1], dw = cases[t][2], dh = cases[t][3];
        size_t stride = 3 * (size_t)sw + 5; /* rows padded: the stride is honoured */
        uint8_t *src = malloc(stride * (size_t)sh), *got = malloc(3 * (size_t)dw * dh),
                *want = malloc(3 * (size_t)dw * dh);
        size_t k;
        for (k = 0; k < stride * (size_t)sh; k++) {
            seed = seed * 1103515245u + 12345u;
            src[k] = (uint8_t)(seed >> 16);
        }
        assert_int_equal(thumb_downscale(got, dw, dh, src, sw, sh, stride), 0);
        reference(want, dw, dh, src, sw, sh, stride);
        for (k = 0; k < 3 * (size_t)dw * dh; k++)
            if (got[k] != want[k])
                fail_msg("%dx%d -> %dx%d: byte %zu is %u, the definition gives %u", sw, sh, dw, dh, k, got[k], want[k]);
        free(src);
        free(got);
        free(want);
    }
}

static void test_jpeg(void **state)
{
    uint8_t rgb[40 * 24 * 3], *jpeg = NULL;
    size_t size = 0, k;
    char err[256];
    patina_image_t img;
    (void)state;
    for (k = 0; k < sizeof rgb; k++) rgb[k] = (uint8_t)(k % 3 == 0 ? 200 : k % 3 == 1 ? 100 : 50);
    assert_int_equal(thumb_jpeg(&jpeg, &size, rgb, 40, 24, THUMB_QUALITY, err, sizeof err), 0);
    assert_true(size > 100 && jpeg[0] == 0xff && jpeg[1] == 0xd8);
    assert_int_equal(patina_format_sniff(jpeg, size), PATINA_FORMAT_JPEG);
    assert_int_equal(patina_image_decode(&img, jpeg, size, NULL, "thumb"), PATINA_OK);
    assert_int_equal(img.width, 40);
    assert_int_equal(img.height, 24);
    /* a flat colour comes back within JPEG's rounding */
    assert_true(abs(img.data[0] - 200) <= 3 && abs(img.data[1] - 100) <= 3 && abs(img.data[2] - 50) <= 3);
    patina_image_release(&img);
    free(jpeg);
}

static void test_cache(void **state)
{
    uint8_t a[32] = {1}, b[32] = {2}, c[32] = {3}, blob[100], *got;
    size_t size;
    thumb_stats_t st;
    thumb_cache_t *tc = thumb_cache_new(250);
    (void)state;
    memset(blob, 7, sizeof blob);
    assert_non_null(tc);
    assert_int_equal(thumb_cache_get(tc, a, 256, &got, &size), 0);
    thumb_cache_put(tc, a, 256, blob, 100);
    thumb_cache_put(tc, b, 256, blob, 100);
    assert_int_equal(thumb_cache_get(tc, a, 128, &got, &size), 0); /* another N is another thumbnail */
    assert_int_equal(thumb_cache_get(tc, a, 256, &got, &size), 1); /* a is now the most recent */
    assert_int_equal(size, 100);
    assert_memory_equal(got, blob, 100);
    free(got);
    thumb_cache_put(tc, c, 256, blob, 100); /* 300 > 250: b, the least recent, goes */
    assert_int_equal(thumb_cache_get(tc, b, 256, &got, &size), 0);
    assert_int_equal(thumb_cache_get(tc, a, 256, &got, &size), 1);
    free(got);
    assert_int_equal(thumb_cache_get(tc, c, 256, &got, &size), 1);
    free(got);
    thumb_cache_put(tc, b, 256, blob, 251); /* larger than the whole cache: not kept, nothing dropped */
    thumb_cache_put(tc, c, 256, blob, 50);  /* the same key again: replaced */
    thumb_cache_stats(tc, &st);
    assert_int_equal(st.entries, 2);
    assert_int_equal(st.bytes, 150);
    assert_int_equal(st.hits, 3);
    assert_int_equal(st.misses, 3);
    assert_int_equal(st.evictions, 1);
    /* many entries: the table grows, every one found, the bound held */
    thumb_cache_free(tc);
    tc = thumb_cache_new(100000);
    for (int i = 0; i < 3000; i++) {
        uint8_t k[32] = {0};
        memcpy(k, &i, sizeof i);
        thumb_cache_put(tc, k, 64, blob, 30);
    }
    thumb_cache_stats(tc, &st);
    assert_int_equal(st.entries, 3000);
    for (int i = 0; i < 3000; i++) {
        uint8_t k[32] = {0};
        memcpy(k, &i, sizeof i);
        assert_int_equal(thumb_cache_get(tc, k, 64, &got, &size), 1);
        free(got);
    }
    for (int i = 3000; i < 4000; i++) {
        uint8_t k[32] = {0};
        memcpy(k, &i, sizeof i);
        thumb_cache_put(tc, k, 64, blob, 30);
    }
    thumb_cache_stats(tc, &st);
    assert_true(st.bytes <= 100000 && st.entries == 3333);
    thumb_cache_free(tc);
    /* a cache of 0 bytes keeps nothing */
    tc = thumb_cache_new(0);
    thumb_cache_put(tc, a, 256, blob, 1);
    assert_int_equal(thumb_cache_get(tc, a, 256, &got, &size), 0);
    thumb_cache_free(tc);
    thumb_cache_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_size),       cmocka_unit_test(test_by_hand), cmocka_unit_test(test_definition),
        cmocka_unit_test(test_jpeg),       cmocka_unit_test(test_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
