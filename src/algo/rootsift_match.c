/* The rootsift record's conversions and check, and the 2-NN matching of
 * RootSIFT rows, the ratio test and the scoring rules (algo/rootsift_match.h).
 * Two matchers, one answer: idf_match_ref, one float dot product per pair
 * (the definition), and idf_match_fast for u8 rows, which widens the query
 * to int16 once and lets four query rows share each loaded reference row;
 * its inner loop is a plain int16 x int16 -> int32 reduction that compilers
 * vectorise (pmaddwd on x86), and its integers times 2^-18 are the
 * definition's floats exactly. On a CPU with AVX-512 VNNI, match_vnni
 * does it instead (vpdpbusd): the same integers, sixteen reference rows a
 * vector, references in segments of 512 rows, and the same answer. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/problem.h"
#include "algo/clones.h"
#include "algo/f16.h"
#include "algo/rootsift_match.h"
#include "patina/identify.h"

/* ----------------------------------------------------------------- binary16 */

uint16_t rs_f32_to_f16(float f) { return f16_from_f32(f); }

float rs_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, u;
    float f;
    if (exp == 0x1f)
        u = sign | 0x7f800000u | (mant << 13);
    else if (exp)
        u = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    else if (!mant)
        u = sign;
    else { /* subnormal: mant * 2^-24 exactly */
        f = ldexpf((float)mant, -24);
        return sign ? -f : f;
    }
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ------------------------------------------------------------------- records */

void rs_row_get(const void *rec, size_t i, float v[RS_DIM])
{
    const unsigned char *r = rs_row(rec, i);
    const float s = rs_qscale(rec);
    for (int k = 0; k < RS_DIM; k++)
        v[k] = rs_quant(rec) == RS_QUANT_F16
                   ? rs_f16_to_f32((uint16_t)(r[2 * k] | r[2 * k + 1] << 8)) / s
                   : (float)r[k] / s;
}

int rs_record_problem(const void *rec, size_t bytes, char *msg, size_t cap)
{
    uint32_t m, q;
    float s;
    if (!rec || bytes < RS_HEADER)
        return algo_problem(msg, cap, "rootsift record of %zu bytes (header is %d)", bytes, RS_HEADER);
    if (rs_version(rec) != RS_VERSION)
        return algo_problem(msg, cap, "rootsift record version %u (this library reads %u)", (unsigned)rs_version(rec),
                       RS_VERSION);
    m = rs_m(rec);
    q = rs_quant(rec);
    s = rs_qscale(rec);
    if (q != RS_QUANT_U8 && q != RS_QUANT_F16)
        return algo_problem(msg, cap, "rootsift record quant %u is unknown", (unsigned)q);
    if (m > RS_N_MAX || rs_record_bytes(m, q) != bytes)
        return algo_problem(msg, cap, "rootsift record of %zu bytes declares m = %u", bytes, (unsigned)m);
    if (rs_count(rec) > m)
        return algo_problem(msg, cap, "rootsift record count %u > m = %u", (unsigned)rs_count(rec), (unsigned)m);
    if (!(s > 0.0f) || !isfinite(s)) return algo_problem(msg, cap, "rootsift record scale %g", (double)s);
    return 0;
}

/* ----------------------------------------------------------------- matching */

/* Keeps the top 2 of one query row; strict '>' keeps the lower index on a
 * tie for best, and a tie with the best becomes the second (s2 = s1). */
#define TOP2_UPDATE(best, s1, s2, dot, i)                                                                         \
    do {                                                                                                      \
        if ((dot) > (s1)) {                                                                                   \
            (s2) = (s1);                                                                                      \
            (s1) = (dot);                                                                                     \
            (best) = (i);                                                                                     \
        } else if ((dot) > (s2)) {                                                                            \
            (s2) = (dot);                                                                                     \
        }                                                                                                     \
    } while (0)

void idf_match_ref(idf_nn_t *out, const float *q, size_t nq, const float *r, size_t nr)
{
    size_t j, i, k;
    for (j = 0; j < nq; j++) {
        out->best[j] = -1;
        out->s1[j] = -1.0f;
        out->s2[j] = -1.0f;
    }
    for (i = 0; i < nr; i++) {
        out->qbest[i] = -1;
        out->qs[i] = -1.0f;
    }
    for (j = 0; j < nq; j++) {
        for (i = 0; i < nr; i++) {
            float dot = 0.0f;
            for (k = 0; k < IDF_DIM; k++) dot += q[j * IDF_DIM + k] * r[i * IDF_DIM + k];
            TOP2_UPDATE(out->best[j], out->s1[j], out->s2[j], dot, (int32_t)i);
            if (dot > out->qs[i]) { /* query rows in increasing order: ties keep the lower */
                out->qs[i] = dot;
                out->qbest[i] = (int32_t)j;
            }
        }
    }
}

