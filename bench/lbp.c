/* bench_lbp: the LBP family's production numbers (docs/lbp.md, "Benchmark").
 *
 *   1. GPU kernels: the production dispatcher on N grey 1024x1024 images per
 *      launch, resident on the device (patina_gpu__lbp_grey): ms per launch
 *      with launches queued back to back (a stream of batches) and alone (one
 *      launch on an idle GPU, the host's submission included), images/s,
 *      effective input bandwidth and its fraction of the device-to-device copy
 *      bandwidth measured in the same run; beside it the GPU peer (a PyTorch
 *      implementation, bench/lbp_peers.py torch, same run and batch) and the
 *      ratio peer time / ours. Every row is validated against the CPU first.
 *   2. One image's latency, kernel alone and through the family path.
 *   3. End to end through the family path (patina_extract_batch, what
 *      `patina index -f lbp8 --device gpu` calls per batch) on M RGB
 *      1024x1024 images in host memory (pageable, and pinned), next to the
 *      kernel-only rate of table 1 and the CPU, so that the gap is visible.
 *   4. CPU: the fast path against scikit-image (bench/lbp_peers.py skimage),
 *      CPU time of one thread.
 * The lab's variants (the paper's kernels, k_fast3, forced layouts) are timed
 * by lab/lbp (lab_lbp). Prints tables; never fails on timings.
 *
 * usage: bench_lbp [--quick] [--no-peers] [--batched-only] [--batch N] [--e2e M]
 *                  [--threads N] [--image FILE]
 * (--batched-only: tables 1-3 only; --batch: images per launch, default 256;
 *  --e2e: images of table 3, default 256, 0 skips it)
 * Input: a real photograph (the largest file under $PATINA_SAMPLES or
 * ./samples, or --image), in grey by the project's rule, centre-cropped (or
 * mirrored out) to each size; a synthetic texture without one. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "benchutil.h"
#include "core/internal.h"
#include "features/lbp.h"
#include "gpu/gpu.h"
#include "patina/patina.h"

static int quick, no_peers, batched_only, batch = 256, e2e_images = 256, threads;
static char bench_dir[1024] = "."; /* where lbp_peers.py is: this file's directory */
static const char *image_path;

static double thread_cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Counts, th = 0.9 (TLBAP), no mapping. */
static lbp_conf_t conf(int kind, int P, double R, int method, const char *grid)
{
    return bench_lbp_conf("bench", kind, P, R, method, LBP_MAP_NONE, grid, 0.9);
}

/* ------------------------------------------------------------ the input */

static bench_source_t source; /* the input of the tables */

/* ------------------------------------------------------------ helpers */

/* best-of wall time (ms) of the fast path: codes (hist = 0) or counts */
static double time_fast(const lbp_conf_t *c, const uint8_t *g, int s, patina_pool_t *pool, int hist,
                        double *cpu_ms)
{
    double best = INFINITY, bestc = INFINITY;
    uint32_t *counts = malloc(lbp_dim(c) * sizeof *counts);
    int reps = quick ? 2 : (s <= 512 ? 10 : 5);
    for (int r = 0; r < reps; r++) {
        patina_codemap_t m;
        double t = patina_now(), tc = thread_cpu();
        if (hist) lbp_fast_counts(counts, c, g, s, s, (size_t)s, pool);
        else {
            lbp_fast_codes(&m, c, g, s, s, (size_t)s, pool);
            patina_codemap_release(&m);
        }
        t = patina_now() - t;
        tc = thread_cpu() - tc;
        if (t < best) best = t;
        if (tc < bestc) bestc = tc;
    }
    free(counts);
    if (cpu_ms) *cpu_ms = bestc * 1e3;
    return best * 1e3;
}

/* The peer's microseconds per image in its table row "| name | output | ms
 * | us |", NAN when absent. */
static double peer_us(const char *peer, const char *name, const char *output)
{
    char key[160];
    const char *at;
    double ms, us;
    if (!peer) return NAN;
    snprintf(key, sizeof key, "| %s | %s | ", name, output);
    if (!(at = strstr(peer, key))) return NAN;
    if (sscanf(at + strlen(key), "%lf | %lf", &ms, &us) != 2) return NAN;
    return us;
}

/* --------------------------------------------------- 1: the GPU kernels */

typedef struct {
    const char *name, *peer;   /* peer: its row's name, or NULL */
    lbp_conf_t c;
    double hist_ips;           /* out: images/s, histograms only */
} krow_t;

