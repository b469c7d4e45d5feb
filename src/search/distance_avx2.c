/* AVX2 kernels of the element-wise distances (search/distance_simd.h): a
 * block of queries against rows, four rows at a time, each SIMD lane one
 * row. A lane does exactly the operations of the row's definition
 * (search/distance_defs.h) in the same order -- a sum over elements stays a
 * sequential sum in its lane; nothing is reassociated across elements -- so
 * every distance is the definition's double bit for bit (vaddpd, vsubpd,
 * vmulpd, vdivpd and vsqrtpd round like their scalar forms; no FMA: the
 * functions target "avx2" only and the build uses -ffp-contract=off).
 *
 * Per group of four rows: the rows' elements are converted to doubles and
 * transposed once into T (n, 4) (T[4 i + j] = element i of row j), the
 * row-only sums of the definition (Σb, Σb², Tanimoto's T1, p = b / T1 and
 * C3) are accumulated there, then every query of the block runs over T
 * (four queries at a time: four independent chains). The query-only sums
 * (Σa, Σa², T2, q = a / T2, C2) are computed once per call. Each of those
 * sums is its own sequence of roundings in the definition, so computing it
 * once per row or per query gives the same double as computing it per pair.
 *
 * The definitions' branches become masks: chi2 adds (a - b)^2 / (a + b)
 * masked to +0.0 where a + b > 0 fails (adding +0.0 to a sum that starts at
 * +0.0 and only grows by non-negative terms leaves it unchanged, bit for
 * bit); the zero-sum cases of intersection, Hellinger, cosine and Tanimoto
 * are decided per pair after the loop, by the definitions' own
 * expressions. Where the query's element is zero, chi2 (u8, u16, f32) and
 * Hellinger add the term the definition would without its division or
 * square root (STEP_CHI2_ZQ, STEP_SQRT_ZQ: the same doubles).
 *
 * Given each query's threshold (the search's k-th distance so far or its
 * radius), std_l2 first runs a cheaper sum with multiplications by
 * 1 / sigma and computes the definition (with its divisions) only for the
 * queries for which some row of the group may lie within the threshold;
 * the bound is at bound(). Hellinger does the same with the square roots
 * of the elements taken once per query and once per group of rows
 * (hell_far), not one per pair; chi2 with a float key and its bound
 * (chi2_far), four rows at a time in single precision. Not this file: the CEDD fast path and its
 * filter (search/knn_search.c, search/knn_avx2.c), the GPU. */
#include "search/distance_simd.h"

#if PDIST_HAVE_AVX2
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define AVX2 __attribute__((target("avx2")))

int pdist_avx2_cpu(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? 1 : 0;
}

/* u32 lanes (in an epi32 vector) as exact doubles: cvtepi32 reads them
 * signed, so 2^32 is added back where the top bit was set. */
static AVX2 __m256d u32_pd(__m128i v)
{
    const __m256d s = _mm256_cvtepi32_pd(v);
    return _mm256_add_pd(s, _mm256_and_pd(_mm256_cmp_pd(s, _mm256_setzero_pd(), _CMP_LT_OQ),
                                          _mm256_set1_pd(4294967296.0)));
}

