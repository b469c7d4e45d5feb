/* The parallel Huffman decoder's C reference (src/image/jpeg_huff.c, the
 * steps of src/algo/jpeg_huff_core.h) against libjpeg-turbo's
 * jpeg_read_coefficients (patina__jpegx_read): the same coefficients on every
 * file it takes and does not flag, and no file taken that libjpeg warns
 * about. Files: generated in every subsampling (tests/jpegx_cases.h), baseline,
 * optimised tables and restart intervals, sizes 1x1..203x151, quality 10-100;
 * larger pictures (many chunks per interval) with restart intervals of 0, 1,
 * 7 and 64 MCUs; every sample photograph; damaged copies (truncated, bytes
 * and bits flipped, garbage before the end-of-image marker, restart markers
 * out of order). The decode runs as a batch of several images laid out as the
 * GPU lays them out, with 0, 1, 2, 3, JH_ROUNDS / 2, JH_ROUNDS and
 * JH_ROUNDS + 1 Jacobi rounds and chunks visited in both orders, so the
 * kernels' one-thread-per-chunk order cannot matter, and with chunks of
 * JH_CHUNK_MIN, 1024 and 2048 bits and of mixed sizes in one batch. The files left to the
 * CPU for speed (JH_E_SLOW) are named. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "algo/jpeg_huff_core.h"
#include "image/jpeg_exact.h"
#include "image/jpeg_huff.h"
#include "jpegh_util.h"
#include "jpegx_cases.h"
#include "patina/patina.h"
#include "testutil.h"

/* The steps of jpeg_huff_core.h over the items taken, as one batch
 * (jpegh_util.h), with `rounds` Jacobi rounds, chunks visited backwards when
 * `rev`. flags[i]: item i's JH_E_* (items not in the batch: untouched);
 * coef[i]: its coefficients (malloc'd). */
static void run_batch(item_t *items, size_t n, int rounds, int rev, uint32_t *flags, int16_t **coef)
{
    jh_tbatch_t t;
    uint32_t *fl;
    int16_t *cf;
    size_t i, m;
    if (!jh_tbatch_make(&t, items, n)) return;
    fl = calloc(t.nimg, sizeof *fl);
    cf = calloc(t.blocks * 64 + 1, sizeof *cf);
    assert_true(fl && cf);
    jh_tbatch_ref(&t, rounds, rev, fl, cf);
    for (i = 0, m = 0; i < n; i++) {
        if (!items[i].huff) continue;
        flags[i] = fl[m];
        coef[i] = malloc(items[i].im.nblocks * 64 * sizeof(int16_t) + 1);
        assert_non_null(coef[i]);
        memcpy(coef[i], cf + t.img[m].coef * 64, items[i].im.nblocks * 64 * sizeof(int16_t));
        m++;
    }
    free(fl);
    free(cf);
    jh_tbatch_free(&t);
}

typedef struct tally {
    size_t files, taken, huff, decoded, flagged, flagged_lj_ok, slow, bad, mismatched;
} tally_t;

/* Decodes the items as batches with every number of rounds, both orders,
 * and checks them against libjpeg (item.must: taken and decoded when libjpeg
 * reads it without a warning). */
