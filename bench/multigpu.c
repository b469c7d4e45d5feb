/* bench_multigpu: one process on every GPU of the host against one GPU
 * (include/patina/context.h's device lists, docs/gpu.md "Several GPUs").
 *
 * For identification (references resident in GPU memory), CEDD k-NN and
 * SQFD (the GPU scan), a detached table of synthetic rows is built on a
 * context of one GPU and on one of every GPU ("all"), each in turn; the
 * same queries run on both (device GPU) and the answers are compared. One
 * table: rows per second (rows x queries / time, median of the reps) on 1
 * GPU, on all G, their ratio, and that ratio against the ideal G (the
 * target: >= 0.95 x 2 on two GPUs). On a machine of one GPU "all" is the
 * one-GPU path; the two slices of "0,0" are measured instead, for the
 * split's overhead, and the table says so. A second table gives the times
 * behind each rate: the call on 1 GPU and on all, and of the call on all
 * the slowest and fastest slice's own part, the hand-off, the merge and the
 * rest (patina_table_fanout), with the seconds each table took to fill.
 * Each table is filled once per context and measured at both batch sizes.
 *
 *   bench_multigpu [--refs N] [--cedd N] [--cedd-large N] [--sqfd N] [--reps R] [--budget GiB]
 * Defaults: 200000 references (rootsift, m = 384, a pool of 251 records
 * cycled; --refs 0 leaves that row out, as N = 0 does for every row), 10000000 CEDD rows (a pool of 65521 rows cycled), 40000000 CEDD
 * rows for the large row (a pool of 1048573; 0 leaves it out; last, so a
 * time limit costs only that row), 1000000 signatures (k=40, alpha 0.2, a
 * pool of 262139), 5 reps. Every pool size is prime: the copies of a pool row
 * spread over the id % G slices as a real table's near-duplicates would (a
 * pool of 2^k put every copy of a row, and so all of a query's exact
 * duplicates, in one slice of two). Exits 77 without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "patina/patina.h"
#include "benchutil.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what, patina_status s)
{
    fprintf(stderr, "bench_multigpu: %s: %s: %s\n", what, patina_status_str(s), patina_last_error());
    exit(2);
}

static int REPS = 5;
static uint64_t BUDGET;

/* A workload: a spec, n rows of bytes from gen(i), queries. */
typedef struct work {
    const char *name;
    const char *spec;
    size_t n;
    int identify;          /* queries are identification records */
    uint8_t *pool;         /* (npool, bytes) rows, row i = pool[i % npool] */
    size_t npool, bytes;
    uint8_t *queries;      /* (nq, qbytes) */
    size_t nq, qbytes;
} work_t;

static patina_context_t *context(const char *gpus)
{
    patina_context_t *ctx = NULL;
    patina_context_opts_t o;
    patina_status s;
    patina_context_opts_init(&o);
    o.gpus = gpus;
    o.gpu_mem_budget = BUDGET;
    if ((s = patina_context_new(&ctx, &o)) != PATINA_OK) die("context", s);
    return ctx;
}

/* The table of w on ctx, fed in blocks through its change stream. */
static patina_table_t *table(patina_context_t *ctx, const work_t *w)
{
    enum { BLOCK = 4096 };
    patina_table_t *t = NULL;
    patina_change_t ch[BLOCK];
    static char keys[BLOCK][24];
    patina_status s;
    size_t i, j;
    if ((s = patina_table_new(&t, ctx, w->spec, NULL)) != PATINA_OK) die("table", s);
    for (i = 0; i < w->n; i += BLOCK) {
        size_t m = w->n - i < BLOCK ? w->n - i : BLOCK;
        for (j = 0; j < m; j++) {
            snprintf(keys[j], sizeof keys[j], "r%zu", i + j);
            ch[j] = (patina_change_t){PATINA_CHANGE_PUT, i + j + 1, keys[j], w->pool + ((i + j) % w->npool) * w->bytes};
        }
        if ((s = patina_table_apply(t, ch, m, 1, NULL)) != PATINA_OK) die("apply", s);
    }
    return t;
}

