/* The host side of the pivot tables' GPU strategies (PATINA_PIVOT_PIPELINE,
 * _GPU and _AUTO's GPU choice; include/patina/pivots.h, docs/signature.md
 * "Filter strategies"): the query's pivot distances as intervals from the
 * GPU's bounded keys, the paper's CPU/GPU pipeline, the GPU filter and the
 * exact ranking of the candidates with the reference's doubles.
 *
 * Not here: the kernels (src/gpu/sqfd.cu, reached through gpu/gpu.h), the
 * bounds and the CPU search (pivots_search.c), the table (pivots.c). */
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
#include "gpu/gpu.h"
#include "patina/pivots.h"
#include "search/pivots_internal.h"

/* ------------------------------------------------------ GPU strategies
 * (docs/signature.md "Filter strategies"). The GPU gives keys lo <= max(S,
 * 0) <= hi of SQFD^2 with a proven bound (src/gpu/sqfd.cu); the query's
 * pivot distances become intervals [alo, ahi] that hold the reference's
 * doubles, the bounds take them (metric_lb, ptolemy_excludes), and the rows
 * that may be hits get the reference's doubles here: the same hits and the
 * same doubles as the CPU strategy and the scan. */

#define PIPE_RANGE_BLOCK 8000 /* the paper's block for range queries */

/* The GPU's view of the rows, with the table (both GPU strategies share
 * one device copy). */
static void gpu_rows_view(const patina_pivot_index_t *pi, pgpu_sqfd_index_t *v)
{
    memset(v, 0, sizeof *v);
    v->serial = pi->serial;
    v->n = pi->n;
    v->dim = pi->dim;
    v->recs = pi->recs;
    v->self = pi->self;
    v->np = pi->np;
    v->tab = pi->tab;
    v->pp = pi->pp;
}

/* Query-to-pivot distances on the GPU as intervals: the reference's d =
 * fl(sqrt(max(S, 0))) with |S - s| <= e lies in [sqrt(s - e), sqrt(s + e)]
 * widened by 2^-50 (the roundings of d and of these). *ok = 0 when the GPU
 * cannot take a query (the CPU strategy answers the call). */
static patina_status gpu_intervals(patina_gpu_t *g, const patina_pivot_index_t *pi, const float *queries,
                                   const double *sqq, size_t nq, double *alo, double *ahi, int *ok)
{
    const size_t np = pi->np;
    double *sv = malloc(nq * np * sizeof *sv), *ev = malloc(nq * np * sizeof *ev);
    pgpu_sqfd_index_t pv;
    patina_status s;
    *ok = 1;
    if (!sv || !ev) {
        free(sv);
        free(ev);
        return patina__pivot_nomem("pivot distances");
    }
    memset(&pv, 0, sizeof pv);
    pv.serial = pi->pserial;
    pv.n = np;
    pv.dim = pi->dim;
    pv.recs = pi->precs;
    pv.self = pi->pself;
    s = patina_gpu_sqfd_pairs(g, &pv, queries, sqq, nq, sv, ev);
    if (s == PATINA_E_UNAVAILABLE) {
        patina_clear_error();
        *ok = 0;
        s = PATINA_OK;
    } else if (s == PATINA_OK) {
        for (size_t i = 0; i < nq * np; i++) {
            const double lo = sv[i] - ev[i], hi = sv[i] + ev[i];
            alo[i] = lo > 0.0 ? sqrt(lo) * (1.0 - 0x1p-50) : 0.0;
            ahi[i] = hi > 0.0 ? sqrt(hi) * (1.0 + 0x1p-50) : 0.0;
        }
    }
    free(sv);
    free(ev);
    return s;
}

/* The reference distances of query q to rows cand (n of them), ranked:
 * k-NN (k > 0): the first min(k, rows) into hits (the caller's count); range:
 * those <= radius, at most max_hits, into *rh (malloc'd, NULL when none). */
