/* Fuzz target: the PNM loader (src/image/pnm.c: the header parser and the
 * P5/P6 sample conversion) through patina_image_probe and
 * patina_image_decode. Seeds: P5 and P6 files written here at build time
 * with 8- and 16-bit samples, odd maxvals, comments and odd whitespace in the
 * header, 1x1, two images in one file, the rejected types (P1-P4, P7) and a
 * truncated file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_image_input(data, size);
    return 0;
}

/* ------------------------------------------------------------------ seeds */

/* header + w*h*channels samples below maxval+1 (big-endian when > 255);
 * `images` copies back to back. Returns the byte count. */
static size_t make_pnm(uint8_t *out, size_t cap, const char *header, int w, int h, int channels,
                       unsigned maxval, int images)
{
    size_t n = 0, hl = strlen(header), ns = (size_t)w * (size_t)h * (size_t)channels, i;
    uint16_t *s = malloc(ns * sizeof *s);
    int k;
    fuzz_pattern(s, w, h, channels, 16, maxval + (unsigned)w);
    for (k = 0; k < images; k++) {
        if (n + hl > cap) abort();
        memcpy(out + n, header, hl);
        n += hl;
        for (i = 0; i < ns; i++) {
            unsigned v = s[i] % (maxval + 1);
            if (n + 2 > cap) abort();
            if (maxval > 255) out[n++] = (uint8_t)(v >> 8);
            out[n++] = (uint8_t)v;
        }
    }
    free(s);
    return n;
}

void fuzz_write_seeds(fuzz_seeds_t *w)
{
    static const struct {
        const char *name, *header;
        int w, h, channels;
        unsigned maxval;
        int images, valid;
    } kinds[] = {
        {"p5-8bit.pgm", "P5\n16 12\n255\n", 16, 12, 1, 255, 1, 1},
        {"p6-8bit.ppm", "P6\n12 8\n255\n", 12, 8, 3, 255, 1, 1},
        {"p5-16bit.pgm", "P5 9 7 65535\n", 9, 7, 1, 65535, 1, 1},
        {"p6-16bit-1000.ppm", "P6\n5 5\n1000\n", 5, 5, 3, 1000, 1, 1},
        {"p5-maxval1.pgm", "P5 6 6 1\n", 6, 6, 1, 1, 1, 1},
        {"p6-maxval100.ppm", "P6\t7\r3\f100\n", 7, 3, 3, 100, 1, 1},
        {"p6-comments.ppm", "P6 # comment\n# another\n4 # w\n4\n#maxval next\n255\r", 4, 4, 3, 255, 1, 1},
        {"p5-1x1.pgm", "P5\n1 1\n255\n", 1, 1, 1, 255, 1, 1},
        {"p6-1x1-16bit.ppm", "P6\n1 1\n256\n", 1, 1, 3, 256, 1, 1},
        {"p6-two-images.ppm", "P6\n3 2\n255\n", 3, 2, 3, 255, 2, 1},
        {"p5-257.pgm", "P5#c\n8 2 257\n", 8, 2, 1, 257, 1, 1},
    };
    static const char *const rejected[][2] = {
        {"p1.pbm", "P1\n2 2\n0 1\n1 0\n"},
        {"p2.pgm", "P2\n2 2\n255\n0 10 20 30\n"},
        {"p3.ppm", "P3\n1 1\n255\n1 2 3\n"},
        {"p4.pbm", "P4\n8 2\n\xAA\x55"},
        {"p7.pam", "P7\nWIDTH 1\nHEIGHT 1\nDEPTH 3\nMAXVAL 255\nTUPLTYPE RGB\nENDHDR\n\1\2\3"},
    };
    static const char *const tokens[] = {
        "P5", "P6", "P1", "P2", "P3", "P4", "P7", "255", "256", "65535", "65536", "0",
        "2147483647", "2147483648", "#", "\n", " ", "\r\n", "\t",
    };
    uint8_t buf[8192];
    size_t i, n;
    for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        n = make_pnm(buf, sizeof buf, kinds[i].header, kinds[i].w, kinds[i].h, kinds[i].channels,
                     kinds[i].maxval, kinds[i].images);
        fuzz_image_seed(w, kinds[i].name, buf, n, PATINA_FORMAT_PNM, kinds[i].valid);
        if (i == 1) fuzz_image_seed(w, "p6-truncated.ppm", buf, n - 7, PATINA_FORMAT_PNM, 0);
    }
    for (i = 0; i < sizeof rejected / sizeof rejected[0]; i++)
        fuzz_image_seed(w, rejected[i][0], rejected[i][1], strlen(rejected[i][1]), PATINA_FORMAT_PNM, 0);
    for (i = 0; i < sizeof tokens / sizeof tokens[0]; i++) fuzz_dict_str(w, tokens[i]);
}
