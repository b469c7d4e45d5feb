/* SQFD on the GPU (src/gpu/sqfd.cu, driven by src/search/knn.c) against
 * the C reference:
 *   - the kernels' bound: for every (query, row) pair of random and
 *     extracted signatures (counts 1..K, zero weights, duplicates, every
 *     form, alpha 3, 0.2, 0.01 and 1), the float estimate S' is within its
 *     bound E of the reference's S = (Sqq + Soo) - 2 Sqo (sig_self,
 *     sig_cross: the CPU's doubles); the worst |S' - S| / E is printed;
 *   - k-NN through patina_index_knn, device GPU against device CPU, bit for
 *     bit (ids, distance bits, counts, padding): empty index, one row, k > N,
 *     k = 1 .. 1024, sizes below and above the pilot (8192 rows), ties by id
 *     (duplicated rows, shuffled ids), queries in batches;
 *   - range search (radius 0, around the 13th nearest, everything) with and
 *     without max_hits;
 *   - what the GPU leaves to the CPU: a query of another alpha, rows of two
 *     alphas, features outside the domain (|x| > 2^40), massive exact ties
 *     (candidate lists overflow: the whole-table pilot, then the CPU) --
 *     the answers stay the CPU's;
 *   - live updates (put, replace, remove) between GPU searches;
 *   - the pivot tables' GPU strategies (the paper's pipeline: query-to-pivot
 *     distances on the GPU, the CPU's bounds, blocks of rows to the GPU; and
 *     the GPU filter: the bounds on the GPU) against the CPU scan, bit for
 *     bit: metric, ptolemaic and no bound, k-NN and range, alpha 3, 0.2,
 *     0.01 and the heuristic form, with puts and removals between.
 * Skipped (77) without a GPU. PATINA_TEST_QUICK=1 (compute-sanitizer): a
 * smaller set; 2 (racecheck): tiny. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "features/signature.h"
#include "gpu/gpu.h"
#include "patina/patina.h"
#include "testutil.h"

static patina_context_t *CTX;
static int QUICK;
static patina_search_stats_t LAST;

static patina_extractor_t *ex_new(const char *spec)
{
    patina_extractor_t *ex = NULL;
    TU_OK(patina_extractor_new(&ex, spec));
    return ex;
}

/* n records of ex (K rows): counts 1..K (some K), clustered features (a few
 * scenes plus noise), some zero weights, ~dup% duplicates of earlier rows. */
static float *make_records(const patina_extractor_t *ex, size_t n, unsigned dup, tu_rng_t *r)
{
    const size_t dim = patina_extractor_dim(ex), K = (dim - 8) / 8;
    float *recs = malloc((n ? n : 1) * dim * sizeof *recs), *rows = malloc(K * 8 * sizeof *rows);
    float scenes[8][8 * 8];
    assert_true(recs && rows);
    for (int s = 0; s < 8; s++)
        for (int i = 0; i < 64; i++) scenes[s][i] = (float)tu_rng_below(r, 10000) / 10000.0f;
    for (size_t i = 0; i < n; i++) {
        size_t c = i % 11 == 0 ? K : 1 + tu_rng_below(r, (uint32_t)K);
        const float *sc = scenes[tu_rng_below(r, 8)];
        if (i > 0 && tu_rng_below(r, 100) < dup) {
            memcpy(recs + i * dim, recs + tu_rng_below(r, (uint32_t)i) * dim, dim * sizeof *recs);
            continue;
        }
        for (size_t j = 0; j < c; j++) {
            const float *base = sc + 8 * (j % 8);
            rows[8 * j] = (float)(1 + tu_rng_below(r, 1000)) / 1000.0f;
            if (tu_rng_below(r, 20) == 0) rows[8 * j] = 0.0f; /* a zero weight */
            for (int k = 1; k < 8; k++) rows[8 * j + k] = base[k] + (float)tu_rng_below(r, 2001) / 10000.0f - 0.1f;
        }
        TU_OK(patina_signature_pack(ex, recs + i * dim, rows, c));
    }
    free(rows);
    return recs;
}

