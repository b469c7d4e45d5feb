/* The pivot tables' search on the CPU (include/patina/pivots.h): a query's
 * view (its pivot distances and slack), the metric and ptolemaic lower
 * bounds (the slack is explained in pivots.c), the filtered k-NN (blocks of
 * candidates in bound order, the paper's) and range search, the batch entry
 * points that run a batch on the CPU or hand it to the GPU strategies, and
 * the tests' hooks (search/pivots.h).
 *
 * Not here: building and updating the table (pivots.c), the GPU strategies
 * (pivots_gpu.c), persistence (pivots_store.c), the distance (algo/sqfd.h). */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/hits.h"
#include "algo/sqfd.h"
#include "core/context.h"
#include "core/internal.h"
#include "patina/pivots.h"
#include "search/pivots.h"
#include "search/pivots_internal.h"

/* ----------------------------------------------------------------- search */

/* Hits ordered by distance, then id; NaN after every number. */
static int worse(double d1, uint64_t i1, double d2, uint64_t i2)
{
    if (isnan(d1) || isnan(d2)) return isnan(d1) && (!isnan(d2) || i1 > i2);
    return d1 > d2 || (d1 == d2 && i1 > i2);
}

int patina__pivot_hit_cmp(const void *x, const void *y)
{
    const patina_hit_t *a = x, *b = y;
    if (worse(a->distance, a->id, b->distance, b->id)) return 1;
    if (worse(b->distance, b->id, a->distance, a->id)) return -1;
    return 0;
}

/* Bounded max-heap of the k best (worst on top). */
typedef struct heap {
    patina_hit_t *h;
    size_t n, k;
} heap_t;

static void heap_push(heap_t *hp, double d, uint64_t id)
{
    size_t i;
    if (hp->k == 0) return;
    if (hp->n == hp->k) {
        /* better than the worst kept: it takes the top, which sinks */
        if (!worse(hp->h[0].distance, hp->h[0].id, d, id)) return;
        i = 0;
        for (;;) {
            size_t l = 2 * i + 1, r = l + 1, m = i;
            double md = d;
            uint64_t mid = id;
            if (l < hp->n && worse(hp->h[l].distance, hp->h[l].id, md, mid)) {
                m = l;
                md = hp->h[l].distance;
                mid = hp->h[l].id;
            }
            if (r < hp->n && worse(hp->h[r].distance, hp->h[r].id, md, mid)) m = r;
            if (m == i) break;
            hp->h[i] = hp->h[m];
            i = m;
        }
        hp->h[i] = (patina_hit_t){id, d};
        return;
    }
    i = hp->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!worse(d, id, hp->h[p].distance, hp->h[p].id)) break;
        hp->h[i] = hp->h[p];
        i = p;
    }
    hp->h[i] = (patina_hit_t){id, d};
}

/* The radius a k-NN search may prune with: +inf until k hits (or with a
 * NaN among them), then the k-th distance. */
static double heap_radius(const heap_t *hp)
{
    if (hp->n < hp->k || isnan(hp->h[0].distance)) return INFINITY;
    return hp->h[0].distance;
}

static patina_status check_query(const patina_pivot_index_t *pi, const float *q, size_t i)
{
    char what[48];
    snprintf(what, sizeof what, "search: query %zu", i);
    return patina__pivot_sqfd_record_check(q, pi->dim, what);
}

static void view_init(const patina_pivot_index_t *pi, qview_t *v, const float *q, double *a, size_t *dists)
{
    v->q = q;
    v->a = a;
    v->alo = v->ahi = NULL;
    v->usable = 1;
    v->sqq = sig_self(q);
    for (size_t i = 0; i < pi->np; i++) {
        a[i] = sig_sqfd_self(q, v->sqq, pi->precs + i * pi->dim, pi->pself[i]);
        if (!isfinite(a[i])) v->usable = 0;
    }
    *dists += pi->np;
    v->eps = patina__pivot_slack(pi, (size_t)q[0], patina__pivot_rec_weight(q));
}

