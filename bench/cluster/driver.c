/* bench_cluster: the measuring side of bench/cluster/run.sh (which starts
 * NATS, the shards and this program, and prints the table).
 *
 *   bench_cluster inproc --refs N --partitions P [--seed S] [--gpus LIST] [--budget GiB] --query IMG
 *                        [--reps R] [--batch B] [--tables T] [--device auto|cpu|gpu]
 *                        [--verify-top V]
 *       the in-process engine: one detached rootsift table on a context of
 *       the device list holding the same synthetic references a cluster of
 *       `patina shard --synthetic N:S` holds (every partition's), one query
 *       R times and a batch of B queries. --tables T (1 .. P): the rows in
 *       T detached tables instead (partition p's in table p mod T; T = P: one
 *       table per partition, as a shard holds them), identified together
 *       by patina_table_identify_many (mode "inproc_tables") as a shard
 *       calls it (k = patina_identify_part_k, keys looked up): the cost of
 *       many small tables against one, and with T = P the shard's own call
 *       on one GPU. Both modes look up the hits' keys, as the server does. --device: where the identification
 *       runs (auto: the GPU when the context has one; cpu for the rows that
 *       compare with CPU shards). --verify-top: the candidates verified (the
 *       library's default unless given; 0 times the matching alone).
 *   bench_cluster front --cluster URL --coll C --query IMG [--reps R] [--batch B] [--deadline MS]
 *       the cluster path through the front end's code (clu_front_identify,
 *       what patina serve/identify --cluster run): the same measurements.
 *   bench_cluster cover --cluster URL --coll C --query IMG [--timeout S] [--deadline MS]
 *       queries back to back until one is answered whole: seconds until then
 *       and the slowest query meanwhile (run right after a kill -9).
 *   bench_cluster search --rows N --tables T [--spec S] [--reps R] [--batch B] [--samples DIR]
 *       k-NN over N rows as one table, T tables looped and merged, and T
 *       tables in one patina_table_search_many call (run_search below).
 *   bench_cluster load --cluster URL --coll C --query IMG --until FILE [--timeout S] [--deadline MS]
 *       one front end's load while the cluster changes (run.sh's join step:
 *       a shard leaves and joins again): single queries back to back until
 *       FILE exists (or S seconds, default 600), each answer whole, partial
 *       or failed, and whole answers compared with the first (decision,
 *       hits, rank 1's id and inliers: "changed"); latency p50 / p99 / max.
 *   bench_cluster write --cluster URL --coll C [--reps R] [--keys FILE]
 *       write-to-visible: a new CEDD row put through the buckets (acknowledged
 *       once the ready copies applied it), then searched until found.
 *       --keys: each acknowledged row's key and descriptor appended to FILE
 *       (one line, hex), for `check` after faults.
 *   bench_cluster check --cluster URL --coll C --keys FILE
 *       every row of FILE searched once (k = 1): how many are found by their
 *       own descriptor under their own key (no acknowledged write lost).
 *   bench_cluster knn --cluster URL --coll C [--seed S] [--k K] [--reps R] [--batch B] [--rows N]
 *       the global k-NN (issue 33's CEDD search across the shards) through
 *       the front end's code (clu_front_search, what `patina search
 *       --cluster` and the server run) over shards filled by `patina shard
 *       --synthetic N:S`: one query R times, then batches of B (default
 *       4096). The queries are partition 0's synthetic rows (clu_synth_desc,
 *       --seed the shards', --partitions P the collection's, default 64), so
 *       every answer must be whole, k hits long and ranked first at
 *       distance 0; --rows N (the shards' N) for the rate and the rows.
 *       With --inproc --rows N --partitions P [--gpus LIST] [--budget GiB]
 *       [--spec S] [--tables T] [--keys]: the same rows in one table of this
 *       process instead (mode "knn_inproc"; --gpus all: split over the
 *       devices), the comparison without the cluster; --tables T: in T
 *       tables searched together (patina_table_search_many, as a shard
 *       searches its partitions), --keys: with the hits' keys (as a shard
 *       answers).
 * Every mode takes --warmup W (default 5): untimed queries before each
 * measured series (inproc, front). Each prints one JSON object on stdout. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster/cluster.h"
#include "patina/patina.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what)
{
    const char *m = clu_last_error();
    fprintf(stderr, "bench_cluster: %s: %s\n", what, m && *m ? m : patina_last_error());
    exit(2);
}

static const char *arg(int argc, char **argv, const char *name, const char *def)
{
    int i;
    for (i = 2; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    return def;
}

static int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* p in [0, 1] of v (sorted in place). */
static double pct(double *v, size_t n, double p)
{
    size_t i;
    if (!n) return 0;
    qsort(v, n, sizeof *v, cmp);
    i = (size_t)ceil(p * (double)n) - (p > 0);
    return v[i < n ? i : n - 1];
}

/* The median time of the query photograph's decoding and extraction
 * (query_of), for the answers' "end to end" (measure prints it). */
static double extract_s;

/* The query record of image path for table t, and extract_s: the median
 * of 5 loads and extractions after a first (which builds the extractor's
 * device state). */
static void *query_of(patina_table_t *t, const char *path, size_t batch)
{
    enum { XREPS = 5 };
    const size_t qb = patina_table_query_bytes(t);
    unsigned char *q = malloc(qb * batch);
    double xt[XREPS];
    size_t i;
    if (!q) die("memory");
    for (i = 0; i <= XREPS; i++) {
        const double t0 = now();
        patina_image_t img;
        if (patina_image_load(&img, path, NULL) != PATINA_OK) die(path);
        if (patina_table_identify_extract(t, NULL, q, &img, 1, NULL) != PATINA_OK) die("query extraction");
        patina_image_release(&img);
        if (i) xt[i - 1] = now() - t0;
    }
    extract_s = pct(xt, XREPS, 0.5);
    for (i = 1; i < batch; i++) memcpy(q + i * qb, q, qb);
    return q;
}

typedef patina_status (*ident_fn)(void *u, const void *q, size_t nq, patina_identify_hit_t *hits,
                                  patina_identify_result_t *res, clu_coverage_t *cov);

/* Dies unless the answer to nq copies of one query is whole and every
 * query's decision and top hit are the first's (want: the single query's,
 * NULL for the single query itself). res is reset first so that a query
 * left unanswered shows. */
