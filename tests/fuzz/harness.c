/* The shared part of every fuzz target (fuzz.h): seed writing through
 * LLVMFuzzerInitialize, check failures, the test pattern, and the image
 * harness used by the loader targets. */
#define _GNU_SOURCE /* mkdir, basename */

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);

struct fuzz_seeds {
    char dir[4096]; /* DIR/seeds */
    FILE *dict;     /* DIR/dict, opened on the first entry */
    char dictpath[4096];
    int count;
    char *tokens[1024]; /* dictionary entries written so far (duplicates are skipped) */
    size_t tokenlen[1024];
    size_t ntokens;
};

void fuzz_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "fuzz check failed at %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (last library error: '%s')\n", patina_last_error());
    abort();
}

static void die(const char *what, const char *path)
{
    fprintf(stderr, "fuzz seeds: cannot %s '%s': %s\n", what, path, strerror(errno));
    exit(1);
}

void fuzz_seed(fuzz_seeds_t *w, const char *name, const void *data, size_t size)
{
    char path[4200];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s", w->dir, name);
    f = fopen(path, "wb");
    if (!f) die("create", path);
    if (size && fwrite(data, 1, size, f) != size) die("write", path);
    if (fclose(f) != 0) die("write", path);
    w->count++;
}

void fuzz_dict(fuzz_seeds_t *w, const void *token, size_t size)
{
    const uint8_t *p = token;
    size_t i;
    for (i = 0; i < w->ntokens; i++)
        if (w->tokenlen[i] == size && memcmp(w->tokens[i], token, size) == 0) return;
    if (w->ntokens < sizeof w->tokens / sizeof w->tokens[0]) {
        w->tokens[w->ntokens] = malloc(size ? size : 1);
        if (!w->tokens[w->ntokens]) die("remember", "a dictionary entry");
        memcpy(w->tokens[w->ntokens], token, size);
        w->tokenlen[w->ntokens++] = size;
    }
    if (!w->dict) {
        w->dict = fopen(w->dictpath, "w");
        if (!w->dict) die("create", w->dictpath);
    }
    fputc('"', w->dict);
    for (i = 0; i < size; i++) {
        if (p[i] >= 0x20 && p[i] < 0x7F && p[i] != '"' && p[i] != '\\')
            fputc(p[i], w->dict);
        else
            fprintf(w->dict, "\\x%02X", p[i]);
    }
    fputs("\"\n", w->dict);
}

void fuzz_dict_str(fuzz_seeds_t *w, const char *token) { fuzz_dict(w, token, strlen(token)); }

/* Runs every file written to w->dir through the target once. */
static void replay_seeds(const fuzz_seeds_t *w)
{
    char path[4400];
    struct dirent *e;
    DIR *d = opendir(w->dir);
    if (!d) die("list", w->dir);
    while ((e = readdir(d)) != NULL) {
        FILE *f;
        long n = 0;
        uint8_t *buf;
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", w->dir, e->d_name);
        f = fopen(path, "rb");
        if (!f || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0)
            die("read", path);
        buf = malloc((size_t)n + 1);
        if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) die("read", path);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, (size_t)n);
        free(buf);
    }
    closedir(d);
}

/* -patina_seeds=DIR: write the seeds and the dictionary, replay the seeds,
 * exit. Any other arguments are libFuzzer's. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const char flag[] = "-patina_seeds=";
    int i;
    for (i = 1; i < *argc; i++) {
        const char *a = (*argv)[i];
        fuzz_seeds_t w;
        if (strncmp(a, flag, sizeof flag - 1) != 0) continue;
        memset(&w, 0, sizeof w);
        a += sizeof flag - 1;
        if (mkdir(a, 0777) != 0 && errno != EEXIST) die("create", a);
        snprintf(w.dir, sizeof w.dir, "%s/seeds", a);
        snprintf(w.dictpath, sizeof w.dictpath, "%s/dict", a);
        if (mkdir(w.dir, 0777) != 0 && errno != EEXIST) die("create", w.dir);
        fuzz_write_seeds(&w);
        if (w.dict && fclose(w.dict) != 0) die("write", w.dictpath);
        while (w.ntokens) free(w.tokens[--w.ntokens]);
        replay_seeds(&w);
        printf("%s: %d seeds in %s%s\n", basename((*argv)[0]), w.count, w.dir,
               w.dict ? " (and a dictionary)" : "");
        exit(0);
    }
    return 0;
}

/* ----------------------------------------------------------- test pattern */

