/* GLCM on the GPU against the C reference: counts identical on random and
 * real images for levels 2..256 (every kernel path: shared sub-GLCMs with
 * many copies, offsets in several launches, one matrix per block, global
 * votes), random offsets (negative, larger than the image), symmetric or not,
 * pageable and pinned inputs, tiles so small that pairs cross their borders,
 * batches of 1..64 images; the paper's three schemes and the production
 * lab paths; properties and Haralick features of whole batches; the glcm
 * and haralick families on the GPU device. Label gpu: skipped without one. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "features/glcm_ref.h"
#include "gpu/gpu.h"
#include "patina/glcm.h"
#include "testutil.h"

static patina_gpu_t *gpu;

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

static void random_offsets(patina_glcm_offset_t *off, int n, int w, int h, tu_rng_t *r)
{
    for (int o = 0; o < n; o++) {
        off[o].dy = (int)tu_rng_below(r, 11) - 5;
        off[o].dx = (int)tu_rng_below(r, 11) - 5;
    }
    if (n > 2) {
        off[n - 1].dy = h;      /* taller than the image: nothing */
        off[n - 2].dx = -w - 1; /* wider, leftwards */
    }
}

static void compare_counts(const uint32_t *got, const uint32_t *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("%s: first difference at element %zu: gpu %u, reference %u", what, i, got[i],
                     want[i]);
}

/* Random images, every level class, small and default slots. */
static void test_counts_random(void **state)
{
    static const int sizes[][2] = {{1, 1}, {3, 2}, {17, 5}, {64, 64}, {129, 67}, {300, 211}, {1031, 523}};
    static const int levels[] = {2, 8, 32, 100, 181, 256};
    static const size_t caps[][2] = {{0, 0}, {4096, 64}, {100000, 1000}};
    tu_rng_t rng;
    (void)state;
    tu_rng_seed(&rng, 90);
    for (size_t ci = 0; ci < sizeof caps / sizeof caps[0]; ci++) {
        patina_gpu__glcm_set_caps(caps[ci][0], caps[ci][1]);
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (size_t li = 0; li < sizeof levels / sizeof levels[0]; li++) {
                const int w = sizes[si][0], h = sizes[si][1], L = levels[li];
                const int noff = 1 + (int)((si + li) % 10);
                patina_glcm_offset_t off[10];
                img_t im;
                patina_gpu_grey_t gi;
                size_t n = (size_t)noff * (size_t)L * (size_t)L;
                uint32_t *a = malloc(n * 4), *b = malloc(n * 4);
                char what[160];
                if (ci > 0 && w * h > 70000 && L > 100) { /* keep the run short */
                    free(a);
                    free(b);
                    continue;
                }
                img_random(&im, w, h, L, (int)(si + li) % 3, (int)(si + ci) % 2, &rng);
                random_offsets(off, noff, w, h, &rng);
                gi.q = im.q;
                gi.w = w;
                gi.h = h;
                gi.stride = im.stride;
                for (int sym = 0; sym < 2; sym++) {
                    TU_OK(patina_glcm_counts_ref(a, im.q, w, h, im.stride, NULL, 0, L, off, (size_t)noff, sym));
                    memset(b, 0xab, n * 4);
                    TU_OK(patina_gpu_glcm_counts(gpu, b, &gi, 1, L, off, (size_t)noff, sym));
                    snprintf(what, sizeof what, "%dx%d L=%d noff=%d sym=%d pinned=%d slot=%zu", w, h, L,
                             noff, sym, im.pinned, caps[ci][0]);
                    compare_counts(b, a, n, what);
                }
                img_free(&im);
                free(a);
                free(b);
            }
    }
    patina_gpu__glcm_set_caps(0, 0);
}

