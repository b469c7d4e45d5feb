/* Exact JPEG decoding on the GPU (src/gpu/jpeg_exact.cu) against the CPU
 * path (patina_image_decode: libjpeg-turbo as src/image/jpeg.c configures
 * it): the RGB must be identical, sample for sample, on
 *   - generated files in every mode (tests/jpegx_cases.h: 14 modes x 6
 *     codings x 11 sizes from 1x1, quality 10-100, and a quality sweep),
 *     decoded in batches of 64 with 4 entropy-decoding threads; files the
 *     CPU path refuses (subsamplings TurboJPEG has no class for) must be
 *     refused here too;
 *   - every sample photograph, in batches of 16;
 *   - several rounds of staging (a context with a small budget, 3 MP 4:4:4
 *     images) and a file larger than a round (refused: the caller decodes it);
 *   - random coefficient blocks, against the C reference of the post-entropy
 *     stage (patina__jpegx_pixels), out-of-range blocks flagged alike;
 *   - patina_gpu_jpegx_submit / _finish: a call left unfinished is dropped
 *     by the next, whose images are right;
 *   - the pipeline: CEDD of a folder indexed with decoder exact-gpu equals
 *     the CPU decoder's, with damaged, progressive and PNG files among them
 *     and a file whose coefficients the device flags (decoded on the CPU
 *     after the window's deferred finish); a second run on the same context
 *     allocates nothing (the context keeps its decoders);
 *   - every GPU family (cedd, lbp, lbp8, tlbap, lanadp, glcm, haralick,
 *     rootsift, signature; glcm with quant=none too) through
 *     patina_extract_files on generated files
 *     (4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1, grey, CMYK; baseline, progressive,
 *     restart markers; odd sizes; 9x7 and 1x1 images, which rootsift
 *     leaves to its C reference; a truncated file, a PNG) and 8 sample
 *     photographs: the records of the images decoded on the GPU (exact-gpu,
 *     and auto, which must choose it) equal those of the same GPU kernels
 *     on libjpeg-turbo's host images, byte for byte, and failures fail
 *     alike; the records against the CPU device are counted too (a family's
 *     own GPU test bounds its kernels: rootsift is not exact).
 * Prints per-mode and per-coding mismatch counts. Skipped (77) without a GPU. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jpeglib.h>

#include "algo/jpeg_exact_core.h"
#include "core/internal.h"
#include "gpu/gpu.h"
#include "image/jpeg_exact.h"
#include "jpegx_cases.h"
#include "patina/patina.h"
#include "testutil.h"

static patina_gpu_t *G;
static patina_jpegx_gpu_t *D;
static patina_pool_t *P;

/* Samples of host image `ref` that differ from device image `dev`. */
static size_t diff_dev(const patina_image_t *ref, const patina_image_t *dev)
{
    size_t n = 0, bytes = dev->stride * (size_t)dev->height;
    uint8_t *tmp;
    if (ref->width != dev->width || ref->height != dev->height) return (size_t)-1;
    tmp = malloc(bytes ? bytes : 1);
    assert_non_null(tmp);
    TU_OK(patina_gpu__upload(G, tmp, dev->data, bytes)); /* a plain copy, either direction */
    for (int y = 0; y < ref->height; y++) {
        const uint8_t *p = ref->data + (size_t)y * ref->stride, *q = tmp + (size_t)y * dev->stride;
        for (int x = 0; x < 3 * ref->width; x++) n += p[x] != q[x];
    }
    free(tmp);
    return n;
}

typedef struct tally {
    size_t files, cpu_refuses, refused, bad_files, bad_samples;
} tally_t;

static void tally_add(tally_t *a, const tally_t *b)
{
    a->files += b->files;
    a->cpu_refuses += b->cpu_refuses;
    a->refused += b->refused;
    a->bad_files += b->bad_files;
    a->bad_samples += b->bad_samples;
}

/* Decodes n files on the GPU in one call and compares each with the CPU
 * path; one[i] gets file i's counts. */