void idf_widen(int16_t *qw, const uint8_t *q, size_t nq)
{
    size_t t;
    for (t = 0; t < nq * IDF_DIM; t++) qw[t] = (int16_t)q[t];
}

/* Dots of four query rows with one reference row. */
static inline void dot4(int32_t d[4], const int16_t *restrict q0, const int16_t *restrict q1,
                        const int16_t *restrict q2, const int16_t *restrict q3, const uint8_t *restrict r)
{
    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    int k;
    for (k = 0; k < IDF_DIM; k++) {
        int16_t v = (int16_t)r[k];
        a0 += q0[k] * v;
        a1 += q1[k] * v;
        a2 += q2[k] * v;
        a3 += q3[k] * v;
    }
    d[0] = a0;
    d[1] = a1;
    d[2] = a2;
    d[3] = a3;
}

static inline float to_sim(int32_t dot, float inv_scale2)
{
    return dot < 0 ? -1.0f : (float)dot * inv_scale2;
}

/* Static so that the clones' ifunc stays inside the library (an extern
 * target_clones function is exported whatever -fvisibility says). qs is
 * int32 scratch (nr) for the per-reference-row best dots. */
static PATINA_CLONES void match_fast(idf_nn_t *out, int32_t *qs, const int16_t *qw, size_t nq, const uint8_t *r,
                                     size_t nr, float inv_scale2)
{
    size_t j0, i, t;
    for (i = 0; i < nr; i++) {
        out->qbest[i] = -1;
        qs[i] = -1;
    }
    /* Query rows in blocks of 4 (the last block repeats its last row; the
     * repeats are not recorded), reference rows in increasing order within
     * each block, blocks in increasing order: the same visiting order per
     * query row and per reference row as idf_match_ref, hence the same ties. */
    for (j0 = 0; j0 < nq; j0 += 4) {
        size_t nb = nq - j0 < 4 ? nq - j0 : 4;
        const int16_t *qr[4];
        int32_t b[4], s1[4], s2[4];
        for (t = 0; t < 4; t++) {
            qr[t] = qw + (j0 + (t < nb ? t : nb - 1)) * IDF_DIM;
            b[t] = -1;
            s1[t] = -1;
            s2[t] = -1;
        }
        for (i = 0; i < nr; i++) {
            int32_t d[4];
            dot4(d, qr[0], qr[1], qr[2], qr[3], r + i * IDF_DIM);
            for (t = 0; t < nb; t++) {
                TOP2_UPDATE(b[t], s1[t], s2[t], d[t], (int32_t)i);
                if (d[t] > qs[i]) {
                    qs[i] = d[t];
                    out->qbest[i] = (int32_t)(j0 + t);
                }
            }
        }
        for (t = 0; t < nb; t++) {
            out->best[j0 + t] = b[t];
            out->s1[j0 + t] = to_sim(s1[t], inv_scale2);
            out->s2[j0 + t] = to_sim(s2[t], inv_scale2);
        }
    }
    for (i = 0; i < nr; i++) out->qs[i] = to_sim(qs[i], inv_scale2);
}

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define IDF_VNNI 1

/* The same matcher on AVX-512 VNNI (vpdpbusd: four u8 x s8 products added
 * into an int32 lane, exact). Lanes are 16 reference rows: rt holds the
 * reference re-laid as (tile, group g, lane) dwords, bytes 4g .. 4g + 3 of
 * a row (rows past nr zero). The query's u8 values q = lo + 128 hi (lo
 * < 128, hi 0 or 1) are s8 on both parts; a tile of VN_J query rows
 * broadcasts its groups' dwords, adds the hi parts first (only the groups
 * where one of the tile's rows has a value >= 128: RootSIFT rows rarely
 * do), shifts them by 7, then adds the lo parts. Per query row each lane
 * keeps the top 2 of its reference rows as keys (dot + 1) * 512 + 511 -
 * row (the larger dot first, then the lower row, the visiting order's tie
 * rule; 0 is "none"), merged over the lanes at the end; per reference row
 * the best query row is kept as the scalar code does (query rows in
 * increasing order, strict '>'). Needs nr <= 512 (9 bits of row;
 * idf_match_fast passes longer references in segments) and 1 <= nr; the
 * dots of u8 rows are below 2^23, so the keys fit 32 bits. */
