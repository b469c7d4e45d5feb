/* Tests of video input (include/patina/video.h, src/image/video.c,
 * src/algo/yuv.h, the video path of src/pipeline/index.c): the Y'CbCr
 * conversion against its definition, frame keys, container sniffing, and
 * patina_index_files on small videos this test encodes itself with
 * libavcodec (libx264 when Debian's FFmpeg has it, else MPEG-4 part 2):
 * two scenes with a cut at a known frame, indexed with every frame, every
 * N frames, every S seconds and --shots; a frame decoded here with
 * libavcodec and converted by the definition finds its own record at
 * distance 0; a stream on standard input; a truncated file fails alone and
 * keeps its good frames. Exits 77 (skipped) in a build without video. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "algo/yuv.h"
#include "patina/patina.h"
#include "patina/video.h"
#include "testutil.h"

#if PATINA_HAVE_VIDEO
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/pixdesc.h>

#include "videoutil.h"

static char *tmp;
static patina_context_t *ctx;
static patina_extractor_t *ex;

enum { W = 96, H = 64, FPS = 10, NFRAMES = 30, CUT = 17 };

/* ------------------------------------------------------ the definition */

/* Every (matrix, range) factor is round(65536 x its coefficient). */
static void test_yuv_coefs(void **state)
{
    static const double kr[3] = {0.299, 0.2126, 0.2627}, kb[3] = {0.114, 0.0722, 0.0593};
    (void)state;
    for (int m = 0; m < 3; m++)
        for (int full = 0; full < 2; full++) {
            patina_yuv_coefs_t c = patina_yuv_coefs((patina_yuv_matrix)m, full);
            double ys = full ? 1.0 : 255.0 / 219.0, cs = full ? 1.0 : 255.0 / 224.0, kg = 1 - kr[m] - kb[m];
            assert_int_equal(c.y, (int32_t)lround(65536 * ys));
            assert_int_equal(c.rv, (int32_t)lround(65536 * cs * 2 * (1 - kr[m])));
            assert_int_equal(c.gu, (int32_t)lround(65536 * cs * 2 * kb[m] * (1 - kb[m]) / kg));
            assert_int_equal(c.gv, (int32_t)lround(65536 * cs * 2 * kr[m] * (1 - kr[m]) / kg));
            assert_int_equal(c.bu, (int32_t)lround(65536 * cs * 2 * (1 - kb[m])));
            assert_int_equal(c.yoff, full ? 0 : 16);
        }
}

/* The integer rule on all 2^24 inputs of each (matrix, range): equal to
 * the stated formula evaluated in int64 (floor((sum + 2^15) / 2^16),
 * clamped), and within 1 of the real-number conversion (the factors'
 * rounding); grey in full range is the identity, limited range maps 16 to
 * 0 and 235 to 255. */
static void test_yuv_definition(void **state)
{
    static const double kr[3] = {0.299, 0.2126, 0.2627}, kb[3] = {0.114, 0.0722, 0.0593};
    (void)state;
    for (int m = 0; m < 3; m++)
        for (int full = 0; full < 2; full++) {
            patina_yuv_coefs_t c = patina_yuv_coefs((patina_yuv_matrix)m, full);
            double ys = full ? 1.0 : 255.0 / 219.0, cs = full ? 1.0 : 255.0 / 224.0, kg = 1 - kr[m] - kb[m];
            int worst = 0;
            for (int y = 0; y < 256; y++)
                for (int u = 0; u < 256; u++)
                    for (int v = 0; v < 256; v++) {
                        uint8_t o[3];
                        int64_t yy = (int64_t)c.y * (y - c.yoff), acc[3];
                        double Y = ys * (y - c.yoff), U = cs * (u - 128), V = cs * (v - 128), real[3];
                        patina_yuv_to_rgb(&c, (unsigned)y, (unsigned)u, (unsigned)v, o);
                        acc[0] = yy + (int64_t)c.rv * (v - 128);
                        acc[1] = yy - (int64_t)c.gu * (u - 128) - (int64_t)c.gv * (v - 128);
                        acc[2] = yy + (int64_t)c.bu * (u - 128);
                        real[0] = Y + 2 * (1 - kr[m]) * V;
                        real[1] = Y - 2 * kb[m] * (1 - kb[m]) / kg * U - 2 * kr[m] * (1 - kr[m]) / kg * V;
                        real[2] = Y + 2 * (1 - kb[m]) * U;
                        for (int k = 0; k < 3; k++) {
                            int64_t q = (acc[k] + 32768) >= 0 ? (acc[k] + 32768) / 65536 : -1;
                            double r = real[k] < 0 ? 0 : real[k] > 255 ? 255 : real[k];
                            int d = abs((int)o[k] - (int)lround(r));
                            if (q < 0) q = 0;
                            if (q > 255) q = 255;
                            if (o[k] != q) fail_msg("m %d full %d (%d,%d,%d) channel %d: %d, formula %" PRId64, m,
                                                    full, y, u, v, k, o[k], q);
                            if (d > worst) worst = d;
                        }
                    }
            assert_true(worst <= 1);
            for (int y = 0; y < 256; y++) {
                uint8_t o[3];
                patina_yuv_to_rgb(&c, (unsigned)y, 128, 128, o);
                if (full) assert_int_equal(o[0], y);
                assert_true(o[0] == o[1] && o[1] == o[2]);
            }
            if (!full) {
                uint8_t o[3];
                patina_yuv_to_rgb(&c, 16, 128, 128, o);
                assert_int_equal(o[0], 0);
                patina_yuv_to_rgb(&c, 235, 128, 128, o);
                assert_int_equal(o[0], 255);
            }
        }
}

