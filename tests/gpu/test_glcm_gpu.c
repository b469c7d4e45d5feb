/* GLCM on the GPU, the production path, against the C reference: counts
 * identical on random and real images for levels 2..256 and 1..32 offsets
 * (random ones, negative, larger than the image), symmetric or not,
 * pageable and pinned inputs, batches of 1..64 images, slots so small that
 * tiles split pairs at their borders, tiny tasks (many flushes), masks; every
 * counting kernel the production policy picks (the policy is steered with
 * the knob policy_px, which sets the work per SM it assumes, so that small
 * images reach the kernels of large launches; test_policy_kernels checks
 * which instance ran); batches cut into chunks by a small memory budget;
 * properties and Haralick features of whole batches; the glcm and haralick
 * families on the GPU device, with masks and per-image failures; the GLCM
 * state's memory returned when the context releases it. Variants the policy
 * never picks are validated by the lab (lab/glcm, test lab_glcm). Label gpu:
 * skipped without one. PATINA_TEST_QUICK=1 trims the largest loops (for
 * compute-sanitizer's memcheck and synccheck), PATINA_TEST_QUICK=2 keeps a
 * tiny set that still runs every production kernel (for racecheck). */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "features/glcm_ref.h"
#include "gpu/context.h"
#include "gpu/glcm.h"
#include "gpu/gpu.h"
#include "patina/glcm.h"
#include "testutil.h"

static patina_gpu_t *gpu;
static int quick; /* PATINA_TEST_QUICK: 0, 1 (smaller), 2 (tiny) */

/* The work per SM the policy is told to assume: 0 (each launch's own: small
 * images get k_count2 / k_count3), 32 K (k_count4, two groups per lane),
 * 256 K (k_count5 for L <= 8, partners by 4-byte loads; k_count4 U = 2
 * above), 2 M (k_count5 with 8-byte loads; k_count4 U = 4 for L = 16, 32). */
static const size_t policies[] = {0, (size_t)32 << 10, (size_t)256 << 10, (size_t)2 << 20};
#define NPOLICIES (sizeof policies / sizeof policies[0])

typedef struct img {
    uint8_t *q;
    int w, h;
    size_t stride;
    int pinned;
} img_t;

static void img_random(img_t *im, int w, int h, int L, int kind, int pinned, tu_rng_t *r)
{
    im->w = w;
    im->h = h;
    im->stride = (size_t)w + (size_t)tu_rng_below(r, 5);
    im->pinned = pinned;
    {
        size_t bytes = im->stride * (size_t)(h > 0 ? h : 1) + 1;
        im->q = pinned ? patina_gpu_host_alloc(bytes) : malloc(bytes);
        assert_non_null(im->q);
    }
    for (int y = 0; y < h; y++)
        for (int x = 0; x < (int)im->stride; x++) {
            int v;
            switch (kind) {
            case 0: v = (int)tu_rng_below(r, (uint32_t)L); break;                  /* drastic */
            case 1: v = ((x / 37 + y / 23) % L); break;                             /* long runs */
            default: v = (int)(((size_t)(x + y) * (size_t)L) / (size_t)(w + h + 1)); /* smooth */
            }
            im->q[(size_t)y * im->stride + (size_t)x] = (uint8_t)(x < w ? v : 255); /* junk past w */
        }
}

static void img_free(img_t *im)
{
    if (im->pinned)
        patina_gpu_host_free(im->q);
    else
        free(im->q);
    im->q = NULL;
}

static patina_gpu_grey_t grey_of(const img_t *im)
{
    patina_gpu_grey_t g;
    memset(&g, 0, sizeof g);
    g.q = im->q;
    g.w = im->w;
    g.h = im->h;
    g.stride = im->stride;
    return g;
}

/* n offsets in [-4, 4]^2 (the first two the usual (0, 1), (-1, -1)); from 3
 * on one taller than the image, from 5 one wider leftwards, from 8 one wider
 * rightwards. */
static void random_offsets(patina_glcm_offset_t *off, int n, int w, int h, tu_rng_t *r)
{
    for (int o = 0; o < n; o++) {
        off[o].dy = (int)tu_rng_below(r, 9) - 4;
        off[o].dx = (int)tu_rng_below(r, 9) - 4;
    }
    if (n >= 2) {
        off[0].dy = 0;
        off[0].dx = 1;
        off[1].dy = -1;
        off[1].dx = -1;
    }
    if (n >= 3) off[n - 1].dy = h;
    if (n >= 5) off[n - 2].dx = -w - 1;
    if (n >= 8) off[n - 3].dx = w + 3;
}

static void compare_counts(const uint32_t *got, const uint32_t *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("%s: first difference at element %zu: gpu %u, reference %u", what, i, got[i],
                     want[i]);
}

static pgpu_glcm_knobs_t knobs(size_t slot_bytes, size_t task_pixels, size_t policy_px)
{
    pgpu_glcm_knobs_t k;
    memset(&k, 0, sizeof k);
    k.slot_bytes = slot_bytes;
    k.task_pixels = task_pixels;
    k.policy_px = policy_px;
    return k;
}

/* One image's counts (G offsets, not symmetric) under each policy, with
 * default slots and with tiny ones (11 rows, tasks of 64 pixels: pairs split
 * across tiles, frequent flushes), against the reference want (per
 * elements); got: scratch of per elements; what names the case. */
