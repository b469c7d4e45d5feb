/* Tests of reference views (the rootsift option `views`: src/features/rootsift_views.c, the refset's rows
 * and the fold by item in src/identify/identify.c): the spec and its bounds, views = 0 unchanged, the views'
 * images, a set's rows put / replaced / removed together, hits that name items once, the fold before the
 * verified candidates are cut, a live table and its store keeping the setting, a half-scale blurred
 * query that the views help, and the half-size query (a magnified photograph halved; the fusion of its
 * answer). Small images and synthetic records: fast. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "features/family.h"
#include "features/rootsift.h"
#include "identify/identify.h"
#include "patina/table.h"
#include "testutil.h"
#include "idfutil.h"

#define M 48 /* rows per record in the synthetic sets */

/* ------------------------------------------------------------------ spec */

static void test_spec(void **state)
{
    patina_extractor_t *a = NULL, *b = NULL, *c = NULL;
    (void)state;
    TU_OK(patina_extractor_new(&a, "rootsift"));
    TU_OK(patina_extractor_new(&b, "rootsift:views=0"));
    TU_OK(patina_extractor_new(&c, "rootsift:views=2"));
    /* views = 0 is the spec tables were stored under, byte for byte */
    assert_string_equal(patina_extractor_spec(a), patina_extractor_spec(b));
    assert_null(strstr(patina_extractor_spec(a), "views"));
    assert_non_null(strstr(patina_extractor_spec(c), ",views=2"));
    assert_int_equal(patina_extractor_bytes(c), 3 * patina_extractor_bytes(a));
    patina_extractor_free(c);
    TU_OK(patina_extractor_new(&c, "rootsift:views=3"));
    assert_int_equal(patina_extractor_bytes(c), 4 * patina_extractor_bytes(a));
    patina_extractor_free(a);
    patina_extractor_free(b);
    patina_extractor_free(c);
    /* views = 3: the geometric view, the soft view at full size, then the half-size view */
    assert_int_equal(rs_view_kind(3, 1), RS_VIEW_GEOMETRIC);
    assert_int_equal(rs_view_kind(3, 2), RS_VIEW_SOFT_FULL);
    assert_int_equal(rs_view_kind(3, 3), RS_VIEW_SOFT_HALF);
    assert_int_equal(rs_view_kind(3, 4), 0);
    /* out of bounds: PATINA_E_INVALID naming the option */
    assert_int_equal(patina_extractor_new(&a, "rootsift:views=4"), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "views"));
    assert_int_equal(patina_extractor_new(&a, "rootsift:views=-1"), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "views"));
    {
        patina_refset_t *rs = NULL;
        assert_int_equal(patina_refset_new(&rs, "rootsift:views=9"), PATINA_E_INVALID);
        assert_null(rs);
    }    /* the acceptance threshold's calibration follows the views: views = 0 is the table of before */
    {
        static const double fars[] = {1, 0.05, 0.02, 0.01, 0.005, 0.001};
        patina_identify_opts_t inl;
        patina_identify_opts_init(&inl);
        inl.accept = PATINA_ACCEPT_INLIERS;
        for (size_t i = 0; i < sizeof fars / sizeof fars[0]; i++) {
            double t0, t, t2, i0, i2;
            TU_OK(patina_identify_far_threshold(fars[i], &t0));
            TU_OK(patina_identify_far_threshold_table("rootsift:m=64", fars[i], &t));
            TU_OK(patina_identify_far_threshold_table("rootsift:views=2", fars[i], &t2));
            assert_true(t == t0);
            assert_true(fars[i] == 1 ? t2 == 0 : t2 != t0); /* the views' own significance table */
            /* counted in inliers, more rows give impostors more chance inliers: never less */
            TU_OK(patina_identify_far_threshold_opts("rootsift:m=64", &inl, fars[i], &i0));
            TU_OK(patina_identify_far_threshold_opts("rootsift:views=2", &inl, fars[i], &i2));
            assert_true(i2 >= i0);
        }
        double t;
        TU_OK(patina_identify_far_threshold_table("rootsift:views=3", 0.01, &t));
        assert_true(t == PATINA_SIGNIFICANCE_VIEWS3);
        TU_OK(patina_identify_far_threshold_table("rootsift", 0.01, &t));
        assert_true(t == PATINA_SIGNIFICANCE_DEFAULT);
        TU_OK(patina_identify_far_threshold_opts("rootsift", &inl, 0.01, &t));
        assert_true(t == PATINA_THRESHOLD_DEFAULT);
        assert_int_equal(patina_identify_far_threshold_table("cedd", 0.01, &t), PATINA_E_INVALID);
        assert_int_equal(patina_identify_far_threshold_table("rootsift:views=2", 0.0001, &t), PATINA_E_INVALID);
    }
}

/* ------------------------------------------------------------ the images */

static void test_view_images(void **state)
{
    patina_image_t img, v;
    tu_rng_t r;
    int kind;
    (void)state;
    tu_rng_seed(&r, 7);
    /* a flat image gives flat views of its level (the filters sum to one) */
    tu_random_image(&img, 101, 60, 3, &r);
    for (size_t i = 0; i < (size_t)img.height * img.stride; i++) img.data[i] = 77;
    for (kind = RS_VIEW_SOFT_HALF; kind <= RS_VIEW_SOFT_FULL; kind++) {
        TU_OK(rs_view_make(&v, &img, kind));
        if (kind == RS_VIEW_SOFT_HALF) {
            assert_int_equal(v.width, 51);
            assert_int_equal(v.height, 30);
        } else if (kind == RS_VIEW_SOFT_FULL) {
            assert_int_equal(v.width, 101);
            assert_int_equal(v.height, 60);
        } else { /* the upright rectangle inside the 30-degree rotation: about half the area */
            assert_true(v.width > 20 && v.width < 101 && v.height > 10 && v.height < 60);
        }
        for (int y = 0; y < v.height; y++)
            for (int x = 0; x < 3 * v.width; x++) assert_int_equal(v.data[(size_t)y * v.stride + x], 77);
        patina_image_release(&v);
    }
    patina_image_release(&img);
    /* deterministic; an empty image has empty views */
    {
        patina_image_t a, b, e;
        tu_random_image(&img, 64, 48, 1, &r);
        for (kind = RS_VIEW_SOFT_HALF; kind <= RS_VIEW_SOFT_FULL; kind++) {
            TU_OK(rs_view_make(&a, &img, kind));
            TU_OK(rs_view_make(&b, &img, kind));
            assert_int_equal(a.width, b.width);
            assert_memory_equal(a.data, b.data, (size_t)a.height * a.stride);
            patina_image_release(&a);
            patina_image_release(&b);
        }
        memset(&e, 0, sizeof e);
        TU_OK(rs_view_make(&a, &e, RS_VIEW_GEOMETRIC));
        assert_int_equal(a.width, 0);
        patina_image_release(&img);
    }
    /* the half view's point mapping: the view's corner pixels' centres onto the image's */
    {
        double x, y;
        assert_true(rs_view_point(RS_VIEW_SOFT_HALF, 100, 60, -0.5, -0.5, &x, &y));
        assert_true(fabs(x + 0.5) < 1e-9 && fabs(y + 0.5) < 1e-9);
        assert_true(rs_view_point(RS_VIEW_SOFT_HALF, 100, 60, 49.5, 29.5, &x, &y));
        assert_true(fabs(x - 99.5) < 1e-9 && fabs(y - 59.5) < 1e-9);
        /* the geometric view's centre is the image's (the rotation and the perspective are about it) */
        assert_true(rs_view_point(RS_VIEW_GEOMETRIC, 200, 200, 0, 0, &x, &y)); /* a corner: on the edge */
        assert_true(x >= -2 && x <= 202 && y >= -2 && y <= 202);
        assert_true(rs_view_point(RS_VIEW_GEOMETRIC, 200, 200, 73, 73, &x, &y)); /* the middle: inside */
        assert_true(x >= 50 && x <= 150 && y >= 50 && y <= 150);
        assert_false(rs_view_point(0, 100, 60, 0, 0, &x, &y));
    }
}

/* views = 0 records are the records of before, and with views the first
 * block is that record: the views only add blocks. */
static void test_views0_records(void **state)
{
    patina_extractor_t *e0 = NULL, *e2 = NULL;
    patina_image_t img;
    unsigned char *r0, *r2;
    size_t b0;
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 11);
    tu_random_image(&img, 96, 80, 2, &r);
    TU_OK(patina_extractor_new(&e0, "rootsift:m=64"));
    TU_OK(patina_extractor_new(&e2, "rootsift:m=64,views=2"));
    b0 = patina_extractor_bytes(e0);
    r0 = malloc(b0);
    r2 = malloc(3 * b0);
    TU_OK(e0->family->cpu(e0->params, r0, &img));
    TU_OK(e2->family->cpu(e2->params, r2, &img));
    {
        const rootsift_params_t *p = (const rootsift_params_t *)(const void *)e0->params;
        unsigned char *ref = malloc(b0);
        TU_OK(rs_extract(p, 64, ref, &img)); /* the extractor of before */
        assert_memory_equal(r0, ref, b0);
        free(ref);
    }
    assert_memory_equal(r2, r0, b0);
    for (int v = 0; v < 3; v++) TU_OK(rs_record_check(r2 + v * b0, b0, "view"));
    assert_true(rs_size(r2 + b0, 2) < 96); /* the geometric view's own size */
    assert_int_equal(rs_size(r2 + 2 * b0, 2), 96); /* the soft view at full size */
    {   /* views = 3: views = 2's blocks, then the half-size view */
        patina_extractor_t *e3 = NULL;
        unsigned char *r3 = malloc(4 * b0);
        TU_OK(patina_extractor_new(&e3, "rootsift:m=64,views=3"));
        TU_OK(e3->family->cpu(e3->params, r3, &img));
        assert_memory_equal(r3, r2, 3 * b0);
        TU_OK(rs_record_check(r3 + 3 * b0, b0, "view"));
        assert_int_equal(rs_size(r3 + 3 * b0, 2), 48); /* round(96 / 2) */
        free(r3);
        patina_extractor_free(e3);
    }
    free(r0);
    free(r2);
    patina_extractor_free(e0);
    patina_extractor_free(e2);
    patina_image_release(&img);
}

