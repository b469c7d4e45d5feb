/* The served collections (see internal.h): one open handle each, search
 * indexes loaded on first use and kept in step with the server's writes
 * (patina_index_put/_remove after each commit), the reference set of
 * identification likewise, and the search batcher.
 *
 * Batching. k-NN searches of one table queue in its batcher; its thread
 * takes the queue (after waiting up to the batching window for more, at
 * most batch_max searches), makes ONE patina_index_knn call with the
 * largest k asked (hits are ordered by distance then id, so each search's
 * answer is a prefix of that call's), looks the hits' keys up in one
 * snapshot and wakes the waiting handlers. Range searches run in the
 * handler's thread (their radii differ). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/internal.h"

atomic_long colls_queue_depth;
atomic_ulong colls_batches, colls_batched_queries;
atomic_ulong colls_pivot_pruned, colls_pivot_computed;

typedef struct bitem {
    squery_t *q;
    int done;
    struct bitem *next;
} bitem_t;

struct batcher {
    scoll_t *sc;
    sindex_t *si;
    pthread_mutex_t mu;
    pthread_cond_t more;   /* the batcher waits for searches */
    pthread_cond_t done;   /* handlers wait for their answers */
    bitem_t *head, *tail;
    size_t n;
    int stop;
    pthread_t thread;
};

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    if (!d) {
        fprintf(stderr, "patina serve: out of memory\n");
        abort();
    }
    return d;
}

/* ------------------------------------------------------------ index loads */

/* With sc->lock held for writing: drops every loaded index and the
 * reference set when a job made them stale. */
/* Marks sc's indexes stale when the collection's version moved past the
 * one they reflect: a write not made through this server (`patina index`
 * or `patina rm` in another process). */
static void note_external(scoll_t *sc)
{
    uint64_t v;
    if (patina_collection_version(sc->c, &v) == PATINA_OK && v != atomic_load(&sc->seen)) atomic_store(&sc->stale, 1);
}

/* After a write of this server (write lock held; its indexes already
 * follow it): the version they reflect now. */
static void note_own_write(scoll_t *sc)
{
    uint64_t v;
    if (patina_collection_version(sc->c, &v) == PATINA_OK) atomic_store(&sc->seen, v);
}

static void drop_stale(scoll_t *sc)
{
    sindex_t *si;
    uint64_t v;
    if (!atomic_exchange(&sc->stale, 0)) return;
    /* what gets loaded next reflects this version or a later one */
    if (patina_collection_version(sc->c, &v) == PATINA_OK) atomic_store(&sc->seen, v);
    for (si = sc->indexes; si; si = si->next) {
        patina_index_free(si->idx);
        si->idx = NULL;
        patina_pivot_index_free(si->pidx);
        si->pidx = NULL;
    }
    patina_refset_free(sc->refset);
    sc->refset = NULL;
}

static void load_pivots(scoll_t *sc, sindex_t *si);

/* Returns with sc->lock held for reading and si->idx loaded (PATINA_OK), or
 * unlocked with the failure. */
static patina_status read_loaded(scoll_t *sc, sindex_t *si)
{
    note_external(sc);
    for (;;) {
        patina_status s;
        pthread_rwlock_rdlock(&sc->lock);
        if (si->idx && !atomic_load(&sc->stale)) return PATINA_OK;
        pthread_rwlock_unlock(&sc->lock);
        pthread_rwlock_wrlock(&sc->lock);
        drop_stale(sc);
        if (!si->idx) {
            s = patina_index_load(&si->idx, si->ex, sc->c);
            if (s == PATINA_OK) load_pivots(sc, si);
        } else {
            s = PATINA_OK;
        }
        pthread_rwlock_unlock(&sc->lock);
        if (s != PATINA_OK) return serve_lib(s, "loading the search index");
    }
}

/* A signature table's stored pivot table (patina index --pivots N), loaded
 * with its index (write lock held): searches of the table are then
 * filtered by it (the same hits as the scan, fewer distances). Rows added
 * or removed since it was stored are brought up to date by the load; the
 * server's own writes keep it current after that. None stored: the scan. A
 * table that cannot be loaded (damaged) is logged and the scan serves. */
