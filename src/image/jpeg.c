/* JPEG loader: TurboJPEG (libjpeg-turbo) decoding to 8-bit RGB.
 *
 * Decoding uses libjpeg's defaults, which are what Java ImageIO's bundled
 * libjpeg 6b does: the accurate integer IDCT (ISLOW) and "fancy" (triangle
 * filter) chroma upsampling. Grey JPEGs come out as r = g = b.
 * CMYK and YCCK JPEGs (four components; libjpeg turns YCCK into CMYK) are
 * decoded to CMYK and converted to RGB by the naive formula common decoders
 * use (Pillow, browsers without a colour profile), no colour management:
 * with ink amounts c, m, y, k in 0..255, R = round((255-c)(255-k)/255), and
 * likewise G from m, B from y. A file with an Adobe APP14 marker stores
 * every component inverted (255 - ink: Photoshop's convention, which
 * libjpeg reports as saw_Adobe_marker), so there R = round(C*K/255) of the
 * stored values; see cmyk_to_rgb. Java ImageIO cannot read these files at
 * all, so there is no LIRE reference to match. Embedded ICC profiles are
 * ignored (Java converts through LittleCMS; see docs/images.md for the size
 * of that difference).
 *
 * Besides TurboJPEG, this file walks the JPEG marker structure itself (a
 * bounds-checked scan, no decoding) for two things TurboJPEG does not report
 * directly: the frame's sample precision (12-bit and lossless JPEGs are
 * unsupported formats, not corrupt files) and whether the data was cut
 * short. libjpeg fills a truncated file with grey and only warns; here a
 * truncated file is always PATINA_E_CORRUPT. Other libjpeg warnings (corrupt
 * entropy data, extraneous bytes) leave a decoded image, as Java accepts
 * them; each decode that had one reports it through patina_image__warning
 * (TurboJPEG keeps the first warning's text and no count), which fails the
 * decode in strict mode. TurboJPEG itself never prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <turbojpeg.h>

#include "core/internal.h"
#include "image/loaders.h"

#define JPEG_MSG_MAX 256 /* bytes kept of a TurboJPEG message (libjpeg's own limit is 200) */

/* ---------------------------------------------------------- marker walk */

typedef enum walk_result {
    WALK_OK,        /* reached EOI (full walk) or the first SOS (header walk) */
    WALK_TRUNCATED, /* the data ended before that */
    WALK_BAD        /* the marker structure is malformed */
} walk_result;

typedef struct jpeg_walk {
    int have_sof;   /* a frame header (SOFn) was seen */
    int sof;        /* its marker byte, 0xC0..0xCF */
    int precision;  /* bits per sample */
    int components;
    int reached_sos;
    int adobe;      /* an APP14 "Adobe" segment of >= 12 data bytes came before the first SOS
                       (libjpeg's test for saw_Adobe_marker) */
} jpeg_walk_t;

static unsigned be16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }

/* Skips entropy-coded data starting at *pos: stops on the first 0xFF that
 * starts a real marker (not a stuffed 0xFF00, a fill 0xFFFF or an RSTn). */
static walk_result skip_entropy(const uint8_t *p, size_t n, size_t *pos)
{
    size_t i = *pos;
    for (;;) {
        const uint8_t *q = i < n ? memchr(p + i, 0xFF, n - i) : NULL;
        uint8_t next;
        if (!q) return WALK_TRUNCATED;
        i = (size_t)(q - p);
        if (i + 1 >= n) return WALK_TRUNCATED;
        next = p[i + 1];
        if (next == 0x00 || (next >= 0xD0 && next <= 0xD7)) {
            i += 2;
        } else if (next == 0xFF) {
            i += 1;
        } else {
            *pos = i;
            return WALK_OK;
        }
    }
}

/* Walks the markers of p[0..n). With header_only it stops at the first SOS;
 * otherwise it follows every segment and scan up to EOI. */
