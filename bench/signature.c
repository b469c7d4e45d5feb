/* bench_signature: signature extraction (docs/signature.md "GPU extraction")
 * on the CPU with one thread, on the CPU with every thread, and on the GPU,
 * through patina_extract_batch on images already decoded in host memory
 * (no read, no decode, no store; the GPU's time includes the copy of the
 * pixels up and of the records back). Every GPU record is compared with the
 * CPU's (bytes); a difference is reported and makes the exit status 1.
 *
 *   bench_signature [--spec SPEC] [--sizes S,S,...] [--batch N] [--reps R]
 *
 * Images: crops of the largest photograph under samples/ (or a synthetic
 * RGB texture), S x S, shifted per image. Defaults: the family's default
 * spec, sizes 256,512,1024,2048, batch 64, the median of 3 repetitions
 * (the CPU with one thread: one repetition on a quarter of the batch). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "patina/patina.h"

static void die(const char *what)
{
    fprintf(stderr, "bench_signature: %s: %s\n", what, patina_last_error());
    exit(2);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The largest photograph under samples/, or NULL. */
static int load_source(patina_image_t *src)
{
    const char *dir = getenv("PATINA_SAMPLES");
    const char *const paths[1] = {dir && *dir ? dir : "samples"};
    char **files = NULL;
    size_t n = 0, missing = 0, best = 0;
    int found = 0;
    if (patina_expand_paths(&files, &n, paths, 1, &missing, NULL, NULL) != PATINA_OK) return 0;
    for (size_t i = 0; i < n; i++) {
        patina_image_t img;
        if (patina_image_load(&img, files[i], NULL) != PATINA_OK) continue;
        if ((size_t)img.width * (size_t)img.height > best) {
            if (found) patina_image_release(src);
            *src = img;
            best = (size_t)img.width * (size_t)img.height;
            found = 1;
        } else {
            patina_image_release(&img);
        }
    }
    for (size_t i = 0; i < n; i++) free(files[i]);
    free(files);
    return found;
}

/* An s x s image: the source mirrored around a window shifted by `shift`,
 * or a synthetic texture. */
static void make_image(patina_image_t *img, const patina_image_t *src, int have, int s, int shift)
{
    if (patina_image_init(img, s, s) != PATINA_OK) die("image_init");
    for (int y = 0; y < s; y++)
        for (int x = 0; x < s; x++) {
            uint8_t *p = img->data + (size_t)y * img->stride + 3 * (size_t)x;
            if (have) {
                int sx = (x + 37 * shift) % (2 * src->width), sy = (y + 23 * shift) % (2 * src->height);
                if (sx >= src->width) sx = 2 * src->width - 1 - sx;
                if (sy >= src->height) sy = 2 * src->height - 1 - sy;
                memcpy(p, src->data + (size_t)sy * src->stride + 3 * (size_t)sx, 3);
            } else {
                const unsigned h = (unsigned)(x * 73856093u) ^ (unsigned)(y * 19349663u) ^ (unsigned)(shift * 83492791u);
                p[0] = (uint8_t)((x / 9 * 40 + (h & 31)) & 255);
                p[1] = (uint8_t)((y / 13 * 60 + ((h >> 5) & 31)) & 255);
                p[2] = (uint8_t)(((x + y) / 17 * 30 + ((h >> 10) & 63)) & 255);
            }
        }
}

/* Seconds for one batch on a device (median of reps). */
static double timed(patina_context_t *ctx, const patina_extractor_t *ex, patina_device dev, void *out,
                    const patina_image_t *imgs, size_t n, int reps, patina_status *st)
{
    double t[16];
    if (reps > 16) reps = 16;
    for (int r = 0; r < reps; r++) {
        const double t0 = now();
        if (patina_extract_batch(ctx, ex, dev, out, imgs, n, st) != PATINA_OK) die("extract");
        t[r] = now() - t0;
    }
    for (int i = 1; i < reps; i++)
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            const double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    return t[reps / 2];
}

