/* bench_glcm: GLCM speed, Patina's production paths beside the peers in the
 * same run (bench/glcm_peers.py: scikit-image graycomatrix on one CPU core,
 * a PyTorch bincount GLCM on the GPU, on the same images: the same integer
 * hash generates them in C and numpy).
 *
 *   CPU  ns per pixel pair, 1024^2 and 4096^2, d = 1/4, 0/45 degrees, L =
 *        8/32, slow/drastic images: C reference (1 thread), fast path (1
 *        thread, all threads), scikit-image, and scikit-image / fast.
 *   GPU  bandwidth probes; the production counting kernel on a resident
 *        image, 1024^2 .. 16384^2, one offset and 8 offsets in one pass:
 *        ms per request with requests queued back to back (throughput),
 *        GB/s of pixels and the fraction of the device-copy bandwidth, one
 *        request alone (latency: the GPU idle before it, host submission
 *        included), PyTorch and PyTorch / ours; masked requests; the
 *        production path from pinned host memory against the PCIe bound;
 *        end to end, patina_extract_batch with `glcm` on N host images of
 *        1024^2 on the GPU and on the CPU, next to the counting kernel's
 *        rate. Every GPU result is checked against the CPU counts (up to
 *        4096^2 all; larger, one offset and the 8-offset pass per image).
 * The paper's Schemes 1-3 and the kernel variants are timed by the lab
 * (lab/glcm: glcm_lab).
 *
 * Usage: bench_glcm [--quick] [--max-size N] [--no-peers] [--no-gpu] [--e2e N]
 * Never fails on timings; exits 1 only when counts differ. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchutil.h"
#include "core/internal.h"
#include "gpu/glcm.h"
#include "gpu/gpu.h"
#include "patina/glcm.h"
#include "patina/patina.h"

static int g_fail;

static const struct {
    int d, angle;
} configs[4] = {{1, 0}, {1, 45}, {4, 0}, {4, 45}};

static void same(const uint32_t *a, const uint32_t *b, size_t n, const char *what)
{
    if (memcmp(a, b, n * sizeof *a)) {
        printf("  !! counts differ: %s\n", what);
        g_fail = 1;
    }
}

/* ---------------------------------------------------------------- peers */

typedef struct peer {
    char who[8];       /* skimage, torch */
    int n, kind, L;
    char d[8];         /* "1", "4", or "1,4" with angle 8: the 8 offsets */
    int angle;
    double ms;
} peer_t;

static peer_t g_peers[512];
static size_t g_npeers;

/* Runs bench/glcm_peers.py --tsv and keeps its numbers; prints its version
 * lines and anything it says. */
static void run_peers(int quick, int max_size, int gpu)
{
    const char *py = getenv("PATINA_PYTHON");
    char script[4096], cmd[8192], line[512];
    const char *here = __FILE__, *slash = strrchr(here, '/');
    FILE *f;
    if (!py || !*py) py = "python3";
    snprintf(script, sizeof script, "bench/glcm_peers.py");
    if (!(f = fopen(script, "r"))) {
        snprintf(script, sizeof script, "%.*s/glcm_peers.py", slash ? (int)(slash - here) : 1, slash ? here : ".");
        f = fopen(script, "r");
    }
    if (!f) {
        printf("\npeers: bench/glcm_peers.py not found (run from the repository root)\n");
        return;
    }
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' '%s' --tsv --max-size %d%s%s 2>&1", py, script, max_size,
             quick ? " --quick" : "", gpu ? "" : " --no-gpu");
    printf("\npeers: %s\n", cmd);
    fflush(stdout);
    if (!(f = popen(cmd, "r"))) {
        printf("peers: cannot run the script\n");
        return;
    }
    while (fgets(line, sizeof line, f)) {
        peer_t p;
        char check[8];
        if (line[0] == '#') {
            printf("peers:%s", line + 1);
            continue;
        }
        memset(&p, 0, sizeof p);
        if (sscanf(line, "%7s %d %d %d %7s %d %lf %7s", p.who, &p.n, &p.kind, &p.L, p.d, &p.angle, &p.ms, check) ==
                8 &&
            g_npeers < sizeof g_peers / sizeof g_peers[0]) {
            if (!strcmp(check, "NO")) printf("peers: PyTorch and scikit-image counts differ: %s", line);
            g_peers[g_npeers++] = p;
        } else {
            printf("peers: %s", line);
        }
    }
    if (pclose(f) != 0) printf("peers: the script failed or is unavailable\n");
}

