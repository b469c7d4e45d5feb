/* Image loaders: the internal interface between image.c (sniffing, limits,
 * allocation, file reading) and the per-format loaders (jpeg.c, png.c,
 * pnm.c), which register in a table (loaders.c) as the descriptor families
 * do; image.c reads only the table. Not installed; not part of the public
 * API.
 *
 * Every loader has three entry points:
 *   sniff  - says whether the first bytes are this format's magic (a prefix
 *            of at least 2 bytes is enough, so that a file cut short inside
 *            its signature is reported as truncated by its loader);
 *   probe  - reads the header only, fills patina_image_info_t, never decodes;
 *   decode - decodes into an image that image.c has already allocated with the
 *            width and height the probe reported (stride >= 3*width).
 * Both set the error message themselves, prefixed with src->what ("probe" or
 * "decode") and naming src->name, and return the status. A decoder warning
 * (damaged data the decoder went on with) goes through patina_image__warning,
 * never to stderr. */
#ifndef PATINA_IMAGE_LOADERS_H
#define PATINA_IMAGE_LOADERS_H

#include <stddef.h>
#include <stdint.h>

#include "patina/image.h"

/* One encoded input, borrowed for the duration of a call. */
typedef struct patina_image_src {
    const uint8_t *data; /* (size) u8: the encoded file bytes */
    size_t size;         /* > 0 */
    const char *name;    /* label for messages; never NULL ("<memory>" when unnamed) */
    const char *what;    /* message prefix: "probe" or "decode" */
    int strict;          /* decode: warnings are errors */
    patina_decode_report_t *report; /* decode: never NULL (image.c passes its own when the caller
                                       did not); probe: NULL */
} patina_image_src_t;

/* Records a decoder warning (printf-style text naming src->name) in
 * src->report. Returns PATINA_OK, or with src->strict fails with
 * PATINA_E_CORRUPT and the warning as the message; the loader returns that. */
patina_status patina_image__warning(const patina_image_src_t *src, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* One format's loader (defined in its file, listed in loaders.c). */
typedef struct patina_image_loader {
    patina_format format;
    const char *name; /* patina_format_name's answer: "jpeg", "png", "pnm" */
    /* p (size) u8, size >= 2: non-zero when p starts with (a prefix of) the magic. */
    int (*sniff)(const uint8_t *p, size_t size);
    patina_status (*probe)(patina_image_info_t *info, const patina_image_src_t *src);
    patina_status (*decode)(patina_image_t *img, const patina_image_src_t *src);
} patina_image_loader_t;

extern const patina_image_loader_t patina_image__loader_jpeg; /* jpeg.c */
extern const patina_image_loader_t patina_image__loader_png;  /* png.c */
extern const patina_image_loader_t patina_image__loader_pnm;  /* pnm.c */

/* The EXIF Orientation (1..8) of a JPEG: the tag 0x0112 of IFD0 in the first
 * APP1 "Exif" segment that has it, before the first SOS; 1 (as stored) when
 * there is none, it is out of range, or the data is not a JPEG. Reads only
 * inside p[0..n), whatever the bytes. */
int patina_image__jpeg_orientation(const uint8_t *p, size_t n);

/* The loaders in sniffing order, NULL-terminated (loaders.c). */
extern const patina_image_loader_t *const patina_image__loaders[];
/* The loader of format f, or NULL. */
const patina_image_loader_t *patina_image__loader(patina_format f);

/* Round-to-nearest 16 -> 8 bit, (v*255 + 32767) / 65535 = round(v/257);
 * what Java ImageIO gives for 16-bit RGB(A) PNGs (cedd.md §1). */
static inline uint8_t patina_image__round16(unsigned v)
{
    return (uint8_t)((v * 255u + 32767u) / 65535u);
}

/* c composited over black with alpha a, both 8-bit: round(c*a/255). */
static inline uint8_t patina_image__over_black(unsigned c, unsigned a)
{
    return (uint8_t)((c * a + 127u) / 255u);
}

#endif
