/* The video reader's internal side (include/patina/video.h is the public
 * one): the indexing pipeline takes each kept frame still in the decoder's
 * pixel format and converts a batch of them to RGB on its worker threads,
 * so that one thread's decoding does not also carry every frame's colour
 * conversion. Not installed; not part of the public API. */
#ifndef PATINA_IMAGE_VIDEO_H
#define PATINA_IMAGE_VIDEO_H

#include <stddef.h>
#include <stdint.h>

#include "patina/video.h"

/* A kept frame as decoded (a reference to FFmpeg's frame, or libswscale's
 * RGB for formats other than 8-bit Y'CbCr and grey), with the matrix and
 * range it is converted with. */
typedef struct patina__vframe patina__vframe_t;

/* patina_video_next without the conversion: *out (freed with
 * patina__vframe_free) holds the frame. Same statuses. */
patina_status patina__video_next_raw(patina_video_t *v, patina__vframe_t **out, patina_video_frame_t *info);

/* Bytes the frame holds (its planes), for the pipeline's memory budget. */
size_t patina__vframe_bytes(const patina__vframe_t *f);

/* Converts f to RGB into img (caller storage; allocated here). May run on
 * any thread, many frames at once. PATINA_E_NOMEM only. */
patina_status patina__vframe_rgb(patina_image_t *img, const patina__vframe_t *f);

/* patina__vframe_rgb into an image the caller has (f's width and height,
 * stride >= 3 x width): a pipeline reuses its buffers frame after frame. */
patina_status patina__vframe_rgb_into(const patina_image_t *img, const patina__vframe_t *f);

/* The frame's size. */
int patina__vframe_width(const patina__vframe_t *f);
int patina__vframe_height(const patina__vframe_t *f);

/* Frees f and sets *f to NULL (NULL and *f NULL accepted). */
void patina__vframe_free(patina__vframe_t **f);

#endif
