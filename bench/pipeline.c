/* bench_pipeline: the indexing pipeline end to end (read -> decode -> extract
 * -> store) for every family and device, next to the extraction alone, so
 * the gap between the kernels and the pipeline is visible, and with the
 * share of each stage (decode above all: it is what exact GPU decoding
 * removes). One table per run: one image size (scripts/device.sh step e2e
 * runs it for VGA, 1024^2 and 12 MP).
 *
 *   bench_pipeline [--dir DIR] [--files N] [--size S|WxH] [--families F,F,...]
 *                  [--devices D,D,...] [--batch N] [--nvjpeg] [--cpu-entropy] [--huff-min-px N]
 *                  [--chunk-bits B]
 *                  [--peer SCRIPT]
 *
 * Without --dir it writes N (default 512) JPEGs of S x S (default 1024) or
 * W x H pixels, quality 90, 4:2:0, cropped and scaled from the photographs
 * under samples/ (scripts/fetch-samples.sh), into $TMPDIR (default /tmp).
 * --peer runs `python3 SCRIPT DIR THREADS` on the same files before the
 * table (bench/decode_peers.py: PIL and OpenCV decoding on all cores, the
 * users' usual decoders) and prints what it prints. Per family (default
 * cedd, lbp8, glcm, rootsift, signature) and device (default cpu, gpu):
 *   e2e        patina_index_files into a new collection under $TMPDIR:
 *              files/s, and the stage times the pipeline reports (read and
 *              decode run on the producer side; with the GPU they overlap
 *              extract and store, so the stage seconds can add up to more
 *              than the wall time); "decode share" is decode's seconds over
 *              the stages' sum, "starved" the part of the wall time the
 *              extract + store side waited for images (t_starved: reading and
 *              decoding beyond what overlapped extraction);
 *   extract    patina_extract_batch on batches of decoded images already in
 *              host memory (no read, no decode, no store): images/s;
 *   decode     libjpeg-turbo decoding alone on all CPU threads: images/s;
 *              with a GPU also the exact GPU decoder alone (images left on
 *              the device, batches of --batch) with its entropy stage on all
 *              CPU threads and on the GPU, libjpeg-turbo's entropy decoding
 *              alone, and the host stage of the GPU's (headers, destuffing).
 * On the GPU device each family also gets a gpu+exact row (decoder
 * exact-gpu: the CPU path's pixels; "unavailable" for families that cannot
 * read device images), with the exact decoder's own times in the last
 * column (patina_index_stats_t.t_jpegx_*: entropy decoding on the workers,
 * allocations, waits for the device stage); their entropy stage is on the
 * GPU for baseline Huffman files, on the CPU workers with --cpu-entropy
 * (patina_gpu_jpegx_set_gpu_entropy: A/B timing); --huff-min-px N sends
 * images under N pixels to the CPU workers' entropy decoding
 * (patina_gpu_jpegx_set_huff_min_px; default PGPU_JPEGX_HUFF_MIN_PX); --chunk-bits B fixes the
 * Huffman kernels' chunk size (patina_gpu_jpegx_set_chunk_bits; default: the decoder's choice per call). The context's exact decoders
 * are made once per context (pinned staging and device buffers): a warm-up
 * run on the first files makes them before the table, and its setup time
 * is printed above it. --nvjpeg adds a gpu+nvjpeg row per family (not
 * exact: its pixels differ; its decoders are also made before the rows,
 * patina_jpeg_gpu_prepare). Video frames/s are bench_video's. The
 * kernel-only rates (images resident on the GPU) are in bench_cedd,
 * bench_lbp and bench_glcm. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "core/internal.h"
#include "gpu/gpu.h"
#include "core/context.h"
#include "image/jpeg_exact.h"
#include "image/jpeg_huff.h"
#include "patina/patina.h"

static void die(const char *what)
{
    fprintf(stderr, "bench_pipeline: %s: %s\n", what, patina_last_error());
    exit(2);
}

static void on_error(void *user, const char *path, patina_status s, const char *msg)
{
    (void)user;
    fprintf(stderr, "  %s: %s: %s\n", path, patina_status_str(s), msg);
}

/* n JPEGs of w x h: crops of the sources, scaled down 2:1 where the
 * source is large enough, at positions that differ per file; sources
 * smaller than w x h are scaled up (nearest sample) to fill it (samples/
 * has no 12 MP photograph). */