static void check(const char *what, const patina_identify_result_t *res, const patina_identify_hit_t *hits, size_t k,
                  size_t nq, const clu_coverage_t *cov, const patina_identify_result_t *want,
                  const patina_identify_hit_t *want_hit)
{
    size_t i;
    if (cov->partial)
        die(what); /* a partial answer: the numbers would be of part of the references */
    for (i = 0; i < nq; i++) {
        const patina_identify_result_t *r = &res[i];
        const patina_identify_result_t *w = want ? want : &res[0];
        const patina_identify_hit_t *wh = want ? want_hit : &hits[0];
        if ((int)r->decision != (int)w->decision || r->nhits != w->nhits ||
            (r->nhits && hits[i * k].id != wh->id)) {
            fprintf(stderr, "bench_cluster: %s: query %zu of %zu: decision %d, %zu hits, not %d, %zu\n", what, i, nq,
                    (int)r->decision, r->nhits, (int)w->decision, w->nhits);
            die(what);
        }
    }
}

static void reset(patina_identify_result_t *res, size_t nq)
{
    size_t i;
    for (i = 0; i < nq; i++) {
        memset(&res[i], 0, sizeof res[i]);
        res[i].decision = (patina_identify_decision)-1;
    }
}

static int WARMUP = 5; /* --warmup: untimed queries before each measured series */

/* One call of nq queries (the single query, or a batch of it), its answer
 * checked against want (NULL: not yet known); returns its seconds. */
static double ask(ident_fn f, void *u, const void *q, size_t nq, patina_identify_hit_t *hits,
                  patina_identify_result_t *res, clu_coverage_t *cov, size_t k, const char *what,
                  const patina_identify_result_t *want, const patina_identify_hit_t *want_hit)
{
    char msg[96];
    const double t0 = now();
    double t;
    reset(res, nq);
    if (f(u, q, nq, hits, res, cov) != PATINA_OK) die(what);
    t = now() - t0;
    snprintf(msg, sizeof msg, "%s: partial or short answer", what);
    check(msg, res, hits, k, nq, cov, want, want_hit);
    return t;
}

/* The times of a series, in order, on stderr. */
static void print_series(const char *mode, const char *what, const double *t, int reps)
{
    fprintf(stderr, "bench_cluster: %s: %s (ms, in order):", mode, what);
    for (int r = 0; r < reps; r++) fprintf(stderr, " %.1f", 1e3 * t[r]);
    fprintf(stderr, "\n");
}

/* One query reps times, then a batch of `batch` queries reps times, each
 * after WARMUP untimed calls (the first calls of a process or shard pay
 * one-time costs: uploads, allocations that later calls reuse); every
 * answer checked (check): a partial or short answer dies, never a number.
 * With batches, the single query once more after them (after_batch_p50_ms:
 * both sides of a comparison get this pass; a shard answered single queries
 * faster after its batches than before them, docs/cluster.md). The single
 * queries' times go to stderr in order. */
static void measure(const char *mode, ident_fn f, void *u, const void *q, size_t batch, int reps, uint64_t refs)
{
    patina_identify_opts_t o;
    patina_identify_hit_t *hits, one_hit;
    patina_identify_result_t *res, one;
    double *lat = calloc((size_t)reps + 1, sizeof *lat), *fan = calloc((size_t)reps + 1, sizeof *fan);
    double *wait = calloc((size_t)reps + 1, sizeof *wait), *inshard = calloc((size_t)reps + 1, sizeof *inshard);
    double bt = 0, after = 0, p50, p99, f50, w50, s50;
    clu_coverage_t cov;
    int r, partial = 0;
    patina_identify_opts_init(&o);
    hits = calloc(batch * o.k + 1, sizeof *hits);
    res = calloc(batch + 1, sizeof *res);
    memset(&cov, 0, sizeof cov);
    ask(f, u, q, 1, hits, res, &cov, o.k, "warm-up query", NULL, NULL); /* uploads */
    one = res[0];
    one_hit = hits[0];
    for (r = 1; r < WARMUP; r++) ask(f, u, q, 1, hits, res, &cov, o.k, "warm-up query", &one, &one_hit);
    for (r = 0; r < reps; r++) {
        lat[r] = ask(f, u, q, 1, hits, res, &cov, o.k, "query", &one, &one_hit);
        fan[r] = cov.fanout_ms;
        wait[r] = cov.wait_ms;
        inshard[r] = cov.shard_ms;
        partial |= cov.partial;
        if (cov.references && !cov.partial) refs = cov.references;
    }
    if (batch > 1) {
        double *bl = calloc((size_t)reps + 1, sizeof *bl);
        for (r = 0; r < (WARMUP + 1) / 2; r++)
            ask(f, u, q, batch, hits, res, &cov, o.k, "warm-up batch", &one, &one_hit);
        for (r = 0; r < reps; r++) bl[r] = ask(f, u, q, batch, hits, res, &cov, o.k, "batch", &one, &one_hit);
        bt = pct(bl, (size_t)reps, 0.5);
        for (r = 0; r < reps; r++) bl[r] = ask(f, u, q, 1, hits, res, &cov, o.k, "query", &one, &one_hit);
        print_series(mode, "single queries after the batches", bl, reps);
        after = pct(bl, (size_t)reps, 0.5);
        free(bl);
    }
    {
        char what[64];
        snprintf(what, sizeof what, "after %d warm-up queries, single queries", WARMUP);
        print_series(mode, what, lat, reps);
        if (inshard[0] > 0) {
            /* the slowest request's time inside its shard, per query: tells a
             * slow query's shard side from its fan-out and NATS side */
            double *ins = calloc((size_t)reps + 1, sizeof *ins);
            for (r = 0; r < reps; r++) ins[r] = 1e-3 * inshard[r];
            snprintf(what, sizeof what, "the same queries, in the slowest request's shard");
            print_series(mode, what, ins, reps);
            free(ins);
        }
    }
    p50 = pct(lat, (size_t)reps, 0.5);
    p99 = pct(lat, (size_t)reps, 0.99);
    f50 = pct(fan, (size_t)reps, 0.5);
    w50 = pct(wait, (size_t)reps, 0.5);
    s50 = pct(inshard, (size_t)reps, 0.5);
    printf("{\"mode\":\"%s\",\"refs\":%llu,\"reps\":%d,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"refs_per_s\":%.0f,"
           "\"batch\":%zu,\"batch_ms\":%.3f,\"batch_refs_per_s\":%.0f,\"fanout_ms\":%.3f,\"partial\":%d,"
           "\"extract_ms\":%.3f,\"wait_ms\":%.3f,\"shard_ms\":%.3f,\"after_batch_p50_ms\":%.3f,\"top\":\"%s\"}\n",
           mode, (unsigned long long)refs, reps, 1e3 * p50, 1e3 * p99, (double)refs / p50, batch, 1e3 * bt,
           bt > 0 ? (double)refs * (double)batch / bt : 0, f50, partial, 1e3 * extract_s, w50, s50, 1e3 * after, res[0].decision == PATINA_DECISION_MATCH ? "match" : "no match");

    free(lat);
    free(fan);
    free(wait);
    free(inshard);
    free(hits);
    free(res);
}

