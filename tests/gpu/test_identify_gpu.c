/* Identification on the GPU (patina_identify, device GPU: the fused
 * tensor-core kernel of src/gpu/identify.cu) against the CPU (device CPU),
 * which tests/test_identify.c holds to the float definition bit for bit.
 * The GPU's arithmetic is exact (integer dots), so the answers must be
 * IDENTICAL, not close: the same candidates with the same matches in the same
 * order, the same inliers and decisions.
 *   - random records: reference counts 0, 1, 2, below and above the 8-row
 *     tile and the 128-row chunk, m = 1 .. 600 (600: the 64-bit key
 *     instances), queries of 1 .. 1100 rows (one and several passes of the
 *     block's rows), exact ties (duplicated rows), every scoring rule, both
 *     precisions (int8, fp16), ratios 0.8 and 1, with and without RANSAC;
 *   - real records: sample photographs as references, distorted copies and
 *     other photographs as queries, and their half-size queries;
 *   - the cache: an arena of a few slots (the rest streamed from pinned host
 *     memory through the staging chunks), additions, removals, updates, an id
 *     inserted below the largest, compaction, between queries; a restart
 *     (the set reloaded from its collection) answers the same;
 *   - threads identifying on one context while another changes the set;
 *   - reference views (views = 2: three rows per item, folded by item on
 *     the host from the GPU's rows): items whose rows tie, whose rows are
 *     another item's, with small k and verify_top;
 *   - verification's 2-NN on the GPU (patina_gpu_identify_nn, which the
 *     GPU path's RANSAC takes its matches from; the tests above hold its
 *     inliers to the CPU's) against idf_match_fast directly: best, s1, s2,
 *     qbest and qs identical for every row, on random rows with ties
 *     (repeated rows in a record, a query row twice), records of 0, 1, 2,
 *     some and m rows, queries of 0, 1, some and n rows, more pairs than
 *     one round, several blocks of query rows, m past 48 KiB of shared
 *     memory; m past the kernel's shared memory is PATINA_E_LIMIT.
 * Skipped (77) without a GPU. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/rootsift_match.h"
#include "core/context.h"
#include "features/rootsift.h"
#include "gpu/gpu.h"
#include "identify/identify.h"
#include "patina/patina.h"
#include "testutil.h"
#include "idfutil.h"

static patina_context_t *CTX;
static int QUICK;

/* GPU and CPU answers of nq queries, identical. */
static void compare(patina_refset_t *rs, const unsigned char *q, size_t nq, const patina_identify_opts_t *base,
                    const char *what)
{
    patina_identify_opts_t o = *base;
    patina_identify_hit_t *hc = calloc(nq * o.k, sizeof *hc), *hg = calloc(nq * o.k, sizeof *hg);
    patina_identify_result_t *rc = calloc(nq, sizeof *rc), *rg = calloc(nq, sizeof *rg);
    size_t i, j;
    o.device = PATINA_DEVICE_CPU;
    TU_OK(patina_identify(CTX, rs, q, nq, &o, hc, rc));
    o.device = PATINA_DEVICE_GPU;
    TU_OK(patina_identify(CTX, rs, q, nq, &o, hg, rg));
    for (i = 0; i < nq; i++) {
        if (rc[i].nhits != rg[i].nhits || rc[i].decision != rg[i].decision)
            fail_msg("%s: query %zu: CPU %zu hits (%d), GPU %zu hits (%d)", what, i, rc[i].nhits,
                     (int)rc[i].decision, rg[i].nhits, (int)rg[i].decision);
        for (j = 0; j < rc[i].nhits; j++) {
            const patina_identify_hit_t *a = &hc[i * o.k + j], *b = &hg[i * o.k + j];
            if (a->id != b->id || a->matches != b->matches || a->inliers != b->inliers || a->verified != b->verified)
                fail_msg("%s: query %zu rank %zu: CPU id %llu matches %u inliers %u, GPU id %llu matches %u "
                         "inliers %u",
                         what, i, j + 1, (unsigned long long)a->id, a->matches, a->inliers,
                         (unsigned long long)b->id, b->matches, b->inliers);
        }
    }
    free(hc);
    free(hg);
    free(rc);
    free(rg);
}

/* Hits and results of two answers, identical. */
static void same_answers(const patina_identify_hit_t *ha, const patina_identify_result_t *ra,
                         const patina_identify_hit_t *hb, const patina_identify_result_t *rb, size_t nq, size_t k,
                         const char *what, const char *a, const char *b)
{
    for (size_t i = 0; i < nq; i++) {
        if (ra[i].nhits != rb[i].nhits || ra[i].decision != rb[i].decision)
            fail_msg("%s: query %zu: %s %zu hits (%d), %s %zu hits (%d)", what, i, a, ra[i].nhits,
                     (int)ra[i].decision, b, rb[i].nhits, (int)rb[i].decision);
        for (size_t j = 0; j < ra[i].nhits; j++) {
            const patina_identify_hit_t *x = &ha[i * k + j], *y = &hb[i * k + j];
            if (x->id != y->id || x->matches != y->matches || x->inliers != y->inliers || x->verified != y->verified ||
                x->score != y->score)
                fail_msg("%s: query %zu rank %zu: %s id %llu matches %u inliers %u score %g, %s id %llu matches %u "
                         "inliers %u score %g",
                         what, i, j + 1, a, (unsigned long long)x->id, x->matches, x->inliers, x->score, b,
                         (unsigned long long)y->id, y->matches, y->inliers, y->score);
        }
    }
}