static void load_pivots(scoll_t *sc, sindex_t *si)
{
    patina_status s;
    if (strcmp(patina_extractor_family(si->ex), "signature") != 0) return;
    s = patina_pivot_index_load(&si->pidx, sc->srv->ctx, si->ex, sc->c, NULL);
    if (s == PATINA_E_NOTFOUND) {
        patina_clear_error();
    } else if (s != PATINA_OK) {
        serve_log("collection '%s', table '%s': its pivot table is not used (%s); searches scan", sc->name, si->spec,
                  *patina_last_error() ? patina_last_error() : patina_status_str(s));
        si->pidx = NULL;
    }
}

/* k-NN or range search of one table (read lock held): through its pivot
 * table when it has one (PATINA_PIVOT_AUTO on a GPU server: the GPU filter
 * from 256 rows, the CPU's when the GPU cannot take it; else the CPU
 * filter), otherwise the index. */
static patina_status table_search(server_t *srv, sindex_t *si, const void *descs, size_t nq, size_t k, double radius,
                                  int range, size_t max_hits, patina_hit_t *hits, patina_hit_t **rhits, size_t *counts)
{
    patina_status s;
    if (si->pidx) {
        patina_pivot_search_opts_t po;
        patina_search_stats_t st;
        patina_pivot_search_opts_init(&po);
        memset(&st, 0, sizeof st);
        po.max_hits = max_hits;
        po.stats = &st;
        po.strategy = srv->device == PATINA_DEVICE_GPU ? PATINA_PIVOT_AUTO : PATINA_PIVOT_CPU;
        s = range ? patina_pivot_index_range(srv->ctx, si->pidx, descs, nq, radius, &po, rhits, counts)
                  : patina_pivot_index_knn(srv->ctx, si->pidx, descs, nq, k, &po, hits, counts);
        if (s == PATINA_OK) {
            atomic_fetch_add(&colls_pivot_pruned, st.pruned);
            atomic_fetch_add(&colls_pivot_computed, st.computed);
        }
        return s;
    } else {
        patina_search_opts_t so;
        patina_search_opts_init(&so);
        so.max_hits = max_hits;
        if (range) {
            so.device = srv->device == PATINA_DEVICE_GPU ? PATINA_DEVICE_AUTO : srv->device;
            return patina_index_range(srv->ctx, si->idx, descs, nq, radius, &so, rhits, counts);
        }
        so.device = srv->device;
        if (srv->device == PATINA_DEVICE_GPU && patina_index_size(si->idx) == 0) so.device = PATINA_DEVICE_CPU;
        return patina_index_knn(srv->ctx, si->idx, descs, nq, k, &so, hits, counts);
    }
}

/* ---------------------------------------------------------------- batcher */

static void run_batch(batcher_t *b, bitem_t *items, size_t n)
{
    server_t *srv = b->sc->srv;
    size_t bytes = patina_extractor_bytes(b->si->ex), kmax = 0, i, j;
    uint8_t *descs = malloc(n * bytes);
    patina_hit_t *hits = NULL;
    size_t *counts = malloc(n * sizeof *counts);
    patina_snapshot_t *snap = NULL;
    patina_status s = PATINA_OK;
    bitem_t *it;
    for (it = items, i = 0; it; it = it->next, i++) {
        if (it->q->k > kmax) kmax = it->q->k;
        if (descs) memcpy(descs + i * bytes, it->q->desc, bytes);
    }
    hits = malloc(n * kmax * sizeof *hits);
    if (!descs || !counts || !hits) s = serve_fail(PATINA_E_NOMEM, "out of memory for a batch of %zu searches", n);
    if (s == PATINA_OK) s = read_loaded(b->sc, b->si);
    if (s == PATINA_OK) {
        s = table_search(srv, b->si, descs, n, kmax, 0, 0, 0, hits, NULL, counts);
        if (s != PATINA_OK) serve_lib(s, "search");
        if (s == PATINA_OK && (s = patina_snapshot_new(&snap, b->sc->c)) != PATINA_OK) serve_lib(s, "snapshot");
        for (it = items, i = 0; s == PATINA_OK && it; it = it->next, i++) {
            squery_t *q = it->q;
            size_t m = counts[i] < q->k ? counts[i] : q->k;
            q->rows = patina_index_size(b->si->idx);
            q->hits = calloc(m ? m : 1, sizeof *q->hits);
            if (!q->hits) {
                q->status = PATINA_E_NOMEM;
                continue;
            }
            for (j = 0; j < m; j++) {
                patina_record_t rec;
                const patina_hit_t *h = &hits[i * kmax + j];
                memset(&rec, 0, sizeof rec);
                /* under the read lock no write of this server commits; a
                 * record gone all the same (another process) is left out */
                if (patina_snapshot_get(snap, &h->id, 1, &rec) != PATINA_OK) {
                    patina_record_release(&rec);
                    continue;
                }
                q->hits[q->nhits].id = h->id;
                q->hits[q->nhits].distance = h->distance;
                q->hits[q->nhits].key = rec.key; /* taken over */
                rec.key = NULL;
                patina_record_release(&rec);
                q->nhits++;
            }
            q->status = PATINA_OK;
        }
        patina_snapshot_free(snap);
        pthread_rwlock_unlock(&b->sc->lock);
    }
    if (s != PATINA_OK)
        for (it = items; it; it = it->next) {
            it->q->status = s;
            snprintf(it->q->error, sizeof it->q->error, "%s", serve_msg);
        }
    atomic_fetch_add(&colls_batches, 1);
    atomic_fetch_add(&colls_batched_queries, n);
    free(descs);
    free(hits);
    free(counts);
}

