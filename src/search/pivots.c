/* Pivot tables for SQFD (include/patina/pivots.h): pivot selection, the
 * table of row-to-pivot distances, its lower bounds with their rounding
 * slack, the table's updates (put, remove) and its lock. The pivot tables
 * are four files sharing search/pivots_internal.h: this one (the object,
 * building, updates), pivots_search.c (the bounds and the CPU search),
 * pivots_gpu.c (the GPU strategies' host side) and pivots_store.c (save,
 * load, drop).
 *
 * Not here: the distance itself (src/algo/sqfd.c: with the self terms,
 * sig_sqfd_self with the query first exactly as the scan calls it, so a
 * computed distance is the scan's double), the searches, persistence and
 * any GPU work. Every row and
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

#include "algo/sqfd.h"
#include "core/context.h"
#include "core/internal.h"
#include "patina/pivots.h"
#include "search/distance.h"
#include "search/pivots_internal.h"

static _Atomic uint64_t next_serial = 1;

static uint64_t new_serial(void) { return SERIAL_TAG | atomic_fetch_add(&next_serial, 1); }
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

double patina__pivot_rec_weight(const float *rec)
{
    const size_t c = (size_t)rec[0];
    double w = 0.0;
    for (size_t i = 0; i < c; i++) w += (double)rec[SIG_HEADER + SIG_COLS * i];
    return w;
}

void patina__pivot_note_extent(patina_pivot_index_t *pi, const float *rec)
{
    const double w = patina__pivot_rec_weight(rec);
    const size_t c = (size_t)rec[0];
    if (w > pi->wmax) pi->wmax = w;
    if (c > pi->cmax) pi->cmax = c;
}

/* eps of the header comment for a query of count cq and weight wq. */
double patina__pivot_slack(const patina_pivot_index_t *pi, size_t cq, double wq)
{
    const double c = (double)(cq > pi->cmax ? cq : pi->cmax);
    const double w = wq > pi->wmax ? wq : pi->wmax;
    const double fmax = pi->form == SIG_FORM_GAUSSIAN ? 1.0 : 1.0 / pi->alpha;
    const double e = 2.0 * ((2 * c) * (2 * c) + 64.0) * U * fmax * (2 * w) * (2 * w);
    return (sqrt(e) + 8.0 * U * 2.0 * w * sqrt(fmax)) * (1.0 + 1e-6);
}

uint64_t patina__pivot_fnv64(const void *p, size_t n)
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
patina_status patina__pivot_sqfd_record_check(const float *rec, size_t n, const char *what)
{
    return pdist_check(PDIST_SQFD)(rec, n, what);
}

patina_status patina__pivot_nomem(const char *what)
{
    return patina__fail(PATINA_E_NOMEM, "pivots: out of memory (%s)", what);
}

/* The extractor must be a signature one with a metric form. */
patina_status patina__pivot_check_extractor(const patina_extractor_t *ex)
{
    if (!ex) return patina__fail(PATINA_E_INVALID, "pivots: null extractor");
    if (!(patina_extractor_caps(ex) & PATINA_CAP_PIVOTS) || strcmp(patina_extractor_distance_name(ex), "sqfd") != 0)
        return patina__fail(PATINA_E_INVALID, "pivots: pivot tables are for SQFD on signatures, not '%s'",
                            patina_extractor_spec(ex));
    if (strstr(patina_extractor_spec(ex), "form=minus"))
        return patina__fail(PATINA_E_INVALID,
                            "pivots: SQFD with form=minus is not a metric (signatures of different total "
                            "weight): no pivot table for '%s'",
                            patina_extractor_spec(ex));
    return PATINA_OK;
}

int patina__pivot_pool_threads(patina_pool_t *pool) { return pool ? patina_pool_size(pool) : 1; }

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

void patina__pivot_self_terms(patina_pool_t *pool, const float *rows, size_t n, size_t dim, double *out)
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

void patina__pivot_table_rows(patina_pool_t *pool, const patina_pivot_index_t *pi, const float *rows,
                              const double *rself, size_t n, double *tab)
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

patina_pivot_index_t *patina__pivot_alloc_index(const patina_extractor_t *ex, size_t np, patina_status *s)
{
    patina_pivot_index_t *pi = calloc(1, sizeof *pi);
    if (!pi) {
        *s = patina__pivot_nomem("index");
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
        *s = patina__pivot_nomem("pivots");
        return NULL;
    }
    *s = PATINA_OK;
    return pi;
}

