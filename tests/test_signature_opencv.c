/* Parity of the signature family with OpenCV contrib's PCTSignatures and
 * PCTSignaturesSQFD (issue 18); tests/peers/signature_opencv.py runs
 * OpenCV. This program writes the inputs - patina's decoded pixels of real
 * photographs (PATINA_SAMPLES (env) or PATINA_SAMPLES_DIR, an even spread of
 * at most MAX_PHOTOS) and of random images of several sizes, as binary PPMs,
 * and patina's sampling plan (points and initial centroids) - runs the
 * script, and compares:
 *
 *   1. SQFD on OpenCV's signatures: patina's distance (the search engine's
 *      table) against computeQuadraticFormDistance on every ordered pair of
 *      different images (>= 1000 per setting), for the paper's gaussian
 *      alphas 3, 0.2, 0.01 and the heuristic and minus forms; and against a
 *      long double evaluation of the definition's concatenated form.
 *   2. Extraction: patina's signature of each image with the same sampling
 *      points and seeds (weights=max, OpenCV's normalisation) against
 *      OpenCV's, row by row. They differ through L*a*b* alone: OpenCV's
 *      float BGR2Lab interpolates a 33^3 fixed-point table (sRGB is not
 *      evaluated), patina evaluates the CIE formulas in double, and after
 *      the rounding to integer L*, a*, b* some samples differ by one unit,
 *      which k-means then spreads. So the test also clusters patina's
 *      samples with OpenCV's L*a*b* (as its sampler saw them) put in: that
 *      must give OpenCV's signature bit for bit on every image (sampling,
 *      contrast, entropy, k-means, merging, dropping, weights).
 *
 * Skipped (77) when no Python with cv2.xfeatures2d is found: PATINA_PYTHON
 * names one, else .venv-peers (tests/peers/setup-opencv.sh) or python3. */
#define _GNU_SOURCE
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "features/family.h"
#include "features/signature.h"
#include "testutil.h"

#define MAX_PHOTOS 48
#define K_CMP 768 /* OpenCV's maxClustersCount: no cropping on either side */

static void write_ppm(const char *path, const patina_image_t *img)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fprintf(f, "P6\n%d %d\n255\n", img->width, img->height);
    for (int y = 0; y < img->height; y++)
        assert_int_equal(fwrite(img->data + (size_t)y * img->stride, 3, (size_t)img->width, f), (size_t)img->width);
    assert_int_equal(fclose(f), 0);
}

/* The definition's concatenated form in long double: u = (w_q | -w_o),
 * S = sum_i sum_j u_i u_j f(r_i, r_j); *terms receives sum |u_i u_j f|
 * (the scale of the rounding error of any evaluation order). */
static long double ref_sqfd2(const float *q, int nq, const float *o, int no, double alpha, int form,
                             long double *terms)
{
    long double s = 0.0L, t = 0.0L;
    const int n = nq + no;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            const float *ri = i < nq ? q + 8 * i : o + 8 * (i - nq), *rj = j < nq ? q + 8 * j : o + 8 * (j - nq);
            const long double ui = i < nq ? ri[0] : -(long double)ri[0], uj = j < nq ? rj[0] : -(long double)rj[0];
            long double d2 = 0.0L, f;
            for (int k = 1; k < 8; k++) {
                const long double dd = (long double)ri[k] - (long double)rj[k];
                d2 += dd * dd;
            }
            f = form == 0 ? expl(-(long double)alpha * d2) : form == 1 ? 1.0L / ((long double)alpha + sqrtl(d2)) : -sqrtl(d2);
            s += ui * uj * f;
            t += fabsl(ui * uj * f);
        }
    *terms = t;
    return s;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct cvsigs {
    int n;
    int *rows;    /* (n) */
    float **sig;  /* (n) of (rows, 8) */
} cvsigs_t;

static void read_sigs(cvsigs_t *s, const char *path, int n)
{
    size_t size, off = 0;
    char *buf = tu_read_file(path, &size);
    s->n = n;
    s->rows = calloc((size_t)n, sizeof *s->rows);
    s->sig = calloc((size_t)n, sizeof *s->sig);
    for (int i = 0; i < n; i++) {
        int32_t r;
        assert_true(off + 4 <= size);
        memcpy(&r, buf + off, 4);
        off += 4;
        const size_t len = r >= 0 && r <= (1 << 20) ? (size_t)r * 32 : SIZE_MAX;
        if (len == SIZE_MAX || off + len > size) {
            fail_msg("%s: a signature of %d rows past the file's end", path, (int)r);
            free(buf);
            return;
        }
        s->rows[i] = r;
        s->sig[i] = malloc(len + 1);
        memcpy(s->sig[i], buf + off, len);
        off += len;
    }
    assert_int_equal(off, size);
    free(buf);
}