/* T (n, 4) = the four rows b[0..3] as doubles, transposed. */
static AVX2 void group_load(patina_elem e, const uint8_t *const b[4], size_t n, double *T)
{
    size_t i = 0;
    int j;
    switch (e) {
    case PATINA_ELEM_F64:
        for (; i + 4 <= n; i += 4) {
            const __m256d r0 = _mm256_loadu_pd((const double *)b[0] + i), r1 = _mm256_loadu_pd((const double *)b[1] + i),
                          r2 = _mm256_loadu_pd((const double *)b[2] + i), r3 = _mm256_loadu_pd((const double *)b[3] + i);
            const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1),
                          t2 = _mm256_unpacklo_pd(r2, r3), t3 = _mm256_unpackhi_pd(r2, r3);
            _mm256_store_pd(T + 4 * i, _mm256_permute2f128_pd(t0, t2, 0x20));
            _mm256_store_pd(T + 4 * i + 4, _mm256_permute2f128_pd(t1, t3, 0x20));
            _mm256_store_pd(T + 4 * i + 8, _mm256_permute2f128_pd(t0, t2, 0x31));
            _mm256_store_pd(T + 4 * i + 12, _mm256_permute2f128_pd(t1, t3, 0x31));
        }
        for (; i < n; i++)
            for (j = 0; j < 4; j++) T[4 * i + j] = ((const double *)b[j])[i];
        break;
    case PATINA_ELEM_F32:
        for (; i + 4 <= n; i += 4) {
            __m128 r0 = _mm_loadu_ps((const float *)b[0] + i), r1 = _mm_loadu_ps((const float *)b[1] + i),
                   r2 = _mm_loadu_ps((const float *)b[2] + i), r3 = _mm_loadu_ps((const float *)b[3] + i);
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
            _mm256_store_pd(T + 4 * i, _mm256_cvtps_pd(r0));
            _mm256_store_pd(T + 4 * i + 4, _mm256_cvtps_pd(r1));
            _mm256_store_pd(T + 4 * i + 8, _mm256_cvtps_pd(r2));
            _mm256_store_pd(T + 4 * i + 12, _mm256_cvtps_pd(r3));
        }
        for (; i < n; i++)
            for (j = 0; j < 4; j++) T[4 * i + j] = (double)((const float *)b[j])[i];
        break;
    case PATINA_ELEM_U32:
        for (; i + 4 <= n; i += 4) {
            __m128 r0 = _mm_castsi128_ps(_mm_loadu_si128((const __m128i *)((const uint32_t *)b[0] + i))),
                   r1 = _mm_castsi128_ps(_mm_loadu_si128((const __m128i *)((const uint32_t *)b[1] + i))),
                   r2 = _mm_castsi128_ps(_mm_loadu_si128((const __m128i *)((const uint32_t *)b[2] + i))),
                   r3 = _mm_castsi128_ps(_mm_loadu_si128((const __m128i *)((const uint32_t *)b[3] + i)));
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
            _mm256_store_pd(T + 4 * i, u32_pd(_mm_castps_si128(r0)));
            _mm256_store_pd(T + 4 * i + 4, u32_pd(_mm_castps_si128(r1)));
            _mm256_store_pd(T + 4 * i + 8, u32_pd(_mm_castps_si128(r2)));
            _mm256_store_pd(T + 4 * i + 12, u32_pd(_mm_castps_si128(r3)));
        }
        for (; i < n; i++)
            for (j = 0; j < 4; j++) T[4 * i + j] = (double)((const uint32_t *)b[j])[i];
        break;
    case PATINA_ELEM_U16:
        for (; i + 4 <= n; i += 4) {
            /* rows' elements i..i+3 (64 bits each), interleaved to
             * element-major: (r0 r1 r2 r3) for i, i+1 | i+2, i+3 */
            const __m128i r0 = _mm_loadl_epi64((const __m128i *)((const uint16_t *)b[0] + i)),
                          r1 = _mm_loadl_epi64((const __m128i *)((const uint16_t *)b[1] + i)),
                          r2 = _mm_loadl_epi64((const __m128i *)((const uint16_t *)b[2] + i)),
                          r3 = _mm_loadl_epi64((const __m128i *)((const uint16_t *)b[3] + i));
            const __m128i a01 = _mm_unpacklo_epi16(r0, r1), a23 = _mm_unpacklo_epi16(r2, r3);
            const __m128i lo = _mm_unpacklo_epi32(a01, a23), hi = _mm_unpackhi_epi32(a01, a23);
            _mm256_store_pd(T + 4 * i, _mm256_cvtepi32_pd(_mm_cvtepu16_epi32(lo)));
            _mm256_store_pd(T + 4 * i + 4, _mm256_cvtepi32_pd(_mm_cvtepu16_epi32(_mm_srli_si128(lo, 8))));
            _mm256_store_pd(T + 4 * i + 8, _mm256_cvtepi32_pd(_mm_cvtepu16_epi32(hi)));
            _mm256_store_pd(T + 4 * i + 12, _mm256_cvtepi32_pd(_mm_cvtepu16_epi32(_mm_srli_si128(hi, 8))));
        }
        for (; i < n; i++)
            for (j = 0; j < 4; j++) T[4 * i + j] = (double)((const uint16_t *)b[j])[i];
        break;
    case PATINA_ELEM_U8:
        for (; i + 4 <= n; i += 4) {
            uint32_t w[4];
            __m128i a01, a23, v;
            for (j = 0; j < 4; j++) memcpy(&w[j], b[j] + i, 4);
            a01 = _mm_unpacklo_epi8(_mm_cvtsi32_si128((int)w[0]), _mm_cvtsi32_si128((int)w[1]));
            a23 = _mm_unpacklo_epi8(_mm_cvtsi32_si128((int)w[2]), _mm_cvtsi32_si128((int)w[3]));
            v = _mm_unpacklo_epi16(a01, a23); /* (r0 r1 r2 r3) for i, i+1, i+2, i+3 */
            _mm256_store_pd(T + 4 * i, _mm256_cvtepi32_pd(_mm_cvtepu8_epi32(v)));
            _mm256_store_pd(T + 4 * i + 4, _mm256_cvtepi32_pd(_mm_cvtepu8_epi32(_mm_srli_si128(v, 4))));
            _mm256_store_pd(T + 4 * i + 8, _mm256_cvtepi32_pd(_mm_cvtepu8_epi32(_mm_srli_si128(v, 8))));
            _mm256_store_pd(T + 4 * i + 12, _mm256_cvtepi32_pd(_mm_cvtepu8_epi32(_mm_srli_si128(v, 12))));
        }
        for (; i < n; i++)
            for (j = 0; j < 4; j++) T[4 * i + j] = (double)b[j][i];
        break;
    }
}

