/* Tests for image loading (src/image): every PNG type the CEDD spec lists
 * (cedd.md §1), written here with libpng (or byte by byte, for odd files)
 * from known samples and checked pixel by pixel against expected values
 * computed in this file from the formulas in docs/images.md (floating point,
 * independently of the library's integer code). Where the spec is silent
 * (grey+tRNS, 16-bit grey+alpha, palette quirks) the formulas are the ones
 * OpenJDK 17 ImageIO was observed to follow on these very files. Also: JPEG
 * round trips through TurboJPEG; binary PNM; probe without decoding;
 * truncation, corruption, limits and I/O errors, each checking that the
 * message names the input; memory vs file input; several threads. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>
#include <turbojpeg.h>
#include <jpeglib.h>

#include "testutil.h"

static char *g_dir; /* temp dir for this run */

static const char *tpath(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", g_dir, name);
    return buf;
}

/* ---------------------------------------------------- expected values */

/* The spec's formulas in floating point. None of these has an exact .5 tie
 * (255 and 257 are odd), so floor(x + 0.5) is the rounding. */
static int exp_over(int c, int a) { return (int)floor(c * a / 255.0 + 0.5); }
static int exp_r16(int v) { return (int)floor(v / 257.0 + 0.5); }
static double srgb_enc(double x) { return x <= 0.0031308 ? 12.92 * x : 1.055 * pow(x, 1.0 / 2.4) - 0.055; }
static int exp_lift(int g) { return (int)floor(255.0 * srgb_enc(g / 255.0) + 0.5); }
static int exp_lift16(int v) { return (int)floor(255.0 * srgb_enc(v / 65535.0) + 0.5); }

/* Compares img with expected (h, w, 3) RGB, printing the first mismatches. */
static void expect_pixels(const patina_image_t *img, const uint8_t *want, int w, int h, const char *what)
{
    int x, y, c, bad = 0;
    assert_int_equal(img->width, w);
    assert_int_equal(img->height, h);
    for (y = 0; y < h; y++)
        for (x = 0; x < w; x++)
            for (c = 0; c < 3; c++) {
                int got = img->data[(size_t)y * img->stride + 3 * (size_t)x + c];
                int exp = want[((size_t)y * w + x) * 3 + c];
                if (got != exp && bad++ < 5)
                    print_error("%s: pixel (%d,%d) channel %d: got %d, want %d\n", what, x, y, c, got, exp);
            }
    if (bad) fail_msg("%s: %d mismatching samples", what, bad);
}

static void expect_error(patina_status got, patina_status want, const char *name, const char *needle)
{
    const char *msg = patina_last_error();
    if (got != want)
        fail_msg("status %s (%s), want %s", patina_status_str(got), msg, patina_status_str(want));
    if (!strstr(msg, name)) fail_msg("message '%s' does not name '%s'", msg, name);
    if (needle && !strstr(msg, needle)) fail_msg("message '%s' lacks '%s'", msg, needle);
}

/* Loads `path` from the file and decodes its bytes from memory; both must
 * give the same pixels (returned in img), and probe must agree on the size. */
static void load_both(patina_image_t *img, const char *path, patina_format fmt)
{
    patina_image_t mem;
    patina_image_info_t info;
    size_t size;
    uint8_t *bytes = tu_read_file(path, &size);
    int y;
    TU_OK(patina_image_load(img, path, NULL));
    TU_OK(patina_image_decode(&mem, bytes, size, NULL, "memory copy"));
    TU_OK(patina_image_probe(&info, bytes, size, path));
    assert_int_equal(patina_format_sniff(bytes, size), fmt);
    assert_int_equal(info.format, fmt);
    assert_int_equal(info.width, img->width);
    assert_int_equal(info.height, img->height);
    assert_int_equal(mem.width, img->width);
    assert_int_equal(mem.height, img->height);
    assert_true(img->owned);
    assert_true(img->stride >= 3 * (size_t)img->width);
    for (y = 0; y < img->height; y++)
        assert_memory_equal(img->data + (size_t)y * img->stride, mem.data + (size_t)y * mem.stride,
                            3 * (size_t)img->width);
    patina_image_release(&mem);
    free(bytes);
}

/* ---------------------------------------------------------- PNG writer */

typedef struct png_spec {
    int w, h, ctype, depth, interlace;
    const uint16_t *samples;      /* (h, w, channels) values at `depth` bits */
    const png_color *pal;         /* palette types: npal entries */
    int npal;
    const uint8_t *trans;         /* palette alpha, ntrans entries */
    int ntrans;
    const png_color_16 *key;      /* grey/RGB tRNS colour key */
    int gama;                     /* 1: gAMA 1.0; 2: sRGB chunk */
} png_spec_t;

static int channels_of(int ctype)
{
    return ctype == 0 || ctype == 3 ? 1 : ctype == 4 ? 2 : ctype == 2 ? 3 : 4;
}

/* Packs samples into PNG row bytes by hand (MSB first below 8 bits,
 * big-endian at 16) so that the writer uses no libpng transform. */
static void write_png(const char *path, const png_spec_t *sp)
{
    png_structp png;
    png_infop info;
    FILE *f = fopen(path, "wb");
    int ch = channels_of(sp->ctype), y, x;
    size_t rowbytes = ((size_t)sp->w * ch * sp->depth + 7) / 8;
    uint8_t *rows = calloc((size_t)sp->h, rowbytes); /* (h, rowbytes) u8 */
    png_bytep *rowp = malloc(sizeof *rowp * (size_t)sp->h);
    if (!f || !rows || !rowp) fail_msg("write_png setup %s", path);
    for (y = 0; y < sp->h; y++) {
        uint8_t *r = rows + (size_t)y * rowbytes;
        rowp[y] = r;
        for (x = 0; x < sp->w * ch; x++) {
            unsigned v = sp->samples[(size_t)y * sp->w * ch + x];
            if (sp->depth == 16) {
                r[2 * x] = (uint8_t)(v >> 8);
                r[2 * x + 1] = (uint8_t)v;
            } else if (sp->depth == 8) {
                r[x] = (uint8_t)v;
            } else {
                int per = 8 / sp->depth;
                int shift = 8 - sp->depth * (x % per + 1);
                r[x / per] |= (uint8_t)(v << shift);
            }
        }
    }
    png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    info = png ? png_create_info_struct(png) : NULL;
    if (!info) fail_msg("png_create_write_struct");
    if (setjmp(png_jmpbuf(png))) fail_msg("libpng write error for %s", path);
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)sp->w, (png_uint_32)sp->h, sp->depth, sp->ctype,
                 sp->interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (sp->pal) png_set_PLTE(png, info, sp->pal, sp->npal);
    if (sp->trans || sp->key)
        png_set_tRNS(png, info, sp->trans, sp->ntrans, (png_color_16p)sp->key);
    if (sp->gama == 1) png_set_gAMA(png, info, 1.0);
    if (sp->gama == 2) png_set_sRGB(png, info, PNG_sRGB_INTENT_PERCEPTUAL);
    png_write_info(png, info);
    if (sp->interlace) png_set_interlace_handling(png);
    png_write_image(png, rowp);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    fclose(f);
    free(rows);
    free(rowp);
}

/* Writes the spec, loads it (file and memory), compares with want. */
static void png_case(const char *name, const png_spec_t *sp, const uint8_t *want)
{
    char path[512];
    patina_image_t img;
    patina_image_info_t info;
    size_t size;
    uint8_t *bytes;
    tpath(path, sizeof path, name);
    write_png(path, sp);
    load_both(&img, path, PATINA_FORMAT_PNG);
    expect_pixels(&img, want, sp->w, sp->h, name);
    patina_image_release(&img);
    bytes = tu_read_file(path, &size);
    TU_OK(patina_image_probe(&info, bytes, size, name));
    assert_int_equal(info.bit_depth, sp->depth);
    assert_int_equal(info.channels, sp->ctype == 3 ? 3 : channels_of(sp->ctype));
    free(bytes);
}

static uint16_t *new_samples(int w, int h, int ch) { return calloc((size_t)w * h * ch, sizeof(uint16_t)); }
static uint8_t *new_rgb(int w, int h) { return calloc((size_t)w * h * 3, 1); }

/* ---------------------------------------------------------- PNG tests */

static void test_png_rgb8(void **state)
{
    int il;
    tu_rng_t r;
    (void)state;
    for (il = 0; il < 2; il++) {
        int w = 37, h = 23, i;
        uint16_t *s = new_samples(w, h, 3);
        uint8_t *want = new_rgb(w, h);
        png_spec_t sp = {w, h, PNG_COLOR_TYPE_RGB, 8, il, s, NULL, 0, NULL, 0, NULL, 0};
        tu_rng_seed(&r, 1 + (uint64_t)il);
        for (i = 0; i < w * h * 3; i++) want[i] = (uint8_t)(s[i] = (uint16_t)tu_rng_below(&r, 256));
        png_case(il ? "rgb8_adam7.png" : "rgb8.png", &sp, want);
        /* gAMA and sRGB chunks change nothing */
        sp.gama = 1;
        png_case("rgb8_gama1.png", &sp, want);
        sp.gama = 2;
        png_case("rgb8_srgb.png", &sp, want);
        free(s);
        free(want);
    }
}

static void test_png_one_pixel(void **state)
{
    uint16_t s[3] = {12, 200, 77};
    uint8_t want[3] = {12, 200, 77};
    png_spec_t sp = {1, 1, PNG_COLOR_TYPE_RGB, 8, 0, s, NULL, 0, NULL, 0, NULL, 0};
    (void)state;
    png_case("one.png", &sp, want);
    sp.interlace = 1;
    png_case("one_adam7.png", &sp, want);
}

static void test_png_palette(void **state)
{
    static const int depths[] = {1, 2, 4, 8};
    int di, il, tr;
    (void)state;
    for (di = 0; di < 4; di++)
        for (il = 0; il < 2; il++)
            for (tr = 0; tr < 2; tr++) {
                int d = depths[di], w = 29, h = 11, i;
                int npal = d == 8 ? 200 : 1 << d;
                int ntrans = tr ? (npal > 2 ? npal - 1 : 1) : 0; /* the last entries stay opaque */
                png_color pal[256];
                uint8_t alpha[256];
                uint16_t *s = new_samples(w, h, 1);
                uint8_t *want = new_rgb(w, h);
                char name[64];
                tu_rng_t r;
                png_spec_t sp = {w, h, PNG_COLOR_TYPE_PALETTE, d, il, s, pal, npal,
                                 tr ? alpha : NULL, ntrans, NULL, 0};
                tu_rng_seed(&r, 100 + (uint64_t)(di * 4 + il * 2 + tr));
                for (i = 0; i < npal; i++) {
                    pal[i].red = (png_byte)tu_rng_below(&r, 256);
                    pal[i].green = (png_byte)tu_rng_below(&r, 256);
                    pal[i].blue = (png_byte)tu_rng_below(&r, 256);
                    alpha[i] = (uint8_t)(i == 0 ? 0 : i == 1 ? 255 : tu_rng_below(&r, 256));
                }
                for (i = 0; i < w * h; i++) {
                    int idx = (int)tu_rng_below(&r, (uint32_t)npal);
                    int a = idx < ntrans ? alpha[idx] : 255;
                    s[i] = (uint16_t)idx;
                    want[3 * i] = (uint8_t)exp_over(pal[idx].red, a);
                    want[3 * i + 1] = (uint8_t)exp_over(pal[idx].green, a);
                    want[3 * i + 2] = (uint8_t)exp_over(pal[idx].blue, a);
                }
                snprintf(name, sizeof name, "pal%d%s%s.png", d, il ? "_adam7" : "", tr ? "_trns" : "");
                png_case(name, &sp, want);
                free(s);
                free(want);
            }
}

