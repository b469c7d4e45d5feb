/* The front end's scatter / gather: one request per shard that is chosen
 * for some partition, in parallel, each with a deadline; partitions not
 * answered in a round (a dead shard answers at once with "no responders",
 * a slow one at the deadline) are asked of their next ready copy in the
 * next round; the answers are merged exactly (merge.c). Stateless but for a
 * short cache of the members and the count of requests outstanding per
 * shard (a partition goes to its least loaded ready copy, rendezvous order
 * breaking ties, so the active copy is preferred). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster/conn.h"

#define MEMBERS_CACHE_S 0.25
#define LOAD_MAX 256

struct clu_front {
    clu_conn_t *c;
    clu_config_t cfg;
    clu_front_opts_t o;
    pthread_mutex_t mu;
    clu_member_t *m; /* cached members */
    size_t nm;
    double read_at;
    struct {
        char name[CLU_NAME_MAX + 1];
        int outstanding;
    } load[LOAD_MAX];
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void clu_front_opts_init(clu_front_opts_t *o)
{
    o->deadline_ms = 5000;
    o->allow_partial = 1;
}

patina_status clu_front_new(clu_front_t **out, clu_conn_t *c, const clu_config_t *cfg, const clu_front_opts_t *o)
{
    clu_front_t *f = calloc(1, sizeof *f);
    *out = NULL;
    if (!f) return clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
    f->c = c;
    f->cfg = *cfg;
    if (o) f->o = *o;
    else clu_front_opts_init(&f->o);
    pthread_mutex_init(&f->mu, NULL);
    *out = f;
    return PATINA_OK;
}

