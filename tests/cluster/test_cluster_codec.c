/* The cluster's pure parts: the record and message codecs (round trips;
 * every truncation, a wrong magic or version, and random corruption give
 * an error, never a crash: run it under the sanitizers) and weighted
 * rendezvous hashing (copies on distinct members, balance by weight,
 * minimal movement when a member joins or leaves). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cluster/cluster.h"
#include "cluster/conn.h"

static clu_buf_t sample_record(void)
{
    clu_record_t r;
    clu_buf_t b = {0};
    static const uint8_t d1[8] = {1, 2, 3, 4, 5, 6, 7, 8}, d2[3] = {9, 9, 9};
    memset(&r, 0, sizeof r);
    r.id = 42;
    r.key = "photos/a.jpg";
    r.size = 1234;
    memset(r.sha256, 0xab, 32);
    r.mtime = 1700000000;
    r.width = 640;
    r.height = 480;
    r.ntables = 2;
    r.tables[0] = (clu_rtable_t){"cedd:compact=0", d1, sizeof d1};
    r.tables[1] = (clu_rtable_t){"lbp", d2, sizeof d2};
    assert_int_equal(clu_record_encode(&b, &r), PATINA_OK);
    return b;
}

static void record_round_trip(void **state)
{
    clu_buf_t b = sample_record();
    clu_record_t r;
    (void)state;
    assert_int_equal(clu_record_decode(&r, b.p, b.n), PATINA_OK);
    assert_int_equal(r.id, 42);
    assert_string_equal(r.key, "photos/a.jpg");
    assert_int_equal(r.size, 1234);
    assert_int_equal(r.width, 640);
    assert_int_equal(r.ntables, 2);
    assert_string_equal(r.tables[1].spec, "lbp");
    assert_int_equal(r.tables[0].bytes, 8);
    assert_int_equal(((const uint8_t *)r.tables[0].desc)[7], 8);
    assert_non_null(clu_record_table(&r, "lbp"));
    assert_null(clu_record_table(&r, "glcm"));
    clu_buf_release(&b);
}

/* Which decoder each_prefix_refused drives. */
enum { DEC_RECORD, DEC_REQUEST, DEC_REPLY };

/* Every truncation of encoded message b (each prefix in a buffer of its
 * own size, so ASan sees an over-read) is refused by decoder `which`. */
static void each_prefix_refused(const clu_buf_t *b, int which)
{
    size_t n;
    for (n = 0; n < b->n; n++) {
        uint8_t *p = malloc(n ? n : 1);
        clu_record_t rec;
        clu_request_t q;
        clu_reply_t r;
        memcpy(p, b->p, n);
        if (which == DEC_RECORD) assert_int_not_equal(clu_record_decode(&rec, p, n), PATINA_OK);
        else if (which == DEC_REQUEST) assert_int_not_equal(clu_request_decode(&q, p, n), PATINA_OK);
        else assert_int_not_equal(clu_reply_decode(&r, p, n), PATINA_OK);
        free(p);
    }
}

static void record_malformed(void **state)
{
    clu_buf_t b = sample_record();
    clu_record_t r;
    uint8_t *copy = malloc(b.n + 1);
    size_t i;
    uint32_t seed = 1;
    (void)state;
    each_prefix_refused(&b, DEC_RECORD);
    /* a byte more */
    memcpy(copy, b.p, b.n);
    copy[b.n] = 0;
    assert_int_equal(clu_record_decode(&r, copy, b.n + 1), PATINA_E_CORRUPT);
    /* wrong magic, wrong version */
    memcpy(copy, b.p, b.n);
    copy[0] = 'X';
    assert_int_equal(clu_record_decode(&r, copy, b.n), PATINA_E_FORMAT);
    memcpy(copy, b.p, b.n);
    copy[4] = 2;
    assert_int_equal(clu_record_decode(&r, copy, b.n), PATINA_E_FORMAT);
    assert_non_null(strstr(clu_last_error(), "version 2"));
    /* a key length past the end, a string without its NUL */
    memcpy(copy, b.p, b.n);
    copy[16] = 0xff;
    copy[17] = 0xff;
    assert_int_equal(clu_record_decode(&r, copy, b.n), PATINA_E_CORRUPT);
    /* random corruption: any verdict, no crash; a success has a key */
    for (i = 0; i < 20000; i++) {
        size_t k;
        memcpy(copy, b.p, b.n);
        for (k = 0; k < 3; k++) {
            seed = seed * 1103515245u + 12345u;
            copy[(seed >> 8) % b.n] = (uint8_t)(seed >> 24);
        }
        if (clu_record_decode(&r, copy, b.n) == PATINA_OK) assert_non_null(r.key);
    }
    assert_int_not_equal(clu_record_decode(&r, NULL, 0), PATINA_OK);
    free(copy);
    clu_buf_release(&b);
}