static patina_status rank_exact(const patina_pivot_index_t *pi, const qview_t *v, const uint32_t *cand, size_t nc,
                                size_t k, double radius, size_t max_hits, patina_hit_t *hits, size_t *count,
                                patina_hit_t **rh)
{
    patina_hit_t *h = malloc((nc ? nc : 1) * sizeof *h);
    size_t m = 0;
    if (!h) return patina__pivot_nomem("candidates");
    for (size_t i = 0; i < nc; i++) {
        const double d = sig_sqfd_self(v->q, v->sqq, pi->recs + (size_t)cand[i] * pi->dim, pi->self[cand[i]]);
        if (!k && !(d <= radius)) continue;
        h[m].id = pi->ids[cand[i]];
        h[m++].distance = d;
    }
    qsort(h, m, sizeof *h, patina__pivot_hit_cmp);
    if (k) {
        const size_t take = k < pi->n ? k : pi->n;
        if (m < take) { /* cannot happen (the k rows of smallest upper key are candidates) */
            free(h);
            return patina__fail(PATINA_E_INTERNAL, "pivots: the GPU gave %zu candidates for %zu hits", m, take);
        }
        memcpy(hits, h, take * sizeof *h);
        *count = take;
        free(h);
        return PATINA_OK;
    }
    if (max_hits && m > max_hits) m = max_hits;
    *count = m;
    if (m) *rh = h;
    else free(h);
    return PATINA_OK;
}

/* One query's pipeline state: the rows sent, their keys, the blocks in flight. */
typedef struct pipe {
    patina_gpu_t *g;
    const pgpu_sqfd_index_t *gv;
    const patina_pivot_index_t *pi;
    qview_t *v;
    size_t take;             /* k-NN: min(k, n); range: 0 */
    uint32_t *rows;          /* (n) rows sent, in order */
    float *lo, *hi;          /* (n) their keys */
    size_t sent, done;       /* rows sent; rows whose keys came back */
    size_t blk[2];           /* rows of the block in flight on each slot (0: none) */
    size_t start[2];         /* its first entry in rows */
    int next;                /* the slot of the oldest block in flight */
    float *heap;             /* k-NN: (take) max-heap of the smallest hi */
    size_t nheap;
    double R;                /* the pruning radius (k-NN: from the heap) */
} pipe_t;

static void heap_add(pipe_t *p, float x)
{
    size_t i;
    if (p->nheap < p->take) {
        i = p->nheap++;
        while (i > 0 && p->heap[(i - 1) / 2] < x) {
            p->heap[i] = p->heap[(i - 1) / 2];
            i = (i - 1) / 2;
        }
        p->heap[i] = x;
        return;
    }
    if (!(x < p->heap[0])) return;
    i = 0;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        float mv = x;
        if (l < p->nheap && p->heap[l] > mv) m = l, mv = p->heap[l];
        if (l + 1 < p->nheap && p->heap[l + 1] > mv) m = l + 1;
        if (m == i) break;
        p->heap[i] = p->heap[m];
        i = m;
    }
    p->heap[i] = x;
}

/* Waits for the oldest block and takes its keys (k-NN: the radius shrinks). */
static patina_status pipe_wait(pipe_t *p)
{
    const int sl = p->next;
    const size_t m = p->blk[sl], s0 = p->start[sl];
    if (!m) return PATINA_OK;
    PATINA_TRY(patina_gpu_sqfd_block_wait(p->g, sl, p->lo + s0, p->hi + s0));
    p->blk[sl] = 0;
    p->next = 1 - sl;
    p->done += m;
    if (p->take) {
        for (size_t i = s0; i < s0 + m; i++) heap_add(p, p->hi[i]);
        if (p->nheap == p->take) /* every hit's d <= sqrt(U) rounded up: pivots.c's R of that radius */
            p->R = patina__pivot_prune_radius(p->v, sqrt((double)p->heap[0]) * (1.0 + 0x1p-40));
    }
    return PATINA_OK;
}

/* Sends rows [s0, p->sent) as a block: waits first when both slots are busy. */
static patina_status pipe_send(pipe_t *p, size_t s0)
{
    int sl;
    if (p->sent == s0) return PATINA_OK;
    if (p->blk[0] && p->blk[1]) PATINA_TRY(pipe_wait(p));
    sl = !p->blk[p->next] ? p->next : 1 - p->next;
    if (!p->blk[0] && !p->blk[1]) p->next = sl;
    PATINA_TRY(patina_gpu_sqfd_block_submit(p->g, p->gv, sl, p->v->q, p->v->sqq, p->rows + s0, p->sent - s0));
    p->blk[sl] = p->sent - s0;
    p->start[sl] = s0;
    return PATINA_OK;
}

