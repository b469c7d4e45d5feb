/* lab_sqfd: the paper's block-wise SQFD kernel (blockwise.h) beside the
 * library's production kernel (src/gpu/sqfd.cu).
 *
 *   lab_sqfd --validate   the CTest test lab_sqfd_validate (labels gpu;lab;
 *                         77 without a GPU): the block-wise kernel in double
 *                         and in float against the C reference (sig_sqfd) on
 *                         every form and alpha 3, 0.2, 0.01, within the
 *                         rounding bounds of its sums; the library's entry
 *                         point (patina_gpu_sqfd_pairs) within its own
 *                         proven bound of the reference, so lab and library
 *                         cannot drift.
 *   lab_sqfd [--n N] [--centroids C] [--block B] [--alpha A]
 *                         times one query against N signatures (default
 *                         100000, 40 centroids, blocks of 8000): block-wise
 *                         float and double, and the production scan for 1,
 *                         4, 64 and 1024 queries; SQFDs per second. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blockwise.h"
#include "features/signature.h"
#include "gpu/gpu.h"
#include "patina/patina.h"

static uint64_t rs = 0x2545f4914f6cdd1dull;
static double uni(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (double)(rs >> 11) / 9007199254740992.0;
}

static void die(const char *what)
{
    fprintf(stderr, "lab_sqfd: %s: %s\n", what, patina_last_error());
    exit(2);
}

/* n records of ex: counts about C (C - C/10 .. C), weights summing to ~1,
 * features in [0, 1). */
static float *make(const patina_extractor_t *ex, size_t n, size_t C)
{
    const size_t dim = patina_extractor_dim(ex);
    float *recs = malloc(n * dim * sizeof *recs), *rows = malloc(C * 8 * sizeof *rows);
    if (!recs || !rows) die("out of memory");
    for (size_t i = 0; i < n; i++) {
        const size_t c = C - (size_t)(uni() * (double)(C / 10 + 1)) % (C / 10 + 1);
        for (size_t j = 0; j < c; j++) {
            rows[8 * j] = (float)((0.2 + uni()) / (0.7 * (double)c));
            for (int k = 1; k < 8; k++) rows[8 * j + k] = (float)uni();
        }
        if (patina_signature_pack(ex, recs + i * dim, rows, c ? c : 1) != PATINA_OK) die("pack");
    }
    free(rows);
    return recs;
}

static int validate(void)
{
    static const char *const specs[] = {"signature:k=40,alpha=3", "signature:k=40,alpha=0.2",
                                        "signature:k=40,alpha=0.01", "signature:k=40,form=heuristic,alpha=1",
                                        "signature:k=40,form=minus"};
    const size_t n = 3000, nq = 4;
    int bad = 0;
    patina_gpu_t *g = NULL;
    if (patina_gpu_count() == 0) {
        printf("SKIPPED: no usable CUDA GPU\n");
        return 77;
    }
    if (patina_gpu_open(&g, 0, 0) != PATINA_OK) die("gpu");
    for (size_t si = 0; si < sizeof specs / sizeof *specs; si++) {
        patina_extractor_t *ex;
        float *recs, *qs;
        double *d = malloc(n * sizeof *d), *self = malloc(n * sizeof *self), *sqq = malloc(nq * sizeof *sqq);
        double *ps = malloc(nq * n * sizeof *ps), *pe = malloc(nq * n * sizeof *pe), worst[3] = {0, 0, 0};
        size_t dim, nbad = 0;
        pgpu_sqfd_index_t v;
        lab_bw_t *l;
        char err[256];
        if (patina_extractor_new(&ex, specs[si]) != PATINA_OK) die("extractor");
        dim = patina_extractor_dim(ex);
        recs = make(ex, n, 40);
        qs = make(ex, nq, 40);
        for (size_t i = 0; i < n; i++) self[i] = sig_self(recs + i * dim);
        for (size_t q = 0; q < nq; q++) sqq[q] = sig_self(qs + q * dim);
        if (!(l = lab_bw_new(recs, n, dim, 1000, err, sizeof err))) {
            fprintf(stderr, "lab_sqfd: %s\n", err);
            return 1;
        }
        memset(&v, 0, sizeof v);
        v.serial = 0x1ab0000ull + si;
        v.n = n;
        v.dim = dim;
        v.recs = recs;
        v.self = self;
        if (patina_gpu_sqfd_pairs(g, &v, qs, sqq, nq, ps, pe) != PATINA_OK) die("the library's pairs");
        for (size_t q = 0; q < nq; q++) {
            const float *qr = qs + q * dim;
            for (int dbl = 1; dbl >= 0; dbl--) {
                if (lab_bw_run(l, qr, dbl, d) != 0) return 1;
                for (size_t r = 0; r < n; r++) {
                    const double cross = sig_cross(qr, recs + r * dim), ref = sqq[q] + self[r] - 2.0 * cross;
                    const double mag = fabs(sqq[q]) + fabs(self[r]) + 2.0 * fabs(cross);
                    const size_t L = (size_t)qr[0] + (size_t)recs[r * dim];
                    /* sums of L^2 products: recursive summation's (N + 16) u mag,
                     * u = 2^-53 (double) or 2^-24 (float; twice for expf's ulps) */
                    const double tol = (double)(L * L + 16) * (dbl ? 0x1p-53 : 0x1p-23) * mag;
                    const double got = d[r] * d[r], want = ref > 0.0 ? ref : 0.0, x = fabs(got - want);
                    if (!(x <= tol + 1e-300)) {
                        if (nbad++ < 5)
                            printf("  %s %s query %zu row %zu: %.17g, reference %.17g (tolerance %.3g)\n", specs[si],
                                   dbl ? "double" : "float", q, r, got, want, tol);
                    } else if (tol > 0 && x / tol > worst[dbl]) {
                        worst[dbl] = x / tol;
                    }
                }
            }
            for (size_t r = 0; r < n; r++) { /* the library's estimate within its bound */
                const double ref = sqq[q] + self[r] - 2.0 * sig_cross(qr, recs + r * dim), x = fabs(ps[q * n + r] - ref);
                if (!(x <= pe[q * n + r])) {
                    if (nbad++ < 5)
                        printf("  %s library query %zu row %zu: %.17g, reference %.17g, bound %.3g\n", specs[si], q, r,
                               ps[q * n + r], ref, pe[q * n + r]);
                } else if (pe[q * n + r] > 0 && x / pe[q * n + r] > worst[2]) {
                    worst[2] = x / pe[q * n + r];
                }
            }
        }
        printf("%-40s block-wise double %.3g, float %.3g of tolerance; library %.3g of its bound%s\n", specs[si],
               worst[1], worst[0], worst[2], nbad ? "  FAILED" : "");
        bad |= nbad != 0;
        lab_bw_free(l);
        free(recs);
        free(qs);
        free(d);
        free(self);
        free(sqq);
        free(ps);
        free(pe);
        patina_extractor_free(ex);
    }
    patina_gpu_close(g);
    printf(bad ? "FAILED\n" : "PASSED\n");
    return bad;
}