static void request_round_trip_and_malformed(void **state)
{
    clu_request_t q, d;
    clu_buf_t b = {0};
    uint32_t parts[3] = {1, 5, 7};
    float qs[2][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}};
    (void)state;
    memset(&q, 0, sizeof q);
    q.kind = CLU_KIND_SEARCH;
    q.spec = "cedd";
    patina_table_query_init(&q.query);
    q.query.k = 7;
    q.parts = parts;
    q.nparts = 3;
    q.nq = 2;
    q.qbytes = sizeof qs[0];
    q.queries = qs;
    assert_int_equal(clu_request_encode(&b, &q), PATINA_OK);
    assert_int_equal(clu_request_decode(&d, b.p, b.n), PATINA_OK);
    assert_int_equal(d.kind, CLU_KIND_SEARCH);
    assert_string_equal(d.spec, "cedd");
    assert_int_equal(d.query.k, 7);
    assert_int_equal(d.nparts, 3);
    assert_int_equal(d.parts[2], 7);
    assert_int_equal(d.nq, 2);
    assert_memory_equal(d.queries, qs, sizeof qs);
    clu_request_release(&d);
    each_prefix_refused(&b, DEC_REQUEST);
    b.p[4] = 9; /* version */
    assert_int_equal(clu_request_decode(&d, b.p, b.n), PATINA_E_FORMAT);
    b.p[4] = 1;
    b.p[6] = 77; /* kind */
    assert_int_equal(clu_request_decode(&d, b.p, b.n), PATINA_E_FORMAT);
    clu_buf_release(&b);

    /* an identify request: every option the shard's call uses travels (guided matching, the
     * ambiguity margin, the acceptance rule and the view pass included: the cluster's answer is one
     * process's) */
    memset(&q, 0, sizeof q);
    q.kind = CLU_KIND_IDENTIFY;
    q.spec = "rootsift";
    patina_identify_opts_init(&q.iopts);
    q.iopts.k = 11;
    q.iopts.ratio = 0.75;
    q.iopts.verify_top = 12;
    q.iopts.threshold = 7;
    q.iopts.accept = PATINA_ACCEPT_INLIERS;
    q.iopts.seed = 99;
    q.iopts.guided = 1;
    q.iopts.guided_ratio = 0.85;
    q.iopts.ambiguity = 0.625;
    q.iopts.view_candidates = 48;
    q.iopts.first_features = 512;
    q.iopts.half_view_features = 64;
    q.parts = parts;
    q.nparts = 3;
    q.nq = 2;
    q.qbytes = sizeof qs[0];
    q.queries = qs;
    assert_int_equal(clu_request_encode(&b, &q), PATINA_OK);
    assert_int_equal(clu_request_decode(&d, b.p, b.n), PATINA_OK);
    assert_int_equal(d.kind, CLU_KIND_IDENTIFY);
    assert_string_equal(d.spec, "rootsift");
    assert_int_equal(d.iopts.k, 11);
    assert_true(d.iopts.ratio == 0.75);
    assert_int_equal(d.iopts.verify_top, 12);
    assert_true(d.iopts.threshold == 7);
    assert_int_equal(d.iopts.seed, 99);
    assert_int_equal(d.iopts.guided, 1);
    assert_true(d.iopts.guided_ratio == 0.85);
    assert_true(d.iopts.ambiguity == 0.625);
    assert_int_equal(d.iopts.accept, PATINA_ACCEPT_INLIERS); /* the rule travels: the shards' scores follow it */
    assert_int_equal(d.iopts.view_candidates, 48);
    assert_int_equal(d.iopts.first_features, 512); /* the shards' first pass follows it */
    assert_int_equal(d.iopts.half_view_features, 64);
    assert_memory_equal(d.queries, qs, sizeof qs);
    clu_request_release(&d);
    each_prefix_refused(&b, DEC_REQUEST);
    clu_buf_release(&b);
}