/* A peer's ms (-1: none). d = 0: the 8 offsets. */
static double peer_ms(const char *who, int n, int kind, int L, int d, int angle)
{
    char ds[8];
    snprintf(ds, sizeof ds, "%s", d ? (d == 1 ? "1" : "4") : "1,4");
    for (size_t i = 0; i < g_npeers; i++) {
        const peer_t *p = &g_peers[i];
        if (!strcmp(p->who, who) && p->n == n && p->kind == kind && p->L == L && !strcmp(p->d, ds) &&
            p->angle == (d ? angle : 8))
            return p->ms;
    }
    return -1;
}

static void print_ms(double ms, const char *fmt)
{
    if (ms > 0)
        printf(fmt, ms);
    else
        printf("-");
}

/* ---------------------------------------------------------------- CPU */

static void bench_cpu(int quick)
{
    static const int sizes[] = {1024, 4096};
    uint32_t *c = malloc(8 * 32 * 32 * sizeof *c);
    printf("\n## CPU: ns per pixel pair (threads: %d)\n\n", patina_cpu_count());
    printf("| size | image | L | d | angle | C reference, 1 thread | fast, 1 thread | fast, %d threads | "
           "scikit-image, 1 core | scikit-image / fast, 1 thread |\n",
           patina_cpu_count());
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t si = 0; si < (quick ? 1u : 2u); si++) {
        const int n = sizes[si];
        uint8_t *v = malloc((size_t)n * n), *q = malloc((size_t)n * n);
        for (int kind = 0; kind < 2; kind++) {
            bench_glcm_image(v, n, kind);
            for (int L = 8; L <= 32; L *= 4) {
                patina_glcm_quantize(q, v, (size_t)n * n, L, PATINA_GLCM_QUANT_UNIFORM);
                for (int ci = 0; ci < 4; ci++) {
                    patina_glcm_offset_t o = patina_glcm_offset(configs[ci].d, configs[ci].angle);
                    double best[3] = {1e9, 1e9, 1e9};
                    const double pairs = (double)(n - abs(o.dy)) * (double)(n - abs(o.dx));
                    const double sk = peer_ms("skimage", n, kind, L, configs[ci].d, configs[ci].angle);
                    for (int rep = 0; rep < 3; rep++) {
                        double t0 = patina_now();
                        patina_glcm_counts_ref(c, q, n, n, (size_t)n, NULL, 0, L, &o, 1, 0);
                        double t1 = patina_now();
                        patina_glcm_counts(c, q, n, n, (size_t)n, NULL, 0, L, &o, 1, 0, 1);
                        double t2 = patina_now();
                        patina_glcm_counts(c, q, n, n, (size_t)n, NULL, 0, L, &o, 1, 0, 0);
                        double t3 = patina_now();
                        if (t1 - t0 < best[0]) best[0] = t1 - t0;
                        if (t2 - t1 < best[1]) best[1] = t2 - t1;
                        if (t3 - t2 < best[2]) best[2] = t3 - t2;
                    }
                    printf("| %d² | %s | %d | %d | %d | %.2f | %.2f | %.3f | ", n, bench_glcm_kind_name(kind), L,
                           configs[ci].d, configs[ci].angle, best[0] * 1e9 / pairs, best[1] * 1e9 / pairs,
                           best[2] * 1e9 / pairs);
                    print_ms(sk > 0 ? sk * 1e6 / pairs : -1, "%.2f");
                    printf(" | ");
                    print_ms(sk > 0 ? sk * 1e-3 / best[1] : -1, "%.1f×");
                    printf(" |\n");
                }
            }
        }
        free(v);
        free(q);
    }
    free(c);
}

/* ---------------------------------------------------------------- GPU */

