/* The rootsift family's record layout, its accessors and the extraction entry
 * points that matching (identify) uses. One internal header: the CPU
 * extractor (src/features/rootsift.c), the search distance
 * (src/search/distance.c), the public view (include/patina/rootsift.h) and
 * the GPU matcher read records only through what is declared here.
 *
 * One record per image, of FIXED size for a spec (m rows whatever the count),
 * so that records of a collection form one strided array a batched GEMM can
 * stream. Every multi-byte field is little-endian (docs/rootsift.md):
 *
 *   offset  size          field
 *   0       u32           count    valid features, 0 <= count <= m; rows are
 *                                  strongest first (|DoG peak| descending)
 *   4       u32           version  RS_VERSION
 *   8       u32           m        rows in this record
 *   12      u32           quant    RS_QUANT_U8 or RS_QUANT_F16
 *   16      f32           qscale   stored value = RootSIFT component * qscale
 *   20      f32           downscale  original / detected pixel size (>= 1;
 *                                  1 when the image was not downscaled)
 *   24      u32 x 4       width, height (detected image), orig_width,
 *                                  orig_height (the image given)
 *   40      24 bytes      zero
 *   64      m x 128 x E   descriptors, row-major: (m, 128) u8 (E = 1) or
 *                                  (m, 128) IEEE binary16 (E = 2); rows
 *                                  [count, m) are zero
 *   64+128Em  m x 4 x f32 geometry (x, y, scale, angle) per row in ORIGINAL
 *                                  image pixels (pixel centres at integers,
 *                                  (0, 0) the top-left pixel's centre); scale
 *                                  is VLFeat's sigma; angle radians as VLFeat
 *                                  gives it, in [0, 2 pi); rows past count 0
 *
 * Size: 64 + m * (128 E + 16) bytes, a multiple of 16: descriptor rows start
 * 64-byte aligned within the record, geometry 16-byte aligned. */
#ifndef PATINA_FEATURES_ROOTSIFT_H
#define PATINA_FEATURES_ROOTSIFT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "patina/image.h"
#include "patina/status.h"

#define RS_DIM 128          /* components per descriptor */
#define RS_HEADER 64        /* bytes before the descriptor rows */
#define RS_VERSION 1u
#define RS_QUANT_U8 0u
#define RS_QUANT_F16 1u
#define RS_M_MAX 4096       /* bound of the options m (and n for records) */
#define RS_N_MAX 16384      /* bound of the option n */
/* u8 scale: component x is stored as min(255, round(x * 512)). A RootSIFT
 * component is at most 1 but on real images almost never above 0.5; the
 * measured clipping rate is in docs/rootsift.md. */
#define RS_U8_SCALE 512.0f
/* fp16 stores the component itself (every component is in [0, 1], where
 * binary16 has 11 significant bits): scale 1. */
#define RS_F16_SCALE 1.0f

/* Parsed options (the table is in rootsift.c; docs/rootsift.md). */
typedef struct rootsift_params {
    int m;            /* reference budget: rows of a record */
    int n;            /* query budget (identify); not used by the reference extractor */
    double peak;      /* VLFeat peak threshold, grey levels of a [0, 255] image */
    double edge;      /* VLFeat edge threshold */
    int maxside;      /* longer side above this is downscaled first; 0: never */
    int first_octave; /* VLFeat o_min: -1 doubles the image first */
    int octaves;      /* at most this many octaves; -1: all that fit */
    int levels;       /* levels per octave */
    int quant;        /* RS_QUANT_U8 | RS_QUANT_F16 */
} rootsift_params_t;

/* ------------------------------------------------------------ byte order */

static inline uint32_t rs_get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline float rs_get_f32(const unsigned char *p)
{
    uint32_t u = rs_get_u32(p);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline void rs_put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static inline void rs_put_f32(unsigned char *p, float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    rs_put_u32(p, u);
}

/* IEEE binary16 <-> binary32: round to nearest even, overflow to infinity,
 * subnormals kept (the exact conversion; tests compare with _Float16). */
uint16_t rs_f32_to_f16(float f);
float rs_f16_to_f32(uint16_t h);

/* --------------------------------------------------------------- layout */

/* Bytes of one element of a descriptor row. */
static inline size_t rs_elem_bytes(uint32_t quant) { return quant == RS_QUANT_F16 ? 2 : 1; }

/* Bytes of a record of m rows. */
static inline size_t rs_record_bytes(size_t m, uint32_t quant)
{
    return RS_HEADER + m * (RS_DIM * rs_elem_bytes(quant) + 4 * sizeof(float));
}

static inline uint32_t rs_count(const void *rec) { return rs_get_u32((const unsigned char *)rec + 0); }
static inline uint32_t rs_version(const void *rec) { return rs_get_u32((const unsigned char *)rec + 4); }
static inline uint32_t rs_m(const void *rec) { return rs_get_u32((const unsigned char *)rec + 8); }
static inline uint32_t rs_quant(const void *rec) { return rs_get_u32((const unsigned char *)rec + 12); }
static inline float rs_qscale(const void *rec) { return rs_get_f32((const unsigned char *)rec + 16); }
static inline float rs_downscale(const void *rec) { return rs_get_f32((const unsigned char *)rec + 20); }
/* which: 0 width, 1 height (detected), 2 orig_width, 3 orig_height. */
static inline uint32_t rs_size(const void *rec, int which)
{
    return rs_get_u32((const unsigned char *)rec + 24 + 4 * which);
}

/* Row i of the descriptors: 128 u8 (quant u8) or 128 little-endian binary16
 * (quant f16). Borrowed from the record. */
static inline const unsigned char *rs_row(const void *rec, size_t i)
{
    return (const unsigned char *)rec + RS_HEADER + i * RS_DIM * rs_elem_bytes(rs_quant(rec));
}

/* The geometry block: (m, 4) little-endian f32 (x, y, scale, angle). */
static inline const unsigned char *rs_geometry(const void *rec)
{
    return (const unsigned char *)rec + RS_HEADER + (size_t)rs_m(rec) * RS_DIM * rs_elem_bytes(rs_quant(rec));
}

/* Geometry of row i as floats: g = {x, y, scale, angle}. */
static inline void rs_geom_get(const void *rec, size_t i, float g[4])
{
    const unsigned char *p = rs_geometry(rec) + i * 16;
    for (int k = 0; k < 4; k++) g[k] = rs_get_f32(p + 4 * k);
}

/* Row i dequantised: v[k] = stored / qscale (the RootSIFT component). */
void rs_row_get(const void *rec, size_t i, float v[RS_DIM]);

/* PATINA_OK when rec (bytes long) is a well-formed record: version, quant,
 * m matching bytes, count <= m, qscale > 0. Else PATINA_E_CORRUPT with the
 * reason ("what" names the caller in the message). */
patina_status rs_record_check(const void *rec, size_t bytes, const char *what);

/* ----------------------------------------------------------- extraction */

/* Extracts the `budget` strongest features of img into rec, a record of
 * rs_record_bytes(budget, p->quant) bytes (fully written, zero-padded).
 * References use budget = p->m; identify's queries p->n. A flat or tiny
 * image gives count 0 and PATINA_OK. Thread-safe (no shared state). */
patina_status rs_extract(const rootsift_params_t *p, size_t budget, void *rec, const patina_image_t *img);

#endif
