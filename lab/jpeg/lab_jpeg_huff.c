/* lab_jpeg_huff: the parallel Huffman decoder (src/algo/jpeg_huff_core.h)
 * step by step on the JPEGs under the given paths (default samples/).
 *
 *   lab_jpeg_huff [--validate] [--repeat N] [PATH...]
 *
 * Prints, for the baseline Huffman files among them as one batch: chunks,
 * intervals and scan bytes; the C reference's steps timed on one thread
 * (init, each round, settle, write, dc) with the chunks still marked after
 * each round, next to libjpeg's jpeg_read_coefficients on the same files (one
 * thread); and with a GPU the library's kernels on the batch
 * (patina_gpu__jpegh_decode, device time, best of --repeat): images/s and
 * scan MB/s. --validate: the kernels' coefficients and flags must equal the
 * reference's, and the reference's libjpeg's (exit 1 otherwise; 77 without
 * a GPU). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/jpeg_huff_core.h"
#include "core/internal.h"
#include "gpu/gpu.h"
#include "image/jpeg_exact.h"
#include "image/jpeg_huff.h"
#include "patina/patina.h"

typedef struct file {
    jx_image_t im;
    int16_t *lj;    /* libjpeg's coefficients */
    uint8_t *region;
    size_t used;
    jh_img_t img;
} file_t;

static void die(const char *what)
{
    fprintf(stderr, "lab_jpeg_huff: %s: %s\n", what, patina_last_error());
    exit(2);
}

/* Reads and stages one file; 1 when the Huffman decoder takes it. */
static int load(file_t *f, const void *data, size_t size, double *lj_s)
{
    patina_jpegx_reader_t *r;
    jh_file_t *h = malloc(sizeof *h);
    double t0;
    int ok = 0;
    memset(f, 0, sizeof *f);
    if (!h) die("memory");
    if (patina__jpegx_open(&r, &f->im, data, size, "lab") != PATINA_OK) goto out;
    f->lj = malloc((size_t)f->im.nblocks * 128 + 1);
    if (!f->lj) die("memory");
    t0 = patina_now();
    if (patina__jpegx_read(r, &f->im, f->lj) != PATINA_OK) {
        patina__jpegx_close(r);
        goto out;
    }
    *lj_s += patina_now() - t0;
    patina__jpegx_close(r);
    if (patina__jpegx_open(&r, &f->im, data, size, "lab") != PATINA_OK) goto out;
    if (patina__jpegx_huff(r, &f->im, h) == PATINA_OK) {
        size_t cap = patina__jpegh_region_bound(h);
        f->region = malloc(cap);
        if (!f->region) die("memory");
        ok = patina__jpegh_stage(h, f->region, cap, &f->img, &f->used) == NULL;
    }
    patina__jpegx_close(r);
out:
    patina_clear_error();
    free(h);
    return ok;
}