static void test_keys(void **state)
{
    char buf[64];
    int64_t t, f;
    size_t len;
    patina_video_frame_t fr = {.frame = 370, .t_ms = 12345};
    (void)state;
    TU_OK(patina_video_key(buf, sizeof buf, "a/clip.mp4", &fr));
    assert_string_equal(buf, "a/clip.mp4#t=12.345&f=370");
    assert_int_equal(patina_video_key_parse(buf, &t, &f, &len), 1);
    assert_true(t == 12345 && f == 370 && len == 10);
    fr.t_ms = -1500;
    fr.frame = 0;
    TU_OK(patina_video_key(buf, sizeof buf, "x", &fr));
    assert_string_equal(buf, "x#t=-1.500&f=0");
    assert_int_equal(patina_video_key_parse(buf, &t, &f, NULL), 1);
    assert_true(t == -1500 && f == 0);
    fr.t_ms = 7;
    TU_OK(patina_video_key(buf, sizeof buf, "x", &fr));
    assert_string_equal(buf, "x#t=0.007&f=0");
    assert_int_equal(patina_video_key(buf, 8, "x", &fr), PATINA_E_LIMIT);
    assert_int_equal(patina_video_key_parse("photo.jpg", NULL, NULL, NULL), 0);
    assert_int_equal(patina_video_key_parse("a#t=1.5&f=2", NULL, NULL, NULL), 0);
    assert_int_equal(patina_video_key_parse("a#t=1.500&f=", NULL, NULL, NULL), 0);
    assert_int_equal(patina_video_key_parse("a#t=1.500&f=2x", NULL, NULL, NULL), 0);
}

/* --------------------------------------------------------- test videos */

/* Frame f's planes: scene 0 (f < CUT) a dark reddish ramp, scene 1 a
 * bright greenish-blue one, each with a small box moving 2 pixels a frame. */
static void draw(AVFrame *fr, int f)
{
    int scene = f >= CUT;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            int box = x >= (2 * f) % (W - 8) && x < (2 * f) % (W - 8) + 8 && y >= 20 && y < 28;
            fr->data[0][y * fr->linesize[0] + x] =
                (uint8_t)(box ? 220 : scene ? 150 + (y % 30) : 50 + (x * 2 % 40));
        }
    for (int y = 0; y < H / 2; y++)
        for (int x = 0; x < W / 2; x++) {
            fr->data[1][y * fr->linesize[1] + x] = (uint8_t)(scene ? 170 : 110);
            fr->data[2][y * fr->linesize[2] + x] = (uint8_t)(scene ? 90 : 160);
        }
}

/* Writes NFRAMES frames at FPS into `path` with muxer `mux`; the stream
 * says BT.601 (SMPTE 170M) limited range. */
static void write_video(const char *path, const char *mux)
{
    const tv_spec_t spec = {mux, NULL, W, H, FPS, 10, NFRAMES, AV_PIX_FMT_YUV420P, AVCOL_SPC_SMPTE170M, draw};
    assert_int_equal(tv_write_video(path, &spec), 0);
}

/* Frame `want` of `path` decoded here with libavcodec and converted by the
 * definition (BT.601 limited, chroma replicated) into img. */
