/* The distance table's CPU definitions (search/distance.h): plain loops in
 * element order, the ground truth that the fast paths and the GPU kernels
 * reproduce bit for bit. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "algo/rootsift_match.h"
#include "algo/sqfd.h"
#include "core/internal.h"
#include "patina/identify.h"
#include "patina/options.h"
#include "search/distance.h"
#include "search/distance_simd.h"

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

void pdist_elems(patina_elem e, const void *p, size_t n, double *out)
{
    size_t i;
    switch (e) {
    case PATINA_ELEM_U8: for (i = 0; i < n; i++) out[i] = (double)((const uint8_t *)p)[i]; return;
    case PATINA_ELEM_U16: for (i = 0; i < n; i++) out[i] = (double)((const uint16_t *)p)[i]; return;
    case PATINA_ELEM_U32: for (i = 0; i < n; i++) out[i] = (double)((const uint32_t *)p)[i]; return;
    case PATINA_ELEM_F32: for (i = 0; i < n; i++) out[i] = (double)((const float *)p)[i]; return;
    case PATINA_ELEM_F64: memcpy(out, p, n * sizeof *out); return;
    }
    for (i = 0; i < n; i++) out[i] = NAN;
}

size_t pdist_first_nan(patina_elem e, const void *p, size_t n)
{
    size_t i = 0;
    if (e == PATINA_ELEM_F32)
        while (i < n && !isnan(((const float *)p)[i])) i++;
    else if (e == PATINA_ELEM_F64)
        while (i < n && !isnan(((const double *)p)[i])) i++;
    else
        i = n;
    return i;
}

/* The definitions, once per element type (reading an element is then a
 * typed load, not a switch per element; the doubles are the same). */
#define AT(v, i) ((double)((const uint8_t *)(v))[i])
#define DNAME(f) f##_u8
#include "search/distance_defs.h"
#undef AT
#undef DNAME
#define AT(v, i) ((double)((const uint16_t *)(v))[i])
#define DNAME(f) f##_u16
#include "search/distance_defs.h"
#undef AT
#undef DNAME
#define AT(v, i) ((double)((const uint32_t *)(v))[i])
#define DNAME(f) f##_u32
#include "search/distance_defs.h"
#undef AT
#undef DNAME
#define AT(v, i) ((double)((const float *)(v))[i])
#define DNAME(f) f##_f32
#include "search/distance_defs.h"
#undef AT
#undef DNAME
#define AT(v, i) (((const double *)(v))[i])
#define DNAME(f) f##_f64
#include "search/distance_defs.h"
#undef AT
#undef DNAME

/* d_NAME(e, ...): the typed definition of the element type e. */
#define DISPATCH(f)                                                                                     \
    static double f(patina_elem e, const void *a, const void *b, size_t n, const double *sd)           \
    {                                                                                                   \
        switch (e) {                                                                                    \
        case PATINA_ELEM_U8: return f##_u8(a, b, n, sd);                                                \
        case PATINA_ELEM_U16: return f##_u16(a, b, n, sd);                                              \
        case PATINA_ELEM_U32: return f##_u32(a, b, n, sd);                                              \
        case PATINA_ELEM_F32: return f##_f32(a, b, n, sd);                                              \
        case PATINA_ELEM_F64: return f##_f64(a, b, n, sd);                                              \
        }                                                                                               \
        return NAN;                                                                                     \
    }
/* x4_NAME(e, ...): the typed four-row variant. */
#define DISPATCH4(f)                                                                                    \
    static void f(patina_elem e, const void *a, const void *const b[4], size_t n, const double *sd,     \
                  double out[4])                                                                        \
    {                                                                                                   \
        switch (e) {                                                                                    \
        case PATINA_ELEM_U8: f##_u8(a, b, n, sd, out); return;                                          \
        case PATINA_ELEM_U16: f##_u16(a, b, n, sd, out); return;                                        \
        case PATINA_ELEM_U32: f##_u32(a, b, n, sd, out); return;                                        \
        case PATINA_ELEM_F32: f##_f32(a, b, n, sd, out); return;                                        \
        case PATINA_ELEM_F64: f##_f64(a, b, n, sd, out); return;                                        \
        }                                                                                               \
    }
DISPATCH4(x4_l1)
DISPATCH4(x4_l2)
DISPATCH4(x4_std_l2)
DISPATCH4(x4_chi2)
DISPATCH4(x4_intersection)
DISPATCH4(x4_hellinger)
DISPATCH4(x4_cosine)

DISPATCH(d_tanimoto)
DISPATCH(d_l1)
DISPATCH(d_l2)
DISPATCH(d_std_l2)
DISPATCH(d_chi2)
DISPATCH(d_intersection)
DISPATCH(d_hellinger)
DISPATCH(d_cosine)

/* A record distance: a and b are rootsift records of n bytes each; ratio
 * points to Lowe's ratio (NULL: the default). The matcher and the scoring
 * are identification's (algo/rootsift_match.h): the one-to-one score as a
 * distance. */
static double d_rootsift_ratio(patina_elem e, const void *a, const void *b, size_t n, const double *ratio)
{
    long s;
    (void)e;
    s = idf_ratio_count(a, n, b, n, ratio ? *ratio : PATINA_RATIO_DEFAULT, PATINA_SCORE_ONE2ONE);
    return s < 0 ? NAN : 1.0 / (1.0 + (double)s);
}

/* A record distance: a and b are signature records of n floats each. */
static double d_sqfd(patina_elem e, const void *a, const void *b, size_t n, const double *sd)
{
    (void)e;
    (void)sd;
    return sig_sqfd(a, b, n);
}

