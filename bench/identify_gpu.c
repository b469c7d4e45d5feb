/* Identification at GPU speed (docs/identify.md "GPU"; the paper's Tables
 * 1-7): one table of reference images matched per second, our fused kernel
 * (int8 and fp16 tensor cores) beside the paper's cuBLAS algorithm (the
 * lab's baseline, lab/identify/cublas_2nn.cu) and PyTorch fp16 (matmul +
 * topk, bench/identify_gpu_peers.py) measured in the same run, the paper's
 * number for the same shape, the fraction of the tensor-core peak and, for
 * references streamed from pinned host memory, of the measured PCIe rate.
 *
 *   bench_identify_gpu [--refs N] [--quick] [--no-peers] [--capacity] [--e2e N] [--only SECTION]
 *                      [--kernel auto|mma|wgmma] [--e2e-views V] [--view-candidates N,...]
 *                      [--first-features F,...] [--half-view-features H,...] [--half-query F]
 *
 * --kernel: the int8 matching kernel of the fused rows (pgpu_idf_opts_t.kernel;
 * auto: wgmma on compute capability 9.0 where it applies, else mma.sync).
 *
 * Sections (m = 384, n = 768 unless a row says otherwise):
 *   resident   one query against N device-resident references (default 2^20)
 *   queries    batches of queries against 2^17 references: query x reference pairs/s
 *   m, n       the paper's Table 7 shapes
 *   streamed   references in the pinned host tier, streamed through the staging
 *              chunks (the hybrid cache, Tables 5-6): 1 and 16 queries
 *   sets       N / 2 resident references split into 1, 8, 32, 64 sets (a
 *              shard's partitions), one query: a patina_gpu_identify call per
 *              set against one patina_gpu_identify_many pass (host wall time)
 *   capacity   (--capacity) the device arena filled to this GPU's memory (int8),
 *              one query against all of it
 *   e2e        (--e2e N, default 2^20 in a full run) one query image against N
 *              resident references through patina_identify: extraction, matching
 *              and verification times (best of 3), for a 640x480 window (n = 768
 *              features) and the whole image reduced to <= 300 px (~200 features,
 *              the shape of issue 29's baseline); --e2e-views V registers N items
 *              of 1 + V rows (reference views: the synthetic items' views are
 *              other synthetic records) and times each --view-candidates value
 *              (0: every row matched; N: the first rows, then the views of the
 *              best N items) and each --first-features value (0: the queries'
 *              every feature in one pass; F: the first pass with their F
 *              strongest, then the candidates again with all) and each
 *              --half-view-features value (with views 1 or 3 and the view
 *              pass: the items' half-size views in the first pass too, with
 *              the queries' H strongest); --half-query F adds the half-size
 *              query to every step (the photograph halved, extracted and
 *              identified with patina_identify_half_opts(F), then fused) as
 *              two calls, and a row for the one call of patina_identify_half
 *              (each pair's first pass shared), checked to give the same
 *              rank 1: what `identify --half-query F` costs
 * Synthetic RootSIFT-like rows (4096 distinct references repeated: the work
 * does not depend on the values); e2e also registers the sample photographs
 * as real references and queries a distorted one. Times are GPU times of the
 * matching (events around the launches), queries and references already on
 * the device, unless a row says otherwise. Never fails on timings. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "benchutil.h"
#include "core/context.h"
#include "cublas_2nn.h"
#include "features/rootsift.h"
#include "gpu/context.h"
#include "gpu/gpu.h"
#include "patina/patina.h"

#define POOL 4096 /* distinct synthetic references */

static int PEERS = 1, QUICK = 0;
static patina_context_t *CTX;
static patina_gpu_t *G;
static double PEAK_INT8, PEAK_FP16, PCIE; /* ops/s, ops/s, bytes/s */
static uint64_t SERIAL = 1000;
static int E2E_VIEWS = 0;           /* --e2e-views */
static size_t VIEW_CANDS[8] = {0}; /* --view-candidates */
static size_t NVC = 1;
static size_t FIRST_FEATS[8] = {0}; /* --first-features */
static size_t NFF = 1;
static size_t HALF_FEATS[8] = {0}; /* --half-view-features */
static size_t HALF_QUERY = 0;       /* --half-query: the half-size query's first-pass features (0: off) */
static size_t NHV = 1;

