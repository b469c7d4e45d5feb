/* bench_glcm: the tables of Hong, Zheng & Pan (../shared/papers/glcm-cuda.txt)
 * and the targets, with the peers in the same run.
 *
 *   CPU    C reference (1 thread), fast path (1 thread, all threads):
 *          ns per pixel pair, 1024^2 and 4096^2, the paper's configurations.
 *   GPU    bandwidth probes (device copy, pinned host-to-device);
 *          Table II  - Scheme 1 (global atomics), kernel ms;
 *          Table III - Scheme 2 (privatised sub-GLCMs) and the production
 *                      kernel, 1024^2 .. 16384^2, levels 8/32, d = 1/4,
 *                      0/45 degrees, slow / drastic grey-level changes, with
 *                      GB/s and the fraction of the device-copy bandwidth;
 *          one pass over 4 angles x 2 distances, and the same under a
 *          mask (drastic image);
 *          Table 3   - Scheme 3 transfer and compute times, overlapped time,
 *                      and the production path from pinned host memory
 *                      against the PCIe bound.
 *          Every GPU result is checked against the CPU counts (sizes up to
 *          4096^2: every configuration; larger: d=1, 0 degrees).
 *   Peers  bench/glcm_peers.py: scikit-image graycomatrix (CPU, one core)
 *          and a PyTorch bincount GLCM (GPU) on the same images (the same
 *          integer hash generates them in C and numpy).
 *
 * Focused mode (--focus): the production kernel only (image resident), for
 * the sizes, images, levels and offset sets given, under each variant of
 * --variants (';'-separated lists of NAME=VALUE environment settings read
 * by the lab: PATINA_GLCM_K2, PATINA_GLCM_SPLIT, PATINA_GLCM_TASKPX,
 * PATINA_GLCM_TASKMIN; "-" = defaults), every result checked against the
 * CPU counts.
 *
 * Usage: bench_glcm [--quick] [--max-size N] [--no-peers] [--no-gpu]
 *                   [--focus [--sizes A,B] [--kinds 0,1] [--levels 8,32]
 *                    [--sets 1,2,8] [--reps R] [--variants 'K2=0,TASKPX=65536;K2=1;...']]
 * Never fails on timings; exits 1 only when counts differ. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "gpu/gpu.h"
#include "patina/glcm.h"
#include "patina/patina.h"

static int g_fail;

/* The generator bench/glcm_peers.py reproduces: kind 0 "slow" (a ramp plus
 * small noise: long runs of one pair, heavy atomic contention), kind 1
 * "drastic" (hash noise: pairs spread over the whole matrix). */
static uint32_t mix(uint32_t x, uint32_t y)
{
    uint32_t h = (x * 0x9E3779B1u) ^ (y * 0x85EBCA77u);
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    h ^= h >> 12;
    return h;
}

static void generate(uint8_t *v, int n, int kind)
{
    for (int y = 0; y < n; y++)
        for (int x = 0; x < n; x++) {
            uint32_t h = mix((uint32_t)x, (uint32_t)y);
            int val;
            if (kind == 1) {
                val = (int)(h >> 24);
            } else {
                val = (int)(((uint64_t)x + 2u * (uint64_t)y) * 255u / (3u * (uint64_t)n)) +
                      (int)(h >> 30) - 1;
                val = val < 0 ? 0 : val > 255 ? 255 : val;
            }
            v[(size_t)y * (size_t)n + (size_t)x] = (uint8_t)val;
        }
}

static const struct {
    int d, angle;
} configs[4] = {{1, 0}, {1, 45}, {4, 0}, {4, 45}};

static const char *kind_name(int k) { return k ? "drastic" : "slow"; }

static void same(const uint32_t *a, const uint32_t *b, size_t n, const char *what)
{
    if (memcmp(a, b, n * sizeof *a)) {
        printf("  !! counts differ: %s\n", what);
        g_fail = 1;
    }
}

/* ---------------------------------------------------------------- CPU */