static void reply_round_trip_and_malformed(void **state)
{
    clu_reply_t r, d;
    clu_buf_t b = {0};
    size_t off[3] = {0, 2, 3}, n;
    patina_hit_t hits[3] = {{1, 0.5}, {9, 0.75}, {4, 2.0}};
    char *keys[3] = {"a", "b", "c"};
    uint32_t parts[2] = {0, 3};
    uint32_t seed = 7;
    (void)state;
    memset(&r, 0, sizeof r);
    r.kind = CLU_KIND_SEARCH;
    r.parts = parts;
    r.nparts = 2;
    r.res.nq = 2;
    r.res.offsets = off;
    r.res.hits = hits;
    r.res.keys = keys;
    r.res.rows = 99;
    r.shard_ms = 12.625;
    assert_int_equal(clu_reply_encode(&b, &r), PATINA_OK);
    assert_int_equal(clu_reply_decode(&d, b.p, b.n), PATINA_OK);
    assert_true(d.shard_ms == 12.625);
    assert_int_equal(d.res.nq, 2);
    assert_int_equal(d.res.offsets[2], 3);
    assert_int_equal(d.res.hits[1].id, 9);
    assert_string_equal(d.res.keys[2], "c");
    assert_int_equal(d.res.rows, 99);
    assert_int_equal(d.nparts, 2);
    clu_reply_release(&d);
    each_prefix_refused(&b, DEC_REPLY);
    { /* a shard time that is not a duration (NaN, negative, absurd) is refused */
        const double bad[3] = {NAN, -1.0, 1e12};
        for (n = 0; n < 3; n++) {
            clu_buf_t e = {0};
            r.shard_ms = bad[n];
            assert_int_equal(clu_reply_encode(&e, &r), PATINA_OK);
            assert_int_equal(clu_reply_decode(&d, e.p, e.n), PATINA_E_CORRUPT);
            clu_buf_release(&e);
        }
        r.shard_ms = 12.625;
    }
    for (n = 0; n < 20000; n++) {
        uint8_t *p = malloc(b.n);
        memcpy(p, b.p, b.n);
        seed = seed * 1103515245u + 12345u;
        p[(seed >> 8) % b.n] = (uint8_t)(seed >> 24);
        if (clu_reply_decode(&d, p, b.n) == PATINA_OK) clu_reply_release(&d);
        free(p);
    }
    clu_buf_release(&b);
}

/* An identify reply: hits, results, keys and the references it covered
 * come back; every truncation is refused. */
