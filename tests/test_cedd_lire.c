/* CEDD against LIRE itself: golden values that LIRE's Java CEDD (commit
 * 5fcd0a3, OpenJDK 17) computed for the synthetic images in tests/data/cedd
 * and for real photographs from Debian packages (tests/data/cedd/README.md).
 *
 * For every image, in this order, so that decoder differences are told apart
 * from descriptor differences:
 *   1. decode with patina_image_load / patina_image_decode and compare the
 *      SHA-256 of the 8-bit RGB with that of the RGB Java's CEDD read;
 *   2. compare normal and compact CEDD (all 144 bins) with LIRE's;
 *   3. compare patina_cedd_pack with getByteArrayRepresentation.
 * Tanimoto distances are checked on LIRE's own descriptors from the golden
 * files, to the last bit (==), in both directions.
 *
 * Photographs are looked up under $PATINA_SAMPLES (default: the build's
 * PATINA_SAMPLES_DIR, filled by scripts/fetch-samples.sh) by the SHA-256 of
 * the file, never by name. Missing photographs are reported as SKIPPED; the
 * synthetic part always runs. */
#define _GNU_SOURCE /* asprintf */
#include "testutil.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "patina/cedd.h"
#include "patina/image.h"
#include "patina/store.h"

#define GOLDEN_SYNTH PATINA_TEST_DATA "/cedd/lire_golden.txt"
#define GOLDEN_PHOTOS PATINA_TEST_DATA "/cedd/lire_golden_photos.txt"

/* One image line of a golden file (format in the file's header). */
typedef struct golden_img {
    char *label;
    int w, h, jtype;
    uint8_t file_sha[32], rgb_sha[32];
    uint8_t normal[PATINA_CEDD_DIM], compact[PATINA_CEDD_DIM];
    uint8_t packed[PATINA_CEDD_PACKED_MAX], cpacked[PATINA_CEDD_PACKED_MAX];
    size_t npacked, ncpacked;
} golden_img_t;

/* One "tanimoto" line: a.getDistance(b) in LIRE. */
typedef struct golden_tan {
    int compact;
    size_t a, b;         /* indices into the image table */
    uint64_t bits;       /* Double.doubleToRawLongBits */
    double dec;          /* the %.17g decimal, parsed */
} golden_tan_t;

typedef struct golden {
    golden_img_t *img;
    size_t nimg;
    golden_tan_t *tan;
    size_t ntan;
} golden_t;

/* ------------------------------------------------------------------ parsing */

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Parses lower/upper-case hex into out (at most max bytes); returns the byte
 * count or -1. */
static long parse_hex(uint8_t *out, size_t max, const char *s)
{
    size_t n = strlen(s), i;
    if (n % 2 || n / 2 > max) return -1;
    for (i = 0; i < n / 2; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0) return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return (long)(n / 2);
}

static int parse_bins(uint8_t out[PATINA_CEDD_DIM], const char *s)
{
    int i;
    if (strlen(s) != PATINA_CEDD_DIM) return -1;
    for (i = 0; i < PATINA_CEDD_DIM; i++) {
        if (s[i] < '0' || s[i] > '7') return -1;
        out[i] = (uint8_t)(s[i] - '0');
    }
    return 0;
}

static const char *field(char **tok, int ntok, const char *key)
{
    size_t k = strlen(key);
    int i;
    for (i = 0; i < ntok; i++)
        if (!strncmp(tok[i], key, k) && tok[i][k] == ':') return tok[i] + k + 1;
    return NULL;
}

static size_t find_label(const golden_t *g, const char *label)
{
    size_t i;
    for (i = 0; i < g->nimg; i++)
        if (!strcmp(g->img[i].label, label)) return i;
    return (size_t)-1;
}

