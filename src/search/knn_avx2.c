/* AVX2 filter of the CPU's Tanimoto fast path (search/knn_simd.h): exact
 * integer dot products of a query with 16 u8 rows (vpmaddubsw on element
 * pairs, one 16-bit lane per row: 7 * 7 * 256 < 2^15, no overflow), then a
 * test in double on exact integers. It only decides which rows need their
 * distance; every distance the search returns is still the definition's
 * (knn_search.c's fast path), so no result depends on this file. */
#include "search/knn_simd.h"

#if PDIST_HAVE_AVX2
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2")))

/* Row j's 16 bytes at offset o (a zero vector past the m rows). */
static AVX2 __m128i row16(const uint8_t *rows, size_t dim, size_t m, size_t j, size_t o)
{
    return j < m ? _mm_loadu_si128((const __m128i *)(rows + j * dim + o)) : _mm_setzero_si128();
}

AVX2 void ptan_avx2_layout(const uint8_t *rows, size_t m, size_t dim, uint16_t *L, double s1[PTAN_GROUP])
{
    const size_t np = (dim + 1) / 2;
    __m256i sq = _mm256_setzero_si256(); /* per row (16-bit lane j): the sum of squares so far */
    size_t e = 0, j;
    /* eight pairs (16 bytes) of all 16 rows at a time: an 8 x 8 transpose of
     * 16-bit pairs, rows j and j + 8 in the two 128-bit lanes */
    for (; 2 * e + 16 <= dim; e += 8) {
        __m256i a[8], t[8], u[8];
        int k;
        for (k = 0; k < 8; k++)
            a[k] = _mm256_inserti128_si256(_mm256_castsi128_si256(row16(rows, dim, m, (size_t)k, 2 * e)),
                                           row16(rows, dim, m, (size_t)k + 8, 2 * e), 1);
        for (k = 0; k < 4; k++) {
            t[2 * k] = _mm256_unpacklo_epi16(a[2 * k], a[2 * k + 1]);
            t[2 * k + 1] = _mm256_unpackhi_epi16(a[2 * k], a[2 * k + 1]);
        }
        u[0] = _mm256_unpacklo_epi32(t[0], t[2]);
        u[1] = _mm256_unpackhi_epi32(t[0], t[2]);
        u[2] = _mm256_unpacklo_epi32(t[1], t[3]);
        u[3] = _mm256_unpackhi_epi32(t[1], t[3]);
        u[4] = _mm256_unpacklo_epi32(t[4], t[6]);
        u[5] = _mm256_unpackhi_epi32(t[4], t[6]);
        u[6] = _mm256_unpacklo_epi32(t[5], t[7]);
        u[7] = _mm256_unpackhi_epi32(t[5], t[7]);
        for (k = 0; k < 4; k++) {
            const __m256i lo = _mm256_unpacklo_epi64(u[k], u[k + 4]), hi = _mm256_unpackhi_epi64(u[k], u[k + 4]);
            _mm256_storeu_si256((__m256i *)(L + PTAN_GROUP * (e + 2 * (size_t)k)), lo);
            _mm256_storeu_si256((__m256i *)(L + PTAN_GROUP * (e + 2 * (size_t)k + 1)), hi);
            sq = _mm256_add_epi16(sq, _mm256_add_epi16(_mm256_maddubs_epi16(lo, lo), _mm256_maddubs_epi16(hi, hi)));
        }
    }
    for (; e < np; e++) { /* the last pairs one by one */
        for (j = 0; j < PTAN_GROUP; j++)
            L[PTAN_GROUP * e + j] = j >= m ? 0
                                           : (uint16_t)(rows[j * dim + 2 * e] |
                                                        (2 * e + 1 < dim ? rows[j * dim + 2 * e + 1] << 8 : 0));
        {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(L + PTAN_GROUP * e));
            sq = _mm256_add_epi16(sq, _mm256_maddubs_epi16(v, v));
        }
    }
    {
        int16_t w[PTAN_GROUP];
        _mm256_storeu_si256((__m256i *)w, sq);
        for (j = 0; j < PTAN_GROUP; j++) s1[j] = (double)w[j];
    }
}

AVX2 unsigned ptan_avx2_filter(const uint16_t *L, const uint16_t *pe, const uint16_t *pv, size_t np,
                               const double t1[PTAN_GROUP], const double s1[PTAN_GROUP], double t2, double s2,
                               double tc)
{
    __m256i acc = _mm256_setzero_si256();
    __m128i half[2];
    unsigned mask = 0;
    size_t i;
    int k;
    for (i = 0; i < np; i++) {
        const __m256i rows = _mm256_loadu_si256((const __m256i *)(L + PTAN_GROUP * pe[i]));
        acc = _mm256_add_epi16(acc, _mm256_maddubs_epi16(rows, _mm256_set1_epi16((short)pv[i])));
    }
    half[0] = _mm256_castsi256_si128(acc);
    half[1] = _mm256_extracti128_si256(acc, 1);
    for (k = 0; k < 4; k++) {
        const __m128i d16 = k % 2 ? _mm_srli_si128(half[k / 2], 8) : half[k / 2];
        const __m256d d = _mm256_cvtepi32_pd(_mm_cvtepi16_epi32(d16)), r1 = _mm256_loadu_pd(t1 + 4 * k);
        const __m256d num = _mm256_mul_pd(_mm256_mul_pd(d, r1), _mm256_set1_pd(t2));
        const __m256d den = _mm256_sub_pd(_mm256_add_pd(_mm256_mul_pd(_mm256_set1_pd(s2), _mm256_mul_pd(r1, r1)),
                                                        _mm256_mul_pd(_mm256_loadu_pd(s1 + 4 * k), _mm256_set1_pd(t2 * t2))),
                                          num);
        /* kept unless num < tc den; unordered (a NaN tc) keeps */
        mask |= (unsigned)_mm256_movemask_pd(_mm256_cmp_pd(num, _mm256_mul_pd(_mm256_set1_pd(tc), den), _CMP_NLT_UQ))
                << (4 * k);
    }
    return mask;
}

#else
typedef int ptan_avx2_unused; /* not x86-64 GCC/Clang, or PATINA_NO_AVX2: no filter */
#endif