static void counts_each_policy(const patina_gpu_grey_t *gi, int L, const patina_glcm_offset_t *off, int G,
                               const uint32_t *want, uint32_t *got, size_t per, const char *what)
{
    for (size_t pi = 0; pi < NPOLICIES; pi++)
        for (int small = 0; small < 2; small++) {
            const pgpu_glcm_knobs_t k = knobs(small ? (size_t)(gi->w + 48) * 11 : 0, small ? 64 : 0, policies[pi]);
            char msg[256];
            memset(got, 0xab, per * 4);
            TU_OK(pgpu_glcm_counts(gpu, &k, got, gi, 1, L, off, (size_t)G, 0));
            snprintf(msg, sizeof msg, "%s policy %zu small slots %d", what, policies[pi], small);
            compare_counts(got, want, per, msg);
        }
}

/* Random images, every level class (two copies per lane up to global votes),
 * default, small and tiny slots. */
static void test_counts_random(void **state)
{
    static const int sizes[][2] = {{1, 1}, {3, 2}, {17, 5}, {64, 64}, {129, 67}, {300, 211}, {1031, 523}};
    static const int levels[] = {2, 8, 32, 100, 181, 256};
    static const size_t caps[][2] = {{0, 0}, {4096, 64}, {100000, 1000}};
    tu_rng_t rng;
    (void)state;
    tu_rng_seed(&rng, 90);
    for (size_t ci = 0; ci < sizeof caps / sizeof caps[0]; ci++) {
        const pgpu_glcm_knobs_t k = knobs(caps[ci][0], caps[ci][1], 0);
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (size_t li = 0; li < sizeof levels / sizeof levels[0]; li++) {
                const int w = sizes[si][0], h = sizes[si][1], L = levels[li];
                const int noff = 1 + (int)((si + li) % 10);
                patina_glcm_offset_t off[10];
                img_t im;
                patina_gpu_grey_t gi;
                size_t n = (size_t)noff * (size_t)L * (size_t)L;
                uint32_t *a, *b;
                char what[160];
                if ((ci > 0 || quick) && w * h > 70000 && L > 100) continue; /* keep the run short */
                if (quick > 1 && (ci > 1 || si > 3 || L > 32)) continue;
                a = malloc(n * 4);
                b = malloc(n * 4);
                img_random(&im, w, h, L, (int)(si + li) % 3, (int)(si + ci) % 2, &rng);
                for (int o = 0; o < noff; o++) {
                    off[o].dy = (int)tu_rng_below(&rng, 11) - 5;
                    off[o].dx = (int)tu_rng_below(&rng, 11) - 5;
                }
                if (noff > 2) {
                    off[noff - 1].dy = h;      /* taller than the image: nothing */
                    off[noff - 2].dx = -w - 1; /* wider, leftwards */
                }
                gi = grey_of(&im);
                for (int sym = 0; sym < 2; sym++) {
                    TU_OK(patina_glcm_counts_ref(a, im.q, w, h, im.stride, NULL, 0, L, off, (size_t)noff, sym));
                    memset(b, 0xab, n * 4);
                    TU_OK(pgpu_glcm_counts(gpu, &k, b, &gi, 1, L, off, (size_t)noff, sym));
                    snprintf(what, sizeof what, "%dx%d L=%d noff=%d sym=%d pinned=%d slot=%zu", w, h, L,
                             noff, sym, im.pinned, caps[ci][0]);
                    compare_counts(b, a, n, what);
                }
                img_free(&im);
                free(a);
                free(b);
            }
    }
}

/* Batches of images of different sizes (pinned and pageable mixed) in one
 * call: default and small slots, under each policy. */
static void test_batches(void **state)
{
    static const size_t batch[] = {1, 2, 7, 64};
    tu_rng_t rng;
    (void)state;
    tu_rng_seed(&rng, 91);
    for (size_t pi = 0; pi < NPOLICIES; pi++)
        for (int small = 0; small < 2; small++) {
            const pgpu_glcm_knobs_t k = knobs(small ? 6000 : 0, small ? 300 : 0, policies[pi]);
            for (size_t bi = 0; bi < (quick > 1 ? 2 : sizeof batch / sizeof batch[0]); bi++) {
                const size_t n = batch[bi];
                const int L = bi % 2 ? 32 : 8;
                patina_glcm_offset_t off[8];
                img_t *im = calloc(n, sizeof *im);
                patina_gpu_grey_t *gi = calloc(n, sizeof *gi);
                const size_t per = 8 * (size_t)L * (size_t)L;
                uint32_t *a = malloc(per * 4), *b = malloc(n * per * 4);
                for (int d = 0; d < 2; d++)
                    for (int t = 0; t < 4; t++) off[d * 4 + t] = patina_glcm_offset(d * 3 + 1, 45.0 * t);
                for (size_t i = 0; i < n; i++) {
                    int w = 1 + (int)tu_rng_below(&rng, 200), h = 1 + (int)tu_rng_below(&rng, 150);
                    img_random(&im[i], w, h, L, (int)(i % 3), (int)(i % 2), &rng);
                    gi[i] = grey_of(&im[i]);
                }
                TU_OK(pgpu_glcm_counts(gpu, &k, b, gi, n, L, off, 8, 1));
                for (size_t i = 0; i < n; i++) {
                    char what[128];
                    TU_OK(patina_glcm_counts_ref(a, im[i].q, im[i].w, im[i].h, im[i].stride, NULL, 0, L, off, 8, 1));
                    snprintf(what, sizeof what, "batch of %zu, image %zu (%dx%d), small slots %d, policy %zu", n, i,
                             im[i].w, im[i].h, small, policies[pi]);
                    compare_counts(b + i * per, a, per, what);
                    img_free(&im[i]);
                }
                free(im);
                free(gi);
                free(a);
                free(b);
            }
        }
}

