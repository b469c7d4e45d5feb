/* Live tables (include/patina/table.h): which table a spec opens (the only
 * one, a bare family name, the capabilities asked for, missing and
 * ambiguous names); searches equal the textbook scan (k-NN and range, k past
 * the rows, empty tables, bad requests, GPU without a GPU); writes through a
 * set of tables reach every one (a new row, a replaced row whose content
 * changed drops from the table that got no descriptor, removals); writes of
 * another handle are noticed through the collection's version; partitions
 * cover the rows once and their merged answers are the whole table's; a
 * detached table fed by a change stream answers as the collection's does;
 * searches in threads during writes see each write whole; two processes
 * writing through tables of their own end with the collection's rows;
 * identification through a table equals patina_identify on the loaded
 * reference set, and follows removals; pivot tables built, kept current and
 * saved through a table give the scan's hits; a context's device list is
 * checked, and tables split over 2 and 3 slices ("0,0", "0,0,0": the CPU
 * answers) give one device's k-NN, range, SQFD and identification answers
 * bit for bit, before and after writes; identification over several
 * tables at once (patina_table_identify_many: partitions of a collection,
 * synthetic and photographed, on one device and on slices) equals one
 * table of their union, and refuses tables of other specs or contexts;
 * k-NN, range and SQFD (scanned and through pivots) over several tables at
 * once (patina_table_search_many) equal one table of their union, on one
 * device and on slices, and the same refusals. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "features/rootsift.h"
#include "testutil.h"

static patina_context_t *ctx_new(void) { return tu_context(2); }

/* n random images' descriptors for spec: (n, bytes), malloc'd. */
static uint8_t *describe(patina_context_t *ctx, const char *spec, size_t n, uint64_t seed, size_t *bytes)
{
    patina_extractor_t *ex = NULL;
    patina_image_t *imgs = calloc(n, sizeof *imgs);
    uint8_t *out;
    tu_rng_t r;
    size_t i;
    TU_OK(patina_extractor_new(&ex, spec));
    *bytes = patina_extractor_bytes(ex);
    out = malloc(n * *bytes);
    tu_rng_seed(&r, seed);
    for (i = 0; i < n; i++) tu_random_image(&imgs[i], 24 + (int)tu_rng_below(&r, 40), 24 + (int)tu_rng_below(&r, 40), (int)(i % 3), &r);
    TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, out, imgs, n, NULL));
    for (i = 0; i < n; i++) patina_image_release(&imgs[i]);
    free(imgs);
    patina_extractor_free(ex);
    return out;
}

static void fill_items(patina_insert_t *items, char (*keys)[32], size_t n, size_t first, uint8_t salt)
{
    size_t i;
    memset(items, 0, n * sizeof *items);
    for (i = 0; i < n; i++) {
        snprintf(keys[i], sizeof keys[i], "img/%03zu.jpg", first + i);
        items[i].key = keys[i];
        items[i].size = 100 + first + i;
        items[i].sha256[0] = (uint8_t)(first + i);
        items[i].sha256[1] = salt;
        items[i].width = items[i].height = 32;
    }
}

/* A collection with n images in tables cedd and lbp8 (put directly). */
static char *make_collection(patina_context_t *ctx, size_t n, uint8_t **cedd, uint8_t **lbp, size_t *cb, size_t *lb)
{
    char *dir = tu_tempdir("table");
    patina_collection_t *c = NULL;
    patina_insert_t *items = calloc(n, sizeof *items);
    char (*keys)[32] = calloc(n, sizeof *keys);
    patina_table_descs_t td[2];
    *cedd = describe(ctx, "cedd", n, 1, cb);
    *lbp = describe(ctx, "lbp8", n, 2, lb);
    fill_items(items, keys, n, 0, 0);
    td[0].spec = "cedd:compact=0";
    td[0].desc_bytes = *cb;
    td[0].descs = *cedd;
    td[1].spec = "lbp8";
    td[1].desc_bytes = *lb;
    td[1].descs = *lbp;
    {
        patina_extractor_t *e = NULL;
        TU_OK(patina_extractor_new(&e, "lbp8"));
        td[1].spec = strdup(patina_extractor_spec(e));
        patina_extractor_free(e);
    }
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_CREATE, 0));
    TU_OK(patina_collection_put_tables(c, td, 2, items, n, NULL));
    patina_collection_close(c);
    free((char *)td[1].spec);
    free(items);
    free(keys);
    return dir;
}

/* The textbook answer: every row's distance, sorted by (distance, id). */
typedef struct {
    double d;
    uint64_t id;
} pair_t;

static int cmp_pair(const void *a, const void *b)
{
    const pair_t *x = a, *y = b;
    if (x->d != y->d) return x->d < y->d ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static size_t brute(const patina_extractor_t *ex, const uint8_t *rows, const uint64_t *ids, size_t n, const uint8_t *q,
                    pair_t *out)
{
    size_t bytes = patina_extractor_bytes(ex), i;
    for (i = 0; i < n; i++) {
        out[i].d = patina_extractor_distance(ex, q, rows + i * bytes);
        out[i].id = ids[i];
    }
    qsort(out, n, sizeof *out, cmp_pair);
    return n;
}

static void test_open_resolves(void **state)
{
    patina_context_t *ctx = ctx_new();
    uint8_t *cedd, *lbp;
    size_t cb, lb;
    char *dir = make_collection(ctx, 6, &cedd, &lbp, &cb, &lb);
    patina_collection_t *c = NULL;
    patina_table_t *t = NULL;
    patina_table_opts_t o;
    (void)state;
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_WRITE, 0));
    /* two searchable tables: NULL is ambiguous, the message names both */
    assert_int_equal(patina_table_open(&t, ctx, c, NULL, NULL), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "cedd:compact=0"));
    assert_non_null(strstr(patina_last_error(), "lbp8"));
    /* any spelling; a bare family name */
    TU_OK(patina_table_open(&t, ctx, c, "cedd", NULL));
    assert_string_equal(patina_table_spec(t), "cedd:compact=0");
    assert_true(patina_table_caps(t) & PATINA_CAP_SEARCH);
    assert_int_equal(patina_table_size(t), 6);
    patina_table_free(t);
    TU_OK(patina_table_open(&t, ctx, c, "lbp8", NULL));
    patina_table_free(t);
    /* a table it lacks: NOTFOUND listing what it has; with create: opens empty */
    assert_int_equal(patina_table_open(&t, ctx, c, "glcm", NULL), PATINA_E_NOTFOUND);
    assert_non_null(strstr(patina_last_error(), "its tables: cedd:compact=0"));
    patina_table_opts_init(&o);
    o.create = 1;
    TU_OK(patina_table_open(&t, ctx, c, "glcm", &o));
    assert_int_equal(patina_table_size(t), 0);
    patina_table_free(t);
    /* identification needs a rootsift table: none here */
    patina_table_opts_init(&o);
    o.need = PATINA_CAP_IDENTIFY;
    assert_int_equal(patina_table_open(&t, ctx, c, NULL, &o), PATINA_E_NOTFOUND);
    assert_non_null(strstr(patina_last_error(), "no table for identification"));
    assert_int_equal(patina_table_open(&t, ctx, c, "cedd", &o), PATINA_E_INVALID);
    /* bad partitions */
    patina_table_opts_init(&o);
    o.partition = 3;
    o.partitions = 3;
    assert_int_equal(patina_table_open(&t, ctx, c, "cedd", &o), PATINA_E_INVALID);
    assert_null(t);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    free(cedd);
    free(lbp);
    patina_context_free(ctx);
}

/* Search results of t for q against the textbook scan of (ids, rows). */
static void expect_knn(patina_table_t *t, const uint8_t *rows, const uint64_t *ids, size_t n, const uint8_t *queries,
                       size_t nq, size_t k, patina_device dev)
{
    const patina_extractor_t *ex = patina_table_extractor(t);
    size_t bytes = patina_extractor_bytes(ex), q, i;
    pair_t *ref = malloc((n ? n : 1) * sizeof *ref);
    patina_table_query_t qo;
    patina_table_results_t res;
    patina_table_query_init(&qo);
    qo.k = k;
    qo.device = dev;
    qo.keys = 1;
    TU_OK(patina_table_search(t, queries, nq, &qo, &res));
    assert_int_equal(res.nq, nq);
    assert_int_equal(res.rows, n);
    for (q = 0; q < nq; q++) {
        size_t m = k < n ? k : n;
        brute(ex, rows, ids, n, queries + q * bytes, ref);
        assert_int_equal(res.offsets[q + 1] - res.offsets[q], m);
        for (i = 0; i < m; i++) {
            const patina_hit_t *h = &res.hits[res.offsets[q] + i];
            assert_int_equal(h->id, ref[i].id);
            assert_true(h->distance == ref[i].d);
            assert_non_null(res.keys[res.offsets[q] + i]);
        }
    }
    patina_table_results_release(&res);
    free(ref);
}

