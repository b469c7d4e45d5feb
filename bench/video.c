/* bench_video: video frames indexed end to end (demux -> decode -> our
 * Y'CbCr -> RGB -> extract -> store), frames/s and the multiple of real
 * time, next to decoding alone and decoding + conversion alone.
 *
 *   bench_video [--file VIDEO] [--seconds S] [--size WxH] [--fps N]
 *               [--family F] [--devices cpu,gpu] [--batch N] [--every N|Ss]
 *
 * Without --file it encodes S (default 10) seconds of synthetic WxH
 * (default 1920x1080) video at N (default 30) frames/s with libx264
 * (preset veryfast, B-frames, GOP 60) when Debian's libavcodec has it,
 * else MPEG-4 part 2, into $TMPDIR (default /tmp): moving colour ramps and
 * noise, a new scene every 3 seconds. Rows:
 *   decode        libavcodec alone through the reader (frames kept as
 *                 decoded, no conversion): frames/s;
 *   decode+rgb    the reader's frames converted to RGB on its thread;
 *   e2e DEVICE    patina_index_files of the file with family F (default
 *                 cedd) into a new collection, every frame (or --every),
 *                 the context's threads (all cores): frames/s, x real
 *                 time, and the stage times the pipeline reports;
 *   live DEVICE   the same file as a live stream: a thread writes it into
 *                 a pipe on standard input as a camera would send it (each
 *                 packet at its decoding time from the start), "-" indexed
 *                 with --max-delay (default 1 s; every frame): how long
 *                 after its time in the stream each frame's record was
 *                 stored (p50, p99, max) and how far behind the stream's
 *                 end the run finished -- a stream is kept up with when
 *                 these stay bounded (--no-live: no such rows).
 * The GPU row runs when a GPU is usable (extraction on the GPU), once with
 * frames decoded on the CPU and once on NVDEC (e2e gpu+nvdec). NVDEC rows
 * (the reader on the GPU's video decoders: "decode nvdec", "nvdec+rgb",
 * whose RGB is hashed and compared with the CPU decoder's) unless
 * --no-nvdec or NVDEC cannot open (the reason printed). */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"
#include "image/video.h"
#include "patina/patina.h"
#include "patina/video.h"

#if PATINA_HAVE_VIDEO
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>

static void die(const char *what)
{
    fprintf(stderr, "bench_video: %s: %s\n", what, patina_last_error());
    exit(2);
}

static void fail(const char *what)
{
    fprintf(stderr, "bench_video: %s\n", what);
    exit(2);
}

static uint32_t hash32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    return x ^ (x >> 16);
}

/* Frame f of the synthetic video, 4:2:0: a scene (every 3 s) is a pair of
 * ramps moving at its own speed with a little noise. */
static void draw(AVFrame *fr, int f, int fps)
{
    int scene = f / (3 * fps), w = fr->width, h = fr->height;
    uint32_t s = hash32((uint32_t)scene + 1);
    int dx = 1 + (int)(s % 7), dy = 1 + (int)(s / 7 % 5);
    for (int y = 0; y < h; y++) {
        uint8_t *row = fr->data[0] + (size_t)y * fr->linesize[0];
        for (int x = 0; x < w; x++)
            row[x] = (uint8_t)(16 + ((x + f * dx) * 3 / 4 + (y + f * dy) / 2 + (int)(hash32((uint32_t)(y * w + x + f)) & 7) +
                                     (int)(s & 63)) % 219);
    }
    for (int y = 0; y < h / 2; y++)
        for (int x = 0; x < w / 2; x++) {
            fr->data[1][(size_t)y * fr->linesize[1] + x] = (uint8_t)(16 + (x + (int)(s >> 8 & 127) + f) % 224);
            fr->data[2][(size_t)y * fr->linesize[2] + x] = (uint8_t)(16 + (y + (int)(s >> 16 & 127)) % 224);
        }
}

static int send(AVFormatContext *oc, AVCodecContext *c, AVStream *st, AVFrame *fr)
{
    AVPacket *pkt = av_packet_alloc();
    int r = avcodec_send_frame(c, fr);
    while (r >= 0 && (r = avcodec_receive_packet(c, pkt)) >= 0) {
        av_packet_rescale_ts(pkt, c->time_base, st->time_base);
        pkt->stream_index = st->index;
        if (av_interleaved_write_frame(oc, pkt) < 0) fail("cannot write a packet");
    }
    av_packet_free(&pkt);
    return r == AVERROR(EAGAIN) || r == AVERROR_EOF ? 0 : r;
}

