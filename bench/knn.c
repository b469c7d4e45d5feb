/* bench_knn: exact CEDD k-NN (LIRE's Tanimoto) on the GPU and the CPU, with
 * peers measured in the same run (bench/knn_peers.py): PyTorch fp16 (matmul +
 * topk) and int8 (torch._int_mm + topk) on the same GPU, Faiss CPU flat
 * (IndexFlatIP, all cores) when the faiss module imports (tables of up to 2M
 * rows: beyond, one batch takes minutes).
 *
 *   bench_knn [--sizes N,...] [--queries Q,...] [--ks K,...] [--no-peers]
 *             [--cpu-max PAIRS] [--live ROWS] [--family SPEC] [--range R] [--gpu-budget MIB]
 *             [--portable] [--zeros P]
 *
 * Random CEDD descriptors (bins 0..7, 70% zero, like real ones). For each
 * table size, query batch and k: ms per batch and queries/s on the GPU
 * (patina_index_knn on device GPU, table already on the device), on the CPU
 * (device CPU, all threads; only where queries x rows <= --cpu-max, default
 * 3e8), the peers, our speed-up over the fastest GPU peer, the table's read
 * rate (rows x 160 bytes per batch: the u8 row and its sums) against the
 * device-to-device copy rate measured now, and the fraction of the dense
 * int8 tensor-core peak (2 x 144 operations per query x row). Every GPU
 * result is checked against the CPU's where the CPU ran (ids and distance
 * bits), and against a CPU run of 32 of its queries elsewhere; exit 1 on a
 * difference. After each size, live updates (--live ROWS, default 1000, 0:
 * none): the time to put and remove ROWS rows and of the next GPU query,
 * against the first GPU query of an index built afresh. --family SPEC
 * times another family's distance (the float filter + the definition's
 * doubles on the GPU) against that distance's natural PyTorch code (fp16
 * and fp32 columns; knn_peers.py --dist) and Faiss where the distance
 * reduces to L2 or inner product; its last column is the fraction of the
 * answering engine's peak: for the tensor-core filter (l2, std_l2, cosine,
 * hellinger) its MMAs (four int8 products of the padded elements per query
 * x row) against the dense int8 peak, its limbs read once per block of
 * queries; for the float filter the GPU's FP32 lane rate that its inner
 * loop would use at that speed (instructions per element: 1 for the
 * dot-product forms, 2 for l1 and intersection, 6 for chi2), its floats
 * read once per 32 queries. The engine column says which engine answered
 * (patina_search_opts_t.stats), and how many chunks of rows were streamed
 * when --gpu-budget MIB (the context's device budget) is below the index's
 * copy; a CEDD index is then streamed from its pinned host tier, and the
 * column adds the rate of those uploads against the pinned host-to-device
 * copy rate measured now (the PCIe limit). --range R: range search at radius R for
 * each query batch on the GPU, hits per query, checked against the CPU on
 * 32 queries. --portable: the CPU's distances by the portable C path
 * (pdist_force_portable), not the AVX2 kernels (same results, for
 * comparing the two). --zeros P: P% of the elements zero in the random rows
 * of CEDD and the histogram families (default 70; 0 gives dense histograms,
 * where the CPU's chi2 divides at every element and its float filter
 * pays); the peers, which draw their own rows with 70%, are then not run.
 * --ix-kernel auto|mma|wgmma: the tensor-core filter's scan (l2, std_l2,
 * cosine, hellinger) as the library picks it, on mma.sync, or on wgmma
 * wherever it applies (patina_gpu__ix_kernel), to compare them in one
 * session.
 *
 * After the table, CEDD's single queries (a batch of 1, k <= 64: the
 * one-launch kernel, gpu/knn_tc.cuh k_tc_one) get a "1 query" table: the
 * call's wall time (the default: the pilot and the scan by dp4a, the
 * answer written straight to pinned memory), the same call through the
 * multi-launch path (patina_gpu__knn_one(PGPU_KNN_ONE_MULTI)) in the same run, PyTorch's,
 * our speed-up over
 * the fastest PyTorch peer, and the table's read rate (rows x 80 bytes,
 * the packed row, / time) against the HBM peak (2 x memory clock x bus width, from the
 * device's attributes). A second table says where a single query's time
 * goes, from calls made with the measurement on (patina_gpu__knn_prof):
 * the kernel's time (CUDA events) and the host's rest, the kernel's phases
 * (pilot, theta, scan, barrier, final ranking) and the host's steps. (The
 * one-launch kernel with its pilot and scan on the tensor cores, measured
 * against this one until 2026-11-29: docs/lab/search.md.) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "gpu/context.h"
#include "gpu/gpu.h"
#include "patina/patina.h"
#include "search/distance.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static patina_extractor_t *EX; /* the family searched (CEDD by default) */

static int ZEROS = 70; /* --zeros: the share (%) of zero elements in the rows */

/* n random descriptors of EX's shape: CEDD bins 0..7, ZEROS% zero; other
 * families: L1-normalised histograms (f32), counts (u32) with as many
 * zeros, features of mixed scales (f64). */

