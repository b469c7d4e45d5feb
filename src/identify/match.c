/* 2-NN matching of quantised RootSIFT rows, the ratio test and the scoring
 * rules (src/identify/identify.h). Two matchers compute the same integers:
 * idf_match_ref, one dot product per pair (the ground truth), and
 * idf_match_fast, which widens the query to int16 once and lets four query
 * rows share each loaded reference row; its inner loop is a plain int16 x
 * int16 -> int32 reduction that compilers vectorise (pmaddwd on x86). */
#include <string.h>

#include "core/clones.h"
#include "identify/identify.h"

/* Keeps the top 2 of one query row; strict '>' keeps the lower index on a
 * tie for best, and a tie with the best becomes the second (s2 = s1). */
static inline void top2_update(int32_t *best, int32_t *s1, int32_t *s2, int32_t dot, int32_t i)
{
    if (dot > *s1) {
        *s2 = *s1;
        *s1 = dot;
        *best = i;
    } else if (dot > *s2) {
        *s2 = dot;
    }
}

static void nn_reset(idf_nn_t *out, size_t nq, size_t nr)
{
    size_t j;
    for (j = 0; j < nq; j++) {
        out->best[j] = -1;
        out->s1[j] = -1;
        out->s2[j] = -1;
    }
    for (j = 0; j < nr; j++) {
        out->qbest[j] = -1;
        out->qs[j] = -1;
    }
}

void idf_match_ref(idf_nn_t *out, const uint8_t *q, size_t nq, const uint8_t *r, size_t nr)
{
    size_t j, i, k;
    nn_reset(out, nq, nr);
    for (j = 0; j < nq; j++) {
        for (i = 0; i < nr; i++) {
            int32_t dot = 0;
            for (k = 0; k < IDF_DIM; k++) dot += (int32_t)q[j * IDF_DIM + k] * (int32_t)r[i * IDF_DIM + k];
            top2_update(&out->best[j], &out->s1[j], &out->s2[j], dot, (int32_t)i);
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

/* Static so that the clones' ifunc stays inside the library (an extern
 * target_clones function is exported whatever -fvisibility says). */
static PATINA_CLONES void match_fast(idf_nn_t *out, const int16_t *qw, size_t nq, const uint8_t *r, size_t nr)
{
    size_t j0, i, t;
    nn_reset(out, nq, nr);
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
                top2_update(&b[t], &s1[t], &s2[t], d[t], (int32_t)i);
                if (d[t] > out->qs[i]) {
                    out->qs[i] = d[t];
                    out->qbest[i] = (int32_t)(j0 + t);
                }
            }
        }
        for (t = 0; t < nb; t++) {
            out->best[j0 + t] = b[t];
            out->s1[j0 + t] = s1[t];
            out->s2[j0 + t] = s2[t];
        }
    }
}

void idf_match_fast(idf_nn_t *out, const int16_t *qw, size_t nq, const uint8_t *r, size_t nr)
{
    match_fast(out, qw, nq, r, nr);
}

int idf_ratio_pass(int32_t s1, int32_t s2, double scale2, double ratio)
{
    double d1, d2;
    if (s1 < 0 || s2 < 0) return 0;
    d1 = 2.0 - 2.0 * (double)s1 / scale2;
    d2 = 2.0 - 2.0 * (double)s2 / scale2;
    if (d1 < 0) d1 = 0;
    if (d2 < 0) d2 = 0;
    /* d1 < ratio d2 on distances, i.e. on squares (both are >= 0). */
    return d1 < ratio * ratio * d2;
}

size_t idf_score(idf_match_t *out, int32_t *claim, const idf_nn_t *nn, size_t nq, size_t nr, double scale2,
                 double ratio, patina_identify_scoring scoring)
{
    size_t j, i, n = 0;
    if (scoring == PATINA_SCORE_RAW) {
        for (j = 0; j < nq; j++)
            if (idf_ratio_pass(nn->s1[j], nn->s2[j], scale2, ratio))
                out[n++] = (idf_match_t){(int32_t)j, nn->best[j], nn->s1[j]};
        return n;
    }
    /* claim[i]: the passing query row kept for reference row i. */
    for (i = 0; i < nr; i++) claim[i] = -1;
    for (j = 0; j < nq; j++) {
        int32_t r;
        if (!idf_ratio_pass(nn->s1[j], nn->s2[j], scale2, ratio)) continue;
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
