/* Tables over several GPUs (include/patina/context.h's device lists): a
 * table on a context of "0,0" (two slices on device 0: the multi-GPU path
 * on a one-GPU machine) and of "all" (every GPU; on a one-GPU machine the
 * one-device path) answers with device GPU exactly as on one GPU and as
 * the CPU, hit for hit and bit for bit, for
 *   - a CEDD table of 12,000 rows fed by a change stream (each slice large
 *     enough for the GPU under AUTO): k-NN at k 1, 10 and 1024, range with
 *     and without max_hits, then after puts and removals;
 *   - a signature table with a stored pivot table (SQFD, the GPU filter),
 *     and the same table scanned without it;
 *   - a rootsift table (identify: candidates, scores, inliers, decisions,
 *     every candidate verified or only some).
 * Every slice runs on its GPU (the stats count GPU queries per slice), and
 * patina_context_gpu_memory describes each device. Skipped (77) without a
 * GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "patina/patina.h"
#include "testutil.h"

enum { NCTX = 3 }; /* one GPU, "0,0", "all" */

static void contexts(patina_context_t *ctx[NCTX])
{
    static const char *const lists[NCTX] = {NULL, "0,0", "all"};
    size_t i;
    for (i = 0; i < NCTX; i++) {
        patina_context_opts_t o;
        patina_context_opts_init(&o);
        o.gpus = lists[i];
        ctx[i] = NULL;
        TU_OK(patina_context_new(&ctx[i], &o));
    }
    assert_int_equal(patina_context_devices(ctx[1], NULL, 0), 2);
    assert_int_equal(patina_context_devices(ctx[2], NULL, 0), (size_t)patina_gpu_count());
}

static void free_contexts(patina_context_t *ctx[NCTX])
{
    size_t i;
    for (i = 0; i < NCTX; i++) patina_context_free(ctx[i]);
}

static void same_results(const patina_table_results_t *a, const patina_table_results_t *b)
{
    size_t i;
    assert_int_equal(a->nq, b->nq);
    assert_int_equal(a->rows, b->rows);
    for (i = 0; i <= a->nq; i++) assert_int_equal(a->offsets[i], b->offsets[i]);
    for (i = 0; i < a->offsets[a->nq]; i++) {
        assert_int_equal(a->hits[i].id, b->hits[i].id);
        assert_memory_equal(&a->hits[i].distance, &b->hits[i].distance, sizeof(double));
    }
}

/* The query with device CPU on t[0] (one GPU) is the reference; devices
 * GPU and AUTO on every table must equal it. gpu_stat: 1 when the GPU
 * answer must count a GPU engine's queries (CEDD's tensor cores). */
static void check(patina_table_t *t[NCTX], const void *qs, size_t nq, patina_table_query_t q, int gpu_stat)
{
    patina_table_results_t cpu, gpu;
    size_t i;
    q.device = PATINA_DEVICE_CPU;
    TU_OK(patina_table_search(t[0], qs, nq, &q, &cpu));
    for (i = 0; i < NCTX; i++) {
        patina_search_stats_t st;
        q.device = PATINA_DEVICE_GPU;
        q.stats = &st;
        TU_OK(patina_table_search(t[i], qs, nq, &q, &gpu));
        same_results(&cpu, &gpu);
        if (gpu_stat) assert_true(st.gpu_tensor + st.gpu_filter + st.gpu_exact >= nq); /* summed over slices */
        patina_table_results_release(&gpu);
        q.device = PATINA_DEVICE_AUTO;
        TU_OK(patina_table_search(t[i], qs, nq, &q, &gpu));
        same_results(&cpu, &gpu);
        patina_table_results_release(&gpu);
    }
    patina_table_results_release(&cpu);
}

static void random_cedd(uint8_t *d, tu_rng_t *r)
{
    int i;
    for (i = 0; i < PATINA_CEDD_DIM; i++) {
        uint32_t u = tu_rng_below(r, 100);
        d[i] = (uint8_t)(u < 70 ? 0 : 1 + tu_rng_below(r, 7));
    }
}

static void test_cedd(void **state)
{
    enum { N = 12000, NQ = 16 };
    patina_context_t *ctx[NCTX];
    patina_table_t *t[NCTX];
    uint8_t *rows = malloc((size_t)N * PATINA_CEDD_DIM), qs[NQ * PATINA_CEDD_DIM];
    patina_change_t *ch = calloc(N, sizeof *ch);
    char (*keys)[24] = calloc(N, sizeof *keys), plan[8192];
    patina_table_query_t q;
    tu_rng_t r;
    size_t i;
    (void)state;
    contexts(ctx);
    tu_rng_seed(&r, 5);
    for (i = 0; i < N; i++) {
        random_cedd(rows + i * PATINA_CEDD_DIM, &r);
        if (i % 50 == 7) memcpy(rows + i * PATINA_CEDD_DIM, rows, PATINA_CEDD_DIM); /* ties across slices */
        snprintf(keys[i], sizeof keys[i], "k%zu", i);
        ch[i] = (patina_change_t){PATINA_CHANGE_PUT, 3 * i + 1, keys[i], rows + i * PATINA_CEDD_DIM};
    }
    for (i = 0; i < NQ; i++) random_cedd(qs + i * PATINA_CEDD_DIM, &r);
    memcpy(qs, rows, PATINA_CEDD_DIM);
    for (i = 0; i < NCTX; i++) {
        TU_OK(patina_table_new(&t[i], ctx[i], "cedd", NULL));
        TU_OK(patina_table_apply(t[i], ch, N, 1, NULL));
    }
    patina_table_query_init(&q);
    q.k = 1;
    check(t, qs, NQ, q, 1);
    q.k = 10;
    check(t, qs, NQ, q, 1);
    q.k = 1024;
    check(t, qs, NQ, q, 1);
    q.kind = PATINA_QUERY_RANGE;
    q.radius = 25;
    check(t, qs, NQ, q, 1);
    q.max_hits = 5;
    check(t, qs, NQ, q, 1);
    for (i = 0; i < 300; i++) {
        ch[i].op = i % 2 ? PATINA_CHANGE_REMOVE : PATINA_CHANGE_PUT;
        ch[i].desc = rows + (i + 100) * PATINA_CEDD_DIM;
    }
    for (i = 0; i < NCTX; i++) {
        TU_OK(patina_table_apply(t[i], ch, 300, 2, NULL));
        assert_int_equal(patina_table_size(t[i]), N - 150);
    }
    patina_table_query_init(&q);
    q.k = 10;
    check(t, qs, NQ, q, 1);
    /* each device described: two slices on device 0 */
    TU_OK(patina_context_gpu_memory(ctx[1], plan, sizeof plan));
    assert_non_null(strstr(plan, "device 0 (slice 0 of 2)"));
    assert_non_null(strstr(plan, "device 0 (slice 1 of 2)"));
    for (i = 0; i < NCTX; i++) patina_table_free(t[i]);
    free(rows);
    free(ch);
    free(keys);
    free_contexts(ctx);
}

