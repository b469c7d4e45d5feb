/* The parallel Huffman decoder's kernels (src/gpu/jpeg_huff.cu) against its
 * C reference (patina__jpegh_steps, the same steps in loops) and against
 * libjpeg-turbo's jpeg_read_coefficients, and the exact GPU decoder with the
 * entropy stage on the device against the CPU path's pixels:
 *   - coefficients and flags of the kernels equal the reference's for every
 *     image of a batch (flagged images included: the algorithm is
 *     deterministic), and libjpeg's for every image not flagged, on generated
 *     files of every subsampling (baseline, optimised tables, restart
 *     intervals, 1x1..203x151, quality 10-100), larger pictures with restart
 *     intervals of 0, 1, 7 and 64 MCUs, damaged copies (bytes replaced, bits
 *     flipped, bytes cut out, garbage before the end of image) and every sample
 *     photograph; in batches of 1, 7 and 64 images and all at once;
 *   - patina_gpu_jpegx_decode with the entropy stage on the device and on the
 *     CPU workers: pixels identical to patina_image_decode's, files the device
 *     flags (damaged) left to the caller as PATINA_E_FORMAT.
 * Prints pass/fail counts and the kernels' images/s. Skipped (77) without a GPU. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jpeglib.h>

#include "core/internal.h"
#include "gpu/gpu.h"
#include "jpegh_util.h"
#include "patina/patina.h"
#include "testutil.h"

static patina_gpu_t *G;
static patina_jpegx_gpu_t *D;
static patina_pool_t *P;

/* ------------------------------------------------------------ the file sets */

typedef struct fileset {
    size_t n, cap;
    unsigned char **data;
    size_t *size;
    char **name;
} fileset_t;

static void fs_add(fileset_t *s, unsigned char *data, size_t size, const char *name)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->data = realloc(s->data, s->cap * sizeof *s->data);
        s->size = realloc(s->size, s->cap * sizeof *s->size);
        s->name = realloc(s->name, s->cap * sizeof *s->name);
        assert_true(s->data && s->size && s->name);
    }
    s->data[s->n] = data;
    s->size[s->n] = size;
    s->name[s->n] = strdup(name);
    s->n++;
}

static void fs_free(fileset_t *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->data[i]);
        free(s->name[i]);
    }
    free(s->data);
    free(s->size);
    free(s->name);
    memset(s, 0, sizeof *s);
}

static void fs_generated(fileset_t *s)
{
    char name[128];
    for (size_t i = 0; i < JXC_NCASES + JXC_NSWEEP; i++) {
        jxc_case_t k = i < JXC_NCASES ? jxc_case(i) : jxc_sweep(i - JXC_NCASES);
        unsigned long size = 0;
        unsigned char *jpg;
        if (k.coding != JXC_BASE && k.coding != JXC_OPT && k.coding != JXC_RST) continue;
        jpg = jxc_make(&size, &jxc_modes[k.mode], k.coding, k.quality, k.w, k.h, k.kind, k.seed);
        snprintf(name, sizeof name, "%s %s %dx%d q%d", jxc_modes[k.mode].name, jxc_coding_names[k.coding], k.w, k.h,
                 k.quality);
        fs_add(s, jpg, size, name);
    }
}

static void fs_large(fileset_t *s)
{
    static const int modes[] = {0, 1, 2, 3, 4, 9};
    static const unsigned rsts[] = {0, 1, 7, 64};
    char name[128];
    for (size_t m = 0; m < 6; m++)
        for (size_t r = 0; r < 4; r++) {
            unsigned long size = 0;
            int q = 30 + (int)((m * 17 + r * 29) % 71);
            unsigned char *jpg = make_jpeg(&size, &jxc_modes[modes[m]], q, 640, 480, (int)((m + r) % 4), 90 + m * 4 + r,
                                           rsts[r], (int)(r % 2));
            snprintf(name, sizeof name, "%s rst %u 640x480 q%d", jxc_modes[modes[m]].name, rsts[r], q);
            fs_add(s, jpg, size, name);
        }
}