static void test_search_equals_scan(void **state)
{
    patina_context_t *ctx = ctx_new();
    uint8_t *cedd, *lbp, *qs;
    size_t cb, lb, i, qb;
    uint64_t ids[40];
    char *dir = make_collection(ctx, 40, &cedd, &lbp, &cb, &lb);
    patina_collection_t *c = NULL;
    patina_table_t *t = NULL;
    patina_table_query_t qo;
    patina_table_results_t res;
    (void)state;
    for (i = 0; i < 40; i++) ids[i] = i + 1;
    qs = describe(ctx, "cedd", 5, 99, &qb);
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_WRITE, 0));
    TU_OK(patina_table_open(&t, ctx, c, "cedd", NULL));
    expect_knn(t, cedd, ids, 40, qs, 5, 1, PATINA_DEVICE_CPU);
    expect_knn(t, cedd, ids, 40, qs, 5, 7, PATINA_DEVICE_AUTO);
    expect_knn(t, cedd, ids, 40, qs, 5, 1000, PATINA_DEVICE_CPU); /* k past the rows: all of them */
    /* range: the scan's rows within r, in order */
    patina_table_query_init(&qo);
    qo.kind = PATINA_QUERY_RANGE;
    qo.radius = 30;
    TU_OK(patina_table_search(t, qs, 5, &qo, &res));
    for (i = 0; i < 5; i++) {
        pair_t ref[40];
        size_t m = 0, j;
        brute(patina_table_extractor(t), cedd, ids, 40, qs + i * qb, ref);
        while (m < 40 && ref[m].d <= 30) m++;
        assert_int_equal(res.offsets[i + 1] - res.offsets[i], m);
        for (j = 0; j < m; j++) assert_int_equal(res.hits[res.offsets[i] + j].id, ref[j].id);
    }
    assert_null(res.keys);
    patina_table_results_release(&res);
    /* bad requests */
    patina_table_query_init(&qo);
    qo.k = 0;
    assert_int_equal(patina_table_search(t, qs, 1, &qo, &res), PATINA_E_INVALID);
    patina_table_query_init(&qo);
    qo.kind = PATINA_QUERY_RANGE;
    qo.radius = NAN;
    assert_int_equal(patina_table_search(t, qs, 1, &qo, &res), PATINA_E_INVALID);
    patina_table_query_init(&qo);
    qo.device = PATINA_DEVICE_HYBRID;
    assert_int_equal(patina_table_search(t, qs, 1, &qo, &res), PATINA_E_INVALID);
    /* nq = 0 */
    TU_OK(patina_table_search(t, NULL, 0, NULL, &res));
    assert_int_equal(res.nq, 0);
    assert_int_equal(res.offsets[0], 0);
    patina_table_results_release(&res);
    /* no GPU here: GPU fails, AUTO answers */
    if (patina_gpu_count() == 0) {
        patina_table_query_init(&qo);
        qo.device = PATINA_DEVICE_GPU;
        assert_int_equal(patina_table_search(t, qs, 1, &qo, &res), PATINA_E_UNAVAILABLE);
    }
    patina_table_free(t);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    free(cedd);
    free(lbp);
    free(qs);
    patina_context_free(ctx);
}

/* Whether id is among t's 1000 nearest of q (every row). */
static int holds(patina_table_t *t, const void *q, uint64_t id)
{
    patina_table_query_t qo;
    patina_table_results_t res;
    size_t i;
    int found = 0;
    patina_table_query_init(&qo);
    qo.k = 1000;
    qo.device = PATINA_DEVICE_CPU;
    TU_OK(patina_table_search(t, q, 1, &qo, &res));
    for (i = 0; i < res.offsets[1]; i++) found |= res.hits[i].id == id;
    patina_table_results_release(&res);
    return found;
}

static void test_writes_reach_every_table(void **state)
{
    patina_context_t *ctx = ctx_new();
    uint8_t *cedd, *lbp, *nc, *nl;
    size_t cb, lb, removed;
    char *dir = make_collection(ctx, 10, &cedd, &lbp, &cb, &lb);
    patina_collection_t *c = NULL, *other = NULL;
    patina_table_t *t[2] = {NULL, NULL};
    patina_insert_t items[2];
    char keys[2][32];
    uint64_t ids[2], v;
    const void *descs[2];
    (void)state;
    nc = describe(ctx, "cedd", 2, 7, &cb);
    nl = describe(ctx, "lbp8", 2, 8, &lb);
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_WRITE, 0));
    TU_OK(patina_table_open(&t[0], ctx, c, "cedd", NULL));
    TU_OK(patina_table_open(&t[1], ctx, c, "lbp8", NULL));
    assert_int_equal(patina_table_size(t[0]), 10);
    /* two new images in both tables, one transaction */
    fill_items(items, keys, 2, 100, 0);
    descs[0] = nc;
    descs[1] = nl;
    TU_OK(patina_tables_put(t, 2, items, 2, descs, ids));
    assert_int_equal(patina_table_size(t[0]), 12);
    assert_int_equal(patina_table_size(t[1]), 12);
    assert_true(holds(t[0], nc, ids[0]) && holds(t[1], nl + lb, ids[1]));
    TU_OK(patina_collection_version(c, &v));
    assert_int_equal(patina_table_version(t[0]), v);
    /* image 100 replaced with new content, descriptors for cedd only: lbp8 drops its row */
    fill_items(items, keys, 1, 100, 9);
    descs[1] = NULL;
    TU_OK(patina_tables_put(t, 2, items, 1, descs, ids));
    assert_int_equal(patina_table_size(t[0]), 12);
    assert_int_equal(patina_table_size(t[1]), 11);
    assert_false(holds(t[1], nl, ids[0]));
    /* the same content again with lbp8 only: cedd keeps its row */
    descs[0] = NULL;
    descs[1] = nl;
    TU_OK(patina_tables_put(t, 2, items, 1, descs, ids));
    assert_int_equal(patina_table_size(t[0]), 12);
    assert_int_equal(patina_table_size(t[1]), 12);
    /* removal from both; a missing id is NOTFOUND after the others */
    {
        uint64_t gone[2] = {ids[0], 999};
        assert_int_equal(patina_tables_remove(t, 2, gone, 2, &removed), PATINA_E_NOTFOUND);
        assert_int_equal(removed, 1);
    }
    assert_int_equal(patina_table_size(t[0]), 11);
    assert_int_equal(patina_table_size(t[1]), 11);
    /* a write of another handle (another process's, as far as the table can tell) is noticed */
    TU_OK(patina_collection_open(&other, tu_path(dir, "c"), PATINA_OPEN_WRITE, 0));
    {
        patina_record_t rec;
        TU_OK(patina_collection_get_by_key(other, "img/003.jpg", &rec));
        TU_OK(patina_collection_remove(other, rec.id));
        assert_true(holds(t[0], cedd + 3 * cb, rec.id) == 0);
        patina_record_release(&rec);
    }
    assert_int_equal(patina_table_size(t[0]), 10);
    patina_collection_close(other);
    /* mistakes */
    descs[0] = descs[1] = NULL;
    assert_int_equal(patina_tables_put(t, 2, items, 1, descs, ids), PATINA_E_INVALID);
    {
        patina_table_t *twice[2] = {t[0], t[0]};
        descs[0] = nc;
        assert_int_equal(patina_tables_put(twice, 2, items, 1, descs, ids), PATINA_E_INVALID);
    }
    patina_table_free(t[0]);
    patina_table_free(t[1]);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    free(cedd);
    free(lbp);
    free(nc);
    free(nl);
    patina_context_free(ctx);
}

static void test_partitions_and_streams(void **state)
{
    enum { N = 60, P = 3 };
    patina_context_t *ctx = ctx_new();
    uint8_t *cedd, *lbp, *qs;
    size_t cb, lb, qb, total = 0, p, i, applied;
    char *dir = make_collection(ctx, N, &cedd, &lbp, &cb, &lb);
    patina_collection_t *c = NULL;
    patina_table_t *whole = NULL, *part[P], *det = NULL;
    patina_table_opts_t o;
    patina_table_query_t qo;
    patina_table_results_t full, pr[P], dr;
    patina_change_t ch[N];
    char keys[N][32];
    (void)state;
    assert_int_equal(patina_key_partition("a", 7), 4);
    assert_int_equal(patina_key_partition("photos/cat.jpg", 16), 7);
    assert_int_equal(patina_key_partition("x", 1), 0);
    qs = describe(ctx, "cedd", 3, 5, &qb);
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_WRITE, 0));
    TU_OK(patina_table_open(&whole, ctx, c, "cedd", NULL));
    patina_table_query_init(&qo);
    qo.k = 8;
    qo.keys = 1;
    TU_OK(patina_table_search(whole, qs, 3, &qo, &full));
    for (p = 0; p < P; p++) {
        patina_table_opts_init(&o);
        o.partition = (uint32_t)p;
        o.partitions = P;
        TU_OK(patina_table_open(&part[p], ctx, c, "cedd", &o));
        total += patina_table_size(part[p]);
        TU_OK(patina_table_search(part[p], qs, 3, &qo, &pr[p]));
    }
    assert_int_equal(total, N);
    /* the parts merged: the whole table's answer exactly (ids, distances, keys) */
    for (i = 0; i < 3; i++) {
        size_t j;
        for (p = 0; p < P; p++)
            for (j = pr[p].offsets[i]; j < pr[p].offsets[i + 1]; j++)
                assert_int_equal(patina_key_partition(pr[p].keys[j], P), p);
    }
    {
        patina_table_results_t m, wr, rp[P];
        patina_table_query_t rq;
        size_t j;
        TU_OK(patina_table_results_merge(pr, P, &qo, &m));
        assert_int_equal(m.nq, 3);
        assert_int_equal(m.rows, N);
        assert_int_equal(m.offsets[3], full.offsets[3]);
        for (j = 0; j < full.offsets[3]; j++) {
            assert_int_equal(m.hits[j].id, full.hits[j].id);
            assert_true(m.hits[j].distance == full.hits[j].distance);
            assert_string_equal(m.keys[j], full.keys[j]);
        }
        patina_table_results_release(&m);
        /* range, all hits and the nearest 5: the union's */
        patina_table_query_init(&rq);
        rq.kind = PATINA_QUERY_RANGE;
        rq.radius = full.hits[full.offsets[1] - 1].distance; /* query 0's 8th distance */
        for (j = 0; j < 2; j++) {
            size_t h;
            rq.max_hits = j ? 5 : 0;
            TU_OK(patina_table_search(whole, qs, 3, &rq, &wr));
            for (p = 0; p < P; p++) TU_OK(patina_table_search(part[p], qs, 3, &rq, &rp[p]));
            TU_OK(patina_table_results_merge(rp, P, &rq, &m));
            assert_true(wr.offsets[1] >= (j ? 5 : 8));
            assert_int_equal(m.offsets[3], wr.offsets[3]);
            for (h = 0; h <= 3; h++) assert_int_equal(m.offsets[h], wr.offsets[h]);
            for (h = 0; h < wr.offsets[3]; h++) {
                assert_int_equal(m.hits[h].id, wr.hits[h].id);
                assert_true(m.hits[h].distance == wr.hits[h].distance);
            }
            assert_null(m.keys); /* the parts had none */
            patina_table_results_release(&m);
            patina_table_results_release(&wr);
            for (p = 0; p < P; p++) patina_table_results_release(&rp[p]);
        }
        /* parts of different queries, a bad kind: refused */
        pr[1].nq = 2;
        assert_int_equal(patina_table_results_merge(pr, P, &qo, &m), PATINA_E_INVALID);
        pr[1].nq = 3;
        rq.kind = (patina_query_kind)7;
        assert_int_equal(patina_table_results_merge(pr, P, &rq, &m), PATINA_E_INVALID);
        TU_OK(patina_table_results_merge(NULL, 0, &qo, &m));
        assert_int_equal(m.nq, 0);
        patina_table_results_release(&m);
    }
    /* a detached table of partition 1 fed by a stream of the whole collection answers as part[1] */
    patina_table_opts_init(&o);
    o.partition = 1;
    o.partitions = P;
    TU_OK(patina_table_new(&det, ctx, "cedd", &o));
    for (i = 0; i < N; i++) {
        snprintf(keys[i], sizeof keys[i], "img/%03zu.jpg", i);
        ch[i].op = PATINA_CHANGE_PUT;
        ch[i].id = i + 1;
        ch[i].key = keys[i];
        ch[i].desc = cedd + i * cb;
    }
    TU_OK(patina_table_apply(det, ch, N, 42, &applied));
    assert_int_equal(applied, patina_table_size(part[1]));
    assert_int_equal(patina_table_version(det), 42);
    TU_OK(patina_table_search(det, qs, 3, &qo, &dr));
    assert_int_equal(dr.offsets[3], pr[1].offsets[3]);
    for (i = 0; i < dr.offsets[3]; i++) {
        assert_int_equal(dr.hits[i].id, pr[1].hits[i].id);
        assert_true(dr.hits[i].distance == pr[1].hits[i].distance);
        assert_string_equal(dr.keys[i], pr[1].keys[i]);
    }
    /* a removal in the stream; bad changes change nothing */
    {
        patina_change_t rm = {PATINA_CHANGE_REMOVE, dr.hits[0].id, NULL, NULL}, bad = {PATINA_CHANGE_PUT, 5, NULL, cedd};
        size_t before = patina_table_size(det);
        TU_OK(patina_table_apply(det, &rm, 1, 43, NULL));
        assert_int_equal(patina_table_size(det), before - 1);
        assert_int_equal(patina_table_apply(det, &bad, 1, 44, NULL), PATINA_E_INVALID);
        assert_int_equal(patina_table_version(det), 43);
        assert_int_equal(patina_table_apply(whole, &rm, 1, 45, NULL), PATINA_E_INVALID);
    }
    patina_table_results_release(&dr);
    patina_table_results_release(&full);
    for (p = 0; p < P; p++) {
        patina_table_results_release(&pr[p]);
        patina_table_free(part[p]);
    }
    patina_table_free(det);
    patina_table_free(whole);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    free(cedd);
    free(lbp);
    free(qs);
    patina_context_free(ctx);
}

