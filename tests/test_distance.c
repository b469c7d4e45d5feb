/* The distance table (src/search/distance.c): each distance against its
 * textbook definition written out here, on every element type, degenerate
 * shapes first; Tanimoto against patina_cedd_tanimoto bit for bit; the
 * families' distances resolved through the table. */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "patina/patina.h"
#include "search/distance.h"
#include "testutil.h"

static const patina_elem elems[] = {PATINA_ELEM_U8, PATINA_ELEM_U16, PATINA_ELEM_U32, PATINA_ELEM_F32,
                                    PATINA_ELEM_F64};

/* v (n doubles, small non-negative integers) stored as elements of type e. */
static void store(void *out, patina_elem e, const double *v, size_t n)
{
    for (size_t i = 0; i < n; i++) switch (e) {
        case PATINA_ELEM_U8: ((uint8_t *)out)[i] = (uint8_t)v[i]; break;
        case PATINA_ELEM_U16: ((uint16_t *)out)[i] = (uint16_t)v[i]; break;
        case PATINA_ELEM_U32: ((uint32_t *)out)[i] = (uint32_t)v[i]; break;
        case PATINA_ELEM_F32: ((float *)out)[i] = (float)v[i]; break;
        case PATINA_ELEM_F64: ((double *)out)[i] = v[i]; break;
        }
}

/* Textbook definitions on doubles. */
static double def(pdist_t d, const double *a, const double *b, size_t n, const double *sd)
{
    double s = 0, sa = 0, sb = 0, ab = 0;
    size_t i;
    switch (d) {
    case PDIST_L1:
        for (i = 0; i < n; i++) s += fabs(a[i] - b[i]);
        return s;
    case PDIST_L2:
        for (i = 0; i < n; i++) s += (a[i] - b[i]) * (a[i] - b[i]);
        return sqrt(s);
    case PDIST_STD_L2:
        for (i = 0; i < n; i++) s += pow((a[i] - b[i]) / (sd ? sd[i] : 1.0), 2);
        return sqrt(s);
    case PDIST_CHI2:
        for (i = 0; i < n; i++)
            if (a[i] + b[i] > 0) s += pow(a[i] - b[i], 2) / (a[i] + b[i]);
        return s;
    case PDIST_INTERSECTION:
        for (i = 0; i < n; i++) {
            s += fmin(a[i], b[i]);
            sa += a[i];
            sb += b[i];
        }
        return sa == 0 && sb == 0 ? 0 : 1 - s / fmax(sa, sb);
    case PDIST_HELLINGER:
        for (i = 0; i < n; i++) {
            s += sqrt(a[i] * b[i]);
            sa += a[i];
            sb += b[i];
        }
        if (sa == 0 && sb == 0) return 0;
        if (sa == 0 || sb == 0) return 1;
        return sqrt(fmax(0, 1 - s / sqrt(sa * sb)));
    case PDIST_COSINE:
        for (i = 0; i < n; i++) {
            ab += a[i] * b[i];
            sa += a[i] * a[i];
            sb += b[i] * b[i];
        }
        if (sa == 0 && sb == 0) return 0;
        if (sa == 0 || sb == 0) return 1;
        return 1 - ab / sqrt(sa * sb);
    case PDIST_TANIMOTO: {
        double c1 = 0, c2 = 0, c3 = 0;
        for (i = 0; i < n; i++) {
            sa += a[i];
            sb += b[i];
        }
        if (sa == 0 && sb == 0) return 0;
        if (sa == 0 || sb == 0) return 100;
        for (i = 0; i < n; i++) {
            double p = b[i] / sb, q = a[i] / sa;
            c1 += p * q;
            c2 += q * q;
            c3 += p * p;
        }
        return 100 - 100 * (c1 / (c2 + c3 - c1));
    }
    default: return NAN;
    }
}

static void test_table(void **state)
{
    (void)state;
    for (int d = 0; d < PDIST_COUNT; d++) {
        const pdist_def_t *t = pdist_get((pdist_t)d);
        assert_non_null(t);
        assert_non_null(t->pair);
        assert_int_equal(pdist_find(t->name), d);
    }
    assert_null(pdist_get(PDIST_COUNT));
    assert_int_equal(pdist_find("nope"), -1);
    assert_int_equal(pdist_find(NULL), -1);
}

