/* Live tables (include/patina/table.h): one searchable table of a collection
 * or of a partition, with its derived structures -- the search index, the
 * pivot table, the identification reference set -- kept in step with writes
 * made through it and reloaded when the collection's version says another
 * writer changed it. The engines (search/, identify/) know nothing of
 * collections' versions or of each other; this file is the one place that
 * decides what a write must update and which device a call runs on.
 *
 * Slices. On a context over G > 1 devices (include/patina/context.h) the
 * rows are split by id % G into G slices, each with its own structures
 * used with its own slice context (its device): loads and writes go to the
 * slice of each id; every search and identify call runs the G slices at
 * once, one host thread each (slice 0 in the calling thread, the others on
 * the context's slice runners), and merges
 * their answers exactly (patina_table_results_merge, patina_identify_merge).
 * With one device there is one slice and no thread or merge.
 *
 * Not here: the engines themselves, the store, extraction, the merges
 * (merge.c, src/identify/merge.c). */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/internal.h"
#include "identify/identify.h"
#include "patina/options.h"
#include "patina/table.h"
#include "search/distance.h"
#include "search/knn.h"

/* ----------------------------------------------------------- keys by id
 * A detached table has no collection to look keys up in: it keeps them. An
 * open-addressing map id -> malloc'd key, ids >= 1 (0 marks an empty slot,
 * UINT64_MAX a deleted one). */

#define KM_TOMB UINT64_MAX

typedef struct keymap {
    uint64_t *ids;
    char **keys;
    size_t cap, used, live; /* used counts live and deleted slots */
} keymap_t;

static size_t km_hash(uint64_t id, size_t cap)
{
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdULL;
    id ^= id >> 33;
    return (size_t)id & (cap - 1);
}

static size_t km_find(const keymap_t *m, uint64_t id)
{
    size_t i;
    if (!m->cap) return SIZE_MAX;
    for (i = km_hash(id, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->ids[i] == id) return i;
        if (m->ids[i] == 0) return SIZE_MAX;
    }
}

static void km_free(keymap_t *m)
{
    size_t i;
    for (i = 0; i < m->cap; i++) free(m->keys[i]);
    free(m->ids);
    free(m->keys);
    memset(m, 0, sizeof *m);
}

static patina_status km_grow(keymap_t *m)
{
    keymap_t n;
    size_t i;
    memset(&n, 0, sizeof n);
    n.cap = m->cap ? (m->live * 4 > m->cap ? m->cap * 2 : m->cap) : 64;
    n.ids = calloc(n.cap, sizeof *n.ids);
    n.keys = calloc(n.cap, sizeof *n.keys);
    if (!n.ids || !n.keys) {
        free(n.ids);
        free(n.keys);
        return patina__fail(PATINA_E_NOMEM, "table: out of memory for keys");
    }
    for (i = 0; i < m->cap; i++) {
        size_t j;
        if (m->ids[i] == 0 || m->ids[i] == KM_TOMB) continue;
        for (j = km_hash(m->ids[i], n.cap); n.ids[j]; j = (j + 1) & (n.cap - 1)) {
        }
        n.ids[j] = m->ids[i];
        n.keys[j] = m->keys[i];
        n.live++;
    }
    n.used = n.live;
    free(m->ids);
    free(m->keys);
    *m = n;
    return PATINA_OK;
}

/* Sets id's key (a copy). */
static patina_status km_put(keymap_t *m, uint64_t id, const char *key)
{
    size_t i = km_find(m, id);
    char *copy = strdup(key);
    if (!copy) return patina__fail(PATINA_E_NOMEM, "table: out of memory for keys");
    if (i != SIZE_MAX) {
        free(m->keys[i]);
        m->keys[i] = copy;
        return PATINA_OK;
    }
    if ((m->used + 1) * 2 > m->cap) {
        patina_status s = km_grow(m);
        if (s != PATINA_OK) {
            free(copy);
            return s;
        }
    }
    for (i = km_hash(id, m->cap); m->ids[i] && m->ids[i] != KM_TOMB; i = (i + 1) & (m->cap - 1)) {
    }
    if (m->ids[i] == 0) m->used++;
    m->ids[i] = id;
    m->keys[i] = copy;
    m->live++;
    return PATINA_OK;
}

static void km_del(keymap_t *m, uint64_t id)
{
    size_t i = km_find(m, id);
    if (i == SIZE_MAX) return;
    free(m->keys[i]);
    m->keys[i] = NULL;
    m->ids[i] = KM_TOMB;
    m->live--;
}

/* ------------------------------------------------------------ the object */

/* The rows whose id % slices is its number, and what is derived from them. */
typedef struct slice {
    patina_context_t *ctx;       /* its device's context (the context's slice; borrowed; NULL: none) */
    patina_index_t *idx;         /* SEARCH */
    patina_pivot_index_t *pidx;  /* PIVOTS with a stored table (and opts.pivots) */
    patina_refset_t *rs;         /* IDENTIFY */
} slice_t;

struct patina_table {
    patina_context_t *ctx;       /* borrowed; NULL: a pool per call, no GPU */
    patina_collection_t *c;      /* borrowed; NULL for a detached table */
    patina_extractor_t *ex;
    unsigned caps;
    patina_table_opts_t opts;
    patina_refset_t *shape;      /* IDENTIFY: an empty set of the spec, for query sizes and extraction */
    pthread_rwlock_t lock;       /* calls read; loads and writes write */
    pthread_mutex_t fan_mu;      /* guards fan */
    patina_table_fanout_t fan;   /* the last call over several slices (patina_table_fanout) */
    size_t ns;                   /* slices (1 .. PATINA_GPUS_MAX): the context's devices */
    slice_t sl[PATINA_GPUS_MAX]; /* (ns); their structures under lock */
    /* under lock */
    int loaded;
    size_t pivots_dirty;         /* rows in which the pivot tables differ from the stored table */
    patina_status rs_status;     /* why the slices' rs are missing (an f16 table: UNAVAILABLE), with rs_msg */
    char rs_msg[256];
    keymap_t keys;               /* detached tables */
    _Atomic uint64_t version;    /* the collection version (or stream sequence) the rows reflect */
    atomic_int stale;            /* reload before the next call */
};

uint32_t patina_key_partition(const char *key, uint32_t partitions)
{
    uint8_t h[32];
    uint64_t v = 0;
    int i;
    if (!key || partitions <= 1) return 0;
    patina_sha256(h, key, strlen(key));
    for (i = 0; i < 8; i++) v = v << 8 | h[i];
    return (uint32_t)(v % partitions);
}

static int in_partition(const patina_table_t *t, const char *key)
{
    return t->opts.partitions <= 1 || patina_key_partition(key, t->opts.partitions) == t->opts.partition;
}

void patina_table_opts_init(patina_table_opts_t *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->partition = 0;
    opts->partitions = 1;
    opts->pivots = 1;
}

void patina_table_query_init(patina_table_query_t *q)
{
    memset(q, 0, sizeof *q);
    q->kind = PATINA_QUERY_KNN;
    q->k = 10;
    q->device = PATINA_DEVICE_AUTO;
    q->bound = PATINA_BOUND_PTOLEMAIC;
}

static void unload(patina_table_t *t)
{
    size_t i;
    for (i = 0; i < t->ns; i++) {
        patina_index_free(t->sl[i].idx);
        t->sl[i].idx = NULL;
        patina_pivot_index_free(t->sl[i].pidx);
        t->sl[i].pidx = NULL;
        patina__refset_gpu_forget(t->sl[i].ctx, t->sl[i].rs); /* its device memory goes with it */
        patina_refset_free(t->sl[i].rs);
        t->sl[i].rs = NULL;
    }
    t->pivots_dirty = 0;
    t->rs_status = PATINA_OK;
    t->loaded = 0;
}

/* The slice of row id. */
static slice_t *slice_of(patina_table_t *t, uint64_t id) { return &t->sl[id % t->ns]; }

/* Whether a row's distance to a query depends on that row alone: then the
 * rows may be split and the answers merged. std_l2 divides by the standard
 * deviations of all the index's rows (search/distance.h): one slice. */
static int rows_independent(const patina_extractor_t *ex)
{
    return pdist_find(patina_extractor_distance_name(ex)) != PDIST_STD_L2;
}

void patina_table_free(patina_table_t *t)
{
    if (!t) return;
    unload(t);
    km_free(&t->keys);
    patina_refset_free(t->shape);
    patina_extractor_free(t->ex);
    pthread_rwlock_destroy(&t->lock);
    pthread_mutex_destroy(&t->fan_mu);
    free(t);
}

static patina_status table_alloc(patina_table_t **out, patina_context_t *ctx, patina_collection_t *c,
                                 const char *spec, const patina_table_opts_t *opts)
{
    patina_table_t *t;
    patina_status s;
    *out = NULL;
    if (!(t = calloc(1, sizeof *t))) return patina__fail(PATINA_E_NOMEM, "table: out of memory");
    if (pthread_mutex_init(&t->fan_mu, NULL) != 0) {
        free(t);
        return patina__fail(PATINA_E_NOMEM, "table: cannot create its lock");
    }
    if (patina__rwlock_init(&t->lock) != 0) {
        pthread_mutex_destroy(&t->fan_mu);
        free(t);
        return patina__fail(PATINA_E_NOMEM, "table: cannot create its lock");
    }
    t->ctx = ctx;
    t->c = c;
    if (opts) t->opts = *opts;
    else patina_table_opts_init(&t->opts);
    if (t->opts.partitions == 0) t->opts.partitions = 1;
    if (t->opts.partition >= t->opts.partitions) {
        const uint32_t p = t->opts.partition, np = t->opts.partitions;
        patina_table_free(t);
        return patina__fail(PATINA_E_INVALID, "table: partition %u of %u (partitions are 0 .. %u)", p, np, np - 1);
    }
    if ((s = patina_extractor_new(&t->ex, spec)) != PATINA_OK) {
        patina_table_free(t);
        return s;
    }
    t->caps = patina_extractor_caps(t->ex);
    t->ns = rows_independent(t->ex) ? patina__context_slices(ctx) : 1;
    if (t->ns > PATINA_GPUS_MAX) t->ns = PATINA_GPUS_MAX;
    for (size_t i = 0; i < t->ns; i++) t->sl[i].ctx = t->ns > 1 ? patina__context_slice(ctx, i) : ctx;
    if ((t->caps & PATINA_CAP_IDENTIFY) &&
        (s = patina_refset_new(&t->shape, patina_extractor_spec(t->ex))) != PATINA_OK) {
        patina_table_free(t);
        return s;
    }
    *out = t;
    return PATINA_OK;
}