/* Batches of images of different sizes in one call, small and default slots. */
static void test_batches(void **state)
{
    static const size_t batch[] = {1, 2, 7, 64};
    tu_rng_t rng;
    (void)state;
    tu_rng_seed(&rng, 91);
    for (int small = 0; small < 4; small++) { /* PATINA_GLCM_K2=6 (k_count4), then 4 (k_count2) */
        setenv("PATINA_GLCM_K2", small < 2 ? "6" : "4", 1);
        patina_gpu__glcm_set_caps(small % 2 ? 6000 : 0, small % 2 ? 300 : 0);
        for (size_t bi = 0; bi < sizeof batch / sizeof batch[0]; bi++) {
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
                gi[i].q = im[i].q;
                gi[i].w = w;
                gi[i].h = h;
                gi[i].stride = im[i].stride;
            }
            TU_OK(patina_gpu_glcm_counts(gpu, b, gi, n, L, off, 8, 1));
            for (size_t i = 0; i < n; i++) {
                char what[128];
                TU_OK(patina_glcm_counts_ref(a, im[i].q, im[i].w, im[i].h, im[i].stride, NULL, 0, L, off, 8, 1));
                snprintf(what, sizeof what, "batch of %zu, image %zu (%dx%d), small slots %d", n, i,
                         im[i].w, im[i].h, small);
                compare_counts(b + i * per, a, per, what);
                img_free(&im[i]);
            }
            free(im);
            free(gi);
            free(a);
            free(b);
        }
    }
    unsetenv("PATINA_GLCM_K2");
    patina_gpu__glcm_set_caps(0, 0);
}

/* Up to 8 real photographs, grey and quantised as the family does. */
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

static void test_counts_photos(void **state)
{
    static const int levels[] = {8, 32, 256};
    (void)state;
    for (size_t li = 0; li < 3; li++) {
        const int L = levels[li];
        uint8_t *q[8];
        int w[8], h[8];
        size_t n = load_photos(q, w, h, 8, L);
        patina_glcm_offset_t off[12];
        const size_t per = 12 * (size_t)L * (size_t)L;
        uint32_t *a = malloc(per * 4), *b = malloc(per * 4);
        for (int d = 0; d < 3; d++)
            for (int t = 0; t < 4; t++) off[d * 4 + t] = patina_glcm_offset(d == 2 ? 5 : d + 1, 45.0 * t);
        for (size_t i = 0; i < n; i++) {
            patina_gpu_grey_t gi = {q[i], w[i], h[i], (size_t)w[i]};
            char what[96];
            TU_OK(patina_glcm_counts(a, q[i], w[i], h[i], (size_t)w[i], NULL, 0, L, off, 12, 1, 0));
            for (int small = 0; small < 4; small++) { /* PATINA_GLCM_K2=6 (k_count4), then 4 */
                setenv("PATINA_GLCM_K2", small < 2 ? "6" : "4", 1);
                patina_gpu__glcm_set_caps(small % 2 ? (size_t)(w[i] + 48) * 40 : 0, 0);
                TU_OK(patina_gpu_glcm_counts(gpu, b, &gi, 1, L, off, 12, 1));
                snprintf(what, sizeof what, "photo %zu (%dx%d) L=%d tiles of 40 rows %d K2 %s", i, w[i], h[i], L,
                         small % 2, small >= 2 ? "4" : "6");
                compare_counts(b, a, per, what);
            }
            unsetenv("PATINA_GLCM_K2");
            free(q[i]);
        }
        patina_gpu__glcm_set_caps(0, 0);
        free(a);
        free(b);
    }
}