/* One element step of each distance: D (four rows' sums) gets the term of
 * query element X (a double) and the rows' elements y; s is std_l2's sigma
 * of the element. The definitions' expressions, operand for operand. */
#define STEP_L1(D, X) D = _mm256_add_pd(D, _mm256_andnot_pd(_mm256_set1_pd(-0.0), _mm256_sub_pd(_mm256_set1_pd(X), y)))
#define STEP_L2(D, X)                                                                                   \
    do {                                                                                                \
        const __m256d t_ = _mm256_sub_pd(_mm256_set1_pd(X), y);                                          \
        D = _mm256_add_pd(D, _mm256_mul_pd(t_, t_));                                                     \
    } while (0)
#define STEP_STD_L2(D, X)                                                                               \
    do {                                                                                                \
        const __m256d t_ = _mm256_div_pd(_mm256_sub_pd(_mm256_set1_pd(X), y), s);                      \
        D = _mm256_add_pd(D, _mm256_mul_pd(t_, t_));                                                     \
    } while (0)
/* if (x + y > 0.0) d += (x - y) * (x - y) / (x + y): the term is masked to
 * +0.0 (0/0 and x/0 lanes included) where x + y > 0 fails. */
#define STEP_CHI2(D, X)                                                                                 \
    do {                                                                                                \
        const __m256d x_ = _mm256_set1_pd(X), s_ = _mm256_add_pd(x_, y), t_ = _mm256_sub_pd(x_, y);    \
        const __m256d v_ = _mm256_div_pd(_mm256_mul_pd(t_, t_), s_);                                     \
        D = _mm256_add_pd(D, _mm256_and_pd(_mm256_cmp_pd(s_, _mm256_setzero_pd(), _CMP_GT_OQ), v_));   \
    } while (0)
/* chi2 for element types whose squares are exact in double (u8, u16,
 * f32: at most 24 significant bits): where the query's element is zero,
 * the term (0 - y)(0 - y) / (0 + y) is y*y / y = y exactly for finite
 * y > 0 (NaN for y = +inf, as (y - y) + y gives), and masked otherwise --
 * no division. The query element's test branches, the same way for every
 * group of rows. */
#define STEP_CHI2_ZQ(D, X)                                                                              \
    do {                                                                                                \
        if ((X) != 0.0) {                                                                               \
            STEP_CHI2(D, X);                                                                            \
        } else {                                                                                        \
            const __m256d v_ = _mm256_add_pd(_mm256_sub_pd(y, y), y);                                   \
            D = _mm256_add_pd(D, _mm256_and_pd(_mm256_cmp_pd(y, _mm256_setzero_pd(), _CMP_GT_OQ), v_)); \
        }                                                                                               \
    } while (0)
/* x < y ? x : y is exactly vminpd(x, y) (the second operand unless x < y) */
#define STEP_MIN(D, X) D = _mm256_add_pd(D, _mm256_min_pd(_mm256_set1_pd(X), y))
#define STEP_SQRT(D, X) D = _mm256_add_pd(D, _mm256_sqrt_pd(_mm256_mul_pd(_mm256_set1_pd(X), y)))
/* Hellinger where the query's element is zero: x y is +-0 or NaN, which
 * sqrt returns unchanged, so the term is x y itself (every element type). */
#define STEP_SQRT_ZQ(D, X)                                                                              \
    do {                                                                                                \
        if ((X) != 0.0) STEP_SQRT(D, X);                                                                \
        else STEP_DOT(D, X);                                                                            \
    } while (0)