static int make_jpegs(const char *dir, int n, int w, int h, const char *src)
{
    const char *const paths[1] = {src};
    char **files = NULL, out[4096];
    size_t nfiles = 0, missing = 0, nsrc = 0;
    tjhandle tj = tjInitCompress();
    patina_image_t *srcs;
    int made = 0, i = 0;
    if (patina_expand_paths(&files, &nfiles, paths, 1, &missing, NULL, NULL) != PATINA_OK || !tj || !nfiles)
        die("no source photographs under samples/ (scripts/fetch-samples.sh) or no TurboJPEG");
    /* every source decoded once: the files differ by where they are cut */
    if (!(srcs = calloc(nfiles, sizeof *srcs))) die("out of memory");
    for (size_t k = 0; k < nfiles; k++) {
        if (patina_image_load(&srcs[nsrc], files[k], NULL) == PATINA_OK) nsrc++;
        else patina_clear_error();
    }
    for (size_t pass = 0; made < n && nsrc && pass < (size_t)n; pass++)
        for (size_t k = 0; k < nsrc && made < n; k++) {
            const patina_image_t img = srcs[k];
            patina_image_t crop;
            unsigned char *jpeg = NULL;
            unsigned long bytes = 0;
            FILE *f;
            int x, y, rw, rh;
            double step;
            /* source pixels per output pixel: 2, 1, or < 1 (scaled up) */
            step = img.width >= 2 * w && img.height >= 2 * h ? 2.0 : img.width >= w && img.height >= h ? 1.0
                   : (double)img.width / w < (double)img.height / h ? (double)img.width / w : (double)img.height / h;
            rw = (int)(w * step);
            rh = (int)(h * step);
            if (rw < 1 || rh < 1 || rw > img.width || rh > img.height) continue;
            x = (int)(((unsigned)i * 7919u) % (unsigned)(img.width - rw + 1));
            y = (int)(((unsigned)i * 104729u) % (unsigned)(img.height - rh + 1));
            i++;
            if (patina_image_init(&crop, w, h) != PATINA_OK) die("image");
            for (int r = 0; r < h; r++)
                for (int c = 0; c < w; c++)
                    memcpy(crop.data + (size_t)r * crop.stride + 3 * (size_t)c,
                           img.data + (size_t)(y + (int)(r * step)) * img.stride + 3 * (size_t)(x + (int)(c * step)),
                           3);
            if (tjCompress2(tj, crop.data, w, (int)crop.stride, h, TJPF_RGB, &jpeg, &bytes, TJSAMP_420, 90,
                            0) == 0) {
                snprintf(out, sizeof out, "%s/img_%05d.jpg", dir, made);
                f = fopen(out, "wb");
                if (f && fwrite(jpeg, 1, bytes, f) == bytes) made++;
                if (f) fclose(f);
            }
            tjFree(jpeg);
            patina_image_release(&crop);
        }
    for (size_t k = 0; k < nsrc; k++) patina_image_release(&srcs[k]);
    free(srcs);
    tjDestroy(tj);
    for (size_t k = 0; k < nfiles; k++) free(files[k]);
    free(files);
    return made;
}

typedef struct decode_job {
    char **files;
    patina_image_t *imgs;
    const patina_limits_t *lim;
} decode_job_t;

static void decode_one(void *arg, size_t i, int worker)
{
    decode_job_t *j = arg;
    (void)worker;
    if (patina_image_load(&j->imgs[i], j->files[i], j->lim) != PATINA_OK) memset(&j->imgs[i], 0, sizeof j->imgs[i]);
}

/* Images per second of extract_batch on imgs, batch at a time, repeated
 * for at least half a second. */