static void test_png_grey_low_depth(void **state)
{
    static const int depths[] = {1, 2, 4, 8};
    /* The spec's expansion, written out: 1-bit 0/255, 2-bit multiples of 85,
     * 4-bit multiples of 17, 8-bit as is. */
    static const int step[] = {255, 85, 17, 1};
    int di, il;
    (void)state;
    for (di = 0; di < 4; di++)
        for (il = 0; il < 2; il++) {
            int d = depths[di], w = 19, h = 13, i;
            uint16_t *s = new_samples(w, h, 1);
            uint8_t *want = new_rgb(w, h);
            char name[64];
            tu_rng_t r;
            png_spec_t sp = {w, h, PNG_COLOR_TYPE_GRAY, d, il, s, NULL, 0, NULL, 0, NULL, 0};
            tu_rng_seed(&r, 200 + (uint64_t)(di * 2 + il));
            for (i = 0; i < w * h; i++) {
                s[i] = (uint16_t)(i < (1 << d) ? i : (int)tu_rng_below(&r, 1u << d));
                want[3 * i] = want[3 * i + 1] = want[3 * i + 2] = (uint8_t)(s[i] * step[di]);
            }
            snprintf(name, sizeof name, "grey%d%s.png", d, il ? "_adam7" : "");
            png_case(name, &sp, want);
            free(s);
            free(want);
        }
}

/* All 65536 values, pixel (x, y) = y*256 + x. */
static void test_png_grey16_exhaustive(void **state)
{
    int w = 256, h = 256, v;
    uint16_t *s = new_samples(w, h, 1);
    uint8_t *want = new_rgb(w, h);
    png_spec_t sp = {w, h, PNG_COLOR_TYPE_GRAY, 16, 0, s, NULL, 0, NULL, 0, NULL, 0};
    (void)state;
    for (v = 0; v < 65536; v++) {
        s[v] = (uint16_t)v;
        want[3 * v] = want[3 * v + 1] = want[3 * v + 2] = (uint8_t)(v / 256); /* high byte */
    }
    png_case("grey16.png", &sp, want);
    sp.interlace = 1;
    png_case("grey16_adam7.png", &sp, want);
    free(s);
    free(want);
}

static void test_png_rgb16_exhaustive(void **state)
{
    int w = 256, h = 256, v;
    uint16_t *s = new_samples(w, h, 3);
    uint8_t *want = new_rgb(w, h);
    png_spec_t sp = {w, h, PNG_COLOR_TYPE_RGB, 16, 0, s, NULL, 0, NULL, 0, NULL, 0};
    (void)state;
    for (v = 0; v < 65536; v++) {
        int g = 65535 - v, b = (v * 31) & 0xFFFF;
        s[3 * v] = (uint16_t)v;
        s[3 * v + 1] = (uint16_t)g;
        s[3 * v + 2] = (uint16_t)b;
        want[3 * v] = (uint8_t)exp_r16(v);
        want[3 * v + 1] = (uint8_t)exp_r16(g);
        want[3 * v + 2] = (uint8_t)exp_r16(b);
    }
    png_case("rgb16.png", &sp, want);
    free(s);
    free(want);
}

/* All (c, a) pairs: pixel (x, y) has colour x in red, alpha y. */
static void test_png_rgba8_exhaustive(void **state)
{
    int w = 256, h = 256, x, y, il;
    uint16_t *s = new_samples(w, h, 4);
    uint8_t *want = new_rgb(w, h);
    (void)state;
    for (y = 0; y < h; y++)
        for (x = 0; x < w; x++) {
            size_t i = (size_t)y * w + x;
            int c[3] = {x, x ^ 0x5A, 255 - x}, k;
            for (k = 0; k < 3; k++) {
                s[4 * i + k] = (uint16_t)c[k];
                want[3 * i + k] = (uint8_t)exp_over(c[k], y);
            }
            s[4 * i + 3] = (uint16_t)y;
        }
    for (il = 0; il < 2; il++) {
        png_spec_t sp = {w, h, PNG_COLOR_TYPE_RGB_ALPHA, 8, il, s, NULL, 0, NULL, 0, NULL, 0};
        png_case(il ? "rgba8_adam7.png" : "rgba8.png", &sp, want);
    }
    free(s);
    free(want);
}

static void test_png_rgba16(void **state)
{
    int w = 64, h = 64, i, k, il;
    uint16_t *s = new_samples(w, h, 4);
    uint8_t *want = new_rgb(w, h);
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 300);
    for (i = 0; i < w * h; i++) {
        int a = i < 16 ? (i < 8 ? 0 : 65535) : (int)tu_rng_below(&r, 65536);
        for (k = 0; k < 3; k++) {
            int c = (int)tu_rng_below(&r, 65536);
            s[4 * i + k] = (uint16_t)c;
            want[3 * i + k] = (uint8_t)exp_over(exp_r16(c), exp_r16(a));
        }
        s[4 * i + 3] = (uint16_t)a;
    }
    for (il = 0; il < 2; il++) {
        png_spec_t sp = {w, h, PNG_COLOR_TYPE_RGB_ALPHA, 16, il, s, NULL, 0, NULL, 0, NULL, 0};
        png_case(il ? "rgba16_adam7.png" : "rgba16.png", &sp, want);
    }
    free(s);
    free(want);
}

static void test_srgb_lift_values(void **state)
{
    /* the spec's listed values (opaque grey+alpha) */
    static const int g[] = {0, 1, 2, 3, 4, 10}, lifted[] = {0, 13, 22, 28, 34, 56};
    int i;
    (void)state;
    for (i = 0; i < 6; i++) assert_int_equal(exp_lift(g[i]), lifted[i]);
}

/* All (g, a) pairs: pixel (x, y) has grey x, alpha y. */
static void test_png_grey_alpha8_exhaustive(void **state)
{
    int w = 256, h = 256, x, y;
    uint16_t *s = new_samples(w, h, 2);
    uint8_t *want = new_rgb(w, h);
    png_spec_t sp = {w, h, PNG_COLOR_TYPE_GRAY_ALPHA, 8, 0, s, NULL, 0, NULL, 0, NULL, 0};
    (void)state;
    for (y = 0; y < h; y++)
        for (x = 0; x < w; x++) {
            size_t i = (size_t)y * w + x;
            s[2 * i] = (uint16_t)x;
            s[2 * i + 1] = (uint16_t)y;
            want[3 * i] = want[3 * i + 1] = want[3 * i + 2] = (uint8_t)exp_over(exp_lift(x), y);
        }
    png_case("ga8.png", &sp, want);
    /* the spec's opaque values, read back from the decoded file */
    {
        char path[512];
        patina_image_t img;
        TU_OK(patina_image_load(&img, tpath(path, sizeof path, "ga8.png"), NULL));
        const uint8_t *opaque = img.data + 255 * img.stride; /* row a = 255 */
        assert_int_equal(opaque[3 * 1], 13);
        assert_int_equal(opaque[3 * 2], 22);
        assert_int_equal(opaque[3 * 3], 28);
        assert_int_equal(opaque[3 * 4], 34);
        assert_int_equal(opaque[3 * 10], 56);
        assert_int_equal(opaque[0], 0);
        patina_image_release(&img);
    }
    free(s);
    free(want);
}

/* 16-bit grey+alpha: every grey and every alpha value once (pixel v has
 * grey v and alpha v*7919 mod 65536, a bijection). Java evaluates the lift
 * on g/65535 and rounds alpha to 8 bits. */
static void test_png_grey_alpha16(void **state)
{
    int w = 256, h = 256, v, il;
    uint16_t *s = new_samples(w, h, 2);
    uint8_t *want = new_rgb(w, h);
    (void)state;
    for (v = 0; v < 65536; v++) {
        int a = (int)((v * 7919u) & 0xFFFF);
        s[2 * v] = (uint16_t)v;
        s[2 * v + 1] = (uint16_t)a;
        want[3 * v] = want[3 * v + 1] = want[3 * v + 2] = (uint8_t)exp_over(exp_lift16(v), exp_r16(a));
    }
    for (il = 0; il < 2; il++) {
        png_spec_t sp = {w, h, PNG_COLOR_TYPE_GRAY_ALPHA, 16, il, s, NULL, 0, NULL, 0, NULL, 0};
        png_case(il ? "ga16_adam7.png" : "ga16.png", &sp, want);
    }
    free(s);
    free(want);
}

/* grey + tRNS: Java turns the image into grey+alpha, so the key becomes
 * black and every other value gets the sRGB lift (lift16 at 16 bits). Below
 * 8 bits Java compares the key with the value already expanded to 8 bits,
 * so only key 0 can match. */
static void test_png_grey_trns(void **state)
{
    static const struct { int depth, key; } cases[] = {{1, 0}, {1, 1}, {2, 2}, {4, 0}, {4, 5}, {8, 77}, {16, 40000}};
    size_t ci;
    (void)state;
    for (ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        int d = cases[ci].depth, w = 33, h = 9, i, maxv = (1 << d) - 1;
        uint16_t *s = new_samples(w, h, 1);
        uint8_t *want = new_rgb(w, h);
        png_color_16 key = {0, 0, 0, 0, 0};
        char name[64];
        tu_rng_t r;
        png_spec_t sp = {w, h, PNG_COLOR_TYPE_GRAY, d, (int)(ci & 1), s, NULL, 0, NULL, 0, &key, 0};
        tu_rng_seed(&r, 500 + (uint64_t)ci);
        key.gray = (png_uint_16)cases[ci].key;
        for (i = 0; i < w * h; i++) {
            int v = i % 3 == 0 && key.gray <= maxv ? key.gray : (int)tu_rng_below(&r, (uint32_t)maxv + 1);
            int out;
            if (d == 16) {
                out = v == key.gray ? 0 : exp_lift16(v);
            } else {
                int v8 = (int)floor(v * 255.0 / maxv + 0.5);
                out = v8 == key.gray ? 0 : exp_lift(v8);
            }
            s[i] = (uint16_t)v;
            want[3 * i] = want[3 * i + 1] = want[3 * i + 2] = (uint8_t)out;
        }
        snprintf(name, sizeof name, "grey%d_trns%d.png", d, cases[ci].key);
        png_case(name, &sp, want);
        free(s);
        free(want);
    }
}

/* grey16 + tRNS over all 65536 values: the whole lift16 curve. */
static void test_png_grey16_trns_exhaustive(void **state)
{
    int w = 256, h = 256, v;
    uint16_t *s = new_samples(w, h, 1);
    uint8_t *want = new_rgb(w, h);
    png_color_16 key = {0, 0, 0, 0, 1000};
    png_spec_t sp = {w, h, PNG_COLOR_TYPE_GRAY, 16, 0, s, NULL, 0, NULL, 0, &key, 0};
    (void)state;
    for (v = 0; v < 65536; v++) {
        s[v] = (uint16_t)v;
        want[3 * v] = want[3 * v + 1] = want[3 * v + 2] = (uint8_t)(v == 1000 ? 0 : exp_lift16(v));
    }
    png_case("grey16_trns_all.png", &sp, want);
    free(s);
    free(want);
}

/* RGB + tRNS colour key at 8 and 16 bits. Near misses (one channel off)
 * stay opaque. */