/* One k-NN query's state while its blocks run (possibly on several threads). */
typedef struct kq {
    const patina_pivot_index_t *pi;
    qview_t v;
    patina_pivot_bound bound;
    lbent_t *ord;    /* (n) rows with their metric bound, in bound order */
    size_t base, end; /* the phase's entries of ord: [base, end) */
    size_t nblocks;
    _Atomic size_t next;
    _Atomic int stop;
    pthread_mutex_t mu;
    heap_t heap;
    double radius; /* heap_radius, under mu */
    size_t computed;
} kq_t;

int patina__pivot_lb_cmp(const void *x, const void *y)
{
    const lbent_t *a = x, *b = y;
    if (a->lb < b->lb) return -1;
    if (a->lb > b->lb) return 1;
    return (a->row > b->row) - (a->row < b->row);
}

/* One block of candidates in bound order. Each distance goes into the
 * shared heap at once and the radius is read again, so the next candidate
 * is tested against the k-th distance as it stands (an SQFD costs far more
 * than the lock). */
static void kq_block(kq_t *kq, size_t blk)
{
    const patina_pivot_index_t *pi = kq->pi;
    const size_t i0 = kq->base + blk * BLOCK, i1 = i0 + BLOCK < kq->end ? i0 + BLOCK : kq->end;
    size_t comp = 0;
    double R;
    pthread_mutex_lock(&kq->mu);
    R = patina__pivot_prune_radius(&kq->v, kq->radius);
    pthread_mutex_unlock(&kq->mu);
    for (size_t i = i0; i < i1; i++) {
        const size_t r = kq->ord[i].row;
        double d;
        if (kq->v.usable && kq->ord[i].lb > R) {
            atomic_store(&kq->stop, 1); /* every later row's bound is larger */
            break;
        }
        if (kq->v.usable && kq->bound == PATINA_BOUND_PTOLEMAIC &&
            patina__pivot_ptolemy_excludes(pi, &kq->v, r, R))
            continue;
        d = sig_sqfd_self(kq->v.q, kq->v.sqq, pi->recs + r * pi->dim, pi->self[r]);
        comp++;
        pthread_mutex_lock(&kq->mu);
        heap_push(&kq->heap, d, pi->ids[r]);
        kq->radius = heap_radius(&kq->heap);
        R = patina__pivot_prune_radius(&kq->v, kq->radius);
        pthread_mutex_unlock(&kq->mu);
    }
    pthread_mutex_lock(&kq->mu);
    kq->computed += comp;
    pthread_mutex_unlock(&kq->mu);
}

static void kq_task(void *arg, size_t t, int worker)
{
    kq_t *kq = arg;
    (void)t;
    (void)worker;
    for (;;) {
        size_t b;
        if (atomic_load(&kq->stop)) return;
        b = atomic_fetch_add(&kq->next, 1);
        if (b >= kq->nblocks) return;
        kq_block(kq, b);
    }
}

void patina__pivot_lb_task(void *arg, size_t t, int worker)
{
    const lb_job_t *j = arg;
    const size_t r0 = t * ROW_CHUNK, r1 = r0 + ROW_CHUNK < j->pi->n ? r0 + ROW_CHUNK : j->pi->n;
    (void)worker;
    for (size_t r = r0; r < r1; r++) j->ent[r] = (lbent_t){patina__pivot_metric_lb(j->pi, j->v, r), r};
}

/* Puts the m smallest entries of e (n) by lb_cmp in front, in no order
 * (quickselect, median-of-three pivots; entries are distinct: ties of the
 * bound are ordered by row). */