static void *batcher_main(void *arg)
{
    batcher_t *b = arg;
    server_t *srv = b->sc->srv;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        bitem_t *items, *last;
        size_t n = 0;
        while (!b->n && !b->stop) pthread_cond_wait(&b->more, &b->mu);
        if (b->stop && !b->n) break;
        /* the window ends early once the batch is full: batch_max, or every connection thread
         * waiting in it (no other search can arrive then) */
        const size_t full = srv->cfg->batch_max < (size_t)srv->http_threads ? srv->cfg->batch_max
                                                                             : (size_t)srv->http_threads;
        if (srv->window_us > 0 && b->n < full && !b->stop) {
            struct timespec dl;
            clock_gettime(CLOCK_REALTIME, &dl);
            dl.tv_nsec += srv->window_us * 1000L;
            dl.tv_sec += dl.tv_nsec / 1000000000L;
            dl.tv_nsec %= 1000000000L;
            while (b->n < full && !b->stop)
                if (pthread_cond_timedwait(&b->more, &b->mu, &dl) == ETIMEDOUT) break;
        }
        items = last = b->head;
        for (n = 1; n < srv->cfg->batch_max && last->next; n++) last = last->next;
        b->head = last->next;
        if (!b->head) b->tail = NULL;
        last->next = NULL;
        b->n -= n;
        atomic_fetch_sub(&colls_queue_depth, (long)n);
        pthread_mutex_unlock(&b->mu);
        run_batch(b, items, n);
        pthread_mutex_lock(&b->mu);
        for (; items; items = items->next) items->done = 1;
        pthread_cond_broadcast(&b->done);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

static batcher_t *batcher_new(scoll_t *sc, sindex_t *si)
{
    batcher_t *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->sc = sc;
    b->si = si;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->more, NULL);
    pthread_cond_init(&b->done, NULL);
    if (pthread_create(&b->thread, NULL, batcher_main, b) != 0) {
        free(b);
        return NULL;
    }
    return b;
}

static void batcher_free(batcher_t *b)
{
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    b->stop = 1;
    pthread_cond_signal(&b->more);
    pthread_mutex_unlock(&b->mu);
    pthread_join(b->thread, NULL);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->more);
    pthread_cond_destroy(&b->done);
    free(b);
}

/* -------------------------------------------------------- open and close */

