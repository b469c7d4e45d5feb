/* Parity of the `lbp` family with scikit-image's local_binary_pattern (the
 * peer, Debian python3-skimage 0.19.3): the same code maps, byte for byte,
 * for every method but var, and var within a stated tolerance, on random
 * images, images full of ties, degenerate shapes and crops of real
 * photographs, for P,R in (4,1) (8,1) (16,2) (24,3) (8,1.5) (12,2.7) (6,0.5)
 * (32,3) (1,1). Both the C reference and the fast CPU path are compared, and
 * so are the sample offsets themselves.
 *
 * Runs tests/peers/lbp_skimage.py with the first Python that imports
 * skimage ($PATINA_PYTHON, /usr/bin/python3, python3); exits 77 (skipped,
 * visibly) when there is none.
 *
 * Known, documented divergence (docs/lbp.md): at P = 32 scikit-image's int32
 * weights overflow, so its 'default' code is ours - 2^32 when bit 31 is set
 * (compared modulo 2^32 here) and its 'ror' minimum is taken over signed,
 * sign-extending rotations (not compared). */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "features/lbp.h"
#include "testutil.h"

#define SCRIPT PATINA_TEST_DATA "/../peers/lbp_skimage.py"

/* var: |ours - skimage| <= VAR_TOL * max(1, |skimage|). Both sides evaluate
 * the same binary64 expressions in the same order, so on x86-64 they agree
 * exactly; the tolerance allows a peer built with FMA contraction (e.g. an
 * arm64 build of scikit-image), which changes the last bits of the sums. */
#define VAR_TOL 1e-12

static const char *python;

typedef struct { int P; double R; const char *method; int m; } cfg_t;

static const cfg_t configs[] = {
    {4, 1, "default", LBP_M_DEFAULT},     {4, 1, "ror", LBP_M_ROR},
    {4, 1, "uniform", LBP_M_UNIFORM},     {4, 1, "nri_uniform", LBP_M_NRI},
    {4, 1, "var", LBP_M_VAR},
    {8, 1, "default", LBP_M_DEFAULT},     {8, 1, "ror", LBP_M_ROR},
    {8, 1, "uniform", LBP_M_UNIFORM},     {8, 1, "nri_uniform", LBP_M_NRI},
    {8, 1, "var", LBP_M_VAR},
    {16, 2, "default", LBP_M_DEFAULT},    {16, 2, "ror", LBP_M_ROR},
    {16, 2, "uniform", LBP_M_UNIFORM},    {16, 2, "nri_uniform", LBP_M_NRI},
    {16, 2, "var", LBP_M_VAR},
    {24, 3, "default", LBP_M_DEFAULT},    {24, 3, "ror", LBP_M_ROR},
    {24, 3, "uniform", LBP_M_UNIFORM},    {24, 3, "nri_uniform", LBP_M_NRI},
    {24, 3, "var", LBP_M_VAR},
    {8, 1.5, "default", LBP_M_DEFAULT},   {8, 1.5, "ror", LBP_M_ROR},
    {8, 1.5, "uniform", LBP_M_UNIFORM},   {8, 1.5, "nri_uniform", LBP_M_NRI},
    {8, 1.5, "var", LBP_M_VAR},
    {12, 2.7, "default", LBP_M_DEFAULT},  {12, 2.7, "ror", LBP_M_ROR},
    {12, 2.7, "uniform", LBP_M_UNIFORM},  {12, 2.7, "nri_uniform", LBP_M_NRI},
    {12, 2.7, "var", LBP_M_VAR},
    {6, 0.5, "default", LBP_M_DEFAULT},   {6, 0.5, "uniform", LBP_M_UNIFORM},
    {6, 0.5, "var", LBP_M_VAR},
    {32, 3, "default", LBP_M_DEFAULT},    {32, 3, "uniform", LBP_M_UNIFORM},
    {32, 3, "nri_uniform", LBP_M_NRI},    {32, 3, "var", LBP_M_VAR},
    {1, 1, "default", LBP_M_DEFAULT},     {1, 1, "nri_uniform", LBP_M_NRI},
};
#define NCFG (sizeof configs / sizeof configs[0])

typedef struct { uint8_t *g; int w, h; char name[128]; } gimg_t;

static int find_python(void)
{
    const char *cands[3] = {getenv("PATINA_PYTHON"), "/usr/bin/python3", "python3"};
    for (int i = 0; i < 3; i++) {
        char *out = NULL;
        if (!cands[i] || !*cands[i]) continue;
        if (tu_run(&out, "'%s' '%s' --version 2>/dev/null", cands[i], SCRIPT) == 0) {
            printf("peer: %s (%s)", out ? out : "", cands[i]);
            free(out);
            python = cands[i];
            return 1;
        }
        free(out);
    }
    return 0;
}

