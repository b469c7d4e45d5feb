/* The connection's handles, for the cluster's own files (conn.c owns them). */
#ifndef PATINA_CLUSTER_CONN_H
#define PATINA_CLUSTER_CONN_H

#include <pthread.h>

#include <nats/nats.h>

#include "cluster/cluster.h"

struct clu_conn {
    natsConnection *nc;
    jsCtx *js;
    unsigned long disconnects; /* (atomic) times the connection was lost: core requests sent to it meanwhile
                                * (a writer's CONFIRM) were lost, so a shard withdraws its partitions */
    /* libnats calls the connection's callbacks on a thread of its own, after natsConnection_Close
     * returns: clu_disconnect waits for the last one (closed) before it frees this */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int closed;
};

/* A NATS failure as a patina_status, the message "<what>: <NATS's text>"
 * (the NATS library's last error detail when it has one): not found ->
 * PATINA_E_NOTFOUND; timeouts, no responders, no server, closed
 * connections -> PATINA_E_UNAVAILABLE; memory -> PATINA_E_NOMEM; invalid
 * arguments -> PATINA_E_INVALID; a wrong last revision -> PATINA_E_BUSY;
 * anything else -> PATINA_E_STORE. */
patina_status clu_nats_fail(natsStatus ns, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The status clu_nats_fail maps ns to (no message). */
patina_status clu_nats_status(natsStatus ns);

/* The KV bucket `bucket` (PATINA_E_NOTFOUND when it does not exist). */
patina_status clu_kv_open(kvStore **kv, clu_conn_t *c, const char *bucket);
/* clu_kv_open, its transient failures retried (clu_retry) for at most wait_ms. */
patina_status clu_kv_open_wait(kvStore **kv, clu_conn_t *c, const char *bucket, int wait_ms);

/* The latest value of `key` in `bucket`, read from the bucket stream's
 * leader ($JS.API.STREAM.MSG.GET, last by subject). Not kvStore_Get: nats.c
 * creates buckets with AllowDirect, and a direct get is answered by any
 * replica, a lagging one with an older value or none at all (seen: an
 * acknowledged image then 404 while a restarted server caught up). The
 * value is natsMsg_GetData/GetDataLength, its revision natsMsg_GetSequence.
 * NATS_NOT_FOUND (no message set) when the key has no value or its last
 * one is a delete or purge marker. A read that finds no leader (an
 * election: JetStream "temporarily unavailable", a timeout, no responders:
 * what clu_nats_fail calls PATINA_E_UNAVAILABLE) is asked again
 * (clu_retry) for at most CLU_LATEST_WAIT_MS. */
#define CLU_LATEST_WAIT_MS 3000
natsStatus clu_kv_latest(natsMsg **m, clu_conn_t *c, const char *bucket, const char *key);

/* Bounded retries of a call that fails while JetStream is not answering yet
 * (CLU_START_WAIT_MS):
 *     clu_retry_t r;
 *     clu_retry_init(&r, CLU_START_WAIT_MS);
 *     while ((s = call()) != PATINA_OK && clu_retry(&r, s)) {}
 * The delays are 100 ms doubling up to 2 s. */
typedef struct clu_retry {
    double deadline; /* CLOCK_MONOTONIC seconds */
    int delay_ms, tries, wait_ms;
} clu_retry_t;

void clu_retry_init(clu_retry_t *r, int wait_ms);
/* 1 after sleeping the next delay when s is transient (PATINA_E_UNAVAILABLE:
 * a timeout, no responders, no server; PATINA_E_STORE: a JetStream API
 * error such as "temporarily unavailable" or a stream without a leader)
 * and the wait is not spent; else 0, the message (clu_last_error) then
 * saying how long it was retried when it was. */
int clu_retry(clu_retry_t *r, patina_status s);

#endif