static void bench_cpu(int quick)
{
    static const int sizes[] = {1024, 4096};
    uint32_t *c = malloc(8 * 32 * 32 * sizeof *c);
    printf("\n## CPU: ns per pixel pair (threads: %d)\n\n", patina_cpu_count());
    printf("| size | image | L | d | angle | C reference, 1 thread | fast, 1 thread | fast, %d threads |\n",
           patina_cpu_count());
    printf("|---|---|---|---|---|---|---|---|\n");
    for (size_t si = 0; si < (quick ? 1u : 2u); si++) {
        const int n = sizes[si];
        uint8_t *v = malloc((size_t)n * n), *q = malloc((size_t)n * n);
        for (int kind = 0; kind < 2; kind++) {
            generate(v, n, kind);
            for (int L = 8; L <= 32; L *= 4) {
                patina_glcm_quantize(q, v, (size_t)n * n, L, PATINA_GLCM_QUANT_UNIFORM);
                for (int ci = 0; ci < 4; ci++) {
                    patina_glcm_offset_t o = patina_glcm_offset(configs[ci].d, configs[ci].angle);
                    double best[3] = {1e9, 1e9, 1e9};
                    const double pairs = (double)(n - abs(o.dy)) * (double)(n - abs(o.dx));
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
                    printf("| %d² | %s | %d | %d | %d | %.2f | %.2f | %.3f |\n", n, kind_name(kind), L,
                           configs[ci].d, configs[ci].angle, best[0] * 1e9 / pairs,
                           best[1] * 1e9 / pairs, best[2] * 1e9 / pairs);
                }
            }
        }
        free(v);
        free(q);
    }
    free(c);
}

/* ---------------------------------------------------------------- GPU */

static double lab(int scheme, uint32_t *counts, const uint8_t *q, int n, int L,
                  const patina_glcm_offset_t *off, size_t noff, int reps, int tiles,
                  patina_glcm_lab_t *out)
{
    patina_glcm_lab_t l = {0};
    memset(&l, 0, sizeof l);
    l.scheme = scheme;
    l.reps = reps;
    l.tiles = tiles;
    if (patina_gpu__glcm_lab(&l, counts, q, n, n, (size_t)n, L, off, noff, 0) != PATINA_OK) {
        printf("  (scheme %d failed: %s)\n", scheme, patina_last_error());
        return -1;
    }
    if (out) *out = l;
    return l.ms;
}

/* A masked request as the GPU family path (patina_gpu_glcm_family) runs
 * it: pixels outside the mask get the sentinel level L, the counts are made
 * with L1 = L + 1 levels (rounded up to a power of two when that is <= 32,
 * so the fast kernels take it) and the L x L blocks are the answer; at L =
 * 32, where k_count4 (several offsets) or k_count3 (one) counts, the pixels
 * outside get bit 7 instead and are skipped (32 levels); for one offset the
 * sentinel's time (33 levels, k_count2) is printed as well. Timed: the
 * counting kernel (the host's sentinel or flag pass and the block
 * extraction are not). Mask: a centred disk of radius 0.45 n (64% of the
 * pixels), a PyRadiomics-style region. Checked against the CPU's masked
 * counts. */
static int g_mask_kind; /* PATINA_BENCH_MASK: 0 disk, 1 all inside, 2 all outside (experiments) */