void clu_front_free(clu_front_t *f)
{
    if (!f) return;
    clu_members_free(f->m, f->nm);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

static int *load_of(clu_front_t *f, const char *name)
{
    size_t i;
    for (i = 0; i < LOAD_MAX && f->load[i].name[0]; i++)
        if (!strcmp(f->load[i].name, name)) return &f->load[i].outstanding;
    if (i == LOAD_MAX) i = 0;
    snprintf(f->load[i].name, sizeof f->load[i].name, "%s", name);
    f->load[i].outstanding = 0;
    return &f->load[i].outstanding;
}

/* A snapshot of the members (copied out of the cache, caller frees). */
static patina_status members(clu_front_t *f, clu_member_t **out, size_t *n, int fresh)
{
    size_t i;
    pthread_mutex_lock(&f->mu);
    if (fresh || !f->m || now_s() - f->read_at > MEMBERS_CACHE_S) {
        clu_member_t *m = NULL;
        size_t nm = 0;
        patina_status s = clu_members_read(f->c, &f->cfg, &m, &nm);
        if (s != PATINA_OK) {
            pthread_mutex_unlock(&f->mu);
            return s;
        }
        clu_members_free(f->m, f->nm);
        f->m = m;
        f->nm = nm;
        f->read_at = now_s();
    }
    *n = f->nm;
    *out = calloc(f->nm ? f->nm : 1, sizeof **out);
    for (i = 0; *out && i < f->nm; i++) {
        clu_member_t *d = &(*out)[i];
        *d = f->m[i];
        d->ready = malloc(f->cfg.partitions);
        d->hosted = NULL;
        d->lag = NULL;
        if (d->ready) memcpy(d->ready, f->m[i].ready, f->cfg.partitions);
    }
    pthread_mutex_unlock(&f->mu);
    return *out ? PATINA_OK : clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
}

/* One shard's request of a round. */
typedef struct call {
    clu_front_t *f;
    const clu_member_t *m;
    clu_buf_t req;
    int timeout_ms;
    clu_reply_t reply;
    patina_status s;
    char error[512];
    pthread_t th;
} call_t;

static void *call_run(void *arg)
{
    call_t *c = arg;
    natsMsg *msg = NULL;
    natsStatus ns;
    int *load;
    pthread_mutex_lock(&c->f->mu);
    load = load_of(c->f, c->m->name);
    ++*load;
    pthread_mutex_unlock(&c->f->mu);
    ns = natsConnection_Request(&msg, c->f->c->nc, c->m->subject, c->req.p, (int)c->req.n, c->timeout_ms);
    pthread_mutex_lock(&c->f->mu);
    --*load_of(c->f, c->m->name);
    pthread_mutex_unlock(&c->f->mu);
    if (ns != NATS_OK) {
        c->s = clu_nats_fail(ns, "cluster: shard %s (%s)", c->m->name, c->m->subject);
    } else {
        c->s = clu_reply_decode(&c->reply, natsMsg_GetData(msg), (size_t)natsMsg_GetDataLength(msg));
        if (c->s != PATINA_OK) clu_fail(c->s, "cluster: shard %s: %s", c->m->name, clu_last_error());
        else if (c->reply.status != PATINA_OK)
            c->s = clu_fail(c->reply.status, "cluster: shard %s: %s", c->m->name, c->reply.message);
        natsMsg_Destroy(msg);
    }
    if (c->s != PATINA_OK) snprintf(c->error, sizeof c->error, "%s", clu_last_error());
    return NULL;
}

/* The gathered answers of a scatter: replies[0 .. n) that succeeded. */
typedef struct gather {
    call_t *calls;
    size_t n;
    uint8_t *answered; /* (partitions) */
    uint32_t nanswered;
    char error[512];   /* the last failure, for the message */
} gather_t;

static void gather_release(gather_t *g)
{
    size_t i;
    for (i = 0; i < g->n; i++) clu_reply_release(&g->calls[i].reply);
    free(g->calls);
    free(g->answered);
    memset(g, 0, sizeof *g);
}

/* Scatters request q (its partitions filled per shard) over the ready
 * copies, rounds until every partition is answered or no copy is left. */
static patina_status scatter(clu_front_t *f, clu_request_t *q, gather_t *g, double *ms)
{
    const uint32_t P = f->cfg.partitions;
    clu_member_t *m = NULL;
    size_t nm = 0, i, round;
    uint8_t *tried = NULL; /* (nm, P): member i was asked for p, or failed */
    uint32_t *parts = NULL;
    const double t0 = now_s();
    patina_status s;
    memset(g, 0, sizeof *g);
    PATINA_TRY_CLU(members(f, &m, &nm, 0));
    g->answered = calloc(P, 1);
    tried = calloc(nm * P + 1, 1);
    parts = malloc(P * sizeof *parts);
    if (!g->answered || !tried || !parts) {
        s = clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
        goto out;
    }
    for (round = 0; round < CLU_REPLICAS_MAX + 1; round++) {
        size_t *choice = calloc(P, sizeof *choice), ncalls = 0, first = g->n;
        uint32_t p;
        if (!choice) {
            s = clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
            goto out;
        }
        /* each partition not answered yet: its best ready copy not tried */
        for (p = 0; p < P; p++) {
            clu_member_w_t w[64];
            size_t idx[64], order[64], nc = 0, no, j, best = SIZE_MAX;
            int bestload = 0;
            choice[p] = SIZE_MAX;
            if (g->answered[p]) continue;
            for (i = 0; i < nm && nc < 64; i++)
                if (m[i].ready && m[i].ready[p] && !tried[i * P + p]) {
                    w[nc] = (clu_member_w_t){m[i].name, m[i].capacity};
                    idx[nc++] = i;
                }
            no = clu_rendezvous(w, nc, p, nc < 20 ? nc : 20, order);
            pthread_mutex_lock(&f->mu);
            for (j = 0; j < no; j++) {
                int l = *load_of(f, m[idx[order[j]]].name);
                if (best == SIZE_MAX || l < bestload) {
                    best = idx[order[j]];
                    bestload = l;
                }
            }
            pthread_mutex_unlock(&f->mu);
            choice[p] = best;
        }
        /* one call per member chosen for some partition */
        {
            call_t *more = realloc(g->calls, (g->n + nm + 1) * sizeof *more);
            if (!more) {
                free(choice);
                s = clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
                goto out;
            }
            g->calls = more;
        }
        for (i = 0; i < nm; i++) {
            size_t np = 0;
            call_t *c;
            for (p = 0; p < P; p++)
                if (choice[p] == i) {
                    parts[np++] = p;
                    tried[i * P + p] = 1;
                }
            if (!np) continue;
            c = &g->calls[g->n + ncalls];
            memset(c, 0, sizeof *c);
            c->f = f;
            c->m = &m[i];
            c->timeout_ms = f->o.deadline_ms;
            q->parts = parts;
            q->nparts = np;
            if ((s = clu_request_encode(&c->req, q)) != PATINA_OK) {
                clu_buf_release(&c->req);
                free(choice);
                q->parts = NULL;
                goto out;
            }
            if (pthread_create(&c->th, NULL, call_run, c) != 0) {
                clu_buf_release(&c->req);
                free(choice);
                q->parts = NULL;
                s = clu_fail(PATINA_E_NOMEM, "cluster: cannot start a thread");
                goto out;
            }
            ncalls++;
        }
        q->parts = NULL;
        free(choice);
        if (!ncalls) break;
        g->n += ncalls;
        for (i = first; i < g->n; i++) {
            call_t *c = &g->calls[i];
            size_t j;
            pthread_join(c->th, NULL);
            clu_buf_release(&c->req);
            if (c->s != PATINA_OK) {
                snprintf(g->error, sizeof g->error, "%s", c->error);
                clu_reply_release(&c->reply);
                continue;
            }
            for (j = 0; j < c->reply.nparts; j++) {
                uint32_t pp = c->reply.parts[j];
                /* a partition answered twice (not asked twice in one round): keep the first */
                if (pp < P && !g->answered[pp]) {
                    g->answered[pp] = 1;
                    g->nanswered++;
                } else {
                    c->reply.parts[j] = UINT32_MAX;
                }
            }
        }
        if (g->nanswered == P) break;
    }
    s = PATINA_OK;
out:
    /* the members are referenced by the calls only until they are joined */
    for (i = 0; i < g->n; i++) g->calls[i].m = NULL;
    clu_members_free(m, nm);
    free(tried);
    free(parts);
    *ms = (now_s() - t0) * 1e3;
    if (s != PATINA_OK) gather_release(g);
    return s;
}

/* A reply answered partitions twice: a partition marked UINT32_MAX above is
 * a duplicate; a reply answers its partitions as one merged list, so a
 * reply with a duplicate cannot be split: duplicates arise only when a
 * later round re-asks a partition whose first answer came late, and a
 * later round asks only partitions unanswered, so they do not occur. */

static patina_status coverage_check(clu_front_t *f, const gather_t *g, clu_coverage_t *cov)
{
    cov->partitions = g->nanswered;
    cov->partitions_total = f->cfg.partitions;
    cov->partial = g->nanswered < f->cfg.partitions;
    if (cov->partial && !f->o.allow_partial)
        return clu_fail(PATINA_E_UNAVAILABLE, "cluster: collection %s: %u of %u partitions answered%s%s",
                        f->cfg.name, g->nanswered, f->cfg.partitions, g->error[0] ? "; last failure: " : "",
                        g->error);
    return PATINA_OK;
}

patina_status clu_front_search(clu_front_t *f, const char *spec, const void *queries, size_t nq, size_t qbytes,
                               const patina_table_query_t *q, patina_table_results_t *res, clu_coverage_t *cov)
{
    clu_request_t rq;
    gather_t g;
    patina_table_results_t *parts = NULL;
    size_t i, np = 0;
    patina_status s;
    memset(res, 0, sizeof *res);
    memset(cov, 0, sizeof *cov);
    memset(&rq, 0, sizeof rq);
    rq.kind = CLU_KIND_SEARCH;
    rq.spec = spec;
    rq.query = *q;
    rq.nq = nq;
    rq.qbytes = qbytes;
    rq.queries = queries;
    PATINA_TRY_CLU(scatter(f, &rq, &g, &cov->fanout_ms));
    if ((s = coverage_check(f, &g, cov)) != PATINA_OK) goto out;
    if (!(parts = calloc(g.n + 1, sizeof *parts))) {
        s = clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
        goto out;
    }
    for (i = 0; i < g.n; i++)
        if (g.calls[i].s == PATINA_OK && g.calls[i].reply.nparts && g.calls[i].reply.res.nq == nq)
            parts[np++] = g.calls[i].reply.res;
    if (np) {
        patina_table_query_t qq = *q;
        s = clu_results_merge(parts, np, &qq, res);
    } else {
        res->nq = nq;
        s = (res->offsets = calloc(nq + 1, sizeof *res->offsets)) ? PATINA_OK
                                                                  : clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
    }
    cov->references = res->rows;
out:
    free(parts);
    gather_release(&g);
    return s;
}

patina_status clu_front_identify(clu_front_t *f, const char *spec, const void *queries, size_t nq,
                                 size_t qbytes, const patina_identify_opts_t *opts, patina_identify_hit_t *hits,
                                 patina_identify_result_t *results, char **keys, int *incomplete,
                                 clu_coverage_t *cov)
{
    clu_request_t rq;
    gather_t g;
    const patina_identify_hit_t **ph = NULL;
    const patina_identify_result_t **pr = NULL;
    char *const **pk = NULL;
    const size_t k = clu_identify_part_k(opts);
    size_t i, np = 0, q;
    patina_status s;
    memset(cov, 0, sizeof *cov);
    memset(&rq, 0, sizeof rq);
    rq.kind = CLU_KIND_IDENTIFY;
    rq.spec = spec;
    rq.iopts = *opts;
    rq.nq = nq;
    rq.qbytes = qbytes;
    rq.queries = queries;
    PATINA_TRY_CLU(scatter(f, &rq, &g, &cov->fanout_ms));
    if ((s = coverage_check(f, &g, cov)) != PATINA_OK) goto out;
    ph = calloc(g.n + 1, sizeof *ph);
    pr = calloc(g.n + 1, sizeof *pr);
    pk = calloc(g.n + 1, sizeof *pk);
    if (!ph || !pr || !pk) {
        s = clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
        goto out;
    }
    for (i = 0; i < g.n; i++) {
        const clu_reply_t *r = &g.calls[i].reply;
        if (g.calls[i].s != PATINA_OK || !r->nparts || r->nq != nq || r->k != k) continue;
        ph[np] = r->hits;
        pr[np] = r->results;
        pk[np] = r->keys;
        np++;
    }
    s = clu_identify_merge(ph, pr, pk, np, nq, opts, hits, results, keys);
    if (s == PATINA_OK && np == 0) /* no part: the query's features are not known here */
        for (q = 0; q < nq; q++) results[q].query_features = 0;
    for (q = 0; incomplete && q < nq; q++) incomplete[q] = cov->partial;
out:
    free(ph);
    free(pr);
    free((void *)pk);
    gather_release(&g);
    return s;
}

patina_status clu_front_confirm(clu_front_t *f, uint32_t p, uint64_t rev)
{
    clu_member_t *m = NULL;
    size_t nm = 0, i, n = 0;
    call_t *calls;
    clu_request_t rq;
    patina_status s = PATINA_OK;
    PATINA_TRY_CLU(members(f, &m, &nm, 1));
    if (!(calls = calloc(nm + 1, sizeof *calls))) {
        clu_members_free(m, nm);
        return clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
    }
    memset(&rq, 0, sizeof rq);
    rq.kind = CLU_KIND_CONFIRM;
    rq.partition = p;
    rq.revision = rev;
    rq.timeout_ms = (uint32_t)f->o.deadline_ms;
    for (i = 0; i < nm; i++) {
        call_t *c = &calls[n];
        if (!m[i].ready || !m[i].ready[p]) continue;
        c->f = f;
        c->m = &m[i];
        c->timeout_ms = f->o.deadline_ms + 1000;
        if (clu_request_encode(&c->req, &rq) != PATINA_OK || pthread_create(&c->th, NULL, call_run, c) != 0) {
            clu_buf_release(&c->req);
            continue;
        }
        n++;
    }
    /* a copy that could not confirm withdrew its readiness (or is gone): the write stands */
    for (i = 0; i < n; i++) {
        pthread_join(calls[i].th, NULL);
        clu_buf_release(&calls[i].req);
        clu_reply_release(&calls[i].reply);
    }
    free(calls);
    clu_members_free(m, nm);
    return s;
}
