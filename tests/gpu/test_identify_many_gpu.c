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
 *       identification after it builds none (test_warm);
 *   (e) patina_gpu_identify_many (one pass over several sets' mirrors)
 *       gives each set exactly patina_gpu_identify's keys, on sets of
 *       different sizes, empty sets, a set whose slots are all removed,
 *       sets streamed from the host tier (a small arena_cap), queries in
 *       two batches, and sets that do not fit the device budget together
 *       (the second one matched on its own after the pass); its waits for
 *       candidate lists are one per query batch plus one per streamed or
 *       unfitting set, its kernel launches those of the N single calls
 *       (test_one_pass).
 * Prints what it compares. Skipped (77) without a GPU. */
#include <math.h>
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
    io.accept = PATINA_ACCEPT_INLIERS;
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
    io.accept = PATINA_ACCEPT_INLIERS;
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

/* ---------------------------------------- (e) one pass over several sets */

enum { POOL = 97, MR = 64, NR = 128, D = 128 };

/* A RootSIFT-like row at scale 512 (u8, L2 norm about 512): the square
 * roots of random L1-normalised weights. */
static void rootsift_row(uint8_t *row, tu_rng_t *rng)
{
    double w[D], sum = 0;
    for (int i = 0; i < D; i++) sum += w[i] = (double)(tu_rng_below(rng, 1000) + (i % 7 == 0 ? 4000 : 0));
    for (int i = 0; i < D; i++) {
        double v = 512.0 * sqrt(w[i] / sum) + 0.5;
        row[i] = (uint8_t)(v > 255 ? 255 : v);
    }
}

/* Synthetic reference sets whose slots share POOL records (rows: (POOL,
 * MR, D)), so that sets of thousands of slots cost no memory, with ties
 * between slots holding the same record (ordered by slot, as always). */
typedef struct synth_set {
    const uint8_t **rows;
    uint16_t *count;
    uint64_t *stamp;
    pgpu_idf_refs_t view;
} synth_set_t;

static void synth_make(synth_set_t *ss, uint64_t serial, size_t nslots, const uint8_t *pool, const uint16_t *pcount,
                       int removed)
{
    memset(ss, 0, sizeof *ss);
    ss->rows = calloc(nslots + 1, sizeof *ss->rows);
    ss->count = calloc(nslots + 1, sizeof *ss->count);
    ss->stamp = calloc(nslots + 1, sizeof *ss->stamp);
    assert_non_null(ss->rows);
    assert_non_null(ss->count);
    assert_non_null(ss->stamp);
    for (size_t i = 0; i < nslots; i++) {
        const size_t r = (i * 31 + serial * 7) % POOL;
        ss->rows[i] = pool + r * MR * D;
        ss->count[i] = removed ? 0 : pcount[r];
    }
    ss->view.serial = serial;
    ss->view.epoch = 1;
    ss->view.clock = 0;
    ss->view.nslots = nslots;
    ss->view.m = MR;
    ss->view.rows = ss->rows;
    ss->view.count = ss->count;
    ss->view.stamp = ss->stamp;
}

static void synth_free(synth_set_t *ss)
{
    free(ss->rows);
    free(ss->count);
    free(ss->stamp);
}

/* One pass over sets[0 .. ns) against a call per set, on g: the keys
 * equal set by set; returns the pass's stats and (in *single) the N
 * calls' summed; *nonzero counts the candidates found. */
static void pass_vs_single(patina_gpu_t *g, synth_set_t *sets, size_t ns, const uint8_t *q, const uint16_t *qc,
                           size_t nq, const pgpu_idf_opts_t *o, pgpu_idf_stats_t *many, pgpu_idf_stats_t *single,
                           size_t *nonzero, const char *what)
{
    const size_t nk = o->ncap;
    pgpu_idf_refs_t *views = calloc(ns, sizeof *views);
    uint64_t *km = calloc(ns * nq * nk, sizeof *km), *k1 = calloc(nq * nk, sizeof *k1);
    pgpu_idf_stats_t st;
    assert_non_null(views);
    assert_non_null(km);
    assert_non_null(k1);
    for (size_t j = 0; j < ns; j++) views[j] = sets[j].view;
    memset(single, 0, sizeof *single);
    TU_OK(patina_gpu_identify_many(g, views, ns, q, NR * D, qc, nq, NR, o, km, many));
    *nonzero = 0;
    for (size_t j = 0; j < ns; j++) {
        TU_OK(patina_gpu_identify(g, &views[j], q, NR * D, qc, nq, NR, o, k1, &st));
        single->launches += st.launches;
        single->syncs += st.syncs;
        single->dev_slots += st.dev_slots;
        single->host_slots += st.host_slots;
        for (size_t e = 0; e < nq * nk; e++) {
            *nonzero += k1[e] != 0;
            if (k1[e] != km[j * nq * nk + e])
                fail_msg("%s: set %zu (%zu slots), query %zu, rank %zu: one pass 0x%016llx, alone 0x%016llx", what,
                         j, views[j].nslots, e / nk, e % nk + 1, (unsigned long long)km[j * nq * nk + e],
                         (unsigned long long)k1[e]);
        }
    }
    printf("identify_many_gpu: %s: %zu sets, %zu queries: keys equal (%zu candidates); one pass: %zu launches, "
           "%zu waits, %zu device + %zu host slots; alone: %zu launches, %zu waits, %zu + %zu slots\n",
           what, ns, nq, *nonzero, many->launches, many->syncs, many->dev_slots, many->host_slots, single->launches,
           single->syncs, single->dev_slots, single->host_slots);
    free(views);
    free(km);
    free(k1);
}

static void test_one_pass(void **state)
{
    /* slots per set: empty sets, one slot, around the 8-slot tile, around
     * the arena cap of phase 2 (64), larger ones, and one whose slots are
     * all removed (count 0) */
    static const size_t sizes[] = {0, 1, 7, 8, 9, 64, 65, 0, 300, 2000, 20};
    enum { NS = sizeof sizes / sizeof *sizes, NQ1 = 6, NQ2 = 300, CAP = 64, BIG = 10000 };
    const size_t nonempty = NS - 2, streamed = 3; /* 65, 300, 2000 past CAP */
    patina_context_t *ctx = NULL, *small = NULL;
    patina_context_opts_t co;
    patina_gpu_t *g = NULL;
    uint8_t *pool = malloc((size_t)POOL * MR * D), *q = malloc((size_t)NQ2 * NR * D);
    uint16_t pcount[POOL], qc[NQ2];
    synth_set_t sets[NS], big[2];
    pgpu_idf_opts_t o;
    pgpu_idf_stats_t sm, s1;
    size_t nz, nmir, i;
    uint64_t b0, b1;
    tu_rng_t rng;
    (void)state;
    assert_non_null(pool);
    assert_non_null(q);
    tu_rng_seed(&rng, 28);
    for (i = 0; i < POOL; i++) {
        pcount[i] = (uint16_t)(1 + tu_rng_below(&rng, MR));
        for (size_t r = 0; r < MR; r++) rootsift_row(pool + (i * MR + r) * D, &rng);
    }
    /* queries: rows of pool records, a few changed by one, and random rows; some queries empty */
    for (size_t k = 0; k < NQ2; k++) {
        const size_t rec = (k * 13) % POOL;
        qc[k] = (uint16_t)(k % 17 == 5 ? 0 : 1 + tu_rng_below(&rng, NR));
        for (size_t r = 0; r < NR; r++) {
            uint8_t *row = q + (k * NR + r) * D;
            if (r < pcount[rec] && r % 3 != 2) {
                memcpy(row, pool + (rec * MR + r) * D, D);
                row[tu_rng_below(&rng, D)] ^= 1;
            } else {
                rootsift_row(row, &rng);
            }
        }
    }
    for (i = 0; i < NS; i++) synth_make(&sets[i], 0x28000 + i, sizes[i], pool, pcount, i == NS - 1);
    memset(&o, 0, sizeof o);
    o.precision = PGPU_IDF_INT8;
    o.ratio = 0.8;
    o.scoring = 0;
    o.ncap = 10;

    TU_OK(patina_context_new(&ctx, NULL));
    TU_OK(patina__context_gpu_acquire(ctx, &g));
    /* 1. every set resident: one wait for all; the same launches as alone */
    pass_vs_single(g, sets, NS, q, qc, NQ1, &o, &sm, &s1, &nz, "resident");
    if (nz == 0) fail_msg("resident: no candidate at all (the data does not exercise the matching)");
    if (sm.syncs != 1 || s1.syncs != nonempty || sm.launches != s1.launches || sm.launches != nonempty ||
        sm.host_slots != 0)
        fail_msg("resident: one pass waited %zu times (1 expected) with %zu launches (%zu expected); alone %zu waits "
                 "(%zu expected), %zu launches; %zu host slots (0 expected)",
                 sm.syncs, sm.launches, nonempty, s1.syncs, nonempty, s1.launches, sm.host_slots);
    patina_gpu__identify_mirrors(g, &nmir, &b0);
    /* 2. the same again: no mirror built */
    pass_vs_single(g, sets, NS, q, qc, NQ1, &o, &sm, &s1, &nz, "resident, again");
    patina_gpu__identify_mirrors(g, &nmir, &b1);
    if (b1 != b0 || nmir != NS)
        fail_msg("the second pass built %llu mirrors and holds %zu (none built, %d held expected)",
                 (unsigned long long)(b1 - b0), nmir, (int)NS);
    /* 3. two query batches (256 + 44): two waits */
    pass_vs_single(g, sets, NS, q, qc, NQ2, &o, &sm, &s1, &nz, "two query batches");
    if (sm.syncs != 2 || s1.syncs != 2 * nonempty || sm.launches != s1.launches)
        fail_msg("two query batches: one pass waited %zu times (2 expected), alone %zu (%zu expected); launches %zu "
                 "and %zu (equal expected)",
                 sm.syncs, s1.syncs, 2 * nonempty, sm.launches, s1.launches);
    /* 4. an arena of CAP slots: the sets past it stream from the host tier, each on its own */
    o.arena_cap = CAP;
    pass_vs_single(g, sets, NS, q, qc, NQ1, &o, &sm, &s1, &nz, "host tier");
    if (sm.syncs != 1 + streamed || sm.launches != s1.launches || sm.host_slots == 0 ||
        sm.host_slots != s1.host_slots || sm.dev_slots != s1.dev_slots)
        fail_msg("host tier: one pass waited %zu times (%zu expected), launches %zu (alone %zu), slots %zu + %zu "
                 "(alone %zu + %zu)",
                 sm.syncs, 1 + streamed, sm.launches, s1.launches, sm.dev_slots, sm.host_slots, s1.dev_slots,
                 s1.host_slots);
    o.arena_cap = 0;
    patina__context_gpu_release(ctx);
    for (i = 0; i < NS; i++) synth_free(&sets[i]);
    patina_context_free(ctx);

    /* 5. two sets that do not fit a 200 MiB budget together (each arena
     * plans about 104 MiB: the budget less the 96 MiB kept for buffers):
     * the second does not fit beside the first, pinned for the pass, and is
     * matched on its own after it (two waits); the answers do not change */
    patina_context_opts_init(&co);
    co.gpu_mem_budget = 200ull << 20;
    TU_OK(patina_context_new(&small, &co));
    TU_OK(patina__context_gpu_acquire(small, &g));
    for (i = 0; i < 2; i++) synth_make(&big[i], 0x28100 + i, BIG, pool, pcount, 0);
    for (int round = 0; round < 2; round++) {
        pass_vs_single(g, big, 2, q, qc, NQ1, &o, &sm, &s1, &nz, "over the budget");
        if (sm.syncs != 2 || sm.launches != s1.launches)
            fail_msg("over the budget: one pass waited %zu times (2 expected: the second set on its own), "
                     "launches %zu (alone %zu)",
                     sm.syncs, sm.launches, s1.launches);
    }
    patina__context_gpu_release(small);
    for (i = 0; i < 2; i++) synth_free(&big[i]);
    patina_context_free(small);
    free(pool);
    free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_tables),
        cmocka_unit_test(test_warm),
        cmocka_unit_test(test_one_pass),
    };
    tu_require_gpu();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
