/* GLCM and Haralick: scikit-image's documented examples, the offset rule,
 * degenerate images (1x1, constant, one row, offsets larger than the image),
 * the fast multi-threaded counts against the plain reference, masks, every
 * property and Haralick feature against its textbook definition on small
 * hand matrices, and the glcm / haralick families. Parity with scikit-image
 * itself is tests/test_glcm_skimage.c. */
#define _GNU_SOURCE
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "features/glcm_ref.h"
#include "patina/glcm.h"
#include "testutil.h"

/* |a - b| <= 1e-12 (|b| + 1): the C code uses exact integer sums where the
 * textbook loops below sum doubles in a different order. */
static void assert_close(double a, double b, const char *what, int k)
{
    if (!(fabs(a - b) <= 1e-12 * (fabs(b) + 1.0)))
        fail_msg("%s[%d]: got %.17g, textbook %.17g", what, k, a, b);
}

/* scikit-image's graycomatrix docstring example. */
static const uint8_t doc_img[16] = {0, 0, 1, 1, 0, 0, 1, 1, 0, 2, 2, 2, 2, 2, 3, 3};

static void test_skimage_docstring(void **state)
{
    static const uint32_t want[4][16] = {
        {2, 2, 1, 0, 0, 2, 0, 0, 0, 0, 3, 1, 0, 0, 0, 1},
        {1, 1, 3, 0, 0, 1, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0},
        {3, 0, 2, 0, 0, 2, 2, 0, 0, 0, 1, 2, 0, 0, 0, 0},
        {2, 0, 0, 0, 1, 1, 2, 0, 0, 0, 2, 1, 0, 0, 0, 0}};
    patina_glcm_offset_t off[4];
    uint32_t counts[4 * 16], c2[4 * 16];
    double props[PATINA_GLCM_NPROPS * 4];
    (void)state;
    for (int a = 0; a < 4; a++) off[a] = patina_glcm_offset(1, 45.0 * a);
    TU_OK(patina_glcm_counts_ref(counts, doc_img, 4, 4, 4, NULL, 0, 4, off, 4, 0));
    assert_memory_equal(counts, want, sizeof want);
    TU_OK(patina_glcm_counts(c2, doc_img, 4, 4, 4, NULL, 0, 4, off, 4, 0, 0));
    assert_memory_equal(c2, want, sizeof want);
    /* graycoprops docstring: distances [1, 2], angles [0, 90], symmetric, normed. */
    off[0] = patina_glcm_offset(1, 0);
    off[1] = patina_glcm_offset(1, 90);
    off[2] = patina_glcm_offset(2, 0);
    off[3] = patina_glcm_offset(2, 90);
    TU_OK(patina_glcm_counts(counts, doc_img, 4, 4, 4, NULL, 0, 4, off, 4, 1, 1));
    patina_glcm_props(props, counts, 4, 4);
    assert_close(props[0], 0.58333333333333337, "contrast", 0);
    assert_close(props[1], 1.0, "contrast", 1);
    assert_close(props[2], 1.25, "contrast", 2);
    assert_close(props[3], 2.75, "contrast", 3);
}

static void test_offsets(void **state)
{
    static const struct {
        double d, a;
        int dy, dx;
    } cases[] = {
        {1, 0, 0, 1},    {1, 45, 1, 1},   {1, 90, 1, 0},    {1, 135, 1, -1},  {1, 180, 0, -1},
        {1, 270, -1, 0}, {1, -45, -1, 1}, {2, 45, 1, 1},    {3, 45, 2, 2},    {4, 45, 3, 3},
        {2, 30, 1, 2},   {3, 30, 1, 3},   {1, 30, 1, 1},    {3, 60, 3, 2},    {5, 0, 0, 5},
        {4, 135, 3, -3}, {0, 45, 0, 0},   {1.5, 0, 0, 2},   {2.5, 90, 3, 0},  {1, 360, 0, 1},
    };
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        patina_glcm_offset_t o = patina_glcm_offset(cases[i].d, cases[i].a);
        if (o.dy != cases[i].dy || o.dx != cases[i].dx)
            fail_msg("d=%g angle=%g: got (%d,%d), want (%d,%d)", cases[i].d, cases[i].a, o.dy,
                     o.dx, cases[i].dy, cases[i].dx);
    }
}