/* ------------------------------------------------------ readers and writers */

typedef struct {
    patina_table_t *t;
    const uint8_t *q;
    atomic_int *stop;
    int bad;
    size_t searches;
} reader_t;

static void *reader(void *arg)
{
    reader_t *r = arg;
    while (!atomic_load(r->stop) || r->searches < 5) {
        patina_table_query_t qo;
        patina_table_results_t res;
        patina_table_query_init(&qo);
        qo.k = 1000;
        qo.device = PATINA_DEVICE_CPU;
        if (patina_table_search(r->t, r->q, 1, &qo, &res) != PATINA_OK) r->bad++;
        /* rows come and go two at a time (one put of 2, one remove of 2 after): always even */
        else if (res.rows % 2 != 0 || res.offsets[1] != res.rows) r->bad++;
        patina_table_results_release(&res);
        r->searches++;
    }
    return NULL;
}

static void test_readers_during_writes(void **state)
{
    patina_context_t *ctx = ctx_new();
    uint8_t *cedd, *lbp, *nc;
    size_t cb, lb, round;
    char *dir = make_collection(ctx, 20, &cedd, &lbp, &cb, &lb);
    patina_collection_t *c = NULL;
    patina_table_t *t = NULL;
    pthread_t th[3];
    reader_t rd[3];
    atomic_int stop = 0;
    size_t k;
    (void)state;
    nc = describe(ctx, "cedd", 2, 17, &cb);
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_WRITE, 0));
    TU_OK(patina_table_open(&t, ctx, c, "cedd", NULL));
    for (k = 0; k < 3; k++) {
        rd[k] = (reader_t){t, cedd + k * cb, &stop, 0, 0};
        pthread_create(&th[k], NULL, reader, &rd[k]);
    }
    for (round = 0; round < 20; round++) {
        patina_insert_t items[2];
        char keys[2][32];
        uint64_t ids[2];
        const void *descs[1] = {nc};
        size_t removed;
        fill_items(items, keys, 2, 500 + 2 * round, 0);
        TU_OK(patina_tables_put(&t, 1, items, 2, descs, ids));
        if (round % 2) {
            TU_OK(patina_tables_remove(&t, 1, ids, 2, &removed));
            assert_int_equal(removed, 2);
        }
    }
    atomic_store(&stop, 1);
    for (k = 0; k < 3; k++) {
        pthread_join(th[k], NULL);
        assert_int_equal(rd[k].bad, 0);
    }
    assert_int_equal(patina_table_size(t), 20 + 20);
    patina_table_free(t);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    free(cedd);
    free(lbp);
    free(nc);
    patina_context_free(ctx);
}

/* One writer of test_two_processes: `test_table writer DIR W` puts 30
 * images through a table of its own; exit status 0 when every write
 * succeeded and the table never lost rows. */
static int writer(const char *dir, int w)
{
    patina_context_t *ctx = ctx_new();
    patina_collection_t *c = NULL;
    patina_table_t *t = NULL;
    uint8_t *nc;
    size_t cb, round;
    int rc = 0;
    nc = describe(ctx, "cedd", 1, 23, &cb);
    if (patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_WRITE, 0) != PATINA_OK ||
        patina_table_open(&t, ctx, c, "cedd", NULL) != PATINA_OK)
        rc = 2;
    for (round = 0; rc == 0 && round < 30; round++) {
        patina_insert_t item;
        char key[1][32];
        const void *descs[1] = {nc};
        fill_items(&item, key, 1, 1000 * (size_t)(w + 1) + round, 0);
        if (patina_tables_put(&t, 1, &item, 1, descs, NULL) != PATINA_OK) rc = 3;
        else if (round % 3 == 0 && patina_table_size(t) < 4 + round + 1) rc = 4;
    }
    patina_table_free(t);
    patina_collection_close(c);
    patina_context_free(ctx);
    free(nc);
    return rc;
}

/* Two processes write to one collection through tables of their own at
 * once (LMDB serialises the commits); afterwards a table of this process
 * holds exactly the collection's rows: a table that saw a commit of the
 * other process between its own reloads instead of guessing. The second
 * writer is this program again (fork + exec: no handle crosses a fork). */
static void test_two_processes(void **state)
{
    patina_context_t *ctx = ctx_new();
    uint8_t *cedd, *lbp;
    size_t cb, lb;
    char *dir = make_collection(ctx, 4, &cedd, &lbp, &cb, &lb);
    patina_collection_t *c = NULL;
    patina_table_t *t = NULL;
    char self[4096];
    ssize_t len;
    pid_t pid;
    int st = 0;
    uint64_t n = 0;
    (void)state;
    len = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(len > 0);
    self[len] = '\0';
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl(self, self, "writer", dir, "0", (char *)NULL);
        _exit(127);
    }
    assert_int_equal(writer(dir, 1), 0);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_READONLY, 0));
    TU_OK(patina_collection_count(c, &n));
    assert_int_equal(n, 4 + 60);
    TU_OK(patina_table_open(&t, ctx, c, "cedd", NULL));
    assert_int_equal(patina_table_size(t), 4 + 60);
    patina_table_free(t);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    free(cedd);
    free(lbp);
    patina_context_free(ctx);
}

/* Identification through a table is patina_identify on the collection's
 * reference set, hit for hit, with the keys; a reference put through the
 * table is found by the next call, and gone after its removal. */
static void test_identify_through_table(void **state)
{
    enum { N = 6 };
    patina_context_t *ctx = ctx_new();
    uint8_t *refs;
    size_t bytes, qb, i;
    char *dir = tu_table_collection(ctx, "rootsift:m=64,n=128", N, 96, 1, 31, &refs, &bytes);
    patina_collection_t *c = NULL;
    patina_table_t *t = NULL;
    patina_refset_t *rs = NULL;
    patina_table_opts_t o;
    patina_identify_opts_t io;
    patina_identify_hit_t h1[N * 3], h2[N * 3];
    patina_identify_result_t r1[N], r2[N];
    char *keys[N * 3];
    patina_image_t imgs[N];
    uint8_t *q;
    tu_rng_t r;
    (void)state;
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_WRITE, 0));
    patina_table_opts_init(&o);
    o.need = PATINA_CAP_IDENTIFY;
    TU_OK(patina_table_open(&t, ctx, c, NULL, &o)); /* the only identification table */
    assert_true(patina_table_caps(t) & PATINA_CAP_IDENTIFY);
    assert_int_equal(patina_table_size(t), N);
    /* the same images as queries, at the query budget */
    tu_rng_seed(&r, 31);
    for (i = 0; i < N; i++) tu_random_image(&imgs[i], 96, 96, 1, &r);
    qb = patina_table_query_bytes(t);
    q = malloc(N * qb);
    TU_OK(patina_table_identify_extract(t, NULL, q, imgs, N, NULL));
    patina_identify_opts_init(&io);
    io.k = 3;
    io.device = PATINA_DEVICE_CPU;
    TU_OK(patina_table_identify(t, q, N, &io, h1, r1, keys));
    TU_OK(patina_refset_load(&rs, c, NULL));
    TU_OK(patina_identify(ctx, rs, q, N, &io, h2, r2));
    for (i = 0; i < N; i++) {
        size_t j;
        assert_int_equal(r1[i].nhits, r2[i].nhits);
        assert_int_equal(r1[i].decision, r2[i].decision);
        for (j = 0; j < r1[i].nhits; j++) {
            assert_int_equal(h1[i * 3 + j].id, h2[i * 3 + j].id);
            assert_true(h1[i * 3 + j].score == h2[i * 3 + j].score);
            assert_non_null(keys[i * 3 + j]);
            patina_free(keys[i * 3 + j]);
        }
        assert_true(r1[i].nhits >= 1);
        assert_int_equal(h1[i * 3].id, i + 1); /* each image finds itself first */
    }
    /* its records can be searched too, by rootsift_ratio, when the table is named: a record finds itself */
    {
        patina_table_results_t res;
        TU_OK(patina_table_search(t, refs + 2 * bytes, 1, NULL, &res));
        assert_true(res.offsets[1] >= 1);
        assert_int_equal(res.hits[0].id, 3);
        patina_table_results_release(&res);
    }
    /* a reference removed through the table is no candidate any more */
    {
        uint64_t gone = 1;
        TU_OK(patina_tables_remove(&t, 1, &gone, 1, NULL));
        TU_OK(patina_table_identify(t, q, 1, &io, h1, r1, NULL));
        for (i = 0; i < r1[0].nhits; i++) assert_int_not_equal(h1[i].id, 1);
        assert_int_equal(patina_table_size(t), N - 1);
    }
    for (i = 0; i < N; i++) patina_image_release(&imgs[i]);
    patina_refset_free(rs);
    patina_table_free(t);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    free(refs);
    free(q);
    patina_context_free(ctx);
}