/* The paper's schemes and the production lab paths give the same counts. */
static void test_schemes(void **state)
{
    tu_rng_t rng;
    uint8_t *pq[2];
    int pw[2], ph[2];
    size_t nphotos = load_photos(pq, pw, ph, 2, 32);
    (void)state;
    tu_rng_seed(&rng, 92);
    for (int c = 0; c < 4 + (int)nphotos; c++) {
        const int L = c == 1 ? 8 : 32;
        img_t im = {0};
        const uint8_t *q;
        int w, h;
        size_t stride;
        patina_glcm_offset_t off[5] = {{0, 1}, {1, 1}, {4, -4}, {-2, 3}, {0, -7}};
        const size_t per = 5 * (size_t)L * (size_t)L;
        uint32_t *a = malloc(per * 4), *b = malloc(per * 4);
        if (c < 4) {
            img_random(&im, c == 3 ? 777 : 256 + 13 * c, c == 3 ? 301 : 200 + 7 * c, L, c % 3, c % 2, &rng);
            q = im.q;
            w = im.w;
            h = im.h;
            stride = im.stride;
        } else {
            q = pq[c - 4];
            w = pw[c - 4];
            h = ph[c - 4];
            stride = (size_t)w;
        }
        for (int sym = 0; sym < 2; sym++) {
            TU_OK(patina_glcm_counts_ref(a, q, w, h, stride, NULL, 0, L, off, 5, sym));
            for (int scheme = 1; scheme <= 5; scheme++) {
                patina_glcm_lab_t lab = {0};
                char what[96];
                lab.scheme = scheme;
                lab.reps = 1;
                lab.tiles = 7; /* scheme 3: tiles split pairs at their borders */
                memset(b, 0xcd, per * 4);
                TU_OK(patina_gpu__glcm_lab(&lab, b, q, w, h, stride, L, off, 5, sym));
                snprintf(what, sizeof what, "scheme %d, case %d (%dx%d) L=%d sym=%d", scheme, c, w, h, L, sym);
                compare_counts(b, a, per, what);
                assert_true(lab.ms > 0);
            }
        }
        if (c < 4) img_free(&im);
        free(a);
        free(b);
    }
    for (size_t i = 0; i < nphotos; i++) free(pq[i]);
}

/* Every k_count2 variant of the lab (PATINA_GLCM_K2: prefetch, block size;
 * 4: k_count3 for L = 2^s <= 32, each of its four instances: L = 32 or not,
 * one offset per block with split 8; 6, 7, 8: k_count4 for L = 2, 8, 16, 32),
 * offset subsets (PATINA_GLCM_SPLIT) and task
 * sizes (PATINA_GLCM_TASKPX) gives the reference's counts. */
static void test_k2_variants(void **state)
{
    static const int levels[] = {8, 32, 100, 64, 16, 2};
    static const char *tasks[] = {"0", "64", "5000"};
    tu_rng_t rng;
    (void)state;
    tu_rng_seed(&rng, 93);
    for (size_t li = 0; li < sizeof levels / sizeof levels[0]; li++) {
        const int L = levels[li], noff = li == 3 ? 10 : 8, w = 333 + 50 * (int)li, h = 171 + 31 * (int)li;
        patina_glcm_offset_t off[10];
        const size_t per = (size_t)noff * (size_t)L * (size_t)L;
        uint32_t *a = malloc(per * 4), *b = malloc(per * 4);
        img_t im;
        img_random(&im, w, h, L, (int)li % 3, 0, &rng);
        random_offsets(off, noff, w, h, &rng);
        off[0].dy = 0;
        off[0].dx = 1;
        off[1].dy = 1;
        off[1].dx = -1;
        TU_OK(patina_glcm_counts_ref(a, im.q, w, h, im.stride, NULL, 0, L, off, (size_t)noff, 0));
        for (int v = 0; v < 10; v++)
            for (int split = 0; split <= 8; split += split < 4 ? 1 : 4)
                for (size_t ti = 0; ti < sizeof tasks / sizeof tasks[0]; ti++) {
                    patina_glcm_lab_t lab = {0};
                    char what[128], val[16];
                    snprintf(val, sizeof val, "%d", v);
                    setenv("PATINA_GLCM_K2", val, 1);
                    snprintf(val, sizeof val, "%d", split);
                    setenv("PATINA_GLCM_SPLIT", val, 1);
                    setenv("PATINA_GLCM_TASKPX", tasks[ti], 1);
                    lab.scheme = 4;
                    lab.reps = 1;
                    memset(b, 0xcd, per * 4);
                    TU_OK(patina_gpu__glcm_lab(&lab, b, im.q, w, h, im.stride, L, off, (size_t)noff, 0));
                    snprintf(what, sizeof what, "k2 variant %d split %d task %s L=%d", v, split, tasks[ti], L);
                    compare_counts(b, a, per, what);
                }
        unsetenv("PATINA_GLCM_K2");
        unsetenv("PATINA_GLCM_SPLIT");
        unsetenv("PATINA_GLCM_TASKPX");
        img_free(&im);
        free(a);
        free(b);
    }
}

