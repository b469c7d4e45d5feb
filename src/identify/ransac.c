/* RANSAC verification of tentative correspondences (src/identify/identify.h):
 * similarity (2-point samples), affine (3) and homography (4) models mapping
 * query keypoints onto reference keypoints, a deterministic seeded PRNG,
 * adaptive stopping and a least-squares refit on the inliers.
 *
 * Every fit, minimal or not, is one linear least-squares problem in
 * Hartley-normalised coordinates (each point set moved to its centroid and
 * scaled to a mean distance of sqrt 2), solved through its normal equations
 * by Gaussian elimination with partial pivoting, then denormalised:
 * H = T_ref^-1 Hn T_query. A minimal sample gives a square system (an exact
 * fit); the homography is the DLT with h33 = 1. Samples with coincident or
 * collinear points are rejected before fitting. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "identify/identify.h"

#define RANSAC_CONFIDENCE 0.999
#define IDF_PI 3.14159265358979323846
#define COLLINEAR_SINE 1e-3 /* |sin| of a sample triangle's angle below this: collinear */

void idf_rng_seed(idf_rng_t *g, uint64_t seed)
{
    /* splitmix64 of the seed: distinct seeds give unrelated streams. */
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    g->s = z ? z : 0x2545F4914F6CDD1Dull; /* xorshift must not start at 0 */
}

uint64_t idf_rng_next(idf_rng_t *g)
{
    /* xorshift64* */
    g->s ^= g->s >> 12;
    g->s ^= g->s << 25;
    g->s ^= g->s >> 27;
    return g->s * 0x2545F4914F6CDD1Dull;
}

static size_t min_sample(patina_identify_model kind)
{
    return kind == PATINA_MODEL_SIMILARITY ? 2 : kind == PATINA_MODEL_AFFINE ? 3 : 4;
}

static size_t nparams(patina_identify_model kind)
{
    return kind == PATINA_MODEL_SIMILARITY ? 4 : kind == PATINA_MODEL_AFFINE ? 6 : 8;
}

/* Hartley normalisation of the points p[idx[t]] (t < k): T maps p to
 * t(p) = s (p - c). 0 when the points coincide. */
static int normaliser(double T[3], const double *p, const size_t *idx, size_t k)
{
    double cx = 0, cy = 0, md = 0;
    size_t t;
    for (t = 0; t < k; t++) {
        cx += p[2 * idx[t]];
        cy += p[2 * idx[t] + 1];
    }
    cx /= (double)k;
    cy /= (double)k;
    for (t = 0; t < k; t++) md += hypot(p[2 * idx[t]] - cx, p[2 * idx[t] + 1] - cy);
    md /= (double)k;
    if (!(md > 1e-9)) return 0;
    T[0] = sqrt(2.0) / md;
    T[1] = cx;
    T[2] = cy;
    return 1;
}

/* Solves the p x p system A x = b in place (partial pivoting); 0 when a
 * pivot is below eps relative to the matrix's largest entry. */
static int solve(double *A, double *b, double *x, size_t p)
{
    size_t c, r, k;
    double amax = 0;
    for (r = 0; r < p * p; r++)
        if (fabs(A[r]) > amax) amax = fabs(A[r]);
    if (!(amax > 0)) return 0;
    for (c = 0; c < p; c++) {
        size_t piv = c;
        for (r = c + 1; r < p; r++)
            if (fabs(A[r * p + c]) > fabs(A[piv * p + c])) piv = r;
        if (!(fabs(A[piv * p + c]) > 1e-12 * amax)) return 0;
        if (piv != c) {
            for (k = 0; k < p; k++) {
                double t = A[c * p + k];
                A[c * p + k] = A[piv * p + k];
                A[piv * p + k] = t;
            }
            double t = b[c];
            b[c] = b[piv];
            b[piv] = t;
        }
        for (r = c + 1; r < p; r++) {
            double f = A[r * p + c] / A[c * p + c];
            for (k = c; k < p; k++) A[r * p + k] -= f * A[c * p + k];
            b[r] -= f * b[c];
        }
    }
    for (c = p; c-- > 0;) {
        double s = b[c];
        for (k = c + 1; k < p; k++) s -= A[c * p + k] * x[k];
        x[c] = s / A[c * p + c];
    }
    return 1;
}

