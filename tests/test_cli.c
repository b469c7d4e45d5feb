/* End-to-end tests of the `patina` program on images generated here (JPEG
 * through TurboJPEG, PNG and PNM headers by hand), so they need no sample
 * photographs (test_cli_samples.c has the tests on real photographs): usage
 * errors and exit statuses, --help, CSV and JSON output of odd paths, a
 * family the collection lacks, a missing GLCM mask, symbolic link loops and
 * unreadable folders, decompression bombs and --max-pixels, --batch-memory,
 * damaged JPEGs and --strict, parallel extraction. The program runs without
 * a shell (tu_exec), so any byte can be in an argument. The argv parser
 * (src/cli/args.c, linked in) is also tested directly, on chosen and on
 * random command lines.
 * PATINA_TEST_CLI names another `patina` binary to test (e.g. an older
 * build, to see these tests fail there). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <turbojpeg.h>

#include "cli/cli.h"
#include "store/store_internal.h"
#include "testutil.h"

static char *tmp;
static const char *cli = PATINA_CLI;

/* Runs `patina ARGS...` (NULL-terminated), at most 120 s. */
#define RUN(out, err, ...) tu_exec(out, err, 0, 120, (const char *const[]){cli, __VA_ARGS__, NULL})
#define RUN_UNPRIV(out, err, ...) \
    tu_exec(out, err, TU_UNPRIVILEGED, 120, (const char *const[]){cli, __VA_ARGS__, NULL})

/* "<tmp>/<printf>" in one of 32 rotating buffers. */
#define tp(...) tu_path(tmp, __VA_ARGS__)

static size_t count_lines(const char *s)
{
    size_t n = 0;
    for (; s && *s; s++) n += *s == '\n';
    return n;
}

static void expect_in(const char *haystack, const char *needle)
{
    if (!haystack || !strstr(haystack, needle))
        fail_msg("expected \"%s\" in:\n%s", needle, haystack ? haystack : "(null)");
}

/* ------------------------------------------------------------ test images */

/* A w x h JPEG of smooth noise (4:2:0, quality 90); free with tjFree. */
static unsigned char *make_jpeg(unsigned long *size, int w, int h, uint64_t seed)
{
    return tu_make_jpeg(size, w, h, 1, 90, seed);
}

static void write_jpeg(const char *path, int w, int h, uint64_t seed) { tu_write_jpeg(path, w, h, 1, 90, seed); }

static void copy_file(const char *from, const char *to)
{
    FILE *f = fopen(from, "rb");
    char buf[65536];
    size_t n;
    FILE *g = fopen(to, "wb");
    assert_non_null(f);
    assert_non_null(g);
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) assert_int_equal(fwrite(buf, 1, n, g), n);
    fclose(f);
    assert_int_equal(fclose(g), 0);
}

static uint32_t crc32_bytes(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

/* Decompression bombs: tiny files whose headers declare side x side pixels. */
static void write_bombs(const char *dir, int side)
{
    char path[4096];
    unsigned long size;
    unsigned char *j = make_jpeg(&size, 16, 16, 7);
    size_t i;
    /* JPEG: a real 16x16 file with its frame header (SOF0) saying side x side */
    for (i = 2; i + 8 < size; i++)
        if (j[i] == 0xFF && j[i + 1] == 0xC0) {
            j[i + 5] = (uint8_t)(side >> 8), j[i + 6] = (uint8_t)side;
            j[i + 7] = (uint8_t)(side >> 8), j[i + 8] = (uint8_t)side;
            break;
        }
    assert_true(i + 8 < size);
    assert_true(size < 1024);
    snprintf(path, sizeof path, "%s/bomb.jpg", dir);
    assert_int_equal(tu_write_file(path, j, size), 0);
    tjFree(j);
    {   /* PNG: signature, IHDR (RGB 8-bit), a token IDAT, IEND */
        uint8_t png[8 + 25 + 12 + 8 + 12] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
        uint8_t *p = png + 8;
        put32(p, 13);
        memcpy(p + 4, "IHDR", 4);
        put32(p + 8, (uint32_t)side);
        put32(p + 12, (uint32_t)side);
        p[16] = 8, p[17] = 2, p[18] = 0, p[19] = 0, p[20] = 0;
        put32(p + 21, crc32_bytes(p + 4, 17));
        p += 25;
        put32(p, 8);
        memcpy(p + 4, "IDAT", 4);
        memcpy(p + 8, "\x78\x9c\x63\x60\x00\x00\x00\x02", 8);
        put32(p + 16, crc32_bytes(p + 4, 12));
        p += 20;
        put32(p, 0);
        memcpy(p + 4, "IEND", 4);
        put32(p + 8, crc32_bytes(p + 4, 4));
        snprintf(path, sizeof path, "%s/bomb.png", dir);
        assert_int_equal(tu_write_file(path, png, sizeof png), 0);
    }
    {   /* PNM: a P6 header and a few samples */
        char ppm[128];
        int n = snprintf(ppm, sizeof ppm, "P6\n%d %d\n255\n", side, side);
        memset(ppm + n, 0x55, sizeof ppm - (size_t)n);
        snprintf(path, sizeof path, "%s/bomb.ppm", dir);
        assert_int_equal(tu_write_file(path, ppm, sizeof ppm), 0);
    }
}

/* Damaged but decodable JPEGs from a good one: `extra` has 4 garbage bytes
 * before its SOS marker; `cut` lost the middle third of its entropy-coded
 * data (the file still ends with EOI). */
static void write_damaged(const char *extra, const char *cut, uint64_t seed)
{
    unsigned long size;
    unsigned char *j = make_jpeg(&size, 96, 64, seed), *b = malloc(size + 4);
    size_t i, sos = 0, start = 0, end = size - 2, third;
    assert_true(j[size - 2] == 0xFF && j[size - 1] == 0xD9);
    for (i = 2; i + 3 < size; i++)
        if (j[i] == 0xFF && j[i + 1] == 0xDA) {
            sos = i;
            start = i + 2 + ((size_t)j[i + 2] << 8 | j[i + 3]);
            break;
        }
    assert_true(start > 0 && start < end);
    memcpy(b, j, sos);
    memcpy(b + sos, "\x12\x34\x56\x78", 4);
    memcpy(b + sos + 4, j + sos, size - sos);
    assert_int_equal(tu_write_file(extra, b, size + 4), 0);
    third = (end - start) / 3;
    memcpy(b, j, start + third);
    memcpy(b + start + third, j + start + 2 * third, size - (start + 2 * third));
    assert_int_equal(tu_write_file(cut, b, size - third), 0);
    free(b);
    tjFree(j);
}

/* ------------------------------------------------------------------- CSV */

typedef struct csv_rec {
    char **f;
    size_t n;
} csv_rec_t;

/* Splits RFC 4180 text (LF line ends) into records; fails the test on
 * malformed quoting. */
static size_t csv_parse(const char *s, csv_rec_t **out)
{
    size_t nrec = 0;
    csv_rec_t *recs = NULL;
    while (*s) {
        csv_rec_t r = {NULL, 0};
        for (;;) {
            char *field = malloc(strlen(s) + 1);
            size_t len = 0;
            if (*s == '"') {
                s++;
                for (;;) {
                    if (!*s) fail_msg("CSV: unterminated quoted field");
                    if (*s == '"' && s[1] == '"') field[len++] = '"', s += 2;
                    else if (*s == '"') { s++; break; }
                    else field[len++] = *s++;
                }
                if (*s && *s != ',' && *s != '\n') fail_msg("CSV: '%c' after a closing quote", *s);
            } else {
                while (*s && *s != ',' && *s != '\n') {
                    if (*s == '"') fail_msg("CSV: a quote inside an unquoted field");
                    field[len++] = *s++;
                }
            }
            field[len] = '\0';
            r.f = realloc(r.f, (r.n + 1) * sizeof *r.f);
            r.f[r.n++] = field;
            if (*s == ',') { s++; continue; }
            if (*s == '\n') s++;
            break;
        }
        recs = realloc(recs, (nrec + 1) * sizeof *recs);
        recs[nrec++] = r;
    }
    *out = recs;
    return nrec;
}

static void csv_free(csv_rec_t *recs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < recs[i].n; k++) free(recs[i].f[k]);
        free(recs[i].f);
    }
    free(recs);
}

/* ------------------------------------------------------------------ setup */

static int setup(void **state)
{
    const char *alt = getenv("PATINA_TEST_CLI");
    (void)state;
    if (alt && *alt) cli = alt;
    tmp = tu_tempdir("cli");
    if (!tmp) return -1;
    { /* keys are real paths relative to a collection's root: work in the real folder */
        char *real = realpath(tmp, NULL);
        if (!real) return -1;
        free(tmp);
        tmp = real;
    }
    mkdir(tp("img"), 0755);
    for (int i = 0; i < 4; i++) write_jpeg(tp("img/p%d.jpg", i), 64 + 8 * i, 48 + 4 * i, 100 + (uint64_t)i);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (tmp) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "chmod -R u+rwx '%s' 2>/dev/null", tmp);
        if (system(cmd) != 0) { /* best effort */ }
    }
    tu_remove_tree(tmp);
    free(tmp);
    return 0;
}

/* ------------------------------------------------------------------ tests */