/* Up to `max` real photographs, grey and quantised as the family does. */
static size_t load_photos(uint8_t **q, int *w, int *h, size_t max, int L)
{
    const char *dir = getenv("PATINA_SAMPLES");
    char **list = NULL;
    size_t n, k = 0;
    if (!dir || !*dir) dir = PATINA_SAMPLES_DIR;
    n = tu_list_files(dir, "jpg,jpeg,png", &list);
    for (size_t i = 0; i < n && k < max; i += 1 + n / max) {
        patina_image_t img;
        if (patina_image_load(&img, list[i], NULL) != PATINA_OK) continue;
        TU_OK(glcm_grey_levels(&q[k], &img, L, PATINA_GLCM_QUANT_UNIFORM));
        w[k] = img.width;
        h[k] = img.height;
        k++;
        patina_image_release(&img);
    }
    tu_free_list(list, n);
    if (k == 0) print_message("no sample photographs under %s (scripts/fetch-samples.sh)\n", dir);
    return k;
}

/* Photographs, 12 offsets, whole and in tiles of 40 rows, under each policy. */
static void test_counts_photos(void **state)
{
    static const int levels[] = {8, 32, 256};
    (void)state;
    if (quick > 1) {
        print_message("PATINA_TEST_QUICK=2: no photographs\n");
        return;
    }
    for (size_t li = 0; li < 3; li++) {
        const int L = levels[li];
        uint8_t *q[8];
        int w[8], h[8];
        size_t n = load_photos(q, w, h, quick ? 2 : 8, L);
        patina_glcm_offset_t off[12];
        const size_t per = 12 * (size_t)L * (size_t)L;
        uint32_t *a = malloc(per * 4), *b = malloc(per * 4);
        for (int d = 0; d < 3; d++)
            for (int t = 0; t < 4; t++) off[d * 4 + t] = patina_glcm_offset(d == 2 ? 5 : d + 1, 45.0 * t);
        for (size_t i = 0; i < n; i++) {
            patina_gpu_grey_t gi = {q[i], w[i], h[i], (size_t)w[i], NULL, 0};
            TU_OK(patina_glcm_counts(a, q[i], w[i], h[i], (size_t)w[i], NULL, 0, L, off, 12, 1, 0));
            for (size_t pi = 0; pi < NPOLICIES; pi++)
                for (int tiles = 0; tiles < 2; tiles++) {
                    const pgpu_glcm_knobs_t k = knobs(tiles ? (size_t)(w[i] + 48) * 40 : 0, 0, policies[pi]);
                    char what[96];
                    TU_OK(pgpu_glcm_counts(gpu, &k, b, &gi, 1, L, off, 12, 1));
                    snprintf(what, sizeof what, "photo %zu (%dx%d) L=%d tiles of 40 rows %d policy %zu", i, w[i],
                             h[i], L, tiles, policies[pi]);
                    compare_counts(b, a, per, what);
                }
            free(q[i]);
        }
        free(a);
        free(b);
    }
}

/* Several offsets in one pass (k_count4, k_count5) and their neighbours:
 * G = 2, 3, 5, 8, 13, 32 offsets, L = 2, 4, 8, 16, 32, widths that are not
 * a multiple of 16, one row, one column; default slots and slots of 11 rows
 * with 64-pixel tasks (tiles whose padding rows split pairs, many tasks and
 * flushes); under each policy. */
static void test_offsets_in_one_pass(void **state)
{
    static const int gs[] = {2, 3, 5, 8, 13, 32};
    static const int levels[] = {2, 8, 16, 32, 4};
    static const int sizes[][2] = {{1, 1}, {15, 3}, {17, 9}, {1, 40}, {100, 37}, {333, 171}, {1031, 97}};
    tu_rng_t rng;
    (void)state;
    tu_rng_seed(&rng, 95);
    for (size_t gi_ = 0; gi_ < sizeof gs / sizeof gs[0]; gi_++)
        for (size_t li = 0; li < sizeof levels / sizeof levels[0]; li++)
            for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
                const int G = gs[gi_], L = levels[li], w = sizes[si][0], h = sizes[si][1];
                const size_t per = (size_t)G * (size_t)L * (size_t)L;
                patina_glcm_offset_t off[32];
                uint32_t *a, *b;
                patina_gpu_grey_t gi;
                img_t im;
                if ((li == 4 || quick) && si != 5) continue; /* L = 4: one size */
                if (quick > 1 && G != 3 && G != 8) continue;
                a = malloc(per * 4);
                b = malloc(per * 4);
                img_random(&im, w, h, L, (int)(si + li) % 3, (int)si % 2, &rng);
                random_offsets(off, G, w, h, &rng);
                gi = grey_of(&im);
                TU_OK(patina_glcm_counts_ref(a, im.q, w, h, im.stride, NULL, 0, L, off, (size_t)G, 0));
                {
                    char what[96];
                    snprintf(what, sizeof what, "%dx%d L=%d G=%d", w, h, L, G);
                    counts_each_policy(&gi, L, off, G, a, b, per, what);
                }
                img_free(&im);
                free(a);
                free(b);
            }
}

/* Every counting kernel instance of the production policy: the request that
 * picks it, the instance pgpu_glcm_time reports, and its counts, resident
 * and streamed. */
