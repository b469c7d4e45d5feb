/* Tests of identification (src/identify/, include/patina/identify.h,
 * docs/identify.md): the fast matcher against the plain one (identical
 * nearest neighbours, ratio decisions and scores on random and real
 * records), the scoring rules on synthetic cases with known answers,
 * RANSAC on known transforms, outliers and degenerate samples, bad input,
 * end to end on sample photographs (a rotated, cropped, downscaled view of
 * an indexed photo is identified and accepted; a photo not indexed is
 * unknown) and the `patina identify` CLI contract.
 *
 * The real-photo parts need scripts/fetch-samples.sh; without the samples
 * they say so and the program exits 77 (skipped) after the others pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "features/family.h"
#include "gpu/gpu.h"
#include "features/rootsift.h"
#include "identify/identify.h"
#include "testutil.h"
#include "idfutil.h"

static int samples_missing;

static const char *samples_dir(void)
{
    const char *s = getenv("PATINA_SAMPLES");
    return s && *s ? s : PATINA_SAMPLES_DIR;
}

static const char *sample(const char *rel)
{
    const char *p = tu_path(samples_dir(), "%s", rel);
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fclose(f);
    return p;
}

/* ------------------------------------------------------------ synthetic rows */

typedef struct nnbuf {
    int32_t *imem;
    float *fmem;
    idf_nn_t nn;
} nnbuf_t;

static void nn_alloc(nnbuf_t *b, size_t nq, size_t nr)
{
    b->imem = malloc((nq + 2 * nr + 1) * sizeof *b->imem);
    b->fmem = malloc((2 * nq + nr + 1) * sizeof *b->fmem);
    b->nn.best = b->imem;
    b->nn.qbest = b->imem + nq;
    b->nn.s1 = b->fmem;
    b->nn.s2 = b->fmem + nq;
    b->nn.qs = b->fmem + 2 * nq;
}

static void nn_free(nnbuf_t *b)
{
    free(b->imem);
    free(b->fmem);
}

/* u8 rows at scale 512 as the definition reads them. */
static float *dequantise_rows(const uint8_t *v, size_t n)
{
    float *f = malloc((n + 1) * 128 * sizeof *f);
    for (size_t i = 0; i < n * 128; i++) f[i] = (float)v[i] / 512.0f;
    return f;
}

/* The float definition and the fast integer matcher on (q, r) agree exactly:
 * neighbours, similarities (bit for bit), and every scoring rule's
 * correspondences; and the similarities are the exact dot products of the
 * dequantised rows (checked in double). */
static void check_matchers(const uint8_t *q, size_t nq, const uint8_t *r, size_t nr, double ratio)
{
    nnbuf_t a, b;
    int16_t *qw = malloc((nq + 1) * 128 * sizeof *qw);
    idf_match_t *ma = malloc((nq + 1) * sizeof *ma), *mb = malloc((nq + 1) * sizeof *mb);
    int32_t *claim = malloc((nr + 1) * sizeof *claim), *scr = malloc((nr + 1) * sizeof *scr);
    float *qf = dequantise_rows(q, nq), *rf = dequantise_rows(r, nr);
    size_t j, i;
    int sc;
    nn_alloc(&a, nq, nr);
    nn_alloc(&b, nq, nr);
    idf_match_ref(&a.nn, qf, nq, rf, nr);
    idf_widen(qw, q, nq);
    idf_match_fast(&b.nn, scr, qw, nq, r, nr, IDF_INV_SCALE2);
    for (j = 0; j < nq; j++) {
        if (a.nn.best[j] != b.nn.best[j] || memcmp(&a.nn.s1[j], &b.nn.s1[j], 4) ||
            memcmp(&a.nn.s2[j], &b.nn.s2[j], 4))
            fail_msg("query row %zu (nq %zu nr %zu): ref (%d, %a, %a) fast (%d, %a, %a)", j, nq, nr, a.nn.best[j],
                     (double)a.nn.s1[j], (double)a.nn.s2[j], b.nn.best[j], (double)b.nn.s1[j], (double)b.nn.s2[j]);
        if (nr) { /* s is the exact dot of the dequantised rows */
            long dot = 0;
            for (i = 0; i < 128; i++) dot += (long)q[j * 128 + i] * r[(size_t)a.nn.best[j] * 128 + i];
            assert_true((double)a.nn.s1[j] == (double)dot / 262144.0);
        }
    }
    for (i = 0; i < nr; i++)
        if (a.nn.qbest[i] != b.nn.qbest[i] || memcmp(&a.nn.qs[i], &b.nn.qs[i], 4))
            fail_msg("reference row %zu: ref (%d, %a) fast (%d, %a)", i, a.nn.qbest[i], (double)a.nn.qs[i],
                     b.nn.qbest[i], (double)b.nn.qs[i]);
    for (sc = 0; sc < 3; sc++) {
        size_t na = idf_score(ma, claim, &a.nn, nq, nr, ratio, (patina_identify_scoring)sc);
        size_t nb = idf_score(mb, claim, &b.nn, nq, nr, ratio, (patina_identify_scoring)sc);
        assert_int_equal(na, nb);
        assert_memory_equal(ma, mb, na * sizeof *ma);
    }
    /* the matcher of CPUs without AVX-512 VNNI, whatever this one has: the same bits */
    idf_match_fast_plain(&b.nn, scr, qw, nq, r, nr, IDF_INV_SCALE2);
    for (j = 0; j < nq; j++)
        if (a.nn.best[j] != b.nn.best[j] || memcmp(&a.nn.s1[j], &b.nn.s1[j], 4) || memcmp(&a.nn.s2[j], &b.nn.s2[j], 4))
            fail_msg("plain matcher, query row %zu (nq %zu nr %zu)", j, nq, nr);
    for (i = 0; i < nr; i++)
        if (a.nn.qbest[i] != b.nn.qbest[i] || memcmp(&a.nn.qs[i], &b.nn.qs[i], 4))
            fail_msg("plain matcher, reference row %zu (nq %zu nr %zu)", i, nq, nr);
    nn_free(&a);
    nn_free(&b);
    free(qw);
    free(qf);
    free(rf);
    free(ma);
    free(mb);
    free(claim);
    free(scr);
}

static void test_matchers_random(void **state)
{
    /* reference rows: around the vector matcher's lanes (16) and its limit (512) too */
    static const size_t shapes[][2] = {{0, 0}, {0, 5},   {3, 0},   {1, 1},   {1, 2},    {2, 1},   {5, 3},
                                       {4, 4}, {7, 33},  {17, 9},  {64, 31}, {130, 97}, {5, 15},  {33, 16},
                                       {17, 17}, {9, 513}, {40, 512}, {768, 384}, {6, 1100}, {3, 1024}};
    tu_rng_t r;
    size_t t, i;
    (void)state;
    tu_rng_seed(&r, 15);
    for (t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        size_t nq = shapes[t][0], nr = shapes[t][1];
        uint8_t *q = malloc((nq + 1) * 128), *ref = malloc((nr + 1) * 128);
        for (i = 0; i < nr; i++) random_row(ref + i * 128, &r);
        /* exact ties: duplicated reference rows */
        if (nr > 3) memcpy(ref + 3 * 128, ref + 1 * 128, 128);
        for (i = 0; i < nq; i++) {
            if (nr && i % 3 == 0) perturb(q + i * 128, ref + tu_rng_below(&r, (uint32_t)nr) * 128, 3, &r);
            else random_row(q + i * 128, &r);
        }
        if (nq > 2) memcpy(q + 2 * 128, q, 128); /* duplicated query rows (mutual ties) */
        check_matchers(q, nq, ref, nr, 0.8);
        check_matchers(q, nq, ref, nr, 1.0);
        check_matchers(q, nq, ref, nr, 0.5);
        free(q);
        free(ref);
    }
}

/* Ties everywhere and the largest dots: rows of 0 and 255 only, from a
 * handful of patterns, so that most dots tie (the lower reference row and
 * query row must win, a tie with the best is the second) and reach
 * 128 x 255^2, the top of the integer range. */
static void test_matchers_ties_extreme(void **state)
{
    static const size_t shapes[][2] = {{1, 1}, {3, 40}, {20, 17}, {50, 384}, {100, 512}, {30, 1030}};
    tu_rng_t r;
    size_t t, i, k;
    (void)state;
    tu_rng_seed(&r, 33);
    for (t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        size_t nq = shapes[t][0], nr = shapes[t][1];
        uint8_t pat[4][128], *q = malloc(nq * 128), *ref = malloc(nr * 128);
        for (i = 0; i < 4; i++)
            for (k = 0; k < 128; k++) pat[i][k] = i == 0 ? 255 : (tu_rng_below(&r, 2) ? 255 : 0);
        for (i = 0; i < nr; i++) memcpy(ref + i * 128, pat[tu_rng_below(&r, 4)], 128);
        for (i = 0; i < nq; i++) memcpy(q + i * 128, pat[tu_rng_below(&r, 4)], 128);
        check_matchers(q, nq, ref, nr, 0.8);
        check_matchers(q, nq, ref, nr, 1.0);
        free(q);
        free(ref);
    }
}

/* Tie rules and the 1-feature reference. */
static void test_ties_and_tiny(void **state)
{
    tu_rng_t r;
    uint8_t ref[3 * 128], q[128];
    float *rf, *qf;
    nnbuf_t b;
    idf_match_t mt[1];
    int32_t claim[3];
    (void)state;
    tu_rng_seed(&r, 2);
    random_row(ref, &r);
    memcpy(ref + 128, ref, 128); /* rows 0 and 1 identical */
    random_row(ref + 256, &r);
    memcpy(q, ref, 128);
    rf = dequantise_rows(ref, 3);
    qf = dequantise_rows(q, 1);
    nn_alloc(&b, 1, 3);
    idf_match_ref(&b.nn, qf, 1, rf, 3);
    assert_int_equal(b.nn.best[0], 0);          /* the lower index */
    assert_true(b.nn.s1[0] == b.nn.s2[0]);      /* the tie is the second */
    assert_int_equal(idf_score(mt, claim, &b.nn, 1, 3, 0.8, PATINA_SCORE_RAW), 0);
    /* A reference with one feature: no second neighbour, the test cannot pass. */
    idf_match_ref(&b.nn, qf, 1, rf + 256, 1);
    assert_true(b.nn.s2[0] == -1.0f);
    assert_false(idf_ratio_pass(b.nn.s1[0], b.nn.s2[0], 1.0));
    assert_int_equal(idf_score(mt, claim, &b.nn, 1, 1, 1.0, PATINA_SCORE_ONE2ONE), 0);
    /* ratio test on the definition: d1 < ratio d2 */
    assert_true(idf_ratio_pass(1.0f, 0.0f, 0.8));   /* d1 = 0, d2 = sqrt 2 */
    assert_false(idf_ratio_pass(0.5f, 0.5f, 0.8));  /* equal distances */
    assert_false(idf_ratio_pass(1.0f, 1.0f, 1.0));  /* 0 < 0 is false */
    assert_true(idf_ratio_pass(0.9f, 0.5f, 0.8));   /* d1^2 = 0.2 < 0.64 x 1.0 */
    assert_false(idf_ratio_pass(0.9f, 0.85f, 0.8)); /* 0.2 < 0.64 x 0.3 = 0.192 fails */
    nn_free(&b);
    free(rf);
    free(qf);
}

/* ---------------------------------------------------------- collection setup */

/* The id at rank 1 of one query (0: no candidate). */
static uint64_t rank1(patina_refset_t *rs, const unsigned char *q, const patina_identify_opts_t *o)
{
    patina_identify_hit_t hits[8];
    patina_identify_result_t res;
    assert_true(o->k <= 8);
    TU_OK(patina_identify(NULL, rs, q, 1, o, hits, &res));
    return res.nhits ? hits[0].id : 0;
}

/* A reference set kept up to date: removal, revival, addition, update (same
 * id, new content), an id inserted below the largest, compaction, and the
 * refusals. Each query is built from one reference's rows, so its rank 1
 * says which references the set holds. */