/* Every usage error exits 2 and does nothing; --help exits 0. */
static void test_usage_errors(void **state)
{
    static const char *const bad[][8] = {
        {"frobnicate"},
        {"extract"},
        {"extract", "--bogus", "x.jpg"},
        {"extract", "-z", "x.jpg"},
        {"extract", "-j", "0", "x.jpg"},
        {"extract", "-j", "abc", "x.jpg"},
        {"extract", "-j", "1.5", "x.jpg"},
        {"extract", "-j", "", "x.jpg"},
        {"extract", "-j", " 4", "x.jpg"},
        {"extract", "x.jpg", "-j"},
        {"extract", "--jobs=99999999999999999999999", "x.jpg"},
        {"extract", "--format", "xml", "x.jpg"},
        {"extract", "--device", "tpu", "x.jpg"},
        {"extract", "-f", "nosuch", "x.jpg"},
        {"extract", "-f", "cedd:compact=7", "x.jpg"},
        {"extract", "--max-pixels", "0", "x.jpg"},
        {"extract", "--max-pixels", "12abc", "x.jpg"},
        {"extract", "--strict=1", "x.jpg"},
        {"index"},
        {"index", "COLL"},
        {"index", "COLL", "img", "--batch", "0"},
        {"index", "COLL", "img", "--batch-memory", "12Q"},
        {"index", "COLL", "img", "--batch-memory", "-1"},
        {"index", "COLL", "img", "--batch-memory", "0"},
        {"index", "COLL", "img", "--batch-memory", "99999999999999999999"},
        {"index", "COLL", "img", "--batch-memory", "20000000T"},
        {"index", "COLL", "img", "--decoder", "turbo"},
        {"index", "COLL", "img", "--nvjpeg-share", "0"},
        {"index", "COLL", "img", "--nvjpeg-share", "1.5"},
        {"index", "COLL", "img", "--nvjpeg-share", "nan"},
        {"index", "COLL", "img", "--max-batch-pixels", "1"},
        {"search"},
        {"search", "COLL"},
        {"search", "COLL", "q.jpg", "-k", "0"},
        {"search", "COLL", "q.jpg", "-k", "99999999999999999999"},
        {"search", "COLL", "q.jpg", "-k", "3", "--range", "1"},
        {"search", "COLL", "q.jpg", "--range", "-1"},
        {"search", "COLL", "q.jpg", "--range", "inf"},
        {"search", "COLL", "q.jpg", "--range", "nan"},
        {"search", "COLL", "q.jpg", "--range", "0x10"},
        {"ls"},
        {"ls", "COLL", "other"},
        {"ls", "COLL", "--format", "xml"},
        {"rm"},
        {"rm", "COLL"},
        {"info", "a", "b"},
        {"info", "--bogus"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *argv[10] = {cli};
        char *err = NULL;
        int rc;
        for (int k = 0; k < 8 && bad[i][k]; k++) argv[k + 1] = strcmp(bad[i][k], "COLL") ? bad[i][k] : tp("usage.patina");
        rc = tu_exec(NULL, &err, 0, 60, argv);
        if (rc != 2) fail_msg("patina %s %s %s ...: exit %d, not 2; stderr:\n%s", bad[i][0],
                              bad[i][1] ? bad[i][1] : "", bad[i][1] && bad[i][2] ? bad[i][2] : "", rc, err);
        assert_true(strlen(err) > 0); /* and it says why */
        free(err);
    }
    /* a misspelt command or option gets the names it may have meant (the parser's cases: test_parser) */
    {
        char *err = NULL;
        assert_int_equal(RUN(NULL, &err, "serach", tp("usage.patina"), "q.jpg"), 2);
        expect_in(err, "patina: unknown command 'serach'; did you mean search?");
        free(err);
        assert_int_equal(RUN(NULL, &err, "help", "indx"), 2);
        expect_in(err, "patina: unknown command 'indx'; did you mean index?");
        free(err);
        assert_int_equal(RUN(NULL, &err, "search", tp("usage.patina"), "q.jpg", "--formt", "csv"), 2);
        expect_in(err, "patina search: unknown option '--formt'; did you mean --format?");
        free(err);
    }
    /* Nothing was done: no collection was created. */
    {
        struct stat st;
        assert_int_not_equal(stat(tp("usage.patina"), &st), 0);
    }
    for (const char *const *c = (const char *const[]){"extract", "index", "search", "ls", "rm", "info", NULL}; *c; c++) {
        char *out = NULL;
        assert_int_equal(RUN(&out, NULL, *c, "--help"), 0);
        expect_in(out, "usage: patina ");
        expect_in(out, "exit status: 0 success");
        for (const char *p = out; *p; p++) assert_true(*p == '\n' || (*p >= 0x20 && *p < 0x7F));
        for (char *line = out, *nl; (nl = strchr(line, '\n')); line = nl + 1)
            if (nl - line > 79) fail_msg("patina %s --help: line over 79 columns: %.*s", *c, (int)(nl - line), line);
        if (strcmp(*c, "ls") && strcmp(*c, "rm") && strcmp(*c, "info")) {
            expect_in(out, "--max-pixels N");
            expect_in(out, "--strict");
            expect_in(out, "-j, --jobs N");
        }
        if (!strcmp(*c, "index")) expect_in(out, "--batch-memory BYTES");
        free(out);
        assert_int_equal(RUN(&out, NULL, "help", *c), 0);
        expect_in(out, "usage: patina ");
        free(out);
    }
}

/* rm --id rejects every id that is not a decimal integer in 1..2^64-1
 * before removing anything (it used to clamp 99999999999999999999 to
 * 2^63-1 and go on, exit status 1). */
static void test_rm_ids(void **state)
{
    static const char *const bad[] = {"abc", "0", "-1", "+1", " 1", "1 ", "1.0", "0x1", "", "1e3",
                                      "18446744073709551616", "99999999999999999999999"};
    const char *coll = tp("rm.patina");
    char *out = NULL, *err = NULL;
    (void)state;
    assert_int_equal(RUN(NULL, NULL, "index", "-q", coll, tp("img/p0.jpg"), tp("img/p1.jpg")), 0);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = RUN(NULL, &err, "rm", "--id", coll, "--", "1", bad[i]);
        if (rc != 2) fail_msg("rm --id 1 '%s': exit %d, not 2: %s", bad[i], rc, err);
        expect_in(err, "not an image id");
        free(err);
    }
    assert_int_equal(RUN(&out, NULL, "ls", coll, "--format", "csv"), 0);
    assert_int_equal(count_lines(out), 2); /* nothing removed */
    free(out);
    /* The largest id is valid (absent here: reported, exit 1); 1 is removed. */
    assert_int_equal(RUN(NULL, &err, "rm", "--id", coll, "18446744073709551615", "1"), 1);
    expect_in(err, "18446744073709551615");
    free(err);
    assert_int_equal(RUN(&out, NULL, "ls", coll, "--format", "csv"), 0);
    assert_int_equal(count_lines(out), 1);
    assert_true(strncmp(out, "2,", 2) == 0);
    free(out);
}

/* Paths with commas, quotes, CR, LF, tabs, control bytes, UTF-8 and bytes
 * that are not UTF-8, through CSV (RFC 4180, quoted when needed) and JSON. */