static void test_png_rgb_trns(void **state)
{
    int d;
    (void)state;
    for (d = 8; d <= 16; d += 8) {
        int w = 41, h = 17, i, k, maxv = (1 << d) - 1;
        uint16_t *s = new_samples(w, h, 3);
        uint8_t *want = new_rgb(w, h);
        png_color_16 key = {0, 0, 0, 0, 0};
        char name[64];
        tu_rng_t r;
        png_spec_t sp = {w, h, PNG_COLOR_TYPE_RGB, d, 1, s, NULL, 0, NULL, 0, &key, 0};
        tu_rng_seed(&r, 600 + (uint64_t)d);
        key.red = (png_uint_16)(maxv / 3);
        key.green = (png_uint_16)(maxv / 2);
        key.blue = (png_uint_16)(maxv / 5);
        for (i = 0; i < w * h; i++) {
            int v[3];
            if (i % 4 == 0) {
                v[0] = key.red, v[1] = key.green, v[2] = key.blue;
            } else if (i % 4 == 1) {
                v[0] = key.red, v[1] = key.green + 1, v[2] = key.blue;
            } else {
                for (k = 0; k < 3; k++) v[k] = (int)tu_rng_below(&r, (uint32_t)maxv + 1);
            }
            for (k = 0; k < 3; k++) {
                int is_key = v[0] == key.red && v[1] == key.green && v[2] == key.blue;
                s[3 * i + k] = (uint16_t)v[k];
                want[3 * i + k] = (uint8_t)(is_key ? 0 : d == 16 ? exp_r16(v[k]) : v[k]);
            }
        }
        snprintf(name, sizeof name, "rgb%d_trns_adam7.png", d);
        png_case(name, &sp, want);
        free(s);
        free(want);
    }
}

/* ---------------------------------------------- hand-built PNG files */

/* Odd files libpng's writer refuses to make (indexes past the palette, a
 * tRNS longer than PLTE, ...), built byte by byte: zlib "stored" blocks, no
 * compression. Expected pixels are what OpenJDK 17 ImageIO gave for the same
 * files (checked once by hand with a Java dump program). */

typedef struct bytes_out {
    uint8_t *p;
    size_t n, cap;
} bytes_out_t;

static void out_put(bytes_out_t *o, const void *d, size_t n)
{
    if (o->n + n > o->cap) {
        o->cap = (o->n + n) * 2;
        o->p = realloc(o->p, o->cap);
        if (!o->p) fail_msg("out of memory");
    }
    memcpy(o->p + o->n, d, n);
    o->n += n;
}

static uint32_t test_crc(const uint8_t *p, size_t n);
static void put32(uint8_t *p, uint32_t v);

static void out_chunk(bytes_out_t *o, const char *type, const void *data, size_t n)
{
    uint8_t head[8], crc[4];
    uint8_t *tmp = malloc(n + 4);
    put32(head, (uint32_t)n);
    memcpy(head + 4, type, 4);
    out_put(o, head, 8);
    out_put(o, data, n);
    memcpy(tmp, type, 4);
    if (n) memcpy(tmp + 4, data, n);
    put32(crc, test_crc(tmp, n + 4));
    out_put(o, crc, 4);
    free(tmp);
}

/* raw: (h, 1 + rowbytes) filter byte 0 then the packed row */
static void raw_png(const char *path, int w, int h, int depth, int ctype, const uint8_t *raw, size_t rawn,
                    const char *const *types, const uint8_t *const *datas, const size_t *lens, int nchunks)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    bytes_out_t o = {NULL, 0, 0}, z = {NULL, 0, 0};
    uint8_t ihdr[13], hdr[5], ad[4];
    uint32_t a = 1, b = 0;
    size_t i = 0, k;
    put32(ihdr, (uint32_t)w);
    put32(ihdr + 4, (uint32_t)h);
    ihdr[8] = (uint8_t)depth, ihdr[9] = (uint8_t)ctype, ihdr[10] = ihdr[11] = ihdr[12] = 0;
    out_put(&o, sig, 8);
    out_chunk(&o, "IHDR", ihdr, 13);
    for (k = 0; k < (size_t)nchunks; k++) out_chunk(&o, types[k], datas[k], lens[k]);
    out_put(&z, "\x78\x01", 2);
    do {
        size_t blk = rawn - i > 65535 ? 65535 : rawn - i;
        hdr[0] = i + blk == rawn;
        hdr[1] = (uint8_t)blk, hdr[2] = (uint8_t)(blk >> 8);
        hdr[3] = (uint8_t)~blk, hdr[4] = (uint8_t)(~blk >> 8);
        out_put(&z, hdr, 5);
        out_put(&z, raw + i, blk);
        i += blk;
    } while (i < rawn);
    for (i = 0; i < rawn; i++) {
        a = (a + raw[i]) % 65521;
        b = (b + a) % 65521;
    }
    put32(ad, b << 16 | a);
    out_put(&z, ad, 4);
    out_chunk(&o, "IDAT", z.p, z.n);
    out_chunk(&o, "IEND", "", 0);
    if (tu_write_file(path, o.p, o.n) != 0) fail_msg("cannot write %s", path);
    free(o.p);
    free(z.p);
}

static void test_png_raw_quirks(void **state)
{
    char path[512];
    uint8_t plte[256 * 3], raw[1 + 256], want[256 * 3], trns[20];
    patina_image_t img;
    int i;
    (void)state;
    for (i = 0; i < 256; i++) {
        plte[3 * i] = (uint8_t)(10 + 7 * i), plte[3 * i + 1] = (uint8_t)(200 - 5 * i), plte[3 * i + 2] = (uint8_t)(37 * i);
    }
    raw[0] = 0;
    for (i = 0; i < 256; i++) raw[1 + i] = (uint8_t)i; /* one row: indexes 0..255 */

    /* 8-bit palette of 3 entries: Java pads PLTE to 4 with black, then
     * repeats that (black) 4th entry for the other indexes. */
    {
        const char *t[] = {"PLTE"};
        const uint8_t *d[] = {plte};
        size_t n[] = {9};
        raw_png(tpath(path, sizeof path, "raw_p8n3.png"), 256, 1, 8, 3, raw, 257, t, d, n, 1);
        memset(want, 0, sizeof want);
        memcpy(want, plte, 9);
        TU_OK(patina_image_load(&img, path, NULL));
        expect_pixels(&img, want, 256, 1, "raw_p8n3.png");
        patina_image_release(&img);
    }
    /* 8-bit palette of exactly 16: indexes 16..255 repeat entry 15 */
    {
        const char *t[] = {"PLTE"};
        const uint8_t *d[] = {plte};
        size_t n[] = {48};
        raw_png(tpath(path, sizeof path, "raw_p8n16.png"), 256, 1, 8, 3, raw, 257, t, d, n, 1);
        for (i = 0; i < 256; i++) memcpy(want + 3 * i, plte + 3 * (i < 16 ? i : 15), 3);
        TU_OK(patina_image_load(&img, path, NULL));
        expect_pixels(&img, want, 256, 1, "raw_p8n16.png");
        patina_image_release(&img);
    }
    /* 2-bit palette of 2: indexes 2 and 3 repeat entry 1 */
    {
        const char *t[] = {"PLTE"};
        const uint8_t *d[] = {plte};
        size_t n[] = {6};
        uint8_t row[2] = {0, 0x1B}; /* indexes 0,1,2,3 */
        raw_png(tpath(path, sizeof path, "raw_p2n2.png"), 4, 1, 2, 3, row, 2, t, d, n, 1);
        for (i = 0; i < 4; i++) memcpy(want + 3 * i, plte + 3 * (i < 1 ? 0 : 1), 3);
        TU_OK(patina_image_load(&img, path, NULL));
        expect_pixels(&img, want, 4, 1, "raw_p2n2.png");
        patina_image_release(&img);
    }
    /* 4-bit palette of 16 with a 20-entry tRNS (alpha 50): libpng would drop
     * it; Java keeps the first 16 entries. */
    {
        const char *t[] = {"PLTE", "tRNS"};
        const uint8_t *d[] = {plte, trns};
        size_t n[] = {48, 20};
        uint8_t row[9] = {0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0xCD, 0xEF};
        memset(trns, 50, sizeof trns);
        raw_png(tpath(path, sizeof path, "raw_p4_trns20.png"), 16, 1, 4, 3, row, 9, t, d, n, 2);
        for (i = 0; i < 48; i++) want[i] = (uint8_t)exp_over(plte[i], 50);
        TU_OK(patina_image_load(&img, path, NULL));
        expect_pixels(&img, want, 16, 1, "raw_p4_trns20.png");
        patina_image_release(&img);
    }
    /* Ignored tRNS: grey with a 4-byte tRNS, palette tRNS before PLTE, RGBA
     * with a tRNS; a private ancillary chunk is skipped too. */
    {
        const char *t[] = {"tRNS", "prIv"};
        uint8_t key4[4] = {0, 7, 0, 7};
        const uint8_t *d[] = {key4, key4};
        size_t n[] = {4, 4};
        raw_png(tpath(path, sizeof path, "raw_grey_trns4.png"), 256, 1, 8, 0, raw, 257, t, d, n, 2);
        for (i = 0; i < 256; i++) want[3 * i] = want[3 * i + 1] = want[3 * i + 2] = (uint8_t)i;
        TU_OK(patina_image_load(&img, path, NULL));
        expect_pixels(&img, want, 256, 1, "raw_grey_trns4.png");
        patina_image_release(&img);
    }
    /* grey 8-bit with a key no 8-bit value can have: still grey+alpha in Java,
     * so every value is lifted */
    {
        const char *t[] = {"tRNS"};
        uint8_t key300[2] = {0x01, 0x2C};
        const uint8_t *d[] = {key300};
        size_t n[] = {2};
        raw_png(tpath(path, sizeof path, "raw_grey_trns300.png"), 256, 1, 8, 0, raw, 257, t, d, n, 1);
        for (i = 0; i < 256; i++) want[3 * i] = want[3 * i + 1] = want[3 * i + 2] = (uint8_t)exp_lift(i);
        TU_OK(patina_image_load(&img, path, NULL));
        expect_pixels(&img, want, 256, 1, "raw_grey_trns300.png");
        patina_image_release(&img);
    }
    {
        const char *t[] = {"tRNS", "PLTE"};
        const uint8_t *d[] = {trns, plte};
        size_t n[] = {4, 768};
        raw_png(tpath(path, sizeof path, "raw_trns_before_plte.png"), 256, 1, 8, 3, raw, 257, t, d, n, 2);
        TU_OK(patina_image_load(&img, path, NULL));
        expect_pixels(&img, plte, 256, 1, "raw_trns_before_plte.png");
        patina_image_release(&img);
    }
    {
        const char *t[] = {"tRNS"};
        uint8_t key6[6] = {0, 1, 0, 2, 0, 3};
        const uint8_t *d[] = {key6};
        size_t n[] = {6};
        uint8_t row[1 + 8] = {0, 1, 2, 3, 255, 1, 2, 3, 128};
        raw_png(tpath(path, sizeof path, "raw_rgba_trns.png"), 2, 1, 8, 6, row, 9, t, d, n, 1);
        want[0] = 1, want[1] = 2, want[2] = 3;
        want[3] = (uint8_t)exp_over(1, 128), want[4] = (uint8_t)exp_over(2, 128), want[5] = (uint8_t)exp_over(3, 128);
        TU_OK(patina_image_load(&img, path, NULL));
        expect_pixels(&img, want, 2, 1, "raw_rgba_trns.png");
        patina_image_release(&img);
    }
    /* an unknown critical chunk is an error */
    {
        const char *t[] = {"CRIT"};
        const uint8_t *d[] = {trns};
        size_t n[] = {4};
        raw_png(tpath(path, sizeof path, "raw_crit.png"), 256, 1, 8, 0, raw, 257, t, d, n, 1);
        expect_error(patina_image_load(&img, path, NULL), PATINA_E_CORRUPT, path, "corrupt PNG data");
    }
}

/* --------------------------------------------------------- JPEG tests */

static unsigned char *make_jpeg(unsigned long *size, const uint8_t *pix, int w, int h, int pf,
                                int subsamp, int quality)
{
    tjhandle c = tjInitCompress();
    unsigned char *buf = NULL;
    if (!c) fail_msg("tjInitCompress");
    if (tjCompress2(c, pix, w, 0, h, pf, &buf, size, subsamp, quality, 0) != 0)
        fail_msg("tjCompress2: %s", tjGetErrorStr2(c));
    tjDestroy(c);
    return buf;
}