/* patina_identify_half (the queries and their half-size queries hq in one
 * call: on the GPU each pair shares the first pass, the fused kernel's
 * companion lists) on the GPU and on the CPU, and the two calls it stands
 * for (patina_identify with o, then with patina_identify_half_opts(o, F),
 * then patina_identify_fuse_half) on the CPU: identical answers and the
 * same half-size answers taken. Returns how many were taken. */
static size_t compare_half(patina_refset_t *rs, const unsigned char *q, const unsigned char *hq, size_t nq,
                           const patina_identify_opts_t *base, size_t F, const char *what)
{
    patina_identify_opts_t o = *base, ho;
    const size_t k = o.k;
    patina_identify_hit_t *hg = calloc(nq * k, sizeof *hg), *hc = calloc(nq * k, sizeof *hc),
                          *hs = calloc(nq * k, sizeof *hs), *hh = calloc(nq * k, sizeof *hh);
    patina_identify_result_t *rg = calloc(nq, sizeof *rg), *rc = calloc(nq, sizeof *rc), *rsep = calloc(nq, sizeof *rsep),
                             *rh = calloc(nq, sizeof *rh);
    unsigned char *tg = calloc(nq, 1), *tc = calloc(nq, 1), *ts = calloc(nq, 1);
    size_t taken = 0;
    o.device = PATINA_DEVICE_GPU;
    TU_OK(patina_identify_half(CTX, rs, q, hq, nq, F, 0, &o, hg, rg, tg));
    o.device = PATINA_DEVICE_CPU;
    TU_OK(patina_identify_half(CTX, rs, q, hq, nq, F, 0, &o, hc, rc, tc));
    same_answers(hc, rc, hg, rg, nq, k, what, "CPU", "GPU");
    /* the two calls, the threshold resolved as patina_identify_half resolves it */
    if (o.threshold < 0) TU_OK(patina_identify_far_threshold_half(patina_refset_table(rs), &o, PATINA_FAR_DEFAULT,
                                                                 &o.threshold));
    TU_OK(patina_identify_half_opts(&o, F, &ho));
    TU_OK(patina_identify(CTX, rs, q, nq, &o, hs, rsep));
    TU_OK(patina_identify(CTX, rs, hq, nq, &ho, hh, rh));
    TU_OK(patina_identify_fuse_half(nq, k, 0, &o, hs, rsep, hh, rh, ts));
    same_answers(hs, rsep, hg, rg, nq, k, what, "two calls (CPU)", "one call (GPU)");
    for (size_t i = 0; i < nq; i++) {
        if (tg[i] != ts[i] || tc[i] != ts[i])
            fail_msg("%s: query %zu: taken GPU %d CPU %d two calls %d", what, i, tg[i], tc[i], ts[i]);
        taken += ts[i];
    }
    free(hg), free(hc), free(hs), free(hh), free(rg), free(rc), free(rsep), free(rh), free(tg), free(tc), free(ts);
    return taken;
}

/* Frees what make_random and make_collection made (rs may be NULL). */
static void release_all(patina_refset_t *rs, patina_collection_t *c, char *dir, unsigned char **recs, size_t nr,
                        unsigned char *q, patina_extractor_t *ex)
{
    patina_refset_free(rs);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    for (size_t i = 0; i < nr; i++) free(recs[i]);
    free(recs);
    free(q);
    patina_extractor_free(ex);
}

/* nr references of m rows (counts mixed, ties), nq queries of n rows, half
 * built from the references' rows. *recs (nr), *q (nq records). */
static void make_random(tu_rng_t *r, size_t m, size_t n, size_t nr, size_t nq, unsigned char ***recs_out,
                        unsigned char **q_out)
{
    unsigned char **recs = calloc(nr, sizeof *recs);
    const size_t qb = rs_record_bytes(n, RS_QUANT_U8);
    unsigned char *q = calloc(nq, qb);
    uint8_t *rows = malloc(nr * m * 128 + 128), *qr = malloc(n * 128 + 128);
    size_t *cnt = malloc(nr * sizeof *cnt);
    size_t i, j;
    for (i = 0; i < nr; i++) {
        switch (i % 9) {
        case 0: cnt[i] = 0; break;
        case 1: cnt[i] = m < 1 ? m : 1; break;
        case 2: cnt[i] = m < 2 ? m : 2; break;
        case 3: cnt[i] = m < 7 ? m : 7; break;
        default: cnt[i] = m > 3 ? m - tu_rng_below(r, (uint32_t)(m / 3 + 1)) : m;
        }
        for (j = 0; j < cnt[i]; j++) {
            uint8_t *row = rows + (i * m + j) * 128;
            if (j > 0 && tu_rng_below(r, 10) == 0) memcpy(row, row - 128, 128); /* a tie */
            else random_row(row, r);
        }
        if (i > 10 && i % 17 == 0) /* a duplicate reference: ties between references */
            memcpy(rows + i * m * 128, rows + (i - 5) * m * 128, m * 128), cnt[i] = cnt[i - 5];
        recs[i] = make_record(m, cnt[i], rows + i * m * 128, NULL, 100, 100);
    }
    for (i = 0; i < nq; i++) {
        const size_t qn = i == 0 ? 0 : i == 1 ? 1 : n - tu_rng_below(r, (uint32_t)(n / 4 + 1));
        const size_t src = tu_rng_below(r, (uint32_t)nr);
        unsigned char *rec;
        for (j = 0; j < qn; j++) {
            if (cnt[src] && j % 2 == 0)
                perturb(qr + j * 128, rows + (src * m + tu_rng_below(r, (uint32_t)cnt[src])) * 128, 3, r);
            else
                random_row(qr + j * 128, r);
        }
        if (qn > 3) memcpy(qr + 3 * 128, qr, 128); /* duplicated query rows: mutual ties */
        rec = make_record(n, qn, qr, NULL, 100, 100);
        memcpy(q + i * qb, rec, qb);
        free(rec);
    }
    free(rows);
    free(qr);
    free(cnt);
    *recs_out = recs;
    *q_out = q;
}