/* ------------------------------------------------------- synthetic items */

/* An item record of 3 blocks of M rows: block v's rows from rows[v] (count
 * c[v]), geometry geom[v] (4 per row). */
static unsigned char *make_item(uint8_t *const rows[3], const size_t c[3], float *const geom[3])
{
    const size_t b = rs_record_bytes(M, RS_QUANT_U8);
    unsigned char *it = malloc(3 * b);
    for (int v = 0; v < 3; v++) {
        unsigned char *rec = make_record(M, c[v], rows[v], geom[v], 200, 200);
        memcpy(it + v * b, rec, b);
        free(rec);
    }
    return it;
}

static void random_geom(float *g, size_t n, tu_rng_t *r)
{
    for (size_t i = 0; i < n; i++) {
        g[4 * i] = (float)tu_rng_below(r, 190) + 5;
        g[4 * i + 1] = (float)tu_rng_below(r, 190) + 5;
        g[4 * i + 2] = 2.0f;
        g[4 * i + 3] = 0.0f;
    }
}

/* N items of 3 blocks of random rows; the query is made of block 2 of item
 * `target`'s rows (perturbed, the same keypoints): only that view matches. */
#define N 12
typedef struct items {
    unsigned char *rec[N];
    uint8_t *rows[N][3];
    float *geom[N][3];
    unsigned char *query;
} items_t;

static void items_make(items_t *s, size_t target, uint64_t seed)
{
    tu_rng_t r;
    const size_t c[3] = {M, M, M};
    tu_rng_seed(&r, seed);
    for (size_t i = 0; i < N; i++) {
        for (int v = 0; v < 3; v++) {
            s->rows[i][v] = malloc(M * 128);
            s->geom[i][v] = malloc(M * 4 * sizeof(float));
            for (size_t j = 0; j < M; j++) random_row(s->rows[i][v] + j * 128, &r);
            random_geom(s->geom[i][v], M, &r);
        }
        s->rec[i] = make_item(s->rows[i], c, s->geom[i]);
    }
    {
        uint8_t *q = malloc(M * 128);
        for (size_t j = 0; j < M; j++) perturb(q + j * 128, s->rows[target][2] + j * 128, 3, &r);
        /* a query record: n = 768 rows of the default spec, M of them used */
        s->query = make_record(768, M, q, s->geom[target][2], 200, 200);
        free(q);
    }
}

static void items_free(items_t *s)
{
    for (size_t i = 0; i < N; i++) {
        for (int v = 0; v < 3; v++) {
            free(s->rows[i][v]);
            free(s->geom[i][v]);
        }
        free(s->rec[i]);
    }
    free(s->query);
}

#define SPEC2 "rootsift:m=48,views=2"
#define SPEC0 "rootsift:m=48"

/* Two answers of one query the same: decision, hits, their matches, inliers, verification and scores. */
static void assert_same_answer(const patina_identify_hit_t *h, const patina_identify_result_t *r,
                               const patina_identify_hit_t *want, const patina_identify_result_t *rwant)
{
    assert_int_equal(r->nhits, rwant->nhits);
    assert_int_equal(r->decision, rwant->decision);
    for (size_t i = 0; i < r->nhits; i++) {
        assert_int_equal(h[i].id, want[i].id);
        assert_int_equal(h[i].matches, want[i].matches);
        assert_int_equal(h[i].inliers, want[i].inliers);
        assert_int_equal(h[i].verified, want[i].verified);
        assert_true(h[i].score == want[i].score);
    }
}

static void assert_items_once(const patina_identify_hit_t *h, size_t n)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) assert_true(h[i].id != h[j].id);
}

/* The N items of items_make(s, 5, 3) in two sets: rs (SPEC2) with each item's
 * three blocks (its reference and two views), base (SPEC0) with block 0 only
 * (no views). */
static void views_and_base(items_t *s, patina_refset_t **rs, patina_refset_t **base)
{
    const size_t b = rs_record_bytes(M, RS_QUANT_U8);
    items_make(s, 5, 3);
    TU_OK(patina_refset_new(rs, SPEC2));
    TU_OK(patina_refset_new(base, SPEC0));
    for (size_t i = 0; i < N; i++) {
        TU_OK(patina_refset_put(*rs, i + 1, s->rec[i], 3 * b));
        TU_OK(patina_refset_put(*base, i + 1, s->rec[i], b)); /* block 0 only: no views */
    }
}

static void test_refset_rows(void **state)
{
    items_t s;
    patina_refset_t *rs = NULL, *base = NULL;
    patina_identify_opts_t o;
    patina_identify_hit_t hits[N];
    patina_identify_result_t res;
    const size_t b = rs_record_bytes(M, RS_QUANT_U8);
    (void)state;
    views_and_base(&s, &rs, &base);
    assert_int_equal(patina_refset_size(rs), N);
    assert_int_equal(patina_refset_rows(rs), 3 * N);
    {
        const uint64_t *ids = patina_refset_ids(rs);
        for (size_t i = 0; i < 3 * N; i++) assert_int_equal(ids[i], i / 3 + 1);
    }
    /* a record of one block (or of another size) does not belong in a set of views */
    assert_int_equal(patina_refset_put(rs, 99, s.rec[0], b), PATINA_E_INVALID);
    assert_int_equal(patina_refset_rows(rs), 3 * N);

    /* the query shows item 6's view 2 only: found with views, not without */
    patina_identify_opts_init(&o);
    o.k = N;
    o.threshold = 8;
    o.accept = PATINA_ACCEPT_INLIERS;
    TU_OK(patina_identify(NULL, rs, s.query, 1, &o, hits, &res));
    assert_true(res.nhits >= 1);
    assert_int_equal(hits[0].id, 6);
    assert_true(hits[0].verified && hits[0].inliers >= 40);
    assert_int_equal(res.decision, PATINA_DECISION_MATCH);
    assert_items_once(hits, res.nhits);
    TU_OK(patina_identify(NULL, base, s.query, 1, &o, hits, &res));
    assert_int_equal(res.decision, PATINA_DECISION_UNKNOWN);

    /* the pairs of the best row: as many as the inliers */
    {
        size_t n = 0;
        TU_OK(patina_identify(NULL, rs, s.query, 1, &o, hits, &res));
        TU_OK(patina_identify_pairs(rs, s.query, 6, &o, NULL, 0, &n));
        assert_int_equal(n, hits[0].inliers);
    }

    /* an update replaces every row: item 6 without the matching view */
    {
        uint8_t *rows[3] = {s.rows[0][0], s.rows[0][1], s.rows[0][0]};
        float *geom[3] = {s.geom[0][0], s.geom[0][1], s.geom[0][0]};
        const size_t c[3] = {M, M, M};
        unsigned char *it = make_item(rows, c, geom);
        TU_OK(patina_refset_put(rs, 6, it, 3 * b));
        free(it);
        assert_int_equal(patina_refset_rows(rs), 3 * N);
        TU_OK(patina_identify(NULL, rs, s.query, 1, &o, hits, &res));
        assert_int_equal(res.decision, PATINA_DECISION_UNKNOWN);
        TU_OK(patina_refset_put(rs, 6, s.rec[5], 3 * b));
    }
    /* a removal drops every row */
    TU_OK(patina_refset_remove(rs, 6));
    assert_int_equal(patina_refset_size(rs), N - 1);
    assert_int_equal(patina_refset_rows(rs), 3 * (N - 1));
    TU_OK(patina_identify(NULL, rs, s.query, 1, &o, hits, &res));
    for (size_t i = 0; i < res.nhits; i++) assert_true(hits[i].id != 6);
    assert_int_equal(res.decision, PATINA_DECISION_UNKNOWN);
    assert_int_equal(patina_refset_remove(rs, 6), PATINA_E_NOTFOUND);
    /* put back below the largest id: its rows go between the others' */
    TU_OK(patina_refset_put(rs, 6, s.rec[5], 3 * b));
    {
        const uint64_t *ids = patina_refset_ids(rs);
        for (size_t i = 0; i < 3 * N; i++) assert_int_equal(ids[i], i / 3 + 1);
    }
    TU_OK(patina_identify(NULL, rs, s.query, 1, &o, hits, &res));
    assert_int_equal(hits[0].id, 6);
    patina_refset_free(rs);
    patina_refset_free(base);
    items_free(&s);
}

/* The default threshold is the references' own calibration at FAR 1%,
 * resolved by the call: its significance for a set of views=2 or without
 * views (24 and 13 inliers with accept = INLIERS); the
 * result says which it applied, and the answers equal those with that
 * threshold given. */
