/* Live tables on the GPU (include/patina/table.h's device policy): a
 * table's answers with device GPU and AUTO equal device CPU's, hit for hit
 * and bit for bit, for
 *   - a CEDD table of 6,000 rows fed by a change stream (k-NN at k 1, 10
 *     and 1024; range with and without max_hits), then after puts and
 *     removals through the stream; k 1025 on the GPU is UNAVAILABLE (the
 *     engine's limit), never the CPU's answer in disguise;
 *   - a signature table with a stored pivot table (the GPU filter against
 *     the CPU filter, k-NN and range);
 *   - a rootsift table (identify, GPU tensor cores against the CPU);
 *   - five CEDD tables searched in one patina_table_search_many call (GPU,
 *     and AUTO mixing the GPU and the CPU) against one table of their union
 *     on the CPU;
 *   - patina_table_warm of searched tables (CEDD, signature): one device
 *     copy each, none for a table AUTO searches on the CPU;
 *   - seven CEDD tables searched together on the GPU (one engine pass over
 *     their copies) against the CPU, before and after removals.
 * Skipped (77) without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "patina/patina.h"
#include "core/context.h"
#include "gpu/gpu.h"
#include "testutil.h"

static patina_context_t *ctx_new(void)
{
    patina_context_t *ctx = NULL;
    TU_OK(patina_context_new(&ctx, NULL));
    return ctx;
}

static void same_results(const patina_table_results_t *a, const patina_table_results_t *b)
{
    size_t i;
    assert_int_equal(a->nq, b->nq);
    for (i = 0; i <= a->nq; i++) assert_int_equal(a->offsets[i], b->offsets[i]);
    for (i = 0; i < a->offsets[a->nq]; i++) {
        assert_int_equal(a->hits[i].id, b->hits[i].id);
        assert_memory_equal(&a->hits[i].distance, &b->hits[i].distance, sizeof(double));
    }
}

/* The query on every device; GPU and AUTO must equal CPU. */
static void check_devices(patina_table_t *t, const void *qs, size_t nq, patina_table_query_t q)
{
    patina_table_results_t cpu, gpu, aut;
    q.device = PATINA_DEVICE_CPU;
    TU_OK(patina_table_search(t, qs, nq, &q, &cpu));
    q.device = PATINA_DEVICE_GPU;
    TU_OK(patina_table_search(t, qs, nq, &q, &gpu));
    q.device = PATINA_DEVICE_AUTO;
    TU_OK(patina_table_search(t, qs, nq, &q, &aut));
    same_results(&cpu, &gpu);
    same_results(&cpu, &aut);
    patina_table_results_release(&cpu);
    patina_table_results_release(&gpu);
    patina_table_results_release(&aut);
}

static void random_cedd(uint8_t *d, tu_rng_t *r)
{
    int i;
    for (i = 0; i < PATINA_CEDD_DIM; i++) {
        uint32_t u = tu_rng_below(r, 100);
        d[i] = (uint8_t)(u < 70 ? 0 : 1 + tu_rng_below(r, 7));
    }
}