static void decode_frame(patina_image_t *img, const char *path, int want)
{
    AVFormatContext *fc = NULL;
    const AVCodec *codec = NULL;
    AVCodecContext *c;
    AVPacket *pkt = av_packet_alloc();
    AVFrame *fr = av_frame_alloc();
    patina_yuv_coefs_t k = patina_yuv_coefs(PATINA_YUV_BT601, 0);
    int s, n = 0, got = 0, eof = 0;
    assert_true(avformat_open_input(&fc, path, NULL, NULL) >= 0);
    assert_true(avformat_find_stream_info(fc, NULL) >= 0);
    s = av_find_best_stream(fc, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    assert_true(s >= 0);
    c = avcodec_alloc_context3(codec);
    avcodec_parameters_to_context(c, fc->streams[s]->codecpar);
    assert_true(avcodec_open2(c, codec, NULL) >= 0);
    while (!got) {
        int r = avcodec_receive_frame(c, fr);
        if (r == 0) {
            if (n++ == want) {
                TU_OK(patina_image_init(img, fr->width, fr->height));
                assert_int_equal(fr->format, AV_PIX_FMT_YUV420P);
                for (int y = 0; y < fr->height; y++)
                    for (int x = 0; x < fr->width; x++)
                        patina_yuv_to_rgb(&k, fr->data[0][y * fr->linesize[0] + x],
                                          fr->data[1][(y / 2) * fr->linesize[1] + x / 2],
                                          fr->data[2][(y / 2) * fr->linesize[2] + x / 2],
                                          img->data + (size_t)y * img->stride + 3 * (size_t)x);
                got = 1;
            }
            continue;
        }
        assert_true(r == AVERROR(EAGAIN) && !eof);
        if (av_read_frame(fc, pkt) < 0) {
            avcodec_send_packet(c, NULL);
            eof = 1;
            continue;
        }
        if (pkt->stream_index == s) avcodec_send_packet(c, pkt);
        av_packet_unref(pkt);
    }
    av_frame_free(&fr);
    av_packet_free(&pkt);
    avcodec_free_context(&c);
    avformat_close_input(&fc);
}

/* ------------------------------------------------------------ layouts */

/* A NUT file of rawvideo frames (2) of pixel format pf, w x h, random samples (the seed), no colour
 * metadata: the reader's defaults apply (BT.601 under 720 rows; limited range, full for grey; the J
 * formats are left out: NUT keeps no range, their frames come back as the plain ones). The frames are kept in *frames for the expected pixels. Returns 0 when FFmpeg cannot
 * write that format so, or reads it back as another. */
static int write_raw(const char *path, enum AVPixelFormat pf, int w, int h, unsigned seed, AVFrame **frames)
{
    AVFormatContext *oc = NULL;
    const AVCodec *codec = avcodec_find_encoder(AV_CODEC_ID_RAWVIDEO);
    AVCodecContext *c;
    AVStream *st;
    int ok = 0;
    assert_non_null(codec);
    assert_true(avformat_alloc_output_context2(&oc, NULL, "nut", path) >= 0);
    st = avformat_new_stream(oc, NULL);
    c = avcodec_alloc_context3(codec);
    assert_true(st && c);
    c->width = w;
    c->height = h;
    c->time_base = (AVRational){1, FPS};
    c->framerate = (AVRational){FPS, 1};
    c->pix_fmt = pf;
    if (avcodec_open2(c, codec, NULL) >= 0 && avcodec_parameters_from_context(st->codecpar, c) >= 0) {
        st->time_base = c->time_base;
        if (avio_open(&oc->pb, path, AVIO_FLAG_WRITE) >= 0) {
            if (avformat_write_header(oc, NULL) >= 0) {
                ok = 1;
                for (int f = 0; f < 2; f++) {
                    AVFrame *fr = av_frame_alloc();
                    fr->format = pf;
                    fr->width = w;
                    fr->height = h;
                    assert_true(av_frame_get_buffer(fr, 0) >= 0);
                    for (int pl = 0; pl < 4 && fr->data[pl]; pl++) {
                        const int rows = pl && pl < 3 && !(av_pix_fmt_desc_get(pf)->flags & AV_PIX_FMT_FLAG_PAL)
                                             ? AV_CEIL_RSHIFT(h, av_pix_fmt_desc_get(pf)->log2_chroma_h)
                                             : h;
                        for (int r = 0; r < rows; r++)
                            for (int x = 0; x < fr->linesize[pl]; x++)
                                fr->data[pl][(size_t)r * fr->linesize[pl] + x] =
                                    (uint8_t)((seed = seed * 1103515245u + 12345u) >> 16);
                    }
                    fr->pts = f;
                    assert_int_equal(tv_send(oc, c, st, fr), 0);
                    frames[f] = fr;
                }
                assert_int_equal(tv_send(oc, c, st, NULL), 0);
                assert_true(av_write_trailer(oc) >= 0);
            }
            avio_closep(&oc->pb);
        }
    }
    avcodec_free_context(&c);
    avformat_free_context(oc);
    if (ok) { /* read back as that format (NUT stores a FourCC; some formats share one) */
        AVFormatContext *ic = NULL;
        ok = avformat_open_input(&ic, path, NULL, NULL) >= 0 && avformat_find_stream_info(ic, NULL) >= 0 &&
             ic->nb_streams == 1 && ic->streams[0]->codecpar->format == pf;
        avformat_close_input(&ic);
        if (!ok)
            for (int f = 0; f < 2; f++) av_frame_free(&frames[f]);
    }
    return ok;
}

/* The RGB of frame fr by the definition: each component read with
 * libavutil's av_read_image_line2 (whatever the layout), chroma replicated. */
static void expected_rgb(uint8_t *out, const AVFrame *fr)
{
    const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(fr->format);
    const int w = fr->width, grey = d->nb_components < 3;
    const patina_yuv_coefs_t k = patina_yuv_coefs(PATINA_YUV_BT601, grey);
    uint16_t *ly = malloc(sizeof *ly * (size_t)w), *lu = malloc(sizeof *lu * (size_t)w), *lv = malloc(sizeof *lv * (size_t)w);
    const uint8_t *data[4] = {fr->data[0], fr->data[1], fr->data[2], fr->data[3]};
    assert_true(ly && lu && lv);
    for (int y = 0; y < fr->height; y++) {
        const int cw = AV_CEIL_RSHIFT(w, d->log2_chroma_w), yc = y >> d->log2_chroma_h;
        av_read_image_line2(ly, data, fr->linesize, d, 0, y, 0, w, 0, 2);
        if (!grey) {
            av_read_image_line2(lu, data, fr->linesize, d, 0, yc, 1, cw, 0, 2);
            av_read_image_line2(lv, data, fr->linesize, d, 0, yc, 2, cw, 0, 2);
        }
        for (int x = 0; x < w; x++)
            patina_yuv_to_rgb(&k, ly[x], grey ? 128 : lu[x >> d->log2_chroma_w], grey ? 128 : lv[x >> d->log2_chroma_w],
                              out + 3 * ((size_t)y * w + x));
    }
    free(ly);
    free(lu);
    free(lv);
}

/* Every 8-bit Y'CbCr layout the reader converts itself (planar, semi-planar
 * with either chroma order, packed, grey; chroma subsampled 1, 2 and 4
 * times across and 1 or 2 times down), at sizes around the conversion's
 * blocks of 128 pixels with odd widths and heights: the frames patina_video_next
 * gives equal the definition byte for byte. */
static void test_layouts(void **state)
{
    static const enum AVPixelFormat fmts[] = {
        AV_PIX_FMT_YUV420P, AV_PIX_FMT_NV12,     AV_PIX_FMT_NV21,    AV_PIX_FMT_YUV422P,
        AV_PIX_FMT_YUV444P, AV_PIX_FMT_YUV440P, AV_PIX_FMT_YUV411P,
        AV_PIX_FMT_YUYV422, AV_PIX_FMT_UYVY422,  AV_PIX_FMT_GRAY8,
    };
    static const int sizes[][2] = {{259, 7}, {128, 2}, {33, 5}, {1, 1}};
    int written = 0, core = 0;
    (void)state;
    for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++)
        for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
            const int w = sizes[z][0], h = sizes[z][1];
            const char *path = tu_path(tmp, "layout_%s_%dx%d.nut", av_get_pix_fmt_name(fmts[f]), w, h);
            AVFrame *frames[2] = {NULL, NULL};
            patina_video_opts_t o;
            patina_video_t *v = NULL;
            uint8_t *want = malloc(3 * (size_t)w * h);
            assert_non_null(want);
            if (!write_raw(path, fmts[f], w, h, 1000u + (unsigned)(f * 16 + z), frames)) {
                printf("  %s %dx%d: not kept by rawvideo in NUT (not checked)\n",
                       av_get_pix_fmt_name(fmts[f]), w, h);
                free(want);
                continue;
            }
            written++;
            core += fmts[f] == AV_PIX_FMT_YUV420P || fmts[f] == AV_PIX_FMT_NV12 || fmts[f] == AV_PIX_FMT_YUV422P ||
                    fmts[f] == AV_PIX_FMT_YUV444P;
            patina_video_opts_init(&o);
            TU_OK(patina_video_open(&v, path, &o));
            for (int i = 0; i < 2; i++) {
                patina_image_t img;
                patina_video_frame_t info;
                size_t bad = 0;
                TU_OK(patina_video_next(v, &img, &info));
                assert_int_equal(img.width, w);
                assert_int_equal(img.height, h);
                expected_rgb(want, frames[i]);
                for (int y = 0; y < h; y++)
                    bad += memcmp(img.data + (size_t)y * img.stride, want + 3 * (size_t)y * w, 3 * (size_t)w) != 0;
                if (bad)
                    printf("  %s %dx%d frame %d: %zu rows differ from the definition\n",
                           av_get_pix_fmt_name(fmts[f]), w, h, i, bad);
                assert_int_equal(bad, 0);
                patina_image_release(&img);
                av_frame_free(&frames[i]);
            }
            patina_video_free(v);
            free(want);
        }
    printf("  %d (format, size) files checked\n", written);
    assert_true(core >= 4 * 4); /* yuv420p, nv12, yuv422p and yuv444p at every size at least */
}

