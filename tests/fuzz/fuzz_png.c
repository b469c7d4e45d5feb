/* Fuzz target: the PNG loader (src/image/png.c: the IHDR probe, libpng
 * reading through our memory reader, tRNS handling and the row conversion of
 * every colour type and depth) through patina_image_probe and
 * patina_image_decode, on the input and on a copy with its chunk CRCs
 * recomputed. Seeds: small PNGs written with libpng at build time,
 * one per colour type and bit depth, interlaced ones, tRNS variants,
 * ancillary chunks, 1x1, and a truncated file. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>

#include "fuzz.h"

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* CRC-32 as PNG computes it (ISO 3309), table-driven. */
static uint32_t png_crc(const uint8_t *p, size_t n)
{
    static uint32_t table[256];
    uint32_t c = 0xFFFFFFFFu;
    size_t i;
    if (!table[1])
        for (i = 0; i < 256; i++) {
            uint32_t v = (uint32_t)i;
            int k;
            for (k = 0; k < 8; k++) v = (v >> 1) ^ (0xEDB88320u & (0u - (v & 1u)));
            table[i] = v;
        }
    for (i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* Rewrites the CRC of every complete chunk after the signature; returns
 * whether any changed. */
static int fix_crcs(uint8_t *p, size_t n)
{
    size_t pos = 8;
    int changed = 0;
    while (n - pos >= 12) {
        uint32_t len = be32(p + pos);
        uint32_t crc;
        uint8_t *q;
        if (len > n - pos - 12) break;
        crc = png_crc(p + pos + 4, (size_t)len + 4);
        q = p + pos + 8 + len;
        if (be32(q) != crc) {
            q[0] = (uint8_t)(crc >> 24), q[1] = (uint8_t)(crc >> 16), q[2] = (uint8_t)(crc >> 8), q[3] = (uint8_t)crc;
            changed = 1;
        }
        pos += 12 + (size_t)len;
    }
    return changed;
}

/* The input as it is, then (when that changes anything) with every chunk's
 * CRC recomputed: most mutations inside a chunk would otherwise end at a CRC
 * error, before libpng's chunk handlers and our row conversion see them. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *fixed;
    fuzz_image_input(data, size);
    if (size <= 8 || patina_format_sniff(data, size) != PATINA_FORMAT_PNG) return 0;
    fixed = malloc(size);
    FUZZ_CHECK(fixed != NULL, "out of memory");
    memcpy(fixed, data, size);
    if (fix_crcs(fixed, size)) fuzz_image_input(fixed, size);
    free(fixed);
    return 0;
}

/* ------------------------------------------------------------------ seeds */

typedef struct png_kind {
    const char *name;
    int w, h;
    int ctype, depth;
    int interlace;
    int trns;     /* write a tRNS chunk */
    int chunks;   /* tEXt, zTXt, gAMA, pHYs */
} png_kind_t;

typedef struct membuf {
    uint8_t *p;
    size_t n, cap;
} membuf_t;

static void mem_write(png_structp png, png_bytep data, size_t n)
{
    membuf_t *m = png_get_io_ptr(png);
    if (m->n + n > m->cap) {
        m->cap = (m->n + n) * 2;
        m->p = realloc(m->p, m->cap);
        if (!m->p) png_error(png, "out of memory");
    }
    memcpy(m->p + m->n, data, n);
    m->n += n;
}

static void mem_flush(png_structp png) { (void)png; }

static int channels_of(int ctype)
{
    switch (ctype) {
    case PNG_COLOR_TYPE_GRAY_ALPHA: return 2;
    case PNG_COLOR_TYPE_RGB: return 3;
    case PNG_COLOR_TYPE_RGB_ALPHA: return 4;
    default: return 1;
    }
}

/* Packs (h, w, channels) samples into PNG rows: below 8 bits several samples
 * a byte, 16 bits big-endian. */
static void pack_rows(uint8_t *rows, size_t rowbytes, const png_kind_t *k)
{
    int ch = channels_of(k->ctype), x, y, c;
    size_t n = (size_t)k->w * (size_t)k->h * (size_t)ch;
    uint16_t *s16 = malloc(n * sizeof *s16);
    uint8_t *s8 = malloc(n);
    fuzz_pattern(s16, k->w, k->h, ch, 16, (uint32_t)k->depth * 7u + (uint32_t)k->ctype);
    fuzz_pattern(s8, k->w, k->h, ch, 8, (uint32_t)k->depth * 7u + (uint32_t)k->ctype);
    memset(rows, 0, rowbytes * (size_t)k->h);
    for (y = 0; y < k->h; y++) {
        uint8_t *r = rows + (size_t)y * rowbytes;
        for (x = 0; x < k->w; x++)
            for (c = 0; c < ch; c++) {
                size_t i = ((size_t)y * (size_t)k->w + (size_t)x) * (size_t)ch + (size_t)c;
                size_t bit = ((size_t)x * (size_t)ch + (size_t)c) * (size_t)k->depth;
                if (k->depth == 16) {
                    r[bit / 8] = (uint8_t)(s16[i] >> 8);
                    r[bit / 8 + 1] = (uint8_t)s16[i];
                } else if (k->depth == 8) {
                    r[bit / 8] = s8[i];
                } else {
                    unsigned v = s8[i] >> (8 - k->depth);
                    r[bit / 8] |= (uint8_t)(v << (8 - k->depth - (int)(bit % 8)));
                }
            }
    }
    free(s16);
    free(s8);
}

static uint8_t *encode(const png_kind_t *k, size_t *size)
{
    membuf_t m = {NULL, 0, 0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    size_t rowbytes = ((size_t)k->w * (size_t)channels_of(k->ctype) * (size_t)k->depth + 7) / 8;
    uint8_t *rows = malloc(rowbytes * (size_t)k->h);
    png_bytep *rowp = malloc(sizeof *rowp * (size_t)k->h);
    int y;
    if (!png || !info || !rows || !rowp || setjmp(png_jmpbuf(png))) {
        fprintf(stderr, "fuzz_png: cannot write %s\n", k->name);
        exit(1);
    }
    png_set_write_fn(png, &m, mem_write, mem_flush);
    png_set_IHDR(png, info, (png_uint_32)k->w, (png_uint_32)k->h, k->depth, k->ctype,
                 k->interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (k->ctype == PNG_COLOR_TYPE_PALETTE) {
        png_color pal[256];
        int i, n = 1 << k->depth;
        if (n > 200) n = 200; /* fewer entries than indexes: Java's padding rule */
        for (i = 0; i < n; i++) {
            pal[i].red = (png_byte)(i * 37);
            pal[i].green = (png_byte)(255 - i * 11);
            pal[i].blue = (png_byte)(i * 5 + 3);
        }
        png_set_PLTE(png, info, pal, n);
        png_set_check_for_invalid_index(png, 0); /* indexes past PLTE on purpose */
    }
    if (k->trns) {
        png_byte alpha[16];
        png_color_16 key;
        int i;
        for (i = 0; i < 16; i++) alpha[i] = (png_byte)(i * 17);
        memset(&key, 0, sizeof key);
        key.gray = (png_uint_16)(k->depth == 16 ? 0x1234 : 1);
        key.red = 10;
        key.green = 20;
        key.blue = 30;
        png_set_tRNS(png, info, alpha, k->ctype == PNG_COLOR_TYPE_PALETTE ? 3 : 0, &key);
    }
    if (k->chunks) {
        png_text text[2];
        memset(text, 0, sizeof text);
        text[0].compression = PNG_TEXT_COMPRESSION_NONE;
        text[0].key = (png_charp) "Comment";
        text[0].text = (png_charp) "patina fuzz seed";
        text[1].compression = PNG_TEXT_COMPRESSION_zTXt;
        text[1].key = (png_charp) "Description";
        text[1].text = (png_charp) "compressed text, compressed text, compressed text";
        png_set_text(png, info, text, 2);
        png_set_gAMA(png, info, 0.45455);
        png_set_pHYs(png, info, 2835, 2835, PNG_RESOLUTION_METER);
    }
    png_write_info(png, info);
    pack_rows(rows, rowbytes, k);
    for (y = 0; y < k->h; y++) rowp[y] = rows + (size_t)y * rowbytes;
    png_write_image(png, rowp);
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    free(rows);
    free(rowp);
    *size = m.n;
    return m.p;
}

void fuzz_write_seeds(fuzz_seeds_t *w)
{
    enum { G = PNG_COLOR_TYPE_GRAY, P = PNG_COLOR_TYPE_PALETTE, RGB = PNG_COLOR_TYPE_RGB,
           GA = PNG_COLOR_TYPE_GRAY_ALPHA, RGBA = PNG_COLOR_TYPE_RGB_ALPHA };
    static const png_kind_t kinds[] = {
        /* name                   w   h  ctype depth ilace trns chunks */
        {"grey1-13x5.png",       13,  5, G,    1,    0,    0,   0},
        {"grey2-7x7.png",         7,  7, G,    2,    0,    0,   0},
        {"grey4-9x4.png",         9,  4, G,    4,    0,    0,   0},
        {"grey8-16x16.png",      16, 16, G,    8,    0,    0,   1},
        {"grey16-8x8.png",        8,  8, G,   16,    0,    0,   0},
        {"grey8-trns.png",        8,  8, G,    8,    0,    1,   0},
        {"grey16-trns.png",       6,  6, G,   16,    0,    1,   0},
        {"rgb8-12x10.png",       12, 10, RGB,  8,    0,    0,   0},
        {"rgb16-8x8.png",         8,  8, RGB, 16,    0,    0,   0},
        {"rgb8-trns.png",         8,  8, RGB,  8,    0,    1,   0},
        {"pal1-10x3.png",        10,  3, P,    1,    0,    0,   0},
        {"pal4-trns.png",         9,  9, P,    4,    0,    1,   0},
        {"pal8-16x16.png",       16, 16, P,    8,    0,    1,   1},
        {"greyalpha8-8x8.png",    8,  8, GA,   8,    0,    0,   0},
        {"greyalpha16-5x5.png",   5,  5, GA,  16,    0,    0,   0},
        {"rgba8-8x8.png",         8,  8, RGBA, 8,    0,    0,   0},
        {"rgba16-4x4.png",        4,  4, RGBA,16,    0,    0,   0},
        {"rgb8-adam7-17x11.png", 17, 11, RGB,  8,    1,    0,   0},
        {"grey16-adam7-9x9.png",  9,  9, G,   16,    1,    0,   0},
        {"pal2-adam7-10x10.png", 10, 10, P,    2,    1,    0,   0},
        {"rgba16-adam7-3x7.png",  3,  7, RGBA,16,    1,    0,   0},
        {"rgb8-1x1.png",          1,  1, RGB,  8,    0,    0,   0},
        {"grey1-1x1-adam7.png",   1,  1, G,    1,    1,    0,   0},
    };
    static const char *const tokens[] = {
        "\x89PNG\r\n\x1A\n", "IHDR", "PLTE", "IDAT", "IEND", "tRNS", "gAMA", "cHRM", "sRGB",
        "iCCP", "sBIT", "tEXt", "zTXt", "iTXt", "bKGD", "pHYs", "tIME", "hIST", "sPLT", "acTL",
        "fcTL", "fdAT", "eXIf",
    };
    size_t i;
    for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        size_t n;
        uint8_t *png = encode(&kinds[i], &n);
        fuzz_image_seed(w, kinds[i].name, png, n, PATINA_FORMAT_PNG, 1);
        if (i == 7) /* cut inside IDAT */
            fuzz_image_seed(w, "rgb8-truncated.png", png, n - 20, PATINA_FORMAT_PNG, 0);
        free(png);
    }
    for (i = 0; i < sizeof tokens / sizeof tokens[0]; i++) fuzz_dict_str(w, tokens[i]);
    fuzz_dict(w, "\x00\x00\x00\x0D", 4); /* IHDR length */
    fuzz_dict(w, "\x00\x00\x00\x00", 4);
    fuzz_dict(w, "\x7F\xFF\xFF\xFF", 4);
    fuzz_dict(w, "\xFF\xFF\xFF\xFF", 4);
    fuzz_dict(w, "\x78\x9C", 2); /* zlib header */
    fuzz_dict(w, "\x78\xDA", 2);
}