static void test_quantize(void **state)
{
    uint8_t g[256], q[256];
    (void)state;
    for (int v = 0; v < 256; v++) g[v] = (uint8_t)v;
    for (int L = 2; L <= 256; L++) {
        TU_OK(patina_glcm_quantize(q, g, 256, L, PATINA_GLCM_QUANT_UNIFORM));
        for (int v = 0; v < 256; v++) assert_int_equal(q[v], v * L / 256);
    }
    TU_OK(patina_glcm_quantize(q, g, 8, 8, PATINA_GLCM_QUANT_NONE));
    assert_memory_equal(q, g, 8);
    assert_int_equal(patina_glcm_quantize(q, g, 9, 8, PATINA_GLCM_QUANT_NONE), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "not below levels=8"));
    assert_int_equal(patina_glcm_quantize(q, g, 9, 1, PATINA_GLCM_QUANT_UNIFORM), PATINA_E_INVALID);
    assert_int_equal(patina_glcm_quantize(q, g, 9, 257, PATINA_GLCM_QUANT_UNIFORM), PATINA_E_INVALID);
}

static uint64_t total(const uint32_t *P, size_t n)
{
    uint64_t t = 0;
    for (size_t i = 0; i < n; i++) t += P[i];
    return t;
}

static void test_degenerate(void **state)
{
    const int L = 8;
    patina_glcm_offset_t off[6] = {{0, 1}, {1, 1}, {1, 0}, {1, -1}, {0, 0}, {40, 0}};
    uint32_t counts[6 * 64], ref[6 * 64];
    double props[PATINA_GLCM_NPROPS * 6], har[6 * PATINA_HARALICK_N];
    uint8_t one = 5, flat[7 * 9], row[33];
    (void)state;
    /* 1x1: no pair for any non-zero offset; (0,0) pairs the pixel with itself. */
    TU_OK(patina_glcm_counts(counts, &one, 1, 1, 1, NULL, 0, L, off, 6, 0, 0));
    for (int o = 0; o < 6; o++)
        assert_int_equal(total(counts + o * 64, 64), o == 4 ? 1 : 0);
    assert_int_equal(counts[4 * 64 + 5 * 8 + 5], 1);
    patina_glcm_props(props, counts, L, 6);
    patina_haralick(har, counts, L, 6);
    for (int k = 0; k < PATINA_GLCM_NPROPS; k++) /* empty matrix: 0, correlation 1 */
        assert_true(props[k * 6 + 0] == (k == 5 ? 1.0 : 0.0));
    for (int k = 0; k < PATINA_HARALICK_N; k++) assert_true(har[k] == (k == 2 ? 1.0 : 0.0));
    /* (0,0) on 1x1: a single cell. */
    assert_true(props[3 * 6 + 4] == 1.0 && props[4 * 6 + 4] == 1.0 && props[9 * 6 + 4] == 0.0);
    assert_true(props[6 * 6 + 4] == 5.0 && props[5 * 6 + 4] == 1.0);

    /* Constant image: everything at (3,3). */
    memset(flat, 3, sizeof flat);
    TU_OK(patina_glcm_counts(counts, flat, 9, 7, 9, NULL, 0, L, off, 6, 1, 0));
    assert_int_equal(counts[0 * 64 + 3 * 8 + 3], 2 * 7 * 8);
    assert_int_equal(counts[1 * 64 + 3 * 8 + 3], 2 * 6 * 8);
    assert_int_equal(counts[2 * 64 + 3 * 8 + 3], 2 * 6 * 9);
    assert_int_equal(total(counts + 5 * 64, 64), 0); /* 40 rows down: outside */
    patina_glcm_props(props, counts, L, 6);
    patina_haralick(har, counts, L, 6);
    assert_true(props[0 * 6] == 0.0 && props[2 * 6] == 1.0 && props[3 * 6] == 1.0);
    assert_true(props[5 * 6] == 1.0 && props[9 * 6] == 0.0 && props[7 * 6] == 0.0);
    assert_true(har[8] == 0.0 && har[11] == 0.0 && har[12] == 0.0 && har[13] == 0.0);

    /* One row: vertical and diagonal offsets find nothing. */
    for (int i = 0; i < 33; i++) row[i] = (uint8_t)(i % L);
    TU_OK(patina_glcm_counts(counts, row, 33, 1, 33, NULL, 0, L, off, 6, 0, 0));
    TU_OK(patina_glcm_counts_ref(ref, row, 33, 1, 33, NULL, 0, L, off, 6, 0));
    assert_memory_equal(counts, ref, sizeof counts);
    assert_int_equal(total(counts, 64), 32);
    assert_int_equal(total(counts + 64, 64 * 3), 0);
    assert_int_equal(total(counts + 4 * 64, 64), 33);
    /* One column, offsets longer than the image both ways. */
    {
        patina_glcm_offset_t big[4] = {{0, 33}, {0, -33}, {-100, 5}, {1, 0}};
        TU_OK(patina_glcm_counts(counts, row, 1, 33, 1, NULL, 0, L, big, 4, 1, 0));
        assert_int_equal(total(counts, 3 * 64), 0);
        assert_int_equal(total(counts + 3 * 64, 64), 64);
    }
    /* Empty image. */
    TU_OK(patina_glcm_counts(counts, NULL, 0, 0, 0, NULL, 0, L, off, 6, 0, 0));
    assert_int_equal(total(counts, 6 * 64), 0);
    /* Bad arguments. */
    assert_int_equal(patina_glcm_counts(counts, row, 33, 1, 32, NULL, 0, L, off, 6, 0, 0),
                     PATINA_E_INVALID);
    assert_int_equal(patina_glcm_counts(counts, row, 33, 1, 33, NULL, 0, 1, off, 6, 0, 0),
                     PATINA_E_INVALID);
    assert_int_equal(patina_glcm_counts(counts, row, 33, 1, 33, NULL, 0, L, off, 65, 0, 0),
                     PATINA_E_LIMIT);
}