static void check_batch(patina_jpegx_gpu_t *d, const void *const *data, const size_t *size, char **names, size_t n,
                        tally_t *one)
{
    patina_image_t *out = calloc(n, sizeof *out);
    patina_status *st = calloc(n, sizeof *st);
    patina_image_info_t info;
    assert_true(out && st);
    for (size_t i = 0; i < n; i++) {
        if (patina_image_probe(&info, data[i], size[i], names[i]) == PATINA_OK) {
            out[i].width = info.width;
            out[i].height = info.height;
        } else {
            out[i].width = out[i].height = 1; /* the decoder must refuse it */
        }
    }
    TU_OK(patina_gpu_jpegx_decode(d, P, out, data, size, n, st));
    for (size_t i = 0; i < n; i++) {
        patina_image_t ref;
        memset(&one[i], 0, sizeof one[i]);
        one[i].files = 1;
        if (patina_image_decode(&ref, data[i], size[i], NULL, names[i]) != PATINA_OK) {
            one[i].cpu_refuses = 1;
            if (st[i] == PATINA_OK) {
                one[i].bad_files = 1;
                printf("  TAKEN %s although the CPU path refuses it\n", names[i]);
            }
            continue;
        }
        if (st[i] != PATINA_OK) {
            one[i].refused = 1;
        } else {
            size_t dd = diff_dev(&ref, &out[i]);
            if (dd) {
                one[i].bad_files = 1;
                one[i].bad_samples = dd;
                printf("  MISMATCH %s: %zu samples\n", names[i], dd);
            }
        }
        patina_image_release(&ref);
    }
    free(out);
    free(st);
}

#define BATCH 64

/* The images the device refused for speed (JH_E_SLOW: entropy decoding on
 * the GPU gave up; the CPU path decodes them), from decoder d's counters. */
static uint64_t slow_count(const patina_jpegx_gpu_t *d)
{
    patina_jpegx_times_t t;
    patina_gpu_jpegx_times(d, &t);
    return t.gpu_slow;
}

static void test_generated(void **state)
{
    tally_t mode[JXC_NMODES], coding[JXC_NCODINGS], all = {0};
    const size_t total = JXC_NCASES + JXC_NSWEEP;
    const uint64_t slow0 = slow_count(D);
    (void)state;
    memset(mode, 0, sizeof mode);
    memset(coding, 0, sizeof coding);
    for (size_t first = 0; first < total; first += BATCH) {
        size_t n = total - first < BATCH ? total - first : BATCH;
        const void *data[BATCH];
        size_t size[BATCH];
        char *names[BATCH];
        jxc_case_t k[BATCH];
        tally_t one[BATCH];
        for (size_t i = 0; i < n; i++) {
            unsigned long len = 0;
            size_t idx = first + i;
            k[i] = idx < JXC_NCASES ? jxc_case(idx) : jxc_sweep(idx - JXC_NCASES);
            data[i] = jxc_make(&len, &jxc_modes[k[i].mode], k[i].coding, k[i].quality, k[i].w, k[i].h, k[i].kind,
                               k[i].seed);
            size[i] = len;
            names[i] = malloc(128);
            snprintf(names[i], 128, "%s %s %dx%d q%d", jxc_modes[k[i].mode].name, jxc_coding_names[k[i].coding],
                     k[i].w, k[i].h, k[i].quality);
        }
        check_batch(D, data, size, names, n, one);
        for (size_t i = 0; i < n; i++) {
            tally_add(&mode[k[i].mode], &one[i]);
            tally_add(&coding[k[i].coding], &one[i]);
            tally_add(&all, &one[i]);
            free((void *)data[i]);
            free(names[i]);
        }
    }
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
    printf("refused for speed (entropy decoding on the GPU out of step: the CPU's): %llu\n",
           (unsigned long long)(slow_count(D) - slow0));
    assert_int_equal(all.bad_files, 0);
    assert_int_equal(all.refused, slow_count(D) - slow0);
}

