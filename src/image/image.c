/* Image storage, format sniffing, limits and file reading: the front of the
 * image module. It decides the format from the content (magic bytes, never
 * the file name), asks that format's loader for the header (probe), checks
 * the pixel limit, allocates, then has the loader decode (the loaders never
 * see an image over the limit). Loaders report decoder warnings through
 * patina_image__warning (warning.c), which keeps them in the caller's report.
 * File input is read into memory first and takes the same path as memory
 * input. Not here: the formats; image.c reaches the per-format loaders
 * (jpeg.c, png.c, pnm.c) only through their table (loaders.c, loaders.h);
 * the pixel semantics of each are in docs/images.md. */
#define _POSIX_C_SOURCE 200809L /* XSI strerror_r, O_CLOEXEC */

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/internal.h"
#include "image/loaders.h"

/* ------------------------------------------------------------ image type */

patina_status patina_image_init(patina_image_t *img, int width, int height)
{
    size_t bytes;
    if (!img) return patina__fail(PATINA_E_INVALID, "image: NULL image");
    memset(img, 0, sizeof *img);
    if (width <= 0 || height <= 0)
        return patina__fail(PATINA_E_INVALID, "image: invalid size %dx%d", width, height);
    if ((size_t)width > SIZE_MAX / 3 / (size_t)height)
        return patina__fail(PATINA_E_LIMIT, "image: %dx%d is too large for this machine", width,
                            height);
    bytes = (size_t)width * 3 * (size_t)height;
    img->data = malloc(bytes); /* (height, 3*width) u8, RGB interleaved */
    if (!img->data)
        return patina__fail(PATINA_E_NOMEM, "image: cannot allocate %zu bytes for a %dx%d image",
                            bytes, width, height);
    img->width = width;
    img->height = height;
    img->stride = (size_t)width * 3;
    img->owned = 1;
    return PATINA_OK;
}

void patina_image_wrap(patina_image_t *img, uint8_t *data, int width, int height, size_t stride)
{
    if (!img) return;
    img->width = width;
    img->height = height;
    img->stride = stride;
    img->data = data;
    img->owned = 0;
}

void patina_image_release(patina_image_t *img)
{
    if (!img) return;
    if (img->owned) free(img->data);
    memset(img, 0, sizeof *img);
}

/* ------------------------------------------------------------- sniffing */

const char *patina_format_name(patina_format f)
{
    const patina_image_loader_t *l = patina_image__loader(f);
    return l ? l->name : "unknown";
}

/* The first loader whose magic matches (loaders.h: a prefix of at least
 * 2 bytes is enough, so that a file cut short inside its signature is
 * reported as truncated by its loader rather than as an unknown format). */
patina_format patina_format_sniff(const void *data, size_t size)
{
    const uint8_t *p = data;
    if (!p || size < 2) return PATINA_FORMAT_UNKNOWN;
    for (const patina_image_loader_t *const *l = patina_image__loaders; *l; l++)
        if ((*l)->sniff(p, size)) return (*l)->format;
    return PATINA_FORMAT_UNKNOWN;
}

/* The formats the loaders read, for messages (docs/images.md has the details). */
#define PATINA__FORMATS_READ "JPEG, PNG and binary PNM (P5, P6)"

/* The name of a common image format Patina does not read, from its magic
 * bytes, or NULL: only to make the "unknown format" message say what the file is. */
static const char *other_format(const uint8_t *p, size_t n)
{
    if (n >= 6 && (!memcmp(p, "GIF87a", 6) || !memcmp(p, "GIF89a", 6))) return "GIF";
    if (n >= 12 && !memcmp(p, "RIFF", 4) && !memcmp(p + 8, "WEBP", 4)) return "WebP";
    if (n >= 4 && (!memcmp(p, "II*\0", 4) || !memcmp(p, "MM\0*", 4))) return "TIFF";
    if (n >= 12 && !memcmp(p + 4, "ftyp", 4)) {
        if (!memcmp(p + 8, "avif", 4) || !memcmp(p + 8, "avis", 4)) return "AVIF";
        if (!memcmp(p + 8, "heic", 4) || !memcmp(p + 8, "heix", 4) || !memcmp(p + 8, "mif1", 4)) return "HEIF/HEIC";
    }
    if (n >= 14 && p[0] == 'B' && p[1] == 'M') return "BMP";
    if (n >= 12 && !memcmp(p, "\0\0\0\x0cjP  \r\n\x87\n", 12)) return "JPEG 2000";
    if (n >= 2 && p[0] == 0xFF && p[1] == 0x0A) return "JPEG XL";
    if (n >= 12 && !memcmp(p, "\0\0\0\x0cJXL \r\n\x87\n", 12)) return "JPEG XL";
    return NULL;
}