static void test_cedd_stream(void **state)
{
    enum { N = 6000, NQ = 16 };
    patina_context_t *ctx = ctx_new();
    patina_table_t *t = NULL;
    uint8_t *rows = malloc((size_t)N * PATINA_CEDD_DIM), qs[NQ * PATINA_CEDD_DIM];
    patina_change_t *ch = calloc(N, sizeof *ch);
    char (*keys)[24] = calloc(N, sizeof *keys);
    patina_table_query_t q;
    patina_table_results_t res;
    tu_rng_t r;
    size_t i;
    (void)state;
    tu_rng_seed(&r, 5);
    for (i = 0; i < N; i++) {
        random_cedd(rows + i * PATINA_CEDD_DIM, &r);
        if (i % 50 == 7) memcpy(rows + i * PATINA_CEDD_DIM, rows, PATINA_CEDD_DIM); /* ties, ordered by id */
        snprintf(keys[i], sizeof keys[i], "k%zu", i);
        ch[i] = (patina_change_t){PATINA_CHANGE_PUT, 3 * i + 1, keys[i], rows + i * PATINA_CEDD_DIM};
    }
    for (i = 0; i < NQ; i++) random_cedd(qs + i * PATINA_CEDD_DIM, &r);
    memcpy(qs, rows, PATINA_CEDD_DIM);
    TU_OK(patina_table_new(&t, ctx, "cedd", NULL));
    TU_OK(patina_table_apply(t, ch, N, 1, NULL));
    patina_table_query_init(&q);
    q.k = 1;
    check_devices(t, qs, NQ, q);
    q.k = 10;
    check_devices(t, qs, NQ, q);
    q.k = 1024;
    check_devices(t, qs, NQ, q);
    q.kind = PATINA_QUERY_RANGE;
    q.radius = 25;
    check_devices(t, qs, NQ, q);
    q.max_hits = 5;
    check_devices(t, qs, NQ, q);
    /* live: replace and remove rows through the stream, then again */
    for (i = 0; i < 200; i++) {
        ch[i].op = i % 2 ? PATINA_CHANGE_REMOVE : PATINA_CHANGE_PUT;
        ch[i].desc = rows + (i + 100) * PATINA_CEDD_DIM;
    }
    TU_OK(patina_table_apply(t, ch, 200, 2, NULL));
    assert_int_equal(patina_table_size(t), N - 100);
    patina_table_query_init(&q);
    q.k = 10;
    check_devices(t, qs, NQ, q);
    /* past the GPU engine's k: GPU says so, AUTO answers on the CPU */
    q.k = 1025;
    q.device = PATINA_DEVICE_GPU;
    assert_int_equal(patina_table_search(t, qs, 1, &q, &res), PATINA_E_UNAVAILABLE);
    q.device = PATINA_DEVICE_AUTO;
    TU_OK(patina_table_search(t, qs, 1, &q, &res));
    assert_int_equal(res.offsets[1], 1025);
    patina_table_results_release(&res);
    patina_table_free(t);
    free(rows);
    free(ch);
    free(keys);
    patina_context_free(ctx);
}

/* patina_table_search_many on the GPU: 5 CEDD tables (one of 4,500 rows,
 * which AUTO sends to the GPU, four of 375, which it leaves to the CPU:
 * the call's parts merged) with device GPU and AUTO equal one table of
 * their union on the CPU, k-NN and range, keys included. */
static void test_cedd_many(void **state)
{
    enum { N = 6000, NQ = 16, T = 5 };
    patina_context_t *ctx = ctx_new();
    patina_table_t *whole = NULL, *t[T];
    uint8_t *rows = malloc((size_t)N * PATINA_CEDD_DIM), qs[NQ * PATINA_CEDD_DIM];
    patina_change_t *ch = calloc(N, sizeof *ch);
    char (*keys)[24] = calloc(N, sizeof *keys);
    patina_table_query_t q;
    patina_table_results_t one, many;
    tu_rng_t r;
    size_t i, v, d;
    (void)state;
    tu_rng_seed(&r, 9);
    for (i = 0; i < N; i++) {
        random_cedd(rows + i * PATINA_CEDD_DIM, &r);
        if (i % 50 == 7) memcpy(rows + i * PATINA_CEDD_DIM, rows, PATINA_CEDD_DIM); /* ties across tables */
        snprintf(keys[i], sizeof keys[i], "k%zu", i);
        ch[i] = (patina_change_t){PATINA_CHANGE_PUT, 2 * i + 1, keys[i], rows + i * PATINA_CEDD_DIM};
    }
    for (i = 0; i < NQ; i++) random_cedd(qs + i * PATINA_CEDD_DIM, &r);
    memcpy(qs, rows, PATINA_CEDD_DIM);
    TU_OK(patina_table_new(&whole, ctx, "cedd", NULL));
    TU_OK(patina_table_apply(whole, ch, N, 1, NULL));
    for (i = 0; i < T; i++) TU_OK(patina_table_new(&t[i], ctx, "cedd", NULL));
    for (i = 0; i < N; i++) TU_OK(patina_table_apply(t[i < 4500 ? 0 : 1 + i % 4], &ch[i], 1, 1, NULL));
    for (v = 0; v < 4; v++) {
        patina_table_query_init(&q);
        q.keys = 1;
        if (v == 0) q.k = 1;
        if (v == 1) q.k = 64;
        if (v >= 2) {
            q.kind = PATINA_QUERY_RANGE;
            q.radius = 25;
            q.max_hits = v == 3 ? 5 : 0;
        }
        q.device = PATINA_DEVICE_CPU;
        TU_OK(patina_table_search(whole, qs, NQ, &q, &one));
        for (d = 0; d < 2; d++) {
            q.device = d ? PATINA_DEVICE_AUTO : PATINA_DEVICE_GPU;
            TU_OK(patina_table_search_many(t, T, qs, NQ, &q, &many));
            same_results(&one, &many);
            for (i = 0; i < one.offsets[NQ]; i++) assert_string_equal(one.keys[i], many.keys[i]);
            patina_table_results_release(&many);
        }
        patina_table_results_release(&one);
    }
    for (i = 0; i < T; i++) patina_table_free(t[i]);
    patina_table_free(whole);
    free(rows);
    free(ch);
    free(keys);
    patina_context_free(ctx);
}

