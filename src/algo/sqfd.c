/* The signature record's check and the SQFD definition (algo/sqfd.h): plain
 * double loops in row order, the ground truth that later fast paths and GPU
 * kernels reproduce. Not here: the record's extraction (features/), the
 * search over rows (search/).
 *
 *   SQFD(q, o)^2 = (w_q | -w_o) A (w_q | -w_o)^T = Sqq + Soo - 2 Sqo,
 *   Sxy = sum_i sum_j wx_i wy_j f(x_i, y_j)   (i over x's rows, then j)
 * with f(r, s) = exp(-alpha d^2), 1 / (alpha + d) or -d, d = ||r - s||_2 of
 * the 7 features (each difference of the stored floats taken in double).
 * The two Sqo blocks of the concatenated form are equal (f is symmetric),
 * so the cross term is summed once and doubled.
 *
 * Self terms. Sqq and Soo depend on one signature each: the search keeps
 * each row's Soo (sig_self, computed once when the row is added) and
 * computes a query's Sqq once per call, so a distance costs only the cross
 * block. sig_sqfd_self evaluates the same expression, (Sqq + Soo) - 2 Sqo,
 * with the same three doubles (each block is the same loop in the same
 * order), so it returns sig_sqfd's double bit for bit. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "algo/problem.h"
#include "algo/sqfd.h"

int sig_record_problem(const float *rec, size_t n, char *msg, size_t cap)
{
    float cnt, K;
    size_t i;
    if (!rec || n < sig_dim(1))
        return algo_problem(msg, cap, "signature record of %zu elements (at least %zu)", n, sig_dim(1));
    cnt = rec[0];
    K = rec[1];
    if (!(K >= 1.0f && K <= (float)SIG_K_MAX && K == floorf(K)) || sig_dim((size_t)K) != n)
        return algo_problem(msg, cap, "signature record says K = %g in %zu elements", (double)K, n);
    if (rec[4] != (float)SIG_VERSION)
        return algo_problem(msg, cap, "signature record version %g (this library reads %d)", (double)rec[4],
                       SIG_VERSION);
    if (cnt == 0.0f) return algo_problem(msg, cap, "empty signature (no centroids)");
    if (!(cnt >= 1.0f && cnt <= K && cnt == floorf(cnt)))
        return algo_problem(msg, cap, "signature count %g is not in [1, K = %g]", (double)cnt, (double)K);
    if (!(rec[2] > 0.0f) || !isfinite(rec[2]))
        return algo_problem(msg, cap, "signature alpha %g is not > 0", (double)rec[2]);
    if (!(rec[3] == 0.0f || rec[3] == 1.0f || rec[3] == 2.0f))
        return algo_problem(msg, cap, "signature form %g is not 0, 1 or 2", (double)rec[3]);
    for (i = 0; i < (size_t)cnt; i++) {
        const float *r = rec + SIG_HEADER + SIG_COLS * i;
        if (!(r[0] >= 0.0f) || !isfinite(r[0]))
            return algo_problem(msg, cap, "centroid %zu has weight %g (want a finite number >= 0)", i, (double)r[0]);
        for (int d = 1; d < SIG_COLS; d++)
            if (!isfinite(r[d])) return algo_problem(msg, cap, "centroid %zu has a non-finite feature %d", i, d - 1);
    }
    return 0;
}

int sig_record_valid(const float *rec, size_t n) { return !sig_record_problem(rec, n, NULL, 0); }

static double sim(const float *r, const float *s, double alpha, int form)
{
    double d2 = 0.0;
    for (int k = 1; k < SIG_COLS; k++) {
        const double t = (double)r[k] - (double)s[k];
        d2 += t * t;
    }
    switch (form) {
    case SIG_FORM_GAUSSIAN: return exp(-alpha * d2);
    case SIG_FORM_HEURISTIC: return 1.0 / (alpha + sqrt(d2));
    case SIG_FORM_MINUS: return -sqrt(d2);
    }
    return NAN;
}

static double block(const float *x, size_t nx, const float *y, size_t ny, double alpha, int form)
{
    double s = 0.0;
    for (size_t i = 0; i < nx; i++) {
        const float *r = x + SIG_COLS * i;
        for (size_t j = 0; j < ny; j++) {
            const float *t = y + SIG_COLS * j;
            s += (double)r[0] * (double)t[0] * sim(r, t, alpha, form);
        }
    }
    return s;
}

/* (Sqq + Soo) - 2 Sqo, clamped: the last step of the definition. */
static double finish(double sqq, double soo, double sqo)
{
    const double s = sqq + soo - 2.0 * sqo;
    return s > 0.0 ? sqrt(s) : 0.0;
}

double sig_sqfd_rows(const float *q, size_t nq, const float *o, size_t no, double alpha, int form)
{
    return finish(block(q, nq, q, nq, alpha, form), block(o, no, o, no, alpha, form), block(q, nq, o, no, alpha, form));
}

double sig_self_rows(const float *x, size_t nx, double alpha, int form) { return block(x, nx, x, nx, alpha, form); }

double sig_self(const float *rec)
{
    return sig_self_rows(rec + SIG_HEADER, (size_t)rec[0], (double)rec[2], (int)rec[3]);
}

double sig_cross(const float *q, const float *o)
{
    return block(q + SIG_HEADER, (size_t)q[0], o + SIG_HEADER, (size_t)o[0], (double)q[2], (int)q[3]);
}

double sig_sqfd_self(const float *q, double sqq, const float *o, double soo)
{
    if (q[2] != o[2] || q[3] != o[3]) return NAN;
    return finish(sqq, soo, sig_cross(q, o));
}

double sig_sqfd(const float *q, const float *o, size_t n)
{
    /* A malformed record has no distance: NaN, which the search engine
     * orders after every number (queries and added rows are checked with
     * a message before they get here). */
    if (!sig_record_valid(q, n) || !sig_record_valid(o, n) || q[2] != o[2] || q[3] != o[3]) return NAN;
    return sig_sqfd_rows(q + SIG_HEADER, (size_t)q[0], o + SIG_HEADER, (size_t)o[0], (double)q[2], (int)q[3]);
}