void patina__pivot_select_front(lbent_t *e, size_t n, size_t m)
{
    size_t lo = 0, hi = n;
    if (m == 0 || m >= n) return;
    while (hi - lo > 16) {
        lbent_t t, piv;
        size_t mid = lo + (hi - lo) / 2, i = lo, j = hi - 1;
        /* median of three to e[mid] */
        if (patina__pivot_lb_cmp(&e[mid], &e[lo]) < 0) t = e[mid], e[mid] = e[lo], e[lo] = t;
        if (patina__pivot_lb_cmp(&e[hi - 1], &e[lo]) < 0) t = e[hi - 1], e[hi - 1] = e[lo], e[lo] = t;
        if (patina__pivot_lb_cmp(&e[hi - 1], &e[mid]) < 0) t = e[hi - 1], e[hi - 1] = e[mid], e[mid] = t;
        piv = e[mid];
        /* Hoare partition: [lo, j] <= piv <= [j + 1, hi) */
        for (;;) {
            while (patina__pivot_lb_cmp(&e[i], &piv) < 0) i++;
            while (patina__pivot_lb_cmp(&e[j], &piv) > 0) j--;
            if (i >= j) break;
            t = e[i], e[i] = e[j], e[j] = t;
            i++;
            j--;
        }
        /* the m-th smallest lies in [lo, j] or beyond it */
        {
            const size_t olo = lo, ohi = hi;
            if (m <= j + 1) hi = j + 1;
            else lo = j + 1;
            if (lo == olo && hi == ohi) break; /* no progress: sort what is left */
        }
    }
    qsort(e + lo, hi - lo, sizeof *e, patina__pivot_lb_cmp);
}

/* Runs the blocks of ord [base, end) on the pool. */
static void kq_phase(kq_t *kq, patina_pool_t *pool, size_t base, size_t end)
{
    kq->base = base;
    kq->end = end;
    kq->nblocks = (end - base + BLOCK - 1) / BLOCK;
    atomic_store(&kq->next, 0);
    patina_pool_run(pool, (size_t)patina__pivot_pool_threads(pool), kq_task, kq);
}

/* One k-NN query (hits (k) sorted, *count filled); pool NULL: this thread. */
patina_status patina__pivot_knn_one(const patina_pivot_index_t *pi, patina_pool_t *pool, const float *q, size_t k,
                                    patina_pivot_bound bound, patina_hit_t *hits, size_t *count, size_t st[3])
{
    kq_t kq;
    double *a = malloc(pi->np * sizeof *a);
    memset(&kq, 0, sizeof kq);
    kq.pi = pi;
    kq.bound = bound;
    kq.heap.k = k < pi->n ? k : pi->n;
    kq.heap.h = malloc((kq.heap.k ? kq.heap.k : 1) * sizeof *kq.heap.h);
    kq.ord = malloc(pi->n * sizeof *kq.ord);
    if (!a || !kq.heap.h || !kq.ord) {
        free(a);
        free(kq.heap.h);
        free(kq.ord);
        return patina__pivot_nomem("k-NN query");
    }
    view_init(pi, &kq.v, q, a, &st[0]);
    if (bound == PATINA_BOUND_NONE) kq.v.usable = 0;
    kq.radius = INFINITY;
    pthread_mutex_init(&kq.mu, NULL);
    if (kq.v.usable) {
        /* Rows in metric-bound order, without sorting them all: first the
         * m smallest bounds (m >= k, so their distances give a finite k-th
         * distance), then of the others only those whose bound is within
         * the radius that left, sorted. Rows cut there count as pruned:
         * the radius only shrinks, so the second phase would skip them. */
        const size_t m = kq.heap.k > BLOCK ? kq.heap.k : BLOCK;
        lb_job_t j = {pi, &kq.v, kq.ord};
        patina_pool_run(pool, (pi->n + ROW_CHUNK - 1) / ROW_CHUNK, patina__pivot_lb_task, &j);
        if (m >= pi->n) {
            qsort(kq.ord, pi->n, sizeof *kq.ord, patina__pivot_lb_cmp);
            kq_phase(&kq, pool, 0, pi->n);
        } else {
            size_t w = m;
            double R;
            patina__pivot_select_front(kq.ord, pi->n, m);
            qsort(kq.ord, m, sizeof *kq.ord, patina__pivot_lb_cmp);
            kq_phase(&kq, pool, 0, m);
            if (!atomic_load(&kq.stop)) {
                R = patina__pivot_prune_radius(&kq.v, kq.radius);
                for (size_t i = m; i < pi->n; i++)
                    if (!(kq.ord[i].lb > R)) kq.ord[w++] = kq.ord[i];
                qsort(kq.ord + m, w - m, sizeof *kq.ord, patina__pivot_lb_cmp);
                kq_phase(&kq, pool, m, w);
            }
        }
    } else {
        for (size_t r = 0; r < pi->n; r++) kq.ord[r] = (lbent_t){0.0, r};
        kq_phase(&kq, pool, 0, pi->n);
    }
    pthread_mutex_destroy(&kq.mu);
    qsort(kq.heap.h, kq.heap.n, sizeof *kq.heap.h, patina__pivot_hit_cmp);
    memcpy(hits, kq.heap.h, kq.heap.n * sizeof *hits);
    *count = kq.heap.n;
    st[1] += pi->n - kq.computed;
    st[2] += kq.computed;
    free(a);
    free(kq.heap.h);
    free(kq.ord);
    return PATINA_OK;
}