static void test_output_quoting(void **state)
{
    static const struct { const char *name, *json; } odd[] = {
        {"comma,name.jpg", "comma,name.jpg"},
        {"quote\"name.jpg", "quote\\\"name.jpg"},
        {"new\nline.jpg", "new\\nline.jpg"},
        {"cr\rname.jpg", "cr\\rname.jpg"},
        {"tab\tname.jpg", "tab\\tname.jpg"},
        {"ctl\x01\x1f\x7f.jpg", "ctl\\u0001\\u001f\\u007f.jpg"},
        {"back\\slash.jpg", "back\\\\slash.jpg"},
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80.jpg", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80.jpg"},
        {"bad\xff\xfe.jpg", "bad\\udcff\\udcfe.jpg"},
        {"cut\xc3.jpg", "cut\\udcc3.jpg"},
        {"over\xc0\xaf.jpg", "over\\udcc0\\udcaf.jpg"},
        {"sep\xe2\x80\xa8.jpg", "sep\\u2028.jpg"},
        {"plain.jpg", "plain.jpg"},
    };
    enum { N = sizeof odd / sizeof odd[0] };
    const char *coll = tp("odd.patina");
    char paths[N][512], *out = NULL, *err = NULL;
    const char *argv[N + 8] = {cli, "extract", "--format", "csv"};
    csv_rec_t *recs;
    size_t nrec, i, k;
    (void)state;
    mkdir(tp("odd"), 0755);
    for (i = 0; i < N; i++) {
        snprintf(paths[i], sizeof paths[i], "%s/odd/%s", tmp, odd[i].name);
        copy_file(tp("img/p%zu.jpg", i % 4), paths[i]);
        argv[4 + i] = paths[i];
    }
    /* extract --format csv: PATH,v0..v143 per image, in order */
    assert_int_equal(tu_exec(&out, &err, 0, 120, argv), 0);
    nrec = csv_parse(out, &recs);
    assert_int_equal(nrec, N);
    for (i = 0; i < N; i++) {
        assert_string_equal(recs[i].f[0], paths[i]);
        assert_int_equal(recs[i].n, 145);
    }
    csv_free(recs, nrec);
    free(out);
    free(err);
    /* extract --format json: the path as JSON, one object per line */
    argv[3] = "json";
    assert_int_equal(tu_exec(&out, &err, 0, 120, argv), 0);
    assert_int_equal(count_lines(out), N);
    {
        char *line = out;
        for (i = 0; i < N; i++) {
            char want[1024];
            char *nl = strchr(line, '\n');
            snprintf(want, sizeof want, "{\"path\":\"%s/odd/%s\",\"family\":\"cedd:compact=0\",", tmp, odd[i].json);
            assert_non_null(nl);
            *nl = '\0';
            if (strncmp(line, want, strlen(want)) != 0) fail_msg("json line %zu:\n%s\nwanted it to start with\n%s", i, line, want);
            for (const unsigned char *p = (const unsigned char *)line; *p; p++) assert_true(*p >= 0x20 && *p != 0x7F);
            line = nl + 1;
        }
    }
    free(out);
    free(err);
    /* index + ls --format csv / json: the keys */
    assert_int_equal(RUN(NULL, &err, "index", "-q", coll, tp("odd")), 0);
    free(err);
    assert_int_equal(RUN(&out, NULL, "ls", coll, "--format", "csv"), 0);
    nrec = csv_parse(out, &recs);
    assert_int_equal(nrec, N);
    for (i = 0; i < N; i++) {
        int found = 0;
        assert_int_equal(recs[i].n, 7);
        for (k = 0; k < N; k++) found += !strcmp(recs[i].f[1], paths[k] + strlen(tmp) + 1); /* odd/NAME */
        if (found != 1) fail_msg("ls csv: key '%s' is not one of the files", recs[i].f[1]);
    }
    csv_free(recs, nrec);
    free(out);
    assert_int_equal(RUN(&out, NULL, "ls", coll, "--format", "json"), 0);
    assert_int_equal(count_lines(out), N);
    for (i = 0; i < N; i++) {
        char want[1024];
        snprintf(want, sizeof want, "\"key\":\"odd/%s\",", odd[i].json);
        expect_in(out, want);
    }
    free(out);
    /* search --format csv / json: QUERY,RANK,KEY,DISTANCE */
    assert_int_equal(RUN(&out, NULL, "search", coll, paths[0], paths[2], "-k", "20", "--format", "csv"), 0);
    if (!strpbrk(paths[0], "\r\n") && !strpbrk(paths[2], "\r\n")) {
        /* --batch FILE: the same queries, one per line (an empty line skipped), the same output */
        char list[8192], lpath[1024], *out2 = NULL;
        snprintf(list, sizeof list, "%s\n\n%s\n", paths[0], paths[2]);
        snprintf(lpath, sizeof lpath, "%s/queries.txt", tmp);
        assert_int_equal(tu_write_file(lpath, list, strlen(list)), 0);
        assert_int_equal(RUN(&out2, NULL, "search", coll, "--batch", lpath, "-k", "20", "--format", "csv"), 0);
        assert_string_equal(out, out2);
        free(out2);
        assert_int_equal(RUN(&out2, NULL, "search", coll, paths[0], "--batch", lpath, "-k", "20", "--format", "csv"), 0);
        assert_true(strlen(out2) > strlen(out)); /* operands first, then the file's */
        assert_int_equal(strncmp(out2, out, strlen(out) / 2), 0);
        free(out2);
        assert_int_equal(RUN(NULL, NULL, "search", coll, "--batch", "/nonexistent/list"), 2);
    }
    nrec = csv_parse(out, &recs);
    assert_int_equal(nrec, 2 * N);
    for (i = 0; i < nrec; i++) {
        assert_int_equal(recs[i].n, 4);
        assert_string_equal(recs[i].f[0], paths[i < N ? 0 : 2]);
        assert_int_equal(atoi(recs[i].f[1]), (int)(i % N) + 1);
    }
    csv_free(recs, nrec);
    free(out);
    assert_int_equal(RUN(&out, NULL, "search", coll, paths[2], "-k", "20", "--format", "json"), 0);
    {
        char want[1024];
        snprintf(want, sizeof want, "{\"query\":\"%s/odd/%s\",\"hits\":[", tmp, odd[2].json);
        expect_in(out, want);
        snprintf(want, sizeof want, "\"key\":\"odd/%s\"", odd[8].json);
        expect_in(out, want);
    }
    free(out);
    /* --gpus: a malformed list is a usage error; "0,0" (two slices of one device) answers as one device */
    {
        char *one = NULL, *two = NULL, *msg = NULL;
        assert_int_equal(RUN(NULL, &msg, "search", coll, paths[0], "--gpus", "0,,1"), 2);
        expect_in(msg, "gpus '0,,1'");
        free(msg);
        assert_int_equal(RUN(&one, NULL, "search", coll, paths[0], paths[1], "-k", "3", "--format", "csv"), 0);
        assert_int_equal(RUN(&two, NULL, "search", coll, paths[0], paths[1], "-k", "3", "--format", "csv", "--gpus",
                             "0,0"), 0);
        assert_string_equal(one, two);
        free(one);
        free(two);
    }
    /* --gpu: the GPU or an error (exit 3), never the CPU quietly; not with --device */
    assert_int_equal(RUN(NULL, NULL, "search", coll, paths[0], "--gpu", "--device", "cpu"), 2);
    if (patina_gpu_count() == 0) {
        char *msg = NULL;
        assert_int_equal(RUN(NULL, &msg, "search", coll, paths[0], "--gpu"), 3);
        expect_in(msg, "gpu");
        free(msg);
        assert_int_equal(RUN(NULL, NULL, "search", coll, paths[0], "--gpu", "--range", "30"), 3);
    }
}

/* search -f FAMILY on a collection without that family's table is a usage
 * error that lists the tables (it used to print "0 hits" and exit 0). */
static void test_search_missing_table(void **state)
{
    const char *coll = tp("tables.patina");
    char *out = NULL, *err = NULL;
    (void)state;
    assert_int_equal(RUN(NULL, NULL, "index", "-q", coll, tp("img")), 0);
    assert_int_equal(RUN(NULL, NULL, "index", "-q", "-f", "lbp8", coll, tp("img")), 0);
    assert_int_equal(RUN(&out, &err, "search", coll, tp("img/p0.jpg"), "-f", "lbp"), 2);
    expect_in(err, "has no table 'lbp:");
    expect_in(err, "cedd:compact=0");
    expect_in(err, "lbp8");
    assert_string_equal(out, "");
    free(out);
    free(err);
    assert_int_equal(RUN(NULL, &err, "search", coll, tp("img/p0.jpg"), "-f", "cedd:compact=1"), 2);
    expect_in(err, "has no table 'cedd:compact=1'");
    free(err);
    /* the tables it has answer */
    assert_int_equal(RUN(&out, NULL, "search", coll, tp("img/p0.jpg"), "-f", "lbp8", "-k", "1", "--format", "csv"), 0);
    assert_int_equal(count_lines(out), 1);
    free(out);
    /* without -f: two searchable tables are a usage error naming them */
    assert_int_equal(RUN(&out, &err, "search", coll, tp("img/p0.jpg")), 2);
    expect_in(err, "2 tables for search");
    expect_in(err, "lbp8");
    free(out);
    free(err);
    /* a family name alone picks its only table; without -f a collection of one table uses it */
    assert_int_equal(RUN(&out, NULL, "search", coll, tp("img/p0.jpg"), "-f", "cedd", "-k", "1", "--format", "csv"), 0);
    assert_int_equal(count_lines(out), 1);
    free(out);
    assert_int_equal(RUN(NULL, NULL, "index", "-q", "-f", "lbp8", tp("one.patina"), tp("img")), 0);
    assert_int_equal(RUN(&out, NULL, "search", tp("one.patina"), tp("img/p0.jpg"), "-k", "2", "--format", "csv"), 0);
    assert_int_equal(count_lines(out), 2);
    free(out);
}

/* search takes folders of queries, walked as index and identify walk them,
 * on the command line and in --batch FILE; files stay as given (a query
 * given twice is answered twice). */
static void test_search_folders(void **state)
{
    const char *coll = tp("folders.patina");
    char *out = NULL, *err = NULL;
    csv_rec_t *recs;
    size_t nrec;
    FILE *f;
    (void)state;
    mkdir(tp("qdir"), 0755);
    mkdir(tp("qdir/sub"), 0755);
    copy_file(tp("img/p2.jpg"), tp("qdir/b.jpg"));
    copy_file(tp("img/p1.jpg"), tp("qdir/a.jpg"));
    copy_file(tp("img/p3.jpg"), tp("qdir/sub/c.jpg"));
    copy_file(tp("img/p0.jpg"), tp("qdir/.hidden.jpg"));
    mkdir(tp("qempty"), 0755);
    assert_int_equal(RUN(NULL, NULL, "index", "-q", coll, tp("img")), 0);
    assert_int_equal(RUN(&out, &err, "search", coll, tp("img/p0.jpg"), tp("qdir"), tp("img/p0.jpg"), "-k", "1",
                         "--format", "csv"), 0);
    nrec = csv_parse(out, &recs);
    assert_int_equal(nrec, 5);
    /* in order: the file, the folder's files in byte order (hidden ones left out), the file again */
    assert_string_equal(recs[0].f[0], tp("img/p0.jpg"));
    assert_string_equal(recs[1].f[0], tp("qdir/a.jpg"));
    assert_string_equal(recs[2].f[0], tp("qdir/b.jpg"));
    assert_string_equal(recs[3].f[0], tp("qdir/sub/c.jpg"));
    assert_string_equal(recs[4].f[0], tp("img/p0.jpg"));
    /* each copy finds its original at distance 0 */
    /* keys: the files' paths relative to the collection's root (the folder that holds it) */
    assert_string_equal(recs[1].f[2], "img/p1.jpg");
    assert_string_equal(recs[2].f[2], "img/p2.jpg");
    assert_string_equal(recs[3].f[2], "img/p3.jpg");
    for (size_t i = 0; i < nrec; i++) assert_string_equal(recs[i].f[3], "0");
    csv_free(recs, nrec);
    free(out);
    free(err);
    /* a folder in --batch FILE is walked too */
    f = fopen(tp("queries.txt"), "w");
    assert_non_null(f);
    fprintf(f, "%s\n\n%s\n", tp("qdir/sub"), tp("img/p1.jpg"));
    fclose(f);
    assert_int_equal(RUN(&out, NULL, "search", coll, "--batch", tp("queries.txt"), "-k", "1", "--format", "csv"), 0);
    nrec = csv_parse(out, &recs);
    assert_int_equal(nrec, 2);
    assert_string_equal(recs[0].f[0], tp("qdir/sub/c.jpg"));
    assert_string_equal(recs[1].f[0], tp("img/p1.jpg"));
    csv_free(recs, nrec);
    free(out);
    /* folders without images: said, exit 1 */
    assert_int_equal(RUN(&out, &err, "search", coll, tp("qempty"), "--format", "csv"), 1);
    expect_in(err, "no query images in the folders given");
    assert_string_equal(out, "");
    free(out);
    free(err);
}

/* info COLLECTION prints the collection first (the families only with
 * --all, after it); families name their element types as C and numpy do;
 * the nvJPEG line says what a user can do, not a C field. */