static void test_signature_pivots(void **state)
{
    patina_context_t *ctx = ctx_new();
    uint8_t *sig;
    char *dir = tu_table_collection(ctx, "signature:k=8", 400, 40, 1, 9, &sig, NULL);
    patina_collection_t *c = NULL;
    patina_table_t *t = NULL;
    patina_pivot_opts_t po;
    patina_table_query_t q;
    (void)state;
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_WRITE, 0));
    TU_OK(patina_table_open(&t, ctx, c, "signature", NULL));
    patina_pivot_opts_init(&po);
    po.pivots = 16;
    TU_OK(patina_table_build_pivots(t, &po));
    assert_int_equal(patina_table_pivots(t), 16);
    patina_table_query_init(&q);
    q.k = 10;
    check_devices(t, sig, 12, q);
    q.kind = PATINA_QUERY_RANGE;
    q.radius = 0.3;
    check_devices(t, sig, 12, q);
    patina_table_free(t);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    free(sig);
    patina_context_free(ctx);
}

static void cached(patina_context_t *ctx, size_t *search, size_t *sqfd)
{
    patina_gpu_t *g = NULL;
    TU_OK(patina__context_gpu_acquire(ctx, &g));
    patina_gpu__cached(g, search, sqfd);
    patina__context_gpu_release(ctx);
}

/* patina_table_warm of searched tables: a CEDD table of 6,000 rows and a
 * signature table of 400 get their device copy (one each, none again from
 * a second warm or their first searches, which equal the CPU's); a CEDD
 * table under the GPU's minimum rows gets none (AUTO searches it on the
 * CPU); an empty table is fine. */
