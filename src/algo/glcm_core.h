/* The last step of every GLCM property and Haralick feature, shared verbatim
 * by the C reference (src/features/glcm.c) and the CUDA kernels
 * (src/gpu/glcm_features.cu): one source, so CPU and GPU cannot drift.
 *
 * Both sides first reduce a count matrix P (L x L) to the integer moments
 * and the few floating-point sums below, in the orders stated here; this
 * header turns them into the 10 graycoprops properties and Haralick's 14
 * features (docs/glcm.md). Integer moments are exact, so every feature built
 * from them alone is bit-identical on CPU and GPU; the sums of logarithms
 * differ only by the libraries' log/log2 (CUDA: within 1-2 ulp per call).
 * Also here: the size rule both sides check before counting. */
#ifndef PATINA_GLCM_CORE_H
#define PATINA_GLCM_CORE_H

#include <float.h>
#include <stdint.h>
#ifndef __CUDACC__
#include <math.h>
#endif

#ifdef __CUDACC__
#define GLCM_FN static __host__ __device__ __forceinline__
#else
#define GLCM_FN static inline
#endif

#define GLCM_NPROPS 10
#define GLCM_NHAR 14
#ifndef GLCM_LN2
#define GLCM_LN2 0.693147180559945309417232121458176568
#endif

typedef struct glcm_moments {
    uint64_t T;                 /* sum of counts */
    uint64_t Si, Sj;            /* sum c*i, sum c*j */
    uint64_t Sii, Sjj, Sij;     /* sum c*i^2, c*j^2, c*i*j */
    unsigned __int128 Q;        /* sum c^2 */
    uint64_t d1, d2;            /* sum over k of k*D[k], k^2*D[k]; D[k] = counts with |i-j| = k */
    uint64_t s1, s2;            /* the same over S[k], counts with i+j = k */
    double hom;                 /* sum over k = 0..L-1 in order of D[k] / (1 + k^2) */
    /* Sums of logarithms. Cells: per row i the sum over j = 0..L-1 in order,
     * then the row sums added in order i = 0..L-1. Vectors: in index order. */
    double ent_nat;             /* sum -p ln p over cells (p = c/T) */
    double hxy;                 /* sum -p log2 p over cells */
    double mi;                  /* sum of glcm_mi_term over cells with c > 0 */
    double hx, hy;              /* -sum p log2 p of the row / column marginals */
    double hs, hd;              /* the same of S[k]/T (k = 0..2L-2) and D[k]/T */
} glcm_moments_t;

/* Whether every pixel pair of a w x h image fits a u32 cell (twice, when
 * the matrix is symmetrised): counts are u32 on both sides. */
GLCM_FN int glcm_size_fits(int w, int h, int symmetric)
{
    const uint64_t pairs = (uint64_t)(w > 0 ? w : 0) * (uint64_t)(h > 0 ? h : 0);
    return pairs <= (symmetric ? (uint64_t)UINT32_MAX / 2 : (uint64_t)UINT32_MAX);
}

GLCM_FN double glcm_plogp2(double p) { return p > 0.0 ? p * log2(p) : 0.0; }

/* One cell's term of the mutual information in bits, p log2(p / (px py))
 * with p = c/T, px = R/T, py = C/T: the ratio's excess over 1,
 * (c T - R C) / (R C), is formed exactly in 128-bit integers and goes
 * through log1p, so near-independent matrices (terms of both signs that
 * nearly cancel) keep their accuracy. */
GLCM_FN double glcm_mi_term(uint64_t c, uint64_t T, uint64_t R, uint64_t C)
{
    __int128 num = (__int128)c * (__int128)T - (__int128)R * (__int128)C;
    double x = (double)num / ((double)R * (double)C);
    return (double)c / (double)T * (log1p(x) / GLCM_LN2);
}

/* T*S2 - S1^2 >= 0 exactly (T^2 times a variance). */
GLCM_FN __int128 glcm_var_num(uint64_t T, uint64_t S1, uint64_t S2)
{
    return (__int128)T * (__int128)S2 - (__int128)S1 * (__int128)S1;
}

/* props: 10 values at stride pstride (may be NULL); har: 14 values (may be
 * NULL); mcc (feature 14) is passed in, computed elsewhere. */
