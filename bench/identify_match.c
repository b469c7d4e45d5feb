/* CPU matching throughput of identification (docs/identify.md): reference
 * images per second for one query of n = 768 features against references of
 * m = 384 features, through patina_identify (matching and scoring; RANSAC
 * off, then on for the top 10), on 1 thread and on all threads, beside the
 * plain matcher (idf_match_ref) on one thread. Rows are random RootSIFT-like
 * u8 rows: the work per reference does not depend on the data, except on
 * CPUs with AVX-512 VNNI, where query values of 128 or more cost a second
 * pass over their four-byte groups (docs/identify.md).
 *
 *   bench_identify_match [REFERENCES (default 512)] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "features/family.h"
#include "features/rootsift.h"
#include "identify/identify.h"
#include "patina/patina.h"
#include "benchutil.h"

static bench_rng_t rng = {88172645463325252ull};

static void die(const char *what, patina_status s)
{
    fprintf(stderr, "bench_identify_match: %s: %s: %s\n", what, patina_status_str(s), patina_last_error());
    exit(1);
}

int main(int argc, char **argv)
{
    size_t nref = argc > 1 ? (size_t)atol(argv[1]) : 512, i, bytes, qbytes;
    const size_t m = 384, n = 768;
    patina_extractor_t *ex = NULL;
    patina_collection_t *c = NULL;
    patina_refset_t *rs = NULL;
    unsigned char *recs, *q;
    patina_insert_t *it;
    char tmpl[] = "/tmp/patina-bench-identify-XXXXXX", path[256], (*keys)[24];
    patina_status s;
    int threads[2], t;

    if (nref < 1) nref = 1;
    if ((s = patina_extractor_new(&ex, "rootsift:m=384,n=768")) != PATINA_OK) die("extractor", s);
    bytes = patina_extractor_bytes(ex);
    qbytes = rs_record_bytes(n, RS_QUANT_U8);
    recs = malloc(nref * bytes);
    q = malloc(qbytes);
    it = calloc(nref, sizeof *it);
    keys = calloc(nref, sizeof *keys);
    if (!recs || !q || !it || !keys || !mkdtemp(tmpl)) {
        fprintf(stderr, "bench_identify_match: out of memory or no temp dir\n");
        return 1;
    }
    for (i = 0; i < nref; i++) {
        bench_rootsift_record(recs + i * bytes, m, m, &rng);
        snprintf(keys[i], sizeof keys[i], "r%zu", i);
        it[i].key = keys[i];
        it[i].size = 1;
        it[i].desc = recs + i * bytes;
    }
    bench_rootsift_record(q, n, n, &rng);
    snprintf(path, sizeof path, "%s/coll", tmpl);
    if ((s = patina_collection_open(&c, path, PATINA_OPEN_CREATE, 0)) != PATINA_OK) die("collection", s);
    if ((s = patina_collection_put(c, patina_extractor_spec(ex), bytes, it, nref, NULL)) != PATINA_OK) die("put", s);
    if ((s = patina_refset_load(&rs, c, NULL)) != PATINA_OK) die("refset", s);

    printf("identification matching, one query: n = %zu query features, m = %zu per reference, %zu references\n",
           n, m, nref);
    { /* the plain float matcher (the definition), one thread */
        int32_t *ib = malloc((n + m) * sizeof *ib);
        float *fb = malloc((2 * n + m) * sizeof *fb), *qf = malloc(n * 128 * sizeof *qf),
              *rf = malloc(m * 128 * sizeof *rf);
        idf_nn_t nn = {ib, fb, fb + n, ib + n, fb + 2 * n};
        size_t reps = nref < 32 ? nref : 32;
        double t0, dt;
        idf_dequantise(qf, q);
        t0 = patina_now();
        for (i = 0; i < reps; i++) {
            idf_dequantise(rf, recs + i * bytes);
            idf_match_ref(&nn, qf, n, rf, m);
        }
        dt = patina_now() - t0;
        printf("  %-44s %9.1f references/s\n", "plain float matcher (idf_match_ref), 1 thread", (double)reps / dt);
        free(ib);
        free(fb);
        free(qf);
        free(rf);
    }
    threads[0] = 1;
    threads[1] = patina_cpu_count();
    for (t = 0; t < 2; t++) {
        patina_context_t *ctx = NULL;
        patina_context_opts_t co;
        patina_identify_opts_t o;
        patina_identify_hit_t hits[10];
        patina_identify_result_t res;
        int verify;
        if (t == 1 && threads[1] == 1) break;
        patina_context_opts_init(&co);
        co.threads = threads[t];
        if ((s = patina_context_new(&ctx, &co)) != PATINA_OK) die("context", s);
        for (verify = 0; verify < 2; verify++) {
            double t0, dt;
            char label[96];
            patina_identify_opts_init(&o);
            o.verify = verify;
            o.device = PATINA_DEVICE_CPU;
            t0 = patina_now();
            if ((s = patina_identify(ctx, rs, q, 1, &o, hits, &res)) != PATINA_OK) die("identify", s);
            dt = patina_now() - t0;
            snprintf(label, sizeof label, "patina_identify, %s, %d thread%s", verify ? "verify top 10" : "no verify",
                     threads[t], threads[t] == 1 ? "" : "s");
            printf("  %-44s %9.1f references/s\n", label, (double)nref / dt);
        }
        patina_context_free(ctx);
    }
    patina_refset_free(rs);
    patina_collection_close(c);
    patina_extractor_free(ex);
    snprintf(path, sizeof path, "rm -rf '%s'", tmpl);
    if (system(path) != 0) fprintf(stderr, "bench_identify_match: could not remove %s\n", tmpl);
    free(recs);
    free(q);
    free(it);
    free(keys);
    return 0;
}