/* Zero-length vectors and all-zero vectors: the documented values. */
static void test_degenerate(void **state)
{
    double z[4] = {0}, one[4] = {0, 1, 0, 0};
    (void)state;
    for (int d = 0; d < PDIST_COUNT; d++) {
        const pdist_def_t *t = pdist_get((pdist_t)d);
        if (t->record) continue; /* reads a family's records (test_rootsift.c) */
        assert_true(t->pair(PATINA_ELEM_F64, NULL, NULL, 0, NULL) == 0.0);
        assert_true(t->pair(PATINA_ELEM_F64, z, z, 4, NULL) == 0.0);
        assert_true(t->pair(PATINA_ELEM_F64, one, one, 4, NULL) == 0.0);
    }
    assert_true(pdist_get(PDIST_TANIMOTO)->pair(PATINA_ELEM_F64, z, one, 4, NULL) == 100.0);
    assert_true(pdist_get(PDIST_HELLINGER)->pair(PATINA_ELEM_F64, z, one, 4, NULL) == 1.0);
    assert_true(pdist_get(PDIST_COSINE)->pair(PATINA_ELEM_F64, one, z, 4, NULL) == 1.0);
    assert_true(pdist_get(PDIST_INTERSECTION)->pair(PATINA_ELEM_F64, z, one, 4, NULL) == 1.0);
}

/* Random vectors of odd lengths on every element type against the
 * definitions; symmetric where the definition is. */
static void test_definitions(void **state)
{
    static const size_t lens[] = {1, 2, 3, 31, 33, 144, 257};
    tu_rng_t rng;
    (void)state;
    tu_rng_seed(&rng, 12345);
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (int rep = 0; rep < 20; rep++) {
            size_t n = lens[li];
            double a[257], b[257], sd[257];
            for (size_t i = 0; i < n; i++) {
                a[i] = (double)(tu_rng_next(&rng) % 8);
                b[i] = (double)(tu_rng_next(&rng) % 8);
                sd[i] = 0.5 + (double)(tu_rng_next(&rng) % 5);
            }
            for (size_t ei = 0; ei < sizeof elems / sizeof elems[0]; ei++) {
                patina_elem e = elems[ei];
                unsigned char va[257 * 8], vb[257 * 8];
                store(va, e, a, n);
                store(vb, e, b, n);
                for (int d = 0; d < PDIST_COUNT; d++) {
                    const double *s = d == PDIST_STD_L2 ? sd : NULL;
                    if (pdist_get((pdist_t)d)->record) continue;
                    double got = pdist_get((pdist_t)d)->pair(e, va, vb, n, s), want = def((pdist_t)d, a, b, n, s);
                    if (!(fabs(got - want) <= 1e-9 * (1 + fabs(want))))
                        fail_msg("%s n=%zu elem %d: %.17g, definition %.17g", pdist_get((pdist_t)d)->name, n,
                                 (int)e, got, want);
                    if (d != PDIST_TANIMOTO) /* symmetric */
                        assert_true(got == pdist_get((pdist_t)d)->pair(e, vb, va, n, s));
                }
            }
        }
}

/* Tanimoto on u8 x 144 is LIRE's, bit for bit. */
static void test_tanimoto_cedd(void **state)
{
    tu_rng_t rng;
    (void)state;
    tu_rng_seed(&rng, 99);
    for (int rep = 0; rep < 2000; rep++) {
        uint8_t a[PATINA_CEDD_DIM], b[PATINA_CEDD_DIM];
        int sparse = rep % 3;
        for (int i = 0; i < PATINA_CEDD_DIM; i++) {
            a[i] = (uint8_t)(sparse && tu_rng_next(&rng) % 4 ? 0 : tu_rng_next(&rng) % 8);
            b[i] = (uint8_t)(sparse == 2 && tu_rng_next(&rng) % 4 ? 0 : tu_rng_next(&rng) % 8);
        }
        double x = pdist_get(PDIST_TANIMOTO)->pair(PATINA_ELEM_U8, a, b, PATINA_CEDD_DIM, NULL);
        double y = patina_cedd_tanimoto(a, b);
        assert_memory_equal(&x, &y, sizeof x);
    }
}