static double psnr(const patina_image_t *a, const patina_image_t *b)
{
    double se = 0;
    int x, y;
    for (y = 0; y < a->height; y++)
        for (x = 0; x < 3 * a->width; x++) {
            double d = (double)a->data[(size_t)y * a->stride + x] - b->data[(size_t)y * b->stride + x];
            se += d * d;
        }
    se /= 3.0 * a->width * a->height;
    return se == 0 ? 99.0 : 10.0 * log10(255.0 * 255.0 / se);
}

static void test_jpeg_roundtrip(void **state)
{
    static const int subs[] = {TJSAMP_444, TJSAMP_422, TJSAMP_420};
    int si;
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 700);
    for (si = 0; si < 3; si++) {
        patina_image_t src, img, ref;
        unsigned long size;
        unsigned char *jpg;
        char path[512], name[64];
        tjhandle d;
        int w = 67, h = 45; /* not multiples of the MCU */
        tu_random_image(&src, w, h, 1, &r);
        jpg = make_jpeg(&size, src.data, w, h, TJPF_RGB, subs[si], 100);
        snprintf(name, sizeof name, "q100_%d.jpg", si);
        tu_write_file(tpath(path, sizeof path, name), jpg, size);
        load_both(&img, path, PATINA_FORMAT_JPEG);
        if (psnr(&src, &img) < 38.0) fail_msg("%s: PSNR %.1f dB", name, psnr(&src, &img));
        /* Bit-identical to TurboJPEG's defaults (ISLOW IDCT, fancy upsampling). */
        TU_OK(patina_image_init(&ref, w, h));
        d = tjInitDecompress();
        assert_int_equal(tjDecompress2(d, jpg, size, ref.data, w, 0, h, TJPF_RGB, 0), 0);
        tjDestroy(d);
        expect_pixels(&img, ref.data, w, h, name);
        patina_image_release(&src);
        patina_image_release(&img);
        patina_image_release(&ref);
        tjFree(jpg);
    }
}

static void test_jpeg_grey(void **state)
{
    int w = 50, h = 31, i, x, y;
    uint8_t *grey = malloc((size_t)w * h); /* (h, w) u8 */
    unsigned long size;
    unsigned char *jpg;
    patina_image_t img;
    patina_image_info_t info;
    char path[512];
    double se = 0;
    (void)state;
    for (i = 0; i < w * h; i++) grey[i] = (uint8_t)((i % w) * 5 + (i / w) * 2);
    jpg = make_jpeg(&size, grey, w, h, TJPF_GRAY, TJSAMP_GRAY, 100);
    tu_write_file(tpath(path, sizeof path, "grey.jpg"), jpg, size);
    TU_OK(patina_image_probe(&info, jpg, size, "grey.jpg"));
    assert_int_equal(info.channels, 1);
    assert_int_equal(info.bit_depth, 8);
    load_both(&img, path, PATINA_FORMAT_JPEG);
    for (y = 0; y < h; y++)
        for (x = 0; x < w; x++) {
            const uint8_t *p = img.data + (size_t)y * img.stride + 3 * (size_t)x;
            double d = (double)p[0] - grey[y * w + x];
            assert_int_equal(p[0], p[1]);
            assert_int_equal(p[0], p[2]);
            se += d * d;
        }
    assert_true(10.0 * log10(255.0 * 255.0 * w * h / (se ? se : 1)) > 40.0);
    patina_image_release(&img);
    tjFree(jpg);
    free(grey);
}

/* A 4-component JPEG of the stored values `pix` ((h, 4w) u8) through libjpeg:
 * space JCS_CMYK or JCS_YCCK; `adobe`: with the Adobe APP14 marker
 * jpeg_set_colorspace writes for these spaces (a YCCK file needs it: its
 * transform flag is what tells a decoder the components are YCCK). 4:4:4. */
static unsigned char *make_jpeg4(unsigned long *size, const uint8_t *pix, int w, int h, J_COLOR_SPACE space,
                                 int quality, int adobe)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    unsigned char *buf = NULL;
    int i;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &buf, size);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = 4;
    c.in_color_space = JCS_CMYK;
    jpeg_set_defaults(&c);
    jpeg_set_colorspace(&c, space);
    for (i = 0; i < c.num_components; i++) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
    c.write_Adobe_marker = adobe ? TRUE : FALSE;
    jpeg_set_quality(&c, quality, TRUE);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)(pix + (size_t)c.next_scanline * 4 * (size_t)w);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    return buf;
}

/* libjpeg's own decode of a 4-component JPEG to CMYK ((h, 4w) u8, malloc'd),
 * with the reference settings (ISLOW, fancy upsampling); *adobe: whether it
 * saw the Adobe marker. */
static uint8_t *libjpeg_cmyk(const unsigned char *jpg, unsigned long size, int w, int h, int *adobe)
{
    struct jpeg_decompress_struct d;
    struct jpeg_error_mgr err;
    uint8_t *out = malloc((size_t)w * 4 * (size_t)h);
    d.err = jpeg_std_error(&err);
    jpeg_create_decompress(&d);
    jpeg_mem_src(&d, jpg, size);
    assert_int_equal(jpeg_read_header(&d, TRUE), JPEG_HEADER_OK);
    d.out_color_space = JCS_CMYK;
    d.dct_method = JDCT_ISLOW;
    jpeg_start_decompress(&d);
    assert_int_equal(d.output_width, w);
    assert_int_equal(d.output_components, 4);
    while (d.output_scanline < d.output_height) {
        JSAMPROW row = out + (size_t)d.output_scanline * 4 * (size_t)w;
        jpeg_read_scanlines(&d, &row, 1);
    }
    *adobe = d.saw_Adobe_marker;
    jpeg_finish_decompress(&d);
    jpeg_destroy_decompress(&d);
    return out;
}

/* The documented conversion (docs/images.md): with an Adobe marker the
 * stored values are inverted ink, R = round(C*K/255); without, ink amounts,
 * R = round((255-C)(255-K)/255). Written with doubles here, the library's
 * integers must match it exactly. */
static void cmyk_formula(uint8_t rgb[3], const uint8_t *cmyk, int adobe)
{
    int i;
    for (i = 0; i < 3; i++) {
        double a = adobe ? cmyk[i] : 255 - cmyk[i], k = adobe ? cmyk[3] : 255 - cmyk[3];
        rgb[i] = (uint8_t)floor(a * k / 255.0 + 0.5);
    }
}

static const struct {
    J_COLOR_SPACE space;
    int adobe;
    const char *name;
} cmyk_kinds[] = {{JCS_CMYK, 1, "CMYK (Adobe)"}, {JCS_YCCK, 1, "YCCK (Adobe)"}, {JCS_CMYK, 0, "CMYK (no Adobe marker)"}};

/* CMYK and YCCK JPEGs decode to RGB: exactly the documented formula applied
 * to libjpeg's own CMYK output, and within the JPEG's loss of the formula
 * applied to the source values; probe says 4 channels; file and memory
 * paths agree. */
static void test_jpeg_cmyk(void **state)
{
    int w = 40, h = 24, x, y;
    size_t kk;
    uint8_t *src = malloc((size_t)w * 4 * h);
    char path[512];
    (void)state;
    /* smooth ramps per component (JPEG's loss on them is small and bounded) */
    for (y = 0; y < h; y++)
        for (x = 0; x < w; x++) {
            uint8_t *p = src + ((size_t)y * w + x) * 4;
            p[0] = (uint8_t)(20 + 5 * x);
            p[1] = (uint8_t)(230 - 8 * y);
            p[2] = (uint8_t)(60 + 2 * x + 3 * y);
            p[3] = (uint8_t)(255 - 3 * x - 2 * y);
        }
    for (kk = 0; kk < sizeof cmyk_kinds / sizeof cmyk_kinds[0]; kk++) {
        unsigned long size;
        unsigned char *jpg = make_jpeg4(&size, src, w, h, cmyk_kinds[kk].space, 95, cmyk_kinds[kk].adobe);
        patina_image_t img;
        patina_image_info_t info;
        int adobe, loss = 0, worst = 0;
        uint8_t *ref = libjpeg_cmyk(jpg, size, w, h, &adobe);
        assert_int_equal(adobe, cmyk_kinds[kk].adobe);
        TU_OK(patina_image_probe(&info, jpg, size, "cmyk.jpg"));
        assert_int_equal(info.channels, 4);
        tu_write_file(tpath(path, sizeof path, "cmyk.jpg"), jpg, size);
        load_both(&img, path, PATINA_FORMAT_JPEG);
        for (y = 0; y < h; y++)
            for (x = 0; x < w; x++) {
                const uint8_t *got = img.data + (size_t)y * img.stride + 3 * (size_t)x;
                const uint8_t *r = ref + ((size_t)y * w + x) * 4, *s0 = src + ((size_t)y * w + x) * 4;
                uint8_t want[3], ideal[3];
                int c;
                cmyk_formula(want, r, adobe);
                cmyk_formula(ideal, s0, adobe);
                for (c = 0; c < 4; c++) loss = abs(r[c] - s0[c]) > loss ? abs(r[c] - s0[c]) : loss;
                for (c = 0; c < 3; c++) {
                    if (got[c] != want[c])
                        fail_msg("%s: (%d,%d) channel %d: %d, libjpeg's CMYK and the formula give %d",
                                 cmyk_kinds[kk].name, x, y, c, got[c], want[c]);
                    worst = abs(got[c] - ideal[c]) > worst ? abs(got[c] - ideal[c]) : worst;
                }
            }
        /* JPEG's loss on these ramps at quality 95 is a few levels per
         * component; an RGB value moves by at most the loss of its two
         * factors plus the rounding: |dR| <= dC + dK + 1. */
        if (loss > 6) fail_msg("%s: JPEG loss %d levels, more than this test expects", cmyk_kinds[kk].name, loss);
        if (worst > 2 * loss + 1)
            fail_msg("%s: RGB %d levels from the formula on the source, over 2*%d+1", cmyk_kinds[kk].name, worst, loss);
        patina_image_release(&img);
        free(ref);
        free(jpg);
    }
    free(src);
}

/* One colour, 8x8, quality 100: the JPEG is lossless for it (a lone DC
 * coefficient, unit quantisers; for YCCK a grey C = M = Y, whose YCC
 * round trip is exact), so the RGB is exactly the formula's. */
static void test_jpeg_cmyk_exact(void **state)
{
    static const uint8_t colour[][4] = {{30, 140, 220, 60}, {200, 200, 200, 100}, {30, 140, 220, 60}};
    size_t kk;
    (void)state;
    for (kk = 0; kk < sizeof cmyk_kinds / sizeof cmyk_kinds[0]; kk++) {
        uint8_t src[8 * 8 * 4], want[3];
        unsigned long size;
        unsigned char *jpg;
        patina_image_t img;
        int i, adobe = cmyk_kinds[kk].adobe;
        for (i = 0; i < 64; i++) memcpy(src + 4 * i, colour[kk], 4);
        jpg = make_jpeg4(&size, src, 8, 8, cmyk_kinds[kk].space, 100, adobe);
        TU_OK(patina_image_decode(&img, jpg, size, NULL, "one-colour.jpg"));
        cmyk_formula(want, colour[kk], adobe);
        for (i = 0; i < 64; i++)
            if (memcmp(img.data + (size_t)(i / 8) * img.stride + 3 * (size_t)(i % 8), want, 3))
                fail_msg("%s: pixel %d is %d,%d,%d, want %d,%d,%d", cmyk_kinds[kk].name, i,
                         img.data[(size_t)(i / 8) * img.stride + 3 * (size_t)(i % 8)],
                         img.data[(size_t)(i / 8) * img.stride + 3 * (size_t)(i % 8) + 1],
                         img.data[(size_t)(i / 8) * img.stride + 3 * (size_t)(i % 8) + 2], want[0], want[1], want[2]);
        patina_image_release(&img);
        free(jpg);
    }
    /* TurboJPEG's own CMYK encoder writes YCCK with an Adobe marker: the same */
    {
        uint8_t src[8 * 8 * 4], want[3];
        unsigned long size;
        unsigned char *jpg;
        patina_image_t img;
        int i;
        for (i = 0; i < 64; i++) memcpy(src + 4 * i, colour[1], 4);
        jpg = make_jpeg(&size, src, 8, 8, TJPF_CMYK, TJSAMP_444, 100);
        TU_OK(patina_image_decode(&img, jpg, size, NULL, "tj-ycck.jpg"));
        cmyk_formula(want, colour[1], 1);
        assert_memory_equal(img.data, want, 3);
        patina_image_release(&img);
        tjFree(jpg);
    }
}

