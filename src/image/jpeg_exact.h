/* Exact JPEG decoding in two stages (src/image/jpeg_exact.c): entropy
 * decoding by libjpeg-turbo itself (jpeg_read_coefficients: every mode it
 * reads, baseline, progressive, arithmetic, restart intervals), then the
 * integer arithmetic after it (src/algo/jpeg_exact_core.h) on the CPU here or
 * on the GPU (src/gpu/jpeg_exact.cu). The pixels are byte-identical to the CPU
 * path's (src/image/jpeg.c: TurboJPEG, accurate IDCT, fancy upsampling, and
 * its CMYK rule).
 *
 * A file is "taken" only when that is certain: anything libjpeg warns about
 * (damaged data, truncation, extraneous bytes), progressive files that
 * libjpeg would smooth (incomplete coefficient refinement), more than 500
 * scans (TurboJPEG's limit), unusual sampling or colour spaces, and blocks
 * outside the exact range (jpeg_exact_core.h) are "not taken"
 * (PATINA_E_FORMAT with the reason): the caller decodes those with
 * libjpeg-turbo, which then gives the CPU path's result, warnings and errors
 * included. Orientation is never applied here.
 *
 * Use: patina__jpegx_open (header; geometry and block count in the jx_image_t),
 * the caller provides (nblocks, 64) s16 of storage, patina__jpegx_read fills
 * it, patina__jpegx_close; then patina__jpegx_pixels (or the GPU) turns it
 * into RGB. patina__jpegx_decode does all of it for one image. Thread-safe:
 * each reader is its own libjpeg decompressor. */
#ifndef PATINA_IMAGE_JPEG_EXACT_H
#define PATINA_IMAGE_JPEG_EXACT_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"
#include "patina/image.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One component of a taken image. */
typedef struct jx_comp {
    int32_t bw, bh;      /* blocks stored: per block row, block rows (width/height_in_blocks) */
    int32_t dw, dh;      /* the component's samples (downsampled_width/_height), <= 8bw x 8bh */
    int32_t up, rh, rv;  /* JX_UP_* method; replication factors of JX_UP_REPL */
    uint16_t q[64];      /* quantisation table, natural order (filled by _read) */
    uint64_t first;      /* index of its first block in the image's (nblocks, 64) array */
} jx_comp_t;

typedef struct jx_image {
    int32_t width, height;
    int32_t ncomp;       /* 1, 3 or 4 */
    int32_t cs;          /* JX_CS_* */
    int32_t adobe;       /* CMYK/YCCK: an Adobe APP14 marker (components stored inverted) */
    int32_t progressive;
    jx_comp_t comp[4];
    uint64_t nblocks;    /* blocks of all components */
} jx_image_t;

typedef struct patina_jpegx_reader patina_jpegx_reader_t;

/* Reads the header of data[0..size) (borrowed until _close). PATINA_OK: taken,
 * *r open and im filled (but q); PATINA_E_FORMAT: not taken (the message says
 * why; *r is NULL); PATINA_E_NOMEM. */
patina_status patina__jpegx_open(patina_jpegx_reader_t **r, jx_image_t *im, const void *data, size_t size,
                                 const char *name);
/* Entropy-decodes into coef, (im->nblocks, 64) s16, blocks of component c
 * from im->comp[c].first in raster order; fills the quantisation tables.
 * PATINA_OK, or PATINA_E_FORMAT when the file turned out not to be taken
 * (a warning, an error, smoothing, too many scans). */
patina_status patina__jpegx_read(patina_jpegx_reader_t *r, jx_image_t *im, int16_t *coef);
void patina__jpegx_close(patina_jpegx_reader_t *r); /* accepts NULL */

/* The reference for the stage after entropy decoding: coef as _read gives it
 * to RGB at rgb + y * stride. 1, or 0 when a block leaves the exact range
 * (not taken; rgb unspecified). Allocates the component planes (-1 when it
 * cannot). */
int patina__jpegx_pixels(const jx_image_t *im, const int16_t *coef, uint8_t *rgb, size_t stride);

/* All of the above for one image into img (allocated here, RGB, stride
 * 3 * width). PATINA_E_FORMAT: not taken (img empty). */
patina_status patina__jpegx_decode(patina_image_t *img, const void *data, size_t size, const char *name);

#ifdef __cplusplus
}
#endif
#endif