static const char *encode(const char *path, int w, int h, int fps, int seconds)
{
    AVFormatContext *oc = NULL;
    const AVCodec *codec = avcodec_find_encoder_by_name("libx264");
    AVCodecContext *c;
    AVStream *st;
    AVFrame *fr;
    if (!codec) codec = avcodec_find_encoder(AV_CODEC_ID_MPEG4);
    if (!codec) fail("no H.264 or MPEG-4 encoder in this libavcodec");
    if (avformat_alloc_output_context2(&oc, NULL, "matroska", path) < 0) fail("no Matroska muxer");
    st = avformat_new_stream(oc, NULL);
    c = avcodec_alloc_context3(codec);
    c->width = w;
    c->height = h;
    c->time_base = (AVRational){1, fps};
    c->framerate = (AVRational){fps, 1};
    c->pix_fmt = AV_PIX_FMT_YUV420P;
    c->gop_size = 2 * fps;
    c->max_b_frames = 2;
    c->bit_rate = 8000000;
    c->colorspace = AVCOL_SPC_BT709;
    c->color_range = AVCOL_RANGE_MPEG;
    if (!strcmp(codec->name, "libx264")) av_opt_set(c->priv_data, "preset", "veryfast", 0);
    if (oc->oformat->flags & AVFMT_GLOBALHEADER) c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    if (avcodec_open2(c, codec, NULL) < 0) fail("cannot open the encoder");
    avcodec_parameters_from_context(st->codecpar, c);
    st->time_base = c->time_base;
    if (avio_open(&oc->pb, path, AVIO_FLAG_WRITE) < 0 || avformat_write_header(oc, NULL) < 0)
        fail("cannot write the video");
    fr = av_frame_alloc();
    fr->format = c->pix_fmt;
    fr->width = w;
    fr->height = h;
    av_frame_get_buffer(fr, 0);
    for (int f = 0; f < fps * seconds; f++) {
        av_frame_make_writable(fr);
        draw(fr, f, fps);
        fr->pts = f;
        if (send(oc, c, st, fr) < 0) fail("encoding failed");
    }
    send(oc, c, st, NULL);
    av_write_trailer(oc);
    avio_closep(&oc->pb);
    av_frame_free(&fr);
    avcodec_free_context(&c);
    avformat_free_context(oc);
    return codec->name;
}

/* Frames/s of the reader alone: decoding (convert 0) or decoding and the
 * conversion to RGB (convert 1), on the calling thread; libavcodec's own
 * threads decode, or NVDEC (decoder). With convert, *digest gets an FNV-1a
 * hash of every frame's RGB rows in order (the pixels the records are made
 * of), so two decoders' frames can be compared. *used: the decoder that
 * gave the frames. Returns -1 when the decoder cannot open (why printed). */
static double read_rate(const char *path, int convert, patina_video_decoder decoder, int64_t *nframes,
                        uint64_t *digest, const char **used)
{
    patina_video_t *v;
    patina__vframe_t *f;
    patina_video_frame_t info;
    patina_video_opts_t vo;
    patina_status s;
    int64_t n = 0;
    uint64_t h = 0xcbf29ce484222325ull;
    double t0;
    patina_video_opts_init(&vo);
    vo.decoder = decoder;
    if ((s = patina_video_open(&v, path, &vo)) != PATINA_OK) {
        if (s == PATINA_E_UNAVAILABLE) {
            printf("  (%s)\n", patina_last_error());
            return -1;
        }
        die("open");
    }
    t0 = patina_now();
    while ((s = patina__video_next_raw(v, &f, &info)) == PATINA_OK) {
        if (convert) {
            patina_image_t img;
            if (patina__vframe_rgb(&img, f) != PATINA_OK) die("convert");
            for (int y = 0; y < img.height; y++) {
                const uint8_t *row = img.data + (size_t)y * img.stride;
                for (size_t x = 0; x < 3 * (size_t)img.width; x++) h = (h ^ row[x]) * 0x100000001b3ull;
            }
            patina_image_release(&img);
        }
        patina__vframe_free(&f);
        n++;
    }
    if (s != PATINA_DONE) die("read");
    t0 = patina_now() - t0;
    *used = patina_video_decoder_used(v);
    patina_video_free(v);
    *nframes = n;
    if (digest) *digest = h;
    return (double)n / t0;
}

/* ------------------------------------------------------------ live rows */

static void report(void *user, const char *path, patina_status s, const char *message);