/* ------------------------------------------------------ EXIF orientation */

static void tiff_put16(uint8_t *p, unsigned v, int be)
{
    p[be ? 0 : 1] = (uint8_t)(v >> 8), p[be ? 1 : 0] = (uint8_t)v;
}

static void tiff_put32(uint8_t *p, uint32_t v, int be)
{
    int i;
    for (i = 0; i < 4; i++) p[be ? 3 - i : i] = (uint8_t)(v >> (8 * i));
}

/* An APP1 EXIF segment (marker included) whose IFD0 holds Make ("abc") and
 * Orientation o (a SHORT), in big- or little-endian TIFF; returns its size. */
static size_t exif_segment(uint8_t *seg, unsigned o, int be)
{
    uint8_t *t = seg + 10; /* the TIFF header */
    memset(seg, 0, 56);
    seg[0] = 0xFF, seg[1] = 0xE1;
    seg[2] = 0, seg[3] = 46; /* 2 + 6 + 38 */
    memcpy(seg + 4, "Exif\0\0", 6);
    memcpy(t, be ? "MM" : "II", 2);
    tiff_put16(t + 2, 42, be);
    tiff_put32(t + 4, 8, be);
    tiff_put16(t + 8, 2, be);                                          /* two entries */
    tiff_put16(t + 10, 0x010F, be), tiff_put16(t + 12, 2, be), tiff_put32(t + 14, 4, be), memcpy(t + 18, "abc", 4);
    tiff_put16(t + 22, 0x0112, be), tiff_put16(t + 24, 3, be), tiff_put32(t + 26, 1, be), tiff_put16(t + 30, o, be);
    tiff_put32(t + 34, 0, be);                                         /* no next IFD */
    return 48;
}

/* jpg with seg inserted right after SOI (malloc'd). */
static uint8_t *splice(size_t *out_size, const uint8_t *jpg, size_t size, const uint8_t *seg, size_t seg_size)
{
    uint8_t *out = malloc(size + seg_size);
    memcpy(out, jpg, 2);
    memcpy(out + 2, seg, seg_size);
    memcpy(out + 2 + seg_size, jpg + 2, size - 2);
    *out_size = size + seg_size;
    return out;
}

/* Orientation applied on request, for all 8 values in both byte orders:
 * checked against the EXIF definition (which side of the scene the stored
 * row 0 and column 0 show) on an asymmetric image; without the request the
 * pixels are byte-identical to the file as stored. Malformed EXIF data is
 * ignored (read as stored), never read outside the file. */
static void test_jpeg_exif_orientation(void **state)
{
    /* where stored row 0 / column 0 are in the scene (EXIF 2.3, Orientation) */
    enum { TOP, BOTTOM, LEFT, RIGHT };
    static const int row0[9] = {0, TOP, TOP, BOTTOM, BOTTOM, LEFT, RIGHT, RIGHT, LEFT};
    static const int col0[9] = {0, LEFT, RIGHT, RIGHT, LEFT, TOP, TOP, BOTTOM, BOTTOM};
    int w = 24, h = 16, x, y, be;
    unsigned o;
    uint8_t grey[24 * 16], seg[64];
    unsigned long jsize;
    unsigned char *jpg;
    patina_image_t stored, img;
    patina_decode_opts_t opts;
    (void)state;
    /* 3x2 blocks of 8x8, each one grey level: lossless at quality 100, and
     * no two blocks alike, so every turn and mirror is told apart */
    for (y = 0; y < h; y++)
        for (x = 0; x < w; x++) grey[y * w + x] = (uint8_t)(20 + 40 * ((y / 8) * 3 + x / 8));
    jpg = make_jpeg(&jsize, grey, w, h, TJPF_GRAY, TJSAMP_GRAY, 100);
    TU_OK(patina_image_decode(&stored, jpg, jsize, NULL, "plain.jpg"));
    for (y = 0; y < h; y++)
        for (x = 0; x < w; x++) assert_int_equal(stored.data[(size_t)y * stored.stride + 3 * (size_t)x], grey[y * w + x]);
    for (be = 0; be < 2; be++)
        for (o = 1; o <= 8; o++) {
            size_t n, seg_size = exif_segment(seg, o, be);
            uint8_t *file = splice(&n, jpg, jsize, seg, seg_size);
            int ow = o >= 5 ? h : w, oh = o >= 5 ? w : h;
            /* default: as stored */
            patina_decode_opts_init(&opts);
            assert_int_equal(opts.apply_orientation, 0);
            TU_OK(patina_image_decode_with(&img, NULL, file, n, &opts, "exif.jpg"));
            assert_int_equal(img.width, w);
            assert_memory_equal(img.data, stored.data, (size_t)w * 3 * h);
            patina_image_release(&img);
            /* on request: upright */
            opts.apply_orientation = 1;
            TU_OK(patina_image_decode_with(&img, NULL, file, n, &opts, "exif.jpg"));
            if (img.width != ow || img.height != oh)
                fail_msg("orientation %u (%s): %dx%d, want %dx%d", o, be ? "MM" : "II", img.width, img.height, ow, oh);
            for (y = 0; y < h; y++)
                for (x = 0; x < w; x++) {
                    int dx, dy;
                    if (row0[o] == TOP || row0[o] == BOTTOM) {
                        dy = row0[o] == TOP ? y : h - 1 - y;
                        dx = col0[o] == LEFT ? x : w - 1 - x;
                    } else {
                        dx = row0[o] == LEFT ? y : h - 1 - y;
                        dy = col0[o] == TOP ? x : w - 1 - x;
                    }
                    if (memcmp(img.data + (size_t)dy * img.stride + 3 * (size_t)dx,
                               stored.data + (size_t)y * stored.stride + 3 * (size_t)x, 3))
                        fail_msg("orientation %u (%s): stored (%d,%d) is not at (%d,%d)", o, be ? "MM" : "II", x, y,
                                 dx, dy);
                }
            patina_image_release(&img);
            free(file);
        }
    /* malformed EXIF: ignored, pixels as stored */
    patina_decode_opts_init(&opts);
    opts.apply_orientation = 1;
    for (int k = 0; k < 9; k++) {
        size_t n, seg_size = exif_segment(seg, 6, 1);
        uint8_t *t = seg + 10, *file;
        switch (k) {
        case 0: tiff_put16(t + 30, 9, 1); break;            /* orientation out of range */
        case 1: tiff_put16(t + 30, 0, 1); break;            /* 0 */
        case 2: tiff_put16(t + 24, 4, 1); break;            /* a LONG, not a SHORT */
        case 3: tiff_put32(t + 4, 0xFFFFFFF0u, 1); break;   /* IFD0 past the segment */
        case 4: tiff_put32(t + 4, 37, 1); break;            /* IFD0 count at the last 2 bytes, entries beyond */
        case 5: /* 65535 entries in a 38-byte TIFF, none of them Orientation: the walk stops at the end */
            tiff_put16(t + 8, 0xFFFF, 1), tiff_put16(t + 22, 0x0113, 1);
            break;
        case 6: memcpy(t, "MI", 2); break;             /* no byte order */
        case 7: memcpy(seg + 4, "Exif\0X", 6); break;  /* not EXIF */
        default: seg[3] = 20; seg_size = 22; break;    /* the segment cut before the Orientation entry */
        }
        file = splice(&n, jpg, jsize, seg, seg_size);
        TU_OK(patina_image_decode_with(&img, NULL, file, n, &opts, "bad-exif.jpg"));
        if (img.width != w || memcmp(img.data, stored.data, (size_t)w * 3 * h))
            fail_msg("malformed EXIF case %d was not ignored", k);
        patina_image_release(&img);
        free(file);
    }
    patina_image_release(&stored);
    tjFree(jpg);
}

/* ---------------------------------------------------------- PNM tests */

static void test_pnm_8bit(void **state)
{
    int w = 23, h = 7, i, hdr;
    char path[512];
    uint8_t buf[4096], *want = new_rgb(w, h);
    patina_image_t img;
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 800);
    /* P6 with comments between every header field */
    hdr = snprintf((char *)buf, sizeof buf, "P6\n# made by test_image\n%d # width\n%d\n#c\n255\n", w, h);
    for (i = 0; i < w * h * 3; i++) want[i] = buf[hdr + i] = (uint8_t)tu_rng_below(&r, 256);
    tu_write_file(tpath(path, sizeof path, "p6.ppm"), buf, (size_t)hdr + (size_t)w * h * 3);
    load_both(&img, path, PATINA_FORMAT_PNM);
    expect_pixels(&img, want, w, h, "p6.ppm");
    patina_image_release(&img);
    /* P5, maxval 255 */
    hdr = snprintf((char *)buf, sizeof buf, "P5 %d %d 255\r", w, h);
    for (i = 0; i < w * h; i++) {
        buf[hdr + i] = (uint8_t)tu_rng_below(&r, 256);
        want[3 * i] = want[3 * i + 1] = want[3 * i + 2] = buf[hdr + i];
    }
    tu_write_file(tpath(path, sizeof path, "p5.pgm"), buf, (size_t)hdr + (size_t)w * h);
    load_both(&img, path, PATINA_FORMAT_PNM);
    expect_pixels(&img, want, w, h, "p5.pgm");
    patina_image_release(&img);
    /* P5, maxval 1 and 100: round(v*255/maxval), halves up */
    {
        static const int maxvals[] = {1, 2, 100};
        int m;
        for (m = 0; m < 3; m++) {
            int mv = maxvals[m];
            hdr = snprintf((char *)buf, sizeof buf, "P5\n%d %d\n%d\n", w, h, mv);
            for (i = 0; i < w * h; i++) {
                int v = i <= mv ? i : (int)tu_rng_below(&r, (uint32_t)mv + 1);
                buf[hdr + i] = (uint8_t)v;
                want[3 * i] = want[3 * i + 1] = want[3 * i + 2] = (uint8_t)floor(v * 255.0 / mv + 0.5);
            }
            tu_write_file(tpath(path, sizeof path, "p5m.pgm"), buf, (size_t)hdr + (size_t)w * h);
            load_both(&img, path, PATINA_FORMAT_PNM);
            expect_pixels(&img, want, w, h, "p5m.pgm");
            patina_image_release(&img);
        }
    }
    free(want);
}