static void test_default_threshold(void **state)
{
    items_t s;
    patina_refset_t *rs = NULL, *base = NULL;
    patina_identify_opts_t o, given;
    patina_identify_hit_t hits[N], ghits[N];
    patina_identify_result_t res, gres;
    double t2, t0;
    (void)state;
    views_and_base(&s, &rs, &base);
    TU_OK(patina_identify_far_threshold_table(SPEC2, 0.01, &t2));
    TU_OK(patina_identify_far_threshold_table(SPEC0, 0.01, &t0));
    assert_true(t2 == PATINA_SIGNIFICANCE_VIEWS2 && t0 == PATINA_SIGNIFICANCE_DEFAULT);
    {
        patina_identify_opts_t inl;
        double i2, i0;
        patina_identify_opts_init(&inl);
        inl.accept = PATINA_ACCEPT_INLIERS;
        TU_OK(patina_identify_far_threshold_opts(SPEC2, &inl, 0.01, &i2));
        TU_OK(patina_identify_far_threshold_opts(SPEC0, &inl, 0.01, &i0));
        assert_true(i2 == 24 && i0 == PATINA_THRESHOLD_DEFAULT);
    }
    {
        /* the view pass has its own significance table with views (none without) */
        patina_identify_opts_t vp;
        double p2, p0, p2s;
        patina_identify_opts_init(&vp);
        vp.view_candidates = 64;
        TU_OK(patina_identify_far_threshold_opts(SPEC2, &vp, 0.01, &p2));
        TU_OK(patina_identify_far_threshold_opts(SPEC2, &vp, 0.001, &p2s));
        TU_OK(patina_identify_far_threshold_opts(SPEC0, &vp, 0.01, &p0));
        assert_true(p2 == 3 && p2s == 19 && p0 == PATINA_SIGNIFICANCE_DEFAULT);
        {   /* and the pass with the half-size views in its first pass, where the views hold one */
            double h3, h3s, p3;
            TU_OK(patina_identify_far_threshold_opts("rootsift:m=48,views=3", &vp, 0.01, &p3));
            vp.half_view_features = 64;
            TU_OK(patina_identify_far_threshold_opts("rootsift:m=48,views=3", &vp, 0.01, &h3));
            TU_OK(patina_identify_far_threshold_opts("rootsift:m=48,views=3", &vp, 0.001, &h3s));
            assert_true(p3 == 3 && h3 == 3.9 && h3s == 20);
            vp.half_view_features = 0;
        }
        vp.k = N;
        TU_OK(patina_identify(NULL, rs, s.query, 1, &vp, hits, &res));
        assert_true(res.threshold == 3);
    }
    patina_identify_opts_init(&o);
    assert_true(o.threshold == PATINA_THRESHOLD_CALIBRATED);
    o.k = N;
    for (int v = 0; v < 2; v++) {
        patina_refset_t *set = v ? rs : base;
        const double want = v ? t2 : t0;
        TU_OK(patina_identify(NULL, set, s.query, 1, &o, hits, &res));
        assert_true(res.threshold == want);
        given = o;
        given.threshold = want;
        TU_OK(patina_identify(NULL, set, s.query, 1, &given, ghits, &gres));
        assert_true(gres.threshold == want);
        assert_int_equal(res.decision, gres.decision);
        assert_int_equal(res.nhits, gres.nhits);
        assert_memory_equal(hits, ghits, res.nhits * sizeof *hits);
        /* NULL options: the defaults, so the same threshold */
        TU_OK(patina_identify(NULL, set, s.query, 1, NULL, hits, &res));
        assert_true(res.threshold == want);
    }
    /* a negative threshold other than the default's is refused */
    o.threshold = -2;
    assert_int_equal(patina_identify(NULL, rs, s.query, 1, &o, hits, &res), PATINA_E_INVALID);
    patina_refset_free(rs);
    patina_refset_free(base);
    items_free(&s);
}

/* The fold comes before the verified candidates are cut: item A's three
 * rows all beat item B's best, yet with verify_top = 2 both A and B are
 * verified (rows would have verified A twice and left B out), and B is
 * rank 2, not another row of A. */
static void test_fold_before_verify(void **state)
{
    tu_rng_t r;
    const size_t b = rs_record_bytes(M, RS_QUANT_U8);
    uint8_t *qrows = malloc(M * 128), *arows[3], *brows[3];
    float *geom = malloc(M * 4 * sizeof(float));
    patina_refset_t *rs = NULL;
    unsigned char *query, *a, *bb;
    patina_identify_opts_t o;
    patina_identify_hit_t hits[4];
    patina_identify_result_t res;
    const size_t c[3] = {M, M, M};
    float *g3[3] = {geom, geom, geom};
    (void)state;
    tu_rng_seed(&r, 5);
    for (size_t j = 0; j < M; j++) random_row(qrows + j * 128, &r);
    random_geom(geom, M, &r);
    for (int v = 0; v < 3; v++) {
        arows[v] = malloc(M * 128);
        brows[v] = malloc(M * 128);
        for (size_t j = 0; j < M; j++) { /* A: every view shares 40 rows with the query, B: 20 */
            if (j < 40) perturb(arows[v] + j * 128, qrows + j * 128, 2, &r);
            else random_row(arows[v] + j * 128, &r);
            if (j < 20 && v == 0) perturb(brows[v] + j * 128, qrows + j * 128, 2, &r);
            else random_row(brows[v] + j * 128, &r);
        }
    }
    a = make_item(arows, c, g3);
    bb = make_item(brows, c, g3);
    query = make_record(768, M, qrows, geom, 200, 200);
    TU_OK(patina_refset_new(&rs, SPEC2));
    TU_OK(patina_refset_put(rs, 3, a, 3 * b));
    TU_OK(patina_refset_put(rs, 9, bb, 3 * b));
    patina_identify_opts_init(&o);
    o.k = 4;
    o.verify_top = 2;
    o.threshold = 10;
    o.accept = PATINA_ACCEPT_INLIERS;
    TU_OK(patina_identify(NULL, rs, query, 1, &o, hits, &res));
    assert_int_equal(res.nhits, 2); /* k clamped to the items, not the rows */
    assert_int_equal(hits[0].id, 3);
    assert_int_equal(hits[1].id, 9);
    assert_true(hits[0].verified && hits[1].verified);
    assert_true(hits[0].inliers >= 35 && hits[1].inliers >= 15);
    assert_int_equal(res.decision, PATINA_DECISION_AMBIGUOUS); /* both reach 10: two items, not A twice */
    o.verify_top = 1;
    TU_OK(patina_identify(NULL, rs, query, 1, &o, hits, &res));
    assert_int_equal(res.nhits, 2);
    assert_int_equal(hits[1].id, 9);
    assert_false(hits[1].verified);
    assert_int_equal(res.decision, PATINA_DECISION_MATCH);
    patina_refset_free(rs);
    for (int v = 0; v < 3; v++) {
        free(arows[v]);
        free(brows[v]);
    }
    free(qrows);
    free(geom);
    free(a);
    free(bb);
    free(query);
}

/* The view pass (opts.view_candidates): the items' first rows are matched,
 * then the other rows of the best N by those. Item A shares 5 rows with
 * the query in its first row and 40 in its first view, B 20 and C 10 in
 * their first rows, D nothing: every row matched ranks A first; a pass over
 * the best 2 by first rows (B, C) leaves A at its first row's matches,
 * third; over the best 3 it finds A's view. A pass over every item gives
 * the answer of matching every row, verified or not. */
static void test_view_pass(void **state)
{
    tu_rng_t r;
    const size_t b = rs_record_bytes(M, RS_QUANT_U8), c[3] = {M, M, M};
    static const int shared[4][3] = {{5, 40, 0}, {20, 0, 0}, {10, 0, 0}, {0, 0, 0}};
    static const uint64_t ids[4] = {3, 5, 7, 9};
    uint8_t *qrows = malloc(M * 128), *rows[4][3];
    float *geom = malloc(M * 4 * sizeof(float));
    float *g3[3] = {geom, geom, geom};
    unsigned char *query, *items[4];
    patina_refset_t *rs = NULL;
    patina_identify_opts_t o;
    patina_identify_hit_t hits[4], all[4];
    patina_identify_result_t res, rall;
    (void)state;
    tu_rng_seed(&r, 17);
    for (size_t j = 0; j < M; j++) random_row(qrows + j * 128, &r);
    random_geom(geom, M, &r);
    TU_OK(patina_refset_new(&rs, SPEC2));
    for (int i = 0; i < 4; i++) {
        for (int v = 0; v < 3; v++) {
            rows[i][v] = malloc(M * 128);
            for (size_t j = 0; j < M; j++) {
                if ((int)j < shared[i][v]) perturb(rows[i][v] + j * 128, qrows + j * 128, 2, &r);
                else random_row(rows[i][v] + j * 128, &r);
            }
        }
        items[i] = make_item(rows[i], c, g3);
        TU_OK(patina_refset_put(rs, ids[i], items[i], 3 * b));
    }
    query = make_record(768, M, qrows, geom, 200, 200);
    patina_identify_opts_init(&o);
    o.k = 4;
    o.verify = 0;
    o.threshold = 0;
    TU_OK(patina_identify(NULL, rs, query, 1, &o, all, &rall)); /* every row */
    assert_int_equal(rall.nhits, 3);
    assert_int_equal(all[0].id, 3);
    assert_true(all[0].matches >= 35);
    assert_int_equal(all[1].id, 5);
    assert_int_equal(all[2].id, 7);
    o.view_candidates = 2;
    TU_OK(patina_identify(NULL, rs, query, 1, &o, hits, &res));
    assert_int_equal(res.nhits, 3);
    assert_int_equal(hits[0].id, 5);
    assert_int_equal(hits[0].matches, all[1].matches);
    assert_int_equal(hits[1].id, 7);
    assert_int_equal(hits[2].id, 3); /* not in the pass: its first row's matches */
    assert_true(hits[2].matches >= 4 && hits[2].matches <= 6);
    for (size_t n = 3; n <= 5; n++) { /* 5: more than the items, clamped */
        o.view_candidates = n;
        TU_OK(patina_identify(NULL, rs, query, 1, &o, hits, &res));
        assert_int_equal(res.nhits, rall.nhits);
        for (size_t i = 0; i < res.nhits; i++) {
            assert_int_equal(hits[i].id, all[i].id);
            assert_int_equal(hits[i].matches, all[i].matches);
        }
    }
    /* verified: the pass over every item verifies and decides as matching every row */
    o.verify = 1;
    o.verify_top = 4;
    o.view_candidates = 0;
    TU_OK(patina_identify(NULL, rs, query, 1, &o, all, &rall));
    o.view_candidates = 4;
    TU_OK(patina_identify(NULL, rs, query, 1, &o, hits, &res));
    assert_same_answer(hits, &res, all, &rall);
    /* a set without views ignores it */
    {
        patina_refset_t *r0 = NULL;
        TU_OK(patina_refset_new(&r0, "rootsift:m=48"));
        for (int i = 0; i < 4; i++) {
            unsigned char *rec = make_record(M, M, rows[i][1], geom, 200, 200);
            TU_OK(patina_refset_put(r0, ids[i], rec, b));
            free(rec);
        }
        o.view_candidates = 0;
        TU_OK(patina_identify(NULL, r0, query, 1, &o, all, &rall));
        o.view_candidates = 1;
        TU_OK(patina_identify(NULL, r0, query, 1, &o, hits, &res));
        assert_int_equal(res.nhits, rall.nhits);
        for (size_t i = 0; i < res.nhits; i++) assert_int_equal(hits[i].id, all[i].id);
        patina_refset_free(r0);
    }
    patina_refset_free(rs);
    for (int i = 0; i < 4; i++) {
        for (int v = 0; v < 3; v++) free(rows[i][v]);
        free(items[i]);
    }
    free(qrows);
    free(geom);
    free(query);
}