static void test_info(void **state)
{
    const char *coll = tp("info.patina");
    char *out = NULL, *p;
    size_t ndefault = 0;
    (void)state;
    assert_int_equal(RUN(NULL, NULL, "index", "-q", coll, tp("img")), 0);
    assert_int_equal(RUN(&out, NULL, "info", coll), 0);
    if (strncmp(out, "collection ", 11)) fail_msg("info COLLECTION does not start with the collection:\n%s", out);
    expect_in(out, ": 4 images, 1 table\n  table cedd:compact=0: 4 descriptors of 144 bytes\n");
    if (strstr(out, "families:")) fail_msg("info COLLECTION prints the families:\n%s", out);
    free(out);
    assert_int_equal(RUN(&out, NULL, "info", "--all", coll), 0);
    assert_true(!strncmp(out, "collection ", 11));
    p = strstr(out, "\nfamilies:\n");
    assert_non_null(p);
    assert_true(p > strstr(out, "table cedd:compact=0"));
    free(out);
    assert_int_equal(RUN(&out, NULL, "info"), 0);
    assert_true(!strncmp(out, "patina ", 7));
    for (p = out; (p = strstr(p, "default: ")); p++) {
        const char *x = strstr(p, " x "), *nl = strchr(p, '\n');
        char type[8] = "";
        ndefault++;
        assert_true(x && x < nl);
        if (sscanf(x, " x %7[a-z0-9],", type) != 1 ||
            (strcmp(type, "u8") && strcmp(type, "u16") && strcmp(type, "u32") && strcmp(type, "f32") &&
             strcmp(type, "f64")))
            fail_msg("element type '%s' is not a C/numpy name: %.*s", type, (int)(nl - p), p);
    }
    assert_true(ndefault >= 9);
    expect_in(out, "\nnvJPEG: ");
    expect_in(out, "index --decoder nvjpeg");
    if (strstr(out, "nvjpeg_library") || strstr(out, " x value")) fail_msg("info:\n%s", out);
    free(out);
}

/* What the table formats and the summaries print: distances with 6
 * significant digits in the table (csv and json keep every digit), ls with
 * a header, counts with the singular for 1, a re-run's summary without a
 * rate when nothing was extracted. */
static void test_table_output(void **state)
{
    const char *coll = tp("tables-out.patina");
    char *out = NULL, *err = NULL, *csv = NULL, *line, *nl;
    csv_rec_t *recs;
    size_t nrec, r;
    (void)state;
    assert_int_equal(RUN(NULL, &err, "index", coll, tp("img")), 0);
    expect_in(err, "indexed 4, skipped 0 (unchanged), failed 0 of 4 files, 0 with decoder warnings; 0 paths skipped");
    expect_in(err, " images/s, cedd:compact=0");
    free(err);
    /* a re-run: nothing extracted, no rate (it said "0.0 images/s") */
    assert_int_equal(RUN(NULL, &err, "index", coll, tp("img")), 0);
    expect_in(err, "indexed 0, skipped 4 (unchanged), failed 0 of 4 files");
    expect_in(err, " s (cedd:compact=0, device ");
    if (strstr(err, "images/s")) fail_msg("a re-run's summary with a rate: %s", err);
    free(err);
    /* one of each */
    assert_int_equal(RUN(NULL, &err, "index", coll, tp("img/p0.jpg"), tp("no-such.jpg")), 1);
    expect_in(err, "indexed 0, skipped 1 (unchanged), failed 0 of 1 file, 0 with decoder warnings; 1 path skipped;");
    free(err);
    assert_int_equal(RUN(NULL, &err, "search", coll, tp("img/p0.jpg"), "--stats", "-k", "1"), 0);
    expect_in(err, "search: 1 query over 4 rows: 4 distances computed, 0 rows pruned");
    free(err);
    /* search: the table's distances are the csv's, to 6 significant digits; the csv's are exact (%.17g) */
    assert_int_equal(RUN(&csv, NULL, "search", coll, tp("img/p0.jpg"), "-k", "4", "--format", "csv"), 0);
    assert_int_equal(RUN(&out, NULL, "search", coll, tp("img/p0.jpg"), "-k", "4"), 0);
    nrec = csv_parse(csv, &recs);
    assert_int_equal(nrec, 4);
    line = out;
    nl = strchr(line, '\n');
    assert_non_null(nl);
    line = nl + 1; /* "query ...: 4 hits" */
    nl = strchr(line, '\n');
    assert_non_null(nl);
    *nl = '\0';
    assert_string_equal(line, "  rank      distance  key");
    for (r = 0, line = nl + 1; r < nrec; r++, line = nl + 1) {
        char want[256], round[64];
        double d = strtod(recs[r].f[3], NULL);
        nl = strchr(line, '\n');
        assert_non_null(nl);
        *nl = '\0';
        snprintf(round, sizeof round, "%.17g", d);
        assert_string_equal(round, recs[r].f[3]);
        snprintf(want, sizeof want, "  %4zu  %12.6g  %s", r + 1, d, recs[r].f[2]);
        assert_string_equal(line, want);
    }
    csv_free(recs, nrec);
    free(csv);
    free(out);
    /* ls: a header line, then one line per image */
    assert_int_equal(RUN(&out, NULL, "ls", coll), 0);
    assert_int_equal(count_lines(out), 5);
    if (strncmp(out, "    id  key ", 12) || !strstr(out, "bytes   width x height sha256        added (UTC)\n"))
        fail_msg("ls header:\n%s", out);
    expect_in(out, "\n     1  ");
    free(out);
    assert_int_equal(RUN(&out, NULL, "ls", coll, "--format", "csv"), 0);
    assert_int_equal(count_lines(out), 4); /* csv: no header */
    free(out);
}

/* A missing GLCM mask file is named in the error, on every path. */
static void test_glcm_missing_mask(void **state)
{
    char spec[4200], *out = NULL, *err = NULL;
    (void)state;
    snprintf(spec, sizeof spec, "glcm:mask=%s", tp("no-such-mask.png"));
    assert_int_equal(RUN(&out, &err, "extract", "-f", spec, tp("img/p0.jpg"), tp("img/p1.jpg")), 1);
    expect_in(err, "no-such-mask.png");
    expect_in(err, "p0.jpg");
    assert_string_equal(out, "");
    free(out);
    free(err);
    assert_int_equal(RUN(&out, &err, "extract", "-f", spec, "--format", "json", tp("img/p0.jpg")), 1);
    expect_in(err, "no-such-mask.png");
    free(out);
    free(err);
    assert_int_equal(RUN(NULL, &err, "index", "-q", "-f", spec, tp("mask.patina"), tp("img/p0.jpg")), 1);
    expect_in(err, "no-such-mask.png");
    free(err);
}

/* Symbolic link loops end; each folder and file is taken once, under the
 * first path the sorted walk reaches (it used to recurse without end). */
static void test_symlink_loops(void **state)
{
    const char *coll = tp("loops.patina");
    char *out = NULL, *err = NULL;
    int rc;
    (void)state;
    mkdir(tp("loops"), 0755);
    mkdir(tp("loops/sub"), 0755);
    write_jpeg(tp("loops/a.jpg"), 40, 30, 11);
    write_jpeg(tp("loops/sub/b.jpg"), 41, 31, 12);
    assert_int_equal(symlink(".", tp("loops/b")), 0);                 /* loop to itself */
    assert_int_equal(symlink("..", tp("loops/sub/up")), 0);           /* loop to the parent */
    assert_int_equal(symlink("../a.jpg", tp("loops/sub/link.jpg")), 0); /* a file of the tree again */
    assert_int_equal(symlink("sub/b.jpg", tp("loops/0first.jpg")), 0);  /* reached before sub/b.jpg */
    assert_int_equal(link(tp("loops/a.jpg"), tp("loops/sub/hard.jpg")), 0); /* hard link */
    rc = RUN(&out, &err, "index", coll, tp("loops"), tp("loops/sub"), tp("loops"));
    if (rc != 0) fail_msg("index over symbolic link loops: exit %d\n%s", rc, err);
    expect_in(err, "indexed 2, skipped 0 (unchanged), failed 0 of 2 files");
    expect_in(err, "0 paths skipped");
    free(out);
    free(err);
    assert_int_equal(RUN(&out, NULL, "ls", coll, "--format", "csv"), 0);
    {
        char want[8192];
        /* keys are real paths below the root: 0first.jpg is a link to sub/b.jpg */
        snprintf(want, sizeof want, "1,loops/sub/b.jpg,");
        expect_in(out, want);
        snprintf(want, sizeof want, "2,loops/a.jpg,");
        expect_in(out, want);
        assert_int_equal(count_lines(out), 2);
    }
    free(out);
    /* A broken link is a skipped path: named, counted, exit status 1. */
    assert_int_equal(symlink("nowhere.jpg", tp("loops/sub/broken.jpg")), 0);
    assert_int_equal(RUN(NULL, &err, "index", coll, tp("loops")), 1);
    expect_in(err, "broken symbolic link");
    expect_in(err, "sub/broken.jpg");
    expect_in(err, "indexed 0, skipped 2 (unchanged)");
    expect_in(err, "1 path skipped");
    free(err);
}

/* An unreadable subfolder is reported and skipped; the walk goes on after
 * it (it used to stop there silently) and the exit status is 1. Runs
 * without the permission-bypassing capabilities of root. */
static void test_unreadable_folder(void **state)
{
    const char *coll = tp("locked.patina");
    char *out = NULL, *err = NULL;
    int rc;
    (void)state;
    mkdir(tp("lk"), 0755);
    mkdir(tp("lk/m_locked"), 0755);
    write_jpeg(tp("lk/a.jpg"), 40, 30, 21);
    write_jpeg(tp("lk/m_locked/x.jpg"), 40, 30, 22);
    write_jpeg(tp("lk/z.jpg"), 40, 30, 23);
    write_jpeg(tp("lk/zz.jpg"), 40, 30, 24);
    assert_int_equal(chmod(tp("lk/m_locked"), 0), 0);
    assert_int_equal(chmod(tp("lk/zz.jpg"), 0), 0); /* and an unreadable file */
    rc = RUN_UNPRIV(&out, &err, "index", coll, tp("lk"));
    chmod(tp("lk/m_locked"), 0755);
    if (rc == -2) {
        print_message("SKIPPED test_unreadable_folder: cannot drop the capabilities that bypass "
                      "permission checks (%s)\n", err);
        free(out);
        free(err);
        skip();
    }
    if (rc != 1) fail_msg("index with an unreadable folder: exit %d, not 1\n%s", rc, err);
    expect_in(err, "cannot open directory");
    expect_in(err, "m_locked");
    expect_in(err, "zz.jpg");
    expect_in(err, "indexed 2, skipped 0 (unchanged), failed 1 of 3 files");
    expect_in(err, "1 path skipped");
    free(out);
    free(err);
    assert_int_equal(RUN(&out, NULL, "ls", coll, "--format", "csv"), 0);
    assert_int_equal(count_lines(out), 2);
    expect_in(out, "lk/a.jpg,");
    expect_in(out, "lk/z.jpg,");
    free(out);
}

