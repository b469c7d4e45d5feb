/* Helpers shared by the benchmarks (bench/) and the kernel lab (lab/): the
 * input photograph (or a synthetic texture) cut to square test images, the
 * GLCM benchmark's generated images (bench/glcm_peers.py makes the same),
 * LBP configurations and medians. Program code, not the library: these print
 * to stderr and exit on errors. Built as the static library patina_benchutil
 * (CMakeLists.txt), which the bench_* and lab_* programs link; it is in
 * tools/ because the benchmarks link the lab's baselines, and the lab must
 * not link back into bench/. */
#ifndef PATINA_BENCHUTIL_H
#define PATINA_BENCHUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "features/lbp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A grey source image (w x h, rows w bytes apart; malloc'd) and its name
 * for the report: "PATH (WxH)" or "synthetic texture". */
typedef struct bench_source {
    uint8_t *grey;
    int w, h;
    char name[1100]; /* a path (up to 1023) and its size */
} bench_source_t;

/* Loads image_path, or (NULL) the largest .jpg/.png under $PATINA_SAMPLES (or
 * ./samples), in grey; a 1024x1024 synthetic texture when there is none. */
void bench_source_load(bench_source_t *src, const char *image_path);
/* Frees the pixels. */
void bench_source_release(bench_source_t *src);
/* An s x s grey image from the source (out: s*s bytes): centre crop,
 * mirrored where the source is smaller; `shift` moves the window (distinct
 * batch members). */
void bench_source_square(const bench_source_t *src, uint8_t *out, int s, int shift);

/* The integer hash behind the GLCM benchmark's images (bench/glcm_peers.py
 * has the same). */
uint32_t bench_glcm_hash(uint32_t x, uint32_t y);
/* The GLCM benchmark's n x n image (v: n*n bytes), as bench/glcm_peers.py
 * generates it: kind 0 "slow" (a ramp plus small noise: long runs of one
 * pair, heavy atomic contention), kind 1 "drastic" (hash noise: pairs spread
 * over the whole matrix). */
void bench_glcm_image(uint8_t *v, int n, int kind);
/* "slow" (0) or "drastic" (1). */
const char *bench_glcm_kind_name(int kind);

/* An LBP configuration (counts, 16 var bins); on a bad one prints the
 * reason (naming `what`) on stderr and exits 1. */
lbp_conf_t bench_lbp_conf(const char *what, int kind, int P, double R, int method, int mapping,
                          const char *grid, double th);

/* The .jpg/.png files under dir, recursively, sorted by path (malloc'd array
 * of malloc'd paths; free with bench_free_list). */
size_t bench_list_images(const char *dir, char ***out);
void bench_free_list(char **list, size_t n);

/* A xorshift64 generator for benchmark data (seed: any non-zero value). */
typedef struct bench_rng {
    uint64_t s;
} bench_rng_t;
uint32_t bench_rng_below(bench_rng_t *r, uint32_t n);
/* A RootSIFT-like u8 row at scale 512: positive, peaky (cubed uniforms, as
 * SIFT histograms), L2 norm ~512. */
void bench_rootsift_row(uint8_t row[128], bench_rng_t *r);
/* A u8 rootsift record (docs/rootsift.md) of m rows, the first `count`
 * random rows with random keypoints in a 1024 x 1024 image, into rec
 * (rs_record_bytes(m, u8) bytes). */
void bench_rootsift_record(unsigned char *rec, size_t m, size_t count, bench_rng_t *r);

/* The output of running cmd (a shell command line, via popen; what it
 * writes to stdout), malloc'd and NUL-terminated; NULL when it cannot run
 * or wrote nothing. */
char *bench_capture(const char *cmd);

/* Ascending order for qsort of doubles. */
int bench_cmp_double(const void *a, const void *b);
/* The median of v[0..n) (v[n / 2] after sorting v in place); 0 for n = 0. */
double bench_median(double *v, int n);

#ifdef __cplusplus
}
#endif
#endif