/* The first pass's features (opts.first_features = F): every item matched
 * with the query's F strongest rows (its first F), then the best
 * max(k, verify_top, view_candidates) items matched again -- every row,
 * every feature -- and ordered by those matches. Query rows [0, F) are
 * the strong ones. Item A shares 2 strong rows and 30 weak ones with the
 * query in its first row; B 8 strong, C 5 strong in their first rows; D 4
 * strong in its first row and 35 weak in its first view. Every feature at
 * once ranks D (its view), A, B, C; the first pass alone ranks B, C, D,
 * A: with two candidates the pass keeps B and C, with four it finds the
 * full answer. F >= the query's rows gives the full answer whatever the
 * candidates. The caller's query is not changed. */
#define FF 12
static void ff_case(patina_refset_t *rs, const unsigned char *query, size_t nq, size_t qbytes)
{
    patina_identify_opts_t o;
    patina_identify_hit_t hits[8], all[8];
    patina_identify_result_t res[2], rall[2];
    unsigned char *keep = malloc(nq * qbytes);
    memcpy(keep, query, nq * qbytes);
    patina_identify_opts_init(&o);
    o.k = 4;
    o.verify = 0;
    o.threshold = 0;
    TU_OK(patina_identify(NULL, rs, query, nq, &o, all, rall)); /* every feature at once */
    assert_int_equal(rall[0].nhits, 4);
    assert_int_equal(all[0].id, 9); /* D: 4 + 35 in its view */
    assert_int_equal(all[1].id, 3); /* A: 2 + 30 */
    assert_int_equal(all[2].id, 5);
    assert_int_equal(all[3].id, 7);
    /* two candidates: B and C, their matches those of every feature */
    o.k = 2;
    o.first_features = FF;
    TU_OK(patina_identify(NULL, rs, query, nq, &o, hits, res));
    assert_int_equal(res[0].nhits, 2);
    assert_int_equal(hits[0].id, 5);
    assert_int_equal(hits[0].matches, all[2].matches);
    assert_int_equal(hits[1].id, 7);
    assert_int_equal(hits[1].matches, all[3].matches);
    /* four candidates (view_candidates): the full answer's best two */
    o.view_candidates = 4;
    TU_OK(patina_identify(NULL, rs, query, nq, &o, hits, res));
    assert_int_equal(res[0].nhits, 2);
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(hits[i].id, all[i].id);
        assert_int_equal(hits[i].matches, all[i].matches);
    }
    /* verified, and F at least the query's rows: the answer of every feature at once */
    o.verify = 1;
    o.verify_top = 4;
    o.k = 4;
    for (int pass = 0; pass < 3; pass++) {
        o.first_features = 0;
        o.view_candidates = 0;
        TU_OK(patina_identify(NULL, rs, query, nq, &o, all, rall));
        o.first_features = pass == 0 ? FF : pass == 1 ? M : 700;
        o.view_candidates = pass == 0 ? 4 : 0;
        TU_OK(patina_identify(NULL, rs, query, nq, &o, hits, res));
        for (size_t q = 0; q < nq; q++) assert_same_answer(hits + q * o.k, &res[q], all + q * o.k, &rall[q]);
    }
    assert_memory_equal(keep, query, nq * qbytes);
    o.first_features = 16385; /* the bound: the rootsift option n's */
    assert_int_equal(patina_identify(NULL, rs, query, nq, &o, hits, res), PATINA_E_INVALID);
    free(keep);
}

static void test_first_features(void **state)
{
    tu_rng_t r;
    const size_t b = rs_record_bytes(M, RS_QUANT_U8), c[3] = {M, M, M};
    /* rows shared with the query: {first strong, first weak, view 1 weak} */
    static const int strong[4] = {2, 8, 5, 4}, weak[4][2] = {{30, 0}, {0, 0}, {0, 0}, {0, 35}};
    static const uint64_t ids[4] = {3, 5, 7, 9};
    uint8_t *qrows = malloc(M * 128), *rows[4][3];
    float *geom = malloc(M * 4 * sizeof(float));
    float *g3[3] = {geom, geom, geom};
    unsigned char *items[4], *queries;
    const size_t qbytes = rs_record_bytes(768, RS_QUANT_U8);
    patina_refset_t *rs = NULL, *r0 = NULL;
    (void)state;
    tu_rng_seed(&r, 23);
    for (size_t j = 0; j < M; j++) random_row(qrows + j * 128, &r);
    random_geom(geom, M, &r);
    TU_OK(patina_refset_new(&rs, SPEC2));
    TU_OK(patina_refset_new(&r0, SPEC0));
    for (int i = 0; i < 4; i++) {
        for (int v = 0; v < 3; v++) {
            rows[i][v] = malloc(M * 128);
            for (size_t j = 0; j < M; j++) {
                const int wk = v < 2 ? weak[i][v] : 0;
                if (v == 0 && (int)j < strong[i]) perturb(rows[i][v] + j * 128, qrows + j * 128, 2, &r);
                else if (j >= FF && (int)(j - FF) < wk) perturb(rows[i][v] + j * 128, qrows + j * 128, 2, &r);
                else random_row(rows[i][v] + j * 128, &r);
            }
        }
        items[i] = make_item(rows[i], c, g3);
        TU_OK(patina_refset_put(rs, ids[i], items[i], 3 * b));
    }
    /* two queries: the one above and one of FF / 2 rows (nothing to cut) */
    queries = malloc(2 * qbytes);
    {
        unsigned char *q0 = make_record(768, M, qrows, geom, 200, 200);
        unsigned char *q1 = make_record(768, FF / 2, qrows, geom, 200, 200);
        memcpy(queries, q0, qbytes);
        memcpy(queries + qbytes, q1, qbytes);
        free(q0);
        free(q1);
    }
    ff_case(rs, queries, 2, qbytes);
    /* without views: D's view is its record */
    for (int i = 0; i < 4; i++) {
        unsigned char *rec = make_record(M, M, rows[i][i == 3 ? 1 : 0], geom, 200, 200);
        if (i == 3) /* D: its strong rows too, as in its first row */
            for (int j = 0; j < strong[3]; j++) memcpy(rec + RS_HEADER + j * 128, rows[3][0] + j * 128, 128);
        TU_OK(patina_refset_put(r0, ids[i], rec, b));
        free(rec);
    }
    ff_case(r0, queries, 2, qbytes);
    patina_refset_free(rs);
    patina_refset_free(r0);
    for (int i = 0; i < 4; i++) {
        for (int v = 0; v < 3; v++) free(rows[i][v]);
        free(items[i]);
    }
    free(queries);
    free(qrows);
    free(geom);
}

/* The half-size view in the first pass (opts.half_view_features): items
 * whose first rows share a few of the query's strongest rows (decoys) and a
 * target whose first row shares none while its half-size view shares rows
 * 0 .. 5 (among the query's HV strongest) and 20 .. 39. With the view pass
 * over 2 candidates the decoys take the candidates and the target is lost;
 * with its half-size view in the first pass it is a candidate and its
 * answer is every row's. For views = 3 (the half view the last of 4 rows)
 * and views = 1 (2 rows). */
