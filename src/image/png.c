/* PNG loader: libpng reads the chunks and un-filters the rows; this file
 * turns the raw rows into 8-bit RGB itself, so that every PNG type gets
 * exactly the pixels LIRE's CEDD sees through Java ImageIO (cedd.md §1 and
 * docs/images.md; every rule below was compared with OpenJDK 17 ImageIO +
 * LIRE's drawImage onto black, bit for bit):
 *
 *   grey 1/2/4/8       r=g=b = v*255/(2^d-1)            (exact)
 *   grey 16            r=g=b = v>>8                     (high byte, truncation)
 *   RGB 8              as stored
 *   RGB 16             (v*255+32767)/65535              (rounding)
 *   palette 1/2/4/8    palette entry, composited over black with its tRNS alpha;
 *                      indexes past PLTE follow Java's padding (see build_palette)
 *   RGBA 8             (c*a+127)/255 per channel        (over black)
 *   RGBA 16            colour and alpha rounded to 8 bits, then over black
 *   grey+alpha 8       lift8[g] over black, lift = sRGB encoding of g taken as linear
 *   grey+alpha 16      lift16[g] over black with alpha rounded to 8 bits; lift16 is
 *                      the same curve evaluated on g/65535
 *   RGB + tRNS         the key colour becomes black, the rest as without tRNS
 *   grey + tRNS        Java makes this grey+alpha, so the grey is lifted too: the
 *                      key becomes black, every other value lift8 (8-bit) or lift16
 *                      (16-bit); below 8 bits Java compares the key with the
 *                      already expanded value, so only key 0 ever matches
 *
 * gAMA, cHRM, sRGB, iCCP and sBIT are ignored (libpng is told to skip them, so
 * their validation cannot raise warnings). The only libpng transforms
 * used are packing (1/2/4-bit samples to one byte each, values unchanged) and
 * interlace handling; no strip/scale/expand/gamma transform touches a value.
 * tRNS is read raw (libpng is told to pass it on as an unknown chunk), because
 * Java's rules for odd tRNS chunks differ from libpng's.
 *
 * libpng reports errors by longjmp: the error and warning handlers here copy
 * the message into the per-call context (never print; the first warning of a
 * file that decodes is reported through patina_image__warning: a bad CRC in an
 * ancillary chunk, extra data after the image, ...) and the one function
 * that calls setjmp keeps all its mutable state in that heap context, outside
 * its own frame. The probe parses IHDR by hand (with its CRC) and never
 * starts libpng. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>

#include "core/internal.h"
#include "image/loaders.h"

#if defined(__GNUC__)
#define PNG_NOINLINE __attribute__((noinline))
#else
#define PNG_NOINLINE
#endif

/* lift8(g) = round(255 * enc(g/255)) with the sRGB encoding enc(x) = 12.92x
 * for x <= 0.0031308, else 1.055 x^(1/2.4) - 0.055: Java converts the grey of
 * a grey+alpha image, taken as linear, to sRGB. No value is within 1e-6 of a
 * .5 tie, so the rounding is unambiguous; tests/test_image.c recomputes it
 * with pow. */
