/* Pivot tables for SQFD (include/patina/pivots.h): the bounds are lower
 * bounds of the exact distance on random pairs (also where the sum cancels,
 * at small alpha, and for near-duplicates); filtered k-NN and range search
 * return exactly the scan's hits (patina_index_knn / _range: the same ids
 * and the same doubles, ties by id) on many random clustered collections
 * with duplicates, for every bound, both selections and several pivot
 * counts and thread counts; the filter does prune; bad input is refused
 * with a message; in-memory put/remove; persistence (save, load, rows of
 * records added, changed and removed since, a removed pivot, a damaged
 * blob); the CLI (index --pivots, search with and without the table);
 * searches in threads during puts and removes (each answer is the table's
 * with or without the whole batch). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "features/signature.h"
#include "search/pivots.h"
#include "testutil.h"

#define SPEC "signature:k=8"

static patina_extractor_t *ex_new(const char *spec)
{
    patina_extractor_t *ex = NULL;
    TU_OK(patina_extractor_new(&ex, spec));
    return ex;
}

static double uni(tu_rng_t *r) { return (double)tu_rng_below(r, 1u << 30) / (double)(1u << 30); }

/* A clustered random collection of n records of ex (K rows each): C
 * centres; each record a centre with some rows dropped and small noise,
 * a fifth of them exact copies of an earlier record. */
static float *make_records(const patina_extractor_t *ex, size_t n, size_t C, double noise, tu_rng_t *r)
{
    const size_t dim = patina_extractor_dim(ex), K = (dim - 8) / 8;
    float *recs = calloc(n ? n : 1, dim * sizeof *recs), *centres = calloc(C * K * 8, sizeof *centres), rows[8 * 1024];
    size_t *ccount = calloc(C, sizeof *ccount);
    assert_non_null(recs);
    for (size_t c = 0; c < C; c++) {
        ccount[c] = 1 + tu_rng_below(r, (uint32_t)K);
        for (size_t i = 0; i < ccount[c]; i++) {
            centres[(c * K + i) * 8] = (float)(0.05 + uni(r) / (double)ccount[c]);
            for (int k = 1; k < 8; k++) centres[(c * K + i) * 8 + k] = (float)uni(r);
        }
    }
    for (size_t o = 0; o < n; o++) {
        size_t c = tu_rng_below(r, (uint32_t)C), m = 0;
        if (o > 0 && tu_rng_below(r, 5) == 0) {
            memcpy(recs + o * dim, recs + tu_rng_below(r, (uint32_t)o) * dim, dim * sizeof *recs);
            continue;
        }
        for (size_t i = 0; i < ccount[c]; i++) {
            if (ccount[c] > 1 && tu_rng_below(r, 6) == 0) continue;
            for (int k = 0; k < 8; k++) {
                double v = centres[(c * K + i) * 8 + k] + noise * (uni(r) - 0.5);
                rows[m * 8 + k] = (float)(k == 0 && v < 0.001 ? 0.001 : v);
            }
            m++;
        }
        if (m == 0) {
            memcpy(rows, centres + c * K * 8, 8 * sizeof *rows);
            m = 1;
        }
        TU_OK(patina_signature_pack(ex, recs + o * dim, rows, m));
    }
    free(centres);
    free(ccount);
    return recs;
}

static uint64_t *make_ids(size_t n, tu_rng_t *r)
{
    uint64_t *ids = malloc((n ? n : 1) * sizeof *ids);
    /* distinct, not in order: 7 * i + 3 permuted */
    for (size_t i = 0; i < n; i++) ids[i] = 7 * (uint64_t)i + 3;
    for (size_t i = n; i > 1; i--) {
        size_t j = tu_rng_below(r, (uint32_t)i);
        uint64_t t = ids[i - 1];
        ids[i - 1] = ids[j];
        ids[j] = t;
    }
    return ids;
}

/* Long double SQFD of two records (the paper's concatenated form). */
static long double ref_sqfd(const float *q, const float *o)
{
    const size_t nq = (size_t)q[0], no = (size_t)o[0];
    const long double alpha = q[2];
    const int form = (int)q[3];
    long double s = 0.0L;
    for (size_t i = 0; i < nq + no; i++)
        for (size_t j = 0; j < nq + no; j++) {
            const float *ri = i < nq ? q + 8 + 8 * i : o + 8 + 8 * (i - nq);
            const float *rj = j < nq ? q + 8 + 8 * j : o + 8 + 8 * (j - nq);
            const long double ui = i < nq ? ri[0] : -(long double)ri[0], uj = j < nq ? rj[0] : -(long double)rj[0];
            long double d2 = 0.0L;
            for (int k = 1; k < 8; k++) d2 += ((long double)ri[k] - rj[k]) * ((long double)ri[k] - rj[k]);
            s += ui * uj * (form == 0 ? expl(-alpha * d2) : 1.0L / (alpha + sqrtl(d2)));
        }
    return s > 0 ? sqrtl(s) : 0.0L;
}