#define STEP_DOT(D, X) D = _mm256_add_pd(D, _mm256_mul_pd(_mm256_set1_pd(X), y))

/* NAME(T, qv, n, nq, sd, acc): acc[4 q + j] = the sum over elements of
 * STEP for query q (qv + q n) and row j of T, elements in order; four
 * queries at a time (independent chains), then one at a time. */
#define PAIR_KERNEL(NAME, STEP, PRE)                                                                    \
    static AVX2 void NAME(const double *T, const double *qv, size_t n, size_t nq, const double *sd,      \
                          double *acc)                                                                  \
    {                                                                                                   \
        size_t q = 0, i;                                                                                \
        (void)sd;                                                                                       \
        for (; q + 4 <= nq; q += 4) {                                                                   \
            const double *x0 = qv + q * n, *x1 = x0 + n, *x2 = x1 + n, *x3 = x2 + n;                    \
            __m256d d0 = _mm256_setzero_pd(), d1 = d0, d2 = d0, d3 = d0;                                \
            for (i = 0; i < n; i++) {                                                                   \
                const __m256d y = _mm256_load_pd(T + 4 * i);                                            \
                PRE;                                                                                    \
                STEP(d0, x0[i]);                                                                        \
                STEP(d1, x1[i]);                                                                        \
                STEP(d2, x2[i]);                                                                        \
                STEP(d3, x3[i]);                                                                        \
            }                                                                                           \
            _mm256_storeu_pd(acc + 4 * q, d0);                                                          \
            _mm256_storeu_pd(acc + 4 * q + 4, d1);                                                      \
            _mm256_storeu_pd(acc + 4 * q + 8, d2);                                                      \
            _mm256_storeu_pd(acc + 4 * q + 12, d3);                                                     \
        }                                                                                               \
        for (; q < nq; q++) {                                                                           \
            const double *x0 = qv + q * n;                                                              \
            __m256d d0 = _mm256_setzero_pd();                                                           \
            for (i = 0; i < n; i++) {                                                                   \
                const __m256d y = _mm256_load_pd(T + 4 * i);                                            \
                PRE;                                                                                    \
                STEP(d0, x0[i]);                                                                        \
            }                                                                                           \
            _mm256_storeu_pd(acc + 4 * q, d0);                                                          \
        }                                                                                               \
    }

/* std_l2's filter (see pdist_avx2_block): a multiplication by inv =
 * 1 / sigma instead of the division. */
#define STEP_STD_L2_APPROX(D, X)                                                                        \
    do {                                                                                                \
        const __m256d t_ = _mm256_mul_pd(_mm256_sub_pd(_mm256_set1_pd(X), y), s);                      \
        D = _mm256_add_pd(D, _mm256_mul_pd(t_, t_));                                                     \
    } while (0)
#define NOPRE ((void)0)
PAIR_KERNEL(k_l1, STEP_L1, NOPRE)
PAIR_KERNEL(k_l2, STEP_L2, NOPRE)
PAIR_KERNEL(k_std_l2, STEP_STD_L2, const __m256d s = _mm256_set1_pd(sd[i]))
PAIR_KERNEL(k_chi2, STEP_CHI2, NOPRE)
PAIR_KERNEL(k_chi2_zq, STEP_CHI2_ZQ, NOPRE)
PAIR_KERNEL(k_min, STEP_MIN, NOPRE)
PAIR_KERNEL(k_sqrt, STEP_SQRT_ZQ, NOPRE)
PAIR_KERNEL(k_dot, STEP_DOT, NOPRE)
PAIR_KERNEL(k_std_l2_approx, STEP_STD_L2_APPROX, const __m256d s = _mm256_set1_pd(sd[i]))


typedef void (*kernel_fn)(const double *, const double *, size_t, size_t, const double *, double *);

/* The group's row-only sums, in element order per lane, into rs[0..3]
 * (and rs[4..7]): intersection, Hellinger: Σb; cosine: Σb²; Tanimoto:
 * T1 = Σb, then T is replaced by p = b / T1 and rs[4..7] = C3 = Σp². */
