/* The table cache of a device context (gpu/tcache.h). */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpu/gpu.h"
#include "gpu/tcache.h"

typedef struct tcache_ent {
    void *obj;             /* NULL: a free entry */
    tcache_drop_fn drop;
    uint64_t serial, used;
    unsigned pins;         /* tcache_pin count: never dropped while > 0 */
    pgpu_fam fam;
    tcache_kind kind;
} tcache_ent_t;

struct pgpu_tcache {
    tcache_ent_t *e;
    size_t n, cap;
    uint64_t clock;
};

static tcache_ent_t *find(const patina_gpu_t *g, const void *obj)
{
    struct pgpu_tcache *t = g->tcache;
    for (size_t i = 0; t && obj && i < t->n; i++)
        if (t->e[i].obj == obj) return &t->e[i];
    return NULL;
}

patina_status tcache_add(patina_gpu_t *g, pgpu_fam fam, tcache_kind kind, uint64_t serial, void *obj,
                         tcache_drop_fn drop)
{
    struct pgpu_tcache *t = g->tcache;
    tcache_ent_t *x = find(g, obj);
    if (!t) {
        if (!(t = (struct pgpu_tcache *)calloc(1, sizeof *t)))
            return patina__fail(PATINA_E_NOMEM, "gpu: out of memory for the table cache");
        g->tcache = t;
    }
    for (size_t i = 0; !x && i < t->n; i++)
        if (!t->e[i].obj) x = &t->e[i];
    if (!x) {
        if (t->n == t->cap) {
            const size_t cap = t->cap ? 2 * t->cap : 16;
            tcache_ent_t *e = (tcache_ent_t *)realloc(t->e, cap * sizeof *e);
            if (!e) return patina__fail(PATINA_E_NOMEM, "gpu: out of memory for the table cache");
            t->e = e;
            t->cap = cap;
        }
        x = &t->e[t->n++];
    }
    x->obj = obj;
    x->drop = drop;
    x->serial = serial;
    x->fam = fam;
    x->kind = kind;
    x->pins = 0;
    x->used = ++t->clock;
    return PATINA_OK;
}

void *tcache_find(const patina_gpu_t *g, pgpu_fam fam, uint64_t serial)
{
    const struct pgpu_tcache *t = g->tcache;
    for (size_t i = 0; t && i < t->n; i++)
        if (t->e[i].obj && t->e[i].fam == fam && t->e[i].serial == serial) return t->e[i].obj;
    return NULL;
}

void tcache_remove(patina_gpu_t *g, const void *obj)
{
    tcache_ent_t *x = find(g, obj);
    if (x) memset(x, 0, sizeof *x);
}

void tcache_touch(patina_gpu_t *g, const void *obj)
{
    tcache_ent_t *x = find(g, obj);
    if (x) x->used = ++g->tcache->clock;
}

void tcache_pin(patina_gpu_t *g, const void *obj, int pin)
{
    tcache_ent_t *x = find(g, obj);
    if (!x) return;
    if (pin) x->pins++;
    else if (x->pins) x->pins--;
}

void *tcache_lru(patina_gpu_t *g, pgpu_fam fam, const void *keep)
{
    struct pgpu_tcache *t = g->tcache;
    const tcache_ent_t *best = NULL;
    for (size_t i = 0; t && i < t->n; i++) {
        const tcache_ent_t *x = &t->e[i];
        if (x->obj && x->obj != keep && !x->pins && (fam == PGPU_NFAM || x->fam == fam) && (!best || x->used < best->used))
            best = x;
    }
    return best ? best->obj : NULL;
}

size_t tcache_count(const patina_gpu_t *g, pgpu_fam fam)
{
    const struct pgpu_tcache *t = g->tcache;
    size_t c = 0;
    for (size_t i = 0; t && i < t->n; i++) c += t->e[i].obj && (fam == PGPU_NFAM || t->e[i].fam == fam);
    return c;
}

void patina_gpu__cached(patina_gpu_t *g, size_t *search, size_t *sqfd)
{
    if (search) *search = g ? tcache_count(g, PGPU_FAM_SEARCH) : 0;
    if (sqfd) *sqfd = g ? tcache_count(g, PGPU_FAM_SQFD) : 0;
}

void tcache_close(patina_gpu_t *g)
{
    if (!g->tcache) return;
    free(g->tcache->e);
    free(g->tcache);
    g->tcache = NULL;
}

patina_status tcache_dev_alloc(patina_gpu_t *g, pgpu_fam fam, const void *keep, void **p, size_t bytes,
                               const char *tag)
{
    for (;;) {
        patina_status s = pgpu_dev_alloc(g, p, bytes, fam, tag);
        void *victim;
        if (s != PATINA_E_LIMIT && s != PATINA_E_NOMEM) return s;
        if (!(victim = tcache_lru(g, PGPU_NFAM, keep))) return s;
        find(g, victim)->drop(g, victim);
        tcache_remove(g, victim); /* in case drop did not */
        patina_clear_error();
    }
}

