/* The result order of every search and the bounded hit heap, shared by the
 * CPU search (src/search/knn_search.c) and the GPU search's host merge
 * (src/gpu/knn.cu). */
#ifndef PATINA_ALGO_HITS_H
#define PATINA_ALGO_HITS_H

#include <math.h>
#include <stddef.h>

#include "patina/search.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The result order, shared by the CPU search and the GPU search's host
 * merge: distance ascending, NaN after every number, ties by id ascending.
 * A total order when ids are unique. */
static inline int patina__hit_cmp(const patina_hit_t *a, const patina_hit_t *b)
{
    int an = isnan(a->distance), bn = isnan(b->distance);
    if (an != bn) return an ? 1 : -1;
    if (!an) {
        if (a->distance < b->distance) return -1;
        if (a->distance > b->distance) return 1;
    }
    return a->id < b->id ? -1 : a->id > b->id;
}

static inline int patina__hit_qsort_cmp(const void *a, const void *b)
{
    return patina__hit_cmp((const patina_hit_t *)a, (const patina_hit_t *)b);
}

/* Bounded max-heap of hits in that order: h[0] is the worst kept.
 * heap_up places x at the end of h[0..i); heap_down restores h[0..n) after
 * h[i] was replaced. */
static inline void patina__hit_heap_up(patina_hit_t *h, size_t i, patina_hit_t x)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (patina__hit_cmp(&h[p], &x) >= 0) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static inline void patina__hit_heap_down(patina_hit_t *h, size_t n, size_t i)
{
    patina_hit_t x = h[i];
    for (;;) {
        size_t l = 2 * i + 1, m;
        if (l >= n) break;
        m = l + 1 < n && patina__hit_cmp(&h[l + 1], &h[l]) > 0 ? l + 1 : l;
        if (patina__hit_cmp(&h[m], &x) <= 0) break;
        h[i] = h[m];
        i = m;
    }
    h[i] = x;
}

#ifdef __cplusplus
}
#endif
#endif
