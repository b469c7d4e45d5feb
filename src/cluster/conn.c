/* The connection to NATS: a URL list, reconnecting for ever, a JetStream
 * context; and the mapping of every NATS status to a patina_status with a
 * message naming the subject or bucket. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster/conn.h"

patina_status clu_nats_status(natsStatus ns)
{
    switch (ns) {
    case NATS_OK: return PATINA_OK;
    case NATS_NOT_FOUND: return PATINA_E_NOTFOUND;
    case NATS_TIMEOUT:
    case NATS_NO_RESPONDERS:
    case NATS_NO_SERVER:
    case NATS_CONNECTION_CLOSED:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_STALE_CONNECTION:
    case NATS_NOT_YET_CONNECTED:
    case NATS_IO_ERROR: return PATINA_E_UNAVAILABLE;
    case NATS_NO_MEMORY: return PATINA_E_NOMEM;
    case NATS_INVALID_ARG:
    case NATS_INVALID_SUBJECT: return PATINA_E_INVALID;
    case NATS_MAX_PAYLOAD: return PATINA_E_LIMIT;
    default: return PATINA_E_STORE;
    }
}

/* clu_nats_status, refined by the NATS library's last error detail (the
 * text of a JetStream API error). */
static patina_status classify(natsStatus ns, const char *detail)
{
    /* a conflict of kvStore_Update / _Create (wrong last sequence) is JetStream's 10071 */
    if (detail && strstr(detail, "wrong last sequence")) return PATINA_E_BUSY;
    /* JetStream's 10008 (a stream or the meta layer without a leader, an election under way) */
    if (detail && strstr(detail, "temporarily unavailable")) return PATINA_E_UNAVAILABLE;
    /* JetStream's 10005 with the reason "peer offline": a replica's server is down or not yet known
     * to the meta leader (just started, or its heartbeat late); placement may succeed in a moment */
    if (detail && strstr(detail, "no suitable peers") && strstr(detail, "peer offline")) return PATINA_E_UNAVAILABLE;
    return clu_nats_status(ns);
}

patina_status clu_nats_fail(natsStatus ns, const char *fmt, ...)
{
    char what[512];
    natsStatus last = NATS_OK;
    const char *detail = nats_GetLastError(&last);
    const patina_status s = classify(ns, detail);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (detail && *detail && strcmp(detail, natsStatus_GetText(ns)))
        return clu_fail(s, "%s: %s (%s)", what, natsStatus_GetText(ns), detail);
    return clu_fail(s, "%s: %s", what, natsStatus_GetText(ns));
}

static void on_disconnected(natsConnection *nc, void *closure)
{
    clu_conn_t *c = closure;
    (void)nc;
    __atomic_add_fetch(&c->disconnects, 1, __ATOMIC_RELEASE);
}

