/* The signature family (issue 18): options and their errors, the sampling
 * plan, extraction (deterministic, thread-count independent, degenerate
 * images, the record's invariants), the SQFD definition against a long
 * double evaluation of the paper's concatenated form, bad records, and
 * exact k-NN and range search through the search engine against a brute
 * force reference (ties by id, k > N, an empty index, duplicates). OpenCV
 * parity is test_signature_opencv.c. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "features/family.h"
#include "features/signature.h"
#include "search/distance.h"
#include "testutil.h"

/* -------------------------------------------------------------- helpers */

static patina_extractor_t *ex_new(const char *spec)
{
    patina_extractor_t *ex = NULL;
    TU_OK(patina_extractor_new(&ex, spec));
    return ex;
}

/* The paper's concatenated form in long double: u = (w_q | -w_o),
 * S = sum_i sum_j u_i u_j f(r_i, r_j); terms = sum |u_i u_j f|. */
static long double ref_s(const float *q, size_t nq, const float *o, size_t no, long double alpha, int form,
                         long double *terms)
{
    long double s = 0.0L, t = 0.0L;
    for (size_t i = 0; i < nq + no; i++)
        for (size_t j = 0; j < nq + no; j++) {
            const float *ri = i < nq ? q + 8 * i : o + 8 * (i - nq), *rj = j < nq ? q + 8 * j : o + 8 * (j - nq);
            const long double ui = i < nq ? ri[0] : -(long double)ri[0], uj = j < nq ? rj[0] : -(long double)rj[0];
            long double d2 = 0.0L, f;
            for (int k = 1; k < 8; k++) d2 += ((long double)ri[k] - rj[k]) * ((long double)ri[k] - rj[k]);
            f = form == 0 ? expl(-alpha * d2) : form == 1 ? 1.0L / (alpha + sqrtl(d2)) : -sqrtl(d2);
            s += ui * uj * f;
            t += fabsl(ui * uj * f);
        }
    *terms = t;
    return s;
}

static void random_rows(float *rows, size_t n, tu_rng_t *r)
{
    for (size_t i = 0; i < n; i++) {
        rows[8 * i] = (float)(1 + tu_rng_below(r, 1000)) / 1000.0f;
        for (int k = 1; k < 8; k++) rows[8 * i + k] = (float)tu_rng_below(r, 20001) / 10000.0f - 1.0f;
    }
}

/* ------------------------------------------------------------- options */

static void test_options(void **state)
{
    static const char *const bad[] = {"signature:k=0",          "signature:k=1025",    "signature:alpha=0",
                                      "signature:alpha=-1",      "signature:alpha=nan", "signature:alpha=1e-60",
                                      "signature:samples=0",     "signature:seeds=3000", "signature:form=plus",
                                      "signature:samples=10,seeds=11", "signature:bits=9", "signature:nope=1"};
    patina_extractor_t *ex;
    (void)state;
    ex = ex_new("signature");
    assert_string_equal(patina_extractor_spec(ex),
                        "signature:k=64,samples=2000,sampling=random,seed=1,seeds=400,iters=10,minsize=2,join=0.2,"
                        "drop=0,bits=4,radius=3,weights=samples,alpha=1,form=gaussian");
    assert_int_equal(patina_extractor_elem(ex), PATINA_ELEM_F32);
    assert_int_equal(patina_extractor_dim(ex), 8 + 8 * 64);
    assert_string_equal(patina_extractor_distance_name(ex), "sqfd");
    patina_extractor_free(ex);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ex = NULL;
        if (patina_extractor_new(&ex, bad[i]) != PATINA_E_INVALID) fail_msg("'%s' was accepted", bad[i]);
        assert_null(ex);
        assert_true(strlen(patina_last_error()) > 0);
    }
    assert_int_equal(patina_extractor_new(&ex, "signature:alpha=0"), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "alpha"));
    assert_int_equal(patina_extractor_new(&ex, "signature:k=0"), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "'k'"));
}

/* ---------------------------------------------------------------- plan */