static void compare_knn(const patina_hit_t *a, size_t na, const patina_hit_t *b, size_t nb, const char *what)
{
    if (na != nb) fail_msg("%s: %zu hits, the scan %zu", what, na, nb);
    for (size_t i = 0; i < na; i++)
        if (a[i].id != b[i].id || memcmp(&a[i].distance, &b[i].distance, sizeof(double)) != 0)
            fail_msg("%s: hit %zu is (%llu, %.17g), the scan's (%llu, %.17g)", what, i, (unsigned long long)a[i].id,
                     a[i].distance, (unsigned long long)b[i].id, b[i].distance);
}

/* ---------------------------------------------------------------- bounds */

static void test_bounds(void **state)
{
    static const char *const specs[] = {"signature:k=8",           "signature:k=8,alpha=0.01",
                                        "signature:k=8,alpha=3",   "signature:k=8,form=heuristic",
                                        "signature:k=32,alpha=0.2", "signature:k=8,form=heuristic,alpha=0.05"};
    tu_rng_t rng;
    size_t checked = 0, positive = 0;
    (void)state;
    tu_rng_seed(&rng, 11);
    for (size_t s = 0; s < sizeof specs / sizeof *specs; s++) {
        patina_extractor_t *ex = ex_new(specs[s]);
        const size_t dim = patina_extractor_dim(ex);
        for (int trial = 0; trial < 6; trial++) {
            const size_t n = 20 + tu_rng_below(&rng, 60), P = 1 + tu_rng_below(&rng, 8);
            /* noise 1e-6: near-duplicates, where the sum cancels most */
            const double noise = trial % 3 == 0 ? 1e-6 : trial % 3 == 1 ? 0.02 : 0.5;
            float *recs = make_records(ex, n, 1 + tu_rng_below(&rng, 5), noise, &rng);
            float *qs = make_records(ex, 8, 3, noise, &rng);
            uint64_t *ids = make_ids(n, &rng);
            patina_pivot_opts_t o;
            patina_pivot_index_t *pi = NULL;
            patina_pivot_opts_init(&o);
            o.pivots = P;
            o.select = trial & 1 ? PATINA_PIVOTS_RANDOM : PATINA_PIVOTS_FARTHEST;
            o.seed = (uint64_t)trial;
            TU_OK(patina_pivot_index_new(&pi, NULL, ex, ids, recs, n, &o));
            for (size_t qi = 0; qi < 8 + n; qi++) {
                /* the queries, then every row itself as a query */
                const float *q = qi < 8 ? qs + qi * dim : recs + (qi - 8) * dim;
                for (size_t r = 0; r < n; r++) {
                    const uint64_t id = patina__pivot_row_id(pi, r);
                    size_t orig = 0;
                    double m, p, eps, R, d;
                    long double ref;
                    while (ids[orig] != id) orig++;
                    d = sig_sqfd(q, recs + orig * dim, dim);
                    ref = ref_sqfd(q, recs + orig * dim);
                    patina__pivot_bounds(pi, q, r, d, &m, &p, &eps, &R);
                    /* lower bounds of the exact distance (the long double
                     * one is within 1e-7 of it, far below eps) ... */
                    if ((long double)m > ref + 1e-7L || (long double)p > ref + 1e-7L)
                        fail_msg("%s: bound metric %.17g ptolemaic %.17g > SQFD %.17Lg (computed %.17g, eps %g)",
                                 specs[s], m, p, ref, d, eps);
                    /* ... and never above the pruning radius at the computed distance */
                    if (m > R || p > R)
                        fail_msg("%s: bound %.17g / %.17g exceeds the pruning radius %.17g of d = %.17g", specs[s],
                                 m, p, R, d);
                    assert_true(eps > 0 && eps < 1e-4);
                    checked++;
                    positive += m > 0 || p > 0;
                }
            }
            patina_pivot_index_free(pi);
            free(recs);
            free(qs);
            free(ids);
        }
        patina_extractor_free(ex);
    }
    /* the bounds are not all trivial */
    assert_true(positive > checked / 4);
}

/* ------------------------------------------------------ search = the scan */

