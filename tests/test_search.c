/* Exact k-NN and range search (src/search/knn.c, knn_search.c) against a brute-force
 * reference: every distance from patina_cedd_tanimoto, sorted by
 * (distance, id). Checks the CEDD fast path bit for bit on random, sparse
 * and degenerate descriptors, k = 1, the largest k, k > n (padding), the
 * empty index, ties by id, chunking across threads, range search with
 * radius 0 and larger, max_hits, threads = 1 vs 4, the generic-distance
 * path and loading from a collection. */
#define _GNU_SOURCE
#include "testutil.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "search/distance.h"
#include "search/knn.h"
#include "search/knn_simd.h"

/* The CPU search on a context of `threads` workers (0: no context, all
 * CPUs; negative: the context refuses). */
static patina_status with_ctx(patina_context_t **ctx, int threads)
{
    patina_context_opts_t co;
    *ctx = NULL;
    if (threads == 0) return PATINA_OK;
    patina_context_opts_init(&co);
    co.threads = threads;
    return patina_context_new(ctx, &co);
}

static patina_status knn_cpu(const patina_index_t *idx, const void *q, size_t nq, size_t k, int threads,
                             patina_hit_t *hits, size_t *counts)
{
    patina_context_t *ctx;
    patina_search_opts_t o;
    patina_status s;
    patina_search_opts_init(&o);
    o.device = PATINA_DEVICE_CPU;
    if ((s = with_ctx(&ctx, threads)) != PATINA_OK) return s;
    s = patina_index_knn(ctx, idx, q, nq, k, &o, hits, counts);
    patina_context_free(ctx);
    return s;
}

static patina_status range_cpu(const patina_index_t *idx, const void *q, size_t nq, double radius,
                               size_t max_hits, int threads, patina_hit_t **hits, size_t *counts)
{
    patina_context_t *ctx;
    patina_search_opts_t o;
    patina_status s;
    patina_search_opts_init(&o);
    o.device = PATINA_DEVICE_CPU;
    o.max_hits = max_hits;
    if ((s = with_ctx(&ctx, threads)) != PATINA_OK) return s;
    s = patina_index_range(ctx, idx, q, nq, radius, &o, hits, counts);
    patina_context_free(ctx);
    return s;
}

#define D PATINA_CEDD_DIM

static patina_extractor_t *cedd(void)
{
    patina_extractor_t *ex = NULL;
    TU_OK(patina_extractor_new(&ex, "cedd"));
    return ex;
}

/* A random CEDD-like descriptor (bins 0..7) of one of several kinds:
 * 0 dense, 1 sparse (~10% non-zero), 2 very sparse (1-3 bins), 3 empty,
 * 4 compact-like (bins >= 60 zero), 5 saturated (all 7). */
static void random_desc(uint8_t *d, tu_rng_t *r, int kind)
{
    int i;
    memset(d, 0, D);
    switch (kind) {
    case 0:
        for (i = 0; i < D; i++) d[i] = (uint8_t)tu_rng_below(r, 8);
        break;
    case 1:
        for (i = 0; i < D; i++)
            if (tu_rng_below(r, 10) == 0) d[i] = (uint8_t)(1 + tu_rng_below(r, 7));
        break;
    case 2:
        for (i = (int)tu_rng_below(r, 3); i >= 0; i--) d[tu_rng_below(r, D)] = (uint8_t)(1 + tu_rng_below(r, 7));
        break;
    case 3:
        break;
    case 4:
        for (i = 0; i < 60; i++)
            if (tu_rng_below(r, 4) == 0) d[i] = (uint8_t)tu_rng_below(r, 8);
        break;
    default:
        memset(d, 7, D);
    }
}

static int kind_of(tu_rng_t *r)
{
    uint32_t x = tu_rng_below(r, 100);
    return x < 40 ? 0 : x < 70 ? 1 : x < 85 ? 2 : x < 88 ? 3 : x < 97 ? 4 : 5;
}

typedef struct dataset {
    size_t n;
    uint64_t *ids;
    uint8_t *descs; /* (n, 144) */
} dataset_t;

/* n rows with shuffled, gapped ids; about 1 in 20 rows duplicates an
 * earlier one (ties at distance 0 and elsewhere). */
static dataset_t make_data(size_t n, uint64_t seed)
{
    dataset_t ds;
    tu_rng_t r;
    size_t i;
    tu_rng_seed(&r, seed);
    ds.n = n;
    ds.ids = malloc((n ? n : 1) * sizeof *ds.ids);
    ds.descs = malloc((n ? n : 1) * D);
    for (i = 0; i < n; i++) {
        ds.ids[i] = 1000 + 3 * i + tu_rng_below(&r, 3);
        if (i > 0 && tu_rng_below(&r, 20) == 0)
            memcpy(ds.descs + i * D, ds.descs + tu_rng_below(&r, (uint32_t)i) * D, D);
        else
            random_desc(ds.descs + i * D, &r, kind_of(&r));
    }
    /* shuffle rows (ids travel with their descriptors) */
    for (i = n; i > 1; i--) {
        size_t j = tu_rng_below(&r, (uint32_t)i);
        uint64_t t = ds.ids[i - 1];
        uint8_t tmp[D];
        ds.ids[i - 1] = ds.ids[j];
        ds.ids[j] = t;
        memcpy(tmp, ds.descs + (i - 1) * D, D);
        memcpy(ds.descs + (i - 1) * D, ds.descs + j * D, D);
        memcpy(ds.descs + j * D, tmp, D);
    }
    return ds;
}

static void free_data(dataset_t *ds)
{
    free(ds->ids);
    free(ds->descs);
}

/* Queries: some copies of rows, the rest random of every kind. */
static uint8_t *make_queries(const dataset_t *ds, size_t nq, uint64_t seed)
{
    uint8_t *q = malloc(nq * D);
    tu_rng_t r;
    size_t i;
    tu_rng_seed(&r, seed);
    for (i = 0; i < nq; i++) {
        if (ds->n && i % 3 == 0)
            memcpy(q + i * D, ds->descs + tu_rng_below(&r, (uint32_t)ds->n) * D, D);
        else
            random_desc(q + i * D, &r, i % 7 == 1 ? 3 : kind_of(&r));
    }
    return q;
}

static int ref_cmp(const void *a, const void *b)
{
    const patina_hit_t *x = a, *y = b;
    if (x->distance < y->distance) return -1;
    if (x->distance > y->distance) return 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Every row for one query, sorted by (distance, id): the reference. */
static patina_hit_t *brute(const dataset_t *ds, const uint8_t *q)
{
    patina_hit_t *h = malloc((ds->n ? ds->n : 1) * sizeof *h);
    size_t i;
    for (i = 0; i < ds->n; i++) {
        h[i].id = ds->ids[i];
        h[i].distance = patina_cedd_tanimoto(q, ds->descs + i * D);
    }
    qsort(h, ds->n, sizeof *h, ref_cmp);
    return h;
}

/* Hits equal the reference exactly: same ids in the same order and the
 * same doubles, bit for bit. */
static void expect_hits(const patina_hit_t *got, const patina_hit_t *want, size_t n, size_t q)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (got[i].id != want[i].id ||
            memcmp(&got[i].distance, &want[i].distance, sizeof(double)) != 0)
            fail_msg("query %zu hit %zu: got id %llu d %.17g, want id %llu d %.17g", q, i,
                     (unsigned long long)got[i].id, got[i].distance,
                     (unsigned long long)want[i].id, want[i].distance);
}