static void test_samples(void **state)
{
    const char *dir = getenv("PATINA_SAMPLES");
    char **files = NULL;
    size_t n, first;
    tally_t all = {0};
    (void)state;
    if (!dir || !*dir) dir = PATINA_SAMPLES_DIR;
    n = tu_list_files(dir, "jpg,jpeg,JPG,JPEG", &files);
    if (n == 0) {
        printf("no sample photographs under %s (scripts/fetch-samples.sh); skipped\n", dir);
        return;
    }
    for (first = 0; first < n; first += 16) {
        size_t m = n - first < 16 ? n - first : 16;
        const void *data[16];
        size_t size[16];
        tally_t one[16];
        for (size_t i = 0; i < m; i++) data[i] = tu_read_file(files[first + i], &size[i]);
        check_batch(D, data, size, files + first, m, one);
        for (size_t i = 0; i < m; i++) {
            tally_add(&all, &one[i]);
            free((void *)data[i]);
        }
    }
    printf("samples: %zu JPEGs, %zu refused by the CPU path, %zu refused here, %zu mismatched (%zu samples)\n",
           all.files, all.cpu_refuses, all.refused, all.bad_files, all.bad_samples);
    tu_free_list(files, n);
    assert_int_equal(all.bad_files, 0);
    assert_true(all.refused * 10 <= all.files);
}

/* A context with a 1 GiB budget stages 64 MiB per round: twelve 2048x1536
 * 4:4:4 images (18.9 MB of coefficients each) take four rounds; a 4096x3072
 * 4:4:4 one (75.5 MB) is larger than a round and refused. */
static void test_rounds(void **state)
{
    patina_gpu_t *g;
    patina_jpegx_gpu_t *d;
    enum { N = 13 };
    const void *data[N];
    size_t size[N];
    char *names[N];
    tally_t one[N], all = {0};
    (void)state;
    TU_OK(patina_gpu_open(&g, 0, (uint64_t)1 << 30));
    TU_OK(patina_gpu_jpegx_open(&d, g));
    for (int i = 0; i < N; i++) {
        unsigned long len;
        int big = i == 5;
        data[i] = jxc_make(&len, &jxc_modes[0], i % 2 ? JXC_PROG : JXC_BASE, 90, big ? 4096 : 2048, big ? 3072 : 1536,
                           1 + i % 3, 50 + (uint64_t)i);
        size[i] = len;
        names[i] = malloc(64);
        snprintf(names[i], 64, "round image %d%s", i, big ? " (larger than a round)" : "");
    }
    check_batch(d, data, size, names, N, one);
    assert_int_equal(one[5].refused, 1);
    for (int i = 0; i < N; i++) {
        tally_add(&all, &one[i]);
        free((void *)data[i]);
        free(names[i]);
    }
    printf("rounds: %zu images, %zu refused (larger than a round, and %llu for speed), %zu mismatched\n", all.files,
           all.refused, (unsigned long long)slow_count(d), all.bad_files);
    assert_int_equal(all.refused, 1 + slow_count(d)); /* the larger one; those the device gave up (JH_E_SLOW) */
    assert_int_equal(all.bad_files, 0);
    patina_gpu_jpegx_close(d);
    patina_gpu_close(g);
}

/* Random coefficients (some blocks beyond the exact range) through the
 * device stage and the C reference: the same pixels, the same refusals. */