static void gpu_table(patina_gpu_t *g, double copy_gbps, const char *peer, krow_t *ks, size_t nk, int *all_ok)
{
    const int s = 1024;
    const size_t px = (size_t)s * s;
    uint8_t *grey = malloc(px * (size_t)batch);
    for (int i = 0; i < batch; i++) bench_source_square(&source, grey + (size_t)i * px, s, (i * 37) % 200);
    printf("\n1. GPU kernels: %d grey images of %dx%d per launch on the device (%.0f MB of input); input GB/s = "
           "input bytes / kernel time; copy bandwidth %.0f GB/s (device to device, read + write, same run). "
           "ms per launch: launches queued back to back (a stream of batches); alone: one launch on an idle GPU "
           "(the host's submission included). Peer: PyTorch on the GPU, same run and batch "
           "(bench/lbp_peers.py torch: codes always materialised); ratio = peer time / ours\n",
           batch, s, s, (double)px * batch / 1e6, copy_gbps);
    printf("| descriptor | output | images | ms per launch | ms alone | us per image | images/s | input GB/s |"
           " %% of copy bw | peer us per image | peer / ours |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t k = 0; k < nk; k++) {
        const lbp_conf_t *c = &ks[k].c;
        patina_gpu_lbp_conf_t gc;
        int n = batch, mw, mh;
        if (lbp_gpu_conf(&gc, c) != PATINA_OK) continue;
        if (c->kind == LBP_KIND_CIRCULAR && n > 32) n = 32; /* slower: fewer images */
        lbp_map_shape(c, s, s, &mw, &mh);
        for (int codes_too = 0; codes_too < 2; codes_too++) {
            const char *output = codes_too ? "codes + histograms" : "histograms only";
            const size_t esz = patina_elem_size(c->code_elem), dim = lbp_dim(c);
            patina_gpu_lbp_timing_t tm = {quick ? 5 : 20, 0, 0};
            unsigned char *codes;
            uint32_t *counts, *want;
            double us, gbps, pus;
            if (codes_too && c->grid_rows * c->grid_cols > 1) continue;
            codes = codes_too ? malloc((size_t)mw * (size_t)mh * esz * (size_t)n) : NULL;
            counts = malloc(dim * sizeof(uint32_t) * (size_t)n);
            want = malloc(dim * sizeof(uint32_t));
            if (patina_gpu__lbp_grey(g, &gc, grey, s, s, n, codes, counts, &tm) != PATINA_OK) {
                printf("| %s | %s | error: %s |\n", ks[k].name, output, patina_last_error());
                free(codes);
                free(counts);
                free(want);
                continue;
            }
            /* the first image against the CPU's fast path */
            lbp_fast_counts(want, c, grey, s, s, (size_t)s, NULL);
            if (memcmp(want, counts, dim * sizeof(uint32_t)) != 0) {
                printf("  [%s: HISTOGRAM DIFFERS FROM THE CPU]\n", ks[k].name);
                *all_ok = 0;
            }
            if (codes) {
                patina_codemap_t m;
                if (lbp_fast_codes(&m, c, grey, s, s, (size_t)s, NULL) == PATINA_OK &&
                    memcmp(m.data, codes, (size_t)mw * (size_t)mh * esz) != 0) {
                    printf("  [%s: CODES DIFFER FROM THE CPU]\n", ks[k].name);
                    *all_ok = 0;
                }
                patina_codemap_release(&m);
            }
            us = tm.ms_stream * 1e3 / n;
            gbps = (double)px * n / (tm.ms_stream * 1e-3) / 1e9;
            if (!codes_too) ks[k].hist_ips = n / (tm.ms_stream * 1e-3);
            pus = ks[k].peer ? peer_us(peer, ks[k].peer, c->kind == LBP_KIND_CIRCULAR ? "codes" : "codes + histograms")
                             : NAN;
            printf("| %s | %s | %d x %dx%d | %.3f | %.3f | %.2f | %.0f | %.0f | %.0f%% |", ks[k].name, output, n, s,
                   s, tm.ms_stream, tm.ms_alone, us, n / (tm.ms_stream * 1e-3), gbps, 100.0 * gbps / copy_gbps);
            if (isnan(pus)) printf(" - | - |\n");
            else printf(" %.2f | %.1fx |\n", pus, pus / us);
            free(codes);
            free(counts);
            free(want);
        }
    }
    free(grey);
}

/* ------------------------------------------------- 2: one image's latency */

