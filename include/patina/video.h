/* Video files and streams as sequences of frames (docs/video.md): demuxed
 * and decoded by FFmpeg's libavformat and libavcodec on CPU threads, each
 * kept frame converted to 8-bit RGB by Patina's own integer Y'CbCr rule
 * (BT.601, BT.709 or BT.2020 by the stream's matrix, limited or full range;
 * src/algo/yuv.h), so a frame's pixels, and its descriptors, are defined by
 * the stream alone. Sampling chooses the frames: every frame, one every N
 * frames or every S seconds, and optionally only shot changes (a colour
 * histogram distance to the last kept frame).
 *
 * The indexing pipeline (patina_index_files) takes video files by their
 * first bytes and stores each kept frame under the key
 * "FILEKEY#t=SECONDS&f=FRAME" (patina_video_key). This header is the
 * reader the pipeline uses, for front ends that want frames themselves.
 * Built only with FFmpeg's libraries (CMake PATINA_VIDEO); without them
 * patina_video_available() is 0 and patina_video_open fails with
 * PATINA_E_UNAVAILABLE. */
#ifndef PATINA_VIDEO_H
#define PATINA_VIDEO_H

#include <stddef.h>
#include <stdint.h>
#include "patina/image.h"
#include "patina/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct patina_video patina_video_t;

/* Which frames a reader returns. The candidates are every frame, or one
 * every `every_frames` frames (frames 0, N, 2N, ...), or, with every_ms,
 * the first frame at or after each multiple of every_ms milliseconds from
 * the first frame's time (0, S, 2S, ...; a gap longer than S gives one
 * frame, not a burst). With shots > 0 a candidate is kept only when the
 * distance between its colour histogram and the last kept frame's is at
 * least `shots` (the first frame is always kept); see docs/video.md for
 * the histogram and the distance (0..1). */
/* Who decodes the compressed frames. H.264 and HEVC decoding are exact by
 * their standards (every conforming decoder gives the same samples), and
 * the Y'CbCr to RGB conversion is Patina's on every path, so the frames'
 * pixels are the same whichever decodes them.
 *   CPU    libavcodec on CPU threads (the default);
 *   NVDEC  the GPU's video decoders through FFmpeg's nvdec hwaccel (device
 *          `gpu`), for the streams it takes: H.264 and HEVC (the codecs
 *          with the hwaccel in Debian's FFmpeg), 8-bit 4:2:0; any other
 *          stream is decoded on the CPU, as FFmpeg falls back. No usable device or an
 *          FFmpeg without the hwaccel: PATINA_E_UNAVAILABLE at open;
 *   AUTO   NVDEC where it opens, else the CPU. */
typedef enum patina_video_decoder {
    PATINA_VIDEO_DECODER_CPU = 0,
    PATINA_VIDEO_DECODER_NVDEC = 1,
    PATINA_VIDEO_DECODER_AUTO = 2
} patina_video_decoder;

typedef struct patina_video_opts {
    uint64_t every_frames; /* 0 or 1: every frame */
    uint64_t every_ms;     /* 0: off; every_frames and every_ms are not both > 1 */
    double shots;          /* 0: off; else in (0, 1] */
    int threads;           /* libavcodec's decoding threads; 0: its own count, at most patina_cpu_count() */
    patina_limits_t limits;/* max_pixels bounds the frame size (0: the default) */
    patina_video_decoder decoder; /* default PATINA_VIDEO_DECODER_CPU */
    int gpu;               /* NVDEC: the CUDA device (0 .. count - 1) */
    /* A stream's (a pipe's, standard input's) delay budget in milliseconds:
     * libavcodec's frame threads hold one frame each before the first comes
     * out, so a stream decodes with at most max(1, latency_ms x its frame
     * rate / 1000) of them (threads, or the automatic count, above that).
     * 0: no bound. Files are read at full speed whatever this is.
     * patina_index_files passes its video_max_delay_ms. */
    uint64_t latency_ms;
} patina_video_opts_t;

/* Defaults: every frame, no shot detection, threads 0, default limits,
 * decoder CPU on device 0. */
