/* bench_cedd: CEDD extraction throughput, reproducing Table 3 of
 * Bampis et al. (docs/references.md) (frames/s per image size
 * and implementation) on this machine, with the paper's best Setup4 figure
 * (Quadro 4000 + i7) as the peer column and each GPU mode's fraction of the
 * hardware limit that bounds it, measured in the same run:
 *   - host-fed modes: pinned host-to-device bandwidth (best of 15 copies of
 *     256 MiB);
 *   - device-resident frames: device memory bandwidth (best of 15
 *     device-to-device copies of 1 GiB, bytes read + written).
 *
 * Modes: C reference on one thread; the C reference on all threads
 * (patina_extract_batch, CPU); GPU-only from pinned host frames; GPU-only
 * from pageable host frames (staged); hybrid (CPU block sums + GPU); GPU-only
 * from frames already in device memory. Frames are random (noise, gradients
 * and flat patches: non-zero, with edges), distinct frames cycle through
 * >= 512 MiB so no cache holds them; every GPU output is checked against the
 * C reference. Each figure is the median of --reps timed repetitions after a
 * warm-up.
 *
 *   bench_cedd [--sizes 640x480,...] [--reps N] [--seconds S] [--quick]
 *
 * End to end (decode + extract + store through the indexing pipeline, with
 * the GPU JPEG decoder too) is bench_pipeline's table.
 *
 * It never fails on timings; it exits non-zero only if a GPU result differs
 * from the C reference or a call fails. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "benchutil.h"
#include "core/internal.h"
#include "features/cedd_ref.h"
#include "gpu/gpu.h"
#include "patina/patina.h"

#define MiB (1024.0 * 1024.0)

/* Table 3, Setup4 (Intel i7 4.1 GHz + Quadro 4000), frames/s. */
typedef struct paper_row {
    int w, h;
    double gpu, hybrid, cpu;
} paper_row_t;

static const paper_row_t PAPER[] = {
    {640, 480, 288.10, 39.92, 28.58},    {800, 600, 244.53, 28.07, 18.97},
    {1024, 768, 185.75, 18.52, 10.22},   {1280, 1024, 102.87, 10.26, 5.60},
    {1600, 1200, 69.88, 6.97, 4.50},     {2048, 1536, 48.42, 4.39, 2.44},
    {2048, 2048, 40.84, 3.47, 1.84},
};
#define NPAPER (sizeof PAPER / sizeof PAPER[0])

static int REPS = 5;
static double SECONDS = 0.25; /* target length of one timed repetition */
static int BAD;               /* GPU results that differ from the reference */

static void die(const char *what, patina_status s)
{
    fprintf(stderr, "bench_cedd: %s: %s: %s\n", what, patina_status_str(s), patina_last_error());
    exit(1);
}

#define OK(what, expr)                                                                         \
    do {                                                                                       \
        patina_status ok_s_ = (expr);                                                          \
        if (ok_s_ != PATINA_OK) die(what, ok_s_);                                              \
    } while (0)

/* ------------------------------------------------------------- frames */

typedef struct gen {
    uint8_t *base;
    size_t frame_bytes;
    int w, h;
    uint64_t seed;
} gen_t;

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* Frame f: a smooth colour gradient, flat patches with sharp edges (edge
 * blocks of every direction) and per-pixel noise. */
static void gen_frame(void *arg, size_t f, int worker)
{
    gen_t *g = arg;
    uint8_t *p = g->base + f * g->frame_bytes;
    uint64_t s = mix(g->seed + f * 7919);
    int base[3], cw = 5 + (int)(s % 37), ch = 3 + (int)((s >> 8) % 29), x, y, c;
    (void)worker;
    for (c = 0; c < 3; c++) base[c] = (int)((s >> (16 + 8 * c)) & 255);
    for (y = 0; y < g->h; y++) {
        uint64_t r = mix(s ^ (uint64_t)y * 0x9E3779B97F4A7C15ull);
        for (x = 0; x < g->w; x++) {
            int cell = ((x / cw) * 31 + (y / ch) * 17 + (x + y) / (cw + ch)) % 7;
            if ((x & 7) == 0) r = mix(r + (uint64_t)x);
            for (c = 0; c < 3; c++) {
                int v = base[c] + (x * (c + 1) + y * (3 - c)) / 16 + cell * 37 * (c + 1) +
                        (int)((r >> (8 * c + 8 * (x & 7) % 40)) & 15);
                *p++ = (uint8_t)(v & 255);
            }
        }
    }
}

/* ------------------------------------------------------------- timing */

typedef struct mode_ctx {
    const char *name;
    int w, h;
    patina_image_t *frames;  /* distinct frames */
    size_t nframes;
    const uint8_t *ref;      /* (nframes, 144) C reference */
    patina_context_t *ctx;
    patina_extractor_t *ex;
    patina_gpu_t *gpu;
    patina_pool_t *pool;
} mode_ctx_t;

