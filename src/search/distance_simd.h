/* The AVX2 kernels of the distance table (src/search/distance_avx2.c), for
 * pdist_block (search/distance.h), which picks them at run time. Built
 * wherever the compiler can target AVX2 per function (GCC, Clang on
 * x86-64); elsewhere, or compiled with -DPATINA_NO_AVX2 (a build of the
 * portable path alone), PDIST_HAVE_AVX2 is 0 and only the portable C runs. */
#ifndef PATINA_SEARCH_DISTANCE_SIMD_H
#define PATINA_SEARCH_DISTANCE_SIMD_H

#include <stddef.h>
#include <stdint.h>

#include "search/distance.h"

#if !defined(PATINA_NO_AVX2) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PDIST_HAVE_AVX2 1
#else
#define PDIST_HAVE_AVX2 0
#endif

#if PDIST_HAVE_AVX2
/* 1 when this CPU (and its OS) runs AVX2 instructions. */
int pdist_avx2_cpu(void);

/* pdist_block with the AVX2 kernels: same arguments, same doubles. Call
 * only where pdist_avx2_cpu() says so; d is element-wise (not a record
 * distance). */
void pdist_avx2_block(pdist_t d, patina_elem e, const uint8_t *queries, size_t nq, const uint8_t *rows,
                      size_t bytes, size_t cnt, size_t n, const double *sd, const double *thr, void *scratch,
                      double *out, size_t ld);
#endif

#endif