int main(int argc, char **argv)
{
    size_t n = 100000, C = 40, block = 8000;
    double alpha = 0.2;
    char spec[128], err[256];
    patina_extractor_t *ex;
    patina_gpu_t *g = NULL;
    float *recs, *qs;
    double *self, *sqq, ms;
    size_t dim;
    pgpu_sqfd_index_t v;
    lab_bw_t *l;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--validate")) return validate();
        if (i + 1 >= argc) {
            fprintf(stderr, "lab_sqfd: %s needs a value\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--n")) n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--centroids")) C = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--block")) block = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--alpha")) alpha = atof(argv[++i]);
        else {
            fprintf(stderr, "lab_sqfd: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (patina_gpu_count() == 0) {
        printf("SKIPPED: no usable CUDA GPU\n");
        return 77;
    }
    snprintf(spec, sizeof spec, "signature:k=%zu,alpha=%g", C, alpha);
    if (patina_extractor_new(&ex, spec) != PATINA_OK) die("extractor");
    dim = patina_extractor_dim(ex);
    recs = make(ex, n, C);
    qs = make(ex, 1024, C);
    self = malloc(n * sizeof *self);
    sqq = malloc(1024 * sizeof *sqq);
    for (size_t i = 0; i < n; i++) self[i] = sig_self(recs + i * dim);
    for (size_t q = 0; q < 1024; q++) sqq[q] = sig_self(qs + q * dim);
    if (patina_gpu_open(&g, 0, 0) != PATINA_OK) die("gpu");
    printf("# lab_sqfd: %zu signatures of %zu centroids (%s), one query unless said\n\n", n, C, spec);
    printf("| kernel | queries | ms | SQFD/s |\n|---|---|---|---|\n");
    if (!(l = lab_bw_new(recs, n, dim, block, err, sizeof err))) {
        fprintf(stderr, "lab_sqfd: %s\n", err);
        return 1;
    }
    for (int dbl = 0; dbl < 2; dbl++) {
        ms = lab_bw_time(l, qs, dbl, 5);
        printf("| block-wise (paper), %s, blocks of %zu | 1 | %.3f | %.3g |\n", dbl ? "double" : "float", block, ms,
               (double)n / (ms * 1e-3));
    }
    lab_bw_free(l);
    memset(&v, 0, sizeof v);
    v.serial = 0x1ab1000ull;
    v.n = n;
    v.dim = dim;
    v.recs = recs;
    v.self = self;
    for (int rt = 1; rt <= 2; rt++) { /* the production kernel's variants: rows per thread */
        static const size_t nqs[] = {1, 4, 64, 1024};
        for (size_t i = 0; i < 4; i++) {
            if (patina_gpu__sqfd_scan_ms(g, &v, qs, sqq, nqs[i], rt, 5, &ms) != PATINA_OK) die("scan");
            printf("| scan kernel (self terms, fp32 + bound), %d row%s per thread | %zu | %.3f | %.3g |\n", rt,
                   rt > 1 ? "s" : "", nqs[i], ms, (double)n * (double)nqs[i] / (ms * 1e-3));
        }
    }
    patina_gpu_close(g);
    free(recs);
    free(qs);
    free(self);
    free(sqq);
    patina_extractor_free(ex);
    return 0;
}
