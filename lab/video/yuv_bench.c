/* Lab: Y'CbCr 4:2:0 planar -> RGB, the generic row loop of src/image/video.c
 * (any layout: step/offset per component, chroma replicated) against a loop
 * for planar frames (step 1) written so that gcc vectorises it. Same bytes
 * (checked), ns per pixel on a 1920x1080 frame.
 *   gcc -O3 -I src lab/video/yuv_bench.c -o /tmp/yuv_bench && /tmp/yuv_bench */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "algo/yuv.h"

enum { W = 1920, H = 1080 };

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* the generic loop, as video.c's yuv_rows runs it on yuv420p */
static void generic(uint8_t *dst, const uint8_t *Y, const uint8_t *U, const uint8_t *V, int w, int h,
                    const patina_yuv_coefs_t *k)
{
    const patina_yuv_coefs_t c = *k;
    const int sx = 1, per = 2, sy = 1, su = 1, sv = 1;
    for (int y = 0; y < h; y++) {
        const uint8_t *py = Y + (size_t)y * w, *pu = U + (size_t)(y >> 1) * (w / 2), *pv = V + (size_t)(y >> 1) * (w / 2);
        uint8_t *o = dst + (size_t)y * 3 * w;
        int32_t t[3];
        for (int x = 0; x < w; x += per) {
            int e = x + per < w ? x + per : w, i;
            patina_yuv_chroma(&c, pu[(x >> sx) * su], pv[(x >> sx) * sv], t);
            for (i = x; i < e; i++, o += 3) patina_yuv_pixel(&c, py[i * sy], t, o);
        }
    }
}

/* planar: per row, the chroma terms of each sample, then per pixel; blocks of 64 pixels through
 * int32 scratch so that each loop is a plain vector loop */
static inline uint8_t clamp8(int32_t acc)
{
    int32_t r = acc + 32768;
    r = r < 0 ? 0 : r;
    r >>= 16;
    return (uint8_t)(r > 255 ? 255 : r);
}

static void planar(uint8_t *dst, const uint8_t *Y, const uint8_t *U, const uint8_t *V, int w, int h,
                   const patina_yuv_coefs_t *k)
{
    const patina_yuv_coefs_t c = *k;
    enum { B = 64 };
    for (int y = 0; y < h; y++) {
        const uint8_t *py = Y + (size_t)y * w, *pu = U + (size_t)(y >> 1) * (w / 2), *pv = V + (size_t)(y >> 1) * (w / 2);
        uint8_t *o = dst + (size_t)y * 3 * w;
        for (int x0 = 0; x0 < w; x0 += B) {
            const int n = w - x0 < B ? w - x0 : B;
            int32_t tr[B], tg[B], tb[B];
            uint8_t r[B], g[B], b[B];
            for (int i = 0; i < n; i++) { /* chroma of pixel x0 + i (sample (x0 + i) >> 1) */
                const int32_t u = (int32_t)pu[(x0 + i) >> 1] - 128, v = (int32_t)pv[(x0 + i) >> 1] - 128;
                tr[i] = c.rv * v;
                tg[i] = -c.gu * u - c.gv * v;
                tb[i] = c.bu * u;
            }
            for (int i = 0; i < n; i++) {
                const int32_t yy = c.y * ((int32_t)py[x0 + i] - c.yoff);
                r[i] = clamp8(yy + tr[i]);
                g[i] = clamp8(yy + tg[i]);
                b[i] = clamp8(yy + tb[i]);
            }
            for (int i = 0; i < n; i++) {
                o[3 * (x0 + i)] = r[i];
                o[3 * (x0 + i) + 1] = g[i];
                o[3 * (x0 + i) + 2] = b[i];
            }
        }
    }
}

/* planar2: the chroma terms once per chroma sample (a contiguous loop), the pixels in pairs that
 * share a sample, then the three planes interleaved into RGB */