/* One call of nq queries; its answer's ids and scores folded into *sum. */
static void call(patina_table_t *t, const work_t *w, size_t nq, double *sum)
{
    patina_status s;
    size_t i;
    *sum = 0;
    if (w->identify) {
        patina_identify_opts_t o;
        patina_identify_hit_t *h = calloc(nq * 10, sizeof *h);
        patina_identify_result_t *r = calloc(nq, sizeof *r);
        patina_identify_opts_init(&o);
        o.k = 10;
        o.device = PATINA_DEVICE_GPU;
        if ((s = patina_table_identify(t, w->queries, nq, &o, h, r, NULL)) != PATINA_OK) die("identify", s);
        for (i = 0; i < nq * 10; i++) *sum += (double)h[i].id * 1e-3 + h[i].score;
        free(h);
        free(r);
    } else {
        patina_table_query_t q;
        patina_table_results_t res;
        patina_table_query_init(&q);
        q.k = 10;
        q.device = PATINA_DEVICE_GPU;
        if ((s = patina_table_search(t, w->queries, nq, &q, &res)) != PATINA_OK) die("search", s);
        for (i = 0; i < res.offsets[nq]; i++) *sum += (double)res.hits[i].id * 1e-3 + res.hits[i].distance;
        patina_table_results_release(&res);
    }
}

/* One batch size's measures on one table: the call's median time, and the
 * medians of the fan-out's parts (patina_table_fanout; zero on one GPU). */
typedef struct measure {
    double call, slice_max, slice_min, start, merge, fan;
    double check; /* the answers' fold */
} measure_t;

static double median_of(double *v, int n) { return bench_median(v, n); }

/* Batches of nq on t (median of REPS after a warm-up call that uploads the
 * rows to the device). */
static void measure(patina_table_t *t, const work_t *w, size_t nq, measure_t *m)
{
    double ts[64], smax[64], smin[64], st[64], mg[64], fan[64], sum;
    int r;
    call(t, w, nq, &m->check); /* the rows' device copies */
    for (r = 0; r < REPS && r < 64; r++) {
        patina_table_fanout_t fo;
        double t0 = now();
        call(t, w, nq, &sum);
        ts[r] = now() - t0;
        if (patina_table_fanout(t, &fo) != PATINA_OK) die("fanout", PATINA_E_INVALID);
        smax[r] = fo.slice_max;
        smin[r] = fo.slice_min;
        st[r] = fo.start_max;
        mg[r] = fo.merge;
        fan[r] = fo.total;
    }
    m->call = median_of(ts, r);
    m->slice_max = median_of(smax, r);
    m->slice_min = median_of(smin, r);
    m->start = median_of(st, r);
    m->merge = median_of(mg, r);
    m->fan = median_of(fan, r);
}

/* w's table on ctx, measured at batches 1 and 16 (m[2]). */
static void measure_on(patina_context_t *ctx, const work_t *w, measure_t m[2], double *build)
{
    static const size_t batches[2] = {1, 16};
    double t0 = now();
    patina_table_t *t = table(ctx, w);
    *build = now() - t0;
    for (int b = 0; b < 2; b++) measure(t, w, batches[b] < w->nq ? batches[b] : w->nq, &m[b]);
    patina_table_free(t);
}

/* The workload's two lines of the rates table, and their lines of the
 * time table (kept in times[] until the end). */
static char times[16][256];
static int ntimes;

static void row(const work_t *w, patina_context_t *one, patina_context_t *many, size_t g)
{
    static const size_t batches[2] = {1, 16};
    measure_t m1[2], mg[2];
    double b1, bg;
    measure_on(one, w, m1, &b1);
    measure_on(many, w, mg, &bg);
    for (int b = 0; b < 2; b++) {
        const size_t nq = batches[b] < w->nq ? batches[b] : w->nq;
        const double r1 = (double)w->n * (double)nq / m1[b].call, rg = (double)w->n * (double)nq / mg[b].call;
        printf("| %-22s | %9zu | %5zu | %10.3f | %10.3f | %5.2f | %5.2f | %-4s |\n", w->name, w->n, nq, r1 / 1e6,
               rg / 1e6, rg / r1, rg / r1 / (double)g, m1[b].check == mg[b].check ? "yes" : "NO");
        if (ntimes < 16)
            snprintf(times[ntimes++], sizeof times[0],
                     "| %-22s | %9zu | %5zu | %8.3f | %8.3f | %8.3f | %8.3f | %8.3f | %8.3f | %8.3f | %5.1f / %5.1f |",
                     w->name, w->n, nq, m1[b].call * 1e3, mg[b].call * 1e3, mg[b].slice_max * 1e3,
                     mg[b].slice_min * 1e3, mg[b].start * 1e3, mg[b].merge * 1e3,
                     (mg[b].call - mg[b].fan) * 1e3, b1, bg);
    }
    fflush(stdout);
}