static void test_plan(void **state)
{
    static const char *const specs[] = {"signature", "signature:sampling=grid", "signature:samples=7,seeds=7",
                                        "signature:samples=1,seeds=1,sampling=grid"};
    (void)state;
    for (size_t c = 0; c < sizeof specs / sizeof *specs; c++) {
        patina_extractor_t *ex = ex_new(specs[c]);
        const sig_params_t *p = (const sig_params_t *)ex->params;
        float *a = malloc((size_t)p->samples * 8), *b = malloc((size_t)p->samples * 8);
        int *sa = malloc((size_t)p->seeds * 4), *sb = malloc((size_t)p->seeds * 4);
        char *seen = calloc((size_t)p->samples, 1);
        TU_OK(sig_plan(p, a, sa));
        TU_OK(sig_plan(p, b, sb));
        assert_memory_equal(a, b, (size_t)p->samples * 8);
        assert_memory_equal(sa, sb, (size_t)p->seeds * 4);
        for (int i = 0; i < 2 * p->samples; i++) assert_true(a[i] >= 0.0f && a[i] < 1.0f);
        for (int i = 0; i < p->seeds; i++) {
            assert_true(sa[i] >= 0 && sa[i] < p->samples);
            assert_false(seen[sa[i]]);
            seen[sa[i]] = 1;
        }
        if (p->sampling == SIG_SAMPLING_GRID && p->samples == 1) assert_true(a[0] == 0.5f && a[1] == 0.5f);
        free(a);
        free(b);
        free(sa);
        free(sb);
        free(seen);
        patina_extractor_free(ex);
    }
    {   /* another seed, another plan */
        patina_extractor_t *e1 = ex_new("signature"), *e2 = ex_new("signature:seed=2");
        float a[4000], b[4000];
        int sa[400], sb[400];
        TU_OK(sig_plan((const sig_params_t *)e1->params, a, sa));
        TU_OK(sig_plan((const sig_params_t *)e2->params, b, sb));
        assert_true(memcmp(a, b, sizeof a) != 0);
        assert_true(memcmp(sa, sb, sizeof sa) != 0);
        patina_extractor_free(e1);
        patina_extractor_free(e2);
    }
}

/* ----------------------------------------------------------- extraction */

static void check_record(const float *rec, const sig_params_t *p)
{
    const int n = (int)rec[0];
    double sum = 0.0;
    TU_OK(sig_record_check(rec, sig_dim((size_t)p->k), "test"));
    assert_true(n >= 1 && n <= p->k);
    assert_true(rec[2] == (float)p->alpha && rec[3] == (float)p->form);
    for (int i = 0; i < n; i++) {
        const float *r = rec + 8 + 8 * i;
        assert_true(r[0] > 0.0f && r[0] <= 1.0f);
        sum += r[0];
        assert_true(r[1] >= 0.0f && r[1] < 1.0f && r[2] >= 0.0f && r[2] < 1.0f);
        assert_true(r[3] >= 0.0f && r[3] <= 1.0f);
        assert_true(fabsf(r[4]) <= 1.1f && fabsf(r[5]) <= 1.1f);
        assert_true(r[6] >= 0.0f && r[7] >= 0.0f);
    }
    for (size_t i = 8 + 8 * (size_t)n; i < sig_dim((size_t)p->k); i++) assert_true(rec[i] == 0.0f);
    if (p->weights == SIG_WEIGHTS_SAMPLES) assert_true(sum <= 1.0 + 1e-6);
}

static void test_extract(void **state)
{
    static const int sizes[][2] = {{1, 1}, {2, 2}, {1, 57}, {57, 1}, {7, 5}, {64, 64}, {301, 203}};
    static const char *const specs[] = {"signature", "signature:sampling=grid,k=16", "signature:k=1",
                                        "signature:weights=max,samples=300,seeds=300,iters=3",
                                        "signature:bits=8,radius=0,join=0,minsize=0"};
    tu_rng_t rng;
    patina_context_t *c1, *c2;
    patina_context_opts_t o;
    (void)state;
    patina_context_opts_init(&o);
    o.threads = 1;
    TU_OK(patina_context_new(&c1, &o));
    o.threads = 3;
    TU_OK(patina_context_new(&c2, &o));
    tu_rng_seed(&rng, 7);
    for (size_t s = 0; s < sizeof specs / sizeof *specs; s++) {
        patina_extractor_t *ex = ex_new(specs[s]);
        const sig_params_t *p = (const sig_params_t *)ex->params;
        const size_t bytes = patina_extractor_bytes(ex), n = sizeof sizes / sizeof *sizes * 3 + 1;
        patina_image_t imgs[sizeof sizes / sizeof *sizes * 3 + 1];
        float *a = malloc(n * bytes), *b = malloc(n * bytes);
        patina_status st[sizeof sizes / sizeof *sizes * 3 + 1];
        size_t m = 0;
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
            for (int kind = 0; kind < 3; kind++) tu_random_image(&imgs[m++], sizes[i][0], sizes[i][1], kind, &rng);
        TU_OK(patina_image_init(&imgs[m], 40, 30)); /* a constant image */
        memset(imgs[m].data, 77, imgs[m].stride * 30);
        m++;
        TU_OK(patina_extract_batch(c1, ex, PATINA_DEVICE_CPU, a, imgs, m, st));
        for (size_t i = 0; i < m; i++) TU_OK(st[i]);
        TU_OK(patina_extract_batch(c2, ex, PATINA_DEVICE_CPU, b, imgs, m, st));
        assert_memory_equal(a, b, m * bytes); /* any thread count, the same bytes */
        for (size_t i = 0; i < m; i++) {
            const float *rec = a + i * (bytes / 4);
            check_record(rec, p);
            if (p->k == 1) assert_true(rec[0] == 1.0f);
            if (p->weights == SIG_WEIGHTS_MAX) {
                float mx = 0.0f;
                for (int r = 0; r < (int)rec[0]; r++) mx = fmaxf(mx, rec[8 + 8 * r]);
                /* OpenCV's w * (1 / largest): the largest is 1 within an ulp */
                assert_true(fabsf(mx - 1.0f) <= FLT_EPSILON);
            }
        }
        for (size_t i = 0; i < m; i++) patina_image_release(&imgs[i]);
        free(a);
        free(b);
        patina_extractor_free(ex);
    }
    {   /* an image without pixels has no signature */
        patina_extractor_t *ex = ex_new("signature");
        patina_image_t empty = {0};
        float *rec = malloc(patina_extractor_bytes(ex));
        patina_status st;
        assert_int_equal(patina_extract_batch(c1, ex, PATINA_DEVICE_CPU, rec, &empty, 1, &st), PATINA_OK);
        assert_int_equal(st, PATINA_E_INVALID);
        free(rec);
        patina_extractor_free(ex);
    }
    patina_context_free(c1);
    patina_context_free(c2);
}