static void test_refset_updates(void **state)
{
    patina_extractor_t *ex = NULL;
    const char *spec;
    tu_rng_t r;
    enum { NR = 6, M = 24 };
    uint8_t rows[NR + 3][M * 128];
    unsigned char *recs[NR + 3], *qrec[NR + 3];
    char *dir;
    patina_collection_t *c;
    patina_refset_t *rs = NULL;
    patina_identify_opts_t o;
    size_t i, j, bytes, stride;
    const uint64_t *ids;
    (void)state;
    TU_OK(patina_extractor_new(&ex, "rootsift:m=24,n=24"));
    spec = patina_extractor_spec(ex);
    bytes = patina_extractor_bytes(ex);
    tu_rng_seed(&r, 33);
    for (i = 0; i < NR + 3; i++) {
        uint8_t q[M * 128];
        for (j = 0; j < M; j++) random_row(rows[i] + j * 128, &r);
        for (j = 0; j < M; j++) perturb(q + j * 128, rows[i] + j * 128, 2, &r);
        recs[i] = make_record(M, M, rows[i], NULL, 100, 100);
        qrec[i] = make_record(M, M, q, NULL, 100, 100);
    }
    c = make_collection(&dir, spec, recs, NR, bytes); /* ids 1..NR hold rows[0..NR) */
    TU_OK(patina_refset_load(&rs, c, NULL));
    patina_identify_opts_init(&o);
    o.verify = 0;
    o.k = 4;
#define RANK1(qi) rank1(rs, qrec[qi], &o)
    assert_int_equal(RANK1(2), 3);
    TU_OK(patina_refset_remove(rs, 3));
    assert_int_equal(patina_refset_size(rs), NR - 1);
    assert_int_not_equal(RANK1(2), 3);
    assert_int_equal(patina_refset_remove(rs, 3), PATINA_E_NOTFOUND);
    assert_int_equal(patina_refset_remove(rs, 99), PATINA_E_NOTFOUND);
    TU_OK(patina_refset_put(rs, 3, recs[2], bytes)); /* back */
    assert_int_equal(RANK1(2), 3);
    TU_OK(patina_refset_put(rs, 20, recs[NR], bytes)); /* a new reference */
    assert_int_equal(RANK1(NR), 20);
    TU_OK(patina_refset_put(rs, 2, recs[NR + 1], bytes)); /* update: id 2 now holds new rows */
    assert_int_equal(RANK1(NR + 1), 2);
    assert_int_not_equal(RANK1(1), 2);
    TU_OK(patina_refset_put(rs, 10, recs[NR + 2], bytes)); /* below the largest id */
    assert_int_equal(RANK1(NR + 2), 10);
    assert_int_equal(patina_refset_size(rs), NR + 2);
    ids = patina_refset_ids(rs);
    for (i = 1; i < NR + 2; i++) assert_true(ids[i - 1] < ids[i]);
    /* removals past a quarter of the slots compact the set (when >= 64
     * are removed); ids and records stay in step */
    TU_OK(patina_refset_remove(rs, 1));
    TU_OK(patina_refset_remove(rs, 20));
    ids = patina_refset_ids(rs);
    assert_int_equal(patina_refset_size(rs), NR);
    {
        const unsigned char *b = patina_refset_records(rs, &stride);
        assert_int_equal(stride, bytes);
        for (i = 0; i < NR; i++) assert_int_not_equal(ids[i], 1), assert_int_not_equal(ids[i], 20);
        assert_int_equal(ids[0], 2);
        assert_memory_equal(b, recs[NR + 1], bytes); /* id 2's record is the update */
    }
    assert_int_equal(RANK1(2), 3);
    /* refusals change nothing */
    assert_int_equal(patina_refset_put(rs, 0, recs[0], bytes), PATINA_E_INVALID);
    assert_int_equal(patina_refset_put(rs, 30, recs[0], bytes - 16), PATINA_E_CORRUPT);
    {
        unsigned char *bad = malloc(bytes);
        memcpy(bad, recs[0], bytes);
        rs_put_u32(bad, M + 1); /* count > m */
        assert_int_equal(patina_refset_put(rs, 30, bad, bytes), PATINA_E_CORRUPT);
        free(bad);
    }
    {
        patina_extractor_t *e2 = NULL;
        unsigned char *other = make_record(16, 16, rows[0], NULL, 100, 100);
        TU_OK(patina_extractor_new(&e2, "rootsift:m=16"));
        assert_int_equal(patina_refset_put(rs, 30, other, patina_extractor_bytes(e2)), PATINA_E_INVALID);
        patina_extractor_free(e2);
        free(other);
    }
    assert_int_equal(patina_refset_size(rs), NR);
#undef RANK1
    patina_refset_free(rs);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    for (i = 0; i < NR + 3; i++) {
        free(recs[i]);
        free(qrec[i]);
    }
    patina_extractor_free(ex);
}

/* The paper's raw count lets a 2-feature reference win; one-to-one does not.
 * Query: 30 features, 12 of which are (perturbed) features of the true
 * reference. Decoy: 2 features, a "mean" row near every query feature and a
 * far spike row, so most query features pass the ratio test against it. */
static void test_scoring_decoy(void **state)
{
    const char *spec;
    patina_extractor_t *ex = NULL;
    tu_rng_t r;
    uint8_t qrows[30 * 128], trows[40 * 128], drows[2 * 128], single[128];
    unsigned char *recs[3], *qrec;
    char *dir;
    patina_collection_t *c;
    patina_refset_t *rs = NULL;
    patina_identify_opts_t o;
    patina_identify_hit_t hits[3];
    patina_identify_result_t res;
    size_t i, bytes;
    (void)state;
    TU_OK(patina_extractor_new(&ex, "rootsift:m=40,n=30"));
    spec = patina_extractor_spec(ex);
    bytes = patina_extractor_bytes(ex);
    tu_rng_seed(&r, 7);
    for (i = 0; i < 40; i++) random_row(trows + i * 128, &r);
    for (i = 0; i < 30; i++) {
        if (i < 12) perturb(qrows + i * 128, trows + i * 128, 2, &r);
        else random_row(qrows + i * 128, &r);
    }
    memset(drows, 45, 128);         /* the mean direction: 45 * sqrt(128) ~ 509 */
    memset(drows + 128, 0, 128);
    memset(drows + 128, 255, 4);    /* a spike */
    random_row(single, &r);
    recs[0] = make_record(40, 40, trows, NULL, 640, 480); /* id 1: the true reference */
    recs[1] = make_record(40, 2, drows, NULL, 640, 480);  /* id 2: the decoy */
    recs[2] = make_record(40, 1, single, NULL, 640, 480); /* id 3: one feature */
    qrec = make_record(30, 30, qrows, NULL, 640, 480);
    c = make_collection(&dir, spec, recs, 3, bytes);
    TU_OK(patina_refset_load(&rs, c, NULL));
    assert_int_equal(patina_refset_size(rs), 3);
    assert_string_equal(patina_refset_table(rs), spec);
    assert_int_equal(patina_identify_query_bytes(rs), rs_record_bytes(30, RS_QUANT_U8));
    patina_identify_opts_init(&o);
    o.verify = 0;
    o.k = 3;
    o.threshold = 5;
    o.accept = PATINA_ACCEPT_INLIERS;
    /* raw: the decoy collects most query features */
    o.scoring = PATINA_SCORE_RAW;
    TU_OK(patina_identify(NULL, rs, qrec, 1, &o, hits, &res));
    print_message("raw: id %llu %u, id %llu %u\n", (unsigned long long)hits[0].id, hits[0].matches,
                  (unsigned long long)hits[1].id, hits[1].matches);
    assert_int_equal(hits[0].id, 2);
    assert_true(hits[0].matches > 12);
    /* one-to-one: the decoy scores at most 2, the true reference wins */
    o.scoring = PATINA_SCORE_ONE2ONE;
    TU_OK(patina_identify(NULL, rs, qrec, 1, &o, hits, &res));
    assert_int_equal(res.nhits, 2); /* the 1-feature reference matches nothing: not listed */
    assert_int_equal(hits[0].id, 1);
    assert_int_equal(hits[0].matches, 12);
    assert_true(hits[1].id == 2 && hits[1].matches <= 2);
    assert_int_equal(res.decision, PATINA_DECISION_MATCH);
    assert_int_equal(res.query_features, 30);
    o.scoring = PATINA_SCORE_MUTUAL;
    TU_OK(patina_identify(NULL, rs, qrec, 1, &o, hits, &res));
    assert_int_equal(hits[0].id, 1);
    assert_int_equal(hits[0].matches, 12);
    /* duplicated query features do not inflate one-to-one */
    {
        uint8_t dup[30 * 128];
        unsigned char *drec;
        for (i = 0; i < 30; i++) memcpy(dup + i * 128, qrows + (i % 6) * 128, 128);
        drec = make_record(30, 30, dup, NULL, 640, 480);
        o.scoring = PATINA_SCORE_ONE2ONE;
        TU_OK(patina_identify(NULL, rs, drec, 1, &o, hits, &res));
        assert_int_equal(hits[0].id, 1);
        assert_int_equal(hits[0].matches, 6);
        o.scoring = PATINA_SCORE_RAW;
        TU_OK(patina_identify(NULL, rs, drec, 1, &o, hits, &res));
        assert_true(hits[0].matches == 30 || hits[1].matches == 30);
        free(drec);
    }
    /* shards: ids 1 and 3 in shard 1 of 2, id 2 in shard 0 */
    {
        patina_refset_t *s1 = NULL;
        patina_refset_spec_t sp;
        patina_refset_spec_init(&sp);
        sp.shards = 2;
        sp.shard = 1;
        TU_OK(patina_refset_load(&s1, c, &sp));
        assert_int_equal(patina_refset_size(s1), 2);
        assert_int_equal(patina_refset_ids(s1)[0], 1);
        assert_int_equal(patina_refset_ids(s1)[1], 3);
        sp.shard = 2;
        patina_refset_free(s1);
        assert_int_equal(patina_refset_load(&s1, c, &sp), PATINA_E_INVALID);
        assert_null(s1);
    }
    for (i = 0; i < 3; i++) free(recs[i]);
    free(qrec);
    patina_refset_free(rs);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    patina_extractor_free(ex);
}

/* Similarity of two u8 rows as the definition gives it (dot / 2^18). */
static double row_sim(const uint8_t *a, const uint8_t *b)
{
    long d = 0;
    for (int k = 0; k < 128; k++) d += (long)a[k] * b[k];
    return (double)d / 262144.0;
}

/* d(q, a) / d(q, b) for unit rows. */
static double dist_ratio(const uint8_t *q, const uint8_t *a, const uint8_t *b)
{
    return sqrt(fmax(0, 2 - 2 * row_sim(q, a)) / fmax(1e-12, 2 - 2 * row_sim(q, b)));
}

/* out = a + t (b - a), scaled to norm 512 and rounded (a u8 RootSIFT row). */
static void mix_rows(uint8_t *out, const uint8_t *a, const uint8_t *b, double t)
{
    double v[128], n = 0;
    for (int k = 0; k < 128; k++) {
        v[k] = (1 - t) * a[k] + t * b[k];
        n += v[k] * v[k];
    }
    for (int k = 0; k < 128; k++) {
        double x = floor(512.0 * v[k] / sqrt(n) + 0.5);
        out[k] = (uint8_t)(x > 255 ? 255 : x);
    }
}

/* Guided matching: a reference whose features repeat elsewhere in it (a
 * near-copy of the row far away), seen through a similarity. 10 query
 * features are unique (they pass the ratio test), 10 have a copy a little
 * farther than themselves (d/d_copy in (0.82, 0.88): they fail the ratio
 * test at 0.8, pass guided matching at 0.9), 10 a copy nearer than
 * themselves (by less than the ratio: no ratio test passes). Without guided matching 10 inliers; with
 * it 20 (at 0.9; still 10 at 0.8); patina_identify_pairs returns them. */
