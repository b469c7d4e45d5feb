/* Identification's library API (include/patina/identify.h): reference sets
 * loaded from a collection and kept up to date (put/remove), query
 * extraction at the query budget, and patina_identify: matching -- on the
 * GPU (src/gpu/identify.cu: the fused kernel over the set's GPU mirror) or
 * on the context's workers (tasks = query x block of references) --
 * candidate selection, RANSAC verification of the best candidates (tasks =
 * query x candidate), re-ranking and the open-set decision. The matchers,
 * scoring and RANSAC are in match.c and ransac.c.
 *
 * A reference set is an array of slots in increasing id order: records of
 * one fixed size, their ids, per slot the feature count and the set's clock
 * when it last changed (the GPU mirror re-uploads what changed since it
 * last looked). A removal marks its slot (count 0, skipped by both
 * matchers); the set compacts itself when a quarter of its slots are
 * removed, and an id inserted below the largest one moves slots: both bump
 * the epoch (the GPU mirror is rebuilt). A read-write lock lets identify
 * calls share the set while put/remove wait for them.
 *
 * Reference views (the spec's `views`, src/features/rootsift.h): an item's
 * record is 1 + views records laid end to end; the set holds each as one
 * slot (a row), so an item is `per` consecutive slots with the same id,
 * always put, removed and compacted together: item j of the slots is
 * slots [j per, (j + 1) per). Matching scores rows; an item's score is its
 * best row's (the most matches, ties: the lower slot), folded before the
 * candidates are cut, so an item is one candidate and takes one of the
 * verify_top slots; RANSAC verifies that best row. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/context.h"
#include "gpu/gpu.h"
#include "features/family.h"
#include "features/rootsift.h"
#include "identify/identify.h"

#define REF_BLOCK 32 /* references per matching task, at least */

struct patina_refset {
    size_t n;               /* slots */
    size_t cap;             /* slots allocated */
    size_t alive;           /* slots holding a reference (not removed) */
    size_t stride;          /* bytes per row (one record of m rows) */
    size_t per;             /* rows per item: 1 + the spec's views */
    size_t item_bytes;      /* bytes of an item's record: per x stride */
    uint64_t *ids;          /* (n) the rows' item ids, non-decreasing; an item's per rows share one */
    unsigned char *recs;    /* (n, stride): the rows; an item's record is its per rows as stored */
    uint16_t *count;        /* (n) features of the slot's record; 0 when removed */
    unsigned char *dead;    /* (n) 1: removed */
    uint64_t *stamp;        /* (n) the clock when the slot last changed */
    uint64_t serial;        /* this set, never reused in the process */
    uint64_t epoch;         /* bumped when slots move (compaction, an insertion) */
    uint64_t clock;         /* bumped at every change */
    pthread_rwlock_t lock;
    patina_extractor_t *ex; /* the table's spec */
    _Atomic(void *) gpu_ctx; /* the context whose GPU last mirrored the set (compared, never followed) */
};

static uint64_t next_serial(void)
{
    static uint64_t serial;
    return __atomic_add_fetch(&serial, 1, __ATOMIC_RELAXED);
}

/* ----------------------------------------------------------- reference sets */

/* Row and item sizes of rs from its spec. */
static void set_layout(patina_refset_t *rs)
{
    const rootsift_params_t *p = (const rootsift_params_t *)(const void *)rs->ex->params;
    rs->stride = rs_record_bytes((size_t)p->m, (uint32_t)p->quant);
    rs->per = (size_t)(1 + p->views);
    rs->item_bytes = rs->per * rs->stride;
}

/* Checks the per rows of an item's record (rs's spec); what names it. */
static patina_status check_item(const patina_refset_t *rs, const unsigned char *rec, const char *what,
                                patina_status wrong)
{
    const rootsift_params_t *p = (const rootsift_params_t *)(const void *)rs->ex->params;
    for (size_t v = 0; v < rs->per; v++) {
        const unsigned char *row = rec + v * rs->stride;
        char w[96];
        if (rs->per > 1) snprintf(w, sizeof w, "%s (view %zu)", what, v);
        else snprintf(w, sizeof w, "%s", what);
        PATINA_TRY(rs_record_check(row, rs->stride, w));
        if (rs_quant(row) != (uint32_t)p->quant || rs_m(row) != (uint32_t)p->m)
            return patina__fail(wrong, "%s: a record of m = %u, quant %u does not belong in table '%s'", w,
                                (unsigned)rs_m(row), (unsigned)rs_quant(row), patina_extractor_spec(rs->ex));
    }
    return PATINA_OK;
}

void patina_refset_spec_init(patina_refset_spec_t *spec)
{
    if (!spec) return;
    memset(spec, 0, sizeof *spec);
    spec->shards = 1;
}

/* Whether spec names a family of keypoint records (the capability the
 * matcher reads: PATINA_CAP_KEYPOINTS), without a message when it does not. */
static int is_rootsift(const char *spec)
{
    patina_extractor_t *ex = NULL;
    int yes;
    if (patina_extractor_new(&ex, spec) != PATINA_OK) {
        patina_clear_error();
        return 0;
    }
    yes = (patina_extractor_caps(ex) & PATINA_CAP_KEYPOINTS) != 0;
    patina_extractor_free(ex);
    return yes;
}

/* The collection's only rootsift table into *out (malloc'd). */
static patina_status find_table(patina_collection_t *c, char **out)
{
    char **specs = NULL, list[1024];
    size_t n = 0, k, found = 0, len = 0;
    patina_status s = patina_collection_tables(c, &specs, &n);
    *out = NULL;
    if (s != PATINA_OK) return s;
    list[0] = '\0';
    for (k = 0; k < n; k++) {
        if (is_rootsift(specs[k])) {
            if (len < sizeof list)
                len += (size_t)snprintf(list + len, sizeof list - len, "%s'%s'", found ? ", " : "", specs[k]);
            if (!found++) *out = specs[k];
            else free(specs[k]);
        } else {
            free(specs[k]);
        }
    }
    free(specs);
    if (found == 1) return PATINA_OK;
    if (found == 0)
        return patina__fail(PATINA_E_NOTFOUND, "identify: the collection has no rootsift table "
                                               "(index the references with -f rootsift)");
    free(*out);
    *out = NULL;
    return patina__fail(PATINA_E_INVALID, "identify: the collection has %zu rootsift tables (%s); name one",
                        found, list);
}

patina_status patina_refset_load(patina_refset_t **out, patina_collection_t *c, const patina_refset_spec_t *spec)
{
    patina_refset_spec_t def;
    patina_refset_t *rs = NULL;
    patina_snapshot_t *snap = NULL;
    char *table = NULL;
    uint8_t *descs = NULL;
    uint64_t *ids = NULL;
    size_t n = 0, bytes = 0, i, kept = 0;
    patina_status s;

    if (!out) return patina__fail(PATINA_E_INVALID, "identify: null reference set pointer");
    *out = NULL;
    if (!c) return patina__fail(PATINA_E_INVALID, "identify: null collection");
    if (!spec) {
        patina_refset_spec_init(&def);
        spec = &def;
    }
    if (spec->shards == 0 || spec->shard >= spec->shards)
        return patina__fail(PATINA_E_INVALID, "identify: shard %u of %u does not exist", (unsigned)spec->shard,
                            (unsigned)spec->shards);
    if (spec->table) {
        if (!is_rootsift(spec->table))
            return patina__fail(PATINA_E_INVALID, "identify: table '%s' is not a rootsift table", spec->table);
        if (!(table = strdup(spec->table))) return patina__fail(PATINA_E_NOMEM, "identify: out of memory");
    } else if ((s = find_table(c, &table)) != PATINA_OK) {
        return s;
    }
    if (!(rs = calloc(1, sizeof *rs))) {
        s = patina__fail(PATINA_E_NOMEM, "identify: out of memory");
        goto fail;
    }
    if ((s = patina_extractor_new(&rs->ex, table)) != PATINA_OK) goto fail;
    set_layout(rs);
    if (spec->snapshot) {
        s = patina_snapshot_load(spec->snapshot, table, &ids, &descs, &n, &bytes);
    } else {
        s = patina_snapshot_new(&snap, c);
        if (s == PATINA_OK) s = patina_snapshot_load(snap, table, &ids, &descs, &n, &bytes);
        patina_snapshot_free(snap);
    }
    if (s == PATINA_E_NOTFOUND) {
        s = patina__fail(PATINA_E_NOTFOUND, "identify: the collection has no table '%s'", table);
        goto fail;
    }
    if (s != PATINA_OK) goto fail;
    if (n && bytes != rs->item_bytes) {
        s = patina__fail(PATINA_E_CORRUPT, "identify: table '%s' holds %zu-byte records; its spec gives %zu",
                         table, bytes, rs->item_bytes);
        goto fail;
    }
    /* Check every record, keep the shard's, compacting in place. */
    for (i = 0; i < n; i++) {
        char what[64];
        const unsigned char *rec = descs + i * rs->item_bytes;
        if (ids[i] % spec->shards != spec->shard) continue;
        snprintf(what, sizeof what, "identify: reference id %llu", (unsigned long long)ids[i]);
        if ((s = check_item(rs, rec, what, PATINA_E_CORRUPT)) != PATINA_OK) goto fail;
        if (kept != i) {
            memmove(descs + kept * rs->item_bytes, rec, rs->item_bytes);
            ids[kept] = ids[i];
        }
        kept++;
    }
    /* An item's record is its per rows, in place; its id repeated per row. */
    if (rs->per > 1 && kept) {
        uint64_t *rids = malloc(kept * rs->per * sizeof *rids);
        if (!rids) {
            s = patina__fail(PATINA_E_NOMEM, "identify: out of memory");
            goto fail;
        }
        for (i = 0; i < kept * rs->per; i++) rids[i] = ids[i / rs->per];
        free(ids);
        ids = rids;
    }
    kept *= rs->per;
    rs->n = rs->cap = rs->alive = kept;
    rs->ids = ids;
    rs->recs = descs;
    rs->count = malloc((kept ? kept : 1) * sizeof *rs->count);
    rs->dead = calloc(kept ? kept : 1, 1);
    rs->stamp = calloc(kept ? kept : 1, sizeof *rs->stamp);
    if (!rs->count || !rs->dead || !rs->stamp) {
        rs->ids = NULL;
        rs->recs = NULL;
        s = patina__fail(PATINA_E_NOMEM, "identify: out of memory");
        goto fail;
    }
    for (i = 0; i < kept; i++) rs->count[i] = (uint16_t)rs_count(descs + i * rs->stride);
    rs->serial = next_serial();
    if (pthread_rwlock_init(&rs->lock, NULL) != 0) {
        s = patina__fail(PATINA_E_NOMEM, "identify: cannot create the reference set's lock");
        goto fail;
    }
    free(table);
    *out = rs;
    return PATINA_OK;
fail:
    free(ids);
    free(descs);
    free(table);
    if (rs) {
        free(rs->count);
        free(rs->dead);
        free(rs->stamp);
        patina_extractor_free(rs->ex);
    }
    free(rs);
    return s;
}

patina_status patina_refset_new(patina_refset_t **out, const char *table)
{
    patina_refset_t *rs;
    patina_status s;
    if (!out) return patina__fail(PATINA_E_INVALID, "identify: null reference set pointer");
    *out = NULL;
    if (!table || !is_rootsift(table))
        return patina__fail(PATINA_E_INVALID, "identify: '%s' is not a rootsift spec", table ? table : "(null)");
    if (!(rs = calloc(1, sizeof *rs))) return patina__fail(PATINA_E_NOMEM, "identify: out of memory");
    if ((s = patina_extractor_new(&rs->ex, table)) != PATINA_OK) {
        free(rs);
        return s;
    }
    set_layout(rs);
    rs->serial = next_serial();
    if (pthread_rwlock_init(&rs->lock, NULL) != 0) {
        patina_extractor_free(rs->ex);
        free(rs);
        return patina__fail(PATINA_E_NOMEM, "identify: cannot create the reference set's lock");
    }
    *out = rs;
    return PATINA_OK;
}

void patina_refset_free(patina_refset_t *rs)
{
    if (!rs) return;
    pthread_rwlock_destroy(&rs->lock);
    free(rs->ids);
    free(rs->recs);
    free(rs->count);
    free(rs->dead);
    free(rs->stamp);
    patina_extractor_free(rs->ex);
    free(rs);
}

/* Drops the removed slots (moving the others down, order kept); the
 * caller holds the write lock. */
static void compact(patina_refset_t *rs)
{
    size_t i, k = 0;
    if (rs->alive == rs->n) return;
    for (i = 0; i < rs->n; i++) {
        if (rs->dead[i]) continue;
        if (k != i) {
            memmove(rs->recs + k * rs->stride, rs->recs + i * rs->stride, rs->stride);
            rs->ids[k] = rs->ids[i];
            rs->count[k] = rs->count[i];
            rs->stamp[k] = rs->stamp[i];
        }
        rs->dead[k] = 0;
        k++;
    }
    rs->n = k;
    rs->epoch++;
    rs->clock++;
}

size_t patina_refset_size(const patina_refset_t *rs)
{
    size_t n;
    if (!rs) return 0;
    pthread_rwlock_rdlock((pthread_rwlock_t *)&rs->lock);
    n = rs->alive / rs->per;
    pthread_rwlock_unlock((pthread_rwlock_t *)&rs->lock);
    return n;
}

size_t patina_refset_rows(const patina_refset_t *rs)
{
    size_t n;
    if (!rs) return 0;
    pthread_rwlock_rdlock((pthread_rwlock_t *)&rs->lock);
    n = rs->alive;
    pthread_rwlock_unlock((pthread_rwlock_t *)&rs->lock);
    return n;
}

const char *patina_refset_table(const patina_refset_t *rs) { return rs ? patina_extractor_spec(rs->ex) : NULL; }

const uint64_t *patina_refset_ids(patina_refset_t *rs)
{
    if (!rs) return NULL;
    pthread_rwlock_wrlock(&rs->lock);
    compact(rs);
    pthread_rwlock_unlock(&rs->lock);
    return rs->ids;
}

const void *patina_refset_records(patina_refset_t *rs, size_t *stride)
{
    if (stride) *stride = rs ? rs->stride : 0;
    if (!rs) return NULL;
    pthread_rwlock_wrlock(&rs->lock);
    compact(rs);
    pthread_rwlock_unlock(&rs->lock);
    return rs->recs;
}

/* The slot of id (its index), or where it would go (*found = 0). */
static size_t find_slot(const patina_refset_t *rs, uint64_t id, int *found)
{
    size_t lo = 0, hi = rs->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (rs->ids[mid] < id) lo = mid + 1;
        else hi = mid;
    }
    *found = lo < rs->n && rs->ids[lo] == id;
    return lo;
}

static int grow(patina_refset_t *rs, size_t need)
{
    size_t cap = rs->cap ? rs->cap : 16;
    void *p;
    if (need <= rs->cap) return 1;
    while (cap < need) cap += cap / 2 + 16;
    if (!(p = realloc(rs->recs, cap * rs->stride))) return 0;
    rs->recs = p;
    if (!(p = realloc(rs->ids, cap * sizeof *rs->ids))) return 0;
    rs->ids = p;
    if (!(p = realloc(rs->count, cap * sizeof *rs->count))) return 0;
    rs->count = p;
    if (!(p = realloc(rs->dead, cap))) return 0;
    rs->dead = p;
    if (!(p = realloc(rs->stamp, cap * sizeof *rs->stamp))) return 0;
    rs->stamp = p;
    rs->cap = cap;
    return 1;
}