typedef enum { M_REF1, M_CPU, M_GPU_PINNED, M_GPU_PAGEABLE, M_HYBRID, M_GPU_DEVICE, M_COUNT } mode_t_;

static const char *MODE_NAME[M_COUNT] = {"C reference, 1 thread", "CPU, all threads",
                                         "GPU-only, pinned host", "GPU-only, pageable host",
                                         "hybrid CPU+GPU", "GPU-only, device-resident"};

/* Runs `mode` over n frames (cycling through the distinct ones); returns
 * seconds. Checks GPU outputs against the reference. */
static double run_mode(mode_ctx_t *m, int mode, const patina_image_t *src, size_t n)
{
    patina_image_t *list = malloc(n * sizeof *list);
    uint8_t *out = malloc(n * PATINA_CEDD_DIM);
    double t0, t;
    size_t i;
    if (!list || !out) die("malloc", PATINA_E_NOMEM);
    for (i = 0; i < n; i++) list[i] = src[i % m->nframes];
    memset(out, 0xee, n * PATINA_CEDD_DIM);
    t0 = patina_now();
    switch (mode) {
    case M_REF1:
        for (i = 0; i < n; i++) OK("cedd_extract", patina_cedd_extract(out + i * PATINA_CEDD_DIM, &list[i], 0));
        break;
    case M_CPU:
        OK("extract_batch cpu", patina_extract_batch(m->ctx, m->ex, PATINA_DEVICE_CPU, out, list, n, NULL));
        break;
    case M_GPU_PINNED:
    case M_GPU_PAGEABLE:
    case M_GPU_DEVICE:
        OK("gpu_cedd", patina_gpu_cedd(m->gpu, out, list, n, 0, NULL));
        break;
    case M_HYBRID:
        OK("gpu_cedd_hybrid", patina_gpu_cedd_hybrid(m->gpu, m->pool, cedd_block_row_sums, out, list, n, 0, NULL));
        break;
    }
    t = patina_now() - t0;
    if (m->ref)
        for (i = 0; i < n; i++)
            if (memcmp(out + i * PATINA_CEDD_DIM, m->ref + (i % m->nframes) * PATINA_CEDD_DIM,
                       PATINA_CEDD_DIM) != 0) {
                if (BAD < 5)
                    fprintf(stderr, "MISMATCH: %dx%d %s frame %zu differs from the C reference\n",
                            m->w, m->h, MODE_NAME[mode], i);
                BAD++;
            }
    free(list);
    free(out);
    return t;
}

/* Median seconds per frame: a warm-up sizes the batch to ~SECONDS a rep. */
static double time_mode(mode_ctx_t *m, int mode, const patina_image_t *src, size_t n0, size_t nmax)
{
    double t = run_mode(m, mode, src, n0), ts[64];
    size_t n = n0;
    int r;
    if (t > 0) n = (size_t)((double)n0 * SECONDS / t);
    if (n < 1) n = 1;
    if (n > nmax) n = nmax;
    if (n > n0 * 4 || t < 0.02) (void)run_mode(m, mode, src, n < 64 ? n : 64); /* warm again */
    for (r = 0; r < REPS && r < 64; r++) ts[r] = run_mode(m, mode, src, n) / (double)n;
    qsort(ts, (size_t)r, sizeof ts[0], bench_cmp_double);
    return ts[r / 2];
}

/* ------------------------------------------------------------ one size */