int colls_open(server_t *srv)
{
    size_t i, j;
    srv->colls = calloc(srv->cfg->ncollections, sizeof *srv->colls);
    if (!srv->colls) return -1;
    for (i = 0; i < srv->cfg->ncollections; i++) {
        scoll_t *sc = &srv->colls[i];
        const char *path = srv->cfg->collections[i], *base;
        char *trimmed = xstrdup(path);
        size_t len = strlen(trimmed);
        patina_status s;
        while (len > 1 && trimmed[len - 1] == '/') trimmed[--len] = '\0';
        base = strrchr(trimmed, '/') ? strrchr(trimmed, '/') + 1 : trimmed;
        sc->name = xstrdup(base);
        sc->path = trimmed;
        sc->srv = srv;
        {
            /* writers first: a steady stream of search batches must not starve adds and
             * deletes (no thread takes this lock for reading twice, so this cannot deadlock) */
            pthread_rwlockattr_t ra;
            pthread_rwlockattr_init(&ra);
            pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
            pthread_rwlock_init(&sc->lock, &ra);
            pthread_rwlockattr_destroy(&ra);
        }
        srv->ncolls = i + 1;
        if (!*sc->name || !strcmp(sc->name, ".") || !strcmp(sc->name, "..")) {
            fprintf(stderr, "patina serve: '%s': give the collection's directory by a name (its last component names it in URLs)\n", path);
            return -1;
        }
        for (j = 0; j < i; j++)
            if (!strcmp(srv->colls[j].name, sc->name)) {
                fprintf(stderr, "patina serve: two collections are named '%s' ('%s', '%s'); each is served under its directory's name\n",
                        sc->name, srv->colls[j].path, sc->path);
                return -1;
            }
        if ((s = patina_collection_open(&sc->c, path, PATINA_OPEN_CREATE, 0)) != PATINA_OK) {
            fprintf(stderr, "patina serve: %s\n", *patina_last_error() ? patina_last_error() : patina_status_str(s));
            return -1;
        }
    }
    return 0;
}

void colls_close(server_t *srv)
{
    size_t i;
    for (i = 0; srv->colls && i < srv->ncolls; i++) {
        scoll_t *sc = &srv->colls[i];
        sindex_t *si = sc->indexes;
        while (si) {
            sindex_t *next = si->next;
            batcher_free(si->batcher);
            patina_index_free(si->idx);
            patina_pivot_index_free(si->pidx);
            patina_extractor_free(si->ex);
            free(si->spec);
            free(si);
            si = next;
        }
        patina_refset_free(sc->refset);
        patina_collection_close(sc->c);
        pthread_rwlock_destroy(&sc->lock);
        free(sc->name);
        free(sc->path);
    }
    free(srv->colls);
    srv->colls = NULL;
}

scoll_t *colls_find(server_t *srv, const char *name)
{
    size_t i;
    for (i = 0; i < srv->ncolls; i++)
        if (!strcmp(srv->colls[i].name, name)) return &srv->colls[i];
    return NULL;
}

/* The collection's tables as "a, b, c" (for messages). */
static void table_list(scoll_t *sc, char *buf, size_t size)
{
    char **specs = NULL;
    size_t n = 0, k, len = 0;
    buf[0] = '\0';
    if (patina_collection_tables(sc->c, &specs, &n) != PATINA_OK) return;
    for (k = 0; k < n; k++) {
        if (len < size) len += (size_t)snprintf(buf + len, size - len, "%s%s", k ? ", " : "", specs[k]);
        free(specs[k]);
    }
    free(specs);
    if (!n) snprintf(buf, size, "none yet");
}