/* ids 1 + 5i, shuffled: ties must follow ids, not rows */
static uint64_t *make_ids(size_t n, tu_rng_t *r)
{
    uint64_t *ids = malloc((n ? n : 1) * sizeof *ids);
    for (size_t i = 0; i < n; i++) ids[i] = 1 + 5 * (uint64_t)i;
    for (size_t i = n; i > 1; i--) {
        const size_t j = tu_rng_below(r, (uint32_t)i);
        const uint64_t t = ids[i - 1];
        ids[i - 1] = ids[j];
        ids[j] = t;
    }
    return ids;
}

/* GPU k-NN against CPU k-NN: the number of differing slots (first few printed). */
static size_t compare_knn(const patina_index_t *idx, const float *queries, size_t nq, size_t k)
{
    patina_hit_t *a = malloc(nq * k * sizeof *a), *b = malloc(nq * k * sizeof *b);
    size_t *ca = malloc(nq * sizeof *ca), *cb = malloc(nq * sizeof *cb), bad = 0;
    patina_search_opts_t cpu, gpu;
    patina_search_opts_init(&cpu);
    patina_search_opts_init(&gpu);
    cpu.device = PATINA_DEVICE_CPU;
    gpu.device = PATINA_DEVICE_GPU;
    gpu.stats = &LAST;
    assert_true(a && b && ca && cb);
    TU_OK(patina_index_knn(CTX, idx, queries, nq, k, &cpu, a, ca));
    TU_OK(patina_index_knn(CTX, idx, queries, nq, k, &gpu, b, cb));
    for (size_t q = 0; q < nq; q++) {
        assert_int_equal(ca[q], cb[q]);
        for (size_t i = 0; i < k; i++) {
            const patina_hit_t *x = &a[q * k + i], *y = &b[q * k + i];
            if (x->id != y->id || memcmp(&x->distance, &y->distance, sizeof(double)) != 0) {
                if (bad < 5)
                    printf("  n %zu k %zu query %zu rank %zu: cpu id %llu %.17g, gpu id %llu %.17g\n",
                           patina_index_size(idx), k, q, i, (unsigned long long)x->id, x->distance,
                           (unsigned long long)y->id, y->distance);
                bad++;
            }
        }
    }
    free(a);
    free(b);
    free(ca);
    free(cb);
    return bad;
}

/* GPU range against CPU range (max_hits as given): differing queries. */
static size_t compare_range(const patina_index_t *idx, const float *queries, size_t nq, double radius, size_t max_hits,
                            size_t *total)
{
    patina_hit_t **a = calloc(nq, sizeof *a), **b = calloc(nq, sizeof *b);
    size_t *ca = calloc(nq, sizeof *ca), *cb = calloc(nq, sizeof *cb), bad = 0;
    patina_search_opts_t cpu, gpu;
    patina_search_opts_init(&cpu);
    patina_search_opts_init(&gpu);
    cpu.device = PATINA_DEVICE_CPU;
    cpu.max_hits = gpu.max_hits = max_hits;
    gpu.device = PATINA_DEVICE_GPU;
    gpu.stats = &LAST;
    TU_OK(patina_index_range(CTX, idx, queries, nq, radius, &cpu, a, ca));
    TU_OK(patina_index_range(CTX, idx, queries, nq, radius, &gpu, b, cb));
    for (size_t q = 0; q < nq; q++) {
        int same = ca[q] == cb[q];
        for (size_t i = 0; same && i < ca[q]; i++)
            same = a[q][i].id == b[q][i].id && !memcmp(&a[q][i].distance, &b[q][i].distance, sizeof(double));
        if (!same) {
            if (bad < 5) printf("  range %.17g query %zu: cpu %zu hits, gpu %zu\n", radius, q, ca[q], cb[q]);
            bad++;
        }
        if (total) *total += ca[q];
        free(a[q]);
        free(b[q]);
    }
    free(a);
    free(b);
    free(ca);
    free(cb);
    return bad;
}

/* ------------------------------------------------------------- the bound */

