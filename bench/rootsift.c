/* bench_rootsift: extraction throughput of the rootsift family on the sample
 * photographs (scripts/fetch-samples.sh), and the statistics that fix its
 * u8 quantisation scale (docs/rootsift.md).
 *
 *   throughput  images/s of patina_extract_batch (CPU) with 1 thread and with
 *               every thread, decoding excluded (images are decoded first);
 *   features    mean count per image, images at the budget m, images with 0;
 *   clipping    over every kept feature (extracted with quant=f16, which holds
 *               the RootSIFT components to 11 bits): the largest component,
 *               the fraction above 255.5/512 (clipped by the u8 scale 512)
 *               and above 127.5/512 (what a signed-8-bit store would clip).
 *
 *   gpu         (a CUDA build on a GPU machine; --gpu-only skips the sections
 *               above) 1024x1024 and 2048x1536 photographs (the sample photos
 *               resized, nearest neighbour) at m = 384 and n = 768: images/s of
 *               the GPU path batched (every image in one call; steady state:
 *               one warm-up call with the full batch, then the best of 3
 *               calls), one-image
 *               latency (median of single calls), VLFeat on 1 and all cores
 *               beside, records identical to the CPU's, the fraction of GPU
 *               time in each stage (summed over the path's two streams, which
 *               overlap), and the uploads against PCIe: the grey levels
 *               (1 byte per pixel) in GB/s while the copies ran (upload stage
 *               time) and over the whole batched call, each as a fraction of
 *               the pinned host-to-device peak measured in the same run
 *               (patina_gpu__bandwidth, 256 MiB copies). (The kernel
 *               variants measured against the default are in
 *               docs/lab/rootsift.md.)
 *
 *   peers       in the GPU table, per size and budget: OpenCV's SIFT
 *               (nfeatures = the budget) on all cores and kornia's
 *               SIFTFeature on the GPU, images/s on the same resized
 *               images and our GPU's ratio to each (bench/rootsift_peers.py,
 *               run by $PATINA_PYTHON or python3 before each size's rows;
 *               "-" and the peer's reason when it is unavailable).
 *
 * Usage: bench_rootsift [--spec SPEC] [--dir DIR] [--max N] [--gpu-only] [--gpu-n N] [--no-peers]
 *   SPEC  a rootsift spec (default "rootsift"); quant is forced per section
 *   DIR   photographs (default $PATINA_SAMPLES or ./samples)
 * Never fails on timings. */
#define _GNU_SOURCE
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "features/family.h"
#include "features/rootsift.h"
#include "gpu/gpu.h"
#include "benchutil.h"
#include "patina/patina.h"

static char **g_files;
static size_t g_nfiles, g_cap;
static const char **g_loaded;           /* the files of the decoded images, in order */
static int g_peers = 1;                 /* --no-peers: 0 */
static char g_bench_dir[1024] = ".";    /* where rootsift_peers.py is: this file's directory */

static int collect(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    const char *dot = strrchr(path, '.');
    (void)st;
    (void)ftw;
    if (type == FTW_F && dot && (!strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".png"))) {
        if (g_nfiles == g_cap) g_files = realloc(g_files, (g_cap = g_cap ? 2 * g_cap : 256) * sizeof *g_files);
        g_files[g_nfiles++] = strdup(path);
    }
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void die(const char *what, patina_status s)
{
    fprintf(stderr, "bench_rootsift: %s: %s: %s\n", what, patina_status_str(s), patina_last_error());
    exit(1);
}