/* knn for all queries, checked against brute force, with the padding. */
static void check_knn(const patina_index_t *idx, const dataset_t *ds, const uint8_t *queries,
                      size_t nq, size_t k, int threads)
{
    patina_hit_t *hits = malloc(nq * k * sizeof *hits);
    size_t *counts = malloc(nq * sizeof *counts), q, i, want = k < ds->n ? k : ds->n;
    TU_OK(knn_cpu(idx, queries, nq, k, threads, hits, counts));
    for (q = 0; q < nq; q++) {
        patina_hit_t *ref = brute(ds, queries + q * D);
        assert_int_equal(counts[q], want);
        expect_hits(hits + q * k, ref, want, q);
        for (i = want; i < k; i++) {
            assert_int_equal(hits[q * k + i].id, 0);
            assert_true(isinf(hits[q * k + i].distance));
        }
        free(ref);
    }
    free(hits);
    free(counts);
}

static void check_range(const patina_index_t *idx, const dataset_t *ds, const uint8_t *queries,
                        size_t nq, double radius, size_t max_hits, int threads)
{
    patina_hit_t **hits = malloc(nq * sizeof *hits);
    size_t *counts = malloc(nq * sizeof *counts), q, m;
    TU_OK(range_cpu(idx, queries, nq, radius, max_hits, threads, hits, counts));
    for (q = 0; q < nq; q++) {
        patina_hit_t *ref = brute(ds, queries + q * D);
        for (m = 0; m < ds->n && ref[m].distance <= radius; m++) {}
        if (max_hits && m > max_hits) m = max_hits;
        assert_int_equal(counts[q], m);
        if (m == 0) assert_null(hits[q]);
        expect_hits(hits[q], ref, m, q);
        free(ref);
        free(hits[q]);
    }
    free(hits);
    free(counts);
}

/* ---------------------------------------------------------------- tests */

/* The fast path returns the same doubles as patina_cedd_tanimoto (and as
 * patina_extractor_distance) for every pair: k = n gives all of them. */
static void test_fast_path_bit_identical(void **state)
{
    patina_extractor_t *ex = cedd();
    dataset_t ds = make_data(2000, 1);
    uint8_t *queries = make_queries(&ds, 60, 2);
    patina_index_t *idx;
    patina_hit_t *hits = malloc(ds.n * sizeof *hits);
    size_t count, q, i, checked = 0;
    (void)state;
    TU_OK(patina_index_new(&idx, ex, ds.ids, ds.descs, ds.n));
    assert_int_equal(patina__index_fast_path(idx), 1);
    assert_int_equal(patina_index_size(idx), ds.n);
    for (q = 0; q < 60; q++) {
        const uint8_t *qd = queries + q * D;
        TU_OK(knn_cpu(idx, qd, 1, ds.n, 1, hits, &count));
        assert_int_equal(count, ds.n);
        for (i = 0; i < ds.n; i++) {
            size_t row;
            double a, b;
            for (row = 0; ds.ids[row] != hits[i].id; row++) {}
            a = patina_cedd_tanimoto(qd, ds.descs + row * D);
            b = patina_extractor_distance(ex, qd, ds.descs + row * D);
            if (memcmp(&a, &hits[i].distance, sizeof a) || memcmp(&b, &hits[i].distance, sizeof b))
                fail_msg("query %zu row %zu: fast %a, reference %a / %a", q, row,
                         hits[i].distance, a, b);
            checked++;
        }
    }
    print_message("%zu distances bit-identical to patina_cedd_tanimoto\n", checked);
    patina_index_free(idx);
    free(hits);
    free(queries);
    free_data(&ds);
    patina_extractor_free(ex);
}

static void test_knn_k_values(void **state)
{
    patina_extractor_t *ex = cedd();
    dataset_t ds = make_data(500, 3);
    uint8_t *queries = make_queries(&ds, 17, 4);
    patina_index_t *idx;
    (void)state;
    TU_OK(patina_index_new(&idx, ex, ds.ids, ds.descs, ds.n));
    check_knn(idx, &ds, queries, 17, 1, 1);      /* k = 1 */
    check_knn(idx, &ds, queries, 17, 10, 4);
    check_knn(idx, &ds, queries, 17, ds.n, 4);   /* the largest useful k */
    check_knn(idx, &ds, queries, 5, ds.n + 37, 2); /* k > n: n hits, padding */
    check_knn(idx, &ds, queries, 3, 1000000, 1);  /* the largest k allowed */
    patina_index_free(idx);
    free(queries);
    free_data(&ds);
    patina_extractor_free(ex);
}

static void test_bad_arguments(void **state)
{
    patina_extractor_t *ex = cedd();
    dataset_t ds = make_data(10, 5);
    patina_index_t *idx;
    patina_hit_t hits[4], *rh[1];
    size_t counts[1];
    uint64_t dup[3] = {1, 2, 1};
    (void)state;
    TU_OK(patina_index_new(&idx, ex, ds.ids, ds.descs, ds.n));
    assert_int_equal(knn_cpu(idx, ds.descs, 1, 0, 1, hits, counts), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "k = 0"));
    assert_int_equal(knn_cpu(idx, ds.descs, 1, 1000001, 1, hits, counts), PATINA_E_LIMIT);
    assert_int_equal(knn_cpu(idx, ds.descs, 1, 1, -1, hits, counts), PATINA_E_INVALID);
    assert_int_equal(knn_cpu(idx, NULL, 1, 1, 1, hits, counts), PATINA_E_INVALID);
    assert_int_equal(knn_cpu(NULL, ds.descs, 1, 1, 1, hits, counts), PATINA_E_INVALID);
    TU_OK(knn_cpu(idx, NULL, 0, 4, 1, NULL, NULL)); /* no queries: nothing to do */
    assert_int_equal(range_cpu(idx, ds.descs, 1, NAN, 0, 1, rh, counts), PATINA_E_INVALID);
    patina_index_free(idx);
    /* ids must be unique. */
    assert_int_equal(patina_index_new(&idx, ex, dup, ds.descs, 3), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "id 1 appears twice"));
    assert_null(idx);
    assert_int_equal(patina_index_new(&idx, ex, NULL, ds.descs, 3), PATINA_E_INVALID);
    patina_index_free(NULL);
    assert_int_equal(patina_index_size(NULL), 0);
    free_data(&ds);
    patina_extractor_free(ex);
}

static void test_empty_index(void **state)
{
    patina_extractor_t *ex = cedd();
    dataset_t ds = make_data(0, 6);
    uint8_t *queries = make_queries(&ds, 3, 7);
    patina_index_t *idx;
    patina_hit_t hits[3 * 5], *rh[3];
    size_t counts[3] = {9, 9, 9}, i;
    (void)state;
    TU_OK(patina_index_new(&idx, ex, NULL, NULL, 0));
    assert_int_equal(patina_index_size(idx), 0);
    TU_OK(knn_cpu(idx, queries, 3, 5, 4, hits, counts));
    for (i = 0; i < 3; i++) assert_int_equal(counts[i], 0);
    for (i = 0; i < 15; i++) {
        assert_int_equal(hits[i].id, 0);
        assert_true(isinf(hits[i].distance));
    }
    TU_OK(range_cpu(idx, queries, 3, 100.0, 0, 4, rh, counts));
    for (i = 0; i < 3; i++) {
        assert_int_equal(counts[i], 0);
        assert_null(rh[i]);
    }
    patina_index_free(idx);
    free(queries);
    free_data(&ds);
    patina_extractor_free(ex);
}

