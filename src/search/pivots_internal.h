/* What the four files of the pivot tables share (src/search/pivots.c,
 * pivots_search.c, pivots_gpu.c, pivots_store.c): the table's struct, its
 * constants, the search's query view and batch, and the functions one of
 * them defines for the others (patina__pivot_*). Internal to those files:
 * nothing else includes it (the tests' view is search/pivots.h, the API
 * include/patina/pivots.h). */
#ifndef PATINA_SEARCH_PIVOTS_INTERNAL_H
#define PATINA_SEARCH_PIVOTS_INTERNAL_H

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"
#include "patina/pivots.h"

#define BLOCK 64          /* k-NN: candidates per block (the paper's) */
#define ROW_CHUNK 1024    /* rows per task when rows are spread over threads */
#define REL 1e-10
#define U 0x1p-53
#define MAGIC "PTNAPIV1"
#define SERIAL_TAG (UINT64_C(1) << 62) /* the search index's serials (knn.c) count from 1 */

#define FMT_VERSION 1u

struct patina_pivot_index {
    patina_extractor_t *ex; /* owned copy */
    size_t dim, bytes;      /* floats and bytes of a record */
    int form;               /* SIG_FORM_GAUSSIAN or _HEURISTIC */
    double alpha;
    size_t np;              /* pivots */
    uint64_t *pids;         /* (np) the pivots' ids when chosen */
    float *precs;           /* (np, dim) the pivots' records (by value) */
    double *pp;             /* (np, np) pivot-to-pivot distances */
    size_t n, cap;
    uint64_t *ids;          /* (n) ascending */
    float *recs;            /* (n, dim) */
    double *tab;            /* (n, np) d(row, pivot) */
    double *self;           /* (n) each row's self term (sig_self) */
    double *pself;          /* (np) each pivot's */
    uint64_t serial;        /* names the rows' GPU copy: new at every change (never reused) */
    uint64_t pserial;       /* names the pivots' GPU copy */
    double wmax;            /* largest total weight among rows ever held and pivots */
    size_t cmax;            /* largest count likewise */
    pthread_rwlock_t lock;  /* searches and save read; put and remove write */
    int locked;             /* lock initialised */
};

/* ---- the search's types (pivots_search.c, pivots_gpu.c) */

/* A query's view: its distances to the pivots, the slack, the pairs. */
typedef struct qview {
    const float *q;
    double sqq;    /* the query's self term */
    double *a;     /* (np) d(q, p_i) */
    const double *alo, *ahi; /* GPU strategies: (np) intervals holding d(q, p_i); else NULL */
    double eps;
    int usable;    /* 0: some a_i is not finite (another alpha): no pruning */
} qview_t;

typedef struct lbent {
    double lb;  /* the metric bound (finite: distances were checked usable) */
    size_t row;
} lbent_t;

typedef struct lb_job {
    const patina_pivot_index_t *pi;
    const qview_t *v;
    lbent_t *ent;
} lb_job_t;

/* A batch of queries (the CPU strategy's tasks, the GPU strategies' loop). */
typedef struct batch {
    const patina_pivot_index_t *pi;
    const float *queries;
    size_t k;
    double radius;
    patina_pivot_bound bound;
    size_t max_hits;
    patina_hit_t *hits;   /* k-NN: (nq, k) */
    patina_hit_t **lists; /* range */
    size_t *counts;
    size_t (*st)[3];      /* (nq) per query: pivot distances, pruned, computed */
    patina_status *sts;   /* (nq) */
} batch_t;

/* ---- the bounds (inline: the CPU search and the GPU strategies test them per
 * row; the slack they carry is explained in pivots.c) */

/* R of pivots.c's header comment for a radius r. */
static inline double patina__pivot_prune_radius(const qview_t *v, double r) { return (r + v->eps) * (1.0 + REL); }

/* Metric lower bound of row r (slack included). With the query's pivot
 * distances known as intervals [alo, ahi] that hold the computed doubles
 * (the GPU strategies), |a - b| becomes max(alo - b, b - ahi): the same
 * double when alo = ahi. */
static inline double patina__pivot_metric_lb(const patina_pivot_index_t *pi, const qview_t *v, size_t r)
{
    const double *b = pi->tab + r * pi->np;
    double m = 0.0;
    if (v->alo) {
        for (size_t i = 0; i < pi->np; i++) {
            const double t = fmax(v->alo[i] - b[i], b[i] - v->ahi[i]);
            if (t > m) m = t;
        }
    } else {
        for (size_t i = 0; i < pi->np; i++) {
            const double t = fabs(v->a[i] - b[i]);
            if (t > m) m = t;
        }
    }
    return m * (1.0 - REL) - 2.0 * v->eps;
}

