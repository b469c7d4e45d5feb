/* lab_lbp: the LBP kernel lab (docs/lab/lbp.md). Validates each variant of
 * variants.cu against the C reference (src/features/lbp.c) and against the
 * library's own entry point (patina_gpu__lbp_grey: the production
 * dispatcher, default and 4-warp layouts), byte for byte, then times them.
 *
 *   lab_lbp --validate [--quick]   every variant on random batches (sizes
 *                                  1x1 .. 1031x1029, grids, every kind and
 *                                  circular method); exit 0 when all match,
 *                                  1 otherwise, 77 without a GPU (CTest
 *                                  lab_lbp_validate, labels gpu;lab)
 *   lab_lbp [--quick] [--batch N] [--threads N] [--image FILE]
 *                                  the tables: the paper's Tables 1-3
 *                                  (sequential, global- and shared-memory
 *                                  kernels, production, CPU), then the
 *                                  variants on N 1024^2 images per launch
 *                                  against the production kernels, and
 *                                  k_circ8's band heights
 * Input of the tables: the largest photograph under $PATINA_SAMPLES (or
 * ./samples, or --image) in grey, centre-cropped or mirrored to each size; a
 * synthetic texture without one. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchutil.h"
#include "core/internal.h"
#include "features/lbp.h"
#include "gpu/gpu.h"
#include "lab_lbp.h"
#include "patina/patina.h"

static patina_gpu_t *G;
static int quick, batch = 256, threads;
static const char *image_path;
static int failures;

static lbp_conf_t conf(int kind, int P, double R, int method, int mapping, const char *grid, double th)
{
    return bench_lbp_conf("lab", kind, P, R, method, mapping, grid, th);
}

static patina_gpu_lbp_conf_t gconf(const lbp_conf_t *c)
{
    patina_gpu_lbp_conf_t g;
    if (lbp_gpu_conf(&g, c) != PATINA_OK) {
        fprintf(stderr, "lab_lbp: %s\n", patina_last_error());
        exit(1);
    }
    return g;
}

/* ------------------------------------------------------------ validation */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

/* n grey images back to back: noise, smooth gradients, flat patches, and
 * every fourth image with 8 grey levels (ties, flat areas). */
static uint8_t *random_batch(int w, int h, int n)
{
    const size_t px = (size_t)w * (size_t)h;
    uint8_t *g = malloc(px * (size_t)n + 1);
    for (int i = 0; i < n; i++) {
        uint8_t *p = g + (size_t)i * px;
        const int base = (int)(rnd() % 256), gx = (int)(rnd() % 9) - 4, gy = (int)(rnd() % 9) - 4;
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                int v;
                switch (i % 3) {
                case 0: v = (int)(rnd() % 256); break;
                case 1: v = base + (gx * x + gy * y) / 4 + (int)(rnd() % 9) - 4; break;
                default: v = base + (((x / 7) * 31 + (y / 5) * 17) % 5) * 50; break;
                }
                v = ((v % 256) + 256) % 256;
                p[(size_t)y * (size_t)w + (size_t)x] = (uint8_t)(i % 4 == 3 ? v & 0xe0 : v);
            }
    }
    return g;
}

static void mismatch(const char *what, const char *against, int w, int h, int n, const char *detail)
{
    failures++;
    if (failures <= 20) printf("  MISMATCH %s against %s, %d images of %dx%d: %s\n", what, against, n, w, h, detail);
}

/* Codes of n images (mpx elements of esz bytes each) equal, NaN = NaN for
 * var (the reference's and the kernels' NaN bits are the same). */