patina_status colls_table(scoll_t *sc, const char *spec, sindex_t **out)
{
    patina_extractor_t *ex = NULL;
    char canon[512], list[2048];
    size_t rows, bytes;
    sindex_t *si;
    patina_status s;
    *out = NULL;
    if (!spec) {
        char **specs = NULL;
        size_t n = 0, k;
        if ((s = patina_collection_tables(sc->c, &specs, &n)) != PATINA_OK) return serve_lib(s, "tables");
        canon[0] = '\0';
        for (k = 0; k < n; k++) {
            if (!canon[0] && strncmp(specs[k], "rootsift", 8) != 0) snprintf(canon, sizeof canon, "%s", specs[k]);
            free(specs[k]);
        }
        free(specs);
        if (!canon[0])
            return serve_fail(PATINA_E_NOTFOUND, "collection '%s' has no searchable descriptor table yet (add images first)",
                              sc->name);
    } else {
        if ((s = patina_extractor_new(&ex, spec)) != PATINA_OK) return serve_lib(PATINA_E_INVALID, "family");
        snprintf(canon, sizeof canon, "%s", patina_extractor_spec(ex));
        patina_extractor_free(ex);
        ex = NULL;
    }
    pthread_rwlock_rdlock(&sc->lock);
    for (si = sc->indexes; si && strcmp(si->spec, canon); si = si->next) {
    }
    pthread_rwlock_unlock(&sc->lock);
    if (si) {
        *out = si;
        return PATINA_OK;
    }
    s = patina_collection_table_info(sc->c, canon, &rows, &bytes);
    if (s == PATINA_E_NOTFOUND) {
        table_list(sc, list, sizeof list);
        return serve_fail(PATINA_E_NOTFOUND, "collection '%s' has no table '%s'; its tables: %s", sc->name, canon, list);
    }
    if (s != PATINA_OK) return serve_lib(s, "table");
    if (!strncmp(canon, "rootsift", 8))
        return serve_fail(PATINA_E_INVALID, "'%s' is for identification (POST .../identify), not search", canon);
    pthread_rwlock_wrlock(&sc->lock);
    for (si = sc->indexes; si && strcmp(si->spec, canon); si = si->next) {
    }
    if (!si) {
        si = calloc(1, sizeof *si);
        if (si && patina_extractor_new(&si->ex, canon) == PATINA_OK && (si->spec = strdup(canon)) &&
            (si->batcher = batcher_new(sc, si))) {
            si->next = sc->indexes;
            sc->indexes = si;
        } else {
            if (si) {
                patina_extractor_free(si->ex);
                free(si->spec);
                free(si);
            }
            si = NULL;
        }
    }
    pthread_rwlock_unlock(&sc->lock);
    if (!si) return serve_fail(PATINA_E_NOMEM, "out of memory for table '%s'", canon);
    *out = si;
    return PATINA_OK;
}

/* ----------------------------------------------------------------- search */

void squery_release(squery_t *q)
{
    size_t i;
    for (i = 0; q->hits && i < q->nhits; i++) free(q->hits[i].key);
    free(q->hits);
    q->hits = NULL;
    q->nhits = 0;
}

static patina_status range_search(scoll_t *sc, sindex_t *si, squery_t *q)
{
    server_t *srv = sc->srv;
    patina_hit_t *hits = NULL;
    size_t count = 0, j, cap = srv->cfg->max_range_hits;
    patina_snapshot_t *snap = NULL;
    patina_status s = read_loaded(sc, si);
    if (s != PATINA_OK) return s;
    s = table_search(srv, si, q->desc, 1, 0, q->radius, 1, cap + 1, NULL, &hits, &count);
    if (s != PATINA_OK) serve_lib(s, "range search");
    if (s == PATINA_OK && (s = patina_snapshot_new(&snap, sc->c)) != PATINA_OK) serve_lib(s, "snapshot");
    if (s == PATINA_OK) {
        q->rows = patina_index_size(si->idx);
        q->truncated = count > cap;
        if (count > cap) count = cap;
        q->hits = calloc(count ? count : 1, sizeof *q->hits);
        if (!q->hits) s = serve_fail(PATINA_E_NOMEM, "out of memory for %zu hits", count);
        for (j = 0; s == PATINA_OK && j < count; j++) {
            patina_record_t rec;
            memset(&rec, 0, sizeof rec);
            if (patina_snapshot_get(snap, &hits[j].id, 1, &rec) != PATINA_OK) {
                patina_record_release(&rec);
                continue;
            }
            q->hits[q->nhits].id = hits[j].id;
            q->hits[q->nhits].distance = hits[j].distance;
            q->hits[q->nhits].key = rec.key;
            rec.key = NULL;
            patina_record_release(&rec);
            q->nhits++;
        }
    }
    patina_snapshot_free(snap);
    pthread_rwlock_unlock(&sc->lock);
    free(hits);
    return s;
}