#define HV 8
static void half_case(const char *spec, int views)
{
    tu_rng_t r;
    const size_t b = rs_record_bytes(M, RS_QUANT_U8), per = 1 + (size_t)views, half = per - 1;
    static const int decoy[4] = {5, 4, 3, 0}; /* the decoys' first rows: rows 0 .. decoy - 1 of the query */
    static const uint64_t ids[5] = {3, 5, 7, 9, 11}; /* 11: the target */
    uint8_t *qrows = malloc(M * 128), *rows = malloc(M * 128);
    float *geom = malloc(M * 4 * sizeof(float));
    unsigned char *query, *item = malloc(per * b);
    patina_refset_t *rs = NULL;
    patina_identify_opts_t o;
    patina_identify_hit_t hits[8], all[8];
    patina_identify_result_t res, rall;
    tu_rng_seed(&r, 41 + (uint64_t)views);
    for (size_t j = 0; j < M; j++) random_row(qrows + j * 128, &r);
    random_geom(geom, M, &r);
    TU_OK(patina_refset_new(&rs, spec));
    for (int i = 0; i < 5; i++) {
        for (size_t v = 0; v < per; v++) {
            for (size_t j = 0; j < M; j++) {
                const int shared = i < 4 ? v == 0 && (int)j < decoy[i]
                                         : v == half && (j < 6 || (j >= 20 && j < 40));
                if (shared) perturb(rows + j * 128, qrows + j * 128, 2, &r);
                else random_row(rows + j * 128, &r);
            }
            unsigned char *rec = make_record(M, M, rows, geom, 200, 200);
            memcpy(item + v * b, rec, b);
            free(rec);
        }
        TU_OK(patina_refset_put(rs, ids[i], item, per * b));
    }
    query = make_record(768, M, qrows, geom, 200, 200);
    patina_identify_opts_init(&o);
    o.k = 2;
    o.verify_top = 2;
    o.threshold = 0;
    TU_OK(patina_identify(NULL, rs, query, 1, &o, all, &rall)); /* every row */
    assert_int_equal(all[0].id, 11);
    assert_true(all[0].matches >= 24);
    o.view_candidates = 2; /* the first rows alone: the decoys 3 and 5 */
    TU_OK(patina_identify(NULL, rs, query, 1, &o, hits, &res));
    assert_int_equal(res.nhits, 2);
    assert_int_equal(hits[0].id, 3);
    assert_int_equal(hits[1].id, 5);
    for (int ff = 0; ff < 3; ff++) { /* the half views too: every row's answer, F = 0, 4 (< HV) and 16 */
        o.first_features = ff == 0 ? 0 : ff == 1 ? 4 : 16;
        o.half_view_features = HV;
        TU_OK(patina_identify(NULL, rs, query, 1, &o, hits, &res));
        assert_same_answer(hits, &res, all, &rall);
    }
    /* too few of the strongest for the half view: 2 features share 2 rows with it, fewer than decoy 3's
     * 3 (and 5's 4) first-row matches: not a candidate */
    o.first_features = 0;
    o.half_view_features = 2;
    TU_OK(patina_identify(NULL, rs, query, 1, &o, hits, &res));
    assert_int_equal(hits[0].id, 3);
    assert_int_equal(hits[1].id, 5);
    /* without the view pass every row is matched: the option changes nothing */
    o.view_candidates = 0;
    o.half_view_features = HV;
    TU_OK(patina_identify(NULL, rs, query, 1, &o, hits, &res));
    assert_int_equal(hits[0].id, all[0].id);
    assert_int_equal(hits[0].matches, all[0].matches);
    o.half_view_features = 16385; /* the bound */
    assert_int_equal(patina_identify(NULL, rs, query, 1, &o, hits, &res), PATINA_E_INVALID);
    patina_refset_free(rs);
    free(qrows);
    free(rows);
    free(geom);
    free(item);
    free(query);
}

static void test_half_view_features(void **state)
{
    (void)state;
    half_case("rootsift:m=48,views=3", 3);
    half_case("rootsift:m=48,views=1", 1);
    /* references without a half-size view: a clear error, whether or not the view pass is on */
    for (int v = 0; v < 2; v++) {
        patina_refset_t *rs = NULL;
        patina_identify_opts_t o;
        patina_identify_hit_t hits[2];
        patina_identify_result_t res;
        unsigned char *q = make_record(768, 0, NULL, NULL, 200, 200);
        TU_OK(patina_refset_new(&rs, v ? SPEC2 : SPEC0));
        patina_identify_opts_init(&o);
        o.view_candidates = 4;
        o.half_view_features = 64;
        assert_int_equal(patina_identify(NULL, rs, q, 1, &o, hits, &res), PATINA_E_INVALID);
        assert_non_null(strstr(patina_last_error(), "half-size view"));
        patina_refset_free(rs);
        free(q);
    }
}

/* Verification runs on every row of a verified item and keeps the most
 * inliers: row 0 has the most matches but no geometry consistent with the
 * query's, view 1 fewer matches that agree. */
static void test_verify_rows(void **state)
{
    tu_rng_t r;
    const size_t b = rs_record_bytes(M, RS_QUANT_U8);
    uint8_t *qrows = malloc(M * 128), *rows[3];
    float *qgeom = malloc(M * 4 * sizeof(float)), *geom[3];
    const size_t c[3] = {M, M, M};
    patina_refset_t *rs = NULL;
    unsigned char *query, *it;
    patina_identify_opts_t o;
    patina_identify_hit_t hits[5];
    patina_identify_result_t res;
    size_t n = 0;
    (void)state;
    tu_rng_seed(&r, 77);
    for (size_t j = 0; j < M; j++) random_row(qrows + j * 128, &r);
    random_geom(qgeom, M, &r);
    for (int v = 0; v < 3; v++) {
        rows[v] = malloc(M * 128);
        geom[v] = malloc(M * 4 * sizeof(float));
        for (size_t j = 0; j < M; j++) random_row(rows[v] + j * 128, &r);
        random_geom(geom[v], M, &r); /* unrelated to the query's keypoints */
    }
    for (size_t j = 0; j < 36; j++) perturb(rows[0] + j * 128, qrows + j * 128, 2, &r); /* 36 matches, no model */
    for (size_t j = 36; j < M; j++) { /* 12 matches where the query's keypoints are */
        perturb(rows[1] + j * 128, qrows + j * 128, 2, &r);
        memcpy(geom[1] + 4 * j, qgeom + 4 * j, 4 * sizeof(float));
    }
    it = make_item(rows, c, geom);
    query = make_record(768, M, qrows, qgeom, 200, 200);
    TU_OK(patina_refset_new(&rs, SPEC2));
    TU_OK(patina_refset_put(rs, 4, it, 3 * b));
    patina_identify_opts_init(&o);
    TU_OK(patina_identify(NULL, rs, query, 1, &o, hits, &res));
    assert_int_equal(res.nhits, 1);
    assert_true(hits[0].matches >= 30);            /* the item's score: row 0's matches */
    assert_true(hits[0].inliers >= 10);            /* its inliers: view 1's */
    TU_OK(patina_identify_pairs(rs, query, 4, &o, NULL, 0, &n));
    assert_int_equal(n, hits[0].inliers);
    patina_refset_free(rs);
    for (int v = 0; v < 3; v++) {
        free(rows[v]);
        free(geom[v]);
    }
    free(qrows);
    free(qgeom);
    free(it);
    free(query);
}

/* --------------------------------------------------- tables and the store */

static void test_table_store(void **state)
{
    items_t s;
    char *dir;
    patina_collection_t *c;
    patina_table_t *t = NULL, *parts[2] = {NULL, NULL};
    patina_identify_hit_t hits[5];
    patina_identify_result_t res;
    char *keys[5] = {0};
    const size_t b = rs_record_bytes(M, RS_QUANT_U8);
    (void)state;
    items_make(&s, 7, 21);
    {
        patina_extractor_t *ex = NULL; /* the collection's table under its canonical spec */
        TU_OK(patina_extractor_new(&ex, SPEC2));
        c = make_collection(&dir, patina_extractor_spec(ex), s.rec, N, 3 * b);
        patina_extractor_free(ex);
    }
    patina_collection_close(c);
    /* reopened: the table keeps its spec, the set its rows */
    TU_OK(patina_collection_open(&c, tu_path(dir, "coll"), PATINA_OPEN_WRITE, 0));
    {
        char **specs = NULL;
        size_t n = 0;
        TU_OK(patina_collection_tables(c, &specs, &n));
        assert_int_equal(n, 1);
        assert_non_null(strstr(specs[0], "views=2"));
        patina_free(specs[0]);
        patina_free(specs);
    }
    {
        patina_table_opts_t to;
        patina_table_opts_init(&to);
        to.need = PATINA_CAP_IDENTIFY;
        TU_OK(patina_table_open(&t, NULL, c, NULL, &to));
    }
    assert_int_equal(patina_table_size(t), N);
    assert_int_equal(patina_table_matched_rows(t), 3 * N);
    TU_OK(patina_table_identify(t, s.query, 1, NULL, hits, &res, keys));
    assert_int_equal(hits[0].id, 8);
    assert_string_equal(keys[0], "ref7");
    assert_items_once(hits, res.nhits);
    for (size_t i = 0; i < 5; i++) {
        patina_free(keys[i]);
        keys[i] = NULL;
    }
    /* the partitions of the collection: an item's rows in one (the key decides), the answer the same */
    {
        patina_table_opts_t po;
        patina_identify_hit_t ph[5];
        patina_identify_result_t pr;
        patina_table_opts_init(&po);
        po.partitions = 2;
        for (uint32_t p = 0; p < 2; p++) {
            po.partition = p;
            TU_OK(patina_table_open(&parts[p], NULL, c, SPEC2, &po));
        }
        assert_int_equal(patina_table_matched_rows(parts[0]) + patina_table_matched_rows(parts[1]), 3 * N);
        assert_int_equal(patina_table_matched_rows(parts[0]) % 3, 0);
        TU_OK(patina_table_identify_many(parts, 2, s.query, 1, NULL, ph, &pr, NULL));
        assert_int_equal(pr.nhits, res.nhits);
        assert_memory_equal(ph, hits, res.nhits * sizeof *ph);
        patina_table_free(parts[0]);
        patina_table_free(parts[1]);
    }
    /* a write through the table replaces the item's rows; a removal drops them */
    {
        patina_table_t *const ts[1] = {t};
        patina_insert_t it;
        const void *descs[1];
        uint64_t id = 0;
        size_t removed = 0;
        memset(&it, 0, sizeof it);
        it.key = "ref7";
        it.size = 2;
        it.width = it.height = 100;
        descs[0] = s.rec[0]; /* item 8 now holds item 1's rows */
        TU_OK(patina_tables_put(ts, 1, &it, 1, descs, &id));
        assert_int_equal(id, 8);
        assert_int_equal(patina_table_matched_rows(t), 3 * N);
        TU_OK(patina_table_identify(t, s.query, 1, NULL, hits, &res, NULL));
        assert_int_equal(res.decision, PATINA_DECISION_UNKNOWN);
        TU_OK(patina_tables_remove(ts, 1, &id, 1, &removed));
        assert_int_equal(removed, 1);
        assert_int_equal(patina_table_size(t), N - 1);
        assert_int_equal(patina_table_matched_rows(t), 3 * (N - 1));
    }
    patina_table_free(t);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(dir);
    items_free(&s);
}