/* Decompression bombs (tiny files declaring 16384 x 16384 pixels) are
 * refused by the default limit of 100 megapixels, from the header, with the
 * file named; --max-pixels moves the limit (extract, index, search). */
static void test_bombs_and_limits(void **state)
{
    static const char *const kinds[] = {"bomb.jpg", "bomb.png", "bomb.ppm"};
    char *out = NULL, *err = NULL;
    (void)state;
    mkdir(tp("bombs"), 0755);
    write_bombs(tp("bombs"), 16384);
    for (size_t i = 0; i < 3; i++) {
        char want[4200];
        assert_int_equal(RUN(&out, &err, "extract", tp("bombs/%s", kinds[i])), 1);
        snprintf(want, sizeof want, "16384x16384 = 268435456 pixels exceeds the limit of 100000000 in '%s/bombs/%s'",
                 tmp, kinds[i]);
        expect_in(err, want);
        assert_string_equal(out, "");
        free(out);
        free(err);
    }
    write_jpeg(tp("bombs/good.jpg"), 64, 48, 31); /* 3072 pixels */
    assert_int_equal(RUN(NULL, &err, "index", tp("bombs.patina"), tp("bombs")), 1);
    expect_in(err, "indexed 1, skipped 0 (unchanged), failed 3 of 4 files");
    free(err);
    assert_int_equal(RUN(&out, &err, "search", tp("bombs.patina"), tp("bombs/bomb.jpg"), tp("bombs/good.jpg")), 1);
    expect_in(err, "exceeds the limit of 100000000 in");
    expect_in(out, "good.jpg: 1 hit");
    free(out);
    free(err);
    /* --max-pixels */
    assert_int_equal(RUN(NULL, &err, "extract", "--max-pixels", "3071", tp("bombs/good.jpg")), 1);
    expect_in(err, "64x48 = 3072 pixels exceeds the limit of 3071");
    free(err);
    assert_int_equal(RUN(NULL, NULL, "extract", "--max-pixels", "3072", tp("bombs/good.jpg")), 0);
    assert_int_equal(RUN(NULL, &err, "index", "--max-pixels", "3071", tp("limit.patina"), tp("bombs/good.jpg")), 1);
    expect_in(err, "exceeds the limit of 3071");
    free(err);
    assert_int_equal(RUN(NULL, &err, "search", "--max-pixels", "3071", tp("bombs.patina"), tp("bombs/good.jpg")), 1);
    expect_in(err, "exceeds the limit of 3071");
    free(err);
}

/* --batch-memory takes byte counts with suffixes; a tiny budget makes
 * batches of one and changes nothing in the results. */
static void test_batch_memory(void **state)
{
    char *a = NULL, *b = NULL, *err = NULL;
    (void)state;
    assert_int_equal(RUN(NULL, &err, "index", tp("bm1.patina"), tp("img"), "--batch-memory", "1"), 0);
    expect_in(err, "indexed 4,");
    free(err);
    assert_int_equal(RUN(NULL, NULL, "index", "-q", tp("bm2.patina"), tp("img"), "--batch-memory", "512M"), 0);
    assert_int_equal(RUN(NULL, NULL, "index", "-q", tp("bm2.patina"), tp("img"), "--batch-memory=2GiB"), 0);
    assert_int_equal(RUN(NULL, NULL, "index", "-q", tp("bm2.patina"), tp("img"), "--batch-memory", "64k"), 0);
    assert_int_equal(RUN(&a, NULL, "search", tp("bm1.patina"), tp("img/p2.jpg"), "--format", "csv"), 0);
    assert_int_equal(RUN(&b, NULL, "search", tp("bm2.patina"), tp("img/p2.jpg"), "--format", "csv"), 0);
    assert_string_equal(a, b);
    free(a);
    free(b);
}

/* Damaged but decodable JPEGs: a warning naming the file (exit status 0),
 * counted in the index summary; --strict makes them errors. */
static void test_damaged_jpegs(void **state)
{
    const char *extra = tp("dmg/extra.jpg"), *cut = tp("dmg/cut.jpg"), *good = tp("dmg/good.jpg");
    char *out = NULL, *err = NULL, want[4200];
    (void)state;
    mkdir(tp("dmg"), 0755);
    write_damaged(extra, cut, 41);
    write_jpeg(good, 96, 64, 42);
    {
        int rc = RUN(&out, &err, "extract", extra, cut, good);
        if (rc != 0) fail_msg("extract of damaged JPEGs: exit %d\n%s", rc, err);
    }
    assert_int_equal(count_lines(out), 3);
    snprintf(want, sizeof want, "decode: warning in '%s' (libjpeg: Corrupt JPEG data: 4 extraneous bytes before marker 0xda)", extra);
    expect_in(err, want);
    snprintf(want, sizeof want, "decode: warning in '%s' (libjpeg: ", cut);
    expect_in(err, want);
    assert_int_equal(count_lines(err), 2);
    free(out);
    free(err);
    assert_int_equal(RUN(&out, &err, "extract", "--strict", extra, cut, good), 1);
    assert_int_equal(count_lines(out), 1);
    expect_in(out, "good.jpg,");
    expect_in(err, "extra.jpg");
    expect_in(err, "cut.jpg");
    expect_in(err, "strict decoding rejects it");
    free(out);
    free(err);
    assert_int_equal(RUN(NULL, &err, "index", tp("dmg.patina"), tp("dmg")), 0);
    expect_in(err, "indexed 3, skipped 0 (unchanged), failed 0 of 3 files, 2 with decoder warnings");
    free(err);
    assert_int_equal(RUN(NULL, &err, "index", "--strict", tp("dmg-strict.patina"), tp("dmg")), 1);
    expect_in(err, "indexed 1, skipped 0 (unchanged), failed 2 of 3 files, 2 with decoder warnings");
    expect_in(err, "strict decoding rejects it");
    free(err);
    assert_int_equal(RUN(&out, &err, "search", tp("dmg.patina"), extra), 0);
    expect_in(err, "extraneous bytes");
    expect_in(out, "extra.jpg: 3 hits");
    free(out);
    free(err);
    assert_int_equal(RUN(&out, &err, "search", "--strict", tp("dmg.patina"), extra, good), 1);
    expect_in(err, "strict decoding rejects it");
    expect_in(out, "good.jpg: 3 hits");
    free(out);
    free(err);
}

/* extract -j N decodes in parallel; the output is the same bytes, in the
 * order given, whatever N and the batch memory. */
static void test_extract_parallel(void **state)
{
    enum { N = 41 };
    char paths[N][512], *ref = NULL, *out = NULL, *err = NULL;
    const char *argv[N + 10];
    static const char *const variants[][4] = {
        {"-j", "4", NULL}, {"-j", "3", "--batch-memory", "1"}, {"-j", "2", "--batch-memory", "20K"}};
    size_t i;
    int base;
    (void)state;
    mkdir(tp("par"), 0755);
    for (i = 0; i < N; i++) {
        snprintf(paths[i], sizeof paths[i], "%s/par/%02zu.%s", tmp, (N - i) % N, i == 17 ? "txt" : "jpg");
        if (i == 17) assert_int_equal(tu_write_file(paths[i], "not an image\n", 13), 0);
        else write_jpeg(paths[i], 20 + (int)(i * 7 % 90), 16 + (int)(i * 5 % 70), 500 + i);
    }
    argv[0] = cli;
    argv[1] = "extract";
    argv[2] = "-j";
    argv[3] = "1";
    base = 4;
    for (i = 0; i < N; i++) argv[base + i] = paths[i];
    argv[base + N] = NULL;
    assert_int_equal(tu_exec(&ref, &err, 0, 120, argv), 1);
    expect_in(err, paths[17]);
    free(err);
    assert_int_equal(count_lines(ref), N - 1);
    {   /* input order */
        char *line = ref;
        for (i = 0; i < N; i++) {
            if (i == 17) continue;
            assert_true(strncmp(line, paths[i], strlen(paths[i])) == 0 && line[strlen(paths[i])] == ',');
            line = strchr(line, '\n') + 1;
        }
    }
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        const char *args[N + 10] = {cli, "extract"};
        int k = 2;
        for (int j = 0; j < 4 && variants[v][j]; j++) args[k++] = variants[v][j];
        for (i = 0; i < N; i++) args[k++] = paths[i];
        args[k] = NULL;
        assert_int_equal(tu_exec(&out, NULL, 0, 120, args), 1);
        if (strcmp(out, ref) != 0) fail_msg("extract %s %s: output differs from -j 1", variants[v][0], variants[v][1]);
        free(out);
    }
    free(ref);
    /* The same for a family printed as a JSON description (glcm). */
    {
        const char *a1[] = {cli, "extract", "-f", "glcm", "--format", "json", "-j", "1", paths[0], paths[1], paths[2], NULL};
        const char *a4[] = {cli, "extract", "-f", "glcm", "--format", "json", "-j", "4", paths[0], paths[1], paths[2], NULL};
        assert_int_equal(tu_exec(&ref, NULL, 0, 120, a1), 0);
        assert_int_equal(tu_exec(&out, NULL, 0, 120, a4), 0);
        assert_string_equal(out, ref);
        assert_int_equal(count_lines(out), 3);
        free(out);
        free(ref);
    }
}