/* ------------------------------------------------------------ indexing */

typedef struct reports {
    int errors;
    char last[PATINA_ERROR_MAX];
    char path[1024];
} reports_t;

static void on_error(void *user, const char *path, patina_status s, const char *msg)
{
    reports_t *r = user;
    (void)s;
    r->errors++;
    snprintf(r->last, sizeof r->last, "%s", msg);
    snprintf(r->path, sizeof r->path, "%s", path);
}

/* Indexes paths into a new collection `name` with the sampling given;
 * returns the collection (open) and fills stats and reports. */
static patina_collection_t *index_into(const char *name, const char *const *paths, size_t n, uint64_t every_frames,
                                       uint64_t every_ms, double shots, patina_index_stats_t *st, reports_t *rep)
{
    patina_collection_t *c;
    patina_index_opts_t o;
    const char *dir = tu_path(tmp, "%s", name);
    memset(rep, 0, sizeof *rep);
    TU_OK(patina_collection_open(&c, dir, PATINA_OPEN_CREATE, 0));
    patina_index_opts_init(&o);
    o.video_every_frames = every_frames;
    o.video_every_ms = every_ms;
    o.video_shots = shots;
    o.on_error = on_error;
    o.user = rep;
    o.batch = 7; /* several batches per video */
    o.device = PATINA_DEVICE_CPU;
    TU_OK(patina_index_files(ctx, c, ex, paths, n, &o, st));
    return c;
}

/* The frame numbers stored under keys "<file>#t=...&f=N" in id order,
 * checking each key's time is N / FPS seconds. */
static size_t frames_of(patina_collection_t *c, const char *file, int64_t *out, size_t max)
{
    uint64_t cur = 0;
    patina_record_t rec;
    size_t n = 0;
    while (patina_collection_next(c, &cur, &rec) == PATINA_OK) {
        int64_t t, f;
        size_t len;
        if (patina_video_key_parse(rec.key, &t, &f, &len) && len == strlen(file) && !strncmp(rec.key, file, len)) {
            if (t != f * 1000 / FPS) fail_msg("key %s: time %" PRId64 " ms, frame %" PRId64, rec.key, t, f);
            assert_true(n < max);
            out[n++] = f;
            assert_int_equal(rec.width, W);
            assert_int_equal(rec.height, H);
        }
        patina_record_release(&rec);
    }
    return n;
}

static void expect_frames(patina_collection_t *c, const char *file, const int64_t *want, size_t nwant)
{
    int64_t got[NFRAMES + 1];
    size_t n = frames_of(c, file, got, NFRAMES + 1);
    if (n != nwant) fail_msg("%s: %zu frames stored, want %zu", file, n, nwant);
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) fail_msg("%s: frame #%zu is %" PRId64 ", want %" PRId64, file, i, got[i], want[i]);
}

static void test_index_modes(void **state)
{
    const char *mkv = strdup(tu_path(tmp, "clip.mkv")), *mp4 = strdup(tu_path(tmp, "clip.mp4"));
    int64_t all[NFRAMES], every5[] = {0, 5, 10, 15, 20, 25}, every1s[] = {0, 10, 20}, shots[] = {0, CUT};
    patina_index_stats_t st;
    reports_t rep;
    patina_collection_t *c;
    (void)state;
    write_video(mkv, "matroska");
    write_video(mp4, "mp4");
    for (int i = 0; i < NFRAMES; i++) all[i] = i;
    {
        const char *paths[] = {mkv, mp4};
        c = index_into("all.patina", paths, 2, 0, 0, 0, &st, &rep);
        if (rep.errors) fail_msg("%s", rep.last);
        /* the MP4 presents one frame less: the mov muxer's edit list for a
         * stream with B-frames ends before the last one (FFmpeg's own
         * tools show 29 as well) */
        assert_true(st.files == 2 && st.videos == 2 && st.frames == 2 * NFRAMES - 1 && st.indexed == st.frames);
        expect_frames(c, "clip.mkv", all, NFRAMES);
        expect_frames(c, "clip.mp4", all, NFRAMES - 1);
        patina_collection_close(c);
        /* again: every frame is stored with the same pixels, so skipped */
        c = index_into("all.patina", paths, 2, 0, 0, 0, &st, &rep);
        assert_true(rep.errors == 0 && st.indexed == 0 && st.skipped == 2 * NFRAMES - 1 &&
                    st.frames_skipped == 2 * NFRAMES - 1);
        patina_collection_close(c);
    }
    c = index_into("every5.patina", &mkv, 1, 5, 0, 0, &st, &rep);
    assert_int_equal(rep.errors, 0);
    expect_frames(c, "clip.mkv", every5, 6);
    patina_collection_close(c);
    c = index_into("every1s.patina", &mp4, 1, 0, 1000, 0, &st, &rep);
    assert_int_equal(rep.errors, 0);
    expect_frames(c, "clip.mp4", every1s, 3);
    patina_collection_close(c);
    c = index_into("shots.patina", &mp4, 1, 0, 0, 0.3, &st, &rep);
    assert_int_equal(rep.errors, 0);
    expect_frames(c, "clip.mp4", shots, 2);
    patina_collection_close(c);
    /* every second and shots: one look a second, the cut seen at frame 20 */
    {
        int64_t want[] = {0, 20};
        c = index_into("both.patina", &mp4, 1, 0, 1000, 0.3, &st, &rep);
        expect_frames(c, "clip.mp4", want, 2);
        patina_collection_close(c);
    }
    free((void *)mkv);
    free((void *)mp4);
}