static patina_gpu_grey_t grey(const uint8_t *q, int n, const uint8_t *mask)
{
    patina_gpu_grey_t g;
    memset(&g, 0, sizeof g);
    g.q = q;
    g.w = n;
    g.h = n;
    g.stride = (size_t)n;
    g.mask = mask;
    g.mstride = mask ? (size_t)n : 0;
    return g;
}

/* The production kernel on a resident n x n image: the timing of one
 * request (NULL on failure). */
static int time_prod(patina_gpu_t *g, pgpu_glcm_timing_t *t, uint32_t *counts, const uint8_t *q, int n, int L,
                     const patina_glcm_offset_t *off, size_t noff, const uint8_t *mask, int reps)
{
    const patina_gpu_grey_t im = grey(q, n, mask);
    memset(t, 0, sizeof *t);
    t->reps = reps;
    if (pgpu_glcm_time(g, NULL, t, counts, &im, 1, L, off, noff, 0) != PATINA_OK) {
        printf("  (timing failed: %s)\n", patina_last_error());
        g_fail = 1;
        return 0;
    }
    return 1;
}

static void row(int n, int kind, int L, const char *offsets, const pgpu_glcm_timing_t *t, double d2d, double peer)
{
    const double gbs = t->ms_stream > 0 ? (double)n * n / (t->ms_stream * 1e-3) / 1e9 : 0;
    printf("| %d² | %s | %d | %s | %s | %.4f | %.0f | %.0f%% | %.4f | ", n, bench_glcm_kind_name(kind), L, offsets,
           t->kernel, t->ms_stream, gbs, d2d > 0 ? 100.0 * gbs / d2d : 0.0, t->ms_single);
    print_ms(peer, "%.4f");
    printf(" | ");
    print_ms(peer > 0 && t->ms_stream > 0 ? peer / t->ms_stream : -1, "%.1f×");
    printf(" |\n");
}

/* Masked requests as the families run them (disk mask over 64% of the
 * pixels, a PyRadiomics-style region; drastic image): the mask in bit 7
 * where the kernel reads it, else a sentinel level. */
static void bench_masked(patina_gpu_t *g, const uint8_t *q, int n, int L, double d2d)
{
    const size_t N = (size_t)n * n;
    uint8_t *mask = malloc(N);
    uint32_t *c = malloc(8 * (size_t)L * L * 4), *r = malloc(8 * (size_t)L * L * 4);
    patina_glcm_offset_t off[8];
    if (!mask || !c || !r) goto done;
    for (int y = 0; y < n; y++)
        for (int x = 0; x < n; x++) {
            const double dy = y - (n - 1) / 2.0, dx = x - (n - 1) / 2.0, rad = 0.45 * n;
            mask[(size_t)y * n + x] = dy * dy + dx * dx <= rad * rad;
        }
    for (int d = 0; d < 2; d++)
        for (int a = 0; a < 4; a++) off[d * 4 + a] = patina_glcm_offset(d ? 4 : 1, 45.0 * a);
    for (int set = 0; set < 3; set++) {
        const patina_glcm_offset_t *o = set == 0 ? off : set == 1 ? &off[0] : &off[5];
        const size_t noff = set == 0 ? 8 : 1;
        pgpu_glcm_timing_t t;
        char what[96];
        if (!time_prod(g, &t, c, q, n, L, o, noff, mask, n <= 4096 ? 20 : 7)) continue;
        patina_glcm_counts(r, q, n, n, (size_t)n, mask, (size_t)n, L, o, noff, 0, 0);
        snprintf(what, sizeof what, "masked, %zu offsets, L=%d vs CPU", noff, L);
        same(c, r, noff * (size_t)L * L, what);
        snprintf(what, sizeof what, "%s, disk mask (counted at %d levels)",
                 set == 0 ? "8 (d=1,4 × 0,45,90,135°)" : set == 1 ? "d=1, 0°" : "d=4, 45°", t.levels_counted);
        row(n, 1, L, what, &t, d2d, -1);
    }
done:
    free(mask);
    free(c);
    free(r);
}

/* patina_extract_batch with `glcm` (32 levels, d = 1, 4 angles, symmetric)
 * on N RGB host images of 1024^2, GPU and CPU, against the counting kernel
 * alone on the images a 32 MiB slot holds. */
