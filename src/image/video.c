/* Video frames (include/patina/video.h, src/image/video.h, docs/video.md):
 * libavformat demuxes and libavcodec decodes (on its own threads); the
 * frame selection (every N frames, every S seconds, shot changes) and the
 * conversion of Y'CbCr to RGB are ours (src/algo/yuv.h), as are the keys
 * of frames. Input is read through our own I/O callbacks on a file
 * descriptor, never through libavformat's protocols, and a demuxer that
 * wants to open another file or URL (playlists, references) is refused,
 * so a video file cannot make Patina read anything but itself.
 *
 * FFmpeg logs through one process-wide callback; the first reader opened
 * replaces it with one that keeps the last error line of the calling
 * thread (for the messages here) and prints nothing. Not here: the
 * indexing of frames (src/pipeline/index.c). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "algo/clones.h"
#include "algo/yuv.h"
#include "core/internal.h"
#include "image/video.h"

void patina_video_opts_init(patina_video_opts_t *opts)
{
    if (!opts) return;
    memset(opts, 0, sizeof *opts);
    patina_limits_init(&opts->limits);
}

/* ----------------------------------------------------------------- sniffing */

static int at(const uint8_t *p, size_t n, size_t off, const char *magic, size_t len)
{
    return n >= off + len && memcmp(p + off, magic, len) == 0;
}

int patina_video_sniff(const void *data, size_t n)
{
    const uint8_t *p = data;
    static const char *const boxes[] = {"ftyp", "moov", "mdat", "wide", "free", "skip", "pnot"};
    size_t i;
    if (!p) return 0;
    /* ISO BMFF / QuickTime: a box size, then the first box's type */
    for (i = 0; i < sizeof boxes / sizeof boxes[0]; i++)
        if (at(p, n, 4, boxes[i], 4)) return 1;
    if (at(p, n, 0, "\x1a\x45\xdf\xa3", 4)) return 1;                   /* Matroska, WebM (EBML) */
    if (at(p, n, 0, "RIFF", 4) && at(p, n, 8, "AVI ", 4)) return 1;     /* AVI */
    if (at(p, n, 0, "\x00\x00\x01\xba", 4)) return 1;                   /* MPEG program stream */
    if (at(p, n, 0, "FLV\x01", 4)) return 1;                            /* Flash video */
    if (at(p, n, 0, "OggS", 4)) return 1;                               /* Ogg (Theora, ...) */
    if (at(p, n, 0, "\x30\x26\xb2\x75\x8e\x66\xcf\x11", 8)) return 1;   /* ASF, WMV */
    if (at(p, n, 0, "nut/multimedia container", 24)) return 1;          /* NUT */
    if (at(p, n, 0, "YUV4MPEG2 ", 10)) return 1;                        /* raw frames, y4m */
    /* MPEG transport stream: the sync byte at three packets' starts (the
     * walk and patina_index_files read 512 bytes) */
    if (n >= 377 && p[0] == 0x47 && p[188] == 0x47 && p[376] == 0x47) return 1;
    return 0;
}

#if !PATINA_HAVE_VIDEO

int patina_video_available(void) { return 0; }

static patina_status unavailable(const char *path)
{
    return patina__fail(PATINA_E_UNAVAILABLE, "video: '%s': this build of Patina reads no video (built "
                        "without FFmpeg's libavformat/libavcodec; docs/video.md)", path ? path : "(null)");
}

patina_status patina_video_open(patina_video_t **v, const char *path, const patina_video_opts_t *opts)
{
    (void)opts;
    if (v) *v = NULL;
    return unavailable(path);
}

patina_status patina_video_next(patina_video_t *v, patina_image_t *img, patina_video_frame_t *info)
{
    (void)v, (void)info;
    if (img) memset(img, 0, sizeof *img);
    return unavailable("(none)");
}

uint64_t patina_video_damaged(const patina_video_t *v) { (void)v; return 0; }
const char *patina_video_decoder_used(const patina_video_t *v) { (void)v; return NULL; }
void patina_video_free(patina_video_t *v) { (void)v; }

patina_status patina__video_next_raw(patina_video_t *v, patina__vframe_t **out, patina_video_frame_t *info)
{
    (void)v, (void)info;
    if (out) *out = NULL;
    return unavailable("(none)");
}

size_t patina__vframe_bytes(const patina__vframe_t *f) { (void)f; return 0; }

patina_status patina__vframe_rgb_into(const patina_image_t *img, const patina__vframe_t *f)
{
    (void)img, (void)f;
    return unavailable("(none)");
}

int patina__vframe_width(const patina__vframe_t *f) { (void)f; return 0; }
int patina__vframe_height(const patina__vframe_t *f) { (void)f; return 0; }

patina_status patina__vframe_rgb(patina_image_t *img, const patina__vframe_t *f)
{
    (void)f;
    if (img) memset(img, 0, sizeof *img);
    return unavailable("(none)");
}

void patina__vframe_free(patina__vframe_t **f) { if (f) *f = NULL; }

#else /* PATINA_HAVE_VIDEO */

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/hwcontext.h>
#include <libavutil/imgutils.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
#include <pthread.h>

int patina_video_available(void) { return 1; }

/* ------------------------------------------------------------------ logging */

static _Thread_local char av_last[256]; /* the calling thread's last FFmpeg error line */

static void av_quiet_log(void *avcl, int level, const char *fmt, va_list ap)
{
    int prefix = 1;
    size_t len;
    if (level > AV_LOG_ERROR) return;
    av_log_format_line2(avcl, level, fmt, ap, av_last, sizeof av_last, &prefix);
    len = strlen(av_last);
    while (len && (av_last[len - 1] == '\n' || av_last[len - 1] == '\r')) av_last[--len] = '\0';
}

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static void log_init(void) { av_log_set_callback(av_quiet_log); }

/* " (libav: LINE)" when FFmpeg logged an error on this thread since the
 * last call, else "". */
static const char *av_detail(char *buf, size_t size)
{
    if (av_last[0]) snprintf(buf, size, " (libav: %s)", av_last);
    else buf[0] = '\0';
    av_last[0] = '\0';
    return buf;
}

static const char *av_err(int e, char *buf, size_t size)
{
    if (av_strerror(e, buf, size) < 0) snprintf(buf, size, "error %d", e);
    return buf;
}