/* The file as a camera sends it: its bytes up to the end of packet j
 * written at t0 + at[j] (the packet's decoding time), then the rest. */
typedef struct feed {
    const char *path;
    int fd;
    double t0;
    size_t n;
    int64_t *upto; /* (n) bytes of the file through packet j */
    double *at;    /* (n) seconds */
} feed_t;

static void feed_plan(feed_t *f)
{
    AVFormatContext *fc = NULL;
    AVPacket *pkt = av_packet_alloc();
    size_t cap = 0;
    int s;
    if (!pkt || avformat_open_input(&fc, f->path, NULL, NULL) < 0 || avformat_find_stream_info(fc, NULL) < 0)
        fail("live: cannot read the video's packets");
    s = av_find_best_stream(fc, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0);
    if (s < 0) fail("live: no video stream");
    while (av_read_frame(fc, pkt) >= 0) {
        if (pkt->stream_index == s && pkt->pos >= 0 && pkt->dts != AV_NOPTS_VALUE) {
            if (f->n == cap) {
                cap = cap ? 2 * cap : 1024;
                f->upto = realloc(f->upto, cap * sizeof *f->upto);
                f->at = realloc(f->at, cap * sizeof *f->at);
                if (!f->upto || !f->at) fail("live: out of memory");
            }
            f->upto[f->n] = pkt->pos + pkt->size;
            f->at[f->n] = fmax(0.0, (double)pkt->dts * av_q2d(fc->streams[s]->time_base));
            f->n++;
        }
        av_packet_unref(pkt);
    }
    av_packet_free(&pkt);
    avformat_close_input(&fc);
    if (!f->n) fail("live: the video's packets carry no positions");
}

static void *feed_main(void *arg)
{
    feed_t *f = arg;
    FILE *in = fopen(f->path, "rb");
    static char buf[1 << 16];
    int64_t off = 0;
    size_t j = 0;
    for (int done = 0; in && !done;) {
        int64_t want = j < f->n ? f->upto[j] : INT64_MAX;
        double wait = j < f->n ? f->t0 + f->at[j] - patina_now() : 0;
        if (wait > 0) usleep((useconds_t)(wait * 1e6));
        while (off < want) {
            size_t k = fread(buf, 1, (size_t)(want - off < (int64_t)sizeof buf ? want - off : (int64_t)sizeof buf), in);
            if (k == 0) {
                done = 1;
                break;
            }
            for (size_t w = 0; w < k;) {
                ssize_t r = write(f->fd, buf + w, k - w);
                if (r <= 0) {
                    done = 1;
                    break;
                }
                w += (size_t)r;
            }
            off += (int64_t)k;
        }
        j++;
    }
    if (in) fclose(in);
    close(f->fd);
    return NULL;
}

/* Each record's latency: stored at the progress call that counted it,
 * due at t0 + i / fps (frame i's time in the stream). */
typedef struct live_lat {
    double t0, fps;
    size_t n, cap;
    double *lat;
} live_lat_t;