/* Equal distances come out by id ascending, whatever the row order. */
static void test_ties_by_id(void **state)
{
    patina_extractor_t *ex = cedd();
    enum { N = 3000 };
    uint64_t *ids = malloc(N * sizeof *ids);
    uint8_t *descs = calloc(N, D), q[D] = {0};
    patina_index_t *idx;
    patina_hit_t *hits = malloc(N * sizeof *hits);
    size_t count, i;
    (void)state;
    /* Three groups of identical descriptors, ids in a scrambled order. */
    for (i = 0; i < N; i++) {
        ids[i] = (i * 7919) % N + 1; /* a permutation of 1..N */
        descs[i * D + 19] = 7;
        if (i % 3 == 1) descs[i * D + 20] = 3;
        if (i % 3 == 2) descs[i * D + 100] = 5;
    }
    q[19] = 7;
    TU_OK(patina_index_new(&idx, ex, ids, descs, N));
    for (int threads = 1; threads <= 4; threads += 3) {
        TU_OK(knn_cpu(idx, q, 1, N, threads, hits, &count));
        assert_int_equal(count, N);
        for (i = 1; i < N; i++) {
            assert_true(hits[i - 1].distance <= hits[i].distance);
            if (hits[i - 1].distance == hits[i].distance) assert_true(hits[i - 1].id < hits[i].id);
        }
        assert_true(hits[0].distance == 0.0);
        assert_true(hits[N / 3 - 1].distance == 0.0);
        assert_true(hits[N / 3].distance > 0.0);
        /* k cuts inside a tie group: the smallest ids win. */
        TU_OK(knn_cpu(idx, q, 1, 5, threads, hits, &count));
        for (i = 0; i < 5; i++) {
            size_t row;
            for (row = 0; ids[row] != hits[i].id; row++) {}
            assert_true(row % 3 == 0);
            if (i) assert_true(hits[i].id > hits[i - 1].id);
        }
    }
    patina_index_free(idx);
    free(hits);
    free(ids);
    free(descs);
    patina_extractor_free(ex);
}

/* A large index with few queries is cut into chunks over threads; the
 * result is the brute-force one and the same for every thread count. */
static void test_chunking_and_threads(void **state)
{
    patina_extractor_t *ex = cedd();
    dataset_t ds = make_data(20000, 9);
    uint8_t *queries = make_queries(&ds, 6, 10);
    patina_index_t *idx;
    size_t k = 50, nq, q;
    (void)state;
    assert_true(ds.n >= 8 * PATINA_KNN_MIN_CHUNK); /* one query -> several chunks at 4 threads */
    TU_OK(patina_index_new(&idx, ex, ds.ids, ds.descs, ds.n));
    for (nq = 1; nq <= 6; nq += 5) {
        patina_hit_t *h1 = malloc(nq * k * sizeof *h1), *h4 = malloc(nq * k * sizeof *h4);
        size_t c1[6], c4[6];
        TU_OK(knn_cpu(idx, queries, nq, k, 1, h1, c1));
        TU_OK(knn_cpu(idx, queries, nq, k, 4, h4, c4));
        for (q = 0; q < nq; q++) assert_int_equal(c1[q], c4[q]);
        assert_memory_equal(h1, h4, nq * k * sizeof *h1);
        check_knn(idx, &ds, queries, nq, k, 4);
        check_knn(idx, &ds, queries, nq, 1, 3);
        free(h1);
        free(h4);
    }
    check_knn(idx, &ds, queries, 1, 5000, 4); /* k larger than a chunk */
    check_range(idx, &ds, queries, 2, 30.0, 0, 4);
    check_range(idx, &ds, queries, 2, 30.0, 100, 4);
    check_knn(idx, &ds, queries, 6, 20, 0); /* 0 = all CPUs */
    check_knn(idx, &ds, queries, 1, 50, 16);  /* more threads than cores: 19 chunks */
    check_range(idx, &ds, queries, 3, 25.0, 0, 16);
    patina_index_free(idx);
    free(queries);
    free_data(&ds);
    patina_extractor_free(ex);
}

static void test_range(void **state)
{
    patina_extractor_t *ex = cedd();
    dataset_t ds = make_data(3000, 11);
    uint8_t *queries = make_queries(&ds, 12, 12);
    patina_index_t *idx;
    patina_hit_t *h[12];
    size_t counts[12], q, i;
    (void)state;
    TU_OK(patina_index_new(&idx, ex, ds.ids, ds.descs, ds.n));
    /* Radius 0: duplicates (and proportional histograms, which Tanimoto
     * cannot tell apart). Every exact copy of the query is found. */
    check_range(idx, &ds, queries, 12, 0.0, 0, 1);
    TU_OK(range_cpu(idx, queries, 12, 0.0, 0, 4, h, counts));
    for (q = 0; q < 12; q += 3) { /* these queries are copies of rows */
        size_t copies = 0;
        for (i = 0; i < ds.n; i++) copies += memcmp(ds.descs + i * D, queries + q * D, D) == 0;
        assert_true(copies >= 1);
        assert_true(counts[q] >= copies);
        for (i = 0; i < counts[q]; i++) assert_true(h[q][i].distance == 0.0);
    }
    for (q = 0; q < 12; q++) free(h[q]);
    check_range(idx, &ds, queries, 12, 10.0, 0, 4);
    check_range(idx, &ds, queries, 12, 45.0, 0, 2);
    check_range(idx, &ds, queries, 12, 100.0, 0, 4);  /* everything */
    check_range(idx, &ds, queries, 12, 45.0, 7, 4);   /* nearest 7 within 45 */
    check_range(idx, &ds, queries, 12, 0.0, 0, 4);    /* exact copies only */
    {                                                 /* a negative radius is an error */
        patina_hit_t *nh[12];
        size_t nc[12];
        assert_int_equal(patina_index_range(NULL, idx, queries, 12, -1.0, NULL, nh, nc), PATINA_E_INVALID);
    }
    patina_index_free(idx);
    free(queries);
    free_data(&ds);
    patina_extractor_free(ex);
}

/* Rows or queries with a bin above 7 are not CEDD: the generic distance
 * is used, with the same results as the reference. */
static void test_generic_path(void **state)
{
    patina_extractor_t *ex = cedd();
    dataset_t ds = make_data(1500, 13);
    uint8_t *queries = make_queries(&ds, 8, 14);
    patina_index_t *idx;
    (void)state;
    queries[2 * D + 5] = 200; /* one query off the fast path on a fast index */
    TU_OK(patina_index_new(&idx, ex, ds.ids, ds.descs, ds.n));
    assert_int_equal(patina__index_fast_path(idx), 1);
    check_knn(idx, &ds, queries, 8, 30, 4);
    patina_index_free(idx);
    ds.descs[700 * D + 3] = 9;
    TU_OK(patina_index_new(&idx, ex, ds.ids, ds.descs, ds.n));
    assert_int_equal(patina__index_fast_path(idx), 0);
    check_knn(idx, &ds, queries, 8, 30, 4);
    check_range(idx, &ds, queries, 8, 40.0, 0, 4);
    patina_index_free(idx);
    free(queries);
    free_data(&ds);
    patina_extractor_free(ex);
}