void fuzz_pattern(void *out, int w, int h, int channels, int depth, uint32_t seed)
{
    uint32_t s = seed * 2654435761u + 1;
    int x, y, c;
    for (y = 0; y < h; y++)
        for (x = 0; x < w; x++)
            for (c = 0; c < channels; c++) {
                size_t i = ((size_t)y * (size_t)w + (size_t)x) * (size_t)channels + (size_t)c;
                unsigned v;
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                v = (unsigned)((x * 255) / (w > 1 ? w - 1 : 1) * (c + 1) + (y * 255) / (h > 1 ? h - 1 : 1) +
                               (s & 15)) & 255u;
                if (depth == 16)
                    ((uint16_t *)out)[i] = (uint16_t)(v * 257u ^ (s >> 20));
                else
                    ((uint8_t *)out)[i] = (uint8_t)v;
            }
}

/* ---------------------------------------------------------- image harness */

static const char *const kName = "fuzz-input";

static int known_status(patina_status s) { return s >= PATINA_OK && s <= PATINA_DONE; }

void fuzz_image_input(const uint8_t *data, size_t size)
{
    patina_limits_t lim = {FUZZ_MAX_PIXELS, 0};
    patina_image_info_t info;
    patina_image_t img;
    patina_status p, d;

    p = patina_image_probe(&info, data, size, kName);
    FUZZ_CHECK(known_status(p) && p != PATINA_E_INTERNAL && p != PATINA_DONE, "probe returned %d", (int)p);
    if (p == PATINA_OK) {
        FUZZ_CHECK(info.width > 0 && info.height > 0, "probe gave %dx%d", info.width, info.height);
        FUZZ_CHECK(info.format == patina_format_sniff(data, size), "probe format %d, sniff %d",
                   (int)info.format, (int)patina_format_sniff(data, size));
        FUZZ_CHECK(info.channels >= 1 && info.channels <= 4, "probe gave %d channels", info.channels);
        FUZZ_CHECK(info.bit_depth == 1 || info.bit_depth == 2 || info.bit_depth == 4 ||
                       info.bit_depth == 8 || info.bit_depth == 16,
                   "probe gave bit depth %d", info.bit_depth);
    } else {
        FUZZ_CHECK(info.width == 0 && info.height == 0, "failed probe left %dx%d", info.width,
                   info.height);
        FUZZ_CHECK(strstr(patina_last_error(), kName) != NULL, "probe error does not name the input");
    }

    d = patina_image_decode(&img, data, size, &lim, kName);
    FUZZ_CHECK(known_status(d) && d != PATINA_E_INTERNAL && d != PATINA_DONE && d != PATINA_E_NOMEM,
               "decode returned %d", (int)d);
    if (d == PATINA_OK) {
        uint8_t *grey;
        FUZZ_CHECK(p == PATINA_OK, "decode succeeded where probe failed (%d)", (int)p);
        FUZZ_CHECK(img.width == info.width && img.height == info.height, "decode %dx%d, probe %dx%d",
                   img.width, img.height, info.width, info.height);
        FUZZ_CHECK((uint64_t)img.width * (uint64_t)img.height <= FUZZ_MAX_PIXELS,
                   "decoded %dx%d over the pixel limit", img.width, img.height);
        FUZZ_CHECK(img.data && img.owned && img.stride == 3 * (size_t)img.width, "malformed image");
        /* Reads every pixel (ASan checks the buffer is what it claims). */
        grey = malloc((size_t)img.width * (size_t)img.height);
        FUZZ_CHECK(grey && patina_image_to_grey(grey, &img) == PATINA_OK, "to_grey failed");
        free(grey);
        patina_image_release(&img);
    } else {
        FUZZ_CHECK(!img.data && img.width == 0 && img.height == 0, "failed decode left an image");
        FUZZ_CHECK(strstr(patina_last_error(), kName) != NULL, "decode error does not name the input: '%s'",
                   patina_last_error());
        if (p != PATINA_OK)
            FUZZ_CHECK(d == p, "probe said %d, decode %d", (int)p, (int)d);
        else if ((uint64_t)info.width * (uint64_t)info.height > FUZZ_MAX_PIXELS)
            FUZZ_CHECK(d == PATINA_E_LIMIT, "over the limit, decode said %d", (int)d);
    }
}

void fuzz_image_seed(fuzz_seeds_t *w, const char *name, const void *data, size_t size,
                     patina_format fmt, int valid)
{
    patina_image_t img;
    patina_status s;
    if (patina_format_sniff(data, size) != fmt) {
        fprintf(stderr, "fuzz seeds: '%s' does not sniff as %s\n", name, patina_format_name(fmt));
        exit(1);
    }
    s = patina_image_decode(&img, data, size, NULL, name);
    if (valid && s != PATINA_OK) {
        fprintf(stderr, "fuzz seeds: '%s' does not decode: %s\n", name, patina_last_error());
        exit(1);
    }
    patina_image_release(&img);
    fuzz_seed(w, name, data, size);
}