static void test_random_blocks(void **state)
{
    enum { N = 24 };
    jx_image_t im[N];
    int16_t *coef[N];
    patina_image_t out[N];
    patina_status st[N];
    tu_rng_t r;
    size_t flagged = 0, bad = 0;
    (void)state;
    tu_rng_seed(&r, 99);
    for (int i = 0; i < N; i++) {
        /* a real file's geometry, then random coefficients and tables */
        unsigned long len;
        const jxc_mode_t *m = &jxc_modes[i % 5];
        unsigned char *jpg = jxc_make(&len, m, JXC_BASE, 75, 40 + 7 * i, 33 + 5 * i, 1, 300 + (uint64_t)i);
        patina_jpegx_reader_t *rd;
        TU_OK(patina__jpegx_open(&rd, &im[i], jpg, len, "random"));
        coef[i] = malloc((size_t)im[i].nblocks * 64 * sizeof(int16_t));
        assert_non_null(coef[i]);
        TU_OK(patina__jpegx_read(rd, &im[i], coef[i]));
        patina__jpegx_close(rd);
        free(jpg);
        {
            int amp = i % 4 == 3 ? 3000 : 40; /* every 4th image: blocks beyond the range */
            for (uint64_t b = 0; b < im[i].nblocks * 64; b++)
                coef[i][b] = (int16_t)((int)tu_rng_below(&r, 2 * (uint32_t)amp + 1) - amp) /
                             (int16_t)(1 + (int)(b % 64) / 4);
            for (int c = 0; c < im[i].ncomp; c++)
                for (int k = 0; k < 64; k++) im[i].comp[c].q[k] = (uint16_t)(1 + tu_rng_below(&r, 8));
        }
    }
    TU_OK(patina_gpu_jpegx_pixels(D, out, im, (const int16_t *const *)coef, N, st));
    for (int i = 0; i < N; i++) {
        patina_image_t ref;
        int ok;
        TU_OK(patina_image_init(&ref, im[i].width, im[i].height));
        ok = patina__jpegx_pixels(&im[i], coef[i], ref.data, ref.stride);
        assert_true(ok >= 0);
        if (!ok) {
            flagged++;
            if (st[i] != PATINA_E_FORMAT) fail_msg("random image %d: out of range but not flagged on the GPU", i);
        } else {
            size_t dd;
            if (st[i] != PATINA_OK) fail_msg("random image %d: flagged on the GPU only", i);
            dd = diff_dev(&ref, &out[i]);
            if (dd) printf("  random image %d: %zu samples differ\n", i, dd);
            bad += dd != 0;
        }
        patina_image_release(&ref);
        free(coef[i]);
    }
    printf("random blocks: %d images, %zu out of the exact range (flagged alike), %zu mismatched\n", N, flagged, bad);
    assert_int_equal(bad, 0);
    assert_true(flagged > 0 && flagged < N);
}

/* jpg (len bytes) with the first luma block's coefficient 1 (natural
 * order) set to 1023: with quality-10 tables it dequantises far beyond the
 * exact range, so the device flags the image, while libjpeg-turbo decodes it
 * without a warning (its IDCT clamps). Optimised Huffman tables code it.
 * Returns libjpeg's malloc'd buffer. */
static unsigned char *craft_out_of_range(const unsigned char *jpg, unsigned long len, unsigned long *out_len)
{
    struct jpeg_decompress_struct d;
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr ed, ec;
    jvirt_barray_ptr *arr;
    JBLOCKARRAY row;
    unsigned char *buf = NULL;
    unsigned long n = 0;
    d.err = jpeg_std_error(&ed);
    jpeg_create_decompress(&d);
    jpeg_mem_src(&d, jpg, len);
    assert_int_equal(jpeg_read_header(&d, TRUE), JPEG_HEADER_OK);
    arr = jpeg_read_coefficients(&d);
    assert_non_null(arr);
    row = d.mem->access_virt_barray((j_common_ptr)&d, arr[0], 0, 1, TRUE);
    row[0][0][1] = 1023;
    c.err = jpeg_std_error(&ec);
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &buf, &n);
    jpeg_copy_critical_parameters(&d, &c);
    c.optimize_coding = TRUE;
    jpeg_write_coefficients(&c, arr);
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    jpeg_finish_decompress(&d);
    jpeg_destroy_decompress(&d);
    *out_len = n;
    return buf;
}

/* patina_gpu_jpegx_submit / _finish: a submitted call that is never
 * finished is dropped by the next submit (its images are the same: the
 * second call must still be right); a finish with nothing open does
 * nothing; a crafted file is flagged at finish, not at submit. */