/* 1 when a ptolemaic bound of row r exceeds R (the row cannot be a hit).
 * Intervals: |a_i b_j - a_j b_i| over the box is at least max(alo_i b_j -
 * ahi_j b_i, alo_j b_i - ahi_i b_j), and the slack takes ahi. */
static inline int patina__pivot_ptolemy_excludes(const patina_pivot_index_t *pi, const qview_t *v, size_t r, double R)
{
    const double *b = pi->tab + r * pi->np, *a = v->a, e = v->eps;
    const size_t np = pi->np;
    if (isinf(R)) return 0;
    if (v->alo) {
        const double *lo = v->alo, *hi = v->ahi;
        for (size_t i = 0; i < np; i++)
            for (size_t j = i + 1; j < np; j++) {
                const double x = lo[i] * b[j] - hi[j] * b[i], y = lo[j] * b[i] - hi[i] * b[j];
                const double num = fmax(x, y) - e * (hi[i] + hi[j] + b[i] + b[j] + 2.0 * e) -
                                   REL * (hi[i] * b[j] + hi[j] * b[i]);
                if (num > R * (pi->pp[i * np + j] + e) * (1.0 + REL)) return 1;
            }
        return 0;
    }
    for (size_t i = 0; i < np; i++)
        for (size_t j = i + 1; j < np; j++) {
            const double x = a[i] * b[j], y = a[j] * b[i];
            const double num = fabs(x - y) - e * (a[i] + a[j] + b[i] + b[j] + 2.0 * e) - REL * (x + y);
            if (num > R * (pi->pp[i * np + j] + e) * (1.0 + REL)) return 1;
        }
    return 0;
}

/* ---- helpers, building, updates, locks (pivots.c) */
double patina__pivot_rec_weight(const float *rec);
void patina__pivot_note_extent(patina_pivot_index_t *pi, const float *rec);
double patina__pivot_slack(const patina_pivot_index_t *pi, size_t cq, double wq);
uint64_t patina__pivot_fnv64(const void *p, size_t n);
patina_status patina__pivot_sqfd_record_check(const float *rec, size_t n, const char *what);
patina_status patina__pivot_nomem(const char *what);
patina_status patina__pivot_check_extractor(const patina_extractor_t *ex);
int patina__pivot_pool_threads(patina_pool_t *pool);
void patina__pivot_self_terms(patina_pool_t *pool, const float *rows, size_t n, size_t dim, double *out);
void patina__pivot_table_rows(patina_pool_t *pool, const patina_pivot_index_t *pi, const float *rows,
                              const double *rself, size_t n, double *tab);
patina_pivot_index_t *patina__pivot_alloc_index(const patina_extractor_t *ex, size_t np, patina_status *s);
patina_status patina__pivot_reserve_rows(patina_pivot_index_t *pi, size_t n);
patina_status patina__pivot_check_batch(patina_pivot_index_t *pi, const uint64_t *ids, const float *recs,
                                        size_t n, int *have_form);
void patina__pivot_rd(const patina_pivot_index_t *pi);
void patina__pivot_un(const patina_pivot_index_t *pi);

/* ---- the CPU search (pivots_search.c) */
int patina__pivot_hit_cmp(const void *x, const void *y);
int patina__pivot_lb_cmp(const void *x, const void *y);
void patina__pivot_lb_task(void *arg, size_t t, int worker);
void patina__pivot_select_front(lbent_t *e, size_t n, size_t m);
patina_status patina__pivot_knn_one(const patina_pivot_index_t *pi, patina_pool_t *pool, const float *q,
                                    size_t k, patina_pivot_bound bound, patina_hit_t *hits, size_t *count,
                                    size_t st[3]);
patina_status patina__pivot_range_one(const patina_pivot_index_t *pi, patina_pool_t *pool, const float *q,
                                      double radius, patina_pivot_bound bound, size_t max_hits,
                                      patina_hit_t **hits, size_t *count, size_t st[3]);

/* ---- the GPU strategies (pivots_gpu.c) */
patina_status patina__pivot_gpu_batch(patina_context_t *ctx, batch_t *b, size_t nq,
                                      patina_pivot_strategy strategy, patina_search_stats_t *stats);

#endif
