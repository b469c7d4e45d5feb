/* Images and image loading.
 *
 * A patina_image_t is 8-bit interleaved RGB, row-major, rows `stride` bytes
 * apart: pixel (x, y) channel c is data[y*stride + 3*x + c].
 * Loaders sniff the content (never the file name): JPEG (libjpeg-turbo),
 * PNG (libpng) and binary PNM (P5 grey, P6 colour; maxval 1..65535).
 * Decoding from a file reads the file into memory and takes the same path as
 * decoding from memory. Every decode reads the header first, checks the
 * limits against the dimensions it declares, and only then allocates and
 * decodes: a small file declaring a huge image (a decompression bomb) costs
 * nothing but its header.
 *
 * Decoder warnings. libjpeg-turbo and libpng go on decoding some damaged
 * files with a warning ("Corrupt JPEG data: 3 extraneous bytes before marker
 * 0xd9", "premature end of data segment", a bad CRC in an ancillary PNG
 * chunk); the pixels are then partly made up. The library never prints them:
 * patina_image_decode_with reports them (patina_decode_report_t), and with
 * patina_decode_opts_t.strict such a file fails with PATINA_E_CORRUPT.
 * (Data that ends before the image does is always an error, strict or not.)
 *
 * Pixel semantics are those LIRE's CEDD sees through Java ImageIO (see
 * docs/images.md and docs/cedd-spec.md §1): alpha is composited over
 * black, 16-bit RGB is rounded, 16-bit grey keeps its high byte, grey+alpha
 * (and grey with a tRNS key, which Java makes grey+alpha) gets the sRGB lift.
 * Every failure names the input in the thread's message, e.g.
 * "decode: truncated PNG data in 'x.png'". Safe to call from many threads. */
#ifndef PATINA_IMAGE_H
#define PATINA_IMAGE_H

#include <stddef.h>
#include <stdint.h>
#include "patina/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum patina_format {
    PATINA_FORMAT_UNKNOWN = 0,
    PATINA_FORMAT_JPEG,
    PATINA_FORMAT_PNG,
    PATINA_FORMAT_PNM
} patina_format;

/* Safe defaults: 100 megapixels (10^8 pixels, 300 MB decoded), 1 GiB of
 * encoded input. 0 means "default". */
typedef struct patina_limits {
    uint64_t max_pixels;      /* width * height an image may declare */
    uint64_t max_file_bytes;  /* bytes of an encoded file */
} patina_limits_t;

#define PATINA_DEFAULT_MAX_PIXELS (100ull * 1000 * 1000)
#define PATINA_DEFAULT_MAX_FILE_BYTES (1024ull * 1024 * 1024)

/* Fills lim with the defaults above. */
PATINA_API void patina_limits_init(patina_limits_t *lim);

typedef struct patina_image_info {
    patina_format format;
    int width, height;
    int channels;       /* in the file: 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA */
    int bit_depth;      /* in the file: 1,2,4,8,16 */
} patina_image_info_t;

typedef struct patina_image {
    int width, height;
    size_t stride;      /* bytes between rows, >= 3*width */
    uint8_t *data;      /* (height, stride) u8; owned when `owned` != 0 */
    int owned;
} patina_image_t;

/* Name of a format ("jpeg", "png", "pnm", "unknown"). */
PATINA_API const char *patina_format_name(patina_format f);

/* Sniffs the format from the first bytes. */
PATINA_API patina_format patina_format_sniff(const void *data, size_t size);

/* Reads dimensions and type from the header only, without decoding pixels
 * or allocating for them. `name` only labels error messages (may be NULL).
 * channels: palette PNGs count as 3. Fails like decode for empty, truncated
 * headers, zero width/height and unsupported variants (12-bit JPEG, ASCII PNM);
 * limits are not checked here. */
PATINA_API patina_status patina_image_probe(patina_image_info_t *info, const void *data, size_t size,
                                            const char *name);

/* PATINA_E_LIMIT when an image of info's dimensions is over lim->max_pixels
 * (lim may be NULL for the default), with a message naming `name`:
 * "decode: 16384x16384 = 268435456 pixels exceeds the limit of 100000000 in
 * 'x.jpg'". The check every decode makes before allocating. */