static void bench_e2e(patina_gpu_t *g, int nimg)
{
    enum { S = 1024 };
    patina_image_t *imgs = calloc((size_t)nimg, sizeof *imgs);
    patina_status *st = calloc((size_t)nimg, sizeof *st);
    patina_context_t *ctx = NULL;
    patina_extractor_t *ex = NULL;
    double *out = NULL, t_gpu = -1, t_cpu = -1, kern = -1;
    int k = (int)(((size_t)32 << 20) / (((size_t)S + 15) / 16 * 16 + 32) / S), ok = 1;
    pgpu_glcm_timing_t t;
    printf("\n### End to end: patina_extract_batch, `glcm` (levels 32, d = 1, 4 angles), %d host RGB images of "
           "%d²\n\n", nimg, S);
    if (!imgs || !st || patina_context_new(&ctx, NULL) != PATINA_OK || patina_extractor_new(&ex, "glcm") != PATINA_OK) {
        printf("(setup failed: %s)\n", patina_last_error());
        goto done;
    }
    out = malloc((size_t)nimg * patina_extractor_dim(ex) * sizeof *out);
    for (int i = 0; i < nimg && ok; i++) {
        if (patina_image_init(&imgs[i], S, S) != PATINA_OK) {
            ok = 0;
            break;
        }
        for (int y = 0; y < S; y++)
            for (int x = 0; x < 3 * S; x++)
                imgs[i].data[(size_t)y * imgs[i].stride + (size_t)x] =
                    (uint8_t)(bench_glcm_hash((uint32_t)(x + 7 * i), (uint32_t)(y + 131 * i)) >> (i % 2 ? 24 : 29)
                              << (i % 2 ? 0 : 5));
    }
    if (!ok || !out) {
        printf("(no memory for %d images)\n", nimg);
        goto done;
    }
    for (int dev = 0; dev < 2; dev++) {
        const patina_device d = dev ? PATINA_DEVICE_CPU : PATINA_DEVICE_GPU;
        double best = 1e30;
        if (patina_extract_batch(ctx, ex, d, out, imgs, 2, st) != PATINA_OK) { /* warm-up */
            printf("(%s: %s)\n", dev ? "cpu" : "gpu", patina_last_error());
            continue;
        }
        for (int rep = 0; rep < 3; rep++) {
            const double t0 = patina_now();
            patina_status s = patina_extract_batch(ctx, ex, d, out, imgs, (size_t)nimg, st);
            const double t1 = patina_now();
            if (s != PATINA_OK) {
                printf("(%s: %s)\n", dev ? "cpu" : "gpu", patina_last_error());
                break;
            }
            if (t1 - t0 < best) best = t1 - t0;
        }
        if (best < 1e30) *(dev ? &t_cpu : &t_gpu) = best;
    }
    { /* the counting kernel alone: k images (a slot's worth) resident, launches back to back */
        patina_gpu_grey_t *gi = calloc((size_t)k, sizeof *gi);
        uint8_t *q = patina_gpu_host_alloc((size_t)k * S * S);
        uint32_t *c = malloc((size_t)k * 4 * 32 * 32 * 4);
        patina_glcm_offset_t off[4];
        if (k > nimg) k = nimg;
        for (int a = 0; a < 4; a++) off[a] = patina_glcm_offset(1, 45.0 * a);
        for (int i = 0; gi && q && i < k; i++) {
            uint8_t *qi = q + (size_t)i * S * S;
            patina_image_to_grey(qi, &imgs[i]);
            patina_glcm_quantize(qi, qi, (size_t)S * S, 32, PATINA_GLCM_QUANT_UNIFORM);
            gi[i] = grey(qi, S, NULL);
        }
        memset(&t, 0, sizeof t);
        t.reps = 20;
        if (gi && q && c && pgpu_glcm_time(g, NULL, &t, c, gi, (size_t)k, 32, off, 4, 1) == PATINA_OK)
            kern = t.ms_stream;
        else
            printf("(kernel timing failed: %s)\n", patina_last_error());
        free(gi);
        patina_gpu_host_free(q);
        free(c);
    }
    printf("| GPU, patina_extract_batch | CPU, patina_extract_batch (%d threads) | GPU counting kernel alone (%s, %d "
           "images per launch) |\n|---|---|---|\n",
           patina_cpu_count(), kern > 0 ? t.kernel : "-", k);
    printf("| ");
    print_ms(t_gpu > 0 ? nimg / t_gpu : -1, "%.0f images/s");
    printf(" | ");
    print_ms(t_cpu > 0 ? nimg / t_cpu : -1, "%.0f images/s");
    printf(" | ");
    print_ms(kern > 0 ? k / (kern * 1e-3) : -1, "%.0f images/s");
    printf(" |\n\nThe GPU path makes the grey levels on the host (the context's threads, into pinned staging, "
           "while the previous batch counts), copies 1 byte per pixel and returns 10 properties per offset.\n");
done:
    for (int i = 0; imgs && i < nimg; i++) patina_image_release(&imgs[i]);
    free(imgs);
    free(st);
    free(out);
    patina_extractor_free(ex);
    patina_context_free(ctx);
}