/* Range: rows in chunks, hits per chunk, joined and sorted. */
typedef struct rq {
    const patina_pivot_index_t *pi;
    qview_t v;
    patina_pivot_bound bound;
    double radius, R;
    patina_hit_t **lists; /* (nchunks) */
    size_t *lens;
    _Atomic size_t computed;
    _Atomic int failed;
} rq_t;

static void rq_task(void *arg, size_t t, int worker)
{
    rq_t *rq = arg;
    const patina_pivot_index_t *pi = rq->pi;
    const size_t r0 = t * ROW_CHUNK, r1 = r0 + ROW_CHUNK < pi->n ? r0 + ROW_CHUNK : pi->n;
    patina_hit_t *l = NULL;
    size_t n = 0, cap = 0, comp = 0;
    (void)worker;
    for (size_t r = r0; r < r1; r++) {
        double d;
        if (rq->v.usable &&
            (patina__pivot_metric_lb(pi, &rq->v, r) > rq->R ||
             (rq->bound == PATINA_BOUND_PTOLEMAIC && patina__pivot_ptolemy_excludes(pi, &rq->v, r, rq->R))))
            continue;
        d = sig_sqfd_self(rq->v.q, rq->v.sqq, pi->recs + r * pi->dim, pi->self[r]);
        comp++;
        if (!(d <= rq->radius)) continue;
        if (n == cap) {
            patina_hit_t *t2 = realloc(l, (cap = cap ? 2 * cap : 16) * sizeof *l);
            if (!t2) {
                atomic_store(&rq->failed, 1);
                break;
            }
            l = t2;
        }
        l[n++] = (patina_hit_t){pi->ids[r], d};
    }
    rq->lists[t] = l;
    rq->lens[t] = n;
    atomic_fetch_add(&rq->computed, comp);
}