static void check_bound(const char *spec, const float *recs, size_t n, const float *queries, size_t nq,
                        double *worst)
{
    patina_extractor_t *ex = ex_new(spec);
    const size_t dim = patina_extractor_dim(ex);
    double *self = malloc(n * sizeof *self), *sqq = malloc(nq * sizeof *sqq);
    double *s = malloc(nq * n * sizeof *s), *e = malloc(nq * n * sizeof *e);
    pgpu_sqfd_index_t v;
    patina_gpu_t *g = NULL;
    size_t bad = 0;
    assert_true(self && sqq && s && e);
    for (size_t i = 0; i < n; i++) self[i] = sig_self(recs + i * dim);
    for (size_t q = 0; q < nq; q++) sqq[q] = sig_self(queries + q * dim);
    memset(&v, 0, sizeof v);
    v.serial = 0x5100000000ull + (uint64_t)n * 31 + nq; /* a test's own name for the copy */
    v.n = n;
    v.dim = dim;
    v.recs = recs;
    v.self = self;
    TU_OK(patina_gpu_open(&g, 0, 0));
    TU_OK(patina_gpu_sqfd_pairs(g, &v, queries, sqq, nq, s, e));
    patina_gpu_close(g);
    for (size_t q = 0; q < nq; q++)
        for (size_t r = 0; r < n; r++) {
            const float *qr = queries + q * dim, *o = recs + r * dim;
            const double ref = sqq[q] + self[r] - 2.0 * sig_cross(qr, o), x = s[q * n + r], b = e[q * n + r];
            const double mag = fabs(sqq[q]) + fabs(self[r]) + 2.0 * fabs(sig_cross(qr, o));
            if (!(fabs(x - ref) <= b) || !(b <= 1e-4 * mag + 1e-15)) {
                if (bad++ < 5)
                    printf("  %s query %zu row %zu: gpu %.17g, reference %.17g, bound %.3g (magnitude %.3g)\n", spec,
                           q, r, x, ref, b, mag);
            } else if (b > 0 && fabs(x - ref) / b > *worst) {
                *worst = fabs(x - ref) / b;
            }
        }
    assert_int_equal(bad, 0);
    free(self);
    free(sqq);
    free(s);
    free(e);
    patina_extractor_free(ex);
}

static void test_bound(void **state)
{
    static const char *const specs[] = {
        "signature:k=40,alpha=3",           "signature:k=40,alpha=0.2",           "signature:k=40,alpha=0.01",
        "signature:k=40,alpha=1",           "signature:k=64,form=heuristic,alpha=1", "signature:k=12,form=heuristic,alpha=0.2",
        "signature:k=40,form=minus",        "signature:k=1,alpha=0.2",            "signature:k=100,alpha=0.01"};
    const size_t n = QUICK ? (QUICK > 1 ? 40 : 150) : 700, nq = QUICK > 1 ? 3 : 9;
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 1801);
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
        patina_extractor_t *ex = ex_new(specs[i]);
        float *recs = make_records(ex, n, 5, &r), *qs = make_records(ex, nq, 0, &r);
        double worst = 0.0;
        memcpy(qs, recs, patina_extractor_bytes(ex)); /* a query equal to a row: S = 0 */
        check_bound(specs[i], recs, n, qs, nq, &worst);
        print_message("%-42s worst |S' - S| / E = %.3g\n", specs[i], worst);
        free(recs);
        free(qs);
        patina_extractor_free(ex);
    }
    {   /* signatures extracted from images (real-ish: k-means of image samples) */
        patina_extractor_t *ex = ex_new("signature:k=48,samples=600,seeds=150,alpha=0.2");
        const size_t m = QUICK > 1 ? 6 : 24, bytes = patina_extractor_bytes(ex);
        float *recs = malloc(m * bytes);
        patina_image_t *imgs = calloc(m, sizeof *imgs);
        patina_status *st = calloc(m, sizeof *st);
        double worst = 0.0;
        for (size_t i = 0; i < m; i++)
            tu_random_image(&imgs[i], 40 + (int)tu_rng_below(&r, 80), 30 + (int)tu_rng_below(&r, 80), (int)(i % 4), &r);
        TU_OK(patina_extract_batch(CTX, ex, PATINA_DEVICE_CPU, recs, imgs, m, st));
        check_bound("signature:k=48,samples=600,seeds=150,alpha=0.2", recs, m, recs, m, &worst);
        print_message("%-42s worst |S' - S| / E = %.3g\n", "extracted signatures, alpha 0.2", worst);
        for (size_t i = 0; i < m; i++) patina_image_release(&imgs[i]);
        free(imgs);
        free(st);
        free(recs);
        patina_extractor_free(ex);
    }
}

