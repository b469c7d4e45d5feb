/* bench_knn: exact CEDD k-NN (LIRE's Tanimoto) on the CPU and the GPU, with a
 * PyTorch peer measured in the same run.
 *
 *   bench_knn [--sizes N,N,...] [--queries Q,Q,...] [-k K] [--no-peers]
 *
 * Random CEDD descriptors (bins 0..7, 70% zero, like real ones). For each
 * index size and query batch: ms per batch on the CPU (patina_index_knn on device CPU, all
 * threads) and on the GPU (patina_index_knn on device GPU, table already on the
 * device), the GPU's effective table bandwidth (bytes of the per-row table
 * read per query: 144 + 8 + 8 + 2) against the device-to-device copy
 * bandwidth measured now, and bench/knn_peers.py: PyTorch on the same GPU,
 * Tanimoto as a float64 matrix product of the normalised descriptors plus
 * torch.topk (not LIRE's exact doubles: a speed peer). Every GPU result is
 * checked against the CPU's (ids and distance bits); exit 1 on a difference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "gpu/gpu.h"
#include "patina/patina.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static void fill(uint8_t *d, size_t n)
{
    size_t i;
    for (i = 0; i < n * PATINA_CEDD_DIM; i++) d[i] = next_u32() % 100 < 70 ? 0 : (uint8_t)(1 + next_u32() % 7);
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
static patina_status on(patina_device d, const patina_index_t *ix, const uint8_t *q, size_t nq, size_t k,
                        patina_hit_t *h, size_t *c)
{
    patina_search_opts_t o;
    patina_search_opts_init(&o);
    o.device = d;
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

static double peer_ms(size_t n, size_t nq, size_t k)
{
    const char *py = getenv("PATINA_PYTHON");
    char cmd[512], line[256];
    double ms = -1;
    FILE *p;
    snprintf(cmd, sizeof cmd, "%s bench/knn_peers.py --n %zu --queries %zu -k %zu 2>&1",
             py && *py ? py : "python3", n, nq, k);
    p = popen(cmd, "r");
    if (!p) return -1;
    while (fgets(line, sizeof line, p))
        if (sscanf(line, "torch %lf", &ms) != 1 && ms < 0) fprintf(stderr, "  peer: %s", line);
    pclose(p);
    return ms;
}

int main(int argc, char **argv)
{
    size_t sizes[16] = {100000, 1000000}, queries[16] = {1, 16, 256}, k = 10;
    int nsizes = 2, nqueries = 3, peers = 1, i, j, bad = 0;
    double d2d = 0;
    patina_extractor_t *ex;
    patina_gpu_t *g = NULL;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sizes") && i + 1 < argc) nsizes = parse_list(argv[++i], sizes, 16);
        else if (!strcmp(argv[i], "--queries") && i + 1 < argc) nqueries = parse_list(argv[++i], queries, 16);
        else if (!strcmp(argv[i], "-k") && i + 1 < argc) k = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--no-peers")) peers = 0;
        else {
            fprintf(stderr, "usage: bench_knn [--sizes N,...] [--queries Q,...] [-k K] [--no-peers]\n");
            return 2;
        }
    }
    if (patina_extractor_new(&ex, "cedd") != PATINA_OK) return 2;
    if (patina_context_new(&CTX, NULL) != PATINA_OK) return 2;
    if (patina_gpu_open(&g, 0, 0) == PATINA_OK) {
        patina_gpu__bandwidth(g, 1, (size_t)1 << 30, 5, &d2d);
        patina_gpu_close(g);
    } else {
        printf("no GPU (%s): CPU column only\n", patina_last_error());
    }
    printf("bench_knn: CEDD Tanimoto, k = %zu, %d CPU threads; device-to-device copy %.0f GB/s\n", k,
           patina_cpu_count(), d2d);
    printf("| rows | queries | CPU ms | GPU ms | GPU vs CPU | table GB/s (GPU) | of D2D | PyTorch ms | PyTorch / GPU |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (i = 0; i < nsizes; i++) {
        size_t n = sizes[i], r;
        uint8_t *rows = malloc(n * PATINA_CEDD_DIM);
        uint64_t *ids = malloc(n * sizeof *ids);
        patina_index_t *ix;
        for (r = 0; r < n; r++) ids[r] = r + 1;
        fill(rows, n);
        if (patina_index_new(&ix, ex, ids, rows, n) != PATINA_OK) return 2;
        for (j = 0; j < nqueries; j++) {
            size_t nq = queries[j];
            uint8_t *q = malloc(nq * PATINA_CEDD_DIM);
            patina_hit_t *h1 = malloc(nq * k * sizeof *h1), *h2 = malloc(nq * k * sizeof *h2);
            size_t *c1 = malloc(nq * sizeof *c1), *c2 = malloc(nq * sizeof *c2);
            double tc, tg = -1, tp = -1;
            fill(q, nq);
            tc = time_ms(cpu_knn, ix, q, nq, k, h1, c1, nq * n > 20000000 ? 3 : 7);
            if (d2d > 0) {
                gpu_knn(ix, q, nq, k, h2, c2); /* upload + warm-up */
                tg = time_ms(gpu_knn, ix, q, nq, k, h2, c2, 9);
                for (r = 0; r < nq * k; r++)
                    if (h1[r].id != h2[r].id || memcmp(&h1[r].distance, &h2[r].distance, sizeof(double))) {
                        bad++;
                        break;
                    }
                if (peers) tp = peer_ms(n, nq, k);
            }
            if (tg > 0) {
                double gbps = (double)n * (144 + 8 + 8 + 4) * (double)nq / (tg * 1e-3) / 1e9;
                printf("| %zu | %zu | %.3f | %.3f | %.1fx | %.0f | %.2f | ", n, nq, tc, tg, tc / tg, gbps, gbps / d2d);
                if (tp > 0) printf("%.3f | %.2f |\n", tp, tp / tg);
                else printf("- | - |\n");
            } else {
                printf("| %zu | %zu | %.3f | - | - | - | - | - | - |\n", n, nq, tc);
            }
            fflush(stdout);
            free(q);
            free(h1);
            free(h2);
            free(c1);
            free(c2);
        }
        patina_index_free(ix);
        free(rows);
        free(ids);
    }
    patina_extractor_free(ex);
    patina_context_free(CTX);
    if (bad) printf("GPU results differ from the CPU's in %d runs\n", bad);
    else printf("GPU results identical to the CPU's (ids and distance bits) in every run\n");
    return bad ? 1 : 0;
}
