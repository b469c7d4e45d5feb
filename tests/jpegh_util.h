/* Shared by test_jpeg_huff.c (CPU) and gpu/test_jpeg_huff_gpu.c: files
 * prepared for the parallel Huffman decoder (src/image/jpeg_huff.h) with
 * libjpeg's coefficients beside them, and batches of them laid out as the GPU
 * stages them (one region per image, one after the other). Header-only. */
#ifndef PATINA_TESTS_JPEGH_UTIL_H
#define PATINA_TESTS_JPEGH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/jpeg_huff_core.h"
#include "image/jpeg_exact.h"
#include "image/jpeg_huff.h"
#include "jpegx_cases.h"
#include "testutil.h"

/* One file prepared for the Huffman decoder, with libjpeg's coefficients. */
typedef struct item {
    const char *name;
    jx_image_t im;
    int taken;          /* patina__jpegx_open took it */
    int lj_ok;          /* libjpeg read it without a warning */
    int16_t *lj;        /* its coefficients (lj_ok) */
    int huff;           /* the Huffman decoder takes it (header and markers) */
    int must;           /* it must take it and decode it when libjpeg reads it without a warning */
    jh_file_t *f;       /* its scan (f->seg) points into seg */
    uint8_t *seg;       /* a copy of its entropy-coded bytes (item_restage stages them again) */
    uint8_t *region;    /* staged (patina__jpegh_stage) */
    size_t used;
    jh_img_t img;
} item_t;

static void item_free(item_t *it)
{
    free(it->lj);
    free(it->f);
    free(it->seg);
    free(it->region);
    memset(it, 0, sizeof *it);
}

static void item_make(item_t *it, const void *jpg, size_t size, const char *name)
{
    patina_jpegx_reader_t *r = NULL;
    jx_image_t im2;
    memset(it, 0, sizeof *it);
    it->name = name;
    if (patina__jpegx_open(&r, &it->im, jpg, size, name) != PATINA_OK) {
        patina_clear_error();
        return;
    }
    it->taken = 1;
    it->lj = malloc((size_t)it->im.nblocks * 64 * sizeof(int16_t) + 1);
    assert_non_null(it->lj);
    it->lj_ok = patina__jpegx_read(r, &it->im, it->lj) == PATINA_OK;
    patina_clear_error();
    patina__jpegx_close(r);
    /* the Huffman side on a reader of its own */
    TU_OK(patina__jpegx_open(&r, &im2, jpg, size, name));
    it->f = malloc(sizeof *it->f);
    assert_non_null(it->f);
    if (patina__jpegx_huff(r, &im2, it->f) == PATINA_OK) {
        size_t cap = patina__jpegh_region_bound(it->f);
        it->seg = malloc(it->f->seg_size + 1);
        assert_non_null(it->seg);
        memcpy(it->seg, it->f->seg, it->f->seg_size);
        it->f->seg = it->seg;
        it->region = malloc(cap);
        assert_non_null(it->region);
        it->huff = patina__jpegh_stage(it->f, it->region, cap, &it->img, &it->used) == NULL;
        assert_true(it->used <= cap);
        /* its quantisation tables are libjpeg's */
        if (it->huff && it->lj_ok)
            for (int c = 0; c < it->im.ncomp; c++)
                assert_memory_equal(im2.comp[c].q, it->im.comp[c].q, sizeof im2.comp[c].q);
    }
    patina_clear_error();
    patina__jpegx_close(r);
}

/* Stages item it again with chunks of cb bits (it must be taken by the
 * Huffman decoder); the coefficients must not change. */
static void item_restage(item_t *it, uint32_t cb)
{
    size_t cap;
    if (!it->huff || it->f->sc.chunk_bits == cb) return;
    it->f->sc.chunk_bits = cb;
    cap = patina__jpegh_region_bound(it->f);
    free(it->region);
    it->region = malloc(cap);
    assert_non_null(it->region);
    assert_null(patina__jpegh_stage(it->f, it->region, cap, &it->img, &it->used));
}

/* The chunk size of item i in chunk mode `mode` of the tests: 0 the
 * default, 1..3 one size for all (JH_CHUNK_MIN, 1024, 2048), 4 mixed in one
 * batch. */
static uint32_t item_chunk_bits(int mode, size_t i)
{
    static const uint32_t mixed[3] = {JH_CHUNK_MIN, 1024u, JH_CHUNK_BITS};
    switch (mode) {
    case 1: return JH_CHUNK_MIN;
    case 2: return 1024u;
    case 3: return 2048u;
    case 4: return mixed[i % 3];
    default: return JH_CHUNK_BITS;
    }
}

/* A batch of the items taken: their regions one after the other in *base
 * (malloc'd), img[] (malloc'd, nimg entries) with batch offsets, blocks of
 * coefficients, chunks and intervals in all; 0 when no item is taken. */
typedef struct jh_tbatch {
    uint8_t *base;
    size_t bytes, blocks;
    jh_img_t *img;
    uint32_t nimg, nchunk, niv;
} jh_tbatch_t;

static int jh_tbatch_make(jh_tbatch_t *t, const item_t *items, size_t n)
{
    size_t ob = 0, oc = 0, oi = 0, ox = 0, m = 0, i;
    memset(t, 0, sizeof *t);
    for (i = 0; i < n; i++)
        if (items[i].huff) {
            t->bytes += items[i].used;
            t->nimg++;
        }
    if (!t->nimg) return 0;
    t->img = calloc(t->nimg, sizeof *t->img);
    t->base = malloc(t->bytes + 8);
    assert_true(t->img && t->base);
    for (i = 0; i < n; i++) {
        const item_t *it = &items[i];
        if (!it->huff) continue;
        t->img[m] = it->img;
        t->img[m].tab += ob;
        t->img[m].iv += ob;
        t->img[m].civ += ob;
        t->img[m].data += ob;
        t->img[m].coef = oc;
        t->img[m].c0 = (uint32_t)ox;
        t->img[m].iv0 = (uint32_t)oi;
        t->img[m].flag = (uint32_t)m;
        t->img[m].nblocks = (uint32_t)it->im.nblocks;
        memcpy(t->base + ob, it->region, it->used);
        ob += it->used;
        oc += it->im.nblocks;
        oi += it->img.niv;
        ox += it->img.nc;
        m++;
    }
    t->blocks = oc;
    t->nchunk = (uint32_t)ox;
    t->niv = (uint32_t)oi;
    return 1;
}

static void jh_tbatch_free(jh_tbatch_t *t)
{
    free(t->base);
    free(t->img);
    memset(t, 0, sizeof *t);
}

/* The C reference on a batch: fl (nimg) flags, cf (blocks, 64) coefficients. */
static void jh_tbatch_ref(const jh_tbatch_t *t, int rounds, int rev, uint32_t *fl, int16_t *cf)
{
    memset(fl, 0, t->nimg * sizeof *fl);
    memset(cf, 0, t->blocks * 64 * sizeof *cf); /* the decoder writes non-zero coefficients only */
    assert_int_equal(patina__jpegh_run(t->base, t->img, t->nimg, t->nchunk, t->niv, rounds, rev, cf, fl), 0);
}

/* A w x h JPEG of tu_random_image(kind) in mode m, restart interval rst
 * (MCUs, 0: none), optimised tables or not; malloc'd. */
static unsigned char *make_jpeg(unsigned long *size, const jxc_mode_t *m, int quality, int w, int h, int kind,
                                uint64_t seed, unsigned rst, int opt)
{
    return jxc_write(size, m, quality, w, h, kind, seed, 0, rst, opt, 0);
}

#endif
