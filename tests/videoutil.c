/* Test videos encoded with libavcodec (videoutil.h). */
#include <string.h>

#include <libavutil/opt.h>

#include "videoutil.h"

int tv_send(AVFormatContext *oc, AVCodecContext *c, AVStream *st, AVFrame *fr)
{
    AVPacket *pkt = av_packet_alloc();
    int r = pkt ? avcodec_send_frame(c, fr) : AVERROR(ENOMEM);
    while (r >= 0) {
        r = avcodec_receive_packet(c, pkt);
        if (r < 0) break;
        av_packet_rescale_ts(pkt, c->time_base, st->time_base);
        pkt->stream_index = st->index;
        if (av_interleaved_write_frame(oc, pkt) < 0) r = -1;
    }
    av_packet_free(&pkt);
    return r == AVERROR(EAGAIN) || r == AVERROR_EOF ? 0 : r;
}

int tv_write_video(const char *path, const tv_spec_t *s)
{
    AVFormatContext *oc = NULL;
    const AVCodec *codec = avcodec_find_encoder_by_name(s->encoder ? s->encoder : "libx264");
    AVCodecContext *c = NULL;
    AVStream *st;
    AVFrame *fr = NULL;
    int ok;
    if (!codec && !s->encoder) codec = avcodec_find_encoder(AV_CODEC_ID_MPEG4);
    if (!codec || avformat_alloc_output_context2(&oc, NULL, s->mux, path) < 0) return -1;
    st = avformat_new_stream(oc, NULL);
    c = avcodec_alloc_context3(codec);
    fr = av_frame_alloc();
    ok = st && c && fr;
    if (ok) {
        c->width = s->w;
        c->height = s->h;
        c->time_base = (AVRational){1, s->fps};
        c->framerate = (AVRational){s->fps, 1};
        c->pix_fmt = s->pf;
        c->gop_size = s->gop;
        c->max_b_frames = 2;
        c->colorspace = s->space;
        c->color_range = AVCOL_RANGE_MPEG;
        if (!strcmp(codec->name, "libx264") || !strcmp(codec->name, "libx265"))
            av_opt_set(c->priv_data, "preset", "ultrafast", 0);
        if (!strcmp(codec->name, "libx265")) av_opt_set(c->priv_data, "x265-params", "log-level=none", 0);
        if (oc->oformat->flags & AVFMT_GLOBALHEADER) c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
        ok = avcodec_open2(c, codec, NULL) >= 0 && avcodec_parameters_from_context(st->codecpar, c) >= 0;
    }
    if (ok) {
        st->time_base = c->time_base;
        ok = avio_open(&oc->pb, path, AVIO_FLAG_WRITE) >= 0 && avformat_write_header(oc, NULL) >= 0;
        fr->format = s->pf;
        fr->width = s->w;
        fr->height = s->h;
        ok = ok && av_frame_get_buffer(fr, 0) >= 0;
        for (int f = 0; ok && f < s->frames; f++) {
            ok = av_frame_make_writable(fr) >= 0;
            if (ok) s->draw(fr, f);
            fr->pts = f;
            ok = ok && tv_send(oc, c, st, fr) == 0;
        }
        ok = ok && tv_send(oc, c, st, NULL) == 0 && av_write_trailer(oc) >= 0;
        avio_closep(&oc->pb);
    }
    av_frame_free(&fr);
    avcodec_free_context(&c);
    avformat_free_context(oc);
    return ok ? 0 : -1;
}
