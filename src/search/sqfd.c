/* The SQFD definition of the distance table (search/distance.h) on
 * signature records (features/signature.h): plain double loops in row
 * order, the ground truth that later fast paths and GPU kernels reproduce.
 *
 *   SQFD(q, o)^2 = (w_q | -w_o) A (w_q | -w_o)^T = Sqq + Soo - 2 Sqo,
 *   Sxy = sum_i sum_j wx_i wy_j f(x_i, y_j)   (i over x's rows, then j)
 * with f(r, s) = exp(-alpha d^2), 1 / (alpha + d) or -d, d = ||r - s||_2 of
 * the 7 features (each difference of the stored floats taken in double).
 * The two Sqo blocks of the concatenated form are equal (f is symmetric),
 * so the cross term is summed once and doubled. */
#include <math.h>

#include "core/internal.h"
#include "features/signature.h"

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

double sig_sqfd_rows(const float *q, size_t nq, const float *o, size_t no, double alpha, int form)
{
    const double s = block(q, nq, q, nq, alpha, form) + block(o, no, o, no, alpha, form) -
                     2.0 * block(q, nq, o, no, alpha, form);
    return s > 0.0 ? sqrt(s) : 0.0;
}

double sig_sqfd(const float *q, const float *o, size_t n)
{
    /* A malformed record has no distance: NaN, which the search engine
     * orders after every number (queries and added rows are checked with
     * a message before they get here). */
    if (!sig_record_valid(q, n) || !sig_record_valid(o, n) || q[2] != o[2] || q[3] != o[3]) return NAN;
    return sig_sqfd_rows(q + SIG_HEADER, (size_t)q[0], o + SIG_HEADER, (size_t)o[0], (double)q[2], (int)q[3]);
}