/* The rows of ord [i0, i1) (metric-bound order for k-NN) through the
 * bounds and to the GPU in blocks of bs; k-NN stops at the first bound over
 * R (every later one is larger). */
static patina_status pipe_rows(pipe_t *p, const lbent_t *ord, size_t i0, size_t i1, size_t bs, patina_pivot_bound bound)
{
    size_t s0 = p->sent;
    for (size_t i = i0; i < i1; i++) {
        const size_t r = ord ? ord[i].row : i;
        if (p->v->usable) {
            const double lb = ord ? ord[i].lb : patina__pivot_metric_lb(p->pi, p->v, r);
            if (lb > p->R) {
                if (p->take) break;
                continue;
            }
            if (bound == PATINA_BOUND_PTOLEMAIC && patina__pivot_ptolemy_excludes(p->pi, p->v, r, p->R)) continue;
        }
        p->rows[p->sent++] = (uint32_t)r;
        if (p->sent - s0 == bs) {
            PATINA_TRY(pipe_send(p, s0));
            s0 = p->sent;
        }
    }
    return pipe_send(p, s0);
}

/* One query through the paper's pipeline: hits as knn_one / range_one. */
/* The rows a range query's bounds keep (keep[r] = 1), rows spread over
 * the workers: the pipeline's CPU filter. */
typedef struct keep_job {
    const patina_pivot_index_t *pi;
    const qview_t *v;
    double R;
    int ptolemaic;
    uint8_t *keep;
} keep_job_t;

static void keep_task(void *arg, size_t t, int worker)
{
    const keep_job_t *j = arg;
    const size_t r0 = t * ROW_CHUNK, r1 = r0 + ROW_CHUNK < j->pi->n ? r0 + ROW_CHUNK : j->pi->n;
    (void)worker;
    for (size_t r = r0; r < r1; r++)
        j->keep[r] = !(patina__pivot_metric_lb(j->pi, j->v, r) > j->R) &&
                     !(j->ptolemaic && patina__pivot_ptolemy_excludes(j->pi, j->v, r, j->R));
}