/* The fast path (bands, private copies, any thread count) equals the plain
 * loop on random images of awkward sizes, with and without masks. */
static void test_fast_equals_reference(void **state)
{
    static const int sizes[][2] = {{1, 1}, {2, 3}, {17, 5}, {64, 64}, {129, 67}, {300, 211},
                                   {1031, 1023}};
    static const int levels[] = {2, 8, 32, 100, 256};
    tu_rng_t rng;
    patina_pool_t *pool;
    (void)state;
    tu_rng_seed(&rng, 4);
    TU_OK(patina_pool_new(&pool, 4));
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (size_t li = 0; li < sizeof levels / sizeof levels[0]; li++) {
            const int w = sizes[si][0], h = sizes[si][1], L = levels[li];
            const size_t stride = (size_t)w + 3;
            patina_glcm_offset_t off[10];
            uint8_t *q = malloc(stride * (size_t)h), *m = malloc(stride * (size_t)h);
            size_t n = (size_t)L * (size_t)L * 10;
            uint32_t *a = malloc(n * 4), *b = malloc(n * 4);
            int kind = (int)(si + li) % 3;
            for (size_t i = 0; i < stride * (size_t)h; i++) {
                /* kind 0: noise; 1: long runs of one value; 2: smooth ramp */
                size_t x = i % stride, y = i / stride;
                q[i] = (uint8_t)(kind == 0 ? tu_rng_below(&rng, (uint32_t)L)
                                 : kind == 1 ? ((x / 50 + y / 30) % (size_t)L)
                                             : ((x + y) * (size_t)L / (stride + (size_t)h)));
                m[i] = (uint8_t)(tu_rng_below(&rng, 4) != 0);
            }
            for (int o = 0; o < 10; o++) {
                off[o].dy = (int)tu_rng_below(&rng, 9) - 4;
                off[o].dx = (int)tu_rng_below(&rng, 9) - 4;
            }
            off[9].dy = h; /* taller than the image */
            for (int sym = 0; sym < 2; sym++)
                for (int withmask = 0; withmask < 2; withmask++) {
                    const uint8_t *mk = withmask ? m : NULL;
                    TU_OK(patina_glcm_counts_ref(a, q, w, h, stride, mk, stride, L, off, 10, sym));
                    TU_OK(glcm_counts_pool(pool, b, q, w, h, stride, mk, stride, L, off, 10, sym));
                    if (memcmp(a, b, n * 4)) fail_msg("pool: %dx%d L=%d sym=%d mask=%d", w, h, L, sym, withmask);
                    TU_OK(patina_glcm_counts(b, q, w, h, stride, mk, stride, L, off, 10, sym, 1));
                    if (memcmp(a, b, n * 4)) fail_msg("1 thread: %dx%d L=%d sym=%d mask=%d", w, h, L, sym, withmask);
                    TU_OK(patina_glcm_counts(b, q, w, h, stride, mk, stride, L, off, 10, sym, 3));
                    if (memcmp(a, b, n * 4)) fail_msg("3 threads: %dx%d L=%d sym=%d mask=%d", w, h, L, sym, withmask);
                }
            free(q); free(m); free(a); free(b);
        }
    patina_pool_free(pool);
}

/* ------------------------------------------------ textbook definitions */

/* Haralick / scikit-image written as the formulas read, on p = P / sum P,
 * with plain double loops (docs/glcm.md). */
