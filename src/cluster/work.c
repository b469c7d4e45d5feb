/* Bulk indexing across the cluster: the work queue and its workers.
 *
 * `patina index COLL --cluster URL --distribute PATHS...` puts one message
 * per file on the work-queue stream patina_COLL_work (subject
 * patina.COLL.work; retention WorkQueue: a message is gone once acked). The
 * workers -- every `patina shard` unless --no-work, and `patina worker` --
 * pull them through one durable consumer, patina_COLL_workers (explicit
 * acks, AckWait, MaxDeliver bounded): a worker that dies holding items
 * leaves them to be delivered again to another once AckWait passes; one
 * working on them keeps them with in-progress acks. A worker decodes and
 * extracts its items with the collection's tables (ingest.c), writes them
 * through the buckets (clu_writer: confirmed as every write), publishes
 * each file's result on patina.COLL.job.JOBID (the stream patina_COLL_jobs
 * keeps results for a day, so an indexer that reconnects misses none) and
 * only then acks the item. A file that fails (corrupt, unreadable) is acked
 * with its error as the result; a failure that is not the file's (the
 * store or the device) is not acked but nak'ed, to be tried again.
 *
 * So an item may be done twice (a worker that stalls past AckWait and
 * resumes): writes are by key (the second keeps the first's id and record)
 * and the indexer counts each file's first result only. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster/conn.h"

#define ACK_WAIT_DEFAULT_MS 30000
#define MAX_DELIVER 5
#define JOBS_MAX_AGE_S (24 * 3600)
#define FETCH_WAIT_MS 1000
#define RETRY_DELAY_MS 1000

/* ----------------------------------------------------------------- names */

void clu_work_names(clu_work_names_t *n, const char *coll)
{
    snprintf(n->stream, sizeof n->stream, "patina_%s_work", coll);
    snprintf(n->subject, sizeof n->subject, "patina.%s.work", coll);
    snprintf(n->consumer, sizeof n->consumer, "patina_%s_workers", coll);
    snprintf(n->jobs, sizeof n->jobs, "patina_%s_jobs", coll);
    snprintf(n->jobs_subjects, sizeof n->jobs_subjects, "patina.%s.job.>", coll);
    snprintf(n->advisory, sizeof n->advisory, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.%s.%s", n->stream,
             n->consumer);
}

void clu_work_job_subject(char *buf, size_t size, const char *coll, const char *job)
{
    snprintf(buf, size, "patina.%s.job.%s", coll, job);
}

/* ----------------------------------------------------------------- codec */

static const uint8_t WORK_MAGIC[4] = {'P', 'W', '1', 0};

static void put_header(clu_buf_t *b, uint16_t kind)
{
    clu_put_raw(b, WORK_MAGIC, 4);
    clu_put_u16(b, CLU_WORK_VERSION);
    clu_put_u16(b, kind);
}

static patina_status get_header(clu_rd_t *r, uint16_t kind, const char *what)
{
    const uint8_t *m = clu_get_raw(r, 4, "magic");
    uint16_t v, k;
    if (!m) return clu_fail(PATINA_E_CORRUPT, "cluster: %s: %zu bytes, no header", what, r->n);
    if (memcmp(m, WORK_MAGIC, 4)) return clu_fail(PATINA_E_FORMAT, "cluster: %s: not a work message", what);
    v = clu_get_u16(r, "version");
    k = clu_get_u16(r, "kind");
    if (r->bad) return clu_fail(PATINA_E_CORRUPT, "cluster: %s: truncated header", what);
    if (v != CLU_WORK_VERSION) return clu_fail(PATINA_E_FORMAT, "cluster: %s: version %u (this program reads %u)", what, v, CLU_WORK_VERSION);
    if (k != kind) return clu_fail(PATINA_E_FORMAT, "cluster: %s: kind %u, not %u", what, k, kind);
    return PATINA_OK;
}

static patina_status get_end(clu_rd_t *r, const char *what)
{
    if (r->bad) return clu_fail(PATINA_E_CORRUPT, "cluster: %s: truncated or malformed (%s)", what, r->bad);
    if (r->off != r->n) return clu_fail(PATINA_E_CORRUPT, "cluster: %s: %zu bytes after its end", what, r->n - r->off);
    return PATINA_OK;
}