static void golden_load(golden_t *g, const char *path)
{
    void *data;
    size_t size, cap_img = 0, cap_tan = 0;
    char *text, *line, *save = NULL;
    int lineno = 0;

    memset(g, 0, sizeof *g);
    TU_OK(patina_file_read(&data, &size, path, NULL));
    text = realloc(data, size + 1);
    assert_non_null(text);
    text[size] = '\0';
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *tok[16], *tsave = NULL, *t;
        int ntok = 0;
        lineno++;
        if (line[0] == '#' || line[0] == '\0') continue;
        for (t = strtok_r(line, " ", &tsave); t && ntok < 16; t = strtok_r(NULL, " ", &tsave))
            tok[ntok++] = t;
        if (ntok == 0) continue;
        if (!strcmp(tok[0], "tanimoto")) {
            golden_tan_t *e;
            char *end;
            if (ntok != 6) fail_msg("%s: line %d: bad tanimoto line", path, lineno);
            if (g->ntan == cap_tan) {
                cap_tan = cap_tan ? 2 * cap_tan : 256;
                g->tan = realloc(g->tan, cap_tan * sizeof *g->tan);
            }
            e = &g->tan[g->ntan++];
            e->compact = !strcmp(tok[1], "compact");
            e->a = find_label(g, tok[2]);
            e->b = find_label(g, tok[3]);
            if (e->a == (size_t)-1 || e->b == (size_t)-1)
                fail_msg("%s: line %d: tanimoto names an unknown image", path, lineno);
            e->dec = strtod(tok[4], &end);
            if (*end) fail_msg("%s: line %d: bad decimal %s", path, lineno, tok[4]);
            e->bits = strtoull(tok[5], &end, 16);
            if (*end || strlen(tok[5]) != 16) fail_msg("%s: line %d: bad bits %s", path, lineno, tok[5]);
        } else {
            golden_img_t *im;
            const char *f, *r, *n, *c, *p, *cp, *jt;
            long len;
            if (g->nimg == cap_img) {
                cap_img = cap_img ? 2 * cap_img : 128;
                g->img = realloc(g->img, cap_img * sizeof *g->img);
            }
            im = &g->img[g->nimg];
            memset(im, 0, sizeof *im);
            f = field(tok, ntok, "file");
            r = field(tok, ntok, "rgb");
            n = field(tok, ntok, "normal");
            c = field(tok, ntok, "compact");
            p = field(tok, ntok, "packed");
            cp = field(tok, ntok, "cpacked");
            jt = field(tok, ntok, "jtype");
            if (ntok < 2 || sscanf(tok[1], "%dx%d", &im->w, &im->h) != 2 || !f || !r || !n ||
                !c || !p || !cp || !jt || parse_hex(im->file_sha, 32, f) != 32 ||
                parse_hex(im->rgb_sha, 32, r) != 32 || parse_bins(im->normal, n) ||
                parse_bins(im->compact, c))
                fail_msg("%s: line %d: bad image line", path, lineno);
            im->jtype = atoi(jt);
            if ((len = parse_hex(im->packed, PATINA_CEDD_PACKED_MAX, p)) < 1)
                fail_msg("%s: line %d: bad packed", path, lineno);
            im->npacked = (size_t)len;
            if ((len = parse_hex(im->cpacked, PATINA_CEDD_PACKED_MAX, cp)) < 1)
                fail_msg("%s: line %d: bad cpacked", path, lineno);
            im->ncpacked = (size_t)len;
            im->label = strdup(tok[0]);
            g->nimg++;
        }
    }
    free(text);
    if (g->nimg == 0) fail_msg("%s: no images", path);
}

static void golden_free(golden_t *g)
{
    size_t i;
    for (i = 0; i < g->nimg; i++) free(g->img[i].label);
    free(g->img);
    free(g->tan);
    memset(g, 0, sizeof *g);
}

/* ---------------------------------------------------------------- compare */

