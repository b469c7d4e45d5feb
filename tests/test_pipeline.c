/* Tests of the indexing pipeline (src/pipeline) at the library level, no
 * CLI: path expansion (symbolic link loops, links to files in the tree,
 * hard links, unreadable folders, broken links, depth), patina_index_files
 * on synthetic images with a truncated, an unreadable and a damaged file
 * (counts, one report per problem naming the file, stored descriptors equal
 * to patina_extract_batch of the same images, resume, strict decoding,
 * batch memory), patina_load_files, and patina_extract_files (files and
 * bytes, several extractors, the decoder choice: auto on a CPU run or a
 * CPU-only build is libjpeg-turbo with the same records; exact-gpu there is
 * refused with the reason).
 *
 * Unreadable files need permission checks, which root bypasses: setup drops
 * the capabilities that do that (tu_drop_privileges); where it cannot, the
 * program exits 77 (skipped) saying why. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <turbojpeg.h>

#include "testutil.h"

static char *tmp, *realtmp; /* realtmp: tmp with links resolved */
static patina_context_t *ctx;
static patina_extractor_t *ex;

/* "<tmp>/<printf>" in one of 32 rotating buffers. */
#define tp(...) tu_path(tmp, __VA_ARGS__)

/* A w x h JPEG (4:2:0, quality 85) of image kind seed % 3; free with tjFree. */
static unsigned char *make_jpeg(unsigned long *size, int w, int h, uint64_t seed)
{
    return tu_make_jpeg(size, w, h, (int)(seed % 3), 85, seed);
}

static void write_jpeg(const char *path, int w, int h, uint64_t seed)
{
    tu_write_jpeg(path, w, h, (int)(seed % 3), 85, seed);
}

/* A JPEG with 4 garbage bytes before its SOS marker: decodable, with
 * libjpeg's warning "Corrupt JPEG data: 4 extraneous bytes ...". */
static void write_warning_jpeg(const char *path, uint64_t seed)
{
    unsigned long size;
    unsigned char *j = make_jpeg(&size, 70, 50, seed), *b = malloc(size + 4);
    size_t i;
    for (i = 2; i + 1 < size; i++)
        if (j[i] == 0xFF && j[i + 1] == 0xDA) break;
    memcpy(b, j, i);
    memcpy(b + i, "\x12\x34\x56\x78", 4);
    memcpy(b + i + 4, j + i, size - i);
    assert_int_equal(tu_write_file(path, b, size + 4), 0);
    free(b);
    tjFree(j);
}

/* What the callbacks saw. */
typedef struct report {
    size_t n;
    char path[16][4096];
    patina_status status[16];
    char msg[16][1024];
} report_t;

static void on_report(void *user, const char *path, patina_status s, const char *msg)
{
    report_t *r = user;
    if (r->n < 16) {
        snprintf(r->path[r->n], sizeof r->path[0], "%s", path);
        r->status[r->n] = s;
        snprintf(r->msg[r->n], sizeof r->msg[0], "%s", msg ? msg : "");
    }
    r->n++;
}

typedef struct reports {
    report_t errors, warnings;
} reports_t;

static void on_error(void *user, const char *path, patina_status s, const char *msg)
{
    on_report(&((reports_t *)user)->errors, path, s, msg);
}

static void on_warning(void *user, const char *path, patina_status s, const char *msg)
{
    on_report(&((reports_t *)user)->warnings, path, s, msg);
}

/* The report for `path`: exactly one, and its message names the file. */
static const char *reported_once(const report_t *r, const char *path)
{
    size_t i, found = 0, at = 0;
    for (i = 0; i < r->n && i < 16; i++)
        if (!strcmp(r->path[i], path)) found++, at = i;
    if (found != 1) fail_msg("%zu reports for %s (want 1)", found, path);
    if (!strstr(r->msg[at], path)) fail_msg("the report '%s' does not name %s", r->msg[at], path);
    return r->msg[at];
}

static int setup(void **state)
{
    patina_context_opts_t copts = {0};
    (void)state;
    if (tu_drop_privileges() != 0) {
        printf("SKIPPED: test_pipeline needs file permission checks (a file with mode 000 must be "
               "unreadable), and this process cannot drop the capabilities that bypass them\n");
        fflush(stdout);
        exit(77);
    }
    tmp = tu_tempdir("pipeline");
    realtmp = tmp ? realpath(tmp, NULL) : NULL;
    if (realtmp && strcmp(realtmp, tmp)) { /* keys are real paths: work in the real folder */
        free(tmp);
        tmp = strdup(realtmp);
    }
    copts.threads = 3;
    if (!tmp || patina_context_new(&ctx, &copts) != PATINA_OK || patina_extractor_new(&ex, "cedd") != PATINA_OK)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    char cmd[4200];
    (void)state;
    snprintf(cmd, sizeof cmd, "chmod -R u+rwx '%s' 2>/dev/null", tmp);
    if (system(cmd) != 0) { /* best effort */ }
    tu_remove_tree(tmp);
    free(tmp);
    free(realtmp);
    patina_extractor_free(ex);
    patina_context_free(ctx);
    return 0;
}

static void free_files(char **files, size_t n)
{
    for (size_t i = 0; i < n; i++) free(files[i]);
    free(files);
}

