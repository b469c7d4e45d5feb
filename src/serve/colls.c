/* The served collections (see internal.h): one open handle each, and one
 * live table (include/patina/table.h) per table a request has used, opened
 * on first use. The tables keep their indexes, pivot tables and reference
 * sets in step with the writes made through them and catch up with the
 * others (bulk jobs, other processes) by the collection's version; this file
 * holds what is HTTP's: the limits, the metrics, the server's writes; the
 * search batcher is batch.c. Range searches run in the handler's thread
 * (their radii differ). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "serve/internal.h"

atomic_long colls_queue_depth;
atomic_ulong colls_batches, colls_batched_queries;
atomic_ulong colls_pivot_pruned, colls_pivot_computed;

/* ----------------------------------------------------------------- tables */

/* The library's message for a table of sc that could not be opened. */
static patina_status table_fail(scoll_t *sc, patina_status s)
{
    const char *m = patina_last_error();
    return serve_fail(s, "collection '%s': %s", sc->name, *m ? m : patina_status_str(s));
}

static patina_status open_table(scoll_t *sc, const char *spec, unsigned need, int create, int pivots,
                                patina_table_t **t)
{
    patina_table_opts_t o;
    patina_table_opts_init(&o);
    o.need = need;
    o.create = create;
    o.pivots = pivots;
    return patina_table_open(t, sc->srv->ctx, sc->c, spec, &o);
}


patina_status colls_table(scoll_t *sc, const char *spec, unsigned need, int create, stable_t **out)
{
    patina_table_t *t = NULL;
    stable_t *st;
    patina_status s;
    *out = NULL;
    /* resolved by the library every time: which table a spec (or none) names follows the
     * collection's tables as they are now */
    if ((s = open_table(sc, spec, need, create, 1, &t)) != PATINA_OK) return table_fail(sc, s);
    pthread_mutex_lock(&sc->mu);
    for (st = sc->tables; st && strcmp(patina_table_spec(atomic_load(&st->t)), patina_table_spec(t)); st = st->next) {
    }
    if (st) {
        patina_table_free(t);
    } else if ((st = calloc(1, sizeof *st))) {
        atomic_init(&st->t, t);
        st->pivots = 1;
        st->next = sc->tables;
        sc->tables = st;
    } else {
        patina_table_free(t);
    }
    if (st && (need & PATINA_CAP_SEARCH) && !st->batcher && !(st->batcher = batcher_new(sc, st))) st = NULL;
    pthread_mutex_unlock(&sc->mu);
    if (!st) return serve_fail(PATINA_E_NOMEM, "out of memory for a table of collection '%s'", sc->name);
    *out = st;
    return PATINA_OK;
}

/* The open tables of sc as they are now, for a write: *n of them (malloc'd;
 * NULL when none, or out of memory: a write made without them is seen by
 * their next call all the same, by the collection's version). */
static patina_table_t **open_tables(scoll_t *sc, size_t *n)
{
    patina_table_t **t = NULL;
    stable_t *st;
    size_t i = 0;
    pthread_mutex_lock(&sc->mu);
    for (st = sc->tables; st; st = st->next) i++;
    if (i && (t = malloc(i * sizeof *t)))
        for (st = sc->tables, i = 0; st; st = st->next) t[i++] = atomic_load(&st->t);
    *n = t ? i : 0;
    pthread_mutex_unlock(&sc->mu);
    return t;
}

/* Called when a search of t (st's table) failed with PATINA_E_CORRUPT: when
 * t was opened with its stored pivot table, that table is damaged (the rows
 * themselves load before it); it is logged (why) and st is served without
 * it from then on (t is kept until the end: a handler may still hold it).
 * Returns 1 when the search should be tried again. */