typedef struct textbook {
    double props[PATINA_GLCM_NPROPS];
    double har[PATINA_HARALICK_N];
} textbook_t;

/* Eigenvalues of a small symmetric matrix by cyclic Jacobi rotations: an
 * algorithm independent of the library's Householder + QL. */
static void jacobi_eigen(double *A, int n, double *ev)
{
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0;
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++) off += A[i * n + j] * A[i * n + j];
        if (off < 1e-30) break;
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++) {
                double apq = A[p * n + q], theta, t, c, s;
                if (fabs(apq) < 1e-300) continue;
                theta = (A[q * n + q] - A[p * n + p]) / (2 * apq);
                t = (theta >= 0 ? 1 : -1) / (fabs(theta) + sqrt(theta * theta + 1));
                c = 1 / sqrt(t * t + 1);
                s = t * c;
                for (int k = 0; k < n; k++) { /* A = J^T A J */
                    double akp = A[k * n + p], akq = A[k * n + q];
                    A[k * n + p] = c * akp - s * akq;
                    A[k * n + q] = s * akp + c * akq;
                }
                for (int k = 0; k < n; k++) {
                    double apk = A[p * n + k], aqk = A[q * n + k];
                    A[p * n + k] = c * apk - s * aqk;
                    A[q * n + k] = s * apk + c * aqk;
                }
            }
    }
    for (int i = 0; i < n; i++) ev[i] = A[i * n + i];
}

static double lg2(double x) { return x > 0 ? log2(x) : 0; }

static void textbook(textbook_t *t, const uint32_t *P, int L)
{
    double p[16][16], px[16] = {0}, py[16] = {0}, ps[31] = {0}, pd[16] = {0}, T = 0;
    double mx = 0, my = 0, sx = 0, sy = 0, cov = 0, hx = 0, hy = 0, hxy = 0, hxy1 = 0, hxy2 = 0;
    double sa = 0, sv = 0, da = 0, dv = 0, hs = 0, hd = 0;
    memset(t, 0, sizeof *t);
    for (int i = 0; i < L * L; i++) T += P[i];
    for (int i = 0; i < L; i++)
        for (int j = 0; j < L; j++) {
            p[i][j] = P[i * L + j] / T;
            px[i] += p[i][j];
            py[j] += p[i][j];
            ps[i + j] += p[i][j];
            pd[abs(i - j)] += p[i][j];
        }
    for (int i = 0; i < L; i++) {
        mx += i * px[i];
        my += i * py[i];
    }
    for (int i = 0; i < L; i++) {
        sx += (i - mx) * (i - mx) * px[i];
        sy += (i - my) * (i - my) * py[i];
    }
    for (int i = 0; i < L; i++)
        for (int j = 0; j < L; j++) {
            double v = p[i][j];
            t->props[0] += v * (i - j) * (i - j);
            t->props[1] += v * abs(i - j);
            t->props[2] += v / (1.0 + (i - j) * (i - j));
            t->props[3] += v * v;
            cov += v * (i - mx) * (j - my);
            t->props[9] -= v > 0 ? v * log(v) : 0;
            hxy -= v * lg2(v);
            hxy1 -= v * lg2(px[i] * py[j]);
            hxy2 -= px[i] * py[j] * lg2(px[i] * py[j]);
        }
    t->props[4] = sqrt(t->props[3]);
    t->props[5] = (sx == 0 || sy == 0) ? 1.0 : cov / sqrt(sx * sy);
    t->props[6] = mx;
    t->props[7] = sx;
    t->props[8] = sqrt(sx);
    for (int k = 0; k < 2 * L - 1; k++) {
        sa += k * ps[k];
        hs -= ps[k] * lg2(ps[k]);
    }
    for (int k = 0; k < 2 * L - 1; k++) sv += (k - sa) * (k - sa) * ps[k];
    for (int k = 0; k < L; k++) {
        da += k * pd[k];
        hd -= pd[k] * lg2(pd[k]);
        hx -= px[k] * lg2(px[k]);
        hy -= py[k] * lg2(py[k]);
    }
    for (int k = 0; k < L; k++) dv += (k - da) * (k - da) * pd[k];
    t->har[0] = t->props[3];
    for (int k = 0; k < L; k++) t->har[1] += (double)k * k * pd[k];
    t->har[2] = t->props[5];
    t->har[3] = sx;
    t->har[4] = t->props[2];
    t->har[5] = sa;
    t->har[6] = sv;
    t->har[7] = hs;
    t->har[8] = hxy;
    t->har[9] = dv;
    t->har[10] = hd;
    t->har[11] = (hx > hy ? hx : hy) > 0 ? (hxy - hxy1) / (hx > hy ? hx : hy) : 0;
    /* Haralick's exp(): entropies in nats, so convert the bit difference. */
    t->har[12] = sqrt(fmax(0, 1 - exp(-2 * M_LN2 * (hxy2 - hxy))));
    {
        /* Q(i,j) = sum_k p(i,k) p(j,k) / (px(i) py(k)) on the non-empty rows:
         * symmetrise as D^1/2 Q D^-1/2 and take the second largest eigenvalue. */
        int idx[16], n = 0;
        double Q[256], ev[16], b1 = -1, b2 = -1;
        for (int i = 0; i < L; i++)
            if (px[i] > 0) idx[n++] = i;
        for (int a = 0; a < n; a++)
            for (int b = 0; b < n; b++) {
                double s = 0;
                for (int k = 0; k < L; k++)
                    if (py[k] > 0) s += p[idx[a]][k] * p[idx[b]][k] / (px[idx[a]] * py[k]);
                Q[a * n + b] = s * sqrt(px[idx[a]]) / sqrt(px[idx[b]]);
            }
        for (int a = 0; a < n; a++) /* exactly symmetric for Jacobi */
            for (int b = a + 1; b < n; b++) Q[a * n + b] = Q[b * n + a] = 0.5 * (Q[a * n + b] + Q[b * n + a]);
        jacobi_eigen(Q, n, ev);
        for (int a = 0; a < n; a++) {
            if (ev[a] > b1) {
                b2 = b1;
                b1 = ev[a];
            } else if (ev[a] > b2) {
                b2 = ev[a];
            }
        }
        t->har[13] = n >= 2 && b2 > 0 ? sqrt(b2) : 0;
    }
}