static void test_guided(void **state)
{
    enum { NU = 10, NB = 10, NC = 10, NQ = NU + NB + NC, NR = NU + 2 * (NB + NC) };
    const double a = 0.9, th = 20 * M_PI / 180, tx = 40, ty = 30;
    patina_extractor_t *ex = NULL;
    tu_rng_t r;
    uint8_t qrows[NQ * 128], rrows[NR * 128];
    float qgeo[NQ * 4], rgeo[NR * 4], pairs[4 * NQ];
    unsigned char *rec, *qrec;
    char *dir;
    patina_collection_t *c;
    patina_refset_t *rs = NULL;
    patina_identify_opts_t o;
    patina_identify_hit_t hit;
    patina_identify_result_t res;
    size_t i, n;
    (void)state;
    TU_OK(patina_extractor_new(&ex, "rootsift:m=" "50" ",n=30"));
    tu_rng_seed(&r, 21);
    for (i = 0; i < NQ; i++) {
        /* query keypoint on a 5 x 6 grid (no two predictions near each other), its reference image */
        const double qx = 40 + 80.0 * (double)(i % 6), qy = 40 + 80.0 * (double)(i / 6);
        uint8_t *orig = rrows + i * 128, *q = qrows + i * 128;
        uint8_t other[128];
        random_row(orig, &r);
        random_row(other, &r);
        mix_rows(q, orig, other, 0.15);
        qgeo[4 * i] = (float)qx, qgeo[4 * i + 1] = (float)qy;
        qgeo[4 * i + 2] = (float)(2 + (double)(i % 4)), qgeo[4 * i + 3] = (float)(0.3 * (double)(i % 7));
        rgeo[4 * i] = (float)(a * (cos(th) * qx - sin(th) * qy) + tx);
        rgeo[4 * i + 1] = (float)(a * (sin(th) * qx + cos(th) * qy) + ty);
        rgeo[4 * i + 2] = (float)(a * qgeo[4 * i + 2]), rgeo[4 * i + 3] = (float)(qgeo[4 * i + 3] + th);
        if (i >= NU) { /* a copy far away: farther (group B) or nearer (group C) than the original */
            const size_t j = NU + NB + NC + (i - NU);
            uint8_t *cp = rrows + j * 128;
            double d = 0;
            int t;
            random_row(other, &r);
            for (t = 0; t <= 200; t++) { /* the copy: the original (B) or the query (C) moved away */
                mix_rows(cp, i < NU + NB ? orig : q, other, 0.005 * t);
                d = dist_ratio(q, orig, cp);
                if (i < NU + NB ? d > 0.82 && d < 0.88 : d > 1.05 && d < 1.2) break;
            }
            if (t > 200) fail_msg("feature %zu: no copy at the wanted distance (%g)", i, d);
            rgeo[4 * j] = 600, rgeo[4 * j + 1] = (float)(10 + 20 * (double)(i - NU));
            rgeo[4 * j + 2] = rgeo[4 * i + 2], rgeo[4 * j + 3] = rgeo[4 * i + 3];
        }
    }
    rec = make_record(50, NR, rrows, rgeo, 640, 480);
    qrec = make_record(30, NQ, qrows, qgeo, 640, 480);
    c = make_collection(&dir, patina_extractor_spec(ex), &rec, 1, patina_extractor_bytes(ex));
    TU_OK(patina_refset_load(&rs, c, NULL));
    patina_identify_opts_init(&o);
    o.k = 1;
    o.guided = 0;
    TU_OK(patina_identify(NULL, rs, qrec, 1, &o, &hit, &res));
    assert_int_equal(hit.matches, NU);
    assert_int_equal(hit.inliers, NU);
    o.guided = 1;
    o.guided_ratio = 0.9;
    TU_OK(patina_identify(NULL, rs, qrec, 1, &o, &hit, &res));
    assert_int_equal(hit.matches, NU); /* the candidates' score is the matching's */
    assert_int_equal(hit.inliers, NU + NB);
    TU_OK(patina_identify_pairs(rs, qrec, hit.id, &o, pairs, NQ, &n));
    assert_int_equal(n, NU + NB);
    for (i = 0; i < n; i++) { /* each pair is a true correspondence */
        const double qx = pairs[4 * i], qy = pairs[4 * i + 1];
        assert_true(fabs(a * (cos(th) * qx - sin(th) * qy) + tx - pairs[4 * i + 2]) < 0.01);
        assert_true(fabs(a * (sin(th) * qx + cos(th) * qy) + ty - pairs[4 * i + 3]) < 0.01);
    }
    o.guided_ratio = 0.8;
    TU_OK(patina_identify(NULL, rs, qrec, 1, &o, &hit, &res));
    assert_int_equal(hit.inliers, NU);
    free(rec);
    free(qrec);
    patina_refset_free(rs);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    patina_extractor_free(ex);
}

/* The decision: a query showing two references (identical records, ids 1
 * and 2, in one set or in two shards merged) is AMBIGUOUS, both keys
 * listed; with one of them, MATCH; below the threshold, UNKNOWN. The
 * threshold for a FAR target: the default for 0.01, 0 for 1, stricter for
 * smaller rates, refused below the calibrated range. */
static void test_decisions(void **state)
{
    enum { N = 24 };
    patina_extractor_t *ex = NULL;
    tu_rng_t r;
    uint8_t rows[N * 128], qrows[N * 128];
    float rgeo[N * 4], qgeo[N * 4];
    unsigned char *recs[3], *qrec;
    char *dir;
    patina_collection_t *c;
    patina_refset_t *rs = NULL, *part[2] = {NULL, NULL};
    patina_refset_spec_t sp;
    patina_identify_opts_t o;
    patina_identify_hit_t hits[3], ph[2][10], mh[3];
    patina_identify_result_t res, pr[2], mr;
    const patina_identify_hit_t *phv[2] = {ph[0], ph[1]};
    const patina_identify_result_t *prv[2] = {&pr[0], &pr[1]};
    double t, prev = 0;
    size_t i;
    (void)state;
    TU_OK(patina_extractor_new(&ex, "rootsift:m=24,n=24"));
    tu_rng_seed(&r, 5);
    for (i = 0; i < N; i++) {
        random_row(rows + i * 128, &r);
        perturb(qrows + i * 128, rows + i * 128, 1, &r);
        qgeo[4 * i] = (float)(30 + 90 * (i % 6)), qgeo[4 * i + 1] = (float)(30 + 90 * (i / 6));
        qgeo[4 * i + 2] = 3, qgeo[4 * i + 3] = 1;
        rgeo[4 * i] = qgeo[4 * i] + 7, rgeo[4 * i + 1] = qgeo[4 * i + 1] - 5; /* a translation */
        rgeo[4 * i + 2] = 3, rgeo[4 * i + 3] = 1;
    }
    recs[0] = make_record(24, N, rows, rgeo, 640, 480);
    recs[1] = make_record(24, N, rows, rgeo, 640, 480);
    random_row(rows, &r); /* a third, unrelated reference */
    recs[2] = make_record(24, 1, rows, rgeo, 640, 480);
    qrec = make_record(24, N, qrows, qgeo, 640, 480);
    c = make_collection(&dir, patina_extractor_spec(ex), recs, 3, patina_extractor_bytes(ex));
    TU_OK(patina_refset_load(&rs, c, NULL));
    patina_identify_opts_init(&o);
    o.k = 3;
    TU_OK(patina_identify(NULL, rs, qrec, 1, &o, hits, &res));
    assert_int_equal(res.decision, PATINA_DECISION_AMBIGUOUS);
    assert_string_equal(patina_identify_decision_name(res.decision), "ambiguous");
    assert_true(hits[0].id == 1 && hits[1].id == 2 && hits[0].inliers == N && hits[1].inliers == N);
    o.k = 1; /* the rule looks at rank 2 whatever k */
    TU_OK(patina_identify(NULL, rs, qrec, 1, &o, hits, &res));
    assert_int_equal(res.decision, PATINA_DECISION_AMBIGUOUS);
    /* two shards merged: the same */
    o.k = 3;
    patina_refset_spec_init(&sp);
    sp.shards = 2;
    for (i = 0; i < 2; i++) {
        patina_identify_opts_t po = o;
        sp.shard = (uint32_t)i;
        TU_OK(patina_refset_load(&part[i], c, &sp));
        po.k = patina_identify_part_k(&o);
        TU_OK(patina_identify(NULL, part[i], qrec, 1, &po, ph[i], &pr[i]));
    }
    { /* the merge decides with the table's threshold (the calibrated default is the parts' table's) */
        patina_identify_opts_t mo = o;
        TU_OK(patina_identify_far_threshold_table(patina_refset_table(rs), 0.01, &mo.threshold));
        TU_OK(patina_identify_merge(phv, prv, 2, 1, &mo, mh, &mr));
        assert_true(mr.threshold == pr[0].threshold && mr.threshold == PATINA_SIGNIFICANCE_DEFAULT);
    }
    assert_int_equal(mr.decision, PATINA_DECISION_AMBIGUOUS);
    assert_true(mh[0].id == 1 && mh[1].id == 2);
    /* one copy (shard 1: ids 1 and 3): a match; a threshold above its score: unknown */
    TU_OK(patina_identify(NULL, part[1], qrec, 1, &o, hits, &res));
    assert_int_equal(res.decision, PATINA_DECISION_MATCH);
    assert_string_equal(patina_identify_decision_name(res.decision), "match");
    assert_true(hits[0].score > 0 && hits[0].score != (double)hits[0].inliers); /* a significance */
    o.threshold = hits[0].score + 1;
    TU_OK(patina_identify(NULL, rs, qrec, 1, &o, hits, &res));
    assert_int_equal(res.decision, PATINA_DECISION_UNKNOWN);
    assert_string_equal(patina_identify_decision_name(res.decision), "unknown");
    assert_null(patina_identify_decision_name((patina_identify_decision)7));
    /* FAR targets */
    TU_OK(patina_identify_far_threshold(0.01, &t));
    assert_true(t == PATINA_SIGNIFICANCE_DEFAULT);
    patina_identify_opts_init(&o); /* the default: that calibration, resolved by the call (no views here) */
    assert_true(o.threshold == PATINA_THRESHOLD_CALIBRATED);
    o.k = 3; /* hits holds 3 */
    TU_OK(patina_identify(NULL, rs, qrec, 1, &o, hits, &res));
    assert_true(res.threshold == t);
    { /* the inlier rule has a calibration of its own, which the call resolves for it */
        double ti;
        patina_identify_opts_t io = o;
        io.accept = PATINA_ACCEPT_INLIERS;
        TU_OK(patina_identify_far_threshold_opts(NULL, &io, 0.01, &ti));
        assert_true(ti == PATINA_THRESHOLD_DEFAULT);
        TU_OK(patina_identify(NULL, rs, qrec, 1, &io, hits, &res));
        assert_true(res.threshold == ti && hits[0].score == (double)hits[0].inliers);
        TU_OK(patina_identify_far_threshold_opts(NULL, NULL, 0.01, &ti));
        assert_true(ti == t);
        io.accept = (patina_identify_accept)7;
        assert_int_equal(patina_identify_far_threshold_opts(NULL, &io, 0.01, &ti), PATINA_E_INVALID);
        assert_int_equal(patina_identify(NULL, rs, qrec, 1, &io, hits, &res), PATINA_E_INVALID);
    }
    TU_OK(patina_identify_far_threshold(1, &t));
    assert_true(t == 0);
    for (double far = 1; far >= PATINA_FAR_MIN; far *= 0.9) {
        TU_OK(patina_identify_far_threshold(far, &t));
        assert_true(t >= prev);
        prev = t;
    }
    assert_int_equal(patina_identify_far_threshold(PATINA_FAR_MIN / 2, &t), PATINA_E_INVALID);
    assert_int_equal(patina_identify_far_threshold(1.5, &t), PATINA_E_INVALID);
    assert_int_equal(patina_identify_far_threshold(NAN, &t), PATINA_E_INVALID);
    for (i = 0; i < 3; i++) free(recs[i]);
    free(qrec);
    patina_refset_free(rs);
    patina_refset_free(part[0]);
    patina_refset_free(part[1]);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    patina_extractor_free(ex);
}

/* A merge's sibling callback: records its calls, answers from `answer`. */
typedef struct {
    size_t answer;
    int calls;
    size_t q;
    uint64_t a, b;
} sib_cb_t;

static patina_status sib_cb(void *user, size_t query, uint64_t a, uint64_t b, size_t *inliers)
{
    sib_cb_t *c = user;
    c->calls++;
    c->q = query, c->a = a, c->b = b;
    *inliers = c->answer;
    return PATINA_OK;
}

/* opts.distinct: rank 1 must beat the verified runner-up by the margin,
 * the runner-up counting 0 when the two references are siblings (one's
 * record verifies against the other's rows with sibling_inliers inliers).
 * References: id 1 (N rows), id 2 sharing H of them (its sibling), id 3
 * unrelated to both; the query shows id 1 and id 3's content. */