/* k below the clusters found keeps the heaviest, heaviest first. */
static void test_crop(void **state)
{
    patina_extractor_t *all = ex_new("signature:k=1024"), *few = ex_new("signature:k=5");
    tu_rng_t rng;
    patina_image_t img;
    float *a = malloc(patina_extractor_bytes(all)), *b = malloc(patina_extractor_bytes(few));
    patina_status st;
    float w[1024];
    int n;
    patina_context_t *ctx;
    (void)state;
    TU_OK(patina_context_new(&ctx, NULL));
    tu_rng_seed(&rng, 11);
    tu_random_image(&img, 120, 90, 2, &rng);
    TU_OK(patina_extract_batch(ctx, all, PATINA_DEVICE_CPU, a, &img, 1, &st));
    TU_OK(patina_extract_batch(ctx, few, PATINA_DEVICE_CPU, b, &img, 1, &st));
    n = (int)a[0];
    assert_true(n > 5);
    assert_true(b[0] == 5.0f);
    for (int i = 0; i < n; i++) w[i] = a[8 + 8 * i];
    for (int i = 0; i < 5; i++) { /* the i-th heaviest; ties in order */
        int best = -1;
        for (int j = 0; j < n; j++)
            if (w[j] >= 0.0f && (best < 0 || w[j] > w[best])) best = j;
        assert_memory_equal(b + 8 + 8 * i, a + 8 + 8 * best, 32);
        w[best] = -1.0f;
    }
    patina_image_release(&img);
    free(a);
    free(b);
    patina_extractor_free(all);
    patina_extractor_free(few);
    patina_context_free(ctx);
}

/* ------------------------------------------------------------------ SQFD */

static void test_sqfd_definition(void **state)
{
    static const char *const forms[] = {"gaussian", "heuristic", "minus"};
    static const char *const alphas[] = {"3", "0.2", "0.01", "1"};
    tu_rng_t rng;
    (void)state;
    tu_rng_seed(&rng, 18);
    for (int f = 0; f < 3; f++)
        for (int al = 0; al < 4; al++) {
            char spec[128];
            patina_extractor_t *ex;
            float *q, *o, rows[8 * 40];
            size_t bytes;
            snprintf(spec, sizeof spec, "signature:k=40,form=%s,alpha=%s", forms[f], alphas[al]);
            ex = ex_new(spec);
            bytes = patina_extractor_bytes(ex);
            q = malloc(bytes);
            o = malloc(bytes);
            for (int rep = 0; rep < 60; rep++) {
                const size_t nq = 1 + tu_rng_below(&rng, 40), no = rep < 3 ? nq : 1 + tu_rng_below(&rng, 40);
                long double terms, s;
                double d, d2;
                random_rows(rows, nq, &rng);
                TU_OK(patina_signature_pack(ex, q, rows, nq));
                random_rows(rows, no, &rng);
                TU_OK(patina_signature_pack(ex, o, rows, no));
                d = patina_extractor_distance(ex, q, o);
                TU_OK(patina_signature_sqfd(&d2, q, o, bytes));
                assert_memory_equal(&d, &d2, sizeof d);
                s = ref_s(q + 8, nq, o + 8, no, (long double)(float)atof(alphas[al]), f, &terms);
                /* double sums of at most (nq + no)^2 products: the bound of
                 * recursive summation, (N + 16) u sum|terms|, u = 2^-53 */
                if (s <= 0.0L) {
                    assert_true(d == 0.0);
                } else if (!(fabsl((long double)d * d - s) <=
                             (long double)((nq + no) * (nq + no) + 16) * DBL_EPSILON / 2 * terms))
                    fail_msg("%s %zu x %zu: %.17g, definition %.17Lg", spec, nq, no, d, sqrtl(s));
                /* a signature is at distance 0 from itself, exactly */
                d = patina_extractor_distance(ex, q, q);
                assert_true(d == 0.0);
            }
            free(q);
            free(o);
            patina_extractor_free(ex);
        }
    {   /* one centroid each: S = w1^2 + w2^2 - 2 w1 w2 exp(-alpha d^2) */
        const float a[8] = {0.5f, 0, 0, 0, 0, 0, 0, 0}, b[8] = {0.25f, 0.5f, 0, 0, 0, 0, 0, 0};
        const double want = sqrt(0.25 + 0.0625 - 2 * 0.125 * exp(-3.0 * 0.25));
        assert_true(fabs(sig_sqfd_rows(a, 1, b, 1, 3.0, SIG_FORM_GAUSSIAN) - want) <= 1e-15);
    }
}