/* Families name their distance through the table. */
static void test_families(void **state)
{
    static const struct {
        const char *spec, *distance;
    } cases[] = {{"cedd", "tanimoto"},
                 {"lbp8", "chi2"},
                 {"lbp8:distance=l1", "l1"},
                 {"tlbap:distance=intersection", "intersection"},
                 {"lanadp:distance=hellinger", "hellinger"},
                 {"glcm", "l2"},
                 {"haralick", "std_l2"},
                 {"rootsift", "rootsift_ratio"},
                 {"signature", "sqfd"}};
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        patina_extractor_t *ex;
        TU_OK(patina_extractor_new(&ex, cases[i].spec));
        assert_string_equal(patina_extractor_distance_name(ex), cases[i].distance);
        assert_int_not_equal(pdist_find(patina_extractor_distance_name(ex)), -1);
        patina_extractor_free(ex);
    }
}

/* Element i of a random row of type e. kind 0: zero; 1: small counts
 * (40% zeros, 0..8: ties, chi2's zero pairs); 2: the type's range (u16 up
 * to 65535, u32 across 2^31, f32 / f64 of mixed signs and scales, -0.0,
 * now and then an infinity). */
static void put_elem(uint8_t *row, patina_elem e, size_t i, int kind, tu_rng_t *r)
{
    const uint32_t small = tu_rng_below(r, 100) < 40 ? 0 : tu_rng_below(r, 9);
    double f = kind == 1 ? (double)small : 0.0;
    if (kind == 2) {
        const uint32_t pick = tu_rng_below(r, 8);
        f = pick == 0 ? 0.0 : pick == 1 ? -0.0 : ((double)tu_rng_next(r) / 18446744073709551616.0 - 0.25) *
                                                   (pick < 5 ? 1.0 : pick == 5 ? 1e-7 : 1e9);
    }
    if (kind == 2 && tu_rng_below(r, 40) == 0) f = tu_rng_below(r, 2) ? HUGE_VAL : -HUGE_VAL; /* f32, f64 */
    switch (e) {
    case PATINA_ELEM_U8: row[i] = kind == 2 ? (uint8_t)tu_rng_below(r, 256) : (uint8_t)f; break;
    case PATINA_ELEM_U16: ((uint16_t *)row)[i] = kind == 2 ? (uint16_t)tu_rng_below(r, 65536) : (uint16_t)(f * 300); break;
    case PATINA_ELEM_U32: ((uint32_t *)row)[i] = kind == 2 ? (uint32_t)tu_rng_next(r) : (uint32_t)f * 70000u; break;
    case PATINA_ELEM_F32: ((float *)row)[i] = kind == 2 ? (float)f : (float)f / 7.0f; break;
    case PATINA_ELEM_F64: ((double *)row)[i] = kind == 2 ? f : f / 3.0; break;
    }
}

/* Two results agree: the same bits, or both NaN (negative f64 elements
 * give Hellinger and Tanimoto NaNs, whose payload the search ignores: a
 * NaN sorts after every number). */
static int same_double(double x, double y) { return memcmp(&x, &y, sizeof x) == 0 || (isnan(x) && isnan(y)); }

/* pdist_block equals the definition pair by pair, bit for bit, on the
 * AVX2 path (where this CPU has it) and on the forced portable path:
 * every distance and element type, lengths and row counts around the
 * groups of four, blocks of 1 to 9 queries, zero rows and queries,
 * repeated rows (ties), a query equal to a row, std_l2 with and without
 * sigma, an output stride wider than the rows; and with thresholds, where
 * a row may get +inf only if its distance is above the query's. */