/* Pivot tables through a table: built and stored; searches through them
 * equal the scan (a table opened with pivots = 0) bit for bit; rows put
 * through the table join the pivot table, save stores them, and a table
 * opened afterwards loads it without recomputing. */
static void test_pivots_through_table(void **state)
{
    enum { N = 40 };
    patina_context_t *ctx = ctx_new();
    uint8_t *sig, *extra = NULL;
    size_t bytes, changed = 0, i;
    char *dir = tu_table_collection(ctx, "signature:k=8", N, 48, 1, 31, &sig, &bytes);
    patina_collection_t *c = NULL;
    patina_table_t *t = NULL, *scan = NULL, *again = NULL;
    patina_table_opts_t o;
    patina_pivot_opts_t po;
    patina_table_query_t qo;
    patina_table_results_t a, b;
    (void)state;
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_WRITE, 0));
    TU_OK(patina_table_open(&t, ctx, c, "signature", NULL));
    patina_table_opts_init(&o);
    o.pivots = 0;
    TU_OK(patina_table_open(&scan, ctx, c, "signature", &o));
    assert_int_equal(patina_table_pivots(t), 0);
    patina_pivot_opts_init(&po);
    po.pivots = 4;
    TU_OK(patina_table_build_pivots(t, &po));
    assert_int_equal(patina_table_pivots(t), 4);
    assert_int_equal(patina_table_pivots(scan), 0);
    patina_table_query_init(&qo);
    qo.k = 7;
    qo.device = PATINA_DEVICE_CPU;
    for (i = 0; i < 2; i++) {
        size_t j;
        patina_search_stats_t st;
        qo.stats = &st;
        TU_OK(patina_table_search(t, sig, 5, &qo, &a));
        assert_true(st.pivot_dists > 0);
        qo.stats = NULL;
        TU_OK(patina_table_search(scan, sig, 5, &qo, &b));
        assert_int_equal(a.offsets[5], b.offsets[5]);
        for (j = 0; j < a.offsets[5]; j++) {
            assert_int_equal(a.hits[j].id, b.hits[j].id);
            assert_true(a.hits[j].distance == b.hits[j].distance);
        }
        patina_table_results_release(&a);
        patina_table_results_release(&b);
        if (i == 0) { /* three rows through both tables at once; the pivot table gets them */
            patina_table_t *both[2] = {t, scan};
            patina_insert_t items[3];
            char keys[3][32];
            const void *descs[2];
            size_t eb;
            extra = describe(ctx, "signature:k=8", 3, 77, &eb);
            descs[0] = descs[1] = extra;
            fill_items(items, keys, 3, 200, 0);
            /* the same table twice is refused: two handles of one spec */
            assert_int_equal(patina_tables_put(both, 2, items, 3, descs, NULL), PATINA_E_INVALID);
            TU_OK(patina_tables_put(&t, 1, items, 3, descs, NULL));
            assert_int_equal(patina_table_size(t), N + 3);
            assert_int_equal(patina_table_size(scan), N + 3); /* noticed through the version */
        }
    }
    TU_OK(patina_table_save(t, &changed));
    assert_int_equal(changed, 3);
    TU_OK(patina_table_save(t, &changed));
    assert_int_equal(changed, 0);
    TU_OK(patina_table_open(&again, ctx, c, "signature", NULL));
    assert_int_equal(patina_table_pivots(again), 4);
    TU_OK(patina_table_save(again, &changed));
    assert_int_equal(changed, 0); /* stored with the rows: nothing to recompute */
    /* lbp tables have no pivot tables */
    patina_table_free(again);
    patina_table_free(scan);
    patina_table_free(t);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    free(sig);
    free(extra);
    patina_context_free(ctx);
}

/* ------------------------------------------------ slices (several devices) */

/* A context over the device list gpus (2 CPU threads). */
static patina_context_t *ctx_gpus(const char *gpus)
{
    patina_context_t *ctx = NULL;
    patina_context_opts_t o;
    patina_context_opts_init(&o);
    o.threads = 2;
    o.gpus = gpus;
    TU_OK(patina_context_new(&ctx, &o));
    return ctx;
}

/* The device lists a context takes and refuses. */
static void test_context_devices(void **state)
{
    static const char *const bad[] = {"x", ",", "0,", ",0", "0,,1", "-1", "1024", "0 1", "0;1", "a,b", "al", "ALL", "1.5"};
    char many[4 * PATINA_GPUS_MAX + 8];
    patina_context_t *ctx = NULL;
    patina_context_opts_t o;
    int dev[8], ngpu = patina_gpu_count();
    size_t i, len = 0;
    (void)state;
    patina_context_opts_init(&o);
    assert_null(o.gpus);
    for (i = 0; i < sizeof bad / sizeof *bad; i++) {
        o.gpus = bad[i];
        assert_int_equal(patina_context_new(&ctx, &o), PATINA_E_INVALID);
        assert_null(ctx);
        assert_non_null(strstr(patina_last_error(), "gpus"));
    }
    for (i = 0; i <= PATINA_GPUS_MAX; i++) len += (size_t)snprintf(many + len, sizeof many - len, "%s0", i ? "," : "");
    o.gpus = many; /* one entry too many */
    assert_int_equal(patina_context_new(&ctx, &o), PATINA_E_INVALID);
    /* no list, an empty one, a list of one: one device, no slices */
    o.gpus = "";
    o.gpu_index = 0;
    TU_OK(patina_context_new(&ctx, &o));
    assert_int_equal(patina_context_devices(ctx, dev, 8), 1);
    assert_int_equal(dev[0], 0);
    patina_context_free(ctx);
    o.gpus = "0";
    o.gpu_index = 3;
    TU_OK(patina_context_new(&ctx, &o));
    assert_int_equal(patina_context_devices(ctx, dev, 8), 1);
    assert_int_equal(dev[0], 0); /* the list wins */
    patina_context_free(ctx);
    o.gpu_index = 0;
    /* repeats: slices on one device */
    o.gpus = "0,0,0";
    TU_OK(patina_context_new(&ctx, &o));
    assert_int_equal(patina_context_devices(ctx, NULL, 0), 3);
    assert_int_equal(patina_context_devices(ctx, dev, 2), 3);
    assert_int_equal(dev[0], 0);
    assert_int_equal(dev[1], 0);
    patina_context_free(ctx);
    /* all: every usable device, or one slice without any */
    o.gpus = "all";
    TU_OK(patina_context_new(&ctx, &o));
    assert_int_equal(patina_context_devices(ctx, NULL, 0), ngpu > 0 ? (size_t)ngpu : 1);
    patina_context_free(ctx);
    /* a device the machine lacks: refused where it has GPUs; kept (and the CPU answers) where it has none */
    snprintf(many, sizeof many, "0,%d", ngpu > 0 ? ngpu : 5);
    o.gpus = many;
    if (ngpu > 0) {
        assert_int_equal(patina_context_new(&ctx, &o), PATINA_E_UNAVAILABLE);
        assert_non_null(strstr(patina_last_error(), "no CUDA device"));
    } else {
        char buf[256];
        TU_OK(patina_context_new(&ctx, &o));
        assert_int_equal(patina_context_devices(ctx, dev, 8), 2);
        assert_int_equal(dev[1], 5);
        assert_int_equal(patina_context_gpu_memory(ctx, buf, sizeof buf), PATINA_E_UNAVAILABLE);
        patina_context_free(ctx);
    }
}

/* Two answers are the same, bit for bit (and their keys, when both have them). */
static void same_results(const patina_table_results_t *a, const patina_table_results_t *b)
{
    size_t i;
    assert_int_equal(a->nq, b->nq);
    assert_int_equal(a->rows, b->rows);
    for (i = 0; i <= a->nq; i++) assert_int_equal(a->offsets[i], b->offsets[i]);
    for (i = 0; i < a->offsets[a->nq]; i++) {
        assert_int_equal(a->hits[i].id, b->hits[i].id);
        assert_memory_equal(&a->hits[i].distance, &b->hits[i].distance, sizeof(double));
        if (a->keys && b->keys) assert_string_equal(a->keys[i], b->keys[i]);
    }
    assert_true(!a->keys == !b->keys);
}

/* Every table of ts (the first on one device) answers k-NN (k = 1, 7, past
 * the rows), range (all, the nearest 3) the same. */
static void same_searches(patina_table_t **ts, size_t nt, const void *queries, size_t nq, double radius)
{
    static const size_t ks[] = {1, 7, 1000};
    patina_table_query_t qo;
    patina_table_results_t ref, got;
    size_t i, j;
    for (i = 0; i < 5; i++) {
        patina_table_query_init(&qo);
        qo.device = PATINA_DEVICE_CPU;
        qo.keys = i % 2;
        if (i < 3) {
            qo.k = ks[i];
        } else {
            qo.kind = PATINA_QUERY_RANGE;
            qo.radius = radius;
            qo.max_hits = i == 4 ? 3 : 0;
        }
        TU_OK(patina_table_search(ts[0], queries, nq, &qo, &ref));
        assert_true(ref.offsets[nq] > 0);
        for (j = 1; j < nt; j++) {
            patina_search_stats_t st;
            qo.stats = &st;
            TU_OK(patina_table_search(ts[j], queries, nq, &qo, &got));
            assert_int_equal(patina_table_size(ts[j]), ref.rows);
            assert_true(st.cpu > 0);
            { /* the call's fan-out, as the table keeps it */
                patina_table_fanout_t fo;
                TU_OK(patina_table_fanout(ts[j], &fo));
                assert_true(fo.slices >= 2); /* the tables after the first are split */
                assert_true(fo.slice_min >= 0 && fo.slice_min <= fo.slice_max && fo.merge >= 0);
                assert_true(fo.start_max >= 0 && fo.slice_max + fo.merge <= fo.total + 1e-9);
            }
            same_results(&ref, &got);
            patina_table_results_release(&got);
            qo.stats = NULL;
        }
        patina_table_results_release(&ref);
    }
}