/* Another family (float descriptors, its own distance) through the
 * generic path: k-NN and range against a brute force built on
 * patina_extractor_distance; a NaN distance sorts after every number. */
static void test_other_family(void **state)
{
    patina_extractor_t *ex = NULL;
    patina_index_t *idx;
    size_t f, n = 2500, nq = 5, dim, bytes, i, q, k = 40;
    uint64_t *ids;
    double *descs, *queries;
    patina_hit_t *hits, *ref;
    size_t counts[5];
    tu_rng_t r;
    (void)state;
    for (f = 0; f < patina_family_count() && !ex; f++)
        if (strcmp(patina_family_name(f), "cedd") != 0 &&
            patina_extractor_new(&ex, patina_family_name(f)) == PATINA_OK &&
            patina_extractor_elem(ex) != PATINA_ELEM_F64) {
            patina_extractor_free(ex);
            ex = NULL;
        }
    if (!ex) {
        print_message("no float64 family other than cedd registered; skipped\n");
        return;
    }
    dim = patina_extractor_dim(ex);
    bytes = patina_extractor_bytes(ex);
    print_message("generic path with '%s' (%zu x f64, distance %s)\n", patina_extractor_spec(ex),
                  dim, patina_extractor_distance_name(ex));
    tu_rng_seed(&r, 17);
    ids = malloc(n * sizeof *ids);
    descs = malloc(n * bytes);
    queries = malloc(nq * bytes);
    hits = malloc(nq * n * sizeof *hits);
    ref = malloc(n * sizeof *ref);
    for (i = 0; i < n * dim; i++) descs[i] = (double)tu_rng_below(&r, 1000) / 100.0;
    for (i = 0; i < nq * dim; i++) queries[i] = (double)tu_rng_below(&r, 1000) / 100.0;
    for (i = 0; i < n; i++) ids[i] = n - i; /* descending */
    memcpy(descs + 7 * dim, descs + 3 * dim, bytes); /* a tie */
    TU_OK(patina_index_new(&idx, ex, ids, descs, n));
    assert_int_equal(patina__index_fast_path(idx), 0);
    TU_OK(knn_cpu(idx, queries, nq, k, 4, hits, counts));
    for (q = 0; q < nq; q++) {
        for (i = 0; i < n; i++) {
            ref[i].id = ids[i];
            ref[i].distance = patina_extractor_distance(ex, queries + q * dim, descs + i * dim);
        }
        qsort(ref, n, sizeof *ref, ref_cmp);
        assert_int_equal(counts[q], k);
        expect_hits(hits + q * k, ref, k, q);
    }
    {
        patina_hit_t *rh[5];
        double radius;
        size_t m;
        for (i = 0; i < n; i++) {
            ref[i].id = ids[i];
            ref[i].distance = patina_extractor_distance(ex, queries, descs + i * dim);
        }
        qsort(ref, n, sizeof *ref, ref_cmp);
        radius = ref[n / 10].distance;
        for (m = 0; m < n && ref[m].distance <= radius; m++) {}
        TU_OK(range_cpu(idx, queries, 1, radius, 0, 3, rh, counts));
        assert_int_equal(counts[0], m);
        expect_hits(rh[0], ref, m, 0);
        free(rh[0]);
    }
    patina_index_free(idx);
    /* A NaN row: its NaN distance comes last, after every number. */
    descs[5 * dim] = NAN;
    TU_OK(patina_index_new(&idx, ex, ids, descs, n));
    TU_OK(knn_cpu(idx, queries, 1, n, 2, hits, counts));
    if (isnan(patina_extractor_distance(ex, queries, descs + 5 * dim))) {
        assert_true(isnan(hits[n - 1].distance));
        assert_int_equal(hits[n - 1].id, ids[5]);
        for (i = 0; i + 1 < n; i++) assert_false(isnan(hits[i].distance));
    }
    patina_index_free(idx);
    free(ids);
    free(descs);
    free(queries);
    free(hits);
    free(ref);
    patina_extractor_free(ex);
}

/* An index loaded from a collection is a snapshot; a reload sees changes. */
static void test_load_from_collection(void **state)
{
    patina_extractor_t *ex = cedd();
    dataset_t ds = make_data(300, 15);
    uint8_t *queries = make_queries(&ds, 4, 16);
    char *dir = tu_tempdir("search"), *coll;
    patina_collection_t *c;
    patina_index_t *idx;
    patina_insert_t *it = calloc(ds.n, sizeof *it);
    char **keys = calloc(ds.n, sizeof *keys);
    uint64_t *ids = malloc(ds.n * sizeof *ids);
    dataset_t stored;
    size_t i;
    (void)state;
    if (asprintf(&coll, "%s/c", dir) < 0) abort();
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0));
    /* No table yet: an empty index. */
    TU_OK(patina_index_load(&idx, ex, c));
    assert_int_equal(patina_index_size(idx), 0);
    patina_index_free(idx);
    for (i = 0; i < ds.n; i++) {
        if (asprintf(&keys[i], "img/%zu.jpg", i) < 0) abort();
        it[i].key = keys[i];
        it[i].desc = ds.descs + i * D;
    }
    TU_OK(patina_collection_put(c, patina_extractor_spec(ex), D, it, ds.n, ids));
    TU_OK(patina_index_load(&idx, ex, c));
    assert_int_equal(patina_index_size(idx), ds.n);
    assert_int_equal(patina__index_fast_path(idx), 1);
    stored.n = ds.n;
    stored.ids = ids;
    stored.descs = ds.descs;
    check_knn(idx, &stored, queries, 4, 25, 2);
    /* Remove one: the old index still has it, a reloaded one does not; an
     * index from a snapshot taken before has it, and so has the snapshot's
     * record of every hit. */
    {
        patina_snapshot_t *snap;
        patina_index_t *sidx;
        patina_hit_t hits[25];
        patina_record_t recs[25];
        uint64_t hid[25];
        size_t counts[1], h;
        TU_OK(patina_snapshot_new(&snap, c));
        TU_OK(patina_collection_remove(c, ids[0]));
        TU_OK(patina_index_load_snapshot(&sidx, ex, snap));
        assert_int_equal(patina_index_size(sidx), ds.n);
        TU_OK(patina_index_knn(NULL, sidx, ds.descs, 1, 25, NULL, hits, counts));
        assert_int_equal(hits[0].id, ids[0]);
        for (h = 0; h < 25; h++) hid[h] = hits[h].id;
        TU_OK(patina_snapshot_get(snap, hid, 25, recs));
        assert_string_equal(recs[0].key, "img/0.jpg");
        for (h = 0; h < 25; h++) patina_record_release(&recs[h]);
        patina_index_free(sidx);
        patina_snapshot_free(snap);
    }
    assert_int_equal(patina_index_size(idx), ds.n);
    patina_index_free(idx);
    TU_OK(patina_index_load(&idx, ex, c));
    assert_int_equal(patina_index_size(idx), ds.n - 1);
    stored.n = ds.n - 1;
    stored.ids = ids + 1;
    stored.descs = ds.descs + D;
    check_knn(idx, &stored, queries, 4, 25, 2);
    patina_index_free(idx);
    patina_collection_close(c);
    for (i = 0; i < ds.n; i++) free(keys[i]);
    free(keys);
    free(it);
    free(ids);
    tu_remove_tree(dir);
    free(dir);
    free(coll);
    free(queries);
    free_data(&ds);
    patina_extractor_free(ex);
}

