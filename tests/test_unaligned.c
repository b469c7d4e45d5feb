/* Descriptors, records and queries at any address: every public call that
 * takes rows gives, for rows at an odd address (offsets 1..7 from an
 * aligned one, as a network message or a packed file hands them over), the
 * answer it gives for the same bytes aligned. Run under UBSan (make asan)
 * this is also the check that no typed load reads the caller's memory at
 * an address C does not allow (it found the cluster's shards doing so). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define NREF 24
#define NQ 5

static patina_context_t *ctx_new(void) { return tu_context(2); }

static void images(patina_image_t *imgs, size_t n, int w, int kind, uint64_t seed)
{
    tu_rng_t r;
    tu_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) tu_random_image(&imgs[i], w, w, kind < 0 ? 1 + (int)(i % 2) : kind, &r);
}

static void images_free(patina_image_t *imgs, size_t n)
{
    for (size_t i = 0; i < n; i++) patina_image_release(&imgs[i]);
}

/* A copy of data[0 .. bytes) at an address `off` bytes past an 8-aligned
 * one; *base is what to free. */
static void *at_offset(const void *data, size_t bytes, size_t off, void **base)
{
    unsigned char *b = malloc(bytes + 16);
    assert_non_null(b);
    *base = b;
    b += (8 - ((uintptr_t)b & 7)) & 7; /* 8-aligned */
    memcpy(b + off, data, bytes);
    return b + off;
}

static void hits_equal(const patina_hit_t *a, const patina_hit_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        assert_true(a[i].id == b[i].id);
        assert_true(a[i].distance == b[i].distance || (isnan(a[i].distance) && isnan(b[i].distance)));
    }
}

/* The search families: extraction into an odd address, index and pivot
 * puts and searches, the distance, and a detached table fed by changes. */