static void check_items(tally_t *t, item_t *items, size_t n)
{
    uint32_t *flags = calloc(n, sizeof *flags);
    int16_t **coef = calloc(n, sizeof *coef);
    assert_true(flags && coef);
    /* round counts: the first few, where most chunks settle, the middle, the
     * product's and one more */
    static const int round_counts[] = {0, 1, 2, 3, JH_ROUNDS / 2, JH_ROUNDS, JH_ROUNDS + 1};
    const size_t nr = sizeof round_counts / sizeof round_counts[0];
    /* then the product's rounds with other chunk sizes (item_chunk_bits: one
     * for all, and mixed in one batch) */
    for (size_t ri = 0; ri < nr + 4; ri++)
        for (int rev = 0; rev < 2; rev++) {
            const int rounds = ri < nr ? round_counts[ri] : JH_ROUNDS, mode = ri < nr ? 0 : (int)(ri - nr) + 1;
            int count = ri < nr && rounds == JH_ROUNDS && rev == 0; /* the product's configuration */
            memset(flags, 0, n * sizeof *flags);
            for (size_t i = 0; i < n; i++) item_restage(&items[i], item_chunk_bits(mode, i));
            run_batch(items, n, rounds, rev, flags, coef);
            for (size_t i = 0; i < n; i++) {
                item_t *it = &items[i];
                if (count) {
                    t->files++;
                    t->taken += (size_t)it->taken;
                    t->huff += (size_t)it->huff;
                }
                if (!it->huff) {
                    if (count && it->must && it->lj_ok) {
                        printf("  NOT TAKEN %s\n", it->name);
                        t->bad++;
                    }
                    continue;
                }
                if (flags[i]) {
                    /* JH_E_SLOW: left to the CPU for speed, not for its data */
                    const int slow = (flags[i] & JH_E_SLOW) != 0;
                    if (count) {
                        t->flagged++;
                        t->slow += (size_t)slow;
                        if (slow) printf("  slow: %s\n", it->name);
                        t->flagged_lj_ok += (size_t)(it->lj_ok && !slow);
                        if (it->must && it->lj_ok && !slow) {
                            printf("  FLAGGED %s (0x%x) although libjpeg reads it\n", it->name, flags[i]);
                            t->bad++;
                        }
                    }
                } else if (!it->lj_ok) {
                    printf("  DECODED %s (rounds %d) although libjpeg warns\n", it->name, rounds);
                    t->bad++;
                } else if (memcmp(coef[i], it->lj, it->im.nblocks * 64 * sizeof(int16_t)) != 0) {
                    size_t k = 0;
                    while (coef[i][k] == it->lj[k]) k++;
                    printf("  MISMATCH %s (rounds %d, %s, chunks of %u bits): block %zu coefficient %zu: %d, "
                           "libjpeg %d\n", it->name, rounds, rev ? "backwards" : "forwards", it->img.sc.chunk_bits,
                           k / 64, k % 64, coef[i][k], it->lj[k]);
                    t->mismatched++;
                } else if (count) {
                    t->decoded++;
                }
                free(coef[i]);
                coef[i] = NULL;
            }
        }
    for (size_t i = 0; i < n; i++) item_restage(&items[i], JH_CHUNK_BITS);
    free(flags);
    free(coef);
}

static void tally_print(const char *what, const tally_t *t)
{
    printf("%-34s files %5zu  exact-path %5zu  huff %5zu  decoded %5zu  flagged %4zu (libjpeg ok %zu, slow %zu)  "
           "bad %zu  mismatched %zu\n",
           what, t->files, t->taken, t->huff, t->decoded, t->flagged, t->flagged_lj_ok, t->slow, t->bad,
           t->mismatched);
}

/* ------------------------------------------------------------ tests */

