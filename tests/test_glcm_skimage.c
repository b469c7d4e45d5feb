/* Parity of the glcm family with scikit-image's graycomatrix / graycoprops
 * (and mahotas' haralick where it is installed), through the CLI:
 * tests/peers/glcm_skimage.py does the comparing. This program writes the
 * inputs - random images of several kinds and sizes, and the grey of every
 * real photograph under PATINA_SAMPLES (env) or PATINA_SAMPLES_DIR, by
 * patina's one colour-to-grey rule - as 8-bit PGMs, then runs the script.
 * Skipped (77) when no python3 with scikit-image is found; PATINA_PYTHON
 * names the interpreter to use. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static void write_pgm(const char *path, const uint8_t *g, int w, int h)
{
    char hdr[64];
    size_t hl = (size_t)snprintf(hdr, sizeof hdr, "P5\n%d %d\n255\n", w, h);
    uint8_t *buf = malloc(hl + (size_t)w * (size_t)h);
    assert_non_null(buf);
    memcpy(buf, hdr, hl);
    memcpy(buf + hl, g, (size_t)w * (size_t)h);
    assert_int_equal(tu_write_file(path, buf, hl + (size_t)w * (size_t)h), 0);
    free(buf);
}

static void write_grey_of(const char *path, const patina_image_t *img)
{
    uint8_t *g = malloc((size_t)img->width * (size_t)img->height + 1);
    assert_non_null(g);
    TU_OK(patina_image_to_grey(g, img));
    write_pgm(path, g, img->width, img->height);
    free(g);
}

static void test_parity(void **state)
{
    const char *py = *state;
    static const int sizes[][2] = {{1, 1}, {57, 1}, {1, 57}, {7, 5}, {64, 64}, {127, 93}, {300, 200}};
    const char *samples = getenv("PATINA_SAMPLES");
    char *dir = tu_tempdir("glcm-skimage"), path[4096], **list = NULL, *out = NULL;
    size_t n = 0, i;
    tu_rng_t rng;
    int rc;
    tu_rng_seed(&rng, 2024);
    for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (int kind = 0; kind < 4; kind++) {
            patina_image_t img;
            if (kind > 0 && sizes[i][0] * sizes[i][1] < 64) continue;
            tu_random_image(&img, sizes[i][0], sizes[i][1], kind, &rng);
            snprintf(path, sizeof path, "%s/random_%dx%d_k%d.pgm", dir, sizes[i][0], sizes[i][1], kind);
            write_grey_of(path, &img);
            patina_image_release(&img);
        }
    {   /* constant image */
        uint8_t flat[40 * 30];
        memset(flat, 200, sizeof flat);
        snprintf(path, sizeof path, "%s/constant_40x30.pgm", dir);
        write_pgm(path, flat, 40, 30);
    }
    if (!samples || !*samples) samples = PATINA_SAMPLES_DIR;
    n = tu_list_files(samples, "jpg,jpeg,png", &list);
    for (i = 0; i < n; i++) {
        patina_image_t img;
        const char *base = strrchr(list[i], '/');
        if (patina_image_load(&img, list[i], NULL) != PATINA_OK) {
            print_message("skipping %s: %s\n", list[i], patina_last_error());
            continue;
        }
        snprintf(path, sizeof path, "%s/photo_%03zu_%s.pgm", dir, i, base ? base + 1 : list[i]);
        write_grey_of(path, &img);
        patina_image_release(&img);
    }
    print_message("%zu real photographs from %s%s\n", n, samples,
                  n ? "" : " (none: run scripts/fetch-samples.sh for the real-photo part)");
    tu_free_list(list, n);
    rc = tu_run(&out, "'%s' '%s/../peers/glcm_skimage.py' --cli '%s' --dir '%s' 2>&1", py,
                PATINA_TEST_DATA, PATINA_CLI, dir);
    printf("%s", out ? out : "");
    free(out);
    assert_int_equal(rc, 0);
    tu_remove_tree(dir);
    free(dir);
}

int main(void)
{
    const char *py = tu_find_python("import numpy, skimage.feature", NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_parity, (void *)py),
    };
    if (!py) {
        printf("SKIPPED: no python3 with numpy and scikit-image (apt-get install python3-skimage, "
               "or set PATINA_PYTHON)\n");
        return 77;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