static void test_policy_kernels(void **state)
{
    static const struct {
        int L, noff;
        size_t px;
        int masked;
        const char *kernel;
    } cases[] = {
        {2, 8, 32 << 10, 0, "k_count4<L=2,U=2>"},     {4, 3, 32 << 10, 0, "k_count4<L=4,U=2>"},
        {8, 8, 32 << 10, 0, "k_count4<L=8,U=2>"},     {16, 5, 32 << 10, 0, "k_count4<L=16,U=2>"},
        {32, 8, 32 << 10, 0, "k_count4<L=32,U=2>"},   {16, 13, 2 << 20, 0, "k_count4<L=16,U=4>"},
        {32, 2, 2 << 20, 0, "k_count4<L=32,U=4>"},    {32, 8, 32 << 10, 1, "k_count4<L=32,U=2,mask>"},
        {32, 32, 2 << 20, 1, "k_count4<L=32,U=4,mask>"}, {2, 2, 256 << 10, 0, "k_count5<L=2,LD=0>"},
        {4, 5, 256 << 10, 0, "k_count5<L=4,LD=0>"},   {8, 8, 256 << 10, 0, "k_count5<L=8,LD=0>"},
        {2, 32, 2 << 20, 0, "k_count5<L=2,LD=1>"},    {4, 8, 2 << 20, 0, "k_count5<L=4,LD=1>"},
        {8, 3, 2 << 20, 0, "k_count5<L=8,LD=1>"},     {8, 1, 0, 0, "k_count3<L<=16>"},
        {8, 1, 2 << 20, 1, "k_count3<L<=16>"},       {32, 1, 0, 0, "k_count3<L=32>"},
        {32, 1, 2 << 20, 1, "k_count3<L=32,mask>"},   {32, 8, 0, 0, "k_count2"},
        {100, 3, 0, 0, "k_count2"},                   {32, 40, 2 << 20, 0, "k_count2"},
        {32, 8, 0, 1, "k_count2"},                    {256, 2, 0, 0, "k_count_global"},
        {255, 1, 0, 1, "k_count_global"},
    };
    tu_rng_t rng;
    (void)state;
    tu_rng_seed(&rng, 97);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int L = cases[ci].L, G = cases[ci].noff, w = quick > 1 ? 67 : 257, h = quick > 1 ? 35 : 133;
        const size_t per = (size_t)G * (size_t)L * (size_t)L;
        const pgpu_glcm_knobs_t k = knobs(0, 0, cases[ci].px), ks = knobs((size_t)(w + 48) * 9, 100, cases[ci].px);
        patina_glcm_offset_t off[64];
        uint32_t *a = malloc(per * 4), *b = malloc(per * 4);
        uint8_t *mask = malloc((size_t)w * h);
        pgpu_glcm_timing_t t;
        patina_gpu_grey_t gi;
        img_t im;
        char what[160];
        img_random(&im, w, h, L, (int)ci % 3, (int)ci % 2, &rng);
        random_offsets(off, G, w, h, &rng);
        for (int p = 0; p < w * h; p++) mask[p] = (uint8_t)((p / 7 + p / w) % 5 != 0);
        gi = grey_of(&im);
        if (cases[ci].masked) {
            gi.mask = mask;
            gi.mstride = (size_t)w;
        }
        TU_OK(patina_glcm_counts_ref(a, im.q, w, h, im.stride, gi.mask, (size_t)w, L, off, (size_t)G, 1));
        memset(&t, 0, sizeof t);
        t.reps = 2;
        memset(b, 0xab, per * 4);
        TU_OK(pgpu_glcm_time(gpu, &k, &t, b, &gi, 1, L, off, (size_t)G, 1));
        snprintf(what, sizeof what, "L=%d G=%d policy %zu mask %d: %s (expected %s)", L, G, cases[ci].px,
                 cases[ci].masked, t.kernel, cases[ci].kernel);
        if (strcmp(t.kernel, cases[ci].kernel) != 0) fail_msg("%s: another kernel ran", what);
        assert_true(t.ms_single > 0 && t.ms_stream > 0);
        compare_counts(b, a, per, what);
        memset(b, 0xab, per * 4);
        TU_OK(pgpu_glcm_counts(gpu, &ks, b, &gi, 1, L, off, (size_t)G, 1)); /* streamed in tiles */
        compare_counts(b, a, per, what);
        img_free(&im);
        free(mask);
        free(a);
        free(b);
    }
}

/* Masks: the pixels outside get bit 7 where the kernel reads it (L = 32:
 * k_count4 for 2..32 offsets at large launches, k_count3 for one), else a
 * sentinel level that is dropped after counting; counts equal the C
 * reference's masked counts for masks of blobs, single pixels, all inside
 * and all outside, G = 1..32 offsets, levels 8 and 32, resident and
 * streamed (tiny slots split pairs across tiles and flush often), under
 * each policy. */