static int same_codes(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

/* One batch: the reference, the library's entry (both layouts), and every
 * variant that applies, codes and counts. */
static void validate_case(const lbp_conf_t *c, int w, int h, int n, int band, const char *what)
{
    const patina_gpu_lbp_conf_t gc = gconf(c);
    const size_t dim = lbp_dim(c), px = (size_t)w * (size_t)h, esz = patina_elem_size(c->code_elem);
    int mw, mh;
    lbp_map_shape(c, w, h, &mw, &mh);
    const size_t mbytes = (size_t)mw * (size_t)mh * esz;
    uint8_t *g = random_batch(w, h, n);
    unsigned char *ref = malloc(mbytes * (size_t)n + 1), *lib = malloc(mbytes * (size_t)n + 1),
                  *got = malloc(mbytes * (size_t)n + 1);
    uint32_t *rc = calloc(dim * (size_t)n + 1, 4), *lc = calloc(dim * (size_t)n + 1, 4),
             *gcnt = calloc(dim * (size_t)n + 1, 4);
    char detail[160];
    for (int i = 0; i < n; i++) {
        patina_codemap_t m;
        if (lbp_ref_codes(&m, c, g + (size_t)i * px, w, h, (size_t)w) != PATINA_OK) {
            mismatch(what, "the C reference", w, h, n, patina_last_error());
            goto out;
        }
        memcpy(ref + (size_t)i * mbytes, m.data, mbytes);
        lbp_hist_counts(rc + (size_t)i * dim, c, &m);
        patina_codemap_release(&m);
    }
    for (int narrow = 0; narrow < 2; narrow++) {
        if (patina_gpu__lbp_set_caps(G, 0, 0, narrow) != PATINA_OK ||
            patina_gpu__lbp_grey(G, &gc, g, w, h, n, lib, lc, NULL) != PATINA_OK) {
            mismatch(what, "the library (error)", w, h, n, patina_last_error());
            goto out;
        }
        if (!same_codes(lib, ref, mbytes * (size_t)n)) mismatch(what, "the library's codes", w, h, n, "codes differ");
        if (memcmp(lc, rc, dim * (size_t)n * 4)) mismatch(what, "the library's counts", w, h, n, "counts differ");
    }
    patina_gpu__lbp_set_caps(G, 0, 0, 0);
    for (int v = 0; v < LAB_NVARIANTS; v++) {
        if (!lab_applies(v, &gc, w, h)) continue;
        for (int with_codes = lab_counts(v) ? 0 : 1; with_codes < 2; with_codes++) {
            memset(got, 0xee, mbytes * (size_t)n);
            memset(gcnt, 0xee, dim * (size_t)n * 4);
            if (lab_run(v, &gc, band, g, w, h, n, with_codes ? got : NULL, lab_counts(v) ? gcnt : NULL, 1, NULL,
                        NULL) != PATINA_OK) {
                snprintf(detail, sizeof detail, "%s: %s", lab_name(v), patina_last_error());
                mismatch(what, "(error)", w, h, n, detail);
                continue;
            }
            if (with_codes && !same_codes(got, ref, mbytes * (size_t)n)) {
                snprintf(detail, sizeof detail, "%s: codes differ from the C reference", lab_name(v));
                mismatch(what, "the C reference", w, h, n, detail);
            } else if (with_codes && !same_codes(got, lib, mbytes * (size_t)n)) {
                snprintf(detail, sizeof detail, "%s: codes differ from the library's", lab_name(v));
                mismatch(what, "the library", w, h, n, detail);
            }
            if (lab_counts(v) && memcmp(gcnt, rc, dim * (size_t)n * 4)) {
                snprintf(detail, sizeof detail, "%s%s: counts differ from the C reference", lab_name(v),
                         with_codes ? " (with codes)" : "");
                mismatch(what, "the C reference", w, h, n, detail);
            } else if (lab_counts(v) && memcmp(gcnt, lc, dim * (size_t)n * 4)) {
                snprintf(detail, sizeof detail, "%s: counts differ from the library's", lab_name(v));
                mismatch(what, "the library", w, h, n, detail);
            }
        }
    }
out:
    free(g);
    free(ref);
    free(lib);
    free(got);
    free(rc);
    free(lc);
    free(gcnt);
}

static int validate(void)
{
    static const int sizes[][3] = {{3, 3, 1},     {4, 5, 2},     {17, 5, 3},    {33, 34, 1},
                                   {256, 256, 2}, {1000, 37, 3}, {513, 300, 1}, {530, 67, 8},
                                   {1029, 131, 2}, {2, 9, 1},    {1024, 96, 5}, {1030, 515, 3}};
    static const int csizes[][3] = {{1, 1, 1},    {2, 2, 3},     {3, 3, 1},     {1, 17, 2}, {37, 29, 2},
                                    {256, 256, 1}, {130, 67, 4}, {300, 261, 4}, {129, 1, 2}};
    const lbp_conf_t k3[] = {
        conf(LBP_KIND_LBP8, 8, 1, 0, LBP_MAP_NONE, "1x1", 0.9),
        conf(LBP_KIND_TLBAP, 8, 1, 0, LBP_MAP_NONE, "1x1", 0.9),
        conf(LBP_KIND_TLBAP, 8, 1, 0, LBP_MAP_U2, "1x1", 0.5),
        conf(LBP_KIND_TLBAP, 8, 1, 0, LBP_MAP_NONE, "1x1", 0.37),
        conf(LBP_KIND_LANADP, 8, 1, 0, LBP_MAP_RIU2, "1x1", 0.9),
        conf(LBP_KIND_LBP8, 8, 1, 0, LBP_MAP_NONE, "4x4", 0.9),
        conf(LBP_KIND_LBP8, 8, 1, 0, LBP_MAP_U2, "2x30", 0.9),
        conf(LBP_KIND_TLBAP, 8, 1, 0, LBP_MAP_RIU2, "3x5", 0.5),
        conf(LBP_KIND_TLBAP, 8, 1, 0, LBP_MAP_NONE, "5x3", 0.37),
        conf(LBP_KIND_LANADP, 8, 1, 0, LBP_MAP_NONE, "1x63", 0.9),
        conf(LBP_KIND_LANADP, 8, 1, 0, LBP_MAP_RI, "7x2", 0.9),
        conf(LBP_KIND_LBP8, 8, 1, 0, LBP_MAP_NONE, "64x64", 0.9),
    };
    const lbp_conf_t circ[] = {
        conf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_DEFAULT, LBP_MAP_NONE, "1x1", 0),
        conf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_UNIFORM, LBP_MAP_NONE, "2x2", 0),
        conf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_VAR, LBP_MAP_NONE, "1x1", 0),
        conf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_ROR, LBP_MAP_NONE, "3x2", 0),
        conf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_NRI, LBP_MAP_NONE, "1x1", 0),
        conf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_DEFAULT, LBP_MAP_U2, "2x3", 0),
        conf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_DEFAULT, LBP_MAP_RIU2, "1x1", 0),
        conf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_DEFAULT, LBP_MAP_NONE, "4x4", 0),
        conf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_DEFAULT, LBP_MAP_NONE, "16x16", 0),
        conf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_VAR, LBP_MAP_NONE, "2x2", 0),
    };
    static const int bands[] = {1, 7, 16, 32, 128};
    for (size_t k = 0; k < sizeof k3 / sizeof k3[0]; k++) {
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            if (quick && s % 3) continue;
            validate_case(&k3[k], sizes[s][0], sizes[s][1], sizes[s][2], 0, "3x3");
        }
        printf("  3x3 configuration %zu: %d mismatches so far\n", k, failures);
        fflush(stdout);
    }
    for (size_t k = 0; k < sizeof circ / sizeof circ[0]; k++) {
        for (size_t s = 0; s < sizeof csizes / sizeof csizes[0]; s++) {
            if (quick && s % 3 != 1) continue;
            validate_case(&circ[k], csizes[s][0], csizes[s][1], csizes[s][2],
                          bands[(k + s) % (sizeof bands / sizeof bands[0])], "circular");
        }
        printf("  circular configuration %zu: %d mismatches so far\n", k, failures);
        fflush(stdout);
    }
    if (!quick) {
        /* many images per launch: k_fast3's and the other layouts' task
         * groups across images */
        validate_case(&k3[0], 1030, 200, 64, 0, "3x3, 64 images");
        validate_case(&k3[4], 1030, 200, 64, 0, "3x3, 64 images");
        validate_case(&circ[1], 1031, 1029, 2, 16, "circular 1031x1029");
    }
    printf("lab_lbp --validate: %s (%d mismatches)\n", failures ? "FAILED" : "every variant matched the C reference "
                                                                              "and the library", failures);
    return failures ? 1 : 0;
}