static void latency(patina_gpu_t *g, patina_context_t *ctx)
{
    static const struct {
        const char *name;
        int kind;
    } one[] = {{"lbp8", LBP_KIND_LBP8}, {"tlbap", LBP_KIND_TLBAP}, {"lanadp", LBP_KIND_LANADP}};
    const int s = 1024;
    uint8_t *grey = malloc((size_t)s * s);
    patina_image_t img;
    bench_source_square(&source, grey, s, 0);
    printf("\n2. One 1024x1024 image: the kernel alone (events around one launch on an idle GPU, the host's "
           "submission included; and per launch back to back), and the family path (patina_extract_batch of one "
           "pageable RGB image: upload, grey, kernel, counts back; best of 20 calls)\n");
    if (patina_image_init(&img, s, s) != PATINA_OK) {
        free(grey);
        return;
    }
    for (size_t p = 0; p < (size_t)s * s; p++) img.data[3 * p] = img.data[3 * p + 1] = img.data[3 * p + 2] = grey[p];
    for (size_t k = 0; k < sizeof one / sizeof one[0]; k++) {
        lbp_conf_t c = conf(one[k].kind, 8, 1, 0, "1x1");
        patina_gpu_lbp_conf_t gc;
        patina_gpu_lbp_timing_t tm = {20, 0, 0};
        patina_extractor_t *ex;
        double best = INFINITY;
        if (lbp_gpu_conf(&gc, &c) != PATINA_OK || patina_gpu__lbp_grey(g, &gc, grey, s, s, 1, NULL, NULL, &tm) != PATINA_OK)
            continue;
        if (patina_extractor_new(&ex, one[k].name) == PATINA_OK) {
            float out[256];
            for (int r = 0; r < 21; r++) {
                double t = patina_now();
                if (patina_extract_batch(ctx, ex, PATINA_DEVICE_GPU, out, &img, 1, NULL) != PATINA_OK) break;
                t = patina_now() - t;
                if (r > 0 && t < best) best = t;
            }
            patina_extractor_free(ex);
        }
        printf("  %s: kernel %.1f us alone, %.1f us per launch back to back; family path %.1f us per image\n",
               one[k].name, tm.ms_alone * 1e3, tm.ms_stream * 1e3, best * 1e6);
    }
    patina_image_release(&img);
    free(grey);
}

/* ------------------------------------------------------ 3: end to end */

static double time_extract(patina_context_t *ctx, patina_extractor_t *ex, patina_device dev, void *out,
                           const patina_image_t *imgs, size_t n)
{
    double best = INFINITY;
    for (int r = 0; r < (quick ? 2 : 3); r++) {
        double t = patina_now();
        if (patina_extract_batch(ctx, ex, dev, out, imgs, n, NULL) != PATINA_OK) {
            printf("  [extract: %s]\n", patina_last_error());
            return NAN;
        }
        t = patina_now() - t;
        if (t < best) best = t;
    }
    return best;
}