/* haralick's distance is the standardised L2 of the searched index: each
 * feature divided by its standard deviation over the index's rows (written
 * out here independently: two-pass mean and population variance). With
 * features of very different scales the ranking differs from plain L2. */
static void test_standardised_l2(void **state)
{
    patina_extractor_t *ex;
    patina_index_t *idx;
    size_t dim, n = 40, i, k, r, cnt;
    double *rows, *q, *sd, *want;
    uint64_t *ids;
    patina_hit_t hits[40];
    tu_rng_t rng;
    (void)state;
    TU_OK(patina_extractor_new(&ex, "haralick"));
    assert_string_equal(patina_extractor_distance_name(ex), "std_l2");
    dim = patina_extractor_dim(ex);
    rows = malloc(n * dim * sizeof *rows);
    q = malloc(dim * sizeof *q);
    sd = malloc(dim * sizeof *sd);
    want = malloc(n * sizeof *want);
    ids = malloc(n * sizeof *ids);
    tu_rng_seed(&rng, 5);
    for (i = 0; i < n; i++) {
        ids[i] = 10 + i;
        for (k = 0; k < dim; k++) /* feature k lives on the scale 10^(k mod 7 - 3) */
            rows[i * dim + k] = pow(10.0, (double)(k % 7) - 3.0) * (double)tu_rng_below(&rng, 1000) / 1000.0;
    }
    for (k = 0; k < dim; k++) rows[5 * dim + k] = rows[k]; /* a constant feature would get sd 1 */
    for (k = 0; k < dim; k++) {
        double m = 0, v = 0;
        for (i = 0; i < n; i++) m += rows[i * dim + k];
        m /= (double)n;
        for (i = 0; i < n; i++) v += (rows[i * dim + k] - m) * (rows[i * dim + k] - m);
        sd[k] = v > 0 ? sqrt(v / (double)n) : 1.0;
        q[k] = rows[3 * dim + k] * 1.01;
    }
    for (i = 0; i < n; i++) {
        double acc = 0;
        for (k = 0; k < dim; k++) {
            double t = (q[k] - rows[i * dim + k]) / sd[k];
            acc += t * t;
        }
        want[i] = sqrt(acc);
    }
    TU_OK(patina_index_new(&idx, ex, ids, rows, n));
    TU_OK(knn_cpu(idx, q, 1, n, 1, hits, &cnt));
    assert_int_equal(cnt, n);
    assert_int_equal(hits[0].id, 13);  /* the row the query was made from */
    for (r = 0; r < n; r++) {
        size_t row = (size_t)(hits[r].id - 10);
        if (fabs(hits[r].distance - want[row]) > 1e-12 * (1 + want[row]))
            fail_msg("rank %zu id %llu: %.17g, by hand %.17g", r, (unsigned long long)hits[r].id,
                     hits[r].distance, want[row]);
        if (r) assert_true(hits[r - 1].distance <= hits[r].distance);
    }
    /* between two lone vectors (no collection) it is the plain L2 */
    {
        double plain = 0;
        for (k = 0; k < dim; k++) plain += (q[k] - rows[k]) * (q[k] - rows[k]);
        assert_true(fabs(patina_extractor_distance(ex, q, rows) - sqrt(plain)) <= 1e-12 * sqrt(plain));
    }
    patina_index_free(idx);
    patina_extractor_free(ex);
    free(rows);
    free(q);
    free(sd);
    free(want);
    free(ids);
}

/* ------------------------------------------------------- concurrency */

typedef struct conc_arg {
    const patina_index_t *idx[2];
    const dataset_t *ds[2];
    const uint8_t *queries;
    size_t nq, k;
    patina_context_t *shared; /* NULL: each call without a context */
    const patina_hit_t *want[2]; /* (nq, k) reference per index */
    int rounds;
    int failures;
} conc_arg_t;

static void *conc_main(void *v)
{
    conc_arg_t *a = v;
    patina_hit_t *h = malloc(a->nq * a->k * sizeof *h);
    size_t *c = malloc(a->nq * sizeof *c);
    patina_search_opts_t o;
    patina_search_opts_init(&o);
    for (int r = 0; r < a->rounds; r++) {
        int w = r & 1; /* alternate between the two indexes */
        if (patina_index_knn(a->shared, a->idx[w], a->queries, a->nq, a->k, &o, h, c) != PATINA_OK ||
            memcmp(h, a->want[w], a->nq * a->k * sizeof *h) != 0)
            a->failures++;
    }
    free(h);
    free(c);
    return NULL;
}

/* Many threads search two indexes at once, through one shared context and
 * without a context; every result equals the single-threaded one. (Run
 * under ThreadSanitizer and AddressSanitizer: make tsan, make asan.) */
static void test_concurrent_searches(void **state)
{
    enum { THREADS = 8, NQ = 5, K = 7 };
    dataset_t ds[2] = {make_data(3000, 51), make_data(700, 52)};
    uint8_t *queries = make_queries(&ds[0], NQ, 53);
    patina_index_t *idx[2];
    patina_hit_t *want[2];
    size_t counts[NQ];
    patina_context_t *ctx;
    patina_extractor_t *ex = cedd();
    pthread_t th[THREADS];
    conc_arg_t args[THREADS];
    (void)state;
    TU_OK(with_ctx(&ctx, 2));
    for (int w = 0; w < 2; w++) {
        TU_OK(patina_index_new(&idx[w], ex, ds[w].ids, ds[w].descs, ds[w].n));
        want[w] = malloc(NQ * K * sizeof *want[w]);
        TU_OK(knn_cpu(idx[w], queries, NQ, K, 1, want[w], counts));
    }
    for (int t = 0; t < THREADS; t++) {
        conc_arg_t *a = &args[t];
        memset(a, 0, sizeof *a);
        for (int w = 0; w < 2; w++) {
            a->idx[w] = idx[w];
            a->ds[w] = &ds[w];
            a->want[w] = want[w];
        }
        a->queries = queries;
        a->nq = NQ;
        a->k = K;
        a->shared = t % 2 ? ctx : NULL;
        a->rounds = 20;
        assert_int_equal(pthread_create(&th[t], NULL, conc_main, a), 0);
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
        assert_int_equal(args[t].failures, 0);
    }
    for (int w = 0; w < 2; w++) {
        patina_index_free(idx[w]);
        free(want[w]);
        free_data(&ds[w]);
    }
    patina_context_free(ctx);
    patina_extractor_free(ex);
    free(queries);
}

/* Device options: a GPU search (k-NN or range) needs a context, HYBRID is
 * no search device; AUTO without a GPU is the CPU. */