static walk_result jpeg_walk(jpeg_walk_t *w, const uint8_t *p, size_t n, int header_only)
{
    size_t pos = 2;
    memset(w, 0, sizeof *w);
    if (n < 2) return WALK_TRUNCATED;
    if (p[0] != 0xFF || p[1] != 0xD8) return WALK_BAD;
    for (;;) {
        unsigned m, len;
        /* libjpeg skips garbage before a marker (with a warning); so do we. */
        if (pos < n && p[pos] != 0xFF) {
            const uint8_t *q = memchr(p + pos, 0xFF, n - pos);
            if (!q) return WALK_TRUNCATED;
            pos = (size_t)(q - p);
        }
        while (pos < n && p[pos] == 0xFF) pos++; /* fill bytes */
        if (pos >= n) return WALK_TRUNCATED;
        m = p[pos++];
        if (m == 0xD9) return WALK_OK; /* EOI (header walk: before any SOS, so no image) */
        if (m == 0xD8) return WALK_BAD;                        /* a second SOI */
        if (m == 0x00 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue; /* no length */
        if (n - pos < 2) return WALK_TRUNCATED;
        len = be16(p + pos);
        if (len < 2) return WALK_BAD;
        if (len > n - pos) return WALK_TRUNCATED;
        if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC && !w->have_sof) {
            if (len < 8) return WALK_BAD;
            w->have_sof = 1;
            w->sof = (int)m;
            w->precision = p[pos + 2];
            w->components = p[pos + 7];
        }
        if (m == 0xEE && !w->reached_sos && len - 2 >= 12 && !memcmp(p + pos + 2, "Adobe", 5)) w->adobe = 1;
        pos += len;
        if (m == 0xDA) { /* SOS: entropy-coded data follows */
            w->reached_sos = 1;
            if (header_only) return WALK_OK;
            if (skip_entropy(p, n, &pos) != WALK_OK) return WALK_TRUNCATED;
        }
    }
}

/* ------------------------------------------------------ EXIF orientation */

static unsigned tiff16(const uint8_t *p, int be) { return be ? (unsigned)p[0] << 8 | p[1] : (unsigned)p[1] << 8 | p[0]; }