patina_status colls_search(scoll_t *sc, sindex_t *si, squery_t *q)
{
    batcher_t *b = si->batcher;
    bitem_t item;
    if (q->range) return range_search(sc, si, q);
    memset(&item, 0, sizeof item);
    item.q = q;
    pthread_mutex_lock(&b->mu);
    if (b->n >= sc->srv->cfg->max_queue) {
        size_t waiting = b->n; /* read under the lock (the batcher changes it) */
        pthread_mutex_unlock(&b->mu);
        return serve_fail(PATINA_E_BUSY, "%zu searches are waiting already (--max-queue); retry later", waiting);
    }
    if (b->tail) b->tail->next = &item;
    else b->head = &item;
    b->tail = &item;
    b->n++;
    atomic_fetch_add(&colls_queue_depth, 1);
    pthread_cond_signal(&b->more);
    while (!item.done) pthread_cond_wait(&b->done, &b->mu);
    pthread_mutex_unlock(&b->mu);
    if (q->status != PATINA_OK) serve_fail(q->status, "%s", q->error);
    return q->status;
}

/* ------------------------------------------------------------------ writes */

void colls_mark_stale(scoll_t *sc) { atomic_store(&sc->stale, 1); }

/* The decode's status for an upload, with a message naming the key. */
static patina_status decode_upload(server_t *srv, patina_image_t *img, const void *data, size_t size, const char *name)
{
    patina_decode_opts_t dopts;
    patina_status s;
    patina_decode_opts_init(&dopts);
    dopts.limits = srv->limits;
    if (patina_format_sniff(data, size) == PATINA_FORMAT_UNKNOWN)
        return serve_fail(PATINA_E_FORMAT, "'%s': not a JPEG, PNG or PNM image", name);
    s = patina_image_decode_with(img, NULL, data, size, &dopts, name);
    if (s != PATINA_OK) serve_lib(s, "image");
    return s;
}