GLCM_FN void glcm_finish(const glcm_moments_t *m, double mcc, double *props, long pstride,
                         double *har)
{
    double T, corr, var, mi;
    __int128 vi, vj, cov;
    int k;
    if (m->T == 0) {
        if (props)
            for (k = 0; k < GLCM_NPROPS; k++) props[k * pstride] = k == 5 ? 1.0 : 0.0;
        if (har)
            for (k = 0; k < GLCM_NHAR; k++) har[k] = k == 2 ? 1.0 : 0.0;
        return;
    }
    T = (double)m->T;
    vi = glcm_var_num(m->T, m->Si, m->Sii);
    vj = glcm_var_num(m->T, m->Sj, m->Sjj);
    cov = (__int128)m->T * (__int128)m->Sij - (__int128)m->Si * (__int128)m->Sj;
    corr = (vi == 0 || vj == 0) ? 1.0 : (double)cov / (sqrt((double)vi) * sqrt((double)vj));
    var = (double)vi / T / T;
    if (props) {
        props[0 * pstride] = (double)m->d2 / T;                       /* contrast */
        props[1 * pstride] = (double)m->d1 / T;                       /* dissimilarity */
        props[2 * pstride] = m->hom / T;                              /* homogeneity */
        props[3 * pstride] = (double)m->Q / T / T;                    /* ASM */
        props[4 * pstride] = sqrt((double)m->Q) / T;                  /* energy */
        props[5 * pstride] = corr;                                    /* correlation */
        props[6 * pstride] = (double)m->Si / T;                       /* mean */
        props[7 * pstride] = var;                                     /* variance */
        props[8 * pstride] = sqrt((double)vi) / T;                    /* std */
        props[9 * pstride] = m->ent_nat;                              /* entropy */
    }
    if (!har) return;
    mi = m->mi < 0 ? 0 : m->mi;                                       /* rounding only */
    har[0] = (double)m->Q / T / T;                                    /* angular second moment */
    har[1] = (double)m->d2 / T;                                       /* contrast */
    har[2] = corr;                                                    /* correlation */
    har[3] = var;                                                     /* sum of squares: variance */
    har[4] = m->hom / T;                                              /* inverse difference moment */
    har[5] = (double)m->s1 / T;                                       /* sum average */
    har[6] = (double)glcm_var_num(m->T, m->s1, m->s2) / T / T;        /* sum variance */
    har[7] = m->hs;                                                   /* sum entropy */
    har[8] = m->hxy;                                                  /* entropy */
    har[9] = (double)glcm_var_num(m->T, m->d1, m->d2) / T / T;        /* difference variance */
    har[10] = m->hd;                                                  /* difference entropy */
    /* HXY1 = HXY2 = HX + HY: both information measures are functions of the
     * mutual information; imc2 takes nats in the exponent (docs/glcm.md). */
    har[11] = (m->hx > m->hy ? m->hx : m->hy) > 0 ? -mi / (m->hx > m->hy ? m->hx : m->hy) : 0.0;
    har[12] = sqrt(-expm1(-2.0 * GLCM_LN2 * mi));
    har[13] = mcc;
}

/* ------------------------------------------ Haralick's 14th feature */

/* sqrt(a^2 + b^2) without overflow, by the same operations on CPU and GPU
 * (the libraries' hypot may differ by an ulp). */
GLCM_FN double glcm_hyp(double a, double b)
{
    const double x = fabs(a), y = fabs(b), m = x > y ? x : y;
    double u, v;
    if (m == 0.0 || m > 1.7976931348623157e308) return m;
    u = x / m;
    v = y / m;
    return m * sqrt(u * u + v * v);
}

/* Eigenvalues of the symmetric n x n matrix A (row-major, destroyed) into d
 * (n), by Householder reduction to tridiagonal form and the implicit QL
 * method with Wilkinson-style shifts. e, sub: n scratch each. */