static void test_random(void **state)
{
    static const size_t shapes[][4] = {/* m, n, references, queries */
                                       {1, 5, 40, 6},     {7, 33, 90, 6},     {40, 64, 200, 8},
                                       {40, 65, 200, 8},  {128, 130, 150, 6}, {384, 768, 300, 6},
                                       {600, 300, 60, 4}, {100, 1100, 60, 4}};
    tu_rng_t r;
    size_t t;
    (void)state;
    tu_rng_seed(&r, 16);
    for (t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const size_t m = shapes[t][0], n = shapes[t][1], nr = shapes[t][2], nq = shapes[t][3];
        char spec[64], *dir, what[128];
        patina_extractor_t *ex = NULL;
        unsigned char **recs, *q;
        patina_collection_t *c;
        patina_refset_t *rs = NULL;
        patina_identify_opts_t o;
        int sc, prec, v;
        if (QUICK && t % 2) continue;
        snprintf(spec, sizeof spec, "rootsift:m=%zu,n=%zu", m, n);
        TU_OK(patina_extractor_new(&ex, spec));
        make_random(&r, m, n, nr, nq, &recs, &q);
        c = make_collection(&dir, patina_extractor_spec(ex), recs, nr, patina_extractor_bytes(ex));
        TU_OK(patina_refset_load(&rs, c, NULL));
        patina_identify_opts_init(&o);
        o.k = 7;
        for (prec = 0; prec < 2; prec++)
            for (sc = 0; sc < 3; sc++)
                for (v = 0; v < 2; v++) {
                    o.precision = (patina_identify_precision)prec;
                    o.scoring = (patina_identify_scoring)sc;
                    o.verify = v;
                    o.ratio = v ? 0.8 : 1.0;
                    snprintf(what, sizeof what, "m %zu n %zu refs %zu prec %d scoring %d verify %d", m, n, nr, prec,
                             sc, v);
                    compare(rs, q, nq, &o, what);
                }
        /* the first pass's features (queries cut to their n / 4 strongest, then the candidates again) */
        patina_identify_opts_init(&o);
        o.k = 7;
        o.first_features = n / 4 > 0 ? n / 4 : 1;
        for (v = 0; v < 2; v++) {
            o.verify = v;
            o.view_candidates = v ? 0 : 20;
            snprintf(what, sizeof what, "m %zu n %zu refs %zu first_features %zu verify %d", m, n, nr,
                     o.first_features, v);
            compare(rs, q, nq, &o, what);
        }
        print_message("m %zu n %zu: %zu references x %zu queries equal (2 precisions x 3 scorings x 2, first_features "
                      "n / 4 x 2)\n", m, n, nr, nq);
        release_all(rs, c, dir, recs, nr, q, ex);
    }
}

/* Reference views: items of 1 + V rows, V = 2 and 3 (random records of make_random, a
 * row repeated within an item or copied from another item: ties inside an
 * item and between items); the GPU's rows folded on the host give the
 * CPU's items. */