static AVX2 void group_sums(pdist_t d, double *T, size_t n, double *rs)
{
    __m256d a = _mm256_setzero_pd(), c = _mm256_setzero_pd();
    size_t i;
    switch (d) {
    case PDIST_INTERSECTION:
    case PDIST_HELLINGER:
    case PDIST_TANIMOTO:
        for (i = 0; i < n; i++) a = _mm256_add_pd(a, _mm256_load_pd(T + 4 * i));
        break;

    case PDIST_COSINE:
        for (i = 0; i < n; i++) {
            const __m256d y = _mm256_load_pd(T + 4 * i);
            a = _mm256_add_pd(a, _mm256_mul_pd(y, y));
        }
        break;
    default: break;
    }
    if (d == PDIST_TANIMOTO) /* lanes with T1 = 0 get NaNs here; their distance is a constant */
        for (i = 0; i < n; i++) {
            const __m256d p = _mm256_div_pd(_mm256_load_pd(T + 4 * i), a);
            _mm256_store_pd(T + 4 * i, p);
            c = _mm256_add_pd(c, _mm256_mul_pd(p, p));
        }
    _mm256_storeu_pd(rs, a);
    _mm256_storeu_pd(rs + 4, c);
}

/* Element i of query row a (type e) as a double. */
static double elem(patina_elem e, const uint8_t *a, size_t i)
{
    switch (e) {
    case PATINA_ELEM_U8: return (double)a[i];
    case PATINA_ELEM_U16: return (double)((const uint16_t *)a)[i];
    case PATINA_ELEM_U32: return (double)((const uint32_t *)a)[i];
    case PATINA_ELEM_F32: return (double)((const float *)a)[i];
    case PATINA_ELEM_F64: return ((const double *)a)[i];
    }
    return NAN;
}

/* qv (n) = query a as doubles, qs[0..1] its query-only sums (the
 * counterparts of group_sums): intersection, Hellinger: Σa; cosine: Σa²;
 * Tanimoto: T2 = Σa and C2 = Σq², with qv = q = a / T2 (when T2 != 0). */
static void query_prep(pdist_t d, patina_elem e, const uint8_t *a, size_t n, double *qv, double *qs)
{
    double s = 0.0, c = 0.0;
    size_t i;
    for (i = 0; i < n; i++) qv[i] = elem(e, a, i);
    switch (d) {
    case PDIST_INTERSECTION:
    case PDIST_HELLINGER:
    case PDIST_TANIMOTO:
        for (i = 0; i < n; i++) s += qv[i];
        break;
    case PDIST_COSINE:
        for (i = 0; i < n; i++) s += qv[i] * qv[i];
        break;
    default: break;
    }
    if (d == PDIST_TANIMOTO && s != 0.0)
        for (i = 0; i < n; i++) {
            const double q = qv[i] / s;
            qv[i] = q;
            c += q * q;
        }
    qs[0] = s;
    qs[1] = c;
}

/* The distance of a pair from its sums: the definitions' last lines. */
static double finish(pdist_t d, double acc, const double *qs, const double *rs, int j)
{
    double sa, sb, e;
    switch (d) {
    case PDIST_L2:
    case PDIST_STD_L2: return sqrt(acc);
    case PDIST_INTERSECTION:
        sa = qs[0];
        sb = rs[j];
        if (sa == 0.0 && sb == 0.0) return 0.0;
        return 1.0 - acc / (sa > sb ? sa : sb);
    case PDIST_HELLINGER:
        sa = qs[0];
        sb = rs[j];
        if (sa == 0.0 && sb == 0.0) return 0.0;
        if (sa == 0.0 || sb == 0.0) return 1.0;
        e = 1.0 - acc / sqrt(sa * sb);
        return e > 0.0 ? sqrt(e) : 0.0;
    case PDIST_COSINE:
        sa = qs[0];
        sb = rs[j];
        if (sa == 0.0 && sb == 0.0) return 0.0;
        if (sa == 0.0 || sb == 0.0) return 1.0;
        return 1.0 - acc / sqrt(sa * sb);
    case PDIST_TANIMOTO: /* T2 = qs[0], C2 = qs[1]; T1 = rs[j], C3 = rs[4 + j]; C1 = acc */
        if (rs[j] == 0.0 && qs[0] == 0.0) return 0.0;
        if (rs[j] == 0.0 || qs[0] == 0.0) return 100.0;
        return 100.0 - 100.0 * (acc / ((qs[1] + rs[4 + j]) - acc));
    default: return acc; /* l1, chi2 */
    }
}