static void bench_size(int w, int h, patina_context_t *ctx, patina_extractor_t *ex, patina_gpu_t *gpu,
                       patina_pool_t *pool, double h2d, double d2d)
{
    const size_t fb = (size_t)w * (size_t)h * 3;
    size_t nf = (size_t)(512.0 * MiB / (double)fb) + 1, i;
    const paper_row_t *peer = NULL;
    double spf[M_COUNT];
    int have[M_COUNT] = {0};
    uint8_t *pinned, *pageable, *dev = NULL, *ref;
    patina_image_t *fr_pin, *fr_page, *fr_dev;
    mode_ctx_t m;
    gen_t g;
    int mode;

    if (nf < 8) nf = 8;
    if (nf > 1024) nf = 1024;
    for (i = 0; i < NPAPER; i++)
        if (PAPER[i].w == w && PAPER[i].h == h) peer = &PAPER[i];
    pinned = gpu ? patina_gpu_host_alloc(nf * fb) : NULL;
    pageable = malloc(nf * fb);
    if (!pageable || (gpu && !pinned)) die("frame memory", PATINA_E_NOMEM);
    g.base = pageable;
    g.frame_bytes = fb;
    g.w = w;
    g.h = h;
    g.seed = (uint64_t)w * 1000003u + (uint64_t)h;
    patina_pool_run(pool, nf, gen_frame, &g);
    if (pinned) memcpy(pinned, pageable, nf * fb);
    fr_pin = calloc(nf, sizeof *fr_pin);
    fr_page = calloc(nf, sizeof *fr_page);
    fr_dev = calloc(nf, sizeof *fr_dev);
    for (i = 0; i < nf; i++) {
        patina_image_wrap(&fr_page[i], pageable + i * fb, w, h, 3 * (size_t)w);
        if (pinned) patina_image_wrap(&fr_pin[i], pinned + i * fb, w, h, 3 * (size_t)w);
    }
    if (gpu) {
        dev = patina_gpu__dev_alloc(gpu, nf * fb);
        if (!dev) die("device frames", PATINA_E_NOMEM);
        OK("upload", patina_gpu__upload(gpu, dev, pageable, nf * fb));
        for (i = 0; i < nf; i++) patina_image_wrap(&fr_dev[i], dev + i * fb, w, h, 3 * (size_t)w);
    }

    /* The reference for every distinct frame (C reference on all threads). */
    ref = malloc(nf * PATINA_CEDD_DIM);
    OK("reference", patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, ref, fr_page, nf, NULL));
    memset(&m, 0, sizeof m);
    m.w = w;
    m.h = h;
    m.frames = fr_page;
    m.nframes = nf;
    m.ref = ref;
    m.ctx = ctx;
    m.ex = ex;
    m.gpu = gpu;
    m.pool = pool;

    spf[M_REF1] = time_mode(&m, M_REF1, fr_page, 2, 1u << 20);
    spf[M_CPU] = time_mode(&m, M_CPU, fr_page, (size_t)patina_context_threads(ctx), 1u << 20);
    have[M_REF1] = have[M_CPU] = 1;
    if (gpu) {
        spf[M_GPU_PINNED] = time_mode(&m, M_GPU_PINNED, fr_pin, 256, 1u << 20);
        spf[M_GPU_PAGEABLE] = time_mode(&m, M_GPU_PAGEABLE, fr_page, 256, 1u << 20);
        spf[M_HYBRID] = time_mode(&m, M_HYBRID, fr_page, 64, 1u << 20);
        spf[M_GPU_DEVICE] = time_mode(&m, M_GPU_DEVICE, fr_dev, 512, 1u << 22);
        have[M_GPU_PINNED] = have[M_GPU_PAGEABLE] = have[M_HYBRID] = have[M_GPU_DEVICE] = 1;
    }

    printf("\n== %dx%d: %.1f KB a frame, %zu distinct frames (%.0f MiB) ==\n", w, h, (double)fb / 1e3,
           nf, (double)(nf * fb) / MiB);
    printf("%-27s %10s %12s %12s %9s %12s %9s %s\n", "mode", "ms/frame", "frames/s", "peer fps",
           "ratio", "same design", "ratio", "fraction of hardware limit");
    for (mode = 0; mode < M_COUNT; mode++) {
        double fps, best = peer ? peer->gpu : 0.0, same = 0.0;
        char limit[96] = "-";
        if (!have[mode]) {
            printf("%-27s %10s %12s\n", MODE_NAME[mode], "n/a", "(no GPU)");
            continue;
        }
        fps = 1.0 / spf[mode];
        if (peer) same = mode == M_REF1 || mode == M_CPU ? peer->cpu : mode == M_HYBRID ? peer->hybrid : peer->gpu;
        if (mode == M_GPU_PINNED || mode == M_GPU_PAGEABLE)
            snprintf(limit, sizeof limit, "%.3f of PCIe H2D %.1f GB/s", (double)fb * fps / 1e9 / h2d, h2d);
        else if (mode == M_HYBRID)
            snprintf(limit, sizeof limit, "%.3f of PCIe (block sums only; CPU-bound)",
                     (double)((w >= 80 && h >= 80) ? 1600 : 400) * 48.0 * fps / 1e9 / h2d);
        else if (mode == M_GPU_DEVICE)
            snprintf(limit, sizeof limit, "%.3f of D2D %.0f GB/s (frame bytes read)", (double)fb * fps / 1e9 / d2d, d2d);
        printf("%-27s %10.4f %12.1f %12.2f %8.1fx %12.2f %8.1fx %s\n", MODE_NAME[mode],
               spf[mode] * 1e3, fps, best, best > 0 ? fps / best : 0.0, same,
               same > 0 ? fps / same : 0.0, limit);
    }
    fflush(stdout);

    if (gpu) { /* where the GPU's time goes: kernel busy time per frame (CUDA events) */
        static const int prof_modes[] = {M_GPU_PINNED, M_HYBRID, M_GPU_DEVICE};
        const patina_image_t *srcs[] = {fr_pin, fr_page, fr_dev};
        for (i = 0; i < 3; i++) {
            double ms[4];
            uint64_t nb;
            size_t n = (size_t)(SECONDS / spf[prof_modes[i]]) + 1;
            patina_gpu__profile(gpu, 1, NULL, NULL);
            (void)run_mode(&m, prof_modes[i], srcs[i], n);
            patina_gpu__profile(gpu, 0, ms, &nb);
            printf("  %s, us/frame: kernels: block sums %.3f, contributions %.3f, accumulation %.3f "
                   "(busy time; %llu batches of %.0f frames); host pointer checks %.3f\n",
                   MODE_NAME[prof_modes[i]], ms[0] * 1e3 / (double)n, ms[1] * 1e3 / (double)n,
                   ms[2] * 1e3 / (double)n, (unsigned long long)nb, nb ? (double)n / (double)nb : 0.0,
                   ms[3] * 1e3 / (double)n);
        }
        fflush(stdout);
    }

    patina_gpu__dev_free(gpu, dev);
    patina_gpu_host_free(pinned);
    free(pageable);
    free(fr_pin);
    free(fr_page);
    free(fr_dev);
    free(ref);
}