static void test_distinct(void **state)
{
    enum { N = 24, H = 16, X = 10 };
    patina_extractor_t *ex = NULL;
    tu_rng_t r;
    uint8_t rows[N * 128], sib[N * 128], xrows[X * 128], qrows[(N + X) * 128];
    float rgeo[N * 4], xgeo[X * 4], qgeo[(N + X) * 4];
    unsigned char *recs[3], *qrec;
    patina_refset_t *rs = NULL;
    patina_identify_opts_t o;
    patina_identify_hit_t hits[3];
    patina_identify_result_t res;
    double s1, s2;
    size_t i, bytes;
    (void)state;
    TU_OK(patina_extractor_new(&ex, "rootsift:m=40,n=40"));
    bytes = patina_extractor_bytes(ex);
    tu_rng_seed(&r, 9);
    for (i = 0; i < N + X; i++) {
        qgeo[4 * i] = (float)(30 + 60 * (i % 8)), qgeo[4 * i + 1] = (float)(30 + 60 * (i / 8));
        qgeo[4 * i + 2] = 3, qgeo[4 * i + 3] = 1;
    }
    for (i = 0; i < N; i++) {
        random_row(rows + i * 128, &r);
        perturb(qrows + i * 128, rows + i * 128, 1, &r);
        rgeo[4 * i] = qgeo[4 * i] + 7, rgeo[4 * i + 1] = qgeo[4 * i + 1] - 5; /* a translation */
        rgeo[4 * i + 2] = 3, rgeo[4 * i + 3] = 1;
    }
    memcpy(sib, rows, H * 128);
    for (i = H; i < N; i++) random_row(sib + i * 128, &r);
    for (i = 0; i < X; i++) {
        random_row(xrows + i * 128, &r);
        perturb(qrows + (N + i) * 128, xrows + i * 128, 1, &r);
        xgeo[4 * i] = qgeo[4 * (N + i)] - 11, xgeo[4 * i + 1] = qgeo[4 * (N + i) + 1] + 4; /* another */
        xgeo[4 * i + 2] = 3, xgeo[4 * i + 3] = 1;
    }
    recs[0] = make_record(40, N, rows, rgeo, 640, 480);
    recs[1] = make_record(40, N, sib, rgeo, 640, 480);
    recs[2] = make_record(40, X, xrows, xgeo, 640, 480);
    qrec = make_record(40, N + X, qrows, qgeo, 640, 480);
    TU_OK(patina_refset_new(&rs, patina_extractor_spec(ex)));
    for (i = 0; i < 3; i++) TU_OK(patina_refset_put(rs, i + 1, recs[i], bytes));
    patina_identify_opts_init(&o);
    o.k = 3;
    o.threshold = 4;
    o.accept = PATINA_ACCEPT_INLIERS;
    TU_OK(patina_identify(NULL, rs, qrec, 1, &o, hits, &res));
    assert_true(hits[0].id == 1 && hits[1].id == 2 && hits[2].id == 3);
    assert_true(hits[0].verified && hits[1].verified && hits[2].verified);
    s1 = hits[0].score, s2 = hits[1].score;
    assert_true(s1 >= N - 1 && s2 >= H - 1 && s2 < s1 && hits[2].inliers >= X - 1);
    assert_int_equal(res.decision, PATINA_DECISION_AMBIGUOUS); /* 16 >= 0.5 x 24 */
    /* a margin rank 1 meets: nothing changes */
    o.distinct = s1 - s2;
    TU_OK(patina_identify(NULL, rs, qrec, 1, &o, hits, &res));
    assert_int_equal(res.decision, PATINA_DECISION_AMBIGUOUS);
    /* one more: the runner-up is rank 1's sibling (16 shared rows >= 13), so it counts 0 */
    o.distinct = s1 - s2 + 1;
    TU_OK(patina_identify(NULL, rs, qrec, 1, &o, hits, &res));
    assert_int_equal(res.decision, PATINA_DECISION_AMBIGUOUS);
    assert_true(hits[0].id == 1 && hits[1].id == 2); /* the hits do not change, only the decision */
    /* ... unless siblings need more inliers than they share: unknown */
    o.sibling_inliers = H + 1;
    TU_OK(patina_identify(NULL, rs, qrec, 1, &o, hits, &res));
    assert_int_equal(res.decision, PATINA_DECISION_UNKNOWN);
    /* a margin above rank 1's own score: unknown even with a sibling runner-up */
    o.sibling_inliers = PATINA_SIBLING_INLIERS_DEFAULT;
    o.distinct = s1 + 1;
    TU_OK(patina_identify(NULL, rs, qrec, 1, &o, hits, &res));
    assert_int_equal(res.decision, PATINA_DECISION_UNKNOWN);
    /* the check itself: 1 and 2 share their 16 rows, 1 and 3 nothing; a reference not held */
    {
        size_t in12 = 0, in13 = 9;
        TU_OK(patina_identify_siblings(rs, 1, 2, NULL, &in12));
        TU_OK(patina_identify_siblings(rs, 3, 1, NULL, &in13));
        assert_true(in12 >= H - 1 && in12 <= H && in13 < 4);
        assert_int_equal(patina_identify_siblings(rs, 1, 77, NULL, &in12), PATINA_E_NOTFOUND);
    }
    /* a merge asks its callback for the same pair, and decides as one call does */
    {
        patina_identify_opts_t po;
        patina_identify_hit_t ph[10], mh[3];
        patina_identify_result_t pr, mr;
        const patina_identify_hit_t *phv[1] = {ph};
        const patina_identify_result_t *prv[1] = {&pr};
        sib_cb_t cb = {PATINA_SIBLING_INLIERS_DEFAULT, 0, 0, 0, 0}; /* just enough: siblings */
        patina_identify_opts_init(&po);
        po.threshold = 4;
        po.accept = PATINA_ACCEPT_INLIERS;
        po.k = patina_identify_part_k(&po);
        TU_OK(patina_identify(NULL, rs, qrec, 1, &po, ph, &pr));
        po.k = 3;
        po.distinct = s1 - s2 + 1;
        TU_OK(patina_identify_merge_siblings(phv, prv, 1, 1, &po, sib_cb, &cb, mh, &mr));
        assert_true(cb.calls == 1 && cb.q == 0 && cb.a == 1 && cb.b == 2);
        assert_int_equal(mr.decision, PATINA_DECISION_AMBIGUOUS);
        cb.answer = PATINA_SIBLING_INLIERS_DEFAULT - 1; /* one short: not siblings */
        TU_OK(patina_identify_merge_siblings(phv, prv, 1, 1, &po, sib_cb, &cb, mh, &mr));
        assert_int_equal(mr.decision, PATINA_DECISION_UNKNOWN);
        po.distinct = s1 - s2; /* met: no question */
        cb.calls = 0;
        TU_OK(patina_identify_merge_siblings(phv, prv, 1, 1, &po, sib_cb, &cb, mh, &mr));
        assert_true(cb.calls == 0 && mr.decision == PATINA_DECISION_AMBIGUOUS);
    }
    /* without the sibling the runner-up is id 3, whose content the query also shows but id 1 does not
     * share: its inliers count */
    TU_OK(patina_refset_remove(rs, 2));
    o.distinct = 0;
    TU_OK(patina_identify(NULL, rs, qrec, 1, &o, hits, &res));
    assert_true(hits[0].id == 1 && hits[1].id == 3);
    s2 = hits[1].score;
    assert_int_equal(res.decision, PATINA_DECISION_MATCH); /* 10 < 0.5 x 24 */
    o.distinct = s1 - s2;
    TU_OK(patina_identify(NULL, rs, qrec, 1, &o, hits, &res));
    assert_int_equal(res.decision, PATINA_DECISION_MATCH);
    o.distinct = s1 - s2 + 1;
    o.sibling_inliers = 1;
    TU_OK(patina_identify(NULL, rs, qrec, 1, &o, hits, &res));
    assert_int_equal(res.decision, PATINA_DECISION_UNKNOWN);
    /* the check across sets: id 1 and its sibling in two detached tables, identified at once */
    {
        patina_table_t *t[2] = {NULL, NULL};
        patina_change_t ch;
        patina_identify_hit_t th[3];
        patina_identify_result_t tr;
        for (i = 0; i < 2; i++) {
            TU_OK(patina_table_new(&t[i], NULL, patina_extractor_spec(ex), NULL));
            ch = (patina_change_t){PATINA_CHANGE_PUT, i + 1, i ? "sibling" : "item", recs[i]};
            TU_OK(patina_table_apply(t[i], &ch, 1, 1, NULL));
        }
        patina_identify_opts_init(&o);
        o.k = 2;
        o.threshold = 4;
        o.accept = PATINA_ACCEPT_INLIERS;
        o.distinct = s1 - (H - 1) + 2; /* above the margin rank 1 has over its sibling */
        TU_OK(patina_table_identify_many(t, 2, qrec, 1, &o, th, &tr, NULL));
        assert_true(th[0].id == 1 && th[1].id == 2 && th[0].score - th[1].score < o.distinct);
        assert_int_equal(tr.decision, PATINA_DECISION_AMBIGUOUS);
        o.sibling_inliers = H + 1;
        TU_OK(patina_table_identify_many(t, 2, qrec, 1, &o, th, &tr, NULL));
        assert_int_equal(tr.decision, PATINA_DECISION_UNKNOWN);
        patina_table_free(t[0]);
        patina_table_free(t[1]);
    }
    /* bounds, and the merge of parts' answers cannot check siblings */
    patina_identify_opts_init(&o);
    o.distinct = -1;
    assert_int_equal(patina_identify(NULL, rs, qrec, 1, &o, hits, &res), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "distinct"));
    o.distinct = 3;
    o.sibling_inliers = 0;
    assert_int_equal(patina_identify(NULL, rs, qrec, 1, &o, hits, &res), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "sibling_inliers"));
    {
        const patina_identify_hit_t *ph[1] = {hits};
        const patina_identify_result_t *pr[1] = {&res};
        patina_identify_hit_t mh[3];
        patina_identify_result_t mr;
        patina_identify_opts_init(&o);
        o.threshold = 4;
        o.accept = PATINA_ACCEPT_INLIERS;
        o.distinct = 3;
        res.nhits = 0;
        assert_int_equal(patina_identify_merge(ph, pr, 1, 1, &o, mh, &mr), PATINA_E_INVALID);
        assert_non_null(strstr(patina_last_error(), "sibling"));
    }
    for (i = 0; i < 3; i++) free(recs[i]);
    free(qrec);
    patina_refset_free(rs);
    patina_extractor_free(ex);
}

/* The merge's rules on hand-made parts: the union's best verify_top by
 * (matches, id) keep their inliers, a candidate its part verified but that
 * is not among them is unverified again, ties by id, the decision from the
 * merged rank 1, and parts that could not be exact are refused. */
static void test_merge_rules(void **state)
{
    patina_identify_opts_t o;
    patina_identify_hit_t a[3] = {{4, 20, 30, 20, 1}, {9, 9, 25, 9, 1}, {2, 20, 3, 0, 0}};
    patina_identify_hit_t b[3] = {{7, 2, 28, 2, 1}, {5, 40, 25, 40, 1}, {0, 0, 0, 0, 0}};
    patina_identify_result_t ra = {PATINA_DECISION_MATCH, 3, 50, 13}, rb = {PATINA_DECISION_MATCH, 2, 50, 13};
    const patina_identify_hit_t *ph[2] = {a, b};
    const patina_identify_result_t *pr[2] = {&ra, &rb};
    patina_identify_hit_t h[3];
    patina_identify_result_t r;
    (void)state;
    patina_identify_opts_init(&o);
    o.k = 2;
    o.verify_top = 3;
    /* the calibrated default depends on the parts' table, which the merge does not know: refused, and
     * so is any other negative threshold */
    assert_true(o.threshold == PATINA_THRESHOLD_CALIBRATED);
    assert_int_equal(patina_identify_merge(ph, pr, 2, 1, &o, h, &r), PATINA_E_INVALID);
    assert_int_equal(patina_identify_merge(ph, pr, 2, 1, NULL, h, &r), PATINA_E_INVALID);
    o.threshold = -0.5;
    assert_int_equal(patina_identify_merge(ph, pr, 2, 1, &o, h, &r), PATINA_E_INVALID);
    o.threshold = 13;
    o.accept = PATINA_ACCEPT_INLIERS;
    assert_int_equal(patina_identify_part_k(&o), 3);
    /* by matches: 4 (30), 7 (28), 5 (25), 9 (25), 2 (3); the best 3 are verified: 4, 7, 5 */
    TU_OK(patina_identify_merge(ph, pr, 2, 1, &o, h, &r));
    assert_int_equal(r.nhits, 2);
    assert_int_equal(r.query_features, 50);
    assert_int_equal(h[0].id, 5);
    assert_int_equal(h[0].inliers, 40);
    assert_int_equal(h[1].id, 4);
    assert_int_equal(r.decision, PATINA_DECISION_AMBIGUOUS); /* 40 and 20 inliers, both >= 13 */
    assert_true(r.threshold == 13);
    /* the ambiguity margin: rank 2 holds 20 / 40 of rank 1's inliers; the default 0.5 is reached
     * (>=), a margin above it gives rank 1 the match, 0 is the threshold alone; out of [0, 1]: refused */
    assert_true(o.ambiguity == PATINA_AMBIGUITY_DEFAULT && o.ambiguity == 0.5);
    o.ambiguity = 0.51;
    TU_OK(patina_identify_merge(ph, pr, 2, 1, &o, h, &r));
    assert_int_equal(r.decision, PATINA_DECISION_MATCH);
    assert_int_equal(h[0].id, 5);
    o.ambiguity = 1;
    TU_OK(patina_identify_merge(ph, pr, 2, 1, &o, h, &r));
    assert_int_equal(r.decision, PATINA_DECISION_MATCH);
    o.ambiguity = 0;
    TU_OK(patina_identify_merge(ph, pr, 2, 1, &o, h, &r));
    assert_int_equal(r.decision, PATINA_DECISION_AMBIGUOUS);
    o.ambiguity = 1.5;
    assert_int_equal(patina_identify_merge(ph, pr, 2, 1, &o, h, &r), PATINA_E_INVALID);
    o.ambiguity = -0.1;
    assert_int_equal(patina_identify_merge(ph, pr, 2, 1, &o, h, &r), PATINA_E_INVALID);
    o.ambiguity = PATINA_AMBIGUITY_DEFAULT;
    /* verify_top 1: only id 4 (30 matches) stays verified; 5 and 9 fall back to matches */
    o.verify_top = 1;
    o.k = 3;
    TU_OK(patina_identify_merge(ph, pr, 2, 1, &o, h, &r));
    assert_int_equal(h[0].id, 4);
    assert_true(h[0].verified && h[0].score == 20);
    assert_int_equal(h[1].id, 7);
    assert_true(!h[1].verified && h[1].inliers == 0 && h[1].score == 28);
    assert_int_equal(h[2].id, 5); /* 25 matches, tie with 9: the smaller id */
    assert_true(!h[2].verified);
    /* a candidate of the best verify_top its part left unverified: the parts were asked wrongly */
    o.verify_top = 3;
    o.k = 2;
    a[0].verified = 0;
    assert_int_equal(patina_identify_merge(ph, pr, 2, 1, &o, h, &r), PATINA_E_INVALID);
    a[0].verified = 1;
    /* ranks 1 and 2 verified and both over the threshold: ambiguous, as one call decides */
    o.verify_top = 3;
    o.k = 2;
    o.threshold = 20;
    o.accept = PATINA_ACCEPT_INLIERS;
    TU_OK(patina_identify_merge(ph, pr, 2, 1, &o, h, &r));
    assert_true(h[0].id == 5 && h[1].id == 4 && h[1].score == 20);
    assert_int_equal(r.decision, PATINA_DECISION_AMBIGUOUS);
    o.threshold = 21;
    o.accept = PATINA_ACCEPT_INLIERS;
    TU_OK(patina_identify_merge(ph, pr, 2, 1, &o, h, &r));
    assert_int_equal(r.decision, PATINA_DECISION_MATCH);
    o.k = 1; /* rank 2 counts whatever k */
    o.threshold = 20;
    o.accept = PATINA_ACCEPT_INLIERS;
    TU_OK(patina_identify_merge(ph, pr, 2, 1, &o, h, &r));
    assert_int_equal(r.decision, PATINA_DECISION_AMBIGUOUS);
    o.k = 2;
    o.threshold = 13;
    o.accept = PATINA_ACCEPT_INLIERS;
    /* no part: no candidate, unknown */
    TU_OK(patina_identify_merge(NULL, NULL, 0, 1, &o, h, &r));
    assert_int_equal(r.nhits, 0);
    assert_int_equal(r.decision, PATINA_DECISION_UNKNOWN);
    assert_int_equal(patina_identify_merge(ph, pr, 2, 1, &o, NULL, &r), PATINA_E_INVALID);
}