static void end_to_end(patina_context_t *ctx, const krow_t *ks, size_t nk, int *all_ok)
{
    static const struct {
        const char *spec, *row; /* row: the kernel table's row */
    } fams[] = {{"lbp8", "lbp8"}, {"tlbap", "tlbap:th=0.9"}, {"lanadp", "lanadp"},
                {"lbp:method=uniform", "lbp P=8,R=1,uniform"}};
    const int s = 1024;
    const size_t n = (size_t)e2e_images, rgb = 3 * (size_t)s * s;
    patina_image_t *pageable = calloc(n, sizeof *pageable), *pinned = calloc(n, sizeof *pinned);
    uint8_t *grey = malloc((size_t)s * s);
    int have_pinned = 1;
    for (size_t i = 0; i < n; i++) {
        bench_source_square(&source, grey, s, (int)((i * 37) % 200));
        if (patina_image_init(&pageable[i], s, s) != PATINA_OK) {
            free(grey);
            return;
        }
        for (size_t p = 0; p < (size_t)s * s; p++)
            pageable[i].data[3 * p] = pageable[i].data[3 * p + 1] = pageable[i].data[3 * p + 2] = grey[p];
        pinned[i] = pageable[i];
        pinned[i].owned = 0;
        pinned[i].data = have_pinned ? patina_gpu_host_alloc(rgb) : NULL;
        if (!pinned[i].data) have_pinned = 0;
        else memcpy(pinned[i].data, pageable[i].data, rgb);
    }
    free(grey);
    printf("\n3. End to end: patina_extract_batch (the family path: host images -> pinned staging -> device, grey, "
           "kernel, counts back, L1 on the host) on %zu RGB %dx%d images in host memory, best of %d calls; "
           "RGB GB/s = RGB bytes / time; kernel only: table 1's rate (grey resident on the device)\n",
           n, s, s, quick ? 2 : 3);
    printf("| descriptor | device | input | images/s | RGB GB/s | kernel-only images/s | kernel / end to end |\n");
    printf("|---|---|---|---|---|---|---|\n");
    for (size_t f = 0; f < sizeof fams / sizeof fams[0]; f++) {
        patina_extractor_t *ex;
        size_t bytes;
        unsigned char *a, *b;
        double kern = NAN;
        for (size_t k = 0; k < nk; k++)
            if (!strcmp(ks[k].name, fams[f].row)) kern = ks[k].hist_ips;
        if (patina_extractor_new(&ex, fams[f].spec) != PATINA_OK) continue;
        bytes = patina_extractor_bytes(ex);
        a = malloc(n * bytes);
        b = malloc(n * bytes);
        /* warm-up (the GPU state is made on the first call), and the check */
        patina_extract_batch(ctx, ex, PATINA_DEVICE_GPU, a, pageable, n < 4 ? n : 4, NULL);
        for (int m = 0; m < 3; m++) {
            const patina_device dev = m == 2 ? PATINA_DEVICE_CPU : PATINA_DEVICE_GPU;
            const patina_image_t *imgs = m == 1 ? pinned : pageable;
            double t;
            if (m == 1 && !have_pinned) continue;
            t = time_extract(ctx, ex, dev, m == 2 ? b : a, imgs, n);
            if (m == 2 && memcmp(a, b, n * bytes) != 0) {
                printf("  [%s: GPU DESCRIPTORS DIFFER FROM THE CPU]\n", fams[f].spec);
                *all_ok = 0;
            }
            printf("| %s | %s | %s | %.0f | %.2f |", fams[f].spec, m == 2 ? "cpu" : "gpu",
                   m == 1 ? "pinned" : "pageable", n / t, (double)rgb * n / t / 1e9);
            if (m == 2 || isnan(kern)) printf(" - | - |\n");
            else printf(" %.0f | %.0fx |\n", kern, kern / (n / t));
        }
        free(a);
        free(b);
        patina_extractor_free(ex);
    }
    for (size_t i = 0; i < n; i++) {
        patina_gpu_host_free(pinned[i].data);
        patina_image_release(&pageable[i]);
    }
    free(pageable);
    free(pinned);
}

/* ------------------------------------------------------ 4: CPU vs peers */