static void test_masks(void **state)
{
    static const int gs[] = {1, 2, 5, 8, 32};
    static const int sizes[][2] = {{1, 1}, {17, 9}, {100, 37}, {333, 171}, {1031, 97}};
    tu_rng_t rng;
    (void)state;
    tu_rng_seed(&rng, 96);
    for (size_t gi_ = 0; gi_ < sizeof gs / sizeof gs[0]; gi_++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (int L = 8; L <= 32; L += 24) {
                const int G = gs[gi_], w = sizes[si][0], h = sizes[si][1];
                const size_t per = (size_t)G * L * L, np = (size_t)w * h;
                const int mkind = (int)((gi_ + si) % 4); /* blobs, speckle, all inside, all outside */
                patina_glcm_offset_t off[32];
                uint32_t *a, *b;
                uint8_t *mask;
                patina_gpu_grey_t gi;
                img_t im;
                if (quick && si != (quick > 1 ? 2 : 3)) continue;
                if (quick > 1 && G != 1 && G != 8) continue;
                a = malloc(per * 4);
                b = malloc(per * 4);
                mask = malloc(np);
                img_random(&im, w, h, L, (int)(si + gi_) % 3, (int)si % 2, &rng);
                for (int y = 0; y < h; y++)
                    for (int x = 0; x < w; x++)
                        mask[(size_t)y * w + x] = mkind == 0   ? ((x / 13 + y / 7) % 3 != 0)
                                                  : mkind == 1 ? (tu_rng_below(&rng, 4) != 0)
                                                               : mkind == 2;
                random_offsets(off, G, w, h, &rng);
                if (G == 1 && si == 3) off[0].dx = w + 1; /* one offset wider than the image: no pair */
                gi = grey_of(&im);
                gi.mask = mask;
                gi.mstride = (size_t)w;
                TU_OK(patina_glcm_counts_ref(a, im.q, w, h, im.stride, mask, (size_t)w, L, off, (size_t)G, 0));
                {
                    char what[96];
                    snprintf(what, sizeof what, "mask: %dx%d L=%d G=%d mask %d", w, h, L, G, mkind);
                    counts_each_policy(&gi, L, off, G, a, b, per, what);
                }
                for (size_t pi = 0; pi < NPOLICIES; pi++) {
                    const pgpu_glcm_knobs_t k = knobs(0, 0, policies[pi]);
                    pgpu_glcm_timing_t t;
                    char what[160];
                    memset(&t, 0, sizeof t);
                    t.reps = 1;
                    memset(b, 0xab, per * 4);
                    TU_OK(pgpu_glcm_time(gpu, &k, &t, b, &gi, 1, L, off, (size_t)G, 0));
                    snprintf(what, sizeof what, "mask, resident: %dx%d L=%d G=%d mask %d policy %zu (%s)", w, h, L,
                             G, mkind, policies[pi], t.kernel);
                    compare_counts(b, a, per, what);
                }
                img_free(&im);
                free(mask);
                free(a);
                free(b);
            }
}

/* A small budget cuts a batch into chunks (a quarter of 64 MiB holds 8
 * images of 8 offsets at L = 256, so 20 images take three chunks) and its
 * slots shrink to 4 MiB: counts and features still equal the reference. */
static void test_small_budget(void **state)
{
    enum { NMAX = 20, G = 8, L = 256 };
    const int N = quick > 1 ? 9 : NMAX; /* 8 images per chunk */
    const size_t per = (size_t)G * L * L;
    patina_gpu_t *g = NULL;
    patina_glcm_offset_t off[G];
    img_t im[NMAX];
    patina_gpu_grey_t gi[NMAX];
    uint32_t *a = malloc(per * 4), *b = malloc(N * per * 4);
    double *gp = malloc(N * G * PATINA_GLCM_NPROPS * 8), *cp = malloc(G * PATINA_GLCM_NPROPS * 8);
    tu_rng_t rng;
    (void)state;
    tu_rng_seed(&rng, 98);
    TU_OK(patina_gpu_open(&g, 0, (uint64_t)64 << 20));
    for (int d = 0; d < 2; d++)
        for (int t = 0; t < 4; t++) off[d * 4 + t] = patina_glcm_offset(d + 1, 45.0 * t);
    for (int i = 0; i < N; i++) {
        img_random(&im[i], 40 + i, 30 + 2 * i, L, i % 3, i % 2, &rng);
        gi[i] = grey_of(&im[i]);
    }
    TU_OK(patina_gpu_glcm_counts(g, b, gi, N, L, off, G, 1));
    for (int i = 0; i < N; i++) {
        char what[64];
        TU_OK(patina_glcm_counts_ref(a, im[i].q, im[i].w, im[i].h, im[i].stride, NULL, 0, L, off, G, 1));
        snprintf(what, sizeof what, "small budget, image %d", i);
        compare_counts(b + (size_t)i * per, a, per, what);
    }
    TU_OK(patina_gpu_glcm_features_of(g, gp, NULL, b, (size_t)N * G, L));
    for (int i = 0; i < N; i++) {
        patina_glcm_props(cp, b + (size_t)i * per, L, G); /* (10, G) */
        for (int o = 0; o < G; o++)
            for (int k = 0; k < PATINA_GLCM_NPROPS; k++) {
                const double x = gp[((size_t)i * G + o) * PATINA_GLCM_NPROPS + k], y = cp[k * G + o];
                if (!(fabs(x - y) <= 1e-12 * fabs(y) + 1e-15))
                    fail_msg("small budget: image %d offset %d property %d: gpu %.17g, reference %.17g", i, o, k, x, y);
            }
    }
    for (int i = 0; i < N; i++) img_free(&im[i]);
    patina_gpu_close(g);
    free(a);
    free(b);
    free(gp);
    free(cp);
}

/* The GLCM state's memory is the context's: every buffer tagged and
 * counted while held (closing the context frees it; compute-sanitizer
 * --leak-check full checks that), and a NULL context is refused. */
static void test_state_memory(void **state)
{
    patina_glcm_offset_t off[2] = {{0, 1}, {1, 0}};
    uint32_t c[2 * 32 * 32];
    patina_gpu_t *g = NULL;
    tu_rng_t rng;
    img_t im;
    patina_gpu_grey_t gi;
    char plan[4096];
    (void)state;
    tu_rng_seed(&rng, 99);
    img_random(&im, 300, 200, 32, 0, 0, &rng);
    gi = grey_of(&im);
    TU_OK(patina_gpu_open(&g, 0, 0));
    assert_true(g->dev_bytes == 0 && g->pinned_bytes == 0);
    TU_OK(patina_gpu_glcm_counts(g, c, &gi, 1, 32, off, 2, 0));
    assert_true(g->dev_bytes > 0 && g->pinned_bytes > 0);
    patina_gpu__plan(g, plan, sizeof plan);
    assert_non_null(strstr(plan, "glcm image slot"));
    assert_non_null(strstr(plan, "glcm image staging"));
    assert_non_null(strstr(plan, "glcm counts"));
    patina_gpu_close(g);
    img_free(&im);
    assert_int_equal(patina_gpu_glcm_counts(NULL, c, &gi, 1, 32, off, 2, 0), PATINA_E_INVALID);
}

/* |got - want| <= rel * |want| + abs */
static void close_to(double got, double want, double rel, double abs_, const char *what, size_t m, int k)
{
    if (!(fabs(got - want) <= rel * fabs(want) + abs_))
        fail_msg("%s: matrix %zu feature %d: gpu %.17g, reference %.17g", what, m, k, got, want);
}

/* Features: integer-moment ones to a few ulp (the same integers and the same
 * IEEE divisions and square roots); those with logarithms within 1e-12
 * relative (CUDA's log/log2/expm1 are within 1-2 ulp of glibc's, summed in
 * the same order). */
static void check_features(const uint32_t *counts, size_t nmat, int L, const char *what)
{
    static const int logprop[PATINA_GLCM_NPROPS] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    static const int loghar[PATINA_HARALICK_N] = {0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 1, 1, 1, 0};
    double *gp = malloc(nmat * PATINA_GLCM_NPROPS * 8), *gh = malloc(nmat * PATINA_HARALICK_N * 8);
    double *cp = malloc(nmat * PATINA_GLCM_NPROPS * 8), *ch = malloc(nmat * PATINA_HARALICK_N * 8);
    TU_OK(patina_gpu_glcm_features_of(gpu, gp, gh, counts, nmat, L));
    patina_glcm_props(cp, counts, L, nmat);          /* (10, nmat) */
    patina_haralick(ch, counts, L, nmat);            /* (nmat, 14) */
    for (size_t m = 0; m < nmat; m++) {
        for (int k = 0; k < PATINA_GLCM_NPROPS; k++)
            close_to(gp[m * PATINA_GLCM_NPROPS + k], cp[(size_t)k * nmat + m],
                     logprop[k] ? 1e-12 : 1e-15, 1e-15, what, m, k);
        for (int k = 0; k < PATINA_HARALICK_N; k++)
            close_to(gh[m * PATINA_HARALICK_N + k], ch[m * PATINA_HARALICK_N + k],
                     loghar[k] ? 1e-12 : 1e-15, loghar[k] ? 1e-12 : 1e-15, what, m, k);
    }
    free(gp);
    free(gh);
    free(cp);
    free(ch);
}

static void test_features(void **state)
{
    static const int levels[] = {2, 8, 32, 64, 100, 256};
    tu_rng_t rng;
    (void)state;
    tu_rng_seed(&rng, 93);
    for (size_t li = 0; li < sizeof levels / sizeof levels[0]; li++) {
        const int L = levels[li];
        const size_t nmat = L > 100 ? 3 : 40, LL = (size_t)L * (size_t)L;
        uint32_t *c = calloc(nmat * LL, 4);
        for (size_t m = 0; m < nmat; m++) {
            int kind = (int)(m % 4);
            for (size_t e = 0; e < LL; e++) {
                uint32_t v = 0;
                if (kind == 0) v = tu_rng_below(&rng, 1000);                         /* dense */
                if (kind == 1 && tu_rng_below(&rng, 10) == 0) v = tu_rng_below(&rng, 50); /* sparse */
                if (kind == 2 && e / (size_t)L == e % (size_t)L) v = 7;             /* diagonal */
                c[m * LL + e] = v;                                                  /* kind 3: empty */
            }
        }
        check_features(c, nmat, L, "random matrices");
        free(c);
    }
    {   /* matrices of real photographs */
        uint8_t *q[4];
        int w[4], h[4];
        size_t n = load_photos(q, w, h, 4, 32);
        patina_glcm_offset_t off[4] = {{0, 1}, {1, 1}, {1, 0}, {1, -1}};
        uint32_t *c = malloc(4 * 4 * 32 * 32 * 4);
        for (size_t i = 0; i < n; i++) {
            TU_OK(patina_glcm_counts(c + i * 4 * 1024, q[i], w[i], h[i], (size_t)w[i], NULL, 0, 32, off, 4, 1, 0));
            free(q[i]);
        }
        if (n) check_features(c, 4 * n, 32, "photographs");
        free(c);
    }
}

/* pgpu_glcm_features' rows callback: image i's levels from q[i] (w x h),
 * image `bad` fails. */
typedef struct src_job {
    img_t *im;
    size_t bad;
} src_job_t;

static patina_status src_rows(void *arg, size_t i, int r0, int r1, uint8_t *dst, size_t pitch, unsigned out_and,
                              unsigned out_or)
{
    const src_job_t *j = arg;
    (void)out_and;
    (void)out_or;
    for (int r = r0; r < r1; r++) {
        uint8_t *d = dst + (size_t)(r - r0) * pitch;
        if (i == j->bad)
            memset(d, 0, (size_t)j->im[i].w); /* a failure still writes valid levels */
        else
            memcpy(d, j->im[i].q + (size_t)r * j->im[i].stride, (size_t)j->im[i].w);
    }
    return i == j->bad ? PATINA_E_INVALID : PATINA_OK;
}

/* The families' primitive with a rows callback: a batch of images staged by
 * the context's host threads, whole and in tiles; an image whose rows fail
 * is reported in st alone; the others' features equal the C reference's. */
static void test_features_source(void **state)
{
    enum { N = 9, G = 4, L = 16 };
    patina_glcm_offset_t off[G] = {{0, 1}, {1, 1}, {1, 0}, {1, -1}};
    img_t im[N];
    int w[N], h[N];
    patina_status st[N];
    double *gp = malloc(N * G * PATINA_GLCM_NPROPS * 8), *gh = malloc(N * G * PATINA_HARALICK_N * 8);
    double cp[G * PATINA_GLCM_NPROPS], ch[G * PATINA_HARALICK_N];
    uint32_t c[G * L * L];
    src_job_t job;
    tu_rng_t rng;
    (void)state;
    tu_rng_seed(&rng, 100);
    for (int i = 0; i < N; i++) {
        img_random(&im[i], i == 4 ? (quick > 1 ? 150 : 1500) : 30 + 17 * i, i == 4 ? (quick > 1 ? 120 : 1200) : 20 + 11 * i,
                   L, i % 3, 0, &rng);
        w[i] = im[i].w;
        h[i] = im[i].h;
    }
    job.im = im;
    job.bad = 6;
    for (int tiles = 0; tiles < 2; tiles++) {
        const pgpu_glcm_knobs_t k = knobs(tiles ? 20000 : 0, 0, 0);
        pgpu_glcm_src_t src = {N, w, h, 0, src_rows, &job, NULL, 0};
        TU_OK(pgpu_glcm_features(gpu, &k, gp, gh, &src, L, off, G, 1, st));
        for (int i = 0; i < N; i++) {
            char what[64];
            if (i == (int)job.bad) {
                assert_int_equal(st[i], PATINA_E_INVALID);
                continue;
            }
            assert_int_equal(st[i], PATINA_OK);
            TU_OK(patina_glcm_counts_ref(c, im[i].q, w[i], h[i], im[i].stride, NULL, 0, L, off, G, 1));
            patina_glcm_props(cp, c, L, G);
            patina_haralick(ch, c, L, G);
            snprintf(what, sizeof what, "source, image %d, tiles %d", i, tiles);
            for (int o = 0; o < G; o++) {
                for (int f = 0; f < PATINA_GLCM_NPROPS; f++)
                    close_to(gp[((size_t)i * G + o) * PATINA_GLCM_NPROPS + f], cp[f * G + o], 1e-12, 1e-15, what,
                             (size_t)o, f);
                for (int f = 0; f < PATINA_HARALICK_N; f++)
                    close_to(gh[((size_t)i * G + o) * PATINA_HARALICK_N + f], ch[o * PATINA_HARALICK_N + f], 1e-12,
                             1e-12, what, (size_t)o, f);
            }
        }
    }
    for (int i = 0; i < N; i++) img_free(&im[i]);
    free(gp);
    free(gh);
}

/* The families on the GPU device equal the CPU within the same tolerances. */
static void test_families_gpu(void **state)
{
    static const char *specs[] = {
        "glcm:levels=32,distances=1,2,angles=0,45,90,135,symmetric=1",
        "glcm:levels=8,offsets=0:1,3:-2,symmetric=0",
        "haralick:levels=16,distances=1,3",
        "haralick:levels=64,distances=1,form=both,symmetric=0",
        "haralick:levels=100,distances=1,2,form=offsets",
    };
    patina_context_t *ctx;
    patina_image_t imgs[5];
    patina_status st[5];
    tu_rng_t rng;
    (void)state;
    tu_rng_seed(&rng, 94);
    TU_OK(patina_context_new(&ctx, NULL));
    tu_random_image(&imgs[0], 640, 480, 1, &rng);
    tu_random_image(&imgs[1], 1, 1, 0, &rng);
    tu_random_image(&imgs[2], 300, 2, 2, &rng);
    tu_random_image(&imgs[3], 97, 131, 0, &rng);
    tu_random_image(&imgs[4], quick > 1 ? 150 : 1500, quick > 1 ? 110 : 1100, 3, &rng);
    for (size_t si = 0; si < sizeof specs / sizeof specs[0]; si++) {
        patina_extractor_t *ex;
        size_t dim;
        double *a, *b;
        TU_OK(patina_extractor_new(&ex, specs[si]));
        dim = patina_extractor_dim(ex);
        a = malloc(5 * dim * 8);
        b = malloc(5 * dim * 8);
        TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, a, imgs, 5, st));
        TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_GPU, b, imgs, 5, st));
        for (size_t i = 0; i < 5; i++) {
            assert_int_equal(st[i], PATINA_OK);
            for (size_t k = 0; k < dim; k++)
                close_to(b[i * dim + k], a[i * dim + k], 1e-12, 1e-12, specs[si], i, (int)k);
        }
        free(a);
        free(b);
        patina_extractor_free(ex);
    }
    { /* quant=none: an image with a value >= levels fails alone, as on the CPU */
        patina_extractor_t *ex;
        patina_image_t g[3];
        patina_status sa[3], sb[3];
        double a[3 * 10], b[3 * 10];
        for (int i = 0; i < 3; i++) {
            TU_OK(patina_image_init(&g[i], 50 + i, 40));
            for (size_t p = 0; p < (size_t)g[i].height * g[i].stride; p++) g[i].data[p] = (uint8_t)(p % 7);
        }
        g[1].data[5 * g[1].stride + 9] = 200; /* grey >= 8 in one pixel (all three channels) */
        g[1].data[5 * g[1].stride + 10] = 200;
        g[1].data[5 * g[1].stride + 11] = 200;
        TU_OK(patina_extractor_new(&ex, "glcm:levels=8,quant=none,distances=1,angles=0"));
        TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, a, g, 3, sa));
        TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_GPU, b, g, 3, sb));
        for (int i = 0; i < 3; i++) {
            assert_int_equal(sb[i], sa[i]);
            assert_int_equal(sa[i], i == 1 ? PATINA_E_INVALID : PATINA_OK);
            for (int k = 0; k < 10; k++) close_to(b[i * 10 + k], a[i * 10 + k], 1e-12, 1e-12, "quant=none", (size_t)i, k);
        }
        patina_extractor_free(ex);
        for (int i = 0; i < 3; i++) patina_image_release(&g[i]);
    }
    for (int i = 0; i < 5; i++) patina_image_release(&imgs[i]);
    patina_context_free(ctx);
}

