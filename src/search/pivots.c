/* Pivot tables for SQFD (include/patina/pivots.h): pivot selection, the
 * table of row-to-pivot distances, its lower bounds with their rounding
 * slack, the filtered k-NN and range search on the CPU, and the table's
 * persistence as a collection's auxiliary blob.
 *
 * Not here: the distance itself (src/algo/sqfd.c: with the self terms,
 * sig_sqfd_self with the query first exactly as the scan calls it, so a
 * computed distance is the scan's double) and any GPU work. Every row and
 * pivot keeps its self term Soo (sig_self, computed once when it is added
 * or loaded), a query computes its Sqq once: a distance is the cross block
 * only, and every distance is sig_sqfd's double bit for bit.
 *
 * Rounding slack. Bounds are computed from computed distances d, each off
 * the exact d* by at most eps (below), and they must not exceed the
 * exact d*(q, o) of a row that the scan would return. For one SQFD the
 * sum S = Sqq + Soo - 2 Sqo of N <= (n + m)^2 terms w_i w_j f (f in
 * [0, fmax]: 1 for gaussian, 1/alpha for heuristic) is computed with an
 * error below (N + 12) u T, T = fmax (Wq + Wo)^2 the sum of the terms'
 * magnitudes (u = 2^-53; each term's own error is a few u of it: the
 * feature differences, the squares, exp of a slightly wrong argument
 * -- x e^-x <= 1/e -- and the products). We take
 *     E   = 2 ((2 cmax)^2 + 64) u fmax (2 wmax)^2
 *     eps = sqrt(E) + 8 u (2 wmax) sqrt(fmax)
 * with cmax, wmax the largest count and total weight among the rows, the
 * pivots and the query; |sqrt(max(S,0)) - sqrt(S*)| <= sqrt(|S - S*|)
 * and the final sqrt's rounding (d <= 2 wmax sqrt(fmax)) give |d - d*| <=
 * eps. A row with computed d(q,o) <= r has d* <= (r + eps)(1 + REL), so
 * it is skipped only when a bound of d* exceeds R = (r + eps)(1 + REL):
 *   metric     |a_i - b_i| (1 - REL) - 2 eps  <= |a*_i - b*_i| <= d*
 *   ptolemaic  |a_i b_j - a_j b_i| - eps (a_i + a_j + b_i + b_j + 2 eps)
 *              - REL (a_i b_j + a_j b_i)  <=  d* (e_ij + eps)
 * (a = d(q, p), b = d(o, p), e_ij = d(p_i, p_j); REL = 1e-10 covers the
 * few roundings of the bound's own arithmetic, each a few u). eps is of
 * the order of 1e-6 (wmax + ...) at most and far below the distances
 * between signatures: the slack costs no measurable pruning. A relative
 * slack alone (say 1e-12 d) would not be safe: at small alpha S cancels
 * and d can be off by sqrt(E) whatever its size. */
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
#include "search/distance.h"
#include "search/pivots.h"

#define BLOCK 64          /* k-NN: candidates per block (the paper's) */
#define ROW_CHUNK 1024    /* rows per task when rows are spread over threads */
#define K_MAX 1000000
#define REL 1e-10
#define U 0x1p-53
#define MAGIC "PTNAPIV1"
#define SERIAL_TAG (UINT64_C(1) << 62) /* the search index's serials (knn.c) count from 1 */

static _Atomic uint64_t next_serial = 1;

static uint64_t new_serial(void) { return SERIAL_TAG | atomic_fetch_add(&next_serial, 1); }
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

/* ----------------------------------------------------------------- helpers */

void patina_pivot_opts_init(patina_pivot_opts_t *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->pivots = 32;
    o->select = PATINA_PIVOTS_FARTHEST;
    o->seed = 1;
}

void patina_pivot_search_opts_init(patina_pivot_search_opts_t *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->bound = PATINA_BOUND_PTOLEMAIC;
}

static double rec_weight(const float *rec)
{
    const size_t c = (size_t)rec[0];
    double w = 0.0;
    for (size_t i = 0; i < c; i++) w += (double)rec[SIG_HEADER + SIG_COLS * i];
    return w;
}

static void note_extent(patina_pivot_index_t *pi, const float *rec)
{
    const double w = rec_weight(rec);
    const size_t c = (size_t)rec[0];
    if (w > pi->wmax) pi->wmax = w;
    if (c > pi->cmax) pi->cmax = c;
}

/* eps of the header comment for a query of count cq and weight wq. */
static double slack(const patina_pivot_index_t *pi, size_t cq, double wq)
{
    const double c = (double)(cq > pi->cmax ? cq : pi->cmax);
    const double w = wq > pi->wmax ? wq : pi->wmax;
    const double fmax = pi->form == SIG_FORM_GAUSSIAN ? 1.0 : 1.0 / pi->alpha;
    const double e = 2.0 * ((2 * c) * (2 * c) + 64.0) * U * fmax * (2 * w) * (2 * w);
    return (sqrt(e) + 8.0 * U * 2.0 * w * sqrt(fmax)) * (1.0 + 1e-6);
}

static uint64_t fnv64(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A signature record's check (the distance table's for sqfd): PATINA_OK
 * or PATINA_E_INVALID with a message naming what. */
static patina_status sqfd_record_check(const float *rec, size_t n, const char *what)
{
    return pdist_check(PDIST_SQFD)(rec, n, what);
}

static patina_status nomem(const char *what)
{
    return patina__fail(PATINA_E_NOMEM, "pivots: out of memory (%s)", what);
}

/* The extractor must be a signature one with a metric form. */
static patina_status check_extractor(const patina_extractor_t *ex)
{
    if (!ex) return patina__fail(PATINA_E_INVALID, "pivots: null extractor");
    if (strcmp(patina_extractor_family(ex), "signature") != 0 ||
        strcmp(patina_extractor_distance_name(ex), "sqfd") != 0)
        return patina__fail(PATINA_E_INVALID, "pivots: pivot tables are for SQFD on signatures, not '%s'",
                            patina_extractor_spec(ex));
    if (strstr(patina_extractor_spec(ex), "form=minus"))
        return patina__fail(PATINA_E_INVALID,
                            "pivots: SQFD with form=minus is not a metric (signatures of different total "
                            "weight): no pivot table for '%s'",
                            patina_extractor_spec(ex));
    return PATINA_OK;
}

static int pool_threads(patina_pool_t *pool) { return pool ? patina_pool_size(pool) : 1; }

/* ------------------------------------------------------- distance columns */

/* out[r * ld] = sqfd(rows[r], piv) for r < n, in parallel. */
typedef struct col_job {
    const float *rows;
    const double *rself;
    size_t dim, n, ld;
    const float *piv;
    double pself;
    double *out;
} col_job_t;

static void col_task(void *arg, size_t t, int worker)
{
    const col_job_t *j = arg;
    const size_t r0 = t * ROW_CHUNK, r1 = r0 + ROW_CHUNK < j->n ? r0 + ROW_CHUNK : j->n;
    (void)worker;
    for (size_t r = r0; r < r1; r++)
        j->out[r * j->ld] = sig_sqfd_self(j->rows + r * j->dim, j->rself[r], j->piv, j->pself);
}

static void column(patina_pool_t *pool, const float *rows, const double *rself, size_t n, size_t dim,
                   const float *piv, double pself, double *out, size_t ld)
{
    col_job_t j = {rows, rself, dim, n, ld, piv, pself, out};
    patina_pool_run(pool, (n + ROW_CHUNK - 1) / ROW_CHUNK, col_task, &j);
}