static void test_search_families(void **state)
{
    static const char *const specs[] = {"cedd", "lbp8", "glcm", "haralick", "signature:k=8"};
    patina_context_t *ctx = ctx_new();
    (void)state;
    for (size_t sp = 0; sp < sizeof specs / sizeof *specs; sp++) {
        patina_extractor_t *ex = NULL;
        patina_image_t imgs[NREF + NQ];
        uint64_t ids[NREF];
        unsigned char *descs;
        size_t bytes, i;
        const int sig = !strncmp(specs[sp], "signature", 9);
        TU_OK(patina_extractor_new(&ex, specs[sp]));
        bytes = patina_extractor_bytes(ex);
        images(imgs, NREF + NQ, 40, -1, 100 + sp);
        descs = malloc((NREF + NQ) * bytes);
        TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, descs, imgs, NREF + NQ, NULL));
        for (i = 0; i < NREF; i++) ids[i] = 10 + 3 * i;
        {
            patina_index_t *ref = NULL;
            patina_hit_t want[NQ * 4], got[NQ * 4];
            size_t cw[NQ], cg[NQ], crw[NQ];
            patina_hit_t *rw[NQ], *rg[NQ];
            TU_OK(patina_index_new(&ref, ex, ids, descs, NREF));
            TU_OK(patina_index_knn(ctx, ref, descs + NREF * bytes, NQ, 4, NULL, want, cw));
            TU_OK(patina_index_range(ctx, ref, descs + NREF * bytes, NQ, INFINITY, NULL, rw, crw));
            for (size_t off = 1; off < 8; off++) {
                void *b1, *b2, *b3;
                unsigned char *ext = at_offset(descs, (NREF + NQ) * bytes, off, &b1);
                const unsigned char *rows = at_offset(descs, NREF * bytes, off, &b2);
                const unsigned char *qs = at_offset(descs + NREF * bytes, NQ * bytes, off, &b3);
                patina_index_t *idx = NULL;
                /* extraction straight into an odd address: the same bytes */
                memset(ext, 0, (NREF + NQ) * bytes);
                TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, ext, imgs, NREF + NQ, NULL));
                assert_memory_equal(ext, descs, (NREF + NQ) * bytes);
                /* put at an odd address (half by index_new, half by put), search from one */
                TU_OK(patina_index_new(&idx, ex, ids, rows, NREF / 2));
                TU_OK(patina_index_put(idx, ids + NREF / 2, rows + NREF / 2 * bytes, NREF - NREF / 2));
                TU_OK(patina_index_knn(ctx, idx, qs, NQ, 4, NULL, got, cg));
                assert_memory_equal(cg, cw, sizeof cw);
                hits_equal(got, want, NQ * 4);
                TU_OK(patina_index_range(ctx, idx, qs, NQ, INFINITY, NULL, rg, cg));
                for (i = 0; i < NQ; i++) {
                    assert_int_equal(cg[i], NREF);
                    hits_equal(rg[i], rw[i], NREF);
                    patina_free(rg[i]);
                }
                /* the pair distance */
                for (i = 0; i < NQ; i++) {
                    const double d0 = patina_extractor_distance(ex, descs + (NREF + i) * bytes, descs + i * bytes);
                    const double d1 = patina_extractor_distance(ex, qs + i * bytes, rows + i * bytes);
                    assert_true(d0 == d1 || (isnan(d0) && isnan(d1)));
                }
                patina_index_free(idx);
                /* a detached table fed by changes whose descriptors sit at odd addresses */
                {
                    patina_table_t *t = NULL;
                    patina_change_t ch[NREF];
                    patina_table_results_t res;
                    patina_table_query_t q;
                    char keys[NREF][16];
                    TU_OK(patina_table_new(&t, ctx, specs[sp], NULL));
                    for (i = 0; i < NREF; i++) {
                        snprintf(keys[i], sizeof keys[i], "k%zu", i);
                        ch[i] = (patina_change_t){PATINA_CHANGE_PUT, ids[i], keys[i], rows + i * bytes};
                    }
                    TU_OK(patina_table_apply(t, ch, NREF, 1, NULL));
                    patina_table_query_init(&q);
                    q.k = 4;
                    TU_OK(patina_table_search(t, qs, NQ, &q, &res));
                    for (i = 0; i < NQ; i++) {
                        assert_int_equal(res.offsets[i + 1] - res.offsets[i], 4);
                        hits_equal(res.hits + res.offsets[i], want + i * 4, 4);
                    }
                    patina_table_results_release(&res);
                    patina_table_free(t);
                }
                if (sig) { /* the signature record's calls, and a pivot table */
                    patina_signature_info_t i0, i1;
                    float c0[PATINA_SIGNATURE_COLS], c1[PATINA_SIGNATURE_COLS];
                    double s0, s1;
                    patina_pivot_index_t *pi = NULL;
                    patina_pivot_opts_t po;
                    patina_hit_t ph[NQ * 4];
                    size_t pc[NQ];
                    void *b4;
                    unsigned char *packed = at_offset(descs, bytes, off, &b4);
                    TU_OK(patina_signature_info(&i0, descs, bytes));
                    TU_OK(patina_signature_info(&i1, rows, bytes));
                    assert_memory_equal(&i0, &i1, sizeof i0);
                    TU_OK(patina_signature_centroid(c0, descs, bytes, 0));
                    TU_OK(patina_signature_centroid(c1, rows, bytes, 0));
                    assert_memory_equal(c0, c1, sizeof c0);
                    TU_OK(patina_signature_sqfd(&s0, descs + NREF * bytes, descs, bytes));
                    TU_OK(patina_signature_sqfd(&s1, qs, rows, bytes));
                    assert_true(s0 == s1);
                    memset(packed, 0xee, bytes);
                    TU_OK(patina_signature_pack(ex, packed, c0, 1));
                    TU_OK(patina_signature_info(&i1, packed, bytes));
                    assert_int_equal(i1.count, 1);
                    patina_pivot_opts_init(&po);
                    po.pivots = 3;
                    TU_OK(patina_pivot_index_new(&pi, ctx, ex, ids, rows, NREF / 2, &po));
                    TU_OK(patina_pivot_index_put(pi, ctx, ids + NREF / 2, rows + NREF / 2 * bytes,
                                                 NREF - NREF / 2));
                    TU_OK(patina_pivot_index_knn(ctx, pi, qs, NQ, 4, NULL, ph, pc));
                    hits_equal(ph, want, NQ * 4);
                    patina_pivot_index_free(pi);
                    free(b4);
                }
                free(b1);
                free(b2);
                free(b3);
            }
            for (i = 0; i < NQ; i++) patina_free(rw[i]);
            patina_index_free(ref);
        }
        images_free(imgs, NREF + NQ);
        free(descs);
        patina_extractor_free(ex);
    }
    patina_context_free(ctx);
}

/* Identification: reference records put and queries identified from odd
 * addresses, directly on a reference set and through a detached table. */