/* std_l2's filter. A row may be left out (+inf) only when it is provably
 * farther than the query's threshold thr; every other row gets the
 * definition's double. With u = 2^-53 and n elements, S~ = Σ((a - b) *
 * inv)^2: each term is within 8u of the definition's ((a - b) / sigma)^2
 * (inv = 1/sigma rounded, the product rounded, the quotient rounded, both
 * squared), so with both sums' roundings S~ <= S (1 + (2n + 9)u). A row is
 * dropped when S~ > thr^2 (1 + (4n + 64)u) + 1e-290: then S > thr^2 (1 +
 * (2n + 50)u), whose square root rounds to a double above thr. The 1e-290
 * covers underflow (each rounding there is absolute, 2^-1074); a NaN,
 * negative or infinite threshold, or one whose bound overflows, drops
 * nothing. */
static double bound(size_t n, double thr)
{
    const double u = 0x1p-53;
    double b;
    if (!(thr >= 0.0) || isinf(thr)) return HUGE_VAL; /* NaN, negative (never the search's), +inf */
    b = thr * thr * (1.0 + (4.0 * (double)n + 64.0) * u) + 1e-290;
    return b < 1e300 ? b : HUGE_VAL;
}

/* Hellinger's filter. The definition sums t_i = sqrt(a_i b_i) in order into
 * S (then e = 1 - S / sqrt(sa sb), d = sqrt(e)); the filter sums s_i r_i,
 * s = sqrt(a) per query, r = sqrt(b) per group of rows (no square root
 * per pair), into S~. With u = 2^-53, for non-negative finite elements,
 * t_i and s_i r_i are within 1.51u and 3.01u of sqrt(a_i b_i), and each
 * sum of n non-negative terms within 1.01 (n - 1) u of its exact sum, so
 * S <= S~ (1 + (3n + 8) u); then sqrt(sa sb)'s rounding, the quotient's,
 * 1 - q's and the final square root's (d >= sqrt(e) (1 - u)) make d > thr
 * certain when S~ (1 + (4n + 64) u) < (1 - thr^2 (1 + 64u) - 64u) c (1 -
 * 64u), c = sqrt(sa sb) as computed here: the margins are tens of times
 * the roundings, including those of this test's own arithmetic; n 1e-150
 * added to S~ covers products that underflow. A negative or non-finite
 * element makes S~ NaN or infinite, a zero or non-finite sum, a threshold
 * that is NaN, negative or >= 1 (a Hellinger distance is at most 1) make
 * the test fail: the row keeps its distance. */
static int hell_far(double s, double sa, double sb, double thr, size_t n)
{
    const double u = 0x1p-53;
    double c;
    if (!(thr >= 0.0) || !(thr < 1.0) || !(sa > 0.0) || !(sb > 0.0)) return 0;
    c = sqrt(sa * sb);
    if (!(c > 0.0) || isinf(c)) return 0;
    return (s + (double)n * 1e-150) * (1.0 + (4.0 * (double)n + 64.0) * u) <
           (1.0 - thr * thr * (1.0 + 64.0 * u) - 64.0 * u) * c * (1.0 - 64.0 * u);
}

/* chi2's filter, in floats (the GPU's float filter's bound, gpu/knn_fx.cuh):
 * for non-negative elements each zero or in [2^-60, 2^60] (so every float
 * is normal and no product or sum overflows), the float key sum (a - b)^2
 * / (a + b) -- its inputs, difference, square and quotient rounded to
 * float, the sum of n non-negative terms -- is within M = (n + 16) 2^-24
 * (Σa + Σb) of the real sum (each term errs by <= 10.5 u_f (a + b), the
 * sum by <= gamma_n of Σ (a + b)), and the definition's doubles within
 * (n + 5) 2^-53 (Σa + Σb) of it, which M's factor (1 + 2^-10) covers. A
 * row is left out when key - M (1 + 2^-10) > thr, the test itself with a
 * margin of 2^-40 of its terms: its distance is then above thr. Where the
 * query's element is 0 the term is b itself (the real (0 - b)^2 / b). */
static int chi2_dom(double v) { return v == 0.0 || (v >= 0x1p-60 && v <= 0x1p60); }

/* qs[0] = Σa of query qv (n doubles) and qf its floats; -1 when an element
 * is outside the filter's domain, or when fewer than half its elements are
 * non-zero: the definition divides only where the query's element is not
 * zero (STEP_CHI2_ZQ), so on sparse queries it costs about what the filter
 * does (measured: no gain, and the group's conversion to floats on top).
 * Returns 1 when the query takes the filter. */