/* out (n) = the self terms of n records, in parallel. */
typedef struct self_job {
    const float *rows;
    size_t dim, n;
    double *out;
} self_job_t;

static void self_task(void *arg, size_t t, int worker)
{
    const self_job_t *j = arg;
    const size_t r0 = t * ROW_CHUNK / 4, r1 = r0 + ROW_CHUNK / 4 < j->n ? r0 + ROW_CHUNK / 4 : j->n;
    (void)worker;
    for (size_t r = r0; r < r1; r++) j->out[r] = sig_self(j->rows + r * j->dim);
}

static void self_terms(patina_pool_t *pool, const float *rows, size_t n, size_t dim, double *out)
{
    self_job_t j = {rows, dim, n, out};
    patina_pool_run(pool, (n + ROW_CHUNK / 4 - 1) / (ROW_CHUNK / 4), self_task, &j);
}

/* Every row's distances to every pivot: tab (n, np). */
typedef struct tab_job {
    const patina_pivot_index_t *pi;
    const float *rows;
    const double *rself;
    size_t n;
    double *tab;
} tab_job_t;

static void tab_task(void *arg, size_t t, int worker)
{
    const tab_job_t *j = arg;
    const patina_pivot_index_t *pi = j->pi;
    const size_t r0 = t * 64, r1 = r0 + 64 < j->n ? r0 + 64 : j->n;
    (void)worker;
    for (size_t r = r0; r < r1; r++)
        for (size_t p = 0; p < pi->np; p++)
            j->tab[r * pi->np + p] =
                sig_sqfd_self(j->rows + r * pi->dim, j->rself[r], pi->precs + p * pi->dim, pi->pself[p]);
}

static void table_rows(patina_pool_t *pool, const patina_pivot_index_t *pi, const float *rows, const double *rself,
                       size_t n, double *tab)
{
    tab_job_t j = {pi, rows, rself, n, tab};
    patina_pool_run(pool, (n + 63) / 64, tab_task, &j);
}

static void pivot_pairs(patina_pivot_index_t *pi)
{
    for (size_t i = 0; i < pi->np; i++) {
        pi->pp[i * pi->np + i] = 0.0;
        for (size_t j = i + 1; j < pi->np; j++) {
            const double d = sig_sqfd_self(pi->precs + i * pi->dim, pi->pself[i], pi->precs + j * pi->dim, pi->pself[j]);
            pi->pp[i * pi->np + j] = pi->pp[j * pi->np + i] = d;
        }
    }
}

/* --------------------------------------------------------------- building */

static patina_pivot_index_t *alloc_index(const patina_extractor_t *ex, size_t np, patina_status *s)
{
    patina_pivot_index_t *pi = calloc(1, sizeof *pi);
    if (!pi) {
        *s = nomem("index");
        return NULL;
    }
    if (patina__rwlock_init(&pi->lock) != 0) {
        free(pi);
        *s = patina__fail(PATINA_E_INTERNAL, "pivots: cannot create a lock");
        return NULL;
    }
    pi->locked = 1;
    pi->serial = new_serial();
    pi->pserial = new_serial();
    if ((*s = patina_extractor_new(&pi->ex, patina_extractor_spec(ex))) != PATINA_OK) {
        pthread_rwlock_destroy(&pi->lock);
        free(pi);
        return NULL;
    }
    pi->bytes = patina_extractor_bytes(ex);
    pi->dim = patina_extractor_dim(ex);
    pi->np = np;
    pi->pids = calloc(np ? np : 1, sizeof *pi->pids);
    pi->precs = calloc(np ? np * pi->dim : 1, sizeof *pi->precs);
    pi->pp = calloc(np ? np * np : 1, sizeof *pi->pp);
    pi->pself = calloc(np ? np : 1, sizeof *pi->pself);
    if (!pi->pids || !pi->precs || !pi->pp || !pi->pself) {
        patina_pivot_index_free(pi);
        *s = nomem("pivots");
        return NULL;
    }
    *s = PATINA_OK;
    return pi;
}

static patina_status reserve_rows(patina_pivot_index_t *pi, size_t n)
{
    size_t cap;
    void *a, *b, *c, *d;
    if (n <= pi->cap) return PATINA_OK;
    cap = pi->cap ? pi->cap : 64;
    while (cap < n) cap *= 2;
    if (!(a = realloc(pi->ids, cap * sizeof *pi->ids))) return nomem("rows");
    pi->ids = a;
    if (!(b = realloc(pi->recs, cap * pi->bytes))) return nomem("rows");
    pi->recs = b;
    if (!(c = realloc(pi->tab, cap * (pi->np ? pi->np : 1) * sizeof *pi->tab))) return nomem("rows");
    pi->tab = c;
    if (!(d = realloc(pi->self, cap * sizeof *pi->self))) return nomem("rows");
    pi->self = d;
    pi->cap = cap;
    return PATINA_OK;
}