static void write_pgm(const char *path, const gimg_t *im)
{
    char hdr[64];
    int n = snprintf(hdr, sizeof hdr, "P5\n%d %d\n255\n", im->w, im->h);
    size_t px = (size_t)im->w * (size_t)im->h;
    unsigned char *buf = malloc((size_t)n + px + 1);
    memcpy(buf, hdr, (size_t)n);
    if (px) memcpy(buf + n, im->g, px);
    assert_int_equal(tu_write_file(path, buf, (size_t)n + px), 0);
    free(buf);
}

static void add_synthetic(gimg_t *imgs, int *n)
{
    static const int shapes[][3] = {
        /* w, h, kind (0..3 tu_random_image; 4 few levels; 5 constant; 6 0/255) */
        {41, 37, 0}, {33, 29, 4}, {64, 48, 1}, {50, 50, 2}, {20, 20, 5}, {23, 19, 6},
        {1, 1, 0}, {2, 2, 0}, {3, 3, 0}, {17, 1, 1}, {1, 17, 1}, {3, 3, 5},
    };
    tu_rng_t r;
    tu_rng_seed(&r, 2024);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        gimg_t *im = &imgs[(*n)++];
        patina_image_t img;
        int w = shapes[s][0], h = shapes[s][1], kind = shapes[s][2];
        im->w = w;
        im->h = h;
        im->g = malloc((size_t)w * (size_t)h);
        tu_random_image(&img, w, h, kind <= 3 ? kind : 0, &r);
        TU_OK(patina_image_to_grey(im->g, &img));
        patina_image_release(&img);
        for (int i = 0; i < w * h; i++) {
            if (kind == 4) im->g[i] = (uint8_t)(im->g[i] & 0xc0);
            if (kind == 5) im->g[i] = 128;
            if (kind == 6) im->g[i] = im->g[i] & 1 ? 255 : 0;
        }
        snprintf(im->name, sizeof im->name, "synthetic %dx%d kind %d", w, h, kind);
    }
}

/* Crops (160 x 120 from the centre) of up to 5 photographs of the samples
 * directory, in grey by the project's rule. */
static void add_photos(gimg_t *imgs, int *n)
{
    const char *dir = getenv("PATINA_SAMPLES");
    char **files;
    size_t nf, k, taken = 0;
    if (!dir || !*dir) dir = PATINA_SAMPLES_DIR;
    nf = tu_list_files(dir, "jpg,jpeg,png", &files);
    if (nf == 0) {
        printf("note: no photographs under %s (scripts/fetch-samples.sh): synthetic images only\n", dir);
        return;
    }
    for (k = 0; k < nf && taken < 5; k += nf / 5 + 1) {
        patina_image_t img;
        gimg_t *im;
        int cw = 160, ch = 120, x0, y0;
        uint8_t *full;
        if (patina_image_load(&img, files[k], NULL) != PATINA_OK) continue;
        if (img.width < cw || img.height < ch) {
            patina_image_release(&img);
            continue;
        }
        full = malloc((size_t)img.width * (size_t)img.height);
        TU_OK(patina_image_to_grey(full, &img));
        im = &imgs[(*n)++];
        im->w = cw;
        im->h = ch;
        im->g = malloc((size_t)cw * (size_t)ch);
        x0 = (img.width - cw) / 2;
        y0 = (img.height - ch) / 2;
        for (int y = 0; y < ch; y++)
            memcpy(im->g + (size_t)y * (size_t)cw, full + (size_t)(y0 + y) * (size_t)img.width + (size_t)x0,
                   (size_t)cw);
        snprintf(im->name, sizeof im->name, "%.100s", strrchr(files[k], '/') ? strrchr(files[k], '/') + 1 : files[k]);
        free(full);
        patina_image_release(&img);
        taken++;
    }
    tu_free_list(files, nf);
}

static double *read_f64(const char *path, size_t n)
{
    FILE *f = fopen(path, "rb");
    double *v = malloc((n ? n : 1) * sizeof *v);
    size_t got;
    if (!f) fail_msg("peer output %s is missing", path);
    got = fread(v, sizeof *v, n, f);
    fclose(f);
    if (got != n) fail_msg("peer output %s: %zu values, want %zu", path, got, n);
    return v;
}

static void test_sample_offsets(void **state)
{
    (void)state;
    for (size_t j = 0; j < NCFG; j++) {
        char *out = NULL;
        double rp[LBP_MAX_P], cp[LBP_MAX_P];
        const cfg_t *c = &configs[j];
        char *p;
        int k;
        if (j && configs[j - 1].P == c->P && configs[j - 1].R == c->R) continue;
        assert_int_equal(tu_run(&out, "'%s' '%s' --circle %d,%.17g", python, SCRIPT, c->P, c->R), 0);
        lbp_circle(rp, cp, c->P, c->R);
        p = out;
        for (k = 0; k < 2 * c->P; k++) {
            char *end;
            double v = strtod(p, &end);
            double mine = k < c->P ? rp[k] : cp[k - c->P];
            assert_true(end != p);
            if (v != mine) fail_msg("P=%d R=%g offset %d: skimage %.17g, ours %.17g", c->P, c->R, k, v, mine);
            p = end;
        }
        free(out);
    }
}