/* Seconds for one batch extraction with `threads` workers (0: all). */
static double run(const char *spec, int threads, const patina_image_t *imgs, size_t n, unsigned char **out,
                  size_t *bytes)
{
    patina_context_opts_t o;
    patina_context_t *ctx;
    patina_extractor_t *ex;
    patina_status s, *st = calloc(n, sizeof *st);
    double t0;
    patina_context_opts_init(&o);
    o.threads = threads;
    if ((s = patina_context_new(&ctx, &o)) != PATINA_OK) die("context", s);
    if ((s = patina_extractor_new(&ex, spec)) != PATINA_OK) die(spec, s);
    *bytes = patina_extractor_bytes(ex);
    *out = malloc(n * *bytes);
    t0 = patina_now();
    if ((s = patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, *out, imgs, n, st)) != PATINA_OK) die("extract", s);
    t0 = patina_now() - t0;
    for (size_t i = 0; i < n; i++)
        if (st[i] != PATINA_OK) fprintf(stderr, "bench_rootsift: image %zu: %s\n", i, patina_status_str(st[i]));
    free(st);
    patina_extractor_free(ex);
    patina_context_free(ctx);
    return t0;
}


/* ------------------------------------------------------------------ peers */

/* bench/rootsift_peers.py on the first nsrc decoded files, resized to w x h,
 * a batch of ngpu images, budgets 384 and 768: its output (NULL when peers
 * are off or it does not run). */
static char *peers_run(size_t nsrc, size_t ngpu, int w, int h)
{
    const char *py = getenv("PATINA_PYTHON");
    size_t cap = 4096, off;
    char *cmd;
    if (!g_peers) return NULL;
    for (size_t i = 0; i < nsrc && i < ngpu; i++) cap += strlen(g_loaded[i]) + 3;
    if (!(cmd = malloc(cap))) return NULL;
    off = (size_t)snprintf(cmd, cap, "'%s' '%s/rootsift_peers.py' --size %dx%d --m 384 --m 768 --threads %d --count %zu",
                           py && *py ? py : "python3", g_bench_dir, w, h, patina_cpu_count(), ngpu);
    for (size_t i = 0; i < nsrc && i < ngpu; i++) off += (size_t)snprintf(cmd + off, cap - off, " '%s'", g_loaded[i]);
    snprintf(cmd + off, cap - off, " 2>&1");
    {
        char *out = bench_capture(cmd);
        free(cmd);
        return out;
    }
}

/* The peer's images/s for a size and budget (NAN when it has none; *why then
 * its reason, up to the line's end, when it gave one). */
static double peer_rate(const char *out, const char *peer, int w, int h, int m, char *why, size_t whycap)
{
    char key[96];
    const char *at;
    snprintf(key, sizeof key, "peer %s %dx%d m=%d ", peer, w, h, m);
    if (whycap) snprintf(why, whycap, "%s", out ? "no output line" : "not run");
    if (!out || !(at = strstr(out, key))) return NAN;
    at += strlen(key);
    if (!strncmp(at, "unavailable: ", 13)) {
        const size_t len = strcspn(at + 13, "\n");
        if (whycap) snprintf(why, whycap, "%.*s", (int)len, at + 13);
        return NAN;
    }
    return atof(at);
}

/* ------------------------------------------------------------------ GPU */

/* img resized to tw x th (nearest neighbour), owned. */
static void resized(patina_image_t *o, const patina_image_t *img, int tw, int th)
{
    memset(o, 0, sizeof *o);
    o->width = tw;
    o->height = th;
    o->stride = 3 * (size_t)tw;
    o->data = malloc(o->stride * (size_t)th);
    o->owned = 1;
    for (int y = 0; y < th; y++) {
        const int sy = (int)((long)y * img->height / th);
        for (int x = 0; x < tw; x++) {
            const int sx = (int)((long)x * img->width / tw);
            memcpy((unsigned char *)o->data + (size_t)y * o->stride + 3 * (size_t)x,
                   img->data + (size_t)sy * img->stride + 3 * (size_t)sx, 3);
        }
    }
}

