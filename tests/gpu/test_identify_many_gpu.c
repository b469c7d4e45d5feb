/* Identification over many small tables on the GPU (a cluster shard's
 * partitions): patina_table_identify_many and patina_table_identify over
 * 40 partition tables of one collection, called alternately, each table
 * matched against its own GPU mirror (src/gpu/identify.cu: one mirror per
 * reference set in the context's table cache).
 *   (a) the answers equal the CPU's (device CPU) and one table's of the
 *       whole collection: ids, scores, inliers, verified flags, decisions,
 *       keys -- exact, the GPU's arithmetic is integer;
 *   (b) the mirrors are built once: after the first round, alternating
 *       between the tables rebuilds none (patina_gpu__identify_mirrors'
 *       build counter stays put);
 *   (c) a table freed drops its mirrors (the count falls by its sets);
 *   (d) patina_table_warm builds the mirrors first: the first
 *       identification after it builds none (test_warm).
 * Prints what it compares. Skipped (77) without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "gpu/gpu.h"
#include "patina/patina.h"
#include "testutil.h"

enum { NREF = 240, P = 40, NQ = 6, K = 4 };

static void mirrors(patina_context_t *ctx, size_t *n, uint64_t *builds)
{
    patina_gpu_t *g = NULL;
    TU_OK(patina__context_gpu_acquire(ctx, &g));
    patina_gpu__identify_mirrors(g, n, builds);
    patina__context_gpu_release(ctx);
}

/* Two answers (nq queries, k) are the same, keys included. */
static void same(const char *what, const patina_identify_hit_t *ha, const patina_identify_result_t *ra, char **ka,
                 const patina_identify_hit_t *hb, const patina_identify_result_t *rb, char **kb, size_t nq, size_t k)
{
    for (size_t q = 0; q < nq; q++) {
        if (ra[q].nhits != rb[q].nhits || ra[q].decision != rb[q].decision)
            fail_msg("%s: query %zu: %zu hits (%s) against %zu (%s)", what, q, ra[q].nhits,
                     patina_identify_decision_name(ra[q].decision), rb[q].nhits,
                     patina_identify_decision_name(rb[q].decision));
        for (size_t j = 0; j < ra[q].nhits; j++) {
            const patina_identify_hit_t *a = &ha[q * k + j], *b = &hb[q * k + j];
            if (a->id != b->id || a->matches != b->matches || a->inliers != b->inliers || a->verified != b->verified ||
                memcmp(&a->score, &b->score, sizeof a->score) || strcmp(ka[q * k + j], kb[q * k + j]))
                fail_msg("%s: query %zu rank %zu: id %llu (%s) matches %u inliers %u verified %d against id %llu "
                         "(%s) matches %u inliers %u verified %d",
                         what, q, j + 1, (unsigned long long)a->id, ka[q * k + j], a->matches, a->inliers,
                         a->verified, (unsigned long long)b->id, kb[q * k + j], b->matches, b->inliers, b->verified);
        }
    }
}

static void free_keys(char **keys, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        patina_free(keys[i]);
        keys[i] = NULL;
    }
}