static void test_warm_search(void **state)
{
    enum { N = 6000, NQ = 8 };
    patina_context_t *ctx = ctx_new();
    patina_table_t *t = NULL, *small = NULL, *empty = NULL, *st = NULL;
    uint8_t *rows = malloc((size_t)N * PATINA_CEDD_DIM), *sig;
    patina_change_t *ch = calloc(N, sizeof *ch);
    char (*keys)[24] = calloc(N, sizeof *keys);
    char *dir = tu_table_collection(ctx, "signature:k=8", 400, 40, 1, 9, &sig, NULL);
    patina_collection_t *c = NULL;
    patina_table_query_t q;
    size_t i, ns0, nq0, ns1, nq1, ns2, nq2;
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 21);
    for (i = 0; i < N; i++) {
        random_cedd(rows + i * PATINA_CEDD_DIM, &r);
        snprintf(keys[i], sizeof keys[i], "k%zu", i);
        ch[i] = (patina_change_t){PATINA_CHANGE_PUT, i + 1, keys[i], rows + i * PATINA_CEDD_DIM};
    }
    TU_OK(patina_table_new(&t, ctx, "cedd", NULL));
    TU_OK(patina_table_apply(t, ch, N, 1, NULL));
    TU_OK(patina_table_new(&small, ctx, "cedd", NULL));
    TU_OK(patina_table_apply(small, ch, 100, 1, NULL));
    TU_OK(patina_table_new(&empty, ctx, "cedd", NULL));
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_READONLY, 0));
    TU_OK(patina_table_open(&st, ctx, c, "signature", NULL));
    cached(ctx, &ns0, &nq0);
    TU_OK(patina_table_warm(small));
    TU_OK(patina_table_warm(empty));
    cached(ctx, &ns1, &nq1);
    if (ns1 != ns0 || nq1 != nq0) fail_msg("warming a table of 100 rows and an empty one made device copies");
    TU_OK(patina_table_warm(t));
    TU_OK(patina_table_warm(st));
    cached(ctx, &ns1, &nq1);
    printf("table_gpu: warm: k-NN copies %zu -> %zu, SQFD copies %zu -> %zu\n", ns0, ns1, nq0, nq1);
    if (ns1 != ns0 + 1) fail_msg("warming a CEDD table of %d rows made %zu k-NN copies (1 expected)", N, ns1 - ns0);
    if (nq1 != nq0 + 1) fail_msg("warming a signature table made %zu SQFD copies (1 expected)", nq1 - nq0);
    TU_OK(patina_table_warm(t));
    TU_OK(patina_table_warm(st));
    patina_table_query_init(&q);
    q.k = 10;
    check_devices(t, rows + 17 * PATINA_CEDD_DIM, NQ, q);
    check_devices(st, sig, NQ, q);
    cached(ctx, &ns2, &nq2);
    if (ns2 != ns1 || nq2 != nq1) fail_msg("a second warm or the first searches made more copies");
    patina_table_free(st);
    patina_collection_close(c);
    patina_table_free(empty);
    patina_table_free(small);
    patina_table_free(t);
    tu_remove_tree(dir);
    free(dir);
    free(sig);
    free(rows);
    free(ch);
    free(keys);
    patina_context_free(ctx);
}

/* Many tables searched together (patina_table_search_many, as a cluster
 * shard searches the partitions it hosts): 20 CEDD tables of 4,200 rows
 * each keep their 20 device copies from one search to the next (a count
 * of slots below the tables evicted and laid out every table again on
 * every query: 2.4 s a query for a shard's 32 partitions), and answer as
 * the CPU does and as one table of their rows. */