static void bench_masked(const uint8_t *q, int n, int L, const patina_glcm_offset_t *off, int noff,
                         const char *what, int reps, double d2d)
{
    const size_t N = (size_t)n * n;
    int L1 = L + 1;
    double sentinel_ms = -1;
    if (getenv("PATINA_BENCH_MASK")) g_mask_kind = atoi(getenv("PATINA_BENCH_MASK"));
    if (L1 <= 32)
        for (int p = 2;; p *= 2)
            if (p >= L1) {
                L1 = p;
                break;
            }
    uint8_t *mask = malloc(N), *qm = patina_gpu_host_alloc(N);
    uint32_t *c1 = malloc((size_t)noff * L1 * L1 * 4), *c = malloc((size_t)noff * L * L * 4),
             *r = malloc((size_t)noff * L * L * 4), *c2 = malloc((size_t)(L + 1) * (L + 1) * 4);
    size_t inside = 0;
    if (!mask || !qm || !c1 || !c || !r || !c2) {
        printf("  (no memory for the masked request)\n");
        goto done;
    }
    for (int y = 0; y < n; y++)
        for (int x = 0; x < n; x++) {
            const double dy = y - (n - 1) / 2.0, dx = x - (n - 1) / 2.0, rad = 0.45 * n;
            const size_t i = (size_t)y * n + x;
            mask[i] = g_mask_kind == 1 ? 1 : g_mask_kind == 2 ? 0 : dy * dy + dx * dx <= rad * rad;
            inside += mask[i];
            qm[i] = mask[i] ? q[i] : (uint8_t)(q[i] | 0x80u);
        }
    double ms = -1;
    const char *how = "";
    if (L == 32) { /* the mask in bit 7 */
        patina_glcm_lab_t l;
        memset(&l, 0, sizeof l);
        l.scheme = 4;
        l.reps = reps;
        l.flags = 1;
        if (patina_gpu__glcm_lab(&l, c1, qm, n, n, (size_t)n, L, off, (size_t)noff, 0) == PATINA_OK) {
            ms = l.ms;
            L1 = L;
            how = "mask in bit 7, ";
        }
    }
    if (ms < 0 || noff == 1) { /* the sentinel level (one offset: for comparison) */
        uint32_t *cs = ms < 0 ? c1 : c2;
        const int Ls = ms < 0 ? L1 : L + 1;
        for (size_t i = 0; i < N; i++)
            if (!mask[i]) qm[i] = (uint8_t)L;
        const double t = lab(4, cs, qm, n, Ls, off, (size_t)noff, reps, 0, NULL);
        if (ms < 0) {
            ms = t;
        } else {
            sentinel_ms = t;
            for (int i = 0; i < L; i++) /* the sentinel's L x L block: the same counts */
                if (memcmp(c1 + (size_t)i * L, cs + (size_t)i * Ls, (size_t)L * 4)) {
                    printf("MISMATCH: masked, bit 7 vs sentinel level, row %d\n", i);
                    g_fail = 1;
                    break;
                }
        }
    }
    for (int o = 0; o < noff; o++)
        for (int i = 0; i < L; i++)
            memmove(c + ((size_t)o * L + i) * L, c1 + ((size_t)o * L1 + i) * L1, (size_t)L * 4);
    patina_glcm_counts(r, q, n, n, (size_t)n, mask, (size_t)n, L, off, (size_t)noff, 0, 0);
    same(c, r, (size_t)noff * L * L, noff == 1 ? "masked, one offset vs CPU" : "masked, 8 offsets vs CPU");
    printf("| %d² | drastic | %d | %s, disk mask (%.0f%% of the pixels), %scounted at %d levels", n, L, what,
           100.0 * inside / N, how, L1);
    if (sentinel_ms > 0) printf("; with the sentinel level (%d levels): %.4f ms", L + 1, sentinel_ms);
    printf(" | | | %.4f | %.0f | %.0f%% |\n", ms, ms > 0 ? (double)N / (ms * 1e-3) / 1e9 : 0,
           ms > 0 && d2d > 0 ? 100.0 * (double)N / (ms * 1e-3) / 1e9 / d2d : 0);
done:
    free(mask);
    patina_gpu_host_free(qm);
    free(c1);
    free(c);
    free(r);
    free(c2);
}