static void test_bad_records(void **state)
{
    patina_extractor_t *ex = ex_new("signature:k=4"), *ex2 = ex_new("signature:k=4,alpha=2");
    const size_t bytes = patina_extractor_bytes(ex), n = bytes / 4;
    float rows[8 * 5] = {0}, *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    patina_signature_info_t info;
    double d;
    (void)state;
    for (int i = 0; i < 5; i++) rows[8 * i] = 0.2f, rows[8 * i + 1] = 0.1f * (float)i;
    TU_OK(patina_signature_pack(ex, a, rows, 3));
    TU_OK(patina_signature_pack(ex, b, rows, 2));
    TU_OK(patina_signature_info(&info, a, bytes));
    assert_int_equal(info.count, 3);
    assert_int_equal(info.k, 4);
    assert_true(info.alpha == 1.0 && info.form == PATINA_SIGNATURE_GAUSSIAN);
    {
        float row[8];
        TU_OK(patina_signature_centroid(row, a, bytes, 2));
        assert_memory_equal(row, rows + 16, 32);
        assert_int_equal(patina_signature_centroid(row, a, bytes, 3), PATINA_E_INVALID);
    }
    assert_int_equal(patina_signature_pack(ex, a, rows, 0), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "empty"));
    assert_int_equal(patina_signature_pack(ex, a, rows, 5), PATINA_E_LIMIT);
    TU_OK(patina_signature_pack(ex, a, rows, 3));

    memcpy(c, a, bytes); /* count 0: an empty signature */
    c[0] = 0.0f;
    assert_int_equal(patina_signature_sqfd(&d, c, b, bytes), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "empty signature"));
    assert_true(isnan(d));
    assert_true(isnan(sig_sqfd(c, b, n)));
    memcpy(c, a, bytes); /* a NaN weight */
    c[8 + 8] = NAN;
    assert_int_equal(patina_signature_sqfd(&d, b, c, bytes), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "weight"));
    assert_true(isnan(sig_sqfd(b, c, n)));
    memcpy(c, a, bytes); /* a negative weight, an infinite feature */
    c[8] = -0.5f;
    assert_int_equal(patina_signature_info(&info, c, bytes), PATINA_E_INVALID);
    memcpy(c, a, bytes);
    c[8 + 3] = INFINITY;
    assert_int_equal(patina_signature_info(&info, c, bytes), PATINA_E_INVALID);
    memcpy(c, a, bytes); /* count over K, alpha <= 0, a bad form, a bad K */
    c[0] = 5.0f;
    assert_int_equal(patina_signature_info(&info, c, bytes), PATINA_E_INVALID);
    memcpy(c, a, bytes);
    c[2] = 0.0f;
    assert_int_equal(patina_signature_info(&info, c, bytes), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "alpha"));
    memcpy(c, a, bytes);
    c[3] = 3.0f;
    assert_int_equal(patina_signature_info(&info, c, bytes), PATINA_E_INVALID);
    memcpy(c, a, bytes);
    c[1] = 5.0f;
    assert_int_equal(patina_signature_info(&info, c, bytes), PATINA_E_INVALID);
    assert_int_equal(patina_signature_info(&info, a, bytes - 4), PATINA_E_INVALID);
    assert_int_equal(patina_signature_info(&info, a, 6), PATINA_E_INVALID);
    /* records of different alpha */
    TU_OK(patina_signature_pack(ex2, c, rows, 3));
    assert_int_equal(patina_signature_sqfd(&d, a, c, bytes), PATINA_E_INVALID);
    assert_true(isnan(sig_sqfd(a, c, n)));
    /* the quiet check agrees with the one with messages */
    for (int i = 0; i < 2000; i++) {
        tu_rng_t r;
        float *x = c;
        memcpy(x, a, bytes);
        tu_rng_seed(&r, (uint64_t)i + 1);
        x[tu_rng_below(&r, (uint32_t)n)] = (float[]){NAN, -1.0f, 0.0f, 7.0f, 2.5f, INFINITY}[tu_rng_below(&r, 6)];
        assert_int_equal(sig_record_valid(x, n), sig_record_check(x, n, "t") == PATINA_OK);
    }
    {   /* a different extractor's record cannot be packed into */
        patina_extractor_t *cedd = ex_new("cedd");
        assert_int_equal(patina_signature_pack(cedd, a, rows, 1), PATINA_E_INVALID);
        patina_extractor_free(cedd);
    }
    free(a);
    free(b);
    free(c);
    patina_extractor_free(ex);
    patina_extractor_free(ex2);
}