static void test_search_many_copies(void **state)
{
    enum { T = 20, PER = 4200, NQ = 6 };
    patina_context_t *ctx = ctx_new();
    patina_table_t *ts[T], *one = NULL;
    uint8_t *rows = malloc((size_t)T * PER * PATINA_CEDD_DIM);
    patina_change_t *ch = calloc((size_t)T * PER, sizeof *ch);
    char (*keys)[24] = calloc((size_t)T * PER, sizeof *keys);
    patina_table_query_t q;
    patina_table_results_t cpu, gpu, single;
    size_t i, ns0, nq0, ns1, nq1, ns2, nq2;
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 33);
    for (i = 0; i < (size_t)T * PER; i++) {
        random_cedd(rows + i * PATINA_CEDD_DIM, &r);
        snprintf(keys[i], sizeof keys[i], "k%zu", i);
        ch[i] = (patina_change_t){PATINA_CHANGE_PUT, i + 1, keys[i], rows + i * PATINA_CEDD_DIM};
    }
    TU_OK(patina_table_new(&one, ctx, "cedd", NULL));
    TU_OK(patina_table_apply(one, ch, (size_t)T * PER, 1, NULL));
    for (i = 0; i < T; i++) {
        TU_OK(patina_table_new(&ts[i], ctx, "cedd", NULL));
        TU_OK(patina_table_apply(ts[i], ch + i * PER, PER, 1, NULL));
    }
    patina_table_query_init(&q);
    q.k = 10;
    q.keys = 1;
    q.device = PATINA_DEVICE_GPU;
    cached(ctx, &ns0, &nq0);
    TU_OK(patina_table_search_many(ts, T, rows + 5 * PATINA_CEDD_DIM, 1, &q, &gpu));
    patina_table_results_release(&gpu);
    cached(ctx, &ns1, &nq1);
    TU_OK(patina_table_search_many(ts, T, rows + 5 * PATINA_CEDD_DIM, NQ, &q, &gpu));
    cached(ctx, &ns2, &nq2);
    printf("table_gpu: %d tables searched together: k-NN copies %zu -> %zu -> %zu\n", T, ns0, ns1, ns2);
    if (ns1 != ns0 + T) fail_msg("a search of %d tables left %zu device copies (%d expected)", T, ns1 - ns0, T);
    if (ns2 != ns1) fail_msg("a second search of the %d tables changed the device copies (%zu -> %zu)", T, ns1, ns2);
    q.device = PATINA_DEVICE_CPU;
    TU_OK(patina_table_search_many(ts, T, rows + 5 * PATINA_CEDD_DIM, NQ, &q, &cpu));
    TU_OK(patina_table_search(one, rows + 5 * PATINA_CEDD_DIM, NQ, &q, &single));
    same_results(&cpu, &gpu);
    same_results(&cpu, &single);
    patina_table_results_release(&cpu);
    patina_table_results_release(&gpu);
    patina_table_results_release(&single);
    for (i = 0; i < T; i++) patina_table_free(ts[i]);
    patina_table_free(one);
    free(rows);
    free(ch);
    free(keys);
    patina_context_free(ctx);
}

/* One search of several tables on one GPU, together (the engine's pass
 * over all their copies with one threshold per query, patina_gpu_knn_many):
 * 7 CEDD tables of 1 to 5,000 rows, rows repeated across tables (ties,
 * ordered by id), answer as the CPU does over them, for 1, 7 and 300
 * queries and k 1, 10, 64 and 1024, before and after removals and puts;
 * the stats say the queries were answered together (one count a query,
 * where one search per table counts each query once a table), also for
 * tables of fewer than k rows in all. A query the pass cannot settle (a
 * tie of 4,500 rows) and one with an element above 7 (the definition path)
 * go table by table: the same answers. */