patina_status colls_add(scoll_t *sc, const char *key, const void *data, size_t size, const char *const *specs,
                        size_t nspecs, int if_absent, int *created, uint64_t *idp)
{
    server_t *srv = sc->srv;
    patina_image_t img;
    patina_extractor_t **ex = NULL;
    uint8_t **desc = NULL;
    char **tables = NULL;
    size_t ntables = 0, i;
    patina_record_t old;
    patina_insert_t ins;
    patina_context_t *ctx = NULL;
    uint64_t id = 0;
    int exists = 0, changed = 1;
    patina_status s;

    memset(&img, 0, sizeof img);
    *created = 0;
    if ((s = decode_upload(srv, &img, data, size, key)) != PATINA_OK) return s;
    /* the tables to write: those named, else the collection's, else cedd */
    if (nspecs) {
        tables = calloc(nspecs, sizeof *tables);
        if (!tables) {
            s = serve_fail(PATINA_E_NOMEM, "out of memory");
            goto out;
        }
        for (i = 0; i < nspecs; i++) tables[i] = xstrdup(specs[i]);
        ntables = nspecs;
    } else if ((s = patina_collection_tables(sc->c, &tables, &ntables)) != PATINA_OK) {
        serve_lib(s, "tables");
        goto out;
    }
    if (!ntables) {
        free(tables);
        tables = calloc(1, sizeof *tables);
        if (!tables) {
            s = serve_fail(PATINA_E_NOMEM, "out of memory");
            goto out;
        }
        tables[0] = xstrdup("cedd");
        ntables = 1;
    }
    ex = calloc(ntables, sizeof *ex);
    desc = calloc(ntables, sizeof *desc);
    if (!ex || !desc) {
        s = serve_fail(PATINA_E_NOMEM, "out of memory");
        goto out;
    }
    ctx = server_ctx_take(srv);
    for (i = 0; i < ntables; i++) {
        patina_status one = PATINA_OK;
        if ((s = patina_extractor_new(&ex[i], tables[i])) != PATINA_OK) {
            serve_lib(PATINA_E_INVALID, "family");
            goto out;
        }
        if (!(desc[i] = malloc(patina_extractor_bytes(ex[i])))) {
            s = serve_fail(PATINA_E_NOMEM, "out of memory");
            goto out;
        }
        s = patina_extract_batch(ctx, ex[i], PATINA_DEVICE_CPU, desc[i], &img, 1, &one);
        if (s == PATINA_OK && one != PATINA_OK) {
            s = one;
            serve_fail(s, "'%s': %s could not describe the image (%s)", key, patina_extractor_spec(ex[i]),
                       patina_status_str(one));
            goto out;
        }
        if (s != PATINA_OK) {
            serve_lib(s, "extract");
            goto out;
        }
    }
    memset(&ins, 0, sizeof ins);
    ins.key = key;
    ins.size = size;
    patina_sha256(ins.sha256, data, size);
    ins.mtime = (int64_t)time(NULL);
    ins.width = img.width;
    ins.height = img.height;

    pthread_rwlock_wrlock(&sc->lock);
    note_external(sc);
    drop_stale(sc);
    memset(&old, 0, sizeof old);
    s = patina_collection_get_by_key(sc->c, key, &old);
    if (s == PATINA_OK) {
        exists = 1;
        changed = memcmp(old.sha256, ins.sha256, 32) != 0;
        patina_record_release(&old);
    } else if (s != PATINA_E_NOTFOUND) {
        serve_lib(s, "lookup");
        pthread_rwlock_unlock(&sc->lock);
        goto out;
    }
    if (exists && if_absent) {
        pthread_rwlock_unlock(&sc->lock);
        s = serve_fail(PATINA_E_BUSY, "key '%s' exists already (PUT .../images/KEY replaces it)", key);
        goto out;
    }
    /* every table in one transaction: the record with all its descriptors, or nothing */
    {
        patina_table_descs_t *td = calloc(ntables, sizeof *td);
        if (!td) {
            s = serve_fail(PATINA_E_NOMEM, "out of memory");
        } else {
            for (i = 0; i < ntables; i++) {
                td[i].spec = patina_extractor_spec(ex[i]);
                td[i].desc_bytes = patina_extractor_bytes(ex[i]);
                td[i].descs = desc[i];
            }
            s = patina_collection_put_tables(sc->c, td, ntables, &ins, 1, &id);
            if (s != PATINA_OK) serve_lib(s, "store");
            free(td);
        }
        i = s == PATINA_OK ? ntables : 0;
    }
    if (i > 0) { /* committed: the loaded indexes and the reference set follow */
        sindex_t *si;
        size_t written = i;
        for (si = sc->indexes; si; si = si->next) {
            size_t t;
            if (!si->idx) continue;
            for (t = 0; t < written && strcmp(patina_extractor_spec(ex[t]), si->spec); t++) {
            }
            if (t < written) {
                patina_index_put(si->idx, &id, desc[t], 1);
                if (si->pidx && patina_pivot_index_put(si->pidx, srv->ctx, &id, desc[t], 1) != PATINA_OK) {
                    patina_pivot_index_free(si->pidx); /* the scan serves until the next load */
                    si->pidx = NULL;
                }
            } else if (changed && exists) {
                patina_index_remove(si->idx, &id, 1, NULL);
                if (si->pidx) patina_pivot_index_remove(si->pidx, &id, 1, NULL);
            }
        }
        if (sc->refset) {
            size_t t;
            for (t = 0; t < written && strcmp(patina_extractor_spec(ex[t]), patina_refset_table(sc->refset)); t++) {
            }
            if (t < written) patina_refset_put(sc->refset, id, desc[t], patina_extractor_bytes(ex[t]));
            else if (changed && exists) patina_refset_remove(sc->refset, id);
        }
        *created = !exists;
        *idp = id;
        note_own_write(sc);
    }
    pthread_rwlock_unlock(&sc->lock);
out:
    server_ctx_give(srv, ctx);
    patina_image_release(&img);
    for (i = 0; i < ntables; i++) {
        if (ex) patina_extractor_free(ex[i]);
        if (desc) free(desc[i]);
        free(tables[i]);
    }
    free(ex);
    free(desc);
    free(tables);
    return s;
}