/* "a, b, c" (or "none yet") into buf. */
static void list_tables(char **specs, size_t n, char *buf, size_t size)
{
    size_t k, len = 0;
    buf[0] = '\0';
    for (k = 0; k < n && len < size; k++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", k ? ", " : "", specs[k]);
    if (!n) snprintf(buf, size, "none yet");
}

static int has_caps(const char *spec, unsigned need)
{
    patina_extractor_t *ex = NULL;
    int ok;
    if (!need) return 1;
    if (patina_extractor_new(&ex, spec) != PATINA_OK) return 0;
    ok = (patina_extractor_caps(ex) & need) == need;
    patina_extractor_free(ex);
    return ok;
}

static const char *use_name(unsigned need)
{
    return (need & PATINA_CAP_IDENTIFY) ? "identification" : (need & PATINA_CAP_SEARCH) ? "search" : "this use";
}

/* The collection's table that spec names, canonical, into out. */
static patina_status resolve_spec(patina_collection_t *c, const char *spec, const patina_table_opts_t *o, char *out,
                                  size_t size)
{
    char **specs = NULL, list[2048];
    size_t n = 0, k, found = 0, pick = 0;
    patina_extractor_t *ex = NULL;
    patina_status s = patina_collection_tables(c, &specs, &n);
    unsigned need = o ? o->need : 0;
    if (s != PATINA_OK) return s;
    list_tables(specs, n, list, sizeof list);
    if (!spec || !*spec) {
        /* identification tables are searched only when named: their use is identify */
        for (k = 0; k < n; k++)
            if (has_caps(specs[k], need) &&
                ((need & PATINA_CAP_IDENTIFY) || !has_caps(specs[k], PATINA_CAP_IDENTIFY))) {
                if (!found++) pick = k;
            }
        if (found == 1) snprintf(out, size, "%s", specs[pick]);
        else if (!found)
            s = patina__fail(PATINA_E_NOTFOUND, "table: the collection has no table for %s yet (its tables: %s)%s",
                             use_name(need), list,
                             (need & PATINA_CAP_IDENTIFY) ? "; index references with -f rootsift" : "");
        else
            s = patina__fail(PATINA_E_INVALID, "table: the collection has %zu tables for %s (%s): name one", found,
                             use_name(need), list);
        goto out;
    }
    if ((s = patina_extractor_new(&ex, spec)) != PATINA_OK) goto out;
    for (k = 0; k < n && strcmp(specs[k], patina_extractor_spec(ex)); k++) {
    }
    if (k < n) {
        snprintf(out, size, "%s", specs[k]);
        goto check;
    }
    if (!strchr(spec, ':')) { /* a bare family name: its only table */
        size_t fl = strlen(spec);
        for (k = 0; k < n; k++)
            if (!strncmp(specs[k], spec, fl) && (specs[k][fl] == '\0' || specs[k][fl] == ':')) {
                if (!found++) pick = k;
            }
        if (found == 1) {
            snprintf(out, size, "%s", specs[pick]);
            goto check;
        }
        if (found > 1) {
            s = patina__fail(PATINA_E_INVALID, "table: the collection has %zu '%s' tables (its tables: %s): give the options",
                             found, spec, list);
            goto out;
        }
    }
    if (o && o->create) {
        snprintf(out, size, "%s", patina_extractor_spec(ex));
        goto check;
    }
    s = patina__fail(PATINA_E_NOTFOUND, "table: the collection has no table '%s' (its tables: %s)",
                     patina_extractor_spec(ex), list);
    goto out;
check:
    if (!has_caps(out, need))
        s = patina__fail(PATINA_E_INVALID, "table: '%s' is not for %s%s", out, use_name(need),
                         has_caps(out, PATINA_CAP_IDENTIFY) ? " (it is for identification)" : "");
out:
    patina_extractor_free(ex);
    for (k = 0; k < n; k++) free(specs[k]);
    free(specs);
    return s;
}

patina_status patina_table_open(patina_table_t **t, patina_context_t *ctx, patina_collection_t *c, const char *spec,
                                const patina_table_opts_t *opts)
{
    char canon[1024];
    patina_status s;
    if (!t) return patina__fail(PATINA_E_INVALID, "table: null table pointer");
    *t = NULL;
    if (!c) return patina__fail(PATINA_E_INVALID, "table: null collection");
    PATINA_TRY(resolve_spec(c, spec, opts, canon, sizeof canon));
    if ((s = table_alloc(t, ctx, c, canon, opts)) != PATINA_OK) return s;
    atomic_store(&(*t)->stale, 1); /* nothing loaded yet */
    return PATINA_OK;
}

patina_status patina_table_new(patina_table_t **t, patina_context_t *ctx, const char *spec,
                               const patina_table_opts_t *opts)
{
    patina_table_t *n;
    patina_status s;
    if (!t) return patina__fail(PATINA_E_INVALID, "table: null table pointer");
    *t = NULL;
    PATINA_TRY(table_alloc(&n, ctx, NULL, spec, opts));
    s = PATINA_OK;
    for (size_t i = 0; s == PATINA_OK && i < n->ns; i++) {
        if (n->caps & PATINA_CAP_SEARCH) s = patina_index_new(&n->sl[i].idx, n->ex, NULL, NULL, 0);
        if (s == PATINA_OK && (n->caps & PATINA_CAP_IDENTIFY))
            s = patina_refset_new(&n->sl[i].rs, patina_extractor_spec(n->ex));
    }
    if (s != PATINA_OK) {
        patina_table_free(n);
        return s;
    }
    n->loaded = 1;
    *t = n;
    return PATINA_OK;
}

const char *patina_table_spec(const patina_table_t *t) { return t ? patina_extractor_spec(t->ex) : NULL; }
const patina_extractor_t *patina_table_extractor(const patina_table_t *t) { return t ? t->ex : NULL; }
unsigned patina_table_caps(const patina_table_t *t) { return t ? t->caps : 0; }
uint64_t patina_table_version(patina_table_t *t) { return t ? atomic_load(&t->version) : 0; }

/* --------------------------------------------------------------- loading */

/* Drops from each slice the rows it must not hold (write lock held): rows
 * outside the table's partition (their keys from the snapshot the rows were
 * loaded from) and, from the pivot tables (each loaded whole), the other
 * slices' rows. ids (n): the table's rows in that snapshot. */
static patina_status keep_rows(patina_table_t *t, patina_snapshot_t *snap, const uint64_t *ids, size_t n)
{
    uint64_t *drop = NULL;
    uint8_t *outside = NULL; /* (n) 1: outside the partition */
    size_t i, k;
    patina_record_t *recs = NULL;
    patina_status s = PATINA_OK;
    if (!n) return PATINA_OK;
    if (!(drop = malloc(n * sizeof *drop)) || !(outside = calloc(n, 1)) ||
        (t->opts.partitions > 1 && !(recs = calloc(n, sizeof *recs)))) {
        s = patina__fail(PATINA_E_NOMEM, "table: out of memory for %zu keys", n);
        goto out;
    }
    if (recs) {
        if ((s = patina_snapshot_get(snap, ids, n, recs)) != PATINA_OK && s != PATINA_E_NOTFOUND) goto out;
        if (s == PATINA_E_NOTFOUND) patina_clear_error();
        s = PATINA_OK;
        for (i = 0; i < n; i++) outside[i] = !recs[i].key || !in_partition(t, recs[i].key);
    }
    for (k = 0; s == PATINA_OK && k < t->ns; k++) {
        slice_t *sl = &t->sl[k];
        size_t nd = 0;
        for (i = 0; i < n; i++)
            if (outside[i] && ids[i] % t->ns == k) drop[nd++] = ids[i];
        if (nd && sl->idx) s = patina_index_remove(sl->idx, drop, nd, NULL);
        for (i = 0; s == PATINA_OK && sl->rs && i < nd; i++) {
            s = patina_refset_remove(sl->rs, drop[i]);
            if (s == PATINA_E_NOTFOUND) s = PATINA_OK;
        }
        if (s != PATINA_OK || !sl->pidx) continue;
        for (i = 0; t->ns > 1 && i < n; i++) /* every row of the other slices, in the partition or not */
            if (ids[i] % t->ns != k) drop[nd++] = ids[i];
        if (nd) s = patina_pivot_index_remove(sl->pidx, drop, nd, NULL);
    }
out:
    for (i = 0; recs && i < n; i++) patina_record_release(&recs[i]);
    free(recs);
    free(outside);
    free(drop);
    return s;
}

/* Slice k's search index from the table's rows ids, descs (n, bytes, ids
 * ascending: the store's order), for tables of several slices. */
static patina_status slice_index(patina_table_t *t, size_t k, const uint64_t *ids, const uint8_t *descs, size_t n,
                                 size_t bytes, patina_index_t **idx)
{
    uint64_t *sid = NULL;
    uint8_t *sdesc = NULL;
    size_t m = 0, i;
    patina_status s;
    char why[512];
    if (n && bytes != patina_extractor_bytes(t->ex))
        return patina__fail(PATINA_E_CORRUPT, "search: table '%s' holds %zu-byte descriptors; %s has %zu",
                            patina_extractor_spec(t->ex), bytes, patina_extractor_family(t->ex),
                            patina_extractor_bytes(t->ex));
    for (i = 0; i < n; i++) m += ids[i] % t->ns == k;
    if (m && (!(sid = malloc(m * sizeof *sid)) || !(sdesc = malloc(m * bytes)))) {
        free(sid);
        return patina__fail(PATINA_E_NOMEM, "table: out of memory for %zu rows", m);
    }
    for (i = 0, m = 0; i < n; i++)
        if (ids[i] % t->ns == k) {
            sid[m] = ids[i];
            memcpy(sdesc + m * bytes, descs + i * bytes, bytes);
            m++;
        }
    s = patina_index_new(idx, t->ex, sid, sdesc, m);
    free(sid);
    free(sdesc);
    if (s == PATINA_E_INVALID) { /* a stored row the distance refuses: the table is damaged */
        snprintf(why, sizeof why, "%s", patina_last_error());
        s = patina__fail(PATINA_E_CORRUPT, "%s of the stored table", why);
    }
    return s;
}

/* Slice k's structures from snapshot snap (write lock held). ids, descs,
 * n, bytes: the table's rows, loaded when there are several slices. */
static patina_status load_slice(patina_table_t *t, size_t k, patina_snapshot_t *snap, const uint64_t *ids,
                                const uint8_t *descs, size_t n, size_t bytes)
{
    slice_t *sl = &t->sl[k];
    size_t refreshed = 0;
    patina_status s = PATINA_OK;
    if (t->caps & PATINA_CAP_SEARCH)
        s = t->ns == 1 ? patina_index_load_snapshot(&sl->idx, t->ex, snap)
                       : slice_index(t, k, ids, descs, n, bytes, &sl->idx);
    if (s == PATINA_OK && (t->caps & PATINA_CAP_PIVOTS) && t->opts.pivots) {
        /* the stored table is the whole table's: each slice loads it and keeps its rows (keep_rows) */
        s = patina_pivot_index_load_snapshot(&sl->pidx, sl->ctx, t->ex, snap, &refreshed);
        if (s == PATINA_E_NOTFOUND) {
            patina_clear_error();
            s = PATINA_OK;
        } else if (s != PATINA_OK) {
            patina__prefix_error("the stored pivot table of '%s' (rebuild it with patina index -f %s --pivots N, "
                                 "or open the table without pivots)",
                                 patina_extractor_spec(t->ex), patina_extractor_spec(t->ex));
        }
        t->pivots_dirty = refreshed; /* the whole table's: the same in every slice */
    }
    if (s == PATINA_OK && (t->caps & PATINA_CAP_IDENTIFY)) {
        patina_refset_spec_t rspec;
        size_t rows, rbytes;
        patina_refset_spec_init(&rspec);
        rspec.table = patina_extractor_spec(t->ex);
        rspec.snapshot = snap;
        rspec.shard = (uint32_t)k;
        rspec.shards = (uint32_t)t->ns;
        if (patina_collection_table_info(t->c, rspec.table, &rows, &rbytes) == PATINA_E_NOTFOUND) {
            patina_clear_error();
            s = patina_refset_new(&sl->rs, rspec.table); /* opened with create: empty until written */
        } else {
            s = patina_refset_load(&sl->rs, t->c, &rspec);
        }
        if (s == PATINA_E_UNAVAILABLE) { /* f16 records: the table opens, identify says why not */
            t->rs_status = s;
            snprintf(t->rs_msg, sizeof t->rs_msg, "%s", patina_last_error());
            patina_clear_error();
            s = PATINA_OK;
        }
    }
    return s;
}

/* (Re)loads every structure from one snapshot (write lock held). */
static patina_status load(patina_table_t *t)
{
    patina_snapshot_t *snap = NULL;
    uint64_t v = 0, *ids = NULL;
    uint8_t *descs = NULL;
    size_t n = 0, bytes = 0, k;
    int rows_needed = t->opts.partitions > 1 || (t->ns > 1 && (t->caps & PATINA_CAP_SEARCH));
    patina_status s;
    unload(t);
    /* the version first: the snapshot is as new or newer, so a write between the two only makes the
     * next call reload once more */
    PATINA_TRY(patina_collection_version(t->c, &v));
    PATINA_TRY(patina_snapshot_new(&snap, t->c));
    s = PATINA_OK;
    if (rows_needed) { /* the ids (partitions, slices) and the descriptors (slices' indexes), read once */
        s = patina_snapshot_load(snap, patina_extractor_spec(t->ex), &ids, &descs, &n, &bytes);
        if (s == PATINA_E_NOTFOUND) {
            patina_clear_error();
            s = PATINA_OK;
            n = 0;
        }
        if (t->ns == 1) {
            free(descs);
            descs = NULL;
        }
    }
    for (k = 0; s == PATINA_OK && k < t->ns; k++) s = load_slice(t, k, snap, ids, descs, n, bytes);
    free(descs);
    if (s == PATINA_OK && rows_needed) s = keep_rows(t, snap, ids, n);
    free(ids);
    patina_snapshot_free(snap);
    if (s != PATINA_OK) {
        unload(t);
        return s;
    }
    t->loaded = 1;
    atomic_store(&t->version, v);
    return PATINA_OK;
}

/* Marks the table stale when the collection moved past the version its rows
 * reflect (another process, the pipeline, another handle). */
static void note_version(patina_table_t *t)
{
    uint64_t v;
    if (!t->c) return;
    if (patina_collection_version(t->c, &v) == PATINA_OK && v != atomic_load(&t->version)) atomic_store(&t->stale, 1);
}

/* Returns with t->lock held for reading and the rows current (PATINA_OK),
 * or unlocked with the failure. */
static patina_status enter(patina_table_t *t, int *reloaded)
{
    if (reloaded) *reloaded = 0;
    note_version(t);
    for (;;) {
        patina_status s = PATINA_OK;
        pthread_rwlock_rdlock(&t->lock);
        if (t->loaded && !atomic_load(&t->stale)) return PATINA_OK;
        pthread_rwlock_unlock(&t->lock);
        pthread_rwlock_wrlock(&t->lock);
        if (!t->loaded || atomic_load(&t->stale)) {
            atomic_store(&t->stale, 0);
            s = load(t);
            if (s != PATINA_OK) atomic_store(&t->stale, 1);
            else if (reloaded) *reloaded = 1;
        }
        pthread_rwlock_unlock(&t->lock);
        if (s != PATINA_OK) return s;
    }
}

patina_status patina_table_refresh(patina_table_t *t, int *reloaded)
{
    if (!t) return patina__fail(PATINA_E_INVALID, "table: null table");
    PATINA_TRY(enter(t, reloaded));
    pthread_rwlock_unlock(&t->lock);
    return PATINA_OK;
}

static size_t slice_rows(const slice_t *sl)
{
    if (sl->idx) return patina_index_size(sl->idx);
    if (sl->rs) return patina_refset_size(sl->rs);
    return 0;
}

static size_t rows_of(const patina_table_t *t)
{
    size_t n = 0, k;
    for (k = 0; k < t->ns; k++) n += slice_rows(&t->sl[k]);
    return n;
}

size_t patina_table_size(patina_table_t *t)
{
    size_t n;
    if (!t || enter(t, NULL) != PATINA_OK) return 0;
    n = rows_of(t);
    pthread_rwlock_unlock(&t->lock);
    return n;
}

size_t patina_table_matched_rows(patina_table_t *t)
{
    size_t n = 0, k;
    if (!t || enter(t, NULL) != PATINA_OK) return 0;
    for (k = 0; k < t->ns; k++) n += t->sl[k].rs ? patina_refset_rows(t->sl[k].rs) : slice_rows(&t->sl[k]);
    pthread_rwlock_unlock(&t->lock);
    return n;
}

size_t patina_table_pivots(patina_table_t *t)
{
    size_t p;
    if (!t || enter(t, NULL) != PATINA_OK) return 0;
    p = t->sl[0].pidx ? patina_pivot_index_pivots(t->sl[0].pidx) : 0; /* every slice has the same pivots */
    pthread_rwlock_unlock(&t->lock);
    return p;
}

/* ------------------------------------------------------------------- keys */

/* keys[i] for ids[i] (malloc'd; NULL for a record gone), read lock held. */
static patina_status lookup_keys(patina_table_t *t, const uint64_t *ids, size_t n, char **keys)
{
    patina_snapshot_t *snap = NULL;
    patina_record_t *recs;
    patina_status s;
    size_t i;
    if (!n) return PATINA_OK;
    if (!t->c) {
        for (i = 0; i < n; i++) {
            size_t j = km_find(&t->keys, ids[i]);
            keys[i] = NULL;
            if (j != SIZE_MAX && !(keys[i] = strdup(t->keys.keys[j]))) {
                while (i) free(keys[--i]);
                return patina__fail(PATINA_E_NOMEM, "table: out of memory for keys");
            }
        }
        return PATINA_OK;
    }
    if (!(recs = calloc(n, sizeof *recs))) return patina__fail(PATINA_E_NOMEM, "table: out of memory for keys");
    s = patina_snapshot_new(&snap, t->c);
    if (s == PATINA_OK) {
        s = patina_snapshot_get(snap, ids, n, recs);
        if (s == PATINA_E_NOTFOUND) { /* removed by another writer since the rows were loaded */
            patina_clear_error();
            s = PATINA_OK;
        }
    }
    for (i = 0; i < n; i++) {
        keys[i] = s == PATINA_OK ? recs[i].key : NULL; /* taken over */
        if (s == PATINA_OK) recs[i].key = NULL;
        patina_record_release(&recs[i]);
    }
    patina_snapshot_free(snap);
    free(recs);
    return s;
}

/* ----------------------------------------------------------------- search */

static patina_table_t **lock_order(patina_table_t *const *tables, size_t nt);

void patina_table_results_release(patina_table_results_t *res)
{
    size_t i;
    if (!res) return;
    if (res->keys && res->offsets)
        for (i = 0; i < res->offsets[res->nq]; i++) free(res->keys[i]);
    free(res->keys);
    free(res->hits);
    free(res->offsets);
    memset(res, 0, sizeof *res);
}

/* The device policy of include/patina/table.h, for pivot tables. */
static patina_pivot_strategy pivot_strategy(patina_device d)
{
    return d == PATINA_DEVICE_CPU ? PATINA_PIVOT_CPU : d == PATINA_DEVICE_GPU ? PATINA_PIVOT_GPU : PATINA_PIVOT_AUTO;
}

static patina_status check_query(const patina_table_t *t, const patina_table_query_t *q)
{
    if (!(t->caps & PATINA_CAP_SEARCH))
        return patina__fail(PATINA_E_INVALID, "search: '%s' is not searched by a distance%s", patina_extractor_spec(t->ex),
                            (t->caps & PATINA_CAP_IDENTIFY) ? " (it is for identification)" : "");
    if (q->device != PATINA_DEVICE_AUTO && q->device != PATINA_DEVICE_CPU && q->device != PATINA_DEVICE_GPU)
        return patina__fail(PATINA_E_INVALID, "search: device '%s' is not a search device (auto, cpu or gpu)",
                            patina_device_name(q->device) ? patina_device_name(q->device) : "?");
    /* the bounds of the library's option table (include/patina/options.h), before k is cut to the rows */
    if (q->kind == PATINA_QUERY_KNN) {
        PATINA_TRY(patina_options_check(PATINA_OPTIONS_SEARCH, "k", (double)q->k));
    } else if (q->kind == PATINA_QUERY_RANGE) {
        PATINA_TRY(patina_options_check(PATINA_OPTIONS_SEARCH, "range", q->radius));
    } else {
        return patina__fail(PATINA_E_INVALID, "search: unknown query kind %d", (int)q->kind);
    }
    if (q->bound != PATINA_BOUND_PTOLEMAIC && q->bound != PATINA_BOUND_METRIC && q->bound != PATINA_BOUND_NONE)
        return patina__fail(PATINA_E_INVALID, "search: unknown pivot bound %d", (int)q->bound);
    return PATINA_OK;
}

/* k-NN into res (read locks held, rows > 0): through the pivot table pidx
 * when set, else over the indexes ixs[0 .. nix) as one; rows: theirs. */
static patina_status run_knn(patina_context_t *ctx, const patina_pivot_index_t *pidx, const patina_index_t *const *ixs,
                             size_t nix, const void *queries, size_t nq, const patina_table_query_t *q, size_t rows,
                             patina_table_results_t *res)
{
    size_t k = q->k < rows ? q->k : rows, *counts, i, j, at = 0;
    patina_hit_t *hits;
    patina_status s;
    if (k > SIZE_MAX / sizeof *hits / nq) return patina__fail(PATINA_E_NOMEM, "search: %zu x %zu hits", nq, k);
    hits = malloc(nq * k * sizeof *hits);
    counts = malloc(nq * sizeof *counts);
    if (!hits || !counts) {
        free(hits);
        free(counts);
        return patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu x %zu hits", nq, k);
    }
    if (pidx) {
        patina_pivot_search_opts_t po;
        patina_pivot_search_opts_init(&po);
        po.bound = q->bound;
        po.stats = q->stats;
        po.strategy = pivot_strategy(q->device);
        s = patina_pivot_index_knn(ctx, pidx, queries, nq, k, &po, hits, counts);
    } else {
        patina_search_opts_t so;
        patina_search_opts_init(&so);
        so.device = q->device;
        so.stats = q->stats;
        s = patina__index_search_many(ctx, ixs, nix, queries, nq, k, 0.0, &so, hits, NULL, counts);
    }
    if (s == PATINA_OK) {
        /* compact (nq, k) rows into one run: the counts are min(k, rows), all equal, but say so in code */
        for (i = 0; i < nq; i++) {
            res->offsets[i] = at;
            for (j = 0; j < counts[i]; j++) hits[at++] = hits[i * k + j];
        }
        res->offsets[nq] = at;
        res->hits = hits;
        hits = NULL;
    }
    free(hits);
    free(counts);
    return s;
}

/* Range into res (read locks held, rows > 0): as run_knn. */
static patina_status run_range(patina_context_t *ctx, const patina_pivot_index_t *pidx,
                               const patina_index_t *const *ixs, size_t nix, const void *queries, size_t nq,
                               const patina_table_query_t *q, patina_table_results_t *res)
{
    patina_hit_t **per = calloc(nq, sizeof *per), *all = NULL;
    size_t *counts = calloc(nq, sizeof *counts), total = 0, i;
    patina_status s;
    if (!per || !counts) {
        free(per);
        free(counts);
        return patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu queries", nq);
    }
    if (pidx) {
        patina_pivot_search_opts_t po;
        patina_pivot_search_opts_init(&po);
        po.bound = q->bound;
        po.max_hits = q->max_hits;
        po.stats = q->stats;
        po.strategy = pivot_strategy(q->device);
        s = patina_pivot_index_range(ctx, pidx, queries, nq, q->radius, &po, per, counts);
    } else {
        patina_search_opts_t so;
        patina_search_opts_init(&so);
        so.device = q->device;
        so.max_hits = q->max_hits;
        so.stats = q->stats;
        s = patina__index_search_many(ctx, ixs, nix, queries, nq, 0, q->radius, &so, NULL, per, counts);
    }
    for (i = 0; s == PATINA_OK && i < nq; i++) total += counts[i];
    if (s == PATINA_OK && !(all = malloc((total ? total : 1) * sizeof *all)))
        s = patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu hits", total);
    total = 0;
    for (i = 0; i < nq; i++) {
        if (s == PATINA_OK) {
            res->offsets[i] = total;
            if (counts[i]) memcpy(all + total, per[i], counts[i] * sizeof *all);
            total += counts[i];
        }
        free(per[i]);
    }
    if (s == PATINA_OK) {
        res->offsets[nq] = total;
        res->hits = all;
    }
    free(per);
    free(counts);
    return s;
}

/* Keys looked up in a newer state than the rows (another process removed a
 * record between the table's load and the lookup) are retried this often
 * with the table reloaded, so that every hit has its key. */
#define KEY_RETRIES 3

/* How many of the n keys are NULL. */
static size_t missing_keys(char *const *keys, size_t n)
{
    size_t i, m = 0;
    for (i = 0; keys && i < n; i++) m += keys[i] == NULL;
    return m;
}

/* ---------------------------------------------------- running the slices */

/* One slice's part of a call (run_slices). */
typedef struct slice_task {
    patina_status (*fn)(struct slice_task *k);
    patina_table_t *t;
    size_t slice;
    const void *arg; /* the call's, shared and read-only */
    void *out;       /* this slice's */
    patina_status s;
    double t0, t1;   /* its start and end (patina_now) */
    char msg[512];   /* its failure's message (messages are per thread) */
} slice_task_t;

static void slice_main(void *p, size_t i)
{
    slice_task_t *k = (slice_task_t *)p + i;
    k->t0 = patina_now();
    k->s = k->fn(k);
    if (k->s != PATINA_OK) snprintf(k->msg, sizeof k->msg, "%s", patina_last_error());
    k->t1 = patina_now();
}

/* Runs tasks[0 .. n) at once, 0 in the calling thread and the others on
 * the context's slice runners (patina__context_run_slices); the first
 * failure by slice is the call's. The times go to *fan (its merge and
 * total are the caller's). */
static patina_status run_slices(patina_table_t *t, slice_task_t *tasks, size_t n, patina_table_fanout_t *fan)
{
    const double t0 = patina_now();
    size_t i;
    patina__context_run_slices(t->ctx, n, slice_main, tasks);
    memset(fan, 0, sizeof *fan);
    fan->slices = n;
    fan->slice_min = HUGE_VAL;
    for (i = 0; i < n; i++) {
        const double own = tasks[i].t1 - tasks[i].t0, start = tasks[i].t0 - t0;
        if (own > fan->slice_max) fan->slice_max = own;
        if (own < fan->slice_min) fan->slice_min = own;
        if (start > fan->start_max) fan->start_max = start;
    }
    for (i = 0; i < n; i++)
        if (tasks[i].s != PATINA_OK) return patina__fail(tasks[i].s, "%s", tasks[i].msg);
    return PATINA_OK;
}

/* Keeps fan, the fan-out of a call that began at t0 and merged from tm
 * on, as the table's last (patina_table_fanout). */
static void note_fanout(patina_table_t *t, patina_table_fanout_t *fan, double t0, double tm)
{
    const double end = patina_now();
    fan->merge = end - tm;
    fan->total = end - t0;
    pthread_mutex_lock(&t->fan_mu);
    t->fan = *fan;
    pthread_mutex_unlock(&t->fan_mu);
}

patina_status patina_table_fanout(patina_table_t *t, patina_table_fanout_t *out)
{
    if (!t || !out) return patina__fail(PATINA_E_INVALID, "table: null argument");
    pthread_mutex_lock(&t->fan_mu);
    *out = t->fan;
    pthread_mutex_unlock(&t->fan_mu);
    return PATINA_OK;
}

/* Tasks of fn over every slice of t, each with the call's arg and its own
 * out (outs: ns items of size bytes); NULL when out of memory. */
static slice_task_t *slice_tasks(patina_table_t *t, patina_status (*fn)(slice_task_t *), const void *arg, void *outs,
                                 size_t size)
{
    slice_task_t *tasks = calloc(t->ns, sizeof *tasks);
    size_t k;
    for (k = 0; tasks && k < t->ns; k++) {
        tasks[k].fn = fn;
        tasks[k].t = t;
        tasks[k].slice = k;
        tasks[k].arg = arg;
        tasks[k].out = (uint8_t *)outs + k * size;
    }
    return tasks;
}

/* A search over several tables (patina_table_search_many), read locks held. */
typedef struct search_arg {
    patina_table_t *const *tables;
    size_t nt;
    const void *queries;
    size_t nq;
    const patina_table_query_t *q;
} search_arg_t;

typedef struct search_part {
    patina_table_results_t res;
    patina_search_stats_t stats;
} search_part_t;

/* Slice k of every table searched as one into p (its offsets, hits, rows):
 * the tables without a pivot table in one engine call (one scan with one
 * k-th distance per query: patina__index_search_many), each pivot table on
 * its own, the parts merged when there are several. */
static patina_status search_slice(const search_arg_t *a, size_t k, search_part_t *p)
{
    const size_t nq = a->nq, nt = a->nt;
    const patina_index_t **ixs = malloc(nt * sizeof *ixs);
    search_part_t *parts = calloc(nt + 1, sizeof *parts);
    patina_table_results_t *pr = calloc(nt + 1, sizeof *pr);
    patina_context_t *ctx = a->tables[0]->sl[k].ctx;
    size_t nix = 0, ixrows = 0, np = 0, i;
    patina_status s = PATINA_OK;
    if (!ixs || !parts || !pr) {
        s = patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu tables", nt);
        goto out;
    }
    p->res.nq = nq;
    for (i = 0; i < nt; i++) {
        const slice_t *sl = &a->tables[i]->sl[k];
        const size_t rows = slice_rows(sl);
        p->res.rows += rows;
        if (!sl->pidx && sl->idx && rows) {
            ixs[nix++] = sl->idx;
            ixrows += rows;
        }
    }
    /* part 0: the indexes; then each pivot table with rows */
    for (i = 0; s == PATINA_OK && i <= nt; i++) {
        const slice_t *sl = i ? &a->tables[i - 1]->sl[k] : NULL;
        patina_table_query_t q = *a->q;
        search_part_t *m = &parts[np];
        if (!nq || (i ? !sl->pidx || !slice_rows(sl) : !nix)) continue;
        q.stats = a->q->stats ? &m->stats : NULL;
        m->res.nq = nq;
        if (!(m->res.offsets = calloc(nq + 1, sizeof *m->res.offsets))) {
            s = patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu queries", nq);
            break;
        }
        np++;
        if (q.kind == PATINA_QUERY_KNN)
            s = i ? run_knn(ctx, sl->pidx, NULL, 0, a->queries, nq, &q, slice_rows(sl), &m->res)
                  : run_knn(ctx, NULL, ixs, nix, a->queries, nq, &q, ixrows, &m->res);
        else
            s = i ? run_range(ctx, sl->pidx, NULL, 0, a->queries, nq, &q, &m->res)
                  : run_range(ctx, NULL, ixs, nix, a->queries, nq, &q, &m->res);
    }
    for (i = 0; a->q->stats && i < np; i++) patina__search_stats_add(&p->stats, &parts[i].stats);
    if (s != PATINA_OK) goto out;
    if (np == 1) { /* one part: it is the answer */
        p->res.offsets = parts[0].res.offsets;
        p->res.hits = parts[0].res.hits;
        memset(&parts[0].res, 0, sizeof parts[0].res);
    } else if (np == 0) {
        if (!(p->res.offsets = calloc(nq + 1, sizeof *p->res.offsets)))
            s = patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu queries", nq);
    } else {
        patina_table_results_t merged;
        for (i = 0; i < np; i++) pr[i] = parts[i].res;
        if ((s = patina_table_results_merge(pr, np, a->q, &merged)) == PATINA_OK) {
            p->res.offsets = merged.offsets;
            p->res.hits = merged.hits;
        }
    }
out:
    for (i = 0; parts && i < np; i++) patina_table_results_release(&parts[i].res);
    free(parts);
    free(pr);
    free(ixs);
    return s;
}

static patina_status search_task(slice_task_t *k)
{
    return search_slice(k->arg, k->slice, k->out);
}

/* Every slice of the tables searched at once (the context's slices), the
 * answers merged into res (offsets, hits; rows summed). */
static patina_status search_slices(const search_arg_t *a, patina_table_results_t *res)
{
    patina_table_t *t = a->tables[0];
    const double t0 = patina_now();
    patina_table_fanout_t fan;
    double tm;
    search_part_t *parts = calloc(t->ns, sizeof *parts);
    patina_table_results_t *pr = calloc(t->ns, sizeof *pr), merged;
    slice_task_t *tasks = parts ? slice_tasks(t, search_task, a, parts, sizeof *parts) : NULL;
    patina_status s;
    size_t k;
    if (!parts || !pr || !tasks) {
        free(parts);
        free(pr);
        free(tasks);
        return patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu slices", t->ns);
    }
    s = run_slices(t, tasks, t->ns, &fan);
    tm = patina_now();
    for (k = 0; k < t->ns; k++) pr[k] = parts[k].res;
    if (s == PATINA_OK && (s = patina_table_results_merge(pr, t->ns, a->q, &merged)) == PATINA_OK) {
        res->offsets = merged.offsets;
        res->hits = merged.hits;
        res->rows = merged.rows;
        for (k = 0; k < a->nt; k++) note_fanout(a->tables[k], &fan, t0, tm);
    }
    for (k = 0; a->q->stats && k < t->ns; k++) patina__search_stats_add(a->q->stats, &parts[k].stats);
    for (k = 0; k < t->ns; k++) patina_table_results_release(&parts[k].res);
    free(tasks);
    free(pr);
    free(parts);
    return s;
}

/* The hits' keys into res->keys, each hit's from the table that holds it
 * (looked up table after table for the hits still without one: ids are
 * disjoint); gone[i] set for a table (open on a collection) when some hit
 * found no key at all. Read locks held. */
static patina_status search_keys(patina_table_t *const *tables, size_t nt, patina_table_results_t *res, uint8_t *gone)
{
    const size_t total = res->offsets[res->nq];
    uint64_t *ids = malloc((total ? total : 1) * sizeof *ids);
    size_t *at = malloc((total ? total : 1) * sizeof *at), i, j, n = total;
    char **found = malloc((total ? total : 1) * sizeof *found);
    patina_status s = PATINA_OK;
    res->keys = calloc(total ? total : 1, sizeof *res->keys);
    if (!ids || !at || !found || !res->keys) s = patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu keys", total);
    for (i = 0; s == PATINA_OK && i < nt && n; i++) {
        for (j = 0, n = 0; j < total; j++)
            if (!res->keys[j]) {
                at[n] = j;
                ids[n++] = res->hits[j].id;
            }
        if (n && (s = lookup_keys(tables[i], ids, n, found)) == PATINA_OK)
            for (j = 0; j < n; j++) res->keys[at[j]] = found[j];
    }
    if (s == PATINA_OK && missing_keys(res->keys, total))
        for (i = 0; i < nt; i++) gone[i] = tables[i]->c != NULL;
    free(ids);
    free(at);
    free(found);
    return s;
}

/* One attempt of patina_table_search_many with the rows as they are: every
 * table entered in address order, searched, its keys looked up, released
 * (res zeroed on entry; released by the caller on failure). */
static patina_status search_once(patina_table_t *const *tables, size_t nt, const void *queries, size_t nq,
                                 const patina_table_query_t *q, patina_table_results_t *res, uint8_t *gone)
{
    const search_arg_t a = {tables, nt, queries, nq, q};
    patina_table_t **order = lock_order(tables, nt);
    size_t i, entered = 0;
    patina_status s = PATINA_OK;
    if (q->stats) memset(q->stats, 0, sizeof *q->stats);
    res->nq = nq;
    if (!order) s = patina__fail(PATINA_E_NOMEM, "search: out of memory for %zu tables", nt);
    for (i = 0; s == PATINA_OK && i < nt; i++) /* address order: callers over overlapping sets cannot deadlock */
        if ((s = enter(order[i], NULL)) == PATINA_OK) entered++;
    for (i = 0; s == PATINA_OK && i < nt; i++) {
        const uint64_t v = atomic_load(&tables[i]->version);
        if (!i || v < res->version) res->version = v;
    }
    if (s == PATINA_OK && tables[0]->ns > 1) {
        s = search_slices(&a, res);
    } else if (s == PATINA_OK) {
        search_part_t p;
        memset(&p, 0, sizeof p);
        s = search_slice(&a, 0, &p);
        res->offsets = p.res.offsets;
        res->hits = p.res.hits;
        res->rows = p.res.rows;
        if (q->stats) *q->stats = p.stats;
    }
    if (s == PATINA_OK && q->keys) s = search_keys(tables, nt, res, gone);
    for (i = 0; i < entered; i++) pthread_rwlock_unlock(&order[i]->lock);
    free(order);
    return s;
}

/* The checks of a search over tables[0 .. nt). */
static patina_status check_search_set(patina_table_t *const *tables, size_t nt)
{
    size_t i, j;
    if (!tables || nt == 0) return patina__fail(PATINA_E_INVALID, "search: no table");
    for (i = 0; i < nt; i++) {
        if (!tables[i]) return patina__fail(PATINA_E_INVALID, "search: table %zu is NULL", i);
        if (strcmp(patina_table_spec(tables[i]), patina_table_spec(tables[0])))
            return patina__fail(PATINA_E_INVALID, "search: table %zu is '%s', table 0 '%s' (one spec per call)", i,
                                patina_table_spec(tables[i]), patina_table_spec(tables[0]));
        if (tables[i]->ctx != tables[0]->ctx || tables[i]->ns != tables[0]->ns)
            return patina__fail(PATINA_E_INVALID, "search: table %zu has another context than table 0", i);
        for (j = 0; j < i; j++)
            if (tables[j] == tables[i])
                return patina__fail(PATINA_E_INVALID, "search: table %zu is table %zu again", i, j);
    }
    return PATINA_OK;
}

patina_status patina_table_search_many(patina_table_t *const *tables, size_t nt, const void *queries, size_t nq,
                                       const patina_table_query_t *q, patina_table_results_t *res)
{
    patina_table_query_t def;
    patina_status s;
    uint8_t *gone;
    void *qcopy = NULL;
    size_t i;
    int attempt;
    if (!res) return patina__fail(PATINA_E_INVALID, "search: null results");
    memset(res, 0, sizeof *res);
    PATINA_TRY(check_search_set(tables, nt));
    if (nq && !queries) return patina__fail(PATINA_E_INVALID, "search: null queries");
    if (!q) {
        patina_table_query_init(&def);
        q = &def;
    }
    PATINA_TRY(check_query(tables[0], q));
    PATINA_TRY(patina__rows(&queries, nq, patina_extractor_bytes(tables[0]->ex),
                            PATINA_ROW_ALIGN(patina_elem_size(patina_extractor_elem(tables[0]->ex))), &qcopy, "search"));
    if (!(gone = calloc(nt, 1))) {
        free(qcopy);
        return patina__fail(PATINA_E_NOMEM, "search: out of memory");
    }
    for (attempt = 0;; attempt++) {
        int retry = 0;
        memset(gone, 0, nt);
        s = search_once(tables, nt, queries, nq, q, res, gone);
        if (s != PATINA_OK || attempt == KEY_RETRIES || !missing_keys(res->keys, res->offsets[nq])) break;
        /* a record went between the rows' state and the lookup: the collection moved; answer from its new state */
        for (i = 0; i < nt; i++)
            if (gone[i]) {
                atomic_store(&tables[i]->stale, 1);
                retry = 1;
            }
        if (!retry) break;
        patina_table_results_release(res);
    }
    free(gone);
    free(qcopy);
    if (s == PATINA_OK && res->keys && missing_keys(res->keys, res->offsets[nq])) {
        /* still moving (or a detached table without the key): the hits whose records are gone are left out */
        size_t j, at = 0;
        for (i = 0; i < nq; i++) {
            const size_t b = res->offsets[i], e = res->offsets[i + 1];
            res->offsets[i] = at;
            for (j = b; j < e; j++)
                if (res->keys[j]) {
                    res->hits[at] = res->hits[j];
                    res->keys[at++] = res->keys[j];
                }
        }
        res->offsets[nq] = at;
    }
    if (s != PATINA_OK) patina_table_results_release(res);
    return s;
}

patina_status patina_table_search(patina_table_t *t, const void *queries, size_t nq, const patina_table_query_t *q,
                                  patina_table_results_t *res)
{
    if (!res) return patina__fail(PATINA_E_INVALID, "search: null results");
    memset(res, 0, sizeof *res);
    if (!t || (nq && !queries)) return patina__fail(PATINA_E_INVALID, "search: null table or queries");
    return patina_table_search_many(&t, 1, queries, nq, q, res);
}

/* --------------------------------------------------------- identification */

static patina_status check_identify(const patina_table_t *t)
{
    if (!(t->caps & PATINA_CAP_IDENTIFY))
        return patina__fail(PATINA_E_INVALID, "identify: '%s' is not a local-feature table (index with -f rootsift)",
                            patina_extractor_spec(t->ex));
    return PATINA_OK;
}

size_t patina_table_query_bytes(patina_table_t *t)
{
    return t && t->shape ? patina_identify_query_bytes(t->shape) : 0;
}

patina_status patina_table_identify_extract(patina_table_t *t, patina_context_t *ctx, void *out,
                                            const patina_image_t *images, size_t nq, patina_status *st)
{
    if (!t) return patina__fail(PATINA_E_INVALID, "identify: null table");
    PATINA_TRY(check_identify(t));
    return patina_identify_extract(ctx ? ctx : t->ctx, t->shape, out, images, nq, st);
}

patina_status patina_table_identify_extract_half(patina_table_t *t, patina_context_t *ctx, void *out,
                                                 const patina_image_t *images, size_t nq, patina_status *st)
{
    if (!t) return patina__fail(PATINA_E_INVALID, "identify: null table");
    PATINA_TRY(check_identify(t));
    return patina_identify_extract_half(ctx ? ctx : t->ctx, t->shape, out, images, nq, st);
}

/* With the read lock: the reference sets or why there are none (every slice has one, or none has). */
static patina_status refs_ready(const patina_table_t *t)
{
    if (t->sl[0].rs) return PATINA_OK;
    return patina__fail(t->rs_status != PATINA_OK ? t->rs_status : PATINA_E_UNAVAILABLE, "%s",
                        t->rs_msg[0] ? t->rs_msg : "identify: no references loaded");
}

/* Slice k's matching of an identification over several tables: set
 * k * nt + i is table i's slice k (one call of idf_many_t). */
typedef struct identify_arg {
    idf_many_t *m;
    size_t nt;
} identify_arg_t;

static patina_status identify_task(slice_task_t *k)
{
    const identify_arg_t *a = k->arg;
    /* the slice's sets of every table on its device at once (one GPU pass) */
    return idf_many_match_sets(a->m, k->slice * a->nt, a->nt, k->t->sl[k->slice].ctx);
}

/* The checks of an identification over tables[0 .. nt). */
static patina_status check_identify_set(patina_table_t *const *tables, size_t nt)
{
    size_t i, j;
    if (!tables || nt == 0) return patina__fail(PATINA_E_INVALID, "identify: no table");
    for (i = 0; i < nt; i++) {
        if (!tables[i]) return patina__fail(PATINA_E_INVALID, "identify: table %zu is NULL", i);
        PATINA_TRY(check_identify(tables[i]));
        if (strcmp(patina_table_spec(tables[i]), patina_table_spec(tables[0])))
            return patina__fail(PATINA_E_INVALID, "identify: table %zu is '%s', table 0 '%s' (one spec per call)", i,
                                patina_table_spec(tables[i]), patina_table_spec(tables[0]));
        if (tables[i]->ctx != tables[0]->ctx || tables[i]->ns != tables[0]->ns)
            return patina__fail(PATINA_E_INVALID, "identify: table %zu has another context than table 0", i);
        for (j = 0; j < i; j++)
            if (tables[j] == tables[i])
                return patina__fail(PATINA_E_INVALID, "identify: table %zu is table %zu again", i, j);
    }
    return PATINA_OK;
}

/* One attempt of patina_table_identify_many: every table entered (read
 * lock, rows current), their sets matched -- slice by slice at once when
 * the context has several devices -- and verified once, the keys looked up
 * in the hit's own table; every lock released. *missing (nt): set for the
 * tables some of whose hits had no key any more. */
static patina_status identify_once(patina_table_t *const *tables, size_t nt, const void *queries, size_t nq,
                                   const patina_identify_opts_t *opts, size_t half_features,
                                   patina_identify_hit_t *hits, patina_identify_result_t *results, char **keys,
                                   uint8_t *missing)
{
    const size_t ns = tables[0]->ns, k = opts->k;
    const double t0 = patina_now();
    patina_table_t **order = lock_order(tables, nt);
    patina_refset_t **sets = malloc(ns * nt * sizeof *sets);
    uint32_t *hit_set = keys && nq ? malloc(nq * k * sizeof *hit_set) : NULL;
    uint64_t *ids = keys && nq ? malloc(nq * k * sizeof *ids) : NULL;
    size_t *at = keys && nq ? malloc(nq * k * sizeof *at) : NULL;
    char **found = keys && nq ? malloc(nq * k * sizeof *found) : NULL;
    idf_many_t *m = NULL;
    patina_table_fanout_t fan;
    size_t i, j, q, entered = 0;
    double tm = 0;
    patina_status s = PATINA_OK;
    memset(&fan, 0, sizeof fan);
    if (!order || !sets || (keys && nq && (!hit_set || !ids || !at || !found)))
        s = patina__fail(PATINA_E_NOMEM, "identify: out of memory for %zu tables", nt);
    for (i = 0; s == PATINA_OK && i < nt; i++) { /* in address order: callers over overlapping sets cannot deadlock */
        if ((s = enter(order[i], NULL)) == PATINA_OK) entered++;
    }
    for (i = 0; s == PATINA_OK && i < nt; i++) s = refs_ready(tables[i]);
    for (j = 0; s == PATINA_OK && j < ns; j++)
        for (i = 0; i < nt; i++) sets[j * nt + i] = tables[i]->sl[j].rs;
    if (s == PATINA_OK)
        s = half_features ? idf_many_begin_half(&m, sets, ns * nt, queries, nq, opts, half_features)
                          : idf_many_begin(&m, sets, ns * nt, queries, nq, opts);
    if (s == PATINA_OK && ns == 1) {
        s = idf_many_match_sets(m, 0, nt, tables[0]->sl[0].ctx); /* one context (check_identify_set): one pass */
    } else if (s == PATINA_OK) {
        identify_arg_t a = {m, nt};
        slice_task_t *tasks = slice_tasks(tables[0], identify_task, &a, &a, 0);
        if (!tasks) s = patina__fail(PATINA_E_NOMEM, "identify: out of memory for %zu slices", ns);
        else s = run_slices(tables[0], tasks, ns, &fan);
        free(tasks);
        tm = patina_now();
    }
    if (s == PATINA_OK) s = idf_many_finish(m, tables[0]->ctx, hits, results, hit_set);
    if (s == PATINA_OK && ns > 1)
        for (i = 0; i < nt; i++) note_fanout(tables[i], &fan, t0, tm);
    /* keys: each table's hits looked up in that table */
    for (i = 0; s == PATINA_OK && keys && i < nt; i++) {
        size_t n = 0;
        for (q = 0; q < nq; q++)
            for (j = 0; j < results[q].nhits; j++)
                if (hit_set[q * k + j] % nt == i) {
                    at[n] = q * k + j;
                    ids[n++] = hits[q * k + j].id;
                }
        if ((s = lookup_keys(tables[i], ids, n, found)) != PATINA_OK) break;
        for (j = 0; j < n; j++) {
            keys[at[j]] = found[j];
            if (!found[j]) missing[i] = 1;
        }
    }
    idf_many_free(m); /* the sets' locks, before the tables' */
    for (i = 0; i < entered; i++) pthread_rwlock_unlock(&order[i]->lock);
    free(order);
    free(sets);
    free(hit_set);
    free(ids);
    free(at);
    free(found);
    return s;
}

/* patina_table_identify_many; half_features > 0: the queries are pairs
 * (idf_many_begin_half's layout and rule). */
static patina_status identify_many(patina_table_t *const *tables, size_t nt, const void *queries, size_t nq,
                                   const patina_identify_opts_t *opts, size_t half_features,
                                   patina_identify_hit_t *hits, patina_identify_result_t *results, char **keys)
{
    patina_identify_opts_t def;
    patina_status s;
    size_t q, i, missing = 0;
    uint8_t *gone;
    int attempt;
    PATINA_TRY(check_identify_set(tables, nt));
    if (!opts) {
        patina_identify_opts_init(&def);
        opts = &def;
    }
    PATINA_TRY(patina__options_validate(PATINA_OPTIONS_IDENTIFY, opts));
    if (nq && (!queries || !hits || !results)) return patina__fail(PATINA_E_INVALID, "identify: null argument");
    if (nq && opts->k > SIZE_MAX / nq / sizeof *hits)
        return patina__fail(PATINA_E_LIMIT, "identify: k = %zu is too large for %zu queries", opts->k, nq);
    if (!(gone = calloc(nt, 1))) return patina__fail(PATINA_E_NOMEM, "identify: out of memory");
    for (attempt = 0;; attempt++) {
        if (keys)
            for (i = 0; i < nq * opts->k; i++) keys[i] = NULL;
        memset(gone, 0, nt);
        s = identify_once(tables, nt, queries, nq, opts, half_features, hits, results, keys, gone);
        for (q = 0, missing = 0; s == PATINA_OK && keys && q < nq; q++)
            missing += missing_keys(keys + q * opts->k, results[q].nhits);
        if (s == PATINA_OK && missing && attempt < KEY_RETRIES) {
            /* a reference went between a set's state and the lookup: answer from the new state */
            int retry = 0;
            for (i = 0; i < nt; i++)
                if (gone[i] && tables[i]->c) {
                    atomic_store(&tables[i]->stale, 1);
                    retry = 1;
                }
            if (retry) {
                for (i = 0; i < nq * opts->k; i++) free(keys[i]);
                continue;
            }
        }
        break;
    }
    free(gone);
    for (q = 0; s == PATINA_OK && missing && q < nq; q++) { /* still moving: gone references are left out */
        size_t j, at = 0;
        patina_identify_hit_t *h = hits + q * opts->k;
        char **kq = keys + q * opts->k;
        for (j = 0; j < results[q].nhits; j++)
            if (kq[j]) {
                h[at] = h[j];
                kq[at++] = kq[j];
            }
        for (j = at; j < results[q].nhits; j++) {
            memset(&h[j], 0, sizeof h[j]);
            kq[j] = NULL;
        }
        results[q].nhits = at;
    }
    if (s != PATINA_OK && keys)
        for (i = 0; i < nq * opts->k; i++) {
            free(keys[i]);
            keys[i] = NULL;
        }
    return s;
}

patina_status patina_table_identify_many(patina_table_t *const *tables, size_t nt, const void *queries, size_t nq,
                                         const patina_identify_opts_t *opts, patina_identify_hit_t *hits,
                                         patina_identify_result_t *results, char **keys)
{
    return identify_many(tables, nt, queries, nq, opts, 0, hits, results, keys);
}

patina_status patina_table_identify_half(patina_table_t *t, const void *queries, const void *half_queries,
                                         size_t nq, size_t half_features, double margin,
                                         const patina_identify_opts_t *opts, patina_identify_hit_t *hits,
                                         patina_identify_result_t *results, char **keys, unsigned char *taken_out)
{
    patina_identify_opts_t o, ho;
    patina_identify_hit_t *hh = NULL;
    patina_identify_result_t *hr = NULL;
    unsigned char *taken = NULL, *both = NULL;
    char **hk = NULL;
    patina_status s;
    size_t k, i;
    if (!t) return patina__fail(PATINA_E_INVALID, "identify: null table");
    if (nq && !half_queries) return patina__fail(PATINA_E_INVALID, "identify: null half-size queries");
    PATINA_TRY(idf_half_prepare(patina_table_spec(t), opts, half_features, margin, &o, &ho));
    PATINA_TRY(patina__options_validate(PATINA_OPTIONS_IDENTIFY, &o));
    if (nq == 0) return patina_table_identify(t, queries, nq, &o, hits, results, keys);
    if (!queries || !hits || !results) return patina__fail(PATINA_E_INVALID, "identify: null argument");
    k = o.k;
    if (nq > SIZE_MAX / 2 / k / sizeof *hh) return patina__fail(PATINA_E_LIMIT, "identify: %zu queries x k = %zu", nq, k);
    hh = calloc(2 * nq * k, sizeof *hh);
    hr = calloc(2 * nq, sizeof *hr);
    taken = calloc(nq, 1);
    hk = keys ? calloc(2 * nq * k, sizeof *hk) : NULL;
    if (!hh || !hr || !taken || (keys && !hk)) {
        s = patina__fail(PATINA_E_NOMEM, "identify: out of memory for %zu half-size queries", nq);
        goto out;
    }
    if (o.first_features > 0 && ho.first_features > 0) {
        /* one call: each query and its half-size query share the first pass (idf_many_begin_half) */
        if (!(both = idf_half_join(queries, half_queries, nq, patina_table_query_bytes(t)))) {
            s = patina__fail(PATINA_E_NOMEM, "identify: out of memory for %zu half-size queries", nq);
            goto out;
        }
        s = identify_many(&t, 1, both, 2 * nq, &o, ho.first_features, hh, hr, hk);
        if (s == PATINA_OK) {
            memcpy(hits, hh, nq * k * sizeof *hh);
            memcpy(results, hr, nq * sizeof *hr);
            for (i = 0; keys && i < nq * k; i++) {
                keys[i] = hk[i];
                hk[i] = NULL;
            }
        }
    } else {
        s = patina_table_identify(t, queries, nq, &o, hits, results, keys);
        if (s == PATINA_OK) s = patina_table_identify(t, half_queries, nq, &ho, hh + nq * k, hr + nq, hk ? hk + nq * k : NULL);
    }
    if (s == PATINA_OK) s = patina_identify_fuse_half(nq, k, margin, &o, hits, results, hh + nq * k, hr + nq, taken);
    if (s == PATINA_OK && taken_out) memcpy(taken_out, taken, nq);
    if (s == PATINA_OK) idf_keys_take(nq, k, taken, keys, hk ? hk + nq * k : NULL); /* the hits' keys follow them */
out:
    if (hk)
        for (i = 0; i < 2 * nq * k; i++) free(hk[i]);
    for (i = 0; s != PATINA_OK && keys && i < nq * k; i++) { /* nothing half given back */
        free(keys[i]);
        keys[i] = NULL;
    }
    free(hk);
    free(hh);
    free(hr);
    free(taken);
    free(both);
    return s;
}

patina_status patina_table_identify(patina_table_t *t, const void *queries, size_t nq,
                                    const patina_identify_opts_t *opts, patina_identify_hit_t *hits,
                                    patina_identify_result_t *results, char **keys)
{
    if (!t) return patina__fail(PATINA_E_INVALID, "identify: null table");
    return patina_table_identify_many(&t, 1, queries, nq, opts, hits, results, keys);
}

/* patina_table_warm of a searched table: one search (k = 1, device AUTO)
 * for one of its own rows builds what the first real search would -- each
 * slice's device copy, a pivot table's device side -- through the same
 * path, so nothing differs from a cold table but the time. Where AUTO
 * would not use a GPU (no usable GPU, a table under the GPU's minimum
 * rows) nothing is done. */
static patina_status warm_search(patina_table_t *t)
{
    patina_table_query_t q;
    patina_table_results_t res;
    patina_status s;
    void *row;
    int have = 0;
    size_t k;
    if (!t->ctx || !patina__context_gpu_usable(t->ctx)) return PATINA_OK;
    if (!(row = malloc(patina_extractor_bytes(t->ex))))
        return patina__fail(PATINA_E_NOMEM, "table %s: out of memory warming", patina_extractor_spec(t->ex));
    s = enter(t, NULL);
    if (s != PATINA_OK) {
        free(row);
        return s;
    }
    for (k = 0; k < t->ns && !have; k++) have = patina__index_live_row(t->sl[k].idx, row);
    pthread_rwlock_unlock(&t->lock);
    if (!have) {
        free(row);
        return PATINA_OK; /* an empty table: nothing to copy */
    }
    patina_table_query_init(&q);
    q.k = 1;
    memset(&res, 0, sizeof res);
    s = patina_table_search(t, row, 1, &q, &res);
    patina_table_results_release(&res);
    free(row);
    if (s != PATINA_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", patina_last_error());
        s = patina__fail(s, "table %s: warming: %s", patina_extractor_spec(t->ex), why);
    }
    return s;
}

patina_status patina_table_warm(patina_table_t *t)
{
    patina_identify_opts_t o;
    patina_status s = PATINA_OK;
    size_t k;
    if (!t) return patina__fail(PATINA_E_INVALID, "table: null table");
    if (!(t->caps & PATINA_CAP_IDENTIFY)) return (t->caps & PATINA_CAP_SEARCH) ? warm_search(t) : PATINA_OK;
    PATINA_TRY(enter(t, NULL));
    patina_identify_opts_init(&o);
    for (k = 0; k < t->ns && s == PATINA_OK; k++)
        if (t->sl[k].rs && (s = patina__refset_gpu_warm(t->sl[k].ctx, t->sl[k].rs, &o)) != PATINA_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", patina_last_error());
            s = patina__fail(s, "table %s: warming slice %zu: %s", patina_extractor_spec(t->ex), k, why);
        }
    pthread_rwlock_unlock(&t->lock);
    return s;
}

patina_status patina_table_identify_pairs(patina_table_t *t, const void *query, uint64_t id,
                                          const patina_identify_opts_t *opts, float *pairs, size_t cap, size_t *n)
{
    patina_status s;
    if (!t) return patina__fail(PATINA_E_INVALID, "identify: null table");
    PATINA_TRY(check_identify(t));
    PATINA_TRY(enter(t, NULL));
    s = refs_ready(t);
    if (s == PATINA_OK) s = patina_identify_pairs(slice_of(t, id)->rs, query, id, opts, pairs, cap, n);
    pthread_rwlock_unlock(&t->lock);
    return s;
}

/* ------------------------------------------------------------------ writes */

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (patina_table_t *const *)a, y = (uintptr_t) * (patina_table_t *const *)b;
    return x < y ? -1 : x > y;
}