static int drop_pivots(scoll_t *sc, stable_t *st, patina_table_t *t, const char *why)
{
    patina_table_t *n = NULL;
    int again = 0;
    if (!(patina_table_caps(t) & PATINA_CAP_PIVOTS)) return 0;
    pthread_mutex_lock(&sc->mu);
    if (atomic_load(&st->t) != t) {
        again = 1; /* another thread did it */
    } else if (st->pivots && open_table(sc, patina_table_spec(t), 0, 1, 0, &n) == PATINA_OK) {
        serve_log("collection '%s', table '%s': its pivot table is not used (%s); searches scan", sc->name,
                  patina_table_spec(t), why);
        st->pivots = 0;
        st->retired = t;
        atomic_store(&st->t, n);
        again = 1;
    }
    pthread_mutex_unlock(&sc->mu);
    return again;
}

/* A search of st's table, with the server's device policy and the pivot
 * metrics; res as patina_table_search fills it. */
patina_status colls_table_search(scoll_t *sc, stable_t *st, const void *queries, size_t nq, patina_table_query_t *q,
                                  patina_table_results_t *res)
{
    patina_search_stats_t stats;
    patina_table_t *t = atomic_load(&st->t);
    patina_status s;
    q->device = sc->srv->device;
    q->keys = 1;
    q->stats = &stats;
    s = patina_table_search(t, queries, nq, q, res);
    if (s == PATINA_E_CORRUPT) {
        char why[sizeof serve_msg];
        snprintf(why, sizeof why, "%s", patina_last_error());
        if (!drop_pivots(sc, st, t, why)) return serve_fail(s, "search: %s", why);
        s = patina_table_search(atomic_load(&st->t), queries, nq, q, res);
    }
    if (s != PATINA_OK) return serve_lib(s, "search");
    atomic_fetch_add(&colls_pivot_pruned, stats.pruned);
    atomic_fetch_add(&colls_pivot_computed, stats.computed);
    return PATINA_OK;
}

/* Query i's first `max` hits of res into q, their keys taken over; a hit
 * whose record vanished (another process removed it) is left out. */
patina_status colls_take_hits(squery_t *q, patina_table_results_t *res, size_t i, size_t max)
{
    size_t j, m = res->offsets[i + 1] - res->offsets[i];
    if (m > max) m = max;
    q->rows = res->rows;
    if (!(q->hits = calloc(m ? m : 1, sizeof *q->hits)))
        return serve_fail(PATINA_E_NOMEM, "out of memory for %zu hits", m);
    for (j = res->offsets[i]; j < res->offsets[i] + m; j++) {
        if (!res->keys[j]) continue;
        q->hits[q->nhits].id = res->hits[j].id;
        q->hits[q->nhits].distance = res->hits[j].distance;
        q->hits[q->nhits].key = res->keys[j];
        res->keys[j] = NULL;
        q->nhits++;
    }
    return PATINA_OK;
}

/* -------------------------------------------------------- open and close */

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    if (!d) {
        fprintf(stderr, "patina serve: out of memory\n");
        abort();
    }
    return d;
}

/* 1 when `path` does not exist or is an empty directory: what --create
 * would make a collection of. */