static void test_code_maps(void **state)
{
    gimg_t imgs[32];
    int n = 0, i;
    char *dir = tu_tempdir("lbpsk");
    char *args = NULL, path[512];
    size_t len = 0, j;
    size_t compared = 0, var_exact = 0, var_px = 0;
    double var_maxrel = 0.0;
    FILE *ms;
    (void)state;
    add_synthetic(imgs, &n);
    add_photos(imgs, &n);
    ms = open_memstream(&args, &len);
    for (j = 0; j < NCFG; j++) fprintf(ms, " --config %d,%.17g,%s", configs[j].P, configs[j].R, configs[j].method);
    for (i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/img%d.pgm", dir, i);
        write_pgm(path, &imgs[i]);
        fprintf(ms, " '%s'", path);
    }
    fclose(ms);
    {
        double t0 = patina_now();
        int rc = tu_run(NULL, "'%s' '%s' --out '%s'%s", python, SCRIPT, dir, args);
        if (rc != 0) fail_msg("peer script failed (%d)", rc);
        printf("peer: %d images x %zu configurations in %.1f s\n", n, NCFG, patina_now() - t0);
    }
    for (i = 0; i < n; i++)
        for (j = 0; j < NCFG; j++) {
            const cfg_t *cf = &configs[j];
            lbp_opts_t o;
            lbp_conf_t c;
            patina_codemap_t maps[2];
            size_t px = (size_t)imgs[i].w * (size_t)imgs[i].h, p;
            double *sk;
            int which;
            if (cf->P == 32 && cf->m == LBP_M_ROR) continue;
            memset(&o, 0, sizeof o);
            o.P = cf->P;
            o.R = cf->R;
            o.method = cf->m;
            o.mapping = (cf->m == LBP_M_DEFAULT || cf->m == LBP_M_ROR) && cf->P > 16 ? LBP_MAP_U2 : LBP_MAP_NONE;
            strcpy(o.grid, "1x1");
            o.vbins = 16;
            TU_OK(lbp_conf_resolve(&c, LBP_KIND_CIRCULAR, &o, "test"));
            snprintf(path, sizeof path, "%s/%d_%zu.f64", dir, i, j);
            sk = read_f64(path, px);
            TU_OK(lbp_ref_codes(&maps[0], &c, imgs[i].g, imgs[i].w, imgs[i].h, (size_t)imgs[i].w));
            TU_OK(lbp_fast_codes(&maps[1], &c, imgs[i].g, imgs[i].w, imgs[i].h, (size_t)imgs[i].w, NULL));
            for (which = 0; which < 2; which++) {
                assert_int_equal(maps[which].width, imgs[i].w);
                assert_int_equal(maps[which].height, imgs[i].h);
                for (p = 0; p < px; p++) {
                    double a = lbp_map_get(&maps[which], p), b = sk[p];
                    if (cf->m == LBP_M_VAR) {
                        int ok = (isnan(a) && isnan(b)) ||
                                 fabs(a - b) <= VAR_TOL * (fabs(b) > 1 ? fabs(b) : 1);
                        if (!ok)
                            fail_msg("%s: P=%d R=%g var at (%zu,%zu): %s %.17g, skimage %.17g",
                                     imgs[i].name, cf->P, cf->R, p % (size_t)imgs[i].w,
                                     p / (size_t)imgs[i].w, which ? "fast" : "reference", a, b);
                        if (which == 0) {
                            var_px++;
                            if (a == b || (isnan(a) && isnan(b))) var_exact++;
                            else if (fabs(a - b) / fabs(b) > var_maxrel) var_maxrel = fabs(a - b) / fabs(b);
                        }
                    } else {
                        /* skimage's values are integers in a double; at P=32
                         * its default code wraps around 2^32 */
                        uint32_t want = cf->P == 32 ? (uint32_t)(int64_t)b : (uint32_t)b;
                        if (!(b == floor(b)) || (uint32_t)a != want || a != (double)(uint32_t)a)
                            fail_msg("%s: P=%d R=%g %s at (%zu,%zu): %s %.17g, skimage %.17g",
                                     imgs[i].name, cf->P, cf->R, cf->method, p % (size_t)imgs[i].w,
                                     p / (size_t)imgs[i].w, which ? "fast" : "reference", a, b);
                    }
                }
                compared += px;
                patina_codemap_release(&maps[which]);
            }
            free(sk);
        }
    printf("parity: %zu code-map pixels compared (reference and fast path), all identical;"
           " var: %zu of %zu values bit-identical, largest relative difference %.3g (tolerance %g)\n",
           compared, var_exact, var_px, var_maxrel, VAR_TOL);
    for (i = 0; i < n; i++) free(imgs[i].g);
    free(args);
    tu_remove_tree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sample_offsets),
        cmocka_unit_test(test_code_maps),
    };
    if (!find_python()) {
        printf("SKIPPED: no Python with scikit-image (install python3-skimage, or set PATINA_PYTHON)\n");
        return 77;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