static void sha_hex(char out[65], const uint8_t sha[32])
{
    int i;
    for (i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", sha[i]);
}

/* SHA-256 of the pixels as W*H*3 bytes, row-major, without the row padding. */
static void rgb_sha(uint8_t out[32], const patina_image_t *img)
{
    size_t row = 3 * (size_t)img->width, y;
    uint8_t *buf = malloc(row * (size_t)img->height + 1);
    assert_non_null(buf);
    for (y = 0; y < (size_t)img->height; y++)
        memcpy(buf + y * row, img->data + y * img->stride, row);
    patina_sha256(out, buf, row * (size_t)img->height);
    free(buf);
}

static void print_bins(const char *tag, const uint8_t h[PATINA_CEDD_DIM])
{
    int i;
    printf("      %s ", tag);
    for (i = 0; i < PATINA_CEDD_DIM; i++) putchar('0' + h[i]);
    putchar('\n');
}

/* Mismatch counts of one run over a set of images. */
typedef struct tally {
    int images, decode_fail, size_diff, rgb_diff;
    int icc_diff;             /* RGB differs only through an embedded ICC profile (known) */
    int normal_ok, compact_ok, packed_ok, cpacked_ok;
    int cedd_diff_same_rgb;   /* descriptor differs although the RGB is Java's: a CEDD bug */
} tally_t;

/* Checks one decoded image against its golden line. */
/* Whether a JPEG carries an embedded ICC profile (an APP2 "ICC_PROFILE" segment).
 * Java converts such files through the profile with LittleCMS; Patina, like
 * every other decoder here, ignores the profile (docs/images.md). */
static int jpeg_has_icc(const uint8_t *d, size_t n)
{
    size_t i = 2;
    if (n < 4 || d[0] != 0xFF || d[1] != 0xD8) return 0;
    while (i + 4 <= n && d[i] == 0xFF) {
        unsigned m = d[i + 1], len = (unsigned)d[i + 2] << 8 | d[i + 3];
        if (m == 0xDA || m == 0xD9) break;              /* start of scan: no more markers */
        if (m == 0xE2 && len >= 14 && i + 4 + 12 <= n && !memcmp(d + i + 4, "ICC_PROFILE\0", 12))
            return 1;
        i += 2 + len;
    }
    return 0;
}

static void check_image(tally_t *t, const golden_img_t *gi, const patina_image_t *img,
                        const patina_image_info_t *info, int icc)
{
    uint8_t sha[32], n[PATINA_CEDD_DIM], c[PATINA_CEDD_DIM], pk[PATINA_CEDD_PACKED_MAX];
    size_t len;
    int rgb_same, n_ok, c_ok;
    char a[65], b[65];

    t->images++;
    if (img->width != gi->w || img->height != gi->h) {
        t->size_diff++;
        printf("  DECODE %s: size %dx%d, Java %dx%d\n", gi->label, img->width, img->height, gi->w,
               gi->h);
        return;
    }
    rgb_sha(sha, img);
    rgb_same = !memcmp(sha, gi->rgb_sha, 32);
    if (!rgb_same) {
        sha_hex(a, sha);
        sha_hex(b, gi->rgb_sha);
        if (icc) {
            t->icc_diff++;
            printf("  KNOWN %s: embedded ICC profile, which Java applies and Patina ignores "
                   "(docs/images.md); RGB SHA-256 %s, Java %s; the descriptors must still match\n",
                   gi->label, a, b);
        } else {
            t->rgb_diff++;
            printf("  DECODE %s (%s, %d channel(s), %d-bit; Java type %d): RGB SHA-256 %s, Java %s\n",
                   gi->label, patina_format_name(info->format), info->channels, info->bit_depth,
                   gi->jtype, a, b);
        }
    }
    TU_OK(patina_cedd_extract(n, img, 0));
    TU_OK(patina_cedd_extract(c, img, 1));
    n_ok = !memcmp(n, gi->normal, PATINA_CEDD_DIM);
    c_ok = !memcmp(c, gi->compact, PATINA_CEDD_DIM);
    t->normal_ok += n_ok;
    t->compact_ok += c_ok;
    if (!n_ok || !c_ok) {
        if (rgb_same || icc) t->cedd_diff_same_rgb++;
        printf("  CEDD %s: %s%s differ%s\n", gi->label, n_ok ? "" : "normal ", c_ok ? "" : "compact ",
               rgb_same ? " (same RGB as Java: a CEDD difference)" : " (follows the decode difference)");
        if (!n_ok) {
            print_bins("patina normal ", n);
            print_bins("LIRE   normal ", gi->normal);
        }
        if (!c_ok) {
            print_bins("patina compact", c);
            print_bins("LIRE   compact", gi->compact);
        }
    }
    len = patina_cedd_pack(pk, n);
    if (len == gi->npacked && !memcmp(pk, gi->packed, len)) t->packed_ok++;
    else printf("  PACKED %s: normal packing differs (%zu bytes, LIRE %zu)\n", gi->label, len, gi->npacked);
    len = patina_cedd_pack(pk, c);
    if (len == gi->ncpacked && !memcmp(pk, gi->cpacked, len)) t->cpacked_ok++;
    else printf("  PACKED %s: compact packing differs (%zu bytes, LIRE %zu)\n", gi->label, len, gi->ncpacked);
}

static void print_tally(const char *what, const tally_t *t)
{
    printf("%s: %d images: decode failed %d, size differs %d, RGB differs %d "
           "(+%d known ICC-profile differences); "
           "bit-identical to LIRE: normal %d, compact %d, packed %d, compact packed %d; "
           "CEDD differences with Java's RGB: %d\n",
           what, t->images, t->decode_fail, t->size_diff, t->rgb_diff, t->icc_diff, t->normal_ok, t->compact_ok,
           t->packed_ok, t->cpacked_ok, t->cedd_diff_same_rgb);
}

static int tally_clean(const tally_t *t)
{
    return t->decode_fail == 0 && t->size_diff == 0 && t->rgb_diff == 0 &&
           t->normal_ok == t->images && t->compact_ok == t->images &&
           t->packed_ok == t->images && t->cpacked_ok == t->images;
}

/* ------------------------------------------------------------------ tests */

/* Tanimoto of LIRE's own descriptors: bit for bit, both directions. */
static void check_tanimoto(const char *path)
{
    golden_t g;
    size_t i;
    int bad = 0;
    golden_load(&g, path);
    for (i = 0; i < g.ntan; i++) {
        const golden_tan_t *e = &g.tan[i];
        const golden_img_t *a = &g.img[e->a], *b = &g.img[e->b];
        const uint8_t *ha = e->compact ? a->compact : a->normal;
        const uint8_t *hb = e->compact ? b->compact : b->normal;
        double want, ab = patina_cedd_tanimoto(ha, hb), ba = patina_cedd_tanimoto(hb, ha);
        memcpy(&want, &e->bits, sizeof want);
        if (want != e->dec) fail_msg("%s: decimal %.17g and bits of entry %zu disagree", path, e->dec, i);
        if (ab != want || ba != want) {
            printf("  TANIMOTO %s %s %s: patina %.17g / reversed %.17g, LIRE %.17g\n",
                   e->compact ? "compact" : "normal", a->label, b->label, ab, ba, want);
            bad++;
        }
    }
    printf("%s: %zu Tanimoto distances, %zu bit-identical to LIRE (both directions)\n", path, g.ntan,
           g.ntan - (size_t)bad);
    fflush(stdout);
    assert_true(g.ntan > 0);
    golden_free(&g);
    if (bad) fail_msg("%d Tanimoto distances differ from LIRE", bad);
}

static void test_tanimoto_synthetic(void **state)
{
    (void)state;
    check_tanimoto(GOLDEN_SYNTH);
}

static void test_tanimoto_photos(void **state)
{
    (void)state;
    check_tanimoto(GOLDEN_PHOTOS);
}

/* Packing of LIRE's descriptors, and unpacking LIRE's bytes. */
static void test_pack_golden(void **state)
{
    const char *paths[2] = {GOLDEN_SYNTH, GOLDEN_PHOTOS};
    int k;
    (void)state;
    for (k = 0; k < 2; k++) {
        golden_t g;
        size_t i;
        golden_load(&g, paths[k]);
        for (i = 0; i < g.nimg; i++) {
            const golden_img_t *gi = &g.img[i];
            uint8_t pk[PATINA_CEDD_PACKED_MAX], h[PATINA_CEDD_DIM];
            size_t len = patina_cedd_pack(pk, gi->normal);
            if (len != gi->npacked || memcmp(pk, gi->packed, len))
                fail_msg("%s: packing LIRE's normal descriptor differs", gi->label);
            len = patina_cedd_pack(pk, gi->compact);
            if (len != gi->ncpacked || memcmp(pk, gi->cpacked, len))
                fail_msg("%s: packing LIRE's compact descriptor differs", gi->label);
            TU_OK(patina_cedd_unpack(h, gi->packed, gi->npacked));
            assert_memory_equal(h, gi->normal, PATINA_CEDD_DIM);
            TU_OK(patina_cedd_unpack(h, gi->cpacked, gi->ncpacked));
            assert_memory_equal(h, gi->compact, PATINA_CEDD_DIM);
        }
        golden_free(&g);
    }
}

/* Every synthetic image: decode, RGB, descriptors, packing. */
static void test_synthetic(void **state)
{
    golden_t g;
    tally_t t = {0};
    size_t i;
    (void)state;
    golden_load(&g, GOLDEN_SYNTH);
    for (i = 0; i < g.nimg; i++) {
        const golden_img_t *gi = &g.img[i];
        char *path;
        void *data;
        size_t size;
        uint8_t fsha[32];
        patina_image_t img = {0};
        patina_image_info_t info = {0};
        patina_status s;

        if (asprintf(&path, "%s/cedd/%s", PATINA_TEST_DATA, gi->label) < 0) fail();
        TU_OK(patina_file_read(&data, &size, path, NULL));
        patina_sha256(fsha, data, size);
        if (memcmp(fsha, gi->file_sha, 32))
            fail_msg("%s: the file is not the one LIRE saw (file SHA-256 differs); regenerate "
                     "lire_golden.txt after changing test images", path);
        TU_OK(patina_image_probe(&info, data, size, path));
        s = patina_image_decode(&img, data, size, NULL, path);
        if (s != PATINA_OK) {
            t.images++;
            t.decode_fail++;
            printf("  DECODE %s: failed: %s: %s\n", gi->label, patina_status_str(s), patina_last_error());
        } else {
            check_image(&t, gi, &img, &info, 0);
        }
        patina_image_release(&img);
        free(data);
        free(path);
    }
    print_tally("synthetic images (tests/data/cedd)", &t);
    fflush(stdout);
    golden_free(&g);
    if (!tally_clean(&t)) fail_msg("synthetic images differ from LIRE (details above)");
}

/* Real photographs under $PATINA_SAMPLES, matched by file SHA-256. */
static void test_photos(void **state)
{
    golden_t g;
    tally_t t = {0};
    const char *dir = getenv("PATINA_SAMPLES");
    char **files = NULL;
    size_t nfiles, i, j, missing = 0;
    int *seen;
    (void)state;

    if (!dir || !*dir) dir = PATINA_SAMPLES_DIR;
    golden_load(&g, GOLDEN_PHOTOS);
    seen = calloc(g.nimg, sizeof *seen);
    assert_non_null(seen);
    nfiles = tu_list_files(dir, "jpg,jpeg,png", &files);
    for (i = 0; i < nfiles; i++) {
        void *data;
        size_t size;
        uint8_t fsha[32];
        if (patina_file_read(&data, &size, files[i], NULL) != PATINA_OK) continue;
        patina_sha256(fsha, data, size);
        for (j = 0; j < g.nimg; j++) {
            patina_image_t img = {0};
            patina_image_info_t info = {0};
            patina_status s;
            if (seen[j] || memcmp(fsha, g.img[j].file_sha, 32)) continue;
            seen[j] = 1;
            TU_OK(patina_image_probe(&info, data, size, files[i]));
            s = patina_image_decode(&img, data, size, NULL, files[i]);
            if (s != PATINA_OK) {
                t.images++;
                t.decode_fail++;
                printf("  DECODE %s: failed: %s: %s\n", g.img[j].label, patina_status_str(s),
                       patina_last_error());
            } else {
                check_image(&t, &g.img[j], &img, &info, jpeg_has_icc(data, size));
            }
            patina_image_release(&img);
            break;
        }
        free(data);
    }
    tu_free_list(files, nfiles);
    for (j = 0; j < g.nimg; j++) missing += !seen[j];
    /* The golden file covers more photographs than scripts/fetch-samples.sh
     * copies; point PATINA_SAMPLES at the unpacked packages for all of them. */
    if (missing)
        printf("SKIPPED %zu photos: %zu of the %zu photographs in lire_golden_photos.txt are not "
               "under %s (matched by SHA-256); run scripts/fetch-samples.sh, or set "
               "PATINA_SAMPLES to the unpacked Debian packages for all of them\n",
               missing, missing, g.nimg, dir);
    print_tally("photographs", &t);
    fflush(stdout);
    free(seen);
    golden_free(&g);
    if (!tally_clean(&t)) fail_msg("photographs differ from LIRE (details above)");
    if (t.images == 0) skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tanimoto_synthetic),
        cmocka_unit_test(test_tanimoto_photos),
        cmocka_unit_test(test_pack_golden),
        cmocka_unit_test(test_synthetic),
        cmocka_unit_test(test_photos),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