static void test_sqfd(void **state)
{
    patina_context_t *ctx[NCTX];
    patina_table_t *t[NCTX], *scan[NCTX];
    uint8_t *sig;
    char *dir;
    patina_collection_t *c = NULL;
    patina_table_opts_t o;
    patina_pivot_opts_t po;
    patina_table_query_t q;
    size_t i;
    (void)state;
    contexts(ctx);
    dir = tu_table_collection(ctx[0], "signature:k=8", 800, 40, 1, 9, &sig, NULL);
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_WRITE, 0));
    patina_table_opts_init(&o);
    o.pivots = 0;
    for (i = 0; i < NCTX; i++) {
        TU_OK(patina_table_open(&t[i], ctx[i], c, "signature", NULL));
        TU_OK(patina_table_open(&scan[i], ctx[i], c, "signature", &o));
    }
    patina_pivot_opts_init(&po);
    po.pivots = 16;
    TU_OK(patina_table_build_pivots(t[0], &po));
    for (i = 0; i < NCTX; i++) assert_int_equal(patina_table_pivots(t[i]), 16);
    patina_table_query_init(&q);
    q.k = 10;
    check(t, sig, 12, q, 0);
    check(scan, sig, 12, q, 0);
    q.kind = PATINA_QUERY_RANGE;
    q.radius = 0.3;
    check(t, sig, 12, q, 0);
    check(scan, sig, 12, q, 0);
    for (i = 0; i < NCTX; i++) {
        patina_table_free(t[i]);
        patina_table_free(scan[i]);
    }
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    free(sig);
    free_contexts(ctx);
}

static void test_identify(void **state)
{
    enum { N = 24, K = 5 };
    patina_context_t *ctx[NCTX];
    uint8_t *refs, *q;
    char *dir;
    patina_collection_t *c = NULL;
    patina_table_t *t[NCTX];
    patina_identify_opts_t io;
    patina_identify_hit_t hc[N * K], hg[N * K];
    patina_identify_result_t rc[N], rg[N];
    patina_image_t imgs[N];
    tu_rng_t r;
    size_t i, j, v, x;
    (void)state;
    contexts(ctx);
    dir = tu_table_collection(ctx[0], "rootsift:m=64,n=128", N, 96, 1, 9, &refs, NULL);
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_READONLY, 0));
    for (i = 0; i < NCTX; i++) TU_OK(patina_table_open(&t[i], ctx[i], c, "rootsift", NULL));
    tu_rng_seed(&r, 9);
    for (i = 0; i < N; i++) tu_random_image(&imgs[i], 96, 96, 1, &r);
    q = malloc(N * patina_table_query_bytes(t[0]));
    TU_OK(patina_table_identify_extract(t[0], NULL, q, imgs, N, NULL));
    for (v = 0; v < 2; v++) {
        patina_identify_opts_init(&io);
        io.k = K;
        io.verify_top = v ? 2 : 10; /* every candidate verified; only the best 2 */
        io.device = PATINA_DEVICE_CPU;
        TU_OK(patina_table_identify(t[0], q, N, &io, hc, rc, NULL));
        for (x = 0; x < NCTX; x++) {
            io.device = PATINA_DEVICE_GPU;
            TU_OK(patina_table_identify(t[x], q, N, &io, hg, rg, NULL));
            for (i = 0; i < N; i++) {
                assert_int_equal(rc[i].nhits, rg[i].nhits);
                assert_int_equal(rc[i].decision, rg[i].decision);
                for (j = 0; j < rc[i].nhits; j++) {
                    const patina_identify_hit_t *a = &hc[i * K + j], *b = &hg[i * K + j];
                    assert_int_equal(a->id, b->id);
                    assert_memory_equal(&a->score, &b->score, sizeof(double));
                    assert_int_equal(a->matches, b->matches);
                    assert_int_equal(a->inliers, b->inliers);
                    assert_int_equal(a->verified, b->verified);
                }
            }
        }
    }
    for (i = 0; i < N; i++) patina_image_release(&imgs[i]);
    for (i = 0; i < NCTX; i++) patina_table_free(t[i]);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    free(refs);
    free(q);
    free_contexts(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cedd),
        cmocka_unit_test(test_sqfd),
        cmocka_unit_test(test_identify),
    };
    tu_require_gpu();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
