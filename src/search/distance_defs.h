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


/* Four rows at once (b[0..3]) with the same operations in the same order
 * per row as the definitions above: four independent accumulations, so the
 * divisions, square roots and additions of different rows overlap (the
 * rows' results are the definitions' doubles bit for bit; test_distance
 * checks it). out[j] = the distance of row b[j]. Tanimoto has no such
 * variant (its rows take the fast path or the definition). */
static void DNAME(x4_l1)(const void *a, const void *const b[4], size_t n, const double *sd, double out[4])
{
    double d[4] = {0.0, 0.0, 0.0, 0.0};
    (void)sd;
    for (size_t i = 0; i < n; i++) {
        const double x = AT(a, i);
        for (int j = 0; j < 4; j++) d[j] += fabs(x - AT(b[j], i));
    }
    for (int j = 0; j < 4; j++) out[j] = d[j];
}

static void DNAME(x4_l2)(const void *a, const void *const b[4], size_t n, const double *sd, double out[4])
{
    double d[4] = {0.0, 0.0, 0.0, 0.0};
    (void)sd;
    for (size_t i = 0; i < n; i++) {
        const double x = AT(a, i);
        for (int j = 0; j < 4; j++) {
            const double t = x - AT(b[j], i);
            d[j] += t * t;
        }
    }
    for (int j = 0; j < 4; j++) out[j] = sqrt(d[j]);
}

static void DNAME(x4_std_l2)(const void *a, const void *const b[4], size_t n, const double *sd, double out[4])
{
    double d[4] = {0.0, 0.0, 0.0, 0.0};
    for (size_t i = 0; i < n; i++) {
        const double x = AT(a, i), s = sd ? sd[i] : 1.0;
        for (int j = 0; j < 4; j++) {
            const double t = (x - AT(b[j], i)) / s;
            d[j] += t * t;
        }
    }
    for (int j = 0; j < 4; j++) out[j] = sqrt(d[j]);
}

static void DNAME(x4_chi2)(const void *a, const void *const b[4], size_t n, const double *sd, double out[4])
{
    double d[4] = {0.0, 0.0, 0.0, 0.0};
    (void)sd;
    for (size_t i = 0; i < n; i++) {
        const double x = AT(a, i);
        for (int j = 0; j < 4; j++) {
            const double y = AT(b[j], i);
            if (x + y > 0.0) d[j] += (x - y) * (x - y) / (x + y);
        }
    }
    for (int j = 0; j < 4; j++) out[j] = d[j];
}

static void DNAME(x4_intersection)(const void *a, const void *const b[4], size_t n, const double *sd, double out[4])
{
    double d[4] = {0.0, 0.0, 0.0, 0.0}, sa = 0.0, sb[4] = {0.0, 0.0, 0.0, 0.0};
    (void)sd;
    for (size_t i = 0; i < n; i++) {
        const double x = AT(a, i);
        sa += x;
        for (int j = 0; j < 4; j++) {
            const double y = AT(b[j], i);
            d[j] += x < y ? x : y;
            sb[j] += y;
        }
    }
    for (int j = 0; j < 4; j++)
        out[j] = sa == 0.0 && sb[j] == 0.0 ? 0.0 : 1.0 - d[j] / (sa > sb[j] ? sa : sb[j]);
}

static void DNAME(x4_hellinger)(const void *a, const void *const b[4], size_t n, const double *sd, double out[4])
{
    double d[4] = {0.0, 0.0, 0.0, 0.0}, sa = 0.0, sb[4] = {0.0, 0.0, 0.0, 0.0};
    (void)sd;
    for (size_t i = 0; i < n; i++) {
        const double x = AT(a, i);
        sa += x;
        for (int j = 0; j < 4; j++) {
            const double y = AT(b[j], i);
            d[j] += sqrt(x * y);
            sb[j] += y;
        }
    }
    for (int j = 0; j < 4; j++) {
        double e;
        if (sa == 0.0 && sb[j] == 0.0) {
            out[j] = 0.0;
            continue;
        }
        if (sa == 0.0 || sb[j] == 0.0) {
            out[j] = 1.0;
            continue;
        }
        e = 1.0 - d[j] / sqrt(sa * sb[j]);
        out[j] = e > 0.0 ? sqrt(e) : 0.0;
    }
}

static void DNAME(x4_cosine)(const void *a, const void *const b[4], size_t n, const double *sd, double out[4])
{
    double ab[4] = {0.0, 0.0, 0.0, 0.0}, aa = 0.0, bb[4] = {0.0, 0.0, 0.0, 0.0};
    (void)sd;
    for (size_t i = 0; i < n; i++) {
        const double x = AT(a, i);
        aa += x * x;
        for (int j = 0; j < 4; j++) {
            const double y = AT(b[j], i);
            ab[j] += x * y;
            bb[j] += y * y;
        }
    }
    for (int j = 0; j < 4; j++)
        out[j] = aa == 0.0 && bb[j] == 0.0 ? 0.0 : aa == 0.0 || bb[j] == 0.0 ? 1.0 : 1.0 - ab[j] / sqrt(aa * bb[j]);
}