static void fs_damaged(fileset_t *s)
{
    tu_rng_t rng;
    tu_rng_seed(&rng, 77);
    for (int f = 0; f < 4; f++) {
        unsigned long size = 0;
        unsigned char *jpg = make_jpeg(&size, &jxc_modes[f == 3 ? 9 : 2], 75, 200 + 40 * f, 150 + 30 * f, f, 600 + f,
                                       f == 1 ? 4u : f == 2 ? 1u : 0u, f == 3);
        size_t sos = 0;
        for (size_t i = 2; i + 1 < size; i++)
            if (jpg[i] == 0xFF && jpg[i + 1] == 0xDA) {
                sos = i + 2 + ((size_t)jpg[i + 2] << 8 | jpg[i + 3]);
                break;
            }
        assert_true(sos > 0);
        for (int k = 0; k < 60; k++) {
            unsigned char *bad = malloc(size + 4);
            size_t at = sos + tu_rng_below(&rng, (uint32_t)(size - 40 - sos)), n = size;
            assert_non_null(bad);
            memcpy(bad, jpg, size);
            if (k % 3 == 0) bad[at] = (uint8_t)tu_rng_below(&rng, 256);
            else if (k % 3 == 1) bad[at] ^= (uint8_t)(1u << tu_rng_below(&rng, 8));
            else {
                size_t len = 1 + tu_rng_below(&rng, 16);
                memmove(bad + at, bad + at + len, size - at - len);
                n = size - len;
            }
            fs_add(s, bad, n, k % 3 == 0 ? "byte replaced" : k % 3 == 1 ? "bit flipped" : "bytes cut out");
        }
        {
            unsigned char *bad = malloc(size + 4);
            assert_non_null(bad);
            memcpy(bad, jpg, size - 2);
            memcpy(bad + size - 2, "\x12\x34\xFF\xD9", 4);
            fs_add(s, bad, size + 2, "garbage before EOI");
        }
        free(jpg);
    }
}

static void fs_samples(fileset_t *s)
{
    const char *dir = getenv("PATINA_SAMPLES");
    char **files = NULL;
    size_t n;
    if (!dir || !*dir) dir = PATINA_SAMPLES_DIR;
    n = tu_list_files(dir, "jpg,jpeg,JPG,JPEG", &files);
    if (n == 0) printf("no sample photographs under %s (scripts/fetch-samples.sh): none in this set\n", dir);
    for (size_t i = 0; i < n; i++) {
        size_t size;
        unsigned char *data = tu_read_file(files[i], &size);
        fs_add(s, data, size, files[i]);
    }
    tu_free_list(files, n);
}

/* ------------------------------------------------------------ kernels vs reference */

typedef struct ktally {
    size_t images, flagged, ref_mismatch, flag_mismatch, lj_mismatch, lj_warned_decoded;
    double seconds;
} ktally_t;

/* The items of set s in batches of `per` (0: all at once), their chunks'
 * sizes by item_chunk_bits(mode). */
static void check_kernels(ktally_t *t, fileset_t *s, size_t per, int mode)
{
    item_t *items = calloc(s->n, sizeof *items);
    assert_non_null(items);
    for (size_t i = 0; i < s->n; i++) {
        item_make(&items[i], s->data[i], s->size[i], s->name[i]);
        item_restage(&items[i], item_chunk_bits(mode, i));
    }
    if (per == 0) per = s->n;
    for (size_t i0 = 0; i0 < s->n; i0 += per) {
        size_t n = s->n - i0 < per ? s->n - i0 : per, m = 0;
        jh_tbatch_t b;
        uint32_t *fr, *fg;
        int16_t *cr, *cg;
        double sec = 0;
        if (!jh_tbatch_make(&b, items + i0, n)) continue;
        fr = calloc(b.nimg, sizeof *fr);
        fg = calloc(b.nimg, sizeof *fg);
        cr = calloc(b.blocks * 64 + 1, sizeof *cr);
        cg = calloc(b.blocks * 64 + 1, sizeof *cg);
        assert_true(fr && fg && cr && cg);
        jh_tbatch_ref(&b, JH_ROUNDS, 0, fr, cr);
        TU_OK(patina_gpu__jpegh_decode(G, b.base, b.bytes, b.img, b.nimg, b.nchunk, b.niv, cg, b.blocks, fg, &sec));
        t->seconds += sec;
        for (size_t i = i0; i < i0 + n; i++) {
            item_t *it = &items[i];
            const jh_img_t *im;
            size_t nb;
            if (!it->huff) continue;
            im = &b.img[m];
            nb = (size_t)im->nblocks * 64;
            t->images++;
            t->flagged += fg[m] != 0;
            if (fg[m] != fr[m]) {
                t->flag_mismatch++;
                printf("  FLAGS %s: kernels 0x%x, reference 0x%x\n", it->name, fg[m], fr[m]);
            }
            if (memcmp(cg + im->coef * 64, cr + im->coef * 64, nb * sizeof *cg) != 0) {
                size_t k = 0;
                while (cg[im->coef * 64 + k] == cr[im->coef * 64 + k]) k++;
                t->ref_mismatch++;
                if (t->ref_mismatch <= 10)
                    printf("  KERNELS != REFERENCE %s: block %zu coefficient %zu: %d, reference %d\n", it->name, k / 64,
                           k % 64, cg[im->coef * 64 + k], cr[im->coef * 64 + k]);
            }
            if (!fg[m]) {
                if (!it->lj_ok) {
                    t->lj_warned_decoded++;
                    printf("  DECODED %s although libjpeg warns\n", it->name);
                } else if (memcmp(cg + im->coef * 64, it->lj, nb * sizeof *cg) != 0) {
                    t->lj_mismatch++;
                    printf("  KERNELS != LIBJPEG %s\n", it->name);
                }
            }
            m++;
        }
        free(fr);
        free(fg);
        free(cr);
        free(cg);
        jh_tbatch_free(&b);
    }
    for (size_t i = 0; i < s->n; i++) item_free(&items[i]);
    free(items);
}