static void check_collection(patina_context_t *ctx, const patina_extractor_t *ex, size_t n, size_t P, tu_rng_t *rng,
                             size_t *pruned_total)
{
    const size_t dim = patina_extractor_dim(ex), nq = 1 + tu_rng_below(rng, 6);
    const double noise = tu_rng_below(rng, 2) ? 0.01 : 0.3;
    float *recs = make_records(ex, n, 1 + tu_rng_below(rng, 6), noise, rng);
    float *qs = make_records(ex, nq, 3, noise, rng);
    uint64_t *ids = make_ids(n, rng);
    patina_index_t *idx = NULL;
    patina_pivot_index_t *pi = NULL;
    patina_pivot_opts_t o;
    const size_t ks[] = {1, 2, 5, n, n + 3};
    /* some queries are rows of the collection (ties at 0 with their copies) */
    for (size_t q = 0; q < nq; q++)
        if (tu_rng_below(rng, 2)) memcpy(qs + q * dim, recs + tu_rng_below(rng, (uint32_t)n) * dim, dim * sizeof *qs);
    TU_OK(patina_index_new(&idx, ex, ids, recs, n));
    patina_pivot_opts_init(&o);
    o.pivots = P;
    o.select = tu_rng_below(rng, 2) ? PATINA_PIVOTS_RANDOM : PATINA_PIVOTS_FARTHEST;
    o.seed = tu_rng_next(rng);
    TU_OK(patina_pivot_index_new(&pi, ctx, ex, ids, recs, n, &o));
    assert_int_equal(patina_pivot_index_size(pi), n);
    assert_int_equal(patina_pivot_index_pivots(pi), P);
    for (int b = 0; b < 3; b++) {
        patina_pivot_search_opts_t so;
        patina_search_opts_t io;
        patina_search_stats_t st;
        char what[160];
        patina_pivot_search_opts_init(&so);
        so.bound = (patina_pivot_bound)b;
        so.stats = &st;
        patina_search_opts_init(&io);
        io.device = PATINA_DEVICE_CPU;
        for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
            const size_t k = ks[ki];
            patina_hit_t *h1 = malloc(nq * k * sizeof *h1), *h2 = malloc(nq * k * sizeof *h2);
            size_t c1[8], c2[8];
            TU_OK(patina_pivot_index_knn(ctx, pi, qs, nq, k, &so, h1, c1));
            TU_OK(patina_index_knn(ctx, idx, qs, nq, k, &io, h2, c2));
            assert_int_equal(st.cpu, nq);
            assert_int_equal(st.pruned + st.computed, nq * n);
            assert_int_equal(st.pivot_dists, nq * P);
            if (b == PATINA_BOUND_NONE) assert_int_equal(st.computed, nq * n);
            *pruned_total += st.pruned;
            for (size_t q = 0; q < nq; q++) {
                snprintf(what, sizeof what, "n %zu P %zu bound %d k %zu query %zu", n, P, b, k, q);
                compare_knn(h1 + q * k, c1[q], h2 + q * k, c2[q], what);
                for (size_t i = c1[q]; i < k; i++) assert_true(h1[q * k + i].id == 0 && isinf(h1[q * k + i].distance));
            }
            /* PATINA_PIVOT_AUTO: the same hits (without a GPU, or under 256
             * rows, the CPU's filter answers: every query on the CPU) */
            so.strategy = PATINA_PIVOT_AUTO;
            TU_OK(patina_pivot_index_knn(ctx, pi, qs, nq, k, &so, h1, c1));
            if (patina_gpu_count() == 0 || n < PATINA_PIVOT_AUTO_GPU_ROWS) assert_int_equal(st.cpu, nq);
            for (size_t q = 0; q < nq; q++) {
                snprintf(what, sizeof what, "auto n %zu P %zu bound %d k %zu query %zu", n, P, b, k, q);
                compare_knn(h1 + q * k, c1[q], h2 + q * k, c2[q], what);
            }
            so.strategy = PATINA_PIVOT_CPU;
            free(h1);
            free(h2);
        }
        /* range: radii around the distances that occur, 0 and beyond all */
        for (int ri = 0; ri < 5; ri++) {
            patina_hit_t *r1[8], *r2[8];
            size_t c1[8], c2[8];
            double radius = ri == 0 ? 0.0 : ri == 4 ? 1e9 : sig_sqfd(qs, recs + tu_rng_below(rng, (uint32_t)n) * dim, dim);
            so.max_hits = ri == 3 ? 3 : 0;
            io.max_hits = so.max_hits;
            so.strategy = ri % 2 ? PATINA_PIVOT_AUTO : PATINA_PIVOT_CPU; /* the same hits either way */
            TU_OK(patina_pivot_index_range(ctx, pi, qs, nq, radius, &so, r1, c1));
            so.strategy = PATINA_PIVOT_CPU;
            TU_OK(patina_index_range(ctx, idx, qs, nq, radius, &io, r2, c2));
            *pruned_total += st.pruned;
            for (size_t q = 0; q < nq; q++) {
                snprintf(what, sizeof what, "range n %zu P %zu bound %d r %.17g query %zu", n, P, b, radius, q);
                compare_knn(r1[q], c1[q], r2[q], c2[q], what);
                free(r1[q]);
                free(r2[q]);
            }
        }
    }
    patina_pivot_index_free(pi);
    patina_index_free(idx);
    free(recs);
    free(qs);
    free(ids);
}

static void test_exact(void **state)
{
    static const char *const specs[] = {"signature:k=8", "signature:k=8,alpha=0.01", "signature:k=8,form=heuristic",
                                        "signature:k=16,alpha=3"};
    patina_context_t *ctx[3] = {NULL, NULL, NULL};
    patina_context_opts_t co;
    tu_rng_t rng;
    size_t pruned = 0;
    (void)state;
    tu_rng_seed(&rng, 5);
    patina_context_opts_init(&co);
    co.threads = 1;
    TU_OK(patina_context_new(&ctx[1], &co));
    co.threads = 4;
    TU_OK(patina_context_new(&ctx[2], &co));
    for (int round = 0; round < 40; round++) {
        patina_extractor_t *ex = ex_new(specs[round % 4]);
        const size_t n = round < 4 ? 1 + (size_t)round : 5 + tu_rng_below(&rng, round < 36 ? 150 : 3000);
        const size_t P = 1 + tu_rng_below(&rng, (uint32_t)(n < 12 ? n : 12));
        check_collection(ctx[round % 3], ex, n, P, &rng, &pruned);
        patina_extractor_free(ex);
    }
    /* the filter does skip distances on these clustered collections */
    assert_true(pruned > 0);
    patina_context_free(ctx[1]);
    patina_context_free(ctx[2]);
}