static int chi2_query(const double *qv, size_t n, float *qf, double *qs)
{
    double sum = 0.0;
    size_t nz = 0;
    for (size_t i = 0; i < n; i++) {
        if (!chi2_dom(qv[i])) {
            qs[0] = -1.0;
            return 0;
        }
        qf[i] = (float)qv[i];
        sum += qv[i];
        nz += qv[i] != 0.0;
    }
    qs[0] = 2 * nz >= n ? sum : -1.0;
    return qs[0] >= 0.0;
}

/* The group's floats Tf (n, 4) from T and each lane's Σb into rs[0..3], or
 * -1 for a lane with an element outside the domain */
static AVX2 void chi2_group(const double *T, size_t n, float *Tf, double *rs)
{
    __m256d sum = _mm256_setzero_pd(), ok = _mm256_castsi256_pd(_mm256_set1_epi64x(-1));
    const __m256d lo = _mm256_set1_pd(0x1p-60), hi = _mm256_set1_pd(0x1p60), z = _mm256_setzero_pd();
    for (size_t i = 0; i < n; i++) {
        const __m256d y = _mm256_load_pd(T + 4 * i);
        const __m256d in = _mm256_or_pd(_mm256_cmp_pd(y, z, _CMP_EQ_OQ),
                                        _mm256_and_pd(_mm256_cmp_pd(y, lo, _CMP_GE_OQ), _mm256_cmp_pd(y, hi, _CMP_LE_OQ)));
        ok = _mm256_and_pd(ok, in);
        sum = _mm256_add_pd(sum, y);
        _mm_store_ps(Tf + 4 * i, _mm256_cvtpd_ps(y));
    }
    _mm256_storeu_pd(rs, _mm256_blendv_pd(_mm256_set1_pd(-1.0), sum, ok));
}

/* The float keys of query qf over the group Tf into key[0..3] */
static AVX2 void chi2_keys(const float *Tf, const float *qf, size_t n, float *key)
{
    __m128 acc = _mm_setzero_ps();
    for (size_t i = 0; i < n; i++) {
        const __m128 y = _mm_load_ps(Tf + 4 * i);
        if (qf[i] != 0.0f) {
            const __m128 x = _mm_set1_ps(qf[i]), t = _mm_sub_ps(x, y);
            acc = _mm_add_ps(acc, _mm_div_ps(_mm_mul_ps(t, t), _mm_add_ps(x, y)));
        } else {
            acc = _mm_add_ps(acc, y);
        }
    }
    _mm_storeu_ps(key, acc);
}

/* 1 when lane j's distance is surely above thr (the float key's test) */
static int chi2_far(float key, double sa, double sb, double thr, size_t n)
{
    double m;
    if (!(thr >= 0.0) || isinf(thr) || !(sa >= 0.0) || !(sb >= 0.0)) return 0;
    m = (double)(n + 16) * 0x1p-24 * (1.0 + 0x1p-10) * (sa + sb);
    return (double)key - m > thr + (thr + m) * 0x1p-40;
}

/* Scratch (pdist_block_scratch): qv (nq, n), qs (nq, 2), acc (nq, 4),
 * appr (nq, 4), inv (n), rs (8), then T (n, 4) at a 32-byte boundary, then
 * Hellinger's filter: sT (n, 4), sq (nq, n) (chi2's: its floats Tf (n, 4)
 * and qf (nq, n) there). */