/* k-NN and range over a table split into 2 and 3 slices (device lists
 * "0,0" and "0,0,0"; the CPU answers, no GPU opened) equal one device's,
 * bit for bit, before and after puts and removes through the split table
 * (each row to its slice) and through a detached table's change stream. */
static void test_slices_search(void **state)
{
    enum { N = 50 };
    patina_context_t *ctx[3] = {ctx_new(), ctx_gpus("0,0"), ctx_gpus("0,0,0")};
    uint8_t *cedd, *lbp, *qs, *extra;
    size_t cb, lb, qb, eb, i;
    char *dir = make_collection(ctx[0], N, &cedd, &lbp, &cb, &lb);
    patina_collection_t *c = NULL;
    patina_table_t *t[3] = {NULL, NULL, NULL}, *d[3] = {NULL, NULL, NULL};
    patina_insert_t items[6];
    char keys[6][32];
    uint64_t ids[6], gone[3] = {2, 9, 31};
    const void *descs[1];
    size_t removed = 0;
    (void)state;
    qs = describe(ctx[0], "cedd", 4, 99, &qb);
    extra = describe(ctx[0], "cedd", 6, 123, &eb);
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_WRITE, 0));
    for (i = 0; i < 3; i++) TU_OK(patina_table_open(&t[i], ctx[i], c, "cedd", NULL));
    same_searches(t, 3, qs, 4, 30);
    /* writes through a split table: puts (new rows and a replaced one), removes */
    fill_items(items, keys, 6, N - 1, 7); /* img/049 exists: replaced, its id kept */
    descs[0] = extra;
    TU_OK(patina_tables_put(&t[2], 1, items, 6, descs, ids));
    assert_int_equal(ids[0], N);
    TU_OK(patina_tables_remove(&t[2], 1, gone, 3, &removed));
    assert_int_equal(removed, 3);
    assert_int_equal(patina_table_size(t[2]), N + 5 - 3);
    /* the split table followed the writes (no reload): t[0] and t[1] reload, all agree */
    same_searches(t, 3, qs, 4, 30);
    TU_OK(patina_tables_remove(&t[1], 1, gone, 0, NULL));
    same_searches(t, 3, extra, 6, 30); /* the new rows find themselves */
    /* detached tables fed the same stream */
    for (i = 0; i < 3; i++) TU_OK(patina_table_new(&d[i], ctx[i], "cedd", NULL));
    {
        patina_change_t ch[N + 2];
        size_t applied = 0;
        for (i = 0; i < N; i++) {
            ch[i].op = PATINA_CHANGE_PUT;
            ch[i].id = i + 1;
            ch[i].key = keys[i % 6];
            ch[i].desc = cedd + i * cb;
        }
        ch[N].op = PATINA_CHANGE_REMOVE;
        ch[N].id = 4;
        ch[N].key = NULL;
        ch[N].desc = NULL;
        ch[N + 1] = ch[0]; /* a replacement */
        ch[N + 1].desc = extra;
        for (i = 0; i < 3; i++) {
            TU_OK(patina_table_apply(d[i], ch, N + 2, 9, &applied));
            assert_int_equal(applied, N + 2);
            assert_int_equal(patina_table_size(d[i]), N - 1);
        }
        same_searches(d, 3, qs, 4, 30);
    }
    for (i = 0; i < 3; i++) {
        patina_table_free(d[i]);
        patina_table_free(t[i]);
    }
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    free(cedd);
    free(lbp);
    free(qs);
    free(extra);
    for (i = 0; i < 3; i++) patina_context_free(ctx[i]);
}

/* SQFD (signature) through split tables, with the stored pivot table (each
 * slice filters its rows through it) and without: the one-device answers;
 * rows put through a split table reach its slices' pivot tables, and save
 * stores the whole table's. */
static void test_slices_sqfd(void **state)
{
    enum { N = 40 };
    patina_context_t *ctx[3] = {ctx_new(), ctx_gpus("0,0"), ctx_gpus("0,0,0")};
    uint8_t *sig, *extra;
    size_t bytes, eb, changed = 0, i;
    char *dir = tu_table_collection(ctx[0], "signature:k=8", N, 48, 1, 31, &sig, &bytes);
    patina_collection_t *c = NULL;
    patina_table_t *t[3] = {NULL, NULL, NULL}, *scan[3] = {NULL, NULL, NULL}, *again = NULL;
    patina_table_opts_t o;
    patina_pivot_opts_t po;
    patina_insert_t items[3];
    char keys[3][32];
    const void *descs[1];
    (void)state;
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_WRITE, 0));
    patina_table_opts_init(&o);
    o.pivots = 0;
    for (i = 0; i < 3; i++) {
        TU_OK(patina_table_open(&t[i], ctx[i], c, "signature", NULL));
        TU_OK(patina_table_open(&scan[i], ctx[i], c, "signature", &o));
    }
    patina_pivot_opts_init(&po);
    po.pivots = 4;
    TU_OK(patina_table_build_pivots(t[1], &po));
    for (i = 0; i < 3; i++) assert_int_equal(patina_table_pivots(t[i]), 4);
    same_searches(t, 3, sig, 5, 0.5);
    same_searches(scan, 3, sig, 5, 0.5);
    same_searches((patina_table_t *[]){t[0], scan[2]}, 2, sig + 7 * bytes, 3, 0.5);
    extra = describe(ctx[0], "signature:k=8", 3, 77, &eb);
    descs[0] = extra;
    fill_items(items, keys, 3, 200, 0);
    TU_OK(patina_tables_put(&t[2], 1, items, 3, descs, NULL));
    assert_int_equal(patina_table_size(t[2]), N + 3);
    same_searches(t, 3, extra, 3, 0.5);
    same_searches(scan, 3, extra, 3, 0.5);
    TU_OK(patina_table_save(t[2], &changed));
    assert_int_equal(changed, 3);
    TU_OK(patina_table_save(t[2], &changed));
    assert_int_equal(changed, 0);
    TU_OK(patina_table_open(&again, ctx[0], c, "signature", NULL));
    assert_int_equal(patina_table_pivots(again), 4);
    TU_OK(patina_table_save(again, &changed));
    assert_int_equal(changed, 0); /* stored with every row: nothing to recompute */
    patina_table_free(again);
    for (i = 0; i < 3; i++) {
        patina_table_free(t[i]);
        patina_table_free(scan[i]);
    }
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    free(sig);
    free(extra);
    for (i = 0; i < 3; i++) patina_context_free(ctx[i]);
}

/* Two identification answers are the same: hits (ids, scores, matches,
 * inliers, verified), counts, decisions. */
static void same_identify(const patina_identify_hit_t *ha, const patina_identify_result_t *ra,
                          const patina_identify_hit_t *hb, const patina_identify_result_t *rb, size_t nq, size_t k)
{
    size_t q, j;
    for (q = 0; q < nq; q++) {
        assert_int_equal(ra[q].nhits, rb[q].nhits);
        assert_int_equal(ra[q].decision, rb[q].decision);
        assert_int_equal(ra[q].query_features, rb[q].query_features);
        for (j = 0; j < ra[q].nhits; j++) {
            const patina_identify_hit_t *a = &ha[q * k + j], *b = &hb[q * k + j];
            assert_int_equal(a->id, b->id);
            assert_memory_equal(&a->score, &b->score, sizeof(double));
            assert_int_equal(a->matches, b->matches);
            assert_int_equal(a->inliers, b->inliers);
            assert_int_equal(a->verified, b->verified);
        }
    }
}

/* Identification through split tables (2 and 3 slices) equals one
 * device's: candidates, scores, inliers, decisions, keys -- with every
 * candidate verified, with fewer verified than asked for (the merge
 * unverifies the parts' others), and after a put and a remove through a
 * split table. */
static void test_slices_identify(void **state)
{
    enum { N = 12, K = 4 };
    patina_context_t *ctx[3] = {ctx_new(), ctx_gpus("0,0"), ctx_gpus("0,0,0")};
    uint8_t *refs, *q;
    size_t bytes, qb, i, v, j, nh;
    char *dir = tu_table_collection(ctx[0], "rootsift:m=64,n=128", N, 96, 1, 31, &refs, &bytes);
    patina_collection_t *c = NULL;
    patina_table_t *t[3] = {NULL, NULL, NULL};
    patina_table_opts_t o;
    patina_identify_opts_t io;
    patina_identify_hit_t h[3][N * K];
    patina_identify_result_t r[3][N];
    char *keys[3][N * K];
    patina_image_t imgs[N];
    tu_rng_t rng;
    (void)state;
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_WRITE, 0));
    patina_table_opts_init(&o);
    o.need = PATINA_CAP_IDENTIFY;
    for (i = 0; i < 3; i++) TU_OK(patina_table_open(&t[i], ctx[i], c, NULL, &o));
    tu_rng_seed(&rng, 31);
    for (i = 0; i < N; i++) tu_random_image(&imgs[i], 96, 96, 1, &rng);
    qb = patina_table_query_bytes(t[0]);
    q = malloc(N * qb);
    TU_OK(patina_table_identify_extract(t[0], NULL, q, imgs, N, NULL));
    for (v = 0; v < 6; v++) {
        patina_identify_opts_init(&io);
        io.k = v % 3 == 2 ? 1 : K;
        io.verify_top = v % 3 == 0 ? 10 : 2; /* 10: every candidate verified; 2 (k 4 or 1): some not */
        io.device = PATINA_DEVICE_CPU;
        io.threshold = 3;
        io.accept = PATINA_ACCEPT_INLIERS;
        if (v == 3) { /* a put (a copy of reference 5 under a new key) and a remove through a split table */
            patina_insert_t item;
            char key[32];
            const void *descs[1] = {refs + 4 * bytes};
            uint64_t gone = 2;
            fill_items(&item, (char(*)[32])key, 1, 500, 0);
            TU_OK(patina_tables_put(&t[2], 1, &item, 1, descs, NULL));
            TU_OK(patina_tables_remove(&t[2], 1, &gone, 1, NULL));
        }
        for (i = 0; i < 3; i++) {
            TU_OK(patina_table_identify(t[i], q, N, &io, h[i], r[i], keys[i]));
            assert_int_equal(patina_table_size(t[i]), N); /* one put and one remove at v = 3 */
        }
        for (i = 1; i < 3; i++) {
            same_identify(h[0], r[0], h[i], r[i], N, io.k);
            for (j = 0; j < N * io.k; j++) {
                if (j % io.k < r[0][j / io.k].nhits) assert_string_equal(keys[0][j], keys[i][j]);
                else assert_null(keys[i][j]);
            }
        }
        for (i = 0; i < 3; i++)
            for (j = 0; j < N * io.k; j++) patina_free(keys[i][j]);
        for (j = 0, nh = 0; j < N; j++) nh += r[0][j].nhits;
        if (io.k > 1) assert_true(nh > N); /* candidates beyond each image itself: the merge has work */
        if (v >= 3) /* reference 5 and its copy tie on matches: the copy (the larger id) comes second */
            assert_int_equal(h[0][4 * io.k].id, 5);
    }
    for (i = 0; i < N; i++) patina_image_release(&imgs[i]);
    for (i = 0; i < 3; i++) patina_table_free(t[i]);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    free(refs);
    free(q);
    for (i = 0; i < 3; i++) patina_context_free(ctx[i]);
}

