/* The exact two-stage JPEG decoder's C reference (src/image/jpeg_exact.c,
 * src/algo/jpeg_exact_core.h) against the CPU path (patina_image_decode:
 * TurboJPEG as src/image/jpeg.c configures it): byte-identical pixels on
 * generated files in every mode (tests/jpegx_cases.h), on a quality sweep and
 * on every sample photograph; files it must not take (damaged, truncated,
 * smoothed progressive, crafted coefficients) are refused and still decode
 * on the CPU path. Prints per-mode and per-coding mismatch counts. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "algo/jpeg_exact_core.h"
#include "image/jpeg_exact.h"
#include "jpegx_cases.h"
#include "patina/patina.h"
#include "testutil.h"

/* Samples of a and b (same size) that differ; a size mismatch counts all. */
static size_t diff(const patina_image_t *a, const patina_image_t *b)
{
    size_t n = 0;
    if (a->width != b->width || a->height != b->height) return (size_t)a->width * (size_t)a->height * 3 + 1;
    for (int y = 0; y < a->height; y++) {
        const uint8_t *p = a->data + (size_t)y * a->stride, *q = b->data + (size_t)y * b->stride;
        for (int x = 0; x < 3 * a->width; x++) n += p[x] != q[x];
    }
    return n;
}

typedef struct tally {
    size_t files, cpu_refuses, refused, bad_files, bad_samples;
} tally_t;

/* Decodes one file both ways; 1 when taken and identical. */
static int check_one(tally_t *t, const void *jpg, size_t size, const char *name, int must_take)
{
    patina_image_t ref, got;
    size_t d;
    patina_status s;
    t->files++;
    s = patina__jpegx_decode(&got, jpg, size, name);
    if (patina_image_decode(&ref, jpg, size, NULL, name) != PATINA_OK) {
        /* the CPU path refuses it (TurboJPEG knows no such subsampling):
         * the exact decoder must leave it to it */
        t->cpu_refuses++;
        if (s == PATINA_OK) {
            t->bad_files++;
            printf("  TAKEN %s although the CPU path refuses it\n", name);
            patina_image_release(&got);
        }
        return 0;
    }
    if (s != PATINA_OK) {
        t->refused++;
        if (must_take) printf("  refused %s: %s\n", name, patina_last_error());
        patina_image_release(&ref);
        return 0;
    }
    d = diff(&ref, &got);
    if (d) {
        t->bad_files++;
        t->bad_samples += d;
        if (t->bad_files <= 5) printf("  MISMATCH %s: %zu samples\n", name, d);
    }
    patina_image_release(&ref);
    patina_image_release(&got);
    return d == 0;
}

static void test_generated(void **state)
{
    tally_t mode[JXC_NMODES], coding[JXC_NCODINGS], all = {0};
    char name[128];
    (void)state;
    memset(mode, 0, sizeof mode);
    memset(coding, 0, sizeof coding);
    for (size_t i = 0; i < JXC_NCASES + JXC_NSWEEP; i++) {
        jxc_case_t k = i < JXC_NCASES ? jxc_case(i) : jxc_sweep(i - JXC_NCASES);
        unsigned long size = 0;
        unsigned char *jpg = jxc_make(&size, &jxc_modes[k.mode], k.coding, k.quality, k.w, k.h, k.kind, k.seed);
        tally_t one = {0};
        snprintf(name, sizeof name, "%s %s %dx%d q%d", jxc_modes[k.mode].name, jxc_coding_names[k.coding], k.w, k.h,
                 k.quality);
        check_one(&one, jpg, size, name, 1);
        free(jpg);
        for (int t = 0; t < 3; t++) {
            tally_t *x = t == 0 ? &mode[k.mode] : t == 1 ? &coding[k.coding] : &all;
            x->files += one.files;
            x->refused += one.refused;
            x->cpu_refuses += one.cpu_refuses;
            x->bad_files += one.bad_files;
            x->bad_samples += one.bad_samples;
        }
    }
    /* "cpu refuses": files TurboJPEG itself does not decode (no TurboJPEG
     * subsampling class); the exact decoder must refuse them too */
    printf("%-22s %6s %11s %8s %10s %12s\n", "mode / coding", "files", "cpu refuses", "refused", "mismatched",
           "bad samples");
    for (size_t m = 0; m < JXC_NMODES; m++)
        printf("%-22s %6zu %11zu %8zu %10zu %12zu\n", jxc_modes[m].name, mode[m].files, mode[m].cpu_refuses,
               mode[m].refused, mode[m].bad_files, mode[m].bad_samples);
    for (int c = 0; c < JXC_NCODINGS; c++)
        printf("%-22s %6zu %11zu %8zu %10zu %12zu\n", jxc_coding_names[c], coding[c].files, coding[c].cpu_refuses,
               coding[c].refused, coding[c].bad_files, coding[c].bad_samples);
    printf("%-22s %6zu %11zu %8zu %10zu %12zu\n", "all", all.files, all.cpu_refuses, all.refused, all.bad_files,
           all.bad_samples);
    assert_int_equal(all.refused, 0);
    assert_int_equal(all.bad_files, 0);
}