/* A frame decoded and converted here has the descriptor stored for its
 * key, and a search finds that record first at distance 0. */
static void test_self_search(void **state)
{
    const char *mp4 = strdup(tu_path(tmp, "self.mp4"));
    patina_index_stats_t st;
    reports_t rep;
    patina_collection_t *c;
    patina_image_t img;
    patina_table_t *t;
    patina_table_query_t q;
    patina_table_results_t res;
    patina_status one;
    unsigned char *d = malloc(patina_extractor_bytes(ex));
    (void)state;
    write_video(mp4, "mp4");
    c = index_into("self.patina", &mp4, 1, 0, 0, 0, &st, &rep);
    assert_int_equal(rep.errors, 0);
    for (int f = 3; f < NFRAMES; f += 11) {
        char key[64];
        decode_frame(&img, mp4, f);
        TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, d, &img, 1, &one));
        TU_OK(one);
        TU_OK(patina_table_open(&t, ctx, c, patina_extractor_spec(ex), NULL));
        patina_table_query_init(&q);
        q.k = NFRAMES; /* frames of one scene may share a descriptor: all at distance 0, ties by id */
        q.keys = 1;
        q.device = PATINA_DEVICE_CPU;
        TU_OK(patina_table_search(t, d, 1, &q, &res));
        snprintf(key, sizeof key, "self.mp4#t=%d.%03d&f=%d", f / FPS, f % FPS * (1000 / FPS), f);
        {
            size_t h;
            for (h = 0; h < res.offsets[1] && res.hits[h].distance == 0; h++)
                if (!strcmp(res.keys[h], key)) break;
            if (h == res.offsets[1] || res.hits[h].distance != 0) fail_msg("%s is not among the hits at distance 0", key);
        }
        patina_table_results_release(&res);
        patina_table_free(t);
        patina_image_release(&img);
    }
    /* and the public reader gives the same pixels */
    {
        patina_video_t *v;
        patina_video_frame_t info;
        patina_image_t a, b;
        TU_OK(patina_video_open(&v, mp4, NULL));
        for (int f = 0; f <= 5; f++) {
            TU_OK(patina_video_next(v, &a, &info));
            if (f < 5) patina_image_release(&a);
        }
        assert_true(info.frame == 5 && info.t_ms == 500);
        decode_frame(&b, mp4, 5);
        for (int y = 0; y < H; y++) assert_memory_equal(a.data + y * a.stride, b.data + y * b.stride, 3 * W);
        patina_image_release(&a);
        patina_image_release(&b);
        patina_video_free(v);
    }
    patina_collection_close(c);
    free(d);
    free((void *)mp4);
}

/* Standard input becomes a pipe from a child process that writes file
 * `path` into it: at once, or (stall > 0) its first half, nothing for
 * `stall` seconds, then the rest. *saved: the old standard input, for
 * stdin_restore. */
static pid_t stdin_feed(const char *path, double stall, int *saved)
{
    int fds[2];
    pid_t pid;
    assert_int_equal(pipe(fds), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        size_t size, off = 0, cut;
        char *data = tu_read_file(path, &size);
        close(fds[0]);
        cut = stall > 0 ? size / 2 : size;
        while (data && off < size) {
            ssize_t w;
            if (off == cut && stall > 0) usleep((useconds_t)(stall * 1e6));
            w = write(fds[1], data + off, (off < cut ? cut : size) - off);
            if (w <= 0) _exit(1);
            off += (size_t)w;
        }
        _exit(0);
    }
    close(fds[1]);
    *saved = dup(0);
    assert_true(dup2(fds[0], 0) == 0);
    close(fds[0]);
    return pid;
}

static void stdin_restore(int saved, pid_t pid)
{
    dup2(saved, 0);
    close(saved);
    waitpid(pid, NULL, 0);
}

/* "-": a Matroska stream through a pipe on standard input, keyed by
 * stdin_key. */
static void test_stdin(void **state)
{
    const char *mkv = strdup(tu_path(tmp, "pipe.mkv"));
    int saved;
    pid_t pid;
    patina_collection_t *c;
    patina_index_opts_t o;
    patina_index_stats_t st;
    reports_t rep = {0};
    const char *dash = "-";
    int64_t all[NFRAMES];
    (void)state;
    for (int i = 0; i < NFRAMES; i++) all[i] = i;
    write_video(mkv, "matroska");
    pid = stdin_feed(mkv, 0, &saved);
    TU_OK(patina_collection_open(&c, tu_path(tmp, "stdin.patina"), PATINA_OPEN_CREATE, 0));
    patina_index_opts_init(&o);
    o.stdin_key = "camera1";
    o.on_error = on_error;
    o.user = &rep;
    o.device = PATINA_DEVICE_CPU;
    TU_OK(patina_index_files(ctx, c, ex, &dash, 1, &o, &st));
    stdin_restore(saved, pid);
    if (rep.errors) fail_msg("%s", rep.last);
    expect_frames(c, "camera1", all, NFRAMES);
    patina_collection_close(c);
    free((void *)mkv);
}