/* --------------------------------------------------------------- search */

typedef struct ref_hit {
    uint64_t id;
    double d;
} ref_hit_t;

static int ref_cmp(const void *x, const void *y)
{
    const ref_hit_t *a = x, *b = y;
    if (a->d != b->d) return a->d < b->d ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* The self-term form (sig_self, sig_cross, sig_sqfd_self: what the search
 * computes per row) gives sig_sqfd's double bit for bit: every form, the
 * paper's alphas, counts 1..K, zero weights, duplicates; other alphas NaN. */
static void test_sqfd_self(void **state)
{
    static const char *const forms[] = {"gaussian", "heuristic", "minus"};
    static const char *const alphas[] = {"3", "0.2", "0.01"};
    tu_rng_t rng;
    (void)state;
    tu_rng_seed(&rng, 1818);
    for (int f = 0; f < 3; f++)
        for (int al = 0; al < 3; al++) {
            char spec[128];
            patina_extractor_t *ex;
            float *recs, rows[8 * 48];
            size_t bytes, dim;
            const size_t n = 24;
            snprintf(spec, sizeof spec, "signature:k=48,form=%s,alpha=%s", forms[f], alphas[al]);
            ex = ex_new(spec);
            bytes = patina_extractor_bytes(ex);
            dim = patina_extractor_dim(ex);
            recs = malloc(n * bytes);
            for (size_t i = 0; i < n; i++) {
                const size_t c = i % 6 == 0 ? 1 : 1 + tu_rng_below(&rng, 48);
                random_rows(rows, c, &rng);
                if (i % 5 == 1) rows[0] = 0.0f;                  /* a zero weight */
                if (i % 7 == 2 && c > 2) rows[8 * (c - 1)] = 0.0f;
                TU_OK(patina_signature_pack(ex, recs + i * dim, rows, c));
                if (i % 8 == 3) memcpy(recs + i * dim, recs + (i - 1) * dim, bytes); /* a duplicate */
            }
            for (size_t i = 0; i < n; i++)
                for (size_t j = 0; j < n; j++) {
                    const float *q = recs + i * dim, *o = recs + j * dim;
                    const double want = sig_sqfd(q, o, dim), got = sig_sqfd_self(q, sig_self(q), o, sig_self(o));
                    if (memcmp(&want, &got, sizeof want) != 0)
                        fail_msg("%s rows %zu, %zu: sig_sqfd %.17g, self-term form %.17g", spec, i, j, want, got);
                }
            {   /* another alpha: NaN, as sig_sqfd */
                float *other = malloc(bytes);
                memcpy(other, recs, bytes);
                other[2] = 0.5f;
                assert_true(isnan(sig_sqfd_self(recs, sig_self(recs), other, sig_self(other))));
                assert_true(isnan(sig_sqfd(recs, other, dim)));
                free(other);
            }
            free(recs);
            patina_extractor_free(ex);
        }
}

/* Live updates of a signature index keep its self terms with its rows:
 * after puts (new ids, replacements), removals and a compaction the search
 * equals a brute force over the live rows (sig_sqfd, ties by id). */
static void test_search_updates(void **state)
{
    patina_extractor_t *ex = ex_new("signature:k=16,alpha=0.2");
    const size_t bytes = patina_extractor_bytes(ex), dim = patina_extractor_dim(ex), N = 300, K = 7;
    float *recs = malloc(2 * N * bytes), rows[8 * 16];
    uint64_t *ids = malloc(2 * N * sizeof *ids);
    uint8_t *live = calloc(2 * N, 1);
    patina_index_t *idx;
    patina_search_opts_t so;
    tu_rng_t rng;
    (void)state;
    tu_rng_seed(&rng, 77);
    patina_search_opts_init(&so);
    so.device = PATINA_DEVICE_CPU;
    for (size_t i = 0; i < 2 * N; i++) {
        const size_t c = 1 + tu_rng_below(&rng, 16);
        random_rows(rows, c, &rng);
        TU_OK(patina_signature_pack(ex, recs + i * dim, rows, c));
        ids[i] = 10 + i;
    }
    TU_OK(patina_index_new(&idx, ex, ids, recs, N));
    memset(live, 1, N);
    /* N more rows, then replace 50 held ids with new records, remove 120 */
    TU_OK(patina_index_put(idx, ids + N, recs + N * dim, N));
    memset(live + N, 1, N);
    for (size_t i = 0; i < 50; i++) {
        const size_t r = 3 * i;
        random_rows(rows, 5, &rng);
        TU_OK(patina_signature_pack(ex, recs + r * dim, rows, 5));
        TU_OK(patina_index_put(idx, &ids[r], recs + r * dim, 1));
    }
    for (size_t i = 0; i < 120; i++) {
        const size_t r = 200 + 3 * i;
        size_t rm = 0;
        TU_OK(patina_index_remove(idx, &ids[r], 1, &rm));
        assert_int_equal(rm, 1);
        live[r] = 0;
    }
    for (size_t q = 0; q < 6; q++) {
        const float *qr = recs + (q * 97 % (2 * N)) * dim;
        patina_hit_t hits[7];
        size_t count, m = 0;
        ref_hit_t *ref = malloc(2 * N * sizeof *ref);
        TU_OK(patina_index_knn(NULL, idx, qr, 1, K, &so, hits, &count));
        for (size_t i = 0; i < 2 * N; i++)
            if (live[i]) ref[m++] = (ref_hit_t){ids[i], sig_sqfd(qr, recs + i * dim, dim)};
        qsort(ref, m, sizeof *ref, ref_cmp);
        assert_int_equal(count, K);
        for (size_t i = 0; i < K; i++) {
            assert_true(hits[i].id == ref[i].id);
            assert_memory_equal(&hits[i].distance, &ref[i].d, sizeof(double));
        }
        free(ref);
    }
    patina_index_free(idx);
    free(recs);
    free(ids);
    free(live);
    patina_extractor_free(ex);
}

static void test_search(void **state)
{
    patina_extractor_t *ex = ex_new("signature:k=24,samples=500,seeds=120,alpha=3");
    const size_t bytes = patina_extractor_bytes(ex), N = 40, nq = 6;
    float *descs = malloc(N * bytes), *queries = malloc(nq * bytes);
    uint64_t ids[40];
    patina_image_t imgs[40];
    patina_status st[40];
    patina_index_t *idx, *empty;
    patina_context_t *ctx;
    patina_context_opts_t o;
    patina_search_opts_t so;
    tu_rng_t rng;
    (void)state;
    patina_context_opts_init(&o);
    o.threads = 2;
    TU_OK(patina_context_new(&ctx, &o));
    patina_search_opts_init(&so);
    so.device = PATINA_DEVICE_CPU;
    tu_rng_seed(&rng, 40);
    for (size_t i = 0; i < N; i++) {
        tu_random_image(&imgs[i], 40 + (int)tu_rng_below(&rng, 60), 30 + (int)tu_rng_below(&rng, 60),
                        (int)(i % 4), &rng);
        ids[i] = 1000 - 7 * i; /* ids not in row order */
    }
    TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, descs, imgs, N, st));
    for (size_t i = 0; i < N; i++) TU_OK(st[i]);
    /* duplicates: rows 5 and 6 are row 3's signature */
    memcpy((char *)descs + 5 * bytes, (char *)descs + 3 * bytes, bytes);
    memcpy((char *)descs + 6 * bytes, (char *)descs + 3 * bytes, bytes);
    for (size_t q = 0; q < nq; q++) memcpy((char *)queries + q * bytes, (char *)descs + (q * 7 % N) * bytes, bytes);
    memcpy((char *)queries + 1 * bytes, (char *)descs + 3 * bytes, bytes); /* a duplicated one */
    TU_OK(patina_index_new(&idx, ex, ids, descs, N));
    TU_OK(patina_index_new(&empty, ex, NULL, NULL, 0));
    {
        static const size_t ks[] = {1, 3, 40, 57};
        for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
            const size_t k = ks[ki];
            patina_hit_t *hits = malloc(nq * k * sizeof *hits);
            size_t counts[6];
            TU_OK(patina_index_knn(ctx, idx, queries, nq, k, &so, hits, counts));
            for (size_t q = 0; q < nq; q++) {
                ref_hit_t ref[40];
                for (size_t i = 0; i < N; i++) {
                    ref[i].id = ids[i];
                    TU_OK(patina_signature_sqfd(&ref[i].d, (char *)queries + q * bytes, (char *)descs + i * bytes,
                                                bytes));
                }
                qsort(ref, N, sizeof *ref, ref_cmp);
                assert_int_equal(counts[q], k < N ? k : N);
                for (size_t i = 0; i < k; i++) {
                    if (i < N) {
                        assert_true(hits[q * k + i].id == ref[i].id);
                        assert_memory_equal(&hits[q * k + i].distance, &ref[i].d, sizeof(double));
                    } else { /* k > N: padding */
                        assert_true(hits[q * k + i].id == 0 && isinf(hits[q * k + i].distance));
                    }
                }
                if (q == 1) { /* the three copies at 0, by id */
                    assert_true(hits[q * k].distance == 0.0);
                    if (k >= 3) {
                        assert_true(hits[q * k + 1].distance == 0.0 && hits[q * k + 2].distance == 0.0);
                        assert_true(hits[q * k].id == ids[6] && hits[q * k + 1].id == ids[5] &&
                                    hits[q * k + 2].id == ids[3]);
                    }
                }
            }
            TU_OK(patina_index_knn(ctx, empty, queries, nq, k, &so, hits, counts));
            for (size_t q = 0; q < nq; q++) assert_int_equal(counts[q], 0);
            free(hits);
        }
    }
    {   /* range: every row within r, by (distance, id) */
        patina_hit_t *hits[6];
        size_t counts[6];
        double radius, all[40];
        size_t total = 0;
        for (size_t i = 0; i < N; i++) /* r: query 0's 13th nearest, so there is something to find */
            TU_OK(patina_signature_sqfd(&all[i], queries, (char *)descs + i * bytes, bytes));
        for (size_t i = 0; i < 13; i++)
            for (size_t j = i + 1; j < N; j++)
                if (all[j] < all[i]) {
                    const double t = all[i];
                    all[i] = all[j];
                    all[j] = t;
                }
        radius = all[12];
        TU_OK(patina_index_range(ctx, idx, queries, nq, radius, &so, hits, counts));
        for (size_t q = 0; q < nq; q++) total += counts[q];
        print_message("range %g: %zu hits for %zu queries\n", radius, total, nq);
        assert_true(total > nq + 2 && total < nq * N); /* more than the copies, less than everything */
        for (size_t q = 0; q < nq; q++) {
            ref_hit_t ref[40];
            size_t m = 0;
            for (size_t i = 0; i < N; i++) {
                double d;
                TU_OK(patina_signature_sqfd(&d, (char *)queries + q * bytes, (char *)descs + i * bytes, bytes));
                if (d <= radius) ref[m++] = (ref_hit_t){ids[i], d};
            }
            qsort(ref, m, sizeof *ref, ref_cmp);
            assert_int_equal(counts[q], m);
            for (size_t i = 0; i < m; i++) {
                assert_true(hits[q][i].id == ref[i].id);
                assert_memory_equal(&hits[q][i].distance, &ref[i].d, sizeof(double));
            }
            free(hits[q]);
        }
        TU_OK(patina_index_range(ctx, empty, queries, nq, radius, &so, hits, counts));
        for (size_t q = 0; q < nq; q++) {
            assert_int_equal(counts[q], 0);
            free(hits[q]);
        }
    }
    {   /* device GPU: the GPU's answer where there is one (tests/gpu/test_sqfd_gpu.c
         * compares them), else unavailable, saying so */
        patina_search_opts_t g = so;
        patina_hit_t hit;
        size_t count;
        patina_status gs;
        g.device = PATINA_DEVICE_GPU;
        gs = patina_index_knn(ctx, idx, queries, 1, 1, &g, &hit, &count);
        assert_true(gs == PATINA_E_UNAVAILABLE || gs == PATINA_OK);
    }
    {   /* bad queries and rows: clear errors */
        float *bad = malloc(bytes);
        patina_hit_t hit;
        size_t count;
        memcpy(bad, queries, bytes);
        bad[0] = 0.0f; /* empty signature */
        assert_int_equal(patina_index_knn(ctx, idx, bad, 1, 1, &so, &hit, &count), PATINA_E_INVALID);
        assert_non_null(strstr(patina_last_error(), "query 0"));
        assert_non_null(strstr(patina_last_error(), "empty signature"));
        memcpy(bad, queries, bytes);
        bad[8] = NAN; /* NaN weight */
        assert_int_equal(patina_index_knn(ctx, idx, bad, 1, 1, &so, &hit, &count), PATINA_E_INVALID);
        assert_non_null(strstr(patina_last_error(), "weight"));
        {
            patina_hit_t *h = NULL;
            assert_int_equal(patina_index_range(ctx, idx, bad, 1, 1.0, &so, &h, &count), PATINA_E_INVALID);
            assert_null(h);
        }
        {
            const uint64_t id = 5;
            assert_int_equal(patina_index_put(idx, &id, bad, 1), PATINA_E_INVALID);
            assert_int_equal(patina_index_size(idx), N);
        }
        free(bad);
    }
    patina_index_free(idx);
    patina_index_free(empty);
    for (size_t i = 0; i < N; i++) patina_image_release(&imgs[i]);
    free(descs);
    free(queries);
    patina_context_free(ctx);
    patina_extractor_free(ex);
}