/* k_count4 (PATINA_GLCM_K2=6, 7, 8: lanes carry the offsets, 2..32 offsets,
 * L = 2^s <= 32) and k_count5 (10, 11: a lane counts a pair of offsets into a
 * joint table, L <= 8; at L = 16 and 32 they fall back to k_count4) against
 * the reference and the previous path (4: k_count2 for several offsets)
 * through the production entry point: G = 2, 3, 5, 8, 13,
 * 32 offsets with dy, dx in [-4, 4] (negative dx included) and, from G = 3
 * on, offsets beyond the image; widths that are not a multiple of 16; one
 * row, one column; default slots, and slots of a few rows (tiles whose
 * padding rows split pairs) with tiny tasks (many tasks and flushes). */
static void test_k4_offsets(void **state)
{
    static const int gs[] = {2, 3, 5, 8, 13, 32};
    static const int levels[] = {2, 8, 16, 32, 4};
    static const int sizes[][2] = {{1, 1}, {15, 3}, {17, 9}, {1, 40}, {100, 37}, {333, 171}, {1031, 97}};
    static const char *variants[] = {"4", "6", "7", "8", "9", "10", "11"};
    tu_rng_t rng;
    (void)state;
    tu_rng_seed(&rng, 95);
    for (size_t gi_ = 0; gi_ < sizeof gs / sizeof gs[0]; gi_++)
        for (size_t li = 0; li < sizeof levels / sizeof levels[0]; li++)
            for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
                const int G = gs[gi_], L = levels[li], w = sizes[si][0], h = sizes[si][1];
                const size_t per = (size_t)G * (size_t)L * (size_t)L;
                patina_glcm_offset_t off[32];
                uint32_t *a = malloc(per * 4), *b = malloc(per * 4);
                patina_gpu_grey_t gi;
                img_t im;
                if (li == 4 && si != 5) { /* L = 4: one size */
                    free(a);
                    free(b);
                    continue;
                }
                img_random(&im, w, h, L, (int)(si + li) % 3, (int)si % 2, &rng);
                for (int o = 0; o < G; o++) {
                    off[o].dy = (int)tu_rng_below(&rng, 9) - 4;
                    off[o].dx = (int)tu_rng_below(&rng, 9) - 4;
                }
                off[0].dy = 0; /* the usual ones */
                off[0].dx = 1;
                off[1].dy = -1;
                off[1].dx = -1;
                if (G >= 3) off[G - 1].dy = h;      /* taller than the image */
                if (G >= 5) off[G - 2].dx = -w - 1; /* wider, leftwards */
                if (G >= 8) off[G - 3].dx = w + 3;  /* wider, rightwards */
                gi.q = im.q;
                gi.w = w;
                gi.h = h;
                gi.stride = im.stride;
                TU_OK(patina_glcm_counts_ref(a, im.q, w, h, im.stride, NULL, 0, L, off, (size_t)G, 0));
                for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; vi++)
                    for (int small = 0; small < 2; small++) {
                        char what[160];
                        setenv("PATINA_GLCM_K2", variants[vi], 1);
                        patina_gpu__glcm_set_caps(small ? (size_t)(w + 48) * 11 : 0, small ? 64 : 0);
                        memset(b, 0xab, per * 4);
                        TU_OK(patina_gpu_glcm_counts(gpu, b, &gi, 1, L, off, (size_t)G, 0));
                        snprintf(what, sizeof what, "k4: %dx%d L=%d G=%d K2=%s small slots %d", w, h, L, G,
                                 variants[vi], small);
                        compare_counts(b, a, per, what);
                    }
                unsetenv("PATINA_GLCM_K2");
                patina_gpu__glcm_set_caps(0, 0);
                img_free(&im);
                free(a);
                free(b);
            }
}