/* ------------------------------------------- a half-scale, blurred query */

/* Box 2x2 average then a [1 2 1] / 4 blur: a farther, softer photograph. */
static void half_blur(patina_image_t *out, const patina_image_t *in)
{
    const int w = in->width / 2, h = in->height / 2;
    patina_image_t t;
    tu_rng_t r;
    tu_rng_seed(&r, 1);
    tu_random_image(&t, w, h, 3, &r);
    tu_random_image(out, w, h, 3, &r);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < 3 * w; x++) {
            const int c = x % 3, px = x / 3;
            const uint8_t *a = in->data + (size_t)(2 * y) * in->stride, *bq = a + in->stride;
            t.data[(size_t)y * t.stride + x] =
                (uint8_t)((a[6 * px + c] + a[6 * px + 3 + c] + bq[6 * px + c] + bq[6 * px + 3 + c] + 2) / 4);
        }
    for (int y = 0; y < h; y++)
        for (int x = 0; x < 3 * w; x++) {
            const int y0 = y > 0 ? y - 1 : 0, y1 = y + 1 < h ? y + 1 : h - 1;
            const int x0 = x >= 3 ? x - 3 : x, x1 = x + 3 < 3 * w ? x + 3 : x;
            const uint8_t *r0 = t.data + (size_t)y0 * t.stride, *r1 = t.data + (size_t)y * t.stride,
                          *r2 = t.data + (size_t)y1 * t.stride;
            const int v = (r0[x0] + 2 * r0[x] + r0[x1]) + 2 * (r1[x0] + 2 * r1[x] + r1[x1]) + (r2[x0] + 2 * r2[x] + r2[x1]);
            out->data[(size_t)y * out->stride + x] = (uint8_t)((v + 8) / 16);
        }
    patina_image_release(&t);
}

/* A w x h texture of random overlapping discs (radius 2 .. 13 px): blobs
 * at many scales, none periodic. */
static void discs(patina_image_t *img, int w, int h, tu_rng_t *r)
{
    tu_random_image(img, w, h, 3, r);
    for (int y = 0; y < h; y++) memset(img->data + (size_t)y * img->stride, 128, 3 * (size_t)w);
    for (int k = 0; k < 300; k++) {
        const int cx = (int)tu_rng_below(r, (uint32_t)w), cy = (int)tu_rng_below(r, (uint32_t)h);
        const int rad = 1 + (int)tu_rng_below(r, 12), v = (int)tu_rng_below(r, 256);
        for (int y = cy - rad; y <= cy + rad; y++)
            for (int x = cx - rad; x <= cx + rad; x++)
                if (x >= 0 && y >= 0 && x < w && y < h && (x - cx) * (x - cx) + (y - cy) * (y - cy) <= rad * rad)
                    memset(img->data + (size_t)y * img->stride + 3 * (size_t)x, v, 3);
    }
}

static void test_half_scale_query(void **state)
{
    enum { NI = 4 };
    const char *specs[2] = {"rootsift:m=64,n=256", "rootsift:m=64,n=256,views=1"};
    patina_image_t img[NI], q;
    uint32_t inl[2] = {0, 0};
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 99);
    for (int i = 0; i < NI; i++) discs(&img[i], 320, 256, &r);
    half_blur(&q, &img[2]);
    for (int sp = 0; sp < 2; sp++) {
        patina_extractor_t *ex = NULL;
        patina_refset_t *rs = NULL;
        patina_identify_opts_t o;
        patina_identify_hit_t hits[NI];
        patina_identify_result_t res;
        unsigned char *rec, *qrec;
        size_t bytes;
        TU_OK(patina_extractor_new(&ex, specs[sp]));
        bytes = patina_extractor_bytes(ex);
        rec = malloc(bytes);
        TU_OK(patina_refset_new(&rs, specs[sp]));
        for (int i = 0; i < NI; i++) {
            TU_OK(ex->family->cpu(ex->params, rec, &img[i]));
            TU_OK(patina_refset_put(rs, (uint64_t)i + 1, rec, bytes));
        }
        qrec = malloc(patina_identify_query_bytes(rs));
        TU_OK(patina_identify_extract(NULL, rs, qrec, &q, 1, NULL));
        patina_identify_opts_init(&o);
        o.k = NI;
        TU_OK(patina_identify(NULL, rs, qrec, 1, &o, hits, &res));
        assert_items_once(hits, res.nhits);
        print_message("%s: query %u features; rank 1 id %llu, %u inliers (%u matches); %zu hits\n", specs[sp],
                      res.query_features,
                      (unsigned long long)hits[0].id, hits[0].inliers, hits[0].matches, res.nhits);
        if (res.nhits && hits[0].id == 3) inl[sp] = hits[0].inliers;
        free(rec);
        free(qrec);
        patina_refset_free(rs);
        patina_extractor_free(ex);
    }
    /* the soft half view is what the query shows: more inliers with it */
    assert_true(inl[1] > inl[0]);
    assert_true(inl[1] >= 13);
    for (int i = 0; i < NI; i++) patina_image_release(&img[i]);
    patina_image_release(&q);
}

/* ---------------------------------------------------- the half-size query */

static patina_identify_hit_t hit(uint64_t id, double score, uint32_t inliers, int verified)
{
    patina_identify_hit_t h;
    memset(&h, 0, sizeof h);
    h.id = id;
    h.score = score;
    h.inliers = inliers;
    h.matches = inliers + 3;
    h.verified = verified;
    return h;
}

/* patina_identify_fuse_half: the half-size query's answer is taken only when its rank-1 score less the
 * margin beats the query's; its scores are then reported less the margin and the decision is made again
 * on them at the query's threshold; an UNKNOWN of its own stays; bad arguments are refused. */
static void test_fuse_half(void **state)
{
    enum { K = 2, NQ = 5 };
    patina_identify_hit_t h[NQ * K], hh[NQ * K];
    patina_identify_result_t r[NQ], hr[NQ];
    patina_identify_opts_t o;
    unsigned char taken[NQ];
    (void)state;
    patina_identify_opts_init(&o);
    memset(h, 0, sizeof h);
    memset(hh, 0, sizeof hh);
    memset(r, 0, sizeof r);
    memset(hr, 0, sizeof hr);
    for (int q = 0; q < NQ; q++) {
        r[q].threshold = hr[q].threshold = 4;
        r[q].nhits = hr[q].nhits = 2;
        hr[q].decision = PATINA_DECISION_MATCH;
    }
    /* 0: the query's 2 (unknown) against the half's 40: taken, 30 and 5 reported, 5 < 0.5 x 30: match */
    h[0] = hit(7, 2, 5, 1), h[1] = hit(8, 1, 4, 1);
    hh[0] = hit(9, 40, 20, 1), hh[1] = hit(10, 15, 6, 1);
    /* 1: the half's 11 less 10 = 1 does not beat 2: not taken */
    h[2] = hit(7, 2, 5, 1), h[3] = hit(8, 1, 4, 1);
    hh[2] = hit(9, 11, 7, 1), hh[3] = hit(10, 0, 2, 1);
    /* 2: taken (13 - 10 = 3 > 0) but 3 is below the threshold 4: unknown */
    h[4] = hit(7, 0, 2, 1), h[5] = hit(8, 0, 1, 1);
    hh[4] = hit(9, 13, 8, 1), hh[5] = hit(10, 12, 7, 1);
    /* 3: taken, both reduced scores comparable (30, 25): ambiguous */
    h[6] = hit(7, 1, 3, 1), h[7] = hit(8, 0, 2, 1);
    hh[6] = hit(9, 40, 20, 1), hh[7] = hit(10, 35, 18, 1);
    /* 4: the half's own UNKNOWN (the distinctness veto) stays */
    h[8] = hit(7, 1, 3, 1), h[9] = hit(8, 0, 2, 1);
    hh[8] = hit(9, 40, 20, 1), hh[9] = hit(10, 5, 3, 1);
    hr[4].decision = PATINA_DECISION_UNKNOWN;
    r[1].decision = PATINA_DECISION_UNKNOWN;
    TU_OK(patina_identify_fuse_half(NQ, K, 10, &o, h, r, hh, hr, taken));
    assert_int_equal(taken[0], 1);
    assert_int_equal(h[0].id, 9);
    assert_true(fabs(h[0].score - 30) < 1e-12 && fabs(h[1].score - 5) < 1e-12);
    assert_int_equal(h[0].inliers, 20);
    assert_int_equal(r[0].decision, PATINA_DECISION_MATCH);
    assert_int_equal(taken[1], 0);
    assert_int_equal(h[2].id, 7);
    assert_true(h[2].score == 2);
    assert_int_equal(r[1].decision, PATINA_DECISION_UNKNOWN);
    assert_int_equal(taken[2], 1);
    assert_int_equal(h[4].id, 9);
    assert_int_equal(r[2].decision, PATINA_DECISION_UNKNOWN);
    assert_int_equal(taken[3], 1);
    assert_int_equal(r[3].decision, PATINA_DECISION_AMBIGUOUS);
    assert_int_equal(taken[4], 1);
    assert_int_equal(r[4].decision, PATINA_DECISION_UNKNOWN);
    /* a query without hits takes a half-size answer of any score; a half without hits changes nothing */
    r[0].nhits = 0;
    hr[1].nhits = 0;
    hh[0] = hit(11, 3, 4, 1);
    TU_OK(patina_identify_fuse_half(2, K, 10, &o, h, r, hh, hr, taken));
    assert_int_equal(taken[0], 1);
    assert_int_equal(h[0].id, 11);
    assert_true(h[0].score == 0);
    assert_int_equal(taken[1], 0);
    /* refusals */
    assert_int_equal(patina_identify_fuse_half(1, K, -1, &o, h, r, hh, hr, NULL), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "margin"));
    assert_int_equal(patina_identify_fuse_half(1, 0, 10, &o, h, r, hh, hr, NULL), PATINA_E_INVALID);
    assert_int_equal(patina_identify_fuse_half(1, K, 10, &o, h, r, NULL, hr, NULL), PATINA_E_INVALID);
    TU_OK(patina_identify_fuse_half(0, K, 10, NULL, NULL, NULL, NULL, NULL, NULL));
    {
        patina_identify_opts_t ho;
        o.first_features = 512;
        o.half_view_features = 64;
        o.view_candidates = 64;
        TU_OK(patina_identify_half_opts(&o, 64, &ho));
        assert_int_equal(ho.first_features, 64);
        assert_int_equal(ho.half_view_features, 0);
        assert_int_equal(ho.view_candidates, 64);
        TU_OK(patina_identify_half_opts(&o, 0, &ho));
        assert_int_equal(ho.first_features, 512);
        assert_int_equal(patina_identify_half_opts(&o, 64, NULL), PATINA_E_INVALID);
    }
    {   /* the calibration with the half-size query: stricter where it was run, the options' elsewhere */
        double t = 0, t0 = 0;
        TU_OK(patina_identify_far_threshold_opts("rootsift:views=3", &o, 0.001, &t0));
        TU_OK(patina_identify_far_threshold_half("rootsift:views=3", &o, 0.001, &t));
        assert_true(t > t0 && fabs(t - 20.47) < 1e-9);
        TU_OK(patina_identify_far_threshold_half("rootsift:views=3", &o, 0.01, &t));
        assert_true(fabs(t - 3.99) < 1e-9);
        TU_OK(patina_identify_far_threshold_opts("rootsift:views=1", &o, 0.001, &t0));
        TU_OK(patina_identify_far_threshold_half("rootsift:views=1", &o, 0.001, &t));
        assert_true(t == t0);
        TU_OK(patina_identify_far_threshold_half("rootsift:views=3", &o, 1, &t));
        assert_true(t == 0);
        /* no views (its own run: 3.03 at 1%, 9.04 at 0.1%), with the default options */
        {
            patina_identify_opts_t d;
            patina_identify_opts_init(&d);
            TU_OK(patina_identify_far_threshold_half("rootsift", &d, 0.01, &t));
            assert_true(fabs(t - 3.03) < 1e-9);
            TU_OK(patina_identify_far_threshold_half("rootsift", &d, 0.001, &t));
            assert_true(fabs(t - 9.04) < 1e-9);
            TU_OK(patina_identify_far_threshold_half("rootsift", NULL, 0.01, &t));
            assert_true(fabs(t - 3.03) < 1e-9);
        }
        assert_int_equal(patina_identify_far_threshold_half("lbp8", &o, 0.01, &t), PATINA_E_INVALID);
    }
}