static void on_closed(natsConnection *nc, void *closure)
{
    clu_conn_t *c = closure;
    (void)nc;
    pthread_mutex_lock(&c->mu);
    c->closed = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

patina_status clu_connect(clu_conn_t **out, const char *urls)
{
    natsOptions *o = NULL;
    clu_conn_t *c;
    const char *servers[32];
    char *copy, *save = NULL, *tok;
    int n = 0;
    natsStatus ns;
    *out = NULL;
    if (!urls || !*urls) return clu_fail(PATINA_E_INVALID, "cluster: no NATS URL given (--cluster nats://HOST:PORT)");
    if (!(copy = strdup(urls)) || !(c = calloc(1, sizeof *c))) {
        free(copy);
        return clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    for (tok = strtok_r(copy, ",", &save); tok && n < 32; tok = strtok_r(NULL, ",", &save))
        if (*tok) servers[n++] = tok;
    if (!n) {
        free(copy);
        clu_disconnect(c);
        return clu_fail(PATINA_E_INVALID, "cluster: no NATS URL in '%s'", urls);
    }
    ns = natsOptions_Create(&o);
    if (ns == NATS_OK) ns = natsOptions_SetServers(o, servers, n);
    if (ns == NATS_OK) ns = natsOptions_SetMaxReconnect(o, -1);
    if (ns == NATS_OK) ns = natsOptions_SetReconnectWait(o, 250);
    if (ns == NATS_OK) ns = natsOptions_SetTimeout(o, 2000);
    if (ns == NATS_OK) ns = natsOptions_SetMaxPendingMsgs(o, 1 << 20);
    /* a publish is written at once: otherwise the client's flusher thread waits about 1 ms for more
     * before it writes, and a query pays that twice (the front end's request, the shard's reply) */
    if (ns == NATS_OK) ns = natsOptions_SetSendAsap(o, true);
    if (ns == NATS_OK) ns = natsOptions_SetDisconnectedCB(o, on_disconnected, c);
    if (ns == NATS_OK) ns = natsOptions_SetClosedCB(o, on_closed, c);
    if (ns == NATS_OK) ns = natsConnection_Connect(&c->nc, o);
    if (ns == NATS_OK) ns = natsConnection_JetStream(&c->js, c->nc, NULL);
    natsOptions_Destroy(o);
    if (ns != NATS_OK) {
        patina_status s = clu_nats_fail(ns, "cluster: connecting to %s", urls);
        free(copy);
        clu_disconnect(c);
        return s;
    }
    free(copy);
    *out = c;
    return PATINA_OK;
}

void clu_disconnect(clu_conn_t *c)
{
    int closed = 1;
    if (!c) return;
    if (c->js) jsCtx_Destroy(c->js);
    if (c->nc) {
        struct timespec until;
        natsConnection_FlushTimeout(c->nc, 1000);
        natsConnection_Close(c->nc);
        /* the disconnected and closed callbacks run later, on libnats's thread, with c */
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 5;
        pthread_mutex_lock(&c->mu);
        while (!c->closed && pthread_cond_timedwait(&c->cv, &c->mu, &until) == 0) {}
        closed = c->closed;
        pthread_mutex_unlock(&c->mu);
        natsConnection_Destroy(c->nc);
    }
    if (!closed) return; /* a callback may still come: c is left allocated rather than freed under it */
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

patina_status clu_kv_open(kvStore **kv, clu_conn_t *c, const char *bucket)
{
    natsStatus ns = js_KeyValue(kv, c->js, bucket);
    if (ns != NATS_OK) return clu_nats_fail(ns, "cluster: bucket %s", bucket);
    return PATINA_OK;
}

natsStatus clu_kv_latest(natsMsg **m, clu_conn_t *c, const char *bucket, const char *key)
{
    char stream[160], subj[320];
    const char *op = NULL;
    jsErrCode ec = 0;
    natsStatus ns;
    clu_retry_t r;
    *m = NULL;
    snprintf(stream, sizeof stream, "KV_%s", bucket);
    snprintf(subj, sizeof subj, "$KV.%s.%s", bucket, key);
    /* unlike a direct get, the leader read needs a leader: during an election (unavailable) it
     * is asked again, for at most CLU_LATEST_WAIT_MS */
    clu_retry_init(&r, CLU_LATEST_WAIT_MS);
    while ((ns = js_GetLastMsg(m, c->js, stream, subj, NULL, &ec)) != NATS_OK &&
           classify(ns, nats_GetLastError(NULL)) == PATINA_E_UNAVAILABLE && clu_retry(&r, PATINA_E_UNAVAILABLE)) {}
    if (ns != NATS_OK) {
        *m = NULL;
        return ns;
    }
    if (natsMsgHeader_Get(*m, "KV-Operation", &op) == NATS_OK && op && (!strcmp(op, "DEL") || !strcmp(op, "PURGE"))) {
        natsMsg_Destroy(*m);
        *m = NULL;
        return NATS_NOT_FOUND;
    }
    return NATS_OK;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void clu_retry_init(clu_retry_t *r, int wait_ms)
{
    r->deadline = mono_s() + wait_ms / 1000.0;
    r->delay_ms = 100;
    r->tries = 0;
    r->wait_ms = wait_ms;
}

int clu_retry(clu_retry_t *r, patina_status s)
{
    double left;
    r->tries++;
    if (s != PATINA_E_UNAVAILABLE && s != PATINA_E_STORE) return 0;
    left = r->deadline - mono_s();
    if (left <= 0) {
        if (r->tries > 1) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", clu_last_error());
            clu_fail(s, "%s (tried %d times in %d s)", msg, r->tries, r->wait_ms / 1000);
        }
        return 0;
    }
    {
        const double ms = (double)r->delay_ms < left * 1000 ? (double)r->delay_ms : left * 1000;
        usleep((useconds_t)(ms * 1000));
    }
    r->delay_ms = r->delay_ms * 2 < 2000 ? r->delay_ms * 2 : 2000;
    return 1;
}

patina_status clu_kv_open_wait(kvStore **kv, clu_conn_t *c, const char *bucket, int wait_ms)
{
    clu_retry_t r;
    patina_status s;
    clu_retry_init(&r, wait_ms);
    while ((s = clu_kv_open(kv, c, bucket)) != PATINA_OK && clu_retry(&r, s)) {}
    return s;
}