/* --------------------------------------------------------------- tables */

static bench_source_t source; /* the input of the tables */

static void fmt(char *buf, size_t n, double v)
{
    if (isnan(v)) snprintf(buf, n, "-");
    else if (v >= 100) snprintf(buf, n, "%.1f", v);
    else if (v >= 1) snprintf(buf, n, "%.3f", v);
    else snprintf(buf, n, "%.4f", v);
}

/* Median kernel ms of variant v (v < 0: the library, codes only for -1,
 * histograms only for -2), after checking its codes against ref (NULL: not
 * checked). */
static double time_variant(int v, const lbp_conf_t *c, const uint8_t *g, int s, int n, const patina_codemap_t *ref,
                           double *ms_stream)
{
    const patina_gpu_lbp_conf_t gc = gconf(c);
    const size_t esz = patina_elem_size(c->code_elem), dim = lbp_dim(c);
    int mw, mh;
    lbp_map_shape(c, s, s, &mw, &mh);
    const size_t mbytes = (size_t)mw * (size_t)mh * esz;
    unsigned char *codes = ref ? malloc(mbytes * (size_t)n) : NULL;
    uint32_t *counts = malloc(dim * 4 * (size_t)n);
    double ms = NAN, mss = NAN;
    patina_status st;
    if (v < 0) {
        patina_gpu_lbp_timing_t tm = {quick ? 5 : 20, 0, 0};
        st = patina_gpu__lbp_grey(G, &gc, g, s, s, n, v == -1 ? codes : NULL, v == -2 ? counts : NULL, &tm);
        ms = tm.ms_alone;
        mss = tm.ms_stream;
    } else {
        st = lab_run(v, &gc, 0, g, s, s, n, codes, lab_counts(v) ? counts : NULL, quick ? 5 : 20, &ms, &mss);
    }
    if (st != PATINA_OK) {
        printf("  [%s: %s]\n", v < 0 ? "library" : lab_name(v), patina_last_error());
        ms = mss = NAN;
    } else if (codes && memcmp(codes, ref->data, mbytes) != 0) {
        printf("  [%s: CODES DIFFER FROM THE C REFERENCE]\n", v < 0 ? "library" : lab_name(v));
        failures++;
    }
    free(codes);
    free(counts);
    if (ms_stream) *ms_stream = mss;
    return ms;
}

