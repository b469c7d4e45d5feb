/* Thumbnails of `patina serve` (GET .../images/KEY?thumbnail=N): the size
 * rule, an exact area (box) downscale, the JPEG encoding and a cache of
 * encoded thumbnails bounded by bytes (least recently used out first).
 * No HTTP and no store here (handlers.c finds and checks the file): the
 * functions are unit-tested in tests/serve/test_thumb.c.
 *
 * The downscale. Put the source's sw columns and the thumbnail's dw columns
 * on one axis of sw*dw units: source column i covers [i*dw, (i+1)*dw) and
 * thumbnail column x covers [x*sw, (x+1)*sw). A thumbnail pixel is the
 * average of the source pixels it covers, each weighted by the area of the
 * overlap: integer weights whose sum is sw*sh for every thumbnail pixel, so
 * the average is one integer division, rounded half up. As dw <= sw, a
 * source column (or row) overlaps at most two thumbnail columns (rows): the
 * pass over the source is one sweep, rows in order, with two accumulator
 * rows. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <turbojpeg.h>

#include "serve/internal.h"

void thumb_size(int w, int h, int n, int *tw, int *th)
{
    int big = w > h ? w : h;
    if (big <= n) { /* never enlarged */
        *tw = w;
        *th = h;
        return;
    }
    /* the longer side becomes n, the other in proportion, rounded, at least 1 */
    *tw = w == big ? n : (int)(((uint64_t)w * (uint64_t)n + (uint64_t)big / 2) / (uint64_t)big);
    *th = h == big ? n : (int)(((uint64_t)h * (uint64_t)n + (uint64_t)big / 2) / (uint64_t)big);
    if (*tw < 1) *tw = 1;
    if (*th < 1) *th = 1;
}

int thumb_downscale(uint8_t *dst, int dw, int dh, const uint8_t *src, int sw, int sh, size_t sstride)
{
    const size_t nx = 3 * (size_t)dw;
    const uint64_t total = (uint64_t)sw * (uint64_t)sh; /* the weights of one thumbnail pixel */
    uint64_t *row, *acc0, *acc1, *t;
    int i, j, y = 0;
    size_t k;
    if (!dst || !src || dw < 1 || dh < 1 || dw > sw || dh > sh || sstride < 3 * (size_t)sw) return -1;
    /* row: one source row's horizontal sums, (dw, 3); acc0/acc1: thumbnail rows y and y + 1 */
    row = malloc(nx * sizeof *row);
    acc0 = calloc(nx, sizeof *acc0);
    acc1 = calloc(nx, sizeof *acc1);
    if (!row || !acc0 || !acc1) {
        free(row);
        free(acc0);
        free(acc1);
        return -1;
    }
    for (j = 0; j < sh; j++) {
        const uint8_t *s = src + (size_t)j * sstride;
        uint64_t a = (uint64_t)j * (uint64_t)dh;       /* this row covers [a, a + dh) */
        int yj = (int)(a / (uint64_t)sh);              /* the thumbnail row it starts in */
        uint64_t in = (uint64_t)(yj + 1) * (uint64_t)sh - a; /* units before that row's end */
        uint64_t wy = in < (uint64_t)dh ? in : (uint64_t)dh; /* weight in row yj; dh - wy in yj + 1 */
        memset(row, 0, nx * sizeof *row);
        for (i = 0; i < sw; i++) {
            uint64_t ax = (uint64_t)i * (uint64_t)dw;
            size_t x = (size_t)(ax / (uint64_t)sw);
            uint64_t inx = (uint64_t)(x + 1) * (uint64_t)sw - ax;
            uint64_t wx = inx < (uint64_t)dw ? inx : (uint64_t)dw;
            const uint8_t *p = s + 3 * (size_t)i;
            uint64_t *r = row + 3 * x;
            r[0] += wx * p[0];
            r[1] += wx * p[1];
            r[2] += wx * p[2];
            if (wx < (uint64_t)dw) { /* the rest of this column lies in thumbnail column x + 1 */
                r[3] += ((uint64_t)dw - wx) * p[0];
                r[4] += ((uint64_t)dw - wx) * p[1];
                r[5] += ((uint64_t)dw - wx) * p[2];
            }
        }
        /* rows arrive in order and dh <= sh: yj is y or y + 1 */
        if (yj > y) {
            for (k = 0; k < nx; k++) dst[(size_t)y * nx + k] = (uint8_t)((acc0[k] + total / 2) / total);
            t = acc0;
            acc0 = acc1;
            acc1 = t;
            memset(acc1, 0, nx * sizeof *acc1);
            y = yj;
        }
        for (k = 0; k < nx; k++) acc0[k] += wy * row[k];
        if (wy < (uint64_t)dh)
            for (k = 0; k < nx; k++) acc1[k] += ((uint64_t)dh - wy) * row[k];
    }
    for (k = 0; k < nx; k++) dst[(size_t)y * nx + k] = (uint8_t)((acc0[k] + total / 2) / total);
    free(row);
    free(acc0);
    free(acc1);
    return 0;
}