/* 1. SQFD on OpenCV's signatures, one setting. */
static void check_sqfd(const char *dir, const cvsigs_t *cv, const char *form, const char *alpha)
{
    char spec[128], path[4096];
    const int n = cv->n, fcode = !strcmp(form, "gaussian") ? 0 : !strcmp(form, "heuristic") ? 1 : 2;
    patina_extractor_t *ex;
    size_t bytes, size, pairs = 0, neg = 0, nan_cv = 0;
    float *m;
    unsigned char *a, *b;
    double max_abs = 0.0, max_rel = 0.0, max_err_ratio = 0.0, max_ref_rel = 0.0;
    snprintf(spec, sizeof spec, "signature:k=%d,alpha=%s,form=%s", K_CMP, alpha, form);
    TU_OK(patina_extractor_new(&ex, spec));
    bytes = patina_extractor_bytes(ex);
    a = malloc(bytes);
    b = malloc(bytes);
    snprintf(path, sizeof path, "%s/cv_sqfd_%s_%s.bin", dir, form, alpha);
    m = tu_read_file(path, &size);
    assert_int_equal(size, (size_t)n * (size_t)n * 4);
    for (int i = 0; i < n; i++) {
        if (cv->rows[i] == 0) continue;
        TU_OK(patina_signature_pack(ex, a, cv->sig[i], (size_t)cv->rows[i]));
        for (int j = 0; j < n; j++) {
            long double terms, s_ref;
            double ours, dcv, s_cv, tol_ref, tol_cv;
            size_t N;
            if (j == i || cv->rows[j] == 0) continue;
            TU_OK(patina_signature_pack(ex, b, cv->sig[j], (size_t)cv->rows[j]));
            ours = patina_extractor_distance(ex, a, b);
            s_ref = ref_sqfd2(cv->sig[i], cv->rows[i], cv->sig[j], cv->rows[j], (double)(float)atof(alpha), fcode,
                              &terms);
            dcv = (double)m[(size_t)i * (size_t)n + (size_t)j];
            N = (size_t)(cv->rows[i] + cv->rows[j]) * (size_t)(cv->rows[i] + cv->rows[j]);
            /* Rounding of a sum of N products in a working precision of unit
             * roundoff u is at most about (N + a few) u sum |terms| (the
             * classic bound of recursive summation; a few ulps per term for
             * the product, exp and sqrt). double: u = 2^-53; OpenCV works
             * in float: u = 2^-24. */
            tol_ref = (double)(N + 16) * DBL_EPSILON / 2 * (double)terms;
            tol_cv = (double)(N + 16) * FLT_EPSILON / 2 * (double)terms;
            if (s_ref < 0.0L) { /* no real distance: OpenCV NaN (or 0), ours 0 */
                if (!(ours == 0.0)) fail_msg("%s %d,%d: S = %Lg < 0 but distance %.17g", spec, i, j, s_ref, ours);
                if (-s_ref > tol_ref) neg++;
                continue;
            }
            /* ours against the long double definition, on S = d^2 */
            {
                double e = fabs(ours * ours - (double)s_ref);
                if (!(e <= tol_ref + 4 * DBL_EPSILON * (double)s_ref))
                    fail_msg("%s %d,%d: ours %.17g, definition %.17Lg (S error %g > %g)", spec, i, j, ours,
                             sqrtl(s_ref), e, tol_ref);
                if (s_ref > 0.0L && fabs(ours - (double)sqrtl(s_ref)) / (double)sqrtl(s_ref) > max_ref_rel)
                    max_ref_rel = fabs(ours - (double)sqrtl(s_ref)) / (double)sqrtl(s_ref);
            }
            if (isnan(dcv)) { /* OpenCV's float sum went negative: only within its rounding */
                if (!((double)s_ref <= tol_cv))
                    fail_msg("%s %d,%d: OpenCV NaN, definition S = %.17Lg (> its rounding %g)", spec, i, j, s_ref,
                             tol_cv);
                nan_cv++;
                continue;
            }
            s_cv = dcv * dcv;
            if (!(fabs(s_cv - (double)s_ref) <= tol_cv + 4 * FLT_EPSILON * s_cv))
                fail_msg("%s %d,%d (%d x %d centroids): OpenCV %.9g, ours %.17g (S differ by %g > %g)", spec, i, j,
                         cv->rows[i], cv->rows[j], dcv, ours, fabs(s_cv - (double)s_ref), tol_cv);
            if (fabs(s_cv - (double)s_ref) / (tol_cv + 4 * FLT_EPSILON * s_cv) > max_err_ratio)
                max_err_ratio = fabs(s_cv - (double)s_ref) / (tol_cv + 4 * FLT_EPSILON * s_cv);
            if (fabs(dcv - ours) > max_abs) max_abs = fabs(dcv - ours);
            if (ours > 0 && fabs(dcv - ours) / ours > max_rel) max_rel = fabs(dcv - ours) / ours;
            pairs++;
        }
    }
    print_message("sqfd %-9s alpha=%-5s %zu pairs vs OpenCV: max |d_cv - d| %.3g, max rel %.3g, worst error / "
                  "tolerance %.3f; vs long double max rel %.3g; %zu OpenCV NaN (S within rounding of 0), %zu S < 0\n",
                  form, alpha, pairs, max_abs, max_rel, max_err_ratio, max_ref_rel, nan_cv, neg);
    assert_true(pairs >= 1000 || !strcmp(form, "minus"));
    free(m);
    free(a);
    free(b);
    patina_extractor_free(ex);
}