/* ------------------------------------------------------------ bad input */

static void test_bad_input(void **state)
{
    patina_extractor_t *ex = ex_new(SPEC), *cedd = ex_new("cedd"), *minus = ex_new("signature:k=8,form=minus");
    const size_t dim = patina_extractor_dim(ex);
    tu_rng_t rng;
    float *recs;
    uint64_t *ids;
    patina_pivot_index_t *pi = NULL;
    patina_pivot_opts_t o;
    patina_hit_t h[4];
    size_t c[1];
    (void)state;
    tu_rng_seed(&rng, 3);
    recs = make_records(ex, 10, 2, 0.1, &rng);
    ids = make_ids(10, &rng);
    patina_pivot_opts_init(&o);
    assert_int_equal(o.pivots, 32);
    o.pivots = 11;
    assert_int_equal(patina_pivot_index_new(&pi, NULL, ex, ids, recs, 10, &o), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "11 pivots asked for, but the collection has 10 rows"));
    o.pivots = 0;
    assert_int_equal(patina_pivot_index_new(&pi, NULL, ex, ids, recs, 10, &o), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "0 pivots"));
    o.pivots = PATINA_PIVOTS_MAX + 1;
    assert_int_equal(patina_pivot_index_new(&pi, NULL, ex, ids, recs, 10, &o), PATINA_E_LIMIT);
    o.pivots = 2;
    assert_int_equal(patina_pivot_index_new(&pi, NULL, ex, ids, recs, 0, &o), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "empty collection"));
    assert_int_equal(patina_pivot_index_new(&pi, NULL, cedd, ids, recs, 10, &o), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "for SQFD on signatures"));
    assert_int_equal(patina_pivot_index_new(&pi, NULL, minus, ids, recs, 10, &o), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "not a metric"));
    ids[3] = ids[4];
    assert_int_equal(patina_pivot_index_new(&pi, NULL, ex, ids, recs, 10, &o), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "appears twice"));
    ids[3] = 1000;
    recs[5 * dim + 8] = NAN;
    assert_int_equal(patina_pivot_index_new(&pi, NULL, ex, ids, recs, 10, &o), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "row 5"));
    recs[5 * dim + 8] = 0.5f;
    assert_null(pi);
    TU_OK(patina_pivot_index_new(&pi, NULL, ex, ids, recs, 10, &o));
    /* a bad query, k = 0, a bad radius */
    {
        float *bad = malloc(dim * sizeof *bad);
        patina_hit_t *rh[1];
        memcpy(bad, recs, dim * sizeof *bad);
        bad[0] = 0;
        assert_int_equal(patina_pivot_index_knn(NULL, pi, bad, 1, 4, NULL, h, c), PATINA_E_INVALID);
        assert_non_null(strstr(patina_last_error(), "query 0: empty signature"));
        assert_int_equal(patina_pivot_index_knn(NULL, pi, recs, 1, 0, NULL, h, c), PATINA_E_INVALID);
        assert_int_equal(patina_pivot_index_range(NULL, pi, recs, 1, -1.0, NULL, rh, c), PATINA_E_INVALID);
        assert_int_equal(patina_pivot_index_range(NULL, pi, recs, 1, NAN, NULL, rh, c), PATINA_E_INVALID);
        free(bad);
    }
    /* strategies: an unknown one; the GPU ones without a context (or, in
     * a build or on a machine without a GPU, with one) are unavailable */
    {
        patina_pivot_search_opts_t so;
        patina_pivot_search_opts_init(&so);
        assert_int_equal(so.strategy, PATINA_PIVOT_CPU);
        so.strategy = (patina_pivot_strategy)7;
        assert_int_equal(patina_pivot_index_knn(NULL, pi, recs, 1, 4, &so, h, c), PATINA_E_INVALID);
        assert_non_null(strstr(patina_last_error(), "strategy"));
        so.strategy = PATINA_PIVOT_PIPELINE;
        assert_int_equal(patina_pivot_index_knn(NULL, pi, recs, 1, 4, &so, h, c), PATINA_E_UNAVAILABLE);
        if (patina_gpu_count() == 0) {
            patina_context_t *ctx;
            TU_OK(patina_context_new(&ctx, NULL));
            so.strategy = PATINA_PIVOT_GPU;
            assert_int_equal(patina_pivot_index_knn(ctx, pi, recs, 1, 4, &so, h, c), PATINA_E_UNAVAILABLE);
            patina_context_free(ctx);
        }
    }
    /* an index emptied by removal answers with nothing */
    {
        size_t removed = 0;
        TU_OK(patina_pivot_index_remove(pi, ids, 10, &removed));
        assert_int_equal(removed, 10);
        assert_int_equal(patina_pivot_index_size(pi), 0);
        TU_OK(patina_pivot_index_knn(NULL, pi, recs, 1, 4, NULL, h, c));
        assert_int_equal(c[0], 0);
        assert_true(isinf(h[0].distance));
    }
    patina_pivot_index_free(pi);
    patina_pivot_index_free(NULL);
    free(recs);
    free(ids);
    patina_extractor_free(ex);
    patina_extractor_free(cedd);
    patina_extractor_free(minus);
}