GLCM_FN void glcm_sym_eigenvalues(double *A, int n, double *d, double *e, double *sub)
{
    int k, i, j, l, m, it;
    double *v = e; /* reuse e as the Householder vector until the end */
    double *p = d; /* and d as the product vector */
    for (k = 0; k + 2 < n; k++) {
        double norm = 0.0, alpha, vtv = 0.0, K = 0.0;
        for (i = k + 1; i < n; i++) norm += A[i * n + k] * A[i * n + k];
        norm = sqrt(norm);
        if (norm == 0.0) {
            sub[k] = 0.0;
            continue;
        }
        alpha = A[(k + 1) * n + k] > 0 ? -norm : norm;
        for (i = k + 1; i < n; i++) v[i] = A[i * n + k];
        v[k + 1] -= alpha;
        for (i = k + 1; i < n; i++) vtv += v[i] * v[i];
        if (vtv == 0.0) {
            sub[k] = A[(k + 1) * n + k];
            continue;
        }
        /* p = A v * 2/vtv ; K = v.p / vtv ; q = p - K v ; A -= v q^T + q v^T */
        for (i = k + 1; i < n; i++) {
            double s = 0.0;
            for (j = k + 1; j < n; j++) s += A[i * n + j] * v[j];
            p[i] = s * 2.0 / vtv;
        }
        for (i = k + 1; i < n; i++) K += v[i] * p[i];
        K /= vtv;
        for (i = k + 1; i < n; i++) p[i] -= K * v[i];
        for (i = k + 1; i < n; i++)
            for (j = k + 1; j < n; j++) A[i * n + j] -= v[i] * p[j] + p[i] * v[j];
        sub[k] = alpha;
    }
    if (n >= 2) sub[n - 2] = A[(n - 1) * n + (n - 2)];
    for (i = 0; i < n; i++) d[i] = A[i * n + i];
    for (i = 0; i + 1 < n; i++) e[i] = sub[i];
    if (n > 0) e[n - 1] = 0.0;
    /* Implicit QL on (d, e): e[i] couples d[i] and d[i+1]. */
    for (l = 0; l < n; l++) {
        for (it = 0; it < 64; it++) {
            double g, r, s, c, f, b, pp;
            for (m = l; m + 1 < n; m++) {
                double dd = fabs(d[m]) + fabs(d[m + 1]);
                if (fabs(e[m]) <= DBL_EPSILON * dd) break;
            }
            if (m == l) break;
            g = (d[l + 1] - d[l]) / (2.0 * e[l]);
            r = glcm_hyp(g, 1.0);
            g = d[m] - d[l] + e[l] / (g + (g >= 0 ? r : -r));
            s = c = 1.0;
            pp = 0.0;
            for (i = m - 1; i >= l; i--) {
                f = s * e[i];
                b = c * e[i];
                r = glcm_hyp(f, g);
                e[i + 1] = r;
                if (r == 0.0) {
                    d[i + 1] -= pp;
                    e[m] = 0.0;
                    break;
                }
                s = f / r;
                c = g / r;
                g = d[i + 1] - pp;
                r = (d[i] - g) * s + 2.0 * c * b;
                pp = s * r;
                d[i + 1] = g + pp;
                g = c * r - b;
            }
            if (r == 0.0 && i >= l) continue;
            d[l] -= pp;
            e[l] = g;
            e[m] = 0.0;
        }
    }
}

/* Haralick's maximal correlation coefficient of one count matrix (rows,
 * cols: its marginals, total: its sum). work: 2 L^2 + 3 L doubles. */
GLCM_FN double glcm_mcc_core(const uint32_t *counts, int levels, const uint64_t *rows, const uint64_t *cols,
                             uint64_t total, double *work)
{
    /* Q(i,j) = sum_k p(i,k) p(j,k) / (px(i) py(k)) is similar to the
     * symmetric S = A A^T with A(i,k) = p(i,k) / sqrt(px(i) py(k)), over the
     * rows and columns with non-zero marginals; its largest eigenvalue is 1
     * and the feature is the square root of the second largest. */
    int ri[256], ci[256]; /* PATINA_GLCM_MAX_LEVELS */
    int n = 0, mcols = 0, i, j, k;
    double *A, *S, *d, *e, best1 = -HUGE_VAL, best2 = -HUGE_VAL, T = (double)total;
    if (total == 0) return 0.0;
    for (i = 0; i < levels; i++) {
        if (rows[i]) ri[n++] = i;
        if (cols[i]) ci[mcols++] = i;
    }
    if (n < 2 || mcols < 2) return 0.0;
    A = work;
    S = A + (size_t)n * (size_t)mcols;
    d = S + (size_t)n * (size_t)n;
    e = d + n;
    for (i = 0; i < n; i++) {
        double px = (double)rows[ri[i]] / T;
        for (k = 0; k < mcols; k++) {
            double py = (double)cols[ci[k]] / T;
            double p = (double)counts[(size_t)ri[i] * (size_t)levels + (size_t)ci[k]] / T;
            A[(size_t)i * (size_t)mcols + (size_t)k] = p / sqrt(px * py);
        }
    }
    for (i = 0; i < n; i++)
        for (j = 0; j <= i; j++) {
            double s = 0.0;
            const double *ai = A + (size_t)i * (size_t)mcols, *aj = A + (size_t)j * (size_t)mcols;
            for (k = 0; k < mcols; k++) s += ai[k] * aj[k];
            S[(size_t)i * (size_t)n + (size_t)j] = s;
            S[(size_t)j * (size_t)n + (size_t)i] = s;
        }
    glcm_sym_eigenvalues(S, n, d, e, e + n);
    for (i = 0; i < n; i++) {
        if (d[i] > best1) {
            best2 = best1;
            best1 = d[i];
        } else if (d[i] > best2) {
            best2 = d[i];
        }
    }
    if (!(best2 > 0.0)) return 0.0;
    return sqrt(best2 > 1.0 ? 1.0 : best2);
}

#endif