static void test_search_devices(void **state)
{
    dataset_t ds = make_data(50, 61);
    uint8_t *q = make_queries(&ds, 2, 62);
    patina_extractor_t *ex = cedd();
    patina_index_t *idx;
    patina_search_opts_t o;
    patina_hit_t hits[6], *rh[2];
    size_t counts[2];
    (void)state;
    TU_OK(patina_index_new(&idx, ex, ds.ids, ds.descs, ds.n));
    patina_search_opts_init(&o);
    assert_int_equal(o.device, PATINA_DEVICE_AUTO);
    assert_int_equal(o.max_hits, 0);
    TU_OK(patina_index_knn(NULL, idx, q, 2, 3, &o, hits, counts)); /* AUTO without a context: CPU */
    TU_OK(patina_index_knn(NULL, idx, q, 2, 3, NULL, hits, counts));
    o.device = PATINA_DEVICE_GPU;
    assert_int_equal(patina_index_knn(NULL, idx, q, 2, 3, &o, hits, counts), PATINA_E_INVALID);
    assert_int_equal(patina_index_range(NULL, idx, q, 2, 10.0, &o, rh, counts), PATINA_E_INVALID);
    o.device = PATINA_DEVICE_HYBRID;
    assert_int_equal(patina_index_knn(NULL, idx, q, 2, 3, &o, hits, counts), PATINA_E_INVALID);
    if (patina_gpu_count() == 0) {
        patina_context_t *ctx;
        TU_OK(with_ctx(&ctx, 1));
        o.device = PATINA_DEVICE_GPU;
        assert_int_equal(patina_index_knn(ctx, idx, q, 2, 3, &o, hits, counts), PATINA_E_UNAVAILABLE);
        assert_int_equal(patina_index_range(ctx, idx, q, 2, 10.0, &o, rh, counts), PATINA_E_UNAVAILABLE);
        o.device = PATINA_DEVICE_AUTO;
        TU_OK(patina_index_knn(ctx, idx, q, 2, 3, &o, hits, counts));
        TU_OK(patina_index_range(ctx, idx, q, 2, 10.0, &o, rh, counts));
        free(rh[0]);
        free(rh[1]);
        patina_context_free(ctx);
    }
    patina_index_free(idx);
    patina_extractor_free(ex);
    free_data(&ds);
    free(q);
}

/* ---------------------------------------------------------- live updates */

/* A model of an index under changes: live (id, row) pairs. */
typedef struct model {
    size_t n, cap, bytes;
    uint64_t *ids;
    uint8_t *rows;
} model_t;

static void model_put(model_t *m, uint64_t id, const void *row)
{
    size_t i;
    for (i = 0; i < m->n; i++)
        if (m->ids[i] == id) break;
    if (i == m->n) {
        if (m->n == m->cap) {
            m->cap = m->cap ? 2 * m->cap : 256;
            m->ids = realloc(m->ids, m->cap * sizeof *m->ids);
            m->rows = realloc(m->rows, m->cap * m->bytes);
        }
        m->n++;
    }
    m->ids[i] = id;
    memcpy(m->rows + i * m->bytes, row, m->bytes);
}

static void model_remove(model_t *m, uint64_t id)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->ids[i] == id) {
            m->n--;
            m->ids[i] = m->ids[m->n];
            memcpy(m->rows + i * m->bytes, m->rows + m->n * m->bytes, m->bytes);
            return;
        }
}

/* Random rows of an extractor's shape (CEDD: bins 0..7; floats: small
 * non-negative values; u32: counts). */
static void fill_rows(const patina_extractor_t *ex, uint8_t *rows, size_t n, tu_rng_t *r)
{
    const size_t dim = patina_extractor_dim(ex), bytes = patina_extractor_bytes(ex);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < dim; k++) {
            const uint32_t v = tu_rng_below(r, 100) < 60 ? 0 : tu_rng_below(r, 8);
            void *row = rows + i * bytes;
            switch (patina_extractor_elem(ex)) {
            case PATINA_ELEM_U8: ((uint8_t *)row)[k] = (uint8_t)v; break;
            case PATINA_ELEM_U16: ((uint16_t *)row)[k] = (uint16_t)v; break;
            case PATINA_ELEM_U32: ((uint32_t *)row)[k] = v; break;
            case PATINA_ELEM_F32: ((float *)row)[k] = (float)v * 0.125f; break;
            case PATINA_ELEM_F64: ((double *)row)[k] = (double)v * (k % 3 ? 1e-3 : 10.0); break;
            }
        }
}

/* The index under changes answers as an index built afresh from the live
 * rows: ids and distance bits, k-NN and range, for CEDD (fast path), an
 * LBP histogram (chi2, f32) and Haralick (std_l2, whose sigma follows the
 * rows); enough removals to compact; replaced ids; absent ids. */
static void test_live_updates(void **state)
{
    static const char *const specs[] = {"cedd", "lbp8", "haralick"};
    (void)state;
    for (size_t si = 0; si < sizeof specs / sizeof *specs; si++) {
        patina_extractor_t *ex;
        patina_index_t *idx;
        model_t m = {0};
        tu_rng_t r;
        const size_t n0 = 600, nq = 6;
        uint8_t *rows, *q;
        uint64_t next = 1, *ids;
        size_t bytes, removed;
        TU_OK(patina_extractor_new(&ex, specs[si]));
        bytes = m.bytes = patina_extractor_bytes(ex);
        tu_rng_seed(&r, 77 + si);
        rows = malloc(n0 * bytes);
        ids = malloc(n0 * sizeof *ids);
        q = malloc(nq * bytes);
        fill_rows(ex, rows, n0, &r);
        fill_rows(ex, q, nq, &r);
        for (size_t i = 0; i < n0; i++) {
            ids[i] = next;
            next += 1 + tu_rng_below(&r, 3);
            model_put(&m, ids[i], rows + i * bytes);
        }
        TU_OK(patina_index_new(&idx, ex, ids, rows, n0));
        for (int round = 0; round < 8; round++) {
            const size_t na = 40 + tu_rng_below(&r, 60), nrm = 60 + tu_rng_below(&r, 120);
            uint8_t *add = malloc(na * bytes);
            uint64_t *aid = malloc(na * sizeof *aid), *rid = malloc(nrm * sizeof *rid);
            patina_index_t *fresh;
            fill_rows(ex, add, na, &r);
            for (size_t i = 0; i < na; i++) /* a third replace a live id */
                aid[i] = i % 3 == 0 && m.n ? m.ids[tu_rng_below(&r, (uint32_t)m.n)] : next++;
            for (size_t i = 0; i < na; i++) /* ids must be distinct within one put */
                for (size_t j = 0; j < i; j++)
                    if (aid[j] == aid[i]) aid[i] = next++;
            TU_OK(patina_index_put(idx, aid, add, na));
            for (size_t i = 0; i < na; i++) model_put(&m, aid[i], add + i * bytes);
            for (size_t i = 0; i < nrm; i++) /* some absent ids */
                rid[i] = i % 7 == 0 ? next + 1000 + i : m.ids[tu_rng_below(&r, (uint32_t)m.n)];
            TU_OK(patina_index_remove(idx, rid, nrm, &removed));
            {
                size_t before = m.n;
                for (size_t i = 0; i < nrm; i++) model_remove(&m, rid[i]);
                assert_int_equal(removed, before - m.n);
            }
            assert_int_equal(patina_index_size(idx), m.n);
            TU_OK(patina_index_new(&fresh, ex, m.ids, m.rows, m.n));
            for (size_t k = 1; k <= 64; k *= 8) {
                patina_hit_t *a = malloc(nq * k * sizeof *a), *b = malloc(nq * k * sizeof *b);
                size_t ca[6], cb[6];
                TU_OK(knn_cpu(idx, q, nq, k, 3, a, ca));
                TU_OK(knn_cpu(fresh, q, nq, k, 1, b, cb));
                for (size_t i = 0; i < nq; i++) assert_int_equal(ca[i], cb[i]);
                for (size_t i = 0; i < nq * k; i++) {
                    assert_int_equal(a[i].id, b[i].id);
                    assert_memory_equal(&a[i].distance, &b[i].distance, sizeof(double));
                }
                free(a);
                free(b);
            }
            {
                patina_hit_t *ra[6], *rb[6];
                size_t ca[6], cb[6];
                const double radius = si == 0 ? 40.0 : si == 1 ? 0.5 : 3.0;
                TU_OK(range_cpu(idx, q, nq, radius, 0, 2, ra, ca));
                TU_OK(range_cpu(fresh, q, nq, radius, 0, 1, rb, cb));
                for (size_t i = 0; i < nq; i++) {
                    assert_int_equal(ca[i], cb[i]);
                    for (size_t j = 0; j < ca[i]; j++) {
                        assert_int_equal(ra[i][j].id, rb[i][j].id);
                        assert_memory_equal(&ra[i][j].distance, &rb[i][j].distance, sizeof(double));
                    }
                    free(ra[i]);
                    free(rb[i]);
                }
            }
            patina_index_free(fresh);
            free(add);
            free(aid);
            free(rid);
        }
        /* bad input changes nothing */
        {
            uint64_t two[2] = {5, 5};
            const size_t before = patina_index_size(idx);
            uint8_t *r2 = calloc(2, bytes);
            assert_int_equal(patina_index_put(idx, two, r2, 2), PATINA_E_INVALID);
            if (patina_extractor_elem(ex) == PATINA_ELEM_F32) {
                uint64_t one = next++;
                ((float *)r2)[3] = NAN;
                assert_int_equal(patina_index_put(idx, &one, r2, 1), PATINA_E_INVALID);
                {
                    patina_hit_t h[2];
                    size_t c[1];
                    assert_int_equal(knn_cpu(idx, r2, 1, 2, 1, h, c), PATINA_E_INVALID); /* a NaN query */
                }
            }
            assert_int_equal(patina_index_size(idx), before);
            free(r2);
        }
        patina_index_free(idx);
        patina_extractor_free(ex);
        free(m.ids);
        free(m.rows);
        free(rows);
        free(ids);
        free(q);
    }
}