static double time_fast(const lbp_conf_t *c, const uint8_t *g, int s, patina_pool_t *pool)
{
    double best = INFINITY;
    for (int r = 0; r < (quick ? 2 : 5); r++) {
        patina_codemap_t m;
        double t = patina_now();
        lbp_fast_codes(&m, c, g, s, s, (size_t)s, pool);
        t = patina_now() - t;
        patina_codemap_release(&m);
        if (t < best) best = t;
    }
    return best * 1e3;
}

typedef struct {
    double seq, v[4], pcodes, phist, cpu1, cpun;
} prow_t;

/* The paper's Tables 1-2 for one kind (one image per launch, kernel time). */
static void paper_table(const char *title, const lbp_conf_t *c, patina_pool_t *pool, prow_t rows[3])
{
    static const int sizes[3] = {256, 512, 1024};
    printf("\n%s: milliseconds per image (one image per launch; GPU: kernel time, median)\n", title);
    printf("| size | sequential (C ref) | global 16x16 | global 32x32 | shared 16x16 | shared 32x32 |"
           " production codes | production hist | CPU fast 1 thread | CPU fast %d threads |\n",
           patina_pool_size(pool));
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < 3; i++) {
        const int s = sizes[i];
        uint8_t *g = malloc((size_t)s * (size_t)s);
        patina_codemap_t ref;
        prow_t *r = &rows[i];
        char b[10][32];
        double t;
        bench_source_square(&source, g, s, 0);
        t = patina_now();
        lbp_ref_codes(&ref, c, g, s, s, (size_t)s);
        r->seq = (patina_now() - t) * 1e3;
        for (int v = 0; v < 4; v++) r->v[v] = time_variant(v, c, g, s, 1, &ref, NULL);
        r->pcodes = time_variant(-1, c, g, s, 1, &ref, NULL);
        r->phist = time_variant(-2, c, g, s, 1, NULL, NULL);
        r->cpu1 = time_fast(c, g, s, NULL);
        r->cpun = time_fast(c, g, s, pool);
        fmt(b[0], 32, r->seq);
        for (int v = 0; v < 4; v++) fmt(b[1 + v], 32, r->v[v]);
        fmt(b[5], 32, r->pcodes);
        fmt(b[6], 32, r->phist);
        fmt(b[7], 32, r->cpu1);
        fmt(b[8], 32, r->cpun);
        printf("| %d x %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s, s, b[0], b[1], b[2], b[3], b[4], b[5],
               b[6], b[7], b[8]);
        patina_codemap_release(&ref);
        free(g);
    }
}