/* ----------------------------------------------------------------- k-NN */

static void test_knn(void **state)
{
    static const char *const specs[] = {"signature:k=40,alpha=0.2", "signature:k=40,alpha=3",
                                        "signature:k=40,alpha=0.01", "signature:k=24,form=heuristic,alpha=1",
                                        "signature:k=24,form=minus"};
    static const size_t ns[] = {0, 1, 5, 300, 9000, 20000};
    static const size_t ks[] = {1, 10, 100, 1024};
    const size_t nspec = QUICK ? 2 : sizeof specs / sizeof *specs, nn = QUICK ? 4 : 6, nk = QUICK ? 2 : 4,
                 nq = QUICK ? 3 : 17;
    tu_rng_t r;
    size_t bad = 0;
    (void)state;
    tu_rng_seed(&r, 1802);
    for (size_t si = 0; si < nspec; si++) {
        patina_extractor_t *ex = ex_new(specs[si]);
        for (size_t a = 0; a < nn; a++) {
            const size_t n = ns[a];
            float *recs = make_records(ex, n, 4, &r), *qs = make_records(ex, nq, 0, &r);
            uint64_t *ids = make_ids(n, &r);
            patina_index_t *idx;
            if (n) memcpy(qs, recs + (n / 2) * patina_extractor_dim(ex), patina_extractor_bytes(ex)); /* a row */
            TU_OK(patina_index_new(&idx, ex, ids, recs, n));
            for (size_t b = 0; b < nk; b++) {
                const size_t k = ks[b];
                size_t d = compare_knn(idx, qs, nq, k);
                if (d) printf("  %s n %zu k %zu: %zu differences\n", specs[si], n, k, d);
                bad += d;
                if (n) assert_int_equal(LAST.gpu_filter + LAST.cpu, nq);
            }
            patina_index_free(idx);
            free(recs);
            free(qs);
            free(ids);
        }
        patina_extractor_free(ex);
    }
    assert_int_equal(bad, 0);
}

/* The stats say the GPU answered (used where nothing sends a query to the CPU). */
static void assert_gpu_answered(size_t nq)
{
    if (LAST.gpu_filter != nq) fail_msg("the GPU answered %zu of %zu queries", LAST.gpu_filter, nq);
}

static void test_ties(void **state)
{
    /* 3 distinct signatures copied over n rows: at distance 0 from a query
     * equal to one of them, a third of the table ties; ranks by id */
    patina_extractor_t *ex = ex_new("signature:k=16,alpha=0.2");
    const size_t n = QUICK ? 3000 : 15000, dim = patina_extractor_dim(ex), nq = 4;
    tu_rng_t r;
    float *base, *recs = malloc(n * dim * sizeof *recs), *qs;
    uint64_t *ids;
    patina_index_t *idx;
    size_t bad = 0;
    (void)state;
    tu_rng_seed(&r, 1803);
    base = make_records(ex, 3, 0, &r);
    qs = make_records(ex, nq, 0, &r);
    memcpy(qs, base + dim, dim * sizeof *qs);
    for (size_t i = 0; i < n; i++) memcpy(recs + i * dim, base + (i % 3) * dim, dim * sizeof *recs);
    ids = make_ids(n, &r);
    TU_OK(patina_index_new(&idx, ex, ids, recs, n));
    bad += compare_knn(idx, qs, nq, 1);
    bad += compare_knn(idx, qs, nq, 10);   /* candidate lists overflow: pilot = table, then the CPU */
    bad += compare_knn(idx, qs, nq, 1024);
    bad += compare_range(idx, qs, nq, 0.0, 0, NULL);
    bad += compare_range(idx, qs, nq, 0.0, 7, NULL);
    print_message("ties: the GPU answered %zu of %zu queries of the last call\n", LAST.gpu_filter, nq);
    assert_int_equal(bad, 0);
    patina_index_free(idx);
    free(base);
    free(recs);
    free(qs);
    free(ids);
    patina_extractor_free(ex);
}

