/* Fuzz target: the JPEG loader (src/image/jpeg.c: the marker walk and
 * TurboJPEG decoding) through patina_image_probe and patina_image_decode,
 * and the exact decoder's host side (src/image/jpeg_exact.c: what the GPU
 * decoder runs before its device stage), whose pixels must equal the
 * loader's whenever it takes a file, and whose image description must be
 * what the device stage's tables assume (src/gpu/jpeg_exact.cu builds its
 * plane and image tables from it: components' blocks back to back, every
 * sample the upsampling reads inside the component's 8bw x 8bh plane), and
 * the GPU's Huffman decoder's host side and C reference (src/image/jpeg_huff.c),
 * whose coefficients must be libjpeg's whenever it does not flag a file.
 * Seeds: small JPEGs written with libjpeg at build time, one per kind the
 * loader treats differently (grey, RGB at several subsamplings, odd sizes,
 * 1x1, progressive, restart markers, arithmetic coding, extra markers, CMYK
 * and YCCK (Adobe marker), EXIF orientation 6, a truncated file). */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "algo/jpeg_exact_core.h"
#include "fuzz.h"
#include "image/jpeg_exact.h"
#include "image/jpeg_huff.h"

/* The last plane column (row) jx_upsample reads for output columns (rows)
 * 0 .. n-1 with method up and replication r, along an axis where the
 * method halves (half) or not. */
static long last_read(int up, int half, int r, int n, int planelen)
{
    long i = n - 1;
    if (up == JX_UP_REPL) return i / r;
    if (!half) return i;
    i >>= 1;
    return i + 1 < planelen ? i + 1 : i; /* the neighbour read stops at the plane's last sample */
}

/* The GPU's Huffman decoder (its host side and the C reference of its
 * kernels, src/image/jpeg_huff.c) with chunks of cb bits: a file it decodes
 * without a flag is one libjpeg reads without a warning (lj: its
 * coefficients, NULL when it warned or failed), coefficient for
 * coefficient. */
static void check_huff(const uint8_t *data, size_t size, const int16_t *lj, uint64_t nblocks, uint32_t cb)
{
    patina_jpegx_reader_t *r;
    jx_image_t im;
    int16_t *coef;
    if (patina__jpegx_open(&r, &im, data, size, "fuzz-input") != PATINA_OK) {
        patina_clear_error();
        return;
    }
    coef = malloc((size_t)nblocks * 64 * sizeof *coef + 1);
    if (coef && im.nblocks == nblocks) {
        if (patina__jpegh_read(r, &im, coef, "fuzz-input", cb) == PATINA_OK) {
            FUZZ_CHECK(lj != NULL, "the Huffman decoder took a file libjpeg warns about or refuses");
            FUZZ_CHECK(memcmp(coef, lj, (size_t)nblocks * 64 * sizeof *coef) == 0,
                       "the Huffman decoder's coefficients differ from libjpeg's");
        } else {
            patina_clear_error();
        }
    }
    free(coef);
    patina__jpegx_close(r);
}