/* A folder with bad files: the good ones are indexed, the bad ones named,
 * and a missing path is a skipped path. */
static void test_index_bad_files(void **state)
{
    const char *dir = tp("mixed"), *coll = tp("mixed.patina");
    char *out = NULL, *err = NULL;
    unsigned long size;
    unsigned char *j;
    (void)state;
    mkdir(dir, 0755);
    for (int i = 0; i < 3; i++) write_jpeg(tp("mixed/good%d.jpg", i), 50 + i, 40, 60 + (uint64_t)i);
    assert_int_equal(tu_write_file(tp("mixed/notes.txt"), "not an image\n", 13), 0);
    assert_int_equal(tu_write_file(tp("mixed/empty.png"), "", 0), 0);
    j = make_jpeg(&size, 80, 60, 70);
    assert_int_equal(tu_write_file(tp("mixed/cut.jpg"), j, size / 2), 0); /* truncated: an error, not a warning */
    tjFree(j);
    /* --batch-memory 1: every batch is cut after one image (the others are read again). */
    assert_int_equal(RUN(NULL, &err, "index", coll, dir, tp("missing.jpg"), "--batch-memory", "1"), 1);
    expect_in(err, "truncated JPEG data");
    expect_in(err, "cut.jpg");
    expect_in(err, "missing.jpg");
    /* files no loader recognises (notes.txt, the empty empty.png) are counted, not failed, not named */
    expect_in(err, "indexed 3, skipped 0 (unchanged), failed 1 of 4 files, 0 with decoder warnings; 1 path skipped; "
                   "2 other files skipped");
    if (strstr(err, "notes.txt") || strstr(err, "empty.png")) fail_msg("a file left out is named without -v:\n%s", err);
    free(err);
    /* named on the command line, a file is always tried: a failure */
    assert_int_equal(RUN(NULL, &err, "index", coll, tp("mixed/notes.txt")), 1);
    expect_in(err, "notes.txt");
    expect_in(err, "unknown image format");
    free(err);
    /* -v names the files left out */
    assert_int_equal(RUN(NULL, &err, "index", "-v", coll, dir), 1);
    expect_in(err, "notes.txt' left out: no image loader recognises its first bytes");
    expect_in(err, "empty.png");
    free(err);
    assert_int_equal(RUN(&out, NULL, "ls", coll, "--format", "csv"), 0);
    assert_int_equal(count_lines(out), 3);
    free(out);
}


/* Keys: `index c mate`, `./mate`, the absolute path, a link to the folder,
 * and the same from another working directory give one record per file
 * (keys relative to the collection's root); a collection moved with its
 * folder still finds its images; --root; a collection made before roots
 * keeps the paths as given. A new key with stored content is reported as
 * a duplicate (both keys named), indexed unless --skip-duplicates. Sidecar
 * files in a folder are skipped and counted, exit 0; --include/--exclude. */
static void test_keys_and_walks(void **state)
{
    char cwd[4096], *out = NULL, *err = NULL, want[8192];
    (void)state;
    assert_non_null(getcwd(cwd, sizeof cwd));
    mkdir(tp("kw"), 0755);
    mkdir(tp("kw/mate"), 0755);
    mkdir(tp("kw/other"), 0755);
    write_jpeg(tp("kw/mate/a.jpg"), 40, 30, 201);
    write_jpeg(tp("kw/mate/b.jpg"), 41, 31, 202);
    write_jpeg(tp("kw/mate/c.jpg"), 42, 32, 203);
    assert_int_equal(symlink("mate", tp("kw/m2")), 0);
    assert_int_equal(chdir(tp("kw")), 0);
    assert_int_equal(RUN(NULL, &err, "index", "c.patina", "mate"), 0);
    expect_in(err, "indexed 3,");
    free(err);
    {
        const char *spell[] = {"./mate", tp("kw/mate"), "m2", "mate/../mate/"};
        for (size_t i = 0; i < 4; i++) {
            assert_int_equal(RUN(NULL, &err, "index", "c.patina", spell[i]), 0);
            expect_in(err, "indexed 0, skipped 3 (unchanged)");
            free(err);
        }
    }
    assert_int_equal(chdir(tp("kw/mate")), 0);
    assert_int_equal(RUN(NULL, &err, "index", "../c.patina", ".", "b.jpg"), 0);
    expect_in(err, "indexed 0, skipped 3 (unchanged)");
    free(err);
    assert_int_equal(chdir(tp("kw")), 0);
    assert_int_equal(RUN(&out, NULL, "ls", "c.patina", "--format", "csv"), 0);
    assert_int_equal(count_lines(out), 3);
    expect_in(out, "1,mate/a.jpg,");
    expect_in(out, "3,mate/c.jpg,");
    free(out);
    /* a duplicate: named with both keys, indexed, exit 0; --skip-duplicates leaves it out */
    tu_write_jpeg(tp("kw/other/a-again.jpg"), 40, 30, 1, 90, 201);
    tu_write_jpeg(tp("kw/other/b-again.jpg"), 41, 31, 1, 90, 202);
    assert_int_equal(RUN(NULL, &err, "index", "c.patina", "other/a-again.jpg"), 0);
    expect_in(err, "'other/a-again.jpg' has the same content (SHA-256) as 'mate/a.jpg'; indexed as well");
    expect_in(err, "1 duplicate (indexed as well)");
    free(err);
    assert_int_equal(RUN(NULL, &err, "index", "c.patina", "--skip-duplicates", "other"), 0);
    expect_in(err, "'other/b-again.jpg' has the same content (SHA-256) as 'mate/b.jpg'; not indexed");
    expect_in(err, "indexed 0, skipped 1 (unchanged)");
    free(err);
    assert_int_equal(RUN(&out, NULL, "ls", "c.patina", "--format", "csv"), 0);
    assert_int_equal(count_lines(out), 4);
    free(out);
    /* sidecars: skipped and counted, exit 0; -v names them; patterns choose */
    assert_int_equal(tu_write_file(tp("kw/mate/a.xmp"), "<x:xmpmeta/>\n", 13), 0);
    assert_int_equal(tu_write_file(tp("kw/mate/a.thm"), "thumbnail", 9), 0);
    assert_int_equal(RUN(NULL, &err, "index", "c.patina", "mate"), 0);
    expect_in(err, "skipped 3 (unchanged), failed 0 of 3 files");
    expect_in(err, "2 other files skipped");
    free(err);
    assert_int_equal(RUN(NULL, &err, "index", "p.patina", "mate", "--include", "*.JPG", "--exclude", "b*",
                         "--exclude", "c.jpg"), 0);
    expect_in(err, "indexed 1, skipped 0 (unchanged), failed 0 of 1 file,");
    expect_in(err, "4 other files skipped");
    free(err);
    /* --root: keys relative to it; fixed once the collection holds an image */
    assert_int_equal(RUN(NULL, &err, "index", "r.patina", "--root", "mate", "mate/a.jpg"), 0);
    free(err);
    assert_int_equal(RUN(&out, NULL, "ls", "r.patina", "--format", "csv"), 0);
    expect_in(out, "1,a.jpg,");
    free(out);
    assert_int_equal(RUN(NULL, &err, "index", "r.patina", "--root", ".", "mate/b.jpg"), 2);
    expect_in(err, "cannot change");
    free(err);
    assert_int_equal(RUN(NULL, &err, "index", "r.patina", "--root", "nowhere", "mate/b.jpg"), 2);
    expect_in(err, "nowhere");
    free(err);
    /* a collection made before roots: keys as given, one per spelling */
    TU_OK(patina__collection_create_v1(tp("kw/old.patina")));
    assert_int_equal(RUN(NULL, &err, "index", "old.patina", "mate"), 0);
    free(err);
    assert_int_equal(RUN(NULL, &err, "index", "old.patina", "./mate"), 0);
    expect_in(err, "indexed 3,");
    expect_in(err, "'./mate/a.jpg' has the same content (SHA-256) as 'mate/a.jpg'");
    free(err);
    assert_int_equal(RUN(&out, NULL, "ls", "old.patina", "--format", "csv"), 0);
    assert_int_equal(count_lines(out), 6);
    expect_in(out, "1,mate/a.jpg,");
    expect_in(out, "4,./mate/a.jpg,");
    free(out);
    /* moved together with its images (folder kw -> kw-moved): search finds the same keys */
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(rename(tp("kw"), tp("kw-moved")), 0);
    assert_int_equal(RUN(&out, NULL, "search", tp("kw-moved/c.patina"), tp("kw-moved/mate/c.jpg"), "-k", "1",
                         "--format", "csv"), 0);
    snprintf(want, sizeof want, "%s/kw-moved/mate/c.jpg,1,mate/c.jpg,0", tmp);
    expect_in(out, want);
    free(out);
    assert_int_equal(RUN(NULL, &err, "index", tp("kw-moved/c.patina"), tp("kw-moved/mate")), 0);
    expect_in(err, "indexed 0, skipped 3 (unchanged)");
    free(err);
}

/* What a machine without a GPU says. */
static void test_devices(void **state)
{
    char *out = NULL, *err = NULL;
    (void)state;
    if (patina_gpu_count() == 0)
        assert_int_equal(RUN(NULL, NULL, "extract", "--device", "gpu", tp("img/p0.jpg")), 3);
    assert_int_equal(RUN(NULL, &err, "index", tp("dec.patina"), tp("img/p0.jpg"), "--decoder", "nvjpeg", "--device", "cpu"), 3);
    expect_in(err, "nvjpeg decoder needs --device gpu");
    free(err);
    assert_int_equal(RUN(&out, NULL, "info"), 0);
    expect_in(out, "nvJPEG: ");
    free(out);
    assert_int_equal(RUN(NULL, NULL, "search", tp("none.patina"), tp("img/p0.jpg")), 3);
}

/* ------------------------------------------------------------ the parser */

static int parse(cli_args_t *a, char *err, size_t errsize, const char *const *argv)
{
    const cli_command_t *cmd;
    int argc = 0;
    while (argv[argc]) argc++;
    return cli_parse_argv(&cmd, a, argc, (char *const *)argv, err, errsize);
}