static void test_many_tables(void **state)
{
    patina_context_t *ctx = NULL;
    uint8_t *q, *refs = NULL;
    size_t qb, i, nmir, nonempty = 0, nmir0;
    uint64_t builds, builds0;
    char *dir;
    patina_collection_t *c = NULL;
    patina_table_t *whole = NULL, *t[P];
    patina_table_opts_t o;
    patina_identify_opts_t io;
    patina_identify_hit_t hc[NQ * K], hg[NQ * K], hw[NQ * K];
    patina_identify_result_t rc[NQ], rg[NQ], rw[NQ];
    char *kc[NQ * K], *kg[NQ * K], *kw[NQ * K];
    patina_image_t imgs[NQ];
    tu_rng_t rng;
    (void)state;
    TU_OK(patina_context_new(&ctx, NULL));
    dir = tu_table_collection(ctx, "rootsift:m=64,n=128", NREF, 96, 1, 17, &refs, NULL);
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_READONLY, 0));
    patina_table_opts_init(&o);
    o.need = PATINA_CAP_IDENTIFY;
    TU_OK(patina_table_open(&whole, ctx, c, NULL, &o));
    o.partitions = P;
    for (i = 0; i < P; i++) {
        o.partition = (uint32_t)i;
        TU_OK(patina_table_open(&t[i], ctx, c, NULL, &o));
        nonempty += patina_table_size(t[i]) > 0;
    }
    /* queries: references (the first NQ images of the collection's generator) */
    tu_rng_seed(&rng, 17);
    for (i = 0; i < NQ; i++) tu_random_image(&imgs[i], 96, 96, 1, &rng);
    qb = patina_table_query_bytes(whole);
    q = malloc(NQ * qb);
    TU_OK(patina_table_identify_extract(whole, NULL, q, imgs, NQ, NULL));
    patina_identify_opts_init(&io);
    io.k = K;
    io.verify_top = 2;
    io.threshold = 3;
    printf("identify_many_gpu: %d references in %d partition tables (%zu not empty), %d queries, k %d, verify_top 2\n",
           NREF, P, nonempty, NQ, K);
    io.device = PATINA_DEVICE_CPU;
    TU_OK(patina_table_identify(whole, q, NQ, &io, hw, rw, kw)); /* the reference answer: one table, the CPU */
    for (int round = 0; round < 6; round++) {
        /* (a) all tables at once, GPU against CPU and against the whole table */
        io.device = PATINA_DEVICE_CPU;
        TU_OK(patina_table_identify_many(t, P, q, NQ, &io, hc, rc, kc));
        io.device = PATINA_DEVICE_GPU;
        TU_OK(patina_table_identify_many(t, P, q, NQ, &io, hg, rg, kg));
        same("40 tables: CPU vs GPU", hc, rc, kc, hg, rg, kg, NQ, K);
        same("40 tables on the GPU vs one table on the CPU", hw, rw, kw, hg, rg, kg, NQ, K);
        free_keys(kc, NQ * K);
        free_keys(kg, NQ * K);
        /* one table at a time, alternating with the call above */
        for (i = round % 2; i < P; i += 2) {
            io.device = PATINA_DEVICE_CPU;
            TU_OK(patina_table_identify(t[i], q, NQ, &io, hc, rc, kc));
            io.device = PATINA_DEVICE_GPU;
            TU_OK(patina_table_identify(t[i], q, NQ, &io, hg, rg, kg));
            same("one partition: CPU vs GPU", hc, rc, kc, hg, rg, kg, NQ, K);
            free_keys(kc, NQ * K);
            free_keys(kg, NQ * K);
        }
        mirrors(ctx, &nmir, &builds);
        printf("identify_many_gpu: round %d: answers equal; %zu mirrors, %llu built so far\n", round, nmir,
               (unsigned long long)builds);
        if (round == 0) {
            nmir0 = nmir;
            builds0 = builds;
            if (nmir < nonempty)
                fail_msg("after the first round the context holds %zu mirrors, fewer than the %zu tables with rows "
                         "(one mirror per reference set expected; a budget too small for %d tiny sets?)",
                         nmir, nonempty, P);
        } else if (builds != builds0 || nmir != nmir0) {
            fail_msg("round %d rebuilt mirrors: %llu built (%llu after round 0), %zu held (%zu after round 0): "
                     "alternating between tables must reuse each table's mirror",
                     round, (unsigned long long)builds, (unsigned long long)builds0, nmir, nmir0);
        }
    }
    /* (c) a table freed takes its mirror with it */
    for (i = 0; i < P && patina_table_size(t[i]) == 0; i++) {}
    assert_true(i < P);
    patina_table_free(t[i]);
    t[i] = NULL;
    mirrors(ctx, &nmir, &builds);
    printf("identify_many_gpu: partition %zu freed: %zu mirrors (%zu before)\n", i, nmir, nmir0);
    if (nmir != nmir0 - 1) fail_msg("freeing a table left %zu mirrors of %zu (its own should go)", nmir, nmir0);
    free_keys(kw, NQ * K);
    for (i = 0; i < P; i++) patina_table_free(t[i]);
    patina_table_free(whole);
    mirrors(ctx, &nmir, &builds);
    printf("identify_many_gpu: every table freed: %zu mirrors\n", nmir);
    assert_int_equal(nmir, 0);
    for (i = 0; i < NQ; i++) patina_image_release(&imgs[i]);
    free(q);
    free(refs);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    patina_context_free(ctx);
}