/* What the device stage assumes of a taken image (see the header). */
static void check_layout(const uint8_t *data, size_t size)
{
    patina_jpegx_reader_t *r;
    jx_image_t im;
    uint64_t next = 0;
    int16_t *coef;
    if (patina__jpegx_open(&r, &im, data, size, "fuzz-input") != PATINA_OK) {
        patina_clear_error();
        return;
    }
    FUZZ_CHECK(im.ncomp >= 1 && im.ncomp <= 4 && im.width >= 1 && im.height >= 1, "image %dx%d, %d components",
               im.width, im.height, im.ncomp);
    for (int c = 0; c < im.ncomp; c++) {
        const jx_comp_t *k = &im.comp[c];
        const int hx = k->up == JX_UP_H2V1 || k->up == JX_UP_H2V2, hy = k->up == JX_UP_H1V2 || k->up == JX_UP_H2V2;
        FUZZ_CHECK(k->first == next, "component %d starts at block %llu, not %llu", c,
                   (unsigned long long)k->first, (unsigned long long)next);
        FUZZ_CHECK(k->bw >= 1 && k->bh >= 1 && k->dw >= 1 && k->dh >= 1 && k->dw <= 8 * k->bw &&
                       k->dh <= 8 * k->bh && k->rh >= 1 && k->rv >= 1 && k->up >= JX_UP_COPY && k->up <= JX_UP_REPL,
                   "component %d: %dx%d blocks, %dx%d samples, method %d (%d, %d)", c, k->bw, k->bh, k->dw, k->dh,
                   k->up, k->rh, k->rv);
        FUZZ_CHECK(last_read(k->up, hx, k->rh, im.width, k->dw) < 8L * k->bw &&
                       last_read(k->up, hy, k->rv, im.height, k->dh) < 8L * k->bh,
                   "component %d: upsampling %dx%d reads outside its %dx%d plane", c, im.width, im.height,
                   8 * k->bw, 8 * k->bh);
        next += (uint64_t)k->bw * (uint64_t)k->bh;
    }
    FUZZ_CHECK(next == im.nblocks, "%llu blocks in the components, %llu in the image", (unsigned long long)next,
               (unsigned long long)im.nblocks);
    if ((uint64_t)im.width * (uint64_t)im.height <= FUZZ_MAX_PIXELS && im.nblocks <= 4 * FUZZ_MAX_PIXELS / 64 + 64 &&
        (coef = malloc((size_t)im.nblocks * 64 * sizeof *coef)) != NULL) {
        int lj_ok = patina__jpegx_read(r, &im, coef) == PATINA_OK;
        if (!lj_ok) patina_clear_error();
        /* the default chunks, and the smallest a caller may choose (the
         * most chunks, rounds and straddled blocks) */
        check_huff(data, size, lj_ok ? coef : NULL, im.nblocks, 0);
        check_huff(data, size, lj_ok ? coef : NULL, im.nblocks, JH_CHUNK_MIN);
        free(coef);
    }
    patina__jpegx_close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    patina_decode_opts_t o;
    patina_image_t img;
    patina_image_info_t info;
    fuzz_image_input(data, size);
    /* EXIF orientation on request (its APP1 parser reads the file's bytes):
     * the image is turned, never resized */
    patina_decode_opts_init(&o);
    o.limits.max_pixels = FUZZ_MAX_PIXELS;
    o.apply_orientation = 1;
    if (patina_image_decode_with(&img, NULL, data, size, &o, "fuzz-input") == PATINA_OK) {
        FUZZ_CHECK(patina_image_probe(&info, data, size, NULL) == PATINA_OK, "probe failed after a decode");
        FUZZ_CHECK((img.width == info.width && img.height == info.height) ||
                       (img.width == info.height && img.height == info.width),
                   "oriented %dx%d from %dx%d", img.width, img.height, info.width, info.height);
        patina_image_release(&img);
    }
    check_layout(data, size);
    if (patina_image_probe(&info, data, size, NULL) == PATINA_OK &&
        (uint64_t)info.width * (uint64_t)info.height <= FUZZ_MAX_PIXELS) {
        patina_image_t ref, got;
        if (patina__jpegx_decode(&got, data, size, "fuzz-input") == PATINA_OK) {
            FUZZ_CHECK(patina_image_decode(&ref, data, size, NULL, "fuzz-input") == PATINA_OK,
                       "the exact decoder took a file the CPU path refuses");
            for (int y = 0; y < ref.height; y++)
                FUZZ_CHECK(!memcmp(ref.data + (size_t)y * ref.stride, got.data + (size_t)y * got.stride,
                                   3 * (size_t)ref.width),
                           "exact decoder row %d differs from the CPU path", y);
            patina_image_release(&ref);
            patina_image_release(&got);
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ seeds */

typedef struct jpeg_kind {
    const char *name;
    int w, h;
    int components;        /* 1 grey, 3 RGB, 4 CMYK */
    int hs, vs;            /* luma sampling factors (chroma 1x1) */
    int quality;
    int progressive;
    int restart_mcus;      /* restart interval in MCUs, 0 = none */
    int arith;             /* arithmetic coding */
    int optimize;          /* optimised Huffman tables */
    int markers;           /* COM, APP1 and APP2 segments */
    int valid;             /* the loader must decode it */
    int ycck;              /* 4 components stored as YCCK (else CMYK) */
} jpeg_kind_t;

typedef struct jerr {
    struct jpeg_error_mgr mgr;
    jmp_buf jb;
} jerr_t;

static void on_error(j_common_ptr cinfo)
{
    longjmp(((jerr_t *)cinfo->err)->jb, 1);
}

static void on_message(j_common_ptr cinfo) { (void)cinfo; }

/* Encodes one kind; returns NULL when this libjpeg cannot (e.g. no
 * arithmetic coding compiled in). */
static unsigned char *encode(const jpeg_kind_t *k, unsigned long *size)
{
    /* IFD0 with one entry: Orientation (0x0112, SHORT, 1) = 6 */
    static const char exif[] = "Exif\0\0MM\0*\0\0\0\10\0\1\1\22\0\3\0\0\0\1\0\6\0\0\0\0\0\0";
    static const char icc[] = "ICC_PROFILE\0\1\1not a profile";
    struct jpeg_compress_struct ci;
    jerr_t err;
    unsigned char *volatile out = NULL;
    unsigned long n = 0;
    uint8_t *pix = malloc((size_t)k->w * (size_t)k->h * (size_t)k->components);
    int y;

    fuzz_pattern(pix, k->w, k->h, k->components, 8, (uint32_t)k->w * 31u + (uint32_t)k->h);
    ci.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = on_error;
    err.mgr.output_message = on_message;
    if (setjmp(err.jb)) {
        jpeg_destroy_compress(&ci);
        free(out);
        free(pix);
        return NULL;
    }
    jpeg_create_compress(&ci);
    jpeg_mem_dest(&ci, (unsigned char **)&out, &n);
    ci.image_width = (JDIMENSION)k->w;
    ci.image_height = (JDIMENSION)k->h;
    ci.input_components = k->components;
    ci.in_color_space = k->components == 1 ? JCS_GRAYSCALE : k->components == 4 ? JCS_CMYK : JCS_RGB;
    jpeg_set_defaults(&ci);
    if (k->ycck) jpeg_set_colorspace(&ci, JCS_YCCK);
    jpeg_set_quality(&ci, k->quality, TRUE);
    if (k->components == 3) {
        ci.comp_info[0].h_samp_factor = k->hs;
        ci.comp_info[0].v_samp_factor = k->vs;
    }
    if (k->progressive) jpeg_simple_progression(&ci);
    ci.restart_interval = (unsigned)k->restart_mcus;
    ci.arith_code = k->arith ? TRUE : FALSE;
    ci.optimize_coding = k->optimize ? TRUE : FALSE;
    jpeg_start_compress(&ci, TRUE);
    if (k->markers) {
        jpeg_write_marker(&ci, JPEG_COM, (const JOCTET *)"patina fuzz seed", 16);
        jpeg_write_marker(&ci, JPEG_APP0 + 1, (const JOCTET *)exif, sizeof exif - 1);
        jpeg_write_marker(&ci, JPEG_APP0 + 2, (const JOCTET *)icc, sizeof icc - 1);
    }
    for (y = 0; y < k->h; y++) {
        JSAMPROW row = pix + (size_t)y * (size_t)k->w * (size_t)k->components;
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    free(pix);
    *size = n;
    return out;
}

void fuzz_write_seeds(fuzz_seeds_t *w)
{
    static const jpeg_kind_t kinds[] = {
        /* name                 w   h  comp hs vs  q  prog rst arith opt mark valid ycck */
        {"rgb-1x1.jpg",         1,  1, 3,   2, 2, 90, 0,   0,  0,    0,  0,   1,    0},
        {"grey-16x16.jpg",     16, 16, 1,   1, 1, 75, 0,   0,  0,    0,  0,   1,    0},
        {"rgb420-24x16.jpg",   24, 16, 3,   2, 2, 75, 0,   0,  0,    0,  0,   1,    0},
        {"rgb444-17x13.jpg",   17, 13, 3,   1, 1, 85, 0,   0,  0,    0,  0,   1,    0},
        {"rgb422-restart.jpg", 24, 24, 3,   2, 1, 60, 0,   1,  0,    0,  0,   1,    0},
        {"rgb411-33x9.jpg",    33,  9, 3,   4, 1, 50, 0,   0,  0,    1,  0,   1,    0},
        {"rgb440-9x33.jpg",     9, 33, 3,   1, 2, 50, 0,   0,  0,    0,  0,   1,    0},
        {"rgb-progressive.jpg",32, 24, 3,   2, 2, 80, 1,   0,  0,    0,  0,   1,    0},
        {"grey-progressive.jpg",20,20, 1,   1, 1, 80, 1,   0,  0,    0,  0,   1,    0},
        {"rgb-arith.jpg",      16, 16, 3,   2, 2, 75, 0,   0,  1,    0,  0,   1,    0},
        {"rgb-prog-arith.jpg", 16, 16, 3,   2, 2, 75, 1,   2,  1,    0,  0,   1,    0},
        {"rgb-markers.jpg",    16,  8, 3,   2, 2, 95, 0,   0,  0,    1,  1,   1,    0},
        {"rgb-q100-2x2.jpg",    2,  2, 3,   1, 1,100, 0,   0,  0,    0,  0,   1,    0},
        {"cmyk-8x8.jpg",        8,  8, 4,   1, 1, 75, 0,   0,  0,    0,  0,   1,    0},
        {"ycck-16x8.jpg",      16,  8, 4,   1, 1, 75, 0,   0,  0,    0,  0,   1,    1},
    };
    static const char *const tokens[] = {
        "\xFF\xD8", "\xFF\xD9", "\xFF\xDA", "\xFF\xC0", "\xFF\xC1", "\xFF\xC2", "\xFF\xC3",
        "\xFF\xC4", "\xFF\xC9", "\xFF\xCA", "\xFF\xCC", "\xFF\xDB", "\xFF\xDD", "\xFF\xFE",
        "\xFF\xD0", "\xFF\xD7", "\xFF\xE0", "\xFF\xE1", "\xFF\xE2", "\xFF\xEE", "\xFF\xFF",
        "JFIF", "Exif", "ICC_PROFILE", "Adobe",
    };
    size_t i;
    for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        unsigned long n = 0;
        unsigned char *jpg = encode(&kinds[i], &n);
        if (!jpg) {
            fprintf(stderr, "fuzz_jpeg: this libjpeg cannot write %s; seed skipped\n", kinds[i].name);
            continue;
        }
        fuzz_image_seed(w, kinds[i].name, jpg, n, PATINA_FORMAT_JPEG, kinds[i].valid);
        if (i == 2) /* the same file cut in the middle of its entropy-coded data */
            fuzz_image_seed(w, "rgb420-truncated.jpg", jpg, n * 2 / 3, PATINA_FORMAT_JPEG, 0);
        free(jpg);
    }
    fuzz_dict(w, "\xFF\x00", 2);
    fuzz_dict(w, "\x00\x00", 2);
    for (i = 0; i < sizeof tokens / sizeof tokens[0]; i++) fuzz_dict_str(w, tokens[i]);
}