static const uint8_t lift8[256] = {
      0,  13,  22,  28,  34,  38,  42,  46,  50,  53,  56,  59,  61,  64,  66,  69,
     71,  73,  75,  77,  79,  81,  83,  85,  86,  88,  90,  92,  93,  95,  96,  98,
     99, 101, 102, 104, 105, 106, 108, 109, 110, 112, 113, 114, 115, 117, 118, 119,
    120, 121, 122, 124, 125, 126, 127, 128, 129, 130, 131, 132, 133, 134, 135, 136,
    137, 138, 139, 140, 141, 142, 143, 144, 145, 146, 147, 148, 148, 149, 150, 151,
    152, 153, 154, 155, 155, 156, 157, 158, 159, 159, 160, 161, 162, 163, 163, 164,
    165, 166, 167, 167, 168, 169, 170, 170, 171, 172, 173, 173, 174, 175, 175, 176,
    177, 178, 178, 179, 180, 180, 181, 182, 182, 183, 184, 185, 185, 186, 187, 187,
    188, 189, 189, 190, 190, 191, 192, 192, 193, 194, 194, 195, 196, 196, 197, 197,
    198, 199, 199, 200, 200, 201, 202, 202, 203, 203, 204, 205, 205, 206, 206, 207,
    208, 208, 209, 209, 210, 210, 211, 212, 212, 213, 213, 214, 214, 215, 215, 216,
    216, 217, 218, 218, 219, 219, 220, 220, 221, 221, 222, 222, 223, 223, 224, 224,
    225, 226, 226, 227, 227, 228, 228, 229, 229, 230, 230, 231, 231, 232, 232, 233,
    233, 234, 234, 235, 235, 236, 236, 237, 237, 238, 238, 238, 239, 239, 240, 240,
    241, 241, 242, 242, 243, 243, 244, 244, 245, 245, 246, 246, 246, 247, 247, 248,
    248, 249, 249, 250, 250, 251, 251, 251, 252, 252, 253, 253, 254, 254, 255, 255,
};

/* lift16(v) = round(255 * enc(v/65535)), the same curve on 16-bit input
 * (what Java does for 16-bit grey+alpha; equal to lift8 at v = 257*g). Stored
 * as thresholds: lift16_from[k-1] is the smallest v with lift16(v) >= k, so
 * lift16(v) is the number of entries <= v. The closest any v comes to a .5
 * tie is 1.4e-6, so these are unambiguous; the tests recompute all 65536. */
static const uint16_t lift16_from[255] = {
       10,    30,    50,    70,    90,   110,   130,   150,   170,   189,   209,   230,
      253,   276,   301,   327,   354,   382,   412,   443,   475,   509,   544,   580,
      618,   657,   698,   740,   783,   828,   875,   923,   972,  1023,  1075,  1129,
     1185,  1242,  1300,  1360,  1422,  1486,  1551,  1617,  1685,  1755,  1827,  1900,
     1975,  2052,  2130,  2210,  2292,  2376,  2461,  2548,  2637,  2727,  2820,  2914,
     3010,  3108,  3208,  3309,  3412,  3518,  3625,  3734,  3844,  3957,  4072,  4188,
     4307,  4427,  4550,  4674,  4800,  4928,  5059,  5191,  5325,  5461,  5599,  5740,
     5882,  6026,  6173,  6321,  6471,  6624,  6778,  6935,  7094,  7255,  7418,  7583,
     7750,  7919,  8091,  8265,  8440,  8618,  8798,  8981,  9165,  9352,  9541,  9732,
     9925, 10121, 10318, 10518, 10720, 10925, 11132, 11341, 11552, 11765, 11981, 12199,
    12420, 12643, 12868, 13095, 13325, 13557, 13791, 14028, 14267, 14508, 14752, 14998,
    15247, 15498, 15751, 16007, 16265, 16525, 16788, 17054, 17321, 17592, 17864, 18139,
    18417, 18697, 18980, 19264, 19552, 19842, 20134, 20429, 20727, 21027, 21329, 21634,
    21942, 22252, 22564, 22880, 23197, 23518, 23840, 24166, 24494, 24824, 25158, 25493,
    25832, 26173, 26516, 26862, 27211, 27563, 27917, 28273, 28633, 28995, 29359, 29727,
    30097, 30469, 30845, 31223, 31603, 31987, 32373, 32762, 33153, 33547, 33944, 34344,
    34747, 35152, 35560, 35970, 36384, 36800, 37219, 37640, 38065, 38492, 38922, 39355,
    39790, 40229, 40670, 41114, 41561, 42011, 42463, 42918, 43377, 43838, 44301, 44768,
    45238, 45710, 46185, 46663, 47144, 47628, 48115, 48605, 49097, 49593, 50091, 50592,
    51096, 51604, 52114, 52627, 53142, 53661, 54183, 54708, 55235, 55766, 56300, 56836,
    57376, 57918, 58464, 59012, 59564, 60118, 60675, 61236, 61799, 62366, 62935, 63508,
    64083, 64662, 65244,
};