static patina_status pipe_one(patina_gpu_t *g, patina_pool_t *pool, const pgpu_sqfd_index_t *gv,
                              const patina_pivot_index_t *pi, qview_t *v, size_t k, double radius,
                              patina_pivot_bound bound, size_t max_hits, patina_hit_t *hits, size_t *count,
                              patina_hit_t **rh, size_t st[3])
{
    const size_t n = pi->n;
    pipe_t p;
    lbent_t *ord = NULL;
    uint32_t *cand = NULL;
    size_t nc = 0;
    patina_status s = PATINA_OK;
    memset(&p, 0, sizeof p);
    p.g = g;
    p.gv = gv;
    p.pi = pi;
    p.v = v;
    p.take = k ? (k < n ? k : n) : 0;
    p.R = k ? INFINITY : patina__pivot_prune_radius(v, radius);
    p.rows = malloc(n * sizeof *p.rows);
    p.lo = malloc(n * sizeof *p.lo);
    p.hi = malloc(n * sizeof *p.hi);
    p.heap = malloc((p.take ? p.take : 1) * sizeof *p.heap);
    if (k && v->usable) ord = malloc(n * sizeof *ord);
    if (!p.rows || !p.lo || !p.hi || !p.heap || (k && v->usable && !ord)) {
        s = patina__pivot_nomem("pipeline");
        goto done;
    }
    if (k && v->usable) {
        /* rows in metric-bound order, as knn_one: the m smallest first, then
         * those within the radius that leaves, sorted; blocks of BLOCK with
         * at most 2 in flight, the radius refined as blocks return */
        const size_t m = p.take > BLOCK ? p.take : BLOCK;
        lb_job_t j = {pi, v, ord};
        patina_pool_run(pool, (n + ROW_CHUNK - 1) / ROW_CHUNK, patina__pivot_lb_task, &j);
        if (m >= n) {
            qsort(ord, n, sizeof *ord, patina__pivot_lb_cmp);
            s = pipe_rows(&p, ord, 0, n, BLOCK, bound);
        } else {
            size_t w = m;
            patina__pivot_select_front(ord, n, m);
            qsort(ord, m, sizeof *ord, patina__pivot_lb_cmp);
            s = pipe_rows(&p, ord, 0, m, BLOCK, bound);
            while (s == PATINA_OK && (p.blk[0] || p.blk[1])) s = pipe_wait(&p);
            for (size_t i = m; s == PATINA_OK && i < n; i++)
                if (!(ord[i].lb > p.R)) ord[w++] = ord[i];
            qsort(ord + m, w - m, sizeof *ord, patina__pivot_lb_cmp);
            if (s == PATINA_OK) s = pipe_rows(&p, ord, m, w, BLOCK, bound);
        }
    } else if (!k && v->usable) {
        /* range: the bounds on the workers, the survivors sent in blocks of PIPE_RANGE_BLOCK */
        keep_job_t j = {pi, v, p.R, bound == PATINA_BOUND_PTOLEMAIC, malloc(n + 1)};
        size_t s0 = 0;
        if (!j.keep) {
            s = patina__pivot_nomem("pipeline");
            goto done;
        }
        patina_pool_run(pool, (n + ROW_CHUNK - 1) / ROW_CHUNK, keep_task, &j);
        for (size_t r = 0; s == PATINA_OK && r < n; r++)
            if (j.keep[r]) {
                p.rows[p.sent++] = (uint32_t)r;
                if (p.sent - s0 == PIPE_RANGE_BLOCK) {
                    s = pipe_send(&p, s0);
                    s0 = p.sent;
                }
            }
        if (s == PATINA_OK) s = pipe_send(&p, s0);
        free(j.keep);
    } else {
        s = pipe_rows(&p, NULL, 0, n, k ? BLOCK : PIPE_RANGE_BLOCK, bound);
    }
    while (s == PATINA_OK && (p.blk[0] || p.blk[1])) s = pipe_wait(&p);
    if (s != PATINA_OK) goto done;
    {   /* the rows that may be hits: k-NN lo <= U (1 + 2^-30), U the k-th smallest hi; range lo <= r^2 */
        const double keep = k ? (double)p.heap[0] * (1.0 + 0x1p-30) : radius * radius * (1.0 + 0x1p-40);
        if (!(cand = malloc((p.sent ? p.sent : 1) * sizeof *cand))) {
            s = patina__pivot_nomem("candidates");
            goto done;
        }
        for (size_t i = 0; i < p.sent; i++)
            if ((double)p.lo[i] <= keep) cand[nc++] = p.rows[i];
    }
    s = rank_exact(pi, v, cand, nc, k, radius, max_hits, hits, count, rh);
    st[1] += n - p.sent;
    st[2] += p.sent;
done:
    if (s != PATINA_OK) /* nothing may stay in flight */
        for (int i = 0; i < 2; i++)
            if (p.blk[i]) (void)patina_gpu_sqfd_block_wait(g, i, p.lo, p.hi);
    free(p.rows);
    free(p.lo);
    free(p.hi);
    free(p.heap);
    free(ord);
    free(cand);
    return s;
}

/* The queries the GPU filter left (cpu[q] = 1: with weak bounds -- a large
 * alpha -- the survivors' candidates overflow their list) through the GPU
 * scan instead, whose retry takes the whole table as its pilot; what it
 * cannot take stays the CPU's. */
/* A batch's search as the GPU's request: k-NN (no lists) or range. */
static pgpu_req_t batch_req(const batch_t *b)
{
    pgpu_req_t rq;
    rq.k = b->lists ? 0 : b->k;
    rq.radius = b->radius;
    rq.max_hits = b->max_hits;
    return rq;
}