static void test_views(void **state)
{
    static const size_t shapes[][5] = {{40, 64, 30, 8, 2}, {384, 768, 120, 6, 2}, {7, 33, 5, 4, 2},
                                       {40, 64, 30, 8, 3}, {7, 33, 5, 4, 3}};
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 30);
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const size_t m = shapes[t][0], n = shapes[t][1], ni = shapes[t][2], nq = shapes[t][3];
        const size_t V = shapes[t][4], R = 1 + V; /* rows per item */
        const size_t b = rs_record_bytes(m, RS_QUANT_U8);
        char spec[80], *dir, what[128];
        patina_extractor_t *ex = NULL;
        unsigned char **rows, **items = calloc(ni, sizeof *items), *q;
        patina_collection_t *c;
        patina_refset_t *rs = NULL;
        patina_identify_opts_t o;
        static const size_t kv[][2] = {{7, 10}, {3, 2}, {1, 1}, {5, 0}};
        snprintf(spec, sizeof spec, "rootsift:m=%zu,n=%zu,views=%zu", m, n, V);
        TU_OK(patina_extractor_new(&ex, spec));
        make_random(&r, m, n, R * ni, nq, &rows, &q);
        for (size_t i = 0; i < ni; i++) {
            items[i] = malloc(R * b);
            for (size_t v = 0; v < R; v++) memcpy(items[i] + v * b, rows[R * i + v], b);
            if (i % 4 == 1) memcpy(items[i] + 2 * b, items[i], b);              /* a row twice in an item */
            if (i % 5 == 2 && i > 3) memcpy(items[i] + b, items[i - 3] + 2 * b, b); /* another item's row */
        }
        c = make_collection(&dir, patina_extractor_spec(ex), items, ni, R * b);
        TU_OK(patina_refset_load(&rs, c, NULL));
        assert_int_equal(patina_refset_rows(rs), R * ni);
        for (size_t k = 0; k < sizeof kv / sizeof kv[0]; k++) {
            patina_identify_opts_init(&o);
            o.k = kv[k][0];
            o.verify_top = kv[k][1];
            o.verify = kv[k][1] > 0;
            snprintf(what, sizeof what, "views %zu: m %zu items %zu k %zu verify_top %zu", V, m, ni, o.k, o.verify_top);
            compare(rs, q, nq, &o, what);
            /* the view pass: first rows on the GPU (their own copy), then the views of the best N by
             * the GPU's 2-NN; N below k and verify_top, between, and above the items */
            const size_t vcs[] = {1, 4, 12, ni, ni + 5};
            for (size_t v = 0; v < sizeof vcs / sizeof vcs[0]; v++) {
                o.view_candidates = vcs[v];
                snprintf(what, sizeof what, "views %zu: m %zu items %zu k %zu verify_top %zu view_candidates %zu",
                         V, m, ni, o.k, o.verify_top, vcs[v]);
                compare(rs, q, nq, &o, what);
            }
            /* the first pass's features: the first pass on the GPU with the queries cut to their F
             * strongest rows, then every row of the candidates with every feature by the GPU's 2-NN;
             * with and without the first rows' copy (view_candidates) */
            const size_t ffs[] = {1, n / 3, n};
            for (size_t f = 0; f < sizeof ffs / sizeof ffs[0]; f++)
                for (size_t vc = 0; vc <= 12; vc += 12) {
                    o.first_features = ffs[f];
                    o.view_candidates = vc;
                    snprintf(what, sizeof what,
                             "views %zu: m %zu items %zu k %zu verify_top %zu first_features %zu view_candidates %zu",
                             V, m, ni, o.k, o.verify_top, ffs[f], vc);
                    compare(rs, q, nq, &o, what);
                }
            /* the half-size view in the first pass (views 3: its row the last): the GPU's copy of the
             * half views matched with the queries cut to H, merged into the first rows' candidates */
            const size_t hvs[] = {1, n / 4, n};
            for (size_t h = 0; V == 3 && h < sizeof hvs / sizeof hvs[0]; h++)
                for (size_t f = 0; f < 2; f++) {
                    o.view_candidates = 4 + 8 * f;
                    o.first_features = f ? n / 3 : 0;
                    o.half_view_features = hvs[h];
                    snprintf(what, sizeof what,
                             "views %zu: m %zu items %zu k %zu verify_top %zu half_view_features %zu "
                             "first_features %zu view_candidates %zu",
                             V, m, ni, o.k, o.verify_top, hvs[h], o.first_features, o.view_candidates);
                    compare(rs, q, nq, &o, what);
                }
            o.half_view_features = 0;
            /* the half-size queries beside (patina_identify_half: here the queries in reverse order stand
             * for them): with the half-size views in the first pass (views 3) or without; pairs of rows
             * that fit the fused kernel and that do not (n + n: two calls), one2one, raw and mutual scoring */
            if (k == 0) {
                unsigned char *hq = malloc(nq * rs_record_bytes(n, RS_QUANT_U8));
                const size_t qb = rs_record_bytes(n, RS_QUANT_U8);
                const size_t F[][2] = {{n / 3 > 0 ? n / 3 : 1, n / 4 > 0 ? n / 4 : 1}, {n, n}, {1, n / 2 > 0 ? n / 2 : 1}};
                size_t taken = 0;
                char hw[256];
                for (size_t i = 0; i < nq; i++) memcpy(hq + i * qb, q + (nq - 1 - i) * qb, qb);
                for (size_t f = 0; f < sizeof F / sizeof F[0]; f++)
                    for (int sc = 0; sc < 3; sc++) {
                        o.view_candidates = f == 1 ? 0 : 6;
                        o.first_features = F[f][0];
                        o.half_view_features = V == 3 && f != 1 ? (n / 4 > 0 ? n / 4 : 1) : 0;
                        o.scoring = (patina_identify_scoring)sc;
                        snprintf(hw, sizeof hw,
                                 "views %zu: m %zu items %zu half-size queries: first_features %zu, theirs %zu, "
                                 "view_candidates %zu, half_view_features %zu, scoring %d",
                                 V, m, ni, F[f][0], F[f][1], o.view_candidates, o.half_view_features, sc);
                        taken += compare_half(rs, q, hq, nq, &o, F[f][1], hw);
                    }
                print_message("views %zu: m %zu n %zu: the half-size queries' pairs equal (%zu of %zu answers "
                              "the half-size query's)\n", V, m, n, taken, 9 * nq);
                patina_identify_opts_init(&o);
                o.k = kv[k][0];
                o.verify_top = kv[k][1];
                o.verify = kv[k][1] > 0;
                free(hq);
            }
        }
        /* the first rows' copy follows the set: an item replaced (its rows another item's), one removed,
         * one added above the others, between view-pass queries */
        patina_identify_opts_init(&o);
        o.view_candidates = 3;
        compare(rs, q, nq, &o, "views: view pass before changes");
        {
            const uint64_t *ids = patina_refset_ids(rs), first = ids[0], second = ids[R]; /* the second item */
            TU_OK(patina_refset_put(rs, first, items[ni - 1], R * b));
            TU_OK(patina_refset_remove(rs, second));
            TU_OK(patina_refset_put(rs, 1000000, items[0], R * b));
        }
        compare(rs, q, nq, &o, "views: view pass after changes");
        if (V == 3) { /* and the half views' copy */
            o.half_view_features = n / 4 > 0 ? n / 4 : 1;
            compare(rs, q, nq, &o, "views: view pass with the half views after changes");
            o.half_view_features = 0;
        }
        o.view_candidates = 0;
        compare(rs, q, nq, &o, "views: every row after changes");
        print_message("views %zu: m %zu n %zu: %zu items x %zu rows x %zu queries equal (every row; view passes of 1, "
                      "4, 12, %zu, %zu items)\n", V, m, n, ni, R, nq, ni, ni + 5);
        release_all(rs, c, dir, rows, R * ni, q, ex);
        for (size_t i = 0; i < ni; i++) free(items[i]);
        free(items);
    }
}

