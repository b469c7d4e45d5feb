/* lab_jpeg_huff: the parallel Huffman decoder (src/algo/jpeg_huff_core.h)
 * step by step on the JPEGs under the given paths (default samples/).
 *
 *   lab_jpeg_huff [--validate] [--sync] [--repeat N] [--chunk-bits B] [PATH...]
 *
 * Prints, for the baseline Huffman files among them as one batch: chunks,
 * intervals and scan bytes; the C reference's steps timed on one thread
 * (init, each round, settle, write, dc) with the chunks still marked after
 * each round, next to libjpeg's jpeg_read_coefficients on the same files (one
 * thread); and with a GPU the library's kernels on the batch
 * (patina_gpu__jpegh_decode, device time, best of --repeat): images/s and
 * scan MB/s. --validate: the kernels' coefficients and flags must equal the
 * reference's, and the reference's libjpeg's (exit 1 otherwise; 77 without
 * a GPU or without files). --chunk-bits: the chunks' size (default
 * JH_CHUNK_BITS). --sync: first, how guessed decodes fall in step with the true
 * decode (sync_report; docs/lab/jpeg.md, 2026-11-30). */
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

static uint32_t chunk_bits = JH_CHUNK_BITS; /* --chunk-bits */

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
        size_t cap;
        h->sc.chunk_bits = chunk_bits;
        cap = patina__jpegh_region_bound(h);
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

/* --sync: how a decode from a chunk's first bit falls in step with the true
 * decode of its interval, per guessed block of the MCU. For every chunk but
 * an interval's first, and each start block p (k = 0 at the chunk's first
 * bit): the codewords until the bit position is in step with the true
 * decode's boundaries, and until the whole state (position, block of the
 * MCU, coefficient) is; "never" when not within the chunk. Twice: with
 * strict guesses (an unreadable code or a run past coefficient 63 stops the
 * decode, as it stops an exact one) and resilient ones (the library's: the
 * guess reads on, jh_decode's `guess`). */
static void sync_report(const file_t *fs, size_t n, int guess)
{
    size_t unsync[JH_MAX_BLK][2], unsync_bits = 0, pair_ok[JH_MAX_BLK];
    size_t chunks = 0, pos_ok = 0, full_ok[JH_MAX_BLK + 1], any_ok = 0, cw_pos = 0, cw_full = 0;
    memset(full_ok, 0, sizeof full_ok);
    memset(unsync, 0, sizeof unsync);
    memset(pair_ok, 0, sizeof pair_ok);
    for (size_t f = 0; f < n; f++) {
        const jh_img_t *im = &fs[f].img;
        const uint8_t *base = fs[f].region;
        const jh_table_t *tab = (const jh_table_t *)(base + im->tab);
        const jh_iv_t *ivs = (const jh_iv_t *)(base + im->iv);
        size_t fchunks = 0, fany = 0, f0 = 0;
        for (uint32_t v = 0; v < im->niv; v++) {
            const jh_iv_t *iv = ivs + v;
            const uint8_t *d = base + im->data + iv->off;
            uint32_t end = iv->len * 8u, cap = end / 2 + 16, nt = 0;
            jh_state_t *tr = malloc((size_t)cap * sizeof *tr), s = {0, 0, 0, 0, 0, 0};
            if (!tr) die("memory");
            /* the true boundaries, a codeword at a time */
            while (s.pos < end && !s.err && nt < cap) {
                tr[nt++] = s;
                (void)jh_decode(&im->sc, tab, d, end, s.pos + 1, 0xFFFFFFFFu, &s, 0, 0, 0, 0);
            }
            for (uint32_t c = 1; c < iv->nc; c++) {
                uint32_t cb = im->sc.chunk_bits, first = c * cb, stop = first + cb < end ? first + cb : end;
                unsigned mask = 0; /* the start blocks whose guess fell in step */
                chunks++;
                fchunks++;
                for (int p = 0; p < im->sc.nblk; p++) {
                    jh_state_t g = {first, 0, (uint8_t)p, 0, 0, 0};
                    uint32_t t = 0, cw = 0;
                    int psync = -1, fsync = -1;
                    while (t < nt && tr[t].pos < first) t++;
                    while (g.pos < stop && !g.err) {
                        while (t < nt && tr[t].pos < g.pos) t++;
                        if (t < nt && tr[t].pos == g.pos) {
                            if (psync < 0) psync = (int)cw;
                            if (tr[t].blkn == g.blkn && tr[t].k == g.k) {
                                fsync = (int)cw;
                                break;
                            }
                        }
                        (void)jh_decode(&im->sc, tab, d, end, g.pos + 1, 0xFFFFFFFFu, &g, 0, 0, 0, guess);
                        cw++;
                    }
                    if (p == 0 && fsync < 0) {
                        /* where the guess stands at the chunk's end */
                        while (t < nt && tr[t].pos < g.pos) t++;
                        if (t < nt && tr[t].pos == g.pos) {
                            int db = ((int)g.blkn - (int)tr[t].blkn + im->sc.nblk) % im->sc.nblk;
                            unsync[db][g.k == tr[t].k]++;
                        } else
                            unsync_bits++;
                    }
                    if (p == 0 && psync >= 0) {
                        pos_ok++;
                        cw_pos += (size_t)psync;
                    }
                    if (fsync >= 0) {
                        mask |= 1u << p;
                        full_ok[p]++;
                        if (p == 0) {
                            cw_full += (size_t)fsync;
                            f0++;
                        }
                    }
                }
                any_ok += mask != 0;
                fany += mask != 0;
                for (int q = 0; q < JH_MAX_BLK; q++) pair_ok[q] += (mask & (1u | 1u << q)) != 0;
            }
            free(tr);
        }
        printf("  file %zu: nblk %d, %zu chunks after an interval's first, in step within the chunk from block 0 %zu, "
               "from some block %zu\n", f, im->sc.nblk, fchunks, f0, fany);
    }
    printf("sync, %s guesses: %zu chunks; from block 0: bit position in step in %zu (mean %.1f codewords), whole state in %zu "
           "(mean %.1f codewords); from any block: %zu; per start block:", guess ? "resilient" : "strict", chunks, pos_ok,
           pos_ok ? (double)cw_pos / (double)pos_ok : 0.0, full_ok[0], full_ok[0] ? (double)cw_full / (double)full_ok[0] : 0.0,
           any_ok);
    for (int p = 0; p < JH_MAX_BLK; p++) printf(" %zu", full_ok[p]);
    printf("; from block 0 or block q, q = 1..:");
    for (int q = 1; q < JH_MAX_BLK; q++) printf(" %zu", pair_ok[q]);
    printf("\nsync: from block 0, out of step at the chunk's end: bit position off %zu; on a true boundary, by block "
           "offset (k equal / k differs):", unsync_bits);
    for (int q = 0; q < JH_MAX_BLK; q++)
        if (unsync[q][0] + unsync[q][1]) printf(" +%d: %zu / %zu", q, unsync[q][1], unsync[q][0]);
    printf("\n");
}