/* ----------------------------------------------------------------- inproc */

static patina_device inproc_device = PATINA_DEVICE_AUTO; /* --device */
static long inproc_verify = -1;                            /* --verify-top (-1: the default) */

/* Frees the nq * k keys a call looked up. */
static void free_keys(char **keys, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) free(keys[i]);
    free(keys);
}

/* The in-process engine as the server and the CLI call it: the hits' keys
 * looked up (the front end's answers carry them too). */
static patina_status inproc_ident(void *u, const void *q, size_t nq, patina_identify_hit_t *hits,
                                  patina_identify_result_t *res, clu_coverage_t *cov)
{
    patina_identify_opts_t o;
    char **keys;
    patina_status s;
    patina_identify_opts_init(&o);
    o.device = inproc_device;
    if (inproc_verify >= 0) o.verify_top = (size_t)inproc_verify;
    memset(cov, 0, sizeof *cov);
    if (!(keys = calloc(nq * o.k + 1, sizeof *keys))) return PATINA_E_NOMEM;
    s = patina_table_identify((patina_table_t *)u, q, nq, &o, hits, res, keys);
    free_keys(keys, nq * o.k);
    return s;
}

typedef struct tables {
    patina_table_t **t;
    size_t n;
} tables_t;

/* The rows in T tables identified by one call as a shard calls it (shard.c:
 * k = patina_identify_part_k, the keys looked up), then the default k of
 * each query's hits kept (the front end's merge of a single part). */
static patina_status inproc_many(void *u, const void *q, size_t nq, patina_identify_hit_t *hits,
                                 patina_identify_result_t *res, clu_coverage_t *cov)
{
    const tables_t *ts = u;
    patina_identify_opts_t o;
    patina_identify_hit_t *ph;
    char **keys;
    size_t pk, k, i;
    patina_status s;
    patina_identify_opts_init(&o);
    o.device = inproc_device;
    if (inproc_verify >= 0) o.verify_top = (size_t)inproc_verify;
    k = o.k;
    pk = patina_identify_part_k(&o);
    o.k = pk;
    memset(cov, 0, sizeof *cov);
    ph = calloc(nq * pk + 1, sizeof *ph);
    keys = calloc(nq * pk + 1, sizeof *keys);
    if (!ph || !keys) {
        free(ph);
        free(keys);
        return PATINA_E_NOMEM;
    }
    s = patina_table_identify_many(ts->t, ts->n, q, nq, &o, ph, res, keys);
    for (i = 0; s == PATINA_OK && i < nq; i++) {
        memcpy(hits + i * k, ph + i * pk, k * sizeof *hits);
        if (res[i].nhits > k) res[i].nhits = k;
    }
    free(ph);
    free_keys(keys, nq * pk);
    return s;
}

/* The rows a cluster of `patina shard --synthetic N:seed` shards holds in P
 * partitions, in T detached tables (partition p's in table p mod T), put
 * in id order (id = 1 + p + j P): every put appends to the reference set;
 * partition by partition would insert each id in the middle, moving every
 * larger record (quadratic). */
static void fill_synthetic(patina_table_t **ts, size_t T, uint64_t n, uint32_t P, uint64_t seed)
{
    unsigned char **pools = calloc(P, sizeof *pools), *rows;
    patina_change_t *ch = malloc(4096 * sizeof *ch), *cht = malloc(4096 * sizeof *cht);
    char(*keys)[48] = malloc(4096 * sizeof *keys);
    const size_t bytes = patina_extractor_bytes(patina_table_extractor(ts[0]));
    uint64_t id0;
    uint32_t p;
    rows = malloc(4096 * bytes);
    if (!pools || !ch || !cht || !keys || !rows) die("memory");
    for (p = 0; p < P; p++)
        if (clu_synth_pool(&pools[p], ts[0], seed, p, 0) != PATINA_OK) die("synthetic references");
    for (id0 = 0; id0 < n; id0 += 4096) {
        size_t i, nb = (size_t)(n - id0 < 4096 ? n - id0 : 4096);
        for (i = 0; i < nb; i++) {
            const uint64_t id = id0 + i, j = id / P;
            const uint32_t pp = (uint32_t)(id % P);
            clu_synth_key(keys[i], sizeof keys[i], seed, pp, j);
            ch[i] = (patina_change_t){PATINA_CHANGE_PUT, 1 + id, keys[i],
                                      clu_synth_desc(pools[pp], rows + i * bytes, bytes, seed, pp, 0, j)};
        }
        for (size_t k = 0; k < T; k++) { /* each table's rows, still in id order */
            size_t m = 0;
            for (i = 0; i < nb; i++)
                if ((ch[i].id - 1) % P % T == k) cht[m++] = ch[i];
            if (m && patina_table_apply(ts[k], cht, m, 0, NULL) != PATINA_OK) die("apply");
        }
    }
    for (p = 0; p < P; p++) free(pools[p]);
    free(pools);
    free(rows);
    free(ch);
    free(cht);
    free(keys);
}

/* A context on --gpus (default: every GPU; "" none) with --budget GiB of
 * each device (0: the default), for the in-process rows. */
static patina_context_t *inproc_context(int argc, char **argv)
{
    patina_context_opts_t co;
    patina_context_t *ctx = NULL;
    patina_context_opts_init(&co);
    co.gpus = arg(argc, argv, "--gpus", NULL);
    co.gpu_mem_budget = (uint64_t)(atof(arg(argc, argv, "--budget", "0")) * 1073741824.0);
    if (patina_context_new(&ctx, &co) != PATINA_OK) die("context");
    return ctx;
}