/* An f16 copy of u8 record rec (m rows): the same rows, as binary16 of
 * u8 / 512, at scale 1. malloc'd. */
static unsigned char *to_f16(const unsigned char *rec)
{
    size_t m = rs_m(rec), n = rs_count(rec), i, k;
    size_t bytes = rs_record_bytes(m, RS_QUANT_F16);
    unsigned char *f = calloc(1, bytes);
    memcpy(f, rec, RS_HEADER);
    rs_put_u32(f + 12, RS_QUANT_F16);
    rs_put_f32(f + 16, 1.0f);
    for (i = 0; i < n; i++)
        for (k = 0; k < 128; k++) {
            uint16_t h = rs_f32_to_f16((float)rs_row(rec, i)[k] / 512.0f);
            f[RS_HEADER + (i * 128 + k) * 2] = (unsigned char)h;
            f[RS_HEADER + (i * 128 + k) * 2 + 1] = (unsigned char)(h >> 8);
        }
    return f;
}

static int same_result(const patina_identify_result_t *a, const patina_identify_result_t *b)
{
    return a->decision == b->decision && a->nhits == b->nhits && a->query_features == b->query_features &&
           a->threshold == b->threshold;
}

/* Many references: the answer does not depend on how the references are
 * split into tasks (1 and 3 workers, a pool of all CPUs), the search
 * distance `rootsift_ratio` is identify's one-to-one score, and an f16
 * table (matched by the float definition) gives the u8 table's answer. */
static void test_partition_f16(void **state)
{
    enum { NREF = 500, M = 40, NQ = 4, NF = 30 };
    static const size_t planted[NQ] = {17, 250, 499, 0};
    patina_extractor_t *ex = NULL, *ex16 = NULL;
    tu_rng_t r;
    uint8_t *rows = malloc((size_t)NREF * M * 128), qrows[NF * 128];
    unsigned char *recs[NREF], *recs16[NREF], *qrec;
    char *dir, *dir16;
    patina_collection_t *c, *c16;
    patina_refset_t *rs = NULL, *rs16 = NULL;
    patina_identify_opts_t o;
    patina_identify_hit_t h0[NQ * 5], h1[NQ * 5], h3[NQ * 5], h16[NQ * 5];
    patina_identify_result_t r0[NQ], r1[NQ], r3[NQ], r16[NQ];
    size_t i, q, qbytes;
    int threads[2] = {1, 3}, t;
    (void)state;
    TU_OK(patina_extractor_new(&ex, "rootsift:m=40,n=30"));
    TU_OK(patina_extractor_new(&ex16, "rootsift:m=40,n=30,quant=f16"));
    tu_rng_seed(&r, 16);
    for (i = 0; i < (size_t)NREF * M; i++) random_row(rows + i * 128, &r);
    for (i = 0; i < NREF; i++) {
        recs[i] = make_record(M, M - i % 7, rows + i * M * 128, NULL, 640, 480);
        recs16[i] = to_f16(recs[i]);
    }
    c = make_collection(&dir, patina_extractor_spec(ex), recs, NREF, patina_extractor_bytes(ex));
    c16 = make_collection(&dir16, patina_extractor_spec(ex16), recs16, NREF, patina_extractor_bytes(ex16));
    TU_OK(patina_refset_load(&rs, c, NULL));
    TU_OK(patina_refset_load(&rs16, c16, NULL));
    qbytes = patina_identify_query_bytes(rs);
    qrec = malloc(NQ * qbytes);
    for (q = 0; q < NQ; q++) { /* query q: 8 + 2q perturbed features of its planted reference */
        unsigned char *one;
        for (i = 0; i < NF; i++) {
            if (i < 8 + 2 * q) perturb(qrows + i * 128, rows + (planted[q] * M + i * 3 % (M - 6)) * 128, 3, &r);
            else random_row(qrows + i * 128, &r);
        }
        one = make_record(NF, NF, qrows, NULL, 640, 480);
        memcpy(qrec + q * qbytes, one, qbytes);
        free(one);
    }
    patina_identify_opts_init(&o);
    o.verify = 0;
    o.threshold = 5;
    o.accept = PATINA_ACCEPT_INLIERS;
    TU_OK(patina_identify(NULL, rs, qrec, NQ, &o, h0, r0));
    for (t = 0; t < 2; t++) {
        patina_context_t *ctx = NULL;
        patina_context_opts_t co;
        patina_context_opts_init(&co);
        co.threads = threads[t];
        TU_OK(patina_context_new(&ctx, &co));
        TU_OK(patina_identify(ctx, rs, qrec, NQ, &o, t ? h3 : h1, t ? r3 : r1));
        patina_context_free(ctx);
    }
    assert_memory_equal(h0, h1, sizeof h0);
    assert_memory_equal(h0, h3, sizeof h0);
    for (q = 0; q < NQ; q++) {
        assert_true(same_result(&r0[q], &r1[q]));
        assert_true(same_result(&r0[q], &r3[q]));
    }
    /* u8 / 512 has at most 8 significant bits: exact in binary16, so the
     * f16 table holds the same values and the float path (f16 rows) must
     * give the fast integer path's answer exactly. */
    TU_OK(patina_identify(NULL, rs16, qrec, NQ, &o, h16, r16));
    assert_memory_equal(h0, h16, sizeof h0);
    for (q = 0; q < NQ; q++) assert_true(same_result(&r0[q], &r16[q]));
    for (q = 0; q < NQ; q++) {
        print_message("query %zu: id %llu matches %u (f16: id %llu matches %u)\n", q,
                      (unsigned long long)h0[q * 5].id, h0[q * 5].matches, (unsigned long long)h16[q * 5].id,
                      h16[q * 5].matches);
        assert_int_equal(h0[q * 5].id, planted[q] + 1);
        assert_int_equal(r0[q].decision, PATINA_DECISION_MATCH);
        /* the search distance is identify's one-to-one score before verification */
        for (i = 0; i < 5 && i < r0[q].nhits; i++) {
            const unsigned char *ref = recs[h0[q * 5 + i].id - 1];
            assert_true(idf_ratio_count(qrec + q * qbytes, qbytes, ref, patina_extractor_bytes(ex), 0.8,
                                        PATINA_SCORE_ONE2ONE) == (long)h0[q * 5 + i].matches);
        }
    }
    for (i = 0; i < NREF; i++) {
        free(recs[i]);
        free(recs16[i]);
    }
    free(rows);
    free(qrec);
    patina_refset_free(rs);
    patina_refset_free(rs16);
    patina_collection_close(c);
    patina_collection_close(c16);
    tu_remove_tree(dir);
    tu_remove_tree(dir16);
    free(dir);
    free(dir16);
    patina_extractor_free(ex);
    patina_extractor_free(ex16);
}

/* idf_many_match_sets (one call per device over a range of sets) gives
 * the candidates idf_many_match gives set by set: 4 disjoint sets (one
 * empty, one of a single reference) matched as one range, as two ranges
 * and one by one answer the same; an empty range is nothing; a range past
 * the sets is refused; device gpu without a GPU fails with a message, in
 * the range call as in the single one (the no-GPU build's
 * patina_gpu_identify_many). */
static void test_many_sets(void **state)
{
    enum { M = 24, NF = 20, NQ = 3, NS = 4, K = 4 };
    static const size_t sizes[NS] = {30, 0, 1, 45};
    const size_t bytes = rs_record_bytes(M, RS_QUANT_U8);
    patina_refset_t *sets[NS];
    patina_context_t *ctx = NULL;
    patina_context_opts_t co;
    patina_identify_opts_t o;
    patina_identify_hit_t h[3][NQ * K];
    patina_identify_result_t res[3][NQ];
    uint8_t *rows = malloc((size_t)100 * M * 128), qrows[NF * 128];
    unsigned char *qrec;
    size_t i, j, q, id = 1, qbytes;
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 28);
    for (i = 0; i < (size_t)100 * M; i++) random_row(rows + i * 128, &r);
    for (j = 0; j < NS; j++) {
        TU_OK(patina_refset_new(&sets[j], "rootsift:m=24,n=20"));
        for (i = 0; i < sizes[j]; i++, id++) {
            unsigned char *rec = make_record(M, M - id % 5, rows + (id - 1) * M * 128, NULL, 64, 64);
            TU_OK(patina_refset_put(sets[j], id, rec, bytes));
            free(rec);
        }
    }
    qbytes = patina_identify_query_bytes(sets[0]);
    qrec = malloc(NQ * qbytes);
    for (q = 0; q < NQ; q++) { /* query q: features of reference 5 + 30 q (sets 0, 2 and 3 in turn) */
        unsigned char *one;
        const size_t ref = q == 0 ? 4 : q == 1 ? 30 : 40;
        for (i = 0; i < NF; i++) {
            if (i < 10) perturb(qrows + i * 128, rows + (ref * M + i) * 128, 3, &r);
            else random_row(qrows + i * 128, &r);
        }
        one = make_record(NF, NF, qrows, NULL, 64, 64);
        memcpy(qrec + q * qbytes, one, qbytes);
        free(one);
    }
    patina_context_opts_init(&co);
    co.threads = 2;
    TU_OK(patina_context_new(&ctx, &co));
    patina_identify_opts_init(&o);
    o.k = K;
    o.verify_top = 2;
    o.threshold = 3;
    o.accept = PATINA_ACCEPT_INLIERS;
    o.device = PATINA_DEVICE_CPU;
    for (int way = 0; way < 3; way++) {
        idf_many_t *m = NULL;
        TU_OK(idf_many_begin(&m, sets, NS, qrec, NQ, &o));
        if (way == 0) {
            TU_OK(idf_many_match_sets(m, 0, NS, ctx));
            TU_OK(idf_many_match_sets(m, NS, 0, ctx)); /* an empty range: nothing */
            assert_int_equal(idf_many_match_sets(m, 3, 2, ctx), PATINA_E_INVALID);
            assert_int_equal(idf_many_match_sets(m, NS + 1, 0, ctx), PATINA_E_INVALID);
        } else if (way == 1) {
            TU_OK(idf_many_match_sets(m, 0, 1, ctx));
            TU_OK(idf_many_match_sets(m, 1, NS - 1, ctx));
        } else {
            for (j = 0; j < NS; j++) TU_OK(idf_many_match(m, j, ctx));
        }
        TU_OK(idf_many_finish(m, ctx, h[way], res[way], NULL));
        idf_many_free(m);
    }
    for (q = 0; q < NQ; q++) {
        print_message("many sets: query %zu: %zu hits, rank 1 id %llu matches %u\n", q, res[0][q].nhits,
                      (unsigned long long)h[0][q * K].id, h[0][q * K].matches);
        assert_true(res[0][q].nhits > 0);
        for (int way = 1; way < 3; way++) assert_true(same_result(&res[0][q], &res[way][q]));
    }
    assert_memory_equal(h[0], h[1], sizeof h[0]);
    assert_memory_equal(h[0], h[2], sizeof h[0]);
    if (!patina__context_gpu_usable(ctx)) { /* device gpu on a context without one: an error, the same either way */
        idf_many_t *m = NULL;
        patina_status s1, s2;
        o.device = PATINA_DEVICE_GPU;
        TU_OK(idf_many_begin(&m, sets, NS, qrec, NQ, &o));
        s1 = idf_many_match_sets(m, 0, NS, ctx);
        assert_int_not_equal(s1, PATINA_OK);
        assert_true(patina_last_error()[0] != '\0');
        s2 = idf_many_match(m, 0, ctx);
        assert_int_equal(s1, s2);
        print_message("many sets: device gpu without a GPU: %s\n", patina_last_error());
        idf_many_free(m);
    }
    patina_context_free(ctx);
    for (j = 0; j < NS; j++) patina_refset_free(sets[j]);
    free(rows);
    free(qrec);
}