#define VN_J 8
__attribute__((target("avx2,avx512f,avx512bw,avx512vnni"))) static void
match_vnni(idf_nn_t *out, int32_t *qs, const int16_t *qw, size_t nq, const uint8_t *r, size_t nr, float inv_scale2,
           uint32_t *rt)
{
    const size_t nt = (nr + 15) / 16;
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i one = _mm512_set1_epi32(1);
    const __m256i m7f = _mm256_set1_epi8(0x7f), m01 = _mm256_set1_epi8(1);
    uint32_t qlo[VN_J][32], qhi[VN_J][32];
    size_t t, l, g, j0, u, h;
    for (t = 0; t < nt; t++)
        for (l = 0; l < 16; l++) {
            const size_t row = t * 16 + l;
            uint32_t *d = rt + t * 512 + l;
            for (g = 0; g < 32; g++) {
                uint32_t v = 0;
                if (row < nr) memcpy(&v, r + row * IDF_DIM + 4 * g, sizeof v);
                d[g * 16] = v;
            }
        }
    for (l = 0; l < nr; l++) {
        out->qbest[l] = -1;
        qs[l] = -1;
    }
    for (j0 = 0; j0 < nq; j0 += VN_J) {
        const size_t nb = nq - j0 < VN_J ? nq - j0 : VN_J;
        __m512i b[VN_J], s2[VN_J];
        size_t hg[32], nh = 0;
        /* the tile's rows (the last one repeated, not recorded) as s8 lo and hi parts */
        for (u = 0; u < VN_J; u++) {
            const int16_t *qr = qw + (j0 + (u < nb ? u : nb - 1)) * IDF_DIM;
            for (h = 0; h < 4; h++) {
                const __m256i v = _mm512_cvtepi16_epi8(_mm512_loadu_si512((const void *)(qr + 32 * h)));
                _mm256_storeu_si256((__m256i *)(qlo[u] + 8 * h), _mm256_and_si256(v, m7f));
                _mm256_storeu_si256((__m256i *)(qhi[u] + 8 * h), _mm256_and_si256(_mm256_srli_epi16(v, 7), m01));
            }
            b[u] = _mm512_setzero_si512();
            s2[u] = _mm512_setzero_si512();
        }
        for (g = 0; g < 32; g++) {
            uint32_t any = 0;
            for (u = 0; u < VN_J; u++) any |= qhi[u][g];
            if (any) hg[nh++] = g;
        }
        for (t = 0; t < nt; t++) {
            const __mmask16 valid = (t + 1 < nt || nr % 16 == 0) ? (__mmask16)0xffff
                                                                  : (__mmask16)((1u << (nr % 16)) - 1u);
            const __m512i col = _mm512_sub_epi32(_mm512_set1_epi32((int)(511 - 16 * t)), lane);
            const uint32_t *bt = rt + t * 512;
            __m512i acc[VN_J], qv, qi;
#pragma GCC unroll 8
            for (u = 0; u < VN_J; u++) acc[u] = _mm512_setzero_si512();
            if (nh) { /* the hi parts, times 128 */
                for (h = 0; h < nh; h++) {
                    const __m512i bv = _mm512_load_si512((const void *)(bt + hg[h] * 16));
#pragma GCC unroll 8
                    for (u = 0; u < VN_J; u++)
                        acc[u] = _mm512_dpbusd_epi32(acc[u], bv, _mm512_set1_epi32((int)qhi[u][hg[h]]));
                }
#pragma GCC unroll 8
                for (u = 0; u < VN_J; u++) acc[u] = _mm512_slli_epi32(acc[u], 7);
            }
            for (g = 0; g < 32; g++) {
                const __m512i bv = _mm512_load_si512((const void *)(bt + g * 16));
#pragma GCC unroll 8
                for (u = 0; u < VN_J; u++) acc[u] = _mm512_dpbusd_epi32(acc[u], bv, _mm512_set1_epi32((int)qlo[u][g]));
            }
            qv = _mm512_mask_loadu_epi32(_mm512_set1_epi32(-1), valid, qs + 16 * t);
            qi = _mm512_mask_loadu_epi32(_mm512_set1_epi32(-1), valid, out->qbest + 16 * t);
#pragma GCC unroll 8
            for (u = 0; u < VN_J; u++) {
                if (u >= nb) break;
                const __mmask16 gt = _mm512_mask_cmpgt_epi32_mask(valid, acc[u], qv);
                const __m512i key = _mm512_maskz_add_epi32(valid, _mm512_slli_epi32(_mm512_add_epi32(acc[u], one), 9), col);
                const __m512i lo = _mm512_min_epu32(b[u], key);
                qv = _mm512_mask_mov_epi32(qv, gt, acc[u]);
                qi = _mm512_mask_mov_epi32(qi, gt, _mm512_set1_epi32((int)(j0 + u)));
                b[u] = _mm512_max_epu32(b[u], key);
                s2[u] = _mm512_max_epu32(s2[u], lo);
            }
            _mm512_mask_storeu_epi32(qs + 16 * t, valid, qv);
            _mm512_mask_storeu_epi32(out->qbest + 16 * t, valid, qi);
        }
        for (u = 0; u < nb; u++) {
            uint32_t bl[16], sl[16], best = 0, second = 0;
            size_t at = 0;
            _mm512_storeu_si512((void *)bl, b[u]);
            _mm512_storeu_si512((void *)sl, s2[u]);
            for (l = 0; l < 16; l++)
                if (bl[l] > best) {
                    best = bl[l];
                    at = l;
                }
            for (l = 0; l < 16; l++) {
                if (sl[l] > second) second = sl[l];
                if (l != at && bl[l] > second) second = bl[l];
            }
            out->best[j0 + u] = best ? (int32_t)(511u - (best & 511u)) : -1;
            out->s1[j0 + u] = to_sim(best ? (int32_t)(best >> 9) - 1 : -1, inv_scale2);
            out->s2[j0 + u] = to_sim(second ? (int32_t)(second >> 9) - 1 : -1, inv_scale2);
        }
    }
    for (l = 0; l < nr; l++) out->qs[l] = to_sim(qs[l], inv_scale2);
}