/* -------------------------------------------------------- probe + decode */

static const char *label(const char *name) { return name ? name : "<memory>"; }

/* Probe shared by patina_image_probe and patina_image_decode. */
static patina_status probe_src(patina_image_info_t *info, patina_format *fmt,
                               const patina_image_src_t *src)
{
    const patina_image_loader_t *loader;
    patina_status s;
    memset(info, 0, sizeof *info);
    if (src->size == 0)
        return patina__fail(PATINA_E_CORRUPT, "%s: empty file in '%s'", src->what, src->name);
    *fmt = patina_format_sniff(src->data, src->size);
    loader = patina_image__loader(*fmt);
    if (!loader) {
        const char *other = other_format(src->data, src->size);
        return patina__fail(PATINA_E_FORMAT, "%s: unknown image format in '%s'%s%s%s (Patina reads " PATINA__FORMATS_READ ")",
                            src->what, src->name, other ? ": " : "", other ? other : "", other ? " is not read" : "");
    }
    s = loader->probe(info, src);
    if (s != PATINA_OK) {
        memset(info, 0, sizeof *info);
        return s;
    }
    info->format = *fmt;
    if (info->width <= 0 || info->height <= 0) {
        patina_status z = patina__fail(PATINA_E_CORRUPT,
                                       "%s: image has zero width or height (%dx%d) in '%s'",
                                       src->what, info->width, info->height, src->name);
        memset(info, 0, sizeof *info);
        return z;
    }
    return PATINA_OK;
}

patina_status patina_image_probe(patina_image_info_t *info, const void *data, size_t size,
                                 const char *name)
{
    patina_image_src_t src;
    patina_format fmt;
    if (!info) return patina__fail(PATINA_E_INVALID, "probe: NULL info");
    if (!data && size) return patina__fail(PATINA_E_INVALID, "probe: NULL data in '%s'", label(name));
    src.data = data;
    src.size = size;
    src.name = label(name);
    src.what = "probe";
    src.strict = 0;
    src.report = NULL;
    return probe_src(info, &fmt, &src);
}

void patina_limits_init(patina_limits_t *lim)
{
    if (!lim) return;
    lim->max_pixels = PATINA_DEFAULT_MAX_PIXELS;
    lim->max_file_bytes = PATINA_DEFAULT_MAX_FILE_BYTES;
}

patina_status patina_limits_check(const patina_limits_t *lim, const patina_image_info_t *info,
                                  const char *name)
{
    uint64_t max_pixels = lim && lim->max_pixels ? lim->max_pixels : PATINA_DEFAULT_MAX_PIXELS;
    uint64_t pixels;
    if (!info) return patina__fail(PATINA_E_INVALID, "decode: NULL image info");
    if (info->width < 0 || info->height < 0)
        return patina__fail(PATINA_E_INVALID, "decode: negative size %dx%d in '%s'", info->width,
                            info->height, label(name));
    /* Both sides are < 2^31, so the product is exact in 64 bits. */
    pixels = (uint64_t)info->width * (uint64_t)info->height;
    if (pixels > max_pixels)
        return patina__fail(PATINA_E_LIMIT, "decode: %dx%d = %llu pixels exceeds the limit of %llu in '%s'",
                            info->width, info->height, (unsigned long long)pixels,
                            (unsigned long long)max_pixels, label(name));
    if (pixels > SIZE_MAX / 3)
        return patina__fail(PATINA_E_LIMIT, "decode: %dx%d image is too large for this machine in '%s'",
                            info->width, info->height, label(name));
    return PATINA_OK;
}

void patina_decode_opts_init(patina_decode_opts_t *opts)
{
    if (!opts) return;
    memset(opts, 0, sizeof *opts);
    patina_limits_init(&opts->limits);
}

/* Turns a decoded image as EXIF orientation o (1..8) says, so that it shows
 * upright: 2 mirror, 3 rotate 180, 4 flip, 5 transpose, 6 rotate 90
 * clockwise, 7 transverse, 8 rotate 90 counter-clockwise. Output pixel (x, y)
 * of the w' x h' result is stored pixel (sx, sy) of the w x h original. */