static int cmp_dbl(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Seconds of one GPU call on the batch im[0 .. n) in steady state: a
 * warm-up call with the whole batch (the path's buffers grow to it once),
 * then the best of 3 calls; ms gets the stage times of the last. */
static double steady_batch(patina_gpu_t *g, const rootsift_params_t *p, unsigned char *out,
                           const patina_image_t *im, size_t n, patina_status *st, double *ms)
{
    double t = 1e30;
    patina_status s;
    if ((s = rs_extract_gpu(g, p, (size_t)p->m, out, im, n, st)) != PATINA_OK) die("gpu warm-up", s);
    for (int rep = 0; rep < 3; rep++) {
        double t0;
        patina_gpu__rootsift_times(g, ms, NULL);
        t0 = patina_now();
        if ((s = rs_extract_gpu(g, p, (size_t)p->m, out, im, n, st)) != PATINA_OK) die("gpu", s);
        t0 = patina_now() - t0;
        t = t0 < t ? t0 : t;
    }
    patina_gpu__rootsift_times(g, ms, NULL);
    return t;
}

static void bench_gpu(const patina_image_t *src, size_t nsrc, size_t ngpu)
{
    static const int sizes[2][2] = {{1024, 1024}, {2048, 1536}};
    static const char *const stage[PGPU_RS_STAGES] = {"upload", "downscale", "smoothing", "DoG+gradients",
                                                      "detect+refine+orient", "selection", "descriptors",
                                                      "download"};
    patina_gpu_t *g;
    patina_status s;
    double h2d = 0.0;
    if (patina_gpu_count() == 0 || (s = patina_gpu_open(&g, 0, 0)) != PATINA_OK) {
        printf("gpu         no usable GPU: GPU section skipped\n");
        return;
    }
    if (patina_gpu__bandwidth(g, 0, (size_t)256 << 20, 5, &h2d) != PATINA_OK) h2d = 0.0;
    printf("gpu         device 0; %zu images per batch, resized from the images loaded; pinned H2D peak %.1f GB/s\n",
           ngpu, h2d);
    printf("peers       OpenCV SIFT (nfeatures = the budget) on all %d cores and kornia's SIFTFeature on the GPU "
           "(bench/rootsift_peers.py, the same resized images, %s); ratio = our GPU img/s / the peer's\n",
           patina_cpu_count(), g_peers ? "run before each size's rows" : "off: --no-peers");
    printf("%-10s %-6s %12s %12s %12s %12s %10s %12s %10s %12s %10s %8s  %s\n", "size", "budget", "gpu img/s",
           "latency ms", "cpu1 img/s", "cpuN img/s", "gpu/cpuN", "opencv img/s", "gpu/opencv", "kornia img/s",
           "gpu/kornia", "same", "GPU time by stage");
    for (int si = 0; si < 2; si++) {
        patina_image_t *im = calloc(ngpu, sizeof *im);
        char *peer = peers_run(nsrc, ngpu, sizes[si][0], sizes[si][1]), why[2][2][200];
        for (size_t i = 0; i < ngpu; i++) resized(&im[i], &src[i % nsrc], sizes[si][0], sizes[si][1]);
        for (int q = 0; q < 2; q++) {
            const char *spec = q ? "rootsift:m=768" : "rootsift:m=384";
            rootsift_params_t p;
            patina_extractor_t *ex;
            size_t bytes, same = 0;
            unsigned char *rg, *rc, *rc1;
            patina_status *st = calloc(ngpu, sizeof *st);
            double t, lat[11], ms[PGPU_RS_STAGES], tot = 0, t1, tn, ocv, kor;
            if ((s = patina_extractor_new(&ex, spec)) != PATINA_OK) die(spec, s);
            memcpy(&p, ex->params, sizeof p);
            bytes = patina_extractor_bytes(ex);
            patina_extractor_free(ex);
            rg = malloc(ngpu * bytes);
            t = steady_batch(g, &p, rg, im, ngpu, st, ms);
            for (int k = 0; k < 11; k++) {
                double t0 = patina_now();
                if ((s = rs_extract_gpu(g, &p, (size_t)p.m, rg, &im[k % ngpu], 1, st)) != PATINA_OK) die("gpu", s);
                lat[k] = patina_now() - t0;
            }
            qsort(lat, 11, sizeof *lat, cmp_dbl);
            if ((s = rs_extract_gpu(g, &p, (size_t)p.m, rg, im, ngpu, st)) != PATINA_OK) die("gpu", s);
            t1 = run(spec, 1, im, ngpu < 8 ? ngpu : 8, &rc1, &bytes);
            t1 /= (double)(ngpu < 8 ? ngpu : 8);
            tn = run(spec, 0, im, ngpu, &rc, &bytes);
            for (size_t i = 0; i < ngpu; i++) same += !memcmp(rg + i * bytes, rc + i * bytes, bytes);
            for (int k = 0; k < PGPU_RS_STAGES; k++) tot += ms[k];
            ocv = peer_rate(peer, "opencv", sizes[si][0], sizes[si][1], p.m, why[q][0], sizeof why[q][0]);
            kor = peer_rate(peer, "kornia", sizes[si][0], sizes[si][1], p.m, why[q][1], sizeof why[q][1]);
            printf("%4dx%-5d %-6s %12.1f %12.2f %12.2f %12.2f %9.1fx ", sizes[si][0], sizes[si][1],
                   q ? "n=768" : "m=384", ngpu / t, lat[5] * 1e3, 1.0 / t1, ngpu / tn, (ngpu / t) / (ngpu / tn));
            if (isnan(ocv))
                printf("%12s %10s ", "-", "-");
            else
                printf("%12.2f %9.1fx ", ocv, (ngpu / t) / ocv);
            if (isnan(kor))
                printf("%12s %10s ", "-", "-");
            else
                printf("%12.2f %9.1fx ", kor, (ngpu / t) / kor);
            printf("%4zu/%-4zu ", same, ngpu);
            for (int k = 0; k < PGPU_RS_STAGES; k++) printf(" %s %.1f%%", stage[k], tot > 0 ? 100.0 * ms[k] / tot : 0.0);
            {
                const double up = (double)ngpu * sizes[si][0] * sizes[si][1]; /* grey bytes uploaded */
                const double copy = ms[0] > 0 ? up / (ms[0] * 1e-3) / 1e9 : 0.0, run = up / t / 1e9;
                printf("; uploads %.1f GB/s while copying (%.0f%% of the H2D peak), %.1f GB/s over the call (%.0f%%)",
                       copy, h2d > 0 ? 100.0 * copy / h2d : 0.0, run, h2d > 0 ? 100.0 * run / h2d : 0.0);
            }
            printf("\n");
            free(rg);
            free(rc);
            free(rc1);
            free(st);
        }
        for (int q = 0; q < 2; q++) /* the peers' reasons for a "-" */
            for (int k = 0; k < 2; k++)
                if (g_peers && (q == 0 || strcmp(why[0][k], why[q][k])) &&
                    isnan(peer_rate(peer, k ? "kornia" : "opencv", sizes[si][0], sizes[si][1], q ? 768 : 384, NULL, 0)))
                    printf("  %s at %dx%d %s: %s\n", k ? "kornia" : "opencv", sizes[si][0], sizes[si][1],
                           q ? "n=768" : "m=384", why[q][k]);
        free(peer);
        for (size_t i = 0; i < ngpu; i++) patina_image_release(&im[i]);
        free(im);
    }
    patina_gpu_close(g);
}

int main(int argc, char **argv)
{
    const char *spec = "rootsift", *dir = getenv("PATINA_SAMPLES");
    size_t maxn = 1000, n = 0, bytes, ngpu = 64;
    int gpu_only = 0;
    patina_image_t *imgs;
    unsigned char *out;
    char spec_u8[600], spec_f16[600];
    double mp = 0;
    if (!dir || !*dir) dir = "samples";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--spec") && i + 1 < argc)
            spec = argv[++i];
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--max") && i + 1 < argc)
            maxn = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--gpu-only"))
            gpu_only = 1;
        else if (!strcmp(argv[i], "--gpu-n") && i + 1 < argc)
            ngpu = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--no-peers"))
            g_peers = 0;
        else {
            fprintf(stderr, "usage: bench_rootsift [--spec SPEC] [--dir DIR] [--max N] [--gpu-only] [--gpu-n N] "
                            "[--no-peers]\n");
            return 2;
        }
    }
    nftw(dir, collect, 16, FTW_PHYS);
    if (!g_nfiles) {
        fprintf(stderr, "bench_rootsift: no .jpg/.png under '%s' (scripts/fetch-samples.sh)\n", dir);
        return 1;
    }
    qsort(g_files, g_nfiles, sizeof *g_files, cmp_str);
    {
        const char *slash = strrchr(__FILE__, '/');
        if (slash) snprintf(g_bench_dir, sizeof g_bench_dir, "%.*s", (int)(slash - __FILE__), __FILE__);
    }
    imgs = calloc(g_nfiles, sizeof *imgs);
    g_loaded = calloc(g_nfiles, sizeof *g_loaded);
    for (size_t i = 0; i < g_nfiles && n < maxn; i++)
        if (patina_image_load(&imgs[n], g_files[i], NULL) == PATINA_OK) {
            mp += (double)imgs[n].width * imgs[n].height / 1e6;
            g_loaded[n++] = g_files[i];
        }
    snprintf(spec_u8, sizeof spec_u8, "%s%squant=u8", spec, strchr(spec, ':') ? "," : ":");
    snprintf(spec_f16, sizeof spec_f16, "%s%squant=f16", spec, strchr(spec, ':') ? "," : ":");
    printf("bench_rootsift: %zu images (%.1f megapixels) under %s; %d CPUs\n", n, mp, dir, patina_cpu_count());
    if (n > 0 && ngpu > 0) bench_gpu(imgs, n, ngpu);
    if (gpu_only) goto done;

    {
        double t1 = run(spec_u8, 1, imgs, n, &out, &bytes), tall;
        unsigned char *out2;
        size_t cnt = 0, full = 0, zero = 0;
        patina_rootsift_info_t info;
        for (size_t i = 0; i < n; i++) {
            if (patina_rootsift_info(&info, out + i * bytes, bytes) != PATINA_OK) continue;
            cnt += info.count;
            full += info.count == info.m;
            zero += info.count == 0;
        }
        tall = run(spec_u8, 0, imgs, n, &out2, &bytes);
        printf("spec %s\n", spec_u8);
        printf("throughput  1 thread : %7.2f images/s (%.3f s)\n", n / t1, t1);
        printf("throughput  %d threads: %7.2f images/s (%.3f s); output %s across thread counts\n",
               patina_cpu_count(), n / tall, tall, memcmp(out, out2, n * bytes) ? "DIFFERS" : "identical");
        printf("features    mean %.1f per image; %zu of %zu images at the budget m; %zu with none\n",
               (double)cnt / n, full, n, zero);
        free(out);
        free(out2);
    }
    {
        size_t comps = 0, clip8 = 0, clip7 = 0;
        float maxc = 0;
        run(spec_f16, 0, imgs, n, &out, &bytes);
        for (size_t i = 0; i < n; i++) {
            patina_rootsift_info_t info;
            const unsigned char *rec = out + i * bytes;
            if (patina_rootsift_info(&info, rec, bytes) != PATINA_OK) continue;
            for (size_t j = 0; j < info.count; j++) {
                float g[4], v[PATINA_ROOTSIFT_DIM];
                patina_rootsift_feature(g, v, rec, bytes, j);
                for (int k = 0; k < PATINA_ROOTSIFT_DIM; k++) {
                    float c = v[k] / info.qscale;
                    comps++;
                    clip8 += c * 512.0f > 255.5f;
                    clip7 += c * 512.0f > 127.5f;
                    if (c > maxc) maxc = c;
                }
            }
        }
        printf("clipping    %zu components: max %.4f; above 255.5/512 (u8 clips): %zu (%.2e); "
               "above 127.5/512 (s8 would clip): %zu (%.2e)\n",
               comps, (double)maxc, clip8, comps ? (double)clip8 / comps : 0.0, clip7,
               comps ? (double)clip7 / comps : 0.0);
        free(out);
    }
done:
    for (size_t i = 0; i < n; i++) patina_image_release(&imgs[i]);
    for (size_t i = 0; i < g_nfiles; i++) free(g_files[i]);
    free(g_files);
    free(g_loaded);
    free(imgs);
    return 0;
}