/* ---------------------------------------------------------------- the reader */

struct patina_video {
    char *name;               /* the path, for messages */
    int fd, seekable;
    AVFormatContext *fmt;
    AVIOContext *pb;
    AVCodecContext *dec;
    AVBufferRef *hw;          /* NVDEC: FFmpeg's CUDA device (the primary context, or one of its own) */
    AVPacket *pkt;
    AVFrame *frame;
    AVFrame *sw;              /* NVDEC: a frame copied from the device */
    int on_gpu;               /* the last frame came from NVDEC */
    struct SwsContext *sws;   /* formats other than 8-bit Y'CbCr / grey */
    int stream;
    AVRational tb, rate;
    patina_video_opts_t o;
    int64_t start;            /* pts of time 0 */
    int have_start;
    int64_t nframes;          /* frames the decoder gave */
    int64_t last_t_ms;        /* time of the last frame the decoder gave */
    int64_t due_ms;           /* every_ms: the next due time */
    int kept;                 /* frames kept so far */
    uint32_t hist[64];        /* shots: the last kept frame's histogram */
    uint64_t nhist;
    int draining, done;
    uint64_t damaged;         /* packets the decoder rejected */
    char first_damage[512];   /* where and why the first one was */
    patina_status demux_status;
    char demux_error[1024];   /* the demuxer's error that ended the stream, once the decoder is drained */
};

struct patina__vframe {
    AVFrame *f;               /* a reference to the decoder's frame, or RGB24 from libswscale */
    patina_yuv_coefs_t coefs;
    int grey;                 /* Y only: Cb = Cr = 128 */
};

static int io_read(void *opaque, uint8_t *buf, int size)
{
    patina_video_t *v = opaque;
    for (;;) {
        ssize_t n = read(v->fd, buf, (size_t)size);
        if (n > 0) return (int)n;
        if (n == 0) return AVERROR_EOF;
        if (errno != EINTR) return AVERROR(errno);
    }
}

static int64_t io_seek(void *opaque, int64_t off, int whence)
{
    patina_video_t *v = opaque;
    struct stat st;
    off_t r;
    if (whence & AVSEEK_SIZE) return fstat(v->fd, &st) == 0 ? (int64_t)st.st_size : AVERROR(errno);
    whence &= ~AVSEEK_FORCE;
    if (whence != SEEK_SET && whence != SEEK_CUR && whence != SEEK_END) return AVERROR(EINVAL);
    r = lseek(v->fd, (off_t)off, whence);
    return r < 0 ? AVERROR(errno) : (int64_t)r;
}

/* Demuxers that would open another file or URL (HLS, concat, DASH,
 * references in MOV) are refused. */
static int io_refuse(struct AVFormatContext *s, AVIOContext **pb, const char *url, int flags, AVDictionary **options)
{
    (void)s, (void)pb, (void)url, (void)flags, (void)options;
    return AVERROR(EPERM);
}

void patina_video_free(patina_video_t *v)
{
    if (!v) return;
    av_frame_free(&v->frame);
    av_frame_free(&v->sw);
    av_packet_free(&v->pkt);
    avcodec_free_context(&v->dec);
    av_buffer_unref(&v->hw);
    if (v->fmt) avformat_close_input(&v->fmt);
    if (v->pb) {
        av_freep(&v->pb->buffer);
        avio_context_free(&v->pb);
    }
    sws_freeContext(v->sws);
    if (v->fd > 0) close(v->fd); /* never standard input (fd 0) */
    free(v->name);
    free(v);
}

uint64_t patina_video_damaged(const patina_video_t *v) { return v ? v->damaged : 0; }

const char *patina_video_decoder_used(const patina_video_t *v)
{
    if (!v) return NULL;
    return v->on_gpu || (v->hw && !v->nframes) ? "nvdec" : "libavcodec";
}

/* FFmpeg's offer of output formats: CUDA surfaces when the reader opened
 * NVDEC, the hwaccel takes the stream and the stream is 8-bit 4:2:0 (its
 * surfaces then come back as NV12, which our rule converts exactly as the
 * CPU decoder's planes); else the decoder's own formats (high bit depths
 * would come back in NVDEC's P010/P016 layout, which libswscale need not
 * convert to the same RGB as the CPU decoder's planar one). */
static enum AVPixelFormat pick_format(AVCodecContext *c, const enum AVPixelFormat *fmts)
{
    const enum AVPixelFormat *p;
    if (c->sw_pix_fmt == AV_PIX_FMT_YUV420P || c->sw_pix_fmt == AV_PIX_FMT_YUVJ420P)
        for (p = fmts; *p != AV_PIX_FMT_NONE; p++)
            if (*p == AV_PIX_FMT_CUDA) return *p;
    /* the first software format (FFmpeg's default would take the device's
     * surfaces whenever a device is set) */
    for (p = fmts; *p != AV_PIX_FMT_NONE; p++) {
        const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(*p);
        if (d && !(d->flags & AV_PIX_FMT_FLAG_HWACCEL)) return *p;
    }
    return AV_PIX_FMT_NONE;
}

/* Opens FFmpeg's CUDA device for NVDEC when the codec has the hwaccel:
 * 1 opened, 0 not possible (*why says what), 2 the stream is not 8-bit
 * 4:2:0 as its header says (left to libavcodec, with its threads), -1 out
 * of memory. */