static int u64_cmp(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

typedef struct id_pos {
    uint64_t id;
    size_t pos;
} id_pos_t;

static int id_pos_cmp(const void *a, const void *b)
{
    const id_pos_t *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

/* Checks records and ids of a batch: valid records of one alpha and form,
 * unique ids. Fills the index's alpha and form from the first when unset. */
static patina_status check_batch(patina_pivot_index_t *pi, const uint64_t *ids, const float *recs, size_t n,
                                 int *have_form)
{
    char what[64];
    uint64_t *sorted;
    for (size_t i = 0; i < n; i++) {
        const float *r = recs + i * pi->dim;
        snprintf(what, sizeof what, "pivots: row %zu (id %llu)", i, (unsigned long long)ids[i]);
        PATINA_TRY(sqfd_record_check(r, pi->dim, what));
        if (!*have_form) {
            pi->alpha = (double)r[2];
            pi->form = (int)r[3];
            *have_form = 1;
        }
        if ((double)r[2] != pi->alpha || (int)r[3] != pi->form)
            return patina__fail(PATINA_E_INVALID, "%s: alpha or form differs from the other rows", what);
    }
    if (*have_form && pi->form == SIG_FORM_MINUS)
        return patina__fail(PATINA_E_INVALID, "pivots: SQFD with form=minus is not a metric: no pivot table");
    if (n < 2) return PATINA_OK;
    if (!(sorted = malloc(n * sizeof *sorted))) return nomem("ids");
    memcpy(sorted, ids, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, u64_cmp);
    for (size_t i = 1; i < n; i++)
        if (sorted[i] == sorted[i - 1]) {
            uint64_t id = sorted[i];
            free(sorted);
            return patina__fail(PATINA_E_INVALID, "pivots: id %llu appears twice", (unsigned long long)id);
        }
    free(sorted);
    return PATINA_OK;
}

/* Rows into the index in id order (caller arrays copied). */
static patina_status set_rows(patina_pivot_index_t *pi, const uint64_t *ids, const float *recs, size_t n)
{
    id_pos_t *ord;
    PATINA_TRY(reserve_rows(pi, n));
    if (!(ord = malloc((n ? n : 1) * sizeof *ord))) return nomem("rows");
    for (size_t i = 0; i < n; i++) ord[i] = (id_pos_t){ids[i], i};
    qsort(ord, n, sizeof *ord, id_pos_cmp);
    for (size_t i = 0; i < n; i++) {
        pi->ids[i] = ord[i].id;
        memcpy(pi->recs + i * pi->dim, recs + ord[i].pos * pi->dim, pi->bytes);
        note_extent(pi, pi->recs + i * pi->dim);
    }
    pi->n = n;
    free(ord);
    return PATINA_OK;
}

/* Chooses the pivots among the rows and fills tab (farthest-first fills it
 * on the way: its columns are the distances to the chosen pivots). */
static patina_status choose(patina_pivot_index_t *pi, patina_pool_t *pool, const patina_pivot_opts_t *o)
{
    const size_t n = pi->n, np = pi->np;
    uint64_t st = o->seed;
    size_t *rows = malloc(np * sizeof *rows);
    if (!rows) return nomem("pivots");
    if (o->select == PATINA_PIVOTS_RANDOM) {
        /* a partial Fisher-Yates over row indexes: np distinct rows */
        size_t *perm = malloc(n * sizeof *perm);
        if (!perm) {
            free(rows);
            return nomem("pivots");
        }
        for (size_t i = 0; i < n; i++) perm[i] = i;
        for (size_t i = 0; i < np; i++) {
            size_t j = i + (size_t)(splitmix(&st) % (uint64_t)(n - i)), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
            rows[i] = perm[i];
        }
        free(perm);
        for (size_t i = 0; i < np; i++) {
            pi->pids[i] = pi->ids[rows[i]];
            memcpy(pi->precs + i * pi->dim, pi->recs + rows[i] * pi->dim, pi->bytes);
            pi->pself[i] = pi->self[rows[i]];
        }
        table_rows(pool, pi, pi->recs, pi->self, n, pi->tab);
    } else {
        /* farthest-first: start from the row farthest from a random row,
         * then each time the row whose nearest chosen pivot is farthest
         * (ties: the lower row; chosen rows are never chosen again, so
         * duplicates of a pivot come last) */
        double *mind = malloc(n * sizeof *mind);
        uint8_t *taken = calloc(n, 1);
        if (!mind || !taken) {
            free(mind);
            free(taken);
            free(rows);
            return nomem("pivots");
        }
        {
            const size_t r0 = (size_t)(splitmix(&st) % (uint64_t)n);
            column(pool, pi->recs, pi->self, n, pi->dim, pi->recs + r0 * pi->dim, pi->self[r0], mind, 1);
        }
        for (size_t p = 0; p < np; p++) {
            size_t best = n;
            for (size_t r = 0; r < n; r++) {
                if (taken[r]) continue;
                /* NaN cannot occur: every record was checked */
                if (best == n || mind[r] > mind[best]) best = r;
            }
            rows[p] = best;
            taken[best] = 1;
            pi->pids[p] = pi->ids[best];
            memcpy(pi->precs + p * pi->dim, pi->recs + best * pi->dim, pi->bytes);
            pi->pself[p] = pi->self[best];
            column(pool, pi->recs, pi->self, n, pi->dim, pi->precs + p * pi->dim, pi->pself[p], pi->tab + p, np);
            for (size_t r = 0; r < n; r++) {
                const double d = pi->tab[r * np + p];
                if (p == 0 || d < mind[r]) mind[r] = d;
            }
        }
        free(mind);
        free(taken);
    }
    free(rows);
    pivot_pairs(pi);
    return PATINA_OK;
}

patina_status patina_pivot_index_new(patina_pivot_index_t **out, patina_context_t *ctx,
                                     const patina_extractor_t *ex, const uint64_t *ids, const void *records,
                                     size_t n, const patina_pivot_opts_t *opts_in)
{
    patina_pivot_opts_t o;
    patina_pivot_index_t *pi;
    patina_pool_t *pool;
    patina_status s;
    int own, have_form = 0;
    if (!out) return patina__fail(PATINA_E_INVALID, "pivots: null argument");
    *out = NULL;
    PATINA_TRY(check_extractor(ex));
    patina_pivot_opts_init(&o);
    if (opts_in) o = *opts_in;
    if (o.pivots == 0)
        return patina__fail(PATINA_E_INVALID, "pivots: 0 pivots: a pivot table needs at least one pivot");
    if (o.pivots > PATINA_PIVOTS_MAX)
        return patina__fail(PATINA_E_LIMIT, "pivots: %zu pivots (max %d)", o.pivots, PATINA_PIVOTS_MAX);
    if (o.select != PATINA_PIVOTS_FARTHEST && o.select != PATINA_PIVOTS_RANDOM)
        return patina__fail(PATINA_E_INVALID, "pivots: unknown pivot selection %d", (int)o.select);
    if (n == 0) return patina__fail(PATINA_E_INVALID, "pivots: empty collection: no rows to choose pivots from");
    if (!ids || !records) return patina__fail(PATINA_E_INVALID, "pivots: null argument");
    if (o.pivots > n)
        return patina__fail(PATINA_E_INVALID, "pivots: %zu pivots asked for, but the collection has %zu rows",
                            o.pivots, n);
    if (!(pi = alloc_index(ex, o.pivots, &s))) return s;
    if ((s = check_batch(pi, ids, records, n, &have_form)) != PATINA_OK ||
        (s = set_rows(pi, ids, records, n)) != PATINA_OK || (s = patina__workers_begin(ctx, 0, &pool, &own)) != PATINA_OK) {
        patina_pivot_index_free(pi);
        return s;
    }
    self_terms(pool, pi->recs, pi->n, pi->dim, pi->self);
    s = choose(pi, pool, &o);
    patina__workers_end(ctx, pool, own);
    if (s != PATINA_OK) {
        patina_pivot_index_free(pi);
        return s;
    }
    *out = pi;
    return PATINA_OK;
}

patina_status patina_pivot_index_build(patina_pivot_index_t **out, patina_context_t *ctx,
                                       const patina_extractor_t *ex, patina_collection_t *c,
                                       const patina_pivot_opts_t *opts)
{
    uint64_t *ids = NULL;
    uint8_t *descs = NULL;
    size_t n = 0, bytes = 0;
    patina_status s;
    if (!out || !c) return patina__fail(PATINA_E_INVALID, "pivots: null argument");
    *out = NULL;
    PATINA_TRY(check_extractor(ex));
    s = patina_collection_load(c, patina_extractor_spec(ex), &ids, &descs, &n, &bytes);
    if (s == PATINA_E_NOTFOUND)
        return patina__fail(PATINA_E_INVALID, "pivots: empty collection: no table '%s'", patina_extractor_spec(ex));
    if (s != PATINA_OK) return s;
    if (n && bytes != patina_extractor_bytes(ex))
        s = patina__fail(PATINA_E_CORRUPT, "pivots: table '%s' holds rows of %zu bytes, not %zu",
                         patina_extractor_spec(ex), bytes, patina_extractor_bytes(ex));
    else
        s = patina_pivot_index_new(out, ctx, ex, ids, descs, n, opts);
    free(ids);
    free(descs);
    return s;
}

void patina_pivot_index_free(patina_pivot_index_t *pi)
{
    if (!pi) return;
    patina_extractor_free(pi->ex);
    free(pi->pids);
    free(pi->precs);
    free(pi->pp);
    free(pi->ids);
    free(pi->recs);
    free(pi->tab);
    free(pi->self);
    free(pi->pself);
    if (pi->locked) pthread_rwlock_destroy(&pi->lock);
    free(pi);
}

size_t patina_pivot_index_size(const patina_pivot_index_t *pi)
{
    size_t n;
    if (!pi) return 0;
    pthread_rwlock_rdlock((pthread_rwlock_t *)&pi->lock);
    n = pi->n;
    pthread_rwlock_unlock((pthread_rwlock_t *)&pi->lock);
    return n;
}
size_t patina_pivot_index_pivots(const patina_pivot_index_t *pi) { return pi ? pi->np : 0; }
const uint64_t *patina_pivot_index_pivot_ids(const patina_pivot_index_t *pi) { return pi ? pi->pids : NULL; }

/* ---------------------------------------------------------------- updates */

static size_t find_row(const patina_pivot_index_t *pi, uint64_t id)
{
    size_t lo = 0, hi = pi->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (pi->ids[mid] < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < pi->n && pi->ids[lo] == id ? lo : (size_t)-1;
}

/* Adds or replaces n rows (ids, records, their table rows): a merge of
 * the held rows and the batch (sorted by id) into new arrays, swapped in
 * at the end, so that a failure changes nothing. */
static patina_status merge_rows(patina_pivot_index_t *pi, const uint64_t *ids, const float *recs,
                                const double *rows, const double *rself, size_t n)
{
    const size_t np = pi->np;
    id_pos_t *ord = malloc(n * sizeof *ord);
    size_t added = 0, cap, i, a = 0, b = 0, w = 0;
    uint64_t *nids = NULL;
    float *nrecs = NULL;
    double *ntab = NULL, *nself = NULL;
    if (!ord) return nomem("put");
    for (i = 0; i < n; i++) {
        ord[i] = (id_pos_t){ids[i], i};
        added += find_row(pi, ids[i]) == (size_t)-1;
    }
    qsort(ord, n, sizeof *ord, id_pos_cmp);
    cap = pi->n + added;
    nids = malloc(cap * sizeof *nids);
    nrecs = malloc(cap * pi->bytes);
    ntab = malloc(cap * np * sizeof *ntab);
    nself = malloc(cap * sizeof *nself);
    if (!nids || !nrecs || !ntab || !nself) {
        free(ord);
        free(nids);
        free(nrecs);
        free(ntab);
        free(nself);
        return nomem("put");
    }
    while (a < pi->n || b < n) {
        /* the batch's row wins a tie (it replaces the held one) */
        if (b < n && (a >= pi->n || ord[b].id <= pi->ids[a])) {
            if (a < pi->n && ord[b].id == pi->ids[a]) a++;
            nids[w] = ord[b].id;
            memcpy(nrecs + w * pi->dim, recs + ord[b].pos * pi->dim, pi->bytes);
            memcpy(ntab + w * np, rows + ord[b].pos * np, np * sizeof *ntab);
            nself[w] = rself[ord[b].pos];
            b++;
        } else {
            nids[w] = pi->ids[a];
            memcpy(nrecs + w * pi->dim, pi->recs + a * pi->dim, pi->bytes);
            memcpy(ntab + w * np, pi->tab + a * np, np * sizeof *ntab);
            nself[w] = pi->self[a];
            a++;
        }
        w++;
    }
    free(ord);
    free(pi->ids);
    free(pi->recs);
    free(pi->tab);
    free(pi->self);
    pi->ids = nids;
    pi->recs = nrecs;
    pi->tab = ntab;
    pi->self = nself;
    pi->n = w;
    pi->cap = cap;
    for (i = 0; i < n; i++) note_extent(pi, recs + i * pi->dim);
    return PATINA_OK;
}

static patina_status pivot_put_unlocked(patina_pivot_index_t *pi, patina_context_t *ctx, const uint64_t *ids,
                                     const void *records, size_t n)
{
    const float *recs = records;
    double *rows, *rself;
    patina_pool_t *pool;
    patina_status s;
    int own, have_form = 1;
    if (!pi || (n && (!ids || !records))) return patina__fail(PATINA_E_INVALID, "pivots: null argument");
    if (n == 0) return PATINA_OK;
    PATINA_TRY(check_batch(pi, ids, recs, n, &have_form));
    rows = malloc(n * pi->np * sizeof *rows);
    rself = malloc(n * sizeof *rself);
    if (!rows || !rself) {
        free(rows);
        free(rself);
        return nomem("put");
    }
    if ((s = patina__workers_begin(ctx, 0, &pool, &own)) != PATINA_OK) {
        free(rows);
        free(rself);
        return s;
    }
    self_terms(pool, recs, n, pi->dim, rself);
    table_rows(pool, pi, recs, rself, n, rows);
    patina__workers_end(ctx, pool, own);
    s = merge_rows(pi, ids, recs, rows, rself, n);
    free(rows);
    free(rself);
    return s;
}

static patina_status pivot_remove_unlocked(patina_pivot_index_t *pi, const uint64_t *ids, size_t n,
                                        size_t *removed)
{
    uint8_t *gone;
    size_t cnt = 0, w = 0;
    if (removed) *removed = 0;
    if (!pi || (n && !ids)) return patina__fail(PATINA_E_INVALID, "pivots: null argument");
    if (n == 0 || pi->n == 0) return PATINA_OK;
    if (!(gone = calloc(pi->n, 1))) return nomem("remove");
    for (size_t i = 0; i < n; i++) {
        size_t r = find_row(pi, ids[i]);
        if (r != (size_t)-1 && !gone[r]) {
            gone[r] = 1;
            cnt++;
        }
    }
    for (size_t r = 0; r < pi->n; r++) {
        if (gone[r]) continue;
        if (w != r) {
            pi->ids[w] = pi->ids[r];
            memcpy(pi->recs + w * pi->dim, pi->recs + r * pi->dim, pi->bytes);
            memcpy(pi->tab + w * pi->np, pi->tab + r * pi->np, pi->np * sizeof *pi->tab);
            pi->self[w] = pi->self[r];
        }
        w++;
    }
    pi->n = w;
    free(gone);
    if (removed) *removed = cnt;
    return PATINA_OK;
}

/* ----------------------------------------------------------------- search */

/* A query's view: its distances to the pivots, the slack, the pairs. */
typedef struct qview {
    const float *q;
    double sqq;    /* the query's self term */
    double *a;     /* (np) d(q, p_i) */
    const double *alo, *ahi; /* GPU strategies: (np) intervals holding d(q, p_i); else NULL */
    double eps;
    int usable;    /* 0: some a_i is not finite (another alpha): no pruning */
} qview_t;

/* Hits ordered by distance, then id; NaN after every number. */
static int worse(double d1, uint64_t i1, double d2, uint64_t i2)
{
    if (isnan(d1) || isnan(d2)) return isnan(d1) && (!isnan(d2) || i1 > i2);
    return d1 > d2 || (d1 == d2 && i1 > i2);
}

static int hit_cmp(const void *x, const void *y)
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

/* R of the header comment for a radius r. */
static double prune_radius(const qview_t *v, double r) { return (r + v->eps) * (1.0 + REL); }

/* Metric lower bound of row r (slack included). With the query's pivot
 * distances known as intervals [alo, ahi] that hold the computed doubles
 * (the GPU strategies), |a - b| becomes max(alo - b, b - ahi): the same
 * double when alo = ahi. */
static double metric_lb(const patina_pivot_index_t *pi, const qview_t *v, size_t r)
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
static int ptolemy_excludes(const patina_pivot_index_t *pi, const qview_t *v, size_t r, double R)
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

static patina_status check_query(const patina_pivot_index_t *pi, const float *q, size_t i)
{
    char what[48];
    snprintf(what, sizeof what, "search: query %zu", i);
    return sqfd_record_check(q, pi->dim, what);
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
    v->eps = slack(pi, (size_t)q[0], rec_weight(q));
}

typedef struct lbent {
    double lb;  /* the metric bound (finite: distances were checked usable) */
    size_t row;
} lbent_t;

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

static int lb_cmp(const void *x, const void *y)
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
    R = prune_radius(&kq->v, kq->radius);
    pthread_mutex_unlock(&kq->mu);
    for (size_t i = i0; i < i1; i++) {
        const size_t r = kq->ord[i].row;
        double d;
        if (kq->v.usable && kq->ord[i].lb > R) {
            atomic_store(&kq->stop, 1); /* every later row's bound is larger */
            break;
        }
        if (kq->v.usable && kq->bound == PATINA_BOUND_PTOLEMAIC && ptolemy_excludes(pi, &kq->v, r, R)) continue;
        d = sig_sqfd_self(kq->v.q, kq->v.sqq, pi->recs + r * pi->dim, pi->self[r]);
        comp++;
        pthread_mutex_lock(&kq->mu);
        heap_push(&kq->heap, d, pi->ids[r]);
        kq->radius = heap_radius(&kq->heap);
        R = prune_radius(&kq->v, kq->radius);
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

typedef struct lb_job {
    const patina_pivot_index_t *pi;
    const qview_t *v;
    lbent_t *ent;
} lb_job_t;

static void lb_task(void *arg, size_t t, int worker)
{
    const lb_job_t *j = arg;
    const size_t r0 = t * ROW_CHUNK, r1 = r0 + ROW_CHUNK < j->pi->n ? r0 + ROW_CHUNK : j->pi->n;
    (void)worker;
    for (size_t r = r0; r < r1; r++) j->ent[r] = (lbent_t){metric_lb(j->pi, j->v, r), r};
}

/* Puts the m smallest entries of e (n) by lb_cmp in front, in no order
 * (quickselect, median-of-three pivots; entries are distinct: ties of the
 * bound are ordered by row). */
static void select_front(lbent_t *e, size_t n, size_t m)
{
    size_t lo = 0, hi = n;
    if (m == 0 || m >= n) return;
    while (hi - lo > 16) {
        lbent_t t, piv;
        size_t mid = lo + (hi - lo) / 2, i = lo, j = hi - 1;
        /* median of three to e[mid] */
        if (lb_cmp(&e[mid], &e[lo]) < 0) t = e[mid], e[mid] = e[lo], e[lo] = t;
        if (lb_cmp(&e[hi - 1], &e[lo]) < 0) t = e[hi - 1], e[hi - 1] = e[lo], e[lo] = t;
        if (lb_cmp(&e[hi - 1], &e[mid]) < 0) t = e[hi - 1], e[hi - 1] = e[mid], e[mid] = t;
        piv = e[mid];
        /* Hoare partition: [lo, j] <= piv <= [j + 1, hi) */
        for (;;) {
            while (lb_cmp(&e[i], &piv) < 0) i++;
            while (lb_cmp(&e[j], &piv) > 0) j--;
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
    qsort(e + lo, hi - lo, sizeof *e, lb_cmp);
}

/* Runs the blocks of ord [base, end) on the pool. */
static void kq_phase(kq_t *kq, patina_pool_t *pool, size_t base, size_t end)
{
    kq->base = base;
    kq->end = end;
    kq->nblocks = (end - base + BLOCK - 1) / BLOCK;
    atomic_store(&kq->next, 0);
    patina_pool_run(pool, (size_t)pool_threads(pool), kq_task, kq);
}

/* One k-NN query (hits (k) sorted, *count filled); pool NULL: this thread. */
static patina_status knn_one(const patina_pivot_index_t *pi, patina_pool_t *pool, const float *q, size_t k,
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
        return nomem("k-NN query");
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
        patina_pool_run(pool, (pi->n + ROW_CHUNK - 1) / ROW_CHUNK, lb_task, &j);
        if (m >= pi->n) {
            qsort(kq.ord, pi->n, sizeof *kq.ord, lb_cmp);
            kq_phase(&kq, pool, 0, pi->n);
        } else {
            size_t w = m;
            double R;
            select_front(kq.ord, pi->n, m);
            qsort(kq.ord, m, sizeof *kq.ord, lb_cmp);
            kq_phase(&kq, pool, 0, m);
            if (!atomic_load(&kq.stop)) {
                R = prune_radius(&kq.v, kq.radius);
                for (size_t i = m; i < pi->n; i++)
                    if (!(kq.ord[i].lb > R)) kq.ord[w++] = kq.ord[i];
                qsort(kq.ord + m, w - m, sizeof *kq.ord, lb_cmp);
                kq_phase(&kq, pool, m, w);
            }
        }
    } else {
        for (size_t r = 0; r < pi->n; r++) kq.ord[r] = (lbent_t){0.0, r};
        kq_phase(&kq, pool, 0, pi->n);
    }
    pthread_mutex_destroy(&kq.mu);
    qsort(kq.heap.h, kq.heap.n, sizeof *kq.heap.h, hit_cmp);
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
        if (rq->v.usable && (metric_lb(pi, &rq->v, r) > rq->R ||
                             (rq->bound == PATINA_BOUND_PTOLEMAIC && ptolemy_excludes(pi, &rq->v, r, rq->R))))
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

static patina_status range_one(const patina_pivot_index_t *pi, patina_pool_t *pool, const float *q,
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
        return nomem("range query");
    }
    rq.pi = pi;
    rq.bound = bound;
    view_init(pi, &rq.v, q, a, &st[0]);
    if (bound == PATINA_BOUND_NONE) rq.v.usable = 0;
    rq.radius = radius;
    rq.R = prune_radius(&rq.v, radius);
    patina_pool_run(pool, nch, rq_task, &rq);
    for (c = 0; c < nch; c++) tot += rq.lens[c];
    if (atomic_load(&rq.failed)) s = nomem("range hits");
    else if (tot && !(all = malloc(tot * sizeof *all))) s = nomem("range hits");
    for (c = 0; c < nch; c++) {
        if (s == PATINA_OK && rq.lens[c]) memcpy(all + at, rq.lists[c], rq.lens[c] * sizeof *all);
        at += rq.lens[c];
        free(rq.lists[c]);
    }
    free(rq.lists);
    free(rq.lens);
    free(a);
    if (s != PATINA_OK) return s;
    if (tot > 1) qsort(all, tot, sizeof *all, hit_cmp);
    if (max_hits && tot > max_hits) tot = max_hits;
    *hits = all;
    *count = tot;
    st[2] += atomic_load(&rq.computed);
    st[1] += pi->n - atomic_load(&rq.computed);
    return PATINA_OK;
}

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
        return nomem("pivot distances");
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
    if (!h) return nomem("candidates");
    for (size_t i = 0; i < nc; i++) {
        const double d = sig_sqfd_self(v->q, v->sqq, pi->recs + (size_t)cand[i] * pi->dim, pi->self[cand[i]]);
        if (!k && !(d <= radius)) continue;
        h[m].id = pi->ids[cand[i]];
        h[m++].distance = d;
    }
    qsort(h, m, sizeof *h, hit_cmp);
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
            p->R = prune_radius(p->v, sqrt((double)p->heap[0]) * (1.0 + 0x1p-40));
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
            const double lb = ord ? ord[i].lb : metric_lb(p->pi, p->v, r);
            if (lb > p->R) {
                if (p->take) break;
                continue;
            }
            if (bound == PATINA_BOUND_PTOLEMAIC && ptolemy_excludes(p->pi, p->v, r, p->R)) continue;
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
        j->keep[r] = !(metric_lb(j->pi, j->v, r) > j->R) && !(j->ptolemaic && ptolemy_excludes(j->pi, j->v, r, j->R));
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
    p.R = k ? INFINITY : prune_radius(v, radius);
    p.rows = malloc(n * sizeof *p.rows);
    p.lo = malloc(n * sizeof *p.lo);
    p.hi = malloc(n * sizeof *p.hi);
    p.heap = malloc((p.take ? p.take : 1) * sizeof *p.heap);
    if (k && v->usable) ord = malloc(n * sizeof *ord);
    if (!p.rows || !p.lo || !p.hi || !p.heap || (k && v->usable && !ord)) {
        s = nomem("pipeline");
        goto done;
    }
    if (k && v->usable) {
        /* rows in metric-bound order, as knn_one: the m smallest first, then
         * those within the radius that leaves, sorted; blocks of BLOCK with
         * at most 2 in flight, the radius refined as blocks return */
        const size_t m = p.take > BLOCK ? p.take : BLOCK;
        lb_job_t j = {pi, v, ord};
        patina_pool_run(pool, (n + ROW_CHUNK - 1) / ROW_CHUNK, lb_task, &j);
        if (m >= n) {
            qsort(ord, n, sizeof *ord, lb_cmp);
            s = pipe_rows(&p, ord, 0, n, BLOCK, bound);
        } else {
            size_t w = m;
            select_front(ord, n, m);
            qsort(ord, m, sizeof *ord, lb_cmp);
            s = pipe_rows(&p, ord, 0, m, BLOCK, bound);
            while (s == PATINA_OK && (p.blk[0] || p.blk[1])) s = pipe_wait(&p);
            for (size_t i = m; s == PATINA_OK && i < n; i++)
                if (!(ord[i].lb > p.R)) ord[w++] = ord[i];
            qsort(ord + m, w - m, sizeof *ord, lb_cmp);
            if (s == PATINA_OK) s = pipe_rows(&p, ord, m, w, BLOCK, bound);
        }
    } else if (!k && v->usable) {
        /* range: the bounds on the workers, the survivors sent in blocks of PIPE_RANGE_BLOCK */
        keep_job_t j = {pi, v, p.R, bound == PATINA_BOUND_PTOLEMAIC, malloc(n + 1)};
        size_t s0 = 0;
        if (!j.keep) {
            s = nomem("pipeline");
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
            s = nomem("candidates");
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
static patina_status gpu_rescan(patina_gpu_t *g, const pgpu_sqfd_index_t *gv, const batch_t *b, size_t nq,
                                const double *sqq, uint32_t **cand, size_t *ncand, uint8_t *cpu, size_t st[3])
{
    const size_t dim = b->pi->dim;
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
        s = nomem("queries");
        goto done;
    }
    for (size_t q = 0; q < nq; q++)
        if (cpu[q] == 1) {
            memcpy(wq + j * dim, b->queries + q * dim, dim * sizeof *wq);
            ws[j] = sqq[q];
            w[j++] = (uint32_t)q;
        }
    s = patina_gpu_sqfd(g, gv, wq, ws, nw, b->lists ? 0 : b->k, b->radius, wc, wn, wcpu, &gst);
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
static patina_status gpu_batch(patina_context_t *ctx, batch_t *b, size_t nq, patina_pivot_strategy strategy,
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
        s = nomem("queries");
        goto done;
    }
    gpu_rows_view(pi, &gv);
    for (size_t q = 0; q < nq; q++) {
        const float *qr = b->queries + q * dim;
        sqq[q] = sig_self(qr);
        eps[q] = slack(pi, (size_t)qr[0], rec_weight(qr));
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
            pgpu_sqfd_stats_t gst;
            memset(&gst, 0, sizeof gst);
            s = b->bound == PATINA_BOUND_NONE
                    ? patina_gpu_sqfd(g, &gv, b->queries, sqq, nq, b->lists ? 0 : b->k, b->radius, cand, ncand, cpu, &gst)
                    : patina_gpu_sqfd_filter(g, &gv, b->queries, sqq, nq, alo, ahi, eps,
                                             b->bound == PATINA_BOUND_PTOLEMAIC, b->lists ? 0 : b->k, b->radius, cand,
                                             ncand, cpu, &gst);
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
            s = b->lists ? range_one(pi, NULL, qr, b->radius, b->bound, b->max_hits, &b->lists[q], &b->counts[q], one)
                         : knn_one(pi, NULL, qr, b->k, b->bound, b->hits + q * b->k, &b->counts[q], one);
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

/* ------------------------------------------------------ batch entry points */


static void batch_task(void *arg, size_t q, int worker)
{
    batch_t *b = arg;
    const float *qr = b->queries + q * b->pi->dim;
    (void)worker;
    if (b->lists)
        b->sts[q] = range_one(b->pi, NULL, qr, b->radius, b->bound, b->max_hits, &b->lists[q], &b->counts[q],
                              b->st[q]);
    else
        b->sts[q] = knn_one(b->pi, NULL, qr, b->k, b->bound, b->hits + q * b->k, &b->counts[q], b->st[q]);
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
        return nomem("queries");
    }
    if ((s = patina__workers_begin(ctx, 0, &pool, &own)) != PATINA_OK) {
        free(b->st);
        free(b->sts);
        return s;
    }
    if (nq >= (size_t)pool_threads(pool)) {
        /* one query per task, each on one thread */
        patina_pool_run(pool, nq, batch_task, b);
    } else {
        /* each query spread over the threads */
        for (q = 0; q < nq; q++) {
            const float *qr = b->queries + q * b->pi->dim;
            b->sts[q] = b->lists ? range_one(b->pi, pool, qr, b->radius, b->bound, b->max_hits, &b->lists[q],
                                             &b->counts[q], b->st[q])
                                 : knn_one(b->pi, pool, qr, b->k, b->bound, b->hits + q * b->k, &b->counts[q],
                                           b->st[q]);
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
        s = gpu_batch(ctx, b, nq, o->strategy == PATINA_PIVOT_AUTO ? PATINA_PIVOT_GPU : o->strategy, o->stats);
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

static patina_status pivot_knn_unlocked(patina_context_t *ctx, const patina_pivot_index_t *pi, const void *queries,
                                     size_t nq, size_t k, const patina_pivot_search_opts_t *opts,
                                     patina_hit_t *hits, size_t *counts)
{
    patina_pivot_search_opts_t o;
    batch_t b;
    if (k == 0) return patina__fail(PATINA_E_INVALID, "search: k = 0");
    if (k > K_MAX) return patina__fail(PATINA_E_LIMIT, "search: k = %zu is over the limit %d", k, K_MAX);
    if (nq && (!hits || !counts)) return patina__fail(PATINA_E_INVALID, "search: null argument");
    PATINA_TRY(search_args(pi, queries, nq, opts, &o));
    if (nq == 0) return PATINA_OK;
    for (size_t i = 0; i < nq * k; i++) hits[i] = (patina_hit_t){0, INFINITY};
    for (size_t q = 0; q < nq; q++) counts[q] = 0;
    if (pi->n == 0) {
        if (o.stats) o.stats->cpu = nq;
        return PATINA_OK;
    }
    memset(&b, 0, sizeof b);
    b.pi = pi;
    b.queries = queries;
    b.k = k;
    b.bound = o.bound;
    b.hits = hits;
    b.counts = counts;
    return run_strategy(ctx, &b, nq, &o);
}

static patina_status pivot_range_unlocked(patina_context_t *ctx, const patina_pivot_index_t *pi,
                                       const void *queries, size_t nq, double radius,
                                       const patina_pivot_search_opts_t *opts, patina_hit_t **hits,
                                       size_t *counts)
{
    patina_pivot_search_opts_t o;
    batch_t b;
    if (nq && (!hits || !counts)) return patina__fail(PATINA_E_INVALID, "search: null argument");
    for (size_t q = 0; q < nq; q++) {
        hits[q] = NULL;
        counts[q] = 0;
    }
    if (isnan(radius) || radius < 0)
        return patina__fail(PATINA_E_INVALID, "search: radius %g is not >= 0", radius);
    PATINA_TRY(search_args(pi, queries, nq, opts, &o));
    if (nq == 0) return PATINA_OK;
    if (pi->n == 0) {
        if (o.stats) o.stats->cpu = nq;
        return PATINA_OK;
    }
    memset(&b, 0, sizeof b);
    b.pi = pi;
    b.queries = queries;
    b.radius = radius;
    b.bound = o.bound;
    b.max_hits = o.max_hits;
    b.lists = hits;
    b.counts = counts;
    return run_strategy(ctx, &b, nq, &o);
}

/* ------------------------------------------------------------ persistence */

/* Blob "pivots:<spec>", host byte order (like the records):
 *   "PTNAPIV1", u32 version, u32 np, u64 n, u64 record bytes,
 *   np u64 pivot ids, np records, (np, np) f64 pivot distances,
 *   n (u64 id, u64 FNV-1a of the record), (n, np) f64 table. */
#define HDR_BYTES (8 + 4 + 4 + 8 + 8)

static patina_status blob_name(char *buf, size_t cap, const patina_extractor_t *ex)
{
    if ((size_t)snprintf(buf, cap, "pivots:%s", patina_extractor_spec(ex)) >= cap)
        return patina__fail(PATINA_E_LIMIT, "pivots: spec '%s' too long", patina_extractor_spec(ex));
    return PATINA_OK;
}

static size_t blob_size(size_t np, size_t n, size_t bytes)
{
    return HDR_BYTES + np * 8 + np * bytes + np * np * 8 + n * 16 + n * np * 8;
}

static patina_status pivot_save_unlocked(const patina_pivot_index_t *pi, patina_collection_t *c)
{
    char name[512];
    uint8_t *b, *p;
    size_t size;
    uint32_t v32;
    uint64_t v64;
    patina_status s;
    if (!pi || !c) return patina__fail(PATINA_E_INVALID, "pivots: null argument");
    PATINA_TRY(blob_name(name, sizeof name, pi->ex));
    size = blob_size(pi->np, pi->n, pi->bytes);
    if (!(b = malloc(size))) return nomem("saving");
    p = b;
    memcpy(p, MAGIC, 8), p += 8;
    v32 = FMT_VERSION, memcpy(p, &v32, 4), p += 4;
    v32 = (uint32_t)pi->np, memcpy(p, &v32, 4), p += 4;
    v64 = pi->n, memcpy(p, &v64, 8), p += 8;
    v64 = pi->bytes, memcpy(p, &v64, 8), p += 8;
    memcpy(p, pi->pids, pi->np * 8), p += pi->np * 8;
    memcpy(p, pi->precs, pi->np * pi->bytes), p += pi->np * pi->bytes;
    memcpy(p, pi->pp, pi->np * pi->np * 8), p += pi->np * pi->np * 8;
    for (size_t r = 0; r < pi->n; r++) {
        v64 = fnv64(pi->recs + r * pi->dim, pi->bytes);
        memcpy(p, &pi->ids[r], 8), p += 8;
        memcpy(p, &v64, 8), p += 8;
    }
    memcpy(p, pi->tab, pi->n * pi->np * 8);
    s = patina_collection_put_aux(c, name, b, size);
    free(b);
    return s;
}

patina_status patina_pivot_index_drop(patina_collection_t *c, const patina_extractor_t *ex)
{
    char name[512];
    if (!c || !ex) return patina__fail(PATINA_E_INVALID, "pivots: null argument");
    PATINA_TRY(blob_name(name, sizeof name, ex));
    return patina_collection_put_aux(c, name, NULL, 0);
}

static patina_status bad_blob(const char *name, const char *why)
{
    return patina__fail(PATINA_E_CORRUPT, "pivots: stored table '%s' is damaged: %s", name, why);
}

/* The index from a blob and the table's current rows (ids ascending). */
static patina_status from_blob(patina_pivot_index_t **out, patina_context_t *ctx, const patina_extractor_t *ex,
                               const char *name, const uint8_t *b, size_t size, const uint64_t *ids,
                               const uint8_t *descs, size_t n, size_t *refreshed)
{
    uint32_t ver, np32;
    uint64_t sn, sbytes;
    const uint8_t *rows, *stab;
    patina_pivot_index_t *pi;
    patina_pool_t *pool;
    patina_status s;
    size_t *todo = NULL, ntodo = 0, same_id = 0, dropped, i, j;
    int own, have_form = 0;
    if (size < HDR_BYTES || memcmp(b, MAGIC, 8) != 0) return bad_blob(name, "no header");
    memcpy(&ver, b + 8, 4);
    memcpy(&np32, b + 12, 4);
    memcpy(&sn, b + 16, 8);
    memcpy(&sbytes, b + 24, 8);
    if (ver != FMT_VERSION) return bad_blob(name, "unknown version");
    if (sbytes != patina_extractor_bytes(ex)) return bad_blob(name, "records of another size");
    if (np32 == 0 || np32 > PATINA_PIVOTS_MAX) return bad_blob(name, "pivot count out of range");
    if (sn > (size - HDR_BYTES) / 16 || size != blob_size(np32, (size_t)sn, (size_t)sbytes))
        return bad_blob(name, "wrong size");
    if (!(pi = alloc_index(ex, np32, &s))) return s;
    {
        const uint8_t *p = b + HDR_BYTES;
        memcpy(pi->pids, p, pi->np * 8), p += pi->np * 8;
        memcpy(pi->precs, p, pi->np * pi->bytes), p += pi->np * pi->bytes;
        memcpy(pi->pp, p, pi->np * pi->np * 8), p += pi->np * pi->np * 8;
        rows = p;
        stab = p + sn * 16;
    }
    for (i = 0; i < pi->np; i++) {
        if (!sig_record_valid(pi->precs + i * pi->dim, pi->dim) ||
            (i && ((double)pi->precs[i * pi->dim + 2] != pi->alpha || (int)pi->precs[i * pi->dim + 3] != pi->form))) {
            patina_pivot_index_free(pi);
            return bad_blob(name, "a malformed pivot record");
        }
        if (i == 0) {
            pi->alpha = (double)pi->precs[2];
            pi->form = (int)pi->precs[3];
            have_form = 1;
        }
        note_extent(pi, pi->precs + i * pi->dim);
        pi->pself[i] = sig_self(pi->precs + i * pi->dim);
    }
    if (pi->form == SIG_FORM_MINUS) {
        patina_pivot_index_free(pi);
        return bad_blob(name, "pivots of the minus form");
    }
    if ((s = check_batch(pi, ids, (const float *)descs, n, &have_form)) != PATINA_OK ||
        (s = reserve_rows(pi, n)) != PATINA_OK || !(todo = malloc((n ? n : 1) * sizeof *todo))) {
        patina_pivot_index_free(pi);
        if (s != PATINA_OK) {
            if (s == PATINA_E_INVALID) patina__prefix_error("pivots: the collection's table");
            return s == PATINA_E_INVALID ? PATINA_E_CORRUPT : s;
        }
        return nomem("loading");
    }
    /* match rows by id (both ascending) and record hash */
    for (i = 0, j = 0; i < n; i++) {
        const float *rec = (const float *)(descs + i * pi->bytes);
        uint64_t sid = 0, sh = 0;
        pi->ids[i] = ids[i];
        memcpy(pi->recs + i * pi->dim, rec, pi->bytes);
        note_extent(pi, rec);
        while (j < sn) {
            memcpy(&sid, rows + j * 16, 8);
            if (sid >= ids[i]) break;
            j++;
        }
        if (j < sn && sid == ids[i]) {
            same_id++;
            memcpy(&sh, rows + j * 16 + 8, 8);
            if (sh == fnv64(rec, pi->bytes)) {
                memcpy(pi->tab + i * pi->np, stab + j * pi->np * 8, pi->np * 8);
                continue;
            }
        }
        todo[ntodo++] = i;
    }
    pi->n = n;
    /* stored distances must be numbers >= 0 (rows to compute are set below) */
    for (i = 0, j = 0; i < n; i++) {
        if (j < ntodo && todo[j] == i) {
            j++;
            continue;
        }
        for (size_t p = 0; p < pi->np; p++)
            if (!(pi->tab[i * pi->np + p] >= 0.0)) {
                free(todo);
                patina_pivot_index_free(pi);
                return bad_blob(name, "a distance that is not a number >= 0");
            }
    }
    dropped = (size_t)sn - same_id; /* stored rows of images no longer in the table */
    {   /* every row's self term, then the table rows to compute */
        float *tmp = malloc((ntodo ? ntodo : 1) * pi->bytes);
        double *trow = malloc((ntodo ? ntodo : 1) * pi->np * sizeof *trow);
        double *tself = malloc((ntodo ? ntodo : 1) * sizeof *tself);
        if (!tmp || !trow || !tself || (s = patina__workers_begin(ctx, 0, &pool, &own)) != PATINA_OK) {
            free(tmp);
            free(trow);
            free(tself);
            free(todo);
            patina_pivot_index_free(pi);
            return s != PATINA_OK ? s : nomem("loading");
        }
        self_terms(pool, pi->recs, n, pi->dim, pi->self);
        for (i = 0; i < ntodo; i++) {
            memcpy(tmp + i * pi->dim, pi->recs + todo[i] * pi->dim, pi->bytes);
            tself[i] = pi->self[todo[i]];
        }
        if (ntodo) table_rows(pool, pi, tmp, tself, ntodo, trow);
        patina__workers_end(ctx, pool, own);
        for (i = 0; i < ntodo; i++) memcpy(pi->tab + todo[i] * pi->np, trow + i * pi->np, pi->np * sizeof *trow);
        free(tmp);
        free(trow);
        free(tself);
    }
    free(todo);
    if (refreshed) *refreshed = ntodo + dropped;
    *out = pi;
    return PATINA_OK;
}

static patina_status load_common(patina_pivot_index_t **out, patina_context_t *ctx, const patina_extractor_t *ex,
                                 patina_collection_t *c, patina_snapshot_t *snap, size_t *refreshed)
{
    char name[512];
    void *blob = NULL;
    size_t size = 0, n = 0, bytes = 0;
    uint64_t *ids = NULL;
    uint8_t *descs = NULL;
    patina_snapshot_t *own = NULL;
    patina_status s;
    if (!out || (!c && !snap)) return patina__fail(PATINA_E_INVALID, "pivots: null argument");
    *out = NULL;
    if (refreshed) *refreshed = 0;
    PATINA_TRY(check_extractor(ex));
    PATINA_TRY(blob_name(name, sizeof name, ex));
    if (!snap) {
        PATINA_TRY(patina_snapshot_new(&own, c));
        snap = own;
    }
    s = patina_snapshot_get_aux(snap, name, &blob, &size);
    if (s == PATINA_OK) {
        s = patina_snapshot_load(snap, patina_extractor_spec(ex), &ids, &descs, &n, &bytes);
        if (s == PATINA_E_NOTFOUND) s = PATINA_OK; /* no rows: every stored row is dropped */
        if (s == PATINA_OK && n && bytes != patina_extractor_bytes(ex))
            s = patina__fail(PATINA_E_CORRUPT, "pivots: table '%s' holds rows of %zu bytes, not %zu",
                             patina_extractor_spec(ex), bytes, patina_extractor_bytes(ex));
        /* the copies are ours: our own snapshot (its read transaction and the
         * store's map lock) ends before the context's workers are taken */
        patina_snapshot_free(own);
        own = NULL;
        if (s == PATINA_OK) s = from_blob(out, ctx, ex, name, blob, size, ids, descs, n, refreshed);
    }
    free(blob);
    free(ids);
    free(descs);
    patina_snapshot_free(own);
    return s;
}

patina_status patina_pivot_index_load(patina_pivot_index_t **out, patina_context_t *ctx,
                                      const patina_extractor_t *ex, patina_collection_t *c, size_t *refreshed)
{
    return load_common(out, ctx, ex, c, NULL, refreshed);
}

patina_status patina_pivot_index_load_snapshot(patina_pivot_index_t **out, patina_context_t *ctx,
                                               const patina_extractor_t *ex, patina_snapshot_t *snap,
                                               size_t *refreshed)
{
    return load_common(out, ctx, ex, NULL, snap, refreshed);
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
    *metric = metric_lb(pi, &v, r);
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
    *R_of_d = prune_radius(&v, d);
    free(a);
}

uint64_t patina__pivot_row_id(const patina_pivot_index_t *pi, size_t r) { return pi->ids[r]; }

/* ------------------------------------------------------ the locked calls
 * A pivot index is shared like a search index: searches and save hold its
 * read lock, put and remove its write lock (a change waits for the
 * searches running, later searches for the change). */

static void rd(const patina_pivot_index_t *pi) { pthread_rwlock_rdlock((pthread_rwlock_t *)&pi->lock); }
static void wr(patina_pivot_index_t *pi) { pthread_rwlock_wrlock(&pi->lock); }
static void un(const patina_pivot_index_t *pi) { pthread_rwlock_unlock((pthread_rwlock_t *)&pi->lock); }

patina_status patina_pivot_index_put(patina_pivot_index_t *pi, patina_context_t *ctx, const uint64_t *ids,
                                     const void *records, size_t n)
{
    patina_status s;
    if (!pi) return patina__fail(PATINA_E_INVALID, "pivots: null argument");
    wr(pi);
    s = pivot_put_unlocked(pi, ctx, ids, records, n);
    pi->serial = new_serial();
    un(pi);
    return s;
}

patina_status patina_pivot_index_remove(patina_pivot_index_t *pi, const uint64_t *ids, size_t n, size_t *removed)
{
    patina_status s;
    if (removed) *removed = 0;
    if (!pi) return patina__fail(PATINA_E_INVALID, "pivots: null argument");
    wr(pi);
    s = pivot_remove_unlocked(pi, ids, n, removed);
    pi->serial = new_serial();
    un(pi);
    return s;
}

patina_status patina_pivot_index_knn(patina_context_t *ctx, const patina_pivot_index_t *pi, const void *queries,
                                     size_t nq, size_t k, const patina_pivot_search_opts_t *opts,
                                     patina_hit_t *hits, size_t *counts)
{
    patina_status s;
    if (!pi) return pivot_knn_unlocked(ctx, pi, queries, nq, k, opts, hits, counts); /* its own error */
    rd(pi);
    s = pivot_knn_unlocked(ctx, pi, queries, nq, k, opts, hits, counts);
    un(pi);
    return s;
}

patina_status patina_pivot_index_range(patina_context_t *ctx, const patina_pivot_index_t *pi,
                                       const void *queries, size_t nq, double radius,
                                       const patina_pivot_search_opts_t *opts, patina_hit_t **hits,
                                       size_t *counts)
{
    patina_status s;
    if (!pi) return pivot_range_unlocked(ctx, pi, queries, nq, radius, opts, hits, counts);
    rd(pi);
    s = pivot_range_unlocked(ctx, pi, queries, nq, radius, opts, hits, counts);
    un(pi);
    return s;
}

patina_status patina_pivot_index_save(const patina_pivot_index_t *pi, patina_collection_t *c)
{
    patina_status s;
    if (!pi) return pivot_save_unlocked(pi, c);
    rd(pi);
    s = pivot_save_unlocked(pi, c);
    un(pi);
    return s;
}