static double extract_rate(patina_context_t *ctx, const patina_extractor_t *ex, patina_device dev,
                           const patina_image_t *imgs, size_t n, size_t batch)
{
    const size_t bytes = patina_extractor_bytes(ex);
    unsigned char *out = malloc(batch * bytes);
    patina_status *st = malloc(batch * sizeof *st);
    double t0, t;
    size_t done = 0;
    if (!out || !st) die("memory");
    /* warm-up: the GPU state, tables and buffers */
    if (patina_extract_batch(ctx, ex, dev, out, imgs, n < batch ? n : batch, st) != PATINA_OK) die("extract");
    t0 = patina_now();
    do {
        for (size_t i = 0; i < n; i += batch) {
            size_t m = n - i < batch ? n - i : batch;
            if (patina_extract_batch(ctx, ex, dev, out, imgs + i, m, st) != PATINA_OK) die("extract");
            done += m;
        }
        t = patina_now() - t0;
    } while (t < 0.5);
    free(out);
    free(st);
    return (double)done / t;
}

/* The exact GPU decoder alone on the files (read into memory first): rates
 * of its entropy decoding alone (all threads, coefficients to host memory),
 * of the host stage of entropy decoding on the GPU alone (header, destuffing
 * into host memory: the CPU work left), and of the whole decoder (batches of
 * `batch`) with the entropy stage on the CPU workers (whole[0]) and on the
 * GPU (whole[1], *gpu_files of the files it took there). 0 when there is no
 * GPU. */
typedef struct entropy_job {
    void **data;
    size_t *size;
    size_t ok;
} entropy_job_t;

static void entropy_one(void *arg, size_t i, int worker)
{
    entropy_job_t *j = arg;
    patina_jpegx_reader_t *r;
    jx_image_t im;
    int16_t *coef;
    (void)worker;
    if (patina__jpegx_open(&r, &im, j->data[i], j->size[i], "bench") != PATINA_OK) return;
    coef = malloc((size_t)im.nblocks * 64 * sizeof *coef);
    if (coef && patina__jpegx_read(r, &im, coef) == PATINA_OK) __atomic_add_fetch(&j->ok, 1, __ATOMIC_RELAXED);
    free(coef);
    patina__jpegx_close(r);
}

static void huff_host_one(void *arg, size_t i, int worker)
{
    entropy_job_t *j = arg;
    patina_jpegx_reader_t *r;
    jx_image_t im;
    jh_file_t *f = malloc(sizeof *f);
    (void)worker;
    if (f && patina__jpegx_open(&r, &im, j->data[i], j->size[i], "bench") == PATINA_OK) {
        if (patina__jpegx_huff(r, &im, f) == PATINA_OK) {
            size_t cap = patina__jpegh_region_bound(f), used;
            uint8_t *region = malloc(cap);
            jh_img_t img;
            if (region && !patina__jpegh_stage(f, region, cap, &img, &used))
                __atomic_add_fetch(&j->ok, 1, __ATOMIC_RELAXED);
            free(region);
        }
        patina__jpegx_close(r);
    }
    free(f);
}