static void bench_gpu(int quick, int max_size, int e2e)
{
    static const int sizes[] = {1024, 4096, 8192, 16384};
    double d2d = 0, h2d = 0;
    patina_gpu_t *g = NULL;
    char desc[256];
    if (patina_gpu_open(&g, 0, 0) != PATINA_OK) {
        printf("\n## GPU: unavailable (%s)\n", patina_last_error());
        return;
    }
    patina_gpu_describe(0, desc, sizeof desc);
    if (patina_gpu__bandwidth(g, 1, (size_t)256 << 20, 5, &d2d) != PATINA_OK ||
        patina_gpu__bandwidth(g, 0, (size_t)256 << 20, 5, &h2d) != PATINA_OK)
        printf("bandwidth probe failed: %s\n", patina_last_error());
    printf("\n## GPU: %s\n\nmeasured: device copy %.0f GB/s (read + write), pinned host-to-device %.1f GB/s "
           "(best of 5 copies of 256 MiB)\n",
           desc, d2d, h2d);

    printf("\n### Counting kernel, image resident: ms per request with requests queued back to back; GB/s = "
           "pixels / time; one request alone (latency); PyTorch bincount in the same run\n\n");
    printf("| size | image | L | offsets | kernel | ms | GB/s | %% of copy bw | one request alone, ms | PyTorch ms | "
           "PyTorch / ours |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t si = 0; si < 4; si++) {
        const int n = sizes[si];
        const size_t N = (size_t)n * n;
        const int reps = n <= 4096 ? 20 : 7;
        uint8_t *v, *q;
        uint32_t *a = malloc(8 * 32 * 32 * 4), *b = malloc(8 * 32 * 32 * 4);
        if (n > max_size || (quick && n > 4096)) {
            free(a);
            free(b);
            break;
        }
        v = malloc(N);
        q = patina_gpu_host_alloc(N);
        if (!v || !q || !a || !b) {
            printf("  (no memory for %d²)\n", n);
            free(v);
            patina_gpu_host_free(q);
            free(a);
            free(b);
            break;
        }
        for (int kind = 0; kind < 2; kind++) {
            bench_glcm_image(v, n, kind);
            for (int L = 8; L <= 32; L *= 4) {
                patina_glcm_quantize(q, v, N, L, PATINA_GLCM_QUANT_UNIFORM);
                for (int ci = 0; ci <= 4; ci++) { /* 4: the 8 offsets of 2 distances x 4 angles, one pass */
                    patina_glcm_offset_t off[8];
                    const size_t noff = ci < 4 ? 1 : 8;
                    pgpu_glcm_timing_t t;
                    char what[64];
                    if (ci < 4)
                        off[0] = patina_glcm_offset(configs[ci].d, configs[ci].angle);
                    else
                        for (int d = 0; d < 2; d++)
                            for (int an = 0; an < 4; an++) off[d * 4 + an] = patina_glcm_offset(d ? 4 : 1, 45.0 * an);
                    if (!time_prod(g, &t, b, q, n, L, off, noff, NULL, reps)) continue;
                    if (n <= 4096 || ci == 0 || ci == 4) {
                        patina_glcm_counts(a, q, n, n, (size_t)n, NULL, 0, L, off, noff, 0, 0);
                        snprintf(what, sizeof what, "%d² %s L=%d set %d vs CPU", n, bench_glcm_kind_name(kind), L, ci);
                        same(b, a, noff * (size_t)L * L, what);
                    }
                    if (ci < 4)
                        snprintf(what, sizeof what, "d=%d, %d°", configs[ci].d, configs[ci].angle);
                    else
                        snprintf(what, sizeof what, "8 (d=1,4 × 0,45,90,135°)");
                    row(n, kind, L, what, &t, d2d,
                        peer_ms("torch", n, kind, L, ci < 4 ? configs[ci].d : 0, ci < 4 ? configs[ci].angle : 8));
                }
                if (kind == 1 && (n == 16384 || n == max_size || (quick && n == 4096))) bench_masked(g, q, n, L, d2d);
            }
        }
        free(v);
        patina_gpu_host_free(q);
        free(a);
        free(b);
    }

    printf("\n### From pinned host memory (patina_gpu_glcm_counts, d=1, 0°, L=32, slow image), ms (median)\n\n");
    printf("| size | production | PCIe bound (bytes / H2D GB/s) | production / bound |\n|---|---|---|---|\n");
    for (size_t si = 0; si < 4; si++) {
        const int n = sizes[si];
        const size_t N = (size_t)n * n;
        const int reps = n <= 4096 ? 10 : 5;
        const patina_glcm_offset_t o = {0, 1};
        uint8_t *v, *q;
        uint32_t a[32 * 32], b[32 * 32];
        double ts[10], ms, bound;
        patina_gpu_grey_t im;
        if (n > max_size || (quick && n > 4096)) break;
        v = malloc(N);
        q = patina_gpu_host_alloc(N);
        if (!v || !q) {
            free(v);
            patina_gpu_host_free(q);
            break;
        }
        bench_glcm_image(v, n, 0);
        patina_glcm_quantize(q, v, N, 32, PATINA_GLCM_QUANT_UNIFORM);
        im = grey(q, n, NULL);
        for (int rep = -1; rep < reps; rep++) {
            const double t0 = patina_now();
            if (patina_gpu_glcm_counts(g, b, &im, 1, 32, &o, 1, 0) != PATINA_OK) {
                printf("  (failed: %s)\n", patina_last_error());
                g_fail = 1;
                break;
            }
            if (rep >= 0) ts[rep] = (patina_now() - t0) * 1e3;
        }
        ms = bench_median(ts, reps);
        patina_glcm_counts(a, q, n, n, (size_t)n, NULL, 0, 32, &o, 1, 0, 0);
        same(a, b, 32 * 32, "from pinned memory vs CPU");
        bound = h2d > 0 ? (double)N / (h2d * 1e9) * 1e3 : 0;
        printf("| %d² | %.3f | %.3f | %.2f |\n", n, ms, bound, bound > 0 ? ms / bound : 0);
        free(v);
        patina_gpu_host_free(q);
    }
    if (e2e > 0) bench_e2e(g, e2e);
    patina_gpu_close(g);
}

int main(int argc, char **argv)
{
    int quick = 0, peers = 1, gpu = 1, max_size = 16384, e2e = 128;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--no-peers")) peers = 0;
        else if (!strcmp(argv[i], "--no-gpu")) gpu = 0;
        else if (!strcmp(argv[i], "--max-size") && i + 1 < argc) max_size = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--e2e") && i + 1 < argc) e2e = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_glcm [--quick] [--max-size N] [--no-peers] [--no-gpu] [--e2e N]\n");
            return 2;
        }
    }
    if (quick && e2e > 32) e2e = 32;
    printf("# bench_glcm (%s)\n", patina_build_info());
    if (peers) run_peers(quick, max_size, gpu && patina_gpu_count() > 0);
    bench_cpu(quick);
    if (gpu && patina_gpu_count() > 0)
        bench_gpu(quick, max_size, e2e);
    else
        printf("\n## GPU: none here (%s)\n", gpu ? "no usable CUDA device" : "--no-gpu");
    if (g_fail) printf("\nFAILED: some GPU counts differ from the CPU's\n");
    return g_fail;
}