/* Masks carried in bit 7 (L = 32; k_count4's flagged instances, entries 29
 * and 30, for 2..32 offsets; k_count3's, entry 31, for one): counts equal
 * the C reference's masked counts, through the lab's resident kernel
 * (scheme 4) and the streamed path (scheme 5) with default and tiny slots
 * (tiles whose padding rows split pairs, many tasks and flushes), for
 * PATINA_GLCM_K2 = 6, 7, 8 (two / four groups per lane; 8 has no flagged
 * 8-byte instance and takes the two-group one; one offset: k_count3 at 640
 * threads whatever the variant); masks of blobs, single pixels, all inside
 * and all outside; G = 2..32 offsets as in test_k4_offsets, and one offset
 * (random, or wider than the image). Where no flagged instance counts
 * (PATINA_GLCM_K2=4 with several offsets: k_count2; 5 with one: k_count3 at
 * 768 threads; 3: k_count2) the lab refuses flags with PATINA_E_LIMIT. */
static void test_k4_flags(void **state)
{
    static const int gs[] = {1, 2, 5, 8, 32};
    static const int sizes[][2] = {{1, 1}, {17, 9}, {100, 37}, {333, 171}, {1031, 97}};
    static const char *variants[] = {"6", "7", "8"};
    tu_rng_t rng;
    (void)state;
    tu_rng_seed(&rng, 96);
    for (size_t gi_ = 0; gi_ < sizeof gs / sizeof gs[0]; gi_++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            const int G = gs[gi_], L = 32, w = sizes[si][0], h = sizes[si][1];
            const size_t per = (size_t)G * L * L, np = (size_t)w * h;
            const int mkind = (int)((gi_ + si) % 4); /* blobs, speckle, all inside, all outside */
            patina_glcm_offset_t off[32];
            uint32_t *a = malloc(per * 4), *b = malloc(per * 4);
            uint8_t *mask = malloc(np), *qf = malloc(np);
            img_t im;
            img_random(&im, w, h, L, (int)(si + gi_) % 3, 0, &rng);
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++) {
                    const size_t p = (size_t)y * w + x;
                    mask[p] = mkind == 0   ? ((x / 13 + y / 7) % 3 != 0)
                              : mkind == 1 ? (tu_rng_below(&rng, 4) != 0)
                                           : mkind == 2;
                    qf[p] = (uint8_t)(im.q[(size_t)y * im.stride + x] | (mask[p] ? 0 : 0x80));
                }
            for (int o = 0; o < G; o++) {
                off[o].dy = (int)tu_rng_below(&rng, 9) - 4;
                off[o].dx = (int)tu_rng_below(&rng, 9) - 4;
            }
            if (G >= 2) {
                off[0].dy = 0;
                off[0].dx = 1;
                off[1].dy = -1;
                off[1].dx = -1;
            } else if (si == 3) {
                off[0].dx = w + 1; /* one offset wider than the image: no pair */
            }
            if (G >= 5) off[G - 2].dx = -w - 1; /* wider than the image */
            TU_OK(patina_glcm_counts_ref(a, im.q, w, h, im.stride, mask, (size_t)w, L, off, (size_t)G, 0));
            for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; vi++)
                for (int scheme = 4; scheme <= 5; scheme++)
                    for (int small = 0; small < (scheme == 5 ? 2 : 1); small++) {
                        patina_glcm_lab_t l;
                        char what[160];
                        memset(&l, 0, sizeof l);
                        l.scheme = scheme;
                        l.reps = 1;
                        l.flags = 1;
                        setenv("PATINA_GLCM_K2", variants[vi], 1);
                        patina_gpu__glcm_set_caps(small ? (size_t)(w + 48) * 11 : 0, small ? 64 : 0);
                        memset(b, 0xab, per * 4);
                        TU_OK(patina_gpu__glcm_lab(&l, b, qf, w, h, (size_t)w, L, off, (size_t)G, 0));
                        snprintf(what, sizeof what, "flags: %dx%d G=%d mask %d K2=%s scheme %d small %d", w,
                                 h, G, mkind, variants[vi], scheme, small);
                        compare_counts(b, a, per, what);
                    }
            {
                patina_glcm_lab_t l;
                memset(&l, 0, sizeof l);
                l.scheme = 4;
                l.reps = 1;
                l.flags = 1;
                if (G >= 2) {
                    setenv("PATINA_GLCM_K2", "4", 1); /* several offsets: k_count2, no flags */
                    assert_int_equal(patina_gpu__glcm_lab(&l, b, qf, w, h, (size_t)w, L, off, (size_t)G, 0),
                                     PATINA_E_LIMIT);
                }
                setenv("PATINA_GLCM_K2", "5", 1); /* one offset: k_count3 at 768 threads, no flags */
                assert_int_equal(patina_gpu__glcm_lab(&l, b, qf, w, h, (size_t)w, L, off, 1, 0),
                                 PATINA_E_LIMIT);
                setenv("PATINA_GLCM_K2", "3", 1); /* k_count2 */
                assert_int_equal(patina_gpu__glcm_lab(&l, b, qf, w, h, (size_t)w, L, off, 1, 0),
                                 PATINA_E_LIMIT);
            }
            unsetenv("PATINA_GLCM_K2");
            patina_gpu__glcm_set_caps(0, 0);
            img_free(&im);
            free(mask);
            free(qf);
            free(a);
            free(b);
        }
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
    static const int levels[] = {2, 8, 32, 100, 256};
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