#define PARSE(a, err, ...) parse(a, err, sizeof err, (const char *const[]){"patina", __VA_ARGS__, NULL})

static void test_parser(void **state)
{
    cli_args_t a;
    char err[512];
    uint64_t u;
    (void)state;
    /* clusters, --name=value, "--", operands anywhere, defaults */
    assert_int_equal(PARSE(&a, err, "index", "-qj4", "C", "--batch=8", "P1", "--", "-P2", "--strict"), CLI_PARSE_OK);
    assert_int_equal(cli_get(&a, "quiet")->i, 1);
    assert_int_equal(cli_get(&a, "jobs")->i, 4);
    assert_int_equal(cli_get(&a, "batch")->i, 8);
    assert_int_equal(cli_get(&a, "strict")->given, 0);
    assert_string_equal(cli_get(&a, "family")->text, "cedd");
    assert_true(cli_get(&a, "family")->set && !cli_get(&a, "family")->given);
    assert_true(cli_get(&a, "batch-memory")->bytes == 1ull << 30);
    assert_int_equal(cli_get(&a, "max-pixels")->i, 100000000);
    assert_string_equal(cli_get(&a, "decoder")->text, "auto");
    assert_int_equal(a.noperands, 4);
    assert_string_equal(a.operands[0], "C");
    assert_string_equal(a.operands[1], "P1");
    assert_string_equal(a.operands[2], "-P2");
    assert_string_equal(a.operands[3], "--strict");
    cli_args_release(&a);
    /* the last of a repeated option wins; "-" is an operand; -j 4 and -j4 */
    assert_int_equal(PARSE(&a, err, "extract", "-j", "2", "-", "--jobs", "3", "-f", "lbp"), CLI_PARSE_OK);
    assert_int_equal(cli_get(&a, "jobs")->i, 3);
    assert_string_equal(cli_get(&a, "family")->text, "lbp");
    assert_string_equal(a.operands[0], "-");
    cli_args_release(&a);
    /* a repeatable option keeps every value, in order (serve --content-dir) */
    assert_int_equal(PARSE(&a, err, "serve", "--content-dir", "d1", "C", "--content-dir=d2"), CLI_PARSE_OK);
    assert_int_equal(cli_get(&a, "content-dir")->count, 2);
    assert_string_equal(cli_get(&a, "content-dir")->all[0], "d1");
    assert_string_equal(cli_get(&a, "content-dir")->all[1], "d2");
    assert_int_equal(cli_get(&a, "import-dir")->count, 0); /* not repeatable: no list */
    cli_args_release(&a);
    /* byte counts */
    {
        static const struct { const char *text; uint64_t v; } ok[] = {
            {"7", 7}, {"64k", 64 << 10}, {"1KiB", 1 << 10}, {"3MB", 3u << 20}, {"512M", 512u << 20},
            {"2G", 2ull << 30}, {"2gib", 2ull << 30}, {"1T", 1ull << 40}, {"1024T", 1ull << 50}};
        static const char *const bad[] = {"", "G", "1.5G", "-1", "1 G", "1GG", "1Q", "0", "1025T", "0x10"};
        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
            if (PARSE(&a, err, "index", "--batch-memory", ok[i].text, "C", "P") != CLI_PARSE_OK)
                fail_msg("--batch-memory %s: %s", ok[i].text, err);
            assert_true(cli_get(&a, "batch-memory")->bytes == ok[i].v);
            cli_args_release(&a);
        }
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            if (PARSE(&a, err, "index", "--batch-memory", bad[i], "C", "P") != CLI_PARSE_ERROR)
                fail_msg("--batch-memory '%s' accepted", bad[i]);
            expect_in(err, "--batch-memory wants a byte count from 1 to 1024T");
            cli_args_release(&a);
        }
    }
    /* numbers with "auto" and an open lower bound */
    assert_int_equal(PARSE(&a, err, "index", "C", "P", "--nvjpeg-share", "auto"), CLI_PARSE_OK);
    assert_true(cli_get(&a, "nvjpeg-share")->is_auto);
    cli_args_release(&a);
    assert_int_equal(PARSE(&a, err, "index", "C", "P", "--nvjpeg-share", "0.25"), CLI_PARSE_OK);
    assert_true(cli_get(&a, "nvjpeg-share")->num == 0.25 && !cli_get(&a, "nvjpeg-share")->is_auto);
    cli_args_release(&a);
    /* help wins wherever it is, before any error */
    assert_int_equal(PARSE(&a, err, "index", "--help"), CLI_PARSE_HELP);
    cli_args_release(&a);
    assert_int_equal(PARSE(&a, err, "search", "-k", "5", "-qh"), CLI_PARSE_ERROR); /* -q: not search's */
    cli_args_release(&a);
    assert_int_equal(PARSE(&a, err, "search", "-k", "5", "-h", "--bogus"), CLI_PARSE_HELP);
    cli_args_release(&a);
    /* the messages */
    {
        static const struct { const char *argv[8], *msg; } cases[] = {
            {{"frobnicate"}, "unknown command 'frobnicate'"},
            {{"index", "C", "P", "--bogus"}, "unknown option '--bogus'"},
            {{"index", "C", "P", "-z"}, "unknown option '-z'"},
            {{"index", "C", "P", "-j", "0"}, "-j wants an integer from 1 to 1024, got '0'"},
            {{"index", "C", "P", "--jobs=x"}, "--jobs wants an integer from 1 to 1024, got 'x'"},
            {{"index", "C", "P", "--batch"}, "--batch needs a value"},
            {{"index", "C", "P", "--quiet=1"}, "--quiet takes no value"},
            {{"index", "C", "P", "--decoder", "x"}, "--decoder wants libjpeg, nvjpeg, exact-gpu or auto, got 'x'"},
            {{"ls", "C", "--format", "x"}, "--format wants table, csv or json, got 'x'"},
            {{"search", "C", "Q", "--range", "1", "-k", "2"}, "-k and --range cannot be combined"},
            {{"search", "C", "Q", "--range", "-0.5"}, "--range wants a number >= 0, got '-0.5'"},
            {{"index", "C", "P", "--nvjpeg-share", "0"}, "--nvjpeg-share wants a number > 0 and <= 1 or auto, got '0'"},
            {{"index", "C"}, "missing operand: usage: patina index [options] COLLECTION PATH..."},
            {{"search"}, "missing operand: usage: patina search [options] COLLECTION [QUERY...]"},
            {{"ls", "C", "D"}, "unexpected operand 'D': usage: patina ls [options] COLLECTION"},
            {{"extract", "--family=", "x"}, "--family wants a non-empty value, got ''"},
            /* misspelt names: a unique prefix, or the nearest names within 2 edits */
            {{"search", "C", "Q", "--fromat", "csv"}, "unknown option '--fromat'; did you mean --format?"},
            {{"search", "C", "Q", "--FORMAT=csv"}, "unknown option '--FORMAT'; did you mean --format?"},
            {{"index", "C", "P", "--qiuet"}, "unknown option '--qiuet'; did you mean --quiet?"},
            {{"index", "C", "P", "--fam=lbp"}, "unknown option '--fam'; did you mean --family?"},
            {{"index", "C", "P", "--pivot", "8"}, "unknown option '--pivot'; did you mean --pivots or --pivot-select?"},
            {{"index", "C", "P", "--batch-memroy", "1G"}, "unknown option '--batch-memroy'; did you mean --batch-memory?"},
            {{"search", "C", "Q", "--hepl"}, "unknown option '--hepl'; did you mean --help?"},
            {{"search", "C", "Q", "--j"}, "unknown option '--j'; did you mean --jobs?"},
            {{"serach", "C", "Q"}, "unknown command 'serach'; did you mean search?"},
            {{"idx", "C", "P"}, "unknown command 'idx'; did you mean index?"},
            {{"i", "C"}, "unknown command 'i'; did you mean index, identify or info?"},
            {{"lss", "C"}, "unknown command 'lss'; did you mean ls?"},
        };
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            const char *argv[10] = {"patina"};
            for (int k = 0; k < 8 && cases[i].argv[k]; k++) argv[k + 1] = cases[i].argv[k];
            assert_int_equal(parse(&a, err, sizeof err, argv), CLI_PARSE_ERROR);
            if (strcmp(err, cases[i].msg)) fail_msg("message '%s', wanted '%s'", err, cases[i].msg);
            cli_args_release(&a);
        }
    }
    /* the distance behind the suggestions: optimal string alignment (a swap of neighbours is one
     * edit, a swapped pair is not edited again: "ca" -> "abc" is 3, where Damerau-Levenshtein says 2) */
    assert_int_equal(cli_edit_distance("", 0, "abc"), 3);
    assert_int_equal(cli_edit_distance("abc", 3, "abc"), 0);
    assert_int_equal(cli_edit_distance("ABC", 3, "abc"), 0);
    assert_int_equal(cli_edit_distance("ab", 2, "ba"), 1);
    assert_int_equal(cli_edit_distance("kitten", 6, "sitting"), 3);
    assert_int_equal(cli_edit_distance("ca", 2, "abc"), 3);
    assert_int_equal(cli_edit_distance("formatxyz", 6, "format"), 0); /* only len bytes are read */
    {
        char long_word[100], hint[200];
        memset(long_word, 'a', sizeof long_word);
        assert_int_equal(cli_edit_distance(long_word, sizeof long_word, "a"), 65);
        /* far from every name, one letter, empty: nothing suggested */
        assert_int_equal(cli_suggest(hint, sizeof hint, long_word, sizeof long_word,
                                     (const char *const[]){"jobs", "k"}, 2, "--"), 0);
        assert_string_equal(hint, "");
        assert_int_equal(cli_suggest(hint, sizeof hint, "x", 1, (const char *const[]){"jobs", "k"}, 2, "--"), 0);
        assert_int_equal(cli_suggest(hint, sizeof hint, "", 0, (const char *const[]){"jobs", "k"}, 2, "--"), 0);
        /* four names with the prefix: the nearest by distance instead, at most three */
        assert_int_equal(cli_suggest(hint, sizeof hint, "ab", 2, (const char *const[]){"abc", "abd", "abe", "abf"},
                                     4, "--"), 3);
        assert_string_equal(hint, "; did you mean --abc, --abd or --abe?");
        /* a short buffer is cut, never overrun */
        assert_int_equal(cli_suggest(hint, 8, "fromat", 6, (const char *const[]){"format"}, 1, "--"), 1);
        assert_int_equal(strlen(hint), 7);
    }
    /* cli_parse_u64: strict decimal */
    assert_int_equal(cli_parse_u64("18446744073709551615", 1, UINT64_MAX, &u), 0);
    assert_true(u == UINT64_MAX);
    assert_int_equal(cli_parse_u64("18446744073709551616", 1, UINT64_MAX, &u), -1);
    assert_int_equal(cli_parse_u64("0", 1, UINT64_MAX, &u), -1);
    assert_int_equal(cli_parse_u64("007", 1, 10, &u), 0);
    assert_true(u == 7);
    assert_int_equal(cli_parse_u64("+7", 1, 10, &u), -1);
}