/* Least-squares fit of `kind` to the correspondences idx[0, k). */
static int fit(idf_model_t *m, patina_identify_model kind, const double *qp, const double *rp,
               const size_t *idx, size_t k)
{
    double Tq[3], Tr[3], AtA[64], Atb[8], x[8], Hn[9], A[9], B[9];
    size_t p = nparams(kind), t, a, b;
    if (k < min_sample(kind)) return 0;
    if (!normaliser(Tq, qp, idx, k) || !normaliser(Tr, rp, idx, k)) return 0;
    memset(AtA, 0, sizeof AtA);
    memset(Atb, 0, sizeof Atb);
    for (t = 0; t < k; t++) {
        double X = Tq[0] * (qp[2 * idx[t]] - Tq[1]), Y = Tq[0] * (qp[2 * idx[t] + 1] - Tq[2]);
        double U = Tr[0] * (rp[2 * idx[t]] - Tr[1]), V = Tr[0] * (rp[2 * idx[t] + 1] - Tr[2]);
        double row[2][8], rhs[2] = {U, V};
        memset(row, 0, sizeof row);
        if (kind == PATINA_MODEL_SIMILARITY) { /* unknowns a, b, tx, ty: U = aX - bY + tx, V = bX + aY + ty */
            row[0][0] = X, row[0][1] = -Y, row[0][2] = 1;
            row[1][0] = Y, row[1][1] = X, row[1][3] = 1;
        } else if (kind == PATINA_MODEL_AFFINE) {
            row[0][0] = X, row[0][1] = Y, row[0][2] = 1;
            row[1][3] = X, row[1][4] = Y, row[1][5] = 1;
        } else { /* DLT with h33 = 1 */
            row[0][0] = X, row[0][1] = Y, row[0][2] = 1, row[0][6] = -X * U, row[0][7] = -Y * U;
            row[1][3] = X, row[1][4] = Y, row[1][5] = 1, row[1][6] = -X * V, row[1][7] = -Y * V;
        }
        for (int e = 0; e < 2; e++)
            for (a = 0; a < p; a++) {
                Atb[a] += row[e][a] * rhs[e];
                for (b = 0; b < p; b++) AtA[a * p + b] += row[e][a] * row[e][b];
            }
    }
    if (!solve(AtA, Atb, x, p)) return 0;
    if (kind == PATINA_MODEL_SIMILARITY) {
        double h[9] = {x[0], -x[1], x[2], x[1], x[0], x[3], 0, 0, 1};
        memcpy(Hn, h, sizeof h);
    } else if (kind == PATINA_MODEL_AFFINE) {
        double h[9] = {x[0], x[1], x[2], x[3], x[4], x[5], 0, 0, 1};
        memcpy(Hn, h, sizeof h);
    } else {
        double h[9] = {x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], 1};
        memcpy(Hn, h, sizeof h);
    }
    /* H = Tr^-1 Hn Tq; Tq = [s 0 -s cx; 0 s -s cy; 0 0 1], Tr^-1 = [1/s 0 cx; 0 1/s cy; 0 0 1]. */
    {
        double tq[9] = {Tq[0], 0, -Tq[0] * Tq[1], 0, Tq[0], -Tq[0] * Tq[2], 0, 0, 1};
        double tri[9] = {1 / Tr[0], 0, Tr[1], 0, 1 / Tr[0], Tr[2], 0, 0, 1};
        for (a = 0; a < 3; a++)
            for (b = 0; b < 3; b++) A[a * 3 + b] = Hn[a * 3] * tq[b] + Hn[a * 3 + 1] * tq[3 + b] + Hn[a * 3 + 2] * tq[6 + b];
        for (a = 0; a < 3; a++)
            for (b = 0; b < 3; b++) B[a * 3 + b] = tri[a * 3] * A[b] + tri[a * 3 + 1] * A[3 + b] + tri[a * 3 + 2] * A[6 + b];
    }
    if (!(fabs(B[8]) > 1e-12)) return 0;
    for (a = 0; a < 9; a++) {
        m->h[a] = B[a] / B[8];
        if (!isfinite(m->h[a])) return 0;
    }
    m->kind = kind;
    return 1;
}