/* ------------------------------------------------------------------ CLI */

/* Runs the CLI; returns its exit status, stdout and stderr in *out, *err. */
static int cli(char **out, char **err, const char *const *args)
{
    const char *argv[16];
    size_t n = 0;
    argv[n++] = PATINA_CLI;
    while (*args && n < 15) argv[n++] = *args++;
    argv[n] = NULL;
    return tu_exec(out, err, 0, 120, argv);
}

#define SPEC "signature:k=16,samples=400,seeds=100"

static void test_cli(void **state)
{
    char *dir = tu_tempdir("signature-cli"), *out = NULL, *err = NULL, img0[4096], dup[4096], coll[4096];
    const char *dirs;
    int rc;
    (void)state;
    dirs = tu_path(dir, "images");
    assert_int_equal(tu_run(NULL, "mkdir -p '%s'", dirs), 0);
    for (int i = 0; i < 6; i++) tu_write_jpeg(tu_path(dirs, "img%d.jpg", i), 60 + 13 * i, 50 + 7 * i, i % 3, 90, 100 + (uint64_t)i);
    snprintf(img0, sizeof img0, "%s", tu_path(dirs, "img0.jpg"));
    snprintf(dup, sizeof dup, "%s", tu_path(dirs, "img0_copy.jpg"));
    tu_write_jpeg(dup, 60, 50, 0, 90, 100); /* the same bytes as img0 */
    snprintf(coll, sizeof coll, "%s", tu_path(dir, "c.patina"));

    rc = cli(&out, &err, (const char *const[]){"index", coll, dirs, "-f", SPEC, "-q", NULL});
    if (rc != 0) fail_msg("index: %d: %s", rc, err ? err : "");
    free(out);
    free(err);
    /* k-NN: the query and its copy at 0, by id (img0 before img0_copy, in walk order) */
    rc = cli(&out, &err, (const char *const[]){"search", coll, img0, "-f", SPEC, "-k", "3", "--format", "csv", NULL});
    if (rc != 0) fail_msg("search: %d: %s", rc, err ? err : "");
    {
        char want[5 * 4096 + 64];
        /* keys: the files' paths relative to the collection's root, dir */
        snprintf(want, sizeof want, "%s,1,images/img0.jpg,0\n%s,2,images/img0_copy.jpg,0\n%s,3,", img0, img0, img0);
        if (strncmp(out, want, strlen(want)) != 0) fail_msg("search -k 3 printed:\n%s", out);
    }
    free(out);
    free(err);
    /* range 0: exactly the two copies */
    rc = cli(&out, &err, (const char *const[]){"search", coll, img0, "-f", SPEC, "--range", "0", "--format", "csv", NULL});
    assert_int_equal(rc, 0);
    {
        char want[5 * 4096 + 64];
        snprintf(want, sizeof want, "%s,1,images/img0.jpg,0\n%s,2,images/img0_copy.jpg,0\n", img0, img0);
        assert_string_equal(out, want);
    }
    free(out);
    free(err);
    /* extract: one CSV line per centroid (PATH,COUNT,I, then 8 values), or one JSON object */
    rc = cli(&out, &err, (const char *const[]){"extract", "-f", SPEC, img0, NULL});
    assert_int_equal(rc, 0);
    {
        const char *p = out + strlen(img0) + 1;
        long count = strtol(p, NULL, 10), lines = 0, commas = 0;
        for (p = out; *p; p++) {
            lines += *p == '\n';
            commas += *p == ',';
        }
        assert_true(count >= 1 && count <= 16);
        assert_int_equal(lines, count);
        assert_int_equal(commas, 10 * count);
    }
    free(out);
    free(err);
    rc = cli(&out, &err, (const char *const[]){"extract", "-f", SPEC, "--format", "json", img0, NULL});
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "\"form\":\"gaussian\",\"centroids\":[{\"weight\":"));
    free(out);
    free(err);
    /* bad options: usage errors that say what */
    rc = cli(&out, &err, (const char *const[]){"search", coll, img0, "-f", "signature:k=0", NULL});
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "'k'=0"));
    free(out);
    free(err);
    rc = cli(&out, &err, (const char *const[]){"index", coll, dirs, "-f", "signature:alpha=0", "-q", NULL});
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "alpha=0 must be > 0"));
    free(out);
    free(err);
    /* a stored record with a NaN weight, then an empty one: the table is corrupt (exit 3, says why) */
    for (int bad = 0; bad < 2; bad++) {
        patina_collection_t *c;
        patina_extractor_t *ex = ex_new(SPEC);
        float *rec = calloc(1, patina_extractor_bytes(ex)), rows[8] = {0.5f, 0.1f, 0.2f, 0.3f, 0, 0, 0, 0};
        patina_insert_t item;
        TU_OK(patina_signature_pack(ex, rec, rows, 1));
        if (bad == 0) rec[8] = NAN;
        else rec[0] = 0.0f;
        memset(&item, 0, sizeof item);
        item.key = "bad-record";
        item.size = (uint64_t)bad + 1;
        item.sha256[0] = (uint8_t)(bad + 1);
        item.desc = rec;
        TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_WRITE, 0));
        TU_OK(patina_collection_put(c, patina_extractor_spec(ex), patina_extractor_bytes(ex), &item, 1, NULL));
        patina_collection_close(c);
        rc = cli(&out, &err, (const char *const[]){"search", coll, img0, "-f", SPEC, NULL});
        assert_int_equal(rc, 3);
        assert_non_null(strstr(err, bad == 0 ? "weight nan" : "empty signature"));
        assert_non_null(strstr(err, "stored table"));
        free(out);
        free(err);
        free(rec);
        patina_extractor_free(ex);
    }
    tu_remove_tree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_options),       cmocka_unit_test(test_plan),
        cmocka_unit_test(test_extract),       cmocka_unit_test(test_crop),
        cmocka_unit_test(test_sqfd_definition), cmocka_unit_test(test_bad_records),
        cmocka_unit_test(test_search),        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_sqfd_self),     cmocka_unit_test(test_search_updates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