/* ---------------------------------------------------------------- range */

static void test_range(void **state)
{
    static const char *const specs[] = {"signature:k=40,alpha=0.2", "signature:k=40,alpha=0.01",
                                        "signature:k=24,form=heuristic,alpha=1", "signature:k=24,form=minus"};
    const size_t n = QUICK ? 2000 : 12000, nq = QUICK > 1 ? 2 : 9, nspec = QUICK ? 2 : 4;
    tu_rng_t r;
    size_t bad = 0;
    (void)state;
    tu_rng_seed(&r, 1804);
    for (size_t si = 0; si < nspec; si++) {
        patina_extractor_t *ex = ex_new(specs[si]);
        float *recs = make_records(ex, n, 3, &r), *qs = make_records(ex, nq, 0, &r);
        uint64_t *ids = make_ids(n, &r);
        patina_index_t *idx;
        patina_hit_t hits[13];
        size_t counts[9], total = 0;
        patina_search_opts_t cpu;
        double radius;
        patina_search_opts_init(&cpu);
        cpu.device = PATINA_DEVICE_CPU;
        memcpy(qs, recs, patina_extractor_bytes(ex));
        TU_OK(patina_index_new(&idx, ex, ids, recs, n));
        TU_OK(patina_index_knn(CTX, idx, qs + patina_extractor_dim(ex), 1, 13, &cpu, hits, counts));
        radius = hits[12].distance; /* query 1's 13th nearest: a radius with ties at its edge */
        bad += compare_range(idx, qs, nq, radius, 0, &total);
        assert_gpu_answered(nq);
        bad += compare_range(idx, qs, nq, radius, 5, NULL);
        bad += compare_range(idx, qs, nq, 0.0, 0, NULL);
        bad += compare_range(idx, qs, nq, nextafter(radius, 0.0), 0, NULL);
        bad += compare_range(idx, qs, nq, radius * 0.5, 0, NULL);
        if (!QUICK) bad += compare_range(idx, qs, 2, 1e30, 0, NULL); /* everything: the whole table as candidates */
        print_message("%s: range %.6g, %zu hits for %zu queries\n", specs[si], radius, total, nq);
        patina_index_free(idx);
        free(recs);
        free(qs);
        free(ids);
        patina_extractor_free(ex);
    }
    assert_int_equal(bad, 0);
}

/* ---------------------------------------------- what the GPU leaves alone */

static void test_domain(void **state)
{
    patina_extractor_t *ex = ex_new("signature:k=16,alpha=0.2"), *ex2 = ex_new("signature:k=16,alpha=3");
    const size_t n = QUICK ? 1000 : 5000, dim = patina_extractor_dim(ex), nq = 3;
    tu_rng_t r;
    float *recs, *qs, *other;
    uint64_t *ids;
    patina_index_t *idx;
    size_t bad = 0;
    (void)state;
    tu_rng_seed(&r, 1805);
    recs = make_records(ex, n, 2, &r);
    qs = make_records(ex, nq, 0, &r);
    other = make_records(ex2, nq, 0, &r);
    ids = make_ids(n, &r);
    TU_OK(patina_index_new(&idx, ex, ids, recs, n));
    /* a query of another alpha: NaN distances, the CPU's */
    memcpy(qs + dim, other, dim * sizeof *qs);
    bad += compare_knn(idx, qs, nq, 10);
    assert_int_equal(LAST.cpu, 1);
    bad += compare_range(idx, qs, nq, 0.3, 0, NULL);
    patina_index_free(idx);
    /* rows of two alphas: the whole call is the CPU's */
    memcpy(recs + 7 * dim, other, dim * sizeof *recs);
    TU_OK(patina_index_new(&idx, ex, ids, recs, n));
    bad += compare_knn(idx, qs, nq, 10);
    assert_int_equal(LAST.cpu, nq);
    patina_index_free(idx);
    /* a feature beyond 2^40 */
    memcpy(recs + 7 * dim, recs + 8 * dim, dim * sizeof *recs);
    recs[7 * dim + 8 + 3] = 3e12f;
    TU_OK(patina_index_new(&idx, ex, ids, recs, n));
    bad += compare_knn(idx, qs, nq, 10);
    assert_int_equal(LAST.cpu, nq);
    patina_index_free(idx);
    assert_int_equal(bad, 0);
    free(recs);
    free(qs);
    free(other);
    free(ids);
    patina_extractor_free(ex);
    patina_extractor_free(ex2);
}