/* Searches running while a writer removes and puts back rows: every
 * result is a consistent state -- no torn rows, no duplicate ids, every
 * distance that of the id's descriptor -- and after the writer, the
 * removed ids are gone from the next search. */
typedef struct live_arg {
    patina_index_t *idx;
    const dataset_t *ds;
    const uint8_t *q;
    atomic_int *stop;
    atomic_int *started; /* readers that finished a first search */
    size_t bad, runs;
} live_arg_t;

static void *live_reader(void *p)
{
    live_arg_t *a = p;
    patina_hit_t h[4 * 20];
    size_t c[4];
    do { /* at least one search, however the threads are scheduled */
        if (knn_cpu(a->idx, a->q, 4, 20, 1, h, c) != PATINA_OK) {
            a->bad++;
            break;
        }
        for (size_t qi = 0; qi < 4; qi++)
            for (size_t i = 0; i < c[qi]; i++) {
                const patina_hit_t *x = &h[qi * 20 + i];
                size_t row = (size_t)-1;
                for (size_t j = 0; j < a->ds->n; j++)
                    if (a->ds->ids[j] == x->id) row = j;
                if (row == (size_t)-1 ||
                    patina_cedd_tanimoto(a->q + qi * D, a->ds->descs + row * D) != x->distance)
                    a->bad++;
                for (size_t j = 0; j < i; j++)
                    if (h[qi * 20 + j].id == x->id) a->bad++;
            }
        if (a->runs++ == 0) atomic_fetch_add(a->started, 1);
    } while (!atomic_load(a->stop));
    return NULL;
}

static void test_live_concurrent(void **state)
{
    dataset_t ds = make_data(3000, 91);
    uint8_t *q = make_queries(&ds, 4, 92);
    patina_extractor_t *ex = cedd();
    patina_index_t *idx;
    pthread_t th[3];
    live_arg_t arg[3];
    atomic_int stop = 0, started = 0;
    patina_hit_t h[4 * 20];
    size_t c[4], removed;
    (void)state;
    TU_OK(patina_index_new(&idx, ex, ds.ids, ds.descs, ds.n));
    for (int i = 0; i < 3; i++) {
        arg[i] = (live_arg_t){idx, &ds, q, &stop, &started, 0, 0};
        assert_int_equal(pthread_create(&th[i], NULL, live_reader, &arg[i]), 0);
    }
    while (atomic_load(&started) < 3) sched_yield(); /* the writer starts among running readers */
    for (int round = 0; round < 40; round++) { /* remove 100 rows, put them back */
        const size_t base = (size_t)(round * 37) % (ds.n - 100);
        TU_OK(patina_index_remove(idx, ds.ids + base, 100, &removed));
        assert_int_equal(removed, 100);
        TU_OK(patina_index_put(idx, ds.ids + base, ds.descs + base * D, 100));
    }
    TU_OK(patina_index_remove(idx, ds.ids, 1500, &removed)); /* the first half, for good */
    atomic_store(&stop, 1);
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(arg[i].bad, 0);
        assert_true(arg[i].runs > 0);
    }
    TU_OK(knn_cpu(idx, q, 4, 20, 2, h, c));
    for (size_t i = 0; i < 4 * 20; i++)
        for (size_t j = 0; j < 1500; j++) assert_true(h[i].id != ds.ids[j]); /* no stale hit */
    patina_index_free(idx);
    patina_extractor_free(ex);
    free(q);
    free_data(&ds);
}

/* The AVX2 filter of the Tanimoto fast path (search/knn_avx2.c) against
 * its inequality evaluated here on the exact integers: the layout of 1..16
 * rows of lengths around its 16-byte steps (and CEDD's 144), every
 * query pair list, thresholds on both sides of each row. */
static void test_tanimoto_filter(void **state)
{
#if PDIST_HAVE_AVX2
    static const size_t dims[] = {1, 2, 15, 16, 17, 31, 33, 144, 255, 256};
    tu_rng_t r;
    size_t checked = 0;
    (void)state;
    if (!pdist_simd()) {
        print_message("no AVX2 on this CPU; skipped\n");
        return;
    }
    tu_rng_seed(&r, 77);
    for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
        for (int rep = 0; rep < 40; rep++) {
            const size_t dim = dims[di], m = 1 + tu_rng_below(&r, PTAN_GROUP), np = (dim + 1) / 2;
            uint8_t rows[PTAN_GROUP * 256], a[256];
            uint16_t L[PTAN_GROUP * 128], pe[128], pv[128];
            double t1[PTAN_GROUP] = {0}, s1[PTAN_GROUP], s2 = 0, t2 = 0;
            size_t n = 0;
            memset(rows, 0xee, sizeof rows); /* past the m rows: must not be read as data */
            for (size_t j = 0; j < m * dim; j++) rows[j] = tu_rng_below(&r, 10) < 6 ? 0 : (uint8_t)tu_rng_below(&r, 8);
            for (size_t i = 0; i < dim; i++) a[i] = rep % 5 == 0 ? 0 : tu_rng_below(&r, 3) ? 0 : (uint8_t)tu_rng_below(&r, 8);
            for (size_t e = 0; e < np; e++) {
                const unsigned lo = a[2 * e], hi = 2 * e + 1 < dim ? a[2 * e + 1] : 0;
                if (lo | hi) {
                    pe[n] = (uint16_t)e;
                    pv[n++] = (uint16_t)(lo | hi << 8);
                }
            }
            for (size_t i = 0; i < dim; i++) {
                t2 += a[i];
                s2 += a[i] * a[i];
            }
            ptan_avx2_layout(rows, m, dim, L, s1);
            for (size_t j = 0; j < PTAN_GROUP; j++) {
                double t = 0, ss = 0;
                for (size_t i = 0; j < m && i < dim; i++) {
                    t += rows[j * dim + i];
                    ss += rows[j * dim + i] * rows[j * dim + i];
                }
                assert_true(s1[j] == ss);
                if (j < m) t1[j] = t;
            }
            for (int k = 0; k < 6; k++) {
                const double tc = k == 5 ? NAN : (double)tu_rng_below(&r, 1001) / 1000.0;
                const unsigned keep = ptan_avx2_filter(L, pe, pv, n, t1, s1, t2, s2, tc);
                for (size_t j = 0; j < PTAN_GROUP; j++) {
                    double d = 0, num, den;
                    for (size_t i = 0; j < m && i < dim; i++) d += a[i] * rows[j * dim + i];
                    num = d * t1[j] * t2;
                    den = s2 * t1[j] * t1[j] + s1[j] * t2 * t2 - num;
                    assert_int_equal(keep >> j & 1, !(num < tc * den));
                    checked++;
                }
            }
        }
    print_message("%zu row decisions checked\n", checked);
#else
    (void)state;
    print_message("no AVX2 build; skipped\n");
#endif
}