static void die(const char *what)
{
    fprintf(stderr, "bench_identify_gpu: %s: %s\n", what, patina_last_error());
    exit(1);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* N references of m rows (count m): a pool of POOL distinct ones, repeated
 * (each slot points into the pool: the host holds the pool only, the GPU
 * copy is N slots). rows: (pool, m, 128). */
typedef struct refs {
    size_t n, m;
    uint8_t *rows;
    const uint8_t **ptr;
    uint16_t *count;
    uint64_t *stamp;
} refs_t;

static void make_refs(refs_t *r, size_t n, size_t m)
{
    bench_rng_t g = {12345 + m};
    const size_t pool = n < POOL ? n : POOL, rb = m * 128;
    r->n = n;
    r->m = m;
    r->rows = malloc(pool * rb + 1);
    r->ptr = malloc((n + 1) * sizeof *r->ptr);
    r->count = malloc((n + 1) * sizeof *r->count);
    r->stamp = calloc(n + 1, sizeof *r->stamp);
    if (!r->rows || !r->ptr || !r->count || !r->stamp) die("out of host memory for the references");
    for (size_t i = 0; i < pool * m; i++) bench_rootsift_row(r->rows + i * 128, &g);
    for (size_t i = 0; i < n; i++) {
        r->ptr[i] = r->rows + (i % pool) * rb;
        r->count[i] = (uint16_t)m;
    }
}

static void free_refs(refs_t *r)
{
    free(r->rows);
    free(r->ptr);
    free(r->count);
    free(r->stamp);
    memset(r, 0, sizeof *r);
}

/* nq queries of n rows: half of each from references' rows, perturbed. */
static uint8_t *make_queries(const refs_t *r, size_t nq, size_t n)
{
    bench_rng_t g = {777 + n};
    uint8_t *q = malloc(nq * n * 128 + 1);
    if (!q) die("out of memory");
    for (size_t j = 0; j < nq * n; j++) {
        if (j % 2 == 0) {
            const uint8_t *row = r->rows + (bench_rng_below(&g, (uint32_t)(r->n < POOL ? r->n : POOL)) * r->m +
                                            bench_rng_below(&g, (uint32_t)r->m)) * 128;
            for (int k = 0; k < 128; k++) {
                int x = row[k] + (int)bench_rng_below(&g, 7) - 3;
                q[j * 128 + k] = (uint8_t)(x < 0 ? 0 : x > 255 ? 255 : x);
            }
        } else {
            bench_rootsift_row(q + j * 128, &g);
        }
    }
    return q;
}

/* Median GPU ms of the fused kernel: nq queries against r (arena_cap 0:
 * all resident). stats of the last run in *st. */
static int COPY_ONLY; /* fused_ms: stream without matching */
static int KERNEL = PGPU_IDF_KERNEL_AUTO; /* --kernel */

static double fused_ms(const refs_t *r, const uint8_t *q, size_t nq, size_t n, int prec, size_t arena_cap,
                       pgpu_idf_stats_t *st, int *fail)
{
    pgpu_idf_refs_t v;
    pgpu_idf_opts_t o;
    uint16_t *qc = malloc(nq * sizeof *qc);
    uint64_t *keys = malloc(nq * 10 * sizeof *keys);
    double t[8];
    const int reps = QUICK || (double)nq * (double)r->n > 4e6 ? 3 : 7;
    memset(&v, 0, sizeof v);
    v.serial = SERIAL++;
    v.nslots = r->n;
    v.m = r->m;
    v.rows = r->ptr;
    v.count = r->count;
    v.stamp = r->stamp;
    memset(&o, 0, sizeof o);
    o.precision = prec;
    o.ratio = 0.8;
    o.ncap = 10;
    o.arena_cap = arena_cap;
    o.copy_only = COPY_ONLY;
    o.kernel = prec == PGPU_IDF_INT8 ? KERNEL : PGPU_IDF_KERNEL_AUTO;
    for (size_t i = 0; i < nq; i++) qc[i] = (uint16_t)n;
    *fail = 0;
    for (int i = 0; i <= reps; i++) {
        if (patina_gpu_identify(G, &v, q, n * 128, qc, nq, n, &o, keys, st) != PATINA_OK) {
            fprintf(stderr, "bench_identify_gpu: fused (%zu refs): %s\n", r->n, patina_last_error());
            *fail = 1;
            break;
        }
        if (i) t[i - 1] = st->ms_resident + st->ms_streamed;
    }
    free(qc);
    free(keys);
    return *fail ? -1 : bench_median(t, reps);
}

/* PyTorch's ms for the same shape (-1: not run). */
static double peer_ms(size_t refs, size_t m, size_t n, size_t nq)
{
    char cmd[512], line[256];
    const char *py = getenv("PATINA_PYTHON");
    double ms = -1;
    FILE *p;
    if (!PEERS) return -1;
    snprintf(cmd, sizeof cmd, "%s bench/identify_gpu_peers.py --refs %zu --m %zu --n %zu --queries %zu 2>&1",
             py && *py ? py : "python3", refs, m, n, nq);
    if (!(p = popen(cmd, "r"))) return -1;
    while (fgets(line, sizeof line, p))
        if (sscanf(line, "torch %lf", &ms) != 1) fprintf(stderr, "peer: %s", line);
    pclose(p);
    return ms;
}

static void header(void)
{
    printf("| section | m | n | queries | references | path | ms | pairs/s | vs PyTorch | paper (P100) | "
           "of TC peak | of PCIe |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
}

/* One row; torch_rate: PyTorch's pairs/s for the same shape (0: none). */
static void row(const char *sec, size_t m, size_t n, size_t nq, size_t nref, const char *path, double ms,
                double torch_rate, const char *paper, int prec, double h2d_bytes)
{
    const double rate = ms > 0 ? (double)nq * (double)nref / (ms / 1e3) : 0;
    const double ops = rate * 2.0 * (double)m * (double)n * 128.0;
    const double peak = prec == 0 ? PEAK_INT8 : PEAK_FP16;
    char vs[32] = "-", tc[32] = "-", pc[32] = "-";
    if (torch_rate > 0 && rate > 0) snprintf(vs, sizeof vs, "%.1fx", rate / torch_rate);
    if (peak > 0 && prec >= 0) snprintf(tc, sizeof tc, "%.1f%%", 100.0 * ops / peak);
    if (h2d_bytes > 0 && PCIE > 0 && ms > 0) snprintf(pc, sizeof pc, "%.1f%%", 100.0 * h2d_bytes / (ms / 1e3) / PCIE);
    printf("| %s | %zu | %zu | %zu | %zu | %s | %.3f | %.4g | %s | %s | %s | %s |\n", sec, m, n, nq, nref, path, ms,
           rate, vs, paper ? paper : "-", tc, pc);
    fflush(stdout);
}

static void section_resident(size_t nref)
{
    refs_t r;
    uint8_t *q;
    pgpu_idf_stats_t st;
    int fail;
    const size_t peer_refs = nref < 65536 ? nref : 65536;
    double tm, tr = 0, ms;
    make_refs(&r, nref, 384);
    q = make_queries(&r, 1, 768);
    tm = peer_ms(peer_refs, 384, 768, 1);
    if (tm > 0) tr = (double)peer_refs / (tm / 1e3);
    for (int prec = 0; prec < 2; prec++) {
        /* as many as the arena holds (fp16 slots are twice the size) */
        size_t cap, keep = r.n;
        patina_gpu__identify_capacity(G, 384, prec, &cap);
        cap = cap / 4 * 3;
        if (r.n > cap) r.n = cap;
        ms = fused_ms(&r, q, 1, 768, prec, 0, &st, &fail);
        if (!fail)
            row("resident", 384, 768, 1, r.n, prec ? "fused fp16" : "fused int8", ms, tr,
                "62,356 (1 GPU), 872,984 (14 GPUs)", prec, 0);
        r.n = keep;
    }
    { /* the paper's algorithm (lab), on at most 65536 references */
        char err[256];
        for (int f16 = 0; f16 < 2; f16++) {
            lab_2nn_t *l = lab_2nn_new(384, 768, 1024, f16, err, sizeof err);
            if (!l || lab_2nn_set_refs(l, r.ptr, r.count, peer_refs) || lab_2nn_set_query(l, q, 768)) {
                fprintf(stderr, "bench_identify_gpu: lab: %s\n", l ? "upload failed" : err);
                lab_2nn_free(l);
                continue;
            }
            ms = lab_2nn_time(l, 0.8, QUICK ? 3 : 5);
            row("resident", 384, 768, 1, peer_refs, f16 ? "cuBLAS fp16 out + top-2 (lab, paper's Alg. 2)"
                                                        : "cuBLAS fp32 out + top-2 (lab, exact)",
                ms, tr, "62,356", 1, 0);
            lab_2nn_free(l);
        }
    }
    if (tm > 0) row("resident", 384, 768, 1, peer_refs, "PyTorch fp16 matmul + topk", tm, tr, "-", 1, 0);
    free(q);
    free_refs(&r);
}

static void section_queries(void)
{
    static const size_t qs[] = {1, 16, 64, 256};
    const size_t nref = QUICK ? 16384 : 65536;
    refs_t r;
    uint8_t *q;
    pgpu_idf_stats_t st;
    int fail;
    make_refs(&r, nref, 384);
    q = make_queries(&r, 256, 768);
    for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
        double tr = 0, tm = qs[i] <= 16 ? peer_ms(QUICK ? 8192 : 16384, 384, 768, qs[i]) : -1;
        if (tm > 0) tr = (double)qs[i] * (QUICK ? 8192 : 16384) / (tm / 1e3);
        for (int prec = 0; prec < 2; prec++) {
            double ms;
            if (prec && qs[i] > 64) continue;
            ms = fused_ms(&r, q, qs[i], 768, prec, 0, &st, &fail);
            if (!fail) row("queries", 384, 768, qs[i], nref, prec ? "fused fp16" : "fused int8", ms, tr, NULL, prec, 0);
        }
    }
    free(q);
    free_refs(&r);
}

static void section_shapes(void)
{
    static const struct {
        size_t m, n;
        const char *paper;
    } sh[] = {{768, 768, "46,323 (97.74%)"}, {512, 768, "57,859 (97.74%)"}, {384, 768, "62,356 (97.46%)"},
              {256, 768, "68,472 (94.07%)"}, {384, 1024, "46,204 (98.02%)"}, {384, 512, "91,367 (95.76%)"},
              {384, 384, "111,818 (91.81%)"}};
    const size_t nref = QUICK ? 32768 : 131072;
    for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
        refs_t r;
        uint8_t *q;
        pgpu_idf_stats_t st;
        int fail;
        double ms;
        make_refs(&r, nref, sh[i].m);
        q = make_queries(&r, 1, sh[i].n);
        ms = fused_ms(&r, q, 1, sh[i].n, 0, 0, &st, &fail);
        if (!fail) row("m, n (Table 7)", sh[i].m, sh[i].n, 1, nref, "fused int8", ms, 0, sh[i].paper, 0, 0);
        free(q);
        free_refs(&r);
    }
}

