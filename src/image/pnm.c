/* PNM loader: binary PGM (P5) and PPM (P6), maxval 1..65535.
 *
 * Header: magic, width, height, maxval as decimal numbers separated by
 * whitespace, with '#' comments (to the end of the line) allowed anywhere a
 * separator is; exactly one whitespace byte ends the header. Samples are one
 * byte when maxval < 256, else two bytes big-endian. Each sample v becomes
 * round(v*255/maxval) with halves rounded up (exact integer arithmetic;
 * maxval 255 is the identity). P5 gives r=g=b. A sample above maxval makes
 * the file corrupt. Only the first image of a multi-image file is read.
 * ASCII PNM (P1-P3), binary PBM (P4) and PAM (P7) are PATINA_E_FORMAT. */
#include <string.h>

#include "core/internal.h"
#include "image/loaders.h"

typedef struct pnm_header {
    int channels;      /* 1 (P5) or 3 (P6) */
    uint32_t width, height;
    unsigned maxval;   /* 1..65535 */
    size_t offset;     /* first raster byte */
} pnm_header_t;

static int is_space(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static patina_status truncated(const patina_image_src_t *src)
{
    return patina__fail(PATINA_E_CORRUPT, "%s: truncated PNM data in '%s'", src->what, src->name);
}

/* Reads one header number at *pos, skipping whitespace and comments before
 * it. Numbers above 2^31-1 are corrupt. */
static patina_status read_uint(uint32_t *out, size_t *pos, const patina_image_src_t *src,
                               const char *field)
{
    const uint8_t *p = src->data;
    size_t i = *pos, n = src->size;
    uint64_t v = 0;
    for (;;) {
        while (i < n && is_space(p[i])) i++;
        if (i < n && p[i] == '#') {
            while (i < n && p[i] != '\n' && p[i] != '\r') i++;
            continue;
        }
        break;
    }
    if (i >= n) return truncated(src);
    if (p[i] < '0' || p[i] > '9')
        return patina__fail(PATINA_E_CORRUPT, "%s: corrupt PNM header in '%s' (expected the %s)",
                            src->what, src->name, field);
    while (i < n && p[i] >= '0' && p[i] <= '9') {
        v = v * 10 + (uint64_t)(p[i] - '0');
        if (v > 0x7FFFFFFFu)
            return patina__fail(PATINA_E_CORRUPT, "%s: corrupt PNM header in '%s' (%s too large)",
                                src->what, src->name, field);
        i++;
    }
    if (i >= n) return truncated(src); /* the number may go on, and a separator must follow */
    *out = (uint32_t)v;
    *pos = i;
    return PATINA_OK;
}

static patina_status parse_header(pnm_header_t *hd, const patina_image_src_t *src)
{
    const uint8_t *p = src->data;
    size_t pos = 2;
    uint32_t maxval;
    if (src->size < 2 || p[0] != 'P') return truncated(src);
    switch (p[1]) {
    case '5': hd->channels = 1; break;
    case '6': hd->channels = 3; break;
    case '1': case '2': case '3':
        return patina__fail(PATINA_E_FORMAT, "%s: ASCII PNM (P%c) is not supported in '%s' (only binary P5/P6)",
                            src->what, p[1], src->name);
    case '4':
        return patina__fail(PATINA_E_FORMAT, "%s: PBM bitmap (P4) is not supported in '%s' (only binary P5/P6)",
                            src->what, src->name);
    case '7':
        return patina__fail(PATINA_E_FORMAT, "%s: PAM (P7) is not supported in '%s' (only binary P5/P6)",
                            src->what, src->name);
    default:
        return patina__fail(PATINA_E_FORMAT, "%s: unknown PNM type P%c in '%s'", src->what, p[1], src->name);
    }
    if (src->size > 2 && !is_space(p[2]) && p[2] != '#')
        return patina__fail(PATINA_E_CORRUPT, "%s: corrupt PNM header in '%s'", src->what, src->name);
    PATINA_TRY(read_uint(&hd->width, &pos, src, "width"));
    PATINA_TRY(read_uint(&hd->height, &pos, src, "height"));
    PATINA_TRY(read_uint(&maxval, &pos, src, "maxval"));
    if (!is_space(p[pos]))
        return patina__fail(PATINA_E_CORRUPT, "%s: corrupt PNM header in '%s' (no whitespace after maxval)",
                            src->what, src->name);
    if (maxval < 1 || maxval > 65535)
        return patina__fail(PATINA_E_CORRUPT, "%s: corrupt PNM header in '%s' (maxval %u not in 1..65535)",
                            src->what, src->name, (unsigned)maxval);
    hd->maxval = maxval;
    hd->offset = pos + 1;
    return PATINA_OK;
}

static patina_status pnm_probe(patina_image_info_t *info, const patina_image_src_t *src)
{
    pnm_header_t hd;
    PATINA_TRY(parse_header(&hd, src));
    info->width = (int)hd.width;
    info->height = (int)hd.height;
    info->channels = hd.channels;
    info->bit_depth = hd.maxval < 256 ? 8 : 16;
    return PATINA_OK;
}

static patina_status pnm_decode(patina_image_t *img, const patina_image_src_t *src)
{
    pnm_header_t hd;
    const uint8_t *s;
    size_t bps, samples_per_row, x, y;
    uint64_t need;
    unsigned maxval, half, den;

    PATINA_TRY(parse_header(&hd, src));
    if (hd.width != (uint32_t)img->width || hd.height != (uint32_t)img->height)
        return patina__fail(PATINA_E_INTERNAL, "%s: PNM size differs from its probe in '%s'", src->what,
                            src->name);
    maxval = hd.maxval;
    bps = maxval < 256 ? 1 : 2;
    samples_per_row = (size_t)hd.width * (size_t)hd.channels;
    need = (uint64_t)samples_per_row * bps * hd.height; /* < 2^31 * 3 * 2 * 2^31: fits */
    if (need > (uint64_t)(src->size - hd.offset)) return truncated(src);

    /* round(v*255/maxval), halves up: floor((2*255*v + maxval) / (2*maxval)).
     * 2*255*65535 + 65535 < 2^32. */
    half = maxval;
    den = 2 * maxval;
    s = src->data + hd.offset;
    for (y = 0; y < hd.height; y++) {
        uint8_t *d = img->data + y * img->stride; /* (width, 3) u8 */
        for (x = 0; x < samples_per_row; x++) {
            unsigned v = bps == 1 ? s[0] : (unsigned)s[0] << 8 | s[1];
            uint8_t o;
            s += bps;
            if (v > maxval)
                return patina__fail(PATINA_E_CORRUPT, "%s: corrupt PNM data in '%s' (sample %u above maxval %u)",
                                    src->what, src->name, v, maxval);
            o = maxval == 255 ? (uint8_t)v : (uint8_t)((510u * v + half) / den);
            if (hd.channels == 3) {
                d[x] = o;
            } else {
                d[3 * x] = d[3 * x + 1] = d[3 * x + 2] = o;
            }
        }
    }
    return PATINA_OK;
}

/* Netpbm family P1..P7 (P5/P6 are decoded; the others are named and
 * rejected by the probe), then whitespace or a comment. */
static int pnm_sniff(const uint8_t *p, size_t size)
{
    return p[0] == 'P' && p[1] >= '1' && p[1] <= '7' && (size < 3 || is_space(p[2]) || p[2] == '#');
}

const patina_image_loader_t patina_image__loader_pnm = {PATINA_FORMAT_PNM, "pnm", pnm_sniff, pnm_probe, pnm_decode};
