/* Synthetic RootSIFT records and reference collections for the
 * identification tests (tests/test_identify.c, tests/gpu/test_identify_gpu.c).
 * Include after testutil.h and features/rootsift.h. */
#ifndef PATINA_TESTS_IDFUTIL_H
#define PATINA_TESTS_IDFUTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A random positive row of L2 norm ~512 (a RootSIFT row quantised at 512). */
static inline void random_row(uint8_t *row, tu_rng_t *r)
{
    double v[128], s = 0;
    int k;
    for (k = 0; k < 128; k++) {
        v[k] = (double)tu_rng_below(r, 1000) + 1;
        v[k] = v[k] * v[k] * v[k]; /* peaky, like SIFT histograms */
        s += v[k] * v[k];
    }
    for (k = 0; k < 128; k++) {
        double x = floor(512.0 * v[k] / sqrt(s) + 0.5);
        row[k] = (uint8_t)(x > 255 ? 255 : x);
    }
}

/* row perturbed by up to +-amp per component */
static inline void perturb(uint8_t *out, const uint8_t *row, int amp, tu_rng_t *r)
{
    int k;
    for (k = 0; k < 128; k++) {
        int x = row[k] + (int)tu_rng_below(r, (uint32_t)(2 * amp + 1)) - amp;
        out[k] = (uint8_t)(x < 0 ? 0 : x > 255 ? 255 : x);
    }
}

/* A u8 record of m rows with `count` rows from rows (NULL: zero) and
 * geometry from geom (NULL: zero); the image is w x h. malloc'd. */
static inline unsigned char *make_record(size_t m, size_t count, const uint8_t *rows, const float *geom, int w, int h)
{
    size_t bytes = rs_record_bytes(m, RS_QUANT_U8), i;
    unsigned char *rec = calloc(1, bytes), *g;
    rs_put_header(rec, (uint32_t)count, (uint32_t)m, RS_QUANT_U8, 1.0f, (uint32_t)w, (uint32_t)h, (uint32_t)w, (uint32_t)h);
    if (rows) memcpy(rec + RS_HEADER, rows, count * 128);
    g = rec + RS_HEADER + m * 128;
    for (i = 0; geom && i < 4 * count; i++) rs_put_f32(g + 4 * i, geom[i]);
    assert_int_equal(rs_record_check(rec, bytes, "test"), PATINA_OK);
    return rec;
}

/* A collection in a new temp dir holding records (n, bytes) under table spec,
 * keys "ref0", "ref1", ... (ids 1..n). */
static inline patina_collection_t *make_collection(char **dir, const char *spec, unsigned char **recs, size_t n,
                                            size_t bytes)
{
    patina_collection_t *c = NULL;
    patina_insert_t *it = calloc(n, sizeof *it);
    char (*keys)[32] = calloc(n, sizeof *keys);
    size_t i;
    *dir = tu_tempdir("identify");
    TU_OK(patina_collection_open(&c, tu_path(*dir, "coll"), PATINA_OPEN_CREATE, 0));
    for (i = 0; i < n; i++) {
        snprintf(keys[i], sizeof keys[i], "ref%zu", i);
        it[i].key = keys[i];
        it[i].size = 1;
        it[i].width = it[i].height = 100;
        it[i].desc = recs[i];
    }
    TU_OK(patina_collection_put(c, spec, bytes, it, n, NULL));
    free(it);
    free(keys);
    return c;
}

#endif