/* The families on the GPU device equal the CPU within the same tolerances. */
static void test_families_gpu(void **state)
{
    static const char *specs[] = {
        "glcm:levels=32,distances=1,2,angles=0,45,90,135,symmetric=1",
        "glcm:levels=8,offsets=0:1,3:-2,symmetric=0",
        "haralick:levels=16,distances=1,3",
        "haralick:levels=64,distances=1,form=both,symmetric=0",
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
    tu_random_image(&imgs[4], 1500, 1100, 3, &rng);
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
    for (int i = 0; i < 5; i++) patina_image_release(&imgs[i]);
    patina_context_free(ctx);
}

/* Masks on the GPU (a spare level for the pixels outside, dropped after
 * counting, or at L = 32 bit 7 of the pixels outside, which the flagged
 * kernels skip) equal the CPU's masked counts; levels = 256 has no spare level
 * and runs on the CPU; a mask of another size fails that image alone, as on
 * the CPU. */
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
    /* the default policy (small images: k_count2 with a sentinel level for
     * several offsets at L = 32, k_count3 with the mask in bit 7 for one),
     * then PATINA_GLCM_K2=7 (k_count4: L = 32 with the mask in bit 7 for
     * several offsets), then 5 (k_count3 at 768 threads, which has no
     * flagged instance: one offset at L = 32 with the sentinel level) */
    for (size_t si = 0; si < 3 * (sizeof specs / sizeof specs[0]); si++) {
        const size_t ns = sizeof specs / sizeof specs[0];
        patina_extractor_t *ex;
        size_t dim;
        double *a, *b;
        if (si == ns) setenv("PATINA_GLCM_K2", "7", 1);
        if (si == 2 * ns) setenv("PATINA_GLCM_K2", "5", 1);
        snprintf(spec, sizeof spec, "%s,mask=%s", specs[si % ns], path);
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
                close_to(b[i * dim + k], a[i * dim + k], 1e-12, 1e-12, specs[si % ns], i, (int)k);
        }
        free(a);
        free(b);
        patina_extractor_free(ex);
    }
    unsetenv("PATINA_GLCM_K2");
    for (int i = 0; i < N; i++) patina_image_release(&imgs[i]);
    patina_context_free(ctx);
    tu_remove_tree(dir);
}

static int setup(void **state)
{
    (void)state;
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
        cmocka_unit_test(test_schemes),
        cmocka_unit_test(test_k2_variants),
        cmocka_unit_test(test_k4_offsets),
        cmocka_unit_test(test_k4_flags),
        cmocka_unit_test(test_masks_gpu),
        cmocka_unit_test(test_features),
        cmocka_unit_test(test_families_gpu),
    };
    tu_require_gpu();
    return cmocka_run_group_tests(tests, setup, teardown);
}
