/* Helpers shared by the benchmarks and the kernel lab (tools/benchutil.h). */
#define _GNU_SOURCE
#include "benchutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "features/rootsift.h"
#include "patina/patina.h"

void bench_source_load(bench_source_t *src, const char *image_path)
{
    const char *dir = getenv("PATINA_SAMPLES");
    char cmd[1024], path[1024];
    patina_image_t img;
    FILE *p;
    memset(src, 0, sizeof *src);
    snprintf(src->name, sizeof src->name, "synthetic texture");
    if (image_path) {
        snprintf(path, sizeof path, "%s", image_path);
    } else {
        path[0] = '\0';
        snprintf(cmd, sizeof cmd,
                 "find '%s' -type f \\( -name '*.jpg' -o -name '*.png' \\) -printf '%%s %%p\\n' 2>/dev/null"
                 " | sort -k1,1nr -k2 | head -1 | cut -d' ' -f2-",
                 dir && *dir ? dir : "samples");
        if ((p = popen(cmd, "r"))) {
            if (fgets(path, sizeof path, p)) path[strcspn(path, "\n")] = '\0';
            pclose(p);
        }
    }
    if (*path && patina_image_load(&img, path, NULL) == PATINA_OK) {
        src->w = img.width;
        src->h = img.height;
        src->grey = malloc((size_t)src->w * (size_t)src->h);
        patina_image_to_grey(src->grey, &img);
        patina_image_release(&img);
        snprintf(src->name, sizeof src->name, "%s (%dx%d)", path, src->w, src->h);
        return;
    }
    src->w = src->h = 1024;
    src->grey = malloc(1024 * 1024);
    for (int y = 0; y < 1024; y++)
        for (int x = 0; x < 1024; x++)
            src->grey[y * 1024 + x] = (uint8_t)(128 + 60 * sin(x * 0.07) * cos(y * 0.05) +
                                                (int)((x * 2654435761u ^ y * 40503u) >> 27));
}

size_t bench_list_images(const char *dir, char ***out)
{
    char cmd[1100], path[4096];
    size_t n = 0, cap = 0;
    char **list = NULL;
    FILE *p;
    snprintf(cmd, sizeof cmd, "find '%s' -type f \\( -name '*.jpg' -o -name '*.png' \\) 2>/dev/null | LC_ALL=C sort",
             dir);
    *out = NULL;
    if (!(p = popen(cmd, "r"))) return 0;
    while (fgets(path, sizeof path, p)) {
        path[strcspn(path, "\n")] = '\0';
        if (n == cap) {
            char **t = realloc(list, (cap = cap ? 2 * cap : 64) * sizeof *list);
            if (!t) break;
            list = t;
        }
        if (!(list[n] = strdup(path))) break;
        n++;
    }
    pclose(p);
    *out = list;
    return n;
}

void bench_free_list(char **list, size_t n)
{
    for (size_t i = 0; i < n; i++) free(list[i]);
    free(list);
}

void bench_source_release(bench_source_t *src)
{
    free(src->grey);
    src->grey = NULL;
}

void bench_source_square(const bench_source_t *src, uint8_t *out, int s, int shift)
{
    const int sw = src->w, sh = src->h;
    int x0 = (sw - s) / 2 + shift, y0 = (sh - s) / 2 + shift / 2;
    for (int y = 0; y < s; y++)
        for (int x = 0; x < s; x++) {
            int sx = x0 + x, sy = y0 + y;
            sx = ((sx % (2 * sw)) + 2 * sw) % (2 * sw);
            sy = ((sy % (2 * sh)) + 2 * sh) % (2 * sh);
            if (sx >= sw) sx = 2 * sw - 1 - sx;
            if (sy >= sh) sy = 2 * sh - 1 - sy;
            out[(size_t)y * (size_t)s + (size_t)x] = src->grey[(size_t)sy * (size_t)sw + (size_t)sx];
        }
}

uint32_t bench_glcm_hash(uint32_t x, uint32_t y)
{
    uint32_t h = (x * 0x9E3779B1u) ^ (y * 0x85EBCA77u);
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    h ^= h >> 12;
    return h;
}

void bench_glcm_image(uint8_t *v, int n, int kind)
{
    for (int y = 0; y < n; y++)
        for (int x = 0; x < n; x++) {
            const uint32_t h = bench_glcm_hash((uint32_t)x, (uint32_t)y);
            int val;
            if (kind == 1) {
                val = (int)(h >> 24);
            } else {
                val = (int)(((uint64_t)x + 2u * (uint64_t)y) * 255u / (3u * (uint64_t)n)) + (int)(h >> 30) - 1;
                val = val < 0 ? 0 : val > 255 ? 255 : val;
            }
            v[(size_t)y * (size_t)n + (size_t)x] = (uint8_t)val;
        }
}

const char *bench_glcm_kind_name(int kind) { return kind ? "drastic" : "slow"; }

lbp_conf_t bench_lbp_conf(const char *what, int kind, int P, double R, int method, int mapping,
                          const char *grid, double th)
{
    lbp_opts_t o;
    lbp_conf_t c;
    memset(&o, 0, sizeof o);
    o.P = P;
    o.R = R;
    o.method = method;
    o.mapping = mapping;
    o.th = th;
    snprintf(o.grid, sizeof o.grid, "%s", grid);
    o.norm = LBP_NORM_COUNTS;
    o.vbins = 16;
    if (lbp_conf_resolve(&c, kind, &o, what) != PATINA_OK) {
        fprintf(stderr, "%s\n", patina_last_error());
        exit(1);
    }
    return c;
}

int bench_cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n ? v[n / 2] : 0.0;
}

/* ------------------------------------------------------------ rootsift rows */

uint32_t bench_rng_below(bench_rng_t *r, uint32_t n)
{
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return n ? (uint32_t)(r->s % n) : 0;
}

void bench_rootsift_row(uint8_t row[128], bench_rng_t *r)
{
    double v[128], s = 0;
    int k;
    for (k = 0; k < 128; k++) {
        v[k] = pow((double)(bench_rng_below(r, 1000) + 1), 3);
        s += v[k] * v[k];
    }
    for (k = 0; k < 128; k++) {
        double x = floor(512.0 * v[k] / sqrt(s) + 0.5);
        row[k] = (uint8_t)(x > 255 ? 255 : x);
    }
}

void bench_rootsift_record(unsigned char *rec, size_t m, size_t count, bench_rng_t *r)
{
    size_t i, k;
    memset(rec, 0, rs_record_bytes(m, RS_QUANT_U8));
    rs_put_header(rec, (uint32_t)count, (uint32_t)m, RS_QUANT_U8, 1.0f, 1024, 1024, 1024, 1024);
    for (i = 0; i < count; i++) {
        bench_rootsift_row(rec + RS_HEADER + i * 128, r);
        for (k = 0; k < 2; k++)
            rs_put_f32(rec + RS_HEADER + m * 128 + i * 16 + 4 * k, (float)bench_rng_below(r, 1024));
    }
}

char *bench_capture(const char *cmd)
{
    char *out = NULL, buf[4096];
    size_t len = 0, got;
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    while ((got = fread(buf, 1, sizeof buf, p)) > 0) {
        char *o = realloc(out, len + got + 1);
        if (!o) break;
        out = o;
        memcpy(out + len, buf, got);
        len += got;
        out[len] = '\0';
    }
    pclose(p);
    return out;
}
