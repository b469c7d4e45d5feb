/* Exact k-NN on the GPU (patina_index_knn, device GPU) against the CPU
 * search (device CPU), which tests/test_search.c and tests/test_distance.c
 * hold to the distance definitions bit for bit: same counts, same ids in the
 * same order, same distance bits.
 *   - Tanimoto fast path: random CEDD descriptors (bins 0..7, mostly zero),
 *     duplicated rows (ties, ordered by id), zero rows and queries (the 0 /
 *     100 special cases), ids not in row order; index sizes around the
 *     engine's pilot sample (8192 rows) and stage (128 rows), k from 1 to
 *     the GPU's limit of 1024 (1025 refused), several query batches; an
 *     index of a few distinct rows copied thousands of times (exact ties
 *     overflow the candidate lists: those queries are the CPU's, same
 *     answer); range search on the GPU against the CPU's, radius 0 to 100
 *     and with max_hits; live updates (put, replace, remove, compaction,
 *     the device copy's room running out, a row leaving 0..7) between GPU
 *     searches;
 *   - every other distance and element type through the families that use
 *     them (lbp8 chi2/l1/intersection/hellinger on u32 and f32, glcm l2 and
 *     haralick std_l2 on f64), k-NN and range with radii on the CPU's own
 *     distances, and Tanimoto queries with an element above 7; which engine
 *     answered (the float filter, the definition kernels) is checked too;
 *     the tensor-core filter's batches (300 queries, k 1..1024) and zero
 *     rows / a zero query under hellinger, its scan on mma.sync and on
 *     wgmma (Hopper), the same queries overflowing in both;
 *   - data outside the float filter's domain (huge, negative, tiny values)
 *     and rows the filter cannot separate (retried by the definition
 *     kernels);
 *   - an index larger than the context's device budget (searched in chunks
 *     of rows), with removed rows, k-NN and range; a CEDD one streamed from
 *     its pinned host tier (k 1..1024, range, ties across chunks, live
 *     updates between calls);
 *   - many threads sharing one context whose memory budget holds one index
 *     copy at a time, searching three indexes: copies are dropped and remade
 *     under the searches, every answer equals the CPU's.
 * Skipped (77) without a GPU. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h" /* patina_gpu__ix_kernel */
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

static patina_context_t *CTX; /* the tests' context (one GPU) */
static patina_search_stats_t LAST; /* how the last GPU call of compare / compare_range answered */
static int QUICK; /* PATINA_TEST_QUICK=1: a smaller set (under compute-sanitizer), 2: tiny (racecheck) */