static void fill(uint8_t *d, size_t n)
{
    const size_t dim = patina_extractor_dim(EX), bytes = patina_extractor_bytes(EX);
    size_t i, k;
    for (i = 0; i < n; i++) {
        uint8_t *row = d + i * bytes;
        double sum = 0;
        for (k = 0; k < dim; k++) {
            const uint32_t z = next_u32() % 100 < (uint32_t)ZEROS, v = 1 + next_u32() % 7;
            switch (patina_extractor_elem(EX)) {
            case PATINA_ELEM_U8: row[k] = z ? 0 : (uint8_t)v; break;
            case PATINA_ELEM_U16: ((uint16_t *)row)[k] = z ? 0 : (uint16_t)v; break;
            case PATINA_ELEM_U32: ((uint32_t *)row)[k] = z ? 0 : v; break;
            case PATINA_ELEM_F32: ((float *)row)[k] = z ? 0.f : (float)v; sum += z ? 0 : v; break;
            case PATINA_ELEM_F64: ((double *)row)[k] = (double)(next_u32() % 10000) * (k % 3 ? 1e-4 : 10.0); break;
            }
        }
        if (patina_extractor_elem(EX) == PATINA_ELEM_F32 && sum > 0)
            for (k = 0; k < dim; k++) ((float *)row)[k] = (float)(((float *)row)[k] / sum);
    }
}

static int parse_list(const char *s, size_t *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *end;
        out[n++] = strtoull(s, &end, 10);
        s = *end == ',' ? end + 1 : end;
        if (end == s && *s) break;
    }
    return n;
}

/* Median ms of reps runs of fn. */
typedef patina_status (*knn_fn)(const patina_index_t *, const uint8_t *, size_t, size_t, patina_hit_t *, size_t *);
static patina_context_t *CTX; /* all CPU threads and GPU 0 */
static patina_search_stats_t STATS; /* of the last call */
static patina_status on(patina_device d, const patina_index_t *ix, const uint8_t *q, size_t nq, size_t k,
                        patina_hit_t *h, size_t *c)
{
    patina_search_opts_t o;
    patina_search_opts_init(&o);
    o.device = d;
    o.stats = &STATS;
    return patina_index_knn(CTX, ix, q, nq, k, &o, h, c);
}
static patina_status cpu_knn(const patina_index_t *ix, const uint8_t *q, size_t nq, size_t k, patina_hit_t *h, size_t *c)
{
    return on(PATINA_DEVICE_CPU, ix, q, nq, k, h, c);
}
static patina_status gpu_knn(const patina_index_t *ix, const uint8_t *q, size_t nq, size_t k, patina_hit_t *h, size_t *c)
{
    return on(PATINA_DEVICE_GPU, ix, q, nq, k, h, c);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double time_ms(knn_fn f, const patina_index_t *ix, const uint8_t *q, size_t nq, size_t k,
                      patina_hit_t *h, size_t *c, int reps)
{
    double t[16];
    int r;
    if (reps > 16) reps = 16;
    for (r = 0; r < reps; r++) {
        double t0 = patina_now();
        if (f(ix, q, nq, k, h, c) != PATINA_OK) {
            fprintf(stderr, "bench_knn: %s\n", patina_last_error());
            exit(2);
        }
        t[r] = (patina_now() - t0) * 1e3;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_d);
    return t[reps / 2];
}

/* The peers' times for one table size: peer (0 torch fp16, 1 torch int8,
 * 2 faiss cpu, 3 torch fp32) x case; -1 where none. */
#define MAXC 64
#define NPEER 4
static double PEER[NPEER][MAXC];

static void run_peers(size_t n, const size_t *qs, int nqs, const size_t *ks, int nks)
{
    const char *py = getenv("PATINA_PYTHON");
    char cmd[2048], line[512], name[32];
    size_t len, nq, k;
    double ms;
    FILE *p;
    int i, j;
    for (i = 0; i < NPEER; i++)
        for (j = 0; j < MAXC; j++) PEER[i][j] = -1;
    len = (size_t)snprintf(cmd, sizeof cmd, "%s bench/knn_peers.py --n %zu ", py && *py ? py : "python3", n);
    if (strcmp(patina_extractor_family(EX), "cedd") != 0) {
        const patina_elem e = patina_extractor_elem(EX);
        len += (size_t)snprintf(cmd + len, sizeof cmd - len, "--dist %s --dim %zu --kind %s ",
                                patina_extractor_distance_name(EX), patina_extractor_dim(EX),
                                e == PATINA_ELEM_F64 ? "f64" : e == PATINA_ELEM_F32 ? "f32" : "u32");
    }
    len += (size_t)snprintf(cmd + len, sizeof cmd - len, "--cases ");
    for (i = 0; i < nqs; i++)
        for (j = 0; j < nks; j++)
            len += (size_t)snprintf(cmd + len, sizeof cmd - len, "%s%zu:%zu", i || j ? "," : "", qs[i], ks[j]);
    /* Faiss's CPU scan of 10M rows takes minutes per batch: only up to 2M */
    snprintf(cmd + len, sizeof cmd - len, "%s 2>&1", n > 2000000 ? " --no-faiss" : "");
    p = popen(cmd, "r");
    if (!p) return;
    while (fgets(line, sizeof line, p)) {
        if (sscanf(line, "%31s %zu %zu %lf", name, &nq, &k, &ms) == 4) {
            int peer = !strcmp(name, "torch_fp16")   ? 0
                       : !strcmp(name, "torch_int8") ? 1
                       : !strcmp(name, "faiss_cpu")  ? 2
                       : !strcmp(name, "torch_fp32") ? 3
                                                     : -1;
            for (i = 0; peer >= 0 && i < nqs; i++)
                for (j = 0; j < nks; j++)
                    if (qs[i] == nq && ks[j] == k && i * nks + j < MAXC) PEER[peer][i * nks + j] = ms;
        } else {
            fprintf(stderr, "  peer: %s", line);
        }
    }
    pclose(p);
}

/* The single-query rows for the "1 query" table. */
typedef struct one_row {
    size_t n, k;
    double one, multi, fp16, int8; /* ms; -1: none */
    int measured;                   /* prof and wall set */
    double wall;                    /* us: median wall time of the measured calls */
    pgpu_knn_prof_t prof;           /* each field the median of the measured calls' */
} one_row_t;
#define MAXONE 64
static one_row_t ONE[MAXONE];
static int NONE;

/* The batch rows for the "batches, where the time goes" table
 * (patina_gpu__knn_prof's batch fields, medians of BATCH_REPS calls; the
 * passes are CEDD's multi-launch kernels', 0 for the other engines). */
typedef struct batch_row {
    size_t n, nq, k;
    double wall, begin, pass, retry, retried, resident; /* us; retried: queries */
} batch_row_t;
#define BATCH_REPS 5
static batch_row_t BROWS[MAXONE];
static int NBROWS;

static void one_cell(double ms)
{
    if (ms > 0) printf(" %.1f |", ms * 1e3);
    else printf(" - |");
}

/* The median of n values (sorted in place). */
static double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[n / 2];
}