static void kernels_on(const char *what, void (*make)(fileset_t *))
{
    /* batches of 1, 7, 64 and all with the default chunks; then all with
     * chunk sizes mixed in the batch, and batches of 7 with the smallest */
    static const size_t pers[] = {1, 7, 64, 0, 0, 7};
    static const int modes[] = {0, 0, 0, 0, 4, 1};
    fileset_t s = {0};
    make(&s);
    if (s.n == 0) return; /* no sample photographs */
    for (size_t p = 0; p < 6; p++) {
        ktally_t t = {0};
        check_kernels(&t, &s, pers[p], modes[p]);
        printf("%-12s batches of %-4s%-13s: %5zu images, %4zu flagged; kernels != reference %zu (flags %zu), "
               "!= libjpeg %zu, decoded although libjpeg warns %zu; kernels %.0f images/s  %s\n",
               what, pers[p] ? (pers[p] == 1 ? "1" : pers[p] == 7 ? "7" : "64") : "all",
               modes[p] == 4 ? " mixed chunks" : modes[p] == 1 ? " 512-bit" : "", t.images, t.flagged,
               t.ref_mismatch, t.flag_mismatch, t.lj_mismatch, t.lj_warned_decoded,
               t.seconds > 0 ? (double)t.images / t.seconds : 0.0,
               t.ref_mismatch + t.flag_mismatch + t.lj_mismatch + t.lj_warned_decoded ? "FAIL" : "pass");
        assert_int_equal(t.ref_mismatch + t.flag_mismatch + t.lj_mismatch + t.lj_warned_decoded, 0);
    }
    fs_free(&s);
}

static void test_kernels_generated(void **state)
{
    (void)state;
    kernels_on("generated", fs_generated);
}

static void test_kernels_large(void **state)
{
    (void)state;
    kernels_on("large", fs_large);
}

static void test_kernels_damaged(void **state)
{
    (void)state;
    kernels_on("damaged", fs_damaged);
}

static void test_kernels_samples(void **state)
{
    (void)state;
    kernels_on("samples", fs_samples);
}

/* ------------------------------------------------------------ the decoder, end to end */

/* Decodes set s in batches of 64 with the entropy stage on the device (on)
 * or the workers; counts files taken, pixel mismatches against the CPU path,
 * and files taken that the CPU path refuses. */