int thumb_jpeg(uint8_t **out, size_t *size, const uint8_t *rgb, int w, int h, int quality, char *err,
               size_t errsize)
{
    tjhandle tj = tjInitCompress();
    unsigned char *buf = NULL;
    unsigned long n = 0;
    *out = NULL;
    *size = 0;
    if (!tj) {
        snprintf(err, errsize, "JPEG encoder: %s", tjGetErrorStr2(NULL));
        return -1;
    }
    if (tjCompress2(tj, rgb, w, 0, h, TJPF_RGB, &buf, &n, TJSAMP_420, quality, TJFLAG_ACCURATEDCT) != 0) {
        snprintf(err, errsize, "JPEG encoder: %s", tjGetErrorStr2(tj));
        tjFree(buf);
        tjDestroy(tj);
        return -1;
    }
    tjDestroy(tj);
    /* a malloc'd copy: the caller frees it with free() (tjFree is not free) */
    if (!(*out = malloc(n ? n : 1))) {
        tjFree(buf);
        snprintf(err, errsize, "out of memory");
        return -1;
    }
    memcpy(*out, buf, n);
    *size = n;
    tjFree(buf);
    return 0;
}

/* ------------------------------------------------------------------ cache */

typedef struct tentry {
    uint8_t sha[32];
    int n;
    uint8_t *data; /* (size) bytes of JPEG, owned */
    size_t size;
    struct tentry *hnext;       /* the hash chain */
    struct tentry *prev, *next; /* the recency list: head most recent */
} tentry_t;

struct thumb_cache {
    pthread_mutex_t mu;
    size_t max_bytes, bytes, count;
    tentry_t **buckets;
    size_t nbuckets; /* a power of two */
    tentry_t *head, *tail;
    atomic_ulong hits, misses, evictions;
};

static size_t slot(const thumb_cache_t *c, const uint8_t sha[32], int n)
{
    uint64_t h;
    memcpy(&h, sha, sizeof h); /* a SHA-256 is already uniform */
    h ^= (uint64_t)n * 0x9e3779b97f4a7c15ull;
    return (size_t)(h ^ (h >> 29)) & (c->nbuckets - 1);
}