/* Table building: libjpeg's rules for what a table may be. */
static void test_tables(void **state)
{
    jh_table_t t;
    uint8_t bits[17] = {0}, val[256];
    int len, sym;
    (void)state;
    for (int i = 0; i < 256; i++) val[i] = (uint8_t)i;
    bits[2] = 3; /* 00 01 10, then 110 1110 11110 ... */
    bits[3] = 1;
    bits[16] = 1;
    assert_int_equal(jh_table_build(&t, bits, val), 0);
    sym = jh_symbol(&t, 0x40000000u, &len); /* 01 */
    assert_int_equal(len, 2);
    assert_int_equal(sym, 1);
    sym = jh_symbol(&t, 0xC0000000u, &len); /* 110 */
    assert_int_equal(len, 3);
    assert_int_equal(sym, 3);
    sym = jh_symbol(&t, 0xE0000000u, &len); /* 1110 0000 0000 0000 (16 bits) */
    assert_int_equal(len, 16);
    assert_int_equal(sym, 4);
    (void)jh_symbol(&t, 0xFFFF0000u, &len); /* no code */
    assert_int_equal(len, 0);
    memset(bits, 0, sizeof bits);
    bits[1] = 2; /* 0 and 1: every 1-bit string used, libjpeg refuses it */
    assert_int_equal(jh_table_build(&t, bits, val), -1);
    memset(bits, 0, sizeof bits);
    bits[2] = 5; /* five codes of 2 bits: refused before any lookup entry is written (past the end of look[]
                  * lie the symbols: they stay as they were copied) */
    assert_int_equal(jh_table_build(&t, bits, val), -1);
    for (int i = 0; i < 256; i++) assert_int_equal(t.val[i], i < 5 ? i : 0);
    /* the bit reader: bits beyond the end read as zeros */
    {
        const uint8_t d[8] = {0xA5, 0xFF, 0x12, 0x34, 0x56, 0, 0, 0};
        assert_int_equal(jh_peek(d, 40, 0), 0xA5FF1234u);
        assert_int_equal(jh_peek(d, 40, 4), 0x5FF12345u);
        assert_int_equal(jh_peek(d, 12, 4), 0x5F000000u);
        assert_int_equal(jh_peek(d, 12, 12), 0u);
    }
    assert_int_equal(jh_extend(0, 1), -1);
    assert_int_equal(jh_extend(1, 1), 1);
    assert_int_equal(jh_extend(3, 3), -4);
    assert_int_equal(jh_extend(4, 3), 4);
}

static void test_generated(void **state)
{
    tally_t all = {0}, other = {0};
    char (*names)[96];
    (void)state;
    names = calloc(JXC_NCASES + JXC_NSWEEP, sizeof *names);
    assert_non_null(names);
    /* in batches of 16 consecutive cases (sizes and modes mixed) */
    for (size_t i0 = 0; i0 < JXC_NCASES + JXC_NSWEEP; i0 += 16) {
        item_t items[16];
        size_t n = 0;
        for (size_t i = i0; i < i0 + 16 && i < JXC_NCASES + JXC_NSWEEP; i++, n++) {
            jxc_case_t k = i < JXC_NCASES ? jxc_case(i) : jxc_sweep(i - JXC_NCASES);
            unsigned long size = 0;
            unsigned char *jpg = jxc_make(&size, &jxc_modes[k.mode], k.coding, k.quality, k.w, k.h, k.kind, k.seed);
            snprintf(names[i], sizeof names[i], "%s %s %dx%d q%d", jxc_modes[k.mode].name,
                     jxc_coding_names[k.coding], k.w, k.h, k.quality);
            item_make(&items[n], jpg, size, names[i]);
            /* what the Huffman decoder must take: the sequential Huffman codings */
            if (k.coding != JXC_BASE && k.coding != JXC_OPT && k.coding != JXC_RST) {
                if (items[n].huff) fail_msg("%s: taken by the Huffman decoder", names[i]);
            } else {
                items[n].must = 1;
            }
            free(jpg);
        }
        check_items(&all, items, n);
        for (size_t i = 0; i < n; i++) item_free(&items[i]);
    }
    (void)other;
    tally_print("generated (all modes and codings)", &all);
    free(names);
    assert_int_equal(all.bad, 0);
    assert_int_equal(all.mismatched, 0);
    assert_true(all.decoded > 0);
    /* every generated file settles within the rounds (docs/lab/jpeg.md,
     * 2026-11-30: 13 did not before the guesses read on past errors): one
     * left to the CPU for speed means the rounds lost ground */
    assert_int_equal(all.slow, 0);
}

/* Larger pictures: many chunks per interval, restart intervals of several
 * lengths, every subsampling, both table kinds. */