static void live_progress(void *user, const patina_index_stats_t *s)
{
    live_lat_t *l = user;
    const double now = patina_now();
    for (; l->n < s->indexed && l->n < l->cap; l->n++) l->lat[l->n] = now - (l->t0 + (double)l->n / l->fps);
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void live_row(patina_context_t *ctx, const patina_extractor_t *ex, const char *file, const char *name,
                     patina_device device, int fps, int64_t nframes, uint64_t delay_ms, size_t batch,
                     const char *tmpdir)
{
    feed_t f = {.path = file};
    live_lat_t l = {.fps = fps, .cap = (size_t)nframes};
    int fds[2], saved;
    pthread_t th;
    patina_collection_t *c;
    patina_index_opts_t o;
    patina_index_stats_t st;
    const char *dash = "-";
    char coll[4096], row[32], cmd[8300];
    double duration, end;
    feed_plan(&f);
    duration = (double)nframes / fps;
    l.lat = calloc((size_t)nframes + 1, sizeof *l.lat);
    if (!l.lat || pipe(fds) != 0) fail("live: pipe");
    saved = dup(0);
    if (saved < 0 || dup2(fds[0], 0) != 0) fail("live: standard input");
    close(fds[0]);
    snprintf(coll, sizeof coll, "%s/bench_video_live_%d.patina", tmpdir, (int)getpid());
    if (patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0) != PATINA_OK) die("collection");
    patina_index_opts_init(&o);
    o.device = device;
    o.on_error = report;
    o.progress = live_progress;
    o.user = &l;
    o.stdin_key = "live";
    o.video_max_delay_ms = delay_ms;
    if (batch) o.batch = batch;
    f.fd = fds[1];
    f.t0 = l.t0 = patina_now();
    if (pthread_create(&th, NULL, feed_main, &f) != 0) fail("live: thread");
    if (patina_index_files(ctx, c, ex, &dash, 1, &o, &st) != PATINA_OK) die("index (live)");
    end = patina_now() - l.t0;
    pthread_join(th, NULL);
    dup2(saved, 0);
    close(saved);
    patina_collection_close(c);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", coll);
    if (system(cmd) != 0) fprintf(stderr, "bench_video: could not remove %s\n", coll);
    if (st.failed || l.n != (size_t)nframes) {
        printf("live %-9s %10zu frames stored of %lld\n", name, l.n, (long long)nframes);
        free(l.lat);
        free(f.upto);
        free(f.at);
        return;
    }
    qsort(l.lat, l.n, sizeof *l.lat, cmp_double);
    snprintf(row, sizeof row, "live %s", name);
    printf("%-14s %10zu %10.1f %8.2f  each frame stored after its time in the stream: p50 %.3f s, p99 %.3f s, "
           "max %.3f s; done %.3f s after the stream's end (max delay %.3f s)\n",
           row, l.n, (double)l.n / end, (double)l.n / end / fps, l.lat[l.n / 2], l.lat[(size_t)(0.99 * (double)(l.n - 1))],
           l.lat[l.n - 1], end - duration, (double)delay_ms / 1000);
    free(l.lat);
    free(f.upto);
    free(f.at);
}

static void report(void *user, const char *path, patina_status s, const char *message)
{
    (void)user;
    fprintf(stderr, "bench_video: %s: %s (%s)\n", path, patina_status_str(s), message);
}