static void check_against_textbook(const uint32_t *P, int L, const char *name)
{
    textbook_t t;
    double props[PATINA_GLCM_NPROPS], har[PATINA_HARALICK_N];
    char what[64];
    textbook(&t, P, L);
    patina_glcm_props(props, P, L, 1);
    patina_haralick(har, P, L, 1);
    for (int k = 0; k < PATINA_GLCM_NPROPS; k++) {
        snprintf(what, sizeof what, "%s %s", name, patina_glcm_prop_name(k));
        assert_close(props[k], t.props[k], what, k);
    }
    for (int k = 0; k < PATINA_HARALICK_N; k++) {
        snprintf(what, sizeof what, "%s haralick %s", name, patina_haralick_name(k));
        /* mcc goes through two eigen-solvers: 1e-9 */
        if (k == 13) {
            if (!(fabs(har[k] - t.har[k]) <= 1e-9)) fail_msg("%s: %.17g vs %.17g", what, har[k], t.har[k]);
        } else {
            assert_close(har[k], t.har[k], what, k);
        }
    }
}

static void test_textbook(void **state)
{
    /* Hand matrices: symmetric, asymmetric, diagonal, one off-diagonal pair,
     * a row of zeros, a full 16-level random one. */
    static const uint32_t m2[4] = {3, 1, 1, 5};
    static const uint32_t m3[9] = {0, 2, 1, 4, 0, 0, 1, 3, 7};
    static const uint32_t diag[16] = {4, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9};
    static const uint32_t pair[9] = {0, 6, 0, 6, 0, 0, 0, 0, 0};
    static const uint32_t zrow[16] = {1, 2, 0, 3, 0, 0, 0, 0, 5, 1, 0, 2, 0, 4, 0, 7};
    uint32_t r16[256];
    tu_rng_t rng;
    (void)state;
    check_against_textbook(m2, 2, "2x2");
    check_against_textbook(m3, 3, "3x3 asymmetric");
    check_against_textbook(diag, 4, "diagonal");
    check_against_textbook(pair, 3, "pair");
    check_against_textbook(zrow, 4, "zero row");
    tu_rng_seed(&rng, 16);
    for (int rep = 0; rep < 20; rep++) {
        for (int i = 0; i < 256; i++) r16[i] = tu_rng_below(&rng, rep < 10 ? 5 : 1000);
        check_against_textbook(r16, 16, "random 16");
    }
    /* Hand values: the 2x2 matrix [[3,1],[1,5]] / 10. */
    {
        double props[PATINA_GLCM_NPROPS];
        patina_glcm_props(props, m2, 2, 1);
        assert_close(props[0], 0.2, "contrast", 0);
        assert_close(props[2], 0.9, "homogeneity", 2);
        assert_close(props[3], 0.36, "ASM", 3);
        assert_close(props[6], 0.6, "mean", 6);
        assert_close(props[7], 0.24, "variance", 7);
        /* cov = 0.5 - 0.36 = 0.14; correlation = 0.14 / 0.24 */
        assert_close(props[5], 0.14 / 0.24, "correlation", 5);
    }
}