/* ----------------------------------------------------------- live updates */

static void test_live(void **state)
{
    patina_extractor_t *ex = ex_new("signature:k=24,alpha=0.2");
    const size_t n = QUICK ? 2000 : 10000, dim = patina_extractor_dim(ex), nq = 5;
    tu_rng_t r;
    float *recs, *more, *qs;
    uint64_t *ids, *mids;
    patina_index_t *idx;
    size_t bad = 0, removed = 0;
    (void)state;
    tu_rng_seed(&r, 1806);
    recs = make_records(ex, n, 2, &r);
    more = make_records(ex, 500, 2, &r);
    qs = make_records(ex, nq, 0, &r);
    ids = make_ids(n, &r);
    mids = malloc(500 * sizeof *mids);
    for (size_t i = 0; i < 500; i++) mids[i] = i < 100 ? ids[i] : 1000000 + i; /* 100 replacements */
    TU_OK(patina_index_new(&idx, ex, ids, recs, n));
    bad += compare_knn(idx, qs, nq, 10); /* the copy is made */
    memcpy(qs, more + 3 * dim, dim * sizeof *qs);
    TU_OK(patina_index_put(idx, mids, more, 500));
    bad += compare_knn(idx, qs, nq, 10); /* remade: more rows */
    TU_OK(patina_index_remove(idx, ids + 200, 300, &removed));
    assert_int_equal(removed, 300);
    bad += compare_knn(idx, qs, nq, 10); /* remade: removed rows */
    bad += compare_range(idx, qs, nq, 0.2, 0, NULL);
    TU_OK(patina_index_remove(idx, mids, 500, &removed)); /* a compaction */
    bad += compare_knn(idx, qs, nq, 10);
    assert_int_equal(bad, 0);
    patina_index_free(idx);
    free(recs);
    free(more);
    free(qs);
    free(ids);
    free(mids);
    patina_extractor_free(ex);
}

/* An index over the context's device budget: its layout kept in pinned
 * host memory and streamed chunk by chunk under the scans (copy stream and
 * compute stream; a resident strided sample is the k-NN pilot). k-NN (k 1,
 * 10, 100) and range equal the CPU's, through two chunks or more. */
static void test_streamed(void **state)
{
    patina_extractor_t *ex = ex_new("signature:k=24,alpha=0.2");
    const size_t n = QUICK ? 16000 : 32000, dim = patina_extractor_dim(ex), nq = 6;
    patina_context_t *ctx, *keep = CTX;
    patina_context_opts_t co;
    patina_search_opts_t o;
    patina_hit_t h[10];
    size_t c1, bad = 0;
    tu_rng_t r;
    float *recs, *qs;
    uint64_t *ids;
    patina_index_t *idx;
    (void)state;
    tu_rng_seed(&r, 2718);
    recs = make_records(ex, n, 2, &r);
    qs = make_records(ex, nq, 0, &r);
    memcpy(qs + dim, recs + 7 * dim, dim * sizeof *qs); /* a query equal to a row */
    ids = make_ids(n, &r);
    TU_OK(patina_index_new(&idx, ex, ids, recs, n));
    /* the resident copy: ~790 bytes a row (24 centroid slots); the budget a third of it and the
     * call buffers */
    patina_context_opts_init(&co);
    co.gpu_mem_budget = n * 256 + (6u << 20);
    TU_OK(patina_context_new(&ctx, &co));
    CTX = ctx; /* compare_knn / compare_range search CTX */
    for (size_t k = 1; k <= 100; k *= 10) {
        bad += compare_knn(idx, qs, nq, k);
        if (LAST.chunks < 2 || LAST.host_bytes == 0 || LAST.gpu_filter != nq) {
            printf("  streamed k %zu: %zu chunks, %zu bytes, %zu of %zu queries on the GPU\n", k, LAST.chunks,
                   LAST.host_bytes, LAST.gpu_filter, nq);
            bad++;
        }
    }
    patina_search_opts_init(&o);
    o.device = PATINA_DEVICE_CPU;
    TU_OK(patina_index_knn(keep, idx, qs, 1, 10, &o, h, &c1));
    bad += compare_range(idx, qs, nq, h[9].distance, 0, NULL);
    if (LAST.chunks < 2) bad++;
    CTX = keep;
    printf("  streamed: %zu differing\n", bad);
    assert_int_equal(bad, 0);
    patina_context_free(ctx);
    patina_index_free(idx);
    free(recs);
    free(qs);
    free(ids);
    patina_extractor_free(ex);
}