/* ------------------------------------------------------------ expand_paths */

static void test_walk_links(void **state)
{
    const char *paths[3];
    char **files;
    size_t n, skipped;
    reports_t r = {0};
    (void)state;
    mkdir(tp("loops"), 0755);
    mkdir(tp("loops/sub"), 0755);
    write_jpeg(tp("loops/a.jpg"), 20, 20, 1);
    write_jpeg(tp("loops/sub/b.jpg"), 20, 20, 2);
    assert_int_equal(symlink(".", tp("loops/b")), 0);
    assert_int_equal(symlink("..", tp("loops/sub/up")), 0);
    assert_int_equal(symlink("../a.jpg", tp("loops/sub/link.jpg")), 0);
    assert_int_equal(symlink("sub/b.jpg", tp("loops/0first.jpg")), 0);
    assert_int_equal(link(tp("loops/a.jpg"), tp("loops/sub/hard.jpg")), 0);
    paths[0] = tp("loops");
    paths[1] = tp("loops/sub");
    paths[2] = tp("loops/a.jpg");
    TU_OK(patina_expand_paths(&files, &n, paths, 3, &skipped, on_error, &r));
    assert_int_equal(skipped, 0);
    assert_int_equal(r.errors.n, 0);
    assert_int_equal(n, 2);
    assert_string_equal(files[0], tp("loops/0first.jpg")); /* b.jpg's inode, first reached here */
    assert_string_equal(files[1], tp("loops/a.jpg"));
    free_files(files, n);
    /* a trailing slash: the same files, spelled with it */
    paths[0] = tp("loops/");
    TU_OK(patina_expand_paths(&files, &n, paths, 1, NULL, NULL, NULL));
    assert_int_equal(n, 2);
    assert_string_equal(files[1], tp("loops/a.jpg"));
    free_files(files, n);
}

static void test_walk_problems(void **state)
{
    const char *paths[2];
    char **files, deep[4096];
    size_t n, skipped, i;
    reports_t r = {0};
    const char *m;
    (void)state;
    mkdir(tp("walk"), 0755);
    mkdir(tp("walk/m_locked"), 0755);
    write_jpeg(tp("walk/a.jpg"), 20, 20, 3);
    write_jpeg(tp("walk/m_locked/x.jpg"), 20, 20, 4);
    write_jpeg(tp("walk/z.jpg"), 20, 20, 5);
    assert_int_equal(symlink("nowhere.jpg", tp("walk/broken.jpg")), 0);
    assert_int_equal(chmod(tp("walk/m_locked"), 0), 0);
    /* 258 nested folders: the walk stops going down at 256 (reported) */
    snprintf(deep, sizeof deep, "%s/walk/n", tmp);
    for (i = 0; i < 258; i++) {
        mkdir(deep, 0755);
        if (i == 100) write_jpeg(tp("walk/%s/deep.jpg", deep + strlen(tmp) + 6), 20, 20, 6);
        strcat(deep, "/n");
    }
    paths[0] = tp("walk");
    paths[1] = tp("no-such-path");
    TU_OK(patina_expand_paths(&files, &n, paths, 2, &skipped, on_error, &r));
    chmod(tp("walk/m_locked"), 0755);
    assert_int_equal(skipped, 4);
    assert_int_equal(r.errors.n, 4);
    m = reported_once(&r.errors, tp("walk/m_locked"));
    assert_non_null(strstr(m, "cannot open directory"));
    assert_non_null(strstr(m, "Permission denied"));
    m = reported_once(&r.errors, tp("walk/broken.jpg"));
    assert_non_null(strstr(m, "broken symbolic link"));
    m = reported_once(&r.errors, tp("no-such-path"));
    assert_non_null(strstr(m, "No such file or directory"));
    for (i = 0; i < 4; i++)
        if (strstr(r.errors.msg[i], "nested deeper than 256")) break;
    assert_true(i < 4);
    assert_int_equal(r.errors.status[i], PATINA_E_LIMIT);
    /* the walk went on after each: a.jpg, the deep file, z.jpg */
    assert_int_equal(n, 3);
    assert_string_equal(files[0], tp("walk/a.jpg"));
    assert_non_null(strstr(files[1], "/deep.jpg"));
    assert_string_equal(files[2], tp("walk/z.jpg"));
    free_files(files, n);
}

/* ------------------------------------------------------------- index_files */

/* imgs/: 7 good images (6 JPEG, 1 PPM), a truncated JPEG, an unreadable
 * JPEG, a JPEG decoded with a warning. Returns the good files' paths. */
#define NGOOD 7
static void make_folder(char good[NGOOD][4096])
{
    static const int dims[6][2] = {{64, 48}, {33, 17}, {120, 90}, {8, 8}, {200, 31}, {47, 101}};
    unsigned long size;
    unsigned char *j;
    mkdir(tp("imgs"), 0755);
    for (int i = 0; i < 6; i++) {
        snprintf(good[i], 4096, "%s/imgs/g%d.jpg", tmp, i);
        write_jpeg(good[i], dims[i][0], dims[i][1], 10 + (uint64_t)i);
    }
    {   /* a 5x3 PPM */
        char ppm[11 + 45];
        memcpy(ppm, "P6\n5 3\n255\n", 11);
        for (int k = 0; k < 45; k++) ppm[11 + k] = (char)(k * 37);
        snprintf(good[6], 4096, "%s/imgs/g6.ppm", tmp);
        assert_int_equal(tu_write_file(good[6], ppm, sizeof ppm), 0);
    }
    j = make_jpeg(&size, 90, 60, 30);
    assert_int_equal(tu_write_file(tp("imgs/trunc.jpg"), j, size * 2 / 3), 0);
    tjFree(j);
    write_jpeg(tp("imgs/locked.jpg"), 30, 30, 31);
    assert_int_equal(chmod(tp("imgs/locked.jpg"), 0), 0);
    write_warning_jpeg(tp("imgs/warn.jpg"), 32);
}