/* Non-zero when a, b, c (points) are nearly coincident or collinear. */
static int collinear(const double *a, const double *b, const double *c)
{
    double ux = b[0] - a[0], uy = b[1] - a[1], vx = c[0] - a[0], vy = c[1] - a[1];
    double lu = hypot(ux, uy), lv = hypot(vx, vy);
    if (!(lu > 1e-6) || !(lv > 1e-6)) return 1;
    return fabs(ux * vy - uy * vx) <= COLLINEAR_SINE * lu * lv;
}

/* Non-zero when a minimal sample is degenerate in either image. */
static int degenerate(patina_identify_model kind, const double *qp, const double *rp, const size_t *idx)
{
    size_t s = min_sample(kind), a, b, c;
    for (int side = 0; side < 2; side++) {
        const double *p = side ? rp : qp;
        if (s == 2) {
            if (!(hypot(p[2 * idx[0]] - p[2 * idx[1]], p[2 * idx[0] + 1] - p[2 * idx[1] + 1]) > 1e-6)) return 1;
            continue;
        }
        for (a = 0; a < s; a++)
            for (b = a + 1; b < s; b++)
                for (c = b + 1; c < s; c++)
                    if (collinear(p + 2 * idx[a], p + 2 * idx[b], p + 2 * idx[c])) return 1;
    }
    return 0;
}

int idf_fit_minimal(idf_model_t *m, patina_identify_model kind, const double *qp, const double *rp,
                    const size_t *idx)
{
    if (degenerate(kind, qp, rp, idx)) return 0;
    return fit(m, kind, qp, rp, idx, min_sample(kind));
}

int idf_model_apply(const idf_model_t *m, double x, double y, double *ox, double *oy)
{
    const double *h = m->h;
    double w = h[6] * x + h[7] * y + h[8];
    if (!(fabs(w) > 1e-12)) return 0;
    *ox = (h[0] * x + h[1] * y + h[2]) / w;
    *oy = (h[3] * x + h[4] * y + h[5]) / w;
    return isfinite(*ox) && isfinite(*oy);
}

/* The log-scale and rotation the model applies near query point (x, y):
 * those of the similarity closest to its Jacobian there (constant for the
 * similarity and affine models). */
static void local_shape(const idf_model_t *m, double x, double y, double *ls, double *rot)
{
    const double *h = m->h;
    double j00 = h[0], j01 = h[1], j10 = h[3], j11 = h[4], det;
    if (m->kind == PATINA_MODEL_HOMOGRAPHY) {
        const double w = h[6] * x + h[7] * y + h[8], u = (h[0] * x + h[1] * y + h[2]) / w,
                     v = (h[3] * x + h[4] * y + h[5]) / w;
        j00 = (h[0] - u * h[6]) / w;
        j01 = (h[1] - u * h[7]) / w;
        j10 = (h[3] - v * h[6]) / w;
        j11 = (h[4] - v * h[7]) / w;
    }
    det = fabs(j00 * j11 - j01 * j10);
    *ls = det > 0 ? 0.5 * log(det) : -1e9;
    *rot = atan2(j10 - j01, j00 + j11);
}

/* |a| wrapped to [0, pi]. */
static double angle_gap(double a)
{
    a = fmod(a, 2 * IDF_PI);
    if (a < 0) a += 2 * IDF_PI;
    return a > IDF_PI ? 2 * IDF_PI - a : a;
}

/* Inliers of model m; mask may be NULL. For a homography, points that map
 * from behind the camera (w <= 0 where the sample had w > 0) are outliers:
 * w must be positive (models are scaled to h33 = 1, so w = 1 at the origin).
 * With shapes (qsh, rsh: (n, 2) log scale and orientation of each
 * keypoint), an inlier's keypoints must also agree with the model: the
 * scale ratio within IDF_SHAPE_SCALE and the orientation difference within
 * IDF_SHAPE_ANGLE of the model's scale and rotation there. */
