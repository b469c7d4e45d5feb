/* bench_sqfd: SQFD k-NN and range search: on the CPU the sequential scan
 * (patina_index_knn / _range) against pivot-table filtering
 * (patina_pivot_index_knn / _range with metric and ptolemaic bounds); with
 * a GPU, the scan's table (below).
 *
 *   bench_sqfd [--n N | --synthetic N] [--centroids C] [--clusters G] [--noise S]
 *              [--alpha A] [--pivots P (0: none)] [--select farthest|random]
 *              [--queries Q] [--scan-queries QS] [--k K] [--threads T] [--gpu-budget MIB]
 *              [--collection DIR [--spec S]] [--no-peers]
 *
 * Synthetic collection (default): N signatures (default 100000) of about C
 * centroids (default 40; a record holds C, a tenth of the rows dropped at
 * random) in the 7 features, clustered: G scenes (default 1000) of C
 * centroids uniform in [0,1]^7 with weights summing to 1; each signature is
 * a scene with every feature moved by uniform noise of width S (default
 * 0.1) and every weight scaled by 0.8..1.2. Queries are new signatures
 * made the same way. --collection DIR searches a collection's signature
 * table instead (its rows as the collection, Q of its rows as queries: row
 * (i * 7919) mod n for query i): the table --spec S names, or the
 * collection's only signature table; its records give alpha and the
 * centroid count (--alpha and --centroids are ignored). With --pivots P the
 * collection's stored pivot table is used when it has P pivots (patina
 * index --pivots P; loaded and brought up to date, the load timed), else
 * one is built.
 *
 * Reported per method: ms per query (a batch of Q queries, the context's
 * T threads, default all), the fraction of rows pruned (no SQFD), the
 * query-to-pivot distances; the time to build the table. The scan runs on
 * QS queries (default 4) of the same batch, for its time; every filtered
 * result is checked against the scan on those queries (ids and distance
 * bits): exit 1 on a difference. The range radius is the mean distance of
 * the scan's K-th hit (default K 10).
 *
 * The scan table (one per run): SQFDs per second and ms per query of
 *   - our CPU scan (self terms) on 1 thread (a sub-index of at most 20000
 *     rows) and on all threads (the whole index, QS queries);
 *   - OpenCV's SQFD (CPU, 1 thread; bench/sqfd_peers.py, when cv2.xfeatures2d
 *     imports) -- the full (n+m)^2 form per pair;
 *   - the GPU production scan kernel alone (patina_gpu__sqfd_scan_ms: every
 *     pair's float estimate and bound) for 1, 64 and 1024 queries, with the
 *     fraction of the FP32 issue limit (SMs x 128 lanes x clock, at 26 FP32
 *     instructions per centroid pair, counted in the kernel's PTX: 7
 *     differences, 7 multiplies and FMAs, the alpha product, expf's 10, the
 *     weight's FMA);
 *   - the GPU end to end: patina_index_knn / _range with device GPU on the Q
 *     queries (filter on the GPU, the candidates ranked on the CPU), checked
 *     against the CPU scan (ids and distance bits; exit 1 on a difference);
 *   - the paper's block-wise kernel (lab/sqfd, float and double, blocks of
 *     8000 signatures per launch), one query;
 *   - PyTorch on the same GPU in the same run (bench/sqfd_peers.py; 1 and 64
 *     queries).
 * The paper's own figures are times on a GTX 580 in plots, not in its text:
 * its text gives ratios (GPU float 5.6x, double 3.4x the 48-core server on
 * the scan; 2.98x on 10-NN with the ptolemaic index), printed as notes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "features/signature.h"
#include "gpu/context.h"
#include "gpu/gpu.h"
#include "patina/patina.h"
#if PATINA_BENCH_LAB
#include "blockwise.h"
#endif

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

/* ---------------------------------------------------------- the scan table */

static double peer_torch[2] = {-1, -1}, peer_opencv = -1; /* ms: torch 1 and 64 queries; opencv per SQFD */