PATINA_API patina_status patina_limits_check(const patina_limits_t *lim, const patina_image_info_t *info,
                                             const char *name);

/* Decodes `data` into `img` (caller storage, released with
 * patina_image_release). `lim` may be NULL for defaults. On failure `img` is
 * left empty. Decoder warnings are accepted silently here; see
 * patina_image_decode_with. */
PATINA_API patina_status patina_image_decode(patina_image_t *img, const void *data, size_t size,
                                             const patina_limits_t *lim, const char *name);

/* Options of patina_image_decode_with. */
typedef struct patina_decode_opts {
    patina_limits_t limits; /* 0 fields = defaults */
    int strict;             /* 1: a decoder warning fails the decode with PATINA_E_CORRUPT */
    /* 1: a JPEG is turned as its EXIF Orientation tag (IFD0, 0x0112) says,
     * so that it comes out upright (orientations 5-8 swap width and height;
     * probe still reports the stored size). 0 (the default): pixels as
     * stored, which is what LIRE sees, so descriptors stay identical to its.
     * PNG and PNM are never turned. */
    int apply_orientation;
} patina_decode_opts_t;

/* Fills opts with the defaults: default limits, not strict, no orientation. */
PATINA_API void patina_decode_opts_init(patina_decode_opts_t *opts);

#define PATINA_WARNING_MAX 512

/* What a decode had to say besides its status. */
typedef struct patina_decode_report {
    unsigned warnings;                /* decoder warnings; 0 = clean. libjpeg-turbo's TurboJPEG API
                                         tells whether there were any, not how many: a JPEG gives
                                         0 or 1 */
    char warning[PATINA_WARNING_MAX]; /* the first, naming the input: "decode: warning in 'x.jpg'
                                         (libjpeg: Corrupt JPEG data: 4 extraneous bytes before
                                         marker 0xd9)"; "" when none */
} patina_decode_report_t;

/* patina_image_decode with options and a report. opts may be NULL for the
 * defaults, report may be NULL; the report is filled (zeroed first) whether
 * or not the decode succeeds. With opts->strict a warning makes the decode
 * fail with PATINA_E_CORRUPT (the thread's message is the warning followed by
 * "; strict decoding rejects it") and img is left empty. */
PATINA_API patina_status patina_image_decode_with(patina_image_t *img, patina_decode_report_t *report,
                                                  const void *data, size_t size,
                                                  const patina_decode_opts_t *opts, const char *name);

/* Reads a whole file into a malloc'd buffer (caller frees with free(); an
 * empty file gives size 0 and a buffer to free). Fails with PATINA_E_LIMIT
 * when larger than lim->max_file_bytes (checked before reading),
 * PATINA_E_NOTFOUND when the file does not exist, PATINA_E_IO otherwise. */
PATINA_API patina_status patina_file_read(void **data, size_t *size, const char *path,
                                          const patina_limits_t *lim);

/* patina_file_read + patina_image_decode. */
PATINA_API patina_status patina_image_load(patina_image_t *img, const char *path, const patina_limits_t *lim);

/* patina_file_read + patina_image_decode_with. */
PATINA_API patina_status patina_image_load_with(patina_image_t *img, patina_decode_report_t *report,
                                                const char *path, const patina_decode_opts_t *opts);

/* Allocates an uninitialised width x height image (stride = 3*width). */
PATINA_API patina_status patina_image_init(patina_image_t *img, int width, int height);

/* Wraps caller memory (not owned, not freed by release). */
PATINA_API void patina_image_wrap(patina_image_t *img, uint8_t *data, int width, int height, size_t stride);

/* The project's one colour-to-grey rule (BT.601 luma, 14-bit fixed point,
 * rounded; identical to OpenCV's RGB2GRAY on 8-bit data): grey is
 * (height, width) u8, caller storage. A grey input (r=g=b) maps to itself. */
PATINA_API patina_status patina_image_to_grey(uint8_t *grey, const patina_image_t *img);

/* Frees owned pixels and zeroes the struct. Accepts NULL and empty images. */
PATINA_API void patina_image_release(patina_image_t *img);

#ifdef __cplusplus
}
#endif
#endif