static void bench_gpu(int quick, int max_size)
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
    if (patina_gpu__glcm_bandwidth(&d2d, &h2d, (size_t)256 << 20) != PATINA_OK)
        printf("bandwidth probe failed: %s\n", patina_last_error());
    printf("\n## GPU: %s\n\nmeasured: device copy %.0f GB/s (read + write), pinned host-to-device %.1f GB/s\n",
           desc, d2d, h2d);

    /* Table II: Scheme 1 on 1024^2 (the paper: GTX 1050 Ti, 0.27 - 0.96 ms). */
    {
        const int n = 1024;
        uint8_t *v = patina_gpu_host_alloc((size_t)n * n), *q = patina_gpu_host_alloc((size_t)n * n);
        uint32_t *a = malloc(32 * 32 * 4), *b = malloc(32 * 32 * 4);
        printf("\n### Table II: Scheme 1 (global atomics), %d², kernel ms (median of 20)\n\n", n);
        printf("| image | L | d=1, 0° | d=1, 45° | d=4, 0° | d=4, 45° |\n|---|---|---|---|---|---|\n");
        for (int kind = 0; kind < 2; kind++) {
            generate(v, n, kind);
            for (int L = 8; L <= 32; L *= 4) {
                patina_glcm_quantize(q, v, (size_t)n * n, L, PATINA_GLCM_QUANT_UNIFORM);
                printf("| %s | %d |", kind_name(kind), L);
                for (int ci = 0; ci < 4; ci++) {
                    patina_glcm_offset_t o = patina_glcm_offset(configs[ci].d, configs[ci].angle);
                    double ms = lab(1, b, q, n, L, &o, 1, 20, 0, NULL);
                    patina_glcm_counts(a, q, n, n, (size_t)n, NULL, 0, L, &o, 1, 0, 0);
                    same(b, a, (size_t)L * L, "scheme 1");
                    printf(" %.3f |", ms);
                }
                printf("\n");
            }
        }
        patina_gpu_host_free(v);
        patina_gpu_host_free(q);
        free(a);
        free(b);
    }

    /* Table III: Scheme 2 and the production kernel, every size. */
    printf("\n### Table III: kernel ms (median), image resident; production GB/s = pixels read / time, "
           "%% of the device-copy bandwidth\n\n");
    printf("| size | image | L | d | angle | Scheme 1 | Scheme 2 | production | prod. GB/s | %% of copy bw |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t si = 0; si < 4; si++) {
        const int n = sizes[si];
        const size_t N = (size_t)n * n;
        const int reps = n <= 4096 ? 20 : 5;
        uint8_t *v, *q;
        uint32_t *a, *b;
        if (n > max_size || (quick && n > 4096)) break;
        a = malloc(8 * 32 * 32 * 4);
        b = malloc(8 * 32 * 32 * 4);
        v = patina_gpu_host_alloc(N);
        q = patina_gpu_host_alloc(N);
        if (!v || !q) {
            printf("  (no pinned memory for %d²)\n", n);
            patina_gpu_host_free(v);
            patina_gpu_host_free(q);
            free(a);
            free(b);
            break;
        }
        for (int kind = 0; kind < 2; kind++) {
            generate(v, n, kind);
            for (int L = 8; L <= 32; L *= 4) {
                patina_glcm_quantize(q, v, N, L, PATINA_GLCM_QUANT_UNIFORM);
                for (int ci = 0; ci < 4; ci++) {
                    patina_glcm_offset_t o = patina_glcm_offset(configs[ci].d, configs[ci].angle);
                    double s1 = n <= 4096 || ci == 0 ? lab(1, b, q, n, L, &o, 1, reps, 0, NULL) : -1;
                    double s2 = lab(2, b, q, n, L, &o, 1, reps, 0, NULL);
                    uint32_t *bp = b + 32 * 32;
                    double pr = lab(4, bp, q, n, L, &o, 1, reps, 0, NULL);
                    double gbs = pr > 0 ? (double)N / (pr * 1e-3) / 1e9 : 0;
                    same(b, bp, (size_t)L * L, "scheme 2 vs production");
                    if (n <= 4096 || ci == 0) {
                        patina_glcm_counts(a, q, n, n, (size_t)n, NULL, 0, L, &o, 1, 0, 0);
                        same(bp, a, (size_t)L * L, "production vs CPU");
                    }
                    if (s1 >= 0)
                        printf("| %d² | %s | %d | %d | %d | %.3f | %.3f | %.4f | %.0f | %.0f%% |\n", n,
                               kind_name(kind), L, configs[ci].d, configs[ci].angle, s1, s2, pr, gbs,
                               d2d > 0 ? 100.0 * gbs / d2d : 0.0);
                    else
                        printf("| %d² | %s | %d | %d | %d | - | %.3f | %.4f | %.0f | %.0f%% |\n", n,
                               kind_name(kind), L, configs[ci].d, configs[ci].angle, s2, pr, gbs,
                               d2d > 0 ? 100.0 * gbs / d2d : 0.0);
                }
                if (n == 16384 || (n == max_size)) { /* all offsets of a request in one pass */
                    patina_glcm_offset_t off[8];
                    patina_glcm_lab_t l = {0};
                    uint32_t *m = malloc(8 * (size_t)L * L * 4), *r = malloc(8 * (size_t)L * L * 4);
                    for (int d = 0; d < 2; d++)
                        for (int t = 0; t < 4; t++) off[d * 4 + t] = patina_glcm_offset(d ? 4 : 1, 45.0 * t);
                    double ms = lab(4, m, q, n, L, off, 8, reps, 0, &l);
                    printf("| %d² | %s | %d | 1,4 | 0,45,90,135 (8 offsets, %d launch%s, R=%d) | | | %.4f | %.0f | %.0f%% |\n",
                           n, kind_name(kind), L, l.tiles, l.tiles == 1 ? "" : "es", l.copies, ms,
                           ms > 0 ? (double)N / (ms * 1e-3) / 1e9 : 0,
                           ms > 0 && d2d > 0 ? 100.0 * (double)N / (ms * 1e-3) / 1e9 / d2d : 0);
                    if (kind == 0 && L == 32) {
                        patina_glcm_counts(r, q, n, n, (size_t)n, NULL, 0, L, off, 8, 0, 0);
                        same(m, r, 8 * (size_t)L * L, "8 offsets in one pass vs CPU");
                    }
                    if (kind == 1) {
                        bench_masked(q, n, L, off, 8, "1,4 | 0,45,90,135 (8 offsets)", reps, d2d);
                        bench_masked(q, n, L, &off[0], 1, "1 | 0", reps, d2d);
                        bench_masked(q, n, L, &off[5], 1, "4 | 45", reps, d2d);
                    }
                    free(m);
                    free(r);
                }
            }
        }
        patina_gpu_host_free(v);
        patina_gpu_host_free(q);
        free(a);
        free(b);
    }

    /* Table 3: Scheme 3 transfer / compute, and the production path from pinned memory. */
    printf("\n### Table 3: transfer and compute (d=1, 0°, L=32, slow image), ms\n\n");
    printf("| size | Scheme 3 copies alone | Scheme 3 kernels alone | Scheme 3 overlapped (K=8) | "
           "production from pinned host | PCIe bound (bytes / H2D GB/s) | production / bound |\n");
    printf("|---|---|---|---|---|---|---|\n");
    for (size_t si = 0; si < 4; si++) {
        const int n = sizes[si];
        const size_t N = (size_t)n * n;
        uint8_t *v, *q;
        uint32_t *a = malloc(32 * 32 * 4), *b = malloc(32 * 32 * 4);
        patina_glcm_offset_t o = {0, 1};
        patina_glcm_lab_t l3 = {0};
        double p5, bound;
        if (n > max_size || (quick && n > 4096)) {
            free(a);
            free(b);
            break;
        }
        v = patina_gpu_host_alloc(N);
        q = patina_gpu_host_alloc(N);
        if (!v || !q) {
            patina_gpu_host_free(v);
            patina_gpu_host_free(q);
            free(a);
            free(b);
            break;
        }
        generate(v, n, 0);
        patina_glcm_quantize(q, v, N, 32, PATINA_GLCM_QUANT_UNIFORM);
        memset(&l3, 0, sizeof l3);
        lab(3, a, q, n, 32, &o, 1, n <= 4096 ? 10 : 3, 8, &l3);
        p5 = lab(5, b, q, n, 32, &o, 1, n <= 4096 ? 10 : 3, 0, NULL);
        same(a, b, 32 * 32, "scheme 3 vs production streamed");
        bound = h2d > 0 ? (double)N / (h2d * 1e9) * 1e3 : 0;
        printf("| %d² | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f |\n", n, l3.h2d_ms, l3.kernel_ms, l3.ms,
               p5, bound, bound > 0 ? p5 / bound : 0);
        patina_gpu_host_free(v);
        patina_gpu_host_free(q);
        free(a);
        free(b);
    }
    patina_gpu_close(g);
}