static void exact_rates(char **files, size_t n, int threads, size_t batch, uint32_t chunk_bits, double *entropy,
                        double *huff_host,
                        double whole[2], uint64_t *gpu_files)
{
    patina_gpu_t *g = NULL;
    patina_jpegx_gpu_t *d = NULL;
    patina_pool_t *pool = NULL;
    entropy_job_t ej;
    patina_image_t *out = calloc(batch, sizeof *out);
    patina_status *st = calloc(batch, sizeof *st);
    size_t taken = 0;
    double t0;
    *entropy = *huff_host = whole[0] = whole[1] = 0;
    *gpu_files = 0;
    ej.data = calloc(n, sizeof *ej.data);
    ej.size = calloc(n, sizeof *ej.size);
    ej.ok = 0;
    if (!out || !st || !ej.data || !ej.size) die("memory");
    for (size_t i = 0; i < n; i++)
        if (patina_file_read(&ej.data[i], &ej.size[i], files[i], NULL) != PATINA_OK) die("read");
    if (patina_pool_new(&pool, threads) != PATINA_OK) die("pool");
    t0 = patina_now();
    patina_pool_run(pool, n, entropy_one, &ej);
    *entropy = (double)ej.ok / (patina_now() - t0);
    ej.ok = 0;
    t0 = patina_now();
    patina_pool_run(pool, n, huff_host_one, &ej);
    *huff_host = (double)ej.ok / (patina_now() - t0);
    if (patina_gpu_count() > 0 && patina_gpu_open(&g, 0, 0) == PATINA_OK && patina_gpu_jpegx_open(&d, g) == PATINA_OK) {
        patina_gpu_jpegx_set_chunk_bits(d, chunk_bits);
        /* the first pass allocates; then the entropy stage on the CPU workers, on the GPU */
        for (int pass = 0; pass < 3; pass++) {
            patina_jpegx_times_t t1, t2;
            patina_gpu_jpegx_set_gpu_entropy(d, pass != 1);
            patina_gpu_jpegx_times(d, &t1);
            taken = 0;
            t0 = patina_now();
            for (size_t i = 0; i < n; i += batch) {
                size_t m = n - i < batch ? n - i : batch;
                for (size_t k = 0; k < m; k++) {
                    patina_image_info_t info;
                    if (patina_image_probe(&info, ej.data[i + k], ej.size[i + k], files[i + k]) != PATINA_OK) die("probe");
                    out[k].width = info.width;
                    out[k].height = info.height;
                }
                if (patina_gpu_jpegx_decode(d, pool, out, (const void *const *)ej.data + i, ej.size + i, m, st) !=
                    PATINA_OK)
                    die("jpegx");
                for (size_t k = 0; k < m; k++) taken += st[k] == PATINA_OK;
            }
            whole[pass == 1 ? 0 : 1] = (double)taken / (patina_now() - t0);
            patina_gpu_jpegx_times(d, &t2);
            if (pass == 2) *gpu_files = t2.gpu_entropy - t1.gpu_entropy;
        }
    } else {
        patina_clear_error();
    }
    if (taken < n && whole[1] > 0) fprintf(stderr, "bench_pipeline: exact GPU decoder took %zu of %zu\n", taken, n);
    patina_gpu_jpegx_close(d);
    patina_gpu_close(g);
    patina_pool_free(pool);
    for (size_t i = 0; i < n; i++) free(ej.data[i]);
    free(ej.data);
    free(ej.size);
    free(out);
    free(st);
}

static void rm_rf(const char *path)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) fprintf(stderr, "bench_pipeline: could not remove %s\n", path);
}

/* The context's exact GPU decoders are made on first use (pinned staging,
 * device buffers, arenas sized to the windows): one run of cedd on the GPU
 * over the first 2 x batch files makes them, so that the table's rows time
 * the pipeline, not that once-per-context cost (printed here). Nothing
 * without a GPU. */
static void exact_warmup(patina_context_t *ctx, char **files, size_t nfiles, size_t batch, const char *tmp)
{
    patina_extractor_t *ex;
    patina_collection_t *c;
    patina_index_opts_t o;
    patina_index_stats_t st;
    char coll[4096];
    size_t n = nfiles < 2 * batch ? nfiles : 2 * batch;
    if (patina_gpu_count() == 0) return;
    if (patina_extractor_new(&ex, "cedd") != PATINA_OK) die("cedd");
    snprintf(coll, sizeof coll, "%s/patina-pipeline-warm-XXXXXX", tmp);
    if (!mkdtemp(coll)) die("mkdtemp");
    if (patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0) != PATINA_OK) die("collection");
    memset(&o, 0, sizeof o);
    o.device = PATINA_DEVICE_GPU;
    o.batch = batch;
    o.jpeg_decoder = PATINA_JPEG_EXACT_GPU;
    if (patina_index_files(ctx, c, ex, (const char *const *)files, n, &o, &st) == PATINA_OK)
        printf("exact GPU decoder setup (once per context: pinned staging, device buffers; a warm-up run on %zu "
               "files): %.3f s\n\n", n, st.t_jpegx_setup);
    else
        printf("exact GPU decoder: unavailable (%s)\n\n", patina_last_error());
    patina_collection_close(c);
    rm_rf(coll);
    patina_extractor_free(ex);
}