/* ------------------------------------ identification over several tables */

/* Identification over the P partition tables of c (on ctx) equals one
 * table of the whole collection, for P = 1, 2, 5 and 40 (most of them
 * empty) and several option settings: k above and below verify_top, no
 * verification, a low threshold, k past the rows. Returns how many
 * answers were ambiguous (over every setting). */
static size_t many_equals_union(patina_context_t *ctx, patina_collection_t *c, const uint8_t *q, size_t nq,
                                const char *what)
{
    static const uint32_t parts[] = {1, 2, 5, 40};
    enum { KMAX = 40 };
    patina_table_t *whole = NULL, *t[40];
    patina_table_opts_t o;
    patina_identify_opts_t io;
    patina_identify_hit_t *h0 = calloc(nq * KMAX, sizeof *h0), *h1 = calloc(nq * KMAX, sizeof *h1);
    patina_identify_result_t *r0 = calloc(nq, sizeof *r0), *r1 = calloc(nq, sizeof *r1);
    char **k0 = calloc(nq * KMAX, sizeof *k0), **k1 = calloc(nq * KMAX, sizeof *k1);
    size_t pi, v, i, j, ambiguous = 0, rows = 0, empty = 0, across = 0;
    patina_table_opts_init(&o);
    o.need = PATINA_CAP_IDENTIFY;
    TU_OK(patina_table_open(&whole, ctx, c, NULL, &o));
    for (pi = 0; pi < sizeof parts / sizeof parts[0]; pi++) {
        const uint32_t P = parts[pi];
        o.partitions = P;
        for (i = 0, rows = 0; i < P; i++) {
            o.partition = (uint32_t)i;
            TU_OK(patina_table_open(&t[i], ctx, c, NULL, &o));
            rows += patina_table_size(t[i]);
            empty += patina_table_size(t[i]) == 0;
        }
        assert_int_equal(rows, patina_table_size(whole)); /* the partitions cover the rows once */
        for (v = 0; v < 7; v++) {
            patina_identify_opts_init(&io);
            io.device = PATINA_DEVICE_CPU;
            switch (v) {
            case 0: io.k = 5; break;                                    /* the defaults otherwise */
            case 1: io.k = 8; io.verify_top = 2; break;                 /* k > verify_top: some unverified */
            case 2: io.k = 1; io.verify_top = 6; break;                 /* k < verify_top */
            case 3: io.k = 4; io.verify = 0; break;                     /* matches only */
            case 4: /* low threshold: ambiguous answers */
                io.k = 3, io.verify_top = 4, io.threshold = 3, io.accept = PATINA_ACCEPT_INLIERS;
                break;
            case 5: io.k = KMAX; io.verify_top = 3; break;              /* k past the rows: clamped to the union's */
            default: io.k = 2; io.verify_top = 1; io.threshold = 0; break;
            }
            TU_OK(patina_table_identify(whole, q, nq, &io, h0, r0, k0));
            TU_OK(patina_table_identify_many(t, P, q, nq, &io, h1, r1, k1));
            for (i = 0; i < nq; i++) {
                if (r0[i].nhits != r1[i].nhits || r0[i].decision != r1[i].decision)
                    fail_msg("%s: %u tables, setting %zu, query %zu: one table %zu hits (%s), several %zu (%s)", what,
                             P, v, i, r0[i].nhits, patina_identify_decision_name(r0[i].decision), r1[i].nhits,
                             patina_identify_decision_name(r1[i].decision));
                ambiguous += r0[i].decision == PATINA_DECISION_AMBIGUOUS;
                for (j = 0; j < r0[i].nhits; j++) {
                    const size_t at = i * io.k + j;
                    if (h0[at].id != h1[at].id || h0[at].matches != h1[at].matches ||
                        h0[at].inliers != h1[at].inliers || h0[at].verified != h1[at].verified ||
                        memcmp(&h0[at].score, &h1[at].score, sizeof(double)))
                        fail_msg("%s: %u tables, setting %zu, query %zu rank %zu: one table id %llu matches %u "
                                 "inliers %u verified %d, several id %llu matches %u inliers %u verified %d",
                                 what, P, v, i, j + 1, (unsigned long long)h0[at].id, h0[at].matches, h0[at].inliers,
                                 h0[at].verified, (unsigned long long)h1[at].id, h1[at].matches, h1[at].inliers,
                                 h1[at].verified);
                    assert_non_null(k0[at]);
                    assert_non_null(k1[at]);
                    assert_string_equal(k0[at], k1[at]);
                    if (P > 1 && j > 0 && patina_key_partition(k1[at], P) != patina_key_partition(k1[i * io.k], P))
                        across++; /* an answer drawn from several tables */
                }
                for (j = r0[i].nhits; j < io.k; j++) assert_null(k1[i * io.k + j]);
            }
            for (i = 0; i < nq * io.k; i++) {
                patina_free(k0[i]);
                patina_free(k1[i]);
            }
        }
        for (i = 0; i < P; i++) patina_table_free(t[i]);
    }
    assert_true(empty > 0);  /* tables with no row took part */
    assert_true(across > 0); /* answers merged from several tables */
    patina_table_free(whole);
    free(h0);
    free(h1);
    free(r0);
    free(r1);
    free(k0);
    free(k1);
    return ambiguous;
}

/* patina_table_identify_many over synthetic references (and, with a copy of
 * one reference under a second key, ambiguous answers) on one device and
 * on two CPU slices ("0,0"); tables with no rows answer nothing; the
 * tables must share spec and context. */
/* patina_table_warm: on one slice and on two, before any call and again
 * after one, succeeds and changes no answer (on a GPU context it builds the
 * mirrors the identification would: tests/gpu/test_identify_many_gpu.c);
 * a searched table and a NULL one as documented. */
static void test_warm(void **state)
{
    enum { N = 8, K = 3 };
    patina_context_t *ctx[2] = {ctx_new(), ctx_gpus("0,0")};
    uint8_t *refs, *q;
    size_t bytes, qb, i, v, j;
    char *dir = tu_table_collection(ctx[0], "rootsift:m=64,n=128", N, 96, 1, 31, &refs, &bytes);
    patina_collection_t *c = NULL;
    patina_table_t *t = NULL;
    patina_table_opts_t o;
    patina_identify_opts_t io;
    patina_identify_hit_t h[2][N * K];
    patina_identify_result_t r[2][N];
    patina_image_t imgs[N];
    tu_rng_t rng;
    (void)state;
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_WRITE, 0));
    patina_table_opts_init(&o);
    o.need = PATINA_CAP_IDENTIFY;
    tu_rng_seed(&rng, 31);
    for (i = 0; i < N; i++) tu_random_image(&imgs[i], 96, 96, 1, &rng);
    patina_identify_opts_init(&io);
    io.k = K;
    io.threshold = 3;
    io.accept = PATINA_ACCEPT_INLIERS;
    for (v = 0; v < 2; v++) {
        TU_OK(patina_table_open(&t, ctx[v], c, NULL, &o));
        qb = patina_table_query_bytes(t);
        q = malloc(N * qb);
        TU_OK(patina_table_identify_extract(t, NULL, q, imgs, N, NULL));
        TU_OK(patina_table_warm(t)); /* before any call: loads the table, then nothing more on a CPU */
        TU_OK(patina_table_identify(t, q, N, &io, h[0], r[0], NULL));
        TU_OK(patina_table_warm(t)); /* again, after a call */
        TU_OK(patina_table_identify(t, q, N, &io, h[1], r[1], NULL));
        for (i = 0; i < N; i++) {
            assert_int_equal(r[0][i].nhits, r[1][i].nhits);
            assert_int_equal(r[0][i].decision, r[1][i].decision);
            assert_true(r[0][i].nhits >= 1);
            assert_int_equal(h[0][i * K].id, i + 1); /* each image finds itself first */
            for (j = 0; j < r[0][i].nhits; j++) {
                assert_int_equal(h[0][i * K + j].id, h[1][i * K + j].id);
                assert_int_equal(h[0][i * K + j].inliers, h[1][i * K + j].inliers);
                assert_true(h[0][i * K + j].score == h[1][i * K + j].score);
            }
        }
        patina_table_free(t);
        t = NULL;
        free(q);
    }
    /* a searched table: nothing to do without a GPU (its device copy: tests/gpu/test_table_gpu.c) */
    TU_OK(patina_table_new(&t, ctx[0], "cedd", NULL));
    TU_OK(patina_table_warm(t));
    patina_table_free(t);
    assert_int_equal(patina_table_warm(NULL), PATINA_E_INVALID);
    for (i = 0; i < N; i++) patina_image_release(&imgs[i]);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    free(refs);
    for (i = 0; i < 2; i++) patina_context_free(ctx[i]);
}