static void test_search_many_together(void **state)
{
    enum { T = 7, NQ = 300 };
    static const size_t per[T] = {3000, 40, 5000, 1, 2600, 4000, 9};
    patina_context_t *ctx = ctx_new();
    patina_table_t *ts[T];
    size_t total = 0, i, t, at = 0;
    uint8_t *rows, *qs = malloc((size_t)NQ * PATINA_CEDD_DIM);
    patina_change_t *ch, *live;
    char(*keys)[24];
    patina_table_query_t q;
    patina_table_results_t cpu, gpu;
    patina_search_stats_t st;
    static const size_t nqs[] = {1, 7, NQ}, ks[] = {1, 10, 64, 1024};
    tu_rng_t r;
    (void)state;
    for (t = 0; t < T; t++) total += per[t];
    rows = malloc(total * PATINA_CEDD_DIM);
    ch = calloc(total, sizeof *ch);
    live = calloc(total, sizeof *live);
    keys = calloc(total, sizeof *keys);
    tu_rng_seed(&r, 41);
    for (i = 0; i < total; i++) {
        random_cedd(rows + i * PATINA_CEDD_DIM, &r);
        if (i % 37 == 5) memcpy(rows + i * PATINA_CEDD_DIM, rows + (i % 3) * PATINA_CEDD_DIM, PATINA_CEDD_DIM);
        snprintf(keys[i], sizeof keys[i], "k%zu", i);
        ch[i] = (patina_change_t){PATINA_CHANGE_PUT, 2 * i + 1, keys[i], rows + i * PATINA_CEDD_DIM};
    }
    for (i = 0; i < NQ; i++) random_cedd(qs + i * PATINA_CEDD_DIM, &r);
    memcpy(qs, rows + 1 * PATINA_CEDD_DIM, PATINA_CEDD_DIM); /* a repeated row: exact ties across tables */
    for (t = 0; t < T; t++) {
        TU_OK(patina_table_new(&ts[t], ctx, "cedd", NULL));
        TU_OK(patina_table_apply(ts[t], ch + at, per[t], 1, NULL));
        at += per[t];
    }
    patina_table_query_init(&q);
    for (int round = 0; round < 2; round++) {
        for (size_t a = 0; a < sizeof nqs / sizeof *nqs; a++)
            for (size_t b = 0; b < sizeof ks / sizeof *ks; b++) {
                q.k = ks[b];
                q.stats = NULL;
                q.device = PATINA_DEVICE_CPU;
                TU_OK(patina_table_search_many(ts, T, qs, nqs[a], &q, &cpu));
                q.device = PATINA_DEVICE_GPU;
                q.stats = &st;
                TU_OK(patina_table_search_many(ts, T, qs, nqs[a], &q, &gpu));
                same_results(&cpu, &gpu);
                if (st.gpu_tensor + st.cpu != nqs[a])
                    fail_msg("%zu queries, k %zu: %zu on the tensor cores and %zu on the CPU (one count a query "
                             "when the tables go together)", nqs[a], ks[b], st.gpu_tensor, st.cpu);
                patina_table_results_release(&cpu);
                patina_table_results_release(&gpu);
            }
        if (round) break;
        /* live: every fifth row of tables 0, 2 and 4 removed or put again with another row */
        at = 0;
        for (t = 0; t < T; t++) {
            size_t nch = 0;
            for (i = 0; t % 2 == 0 && t < 5 && i < per[t]; i += 5) {
                live[nch] = ch[at + i];
                live[nch].op = i % 10 ? PATINA_CHANGE_REMOVE : PATINA_CHANGE_PUT;
                live[nch++].desc = rows + ((at + i + 17) % total) * PATINA_CEDD_DIM;
            }
            if (nch) TU_OK(patina_table_apply(ts[t], live, nch, 2, NULL));
            at += per[t];
        }
    }
    /* tables 1, 3 and 6 (40, 1 and 9 rows) at k 64: fewer rows than k in
     * all; their union is the pilot, every row an answer */
    {
        patina_table_t *small[3] = {ts[1], ts[3], ts[6]};
        q.k = 64;
        q.stats = NULL;
        q.device = PATINA_DEVICE_CPU;
        TU_OK(patina_table_search_many(small, 3, qs, 7, &q, &cpu));
        q.device = PATINA_DEVICE_GPU;
        q.stats = &st;
        TU_OK(patina_table_search_many(small, 3, qs, 7, &q, &gpu));
        same_results(&cpu, &gpu);
        assert_int_equal(gpu.offsets[1], 50);
        if (st.gpu_tensor + st.cpu != 7) fail_msg("3 small tables: %zu + %zu counts, 7 expected", st.gpu_tensor, st.cpu);
        patina_table_results_release(&cpu);
        patina_table_results_release(&gpu);
    }
    /* a query whose kth distance is a tie of 4,500 rows (one table's rows
     * all alike): more candidates than the engine's list, so the pass
     * leaves it (flagged) and it is answered table by table (then by the
     * CPU): the CPU's answer, ties in id order */
    {
        enum { TIES = 4500 };
        patina_table_t *tt = NULL, *pair[2];
        patina_change_t *tc = calloc(TIES, sizeof *tc);
        char(*tk)[24] = calloc(TIES, sizeof *tk);
        TU_OK(patina_table_new(&tt, ctx, "cedd", NULL));
        for (i = 0; i < TIES; i++) {
            snprintf(tk[i], sizeof tk[i], "tie%zu", i);
            tc[i] = (patina_change_t){PATINA_CHANGE_PUT, 1000000 + 7 * i, tk[i], qs + 5 * PATINA_CEDD_DIM};
        }
        TU_OK(patina_table_apply(tt, tc, TIES, 1, NULL));
        pair[0] = ts[2];
        pair[1] = tt;
        q.k = 10;
        q.stats = NULL;
        q.device = PATINA_DEVICE_CPU;
        TU_OK(patina_table_search_many(pair, 2, qs + 5 * PATINA_CEDD_DIM, 1, &q, &cpu));
        q.device = PATINA_DEVICE_GPU;
        q.stats = &st;
        TU_OK(patina_table_search_many(pair, 2, qs + 5 * PATINA_CEDD_DIM, 1, &q, &gpu));
        same_results(&cpu, &gpu);
        assert_int_equal(gpu.hits[0].id, 1000000);
        if (st.cpu == 0) fail_msg("a tie of %d rows: no query left to the CPU (%zu on the tensor cores)", TIES,
                                  st.gpu_tensor);
        patina_table_results_release(&cpu);
        patina_table_results_release(&gpu);
        patina_table_free(tt);
        free(tc);
        free(tk);
    }
    /* an element above 7: the definition path, table by table */
    qs[3] = 9;
    q.k = 10;
    q.stats = NULL;
    q.device = PATINA_DEVICE_CPU;
    TU_OK(patina_table_search_many(ts, T, qs, 7, &q, &cpu));
    q.device = PATINA_DEVICE_GPU;
    TU_OK(patina_table_search_many(ts, T, qs, 7, &q, &gpu));
    same_results(&cpu, &gpu);
    patina_table_results_release(&cpu);
    patina_table_results_release(&gpu);
    for (t = 0; t < T; t++) patina_table_free(ts[t]);
    free(rows);
    free(qs);
    free(ch);
    free(live);
    free(keys);
    patina_context_free(ctx);
}