static void measure_batch(const patina_index_t *ix, const uint8_t *q, size_t n, size_t nq, size_t k, patina_hit_t *h,
                          size_t *c)
{
    double v[6][BATCH_REPS];
    int r, m = 0;
    batch_row_t *b;
    if (NBROWS >= MAXONE) return;
    patina_gpu__knn_prof(1);
    for (r = 0; r < BATCH_REPS; r++) {
        pgpu_knn_prof_t p;
        const double t0 = patina_now();
        if (gpu_knn(ix, q, nq, k, h, c) != PATINA_OK) break;
        const double t1 = patina_now();
        patina_gpu__knn_prof_last(&p);
        if (!p.batch) break;
        v[0][m] = (t1 - t0) * 1e6;
        v[1][m] = p.pass_us;
        v[2][m] = p.retry_us;
        v[3][m] = (double)p.retried;
        v[4][m] = p.begin_us;
        v[5][m++] = p.resident_us;
    }
    patina_gpu__knn_prof(0);
    if (!m) return;
    b = &BROWS[NBROWS++];
    b->n = n, b->nq = nq, b->k = k;
    b->wall = median_of(v[0], m);
    b->pass = median_of(v[1], m);
    b->retry = median_of(v[2], m);
    b->retried = median_of(v[3], m);
    b->begin = median_of(v[4], m);
    b->resident = median_of(v[5], m);
}

/* o->prof and o->wall: reps calls of the single query q with the
 * measurement on (patina_gpu__knn_prof), each figure's median. */
#define PROF_REPS 15
#define PROF_FIELDS 18
static void measure_one(one_row_t *o, const patina_index_t *ix, const uint8_t *q, size_t k, patina_hit_t *h,
                        size_t *c)
{
    pgpu_knn_prof_t *pr = &o->prof;
    double v[PROF_FIELDS][PROF_REPS];
    double cand[PROF_REPS];
    int r, m = 0;
    patina_gpu__knn_prof(1);
    for (r = 0; r < PROF_REPS; r++) {
        pgpu_knn_prof_t p;
        const double t0 = patina_now();
        if (gpu_knn(ix, q, 1, k, h, c) != PATINA_OK) break;
        const double t1 = patina_now();
        patina_gpu__knn_prof_last(&p);
        if (!p.valid) break; /* not the one-launch path */
        /* the call's time less the measurement's own readings */
        const double wall = (t1 - t0) * 1e6 - p.meas_us;
        const double f[PROF_FIELDS] = {wall, p.kernel_us, p.spread_us, p.pilot_us, p.theta_us, p.scan_us, p.sync_us,
                                       p.final_us, p.begin_us, p.prep_us, p.launch_us, p.wait_us, p.out_us,
                                       p.f_prep_us, p.f_gather_us, p.f_kth_us, p.f_ref_us, p.f_sort_us};
        for (int i = 0; i < PROF_FIELDS; i++) v[i][m] = f[i];
        cand[m++] = (double)p.cand;
    }
    patina_gpu__knn_prof(0);
    o->measured = m > 0;
    if (!m) return;
    o->wall = median_of(v[0], m);
    pr->kernel_us = median_of(v[1], m);
    pr->spread_us = median_of(v[2], m);
    pr->pilot_us = median_of(v[3], m);
    pr->theta_us = median_of(v[4], m);
    pr->scan_us = median_of(v[5], m);
    pr->sync_us = median_of(v[6], m);
    pr->final_us = median_of(v[7], m);
    pr->begin_us = median_of(v[8], m);
    pr->prep_us = median_of(v[9], m);
    pr->launch_us = median_of(v[10], m);
    pr->wait_us = median_of(v[11], m);
    pr->out_us = median_of(v[12], m);
    pr->f_prep_us = median_of(v[13], m);
    pr->f_gather_us = median_of(v[14], m);
    pr->f_kth_us = median_of(v[15], m);
    pr->f_ref_us = median_of(v[16], m);
    pr->f_sort_us = median_of(v[17], m);
    pr->cand = (size_t)median_of(cand, m);
}

