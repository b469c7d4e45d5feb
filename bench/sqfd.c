/* bench_sqfd: SQFD k-NN and range search on the CPU, the sequential scan
 * (patina_index_knn / _range) against pivot-table filtering
 * (patina_pivot_index_knn / _range with metric and ptolemaic bounds).
 *
 *   bench_sqfd [--n N] [--centroids C] [--clusters G] [--noise S] [--alpha A]
 *              [--pivots P] [--select farthest|random] [--queries Q]
 *              [--scan-queries QS] [--k K] [--threads T] [--collection DIR]
 *
 * Synthetic collection (default): N signatures (default 100000) of about C
 * centroids (default 40; a record holds C, a tenth of the rows dropped at
 * random) in the 7 features, clustered: G scenes (default 1000) of C
 * centroids uniform in [0,1]^7 with weights summing to 1; each signature is
 * a scene with every feature moved by uniform noise of width S (default
 * 0.1) and every weight scaled by 0.8..1.2. Queries are new signatures
 * made the same way. --collection DIR searches a collection's signature
 * table instead (its rows as the collection, Q of its rows as queries).
 *
 * Reported per method: ms per query (a batch of Q queries, the context's
 * T threads, default all), the fraction of rows pruned (no SQFD), the
 * query-to-pivot distances; the time to build the table. The scan runs on
 * QS queries (default 4) of the same batch, for its time; every filtered
 * result is checked against the scan on those queries (ids and distance
 * bits): exit 1 on a difference. The range radius is the mean distance of
 * the scan's K-th hit (default K 10). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "patina/patina.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rs = 0x243f6a8885a308d3ull;
static double uni(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (double)(rs >> 11) / 9007199254740992.0;
}

static void die(const char *what, patina_status s)
{
    fprintf(stderr, "bench_sqfd: %s: %s: %s\n", what, patina_status_str(s), patina_last_error());
    exit(2);
}

/* One signature from scene g into rec. */
static void make_sig(const patina_extractor_t *ex, const float *scenes, size_t C, size_t g, double noise, float *rec)
{
    float rows[8 * 1024];
    size_t m = 0;
    for (size_t i = 0; i < C; i++) {
        const float *s = scenes + (g * C + i) * 8;
        if (uni() < 0.1) continue;
        rows[m * 8] = (float)(s[0] * (0.8 + 0.4 * uni()));
        for (int k = 1; k < 8; k++) rows[m * 8 + k] = (float)(s[k] + noise * (uni() - 0.5));
        m++;
    }
    if (m == 0) {
        memcpy(rows, scenes + g * C * 8, 8 * sizeof *rows);
        m = 1;
    }
    patina_status st = patina_signature_pack(ex, rec, rows, m);
    if (st != PATINA_OK) die("pack", st);
}

static int same(const patina_hit_t *a, size_t na, const patina_hit_t *b, size_t nb)
{
    if (na != nb) return 0;
    for (size_t i = 0; i < na; i++)
        if (a[i].id != b[i].id || memcmp(&a[i].distance, &b[i].distance, sizeof(double))) return 0;
    return 1;
}