static int open_nvdec(patina_video_t *v, const AVCodec *codec, int format, char *why, size_t size)
{
    const AVCodecHWConfig *hc;
    AVDictionary *d = NULL;
    char dev[16], e[128];
    int i, r;
    if (format != AV_PIX_FMT_NONE && format != AV_PIX_FMT_YUV420P && format != AV_PIX_FMT_YUVJ420P) return 2;
    for (i = 0; (hc = avcodec_get_hw_config(codec, i)) != NULL; i++)
        if (hc->device_type == AV_HWDEVICE_TYPE_CUDA && (hc->methods & AV_CODEC_HW_CONFIG_METHOD_HW_DEVICE_CTX))
            break;
    if (!hc) {
        snprintf(why, size, "this FFmpeg has no NVDEC hwaccel for %s", codec->name);
        return 0;
    }
    snprintf(dev, sizeof dev, "%d", v->o.gpu);
    /* The device's primary context when FFmpeg may take it (no context of
     * its own per file); FFmpeg refuses it once it is active with other
     * flags than its own (Patina's CUDA code in this process opened it),
     * and then makes a context of its own. */
    if (av_dict_set(&d, "primary_ctx", "1", 0) < 0) return -1;
    r = av_hwdevice_ctx_create(&v->hw, AV_HWDEVICE_TYPE_CUDA, dev, d, 0);
    av_dict_free(&d);
    if (r < 0) {
        av_last[0] = '\0';
        r = av_hwdevice_ctx_create(&v->hw, AV_HWDEVICE_TYPE_CUDA, dev, NULL, 0);
    }
    if (r < 0) {
        /* FFmpeg's own line says more than its error code */
        snprintf(why, size, "no CUDA device %d for NVDEC: %s", v->o.gpu, av_last[0] ? av_last : av_err(r, e, sizeof e));
        av_last[0] = '\0';
        return 0;
    }
    if (!(v->dec->hw_device_ctx = av_buffer_ref(v->hw))) return -1;
    v->dec->get_format = pick_format;
    v->dec->thread_count = 1; /* the engine decodes; threads would only queue surfaces */
    return 1;
}

static patina_status open_fail(patina_video_t *v, patina_status s, const char *fmt, ...) PATINA_PRINTF(3, 4);
static patina_status open_fail(patina_video_t *v, patina_status s, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    patina_video_free(v);
    return patina__fail(s, "%s", msg);
}