static void section_streamed(void)
{
    const size_t nref = QUICK ? 65536 : 131072;
    refs_t r;
    uint8_t *q;
    pgpu_idf_stats_t st;
    int fail;
    make_refs(&r, nref, 384);
    q = make_queries(&r, 16, 768);
    {
        double gb_small = 0, gb_big = 0, ms;
        patina_gpu__bandwidth(G, 0, (size_t)64 << 20, 5, &gb_small);
        patina_gpu__bandwidth(G, 0, (size_t)4 << 30, 2, &gb_big);
        COPY_ONLY = 1;
        ms = fused_ms(&r, q, 1, 768, 0, 1, &st, &fail);
        COPY_ONLY = 0;
        printf("| streamed (pinned host) | 384 | 768 | 0 | %zu | copies alone (no matching): %.1f GB/s; one pinned "
               "copy of 64 MiB %.1f GB/s, of 4 GiB %.1f GB/s | %.3f | - | - | - | - | %.1f%% |\n",
               nref, fail ? 0 : st.h2d_bytes / (ms / 1e3) / 1e9, gb_small, gb_big, ms,
               fail || PCIE <= 0 ? 0 : 100.0 * st.h2d_bytes / (ms / 1e3) / PCIE);
    }
    for (size_t nq = 1; nq <= 16; nq *= 16) {
        /* arena of 1 slot: everything but slot 0 streams from the host tier */
        double ms = fused_ms(&r, q, nq, 768, 0, 1, &st, &fail);
        if (!fail)
            row("streamed (pinned host)", 384, 768, nq, nref, "fused int8, 3 streams", ms, 0,
                nq == 1 ? "25,362 (m = n = 768)" : NULL, 0, st.h2d_bytes);
    }
    free(q);
    free_refs(&r);
}

