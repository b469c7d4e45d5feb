/* glcm and haralick on images in device memory, called directly
 * (patina_extract_batch), outside the pipeline (test_jpeg_exact_gpu's
 * family test covers the pipeline). It once crashed on the host side: the
 * piece planner turned src_direct's GLCM_DEV_RGB into 1 (a pinned grey
 * image) and read a grey table that device images do not have. It
 * holds it to the records of the same GPU kernels on libjpeg-turbo's host
 * images, byte for byte:
 *   - images decoded by the exact GPU decoder (generated files in 7 modes
 *     and 3 codings at odd sizes, tiny 9x7 and 1x1 ones, up to 8 sample
 *     photographs), mixed with host images in one batch;
 *   - glcm and haralick with their defaults (levels made on the device,
 *     k_levels) and glcm with quant=none (the device images come back to
 *     the host for their levels);
 *   - batches of 1, 5 and all images.
 * Skipped (77) without a GPU. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/internal.h"
#include "gpu/gpu.h"
#include "jpegx_cases.h"
#include "patina/patina.h"
#include "testutil.h"

enum { MAXF = 40 };

typedef struct files {
    size_t n;
    void *data[MAXF];
    size_t size[MAXF];
} files_t;

static void make_files(files_t *f)
{
    static const int modes[] = {0, 1, 2, 3, 4, 9, 11};
    static const jxc_coding codings[] = {JXC_BASE, JXC_PROG, JXC_RST};
    const char *sdir = getenv("PATINA_SAMPLES");
    char **samples = NULL;
    size_t ns;
    int k = 0;
    f->n = 0;
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++)
        for (size_t c = 0; c < sizeof codings / sizeof codings[0]; c++, k++) {
            unsigned long len;
            int w = 97 + 61 * k % 400, h = 83 + 37 * k % 300;
            f->data[f->n] = jxc_make(&len, &jxc_modes[modes[m]], codings[c], 60 + k % 40, w, h, 1 + k % 3,
                                     4242u + (unsigned)k);
            f->size[f->n++] = len;
        }
    for (int t = 0; t < 2; t++) {
        unsigned long len;
        f->data[f->n] = jxc_make(&len, &jxc_modes[2], JXC_BASE, 90, t ? 1 : 9, t ? 1 : 7, 1, 77u + (unsigned)t);
        f->size[f->n++] = len;
    }
    if (!sdir || !*sdir) sdir = PATINA_SAMPLES_DIR;
    ns = tu_list_files(sdir, "jpg,jpeg,JPG,JPEG", &samples);
    for (size_t i = 0; i < ns; i++) {
        if (i < 8 && f->n < MAXF) {
            f->data[f->n] = tu_read_file(samples[i], &f->size[f->n]);
            assert_non_null(f->data[f->n]);
            f->n++;
        }
        free(samples[i]);
    }
    free(samples);
}

static void test_device_images(void **state)
{
    static const char *const fams[] = {"glcm", "haralick", "glcm:levels=256,quant=none"};
    static const size_t batches[] = {1, 5, MAXF};
    files_t f;
    patina_gpu_t *g;
    patina_jpegx_gpu_t *d;
    patina_pool_t *pool;
    patina_context_t *ctx;
    patina_image_t host[MAXF], dev[MAXF], mixed[MAXF];
    patina_status st[MAXF];
    size_t ndev = 0, bad = 0;
    (void)state;
    tu_crash_backtrace(); /* the crash this test is for: where it happens */
    make_files(&f);
    TU_OK(patina_gpu_open(&g, 0, 0));
    TU_OK(patina_gpu_jpegx_open(&d, g));
    TU_OK(patina_pool_new(&pool, 4));
    TU_OK(patina_context_new(&ctx, NULL));
    for (size_t i = 0; i < f.n; i++) {
        patina_image_info_t info;
        TU_OK(patina_image_decode(&host[i], f.data[i], f.size[i], NULL, "glcm-devimg"));
        TU_OK(patina_image_probe(&info, f.data[i], f.size[i], "glcm-devimg"));
        dev[i].width = info.width;
        dev[i].height = info.height;
    }
    TU_OK(patina_gpu_jpegx_decode(d, pool, dev, (const void *const *)f.data, f.size, f.n, st));
    for (size_t i = 0; i < f.n; i++) { /* every other image from the device, the rest from the host */
        const int on_dev = st[i] == PATINA_OK && i % 2 == 0;
        mixed[i] = on_dev ? dev[i] : host[i];
        ndev += on_dev;
        if (on_dev) assert_true(patina_gpu_image_on_device(&mixed[i]));
    }
    printf("%zu images, %zu of them in device memory\n", f.n, ndev);
    assert_true(ndev >= f.n / 3);
    for (size_t k = 0; k < sizeof fams / sizeof fams[0]; k++) {
        patina_extractor_t *ex;
        size_t bytes;
        uint8_t *a, *b;
        patina_status sa[MAXF], sb[MAXF];
        TU_OK(patina_extractor_new(&ex, fams[k]));
        bytes = patina_extractor_bytes(ex);
        a = calloc(f.n, bytes);
        b = calloc(f.n, bytes);
        assert_true(a && b);
        for (size_t q = 0; q < sizeof batches / sizeof batches[0]; q++) {
            const size_t m = batches[q];
            size_t diff = 0;
            for (size_t i0 = 0; i0 < f.n; i0 += m) {
                const size_t c = f.n - i0 < m ? f.n - i0 : m;
                printf("  %s: images %zu..%zu\n", fams[k], i0, i0 + c - 1);
                fflush(stdout);
                TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_GPU, a + i0 * bytes, host + i0, c, sa + i0));
                TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_GPU, b + i0 * bytes, mixed + i0, c, sb + i0));
            }
            for (size_t i = 0; i < f.n; i++)
                if (sa[i] != sb[i] || (sa[i] == PATINA_OK && memcmp(a + i * bytes, b + i * bytes, bytes))) {
                    printf("  %s, batches of %zu: image %zu differs (status %d vs %d)\n", fams[k], m, i, (int)sa[i],
                           (int)sb[i]);
                    diff++;
                }
            printf("%s, batches of %zu: %zu of %zu records differ\n", fams[k], m, diff, f.n);
            bad += diff;
        }
        free(a);
        free(b);
        patina_extractor_free(ex);
    }
    assert_int_equal(bad, 0);
    for (size_t i = 0; i < f.n; i++) {
        patina_image_release(&host[i]);
        free(f.data[i]);
    }
    patina_context_free(ctx);
    patina_gpu_jpegx_close(d);
    patina_pool_free(pool);
    patina_gpu_close(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_images),
    };
    (void)jxc_case; /* jpegx_cases.h's generators this test does not use */
    (void)jxc_sweep;
    tu_require_gpu();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