patina_status patina_video_open(patina_video_t **out, const char *path, const patina_video_opts_t *opts)
{
    patina_video_t *v;
    const AVCodec *codec = NULL;
    AVStream *st;
    struct stat sb;
    unsigned char *iobuf;
    char e[128], d[300];
    int r;
    const int iosize = 1 << 16;
    if (!out || !path) return patina__fail(PATINA_E_INVALID, "video: NULL argument");
    *out = NULL;
    pthread_once(&log_once, log_init);
    av_last[0] = '\0';
    v = calloc(1, sizeof *v);
    if (!v || !(v->name = strdup(path))) {
        free(v);
        return patina__fail(PATINA_E_NOMEM, "video: out of memory opening '%s'", path);
    }
    v->fd = -1;
    if (opts) v->o = *opts;
    else patina_video_opts_init(&v->o);
    if (!v->o.limits.max_pixels) v->o.limits.max_pixels = PATINA_DEFAULT_MAX_PIXELS;
    if (v->o.every_frames > 1 && v->o.every_ms)
        return open_fail(v, PATINA_E_INVALID, "video: choose one of every N frames and every S seconds");
    if (!(v->o.shots >= 0 && v->o.shots <= 1))
        return open_fail(v, PATINA_E_INVALID, "video: the shot threshold %g is outside [0, 1]", v->o.shots);
    if (v->o.threads < 0) return open_fail(v, PATINA_E_INVALID, "video: %d decoding threads", v->o.threads);
    if ((unsigned)v->o.decoder > PATINA_VIDEO_DECODER_AUTO)
        return open_fail(v, PATINA_E_INVALID, "video: decoder %d is not cpu (0), nvdec (1) or auto (2)",
                         (int)v->o.decoder);
    if (v->o.gpu < 0) return open_fail(v, PATINA_E_INVALID, "video: GPU %d", v->o.gpu);
    if (!strcmp(path, "-")) {
        v->fd = 0;
        free(v->name);
        if (!(v->name = strdup("<standard input>"))) return open_fail(v, PATINA_E_NOMEM, "video: out of memory");
    } else {
        v->fd = open(path, O_RDONLY | O_CLOEXEC);
        if (v->fd < 0) {
            int err = errno;
            return open_fail(v, err == ENOENT ? PATINA_E_NOTFOUND : PATINA_E_IO, "video: cannot open '%s': %s", path,
                             strerror(err));
        }
        if (fstat(v->fd, &sb) == 0 && S_ISDIR(sb.st_mode))
            return open_fail(v, PATINA_E_IO, "video: '%s' is a directory", path);
        v->seekable = fstat(v->fd, &sb) == 0 && S_ISREG(sb.st_mode);
    }
    iobuf = av_malloc(iosize);
    v->fmt = avformat_alloc_context();
    v->pkt = av_packet_alloc();
    v->frame = av_frame_alloc();
    if (!iobuf || !v->fmt || !v->pkt || !v->frame) {
        av_free(iobuf);
        return open_fail(v, PATINA_E_NOMEM, "video: out of memory opening '%s'", v->name);
    }
    v->pb = avio_alloc_context(iobuf, iosize, 0, v, io_read, NULL, v->seekable ? io_seek : NULL);
    if (!v->pb) {
        av_free(iobuf);
        return open_fail(v, PATINA_E_NOMEM, "video: out of memory opening '%s'", v->name);
    }
    v->fmt->pb = v->pb;
    v->fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
    v->fmt->io_open = io_refuse;
    r = avformat_open_input(&v->fmt, NULL, NULL, NULL);
    if (r < 0) { /* avformat_open_input frees the context on failure */
        v->fmt = NULL;
        return open_fail(v, r == AVERROR_INVALIDDATA ? PATINA_E_FORMAT : PATINA_E_CORRUPT,
                         "video: cannot read '%s' as a video: %s%s", v->name, av_err(r, e, sizeof e),
                         av_detail(d, sizeof d));
    }
    /* A stream (a pipe, standard input): no frames read ahead to estimate
     * the frame rate (40 at a millisecond time base, 1.3 s of a 30 frames/s
     * stream that a live source's first frames would wait for); the rate
     * only stands in for missing timestamps (frame_ms) */
    if (!v->seekable) v->fmt->fps_probe_size = 0;
    r = avformat_find_stream_info(v->fmt, NULL);
    if (r < 0)
        return open_fail(v, PATINA_E_CORRUPT, "video: cannot read the streams of '%s': %s%s", v->name,
                         av_err(r, e, sizeof e), av_detail(d, sizeof d));
    r = av_find_best_stream(v->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (r == AVERROR_DECODER_NOT_FOUND)
        return open_fail(v, PATINA_E_FORMAT, "video: no decoder in this FFmpeg for the video of '%s'", v->name);
    if (r < 0) return open_fail(v, PATINA_E_FORMAT, "video: '%s' has no video stream", v->name);
    v->stream = r;
    st = v->fmt->streams[r];
    v->tb = st->time_base;
    v->rate = st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0 ? st->avg_frame_rate : st->r_frame_rate;
    if (st->codecpar->width > 0 && st->codecpar->height > 0 &&
        (uint64_t)st->codecpar->width * (uint64_t)st->codecpar->height > v->o.limits.max_pixels)
        return open_fail(v, PATINA_E_LIMIT, "video: %dx%d = %" PRIu64 " pixels exceeds the limit of %" PRIu64
                         " in '%s'", st->codecpar->width, st->codecpar->height,
                         (uint64_t)st->codecpar->width * (uint64_t)st->codecpar->height, v->o.limits.max_pixels,
                         v->name);
    v->dec = avcodec_alloc_context3(codec);
    if (!v->dec) return open_fail(v, PATINA_E_NOMEM, "video: out of memory opening '%s'", v->name);
    if ((r = avcodec_parameters_to_context(v->dec, st->codecpar)) < 0)
        return open_fail(v, PATINA_E_FORMAT, "video: the codec parameters of '%s': %s", v->name,
                         av_err(r, e, sizeof e));
    v->dec->pkt_timebase = st->time_base;
    v->dec->thread_count = v->o.threads;
    if (!v->o.threads && patina_cpu_count() < sysconf(_SC_NPROCESSORS_ONLN))
        v->dec->thread_count = patina_cpu_count(); /* a CPU quota, which libavcodec's own count does not see */
    v->dec->thread_type = FF_THREAD_FRAME | FF_THREAD_SLICE;
    if (!v->seekable && v->o.latency_ms && v->rate.num > 0 && v->rate.den > 0) {
        /* a stream: the frame threads' hold-back within its delay budget */
        const double held = (double)v->o.latency_ms * av_q2d(v->rate) / 1000.0;
        const int most = held < 1 ? 1 : held > 1024 ? 1024 : (int)held;
        const int count = v->dec->thread_count ? v->dec->thread_count : (int)patina_cpu_count();
        if (count > most) v->dec->thread_count = most;
    }
    if (v->o.decoder != PATINA_VIDEO_DECODER_CPU) {
        char why[512];
        int h = open_nvdec(v, codec, st->codecpar->format, why, sizeof why);
        if (h < 0) return open_fail(v, PATINA_E_NOMEM, "video: out of memory opening '%s'", v->name);
        if (h == 0 && v->o.decoder == PATINA_VIDEO_DECODER_NVDEC)
            return open_fail(v, PATINA_E_UNAVAILABLE, "video: NVDEC for '%s': %s", v->name, why);
        av_last[0] = '\0';
    }
    if ((r = avcodec_open2(v->dec, codec, NULL)) < 0)
        return open_fail(v, PATINA_E_FORMAT, "video: cannot open the %s decoder for '%s': %s%s", codec->name, v->name,
                         av_err(r, e, sizeof e), av_detail(d, sizeof d));
    av_last[0] = '\0';
    *out = v;
    return PATINA_OK;
}

/* ------------------------------------------------------------------- colour */

/* The frame's pixel format is 8-bit Y'CbCr (any subsampling, planar,
 * semi-planar or packed; alpha ignored) or 8-bit grey: our conversion
 * reads it. */
static int yuv8(enum AVPixelFormat pf, int *grey)
{
    const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(pf);
    int n, c;
    if (!d || (d->flags & (AV_PIX_FMT_FLAG_RGB | AV_PIX_FMT_FLAG_PAL | AV_PIX_FMT_FLAG_BITSTREAM |
                           AV_PIX_FMT_FLAG_HWACCEL | AV_PIX_FMT_FLAG_FLOAT | AV_PIX_FMT_FLAG_BAYER)))
        return 0;
    n = d->nb_components - ((d->flags & AV_PIX_FMT_FLAG_ALPHA) ? 1 : 0);
    if (n != 1 && n != 3) return 0;
    for (c = 0; c < n; c++)
        if (d->comp[c].depth != 8 || d->comp[c].shift != 0) return 0;
    *grey = n == 1;
    return 1;
}

/* The matrix: the stream's; unspecified (or one we do not read): BT.709 for
 * frames 720 rows high or more, else BT.601. */
static patina_yuv_matrix matrix_of(const AVFrame *f)
{
    switch (f->colorspace) {
    case AVCOL_SPC_BT709: return PATINA_YUV_BT709;
    case AVCOL_SPC_BT470BG:
    case AVCOL_SPC_SMPTE170M: return PATINA_YUV_BT601;
    case AVCOL_SPC_BT2020_NCL:
    case AVCOL_SPC_BT2020_CL: return PATINA_YUV_BT2020;
    default: return f->height >= 720 ? PATINA_YUV_BT709 : PATINA_YUV_BT601;
    }
}

/* Full range: the stream says so, or a "J" (JPEG) pixel format; unspecified
 * grey is full range, unspecified Y'CbCr limited. */
static int full_range_of(const AVFrame *f, int grey)
{
    enum AVPixelFormat pf = f->format;
    if (f->color_range == AVCOL_RANGE_JPEG) return 1;
    if (f->color_range == AVCOL_RANGE_MPEG) return 0;
    if (pf == AV_PIX_FMT_YUVJ420P || pf == AV_PIX_FMT_YUVJ422P || pf == AV_PIX_FMT_YUVJ444P ||
        pf == AV_PIX_FMT_YUVJ440P || pf == AV_PIX_FMT_YUVJ411P)
        return 1;
    return grey;
}

/* The RGB of pixel rows [y0, y1) of a frame our conversion reads: each
 * pixel's chroma is the sample whose area covers it (x >> log2_chroma_w,
 * y >> log2_chroma_h), i.e. replicated, whatever the chroma siting. */
static void yuv_rows(uint8_t *dst, size_t stride, const AVFrame *f, const patina_yuv_coefs_t *k, int grey, int y0,
                     int y1)
{
    const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(f->format);
    const AVComponentDescriptor *cy = &d->comp[0], *cu = &d->comp[1], *cv = &d->comp[2];
    const patina_yuv_coefs_t c = *k;
    const int w = f->width, sx = grey ? 0 : d->log2_chroma_w, per = 1 << sx, sy = cy->step;
    int x, y;
    for (y = y0; y < y1; y++) {
        const uint8_t *py = f->data[cy->plane] + (ptrdiff_t)y * f->linesize[cy->plane] + cy->offset;
        uint8_t *o = dst + (size_t)y * stride;
        const uint8_t *pu = NULL, *pv = NULL;
        int32_t t[3] = {0, 0, 0};
        if (grey) {
            patina_yuv_chroma(&c, 128, 128, t);
        } else {
            int yc = y >> d->log2_chroma_h;
            pu = f->data[cu->plane] + (ptrdiff_t)yc * f->linesize[cu->plane] + cu->offset;
            pv = f->data[cv->plane] + (ptrdiff_t)yc * f->linesize[cv->plane] + cv->offset;
        }
        /* the pixels x .. x + per - 1 share chroma sample x >> sx */
        for (x = 0; x < w; x += per) {
            int e = x + per < w ? x + per : w, i;
            if (!grey) patina_yuv_chroma(&c, pu[(x >> sx) * cu->step], pv[(x >> sx) * cv->step], t);
            for (i = x; i < e; i++, o += 3) patina_yuv_pixel(&c, py[i * sy], t, o);
        }
    }
}

/* The same conversion for the layouts decoders give most (yuv420p, nv12,
 * yuv422p, yuv444p, their J variants, nv21, yuv440p): luma samples
 * contiguous, chroma planar (cs = 1, one sample per 2^sx pixels, sx 0 or
 * 1) or interleaved 4:2:0 (cs = 2, sx = 1). The same sums (patina_yuv_chroma's
 * terms once per chroma sample, patina_yuv_pixel's per pixel), so the same
 * bytes, in blocks of FAST_BLOCK pixels whose loops the compiler vectorises:
 * lab/video/yuv_bench.c measured 7.5 ns a pixel for yuv_rows against 0.8
 * with AVX2 (the x86-64-v3 clone) and 3.9 without, same bytes. */
enum { FAST_BLOCK = 128 };

static inline __attribute__((always_inline)) void row_fast(uint8_t *o, const uint8_t *py, const uint8_t *pu,
                                                           const uint8_t *pv, int w, const patina_yuv_coefs_t *k,
                                                           const int sx, const int cs)
{
    const patina_yuv_coefs_t c = *k;
    for (int x0 = 0; x0 < w; x0 += FAST_BLOCK) {
        const int n = w - x0 < FAST_BLOCK ? w - x0 : FAST_BLOCK, nc = (n + (1 << sx) - 1) >> sx;
        const uint8_t *cu = pu + (size_t)(x0 >> sx) * (size_t)cs, *cv = pv + (size_t)(x0 >> sx) * (size_t)cs;
        const uint8_t *yy = py + x0;
        uint8_t *oo = o + 3 * (size_t)x0;
        int32_t tr[FAST_BLOCK], tg[FAST_BLOCK], tb[FAST_BLOCK];
        uint8_t r[FAST_BLOCK], g[FAST_BLOCK], b[FAST_BLOCK];
        for (int j = 0; j < nc; j++) {
            const int32_t u = (int32_t)cu[j * cs] - 128, v = (int32_t)cv[j * cs] - 128;
            tr[j] = c.rv * v;
            tg[j] = -c.gu * u - c.gv * v;
            tb[j] = c.bu * u;
        }
        if (sx == 1 && n == FAST_BLOCK) { /* pixel pairs that share a sample */
            for (int j = 0; j < FAST_BLOCK / 2; j++) {
                const int32_t y0 = c.y * ((int32_t)yy[2 * j] - c.yoff), y1 = c.y * ((int32_t)yy[2 * j + 1] - c.yoff);
                r[2 * j] = patina_yuv_clamp(y0 + tr[j]);
                r[2 * j + 1] = patina_yuv_clamp(y1 + tr[j]);
                g[2 * j] = patina_yuv_clamp(y0 + tg[j]);
                g[2 * j + 1] = patina_yuv_clamp(y1 + tg[j]);
                b[2 * j] = patina_yuv_clamp(y0 + tb[j]);
                b[2 * j + 1] = patina_yuv_clamp(y1 + tb[j]);
            }
        } else {
            for (int i = 0; i < n; i++) {
                const int32_t y0 = c.y * ((int32_t)yy[i] - c.yoff);
                r[i] = patina_yuv_clamp(y0 + tr[i >> sx]);
                g[i] = patina_yuv_clamp(y0 + tg[i >> sx]);
                b[i] = patina_yuv_clamp(y0 + tb[i >> sx]);
            }
        }
        for (int i = 0; i < n; i++) {
            oo[3 * i] = r[i];
            oo[3 * i + 1] = g[i];
            oo[3 * i + 2] = b[i];
        }
    }
}

/* Whether rows_fast reads frames of descriptor d. */
static int fast_layout(const AVPixFmtDescriptor *d, int grey)
{
    const AVComponentDescriptor *cy = &d->comp[0], *cu = &d->comp[1], *cv = &d->comp[2];
    if (grey || cy->step != 1 || d->log2_chroma_w > 1) return 0;
    if (cu->step == 1 && cv->step == 1) return cu->plane != cy->plane && cv->plane != cy->plane && cu->plane != cv->plane;
    /* semi-planar 4:2:0 (nv12, nv21); 4:2:2 and 4:4:4 semi-planar (nv16, nv24) go the general way:
     * test_video cannot write them (rawvideo in NUT reads them back as other formats) */
    return d->log2_chroma_w == 1 && d->log2_chroma_h == 1 && cu->step == 2 && cv->step == 2 &&
           cu->plane == cv->plane && cu->plane != cy->plane;
}

PATINA_CLONES static void rows_fast(uint8_t *dst, size_t stride, const AVFrame *f, const AVPixFmtDescriptor *d,
                                    const patina_yuv_coefs_t *k, int y0, int y1)
{
    const AVComponentDescriptor *cy = &d->comp[0], *cu = &d->comp[1], *cv = &d->comp[2];
    const int sx = d->log2_chroma_w, cs = cu->step;
    for (int y = y0; y < y1; y++) {
        const int yc = y >> d->log2_chroma_h;
        const uint8_t *py = f->data[cy->plane] + (ptrdiff_t)y * f->linesize[cy->plane] + cy->offset;
        const uint8_t *pu = f->data[cu->plane] + (ptrdiff_t)yc * f->linesize[cu->plane] + cu->offset;
        const uint8_t *pv = f->data[cv->plane] + (ptrdiff_t)yc * f->linesize[cv->plane] + cv->offset;
        uint8_t *o = dst + (size_t)y * stride;
        if (sx == 1 && cs == 1) row_fast(o, py, pu, pv, f->width, k, 1, 1);
        else if (sx == 1) row_fast(o, py, pu, pv, f->width, k, 1, 2);
        else row_fast(o, py, pu, pv, f->width, k, 0, 1);
    }
}

patina_status patina__vframe_rgb(patina_image_t *img, const patina__vframe_t *vf)
{
    patina_status s = patina_image_init(img, vf->f->width, vf->f->height);
    if (s != PATINA_OK) return s;
    return patina__vframe_rgb_into(img, vf);
}

patina_status patina__vframe_rgb_into(const patina_image_t *img, const patina__vframe_t *vf)
{
    const AVFrame *f = vf->f;
    int y;
    if (img->width != f->width || img->height != f->height || img->stride < 3 * (size_t)f->width)
        return patina__fail(PATINA_E_INTERNAL, "video: a %dx%d image for a %dx%d frame", img->width, img->height,
                            f->width, f->height);
    if (f->format == AV_PIX_FMT_RGB24) {
        for (y = 0; y < f->height; y++)
            memcpy(img->data + (size_t)y * img->stride, f->data[0] + (ptrdiff_t)y * f->linesize[0],
                   3 * (size_t)f->width);
        return PATINA_OK;
    }
    {
        const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(f->format);
        if (fast_layout(d, vf->grey))
            rows_fast(img->data, img->stride, f, d, &vf->coefs, 0, f->height);
        else
            yuv_rows(img->data, img->stride, f, &vf->coefs, vf->grey, 0, f->height);
    }
    return PATINA_OK;
}

size_t patina__vframe_bytes(const patina__vframe_t *vf)
{
    int r = av_image_get_buffer_size(vf->f->format, vf->f->width, vf->f->height, 1);
    return r > 0 ? (size_t)r : 3 * (size_t)vf->f->width * (size_t)vf->f->height;
}

int patina__vframe_width(const patina__vframe_t *vf) { return vf->f->width; }
int patina__vframe_height(const patina__vframe_t *vf) { return vf->f->height; }

void patina__vframe_free(patina__vframe_t **vf)
{
    if (!vf || !*vf) return;
    av_frame_free(&(*vf)->f);
    free(*vf);
    *vf = NULL;
}

/* ---------------------------------------------------------------- selection */

/* The shot histogram: 4 levels per channel (the top 2 bits of R, G, B), 64
 * bins, over the pixels of every 4th column of every 4th row from (0, 0),
 * their RGB by the conversion above. */
static uint64_t histogram(uint32_t h[64], const patina__vframe_t *vf)
{
    const AVFrame *f = vf->f;
    uint64_t n = 0;
    int x, y;
    memset(h, 0, 64 * sizeof *h);
    if (f->format == AV_PIX_FMT_RGB24) {
        for (y = 0; y < f->height; y += 4)
            for (x = 0; x < f->width; x += 4, n++) {
                const uint8_t *p = f->data[0] + (ptrdiff_t)y * f->linesize[0] + 3 * x;
                h[(p[0] >> 6) * 16 + (p[1] >> 6) * 4 + (p[2] >> 6)]++;
            }
        return n;
    }
    {
        const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(f->format);
        const AVComponentDescriptor *cy = &d->comp[0], *cu = &d->comp[1], *cv = &d->comp[2];
        for (y = 0; y < f->height; y += 4) {
            const uint8_t *py = f->data[cy->plane] + (ptrdiff_t)y * f->linesize[cy->plane] + cy->offset;
            int yc = y >> d->log2_chroma_h;
            const uint8_t *pu = vf->grey ? NULL : f->data[cu->plane] + (ptrdiff_t)yc * f->linesize[cu->plane] + cu->offset;
            const uint8_t *pv = vf->grey ? NULL : f->data[cv->plane] + (ptrdiff_t)yc * f->linesize[cv->plane] + cv->offset;
            for (x = 0; x < f->width; x += 4, n++) {
                uint8_t p[3];
                int xc = x >> d->log2_chroma_w;
                patina_yuv_to_rgb(&vf->coefs, py[x * cy->step], pu ? pu[xc * cu->step] : 128,
                                  pv ? pv[xc * cv->step] : 128, p);
                h[(p[0] >> 6) * 16 + (p[1] >> 6) * 4 + (p[2] >> 6)]++;
            }
        }
    }
    return n;
}

/* Half the L1 distance of the two normalised histograms: the share of the
 * samples that would have to change bins, 0 (same colours) .. 1. */
static double hist_distance(const uint32_t *a, uint64_t na, const uint32_t *b, uint64_t nb)
{
    double s = 0;
    int i;
    for (i = 0; i < 64; i++) {
        double d = (double)a[i] / (double)na - (double)b[i] / (double)nb;
        s += d < 0 ? -d : d;
    }
    return 0.5 * s;
}

/* The time of the frame the decoder gave as number idx: its presentation
 * timestamp from the stream's start (the stream's start_time, else the
 * first timestamp), in ms rounded to nearest (halves away from zero); a
 * frame without a timestamp: the previous frame's time plus one frame at
 * the stream's rate (idx / rate for the first). */
static int64_t frame_ms(patina_video_t *v, const AVFrame *f, int64_t idx)
{
    const AVRational ms = {1, 1000};
    int64_t pts = f->best_effort_timestamp;
    if (pts != AV_NOPTS_VALUE) {
        if (!v->have_start) {
            AVStream *st = v->fmt->streams[v->stream];
            v->start = st->start_time != AV_NOPTS_VALUE && st->start_time <= pts ? st->start_time : pts;
            v->have_start = 1;
        }
        return av_rescale_q_rnd(pts - v->start, v->tb, ms, AV_ROUND_NEAR_INF | AV_ROUND_PASS_MINMAX);
    }
    if (v->rate.num <= 0 || v->rate.den <= 0) return idx ? v->last_t_ms : 0;
    if (idx == 0) return 0;
    return v->last_t_ms + av_rescale_q_rnd(1, av_inv_q(v->rate), ms, AV_ROUND_NEAR_INF);
}

/* Whether frame number idx at t_ms is a candidate (every N frames / every
 * S seconds); updates the due time when it is. */
static int candidate(patina_video_t *v, int64_t idx, int64_t t_ms)
{
    if (v->o.every_frames > 1) return idx % (int64_t)v->o.every_frames == 0;
    if (v->o.every_ms) {
        int64_t S = (int64_t)v->o.every_ms;
        if (v->kept && t_ms < v->due_ms) return 0;
        if (!v->kept) v->due_ms = t_ms; /* the first frame's time is the origin */
        /* the next multiple of S (from the origin) after t_ms */
        v->due_ms += ((t_ms - v->due_ms) / S + 1) * S;
        return 1;
    }
    return 1;
}

/* ----------------------------------------------------------------- decoding */

static patina_status frame_error(patina_video_t *v, patina_status s, const char *what, int r)
{
    char e[128], d[300];
    if (!v->nframes)
        return patina__fail(s, "video: %s in '%s' before its first frame: %s%s", what, v->name, av_err(r, e, sizeof e),
                            av_detail(d, sizeof d));
    return patina__fail(s, "video: %s in '%s' after frame %" PRId64 " (t=%.3f s): %s%s", what, v->name,
                        v->nframes - 1, (double)v->last_t_ms / 1000.0, av_err(r, e, sizeof e), av_detail(d, sizeof d));
}

/* The end of the stream (the decoder drained): PATINA_DONE, or
 * PATINA_E_CORRUPT when the demuxer met damaged or missing data (a
 * truncated file) or the decoder rejected packets. */
static patina_status stream_end(patina_video_t *v)
{
    v->done = 1;
    if (v->demux_error[0]) return patina__fail(v->demux_status, "%s", v->demux_error);
    if (v->damaged)
        return patina__fail(PATINA_E_CORRUPT, "video: %" PRIu64 " damaged packet%s in '%s', left out (the first: %s)",
                            v->damaged, v->damaged == 1 ? "" : "s", v->name, v->first_damage);
    /* Demuxers that meet the end of a cut file as the end of the stream
     * (Matroska, ...): the frames stop more than two frame periods (0.1 s
     * at an unknown rate) before the duration the container declares. */
    if (v->fmt->duration > 0 && v->nframes > 0) {
        int64_t dur_ms = av_rescale_q(v->fmt->duration, AV_TIME_BASE_Q, (AVRational){1, 1000});
        int64_t slack = v->rate.num > 0 && v->rate.den > 0 ? av_rescale_q(2, av_inv_q(v->rate), (AVRational){1, 1000})
                                                           : 100;
        if (v->last_t_ms + slack < dur_ms)
            return patina__fail(PATINA_E_CORRUPT, "video: truncated '%s': its frames end at t=%.3f s (frame %" PRId64
                                "), its container declares %.3f s", v->name, (double)v->last_t_ms / 1000.0,
                                v->nframes - 1, (double)dur_ms / 1000.0);
    }
    return PATINA_DONE;
}

patina_status patina__video_next_raw(patina_video_t *v, patina__vframe_t **out, patina_video_frame_t *info)
{
    char e[128], d[300];
    if (!v || !out) return patina__fail(PATINA_E_INVALID, "video: NULL argument");
    *out = NULL;
    if (v->done) return PATINA_DONE;
    for (;;) {
        int r = avcodec_receive_frame(v->dec, v->frame);
        if (r == 0 && v->frame->format == AV_PIX_FMT_CUDA) {
            /* an NVDEC surface: its samples copied to the host as they are
             * (NV12 for 8-bit 4:2:0), then the same conversion as the CPU's */
            if (!v->sw && !(v->sw = av_frame_alloc())) {
                av_frame_unref(v->frame);
                return patina__fail(PATINA_E_NOMEM, "video: out of memory decoding '%s'", v->name);
            }
            av_frame_unref(v->sw);
            if ((r = av_hwframe_transfer_data(v->sw, v->frame, 0)) < 0 ||
                (r = av_frame_copy_props(v->sw, v->frame)) < 0) {
                av_frame_unref(v->frame);
                v->done = 1;
                return frame_error(v, PATINA_E_IO, "copying an NVDEC frame", r);
            }
            av_frame_unref(v->frame);
            av_frame_move_ref(v->frame, v->sw);
            v->on_gpu = 1;
        } else if (r == 0) {
            v->on_gpu = 0;
        }
        if (r == 0) {
            AVFrame *f = v->frame;
            int64_t idx = v->nframes++, t = frame_ms(v, f, idx);
            patina__vframe_t *vf;
            int grey = 0;
            double dist = 1;
            v->last_t_ms = t;
            if ((uint64_t)f->width * (uint64_t)f->height > v->o.limits.max_pixels) {
                av_frame_unref(f);
                v->done = 1;
                return patina__fail(PATINA_E_LIMIT, "video: frame %" PRId64 " of '%s' is %dx%d, over the limit of %"
                                    PRIu64 " pixels", idx, v->name, f->width, f->height, v->o.limits.max_pixels);
            }
            if (!candidate(v, idx, t)) {
                av_frame_unref(f);
                continue;
            }
            vf = calloc(1, sizeof *vf);
            if (!vf || !(vf->f = av_frame_alloc())) {
                free(vf);
                av_frame_unref(f);
                return patina__fail(PATINA_E_NOMEM, "video: out of memory decoding '%s'", v->name);
            }
            if (yuv8(f->format, &grey)) {
                vf->grey = grey;
                vf->coefs = patina_yuv_coefs(matrix_of(f), full_range_of(f, grey));
                av_frame_move_ref(vf->f, f);
            } else { /* high bit depth, RGB, palette ...: libswscale's RGB */
                vf->f->format = AV_PIX_FMT_RGB24;
                vf->f->width = f->width;
                vf->f->height = f->height;
                v->sws = sws_getCachedContext(v->sws, f->width, f->height, f->format, f->width, f->height,
                                              AV_PIX_FMT_RGB24, SWS_POINT | SWS_BITEXACT | SWS_ACCURATE_RND, NULL,
                                              NULL, NULL);
                if (!v->sws || av_frame_get_buffer(vf->f, 0) < 0 ||
                    sws_scale(v->sws, (const uint8_t *const *)f->data, f->linesize, 0, f->height, vf->f->data,
                              vf->f->linesize) != f->height) {
                    av_frame_unref(f);
                    patina__vframe_free(&vf);
                    v->done = 1;
                    return patina__fail(PATINA_E_FORMAT, "video: cannot convert the %s frames of '%s' to RGB",
                                        av_get_pix_fmt_name(f->format), v->name);
                }
                av_frame_unref(f);
            }
            if (v->o.shots > 0) {
                uint32_t h[64];
                uint64_t n = histogram(h, vf);
                if (v->kept) {
                    dist = hist_distance(h, n, v->hist, v->nhist);
                    if (dist < v->o.shots) {
                        patina__vframe_free(&vf);
                        continue;
                    }
                }
                memcpy(v->hist, h, sizeof h);
                v->nhist = n;
            }
            v->kept++;
            if (info) {
                info->frame = idx;
                info->t_ms = t;
                info->distance = dist;
                info->width = vf->f->width;
                info->height = vf->f->height;
            }
            *out = vf;
            return PATINA_OK;
        }
        if (r == AVERROR_EOF) return stream_end(v);
        if (r != AVERROR(EAGAIN)) {
            v->done = 1;
            return frame_error(v, PATINA_E_CORRUPT, "decoding failed", r);
        }
        if (v->draining) return stream_end(v); /* cannot happen: a draining decoder ends with EOF */
        r = av_read_frame(v->fmt, v->pkt);
        if (r == AVERROR_EOF) {
            v->draining = 1;
            avcodec_send_packet(v->dec, NULL);
            continue;
        }
        if (r < 0) { /* the frames the decoder holds are good: drain it, then say why the stream ended */
            v->demux_status = frame_error(v, r == AVERROR(ENOMEM) ? PATINA_E_NOMEM : PATINA_E_CORRUPT,
                                          "damaged or truncated data", r);
            snprintf(v->demux_error, sizeof v->demux_error, "%s", patina_last_error());
            v->draining = 1;
            avcodec_send_packet(v->dec, NULL);
            continue;
        }
        if (v->pkt->stream_index != v->stream) {
            av_packet_unref(v->pkt);
            continue;
        }
        r = avcodec_send_packet(v->dec, v->pkt);
        if (r < 0 && r != AVERROR(EAGAIN)) {
            if (!v->damaged++)
                snprintf(v->first_damage, sizeof v->first_damage, "after frame %" PRId64 " (t=%.3f s): %s%s",
                         v->nframes - 1, (double)v->last_t_ms / 1000.0, av_err(r, e, sizeof e),
                         av_detail(d, sizeof d));
        }
        av_packet_unref(v->pkt);
    }
}

patina_status patina_video_next(patina_video_t *v, patina_image_t *img, patina_video_frame_t *info)
{
    patina__vframe_t *vf = NULL;
    patina_status s;
    if (!img) return patina__fail(PATINA_E_INVALID, "video: NULL image");
    memset(img, 0, sizeof *img);
    s = patina__video_next_raw(v, &vf, info);
    if (s != PATINA_OK) return s;
    s = patina__vframe_rgb(img, vf);
    patina__vframe_free(&vf);
    return s;
}

#endif /* PATINA_HAVE_VIDEO */

patina_status patina_video_decoder_parse(patina_video_decoder *d, const char *name)
{
    if (!d || !name) return patina__fail(PATINA_E_INVALID, "video: NULL argument");
    if (!strcmp(name, "cpu")) *d = PATINA_VIDEO_DECODER_CPU;
    else if (!strcmp(name, "nvdec")) *d = PATINA_VIDEO_DECODER_NVDEC;
    else if (!strcmp(name, "auto")) *d = PATINA_VIDEO_DECODER_AUTO;
    else return patina__fail(PATINA_E_INVALID, "video: unknown decoder '%s' (cpu, nvdec or auto)", name);
    return PATINA_OK;
}

/* ---------------------------------------------------------------------- keys */

patina_status patina_video_key(char *buf, size_t size, const char *file_key, const patina_video_frame_t *f)
{
    int64_t t;
    int n;
    if (!buf || !file_key || !f) return patina__fail(PATINA_E_INVALID, "video: NULL argument");
    t = f->t_ms;
    n = snprintf(buf, size, "%s#t=%s%" PRId64 ".%03" PRId64 "&f=%" PRId64, file_key, t < 0 ? "-" : "",
                 (t < 0 ? -(t / 1000) : t / 1000), (t < 0 ? -(t % 1000) : t % 1000), f->frame);
    if (n < 0 || (size_t)n >= size)
        return patina__fail(PATINA_E_LIMIT, "video: the key of frame %" PRId64 " of '%s' is longer than %zu bytes",
                            f->frame, file_key, size ? size - 1 : 0);
    return PATINA_OK;
}

static int digits(const char **p, int64_t *v, int max)
{
    int n = 0;
    *v = 0;
    while (**p >= '0' && **p <= '9' && n < max) *v = *v * 10 + (*(*p)++ - '0'), n++;
    return n > 0 && !(**p >= '0' && **p <= '9');
}

int patina_video_key_parse(const char *key, int64_t *t_ms, int64_t *frame, size_t *file_len)
{
    const char *h, *p;
    int64_t s, ms, f;
    int neg;
    if (!key || !(h = strrchr(key, '#')) || strncmp(h, "#t=", 3)) return 0;
    p = h + 3;
    neg = *p == '-';
    p += neg;
    if (!digits(&p, &s, 15) || *p++ != '.') return 0;
    if (!(p[0] >= '0' && p[0] <= '9' && p[1] >= '0' && p[1] <= '9' && p[2] >= '0' && p[2] <= '9')) return 0;
    ms = (p[0] - '0') * 100 + (p[1] - '0') * 10 + (p[2] - '0');
    p += 3;
    if (strncmp(p, "&f=", 3)) return 0;
    p += 3;
    if (!digits(&p, &f, 18) || *p) return 0;
    if (t_ms) *t_ms = (neg ? -1 : 1) * (s * 1000 + ms);
    if (frame) *frame = f;
    if (file_len) *file_len = (size_t)(h - key);
    return 1;
}