static void identify_reply_round_trip(void **state)
{
    clu_reply_t r, d;
    clu_buf_t b = {0};
    patina_identify_hit_t hits[4] = {{.id = 5, .score = 31, .matches = 40, .inliers = 31, .verified = 1},
                                     {.id = 2, .score = 7, .matches = 12, .inliers = 7, .verified = 1},
                                     {.id = 8, .score = 3, .matches = 9, .inliers = 0, .verified = 0}};
    /* a part's own decision may be any of the three (an ambiguous part: two verified items at its
     * threshold, e.g. --threshold 0); the front end decides again on the merge */
    patina_identify_result_t res[2] = {{PATINA_DECISION_AMBIGUOUS, 2, 768, 13}, {PATINA_DECISION_UNKNOWN, 1, 12, 13}};
    char *keys[4] = {"five", "two", "eight", NULL};
    uint32_t parts[3] = {1, 4, 6};
    (void)state;
    memset(&r, 0, sizeof r);
    r.kind = CLU_KIND_IDENTIFY;
    r.parts = parts;
    r.nparts = 3;
    r.nq = 2;
    r.k = 2;
    r.rows = 123456789012ull;
    r.hits = hits;
    r.results = res;
    r.keys = keys;
    assert_int_equal(clu_reply_encode(&b, &r), PATINA_OK);
    assert_int_equal(clu_reply_decode(&d, b.p, b.n), PATINA_OK);
    assert_int_equal(d.nq, 2);
    assert_int_equal(d.k, 2);
    assert_true(d.rows == 123456789012ull);
    assert_int_equal(d.nparts, 3);
    assert_int_equal(d.results[0].decision, PATINA_DECISION_AMBIGUOUS);
    assert_int_equal(d.results[0].nhits, 2);
    assert_int_equal(d.results[1].query_features, 12);
    assert_int_equal(d.hits[1].id, 2);
    assert_int_equal(d.hits[1].inliers, 7);
    assert_int_equal(d.hits[2].id, 8);
    assert_string_equal(d.keys[0], "five");
    assert_string_equal(d.keys[2], "eight");
    clu_reply_release(&d);
    each_prefix_refused(&b, DEC_REPLY);
    clu_buf_release(&b);
}

/* ------------------------------------------------------------ rendezvous */

static void rendezvous_copies_balance(void **state)
{
    clu_member_w_t m[4] = {{"a", 1}, {"b", 1}, {"c", 1}, {"d", 2}};
    size_t count[4] = {0}, out[3], p, i;
    (void)state;
    for (p = 0; p < 5000; p++) {
        size_t n = clu_rendezvous(m, 4, (uint32_t)p, 2, out);
        assert_int_equal(n, 2);
        assert_int_not_equal(out[0], out[1]);
        count[out[0]]++;
    }
    /* active copies in proportion to the weights 1:1:1:2 (1000 and 2000 expected) */
    for (i = 0; i < 3; i++) assert_true(count[i] > 850 && count[i] < 1150);
    assert_true(count[3] > 1800 && count[3] < 2200);
    /* fewer members than copies: all of them */
    assert_int_equal(clu_rendezvous(m, 1, 3, 2, out), 1);
    assert_int_equal(clu_rendezvous(m, 0, 3, 2, out), 0);
}

static void rendezvous_minimal_movement(void **state)
{
    clu_member_w_t m[4] = {{"s0", 1}, {"s1", 1}, {"s2", 1}, {"s3", 1}};
    size_t before[64][2], after[2], p, moved = 0;
    (void)state;
    for (p = 0; p < 64; p++) clu_rendezvous(m, 3, (uint32_t)p, 2, before[p]);
    /* s3 joins: a copy moves only to s3 */
    for (p = 0; p < 64; p++) {
        size_t j, k;
        clu_rendezvous(m, 4, (uint32_t)p, 2, after);
        for (j = 0; j < 2; j++) {
            int kept = 0;
            for (k = 0; k < 2; k++) kept |= after[j] == before[p][k];
            if (!kept) {
                assert_int_equal(after[j], 3);
                moved++;
            }
        }
    }
    assert_true(moved > 20 && moved < 70); /* about 2 * 64 / 4 = 32 */
    /* s1 leaves (of the first three): the partitions it did not hold keep their copies */
    {
        clu_member_w_t l[2] = {{"s0", 1}, {"s2", 1}};
        for (p = 0; p < 64; p++) {
            if (before[p][0] == 1 || before[p][1] == 1) continue;
            clu_rendezvous(l, 2, (uint32_t)p, 2, after);
            assert_true((strcmp(l[after[0]].name, m[before[p][0]].name) == 0 &&
                         strcmp(l[after[1]].name, m[before[p][1]].name) == 0));
        }
    }
}

/* The bounded-load assignment: every partition has min(r, n) copies on
 * distinct members; with equal weights each member holds floor or ceil of
 * P / n copies of each rank and of P r / n in all; the answer does not
 * depend on the members' order; a member joining moves partitions mostly to
 * itself; weights set the shares. */