PATINA_API void patina_video_opts_init(patina_video_opts_t *opts);

/* Where a frame comes from. */
typedef struct patina_video_frame {
    int64_t frame;      /* its number in the stream: frames the decoder gave before it (0-based) */
    int64_t t_ms;       /* its presentation time from the stream's start, in milliseconds (rounded) */
    double distance;    /* with shots: its histogram distance to the previous kept frame (first: 1) */
    int width, height;
} patina_video_frame_t;

/* 1 when this build reads video (FFmpeg's libraries linked in). */
PATINA_API int patina_video_available(void);

/* 1 when the first bytes (12 for most containers, 377 for MPEG-TS) are those of a
 * video container Patina takes in a folder walk: ISO BMFF (MP4, MOV, 3GP),
 * Matroska/WebM, AVI, MPEG-TS, MPEG-PS, FLV, Ogg, ASF/WMV, NUT or
 * YUV4MPEG2. The name never matters. */
PATINA_API int patina_video_sniff(const void *data, size_t size);

/* Opens a video file, or standard input when path is "-" (read as a
 * stream: containers that need seeking, like an MP4 whose index is at its
 * end, fail). Picks the stream libavformat calls best among the video
 * streams. opts may be NULL for the defaults. Fails with
 * PATINA_E_NOTFOUND/PATINA_E_IO (the file), PATINA_E_FORMAT (no video
 * stream, or an unknown container or codec), PATINA_E_CORRUPT (damaged
 * headers), PATINA_E_LIMIT (frames over max_pixels), PATINA_E_UNAVAILABLE
 * (built without video); the message names the path. The reader is used
 * from one thread at a time; free it with patina_video_free. */
PATINA_API patina_status patina_video_open(patina_video_t **v, const char *path, const patina_video_opts_t *opts);

/* The next kept frame: img (caller storage, released with
 * patina_image_release) gets its RGB pixels, info (may be NULL) where it
 * is. PATINA_DONE (img empty) at the end of the stream. A stream that ends
 * in damaged or missing data (a truncated file) gives its good frames,
 * then PATINA_E_CORRUPT naming the path and the position instead of
 * PATINA_DONE; packets the decoder rejects are skipped and counted, and
 * make the end PATINA_E_CORRUPT too (patina_video_damaged). */
PATINA_API patina_status patina_video_next(patina_video_t *v, patina_image_t *img, patina_video_frame_t *info);

/* Packets the decoder rejected so far. */
PATINA_API uint64_t patina_video_damaged(const patina_video_t *v);

/* Which decoder gives this reader's frames: "libavcodec" (CPU threads) or
 * "nvdec" (the GPU's video decoders); a stream NVDEC does not take reports
 * "libavcodec" once its first frame is decoded. NULL for NULL. */
PATINA_API const char *patina_video_decoder_used(const patina_video_t *v);

/* Parses "cpu", "nvdec" or "auto" (PATINA_E_INVALID naming the word
 * otherwise). */
PATINA_API patina_status patina_video_decoder_parse(patina_video_decoder *d, const char *name);

/* Frees the reader (NULL accepted). */
PATINA_API void patina_video_free(patina_video_t *v);

/* The key of a frame: "FILEKEY#t=SECONDS&f=FRAME", SECONDS with exactly
 * three decimals (t_ms / 1000; a minus sign when negative), FRAME the frame
 * number: "clip.mp4#t=12.345&f=370". Writes at most size bytes (with the
 * terminating NUL); PATINA_E_LIMIT when it does not fit. */
PATINA_API patina_status patina_video_key(char *buf, size_t size, const char *file_key,
                                          const patina_video_frame_t *f);

/* Parses a frame key made by patina_video_key: 1 with *t_ms and *frame
 * set (either may be NULL) and *file_len the length of the FILEKEY part
 * (may be NULL), else 0 (an image's key). */
PATINA_API int patina_video_key_parse(const char *key, int64_t *t_ms, int64_t *frame, size_t *file_len);

#ifdef __cplusplus
}
#endif
#endif