static patina_status refset_put(patina_refset_t *rs, uint64_t id, const void *record, size_t bytes);

patina_status patina_refset_put(patina_refset_t *rs, uint64_t id, const void *record, size_t bytes)
{
    void *copy;
    patina_status s;
    PATINA_TRY(patina__rows(&record, 1, bytes, PATINA_ROW_ALIGN(4), &copy, "identify: reference record"));
    s = refset_put(rs, id, record, bytes);
    free(copy);
    return s;
}

static patina_status refset_put(patina_refset_t *rs, uint64_t id, const void *record, size_t bytes)
{
    const size_t per = rs ? rs->per : 1;
    size_t slot, v;
    int found;
    char what[64];
    if (!rs || !record) return patina__fail(PATINA_E_INVALID, "identify: null reference set or record");
    if (id == 0) return patina__fail(PATINA_E_INVALID, "identify: reference id 0 (ids start at 1)");
    snprintf(what, sizeof what, "identify: reference id %llu", (unsigned long long)id);
    if (per == 1) PATINA_TRY(rs_record_check(record, bytes, what)); /* a malformed record: CORRUPT */
    if (bytes != rs->item_bytes)
        return patina__fail(PATINA_E_INVALID, "%s: a %zu-byte record does not belong in table '%s' (%zu bytes)", what,
                            bytes, patina_refset_table(rs), rs->item_bytes);
    PATINA_TRY(check_item(rs, record, what, PATINA_E_INVALID));
    pthread_rwlock_wrlock(&rs->lock);
    slot = find_slot(rs, id, &found);
    if (!found) {
        if (rs->n > UINT32_MAX - per || !grow(rs, rs->n + per)) {
            pthread_rwlock_unlock(&rs->lock);
            return patina__fail(PATINA_E_NOMEM, "identify: out of memory adding reference %llu",
                                (unsigned long long)id);
        }
        if (slot < rs->n) { /* below the largest id: the slots after it move */
            const size_t tail = rs->n - slot;
            memmove(rs->recs + (slot + per) * rs->stride, rs->recs + slot * rs->stride, tail * rs->stride);
            memmove(rs->ids + slot + per, rs->ids + slot, tail * sizeof *rs->ids);
            memmove(rs->count + slot + per, rs->count + slot, tail * sizeof *rs->count);
            memmove(rs->dead + slot + per, rs->dead + slot, tail);
            memmove(rs->stamp + slot + per, rs->stamp + slot, tail * sizeof *rs->stamp);
            rs->epoch++;
        }
        rs->n += per;
        rs->alive += per;
        for (v = 0; v < per; v++) rs->ids[slot + v] = id;
    } else if (rs->dead[slot]) {
        rs->alive += per;
    }
    memcpy(rs->recs + slot * rs->stride, record, bytes);
    ++rs->clock;
    for (v = 0; v < per; v++) {
        rs->count[slot + v] = (uint16_t)rs_count(rs->recs + (slot + v) * rs->stride);
        rs->dead[slot + v] = 0;
        rs->stamp[slot + v] = rs->clock;
    }
    pthread_rwlock_unlock(&rs->lock);
    return PATINA_OK;
}

patina_status patina_refset_remove(patina_refset_t *rs, uint64_t id)
{
    size_t slot;
    int found;
    if (!rs) return patina__fail(PATINA_E_INVALID, "identify: null reference set");
    pthread_rwlock_wrlock(&rs->lock);
    slot = find_slot(rs, id, &found);
    if (!found || rs->dead[slot]) {
        pthread_rwlock_unlock(&rs->lock);
        return patina__fail(PATINA_E_NOTFOUND, "identify: reference id %llu is not in the set",
                            (unsigned long long)id);
    }
    ++rs->clock;
    for (size_t v = 0; v < rs->per; v++) { /* every row of the item */
        rs->dead[slot + v] = 1;
        rs->count[slot + v] = 0;
        rs->stamp[slot + v] = rs->clock;
    }
    rs->alive -= rs->per;
    if (rs->n - rs->alive >= 64 && rs->n - rs->alive >= rs->n / 4) compact(rs);
    pthread_rwlock_unlock(&rs->lock);
    return PATINA_OK;
}

static const rootsift_params_t *params_of(const patina_refset_t *rs)
{
    return (const rootsift_params_t *)(const void *)rs->ex->params;
}

size_t patina_identify_query_bytes(const patina_refset_t *rs)
{
    return rs ? rs_record_bytes((size_t)params_of(rs)->n, RS_QUANT_U8) : 0;
}

patina_status patina_identify_capacity(patina_context_t *ctx, const char *table, patina_identify_capacity_t *cap)
{
    patina_extractor_t *ex = NULL;
    const rootsift_params_t *p;
    long pages, psize;
    if (!cap) return patina__fail(PATINA_E_INVALID, "identify: null capacity");
    memset(cap, 0, sizeof *cap);
    if (!table || !is_rootsift(table))
        return patina__fail(PATINA_E_INVALID, "identify: '%s' is not a rootsift spec", table ? table : "(null)");
    PATINA_TRY(patina_extractor_new(&ex, table));
    p = (const rootsift_params_t *)(const void *)ex->params;
    cap->features = (size_t)p->m;
    cap->rows = (size_t)(1 + p->views);
    cap->record_bytes = patina_extractor_bytes(ex);
    cap->gpu_bytes = cap->rows * pgpu_idf_slot_bytes(cap->features, PGPU_IDF_INT8);
    patina_extractor_free(ex);
    pages = sysconf(_SC_AVPHYS_PAGES);
    psize = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psize > 0) cap->host_refs = (size_t)((double)pages * (double)psize / (double)cap->record_bytes);
    if (ctx && patina__context_gpu_usable(ctx)) {
        patina_gpu_t *g;
        if (patina__context_gpu_acquire(ctx, &g) == PATINA_OK) {
            patina_gpu__identify_capacity(g, cap->features, PGPU_IDF_INT8, &cap->gpu_refs);
            patina__context_gpu_release(ctx);
            cap->gpu_refs /= cap->rows; /* the device's slots hold rows */
        }
    }
    return PATINA_OK;
}

/* ------------------------------------------------------------------ queries */

typedef struct extract_job {
    const rootsift_params_t *p;
    unsigned char *out;
    size_t bytes;
    const patina_image_t *images;
    patina_status *st;
} extract_job_t;

static void extract_one(void *arg, size_t i, int worker)
{
    extract_job_t *jb = arg;
    unsigned char *rec = jb->out + i * jb->bytes;
    patina_status s;
    (void)worker;
    s = rs_extract(jb->p, (size_t)jb->p->n, rec, &jb->images[i]);
    if (s != PATINA_OK) { /* a valid record with no features */
        rootsift_params_t p0 = *jb->p;
        patina_image_t empty;
        memset(&empty, 0, sizeof empty);
        if (rs_extract(&p0, (size_t)p0.n, rec, &empty) != PATINA_OK) memset(rec, 0, jb->bytes);
    }
    if (jb->st) jb->st[i] = s;
}

/* Runs fn over [0, n) on ctx's workers (their turn), or on a pool of all
 * CPUs made for the call when ctx is NULL. */
static patina_status run_tasks(patina_context_t *ctx, size_t n, patina_task_fn fn, void *arg)
{
    patina_pool_t *pool;
    int own;
    PATINA_TRY(patina__workers_begin(ctx, 0, &pool, &own));
    patina_pool_run(pool, n, fn, arg);
    patina__workers_end(ctx, pool, own);
    return PATINA_OK;
}

static int worker_count(patina_context_t *ctx)
{
    return ctx ? patina_context_threads(ctx) : patina_cpu_count();
}

patina_status patina_identify_extract(patina_context_t *ctx, const patina_refset_t *rs, void *out,
                                      const patina_image_t *images, size_t nq, patina_status *st)
{
    extract_job_t jb;
    if (!rs || (nq && (!out || !images))) return patina__fail(PATINA_E_INVALID, "identify: null argument");
    if (nq == 0) return PATINA_OK;
    jb.p = params_of(rs);
    jb.out = out;
    jb.bytes = patina_identify_query_bytes(rs);
    jb.images = images;
    jb.st = st;
    /* On the context's GPU when it has a usable one (the same records:
     * docs/rootsift.md "GPU"); the CPU when not, or when the GPU call fails. */
    if (PATINA_HAVE_CUDA && ctx && patina__context_gpu_usable(ctx)) {
        patina_status *sg = malloc(nq * sizeof *sg), s = PATINA_E_NOMEM;
        patina_gpu_t *g;
        if (sg && patina__context_gpu_acquire(ctx, &g) == PATINA_OK) {
            s = rs_extract_gpu(g, jb.p, (size_t)jb.p->n, out, images, nq, sg);
            patina__context_gpu_release(ctx);
        }
        if (s == PATINA_OK) {
            for (size_t i = 0; i < nq; i++) {
                if (sg[i] != PATINA_OK) { /* a valid record with no features, as extract_one */
                    patina_image_t empty;
                    unsigned char *rec = (unsigned char *)out + i * jb.bytes;
                    memset(&empty, 0, sizeof empty);
                    if (rs_extract(jb.p, (size_t)jb.p->n, rec, &empty) != PATINA_OK) memset(rec, 0, jb.bytes);
                }
                if (st) st[i] = sg[i];
            }
            free(sg);
            return PATINA_OK;
        }
        free(sg);
        patina_clear_error();
    }
    return run_tasks(ctx, nq, extract_one, &jb);
}

patina_status patina_identify_extract_half(patina_context_t *ctx, const patina_refset_t *rs, void *out,
                                           const patina_image_t *images, size_t nq, patina_status *st)
{
    patina_image_t *half;
    patina_status s = PATINA_OK;
    size_t i;
    if (!rs || (nq && (!out || !images))) return patina__fail(PATINA_E_INVALID, "identify: null argument");
    if (nq == 0) return PATINA_OK;
    if (!(half = calloc(nq, sizeof *half)))
        return patina__fail(PATINA_E_NOMEM, "identify: out of memory for %zu half-size queries", nq);
    for (i = 0; i < nq && s == PATINA_OK; i++) s = rs_view_make(&half[i], &images[i], RS_VIEW_HALF);
    if (s == PATINA_OK) s = patina_identify_extract(ctx, rs, out, half, nq, st);
    for (i = 0; i < nq; i++) patina_image_release(&half[i]);
    free(half);
    return s;
}

/* ------------------------------------------------------------------ identify */

void patina_identify_opts_init(patina_identify_opts_t *o)
{
    if (!o) return;
    memset(o, 0, sizeof *o);
    patina__options_init(PATINA_OPTIONS_IDENTIFY, o);
    o->threshold = PATINA_THRESHOLD_CALIBRATED; /* the table declares no value: the call resolves it */
}

const char *patina_identify_decision_name(patina_identify_decision d)
{
    switch (d) {
    case PATINA_DECISION_UNKNOWN: return "unknown";
    case PATINA_DECISION_MATCH: return "match";
    case PATINA_DECISION_AMBIGUOUS: return "ambiguous";
    }
    return NULL;
}

/* The calibration of the acceptance threshold (docs/identify-bench.md,
 * "Calibration"): per target false-accept rate, the smallest rank-1 inlier
 * count at which at most that fraction of the benchmark's clean impostor
 * queries was accepted, with the default options, per reference views
 * setting (the spec's views: more rows give impostors more chance inliers).
 * Targets between two rows take the stricter row. */
typedef struct far_row {
    double far, threshold;
} far_row_t;
#define FAR_ROWS 5
/* opts.accept SIGNIFICANCE (the default): -log10 NFA of rank 1's inliers;
 * the benchmark's clean impostors under its pixel hygiene (content shared
 * with a registered texture decided by pixels: docs/identify-bench.md).
 * Each threshold is the roundest number between the best impostor below
 * the calibrated value and that value, so it accepts the same queries. */
static const far_row_t sig_tables[RS_VIEWS_MAX + 1][FAR_ROWS] = {
    /* views = 0: `patina identify --threshold 0` on the full sets (docs/identify-bench.md) */
    {{0.05, 0.04}, {0.02, 1}, {0.01, PATINA_SIGNIFICANCE_DEFAULT}, {0.005, 8}, {PATINA_FAR_MIN, 9}},
    /* views = 1: the same on a `--views 1` collection (2026-11-30; until then the stricter of its
     * neighbours' rows, which at 1% accepted 1.1% of the impostors) */
    {{0.05, 0.04}, {0.02, 1.5}, {0.01, PATINA_SIGNIFICANCE_VIEWS1}, {0.005, 8}, {PATINA_FAR_MIN, 9}},
    /* views = 2: the same on the `--views 2` collection of the same references */
    {{0.05, 0.7}, {0.02, 1.9}, {0.01, PATINA_SIGNIFICANCE_VIEWS2}, {0.005, 14}, {PATINA_FAR_MIN, 19}},
    /* views = 3: the same on a `--views 3` collection (2026-11-30) */
    {{0.05, 0.7}, {0.02, 1.9}, {0.01, PATINA_SIGNIFICANCE_VIEWS3}, {0.005, 14}, {PATINA_FAR_MIN, 19}},
};
/* The same with the view pass (opts.view_candidates > 0), views = 1, 2 and 3
 * (views = 0 has no pass): the ten verified items are other items (the best
 * by first rows, then folded), and the impostors' best significance
 * differs. `patina identify --view-candidates 64` on the `--views 1` and
 * `--views 2` collections (32 gave views 2 the same table), and on the `--views 3` one. */
static const far_row_t sig_pass_tables[RS_VIEWS_MAX][FAR_ROWS] = {
    {{0.05, 0.04}, {0.02, 1}, {0.01, 3}, {0.005, 8}, {PATINA_FAR_MIN, 9}},
    {{0.05, 0.258}, {0.02, 2}, {0.01, 3}, {0.005, 14}, {PATINA_FAR_MIN, 19}},
    {{0.05, 0.4}, {0.02, 2}, {0.01, 3}, {0.005, 14}, {PATINA_FAR_MIN, 20}},
};
/* The view pass with the half-size views in its first pass too
 * (opts.half_view_features > 0): more items of an impostor's are candidates,
 * and its best significance runs higher. `patina identify --view-candidates
 * 64 --first-features 512 --half-view-features 64` on the `--views 1`
 * collection (row 0) and the `--views 3` one (row 1); docs/identify.md,
 * "The half-size view in the first pass". */