/* ----------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    static const int table3[][2] = {{640, 480},   {800, 600},   {1024, 768}, {1280, 1024},
                                    {1600, 1200}, {2048, 1536}, {2048, 2048}};
    int sizes[32][2], nsizes = 0, i;
    patina_context_t *ctx;
    patina_extractor_t *ex;
    patina_gpu_t *gpu = NULL;
    patina_pool_t *pool;
    double h2d = 0.0, d2d = 0.0;
    char buf[512];

    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
            char *tok, *save = NULL, *s = argv[++i];
            for (tok = strtok_r(s, ",", &save); tok && nsizes < 32; tok = strtok_r(NULL, ",", &save))
                if (sscanf(tok, "%dx%d", &sizes[nsizes][0], &sizes[nsizes][1]) == 2) nsizes++;
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            REPS = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
            SECONDS = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--quick")) {
            REPS = 3;
            SECONDS = 0.08;
        } else {
            fprintf(stderr, "usage: bench_cedd [--sizes WxH,...] [--reps N] [--seconds S] [--quick]\n");
            return 2;
        }
    }
    if (REPS < 1) REPS = 1;
    if (nsizes == 0)
        for (i = 0; i < 7; i++) {
            sizes[i][0] = table3[i][0];
            sizes[i][1] = table3[i][1];
            nsizes++;
        }

    OK("context", patina_context_new(&ctx, NULL));
    OK("extractor", patina_extractor_new(&ex, "cedd"));
    OK("pool", patina_pool_new(&pool, 0));
    printf("bench_cedd: %s; %d CPU threads; %d reps of ~%.2f s, median\n", patina_build_info(),
           patina_pool_size(pool), REPS, SECONDS);
    if (patina_gpu_count() > 0 && patina_gpu_open(&gpu, 0, 0) == PATINA_OK) {
        OK("describe", patina_gpu_describe(0, buf, sizeof buf));
        printf("GPU: %s\n", buf);
        patina_gpu__plan(gpu, buf, sizeof buf);
        printf("plan: %s\n", buf);
        OK("H2D bandwidth", patina_gpu__bandwidth(gpu, 0, 256u << 20, 15, &h2d));
        OK("D2D bandwidth", patina_gpu__bandwidth(gpu, 1, 1u << 30, 15, &d2d));
        printf("hardware limits (measured now, best of 15 copies): pinned H2D %.1f GB/s (256 MiB); "
               "device D2D %.0f GB/s (1 GiB, read + write)\n", h2d, d2d);
    } else {
        printf("GPU: none usable (%s); CPU modes only\n", patina_last_error());
    }
    printf("peer: Table 3 of Bampis et al., Setup4 (Quadro 4000 + Core i7 4.1 GHz): 'peer fps' is its best "
           "(GPU-only) figure, 'same design' its figure for the same design (CPU-only / hybrid / GPU-only)\n");
    for (i = 0; i < nsizes; i++) bench_size(sizes[i][0], sizes[i][1], ctx, ex, gpu, pool, h2d, d2d);
    if (gpu) { /* the limit again, after the run: it should not have moved */
        double again = 0.0;
        OK("H2D bandwidth", patina_gpu__bandwidth(gpu, 0, 256u << 20, 15, &again));
        printf("\npinned H2D again after the run: %.1f GB/s (used above: %.1f GB/s)\n", again, h2d);
    }
    if (BAD) fprintf(stderr, "bench_cedd: %d GPU results differ from the C reference\n", BAD);
    patina_gpu_close(gpu);
    patina_pool_free(pool);
    patina_extractor_free(ex);
    patina_context_free(ctx);
    return BAD ? 1 : 0;
}