/* A job id and a relative path as a worker accepts them. */
static int job_ok(const char *j) { return j && clu_name_ok(j); }

int clu_work_path_ok(const char *p)
{
    const char *s = p;
    if (!p || !*p || *p == '/') return 0;
    while (*s) { /* no component ".." */
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 2 && s[0] == '.' && s[1] == '.') return 0;
        s += n;
        if (*s == '/') s++;
    }
    return 1;
}

patina_status clu_work_item_encode(clu_buf_t *b, const clu_work_item_t *it)
{
    put_header(b, CLU_WORK_ITEM);
    clu_put_str(b, it->job);
    clu_put_u64(b, it->index);
    clu_put_str(b, it->key);
    clu_put_str(b, it->path);
    clu_put_u8(b, (uint8_t)(it->has_data != 0));
    clu_put_blob(b, it->data, it->has_data ? it->size : 0);
    clu_put_u64(b, (uint64_t)it->mtime);
    clu_put_str(b, it->family);
    clu_put_u8(b, (uint8_t)(it->strict != 0));
    clu_put_u8(b, (uint8_t)(it->apply_orientation != 0));
    return b->oom ? clu_fail(PATINA_E_NOMEM, "cluster: work item over %u bytes or out of memory", CLU_MSG_MAX)
                  : PATINA_OK;
}

patina_status clu_work_item_decode(clu_work_item_t *it, const void *data, size_t n)
{
    clu_rd_t r;
    uint8_t flag;
    memset(it, 0, sizeof *it);
    clu_rd_init(&r, data, n);
    PATINA_TRY_CLU(get_header(&r, CLU_WORK_ITEM, "work item"));
    it->job = clu_get_str(&r, CLU_NAME_MAX, "job");
    it->index = clu_get_u64(&r, "index");
    it->key = clu_get_str(&r, 4096, "key");
    it->path = clu_get_str(&r, 4096, "path");
    flag = clu_get_u8(&r, "has_data");
    it->data = clu_get_blob(&r, &it->size, CLU_MSG_MAX, "data");
    it->mtime = (int64_t)clu_get_u64(&r, "mtime");
    it->family = clu_get_str(&r, CLU_SPEC_MAX, "family");
    it->strict = clu_get_u8(&r, "strict");
    it->apply_orientation = clu_get_u8(&r, "orientation");
    PATINA_TRY_CLU(get_end(&r, "work item"));
    it->has_data = flag;
    if (flag > 1 || it->strict > 1 || it->apply_orientation > 1)
        return clu_fail(PATINA_E_CORRUPT, "cluster: work item: a flag is neither 0 nor 1");
    if (!job_ok(it->job)) return clu_fail(PATINA_E_CORRUPT, "cluster: work item: job '%s' is not [A-Za-z0-9_-]+", it->job);
    if (!*it->key) return clu_fail(PATINA_E_CORRUPT, "cluster: work item %s/%llu: no key", it->job, (unsigned long long)it->index);
    if (!it->has_data && !clu_work_path_ok(it->path))
        return clu_fail(PATINA_E_CORRUPT, "cluster: work item %s/%llu: path '%s' is not relative below the root",
                        it->job, (unsigned long long)it->index, it->path);
    return PATINA_OK;
}

patina_status clu_work_result_encode(clu_buf_t *b, const clu_work_result_t *r)
{
    put_header(b, CLU_WORK_RESULT);
    clu_put_str(b, r->job);
    clu_put_u64(b, r->index);
    clu_put_u32(b, (uint32_t)r->status);
    clu_put_str(b, r->message);
    clu_put_str(b, r->warning);
    clu_put_u64(b, r->id);
    clu_put_u32(b, r->delivered);
    clu_put_str(b, r->worker);
    return b->oom ? clu_fail(PATINA_E_NOMEM, "cluster: out of memory") : PATINA_OK;
}

