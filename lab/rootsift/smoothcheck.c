/* Host emulation of k_smooth's tiling (src/gpu/rootsift.cu): every block and
 * thread of the kernel's two passes, the same index arithmetic and the same
 * float operations in the same order, against the plain two-pass convolution
 * (k_conv_v then k_conv_h, VLFeat's order), bit for bit, on random images of
 * many sizes (1x1 up, not multiples of the tile) and every width 1..16.
 * Unwritten shared values are poisoned, so a read of one shows. Checks the
 * kernel's indexing without a GPU; keep its constants in step with the kernel's.
 *   gcc -O2 -ffp-contract=off lab/rootsift/smoothcheck.c -o /tmp/smoothcheck && /tmp/smoothcheck
 * Prints the values that differ (0: the tiling is the reference's sum). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define RS_STX 64
#define RS_STY 32
#define RS_SRY 16
#define RS_SRX 8
#define RS_STH 256
static int rs_vpitch(int W) { return RS_STX - RS_SRX + 4 * ((RS_SRX + 2 * W + 3) / 4); }
static void ref(float *dst, const float *src, int w, int h, const float *filt, int W)
{
    float *tmp = malloc(sizeof(float) * w * h);
    const float *f = filt + 2 * W;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            float acc = 0.0f;
            for (int k = 0; k <= 2 * W; k++) {
                int p = y - W + k;
                p = p < 0 ? 0 : p > h - 1 ? h - 1 : p;
                acc = acc + src[(size_t)p * w + x] * f[-k];
            }
            tmp[(size_t)y * w + x] = acc;
        }
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            float acc = 0.0f;
            for (int k = 0; k <= 2 * W; k++) {
                int p = x - W + k;
                p = p < 0 ? 0 : p > w - 1 ? w - 1 : p;
                acc = acc + tmp[(size_t)y * w + p] * f[-k];
            }
            dst[(size_t)y * w + x] = acc;
        }
    free(tmp);
}
static void emu(float *dst, const float *src, int w, int h, const float *filt, int W)
{
    const int NT = 2 * W + 1, NCOL = RS_STX + 2 * W, VP = rs_vpitch(W), NV = RS_SRX + 2 * W, NV4 = (NV + 3) / 4;
    float *vert = malloc(sizeof(float) * RS_STY * VP), tap[64];
    for (int k = 0; k < NT; k++) tap[k] = filt[2 * W - k];
    for (int by = 0; by * RS_STY < h; by++)
        for (int bx = 0; bx * RS_STX < w; bx++) {
            const int x0 = bx * RS_STX, y0 = by * RS_STY;
            for (int i = 0; i < RS_STY * VP; i++) vert[i] = 1e30f; /* unwritten: poison */
            for (int t = 0; t < RS_STH; t++)
                for (int e = t; e < (RS_STY / RS_SRY) * NCOL; e += RS_STH) {
                    const int chunk = e / NCOL, cx = e - chunk * NCOL, r0 = y0 + chunk * RS_SRY;
                    if (r0 >= h) continue;
                    int px = x0 - W + cx;
                    px = px < 0 ? 0 : px > w - 1 ? w - 1 : px;
                    const float *col = src + px;
                    float acc[RS_SRY];
                    for (int j = 0; j < RS_SRY; j++) acc[j] = 0.0f;
                    for (int i = 0; i < RS_SRY + 2 * W; i++) {
                        int py = r0 - W + i;
                        py = py < 0 ? 0 : py > h - 1 ? h - 1 : py;
                        const float v = col[(size_t)py * w];
                        for (int j = 0; j < RS_SRY; j++) {
                            const int k = i - j;
                            if (k >= 0 && k < NT) acc[j] = acc[j] + v * tap[k];
                        }
                    }
                    for (int j = 0; j < RS_SRY; j++) vert[(chunk * RS_SRY + j) * VP + cx] = acc[j];
                }
            for (int t = 0; t < RS_STH; t++) {
                const int ry = t / (RS_STX / RS_SRX), lx0 = (t % (RS_STX / RS_SRX)) * RS_SRX;
                const int y = y0 + ry, xs = x0 + lx0;
                if (y >= h || xs >= w) continue;
                if ((ry * VP + lx0) % 4) abort();
                if (ry * VP + lx0 + 4 * NV4 > RS_STY * VP) abort();
                float v[80], acc[RS_SRX];
                memcpy(v, vert + ry * VP + lx0, sizeof(float) * 4 * NV4);
                for (int j = 0; j < RS_SRX; j++) acc[j] = 0.0f;
                for (int i = 0; i < NV; i++)
                    for (int j = 0; j < RS_SRX; j++) {
                        const int k = i - j;
                        if (k >= 0 && k < NT) acc[j] = acc[j] + v[i] * tap[k];
                    }
                for (int j = 0; j < RS_SRX; j++)
                    if (xs + j < w) dst[(size_t)y * w + xs + j] = acc[j];
            }
        }
    free(vert);
}
int main(void)
{
    static const int sz[][2] = {{1, 1}, {2, 3}, {7, 5}, {64, 32}, {65, 33}, {63, 31}, {100, 17}, {17, 100}, {128, 64}, {301, 217}, {256, 256}, {129, 97}};
    size_t bad = 0, tot = 0;
    srand(1);
    for (size_t s = 0; s < sizeof sz / sizeof sz[0]; s++)
        for (int W = 1; W <= 16; W++) {
            const int w = sz[s][0], h = sz[s][1];
            float *src = malloc(sizeof(float) * w * h), *a = malloc(sizeof(float) * w * h), *b = malloc(sizeof(float) * w * h), filt[33];
            double sum = 0;
            for (int i = 0; i < w * h; i++) src[i] = (float)(rand() % 256) + (float)rand() / RAND_MAX;
            for (int k = 0; k <= 2 * W; k++) sum += filt[k] = (float)rand() / RAND_MAX;
            for (int k = 0; k <= 2 * W; k++) filt[k] = (float)(filt[k] / sum);
            memset(b, 0xff, sizeof(float) * w * h);
            ref(a, src, w, h, filt, W);
            emu(b, src, w, h, filt, W);
            for (int i = 0; i < w * h; i++) bad += memcmp(&a[i], &b[i], 4) != 0;
            tot += (size_t)w * h;
            free(src); free(a); free(b);
        }
    printf("k_smooth emulation: %zu of %zu values differ\n", bad, tot);
    return bad != 0;
}