/* ------------------------------------------------------- pivot strategies */

static size_t compare_pivots(const patina_index_t *idx, const patina_pivot_index_t *pi, const float *qs, size_t nq,
                             size_t k, double radius, const char *what)
{
    static const patina_pivot_strategy strat[] = {PATINA_PIVOT_CPU, PATINA_PIVOT_PIPELINE, PATINA_PIVOT_GPU};
    static const patina_pivot_bound bounds[] = {PATINA_BOUND_PTOLEMAIC, PATINA_BOUND_METRIC, PATINA_BOUND_NONE};
    static const char *const sn[] = {"cpu", "pipeline", "gpu filter"}, *const bn[] = {"ptolemaic", "metric", "none"};
    patina_hit_t *a = malloc(nq * k * sizeof *a), *b = malloc(nq * k * sizeof *b), **ra = calloc(nq, sizeof *ra),
                 **rb = calloc(nq, sizeof *rb);
    size_t *ca = malloc(nq * sizeof *ca), *cb = malloc(nq * sizeof *cb), *rca = calloc(nq, sizeof *rca),
           *rcb = calloc(nq, sizeof *rcb), bad = 0;
    patina_search_opts_t cpu;
    patina_search_opts_init(&cpu);
    cpu.device = PATINA_DEVICE_CPU;
    TU_OK(patina_index_knn(CTX, idx, qs, nq, k, &cpu, a, ca));
    TU_OK(patina_index_range(CTX, idx, qs, nq, radius, &cpu, ra, rca));
    for (int si = 0; si < 3; si++)
        for (int bi = 0; bi < 3; bi++) {
            patina_pivot_search_opts_t o;
            patina_search_stats_t st;
            patina_pivot_search_opts_init(&o);
            o.strategy = strat[si];
            o.bound = bounds[bi];
            o.stats = &st;
            TU_OK(patina_pivot_index_knn(CTX, pi, qs, nq, k, &o, b, cb));
            for (size_t q = 0; q < nq; q++) {
                int same = ca[q] == cb[q] && !memcmp(a + q * k, b + q * k, ca[q] * sizeof *a);
                if (!same && bad++ < 5)
                    printf("  %s %s %s k %zu query %zu: first cpu id %llu %.17g, %s id %llu %.17g\n", what, sn[si],
                           bn[bi], k, q, (unsigned long long)a[q * k].id, a[q * k].distance, sn[si],
                           (unsigned long long)b[q * k].id, b[q * k].distance);
            }
            if (bi == 0)
                print_message("%s %s k-NN k %zu: %.1f%% pruned, %zu queries on the GPU\n", what, sn[si], k,
                              100.0 * (double)st.pruned / ((double)nq * (double)patina_pivot_index_size(pi)), st.gpu_filter);
            if (si > 0 && bi < 2 && st.gpu_filter != nq) {
                printf("  %s %s: the GPU answered %zu of %zu queries\n", what, sn[si], st.gpu_filter, nq);
                bad++;
            }
            TU_OK(patina_pivot_index_range(CTX, pi, qs, nq, radius, &o, rb, rcb));
            for (size_t q = 0; q < nq; q++) {
                int same = rca[q] == rcb[q] && (!rca[q] || !memcmp(ra[q], rb[q], rca[q] * sizeof **ra));
                if (!same && bad++ < 5)
                    printf("  %s %s %s range %.6g query %zu: cpu %zu hits, %s %zu\n", what, sn[si], bn[bi], radius, q,
                           rca[q], sn[si], rcb[q]);
                free(rb[q]);
                rb[q] = NULL;
            }
        }
    for (size_t q = 0; q < nq; q++) free(ra[q]);
    free(a);
    free(b);
    free(ra);
    free(rb);
    free(ca);
    free(cb);
    free(rca);
    free(rcb);
    return bad;
}