/* The bytes a row that the one-launch kernel's scan reads: CEDD's packed
 * row (src/gpu/knn_layout.cuh TC_PK_BYTES: 144 elements in nibbles, T1 and
 * S1 / T1); the batches read the 144-byte row and its 16 bytes of sums. */
#define ONE_ROW_BYTES 80.0

/* The "1 query" table (hbm: the peak in GB/s, 0 unknown). */
static void print_one(double hbm)
{
    if (NONE == 0) return;
    printf("\n1 query (CEDD, one launch where k <= 64): wall time of one call (median), us; table read = rows x 80 "
           "bytes (the packed row) / time; HBM peak %.0f GB/s\n\n",
           hbm);
    printf("| rows | k | GPU us (one launch) | GPU us (multi-launch) | PyTorch fp16 us | "
           "PyTorch int8 us | GPU vs best PyTorch | table read GB/s | of HBM peak |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < NONE; i++) {
        const one_row_t *o = &ONE[i];
        const double best = o->fp16 > 0 && (o->int8 <= 0 || o->fp16 < o->int8) ? o->fp16 : o->int8;
        const double gbps = (double)o->n * ONE_ROW_BYTES / (o->one * 1e-3) / 1e9;
        printf("| %zu | %zu |", o->n, o->k);
        one_cell(o->one);
        one_cell(o->multi);
        one_cell(o->fp16);
        one_cell(o->int8);
        if (best > 0) printf(" %.1fx |", best / o->one);
        else printf(" - |");
        printf(" %.0f |", gbps);
        if (hbm > 0) printf(" %.1f%% |\n", 100.0 * gbps / hbm);
        else printf(" - |\n");
    }
    printf("\n1 query, where the time goes (one launch, measured: patina_gpu__knn_prof; medians of %d calls, us). "
           "wall: the call, less the measurement's own readings; kernel: CUDA events around the launch; "
           "host: wall - kernel. The kernel's phases "
           "(%%globaltimer, block 0's view): spread (last block's start after block 0's), pilot (+ first grid "
           "barrier), theta, scan (to the last block's end; its read rate rows x 80 bytes / scan), sync (to the "
           "final block past the second barrier), final (the final block's ranking of cand candidates). The host's "
           "steps: begin "
           "(device, state, copy current), prep (to the launch), launch (the call), wait (download + sync: the "
           "kernel and the copy), out (hits); api: wall - the steps (query preparation, GPU turn, allocations)\n\n",
           PROF_REPS);
    printf("| rows | k | wall | kernel | host | spread | pilot | theta | scan | scan GB/s | sync | final | cand | "
           "begin | prep | launch | wait | out | api |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < NONE; i++) {
        const one_row_t *o = &ONE[i];
        const pgpu_knn_prof_t *p = &o->prof;
        if (!o->measured) continue;
        printf("| %zu | %zu | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f | %.1f | %.1f | %zu | %.1f | %.1f | "
               "%.1f | %.1f | %.1f | %.1f |\n",
               o->n, o->k, o->wall, p->kernel_us, o->wall - p->kernel_us, p->spread_us, p->pilot_us, p->theta_us,
               p->scan_us, p->scan_us > 0 ? (double)o->n * ONE_ROW_BYTES / (p->scan_us * 1e-6) / 1e9 : 0.0, p->sync_us,
               p->final_us, p->cand, p->begin_us, p->prep_us, p->launch_us, p->wait_us, p->out_us,
               o->wall - p->begin_us - p->prep_us - p->launch_us - p->wait_us - p->out_us);
    }
    printf("\n1 query, the final ranking's steps (the final block; us, medians): prep (the query as the CPU "
           "prepares it, where the final block did not during the pilot), gather (live candidates and their t), kth "
           "(kappa, the take-th largest t, and the survivors), ref (the survivors' reference distances), sort "
           "(sorted, written)\n\n");
    printf("| rows | k | final | cand | prep | gather | kth | ref | sort |\n|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < NONE; i++) {
        const one_row_t *o = &ONE[i];
        const pgpu_knn_prof_t *p = &o->prof;
        if (!o->measured) continue;
        printf("| %zu | %zu | %.1f | %zu | %.1f | %.1f | %.1f | %.1f | %.1f |\n", o->n, o->k, p->final_us, p->cand,
               p->f_prep_us, p->f_gather_us, p->f_kth_us, p->f_ref_us, p->f_sort_us);
    }
}