static void test_parity(void **state)
{
    /* 37 synthetic images (> 1000 ordered pairs without any photograph) */
    static const int sizes[][2] = {{1, 1},   {2, 2},     {7, 5},    {1, 57},   {57, 1},  {64, 64}, {127, 93},
                                   {300, 200}, {96, 64}, {33, 77}, {160, 120}, {250, 90}, {80, 240}};
    const char *py = *state;
    const char *samples = getenv("PATINA_SAMPLES");
    char *dir = tu_tempdir("signature-opencv"), path[4096], **list = NULL, *out = NULL, spec[128];
    FILE *names;
    size_t nfiles, i;
    int nimg = 0, nphotos, rc;
    patina_extractor_t *ex;
    const sig_params_t *p;
    float *pts;
    int *seeds;
    patina_image_t *imgs = calloc(MAX_PHOTOS + 64, sizeof *imgs);
    tu_rng_t rng;
    cvsigs_t cv;

    snprintf(spec, sizeof spec, "signature:k=%d,weights=max", K_CMP);
    TU_OK(patina_extractor_new(&ex, spec));
    p = (const sig_params_t *)ex->params;
    pts = malloc((size_t)p->samples * 2 * sizeof *pts);
    seeds = malloc((size_t)p->seeds * sizeof *seeds);
    TU_OK(sig_plan(p, pts, seeds));
    {
        FILE *f = fopen(tu_path(dir, "plan.bin"), "wb");
        int32_t h[2] = {p->samples, p->seeds};
        assert_non_null(f);
        fwrite(h, 4, 2, f);
        fwrite(pts, 4, (size_t)p->samples * 2, f);
        fwrite(seeds, 4, (size_t)p->seeds, f);
        assert_int_equal(fclose(f), 0);
    }
    names = fopen(tu_path(dir, "images.txt"), "w");
    assert_non_null(names);
    if (!samples || !*samples) samples = PATINA_SAMPLES_DIR;
    nfiles = tu_list_files(samples, "jpg,jpeg,png", &list);
    for (i = 0; i < nfiles && nimg < MAX_PHOTOS; i++) {
        /* an even spread over the sorted list (every folder of samples) */
        size_t k = nfiles <= MAX_PHOTOS ? i : i * nfiles / MAX_PHOTOS;
        if (k >= nfiles) break;
        if (patina_image_load(&imgs[nimg], list[k], NULL) != PATINA_OK) continue;
        snprintf(path, sizeof path, "%s/img_%03d.ppm", dir, nimg);
        write_ppm(path, &imgs[nimg]);
        fprintf(names, "%s\n", path);
        nimg++;
    }
    nphotos = nimg;
    print_message("%d real photographs from %s%s\n", nimg, samples,
                  nimg ? "" : " (none: run scripts/fetch-samples.sh for the real-photo part)");
    tu_free_list(list, nfiles);
    tu_rng_seed(&rng, 18);
    for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (int kind = 0; kind < 4; kind += (sizes[i][0] * sizes[i][1] < 64 ? 4 : 1)) {
            tu_random_image(&imgs[nimg], sizes[i][0], sizes[i][1], kind, &rng);
            snprintf(path, sizeof path, "%s/img_%03d.ppm", dir, nimg);
            write_ppm(path, &imgs[nimg]);
            fprintf(names, "%s\n", path);
            nimg++;
        }
    assert_int_equal(fclose(names), 0);

    rc = tu_run(&out, "'%s' '%s/../peers/signature_opencv.py' --dir '%s' 2>&1", py, PATINA_TEST_DATA, dir);
    printf("%s", out ? out : "");
    free(out);
    assert_int_equal(rc, 0);
    read_sigs(&cv, tu_path(dir, "cv_sigs.bin"), nimg);

    /* 1. the distance on OpenCV's signatures */
    check_sqfd(dir, &cv, "gaussian", "3");
    check_sqfd(dir, &cv, "gaussian", "0.2");
    check_sqfd(dir, &cv, "gaussian", "0.01");
    check_sqfd(dir, &cv, "heuristic", "1");
    check_sqfd(dir, &cv, "minus", "1");

    /* 2. extraction with the same plan */
    {
        const size_t dim = patina_extractor_dim(ex);
        float *rec = malloc(dim * sizeof *rec);
        int same = 0, same_count = 0, rows_cmp = 0, rows_same = 0;
        double max_diff[8] = {0};
        for (int k = 0; k < nimg; k++) {
            int n, eq;
            TU_OK(sig_extract_with(p, pts, seeds, rec, &imgs[k]));
            n = (int)rec[0];
            eq = n == cv.rows[k] && !memcmp(rec + SIG_HEADER, cv.sig[k], (size_t)n * 32);
            same += eq;
            if (n == cv.rows[k]) {
                same_count++;
                for (int r = 0; r < n; r++) {
                    const float *x = rec + SIG_HEADER + 8 * r, *y = cv.sig[k] + 8 * r;
                    rows_cmp++;
                    rows_same += !memcmp(x, y, 32);
                    for (int c = 0; c < 8; c++)
                        if (fabs((double)x[c] - (double)y[c]) > max_diff[c]) max_diff[c] = fabs((double)x[c] - (double)y[c]);
                }
            }
            if (!eq)
                print_message("image %d (%dx%d): %d centroids, OpenCV %d%s\n", k, imgs[k].width, imgs[k].height, n,
                              cv.rows[k], n == cv.rows[k] ? " (values differ)" : "");
        }
        {   /* with OpenCV's L*a*b* put in: bit for bit */
            size_t size;
            float *lab = tu_read_file(tu_path(dir, "cv_lab.bin"), &size);
            float *samp = malloc((size_t)p->samples * SIG_COLS * sizeof *samp);
            int exact = 0, lab_diff = 0;
            assert_int_equal(size, (size_t)nimg * (size_t)p->samples * 3 * 4);
            for (int k = 0; k < nimg; k++) {
                TU_OK(sig_samples(p, pts, samp, &imgs[k]));
                for (int s = 0; s < p->samples; s++) {
                    const float *l = lab + ((size_t)k * (size_t)p->samples + (size_t)s) * 3;
                    float *f = samp + (size_t)s * SIG_COLS;
                    const float L = (float)(floor((double)l[0] + 0.5) / 100.0),
                                A = (float)(floor((double)l[1] + 0.5) / 127.0),
                                B = (float)(floor((double)l[2] + 0.5) / 127.0);
                    lab_diff += L != f[3] || A != f[4] || B != f[5];
                    f[3] = L;
                    f[4] = A;
                    f[5] = B;
                }
                TU_OK(sig_cluster(p, samp, seeds, rec));
                if ((int)rec[0] == cv.rows[k] && !memcmp(rec + SIG_HEADER, cv.sig[k], (size_t)cv.rows[k] * 32))
                    exact++;
                else
                    print_message("image %d (%dx%d) with OpenCV's L*a*b*: %d centroids, OpenCV %d%s\n", k,
                                  imgs[k].width, imgs[k].height, (int)rec[0], cv.rows[k],
                                  (int)rec[0] == cv.rows[k] ? " (values differ)" : "");
            }
            print_message("L*a*b*: %d of %d samples (%.2f%%) round to another integer L*, a* or b* in OpenCV; "
                          "with OpenCV's put in, %d of %d signatures are bit-identical to OpenCV's\n",
                          lab_diff, nimg * p->samples, 100.0 * lab_diff / (nimg * p->samples), exact, nimg);
            assert_int_equal(exact, nimg);
            free(samp);
            free(lab);
        }
        {   /* how far apart the two extractions are, in SQFD (gaussian, alpha 1) */
            patina_extractor_t *dx = NULL;
            const size_t db = sig_dim(K_CMP) * sizeof(float);
            float *ours = malloc((size_t)nimg * db), *theirs = malloc(db);
            double *self = malloc((size_t)nimg * sizeof *self), *other = malloc((size_t)nimg * (size_t)nimg * sizeof *other);
            size_t nother = 0;
            int nearest_self = 0, nearest_photo = 0;
            snprintf(spec, sizeof spec, "signature:k=%d,weights=max,alpha=1", K_CMP);
            TU_OK(patina_extractor_new(&dx, spec));
            for (int k = 0; k < nimg; k++)
                TU_OK(sig_extract_with(p, pts, seeds, (float *)((char *)ours + (size_t)k * db), &imgs[k]));
            for (int j = 0; j < nimg; j++) {
                TU_OK(patina_signature_pack(dx, theirs, cv.sig[j], (size_t)cv.rows[j]));
                for (int k = 0; k < nimg; k++) {
                    const double d = patina_extractor_distance(dx, (char *)ours + (size_t)k * db, theirs);
                    if (k == j) self[k] = d;
                    else other[nother++] = d;
                }
            }
            for (int k = 0; k < nimg; k++) {
                int best = 1;
                for (int j = 0; j < nimg; j++) {
                    double d;
                    if (j == k) continue;
                    TU_OK(patina_signature_pack(dx, theirs, cv.sig[j], (size_t)cv.rows[j]));
                    d = patina_extractor_distance(dx, (char *)ours + (size_t)k * db, theirs);
                    if (d <= self[k]) best = 0;
                }
                nearest_self += best;
                if (k < nphotos) nearest_photo += best;
            }
            qsort(self, (size_t)nimg, sizeof *self, cmp_double);
            qsort(other, nother, sizeof *other, cmp_double);
            print_message("SQFD (gaussian, alpha 1) of patina's signature to OpenCV's of the same image: median "
                          "%.4g, max %.4g; between different images: median %.4g, min %.4g; OpenCV's signature of "
                          "the same image is the nearest for %d of %d images (%d of %d photographs)\n",
                          self[nimg / 2], self[nimg - 1], other[nother / 2], other[0], nearest_self, nimg,
                          nearest_photo, nphotos);
            /* The L*a*b* difference is small next to the photographs' own
             * (the random images of one kind at several sizes look alike,
             * so they are only reported). */
            assert_true(nearest_photo * 10 >= nphotos * 9);
            free(ours);
            free(theirs);
            free(self);
            free(other);
            patina_extractor_free(dx);
        }
        print_message("extraction: %d of %d images bit-identical to OpenCV's; %d with the same count, whose "
                      "%d of %d rows are identical; max |diff| per column (w x y L a b contrast entropy): "
                      "%.3g %.3g %.3g %.3g %.3g %.3g %.3g %.3g\n",
                      same, nimg, same_count, rows_same, rows_cmp, max_diff[0], max_diff[1], max_diff[2],
                      max_diff[3], max_diff[4], max_diff[5], max_diff[6], max_diff[7]);
        free(rec);
    }
    for (int k = 0; k < nimg; k++) {
        patina_image_release(&imgs[k]);
        free(cv.sig[k]);
    }
    free(cv.sig);
    free(cv.rows);
    free(imgs);
    free(pts);
    free(seeds);
    patina_extractor_free(ex);
    tu_remove_tree(dir);
    free(dir);
}

int main(void)
{
    char venv[4096];
    const char *py;
    snprintf(venv, sizeof venv, "%s/../../.venv-peers/bin/python", PATINA_TEST_DATA);
    py = tu_find_python("import numpy, cv2; cv2.xfeatures2d.PCTSignaturesSQFD_create", venv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_parity, (void *)py),
    };
    if (!py) {
        printf("SKIPPED: no Python with OpenCV contrib (cv2.xfeatures2d): run tests/peers/setup-opencv.sh "
               "(a venv in .venv-peers from PyPI), or set PATINA_PYTHON\n");
        return 77;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