/* Random command lines from every option of every table, odd bytes and
 * numbers: the parser always answers (OK, help or an error with a message)
 * and never reads or writes out of bounds (run it under ASan). */
static void test_parser_random(void **state)
{
    static const char *const words[] = {"", "-", "--", "=", "-h", "--help", "x.jpg", "0", "1", "-1", "4", "1e9",
                                        "nan", "inf", "auto", "99999999999999999999", "512M", "1Q", "csv",
                                        "json", "table", "gpu", "cedd", "lbp:P=8", "\xff\xfe", "-\x01", "--=",
                                        "---", "-jj", "-qh", "-k5", "--k=5", "--range=-0"};
    char opts[CLI_MAX_OPTS * 8][80];
    size_t nopts = 0, i;
    tu_rng_t r;
    (void)state;
    for (i = 0; i < cli_ncommands; i++)
        for (size_t k = 0; k < cli_commands[i]->nopts && nopts + 2 < sizeof opts / sizeof opts[0]; k++) {
            const cli_opt_t *o = &cli_commands[i]->opts[k];
            snprintf(opts[nopts++], sizeof opts[0], "--%s", o->name);
            if (o->letter) snprintf(opts[nopts++], sizeof opts[0], "-%c", o->letter);
        }
    tu_rng_seed(&r, 77);
    for (int it = 0; it < 100000; it++) {
        const char *argv[16];
        char buf[16][16];
        int argc = 1 + (int)tu_rng_below(&r, 15), k;
        cli_args_t a;
        const cli_command_t *cmd;
        char err[256];
        int res;
        argv[0] = "patina";
        argv[1] = tu_rng_below(&r, 20) ? cli_commands[tu_rng_below(&r, (uint32_t)cli_ncommands)]->name : "nope";
        for (k = 2; k < argc; k++) {
            uint32_t pick = tu_rng_below(&r, 3);
            if (pick == 0) argv[k] = opts[tu_rng_below(&r, (uint32_t)nopts)];
            else if (pick == 1) argv[k] = words[tu_rng_below(&r, sizeof words / sizeof words[0])];
            else {
                int len = (int)tu_rng_below(&r, 15);
                for (int c = 0; c < len; c++) buf[k][c] = (char)(1 + tu_rng_below(&r, 255));
                buf[k][len] = '\0';
                argv[k] = buf[k];
            }
        }
        argv[argc] = NULL;
        res = cli_parse_argv(&cmd, &a, argc, (char *const *)argv, err, sizeof err);
        assert_true(res == CLI_PARSE_OK || res == CLI_PARSE_HELP || res == CLI_PARSE_ERROR);
        if (res == CLI_PARSE_ERROR) assert_true(strlen(err) > 0);
        if (res == CLI_PARSE_OK) {
            assert_true(a.noperands >= (size_t)cmd->min_operands);
            assert_true(cmd->max_operands < 0 || a.noperands <= (size_t)cmd->max_operands);
        }
        cli_args_release(&a);
    }
    /* and --help of every table writes something with every line in 79 columns */
    for (i = 0; i < cli_ncommands; i++) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        cli_help(f, cli_commands[i]);
        fclose(f);
        assert_true(len > 100);
        for (char *line = text, *nl; (nl = strchr(line, '\n')); line = nl + 1) assert_true(nl - line <= 79);
        free(text);
    }
}

/* The CLI's option of library option `name` (a '_' written '-'; the
 * index's jpeg_decoder is --decoder, apply_orientation --exif-orientation), or NULL. */
static const cli_opt_t *cli_twin(const cli_command_t *cmd, const char *name)
{
    char want[64];
    size_t i;
    snprintf(want, sizeof want, "%s",
             !strcmp(name, "jpeg_decoder") ? "decoder" : !strcmp(name, "apply_orientation") ? "exif-orientation" : name);
    for (i = 0; want[i]; i++)
        if (want[i] == '_') want[i] = '-';
    for (i = 0; i < cmd->nopts; i++)
        if (!strcmp(cmd->opts[i].name, want)) return &cmd->opts[i];
    return NULL;
}

/* The options of `patina search`, `identify` and `index` that the library
 * declares (include/patina/options.h) have the library's type, bounds,
 * choices and default, and --help shows them. */
static void test_library_options(void **state)
{
    static const struct {
        const cli_command_t *cmd;
        patina_option_set set;
        size_t want; /* options the command exposes under the library's name */
    } pairs[] = {{&cli_cmd_search, PATINA_OPTIONS_SEARCH, 3},
                 {&cli_cmd_identify, PATINA_OPTIONS_IDENTIFY, 20},
                 {&cli_cmd_index, PATINA_OPTIONS_INDEX, 7}};
    (void)state;
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
        const cli_command_t *cmd = pairs[p].cmd;
        size_t found = 0;
        cli_args_t a;
        char err[512];
        char *argv[] = {(char *)cmd->name, "C", "Q", NULL};
        assert_int_equal(cli_parse(&a, cmd, 3, argv, err, sizeof err), CLI_PARSE_OK);
        for (size_t i = 0; i < patina_options_count(pairs[p].set); i++) {
            patina_option_info_t o;
            const cli_opt_t *c;
            const cli_value_t *v;
            assert_int_equal(patina_options_get(&o, pairs[p].set, i), PATINA_OK);
            if (!(c = cli_twin(cmd, o.name))) continue;
            found++;
            v = cli_get(&a, c->name);
            print_message("%s --%s: %s\n", cmd->name, c->name, o.def ? o.def : "(no default)");
            switch (o.type) {
            case PATINA_OPTION_INT:
            case PATINA_OPTION_DOUBLE:
                assert_true(o.type == PATINA_OPTION_INT ? c->type == CLI_INT || c->type == CLI_BYTES
                                                        : c->type == CLI_NUMBER);
                assert_true(c->min == o.min);
                /* the command line reads integers exactly up to 2^53 */
                assert_true(c->max == (c->type == CLI_INT && o.max > 9007199254740992.0 ? 9007199254740992.0 : o.max));
                assert_int_equal(!!(c->flags & CLI_OPEN_MIN), o.min_open);
                if (!o.def) {
                    assert_null(c->def);
                    break;
                }
                assert_non_null(v);
                assert_true((c->type == CLI_NUMBER ? v->num : c->type == CLI_BYTES ? (double)v->bytes : (double)v->i) ==
                            strtod(o.def, NULL));
                break;
            case PATINA_OPTION_ENUM: {
                /* the library's words in its order (the CLI casts the index), maybe more after them */
                size_t l = strlen(o.choices);
                assert_int_equal(c->type, CLI_CHOICE);
                assert_true(!strncmp(c->choices, o.choices, l) && (c->choices[l] == '|' || !c->choices[l]));
                assert_string_equal(c->def, o.def);
                break;
            }
            case PATINA_OPTION_BOOL:
                assert_int_equal(c->type, CLI_FLAG); /* a flag that sets what is off by default */
                assert_string_equal(o.def, "0");
                break;
            default: fail_msg("%s: option type %d", o.name, (int)o.type);
            }
        }
        cli_args_release(&a);
        assert_int_equal(found, pairs[p].want);
    }
    /* the server's --max-k goes up to the library's limit */
    for (size_t i = 0; i < cli_cmd_serve.nopts; i++)
        if (!strcmp(cli_cmd_serve.opts[i].name, "max-k")) assert_true(cli_cmd_serve.opts[i].max == PATINA_K_MAX);
    { /* and --help says so */
        char *text = NULL, want[128];
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        cli_help(f, &cli_cmd_search);
        cli_help(f, &cli_cmd_identify);
        fclose(f);
        snprintf(want, sizeof want, "1..%d; default %d", PATINA_K_MAX, PATINA_SEARCH_K_DEFAULT);
        assert_non_null(strstr(text, want));
        snprintf(want, sizeof want, "1..%d; default %d", PATINA_K_MAX, PATINA_IDENTIFY_K_DEFAULT);
        assert_non_null(strstr(text, want));
        assert_non_null(strstr(text, "> 0 and <= 1; default 0.8"));
        free(text);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parser),
        cmocka_unit_test(test_parser_random),
        cmocka_unit_test(test_library_options),
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_rm_ids),
        cmocka_unit_test(test_output_quoting),
        cmocka_unit_test(test_search_missing_table),
        cmocka_unit_test(test_search_folders),
        cmocka_unit_test(test_info),
        cmocka_unit_test(test_table_output),
        cmocka_unit_test(test_glcm_missing_mask),
        cmocka_unit_test(test_symlink_loops),
        cmocka_unit_test(test_unreadable_folder),
        cmocka_unit_test(test_bombs_and_limits),
        cmocka_unit_test(test_batch_memory),
        cmocka_unit_test(test_damaged_jpegs),
        cmocka_unit_test(test_extract_parallel),
        cmocka_unit_test(test_index_bad_files),
        cmocka_unit_test(test_keys_and_walks),
        cmocka_unit_test(test_devices),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