/* ------------------------------------------------------------- updates */

/* The pivot index against a fresh scan index of the same rows. */
static void check_same(const patina_pivot_index_t *pi, const patina_extractor_t *ex, const uint64_t *ids,
                       const float *recs, size_t n, const float *qs, size_t nq, const char *what)
{
    patina_index_t *idx = NULL;
    patina_hit_t h1[6 * 8], h2[6 * 8];
    size_t c1[6], c2[6];
    patina_search_opts_t io;
    assert_true(nq <= 6);
    assert_int_equal(patina_pivot_index_size(pi), n);
    TU_OK(patina_index_new(&idx, ex, ids, recs, n));
    patina_search_opts_init(&io);
    io.device = PATINA_DEVICE_CPU;
    TU_OK(patina_pivot_index_knn(NULL, pi, qs, nq, 8, NULL, h1, c1));
    TU_OK(patina_index_knn(NULL, idx, qs, nq, 8, &io, h2, c2));
    for (size_t q = 0; q < nq; q++) compare_knn(h1 + 8 * q, c1[q], h2 + 8 * q, c2[q], what);
    patina_index_free(idx);
}

static void test_put_remove(void **state)
{
    patina_extractor_t *ex = ex_new(SPEC);
    const size_t dim = patina_extractor_dim(ex), n = 200;
    tu_rng_t rng;
    float *recs, *qs, *more;
    uint64_t *ids, mids[30];
    patina_pivot_index_t *pi = NULL;
    patina_pivot_opts_t o;
    size_t removed;
    (void)state;
    tu_rng_seed(&rng, 9);
    recs = make_records(ex, n + 30, 4, 0.02, &rng);
    more = recs + n * dim;
    qs = make_records(ex, 6, 4, 0.02, &rng);
    ids = make_ids(n, &rng);
    patina_pivot_opts_init(&o);
    o.pivots = 6;
    TU_OK(patina_pivot_index_new(&pi, NULL, ex, ids, recs, n, &o));
    /* remove a third, including every pivot: the pivots stay (by value) */
    {
        const uint64_t *pids = patina_pivot_index_pivot_ids(pi);
        uint64_t rm[80];
        size_t nrm = 0;
        for (size_t i = 0; i < 6; i++) rm[nrm++] = pids[i];
        for (size_t i = 0; i < n && nrm < 70; i += 3) rm[nrm++] = ids[i];
        rm[nrm++] = 999999; /* not held: ignored */
        TU_OK(patina_pivot_index_remove(pi, rm, nrm, &removed));
        assert_true(removed >= 60 && removed < nrm);
        assert_int_equal(patina_pivot_index_pivots(pi), 6);
        /* the scan's rows: those left */
        {
            uint64_t *lid = malloc(n * sizeof *lid);
            float *lrec = malloc(n * dim * sizeof *lrec);
            size_t m = 0;
            for (size_t i = 0; i < n; i++) {
                int gone = 0;
                for (size_t j = 0; j < nrm; j++) gone |= rm[j] == ids[i];
                if (gone) continue;
                lid[m] = ids[i];
                memcpy(lrec + m * dim, recs + i * dim, dim * sizeof *lrec);
                m++;
            }
            check_same(pi, ex, lid, lrec, m, qs, 6, "after remove");
            /* put: 25 new ids, 5 replacing held ones (new records) */
            for (size_t i = 0; i < 30; i++) mids[i] = i < 25 ? 1000000 + (uint64_t)i : lid[i];
            TU_OK(patina_pivot_index_put(pi, NULL, mids, more, 30));
            {
                uint64_t *aid = malloc((m + 25) * sizeof *aid);
                float *arec = malloc((m + 25) * dim * sizeof *arec);
                memcpy(aid, lid, m * sizeof *aid);
                memcpy(arec, lrec, m * dim * sizeof *arec);
                for (size_t i = 25; i < 30; i++) memcpy(arec + i * dim, more + i * dim, dim * sizeof *arec);
                for (size_t i = 0; i < 25; i++) {
                    aid[m + i] = mids[i];
                    memcpy(arec + (m + i) * dim, more + i * dim, dim * sizeof *arec);
                }
                check_same(pi, ex, aid, arec, m + 25, qs, 6, "after put");
                free(aid);
                free(arec);
            }
            /* a repeated id in one put changes nothing */
            mids[1] = mids[0];
            assert_int_equal(patina_pivot_index_put(pi, NULL, mids, more, 2), PATINA_E_INVALID);
            assert_int_equal(patina_pivot_index_size(pi), m + 25);
            free(lid);
            free(lrec);
        }
    }
    patina_pivot_index_free(pi);
    free(recs);
    free(qs);
    free(ids);
    patina_extractor_free(ex);
}