static patina_status check_sqfd(const void *rec, size_t n, const char *what)
{
    char why[256];
    if (!sig_record_problem(rec, n, why, sizeof why)) return PATINA_OK;
    return patina__fail(PATINA_E_INVALID, "%s: %s", what, why);
}

static const pdist_def_t table[PDIST_COUNT] = {
    /* name, pair, gpu, record, ratio */
    [PDIST_TANIMOTO] = {"tanimoto", d_tanimoto, 1, 0, 0},
    [PDIST_L1] = {"l1", d_l1, 1, 0, 0},
    [PDIST_L2] = {"l2", d_l2, 1, 0, 0},
    [PDIST_STD_L2] = {"std_l2", d_std_l2, 1, 0, 0},
    [PDIST_CHI2] = {"chi2", d_chi2, 1, 0, 0},
    [PDIST_INTERSECTION] = {"intersection", d_intersection, 1, 0, 0},
    [PDIST_HELLINGER] = {"hellinger", d_hellinger, 1, 0, 0},
    [PDIST_COSINE] = {"cosine", d_cosine, 1, 0, 0},
    [PDIST_ROOTSIFT_RATIO] = {"rootsift_ratio", d_rootsift_ratio, 0, 1, 1},
    [PDIST_SQFD] = {"sqfd", d_sqfd, 0, 1, 0},
};

const pdist_def_t *pdist_get(pdist_t d) { return (unsigned)d < PDIST_COUNT ? &table[d] : NULL; }

pdist_check_fn pdist_check(pdist_t d) { return d == PDIST_SQFD ? check_sqfd : NULL; }

int pdist_find(const char *name)
{
    for (int d = 0; name && d < PDIST_COUNT; d++)
        if (!strcmp(table[d].name, name)) return d;
    return -1;
}

static atomic_int portable_forced = 0;
#if PDIST_HAVE_AVX2
static atomic_int simd_path = -1; /* the CPU's: -1 not asked yet, 0 portable, 1 AVX2 */
#endif

int pdist_simd(void)
{
#if PDIST_HAVE_AVX2
    int p = atomic_load(&simd_path);
    if (p < 0) {
        p = pdist_avx2_cpu();
        atomic_store(&simd_path, p);
    }
    return p && !atomic_load(&portable_forced);
#else
    return 0;
#endif
}

void pdist_force_portable(int on) { atomic_store(&portable_forced, on != 0); }

size_t pdist_block_min(pdist_t d) { return d == PDIST_HELLINGER && pdist_simd() ? PDIST_HELL_BLOCK : 1; }

size_t pdist_block_scratch(size_t nq, size_t n)
{
    /* the AVX2 path's qv (nq, n), qs (nq, 2), acc and appr (nq, 4), inv (n), rs (8), T (n, 4) aligned to 32
     * bytes, Hellinger's sT (n, 4) and sq (nq, n) */
    return (2 * nq * n + 10 * nq + 8 + 9 * n) * sizeof(double) + 32;
}

/* The portable path: four rows at a time through the x4 variants (each
 * group of rows stays in cache while every query of the block reads it),
 * the rest row by row through the definition. */
static void block_portable(pdist_t d, patina_elem e, const uint8_t *queries, size_t nq, const uint8_t *rows,
                           size_t bytes, size_t cnt, size_t n, const double *sd, double *out, size_t ld)
{
    void (*x4)(patina_elem, const void *, const void *const[4], size_t, const double *, double[4]) = NULL;
    const pdist_def_t *def = pdist_get(d);
    size_t r = 0, q;
    switch (d) {
    case PDIST_L1: x4 = x4_l1; break;
    case PDIST_L2: x4 = x4_l2; break;
    case PDIST_STD_L2: x4 = x4_std_l2; break;
    case PDIST_CHI2: x4 = x4_chi2; break;
    case PDIST_INTERSECTION: x4 = x4_intersection; break;
    case PDIST_HELLINGER: x4 = x4_hellinger; break;
    case PDIST_COSINE: x4 = x4_cosine; break;
    default: break;
    }
    if (x4)
        for (; r + 4 <= cnt; r += 4) {
            const void *b[4] = {rows + r * bytes, rows + (r + 1) * bytes, rows + (r + 2) * bytes, rows + (r + 3) * bytes};
            for (q = 0; q < nq; q++) x4(e, queries + q * bytes, b, n, sd, out + q * ld + r);
        }
    for (; r < cnt; r++)
        for (q = 0; q < nq; q++) out[q * ld + r] = def->pair(e, queries + q * bytes, rows + r * bytes, n, sd);
}

void pdist_block(pdist_t d, patina_elem e, const uint8_t *queries, size_t nq, const uint8_t *rows, size_t bytes,
                 size_t cnt, size_t n, const double *sd, const double *thr, void *scratch, double *out, size_t ld)
{
    const pdist_def_t *def = pdist_get(d);
    if (!def || def->record) { /* whole records: the definition, pair by pair */
        for (size_t r = 0; def && r < cnt; r++)
            for (size_t q = 0; q < nq; q++) out[q * ld + r] = def->pair(e, queries + q * bytes, rows + r * bytes, n, sd);
        return;
    }
#if PDIST_HAVE_AVX2
    if (pdist_simd()) {
        pdist_avx2_block(d, e, queries, nq, rows, bytes, cnt, n, sd, thr, scratch, out, ld);
        return;
    }
#endif
    (void)scratch;
    (void)thr;
    block_portable(d, e, queries, nq, rows, bytes, cnt, n, sd, out, ld);
}