static int split(char *s, char **out, int max)
{
    int n = 0;
    for (char *t = strtok(s, ","); t && n < max; t = strtok(NULL, ",")) out[n++] = t;
    return n;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *tmp = getenv("TMPDIR");
    int given_dir = 0;
    const char *peer = NULL;
    char fam_list[256] = "cedd,lbp8,glcm,rootsift,signature", dev_list[64] = "cpu,gpu", made_dir[4096] = "";
    char *fams[16], *devs[8], **files = NULL;
    int nfiles_want = 512, width = 1024, height = 1024, nf, nd, nvjpeg = 0;
    size_t batch = 64, nfiles = 0, missing = 0, preload;
    patina_context_t *ctx;
    patina_image_t *imgs;
    decode_job_t dj;
    double t0, decode_rate, entropy_rate, huff_host_rate, exact_rate[2];
    uint64_t gpu_files;
    int cpu_entropy = 0;
    long long huff_min_px = -1; /* --huff-min-px: the exact decoder's size split (-1: its default) */
    long chunk_bits = 0;        /* --chunk-bits: the Huffman kernels' chunks (0: the decoder's choice) */
    if (!tmp || !*tmp) tmp = "/tmp";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--files") && i + 1 < argc) nfiles_want = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--size") && i + 1 < argc) {
            const char *v = argv[++i], *x = strchr(v, 'x');
            width = atoi(v);
            height = x ? atoi(x + 1) : width;
        } else if (!strcmp(argv[i], "--peer") && i + 1 < argc) peer = argv[++i];
        else if (!strcmp(argv[i], "--families") && i + 1 < argc) snprintf(fam_list, sizeof fam_list, "%s", argv[++i]);
        else if (!strcmp(argv[i], "--devices") && i + 1 < argc) snprintf(dev_list, sizeof dev_list, "%s", argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = (size_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--nvjpeg")) nvjpeg = 1;
        else if (!strcmp(argv[i], "--cpu-entropy")) cpu_entropy = 1;
        else if (!strcmp(argv[i], "--huff-min-px") && i + 1 < argc) huff_min_px = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--chunk-bits") && i + 1 < argc) chunk_bits = atol(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_pipeline [--dir DIR] [--files N] [--size S|WxH] [--families F,...] "
                            "[--devices D,...] [--batch N] [--nvjpeg] [--cpu-entropy] [--huff-min-px N] [--chunk-bits B] "
                            "[--peer SCRIPT]\n");
            return 2;
        }
    }
    if (nfiles_want < 1 || width < 16 || height < 16 || batch < 1) {
        fprintf(stderr, "bench_pipeline: bad --files, --size or --batch\n");
        return 2;
    }
    nf = split(fam_list, fams, 16);
    nd = split(dev_list, devs, 8);
    given_dir = dir != NULL;
    if (!dir) {
        snprintf(made_dir, sizeof made_dir, "%s/patina-pipeline-XXXXXX", tmp);
        if (!mkdtemp(made_dir)) die("mkdtemp");
        if (make_jpegs(made_dir, nfiles_want, width, height, "samples") < 1) die("make-jpegs");
        dir = made_dir;
    }
    {
        const char *const paths[1] = {dir};
        if (patina_expand_paths(&files, &nfiles, paths, 1, &missing, on_error, NULL) != PATINA_OK || !nfiles)
            die("no files");
    }
    if (patina_context_new(&ctx, NULL) != PATINA_OK) die("context");
    /* decode alone, and the images the extraction-only rows use */
    preload = nfiles < 256 ? nfiles : 256;
    imgs = calloc(nfiles, sizeof *imgs);
    if (!imgs) die("memory");
    {
        patina_pool_t *pool;
        if (patina_pool_new(&pool, patina_context_threads(ctx)) != PATINA_OK) die("pool");
        dj.files = files;
        dj.imgs = imgs;
        dj.lim = patina_context_limits(ctx);
        t0 = patina_now();
        patina_pool_run(pool, nfiles, decode_one, &dj);
        decode_rate = (double)nfiles / (patina_now() - t0);
        patina_pool_free(pool);
    }
    for (size_t i = preload; i < nfiles; i++) patina_image_release(&imgs[i]);
    exact_rates(files, nfiles, patina_context_threads(ctx), batch, (uint32_t)chunk_bits, &entropy_rate, &huff_host_rate, exact_rate,
                &gpu_files);
    {
        char gpu[256] = "none";
        if (patina_gpu_count() > 0) patina_gpu_describe(0, gpu, sizeof gpu);
        if (given_dir)
            printf("bench_pipeline: %zu files under %s (as they are); %d CPU threads; GPU: %s\n", nfiles, dir,
                   patina_context_threads(ctx), gpu);
        else
            printf("bench_pipeline: %zu JPEGs of %dx%d under %s; %d CPU threads; GPU: %s\n", nfiles, width, height,
                   dir, patina_context_threads(ctx), gpu);
        printf("decode alone (libjpeg-turbo, all threads): %.0f images/s\n", decode_rate);
        printf("entropy decoding alone (libjpeg-turbo jpeg_read_coefficients, all threads): %.0f images/s\n",
               entropy_rate);
        printf("entropy decoding on the GPU, its host stage alone (header + destuffing, all threads): %.0f images/s\n",
               huff_host_rate);
        if (exact_rate[0] > 0)
            printf("exact GPU decode alone (batches of %zu, images left on the device): entropy on all CPU threads "
                   "%.0f images/s; entropy on the GPU %.0f images/s (%llu of %zu files entropy-decoded there)\n\n",
                   batch, exact_rate[0], exact_rate[1], (unsigned long long)gpu_files, nfiles);
        else
            printf("exact GPU decode alone: no GPU\n\n");
        if (peer) { /* the users' decoders on the same files */
            char cmd[8400];
            fflush(stdout);
            snprintf(cmd, sizeof cmd, "python3 '%s' '%s' %d", peer, dir, patina_context_threads(ctx));
            if (system(cmd) != 0) printf("peer decoders: %s did not run\n", peer);
            printf("\n");
        }
        printf("video: frames/s are bench_video's (this build reads video: %s)\n\n",
               patina_video_available() ? "yes" : "no, FFmpeg's libraries were not found at build time");
    }
    exact_warmup(ctx, files, nfiles, batch, tmp);
    if (patina_gpu_count() > 0) {
        patina_jpegx_gpu_t *xd[2];
        if (patina__context_jpegx(ctx, xd) == PATINA_OK) {
            patina_gpu_jpegx_set_gpu_entropy(xd[0], cpu_entropy ? 0 : 2); /* the default rule */
            patina_gpu_jpegx_set_gpu_entropy(xd[1], cpu_entropy ? 0 : 2);
            patina_gpu_jpegx_set_chunk_bits(xd[0], (uint32_t)chunk_bits);
            patina_gpu_jpegx_set_chunk_bits(xd[1], (uint32_t)chunk_bits);
            if (huff_min_px >= 0) {
                patina_gpu_jpegx_set_huff_min_px(xd[0], (uint64_t)huff_min_px);
                patina_gpu_jpegx_set_huff_min_px(xd[1], (uint64_t)huff_min_px);
            }
            printf("gpu+exact rows: entropy decoding on the %s", cpu_entropy ? "CPU workers (--cpu-entropy)"
                                                                        : "GPU (baseline Huffman files)");
            if (!cpu_entropy)
                printf(", images under %llu pixels on the CPU workers%s",
                       (unsigned long long)(huff_min_px >= 0 ? (uint64_t)huff_min_px : PGPU_JPEGX_HUFF_MIN_PX),
                       huff_min_px >= 0 ? " (--huff-min-px)" : " (the default)");
            printf("\n\n");
        } else {
            patina_clear_error();
        }
    }
    printf("| family | device | e2e s | e2e img/s | extract-only img/s | e2e / extract | read s | decode s "
           "| extract s | store s | decode share | starved | exact decoder: entropy / setup / device wait s |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int f = 0; f < nf; f++)
        for (int d = 0; d < 2 * nd + nvjpeg; d++) {
            /* rows 0 .. nd-1: the devices with the CPU decoder; nd .. 2nd-1:
             * the same devices with exact-gpu (GPU only); then nvJPEG */
            const int use_nvjpeg = d == 2 * nd, use_exact = d >= nd && d < 2 * nd;
            const char *dname = use_nvjpeg ? "gpu" : devs[use_exact ? d - nd : d];
            const char *row = use_nvjpeg ? "gpu+nvjpeg" : use_exact ? "gpu+exact" : dname;
            patina_extractor_t *ex;
            patina_device dev, got;
            patina_index_opts_t o;
            patina_index_stats_t st;
            patina_collection_t *c;
            char coll[4096];
            double ext = 0, busy;
            if (patina_extractor_new(&ex, fams[f]) != PATINA_OK) die(fams[f]);
            if (patina_device_parse(&dev, dname) != PATINA_OK) die(dname);
            if (use_exact && strcmp(dname, "gpu")) {
                patina_extractor_free(ex);
                continue;
            }
            if (patina_context_resolve(ctx, ex, dev, &got) != PATINA_OK) {
                printf("| %s | %s | unavailable: %s |\n", fams[f], row, patina_last_error());
                patina_extractor_free(ex);
                continue;
            }
            if (!use_nvjpeg && !use_exact) ext = extract_rate(ctx, ex, dev, imgs, preload, batch);
            if (use_nvjpeg && patina_jpeg_gpu_prepare(ctx) != PATINA_OK) {
                printf("| %s | gpu+nvjpeg | unavailable: %s |\n", fams[f], patina_last_error());
                patina_extractor_free(ex);
                continue;
            }
            snprintf(coll, sizeof coll, "%s/patina-pipeline-coll-XXXXXX", tmp);
            if (!mkdtemp(coll)) die("mkdtemp");
            if (patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0) != PATINA_OK) die("collection");
            memset(&o, 0, sizeof o);
            o.device = dev;
            o.batch = batch;
            o.on_error = on_error;
            o.jpeg_decoder = use_nvjpeg ? PATINA_JPEG_NVJPEG : use_exact ? PATINA_JPEG_EXACT_GPU : PATINA_JPEG_LIBJPEG;
            if (patina_index_files(ctx, c, ex, (const char *const *)files, nfiles, &o, &st) != PATINA_OK) {
                if (!use_exact) die("index");
                printf("| %s | %s | unavailable: %s |\n", fams[f], row, patina_last_error());
                patina_collection_close(c);
                rm_rf(coll);
                patina_extractor_free(ex);
                continue;
            }
            patina_collection_close(c);
            rm_rf(coll);
            busy = st.t_read + st.t_decode + st.t_extract + st.t_store;
            printf("| %s | %s | %.2f | %.1f | ", fams[f], row, st.seconds,
                   (double)st.indexed / st.seconds);
            if (ext > 0) printf("%.1f | %.2f | ", ext, ((double)st.indexed / st.seconds) / ext);
            else printf("- | - | ");
            printf("%.2f | %.2f | %.2f | %.2f | %.0f%% | %.0f%% | ", st.t_read, st.t_decode, st.t_extract, st.t_store,
                   busy > 0 ? 100.0 * st.t_decode / busy : 0.0, st.seconds > 0 ? 100.0 * st.t_starved / st.seconds : 0.0);
            if (use_exact) printf("%.3f / %.3f / %.3f |\n", st.t_jpegx_entropy, st.t_jpegx_setup, st.t_jpegx_wait);
            else printf("- |\n");
            fflush(stdout);
            patina_extractor_free(ex);
        }
    for (size_t i = 0; i < preload; i++) patina_image_release(&imgs[i]);
    free(imgs);
    for (size_t i = 0; i < nfiles; i++) free(files[i]);
    free(files);
    patina_context_free(ctx);
    if (*made_dir) rm_rf(made_dir);
    return 0;
}