/* The stored descriptors of `keys` equal patina_extract_batch of the same
 * files decoded on their own, byte for byte. */
static void expect_descriptors(patina_collection_t *c, char keys[][4096], size_t n)
{
    size_t bytes = patina_extractor_bytes(ex), i;
    patina_image_t *imgs = calloc(n, sizeof *imgs);
    uint8_t *want = malloc(n * bytes), *got = malloc(bytes);
    patina_status *st = calloc(n, sizeof *st);
    for (i = 0; i < n; i++) {
        patina_decode_report_t rep;
        TU_OK(patina_image_load_with(&imgs[i], &rep, keys[i], NULL));
    }
    TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, want, imgs, n, st));
    for (i = 0; i < n; i++) {
        patina_record_t rec;
        char *key;
        TU_OK(st[i]);
        /* stored under the file's key: its path relative to the root, tmp */
        TU_OK(patina_collection_key(c, keys[i], &key));
        assert_string_equal(key, keys[i] + strlen(realtmp) + 1);
        TU_OK(patina_collection_get_by_key(c, key, &rec));
        patina_free(key);
        assert_int_equal(rec.width, imgs[i].width);
        assert_int_equal(rec.height, imgs[i].height);
        TU_OK(patina_collection_get_descriptor(c, patina_extractor_spec(ex), rec.id, got, bytes));
        if (memcmp(got, want + i * bytes, bytes) != 0) fail_msg("stored descriptor of %s differs", keys[i]);
        patina_record_release(&rec);
        patina_image_release(&imgs[i]);
    }
    free(imgs);
    free(want);
    free(got);
    free(st);
}

static void test_index_files(void **state)
{
    char good[NGOOD + 1][4096], **files;
    const char *dir;
    size_t n, skipped;
    patina_collection_t *c;
    patina_index_opts_t o;
    patina_index_stats_t s;
    reports_t r;
    const char *m;
    (void)state;
    make_folder(good);
    dir = tp("imgs");
    TU_OK(patina_expand_paths(&files, &n, &dir, 1, &skipped, NULL, NULL));
    assert_int_equal(n, 10);
    assert_int_equal(skipped, 0);

    patina_index_opts_init(&o);
    assert_int_equal(o.batch, 256);
    assert_true(o.batch_memory == PATINA_DEFAULT_BATCH_MEMORY);
    assert_int_equal(o.strict, 0);
    o.device = PATINA_DEVICE_CPU;
    o.batch = 4; /* three windows */
    o.on_error = on_error;
    o.on_warning = on_warning;
    memset(&r, 0, sizeof r);
    o.user = &r;
    TU_OK(patina_collection_open(&c, tp("run1.patina"), PATINA_OPEN_CREATE, 0));
    TU_OK(patina_index_files(ctx, c, ex, (const char *const *)files, n, &o, &s));
    assert_int_equal(s.files, 10);
    assert_int_equal(s.indexed, 8);
    assert_int_equal(s.failed, 2);
    assert_int_equal(s.skipped, 0);
    assert_int_equal(s.warned, 1);
    /* the store side's waits: a part of the wall time, at least the producer's (t_wait) */
    assert_true(s.t_starved >= s.t_wait && s.t_wait >= 0 && s.t_starved <= s.seconds);
    assert_int_equal(r.errors.n, 2);
    m = reported_once(&r.errors, tp("imgs/trunc.jpg"));
    assert_non_null(strstr(m, "truncated JPEG data"));
    assert_int_equal(r.errors.status[strcmp(r.errors.path[0], tp("imgs/trunc.jpg")) ? 1 : 0], PATINA_E_CORRUPT);
    m = reported_once(&r.errors, tp("imgs/locked.jpg"));
    assert_non_null(strstr(m, "Permission denied"));
    assert_int_equal(r.warnings.n, 1);
    m = reported_once(&r.warnings, tp("imgs/warn.jpg"));
    assert_non_null(strstr(m, "4 extraneous bytes"));
    snprintf(good[NGOOD], 4096, "%s", tp("imgs/warn.jpg"));
    expect_descriptors(c, good, NGOOD + 1);

    /* Again: everything stored is skipped (resume); the bad files fail again. */
    memset(&r, 0, sizeof r);
    TU_OK(patina_index_files(ctx, c, ex, (const char *const *)files, n, &o, &s));
    assert_int_equal(s.indexed, 0);
    assert_int_equal(s.skipped, 8);
    assert_int_equal(s.failed, 2);
    assert_int_equal(s.warned, 0);
    assert_int_equal(r.errors.n, 2);
    assert_int_equal(r.warnings.n, 0);
    patina_collection_close(c);

    /* Strict: the damaged file fails too, reported once as an error. */
    memset(&r, 0, sizeof r);
    o.strict = 1;
    TU_OK(patina_collection_open(&c, tp("strict.patina"), PATINA_OPEN_CREATE, 0));
    TU_OK(patina_index_files(ctx, c, ex, (const char *const *)files, n, &o, &s));
    assert_int_equal(s.indexed, 7);
    assert_int_equal(s.failed, 3);
    assert_int_equal(s.warned, 1);
    assert_int_equal(r.errors.n, 3);
    assert_int_equal(r.warnings.n, 0);
    m = reported_once(&r.errors, tp("imgs/warn.jpg"));
    assert_non_null(strstr(m, "strict decoding rejects it"));
    expect_descriptors(c, good, NGOOD);
    patina_collection_close(c);

    /* A 1-byte batch memory: batches of one image, the same records. */
    memset(&r, 0, sizeof r);
    o.strict = 0;
    o.batch = 256;
    o.batch_memory = 1;
    TU_OK(patina_collection_open(&c, tp("tiny.patina"), PATINA_OPEN_CREATE, 0));
    TU_OK(patina_index_files(ctx, c, ex, (const char *const *)files, n, &o, &s));
    assert_int_equal(s.indexed, 8);
    assert_int_equal(s.failed, 2);
    assert_int_equal(r.errors.n, 2);
    expect_descriptors(c, good, NGOOD + 1);
    patina_collection_close(c);

    /* NULL options: the defaults (AUTO device, no callbacks). */
    TU_OK(patina_collection_open(&c, tp("defaults.patina"), PATINA_OPEN_CREATE, 0));
    TU_OK(patina_index_files(ctx, c, ex, (const char *const *)files, n, NULL, &s));
    assert_int_equal(s.indexed, 8);
    assert_int_equal(s.failed, 2);
    patina_collection_close(c);
    free_files(files, n);
}