static void speedups(const prow_t t[3], const prow_t l[3])
{
    static const int sizes[3] = {256, 512, 1024};
    printf("\nTable 3: speedup = sequential time / parallel time (paper: TLBAP 2.3 / 5.2, LANADP 17 / 29)\n");
    printf("| size | TLBAP global 16 | TLBAP shared 16 | TLBAP production | TLBAP CPU fast 1 thr |"
           " LANADP global 16 | LANADP shared 16 | LANADP production | LANADP CPU fast 1 thr |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < 3; i++)
        printf("| %d x %d | %.1f | %.1f | %.0f | %.0f | %.1f | %.1f | %.0f | %.0f |\n", sizes[i], sizes[i],
               t[i].seq / t[i].v[0], t[i].seq / t[i].v[2], t[i].seq / t[i].pcodes, t[i].seq / t[i].cpu1,
               l[i].seq / l[i].v[0], l[i].seq / l[i].v[2], l[i].seq / l[i].pcodes, l[i].seq / l[i].cpu1);
}

/* The variants against the production kernels on N 1024^2 images per launch
 * (histograms only; launches back to back). */
static void variant_table(double copy_gbps)
{
    static const struct {
        const char *name;
        int kind, P, method;
        const char *grid;
        int variants[4]; /* -2: the library; -3: the library's 4-warp layout; -9 ends */
    } rows[] = {
        {"lbp8", LBP_KIND_LBP8, 8, 0, "1x1", {-2, -3, LAB_ROWS_ALT, LAB_FAST3}},
        {"lbp8", LBP_KIND_LBP8, 8, 0, "1x1", {LAB_PROD3, -9, 0, 0}},
        {"tlbap:th=0.9", LBP_KIND_TLBAP, 8, 0, "1x1", {-2, -3, LAB_ROWS_ALT, LAB_FAST3}},
        {"tlbap:th=0.9", LBP_KIND_TLBAP, 8, 0, "1x1", {LAB_PROD3, -9, 0, 0}},
        {"lanadp", LBP_KIND_LANADP, 8, 0, "1x1", {-2, -3, LAB_ROWS_ALT, LAB_FAST3}},
        {"lanadp", LBP_KIND_LANADP, 8, 0, "1x1", {LAB_PROD3, -9, 0, 0}},
        {"lbp8 grid=4x4", LBP_KIND_LBP8, 8, 0, "4x4", {-2, LAB_PROD3, -9, 0}},
        {"tlbap:th=0.9 grid=4x4", LBP_KIND_TLBAP, 8, 0, "4x4", {-2, LAB_PROD3, -9, 0}},
        {"lanadp grid=4x4", LBP_KIND_LANADP, 8, 0, "4x4", {-2, LAB_PROD3, -9, 0}},
        {"lbp8 grid=8x8", LBP_KIND_LBP8, 8, 0, "8x8", {-2, LAB_PROD3, -9, 0}},
        {"lbp P=8,R=1,uniform", LBP_KIND_CIRCULAR, 8, LBP_M_UNIFORM, "1x1", {-2, LAB_CIRC, -9, 0}},
    };
    const int s = 1024;
    const size_t px = (size_t)s * s;
    uint8_t *g = malloc(px * (size_t)batch);
    for (int i = 0; i < batch; i++) bench_source_square(&source, g + (size_t)i * px, s, (i * 37) % 200);
    printf("\nVariants against the production kernels: %d images of %dx%d per launch (circular: 32), histograms "
           "only, launches back to back (ms per launch; alone: one launch on an idle GPU); copy bandwidth %.0f GB/s\n",
           batch, s, s, copy_gbps);
    printf("| descriptor | kernel | ms per launch | ms alone | input GB/s | %% of copy bw |\n");
    printf("|---|---|---|---|---|---|\n");
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        const lbp_conf_t c = conf(rows[k].kind, rows[k].P, 1, rows[k].method, LBP_MAP_NONE, rows[k].grid, 0.9);
        const int n = rows[k].kind == LBP_KIND_CIRCULAR && batch > 32 ? 32 : batch;
        for (int j = 0; j < 4 && rows[k].variants[j] != -9; j++) {
            const int v = rows[k].variants[j];
            double mss = NAN, ms;
            if (v == -3) patina_gpu__lbp_set_caps(G, 0, 0, 1);
            ms = time_variant(v == -3 ? -2 : v, &c, g, s, n, NULL, &mss);
            if (v == -3) patina_gpu__lbp_set_caps(G, 0, 0, 0);
            printf("| %s | %s | %.3f | %.3f | %.0f | %.0f%% |\n", rows[k].name,
                   v == -2 ? "production" : v == -3 ? "production, 4-warp layout" : lab_name(v), mss, ms,
                   (double)px * n / (mss * 1e-3) / 1e9, 100.0 * (double)px * n / (mss * 1e-3) / 1e9 / copy_gbps);
        }
    }
    {
        /* k_circ8's band height */
        static const int bands[] = {8, 16, 32, 64, 128};
        const lbp_conf_t c = conf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_UNIFORM, LBP_MAP_NONE, "1x1", 0);
        const patina_gpu_lbp_conf_t gc = gconf(&c);
        const int n = batch > 32 ? 32 : batch;
        uint32_t *counts = malloc(lbp_dim(&c) * 4 * (size_t)n);
        printf("\nk_circ8's band height (lbp P=8,R=1,uniform, %d images, histograms, back to back):", n);
        for (size_t b = 0; b < sizeof bands / sizeof bands[0]; b++) {
            double ms = NAN, mss = NAN;
            if (lab_run(LAB_C8BAND, &gc, bands[b], g, s, s, n, NULL, counts, quick ? 5 : 20, &ms, &mss) == PATINA_OK)
                printf(" %d rows %.0f GB/s%s", bands[b], (double)px * n / (mss * 1e-3) / 1e9,
                       b + 1 < sizeof bands / sizeof bands[0] ? "," : "\n");
        }
        free(counts);
    }
    free(g);
}

