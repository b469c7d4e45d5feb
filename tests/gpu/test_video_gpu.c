/* Video frames decoded by the GPU's video decoders (NVDEC, through FFmpeg's
 * nvdec hwaccel: patina_video_opts_t.decoder) against libavcodec on the CPU.
 *
 * H.264 and HEVC decoding are exact by their standards, and the Y'CbCr to
 * RGB conversion is Patina's on both paths, so the test holds NVDEC to the
 * CPU's frames byte for byte: every frame's number, time and RGB pixels,
 * on videos of an odd size (the decoder's surfaces are larger than the
 * picture: the crop) and of 720 rows (BT.709 by default), with B-frames;
 * streams NVDEC mode leaves to libavcodec (H.264 4:4:4, 10-bit HEVC) come
 * from libavcodec, with the same frames; and
 * patina_index_files with video_decoder NVDEC stores the same records as
 * with the CPU decoder. Also: a device that does not exist is
 * PATINA_E_UNAVAILABLE for NVDEC and the CPU for AUTO.
 *
 * The videos are encoded here with libx264 / libx265 when the linked
 * libavcodec has them; an FFmpeg without encoders (the GPU machine's small
 * build, scripts/device.sh ffmpeg) reads them from $PATINA_VIDEO_FIXTURES,
 * written beforehand by `test_video_gpu --write DIR` where the encoders are.
 * Skipped (77) without a GPU. An argument is cmocka's test filter
 * (test_missing_device provokes CUDA's "invalid device ordinal" on purpose,
 * which compute-sanitizer reports: `test_video_gpu "test_[fi]*"` leaves it
 * out). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "testutil.h"

#if PATINA_HAVE_VIDEO
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/pixdesc.h>

#include "videoutil.h"

typedef struct fixture {
    const char *name, *encoder;
    int w, h, frames;
    enum AVColorSpace space; /* AVCOL_SPC_UNSPECIFIED: the reader's default by size */
    enum AVPixelFormat pf;
    const char *decoder;     /* what NVDEC mode decodes it with: "nvdec", or "libavcodec" (not 8-bit 4:2:0) */
} fixture_t;

static const fixture_t fixtures[] = {
    {"h264_250x142.mkv", "libx264", 250, 142, 40, AVCOL_SPC_SMPTE170M, AV_PIX_FMT_YUV420P, "nvdec"},
    {"h264_1280x720.mkv", "libx264", 1280, 720, 20, AVCOL_SPC_UNSPECIFIED, AV_PIX_FMT_YUV420P, "nvdec"},
    {"hevc_250x142.mkv", "libx265", 250, 142, 20, AVCOL_SPC_BT709, AV_PIX_FMT_YUV420P, "nvdec"},
    {"h264_444_250x142.mkv", "libx264", 250, 142, 12, AVCOL_SPC_BT709, AV_PIX_FMT_YUV444P, "libavcodec"},
    {"hevc_10bit_250x142.mkv", "libx265", 250, 142, 12, AVCOL_SPC_BT709, AV_PIX_FMT_YUV420P10LE, "libavcodec"},
};
#define NFIX (sizeof fixtures / sizeof fixtures[0])

static char *tmp;
static const char *dir; /* where the fixtures are */
static patina_context_t *ctx;
static patina_extractor_t *ex;

/* Frame f: ramps moving with f, noise, a new scene every 8 frames; 8-bit
 * or 16-bit samples (high bit depths: the 8-bit value times 4), any
 * chroma subsampling. */
static void draw(AVFrame *fr, int f)
{
    const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(fr->format);
    const int scene = f / 8, wide = d->comp[0].depth > 8;
    const int cw = AV_CEIL_RSHIFT(fr->width, d->log2_chroma_w), ch = AV_CEIL_RSHIFT(fr->height, d->log2_chroma_h);
    for (int p = 0; p < 3; p++) {
        const int pw = p ? cw : fr->width, ph = p ? ch : fr->height;
        for (int y = 0; y < ph; y++)
            for (int x = 0; x < pw; x++) {
                const int noise = (x * 7 + y * 13 + f) & 15;
                int v = p == 0   ? 16 + ((x + 3 * f) * 3 / 4 + (y + f) / 2 + 37 * scene + noise) % 219
                        : p == 1 ? 16 + (x + 29 * scene + f) % 224
                                 : 16 + (y * 2 + 53 * scene) % 224;
                uint8_t *row = fr->data[p] + (size_t)y * fr->linesize[p];
                if (wide) ((uint16_t *)row)[x] = (uint16_t)(4 * v);
                else row[x] = (uint8_t)v;
            }
    }
}