/* nref resident references split into S sets (a shard's partitions), one
 * query: S calls of patina_gpu_identify (a round trip each) against one
 * patina_gpu_identify_many call (one pass, one wait); wall time on the host
 * (the round trips are what differs), median of reps after a warm-up that
 * builds the mirrors. The keys of the two are compared. */
static void section_sets(size_t nref)
{
    static const size_t ss[] = {1, 8, 32, 64};
    const int reps = QUICK ? 3 : 9;
    refs_t r;
    uint8_t *q;
    pgpu_idf_opts_t o;
    pgpu_idf_stats_t st, sum;
    uint16_t qc = 768;
    make_refs(&r, nref, 384);
    q = make_queries(&r, 1, 768);
    memset(&o, 0, sizeof o);
    o.precision = PGPU_IDF_INT8;
    o.ratio = 0.8;
    o.ncap = 10;
    o.kernel = KERNEL;
    for (size_t si = 0; si < sizeof ss / sizeof *ss; si++) {
        const size_t S = ss[si];
        pgpu_idf_refs_t *v = calloc(S, sizeof *v);
        uint64_t *k1 = calloc(S * 10, sizeof *k1), *km = calloc(S * 10, sizeof *km);
        double t1[16], tm[16];
        int fail = 0;
        if (!v || !k1 || !km) die("out of memory");
        for (size_t j = 0, off = 0; j < S; j++) {
            const size_t nj = nref / S + (j < nref % S);
            v[j].serial = SERIAL++;
            v[j].nslots = nj;
            v[j].m = r.m;
            v[j].rows = r.ptr + off;
            v[j].count = r.count + off;
            v[j].stamp = r.stamp + off;
            off += nj;
        }
        for (int i = 0; i <= reps && !fail; i++) {
            double t0 = now_s();
            memset(&sum, 0, sizeof sum);
            for (size_t j = 0; j < S && !fail; j++) {
                fail = patina_gpu_identify(G, &v[j], q, 768 * 128, &qc, 1, 768, &o, k1 + j * 10, &st) != PATINA_OK;
                sum.syncs += st.syncs;
            }
            if (i) t1[i - 1] = (now_s() - t0) * 1e3;
            t0 = now_s();
            fail = fail || patina_gpu_identify_many(G, v, S, q, 768 * 128, &qc, 1, 768, &o, km, &st) != PATINA_OK;
            if (i) tm[i - 1] = (now_s() - t0) * 1e3;
        }
        if (fail) {
            fprintf(stderr, "bench_identify_gpu: sets (%zu sets of %zu refs): %s\n", S, nref, patina_last_error());
        } else {
            char path[128];
            if (memcmp(k1, km, S * 10 * sizeof *k1))
                fprintf(stderr, "bench_identify_gpu: sets: %zu sets: the one-pass keys differ from the calls' (a bug)\n",
                        S);
            snprintf(path, sizeof path, "%zu sets, a call each (%zu waits; host wall ms)", S, sum.syncs);
            row("sets", 384, 768, 1, nref, path, bench_median(t1, reps), 0, NULL, -1, 0);
            snprintf(path, sizeof path, "%zu sets, one pass (%zu waits; host wall ms)", S, st.syncs);
            row("sets", 384, 768, 1, nref, path, bench_median(tm, reps), 0, NULL, -1, 0);
        }
        for (size_t j = 0; j < S; j++) patina_gpu_identify_forget(G, v[j].serial);
        free(v);
        free(k1);
        free(km);
    }
    free(q);
    free_refs(&r);
}