static void test_pnm_16bit(void **state)
{
    int w = 256, h = 256, v, hdr;
    uint8_t *buf = malloc(64 + (size_t)w * h * 6), *want = new_rgb(w, h);
    char path[512];
    patina_image_t img;
    patina_image_info_t info;
    (void)state;
    /* P5, maxval 65535, all values */
    hdr = snprintf((char *)buf, 64, "P5\n%d %d\n65535\n", w, h);
    for (v = 0; v < 65536; v++) {
        buf[hdr + 2 * v] = (uint8_t)(v >> 8);
        buf[hdr + 2 * v + 1] = (uint8_t)v;
        want[3 * v] = want[3 * v + 1] = want[3 * v + 2] = (uint8_t)floor(v * 255.0 / 65535 + 0.5);
    }
    tu_write_file(tpath(path, sizeof path, "p5_16.pgm"), buf, (size_t)hdr + (size_t)w * h * 2);
    TU_OK(patina_image_probe(&info, buf, (size_t)hdr + 10, "p5_16.pgm"));
    assert_int_equal(info.bit_depth, 16);
    assert_int_equal(info.channels, 1);
    load_both(&img, path, PATINA_FORMAT_PNM);
    expect_pixels(&img, want, w, h, "p5_16.pgm");
    patina_image_release(&img);
    /* P6, maxval 1000, random */
    {
        tu_rng_t r;
        int i;
        tu_rng_seed(&r, 900);
        hdr = snprintf((char *)buf, 64, "P6 %d %d 1000\n", w, h);
        for (i = 0; i < w * h * 3; i++) {
            int s = (int)tu_rng_below(&r, 1001);
            buf[hdr + 2 * i] = (uint8_t)(s >> 8);
            buf[hdr + 2 * i + 1] = (uint8_t)s;
            want[i] = (uint8_t)floor(s * 255.0 / 1000 + 0.5);
        }
        tu_write_file(tpath(path, sizeof path, "p6_16.ppm"), buf, (size_t)hdr + (size_t)w * h * 6);
        load_both(&img, path, PATINA_FORMAT_PNM);
        expect_pixels(&img, want, w, h, "p6_16.ppm");
        patina_image_release(&img);
    }
    free(buf);
    free(want);
}

static void test_pnm_rejects(void **state)
{
    static const char *const unsupported[] = {"P1\n2 2\n0 1 1 0\n", "P2\n2 2\n255\n1 2 3 4\n",
                                              "P3\n1 1\n255\n1 2 3\n", "P4\n8 1\n\xAA",
                                              "P7\nWIDTH 1\nHEIGHT 1\nDEPTH 3\nMAXVAL 255\nTUPLTYPE RGB\nENDHDR\n\1\2\3"};
#define BYTES(lit) {lit, sizeof lit - 1}
    static const struct { const char *s; size_t n; } corrupt[] = {
        BYTES("P5\n2 2\n0\n\0\0\0\0"),                 /* maxval 0 */
        BYTES("P5\n2 2\n70000\n\0\0\0\0\0\0\0\0"),   /* maxval too big */
        BYTES("P5\nx 2\n255\n\0\0\0\0"),               /* not a number */
        BYTES("P5\n2 2\n3\n\0\1\4\2"),                 /* sample > maxval */
        BYTES("P5\n99999999999 2\n255\n\0"),            /* too wide */
        BYTES("P5\n2 2\n255#c\n\0\0\0\0"),             /* no whitespace after maxval */
    };
#undef BYTES
    size_t i;
    patina_image_t img;
    (void)state;
    for (i = 0; i < sizeof unsupported / sizeof *unsupported; i++) {
        expect_error(patina_image_decode(&img, unsupported[i], strlen(unsupported[i]) + 1, NULL, "old.pnm"),
                     PATINA_E_FORMAT, "old.pnm", "not supported");
        assert_null(img.data);
    }
    for (i = 0; i < sizeof corrupt / sizeof *corrupt; i++)
        expect_error(patina_image_decode(&img, corrupt[i].s, corrupt[i].n, NULL, "bad.pgm"), PATINA_E_CORRUPT,
                     "bad.pgm", "corrupt PNM");
    /* zero width */
    expect_error(patina_image_decode(&img, "P5\n0 2\n255\n", 11, NULL, "zero.pgm"), PATINA_E_CORRUPT,
                 "zero.pgm", "zero width or height");
}

/* ----------------------------------------------------- probe, errors */

