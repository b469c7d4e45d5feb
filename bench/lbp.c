/* bench_lbp: the paper's Tables 1-3 (TLBAP and LANADP at 256^2, 512^2,
 * 1024^2: sequential vs global-memory vs shared-memory kernels, 16x16 and
 * 32x32 blocks), plus Patina's production kernel, batched throughput with
 * the effective input bandwidth and its fraction of the device's copy
 * bandwidth (measured in the same run), the CPU paths, and the peers
 * (scikit-image on the CPU, a PyTorch implementation on the GPU) through
 * bench/lbp_peers.py. Every GPU variant's codes are checked against the C
 * reference before it is timed. Prints tables; never fails on timings.
 *
 * usage: bench_lbp [--quick] [--no-peers] [--batched-only] [--batch N] [--threads N] [--image FILE]
 * (--batched-only: the batched production kernel and one-image latencies only)
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

#include "core/internal.h"
#include "features/lbp.h"
#include "gpu/gpu.h"
#include "patina/patina.h"

static int quick, no_peers, batched_only, batch = 256, threads;
static char bench_dir[1024] = "."; /* where lbp_peers.py is: this file's directory */
static const char *image_path;

static double thread_cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static lbp_conf_t conf(int kind, int P, double R, int method, const char *grid)
{
    lbp_opts_t o;
    lbp_conf_t c;
    memset(&o, 0, sizeof o);
    o.P = P;
    o.R = R;
    o.method = method;
    o.th = 0.9;
    snprintf(o.grid, sizeof o.grid, "%s", grid);
    o.norm = LBP_NORM_COUNTS;
    o.vbins = 16;
    if (lbp_conf_resolve(&c, kind, &o, "bench") != PATINA_OK) {
        fprintf(stderr, "bench_lbp: %s\n", patina_last_error());
        exit(1);
    }
    return c;
}

/* ------------------------------------------------------------ the input */

static uint8_t *src_grey;
static int src_w, src_h;
static char src_name[1100] = "synthetic texture"; /* a path (up to 1023) and its size */

static void load_source(void)
{
    const char *dir = getenv("PATINA_SAMPLES");
    char cmd[1024], path[1024];
    patina_image_t img;
    FILE *p;
    if (image_path) {
        snprintf(path, sizeof path, "%s", image_path);
    } else {
        path[0] = '\0';
        snprintf(cmd, sizeof cmd,
                 "find '%s' -type f \\( -name '*.jpg' -o -name '*.png' \\) -printf '%%s %%p\\n' 2>/dev/null"
                 " | sort -k1,1nr -k2 | head -1 | cut -d' ' -f2-",
                 dir && *dir ? dir : "samples");
        if ((p = popen(cmd, "r"))) {
            if (fgets(path, sizeof path, p)) path[strcspn(path, "\n")] = '\0';
            pclose(p);
        }
    }
    if (*path && patina_image_load(&img, path, NULL) == PATINA_OK) {
        src_w = img.width;
        src_h = img.height;
        src_grey = malloc((size_t)src_w * (size_t)src_h);
        patina_image_to_grey(src_grey, &img);
        patina_image_release(&img);
        snprintf(src_name, sizeof src_name, "%s (%dx%d)", path, src_w, src_h);
        return;
    }
    src_w = src_h = 1024;
    src_grey = malloc(1024 * 1024);
    for (int y = 0; y < 1024; y++)
        for (int x = 0; x < 1024; x++)
            src_grey[y * 1024 + x] = (uint8_t)(128 + 60 * sin(x * 0.07) * cos(y * 0.05) +
                                               (int)((x * 2654435761u ^ y * 40503u) >> 27));
}

/* An s x s grey image from the source: centre crop, mirrored where the
 * source is smaller; `shift` moves the window (distinct batch members). */
static void make_image(uint8_t *out, int s, int shift)
{
    int x0 = (src_w - s) / 2 + shift, y0 = (src_h - s) / 2 + shift / 2;
    for (int y = 0; y < s; y++)
        for (int x = 0; x < s; x++) {
            int sx = x0 + x, sy = y0 + y;
            sx = ((sx % (2 * src_w)) + 2 * src_w) % (2 * src_w);
            sy = ((sy % (2 * src_h)) + 2 * src_h) % (2 * src_h);
            if (sx >= src_w) sx = 2 * src_w - 1 - sx;
            if (sy >= src_h) sy = 2 * src_h - 1 - sy;
            out[(size_t)y * (size_t)s + (size_t)x] = src_grey[(size_t)sy * (size_t)src_w + (size_t)sx];
        }
}