static int run_inproc(int argc, char **argv)
{
    const uint64_t n = strtoull(arg(argc, argv, "--refs", "100000"), NULL, 10),
                   seed = strtoull(arg(argc, argv, "--seed", "1"), NULL, 10);
    const uint32_t P = (uint32_t)atoi(arg(argc, argv, "--partitions", "64"));
    const char *spec = arg(argc, argv, "--spec", "rootsift");
    const size_t T = (size_t)atoi(arg(argc, argv, "--tables", "1"));
    patina_context_t *ctx;
    patina_table_t *t = NULL, **ts = calloc(T ? T : 1, sizeof *ts);
    patina_table_opts_t to;
    double t0 = now();
    void *q;
    if (T < 1 || T > P || !ts) die("--tables must be 1 .. --partitions");
    if (patina_device_parse(&inproc_device, arg(argc, argv, "--device", "auto")) != PATINA_OK) die("--device");
    inproc_verify = atol(arg(argc, argv, "--verify-top", "-1"));
    ctx = inproc_context(argc, argv);
    patina_table_opts_init(&to);
    for (size_t k = 0; k < T; k++)
        if (patina_table_new(&ts[k], ctx, spec, &to) != PATINA_OK) die("table");
    t = ts[0];
    fill_synthetic(ts, T, n, P, seed);
    fprintf(stderr, "bench_cluster: %llu references in %.1f s\n", (unsigned long long)n, now() - t0);
    q = query_of(t, arg(argc, argv, "--query", "samples/mate/Aqua.jpg"), (size_t)atoi(arg(argc, argv, "--batch", "16")));
    if (T == 1) {
        measure("inproc", inproc_ident, t, q, (size_t)atoi(arg(argc, argv, "--batch", "16")),
                atoi(arg(argc, argv, "--reps", "20")), n);
    } else {
        tables_t u = {ts, T};
        fprintf(stderr, "bench_cluster: %zu tables of about %llu references, identified together\n", T,
                (unsigned long long)(n / T));
        measure("inproc_tables", inproc_many, &u, q, (size_t)atoi(arg(argc, argv, "--batch", "16")),
                atoi(arg(argc, argv, "--reps", "20")), n);
    }
    free(q);
    for (size_t k = 0; k < T; k++) patina_table_free(ts[k]);
    free(ts);
    patina_context_free(ctx);
    return 0;
}

/* ------------------------------------------------------------------ front */

typedef struct fu {
    clu_session_t *s;
    const char *spec;
    size_t qbytes;
} fu_t;

static patina_status front_ident(void *u, const void *q, size_t nq, patina_identify_hit_t *hits,
                                 patina_identify_result_t *res, clu_coverage_t *cov)
{
    fu_t *f = u;
    patina_identify_opts_t o;
    patina_identify_opts_init(&o);
    return clu_front_identify(clu_session_front(f->s), f->spec, q, nq, f->qbytes, &o, hits, res, NULL, NULL, cov);
}

static clu_session_t *session(int argc, char **argv, patina_context_t *ctx, unsigned need, patina_table_t **t)
{
    clu_session_t *s = NULL;
    clu_front_opts_t fo;
    clu_front_opts_init(&fo);
    fo.deadline_ms = atoi(arg(argc, argv, "--deadline", "5000"));
    if (clu_session_open(&s, arg(argc, argv, "--cluster", "nats://127.0.0.1:4222"), arg(argc, argv, "--coll", "bench"),
                         &fo) != PATINA_OK)
        die("session");
    if (clu_session_table(s, ctx, NULL, need, t) != PATINA_OK) die("table");
    return s;
}

/* What front, cover and load share: a context, the session of --cluster /
 * --coll with its identify table shape in f, and the query photograph
 * (--query) extracted, batch copies (free with front_close). */
static void *front_open(int argc, char **argv, size_t batch, patina_context_t **ctx, patina_table_t **t, fu_t *f)
{
    if (patina_context_new(ctx, NULL) != PATINA_OK) die("context");
    f->s = session(argc, argv, *ctx, PATINA_CAP_IDENTIFY, t);
    f->spec = patina_table_spec(*t);
    f->qbytes = patina_table_query_bytes(*t);
    return query_of(*t, arg(argc, argv, "--query", "samples/mate/Aqua.jpg"), batch);
}

static void front_close(patina_context_t *ctx, patina_table_t *t, fu_t *f, void *q)
{
    free(q);
    patina_table_free(t);
    clu_session_close(f->s);
    patina_context_free(ctx);
}

static int run_front(int argc, char **argv)
{
    patina_context_t *ctx = NULL;
    patina_table_t *t = NULL;
    fu_t f;
    void *q;
    const size_t batch = (size_t)atoi(arg(argc, argv, "--batch", "16"));
    q = front_open(argc, argv, batch, &ctx, &t, &f);
    /* the references: the coverage's when the front end counts them, else --refs */
    measure("front", front_ident, &f, q, batch, atoi(arg(argc, argv, "--reps", "20")),
            strtoull(arg(argc, argv, "--refs", "0"), NULL, 10));
    front_close(ctx, t, &f, q);
    return 0;
}

static int run_cover(int argc, char **argv)
{
    patina_context_t *ctx = NULL;
    patina_table_t *t = NULL;
    patina_identify_opts_t o;
    patina_identify_hit_t hits[64];
    patina_identify_result_t res;
    clu_coverage_t cov;
    fu_t f;
    void *q;
    const double t0 = now(), limit = atof(arg(argc, argv, "--timeout", "120"));
    double worst = 0;
    int n = 0, failed = 0, partial = 0;
    q = front_open(argc, argv, 1, &ctx, &t, &f);
    patina_identify_opts_init(&o);
    for (;;) {
        const double a = now();
        patina_status s = clu_front_identify(clu_session_front(f.s), f.spec, q, 1, f.qbytes, &o, hits, &res, NULL,
                                             NULL, &cov);
        const double dt = now() - a;
        n++;
        if (dt > worst) worst = dt;
        if (s != PATINA_OK) failed++;
        else if (cov.partial) partial++;
        if (s == PATINA_OK && !cov.partial) break;
        if (now() - t0 > limit) break;
    }
    printf("{\"mode\":\"cover\",\"seconds\":%.3f,\"queries\":%d,\"failed\":%d,\"partial\":%d,\"worst_ms\":%.1f,"
           "\"whole\":%d}\n",
           now() - t0, n, failed, partial, 1e3 * worst, now() - t0 <= limit);
    front_close(ctx, t, &f, q);
    return 0;
}