static void cell(double ms)
{
    if (ms > 0) printf(" %.3f |", ms);
    else printf(" - |");
}

/* GPU hits equal the CPU's for nq queries (CPU run here when ref is NULL). */
static int same(const patina_index_t *ix, const uint8_t *q, size_t nq, size_t k, const patina_hit_t *g,
                const patina_hit_t *ref)
{
    patina_hit_t *h = NULL;
    size_t *c = NULL, r;
    int bad = 0;
    if (!ref) {
        h = malloc(nq * k * sizeof *h);
        c = malloc(nq * sizeof *c);
        if (cpu_knn(ix, q, nq, k, h, c) != PATINA_OK) exit(2);
        ref = h;
    }
    for (r = 0; r < nq * k; r++)
        if (g[r].id != ref[r].id || memcmp(&g[r].distance, &ref[r].distance, sizeof(double))) {
            bad = 1;
            break;
        }
    free(h);
    free(c);
    return bad;
}

int main(int argc, char **argv)
{
    size_t sizes[16] = {1000000, 10000000}, queries[16] = {1, 256, 4096}, ks[16] = {1, 10, 100};
    int nsizes = 2, nqueries = 3, nks = 3, peers = 1, i, j, l, bad = 0;
    double d2d = 0, h2d = 0, peak = 0, lanes = 0, cpu_max = 3e8, hbm = 0;
    size_t live_rows = 1000, bytes;
    double range_r = 0;
    size_t budget = 0;
    const char *family = "cedd";
    int cedd;
    patina_extractor_t *ex;
    patina_gpu_t *g = NULL;
    char gname[512] = "no GPU";
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sizes") && i + 1 < argc) nsizes = parse_list(argv[++i], sizes, 16);
        else if (!strcmp(argv[i], "--queries") && i + 1 < argc) nqueries = parse_list(argv[++i], queries, 16);
        else if (!strcmp(argv[i], "--ks") && i + 1 < argc) nks = parse_list(argv[++i], ks, 16);
        else if (!strcmp(argv[i], "--cpu-max") && i + 1 < argc) cpu_max = atof(argv[++i]);
        else if (!strcmp(argv[i], "--no-peers")) peers = 0;
        else if (!strcmp(argv[i], "--live") && i + 1 < argc) live_rows = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--family") && i + 1 < argc) family = argv[++i];
        else if (!strcmp(argv[i], "--range") && i + 1 < argc) range_r = atof(argv[++i]);
        else if (!strcmp(argv[i], "--gpu-budget") && i + 1 < argc) budget = strtoull(argv[++i], NULL, 10) << 20;
        else if (!strcmp(argv[i], "--portable")) pdist_force_portable(1);
        else if (!strcmp(argv[i], "--zeros") && i + 1 < argc) ZEROS = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ix-kernel") && i + 1 < argc) {
            const char *v = argv[++i];
            if (!strcmp(v, "auto")) patina_gpu__ix_kernel(PGPU_IX_KERNEL_AUTO);
            else if (!strcmp(v, "mma")) patina_gpu__ix_kernel(PGPU_IX_KERNEL_MMA);
            else if (!strcmp(v, "wgmma")) patina_gpu__ix_kernel(PGPU_IX_KERNEL_WGMMA);
            else {
                fprintf(stderr, "bench_knn: --ix-kernel auto, mma or wgmma\n");
                return 2;
            }
        } else {
            fprintf(stderr, "usage: bench_knn [--sizes N,...] [--queries Q,...] [--ks K,...] [--no-peers] "
                            "[--cpu-max PAIRS] [--live ROWS] [--family SPEC] [--range R] [--gpu-budget MIB] "
                            "[--portable] [--zeros P] [--ix-kernel auto|mma|wgmma]\n");
            return 2;
        }
    }
    if (ZEROS < 0 || ZEROS > 100) return 2;
    if (ZEROS != 70 && peers) { /* knn_peers.py draws its own rows, 70% zero */
        printf("--zeros %d: the peers draw 70%% zeros; not run\n", ZEROS);
        peers = 0;
    }
    if (nqueries * nks > MAXC) return 2;
    if (patina_extractor_new(&ex, family) != PATINA_OK) {
        fprintf(stderr, "bench_knn: %s\n", patina_last_error());
        return 2;
    }
    EX = ex;
    bytes = patina_extractor_bytes(ex);
    cedd = !strcmp(patina_extractor_family(ex), "cedd");
    if (!cedd) live_rows = 0; /* the live rows are CEDD's */
    {
        patina_context_opts_t co;
        patina_context_opts_init(&co);
        co.gpu_mem_budget = budget; /* 0: the default */
        if (patina_context_new(&CTX, &co) != PATINA_OK) return 2;
    }
    if (patina_gpu_open(&g, 0, 0) == PATINA_OK) {
        patina_gpu__bandwidth(g, 1, (size_t)1 << 30, 5, &d2d);
        patina_gpu__bandwidth(g, 0, (size_t)1 << 30, 5, &h2d);
        peak = (double)g->sm_count * (double)g->clock_khz * 1e3 * 8192.0; /* dense int8 ops/clk/SM (sm_90) */
        lanes = (double)g->sm_count * (double)g->clock_khz * 1e3 * 128.0; /* FP32 lanes x clock */
        hbm = 2.0 * (double)g->mem_clock_khz * 1e3 * (double)g->mem_bus_bits / 8.0 / 1e9; /* double data rate */
        snprintf(gname, sizeof gname, "%.200s, %d SMs at %.0f MHz", g->name, g->sm_count, g->clock_khz / 1e3);
        patina_gpu_close(g);
    } else {
        printf("no GPU (%s): CPU column only\n", patina_last_error());
    }
    printf("bench_knn: %s (%s), exact; %s: device-to-device copy %.0f GB/s, pinned host-to-device %.1f GB/s, "
           "dense int8 tensor-core peak %.0f TOPS; %d CPU threads, CPU distances: %s\n\n",
           patina_extractor_spec(ex), patina_extractor_distance_name(ex), gname, d2d, h2d, peak / 1e12,
           patina_cpu_count(),
           pdist_simd() ? "AVX2" : "portable C");
    printf("| rows | queries | k | GPU ms | GPU queries/s | engine | CPU ms | PyTorch fp16 ms | PyTorch int8 ms | "
           "PyTorch fp32 ms | Faiss CPU flat ms | GPU vs best GPU peer | %s |\n",
           cedd ? "table read GB/s (of D2D) | of int8 TC peak"
                : "rows read GB/s (of D2D) | of the engine's peak (int8 TC: its MMAs; FP32: the lanes)");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (i = 0; i < nsizes; i++) {
        size_t n = sizes[i], r;
        uint8_t *rows = malloc(n * bytes);
        uint64_t *ids = malloc(n * sizeof *ids);
        patina_index_t *ix;
        for (r = 0; r < n; r++) ids[r] = r + 1;
        fill(rows, n);
        if (patina_index_new(&ix, ex, ids, rows, n) != PATINA_OK) return 2;
        if (peers && d2d > 0) run_peers(n, queries, nqueries, ks, nks);
        for (j = 0; j < nqueries; j++) {
            size_t nq = queries[j];
            uint8_t *q = malloc(nq * bytes);
            fill(q, nq);
            for (l = 0; l < nks; l++) {
                size_t k = ks[l];
                patina_hit_t *h1 = malloc(nq * k * sizeof *h1), *h2 = malloc(nq * k * sizeof *h2);
                size_t *c1 = malloc(nq * sizeof *c1), *c2 = malloc(nq * sizeof *c2);
                double tc = -1, tg = -1, best = -1;
                const double *pc = peers ? (const double[NPEER]){PEER[0][j * nks + l], PEER[1][j * nks + l],
                                                                  PEER[2][j * nks + l], PEER[3][j * nks + l]}
                                         : (const double[NPEER]){-1, -1, -1, -1};
                patina_search_stats_t gs;
                memset(&gs, 0, sizeof gs);
                if ((double)nq * (double)n <= cpu_max || d2d <= 0)
                    tc = time_ms(cpu_knn, ix, q, nq, k, h1, c1, (double)nq * (double)n > 2e7 ? 3 : 7);
                if (d2d > 0) {
                    gpu_knn(ix, q, nq, k, h2, c2); /* upload + warm-up */
                    tg = time_ms(gpu_knn, ix, q, nq, k, h2, c2, (double)nq * (double)n > 1e10 ? 5 : 11);
                    gs = STATS;
                    bad += tc > 0 ? same(ix, q, nq, k, h2, h1) : same(ix, q, nq < 32 ? nq : 32, k, h2, NULL);
                    if (nq > 1) measure_batch(ix, q, n, nq, k, h2, c2);
                    if (nq == 1 && cedd && NONE < MAXONE) { /* the same query through the multi-launch path */
                        one_row_t *o = &ONE[NONE++];
                        o->n = n;
                        o->k = k;
                        o->one = tg;
                        o->fp16 = pc[0];
                        o->int8 = pc[1];
                        measure_one(o, ix, q, k, h2, c2);
                        bad += same(ix, q, nq, k, h2, tc > 0 ? h1 : NULL);
                        patina_gpu__knn_one(PGPU_KNN_ONE_MULTI);
                        gpu_knn(ix, q, nq, k, h2, c2);
                        o->multi = time_ms(gpu_knn, ix, q, nq, k, h2, c2, 11);
                        bad += same(ix, q, nq, k, h2, tc > 0 ? h1 : NULL);
                        patina_gpu__knn_one(PGPU_KNN_ONE_DEFAULT);
                    }
                }
                printf("| %zu | %zu | %zu |", n, nq, k);
                if (tg > 0) {
                    printf(" %.3f | %.0f | %s", tg, (double)nq / (tg * 1e-3),
                           gs.gpu_tensor ? "tensor" : gs.gpu_filter ? "filter" : gs.gpu_exact ? "exact" : "cpu");
                    if (gs.gpu_exact && (gs.gpu_tensor || gs.gpu_filter)) printf("+%zu exact", gs.gpu_exact);
                    if (gs.cpu && gs.cpu < nq) printf("+%zu cpu", gs.cpu);
                    if (gs.chunks) printf(", %zu chunks", gs.chunks);
                    if (gs.host_bytes && h2d > 0) /* streamed from the pinned host tier */
                        printf(" from pinned memory: %.1f GB/s = %.0f%% of pinned H2D", gs.host_bytes / (tg * 1e-3) / 1e9,
                               100.0 * gs.host_bytes / (tg * 1e-3) / 1e9 / h2d);
                    printf(" |");
                } else {
                    printf(" - | - | - |");
                }
                cell(tc);
                cell(pc[0]);
                cell(pc[1]);
                cell(pc[3]);
                cell(pc[2]);
                for (int pi = 0; pi < NPEER; pi++)
                    if (pi != 2 && pc[pi] > 0 && (best < 0 || pc[pi] < best)) best = pc[pi];
                if (tg > 0 && best > 0) printf(" %.1fx |", best / tg);
                else printf(" - |");
                if (tg > 0 && cedd) {
                    const double gbps = (double)n * 160.0 / (tg * 1e-3) / 1e9;
                    printf(" %.0f (%.0f%%) | %.1f%% |\n", gbps, 100.0 * gbps / d2d,
                           100.0 * 2.0 * 144.0 * (double)nq * (double)n / (tg * 1e-3) / peak);
                } else if (tg > 0 && gs.gpu_tensor && !gs.gpu_filter) {
                    /* the tensor-core filter: its limbs (2 x dp bytes a row, dp the elements padded to
                     * 32, 64, 128 or 256) read once per block of 128 queries (16 under 33 queries, 64 under 65);
                     * four int8 MMAs of dp elements per (query, row) against the dense int8 peak */
                    const size_t dim = patina_extractor_dim(ex);
                    const double dp = dim <= 32 ? 32 : dim <= 64 ? 64 : dim <= 128 ? 128 : 256;
                    const size_t qb = nq > 64 ? 128 : nq > 32 ? 64 : 32;
                    const double gbps = (double)n * 2.0 * dp * (double)((nq + qb - 1) / qb) / (tg * 1e-3) / 1e9;
                    printf(" %.0f (%.0f%%) | %.1f%% int8 TC |\n", gbps, 100.0 * gbps / d2d,
                           100.0 * 4.0 * 2.0 * dp * (double)n * (double)nq / (tg * 1e-3) / peak);
                } else if (tg > 0) { /* the float filter: its rows once per 32 queries; its inner loop */
                    const double gbps = (double)n * 4.0 * (double)patina_extractor_dim(ex) *
                                        (double)((nq + 31) / 32) / (tg * 1e-3) / 1e9;
                    const char *dn = patina_extractor_distance_name(ex);
                    const double ipe = !strcmp(dn, "chi2") ? 6.0 : !strcmp(dn, "l1") || !strcmp(dn, "intersection") ? 2.0 : 1.0;
                    printf(" %.0f (%.0f%%) | %.1f%% FP32 |\n", gbps, 100.0 * gbps / d2d,
                           100.0 * ipe * (double)n * (double)nq * (double)patina_extractor_dim(ex) / (tg * 1e-3) /
                               lanes);
                } else {
                    printf(" - | - |\n");
                }
                fflush(stdout);
                free(h1);
                free(h2);
                free(c1);
                free(c2);
            }
            free(q);
        }
        if (d2d > 0 && range_r > 0) {
            /* range search at radius range_r: GPU ms and hits per query,
             * checked against the CPU on 32 queries */
            for (j = 0; j < nqueries; j++) {
                const size_t nq = queries[j], nc = nq < 32 ? nq : 32;
                uint8_t *q = malloc(nq * bytes);
                patina_hit_t **rg = calloc(nq, sizeof *rg), **rc = calloc(nc, sizeof *rc);
                size_t *cg = calloc(nq, sizeof *cg), *cc = calloc(nc, sizeof *cc), tot = 0;
                patina_search_opts_t o;
                double t0, tg, best = 1e30;
                int rep;
                fill(q, nq);
                patina_search_opts_init(&o);
                o.device = PATINA_DEVICE_GPU;
                for (rep = 0; rep < 5; rep++) {
                    for (r = 0; r < nq; r++) free(rg[r]);
                    t0 = patina_now();
                    if (patina_index_range(CTX, ix, q, nq, range_r, &o, rg, cg) != PATINA_OK) return 2;
                    tg = patina_now() - t0;
                    if (tg < best) best = tg;
                }
                o.device = PATINA_DEVICE_CPU;
                if (patina_index_range(CTX, ix, q, nc, range_r, &o, rc, cc) != PATINA_OK) return 2;
                for (r = 0; r < nc; r++) {
                    if (cc[r] != cg[r]) bad++;
                    else
                        for (size_t h = 0; h < cc[r]; h++)
                            if (rc[r][h].id != rg[r][h].id || memcmp(&rc[r][h].distance, &rg[r][h].distance, 8)) {
                                bad++;
                                break;
                            }
                    free(rc[r]);
                }
                for (r = 0; r < nq; r++) {
                    tot += cg[r];
                    free(rg[r]);
                }
                printf("range %g, %zu rows, %zu queries: GPU %.3f ms (best of 5), %.0f queries/s, %.1f hits per query\n",
                       range_r, n, nq, best * 1e3, (double)nq / best, (double)tot / (double)nq);
                free(q);
                free(rg);
                free(rc);
                free(cg);
                free(cc);
            }
        }
        if (d2d > 0 && live_rows) {
            /* live updates: put live_rows rows (a tenth replacing), remove as
             * many, then one GPU query (the copy follows), against the first
             * GPU query of an index built afresh (the whole table uploaded) */
            uint8_t *add = malloc(live_rows * PATINA_CEDD_DIM), *q1 = malloc(PATINA_CEDD_DIM);
            uint64_t *aid = malloc(live_rows * sizeof *aid), *rid = malloc(live_rows * sizeof *rid);
            patina_hit_t h1[10], h2[10];
            size_t c1[1], c2[1], removed;
            patina_index_t *fresh;
            double t0, t_put, t_rm, t_q, t_fresh;
            fill(add, live_rows);
            fill(q1, 1);
            for (r = 0; r < live_rows; r++) {
                aid[r] = r % 10 == 0 ? r * 7 + 1 : n + 1 + r;
                rid[r] = 1 + (r * 7919 + 13) % n;
            }
            gpu_knn(ix, q1, 1, 10, h1, c1); /* the copy is current */
            { /* the first change builds the index's id map (once, O(rows)) */
                uint64_t one = n + live_rows + 1;
                size_t rm1;
                t0 = patina_now();
                if (patina_index_put(ix, &one, add, 1) != PATINA_OK || patina_index_remove(ix, &one, 1, &rm1) != PATINA_OK)
                    return 2;
                printf("\nfirst change of a %zu-row index (builds the id map, grows the arrays): %.1f ms", n,
                       (patina_now() - t0) * 1e3);
                gpu_knn(ix, q1, 1, 10, h1, c1);
            }
            t0 = patina_now();
            if (patina_index_put(ix, aid, add, live_rows) != PATINA_OK) return 2;
            t_put = patina_now() - t0;
            t0 = patina_now();
            if (patina_index_remove(ix, rid, live_rows, &removed) != PATINA_OK) return 2;
            t_rm = patina_now() - t0;
            t0 = patina_now();
            gpu_knn(ix, q1, 1, 10, h1, c1);
            t_q = patina_now() - t0;
            bad += same(ix, q1, 1, 10, h1, NULL);
            if (patina_index_new(&fresh, ex, ids, rows, n) != PATINA_OK) return 2;
            t0 = patina_now();
            gpu_knn(fresh, q1, 1, 10, h2, c2);
            t_fresh = patina_now() - t0;
            printf("\nlive updates, %zu rows: put %zu rows %.2f ms, remove %zu rows %.2f ms, then one GPU query "
                   "(copy follows) %.3f ms; first GPU query of a fresh index (whole table uploaded) %.1f ms\n\n",
                   n, live_rows, t_put * 1e3, removed, t_rm * 1e3, t_q * 1e3, t_fresh * 1e3);
            patina_index_free(fresh);
            free(add);
            free(q1);
            free(aid);
            free(rid);
        }
        patina_index_free(ix);
        free(rows);
        free(ids);
    }
    print_one(hbm);
    if (NBROWS) {
        printf("\nBatches, where the time goes (measured: patina_gpu__knn_prof; medians of %d calls, ms): for CEDD's "
               "multi-launch kernels the first pass over every query, and the queries whose candidates overflowed "
               "the list, run again with the whole table as their pilot (0 for the other engines); the resident "
               "search whole, and the library's host side outside it\n\n",
               BATCH_REPS);
        printf("| rows | queries | k | wall | the copy found (begin) | first pass | queries again | second pass | "
               "resident search | outside it (the library's host side) |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for (int b = 0; b < NBROWS; b++)
            printf("| %zu | %zu | %zu | %.2f | %.2f | %.2f | %.0f | %.2f | %.2f | %.2f |\n", BROWS[b].n, BROWS[b].nq,
                   BROWS[b].k, BROWS[b].wall * 1e-3, BROWS[b].begin * 1e-3, BROWS[b].pass * 1e-3, BROWS[b].retried,
                   BROWS[b].retry * 1e-3, BROWS[b].resident * 1e-3, (BROWS[b].wall - BROWS[b].resident) * 1e-3);
    }
    patina_extractor_free(ex);
    patina_context_free(CTX);
    if (bad) printf("GPU results differ from the CPU's in %d runs\n", bad);
    else printf("GPU results identical to the CPU's (ids and distance bits) in every run checked\n");
    return bad ? 1 : 0;
}