static void test_aggregate_and_distance(void **state)
{
    double f[3 * PATINA_HARALICK_N], out[2 * PATINA_HARALICK_N];
    double v[3][2] = {{1, 10}, {2, 10}, {3, 10}}, mean[2], sd[2];
    (void)state;
    for (int a = 0; a < 3; a++)
        for (int k = 0; k < PATINA_HARALICK_N; k++) f[a * PATINA_HARALICK_N + k] = (a + 1) * (k + 1);
    patina_haralick_aggregate(out, f, 3, 3);
    for (int k = 0; k < PATINA_HARALICK_N; k++) {
        assert_close(out[k], 2.0 * (k + 1), "mean", k);
        assert_close(out[PATINA_HARALICK_N + k], 2.0 * (k + 1), "range", k);
    }
    TU_OK(patina_feature_stats(mean, sd, &v[0][0], 3, 2));
    assert_close(mean[0], 2, "mean", 0);
    assert_close(sd[0], sqrt(2.0 / 3.0), "sd", 0);
    assert_true(sd[1] == 1.0); /* constant feature */
    assert_close(patina_std_l2(v[0], v[2], sd, 2), 2 / sqrt(2.0 / 3.0), "std-l2", 0);
    assert_close(patina_std_l2(v[0], v[2], NULL, 2), 2, "l2", 0);
    assert_int_equal(patina_feature_stats(mean, sd, &v[0][0], 0, 2), PATINA_E_INVALID);
}

/* ------------------------------------------------------------ families */

static void grey_image(patina_image_t *img, const uint8_t *g, int w, int h)
{
    TU_OK(patina_image_init(img, w, h));
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            memset(img->data + (size_t)y * img->stride + 3 * (size_t)x, g[y * w + x], 3);
}

