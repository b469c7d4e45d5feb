/* Exact k-NN on the GPU (patina_index_knn_gpu) against the CPU search
 * (patina_index_knn), which tests/test_search.c holds to
 * patina_cedd_tanimoto bit for bit: same counts, same ids in the same order,
 * same distance bits. Random CEDD descriptors (bins 0..7, mostly zero),
 * with duplicated rows (ties, ordered by id), zero rows and queries (the 0 /
 * 100 special cases), ids not in row order; index sizes around the GPU's
 * 2048-row chunk, k below, at and above it, several query batches. Also:
 * the non-CEDD refusal, queries that are not CEDD descriptors (answered on
 * the CPU), and a reload of the same index on the device.
 * Skipped (77) without a GPU. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "patina/patina.h"
#include "testutil.h"

static void random_desc(uint8_t *d, tu_rng_t *r)
{
    int i;
    for (i = 0; i < PATINA_CEDD_DIM; i++) {
        uint32_t u = tu_rng_below(r, 100);
        d[i] = (uint8_t)(u < 70 ? 0 : 1 + tu_rng_below(r, 7));
    }
}

/* n rows: ~3% duplicates of earlier rows, row 0 zero when zero_row; ids
 * shuffled with gaps. */
static patina_index_t *make_index(size_t n, tu_rng_t *r, int zero_row, uint8_t **rows_out)
{
    patina_extractor_t *ex;
    patina_index_t *idx;
    uint8_t *rows = malloc(n * PATINA_CEDD_DIM + 1);
    uint64_t *ids = malloc((n + 1) * sizeof *ids);
    size_t i;
    assert_true(rows && ids);
    for (i = 0; i < n; i++) {
        if (i > 0 && tu_rng_below(r, 100) < 3)
            memcpy(rows + i * PATINA_CEDD_DIM, rows + tu_rng_below(r, (uint32_t)i) * PATINA_CEDD_DIM,
                   PATINA_CEDD_DIM);
        else
            random_desc(rows + i * PATINA_CEDD_DIM, r);
        ids[i] = 1 + 3 * (uint64_t)i;
    }
    if (zero_row && n) memset(rows, 0, PATINA_CEDD_DIM);
    for (i = n; i > 1; i--) { /* shuffle the ids: ties must follow ids, not rows */
        size_t j = tu_rng_below(r, (uint32_t)i);
        uint64_t t = ids[i - 1];
        ids[i - 1] = ids[j];
        ids[j] = t;
    }
    TU_OK(patina_extractor_new(&ex, "cedd"));
    TU_OK(patina_index_new(&idx, ex, ids, rows, n));
    patina_extractor_free(ex);
    free(ids);
    if (rows_out) *rows_out = rows;
    else free(rows);
    return idx;
}