/* The view pass over several sets at once (idf_many_match_sets: one
 * patina_gpu_identify_many pass over the sets' first-rows copies): items
 * spread over three sets give on the GPU and on the CPU the hits of one
 * set holding them all (the pass runs on the union's best N). */
static void many_hits(patina_refset_t *const *sets, size_t ns, const unsigned char *q, size_t nq,
                      const patina_identify_opts_t *o, patina_identify_hit_t *hits, patina_identify_result_t *res)
{
    idf_many_t *m = NULL;
    TU_OK(idf_many_begin(&m, sets, ns, q, nq, o));
    TU_OK(idf_many_match_sets(m, 0, ns, CTX));
    TU_OK(idf_many_finish(m, CTX, hits, res, NULL));
    idf_many_free(m);
}

static void test_views_sets(void **state)
{
    const size_t m = 64, n = 128, ni = 45, nq = 6, R = 4; /* views 3: the half-size view the last row */
    const size_t b = rs_record_bytes(m, RS_QUANT_U8);
    tu_rng_t r;
    char spec[80];
    unsigned char **rows, *q, *item = malloc(R * b);
    patina_refset_t *one = NULL, *sets[3] = {NULL, NULL, NULL};
    patina_identify_opts_t o;
    patina_identify_hit_t *h1 = calloc(nq * 5, sizeof *h1), *hm = calloc(nq * 5, sizeof *hm);
    patina_identify_result_t r1[6], rm[6];
    (void)state;
    tu_rng_seed(&r, 31);
    snprintf(spec, sizeof spec, "rootsift:m=%zu,n=%zu,views=3", m, n);
    make_random(&r, m, n, R * ni, nq, &rows, &q);
    TU_OK(patina_refset_new(&one, spec));
    for (size_t s = 0; s < 3; s++) TU_OK(patina_refset_new(&sets[s], spec));
    for (size_t i = 0; i < ni; i++) {
        for (size_t v = 0; v < R; v++) memcpy(item + v * b, rows[R * i + v], b);
        TU_OK(patina_refset_put(one, 1 + i, item, R * b));
        TU_OK(patina_refset_put(sets[i % 3], 1 + i, item, R * b));
    }
    for (size_t vc = 0; vc <= 20; vc += 4) {
        patina_identify_opts_init(&o);
        o.view_candidates = vc;
        o.first_features = vc % 8 == 4 ? n / 2 : 0; /* the second pass over the union's candidates */
        o.half_view_features = vc % 8 == 0 ? n / 4 : 0; /* and the half views in the first pass */
        o.threshold = 0;
        o.device = PATINA_DEVICE_CPU;
        TU_OK(patina_identify(CTX, one, q, nq, &o, h1, r1));
        for (int dev = 0; dev < 2; dev++) {
            o.device = dev ? PATINA_DEVICE_GPU : PATINA_DEVICE_CPU;
            many_hits(sets, 3, q, nq, &o, hm, rm);
            for (size_t i = 0; i < nq; i++) {
                assert_int_equal(rm[i].nhits, r1[i].nhits);
                assert_int_equal(rm[i].decision, r1[i].decision);
                for (size_t j = 0; j < r1[i].nhits; j++) {
                    const patina_identify_hit_t *a = &h1[i * o.k + j], *c = &hm[i * o.k + j];
                    if (a->id != c->id || a->matches != c->matches || a->inliers != c->inliers)
                        fail_msg("views over 3 sets, view_candidates %zu, %s: query %zu rank %zu: one set id %llu "
                                 "matches %u inliers %u, three sets id %llu matches %u inliers %u",
                                 vc, dev ? "gpu" : "cpu", i, j + 1, (unsigned long long)a->id, a->matches, a->inliers,
                                 (unsigned long long)c->id, c->matches, c->inliers);
                }
            }
        }
    }
    print_message("views over 3 sets: %zu items of views 3, view_candidates 0 .. 20 (first_features n / 2 at 4, 12, "
                  "20; half_view_features n / 4 at 0, 8, 16): GPU == CPU == one set\n", ni);
    for (size_t s = 0; s < 3; s++) patina_refset_free(sets[s]);
    patina_refset_free(one);
    for (size_t i = 0; i < R * ni; i++) free(rows[i]);
    free(rows);
    free(q);
    free(item);
    free(h1);
    free(hm);
}

/* Sample photographs: references, and queries made from them. */
static const char *samples_dir(void)
{
    const char *s = getenv("PATINA_SAMPLES");
    return s && *s ? s : PATINA_SAMPLES_DIR;
}

