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
 * Usage: bench_rootsift [--spec SPEC] [--dir DIR] [--max N]
 *   SPEC  a rootsift spec (default "rootsift"); quant is forced per section
 *   DIR   photographs (default $PATINA_SAMPLES or ./samples)
 * Never fails on timings. */
#define _GNU_SOURCE
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "patina/patina.h"

static char **g_files;
static size_t g_nfiles, g_cap;

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

int main(int argc, char **argv)
{
    const char *spec = "rootsift", *dir = getenv("PATINA_SAMPLES");
    size_t maxn = 1000, n = 0, bytes;
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
        else {
            fprintf(stderr, "usage: bench_rootsift [--spec SPEC] [--dir DIR] [--max N]\n");
            return 2;
        }
    }
    nftw(dir, collect, 16, FTW_PHYS);
    if (!g_nfiles) {
        fprintf(stderr, "bench_rootsift: no .jpg/.png under '%s' (scripts/fetch-samples.sh)\n", dir);
        return 1;
    }
    qsort(g_files, g_nfiles, sizeof *g_files, cmp_str);
    imgs = calloc(g_nfiles, sizeof *imgs);
    for (size_t i = 0; i < g_nfiles && n < maxn; i++)
        if (patina_image_load(&imgs[n], g_files[i], NULL) == PATINA_OK) {
            mp += (double)imgs[n].width * imgs[n].height / 1e6;
            n++;
        }
    snprintf(spec_u8, sizeof spec_u8, "%s%squant=u8", spec, strchr(spec, ':') ? "," : ":");
    snprintf(spec_f16, sizeof spec_f16, "%s%squant=f16", spec, strchr(spec, ':') ? "," : ":");
    printf("bench_rootsift: %zu images (%.1f megapixels) under %s; %d CPUs\n", n, mp, dir, patina_cpu_count());

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
    for (size_t i = 0; i < n; i++) patina_image_release(&imgs[i]);
    for (size_t i = 0; i < g_nfiles; i++) free(g_files[i]);
    free(g_files);
    free(imgs);
    return 0;
}