/* The tables sorted by address (the order their locks are taken in, so two
 * writers over overlapping sets cannot deadlock); NULL when out of memory. */
static patina_table_t **lock_order(patina_table_t *const *tables, size_t nt)
{
    patina_table_t **o = malloc(nt * sizeof *o);
    if (!o) return NULL;
    memcpy(o, tables, nt * sizeof *o);
    qsort(o, nt, sizeof *o, cmp_ptr);
    return o;
}

static patina_status check_write_set(patina_table_t *const *tables, size_t nt, const char *what)
{
    size_t i, j;
    if (!tables || !nt) return patina__fail(PATINA_E_INVALID, "%s: no table", what);
    for (i = 0; i < nt; i++) {
        if (!tables[i]) return patina__fail(PATINA_E_INVALID, "%s: table %zu is NULL", what, i);
        if (!tables[i]->c)
            return patina__fail(PATINA_E_INVALID, "%s: '%s' is detached (feed it with patina_table_apply)", what,
                                patina_table_spec(tables[i]));
        if (tables[i]->c != tables[0]->c)
            return patina__fail(PATINA_E_INVALID, "%s: the tables are open on different collection handles", what);
        for (j = 0; j < i; j++)
            if (tables[j] == tables[i] || !strcmp(patina_table_spec(tables[j]), patina_table_spec(tables[i])))
                return patina__fail(PATINA_E_INVALID, "%s: table '%s' is given twice", what, patina_table_spec(tables[i]));
    }
    return PATINA_OK;
}