/* ------------------------------------------------------- keys, duplicates */

static void copy_file(const char *from, const char *to)
{
    FILE *f = fopen(from, "rb");
    char buf[1 << 16];
    size_t got;
    FILE *g = fopen(to, "wb");
    assert_non_null(f);
    assert_non_null(g);
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) assert_int_equal(fwrite(buf, 1, got, g), got);
    fclose(f);
    fclose(g);
}

typedef struct dups {
    size_t n;
    char msg[8][1024];
} dups_t;

static void on_dup(void *user, const char *path, patina_status s, const char *msg)
{
    dups_t *d = user;
    (void)path;
    assert_int_equal(s, PATINA_OK);
    if (d->n < 8) snprintf(d->msg[d->n], sizeof d->msg[0], "%s", msg);
    d->n++;
}

/* The same file through several spellings is one record (keys relative to
 * the collection's root); a new key with stored content is a duplicate:
 * reported naming both keys, indexed as well, or not with skip_duplicates;
 * equal files met in one run are duplicates too. */
static void test_keys_and_duplicates(void **state)
{
    patina_collection_t *c;
    patina_index_opts_t o;
    patina_index_stats_t s;
    dups_t d = {0};
    char cwd[4096];
    const char *one[1], *spell[4];
    uint64_t count;
    (void)state;
    mkdir(tp("kd"), 0755);
    mkdir(tp("kd/sub"), 0755);
    write_jpeg(tp("kd/a.jpg"), 40, 30, 81);
    write_jpeg(tp("kd/b.jpg"), 41, 31, 82);
    copy_file(tp("kd/a.jpg"), tp("kd/sub/a-copy.jpg"));
    assert_int_equal(symlink("kd", tp("kd-link")), 0);
    patina_index_opts_init(&o);
    assert_int_equal(o.skip_duplicates, 0);
    o.device = PATINA_DEVICE_CPU;
    o.on_duplicate = on_dup;
    o.user = &d;
    TU_OK(patina_collection_open(&c, tp("kd.patina"), PATINA_OPEN_CREATE, 0));
    {
        char **files;
        size_t n;
        one[0] = tp("kd");
        TU_OK(patina_walk(&files, &n, one, 1, NULL, NULL));
        assert_int_equal(n, 3);
        TU_OK(patina_index_files(ctx, c, ex, (const char *const *)files, n, &o, &s));
        free_files(files, n);
    }
    assert_int_equal(s.indexed, 3);
    assert_int_equal(s.duplicates, 1); /* sub/a-copy.jpg: a.jpg's content, met earlier in the run */
    assert_int_equal(d.n, 1);
    assert_non_null(strstr(d.msg[0], "'kd/sub/a-copy.jpg' has the same content (SHA-256) as 'kd/a.jpg'"));
    /* other spellings of the stored files: the same keys, skipped */
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(tp("kd/sub")), 0);
    spell[0] = "../a.jpg";
    spell[1] = tp("kd/./sub/../b.jpg");
    spell[2] = tp("kd-link/a.jpg");
    spell[3] = "./a-copy.jpg";
    d.n = 0;
    TU_OK(patina_index_files(ctx, c, ex, spell, 4, &o, &s));
    assert_int_equal(chdir(cwd), 0);
    assert_int_equal(s.indexed, 0);
    assert_int_equal(s.skipped, 4);
    assert_int_equal(s.duplicates, 0);
    TU_OK(patina_collection_count(c, &count));
    assert_int_equal(count, 3);
    /* a new key with content stored under another one: reported; skip_duplicates leaves it out */
    copy_file(tp("kd/b.jpg"), tp("kd/c.jpg"));
    one[0] = tp("kd/c.jpg");
    o.skip_duplicates = 1;
    TU_OK(patina_index_files(ctx, c, ex, one, 1, &o, &s));
    assert_int_equal(s.indexed, 0);
    assert_int_equal(s.duplicates, 1);
    assert_int_equal(d.n, 1);
    assert_non_null(strstr(d.msg[0], "'kd/c.jpg' has the same content (SHA-256) as 'kd/b.jpg'; not indexed"));
    TU_OK(patina_collection_count(c, &count));
    assert_int_equal(count, 3);
    o.skip_duplicates = 0;
    TU_OK(patina_index_files(ctx, c, ex, one, 1, &o, &s));
    assert_int_equal(s.indexed, 1);
    assert_int_equal(s.duplicates, 1);
    assert_non_null(strstr(d.msg[1], "indexed as well"));
    TU_OK(patina_collection_count(c, &count));
    assert_int_equal(count, 4);
    patina_collection_close(c);
}

