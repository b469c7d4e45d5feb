/* Lab: the colour conversion of real decoded frames alone (patina__vframe_rgb_into), ns per pixel,
 * the frames read first (the decoder out of the timing). Links the static library:
 *   gcc -O2 -I include -I src lab/video/convert_bench.c build-cpu/libpatina.a \
 *       $(pkg-config --libs libavformat libavcodec libswscale libavutil) <the library's other deps> \
 *       -o /tmp/convert_bench && /tmp/convert_bench VIDEO [FRAMES] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "image/video.h"
#include "patina/patina.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    patina_video_opts_t o;
    patina_video_t *v = NULL;
    patina__vframe_t *fr[64];
    patina_video_frame_t info;
    patina_image_t img;
    int n = 0, want = argc > 2 ? atoi(argv[2]) : 30;
    double best = 1e9, total = 0;
    if (argc < 2) return 2;
    if (want > 64) want = 64;
    patina_video_opts_init(&o);
    if (patina_video_open(&v, argv[1], &o) != PATINA_OK) {
        fprintf(stderr, "%s\n", patina_last_error());
        return 1;
    }
    while (n < want && patina__video_next_raw(v, &fr[n], &info) == PATINA_OK) n++;
    if (!n || patina__vframe_rgb(&img, fr[0]) != PATINA_OK) return 1;
    for (int rep = 0; rep < 3; rep++)
        for (int i = 0; i < n; i++) {
            double t0 = now(), dt;
            patina__vframe_rgb_into(&img, fr[i]);
            dt = now() - t0;
            total += dt;
            if (dt < best) best = dt;
        }
    printf("%d frames %dx%d: conversion best %.2f ms (%.2f ns/px), mean %.2f ms\n", n, img.width, img.height,
           best * 1e3, best * 1e9 / ((double)img.width * img.height), total * 1e3 / (3 * n));
    for (int i = 0; i < n; i++) patina__vframe_free(&fr[i]);
    patina_image_release(&img);
    patina_video_free(v);
    return 0;
}