void tcache_perm(uint32_t *perm, size_t n, uint64_t seed)
{
    uint64_t x = seed ^ n;
    size_t i;
    for (i = 0; i < n; i++) perm[i] = (uint32_t)i;
    for (i = n; i > 1; i--) {
        size_t j;
        uint32_t t;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        j = (size_t)(x % i);
        t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

patina_status tcache_chunk_buffers(patina_gpu_t *g, pgpu_fam fam, int evict, int nf, const size_t *per, size_t pad,
                                   void **const *bufs, size_t *units, size_t min_units, const char *tag)
{
    size_t want = *units;
    for (;;) {
        patina_status s = PATINA_OK;
        for (int i = 0; i < 2 * nf && s == PATINA_OK; i++) {
            const size_t bytes = (want + pad) * per[i % nf];
            s = evict ? tcache_dev_alloc(g, fam, NULL, bufs[i], bytes, tag) : pgpu_dev_alloc(g, bufs[i], bytes, fam, tag);
        }
        if (s == PATINA_OK) {
            *units = want;
            return PATINA_OK;
        }
        for (int i = 0; i < 2 * nf; i++) pgpu_free_n(g, 1, bufs[i]);
        if ((s != PATINA_E_LIMIT && s != PATINA_E_NOMEM) || want / 2 < min_units) return s;
        patina_clear_error();
        want /= 2;
    }
}

patina_status tcache_stream_init(tcache_stream_t *s)
{
    for (int i = 0; i < 4; i++) {
        cudaEvent_t ev;
        if (s->ev[i]) continue;
        if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess)
            return pgpu_fail((int)cudaGetLastError(), "gpu: streaming events", __FILE__, __LINE__);
        s->ev[i] = ev;
    }
    return PATINA_OK;
}

void tcache_stream_free(tcache_stream_t *s)
{
    for (int i = 0; i < 4; i++)
        if (s->ev[i]) (void)cudaEventDestroy((cudaEvent_t)s->ev[i]);
    memset(s, 0, sizeof *s);
}

void *tcache_copy_stream(patina_gpu_t *g) { return pgpu_stream(g, 1); }

int tcache_chunk_send(patina_gpu_t *g, const tcache_stream_t *s, size_t j, void *cs, int nf, void *const *dst,
                      const void *const *src, const size_t *bytes)
{
    cudaStream_t us = (cudaStream_t)tcache_copy_stream(g);
    cudaError_t e = cudaSuccess;
    if (j >= 2) e = cudaStreamWaitEvent(us, (cudaEvent_t)s->ev[2 + (j & 1)], 0); /* chunk j - 2 left the buffer */
    for (int f = 0; f < nf && e == cudaSuccess; f++)
        e = cudaMemcpyAsync(dst[f], src[f], bytes[f], cudaMemcpyHostToDevice, us);
    if (e == cudaSuccess) e = cudaEventRecord((cudaEvent_t)s->ev[j & 1], us);
    if (e == cudaSuccess) e = cudaStreamWaitEvent((cudaStream_t)cs, (cudaEvent_t)s->ev[j & 1], 0);
    return (int)e;
}

int tcache_chunk_done(const tcache_stream_t *s, size_t j, void *cs)
{
    return (int)cudaEventRecord((cudaEvent_t)s->ev[2 + (j & 1)], (cudaStream_t)cs);
}

/* ---- the pinned host tier ---- */

void tcache_host_free(patina_gpu_t *g, tcache_host_t *h)
{
    for (int f = 0; f < h->nf; f++) pgpu_free(g, h->p[f]);
    memset(h, 0, sizeof *h);
}

patina_status tcache_host_reserve(patina_gpu_t *g, tcache_host_t *h, pgpu_fam fam, int nf, const size_t *per,
                                  size_t cap, const char *const *tag)
{
    tcache_host_free(g, h);
    if (nf < 1 || nf > TCACHE_HOST_FIELDS)
        return patina__fail(PATINA_E_INTERNAL, "gpu: a host tier of %d fields (at most %d)", nf, TCACHE_HOST_FIELDS);
    h->nf = nf;
    for (int f = 0; f < nf; f++) {
        patina_status s;
        h->per[f] = per[f];
        if ((s = pgpu_pin_alloc(g, &h->p[f], cap * per[f], fam, tag[f])) != PATINA_OK) {
            tcache_host_free(g, h);
            return s;
        }
    }
    h->cap = cap;
    return PATINA_OK;
}

size_t tcache_host_append(tcache_host_t *h, size_t m, const void *const *src)
{
    const size_t u = h->n;
    if (m > h->cap - h->n) return (size_t)-1;
    if (src)
        for (int f = 0; f < h->nf; f++)
            if (m) memcpy((unsigned char *)h->p[f] + u * h->per[f], src[f], m * h->per[f]);
    h->n += m;
    return u;
}

void *tcache_host_at(const tcache_host_t *h, int f, size_t u) { return (unsigned char *)h->p[f] + u * h->per[f]; }