/* Whether t's rows follow a commit that moved the version from v0 to v1
 * (write lock held): only when they reflected v0 and the commit was the
 * only one in between; otherwise the next call reloads. */
static int follows(patina_table_t *t, uint64_t v0, uint64_t v1)
{
    return t->loaded && !atomic_load(&t->stale) && atomic_load(&t->version) == v0 && v1 == v0 + 1;
}

/* Puts rows into slice sl's structures (write lock held). */
static patina_status slice_put(patina_table_t *t, slice_t *sl, const uint64_t *ids, const void *descs, size_t n)
{
    size_t bytes = patina_extractor_bytes(t->ex), i;
    patina_status s = PATINA_OK;
    if (!n) return PATINA_OK;
    if (sl->idx) s = patina_index_put(sl->idx, ids, descs, n);
    if (s == PATINA_OK && sl->pidx) {
        s = patina_pivot_index_put(sl->pidx, sl->ctx, ids, descs, n);
        t->pivots_dirty += n;
    }
    for (i = 0; s == PATINA_OK && sl->rs && i < n; i++)
        s = patina_refset_put(sl->rs, ids[i], (const uint8_t *)descs + i * bytes, bytes);
    return s;
}

static patina_status slice_remove(patina_table_t *t, slice_t *sl, const uint64_t *ids, size_t n)
{
    size_t i;
    patina_status s = PATINA_OK;
    if (!n) return PATINA_OK;
    if (sl->idx) s = patina_index_remove(sl->idx, ids, n, NULL);
    if (s == PATINA_OK && sl->pidx) {
        size_t dropped = 0;
        s = patina_pivot_index_remove(sl->pidx, ids, n, &dropped);
        t->pivots_dirty += dropped;
    }
    for (i = 0; s == PATINA_OK && sl->rs && i < n; i++)
        if (patina_refset_remove(sl->rs, ids[i]) == PATINA_E_NOTFOUND) patina_clear_error();
    return s;
}