static void test_real(void **state)
{
    char **files = NULL;
    size_t nf = tu_list_files(samples_dir(), "jpg,png", &files), nr, nq, i;
    patina_extractor_t *ex = NULL;
    patina_image_t *imgs;
    unsigned char **recs, *q, *hq;
    patina_status *st;
    char *dir;
    patina_collection_t *c;
    patina_refset_t *rs = NULL;
    patina_identify_opts_t o, ho;
    size_t bytes;
    (void)state;
    if (nf < 8) {
        print_message("test_real skipped: %zu sample photographs (scripts/fetch-samples.sh)\n", nf);
        tu_free_list(files, nf);
        return;
    }
    nr = nf > (QUICK ? 24 : 60) ? (QUICK ? 24 : 60) : nf;
    nq = nr / 2;
    TU_OK(patina_extractor_new(&ex, "rootsift"));
    bytes = patina_extractor_bytes(ex);
    imgs = calloc(nr, sizeof *imgs);
    recs = calloc(nr, sizeof *recs);
    st = calloc(nr, sizeof *st);
    for (i = 0; i < nr; i++) TU_OK(patina_image_load(&imgs[i], files[i], NULL));
    for (i = 0; i < nr; i++) recs[i] = malloc(bytes);
    {
        unsigned char *all = malloc(nr * bytes);
        TU_OK(patina_extract_batch(CTX, ex, PATINA_DEVICE_CPU, all, imgs, nr, st));
        for (i = 0; i < nr; i++) memcpy(recs[i], all + i * bytes, bytes);
        free(all);
    }
    c = make_collection(&dir, patina_extractor_spec(ex), recs, nr, bytes);
    TU_OK(patina_refset_load(&rs, c, NULL));
    /* queries: every other reference cropped to its central 70% and halved
     * (nearest), plus the images themselves */
    q = malloc(nq * patina_identify_query_bytes(rs));
    hq = malloc(nq * patina_identify_query_bytes(rs));
    {
        patina_image_t *qi = calloc(nq, sizeof *qi);
        for (i = 0; i < nq; i++) {
            const patina_image_t *s = &imgs[2 * i];
            const int w = s->width * 7 / 20, h = s->height * 7 / 20, x0 = s->width * 3 / 20, y0 = s->height * 3 / 20;
            if (i % 3 == 2) { /* the image itself */
                TU_OK(patina_image_init(&qi[i], s->width, s->height));
                for (int y = 0; y < s->height; y++)
                    memcpy(qi[i].data + y * qi[i].stride, s->data + y * s->stride, 3 * (size_t)s->width);
                continue;
            }
            TU_OK(patina_image_init(&qi[i], w > 0 ? w : 1, h > 0 ? h : 1));
            for (int y = 0; y < qi[i].height; y++)
                for (int x = 0; x < qi[i].width; x++)
                    memcpy(qi[i].data + y * qi[i].stride + 3 * x,
                           s->data + (size_t)(y0 + 2 * y) * s->stride + 3 * (size_t)(x0 + 2 * x), 3);
        }
        TU_OK(patina_identify_extract(CTX, rs, q, qi, nq, NULL));
        TU_OK(patina_identify_extract_half(CTX, rs, hq, qi, nq, NULL));
        for (i = 0; i < nq; i++) patina_image_release(&qi[i]);
        free(qi);
    }
    patina_identify_opts_init(&o);
    for (int prec = 0; prec < 2; prec++)
        for (int sc = 0; sc < 3; sc++) {
            char what[64];
            o.precision = (patina_identify_precision)prec;
            o.scoring = (patina_identify_scoring)sc;
            snprintf(what, sizeof what, "samples prec %d scoring %d", prec, sc);
            compare(rs, q, nq, &o, what);
        }
    /* the half-size queries (the photographs halved; their first pass on their 64 strongest features, then
     * every feature on the candidates): GPU == CPU, and so the fused answers */
    patina_identify_opts_init(&o);
    TU_OK(patina_identify_half_opts(&o, 64, &ho));
    compare(rs, hq, nq, &ho, "half-size queries");
    print_message("%zu sample references x %zu queries (and their half-size queries): GPU == CPU\n", nr, nq);
    free(q);
    free(hq);
    patina_refset_free(rs);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    for (i = 0; i < nr; i++) {
        patina_image_release(&imgs[i]);
        free(recs[i]);
    }
    free(imgs);
    free(recs);
    free(st);
    patina_extractor_free(ex);
    tu_free_list(files, nf);
}

/* The cache: a tiny arena (the rest streamed), changes between queries, a
 * restart. Queries are built from references' rows, so rank 1 also shows
 * that each change is seen. */