static size_t compare_on(patina_context_t *ctx, const patina_index_t *idx, const void *queries, size_t nq,
                         size_t k)
{
    patina_hit_t *a = malloc(nq * k * sizeof *a), *b = malloc(nq * k * sizeof *b);
    size_t *ca = malloc(nq * sizeof *ca), *cb = malloc(nq * sizeof *cb), q, i, bad = 0;
    patina_search_opts_t cpu, gpu;
    patina_search_opts_init(&cpu);
    patina_search_opts_init(&gpu);
    cpu.device = PATINA_DEVICE_CPU;
    gpu.device = PATINA_DEVICE_GPU;
    gpu.stats = &LAST;
    assert_true(a && b && ca && cb);
    TU_OK(patina_index_knn(NULL, idx, queries, nq, k, &cpu, a, ca));
    TU_OK(patina_index_knn(ctx, idx, queries, nq, k, &gpu, b, cb));
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

static size_t compare(const patina_index_t *idx, const void *queries, size_t nq, size_t k)
{
    return compare_on(CTX, idx, queries, nq, k);
}

static void test_random(void **state)
{
    static const size_t ns[] = {0, 1, 5, 127, 129, 2049, 8193, 70000};
    static const size_t ks[] = {1, 10, 100, 1000, 1024};
    static const size_t nqs[] = {1, 7, 64, 300}; /* 300: two query tiles a warp (the batch scan), tiles padded */
    const size_t nn = QUICK ? (QUICK > 1 ? 4 : 6) : sizeof ns / sizeof *ns,
                 nk = QUICK ? 2 : sizeof ks / sizeof *ks, nnq = QUICK ? (QUICK > 1 ? 1 : 2) : sizeof nqs / sizeof *nqs;
    tu_rng_t r;
    size_t a, b, c, bad = 0, runs = 0;
    (void)state;
    tu_rng_seed(&r, 2026);
    for (a = 0; a < nn; a++) {
        uint8_t *rows;
        patina_index_t *idx = make_index(ns[a], &r, a % 2, &rows);
        for (c = 0; c < nnq; c++) {
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
            for (b = 0; b < nk; b++) {
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
    patina_index_t *idx;
    uint8_t q[PATINA_CEDD_DIM];
    patina_hit_t hits[3];
    size_t n;
    tu_rng_t r;
    patina_search_opts_t o;
    patina_context_t *bad;
    patina_context_opts_t co;
    (void)state;
    patina_search_opts_init(&o);
    o.device = PATINA_DEVICE_GPU;
    tu_rng_seed(&r, 7);
    idx = make_index(100, &r, 0, NULL);
    random_desc(q, &r);
    assert_int_equal(patina_index_knn(CTX, idx, q, 1, 0, &o, hits, &n), PATINA_E_INVALID);
    {   /* k over the GPU's limit: refused on the GPU, served by AUTO (on the CPU) */
        patina_hit_t *big = malloc(1025 * sizeof *big);
        patina_search_opts_t au;
        patina_search_opts_init(&au);
        assert_int_equal(patina_index_knn(CTX, idx, q, 1, 1025, &o, big, &n), PATINA_E_UNAVAILABLE);
        TU_OK(patina_index_knn(CTX, idx, q, 1, 1025, &au, big, &n));
        assert_int_equal(n, 100);
        free(big);
    }
    /* a missing device */
    patina_context_opts_init(&co);
    co.gpu_index = 999;
    TU_OK(patina_context_new(&bad, &co));
    assert_int_equal(patina_index_knn(bad, idx, q, 1, 3, &o, hits, &n), PATINA_E_UNAVAILABLE);
    patina_context_free(bad);
    /* a query that is not a CEDD descriptor: the definition, same answer */
    q[5] = 200;
    assert_int_equal(compare(idx, q, 1, 3), 0);
    patina_index_free(idx);
}

/* A table of a few distinct rows copied many times: a query equal to one
 * of them has thousands of exact ties at distance 0 (more than the GPU's
 * candidate list): the GPU hands it to the CPU; the answer is the same. */
static void test_ties(void **state)
{
    const size_t n = QUICK ? 9000 : 20000, nq = 6;
    uint8_t *rows = malloc(n * PATINA_CEDD_DIM), base[3][PATINA_CEDD_DIM], *queries = malloc(nq * PATINA_CEDD_DIM);
    uint64_t *ids = malloc(n * sizeof *ids);
    patina_extractor_t *ex;
    patina_index_t *idx;
    tu_rng_t r;
    size_t i, bad = 0;
    (void)state;
    tu_rng_seed(&r, 99);
    for (i = 0; i < 3; i++) random_desc(base[i], &r);
    for (i = 0; i < n; i++) {
        memcpy(rows + i * PATINA_CEDD_DIM, base[i % 3], PATINA_CEDD_DIM);
        if (i % 10 == 9) random_desc(rows + i * PATINA_CEDD_DIM, &r);
        ids[i] = n - i; /* ids against row order */
    }
    for (i = 0; i < nq; i++) {
        if (i < 3) memcpy(queries + i * PATINA_CEDD_DIM, base[i], PATINA_CEDD_DIM);
        else random_desc(queries + i * PATINA_CEDD_DIM, &r);
    }
    TU_OK(patina_extractor_new(&ex, "cedd"));
    TU_OK(patina_index_new(&idx, ex, ids, rows, n));
    bad += compare(idx, queries, nq, 10);
    bad += compare(idx, queries, nq, 1024);
    printf("  %zu rows of 3 repeated descriptors: %zu differing hits\n", n, bad);
    assert_int_equal(bad, 0);
    patina_index_free(idx);
    patina_extractor_free(ex);
    free(rows);
    free(ids);
    free(queries);
}

/* Range search: the GPU's lists (on ctx) equal the CPU's (counts, ids, distance bits). */
static size_t compare_range_on(patina_context_t *ctx, const patina_index_t *idx, const void *queries, size_t nq,
                               double radius, size_t max_hits)
{
    patina_hit_t **a = calloc(nq, sizeof *a), **b = calloc(nq, sizeof *b);
    size_t *ca = calloc(nq, sizeof *ca), *cb = calloc(nq, sizeof *cb), q, i, bad = 0;
    patina_search_opts_t cpu, gpu;
    patina_search_opts_init(&cpu);
    patina_search_opts_init(&gpu);
    cpu.device = PATINA_DEVICE_CPU;
    gpu.device = PATINA_DEVICE_GPU;
    cpu.max_hits = gpu.max_hits = max_hits;
    gpu.stats = &LAST;
    TU_OK(patina_index_range(NULL, idx, queries, nq, radius, &cpu, a, ca));
    TU_OK(patina_index_range(ctx, idx, queries, nq, radius, &gpu, b, cb));
    for (q = 0; q < nq; q++) {
        if (ca[q] != cb[q]) {
            if (bad < 5) printf("  radius %g query %zu: cpu %zu hits, gpu %zu\n", radius, q, ca[q], cb[q]);
            bad++;
            continue;
        }
        for (i = 0; i < ca[q]; i++)
            if (a[q][i].id != b[q][i].id || memcmp(&a[q][i].distance, &b[q][i].distance, sizeof(double))) {
                if (bad < 5)
                    printf("  radius %g query %zu rank %zu: cpu id %llu %.17g, gpu id %llu %.17g\n", radius, q, i,
                           (unsigned long long)a[q][i].id, a[q][i].distance, (unsigned long long)b[q][i].id,
                           b[q][i].distance);
                bad++;
            }
        free(a[q]);
        free(b[q]);
    }
    free(a);
    free(b);
    free(ca);
    free(cb);
    return bad;
}

static size_t compare_range(const patina_index_t *idx, const void *queries, size_t nq, double radius,
                            size_t max_hits)
{
    return compare_range_on(CTX, idx, queries, nq, radius, max_hits);
}

static void test_range(void **state)
{
    static const double radii[] = {0.0, 20.0, 35.0, 45.0, 60.0, 100.0};
    const size_t n = QUICK ? 5000 : 30000, nq = QUICK ? 5 : 40;
    uint8_t *rows, *queries = malloc(nq * PATINA_CEDD_DIM);
    patina_index_t *idx;
    patina_hit_t *h[1];
    size_t c[1], q, a, bad = 0;
    tu_rng_t r;
    patina_search_opts_t o;
    (void)state;
    tu_rng_seed(&r, 31);
    idx = make_index(n, &r, 1, &rows);
    for (q = 0; q < nq; q++) {
        if (q % 3 == 1) memcpy(queries + q * PATINA_CEDD_DIM, rows + tu_rng_below(&r, (uint32_t)n) * PATINA_CEDD_DIM,
                               PATINA_CEDD_DIM);
        else if (q == 2) memset(queries + q * PATINA_CEDD_DIM, 0, PATINA_CEDD_DIM);
        else random_desc(queries + q * PATINA_CEDD_DIM, &r);
    }
    for (a = 0; a < sizeof radii / sizeof *radii; a++) {
        bad += compare_range(idx, queries, nq, radii[a], 0);
        bad += compare_range(idx, queries, nq, radii[a], 7);
    }
    /* an element above 7: that query goes to the CPU, same answer */
    queries[5] = 9;
    bad += compare_range(idx, queries, nq, 45.0, 0);
    printf("  range: %zu differing lists or hits\n", bad);
    assert_int_equal(bad, 0);
    patina_search_opts_init(&o);
    o.device = PATINA_DEVICE_GPU;
    assert_int_equal(patina_index_range(CTX, idx, queries, 1, -0.5, &o, h, c), PATINA_E_INVALID);
    patina_index_free(idx);
    free(rows);
    free(queries);
}

/* Live updates between GPU searches: the device copy follows (rows
 * appended, removed rows blanked), is remade when its room runs out, after
 * a compaction and when a row leaves 0..7 (the definition from then on);
 * every answer equals the CPU's on the same index. */
static void test_live(void **state)
{
    const size_t n0 = QUICK ? 6000 : 20000, nq = 9;
    uint8_t *rows, *queries = malloc(nq * PATINA_CEDD_DIM);
    patina_index_t *idx;
    tu_rng_t r;
    uint64_t next = 10000000;
    size_t bad = 0, q, removed;
    (void)state;
    tu_rng_seed(&r, 555);
    idx = make_index(n0, &r, 1, &rows);
    for (q = 0; q < nq; q++) random_desc(queries + q * PATINA_CEDD_DIM, &r);
    bad += compare(idx, queries, nq, 10); /* the device copy exists from here on */
    for (int round = 0; round < (QUICK ? 4 : 10); round++) {
        const size_t na = round == 3 ? n0 / 2 : 300, nrm = round == 5 ? n0 / 3 : 250;
        uint8_t *add = malloc(na * PATINA_CEDD_DIM);
        uint64_t *aid = malloc(na * sizeof *aid), *rid = malloc(nrm * sizeof *rid);
        for (size_t i = 0; i < na; i++) {
            random_desc(add + i * PATINA_CEDD_DIM, &r);
            /* some replace a row of the first table (ids 1 + 3 i) */
            aid[i] = i % 5 == 0 ? 1 + 3 * (uint64_t)(i * 7 % n0) : next++;
        }
        if (round == 2) /* a query's exact copy appended: distance 0 */
            memcpy(add, queries, PATINA_CEDD_DIM);
        for (size_t i = 0; i < nrm; i++) rid[i] = 1 + 3 * (uint64_t)tu_rng_below(&r, (uint32_t)n0);
        if (round == (QUICK ? 3 : 8)) add[5] = 9; /* leaves 0..7: the definition kernels */
        TU_OK(patina_index_put(idx, aid, add, na));
        bad += compare(idx, queries, nq, 10);
        TU_OK(patina_index_remove(idx, rid, nrm, &removed));
        bad += compare(idx, queries, nq, 10);
        bad += compare(idx, queries, nq, 300);
        if (round != (QUICK ? 3 : 8) && round < (QUICK ? 3 : 8)) bad += compare_range(idx, queries, nq, 40.0, 0);
        free(add);
        free(aid);
        free(rid);
    }
    printf("  live updates: %zu differing hits\n", bad);
    assert_int_equal(bad, 0);
    patina_index_free(idx);
    free(rows);
    free(queries);
}

/* Random descriptors of an extractor's shape: small non-negative integers
 * (u32 counts), L1-normalised floats, or doubles of mixed scales. */
static void *random_rows(const patina_extractor_t *ex, size_t n, tu_rng_t *r)
{
    const size_t dim = patina_extractor_dim(ex), bytes = patina_extractor_bytes(ex);
    uint8_t *rows = malloc(n * bytes + 1);
    for (size_t i = 0; i < n; i++) {
        void *row = rows + i * bytes;
        double sum = 0;
        if (i > 0 && tu_rng_below(r, 100) < 3) { /* duplicates: ties */
            memcpy(row, rows + tu_rng_below(r, (uint32_t)i) * bytes, bytes);
            continue;
        }
        for (size_t k = 0; k < dim; k++) {
            uint32_t v = tu_rng_below(r, 100) < 60 ? 0 : tu_rng_below(r, 50);
            switch (patina_extractor_elem(ex)) {
            case PATINA_ELEM_U8: ((uint8_t *)row)[k] = (uint8_t)(v % 8); break;
            case PATINA_ELEM_U16: ((uint16_t *)row)[k] = (uint16_t)v; break;
            case PATINA_ELEM_U32: ((uint32_t *)row)[k] = v; break;
            case PATINA_ELEM_F32: ((float *)row)[k] = (float)v; sum += v; break;
            case PATINA_ELEM_F64: ((double *)row)[k] = (double)v * (k % 3 ? 1e-3 : 10.0) + 0.25 * (double)(k % 5); break;
            }
        }
        if (patina_extractor_elem(ex) == PATINA_ELEM_F32 && sum > 0)
            for (size_t k = 0; k < dim; k++) ((float *)row)[k] = (float)(((float *)row)[k] / sum);
    }
    return rows;
}

/* A family case's index (NULL: freed already), extractor and buffers */
static void case_free(patina_index_t *idx, patina_extractor_t *ex, void *ids, void *rows, void *queries)
{
    patina_index_free(idx);
    patina_extractor_free(ex);
    free(ids);
    free(rows);
    free(queries);
}

/* Every distance and element type: GPU equals CPU bit for bit, k-NN and
 * range (radii at the CPU's own kth distances, so that rows lie exactly on
 * the boundary); the answering engine is the one expected (the float
 * filter for every in-domain family; the definition kernels for Tanimoto
 * queries above 7). Tables above the 8192-row pilot exercise the sampled
 * pilot. */
static void test_distances(void **state)
{
    static const char *const specs[] = {
        "lbp8", "lbp8:distance=l1", "lbp8:distance=intersection", "lbp8:distance=hellinger",
        "lbp8:norm=l1", "lbp8:norm=l1,distance=hellinger", "lbp8:norm=l1,distance=intersection", "glcm",
        "haralick", "cedd"};
    static const size_t ns[] = {1, 2049, 5000, 40000};
    static const size_t ks[] = {1, 10, 1024};
    size_t bad = 0, runs = 0;
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 4242);
    for (size_t si = 0; si < sizeof specs / sizeof *specs; si++)
        for (size_t ni = 0; ni < (QUICK ? (QUICK > 1 ? 1 : 2) : sizeof ns / sizeof *ns); ni++) {
            patina_extractor_t *ex;
            patina_index_t *idx;
            const size_t n = ns[ni], nq = 5;
            const int cedd = !strcmp(specs[si], "cedd");
            int tensor; /* the dot-product distances: the tensor-core filter */
            uint64_t *ids = malloc(n * sizeof *ids);
            void *rows, *queries;
            TU_OK(patina_extractor_new(&ex, specs[si]));
            {
                const char *dn = patina_extractor_distance_name(ex);
                tensor = !strcmp(dn, "l2") || !strcmp(dn, "std_l2") || !strcmp(dn, "hellinger") || !strcmp(dn, "cosine");
            }
            rows = random_rows(ex, n, &r);
            queries = random_rows(ex, nq, &r);
            if (cedd) /* elements above 7: the Tanimoto definition */
                ((uint8_t *)queries)[3] = 200;
            for (size_t i = 0; i < n; i++) ids[i] = 7 + 2 * (uint64_t)((i * 7919) % n);
            TU_OK(patina_index_new(&idx, ex, ids, rows, n));
            for (size_t ki = 0; ki < (QUICK ? 2 : sizeof ks / sizeof *ks); ki++) {
                size_t b;
                if (ks[ki] > 1024) continue; /* k <= 1024 on the GPU (refusal: test_refusals) */
                b = compare(idx, queries, nq, ks[ki]);
                if (b) printf("  %s n %zu k %zu: %zu differing hits\n", specs[si], n, ks[ki], b);
                /* the expected engine answers (a query whose candidates overflow it is retried by the
                 * definition kernels; never the CPU but for CEDD's queries above 7) */
                if (cedd ? LAST.gpu_exact + LAST.cpu != nq
                         : (tensor ? LAST.gpu_tensor : LAST.gpu_filter) == 0 || LAST.cpu != 0 ||
                               LAST.gpu_tensor + LAST.gpu_filter + LAST.gpu_exact != nq) {
                    printf("  %s n %zu k %zu: answered by tensor %zu, filter %zu, exact %zu, cpu %zu\n", specs[si], n,
                           ks[ki], LAST.gpu_tensor, LAST.gpu_filter, LAST.gpu_exact, LAST.cpu);
                    b++;
                }
                bad += b;
                runs++;
            }
            { /* range: radii at the CPU's 1st, 7th and 30th distances of query 1 */
                patina_hit_t h[30];
                size_t c[1];
                patina_search_opts_t o;
                const size_t bytes = patina_extractor_bytes(ex);
                patina_search_opts_init(&o);
                o.device = PATINA_DEVICE_CPU;
                TU_OK(patina_index_knn(NULL, idx, (const uint8_t *)queries + bytes, 1, 30, &o, h, c));
                for (size_t j = 0; j < 3; j++) {
                    const size_t at = j == 0 ? 0 : j == 1 ? 6 : 29;
                    size_t b;
                    if (at >= c[0]) continue;
                    b = compare_range(idx, queries, nq, h[at].distance, 0) +
                        compare_range(idx, queries, nq, h[at].distance, 3);
                    if (!cedd && (tensor ? LAST.gpu_tensor : LAST.gpu_filter) != nq) {
                        printf("  %s n %zu range: answered by tensor %zu, filter %zu, exact %zu, cpu %zu\n", specs[si],
                               n, LAST.gpu_tensor, LAST.gpu_filter, LAST.gpu_exact, LAST.cpu);
                        b++;
                    }
                    if (b) printf("  %s n %zu radius %.17g: %zu differing\n", specs[si], n, h[at].distance, b);
                    bad += b;
                    runs++;
                }
            }
            case_free(idx, ex, ids, rows, queries);
        }
    printf("  %zu (distance, n, k or radius) runs, %zu differing hits or wrong engines\n", runs, bad);
    assert_int_equal(bad, 0);
}

/* test_distances with the filter's scan on wgmma whatever the batch (5
 * queries; 1 to 40000 rows: chunks cut short, a block of one row): on a
 * Hopper device glcm and the lbp8 hellinger forms go through it (haralick's
 * 28 elements stay on mma.sync); elsewhere this repeats test_distances. */
static void test_distances_wgmma(void **state)
{
    patina_gpu__ix_kernel(PGPU_IX_KERNEL_WGMMA);
    test_distances(state);
    patina_gpu__ix_kernel(PGPU_IX_KERNEL_AUTO);
}

static int ix_kernel_auto(void **state)
{
    (void)state;
    patina_gpu__ix_kernel(PGPU_IX_KERNEL_AUTO);
    return 0;
}

/* The first scan's queries that overflowed the filter (the last call's,
 * kept in *slot when first), or the other scans' against them: 1 (and a
 * line) when they differ. */
static size_t same_overflows(size_t *slot, int first, const char *what, size_t k)
{
    if (first) {
        *slot = LAST.gpu_exact;
        return 0;
    }
    if (LAST.gpu_exact == *slot) return 0;
    printf("  %s, k %zu: %zu queries overflowed the filter, %zu with mma.sync\n", what, k, LAST.gpu_exact, *slot);
    return 1;
}

/* The tensor-core filter's batches (l2, std_l2, hellinger): 300 queries
 * (the scan's 8-tile blocks over whole waves, the pilot's 2-tile blocks)
 * over tables past the pilot's sample, k 1 to 1024, answered by the filter
 * and its final pass (or, overflowing, the definition kernels), never the
 * CPU, bit for bit the CPU's answers; then zero rows and
 * a zero query (hellinger's exact keys 0 and 1: the zero query's ties go
 * wherever they must, its answer the CPU's). Each with the scan on mma.sync,
 * on wgmma where it applies (Hopper: glcm's 40 and lbp8's 256 elements;
 * elsewhere the same mma.sync scan again) and as the library picks; the
 * scans find the same candidates, so the same queries overflow their lists
 * and go to the definition kernels in every mode. */
static void test_filter_batches(void **state)
{
    static const char *const specs[] = {"glcm", "haralick", "lbp8:norm=l1,distance=hellinger",
                                        "lbp8:distance=hellinger"};
    static const size_t ks[] = {1, 10, 100, 1024};
    static const int modes[] = {PGPU_IX_KERNEL_MMA, PGPU_IX_KERNEL_WGMMA, PGPU_IX_KERNEL_AUTO};
    static const char *const mode_names[] = {"mma.sync", "wgmma", "auto"};
    const size_t n = QUICK ? 12000 : 30000, nq = 300;
    size_t bad = 0, runs = 0, exact[4][6]; /* [spec][run]: queries the definition kernels answered, mma.sync */
    tu_rng_t r;
    (void)state;
    for (size_t mi = 0; mi < sizeof modes / sizeof *modes; mi++) {
        patina_gpu__ix_kernel(modes[mi]);
        tu_rng_seed(&r, 3030);
        for (size_t si = 0; si < sizeof specs / sizeof *specs; si++) {
            patina_extractor_t *ex;
            patina_index_t *idx;
            uint64_t *ids = malloc(n * sizeof *ids);
            uint8_t *rows, *queries;
            size_t bytes, run = 0;
            char what[96], zwhat[96];
            snprintf(what, sizeof what, "%s, %s", mode_names[mi], specs[si]);
            snprintf(zwhat, sizeof zwhat, "%s, %s zero rows", mode_names[mi], specs[si]);
            TU_OK(patina_extractor_new(&ex, specs[si]));
            bytes = patina_extractor_bytes(ex);
            rows = random_rows(ex, n, &r);
            queries = random_rows(ex, nq, &r);
            memcpy(queries + 5 * bytes, rows + 77 * bytes, bytes); /* an indexed row: distance 0 */
            for (size_t i = 0; i < n; i++) ids[i] = 3 + (uint64_t)((i * 7919) % n);
            TU_OK(patina_index_new(&idx, ex, ids, rows, n));
            for (size_t ki = 0; ki < (QUICK ? 2 : sizeof ks / sizeof *ks); ki++, run++) {
                size_t b = compare(idx, queries, nq, ks[ki]);
                if (b) printf("  %s, k %zu: %zu differing hits\n", what, ks[ki], b);
                /* (a query whose candidates overflow the list is retried by the definition kernels) */
                if (LAST.gpu_tensor == 0 || LAST.cpu != 0 || LAST.gpu_tensor + LAST.gpu_exact != nq) {
                    printf("  %s, k %zu: the wrong engines: tensor %zu, filter %zu, exact %zu, cpu %zu\n", what,
                           ks[ki], LAST.gpu_tensor, LAST.gpu_filter, LAST.gpu_exact, LAST.cpu);
                    b++;
                }
                b += same_overflows(&exact[si][run], mi == 0, what, ks[ki]);
                bad += b;
                runs++;
            }
            patina_index_free(idx);
            if (strstr(specs[si], "hellinger")) { /* zero rows (every 100th) and a zero query */
                for (size_t i = 0; i < n; i += 100) memset(rows + i * bytes, 0, bytes);
                memset(queries + 9 * bytes, 0, bytes);
                TU_OK(patina_index_new(&idx, ex, ids, rows, n));
                for (size_t ki = 0; ki < 2; ki++, run++) {
                    size_t b = compare(idx, queries, nq, ks[ki]);
                    if (b) printf("  %s, k %zu: %zu differing hits\n", zwhat, ks[ki], b);
                    b += same_overflows(&exact[si][run], mi == 0, zwhat, ks[ki]);
                    bad += b;
                    runs++;
                }
                patina_index_free(idx);
            }
            case_free(NULL, ex, ids, rows, queries);
        }
    }
    patina_gpu__ix_kernel(PGPU_IX_KERNEL_AUTO);
    printf("  %zu (scan, family, k) batch runs, %zu differing hits or wrong engines\n", runs, bad);
    assert_int_equal(bad, 0);
}

/* Data outside the float filter's domain: the definition kernels answer,
 * the same as the CPU -- a value above 2^60 in the table (glcm, l2), a
 * negative query element (chi2), a value above 2^60 in a query (haralick); and
 * rows the filter cannot separate (distinct doubles 1e-13 apart: thousands
 * of candidates overflow its list) are retried by the definition kernels,
 * whose exact keys settle them. */
static void test_filter_domain(void **state)
{
    const size_t n = QUICK ? 9000 : 20000, nq = 3;
    tu_rng_t r;
    size_t bad = 0;
    (void)state;
    tu_rng_seed(&r, 99);
    for (int kase = 0; kase < 4; kase++) {
        const char *spec = kase == 1 ? "lbp8:norm=l1" : kase == 2 ? "haralick" : "glcm";
        patina_extractor_t *ex;
        patina_index_t *idx;
        uint64_t *ids = malloc(n * sizeof *ids);
        uint8_t *rows, *queries;
        size_t bytes, dim, b;
        TU_OK(patina_extractor_new(&ex, spec));
        bytes = patina_extractor_bytes(ex);
        dim = patina_extractor_dim(ex);
        rows = random_rows(ex, n, &r);
        queries = random_rows(ex, nq, &r);
        for (size_t i = 0; i < n; i++) ids[i] = 1 + (uint64_t)((i * 104729) % n);
        if (kase == 0) ((double *)rows)[3] = 3e18; /* > 2^60 */
        if (kase == 1) ((float *)queries)[2] = -0.25f;
        if (kase == 2) ((double *)queries)[1] = 3e18;
        if (kase == 3) /* rows 1e-13 apart in one element; queries equal to row 0 */
            for (size_t i = 0; i < n; i++) {
                double *row = (double *)(rows + i * bytes);
                for (size_t k = 0; k < dim; k++) row[k] = 0.5 + 0.01 * (double)k;
                row[0] += 1e-13 * (double)((i * 7) % n);
                if (i < nq) memcpy(queries + i * bytes, rows, bytes);
            }
        TU_OK(patina_index_new(&idx, ex, ids, rows, n));
        b = compare(idx, queries, nq, 10);
        if (LAST.gpu_tensor || LAST.gpu_filter || LAST.gpu_exact == 0 || LAST.gpu_exact + LAST.cpu != nq) {
            printf("  case %d (%s): answered by filter %zu, exact %zu, cpu %zu\n", kase, spec, LAST.gpu_filter,
                   LAST.gpu_exact, LAST.cpu);
            b++;
        }
        if (kase != 3) {
            b += compare_range(idx, queries, nq, 0.5, 0);
            /* the definition kernels' k-NN at the GPU's largest k (thousands of candidates) */
            b += compare(idx, queries, nq, 1024);
            if (LAST.gpu_exact == 0 || LAST.gpu_exact + LAST.cpu != nq) b++;
        }
        if (b) printf("  case %d (%s): %zu differing\n", kase, spec, b);
        bad += b;
        case_free(idx, ex, ids, rows, queries);
    }
    assert_int_equal(bad, 0);
}

/* An index larger than the context's device budget: searched in chunks of
 * rows (stats.chunks > 0), k-NN and range, with removed rows in the
 * chunks; every answer equals the CPU's. CEDD (the tensor-core engine) and
 * lbp8 chi2 (the float filter). */
static void test_chunked(void **state)
{
    const size_t n = QUICK ? 20000 : 40000, nq = 6;
    static const char *const specs[] = {"cedd", "lbp8"};
    size_t bad = 0;
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 77);
    for (int si = 0; si < 2; si++) {
        patina_context_t *ctx;
        patina_context_opts_t co;
        patina_extractor_t *ex;
        patina_index_t *idx;
        uint64_t *ids = malloc(n * sizeof *ids), rid[300];
        uint8_t *rows, *queries;
        size_t removed, bytes;
        patina_search_stats_t st;
        patina_search_opts_t o;
        patina_hit_t h[8];
        size_t c[1];
        TU_OK(patina_extractor_new(&ex, specs[si]));
        bytes = patina_extractor_bytes(ex);
        rows = random_rows(ex, n, &r);
        queries = random_rows(ex, nq, &r);
        for (size_t i = 0; i < n; i++) ids[i] = 1 + (uint64_t)((i * 7919) % n);
        TU_OK(patina_index_new(&idx, ex, ids, rows, n));
        for (size_t i = 0; i < 300; i++) rid[i] = 1 + (uint64_t)tu_rng_below(&r, (uint32_t)n);
        TU_OK(patina_index_remove(idx, rid, 300, &removed));
        patina_context_opts_init(&co);
        /* below the index's copy (CEDD: the rows, sums and room, ~1.6 x its
         * bytes; lbp8: the rows as counts and as the filter's floats, 2 x) */
        co.gpu_mem_budget = si == 0 ? n * bytes / 5 + (2u << 20) : n * bytes * 2 / 3 + (4u << 20);
        TU_OK(patina_context_new(&ctx, &co));
        for (size_t k = 1; k <= 100; k *= 10) {
            size_t b = compare_on(ctx, idx, queries, nq, k);
            if (LAST.chunks < 2) {
                printf("  %s k %zu: %zu chunks\n", specs[si], k, LAST.chunks);
                b++;
            }
            if (b) printf("  %s chunked k %zu: %zu differing\n", specs[si], k, b);
            bad += b;
        }
        { /* range, radius at query 0's 8th distance (the CPU's) */
            patina_hit_t **a = calloc(nq, sizeof *a), **g = calloc(nq, sizeof *g);
            size_t *ca = calloc(nq, sizeof *ca), *cg = calloc(nq, sizeof *cg);
            patina_search_opts_t cpu, gpu;
            patina_search_opts_init(&o);
            o.device = PATINA_DEVICE_CPU;
            TU_OK(patina_index_knn(NULL, idx, queries, 1, 8, &o, h, c));
            patina_search_opts_init(&cpu);
            patina_search_opts_init(&gpu);
            cpu.device = PATINA_DEVICE_CPU;
            gpu.device = PATINA_DEVICE_GPU;
            gpu.stats = &st;
            TU_OK(patina_index_range(NULL, idx, queries, nq, h[7].distance, &cpu, a, ca));
            TU_OK(patina_index_range(ctx, idx, queries, nq, h[7].distance, &gpu, g, cg));
            if (st.chunks < 2) bad++;
            for (size_t q = 0; q < nq; q++) {
                if (ca[q] != cg[q]) bad++;
                else
                    for (size_t i = 0; i < ca[q]; i++)
                        if (a[q][i].id != g[q][i].id || memcmp(&a[q][i].distance, &g[q][i].distance, 8)) bad++;
                free(a[q]);
                free(g[q]);
            }
            free(a);
            free(g);
            free(ca);
            free(cg);
        }
        if (si == 1) { /* the chunks' pinned images: replayed, made stale by a removal, made again */
            size_t b = compare_on(ctx, idx, queries, nq, 10);
            if (LAST.chunks < 2 || LAST.host_bytes == 0) b++; /* replayed from the first calls' images */
            for (size_t i = 0; i < 100; i++) rid[i] = 1 + (uint64_t)tu_rng_below(&r, (uint32_t)n);
            TU_OK(patina_index_remove(idx, rid, 100, &removed));
            b += compare_on(ctx, idx, queries, nq, 10);
            if (LAST.host_bytes != 0) b++; /* stale: laid out afresh */
            b += compare_on(ctx, idx, queries, nq, 10);
            if (LAST.host_bytes == 0) b++;
            if (b) printf("  lbp8 chunk images: %zu differing (host bytes %zu)\n", b, LAST.host_bytes);
            bad += b;
        }
        patina_context_free(ctx);
        case_free(idx, ex, ids, rows, queries);
    }
    printf("  chunked: %zu differing\n", bad);
    assert_int_equal(bad, 0);
}

/* The streamed engine's account of the last call: every query but the
 * CPU's by the tensor cores, in at least two chunks from the pinned tier. */
static size_t streamed_ok(size_t nq, size_t cpu, const char *what)
{
    if (LAST.chunks >= 2 && LAST.host_bytes > 0 && LAST.gpu_tensor + LAST.cpu == nq && LAST.cpu <= cpu) return 0;
    printf("  %s: %zu chunks, %zu bytes streamed, %zu tensor, %zu cpu of %zu\n", what, LAST.chunks,
           LAST.host_bytes, LAST.gpu_tensor, LAST.cpu, nq);
    return 1;
}

/* A CEDD index larger than the device budget, streamed from the pinned
 * host tier (its tensor-core layout in page-locked memory, uploaded chunk
 * by chunk under the scan): k from 1 to 1024, more queries than one pilot
 * group, an all-zero query (the CPU's), exact ties across chunks (a
 * query's copies under several ids), range with and without max_hits, and
 * live updates between calls (rows appended into the tier's room and past
 * it, removed rows blanked). Every answer equals the CPU's. */
static void test_streamed(void **state)
{
    const size_t n = QUICK ? 60000 : 120000, nq = QUICK ? 24 : 160;
    static const size_t ks[] = {1, 10, 100, 1024};
    uint8_t *rows, *queries = malloc(nq * PATINA_CEDD_DIM), *add;
    uint64_t *aid, next = 50000000;
    patina_context_t *ctx;
    patina_context_opts_t co;
    patina_index_t *idx;
    patina_search_opts_t o;
    patina_hit_t h[8];
    size_t c[1], bad = 0, removed;
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 4242);
    idx = make_index(n, &r, 0, &rows);
    for (size_t q = 0; q < nq; q++) random_desc(queries + q * PATINA_CEDD_DIM, &r);
    memset(queries + PATINA_CEDD_DIM, 0, PATINA_CEDD_DIM);                     /* query 1: all zero */
    memcpy(queries + 2 * PATINA_CEDD_DIM, rows + 777 * PATINA_CEDD_DIM, PATINA_CEDD_DIM); /* query 2: a row */
    patina_context_opts_init(&co);
    /* the resident copy needs ~230 bytes a row; the tier 26 on the device
     * plus its chunk buffers (>= 1.4 MB) and the call's (an eighth of the
     * budget for outputs and candidates, as much for the pilot) */
    co.gpu_mem_budget = n * 60 + (6u << 20);
    TU_OK(patina_context_new(&ctx, &co));
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
        char what[32];
        size_t b = compare_on(ctx, idx, queries, nq, ks[i]);
        snprintf(what, sizeof what, "k-NN k %zu", ks[i]);
        b += streamed_ok(nq, 1, what);
        if (b) printf("  streamed k %zu: %zu differing\n", ks[i], b);
        bad += b;
    }
    /* range at query 0's 8th distance (the CPU's), with and without max_hits */
    patina_search_opts_init(&o);
    o.device = PATINA_DEVICE_CPU;
    TU_OK(patina_index_knn(NULL, idx, queries, 1, 8, &o, h, c));
    bad += compare_range_on(ctx, idx, queries, nq, h[7].distance, 0) + streamed_ok(nq, 1, "range");
    bad += compare_range_on(ctx, idx, queries, nq, 35.0, 5) + streamed_ok(nq, 1, "range max_hits");
    /* live updates: appended rows (five copies of query 0 among them: ties
     * by id across the appended chunk), replaced and removed rows */
    for (int round = 0; round < 3; round++) {
        const size_t na = round == 2 ? n / 2 : 3000, nrm = 700;
        uint64_t *rid = malloc(nrm * sizeof *rid);
        add = malloc(na * PATINA_CEDD_DIM);
        aid = malloc(na * sizeof *aid);
        for (size_t i = 0; i < na; i++) {
            random_desc(add + i * PATINA_CEDD_DIM, &r);
            aid[i] = i % 7 == 0 ? 1 + 3 * (uint64_t)((i * 7 + (size_t)round) % n) : next++; /* distinct */
        }
        for (size_t i = 0; i < 5; i++) memcpy(add + (100 + 211 * i) * PATINA_CEDD_DIM, queries, PATINA_CEDD_DIM);
        for (size_t i = 0; i < nrm; i++) rid[i] = 1 + 3 * (uint64_t)tu_rng_below(&r, (uint32_t)n);
        TU_OK(patina_index_put(idx, aid, add, na));
        bad += compare_on(ctx, idx, queries, nq, 10) + streamed_ok(nq, 1, "after put");
        TU_OK(patina_index_remove(idx, rid, nrm, &removed));
        bad += compare_on(ctx, idx, queries, nq, 10) + streamed_ok(nq, 1, "after remove");
        bad += compare_range_on(ctx, idx, queries, nq, 30.0, 0) + streamed_ok(nq, 1, "range after remove");
        free(add);
        free(aid);
        free(rid);
    }
    printf("  streamed: %zu differing\n", bad);
    assert_int_equal(bad, 0);
    patina_context_free(ctx);
    patina_index_free(idx);
    free(rows);
    free(queries);
}