patina_status patina__pivot_range_one(const patina_pivot_index_t *pi, patina_pool_t *pool, const float *q,
                                      double radius, patina_pivot_bound bound, size_t max_hits, patina_hit_t **hits,
                                      size_t *count, size_t st[3])
{
    const size_t nch = (pi->n + ROW_CHUNK - 1) / ROW_CHUNK;
    rq_t rq;
    double *a = malloc(pi->np * sizeof *a);
    patina_hit_t *all = NULL;
    size_t tot = 0, at = 0, c;
    patina_status s = PATINA_OK;
    *hits = NULL;
    *count = 0;
    memset(&rq, 0, sizeof rq);
    rq.lists = calloc(nch ? nch : 1, sizeof *rq.lists);
    rq.lens = calloc(nch ? nch : 1, sizeof *rq.lens);
    if (!a || !rq.lists || !rq.lens) {
        free(a);
        free(rq.lists);
        free(rq.lens);
        return patina__pivot_nomem("range query");
    }
    rq.pi = pi;
    rq.bound = bound;
    view_init(pi, &rq.v, q, a, &st[0]);
    if (bound == PATINA_BOUND_NONE) rq.v.usable = 0;
    rq.radius = radius;
    rq.R = patina__pivot_prune_radius(&rq.v, radius);
    patina_pool_run(pool, nch, rq_task, &rq);
    for (c = 0; c < nch; c++) tot += rq.lens[c];
    if (atomic_load(&rq.failed)) s = patina__pivot_nomem("range hits");
    else if (tot && !(all = malloc(tot * sizeof *all))) s = patina__pivot_nomem("range hits");
    for (c = 0; c < nch; c++) {
        if (s == PATINA_OK && rq.lens[c]) memcpy(all + at, rq.lists[c], rq.lens[c] * sizeof *all);
        at += rq.lens[c];
        free(rq.lists[c]);
    }
    free(rq.lists);
    free(rq.lens);
    free(a);
    if (s != PATINA_OK) return s;
    if (tot > 1) qsort(all, tot, sizeof *all, patina__pivot_hit_cmp);
    if (max_hits && tot > max_hits) tot = max_hits;
    *hits = all;
    *count = tot;
    st[2] += atomic_load(&rq.computed);
    st[1] += pi->n - atomic_load(&rq.computed);
    return PATINA_OK;
}

/* ------------------------------------------------------ batch entry points */

static void batch_task(void *arg, size_t q, int worker)
{
    batch_t *b = arg;
    const float *qr = b->queries + q * b->pi->dim;
    (void)worker;
    if (b->lists)
        b->sts[q] = patina__pivot_range_one(b->pi, NULL, qr, b->radius, b->bound, b->max_hits, &b->lists[q],
                                            &b->counts[q], b->st[q]);
    else
        b->sts[q] = patina__pivot_knn_one(b->pi, NULL, qr, b->k, b->bound, b->hits + q * b->k, &b->counts[q], b->st[q]);
}

static patina_status run_batch(patina_context_t *ctx, batch_t *b, size_t nq, patina_search_stats_t *stats)
{
    patina_pool_t *pool;
    patina_status s = PATINA_OK;
    int own;
    size_t q;
    b->st = calloc(nq, sizeof *b->st);
    b->sts = calloc(nq, sizeof *b->sts);
    if (!b->st || !b->sts) {
        free(b->st);
        free(b->sts);
        return patina__pivot_nomem("queries");
    }
    if ((s = patina__workers_begin(ctx, 0, &pool, &own)) != PATINA_OK) {
        free(b->st);
        free(b->sts);
        return s;
    }
    if (nq >= (size_t)patina__pivot_pool_threads(pool)) {
        /* one query per task, each on one thread */
        patina_pool_run(pool, nq, batch_task, b);
    } else {
        /* each query spread over the threads */
        for (q = 0; q < nq; q++) {
            const float *qr = b->queries + q * b->pi->dim;
            b->sts[q] = b->lists ? patina__pivot_range_one(b->pi, pool, qr, b->radius, b->bound, b->max_hits,
                                                           &b->lists[q], &b->counts[q], b->st[q])
                                 : patina__pivot_knn_one(b->pi, pool, qr, b->k, b->bound, b->hits + q * b->k,
                                                         &b->counts[q], b->st[q]);
        }
    }
    patina__workers_end(ctx, pool, own);
    for (q = 0; q < nq && s == PATINA_OK; q++) s = b->sts[q];
    if (s == PATINA_OK && stats) {
        stats->cpu = nq;
        for (q = 0; q < nq; q++) {
            stats->pivot_dists += b->st[q][0];
            stats->pruned += b->st[q][1];
            stats->computed += b->st[q][2];
        }
    }
    free(b->st);
    free(b->sts);
    return s;
}