/* A live stream on standard input: half of a 200-frame stream arrives, then
 * nothing for STALL seconds, then the rest. With video_max_delay_ms = 200
 * the frames before the stall are stored while it lasts (the batch of 256
 * closed by its delay, not by its size); with a delay longer than the
 * stall nothing is stored before the rest arrives. Every frame is stored
 * in both runs. */
enum { LIVE_FRAMES = 200 };
#define LIVE_STALL 2.0

typedef struct live {
    reports_t rep; /* first: on_error's user */
    double t0, first; /* first: seconds from t0 to the first batch stored, -1 before */
} live_t;

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void on_live_progress(void *user, const patina_index_stats_t *s)
{
    live_t *l = user;
    if (l->first < 0 && s->indexed > 0) l->first = mono_now() - l->t0;
}

static double live_run(const char *mkv, const char *name, uint64_t delay_ms)
{
    int saved;
    pid_t pid;
    patina_collection_t *c;
    patina_index_opts_t o;
    patina_index_stats_t st;
    live_t l;
    const char *dash = "-";
    int64_t got[LIVE_FRAMES + 1];
    size_t n;
    memset(&l, 0, sizeof l);
    l.first = -1;
    pid = stdin_feed(mkv, LIVE_STALL, &saved);
    TU_OK(patina_collection_open(&c, tu_path(tmp, "%s", name), PATINA_OPEN_CREATE, 0));
    patina_index_opts_init(&o);
    o.stdin_key = "live";
    o.on_error = on_error;
    o.progress = on_live_progress;
    o.user = &l;
    o.device = PATINA_DEVICE_CPU;
    o.video_max_delay_ms = delay_ms;
    l.t0 = mono_now();
    TU_OK(patina_index_files(ctx, c, ex, &dash, 1, &o, &st));
    stdin_restore(saved, pid);
    if (l.rep.errors) fail_msg("%s", l.rep.last);
    n = frames_of(c, "live", got, LIVE_FRAMES + 1);
    assert_int_equal(n, LIVE_FRAMES);
    for (size_t i = 0; i < n; i++) assert_int_equal(got[i], (int64_t)i);
    patina_collection_close(c);
    print_message("live stream, max delay %" PRIu64 " ms: first batch stored after %.3f s (stall %.1f s)\n",
                  delay_ms, l.first, LIVE_STALL);
    return l.first;
}

static void test_live(void **state)
{
    const char *mkv = strdup(tu_path(tmp, "live.mkv"));
    const tv_spec_t spec = {"matroska", NULL, W, H, FPS, 10, LIVE_FRAMES, AV_PIX_FMT_YUV420P, AVCOL_SPC_SMPTE170M, draw};
    patina_index_opts_t o;
    patina_index_stats_t st;
    (void)state;
    assert_int_equal(tv_write_video(mkv, &spec), 0);
    assert_true(live_run(mkv, "live-short.patina", 200) < 0.75 * LIVE_STALL);
    assert_true(live_run(mkv, "live-long.patina", 3600000) >= 0.9 * LIVE_STALL);
    /* the option's bounds: the library's table */
    patina_index_opts_init(&o);
    assert_true(o.video_max_delay_ms == 1000);
    o.video_max_delay_ms = 3600001;
    assert_int_equal(patina_index_files(ctx, NULL, ex, NULL, 0, &o, &st), PATINA_E_INVALID);
    free((void *)mkv);
}

/* A truncated MP4 (its index first, its data cut) and a truncated Matroska
 * file each fail alone, naming the file, with their good frames stored;
 * the image and the intact video around them are indexed. */
static void test_truncated(void **state)
{
    const char *good = strdup(tu_path(tmp, "good.mkv")), *cut = strdup(tu_path(tmp, "cut.mp4"));
    const char *cutmkv = strdup(tu_path(tmp, "cut.mkv")), *jpg = strdup(tu_path(tmp, "photo.jpg"));
    const char *paths[] = {cut, jpg, cutmkv, good};
    patina_index_stats_t st;
    reports_t rep;
    patina_collection_t *c;
    size_t size;
    char *data;
    int64_t got[NFRAMES + 1];
    size_t n;
    (void)state;
    write_video(good, "matroska");
    write_video(cutmkv, "matroska");
    write_video(cut, "mp4");
    data = tu_read_file(cut, &size);
    assert_non_null(data);
    assert_int_equal(tu_write_file(cut, data, size * 6 / 10), 0);
    free(data);
    data = tu_read_file(cutmkv, &size);
    assert_int_equal(tu_write_file(cutmkv, data, size / 2), 0);
    free(data);
    tu_write_jpeg(jpg, 64, 48, 1, 90, 7);
    c = index_into("cut.patina", paths, 4, 0, 0, 0, &st, &rep);
    print_message("truncated: %d errors, last: %s\n", rep.errors, rep.last);
    /* both cut files fail, each reported once, naming it */
    assert_int_equal(rep.errors, 2);
    assert_int_equal(st.failed, 2);
    assert_int_equal(st.videos, 1);
    assert_string_equal(rep.path, cutmkv);
    assert_non_null(strstr(rep.last, "cut.mkv"));
    assert_true(st.files == 4);
    n = frames_of(c, "good.mkv", got, NFRAMES + 1);
    assert_int_equal(n, NFRAMES);
    n = frames_of(c, "cut.mkv", got, NFRAMES + 1);
    print_message("cut.mkv: %zu frames kept\n", n);
    assert_true(n > 0 && n < NFRAMES);
    {
        patina_record_t rec;
        char *key;
        TU_OK(patina_collection_key(c, jpg, &key));
        TU_OK(patina_collection_get_by_key(c, key, &rec));
        patina_record_release(&rec);
        free(key);
    }
    /* the MP4 cut: its index is at the end, gone: no frame */
    assert_int_equal(frames_of(c, "cut.mp4", got, NFRAMES + 1), 0);
    patina_collection_close(c);
    free((void *)good);
    free((void *)cut);
    free((void *)cutmkv);
    free((void *)jpg);
}