static void decode_set(fileset_t *s, int on, size_t *taken, size_t *bad, size_t *gpu_entropy)
{
    patina_jpegx_times_t t0, t1;
    patina_gpu_jpegx_set_gpu_entropy(D, on);
    patina_gpu_jpegx_times(D, &t0);
    *taken = *bad = 0;
    for (size_t i0 = 0; i0 < s->n; i0 += 64) {
        size_t n = s->n - i0 < 64 ? s->n - i0 : 64;
        patina_image_t out[64];
        patina_status st[64];
        memset(out, 0, sizeof out);
        for (size_t i = 0; i < n; i++) {
            patina_image_info_t info;
            if (patina_image_probe(&info, s->data[i0 + i], s->size[i0 + i], s->name[i0 + i]) == PATINA_OK) {
                out[i].width = info.width;
                out[i].height = info.height;
            } else {
                out[i].width = out[i].height = 1;
            }
        }
        TU_OK(patina_gpu_jpegx_decode(D, P, out, (const void *const *)(s->data + i0), s->size + i0, n, st));
        for (size_t i = 0; i < n; i++) {
            patina_image_t ref;
            if (st[i] != PATINA_OK) continue;
            (*taken)++;
            if (patina_image_decode(&ref, s->data[i0 + i], s->size[i0 + i], NULL, s->name[i0 + i]) != PATINA_OK) {
                printf("  TAKEN %s although the CPU path refuses it\n", s->name[i0 + i]);
                (*bad)++;
                continue;
            }
            {
                size_t bytes = out[i].stride * (size_t)out[i].height, nd = 0;
                uint8_t *tmp = malloc(bytes ? bytes : 1);
                assert_non_null(tmp);
                TU_OK(patina_gpu__upload(G, tmp, out[i].data, bytes));
                for (int y = 0; y < ref.height; y++)
                    nd += memcmp(ref.data + (size_t)y * ref.stride, tmp + (size_t)y * out[i].stride,
                                 3 * (size_t)ref.width) != 0;
                if (nd) {
                    printf("  PIXELS %s (entropy on the %s): %zu rows differ\n", s->name[i0 + i], on ? "GPU" : "CPU",
                           nd);
                    (*bad)++;
                }
                free(tmp);
            }
            patina_image_release(&ref);
        }
    }
    patina_gpu_jpegx_times(D, &t1);
    *gpu_entropy = (size_t)(t1.gpu_entropy - t0.gpu_entropy);
}

static void decode_both(const char *what, void (*make)(fileset_t *), int all_on_gpu)
{
    fileset_t s = {0};
    size_t tk[2], bad[2], ge[2];
    make(&s);
    if (s.n == 0) return; /* no sample photographs */
    for (int on = 1; on >= 0; on--) decode_set(&s, on, &tk[on], &bad[on], &ge[on]);
    printf("%-12s %5zu files: entropy on the GPU: %zu taken (%zu entropy-decoded on the device), %zu bad; "
           "on the CPU: %zu taken, %zu bad  %s\n",
           what, s.n, tk[1], ge[1], bad[1], tk[0], bad[0], bad[0] + bad[1] ? "FAIL" : "pass");
    assert_int_equal(bad[0] + bad[1], 0);
    assert_int_equal(ge[0], 0);
    if (all_on_gpu) assert_int_equal(ge[1], s.n);
    else assert_true(ge[1] > 0);
    fs_free(&s);
}

static void test_decoder_generated(void **state)
{
    (void)state;
    decode_both("generated", fs_generated, 0); /* some of them TurboJPEG refuses (4:1:0 ...) */
}

static void test_decoder_large(void **state)
{
    (void)state;
    decode_both("large", fs_large, 1);
}

static void test_decoder_damaged(void **state)
{
    (void)state;
    decode_both("damaged", fs_damaged, 0);
}

static void test_decoder_samples(void **state)
{
    (void)state;
    decode_both("samples", fs_samples, 0);
}

static int setup(void **state)
{
    (void)state;
    if (patina_gpu_open(&G, 0, 0) != PATINA_OK) {
        printf("gpu_open failed: %s\n", patina_last_error());
        return -1;
    }
    if (patina_gpu_jpegx_open(&D, G) != PATINA_OK || patina_pool_new(&P, 4) != PATINA_OK) {
        printf("jpegx open failed: %s\n", patina_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    patina_gpu_jpegx_close(D);
    patina_pool_free(P);
    patina_gpu_close(G);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels_generated), cmocka_unit_test(test_kernels_large),
        cmocka_unit_test(test_kernels_damaged),   cmocka_unit_test(test_kernels_samples),
        cmocka_unit_test(test_decoder_generated), cmocka_unit_test(test_decoder_large),
        cmocka_unit_test(test_decoder_damaged),   cmocka_unit_test(test_decoder_samples),
    };
    tu_require_gpu();
    return cmocka_run_group_tests(tests, setup, teardown);
}