/* 1 when path exists. */
static int exists(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

static int run_load(int argc, char **argv)
{
    patina_context_t *ctx = NULL;
    patina_table_t *t = NULL;
    patina_identify_opts_t o;
    patina_identify_hit_t hits[64], first_hit;
    patina_identify_result_t res, first;
    clu_coverage_t cov;
    fu_t f;
    void *q;
    const char *until = arg(argc, argv, "--until", "");
    const double t0 = now(), limit = atof(arg(argc, argv, "--timeout", "600"));
    size_t cap = 4096, n = 0;
    double *lat = malloc(cap * sizeof *lat), worst = 0, last_bad = -1, first_bad = -1;
    int failed = 0, partial = 0, changed = 0, have = 0;
    if (!lat) die("memory");
    q = front_open(argc, argv, 1, &ctx, &t, &f);
    patina_identify_opts_init(&o);
    memset(&first, 0, sizeof first);
    memset(&first_hit, 0, sizeof first_hit);
    while (!(*until && exists(until)) && now() - t0 < limit) {
        const double a = now();
        patina_status st;
        memset(&res, 0, sizeof res);
        memset(hits, 0, sizeof hits);
        st = clu_front_identify(clu_session_front(f.s), f.spec, q, 1, f.qbytes, &o, hits, &res, NULL, NULL, &cov);
        const double dt = now() - a;
        if (n == cap) {
            double *m = realloc(lat, 2 * cap * sizeof *lat);
            if (!m) die("memory");
            lat = m;
            cap *= 2;
        }
        lat[n++] = dt;
        if (dt > worst) worst = dt;
        if (st != PATINA_OK || cov.partial) {
            if (st != PATINA_OK) failed++;
            else partial++;
            if (first_bad < 0) first_bad = a - t0;
            last_bad = a - t0 + dt;
            continue;
        }
        if (!have) {
            first = res;
            first_hit = hits[0];
            have = 1;
        } else if (res.decision != first.decision || res.nhits != first.nhits ||
                   (res.nhits && (hits[0].id != first_hit.id || hits[0].inliers != first_hit.inliers))) {
            changed++;
        }
    }
    {
        const double secs = now() - t0;
        const double p50 = pct(lat, n, 0.5), p99 = pct(lat, n, 0.99);
        printf("{\"mode\":\"load\",\"seconds\":%.3f,\"queries\":%zu,\"failed\":%d,\"partial\":%d,\"changed\":%d,"
               "\"p50_ms\":%.1f,\"p99_ms\":%.1f,\"worst_ms\":%.1f,\"first_bad_s\":%.3f,\"last_bad_s\":%.3f,"
               "\"stopped\":%d}\n",
               secs, n, failed, partial, changed, 1e3 * p50, 1e3 * p99, 1e3 * worst, first_bad, last_bad,
               *until && exists(until));
    }
    free(lat);
    front_close(ctx, t, &f, q);
    return 0;
}

static int run_write(int argc, char **argv)
{
    patina_context_t *ctx = NULL;
    patina_table_t *t = NULL;
    clu_session_t *s;
    clu_writer_t *w = NULL;
    const int reps = atoi(arg(argc, argv, "--reps", "20"));
    double *ack = calloc((size_t)reps + 1, sizeof *ack), *vis = calloc((size_t)reps + 1, sizeof *vis);
    unsigned char desc[4096];
    size_t bytes, i, nack = 0;
    int r, refused = 0;
    uint64_t x = (uint64_t)time(NULL);
    const char *keys_path = arg(argc, argv, "--keys", "");
    FILE *kf = NULL;
    if (*keys_path && !(kf = fopen(keys_path, "a"))) die(keys_path);
    if (patina_context_new(&ctx, NULL) != PATINA_OK) die("context");
    s = session(argc, argv, ctx, 0, &t);
    bytes = patina_extractor_bytes(patina_table_extractor(t));
    if (bytes > sizeof desc) die("descriptor too large");
    if (clu_writer_new(&w, clu_session_conn(s), clu_session_config(s), clu_session_front(s)) != PATINA_OK) die("writer");
    for (r = 0; r < reps; r++) {
        char key[64];
        patina_insert_t it;
        const char *spec = patina_table_spec(t);
        const void *d = desc;
        patina_table_query_t qq;
        patina_table_results_t res;
        double t0;
        int found = 0;
        for (i = 0; i < bytes; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            desc[i] = (unsigned char)(x & 7);
        }
        snprintf(key, sizeof key, "bench-write-%llu-%d", (unsigned long long)x, r);
        memset(&it, 0, sizeof it);
        it.key = key;
        it.size = 1;
        patina_sha256(it.sha256, key, strlen(key));
        t0 = now();
        if (clu_writer_put(w, &it, &spec, &d, &bytes, 1, NULL) != PATINA_OK) {
            if (!kf) die("put");
            refused++; /* not acknowledged (a fault under way): not in the keys file, not timed */
            patina_clear_error();
            continue;
        }
        ack[nack] = now() - t0;
        if (kf) {
            fprintf(kf, "%s ", key);
            for (i = 0; i < bytes; i++) fprintf(kf, "%02x", desc[i]);
            fprintf(kf, "\n");
            fflush(kf);
        }
        patina_table_query_init(&qq);
        qq.k = 1;
        while (!found && now() - t0 < 30) {
            clu_coverage_t cov;
            memset(&res, 0, sizeof res);
            if (clu_front_search(clu_session_front(s), spec, desc, 1, bytes, &qq, &res, &cov) == PATINA_OK)
                found = res.offsets[1] > 0 && res.keys && res.keys[0] && !strcmp(res.keys[0], key);
            patina_table_results_release(&res);
        }
        vis[nack++] = found ? now() - t0 : -1;
    }
    {
        /* pct sorts: vis[0] is then the smallest, -1 when a row was never found */
        double a50 = pct(ack, nack, 0.5), a99 = pct(ack, nack, 0.99);
        double v50 = pct(vis, nack, 0.5), v99 = pct(vis, nack, 0.99);
        printf("{\"mode\":\"write\",\"reps\":%d,\"acknowledged\":%zu,\"refused\":%d,\"ack_p50_ms\":%.2f,"
               "\"ack_p99_ms\":%.2f,\"visible_p50_ms\":%.2f,\"visible_p99_ms\":%.2f,\"all_visible\":%d}\n",
               reps, nack, refused, 1e3 * a50, 1e3 * a99, 1e3 * v50, 1e3 * v99, nack > 0 && vis[0] >= 0);
    }
    if (kf) fclose(kf);
    clu_writer_free(w);
    patina_table_free(t);
    clu_session_close(s);
    patina_context_free(ctx);
    free(ack);
    free(vis);
    return 0;
}

/* Every row of --keys FILE (key, hex descriptor: write --keys) searched
 * once, k = 1: found when rank 1 is its own key. */
static int run_check(int argc, char **argv)
{
    patina_context_t *ctx = NULL;
    patina_table_t *t = NULL;
    clu_session_t *s;
    const char *path = arg(argc, argv, "--keys", "");
    FILE *kf = fopen(path, "r");
    char key[128], hex[8200];
    unsigned char desc[4096];
    size_t bytes, rows = 0, found = 0, partial = 0, failed = 0;
    if (!kf) die(path);
    if (patina_context_new(&ctx, NULL) != PATINA_OK) die("context");
    s = session(argc, argv, ctx, 0, &t);
    bytes = patina_extractor_bytes(patina_table_extractor(t));
    while (fscanf(kf, "%127s %8199s", key, hex) == 2) {
        const char *spec = patina_table_spec(t);
        patina_table_query_t qq;
        patina_table_results_t res;
        clu_coverage_t cov;
        size_t i;
        unsigned v;
        if (strlen(hex) != 2 * bytes) die("keys file: a descriptor of another size");
        for (i = 0; i < bytes; i++) {
            if (sscanf(hex + 2 * i, "%2x", &v) != 1) die("keys file: not hex");
            desc[i] = (unsigned char)v;
        }
        rows++;
        patina_table_query_init(&qq);
        qq.k = 1;
        memset(&res, 0, sizeof res);
        if (clu_front_search(clu_session_front(s), spec, desc, 1, bytes, &qq, &res, &cov) != PATINA_OK) {
            failed++;
            patina_clear_error();
            continue;
        }
        partial += cov.partial != 0;
        found += res.offsets[1] > 0 && res.keys && res.keys[0] && !strcmp(res.keys[0], key);
        patina_table_results_release(&res);
    }
    fclose(kf);
    printf("{\"mode\":\"check\",\"rows\":%zu,\"found\":%zu,\"partial\":%zu,\"failed\":%zu}\n", rows, found,
           partial, failed);
    patina_table_free(t);
    clu_session_close(s);
    patina_context_free(ctx);
    return 0;
}

/* ----------------------------------------------------------------- search */

/* The median of reps calls of one search mode, in ms. mode 0: the one
 * table; 1: the T tables one by one, merged; 2: the T tables in one
 * patina_table_search_many call. */
static double search_ms(int mode, patina_table_t *one, patina_table_t **ts, size_t T, const void *q, size_t nq,
                        int reps, patina_table_results_t *keep)
{
    patina_table_query_t tq;
    patina_table_results_t *parts = calloc(T, sizeof *parts), res;
    double *lat = calloc((size_t)reps + 1, sizeof *lat), m;
    patina_table_query_init(&tq);
    tq.k = 10;
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        const double t0 = now();
        patina_status s;
        if (mode == 0) s = patina_table_search(one, q, nq, &tq, &res);
        else if (mode == 2) s = patina_table_search_many(ts, T, q, nq, &tq, &res);
        else {
            s = PATINA_OK;
            for (size_t k = 0; s == PATINA_OK && k < T; k++) s = patina_table_search(ts[k], q, nq, &tq, &parts[k]);
            if (s == PATINA_OK) s = patina_table_results_merge(parts, T, &tq, &res);
            for (size_t k = 0; k < T; k++) patina_table_results_release(&parts[k]);
        }
        if (s != PATINA_OK) die("search");
        if (r >= 0) lat[r] = now() - t0;
        if (r == reps - 1 && keep) *keep = res;
        else patina_table_results_release(&res);
    }
    m = 1e3 * pct(lat, (size_t)reps, 0.5);
    free(lat);
    free(parts);
    return m;
}