static uint32_t tiff32(const uint8_t *p, int be)
{
    return be ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]
              : (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

/* The Orientation tag (0x0112) of IFD0 in one APP1 segment's data t[0..n)
 * (after the length field), or 0 when the segment has none. Every offset is
 * checked against n before it is read: the bytes are the file's. */
static int exif_orientation(const uint8_t *t, size_t n)
{
    uint32_t ifd;
    unsigned count, i;
    int be;
    if (n < 6 + 8 || memcmp(t, "Exif\0\0", 6)) return 0;
    t += 6, n -= 6; /* the TIFF header and everything its offsets count from */
    if (!memcmp(t, "MM", 2)) be = 1;
    else if (!memcmp(t, "II", 2)) be = 0;
    else return 0;
    if (tiff16(t + 2, be) != 42) return 0;
    ifd = tiff32(t + 4, be);
    if (ifd < 8 || ifd > n - 2) return 0;
    count = tiff16(t + ifd, be);
    for (i = 0; i < count; i++) {
        size_t e = (size_t)ifd + 2 + (size_t)i * 12; /* entry: tag, type, count (4), value (4) */
        if (e > n || n - e < 12) return 0;
        if (tiff16(t + e, be) != 0x0112) continue;
        /* SHORT (3), one value, held in the first two bytes of the value field */
        if (tiff16(t + e + 2, be) != 3 || tiff32(t + e + 4, be) != 1) return 0;
        return (int)tiff16(t + e + 8, be);
    }
    return 0;
}

int patina_image__jpeg_orientation(const uint8_t *p, size_t n)
{
    size_t pos = 2;
    if (n < 4 || p[0] != 0xFF || p[1] != 0xD8) return 1;
    for (;;) {
        unsigned m, len;
        int o;
        if (pos >= n || p[pos] != 0xFF) return 1; /* no garbage skipping: the header as written */
        while (pos < n && p[pos] == 0xFF) pos++;
        if (pos >= n) return 1;
        m = p[pos++];
        if (m == 0xDA || m == 0xD9) return 1; /* the image data: no EXIF before it */
        if (m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue;
        if (n - pos < 2) return 1;
        len = be16(p + pos);
        if (len < 2 || len > n - pos) return 1;
        if (m == 0xE1 && (o = exif_orientation(p + pos + 2, len - 2)) != 0) return o >= 1 && o <= 8 ? o : 1;
        pos += len;
    }
}

/* ------------------------------------------------------------- TurboJPEG */

static patina_status tj_new(tjhandle *h, const patina_image_src_t *src)
{
    *h = tjInitDecompress();
    if (!*h)
        return patina__fail(PATINA_E_NOMEM, "%s: cannot create a TurboJPEG decompressor for '%s' (%s)",
                            src->what, src->name, tjGetErrorStr2(NULL));
    return PATINA_OK;
}

static patina_status truncated(const patina_image_src_t *src)
{
    return patina__fail(PATINA_E_CORRUPT, "%s: truncated JPEG data in '%s'", src->what, src->name);
}

static patina_status jpeg_probe(patina_image_info_t *info, const patina_image_src_t *src)
{
    jpeg_walk_t w;
    walk_result wr = jpeg_walk(&w, src->data, src->size, 1);
    tjhandle h;
    int width = 0, height = 0, subsamp = 0, colorspace = 0, r;
    char msg[JPEG_MSG_MAX];

    if (wr == WALK_TRUNCATED) return truncated(src);
    if (wr == WALK_OK && !w.reached_sos)
        return patina__fail(PATINA_E_CORRUPT, "%s: JPEG data contains no image in '%s'", src->what,
                            src->name);
    if (w.have_sof) {
        if (w.sof == 0xC3 || w.sof == 0xC7 || w.sof == 0xCB || w.sof == 0xCF)
            return patina__fail(PATINA_E_FORMAT, "%s: lossless JPEG is not supported in '%s'",
                                src->what, src->name);
        if (w.precision != 8)
            return patina__fail(PATINA_E_FORMAT,
                                "%s: %d-bit JPEG is not supported in '%s' (only 8-bit samples)",
                                src->what, w.precision, src->name);
    }

    PATINA_TRY(tj_new(&h, src));
    r = tjDecompressHeader3(h, src->data, (unsigned long)src->size, &width, &height, &subsamp,
                            &colorspace);
    /* A warning while reading the header (extraneous bytes before a marker)
     * still gives the header; decoding reads it again and reports it. */
    if (r != 0 && tjGetErrorCode(h) == TJERR_WARNING && width > 0 && height > 0) r = 0;
    snprintf(msg, sizeof msg, "%s", r != 0 ? tjGetErrorStr2(h) : "");
    tjDestroy(h);
    if (r != 0)
        return patina__fail(PATINA_E_CORRUPT, "%s: corrupt JPEG header in '%s' (libjpeg: %s)",
                            src->what, src->name, msg);
    if (wr == WALK_BAD) /* TurboJPEG accepted what the walk did not */
        return patina__fail(PATINA_E_CORRUPT, "%s: corrupt JPEG marker structure in '%s'", src->what,
                            src->name);
    info->width = width;
    info->height = height;
    /* CMYK and YCCK files count 4 (the GPU decoder is not given them: see
     * the pipeline's gpu_candidate) */
    info->channels = colorspace == TJCS_GRAY ? 1 : colorspace == TJCS_CMYK || colorspace == TJCS_YCCK ? 4 : 3;
    info->bit_depth = 8;
    return PATINA_OK;
}

/* CMYK as libjpeg gives it, (height, 4*width) u8, to RGB in img, row by
 * row. `inverted`: the file had an Adobe marker, so each stored value is
 * 255 - ink and R = C*K/255 directly; otherwise the stored values are ink
 * amounts and R = (255-C)(255-K)/255. Rounded to nearest with integers:
 * (a*b + 127) / 255 is exact because a*b/255 is never a half (255 is odd). */
static void cmyk_to_rgb(patina_image_t *img, const uint8_t *cmyk, int inverted)
{
    int x, y;
    for (y = 0; y < img->height; y++) {
        const uint8_t *s = cmyk + (size_t)y * 4 * (size_t)img->width;
        uint8_t *d = img->data + (size_t)y * img->stride;
        for (x = 0; x < img->width; x++, s += 4, d += 3) {
            unsigned c = s[0], m = s[1], ye = s[2], k = s[3];
            if (!inverted) c = 255 - c, m = 255 - m, ye = 255 - ye, k = 255 - k;
            d[0] = (uint8_t)((c * k + 127) / 255);
            d[1] = (uint8_t)((m * k + 127) / 255);
            d[2] = (uint8_t)((ye * k + 127) / 255);
        }
    }
}

static patina_status jpeg_decode(patina_image_t *img, const patina_image_src_t *src)
{
    tjhandle h;
    int r, code, width = 0, height = 0, subsamp = 0, colorspace = -1;
    char msg[JPEG_MSG_MAX];
    jpeg_walk_t w;
    uint8_t *cmyk = NULL; /* (height, 4*width) u8: a CMYK or YCCK file's CMYK */

    PATINA_TRY(tj_new(&h, src));
    if (tjDecompressHeader3(h, src->data, (unsigned long)src->size, &width, &height, &subsamp, &colorspace) != 0 &&
        tjGetErrorCode(h) != TJERR_WARNING)
        colorspace = -1; /* tjDecompress2 below reports the error */
    if ((colorspace == TJCS_CMYK || colorspace == TJCS_YCCK) && width == img->width && height == img->height) {
        cmyk = malloc((size_t)img->width * 4 * (size_t)img->height);
        if (!cmyk) {
            tjDestroy(h);
            return patina__fail(PATINA_E_NOMEM, "%s: cannot allocate %dx%d CMYK pixels for '%s'", src->what,
                                img->width, img->height, src->name);
        }
    }
    /* Flags: accurate integer IDCT (also the default) and fancy upsampling
     * (no TJFLAG_FASTUPSAMPLE); LIMITSCANS rejects progressive files with an
     * absurd number of scans (a decoding-time bomb). Warnings do not stop
     * decoding; they are judged below. */
    if (cmyk)
        r = tjDecompress2(h, src->data, (unsigned long)src->size, cmyk, img->width, 0, img->height, TJPF_CMYK,
                          TJFLAG_ACCURATEDCT | TJFLAG_LIMITSCANS);
    else
        r = tjDecompress2(h, src->data, (unsigned long)src->size, img->data, img->width, (int)img->stride,
                          img->height, TJPF_RGB, TJFLAG_ACCURATEDCT | TJFLAG_LIMITSCANS);
    code = r != 0 ? tjGetErrorCode(h) : TJERR_WARNING;
    snprintf(msg, sizeof msg, "%s", r != 0 ? tjGetErrorStr2(h) : "");
    tjDestroy(h);
    if (cmyk) {
        if (r == 0 || code == TJERR_WARNING) {
            jpeg_walk(&w, src->data, src->size, 1);
            cmyk_to_rgb(img, cmyk, w.adobe);
        }
        free(cmyk);
    }
    if (r == 0) return PATINA_OK;

    /* Truncation: either libjpeg ran out of data ("Premature end of JPEG
     * file"), or the marker walk ends before EOI. */
    if (strstr(msg, "Premature end of JPEG file") ||
        jpeg_walk(&w, src->data, src->size, 0) == WALK_TRUNCATED)
        return truncated(src);
    if (code == TJERR_WARNING) /* corrupt but decoded: reported, an error only when strict */
        return patina_image__warning(src, "%s: warning in '%s' (libjpeg: %s)", src->what,
                                     src->name, msg);
    return patina__fail(PATINA_E_CORRUPT, "%s: corrupt JPEG data in '%s' (libjpeg: %s)", src->what,
                        src->name, msg);
}

/* SOI (FF D8) followed by the first marker's FF. */
static int jpeg_sniff(const uint8_t *p, size_t size)
{
    return p[0] == 0xFF && p[1] == 0xD8 && (size < 3 || p[2] == 0xFF);
}

const patina_image_loader_t patina_image__loader_jpeg = {PATINA_FORMAT_JPEG, "jpeg", jpeg_sniff, jpeg_probe, jpeg_decode};