patina_status patina__pivot_reserve_rows(patina_pivot_index_t *pi, size_t n)
{
    size_t cap;
    void *a, *b, *c, *d;
    if (n <= pi->cap) return PATINA_OK;
    cap = pi->cap ? pi->cap : 64;
    while (cap < n) cap *= 2;
    if (!(a = realloc(pi->ids, cap * sizeof *pi->ids))) return patina__pivot_nomem("rows");
    pi->ids = a;
    if (!(b = realloc(pi->recs, cap * pi->bytes))) return patina__pivot_nomem("rows");
    pi->recs = b;
    if (!(c = realloc(pi->tab, cap * (pi->np ? pi->np : 1) * sizeof *pi->tab))) return patina__pivot_nomem("rows");
    pi->tab = c;
    if (!(d = realloc(pi->self, cap * sizeof *pi->self))) return patina__pivot_nomem("rows");
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
patina_status patina__pivot_check_batch(patina_pivot_index_t *pi, const uint64_t *ids, const float *recs, size_t n,
                                        int *have_form)
{
    char what[64];
    uint64_t *sorted;
    for (size_t i = 0; i < n; i++) {
        const float *r = recs + i * pi->dim;
        snprintf(what, sizeof what, "pivots: row %zu (id %llu)", i, (unsigned long long)ids[i]);
        PATINA_TRY(patina__pivot_sqfd_record_check(r, pi->dim, what));
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
    if (!(sorted = malloc(n * sizeof *sorted))) return patina__pivot_nomem("ids");
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
    PATINA_TRY(patina__pivot_reserve_rows(pi, n));
    if (!(ord = malloc((n ? n : 1) * sizeof *ord))) return patina__pivot_nomem("rows");
    for (size_t i = 0; i < n; i++) ord[i] = (id_pos_t){ids[i], i};
    qsort(ord, n, sizeof *ord, id_pos_cmp);
    for (size_t i = 0; i < n; i++) {
        pi->ids[i] = ord[i].id;
        memcpy(pi->recs + i * pi->dim, recs + ord[i].pos * pi->dim, pi->bytes);
        patina__pivot_note_extent(pi, pi->recs + i * pi->dim);
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
    if (!rows) return patina__pivot_nomem("pivots");
    if (o->select == PATINA_PIVOTS_RANDOM) {
        /* a partial Fisher-Yates over row indexes: np distinct rows */
        size_t *perm = malloc(n * sizeof *perm);
        if (!perm) {
            free(rows);
            return patina__pivot_nomem("pivots");
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
        patina__pivot_table_rows(pool, pi, pi->recs, pi->self, n, pi->tab);
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
            return patina__pivot_nomem("pivots");
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
    void *copy = NULL;
    int own, have_form = 0;
    if (!out) return patina__fail(PATINA_E_INVALID, "pivots: null argument");
    *out = NULL;
    PATINA_TRY(patina__pivot_check_extractor(ex));
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
    if (!(pi = patina__pivot_alloc_index(ex, o.pivots, &s))) return s;
    if ((s = patina__rows(&records, n, pi->bytes, PATINA_ROW_ALIGN(sizeof(float)), &copy, "pivots")) != PATINA_OK ||
        (s = patina__pivot_check_batch(pi, ids, records, n, &have_form)) != PATINA_OK ||
        (s = set_rows(pi, ids, records, n)) != PATINA_OK ||
        (s = patina__workers_begin(ctx, 0, &pool, &own)) != PATINA_OK) {
        free(copy);
        patina_pivot_index_free(pi);
        return s;
    }
    free(copy);
    patina__pivot_self_terms(pool, pi->recs, pi->n, pi->dim, pi->self);
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
    PATINA_TRY(patina__pivot_check_extractor(ex));
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
    if (!ord) return patina__pivot_nomem("put");
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
        return patina__pivot_nomem("put");
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
    for (i = 0; i < n; i++) patina__pivot_note_extent(pi, recs + i * pi->dim);
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
    PATINA_TRY(patina__pivot_check_batch(pi, ids, recs, n, &have_form));
    rows = malloc(n * pi->np * sizeof *rows);
    rself = malloc(n * sizeof *rself);
    if (!rows || !rself) {
        free(rows);
        free(rself);
        return patina__pivot_nomem("put");
    }
    if ((s = patina__workers_begin(ctx, 0, &pool, &own)) != PATINA_OK) {
        free(rows);
        free(rself);
        return s;
    }
    patina__pivot_self_terms(pool, recs, n, pi->dim, rself);
    patina__pivot_table_rows(pool, pi, recs, rself, n, rows);
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
    if (!(gone = calloc(pi->n, 1))) return patina__pivot_nomem("remove");
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

/* ------------------------------------------------------ the locked calls
 * A pivot index is shared like a search index: searches and save hold its
 * read lock, put and remove its write lock (a change waits for the
 * searches running, later searches for the change). */

void patina__pivot_rd(const patina_pivot_index_t *pi) { pthread_rwlock_rdlock((pthread_rwlock_t *)&pi->lock); }
static void wr(patina_pivot_index_t *pi) { pthread_rwlock_wrlock(&pi->lock); }
void patina__pivot_un(const patina_pivot_index_t *pi) { pthread_rwlock_unlock((pthread_rwlock_t *)&pi->lock); }

patina_status patina_pivot_index_put(patina_pivot_index_t *pi, patina_context_t *ctx, const uint64_t *ids,
                                     const void *records, size_t n)
{
    patina_status s;
    void *copy;
    if (!pi) return patina__fail(PATINA_E_INVALID, "pivots: null argument");
    PATINA_TRY(patina__rows(&records, n, pi->bytes, PATINA_ROW_ALIGN(sizeof(float)), &copy, "pivots"));
    wr(pi);
    s = pivot_put_unlocked(pi, ctx, ids, records, n);
    pi->serial = new_serial();
    patina__pivot_un(pi);
    free(copy);
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
    patina__pivot_un(pi);
    return s;
}