/* bench_cluster search --rows N --tables T [--spec cedd|signature:k=8] [--reps R] [--batch B] [--samples DIR]
 * k-NN (k = 10, device AUTO) over N rows held as one detached table, as T
 * tables searched one by one and merged, and as T tables in one
 * patina_table_search_many call, for one query and a batch of B: the
 * per-table fixed cost a shard's partitions pay. cedd rows are random
 * (elements 0..7, three in four 0); signature rows repeat the descriptors
 * of the photographs in --samples (every row distinct by id only). The
 * three answers are checked equal. */
static int run_search(int argc, char **argv)
{
    const size_t n = (size_t)strtoull(arg(argc, argv, "--rows", "200000"), NULL, 10);
    const size_t T = (size_t)atoi(arg(argc, argv, "--tables", "32"));
    const size_t B = (size_t)atoi(arg(argc, argv, "--batch", "16"));
    const int reps = atoi(arg(argc, argv, "--reps", "20"));
    const char *spec = arg(argc, argv, "--spec", "cedd");
    patina_context_t *ctx = NULL;
    patina_table_t *one = NULL, **ts = calloc(T ? T : 1, sizeof *ts);
    const patina_extractor_t *ex;
    patina_change_t *ch = malloc(4096 * sizeof *ch);
    char (*keys)[32] = malloc(4096 * sizeof *keys);
    uint8_t *pool = NULL, *q;
    size_t bytes, npool = 0, i, b;
    uint64_t x = 88172645463325252ULL;
    if (T < 1 || !ts || !ch || !keys) die("--tables must be >= 1");
    if (patina_context_new(&ctx, NULL) != PATINA_OK) die("context");
    if (patina_table_new(&one, ctx, spec, NULL) != PATINA_OK) die("table");
    for (i = 0; i < T; i++)
        if (patina_table_new(&ts[i], ctx, spec, NULL) != PATINA_OK) die("table");
    ex = patina_table_extractor(one);
    bytes = patina_extractor_bytes(ex);
    if (strncmp(spec, "cedd", 4)) { /* descriptors of the sample photographs */
        const char *dir = arg(argc, argv, "--samples", "samples/mate");
        char cmd[512], path[1024];
        FILE *f;
        patina_image_t img;
        snprintf(cmd, sizeof cmd, "ls %s/*.jpg 2>/dev/null | head -64", dir);
        pool = malloc(64 * bytes);
        if (!pool || !(f = popen(cmd, "r"))) die("samples");
        while (npool < 64 && fgets(path, sizeof path, f)) {
            path[strcspn(path, "\n")] = '\0';
            if (patina_image_load(&img, path, NULL) != PATINA_OK) continue;
            if (patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, pool + npool * bytes, &img, 1, NULL) == PATINA_OK)
                npool++;
            patina_image_release(&img);
        }
        pclose(f);
        if (npool < 2) die("no sample photographs (--samples DIR)");
    }
    q = malloc((B ? B : 1) * bytes);
    for (b = 0; b < n + B; b += 4096) { /* rows, then B queries */
        const size_t m = n + B - b < 4096 ? n + B - b : 4096;
        uint8_t *rows = malloc(m * bytes);
        for (i = 0; i < m; i++) {
            if (pool) memcpy(rows + i * bytes, pool + ((b + i) * 7 % npool) * bytes, bytes);
            else
                for (size_t e = 0; e < bytes; e++) {
                    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                    rows[i * bytes + e] = (uint8_t)(x % 4 ? 0 : 1 + (x >> 8) % 7);
                }
            if (b + i >= n) { /* a query */
                memcpy(q + (b + i - n) * bytes, rows + i * bytes, bytes);
                continue;
            }
            snprintf(keys[i], sizeof keys[i], "r/%zu", b + i);
            ch[i] = (patina_change_t){PATINA_CHANGE_PUT, 1 + b + i, keys[i], rows + i * bytes};
            if (patina_table_apply(ts[(b + i) % T], &ch[i], 1, 0, NULL) != PATINA_OK) die("apply");
        }
        {
            const size_t nr = b < n ? (n - b < m ? n - b : m) : 0; /* rows of this batch (the rest: queries) */
            if (nr && patina_table_apply(one, ch, nr, 0, NULL) != PATINA_OK) die("apply");
        }
        free(rows);
    }
    {
        patina_table_results_t r[3];
        double ms[2][3];
        for (int mode = 0; mode < 3; mode++) {
            ms[0][mode] = search_ms(mode, one, ts, T, q, 1, reps, &r[mode]);
            ms[1][mode] = search_ms(mode, one, ts, T, q, B, reps, NULL);
        }
        for (int mode = 1; mode < 3; mode++)
            for (i = 0; i < r[0].offsets[1]; i++)
                if (r[mode].offsets[1] != r[0].offsets[1] || r[mode].hits[i].id != r[0].hits[i].id)
                    die("the answers differ");
        printf("{\"mode\":\"search\",\"spec\":\"%s\",\"rows\":%zu,\"tables\":%zu,\"one_ms\":%.3f,\"loop_ms\":%.3f,"
               "\"many_ms\":%.3f,\"batch\":%zu,\"batch_one_ms\":%.3f,\"batch_loop_ms\":%.3f,\"batch_many_ms\":%.3f}\n",
               patina_table_spec(one), n, T, ms[0][0], ms[0][1], ms[0][2], B, ms[1][0], ms[1][1], ms[1][2]);
        for (int mode = 0; mode < 3; mode++) patina_table_results_release(&r[mode]);
    }
    for (i = 0; i < T; i++) patina_table_free(ts[i]);
    patina_table_free(one);
    patina_context_free(ctx);
    free(ts);
    free(ch);
    free(keys);
    free(pool);
    free(q);
    return 0;
}