static void test_cache(void **state)
{
    enum { M = 64, N = 96, NR = 240, NEW = 40 };
    tu_rng_t r;
    patina_extractor_t *ex = NULL;
    unsigned char **recs, *q, *newrec[NEW];
    char *dir;
    patina_collection_t *c;
    patina_refset_t *rs = NULL;
    patina_identify_opts_t o;
    size_t i, bytes, qb;
    const size_t caps[] = {0, 1, 7, 50};
    (void)state;
    tu_rng_seed(&r, 17);
    TU_OK(patina_extractor_new(&ex, "rootsift:m=64,n=96"));
    bytes = patina_extractor_bytes(ex);
    make_random(&r, M, N, NR, 12, &recs, &q);
    for (i = 0; i < NEW; i++) {
        uint8_t rows[M * 128];
        for (size_t j = 0; j < M; j++) random_row(rows + j * 128, &r);
        newrec[i] = make_record(M, M, rows, NULL, 100, 100);
    }
    qb = rs_record_bytes(N, RS_QUANT_U8);
    c = make_collection(&dir, patina_extractor_spec(ex), recs, NR, bytes);
    TU_OK(patina_refset_load(&rs, c, NULL));
    patina_identify_opts_init(&o);
    o.k = 5;
    for (size_t ci = 0; ci < sizeof caps / sizeof caps[0]; ci++) {
        char what[96];
        o.gpu_arena_slots = caps[ci];
        snprintf(what, sizeof what, "arena %zu slots, loaded", caps[ci]);
        compare(rs, q, 12, &o, what);
    }
    o.gpu_arena_slots = 50; /* from here on: 50 slots on the device, the rest streamed */
    {
        /* additions (ids past the largest), each visible at once */
        unsigned char *nq_rec = malloc(qb);
        for (i = 0; i < NEW; i++) {
            uint64_t id = 1000 + i;
            patina_identify_hit_t h[5];
            patina_identify_result_t res;
            uint8_t rows[N * 128];
            unsigned char *t;
            TU_OK(patina_refset_put(rs, id, newrec[i], bytes));
            for (size_t j = 0; j < N; j++) perturb(rows + j * 128, newrec[i] + RS_HEADER + (j % M) * 128, 2, &r);
            t = make_record(N, N, rows, NULL, 100, 100);
            memcpy(nq_rec, t, qb);
            free(t);
            o.device = PATINA_DEVICE_GPU;
            TU_OK(patina_identify(CTX, rs, nq_rec, 1, &o, h, &res));
            if (res.nhits == 0 || h[0].id != id) fail_msg("added %llu: rank 1 is %llu", (unsigned long long)id,
                                                        (unsigned long long)(res.nhits ? h[0].id : 0));
            if (i % 8 == 0) compare(rs, q, 12, &o, "after additions");
            /* removed again at once for every third: gone from the next answer */
            if (i % 3 == 0) {
                TU_OK(patina_refset_remove(rs, id));
                TU_OK(patina_identify(CTX, rs, nq_rec, 1, &o, h, &res));
                assert_true(res.nhits == 0 || h[0].id != id);
            }
        }
        free(nq_rec);
    }
    compare(rs, q, 12, &o, "after additions and removals");
    /* updates: references 5..24 get the rows of new records */
    for (i = 5; i < 25; i++) TU_OK(patina_refset_put(rs, i, newrec[i % NEW], bytes));
    compare(rs, q, 12, &o, "after updates");
    /* an id below the largest: slots move (the mirror is rebuilt) */
    TU_OK(patina_refset_put(rs, 500, newrec[3], bytes));
    compare(rs, q, 12, &o, "after an insertion");
    /* removals past a quarter of the slots: the set compacts */
    for (i = 1; i <= 120; i++) TU_OK(patina_refset_remove(rs, i));
    compare(rs, q, 12, &o, "after compaction");
    o.gpu_arena_slots = 0;
    compare(rs, q, 12, &o, "after compaction, whole arena");
    patina_refset_free(rs);
    /* restart: the collection is the truth; the reloaded set (the state it
     * had at load) answers as the loaded one did */
    TU_OK(patina_refset_load(&rs, c, NULL));
    o.gpu_arena_slots = 50;
    compare(rs, q, 12, &o, "reloaded");
    for (i = 0; i < NEW; i++) free(newrec[i]);
    release_all(rs, c, dir, recs, NR, q, ex);
}

/* Threads identifying on one context while one thread changes the set. */
typedef struct th_arg {
    patina_refset_t *rs;
    const unsigned char *q;
    size_t nq;
    int writer, rounds;
    unsigned char *const *recs;
    size_t bytes;
} th_arg_t;

static void *th_main(void *v)
{
    th_arg_t *a = v;
    patina_identify_opts_t o;
    patina_identify_hit_t h[4 * 8];
    patina_identify_result_t res[8];
    patina_identify_opts_init(&o);
    o.k = 4;
    o.device = PATINA_DEVICE_GPU;
    o.gpu_arena_slots = 30;
    for (int i = 0; i < a->rounds; i++) {
        if (a->writer) {
            uint64_t id = 2000 + (uint64_t)i;
            if (patina_refset_put(a->rs, id, a->recs[i % 10], a->bytes) != PATINA_OK) return (void *)1;
            if (i % 2 && patina_refset_remove(a->rs, id) != PATINA_OK) return (void *)1;
        } else if (patina_identify(CTX, a->rs, a->q, a->nq, &o, h, res) != PATINA_OK) {
            fprintf(stderr, "identify: %s\n", patina_last_error());
            return (void *)1;
        }
    }
    return NULL;
}

static void test_threads(void **state)
{
    tu_rng_t r;
    patina_extractor_t *ex = NULL;
    unsigned char **recs, *q;
    char *dir;
    patina_collection_t *c;
    patina_refset_t *rs = NULL;
    pthread_t th[4];
    th_arg_t arg[4];
    patina_identify_opts_t o;
    size_t i;
    (void)state;
    tu_rng_seed(&r, 18);
    TU_OK(patina_extractor_new(&ex, "rootsift:m=32,n=48"));
    make_random(&r, 32, 48, 120, 8, &recs, &q);
    c = make_collection(&dir, patina_extractor_spec(ex), recs, 120, patina_extractor_bytes(ex));
    TU_OK(patina_refset_load(&rs, c, NULL));
    for (i = 0; i < 4; i++) {
        arg[i] = (th_arg_t){rs, q, 8, i == 3, QUICK ? 10 : 40, recs, patina_extractor_bytes(ex)};
        assert_int_equal(pthread_create(&th[i], NULL, th_main, &arg[i]), 0);
    }
    for (i = 0; i < 4; i++) {
        void *ret;
        pthread_join(th[i], &ret);
        assert_null(ret);
    }
    patina_identify_opts_init(&o);
    o.gpu_arena_slots = 30;
    compare(rs, q, 8, &o, "after the threads");
    release_all(rs, c, dir, recs, 120, q, ex);
}