static void assign_balanced(void **state)
{
    static const char *names[8] = {"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"};
    clu_member_w_t m[8], rev[8];
    size_t out[64 * 3], out2[64 * 3], n, r, p, k, i;
    uint32_t P;
    (void)state;
    for (P = 8; P <= 64; P *= 8)
        for (n = 1; n <= 8; n++)
            for (r = 1; r <= 3; r++) {
                size_t total[8] = {0}, per[3][8] = {{0}}, copies = r < n ? r : n;
                for (i = 0; i < n; i++) {
                    m[i] = (clu_member_w_t){names[i], 1};
                    rev[n - 1 - i] = m[i];
                }
                assert_int_equal(clu_assign(m, n, P, r, out), PATINA_OK);
                assert_int_equal(clu_assign(rev, n, P, r, out2), PATINA_OK);
                for (p = 0; p < P; p++)
                    for (k = 0; k < r; k++) {
                        size_t a = out[p * r + k], b = out2[p * r + k], j;
                        if (k >= copies) {
                            assert_int_equal(a, SIZE_MAX);
                            continue;
                        }
                        assert_true(a < n);
                        assert_string_equal(m[a].name, rev[b].name); /* order of members: no effect */
                        for (j = 0; j < k; j++) assert_int_not_equal(out[p * r + j], a);
                        total[a]++;
                        per[k][a]++;
                    }
                for (i = 0; i < n; i++) {
                    assert_true(total[i] >= (size_t)P * copies / n && total[i] <= ((size_t)P * copies + n - 1) / n);
                    for (k = 0; k < copies; k++)
                        assert_true(per[k][i] >= (size_t)P / n && per[k][i] <= ((size_t)P + n - 1) / n);
                }
            }
    /* s3 joins s0..s2 (64 partitions, 2 copies): the copies that move mostly go to s3 */
    {
        size_t moved = 0, to_new = 0, j, kk;
        for (i = 0; i < 4; i++) m[i] = (clu_member_w_t){names[i], 1};
        assert_int_equal(clu_assign(m, 3, 64, 2, out), PATINA_OK);
        assert_int_equal(clu_assign(m, 4, 64, 2, out2), PATINA_OK);
        for (p = 0; p < 64; p++)
            for (j = 0; j < 2; j++) {
                int kept = 0;
                for (kk = 0; kk < 2; kk++) kept |= out2[p * 2 + j] == out[p * 2 + kk];
                if (!kept) {
                    moved++;
                    to_new += out2[p * 2 + j] == 3;
                }
            }
        print_message("join 3 -> 4: %zu copies moved, %zu of them to the new member (ideal 32)\n", moved, to_new);
        assert_int_equal(to_new, 32);
        assert_true(moved <= 48);
    }
    /* weights 1:1:1:2 over 100 partitions: 20, 20, 20, 40 active copies */
    {
        size_t cnt[4] = {0};
        static const double w[4] = {1, 1, 1, 2};
        for (i = 0; i < 4; i++) m[i] = (clu_member_w_t){names[i], w[i]};
        {
            size_t *o = malloc(100 * sizeof *o);
            assert_int_equal(clu_assign(m, 4, 100, 1, o), PATINA_OK);
            for (p = 0; p < 100; p++) cnt[o[p]]++;
            free(o);
        }
        assert_int_equal(cnt[0], 20);
        assert_int_equal(cnt[3], 40);
    }
}