/* Whether this CPU runs match_vnni (libgcc's CPU model, filled before main). */
static int have_vnni(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vnni");
}
#endif

void idf_match_fast(idf_nn_t *out, int32_t *qs, const int16_t *qw, size_t nq, const uint8_t *r, size_t nr,
                    float inv_scale2)
{
#ifdef IDF_VNNI
    if (nr >= 1 && nq >= 1 && have_vnni()) {
        /* segments of up to 512 reference rows (match_vnni's limit), each
         * one's best and second folded into the query row's top 2 in
         * increasing row order, as the scalar loop visits them (the second
         * cannot become the best: it is at most the best before it) */
        const size_t seg = nr < 512 ? nr : 512;
        uint32_t *rt = aligned_alloc(64, (seg + 15) / 16 * 512 * sizeof *rt);
        int32_t *tb = nr > 512 ? malloc(nq * sizeof *tb) : NULL;
        float *t1 = nr > 512 ? malloc(2 * nq * sizeof *t1) : NULL;
        if (rt && (nr <= 512 || (tb && t1))) {
            size_t off, j;
            match_vnni(out, qs, qw, nq, r, seg, inv_scale2, rt);
            for (off = seg; off < nr; off += 512) {
                const size_t n = nr - off < 512 ? nr - off : 512;
                idf_nn_t part = {tb, t1, t1 + nq, out->qbest + off, out->qs + off};
                match_vnni(&part, qs + off, qw, nq, r + off * IDF_DIM, n, inv_scale2, rt);
                for (j = 0; j < nq; j++) {
                    TOP2_UPDATE(out->best[j], out->s1[j], out->s2[j], part.s1[j], part.best[j] + (int32_t)off);
                    TOP2_UPDATE(out->best[j], out->s1[j], out->s2[j], part.s2[j], part.best[j] + (int32_t)off);
                }
            }
            free(rt);
            free(tb);
            free(t1);
            return;
        }
        free(rt);
        free(tb);
        free(t1);
    }
#endif
    match_fast(out, qs, qw, nq, r, nr, inv_scale2);
}

void idf_match_fast_plain(idf_nn_t *out, int32_t *qs, const int16_t *qw, size_t nq, const uint8_t *r, size_t nr,
                          float inv_scale2)
{
    match_fast(out, qs, qw, nq, r, nr, inv_scale2);
}

void idf_nn_from_dots(idf_nn_t *out, const int32_t *best, const int32_t *s1, const int32_t *s2, size_t nq,
                      const int32_t *qbest, const int32_t *qs, size_t nr, float inv_scale2)
{
    size_t j, i;
    for (j = 0; j < nq; j++) {
        out->best[j] = best[j];
        out->s1[j] = to_sim(s1[j], inv_scale2);
        out->s2[j] = to_sim(s2[j], inv_scale2);
    }
    for (i = 0; i < nr; i++) {
        out->qbest[i] = qbest[i];
        out->qs[i] = to_sim(qs[i], inv_scale2);
    }
}