static patina_status gpu_rescan(patina_gpu_t *g, const pgpu_sqfd_index_t *gv, const batch_t *b, size_t nq,
                                const double *sqq, uint32_t **cand, size_t *ncand, uint8_t *cpu, size_t st[3])
{
    const size_t dim = b->pi->dim;
    const pgpu_req_t rq = batch_req(b);
    size_t nw = 0, j = 0;
    float *wq;
    double *ws;
    uint32_t **wc, *w;
    size_t *wn;
    uint8_t *wcpu;
    pgpu_sqfd_stats_t gst;
    patina_status s;
    for (size_t q = 0; q < nq; q++) nw += cpu[q] == 1;
    if (nw == 0) return PATINA_OK;
    wq = malloc(nw * dim * sizeof *wq);
    ws = malloc(nw * sizeof *ws);
    wc = calloc(nw, sizeof *wc);
    w = malloc(nw * sizeof *w);
    wn = calloc(nw, sizeof *wn);
    wcpu = calloc(nw, 1);
    memset(&gst, 0, sizeof gst);
    if (!wq || !ws || !wc || !w || !wn || !wcpu) {
        s = patina__pivot_nomem("queries");
        goto done;
    }
    for (size_t q = 0; q < nq; q++)
        if (cpu[q] == 1) {
            memcpy(wq + j * dim, b->queries + q * dim, dim * sizeof *wq);
            ws[j] = sqq[q];
            w[j++] = (uint32_t)q;
        }
    s = patina_gpu_sqfd(g, gv, wq, ws, nw, &rq, wc, wn, wcpu, &gst);
    for (j = 0; s == PATINA_OK && j < nw; j++)
        if (!wcpu[j]) {
            cand[w[j]] = wc[j];
            ncand[w[j]] = wn[j];
            cpu[w[j]] = 0;
            wc[j] = NULL;
        }
    if (s == PATINA_OK) st[2] += gst.pairs; /* the scan computes every row */
done:
    for (j = 0; wc && j < nw; j++) free(wc[j]);
    free(wq);
    free(ws);
    free(wc);
    free(w);
    free(wn);
    free(wcpu);
    return s;
}

/* A batch through a GPU strategy (the GPU's turn held for its GPU part).
 * Queries the GPU cannot take run on the CPU (knn_one / range_one). */