typedef struct seen {
    size_t n;
    char path[16][4096];
} seen_t;

static void on_seen(void *user, const char *path, patina_status s, const char *msg)
{
    seen_t *w = user;
    (void)s;
    assert_non_null(strstr(msg, path));
    if (w->n < 16) snprintf(w->path[w->n], sizeof w->path[0], "%s", path);
    w->n++;
}

/* A folder walk takes the files a loader recognises (by their bytes, not
 * their names) and counts the others; include and exclude patterns (base
 * name or path below the folder, case-insensitive, excludes win; an
 * excluded folder is not entered); a file named is always taken. */
static void test_walk_filters(void **state)
{
    patina_walk_opts_t o;
    patina_walk_stats_t st;
    seen_t w = {0};
    char **files;
    size_t n;
    const char *paths[2];
    const char *inc[1], *exc[2];
    (void)state;
    mkdir(tp("wf"), 0755);
    mkdir(tp("wf/raw"), 0755);
    mkdir(tp("wf/sub"), 0755);
    write_jpeg(tp("wf/a.jpg"), 20, 20, 91);
    write_jpeg(tp("wf/B.JPG"), 20, 20, 92);
    write_jpeg(tp("wf/named-oddly.dat"), 20, 20, 93); /* a JPEG by its bytes */
    write_jpeg(tp("wf/raw/r.jpg"), 20, 20, 94);
    write_jpeg(tp("wf/sub/s.jpg"), 20, 20, 95);
    assert_int_equal(tu_write_file(tp("wf/a.xmp"), "<x:xmpmeta/>\n", 13), 0);
    assert_int_equal(tu_write_file(tp("wf/a.thm"), "thumb", 5), 0);
    assert_int_equal(tu_write_file(tp("wf/empty.jpg"), "", 0), 0);
    paths[0] = tp("wf");
    patina_walk_opts_init(&o);
    o.on_other = on_seen;
    o.user = &w;
    TU_OK(patina_walk(&files, &n, paths, 1, &o, &st));
    assert_int_equal(n, 5);
    assert_string_equal(files[0], tp("wf/B.JPG"));
    assert_string_equal(files[1], tp("wf/a.jpg"));
    assert_string_equal(files[2], tp("wf/named-oddly.dat"));
    assert_string_equal(files[3], tp("wf/raw/r.jpg"));
    assert_string_equal(files[4], tp("wf/sub/s.jpg"));
    assert_int_equal(st.others, 3);
    assert_int_equal(st.skipped, 0);
    assert_int_equal(w.n, 3);
    assert_string_equal(w.path[0], tp("wf/a.thm"));
    free_files(files, n);
    /* the default walk of patina_expand_paths is the same */
    TU_OK(patina_expand_paths(&files, &n, paths, 1, NULL, NULL, NULL));
    assert_int_equal(n, 5);
    free_files(files, n);
    /* patterns: --exclude raw (a folder) --exclude '*.jpg' (B.JPG too) */
    exc[0] = "raw";
    exc[1] = "*.jpg";
    o.exclude = exc;
    o.nexclude = 2;
    w.n = 0;
    TU_OK(patina_walk(&files, &n, paths, 1, &o, &st));
    assert_int_equal(n, 1);
    assert_string_equal(files[0], tp("wf/named-oddly.dat"));
    assert_int_equal(st.others, 3 + 3); /* the non-images, B.JPG, a.jpg, sub/s.jpg; raw/ not entered */
    free_files(files, n);
    /* an include on the path below the folder; excludes still win */
    inc[0] = "sub/*";
    o.include = inc;
    o.ninclude = 1;
    o.nexclude = 0;
    TU_OK(patina_walk(&files, &n, paths, 1, &o, &st));
    assert_int_equal(n, 1);
    assert_string_equal(files[0], tp("wf/sub/s.jpg"));
    free_files(files, n);
    o.nexclude = 2;
    TU_OK(patina_walk(&files, &n, paths, 1, &o, &st));
    assert_int_equal(n, 0);
    free(files);
    /* a file named is always taken; all_files takes every file of a walk */
    o.ninclude = o.nexclude = 0;
    paths[1] = tp("wf/a.xmp");
    paths[0] = tp("wf/sub");
    TU_OK(patina_walk(&files, &n, paths, 2, &o, &st));
    assert_int_equal(n, 2);
    assert_string_equal(files[1], tp("wf/a.xmp"));
    free_files(files, n);
    paths[0] = tp("wf");
    o.all_files = 1;
    TU_OK(patina_walk(&files, &n, paths, 1, &o, &st));
    assert_int_equal(n, 8);
    assert_int_equal(st.others, 0);
    free_files(files, n);
    /* an empty pattern is refused */
    exc[0] = "";
    o.nexclude = 1;
    assert_int_equal(patina_walk(&files, &n, paths, 1, &o, &st), PATINA_E_INVALID);
}

