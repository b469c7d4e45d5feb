/* The rootsift record's layout and the 2-NN ratio-test matching on it: the
 * arithmetic that the rootsift family (src/features/rootsift.c, which
 * writes records and checks them with a message), identification
 * (src/identify/identify.c, which scores and verifies) and the search
 * (src/search/distance.c, the `rootsift_ratio` distance) share. One
 * definition (src/algo/rootsift_match.c). Not here: extraction
 * (features/rootsift.h), RANSAC and reference sets (identify/identify.h),
 * messages (callers turn rs_record_problem's text into a status). The GPU
 * matcher (src/gpu/idf_kernels.cuh) reproduces these decisions.
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
 * 64-byte aligned within the record, geometry 16-byte aligned.
 *
 * Matching. The definition (idf_match_ref, the ground truth the GPU matcher
 * is tested against) is plain float: the rows dequantised (u8 / qscale, or
 * the f16 values), s = sum_k q[k] r[k] accumulated in float in k order,
 * d^2 = 2 - 2 s (RootSIFT rows are L2-unit), clamped at 0.
 *
 * The fast matcher (idf_match_fast) takes u8 rows and computes the integer
 * dot; for u8 rows at a power-of-two scale (512) the float definition is
 * EXACT: every product q r / 2^18 has at most 16 significant bits and every
 * partial sum is an integer below 128 * 255^2 < 2^24 times 2^-18, so float
 * represents it without rounding. Hence s_float = dot * 2^-18 bit for bit,
 * and every decision (nearest neighbours, ratio test, scoring) of the two
 * matchers is identical (test_identify checks it on random, tie-heavy and
 * real records). One scoring function serves identify and the
 * `rootsift_ratio` search distance (idf_ratio_count). */
#ifndef PATINA_ALGO_ROOTSIFT_MATCH_H
#define PATINA_ALGO_ROOTSIFT_MATCH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

/* Writes a header (the readers above, field by field): count valid rows of
 * m, quantisation quant and its scale, downscale, the detected image's w x
 * h and the original's W x H. The rest of the record is the caller's (its
 * reserved bytes zero). */