int main(int argc, char **argv)
{
    int do_validate = 0;
    patina_pool_t *pool;
    double copy_gbps = NAN;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--validate")) do_validate = 1;
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--image") && i + 1 < argc) image_path = argv[++i];
        else {
            fprintf(stderr, "usage: lab_lbp --validate [--quick] | lab_lbp [--quick] [--batch N] [--threads N] "
                            "[--image FILE]\n");
            return 2;
        }
    }
    if (batch < 1) batch = 1;
    if (patina_gpu_count() == 0 || patina_gpu_open(&G, 0, 0) != PATINA_OK) {
        fprintf(stderr, "lab_lbp: no usable GPU (%s); skipped\n",
                patina_gpu_count() ? patina_last_error() : "no CUDA device");
        return 77;
    }
    if (do_validate) {
        const int rc = validate();
        patina_gpu_close(G);
        return rc;
    }
    if (patina_pool_new(&pool, threads) != PATINA_OK) return 1;
    bench_source_load(&source, image_path);
    {
        char d[256];
        patina_gpu_describe(0, d, sizeof d);
        if (patina_gpu__bandwidth(G, 1, (size_t)256 << 20, 10, &copy_gbps) != PATINA_OK) copy_gbps = NAN;
        printf("# lab_lbp: %s\ninput: %s\nGPU: %s; device-to-device copy bandwidth %.0f GB/s (best of 10)\n",
               patina_build_info(), source.name, d, copy_gbps);
    }
    {
        prow_t t[3], l[3], b8[3];
        lbp_conf_t ct = conf(LBP_KIND_TLBAP, 8, 1, 0, LBP_MAP_NONE, "1x1", 0.9),
                   cl = conf(LBP_KIND_LANADP, 8, 1, 0, LBP_MAP_NONE, "1x1", 0.9),
                   c8 = conf(LBP_KIND_LBP8, 8, 1, 0, LBP_MAP_NONE, "1x1", 0.9);
        paper_table("Table 1, TLBAP (th=0.9)", &ct, pool, t);
        paper_table("Table 2, LANADP", &cl, pool, l);
        paper_table("Also: classic 3x3 LBP (lbp8)", &c8, pool, b8);
        speedups(t, l);
    }
    variant_table(copy_gbps);
    printf("\nvalidation: %s\n", failures ? "MISMATCHES (see above)" : "every variant's codes matched the C reference");
    patina_pool_free(pool);
    patina_gpu_close(G);
    bench_source_release(&source);
    return failures ? 1 : 0;
}