static size_t count_inliers(const idf_model_t *m, const double *qp, const double *rp, const double *qsh,
                            const double *rsh, size_t n, double thr2, unsigned char *mask)
{
    size_t i, c = 0;
    const double lt = log(IDF_SHAPE_SCALE), at = IDF_SHAPE_ANGLE * IDF_PI / 180.0;
    double ls = 0, rot = 0;
    if (qsh && m->kind != PATINA_MODEL_HOMOGRAPHY) local_shape(m, 0, 0, &ls, &rot);
    for (i = 0; i < n; i++) {
        double x, y, w = m->h[6] * qp[2 * i] + m->h[7] * qp[2 * i + 1] + m->h[8];
        int in = w > 0 && idf_model_apply(m, qp[2 * i], qp[2 * i + 1], &x, &y) &&
                 (x - rp[2 * i]) * (x - rp[2 * i]) + (y - rp[2 * i + 1]) * (y - rp[2 * i + 1]) <= thr2;
        if (in && qsh) {
            if (m->kind == PATINA_MODEL_HOMOGRAPHY) local_shape(m, qp[2 * i], qp[2 * i + 1], &ls, &rot);
            in = fabs(rsh[2 * i] - qsh[2 * i] - ls) <= lt && angle_gap(rsh[2 * i + 1] - qsh[2 * i + 1] - rot) <= at;
        }
        if (mask) mask[i] = (unsigned char)in;
        c += (size_t)in;
    }
    return c;
}

size_t idf_ransac(idf_model_t *model, unsigned char *inl, const double *qp, const double *rp, const double *qsh,
                  const double *rsh, size_t n, patina_identify_model kind, double thr, int max_iter, uint64_t seed)
{
    size_t s = min_sample(kind), best = 0, it, need = (size_t)(max_iter > 0 ? max_iter : 0), t, u;
    idf_model_t bm, m;
    idf_rng_t g;
    size_t idx[4];
    double thr2 = thr * thr;
    if (n < s) {
        if (inl) memset(inl, 0, n);
        return 0;
    }
    idf_rng_seed(&g, seed);
    memset(&bm, 0, sizeof bm);
    for (it = 0; it < need; it++) {
        size_t c;
        /* s distinct indices */
        for (t = 0; t < s; t++) {
            for (;;) {
                idx[t] = (size_t)(idf_rng_next(&g) % n);
                for (u = 0; u < t && idx[u] != idx[t]; u++) {}
                if (u == t) break;
            }
        }
        if (!idf_fit_minimal(&m, kind, qp, rp, idx)) continue;
        c = count_inliers(&m, qp, rp, qsh, rsh, n, thr2, NULL);
        if (c > best) {
            double w = (double)c / (double)n, pw = pow(w, (double)s), est;
            best = c;
            bm = m;
            /* Standard adaptive stopping: enough samples that one all-inlier
             * sample was drawn with RANSAC_CONFIDENCE. */
            if (pw >= 1.0) est = 0;
            else est = ceil(log(1.0 - RANSAC_CONFIDENCE) / log(1.0 - pw));
            if (est < (double)need) need = (size_t)est;
        }
    }
    if (best == 0) {
        if (inl) memset(inl, 0, n);
        return 0;
    }
    /* Refit on the inliers (least squares); keep it when it loses none. */
    {
        unsigned char *mask = malloc(n);
        size_t *sel = malloc(n * sizeof *sel), k = 0;
        if (mask && sel) {
            count_inliers(&bm, qp, rp, qsh, rsh, n, thr2, mask);
            for (t = 0; t < n; t++)
                if (mask[t]) sel[k++] = t;
            if (fit(&m, kind, qp, rp, sel, k)) {
                size_t c = count_inliers(&m, qp, rp, qsh, rsh, n, thr2, NULL);
                if (c >= best) {
                    best = c;
                    bm = m;
                }
            }
        }
        free(mask);
        free(sel);
    }
    if (inl) count_inliers(&bm, qp, rp, qsh, rsh, n, thr2, inl);
    if (model) *model = bm;
    return best;
}