/* Puts rows into t's structures, each into its slice (write lock held); a
 * failure leaves the table to be reloaded. descs NULL: removes them. */
static void apply_rows(patina_table_t *t, const uint64_t *ids, const void *descs, size_t n)
{
    size_t bytes = patina_extractor_bytes(t->ex), i, k, m;
    uint64_t *sid = NULL;
    uint8_t *sdesc = NULL;
    patina_status s = PATINA_OK;
    if (!n) return;
    if (t->ns == 1) {
        s = descs ? slice_put(t, &t->sl[0], ids, descs, n) : slice_remove(t, &t->sl[0], ids, n);
    } else if (!(sid = malloc(n * sizeof *sid)) || (descs && !(sdesc = malloc(n * bytes)))) {
        s = PATINA_E_NOMEM;
    } else {
        for (k = 0; s == PATINA_OK && k < t->ns; k++) {
            for (i = 0, m = 0; i < n; i++)
                if (ids[i] % t->ns == k) {
                    if (descs) memcpy(sdesc + m * bytes, (const uint8_t *)descs + i * bytes, bytes);
                    sid[m++] = ids[i];
                }
            s = descs ? slice_put(t, &t->sl[k], sid, sdesc, m) : slice_remove(t, &t->sl[k], sid, m);
        }
    }
    free(sid);
    free(sdesc);
    if (s != PATINA_OK) {
        patina_clear_error();
        atomic_store(&t->stale, 1);
    }
}