static void test_large(void **state)
{
    static const int modes[] = {0, 1, 2, 3, 4, 9};
    static const unsigned rsts[] = {0, 1, 7, 64};
    static const int sizes[][2] = {{640, 480}, {333, 517}};
    tally_t all = {0};
    char names[6 * 4 * 2 * 2][96];
    item_t items[8];
    size_t n = 0, at = 0;
    (void)state;
    for (size_t m = 0; m < 6; m++)
        for (size_t r = 0; r < 4; r++)
            for (size_t s = 0; s < 2; s++)
                for (int opt = 0; opt < 2; opt++) {
                    unsigned long size = 0;
                    int q = 30 + (int)((m * 17 + r * 29 + s * 7) % 71);
                    unsigned char *jpg = make_jpeg(&size, &jxc_modes[modes[m]], q, sizes[s][0], sizes[s][1],
                                                   (int)((m + r + s) % 4), 90 + at, rsts[r], opt);
                    snprintf(names[at], sizeof names[at], "%s rst %u %dx%d q%d%s", jxc_modes[modes[m]].name,
                             rsts[r], sizes[s][0], sizes[s][1], q, opt ? " opt" : "");
                    item_make(&items[n], jpg, size, names[at]);
                    items[n++].must = 1;
                    at++;
                    free(jpg);
                    if (n == 8) {
                        check_items(&all, items, n);
                        for (size_t i = 0; i < n; i++) item_free(&items[i]);
                        n = 0;
                    }
                }
    tally_print("larger pictures", &all);
    assert_int_equal(all.bad, 0);
    assert_int_equal(all.mismatched, 0);
    assert_int_equal(all.decoded + all.slow, all.files);
}

static void test_samples(void **state)
{
    const char *dir = getenv("PATINA_SAMPLES");
    char **files = NULL;
    size_t n, i;
    tally_t t = {0};
    (void)state;
    if (!dir || !*dir) dir = PATINA_SAMPLES_DIR;
    n = tu_list_files(dir, "jpg,jpeg,JPG,JPEG", &files);
    if (n == 0) {
        printf("no sample photographs under %s (scripts/fetch-samples.sh); skipped\n", dir);
        return;
    }
    for (i = 0; i < n; i++) {
        size_t size;
        void *data = tu_read_file(files[i], &size);
        item_t it;
        item_make(&it, data, size, files[i]);
        /* photographs: one at a time (some are large), all configurations */
        check_items(&t, &it, 1);
        item_free(&it);
        free(data);
    }
    tally_print("sample photographs", &t);
    tu_free_list(files, n);
    assert_int_equal(t.bad, 0);
    assert_int_equal(t.mismatched, 0);
    assert_true(t.flagged_lj_ok == 0); /* none of them damaged */
}

/* Damaged copies of a few files: whatever the Huffman decoder does not flag
 * must be what libjpeg reads without a warning, coefficient for coefficient. */