static void cpu_table(patina_pool_t *pool, const char *pgm)
{
    struct { const char *name, *sk; lbp_conf_t c; } ks[] = {
        {"lbp P=8,R=1 default", "8,1,default", conf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_DEFAULT, "1x1")},
        {"lbp P=8,R=1 uniform", "8,1,uniform", conf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_UNIFORM, "1x1")},
        {"lbp P=8,R=1 var", "8,1,var", conf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_VAR, "1x1")},
        {"lbp P=16,R=2 uniform", "16,2,uniform", conf(LBP_KIND_CIRCULAR, 16, 2, LBP_M_UNIFORM, "1x1")},
        {"lbp P=24,R=3 uniform", "24,3,uniform", conf(LBP_KIND_CIRCULAR, 24, 3, LBP_M_UNIFORM, "1x1")},
        {"lbp P=8,R=1.5 nri_uniform", "8,1.5,nri_uniform", conf(LBP_KIND_CIRCULAR, 8, 1.5, LBP_M_NRI, "1x1")},
    };
    const struct { const char *name; int kind; } k3[] = {
        {"lbp8", LBP_KIND_LBP8}, {"tlbap:th=0.9", LBP_KIND_TLBAP}, {"lanadp", LBP_KIND_LANADP}};
    const int s = 1024;
    uint8_t *g = malloc((size_t)s * s);
    char *peer = NULL;
    bench_source_square(&source, g, s, 0);
    if (!no_peers && pgm) {
        /* scikit-image on the same image, CPU time of one thread */
        char cmd[4096];
        const char *py = getenv("PATINA_PYTHON");
        int off = snprintf(cmd, sizeof cmd, "'%s' '%s/lbp_peers.py' skimage --image '%s'",
                           py && *py ? py : "python3", bench_dir, pgm);
        for (size_t k = 0; k < sizeof ks / sizeof ks[0]; k++)
            off += snprintf(cmd + off, sizeof cmd - (size_t)off, " --config %s", ks[k].sk);
        snprintf(cmd + off, sizeof cmd - (size_t)off, " 2>&1");
        peer = bench_capture(cmd);
    }
    printf("\n4. CPU, one 1024x1024 image: Patina's fast path vs scikit-image 0.19 local_binary_pattern "
           "(same image; CPU time of one thread = per core)\n");
    printf("| lbp | Patina 1 thread (ms CPU) | Patina %d threads (ms wall) | scikit-image (ms CPU) | per-core speedup |\n",
           patina_pool_size(pool));
    printf("|---|---|---|---|---|\n");
    for (size_t k = 0; k < sizeof ks / sizeof ks[0]; k++) {
        double cpu1, walln, sk = NAN;
        time_fast(&ks[k].c, g, s, NULL, 0, &cpu1);
        walln = time_fast(&ks[k].c, g, s, pool, 0, NULL);
        if (peer) {
            char key[64];
            const char *at;
            snprintf(key, sizeof key, "skimage %s ", ks[k].sk);
            if ((at = strstr(peer, key))) sk = atof(at + strlen(key));
        }
        if (isnan(sk))
            printf("| %s | %.2f | %.2f | - | - |\n", ks[k].name, cpu1, walln);
        else
            printf("| %s | %.2f | %.2f | %.1f | %.1fx |\n", ks[k].name, cpu1, walln, sk, sk / cpu1);
    }
    if (peer && !strstr(peer, "skimage ")) printf("(scikit-image peer failed: %.300s)\n", peer);
    printf("The 3x3 kinds, codes of one 1024x1024 image:");
    for (size_t k = 0; k < sizeof k3 / sizeof k3[0]; k++) {
        lbp_conf_t c = conf(k3[k].kind, 8, 1, 0, "1x1");
        double cpu1;
        time_fast(&c, g, s, NULL, 0, &cpu1);
        printf(" %s %.2f ms CPU (1 thread)%s", k3[k].name, cpu1, k + 1 < sizeof k3 / sizeof k3[0] ? "," : "\n");
    }
    free(peer);
    free(g);
}

/* The torch peer's output (NULL without one), after checking its codes of
 * the first image against Patina's. */
static char *gpu_peer(const char *pgm)
{
    static const struct { const char *name; int kind; } chk[3] = {
        {"lbp8", LBP_KIND_LBP8}, {"tlbap", LBP_KIND_TLBAP}, {"lanadp", LBP_KIND_LANADP}};
    char cmd[8192], maps[3][600], *out;
    int off;
    const char *py = getenv("PATINA_PYTHON");
    uint8_t *g;
    if (no_peers || !pgm) return NULL;
    g = malloc(1024 * 1024);
    bench_source_square(&source, g, 1024, 0);
    off = snprintf(cmd, sizeof cmd, "'%s' '%s/lbp_peers.py' torch --image '%s' --batch %d",
                   py && *py ? py : "python3", bench_dir, pgm, batch);
    for (int k = 0; k < 3; k++) {
        lbp_conf_t c = conf(chk[k].kind, 8, 1, 0, "1x1");
        patina_codemap_t m;
        snprintf(maps[k], sizeof maps[k], "%s.%s.pgm", pgm, chk[k].name);
        if (lbp_fast_codes(&m, &c, g, 1024, 1024, 1024, NULL) == PATINA_OK &&
            patina_codemap_write(&m, maps[k]) == PATINA_OK)
            off += snprintf(cmd + off, sizeof cmd - (size_t)off, " --check %s='%s'", chk[k].name, maps[k]);
        patina_codemap_release(&m);
    }
    snprintf(cmd + off, sizeof cmd - (size_t)off, " 2>&1");
    free(g);
    out = bench_capture(cmd);
    for (int k = 0; k < 3; k++) remove(maps[k]);
    return out;
}