/* The rootsift_ratio search distance follows the search's ratio
 * (patina_search_opts_t.ratio): each hit's distance is 1 / (1 + the
 * one-to-one score at that ratio), the default is PATINA_RATIO_DEFAULT, and
 * a ratio outside (0, 1] is refused naming the option. */
static void test_search_ratio(void **state)
{
    enum { NREF = 12, M = 24 };
    static const double ratios[] = {PATINA_RATIO_DEFAULT, 0.3, 0.95};
    patina_extractor_t *ex = NULL;
    tu_rng_t r;
    uint8_t rows[NREF * M * 128], qrows[M * 128];
    unsigned char *recs[NREF], *query;
    patina_index_t *idx = NULL;
    uint64_t ids[NREF];
    patina_search_opts_t so;
    patina_hit_t hits[NREF];
    double dist[3][NREF + 1];
    size_t i, cnt, bytes, t;
    (void)state;
    TU_OK(patina_extractor_new(&ex, "rootsift:m=24,n=24"));
    bytes = patina_extractor_bytes(ex);
    tu_rng_seed(&r, 41);
    for (i = 0; i < (size_t)NREF * M; i++) random_row(rows + i * 128, &r);
    TU_OK(patina_index_new(&idx, ex, NULL, NULL, 0));
    for (i = 0; i < NREF; i++) {
        recs[i] = make_record(M, M, rows + i * M * 128, NULL, 640, 480);
        ids[i] = i + 1;
        TU_OK(patina_index_put(idx, &ids[i], recs[i], 1));
    }
    /* half of the query's features near reference 3's (some far enough for the ratio to matter) */
    for (i = 0; i < M; i++) {
        if (i < M / 2) perturb(qrows + i * 128, rows + (3 * M + i) * 128, 4 + 3 * (int)i, &r);
        else random_row(qrows + i * 128, &r);
    }
    query = make_record(M, M, qrows, NULL, 640, 480);
    for (t = 0; t < 3; t++) {
        patina_search_opts_init(&so);
        assert_true(so.ratio == PATINA_RATIO_DEFAULT);
        if (t) so.ratio = ratios[t];
        so.device = PATINA_DEVICE_CPU;
        TU_OK(patina_index_knn(NULL, idx, query, 1, NREF, &so, hits, &cnt));
        assert_int_equal(cnt, NREF);
        for (i = 0; i < cnt; i++) {
            long s = idf_ratio_count(query, bytes, recs[hits[i].id - 1], bytes, ratios[t], PATINA_SCORE_ONE2ONE);
            assert_true(hits[i].distance == 1.0 / (1.0 + (double)s));
            dist[t][hits[i].id] = hits[i].distance;
        }
        print_message("ratio %g: reference 4 at distance %g\n", ratios[t], dist[t][4]);
    }
    /* the ratio changes the answer here: a looser one matches more features (a chance match passes 0.95) */
    assert_true(dist[1][4] >= dist[0][4]);
    assert_true(dist[2][4] < dist[0][4]);
    /* patina_extractor_distance: the default ratio */
    assert_true(patina_extractor_distance(ex, query, recs[3]) == dist[0][4]);
    patina_search_opts_init(&so);
    so.ratio = 0;
    assert_int_equal(patina_index_knn(NULL, idx, query, 1, NREF, &so, hits, &cnt), PATINA_E_INVALID);
    assert_string_equal(patina_last_error(), "search: ratio = 0 is outside (0, 1]");
    so.ratio = 1.5;
    assert_int_equal(patina_index_knn(NULL, idx, query, 1, NREF, &so, hits, &cnt), PATINA_E_INVALID);
    free(query);
    for (i = 0; i < NREF; i++) free(recs[i]);
    patina_index_free(idx);
    patina_extractor_free(ex);
}

/* Bad input: k = 0, huge k, zero-feature query, corrupt query and
 * reference records, GPU device, a collection without rootsift. */
static void test_bad_input(void **state)
{
    patina_extractor_t *ex = NULL;
    tu_rng_t r;
    uint8_t rows[10 * 128];
    unsigned char *recs[2], *q0, *q1;
    char *dir;
    patina_collection_t *c;
    patina_refset_t *rs = NULL;
    patina_identify_opts_t o;
    patina_identify_hit_t hits[2 * 1000];
    patina_identify_result_t res[2];
    size_t i, bytes;
    (void)state;
    TU_OK(patina_extractor_new(&ex, "rootsift:m=10,n=10"));
    bytes = patina_extractor_bytes(ex);
    tu_rng_seed(&r, 9);
    for (i = 0; i < 10; i++) random_row(rows + i * 128, &r);
    recs[0] = make_record(10, 10, rows, NULL, 100, 100);
    recs[1] = make_record(10, 5, rows, NULL, 100, 100);
    c = make_collection(&dir, patina_extractor_spec(ex), recs, 2, bytes);
    TU_OK(patina_refset_load(&rs, c, NULL));
    q0 = make_record(10, 0, NULL, NULL, 100, 100);
    q1 = make_record(10, 10, rows, NULL, 100, 100);
    patina_identify_opts_init(&o);
    o.k = 0;
    assert_int_equal(patina_identify(NULL, rs, q1, 1, &o, hits, res), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "k = 0"));
    o.k = 1000; /* clamped to the 2 references */
    o.verify = 0;
    TU_OK(patina_identify(NULL, rs, q1, 1, &o, hits, res));
    assert_int_equal(res[0].nhits, 2);
    assert_int_equal(hits[0].id, 1);
    assert_int_equal(hits[2].id, 0); /* padding zeroed */
    o.k = 5;
    { /* zero-feature query beside a normal one: empty answer, unknown */
        unsigned char *both = malloc(2 * rs_record_bytes(10, RS_QUANT_U8));
        memcpy(both, q0, rs_record_bytes(10, RS_QUANT_U8));
        memcpy(both + rs_record_bytes(10, RS_QUANT_U8), q1, rs_record_bytes(10, RS_QUANT_U8));
        TU_OK(patina_identify(NULL, rs, both, 2, &o, hits, res));
        assert_int_equal(res[0].nhits, 0);
        assert_int_equal(res[0].decision, PATINA_DECISION_UNKNOWN);
        assert_int_equal(res[0].query_features, 0);
        assert_int_equal(res[1].nhits, 2);
        /* corrupt second query: named */
        rs_put_u32(both + rs_record_bytes(10, RS_QUANT_U8), 11);
        assert_int_equal(patina_identify(NULL, rs, both, 2, &o, hits, res), PATINA_E_CORRUPT);
        assert_non_null(strstr(patina_last_error(), "query 1"));
        free(both);
    }
    o.device = PATINA_DEVICE_GPU;
    assert_int_equal(patina_identify(NULL, rs, q1, 1, &o, hits, res), PATINA_E_INVALID); /* needs a context */
    {
        patina_context_t *cx = NULL;
        TU_OK(patina_context_new(&cx, NULL));
        if (patina_gpu__count() == 0) /* no device here: unavailable, and auto falls back to the CPU */
            assert_int_equal(patina_identify(cx, rs, q1, 1, &o, hits, res), PATINA_E_UNAVAILABLE);
        o.precision = (patina_identify_precision)7;
        assert_int_equal(patina_identify(cx, rs, q1, 1, &o, hits, res), PATINA_E_INVALID);
        o.precision = PATINA_PRECISION_INT8;
        o.device = PATINA_DEVICE_AUTO;
        TU_OK(patina_identify(cx, rs, q1, 1, &o, hits, res));
        assert_int_equal(res[0].nhits, 2);
        patina_context_free(cx);
    }
    o.device = PATINA_DEVICE_CPU;
    o.ratio = 0;
    assert_int_equal(patina_identify(NULL, rs, q1, 1, &o, hits, res), PATINA_E_INVALID);
    assert_string_equal(patina_last_error(), "identify: ratio = 0 is outside (0, 1]"); /* the table's bounds */
    o.ratio = PATINA_RATIO_DEFAULT;
    o.k = PATINA_K_MAX + 1; /* the library's limit, before anything is written */
    assert_int_equal(patina_identify(NULL, rs, q1, 1, &o, hits, res), PATINA_E_LIMIT);
    assert_string_equal(patina_last_error(), "identify: k = 1000001 is over the limit of 1000000");
    o.k = 5;
    o.iterations = PATINA_ITERATIONS_MAX + 1;
    assert_int_equal(patina_identify(NULL, rs, q1, 1, &o, hits, res), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "identify: iterations = 1000001 is outside [1, 1000000]"));
    patina_refset_free(rs);
    /* a corrupt reference record: the load names its id */
    rs_put_u32(recs[1] + 0, 99);
    {
        patina_insert_t it = {.key = "bad", .size = 1, .width = 1, .height = 1, .desc = recs[1]};
        uint64_t id;
        TU_OK(patina_collection_put(c, patina_extractor_spec(ex), bytes, &it, 1, &id));
        assert_int_equal(patina_refset_load(&rs, c, NULL), PATINA_E_CORRUPT);
        assert_null(rs);
        assert_non_null(strstr(patina_last_error(), "reference id 3"));
    }
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    { /* a collection without rootsift */
        patina_extractor_t *cedd = NULL;
        unsigned char d[144] = {0};
        unsigned char *dd = d;
        TU_OK(patina_extractor_new(&cedd, "cedd"));
        c = make_collection(&dir, patina_extractor_spec(cedd), &dd, 1, patina_extractor_bytes(cedd));
        assert_int_equal(patina_refset_load(&rs, c, NULL), PATINA_E_NOTFOUND);
        assert_non_null(strstr(patina_last_error(), "no rootsift table"));
        patina_collection_close(c);
        tu_remove_tree(dir);
        free(dir);
        patina_extractor_free(cedd);
    }
    free(recs[0]);
    free(recs[1]);
    free(q0);
    free(q1);
    patina_extractor_free(ex);
}

/* ------------------------------------------------------------------- RANSAC */

static void apply_sim(double *out, const double *in, double ang, double sc, double tx, double ty)
{
    out[0] = sc * (cos(ang) * in[0] - sin(ang) * in[1]) + tx;
    out[1] = sc * (sin(ang) * in[0] + cos(ang) * in[1]) + ty;
}

/* The a-contrario significance (idf_significance) against the ORSA formula
 * evaluated by hand, and its shape: more inliers of the same
 * correspondences weigh more, the same inliers among more correspondences
 * less, a minimal sample nothing; large counts stay finite. */
static void test_significance(void **state)
{
    const double alpha = 3.14159265358979323846 * 2.56 * 2.56 / (256.0 * 256.0);
    /* n 6, k 4, similarity (s 2): NFA = 4 C(6,4) C(4,2) alpha^2 = 360 alpha^2 */
    const double want = -(log10(360.0) + 2 * log10(alpha));
    (void)state;
    assert_true(fabs(idf_significance(6, 4, PATINA_MODEL_SIMILARITY, 256, 256, 2.56) - want) < 1e-9);
    assert_true(fabs(want - 4.4495) < 1e-3);
    /* affine (s 3): 3 C(6,4) C(4,3) alpha */
    assert_true(fabs(idf_significance(6, 4, PATINA_MODEL_AFFINE, 256, 256, 2.56) + log10(180.0) + log10(alpha)) < 1e-9);
    assert_true(idf_significance(6, 5, PATINA_MODEL_SIMILARITY, 256, 256, 2.56) > want);
    assert_true(idf_significance(15, 4, PATINA_MODEL_SIMILARITY, 256, 256, 2.56) < want);
    assert_true(idf_significance(15, 4, PATINA_MODEL_SIMILARITY, 256, 256, 2.56) > 0);
    assert_true(idf_significance(40, 2, PATINA_MODEL_SIMILARITY, 256, 256, 2.56) == 0); /* k <= s */
    assert_true(idf_significance(4, 4, PATINA_MODEL_HOMOGRAPHY, 256, 256, 2.56) == 0);
    assert_true(idf_significance(400, 3, PATINA_MODEL_SIMILARITY, 256, 256, 2.56) == 0); /* clipped: chance */
    assert_true(idf_significance(4, 6, PATINA_MODEL_SIMILARITY, 256, 256, 2.56) ==
                idf_significance(6, 6, PATINA_MODEL_SIMILARITY, 256, 256, 2.56)); /* n < k read as k */
    assert_true(idf_significance(6, 4, PATINA_MODEL_SIMILARITY, 0, 256, 2.56) == 0);   /* no area */
    assert_true(idf_significance(6, 4, PATINA_MODEL_SIMILARITY, 10, 10, 100) == 0);    /* alpha >= 1 */
    {
        const double big = idf_significance(5000, 2500, PATINA_MODEL_SIMILARITY, 4000, 3000, 40);
        assert_true(isfinite(big) && big > 1000);
    }
}

