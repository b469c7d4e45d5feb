/* Test videos encoded with libavcodec, for the tests that read video
 * (test_video, gpu/test_video_gpu). Built only with FFmpeg's libraries
 * (PATINA_HAVE_VIDEO). */
#ifndef PATINA_TESTS_VIDEOUTIL_H
#define PATINA_TESTS_VIDEOUTIL_H

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>

/* Fills frame f's planes (the frame has the spec's format and size). */
typedef void (*tv_draw_fn)(AVFrame *fr, int f);

typedef struct tv_spec {
    const char *mux;         /* "matroska", "mp4", ... */
    const char *encoder;     /* NULL: libx264 when libavcodec has it, else MPEG-4 part 2 */
    int w, h, fps, gop, frames;
    enum AVPixelFormat pf;
    enum AVColorSpace space; /* limited range always */
    tv_draw_fn draw;
} tv_spec_t;

/* Encodes s->frames frames (B-frames on, the fastest preset) into path:
 * 0, or -1 when the encoder is missing or a step fails. */
int tv_write_video(const char *path, const tv_spec_t *s);

/* Sends fr (NULL: flush) to encoder c and writes the packets it gives to
 * stream st of oc: 0, or a negative AVERROR. */
int tv_send(AVFormatContext *oc, AVCodecContext *c, AVStream *st, AVFrame *fr);

#endif