static void test_samples(void **state)
{
    const char *dir = getenv("PATINA_SAMPLES");
    char **files = NULL;
    size_t n, i;
    tally_t t = {0};
    (void)state;
    if (!dir || !*dir) dir = PATINA_SAMPLES_DIR;
    n = tu_list_files(dir, "jpg,jpeg,JPG,JPEG", &files);
    if (n == 0) {
        printf("no sample photographs under %s (scripts/fetch-samples.sh); skipped\n", dir);
        return;
    }
    for (i = 0; i < n; i++) {
        size_t size;
        void *data = tu_read_file(files[i], &size);
        patina_image_info_t info;
        if (patina_image_probe(&info, data, size, files[i]) == PATINA_OK) check_one(&t, data, size, files[i], 0);
        free(data);
    }
    printf("samples: %zu JPEGs, %zu refused (left to libjpeg-turbo), %zu mismatched (%zu samples)\n", t.files,
           t.refused, t.bad_files, t.bad_samples);
    tu_free_list(files, n);
    assert_int_equal(t.bad_files, 0);
    assert_true(t.refused * 10 <= t.files); /* photographs are the common case: nearly all taken */
}

/* A progressive 4:2:0 file whose scan script never refines the DC's last
 * bit: libjpeg smooths its blocks (jdcoefct.c), so it is not taken. */
static unsigned char *incomplete_progressive(unsigned long *size)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    static jpeg_scan_info scans[4];
    unsigned char *buf = NULL, row[3 * 48];
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &buf, size);
    c.image_width = 48;
    c.image_height = 40;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    /* DC of all components with Al = 1 (never refined), then full AC bands */
    scans[0] = (jpeg_scan_info){3, {0, 1, 2, 0}, 0, 0, 0, 1};
    for (int k = 0; k < 3; k++) scans[1 + k] = (jpeg_scan_info){1, {k, 0, 0, 0}, 1, 63, 0, 0};
    c.scan_info = scans;
    c.num_scans = 4;
    jpeg_start_compress(&c, TRUE);
    for (int y = 0; y < 40; y++) {
        JSAMPROW r = row;
        for (int x = 0; x < 48; x++) row[3 * x] = (uint8_t)(x * 5), row[3 * x + 1] = (uint8_t)(y * 6), row[3 * x + 2] = 90;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    return buf;
}

static void expect_refused(const void *jpg, size_t size, const char *name, int cpu_decodes)
{
    patina_image_t img;
    patina_status s = patina__jpegx_decode(&img, jpg, size, name);
    if (s != PATINA_E_FORMAT) fail_msg("%s: taken (%s), should be refused", name, patina_status_str(s));
    assert_null(img.data);
    if (cpu_decodes) {
        TU_OK(patina_image_decode(&img, jpg, size, NULL, name));
        patina_image_release(&img);
    }
}