/* Masks on the GPU device (a spare level for the pixels outside, dropped
 * after counting, or at L = 32 bit 7, which the flagged kernels skip) equal
 * the CPU's masked counts; levels = 256 has no spare level and runs on the
 * CPU; a mask of another size fails that image alone, as on the CPU. */
static void test_masks_gpu(void **state)
{
    enum { W = 640, H = 480, N = 5 };
    static const char *specs[] = {
        "glcm:levels=32,distances=1,2,angles=0,45,90,135,symmetric=1",
        "glcm:levels=8,offsets=0:1,3:-2,-4:4,symmetric=0",
        "haralick:levels=16,distances=1,3",
        "haralick:levels=255,distances=1,form=both,symmetric=0",
        "glcm:levels=256,distances=1,angles=0,90",
        "glcm:levels=32,distances=1,angles=0",
        "glcm:levels=32,offsets=2:-3,symmetric=0",
    };
    char *dir = tu_tempdir("glcm-gpu-mask"), path[4096], spec[8192], hdr[64];
    uint8_t *file = malloc(64 + (size_t)W * H);
    patina_context_t *ctx;
    patina_image_t imgs[N];
    patina_status sa[N], sb[N];
    tu_rng_t rng;
    size_t hl;
    (void)state;
    tu_rng_seed(&rng, 95);
    hl = (size_t)snprintf(hdr, sizeof hdr, "P5\n%d %d\n255\n", W, H);
    memcpy(file, hdr, hl);
    for (int y = 0; y < H; y++) /* blobs, a hole, single pixels */
        for (int x = 0; x < W; x++)
            file[hl + (size_t)y * W + x] =
                (uint8_t)(((x / 37 + y / 29) % 3 != 0 && !(x > 200 && x < 260 && y > 100 && y < 300)) ||
                                  tu_rng_below(&rng, 50) == 0
                              ? 255
                              : 0);
    snprintf(path, sizeof path, "%s/mask.pgm", dir);
    assert_int_equal(tu_write_file(path, file, hl + (size_t)W * H), 0);
    free(file);
    TU_OK(patina_context_new(&ctx, NULL));
    for (int i = 0; i < N; i++) tu_random_image(&imgs[i], i == 3 ? 300 : W, i == 3 ? 200 : H, i % 4, &rng);
    for (size_t si = 0; si < sizeof specs / sizeof specs[0]; si++) {
        patina_extractor_t *ex;
        size_t dim;
        double *a, *b;
        if (quick > 1 && si != 0 && si != 5) continue;
        snprintf(spec, sizeof spec, "%s,mask=%s", specs[si], path);
        TU_OK(patina_extractor_new(&ex, spec));
        dim = patina_extractor_dim(ex);
        a = malloc(N * dim * 8);
        b = malloc(N * dim * 8);
        TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, a, imgs, N, sa));
        TU_OK(patina_extract_batch(ctx, ex, PATINA_DEVICE_GPU, b, imgs, N, sb));
        for (size_t i = 0; i < N; i++) {
            assert_int_equal(sb[i], sa[i]);
            assert_int_equal(sa[i], i == 3 ? PATINA_E_INVALID : PATINA_OK);
            if (sa[i] != PATINA_OK) continue;
            for (size_t k = 0; k < dim; k++)
                close_to(b[i * dim + k], a[i * dim + k], 1e-12, 1e-12, specs[si], i, (int)k);
        }
        free(a);
        free(b);
        patina_extractor_free(ex);
    }
    for (int i = 0; i < N; i++) patina_image_release(&imgs[i]);
    patina_context_free(ctx);
    tu_remove_tree(dir);
    free(dir);
}

static int setup(void **state)
{
    (void)state;
    quick = getenv("PATINA_TEST_QUICK") ? atoi(getenv("PATINA_TEST_QUICK")) : 0;
    return patina_gpu_open(&gpu, 0, 0) == PATINA_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    patina_gpu_close(gpu);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_random),
        cmocka_unit_test(test_batches),
        cmocka_unit_test(test_counts_photos),
        cmocka_unit_test(test_offsets_in_one_pass),
        cmocka_unit_test(test_policy_kernels),
        cmocka_unit_test(test_masks),
        cmocka_unit_test(test_small_budget),
        cmocka_unit_test(test_state_memory),
        cmocka_unit_test(test_features),
        cmocka_unit_test(test_features_source),
        cmocka_unit_test(test_families_gpu),
        cmocka_unit_test(test_masks_gpu),
    };
    tu_require_gpu();
    return cmocka_run_group_tests(tests, setup, teardown);
}
