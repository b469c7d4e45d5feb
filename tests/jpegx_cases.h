/* Generated JPEG files in every mode a camera or a web image uses, written
 * with libjpeg's own compressor, for the exact decoder's tests (CPU:
 * test_jpeg_exact.c, GPU: gpu/test_jpeg_exact_gpu.c): chroma subsamplings
 * 4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1, 4:1:0 and unusual factor sets, greyscale,
 * stored RGB, CMYK and YCCK (with and without the Adobe marker), each as
 * baseline, optimised Huffman, progressive, with restart markers, progressive
 * with restarts, and arithmetic coding; odd sizes from 1x1; quality 10-100.
 * Header-only (static functions), deterministic. */
#ifndef PATINA_TESTS_JPEGX_CASES_H
#define PATINA_TESTS_JPEGX_CASES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "testutil.h"

typedef struct jxc_mode {
    const char *name;
    int ncomp;            /* 1, 3, 4 */
    J_COLOR_SPACE space;  /* the file's colour space */
    int h[4], v[4];       /* sampling factors */
    int adobe;            /* write the Adobe marker (4 components) */
} jxc_mode_t;

static const jxc_mode_t jxc_modes[] = {
    {"4:4:4", 3, JCS_YCbCr, {1, 1, 1}, {1, 1, 1}, 0},
    {"4:2:2", 3, JCS_YCbCr, {2, 1, 1}, {1, 1, 1}, 0},
    {"4:2:0", 3, JCS_YCbCr, {2, 1, 1}, {2, 1, 1}, 0},
    {"4:4:0", 3, JCS_YCbCr, {1, 1, 1}, {2, 1, 1}, 0},
    {"4:1:1", 3, JCS_YCbCr, {4, 1, 1}, {1, 1, 1}, 0},
    {"4:1:0", 3, JCS_YCbCr, {4, 1, 1}, {2, 1, 1}, 0},
    {"Y2x2,C1x2", 3, JCS_YCbCr, {2, 1, 1}, {2, 2, 2}, 0},
    {"Y1x1,C2x2", 3, JCS_YCbCr, {1, 2, 2}, {1, 2, 2}, 0},
    {"Y3x1,C1x1", 3, JCS_YCbCr, {3, 1, 1}, {1, 1, 1}, 0},
    {"grey", 1, JCS_GRAYSCALE, {1}, {1}, 0},
    {"RGB", 3, JCS_RGB, {1, 1, 1}, {1, 1, 1}, 0},
    {"CMYK Adobe", 4, JCS_CMYK, {1, 1, 1, 1}, {1, 1, 1, 1}, 1},
    {"CMYK plain", 4, JCS_CMYK, {1, 1, 1, 1}, {1, 1, 1, 1}, 0},
    {"YCCK 4:2:0", 4, JCS_YCCK, {2, 1, 1, 2}, {2, 1, 1, 2}, 1},
};
#define JXC_NMODES (sizeof jxc_modes / sizeof *jxc_modes)

/* How the entropy-coded data is written. */
typedef enum { JXC_BASE, JXC_OPT, JXC_PROG, JXC_RST, JXC_PROG_RST, JXC_ARITH, JXC_NCODINGS } jxc_coding;
static const char *const jxc_coding_names[JXC_NCODINGS] = {"baseline", "optimised", "progressive",
                                                           "restarts", "progressive+restarts", "arithmetic"};

static const int jxc_sizes[][2] = {{1, 1},   {2, 2},   {3, 2},   {5, 7},   {8, 8},    {9, 17},
                                   {16, 16}, {31, 33}, {64, 48}, {127, 65}, {203, 151}};
#define JXC_NSIZES (sizeof jxc_sizes / sizeof *jxc_sizes)
static const int jxc_qualities[] = {10, 25, 50, 75, 90, 95, 100};
#define JXC_NQUALITIES (sizeof jxc_qualities / sizeof *jxc_qualities)

/* The JPEG of a w x h picture (tu_random_image `kind`, seed) in mode m at
 * quality: progressive (simple progression) or sequential, restart interval
 * rst (MCUs, 0: none), optimised Huffman tables or arithmetic coding as
 * asked; malloc'd bytes (free with free()). */