static void test_ransac(void **state)
{
    enum { N = 60 };
    double qp[2 * N], rp[2 * N];
    unsigned char inl[N];
    idf_model_t m;
    tu_rng_t r;
    size_t i, c;
    int kind;
    (void)state;
    tu_rng_seed(&r, 5);
    for (i = 0; i < N; i++) {
        qp[2 * i] = tu_rng_below(&r, 640);
        qp[2 * i + 1] = tu_rng_below(&r, 480);
        apply_sim(rp + 2 * i, qp + 2 * i, 0.5, 1.7, 30, -12);
    }
    /* a pure similarity: every model finds all inliers, the right map */
    for (kind = 0; kind < 3; kind++) {
        double x, y;
        c = idf_ransac(&m, inl, qp, rp, NULL, NULL, N, (patina_identify_model)kind, 2.0, 1000, 1);
        assert_int_equal(c, N);
        assert_true(idf_model_apply(&m, 100, 200, &x, &y));
        {
            double want[2], in[2] = {100, 200};
            apply_sim(want, in, 0.5, 1.7, 30, -12);
            assert_true(fabs(x - want[0]) < 1e-6 && fabs(y - want[1]) < 1e-6);
        }
    }
    /* a 90 degree rotation (the end-to-end query) */
    {
        double r90[2 * N];
        for (i = 0; i < N; i++) apply_sim(r90 + 2 * i, qp + 2 * i, M_PI / 2, 1.0, 479, 0);
        assert_int_equal(idf_ransac(&m, inl, qp, r90, NULL, NULL, N, PATINA_MODEL_SIMILARITY, 1.0, 1000, 3), N);
        assert_true(fabs(m.h[0]) < 1e-9 && fabs(m.h[3] - 1) < 1e-9);
    }
    /* keypoint shapes: the similarity (rotation 0.5 rad, scale 1.7) turns a
     * keypoint of log scale ls, orientation a into (ls + log 1.7, a + 0.5).
     * Shapes that agree keep every inlier (every model, the homography's
     * Jacobian included); positions that fit but shapes that do not (scale
     * x2, or orientation 50 degrees off) are not inliers. */
    {
        double qsh[2 * N], rsh[2 * N];
        for (i = 0; i < N; i++) {
            qsh[2 * i] = log(1.0 + tu_rng_below(&r, 40));
            qsh[2 * i + 1] = 0.01 * tu_rng_below(&r, 628) - 3.14;
            rsh[2 * i] = qsh[2 * i] + log(1.7) + 0.01 * ((int)tu_rng_below(&r, 41) - 20); /* within x1.23 */
            rsh[2 * i + 1] = qsh[2 * i + 1] + 0.5 + 0.01 * ((int)tu_rng_below(&r, 41) - 20) + (i % 4 ? 0 : 2 * M_PI);
        }
        for (kind = 0; kind < 3; kind++)
            assert_int_equal(idf_ransac(&m, inl, qp, rp, qsh, rsh, N, (patina_identify_model)kind, 2.0, 1000, 1), N);
        for (i = 0; i < N; i += 3) rsh[2 * i] += log(2.0);          /* a third: scale off by x2 */
        for (i = 1; i < N; i += 3) rsh[2 * i + 1] += 50 * M_PI / 180; /* a third: 50 degrees off */
        c = idf_ransac(&m, inl, qp, rp, qsh, rsh, N, PATINA_MODEL_SIMILARITY, 2.0, 1000, 1);
        assert_int_equal(c, N / 3);
        for (i = 2; i < N; i += 3) assert_true(inl[i]);
        /* deterministic with shapes too */
        assert_int_equal(idf_ransac(&m, inl, qp, rp, qsh, rsh, N, PATINA_MODEL_SIMILARITY, 2.0, 1000, 1),
                         idf_ransac(NULL, NULL, qp, rp, qsh, rsh, N, PATINA_MODEL_SIMILARITY, 2.0, 1000, 1));
    }
    /* 50% outliers: the inliers are still found, outliers rejected */
    for (i = 0; i < N; i += 2) {
        rp[2 * i] = tu_rng_below(&r, 1000);
        rp[2 * i + 1] = tu_rng_below(&r, 1000);
    }
    for (kind = 0; kind < 3; kind++) {
        size_t good = 0;
        c = idf_ransac(&m, inl, qp, rp, NULL, NULL, N, (patina_identify_model)kind, 2.0, 5000, 11);
        for (i = 1; i < N; i += 2) good += inl[i];
        print_message("model %d: %zu inliers of %d true\n", kind, c, N / 2);
        assert_int_equal(good, N / 2);
        assert_true(c >= N / 2 && c <= N / 2 + 2);
        /* deterministic */
        assert_int_equal(idf_ransac(NULL, NULL, qp, rp, NULL, NULL, N, (patina_identify_model)kind, 2.0, 5000, 11), c);
    }
    /* a homography with perspective: found by the homography model */
    {
        const double H[9] = {0.9, 0.1, 20, -0.05, 1.1, 5, 2e-4, -1e-4, 1};
        idf_model_t t = {PATINA_MODEL_HOMOGRAPHY, {0}};
        memcpy(t.h, H, sizeof H);
        for (i = 0; i < N; i++) assert_true(idf_model_apply(&t, qp[2 * i], qp[2 * i + 1], &rp[2 * i], &rp[2 * i + 1]));
        assert_int_equal(idf_ransac(&m, inl, qp, rp, NULL, NULL, N, PATINA_MODEL_HOMOGRAPHY, 1.0, 2000, 2), N);
        for (i = 0; i < 9; i++) assert_true(fabs(m.h[i] - H[i]) < 1e-6 * (fabs(H[i]) + 1e-3));
    }
    /* degenerate inputs */
    {
        double lq[2 * 8], lr[2 * 8];
        size_t idx[4] = {0, 1, 2, 3};
        for (i = 0; i < 8; i++) { /* collinear */
            lq[2 * i] = 10.0 * (double)i;
            lq[2 * i + 1] = 5.0 * (double)i;
            lr[2 * i] = 3.0 * (double)i;
            lr[2 * i + 1] = -2.0 * (double)i;
        }
        assert_int_equal(idf_ransac(&m, inl, lq, lr, NULL, NULL, 8, PATINA_MODEL_HOMOGRAPHY, 1.0, 100, 1), 0);
        assert_int_equal(idf_ransac(&m, inl, lq, lr, NULL, NULL, 8, PATINA_MODEL_AFFINE, 1.0, 100, 1), 0);
        assert_false(idf_fit_minimal(&m, PATINA_MODEL_HOMOGRAPHY, lq, lr, idx));
        /* too few points */
        assert_int_equal(idf_ransac(&m, inl, qp, rp, NULL, NULL, 3, PATINA_MODEL_HOMOGRAPHY, 1.0, 100, 1), 0);
        assert_int_equal(idf_ransac(&m, inl, qp, rp, NULL, NULL, 1, PATINA_MODEL_SIMILARITY, 1.0, 100, 1), 0);
        assert_int_equal(idf_ransac(&m, inl, qp, rp, NULL, NULL, 0, PATINA_MODEL_SIMILARITY, 1.0, 100, 1), 0);
        /* coincident points */
        for (i = 0; i < 8; i++) lq[2 * i] = lq[2 * i + 1] = 7;
        assert_int_equal(idf_ransac(&m, inl, lq, lr, NULL, NULL, 8, PATINA_MODEL_SIMILARITY, 1.0, 100, 1), 0);
    }
}

/* ------------------------------------------------------------- real photos */

static patina_status load(patina_image_t *img, const char *path)
{
    return patina_image_load(img, path, NULL);
}

/* Rotate 90 degrees clockwise, crop to the central frac, downscale by
 * `down` (area average of 2x2 when down = 0.5, nearest otherwise). */
static void make_variant(patina_image_t *out, const patina_image_t *in, double frac, int half)
{
    patina_image_t rot, crop;
    int x, y, c, w, h, x0, y0;
    TU_OK(patina_image_init(&rot, in->height, in->width));
    for (y = 0; y < in->height; y++)
        for (x = 0; x < in->width; x++)
            for (c = 0; c < 3; c++)
                rot.data[(size_t)x * rot.stride + (size_t)(in->height - 1 - y) * 3 + (size_t)c] =
                    in->data[(size_t)y * in->stride + (size_t)x * 3 + (size_t)c];
    w = (int)(rot.width * frac);
    h = (int)(rot.height * frac);
    x0 = (rot.width - w) / 2;
    y0 = (rot.height - h) / 3;
    TU_OK(patina_image_init(&crop, w, h));
    for (y = 0; y < h; y++) memcpy(crop.data + (size_t)y * crop.stride, rot.data + (size_t)(y + y0) * rot.stride + (size_t)x0 * 3, (size_t)w * 3);
    patina_image_release(&rot);
    if (!half) {
        *out = crop;
        return;
    }
    TU_OK(patina_image_init(out, w / 2, h / 2));
    for (y = 0; y < h / 2; y++)
        for (x = 0; x < w / 2; x++)
            for (c = 0; c < 3; c++) {
                int s = crop.data[(size_t)(2 * y) * crop.stride + (size_t)(2 * x) * 3 + (size_t)c] +
                        crop.data[(size_t)(2 * y) * crop.stride + (size_t)(2 * x + 1) * 3 + (size_t)c] +
                        crop.data[(size_t)(2 * y + 1) * crop.stride + (size_t)(2 * x) * 3 + (size_t)c] +
                        crop.data[(size_t)(2 * y + 1) * crop.stride + (size_t)(2 * x + 1) * 3 + (size_t)c];
                out->data[(size_t)y * out->stride + (size_t)x * 3 + (size_t)c] = (uint8_t)((s + 2) / 4);
            }
    patina_image_release(&crop);
}

static void write_ppm(const char *path, const patina_image_t *img)
{
    FILE *f = fopen(path, "wb");
    int y;
    assert_non_null(f);
    fprintf(f, "P6\n%d %d\n255\n", img->width, img->height);
    for (y = 0; y < img->height; y++) fwrite(img->data + (size_t)y * img->stride, 3, (size_t)img->width, f);
    fclose(f);
}

static const char *const refs_rel[] = {"mate/Wood.jpg", "mate/Dune.jpg", "mate/RainDrops.jpg", "opencv/baboon.jpg",
                                       "mate/Aqua.jpg"};
static const char *const other_rel = "opencv/fruits.jpg";
#define NREFS (sizeof refs_rel / sizeof refs_rel[0])

static int have_samples(void)
{
    size_t i;
    for (i = 0; i < NREFS; i++)
        if (!sample(refs_rel[i])) return 0;
    return sample(other_rel) != NULL;
}

/* Fast vs plain matcher on real records of sample photos. */
static void test_matchers_real(void **state)
{
    patina_extractor_t *ex = NULL;
    const rootsift_params_t *p;
    unsigned char *rec[3];
    size_t i, j;
    (void)state;
    if (!have_samples()) {
        fprintf(stderr, "test_identify: real-photo matcher parity skipped (no samples; scripts/fetch-samples.sh)\n");
        samples_missing = 1;
        return;
    }
    TU_OK(patina_extractor_new(&ex, "rootsift:maxside=512"));
    p = (const rootsift_params_t *)(const void *)ex->params;
    for (i = 0; i < 3; i++) {
        patina_image_t img;
        size_t budget = i == 0 ? (size_t)p->n : (size_t)p->m;
        rec[i] = malloc(rs_record_bytes(budget, RS_QUANT_U8));
        TU_OK(load(&img, sample(refs_rel[i])));
        TU_OK(rs_extract(p, budget, rec[i], &img));
        patina_image_release(&img);
    }
    /* query 0 (n rows) against references 0 (itself at m) .. 2 */
    for (j = 1; j < 3; j++) check_matchers(rs_row(rec[0], 0), rs_count(rec[0]), rs_row(rec[j], 0), rs_count(rec[j]), 0.8);
    check_matchers(rs_row(rec[1], 0), rs_count(rec[1]), rs_row(rec[2], 0), rs_count(rec[2]), 0.8);
    check_matchers(rs_row(rec[1], 0), rs_count(rec[1]), rs_row(rec[1], 0), rs_count(rec[1]), 0.8);
    for (i = 0; i < 3; i++) free(rec[i]);
    patina_extractor_free(ex);
}

/* Index sample photos, identify a rotated/cropped/downscaled view of one
 * (library and CLI), and a photo that is not indexed. */