/* The element-wise distances through the whole search, on the AVX2 path
 * (where the CPU has it; for CEDD the fast path's integer filter) and the
 * forced portable path: every family's distance and element type, blocks
 * of queries (1, 7, 70: over two blocks of 32), 1 and 3 threads, chunked
 * rows. The two paths return the same hits, bit for bit, and (except
 * std_l2, whose sigma is the index's) the brute force on
 * patina_extractor_distance. */
static void test_simd_paths(void **state)
{
    static const char *specs[] = {"cedd", "lbp8", "lbp8:norm=counts", "lbp8:distance=l1", "tlbap:distance=intersection",
                                  "lanadp:distance=hellinger", "glcm", "haralick"};
    static const size_t nqs[] = {1, 7, 70};
    const size_t n = 2600, k = 25;
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 4242);
    for (size_t si = 0; si < sizeof specs / sizeof *specs; si++) {
        patina_extractor_t *ex;
        patina_index_t *idx;
        TU_OK(patina_extractor_new(&ex, specs[si]));
        const size_t dim = patina_extractor_dim(ex), bytes = patina_extractor_bytes(ex);
        const patina_elem e = patina_extractor_elem(ex);
        const int std = !strcmp(patina_extractor_distance_name(ex), "std_l2");
        uint8_t *rows = calloc(n, bytes), *q = calloc(70, bytes);
        uint64_t *ids = malloc(n * sizeof *ids);
        patina_hit_t *h[2], *ref = malloc(n * sizeof *ref);
        size_t *c[2];
        for (size_t i = 0; i < n + 70; i++) {
            uint8_t *row = i < n ? rows + i * bytes : q + (i - n) * bytes;
            if (i < n) ids[i] = 7 * (n - i) + tu_rng_below(&r, 7);
            if (i == 3 || i == n + 1) continue; /* a zero row, a zero query */
            if (i > 10 && tu_rng_below(&r, 15) == 0) { /* ties: a copy of an earlier row */
                memcpy(row, rows + tu_rng_below(&r, 10) * bytes, bytes);
                continue;
            }
            for (size_t d = 0; d < dim; d++) {
                const uint32_t v = tu_rng_below(&r, 10) < 6 ? 0 : 1 + tu_rng_below(&r, 7); /* CEDD's 0..7 */
                switch (e) {
                case PATINA_ELEM_U8: row[d] = (uint8_t)v; break;
                case PATINA_ELEM_U16: ((uint16_t *)row)[d] = (uint16_t)v; break;
                case PATINA_ELEM_U32: ((uint32_t *)row)[d] = v * 1000; break;
                case PATINA_ELEM_F32: ((float *)row)[d] = (float)v / 64.0f; break;
                case PATINA_ELEM_F64: ((double *)row)[d] = (double)v * (d % 3 ? 1e-3 : 7.0); break;
                }
            }
        }
        TU_OK(patina_index_new(&idx, ex, ids, rows, n));
        for (size_t ni = 0; ni < sizeof nqs / sizeof *nqs; ni++)
            for (int threads = 1; threads <= 3; threads += 2) {
                const size_t nq = nqs[ni];
                for (int path = 0; path < 2; path++) {
                    h[path] = malloc(nq * k * sizeof *h[path]);
                    c[path] = malloc(nq * sizeof *c[path]);
                    pdist_force_portable(path);
                    TU_OK(knn_cpu(idx, q, nq, k, threads, h[path], c[path]));
                }
                pdist_force_portable(0);
                assert_memory_equal(c[0], c[1], nq * sizeof *c[0]);
                assert_memory_equal(h[0], h[1], nq * k * sizeof *h[0]);
                for (size_t a = 0; a < nq && !std; a++) {
                    for (size_t i = 0; i < n; i++) {
                        ref[i].id = ids[i];
                        ref[i].distance = patina_extractor_distance(ex, q + a * bytes, rows + i * bytes);
                    }
                    qsort(ref, n, sizeof *ref, ref_cmp);
                    assert_int_equal(c[0][a], k);
                    expect_hits(h[0] + a * k, ref, k, a);
                }
                for (int path = 0; path < 2; path++) {
                    free(h[path]);
                    free(c[path]);
                }
            }
        { /* range search at the 40th distance of query 0: the same hits on both paths */
            patina_hit_t *rh[2][7];
            size_t rc[2][7];
            double radius;
            TU_OK(knn_cpu(idx, q, 1, 40, 1, ref, rc[0]));
            radius = ref[39].distance;
            for (int path = 0; path < 2; path++) {
                pdist_force_portable(path);
                TU_OK(range_cpu(idx, q, 7, radius, 0, 3, rh[path], rc[path]));
            }
            pdist_force_portable(0);
            assert_true(rc[0][0] >= 40);
            for (size_t a = 0; a < 7; a++) {
                assert_int_equal(rc[0][a], rc[1][a]);
                if (rc[0][a]) assert_memory_equal(rh[0][a], rh[1][a], rc[0][a] * sizeof *rh[0][a]);
                free(rh[0][a]);
                free(rh[1][a]);
            }
        }
        patina_index_free(idx);
        patina_extractor_free(ex);
        free(rows);
        free(q);
        free(ids);
        free(ref);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_standardised_l2),
        cmocka_unit_test(test_fast_path_bit_identical),
        cmocka_unit_test(test_knn_k_values),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_empty_index),
        cmocka_unit_test(test_ties_by_id),
        cmocka_unit_test(test_chunking_and_threads),
        cmocka_unit_test(test_range),
        cmocka_unit_test(test_generic_path),
        cmocka_unit_test(test_other_family),
        cmocka_unit_test(test_simd_paths),
        cmocka_unit_test(test_tanimoto_filter),
        cmocka_unit_test(test_load_from_collection),
        cmocka_unit_test(test_concurrent_searches),
        cmocka_unit_test(test_search_devices),
        cmocka_unit_test(test_live_updates),
        cmocka_unit_test(test_live_concurrent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