static void test_submit(void **state)
{
    enum { N = 20 };
    const void *data[N];
    size_t size[N];
    patina_image_t out[N];
    patina_status st[N];
    size_t flagged = 0;
    (void)state;
    for (int i = 0; i < N; i++) {
        unsigned long len;
        unsigned char *j = jxc_make(&len, &jxc_modes[i % 5], i % 3 == 1 ? JXC_PROG : JXC_BASE, i == 7 ? 10 : 80,
                                    64 + 29 * i, 48 + 17 * i, 1 + i % 3, 700 + (uint64_t)i);
        if (i == 7) {
            unsigned long n2;
            unsigned char *k = craft_out_of_range(j, len, &n2);
            free(j);
            j = malloc(n2);
            memcpy(j, k, n2);
            free(k);
            len = n2;
        }
        data[i] = j;
        size[i] = len;
    }
    for (int pass = 0; pass < 2; pass++) { /* the first call is dropped by the second */
        memset(out, 0, sizeof out);
        for (int i = 0; i < N; i++) {
            patina_image_info_t info;
            TU_OK(patina_image_probe(&info, data[i], size[i], "submit"));
            out[i].width = info.width;
            out[i].height = info.height;
        }
        TU_OK(patina_gpu_jpegx_submit(D, P, out, data, size, N, st));
        for (int i = 0; i < N; i++) assert_int_equal(st[i], PATINA_OK); /* all on their way */
    }
    TU_OK(patina_gpu_jpegx_finish(D, out, N, st));
    for (int i = 0; i < N; i++) {
        patina_image_t ref;
        TU_OK(patina_image_decode(&ref, data[i], size[i], NULL, "submit"));
        if (i == 7) {
            assert_int_equal(st[i], PATINA_E_FORMAT); /* flagged by the device */
            assert_null(out[i].data);
            flagged++;
        } else {
            assert_int_equal(st[i], PATINA_OK);
            assert_int_equal(diff_dev(&ref, &out[i]), 0);
        }
        patina_image_release(&ref);
        free((void *)data[i]);
    }
    TU_OK(patina_gpu_jpegx_finish(D, out, N, st)); /* nothing open */
    assert_int_equal(st[0], PATINA_OK);
    printf("submit/finish: %d images, %zu flagged at finish, the others identical\n", N, flagged);
}

/* The pipeline: a folder of JPEGs in several modes (one progressive, one
 * CMYK, one truncated, one with extraneous bytes, one the device flags) and
 * a PNG, indexed with CEDD on the GPU by the CPU decoder and by exact-gpu
 * (explicit, auto, and explicit again on the same context, which must
 * allocate nothing): the same images indexed, the same failures, identical
 * descriptors. */