/* ------------------------------------------------------------ helpers */

static double time_ref(const lbp_conf_t *c, const uint8_t *g, int s, patina_codemap_t *keep)
{
    double t = patina_now();
    if (lbp_ref_codes(keep, c, g, s, s, (size_t)s) != PATINA_OK) return NAN;
    return (patina_now() - t) * 1e3;
}

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

/* GPU variant: validates codes against `ref` (all n images the same
 * reference when same_ref), then the median kernel time in ms. */
static double time_gpu(int variant, const lbp_conf_t *c, const uint8_t *g, int s, int n,
                       const patina_codemap_t *ref, int *ok)
{
    int mw, mh;
    size_t esz = patina_elem_size(c->code_elem), mpx;
    unsigned char *codes;
    double ms = NAN;
    lbp_map_shape(c, s, s, &mw, &mh);
    mpx = (size_t)mw * (size_t)mh;
    codes = variant == PATINA_LBP_LAB_HIST ? NULL : malloc(mpx * (size_t)n * esz + 1);
    if (patina_gpu_lbp_lab(variant, c, g, s, s, n, codes, NULL, quick ? 5 : 20, &ms, NULL) != PATINA_OK) {
        printf("  [%s: %s]\n", patina_gpu_lbp_lab_name(variant), patina_last_error());
        free(codes);
        *ok = 0;
        return NAN;
    }
    if (codes && ref && memcmp(codes, ref->data, mpx * esz) != 0) {
        printf("  [%s: CODES DIFFER FROM THE C REFERENCE]\n", patina_gpu_lbp_lab_name(variant));
        *ok = 0;
    }
    free(codes);
    return ms;
}

static void fmt(char *buf, size_t n, double v)
{
    if (isnan(v)) snprintf(buf, n, "-");
    else if (v >= 100) snprintf(buf, n, "%.1f", v);
    else if (v >= 1) snprintf(buf, n, "%.3f", v);
    else snprintf(buf, n, "%.4f", v);
}

/* ------------------------------------------------------------ tables 1-3 */

typedef struct {
    double seq, g16, g32, s16, s32, pcodes, phist, cpu1, cpun;
} row_t;

static void paper_table(const char *title, const lbp_conf_t *c, int gpu, patina_pool_t *pool,
                        row_t rows[3], int *all_ok)
{
    static const int sizes[3] = {256, 512, 1024};
    printf("\n%s: milliseconds per image (one image per launch; GPU: kernel time, median)\n", title);
    printf("| size | sequential (C ref) | global 16x16 | global 32x32 | shared 16x16 | shared 32x32 |"
           " production codes | production hist | CPU fast 1 thread | CPU fast %d threads |\n",
           patina_pool_size(pool));
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < 3; i++) {
        int s = sizes[i];
        uint8_t *g = malloc((size_t)s * (size_t)s);
        patina_codemap_t ref;
        row_t *r = &rows[i];
        char b[10][32];
        make_image(g, s, 0);
        r->seq = time_ref(c, g, s, &ref);
        r->g16 = r->g32 = r->s16 = r->s32 = r->pcodes = r->phist = NAN;
        if (gpu) {
            r->g16 = time_gpu(PATINA_LBP_LAB_GLOBAL16, c, g, s, 1, &ref, all_ok);
            r->g32 = time_gpu(PATINA_LBP_LAB_GLOBAL32, c, g, s, 1, &ref, all_ok);
            r->s16 = time_gpu(PATINA_LBP_LAB_SHARED16, c, g, s, 1, &ref, all_ok);
            r->s32 = time_gpu(PATINA_LBP_LAB_SHARED32, c, g, s, 1, &ref, all_ok);
            r->pcodes = time_gpu(PATINA_LBP_LAB_CODES, c, g, s, 1, &ref, all_ok);
            r->phist = time_gpu(PATINA_LBP_LAB_HIST, c, g, s, 1, NULL, all_ok);
        }
        r->cpu1 = time_fast(c, g, s, NULL, 0, NULL);
        r->cpun = time_fast(c, g, s, pool, 0, NULL);
        fmt(b[0], 32, r->seq); fmt(b[1], 32, r->g16); fmt(b[2], 32, r->g32); fmt(b[3], 32, r->s16);
        fmt(b[4], 32, r->s32); fmt(b[5], 32, r->pcodes); fmt(b[6], 32, r->phist); fmt(b[7], 32, r->cpu1);
        fmt(b[8], 32, r->cpun);
        printf("| %d x %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s, s, b[0], b[1], b[2],
               b[3], b[4], b[5], b[6], b[7], b[8]);
        patina_codemap_release(&ref);
        free(g);
    }
}

