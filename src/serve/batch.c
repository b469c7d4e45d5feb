/* The search batcher of `patina serve` (see internal.h): k-NN searches of
 * one table queue in its batcher; its thread takes the queue (after waiting
 * up to the batching window for more, at most batch_max searches) and makes
 * ONE search of the table with the largest k asked (hits are ordered by
 * distance then id, so each search's answer is a prefix of that call's),
 * the keys filled by the table, then wakes the waiting handlers. Not here:
 * the table, its device policy and the hits' keys (colls.c and the
 * library's live table). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/internal.h"

typedef struct bitem {
    squery_t *q;
    int done;
    struct bitem *next;
} bitem_t;

struct batcher {
    scoll_t *sc;
    stable_t *st;
    pthread_mutex_t mu;
    pthread_cond_t more;   /* the batcher waits for searches */
    pthread_cond_t done;   /* handlers wait for their answers */
    bitem_t *head, *tail;
    size_t n;
    int stop;
    pthread_t thread;
};

static void run_batch(batcher_t *b, bitem_t *items, size_t n)
{
    size_t bytes = patina_extractor_bytes(patina_table_extractor(atomic_load(&b->st->t))), i;
    uint8_t *descs = malloc(n * bytes);
    patina_table_query_t tq;
    patina_table_results_t res;
    patina_status s = PATINA_OK;
    bitem_t *it;
    memset(&res, 0, sizeof res);
    patina_table_query_init(&tq);
    tq.k = 0;
    for (it = items, i = 0; it; it = it->next, i++) {
        if (it->q->k > tq.k) tq.k = it->q->k;
        if (descs) memcpy(descs + i * bytes, it->q->desc, bytes);
    }
    if (!descs) s = serve_fail(PATINA_E_NOMEM, "out of memory for a batch of %zu searches", n);
    if (s == PATINA_OK) s = colls_table_search(b->sc, b->st, descs, n, &tq, &res);
    for (it = items, i = 0; it; it = it->next, i++) {
        it->q->status = s == PATINA_OK ? colls_take_hits(it->q, &res, i, it->q->k) : s;
        if (it->q->status != PATINA_OK) snprintf(it->q->error, sizeof it->q->error, "%s", serve_msg);
    }
    patina_table_results_release(&res);
    atomic_fetch_add(&colls_batches, 1);
    atomic_fetch_add(&colls_batched_queries, n);
    free(descs);
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

batcher_t *batcher_new(scoll_t *sc, stable_t *st)
{
    batcher_t *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->sc = sc;
    b->st = st;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->more, NULL);
    pthread_cond_init(&b->done, NULL);
    if (pthread_create(&b->thread, NULL, batcher_main, b) != 0) {
        free(b);
        return NULL;
    }
    return b;
}

void batcher_free(batcher_t *b)
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

/* Queues q and waits for its answer (429-worthy PATINA_E_BUSY when the queue is full). */
patina_status batch_submit(batcher_t *b, squery_t *q)
{
    bitem_t item;
    memset(&item, 0, sizeof item);
    item.q = q;
    pthread_mutex_lock(&b->mu);
    if (b->n >= b->sc->srv->cfg->max_queue) {
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