/* Focused mode: sets 1 = (d=1, 0°), 2 = (d=1, 45°), 3 = (d=4, 0°),
 * 8 = d = 1, 4 x 0/45/90/135° in one pass. */
static int parse_list(const char *s, int *v, int max)
{
    int n = 0;
    while (s && *s && n < max) {
        v[n++] = atoi(s);
        s = strchr(s, ',');
        if (s) s++;
    }
    return n;
}

static void apply_variant(const char *spec)
{
    static const char *names[] = {"PATINA_GLCM_K2", "PATINA_GLCM_SPLIT", "PATINA_GLCM_TASKPX",
                                  "PATINA_GLCM_TASKMIN"};
    char buf[256], *tok, *save = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unsetenv(names[i]);
    snprintf(buf, sizeof buf, "%s", spec);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '='), name[64];
        if (!eq) continue;
        *eq = 0;
        snprintf(name, sizeof name, "PATINA_GLCM_%s", tok);
        setenv(name, eq + 1, 1);
    }
}

static void bench_focus(const char *sizes_s, const char *kinds_s, const char *levels_s, const char *sets_s,
                        int reps_arg, const char *variants)
{
    int sizes[8], kinds[2], levels[8], sets[8], nv = 0;
    const int ns = parse_list(sizes_s, sizes, 8), nk = parse_list(kinds_s, kinds, 2);
    const int nl = parse_list(levels_s, levels, 8), nt = parse_list(sets_s, sets, 8);
    char vbuf[1024], *vs[16], *save = NULL, desc[256];
    patina_gpu_t *g = NULL;
    snprintf(vbuf, sizeof vbuf, "%s", variants);
    for (char *tok = strtok_r(vbuf, ";", &save); tok && nv < 16; tok = strtok_r(NULL, ";", &save)) vs[nv++] = tok;
    if (patina_gpu_open(&g, 0, 0) != PATINA_OK) {
        printf("\n## GPU: unavailable (%s)\n", patina_last_error());
        return;
    }
    patina_gpu_describe(0, desc, sizeof desc);
    printf("\n## Focus: production kernel ms (median), image resident, %s\n\n| size | image | L | offsets |", desc);
    for (int v = 0; v < nv; v++) printf(" %s |", vs[v]);
    printf("\n|---|---|---|---|");
    for (int v = 0; v < nv; v++) printf("---|");
    printf("\n");
    for (int si = 0; si < ns; si++) {
        const int n = sizes[si];
        const size_t N = (size_t)n * n;
        const int reps = reps_arg > 0 ? reps_arg : n <= 4096 ? 20 : 7;
        uint8_t *v = patina_gpu_host_alloc(N), *q = patina_gpu_host_alloc(N);
        uint32_t *ref = malloc(8 * 256 * 256 * 4), *got = malloc(8 * 256 * 256 * 4);
        if (!v || !q || !ref || !got) {
            printf("  (no memory for %d²)\n", n);
            break;
        }
        for (int ki = 0; ki < nk; ki++) {
            generate(v, n, kinds[ki]);
            for (int li = 0; li < nl; li++) {
                const int L = levels[li];
                patina_glcm_quantize(q, v, N, L, PATINA_GLCM_QUANT_UNIFORM);
                for (int ti = 0; ti < nt; ti++) {
                    patina_glcm_offset_t off[8];
                    size_t noff = sets[ti] == 8 ? 8 : 1;
                    char what[128];
                    if (sets[ti] == 8)
                        for (int d = 0; d < 2; d++)
                            for (int t = 0; t < 4; t++) off[d * 4 + t] = patina_glcm_offset(d ? 4 : 1, 45.0 * t);
                    else
                        off[0] = patina_glcm_offset(sets[ti] == 3 ? 4 : 1, sets[ti] == 2 ? 45 : 0);
                    patina_glcm_counts(ref, q, n, n, (size_t)n, NULL, 0, L, off, noff, 0, 0);
                    printf("| %d² | %s | %d | %s |", n, kind_name(kinds[ki]), L,
                           sets[ti] == 8 ? "8 (d=1,4 x 4 angles)" : sets[ti] == 2 ? "d=1 45°" : sets[ti] == 3 ? "d=4 0°" : "d=1 0°");
                    for (int vi = 0; vi < nv; vi++) {
                        patina_glcm_lab_t l = {0};
                        double ms;
                        apply_variant(vs[vi]);
                        memset(got, 0xab, noff * (size_t)L * L * 4);
                        ms = lab(4, got, q, n, L, off, noff, reps, 0, &l);
                        snprintf(what, sizeof what, "focus %d %s L=%d set=%d variant %s", n, kind_name(kinds[ki]), L,
                                 sets[ti], vs[vi]);
                        same(got, ref, noff * (size_t)L * L, what);
                        printf(" %.4f (C=%d, %d thr) |", ms, l.copies, l.block);
                        fflush(stdout);
                    }
                    printf("\n");
                }
            }
        }
        apply_variant("-");
        patina_gpu_host_free(v);
        patina_gpu_host_free(q);
        free(ref);
        free(got);
    }
    patina_gpu_close(g);
}