/* ---------------------------------------------------------- persistence */

static void put_records(patina_collection_t *c, const patina_extractor_t *ex, const float *recs, size_t n,
                        size_t key0, int salt)
{
    patina_insert_t *it = calloc(n, sizeof *it);
    char (*keys)[32] = calloc(n, sizeof *keys);
    for (size_t i = 0; i < n; i++) {
        snprintf(keys[i], sizeof keys[i], "img%zu", key0 + i);
        it[i].key = keys[i];
        it[i].size = 1;
        it[i].sha256[0] = (uint8_t)salt;
        it[i].sha256[1] = (uint8_t)i;
        it[i].sha256[2] = (uint8_t)(i >> 8);
        it[i].desc = recs + i * patina_extractor_dim(ex);
    }
    TU_OK(patina_collection_put(c, patina_extractor_spec(ex), patina_extractor_bytes(ex), it, n, NULL));
    free(it);
    free(keys);
}

/* The pivot index loaded from c against a scan of c's table. */
static void check_loaded(patina_collection_t *c, const patina_extractor_t *ex, const float *qs, size_t want_refreshed,
                         const char *what)
{
    patina_pivot_index_t *pi = NULL;
    uint64_t *ids = NULL;
    uint8_t *descs = NULL;
    size_t n = 0, bytes = 0, refreshed = 99;
    TU_OK(patina_pivot_index_load(&pi, NULL, ex, c, &refreshed));
    if (refreshed != want_refreshed) fail_msg("%s: %zu rows refreshed, want %zu", what, refreshed, want_refreshed);
    TU_OK(patina_collection_load(c, patina_extractor_spec(ex), &ids, &descs, &n, &bytes));
    check_same(pi, ex, ids, (const float *)descs, n, qs, 5, what);
    free(ids);
    free(descs);
    patina_pivot_index_free(pi);
}

static void test_persistence(void **state)
{
    patina_extractor_t *ex = ex_new(SPEC);
    const size_t dim = patina_extractor_dim(ex);
    char *dir = tu_tempdir("pivots");
    const char *path = tu_path(dir, "c.patina");
    patina_collection_t *c = NULL;
    patina_pivot_index_t *pi = NULL, *pj = NULL;
    patina_pivot_opts_t o;
    tu_rng_t rng;
    float *recs, *qs;
    size_t refreshed = 7;
    (void)state;
    tu_rng_seed(&rng, 21);
    recs = make_records(ex, 160, 5, 0.02, &rng);
    qs = make_records(ex, 5, 5, 0.02, &rng);
    TU_OK(patina_collection_open(&c, path, PATINA_OPEN_CREATE, 0));
    /* nothing stored, an empty collection */
    assert_int_equal(patina_pivot_index_load(&pi, NULL, ex, c, NULL), PATINA_E_NOTFOUND);
    patina_pivot_opts_init(&o);
    o.pivots = 4;
    assert_int_equal(patina_pivot_index_build(&pi, NULL, ex, c, &o), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "empty collection"));
    put_records(c, ex, recs, 120, 0, 1);
    TU_OK(patina_pivot_index_build(&pi, NULL, ex, c, &o));
    TU_OK(patina_pivot_index_save(pi, c));
    /* a round trip gives the same pivots and, with nothing changed, no refresh */
    TU_OK(patina_pivot_index_load(&pj, NULL, ex, c, &refreshed));
    assert_int_equal(refreshed, 0);
    assert_int_equal(patina_pivot_index_pivots(pj), 4);
    assert_memory_equal(patina_pivot_index_pivot_ids(pi), patina_pivot_index_pivot_ids(pj), 4 * sizeof(uint64_t));
    patina_pivot_index_free(pj);
    check_loaded(c, ex, qs, 0, "round trip");
    /* added: 40 new images; changed: img5's content and record; removed:
     * img7 and the first pivot's image */
    put_records(c, ex, recs + 120 * dim, 40, 120, 1);
    put_records(c, ex, recs + 150 * dim, 1, 5, 2);
    TU_OK(patina_collection_remove(c, 8));
    TU_OK(patina_collection_remove(c, patina_pivot_index_pivot_ids(pi)[0]));
    check_loaded(c, ex, qs, 40 + 1 + 2, "after add, change and remove");
    /* saved again: nothing to refresh */
    {
        patina_pivot_index_t *pk = NULL;
        TU_OK(patina_pivot_index_load(&pk, NULL, ex, c, &refreshed));
        TU_OK(patina_pivot_index_save(pk, c));
        patina_pivot_index_free(pk);
        check_loaded(c, ex, qs, 0, "saved again");
    }
    /* a damaged blob */
    {
        char name[512];
        void *b = NULL;
        size_t size = 0;
        snprintf(name, sizeof name, "pivots:%s", patina_extractor_spec(ex));
        TU_OK(patina_collection_get_aux(c, name, &b, &size));
        TU_OK(patina_collection_put_aux(c, name, b, size - 8));
        assert_int_equal(patina_pivot_index_load(&pj, NULL, ex, c, NULL), PATINA_E_CORRUPT);
        assert_non_null(strstr(patina_last_error(), "damaged"));
        memset(b, 0, 8);
        TU_OK(patina_collection_put_aux(c, name, b, size));
        assert_int_equal(patina_pivot_index_load(&pj, NULL, ex, c, NULL), PATINA_E_CORRUPT);
        free(b);
    }
    /* dropped */
    TU_OK(patina_pivot_index_drop(c, ex));
    TU_OK(patina_pivot_index_drop(c, ex));
    assert_int_equal(patina_pivot_index_load(&pj, NULL, ex, c, NULL), PATINA_E_NOTFOUND);
    patina_pivot_index_free(pi);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    free(recs);
    free(qs);
    patina_extractor_free(ex);
}