patina_status clu_work_result_decode(clu_work_result_t *r, const void *data, size_t n)
{
    clu_rd_t rd;
    memset(r, 0, sizeof *r);
    clu_rd_init(&rd, data, n);
    PATINA_TRY_CLU(get_header(&rd, CLU_WORK_RESULT, "work result"));
    r->job = clu_get_str(&rd, CLU_NAME_MAX, "job");
    r->index = clu_get_u64(&rd, "index");
    r->status = (patina_status)clu_get_u32(&rd, "status");
    r->message = clu_get_str(&rd, 8192, "message");
    r->warning = clu_get_str(&rd, 8192, "warning");
    r->id = clu_get_u64(&rd, "id");
    r->delivered = clu_get_u32(&rd, "delivered");
    r->worker = clu_get_str(&rd, 256, "worker");
    PATINA_TRY_CLU(get_end(&rd, "work result"));
    if (!job_ok(r->job)) return clu_fail(PATINA_E_CORRUPT, "cluster: work result: job '%s' is not [A-Za-z0-9_-]+", r->job);
    return PATINA_OK;
}

/* ----------------------------------------------------------------- setup */

static patina_status stream_ensure(clu_conn_t *c, const char *name, const char *subject, jsRetentionPolicy ret,
                                   int64_t max_age_ns, int replicas)
{
    jsStreamInfo *si = NULL;
    jsStreamConfig sc;
    jsErrCode jerr = 0;
    const char *subjects[1] = {subject};
    natsStatus ns = js_GetStreamInfo(&si, c->js, name, NULL, &jerr);
    if (ns == NATS_OK) {
        jsStreamInfo_Destroy(si);
        return PATINA_OK;
    }
    if (ns != NATS_NOT_FOUND) return clu_nats_fail(ns, "cluster: stream %s", name);
    jsStreamConfig_Init(&sc);
    sc.Name = name;
    sc.Subjects = subjects;
    sc.SubjectsLen = 1;
    sc.Retention = ret;
    sc.MaxAge = max_age_ns;
    sc.Storage = js_FileStorage;
    sc.Replicas = replicas;
    ns = js_AddStream(&si, c->js, &sc, NULL, &jerr);
    if (ns == NATS_OK) jsStreamInfo_Destroy(si);
    else if (jerr == JSStreamNameExistErr) ns = NATS_OK; /* made meanwhile by another process */
    if (ns != NATS_OK) return clu_nats_fail(ns, "cluster: creating stream %s", name);
    return PATINA_OK;
}

patina_status clu_work_setup(clu_conn_t *c, const clu_config_t *cfg, int64_t ack_wait_ms, int64_t *ack_wait_out)
{
    clu_work_names_t nm;
    jsConsumerInfo *ci = NULL;
    jsConsumerConfig cc;
    jsErrCode jerr = 0;
    natsStatus ns;
    clu_work_names(&nm, cfg->name);
    PATINA_TRY_CLU(stream_ensure(c, nm.stream, nm.subject, js_WorkQueuePolicy, 0, cfg->replicas));
    PATINA_TRY_CLU(stream_ensure(c, nm.jobs, nm.jobs_subjects, js_LimitsPolicy, (int64_t)JOBS_MAX_AGE_S * 1000000000,
                                 cfg->replicas));
    ns = js_GetConsumerInfo(&ci, c->js, nm.stream, nm.consumer, NULL, &jerr);
    if (ns == NATS_OK && (ack_wait_ms <= 0 || ci->Config->AckWait == ack_wait_ms * 1000000)) {
        if (ack_wait_out) *ack_wait_out = ci->Config->AckWait / 1000000;
        jsConsumerInfo_Destroy(ci);
        return PATINA_OK;
    }
    if (ns != NATS_OK && ns != NATS_NOT_FOUND) return clu_nats_fail(ns, "cluster: consumer %s", nm.consumer);
    if (ci) jsConsumerInfo_Destroy(ci);
    ci = NULL;
    jsConsumerConfig_Init(&cc);
    cc.Durable = nm.consumer;
    cc.AckPolicy = js_AckExplicit;
    cc.AckWait = (ack_wait_ms > 0 ? ack_wait_ms : ACK_WAIT_DEFAULT_MS) * 1000000;
    cc.MaxDeliver = MAX_DELIVER;
    cc.DeliverPolicy = js_DeliverAll;
    cc.FilterSubject = nm.subject;
    if (ns == NATS_OK) {
        ns = js_UpdateConsumer(&ci, c->js, nm.stream, &cc, NULL, &jerr);
    } else {
        ns = js_AddConsumer(&ci, c->js, nm.stream, &cc, NULL, &jerr);
        if (ns != NATS_OK && (ns = js_GetConsumerInfo(&ci, c->js, nm.stream, nm.consumer, NULL, &jerr)) == NATS_OK &&
            ack_wait_ms > 0) { /* made meanwhile by another process: ours is the AckWait asked for */
            jsConsumerInfo_Destroy(ci);
            ci = NULL;
            ns = js_UpdateConsumer(&ci, c->js, nm.stream, &cc, NULL, &jerr);
        }
    }
    if (ns != NATS_OK) return clu_nats_fail(ns, "cluster: consumer %s of stream %s", nm.consumer, nm.stream);
    if (ack_wait_out) *ack_wait_out = ci->Config->AckWait / 1000000;
    jsConsumerInfo_Destroy(ci);
    return PATINA_OK;
}