static unsigned char *jxc_write(unsigned long *size, const jxc_mode_t *m, int quality, int w, int h, int kind,
                                uint64_t seed, int progressive, unsigned rst, int opt, int arith)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    unsigned char *buf = NULL, *row;
    patina_image_t img;
    tu_rng_t r;
    int i, in = m->ncomp == 4 ? 4 : m->ncomp == 1 ? 1 : 3;
    tu_rng_seed(&r, seed);
    tu_random_image(&img, w, h, kind, &r);
    row = malloc((size_t)w * 4);
    assert_non_null(row);
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &buf, size);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = in;
    c.in_color_space = in == 4 ? JCS_CMYK : in == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_colorspace(&c, m->space);
    for (i = 0; i < c.num_components; i++) {
        c.comp_info[i].h_samp_factor = m->h[i];
        c.comp_info[i].v_samp_factor = m->v[i];
    }
    if (m->ncomp == 4) c.write_Adobe_marker = m->adobe ? TRUE : FALSE;
    jpeg_set_quality(&c, quality, TRUE);
    c.optimize_coding = opt ? TRUE : FALSE;
    if (progressive) jpeg_simple_progression(&c);
    c.restart_interval = rst;
    c.arith_code = arith ? TRUE : FALSE;
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        const uint8_t *p = img.data + (size_t)c.next_scanline * img.stride;
        for (i = 0; i < w; i++) {
            if (in == 1) row[i] = p[3 * i];
            else if (in == 3) memcpy(row + 3 * i, p + 3 * i, 3);
            else {
                row[4 * i] = (uint8_t)(255 - p[3 * i]);
                row[4 * i + 1] = (uint8_t)(255 - p[3 * i + 1]);
                row[4 * i + 2] = (uint8_t)(255 - p[3 * i + 2]);
                row[4 * i + 3] = (uint8_t)((p[3 * i] + p[3 * i + 2]) / 2);
            }
        }
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    patina_image_release(&img);
    return buf;
}

/* The JPEG of a generated case: jxc_write with `coding`'s settings (its
 * restart interval 1..3 MCUs from the seed). */
static unsigned char *jxc_make(unsigned long *size, const jxc_mode_t *m, jxc_coding coding, int quality, int w,
                               int h, int kind, uint64_t seed)
{
    return jxc_write(size, m, quality, w, h, kind, seed, coding == JXC_PROG || coding == JXC_PROG_RST,
                     coding == JXC_RST || coding == JXC_PROG_RST ? (unsigned)(1 + seed % 3) : 0, coding == JXC_OPT,
                     coding == JXC_ARITH);
}

/* One generated case: the files of every mode x coding x size, quality and
 * content varied with the index. */
typedef struct jxc_case {
    int mode;
    jxc_coding coding;
    int w, h, quality, kind;
    uint64_t seed;
} jxc_case_t;

#define JXC_NCASES (JXC_NMODES * JXC_NCODINGS * JXC_NSIZES)

static jxc_case_t jxc_case(size_t i)
{
    jxc_case_t k;
    size_t s = i % JXC_NSIZES, rest = i / JXC_NSIZES;
    k.coding = (jxc_coding)(rest % JXC_NCODINGS);
    k.mode = (int)(rest / JXC_NCODINGS);
    k.w = jxc_sizes[s][0];
    k.h = jxc_sizes[s][1];
    k.quality = jxc_qualities[i % JXC_NQUALITIES];
    k.kind = (int)(i % 4);
    k.seed = 1000 + i;
    return k;
}

/* The quality sweep: 4:2:0 and 4:4:4 at 10, 20, ..., 100 on 96x80 pictures. */
#define JXC_NSWEEP 20
static jxc_case_t jxc_sweep(size_t i)
{
    jxc_case_t k;
    k.mode = i % 2 ? 0 : 2;
    k.coding = JXC_BASE;
    k.w = 96;
    k.h = 80;
    k.quality = 10 * (int)(i / 2 + 1);
    k.kind = (int)(i % 3);
    k.seed = 7000 + i;
    return k;
}

#endif