/* ---------------------------------------------------------------- peers */

static void run_peers(int quick, int max_size, int gpu)
{
    const char *py = getenv("PATINA_PYTHON");
    char script[4096], cmd[8192];
    const char *here = __FILE__, *slash = strrchr(here, '/');
    FILE *f;
    if (!py || !*py) py = "python3";
    snprintf(script, sizeof script, "bench/glcm_peers.py");
    if (!(f = fopen(script, "r"))) {
        snprintf(script, sizeof script, "%.*s/glcm_peers.py", slash ? (int)(slash - here) : 1,
                 slash ? here : ".");
        f = fopen(script, "r");
    }
    if (!f) {
        printf("\n## Peers: bench/glcm_peers.py not found (run from the repository root)\n");
        return;
    }
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' '%s' --max-size %d%s%s 2>&1", py, script, max_size,
             quick ? " --quick" : "", gpu ? "" : " --no-gpu");
    printf("\n## Peers (%s)\n", cmd);
    fflush(stdout);
    if (system(cmd) != 0) printf("(peers script failed or unavailable)\n");
}

int main(int argc, char **argv)
{
    int quick = 0, peers = 1, gpu = 1, max_size = 16384, focus = 0, reps = 0;
    const char *sizes = "1024,4096,16384", *kinds = "0,1", *levels = "8,32", *sets = "1,2,8", *variants = "-";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--no-peers")) peers = 0;
        else if (!strcmp(argv[i], "--no-gpu")) gpu = 0;
        else if (!strcmp(argv[i], "--max-size") && i + 1 < argc) max_size = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--focus")) focus = 1;
        else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) sizes = argv[++i];
        else if (!strcmp(argv[i], "--kinds") && i + 1 < argc) kinds = argv[++i];
        else if (!strcmp(argv[i], "--levels") && i + 1 < argc) levels = argv[++i];
        else if (!strcmp(argv[i], "--sets") && i + 1 < argc) sets = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--variants") && i + 1 < argc) variants = argv[++i];
        else {
            fprintf(stderr, "usage: bench_glcm [--quick] [--max-size N] [--no-peers] [--no-gpu] [--focus "
                            "[--sizes A,B] [--kinds 0,1] [--levels 8,32] [--sets 1,2,8] [--reps R] "
                            "[--variants 'K2=1,SPLIT=2;...']]\n");
            return 2;
        }
    }
    if (focus) {
        printf("# bench_glcm --focus (%s)\n", patina_build_info());
        if (patina_gpu_count() > 0)
            bench_focus(sizes, kinds, levels, sets, reps, variants);
        else
            printf("\n## GPU: none here\n");
        if (g_fail) printf("\nFAILED: some GPU counts differ from the CPU's\n");
        return g_fail;
    }
    printf("# bench_glcm (%s)\n", patina_build_info());
    bench_cpu(quick);
    if (gpu && patina_gpu_count() > 0)
        bench_gpu(quick, max_size);
    else
        printf("\n## GPU: none here (%s)\n", gpu ? "no usable CUDA device" : "--no-gpu");
    if (peers) run_peers(quick, max_size, gpu && patina_gpu_count() > 0);
    if (g_fail) printf("\nFAILED: some GPU counts differ from the CPU's\n");
    return g_fail;
}