static void test_block(void **state)
{
    static const size_t lens[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 28, 33, 40, 64, 144, 256};
    static const size_t cnts[] = {1, 2, 3, 4, 5, 7, 8, 9, 13};
    static const size_t nqs[] = {1, 2, 3, 4, 5, 8, 9};
    tu_rng_t r;
    size_t bad = 0, runs = 0, dropped = 0;
    int path;
    (void)state;
    printf("  AVX2 kernels on this CPU: %s\n", pdist_simd() ? "yes" : "no (the portable path twice)");
    tu_rng_seed(&r, 2718);
    for (int d = 0; d < PDIST_COUNT; d++) {
        const pdist_def_t *def = pdist_get((pdist_t)d);
        if (def->record) continue;
        for (size_t ei = 0; ei < sizeof elems / sizeof *elems; ei++)
            for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
                const patina_elem e = elems[ei];
                const size_t n = lens[li], cnt = cnts[tu_rng_below(&r, sizeof cnts / sizeof *cnts)];
                const size_t nq = nqs[tu_rng_below(&r, sizeof nqs / sizeof *nqs)], ld = cnt + 3;
                const size_t bytes = n * patina_elem_size(e);
                const int kind = (int)tu_rng_below(&r, 3) == 0 ? 2 : 1; /* a third of the cases: the type's range */
                uint8_t *rows = calloc(cnt, bytes), *q = calloc(nq, bytes);
                double *out[2], *sd = malloc(n * sizeof *sd), *thr = malloc(nq * sizeof *thr);
                double *outf = malloc(nq * ld * sizeof *outf);
                void *scratch = malloc(pdist_block_scratch(nq, n));
                out[0] = malloc(nq * ld * sizeof(double));
                out[1] = malloc(nq * ld * sizeof(double));
                for (size_t i = 0; i < n; i++) sd[i] = 0.5 + (double)tu_rng_below(&r, 100) / 10.0;
                for (size_t k = 0; k < cnt; k++) {
                    if (k == 1) continue; /* a zero row */
                    if (k >= 3 && tu_rng_below(&r, 4) == 0) { /* a tie with row 0 */
                        memcpy(rows + k * bytes, rows, bytes);
                        continue;
                    }
                    for (size_t i = 0; i < n; i++) put_elem(rows + k * bytes, e, i, kind, &r);
                }
                if (cnt >= 3 && (e == PATINA_ELEM_F32 || e == PATINA_ELEM_F64)) {
                    /* an infinity in row 2 where query 0 is zero: 0 * inf and
                     * inf / inf are NaNs the definitions carry */
                    if (e == PATINA_ELEM_F32) ((float *)(rows + 2 * bytes))[n / 2] = HUGE_VALF;
                    else ((double *)(rows + 2 * bytes))[n / 2] = HUGE_VAL;
                }
                for (size_t k = 0; k < nq; k++) {
                    if (k == 1) continue; /* a zero query */
                    if (k == 2) { /* a query equal to a row */
                        memcpy(q + k * bytes, rows + (cnt - 1) * bytes, bytes);
                        continue;
                    }
                    for (size_t i = 0; i < n; i++) put_elem(q + k * bytes, e, i, kind, &r);
                    if (k == 0) memset(q + (n / 2) * patina_elem_size(e), 0, patina_elem_size(e));
                }
                for (int withsd = 0; withsd < 2; withsd++) {
                    const double *s = withsd ? sd : NULL;
                    for (path = 0; path < 2; path++) { /* 0: AVX2 where present, 1: portable */
                        pdist_force_portable(path);
                        for (size_t k = 0; k < nq * ld; k++) out[path][k] = -1.0;
                        pdist_block((pdist_t)d, e, q, nq, rows, bytes, cnt, n, s, NULL, scratch, out[path], ld);
                    }
                    pdist_force_portable(0);
                    /* with thresholds (the AVX2 filters of std_l2 and chi2): a row's
                     * distance exactly, or +inf where the definition is above the
                     * threshold. Thresholds: a row's distance (its ties must stay),
                     * 0, +inf, just below a row's distance, NaN. */
                    for (size_t a = 0; a < nq; a++) {
                        const double x = def->pair(e, q + a * bytes, rows + tu_rng_below(&r, (uint32_t)cnt) * bytes, n, s);
                        thr[a] = a % 5 == 0 ? x : a % 5 == 1 ? 0.0 : a % 5 == 2 ? HUGE_VAL : a % 5 == 3 ? x * 0.999 : NAN;
                    }
                    pdist_block((pdist_t)d, e, q, nq, rows, bytes, cnt, n, s, thr, scratch, outf, ld);
                    for (size_t a = 0; a < nq; a++)
                        for (size_t k = 0; k < cnt; k++) {
                            const double want = def->pair(e, q + a * bytes, rows + k * bytes, n, s), got = outf[a * ld + k];
                            if (same_double(want, got) || (isinf(got) && got > 0 && !(want <= thr[a]))) {
                                dropped += !same_double(want, got);
                                continue;
                            }
                            if (bad < 8)
                                printf("  %s elem %d n %zu filtered: query %zu row %zu: %.17g, definition %.17g, threshold %.17g\n",
                                       def->name, (int)e, n, a, k, got, want, thr[a]);
                            bad++;
                        }
                    for (size_t a = 0; a < nq; a++)
                        for (size_t k = 0; k < cnt; k++) {
                            const double want = def->pair(e, q + a * bytes, rows + k * bytes, n, s);
                            for (path = 0; path < 2; path++)
                                if (!same_double(want, out[path][a * ld + k])) {
                                    if (bad < 8)
                                        printf("  %s elem %d n %zu %s: query %zu row %zu: %.17g, definition %.17g\n",
                                               def->name, (int)e, n, path ? "portable" : "simd", a, k,
                                               out[path][a * ld + k], want);
                                    bad++;
                                }
                            runs++;
                        }
                    for (size_t a = 0; a < nq; a++) /* the stride's gaps are left alone */
                        for (size_t k = cnt; k < ld; k++) bad += out[0][a * ld + k] != -1.0 || out[1][a * ld + k] != -1.0;
                }
                free(rows);
                free(q);
                free(out[0]);
                free(out[1]);
                free(sd);
                free(thr);
                free(outf);
                free(scratch);
            }
    }
    printf("  %zu pairs on each path, %zu differing; with thresholds %zu left out\n", runs, bad, dropped);
    assert_int_equal(bad, 0);
}