/* --------------------------------------------------------------- load_files */

static void test_load_files(void **state)
{
    enum { N = 6 };
    const char *paths[N];
    patina_image_t imgs[N];
    patina_load_result_t *res = calloc(N, sizeof *res);
    patina_load_opts_t o;
    size_t taken, i;
    (void)state;
    mkdir(tp("load"), 0755);
    for (i = 0; i < 4; i++) write_jpeg(tp("load/%zu.jpg", i), 30 + (int)i * 10, 20 + (int)i * 5, 40 + i);
    write_warning_jpeg(tp("load/w.jpg"), 45);
    paths[0] = tp("load/0.jpg");
    paths[1] = tp("load/w.jpg");
    paths[2] = tp("load/1.jpg");
    paths[3] = tp("load/missing.jpg");
    paths[4] = tp("load/2.jpg");
    paths[5] = tp("load/3.jpg");
    patina_load_opts_init(&o);
    assert_true(o.batch_memory == PATINA_DEFAULT_BATCH_MEMORY);
    TU_OK(patina_load_files(ctx, imgs, res, &taken, paths, N, &o));
    assert_int_equal(taken, N);
    for (i = 0; i < N; i++) {
        if (i == 3) {
            assert_int_equal(res[i].status, PATINA_E_NOTFOUND);
            assert_non_null(strstr(res[i].error, paths[3]));
            assert_null(imgs[i].data);
            continue;
        }
        TU_OK(res[i].status);
        assert_int_equal(res[i].report.warnings, i == 1);
        {   /* the same pixels as a load on its own */
            patina_image_t one;
            TU_OK(patina_image_load(&one, paths[i], NULL));
            assert_int_equal(one.width, imgs[i].width);
            assert_int_equal(one.height, imgs[i].height);
            assert_memory_equal(one.data, imgs[i].data, (size_t)one.height * one.stride);
            patina_image_release(&one);
        }
        patina_image_release(&imgs[i]);
    }
    assert_non_null(strstr(res[1].report.warning, paths[1]));
    /* strict: the damaged one fails */
    o.strict = 1;
    TU_OK(patina_load_files(ctx, imgs, res, &taken, paths, 2, &o));
    assert_int_equal(taken, 2);
    TU_OK(res[0].status);
    assert_int_equal(res[1].status, PATINA_E_CORRUPT);
    assert_non_null(strstr(res[1].error, "strict decoding rejects it"));
    patina_image_release(&imgs[0]);
    /* memory: a 1-byte budget takes one file; a budget of exactly the first
     * two (encoded + decoded bytes) takes two */
    o.strict = 0;
    o.batch_memory = 1;
    TU_OK(patina_load_files(ctx, imgs, res, &taken, paths, N, &o));
    assert_int_equal(taken, 1);
    patina_image_release(&imgs[0]);
    {   /* encoded + decoded bytes of paths[0] and paths[1] */
        patina_image_t a, b;
        struct stat st0, st1;
        TU_OK(patina_image_load(&a, paths[0], NULL));
        TU_OK(patina_image_load(&b, paths[1], NULL));
        stat(paths[0], &st0);
        stat(paths[1], &st1);
        o.batch_memory = (uint64_t)st0.st_size + (uint64_t)st1.st_size + 3ull * (uint64_t)a.width * a.height +
                         3ull * (uint64_t)b.width * b.height;
        patina_image_release(&a);
        patina_image_release(&b);
    }
    TU_OK(patina_load_files(ctx, imgs, res, &taken, paths, N, &o));
    assert_int_equal(taken, 2);
    patina_image_release(&imgs[0]);
    patina_image_release(&imgs[1]);
    /* n = 0, and bad arguments */
    TU_OK(patina_load_files(ctx, imgs, res, &taken, paths, 0, NULL));
    assert_int_equal(taken, 0);
    assert_int_equal(patina_load_files(NULL, imgs, res, &taken, paths, 1, NULL), PATINA_E_INVALID);
    free(res);
}

/* patina_extract_files against patina_load_files + patina_extract_batch:
 * the same records in input order, failures naming their input, bytes
 * inputs like files, two extractors at once, the memory cut; the decoder
 * choice on the CPU (auto: libjpeg-turbo; exact-gpu and nvjpeg refused). */