static void apply_put(patina_table_t *t, const uint64_t *ids, const void *descs, size_t n)
{
    apply_rows(t, ids, descs, n);
}

static void apply_remove(patina_table_t *t, const uint64_t *ids, size_t n) { apply_rows(t, ids, NULL, n); }

patina_status patina_tables_put(patina_table_t *const *tables, size_t nt, const patina_insert_t *items, size_t n,
                                const void *const *descs, uint64_t *ids)
{
    patina_table_t **order = NULL;
    patina_table_descs_t *td = NULL;
    uint64_t *got = NULL, *sel_ids = NULL, v0 = 0, v1 = 0;
    uint8_t *changed = NULL, *sel = NULL;
    size_t ntd = 0, i, j, without = 0, maxbytes = 0;
    patina_status s;
    patina_collection_t *c;
    PATINA_TRY(check_write_set(tables, nt, "put"));
    if (!descs) return patina__fail(PATINA_E_INVALID, "put: null descriptors");
    if (n && !items) return patina__fail(PATINA_E_INVALID, "put: null items");
    for (i = 0; i < nt; i++) {
        size_t b = patina_extractor_bytes(tables[i]->ex);
        if (descs[i]) ntd++;
        else without++;
        if (descs[i] && b > maxbytes) maxbytes = b;
    }
    if (!ntd) return patina__fail(PATINA_E_INVALID, "put: no table gets descriptors");
    if (!n) return PATINA_OK;
    c = tables[0]->c;
    td = calloc(ntd, sizeof *td);
    got = malloc(n * sizeof *got);
    changed = calloc(n, 1);
    sel = n <= SIZE_MAX / maxbytes ? malloc(n * maxbytes) : NULL;
    sel_ids = malloc(n * sizeof *sel_ids);
    order = lock_order(tables, nt);
    if (!td || !got || !changed || !sel || !sel_ids || !order) {
        s = patina__fail(PATINA_E_NOMEM, "put: out of memory");
        goto out;
    }
    for (i = 0, j = 0; i < nt; i++)
        if (descs[i]) {
            td[j].spec = patina_table_spec(tables[i]);
            td[j].desc_bytes = patina_extractor_bytes(tables[i]->ex);
            td[j].descs = descs[i];
            j++;
        }
    for (i = 0; i < nt; i++) pthread_rwlock_wrlock(&order[i]->lock);
    /* tables without descriptors lose the rows whose content changed (the store drops them) */
    for (i = 0; without && i < n; i++) {
        patina_record_t old;
        memset(&old, 0, sizeof old);
        s = patina_collection_get_by_key(c, items[i].key, &old);
        if (s == PATINA_OK) changed[i] = memcmp(old.sha256, items[i].sha256, 32) != 0;
        else if (s == PATINA_E_NOTFOUND) patina_clear_error();
        else goto unlock;
        patina_record_release(&old);
    }
    s = patina_collection_version(c, &v0);
    if (s == PATINA_OK) s = patina_collection_put_tables(c, td, ntd, items, n, got);
    if (s != PATINA_OK) goto unlock;
    if (patina_collection_version(c, &v1) != PATINA_OK) {
        patina_clear_error();
        v1 = v0; /* unknown: every table reloads */
    }
    for (i = 0; i < nt; i++) {
        patina_table_t *t = tables[i];
        size_t bytes = patina_extractor_bytes(t->ex), m = 0, r;
        if (!follows(t, v0, v1)) {
            atomic_store(&t->stale, 1);
            continue;
        }
        for (r = 0; r < n; r++) {
            if (!in_partition(t, items[r].key)) continue;
            if (descs[i]) {
                memcpy(sel + m * bytes, (const uint8_t *)descs[i] + r * bytes, bytes);
                sel_ids[m++] = got[r];
            } else if (changed[r]) {
                sel_ids[m++] = got[r];
            }
        }
        if (descs[i]) apply_put(t, sel_ids, sel, m);
        else apply_remove(t, sel_ids, m);
        atomic_store(&t->version, v1);
    }
    if (ids) memcpy(ids, got, n * sizeof *ids);
unlock:
    for (i = nt; i-- > 0;) pthread_rwlock_unlock(&order[i]->lock);
out:
    free(order);
    free(td);
    free(got);
    free(changed);
    free(sel);
    free(sel_ids);
    return s;
}