static void run_peers(size_t n, size_t C, double alpha, size_t K)
{
    const char *py = getenv("PATINA_PYTHON");
    char cmd[1024], line[512];
    FILE *p;
    snprintf(cmd, sizeof cmd, "%s bench/sqfd_peers.py --n %zu --centroids %zu --alpha %g --queries 1,64 --k %zu 2>&1",
             py && *py ? py : "python3", n, C, alpha, K);
    if (!(p = popen(cmd, "r"))) return;
    while (fgets(line, sizeof line, p)) {
        size_t q;
        double ms;
        if (sscanf(line, "torch %zu %lf", &q, &ms) == 2) peer_torch[q == 1 ? 0 : 1] = ms;
        else if (sscanf(line, "opencv_per_sqfd_ms %lf", &ms) == 1) peer_opencv = ms;
        else fprintf(stderr, "  peer: %s", line);
    }
    pclose(p);
}

static void row(const char *method, size_t nq, double ms_per_query, size_t n, double torch_ms, double limit)
{
    char vs[32] = "-", lim[32] = "-";
    if (torch_ms > 0 && ms_per_query > 0) snprintf(vs, sizeof vs, "%.2fx", torch_ms / ms_per_query);
    if (limit > 0) snprintf(lim, sizeof lim, "%.2f", limit);
    printf("| %s | %zu | %.3f | %.3g | %s | %s |\n", method, nq, ms_per_query, (double)n / (ms_per_query * 1e-3), vs,
           lim);
}

/* The scan table (the file's header comment); returns 1 when a GPU answer
 * differs from the CPU scan's. */