static void test_extract_files(void **state)
{
    enum { N = 6 };
    const char *paths[N];
    patina_image_t imgs[N];
    patina_load_result_t lres[N];
    patina_extract_result_t *res = calloc(N, sizeof *res);
    patina_input_t in[N];
    patina_extractor_t *lbp;
    const patina_extractor_t *exs[2];
    patina_index_opts_t o;
    const size_t b0 = patina_extractor_bytes(ex);
    size_t taken, i, b1;
    uint8_t *want0, *want1, *got0, *got1;
    void *out[2];
    patina_status st[N];
    void *bytes[N];
    size_t sizes[N];
    (void)state;
    TU_OK(patina_extractor_new(&lbp, "lbp8"));
    b1 = patina_extractor_bytes(lbp);
    exs[0] = ex;
    exs[1] = lbp;
    want0 = calloc(N, b0);
    want1 = calloc(N, b1);
    got0 = calloc(N, b0);
    got1 = calloc(N, b1);
    assert_true(res && want0 && want1 && got0 && got1);
    mkdir(tp("xf"), 0755);
    for (i = 0; i < 4; i++) write_jpeg(tp("xf/%zu.jpg", i), 41 + (int)i * 9, 23 + (int)i * 6, 70 + i);
    write_warning_jpeg(tp("xf/w.jpg"), 75);
    paths[0] = tp("xf/0.jpg");
    paths[1] = tp("xf/w.jpg");
    paths[2] = tp("xf/1.jpg");
    paths[3] = tp("xf/missing.jpg");
    paths[4] = tp("xf/2.jpg");
    paths[5] = tp("xf/3.jpg");
    /* the reference: load, then extract on the CPU */
    TU_OK(patina_load_files(ctx, imgs, lres, &taken, paths, N, NULL));
    assert_int_equal(taken, N);
    for (i = 0; i < N; i++) {
        if (lres[i].status != PATINA_OK) continue;
        TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, want0 + i * b0, &imgs[i], 1, &st[i]));
        TU_OK(st[i]);
        TU_OK(patina_extract_batch(ctx, lbp, PATINA_DEVICE_CPU, want1 + i * b1, &imgs[i], 1, &st[i]));
        TU_OK(st[i]);
    }
    /* files, defaults (device auto, decoder auto): on this build or CPU run, libjpeg-turbo */
    memset(in, 0, sizeof in);
    for (i = 0; i < N; i++) in[i].path = paths[i];
    out[0] = got0;
    out[1] = got1;
    patina_index_opts_init(&o);
    o.device = PATINA_DEVICE_CPU;
    assert_int_equal(o.jpeg_decoder, PATINA_JPEG_AUTO);
    TU_OK(patina_extract_files(ctx, exs, 2, out, res, &taken, in, N, &o));
    assert_int_equal(taken, N);
    for (i = 0; i < N; i++) {
        assert_int_equal(res[i].gpu_decoded, 0);
        if (i == 3) {
            assert_int_equal(res[i].status, PATINA_E_NOTFOUND);
            assert_non_null(strstr(res[i].error, paths[3]));
            assert_int_equal(res[i].width, 0);
            continue;
        }
        TU_OK(res[i].status);
        assert_int_equal(res[i].width, imgs[i].width);
        assert_int_equal(res[i].height, imgs[i].height);
        assert_int_equal(res[i].report.warnings, i == 1);
        assert_memory_equal(got0 + i * b0, want0 + i * b0, b0);
        assert_memory_equal(got1 + i * b1, want1 + i * b1, b1);
    }
    /* bytes in memory: the same, named by their name */
    for (i = 0; i < N; i++) {
        memset(&in[i], 0, sizeof in[i]);
        bytes[i] = i == 3 ? strdup("not an image") : tu_read_file(paths[i], &sizes[i]);
        if (i == 3) sizes[i] = strlen("not an image");
        in[i].data = bytes[i];
        in[i].size = sizes[i];
        in[i].name = i == 3 ? "junk-bytes" : NULL;
    }
    memset(got0, 0xAB, N * b0);
    TU_OK(patina_extract_files(ctx, exs, 1, out, res, &taken, in, N, NULL));
    assert_int_equal(taken, N);
    for (i = 0; i < N; i++) {
        if (i == 3) {
            assert_int_equal(res[i].status, PATINA_E_FORMAT);
            assert_non_null(strstr(res[i].error, "junk-bytes"));
            assert_true(got0[i * b0] == 0 && !memcmp(got0 + i * b0, got0 + i * b0 + 1, b0 - 1)); /* zeros */
            continue;
        }
        TU_OK(res[i].status);
        assert_memory_equal(got0 + i * b0, want0 + i * b0, b0);
    }
    /* the memory cut: a 1-byte budget takes one input */
    o.batch_memory = 1;
    TU_OK(patina_extract_files(ctx, exs, 2, out, res, &taken, in, N, &o));
    assert_int_equal(taken, 1);
    assert_memory_equal(got0, want0, b0);
    /* the GPU decoders need a GPU run: refused, saying why */
    o.batch_memory = 0;
    o.jpeg_decoder = PATINA_JPEG_EXACT_GPU;
    assert_int_equal(patina_extract_files(ctx, exs, 2, out, res, &taken, in, N, &o), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "exact-gpu decoder needs --device gpu"));
    assert_int_equal(taken, 0);
    o.jpeg_decoder = PATINA_JPEG_NVJPEG;
    assert_int_equal(patina_extract_files(ctx, exs, 2, out, res, &taken, in, N, &o), PATINA_E_INVALID);
    /* n = 0, bad arguments */
    TU_OK(patina_extract_files(ctx, exs, 2, out, res, &taken, in, 0, NULL));
    assert_int_equal(taken, 0);
    assert_int_equal(patina_extract_files(NULL, exs, 2, out, res, &taken, in, 1, NULL), PATINA_E_INVALID);
    assert_int_equal(patina_extract_files(ctx, exs, 0, out, res, &taken, in, 1, NULL), PATINA_E_INVALID);
    for (i = 0; i < N; i++) {
        patina_image_release(&imgs[i]);
        free(bytes[i]);
    }
    patina_extractor_free(lbp);
    free(want0);
    free(want1);
    free(got0);
    free(got1);
    free(res);
}