/* The reader's own errors: a file that is not a video, a missing file,
 * bad options. */
static void test_reader_errors(void **state)
{
    patina_video_t *v = NULL;
    patina_video_opts_t o;
    const char *junk = strdup(tu_path(tmp, "junk.mkv"));
    static const unsigned char ebml_junk[64] = {0x1a, 0x45, 0xdf, 0xa3, 0xff, 0xff, 0xff};
    (void)state;
    assert_int_equal(patina_video_open(&v, tu_path(tmp, "missing.mp4"), NULL), PATINA_E_NOTFOUND);
    assert_null(v);
    assert_non_null(strstr(patina_last_error(), "missing.mp4"));
    assert_int_equal(tu_write_file(junk, ebml_junk, sizeof ebml_junk), 0);
    assert_true(patina_video_sniff(ebml_junk, sizeof ebml_junk));
    assert_true(patina_video_open(&v, junk, NULL) != PATINA_OK);
    assert_null(v);
    assert_non_null(strstr(patina_last_error(), "junk.mkv"));
    patina_video_opts_init(&o);
    o.every_frames = 2;
    o.every_ms = 100;
    assert_int_equal(patina_video_open(&v, junk, &o), PATINA_E_INVALID);
    free((void *)junk);
}

/* The decoder choice: the words, bad values, NVDEC on a device that does
 * not exist (PATINA_E_UNAVAILABLE naming NVDEC), AUTO falling back to the
 * CPU with the same frames. (NVDEC itself: tests/gpu/test_video_gpu.c.) */
static void test_decoder_choice(void **state)
{
    const char *mkv = strdup(tu_path(tmp, "dec.mkv"));
    patina_video_decoder d = PATINA_VIDEO_DECODER_CPU;
    patina_video_t *v = NULL, *w = NULL;
    patina_video_opts_t o;
    patina_image_t a, b;
    patina_video_frame_t ia, ib;
    patina_status sa, sb;
    int n = 0;
    (void)state;
    TU_OK(patina_video_decoder_parse(&d, "nvdec"));
    assert_int_equal(d, PATINA_VIDEO_DECODER_NVDEC);
    TU_OK(patina_video_decoder_parse(&d, "auto"));
    assert_int_equal(d, PATINA_VIDEO_DECODER_AUTO);
    TU_OK(patina_video_decoder_parse(&d, "cpu"));
    assert_int_equal(d, PATINA_VIDEO_DECODER_CPU);
    assert_int_equal(patina_video_decoder_parse(&d, "cuvid"), PATINA_E_INVALID);
    assert_non_null(strstr(patina_last_error(), "cuvid"));
    write_video(mkv, "matroska");
    patina_video_opts_init(&o);
    assert_int_equal(o.decoder, PATINA_VIDEO_DECODER_CPU);
    o.decoder = (patina_video_decoder)7;
    assert_int_equal(patina_video_open(&v, mkv, &o), PATINA_E_INVALID);
    o.decoder = PATINA_VIDEO_DECODER_NVDEC;
    o.gpu = -1;
    assert_int_equal(patina_video_open(&v, mkv, &o), PATINA_E_INVALID);
    o.gpu = 999; /* no such device, here or on a GPU machine */
    assert_int_equal(patina_video_open(&v, mkv, &o), PATINA_E_UNAVAILABLE);
    assert_null(v);
    assert_non_null(strstr(patina_last_error(), "NVDEC"));
    assert_non_null(strstr(patina_last_error(), "dec.mkv"));
    o.decoder = PATINA_VIDEO_DECODER_AUTO;
    TU_OK(patina_video_open(&v, mkv, &o));
    TU_OK(patina_video_open(&w, mkv, NULL));
    assert_string_equal(patina_video_decoder_used(w), "libavcodec");
    for (;;) {
        sa = patina_video_next(v, &a, &ia);
        sb = patina_video_next(w, &b, &ib);
        assert_int_equal(sa, sb);
        if (sa != PATINA_OK) break;
        assert_int_equal(ia.frame, ib.frame);
        assert_int_equal(ia.t_ms, ib.t_ms);
        assert_int_equal(a.width, b.width);
        for (int y = 0; y < a.height; y++)
            assert_memory_equal(a.data + (size_t)y * a.stride, b.data + (size_t)y * b.stride, 3 * (size_t)a.width);
        patina_image_release(&a);
        patina_image_release(&b);
        n++;
    }
    assert_int_equal(sa, PATINA_DONE);
    assert_int_equal(n, NFRAMES);
    assert_string_equal(patina_video_decoder_used(v), "libavcodec");
    assert_null(patina_video_decoder_used(NULL));
    patina_video_free(v);
    patina_video_free(w);
    free((void *)mkv);
}

/* The command line: patina index takes the video with --every, and a
 * search names the frame's time (table and JSON). */