/* ------------------------------------------------------------------ CLI */

/* Searches in threads while another thread puts and removes a batch: the
 * lock makes each change whole, so every answer is the scan's of the table
 * with or without the batch (no torn reads; run under TSan by make tsan). */
typedef struct conc {
    const patina_pivot_index_t *pi;
    const float *qs;
    const patina_hit_t *with, *without;
    size_t bad;
} conc_t;

#define CQ 4
#define CK 6

static void *conc_reader(void *v)
{
    conc_t *c = v;
    patina_hit_t h[CQ * CK];
    size_t cnt[CQ];
    for (int it = 0; it < 40; it++) {
        if (patina_pivot_index_knn(NULL, c->pi, c->qs, CQ, CK, NULL, h, cnt) != PATINA_OK) {
            c->bad++;
            continue;
        }
        if (memcmp(h, c->with, sizeof h) != 0 && memcmp(h, c->without, sizeof h) != 0) c->bad++;
    }
    return NULL;
}

static void test_concurrent(void **state)
{
    patina_extractor_t *ex = ex_new(SPEC);
    const size_t dim = patina_extractor_dim(ex), n = 300, m = 40;
    tu_rng_t rng;
    float *recs, *qs;
    uint64_t *ids, mids[40];
    patina_pivot_index_t *pi = NULL;
    patina_pivot_opts_t o;
    patina_hit_t with[CQ * CK], without[CQ * CK];
    size_t cnt[CQ], removed;
    pthread_t th[3];
    conc_t arg[3];
    (void)state;
    tu_rng_seed(&rng, 21);
    recs = make_records(ex, n + m, 5, 0.02, &rng);
    qs = make_records(ex, CQ, 5, 0.02, &rng);
    ids = make_ids(n, &rng);
    for (size_t i = 0; i < m; i++) mids[i] = 1000000 + i;
    patina_pivot_opts_init(&o);
    o.pivots = 8;
    TU_OK(patina_pivot_index_new(&pi, NULL, ex, ids, recs, n, &o));
    TU_OK(patina_pivot_index_knn(NULL, pi, qs, CQ, CK, NULL, without, cnt));
    TU_OK(patina_pivot_index_put(pi, NULL, mids, recs + n * dim, m));
    TU_OK(patina_pivot_index_knn(NULL, pi, qs, CQ, CK, NULL, with, cnt));
    assert_true(memcmp(with, without, sizeof with) != 0); /* the batch shows in the answers */
    for (int t = 0; t < 3; t++) {
        arg[t] = (conc_t){pi, qs, with, without, 0};
        assert_int_equal(pthread_create(&th[t], NULL, conc_reader, &arg[t]), 0);
    }
    for (int round = 0; round < 20; round++) {
        TU_OK(patina_pivot_index_remove(pi, mids, m, &removed));
        assert_int_equal(removed, m);
        TU_OK(patina_pivot_index_put(pi, NULL, mids, recs + n * dim, m));
    }
    for (int t = 0; t < 3; t++) {
        pthread_join(th[t], NULL);
        assert_int_equal(arg[t].bad, 0);
    }
    patina_pivot_index_free(pi);
    patina_extractor_free(ex);
    free(recs);
    free(qs);
    free(ids);
}

static int cli(char **out, char **err, const char *const *args)
{
    const char *argv[24];
    size_t n = 0;
    argv[n++] = PATINA_CLI;
    while (*args && n < 23) argv[n++] = *args++;
    argv[n] = NULL;
    return tu_exec(out, err, 0, 300, argv);
}

#define CSPEC "signature:k=16,samples=400,seeds=100"

static char *run_ok(const char *const *args)
{
    char *out = NULL, *err = NULL;
    int rc = cli(&out, &err, args);
    if (rc != 0) fail_msg("patina %s: exit %d: %s", args[0], rc, err ? err : "");
    free(err);
    return out;
}

