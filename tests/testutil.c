/* Shared test helpers; see testutil.h. */
#define _GNU_SOURCE
#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

void tu_rng_seed(tu_rng_t *r, uint64_t seed) { r->s = seed * 0x9E3779B97F4A7C15ull + 1; }

uint64_t tu_rng_next(tu_rng_t *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 2685821657736338717ull;
}

uint32_t tu_rng_below(tu_rng_t *r, uint32_t n) { return (uint32_t)((tu_rng_next(r) >> 32) % n); }

static uint8_t clamp8(int v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

void tu_random_image(patina_image_t *img, int w, int h, int kind, tu_rng_t *r)
{
    int x, y, c;
    int base[3], gx[3], gy[3];
    if (patina_image_init(img, w, h) != PATINA_OK) fail_msg("image_init %dx%d failed", w, h);
    for (c = 0; c < 3; c++) {
        base[c] = (int)tu_rng_below(r, 256);
        gx[c] = (int)tu_rng_below(r, 9) - 4;
        gy[c] = (int)tu_rng_below(r, 9) - 4;
    }
    for (y = 0; y < h; y++)
        for (x = 0; x < w; x++) {
            uint8_t *p = img->data + (size_t)y * img->stride + 3 * (size_t)x;
            switch (kind) {
            case 0:
                for (c = 0; c < 3; c++) p[c] = (uint8_t)tu_rng_below(r, 256);
                break;
            case 1:
                for (c = 0; c < 3; c++)
                    p[c] = clamp8(base[c] + (gx[c] * x + gy[c] * y) / 4 + (int)tu_rng_below(r, 9) - 4);
                break;
            case 2: {
                int cell = ((x / 7) * 31 + (y / 5) * 17) % 5;
                for (c = 0; c < 3; c++) p[c] = clamp8(base[c] + cell * 50 * (c + 1) % 256);
                break;
            }
            default: {
                uint8_t v = clamp8(base[0] + (gx[0] * x + gy[0] * y) / 3 + (int)tu_rng_below(r, 5) - 2);
                p[0] = p[1] = p[2] = v;
            }
            }
        }
}

int tu_write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    if (size && fwrite(data, 1, size, f) != size) {
        fclose(f);
        return -1;
    }
    return fclose(f) == 0 ? 0 : -1;
}

char *tu_tempdir(const char *tag)
{
    const char *base = getenv("TMPDIR");
    char *path;
    if (!base || !*base) base = "/tmp";
    if (asprintf(&path, "%s/patina-%s-XXXXXX", base, tag) < 0) return NULL;
    if (!mkdtemp(path)) {
        free(path);
        return NULL;
    }
    return path;
}

void tu_remove_tree(const char *path)
{
    char *cmd;
    if (!path || asprintf(&cmd, "rm -rf '%s'", path) < 0) return;
    if (system(cmd) != 0) { /* best effort */ }
    free(cmd);
}

static int has_ext(const char *name, const char *exts)
{
    const char *dot = strrchr(name, '.');
    char buf[256];
    char *tok, *save = NULL;
    if (!dot) return 0;
    snprintf(buf, sizeof buf, "%s", exts);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        if (!strcasecmp(dot + 1, tok)) return 1;
    return 0;
}

static void walk(const char *dir, const char *exts, char ***out, size_t *n, size_t *cap)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d) return;
    while ((e = readdir(d))) {
        char *p;
        struct stat st;
        if (e->d_name[0] == '.') continue;
        if (asprintf(&p, "%s/%s", dir, e->d_name) < 0) continue;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            walk(p, exts, out, n, cap);
            free(p);
        } else if (S_ISREG(st.st_mode) && has_ext(e->d_name, exts)) {
            if (*n == *cap) {
                *cap = *cap ? *cap * 2 : 64;
                *out = realloc(*out, *cap * sizeof **out);
            }
            (*out)[(*n)++] = p;
        } else {
            free(p);
        }
    }
    closedir(d);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

size_t tu_list_files(const char *dir, const char *exts, char ***out)
{
    size_t n = 0, cap = 0;
    *out = NULL;
    walk(dir, exts, out, &n, &cap);
    if (n) qsort(*out, n, sizeof **out, cmp_str);
    return n;
}

void tu_free_list(char **list, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) free(list[i]);
    free(list);
}

int tu_run(char **out, const char *fmt, ...)
{
    char *cmd, *buf = NULL;
    size_t len = 0, cap = 0;
    FILE *p;
    int st;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&cmd, fmt, ap) < 0) {
        va_end(ap);
        return -1;
    }
    va_end(ap);
    p = popen(cmd, "r");
    free(cmd);
    if (!p) return -1;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            buf = realloc(buf, cap);
        }
        size_t got = fread(buf + len, 1, 4096, p);
        len += got;
        if (got == 0) break;
    }
    buf[len] = '\0';
    st = pclose(p);
    if (out) *out = buf; else free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void tu_require_gpu(void)
{
    if (patina_gpu_count() == 0) {
        printf("SKIPPED: no usable CUDA GPU on this machine (build info: %s); "
               "run scripts/device.sh on a GPU machine\n", patina_build_info());
        fflush(stdout);
        exit(77);
    }
}