static patina_status orient(patina_image_t *img, int o, const char *name)
{
    int w = img->width, h = img->height, ow = o >= 5 ? h : w, oh = o >= 5 ? w : h, x, y;
    uint8_t *out;
    if (o <= 1 || o > 8) return PATINA_OK;
    out = malloc((size_t)w * 3 * (size_t)h); /* (oh, 3*ow) u8 */
    if (!out)
        return patina__fail(PATINA_E_NOMEM, "decode: cannot allocate %dx%d pixels to orient '%s'", ow, oh, name);
    for (y = 0; y < oh; y++)
        for (x = 0; x < ow; x++) {
            int sx, sy;
            switch (o) {
            case 2: sx = w - 1 - x, sy = y; break;
            case 3: sx = w - 1 - x, sy = h - 1 - y; break;
            case 4: sx = x, sy = h - 1 - y; break;
            case 5: sx = y, sy = x; break;
            case 6: sx = y, sy = h - 1 - x; break;
            case 7: sx = w - 1 - y, sy = h - 1 - x; break;
            default: sx = w - 1 - y, sy = x; break; /* 8 */
            }
            memcpy(out + ((size_t)y * (size_t)ow + (size_t)x) * 3, img->data + (size_t)sy * img->stride + 3 * (size_t)sx,
                   3);
        }
    if (img->owned) free(img->data);
    img->data = out;
    img->width = ow;
    img->height = oh;
    img->stride = (size_t)ow * 3;
    img->owned = 1;
    return PATINA_OK;
}

patina_status patina_image_decode_with(patina_image_t *img, patina_decode_report_t *report,
                                       const void *data, size_t size,
                                       const patina_decode_opts_t *opts, const char *name)
{
    patina_image_src_t src;
    patina_image_info_t info;
    patina_decode_report_t own;
    patina_format fmt = PATINA_FORMAT_UNKNOWN;
    const patina_image_loader_t *loader;
    size_t bytes;
    patina_status s;

    if (!report) report = &own;
    memset(report, 0, sizeof *report);
    if (!img) return patina__fail(PATINA_E_INVALID, "decode: NULL image");
    memset(img, 0, sizeof *img);
    if (!data && size) return patina__fail(PATINA_E_INVALID, "decode: NULL data in '%s'", label(name));
    src.data = data;
    src.size = size;
    src.name = label(name);
    src.what = "decode";
    src.strict = opts ? opts->strict != 0 : 0;
    src.report = report;

    PATINA_TRY(probe_src(&info, &fmt, &src));

    /* Limits from the header, before any allocation for pixels: no loader
     * decodes (or allocates for) an image this check refused. */
    PATINA_TRY(patina_limits_check(opts ? &opts->limits : NULL, &info, src.name));
    bytes = (size_t)info.width * (size_t)info.height * 3;

    img->data = malloc(bytes); /* (height, 3*width) u8, RGB interleaved */
    if (!img->data)
        return patina__fail(PATINA_E_NOMEM, "decode: cannot allocate %zu bytes for a %dx%d image in '%s'",
                            bytes, info.width, info.height, src.name);
    img->width = info.width;
    img->height = info.height;
    img->stride = (size_t)info.width * 3;
    img->owned = 1;

    loader = patina_image__loader(fmt);
    s = loader ? loader->decode(img, &src)
               : patina__fail(PATINA_E_INTERNAL, "decode: no loader for format %d", (int)fmt);
    if (s == PATINA_OK && opts && opts->apply_orientation && fmt == PATINA_FORMAT_JPEG)
        s = orient(img, patina_image__jpeg_orientation(data, size), src.name);
    if (s != PATINA_OK) patina_image_release(img);
    return s;
}

patina_status patina_image_decode(patina_image_t *img, const void *data, size_t size,
                                  const patina_limits_t *lim, const char *name)
{
    patina_decode_opts_t opts;
    patina_decode_opts_init(&opts);
    if (lim) opts.limits = *lim;
    return patina_image_decode_with(img, NULL, data, size, &opts, name);
}

/* ---------------------------------------------------------- file input */