static void test_identify(void **state)
{
    enum { N = 24 };
    patina_context_t *ctx = ctx_new();
    uint8_t *refs, *q;
    char *dir = tu_table_collection(ctx, "rootsift:m=64,n=128", N, 96, 1, 9, &refs, NULL);
    patina_collection_t *c = NULL;
    patina_table_t *t = NULL;
    patina_identify_opts_t io;
    patina_identify_hit_t hc[N * 5], hg[N * 5];
    patina_identify_result_t rc[N], rg[N];
    patina_image_t imgs[N];
    tu_rng_t r;
    size_t i, j;
    (void)state;
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_READONLY, 0));
    TU_OK(patina_table_open(&t, ctx, c, "rootsift", NULL));
    tu_rng_seed(&r, 9);
    for (i = 0; i < N; i++) tu_random_image(&imgs[i], 96, 96, 1, &r);
    q = malloc(N * patina_table_query_bytes(t));
    TU_OK(patina_table_identify_extract(t, NULL, q, imgs, N, NULL));
    patina_identify_opts_init(&io);
    io.device = PATINA_DEVICE_CPU;
    TU_OK(patina_table_identify(t, q, N, &io, hc, rc, NULL));
    io.device = PATINA_DEVICE_GPU;
    TU_OK(patina_table_identify(t, q, N, &io, hg, rg, NULL));
    for (i = 0; i < N; i++) {
        assert_int_equal(rc[i].nhits, rg[i].nhits);
        assert_int_equal(rc[i].decision, rg[i].decision);
        for (j = 0; j < rc[i].nhits; j++) {
            assert_int_equal(hc[i * 5 + j].id, hg[i * 5 + j].id);
            assert_int_equal(hc[i * 5 + j].matches, hg[i * 5 + j].matches);
            assert_int_equal(hc[i * 5 + j].inliers, hg[i * 5 + j].inliers);
        }
        patina_image_release(&imgs[i]);
    }
    patina_table_free(t);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    free(refs);
    free(q);
    patina_context_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cedd_stream),
        cmocka_unit_test(test_cedd_many),
        cmocka_unit_test(test_signature_pivots),
        cmocka_unit_test(test_warm_search),
        cmocka_unit_test(test_search_many_copies),
        cmocka_unit_test(test_search_many_together),
        cmocka_unit_test(test_identify),
    };
    tu_require_gpu();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