static void test_cli(void **state)
{
    char *dir = tu_tempdir("pivots-cli"), *out, *err, *plain, coll[4096], imgs[4096], more[4096], q[4096];
    int rc;
    (void)state;
    snprintf(imgs, sizeof imgs, "%s", tu_path(dir, "images"));
    snprintf(more, sizeof more, "%s", tu_path(dir, "more"));
    snprintf(coll, sizeof coll, "%s", tu_path(dir, "c.patina"));
    assert_int_equal(tu_run(NULL, "mkdir -p '%s' '%s'", imgs, more), 0);
    for (int i = 0; i < 12; i++)
        tu_write_jpeg(tu_path(imgs, "img%02d.jpg", i), 50 + 7 * i, 40 + 5 * i, i % 3, 90, 200 + (uint64_t)i);
    for (int i = 0; i < 4; i++)
        tu_write_jpeg(tu_path(more, "new%d.jpg", i), 45 + 9 * i, 60 - 3 * i, i % 3, 85, 300 + (uint64_t)i);
    snprintf(q, sizeof q, "%s", tu_path(imgs, "img03.jpg"));
    /* bad: pivot tables are for signatures; more pivots than images */
    rc = cli(&out, &err, (const char *const[]){"index", coll, imgs, "-f", "cedd", "--pivots", "4", "-q", NULL});
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "pivot tables are for -f signature"));
    free(out);
    free(err);
    rc = cli(&out, &err, (const char *const[]){"index", coll, imgs, "-f", CSPEC, "--pivots", "13", "-q", NULL});
    assert_int_equal(rc, 3);
    assert_non_null(strstr(err, "13 pivots asked for, but the collection has 12 rows"));
    free(out);
    free(err);
    /* the scan's answer (no table yet), then with a table of 4 pivots */
    plain = run_ok((const char *const[]){"search", coll, q, "-f", CSPEC, "-k", "6", "--format", "csv", NULL});
    /* filtering asked for without a table */
    rc = cli(&out, &err, (const char *const[]){"search", coll, q, "-f", CSPEC, "--bound", "metric", NULL});
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "has no pivot table"));
    free(out);
    free(err);
    free(run_ok((const char *const[]){"index", coll, imgs, "-f", CSPEC, "--pivots", "4", NULL}));
    for (int b = 0; b < 3; b++) {
        static const char *const bounds[] = {"ptolemaic", "metric", "none"};
        rc = cli(&out, &err,
                 (const char *const[]){"search", coll, q, "-f", CSPEC, "-k", "6", "--format", "csv", "--bound",
                                       bounds[b], "--stats", NULL});
        assert_int_equal(rc, 0);
        assert_string_equal(out, plain);
        assert_non_null(strstr(err, "(pivot table)"));
        assert_non_null(strstr(err, "4 query-to-pivot distances"));
        free(out);
        free(err);
    }
    /* range through the table = range without it (after --pivots 0) */
    out = run_ok((const char *const[]){"search", coll, q, "-f", CSPEC, "--range", "0.3", "--format", "csv", NULL});
    /* more images: the stored table gets their rows */
    {
        char *o2 = NULL;
        rc = cli(&o2, &err, (const char *const[]){"index", coll, more, "-f", CSPEC, NULL});
        free(o2);
    }
    assert_int_equal(rc, 0);
    assert_non_null(strstr(err, "pivot table: 4 pivots, 16 rows (4 updated)"));
    free(err);
    {
        char *a = run_ok((const char *const[]){"search", coll, q, "-f", CSPEC, "-k", "16", "--format", "csv", NULL});
        char *r2 = run_ok((const char *const[]){"search", coll, q, "-f", CSPEC, "--range", "0.3", "--format", "csv", NULL});
        char *b;
        free(run_ok((const char *const[]){"index", coll, more, "-f", CSPEC, "--pivots", "0", "-q", NULL}));
        b = run_ok((const char *const[]){"search", coll, q, "-f", CSPEC, "-k", "16", "--format", "csv", NULL});
        assert_string_equal(a, b);
        free(b);
        b = run_ok((const char *const[]){"search", coll, q, "-f", CSPEC, "--range", "0.3", "--format", "csv", NULL});
        assert_string_equal(r2, b);
        free(b);
        free(a);
        free(r2);
    }
    /* rm: the stored table drops the image's row (a load finds nothing to do) */
    {
        patina_collection_t *c = NULL;
        patina_extractor_t *ex = ex_new(CSPEC);
        patina_pivot_index_t *pi = NULL;
        size_t refreshed = 99;
        free(run_ok((const char *const[]){"index", coll, more, "-f", CSPEC, "--pivots", "3", "-q", NULL}));
        free(run_ok((const char *const[]){"rm", coll, q, NULL}));
        TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_READONLY, 0));
        TU_OK(patina_pivot_index_load(&pi, NULL, ex, c, &refreshed));
        assert_int_equal(refreshed, 0);
        assert_int_equal(patina_pivot_index_size(pi), 15);
        patina_pivot_index_free(pi);
        patina_collection_close(c);
        patina_extractor_free(ex);
    }
    free(out);
    free(plain);
    tu_remove_tree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bounds),     cmocka_unit_test(test_exact),       cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_put_remove), cmocka_unit_test(test_persistence), cmocka_unit_test(test_cli),
        cmocka_unit_test(test_concurrent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