size_t idf_guided(idf_match_t *out, int32_t *claim, const idf_model_t *m, const double *qg, size_t nq,
                  const double *rg, size_t nr, const float *qf, const float *rf, const idf_nn_t *nn, double thr,
                  double ratio, int shapes)
{
    const double thr2 = thr * thr, lt = log(IDF_SHAPE_SCALE), at = IDF_SHAPE_ANGLE * IDF_PI / 180.0;
    double ls = 0, rot = 0;
    size_t i, j, n = 0, k = 0;
    if (shapes && m->kind != PATINA_MODEL_HOMOGRAPHY) local_shape(m, 0, 0, &ls, &rot);
    for (j = 0; j < nr; j++) claim[j] = -1;
    for (i = 0; i < nq; i++) {
        double x, y, w = m->h[6] * qg[4 * i] + m->h[7] * qg[4 * i + 1] + m->h[8];
        int32_t bj = -1;
        float bs = -1, so;
        if (!(w > 0) || !idf_model_apply(m, qg[4 * i], qg[4 * i + 1], &x, &y)) continue;
        if (shapes && m->kind == PATINA_MODEL_HOMOGRAPHY) local_shape(m, qg[4 * i], qg[4 * i + 1], &ls, &rot);
        for (j = 0; j < nr; j++) {
            const double dx = x - rg[4 * j], dy = y - rg[4 * j + 1];
            const float *a = qf + i * IDF_DIM, *b = rf + j * IDF_DIM;
            float s = 0;
            if (dx * dx + dy * dy > thr2) continue;
            if (shapes && (fabs(rg[4 * j + 2] - qg[4 * i + 2] - ls) > lt ||
                           angle_gap(rg[4 * j + 3] - qg[4 * i + 3] - rot) > at))
                continue;
            for (int c = 0; c < IDF_DIM; c++) s += a[c] * b[c]; /* the definition's sum, k order */
            if (s > bs) {
                bs = s;
                bj = (int32_t)j;
            }
        }
        if (bj < 0) continue;
        /* the nearest reference row other than bj, from the 2-NN pass */
        so = nn->best[i] == bj ? nn->s2[i] : nn->s1[i];
        if (!idf_ratio_pass(bs, so, ratio)) continue;
        out[n++] = (idf_match_t){(int32_t)i, bj, bs};
    }
    /* one-to-one: a reference row keeps its most similar query row (ties: the lower) */
    for (i = 0; i < n; i++) {
        const int32_t r = out[i].r;
        if (claim[r] < 0 || out[i].s > out[claim[r]].s) claim[r] = (int32_t)i;
    }
    for (i = 0; i < n; i++)
        if (claim[out[i].r] == (int32_t)i) out[k++] = out[i];
    return k;
}

patina_identify_decision idf_decide(double s1, double s2, size_t nh, const patina_identify_opts_t *o)
{
    if (nh == 0 || !(s1 >= o->threshold)) return PATINA_DECISION_UNKNOWN;
    /* a runner-up of another item with comparable evidence: both shown; far less: rank 1's */
    return s2 >= o->threshold && s2 >= o->ambiguity * s1 ? PATINA_DECISION_AMBIGUOUS : PATINA_DECISION_MATCH;
}

double idf_significance(size_t n, size_t k, patina_identify_model model, double w, double h, double r)
{
    const size_t s = min_sample(model);
    double lg = 0, alpha, a;
    size_t i;
    if (n < k) n = k;
    if (k <= s || !(w > 0) || !(h > 0)) return 0;
    alpha = IDF_PI * r * r / (w * h);
    if (!(alpha < 1)) return 0;
    /* log10 of (n - s) C(n, k) C(k, s): products of ratios, no overflow */
    lg = log10((double)(n - s));
    for (i = 0; i < k; i++) lg += log10((double)(n - i) / (double)(i + 1));
    for (i = 0; i < s; i++) lg += log10((double)(k - i) / (double)(i + 1));
    a = -(lg + (double)(k - s) * log10(alpha));
    return a > 0 ? a : 0;
}

patina_status idf_distinct(patina_identify_decision *d, double s1, double r2, const patina_identify_opts_t *o,
                           patina_status (*sib)(void *user, size_t *inliers), void *user)
{
    size_t inliers = 0;
    if (!(o->distinct > 0) || *d == PATINA_DECISION_UNKNOWN || s1 - r2 >= o->distinct) return PATINA_OK;
    if (r2 > 0 && s1 >= o->distinct) { /* a sibling runner-up counts 0 */
        PATINA_TRY(sib(user, &inliers));
        if ((double)inliers >= o->sibling_inliers) return PATINA_OK;
    }
    *d = PATINA_DECISION_UNKNOWN;
    return PATINA_OK;
}