static void test_cli(void **state)
{
    const char *mkv = strdup(tu_path(tmp, "cli.mkv")), *jpg = strdup(tu_path(tmp, "q.jpg"));
    const char *coll = strdup(tu_path(tmp, "cli.patina"));
    char *out = NULL, *err = NULL;
    (void)state;
    write_video(mkv, "matroska");
    tu_write_jpeg(jpg, W, H, 1, 90, 3);
    {
        const char *argv[] = {PATINA_CLI, "index", coll, mkv, "--every", "1.5s", "-q", NULL};
        int rc = tu_exec(&out, &err, 0, 120, argv);
        if (rc != 0) fail_msg("index: %d: %s", rc, err ? err : "");
        free(out);
        free(err);
    }
    {
        const char *argv[] = {PATINA_CLI, "search", coll, jpg, "-k", "2", NULL};
        assert_int_equal(tu_exec(&out, &err, 0, 120, argv), 0);
        print_message("%s", out);
        assert_non_null(strstr(out, "cli.mkv#t=0.000&f=0  (0:00:00.000)"));
        assert_non_null(strstr(out, "cli.mkv#t=1.500&f=15  (0:00:01.500)"));
        free(out);
        free(err);
    }
    {
        const char *argv[] = {PATINA_CLI, "search", coll, jpg, "-k", "2", "--format", "json", NULL};
        assert_int_equal(tu_exec(&out, &err, 0, 120, argv), 0);
        assert_non_null(strstr(out, "\"key\":\"cli.mkv#t=1.500&f=15\",\"video\":{\"file\":\"cli.mkv\",\"t\":1.500,\"frame\":15}"));
        free(out);
        free(err);
    }
    /* --video-decoder: a word it does not know is a usage error; auto
     * indexes the same frames (the CPU's without a GPU); nvdec without a
     * GPU fails the file, naming NVDEC (with one it indexes) */
    {
        const char *coll2 = strdup(tu_path(tmp, "cli2.patina")), *coll3 = strdup(tu_path(tmp, "cli3.patina"));
        const char *bad[] = {PATINA_CLI, "index", coll2, mkv, "--video-decoder", "cuvid", "-q", NULL};
        const char *autod[] = {PATINA_CLI, "index", coll2, mkv, "--every", "1.5s", "--video-decoder", "auto", "-q",
                               NULL};
        const char *search[] = {PATINA_CLI, "search", coll2, jpg, "-k", "2", NULL};
        const char *nv[] = {PATINA_CLI, "index", coll3, mkv, "--video-decoder", "nvdec", "-q", NULL};
        int rc;
        assert_int_equal(tu_exec(&out, &err, 0, 120, bad), 2);
        assert_non_null(strstr(err, "cuvid"));
        free(out);
        free(err);
        rc = tu_exec(&out, &err, 0, 120, autod);
        if (rc != 0) fail_msg("index --video-decoder auto: %d: %s", rc, err ? err : "");
        free(out);
        free(err);
        assert_int_equal(tu_exec(&out, &err, 0, 120, search), 0);
        assert_non_null(strstr(out, "cli.mkv#t=1.500&f=15  (0:00:01.500)"));
        free(out);
        free(err);
        rc = tu_exec(&out, &err, 0, 120, nv);
        if (rc != 0 && !(rc == 1 && err && strstr(err, "NVDEC")))
            fail_msg("index --video-decoder nvdec: %d: %s", rc, err ? err : "");
        free(out);
        free(err);
        free((void *)coll2);
        free((void *)coll3);
    }
    /* --max-delay: seconds within the library's bounds; a wrong value is a
     * usage error naming it, before anything is indexed */
    {
        const char *coll4 = strdup(tu_path(tmp, "cli4.patina"));
        static const char *const badd[] = {"0s", "3601s", "0.5", "1.0005s", "-1s", "soon"};
        for (size_t i = 0; i < sizeof badd / sizeof badd[0]; i++) {
            const char *argv[] = {PATINA_CLI, "index", coll4, mkv, "--max-delay", badd[i], "-q", NULL};
            assert_int_equal(tu_exec(&out, &err, 0, 120, argv), 2);
            assert_non_null(strstr(err, "--max-delay"));
            assert_non_null(strstr(err, badd[i]));
            free(out);
            free(err);
        }
        {
            const char *argv[] = {PATINA_CLI, "index", coll4, mkv, "--max-delay", "0.25s", "--every", "1.5s", "-q", NULL};
            const char *search[] = {PATINA_CLI, "search", coll4, jpg, "-k", "2", NULL};
            assert_int_equal(tu_exec(&out, &err, 0, 120, argv), 0);
            free(out);
            free(err);
            assert_int_equal(tu_exec(&out, &err, 0, 120, search), 0);
            assert_non_null(strstr(out, "cli.mkv#t=1.500&f=15  (0:00:01.500)"));
            free(out);
            free(err);
        }
        free((void *)coll4);
    }
    free((void *)mkv);
    free((void *)jpg);
    free((void *)coll);
}

static void test_sniff(void **state)
{
    unsigned char ts[400] = {0};
    (void)state;
    assert_true(patina_video_sniff("\x00\x00\x00\x20" "ftypisom", 12));
    assert_true(patina_video_sniff("RIFF\x10\x00\x00\x00" "AVI LIST", 16));
    assert_true(patina_video_sniff("\x1a\x45\xdf\xa3", 4));
    assert_true(patina_video_sniff("YUV4MPEG2 W4 H4", 15));
    assert_false(patina_video_sniff("RIFF\x10\x00\x00\x00WEBPVP8 ", 16));
    assert_false(patina_video_sniff("\xff\xd8\xff\xe0", 4));
    ts[0] = ts[188] = ts[376] = 0x47;
    assert_true(patina_video_sniff(ts, sizeof ts));
    ts[376] = 0;
    assert_false(patina_video_sniff(ts, sizeof ts));
}

static int setup(void **state)
{
    patina_context_opts_t copts;
    (void)state;
    tmp = tu_tempdir("video");
    if (tmp) {
        char *real = realpath(tmp, NULL);
        if (real) {
            free(tmp);
            tmp = real;
        }
    }
    patina_context_opts_init(&copts);
    copts.threads = 2;
    if (!tmp || patina_context_new(&ctx, &copts) != PATINA_OK || patina_extractor_new(&ex, "cedd") != PATINA_OK)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    patina_extractor_free(ex);
    patina_context_free(ctx);
    if (tmp) tu_remove_tree(tmp);
    free(tmp);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_yuv_coefs),   cmocka_unit_test(test_yuv_definition), cmocka_unit_test(test_keys),
        cmocka_unit_test(test_sniff),       cmocka_unit_test(test_reader_errors),  cmocka_unit_test(test_index_modes),
        cmocka_unit_test(test_self_search), cmocka_unit_test(test_stdin),          cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_cli),         cmocka_unit_test(test_layouts),
        cmocka_unit_test(test_decoder_choice), cmocka_unit_test(test_live),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

#else

int main(void)
{
    printf("SKIPPED: this build reads no video (PATINA_VIDEO found no FFmpeg libraries)\n");
    return 77;
}

#endif