static void test_damaged(void **state)
{
    tally_t t = {0}, trunc = {0};
    tu_rng_t rng;
    (void)state;
    tu_rng_seed(&rng, 31);
    for (int f = 0; f < 4; f++) {
        unsigned long size = 0;
        unsigned char *jpg = make_jpeg(&size, &jxc_modes[f == 3 ? 9 : 2], 75, 200 + 40 * f, 150 + 30 * f, f, 500 + f,
                                       f == 1 ? 4u : f == 2 ? 1u : 0u, f == 3);
        unsigned char *bad = malloc(size + 64);
        size_t sos = 0;
        assert_non_null(bad);
        for (size_t i = 2; i + 1 < size; i++)
            if (jpg[i] == 0xFF && jpg[i + 1] == 0xDA) {
                sos = i + 4 + ((size_t)jpg[i + 2] << 8 | jpg[i + 3]) - 2;
                break;
            }
        assert_true(sos > 0);
        /* truncated anywhere in the scan: libjpeg warns; every one flagged or refused */
        for (int k = 1; k <= 24; k++) {
            item_t it;
            size_t cut = sos + (size - sos) * (size_t)k / 25;
            if (k == 24) cut = size - 2; /* just the end-of-image marker missing */
            item_make(&it, jpg, cut, "truncated");
            check_items(&trunc, &it, 1);
            item_free(&it);
        }
        /* bytes and single bits flipped in the scan */
        for (int k = 0; k < 60; k++) {
            item_t it;
            size_t at = sos + tu_rng_below(&rng, (uint32_t)(size - 2 - sos));
            memcpy(bad, jpg, size);
            if (k % 2) bad[at] ^= (uint8_t)(1u << tu_rng_below(&rng, 8));
            else bad[at] = (uint8_t)tu_rng_below(&rng, 256);
            item_make(&it, bad, size, k % 2 ? "bit flipped" : "byte replaced");
            check_items(&t, &it, 1);
            item_free(&it);
        }
        /* bytes cut out of the scan (the markers still in place): short intervals */
        for (int k = 0; k < 24; k++) {
            item_t it;
            size_t at = sos + tu_rng_below(&rng, (uint32_t)(size - 40 - sos)), len = 1 + tu_rng_below(&rng, 16);
            memcpy(bad, jpg, at);
            memcpy(bad + at, jpg + at + len, size - at - len);
            item_make(&it, bad, size - len, "bytes cut out");
            check_items(&t, &it, 1);
            item_free(&it);
        }
        /* garbage before the end-of-image marker: flagged */
        {
            item_t it;
            memcpy(bad, jpg, size - 2);
            memcpy(bad + size - 2, "\x12\x34\xFF\xD9", 4);
            tally_t g = {0};
            item_make(&it, bad, size + 2, "garbage before EOI");
            check_items(&g, &it, 1);
            /* libjpeg may drop those bytes silently (read ahead into its bit
             * buffer) or warn: left to it either way */
            assert_int_equal(g.decoded + g.bad + g.mismatched, 0);
            assert_int_equal(g.flagged, (size_t)it.huff);
            item_free(&it);
        }
        /* garbage after the end-of-image marker: ignored by both */
        {
            item_t it;
            memcpy(bad, jpg, size);
            memcpy(bad + size, "\x12\x34\xFF\x00", 4);
            item_make(&it, bad, size + 4, "garbage after EOI");
            it.must = 1;
            check_items(&t, &it, 1);
            item_free(&it);
        }
        /* restart markers swapped or removed */
        if (f == 1 || f == 2) {
            item_t it;
            size_t first = 0;
            memcpy(bad, jpg, size);
            for (size_t i = sos; i + 1 < size; i++)
                if (bad[i] == 0xFF && bad[i + 1] >= 0xD0 && bad[i + 1] <= 0xD7) {
                    if (!first) first = i + 1;
                    else {
                        uint8_t x = bad[first];
                        bad[first] = bad[i + 1];
                        bad[i + 1] = x;
                        break;
                    }
                }
            item_make(&it, bad, size, "restart markers swapped");
            assert_false(it.huff);
            check_items(&t, &it, 1);
            item_free(&it);
            /* one restart marker removed: the intervals run together */
            memcpy(bad, jpg, first - 1);
            memcpy(bad + first - 1, jpg + first + 1, size - first - 1);
            item_make(&it, bad, size - 2, "restart marker removed");
            assert_false(it.huff && it.lj_ok);
            check_items(&t, &it, 1);
            item_free(&it);
        }
        free(bad);
        free(jpg);
    }
    tally_print("truncated", &trunc);
    tally_print("damaged", &t);
    assert_int_equal(trunc.bad + t.bad, 0);
    assert_int_equal(trunc.mismatched + t.mismatched, 0);
    assert_int_equal(trunc.decoded, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_generated),
        cmocka_unit_test(test_large),
        cmocka_unit_test(test_damaged),
        cmocka_unit_test(test_samples),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