/* Nearest-neighbour 2x magnification of the (w, h) window at (x0, y0): a close-up photograph. */
static void magnify(patina_image_t *out, const patina_image_t *in, int x0, int y0, int w, int h)
{
    tu_rng_t r;
    tu_rng_seed(&r, 2);
    tu_random_image(out, 2 * w, 2 * h, 3, &r);
    for (int y = 0; y < 2 * h; y++)
        for (int x = 0; x < 2 * w; x++)
            memcpy(out->data + (size_t)y * out->stride + 3 * (size_t)x,
                   in->data + (size_t)(y0 + y / 2) * in->stride + 3 * (size_t)(x0 + x / 2), 3);
}

/* A reference set of spec over the n images (ids 1 .. n, extracted on the CPU) and its extractor
 * (*ex); recs (n, may be NULL) receives a malloc'd copy of each record. */
static patina_refset_t *images_set(const char *spec, const patina_image_t *img, int n, patina_extractor_t **ex,
                                   unsigned char **recs)
{
    patina_refset_t *rs = NULL;
    size_t bytes;
    unsigned char *rec;
    TU_OK(patina_extractor_new(ex, spec));
    bytes = patina_extractor_bytes(*ex);
    rec = malloc(bytes);
    TU_OK(patina_refset_new(&rs, spec));
    for (int i = 0; i < n; i++) {
        TU_OK((*ex)->family->cpu((*ex)->params, rec, &img[i]));
        TU_OK(patina_refset_put(rs, (uint64_t)i + 1, rec, bytes));
        if (recs) {
            recs[i] = malloc(bytes);
            memcpy(recs[i], rec, bytes);
        }
    }
    free(rec);
    return rs;
}

/* A close-up (a window of a registered texture magnified 2x): the half-size query's record is the
 * halved photograph's (patina_identify_extract on the halved image gives the same bytes, and the CPU's
 * view of the image is its area average), it names the right item first, and the fused answer keeps
 * the better of the two. */
static void test_half_query(void **state)
{
    enum { NI = 4 };
    const char *spec = "rootsift:m=64,n=256";
    patina_image_t img[NI], q, half;
    patina_extractor_t *ex = NULL;
    patina_refset_t *rs = NULL;
    patina_identify_opts_t o, ho;
    patina_identify_hit_t hits[NI], hh[NI];
    patina_identify_result_t res, hres;
    unsigned char *qrec, *hrec, *hrec2, taken = 0;
    size_t qb;
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 7);
    for (int i = 0; i < NI; i++) discs(&img[i], 320, 256, &r);
    magnify(&q, &img[1], 60, 50, 160, 128);
    rs = images_set(spec, img, NI, &ex, NULL);
    qb = patina_identify_query_bytes(rs);
    qrec = malloc(qb);
    hrec = malloc(qb);
    hrec2 = malloc(qb);
    TU_OK(patina_identify_extract(NULL, rs, qrec, &q, 1, NULL));
    TU_OK(patina_identify_extract_half(NULL, rs, hrec, &q, 1, NULL));
    TU_OK(rs_view_make(&half, &q, RS_VIEW_HALF));
    assert_int_equal(half.width, 160);
    assert_int_equal(half.height, 128);
    TU_OK(patina_identify_extract(NULL, rs, hrec2, &half, 1, NULL));
    assert_memory_equal(hrec, hrec2, qb);
    assert_memory_not_equal(hrec, qrec, qb);
    patina_identify_opts_init(&o);
    o.k = NI;
    TU_OK(patina_identify(NULL, rs, qrec, 1, &o, hits, &res));
    TU_OK(patina_identify_half_opts(&o, 0, &ho));
    TU_OK(patina_identify(NULL, rs, hrec, 1, &ho, hh, &hres));
    print_message("close-up: the photograph rank 1 id %llu, %u inliers, score %.1f; halved: id %llu, %u inliers, "
                  "score %.1f\n",
                  (unsigned long long)hits[0].id, res.nhits ? hits[0].inliers : 0, res.nhits ? hits[0].score : 0,
                  (unsigned long long)hh[0].id, hres.nhits ? hh[0].inliers : 0, hres.nhits ? hh[0].score : 0);
    assert_true(hres.nhits >= 1);
    assert_int_equal(hh[0].id, 2);
    assert_true(hh[0].inliers >= 8 && hh[0].score >= 10); /* 10 inliers, significance 24.7 when written */
    {
        const double sa = res.nhits ? hits[0].score : -1, sb = hh[0].score;
        const uint64_t want = sb > sa ? 2 : hits[0].id;
        TU_OK(patina_identify_fuse_half(1, NI, 0, &o, hits, &res, hh, &hres, &taken));
        assert_int_equal(taken, sb > sa);
        assert_int_equal(hits[0].id, want);
    }
    patina_image_release(&half);
    patina_image_release(&q);
    for (int i = 0; i < NI; i++) patina_image_release(&img[i]);
    free(qrec);
    free(hrec);
    free(hrec2);
    patina_refset_free(rs);
    patina_extractor_free(ex);
}

/* patina_identify_half: the queries and their half-size queries in one call (with a first pass on
 * the strongest features, idf_many_begin_half: the pairs share the first pass) answer as the two calls
 * and the fusion they stand for, over a `views = 3` set with the view pass and the half-size views in
 * the first pass (the companions have no half-size view pass), every scoring rule, margins 0 and 10;
 * without first_features the function makes the two calls itself. */