static void test_pipeline(void **state)
{
    char *dir = tu_tempdir("jpegx"), path[4096], col[3][4096];
    const char *paths[1];
    char **files = NULL;
    char col3[4096];
    size_t nfiles = 0, missing = 0, i, gpu_decoded[4] = {0, 0, 0, 0};
    uint64_t slow[4] = {0, 0, 0, 0};
    patina_context_t *ctx;
    patina_extractor_t *ex;
    patina_collection_t *c[4];
    static const patina_jpeg_decoder dec[4] = {PATINA_JPEG_LIBJPEG, PATINA_JPEG_EXACT_GPU, PATINA_JPEG_AUTO,
                                               PATINA_JPEG_EXACT_GPU};
    (void)state;
    for (i = 0; i < 40; i++) {
        unsigned long len;
        int mode = (int)(i % 5), w = 150 + (int)i * 13, h = 100 + (int)i * 7;
        unsigned char *j;
        if (i == 9) mode = 11; /* CMYK */
        j = jxc_make(&len, &jxc_modes[mode], i == 7 ? JXC_PROG : i == 8 ? JXC_RST : JXC_BASE, i == 20 ? 10 : 85, w,
                     h, 1 + (int)(i % 3), 900 + i);
        if (i == 20) { /* flagged by the device: the third window's deferred finish decodes it on the CPU */
            unsigned long n2;
            unsigned char *k = craft_out_of_range(j, len, &n2);
            free(j);
            j = malloc(n2);
            memcpy(j, k, n2);
            free(k);
            len = n2;
        }
        snprintf(path, sizeof path, "%s/img_%03zu.jpg", dir, i);
        if (i == 11) len /= 3; /* truncated */
        if (i == 12) {         /* extraneous bytes: a warning, decoded on the CPU */
            unsigned char *b = malloc(len + 3);
            size_t at = 4 + ((size_t)j[4] << 8 | j[5]);
            memcpy(b, j, at);
            memcpy(b + at, "\x01\x02\x03", 3);
            memcpy(b + at + 3, j + at, len - at);
            assert_int_equal(tu_write_file(path, b, len + 3), 0);
            free(b);
        } else {
            assert_int_equal(tu_write_file(path, j, len), 0);
        }
        free(j);
    }
    {
        static const unsigned char png[] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0};
        snprintf(path, sizeof path, "%s/broken.png", dir);
        assert_int_equal(tu_write_file(path, png, sizeof png), 0);
    }
    paths[0] = dir;
    TU_OK(patina_expand_paths(&files, &nfiles, paths, 1, &missing, NULL, NULL));
    assert_int_equal(nfiles, 41);
    TU_OK(patina_context_new(&ctx, NULL));
    TU_OK(patina_extractor_new(&ex, "cedd"));
    for (int k = 0; k < 4; k++) {
        patina_index_opts_t o;
        patina_index_stats_t st;
        char *cp = k < 3 ? col[k] : col3;
        patina_index_opts_init(&o);
        o.device = PATINA_DEVICE_GPU;
        o.jpeg_decoder = dec[k];
        o.batch = 8;
        snprintf(cp, 4096, "%s/col%d", dir, k);
        TU_OK(patina_collection_open(&c[k], cp, PATINA_OPEN_CREATE, 0));
        {
            patina_jpegx_gpu_t *xd[2];
            uint64_t s0;
            TU_OK(patina__context_jpegx(ctx, xd));
            s0 = slow_count(xd[0]) + slow_count(xd[1]);
            TU_OK(patina_index_files(ctx, c[k], ex, (const char *const *)files, nfiles, &o, &st));
            slow[k] = slow_count(xd[0]) + slow_count(xd[1]) - s0;
        }
        printf("  pipeline (decoder %d): indexed %llu, failed %llu, warned %llu, GPU decoded %llu; exact decoder: "
               "entropy %.4f s, setup %.4f s, wait %.4f s\n", (int)dec[k],
               (unsigned long long)st.indexed, (unsigned long long)st.failed, (unsigned long long)st.warned,
               (unsigned long long)st.gpu_decoded, st.t_jpegx_entropy, st.t_jpegx_setup, st.t_jpegx_wait);
        if (dec[k] != PATINA_JPEG_LIBJPEG) assert_true(st.t_jpegx_entropy > 0); /* auto: exact-gpu */
        else assert_true(st.t_jpegx_entropy == 0 && st.t_jpegx_setup == 0 && st.t_jpegx_wait == 0);
        if (k == 1) assert_true(st.t_jpegx_setup > 0);  /* the context's decoders, first use */
        if (k >= 2) assert_true(st.t_jpegx_setup == 0); /* kept: nothing allocated again */
        assert_int_equal(st.indexed, 39); /* 40 JPEGs - the truncated one */
        assert_int_equal(st.failed, 2);   /* truncated JPEG, broken PNG */
        assert_int_equal(st.warned, 1);   /* extraneous bytes */
        gpu_decoded[k] = st.gpu_decoded;
    }
    /* all but the truncated, the warned and the flagged one, and those the
     * device gave up for speed (JH_E_SLOW); auto: exact-gpu for CEDD on the
     * GPU (pipeline.h) */
    assert_int_equal(gpu_decoded[0], 0);
    for (int k = 1; k < 4; k++) assert_int_equal(gpu_decoded[k] + slow[k], 37);
    {
        size_t bytes = patina_extractor_bytes(ex), same = 0;
        uint8_t *a = malloc(bytes), *b = malloc(bytes);
        for (i = 0; i < nfiles; i++) {
            char *key;
            patina_record_t r0, r1;
            TU_OK(patina_collection_key(c[0], files[i], &key));
            if (patina_collection_get_by_key(c[0], key, &r0) != PATINA_OK) {
                free(key);
                continue;
            }
            for (int k = 1; k < 4; k++) {
                TU_OK(patina_collection_get_by_key(c[k], key, &r1));
                TU_OK(patina_collection_get_descriptor(c[0], patina_extractor_spec(ex), r0.id, a, bytes));
                TU_OK(patina_collection_get_descriptor(c[k], patina_extractor_spec(ex), r1.id, b, bytes));
                if (memcmp(a, b, bytes)) printf("  descriptor of %s differs (decoder %d)\n", key, (int)dec[k]);
                else same++;
                patina_record_release(&r1);
            }
            patina_record_release(&r0);
            free(key);
        }
        printf("  pipeline: %zu of %d descriptors identical to the CPU decoder's\n", same, 3 * 39);
        assert_int_equal(same, 3 * 39);
        free(a);
        free(b);
    }
    for (int k = 0; k < 4; k++) patina_collection_close(c[k]);
    for (i = 0; i < nfiles; i++) free(files[i]);
    free(files);
    patina_extractor_free(ex);
    patina_context_free(ctx);
    tu_remove_tree(dir);
    free(dir);
}