/* (d) patina_table_warm builds each table's mirror now: one build per
 * table with rows, none by the first identification after it (default
 * options but device gpu) nor by a second warm, and the answers are the
 * CPU's. */
static void test_warm(void **state)
{
    enum { W = 8 };
    patina_context_t *ctx = NULL;
    uint8_t *q, *refs = NULL;
    size_t qb, i, nmir, nonempty = 0;
    uint64_t b0, b1, b2;
    char *dir;
    patina_collection_t *c = NULL;
    patina_table_t *t[W];
    patina_table_opts_t o;
    patina_identify_opts_t io;
    patina_identify_hit_t hc[NQ * K], hg[NQ * K];
    patina_identify_result_t rc[NQ], rg[NQ];
    char *kc[NQ * K], *kg[NQ * K];
    patina_image_t imgs[NQ];
    tu_rng_t rng;
    (void)state;
    TU_OK(patina_context_new(&ctx, NULL));
    dir = tu_table_collection(ctx, "rootsift:m=64,n=128", NREF, 96, 1, 17, &refs, NULL);
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_READONLY, 0));
    patina_table_opts_init(&o);
    o.need = PATINA_CAP_IDENTIFY;
    o.partitions = W;
    for (i = 0; i < W; i++) {
        o.partition = (uint32_t)i;
        TU_OK(patina_table_open(&t[i], ctx, c, NULL, &o));
        nonempty += patina_table_size(t[i]) > 0;
    }
    tu_rng_seed(&rng, 17);
    for (i = 0; i < NQ; i++) tu_random_image(&imgs[i], 96, 96, 1, &rng);
    qb = patina_table_query_bytes(t[0]);
    q = malloc(NQ * qb);
    TU_OK(patina_table_identify_extract(t[0], NULL, q, imgs, NQ, NULL));
    mirrors(ctx, &nmir, &b0);
    for (i = 0; i < W; i++) TU_OK(patina_table_warm(t[i]));
    mirrors(ctx, &nmir, &b1);
    printf("identify_many_gpu: warm: %d tables (%zu with rows): %llu mirrors built, %zu held\n", W, nonempty,
           (unsigned long long)(b1 - b0), nmir);
    if (b1 - b0 != nonempty || nmir != nonempty)
        fail_msg("warming %zu tables with rows built %llu mirrors and holds %zu (one each expected)", nonempty,
                 (unsigned long long)(b1 - b0), nmir);
    patina_identify_opts_init(&io);
    io.k = K;
    io.verify_top = 2;
    io.threshold = 3;
    for (i = 0; i < W; i++) {
        io.device = PATINA_DEVICE_GPU;
        TU_OK(patina_table_identify(t[i], q, NQ, &io, hg, rg, kg));
        io.device = PATINA_DEVICE_CPU;
        TU_OK(patina_table_identify(t[i], q, NQ, &io, hc, rc, kc));
        same("a warmed partition: CPU vs GPU", hc, rc, kc, hg, rg, kg, NQ, K);
        free_keys(kc, NQ * K);
        free_keys(kg, NQ * K);
        TU_OK(patina_table_warm(t[i])); /* up to date: nothing to build */
    }
    mirrors(ctx, &nmir, &b2);
    printf("identify_many_gpu: the first identification of each warmed table and a second warm built %llu mirrors\n",
           (unsigned long long)(b2 - b1));
    if (b2 != b1) fail_msg("the first identification after patina_table_warm built %llu mirrors (none expected)",
                           (unsigned long long)(b2 - b1));
    for (i = 0; i < W; i++) patina_table_free(t[i]);
    for (i = 0; i < NQ; i++) patina_image_release(&imgs[i]);
    free(q);
    free(refs);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    patina_context_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_tables),
        cmocka_unit_test(test_warm),
    };
    tu_require_gpu();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