static int gpu_table(patina_context_t *ctx, const patina_extractor_t *ex, const uint64_t *ids, const float *recs,
                     size_t n, const float *qs, size_t Q, size_t QS, size_t K, double radius,
                     const patina_hit_t *scan_hits, const size_t *scan_counts, patina_hit_t *const *scan_rh,
                     const size_t *scan_rc, double scan_ms, int no_peers, size_t C, double alpha)
{
    const size_t dim = patina_extractor_dim(ex), bytes = patina_extractor_bytes(ex);
    double t, ms1 = 0, pairs = 0;
    int bad = 0;
    patina_status s;
    if (!no_peers) run_peers(n, C, alpha, K);
    for (size_t i = 0; i < n; i++) pairs += (double)recs[i * dim];
    pairs /= (double)n; /* mean row count */
    {
        double qm = 0;
        for (size_t q = 0; q < Q; q++) qm += (double)(((size_t)qs[q * dim] + 3) & ~(size_t)3);
        pairs *= qm / (double)Q; /* centroid pairs per SQFD, as the kernel runs them */
    }
    printf("| method (%zu signatures, %.0f centroid pairs per SQFD) | queries | ms / query | SQFD/s | vs PyTorch | "
           "of FP32 limit |\n|---|---|---|---|---|---|\n", n, pairs);
    {   /* our CPU scan on 1 thread: a sub-index of at most 20000 rows */
        const size_t m = n < 20000 ? n : 20000;
        patina_context_t *one;
        patina_context_opts_t o;
        patina_index_t *sub;
        patina_search_opts_t so;
        patina_hit_t *h = malloc(K * sizeof *h);
        size_t c;
        patina_context_opts_init(&o);
        o.threads = 1;
        patina_search_opts_init(&so);
        so.device = PATINA_DEVICE_CPU;
        if ((s = patina_context_new(&one, &o)) != PATINA_OK || (s = patina_index_new(&sub, ex, ids, recs, m)) != PATINA_OK)
            die("cpu 1 thread", s);
        t = now();
        if ((s = patina_index_knn(one, sub, qs, 1, K, &so, h, &c)) != PATINA_OK) die("cpu 1 thread", s);
        ms1 = 1e3 * (now() - t) * (double)n / (double)m;
        {
            char name[96];
            snprintf(name, sizeof name, "CPU scan, 1 thread (self terms; timed on %zu rows)", m);
            row(name, 1, ms1, n, -1, -1);
        }
        patina_index_free(sub);
        patina_context_free(one);
        free(h);
    }
    {
        char name[96];
        snprintf(name, sizeof name, "CPU scan, %d threads (self terms)", patina_context_threads(ctx));
        row(name, QS, scan_ms, n, -1, -1);
    }
    if (peer_opencv > 0) row("OpenCV PCTSignaturesSQFD, 1 thread (full form)", 1, peer_opencv * (double)n, n, -1, -1);
    else printf("| OpenCV PCTSignaturesSQFD | - | unavailable (no cv2.xfeatures2d) | | | |\n");
    if (patina_gpu_count() == 0) {
        printf("| GPU | - | no usable GPU: GPU rows skipped | | | |\n");
        return 0;
    }
    {
        patina_gpu_t *g = NULL;
        pgpu_sqfd_index_t v;
        double *self = malloc(n * sizeof *self), *sqq = malloc(1024 * sizeof *sqq), ms;
        float *q1024 = malloc(1024 * bytes);
        char desc[256] = "";
        static const size_t nqs[] = {1, 64, 1024};
        if ((s = patina_gpu_open(&g, 0, 0)) != PATINA_OK) die("gpu", s);
        (void)patina_gpu_describe(0, desc, sizeof desc);
        for (size_t i = 0; i < n; i++) self[i] = sig_self(recs + i * dim);
        for (size_t q = 0; q < 1024; q++) { /* the Q queries, repeated */
            memcpy(q1024 + q * dim, qs + (q % Q) * dim, bytes);
            sqq[q] = sig_self(q1024 + q * dim);
        }
        memset(&v, 0, sizeof v);
        v.serial = 0xbe0000ull;
        v.n = n;
        v.dim = dim;
        v.recs = recs;
        v.self = self;
        for (size_t i = 0; i < 3; i++) {
            char name[320]; /* the label and desc (up to 255 characters) */
            double lim;
            if ((s = patina_gpu__sqfd_scan_ms(g, &v, q1024, sqq, nqs[i], 0, 5, &ms)) != PATINA_OK) die("gpu scan", s);
            ms /= (double)nqs[i];
            lim = (double)n / (ms * 1e-3) * pairs * 26.0 / ((double)g->sm_count * 128.0 * (double)g->clock_khz * 1e3);
            snprintf(name, sizeof name, "GPU production scan kernel (%s)", i == 0 ? desc : "same");
            row(name, nqs[i], ms, n, i == 0 ? peer_torch[0] : i == 1 ? peer_torch[1] / 64.0 : -1, lim);
        }
        patina_gpu_close(g);
        free(self);
        free(sqq);
        free(q1024);
    }
    {   /* end to end through the search engine, checked against the CPU scan */
        patina_index_t *idx;
        patina_search_opts_t so;
        patina_search_stats_t st;
        patina_hit_t *h = malloc(Q * K * sizeof *h), **rh = calloc(Q, sizeof *rh);
        size_t *c = malloc(Q * sizeof *c), *rc = calloc(Q, sizeof *rc);
        double ms;
        if ((s = patina_index_new(&idx, ex, ids, recs, n)) != PATINA_OK) die("index", s);
        patina_search_opts_init(&so);
        so.device = PATINA_DEVICE_GPU;
        so.stats = &st;
        if ((s = patina_index_knn(ctx, idx, qs, 1, K, &so, h, c)) != PATINA_OK) die("gpu knn", s); /* the copy */
        t = now();
        if ((s = patina_index_knn(ctx, idx, qs, Q, K, &so, h, c)) != PATINA_OK) die("gpu knn", s);
        ms = 1e3 * (now() - t) / (double)Q;
        for (size_t q = 0; q < QS; q++)
            if (c[q] != scan_counts[q] ||
                memcmp(h + q * K, scan_hits + q * K, scan_counts[q] * sizeof *h) != 0) {
                fprintf(stderr, "bench_sqfd: GPU %zu-NN of query %zu differs from the CPU scan\n", K, q);
                bad = 1;
            }
        {
            char name[128];
            char name2[256];
            snprintf(name, sizeof name, "GPU %zu-NN end to end (filter + CPU ranking; %zu of %zu queries on the GPU)", K,
                     st.gpu_filter, Q);
            if (st.chunks) { /* over the budget: streamed from pinned memory */
                snprintf(name2, sizeof name2, "%.120s, streamed in %zu chunks at %.1f GB/s", name, st.chunks,
                         (double)st.host_bytes / (ms * (double)Q * 1e-3) / 1e9);
                row(name2, Q, ms, n, -1, -1);
            } else {
                row(name, Q, ms, n, -1, -1);
            }
        }
        t = now();
        if ((s = patina_index_range(ctx, idx, qs, Q, radius, &so, rh, rc)) != PATINA_OK) die("gpu range", s);
        ms = 1e3 * (now() - t) / (double)Q;
        for (size_t q = 0; q < Q; q++) {
            if (q < QS && (rc[q] != scan_rc[q] || (rc[q] && memcmp(rh[q], scan_rh[q], rc[q] * sizeof **rh) != 0))) {
                fprintf(stderr, "bench_sqfd: GPU range of query %zu differs from the CPU scan\n", q);
                bad = 1;
            }
            free(rh[q]);
        }
        {
            char name[128];
            snprintf(name, sizeof name, "GPU range %.4g end to end (filter + CPU ranking)", radius);
            row(name, Q, ms, n, -1, -1);
        }
        patina_index_free(idx);
        free(h);
        free(rh);
        free(c);
        free(rc);
    }
#if PATINA_BENCH_LAB
    {   /* the paper's block-wise kernel */
        char err[256];
        lab_bw_t *l = lab_bw_new(recs, n, dim, 8000, err, sizeof err);
        if (!l) {
            printf("| block-wise (paper) | - | %s | | | |\n", err);
        } else {
            for (int dbl = 0; dbl < 2; dbl++) {
                const double ms = lab_bw_time(l, qs, dbl, 3);
                row(dbl ? "block-wise kernel (paper, lab), double, blocks of 8000"
                        : "block-wise kernel (paper, lab), float, blocks of 8000",
                    1, ms, n, peer_torch[0], -1);
            }
            lab_bw_free(l);
        }
    }
#else
    printf("| block-wise (paper) | - | not built (the lab needs CUDA) | | | |\n");
#endif
    if (peer_torch[0] > 0) row("PyTorch (cdist, exp, einsum, topk; fp32)", 1, peer_torch[0], n, peer_torch[0], -1);
    if (peer_torch[1] > 0) row("PyTorch (cdist, exp, einsum, topk; fp32)", 64, peer_torch[1] / 64.0, n, peer_torch[1] / 64.0, -1);
    if (peer_torch[0] <= 0) printf("| PyTorch | - | unavailable | | | |\n");
    printf("\nThe paper (GTX 580, ALOI 72k, its plots): GPU float 5.6x and double 3.4x faster than a 48-core server "
           "on the scan; 10-NN with the ptolemaic index on the GPU 2.98x the 48 cores. (ms and SQFD/s: our machine; "
           "'of FP32 limit' counts 26 FP32 instructions per centroid pair.)\n");
    (void)ms1;
    return bad;
}