int main(int argc, char **argv)
{
    patina_pool_t *pool;
    patina_gpu_t *g = NULL;
    patina_context_t *ctx = NULL;
    int all_ok = 1;
    double copy_gbps = NAN;
    char pgm[256] = "", *peer = NULL;
    krow_t ks[] = {
        {"lbp8", "lbp8", conf(LBP_KIND_LBP8, 8, 1, 0, "1x1"), NAN},
        {"tlbap:th=0.9", "tlbap:th=0.9", conf(LBP_KIND_TLBAP, 8, 1, 0, "1x1"), NAN},
        {"lanadp", "lanadp", conf(LBP_KIND_LANADP, 8, 1, 0, "1x1"), NAN},
        {"lbp8 grid=4x4", NULL, conf(LBP_KIND_LBP8, 8, 1, 0, "4x4"), NAN},
        {"tlbap:th=0.9 grid=4x4", NULL, conf(LBP_KIND_TLBAP, 8, 1, 0, "4x4"), NAN},
        {"lanadp grid=4x4", NULL, conf(LBP_KIND_LANADP, 8, 1, 0, "4x4"), NAN},
        {"lbp8 grid=8x8", NULL, conf(LBP_KIND_LBP8, 8, 1, 0, "8x8"), NAN},
        {"lbp P=8,R=1 default", "lbp P=8,R=1 default", conf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_DEFAULT, "1x1"), NAN},
        {"lbp P=8,R=1,uniform", NULL, conf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_UNIFORM, "1x1"), NAN},
        {"lbp P=16,R=2,uniform", NULL, conf(LBP_KIND_CIRCULAR, 16, 2, LBP_M_UNIFORM, "1x1"), NAN},
        {"lbp P=24,R=3,uniform", NULL, conf(LBP_KIND_CIRCULAR, 24, 3, LBP_M_UNIFORM, "1x1"), NAN},
    };
    const size_t nk = sizeof ks / sizeof ks[0];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--no-peers")) no_peers = 1;
        else if (!strcmp(argv[i], "--batched-only")) batched_only = 1;
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--e2e") && i + 1 < argc) e2e_images = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--image") && i + 1 < argc) image_path = argv[++i];
        else {
            fprintf(stderr, "usage: bench_lbp [--quick] [--no-peers] [--batched-only] [--batch N] [--e2e M] "
                            "[--threads N] [--image FILE]\n");
            return 2;
        }
    }
    if (batch < 1) batch = 1;
    if (e2e_images < 0) e2e_images = 0;
    {
        const char *slash = strrchr(__FILE__, '/');
        if (slash) snprintf(bench_dir, sizeof bench_dir, "%.*s", (int)(slash - __FILE__), __FILE__);
    }
    if (patina_pool_new(&pool, threads) != PATINA_OK) return 1;
    bench_source_load(&source, image_path);
    printf("# bench_lbp: %s\n", patina_build_info());
    printf("input: %s\n", source.name);
    if (patina_gpu_count() > 0 && patina_gpu_open(&g, 0, 0) == PATINA_OK) {
        char d[256];
        patina_gpu_describe(0, d, sizeof d);
        if (patina_gpu__bandwidth(g, 1, (size_t)256 << 20, 10, &copy_gbps) != PATINA_OK) copy_gbps = NAN;
        printf("GPU: %s; device-to-device copy bandwidth %.0f GB/s (best of 10)\n", d, copy_gbps);
    } else {
        printf("GPU: none; run on a GPU machine with scripts/device.sh\n");
    }
    {
        /* the 1024^2 input, for the peers */
        uint8_t *img = malloc(1024 * 1024);
        FILE *f;
        snprintf(pgm, sizeof pgm, "%s/bench_lbp_%d.pgm", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
        bench_source_square(&source, img, 1024, 0);
        if ((f = fopen(pgm, "wb"))) {
            fprintf(f, "P5\n1024 1024\n255\n");
            fwrite(img, 1, 1024 * 1024, f);
            fclose(f);
        } else {
            pgm[0] = '\0';
        }
        free(img);
    }
    if (g) {
        peer = gpu_peer(*pgm ? pgm : NULL);
        gpu_table(g, copy_gbps, peer, ks, nk, &all_ok);
        if (peer) {
            const char *chk = strstr(peer, "check ");
            printf("%s", chk ? chk : "");
            if (!strstr(peer, "| peer (PyTorch)")) printf("(PyTorch peer: %.300s)\n", peer);
        }
        if (patina_context_new(&ctx, NULL) == PATINA_OK) {
            latency(g, ctx);
            if (e2e_images > 0) end_to_end(ctx, ks, nk, &all_ok);
            patina_context_free(ctx);
        }
        {
            char plan[2048];
            patina_gpu__plan(g, plan, sizeof plan);
            printf("\nbench context's GPU memory: %s\n", plan);
        }
    }
    if (!batched_only) cpu_table(pool, *pgm ? pgm : NULL);
    if (*pgm) remove(pgm);
    printf("\nvalidation: %s\n", all_ok ? "every GPU result matched the CPU" : "MISMATCHES (see above)");
    free(peer);
    patina_gpu_close(g);
    patina_pool_free(pool);
    bench_source_release(&source);
    return 0;
}