static void section_capacity(void)
{
    size_t slots;
    refs_t r;
    uint8_t *q;
    pgpu_idf_stats_t st;
    int fail;
    double ms;
    size_t cap;
    patina_gpu__identify_capacity(G, 384, 0, &cap);
    slots = cap - cap / 100; /* the query and list buffers take a little */
    printf("\ncapacity: the budget (%.1f GiB of %.1f GiB) holds %zu references of 384 rows (int8, 49152 bytes "
           "each); filling %zu\n",
           (double)G->budget / 1073741824.0, (double)G->total_mem / 1073741824.0, cap, slots);
    make_refs(&r, slots, 384);
    q = make_queries(&r, 1, 768);
    ms = fused_ms(&r, q, 1, 768, 0, 0, &st, &fail);
    if (!fail) {
        header();
        row("capacity", 384, 768, 1, slots, "fused int8, all resident", ms, 0, NULL, 0, 0);
        printf("resident %zu, streamed %zu\n", st.dev_slots, st.host_slots);
    }
    free(q);
    free_refs(&r);
}

/* One query image against N references (the sample photographs' records
 * among synthetic ones) through the public API; time split. */
static void section_e2e(size_t nref)
{
    patina_extractor_t *ex = NULL;
    patina_refset_t *rs = NULL;
    char **files = NULL;
    size_t nf, i, bytes, nreal;
    unsigned char *rec, *q;
    patina_image_t img, var;
    bench_rng_t g = {99};
    patina_identify_opts_t o, ho;
    patina_identify_hit_t hits[5], hh[5], hits2[5];
    patina_identify_result_t res, hres, res2;
    unsigned char *hq, taken = 0, taken2 = 0;
    double t0, t_ext, t_match, t_all, t_match2, t_all2;
    const char *sd = getenv("PATINA_SAMPLES");
    nf = bench_list_images(sd && *sd ? sd : "samples", &files);
    if (nf == 0) {
        printf("\ne2e skipped: no sample photographs\n");
        return;
    }
    {
        char spec[64];
        snprintf(spec, sizeof spec, E2E_VIEWS ? "rootsift:views=%d" : "rootsift", E2E_VIEWS);
        if (patina_extractor_new(&ex, spec) != PATINA_OK || patina_refset_new(&rs, patina_extractor_spec(ex)) != PATINA_OK)
            die("refset");
    }
    bytes = patina_extractor_bytes(ex); /* an item's record: 1 + views rows */
    rec = malloc(bytes * POOL);
    /* real references: ids 1..nreal */
    nreal = nf < 64 ? nf : 64;
    {
        patina_image_t *imgs = calloc(nreal, sizeof *imgs);
        unsigned char *all = malloc(nreal * bytes);
        for (i = 0; i < nreal; i++)
            if (patina_image_load(&imgs[i], files[i], NULL) != PATINA_OK) die(files[i]);
        if (patina_extract_batch(CTX, ex, PATINA_DEVICE_CPU, all, imgs, nreal, NULL) != PATINA_OK) die("extract");
        for (i = 0; i < nreal; i++)
            if (patina_refset_put(rs, 1 + i, all + i * bytes, bytes) != PATINA_OK) die("put");
        img = imgs[0]; /* the query's source */
        for (i = 1; i < nreal; i++) patina_image_release(&imgs[i]);
        free(imgs);
        free(all);
    }
    {
        const size_t per = (size_t)E2E_VIEWS + 1, row = bytes / per;
        for (i = 0; i < POOL * per; i++) bench_rootsift_record(rec + i * row, 384, 384, &g);
    }
    t0 = now_s();
    for (i = nreal; i < nref; i++)
        if (patina_refset_put(rs, 1 + i, rec + (i % POOL) * bytes, bytes) != PATINA_OK) die("put");
    printf("\ne2e: %zu references (%zu sample photographs, the rest synthetic) of %d rows registered in %.1f s\n",
           nref, nreal, E2E_VIEWS + 1, now_s() - t0);
    q = malloc(patina_identify_query_bytes(rs));
    hq = malloc(patina_identify_query_bytes(rs));
    patina_identify_opts_init(&o);
    o.device = PATINA_DEVICE_GPU;
    /* the queries, from the first sample: a 640 x 480 window at half
     * resolution (a phone photo of a part of the item; about the n = 768
     * budget's features), and the whole image reduced by an integer box
     * factor to at most 300 pixels on its longer side (the item from
     * further away; about 200 features, the shape of issue 29's 115 ms
     * baseline, whose query was a whole 400 x 600 sample at half size) */
    for (size_t vi = 0; vi < NVC * NFF * NHV; vi++)
    for (int shape = 0; shape < 2; shape++) {
        const size_t vc = VIEW_CANDS[vi / (NFF * NHV)], ff = FIRST_FEATS[vi / NHV % NFF], hv = HALF_FEATS[vi % NHV];
        const int f = shape == 0 ? 2 : (((img.width > img.height ? img.width : img.height) + 299) / 300);
        const int w = shape == 0 ? (img.width / 2 < 640 ? img.width / 2 : 640) : img.width / f;
        const int h = shape == 0 ? (img.height / 2 < 480 ? img.height / 2 : 480) : img.height / f;
        if (patina_image_init(&var, w, h) != PATINA_OK) die("query image");
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                for (int ch = 0; ch < 3; ch++) { /* the mean of the f x f block, rounded */
                    unsigned sum = 0;
                    for (int dy = 0; dy < f; dy++)
                        for (int dx = 0; dx < f; dx++)
                            sum += img.data[(size_t)(f * y + dy) * img.stride + 3 * (size_t)(f * x + dx) + ch];
                    var.data[(size_t)y * var.stride + 3 * (size_t)x + ch] = (uint8_t)((sum + (unsigned)(f * f) / 2) / (unsigned)(f * f));
                }
        o.view_candidates = vc;
        o.first_features = ff;
        o.half_view_features = hv;
        if (patina_identify_half_opts(&o, HALF_QUERY, &ho) != PATINA_OK) die("half-size query options");
        if (shape == 0) { /* first call: the GPU mirror is built (the upload of every reference) */
            t0 = now_s();
            if (patina_identify_extract(CTX, rs, q, &var, 1, NULL) != PATINA_OK) die("extract query");
            if (patina_identify(CTX, rs, q, 1, &o, hits, &res) != PATINA_OK) die("identify");
            printf("\nview_candidates %zu, first_features %zu, half_view_features %zu: first call (builds the GPU "
                   "copy of %zu references%s): %.2f s\n",
                   vc, ff, hv, nref, E2E_VIEWS && vc ? (hv ? ", their first rows and half views" : ", their first rows") : "",
                   now_s() - t0);
            printf("| e2e, one query image, %zu references of %d rows, view_candidates %zu, first_features %zu, "
                   "half_view_features %zu%s | extraction (GPU) | matching (GPU, wall; the second pass with it) | "
                   "verification of the top 10 (CPU) | total | answer |\n|---|---|---|---|---|---|\n",
                   nref, E2E_VIEWS + 1, vc, ff, hv, HALF_QUERY ? ", with the half-size query (both calls in each step)" : "");
            if (HALF_QUERY)
                printf("(the half-size query: the photograph halved, its first pass on its %zu strongest features "
                       "over the first rows, then fused at margin %g)\n",
                       HALF_QUERY, (double)PATINA_HALF_QUERY_MARGIN);
        }
        /* best of 3 of each step (the GPU's clocks, the host's caches) */
        t_ext = t_match = t_all = t_match2 = t_all2 = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t;
            t0 = now_s();
            if (patina_identify_extract(CTX, rs, q, &var, 1, NULL) != PATINA_OK) die("extract query");
            if (HALF_QUERY && patina_identify_extract_half(CTX, rs, hq, &var, 1, NULL) != PATINA_OK)
                die("extract the half-size query");
            if ((t = now_s() - t0) < t_ext) t_ext = t;
            o.verify = ho.verify = 0;
            t0 = now_s();
            if (patina_identify(CTX, rs, q, 1, &o, hits, &res) != PATINA_OK) die("identify");
            if (HALF_QUERY && patina_identify(CTX, rs, hq, 1, &ho, hh, &hres) != PATINA_OK) die("identify half");
            if ((t = now_s() - t0) < t_match) t_match = t;
            o.verify = ho.verify = 1;
            t0 = now_s();
            if (patina_identify(CTX, rs, q, 1, &o, hits, &res) != PATINA_OK) die("identify");
            if (HALF_QUERY && (patina_identify(CTX, rs, hq, 1, &ho, hh, &hres) != PATINA_OK ||
                               patina_identify_fuse_half(1, o.k, PATINA_HALF_QUERY_MARGIN, &o, hits, &res, hh, &hres,
                                                         &taken) != PATINA_OK))
                die("identify half");
            if ((t = now_s() - t0) < t_all) t_all = t;
            if (HALF_QUERY) { /* the same as one call: each pair's first pass shared (patina_identify_half) */
                o.verify = 0;
                t0 = now_s();
                if (patina_identify_half(CTX, rs, q, hq, 1, HALF_QUERY, PATINA_HALF_QUERY_MARGIN, &o, hits2, &res2,
                                         &taken2) != PATINA_OK)
                    die("identify half (one call)");
                if ((t = now_s() - t0) < t_match2) t_match2 = t;
                o.verify = 1;
                t0 = now_s();
                if (patina_identify_half(CTX, rs, q, hq, 1, HALF_QUERY, PATINA_HALF_QUERY_MARGIN, &o, hits2, &res2,
                                         &taken2) != PATINA_OK)
                    die("identify half (one call)");
                if ((t = now_s() - t0) < t_all2) t_all2 = t;
                if (res2.nhits != res.nhits || (res.nhits && (hits2[0].id != hits[0].id ||
                                                              hits2[0].inliers != hits[0].inliers)))
                    die("identify half: one call and two calls differ");
            }
        }
        printf("| int8, %dx%d %s | %.1f ms | %.1f ms | %.1f ms | %.1f ms | rank 1 id %llu (%s), %u inliers, %u features%s |\n",
               var.width, var.height, shape == 0 ? "window" : "whole", 1e3 * t_ext, 1e3 * t_match, 1e3 * (t_all - t_match), 1e3 * (t_ext + t_all),
               res.nhits ? (unsigned long long)hits[0].id : 0ull, res.nhits && hits[0].id == 1 ? "correct" : "WRONG",
               res.nhits ? hits[0].inliers : 0, res.query_features,
               HALF_QUERY ? (taken ? " (the half-size query's answer; two calls)" : " (the photograph's answer; two calls)") : "");
        if (HALF_QUERY)
            printf("| int8, %dx%d %s, one call (patina_identify_half: each pair's first pass shared) | %.1f ms | %.1f ms "
                   "| %.1f ms | %.1f ms | the same answer |\n",
                   var.width, var.height, shape == 0 ? "window" : "whole", 1e3 * t_ext, 1e3 * t_match2,
                   1e3 * (t_all2 - t_match2), 1e3 * (t_ext + t_all2));
        patina_image_release(&var);
    }
    free(q);
    free(hq);
    free(rec);
    patina_image_release(&img);
    patina_refset_free(rs);
    patina_extractor_free(ex);
    bench_free_list(files, nf);
}