int main(int argc, char **argv)
{
    const char *paths[64];
    int npaths = 0, validate = 0, repeat = 5, sync = 0;
    char **files = NULL;
    size_t nfiles = 0, skipped = 0, n = 0, bytes = 0, blocks = 0, nch = 0, niv = 0;
    file_t *fs;
    double lj_s = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--validate")) validate = 1;
        else if (!strcmp(argv[i], "--sync")) sync = 1;
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--chunk-bits") && i + 1 < argc) chunk_bits = (uint32_t)atoi(argv[++i]);
        else if (npaths < 64) paths[npaths++] = argv[i];
    }
    if (!npaths) paths[npaths++] = "samples";
    if (patina_expand_paths(&files, &nfiles, paths, (size_t)npaths, &skipped, NULL, NULL) != PATINA_OK || !nfiles) {
        if (validate) { /* no photographs to check (samples/ not fetched, or not carried to a GPU machine) */
            printf("lab_jpeg_huff: no files (%s): skipped\n", patina_last_error());
            return 77;
        }
        die("no files");
    }
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
           "staged\n", nfiles, n, nch, chunk_bits, niv, (double)bytes / 1e6);
    if (!n) return validate ? 77 : 0;
    if (sync) {
        sync_report(fs, n, 0);
        sync_report(fs, n, 1);
    }
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
        uint32_t live[JH_ROUNDS + 1] = {0};
        size_t ob = 0, oc = 0, ox = 0, oi = 0, bad = 0;
        jh_batch_t b;
        double t[8], tr[JH_ROUNDS], t0;
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
        b.live = live;
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
            tr[r] = patina_now() - t0;
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
        for (uint32_t i = 0; i < nch; i++) jh_step_write(&b, JH_ROUNDS, i, jh_zigzag_host);
        t[5] = patina_now() - t0;
        t0 = patina_now();
        for (uint32_t j = 0; j < niv; j++) {
            uint32_t m = jh_find_img_iv(&b, j);
            jh_step_dcscan(&b, m, j - img[m].iv0);
        }
        for (uint32_t i = 0; i < nch; i++) jh_step_dcfix(&b, JH_ROUNDS, i);
        t[6] = patina_now() - t0;
        printf("C reference, one thread (s): init %.3f, rounds", t[0]);
        for (int r = 0; r < JH_ROUNDS; r++) printf(" %.3f", tr[r]);
        printf(" (chunks marked before each:");
        for (int r = 0; r < JH_ROUNDS; r++) printf(" %zu", marked[r]);
        printf("; after: %zu), settle %.3f, write %.3f, dc %.3f; libjpeg's entropy decoding of the same files %.3f\n",
               marked[JH_ROUNDS], t[4], t[5], t[6], lj_s);
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