static void test_identify(void **state)
{
    const char *spec = "rootsift:m=64";
    patina_context_t *ctx = ctx_new();
    patina_extractor_t *ex = NULL;
    patina_refset_t *rs = NULL;
    patina_image_t imgs[NREF];
    patina_identify_opts_t o;
    patina_identify_hit_t want[NQ * 3], got[NQ * 3];
    patina_identify_result_t rw[NQ], rg[NQ];
    unsigned char *recs, *qrecs;
    size_t bytes, qbytes, i;
    float pw[200 * 4], pg[200 * 4];
    size_t npw, npg;
    (void)state;
    TU_OK(patina_extractor_new(&ex, spec));
    bytes = patina_extractor_bytes(ex);
    images(imgs, NREF, 128, 0, 7);
    recs = malloc(NREF * bytes);
    TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, recs, imgs, NREF, NULL));
    TU_OK(patina_refset_new(&rs, spec));
    for (i = 0; i < NREF; i++) TU_OK(patina_refset_put(rs, i + 1, recs + i * bytes, bytes));
    qbytes = patina_identify_query_bytes(rs);
    qrecs = malloc(NQ * qbytes);
    TU_OK(patina_identify_extract(ctx, rs, qrecs, imgs + 3, NQ, NULL)); /* queries: references 4..8 */
    patina_identify_opts_init(&o);
    o.k = 3;
    TU_OK(patina_identify(ctx, rs, qrecs, NQ, &o, want, rw));
    for (i = 0; i < NQ; i++) {
        if (!(rw[i].nhits >= 1 && want[i * 3].id == i + 4))
            fail_msg("query %zu: %zu hits, rank 1 id %llu (%u features)", i, rw[i].nhits,
                     (unsigned long long)want[i * 3].id, (unsigned)rw[i].query_features);
    }
    TU_OK(patina_identify_pairs(rs, qrecs, 4, &o, pw, 200, &npw));
    assert_true(npw > 0);
    for (size_t off = 1; off < 8; off++) {
        void *b1, *b2, *b3;
        unsigned char *ext = at_offset(qrecs, NQ * qbytes, off, &b1);
        const unsigned char *rows = at_offset(recs, NREF * bytes, off, &b2);
        const unsigned char *qs = at_offset(qrecs, NQ * qbytes, off, &b3);
        patina_refset_t *rs2 = NULL;
        patina_rootsift_info_t f0, f1;
        float g0[4], g1[4];
        memset(ext, 0, NQ * qbytes);
        TU_OK(patina_identify_extract(ctx, rs, ext, imgs + 3, NQ, NULL));
        assert_memory_equal(ext, qrecs, NQ * qbytes);
        TU_OK(patina_rootsift_info(&f0, recs, bytes));
        TU_OK(patina_rootsift_info(&f1, rows, bytes));
        assert_memory_equal(&f0, &f1, sizeof f0);
        TU_OK(patina_rootsift_feature(g0, NULL, recs, bytes, 0));
        TU_OK(patina_rootsift_feature(g1, NULL, rows, bytes, 0));
        assert_memory_equal(g0, g1, sizeof g0);
        TU_OK(patina_refset_new(&rs2, spec));
        for (i = 0; i < NREF; i++) TU_OK(patina_refset_put(rs2, i + 1, rows + i * bytes, bytes));
        TU_OK(patina_identify(ctx, rs2, qs, NQ, &o, got, rg));
        for (i = 0; i < NQ; i++) {
            assert_int_equal(rg[i].nhits, rw[i].nhits);
            assert_int_equal(rg[i].decision, rw[i].decision);
        }
        for (i = 0; i < NQ * 3; i++) {
            assert_true(got[i].id == want[i].id && got[i].score == want[i].score);
            assert_int_equal(got[i].inliers, want[i].inliers);
        }
        TU_OK(patina_identify_pairs(rs2, qs, 4, &o, pg, 200, &npg));
        assert_int_equal(npg, npw);
        assert_memory_equal(pg, pw, npw * 4 * sizeof *pw);
        patina_refset_free(rs2);
        { /* through a detached table */
            patina_table_t *t = NULL;
            patina_change_t ch[NREF];
            char keys[NREF][16];
            TU_OK(patina_table_new(&t, ctx, spec, NULL));
            for (i = 0; i < NREF; i++) {
                snprintf(keys[i], sizeof keys[i], "r%zu", i);
                ch[i] = (patina_change_t){PATINA_CHANGE_PUT, i + 1, keys[i], rows + i * bytes};
            }
            TU_OK(patina_table_apply(t, ch, NREF, 1, NULL));
            TU_OK(patina_table_identify(t, qs, NQ, &o, got, rg, NULL));
            for (i = 0; i < NQ * 3; i++) assert_true(got[i].id == want[i].id && got[i].score == want[i].score);
            TU_OK(patina_table_identify_pairs(t, qs, 4, &o, pg, 200, &npg));
            assert_int_equal(npg, npw);
            patina_table_free(t);
        }
        free(b1);
        free(b2);
        free(b3);
    }
    patina_refset_free(rs);
    images_free(imgs, NREF);
    free(recs);
    free(qrecs);
    patina_extractor_free(ex);
    patina_context_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_search_families),
        cmocka_unit_test(test_identify),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