/* CEDD k-NN (k = 10) over n rows cycling a pool of npool random rows. */
static void cedd_row(const char *name, size_t n, size_t npool, bench_rng_t *rng, patina_context_t *one,
                     patina_context_t *many, size_t g)
{
    work_t w;
    size_t i;
    if (n == 0) return; /* --cedd 0: row left out */
    memset(&w, 0, sizeof w);
    w.name = name;
    w.spec = "cedd";
    w.n = n;
    w.bytes = PATINA_CEDD_DIM;
    w.npool = npool;
    w.pool = malloc(w.npool * w.bytes);
    if (!w.pool) die("cedd rows", PATINA_E_NOMEM);
    for (i = 0; i < w.npool * w.bytes; i++)
        w.pool[i] = (uint8_t)(bench_rng_below(rng, 100) < 70 ? 0 : 1 + bench_rng_below(rng, 7));
    w.nq = 16;
    w.qbytes = w.bytes;
    w.queries = malloc(w.nq * w.bytes);
    memcpy(w.queries, w.pool + 4096 * w.bytes, w.nq * w.bytes);
    row(&w, one, many, g);
    free(w.pool);
    free(w.queries);
}

/* Smooth noise, an image of w x h for identification queries. */
static void noise_image(patina_image_t *img, int w, int h, bench_rng_t *r)
{
    if (patina_image_init(img, w, h) != PATINA_OK) die("image", PATINA_E_NOMEM);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++)
                img->data[y * img->stride + 3 * x + c] =
                    (uint8_t)((((x / 7) * 37 + (y / 5) * 91 + c * 53) & 0xff) ^ bench_rng_below(r, 48));
}

