/* Code map files (docs/lbp.md, "Code map files"): binary PGM for codes
 * under 2^16, a depth-2 PAM for wider codes, PFM for floating-point maps. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "patina/descriptor.h"

static uint64_t map_max(const patina_codemap_t *m)
{
    size_t n = (size_t)m->width * (size_t)m->height, i;
    uint64_t mx = 0;
    for (i = 0; i < n; i++) {
        uint64_t v = m->elem == PATINA_ELEM_U8    ? ((const uint8_t *)m->data)[i]
                   : m->elem == PATINA_ELEM_U16   ? ((const uint16_t *)m->data)[i]
                                                  : ((const uint32_t *)m->data)[i];
        if (v > mx) mx = v;
    }
    return mx;
}

static uint32_t code_at(const patina_codemap_t *m, size_t i)
{
    switch (m->elem) {
    case PATINA_ELEM_U8: return ((const uint8_t *)m->data)[i];
    case PATINA_ELEM_U16: return ((const uint16_t *)m->data)[i];
    default: return ((const uint32_t *)m->data)[i];
    }
}

patina_status patina_codemap_write(const patina_codemap_t *map, const char *path)
{
    FILE *f;
    size_t n, i, w;
    unsigned char *row = NULL;
    int y, ok = 1;
    if (!map || !path || map->width < 0 || map->height < 0 ||
        ((size_t)map->width * (size_t)map->height > 0 && !map->data))
        return patina__fail(PATINA_E_INVALID, "codemap: null or malformed map");
    if (map->elem != PATINA_ELEM_U8 && map->elem != PATINA_ELEM_U16 &&
        map->elem != PATINA_ELEM_U32 && map->elem != PATINA_ELEM_F64)
        return patina__fail(PATINA_E_INVALID, "codemap: unsupported element type %d", (int)map->elem);
    w = (size_t)map->width;
    n = w * (size_t)map->height;
    row = malloc(w * 4 + 1);
    if (!row) return patina__fail(PATINA_E_NOMEM, "codemap: out of memory");
    f = fopen(path, "wb");
    if (!f) {
        free(row);
        return patina__fail(PATINA_E_IO, "codemap: cannot create '%s': %s", path, strerror(errno));
    }
    if (map->elem == PATINA_ELEM_F64) {
        /* PFM: rows bottom to top, float32, little-endian (negative scale) */
        ok = fprintf(f, "Pf\n%d %d\n-1.0\n", map->width, map->height) > 0;
        for (y = map->height - 1; ok && y >= 0; y--) {
            for (i = 0; i < w; i++) {
                float v = (float)((const double *)map->data)[(size_t)y * w + i];
                uint32_t b;
                memcpy(&b, &v, 4);
                row[4 * i] = (unsigned char)b;
                row[4 * i + 1] = (unsigned char)(b >> 8);
                row[4 * i + 2] = (unsigned char)(b >> 16);
                row[4 * i + 3] = (unsigned char)(b >> 24);
            }
            ok = fwrite(row, 4, w, f) == w;
        }
    } else {
        uint64_t mx = n ? map_max(map) : 0;
        int bytes = mx < 256 ? 1 : mx < 65536 ? 2 : 4;
        if (bytes == 4)
            ok = fprintf(f, "P7\nWIDTH %d\nHEIGHT %d\nDEPTH 2\nMAXVAL 65535\n"
                            "TUPLTYPE PATINA_CODE32\nENDHDR\n", map->width, map->height) > 0;
        else
            ok = fprintf(f, "P5\n%d %d\n%d\n", map->width, map->height, bytes == 1 ? 255 : 65535) > 0;
        for (y = 0; ok && y < map->height; y++) {
            for (i = 0; i < w; i++) {
                uint32_t v = code_at(map, (size_t)y * w + i);
                if (bytes == 1) {
                    row[i] = (unsigned char)v;
                } else if (bytes == 2) {
                    row[2 * i] = (unsigned char)(v >> 8);
                    row[2 * i + 1] = (unsigned char)v;
                } else {
                    row[4 * i] = (unsigned char)(v >> 24);
                    row[4 * i + 1] = (unsigned char)(v >> 16);
                    row[4 * i + 2] = (unsigned char)(v >> 8);
                    row[4 * i + 3] = (unsigned char)v;
                }
            }
            ok = fwrite(row, (size_t)bytes, w, f) == w;
        }
    }
    free(row);
    if (fclose(f) != 0) ok = 0;
    if (!ok) return patina__fail(PATINA_E_IO, "codemap: cannot write '%s': %s", path, strerror(errno));
    return PATINA_OK;
}