int main(int argc, char **argv)
{
    const char *paths[64];
    int npaths = 0, validate = 0, repeat = 5;
    char **files = NULL;
    size_t nfiles = 0, skipped = 0, n = 0, bytes = 0, blocks = 0, nch = 0, niv = 0;
    file_t *fs;
    double lj_s = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--validate")) validate = 1;
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
        else if (npaths < 64) paths[npaths++] = argv[i];
    }
    if (!npaths) paths[npaths++] = "samples";
    if (patina_expand_paths(&files, &nfiles, paths, (size_t)npaths, &skipped, NULL, NULL) != PATINA_OK || !nfiles)
        die("no files");
    fs = calloc(nfiles, sizeof *fs);
    if (!fs) die("memory");
    for (size_t i = 0; i < nfiles; i++) {
        void *data;
        size_t size;
        if (patina_file_read(&data, &size, files[i], NULL) != PATINA_OK) die("read");
        if (load(&fs[n], data, size, &lj_s)) {
            bytes += fs[n].used;
            blocks += fs[n].im.nblocks;
            nch += fs[n].img.nc;
            niv += fs[n].img.niv;
            n++;
        } else {
            free(fs[n].lj);
            free(fs[n].region);
        }
        free(data);
    }
    printf("lab_jpeg_huff: %zu files, %zu baseline Huffman taken: %zu chunks of %u bits, %zu intervals, %.1f MB "
           "staged\n", nfiles, n, nch, JH_CHUNK_BITS, niv, (double)bytes / 1e6);
    if (!n) return validate ? 77 : 0;
    {
        /* the batch, as the GPU stages it */
        uint8_t *base = malloc(bytes + 8);
        jh_img_t *img = calloc(n, sizeof *img);
        uint32_t *fl = calloc(n, sizeof *fl), *fg = calloc(n, sizeof *fg), *g0 = calloc(nch, sizeof *g0);
        int16_t *cf = calloc(blocks * 64 + 1, sizeof *cf), *cg = calloc(blocks * 64 + 1, sizeof *cg);
        jh_state_t *st = calloc(2 * nch, sizeof *st), *gx = calloc(nch, sizeof *gx);
        jh_rec_t *rec = calloc(nch * JH_REC, sizeof *rec);
        uint8_t *dirty = calloc(2 * nch, 1);
        int32_t *dc = calloc(4 * nch, sizeof *dc);
        size_t ob = 0, oc = 0, ox = 0, oi = 0, bad = 0;
        jh_batch_t b;
        double t[8], t0;
        size_t marked[JH_ROUNDS + 1], redone = 0;
        if (!base || !img || !fl || !fg || !g0 || !cf || !cg || !st || !gx || !rec || !dirty || !dc) die("memory");
        for (size_t i = 0; i < n; i++) {
            img[i] = fs[i].img;
            img[i].tab += ob;
            img[i].iv += ob;
            img[i].civ += ob;
            img[i].data += ob;
            img[i].coef = oc;
            img[i].c0 = (uint32_t)ox;
            img[i].iv0 = (uint32_t)oi;
            img[i].flag = (uint32_t)i;
            img[i].nblocks = (uint32_t)fs[i].im.nblocks;
            memcpy(base + ob, fs[i].region, fs[i].used);
            ob += fs[i].used;
            oc += fs[i].im.nblocks;
            ox += fs[i].img.nc;
            oi += fs[i].img.niv;
        }
        memset(&b, 0, sizeof b);
        b.base = base;
        b.img = img;
        b.coef = cf;
        b.flags = fl;
        b.st[0] = st;
        b.st[1] = st + nch;
        b.gx = gx;
        b.rec = rec;
        b.dirty[0] = dirty;
        b.dirty[1] = dirty + nch;
        b.g0 = g0;
        b.dc = dc;
        b.nimg = (uint32_t)n;
        b.nchunk = (uint32_t)nch;
        b.niv = (uint32_t)niv;
        t0 = patina_now();
        for (uint32_t i = 0; i < nch; i++) jh_step_init(&b, i);
        t[0] = patina_now() - t0;
        for (int r = 0; r < JH_ROUNDS; r++) {
            size_t m = 0;
            for (uint32_t i = 0; i < nch; i++) m += b.dirty[r & 1][i];
            marked[r] = m;
            t0 = patina_now();
            for (uint32_t i = 0; i < nch; i++) jh_step_round(&b, r, i);
            t[1 + r] = patina_now() - t0;
        }
        for (uint32_t i = 0; i < nch; i++) redone += b.dirty[JH_ROUNDS & 1][i];
        marked[JH_ROUNDS] = redone;
        t0 = patina_now();
        for (uint32_t j = 0; j < niv; j++) {
            uint32_t m = jh_find_img_iv(&b, j);
            jh_step_settle(&b, JH_ROUNDS, m, j - img[m].iv0);
        }
        t[4] = patina_now() - t0;
        t0 = patina_now();
        for (uint32_t i = 0; i < nch; i++) jh_step_write(&b, JH_ROUNDS, i);
        t[5] = patina_now() - t0;
        t0 = patina_now();
        for (uint32_t j = 0; j < niv; j++) {
            uint32_t m = jh_find_img_iv(&b, j);
            jh_step_dcscan(&b, m, j - img[m].iv0);
        }
        for (uint32_t i = 0; i < nch; i++) jh_step_dcfix(&b, JH_ROUNDS, i);
        t[6] = patina_now() - t0;
        printf("C reference, one thread (s): init %.3f, rounds %.3f %.3f %.3f (chunks marked before each: %zu %zu "
               "%zu; after: %zu), settle %.3f, write %.3f, dc %.3f; libjpeg's entropy decoding of the same files "
               "%.3f\n", t[0], t[1], t[2], t[3], marked[0], marked[1], marked[2], marked[3], t[4], t[5], t[6], lj_s);
        for (size_t i = 0; i < n; i++) {
            if (fl[i]) printf("  flagged: file %zu (0x%x)\n", i, fl[i]);
            else if (memcmp(cf + img[i].coef * 64, fs[i].lj, (size_t)img[i].nblocks * 128) != 0) {
                printf("  REFERENCE != LIBJPEG: file %zu\n", i);
                bad++;
            }
        }
        if (patina_gpu_count() > 0) {
            patina_gpu_t *g;
            double best = 0;
            if (patina_gpu_open(&g, 0, 0) != PATINA_OK) die("gpu");
            for (int k = 0; k < (repeat > 0 ? repeat : 1); k++) {
                double sec;
                if (patina_gpu__jpegh_decode(g, base, bytes, img, (uint32_t)n, (uint32_t)nch, (uint32_t)niv, cg, blocks,
                                             fg, &sec) != PATINA_OK)
                    die("kernels");
                if (best == 0 || sec < best) best = sec;
            }
            printf("kernels (device time, best of %d): %.3f ms for %zu images: %.0f images/s, %.0f MB/s of scans\n",
                   repeat, best * 1e3, n, (double)n / best, (double)bytes / best / 1e6);
            for (size_t i = 0; i < n; i++)
                if (fg[i] != fl[i] ||
                    memcmp(cg + img[i].coef * 64, cf + img[i].coef * 64, (size_t)img[i].nblocks * 128) != 0) {
                    printf("  KERNELS != REFERENCE: file %zu (flags 0x%x, 0x%x)\n", i, fg[i], fl[i]);
                    bad++;
                }
            patina_gpu_close(g);
        } else {
            printf("kernels: no GPU\n");
            if (validate) return 77;
        }
        printf("%s\n", bad ? "FAIL" : "pass");
        if (validate && bad) return 1;
    }
    return 0;
}