int idf_ratio_pass(float s1, float s2, double ratio)
{
    double d1, d2;
    if (s1 < 0 || s2 < 0) return 0;
    d1 = 2.0 - 2.0 * (double)s1;
    d2 = 2.0 - 2.0 * (double)s2;
    if (d1 < 0) d1 = 0;
    if (d2 < 0) d2 = 0;
    /* d1 < ratio d2 on distances, i.e. on squares (both are >= 0). */
    return d1 < ratio * ratio * d2;
}

size_t idf_score(idf_match_t *out, int32_t *claim, const idf_nn_t *nn, size_t nq, size_t nr, double ratio,
                 int scoring)
{
    size_t j, i, n = 0;
    if (scoring == PATINA_SCORE_RAW) {
        for (j = 0; j < nq; j++)
            if (idf_ratio_pass(nn->s1[j], nn->s2[j], ratio))
                out[n++] = (idf_match_t){(int32_t)j, nn->best[j], nn->s1[j]};
        return n;
    }
    /* claim[i]: the passing query row kept for reference row i. */
    for (i = 0; i < nr; i++) claim[i] = -1;
    for (j = 0; j < nq; j++) {
        int32_t r;
        if (!idf_ratio_pass(nn->s1[j], nn->s2[j], ratio)) continue;
        r = nn->best[j];
        if (scoring == PATINA_SCORE_MUTUAL && nn->qbest[r] != (int32_t)j) continue;
        if (claim[r] < 0 || nn->s1[j] > nn->s1[claim[r]]) claim[r] = (int32_t)j;
    }
    for (j = 0; j < nq; j++) {
        int32_t r = nn->best[j];
        if (r >= 0 && claim[r] == (int32_t)j) out[n++] = (idf_match_t){(int32_t)j, r, nn->s1[j]};
    }
    return n;
}

int idf_exact_u8(const void *rec)
{
    return rs_quant(rec) == RS_QUANT_U8 && rs_qscale(rec) == 512.0f;
}

long idf_ratio_count(const void *a, size_t abytes, const void *b, size_t bbytes, double ratio, int scoring)
{
    size_t na, nb, n;
    idf_nn_t nn;
    idf_match_t *mt;
    int32_t *ibuf;
    float *fbuf;
    if (!a || !b || rs_record_problem(a, abytes, NULL, 0) || rs_record_problem(b, bbytes, NULL, 0)) return -1;
    na = rs_count(a);
    nb = rs_count(b);
    if (na == 0 || nb == 0) return 0;
    ibuf = malloc((na + 2 * nb) * sizeof *ibuf); /* best (na), qbest (nb), scratch/claim (nb) */
    fbuf = malloc((2 * na + nb) * sizeof *fbuf); /* s1, s2 (na), qs (nb) */
    mt = malloc(na * sizeof *mt);
    if (!ibuf || !fbuf || !mt) {
        n = (size_t)-1;
        goto out;
    }
    nn.best = ibuf;
    nn.qbest = ibuf + na;
    nn.s1 = fbuf;
    nn.s2 = fbuf + na;
    nn.qs = fbuf + 2 * na;
    if (idf_exact_u8(a) && idf_exact_u8(b)) {
        int16_t *qw = malloc(na * IDF_DIM * sizeof *qw);
        if (!qw) {
            n = (size_t)-1;
            goto out;
        }
        idf_widen(qw, rs_row(a, 0), na);
        idf_match_fast(&nn, ibuf + na + nb, qw, na, rs_row(b, 0), nb, IDF_INV_SCALE2);
        free(qw);
    } else {
        float *va = malloc((na + nb) * IDF_DIM * sizeof *va);
        if (!va) {
            n = (size_t)-1;
            goto out;
        }
        idf_dequantise(va, a);
        idf_dequantise(va + na * IDF_DIM, b);
        idf_match_ref(&nn, va, na, va + na * IDF_DIM, nb);
        free(va);
    }
    n = idf_score(mt, ibuf + na + nb, &nn, na, nb, ratio, scoring);
out:
    free(ibuf);
    free(fbuf);
    free(mt);
    return n == (size_t)-1 ? -1 : (long)n;
}

void idf_dequantise(float *v, const void *rec)
{
    size_t i, n = rs_count(rec);
    for (i = 0; i < n; i++) rs_row_get(rec, i, v + i * IDF_DIM);
}