static void test_half_pairs(void **state)
{
    enum { NI = 6, NQ = 5, K = 4 };
    const char *spec = "rootsift:m=64,n=192,views=3";
    patina_image_t img[NI], q[NQ];
    patina_extractor_t *ex = NULL;
    patina_refset_t *rs = NULL;
    patina_identify_opts_t o, ho;
    patina_identify_hit_t h1[NQ * K], h2[NQ * K], hh[NQ * K];
    patina_identify_result_t r1[NQ], r2[NQ], rh[NQ];
    unsigned char *qrec, *hrec, t1[NQ], t2[NQ], *recs[NI];
    size_t bytes, qb, taken = 0, cases = 0;
    tu_rng_t r;
    (void)state;
    tu_rng_seed(&r, 11);
    for (int i = 0; i < NI; i++) discs(&img[i], 240, 200, &r);
    magnify(&q[0], &img[1], 40, 40, 120, 100); /* close-ups: their half-size queries win */
    magnify(&q[1], &img[4], 80, 60, 120, 100);
    for (int i = 2; i < NQ; i++) { /* the items themselves, and one that is none */
        tu_rng_t rq;
        tu_rng_seed(&rq, 50 + (uint64_t)i);
        if (i == NQ - 1) discs(&q[i], 200, 180, &rq);
        else magnify(&q[i], &img[i], 0, 0, 240, 200);
    }
    rs = images_set(spec, img, NI, &ex, recs);
    bytes = patina_extractor_bytes(ex);
    qb = patina_identify_query_bytes(rs);
    qrec = malloc(NQ * qb);
    hrec = malloc(NQ * qb);
    TU_OK(patina_identify_extract(NULL, rs, qrec, q, NQ, NULL));
    TU_OK(patina_identify_extract_half(NULL, rs, hrec, q, NQ, NULL));
    for (int sc = 0; sc < 3; sc++)
        for (int f = 0; f < 3; f++)
            for (double margin = 0; margin <= 10; margin += 10) {
                patina_identify_opts_init(&o);
                o.k = K;
                o.scoring = (patina_identify_scoring)sc;
                o.view_candidates = f == 2 ? 0 : 3;
                o.first_features = f == 2 ? 0 : 48;
                o.half_view_features = f == 1 ? 24 : 0;
                TU_OK(patina_identify_half(NULL, rs, qrec, hrec, NQ, 32, margin, &o, h1, r1, t1));
                /* the two calls and the fusion, at the threshold patina_identify_half resolves */
                TU_OK(patina_identify_far_threshold_half(spec, &o, PATINA_FAR_DEFAULT, &o.threshold));
                TU_OK(patina_identify_half_opts(&o, 32, &ho));
                TU_OK(patina_identify(NULL, rs, qrec, NQ, &o, h2, r2));
                TU_OK(patina_identify(NULL, rs, hrec, NQ, &ho, hh, rh));
                TU_OK(patina_identify_fuse_half(NQ, K, margin, &o, h2, r2, hh, rh, t2));
                for (int i = 0; i < NQ; i++) {
                    assert_int_equal(t1[i], t2[i]);
                    assert_int_equal(r1[i].nhits, r2[i].nhits);
                    assert_int_equal(r1[i].decision, r2[i].decision);
                    for (size_t j = 0; j < r1[i].nhits; j++) {
                        const patina_identify_hit_t *a = &h1[i * K + j], *b = &h2[i * K + j];
                        if (a->id != b->id || a->matches != b->matches || a->inliers != b->inliers ||
                            a->score != b->score || a->verified != b->verified)
                            fail_msg("scoring %d case %d margin %g query %d rank %zu: one call id %llu %u/%u %g, "
                                     "two calls id %llu %u/%u %g",
                                     sc, f, margin, i, j + 1, (unsigned long long)a->id, a->matches, a->inliers,
                                     a->score, (unsigned long long)b->id, b->matches, b->inliers, b->score);
                    }
                    taken += t1[i];
                }
                cases++;
            }
    print_message("%zu cases x %d queries: one call == two calls and the fusion (%zu answers the half-size "
                  "query's)\n", cases, NQ, taken);
    assert_true(taken > 0);
    {   /* the table's (patina_table_identify_half: its one call of the pairs) is the reference set's, keys
         * following their hits */
        char *dir, *keys[NQ * K] = {0};
        patina_collection_t *c = make_collection(&dir, patina_extractor_spec(ex), recs, NI, bytes);
        patina_table_t *t = NULL;
        patina_table_opts_t to;
        patina_table_opts_init(&to);
        to.need = PATINA_CAP_IDENTIFY;
        TU_OK(patina_table_open(&t, NULL, c, NULL, &to));
        patina_identify_opts_init(&o);
        o.k = K;
        o.view_candidates = 3;
        o.first_features = 48;
        o.half_view_features = 24;
        TU_OK(patina_identify_half(NULL, rs, qrec, hrec, NQ, 32, 0, &o, h1, r1, t1));
        TU_OK(patina_table_identify_half(t, qrec, hrec, NQ, 32, 0, &o, h2, r2, keys, t2));
        for (int i = 0; i < NQ; i++) {
            assert_int_equal(t1[i], t2[i]);
            assert_int_equal(r1[i].nhits, r2[i].nhits);
            assert_int_equal(r1[i].decision, r2[i].decision);
            for (size_t j = 0; j < r1[i].nhits; j++) {
                char want[32];
                assert_int_equal(h1[i * K + j].id, h2[i * K + j].id); /* the collection's ids: 1 .. NI */
                assert_int_equal(h1[i * K + j].inliers, h2[i * K + j].inliers);
                snprintf(want, sizeof want, "ref%llu", (unsigned long long)h1[i * K + j].id - 1);
                assert_string_equal(keys[i * K + j], want);
            }
        }
        for (int i = 0; i < NQ * K; i++) patina_free(keys[i]);
        patina_table_free(t);
        patina_collection_close(c);
        tu_remove_tree(dir);
        free(dir);
    }
    assert_int_equal(patina_identify_half(NULL, rs, qrec, hrec, NQ, 32, -1, &o, h1, r1, t1), PATINA_E_INVALID);
    assert_int_equal(patina_identify_half(NULL, rs, qrec, NULL, NQ, 32, 10, &o, h1, r1, t1), PATINA_E_INVALID);
    assert_int_equal(patina_identify_half(NULL, rs, qrec, hrec, NQ, 16385, 10, &o, h1, r1, t1), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "first_features"));
    TU_OK(patina_identify_half(NULL, rs, NULL, NULL, 0, 32, 10, &o, NULL, NULL, NULL));
    for (int i = 0; i < NI; i++) patina_image_release(&img[i]);
    for (int i = 0; i < NQ; i++) patina_image_release(&q[i]);
    for (int i = 0; i < NI; i++) free(recs[i]);
    free(qrec);
    free(hrec);
    patina_refset_free(rs);
    patina_extractor_free(ex);
}

/* The CLI: `patina index --views N` stores the views in the table's spec, `patina info` counts rows
 * and items; bad values are usage errors naming the option. */
static void test_cli(void **state)
{
    char *dir = tu_tempdir("views-cli"), *out = NULL, *err = NULL;
    const char *coll = tu_path(dir, "coll");
    int rc;
    (void)state;
    tu_write_jpeg(tu_path(dir, "a.jpg"), 96, 80, 1, 90, 1);
    tu_write_jpeg(tu_path(dir, "b.jpg"), 96, 80, 2, 90, 2);
    {
        const char *argv[] = {PATINA_CLI, "index", coll, tu_path(dir, "a.jpg"), tu_path(dir, "b.jpg"), "-f",
                              "rootsift:m=32", "--views", "1", "-q", NULL};
        rc = tu_exec(&out, &err, 0, 120, argv);
        if (rc != 0) fail_msg("index --views 1: %d: %s", rc, err);
        free(out);
        free(err);
    }
    {
        const char *argv[] = {PATINA_CLI, "info", coll, NULL};
        rc = tu_exec(&out, &err, 0, 60, argv);
        assert_int_equal(rc, 0);
        assert_non_null(strstr(out, ",views=1:"));
        assert_non_null(strstr(out, "2 rows per reference"));
        assert_non_null(strstr(out, "4 rows for 2 references"));
        free(out);
        free(err);
    }
    {   /* the half-size query beside: a.jpg is still itself's item */
        const char *argv[] = {PATINA_CLI, "identify", coll, tu_path(dir, "a.jpg"), "--half-query", "16",
                              "--format", "csv", "-k", "1", NULL};
        rc = tu_exec(&out, &err, 0, 120, argv);
        if (rc != 0) fail_msg("identify --half-query 16: %d: %s", rc, err);
        assert_non_null(strstr(out, "a.jpg,1,"));
        free(out);
        free(err);
    }
    {
        const char *argv[] = {PATINA_CLI, "identify", coll, tu_path(dir, "a.jpg"), "--half-query", "16",
                              "--half-query-margin", "-1", NULL};
        rc = tu_exec(&out, &err, 0, 60, argv);
        assert_int_equal(rc, 2);
        assert_non_null(strstr(err, "half-query-margin"));
        free(out);
        free(err);
    }
    {   /* the half-size view in the view pass's first pass: a.jpg is itself's item */
        const char *argv[] = {PATINA_CLI, "identify", coll, tu_path(dir, "a.jpg"), "--view-candidates", "1",
                              "--half-view-features", "16", "--format", "csv", "-k", "1", NULL};
        rc = tu_exec(&out, &err, 0, 120, argv);
        if (rc != 0) fail_msg("identify --half-view-features 16: %d: %s", rc, err);
        assert_non_null(strstr(out, "a.jpg,1,"));
        assert_non_null(strstr(out, "a.jpg,"));
        free(out);
        free(err);
    }
    {
        const char *argv[] = {PATINA_CLI, "identify", coll, tu_path(dir, "a.jpg"), "--half-view-features", "16385",
                              NULL};
        rc = tu_exec(&out, &err, 0, 60, argv);
        assert_int_equal(rc, 2);
        assert_non_null(strstr(err, "half-view-features"));
        free(out);
        free(err);
    }
    {
        const char *argv[] = {PATINA_CLI, "index", coll, tu_path(dir, "a.jpg"), "-f", "rootsift:views=4", NULL};
        rc = tu_exec(&out, &err, 0, 60, argv);
        assert_int_equal(rc, 2);
        assert_non_null(strstr(err, "views"));
        free(out);
        free(err);
    }
    tu_remove_tree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec),          cmocka_unit_test(test_view_images),
        cmocka_unit_test(test_views0_records), cmocka_unit_test(test_default_threshold),
        cmocka_unit_test(test_refset_rows),
        cmocka_unit_test(test_fold_before_verify), cmocka_unit_test(test_verify_rows),
        cmocka_unit_test(test_view_pass), cmocka_unit_test(test_first_features),
        cmocka_unit_test(test_half_view_features),
        cmocka_unit_test(test_table_store),
        cmocka_unit_test(test_half_scale_query), cmocka_unit_test(test_fuse_half),
        cmocka_unit_test(test_half_query), cmocka_unit_test(test_half_pairs), cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