int main(int argc, char **argv)
{
    const char *spec = "signature", *sizes_arg = "256,512,1024,2048";
    int batch = 64, reps = 3, have, diff = 0;
    patina_image_t src;
    patina_context_opts_t o1, oa;
    patina_context_t *c1, *ca;
    patina_extractor_t *ex;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--spec") && i + 1 < argc) spec = argv[++i];
        else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) sizes_arg = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_signature [--spec SPEC] [--sizes S,S,...] [--batch N] [--reps R]\n");
            return 2;
        }
    }
    if (batch < 4) batch = 4;
    if (reps < 1) reps = 1;
    have = load_source(&src);
    patina_context_opts_init(&o1);
    o1.threads = 1;
    patina_context_opts_init(&oa);
    if (patina_context_new(&c1, &o1) != PATINA_OK || patina_context_new(&ca, &oa) != PATINA_OK) die("context");
    if (patina_extractor_new(&ex, spec) != PATINA_OK) die(spec);
    printf("bench_signature: %s, batch %d, %s, %d CPU threads, %s\n", spec, batch,
           have ? "crops of the largest sample photograph" : "synthetic texture", patina_cpu_count(),
           patina_build_info());
    printf("%6s %6s %12s %12s %12s %10s %10s %10s %9s\n", "size", "batch", "cpu1 img/s", "cpuN img/s", "gpu img/s",
           "gpu ms", "gpu/cpu1", "gpu/cpuN", "identical");
    for (const char *p = sizes_arg; *p;) {
        const int s = atoi(p);
        const size_t n = (size_t)batch, bytes = patina_extractor_bytes(ex);
        patina_image_t *imgs = calloc(n, sizeof *imgs);
        unsigned char *a = malloc(n * bytes), *b = malloc(n * bytes);
        patina_status *st = malloc(n * sizeof *st);
        patina_device got;
        double t1, ta, tg = 0.0;
        int gpu = patina_context_resolve(ca, ex, PATINA_DEVICE_GPU, &got) == PATINA_OK;
        const char *same = "-";
        if (!imgs || !a || !b || !st || s <= 0) die("memory or size");
        for (size_t i = 0; i < n; i++) make_image(&imgs[i], &src, have, s, (int)i);
        t1 = timed(c1, ex, PATINA_DEVICE_CPU, a, imgs, n / 4, 1, st) * 4.0;
        ta = timed(ca, ex, PATINA_DEVICE_CPU, a, imgs, n, reps, st);
        if (gpu) {
            (void)timed(ca, ex, PATINA_DEVICE_GPU, b, imgs, n, 1, st); /* warm: state, plan, tables */
            tg = timed(ca, ex, PATINA_DEVICE_GPU, b, imgs, n, reps, st);
            same = memcmp(a, b, n * bytes) ? "NO" : "yes";
            if (memcmp(a, b, n * bytes)) diff = 1;
            printf("%6d %6zu %12.1f %12.1f %12.1f %10.2f %10.1f %10.2f %9s\n", s, n, (double)n / t1, (double)n / ta,
                   (double)n / tg, 1e3 * tg, t1 / tg, ta / tg, same);
        } else {
            printf("%6d %6zu %12.1f %12.1f %12s %10s %10s %10s %9s\n", s, n, (double)n / t1, (double)n / ta, "-", "-",
                   "-", "-", same);
        }
        fflush(stdout);
        for (size_t i = 0; i < n; i++) patina_image_release(&imgs[i]);
        free(imgs);
        free(a);
        free(b);
        free(st);
        while (*p && *p != ',') p++;
        if (*p) p++;
    }
    if (diff) printf("GPU records differ from the CPU's\n");
    patina_extractor_free(ex);
    patina_context_free(c1);
    patina_context_free(ca);
    if (have) patina_image_release(&src);
    return diff;
}
