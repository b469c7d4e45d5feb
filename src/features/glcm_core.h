/* The last step of every GLCM property and Haralick feature, shared verbatim
 * by the C reference (src/features/glcm.c) and the CUDA kernels
 * (src/gpu/glcm.cu): one source, so CPU and GPU cannot drift.
 *
 * Both sides first reduce a count matrix P (L x L) to the integer moments
 * and the few floating-point sums below, in the orders stated here; this
 * header turns them into the 10 graycoprops properties and Haralick's 14
 * features (docs/glcm.md). Integer moments are exact, so every feature built
 * from them alone is bit-identical on CPU and GPU; the sums of logarithms
 * differ only by the libraries' log/log2 (CUDA: within 1-2 ulp per call). */
#ifndef PATINA_GLCM_CORE_H
#define PATINA_GLCM_CORE_H

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

#endif