static void test_families(void **state)
{
    patina_extractor_t *ex;
    patina_context_t *ctx;
    patina_image_t imgs[3];
    patina_status st[3];
    tu_rng_t rng;
    (void)state;
    tu_rng_seed(&rng, 7);
    TU_OK(patina_context_new(&ctx, NULL));
    tu_random_image(&imgs[0], 61, 47, 1, &rng);
    tu_random_image(&imgs[1], 1, 1, 0, &rng);
    tu_random_image(&imgs[2], 200, 3, 2, &rng);

    TU_OK(patina_extractor_new(&ex, "glcm"));
    assert_string_equal(patina_extractor_spec(ex),
                        "glcm:levels=32,quant=uniform,distances=1,angles=0,45,90,135,"
                        "offsets=none,symmetric=1,normed=0,mask=none");
    assert_int_equal(patina_extractor_dim(ex), PATINA_GLCM_NPROPS * 4);
    assert_int_equal(patina_extractor_elem(ex), PATINA_ELEM_F64);
    assert_string_equal(patina_extractor_distance_name(ex), "l2");
    assert_true(patina_extractor_has_json(ex));
    patina_extractor_free(ex);

    /* The canonical spec parses back to itself. */
    TU_OK(patina_extractor_new(&ex, "glcm:levels=8,distances=1,2,3,angles=0,90,symmetric=0"));
    {
        patina_extractor_t *ex2;
        char spec[1024];
        snprintf(spec, sizeof spec, "%s", patina_extractor_spec(ex));
        TU_OK(patina_extractor_new(&ex2, spec));
        assert_string_equal(patina_extractor_spec(ex2), spec);
        assert_int_equal(patina_extractor_dim(ex2), PATINA_GLCM_NPROPS * 6);
        patina_extractor_free(ex2);
    }
    {
        /* The family's vector is patina_glcm_props of the reference counts. */
        double out[3][PATINA_GLCM_NPROPS * 6], want[PATINA_GLCM_NPROPS * 6];
        uint32_t counts[6 * 64];
        patina_glcm_offset_t off[6];
        for (int d = 0; d < 3; d++)
            for (int a = 0; a < 2; a++) off[d * 2 + a] = patina_glcm_offset(d + 1, 90.0 * a);
        TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, out, imgs, 3, st));
        for (int i = 0; i < 3; i++) {
            uint8_t *q;
            assert_int_equal(st[i], PATINA_OK);
            TU_OK(glcm_grey_levels(&q, &imgs[i], 8, PATINA_GLCM_QUANT_UNIFORM));
            TU_OK(patina_glcm_counts_ref(counts, q, imgs[i].width, imgs[i].height,
                                         (size_t)imgs[i].width, NULL, 0, 8, off, 6, 0));
            patina_glcm_props(want, counts, 8, 6);
            assert_memory_equal(out[i], want, sizeof want);
            free(q);
        }
    }
    patina_extractor_free(ex);

    /* haralick: dimensions of the three forms, and explicit offsets. */
    TU_OK(patina_extractor_new(&ex, "haralick:levels=16,distances=1,2"));
    assert_int_equal(patina_extractor_dim(ex), 2 * 2 * PATINA_HARALICK_N);
    {
        double out[3][4 * PATINA_HARALICK_N];
        TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, out, imgs, 3, st));
        for (int i = 0; i < 3; i++) assert_int_equal(st[i], PATINA_OK);
        assert_true(out[1][2] == 1.0); /* 1x1: empty matrices, correlation 1 */
        assert_true(patina_extractor_distance(ex, out[0], out[0]) == 0.0);
        assert_true(patina_extractor_distance(ex, out[0], out[2]) > 0.0);
    }
    patina_extractor_free(ex);
    TU_OK(patina_extractor_new(&ex, "haralick:levels=16,distances=1,2,form=offsets"));
    assert_int_equal(patina_extractor_dim(ex), 8 * PATINA_HARALICK_N);
    patina_extractor_free(ex);
    TU_OK(patina_extractor_new(&ex, "haralick:levels=16,distances=1,2,form=both"));
    assert_int_equal(patina_extractor_dim(ex), 12 * PATINA_HARALICK_N);
    patina_extractor_free(ex);
    TU_OK(patina_extractor_new(&ex, "haralick:offsets=0:1,1:0,-2:3"));
    assert_int_equal(patina_extractor_dim(ex), 2 * PATINA_HARALICK_N);
    patina_extractor_free(ex);

    /* Rejections name the problem. */
    assert_int_equal(patina_extractor_new(&ex, "glcm:levels=1"), PATINA_E_INVALID);
    assert_int_equal(patina_extractor_new(&ex, "glcm:levels=257"), PATINA_E_INVALID);
    assert_int_equal(patina_extractor_new(&ex, "glcm:distances=1,x"), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "distances"));
    assert_int_equal(patina_extractor_new(&ex, "glcm:distances=-1"), PATINA_E_INVALID);
    assert_int_equal(patina_extractor_new(&ex, "glcm:offsets=1:"), PATINA_E_INVALID);
    assert_int_equal(patina_extractor_new(&ex, "glcm:offsets=1"), PATINA_E_INVALID);
    assert_int_equal(patina_extractor_new(&ex, "glcm:quant=log"), PATINA_E_INVALID);
    assert_int_equal(patina_extractor_new(&ex, "glcm:distances=1,2,3,4,5,6,7,8,9,angles=0,10,20,30,"
                                               "40,50,60,70"),
                     PATINA_E_LIMIT);
    /* quant=none on a value >= levels fails that image only. */
    TU_OK(patina_extractor_new(&ex, "glcm:levels=4,quant=none"));
    {
        double out[3][PATINA_GLCM_NPROPS * 4];
        TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, out, imgs, 3, st));
        assert_int_equal(st[0], PATINA_E_INVALID);
    }
    patina_extractor_free(ex);
    for (int i = 0; i < 3; i++) patina_image_release(&imgs[i]);
    patina_context_free(ctx);
}