int main(int argc, char **argv)
{
    size_t nrefs = 200000, ncedd = 10000000, ncedd_large = 40000000, nsqfd = 1000000, g, i;
    int gpus = patina_gpu_count();
    const char *list;
    bench_rng_t rng = {0x9e3779b97f4a7c15ull};
    patina_context_t *one, *many;
    patina_extractor_t *ex = NULL;
    work_t w;
    for (int a = 1; a < argc; a++) {
        if (a + 1 < argc && !strcmp(argv[a], "--refs")) nrefs = strtoull(argv[++a], NULL, 10);
        else if (a + 1 < argc && !strcmp(argv[a], "--cedd")) ncedd = strtoull(argv[++a], NULL, 10);
        else if (a + 1 < argc && !strcmp(argv[a], "--cedd-large")) ncedd_large = strtoull(argv[++a], NULL, 10);
        else if (a + 1 < argc && !strcmp(argv[a], "--sqfd")) nsqfd = strtoull(argv[++a], NULL, 10);
        else if (a + 1 < argc && !strcmp(argv[a], "--reps")) REPS = atoi(argv[++a]);
        else if (a + 1 < argc && !strcmp(argv[a], "--budget")) BUDGET = (uint64_t)(atof(argv[++a]) * 1073741824.0);
        else {
            fprintf(stderr, "usage: bench_multigpu [--refs N] [--cedd N] [--cedd-large N] [--sqfd N] [--reps R] "
                            "[--budget GiB]\n");
            return 2;
        }
    }
    if (REPS < 1) REPS = 1;
    if (gpus < 1) {
        printf("bench_multigpu: no usable GPU: skipped\n");
        return 77;
    }
    list = gpus > 1 ? "all" : "0,0";
    one = context(NULL);
    many = context(list);
    g = patina_context_devices(many, NULL, 0);
    printf("bench_multigpu: %d GPU%s; one GPU against %s (%zu slices)%s\n", gpus, gpus > 1 ? "s" : "", list, g,
           gpus > 1 ? "" : " -- ONE GPU ONLY: both slices share device 0, so the ratio shows the split's overhead "
                           "(ideal 1.0 there), not a multi-GPU speed-up");
    printf("rates in millions of rows (references, descriptors, signatures) x queries per second, device GPU, "
           "median of %d\n\n", REPS);
    printf("| %-22s | %9s | %5s | %10s | %10s | %5s | %5s | %-4s |\n", "workload", "rows", "batch", "1 GPU M/s",
           gpus > 1 ? "all M/s" : "0,0 M/s", "ratio", "/ideal", "same");
    printf("|------------------------|-----------|-------|------------|------------|-------|-------|------|\n");
    if (gpus == 1) g = 1; /* the ideal on one device */

    /* identification, references resident (--refs 0: not measured) */
    memset(&w, 0, sizeof w);
    if (nrefs == 0) goto cedd;
    w.name = "identify rootsift";
    w.spec = "rootsift"; /* m = 384 */
    w.identify = 1;
    w.n = nrefs;
    if (patina_extractor_new(&ex, w.spec) != PATINA_OK) die("extractor", PATINA_E_INVALID);
    w.bytes = patina_extractor_bytes(ex);
    w.npool = 251;
    w.pool = malloc(w.npool * w.bytes);
    for (i = 0; i < w.npool; i++) bench_rootsift_record(w.pool + i * w.bytes, 384, 384, &rng);
    {
        patina_refset_t *shape = NULL;
        patina_image_t img[16];
        if (patina_refset_new(&shape, patina_extractor_spec(ex)) != PATINA_OK) die("refset", PATINA_E_INVALID);
        w.nq = 16;
        w.qbytes = patina_identify_query_bytes(shape);
        w.queries = malloc(w.nq * w.qbytes);
        for (i = 0; i < w.nq; i++) noise_image(&img[i], 640, 480, &rng);
        if (patina_identify_extract(one, shape, w.queries, img, w.nq, NULL) != PATINA_OK) die("query", PATINA_E_INVALID);
        for (i = 0; i < w.nq; i++) patina_image_release(&img[i]);
        patina_refset_free(shape);
    }
    w.spec = patina_extractor_spec(ex);
    row(&w, one, many, g);
    free(w.pool);
    free(w.queries);
    patina_extractor_free(ex);

cedd: /* CEDD k-NN (k = 10) */
    cedd_row("CEDD k-NN k=10", ncedd, 65521, &rng, one, many, g);

    /* SQFD scan (k = 10; --sqfd 0: left out) */
    memset(&w, 0, sizeof w);
    if (nsqfd == 0) goto large;
    w.name = "SQFD k=10 (scan)";
    w.spec = "signature:k=40,alpha=0.2";
    w.n = nsqfd;
    if (patina_extractor_new(&ex, w.spec) != PATINA_OK) die("extractor", PATINA_E_INVALID);
    w.spec = patina_extractor_spec(ex);
    w.bytes = patina_extractor_bytes(ex);
    w.npool = 262139; /* a query's exact duplicates stay about 4: with 4093, 244 of them tied at distance 0,
                       * and the host's exact SQFD of every tied candidate outweighed the scan */
    w.pool = malloc(w.npool * w.bytes);
    for (i = 0; i < w.npool; i++) {
        float rows[40 * 8];
        double sw = 0;
        for (int c = 0; c < 40; c++) {
            rows[c * 8] = (float)(0.2 + bench_rng_below(&rng, 1000) / 1000.0);
            sw += rows[c * 8];
            for (int k = 1; k < 8; k++) rows[c * 8 + k] = (float)(bench_rng_below(&rng, 1000) / 1000.0);
        }
        for (int c = 0; c < 40; c++) rows[c * 8] = (float)(rows[c * 8] / sw);
        if (patina_signature_pack(ex, w.pool + i * w.bytes, rows, 40) != PATINA_OK) die("pack", PATINA_E_INVALID);
    }
    w.nq = 16;
    w.qbytes = w.bytes;
    w.queries = malloc(w.nq * w.bytes);
    memcpy(w.queries, w.pool + 7 * w.bytes, w.nq * w.bytes);
    row(&w, one, many, g);
    free(w.pool);
    free(w.queries);
    patina_extractor_free(ex);

large:
    /* CEDD k-NN over more rows, where a call's fixed costs weigh less (a pool of 1048573 rows: each
     * query's exact duplicates stay a few dozen) */
    if (ncedd_large) cedd_row("CEDD k-NN k=10 (large)", ncedd_large, 1048573, &rng, one, many, g);

    printf("\nratio: all / 1 GPU; /ideal: ratio / G (target >= 0.95); same: the answers' ids and scores agree\n");
    printf("\ntimes in ms (medians): a call on 1 GPU and on all; of the call on all: the slowest and the fastest "
           "slice's own part, the latest slice start after the fan-out began (hand-off), the merge, and the rest "
           "(the call less the fan-out: lock, allocation, the table's own work); build: seconds to fill the table "
           "(1 GPU / all)\n\n");
    printf("| %-22s | %9s | %5s | %8s | %8s | %8s | %8s | %8s | %8s | %8s | %13s |\n", "workload", "rows", "batch",
           "1 GPU", "all", "slowest", "fastest", "hand-off", "merge", "rest", "build s");
    printf("|------------------------|-----------|-------|----------|----------|----------|----------|----------|"
           "----------|----------|---------------|\n");
    for (int k = 0; k < ntimes; k++) printf("%s\n", times[k]);
    patina_context_free(many);
    patina_context_free(one);
    return 0;
}