/* The pipeline's default decoder (auto) on a CPU run, and on a build
 * without CUDA with device auto: libjpeg-turbo, the same records as the
 * decoder named, nothing decoded on a GPU. */
static void test_index_auto_decoder(void **state)
{
    static const patina_jpeg_decoder dec[2] = {PATINA_JPEG_LIBJPEG, PATINA_JPEG_AUTO};
    patina_collection_t *c[2];
    patina_index_stats_t st[2];
    const char *files[4];
    size_t i;
    (void)state;
    mkdir(tp("auto"), 0755);
    for (i = 0; i < 4; i++) {
        write_jpeg(tp("auto/%zu.jpg", i), 50 + 7 * (int)i, 31 + 5 * (int)i, 90 + i);
        files[i] = tp("auto/%zu.jpg", i);
    }
    for (int k = 0; k < 2; k++) {
        patina_index_opts_t o;
        patina_index_opts_init(&o);
        o.device = patina_gpu_count() > 0 ? PATINA_DEVICE_CPU : PATINA_DEVICE_AUTO;
        o.jpeg_decoder = dec[k];
        TU_OK(patina_collection_open(&c[k], tp("auto/col%d", k), PATINA_OPEN_CREATE, 0));
        TU_OK(patina_index_files(ctx, c[k], ex, files, 4, &o, &st[k]));
        assert_int_equal(st[k].indexed, 4);
        assert_int_equal(st[k].gpu_decoded, 0);
        assert_int_equal(st[k].device, PATINA_DEVICE_CPU);
    }
    for (i = 0; i < 4; i++) {
        const size_t b = patina_extractor_bytes(ex);
        uint8_t *d[2];
        for (int k = 0; k < 2; k++) {
            patina_record_t r;
            char *key;
            d[k] = malloc(b);
            TU_OK(patina_collection_key(c[k], files[i], &key));
            TU_OK(patina_collection_get_by_key(c[k], key, &r));
            TU_OK(patina_collection_get_descriptor(c[k], patina_extractor_spec(ex), r.id, d[k], b));
            patina_record_release(&r);
            free(key);
        }
        assert_memory_equal(d[0], d[1], b);
        free(d[0]);
        free(d[1]);
    }
    patina_collection_close(c[0]);
    patina_collection_close(c[1]);
}

/* patina_load_opts_t.apply_orientation reaches the decoder: a JPEG whose
 * EXIF says "rotate 90 clockwise" (6) loads turned only on request. */
static void test_load_orientation(void **state)
{
    /* APP1: "Exif\0\0", big-endian TIFF, IFD0 with Orientation (0x0112, SHORT, 1) = 6 */
    static const unsigned char app1[] = {0xFF, 0xE1, 0, 34, 'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 42, 0, 0, 0, 8,
                                         0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 6, 0, 0, 0, 0, 0, 0};
    unsigned long size;
    unsigned char *j = make_jpeg(&size, 30, 20, 7), *b = malloc(size + sizeof app1);
    const char *path = tp("exif6.jpg");
    patina_image_t img;
    patina_load_result_t res;
    patina_load_opts_t o;
    size_t taken;
    int turn;
    (void)state;
    memcpy(b, j, 2);
    memcpy(b + 2, app1, sizeof app1);
    memcpy(b + 2 + sizeof app1, j + 2, size - 2);
    assert_int_equal(tu_write_file(path, b, size + sizeof app1), 0);
    for (turn = 0; turn < 2; turn++) {
        patina_load_opts_init(&o);
        assert_int_equal(o.apply_orientation, 0);
        o.apply_orientation = turn;
        TU_OK(patina_load_files(ctx, &img, &res, &taken, &path, 1, &o));
        assert_int_equal(taken, 1);
        TU_OK(res.status);
        assert_int_equal(img.width, turn ? 20 : 30);
        assert_int_equal(img.height, turn ? 30 : 20);
        patina_image_release(&img);
    }
    free(b);
    tjFree(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_walk_links),
        cmocka_unit_test(test_walk_problems),
        cmocka_unit_test(test_index_files),
        cmocka_unit_test(test_keys_and_duplicates),
        cmocka_unit_test(test_walk_filters),
        cmocka_unit_test(test_load_files),
        cmocka_unit_test(test_load_orientation),
        cmocka_unit_test(test_extract_files),
        cmocka_unit_test(test_index_auto_decoder),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