/* ------------------------------------------------------------------- knn */

typedef struct knn {
    clu_front_t *front;  /* the cluster's front end, or */
    patina_table_t **many; /* the rows in nmany tables of this process searched together (--inproc;
                            * --tables T, default 1) */
    size_t nmany;
    const char *spec;
    size_t bytes;
    patina_table_query_t q;
} knn_t;

/* One search of nq queries (the front end's, or the table's); dies unless
 * the answer is whole and every query's list is k hits long (fewer when
 * there are fewer rows) with rank 1 at distance 0. Returns its seconds. */
static double knn_ask(knn_t *kn, const unsigned char *q, size_t nq, uint64_t rows)
{
    patina_table_results_t res;
    clu_coverage_t cov;
    const size_t want = rows && rows < kn->q.k ? (size_t)rows : kn->q.k;
    const double t0 = now();
    double t;
    size_t i;
    patina_status st;
    memset(&res, 0, sizeof res);
    memset(&cov, 0, sizeof cov);
    st = kn->many ? patina_table_search_many(kn->many, kn->nmany, q, nq, &kn->q, &res)
                  : clu_front_search(kn->front, kn->spec, q, nq, kn->bytes, &kn->q, &res, &cov);
    if (st != PATINA_OK) die("knn search");
    t = now() - t0;
    if (!kn->many && nq > 1) /* where a batch's time goes */
        fprintf(stderr, "bench_cluster: knn: batch of %zu: %.1f ms; fan-out %.1f ms, slowest request's round trip "
                        "%.1f ms, %.1f ms of it in its shard\n", nq, 1e3 * t, cov.fanout_ms, cov.wait_ms, cov.shard_ms);
    if (cov.partial) {
        fprintf(stderr, "bench_cluster: knn: partial answer (%s)\n", cov.failure);
        exit(2);
    }
    for (i = 0; i < nq; i++) {
        const size_t n = res.offsets[i + 1] - res.offsets[i];
        if (n != want || res.hits[res.offsets[i]].distance != 0.0) {
            fprintf(stderr, "bench_cluster: knn: query %zu of %zu: %zu hits (not %zu), rank 1 at %g (not 0)\n", i, nq,
                    n, want, n ? res.hits[res.offsets[i]].distance : -1.0);
            exit(2);
        }
    }
    patina_table_results_release(&res);
    return t;
}