static uint32_t test_crc(const uint8_t *p, size_t n)
{
    uint32_t table[256], c;
    size_t i;
    int k;
    for (i = 0; i < 256; i++) {
        c = (uint32_t)i;
        for (k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    c = 0xFFFFFFFFu;
    for (i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* signature + IHDR (with a correct CRC) + IEND: 45 bytes */
static size_t craft_png(uint8_t *out, uint32_t w, uint32_t h)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    memcpy(out, sig, 8);
    put32(out + 8, 13);
    memcpy(out + 12, "IHDR", 4);
    put32(out + 16, w);
    put32(out + 20, h);
    out[24] = 8, out[25] = 2, out[26] = 0, out[27] = 0, out[28] = 0;
    put32(out + 29, test_crc(out + 12, 17));
    put32(out + 33, 0);
    memcpy(out + 37, "IEND", 4);
    put32(out + 41, test_crc(out + 37, 4));
    return 45;
}

static void test_probe_header_only(void **state)
{
    char path[512];
    uint8_t *bytes;
    size_t size;
    patina_image_info_t info;
    patina_image_t img;
    uint8_t crafted[64];
    (void)state;
    /* PNG: the first 33 bytes (signature + IHDR) are enough for probe;
     * decode of the same bytes is truncated. */
    bytes = tu_read_file(tpath(path, sizeof path, "rgba16.png"), &size);
    TU_OK(patina_image_probe(&info, bytes, 33, "head.png"));
    assert_int_equal(info.format, PATINA_FORMAT_PNG);
    assert_int_equal(info.width, 64);
    assert_int_equal(info.height, 64);
    assert_int_equal(info.channels, 4);
    assert_int_equal(info.bit_depth, 16);
    expect_error(patina_image_decode(&img, bytes, 33, NULL, "head.png"), PATINA_E_CORRUPT, "head.png",
                 "truncated PNG data");
    free(bytes);
    /* A 40000x40000 header probes fine (nothing is allocated)... */
    size = craft_png(crafted, 40000, 40000);
    TU_OK(patina_image_probe(&info, crafted, size, "big.png"));
    assert_int_equal(info.width, 40000);
    /* ...and decode stops at the default limit. */
    assert_int_equal(patina_image_decode(&img, crafted, size, NULL, "big.png"), PATINA_E_LIMIT);
    assert_string_equal(patina_last_error(),
                        "decode: 40000x40000 = 1600000000 pixels exceeds the limit of 100000000 in 'big.png'");
    assert_null(img.data);
    /* JPEG: header up to SOS */
    bytes = tu_read_file(tpath(path, sizeof path, "q100_0.jpg"), &size);
    {
        size_t i, sos = 0;
        for (i = 2; i + 1 < size; i++)
            if (bytes[i] == 0xFF && bytes[i + 1] == 0xDA) {
                sos = i;
                break;
            }
        assert_true(sos > 0);
        sos += 2 + ((size_t)bytes[sos + 2] << 8 | bytes[sos + 3]); /* end of the SOS header */
        TU_OK(patina_image_probe(&info, bytes, sos, "head.jpg"));
        assert_int_equal(info.format, PATINA_FORMAT_JPEG);
        assert_int_equal(info.width, 67);
        assert_int_equal(info.height, 45);
        assert_int_equal(info.channels, 3);
        expect_error(patina_image_decode(&img, bytes, sos, NULL, "head.jpg"), PATINA_E_CORRUPT, "head.jpg",
                     "truncated JPEG data");
    }
    free(bytes);
    /* PNM: header only */
    TU_OK(patina_image_probe(&info, "P6\n# c\n640 480\n65535\n", 22, "head.ppm"));
    assert_int_equal(info.format, PATINA_FORMAT_PNM);
    assert_int_equal(info.width, 640);
    assert_int_equal(info.height, 480);
    assert_int_equal(info.channels, 3);
    assert_int_equal(info.bit_depth, 16);
}

static void test_sniff(void **state)
{
    char src[512], dst[512];
    uint8_t *bytes;
    size_t size;
    patina_image_t img;
    (void)state;
    assert_int_equal(patina_format_sniff("\xFF\xD8\xFF\xE0", 4), PATINA_FORMAT_JPEG);
    assert_int_equal(patina_format_sniff("\x89PNG\r\n\x1a\n", 8), PATINA_FORMAT_PNG);
    assert_int_equal(patina_format_sniff("P6\n", 3), PATINA_FORMAT_PNM);
    assert_int_equal(patina_format_sniff("P5#x", 4), PATINA_FORMAT_PNM);
    assert_int_equal(patina_format_sniff("P8\n", 3), PATINA_FORMAT_UNKNOWN);
    assert_int_equal(patina_format_sniff("Photo", 5), PATINA_FORMAT_UNKNOWN);
    assert_int_equal(patina_format_sniff("GIF89a", 6), PATINA_FORMAT_UNKNOWN);
    assert_int_equal(patina_format_sniff("\xFF", 1), PATINA_FORMAT_UNKNOWN);
    assert_int_equal(patina_format_sniff(NULL, 0), PATINA_FORMAT_UNKNOWN);
    assert_string_equal(patina_format_name(PATINA_FORMAT_JPEG), "jpeg");
    assert_string_equal(patina_format_name(PATINA_FORMAT_PNG), "png");
    assert_string_equal(patina_format_name(PATINA_FORMAT_PNM), "pnm");
    assert_string_equal(patina_format_name(PATINA_FORMAT_UNKNOWN), "unknown");
    /* The name means nothing: a PNG called .jpg is decoded as PNG. */
    bytes = tu_read_file(tpath(src, sizeof src, "rgb8.png"), &size);
    tu_write_file(tpath(dst, sizeof dst, "really_a_png.jpg"), bytes, size);
    load_both(&img, dst, PATINA_FORMAT_PNG);
    patina_image_release(&img);
    free(bytes);
}

/* Cuts a valid file at several points; each must be PATINA_E_CORRUPT
 * "truncated <FMT> data" naming the file, from memory and from a file. */
static void truncate_case(const char *file, const char *fmt_name)
{
    char path[512], cut_path[512], needle[64], name[64];
    uint8_t *bytes;
    size_t size, cuts[12], k, ncuts = 0;
    patina_image_t img;
    bytes = tu_read_file(tpath(path, sizeof path, file), &size);
    cuts[ncuts++] = 2;
    cuts[ncuts++] = 5;
    cuts[ncuts++] = 20;
    cuts[ncuts++] = 40;
    cuts[ncuts++] = size / 3;
    cuts[ncuts++] = size / 2;
    cuts[ncuts++] = size - 13;
    cuts[ncuts++] = size - 2;
    cuts[ncuts++] = size - 1;
    snprintf(needle, sizeof needle, "truncated %s data", fmt_name);
    for (k = 0; k < ncuts; k++) {
        snprintf(name, sizeof name, "cut%zu_%s", cuts[k], file);
        expect_error(patina_image_decode(&img, bytes, cuts[k], NULL, name), PATINA_E_CORRUPT, name, needle);
        assert_null(img.data);
        assert_int_equal(img.width, 0);
        tu_write_file(tpath(cut_path, sizeof cut_path, name), bytes, cuts[k]);
        expect_error(patina_image_load(&img, cut_path, NULL), PATINA_E_CORRUPT, cut_path, needle);
    }
    free(bytes);
}

static void test_truncated(void **state)
{
    (void)state;
    truncate_case("rgb8.png", "PNG");
    truncate_case("pal4_adam7_trns.png", "PNG");
    truncate_case("rgba16_adam7.png", "PNG");
    truncate_case("q100_2.jpg", "JPEG");
    truncate_case("p6.ppm", "PNM");
    truncate_case("p5_16.pgm", "PNM");
}

static void test_corrupt(void **state)
{
    char path[512];
    uint8_t *bytes, crafted[64];
    size_t size;
    patina_image_t img;
    patina_image_info_t info;
    (void)state;
    /* PNG: a flipped byte inside the image data fails its chunk CRC */
    bytes = tu_read_file(tpath(path, sizeof path, "rgb8.png"), &size);
    bytes[size / 2] ^= 0x55;
    expect_error(patina_image_decode(&img, bytes, size, NULL, "flip.png"), PATINA_E_CORRUPT, "flip.png",
                 "corrupt PNG data");
    bytes[size / 2] ^= 0x55;
    bytes[18] ^= 1; /* inside IHDR: the probe checks its CRC */
    expect_error(patina_image_probe(&info, bytes, size, "ihdr.png"), PATINA_E_CORRUPT, "ihdr.png", "CRC");
    free(bytes);
    /* zero-width and zero-height IHDRs with correct CRCs */
    size = craft_png(crafted, 0, 16);
    expect_error(patina_image_decode(&img, crafted, size, NULL, "zerowidth.png"), PATINA_E_CORRUPT,
                 "zerowidth.png", "zero width");
    expect_error(patina_image_probe(&info, crafted, size, "zerowidth.png"), PATINA_E_CORRUPT,
                 "zerowidth.png", "zero width");
    assert_null(img.data);
    size = craft_png(crafted, 16, 0);
    expect_error(patina_image_decode(&img, crafted, size, NULL, "zeroheight.png"), PATINA_E_CORRUPT,
                 "zeroheight.png", "zero width or height");
    /* a valid 16x16 IHDR with no IDAT at all */
    size = craft_png(crafted, 16, 16);
    expect_error(patina_image_decode(&img, crafted, size, NULL, "noidat.png"), PATINA_E_CORRUPT,
                 "noidat.png", "corrupt PNG data");
    /* JPEG: a bogus DQT length */
    bytes = tu_read_file(tpath(path, sizeof path, "q100_0.jpg"), &size);
    {
        size_t i;
        for (i = 2; i + 3 < size; i++)
            if (bytes[i] == 0xFF && bytes[i + 1] == 0xDB) {
                bytes[i + 2] = 0, bytes[i + 3] = 3;
                break;
            }
    }
    expect_error(patina_image_decode(&img, bytes, size, NULL, "dqt.jpg"), PATINA_E_CORRUPT, "dqt.jpg",
                 "corrupt JPEG");
    free(bytes);
    /* unknown formats */
    tu_write_file(tpath(path, sizeof path, "notes.txt"), "hello, world\n", 13);
    assert_int_equal(patina_image_load(&img, path, NULL), PATINA_E_FORMAT);
    {
        char want[600];
        snprintf(want, sizeof want,
                 "decode: unknown image format in '%s' (Patina reads JPEG, PNG and binary PNM (P5, P6))", path);
        assert_string_equal(patina_last_error(), want);
    }
    assert_null(img.data);
    expect_error(patina_image_decode(&img, "GIF89a....", 10, NULL, "anim.gif"), PATINA_E_FORMAT,
                 "anim.gif", "unknown image format in 'anim.gif': GIF is not read (Patina reads JPEG, PNG");
    expect_error(patina_image_decode(&img, "RIFF\x10\0\0\0WEBPVP8 ", 16, NULL, "w.webp"), PATINA_E_FORMAT,
                 "w.webp", ": WebP is not read");
    expect_error(patina_image_decode(&img, "\0\0\0\x1c" "ftypheic\0\0\0\0", 16, NULL, "p.heic"), PATINA_E_FORMAT,
                 "p.heic", ": HEIF/HEIC is not read");
    expect_error(patina_image_probe(&info, "GIF89a....", 10, "anim.gif"), PATINA_E_FORMAT, "anim.gif",
                 "probe: unknown image format");
}

/* Decompression bombs: tiny inputs whose headers declare 16384 x 16384
 * pixels (268 megapixels) are refused from the header by the default limit
 * of 100 megapixels, in every format, naming the input; nothing is
 * allocated for their pixels (img stays empty). */
static void test_bombs(void **state)
{
    char path[512];
    uint8_t *jpg, png[64];
    size_t size, i;
    patina_image_t img;
    patina_image_info_t info;
    static const char ppm[] = "P6\n16384 16384\n255\n\x10\x20\x30";
    patina_limits_t lim = {0, 0};
    (void)state;
    jpg = tu_read_file(tpath(path, sizeof path, "q100_0.jpg"), &size);
    for (i = 2; i + 8 < size; i++)
        if (jpg[i] == 0xFF && jpg[i + 1] == 0xC0) { /* SOF0: height, width */
            jpg[i + 5] = 0x40, jpg[i + 6] = 0, jpg[i + 7] = 0x40, jpg[i + 8] = 0;
            break;
        }
    TU_OK(patina_image_probe(&info, jpg, size, "bomb.jpg"));
    assert_int_equal(info.width, 16384);
    expect_error(patina_image_decode(&img, jpg, size, NULL, "bomb.jpg"), PATINA_E_LIMIT, "bomb.jpg",
                 "decode: 16384x16384 = 268435456 pixels exceeds the limit of 100000000 in 'bomb.jpg'");
    assert_null(img.data);
    free(jpg);
    size = craft_png(png, 16384, 16384);
    expect_error(patina_image_decode(&img, png, size, NULL, "bomb.png"), PATINA_E_LIMIT, "bomb.png",
                 "exceeds the limit of 100000000");
    assert_null(img.data);
    expect_error(patina_image_decode_with(&img, NULL, ppm, sizeof ppm - 1, NULL, "bomb.ppm"), PATINA_E_LIMIT,
                 "bomb.ppm", "exceeds the limit of 100000000");
    assert_null(img.data);
    /* patina_limits_check: the same rule, the default at exactly 10^8 */
    info.width = 10000, info.height = 10000;
    TU_OK(patina_limits_check(NULL, &info, "x"));
    TU_OK(patina_limits_check(&lim, &info, "x"));
    info.height = 10001;
    expect_error(patina_limits_check(NULL, &info, "edge.png"), PATINA_E_LIMIT, "edge.png",
                 "10000x10001 = 100010000 pixels exceeds the limit of 100000000");
    lim.max_pixels = 200000000;
    TU_OK(patina_limits_check(&lim, &info, "x"));
}

/* Damaged but decodable files: libjpeg/libpng go on with a warning. It is
 * reported (never printed) through patina_image_decode_with, and strict
 * decoding makes it an error; truncation stays an error either way. */
static void test_decoder_warnings(void **state)
{
    char path[512];
    uint8_t *jpg, *bad, *png;
    size_t size, i, sos = 0, start = 0, third, psize;
    patina_image_t img;
    patina_decode_report_t rep;
    patina_decode_opts_t strict;
    (void)state;
    patina_decode_opts_init(&strict);
    assert_int_equal(strict.strict, 0);
    assert_int_equal(strict.limits.max_pixels, PATINA_DEFAULT_MAX_PIXELS);
    strict.strict = 1;
    jpg = tu_read_file(tpath(path, sizeof path, "q100_0.jpg"), &size);
    bad = malloc(size + 4);
    for (i = 2; i + 3 < size; i++)
        if (jpg[i] == 0xFF && jpg[i + 1] == 0xDA) {
            sos = i;
            start = i + 2 + ((size_t)jpg[i + 2] << 8 | jpg[i + 3]);
            break;
        }
    assert_true(sos > 0);
    /* 1. four garbage bytes before the SOS marker */
    memcpy(bad, jpg, sos);
    memcpy(bad + sos, "\x01\x02\x03\x04", 4);
    memcpy(bad + sos + 4, jpg + sos, size - sos);
    TU_OK(patina_image_decode_with(&img, &rep, bad, size + 4, NULL, "extra.jpg"));
    assert_int_equal(rep.warnings, 1);
    assert_string_equal(rep.warning, "decode: warning in 'extra.jpg' (libjpeg: Corrupt JPEG data: 4 extraneous "
                                     "bytes before marker 0xda)");
    assert_int_equal(img.width, 67);
    patina_image_release(&img);
    expect_error(patina_image_decode_with(&img, &rep, bad, size + 4, &strict, "extra.jpg"), PATINA_E_CORRUPT,
                 "extra.jpg", "4 extraneous bytes before marker 0xda); strict decoding rejects it");
    assert_int_equal(rep.warnings, 1);
    assert_null(img.data);
    TU_OK(patina_image_decode(&img, bad, size + 4, NULL, "extra.jpg")); /* the old call: accepted */
    patina_image_release(&img);
    /* 2. the middle third of the entropy-coded data cut out (EOI kept) */
    third = (size - 2 - start) / 3;
    memcpy(bad, jpg, start + third);
    memcpy(bad + start + third, jpg + start + 2 * third, size - start - 2 * third);
    TU_OK(patina_image_decode_with(&img, &rep, bad, size - third, NULL, "cut.jpg"));
    assert_int_equal(rep.warnings, 1);
    assert_non_null(strstr(rep.warning, "decode: warning in 'cut.jpg' (libjpeg: Corrupt JPEG data"));
    patina_image_release(&img);
    expect_error(patina_image_decode_with(&img, &rep, bad, size - third, &strict, "cut.jpg"), PATINA_E_CORRUPT,
                 "cut.jpg", "strict decoding rejects it");
    /* the same through a file */
    tu_write_file(tpath(path, sizeof path, "cut.jpg"), bad, size - third);
    TU_OK(patina_image_load_with(&img, &rep, path, NULL));
    assert_int_equal(rep.warnings, 1);
    assert_non_null(strstr(rep.warning, path));
    patina_image_release(&img);
    expect_error(patina_image_load_with(&img, &rep, path, &strict), PATINA_E_CORRUPT, path, "strict");
    /* 3. a clean file: no warning, strict or not */
    TU_OK(patina_image_decode_with(&img, &rep, jpg, size, &strict, "clean.jpg"));
    assert_int_equal(rep.warnings, 0);
    assert_string_equal(rep.warning, "");
    patina_image_release(&img);
    /* 4. truncated (no EOI): an error in both modes, no warning */
    expect_error(patina_image_decode_with(&img, &rep, jpg, size / 2, NULL, "half.jpg"), PATINA_E_CORRUPT,
                 "half.jpg", "truncated JPEG data");
    free(bad);
    free(jpg);
    /* 5. PNG: an ancillary chunk (tEXt) with a bad CRC after IHDR */
    png = tu_read_file(tpath(path, sizeof path, "rgba16.png"), &psize);
    bad = malloc(psize + 32);
    memcpy(bad, png, 33);
    memcpy(bad + 33, "\0\0\0\x0btEXtComment\0hi\xde\xad\xbe\xef", 23);
    memcpy(bad + 56, png + 33, psize - 33);
    TU_OK(patina_image_decode_with(&img, &rep, bad, psize + 23, NULL, "crc.png"));
    assert_int_equal(rep.warnings, 1);
    assert_non_null(strstr(rep.warning, "decode: warning in 'crc.png' (libpng: "));
    assert_non_null(strstr(rep.warning, "CRC"));
    patina_image_release(&img);
    expect_error(patina_image_decode_with(&img, &rep, bad, psize + 23, &strict, "crc.png"), PATINA_E_CORRUPT,
                 "crc.png", "strict decoding rejects it");
    TU_OK(patina_image_decode_with(&img, &rep, png, psize, &strict, "clean.png"));
    assert_int_equal(rep.warnings, 0);
    patina_image_release(&img);
    free(bad);
    free(png);
}

/* ------------------------------------------------- allocation watch
 * The largest single malloc request between watch_start and watch_stop,
 * libpng's and libjpeg's included: through the sanitizer runtime's malloc
 * hook under AddressSanitizer, else through a malloc that records the size
 * and calls glibc's. Not available under ThreadSanitizer (it owns malloc). */
#if defined(__SANITIZE_ADDRESS__)
#define WATCH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WATCH_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define WATCH_NONE 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define WATCH_NONE 1
#endif
#endif

static volatile int g_watching;
static volatile size_t g_max_alloc;

static void note_alloc(size_t n)
{
    if (g_watching && n > g_max_alloc) g_max_alloc = n;
}

#if defined(WATCH_ASAN)
int __sanitizer_install_malloc_and_free_hooks(void (*on_malloc)(const volatile void *, size_t),
                                              void (*on_free)(const volatile void *));
static void asan_on_malloc(const volatile void *p, size_t n)
{
    (void)p;
    note_alloc(n);
}
static void asan_on_free(const volatile void *p) { (void)p; }
static int watch_start(void)
{
    static int installed;
    if (!installed) installed = __sanitizer_install_malloc_and_free_hooks(asan_on_malloc, asan_on_free);
    g_max_alloc = 0;
    g_watching = installed;
    return installed;
}
#elif !defined(WATCH_NONE)
void *__libc_malloc(size_t n);
void *malloc(size_t n)
{
    note_alloc(n);
    return __libc_malloc(n);
}
static int watch_start(void)
{
    g_max_alloc = 0;
    g_watching = 1;
    return 1;
}
#else
static int watch_start(void) { return 0; }
#endif

static size_t watch_stop(void)
{
    g_watching = 0;
    return g_max_alloc;
}

/* A chunk that declares more bytes than the file holds fails as truncated
 * before anything of that size is allocated. libpng allocates a chunk's
 * declared length before reading it (its own length check only warns):
 * tests/fuzz/fuzz_png found a 370-byte file whose tEXt chunk cost a 1.4 GB
 * allocation. Here a 2 GiB tEXt and a 1 GiB unknown ancillary chunk. */
static void test_png_chunk_length(void **state)
{
    static const struct {
        const char *type;
        uint32_t len;
    } cases[] = {{"tEXt", 0x7FFFFFF0u}, {"zTXt", 0x40000000u}, {"ruSt", 0x40000000u}};
    uint8_t png[96];
    patina_image_t img;
    size_t i;
    (void)state;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = craft_png(png, 16, 16) - 12, most; /* IHDR, then instead of IEND: */
        put32(png + n, cases[i].len);
        memcpy(png + n + 4, cases[i].type, 4);
        memcpy(png + n + 8, "Comment\0patina", 15);
        n += 23;
        if (!watch_start()) {
            fprintf(stderr, "test_png_chunk_length: no allocation watch under this sanitizer; "
                            "only the status is checked\n");
        }
        expect_error(patina_image_decode(&img, png, n, NULL, "chunk.png"), PATINA_E_CORRUPT, "chunk.png",
                     "truncated PNG data");
        most = watch_stop();
        assert_null(img.data);
        if (most > (64u << 20))
            fail_msg("a %zu-byte PNG with a %.4s chunk of %u bytes made the decoder allocate %zu bytes", n,
                     cases[i].type, (unsigned)cases[i].len, most);
    }
}

/* Random byte flips in valid files: never a crash or leak; any failure is
 * CORRUPT, FORMAT or LIMIT with the name in the message and an empty image. */
static void test_fuzz_flips(void **state)
{
    static const char *const files[] = {"q100_1.jpg", "pal4_adam7_trns.png", "ga16.png", "p6.ppm", "grey.jpg"};
    patina_limits_t lim = {1u << 20, 0};
    size_t f;
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 1000);
    for (f = 0; f < sizeof files / sizeof *files; f++) {
        char path[512];
        size_t size;
        uint8_t *orig = tu_read_file(tpath(path, sizeof path, files[f]), &size);
        uint8_t *bytes = malloc(size);
        int it;
        for (it = 0; it < 150; it++) {
            patina_image_t img;
            patina_status s;
            int k, flips = 1 + (int)tu_rng_below(&r, 4);
            memcpy(bytes, orig, size);
            for (k = 0; k < flips; k++) bytes[tu_rng_below(&r, (uint32_t)size)] ^= (uint8_t)(1 + tu_rng_below(&r, 255));
            s = patina_image_decode(&img, bytes, size, &lim, "fuzzed");
            if (s == PATINA_OK) {
                patina_image_release(&img);
                continue;
            }
            if (s != PATINA_E_CORRUPT && s != PATINA_E_FORMAT && s != PATINA_E_LIMIT)
                fail_msg("%s flip %d: status %s: %s", files[f], it, patina_status_str(s), patina_last_error());
            assert_non_null(strstr(patina_last_error(), "'fuzzed'"));
            assert_null(img.data);
        }
        free(bytes);
        free(orig);
    }
}

static void test_limits_and_io(void **state)
{
    char path[512], dir_path[512];
    patina_image_t img;
    patina_limits_t lim = {100, 0};
    void *data;
    size_t size;
    (void)state;
    /* pixel limit: 37x23 = 851 > 100 */
    tpath(path, sizeof path, "rgb8.png");
    assert_int_equal(patina_image_load(&img, path, &lim), PATINA_E_LIMIT);
    {
        char want[600];
        snprintf(want, sizeof want, "decode: 37x23 = 851 pixels exceeds the limit of 100 in '%s'", path);
        assert_string_equal(patina_last_error(), want);
    }
    assert_null(img.data);
    lim.max_pixels = 851; /* exactly at the limit is fine */
    TU_OK(patina_image_load(&img, path, &lim));
    patina_image_release(&img);
    /* file size limit, checked before reading */
    lim.max_pixels = 0;
    lim.max_file_bytes = 50;
    expect_error(patina_file_read(&data, &size, path, &lim), PATINA_E_LIMIT, path, "over the limit");
    assert_null(data);
    expect_error(patina_image_load(&img, path, &lim), PATINA_E_LIMIT, path, NULL);
    /* nonexistent file */
    tpath(path, sizeof path, "no/such/file.png");
    expect_error(patina_image_load(&img, path, NULL), PATINA_E_NOTFOUND, path, "No such file");
    expect_error(patina_file_read(&data, &size, path, NULL), PATINA_E_NOTFOUND, path, NULL);
    /* a directory */
    expect_error(patina_image_load(&img, g_dir, NULL), PATINA_E_IO, g_dir, "directory");
    /* empty file */
    tu_write_file(tpath(path, sizeof path, "empty.png"), "", 0);
    TU_OK(patina_file_read(&data, &size, path, NULL));
    assert_int_equal(size, 0);
    free(data);
    expect_error(patina_image_load(&img, path, NULL), PATINA_E_CORRUPT, path, "empty file");
    expect_error(patina_image_decode(&img, "", 0, NULL, "nothing"), PATINA_E_CORRUPT, "nothing", "empty file");
    /* unnamed memory input */
    expect_error(patina_image_decode(&img, "????", 4, NULL, NULL), PATINA_E_FORMAT, "<memory>", NULL);
    (void)dir_path;
}

static void test_image_lifecycle(void **state)
{
    patina_image_t img;
    uint8_t buf[2 * 3 * 4];
    (void)state;
    TU_OK(patina_image_init(&img, 5, 3));
    assert_int_equal(img.stride, 15);
    assert_true(img.owned);
    patina_image_release(&img);
    assert_null(img.data);
    assert_int_equal(img.width, 0);
    patina_image_release(&img); /* twice is fine */
    patina_image_release(NULL);
    assert_int_equal(patina_image_init(&img, 0, 3), PATINA_E_INVALID);
    assert_int_equal(patina_image_init(&img, 3, -1), PATINA_E_INVALID);
    patina_image_wrap(&img, buf, 3, 2, 12);
    assert_ptr_equal(img.data, buf);
    assert_false(img.owned);
    patina_image_release(&img); /* does not free buf */
    assert_null(img.data);
}

/* -------------------------------------------------------------- threads */

typedef struct thread_arg {
    const char *paths[5];
    patina_image_t *refs;
    int failures;
    int id;
} thread_arg_t;

static void *decode_thread(void *p)
{
    thread_arg_t *a = p;
    int it, k;
    char bad[64];
    snprintf(bad, sizeof bad, "thread%d.bin", a->id);
    for (it = 0; it < 6; it++)
        for (k = 0; k < 5; k++) {
            patina_image_t img;
            int y;
            if (patina_image_load(&img, a->paths[k], NULL) != PATINA_OK) {
                a->failures++;
                continue;
            }
            for (y = 0; y < img.height; y++)
                if (memcmp(img.data + y * img.stride, a->refs[k].data + y * a->refs[k].stride,
                           3 * (size_t)img.width) != 0)
                    a->failures++;
            patina_image_release(&img);
            /* each thread sees its own error message */
            if (patina_image_decode(&img, "\x89PNG\r\n", 6, NULL, bad) != PATINA_E_CORRUPT ||
                !strstr(patina_last_error(), bad))
                a->failures++;
        }
    return NULL;
}

static void test_threads(void **state)
{
    static const char *const files[5] = {"rgba16_adam7.png", "q100_2.jpg", "p5_16.pgm", "pal2_trns.png", "ga8.png"};
    char paths[5][512];
    patina_image_t refs[5];
    pthread_t th[8];
    thread_arg_t args[8];
    int i, k;
    (void)state;
    for (k = 0; k < 5; k++) TU_OK(patina_image_load(&refs[k], tpath(paths[k], sizeof paths[k], files[k]), NULL));
    for (i = 0; i < 8; i++) {
        memset(&args[i], 0, sizeof args[i]);
        for (k = 0; k < 5; k++) args[i].paths[k] = paths[k];
        args[i].refs = refs;
        args[i].id = i;
        assert_int_equal(pthread_create(&th[i], NULL, decode_thread, &args[i]), 0);
    }
    for (i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].failures, 0);
    }
    for (k = 0; k < 5; k++) patina_image_release(&refs[k]);
}