static int holds_nothing(const char *path)
{
    struct stat st;
    DIR *d;
    struct dirent *e;
    int empty = 1;
    if (stat(path, &st) != 0) return errno == ENOENT;
    if (!S_ISDIR(st.st_mode) || !(d = opendir(path))) return 0;
    while (empty && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = 0;
    closedir(d);
    return empty;
}

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
        pthread_mutex_init(&sc->mu, NULL);
        pthread_mutex_init(&sc->write_mu, NULL);
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
        if (srv->cfg->cluster) { /* a cluster collection, by its name */
            if (scluster_open(sc) != 0) return -1;
            continue;
        }
        s = patina_collection_open(&sc->c, path, srv->cfg->create ? PATINA_OPEN_CREATE : PATINA_OPEN_WRITE, 0);
        if (s != PATINA_OK && !srv->cfg->create && holds_nothing(path)) {
            fprintf(stderr, "patina serve: '%s' holds no collection (%s): give --create to start an empty one "
                            "there, or make one with 'patina index %s FILE...'\n",
                    path, *patina_last_error() ? patina_last_error() : patina_status_str(s), path);
            return -1;
        }
        if (s != PATINA_OK) {
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
        stable_t *st = sc->tables;
        while (st) {
            stable_t *next = st->next;
            batcher_free(st->batcher);
            patina_table_free(atomic_load(&st->t));
            patina_table_free(st->retired);
            free(st);
            st = next;
        }
        if (sc->cl) scluster_close(sc);
        if (sc->c) patina_collection_close(sc->c);
        pthread_mutex_destroy(&sc->mu);
        pthread_mutex_destroy(&sc->write_mu);
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

/* ----------------------------------------------------------------- search */

void squery_release(squery_t *q)
{
    size_t i;
    for (i = 0; q->hits && i < q->nhits; i++) free(q->hits[i].key);
    free(q->hits);
    q->hits = NULL;
    q->nhits = 0;
}

/* A range search, in the handler's thread: at most --max-range-hits hits,
 * one more asked to say whether it cut. */
static patina_status range_search(scoll_t *sc, stable_t *st, squery_t *q)
{
    size_t cap = sc->srv->cfg->max_range_hits;
    patina_table_query_t tq;
    patina_table_results_t res;
    patina_status s;
    patina_table_query_init(&tq);
    tq.kind = PATINA_QUERY_RANGE;
    tq.radius = q->radius;
    tq.max_hits = cap + 1;
    if ((s = colls_table_search(sc, st, q->desc, 1, &tq, &res)) != PATINA_OK) return s;
    q->truncated = res.offsets[1] > cap;
    s = colls_take_hits(q, &res, 0, cap);
    patina_table_results_release(&res);
    return s;
}

patina_status colls_search(scoll_t *sc, stable_t *st, squery_t *q)
{
    return q->range ? range_search(sc, st, q) : batch_submit(st->batcher, q);
}

/* ------------------------------------------------------------------ writes */

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

/* The tables an add writes (wst, n): those named, else the collection's,
 * else cedd; each opened (created when new), each once. */
static patina_status add_tables(scoll_t *sc, const char *const *specs, size_t nspecs, stable_t ***wst, size_t *n)
{
    char **own = NULL;
    const char *const *names = specs;
    const char *dflt = "cedd"; /* the family of an empty collection's first image */
    size_t nnames = nspecs, i, j;
    patina_status s = PATINA_OK;
    *n = 0;
    if (!nspecs) {
        if ((s = patina_collection_tables(sc->c, &own, &nnames)) != PATINA_OK) return serve_lib(s, "tables");
        names = (const char *const *)own;
        if (!nnames) {
            names = &dflt;
            nnames = 1;
        }
    }
    if (!(*wst = calloc(nnames, sizeof **wst))) s = serve_fail(PATINA_E_NOMEM, "out of memory");
    for (i = 0; s == PATINA_OK && i < nnames; i++) {
        stable_t *st;
        if ((s = colls_table(sc, names[i], 0, 1, &st)) != PATINA_OK) break;
        for (j = 0; j < *n && (*wst)[j] != st; j++) {
        }
        if (j == *n) (*wst)[(*n)++] = st;
    }
    for (i = 0; own && i < nnames; i++) free(own[i]);
    free(own);
    return s;
}

patina_status colls_add(scoll_t *sc, const char *key, const void *data, size_t size, const char *const *specs,
                        size_t nspecs, int if_absent, int *created, uint64_t *idp)
{
    server_t *srv = sc->srv;
    patina_image_t img;
    stable_t **wst = NULL;
    patina_table_t **all = NULL;
    const void **descs = NULL;
    uint8_t **mine = NULL;
    size_t nw = 0, nall = 0, i, j;
    patina_record_t old;
    patina_insert_t ins;
    patina_context_t *ctx = NULL;
    patina_status s;

    memset(&img, 0, sizeof img);
    *created = 0;
    if ((s = decode_upload(srv, &img, data, size, key)) != PATINA_OK) return s;
    if ((s = add_tables(sc, specs, nspecs, &wst, &nw)) != PATINA_OK) goto out;
    if (!(mine = calloc(nw, sizeof *mine))) {
        s = serve_fail(PATINA_E_NOMEM, "out of memory");
        goto out;
    }
    ctx = server_ctx_take(srv);
    for (i = 0; i < nw; i++) {
        const patina_extractor_t *ex = patina_table_extractor(atomic_load(&wst[i]->t));
        patina_status one = PATINA_OK;
        if (!(mine[i] = malloc(patina_extractor_bytes(ex)))) {
            s = serve_fail(PATINA_E_NOMEM, "out of memory");
            goto out;
        }
        s = patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, mine[i], &img, 1, &one);
        if (s != PATINA_OK) {
            serve_lib(s, "extract");
            goto out;
        }
        if (one != PATINA_OK) {
            s = serve_fail(one, "'%s': %s could not describe the image (%s)", key, patina_extractor_spec(ex),
                           patina_status_str(one));
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

    /* the server's writes one at a time: the key's existence holds until the commit */
    pthread_mutex_lock(&sc->write_mu);
    /* every open table takes part: those not written drop the row when its content changed */
    all = open_tables(sc, &nall);
    if (!all || !(descs = calloc(nall, sizeof *descs))) {
        s = serve_fail(PATINA_E_NOMEM, "out of memory");
        goto unlock;
    }
    for (i = 0; i < nall; i++)
        for (j = 0; j < nw; j++)
            if (!strcmp(patina_table_spec(all[i]), patina_table_spec(atomic_load(&wst[j]->t)))) descs[i] = mine[j];
    memset(&old, 0, sizeof old);
    s = patina_collection_get_by_key(sc->c, key, &old);
    if (s == PATINA_OK) {
        patina_record_release(&old);
        if (if_absent) {
            s = serve_fail(PATINA_E_BUSY, "key '%s' exists already (PUT .../images/KEY replaces it)", key);
            goto unlock;
        }
    } else if (s == PATINA_E_NOTFOUND) {
        patina_clear_error();
        *created = 1;
    } else {
        serve_lib(s, "lookup");
        goto unlock;
    }
    /* one transaction: the record with all its descriptors, or nothing */
    if ((s = patina_tables_put(all, nall, &ins, 1, descs, idp)) != PATINA_OK) {
        serve_lib(s, "store");
        *created = 0;
    }
unlock:
    pthread_mutex_unlock(&sc->write_mu);
out:
    server_ctx_give(srv, ctx);
    patina_image_release(&img);
    for (i = 0; mine && i < nw; i++) free(mine[i]);
    free(mine);
    free(wst);
    free(all);
    free(descs);
    return s;
}

patina_status colls_remove(scoll_t *sc, const char *key, uint64_t *idp)
{
    patina_record_t rec;
    patina_table_t **all;
    size_t nall;
    patina_status s;
    pthread_mutex_lock(&sc->write_mu);
    s = patina_collection_get_by_key(sc->c, key, &rec);
    if (s == PATINA_OK) {
        *idp = rec.id;
        patina_record_release(&rec);
        all = open_tables(sc, &nall);
        s = all ? patina_tables_remove(all, nall, idp, 1, NULL) : patina_collection_remove(sc->c, *idp);
        if (s != PATINA_OK) serve_lib(s, "remove");
        free(all);
    } else if (s == PATINA_E_NOTFOUND) {
        serve_fail(s, "collection '%s' has no image '%s'", sc->name, key);
    } else {
        serve_lib(s, "lookup");
    }
    pthread_mutex_unlock(&sc->write_mu);
    return s;
}

/* ---------------------------------------------------------------- identify */

patina_status colls_identify(scoll_t *sc, const void *data, size_t size, patina_identify_opts_t *opts,
                             double far, const identify_half_t *half, patina_identify_result_t *res,
                             patina_identify_hit_t *hits, char **keys, float **pairs, size_t *npairs, int *taken)
{
    server_t *srv = sc->srv;
    patina_image_t img;
    patina_status s, one = PATINA_OK;
    patina_context_t *ctx;
    stable_t *st;
    patina_table_t *t;
    unsigned char *qrec = NULL, *hrec = NULL, tk = 0;
    size_t i;

    *taken = 0;
    memset(&img, 0, sizeof img);
    if ((s = decode_upload(srv, &img, data, size, "query")) != PATINA_OK) return s;
    if ((s = colls_table(sc, NULL, PATINA_CAP_IDENTIFY, 0, &st)) != PATINA_OK) goto out;
    t = atomic_load(&st->t);
    /* far: the threshold of the table's own calibration (its reference views; the half-size query's) */
    if (far >= 0 &&
        (s = (half->features ? patina_identify_far_threshold_half : patina_identify_far_threshold_opts)(
             patina_table_spec(t), opts, far, &opts->threshold)) != PATINA_OK) {
        serve_lib(s, "far");
        goto out;
    }
    if (!(qrec = malloc(patina_table_query_bytes(t))) ||
        (half->features && !(hrec = malloc(patina_table_query_bytes(t))))) {
        s = serve_fail(PATINA_E_NOMEM, "out of memory");
        goto out;
    }
    ctx = server_ctx_take(srv);
    s = patina_table_identify_extract(t, ctx, qrec, &img, 1, &one);
    if (s == PATINA_OK && one == PATINA_OK && hrec) s = patina_table_identify_extract_half(t, ctx, hrec, &img, 1, &one);
    server_ctx_give(srv, ctx);
    if (s == PATINA_OK) s = one;
    if (s != PATINA_OK) {
        serve_lib(s, "query features");
        goto out;
    }
    s = hrec ? patina_table_identify_half(t, qrec, hrec, 1, half->features, half->margin, opts, hits, res, keys, &tk)
             : patina_table_identify(t, qrec, 1, opts, hits, res, keys);
    if (s != PATINA_OK) {
        serve_lib(s, "identify");
        goto out;
    }
    *taken = tk;
    /* the verified candidates' inlier pairs, for drawing (none for a reference removed meanwhile); an answer
     * of the half-size query has its query points on the halved photograph (round(W/2) x round(H/2), pixel
     * centres aligned), mapped back onto the photograph */
    for (i = 0; i < res->nhits; i++) {
        size_t n = 0;
        pairs[i] = NULL;
        npairs[i] = 0;
        if (!hits[i].verified || !hits[i].inliers) continue;
        if (!(pairs[i] = malloc((size_t)hits[i].inliers * 4 * sizeof **pairs))) {
            s = serve_fail(PATINA_E_NOMEM, "out of memory");
            break;
        }
        s = patina_table_identify_pairs(t, tk ? hrec : qrec, hits[i].id, opts, pairs[i], hits[i].inliers, &n);
        if (s == PATINA_E_NOTFOUND) {
            patina_clear_error();
            s = PATINA_OK;
            n = 0;
        }
        if (s != PATINA_OK) {
            serve_lib(s, "keypoint pairs");
            break;
        }
        npairs[i] = n < hits[i].inliers ? n : hits[i].inliers;
        if (tk) {
            const double sx = (double)img.width / ((img.width + 1) / 2), sy = (double)img.height / ((img.height + 1) / 2);
            for (size_t j = 0; j < npairs[i]; j++) {
                float *q = pairs[i] + 4 * j;
                q[0] = (float)((q[0] + 0.5) * sx - 0.5);
                q[1] = (float)((q[1] + 0.5) * sy - 0.5);
            }
        }
    }
out:
    free(qrec);
    free(hrec);
    patina_image_release(&img);
    return s;
}