static const far_row_t sig_half_tables[2][FAR_ROWS] = {
    {{0.05, 0.04}, {0.02, 0.8}, {0.01, 3}, {0.005, 8}, {PATINA_FAR_MIN, 9}},
    {{0.05, 0.49}, {0.02, 2}, {0.01, 3.9}, {0.005, 14}, {PATINA_FAR_MIN, 20}},
};
/* With the half-size query beside (patina_identify_fuse_half at the
 * default margin), each value the calibrated one rounded up (its run's
 * impostors below it stay below; docs/identify-bench.md): row 0 `patina
 * identify --half-query 64` with the default options on a collection
 * without views (2026-12-01, fourteenth session), row 1 with the view pass
 * and the half-size views (`--view-candidates 64 --first-features 512
 * --half-view-features 64`) on the `--views 3` collection (2026-12-01). */
static const far_row_t sig_halfq_tables[2][FAR_ROWS] = {
    {{0.05, 0.044}, {0.02, 1.73}, {0.01, 3.03}, {0.005, 8.13}, {PATINA_FAR_MIN, 9.04}},
    {{0.05, 0.79}, {0.02, 2.24}, {0.01, 3.99}, {0.005, 14.52}, {PATINA_FAR_MIN, 20.47}},
};
/* opts.accept INLIERS: rank 1's inlier count (the peer's hygiene) */
static const far_row_t far_tables[RS_VIEWS_MAX + 1][FAR_ROWS] = {
    /* views = 0: bench/identify's default run */
    {{0.05, 4}, {0.02, 10}, {0.01, PATINA_THRESHOLD_DEFAULT}, {0.005, 24}, {PATINA_FAR_MIN, 33}},
    /* views = 1: the lab's run of the same view (docs/lab/identify.md, v1) */
    {{0.05, 4}, {0.02, 11}, {0.01, 17}, {0.005, 34}, {PATINA_FAR_MIN, 38}},
    /* views = 2: `patina index --views 2` on the benchmark (lab/identify/views_lib.sh 2) */
    {{0.05, 4}, {0.02, 16}, {0.01, 24}, {0.005, 46}, {PATINA_FAR_MIN, 65}},
    /* views = 3: views = 2's row. The peer's hygiene had no run of views 3; under the pixels'
     * hygiene views 3 needs exactly views 2's thresholds (4, 4, 5, 9, 11, the inlier counts of
     * both collections' runs: docs/lab/identify.md, "views = 3") */
    {{0.05, 4}, {0.02, 16}, {0.01, 24}, {0.005, 46}, {PATINA_FAR_MIN, 65}},
};

/* Which significance table the options take with `views` views: 0 every
 * row, 1 the view pass (view_candidates > 0; a set without views ignores
 * it), 2 the view pass with the half-size views in its first pass
 * (half_view_features > 0 and views 1 or 3). */
static int pass_mode(int views, const patina_identify_opts_t *o)
{
    if (!o || o->view_candidates == 0 || views == 0) return 0;
    return o->half_view_features > 0 && (views == 1 || views == 3) ? 2 : 1;
}

/* The threshold of table t's row for far (< 1): the first row at or
 * below it (targets between two rows take the stricter), the last row
 * below the smallest. */
static double row_threshold(const far_row_t *t, double far)
{
    size_t i;
    for (i = 0; i < FAR_ROWS - 1; i++)
        if (t[i].far <= far) break;
    return t[i].threshold;
}

/* The table of a views setting, acceptance rule and view pass (pass:
 * pass_mode's; the inlier tables have no run of the pass and serve all). */
static patina_status far_lookup(int views, patina_identify_accept accept, int pass, double far, double *threshold)
{
    const far_row_t *t = accept == PATINA_ACCEPT_INLIERS ? far_tables[views]
                         : pass == 2                     ? sig_half_tables[views == 3]
                         : pass == 1                     ? sig_pass_tables[views - 1]
                                                         : sig_tables[views];
    if (!threshold) return patina__fail(PATINA_E_INVALID, "identify: null threshold");
    if (!(far >= PATINA_FAR_MIN && far <= 1))
        return patina__fail(PATINA_E_INVALID,
                            "identify: far = %g is outside [%g, 1] (the benchmark's impostors cannot tell a smaller "
                            "rate; give the threshold itself)",
                            far, PATINA_FAR_MIN);
    if (far >= 1) {
        *threshold = 0;
        return PATINA_OK;
    }
    *threshold = row_threshold(t, far);
    return PATINA_OK;
}

patina_status patina_identify_far_threshold(double far, double *threshold)
{
    return far_lookup(0, PATINA_ACCEPT_SIGNIFICANCE, 0, far, threshold);
}

/* The reference views of the rootsift spec table (NULL: none), after
 * checking opts (accept among them). */
static patina_status far_views(const char *table, const patina_identify_opts_t *opts, int *views)
{
    patina_extractor_t *ex = NULL;
    *views = 0;
    if (opts) PATINA_TRY(patina__options_validate(PATINA_OPTIONS_IDENTIFY, opts));
    if (table) {
        if (!is_rootsift(table)) return patina__fail(PATINA_E_INVALID, "identify: '%s' is not a rootsift spec", table);
        PATINA_TRY(patina_extractor_new(&ex, table));
        *views = ((const rootsift_params_t *)(const void *)ex->params)->views;
        patina_extractor_free(ex);
    }
    return PATINA_OK;
}

patina_status patina_identify_far_threshold_opts(const char *table, const patina_identify_opts_t *opts, double far,
                                                 double *threshold)
{
    int views;
    PATINA_TRY(far_views(table, opts, &views));
    return far_lookup(views, opts ? opts->accept : PATINA_ACCEPT_SIGNIFICANCE, pass_mode(views, opts), far, threshold);
}

patina_status patina_identify_far_threshold_half(const char *table, const patina_identify_opts_t *opts, double far,
                                                 double *threshold)
{
    int views;
    PATINA_TRY(far_views(table, opts, &views));
    PATINA_TRY(far_lookup(views, opts ? opts->accept : PATINA_ACCEPT_SIGNIFICANCE, pass_mode(views, opts), far,
                          threshold));
    /* the calibrated runs (significance): no views; views 3 with the view pass and the half-size views */
    if ((!opts || opts->accept == PATINA_ACCEPT_SIGNIFICANCE) && far < 1 &&
        (views == 0 || (views == 3 && pass_mode(views, opts) == 2))) {
        const double t = row_threshold(sig_halfq_tables[views == 3], far);
        if (t > *threshold) *threshold = t;
    }
    return PATINA_OK;
}

patina_status patina_identify_far_threshold_table(const char *table, double far, double *threshold)
{
    if (!table) return patina__fail(PATINA_E_INVALID, "identify: '(null)' is not a rootsift spec");
    return patina_identify_far_threshold_opts(table, NULL, far, threshold);
}

/* Per-worker scratch for one (query, reference) pair. */
typedef struct scratch {
    int16_t *qw;        /* (n, 128) widened query (u8 rows at scale 512) */
    float *qf, *rf;     /* (n, 128), (m, 128) dequantised rows (any other record) */
    int32_t *ibuf;      /* best (n), qbest (m), int32 scratch (m) */
    float *fbuf;        /* s1, s2 (n each), qs (m) */
    int32_t *claim;     /* (m) */
    idf_match_t *mt;    /* (n) */
    double *qp, *rp;    /* (n, 2) each */
    double *qsh, *rsh;  /* (n, 2) each: log scale, orientation */
    unsigned char *inl; /* (n) */
    idf_nn_t nn;        /* the last match_pair's 2-NN (into ibuf, fbuf) */
    /* guided matching: keypoints (x, y, log scale, angle) of the query (n, 4)
     * and the reference (m, 4); its correspondences and their RANSAC arrays,
     * swapped with the ones above when guided matching finds more inliers */
    double *qg, *rg;
    idf_match_t *gm;
    double *qp2, *rp2, *qsh2, *rsh2;
    unsigned char *inl2;
} scratch_t;

typedef struct cand {
    uint64_t id;      /* the reference's id (ties by id: one order over every set) */
    uint32_t set;     /* its set (idf_many_t.sets) */
    uint32_t ref;     /* its slot in that set */
    uint32_t matches;
    uint32_t inliers;
    int verified;
    double sig; /* the significance of its inliers (idf_significance), when verified */
} cand_t;

/* A (query, reference row) pair's 2-NN dots from the GPU, in
 * patina_gpu_identify_nn's layout: best, s1, s2 at dots, dots + n, dots + 2
 * n, qbest and qs at dots + 3 n, dots + 3 n + m (n, m: the set's). */
typedef struct gnn {
    const int32_t *dots;
    size_t n, m;
} gnn_t;

/* The dots of the pair v rows after gn's (an item's rows follow each other). */
static gnn_t gnn_row(const gnn_t *gn, size_t v)
{
    return (gnn_t){gn->dots + v * (3 * gn->n + 2 * gn->m), gn->n, gn->m};
}

/* One stage's work over the context's workers: matching one set (rs, set;
 * the CPU's tasks = query x block of references) or verifying the merged
 * candidates (sets; tasks = query x candidate). */
typedef struct job {
    patina_refset_t *const *sets; /* every set of the call */
    const patina_refset_t *rs;    /* matching: the set matched */
    uint32_t set;                 /* its index */
    const unsigned char *queries;
    size_t qbytes, nq;
    size_t block, nblocks; /* references per matching task; tasks per query */
    const patina_identify_opts_t *o;
    size_t sn, sm;      /* the workers' scratch: n and m of the sets (worker_scratch) */
    atomic_int nomem;   /* a task found no memory for its scratch */
    cand_t *tcands;     /* (nq, nblocks, ncap): each task's best candidates */
    size_t *ntcands;    /* (nq, nblocks) */
    cand_t *cands;      /* (nq, ncap) candidates */
    size_t ncap;        /* candidates kept per query */
    size_t *ncands;     /* (nq) */
    size_t nverify;     /* candidates verified per query, at most */
    size_t q0;          /* verifying: the first query of the tasks (task t: query q0 + t / nverify) */
    gnn_t gdots;        /* verifying: the 2-NN dots from the GPU (dots NULL: match on the CPU) */
    const size_t *gat;  /* (tasks) task t's first pair in gdots (its item's rows follow) */
    int first_only;     /* matching: the items' first rows only (the view pass follows) */
    size_t half;        /* first_only: the half-size view's row, also matched (with hqueries); 0: none */
    const unsigned char *hqueries; /* (nmain) the queries cut to opts.half_view_features */
    size_t nmain;       /* the queries [0, nmain) have the half-size view pass; [nmain, nq) are their
                         * companions (idf_many_begin_half: none) */
    size_t comp_rows;   /* with companions: their first pass's rows at most (the pair call's) */
    const unsigned char *pqueries; /* (nq) the queries prepared for matching: both passes' rows are
                                    * prefixes of theirs */
    size_t nview;       /* the second pass: candidates per query whose rows v0 .. per - 1 are matched */
    size_t v0;
} job_t;

static void scratch_free(scratch_t *sc)
{
    free(sc->qw);
    free(sc->qf);
    free(sc->rf);
    free(sc->ibuf);
    free(sc->fbuf);
    free(sc->claim);
    free(sc->mt);
    free(sc->qp);
    free(sc->rp);
    free(sc->qsh);
    free(sc->rsh);
    free(sc->inl);
    free(sc->qg);
    free(sc->rg);
    free(sc->gm);
    free(sc->qp2);
    free(sc->rp2);
    free(sc->qsh2);
    free(sc->rsh2);
    free(sc->inl2);
}

static int scratch_new(scratch_t *sc, size_t n, size_t m)
{
    memset(sc, 0, sizeof *sc);
    sc->qw = malloc((n ? n : 1) * IDF_DIM * sizeof *sc->qw);
    sc->qf = malloc((n ? n : 1) * IDF_DIM * sizeof *sc->qf);
    sc->rf = malloc((m ? m : 1) * IDF_DIM * sizeof *sc->rf);
    sc->ibuf = malloc((n + 2 * m + 1) * sizeof *sc->ibuf);
    sc->fbuf = malloc((2 * n + m + 1) * sizeof *sc->fbuf);
    sc->claim = malloc((m + 1) * sizeof *sc->claim);
    sc->mt = malloc((n + 1) * sizeof *sc->mt);
    sc->qp = malloc((2 * n + 2) * sizeof *sc->qp);
    sc->rp = malloc((2 * n + 2) * sizeof *sc->rp);
    sc->qsh = malloc((2 * n + 2) * sizeof *sc->qsh);
    sc->rsh = malloc((2 * n + 2) * sizeof *sc->rsh);
    sc->inl = malloc(n + 1);
    sc->qg = malloc((4 * n + 4) * sizeof *sc->qg);
    sc->rg = malloc((4 * m + 4) * sizeof *sc->rg);
    sc->gm = malloc((n + 1) * sizeof *sc->gm);
    sc->qp2 = malloc((2 * n + 2) * sizeof *sc->qp2);
    sc->rp2 = malloc((2 * n + 2) * sizeof *sc->rp2);
    sc->qsh2 = malloc((2 * n + 2) * sizeof *sc->qsh2);
    sc->rsh2 = malloc((2 * n + 2) * sizeof *sc->rsh2);
    sc->inl2 = malloc(n + 1);
    return sc->qw && sc->qf && sc->rf && sc->ibuf && sc->fbuf && sc->claim && sc->mt && sc->qp && sc->rp &&
           sc->qsh && sc->rsh && sc->inl && sc->qg && sc->rg && sc->gm && sc->qp2 && sc->rp2 && sc->qsh2 &&
           sc->rsh2 && sc->inl2;
}

/* A worker's scratch, kept by its thread from call to call (grown for a
 * larger n or m, freed when the thread ends: a context's workers live as
 * long as the context). Made and freed per call instead, about 1 MB per
 * worker, glibc gave the memory back after each call and the next call
 * faulted it in again: a CPU shard of 32 workers took 1,600 minor faults
 * per query (bench/cluster/run.sh's passes.log), a GPU shard's verification
 * a few milliseconds. NULL when out of memory. */
typedef struct kept_scratch {
    scratch_t sc;
    size_t n, m; /* what sc holds */
} kept_scratch_t;

static pthread_key_t kept_key;
static pthread_once_t kept_once = PTHREAD_ONCE_INIT;
static int kept_ok;

static void kept_free(void *p)
{
    kept_scratch_t *k = p;
    scratch_free(&k->sc);
    free(k);
}

static void kept_init(void) { kept_ok = pthread_key_create(&kept_key, kept_free) == 0; }

/* The key goes with the library (a dlclose), so that no thread ending
 * later calls kept_free in unmapped code (its scratch is then not freed). */
__attribute__((destructor)) static void kept_fini(void)
{
    if (kept_ok) pthread_key_delete(kept_key);
    kept_ok = 0;
}

static scratch_t *worker_scratch(size_t n, size_t m)
{
    kept_scratch_t *k;
    pthread_once(&kept_once, kept_init);
    if (!kept_ok) return NULL;
    k = pthread_getspecific(kept_key);
    if (k && k->n >= n && k->m >= m) return &k->sc;
    if (k) {
        scratch_free(&k->sc);
        n = n > k->n ? n : k->n;
        m = m > k->m ? m : k->m;
    } else if (!(k = calloc(1, sizeof *k))) {
        return NULL;
    }
    if (!scratch_new(&k->sc, n, m) || pthread_setspecific(kept_key, k) != 0) {
        kept_free(k);
        pthread_setspecific(kept_key, NULL);
        return NULL;
    }
    k->n = n;
    k->m = m;
    return &k->sc;
}