/* Encodes fixture x into path: 0, or -1 when the encoder is missing or
 * fails. */
static int write_fixture(const fixture_t *x, const char *path)
{
    const tv_spec_t spec = {"matroska", x->encoder, x->w, x->h, 25, 12, x->frames, x->pf, x->space, draw};
    av_log_set_level(AV_LOG_ERROR); /* the encoders' statistics */
    return tv_write_video(path, &spec);
}

static const char *fixture_path(const fixture_t *x)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", dir, x->name);
    return buf;
}

/* Every frame of path through decoder d: their info and RGB into the
 * arrays (at most cap); returns the count; *used: the decoder that gave
 * them. */
static size_t read_all(const char *path, patina_video_decoder d, patina_video_frame_t *info, patina_image_t *img,
                       size_t cap, const char **used)
{
    patina_video_t *v = NULL;
    patina_video_opts_t o;
    patina_status s;
    size_t n = 0;
    patina_video_opts_init(&o);
    o.decoder = d;
    TU_OK(patina_video_open(&v, path, &o));
    while (n < cap && (s = patina_video_next(v, &img[n], &info[n])) == PATINA_OK) n++;
    assert_true(n < cap);
    if (s != PATINA_DONE) fail_msg("%s: %s", path, patina_last_error());
    *used = patina_video_decoder_used(v);
    patina_video_free(v);
    return n;
}

/* NVDEC's frames are the CPU decoder's: numbers, times, pixels. */
static void test_frames(void **state)
{
    enum { CAP = 64 };
    (void)state;
    for (size_t k = 0; k < NFIX; k++) {
        const fixture_t *x = &fixtures[k];
        patina_video_frame_t ic[CAP], ig[CAP];
        patina_image_t pc[CAP], pg[CAP];
        const char *uc, *ug;
        size_t nc = read_all(fixture_path(x), PATINA_VIDEO_DECODER_CPU, ic, pc, CAP, &uc);
        size_t ng = read_all(fixture_path(x), PATINA_VIDEO_DECODER_NVDEC, ig, pg, CAP, &ug);
        assert_string_equal(uc, "libavcodec");
        if (strcmp(ug, x->decoder)) fail_msg("%s: NVDEC mode's frames from %s, not %s", x->name, ug, x->decoder);
        assert_int_equal(nc, (size_t)x->frames);
        assert_int_equal(ng, nc);
        for (size_t i = 0; i < nc; i++) {
            assert_int_equal(ig[i].frame, ic[i].frame);
            assert_int_equal(ig[i].t_ms, ic[i].t_ms);
            assert_int_equal(pg[i].width, x->w);
            assert_int_equal(pg[i].height, x->h);
            assert_int_equal(pc[i].width, x->w);
            for (int y = 0; y < x->h; y++)
                if (memcmp(pg[i].data + (size_t)y * pg[i].stride, pc[i].data + (size_t)y * pc[i].stride,
                           3 * (size_t)x->w))
                    fail_msg("%s frame %zu row %d: NVDEC's RGB differs from the CPU decoder's", x->name, i, y);
            patina_image_release(&pc[i]);
            patina_image_release(&pg[i]);
        }
        printf("%s: %zu frames identical (NVDEC mode, decoded by %s / libavcodec)\n", x->name, nc, ug);
    }
}

/* Every record of a (same keys, same descriptors) in b. */
static void assert_same_records(patina_collection_t *a, patina_collection_t *b)
{
    const size_t bytes = patina_extractor_bytes(ex);
    uint8_t *da = malloc(bytes), *db = malloc(bytes);
    uint64_t cur = 0;
    patina_record_t ra, rb;
    size_t n = 0;
    assert_true(da && db);
    while (patina_collection_next(a, &cur, &ra) == PATINA_OK) {
        TU_OK(patina_collection_get_by_key(b, ra.key, &rb));
        TU_OK(patina_collection_get_descriptor(a, patina_extractor_spec(ex), ra.id, da, bytes));
        TU_OK(patina_collection_get_descriptor(b, patina_extractor_spec(ex), rb.id, db, bytes));
        if (memcmp(da, db, bytes)) fail_msg("%s: the NVDEC run's descriptor differs", ra.key);
        n++;
        patina_record_release(&rb);
        patina_record_release(&ra);
    }
    assert_int_equal(n, (size_t)fixtures[0].frames);
    printf("index: %zu frames' records identical (NVDEC / libavcodec)\n", n);
    free(da);
    free(db);
}