static patina_status io_fail(patina_status s, const char *verb, const char *path, int err)
{
    char buf[256];
    if (strerror_r(err, buf, sizeof buf) != 0) snprintf(buf, sizeof buf, "errno %d", err);
    return patina__fail(s, "read: cannot %s '%s': %s", verb, path, buf);
}

/* Reads up to `want` bytes; returns the count (short only at end of file). */
static patina_status read_full(int fd, uint8_t *buf, size_t want, size_t *got, const char *path)
{
    size_t n = 0;
    *got = 0;
    while (n < want) {
        ssize_t r = read(fd, buf + n, want - n);
        if (r < 0) {
            if (errno == EINTR) continue;
            return io_fail(PATINA_E_IO, "read", path, errno);
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    *got = n;
    return PATINA_OK;
}

patina_status patina_file_read(void **data, size_t *size, const char *path,
                               const patina_limits_t *lim)
{
    uint64_t max_bytes = lim && lim->max_file_bytes ? lim->max_file_bytes : PATINA_DEFAULT_MAX_FILE_BYTES;
    struct stat st;
    uint8_t *buf = NULL; /* (cap) u8: file bytes, the first `len` valid */
    size_t len = 0, cap, got;
    patina_status s = PATINA_OK;
    int fd;

    if (!data || !size || !path) return patina__fail(PATINA_E_INVALID, "read: NULL argument");
    *data = NULL;
    *size = 0;
    if (max_bytes > SIZE_MAX - 1) max_bytes = SIZE_MAX - 1;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_fail(errno == ENOENT ? PATINA_E_NOTFOUND : PATINA_E_IO, "open", path, errno);
    if (fstat(fd, &st) != 0) {
        s = io_fail(PATINA_E_IO, "stat", path, errno);
        goto done;
    }
    if (S_ISDIR(st.st_mode)) {
        s = patina__fail(PATINA_E_IO, "read: '%s' is a directory", path);
        goto done;
    }
    if (S_ISREG(st.st_mode)) {
        /* Known size: check the limit before reading anything. */
        if ((uint64_t)st.st_size > max_bytes) {
            s = patina__fail(PATINA_E_LIMIT, "read: '%s' is %llu bytes, over the limit of %llu bytes",
                             path, (unsigned long long)st.st_size, (unsigned long long)max_bytes);
            goto done;
        }
        cap = (size_t)st.st_size + 1; /* +1 notices a file that grew meanwhile */
    } else {
        cap = 64 * 1024; /* pipe or device: grow as needed, up to the limit */
        if (cap > max_bytes + 1) cap = (size_t)max_bytes + 1;
    }
    for (;;) {
        uint8_t *nb = realloc(buf, cap);
        if (!nb) {
            s = patina__fail(PATINA_E_NOMEM, "read: cannot allocate %zu bytes for '%s'", cap, path);
            goto done;
        }
        buf = nb;
        s = read_full(fd, buf + len, cap - len, &got, path);
        if (s != PATINA_OK) goto done;
        len += got;
        if (len < cap) break; /* end of file */
        if (len > max_bytes) {
            s = patina__fail(PATINA_E_LIMIT, "read: '%s' is more than the limit of %llu bytes", path,
                             (unsigned long long)max_bytes);
            goto done;
        }
        cap = cap > (size_t)max_bytes / 2 ? (size_t)max_bytes + 1 : cap * 2;
    }

done:
    close(fd);
    if (s != PATINA_OK) {
        free(buf);
        return s;
    }
    *data = buf; /* at least 1 byte allocated, so an empty file still gives a pointer to free */
    *size = len;
    return PATINA_OK;
}

patina_status patina_image_load_with(patina_image_t *img, patina_decode_report_t *report,
                                     const char *path, const patina_decode_opts_t *opts)
{
    void *data;
    size_t size;
    patina_status s;
    if (report) memset(report, 0, sizeof *report);
    if (!img) return patina__fail(PATINA_E_INVALID, "load: NULL image");
    memset(img, 0, sizeof *img);
    PATINA_TRY(patina_file_read(&data, &size, path, opts ? &opts->limits : NULL));
    s = patina_image_decode_with(img, report, data, size, opts, path);
    free(data);
    return s;
}

patina_status patina_image_load(patina_image_t *img, const char *path, const patina_limits_t *lim)
{
    patina_decode_opts_t opts;
    patina_decode_opts_init(&opts);
    if (lim) opts.limits = *lim;
    return patina_image_load_with(img, NULL, path, &opts);
}