static void speedups(const row_t t[3], const row_t l[3])
{
    static const int sizes[3] = {256, 512, 1024};
    printf("\nTable 3: speedup = sequential time / parallel time (paper: TLBAP 2.3 / 5.2, LANADP 17 / 29)\n");
    printf("| size | TLBAP global 16 | TLBAP shared 16 | TLBAP production | TLBAP CPU fast 1 thr |"
           " LANADP global 16 | LANADP shared 16 | LANADP production | LANADP CPU fast 1 thr |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < 3; i++)
        printf("| %d x %d | %.1f | %.1f | %.0f | %.0f | %.1f | %.1f | %.0f | %.0f |\n", sizes[i], sizes[i],
               t[i].seq / t[i].g16, t[i].seq / t[i].s16, t[i].seq / t[i].pcodes, t[i].seq / t[i].cpu1,
               l[i].seq / l[i].g16, l[i].seq / l[i].s16, l[i].seq / l[i].pcodes, l[i].seq / l[i].cpu1);
}

/* ------------------------------------------------------------ batched */

static void batched(double copy_gbps, int *all_ok)
{
    struct { const char *name; lbp_conf_t c; } ks[] = {
        {"lbp8", conf(LBP_KIND_LBP8, 8, 1, 0, "1x1")},
        {"tlbap:th=0.9", conf(LBP_KIND_TLBAP, 8, 1, 0, "1x1")},
        {"lanadp", conf(LBP_KIND_LANADP, 8, 1, 0, "1x1")},
        {"lbp8 grid=4x4", conf(LBP_KIND_LBP8, 8, 1, 0, "4x4")},
        {"tlbap:th=0.9 grid=4x4", conf(LBP_KIND_TLBAP, 8, 1, 0, "4x4")},
        {"lanadp grid=4x4", conf(LBP_KIND_LANADP, 8, 1, 0, "4x4")},
        {"lbp8 grid=8x8", conf(LBP_KIND_LBP8, 8, 1, 0, "8x8")},
        {"lbp P=8,R=1,uniform", conf(LBP_KIND_CIRCULAR, 8, 1, LBP_M_UNIFORM, "1x1")},
        {"lbp P=16,R=2,uniform", conf(LBP_KIND_CIRCULAR, 16, 2, LBP_M_UNIFORM, "1x1")},
        {"lbp P=24,R=3,uniform", conf(LBP_KIND_CIRCULAR, 24, 3, LBP_M_UNIFORM, "1x1")},
    };
    const int s = 1024;
    const size_t px = (size_t)s * s;
    int n = batch;
    uint8_t *g = malloc(px * (size_t)n);
    for (int i = 0; i < n; i++) make_image(g + (size_t)i * px, s, (i * 37) % 200);
    printf("\nBatched production kernel: %d images of %dx%d per launch (%.0f MB of input); "
           "effective input bandwidth = input bytes / kernel time; copy bandwidth %.0f GB/s "
           "(device-to-device cudaMemcpy, read + write, same run). ms per launch: launches queued back "
           "to back (a stream of batches); alone: the median of single launches on an idle GPU, "
           "which adds the host's submission\n",
           n, s, s, (double)px * n / 1e6, copy_gbps);
    printf("| descriptor | output | ms per launch | ms alone | us per image | images/s | input GB/s | %% of copy bw |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (size_t k = 0; k < sizeof ks / sizeof ks[0]; k++) {
        const lbp_conf_t *c = &ks[k].c;
        int nb = n;
        if (c->kind == LBP_KIND_CIRCULAR && nb > 32) nb = 32; /* slower: fewer images */
        for (int v = PATINA_LBP_LAB_CODES; v <= PATINA_LBP_LAB_HIST; v++) {
            double ms = NAN, ms1 = NAN;
            int mw, mh;
            lbp_map_shape(c, s, s, &mw, &mh);
            if (v == PATINA_LBP_LAB_CODES && c->grid_rows > 1) continue;
            {
                /* validate the first image of the batch, then time */
                size_t esz = patina_elem_size(c->code_elem);
                unsigned char *codes = v == PATINA_LBP_LAB_CODES ? malloc((size_t)mw * mh * esz * (size_t)nb) : NULL;
                uint32_t *counts = malloc(lbp_dim(c) * sizeof(uint32_t) * (size_t)nb);
                if (patina_gpu_lbp_lab(v, c, g, s, s, nb, codes, counts, quick ? 5 : 20, &ms1, &ms) != PATINA_OK) {
                    printf("| %s | %s | error: %s |\n", ks[k].name, v == PATINA_LBP_LAB_CODES ? "codes" : "histograms",
                           patina_last_error());
                    free(codes);
                    free(counts);
                    continue;
                }
                {
                    uint32_t *want = malloc(lbp_dim(c) * sizeof(uint32_t));
                    lbp_fast_counts(want, c, g, s, s, (size_t)s, NULL);
                    if (memcmp(want, counts, lbp_dim(c) * sizeof(uint32_t)) != 0) {
                        printf("  [%s: HISTOGRAM DIFFERS FROM THE CPU]\n", ks[k].name);
                        *all_ok = 0;
                    }
                    free(want);
                }
                free(codes);
                free(counts);
            }
            printf("| %s | %s | %.3f | %.3f | %.2f | %.0f | %.0f | %.0f%% |\n", ks[k].name,
                   v == PATINA_LBP_LAB_CODES ? "codes + histograms" : "histograms only", ms, ms1,
                   ms * 1e3 / nb, nb / (ms * 1e-3), (double)px * nb / (ms * 1e-3) / 1e9,
                   100.0 * ((double)px * nb / (ms * 1e-3) / 1e9) / copy_gbps);
        }
    }
    /* one image, as a latency: a launch alone on an idle GPU (the host's
     * submission included), and per launch when launches queue back to back */
    {
        static const struct { const char *name; int kind; } one[] = {
            {"lanadp", LBP_KIND_LANADP}, {"tlbap", LBP_KIND_TLBAP}, {"lbp8", LBP_KIND_LBP8}};
        printf("\nOne 1024x1024 image, histogram (paper: LANADP 9.7 ms, TLBAP 29 ms shared-memory):\n");
        for (size_t k = 0; k < sizeof one / sizeof one[0]; k++) {
            double ms = NAN, mss = NAN;
            lbp_conf_t c = conf(one[k].kind, 8, 1, 0, "1x1");
            if (patina_gpu_lbp_lab(PATINA_LBP_LAB_HIST, &c, g, s, s, 1, NULL, NULL, 20, &ms, &mss) == PATINA_OK)
                printf("  %s: %.1f us alone (events around one launch), %.1f us per launch back to back\n",
                       one[k].name, ms * 1e3, mss * 1e3);
        }
    }
    free(g);
}

/* ------------------------------------------------------------ CPU vs peers */

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
    const int s = 1024;
    uint8_t *g = malloc((size_t)s * s);
    char *peer = NULL;
    make_image(g, s, 0);
    if (!no_peers && pgm) {
        /* scikit-image on the same image, CPU time of one thread */
        char cmd[4096];
        size_t len = 0;
        FILE *p;
        const char *py = getenv("PATINA_PYTHON");
        int off = snprintf(cmd, sizeof cmd, "'%s' '%s/lbp_peers.py' skimage --image '%s'",
                           py && *py ? py : "python3", bench_dir, pgm);
        for (size_t k = 0; k < sizeof ks / sizeof ks[0]; k++)
            off += snprintf(cmd + off, sizeof cmd - (size_t)off, " --config %s", ks[k].sk);
        snprintf(cmd + off, sizeof cmd - (size_t)off, " 2>&1");
        if ((p = popen(cmd, "r"))) {
            char buf[4096];
            size_t got;
            while ((got = fread(buf, 1, sizeof buf, p)) > 0) {
                peer = realloc(peer, len + got + 1);
                memcpy(peer + len, buf, got);
                len += got;
                peer[len] = '\0';
            }
            pclose(p);
        }
    }
    printf("\nCPU, one 1024x1024 image: Patina's fast path vs scikit-image 0.19 local_binary_pattern "
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
    free(peer);
    free(g);
}

/* ------------------------------------------------------------ GPU peer */

static void gpu_peers(const char *pgm)
{
    static const struct { const char *name; int kind; } chk[3] = {
        {"lbp8", LBP_KIND_LBP8}, {"tlbap", LBP_KIND_TLBAP}, {"lanadp", LBP_KIND_LANADP}};
    char cmd[8192], maps[3][600];
    FILE *p;
    int off;
    const char *py = getenv("PATINA_PYTHON");
    uint8_t *g = malloc(1024 * 1024);
    if (no_peers || !pgm) {
        free(g);
        return;
    }
    make_image(g, 1024, 0);
    off = snprintf(cmd, sizeof cmd, "'%s' '%s/lbp_peers.py' torch --image '%s' --batch %d",
                   py && *py ? py : "python3", bench_dir, pgm, batch);
    for (int k = 0; k < 3; k++) {
        /* Patina's codes of the first image, for the peer to compare with */
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
    printf("\nPeer: PyTorch on the GPU (bench/lbp_peers.py; tensor-shift implementations, CUDA events)\n");
    fflush(stdout);
    if ((p = popen(cmd, "r"))) {
        char line[1024];
        while (fgets(line, sizeof line, p)) fputs(line, stdout);
        pclose(p);
    }
    for (int k = 0; k < 3; k++) remove(maps[k]);
}

int main(int argc, char **argv)
{
    patina_pool_t *pool;
    int gpu, all_ok = 1;
    double copy_gbps = NAN;
    char pgm[256] = "";
    row_t t[3], l[3], b8[3];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--no-peers")) no_peers = 1;
        else if (!strcmp(argv[i], "--batched-only")) batched_only = 1;
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--image") && i + 1 < argc) image_path = argv[++i];
        else {
            fprintf(stderr, "usage: bench_lbp [--quick] [--no-peers] [--batched-only] [--batch N] [--threads N] [--image FILE]\n");
            return 2;
        }
    }
    if (batch < 1) batch = 1;
    {
        const char *slash = strrchr(__FILE__, '/');
        if (slash) snprintf(bench_dir, sizeof bench_dir, "%.*s", (int)(slash - __FILE__), __FILE__);
    }
    if (patina_pool_new(&pool, threads) != PATINA_OK) return 1;
    load_source();
    gpu = patina_gpu_count() > 0;
    printf("# bench_lbp: %s\n", patina_build_info());
    printf("input: %s\n", src_name);
    if (gpu) {
        char d[256];
        patina_gpu_describe(0, d, sizeof d);
        if (patina_gpu_lbp_copy_bandwidth((size_t)256 << 20, 10, &copy_gbps) != PATINA_OK) copy_gbps = NAN;
        printf("GPU: %s; device-to-device copy bandwidth %.0f GB/s\n", d, copy_gbps);
    } else {
        printf("GPU: none (GPU columns are '-'); run on a GPU machine with scripts/device.sh\n");
    }
    {
        /* the 1024^2 input, for the peers */
        uint8_t *g = malloc(1024 * 1024);
        FILE *f;
        snprintf(pgm, sizeof pgm, "%s/bench_lbp_%d.pgm", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
        make_image(g, 1024, 0);
        if ((f = fopen(pgm, "wb"))) {
            fprintf(f, "P5\n1024 1024\n255\n");
            fwrite(g, 1, 1024 * 1024, f);
            fclose(f);
        } else {
            pgm[0] = '\0';
        }
        free(g);
    }
    if (!batched_only) {
        lbp_conf_t ct = conf(LBP_KIND_TLBAP, 8, 1, 0, "1x1"), cl = conf(LBP_KIND_LANADP, 8, 1, 0, "1x1"),
                   c8 = conf(LBP_KIND_LBP8, 8, 1, 0, "1x1");
        paper_table("Table 1, TLBAP (th=0.9)", &ct, gpu, pool, t, &all_ok);
        paper_table("Table 2, LANADP", &cl, gpu, pool, l, &all_ok);
        paper_table("Also: classic 3x3 LBP (lbp8)", &c8, gpu, pool, b8, &all_ok);
        if (gpu) speedups(t, l);
    }
    if (gpu) batched(copy_gbps, &all_ok);
    if (!batched_only) {
        cpu_table(pool, *pgm ? pgm : NULL);
        if (gpu) gpu_peers(*pgm ? pgm : NULL);
    }
    if (*pgm) remove(pgm);
    printf("\nvalidation: %s\n", all_ok ? "every GPU variant matched the C reference" : "MISMATCHES (see above)");
    patina_pool_free(pool);
    free(src_grey);
    return 0;
}