/* Many threads, one context with room for one index copy, three indexes:
 * the copies are dropped and remade while other threads wait for the
 * context's GPU turn; every answer equals the CPU's. */
typedef struct th_arg {
    patina_context_t *ctx;
    patina_index_t *const *idx;
    const uint8_t *q;
    size_t bad;
    int seed;
} th_arg_t;

static void *th_main(void *v)
{
    th_arg_t *a = v;
    for (int i = 0; i < (QUICK ? (QUICK > 1 ? 1 : 3) : 9); i++) a->bad += compare_on(a->ctx, a->idx[(i + a->seed) % 3], a->q, 3, 10);
    return NULL;
}

static void test_threads(void **state)
{
    enum { T = 6 };
    tu_rng_t r;
    patina_index_t *idx[3];
    uint8_t q[3 * PATINA_CEDD_DIM];
    pthread_t th[T];
    th_arg_t arg[T];
    patina_context_t *ctx;
    patina_context_opts_t co;
    int i;
    (void)state;
    tu_rng_seed(&r, 11);
    for (i = 0; i < 3; i++) idx[i] = make_index(9000 + 1000 * (size_t)i, &r, 0, NULL);
    for (i = 0; i < 3; i++) random_desc(q + i * PATINA_CEDD_DIM, &r);
    patina_context_opts_init(&co);
    co.gpu_mem_budget = 4u << 20; /* one copy (~2.5 MiB with its room for appended rows) and the buffers, not two */
    TU_OK(patina_context_new(&ctx, &co));
    for (i = 0; i < T; i++) {
        arg[i].ctx = ctx;
        arg[i].idx = idx;
        arg[i].q = q;
        arg[i].bad = 0;
        arg[i].seed = i;
        assert_int_equal(pthread_create(&th[i], NULL, th_main, &arg[i]), 0);
    }
    for (i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(arg[i].bad, 0);
    }
    patina_context_free(ctx);
    for (i = 0; i < 3; i++) patina_index_free(idx[i]);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_ties),
        cmocka_unit_test(test_range),
        cmocka_unit_test(test_live),
        cmocka_unit_test(test_distances),
        cmocka_unit_test_teardown(test_distances_wgmma, ix_kernel_auto),
        cmocka_unit_test_teardown(test_filter_batches, ix_kernel_auto),
        cmocka_unit_test(test_filter_domain),
        cmocka_unit_test(test_chunked),
        cmocka_unit_test(test_streamed),
        cmocka_unit_test(test_threads),
    };
    int rc;
    const char *quick = getenv("PATINA_TEST_QUICK");
    QUICK = quick && *quick ? atoi(quick) : 0;
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* one test (a sanitizer's run): its name, * and ? allowed */
    tu_require_gpu();
    if (patina_context_new(&CTX, NULL) != PATINA_OK) {
        fprintf(stderr, "test_knn_gpu: no context: %s\n", patina_last_error());
        return 1;
    }
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    patina_context_free(CTX);
    return rc;
}
