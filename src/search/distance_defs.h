/* The definitions of the distance table (search/distance.h), written once
 * and compiled once per element type by src/search/distance.c: AT(v, i)
 * reads element i of v as a double, DNAME(f) names the typed function. No
 * include guard: included once per type. */

/* LIRE's Tanimoto with a as the query (T2, q) and b as the row (T1, p), the
 * operations of patina_cedd_tanimoto generalised to n elements of any type. */
static double DNAME(d_tanimoto)(const void *a, const void *b, size_t n, const double *sd)
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

static double DNAME(d_l1)(const void *a, const void *b, size_t n, const double *sd)
{
    double d = 0.0;
    (void)sd;
    for (size_t i = 0; i < n; i++) d += fabs(AT(a, i) - AT(b, i));
    return d;
}

static double DNAME(d_l2)(const void *a, const void *b, size_t n, const double *sd)
{
    double d = 0.0;
    (void)sd;
    for (size_t i = 0; i < n; i++) {
        double x = AT(a, i) - AT(b, i);
        d += x * x;
    }
    return sqrt(d);
}

static double DNAME(d_std_l2)(const void *a, const void *b, size_t n, const double *sd)
{
    double d = 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = (AT(a, i) - AT(b, i)) / (sd ? sd[i] : 1.0);
        d += x * x;
    }
    return sqrt(d);
}

static double DNAME(d_chi2)(const void *a, const void *b, size_t n, const double *sd)
{
    double d = 0.0;
    (void)sd;
    for (size_t i = 0; i < n; i++) {
        double x = AT(a, i), y = AT(b, i);
        if (x + y > 0.0) d += (x - y) * (x - y) / (x + y);
    }
    return d;
}

static double DNAME(d_intersection)(const void *a, const void *b, size_t n, const double *sd)
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

static double DNAME(d_hellinger)(const void *a, const void *b, size_t n, const double *sd)
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

static double DNAME(d_cosine)(const void *a, const void *b, size_t n, const double *sd)
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