int main(int argc, char **argv)
{
    const char *file = NULL, *family = "cedd", *devices = "cpu,gpu", *every = NULL, *codec = "(given)", *used;
    int nvdec = 1, live = 1;
    uint64_t max_delay_ms = 1000;
    uint64_t dig_cpu = 0, dig_gpu = 0;
    int64_t n_cpu = 0;
    int seconds = 10, w = 1920, h = 1080, fps = 30;
    size_t batch = 0;
    char path[4096], coll[4096];
    const char *tmpdir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    patina_context_t *ctx;
    patina_extractor_t *ex;
    int64_t n;
    double r;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--file") && v) file = argv[++i];
        else if (!strcmp(a, "--seconds") && v) seconds = atoi(argv[++i]);
        else if (!strcmp(a, "--size") && v) { if (sscanf(argv[++i], "%dx%d", &w, &h) != 2) fail("--size WxH"); }
        else if (!strcmp(a, "--fps") && v) fps = atoi(argv[++i]);
        else if (!strcmp(a, "--family") && v) family = argv[++i];
        else if (!strcmp(a, "--devices") && v) devices = argv[++i];
        else if (!strcmp(a, "--batch") && v) batch = (size_t)atol(argv[++i]);
        else if (!strcmp(a, "--every") && v) every = argv[++i];
        else if (!strcmp(a, "--no-nvdec")) nvdec = 0;
        else if (!strcmp(a, "--no-live")) live = 0;
        else if (!strcmp(a, "--max-delay") && v) max_delay_ms = (uint64_t)(strtod(argv[++i], NULL) * 1000 + 0.5);
        else {
            fprintf(stderr, "usage: bench_video [--file VIDEO] [--seconds S] [--size WxH] [--fps N] [--family F] "
                            "[--devices cpu,gpu] [--batch N] [--every N|Ss] [--no-nvdec] [--no-live] [--max-delay S]\n");
            return 2;
        }
    }
    if (!file) {
        double t0 = patina_now();
        snprintf(path, sizeof path, "%s/bench_video_%dx%d_%d.mkv", tmpdir, w, h, fps);
        codec = encode(path, w, h, fps, seconds);
        printf("encoded %d s of %dx%d at %d frames/s with %s into %s in %.1f s\n", seconds, w, h, fps, codec, path,
               patina_now() - t0);
        file = path;
    }
    if (patina_context_new(&ctx, NULL) != PATINA_OK) die("context");
    if (patina_extractor_new(&ex, family) != PATINA_OK) die("family");
    printf("bench_video: %s, family %s, %d threads\n\n", file, family, patina_context_threads(ctx));
    printf("%-14s %10s %10s %8s  %s\n", "row", "frames", "frames/s", "x real", "stages (s)");
    r = read_rate(file, 0, PATINA_VIDEO_DECODER_CPU, &n, NULL, &used);
    printf("%-14s %10lld %10.1f %8.2f\n", "decode", (long long)n, r, r / fps);
    r = read_rate(file, 1, PATINA_VIDEO_DECODER_CPU, &n_cpu, &dig_cpu, &used);
    printf("%-14s %10lld %10.1f %8.2f\n", "decode+rgb", (long long)n_cpu, r, r / fps);
    if (nvdec) {
        r = read_rate(file, 0, PATINA_VIDEO_DECODER_NVDEC, &n, NULL, &used);
        if (r < 0) nvdec = 0;
        else printf("%-14s %10lld %10.1f %8.2f  (frames from %s)\n", "decode nvdec", (long long)n, r, r / fps, used);
    }
    if (nvdec) {
        r = read_rate(file, 1, PATINA_VIDEO_DECODER_NVDEC, &n, &dig_gpu, &used);
        printf("%-14s %10lld %10.1f %8.2f  RGB of every frame %s the CPU decoder's (%lld frames, FNV-1a %016llx)\n",
               "nvdec+rgb", (long long)n, r, r / fps,
               n == n_cpu && dig_gpu == dig_cpu ? "identical to" : "DIFFERS from",
               (long long)n, (unsigned long long)dig_gpu);
    }
    for (const char *d = devices; *d;) {
        char name[16] = "";
        size_t len = strcspn(d, ",");
        patina_collection_t *c;
        patina_index_opts_t o;
        patina_index_stats_t st;
        const char *paths[1] = {file};
        char row[32];
        snprintf(name, sizeof name, "%.*s", (int)(len < 15 ? len : 15), d);
        d += len + (d[len] == ',');
        for (int dec = 0; dec < 1 + (nvdec && !strcmp(name, "gpu")); dec++) {
        patina_index_opts_init(&o);
        o.video_decoder = dec ? PATINA_VIDEO_DECODER_NVDEC : PATINA_VIDEO_DECODER_CPU;
        o.on_error = report;
        if (patina_device_parse(&o.device, name) != PATINA_OK) die("device");
        {
            patina_device got;
            if (patina_context_resolve(ctx, ex, o.device, &got) != PATINA_OK) {
                printf("e2e %-10s (%s)\n", name, patina_last_error());
                break;
            }
        }
        if (batch) o.batch = batch;
        if (every) {
            char *end;
            double x = strtod(every, &end);
            if (*end == 's') o.video_every_ms = (uint64_t)(x * 1000 + 0.5);
            else o.video_every_frames = (uint64_t)x;
        }
        snprintf(coll, sizeof coll, "%s/bench_video_%d.patina", tmpdir, (int)getpid());
        if (patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0) != PATINA_OK) die("collection");
        if (patina_index_files(ctx, c, ex, paths, 1, &o, &st) != PATINA_OK) die("index");
        if (st.failed) fail("the video failed to index");
        patina_collection_close(c);
        snprintf(row, sizeof row, "e2e %s%s", name, dec ? "+nvdec" : "");
        printf("%-14s %10llu %10.1f %8.2f  convert %.2f, extract %.2f, store %.2f, wait %.2f; wall %.2f\n", row,
               (unsigned long long)st.frames, (double)st.frames / st.seconds, (double)st.frames / st.seconds / fps,
               st.t_decode, st.t_extract, st.t_store, st.t_wait, st.seconds);
        {
            char cmd[8300];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", coll);
            if (system(cmd) != 0) fprintf(stderr, "bench_video: could not remove %s\n", coll);
        }
        if (live && !dec) live_row(ctx, ex, file, name, o.device, fps, n_cpu, max_delay_ms, batch, tmpdir);
        }
    }
    printf("\n(x real: frames/s over the video's %d frames/s; 'decode' and 'decode+rgb' run the reader on one thread "
           "with libavcodec's threads, the nvdec rows with the GPU's video decoders (surfaces copied to the host); "
           "e2e: the whole pipeline on all cores, +nvdec its frames decoded by NVDEC; live: the file sent through a pipe "
           "at its own pace, every frame, frames/s = frames over the wall time)\n", fps);
    patina_extractor_free(ex);
    patina_context_free(ctx);
    return 0;
}

#else

int main(void)
{
    printf("bench_video: this build reads no video (PATINA_VIDEO found no FFmpeg libraries)\n");
    return 0;
}

#endif