static void test_identify_many(void **state)
{
    enum { N = 12 };
    patina_context_t *ctx[2] = {ctx_new(), ctx_gpus("0,0")};
    uint8_t *refs, *q;
    size_t bytes, qb, i, ambiguous = 0;
    char *dir = tu_table_collection(ctx[0], "rootsift:m=64,n=128", N, 96, 1, 31, &refs, &bytes);
    patina_collection_t *c = NULL;
    patina_table_t *t = NULL, *u = NULL, *other = NULL, *cedd = NULL, *two[2];
    patina_table_opts_t o;
    patina_identify_opts_t io;
    patina_identify_hit_t h[N * 3];
    patina_identify_result_t r[N];
    patina_image_t imgs[N];
    tu_rng_t rng;
    (void)state;
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_WRITE, 0));
    patina_table_opts_init(&o);
    o.need = PATINA_CAP_IDENTIFY;
    TU_OK(patina_table_open(&t, ctx[0], c, NULL, &o));
    tu_rng_seed(&rng, 31);
    for (i = 0; i < N; i++) tu_random_image(&imgs[i], 96, 96, 1, &rng);
    qb = patina_table_query_bytes(t);
    q = malloc(N * qb);
    TU_OK(patina_table_identify_extract(t, NULL, q, imgs, N, NULL));
    for (i = 0; i < 2; i++) many_equals_union(ctx[i], c, q, N, i ? "two slices" : "one device");
    /* a copy of reference 5 under a second key: its query sees both, verified alike */
    {
        patina_insert_t item;
        char key[32];
        const void *descs[1] = {refs + 4 * bytes};
        fill_items(&item, (char(*)[32])key, 1, 500, 0);
        TU_OK(patina_tables_put(&t, 1, &item, 1, descs, NULL));
    }
    for (i = 0; i < 2; i++) ambiguous += many_equals_union(ctx[i], c, q, N, i ? "two slices, a copy" : "one device, a copy");
    assert_true(ambiguous > 0);
    /* only empty tables: no hit, unknown, the query's features counted */
    o.partitions = 40;
    for (i = 0, two[0] = two[1] = NULL; i < 40 && !two[1]; i++) {
        patina_table_t *p = NULL;
        o.partition = (uint32_t)i;
        TU_OK(patina_table_open(&p, ctx[0], c, NULL, &o));
        if (patina_table_size(p) == 0 && !two[0]) two[0] = p;
        else if (patina_table_size(p) == 0) two[1] = p;
        else patina_table_free(p);
    }
    assert_non_null(two[1]);
    patina_identify_opts_init(&io);
    io.k = 3;
    io.device = PATINA_DEVICE_CPU;
    TU_OK(patina_table_identify_many(two, 2, q, N, &io, h, r, NULL));
    for (i = 0; i < N; i++) {
        assert_int_equal(r[i].nhits, 0);
        assert_int_equal(r[i].decision, PATINA_DECISION_UNKNOWN);
        assert_int_equal(r[i].query_features, rs_count(q + i * qb));
    }
    /* what may not be mixed */
    TU_OK(patina_table_new(&other, ctx[0], "rootsift:m=32,n=128", NULL));
    patina_table_free(two[1]); /* the second empty partition */
    two[1] = other;
    assert_int_equal(patina_table_identify_many(two, 2, q, N, &io, h, r, NULL), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "one spec per call"));
    patina_table_free(other);
    o.partitions = 1;
    o.partition = 0;
    TU_OK(patina_table_open(&u, ctx[1], c, NULL, &o)); /* another context */
    two[1] = u;
    assert_int_equal(patina_table_identify_many(two, 2, q, N, &io, h, r, NULL), PATINA_E_INVALID);
    two[1] = two[0];
    assert_int_equal(patina_table_identify_many(two, 2, q, N, &io, h, r, NULL), PATINA_E_INVALID);
    assert_int_equal(patina_table_identify_many(two, 0, q, N, &io, h, r, NULL), PATINA_E_INVALID);
    assert_int_equal(patina_table_identify_many(NULL, 1, q, N, &io, h, r, NULL), PATINA_E_INVALID);
    o.need = 0;
    TU_OK(patina_table_new(&cedd, ctx[0], "cedd", NULL));
    two[1] = cedd;
    assert_int_equal(patina_table_identify_many(two, 2, q, N, &io, h, r, NULL), PATINA_E_INVALID);
    patina_table_free(cedd);
    patina_table_free(u);
    patina_table_free(two[0]);
    for (i = 0; i < N; i++) patina_image_release(&imgs[i]);
    patina_table_free(t);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    free(refs);
    free(q);
    for (i = 0; i < 2; i++) patina_context_free(ctx[i]);
}

/* ------------------------------------------------ search over several tables */

/* Whether two answers are the same: hits (ids, distances bit for bit),
 * offsets, rows and keys. */
static void union_results(const patina_table_results_t *a, const patina_table_results_t *b, const char *what)
{
    size_t i;
    assert_int_equal(a->nq, b->nq);
    assert_int_equal(a->rows, b->rows);
    for (i = 0; i <= a->nq; i++)
        if (a->offsets[i] != b->offsets[i]) {
            fprintf(stderr, "%s: query %zu: offset %zu, the union's %zu\n", what, i, b->offsets[i], a->offsets[i]);
            fail();
        }
    for (i = 0; i < a->offsets[a->nq]; i++)
        if (a->hits[i].id != b->hits[i].id || memcmp(&a->hits[i].distance, &b->hits[i].distance, sizeof(double))) {
            size_t j;
            fprintf(stderr, "%s: hit %zu: id %llu at %.17g, the union's id %llu at %.17g\n", what, i,
                    (unsigned long long)b->hits[i].id, b->hits[i].distance, (unsigned long long)a->hits[i].id,
                    a->hits[i].distance);
            for (j = 0; j < a->offsets[a->nq] && j < 8; j++)
                fprintf(stderr, "  %zu: %llu %.17g | %llu %.17g\n", j, (unsigned long long)a->hits[j].id,
                        a->hits[j].distance, (unsigned long long)b->hits[j].id, b->hits[j].distance);
            fail();
        }
    assert_int_equal(a->keys != NULL, b->keys != NULL);
    for (i = 0; a->keys && i < a->offsets[a->nq]; i++) assert_string_equal(a->keys[i], b->keys[i]);
}

/* patina_table_search_many over the partitions (1, 2, 5, 32: some empty)
 * of table spec of collection c equals patina_table_search on the whole
 * table, for k-NN (k = 1, 5, past the rows), range (with and without
 * max_hits, radius 0) and keys, the queries q (nq); pivots: open them with
 * the stored pivot table. Returns how many partition tables were empty. */
static size_t search_many_equals_union(patina_context_t *ctx, patina_collection_t *c, const char *spec, int pivots,
                                       const uint8_t *q, size_t nq, const char *what)
{
    static const uint32_t parts[] = {1, 2, 5, 32};
    patina_table_t *whole = NULL, *t[32];
    patina_table_opts_t o;
    patina_table_query_t tq;
    patina_table_results_t r0, r1;
    patina_search_stats_t st;
    double radius;
    size_t pi, v, i, rows, empty = 0;
    char msg[160];
    patina_table_opts_init(&o);
    o.pivots = pivots;
    TU_OK(patina_table_open(&whole, ctx, c, spec, &o));
    assert_int_equal(patina_table_pivots(whole) > 0, pivots);
    /* a radius that holds some rows of the first query and not all */
    patina_table_query_init(&tq);
    tq.k = 6;
    TU_OK(patina_table_search(whole, q, 1, &tq, &r0));
    radius = r0.hits[r0.offsets[1] - 1].distance;
    patina_table_results_release(&r0);
    for (pi = 0; pi < sizeof parts / sizeof parts[0]; pi++) {
        const uint32_t P = parts[pi];
        o.partitions = P;
        for (i = 0, rows = 0; i < P; i++) {
            o.partition = (uint32_t)i;
            TU_OK(patina_table_open(&t[i], ctx, c, spec, &o));
            rows += patina_table_size(t[i]);
            empty += patina_table_size(t[i]) == 0;
        }
        assert_int_equal(rows, patina_table_size(whole));
        for (v = 0; v < 7; v++) {
            patina_table_query_init(&tq);
            tq.device = PATINA_DEVICE_CPU;
            switch (v) {
            case 0: tq.k = 1; break;
            case 1: tq.k = 5; tq.keys = 1; break;
            case 2: tq.k = rows + 7; break; /* past the rows: every row */
            case 3: tq.kind = PATINA_QUERY_RANGE; tq.radius = radius; tq.keys = 1; break;
            case 4: tq.kind = PATINA_QUERY_RANGE; tq.radius = radius; tq.max_hits = 3; break;
            case 5: tq.kind = PATINA_QUERY_RANGE; tq.radius = 0.0; break; /* the rows equal to a query */
            default: tq.k = 3; tq.stats = &st; break;
            }
            snprintf(msg, sizeof msg, "%s, %s%s, %u partitions, variant %zu", what, spec, pivots ? " (pivots)" : "", P, v);
            TU_OK(patina_table_search(whole, q, nq, &tq, &r0));
            TU_OK(patina_table_search_many(t, P, q, nq, &tq, &r1));
            union_results(&r0, &r1, msg);
            if (tq.stats) assert_int_equal(st.cpu + st.gpu_tensor + st.gpu_filter + st.gpu_exact >= nq, 1);
            patina_table_results_release(&r0);
            patina_table_results_release(&r1);
        }
        for (i = 0; i < P; i++) patina_table_free(t[i]);
    }
    patina_table_free(whole);
    return empty;
}

/* patina_table_search_many over a collection's partitions equals one table
 * of their union: CEDD (Tanimoto, its AVX2 filter and k-th bound across
 * tables) and SQFD scanned and through the stored pivot table, on one
 * device and on two CPU slices ("0,0"), with exact duplicates of a row
 * under other keys (ties by id across tables); the refusals (specs,
 * contexts, a table twice, none, k = 0). */