patina_status colls_remove(scoll_t *sc, const char *key, uint64_t *idp)
{
    patina_record_t rec;
    patina_status s;
    sindex_t *si;
    pthread_rwlock_wrlock(&sc->lock);
    note_external(sc);
    drop_stale(sc);
    s = patina_collection_get_by_key(sc->c, key, &rec);
    if (s == PATINA_E_NOTFOUND) {
        pthread_rwlock_unlock(&sc->lock);
        return serve_fail(s, "collection '%s' has no image '%s'", sc->name, key);
    }
    if (s != PATINA_OK) {
        pthread_rwlock_unlock(&sc->lock);
        return serve_lib(s, "lookup");
    }
    *idp = rec.id;
    patina_record_release(&rec);
    s = patina_collection_remove(sc->c, *idp);
    if (s == PATINA_OK) {
        for (si = sc->indexes; si; si = si->next) {
            if (si->idx) patina_index_remove(si->idx, idp, 1, NULL);
            if (si->pidx) patina_pivot_index_remove(si->pidx, idp, 1, NULL);
        }
        if (sc->refset) patina_refset_remove(sc->refset, *idp);
        note_own_write(sc);
    } else {
        serve_lib(s, "remove");
    }
    pthread_rwlock_unlock(&sc->lock);
    return s;
}

/* ---------------------------------------------------------------- identify */

patina_status colls_identify(scoll_t *sc, const void *data, size_t size, const patina_identify_opts_t *opts,
                             patina_identify_result_t *res, patina_identify_hit_t *hits, char **keys, float **pairs,
                             size_t *npairs)
{
    server_t *srv = sc->srv;
    patina_image_t img;
    patina_status s, one = PATINA_OK;
    patina_context_t *ctx;
    patina_snapshot_t *snap = NULL;
    unsigned char *qrec = NULL;
    size_t i;

    memset(&img, 0, sizeof img);
    if ((s = decode_upload(srv, &img, data, size, "query")) != PATINA_OK) return s;
    note_external(sc);
    for (;;) {
        pthread_rwlock_rdlock(&sc->lock);
        if (sc->refset && !atomic_load(&sc->stale)) break;
        pthread_rwlock_unlock(&sc->lock);
        pthread_rwlock_wrlock(&sc->lock);
        drop_stale(sc);
        s = sc->refset ? PATINA_OK : patina_refset_load(&sc->refset, sc->c, NULL);
        pthread_rwlock_unlock(&sc->lock);
        if (s != PATINA_OK) {
            patina_image_release(&img);
            return serve_lib(s, "identification");
        }
    }
    /* with the read lock */
    qrec = malloc(patina_identify_query_bytes(sc->refset));
    ctx = server_ctx_take(srv);
    s = qrec ? patina_identify_extract(ctx, sc->refset, qrec, &img, 1, &one) : serve_fail(PATINA_E_NOMEM, "out of memory");
    if (s != PATINA_OK && qrec) serve_lib(s, "query features");
    server_ctx_give(srv, ctx);
    if (s == PATINA_OK && (s = patina_identify(srv->ctx, sc->refset, qrec, 1, opts, hits, res)) != PATINA_OK)
        serve_lib(s, "identify");
    if (s == PATINA_OK && (s = patina_snapshot_new(&snap, sc->c)) != PATINA_OK) serve_lib(s, "snapshot");
    for (i = 0; s == PATINA_OK && i < res->nhits; i++) {
        patina_record_t rec;
        memset(&rec, 0, sizeof rec);
        keys[i] = NULL;
        if (patina_snapshot_get(snap, &hits[i].id, 1, &rec) == PATINA_OK) {
            keys[i] = rec.key;
            rec.key = NULL;
        }
        patina_record_release(&rec);
    }
    /* the verified candidates' inlier pairs, for drawing */
    for (i = 0; s == PATINA_OK && i < res->nhits; i++) {
        size_t n = 0;
        pairs[i] = NULL;
        npairs[i] = 0;
        if (!hits[i].verified || !hits[i].inliers) continue;
        if (!(pairs[i] = malloc((size_t)hits[i].inliers * 4 * sizeof **pairs))) {
            s = serve_fail(PATINA_E_NOMEM, "out of memory");
            break;
        }
        if ((s = patina_identify_pairs(sc->refset, qrec, hits[i].id, opts, pairs[i], hits[i].inliers, &n)) != PATINA_OK)
            serve_lib(s, "keypoint pairs");
        npairs[i] = n < hits[i].inliers ? n : hits[i].inliers;
    }
    patina_snapshot_free(snap);
    pthread_rwlock_unlock(&sc->lock);
    free(qrec);
    patina_image_release(&img);
    return s;
}