static uint8_t lift16(unsigned v)
{
    unsigned lo = 0, hi = 255; /* answer in [lo, hi] */
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (lift16_from[mid] <= v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (uint8_t)lo;
}

static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static unsigned be16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }

/* CRC-32 (ISO 3309, as in PNG) of a few bytes, bit by bit: only the 17 bytes
 * of IHDR go through it, so no table. */
static uint32_t crc32_small(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    size_t i;
    int k;
    for (i = 0; i < n; i++) {
        c ^= p[i];
        for (k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
}

/* ----------------------------------------------------------------- probe */

static patina_status png_probe(patina_image_info_t *info, const patina_image_src_t *src)
{
    const uint8_t *p = src->data;
    uint32_t w, h;
    int depth, ctype, ok;

    /* signature (8) + IHDR length and type (8) + IHDR data (13) + CRC (4) */
    if (src->size < 8 || memcmp(p, png_sig, 8) != 0) {
        if (src->size < 8 && memcmp(p, png_sig, src->size) == 0)
            return patina__fail(PATINA_E_CORRUPT, "%s: truncated PNG data in '%s'", src->what, src->name);
        return patina__fail(PATINA_E_FORMAT, "%s: not a PNG file '%s'", src->what, src->name);
    }
    if (src->size < 33)
        return patina__fail(PATINA_E_CORRUPT, "%s: truncated PNG data in '%s'", src->what, src->name);
    if (be32(p + 8) != 13 || memcmp(p + 12, "IHDR", 4) != 0)
        return patina__fail(PATINA_E_CORRUPT, "%s: corrupt PNG data in '%s' (first chunk is not IHDR)",
                            src->what, src->name);
    if (crc32_small(p + 12, 17) != be32(p + 29))
        return patina__fail(PATINA_E_CORRUPT, "%s: corrupt PNG data in '%s' (IHDR CRC mismatch)",
                            src->what, src->name);
    w = be32(p + 16);
    h = be32(p + 20);
    depth = p[24];
    ctype = p[25];
    if (w == 0 || h == 0)
        return patina__fail(PATINA_E_CORRUPT, "%s: PNG image has zero width or height (%ux%u) in '%s'",
                            src->what, (unsigned)w, (unsigned)h, src->name);
    if (w > 0x7FFFFFFFu || h > 0x7FFFFFFFu)
        return patina__fail(PATINA_E_CORRUPT, "%s: corrupt PNG data in '%s' (size %ux%u over 2^31-1)",
                            src->what, src->name, (unsigned)w, (unsigned)h);
    switch (ctype) {
    case 0: ok = depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16; break;
    case 3: ok = depth == 1 || depth == 2 || depth == 4 || depth == 8; break;
    case 2: case 4: case 6: ok = depth == 8 || depth == 16; break;
    default: ok = 0;
    }
    if (!ok || p[26] != 0 || p[27] != 0 || p[28] > 1)
        return patina__fail(PATINA_E_CORRUPT,
                            "%s: corrupt PNG data in '%s' (invalid IHDR: colour type %d, bit depth %d, "
                            "compression %d, filter %d, interlace %d)",
                            src->what, src->name, ctype, depth, p[26], p[27], p[28]);
    info->width = (int)w;
    info->height = (int)h;
    /* palette images count as RGB; tRNS (after IHDR) is not looked at */
    info->channels = ctype == 0 ? 1 : ctype == 4 ? 2 : ctype == 6 ? 4 : 3;
    info->bit_depth = depth;
    return PATINA_OK;
}

/* ---------------------------------------------------------------- decode */

#define PNG_MSG_MAX 200

typedef struct png_ctx {
    const patina_image_src_t *src;
    patina_image_t *img;       /* allocated by the caller, width x height */
    png_structp png;
    png_infop info;
    size_t pos;                /* read offset into src->data */
    int truncated;             /* the reader ran past the end of the data */
    char err[PNG_MSG_MAX];     /* libpng's error message */
    char warn[PNG_MSG_MAX];    /* libpng's first warning ("" if none) */
    uint8_t *rows;             /* interlaced: (height, rowbytes) u8 native rows; else (rowbytes) */
    png_bytep *rowp;           /* interlaced: (height) pointers into rows */

    /* tRNS as Java reads it (set by png_on_chunk before the first IDAT) */
    int in_image;              /* past png_read_info: later chunks are ignored */
    int trns;                  /* a usable tRNS chunk was seen */
    int ntrans;                /* palette: alpha entries given */
    uint8_t trans[256];        /* palette: (ntrans) alpha per entry */
    unsigned key[3];           /* grey (key[0]) or RGB colour key, 16-bit field values */

    /* what convert_row needs */
    int ctype, depth;          /* colour type and bit depth in the file */
    uint8_t pal[256][3];       /* (256, 3) palette, composited over black, padded as Java does */
} png_ctx_t;

static void png_read_mem(png_structp png, png_bytep out, size_t n)
{
    png_ctx_t *c = png_get_io_ptr(png);
    if (n > c->src->size - c->pos) {
        c->truncated = 1;
        png_error(png, "unexpected end of data");
    }
    memcpy(out, c->src->data + c->pos, n);
    c->pos += n;
}

static void png_on_error(png_structp png, png_const_charp msg)
{
    png_ctx_t *c = png_get_error_ptr(png);
    snprintf(c->err, sizeof c->err, "%s", msg ? msg : "unknown error");
    png_longjmp(png, 1); /* never returns: libpng's default handler would print */
}

static void png_on_warning(png_structp png, png_const_charp msg)
{
    png_ctx_t *c = png_get_error_ptr(png);
    if (!c->warn[0]) snprintf(c->warn, sizeof c->warn, "%s", msg ? msg : "");
}

/* Unknown chunks, and tRNS, which libpng is told to treat as unknown.
 * tRNS follows Java's PNGImageReader.parse_tRNS_chunk: palette alpha only
 * after a PLTE; grey needs exactly 2 bytes and RGB 6, else it is ignored;
 * none for types with alpha; a later tRNS replaces an earlier one. Other
 * ancillary chunks are dropped; an unknown critical chunk (return 0) makes
 * libpng fail. */
static int png_on_chunk(png_structp png, png_unknown_chunkp ch)
{
    png_ctx_t *c = png_get_user_chunk_ptr(png);
    if (memcmp(ch->name, "tRNS", 4) != 0) return (ch->name[0] & 0x20) ? 1 : 0;
    if (c->in_image) return 1;
    switch (png_get_color_type(png, c->info)) {
    case PNG_COLOR_TYPE_PALETTE:
        if (!png_get_valid(png, c->info, PNG_INFO_PLTE)) break;
        c->ntrans = ch->size < 256 ? (int)ch->size : 256;
        if (c->ntrans) memcpy(c->trans, ch->data, (size_t)c->ntrans);
        c->trns = 1;
        break;
    case PNG_COLOR_TYPE_GRAY:
        if (ch->size != 2) break;
        c->key[0] = be16(ch->data);
        c->trns = 1;
        break;
    case PNG_COLOR_TYPE_RGB:
        if (ch->size != 6) break;
        c->key[0] = be16(ch->data);
        c->key[1] = be16(ch->data + 2);
        c->key[2] = be16(ch->data + 4);
        c->trns = 1;
        break;
    default:
        break;
    }
    return 1;
}

/* The 2^depth palette entries Java's PNGImageReader builds, composited over
 * black. Its PLTE arrays are padded with black to n rounded up to 2, 4, 16
 * or 256 entries (P); if P < 2^depth the rest repeats entry P-1. tRNS alpha
 * beyond P is ignored, and entries without alpha are opaque. */
static void build_palette(png_ctx_t *c)
{
    png_colorp plte = NULL;
    int n = 0, padded, i, ntrans;
    uint8_t rgb[256][3]; /* (256, 3) entries before compositing */
    png_get_PLTE(c->png, c->info, &plte, &n);
    if (n > 256) n = 256;
    padded = n > 16 ? 256 : n > 4 ? 16 : n > 2 ? 4 : 2;
    memset(rgb, 0, sizeof rgb);
    for (i = 0; i < n; i++) {
        rgb[i][0] = plte[i].red;
        rgb[i][1] = plte[i].green;
        rgb[i][2] = plte[i].blue;
    }
    for (i = padded; i < 256; i++) memcpy(rgb[i], rgb[padded - 1], 3);
    ntrans = c->trns ? (c->ntrans < padded ? c->ntrans : padded) : 0;
    for (i = 0; i < 256; i++) {
        unsigned a = i < ntrans ? c->trans[i] : 255u;
        c->pal[i][0] = patina_image__over_black(rgb[i][0], a);
        c->pal[i][1] = patina_image__over_black(rgb[i][1], a);
        c->pal[i][2] = patina_image__over_black(rgb[i][2], a);
    }
}

static void put_grey(uint8_t *d, uint8_t v) { d[0] = d[1] = d[2] = v; }

/* One native row (after packing: one byte per sample below 8 bits, 16-bit
 * samples big-endian) -> one RGB8 row of `w` pixels. */
static void convert_row(const png_ctx_t *c, const uint8_t *s, uint8_t *d, size_t w)
{
    size_t x;
    switch (c->ctype) {
    case PNG_COLOR_TYPE_GRAY:
        if (c->depth == 16) {
            for (x = 0; x < w; x++, s += 2, d += 3) {
                unsigned v = be16(s);
                if (!c->trns)
                    put_grey(d, (uint8_t)(v >> 8));
                else
                    put_grey(d, v == c->key[0] ? 0 : lift16(v));
            }
        } else {
            unsigned maxv = (1u << c->depth) - 1; /* 1, 3, 15 or 255: 255/maxv is exact */
            for (x = 0; x < w; x++, s++, d += 3) {
                unsigned v = *s * 255u / maxv;
                /* Java compares the key with the expanded value, even below 8 bits. */
                if (!c->trns)
                    put_grey(d, (uint8_t)v);
                else
                    put_grey(d, v == c->key[0] ? 0 : lift8[v]);
            }
        }
        break;
    case PNG_COLOR_TYPE_PALETTE:
        for (x = 0; x < w; x++, s++, d += 3) memcpy(d, c->pal[*s], 3);
        break;
    case PNG_COLOR_TYPE_RGB:
        if (c->depth == 16) {
            for (x = 0; x < w; x++, s += 6, d += 3) {
                unsigned r = be16(s), g = be16(s + 2), b = be16(s + 4);
                if (c->trns && r == c->key[0] && g == c->key[1] && b == c->key[2]) {
                    put_grey(d, 0);
                } else {
                    d[0] = patina_image__round16(r);
                    d[1] = patina_image__round16(g);
                    d[2] = patina_image__round16(b);
                }
            }
        } else {
            for (x = 0; x < w; x++, s += 3, d += 3) {
                if (c->trns && s[0] == c->key[0] && s[1] == c->key[1] && s[2] == c->key[2])
                    put_grey(d, 0);
                else
                    memcpy(d, s, 3);
            }
        }
        break;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
        if (c->depth == 16) {
            for (x = 0; x < w; x++, s += 4, d += 3)
                put_grey(d, patina_image__over_black(lift16(be16(s)), patina_image__round16(be16(s + 2))));
        } else {
            for (x = 0; x < w; x++, s += 2, d += 3) put_grey(d, patina_image__over_black(lift8[s[0]], s[1]));
        }
        break;
    case PNG_COLOR_TYPE_RGB_ALPHA:
        if (c->depth == 16) {
            for (x = 0; x < w; x++, s += 8, d += 3) {
                unsigned a = patina_image__round16(be16(s + 6));
                d[0] = patina_image__over_black(patina_image__round16(be16(s)), a);
                d[1] = patina_image__over_black(patina_image__round16(be16(s + 2)), a);
                d[2] = patina_image__over_black(patina_image__round16(be16(s + 4)), a);
            }
        } else {
            for (x = 0; x < w; x++, s += 4, d += 3) {
                d[0] = patina_image__over_black(s[0], s[3]);
                d[1] = patina_image__over_black(s[1], s[3]);
                d[2] = patina_image__over_black(s[2], s[3]);
            }
        }
        break;
    default:
        break; /* rejected before any row is read */
    }
}

/* Everything libpng does; may longjmp out to png_guarded. Kept out of line
 * so its locals never live in the frame that called setjmp. */
static PNG_NOINLINE patina_status png_body(png_ctx_t *c)
{
    /* tRNS is read by png_on_chunk; the colour chunks are dropped unread. */
    static const png_byte trns_name[5] = {'t', 'R', 'N', 'S', '\0'};
    static const png_byte colour_chunks[] = "gAMA\0cHRM\0sRGB\0iCCP\0sBIT";
    png_uint_32 w, h;
    int depth, ctype, interlace, channels;
    size_t rowbytes, want, y;
    patina_image_t *img = c->img;

    png_set_read_fn(c->png, c, png_read_mem);
    /* Our own pixel limit (checked by image.c before this) is the one that
     * applies; libpng's default 1e6 x 1e6 cap must not pre-empt it. */
    png_set_user_limits(c->png, 0x7FFFFFFFu, 0x7FFFFFFFu);
    png_set_keep_unknown_chunks(c->png, PNG_HANDLE_CHUNK_ALWAYS, trns_name, 1);
    png_set_keep_unknown_chunks(c->png, PNG_HANDLE_CHUNK_ALWAYS, colour_chunks, 5);
    png_set_read_user_chunk_fn(c->png, c, png_on_chunk);
    png_read_info(c->png, c->info);
    c->in_image = 1;
    png_get_IHDR(c->png, c->info, &w, &h, &depth, &ctype, &interlace, NULL, NULL);
    if (w != (png_uint_32)img->width || h != (png_uint_32)img->height)
        return patina__fail(PATINA_E_INTERNAL, "%s: PNG size %ux%u differs from its probe in '%s'",
                            c->src->what, (unsigned)w, (unsigned)h, c->src->name);
    c->ctype = ctype;
    c->depth = depth;
    if (ctype == PNG_COLOR_TYPE_PALETTE) build_palette(c);

    if (depth < 8) png_set_packing(c->png); /* one byte per sample, value unchanged */
    if (interlace != PNG_INTERLACE_NONE) png_set_interlace_handling(c->png);
    png_read_update_info(c->png, c->info);

    channels = ctype == PNG_COLOR_TYPE_GRAY || ctype == PNG_COLOR_TYPE_PALETTE ? 1
               : ctype == PNG_COLOR_TYPE_GRAY_ALPHA                             ? 2
               : ctype == PNG_COLOR_TYPE_RGB                                    ? 3
                                                                                : 4;
    rowbytes = png_get_rowbytes(c->png, c->info);
    if (rowbytes != (size_t)w * (size_t)channels * (depth == 16 ? 2u : 1u))
        return patina__fail(PATINA_E_INTERNAL, "%s: unexpected PNG row size %zu in '%s'", c->src->what,
                            rowbytes, c->src->name);

    if (interlace == PNG_INTERLACE_NONE) {
        c->rows = malloc(rowbytes);
        if (!c->rows)
            return patina__fail(PATINA_E_NOMEM, "%s: out of memory for a PNG row in '%s'", c->src->what,
                                c->src->name);
        for (y = 0; y < h; y++) {
            png_read_row(c->png, c->rows, NULL);
            convert_row(c, c->rows, img->data + y * img->stride, w);
        }
    } else {
        /* Adam7 needs the whole native image (up to 8 bytes a pixel). */
        if (rowbytes > SIZE_MAX / h)
            return patina__fail(PATINA_E_LIMIT, "%s: interlaced PNG too large for memory in '%s'",
                                c->src->what, c->src->name);
        want = rowbytes * h;
        c->rows = malloc(want);
        c->rowp = malloc(sizeof *c->rowp * h);
        if (!c->rows || !c->rowp)
            return patina__fail(PATINA_E_NOMEM, "%s: cannot allocate %zu bytes for an interlaced PNG in '%s'",
                                c->src->what, want, c->src->name);
        for (y = 0; y < h; y++) c->rowp[y] = c->rows + y * rowbytes;
        png_read_image(c->png, c->rowp);
        for (y = 0; y < h; y++) convert_row(c, c->rowp[y], img->data + y * img->stride, w);
    }
    /* The rest of the file up to IEND: a file cut after its image data is
     * still a truncated file. */
    png_read_end(c->png, NULL);
    return PATINA_OK;
}

static patina_status png_guarded(png_ctx_t *c)
{
    if (setjmp(png_jmpbuf(c->png))) {
        if (c->truncated)
            return patina__fail(PATINA_E_CORRUPT, "%s: truncated PNG data in '%s'", c->src->what,
                                c->src->name);
        if (c->warn[0])
            return patina__fail(PATINA_E_CORRUPT, "%s: corrupt PNG data in '%s' (libpng: %s; warning: %s)",
                                c->src->what, c->src->name, c->err, c->warn);
        return patina__fail(PATINA_E_CORRUPT, "%s: corrupt PNG data in '%s' (libpng: %s)", c->src->what,
                            c->src->name, c->err);
    }
    return png_body(c);
}

/* Every chunk up to IEND fits in the data. libpng allocates a chunk's
 * declared length before it reads the chunk (tEXt, unknown chunks; its
 * "chunk data is too large" check is only a warning), so without this a
 * 100-byte file declaring a 2 GiB chunk costs a 2 GiB allocation before it
 * fails as truncated. A chunk that cannot be complete fails here, as
 * truncated, before libpng starts. */
static patina_status check_chunk_lengths(const patina_image_src_t *src)
{
    const uint8_t *p = src->data;
    size_t pos = 8, n = src->size;
    while (n - pos >= 8) { /* a chunk's length and type */
        uint32_t len = be32(p + pos);
        if (len > n - pos - 8)
            return patina__fail(PATINA_E_CORRUPT,
                                "%s: truncated PNG data in '%s' (a chunk of %u bytes at offset %zu)",
                                src->what, src->name, (unsigned)len, pos);
        if (memcmp(p + pos + 4, "IEND", 4) == 0 || n - pos - 8 - len < 4) break;
        pos += 12 + (size_t)len;
    }
    return PATINA_OK;
}

static patina_status png_decode(patina_image_t *img, const patina_image_src_t *src)
{
    png_ctx_t *c;
    patina_status s;
    PATINA_TRY(check_chunk_lengths(src));
    c = calloc(1, sizeof *c); /* heap: keeps the state out of setjmp's frame */
    if (!c) return patina__fail(PATINA_E_NOMEM, "%s: out of memory in '%s'", src->what, src->name);
    c->src = src;
    c->img = img;
    c->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, c, png_on_error, png_on_warning);
    if (c->png) c->info = png_create_info_struct(c->png);
    if (!c->png || !c->info) {
        s = patina__fail(PATINA_E_NOMEM, "%s: cannot create a libpng reader for '%s'", src->what,
                         src->name);
    } else {
        s = png_guarded(c);
        if (s == PATINA_OK && c->warn[0])
            s = patina_image__warning(src, "%s: warning in '%s' (libpng: %s)", src->what,
                                      src->name, c->warn);
    }
    png_destroy_read_struct(c->png ? &c->png : NULL, c->info ? &c->info : NULL, NULL);
    free(c->rows);
    free(c->rowp);
    free(c);
    return s;
}

/* The 8-byte PNG signature (or its prefix). */
static int png_sniff(const uint8_t *p, size_t size)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    return memcmp(p, sig, size < 8 ? size : 8) == 0;
}

const patina_image_loader_t patina_image__loader_png = {PATINA_FORMAT_PNG, "png", png_sniff, png_probe, png_decode};