static inline void rs_put_header(void *rec, uint32_t count, uint32_t m, uint32_t quant, float downscale, uint32_t w,
                                 uint32_t h, uint32_t W, uint32_t H)
{
    unsigned char *p = (unsigned char *)rec;
    rs_put_u32(p + 0, count);
    rs_put_u32(p + 4, RS_VERSION);
    rs_put_u32(p + 8, m);
    rs_put_u32(p + 12, quant);
    rs_put_f32(p + 16, quant == RS_QUANT_F16 ? RS_F16_SCALE : RS_U8_SCALE);
    rs_put_f32(p + 20, downscale);
    rs_put_u32(p + 24, w);
    rs_put_u32(p + 28, h);
    rs_put_u32(p + 32, W);
    rs_put_u32(p + 36, H);
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

/* Checks rec (bytes long, may be NULL): version, quant, m matching bytes,
 * count <= m, qscale > 0. 0 when the record is well-formed; otherwise 1
 * and, when msg is not NULL, what is wrong in msg (cap bytes, e.g.
 * "rootsift record count 9 > m = 8"; no prefix). features/rootsift.h's
 * rs_record_check turns it into a status. */
int rs_record_problem(const void *rec, size_t bytes, char *msg, size_t cap);

/* -------------------------------------------------------------- matching */

#define IDF_DIM 128

/* 2-NN of one query against one reference, per query row j < nq:
 *   best[j]  the reference row with the largest similarity (ties: the lower
 *            index), -1 when the reference has no rows;
 *   s1[j]    that similarity; s2[j] the largest among the OTHER rows (a tie
 *            with s1 gives s2 = s1), -1 when the reference has < 2 rows;
 * and per reference row i < nr (for mutual nearest neighbours):
 *   qbest[i] the query row with the largest similarity (ties: the lower
 *            index), -1 when the query has no rows; qs[i] that similarity.
 * Similarities of RootSIFT rows are >= 0, so -1 is a safe "none". */
typedef struct idf_nn {
    int32_t *best;    /* (nq) caller storage */
    float *s1, *s2;   /* (nq) each */
    int32_t *qbest;   /* (nr) */
    float *qs;        /* (nr) */
} idf_nn_t;

/* The plain float matcher, the definition: q (nq, 128) and r (nr, 128)
 * dequantised rows, row-major. */
void idf_match_ref(idf_nn_t *out, const float *q, size_t nq, const float *r, size_t nr);

/* The same result for u8 rows, blocked and vectorisable: qw is the query
 * widened to int16 by idf_widen (nq, 128); four query rows share each
 * reference row (with AVX-512 VNNI: eight query rows and sixteen
 * reference rows a tile, vpdpwssd); similarities are reported as
 * dot * inv_scale2 (inv_scale2 = 1 / (qscale_q qscale_r), a power of two
 * for exactness: 2^-18). qs: (nr) int32 scratch. */
void idf_match_fast(idf_nn_t *out, int32_t *qs, const int16_t *qw, size_t nq, const uint8_t *r, size_t nr,
                    float inv_scale2);
/* idf_match_fast without the AVX-512 VNNI path (what CPUs without it run),
 * for the tests to hold both to the definition on any machine. */
void idf_match_fast_plain(idf_nn_t *out, int32_t *qs, const int16_t *qw, size_t nq, const uint8_t *r, size_t nr,
                          float inv_scale2);

/* What idf_match_fast writes into out from the same integer dots computed
 * elsewhere (the GPU's, patina_gpu_identify_nn): best and qbest as they
 * are, s1, s2 and qs converted to similarities (dot x inv_scale2; -1 stays
 * -1) by the same rule, so that out is identical, bit for bit. */
void idf_nn_from_dots(idf_nn_t *out, const int32_t *best, const int32_t *s1, const int32_t *s2, size_t nq,
                      const int32_t *qbest, const int32_t *qs, size_t nr, float inv_scale2);
void idf_widen(int16_t *qw, const uint8_t *q, size_t nq);

/* Lowe's ratio test: d1 < ratio * d2 with d^2 = max(0, 2 - 2 s) (in
 * double). No second neighbour (s2 < 0) never passes. */
int idf_ratio_pass(float s1, float s2, double ratio);

/* One tentative correspondence: query row q, reference row r, similarity. */
typedef struct idf_match {
    int32_t q, r;
    float s;
} idf_match_t;

/* The correspondences a scoring rule counts (ordered by query row); scoring
 * is a patina_identify_scoring value (include/patina/identify.h):
 *   RAW      every query row passing the ratio test (the paper's count);
 *   ONE2ONE  of the passing rows claiming one reference row, only the best
 *            (largest similarity; ties: the lower query row), so the count
 *            is the number of DISTINCT reference rows hit;
 *   MUTUAL   ONE2ONE restricted to pairs that are each other's nearest
 *            neighbour (qbest[r] == q).
 * out: nq entries (caller storage); claim: nr int32 scratch. Returns the
 * number written, which is the score. */
size_t idf_score(idf_match_t *out, int32_t *claim, const idf_nn_t *nn, size_t nq, size_t nr, double ratio,
                 int scoring);

/* 2^-18 = 1 / 512^2: the similarity of two u8 rows at scale 512 is their
 * integer dot times this, exactly. */
#define IDF_INV_SCALE2 (1.0f / 262144.0f)

/* 1 when the record's rows are u8 at scale 512 (the fast matcher's exact
 * case), 0 otherwise (f16, or another scale: the float definition). */
int idf_exact_u8(const void *rec);

/* The record's count rows, dequantised as the definition reads them
 * (rs_row_get): v (count, 128) floats. */
void idf_dequantise(float *v, const void *rec);

/* The score of records a (query) and b (reference), rootsift records of
 * abytes and bbytes (u8 or f16), under `scoring` (as idf_score) at
 * `ratio`: the fast matcher when both are u8, else the float definition on
 * dequantised rows (equal results). -1 when a record is malformed
 * (rs_record_problem) or memory runs out. The `rootsift_ratio` search
 * distance is 1 / (1 + this) with ONE2ONE at the search's ratio
 * (patina_search_opts_t.ratio). */
long idf_ratio_count(const void *a, size_t abytes, const void *b, size_t bbytes, double ratio, int scoring);

#endif