patina_status patina_tables_remove(patina_table_t *const *tables, size_t nt, const uint64_t *ids, size_t n,
                                   size_t *removed)
{
    patina_table_t **order;
    patina_status s = PATINA_OK, first_missing = PATINA_OK;
    char missing[256] = "";
    size_t i, j, done = 0;
    if (removed) *removed = 0;
    PATINA_TRY(check_write_set(tables, nt, "remove"));
    if (n && !ids) return patina__fail(PATINA_E_INVALID, "remove: null ids");
    if (!(order = lock_order(tables, nt))) return patina__fail(PATINA_E_NOMEM, "remove: out of memory");
    for (i = 0; i < nt; i++) pthread_rwlock_wrlock(&order[i]->lock);
    for (j = 0; j < n; j++) {
        uint64_t v0 = 0, v1 = 0;
        s = patina_collection_version(tables[0]->c, &v0);
        if (s == PATINA_OK) s = patina_collection_remove(tables[0]->c, ids[j]);
        if (s == PATINA_E_NOTFOUND) {
            if (first_missing == PATINA_OK) snprintf(missing, sizeof missing, "%s", patina_last_error());
            first_missing = s;
            s = PATINA_OK;
            continue;
        }
        if (s != PATINA_OK) break;
        done++;
        if (patina_collection_version(tables[0]->c, &v1) != PATINA_OK) {
            patina_clear_error();
            v1 = v0;
        }
        for (i = 0; i < nt; i++) {
            if (!follows(tables[i], v0, v1)) {
                atomic_store(&tables[i]->stale, 1);
                continue;
            }
            apply_remove(tables[i], &ids[j], 1);
            atomic_store(&tables[i]->version, v1);
        }
    }
    for (i = nt; i-- > 0;) pthread_rwlock_unlock(&order[i]->lock);
    free(order);
    if (removed) *removed = done;
    if (s == PATINA_OK && first_missing != PATINA_OK) return patina__fail(first_missing, "%s", missing);
    return s;
}