static int run_knn(int argc, char **argv)
{
    const int reps = atoi(arg(argc, argv, "--reps", "20"));
    const size_t B = (size_t)strtoull(arg(argc, argv, "--batch", "4096"), NULL, 10);
    const uint64_t seed = strtoull(arg(argc, argv, "--seed", "7"), NULL, 10);
    const uint64_t rows = strtoull(arg(argc, argv, "--rows", "0"), NULL, 10);
    int inproc = 0, r;
    patina_context_t *ctx = NULL;
    patina_table_t *t = NULL;
    clu_session_t *s = NULL;
    unsigned char *pool = NULL, *q;
    double *lat = calloc((size_t)(reps > 0 ? reps : 1), sizeof *lat), bt[3];
    knn_t kn;
    size_t i;
    for (r = 2; r < argc; r++) inproc |= !strcmp(argv[r], "--inproc");
    if (reps < 1 || B < 1 || !lat) die("--reps and --batch must be >= 1");
    memset(&kn, 0, sizeof kn);
    if (inproc) { /* the same rows in one table of this process, on --gpus (budget --budget GiB a device) */
        const uint32_t P = (uint32_t)atoi(arg(argc, argv, "--partitions", "64"));
        const size_t T = (size_t)atoi(arg(argc, argv, "--tables", "1"));
        const double t0 = now();
        if (!rows || P < 1) die("--inproc needs --rows N and --partitions P >= 1");
        if (T < 1 || T > P || !(kn.many = calloc(T, sizeof *kn.many))) die("--tables must be 1 .. --partitions");
        ctx = inproc_context(argc, argv);
        for (i = 0; i < T; i++)
            if (patina_table_new(&kn.many[i], ctx, arg(argc, argv, "--spec", "cedd"), NULL) != PATINA_OK) die("table");
        fill_synthetic(kn.many, T, rows, P, seed);
        fprintf(stderr, "bench_cluster: knn: %llu rows in %zu table(s) in %.1f s\n", (unsigned long long)rows, T,
                now() - t0);
        t = kn.many[0];
        kn.nmany = T;
    } else {
        if (patina_context_new(&ctx, NULL) != PATINA_OK) die("context");
        s = session(argc, argv, ctx, 0, &t);
        kn.front = clu_session_front(s);
    }
    kn.spec = patina_table_spec(t);
    kn.bytes = patina_extractor_bytes(patina_table_extractor(t));
    patina_table_query_init(&kn.q);
    kn.q.k = (size_t)atoi(arg(argc, argv, "--k", "10"));
    for (r = 2; r < argc; r++) kn.q.keys |= inproc && !strcmp(argv[r], "--keys");
    if (!(q = malloc(B * kn.bytes))) die("memory");
    { /* the queries: partition 0's rows 0, 1, ... (again from row 0 past its last) */
        const uint32_t P = (uint32_t)atoi(arg(argc, argv, "--partitions", "64"));
        const uint64_t n0 = rows && P ? clu_synth_count(rows, 0, P) : B;
        if (clu_synth_pool(&pool, t, seed, 0, 0) != PATINA_OK) die("synthetic rows");
        for (i = 0; i < B; i++) {
            unsigned char *qi = q + i * kn.bytes;
            const unsigned char *d = clu_synth_desc(pool, qi, kn.bytes, seed, 0, 0, i % (n0 ? n0 : 1));
            if (d != qi) memcpy(qi, d, kn.bytes);
        }
    }
    for (r = 0; r < WARMUP; r++) knn_ask(&kn, q + (size_t)r % B * kn.bytes, 1, rows);
    for (r = 0; r < reps; r++) lat[r] = knn_ask(&kn, q + (size_t)r % B * kn.bytes, 1, rows);
    print_series(inproc ? "knn_inproc" : "knn", "single queries", lat, reps);
    knn_ask(&kn, q, B, rows); /* warm-up of the batch's shape */
    for (r = 0; r < 3; r++) bt[r] = knn_ask(&kn, q, B, rows);
    {
        const double p50 = pct(lat, (size_t)reps, 0.5), p99 = pct(lat, (size_t)reps, 0.99), b50 = pct(bt, 3, 0.5);
        double a50;
        /* single queries again after the batches: the steady state (a cluster's first series may
         * still meet the shards' warming of their partitions' device copies) */
        for (r = 0; r < reps; r++) lat[r] = knn_ask(&kn, q + (size_t)(r + 1) % B * kn.bytes, 1, rows);
        print_series(inproc ? "knn_inproc" : "knn", "single queries after the batches", lat, reps);
        a50 = pct(lat, (size_t)reps, 0.5);
        printf("{\"mode\":\"%s\",\"spec\":\"%s\",\"rows\":%llu,\"tables\":%zu,\"keys\":%d,\"k\":%zu,\"reps\":%d,"
               "\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"p50_after_ms\":%.3f,\"batch\":%zu,\"batch_ms\":%.3f,"
               "\"batch_queries_per_s\":%.0f}\n",
               inproc ? "knn_inproc" : "knn", kn.spec, (unsigned long long)rows, kn.many ? kn.nmany : 1, kn.q.keys,
               kn.q.k, reps, 1e3 * p50, 1e3 * p99, 1e3 * a50, B, 1e3 * b50, (double)B / b50);
    }
    free(pool);
    free(q);
    free(lat);
    if (kn.many)
        for (i = 0; i < kn.nmany; i++) patina_table_free(kn.many[i]);
    else
        patina_table_free(t);
    free(kn.many);
    if (s) clu_session_close(s);
    patina_context_free(ctx);
    return 0;
}

int main(int argc, char **argv)
{
    const char *m = argc > 1 ? argv[1] : "";
    WARMUP = atoi(arg(argc, argv, "--warmup", "5"));
    if (WARMUP < 1) WARMUP = 1;
    if (!strcmp(m, "inproc")) return run_inproc(argc, argv);
    if (!strcmp(m, "front")) return run_front(argc, argv);
    if (!strcmp(m, "cover")) return run_cover(argc, argv);
    if (!strcmp(m, "write")) return run_write(argc, argv);
    if (!strcmp(m, "load")) return run_load(argc, argv);
    if (!strcmp(m, "check")) return run_check(argc, argv);
    if (!strcmp(m, "search")) return run_search(argc, argv);
    if (!strcmp(m, "knn")) return run_knn(argc, argv);
    fprintf(stderr, "usage: bench_cluster inproc|front|cover|load|write|check|search|knn [options] (bench/cluster/driver.c)\n");
    return 2;
}