static void test_search_many(void **state)
{
    enum { N = 60, NQ = 7 };
    static const char *const specs[] = {"cedd", "signature:k=8"};
    patina_context_t *ctx[2] = {ctx_new(), ctx_gpus("0,0")};
    size_t si, i, empty = 0;
    (void)state;
    for (si = 0; si < 2; si++) {
        uint8_t *rows, *extra, *q;
        size_t bytes, eb;
        char *dir = tu_table_collection(ctx[0], specs[si], N, 48, 1, 41 + si, &rows, &bytes);
        patina_collection_t *c = NULL;
        patina_table_t *t = NULL;
        patina_insert_t items[3];
        char keys[3][32];
        const void *descs[1];
        TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_WRITE, 0));
        TU_OK(patina_table_open(&t, ctx[0], c, specs[si], NULL));
        /* three copies of row 5 under other keys: equal distances, ordered by id across partitions */
        extra = malloc(3 * bytes);
        for (i = 0; i < 3; i++) memcpy(extra + i * bytes, rows + 4 * bytes, bytes);
        descs[0] = extra;
        fill_items(items, keys, 3, 300, 0);
        TU_OK(patina_tables_put(&t, 1, items, 3, descs, NULL));
        /* queries: rows of the table (one with its copies) and new images */
        q = malloc(NQ * bytes);
        memcpy(q, rows + 4 * bytes, bytes);
        memcpy(q + bytes, rows + 11 * bytes, bytes);
        free(extra);
        extra = describe(ctx[0], specs[si], NQ - 2, 97, &eb);
        memcpy(q + 2 * bytes, extra, (NQ - 2) * bytes);
        for (i = 0; i < 2; i++) {
            const char *what = i ? "two slices" : "one device";
            empty += search_many_equals_union(ctx[i], c, specs[si], 0, q, NQ, what);
            if (si == 1) {
                patina_pivot_opts_t po;
                patina_pivot_opts_init(&po);
                po.pivots = 4;
                if (i == 0) TU_OK(patina_table_build_pivots(t, &po));
                empty += search_many_equals_union(ctx[i], c, specs[si], 1, q, NQ, what);
            }
        }
        patina_table_free(t);
        patina_collection_close(c);
        tu_remove_tree(dir);
        free(dir);
        free(rows);
        free(extra);
        free(q);
    }
    assert_true(empty > 0); /* 32 partitions of 63 rows leave some empty */
    /* detached tables: keys from the table that holds each hit; what may not be mixed */
    {
        patina_table_t *d[3] = {NULL, NULL, NULL}, *whole = NULL, *other = NULL, *two[2];
        patina_change_t ch[12];
        char keys[12][16];
        uint8_t *rows;
        size_t bytes;
        patina_table_query_t tq;
        patina_table_results_t r0, r1;
        rows = describe(ctx[0], "cedd", 12, 5, &bytes);
        for (i = 0; i < 3; i++) TU_OK(patina_table_new(&d[i], ctx[0], "cedd", NULL));
        TU_OK(patina_table_new(&whole, ctx[0], "cedd", NULL));
        memset(ch, 0, sizeof ch);
        for (i = 0; i < 12; i++) {
            snprintf(keys[i], sizeof keys[i], "d/%02zu", i);
            ch[i].op = PATINA_CHANGE_PUT;
            ch[i].id = 100 + i;
            ch[i].key = keys[i];
            ch[i].desc = rows + i * bytes;
            TU_OK(patina_table_apply(d[i % 2], &ch[i], 1, i + 1, NULL)); /* d[2] stays empty */
        }
        TU_OK(patina_table_apply(whole, ch, 12, 12, NULL));
        patina_table_query_init(&tq);
        tq.k = 4;
        tq.keys = 1;
        TU_OK(patina_table_search(whole, rows, 12, &tq, &r0));
        TU_OK(patina_table_search_many(d, 3, rows, 12, &tq, &r1));
        union_results(&r0, &r1, "detached");
        assert_int_equal(r1.version, 0); /* the smallest: the empty table's */
        patina_table_results_release(&r0);
        patina_table_results_release(&r1);
        TU_OK(patina_table_search_many(d, 3, rows, 0, &tq, &r1)); /* no query */
        assert_int_equal(r1.nq, 0);
        assert_int_equal(r1.rows, 12);
        patina_table_results_release(&r1);
        TU_OK(patina_table_new(&other, ctx[0], "lbp8", NULL));
        two[0] = d[0];
        two[1] = other;
        assert_int_equal(patina_table_search_many(two, 2, rows, 1, &tq, &r1), PATINA_E_INVALID);
        assert_non_null(strstr(patina_last_error(), "one spec per call"));
        patina_table_free(other);
        TU_OK(patina_table_new(&other, ctx[1], "cedd", NULL)); /* another context */
        two[1] = other;
        assert_int_equal(patina_table_search_many(two, 2, rows, 1, &tq, &r1), PATINA_E_INVALID);
        assert_non_null(strstr(patina_last_error(), "context"));
        two[1] = d[0];
        assert_int_equal(patina_table_search_many(two, 2, rows, 1, &tq, &r1), PATINA_E_INVALID);
        assert_non_null(strstr(patina_last_error(), "again"));
        assert_int_equal(patina_table_search_many(d, 0, rows, 1, &tq, &r1), PATINA_E_INVALID);
        assert_int_equal(patina_table_search_many(NULL, 1, rows, 1, &tq, &r1), PATINA_E_INVALID);
        assert_int_equal(patina_table_search_many(d, 2, NULL, 1, &tq, &r1), PATINA_E_INVALID);
        tq.k = 0;
        assert_int_equal(patina_table_search_many(d, 2, rows, 1, &tq, &r1), PATINA_E_INVALID);
        assert_null(r1.offsets);
        patina_table_free(other);
        patina_table_free(whole);
        for (i = 0; i < 3; i++) patina_table_free(d[i]);
        free(rows);
    }
    for (i = 0; i < 2; i++) patina_context_free(ctx[i]);
}

/* The same on real photographs (the sample set: scripts/fetch-samples.sh):
 * references the first photographs, queries their central crops halved and
 * other photographs. */
static void test_identify_many_photos(void **state)
{
    enum { NREF = 24, NQ = 10 };
    const char *env = getenv("PATINA_SAMPLES");
    const char *spec = "rootsift:m=128,n=256,maxside=320";
    char **files = NULL;
    size_t nf = tu_list_files(env && *env ? env : PATINA_SAMPLES_DIR, "jpg,jpeg,png", &files), i, bytes;
    patina_context_t *ctx = ctx_new();
    patina_extractor_t *ex = NULL;
    patina_collection_t *c = NULL;
    patina_table_t *t = NULL;
    patina_table_opts_t o;
    patina_image_t imgs[NREF + NQ];
    patina_insert_t items[NREF];
    char keys[NREF][32];
    uint8_t *descs, *q;
    char *dir;
    (void)state;
    if (nf < NREF + NQ) {
        fprintf(stderr, "test_table: identification over several tables on photographs skipped (%zu sample "
                        "photographs; scripts/fetch-samples.sh)\n", nf);
        tu_free_list(files, nf);
        patina_context_free(ctx);
        return;
    }
    TU_OK(patina_extractor_new(&ex, spec));
    bytes = patina_extractor_bytes(ex);
    descs = malloc(NREF * bytes);
    for (i = 0; i < NREF + NQ; i++) TU_OK(patina_image_load(&imgs[i], files[i * (nf / (NREF + NQ))], NULL));
    TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, descs, imgs, NREF, NULL));
    memset(items, 0, sizeof items);
    for (i = 0; i < NREF; i++) {
        snprintf(keys[i], sizeof keys[i], "photo/%02zu.jpg", i);
        items[i].key = keys[i];
        items[i].size = 1000 + i;
        items[i].sha256[0] = (uint8_t)i;
        items[i].width = imgs[i].width;
        items[i].height = imgs[i].height;
        items[i].desc = descs + i * bytes;
    }
    dir = tu_tempdir("table");
    TU_OK(patina_collection_open(&c, tu_path(dir, "c"), PATINA_OPEN_CREATE, 0));
    TU_OK(patina_collection_put(c, patina_extractor_spec(ex), bytes, items, NREF, NULL));
    /* queries: the first references' central crops at half size, then photographs not registered */
    for (i = 0; i < NQ / 2; i++) {
        patina_image_t *im = &imgs[i * 3], crop;
        const int w = im->width * 3 / 4 / 2, h = im->height * 3 / 4 / 2;
        TU_OK(patina_image_init(&crop, w, h));
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                memcpy(crop.data + (size_t)y * crop.stride + (size_t)x * 3,
                       im->data + (size_t)(im->height / 8 + 2 * y) * im->stride + (size_t)(im->width / 8 + 2 * x) * 3, 3);
        patina_image_release(&imgs[NREF + i]);
        imgs[NREF + i] = crop;
    }
    patina_table_opts_init(&o);
    o.need = PATINA_CAP_IDENTIFY;
    TU_OK(patina_table_open(&t, ctx, c, NULL, &o));
    q = malloc(NQ * patina_table_query_bytes(t));
    TU_OK(patina_table_identify_extract(t, NULL, q, imgs + NREF, NQ, NULL));
    many_equals_union(ctx, c, q, NQ, "photographs");
    patina_table_free(t);
    for (i = 0; i < NREF + NQ; i++) patina_image_release(&imgs[i]);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    free(descs);
    free(q);
    patina_extractor_free(ex);
    tu_free_list(files, nf);
    patina_context_free(ctx);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_resolves),
        cmocka_unit_test(test_search_equals_scan),
        cmocka_unit_test(test_writes_reach_every_table),
        cmocka_unit_test(test_partitions_and_streams),
        cmocka_unit_test(test_readers_during_writes),
        cmocka_unit_test(test_two_processes),
        cmocka_unit_test(test_identify_through_table),
        cmocka_unit_test(test_pivots_through_table),
        cmocka_unit_test(test_context_devices),
        cmocka_unit_test(test_slices_search),
        cmocka_unit_test(test_slices_sqfd),
        cmocka_unit_test(test_slices_identify),
        cmocka_unit_test(test_identify_many),
        cmocka_unit_test(test_search_many),
        cmocka_unit_test(test_warm),
        cmocka_unit_test(test_identify_many_photos),
    };
    if (argc == 4 && !strcmp(argv[1], "writer")) return writer(argv[2], atoi(argv[3]));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