/* The keys of a merged identification come from the part that listed each hit. */
static void identify_keys_by_id(void **state)
{
    /* 2 parts, 2 queries, part k 2; the merged answer (k 3) holds ids from both */
    patina_identify_hit_t h0[4] = {{.id = 4}, {.id = 9}, {.id = 1}, {.id = 0}};
    patina_identify_hit_t h1[4] = {{.id = 7}, {.id = 0}, {.id = 3}, {.id = 5}};
    patina_identify_result_t r0[2] = {{.nhits = 2}, {.nhits = 1}}, r1[2] = {{.nhits = 1}, {.nhits = 2}};
    char *k0[4] = {"four", "nine", "one", NULL}, *k1[4] = {"seven", NULL, "three", "five"};
    const patina_identify_hit_t *ph[2] = {h0, h1};
    const patina_identify_result_t *pr[2] = {r0, r1};
    char *const *pk[2] = {k0, k1};
    patina_identify_hit_t hits[6] = {{.id = 7}, {.id = 4}, {.id = 9}, {.id = 3}, {.id = 5}, {.id = 1}};
    patina_identify_result_t res[2] = {{.nhits = 3}, {.nhits = 2}};
    char *keys[6];
    size_t i;
    (void)state;
    assert_int_equal(clu_identify_keys(ph, pr, pk, 2, 2, 2, hits, res, 3, keys), PATINA_OK);
    assert_string_equal(keys[0], "seven");
    assert_string_equal(keys[1], "four");
    assert_string_equal(keys[2], "nine");
    assert_string_equal(keys[3], "three");
    assert_string_equal(keys[4], "five");
    assert_null(keys[5]); /* past nhits */
    for (i = 0; i < 6; i++) free(keys[i]);
    /* a part without keys: its hits have none */
    pk[1] = NULL;
    assert_int_equal(clu_identify_keys(ph, pr, pk, 2, 2, 2, hits, res, 3, keys), PATINA_OK);
    assert_null(keys[0]);
    assert_string_equal(keys[1], "four");
    for (i = 0; i < 6; i++) free(keys[i]);
}

/* Work items and results of bulk indexing: round trips; every truncation,
 * a byte more, another magic, version or kind, bad flags, and paths that
 * leave the root are rejected. */
static void work_messages(void **state)
{
    static const uint8_t bytes[5] = {0xff, 0xd8, 0xff, 0xe0, 7};
    clu_work_item_t it = {.job = "0123abcd", .index = 77, .key = "good/a.jpg", .path = "good/a.jpg",
                          .mtime = 1700000001, .family = "cedd", .strict = 1, .apply_orientation = 0};
    clu_work_item_t got;
    clu_work_result_t r = {.job = "0123abcd", .index = 77, .status = PATINA_E_CORRUPT, .message = "decode: bad",
                           .warning = "", .id = 0, .delivered = 2, .worker = "w1"}, rgot;
    clu_buf_t b = {0};
    size_t n;
    (void)state;
    assert_int_equal(clu_work_item_encode(&b, &it), PATINA_OK);
    assert_int_equal(clu_work_item_decode(&got, b.p, b.n), PATINA_OK);
    assert_string_equal(got.job, "0123abcd");
    assert_int_equal(got.index, 77);
    assert_string_equal(got.key, "good/a.jpg");
    assert_string_equal(got.path, "good/a.jpg");
    assert_int_equal(got.has_data, 0);
    assert_int_equal(got.mtime, 1700000001);
    assert_string_equal(got.family, "cedd");
    assert_int_equal(got.strict, 1);
    for (n = 0; n < b.n; n++) assert_int_not_equal(clu_work_item_decode(&got, b.p, n), PATINA_OK);
    {
        uint8_t *more = malloc(b.n + 1);
        memcpy(more, b.p, b.n);
        more[b.n] = 0;
        assert_int_equal(clu_work_item_decode(&got, more, b.n + 1), PATINA_E_CORRUPT);
        more[1] = 'X'; /* magic */
        assert_int_equal(clu_work_item_decode(&got, more, b.n), PATINA_E_FORMAT);
        memcpy(more, b.p, b.n);
        more[4] = 9; /* version */
        assert_int_equal(clu_work_item_decode(&got, more, b.n), PATINA_E_FORMAT);
        memcpy(more, b.p, b.n);
        more[6] = CLU_WORK_RESULT; /* kind */
        assert_int_equal(clu_work_item_decode(&got, more, b.n), PATINA_E_FORMAT);
        memcpy(more, b.p, b.n);
        more[b.n - 1] = 2; /* orientation flag */
        assert_int_equal(clu_work_item_decode(&got, more, b.n), PATINA_E_CORRUPT);
        free(more);
    }
    clu_buf_release(&b);
    /* paths that leave the root, or none without data */
    {
        static const char *const badp[] = {"/etc/passwd", "../x.jpg", "a/../../x.jpg", "a/..", "..", ""};
        size_t i;
        for (i = 0; i < sizeof badp / sizeof badp[0]; i++) {
            clu_buf_t bb = {0};
            it.path = badp[i];
            assert_int_equal(clu_work_item_encode(&bb, &it), PATINA_OK);
            assert_int_equal(clu_work_item_decode(&got, bb.p, bb.n), PATINA_E_CORRUPT);
            clu_buf_release(&bb);
        }
        assert_true(clu_work_path_ok("a/..b/c..d/x.jpg"));
        assert_true(clu_work_path_ok("./a.jpg"));
    }
    /* bytes instead of a path */
    it.path = "";
    it.has_data = 1;
    it.data = bytes;
    it.size = sizeof bytes;
    assert_int_equal(clu_work_item_encode(&b, &it), PATINA_OK);
    assert_int_equal(clu_work_item_decode(&got, b.p, b.n), PATINA_OK);
    assert_int_equal(got.has_data, 1);
    assert_int_equal(got.size, sizeof bytes);
    assert_memory_equal(got.data, bytes, sizeof bytes);
    clu_buf_release(&b);
    /* a job id that is not a name */
    it.job = "a.b";
    assert_int_equal(clu_work_item_encode(&b, &it), PATINA_OK);
    assert_int_equal(clu_work_item_decode(&got, b.p, b.n), PATINA_E_CORRUPT);
    clu_buf_release(&b);
    /* results */
    assert_int_equal(clu_work_result_encode(&b, &r), PATINA_OK);
    assert_int_equal(clu_work_result_decode(&rgot, b.p, b.n), PATINA_OK);
    assert_string_equal(rgot.job, "0123abcd");
    assert_int_equal(rgot.index, 77);
    assert_int_equal(rgot.status, PATINA_E_CORRUPT);
    assert_string_equal(rgot.message, "decode: bad");
    assert_int_equal(rgot.delivered, 2);
    assert_string_equal(rgot.worker, "w1");
    for (n = 0; n < b.n; n++) assert_int_not_equal(clu_work_result_decode(&rgot, b.p, n), PATINA_OK);
    assert_int_not_equal(clu_work_item_decode(&got, b.p, b.n), PATINA_OK); /* a result is not an item */
    clu_buf_release(&b);
}