/* Files of every kind the families may meet: dir/fam_NNN.jpg, a PNG. */
static size_t family_files(const char *dir, char ***files)
{
    static const int modes[] = {0, 1, 2, 3, 4, 9, 11};
    static const jxc_coding codings[] = {JXC_BASE, JXC_PROG, JXC_RST};
    char path[4096], **samples = NULL;
    const char *sdir = getenv("PATINA_SAMPLES");
    size_t n = 0, ns;
    int k = 0;
    *files = calloc(64, sizeof **files);
    assert_non_null(*files);
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++)
        for (size_t c = 0; c < sizeof codings / sizeof codings[0]; c++, k++) {
            unsigned long len;
            int w = 97 + 61 * k % 400, h = 83 + 37 * k % 300; /* odd sizes, never MCU multiples alone */
            unsigned char *j = jxc_make(&len, &jxc_modes[modes[m]], codings[c], 60 + k % 40, w, h, 1 + k % 3,
                                        4242u + (unsigned)k);
            snprintf(path, sizeof path, "%s/fam_%03d.jpg", dir, k);
            if (k == 5) len /= 3; /* truncated: fails alike */
            assert_int_equal(tu_write_file(path, j, len), 0);
            free(j);
            (*files)[n++] = strdup(path);
        }
    for (int t = 0; t < 2; t++) { /* tiny images: the families' C-reference fallbacks read them (rootsift) */
        unsigned long len;
        unsigned char *j = jxc_make(&len, &jxc_modes[2], JXC_BASE, 90, t ? 1 : 9, t ? 1 : 7, 1, 77u + (unsigned)t);
        snprintf(path, sizeof path, "%s/tiny_%d.jpg", dir, t);
        assert_int_equal(tu_write_file(path, j, len), 0);
        free(j);
        (*files)[n++] = strdup(path);
    }
    {
        static const unsigned char png[] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0};
        snprintf(path, sizeof path, "%s/broken.png", dir);
        assert_int_equal(tu_write_file(path, png, sizeof png), 0);
        (*files)[n++] = strdup(path);
    }
    if (!sdir || !*sdir) sdir = PATINA_SAMPLES_DIR;
    ns = tu_list_files(sdir, "jpg,jpeg,JPG,JPEG", &samples);
    for (size_t i = 0; i < ns; i++) {
        if (i < 8) (*files)[n++] = samples[i];
        else free(samples[i]);
    }
    free(samples);
    return n;
}