static size_t compare(const patina_index_t *idx, const uint8_t *queries, size_t nq, size_t k)
{
    patina_hit_t *a = malloc(nq * k * sizeof *a), *b = malloc(nq * k * sizeof *b);
    size_t *ca = malloc(nq * sizeof *ca), *cb = malloc(nq * sizeof *cb), q, i, bad = 0;
    assert_true(a && b && ca && cb);
    TU_OK(patina_index_knn(idx, queries, nq, k, 0, a, ca));
    TU_OK(patina_index_knn_gpu(idx, 0, queries, nq, k, b, cb));
    for (q = 0; q < nq; q++) {
        assert_int_equal(ca[q], cb[q]);
        for (i = 0; i < k; i++) {
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

static void test_random(void **state)
{
    static const size_t ns[] = {0, 1, 5, 2047, 2048, 2049, 5000, 70000};
    static const size_t ks[] = {1, 10, 100, 2048, 2500};
    static const size_t nqs[] = {1, 7, 64};
    tu_rng_t r;
    size_t a, b, c, bad = 0, runs = 0;
    (void)state;
    tu_rng_seed(&r, 2026);
    for (a = 0; a < sizeof ns / sizeof *ns; a++) {
        uint8_t *rows;
        patina_index_t *idx = make_index(ns[a], &r, a % 2, &rows);
        for (c = 0; c < sizeof nqs / sizeof *nqs; c++) {
            size_t nq = nqs[c], q;
            uint8_t *queries = malloc(nq * PATINA_CEDD_DIM);
            for (q = 0; q < nq; q++) {
                if (q == 1 && ns[a]) /* an indexed row: distance 0, with its duplicates */
                    memcpy(queries + q * PATINA_CEDD_DIM, rows + (ns[a] / 2) * PATINA_CEDD_DIM, PATINA_CEDD_DIM);
                else if (q == 2)
                    memset(queries + q * PATINA_CEDD_DIM, 0, PATINA_CEDD_DIM);
                else
                    random_desc(queries + q * PATINA_CEDD_DIM, &r);
            }
            for (b = 0; b < sizeof ks / sizeof *ks; b++) {
                if (ns[a] > 5000 && nq > 7 && ks[b] > 100) continue; /* keep the CPU side short */
                bad += compare(idx, queries, nq, ks[b]);
                runs++;
            }
            free(queries);
        }
        free(rows);
        patina_index_free(idx);
    }
    printf("  %zu (index, queries, k) runs, %zu differing hits\n", runs, bad);
    assert_int_equal(bad, 0);
}

static void test_refusals(void **state)
{
    patina_extractor_t *ex;
    patina_index_t *idx;
    uint8_t q[PATINA_CEDD_DIM];
    uint64_t ids[3] = {1, 2, 3};
    patina_hit_t hits[3];
    size_t n;
    tu_rng_t r;
    (void)state;
    /* a family other than CEDD */
    TU_OK(patina_extractor_new(&ex, "lbp8"));
    {
        size_t bytes = patina_extractor_bytes(ex);
        uint8_t *d = calloc(3, bytes);
        TU_OK(patina_index_new(&idx, ex, ids, d, 3));
        free(d);
        d = calloc(1, bytes);
        assert_int_equal(patina_index_knn_gpu(idx, 0, d, 1, 2, hits, &n), PATINA_E_UNAVAILABLE);
        free(d);
    }
    patina_index_free(idx);
    patina_extractor_free(ex);
    /* k = 0 and a missing device */
    tu_rng_seed(&r, 7);
    idx = make_index(100, &r, 0, NULL);
    random_desc(q, &r);
    assert_int_equal(patina_index_knn_gpu(idx, 0, q, 1, 0, hits, &n), PATINA_E_INVALID);
    assert_int_equal(patina_index_knn_gpu(idx, 999, q, 1, 3, hits, &n), PATINA_E_UNAVAILABLE);
    /* a query that is not a CEDD descriptor goes to the CPU, same answer */
    q[5] = 200;
    assert_int_equal(compare(idx, q, 1, 3), 0);
    patina_index_free(idx);
}

/* Many threads searching one index: the device copy is made once, calls
 * are serialised, every answer equals the CPU's. */
typedef struct th_arg {
    const patina_index_t *idx;
    const uint8_t *q;
    size_t bad;
} th_arg_t;

static void *th_main(void *v)
{
    th_arg_t *a = v;
    int i;
    for (i = 0; i < 5; i++) a->bad += compare(a->idx, a->q, 3, 10);
    return NULL;
}

static void test_threads(void **state)
{
    tu_rng_t r;
    patina_index_t *idx;
    uint8_t q[3 * PATINA_CEDD_DIM];
    pthread_t th[4];
    th_arg_t arg[4];
    int i;
    (void)state;
    tu_rng_seed(&r, 11);
    idx = make_index(9000, &r, 0, NULL);
    for (i = 0; i < 3; i++) random_desc(q + i * PATINA_CEDD_DIM, &r);
    for (i = 0; i < 4; i++) {
        arg[i].idx = idx;
        arg[i].q = q;
        arg[i].bad = 0;
        assert_int_equal(pthread_create(&th[i], NULL, th_main, &arg[i]), 0);
    }
    for (i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(arg[i].bad, 0);
    }
    patina_index_free(idx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_threads),
    };
    tu_require_gpu();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