/* The AVX2 filters of Hellinger (blocks of 8 queries or more) and chi2 on
 * non-negative histograms near one another, where they have to decide: at a
 * threshold equal to a row's own distance the row keeps it, bit for bit
 * (its ties must stay); one ulp below, or at 0.9 of it, +inf is allowed;
 * and each filter must leave out rows, or it filters nothing. Element types
 * u8 (chi2), u32, f32, f64; lengths 1 to 256; zero elements (chi2's
 * zero-query terms); u32 counts above 2^24; f64 magnitudes from 1e-200 to
 * 1e200 in some cases (Hellinger: products that underflow or are large;
 * chi2: outside its float domain, so the definition runs), and for chi2 a
 * negative element now and then (outside its domain too). Without AVX2
 * the portable path ignores thresholds: skipped. */
static void filter_case(pdist_t dist, const patina_elem *types, size_t ntypes, size_t *counts)
{
    static const size_t lens[] = {1, 3, 8, 28, 59, 144, 256};
    enum { NQ = 8, CNT = 5 };
    const pdist_def_t *def = pdist_get(dist);
    tu_rng_t r;
    tu_rng_seed(&r, 1618 + (uint64_t)dist);
    for (int it = 0; it < 300; it++) {
        const patina_elem e = types[(size_t)it % ntypes];
        const size_t n = lens[tu_rng_below(&r, sizeof lens / sizeof *lens)], es = patina_elem_size(e);
        const int wide = e == PATINA_ELEM_F64 && it % 4 == 3; /* magnitudes from 1e-200 to 1e200 */
        const int big = e == PATINA_ELEM_U32 && it % 2 == 1; /* counts above 2^24 */
        uint8_t *q = calloc(NQ, n * es), *rows = calloc(CNT, n * es);
        void *scratch = malloc(pdist_block_scratch(NQ, n));
        double out[NQ * CNT], want[NQ * CNT], thr[NQ];
        for (size_t i = 0; i < n; i++) {
            const double base = (double)(tu_rng_below(&r, 1000) + 1) *
                                (wide ? pow(10.0, (double)tu_rng_below(&r, 400) - 200.0) : big ? 1e5 : 1.0);
            for (size_t k = 0; k < NQ + CNT; k++) { /* queries and rows near one another: +-3% per element */
                double v = tu_rng_below(&r, 10) == 0 ? 0.0 : base * (0.97 + 0.06 * (double)tu_rng_below(&r, 1000) / 1000.0);
                uint8_t *dst = k < NQ ? q + k * n * es : rows + (k - NQ) * n * es;
                if (dist == PDIST_CHI2 && e == PATINA_ELEM_F64 && tu_rng_below(&r, 500) == 0) v = -v;
                if (e == PATINA_ELEM_U8) dst[i] = (uint8_t)(v / 4.0);
                else if (e == PATINA_ELEM_U32) ((uint32_t *)dst)[i] = (uint32_t)v;
                else if (e == PATINA_ELEM_F32) ((float *)dst)[i] = (float)(v / 1000.0);
                else ((double *)dst)[i] = v;
            }
        }
        for (size_t a = 0; a < NQ; a++)
            for (size_t k = 0; k < CNT; k++) want[a * CNT + k] = def->pair(e, q + a * n * es, rows + k * n * es, n, NULL);
        for (int mode = 0; mode < 3; mode++) {
            for (size_t a = 0; a < NQ; a++) {
                const double x = want[a * CNT + (a + (size_t)it) % CNT];
                thr[a] = mode == 0 ? x : mode == 1 ? nextafter(x, -1.0) : 0.9 * x;
            }
            pdist_block(dist, e, q, NQ, rows, n * es, CNT, n, NULL, thr, scratch, out, CNT);
            for (size_t a = 0; a < NQ; a++)
                for (size_t k = 0; k < CNT; k++) {
                    const double got = out[a * CNT + k], w = want[a * CNT + k];
                    counts[1] += w > thr[a];
                    if (same_double(got, w)) continue;
                    if (isinf(got) && got > 0 && w > thr[a]) {
                        counts[2]++;
                        continue;
                    }
                    if (counts[3] < 8)
                        printf("  %s elem %d n %zu mode %d query %zu row %zu: %.17g, definition %.17g, "
                               "threshold %.17g\n", def->name, (int)e, n, mode, a, k, got, w, thr[a]);
                    counts[3]++;
                }
            counts[0]++;
        }
        free(q);
        free(rows);
        free(scratch);
    }
}