/* A comma-separated list of counts ("64,0") into out (cap at most): how many. */
static size_t parse_list(const char *t, size_t *out, size_t cap)
{
    size_t n = 0;
    char *end;
    while (n < cap) {
        out[n++] = (size_t)strtoul(t, &end, 10);
        if (*end != ',') break;
        t = end + 1;
    }
    return n;
}

int main(int argc, char **argv)
{
    size_t nref = 1u << 20, e2e = 0;
    int capacity = 0;
    const char *only = NULL;
    patina_context_opts_t co;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--refs") && i + 1 < argc) nref = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) QUICK = 1;
        else if (!strcmp(argv[i], "--no-peers")) PEERS = 0;
        else if (!strcmp(argv[i], "--capacity")) capacity = 1;
        else if (!strcmp(argv[i], "--e2e") && i + 1 < argc) e2e = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--e2e-views") && i + 1 < argc) E2E_VIEWS = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--half-query") && i + 1 < argc) HALF_QUERY = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--view-candidates") && i + 1 < argc)
            NVC = parse_list(argv[++i], VIEW_CANDS, sizeof VIEW_CANDS / sizeof VIEW_CANDS[0]);
        else if (!strcmp(argv[i], "--first-features") && i + 1 < argc)
            NFF = parse_list(argv[++i], FIRST_FEATS, sizeof FIRST_FEATS / sizeof FIRST_FEATS[0]);
        else if (!strcmp(argv[i], "--half-view-features") && i + 1 < argc)
            NHV = parse_list(argv[++i], HALF_FEATS, sizeof HALF_FEATS / sizeof HALF_FEATS[0]);
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--kernel") && i + 1 < argc && !strcmp(argv[i + 1], "auto"))
            KERNEL = PGPU_IDF_KERNEL_AUTO, i++;
        else if (!strcmp(argv[i], "--kernel") && i + 1 < argc && !strcmp(argv[i + 1], "mma"))
            KERNEL = PGPU_IDF_KERNEL_MMA, i++;
        else if (!strcmp(argv[i], "--kernel") && i + 1 < argc && !strcmp(argv[i + 1], "wgmma"))
            KERNEL = PGPU_IDF_KERNEL_WGMMA, i++;
        else {
            fprintf(stderr, "usage: bench_identify_gpu [--refs N] [--quick] [--no-peers] [--capacity] [--e2e N] "
                            "[--only resident|queries|shapes|streamed|sets] [--kernel auto|mma|wgmma] "
                            "[--e2e-views V] [--view-candidates N,...] [--first-features F,...] "
                            "[--half-view-features H,...] [--half-query F]\n");
            return 2;
        }
    }
    if (patina_gpu__count() == 0) {
        printf("bench_identify_gpu: no usable CUDA GPU\n");
        return 0;
    }
    patina_context_opts_init(&co);
    co.gpu_mem_budget = 0; /* set below from the device's free memory */
    {
        patina_context_t *probe = NULL;
        patina_gpu_t *pg = NULL;
        if (patina_context_new(&probe, NULL) != PATINA_OK || patina__context_gpu_acquire(probe, &pg) != PATINA_OK)
            die("context");
        co.gpu_mem_budget = pg->total_mem - (pg->total_mem / 16); /* all but a sixteenth */
        patina__context_gpu_release(probe);
        patina_context_free(probe);
    }
    if (patina_context_new(&CTX, &co) != PATINA_OK || patina__context_gpu_acquire(CTX, &G) != PATINA_OK)
        die("context");
    PEAK_INT8 = (double)G->sm_count * (double)G->clock_khz * 1e3 * 8192.0; /* dense int8 ops/clk/SM (sm_90) */
    PEAK_FP16 = (double)G->sm_count * (double)G->clock_khz * 1e3 * 4096.0; /* dense fp16 flops/clk/SM */
    {
        double gbps = 0;
        if (patina_gpu__bandwidth(G, 0, (size_t)256 << 20, 5, &gbps) == PATINA_OK) PCIE = gbps * 1e9;
    }
    printf("device: %s, %d SMs at %.0f MHz: tensor-core peak (dense) int8 %.0f TOPS, fp16 %.0f TFLOPS; pinned H2D "
           "%.1f GB/s; budget %.1f GiB\n\n",
           G->name, G->sm_count, G->clock_khz / 1e3, PEAK_INT8 / 1e12, PEAK_FP16 / 1e12, PCIE / 1e9,
           (double)G->budget / 1073741824.0);
    if (e2e == 0) {
        header();
        if (!only || !strcmp(only, "resident")) section_resident(QUICK ? nref / 8 : nref);
        if (!only || !strcmp(only, "queries")) section_queries();
        if (!only || !strcmp(only, "shapes")) section_shapes();
        if (!only || !strcmp(only, "streamed")) section_streamed();
        if (!only || !strcmp(only, "sets")) section_sets(QUICK ? nref / 8 : nref / 2);
        printf("\npairs/s: query x reference image pairs matched per second (reference images/s for one query). "
               "TC peak: 2 n m 128 operations per pair against the dense peak at the clock above. PCIe: host-tier "
               "bytes / time against the pinned H2D rate above. PyTorch: the same shape on %s references.\n",
               "16384-65536");
    }
    if (capacity) section_capacity();
    if (e2e) section_e2e(e2e);
    patina__context_gpu_release(CTX);
    patina_context_free(CTX);
    return 0;
}