/* ----------------------------------------------------------------- main */

static int setup(void **state)
{
    (void)state;
    g_dir = tu_tempdir("image");
    return g_dir ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tu_remove_tree(g_dir);
    free(g_dir);
    return 0;
}

int main(void)
{
    /* Order matters: later tests reuse files the PNG/JPEG/PNM tests wrote. */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_image_lifecycle),
        cmocka_unit_test(test_png_rgb8),
        cmocka_unit_test(test_png_one_pixel),
        cmocka_unit_test(test_png_palette),
        cmocka_unit_test(test_png_grey_low_depth),
        cmocka_unit_test(test_png_grey16_exhaustive),
        cmocka_unit_test(test_png_rgb16_exhaustive),
        cmocka_unit_test(test_png_rgba8_exhaustive),
        cmocka_unit_test(test_png_rgba16),
        cmocka_unit_test(test_srgb_lift_values),
        cmocka_unit_test(test_png_grey_alpha8_exhaustive),
        cmocka_unit_test(test_png_grey_alpha16),
        cmocka_unit_test(test_png_grey_trns),
        cmocka_unit_test(test_png_grey16_trns_exhaustive),
        cmocka_unit_test(test_png_raw_quirks),
        cmocka_unit_test(test_png_rgb_trns),
        cmocka_unit_test(test_jpeg_roundtrip),
        cmocka_unit_test(test_jpeg_grey),
        cmocka_unit_test(test_jpeg_cmyk),
        cmocka_unit_test(test_jpeg_cmyk_exact),
        cmocka_unit_test(test_jpeg_exif_orientation),
        cmocka_unit_test(test_pnm_8bit),
        cmocka_unit_test(test_pnm_16bit),
        cmocka_unit_test(test_pnm_rejects),
        cmocka_unit_test(test_probe_header_only),
        cmocka_unit_test(test_sniff),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_corrupt),
        cmocka_unit_test(test_bombs),
        cmocka_unit_test(test_decoder_warnings),
        cmocka_unit_test(test_png_chunk_length),
        cmocka_unit_test(test_fuzz_flips),
        cmocka_unit_test(test_limits_and_io),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