static patina_status search_args(const patina_pivot_index_t *pi, const void *queries, size_t nq,
                                 const patina_pivot_search_opts_t *in, patina_pivot_search_opts_t *o)
{
    patina_pivot_search_opts_init(o);
    if (in) *o = *in;
    if (o->stats) memset(o->stats, 0, sizeof *o->stats);
    if (!pi || (nq && !queries)) return patina__fail(PATINA_E_INVALID, "search: null argument");
    if (o->bound != PATINA_BOUND_PTOLEMAIC && o->bound != PATINA_BOUND_METRIC && o->bound != PATINA_BOUND_NONE)
        return patina__fail(PATINA_E_INVALID, "search: unknown pivot bound %d", (int)o->bound);
    if (o->strategy != PATINA_PIVOT_CPU && o->strategy != PATINA_PIVOT_PIPELINE && o->strategy != PATINA_PIVOT_GPU &&
        o->strategy != PATINA_PIVOT_AUTO)
        return patina__fail(PATINA_E_INVALID, "search: unknown pivot strategy %d", (int)o->strategy);
    for (size_t q = 0; q < nq; q++) PATINA_TRY(check_query(pi, (const float *)queries + q * pi->dim, q));
    return PATINA_OK;
}

/* Empties a batch's results: k-NN hits padded, range lists freed. */
static void batch_reset(batch_t *b, size_t nq)
{
    for (size_t q = 0; q < nq; q++) {
        if (b->lists) {
            free(b->lists[q]);
            b->lists[q] = NULL;
        } else {
            for (size_t i = 0; i < b->k; i++) b->hits[q * b->k + i] = (patina_hit_t){0, INFINITY};
        }
        b->counts[q] = 0;
    }
}

/* Runs a batch through the strategy of o (PATINA_PIVOT_AUTO resolved
 * here); on failure the results are empty. */
static patina_status run_strategy(patina_context_t *ctx, batch_t *b, size_t nq, const patina_pivot_search_opts_t *o)
{
    patina_status s;
    if (o->strategy == PATINA_PIVOT_CPU ||
        (o->strategy == PATINA_PIVOT_AUTO && (!ctx || b->pi->n < PATINA_PIVOT_AUTO_GPU_ROWS))) {
        s = run_batch(ctx, b, nq, o->stats);
    } else {
        s = patina__pivot_gpu_batch(
            ctx, b, nq, o->strategy == PATINA_PIVOT_AUTO ? PATINA_PIVOT_GPU : o->strategy, o->stats);
        if (s == PATINA_E_UNAVAILABLE && o->strategy == PATINA_PIVOT_AUTO) { /* no GPU for it: the CPU's */
            patina_clear_error();
            batch_reset(b, nq);
            if (o->stats) memset(o->stats, 0, sizeof *o->stats);
            s = run_batch(ctx, b, nq, o->stats);
        }
    }
    if (s != PATINA_OK) batch_reset(b, nq);
    return s;
}

/* One search: k-NN (range 0: hits (nq, k), padded) or range (lists[q]
 * malloc'd, at most the options' max_hits), each checking its arguments
 * in its own order. */
static patina_status pivot_search_unlocked(patina_context_t *ctx, const patina_pivot_index_t *pi,
                                           const void *queries, size_t nq, int range, size_t k, double radius,
                                           const patina_pivot_search_opts_t *opts, patina_hit_t *hits,
                                           patina_hit_t **lists, size_t *counts)
{
    patina_pivot_search_opts_t o;
    batch_t b;
    if (!range) {
        PATINA_TRY(patina_options_check(PATINA_OPTIONS_SEARCH, "k", (double)k));
        if (nq && (!hits || !counts)) return patina__fail(PATINA_E_INVALID, "search: null argument");
    } else {
        if (nq && (!lists || !counts)) return patina__fail(PATINA_E_INVALID, "search: null argument");
        for (size_t q = 0; q < nq; q++) {
            lists[q] = NULL;
            counts[q] = 0;
        }
        PATINA_TRY(patina_options_check(PATINA_OPTIONS_SEARCH, "range", radius));
    }
    PATINA_TRY(search_args(pi, queries, nq, opts, &o));
    if (nq == 0) return PATINA_OK;
    if (!range)
        for (size_t i = 0; i < nq * k; i++) hits[i] = (patina_hit_t){0, INFINITY};
    for (size_t q = 0; q < nq; q++) counts[q] = 0;
    if (pi->n == 0) {
        if (o.stats) o.stats->cpu = nq;
        return PATINA_OK;
    }
    memset(&b, 0, sizeof b);
    b.pi = pi;
    b.queries = queries;
    b.bound = o.bound;
    b.counts = counts;
    if (!range) {
        b.k = k;
        b.hits = hits;
    } else {
        b.radius = radius;
        b.max_hits = o.max_hits;
        b.lists = lists;
    }
    return run_strategy(ctx, &b, nq, &o);
}