patina_status patina__pivot_gpu_batch(patina_context_t *ctx, batch_t *b, size_t nq, patina_pivot_strategy strategy,
                                      patina_search_stats_t *stats)
{
    const patina_pivot_index_t *pi = b->pi;
    const size_t np = pi->np, dim = pi->dim;
    pgpu_sqfd_index_t gv;
    patina_gpu_t *g;
    double *sqq = malloc(nq * sizeof *sqq), *alo = malloc(nq * np * sizeof *alo), *ahi = malloc(nq * np * sizeof *ahi);
    double *eps = malloc(nq * sizeof *eps), *a = malloc(np * sizeof *a);
    uint32_t **cand = calloc(nq, sizeof *cand);
    size_t *ncand = calloc(nq, sizeof *ncand), st[3] = {0, 0, 0}, gpu_q = 0;
    uint8_t *cpu = calloc(nq, 1);
    patina_pool_t *pool = NULL;
    patina_status s = PATINA_OK;
    int ok = 1, own = 0;
    if (!sqq || !alo || !ahi || !eps || !a || !cand || !ncand || !cpu) {
        s = patina__pivot_nomem("queries");
        goto done;
    }
    gpu_rows_view(pi, &gv);
    for (size_t q = 0; q < nq; q++) {
        const float *qr = b->queries + q * dim;
        sqq[q] = sig_self(qr);
        eps[q] = patina__pivot_slack(pi, (size_t)qr[0], patina__pivot_rec_weight(qr));
    }
    if (!ctx) {
        s = patina__fail(PATINA_E_UNAVAILABLE, "search: the GPU strategies need a context with a GPU");
        goto done;
    }
    /* the workers (the pipeline's CPU filter), then the GPU: the order every nesting takes */
    if (strategy == PATINA_PIVOT_PIPELINE && (s = patina__workers_begin(ctx, 0, &pool, &own)) != PATINA_OK) goto done;
    if ((s = patina__context_gpu_acquire(ctx, &g)) != PATINA_OK) {
        if (strategy == PATINA_PIVOT_PIPELINE) patina__workers_end(ctx, pool, own);
        goto done;
    }
    s = gpu_intervals(g, pi, b->queries, sqq, nq, alo, ahi, &ok);
    if (s == PATINA_OK && ok) {
        st[0] += nq * np;
        if (strategy == PATINA_PIVOT_GPU || b->bound == PATINA_BOUND_NONE) {
            const pgpu_req_t rq = batch_req(b);
            pgpu_sqfd_stats_t gst;
            memset(&gst, 0, sizeof gst);
            s = b->bound == PATINA_BOUND_NONE
                    ? patina_gpu_sqfd(g, &gv, b->queries, sqq, nq, &rq, cand, ncand, cpu, &gst)
                    : patina_gpu_sqfd_filter(g, &gv, b->queries, sqq, nq, alo, ahi, eps,
                                             b->bound == PATINA_BOUND_PTOLEMAIC, &rq, cand, ncand, cpu, &gst);
            st[2] += gst.pairs < gst.queries * pi->n ? gst.pairs : gst.queries * pi->n;
            st[1] += gst.queries * pi->n - (gst.pairs < gst.queries * pi->n ? gst.pairs : gst.queries * pi->n);
            if (s == PATINA_OK && b->bound != PATINA_BOUND_NONE) s = gpu_rescan(g, &gv, b, nq, sqq, cand, ncand, cpu, st);
        } else { /* the pipeline, query by query */
            for (size_t q = 0; s == PATINA_OK && q < nq; q++) {
                qview_t v;
                memset(&v, 0, sizeof v);
                v.q = b->queries + q * dim;
                v.sqq = sqq[q];
                v.a = a;
                v.alo = alo + q * np;
                v.ahi = ahi + q * np;
                v.eps = eps[q];
                v.usable = b->bound != PATINA_BOUND_NONE;
                s = pipe_one(g, pool, &gv, pi, &v, b->lists ? 0 : b->k, b->radius, b->bound, b->max_hits,
                             b->lists ? NULL : b->hits + q * b->k, &b->counts[q], b->lists ? &b->lists[q] : NULL, st);
                if (s == PATINA_E_UNAVAILABLE) { /* a query outside the kernels' domain: the CPU's */
                    patina_clear_error();
                    cpu[q] = 2;
                    s = PATINA_OK;
                }
            }
        }
    }
    patina__context_gpu_release(ctx);
    if (strategy == PATINA_PIVOT_PIPELINE) patina__workers_end(ctx, pool, own);
    if (s == PATINA_OK && !ok) memset(cpu, 2, nq); /* every query the CPU's */
    /* the filter's candidates ranked; the CPU's queries on this thread */
    for (size_t q = 0; s == PATINA_OK && q < nq; q++) {
        const float *qr = b->queries + q * dim;
        if (cpu[q]) {
            size_t one[3] = {0, 0, 0};
            s = b->lists ? patina__pivot_range_one(pi, NULL, qr, b->radius, b->bound, b->max_hits,
                                                   &b->lists[q], &b->counts[q], one)
                         : patina__pivot_knn_one(pi, NULL, qr, b->k, b->bound, b->hits + q * b->k,
                                                 &b->counts[q], one);
            st[0] += cpu[q] == 2 ? one[0] : 0;
            st[1] += one[1];
            st[2] += one[2];
            continue;
        }
        gpu_q++;
        if (strategy == PATINA_PIVOT_GPU || b->bound == PATINA_BOUND_NONE) {
            qview_t v;
            memset(&v, 0, sizeof v);
            v.q = qr;
            v.sqq = sqq[q];
            s = rank_exact(pi, &v, cand[q], ncand[q], b->lists ? 0 : b->k, b->radius, b->max_hits,
                           b->lists ? NULL : b->hits + q * b->k, &b->counts[q], b->lists ? &b->lists[q] : NULL);
        }
    }
    if (s == PATINA_OK && stats) {
        stats->cpu = nq - gpu_q;
        stats->gpu_filter = gpu_q;
        stats->pivot_dists = st[0];
        stats->pruned = st[1];
        stats->computed = st[2];
    }
done:
    for (size_t q = 0; cand && q < nq; q++) free(cand[q]);
    free(cand);
    free(ncand);
    free(cpu);
    free(sqq);
    free(alo);
    free(ahi);
    free(eps);
    free(a);
    return s;
}