AVX2 void pdist_avx2_block(pdist_t d, patina_elem e, const uint8_t *queries, size_t nq, const uint8_t *rows,
                           size_t bytes, size_t cnt, size_t n, const double *sd, const double *thr, void *scratch,
                           double *out, size_t ld)
{
    double *qv = scratch, *qs = qv + nq * n, *acc = qs + 2 * nq, *appr = acc + 4 * nq, *inv = appr + 4 * nq;
    double *rs = inv + n;
    double *T = (double *)(((uintptr_t)(rs + 8) + 31) & ~(uintptr_t)31);
    double *sT = T + 4 * n, *sq = sT + 4 * n;
    kernel_fn k, approx = NULL;
    /* Hellinger's filter takes n square roots a group of rows, the definition
     * about 0.4 n a query on sparse histograms (none where the query's
     * element is 0): it pays from about 4 queries a block (measured: 1 query
     * 1.9x slower, 8 1.7x faster, 64 3.9x, rows far from the threshold) */
    const int hell = thr && d == PDIST_HELLINGER && nq >= PDIST_HELL_BLOCK;
    int chif = 0;
    float *Tf = (float *)sT, *qf = (float *)sq;
    const int simple = d == PDIST_L1 || d == PDIST_CHI2 ? 1 : d == PDIST_L2 || d == PDIST_STD_L2 ? 2 : 0;
    size_t q, r, i;
    switch (d) {
    case PDIST_L1: k = k_l1; break;
    case PDIST_L2: k = k_l2; break;
    case PDIST_STD_L2: k = sd ? k_std_l2 : k_l2; break; /* (a - b) / 1.0 is a - b */
    case PDIST_CHI2: /* the zero-query shortcut where squares are exact */
        k = e == PATINA_ELEM_U8 || e == PATINA_ELEM_U16 || e == PATINA_ELEM_F32 ? k_chi2_zq : k_chi2;
        break;
    case PDIST_INTERSECTION: k = k_min; break;
    case PDIST_HELLINGER: k = k_sqrt; break;
    case PDIST_COSINE:
    case PDIST_TANIMOTO: k = k_dot; break;
    default: return;
    }
    if (nq == 0 || cnt == 0) return;
    for (q = 0; q < nq; q++) query_prep(d, e, queries + q * bytes, n, qv + q * n, qs + 2 * q);
    if (thr && d == PDIST_STD_L2 && sd) {
        approx = k_std_l2_approx;
        for (i = 0; i < n; i++) inv[i] = 1.0 / sd[i];
    }
    if (approx)
        for (q = 0; q < nq; q++) qs[2 * q + 1] = bound(n, thr[q]); /* (std_l2 has no query sums) */
    if (hell)
        for (i = 0; i < nq * n; i++) sq[i] = sqrt(qv[i]);
    if (thr && d == PDIST_CHI2) /* (chi2 has no query sums: qs[2 q] holds the filter's) */
        for (q = 0; q < nq; q++) chif |= chi2_query(qv + q * n, n, qf + q * n, qs + 2 * q);
    for (r = 0; r < cnt; r += 4) {
        const size_t m = cnt - r < 4 ? cnt - r : 4; /* rows of this group; the other lanes repeat row r */
        const uint8_t *b[4];
        size_t j;
        for (j = 0; j < 4; j++) b[j] = rows + (r + (j < m ? j : 0)) * bytes;
        group_load(e, b, n, T);
        group_sums(d, T, n, rs);
        if (!approx && !hell && !chif) {
            k(T, qv, n, nq, sd, acc);
            if (m == 4 && simple) /* the sums are the distances (l2: their square roots, vsqrtpd) */
                for (q = 0; q < nq; q++) {
                    const __m256d a = _mm256_loadu_pd(acc + 4 * q);
                    _mm256_storeu_pd(out + q * ld + r, simple == 2 ? _mm256_sqrt_pd(a) : a);
                }
            else
                for (q = 0; q < nq; q++)
                    for (j = 0; j < m; j++) out[q * ld + r + j] = finish(d, acc[4 * q + j], qs + 2 * q, rs, (int)j);
            continue;
        }
        /* a filter: the group's cheap sums, then the definition only for the
         * queries some row of the group may lie within */
        if (approx) {
            approx(T, qv, n, nq, inv, appr);
        } else if (hell) {
            for (i = 0; i < n; i++) _mm256_store_pd(sT + 4 * i, _mm256_sqrt_pd(_mm256_load_pd(T + 4 * i)));
            k_dot(sT, sq, n, nq, NULL, appr);
        } else {
            chi2_group(T, n, Tf, rs); /* (rs: the filter's Σb; chi2's finish reads no sum) */
        }
        for (q = 0; q < nq; q++) {
            float key[4];
            int far = !chif || qs[2 * q] >= 0.0; /* chi2: a query outside its filter's domain has none */
            if (chif && far) chi2_keys(Tf, qf + q * n, n, key);
            for (j = 0; far && j < m; j++)
                far = approx ? appr[4 * q + j] > qs[2 * q + 1]
                      : hell ? hell_far(appr[4 * q + j], qs[2 * q], rs[j], thr[q], n)
                             : chi2_far(key[j], qs[2 * q], rs[j], thr[q], n);
            if (far) { /* every row of the group is farther than thr[q] */
                for (j = 0; j < m; j++) out[q * ld + r + j] = HUGE_VAL;
                continue;
            }
            k(T, qv + q * n, n, 1, sd, acc + 4 * q); /* the definition for this query */
            for (j = 0; j < m; j++) out[q * ld + r + j] = finish(d, acc[4 * q + j], qs + 2 * q, rs, (int)j);
        }
    }
}

#else
typedef int pdist_avx2_unused; /* not x86-64 GCC/Clang, or PATINA_NO_AVX2: the portable path only */
#endif