patina_status patina_table_save(patina_table_t *t, size_t *changed)
{
    patina_status s = PATINA_OK;
    if (changed) *changed = 0;
    if (!t) return patina__fail(PATINA_E_INVALID, "table: null table");
    if (!t->c || !(t->caps & PATINA_CAP_PIVOTS) || !t->opts.pivots) return PATINA_OK;
    if (t->opts.partitions > 1) return PATINA_OK; /* the stored table covers every partition: not ours to write */
    PATINA_TRY(enter(t, NULL));
    pthread_rwlock_unlock(&t->lock);
    pthread_rwlock_wrlock(&t->lock);
    if (t->ns > 1 && t->sl[0].pidx && t->pivots_dirty) {
        /* the slices hold parts of the table: the whole one is the stored table brought up to date (the
         * rows of images written since computed, those of removed ones dropped), as a load makes it */
        patina_pivot_index_t *whole = NULL;
        size_t refreshed = 0;
        s = patina_pivot_index_load(&whole, t->ctx, t->ex, t->c, &refreshed);
        if (s == PATINA_OK && refreshed) s = patina_pivot_index_save(whole, t->c);
        if (s == PATINA_OK) {
            if (changed) *changed = refreshed;
            t->pivots_dirty = 0;
        }
        patina_pivot_index_free(whole);
    } else if (t->sl[0].pidx && t->pivots_dirty && (s = patina_pivot_index_save(t->sl[0].pidx, t->c)) == PATINA_OK) {
        if (changed) *changed = t->pivots_dirty;
        t->pivots_dirty = 0;
    }
    pthread_rwlock_unlock(&t->lock);
    return s;
}

patina_status patina_table_build_pivots(patina_table_t *t, const patina_pivot_opts_t *opts)
{
    patina_pivot_index_t *pi = NULL;
    patina_status s;
    if (!t) return patina__fail(PATINA_E_INVALID, "table: null table");
    if (!(t->caps & PATINA_CAP_PIVOTS))
        return patina__fail(PATINA_E_INVALID, "pivots: pivot tables are for signature (SQFD) tables, not '%s'",
                            patina_extractor_spec(t->ex));
    if (!t->c || t->opts.partitions > 1)
        return patina__fail(PATINA_E_INVALID, "pivots: a pivot table is built over a whole collection's table");
    pthread_rwlock_wrlock(&t->lock);
    if (opts && opts->pivots == 0) {
        s = patina_pivot_index_drop(t->c, t->ex);
    } else {
        s = patina_pivot_index_build(&pi, t->ctx, t->ex, t->c, opts);
        if (s == PATINA_OK) s = patina_pivot_index_save(pi, t->c);
        patina_pivot_index_free(pi);
    }
    atomic_store(&t->stale, 1); /* the next call loads the rows with the new pivot table */
    pthread_rwlock_unlock(&t->lock);
    return s;
}

/* ----------------------------------------------------- change streams */

patina_status patina_table_apply(patina_table_t *t, const patina_change_t *changes, size_t n, uint64_t seq,
                                 size_t *applied)
{
    size_t bytes, i, done = 0;
    patina_status s = PATINA_OK;
    if (applied) *applied = 0;
    if (!t) return patina__fail(PATINA_E_INVALID, "apply: null table");
    if (t->c)
        return patina__fail(PATINA_E_INVALID, "apply: '%s' is open on a collection (write with patina_tables_put)",
                            patina_table_spec(t));
    if (n && !changes) return patina__fail(PATINA_E_INVALID, "apply: null changes");
    bytes = patina_extractor_bytes(t->ex);
    for (i = 0; i < n; i++) {
        const patina_change_t *ch = &changes[i];
        if (ch->id == 0) return patina__fail(PATINA_E_INVALID, "apply: change %zu has id 0", i);
        if (ch->op == PATINA_CHANGE_PUT) {
            if (!ch->key || !*ch->key) return patina__fail(PATINA_E_INVALID, "apply: change %zu (put) has no key", i);
            if (!ch->desc) return patina__fail(PATINA_E_INVALID, "apply: change %zu (put) has no descriptor", i);
        } else if (ch->op != PATINA_CHANGE_REMOVE) {
            return patina__fail(PATINA_E_INVALID, "apply: change %zu has unknown op %d", i, (int)ch->op);
        }
    }
    pthread_rwlock_wrlock(&t->lock);
    for (i = 0; s == PATINA_OK && i < n; i++) {
        const patina_change_t *ch = &changes[i];
        slice_t *sl = slice_of(t, ch->id);
        if (ch->op == PATINA_CHANGE_PUT) {
            if (!in_partition(t, ch->key)) continue;
            if (sl->idx) s = patina_index_put(sl->idx, &ch->id, ch->desc, 1);
            if (s == PATINA_OK && sl->rs) s = patina_refset_put(sl->rs, ch->id, ch->desc, bytes);
            if (s == PATINA_OK) s = km_put(&t->keys, ch->id, ch->key);
        } else {
            if (ch->key && !in_partition(t, ch->key)) continue;
            if (sl->idx) s = patina_index_remove(sl->idx, &ch->id, 1, NULL);
            if (s == PATINA_OK && sl->rs && patina_refset_remove(sl->rs, ch->id) == PATINA_E_NOTFOUND)
                patina_clear_error();
            km_del(&t->keys, ch->id);
        }
        if (s == PATINA_OK) done++;
        else patina__prefix_error("apply: change %zu (id %llu)", i, (unsigned long long)ch->id);
    }
    if (s == PATINA_OK) atomic_store(&t->version, seq);
    pthread_rwlock_unlock(&t->lock);
    if (applied) *applied = done;
    return s;
}