/* patina_gpu_identify_nn against idf_match_fast, pair by pair, row by row. */
static void test_nn(void **state)
{
    static const size_t shapes[][4] = {/* m, n, queries, pairs */
                                       {1, 5, 3, 9}, {7, 33, 4, 40}, {384, 768, 3, 300}, {600, 1100, 2, 20}};
    patina_gpu_t *g = NULL;
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 44);
    TU_OK(patina__context_gpu_acquire(CTX, &g));
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const size_t m = shapes[t][0], n = shapes[t][1], nq = shapes[t][2], np = shapes[t][3], per = 3 * n + 2 * m;
        uint8_t *q = calloc(nq, n * 128), *rr = calloc(np, m * 128);
        uint16_t *qc = calloc(nq, sizeof *qc), *nr = calloc(np, sizeof *nr);
        uint32_t *pq = calloc(np, sizeof *pq);
        const uint8_t **rows = calloc(np, sizeof *rows);
        int32_t *out = malloc(np * per * sizeof *out), *ibuf = malloc((n + 2 * m + 1) * sizeof *ibuf);
        int16_t *qw = malloc(n * 128 * sizeof *qw);
        float *fa = malloc((2 * n + m + 1) * sizeof *fa), *fb = malloc((2 * n + m + 1) * sizeof *fb);
        int32_t *ib = malloc((n + m + 1) * sizeof *ib);
        size_t checked = 0;
        for (size_t i = 0; i < nq; i++) {
            qc[i] = (uint16_t)(i == 0 ? n : i == 1 ? (n > 1 ? n - 1 : 1) : 0);
            for (size_t j = 0; j < qc[i]; j++) {
                uint8_t *row = q + (i * n + j) * 128;
                if (j == 3) memcpy(row, row - 3 * 128, 128); /* a query row twice: ties for qbest */
                else random_row(row, &r);
            }
        }
        for (size_t p = 0; p < np; p++) {
            const size_t c = p % 6 == 0 ? 0 : p % 6 == 1 ? 1 : p % 6 == 2 ? (m < 2 ? m : 2) : p % 6 == 3 ? m
                             : 1 + tu_rng_below(&r, (uint32_t)m);
            pq[p] = (uint32_t)(p % nq);
            nr[p] = (uint16_t)c;
            rows[p] = rr + p * m * 128;
            for (size_t i = 0; i < c; i++) {
                uint8_t *row = rr + (p * m + i) * 128;
                const uint8_t *src = q + (pq[p] * n + tu_rng_below(&r, (uint32_t)(qc[pq[p]] ? qc[pq[p]] : 1))) * 128;
                if (i > 0 && tu_rng_below(&r, 8) == 0) memcpy(row, row - 128, 128); /* ties for best */
                else if (qc[pq[p]] && tu_rng_below(&r, 3) == 0) perturb(row, src, 2, &r);
                else random_row(row, &r);
            }
        }
        TU_OK(patina_gpu_identify_nn(g, q, n * 128, qc, nq, n, pq, (const uint8_t *const *)rows, nr, np, m, out));
        for (size_t p = 0; p < np; p++) {
            const size_t qn = qc[pq[p]], c = nr[p];
            const int32_t *o = out + p * per;
            idf_nn_t a, b;
            if (qn == 0 || c == 0) continue; /* match_pair does not match these */
            a = (idf_nn_t){ibuf, fa, fa + qn, ibuf + qn, fa + 2 * qn};
            b = (idf_nn_t){ib, fb, fb + qn, ib + qn, fb + 2 * qn};
            idf_widen(qw, q + pq[p] * n * 128, qn);
            idf_match_fast(&a, ibuf + qn + c, qw, qn, rows[p], c, IDF_INV_SCALE2);
            idf_nn_from_dots(&b, o, o + n, o + 2 * n, qn, o + 3 * n, o + 3 * n + m, c, IDF_INV_SCALE2);
            for (size_t j = 0; j < qn; j++)
                if (a.best[j] != b.best[j] || memcmp(&a.s1[j], &b.s1[j], 4) || memcmp(&a.s2[j], &b.s2[j], 4))
                    fail_msg("m %zu n %zu pair %zu query row %zu: CPU best %d s1 %.9g s2 %.9g, GPU %d %.9g %.9g", m, n,
                             p, j, a.best[j], a.s1[j], a.s2[j], b.best[j], b.s1[j], b.s2[j]);
            for (size_t i = 0; i < c; i++)
                if (a.qbest[i] != b.qbest[i] || memcmp(&a.qs[i], &b.qs[i], 4))
                    fail_msg("m %zu n %zu pair %zu reference row %zu: CPU qbest %d qs %.9g, GPU %d %.9g", m, n, p, i,
                             a.qbest[i], a.qs[i], b.qbest[i], b.qs[i]);
            for (size_t i = c; i < m; i++) assert_int_equal(o[3 * n + i], -1);
            checked++;
        }
        print_message("nn: m %zu n %zu: %zu pairs equal to idf_match_fast\n", m, n, checked);
        free(q), free(rr), free(qc), free(nr), free(pq), free(rows), free(out), free(ibuf), free(qw), free(fa),
            free(fb), free(ib);
    }
    {
        const uint8_t row[128] = {1}, *const rows = row;
        const uint16_t one = 1;
        const uint32_t zero = 0, past = 1; /* pair query 1 of 1 query: out of range */
        int32_t o[8];
        assert_int_equal(patina_gpu_identify_nn(g, row, 128, &one, 1, 1, &zero, &rows, &one, 1, 1700, o),
                         PATINA_E_LIMIT);
        assert_int_equal(patina_gpu_identify_nn(g, row, 128, &one, 1, 1, &past, &rows, &one, 1, 1, o),
                         PATINA_E_INVALID);
    }
    patina__context_gpu_release(CTX);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_real),
        cmocka_unit_test(test_cache),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_views),
        cmocka_unit_test(test_views_sets),
        cmocka_unit_test(test_nn),
    };
    int rc;
    const char *quick = getenv("PATINA_TEST_QUICK");
    QUICK = quick && *quick ? atoi(quick) : 0;
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* one test (a sanitizer's run): its name, * and ? allowed */
    tu_require_gpu();
    if (patina_context_new(&CTX, NULL) != PATINA_OK) {
        fprintf(stderr, "test_identify_gpu: no context: %s\n", patina_last_error());
        return 1;
    }
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    patina_context_free(CTX);
    return rc;
}