static void test_pivots(void **state)
{
    static const char *const specs[] = {"signature:k=24,alpha=0.2", "signature:k=24,alpha=3",
                                        "signature:k=24,alpha=0.01", "signature:k=24,form=heuristic,alpha=1"};
    const size_t n = QUICK ? 2500 : 12000, nq = QUICK > 1 ? 2 : 6, nspec = QUICK ? 2 : 4;
    tu_rng_t r;
    size_t bad = 0;
    (void)state;
    tu_rng_seed(&r, 1807);
    for (size_t si = 0; si < nspec; si++) {
        patina_extractor_t *ex = ex_new(specs[si]);
        const size_t dim = patina_extractor_dim(ex);
        float *recs = make_records(ex, n, 3, &r), *qs = make_records(ex, nq, 0, &r), *more = make_records(ex, 300, 0, &r);
        uint64_t *ids = make_ids(n, &r), mids[300];
        patina_index_t *idx;
        patina_pivot_index_t *pi;
        patina_pivot_opts_t po;
        patina_hit_t h13[13];
        size_t c13, removed;
        patina_search_opts_t cpu;
        patina_pivot_opts_init(&po);
        po.pivots = QUICK ? 8 : 16;
        patina_search_opts_init(&cpu);
        cpu.device = PATINA_DEVICE_CPU;
        memcpy(qs, recs + 5 * dim, dim * sizeof *qs); /* a query equal to a row */
        TU_OK(patina_index_new(&idx, ex, ids, recs, n));
        TU_OK(patina_pivot_index_new(&pi, CTX, ex, ids, recs, n, &po));
        TU_OK(patina_index_knn(CTX, idx, qs + dim, 1, 13, &cpu, h13, &c13));
        bad += compare_pivots(idx, pi, qs, nq, 10, h13[12].distance, specs[si]);
        if (!QUICK) {
            bad += compare_pivots(idx, pi, qs, nq, 1, h13[4].distance, specs[si]);
            bad += compare_pivots(idx, pi, qs, nq, 100, 0.0, specs[si]);
        }
        /* changes: the GPU copies follow (a new serial) */
        for (size_t i = 0; i < 300; i++) mids[i] = i < 50 ? ids[i] : 5000000 + i;
        TU_OK(patina_index_put(idx, mids, more, 300));
        TU_OK(patina_pivot_index_put(pi, CTX, mids, more, 300));
        TU_OK(patina_index_remove(idx, ids + 100, 200, &removed));
        TU_OK(patina_pivot_index_remove(pi, ids + 100, 200, &removed));
        bad += compare_pivots(idx, pi, qs, nq, 10, h13[12].distance, specs[si]);
        patina_pivot_index_free(pi);
        patina_index_free(idx);
        free(recs);
        free(qs);
        free(more);
        free(ids);
        patina_extractor_free(ex);
    }
    assert_int_equal(bad, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bound), cmocka_unit_test(test_knn),    cmocka_unit_test(test_ties),
        cmocka_unit_test(test_range), cmocka_unit_test(test_domain), cmocka_unit_test(test_live), cmocka_unit_test(test_streamed),
        cmocka_unit_test(test_pivots),
    };
    int rc;
    const char *quick = getenv("PATINA_TEST_QUICK");
    QUICK = quick && *quick ? atoi(quick) : 0;
    tu_require_gpu();
    if (patina_context_new(&CTX, NULL) != PATINA_OK) {
        fprintf(stderr, "test_sqfd_gpu: no context: %s\n", patina_last_error());
        return 1;
    }
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    patina_context_free(CTX);
    return rc;
}