int main(int argc, char **argv)
{
    size_t n = 100000, C = 40, G = 1000, P = 32, Q = 32, QS = 4, K = 10;
    double noise = 0.1, alpha = 0.2;
    int threads = 0, sel = PATINA_PIVOTS_FARTHEST, no_peers = 0;
    uint64_t budget = 0;
    const char *coll_dir = NULL, *coll_spec = NULL;
    char spec[1024];
    int pivots_loaded = 0;
    size_t refreshed = 0;
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
    double t, t_build, scan_knn_ms, scan_range_ms, radius = 0, gpu_scan_knn_ms, gpu_scan_range_ms;
    patina_hit_t *scan_hits, *hits;
    size_t *scan_counts, *counts;
    patina_hit_t **scan_rh, **rh;
    size_t *scan_rc, *rc;
    int bad = 0;

    for (i = 1; i < (size_t)argc; i++) {
        const char *a = argv[i], *v = i + 1 < (size_t)argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-peers")) {
            no_peers = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "bench_sqfd: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--n") || !strcmp(a, "--synthetic")) n = strtoull(v, NULL, 10);
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
        else if (!strcmp(a, "--spec")) coll_spec = v;
        else if (!strcmp(a, "--gpu-budget")) budget = strtoull(v, NULL, 10) << 20;
        else {
            fprintf(stderr, "bench_sqfd: unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    if (QS > Q) QS = Q;
    patina_context_opts_init(&co);
    co.threads = threads;
    co.gpu_mem_budget = budget; /* 0: the default; below the rows' copy: streamed from pinned memory */
    if ((s = patina_context_new(&ctx, &co)) != PATINA_OK) die("context", s);

    if (coll_dir) {
        patina_collection_t *c = NULL;
        uint8_t *descs = NULL;
        size_t got = 0, b = 0;
        if ((s = patina_collection_open(&c, coll_dir, PATINA_OPEN_READONLY, 0)) != PATINA_OK) die("open", s);
        if (coll_spec) {
            snprintf(spec, sizeof spec, "%s", coll_spec);
        } else { /* the collection's only signature table */
            char **specs = NULL;
            size_t ns = 0, found = 0;
            if ((s = patina_collection_tables(c, &specs, &ns)) != PATINA_OK) die("tables", s);
            for (i = 0; i < ns; i++) {
                if (!strncmp(specs[i], "signature", 9) && (specs[i][9] == 0 || specs[i][9] == ':')) {
                    if (!found++) snprintf(spec, sizeof spec, "%s", specs[i]);
                }
                free(specs[i]);
            }
            free(specs);
            if (found != 1) {
                fprintf(stderr, "bench_sqfd: %s has %zu signature tables: name one with --spec\n", coll_dir, found);
                return 2;
            }
        }
        if ((s = patina_extractor_new(&ex, spec)) != PATINA_OK) die("extractor", s);
        if ((s = patina_collection_load(c, patina_extractor_spec(ex), &ids, &descs, &got, &b)) != PATINA_OK)
            die("load", s);
        if (got == 0) {
            fprintf(stderr, "bench_sqfd: %s: table %s is empty\n", coll_dir, patina_extractor_spec(ex));
            return 2;
        }
        n = got;
        recs = (float *)descs;
        dim = patina_extractor_dim(ex);
        bytes = patina_extractor_bytes(ex);
        C = (size_t)recs[1]; /* the record header: K, alpha (docs/signature.md) */
        alpha = (double)recs[2];
        if (P && P <= n) { /* the stored pivot table, when it has P pivots */
            t = now();
            s = patina_pivot_index_load(&pi, ctx, ex, c, &refreshed);
            t_build = now() - t;
            if (s == PATINA_OK && patina_pivot_index_pivots(pi) == P) {
                pivots_loaded = 1;
            } else {
                if (s != PATINA_OK && s != PATINA_E_NOTFOUND) die("pivot load", s);
                patina_pivot_index_free(pi);
                pi = NULL;
            }
        }
        patina_collection_close(c);
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
    else
        printf("# collection table %s (k %zu, alpha %g)\n", patina_extractor_spec(ex), C, alpha);
    fflush(stdout);

    if ((s = patina_index_new(&idx, ex, ids, recs, n)) != PATINA_OK) die("index", s);
    patina_pivot_opts_init(&po);
    po.pivots = P;
    po.select = (patina_pivot_select)sel;
    if (P && P > n) {
        fprintf(stderr, "bench_sqfd: %zu pivots asked for, %zu rows\n", P, n);
        return 2;
    }
    if (!pivots_loaded) {
        t = now();
        if (P && (s = patina_pivot_index_new(&pi, ctx, ex, ids, recs, n, &po)) != PATINA_OK) die("pivots", s);
        t_build = now() - t;
    }

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
    if (pivots_loaded)
        printf("# pivot table: the collection's (%zu pivots), %.2f s to load (%zu rows refreshed), range radius %.6g "
               "(mean %zu-th NN distance)\n\n", P, t_build, refreshed, radius, K);
    else if (P)
        printf("# pivot table: %.2f s to build (%zu x %zu SQFDs), range radius %.6g (mean %zu-th NN distance)\n\n",
               t_build, n, P, radius, K);
    else
        printf("# no pivot table (--pivots 0); range radius %.6g (mean %zu-th NN distance)\n\n", radius, K);
    {   /* the GPU scan, end to end (the strategies' baseline on the GPU) */
        gpu_scan_knn_ms = gpu_scan_range_ms = -1;
        if (patina_gpu_count() > 0) {
            patina_search_opts_t so;
            patina_search_opts_init(&so);
            so.device = PATINA_DEVICE_GPU;
            if ((s = patina_index_knn(ctx, idx, qs, 1, K, &so, hits, counts)) != PATINA_OK) die("gpu scan", s);
            t = now();
            if ((s = patina_index_knn(ctx, idx, qs, Q, K, &so, hits, counts)) != PATINA_OK) die("gpu scan", s);
            gpu_scan_knn_ms = 1e3 * (now() - t) / (double)Q;
            t = now();
            if ((s = patina_index_range(ctx, idx, qs, Q, radius, &so, rh, rc)) != PATINA_OK) die("gpu scan", s);
            gpu_scan_range_ms = 1e3 * (now() - t) / (double)Q;
            for (i = 0; i < Q; i++) {
                free(rh[i]);
                rh[i] = NULL;
            }
        }
    }
    printf("| query | method | ms / query | rows pruned | SQFDs / query | vs CPU scan | vs GPU scan |\n");
    printf("|---|---|---|---|---|---|---|\n");
    for (int range = 0; range < 2; range++) {
        const double cpu_ms = range ? scan_range_ms : scan_knn_ms, gpu_ms = range ? gpu_scan_range_ms : gpu_scan_knn_ms;
        const char *qn = range ? "range" : "k-NN";
        printf("| %s | scan, CPU | %.2f | 0%% | %zu | 1.0 | %s |\n", qn, cpu_ms, n, gpu_ms > 0 ? "-" : "no GPU");
        if (gpu_ms > 0) printf("| %s | scan, GPU (filter + CPU ranking) | %.2f | 0%% | %zu | %.1f | 1.0 |\n", qn, gpu_ms, n,
                               cpu_ms / gpu_ms);
        for (int stg = 0; stg < (gpu_ms > 0 ? 3 : 1); stg++)
            for (int b = 1; P && b >= 0; b--) {
                static const char *const sname[] = {"CPU filter", "CPU filter + GPU (paper's pipeline)",
                                                    "GPU filter"};
                patina_pivot_search_opts_t so;
                patina_search_stats_t st;
                double ms;
                patina_pivot_search_opts_init(&so);
                so.bound = (patina_pivot_bound)b;
                so.strategy = (patina_pivot_strategy)stg;
                so.stats = &st;
                if (stg && (s = patina_pivot_index_knn(ctx, pi, qs, 1, K, &so, hits, counts)) != PATINA_OK)
                    die("pivot search", s); /* the device copies */
                t = now();
                s = range ? patina_pivot_index_range(ctx, pi, qs, Q, radius, &so, rh, rc)
                          : patina_pivot_index_knn(ctx, pi, qs, Q, K, &so, hits, counts);
                if (s != PATINA_OK) die("pivot search", s);
                ms = 1e3 * (now() - t) / (double)Q;
                for (i = 0; i < QS; i++) {
                    int ok = range ? same(rh[i], rc[i], scan_rh[i], scan_rc[i])
                                   : same(hits + i * K, counts[i], scan_hits + i * K, scan_counts[i]);
                    if (!ok) {
                        fprintf(stderr, "bench_sqfd: query %zu differs from the scan (%s, %s, %s)\n", i, qn,
                                b ? "metric" : "ptolemaic", sname[stg]);
                        bad = 1;
                    }
                }
                if (range)
                    for (i = 0; i < Q; i++) {
                        free(rh[i]);
                        rh[i] = NULL;
                    }
                {
                    char vg[32] = "-";
                    if (gpu_ms > 0) snprintf(vg, sizeof vg, "%.2f", gpu_ms / ms);
                    printf("| %s | %s, %s, %zu pivots | %.2f | %.1f%% | %.0f (+%zu to pivots) | %.1f | %s |\n", qn,
                           sname[stg], b ? "metric" : "ptolemaic", P, ms,
                           100.0 * (double)st.pruned / ((double)n * (double)Q), (double)st.computed / (double)Q, P,
                           cpu_ms / ms, vg);
                }
                fflush(stdout);
            }
    }
    printf("\n");
    bad |= gpu_table(ctx, ex, ids, recs, n, qs, Q, QS, K, radius, scan_hits, scan_counts, scan_rh, scan_rc,
                     scan_knn_ms, no_peers, C, alpha);
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
