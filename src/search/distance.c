/* The distance table's CPU definitions (search/distance.h): plain loops in
 * element order, the ground truth that the fast paths and the GPU kernels
 * reproduce bit for bit. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "features/rootsift.h"
#include "identify/identify.h"
#include "search/distance.h"

double pdist_elem(patina_elem e, const void *p, size_t i)
{
    switch (e) {
    case PATINA_ELEM_U8: return (double)((const uint8_t *)p)[i];
    case PATINA_ELEM_U16: return (double)((const uint16_t *)p)[i];
    case PATINA_ELEM_U32: return (double)((const uint32_t *)p)[i];
    case PATINA_ELEM_F32: return (double)((const float *)p)[i];
    case PATINA_ELEM_F64: return ((const double *)p)[i];
    }
    return NAN;
}

#define AT(v, i) pdist_elem(e, v, i)

/* LIRE's Tanimoto with a as the query (T2, q) and b as the row (T1, p), the
 * operations of patina_cedd_tanimoto generalised to n elements of any type. */
static double d_tanimoto(patina_elem e, const void *a, const void *b, size_t n, const double *sd)
{
    double t1 = 0.0, t2 = 0.0, c1 = 0.0, c2 = 0.0, c3 = 0.0;
    size_t i;
    (void)sd;
    for (i = 0; i < n; i++) {
        t1 += AT(b, i);
        t2 += AT(a, i);
    }
    if (t1 == 0.0 && t2 == 0.0) return 0.0;
    if (t1 == 0.0 || t2 == 0.0) return 100.0;
    for (i = 0; i < n; i++) {
        double p = AT(b, i) / t1, q = AT(a, i) / t2;
        c1 += p * q;
        c2 += q * q;
        c3 += p * p;
    }
    return 100.0 - 100.0 * (c1 / ((c2 + c3) - c1));
}

static double d_l1(patina_elem e, const void *a, const void *b, size_t n, const double *sd)
{
    double d = 0.0;
    (void)sd;
    for (size_t i = 0; i < n; i++) d += fabs(AT(a, i) - AT(b, i));
    return d;
}

static double d_l2(patina_elem e, const void *a, const void *b, size_t n, const double *sd)
{
    double d = 0.0;
    (void)sd;
    for (size_t i = 0; i < n; i++) {
        double x = AT(a, i) - AT(b, i);
        d += x * x;
    }
    return sqrt(d);
}

static double d_std_l2(patina_elem e, const void *a, const void *b, size_t n, const double *sd)
{
    double d = 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = (AT(a, i) - AT(b, i)) / (sd ? sd[i] : 1.0);
        d += x * x;
    }
    return sqrt(d);
}

static double d_chi2(patina_elem e, const void *a, const void *b, size_t n, const double *sd)
{
    double d = 0.0;
    (void)sd;
    for (size_t i = 0; i < n; i++) {
        double x = AT(a, i), y = AT(b, i);
        if (x + y > 0.0) d += (x - y) * (x - y) / (x + y);
    }
    return d;
}

static double d_intersection(patina_elem e, const void *a, const void *b, size_t n, const double *sd)
{
    double d = 0.0, sa = 0.0, sb = 0.0;
    (void)sd;
    for (size_t i = 0; i < n; i++) {
        double x = AT(a, i), y = AT(b, i);
        d += x < y ? x : y;
        sa += x;
        sb += y;
    }
    if (sa == 0.0 && sb == 0.0) return 0.0;
    return 1.0 - d / (sa > sb ? sa : sb);
}

static double d_hellinger(patina_elem e, const void *a, const void *b, size_t n, const double *sd)
{
    double d = 0.0, sa = 0.0, sb = 0.0;
    (void)sd;
    for (size_t i = 0; i < n; i++) {
        double x = AT(a, i), y = AT(b, i);
        d += sqrt(x * y);
        sa += x;
        sb += y;
    }
    if (sa == 0.0 && sb == 0.0) return 0.0;
    if (sa == 0.0 || sb == 0.0) return 1.0;
    d = 1.0 - d / sqrt(sa * sb);
    return d > 0.0 ? sqrt(d) : 0.0;
}

static double d_cosine(patina_elem e, const void *a, const void *b, size_t n, const double *sd)
{
    double ab = 0.0, aa = 0.0, bb = 0.0;
    (void)sd;
    for (size_t i = 0; i < n; i++) {
        double x = AT(a, i), y = AT(b, i);
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    if (aa == 0.0 && bb == 0.0) return 0.0;
    if (aa == 0.0 || bb == 0.0) return 1.0;
    return 1.0 - ab / sqrt(aa * bb);
}

/* A record distance: a and b are rootsift records of n bytes each. */
static double d_rootsift_ratio(patina_elem e, const void *a, const void *b, size_t n, const double *sd)
{
    long s;
    (void)e;
    (void)sd;
    s = idf_ratio_count(a, n, b, n, 0.8, PATINA_SCORE_ONE2ONE);
    return s < 0 ? NAN : 1.0 / (1.0 + (double)s);
}

static const pdist_def_t table[PDIST_COUNT] = {
    [PDIST_TANIMOTO] = {"tanimoto", d_tanimoto, 1, 0},
    [PDIST_L1] = {"l1", d_l1, 1, 0},
    [PDIST_L2] = {"l2", d_l2, 1, 0},
    [PDIST_STD_L2] = {"std_l2", d_std_l2, 1, 0},
    [PDIST_CHI2] = {"chi2", d_chi2, 1, 0},
    [PDIST_INTERSECTION] = {"intersection", d_intersection, 1, 0},
    [PDIST_HELLINGER] = {"hellinger", d_hellinger, 1, 0},
    [PDIST_COSINE] = {"cosine", d_cosine, 1, 0},
    [PDIST_ROOTSIFT_RATIO] = {"rootsift_ratio", d_rootsift_ratio, 0, 1},
};

const pdist_def_t *pdist_get(pdist_t d) { return (unsigned)d < PDIST_COUNT ? &table[d] : NULL; }

int pdist_find(const char *name)
{
    for (int d = 0; name && d < PDIST_COUNT; d++)
        if (!strcmp(table[d].name, name)) return d;
    return -1;
}