/* ---------------------------------------------------------------- worker */

void clu_worker_opts_init(clu_worker_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->root = ".";
    o->device = PATINA_DEVICE_AUTO;
    o->batch = 8;
}

/* The messages a worker holds: kept alive by in-progress acks. */
typedef struct held {
    pthread_mutex_t mu;
    natsMsg **m;
    int n;
} held_t;

typedef struct worker {
    clu_worker_opts_t o;
    char name[CLU_NAME_MAX + 1];
    clu_session_t *ss;
    clu_conn_t *c;
    clu_config_t cfg;
    clu_work_names_t nm;
    patina_context_t *ctx;
    clu_writer_t *w;
    natsSubscription *sub;
    int64_t ack_wait_ms;
    held_t held;
    volatile int stop_keeper;
    /* one ingest per (family, strict, orientation) met, made on first use */
    struct {
        char family[CLU_SPEC_MAX + 1];
        int strict, orient;
        clu_ingest_t *g;
    } ing[8];
    int ning;
    unsigned long long done, failed, retried;
} worker_t;

static void wlog(worker_t *wk, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wlog(worker_t *wk, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "patina worker %s: ", wk->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Every third of AckWait: an in-progress ack for each message held, so that
 * a batch that takes longer than AckWait is not delivered to another. */
static void *keeper(void *arg)
{
    worker_t *wk = arg;
    int64_t period = wk->ack_wait_ms / 3 > 100 ? wk->ack_wait_ms / 3 : 100, waited = 0;
    while (!wk->stop_keeper) {
        int i;
        sleep_ms(100);
        if ((waited += 100) < period) continue;
        waited = 0;
        pthread_mutex_lock(&wk->held.mu);
        for (i = 0; i < wk->held.n; i++)
            if (wk->held.m[i]) natsMsg_InProgress(wk->held.m[i], NULL);
        pthread_mutex_unlock(&wk->held.mu);
    }
    return NULL;
}

/* Acks (0), naks to be tried again (1) or terminates (2) m, under the lock
 * the keeper takes to send in-progress acks of the same messages. */
static void settle(worker_t *wk, natsMsg *m, int how)
{
    pthread_mutex_lock(&wk->held.mu);
    if (how == 0) natsMsg_Ack(m, NULL);
    else if (how == 1) natsMsg_NakWithDelay(m, RETRY_DELAY_MS, NULL);
    else natsMsg_Term(m, NULL);
    pthread_mutex_unlock(&wk->held.mu);
}

static clu_ingest_t *ingest_for(worker_t *wk, const clu_work_item_t *it, char *err, size_t errsize)
{
    clu_ingest_opts_t io;
    int i;
    for (i = 0; i < wk->ning; i++)
        if (!strcmp(wk->ing[i].family, it->family) && wk->ing[i].strict == it->strict &&
            wk->ing[i].orient == it->apply_orientation)
            return wk->ing[i].g;
    if (wk->ning == (int)(sizeof wk->ing / sizeof wk->ing[0])) { /* a new set of options: the oldest goes */
        clu_ingest_free(wk->ing[0].g);
        memmove(&wk->ing[0], &wk->ing[1], sizeof wk->ing[0] * (size_t)(wk->ning - 1));
        wk->ning--;
    }
    clu_ingest_opts_init(&io);
    io.family = it->family;
    io.device = wk->o.device;
    io.strict = it->strict;
    io.apply_orientation = it->apply_orientation;
    i = wk->ning;
    if (clu_ingest_new(&wk->ing[i].g, wk->ctx, wk->w, &wk->cfg, &io) != PATINA_OK) {
        snprintf(err, errsize, "%s", clu_last_error());
        return NULL;
    }
    snprintf(wk->ing[i].family, sizeof wk->ing[i].family, "%s", it->family);
    wk->ing[i].strict = it->strict;
    wk->ing[i].orient = it->apply_orientation;
    wk->ning++;
    return wk->ing[i].g;
}

/* The result of item it goes to its job's subject; then the item is acked.
 * 0 when both were done. */
static int report(worker_t *wk, natsMsg *m, const clu_work_item_t *it, patina_status st, const char *msg,
                  const char *warning, uint64_t id, uint32_t delivered)
{
    clu_work_result_t r = {.job = it->job, .index = it->index, .status = st, .message = msg ? msg : "",
                           .warning = warning ? warning : "", .id = id, .delivered = delivered, .worker = wk->name};
    clu_buf_t b = {0};
    char subj[256];
    jsErrCode jerr = 0;
    natsStatus ns = NATS_NO_MEMORY;
    clu_work_job_subject(subj, sizeof subj, wk->cfg.name, it->job);
    if (clu_work_result_encode(&b, &r) == PATINA_OK) ns = js_Publish(NULL, wk->c->js, subj, b.p, (int)b.n, NULL, &jerr);
    clu_buf_release(&b);
    if (ns != NATS_OK) {
        clu_nats_fail(ns, "publishing the result of %s/%llu", it->job, (unsigned long long)it->index);
        wlog(wk, "%s; the item will be tried again", clu_last_error());
        settle(wk, m, 1);
        return -1;
    }
    settle(wk, m, 0);
    return 0;
}

/* Does the items of one fetch: those with the same options as the first
 * together, then the next options, ... */
static void work_batch(worker_t *wk, natsMsg **msgs, int n)
{
    clu_work_item_t *its = calloc((size_t)n, sizeof *its);
    clu_ingest_item_t *items = calloc((size_t)n, sizeof *items);
    clu_ingest_result_t *res = calloc((size_t)n, sizeof *res);
    char (*paths)[4096] = calloc((size_t)n, sizeof *paths);
    uint32_t *delivered = calloc((size_t)n, sizeof *delivered);
    int *todo = calloc((size_t)n, sizeof *todo), *pick = calloc((size_t)n, sizeof *pick);
    int i, left = 0;
    if (!its || !items || !res || !paths || !delivered || !todo || !pick) {
        for (i = 0; i < n; i++) settle(wk, msgs[i], 1);
        wlog(wk, "out of memory for %d items", n);
        goto out;
    }
    for (i = 0; i < n; i++) {
        jsMsgMetaData *md = NULL;
        if (natsMsg_GetMetaData(&md, msgs[i]) == NATS_OK) {
            delivered[i] = (uint32_t)md->NumDelivered;
            jsMsgMetaData_Destroy(md);
        }
        if (clu_work_item_decode(&its[i], natsMsg_GetData(msgs[i]), (size_t)natsMsg_GetDataLength(msgs[i])) !=
            PATINA_OK) {
            wlog(wk, "dropped a message on %s: %s", natsMsg_GetSubject(msgs[i]), clu_last_error());
            settle(wk, msgs[i], 2);
            continue;
        }
        todo[i] = 1;
        left++;
    }
    while (left > 0) {
        clu_work_item_t *first = NULL;
        clu_ingest_t *g;
        char err[512] = "";
        int np = 0, k;
        for (i = 0; i < n; i++) {
            if (!todo[i]) continue;
            if (!first) first = &its[i];
            if (strcmp(its[i].family, first->family) || its[i].strict != first->strict ||
                its[i].apply_orientation != first->apply_orientation)
                continue;
            todo[i] = 0;
            left--;
            pick[np] = i;
            if (its[i].has_data) {
                items[np] = (clu_ingest_item_t){.name = its[i].key, .data = its[i].data, .size = its[i].size,
                                                .key = its[i].key, .mtime = its[i].mtime};
            } else {
                snprintf(paths[i], sizeof paths[i], "%s/%s", wk->o.root, its[i].path);
                items[np] = (clu_ingest_item_t){.name = paths[i], .path = paths[i], .key = its[i].key};
            }
            np++;
        }
        if (!(g = ingest_for(wk, first, err, sizeof err))) { /* a table the collection lacks: the file's job fails */
            for (k = 0; k < np; k++) {
                report(wk, msgs[pick[k]], &its[pick[k]], PATINA_E_INVALID, err, NULL, 0, delivered[pick[k]]);
                wk->failed++;
            }
            continue;
        }
        clu_ingest_run(g, items, (size_t)np, res);
        for (k = 0; k < np; k++) {
            const int j = pick[k];
            if (res[k].status != PATINA_OK && res[k].retry) {
                wlog(wk, "%s; the item will be tried again", res[k].error);
                settle(wk, msgs[j], 1);
                wk->retried++;
                continue;
            }
            if (res[k].status == PATINA_OK) wk->done++;
            else wk->failed++;
            report(wk, msgs[j], &its[j], res[k].status, res[k].status == PATINA_OK ? "" : res[k].error,
                   res[k].warning, res[k].id, delivered[j]);
        }
    }
out:
    free(its);
    free(items);
    free(res);
    free(paths);
    free(delivered);
    free(todo);
    free(pick);
}

static void worker_close(worker_t *wk)
{
    int i;
    for (i = 0; i < wk->ning; i++) clu_ingest_free(wk->ing[i].g);
    if (wk->sub) natsSubscription_Destroy(wk->sub);
    clu_writer_free(wk->w);
    patina_context_free(wk->ctx);
    clu_session_close(wk->ss);
    pthread_mutex_destroy(&wk->held.mu);
    free(wk->held.m);
}

patina_status clu_worker_run(const char *urls, const char *coll, const clu_worker_opts_t *o, volatile int *stop)
{
    worker_t wk;
    clu_front_opts_t fo;
    patina_context_opts_t copts;
    jsSubOptions so;
    jsErrCode jerr = 0;
    pthread_t kt;
    patina_status s;
    natsStatus ns;
    int batch = o->batch > 0 ? (o->batch < CLU_INGEST_MAX ? o->batch : CLU_INGEST_MAX) : 8, keeping;
    memset(&wk, 0, sizeof wk);
    wk.o = *o;
    wk.o.batch = batch;
    pthread_mutex_init(&wk.held.mu, NULL);
    if (o->name) {
        snprintf(wk.name, sizeof wk.name, "%s", o->name);
    } else {
        char host[64] = "host";
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = '\0';
        for (char *h = host; *h; h++)
            if (!((*h >= 'a' && *h <= 'z') || (*h >= 'A' && *h <= 'Z') || (*h >= '0' && *h <= '9') || *h == '-')) *h = '-';
        snprintf(wk.name, sizeof wk.name, "%.40s-%ld", host, (long)getpid());
    }
    if (!(wk.held.m = calloc((size_t)batch, sizeof *wk.held.m))) {
        worker_close(&wk);
        return clu_fail(PATINA_E_NOMEM, "worker: out of memory");
    }
    clu_front_opts_init(&fo);
    if ((s = clu_session_open(&wk.ss, urls, coll, &fo)) != PATINA_OK) {
        worker_close(&wk);
        return s;
    }
    wk.c = clu_session_conn(wk.ss);
    wk.cfg = *clu_session_config(wk.ss);
    clu_work_names(&wk.nm, coll);
    patina_context_opts_init(&copts);
    copts.threads = o->threads;
    copts.gpus = o->gpus;
    if (o->max_pixels) copts.limits.max_pixels = o->max_pixels;
    if (patina_context_new(&wk.ctx, &copts) != PATINA_OK) s = clu_fail_lib(PATINA_E_INVALID, "worker: context");
    if (s == PATINA_OK) s = clu_writer_new(&wk.w, wk.c, &wk.cfg, clu_session_front(wk.ss));
    if (s == PATINA_OK) s = clu_work_setup(wk.c, &wk.cfg, 0, &wk.ack_wait_ms);
    if (s == PATINA_OK) {
        jsSubOptions_Init(&so);
        so.Stream = wk.nm.stream;
        so.Consumer = wk.nm.consumer;
        ns = js_PullSubscribe(&wk.sub, wk.c->js, wk.nm.subject, wk.nm.consumer, NULL, &so, &jerr);
        if (ns != NATS_OK) s = clu_nats_fail(ns, "worker: pulling from consumer %s", wk.nm.consumer);
    }
    if (s != PATINA_OK) {
        worker_close(&wk);
        return s;
    }
    keeping = pthread_create(&kt, NULL, keeper, &wk) == 0;
    wlog(&wk, "taking work items of %s (stream %s, %d at a time, AckWait %lld ms, root %s)", coll, wk.nm.stream,
         batch, (long long)wk.ack_wait_ms, o->root);
    while (!*stop) {
        natsMsgList list = {0};
        int i;
        ns = natsSubscription_Fetch(&list, wk.sub, batch, FETCH_WAIT_MS, &jerr);
        if (ns == NATS_TIMEOUT) continue;
        if (ns != NATS_OK) {
            if (!*stop) wlog(&wk, "fetching work items: %s", natsStatus_GetText(ns));
            sleep_ms(RETRY_DELAY_MS);
            continue;
        }
        pthread_mutex_lock(&wk.held.mu);
        for (i = 0; i < list.Count; i++) wk.held.m[i] = list.Msgs[i];
        wk.held.n = list.Count;
        pthread_mutex_unlock(&wk.held.mu);
        work_batch(&wk, list.Msgs, list.Count);
        pthread_mutex_lock(&wk.held.mu);
        wk.held.n = 0;
        pthread_mutex_unlock(&wk.held.mu);
        natsMsgList_Destroy(&list);
    }
    wk.stop_keeper = 1;
    if (keeping) pthread_join(kt, NULL);
    wlog(&wk, "stopped: %llu written, %llu failed, %llu given back to be tried again", wk.done, wk.failed,
         wk.retried);
    worker_close(&wk);
    return PATINA_OK;
}

/* A worker inside another process (patina shard): a thread. */
struct clu_work {
    pthread_t th;
    char *urls, *coll;
    clu_worker_opts_t o;
    char root[4096], name[CLU_NAME_MAX + 1], gpus[128];
    volatile int stop;
};

static void *work_thread(void *arg)
{
    clu_work_t *w = arg;
    if (clu_worker_run(w->urls, w->coll, &w->o, &w->stop) != PATINA_OK)
        fprintf(stderr, "patina worker %s: %s\n", w->name[0] ? w->name : "", clu_last_error());
    return NULL;
}

patina_status clu_work_start(clu_work_t **out, const char *urls, const char *coll, const clu_worker_opts_t *o)
{
    clu_work_t *w = calloc(1, sizeof *w);
    *out = NULL;
    if (!w || !(w->urls = strdup(urls)) || !(w->coll = strdup(coll))) {
        if (w) free(w->urls);
        free(w);
        return clu_fail(PATINA_E_NOMEM, "worker: out of memory");
    }
    w->o = *o;
    snprintf(w->root, sizeof w->root, "%s", o->root ? o->root : ".");
    w->o.root = w->root;
    if (o->name) snprintf(w->name, sizeof w->name, "%s", o->name);
    w->o.name = o->name ? w->name : NULL;
    if (o->gpus) snprintf(w->gpus, sizeof w->gpus, "%s", o->gpus);
    w->o.gpus = o->gpus ? w->gpus : NULL;
    if (pthread_create(&w->th, NULL, work_thread, w) != 0) {
        free(w->urls);
        free(w->coll);
        free(w);
        return clu_fail(PATINA_E_NOMEM, "worker: cannot start a thread");
    }
    *out = w;
    return PATINA_OK;
}

void clu_work_stop(clu_work_t *w)
{
    if (!w) return;
    w->stop = 1;
    pthread_join(w->th, NULL);
    free(w->urls);
    free(w->coll);
    free(w);
}