static void test_end_to_end(void **state)
{
    char *dir, *out = NULL, *err = NULL;
    const char *coll, *var, *other;
    patina_image_t img, v;
    uint32_t ref_w, ref_h;
    (void)state;
    if (!have_samples()) {
        fprintf(stderr, "test_identify: end-to-end skipped (no samples; scripts/fetch-samples.sh)\n");
        samples_missing = 1;
        return;
    }
    dir = tu_tempdir("identify-e2e");
    coll = tu_path(dir, "coll");
    var = tu_path(dir, "variant.ppm");
    {
        const char *argv[4 + NREFS + 3];
        size_t i, a = 0;
        int rc;
        argv[a++] = PATINA_CLI;
        argv[a++] = "index";
        argv[a++] = coll;
        for (i = 0; i < NREFS; i++) argv[a++] = sample(refs_rel[i]);
        argv[a++] = "-f";
        argv[a++] = "rootsift";
        argv[a++] = "-q";
        argv[a] = NULL;
        rc = tu_exec(&out, &err, 0, 600, argv);
        if (rc != 0) fail_msg("index: %d: %s", rc, err);
        free(out);
        free(err);
    }
    TU_OK(load(&img, sample(refs_rel[0])));
    make_variant(&v, &img, 0.7, 1);
    write_ppm(var, &v);
    ref_w = img.width;
    ref_h = img.height;
    patina_image_release(&img);
    { /* library */
        patina_collection_t *c = NULL;
        patina_refset_t *rs = NULL;
        patina_identify_opts_t o;
        patina_identify_hit_t hits[2 * 5];
        patina_identify_result_t res[2];
        patina_image_t qs[2];
        unsigned char *qrec;
        patina_status st[2];
        TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_READONLY, 0));
        TU_OK(patina_refset_load(&rs, c, NULL));
        assert_int_equal(patina_refset_size(rs), NREFS);
        qs[0] = v;
        TU_OK(load(&qs[1], sample(other_rel)));
        qrec = malloc(2 * patina_identify_query_bytes(rs));
        TU_OK(patina_identify_extract(NULL, rs, qrec, qs, 2, st));
        assert_int_equal(st[0], PATINA_OK);
        patina_identify_opts_init(&o);
        TU_OK(patina_identify(NULL, rs, qrec, 2, &o, hits, res));
        print_message("variant: %zu hits, rank 1 id %llu inliers %u matches %u; rank 2 inliers %u; features %u\n",
                      res[0].nhits, (unsigned long long)hits[0].id, hits[0].inliers, hits[0].matches,
                      res[0].nhits > 1 ? hits[1].inliers : 0, res[0].query_features);
        print_message("other: %zu hits, rank 1 id %llu inliers %u matches %u\n", res[1].nhits,
                      (unsigned long long)hits[5].id, hits[5].inliers, hits[5].matches);
        assert_int_equal(hits[0].id, 1); /* Wood.jpg was indexed first */
        assert_true(hits[0].verified);
        assert_int_equal(res[0].decision, PATINA_DECISION_MATCH);
        assert_int_equal(res[1].decision, PATINA_DECISION_UNKNOWN);
        { /* the verified pairs: as many as the inliers, inside both images */
            size_t h, n = 0, j, cap;
            float *pairs;
            for (h = 0; h < res[0].nhits; h++) {
                if (!hits[h].verified) continue;
                TU_OK(patina_identify_pairs(rs, qrec, hits[h].id, &o, NULL, 0, &n));
                assert_int_equal(n, hits[h].inliers);
            }
            cap = hits[0].inliers;
            pairs = malloc((cap + 1) * 4 * sizeof *pairs);
            TU_OK(patina_identify_pairs(rs, qrec, hits[0].id, &o, pairs, cap + 1, &n));
            assert_int_equal(n, cap);
            for (j = 0; j < n; j++) {
                const float *p = pairs + 4 * j;
                assert_true(p[0] >= 0 && p[0] <= (float)v.width && p[1] >= 0 && p[1] <= (float)v.height);
                assert_true(p[2] >= 0 && p[2] <= (float)ref_w && p[3] >= 0 && p[3] <= (float)ref_h);
            }
            /* a short buffer gets the first pairs and the full count */
            {
                float two[8];
                TU_OK(patina_identify_pairs(rs, qrec, hits[0].id, &o, two, 2, &n));
                assert_int_equal(n, cap);
                assert_memory_equal(two, pairs, sizeof two);
            }
            free(pairs);
            assert_int_equal(patina_identify_pairs(rs, qrec, 999999, &o, NULL, 0, &n), PATINA_E_NOTFOUND);
            assert_int_equal(patina_identify_pairs(rs, NULL, hits[0].id, &o, NULL, 0, &n), PATINA_E_INVALID);
        }
        /* parts: the references split 3 ways by id, each asked for part_k,
         * merged: the one-set answer exactly, for several option settings */
        {
            static const size_t ks[][3] = {{5, 10, 1}, {2, 3, 1}, {5, 2, 1}, {1, 1, 1}, {4, 0, 0}};
            size_t oi, p, q;
            for (oi = 0; oi < sizeof ks / sizeof ks[0]; oi++) {
                patina_refset_t *part[3] = {NULL, NULL, NULL};
                patina_identify_hit_t *ph[3], want[2 * 5], got[2 * 5];
                patina_identify_result_t pr[3][2], wr[2], gr[2];
                const patina_identify_hit_t *cph[3];
                const patina_identify_result_t *cpr[3];
                size_t pk;
                patina_identify_opts_init(&o);
                o.k = ks[oi][0];
                o.verify_top = ks[oi][1];
                o.verify = (int)ks[oi][2];
                pk = patina_identify_part_k(&o);
                assert_int_equal(pk, o.verify && o.verify_top > o.k ? o.verify_top : o.k);
                TU_OK(patina_identify(NULL, rs, qrec, 2, &o, want, wr));
                for (p = 0; p < 3; p++) {
                    patina_refset_spec_t sp;
                    patina_identify_opts_t po = o;
                    patina_refset_spec_init(&sp);
                    sp.shard = (uint32_t)p;
                    sp.shards = 3;
                    TU_OK(patina_refset_load(&part[p], c, &sp));
                    po.k = pk;
                    ph[p] = calloc(2 * pk, sizeof *ph[p]);
                    TU_OK(patina_identify(NULL, part[p], qrec, 2, &po, ph[p], pr[p]));
                    cph[p] = ph[p];
                    cpr[p] = pr[p];
                }
                {
                    patina_identify_opts_t mo = o; /* the merge: the table's threshold as a number */
                    TU_OK(patina_identify_far_threshold_table(patina_refset_table(rs), 0.01, &mo.threshold));
                    TU_OK(patina_identify_merge(cph, cpr, 3, 2, &mo, got, gr));
                }
                for (q = 0; q < 2; q++) {
                    size_t h;
                    assert_true(same_result(&gr[q], &wr[q]));
                    for (h = 0; h < wr[q].nhits; h++) {
                        const patina_identify_hit_t *a = &got[q * o.k + h], *b = &want[q * o.k + h];
                        assert_int_equal(a->id, b->id);
                        assert_true(a->score == b->score);
                        assert_int_equal(a->matches, b->matches);
                        assert_int_equal(a->inliers, b->inliers);
                        assert_int_equal(a->verified, b->verified);
                    }
                }
                /* parts asked with a smaller k than part_k: refused, not a wrong answer */
                {
                    patina_identify_result_t bad = pr[0][0];
                    bad.nhits = pk + 1;
                    cpr[0] = &bad;
                    assert_int_equal(patina_identify_merge(cph, cpr, 1, 1, &o, got, gr), PATINA_E_INVALID);
                }
                for (p = 0; p < 3; p++) {
                    patina_refset_free(part[p]);
                    free(ph[p]);
                }
            }
        }
        free(qrec);
        patina_image_release(&qs[1]);
        patina_refset_free(rs);
        patina_collection_close(c);
    }
    patina_image_release(&v);
    other = sample(other_rel);
    { /* CLI contract */
        const char *argv[] = {PATINA_CLI, "identify", coll, var, other, tu_path(dir, "flat.pgm"), "--format", "csv",
                              "-k", "3", "-q", NULL};
        static const char flatpgm[] = "P5 16 16 255\n";
        unsigned char buf[sizeof flatpgm - 1 + 256];
        char *line, *nl, want[4200];
        int rc, row = 0;
        memcpy(buf, flatpgm, sizeof flatpgm - 1);
        memset(buf + sizeof flatpgm - 1, 100, 256);
        assert_int_equal(tu_write_file(argv[5], buf, sizeof buf), 0);
        rc = tu_exec(&out, &err, 0, 600, argv);
        if (rc != 0) fail_msg("identify: %d: %s", rc, err);
        print_message("%s", out);
        snprintf(want, sizeof want, "\n%s,0,,0,0,unknown\n", argv[5]);
        assert_non_null(strstr(out, want)); /* the zero-feature query's row */
        line = out;
        nl = strchr(line, '\n');
        *nl = 0;
        assert_string_equal(line, "query,rank,key,score,inliers,decision");
        for (line = nl + 1; (nl = strchr(line, '\n')); line = nl + 1, row++) {
            *nl = 0;
            if (row == 0) {
                char real[4096]; /* the key: the reference's absolute real path (outside the root) */
                if (!realpath(sample(refs_rel[0]), real)) fail_msg("realpath %s", sample(refs_rel[0]));
                snprintf(want, sizeof want, "%s,1,%s,", var, real);
                assert_int_equal(strncmp(line, want, strlen(want)), 0);
                assert_non_null(strstr(line, ",match"));
            }
            if (!strncmp(line, other, strlen(other)) && strstr(line, ",1,") == line + strlen(other))
                assert_non_null(strstr(line, ",unknown"));
        }
        free(out);
        free(err);
    }
    { /* usage error (2), unreadable query (1), collection without rootsift (3) */
        const char *a1[] = {PATINA_CLI, "identify", coll, var, "-k", "0", NULL};
        const char *a2[] = {PATINA_CLI, "identify", coll, var, tu_path(dir, "missing.jpg"), "-q", NULL};
        const char *ix[] = {PATINA_CLI, "index", tu_path(dir, "cedd"), sample(other_rel), "-q", NULL};
        const char *a3[] = {PATINA_CLI, "identify", tu_path(dir, "cedd"), var, NULL};
        assert_int_equal(tu_exec(&out, &err, 0, 600, a1), 2);
        free(out);
        free(err);
        assert_int_equal(tu_exec(&out, &err, 0, 600, a2), 1);
        free(out);
        free(err);
        assert_int_equal(tu_exec(&out, &err, 0, 600, ix), 0);
        free(out);
        free(err);
        /* no identification table: a usage error, as search -f of a missing table */
        assert_int_equal(tu_exec(&out, &err, 0, 600, a3), 2);
        assert_non_null(strstr(err, "rootsift"));
        free(out);
        free(err);
    }
    { /* info: what a reference costs and how many fit */
        const char *ai[] = {PATINA_CLI, "info", coll, NULL};
        assert_int_equal(tu_exec(&out, &err, 0, 600, ai), 0);
        assert_non_null(strstr(out, "identification: up to 384 features per reference; 55360 bytes per reference "
                                    "in host memory, 49152 on the GPU"));
        assert_non_null(strstr(out, "references in host memory"));
        free(out);
        free(err);
    }
    { /* --device gpu without a GPU: a clear error (exit 3); an unknown precision: usage (2) */
        const char *ag[] = {PATINA_CLI, "identify", coll, var, "--device", "gpu", "-q", NULL};
        const char *ap[] = {PATINA_CLI, "identify", coll, var, "--precision", "int4", NULL};
        int rc = tu_exec(&out, &err, 0, 600, ag);
        if (patina_gpu__count() == 0) {
            assert_int_not_equal(rc, 0);
            assert_non_null(strstr(err, "gpu"));
        } else {
            assert_int_equal(rc, 0);
        }
        free(out);
        free(err);
        assert_int_equal(tu_exec(&out, &err, 0, 600, ap), 2);
        free(out);
        free(err);
    }
    tu_remove_tree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matchers_random), cmocka_unit_test(test_matchers_ties_extreme),
        cmocka_unit_test(test_ties_and_tiny),
        cmocka_unit_test(test_scoring_decoy),   cmocka_unit_test(test_refset_updates),   cmocka_unit_test(test_partition_f16),   cmocka_unit_test(test_search_ratio),
        cmocka_unit_test(test_bad_input),        cmocka_unit_test(test_merge_rules), cmocka_unit_test(test_guided), cmocka_unit_test(test_decisions), cmocka_unit_test(test_distinct),
        cmocka_unit_test(test_ransac),          cmocka_unit_test(test_matchers_real), cmocka_unit_test(test_significance),
        cmocka_unit_test(test_end_to_end),      cmocka_unit_test(test_many_sets),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (rc == 0 && samples_missing) {
        fprintf(stderr, "test_identify: skipped the real-photo parts (no sample photographs)\n");
        return 77;
    }
    return rc;
}