/* A mask file: pairs count only where both pixels are inside. */
static void test_mask(void **state)
{
    const int w = 13, h = 11;
    uint8_t g[13 * 11], m[13 * 11], q[13 * 11];
    char *dir = tu_tempdir("glcm-mask"), path[4096], bad[4096], spec[8192], hdr[64];
    patina_extractor_t *ex;
    patina_context_t *ctx;
    patina_image_t img;
    patina_status st;
    double out[PATINA_GLCM_NPROPS * 4], want[PATINA_GLCM_NPROPS * 4];
    uint32_t counts[4 * 16];
    patina_glcm_offset_t off[4];
    tu_rng_t rng;
    size_t hl;
    (void)state;
    tu_rng_seed(&rng, 11);
    for (int i = 0; i < w * h; i++) {
        g[i] = (uint8_t)tu_rng_below(&rng, 256);
        m[i] = (uint8_t)((i % w) > 3 && (i / w) < 8 ? 255 : 0);
    }
    snprintf(path, sizeof path, "%s/mask.pgm", dir);
    hl = (size_t)snprintf(hdr, sizeof hdr, "P5\n%d %d\n255\n", w, h);
    {
        uint8_t *file = malloc(hl + sizeof m);
        memcpy(file, hdr, hl);
        memcpy(file + hl, m, sizeof m);
        assert_int_equal(tu_write_file(path, file, hl + sizeof m), 0);
        snprintf(bad, sizeof bad, "%s/small.pgm", dir);
        hl = (size_t)snprintf(hdr, sizeof hdr, "P5\n%d %d\n255\n", 2, 2);
        memcpy(file, hdr, hl);
        assert_int_equal(tu_write_file(bad, file, hl + 4), 0);
        free(file);
    }
    grey_image(&img, g, w, h);
    TU_OK(patina_context_new(&ctx, NULL));
    snprintf(spec, sizeof spec, "glcm:levels=4,symmetric=0,mask=%s", path);
    TU_OK(patina_extractor_new(&ex, spec));
    TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, out, &img, 1, &st));
    assert_int_equal(st, PATINA_OK);
    for (int a = 0; a < 4; a++) off[a] = patina_glcm_offset(1, 45.0 * a);
    TU_OK(patina_glcm_quantize(q, g, sizeof g, 4, PATINA_GLCM_QUANT_UNIFORM));
    TU_OK(patina_glcm_counts_ref(counts, q, w, h, (size_t)w, m, (size_t)w, 4, off, 4, 0));
    assert_int_equal(total(counts, 16), 8 * 8);         /* columns 4..12, rows 0..7 */
    assert_int_equal(total(counts + 32, 16), 7 * 9);    /* 90 degrees */
    patina_glcm_props(want, counts, 4, 4);
    assert_memory_equal(out, want, sizeof want);
    patina_extractor_free(ex);
    snprintf(spec, sizeof spec, "glcm:levels=4,mask=%s", bad);
    TU_OK(patina_extractor_new(&ex, spec));
    TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, out, &img, 1, &st));
    assert_int_equal(st, PATINA_E_INVALID);
    patina_extractor_free(ex);
    patina_image_release(&img);
    patina_context_free(ctx);
    tu_remove_tree(dir);
    free(dir);
}

/* The CLI's JSON line for the docstring image. */
static void test_cli_json(void **state)
{
    char *dir = tu_tempdir("glcm-cli"), path[4096], *out = NULL;
    uint8_t file[64];
    size_t hl;
    int rc;
    (void)state;
    hl = (size_t)snprintf((char *)file, sizeof file, "P5\n4 4\n255\n");
    memcpy(file + hl, doc_img, 16);
    snprintf(path, sizeof path, "%s/doc.pgm", dir);
    assert_int_equal(tu_write_file(path, file, hl + 16), 0);
    rc = tu_run(&out, "'%s' extract -f 'glcm:levels=4,quant=none,distances=1,angles=0,45,90,135,"
                      "symmetric=0' --format json '%s'",
                PATINA_CLI, path);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "\"glcm\":[[[[2,2,1,0],[0,2,0,0],[0,0,3,1],[0,0,0,1]],"
                                "[[1,1,3,0],[0,1,1,0],[0,0,0,2],[0,0,0,0]],"
                                "[[3,0,2,0],[0,2,2,0],[0,0,1,2],[0,0,0,0]],"
                                "[[2,0,0,0],[1,1,2,0],[0,0,2,1],[0,0,0,0]]]]"));
    assert_non_null(strstr(out, "\"props\":{\"contrast\":[[0.58333333333333337,"));
    assert_non_null(strstr(out, "\"haralick\":{\"asm\":"));
    assert_int_equal(out[strlen(out) - 1], '\n');
    free(out);
    rc = tu_run(&out, "'%s' extract -f 'glcm:levels=4,quant=none,distances=1,angles=0,"
                      "symmetric=1' --format csv '%s'",
                PATINA_CLI, path);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, ",0.58333333333333337,")); /* contrast first */
    free(out);
    tu_remove_tree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_skimage_docstring),
        cmocka_unit_test(test_offsets),
        cmocka_unit_test(test_quantize),
        cmocka_unit_test(test_degenerate),
        cmocka_unit_test(test_fast_equals_reference),
        cmocka_unit_test(test_textbook),
        cmocka_unit_test(test_aggregate_and_distance),
        cmocka_unit_test(test_families),
        cmocka_unit_test(test_mask),
        cmocka_unit_test(test_cli_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