static void test_families(void **state)
{
    static const char *const fams[] = {"cedd",     "lbp",       "lbp8", "tlbap",
                                       "lanadp",   "rootsift",  "signature", "glcm",
                                       "haralick", "glcm:levels=256,quant=none"};
    /* runs: 0 the CPU device, 1 GPU + libjpeg, 2 GPU + exact-gpu, 3 GPU + auto */
    static const patina_device devs[4] = {PATINA_DEVICE_CPU, PATINA_DEVICE_GPU, PATINA_DEVICE_GPU, PATINA_DEVICE_GPU};
    static const patina_jpeg_decoder decs[4] = {PATINA_JPEG_LIBJPEG, PATINA_JPEG_LIBJPEG, PATINA_JPEG_EXACT_GPU,
                                                PATINA_JPEG_AUTO};
    char *dir = tu_tempdir("jpegx-fam"), **files = NULL;
    size_t n = family_files(dir, &files), bad = 0;
    patina_context_t *ctx;
    patina_input_t *in = calloc(n, sizeof *in);
    patina_extract_result_t *res[4];
    (void)state;
    assert_non_null(in);
    for (size_t i = 0; i < n; i++) in[i].path = files[i];
    TU_OK(patina_context_new(&ctx, NULL));
    for (int r = 0; r < 4; r++) {
        res[r] = calloc(n, sizeof *res[r]);
        assert_non_null(res[r]);
    }
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        patina_extractor_t *ex;
        const patina_extractor_t *exs[1];
        size_t bytes, cpu_diff = 0, gpu_dec = 0, auto_dec = 0;
        uint8_t *rec[4];
        TU_OK(patina_extractor_new(&ex, fams[f]));
        exs[0] = ex;
        bytes = patina_extractor_bytes(ex);
        for (int r = 0; r < 4; r++) {
            patina_index_opts_t o;
            void *out[1];
            size_t done = 0, taken;
            rec[r] = calloc(n, bytes);
            assert_non_null(rec[r]);
            patina_index_opts_init(&o);
            o.device = devs[r];
            o.jpeg_decoder = decs[r];
            o.batch_memory = 64u << 20; /* several calls: the decoder's arena is reused */
            while (done < n) {
                out[0] = rec[r] + done * bytes;
                TU_OK(patina_extract_files(ctx, exs, 1, out, res[r] + done, &taken, in + done, n - done, &o));
                assert_true(taken >= 1);
                done += taken;
            }
        }
        for (size_t i = 0; i < n; i++) {
            const int ok1 = res[1][i].status == PATINA_OK;
            gpu_dec += res[2][i].gpu_decoded;
            assert_int_equal(res[1][i].gpu_decoded, 0);
            auto_dec += res[3][i].gpu_decoded; /* auto: exact-gpu (pipeline.h); which images the device
                                                  gives up for speed depends on its earlier rounds */
            for (int r = 2; r < 4; r++) {
                if ((res[r][i].status == PATINA_OK) != ok1 || (ok1 && memcmp(rec[1] + i * bytes, rec[r] + i * bytes, bytes))) {
                    printf("  %s: %s differs (%s, status %d vs %d)\n", fams[f], files[i],
                           r == 2 ? "exact-gpu" : "auto", (int)res[r][i].status, (int)res[1][i].status);
                    bad++;
                }
            }
            if (ok1 && (res[0][i].status != PATINA_OK || memcmp(rec[0] + i * bytes, rec[2] + i * bytes, bytes)))
                cpu_diff++;
        }
        printf("  %s: %zu inputs, %zu decoded on the GPU; exact-gpu records = GPU+libjpeg records; "
               "%zu differ from the CPU device's\n", fams[f], n, gpu_dec, cpu_diff);
        assert_true(gpu_dec >= n / 2); /* the generated JPEGs but the truncated one, and the photographs */
        assert_true(auto_dec >= n / 2);
        for (int r = 0; r < 4; r++) free(rec[r]);
        patina_extractor_free(ex);
    }
    assert_int_equal(bad, 0);
    for (int r = 0; r < 4; r++) free(res[r]);
    for (size_t i = 0; i < n; i++) free(files[i]);
    free(files);
    free(in);
    patina_context_free(ctx);
    tu_remove_tree(dir);
    free(dir);
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
        cmocka_unit_test(test_random_blocks),
        cmocka_unit_test(test_generated),
        cmocka_unit_test(test_samples),
        cmocka_unit_test(test_rounds),
        cmocka_unit_test(test_submit),
        cmocka_unit_test(test_pipeline),
        cmocka_unit_test(test_families),
    };
    tu_require_gpu();
    return cmocka_run_group_tests(tests, setup, teardown);
}
