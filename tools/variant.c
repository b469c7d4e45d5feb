/* patina-variant: writes a near-duplicate of an image for demos and tests:
 * crop a border, rescale, re-encode as JPEG. Deterministic.
 * usage: patina-variant IN OUT.jpg [--crop PCT] [--scale F] [--quality Q] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "patina/patina.h"

/* Bilinear resample of (h, w, 3) u8 src to dst (dh, dw). */
static void resize(uint8_t *dst, int dw, int dh, const uint8_t *src, int sw, int sh, size_t sstride)
{
    int x, y, c;
    for (y = 0; y < dh; y++) {
        double fy = ((double)y + 0.5) * sh / dh - 0.5;
        int y0 = fy < 0 ? 0 : (int)fy, y1 = y0 + 1 < sh ? y0 + 1 : sh - 1;
        double wy = fy < 0 ? 0 : fy - y0;
        for (x = 0; x < dw; x++) {
            double fx = ((double)x + 0.5) * sw / dw - 0.5;
            int x0 = fx < 0 ? 0 : (int)fx, x1 = x0 + 1 < sw ? x0 + 1 : sw - 1;
            double wx = fx < 0 ? 0 : fx - x0;
            for (c = 0; c < 3; c++) {
                double a = src[(size_t)y0 * sstride + 3 * (size_t)x0 + c];
                double b = src[(size_t)y0 * sstride + 3 * (size_t)x1 + c];
                double d = src[(size_t)y1 * sstride + 3 * (size_t)x0 + c];
                double e = src[(size_t)y1 * sstride + 3 * (size_t)x1 + c];
                double v = (a * (1 - wx) + b * wx) * (1 - wy) + (d * (1 - wx) + e * wx) * wy;
                dst[((size_t)y * dw + x) * 3 + c] = (uint8_t)(v + 0.5);
            }
        }
    }
}

int main(int argc, char **argv)
{
    double crop = 5, scale = 0.8;
    int quality = 80, i, cx, cy, cw, ch, dw, dh;
    patina_image_t img;
    uint8_t *out, *jpeg = NULL;
    unsigned long jsize = 0;
    tjhandle tj;
    FILE *f;
    if (argc < 3) {
        fprintf(stderr, "usage: patina-variant IN OUT.jpg [--crop PCT] [--scale F] [--quality Q]\n");
        return 2;
    }
    for (i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--crop")) crop = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--scale")) scale = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--quality")) quality = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "patina-variant: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (crop < 0 || crop >= 50 || scale <= 0 || scale > 4 || quality < 1 || quality > 100) {
        fprintf(stderr, "patina-variant: option out of range\n");
        return 2;
    }
    if (patina_image_load(&img, argv[1], NULL) != PATINA_OK) {
        fprintf(stderr, "patina-variant: %s\n", patina_last_error());
        return 1;
    }
    cx = (int)(img.width * crop / 100);
    cy = (int)(img.height * crop / 100);
    cw = img.width - 2 * cx;
    ch = img.height - 2 * cy;
    dw = (int)(cw * scale + 0.5);
    dh = (int)(ch * scale + 0.5);
    if (dw < 1) dw = 1;
    if (dh < 1) dh = 1;
    out = malloc((size_t)dw * (size_t)dh * 3);
    if (!out) return 1;
    resize(out, dw, dh, img.data + (size_t)cy * img.stride + 3 * (size_t)cx, cw, ch, img.stride);
    tj = tjInitCompress();
    if (!tj || tjCompress2(tj, out, dw, 0, dh, TJPF_RGB, &jpeg, &jsize, TJSAMP_420, quality,
                           TJFLAG_ACCURATEDCT) != 0) {
        fprintf(stderr, "patina-variant: JPEG encoding failed: %s\n", tjGetErrorStr());
        return 1;
    }
    f = fopen(argv[2], "wb");
    if (!f || fwrite(jpeg, 1, jsize, f) != jsize || fclose(f) != 0) {
        fprintf(stderr, "patina-variant: cannot write %s\n", argv[2]);
        return 1;
    }
    tjFree(jpeg);
    tjDestroy(tj);
    free(out);
    patina_image_release(&img);
    return 0;
}