static void test_refused(void **state)
{
    unsigned long size = 0;
    unsigned char *jpg = jxc_make(&size, &jxc_modes[2], JXC_BASE, 80, 64, 48, 1, 5), *bad;
    static const uint8_t png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0};
    (void)state;
    /* truncated: libjpeg warns ("Premature end"), the CPU path says truncated */
    expect_refused(jpg, size / 2, "truncated", 0);
    /* garbage before a marker: a warning; the CPU path decodes it with the warning */
    bad = malloc(size + 4);
    assert_non_null(bad);
    {
        size_t at = 4 + ((size_t)jpg[4] << 8 | jpg[5]); /* after the APP0 segment */
        memcpy(bad, jpg, at);
        memcpy(bad + at, "\x01\x02\x03\x04", 4);
        memcpy(bad + at + 4, jpg + at, size - at);
    }
    expect_refused(bad, size + 4, "extraneous bytes", 1);
    /* damaged entropy data: flip bytes in the middle of the scan */
    memcpy(bad, jpg, size);
    for (size_t i = size / 2; i < size / 2 + 16; i++) bad[i] = (uint8_t)(bad[i] == 0xFF ? 0x00 : 0xFF ^ bad[i]);
    {
        patina_image_t img;
        patina_status s = patina__jpegx_decode(&img, bad, size, "flipped");
        if (s == PATINA_OK) { /* no warning: then it must equal the CPU path */
            tally_t t = {0};
            patina_image_release(&img);
            assert_true(check_one(&t, bad, size, "flipped", 1));
        }
    }
    free(bad);
    free(jpg);
    expect_refused(png, sizeof png, "png", 0);
    jpg = incomplete_progressive(&size);
    expect_refused(jpg, size, "smoothed progressive", 1);
    free(jpg);
}

/* The exact range: a block whose dequantised coefficients exceed JX_SAFE, or
 * whose outputs would need libjpeg's range-table wraparound, is refused. */
static void test_range(void **state)
{
    int16_t coef[64];
    uint16_t q[64];
    uint8_t out[64];
    (void)state;
    for (int i = 0; i < 64; i++) q[i] = 1, coef[i] = 0;
    coef[0] = 1000; /* flat block: (1000 * 4 + 16) >> 5 = 125 -> 253 */
    assert_int_equal(jx_idct(coef, 1, q, out, 8), 1);
    for (int i = 0; i < 64; i++) assert_int_equal(out[i], 253);
    coef[0] = -1024; /* -128 -> 0 */
    assert_int_equal(jx_idct(coef, 1, q, out, 8), 1);
    for (int i = 0; i < 64; i++) assert_int_equal(out[i], 0);
    coef[0] = 3000; /* DC only, 3000 * 4 = 12000 <= JX_SAFE; output 375: clamped to 255 */
    assert_int_equal(jx_idct(coef, 1, q, out, 8), 1);
    assert_int_equal(out[0], 255);
    coef[0] = 3001; /* pass-1 output 12004 > JX_SAFE */
    assert_int_equal(jx_idct(coef, 1, q, out, 8), 0);
    coef[0] = 0;
    coef[9] = 12001; /* a dequantised AC coefficient over JX_SAFE */
    assert_int_equal(jx_idct(coef, 1, q, out, 8), 0);
    coef[9] = 0;
    q[0] = 255;
    coef[0] = 47; /* 11985 <= JX_SAFE, but its DC term 47 * 255 * 4 > JX_SAFE after pass 1 */
    assert_int_equal(jx_idct(coef, 1, q, out, 8), 0);
    /* the range table: v + 128 inside [-128, 127], clamped out to +-511 */
    assert_int_equal(jx_range(-128), 0);
    assert_int_equal(jx_range(127), 255);
    assert_int_equal(jx_range(511), 255);
    assert_int_equal(jx_range(-512), 0);
    assert_int_equal(jx_range(0), 128);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_range),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_generated),
        cmocka_unit_test(test_samples),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