static void report(void *user, const char *path, patina_status s, const char *message)
{
    (void)user;
    printf("  index: %s: %s (%s)\n", path, patina_status_str(s), message);
}

/* The pipeline with video_decoder NVDEC stores the CPU decoder's records. */
static void test_index(void **state)
{
    const fixture_t *x = &fixtures[0];
    const char *paths[1];
    patina_collection_t *c[2];
    (void)state;
    paths[0] = fixture_path(x);
    for (int k = 0; k < 2; k++) {
        patina_index_opts_t o;
        patina_index_stats_t st;
        char name[64];
        snprintf(name, sizeof name, "idx%d.patina", k);
        TU_OK(patina_collection_open(&c[k], tu_path(tmp, name), PATINA_OPEN_CREATE, 0));
        patina_index_opts_init(&o);
        o.device = PATINA_DEVICE_GPU;
        o.video_decoder = k ? PATINA_VIDEO_DECODER_NVDEC : PATINA_VIDEO_DECODER_CPU;
        o.on_error = report;
        TU_OK(patina_index_files(ctx, c[k], ex, paths, 1, &o, &st));
        assert_int_equal(st.failed, 0);
        assert_int_equal(st.frames, (uint64_t)x->frames);
    }
    assert_same_records(c[0], c[1]);
    patina_collection_close(c[0]);
    patina_collection_close(c[1]);
}

/* A device that does not exist: NVDEC refuses, AUTO decodes on the CPU. */
static void test_missing_device(void **state)
{
    patina_video_t *v = NULL;
    patina_video_opts_t o;
    (void)state;
    patina_video_opts_init(&o);
    o.decoder = PATINA_VIDEO_DECODER_NVDEC;
    o.gpu = 999;
    assert_int_equal(patina_video_open(&v, fixture_path(&fixtures[0]), &o), PATINA_E_UNAVAILABLE);
    assert_null(v);
    assert_non_null(strstr(patina_last_error(), "NVDEC"));
    o.decoder = PATINA_VIDEO_DECODER_AUTO;
    TU_OK(patina_video_open(&v, fixture_path(&fixtures[0]), &o));
    {
        patina_image_t img;
        TU_OK(patina_video_next(v, &img, NULL));
        patina_image_release(&img);
    }
    assert_string_equal(patina_video_decoder_used(v), "libavcodec");
    patina_video_free(v);
}

static int setup(void **state)
{
    (void)state;
    tmp = tu_tempdir("video_gpu");
    if (!tmp || patina_context_new(&ctx, NULL) != PATINA_OK || patina_extractor_new(&ex, "cedd") != PATINA_OK)
        return -1;
    dir = getenv("PATINA_VIDEO_FIXTURES");
    if (!dir || !*dir) {
        dir = tmp;
        for (size_t k = 0; k < NFIX; k++)
            if (write_fixture(&fixtures[k], fixture_path(&fixtures[k])) != 0) {
                fprintf(stderr, "test_video_gpu: no %s in this libavcodec to write %s, and no "
                                "$PATINA_VIDEO_FIXTURES (test_video_gpu --write DIR where it has one)\n",
                        fixtures[k].encoder, fixtures[k].name);
                return -1;
            }
    }
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

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frames),
        cmocka_unit_test(test_index),
        cmocka_unit_test(test_missing_device),
    };
    if (argc == 3 && !strcmp(argv[1], "--write")) {
        dir = argv[2];
        for (size_t k = 0; k < NFIX; k++)
            if (write_fixture(&fixtures[k], fixture_path(&fixtures[k])) != 0) {
                fprintf(stderr, "test_video_gpu: cannot write %s (%s)\n", fixtures[k].name, fixtures[k].encoder);
                return 1;
            }
        return 0;
    }
    if (argc == 2) cmocka_set_test_filter(argv[1]); /* e.g. "test_[fi]*" under compute-sanitizer */
    tu_require_gpu();
    return cmocka_run_group_tests(tests, setup, teardown);
}

#else

int main(void)
{
    printf("SKIPPED: this build reads no video (PATINA_VIDEO found no FFmpeg libraries)\n");
    return 77;
}

#endif