static void test_filters(void **state)
{
    static const patina_elem hell[] = {PATINA_ELEM_U32, PATINA_ELEM_F32, PATINA_ELEM_F64};
    static const patina_elem chi[] = {PATINA_ELEM_U8, PATINA_ELEM_U32, PATINA_ELEM_F32, PATINA_ELEM_F64};
    (void)state;
    if (!pdist_simd()) {
        printf("  skipped: no AVX2 on this CPU (the portable path has no filter)\n");
        return;
    }
    for (int f = 0; f < 2; f++) {
        size_t c[4] = {0, 0, 0, 0}; /* blocks, rows farther than the threshold, left out, wrong */
        filter_case(f ? PDIST_CHI2 : PDIST_HELLINGER, f ? chi : hell, f ? 4 : 3, c);
        printf("  %s: %zu blocks, %zu rows farther than the threshold, %zu of them left out, %zu wrong\n",
               f ? "chi2" : "hellinger", c[0], c[1], c[2], c[3]);
        assert_int_equal(c[3], 0);
        assert_true(c[2] > c[1] / 4); /* the filter works, not only holds */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_degenerate),
        cmocka_unit_test(test_definitions),
        cmocka_unit_test(test_tanimoto_cedd),
        cmocka_unit_test(test_families),
        cmocka_unit_test(test_block),
        cmocka_unit_test(test_filters),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