/* Bounded retries (clu_retry): what is not transient fails at once; what is
 * (JetStream not answering yet) is retried with growing delays until the
 * wait is spent, and the message then says for how long. */
static void retry_bounded(void **state)
{
    clu_retry_t r;
    int n = 0;
    (void)state;
    clu_retry_init(&r, 1000);
    assert_int_equal(clu_retry(&r, PATINA_E_NOTFOUND), 0);
    assert_int_equal(clu_retry(&r, PATINA_E_INVALID), 0);
    clu_retry_init(&r, 1000);
    clu_fail(PATINA_E_UNAVAILABLE, "cluster: bucket b: Timeout");
    while (clu_retry(&r, PATINA_E_UNAVAILABLE)) n++;
    /* 100 + 200 + 400 ms, then the 300 ms left: at most 4 sleeps in 1 s (fewer when a sleep overran) */
    assert_true(n >= 1 && n <= 4);
    assert_non_null(strstr(clu_last_error(), "cluster: bucket b: Timeout (tried "));
    assert_non_null(strstr(clu_last_error(), " times in 1 s)"));
    clu_retry_init(&r, 0);
    clu_fail(PATINA_E_STORE, "x");
    assert_int_equal(clu_retry(&r, PATINA_E_STORE), 0); /* no wait: the first failure stands */
    assert_string_equal(clu_last_error(), "x");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(record_round_trip),
        cmocka_unit_test(record_malformed),
        cmocka_unit_test(request_round_trip_and_malformed),
        cmocka_unit_test(reply_round_trip_and_malformed),
        cmocka_unit_test(rendezvous_copies_balance),
        cmocka_unit_test(rendezvous_minimal_movement),
        cmocka_unit_test(assign_balanced),
        cmocka_unit_test(identify_reply_round_trip),
        cmocka_unit_test(identify_keys_by_id),
        cmocka_unit_test(work_messages),
        cmocka_unit_test(retry_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