int main(int argc, char **argv)
{
    size_t n = 100000, C = 40, G = 1000, P = 32, Q = 32, QS = 4, K = 10;
    double noise = 0.1, alpha = 0.2;
    int threads = 0, sel = PATINA_PIVOTS_FARTHEST;
    const char *coll_dir = NULL;
    char spec[256];
    patina_extractor_t *ex = NULL;
    patina_context_t *ctx = NULL;
    patina_context_opts_t co;
    patina_index_t *idx = NULL;
    patina_pivot_index_t *pi = NULL;
    patina_pivot_opts_t po;
    patina_status s;
    uint64_t *ids = NULL;
    float *recs = NULL, *qs;
    size_t dim, bytes, i;
    double t, t_build, scan_knn_ms, scan_range_ms, radius = 0;
    patina_hit_t *scan_hits, *hits;
    size_t *scan_counts, *counts;
    patina_hit_t **scan_rh, **rh;
    size_t *scan_rc, *rc;
    int bad = 0;

    for (i = 1; i < (size_t)argc; i++) {
        const char *a = argv[i], *v = i + 1 < (size_t)argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "bench_sqfd: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--n")) n = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--centroids")) C = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--clusters")) G = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--noise")) noise = atof(v);
        else if (!strcmp(a, "--alpha")) alpha = atof(v);
        else if (!strcmp(a, "--pivots")) P = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--select")) sel = !strcmp(v, "random") ? PATINA_PIVOTS_RANDOM : PATINA_PIVOTS_FARTHEST;
        else if (!strcmp(a, "--queries")) Q = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--scan-queries")) QS = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--k")) K = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--collection")) coll_dir = v;
        else {
            fprintf(stderr, "bench_sqfd: unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    if (QS > Q) QS = Q;
    patina_context_opts_init(&co);
    co.threads = threads;
    if ((s = patina_context_new(&ctx, &co)) != PATINA_OK) die("context", s);

    if (coll_dir) {
        patina_collection_t *c = NULL;
        uint8_t *descs = NULL;
        size_t got = 0, b = 0;
        snprintf(spec, sizeof spec, "signature");
        if ((s = patina_extractor_new(&ex, spec)) != PATINA_OK) die("extractor", s);
        if ((s = patina_collection_open(&c, coll_dir, PATINA_OPEN_READONLY, 0)) != PATINA_OK) die("open", s);
        if ((s = patina_collection_load(c, patina_extractor_spec(ex), &ids, &descs, &got, &b)) != PATINA_OK)
            die("load", s);
        patina_collection_close(c);
        n = got;
        recs = (float *)descs;
        dim = patina_extractor_dim(ex);
        bytes = patina_extractor_bytes(ex);
        if (Q > n) Q = n;
        if (QS > Q) QS = Q;
        qs = malloc(Q * bytes);
        for (i = 0; i < Q; i++) memcpy(qs + i * dim, recs + ((i * 7919) % n) * dim, bytes);
    } else {
        float *scenes = malloc(G * C * 8 * sizeof *scenes);
        snprintf(spec, sizeof spec, "signature:k=%zu,alpha=%g", C, alpha);
        if ((s = patina_extractor_new(&ex, spec)) != PATINA_OK) die("extractor", s);
        dim = patina_extractor_dim(ex);
        bytes = patina_extractor_bytes(ex);
        for (size_t g = 0; g < G; g++) {
            double w = 0;
            for (size_t j = 0; j < C; j++) {
                float *r = scenes + (g * C + j) * 8;
                r[0] = (float)(0.2 + uni());
                w += r[0];
                for (int k = 1; k < 8; k++) r[k] = (float)uni();
            }
            for (size_t j = 0; j < C; j++) scenes[(g * C + j) * 8] = (float)(scenes[(g * C + j) * 8] / w);
        }
        recs = malloc(n * bytes);
        ids = malloc(n * sizeof *ids);
        qs = malloc(Q * bytes);
        for (i = 0; i < n; i++) {
            ids[i] = i + 1;
            make_sig(ex, scenes, C, (size_t)(uni() * (double)G) % G, noise, recs + i * dim);
        }
        for (i = 0; i < Q; i++) make_sig(ex, scenes, C, (size_t)(uni() * (double)G) % G, noise, qs + i * dim);
        free(scenes);
    }
    printf("# bench_sqfd: %zu signatures (%s), %zu queries (scan on %zu), k %zu, %zu pivots (%s), %d threads\n",
           n, coll_dir ? coll_dir : "synthetic", Q, QS, K, P, sel == PATINA_PIVOTS_RANDOM ? "random" : "farthest",
           patina_context_threads(ctx));
    if (!coll_dir)
        printf("# synthetic: %zu centroids, %zu scenes, noise %g, spec %s\n", C, G, noise, spec);
    fflush(stdout);

    if ((s = patina_index_new(&idx, ex, ids, recs, n)) != PATINA_OK) die("index", s);
    patina_pivot_opts_init(&po);
    po.pivots = P;
    po.select = (patina_pivot_select)sel;
    t = now();
    if ((s = patina_pivot_index_new(&pi, ctx, ex, ids, recs, n, &po)) != PATINA_OK) die("pivots", s);
    t_build = now() - t;

    scan_hits = malloc(Q * K * sizeof *scan_hits);
    hits = malloc(Q * K * sizeof *hits);
    scan_counts = malloc(Q * sizeof *scan_counts);
    counts = malloc(Q * sizeof *counts);
    scan_rh = calloc(Q, sizeof *scan_rh);
    rh = calloc(Q, sizeof *rh);
    scan_rc = calloc(Q, sizeof *scan_rc);
    rc = calloc(Q, sizeof *rc);
    {
        patina_search_opts_t so;
        patina_search_opts_init(&so);
        so.device = PATINA_DEVICE_CPU;
        t = now();
        if ((s = patina_index_knn(ctx, idx, qs, QS, K, &so, scan_hits, scan_counts)) != PATINA_OK) die("scan", s);
        scan_knn_ms = 1e3 * (now() - t) / (double)QS;
        for (i = 0; i < QS; i++) radius += scan_hits[i * K + scan_counts[i] - 1].distance;
        radius /= (double)QS;
        t = now();
        if ((s = patina_index_range(ctx, idx, qs, QS, radius, &so, scan_rh, scan_rc)) != PATINA_OK) die("scan", s);
        scan_range_ms = 1e3 * (now() - t) / (double)QS;
    }
    printf("# pivot table: %.2f s to build (%zu x %zu SQFDs), range radius %.6g (mean %zu-th NN distance)\n\n",
           t_build, n, P, radius, K);
    printf("| query | method | ms / query | rows pruned | SQFDs / query | speed-up |\n");
    printf("|---|---|---|---|---|---|\n");
    printf("| %zu-NN | scan | %.1f | 0%% | %zu | 1.0 |\n", K, scan_knn_ms, n);
    for (int range = 0; range < 2; range++) {
        if (range) printf("| range | scan | %.1f | 0%% | %zu | 1.0 |\n", scan_range_ms, n);
        for (int b = 1; b >= 0; b--) {
            patina_pivot_search_opts_t so;
            patina_search_stats_t st;
            double ms;
            patina_pivot_search_opts_init(&so);
            so.bound = (patina_pivot_bound)b;
            so.stats = &st;
            t = now();
            s = range ? patina_pivot_index_range(ctx, pi, qs, Q, radius, &so, rh, rc)
                      : patina_pivot_index_knn(ctx, pi, qs, Q, K, &so, hits, counts);
            if (s != PATINA_OK) die("pivot search", s);
            ms = 1e3 * (now() - t) / (double)Q;
            for (i = 0; i < QS; i++) {
                int ok = range ? same(rh[i], rc[i], scan_rh[i], scan_rc[i])
                               : same(hits + i * K, counts[i], scan_hits + i * K, scan_counts[i]);
                if (!ok) {
                    fprintf(stderr, "bench_sqfd: query %zu differs from the scan (%s, %s)\n", i,
                            range ? "range" : "k-NN", b ? "metric" : "ptolemaic");
                    bad = 1;
                }
            }
            if (range)
                for (i = 0; i < Q; i++) {
                    free(rh[i]);
                    rh[i] = NULL;
                }
            printf("| %s | %s, %zu pivots | %.1f | %.1f%% | %.0f (+%zu to pivots) | %.1f |\n",
                   range ? "range" : "k-NN", b ? "metric" : "ptolemaic", P, ms,
                   100.0 * (double)st.pruned / ((double)n * (double)Q), (double)st.computed / (double)Q, P,
                   (range ? scan_range_ms : scan_knn_ms) / ms);
            fflush(stdout);
        }
    }
    for (i = 0; i < QS; i++) free(scan_rh[i]);
    free(scan_rh);
    free(rh);
    free(scan_rc);
    free(rc);
    free(scan_hits);
    free(hits);
    free(scan_counts);
    free(counts);
    patina_pivot_index_free(pi);
    patina_index_free(idx);
    free(recs);
    free(ids);
    free(qs);
    patina_extractor_free(ex);
    patina_context_free(ctx);
    if (bad) fprintf(stderr, "bench_sqfd: results differ from the scan\n");
    return bad;
}