/* Prepares query record q in the worker's scratch: widened when it is u8 at
 * scale 512, dequantised always (for references that are not). */
static void prepare_query(scratch_t *sc, const unsigned char *q)
{
    if (idf_exact_u8(q)) idf_widen(sc->qw, rs_row(q, 0), rs_count(q));
    idf_dequantise(sc->qf, q);
}

/* Matches prepared query q against reference r, fills sc->mt; returns the
 * score. gn NULL: both u8 at scale 512, the fast integer matcher; otherwise
 * the float definition on dequantised rows (the same answer where both
 * apply). gn given: the pair's 2-NN dots computed elsewhere (the GPU's), the
 * same nn as idf_match_fast's, hence the same matches. */
static size_t match_pair(scratch_t *sc, const unsigned char *q, const unsigned char *r,
                         const patina_identify_opts_t *o, const gnn_t *gn)
{
    size_t nr = rs_count(r), n = rs_count(q);
    idf_nn_t *nn = &sc->nn;
    if (n == 0 || nr == 0) return 0;
    nn->best = sc->ibuf;
    nn->qbest = sc->ibuf + n;
    nn->s1 = sc->fbuf;
    nn->s2 = sc->fbuf + n;
    nn->qs = sc->fbuf + 2 * n;
    if (gn) {
        const int32_t *d = gn->dots;
        idf_nn_from_dots(nn, d, d + gn->n, d + 2 * gn->n, n, d + 3 * gn->n, d + 3 * gn->n + gn->m, nr, IDF_INV_SCALE2);
    } else if (idf_exact_u8(q) && idf_exact_u8(r)) {
        idf_match_fast(nn, sc->ibuf + n + nr, sc->qw, n, rs_row(r, 0), nr, IDF_INV_SCALE2);
    } else {
        idf_dequantise(sc->rf, r);
        idf_match_ref(nn, sc->qf, n, sc->rf, nr);
    }
    return idf_score(sc->mt, sc->claim, nn, n, nr, o->ratio, o->scoring);
}