#include "algo/clones.h"
PATINA_CLONES static void planar2(uint8_t *dst, const uint8_t *Y, const uint8_t *U, const uint8_t *V, int w, int h,
                                  const patina_yuv_coefs_t *k)
{
    const patina_yuv_coefs_t c = *k;
    enum { B = 128 };
    for (int y = 0; y < h; y++) {
        const uint8_t *py = Y + (size_t)y * w, *pu = U + (size_t)(y >> 1) * (w / 2), *pv = V + (size_t)(y >> 1) * (w / 2);
        uint8_t *o = dst + (size_t)y * 3 * w;
        for (int x0 = 0; x0 < w; x0 += B) {
            const int n = w - x0 < B ? w - x0 : B, nc = (n + 1) / 2;
            int32_t tr[B / 2], tg[B / 2], tb[B / 2];
            uint8_t r[B], g[B], b[B];
            const uint8_t *cu = pu + x0 / 2, *cv = pv + x0 / 2;
            for (int j = 0; j < nc; j++) {
                const int32_t u = (int32_t)cu[j] - 128, v = (int32_t)cv[j] - 128;
                tr[j] = c.rv * v;
                tg[j] = -c.gu * u - c.gv * v;
                tb[j] = c.bu * u;
            }
            if (n == B) {
                for (int j = 0; j < B / 2; j++) {
                    const int32_t y0 = c.y * ((int32_t)py[x0 + 2 * j] - c.yoff);
                    const int32_t y1 = c.y * ((int32_t)py[x0 + 2 * j + 1] - c.yoff);
                    r[2 * j] = clamp8(y0 + tr[j]);
                    r[2 * j + 1] = clamp8(y1 + tr[j]);
                    g[2 * j] = clamp8(y0 + tg[j]);
                    g[2 * j + 1] = clamp8(y1 + tg[j]);
                    b[2 * j] = clamp8(y0 + tb[j]);
                    b[2 * j + 1] = clamp8(y1 + tb[j]);
                }
            } else {
                for (int i = 0; i < n; i++) {
                    const int32_t yy = c.y * ((int32_t)py[x0 + i] - c.yoff);
                    r[i] = clamp8(yy + tr[i >> 1]);
                    g[i] = clamp8(yy + tg[i >> 1]);
                    b[i] = clamp8(yy + tb[i >> 1]);
                }
            }
            uint8_t *oo = o + 3 * (size_t)x0;
            for (int i = 0; i < n; i++) {
                oo[3 * i] = r[i];
                oo[3 * i + 1] = g[i];
                oo[3 * i + 2] = b[i];
            }
        }
    }
}

int main(void)
{
    uint8_t *Y = malloc(W * H), *U = malloc(W * H / 4), *V = malloc(W * H / 4);
    uint8_t *a = malloc(3 * W * H), *b = malloc(3 * W * H);
    unsigned s = 12345;
    for (int i = 0; i < W * H; i++) Y[i] = (uint8_t)((s = s * 1103515245u + 12345u) >> 16);
    for (int i = 0; i < W * H / 4; i++) {
        U[i] = (uint8_t)((s = s * 1103515245u + 12345u) >> 16);
        V[i] = (uint8_t)((s = s * 1103515245u + 12345u) >> 16);
    }
    for (int full = 0; full < 2; full++) {
        patina_yuv_coefs_t k = patina_yuv_coefs(PATINA_YUV_BT709, full);
        double best_g = 1e9, best_p = 1e9, best_q = 1e9;
        uint8_t *q = malloc(3 * W * H);
        for (int rep = 0; rep < 10; rep++) {
            double t0 = now();
            generic(a, Y, U, V, W, H, &k);
            double t1 = now();
            planar(b, Y, U, V, W, H, &k);
            double t2 = now();
            if (t1 - t0 < best_g) best_g = t1 - t0;
            if (t2 - t1 < best_p) best_p = t2 - t1;
            planar2(q, Y, U, V, W, H, &k);
            double t3 = now();
            if (t3 - t2 < best_q) best_q = t3 - t2;
        }
        printf("planar2 %.2f ns/px %s\n", best_q * 1e9 / (W * H), memcmp(a, q, 3 * (size_t)W * H) ? "DIFFERENT" : "same bytes");
        free(q);
        printf("%s range: generic %.2f ns/px (%.2f ms), planar %.2f ns/px (%.2f ms), %s\n", full ? "full" : "limited",
               best_g * 1e9 / (W * H), best_g * 1e3, best_p * 1e9 / (W * H), best_p * 1e3,
               memcmp(a, b, 3 * (size_t)W * H) ? "DIFFERENT" : "same bytes");
    }
    return 0;
}