thumb_cache_t *thumb_cache_new(size_t max_bytes)
{
    thumb_cache_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->nbuckets = 256;
    if (!(c->buckets = calloc(c->nbuckets, sizeof *c->buckets))) {
        free(c);
        return NULL;
    }
    c->max_bytes = max_bytes;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void thumb_cache_free(thumb_cache_t *c)
{
    tentry_t *e, *next;
    if (!c) return;
    for (e = c->head; e; e = next) {
        next = e->next;
        free(e->data);
        free(e);
    }
    free(c->buckets);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static tentry_t **find(thumb_cache_t *c, const uint8_t sha[32], int n)
{
    tentry_t **pp = &c->buckets[slot(c, sha, n)];
    while (*pp && ((*pp)->n != n || memcmp((*pp)->sha, sha, 32))) pp = &(*pp)->hnext;
    return pp;
}

static void unlink_lru(thumb_cache_t *c, tentry_t *e)
{
    if (e->prev) e->prev->next = e->next;
    else c->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(thumb_cache_t *c, tentry_t *e)
{
    e->prev = NULL;
    e->next = c->head;
    if (c->head) c->head->prev = e;
    c->head = e;
    if (!c->tail) c->tail = e;
}

static void drop(thumb_cache_t *c, tentry_t *e)
{
    tentry_t **pp = find(c, e->sha, e->n);
    *pp = e->hnext;
    unlink_lru(c, e);
    c->bytes -= e->size;
    c->count--;
    free(e->data);
    free(e);
}

int thumb_cache_get(thumb_cache_t *c, const uint8_t sha[32], int n, uint8_t **data, size_t *size)
{
    tentry_t *e;
    *data = NULL;
    *size = 0;
    if (!c) return 0;
    pthread_mutex_lock(&c->mu);
    e = *find(c, sha, n);
    if (e && (*data = malloc(e->size ? e->size : 1))) {
        memcpy(*data, e->data, e->size);
        *size = e->size;
        unlink_lru(c, e);
        push_front(c, e);
    }
    pthread_mutex_unlock(&c->mu);
    atomic_fetch_add(*data ? &c->hits : &c->misses, 1);
    return *data != NULL;
}

void thumb_cache_put(thumb_cache_t *c, const uint8_t sha[32], int n, const uint8_t *data, size_t size)
{
    tentry_t *e, **pp;
    if (!c || size > c->max_bytes) return;
    if (!(e = calloc(1, sizeof *e)) || !(e->data = malloc(size ? size : 1))) {
        free(e);
        return; /* not cached: the next request makes it again */
    }
    memcpy(e->sha, sha, 32);
    e->n = n;
    memcpy(e->data, data, size);
    e->size = size;
    pthread_mutex_lock(&c->mu);
    if (*(pp = find(c, sha, n))) drop(c, *pp); /* made twice by racing requests: keep the newer */
    while (c->bytes + size > c->max_bytes && c->tail) {
        drop(c, c->tail);
        atomic_fetch_add(&c->evictions, 1);
    }
    if (c->count + 1 > c->nbuckets) { /* keep chains short: twice the buckets, entries rehashed */
        size_t nb = 2 * c->nbuckets, i;
        tentry_t **b = calloc(nb, sizeof *b);
        if (b) {
            tentry_t **old = c->buckets;
            size_t ob = c->nbuckets;
            c->buckets = b;
            c->nbuckets = nb;
            for (i = 0; i < ob; i++) {
                tentry_t *x = old[i], *nx;
                for (; x; x = nx) {
                    size_t s = slot(c, x->sha, x->n);
                    nx = x->hnext;
                    x->hnext = b[s];
                    b[s] = x;
                }
            }
            free(old);
        }
    }
    pp = &c->buckets[slot(c, sha, n)];
    e->hnext = *pp;
    *pp = e;
    push_front(c, e);
    c->bytes += size;
    c->count++;
    pthread_mutex_unlock(&c->mu);
}

void thumb_cache_stats(thumb_cache_t *c, thumb_stats_t *st)
{
    memset(st, 0, sizeof *st);
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    st->bytes = c->bytes;
    st->entries = c->count;
    pthread_mutex_unlock(&c->mu);
    st->max_bytes = c->max_bytes;
    st->hits = atomic_load(&c->hits);
    st->misses = atomic_load(&c->misses);
    st->evictions = atomic_load(&c->evictions);
}