/* ------------------------------------------------------------ test hooks */

void patina__pivot_bounds(const patina_pivot_index_t *pi, const float *q, size_t r, double d, double *metric,
                          double *ptolemaic, double *eps, double *R_of_d)
{
    double *a = malloc(pi->np * sizeof *a), best = 0.0;
    size_t dummy = 0;
    qview_t v;
    if (!a) {
        *metric = *ptolemaic = *eps = *R_of_d = NAN;
        return;
    }
    view_init(pi, &v, q, a, &dummy);
    *metric = patina__pivot_metric_lb(pi, &v, r);
    for (size_t i = 0; i < pi->np; i++)
        for (size_t j = i + 1; j < pi->np; j++) {
            const double *b = pi->tab + r * pi->np, e = v.eps;
            const double x = a[i] * b[j], y = a[j] * b[i];
            const double num = fabs(x - y) - e * (a[i] + a[j] + b[i] + b[j] + 2.0 * e) - REL * (x + y);
            const double lb = num / ((pi->pp[i * pi->np + j] + e) * (1.0 + REL));
            if (lb > best) best = lb;
        }
    *ptolemaic = best;
    *eps = v.eps;
    *R_of_d = patina__pivot_prune_radius(&v, d);
    free(a);
}

uint64_t patina__pivot_row_id(const patina_pivot_index_t *pi, size_t r) { return pi->ids[r]; }

patina_status patina_pivot_index_knn(patina_context_t *ctx, const patina_pivot_index_t *pi, const void *queries,
                                     size_t nq, size_t k, const patina_pivot_search_opts_t *opts,
                                     patina_hit_t *hits, size_t *counts)
{
    patina_status s;
    void *copy;
    if (!pi) return pivot_search_unlocked(ctx, pi, queries, nq, 0, k, 0.0, opts, hits, NULL, counts); /* its own error */
    PATINA_TRY(patina__rows(&queries, nq, pi->bytes, PATINA_ROW_ALIGN(sizeof(float)), &copy, "pivots: queries"));
    patina__pivot_rd(pi);
    s = pivot_search_unlocked(ctx, pi, queries, nq, 0, k, 0.0, opts, hits, NULL, counts);
    patina__pivot_un(pi);
    free(copy);
    return s;
}

patina_status patina_pivot_index_range(patina_context_t *ctx, const patina_pivot_index_t *pi,
                                       const void *queries, size_t nq, double radius,
                                       const patina_pivot_search_opts_t *opts, patina_hit_t **hits,
                                       size_t *counts)
{
    patina_status s;
    void *copy;
    if (!pi) return pivot_search_unlocked(ctx, pi, queries, nq, 1, 0, radius, opts, NULL, hits, counts);
    PATINA_TRY(patina__rows(&queries, nq, pi->bytes, PATINA_ROW_ALIGN(sizeof(float)), &copy, "pivots: queries"));
    patina__pivot_rd(pi);
    s = pivot_search_unlocked(ctx, pi, queries, nq, 1, 0, radius, opts, NULL, hits, counts);
    patina__pivot_un(pi);
    free(copy);
    return s;
}