/* Candidates before verification: matches descending, then id. */
static int cmp_matches(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;
    if (x->matches != y->matches) return x->matches > y->matches ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Inserts x into the sorted list c of *nc <= cap entries when it belongs to
 * the best cap (cap is small: k and verify_top). */
static void top_insert(cand_t *c, size_t *nc, size_t cap, cand_t x)
{
    size_t pos;
    if (*nc == cap && cmp_matches(&x, &c[*nc - 1]) >= 0) return;
    pos = *nc < cap ? (*nc)++ : *nc - 1;
    while (pos > 0 && cmp_matches(&x, &c[pos - 1]) < 0) {
        c[pos] = c[pos - 1];
        pos--;
    }
    c[pos] = x;
}

/* Task (query q, block b): scores references [b block, (b+1) block) and
 * keeps their best ncap (0 matches excluded). The best ncap of a query are
 * the best ncap of its blocks' lists (cmp_matches is a total order), so the
 * memory is (queries x blocks x ncap), not (queries x references). */
static void match_task(void *arg, size_t t, int worker)
{
    job_t *jb = arg;
    size_t q = t / jb->nblocks, b = t % jb->nblocks, i, end;
    const unsigned char *qr = jb->queries + q * jb->qbytes;
    scratch_t *sc = worker_scratch(jb->sn, jb->sm);
    cand_t *c = jb->tcands + t * jb->ncap;
    size_t *nc = &jb->ntcands[t];
    (void)worker;
    *nc = 0;
    if (!sc) {
        atomic_store(&jb->nomem, 1);
        return;
    }
    if (rs_count(qr) == 0) return;
    /* the half-size view's queries are a prefix of the same rows: one
     * preparation (of the uncut query) serves both */
    prepare_query(sc, jb->half ? jb->pqueries + q * jb->qbytes : qr);
    end = (b + 1) * jb->block < jb->rs->n ? (b + 1) * jb->block : jb->rs->n;
    /* an item's rows (per, within one block: blocks are whole items) fold
     * into its best row: the most matches, ties the lower slot */
    for (i = b * jb->block; i < end; i += jb->rs->per) {
        size_t v, best = 0, bsco = 0;
        const size_t rows = jb->first_only ? 1 : jb->rs->per;
        if (jb->rs->dead[i]) continue;
        for (v = 0; v < rows; v++) {
            const size_t sco = match_pair(sc, qr, jb->rs->recs + (i + v) * jb->rs->stride, jb->o, NULL);
            if (sco > bsco) {
                bsco = sco;
                best = i + v;
            }
        }
        if (jb->half && q < jb->nmain) { /* the half-size view with the query's strongest half_view_features */
            const size_t sco = match_pair(sc, jb->hqueries + q * jb->qbytes,
                                          jb->rs->recs + (i + jb->half) * jb->rs->stride, jb->o, NULL);
            if (sco > bsco) {
                bsco = sco;
                best = i + jb->half;
            }
        }
        if (bsco) top_insert(c, nc, jb->ncap, (cand_t){jb->rs->ids[best], jb->set, (uint32_t)best, (uint32_t)bsco, 0, 0, 0});
    }
}

/* Keypoint i of record rec as (x, y, log scale, angle) into g[4]. */
static void keypoint(const unsigned char *rec, size_t i, double g[4])
{
    float f[4];
    rs_geom_get(rec, i, f);
    g[0] = f[0];
    g[1] = f[1];
    g[2] = log(f[2] > 0 ? f[2] : 1e-9);
    g[3] = f[3];
}

/* The RANSAC arrays of correspondences mt[0, nm) into qp, rp, qsh, rsh. */
static void fill_pairs(double *qp, double *rp, double *qsh, double *rsh, const idf_match_t *mt, size_t nm,
                       const unsigned char *qr, const unsigned char *r)
{
    size_t i;
    for (i = 0; i < nm; i++) {
        double gq[4], gr[4];
        keypoint(qr, (size_t)mt[i].q, gq);
        keypoint(r, (size_t)mt[i].r, gr);
        qp[2 * i] = gq[0];
        qp[2 * i + 1] = gq[1];
        rp[2 * i] = gr[0];
        rp[2 * i + 1] = gr[1];
        qsh[2 * i] = gq[2];
        qsh[2 * i + 1] = gq[3];
        rsh[2 * i] = gr[2];
        rsh[2 * i + 1] = gr[3];
    }
}

#define SWAP_PTR(a, b)                                                                                       \
    do {                                                                                                     \
        void *t_ = (a);                                                                                      \
        (a) = (b);                                                                                           \
        (b) = t_;                                                                                            \
    } while (0)

/* Matches prepared query qr against reference r (image id) and verifies
 * the correspondences with RANSAC: sc->qp, sc->rp hold the nm
 * correspondences verified last, sc->inl their inlier mask; returns the
 * inlier count. With guided matching (o->guided), the model found is used
 * to match again inside the neighbourhoods it predicts (idf_guided, at
 * o->guided_ratio) and RANSAC runs on those correspondences; their result
 * replaces the first when it has more inliers. The seed depends on the id
 * only, so patina_identify_pairs repeats exactly what patina_identify
 * computed. */
static size_t verify_pair(scratch_t *sc, const unsigned char *qr, const unsigned char *r, uint64_t id,
                          const patina_identify_opts_t *o, const gnn_t *gn, size_t *nm_out, double *sig)
{
    size_t nm, ng, i, c, cg;
    double thr, side, w, h;
    const uint64_t seed = o->seed ^ (id * 0x9E3779B97F4A7C15ull);
    idf_model_t model;
    nm = match_pair(sc, qr, r, o, gn);
    fill_pairs(sc->qp, sc->rp, sc->qsh, sc->rsh, sc->mt, nm, qr, r);
    *nm_out = nm;
    /* The inlier distance scales with the reference image (its original
     * pixels, where keypoints are): ransac_threshold x its longer side. */
    side = (double)(rs_size(r, 2) > rs_size(r, 3) ? rs_size(r, 2) : rs_size(r, 3));
    if (side <= 0) side = 1024;
    thr = o->ransac_threshold * side;
    /* the reference's area in the pixels its keypoints are in (a square of the side when unknown) */
    w = rs_size(r, 2) ? (double)rs_size(r, 2) : side;
    h = rs_size(r, 3) ? (double)rs_size(r, 3) : side;
    c = idf_ransac(&model, sc->inl, sc->qp, sc->rp, o->shape_check ? sc->qsh : NULL, o->shape_check ? sc->rsh : NULL,
                   nm, o->model, thr, o->iterations, seed);
    *sig = idf_significance(nm, c, o->model, w, h, thr);
    if (!o->guided || c == 0) return c;
    {
        const size_t nq = rs_count(qr), nr = rs_count(r);
        for (i = 0; i < nq; i++) keypoint(qr, i, sc->qg + 4 * i);
        for (i = 0; i < nr; i++) keypoint(r, i, sc->rg + 4 * i);
        idf_dequantise(sc->rf, r);
        ng = idf_guided(sc->gm, sc->claim, &model, sc->qg, nq, sc->rg, nr, sc->qf, sc->rf, &sc->nn, thr,
                        o->guided_ratio, o->shape_check);
    }
    fill_pairs(sc->qp2, sc->rp2, sc->qsh2, sc->rsh2, sc->gm, ng, qr, r);
    cg = idf_ransac(NULL, sc->inl2, sc->qp2, sc->rp2, o->shape_check ? sc->qsh2 : NULL,
                    o->shape_check ? sc->rsh2 : NULL, ng, o->model, thr, o->iterations, seed);
    if (cg <= c) return c;
    *sig = idf_significance(ng, cg, o->model, w, h, thr);
    SWAP_PTR(sc->qp, sc->qp2);
    SWAP_PTR(sc->rp, sc->rp2);
    SWAP_PTR(sc->qsh, sc->qsh2);
    SWAP_PTR(sc->rsh, sc->rsh2);
    SWAP_PTR(sc->inl, sc->inl2);
    *nm_out = ng;
    return cg;
}

/* An item's verification: RANSAC on each of its rows (rows [first,
 * first + per) of rs, first = its slot's item start: items are aligned to
 * per slots), its inliers the most of any row (ties: the lower row, whose
 * index goes to *row, and whose significance to *sig). One row without
 * views. */
static size_t verify_item(scratch_t *sc, const unsigned char *qr, const patina_refset_t *rs, size_t slot, uint64_t id,
                          const patina_identify_opts_t *o, const gnn_t *gn, size_t *row, double *sig)
{
    const size_t first = slot / rs->per * rs->per;
    size_t v, nm, best = 0, in;
    double sg;
    *row = first;
    *sig = 0;
    for (v = 0; v < rs->per; v++) {
        const gnn_t gv = gn ? gnn_row(gn, v) : (gnn_t){NULL, 0, 0};
        in = verify_pair(sc, qr, rs->recs + (first + v) * rs->stride, id, o, gn ? &gv : NULL, &nm, &sg);
        if (v == 0 || in > best) {
            best = in;
            *row = first + v;
            *sig = sg;
        }
    }
    return best;
}

/* The candidate of task t of a stage with `per` candidates per query
 * (query q0 + t / per, candidate t % per), with the worker's scratch in *sc
 * and, with prepare, the query prepared in it (matching from the GPU's
 * 2-NN alone does not read it); NULL when the query has no such candidate
 * or no scratch could be had (jb->nomem set). */
static cand_t *stage_cand(job_t *jb, size_t t, size_t per, int prepare, scratch_t **sc)
{
    const size_t q = jb->q0 + t / per, c = t % per;
    if (c >= jb->ncands[q]) return NULL;
    if (!(*sc = worker_scratch(jb->sn, jb->sm))) {
        atomic_store(&jb->nomem, 1);
        return NULL;
    }
    if (prepare) prepare_query(*sc, jb->queries + q * jb->qbytes);
    return &jb->cands[q * jb->ncap + c];
}

static void verify_task(void *arg, size_t t, int worker)
{
    job_t *jb = arg;
    const unsigned char *qr = jb->queries + (jb->q0 + t / jb->nverify) * jb->qbytes;
    scratch_t *sc = NULL;
    cand_t *cd = stage_cand(jb, t, jb->nverify, 1, &sc);
    size_t row;
    gnn_t gn;
    (void)worker;
    if (!cd) return;
    if (jb->gdots.dots) gn = gnn_row(&jb->gdots, jb->gat[t]);
    cd->inliers = (uint32_t)verify_item(sc, qr, jb->sets[cd->set], cd->ref, cd->id, jb->o,
                                        jb->gdots.dots ? &gn : NULL, &row, &cd->sig);
    cd->verified = 1;
}

/* The second pass's task t (query q0 + t / nview, candidate t % nview):
 * the candidate's rows v0 .. per - 1 matched with the whole query (the
 * 2-NN from the GPU when jb->gdots holds them) and the item folded into
 * its best row, as the matching folds an item whose rows it matches at
 * once (the most matches, ties the lower slot): with v0 = 1 (the view
 * pass) its first row's matches stand as the first pass gave them, with
 * v0 = 0 (first_features) they are replaced. */
static void view_task(void *arg, size_t t, int worker)
{
    job_t *jb = arg;
    const unsigned char *qr = jb->queries + (jb->q0 + t / jb->nview) * jb->qbytes;
    scratch_t *sc = NULL;
    cand_t *cd = stage_cand(jb, t, jb->nview, !jb->gdots.dots, &sc);
    const patina_refset_t *rs;
    size_t v, first;
    (void)worker;
    if (!cd) return;
    rs = jb->sets[cd->set];
    first = cd->ref / rs->per * rs->per;
    for (v = jb->v0; v < rs->per; v++) {
        const gnn_t gn = jb->gdots.dots ? gnn_row(&jb->gdots, jb->gat[t] + v - jb->v0) : (gnn_t){NULL, 0, 0};
        const size_t sco = match_pair(sc, qr, rs->recs + (first + v) * rs->stride, jb->o, jb->gdots.dots ? &gn : NULL);
        if (v == 0 || sco > cd->matches) {
            cd->matches = (uint32_t)sco;
            cd->ref = (uint32_t)(first + v);
        }
    }
}

/* A candidate's score (patina_identify_hit_t.score): the significance of
 * its inliers or their count (o->accept) when verified, else matches. */
static double cand_score(const cand_t *c, const patina_identify_opts_t *o)
{
    if (!c->verified) return (double)c->matches;
    return o->accept == PATINA_ACCEPT_INLIERS ? (double)c->inliers : c->sig;
}

/* Verified first, by inliers, then matches, then id. */
static int cmp_verified(const void *a, const void *b)
{
    const cand_t *x = a, *y = b;
    if (x->verified != y->verified) return x->verified ? -1 : 1;
    if (x->verified && x->inliers != y->inliers) return x->inliers > y->inliers ? -1 : 1;
    return cmp_matches(a, b);
}

static patina_status check_opts(const patina_identify_opts_t *o)
{
    /* bounds and choices: the table of include/patina/options.h */
    return patina__options_validate(PATINA_OPTIONS_IDENTIFY, o);
}

/* Why the GPU cannot match these queries against rs (NULL: it can, as far
 * as the data goes): the GPU kernels take u8 rows at scale 512. */
static const char *gpu_refusal(const patina_refset_t *rs, const unsigned char *queries, size_t qbytes, size_t nq,
                               size_t ncap, size_t rows)
{
    size_t q;
    if (params_of(rs)->quant != RS_QUANT_U8) return "the table's records are f16 (the GPU matches u8 records)";
    if (ncap * rows > 1024)
        return "more than 1024 candidate rows per query (k, verify_top or view_candidates, times the rows per item "
               "matched)";
    for (q = 0; q < nq; q++)
        if (!idf_exact_u8(queries + q * qbytes)) return "a query record is not u8 at scale 512";
    return NULL;
}

/* Whether a set of `per` rows per item is matched by its first rows, then
 * the view pass (opts.view_candidates with reference views). */
static int first_rows_first(size_t per, const patina_identify_opts_t *o)
{
    return per > 1 && o->view_candidates > 0;
}

/* The serial of a set's first-rows copy on a GPU (refs_view): the
 * sets' own serials count from 1 and never reach this bit. */
#define FIRST_ROWS_SERIAL (1ull << 63)
/* ... and of its half-size views' copy (opts.half_view_features) */
#define HALF_ROWS_SERIAL (1ull << 62)

/* The GPU's view of rs: every row (a slot each), or with first_only one
 * row of each item, `row` (slot j: rs's slot j per + row): 0, the first
 * rows (the registered images, opts.view_candidates), or the half-size
 * views' row (opts.half_view_features), each under a serial of its own so
 * that the device keeps a copy of those rows alone. Borrowed from rs:
 * valid while the call holds its lock. An item's rows are stamped
 * together. */
static void refs_view(const patina_refset_t *rs, int first_only, size_t row, pgpu_idf_refs_t *view)
{
    const size_t per = first_only ? rs->per : 1;
    if (!first_only) row = 0;
    memset(view, 0, sizeof *view);
    view->serial = !first_only ? rs->serial : rs->serial | (row ? HALF_ROWS_SERIAL : FIRST_ROWS_SERIAL);
    view->epoch = rs->epoch;
    view->clock = rs->clock;
    view->nslots = rs->n / per;
    view->m = (size_t)params_of(rs)->m;
    view->base = rs->recs + row * rs->stride + RS_HEADER;
    view->stride = per * rs->stride;
    view->count = rs->count + row;
    view->stamp = rs->stamp + row;
    view->step = per;
}

/* The row of the half-size view in a record of `views` views (0: none). */
static size_t half_view_row(int views)
{
    for (int v = 1; v <= views; v++)
        if (rs_view_kind(views, v) == RS_VIEW_SOFT_HALF) return (size_t)v;
    return 0;
}

/* The GPU's options for matching with o, ncap candidates per query. */
static void gpu_opts(const patina_identify_opts_t *o, size_t ncap, pgpu_idf_opts_t *go)
{
    memset(go, 0, sizeof *go);
    go->precision = o->precision == PATINA_PRECISION_FP16 ? PGPU_IDF_FP16 : PGPU_IDF_INT8;
    go->ratio = o->ratio;
    go->scoring = (int)o->scoring;
    go->ncap = ncap;
    go->arena_cap = o->gpu_arena_slots;
}

/* The GPU's keys (nq, ncap x rs->per: its best rows by matches, ties the
 * lower slot) of set `set` (rs) as its candidates: cands (nq, ncap),
 * ncands (nq). An item's first row listed is its best (the CPU's fold);
 * its others are dropped. The best ncap items' best rows are among the
 * best ncap x per rows (fewer than ncap other items rank above such a row,
 * each with at most per rows), so the folded lists are the CPU's. With
 * first_only the keys (nq, ncap) are of a one-row-per-item view: its slot
 * j is rs's slot j per + row. */
static void cands_of_keys(const patina_refset_t *rs, uint32_t set, const uint64_t *keys, size_t nq, size_t ncap,
                          int first_only, size_t row, cand_t *cands, size_t *ncands)
{
    const size_t gcap = first_only ? ncap : ncap * rs->per, mul = first_only ? rs->per : 1;
    size_t q, j, i, nc;
    for (q = 0; q < nq; q++) {
        cand_t *c = cands + q * ncap;
        for (j = 0, nc = 0; j < gcap && nc < ncap && keys[q * gcap + j]; j++) {
            const uint64_t k = keys[q * gcap + j];
            const uint32_t slot = (uint32_t)((0xffffffffu - (uint32_t)k) * mul + (first_only ? row : 0));
            for (i = 0; i < nc && c[i].id != rs->ids[slot]; i++) {}
            if (i < nc) continue; /* a worse row of an item listed */
            c[nc++] = (cand_t){rs->ids[slot], set, slot, (uint32_t)(k >> 32), 0, 0, 0};
        }
        ncands[q] = nc;
    }
}

/* One query's candidates of one set by its items' half-size views (b,
 * nb; sorted by cmp_matches) folded into those by their first rows (a,
 * *na, sorted): an item in both keeps the better row (the more matches,
 * ties the first: the lower slot), as the CPU's matching folds an item's
 * rows, and the union's best cap stay in a (cap <= the lists' room). The
 * union's best cap are among the two lists' best cap: an item above
 * another in either list is above it in the union. tmp: *na + nb. */
static void merge_half(cand_t *a, size_t *na, const cand_t *b, size_t nb, size_t cap, cand_t *tmp)
{
    size_t n = 0, i, j;
    for (i = 0; i < *na; i++) tmp[n++] = a[i];
    for (j = 0; j < nb; j++) {
        for (i = 0; i < *na && tmp[i].id != b[j].id; i++) {}
        if (i == *na) tmp[n++] = b[j];
        else if (b[j].matches > tmp[i].matches) tmp[i] = b[j];
    }
    qsort(tmp, n, sizeof *tmp, cmp_matches);
    *na = n < cap ? n : cap;
    memcpy(a, tmp, *na * sizeof *a);
}

/* Each query's row count (qc: nq), as the GPU takes them. */
static void query_counts(const unsigned char *queries, size_t qbytes, size_t nq, uint16_t *qc)
{
    for (size_t q = 0; q < nq; q++) qc[q] = (uint16_t)rs_count(queries + q * qbytes);
}

/* The rows of a pair of a job with companions: the query's first pass's
 * and its companion's, at most. */
static size_t pair_rows(const job_t *jb)
{
    const size_t n = (size_t)params_of(jb->rs)->n;
    return (jb->o->first_features < n ? jb->o->first_features : n) + (jb->comp_rows < n ? jb->comp_rows : n);
}

/* The first pass of a job with companions (idf_many_begin_half) on g:
 * query q (< nmain) and its companion nmain + q as one pair of
 * patina_gpu_identify_pair (the references read once for both), their
 * rows (cut: the first pass's) side by side; keys (nq, ncap): the queries',
 * then the companions'. qc: room for 2 nq counts. */
static patina_status match_pairs(patina_gpu_t *g, const pgpu_idf_refs_t *view, const job_t *jb, uint16_t *qc,
                                 const pgpu_idf_opts_t *go, uint64_t *keys)
{
    const size_t np = jb->nmain, n = (size_t)params_of(jb->rs)->n;
    const size_t na = jb->o->first_features < n ? jb->o->first_features : n;
    const size_t nb = jb->comp_rows < n ? jb->comp_rows : n;
    const size_t stride = (na + nb) * RS_DIM;
    uint8_t *rows = malloc(np * stride + 1);
    patina_status s;
    if (!rows) return patina__fail(PATINA_E_NOMEM, "identify: out of memory for %zu query pairs", np);
    for (size_t q = 0; q < np; q++) {
        const unsigned char *a = jb->queries + q * jb->qbytes, *b = jb->queries + (np + q) * jb->qbytes;
        const size_t ca = rs_count(a) < na ? rs_count(a) : na, cb = rs_count(b) < nb ? rs_count(b) : nb;
        memcpy(rows + q * stride, rs_row(a, 0), ca * RS_DIM);
        memcpy(rows + q * stride + ca * RS_DIM, rs_row(b, 0), cb * RS_DIM);
        qc[q] = (uint16_t)(ca + cb);
        qc[np + q] = (uint16_t)ca; /* the split */
    }
    s = patina_gpu_identify_pair(g, view, rows, stride, qc, qc + np, np, na + nb, go, keys,
                                 keys + np * go->ncap, NULL);
    free(rows);
    return s;
}

/* Step 1 on the GPU: each query's best ncap candidates in jb->rs by the
 * scoring rule, into jb->cands / jb->ncands (the CPU's candidates exactly),
 * against the set's mirror on ctx's device. */
static patina_status match_gpu(patina_context_t *ctx, job_t *jb)
{
    patina_refset_t *rs = (patina_refset_t *)jb->rs;
    const size_t rows_per = jb->first_only ? 1 : rs->per; /* rows matched per item */
    const int passes = jb->half ? 2 : 1; /* the first rows; the half-size views */
    pgpu_idf_refs_t view;
    pgpu_idf_opts_t go;
    patina_gpu_t *g = NULL;
    uint16_t *qc = malloc(2 * jb->nq * sizeof *qc);
    uint64_t *keys = malloc(jb->nq * jb->ncap * rows_per * sizeof *keys);
    cand_t *hc = jb->half ? malloc((jb->nq + 2) * jb->ncap * sizeof *hc) : NULL; /* the half views', then tmp */
    size_t *hn = jb->half ? malloc(jb->nq * sizeof *hn) : NULL;
    patina_status s = PATINA_OK;
    if (!qc || !keys || (jb->half && (!hc || !hn))) {
        free(qc);
        free(keys);
        free(hc);
        free(hn);
        return patina__fail(PATINA_E_NOMEM, "identify: out of memory for %zu queries", jb->nq);
    }
    gpu_opts(jb->o, jb->ncap * rows_per, &go); /* rows, folded into ncap items below */
    for (int pass = 0; pass < passes && s == PATINA_OK; pass++) {
        const unsigned char *qs = pass ? jb->hqueries : jb->queries;
        const size_t row = pass ? jb->half : 0;
        /* the half-size views' pass: the queries without their companions */
        const size_t nq = pass ? jb->nmain : jb->nq;
        query_counts(qs, jb->qbytes, nq, qc);
        refs_view(rs, jb->first_only, row, &view);
        s = patina__context_gpu_acquire(ctx, &g);
        if (s == PATINA_OK) {
            /* the device that mirrors the set, told once (patina__refset_gpu_forget) */
            atomic_store(&rs->gpu_ctx, (void *)ctx);
            if (pass == 0 && jb->nmain < jb->nq && pair_rows(jb) <= PGPU_IDF_NMAX)
                s = match_pairs(g, &view, jb, qc, &go, keys);
            else
                s = patina_gpu_identify(g, &view, qs + RS_HEADER, jb->qbytes, qc, nq, (size_t)params_of(rs)->n, &go,
                                        keys, NULL);
            patina__context_gpu_release(ctx);
        }
        if (s == PATINA_OK)
            cands_of_keys(rs, jb->set, keys, nq, jb->ncap, jb->first_only, row, pass ? hc : jb->cands,
                          pass ? hn : jb->ncands);
    }
    for (size_t q = 0; s == PATINA_OK && jb->half && q < jb->nmain; q++)
        merge_half(jb->cands + q * jb->ncap, &jb->ncands[q], hc + q * jb->ncap, hn[q], jb->ncap,
                   hc + jb->nq * jb->ncap);
    free(qc);
    free(keys);
    free(hc);
    free(hn);
    return s;
}

patina_status patina__refset_gpu_warm(patina_context_t *ctx, patina_refset_t *rs, const patina_identify_opts_t *o)
{
    pgpu_idf_refs_t view;
    pgpu_idf_opts_t go;
    patina_gpu_t *g = NULL;
    patina_status s;
    /* what idf_many_match does with these options: no GPU call for an empty set, the CPU for f16
     * records, a context without a usable GPU or device cpu; the first rows' copy with the view pass */
    if (!ctx || !rs || rs->alive == 0 || o->device == PATINA_DEVICE_CPU || params_of(rs)->quant != RS_QUANT_U8 ||
        !patina__context_gpu_usable(ctx))
        return PATINA_OK;
    gpu_opts(o, 1, &go);
    s = patina__context_gpu_acquire(ctx, &g);
    if (s == PATINA_OK) {
        const int first_only = first_rows_first(rs->per, o);
        const size_t half = first_only && o->half_view_features ? half_view_row(params_of(rs)->views) : 0;
        atomic_store(&rs->gpu_ctx, (void *)ctx);
        /* no query: the mirrors are built or brought up to date, nothing is matched */
        for (int pass = 0; pass < (half ? 2 : 1) && s == PATINA_OK; pass++) {
            refs_view(rs, first_only, pass ? half : 0, &view);
            s = patina_gpu_identify(g, &view, NULL, 0, NULL, 0, (size_t)params_of(rs)->n, &go, NULL, NULL);
        }
        patina__context_gpu_release(ctx);
    }
    return s;
}

void patina__refset_gpu_forget(patina_context_t *ctx, patina_refset_t *rs)
{
    patina_gpu_t *g;
    if (!ctx || !rs || atomic_load(&rs->gpu_ctx) != (void *)ctx) return;
    if (patina__context_gpu_acquire(ctx, &g) != PATINA_OK) {
        patina_clear_error();
        return;
    }
    patina_gpu_identify_forget(g, rs->serial);
    if (rs->per > 1) {
        patina_gpu_identify_forget(g, rs->serial | FIRST_ROWS_SERIAL);
        patina_gpu_identify_forget(g, rs->serial | HALF_ROWS_SERIAL);
    }
    patina__context_gpu_release(ctx);
    atomic_store(&rs->gpu_ctx, NULL);
}

/* ------------------------------------------------ several sets at once */

struct idf_many {
    patina_refset_t **sets; /* (nsets), read-locked from begin to free */
    patina_refset_t **locked; /* the sets in the order their locks were taken (address) */
    size_t nsets, nlocked;
    const unsigned char *queries;
    void *qcopy;                        /* the queries' aligned copy (patina__rows), or NULL */
    size_t qbytes, nq;
    patina_identify_opts_t o;
    size_t alive;   /* references (items) of the union */
    size_t per;     /* rows per item (one spec: every set's) */
    size_t kk;      /* hits per query at most: min(k, alive) */
    size_t nverify; /* candidates verified per query: min(verify_top, alive), 0 without verify */
    size_t ncap;    /* candidates kept per query and set: max(kk, nverify, nview) */
    size_t nview;   /* the second pass: the union's best nview items have their rows v0 .. per - 1
                     * matched again (the view pass, opts.view_candidates with views: their other rows;
                     * opts.first_features: every row, with every feature of the query); 0: none */
    size_t v0;      /* the first row the second pass matches: 1 (views only) or 0 (first_features) */
    int first_only; /* the first pass matches the items' first rows only (the view pass follows) */
    size_t half;    /* first_only with opts.half_view_features: the half-size view's row, matched in the
                     * first pass too (with hqueries); 0: none */
    const unsigned char *mqueries; /* what the first pass matches: queries, or with opts.first_features
                                    * their copies cut to the strongest first_features (mqcopy) */
    unsigned char *mqcopy;
    unsigned char *hqueries; /* half: the queries [0, nmain) cut to the strongest half_view_features */
    size_t nmain;   /* the queries with the half-size view pass: nq, or with companions
                     * (idf_many_begin_half) nq / 2, the rest their half-size queries */
    size_t comp_features; /* companions: their first pass's features (the queries' is
                           * o.first_features); 0: none */
    cand_t *cands;  /* (nsets, nq, ncap): each set's best ncap */
    size_t *ncands; /* (nsets, nq) */
    atomic_int gpu; /* some set was matched on a GPU: verification's 2-NN go there too */
};

static int cmp_set_addr(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (patina_refset_t *const *)a, y = (uintptr_t) * (patina_refset_t *const *)b;
    return x < y ? -1 : x > y;
}

void idf_many_free(idf_many_t *m)
{
    size_t i;
    if (!m) return;
    for (i = 0; i < m->nlocked; i++)
        if (!i || m->locked[i] != m->locked[i - 1]) pthread_rwlock_unlock(&m->locked[i]->lock);
    free(m->sets);
    free(m->locked);
    free(m->cands);
    free(m->ncands);
    free(m->qcopy);
    free(m->mqcopy);
    free(m->hqueries);
    free(m);
}

/* Copies of the nq records of qbytes at queries cut to their f strongest
 * features (rows are strongest first): the count set to at most f, the
 * rows and keypoints past it zeroed (a record's padding); the records from
 * n1 on to their f2 strongest. NULL when out of memory. */
static unsigned char *queries_cut(const unsigned char *queries, size_t nq, size_t qbytes, size_t f, size_t n1,
                                  size_t f2)
{
    unsigned char *out = malloc(nq * qbytes + 1); /* malloc's alignment holds the rows' (4) */
    size_t q;
    if (!out) return NULL;
    for (q = 0; q < nq; q++) {
        unsigned char *r = out + q * qbytes;
        const size_t n = rs_count(queries + q * qbytes);
        if (q == n1) f = f2; /* the companions' */
        const size_t row = RS_DIM * rs_elem_bytes(rs_quant(queries + q * qbytes)), geom = 4 * sizeof(float);
        memcpy(r, queries + q * qbytes, qbytes);
        if (n <= f) continue;
        rs_put_u32(r, (uint32_t)f);
        memset(r + (rs_row(r, f) - r), 0, (n - f) * row);
        memset(r + (rs_geometry(r) - r) + f * geom, 0, (n - f) * geom);
    }
    return out;
}

static patina_status many_begin(idf_many_t **out, patina_refset_t *const *sets, size_t nsets, const void *queries,
                                size_t nq, const patina_identify_opts_t *opts, size_t comp_features);

patina_status idf_many_begin(idf_many_t **out, patina_refset_t *const *sets, size_t nsets, const void *queries,
                             size_t nq, const patina_identify_opts_t *opts)
{
    return many_begin(out, sets, nsets, queries, nq, opts, 0);
}

patina_status idf_many_begin_half(idf_many_t **out, patina_refset_t *const *sets, size_t nsets, const void *queries,
                                  size_t nq, const patina_identify_opts_t *opts, size_t half_features)
{
    *out = NULL;
    if (nq % 2) return patina__fail(PATINA_E_INVALID, "identify: %zu queries are not pairs", nq);
    if (!opts || opts->first_features == 0 || half_features == 0)
        return patina__fail(PATINA_E_INVALID, "identify: pairs need first_features and half_features (%zu, %zu)",
                            opts ? opts->first_features : 0, half_features);
    return many_begin(out, sets, nsets, queries, nq, opts, half_features);
}

static patina_status many_begin(idf_many_t **out, patina_refset_t *const *sets, size_t nsets, const void *queries,
                                size_t nq, const patina_identify_opts_t *opts, size_t comp_features)
{
    idf_many_t *m;
    size_t i, q;
    *out = NULL;
    if (!sets || nsets == 0) return patina__fail(PATINA_E_INVALID, "identify: no reference set");
    if (nq && !queries) return patina__fail(PATINA_E_INVALID, "identify: null argument");
    if (nsets > UINT32_MAX) return patina__fail(PATINA_E_LIMIT, "identify: %zu reference sets in one call", nsets);
    for (i = 0; i < nsets; i++) {
        if (!sets[i]) return patina__fail(PATINA_E_INVALID, "identify: reference set %zu is null", i);
        if (strcmp(patina_refset_table(sets[i]), patina_refset_table(sets[0])))
            return patina__fail(PATINA_E_INVALID, "identify: reference set %zu holds '%s', set 0 '%s' (one spec per call)",
                                i, patina_refset_table(sets[i]), patina_refset_table(sets[0]));
    }
    if (!(m = calloc(1, sizeof *m))) return patina__fail(PATINA_E_NOMEM, "identify: out of memory");
    if (opts) m->o = *opts;
    else patina_identify_opts_init(&m->o);
    m->sets = malloc(nsets * sizeof *m->sets);
    m->locked = malloc(nsets * sizeof *m->locked);
    if (!m->sets || !m->locked) {
        idf_many_free(m);
        return patina__fail(PATINA_E_NOMEM, "identify: out of memory");
    }
    memcpy(m->sets, sets, nsets * sizeof *sets);
    memcpy(m->locked, sets, nsets * sizeof *sets);
    qsort(m->locked, nsets, sizeof *m->locked, cmp_set_addr); /* one lock order: no deadlock between callers */
    for (i = 0; i < nsets; i++) {
        if (!i || m->locked[i] != m->locked[i - 1]) pthread_rwlock_rdlock(&m->locked[i]->lock);
        m->nlocked = i + 1;
    }
    m->nsets = nsets;
    m->nq = nq;
    m->nmain = comp_features ? nq / 2 : nq;
    m->comp_features = comp_features;
    m->qbytes = patina_identify_query_bytes(sets[0]);
    {
        patina_status s = patina__rows(&queries, nq, m->qbytes, PATINA_ROW_ALIGN(4), &m->qcopy, "identify: queries");
        m->queries = queries;
        if (s == PATINA_OK) s = check_opts(&m->o);
        for (q = 0; s == PATINA_OK && q < nq; q++) {
            char what[48];
            snprintf(what, sizeof what, "identify: query %zu", q);
            s = rs_record_check(m->queries + q * m->qbytes, m->qbytes, what);
        }
        /* the default threshold: the sets' own calibration (their spec's reference views) */
        if (s == PATINA_OK && m->o.threshold == PATINA_THRESHOLD_CALIBRATED)
            s = far_lookup(params_of(sets[0])->views, m->o.accept, pass_mode(params_of(sets[0])->views, &m->o),
                           PATINA_FAR_DEFAULT,
                           &m->o.threshold);
        if (s == PATINA_OK && nq && m->o.k > SIZE_MAX / nq / sizeof(patina_identify_hit_t))
            s = patina__fail(PATINA_E_LIMIT, "identify: k = %zu is too large for %zu queries", m->o.k, nq);
        for (i = 0; s == PATINA_OK && i < nsets; i++) {
            if (sets[i]->n > UINT32_MAX)
                s = patina__fail(PATINA_E_LIMIT, "identify: %zu references is too many for one set (shard it)",
                                 sets[i]->n);
            m->alive += sets[i]->alive / sets[i]->per;
        }
        if (s != PATINA_OK) {
            idf_many_free(m);
            return s;
        }
    }
    m->per = sets[0]->per;
    m->kk = m->o.k < m->alive ? m->o.k : m->alive; /* k beyond the references is clamped */
    m->nverify = m->o.verify ? (m->o.verify_top < m->alive ? m->o.verify_top : m->alive) : 0;
    m->ncap = m->kk > m->nverify ? m->kk : m->nverify;
    m->mqueries = m->queries;
    m->v0 = 1;
    if ((m->first_only = first_rows_first(m->per, &m->o))) {
        m->nview = m->o.view_candidates < m->alive ? m->o.view_candidates : m->alive;
        if (m->nview > m->ncap) m->ncap = m->nview;
    }
    if (m->o.first_features > 0) { /* every candidate matched again, every row, every feature */
        if (m->o.view_candidates > m->ncap)
            m->ncap = m->o.view_candidates < m->alive ? m->o.view_candidates : m->alive;
        m->nview = m->ncap;
        m->v0 = 0;
        if (nq && !(m->mqueries = m->mqcopy = queries_cut(m->queries, nq, m->qbytes, m->o.first_features, m->nmain,
                                                           m->comp_features))) {
            idf_many_free(m);
            return patina__fail(PATINA_E_NOMEM, "identify: out of memory for %zu queries", nq);
        }
    }
    if (m->o.half_view_features > 0) { /* the half-size view in the first pass */
        const int views = params_of(sets[0])->views;
        const size_t half = half_view_row(views);
        if (!half) {
            idf_many_free(m);
            return patina__fail(PATINA_E_INVALID,
                                "identify: half_view_features needs references with a half-size view (index "
                                "--views 1 or 3); these have views = %d",
                                views);
        }
        if (m->first_only) {
            m->half = half;
            if (m->nmain && !(m->hqueries = queries_cut(m->queries, m->nmain, m->qbytes, m->o.half_view_features,
                                                        m->nmain, 0))) {
                idf_many_free(m);
                return patina__fail(PATINA_E_NOMEM, "identify: out of memory for %zu queries", nq);
            }
        }
    }
    if (nq && m->ncap) {
        if (nq > SIZE_MAX / nsets / (m->ncap * sizeof *m->cands + sizeof *m->ncands)) {
            idf_many_free(m);
            return patina__fail(PATINA_E_LIMIT, "identify: %zu queries x k = %zu is too many for one call", nq, m->o.k);
        }
        m->cands = malloc(nsets * nq * m->ncap * sizeof *m->cands);
        m->ncands = calloc(nsets * nq, sizeof *m->ncands);
        if (!m->cands || !m->ncands) {
            idf_many_free(m);
            return patina__fail(PATINA_E_NOMEM, "identify: out of memory for %zu queries x %zu candidates", nq,
                                m->ncap);
        }
    }
    *out = m;
    return PATINA_OK;
}

/* Whether set rs of m is matched on ctx's GPU (*use_gpu), by the
 * options' device policy: the GPU when asked, or when usable (auto) and
 * the data is what its kernels take; the CPU otherwise. Both give the same
 * candidates. An error when the GPU is asked for and cannot. */
static patina_status matching_device(const idf_many_t *m, const patina_refset_t *rs, patina_context_t *ctx,
                                     int *use_gpu)
{
    *use_gpu = 0;
    if (m->o.device != PATINA_DEVICE_CPU) {
        const char *why = gpu_refusal(rs, m->queries, m->qbytes, m->nq, m->ncap, m->first_only ? 1 : rs->per);
        if (m->o.device == PATINA_DEVICE_GPU) {
            if (!ctx) return patina__fail(PATINA_E_INVALID, "identify: device gpu needs a context");
            if (why) return patina__fail(PATINA_E_UNAVAILABLE, "identify: no GPU matching: %s", why);
            *use_gpu = 1;
        } else {
            *use_gpu = ctx && !why && patina__context_gpu_usable(ctx);
        }
    }
    return PATINA_OK;
}

/* Whether set `set` of m can give no candidate (nothing to match). */
static int nothing_to_match(const idf_many_t *m, size_t set)
{
    return m->nq == 0 || m->ncap == 0 || m->sets[set]->alive == 0;
}

/* The matching job of set `set` of m (its candidates' place in m's lists);
 * the blocks, the scratch and the task lists are the caller's. */
static void job_of(idf_many_t *m, size_t set, job_t *jb)
{
    memset(jb, 0, sizeof *jb);
    jb->sets = m->sets;
    jb->rs = m->sets[set];
    jb->set = (uint32_t)set;
    jb->queries = m->mqueries;
    jb->qbytes = m->qbytes;
    jb->nq = m->nq;
    jb->o = &m->o;
    jb->ncap = m->ncap;
    jb->cands = m->cands + set * m->nq * m->ncap;
    jb->ncands = m->ncands + set * m->nq;
    jb->first_only = m->first_only;
    jb->half = m->half;
    jb->hqueries = m->hqueries;
    jb->pqueries = m->queries;
    jb->nmain = m->nmain;
    jb->comp_rows = m->comp_features;
}

/* Several sets' matching tasks as one pool run: task t belongs to job j
 * with first[j] <= t < first[j + 1]. */
typedef struct jobs {
    job_t *jb;
    size_t nj;
    size_t *first; /* (nj + 1) */
} jobs_t;

static void match_task_of(void *arg, size_t t, int worker)
{
    const jobs_t *js = arg;
    size_t lo = 0, hi = js->nj; /* the last job whose first task is <= t */
    while (hi - lo > 1) {
        const size_t mid = (lo + hi) / 2;
        if (js->first[mid] <= t) lo = mid;
        else hi = mid;
    }
    match_task(&js->jb[lo], t - js->first[lo], worker);
}

/* Sets which[0, nw) of m matched on ctx's workers, all their tasks in one
 * pool run: a call over many small sets (a shard's partitions) keeps every
 * worker busy, where one set after another would give each set's few
 * blocks to a few of them. A set's blocks are at least REF_BLOCK
 * references, sized on the sets' total so that the call makes about 4
 * tasks per worker and query, as one set of that size would. */
static patina_status match_cpu(idf_many_t *m, const uint32_t *which, size_t nw, patina_context_t *ctx)
{
    const size_t nworkers = (size_t)worker_count(ctx);
    jobs_t js;
    size_t j, q, total = 0, ntasks = 0, block;
    patina_status s = PATINA_OK;
    memset(&js, 0, sizeof js);
    if (nw == 0) return PATINA_OK;
    for (j = 0; j < nw; j++) total += m->sets[which[j]]->n;
    block = (total + 4 * nworkers - 1) / (4 * nworkers);
    if (block < REF_BLOCK) block = REF_BLOCK;
    js.jb = calloc(nw, sizeof *js.jb);
    js.first = calloc(nw + 1, sizeof *js.first);
    if (!js.jb || !js.first) s = patina__fail(PATINA_E_NOMEM, "identify: out of memory for %zu sets", nw);
    for (j = 0; s == PATINA_OK && j < nw; j++) {
        job_t *jb = &js.jb[j];
        job_of(m, which[j], jb);
        jb->sn = (size_t)params_of(m->sets[0])->n;
        jb->sm = (size_t)params_of(m->sets[0])->m;
        jb->block = (block + jb->rs->per - 1) / jb->rs->per * jb->rs->per; /* whole items */
        jb->nblocks = (jb->rs->n + jb->block - 1) / jb->block;
        if (m->nq > SIZE_MAX / jb->nblocks / (jb->ncap * sizeof *jb->tcands + sizeof *jb->ntcands)) {
            s = patina__fail(PATINA_E_LIMIT, "identify: %zu queries x k = %zu is too many for one call", m->nq,
                             m->o.k);
            break;
        }
        jb->tcands = malloc(m->nq * jb->nblocks * jb->ncap * sizeof *jb->tcands);
        jb->ntcands = calloc(m->nq * jb->nblocks, sizeof *jb->ntcands);
        if (!jb->tcands || !jb->ntcands)
            s = patina__fail(PATINA_E_NOMEM, "identify: out of memory for %zu queries x %zu candidates", m->nq,
                             jb->ncap);
        js.first[j] = ntasks;
        ntasks += m->nq * jb->nblocks;
    }
    js.first[nw] = ntasks;
    js.nj = nw;
    /* 1. Every (query, reference) of every set scored; each task keeps its best ncap. */
    if (s == PATINA_OK) s = run_tasks(ctx, ntasks, match_task_of, &js);
    for (j = 0; s == PATINA_OK && j < nw; j++)
        if (atomic_load(&js.jb[j].nomem)) s = patina__fail(PATINA_E_NOMEM, "identify: out of memory for worker scratch");
    /* 2. A query's candidates in a set: the best ncap of its tasks' lists. */
    for (j = 0; s == PATINA_OK && j < nw; j++) {
        job_t *jb = &js.jb[j];
        for (q = 0; q < m->nq; q++) {
            cand_t *c = jb->cands + q * jb->ncap;
            size_t b, e, nc = 0;
            for (b = 0; b < jb->nblocks; b++) {
                const size_t t = q * jb->nblocks + b;
                for (e = 0; e < jb->ntcands[t]; e++) top_insert(c, &nc, jb->ncap, jb->tcands[t * jb->ncap + e]);
            }
            jb->ncands[q] = nc;
        }
    }
    for (j = 0; js.jb && j < nw; j++) {
        free(js.jb[j].tcands);
        free(js.jb[j].ntcands);
    }
    free(js.jb);
    free(js.first);
    return s;
}

patina_status idf_many_match(idf_many_t *m, size_t set, patina_context_t *ctx)
{
    job_t jb;
    int use_gpu = 0;
    uint32_t one;
    if (!m || set >= m->nsets) return patina__fail(PATINA_E_INVALID, "identify: no reference set %zu", set);
    if (nothing_to_match(m, set)) return PATINA_OK; /* no candidate from it */
    PATINA_TRY(matching_device(m, m->sets[set], ctx, &use_gpu));
    if (!use_gpu) {
        one = (uint32_t)set;
        return match_cpu(m, &one, 1, ctx);
    }
    /* On the GPU: the best ncap of each query directly. */
    job_of(m, set, &jb);
    atomic_store(&m->gpu, 1);
    return match_gpu(ctx, &jb);
}

patina_status idf_many_match_sets(idf_many_t *m, size_t set0, size_t nsets, patina_context_t *ctx)
{
    pgpu_idf_refs_t *views = NULL;
    const size_t rows_per = m->first_only ? 1 : m->per; /* rows matched per item */
    uint32_t *which = NULL; /* (nsets) the sets the GPU matches */
    uint32_t *oncpu = NULL; /* (nsets) the sets the workers match */
    size_t nc = 0;
    uint16_t *qc = NULL;
    uint64_t *keys = NULL;
    cand_t *hc = NULL; /* m->half: one set's candidates by the half-size views, then the merge's room */
    size_t *hn = NULL;
    size_t i, ng = 0;
    patina_gpu_t *g = NULL;
    pgpu_idf_opts_t go;
    patina_status s = PATINA_OK;
    if (!m || set0 > m->nsets || nsets > m->nsets - set0)
        return patina__fail(PATINA_E_INVALID, "identify: no reference sets %zu .. %zu of %zu", set0, set0 + nsets,
                            m ? m->nsets : 0);
    which = malloc((nsets + 1) * sizeof *which);
    oncpu = calloc(nsets + 1, sizeof *oncpu);
    if (!which || !oncpu) {
        free(which);
        free(oncpu);
        return patina__fail(PATINA_E_NOMEM, "identify: out of memory for %zu sets", nsets);
    }
    /* the sets with something to match on the GPU; the others on the CPU now, in one pool run */
    for (i = set0; i < set0 + nsets && s == PATINA_OK; i++) {
        int use_gpu;
        if (nothing_to_match(m, i)) continue;
        if ((s = matching_device(m, m->sets[i], ctx, &use_gpu)) != PATINA_OK) break;
        if (use_gpu) {
            which[ng++] = (uint32_t)i;
        } else {
            oncpu[nc++] = (uint32_t)i;
        }
    }
    if (s == PATINA_OK) s = match_cpu(m, oncpu, nc, ctx);
    free(oncpu);
    if (s != PATINA_OK || ng == 0) {
        free(which);
        return s;
    }
    if (ng == 1) { /* one set: the single call */
        s = idf_many_match(m, which[0], ctx);
        free(which);
        return s;
    }
    views = malloc(ng * sizeof *views);
    qc = malloc(m->nq * sizeof *qc);
    if (views && qc && m->nq * m->ncap * rows_per <= SIZE_MAX / ng / sizeof *keys)
        keys = malloc(ng * m->nq * m->ncap * rows_per * sizeof *keys);
    if (m->half && keys) { /* the half views' lists of one set, then the merge's room */
        hc = malloc((m->nq + 2) * m->ncap * sizeof *hc);
        hn = malloc(m->nq * sizeof *hn);
    }
    if (!views || !qc || !keys || (m->half && (!hc || !hn))) {
        s = patina__fail(PATINA_E_NOMEM, "identify: out of memory for %zu sets x %zu queries", ng, m->nq);
        goto out;
    }
    gpu_opts(&m->o, m->ncap * rows_per, &go); /* rows, folded into ncap items by cands_of_keys */
    /* pass 0: every row, or the first rows; pass 1 (m->half): the half-size views, merged into those */
    for (int pass = 0; pass < (m->half ? 2 : 1) && s == PATINA_OK; pass++) {
        const unsigned char *qs = pass ? m->hqueries : m->mqueries;
        const size_t row = pass ? m->half : 0;
        const size_t nq = pass ? m->nmain : m->nq; /* the half-size views' pass: no companion */
        query_counts(qs, m->qbytes, nq, qc);
        for (i = 0; i < ng; i++) refs_view(m->sets[which[i]], m->first_only, row, &views[i]);
        if ((s = patina__context_gpu_acquire(ctx, &g)) != PATINA_OK) goto out;
        for (i = 0; i < ng; i++) atomic_store(&m->sets[which[i]]->gpu_ctx, (void *)ctx); /* as match_gpu */
        s = patina_gpu_identify_many(g, views, ng, qs + RS_HEADER, m->qbytes, qc, nq,
                                     (size_t)params_of(m->sets[0])->n, &go, keys, NULL);
        patina__context_gpu_release(ctx);
        atomic_store(&m->gpu, 1);
        for (i = 0; s == PATINA_OK && i < ng; i++) {
            cand_t *c = m->cands + (size_t)which[i] * m->nq * m->ncap;
            size_t *cn = m->ncands + (size_t)which[i] * m->nq;
            cands_of_keys(m->sets[which[i]], which[i], keys + i * nq * m->ncap * rows_per, nq, m->ncap,
                          m->first_only, row, pass ? hc : c, pass ? hn : cn);
            for (size_t q = 0; pass && q < nq; q++)
                merge_half(c + q * m->ncap, &cn[q], hc + q * m->ncap, hn[q], m->ncap, hc + m->nq * m->ncap);
        }
    }
out:
    free(views);
    free(which);
    free(qc);
    free(keys);
    free(hc);
    free(hn);
    return s;
}

/* The sibling check (opts.distinct): the larger inlier count of reference
 * a's image record (its item's first row) verified against b's rows and
 * b's against a's, with o's matching and verification options; the seed
 * follows the reference verified against, as always. sc holds m rows as
 * the query (sibling_scratch). Stops early once a direction reaches
 * `enough` (0: never). */
static size_t sibling_inliers(scratch_t *sc, const patina_refset_t *ra, size_t slot_a, uint64_t id_a,
                              const patina_refset_t *rb, size_t slot_b, uint64_t id_b, const patina_identify_opts_t *o,
                              double enough)
{
    size_t best = 0, row, in;
    double sig;
    for (int dir = 0; dir < 2; dir++) {
        const patina_refset_t *rx = dir ? rb : ra, *ry = dir ? ra : rb;
        const size_t sx = dir ? slot_b : slot_a, sy = dir ? slot_a : slot_b;
        const unsigned char *rec = rx->recs + sx / rx->per * rx->per * rx->stride;
        prepare_query(sc, rec);
        in = verify_item(sc, rec, ry, sy, dir ? id_a : id_b, o, NULL, &row, &sig);
        if (in > best) best = in;
        if (enough > 0 && (double)best >= enough) break;
    }
    return best;
}

/* The calling thread's scratch for the sibling check: a reference record
 * as the query. NULL when out of memory. */
static scratch_t *sibling_scratch(const patina_refset_t *rs)
{
    const size_t rows = (size_t)params_of(rs)->m, n = (size_t)params_of(rs)->n;
    return worker_scratch(rows > n ? rows : n, rows);
}

/* idf_distinct's question for one query of idf_many_finish: are its ranked
 * candidates c[0] and c[1] siblings? */
typedef struct {
    const idf_many_t *m;
    const cand_t *c;
} sib_ask_t;

static patina_status sib_ask(void *user, size_t *inliers)
{
    sib_ask_t *a = user;
    const cand_t *x = &a->c[0], *y = &a->c[1];
    scratch_t *sc = sibling_scratch(a->m->sets[0]);
    if (!sc) return patina__fail(PATINA_E_NOMEM, "identify: out of memory for the sibling check");
    *inliers = sibling_inliers(sc, a->m->sets[x->set], x->ref, x->id, a->m->sets[y->set], y->ref, y->id, &a->m->o,
                               a->m->o.sibling_inliers);
    return PATINA_OK;
}

patina_status patina_identify_siblings(patina_refset_t *rs, uint64_t a, uint64_t b, const patina_identify_opts_t *opts,
                                       size_t *inliers)
{
    patina_identify_opts_t o;
    scratch_t *sc;
    size_t sa, sb;
    int fa, fb;
    patina_status s = PATINA_OK;
    if (!rs || !inliers) return patina__fail(PATINA_E_INVALID, "identify siblings: null argument");
    *inliers = 0;
    if (opts) o = *opts;
    else patina_identify_opts_init(&o);
    PATINA_TRY(check_opts(&o));
    if (!(sc = sibling_scratch(rs))) return patina__fail(PATINA_E_NOMEM, "identify siblings: out of memory");
    pthread_rwlock_rdlock(&rs->lock);
    sa = find_slot(rs, a, &fa);
    sb = find_slot(rs, b, &fb);
    if (!fa || !fb || rs->dead[sa] || rs->dead[sb])
        s = patina__fail(PATINA_E_NOTFOUND, "identify siblings: reference %llu is not in the set",
                         (unsigned long long)(!fa || rs->dead[sa] ? a : b));
    else
        *inliers = sibling_inliers(sc, rs, sa, a, rs, sb, b, &o, 0);
    pthread_rwlock_unlock(&rs->lock);
    return s;
}

/* Queries verified (or view-passed) per round (the GPU's 2-NN of their
 * candidates: up to VERIFY_QUERIES x verify_top (view_candidates) x rows
 * per item pairs of (3 n + 2 m) int32 each). */
#define VERIFY_QUERIES 16

/* The 2-NN dots of the tasks of queries [jb->q0, jb->q0 + qn) (task t:
 * query q0 + t / nv, candidate t % nv; one pair per row v0 .. per - 1 of
 * the candidate's item: every row to verify it, v0 = 0; its views in the
 * view pass, v0 = 1) on ctx's GPU, into *dots (grown here; the caller
 * frees it) with task t's first pair at (*at)[t]; sets jb->gdots and gat.
 * PATINA_E_UNAVAILABLE when a record is not u8 at scale 512 or the GPU
 * cannot be had (the caller matches on the CPU instead). */
static patina_status gpu_pair_dots(const idf_many_t *m, job_t *jb, patina_context_t *ctx, size_t qn, size_t nv,
                                   size_t v0, int32_t **dots, size_t **at)
{
    const size_t per = m->per, N = (size_t)params_of(m->sets[0])->n,
                 M = (size_t)params_of(m->sets[0])->m, stride = 3 * N + 2 * M;
    const unsigned char *qs = m->queries + jb->q0 * m->qbytes;
    size_t np = 0, t, v, cap = qn * nv * per;
    uint32_t *pq = malloc((cap + 1) * sizeof *pq);
    const uint8_t **rows = malloc((cap + 1) * sizeof *rows);
    uint16_t *nr = malloc((cap + 1) * sizeof *nr), *qc = malloc((qn + 1) * sizeof *qc);
    size_t *nat = realloc(*at, (qn * nv + 1) * sizeof **at);
    int32_t *nd = NULL;
    patina_gpu_t *g;
    patina_status s = PATINA_OK;
    if (nat) *at = nat;
    if (!pq || !rows || !nr || !qc || !nat) {
        s = patina__fail(PATINA_E_NOMEM, "identify: out of memory for %zu verification pairs", cap);
        goto out;
    }
    for (t = 0; t < qn; t++) {
        if (!idf_exact_u8(qs + t * m->qbytes)) {
            s = patina__fail(PATINA_E_UNAVAILABLE, "identify: query %zu is not u8 at scale 512", jb->q0 + t);
            goto out;
        }
    }
    query_counts(qs, m->qbytes, qn, qc);
    for (t = 0; t < qn * nv; t++) {
        const size_t q = jb->q0 + t / nv, c = t % nv;
        const cand_t *cd;
        const patina_refset_t *rs;
        size_t first;
        nat[t] = np;
        if (c >= jb->ncands[q]) continue;
        cd = &jb->cands[q * jb->ncap + c];
        rs = m->sets[cd->set];
        first = cd->ref / rs->per * rs->per;
        for (v = v0; v < rs->per; v++) {
            const unsigned char *rec = rs->recs + (first + v) * rs->stride;
            if (!idf_exact_u8(rec)) {
                s = patina__fail(PATINA_E_UNAVAILABLE, "identify: reference %llu is not u8 at scale 512",
                                 (unsigned long long)cd->id);
                goto out;
            }
            pq[np] = (uint32_t)(t / nv);
            rows[np] = rs_row(rec, 0);
            nr[np++] = (uint16_t)rs_count(rec);
        }
    }
    if (np && !(nd = realloc(*dots, np * stride * sizeof *nd))) {
        s = patina__fail(PATINA_E_NOMEM, "identify: out of memory for %zu verification pairs", np);
        goto out;
    }
    if (nd) *dots = nd;
    if (np) {
        if ((s = patina__context_gpu_acquire(ctx, &g)) != PATINA_OK) goto out;
        s = patina_gpu_identify_nn(g, qs + RS_HEADER, m->qbytes, qc, qn, N, pq, rows, nr, np, M, *dots);
        patina__context_gpu_release(ctx);
    }
    if (s == PATINA_OK) {
        jb->gdots = (gnn_t){np ? *dots : NULL, N, M};
        jb->gat = nat;
    }
out:
    free(pq);
    free(rows);
    free(nr);
    free(qc);
    return s;
}

/* Runs a per-candidate stage: `task` over nv candidates of every query,
 * `chunk` queries a round. When the matching ran on a GPU, each round's
 * 2-NN of the candidates' rows v0 .. per - 1 come from there first
 * (gpu_pair_dots): the integers the CPU's matcher computes, so the same
 * matches and inliers, without matching each candidate again on the
 * workers (who do, when the GPU cannot). */
static patina_status pair_rounds(const idf_many_t *m, job_t *jb, patina_context_t *ctx, size_t chunk, size_t nv,
                                 size_t v0, patina_task_fn task)
{
    int use_gpu = ctx && atomic_load(&m->gpu);
    int32_t *dots = NULL;
    size_t *at = NULL, q0;
    patina_status s = PATINA_OK;
    jb->sn = (size_t)params_of(m->sets[0])->n;
    jb->sm = (size_t)params_of(m->sets[0])->m;
    for (q0 = 0; s == PATINA_OK && q0 < m->nq; q0 += chunk) {
        const size_t qn = m->nq - q0 < chunk ? m->nq - q0 : chunk;
        jb->q0 = q0;
        jb->gdots.dots = NULL;
        if (use_gpu) {
            s = gpu_pair_dots(m, jb, ctx, qn, nv, v0, &dots, &at);
            if (s == PATINA_E_UNAVAILABLE || s == PATINA_E_LIMIT) { /* the workers give the same matches */
                patina_clear_error();
                s = PATINA_OK;
                use_gpu = 0;
            }
        }
        if (s == PATINA_OK) s = run_tasks(ctx, qn * nv, task, jb);
        if (s == PATINA_OK && atomic_load(&jb->nomem))
            s = patina__fail(PATINA_E_NOMEM, "identify: out of memory for worker scratch");
    }
    free(dots);
    free(at);
    jb->gdots.dots = NULL;
    jb->gat = NULL;
    return s;
}

/* Pairs of (query, row) whose 2-NN one round of the view pass asks of the
 * GPU, at most (about 50 MB of dots at the default shapes). */
#define VIEW_PAIRS 4096

/* The second pass (m->nview): the best nview of each query's candidates
 * jb holds (by the first pass) get their rows m->v0 .. per - 1 matched
 * with the whole query -- the view pass: their other rows; first_features:
 * every row -- and each query's list is ordered again by matches. */
static patina_status view_pass(const idf_many_t *m, job_t *jb, patina_context_t *ctx)
{
    size_t q, chunk = VIEW_PAIRS / (m->nview * (m->per - m->v0));
    patina_status s;
    if (chunk < 1) chunk = 1;
    if (chunk > VERIFY_QUERIES) chunk = VERIFY_QUERIES;
    jb->nview = m->nview;
    jb->v0 = m->v0;
    s = pair_rounds(m, jb, ctx, chunk, m->nview, m->v0, view_task);
    for (q = 0; s == PATINA_OK && q < m->nq; q++) qsort(jb->cands + q * m->ncap, jb->ncands[q], sizeof *jb->cands, cmp_matches);
    return s;
}

patina_status idf_many_finish(idf_many_t *m, patina_context_t *ctx, patina_identify_hit_t *hits,
                              patina_identify_result_t *results, uint32_t *hit_set)
{
    job_t jb;
    size_t q, i;
    const size_t k = m->o.k;
    patina_status s = PATINA_OK;
    if (m->nq && (!hits || !results)) return patina__fail(PATINA_E_INVALID, "identify: null argument");
    if (m->nq == 0) return PATINA_OK;
    memset(hits, 0, m->nq * k * sizeof *hits);
    if (hit_set) memset(hit_set, 0, m->nq * k * sizeof *hit_set);
    for (q = 0; q < m->nq; q++) {
        results[q].decision = PATINA_DECISION_UNKNOWN;
        results[q].nhits = 0;
        results[q].query_features = rs_count(m->queries + q * m->qbytes);
    }
    if (m->alive == 0 || m->ncap == 0) return PATINA_OK;
    memset(&jb, 0, sizeof jb);
    jb.sets = m->sets;
    jb.queries = m->queries;
    jb.qbytes = m->qbytes;
    jb.nq = m->nq;
    jb.o = &m->o;
    jb.ncap = m->ncap;
    jb.nverify = m->nverify;
    /* 2'. The union's candidates: the best ncap of the sets' lists (each set
     * kept its best ncap, so the union's best ncap are among them). With
     * one set they are its lists as they are. */
    if (m->nsets == 1) {
        jb.cands = m->cands;
        jb.ncands = m->ncands;
    } else {
        jb.cands = malloc(m->nq * m->ncap * sizeof *jb.cands);
        jb.ncands = calloc(m->nq, sizeof *jb.ncands);
        if (!jb.cands || !jb.ncands) {
            s = patina__fail(PATINA_E_NOMEM, "identify: out of memory for %zu queries x %zu candidates", m->nq,
                             m->ncap);
            goto out;
        }
        for (q = 0; q < m->nq; q++) {
            cand_t *c = jb.cands + q * m->ncap;
            size_t set, j, nc = 0;
            for (set = 0; set < m->nsets; set++) {
                const cand_t *src = m->cands + (set * m->nq + q) * m->ncap;
                const size_t ns = m->ncands[set * m->nq + q];
                for (j = 0; j < ns; j++) top_insert(c, &nc, m->ncap, src[j]);
            }
            jb.ncands[q] = nc;
        }
    }
    /* 2''. The second pass: the other rows of the best nview by first rows
     * (the view pass), or every row of them with every feature (first_features). */
    if (m->nview && (s = view_pass(m, &jb, ctx)) != PATINA_OK) goto out;
    /* 3. RANSAC on the top nverify of each query, VERIFY_QUERIES queries
     * at a time (the 2-NN from the GPU when matching ran there). */
    if (jb.nverify && (s = pair_rounds(m, &jb, ctx, VERIFY_QUERIES, jb.nverify, 0, verify_task)) != PATINA_OK)
        goto out;
    /* 4. Re-rank, write hits, decide. */
    for (q = 0; q < m->nq; q++) {
        cand_t *c = jb.cands + q * m->ncap;
        size_t nc = jb.ncands[q], nh = nc < m->kk ? nc : m->kk;
        qsort(c, nc, sizeof *c, cmp_verified);
        for (i = 0; i < nh; i++) {
            patina_identify_hit_t *h = &hits[q * k + i];
            h->id = c[i].id;
            h->matches = c[i].matches;
            h->inliers = c[i].inliers;
            h->verified = c[i].verified;
            h->score = cand_score(&c[i], &m->o);
            if (hit_set) hit_set[q * k + i] = c[i].set;
        }
        results[q].nhits = nh;
        results[q].threshold = m->o.threshold;
        results[q].decision = idf_decide(nh ? hits[q * k].score : 0, nc > 1 && c[1].verified ? cand_score(&c[1], &m->o) : -1,
                                         nh, &m->o);
        if (m->o.distinct > 0 && nh) { /* the margin counts inliers */
            sib_ask_t ask = {m, c};
            s = idf_distinct(&results[q].decision, c[0].verified ? (double)c[0].inliers : (double)c[0].matches,
                             nc > 1 && c[1].verified ? (double)c[1].inliers : 0, &m->o, sib_ask, &ask);
            if (s != PATINA_OK) break;
        }
    }
out:
    if (jb.cands != m->cands) {
        free(jb.cands);
        free(jb.ncands);
    }
    return s;
}

patina_status patina_identify(patina_context_t *ctx, patina_refset_t *rs, const void *queries, size_t nq,
                              const patina_identify_opts_t *opts, patina_identify_hit_t *hits,
                              patina_identify_result_t *results)
{
    idf_many_t *m = NULL;
    patina_status s;
    if (!rs || (nq && (!queries || !hits || !results))) return patina__fail(PATINA_E_INVALID, "identify: null argument");
    PATINA_TRY(idf_many_begin(&m, &rs, 1, queries, nq, opts));
    s = idf_many_match(m, 0, ctx);
    if (s == PATINA_OK) s = idf_many_finish(m, ctx, hits, results, NULL);
    idf_many_free(m);
    return s;
}

patina_status idf_half_prepare(const char *table, const patina_identify_opts_t *opts, size_t half_features,
                               double margin, patina_identify_opts_t *o, patina_identify_opts_t *ho)
{
    if (!(margin >= 0)) return patina__fail(PATINA_E_INVALID, "identify: half-size query margin %g (>= 0)", margin);
    /* its first pass's features: first_features' bounds */
    if (patina_options_check(PATINA_OPTIONS_IDENTIFY, "first_features", (double)half_features) != PATINA_OK) {
        char why[256]; /* the message, before the failure below replaces it */
        snprintf(why, sizeof why, "%s", patina_last_error());
        return patina__fail(PATINA_E_INVALID, "identify: the half-size query's features: %s", why);
    }
    if (opts) *o = *opts;
    else patina_identify_opts_init(o);
    /* the calibrated default: the half-size query's calibration (its impostors' second chance) */
    if (o->threshold < 0) PATINA_TRY(patina_identify_far_threshold_half(table, o, PATINA_FAR_DEFAULT, &o->threshold));
    return patina_identify_half_opts(o, half_features, ho);
}

unsigned char *idf_half_join(const void *queries, const void *half_queries, size_t nq, size_t qbytes)
{
    unsigned char *both = malloc(2 * nq * qbytes + 1);
    if (!both) return NULL;
    memcpy(both, queries, nq * qbytes);
    memcpy(both + nq * qbytes, half_queries, nq * qbytes);
    return both;
}

patina_status patina_identify_half(patina_context_t *ctx, patina_refset_t *rs, const void *queries,
                                   const void *half_queries, size_t nq, size_t half_features, double margin,
                                   const patina_identify_opts_t *opts, patina_identify_hit_t *hits,
                                   patina_identify_result_t *results, unsigned char *taken)
{
    patina_identify_opts_t o, ho;
    patina_identify_hit_t *hh = NULL;
    patina_identify_result_t *hr = NULL;
    unsigned char *both = NULL;
    idf_many_t *m = NULL;
    patina_status s;
    size_t k;
    if (!rs || (nq && (!queries || !half_queries || !hits || !results)))
        return patina__fail(PATINA_E_INVALID, "identify: null argument");
    PATINA_TRY(idf_half_prepare(patina_refset_table(rs), opts, half_features, margin, &o, &ho));
    if (nq == 0) return PATINA_OK;
    PATINA_TRY(check_opts(&o));
    k = o.k;
    if (nq > SIZE_MAX / 2 / k / sizeof *hh) return patina__fail(PATINA_E_LIMIT, "identify: %zu queries x k = %zu", nq, k);
    hh = calloc(2 * nq * k, sizeof *hh);
    hr = calloc(2 * nq, sizeof *hr);
    if (!hh || !hr) {
        s = patina__fail(PATINA_E_NOMEM, "identify: out of memory for %zu half-size queries", nq);
        goto out;
    }
    if (o.first_features > 0 && ho.first_features > 0) { /* one call: the pairs share the first pass */
        if (!(both = idf_half_join(queries, half_queries, nq, patina_identify_query_bytes(rs)))) {
            s = patina__fail(PATINA_E_NOMEM, "identify: out of memory for %zu half-size queries", nq);
            goto out;
        }
        s = idf_many_begin_half(&m, &rs, 1, both, 2 * nq, &o, ho.first_features);
        if (s == PATINA_OK) s = idf_many_match(m, 0, ctx);
        if (s == PATINA_OK) s = idf_many_finish(m, ctx, hh, hr, NULL);
        if (s == PATINA_OK) {
            memcpy(hits, hh, nq * k * sizeof *hh);
            memcpy(results, hr, nq * sizeof *hr);
        }
    } else {
        s = patina_identify(ctx, rs, queries, nq, &o, hits, results);
        if (s == PATINA_OK) s = patina_identify(ctx, rs, half_queries, nq, &ho, hh + nq * k, hr + nq);
    }
    if (s == PATINA_OK) s = patina_identify_fuse_half(nq, k, margin, &o, hits, results, hh + nq * k, hr + nq, taken);
out:
    idf_many_free(m);
    free(both);
    free(hh);
    free(hr);
    return s;
}

static patina_status identify_pairs(patina_refset_t *rs, const void *query, uint64_t id,
                                    const patina_identify_opts_t *opts, float *pairs, size_t cap, size_t *n);

patina_status patina_identify_pairs(patina_refset_t *rs, const void *query, uint64_t id,
                                    const patina_identify_opts_t *opts, float *pairs, size_t cap, size_t *n)
{
    void *copy;
    patina_status s;
    if (rs) PATINA_TRY(patina__rows(&query, 1, patina_identify_query_bytes(rs), PATINA_ROW_ALIGN(4), &copy,
                                    "identify pairs: query"));
    else copy = NULL;
    s = identify_pairs(rs, query, id, opts, pairs, cap, n);
    free(copy);
    return s;
}

static patina_status identify_pairs(patina_refset_t *rs, const void *query, uint64_t id,
                                    const patina_identify_opts_t *opts, float *pairs, size_t cap, size_t *n)
{
    patina_identify_opts_t o;
    scratch_t *sc;
    size_t slot, nm, i, k = 0, best;
    int found, kind, W, H;
    double sig;
    patina_status s = PATINA_OK;
    if (!rs || !query || !n || (cap && !pairs)) return patina__fail(PATINA_E_INVALID, "identify pairs: null argument");
    *n = 0;
    if (opts) o = *opts;
    else patina_identify_opts_init(&o);
    PATINA_TRY(check_opts(&o));
    PATINA_TRY(rs_record_check(query, patina_identify_query_bytes(rs), "identify pairs: query"));
    pthread_rwlock_rdlock(&rs->lock);
    slot = find_slot(rs, id, &found);
    if (!found || rs->dead[slot]) {
        s = patina__fail(PATINA_E_NOTFOUND, "identify pairs: the reference set holds no id %llu",
                         (unsigned long long)id);
        goto out;
    }
    if (!(sc = worker_scratch((size_t)params_of(rs)->n, (size_t)params_of(rs)->m))) {
        s = patina__fail(PATINA_E_NOMEM, "identify pairs: out of memory for scratch");
        goto out;
    }
    prepare_query(sc, query);
    /* the item's row with the most inliers, as identify's verification picks it */
    verify_item(sc, query, rs, slot, id, &o, NULL, &best, &sig);
    best -= slot;
    verify_pair(sc, query, rs->recs + (slot + best) * rs->stride, id, &o, NULL, &nm, &sig); /* that row's pairs */
    kind = rs_view_kind((int)rs->per - 1, (int)best);
    W = (int)rs_size(rs->recs + slot * rs->stride, 2);
    H = (int)rs_size(rs->recs + slot * rs->stride, 3);
    for (i = 0; i < nm; i++) {
        if (!sc->inl[i]) continue;
        if (k < cap) {
            double rx = sc->rp[2 * i], ry = sc->rp[2 * i + 1];
            if (kind) rs_view_point(kind, W, H, rx, ry, &rx, &ry); /* a view's point on the reference */
            pairs[4 * k] = (float)sc->qp[2 * i];
            pairs[4 * k + 1] = (float)sc->qp[2 * i + 1];
            pairs[4 * k + 2] = (float)rx;
            pairs[4 * k + 3] = (float)ry;
        }
        k++;
    }
    *n = k;
out:
    pthread_rwlock_unlock(&rs->lock);
    return s;
}
