/* The front end's scatter / gather and write confirmations.
 *
 * A scatter sends one request per shard chosen for some partition (each
 * partition to its active ready copy -- the copy's rank, then rendezvous
 * order -- unless that shard has more than LOAD_SLACK outstanding calls
 * above the least loaded of the partition's copies) and gathers the replies on this front's
 * own inbox subscription (one for the front's life: replies come to
 * INBOX.<scatter>.<call>), so that a request is never waited for by a
 * thread of its own and a slow one can be left behind:
 *   - a call not answered after the hedge delay is hedged: its partitions
 *     not answered yet are sent to their next ready copy while it stays
 *     outstanding; the first complete answer per partition wins;
 *   - a call that fails (no responders: the shard is gone; an error reply;
 *     the deadline) has its partitions asked of their next copy at once
 *     unless another call already asks them;
 *   - a reply is accepted only when none of the partitions it lists was
 *     answered already (a reply is one merged answer over its partitions,
 *     and the merge needs disjoint parts); the partitions a reply does not
 *     list (its shard is not ready for them) are asked elsewhere;
 *   - when nothing is outstanding and partitions are left unanswered, the
 *     members are read again (the snapshot may predate a hand-over) and
 *     those some member now lists ready are asked again (rescue; at most
 *     RESCUE_ROUNDS times, within the deadline).
 * The scatter ends when every partition is answered or no call is
 * outstanding and no copy is left to ask; the accepted replies are merged
 * with the library's exact merges.
 *
 * Stateless but for a short cache of the members (renewed by a thread of
 * its own every MEMBERS_CACHE_S), the requests outstanding
 * per shard and counters (clu_front_stats). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster/conn.h"
#include "identify/identify.h"

#define MEMBERS_CACHE_S 0.25 /* the members are read again this often, by the refresher thread */
#define MEMBERS_STALE_S 2.0  /* a cache older than this (the refresher failing) is read in the query */
#define LOAD_MAX 256
#define LOAD_SLACK 1 /* outstanding calls of difference that still count as a tie (launch) */
#define RESCUE_ROUNDS 3   /* a scatter reads the members again at most this often (rescue) */
#define RESCUE_WAIT_S 0.05 /* and waits this long times the round before the second and third */

typedef struct event {
    size_t call;
    natsMsg *msg;
    struct event *next;
} event_t;

/* One scatter in progress: the subscription's callback queues its replies. */
typedef struct scat {
    uint64_t sid;
    pthread_cond_t cv;
    event_t *head, *tail;
    struct scat *next;
} scat_t;

struct clu_front {
    clu_conn_t *c;
    clu_config_t cfg;
    clu_front_opts_t o;
    pthread_mutex_t mu;
    clu_member_t *m; /* cached members */
    size_t nm;
    double read_at;
    /* the refresher: a thread that reads the members every MEMBERS_CACHE_S (started with the first
     * cache), so that no query pays the read (a few ms of JetStream round trips, which held f->mu
     * and so every concurrent scatter) */
    pthread_t refresher;
    pthread_mutex_t rmu;
    pthread_cond_t rcv;
    int refreshing, stop;
    size_t *plan;    /* (P, plan_r): the shards' assignment of the cached members (clu_assign over
                      * those not leaving), copy k of p in plan[p * plan_r + k] as an index into m;
                      * NULL when it could not be made */
    size_t plan_r;
    struct {
        char name[CLU_NAME_MAX + 1];
        int outstanding;
    } load[LOAD_MAX];
    natsSubscription *sub;
    char inbox[128];
    uint64_t next_sid;
    scat_t *active;
    atomic_ullong n_scatters, n_calls, n_hedges, n_retries, n_failures, n_partial, n_split;
    /* a reply's bytes per hit (a search's or an identification's), the most seen (0: none yet):
     * request_fit sizes a batch's ranges so that their replies fit too */
    atomic_size_t hit_bytes;
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
    o->hedge_ms = -1;
    o->allow_partial = 1;
}

static int hedge_ms(const clu_front_t *f)
{
    if (f->o.hedge_ms >= 0) return f->o.hedge_ms < f->o.deadline_ms ? f->o.hedge_ms : f->o.deadline_ms;
    return f->o.deadline_ms / 5;
}

/* The inbox's callback: a reply goes to the queue of its scatter (dropped
 * when that scatter has ended). */
static void on_reply(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
{
    clu_front_t *f = closure;
    const char *subj = natsMsg_GetSubject(msg), *tail;
    size_t n = strlen(f->inbox);
    unsigned long long sid, call;
    scat_t *sc;
    (void)nc;
    (void)sub;
    if (!subj || strncmp(subj, f->inbox, n) || subj[n] != '.') {
        natsMsg_Destroy(msg);
        return;
    }
    tail = subj + n + 1;
    if (sscanf(tail, "%llu.%llu", &sid, &call) != 2) {
        natsMsg_Destroy(msg);
        return;
    }
    pthread_mutex_lock(&f->mu);
    for (sc = f->active; sc && sc->sid != sid; sc = sc->next) {}
    if (sc) {
        event_t *e = malloc(sizeof *e);
        if (e) {
            e->call = (size_t)call;
            e->msg = msg;
            e->next = NULL;
            if (sc->tail) sc->tail->next = e;
            else sc->head = e;
            sc->tail = e;
            msg = NULL;
            pthread_cond_signal(&sc->cv);
        }
    }
    pthread_mutex_unlock(&f->mu);
    if (msg) natsMsg_Destroy(msg);
}

patina_status clu_front_new(clu_front_t **out, clu_conn_t *c, const clu_config_t *cfg, const clu_front_opts_t *o)
{
    clu_front_t *f = calloc(1, sizeof *f);
    natsInbox *ib = NULL;
    natsStatus ns;
    char subj[160];
    *out = NULL;
    if (!f) return clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
    f->c = c;
    f->cfg = *cfg;
    if (o) f->o = *o;
    else clu_front_opts_init(&f->o);
    if (f->o.deadline_ms <= 0) f->o.deadline_ms = 5000;
    pthread_mutex_init(&f->mu, NULL);
    pthread_mutex_init(&f->rmu, NULL);
    pthread_cond_init(&f->rcv, NULL);
    ns = natsInbox_Create(&ib);
    if (ns == NATS_OK) {
        snprintf(f->inbox, sizeof f->inbox, "%s", (const char *)ib);
        natsInbox_Destroy(ib);
        snprintf(subj, sizeof subj, "%s.>", f->inbox);
        ns = natsConnection_Subscribe(&f->sub, c->nc, subj, on_reply, f);
    }
    if (ns == NATS_OK) ns = natsSubscription_SetPendingLimits(f->sub, -1, -1);
    if (ns != NATS_OK) {
        patina_status s = clu_nats_fail(ns, "cluster: the front end's reply inbox");
        clu_front_free(f);
        return s;
    }
    *out = f;
    return PATINA_OK;
}

void clu_front_free(clu_front_t *f)
{
    if (!f) return;
    pthread_mutex_lock(&f->rmu);
    f->stop = 1;
    pthread_cond_signal(&f->rcv);
    pthread_mutex_unlock(&f->rmu);
    if (f->refreshing) pthread_join(f->refresher, NULL);
    if (f->sub) {
        natsSubscription_Unsubscribe(f->sub);
        natsSubscription_Destroy(f->sub);
    }
    clu_members_free(f->m, f->nm);
    free(f->plan);
    pthread_cond_destroy(&f->rcv);
    pthread_mutex_destroy(&f->rmu);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

void clu_front_stats(clu_front_t *f, clu_front_stats_t *st)
{
    st->scatters = atomic_load(&f->n_scatters);
    st->calls = atomic_load(&f->n_calls);
    st->hedges = atomic_load(&f->n_hedges);
    st->retries = atomic_load(&f->n_retries);
    st->failures = atomic_load(&f->n_failures);
    st->partial = atomic_load(&f->n_partial);
    st->split = atomic_load(&f->n_split);
}

/* f->mu held. */
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

static void load_add(clu_front_t *f, const char *name, int d)
{
    pthread_mutex_lock(&f->mu);
    *load_of(f, name) += d;
    pthread_mutex_unlock(&f->mu);
}

/* f->plan for the cached members (under f->mu): the assignment the shards
 * compute (shard.c: clu_assign over the members not leaving, weight their
 * capacity, copies their --copies), so that a query asks each partition of
 * its active copy first: plain rendezvous order spreads the partitions of
 * shards that all hold them only on average (64 over 2: +-4 is common), and
 * the shard given most sets the query's time, while the assignment gives
 * each its share (32 and 32). NULL when out of memory (rendezvous order). */
static void plan_members(clu_front_t *f)
{
    const uint32_t P = f->cfg.partitions;
    size_t r = 1, nw = 0, i, k;
    clu_member_w_t *w = calloc(f->nm + 1, sizeof *w);
    size_t *idx = calloc(f->nm + 1, sizeof *idx), *plan = NULL;
    free(f->plan);
    f->plan = NULL;
    f->plan_r = 0;
    for (i = 0; i < f->nm; i++)
        if (f->m[i].copies > 0 && (size_t)f->m[i].copies > r) r = (size_t)f->m[i].copies;
    if (w && idx && (plan = malloc((size_t)P * r * sizeof *plan))) {
        for (i = 0; i < f->nm; i++)
            if (!f->m[i].leaving) {
                idx[nw] = i;
                w[nw++] = (clu_member_w_t){f->m[i].name, f->m[i].capacity};
            }
        if (clu_assign(w, nw, P, r, plan) == PATINA_OK) {
            for (k = 0; k < (size_t)P * r; k++)
                if (plan[k] != SIZE_MAX) plan[k] = idx[plan[k]];
            f->plan = plan;
            f->plan_r = r;
            plan = NULL;
        }
    }
    free(plan);
    free(w);
    free(idx);
}

/* Reads the members (outside f->mu) and puts them in the cache with their
 * assignment. */
static patina_status members_read(clu_front_t *f)
{
    clu_member_t *m = NULL;
    size_t nm = 0;
    const double at = now_s();
    patina_status s = clu_members_read(f->c, &f->cfg, &m, &nm);
    if (s != PATINA_OK) return s;
    pthread_mutex_lock(&f->mu);
    if (at >= f->read_at) { /* a read that started later may have landed first: keep the newer */
        clu_members_free(f->m, f->nm);
        f->m = m;
        f->nm = nm;
        f->read_at = at;
        plan_members(f);
        m = NULL;
    }
    pthread_mutex_unlock(&f->mu);
    clu_members_free(m, nm);
    return PATINA_OK;
}

static void *refresher_main(void *arg)
{
    clu_front_t *f = arg;
    pthread_mutex_lock(&f->rmu);
    while (!f->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)(MEMBERS_CACHE_S * 1e9);
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&f->rcv, &f->rmu, &ts);
        if (f->stop) break;
        pthread_mutex_unlock(&f->rmu);
        (void)members_read(f); /* failed: a query reads the members itself once the cache is stale */
        pthread_mutex_lock(&f->rmu);
    }
    pthread_mutex_unlock(&f->rmu);
    return NULL;
}

/* A snapshot of the members (copied out of the cache, caller frees) and,
 * when plan is not NULL, of their assignment (*plan: (P, *plan_r) member
 * indices, NULL when there is none; caller frees). fresh, no cache yet, or
 * a cache the refresher has not renewed for MEMBERS_STALE_S: read now. */
static patina_status members(clu_front_t *f, clu_member_t **out, size_t *n, int fresh, size_t **plan,
                             size_t *plan_r)
{
    const uint32_t P = f->cfg.partitions;
    size_t i;
    int read;
    pthread_mutex_lock(&f->mu);
    read = fresh || !f->m || now_s() - f->read_at > MEMBERS_STALE_S;
    pthread_mutex_unlock(&f->mu);
    if (read) PATINA_TRY_CLU(members_read(f));
    pthread_mutex_lock(&f->rmu);
    if (!f->refreshing && !f->stop)
        f->refreshing = pthread_create(&f->refresher, NULL, refresher_main, f) == 0;
    pthread_mutex_unlock(&f->rmu);
    pthread_mutex_lock(&f->mu);
    if (plan) {
        *plan = NULL;
        *plan_r = 0;
        if (f->plan && (*plan = malloc((size_t)P * f->plan_r * sizeof **plan))) {
            memcpy(*plan, f->plan, (size_t)P * f->plan_r * sizeof **plan);
            *plan_r = f->plan_r;
        }
    }
    *n = f->nm;
    *out = calloc(f->nm ? f->nm : 1, sizeof **out);
    for (i = 0; *out && i < f->nm; i++) {
        clu_member_t *d = &(*out)[i];
        *d = f->m[i];
        d->ready = malloc(P);
        d->hosted = malloc(P);
        d->lag = NULL;
        if (d->ready) memcpy(d->ready, f->m[i].ready, P);
        if (d->hosted) memcpy(d->hosted, f->m[i].hosted, P);
        if (!d->ready || !d->hosted) {
            clu_members_free(*out, i + 1);
            *out = NULL;
        }
    }
    pthread_mutex_unlock(&f->mu);
    return *out ? PATINA_OK : clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
}

/* ---------------------------------------------------------------- scatter */

enum { CALL_OUT = 0, CALL_DONE, CALL_FAILED };

typedef struct call {
    size_t member;
    uint32_t *parts;
    size_t nparts;
    double sent, got;          /* now_s() of the request's publish and of its reply's arrival */
    int state, hedged, accepted;
    clu_reply_t reply;
} call_t;

/* The gathered answers: the accepted replies among calls[0 .. n). */
typedef struct gather {
    call_t *calls;
    size_t n, cap;
    uint8_t *answered; /* (partitions) */
    uint32_t nanswered;
    char error[512];   /* the last failure, for the message */
    int limit;         /* a request or a reply was over a size limit (the connection's max payload, a
                        * shard's PATINA_E_LIMIT): the scatter stopped; error says which */
} gather_t;

static void gather_release(gather_t *g)
{
    size_t i;
    for (i = 0; i < g->n; i++) {
        clu_reply_release(&g->calls[i].reply);
        free(g->calls[i].parts);
    }
    free(g->calls);
    free(g->answered);
    memset(g, 0, sizeof *g);
}

typedef struct scatter_state {
    clu_front_t *f;
    clu_request_t *q;
    gather_t *g;
    clu_member_t *m;
    size_t nm;
    size_t *plan;       /* (P, plan_r) the members' assignment (members()), or NULL */
    size_t plan_r;
    uint8_t *tried;     /* (nm, P): member i was asked for p */
    uint32_t *inflight; /* (P): outstanding calls that ask p */
    size_t *choice;     /* (P) scratch */
    uint32_t *parts;    /* (P) scratch */
    scat_t sc;
    size_t outstanding;
} scatter_state_t;

static void call_failed(scatter_state_t *st, call_t *c, const char *why)
{
    size_t j;
    if (c->state == CALL_OUT) {
        load_add(st->f, st->m[c->member].name, -1);
        for (j = 0; j < c->nparts; j++) st->inflight[c->parts[j]]--;
        st->outstanding--;
    }
    c->state = CALL_FAILED;
    atomic_fetch_add(&st->f->n_failures, 1);
    snprintf(st->g->error, sizeof st->g->error, "shard %s: %s", st->m[c->member].name, why);
}

/* Asks the partitions want[0 .. nw) (each to its best ready copy not asked
 * yet), one call per member chosen. Returns the number of calls sent. The
 * choices and the chosen members' outstanding calls are made under one
 * hold of f->mu, so that a concurrent scatter of this front end sees all
 * of this one's calls or none. */
static size_t launch(scatter_state_t *st, const uint32_t *want, size_t nw)
{
    clu_front_t *f = st->f;
    const uint32_t P = f->cfg.partitions;
    size_t i, w, sent = 0;
    uint8_t resv[LOAD_MAX]; /* resv[i]: member i's call counted in its load already */
    memset(resv, 0, sizeof resv);
    pthread_mutex_lock(&f->mu);
    for (w = 0; w < nw; w++) {
        const uint32_t p = want[w];
        clu_member_w_t mw[64];
        size_t idx[64], order[64], nc = 0, no, j, best = SIZE_MAX, bestrank = 0;
        int minload = 0;
        st->choice[p] = SIZE_MAX;
        if (st->g->answered[p]) continue;
        for (i = 0; i < st->nm && nc < 64; i++)
            if (st->m[i].ready[p] && !st->tried[i * P + p]) {
                mw[nc] = (clu_member_w_t){st->m[i].name, st->m[i].capacity};
                idx[nc++] = i;
            }
        no = clu_rendezvous(mw, nc, p, nc, order);
        /* the copy's rank (the active one first), then rendezvous, among the copies whose shards have
         * at most LOAD_SLACK outstanding calls more than the least loaded: the load is to steer
         * around a busy shard, not to decide between two that differ by a scatter in flight (a
         * batch's ranges go out at once; letting one call decide sent whole ranges to one shard of
         * two: with copies 2, 51 against 69 partitions answered where the assignment gives 60 each) */
        for (j = 0; j < no; j++) {
            const int l = *load_of(f, st->m[idx[order[j]]].name);
            if (j == 0 || l < minload) minload = l;
        }
        for (j = 0; j < no; j++) {
            const size_t cand = idx[order[j]];
            size_t rank = st->plan_r, k;
            if (*load_of(f, st->m[cand].name) > minload + LOAD_SLACK) continue;
            for (k = 0; st->plan && k < st->plan_r; k++)
                if (st->plan[(size_t)p * st->plan_r + k] == cand) rank = k;
            if (best == SIZE_MAX || rank < bestrank) {
                best = cand;
                bestrank = rank;
            }
        }
        st->choice[p] = best;
    }
    for (w = 0; w < nw; w++) { /* the chosen members' calls counted now, under the same hold */
        const size_t m = st->choice[want[w]];
        if (m < LOAD_MAX && m < st->nm && !resv[m]) {
            resv[m] = 1;
            *load_of(f, st->m[m].name) += 1;
        }
    }
    pthread_mutex_unlock(&f->mu);
    for (i = 0; i < st->nm; i++) {
        size_t np = 0;
        call_t *c;
        clu_buf_t req = {0};
        char subj[200];
        natsStatus ns;
        for (w = 0; w < nw; w++)
            if (!st->g->answered[want[w]] && st->choice[want[w]] == i) {
                st->choice[want[w]] = SIZE_MAX; /* a partition listed twice is asked once */
                st->parts[np++] = want[w];
            }
        if (!np) continue;
        if (st->g->n == st->g->cap) {
            size_t cap = st->g->cap ? 2 * st->g->cap : 16;
            call_t *more = realloc(st->g->calls, cap * sizeof *more);
            if (!more) break;
            st->g->calls = more;
            st->g->cap = cap;
        }
        c = &st->g->calls[st->g->n];
        memset(c, 0, sizeof *c);
        c->member = i;
        if (!(c->parts = malloc(np * sizeof *c->parts))) break;
        memcpy(c->parts, st->parts, np * sizeof *c->parts);
        c->nparts = np;
        st->g->n++;
        for (w = 0; w < np; w++) {
            st->tried[i * P + c->parts[w]] = 1;
            st->inflight[c->parts[w]]++;
        }
        st->q->parts = c->parts;
        st->q->nparts = np;
        c->state = CALL_OUT;
        c->sent = now_s();
        st->outstanding++;
        if (i < LOAD_MAX && resv[i]) resv[i] = 0; /* counted above */
        else load_add(f, st->m[i].name, 1);
        atomic_fetch_add(&f->n_calls, 1);
        if (clu_request_encode(&req, st->q) != PATINA_OK) {
            call_failed(st, c, clu_last_error());
        } else {
            snprintf(subj, sizeof subj, "%s.%llu.%zu", f->inbox, (unsigned long long)st->sc.sid, st->g->n - 1);
            ns = natsConnection_PublishRequest(f->c->nc, st->m[i].subject, subj, req.p, (int)req.n);
            if (ns != NATS_OK) {
                clu_nats_fail(ns, "publishing a request of %zu bytes to %s", req.n, st->m[i].subject);
                call_failed(st, c, clu_last_error());
                if (ns == NATS_MAX_PAYLOAD) st->g->limit = 1; /* another copy would refuse it too */
            } else {
                sent++;
            }
        }
        clu_buf_release(&req);
        st->q->parts = NULL;
        st->q->nparts = 0;
    }
    for (i = 0; i < st->nm && i < LOAD_MAX; i++) /* counted, but no call made (out of memory) */
        if (resv[i]) load_add(f, st->m[i].name, -1);
    return sent;
}

/* The partitions of call c that are neither answered nor asked by another
 * outstanding call, asked again (after a failure: a retry). */
static void reask(scatter_state_t *st, const call_t *c)
{
    uint32_t want[CLU_PARTITIONS_MAX];
    size_t j, n = 0;
    for (j = 0; j < c->nparts; j++)
        if (!st->g->answered[c->parts[j]] && st->inflight[c->parts[j]] == 0) want[n++] = c->parts[j];
    if (n && launch(st, want, n)) atomic_fetch_add(&st->f->n_retries, 1);
}

/* A reply's bytes per hit until one is seen: a hit's id, distance or
 * score, and a key of some 40 bytes. */
#define HIT_BYTES_GUESS 64

static size_t hit_bytes_of(clu_front_t *f)
{
    const size_t b = atomic_load(&f->hit_bytes);
    return b ? b : HIT_BYTES_GUESS;
}

/* f's bytes per hit raised to at least b. */
static void hit_bytes_learn(clu_front_t *f, size_t b)
{
    size_t cur = atomic_load(&f->hit_bytes);
    while (b > cur && !atomic_compare_exchange_weak(&f->hit_bytes, &cur, b)) {}
}

/* One reply for call index ci. */
static void on_event(scatter_state_t *st, size_t ci, natsMsg *msg)
{
    call_t *c;
    size_t j;
    int disjoint = 1;
    if (ci >= st->g->n || (c = &st->g->calls[ci])->state != CALL_OUT) return; /* left behind */
    c->got = now_s();
    if (natsMsg_IsNoResponders(msg)) {
        call_failed(st, c, "no responders (gone)");
        reask(st, c);
        return;
    }
    if (clu_reply_decode(&c->reply, natsMsg_GetData(msg), (size_t)natsMsg_GetDataLength(msg)) != PATINA_OK) {
        call_failed(st, c, clu_last_error());
        reask(st, c);
        return;
    }
    if (c->reply.status != PATINA_OK) {
        char why[600];
        const int limit = c->reply.status == PATINA_E_LIMIT;
        snprintf(why, sizeof why, "%s", c->reply.message);
        clu_reply_release(&c->reply);
        call_failed(st, c, why);
        if (limit) { /* the request's size (queries, k): every copy would refuse it; later batches smaller */
            st->g->limit = 1;
            hit_bytes_learn(st->f, 2 * hit_bytes_of(st->f));
        } else {
            reask(st, c);
        }
        return;
    }
    {
        const size_t hits = c->reply.kind == CLU_KIND_SEARCH
                                ? (c->reply.res.offsets ? c->reply.res.offsets[c->reply.res.nq] : 0)
                                : c->reply.nq * c->reply.k;
        if (hits) hit_bytes_learn(st->f, ((size_t)natsMsg_GetDataLength(msg) + hits - 1) / hits);
    }
    load_add(st->f, st->m[c->member].name, -1);
    for (j = 0; j < c->nparts; j++) st->inflight[c->parts[j]]--;
    st->outstanding--;
    c->state = CALL_DONE;
    /* a reply may list only partitions it was asked, each once, none answered yet */
    for (j = 0; j < c->reply.nparts && disjoint; j++) {
        uint32_t p = c->reply.parts[j];
        size_t k;
        int asked = 0;
        for (k = 0; k < c->nparts && !asked; k++) asked = c->parts[k] == p;
        for (k = 0; k < j && asked; k++) asked = c->reply.parts[k] != p;
        disjoint = asked && !st->g->answered[p];
    }
    if (disjoint && c->reply.nparts) {
        c->accepted = 1;
        for (j = 0; j < c->reply.nparts; j++) {
            st->g->answered[c->reply.parts[j]] = 1;
            st->g->nanswered++;
        }
    } else {
        clu_reply_release(&c->reply);
    }
    reask(st, c); /* what it did not answer */
}

/* The members read afresh, merged into st->m by name so that the calls'
 * member indices stay valid: a member still listed takes its new entry, a
 * new one is appended, one no longer listed keeps no ready partition; the
 * assignment is the fresh one. */
static patina_status remember(scatter_state_t *st)
{
    const uint32_t P = st->f->cfg.partitions;
    clu_member_t *fm = NULL;
    size_t fn = 0, fr = 0, *fplan = NULL, *map = NULL, i, j, k;
    uint8_t *seen = NULL;
    patina_status s = members(st->f, &fm, &fn, 1, &fplan, &fr);
    if (s != PATINA_OK) return s;
    map = malloc((fn + 1) * sizeof *map);
    seen = calloc(st->nm + fn + 1, 1);
    if (!map || !seen) {
        s = clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
        goto out;
    }
    for (j = 0; j < fn; j++) {
        for (i = 0; i < st->nm && strcmp(st->m[i].name, fm[j].name); i++) {}
        if (i == st->nm) { /* a member the snapshot did not have */
            clu_member_t *m = realloc(st->m, (st->nm + 1) * sizeof *m);
            uint8_t *tried = m ? realloc(st->tried, (st->nm + 1) * P + 1) : NULL;
            if (m) st->m = m;
            if (!tried) {
                s = clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
                goto out;
            }
            st->tried = tried;
            memset(st->tried + st->nm * P, 0, P);
            st->m[st->nm] = fm[j];
            fm[j].ready = fm[j].hosted = NULL; /* moved (members() leaves lag NULL) */
            st->nm++;
        } else { /* the fresh entry; its arrays swapped in, the old ones freed with fm */
            clu_member_t old = st->m[i];
            st->m[i] = fm[j];
            fm[j] = old;
        }
        map[j] = i;
        seen[i] = 1;
    }
    for (i = 0; i < st->nm; i++)
        if (!seen[i]) memset(st->m[i].ready, 0, P); /* gone */
    free(st->plan);
    st->plan = fplan;
    st->plan_r = fr;
    for (k = 0; fplan && k < (size_t)P * fr; k++)
        if (fplan[k] != SIZE_MAX) fplan[k] = map[fplan[k]];
    fplan = NULL;
out:
    free(fplan);
    free(map);
    free(seen);
    clu_members_free(fm, fn);
    return s;
}

/* No call outstanding and partitions unanswered: the snapshot of the
 * members may predate a hand-over (the copy asked has left, or answered
 * that it no longer holds a partition, while another has turned ready).
 * The members are read again and each unanswered partition that some
 * member now lists ready is asked again -- of a copy asked before too,
 * which may have been loading it. At most RESCUE_ROUNDS times a scatter
 * (*rounds), before `until`. Returns the calls sent: 0 when no round is
 * left, no member lists any of them ready (the answer is partial) or the
 * read failed. */
static size_t rescue(scatter_state_t *st, int *rounds, double until)
{
    const uint32_t P = st->f->cfg.partitions;
    uint32_t want[CLU_PARTITIONS_MAX], p;
    size_t i, n = 0, sent;
    if (*rounds == RESCUE_ROUNDS || now_s() >= until) return 0;
    if (*rounds) usleep((useconds_t)(RESCUE_WAIT_S * *rounds * 1e6));
    ++*rounds;
    if (remember(st) != PATINA_OK) {
        snprintf(st->g->error, sizeof st->g->error, "%s", clu_last_error());
        return 0;
    }
    for (p = 0; p < P; p++) {
        int listed = 0;
        if (st->g->answered[p] || st->inflight[p]) continue;
        for (i = 0; i < st->nm && !listed; i++) listed = st->m[i].ready[p];
        if (!listed) continue;
        for (i = 0; i < st->nm; i++) st->tried[i * P + p] = 0;
        want[n++] = p;
    }
    sent = n ? launch(st, want, n) : 0;
    if (sent) atomic_fetch_add(&st->f->n_retries, 1);
    return sent;
}

/* Scatters request q over the ready copies (see the top of the file). */
static patina_status scatter(clu_front_t *f, clu_request_t *q, gather_t *g, double *ms)
{
    const uint32_t P = f->cfg.partitions;
    const double t0 = now_s(), hedge = hedge_ms(f) * 1e-3, deadline = f->o.deadline_ms * 1e-3;
    scatter_state_t st;
    pthread_condattr_t ca;
    patina_status s = PATINA_OK;
    size_t i;
    uint32_t p;
    int rescues = 0;
    memset(g, 0, sizeof *g);
    memset(&st, 0, sizeof st);
    st.f = f;
    st.q = q;
    st.g = g;
    atomic_fetch_add(&f->n_scatters, 1);
    PATINA_TRY_CLU(members(f, &st.m, &st.nm, 0, &st.plan, &st.plan_r));
    g->answered = calloc(P, 1);
    st.tried = calloc(st.nm * P + 1, 1);
    st.inflight = calloc(P, sizeof *st.inflight);
    st.choice = malloc(P * sizeof *st.choice);
    st.parts = malloc(P * sizeof *st.parts);
    if (!g->answered || !st.tried || !st.inflight || !st.choice || !st.parts) {
        s = clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
        goto out;
    }
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st.sc.cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_lock(&f->mu);
    st.sc.sid = ++f->next_sid;
    st.sc.next = f->active;
    f->active = &st.sc;
    pthread_mutex_unlock(&f->mu);

    for (p = 0; p < P; p++) st.parts[p] = p;
    {
        uint32_t *all = malloc(P * sizeof *all);
        if (all) {
            memcpy(all, st.parts, P * sizeof *all);
            launch(&st, all, P);
            free(all);
        }
    }
    while (g->nanswered < P && !g->limit && (st.outstanding || rescue(&st, &rescues, t0 + deadline))) {
        double wake = 1e300, now;
        event_t *ev = NULL;
        for (i = 0; i < g->n; i++) {
            const call_t *c = &g->calls[i];
            if (c->state != CALL_OUT) continue;
            if (!c->hedged && c->sent + hedge < wake) wake = c->sent + hedge;
            if (c->sent + deadline < wake) wake = c->sent + deadline;
        }
        pthread_mutex_lock(&f->mu);
        if (!st.sc.head && wake > now_s()) {
            struct timespec ts;
            ts.tv_sec = (time_t)wake;
            ts.tv_nsec = (long)((wake - (double)ts.tv_sec) * 1e9);
            if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
            pthread_cond_timedwait(&st.sc.cv, &f->mu, &ts);
        }
        ev = st.sc.head;
        st.sc.head = st.sc.tail = NULL;
        pthread_mutex_unlock(&f->mu);
        while (ev) {
            event_t *next = ev->next;
            on_event(&st, ev->call, ev->msg);
            natsMsg_Destroy(ev->msg);
            free(ev);
            ev = next;
        }
        now = now_s();
        for (i = 0; i < g->n && g->nanswered < P; i++) {
            call_t *c = &g->calls[i];
            if (c->state != CALL_OUT) continue;
            if (now >= c->sent + deadline) {
                call_failed(&st, c, "no answer within the deadline");
                reask(&st, c);
            } else if (!c->hedged && now >= c->sent + hedge) {
                /* hedged: its partitions not answered go to their next copy while it stays outstanding */
                uint32_t want[CLU_PARTITIONS_MAX];
                size_t j, n = 0;
                c->hedged = 1;
                for (j = 0; j < c->nparts; j++)
                    if (!g->answered[c->parts[j]]) want[n++] = c->parts[j];
                if (n && launch(&st, want, n)) atomic_fetch_add(&f->n_hedges, 1);
            }
        }
    }
out:
    pthread_mutex_lock(&f->mu);
    {
        scat_t **pp;
        for (pp = &f->active; *pp && *pp != &st.sc; pp = &(*pp)->next) {}
        if (*pp) *pp = st.sc.next;
    }
    while (st.sc.head) {
        event_t *e = st.sc.head;
        st.sc.head = e->next;
        natsMsg_Destroy(e->msg);
        free(e);
    }
    pthread_mutex_unlock(&f->mu);
    if (st.sc.sid) pthread_cond_destroy(&st.sc.cv);
    for (i = 0; i < g->n; i++) /* calls left behind */
        if (g->calls[i].state == CALL_OUT) {
            load_add(f, st.m[g->calls[i].member].name, -1);
            g->calls[i].state = CALL_FAILED;
        }
    clu_members_free(st.m, st.nm);
    free(st.plan);
    free(st.tried);
    free(st.inflight);
    free(st.choice);
    free(st.parts);
    *ms = (now_s() - t0) * 1e3;
    if (s != PATINA_OK) gather_release(g);
    return s;
}

/* ---------------------------------------------------------------- batches
 *
 * A request must fit the connection's max payload (the NATS server's
 * max_payload: 1 MiB by default), so a batch of queries is sent as requests
 * of consecutive query ranges, each as large as fits (request_fit), all
 * scattered at once (one thread per range, at most BATCH_THREADS), and the
 * answers are stitched back in query order. A shard whose reply would not
 * fit refuses it with PATINA_E_LIMIT (shard.c): the range is then split in
 * two and each half asked again. One query whose request or reply does not
 * fit is an error (PATINA_E_LIMIT), never a partial answer. */

#define BATCH_THREADS 16

/* What one range's answer covered; a batch's: the minimum partitions and
 * references over its ranges, partial when any is. */
typedef struct range_cov {
    uint32_t partitions;
    uint64_t references;
    int partial;
    double wait_ms, shard_ms; /* the slowest accepted call's round trip and its shard time (clu_coverage_t) */
    char failure[512]; /* the last shard failure, for the message */
} range_cov_t;

static void range_cov_set(range_cov_t *c, const clu_front_t *f, const gather_t *g)
{
    size_t i;
    c->partitions = g->nanswered;
    c->partial = g->nanswered < f->cfg.partitions;
    c->references = 0;
    c->wait_ms = c->shard_ms = 0;
    for (i = 0; i < g->n; i++) {
        const call_t *k = &g->calls[i];
        if (k->accepted && (k->got - k->sent) * 1e3 > c->wait_ms) {
            c->wait_ms = (k->got - k->sent) * 1e3;
            c->shard_ms = k->reply.shard_ms;
        }
    }
    if (g->error[0] || !c->partial) {
        snprintf(c->failure, sizeof c->failure, "%s", g->error);
    } else { /* no call failed: the copies asked no longer held them and none other lists them ready */
        size_t used = (size_t)snprintf(c->failure, sizeof c->failure, "no shard holds a ready copy of partition%s",
                                       f->cfg.partitions - g->nanswered == 1 ? "" : "s");
        uint32_t p, listed = 0;
        for (p = 0; p < f->cfg.partitions; p++) {
            if (g->answered[p]) continue;
            if (listed++ == 16) {
                snprintf(c->failure + used, sizeof c->failure - used, " ...");
                break;
            }
            used += (size_t)snprintf(c->failure + used, sizeof c->failure - used, " %u", p);
        }
    }
}

static void range_cov_add(range_cov_t *a, const range_cov_t *b)
{
    if (b->partitions < a->partitions) a->partitions = b->partitions;
    if (b->references < a->references) a->references = b->references;
    a->partial |= b->partial;
    if (b->wait_ms > a->wait_ms) {
        a->wait_ms = b->wait_ms;
        a->shard_ms = b->shard_ms;
    }
    if (!a->failure[0]) snprintf(a->failure, sizeof a->failure, "%s", b->failure);
}

typedef struct batch {
    clu_front_t *f;
    clu_request_t rq;                  /* the template: nq, queries and parts set per request */
    const unsigned char *queries;      /* (nq, qbytes) */
    size_t nq, per, nranges;           /* ranges of per queries (the last may have fewer) */
    /* IDENTIFY: the caller's outputs */
    const patina_identify_opts_t *opts;
    patina_identify_hit_t *hits;
    patina_identify_result_t *results;
    char **keys;
    int *incomplete;
    /* SEARCH */
    patina_table_results_t *res;       /* (nranges) */
    /* per range */
    patina_status *status;             /* (nranges) */
    char (*error)[PATINA_ERROR_MAX];   /* (nranges): a failed range's message (the thread's) */
    range_cov_t *cov;                  /* (nranges) */
    atomic_size_t next;
    atomic_int halves;                 /* threads asking refused ranges' second halves now (at most
                                        * BATCH_THREADS: deeper splits ask them in turn) */
} batch_t;

/* How many queries of the template's kind fit one request: the connection's
 * max payload (at most CLU_MSG_MAX) less the request's header with every
 * partition listed, over the query's bytes (at most CLU_QUERIES_MAX). */
static patina_status request_fit(clu_front_t *f, const clu_request_t *tmpl, size_t *per)
{
    const uint32_t P = f->cfg.partitions;
    clu_request_t rq = *tmpl;
    clu_buf_t b = {0};
    uint32_t *parts = calloc(P ? P : 1, sizeof *parts);
    int64_t maxp = natsConnection_GetMaxPayload(f->c->nc);
    size_t room, head;
    patina_status s;
    if (!parts) return clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
    rq.parts = parts;
    rq.nparts = P;
    rq.nq = 0;
    s = clu_request_encode(&b, &rq);
    head = b.n;
    clu_buf_release(&b);
    free(parts);
    if (s != PATINA_OK) return s;
    room = maxp > 0 && (uint64_t)maxp < CLU_MSG_MAX ? (size_t)maxp : CLU_MSG_MAX;
    if (head + tmpl->qbytes > room)
        return clu_fail(PATINA_E_LIMIT, "cluster: one query of %zu bytes makes a request of %zu bytes, over the %zu bytes "
                        "a message may have (the NATS server's max_payload)", tmpl->qbytes, head + tmpl->qbytes, room);
    *per = tmpl->qbytes ? (room - head) / tmpl->qbytes : CLU_QUERIES_MAX;
    if (*per > CLU_QUERIES_MAX) *per = CLU_QUERIES_MAX;
    {
        /* and so that the replies fit: k hits a query at the bytes a hit took so far (a guess before the
         * first reply; doubled after a refusal). A range search's hits are unbounded but by max_hits: sized
         * only when that is set. A reply that does not fit is still refused and its range split. */
        const size_t k = tmpl->kind == CLU_KIND_IDENTIFY          ? tmpl->iopts.k
                         : tmpl->query.kind == PATINA_QUERY_KNN ? tmpl->query.k
                                                                : tmpl->query.max_hits;
        const size_t qb = k * hit_bytes_of(f), fit = room - room / 16; /* a 16th for the reply's head */
        if (qb && fit / qb < *per) *per = fit / qb ? fit / qb : 1;
    }
    return PATINA_OK;
}

/* The refusal of a request over a size limit: split when it has more than one query. */
static patina_status range_limit(const gather_t *g, size_t q0, size_t n)
{
    return n > 1 ? PATINA_OK
                 : clu_fail(PATINA_E_LIMIT, "cluster: a request of query %zu alone is over a limit: %s", q0, g->error);
}

/* Moves src's answers after dst's (dst keeps the fewer rows); src is left zeroed. */
static patina_status results_append(patina_table_results_t *dst, patina_table_results_t *src)
{
    const size_t na = dst->offsets[dst->nq], nb = src->offsets[src->nq];
    size_t *off;
    patina_hit_t *hits;
    size_t i;
    if (!(off = realloc(dst->offsets, (dst->nq + src->nq + 1) * sizeof *off)))
        return clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
    dst->offsets = off;
    if (!(hits = realloc(dst->hits, (na + nb + 1) * sizeof *hits))) return clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
    dst->hits = hits;
    if (dst->keys || src->keys) {
        char **keys = realloc(dst->keys, (na + nb + 1) * sizeof *keys);
        if (!keys) return clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
        if (!dst->keys) memset(keys, 0, na * sizeof *keys);
        if (src->keys) memcpy(keys + na, src->keys, nb * sizeof *keys);
        else memset(keys + na, 0, nb * sizeof *keys);
        dst->keys = keys;
    }
    if (nb) memcpy(dst->hits + na, src->hits, nb * sizeof *hits);
    for (i = 0; i < src->nq; i++) off[dst->nq + 1 + i] = na + src->offsets[i + 1];
    dst->nq += src->nq;
    if (src->rows < dst->rows) dst->rows = src->rows;
    free(src->offsets);
    free(src->hits);
    free(src->keys); /* its strings moved */
    memset(src, 0, sizeof *src);
    return PATINA_OK;
}

static patina_status search_range(batch_t *b, size_t q0, size_t n, patina_table_results_t *out, range_cov_t *cov);

/* The second half of a search range that a shard refused as too large. */
typedef struct half {
    batch_t *b;
    size_t q0, n;
    patina_table_results_t res;
    range_cov_t cov;
    patina_status s;
    char error[600];
} half_t;

static void *search_half(void *arg)
{
    half_t *h = arg;
    if ((h->s = search_range(h->b, h->q0, h->n, &h->res, &h->cov)) != PATINA_OK)
        snprintf(h->error, sizeof h->error, "%s", clu_last_error());
    return NULL;
}

/* Queries [q0, q0 + n) of a search batch: out (zeroed on entry) receives their answers. */
static patina_status search_range(batch_t *b, size_t q0, size_t n, patina_table_results_t *out, range_cov_t *cov)
{
    clu_request_t rq = b->rq;
    gather_t g;
    patina_table_results_t *parts = NULL;
    size_t i, np = 0;
    double ms;
    patina_status s;
    memset(out, 0, sizeof *out);
    memset(cov, 0, sizeof *cov);
    rq.nq = n;
    rq.queries = b->queries + q0 * rq.qbytes;
    PATINA_TRY_CLU(scatter(b->f, &rq, &g, &ms));
    if (g.limit) { /* split in two, both halves asked at once (the second by a thread of its own) */
        half_t hf;
        pthread_t th;
        int threaded;
        s = range_limit(&g, q0, n);
        gather_release(&g);
        if (s != PATINA_OK) return s;
        memset(&hf, 0, sizeof hf);
        hf.b = b;
        hf.q0 = q0 + n / 2;
        hf.n = n - n / 2;
        threaded = atomic_fetch_add(&b->halves, 1) < BATCH_THREADS && pthread_create(&th, NULL, search_half, &hf) == 0;
        if (!threaded) atomic_fetch_sub(&b->halves, 1);
        s = search_range(b, q0, n / 2, out, cov);
        if (threaded) {
            pthread_join(th, NULL);
            atomic_fetch_sub(&b->halves, 1);
        } else {
            search_half(&hf);
        }
        if (s == PATINA_OK && hf.s != PATINA_OK) s = clu_fail(hf.s, "%s", hf.error);
        if (s == PATINA_OK) {
            range_cov_add(cov, &hf.cov);
            s = results_append(out, &hf.res);
        }
        patina_table_results_release(&hf.res);
        if (s != PATINA_OK) patina_table_results_release(out);
        return s;
    }
    range_cov_set(cov, b->f, &g);
    if (!(parts = calloc(g.n + 1, sizeof *parts))) {
        s = clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
        goto out;
    }
    for (i = 0; i < g.n; i++)
        if (g.calls[i].accepted && g.calls[i].reply.res.nq == n) parts[np++] = g.calls[i].reply.res;
    if (np) {
        patina_table_query_t qq = rq.query;
        clu_results_keys_empty(parts, np);
        if ((s = patina_table_results_merge(parts, np, &qq, out)) != PATINA_OK)
            s = clu_fail_lib(s, "cluster: merging %zu answers", np);
    } else {
        out->nq = n;
        s = (out->offsets = calloc(n + 1, sizeof *out->offsets)) ? PATINA_OK
                                                                 : clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
    }
    cov->references = out->rows;
out:
    free(parts);
    gather_release(&g);
    return s;
}

/* opts.distinct's sibling check on the front end (patina_identify_merge_siblings):
 * the two references' records read from their partitions' buckets (their
 * keys come with the parts' hits), put into a two-item reference set and
 * checked there (patina_identify_siblings). */
typedef struct {
    clu_front_t *f;
    const char *spec;
    const patina_identify_opts_t *opts;
    const patina_identify_hit_t *const *ph;
    char *const *const *pk;
    const patina_identify_result_t *const *pr;
    size_t np, part_k;
} sib_front_t;

static const char *part_key(const sib_front_t *sf, size_t q, uint64_t id)
{
    size_t p, j;
    for (p = 0; p < sf->np; p++)
        for (j = 0; sf->pk[p] && j < sf->pr[p][q].nhits && j < sf->part_k; j++)
            if (sf->ph[p][q * sf->part_k + j].id == id) return sf->pk[p][q * sf->part_k + j];
    return NULL;
}

/* Reference `id` (image `key`) of table spec into rs, read from its partition's bucket. */
static patina_status put_reference(clu_front_t *f, patina_refset_t *rs, const char *spec, const char *key, uint64_t id)
{
    void *data;
    size_t n;
    clu_record_t rec;
    const clu_rtable_t *t;
    patina_status s;
    PATINA_TRY_CLU(clu_record_get(f->c, &f->cfg, key, &data, &n, NULL));
    s = clu_record_decode(&rec, data, n);
    if (s == PATINA_OK && (!(t = clu_record_table(&rec, spec)) || rec.id != id))
        s = clu_fail(PATINA_E_NOTFOUND, "cluster: the sibling check: image '%s' has no %s record of id %llu", key, spec,
                     (unsigned long long)id);
    else if (s == PATINA_OK && (s = patina_refset_put(rs, id, t->desc, t->bytes)) != PATINA_OK)
        s = clu_fail_lib(s, "cluster: the sibling check: image '%s'", key);
    free(data);
    return s;
}

static patina_status sibling_front(void *user, size_t q, uint64_t a, uint64_t b, size_t *inliers)
{
    const sib_front_t *sf = user;
    const char *ka = part_key(sf, q, a), *kb = part_key(sf, q, b);
    patina_refset_t *rs = NULL;
    patina_status s;
    *inliers = 0;
    if (!ka || !kb)
        return clu_fail(PATINA_E_INVALID, "cluster: the sibling check: no key for reference %llu",
                        (unsigned long long)(ka ? b : a));
    if ((s = patina_refset_new(&rs, sf->spec)) != PATINA_OK) return clu_fail_lib(s, "cluster: the sibling check");
    s = put_reference(sf->f, rs, sf->spec, ka, a);
    if (s == PATINA_OK) s = put_reference(sf->f, rs, sf->spec, kb, b);
    if (s == PATINA_OK && (s = patina_identify_siblings(rs, a, b, sf->opts, inliers)) != PATINA_OK)
        s = clu_fail_lib(s, "cluster: the sibling check");
    patina_refset_free(rs);
    return s;
}

/* Queries [q0, q0 + n) of an identification batch, into the caller's outputs at q0. */
static patina_status identify_range(batch_t *b, size_t q0, size_t n, range_cov_t *cov)
{
    const patina_identify_opts_t *opts = b->opts;
    const size_t k = b->rq.iopts.k;
    clu_request_t rq = b->rq;
    gather_t g;
    const patina_identify_hit_t **ph = NULL;
    const patina_identify_result_t **pr = NULL;
    char *const **pk = NULL;
    patina_identify_hit_t *hits = b->hits + q0 * opts->k;
    patina_identify_result_t *results = b->results + q0;
    char **keys = b->keys ? b->keys + q0 * opts->k : NULL;
    size_t i, np = 0, q;
    double ms;
    patina_status s = PATINA_OK;
    memset(cov, 0, sizeof *cov);
    rq.nq = n;
    rq.queries = b->queries + q0 * rq.qbytes;
    PATINA_TRY_CLU(scatter(b->f, &rq, &g, &ms));
    if (g.limit) { /* split in two */
        const size_t h = n / 2;
        range_cov_t c2;
        s = range_limit(&g, q0, n);
        gather_release(&g);
        if (s != PATINA_OK) return s;
        if ((s = identify_range(b, q0, h, cov)) != PATINA_OK) return s;
        if ((s = identify_range(b, q0 + h, n - h, &c2)) != PATINA_OK) return s;
        range_cov_add(cov, &c2);
        return PATINA_OK;
    }
    range_cov_set(cov, b->f, &g);
    ph = calloc(g.n + 1, sizeof *ph);
    pr = calloc(g.n + 1, sizeof *pr);
    pk = calloc(g.n + 1, sizeof *pk);
    if (!ph || !pr || !pk) {
        s = clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
        goto out;
    }
    for (i = 0; i < g.n; i++) {
        const clu_reply_t *r = &g.calls[i].reply;
        if (!g.calls[i].accepted || r->nq != n || r->k != k) continue;
        cov->references += r->rows;
        ph[np] = r->hits;
        pr[np] = r->results;
        pk[np] = r->keys;
        np++;
    }
    if (np == 0) { /* no part: no candidate, and the query's features are not known here */
        memset(hits, 0, n * opts->k * sizeof *hits);
        for (q = 0; q < n; q++) {
            memset(&results[q], 0, sizeof results[q]);
            results[q].decision = PATINA_DECISION_UNKNOWN;
            results[q].threshold = opts->threshold;
        }
        if (keys) memset(keys, 0, n * opts->k * sizeof *keys);
    } else {
        /* distinct: the sibling check reads the two references from their partitions */
        sib_front_t sf = {b->f, b->rq.spec, opts, ph, (char *const *const *)pk, pr, np, k};
        if ((s = patina_identify_merge_siblings(ph, pr, np, n, opts, opts->distinct > 0 ? sibling_front : NULL, &sf,
                                                hits, results)) != PATINA_OK)
            s = clu_fail_lib(s, "cluster: merging %zu answers", np);
        else if (keys)
            s = clu_identify_keys(ph, pr, pk, np, n, k, hits, results, opts->k, keys);
    }
    for (q = 0; b->incomplete && q < n; q++) b->incomplete[q0 + q] = cov->partial;
out:
    free(ph);
    free(pr);
    free((void *)pk);
    gather_release(&g);
    return s;
}

static patina_status batch_range(batch_t *b, size_t r)
{
    const size_t q0 = r * b->per, n = b->nq - q0 < b->per ? b->nq - q0 : b->per;
    return b->rq.kind == CLU_KIND_SEARCH ? search_range(b, q0, n, &b->res[r], &b->cov[r])
                                         : identify_range(b, q0, n, &b->cov[r]);
}

static void *batch_thread(void *arg)
{
    batch_t *b = arg;
    size_t r;
    while ((r = atomic_fetch_add(&b->next, 1)) < b->nranges)
        if ((b->status[r] = batch_range(b, r)) != PATINA_OK) snprintf(b->error[r], sizeof b->error[r], "%s", clu_last_error());
    return NULL;
}

/* Runs batch b (rq, queries, nq and the kind's outputs set): its ranges, the
 * coverage combined into cov (the fan-out time: the whole call's). */
static patina_status batch_run(batch_t *b, clu_coverage_t *cov)
{
    clu_front_t *f = b->f;
    const double t0 = now_s();
    pthread_t th[BATCH_THREADS];
    size_t i, nth = 0;
    range_cov_t all;
    patina_status s = PATINA_OK;
    memset(cov, 0, sizeof *cov);
    if (b->keys) memset(b->keys, 0, b->nq * b->opts->k * sizeof *b->keys);
    b->per = b->nq ? b->nq : 1;
    if (b->nq) PATINA_TRY_CLU(request_fit(f, &b->rq, &b->per));
    b->nranges = b->nq ? (b->nq + b->per - 1) / b->per : 1;
    if (b->nranges > 1) atomic_fetch_add(&f->n_split, 1);
    b->status = calloc(b->nranges, sizeof *b->status);
    b->error = calloc(b->nranges, sizeof *b->error);
    b->cov = calloc(b->nranges, sizeof *b->cov);
    if (b->rq.kind == CLU_KIND_SEARCH) b->res = calloc(b->nranges, sizeof *b->res);
    if (!b->status || !b->error || !b->cov || (b->rq.kind == CLU_KIND_SEARCH && !b->res)) {
        s = clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
        goto out;
    }
    atomic_init(&b->next, 0);
    atomic_init(&b->halves, 0);
    if (b->nranges == 1) {
        s = batch_range(b, 0);
    } else {
        for (i = 0; i < b->nranges && i < BATCH_THREADS; i++) {
            if (pthread_create(&th[nth], NULL, batch_thread, b) != 0) break;
            nth++;
        }
        batch_thread(b); /* this thread takes ranges too (all of them when no thread started) */
        for (i = 0; i < nth; i++) pthread_join(th[i], NULL);
        for (i = 0; i < b->nranges && s == PATINA_OK; i++)
            if (b->status[i] != PATINA_OK) s = clu_fail(b->status[i], "%s", b->error[i]);
    }
    if (s != PATINA_OK) goto out;
    all = b->cov[0];
    for (i = 1; i < b->nranges; i++) range_cov_add(&all, &b->cov[i]);
    cov->partitions = all.partitions;
    cov->partitions_total = f->cfg.partitions;
    cov->references = all.references;
    cov->partial = all.partial;
    cov->wait_ms = all.wait_ms;
    cov->shard_ms = all.shard_ms;
    snprintf(cov->failure, sizeof cov->failure, "%s", all.partial ? all.failure : "");
    if (cov->partial) atomic_fetch_add(&f->n_partial, 1);
    if (cov->partial && !f->o.allow_partial) {
        s = clu_fail(PATINA_E_UNAVAILABLE, "cluster: collection %s: %u of %u partitions answered%s%s", f->cfg.name,
                     all.partitions, f->cfg.partitions, all.failure[0] ? "; last failure: " : "", all.failure);
        goto out;
    }
    for (i = 1; b->rq.kind == CLU_KIND_SEARCH && i < b->nranges && s == PATINA_OK; i++)
        s = results_append(&b->res[0], &b->res[i]);
out:
    cov->fanout_ms = (now_s() - t0) * 1e3;
    for (i = 0; s != PATINA_OK && b->keys && i < b->nq * b->opts->k; i++) {
        free(b->keys[i]);
        b->keys[i] = NULL;
    }
    for (i = b->rq.kind == CLU_KIND_SEARCH && s == PATINA_OK ? 1 : 0; b->res && i < b->nranges; i++)
        patina_table_results_release(&b->res[i]);
    free(b->status);
    free(b->error);
    free(b->cov);
    return s;
}

patina_status clu_front_search(clu_front_t *f, const char *spec, const void *queries, size_t nq, size_t qbytes,
                               const patina_table_query_t *q, patina_table_results_t *res, clu_coverage_t *cov)
{
    batch_t b;
    patina_status s;
    memset(res, 0, sizeof *res);
    memset(&b, 0, sizeof b);
    b.f = f;
    b.rq.kind = CLU_KIND_SEARCH;
    b.rq.spec = spec;
    b.rq.query = *q;
    b.rq.qbytes = qbytes;
    b.queries = queries;
    b.nq = nq;
    if ((s = batch_run(&b, cov)) == PATINA_OK) *res = b.res[0];
    free(b.res);
    return s;
}

patina_status clu_front_identify(clu_front_t *f, const char *spec, const void *queries, size_t nq,
                                 size_t qbytes, const patina_identify_opts_t *opts, patina_identify_hit_t *hits,
                                 patina_identify_result_t *results, char **keys, int *incomplete,
                                 clu_coverage_t *cov)
{
    batch_t b;
    patina_identify_opts_t ro = *opts;
    /* the calibrated default threshold resolved here, from the table's spec: the merge decides with a number
     * (the shards resolve it the same way for their parts) */
    if (ro.threshold == PATINA_THRESHOLD_CALIBRATED &&
        patina_identify_far_threshold_opts(spec, &ro, PATINA_FAR_DEFAULT, &ro.threshold) != PATINA_OK)
        return clu_fail(PATINA_E_INVALID, "cluster: identify: %s", patina_last_error());
    opts = &ro;
    memset(&b, 0, sizeof b);
    b.f = f;
    b.rq.kind = CLU_KIND_IDENTIFY;
    b.rq.spec = spec;
    b.rq.iopts = *opts;
    b.rq.iopts.k = patina_identify_part_k(opts);
    b.rq.qbytes = qbytes;
    b.queries = queries;
    b.nq = nq;
    b.opts = opts;
    b.hits = hits;
    b.results = results;
    b.keys = keys;
    b.incomplete = incomplete;
    return batch_run(&b, cov);
}

patina_status clu_front_identify_half(clu_front_t *f, const char *spec, const void *queries,
                                      const void *half_queries, size_t nq, size_t qbytes, size_t half_features,
                                      double margin, const patina_identify_opts_t *opts,
                                      patina_identify_hit_t *hits, patina_identify_result_t *results, char **keys,
                                      int *incomplete, unsigned char *taken, clu_coverage_t *cov)
{
    patina_identify_opts_t ro, ho;
    patina_identify_hit_t *hh = NULL;
    patina_identify_result_t *hr = NULL;
    unsigned char *tk = NULL;
    char **hk = NULL;
    int *hinc = NULL;
    clu_coverage_t hcov;
    patina_status s;
    size_t k, q, i;
    /* the library's rule: its calibrated default threshold, the half-size queries' options */
    if (idf_half_prepare(spec, opts, half_features, margin, &ro, &ho) != PATINA_OK)
        return clu_fail(PATINA_E_INVALID, "cluster: identify: %s", patina_last_error());
    if ((s = clu_front_identify(f, spec, queries, nq, qbytes, &ro, hits, results, keys, incomplete, cov)) !=
        PATINA_OK)
        return s;
    if (nq == 0) return PATINA_OK;
    k = ro.k;
    hh = calloc(nq * k, sizeof *hh);
    hr = calloc(nq, sizeof *hr);
    tk = calloc(nq, 1);
    hinc = calloc(nq, sizeof *hinc);
    hk = keys ? calloc(nq * k, sizeof *hk) : NULL;
    memset(&hcov, 0, sizeof hcov);
    if (!hh || !hr || !tk || !hinc || (keys && !hk)) {
        s = clu_fail(PATINA_E_NOMEM, "cluster: identify: out of memory for %zu half-size queries", nq);
        goto out;
    }
    s = clu_front_identify(f, spec, half_queries, nq, qbytes, &ho, hh, hr, hk, hinc, &hcov);
    if (s == PATINA_OK && patina_identify_fuse_half(nq, k, margin, &ro, hits, results, hh, hr, tk) != PATINA_OK)
        s = clu_fail(PATINA_E_INVALID, "cluster: identify: %s", patina_last_error());
    if (s != PATINA_OK) goto out;
    for (q = 0; q < nq; q++) {
        if (incomplete) incomplete[q] |= hinc[q];
        if (taken) taken[q] = tk[q];
    }
    idf_keys_take(nq, k, tk, keys, hk); /* the hits' keys follow them */
    if (cov) { /* the lesser of the two */
        cov->fanout_ms += hcov.fanout_ms;
        if (hcov.wait_ms > cov->wait_ms) {
            cov->wait_ms = hcov.wait_ms;
            cov->shard_ms = hcov.shard_ms;
        }
        if (hcov.partitions < cov->partitions) cov->partitions = hcov.partitions;
        if (hcov.references < cov->references) cov->references = hcov.references;
        if (hcov.partial && !cov->partial) {
            cov->partial = 1;
            memcpy(cov->failure, hcov.failure, sizeof cov->failure);
        }
    }
out:
    if (hk)
        for (i = 0; i < nq * k; i++) free(hk[i]);
    free(hk);
    free(hh);
    free(hr);
    free(tk);
    free(hinc);
    return s;
}

/* ----------------------------------------------------------- confirmation */

/* One CONFIRM request, waited for by a thread of its own. */
typedef struct confirm_call {
    clu_front_t *f;
    char name[CLU_NAME_MAX + 1], subject[256];
    clu_buf_t req;
    int timeout_ms;
    pthread_t th;
} confirm_call_t;

static void *confirm_run(void *arg)
{
    confirm_call_t *c = arg;
    natsMsg *msg = NULL;
    load_add(c->f, c->name, 1);
    /* the outcome does not matter here: a copy that could not apply the
     * write in time withdrew its readiness, and one that is gone is gone */
    if (natsConnection_Request(&msg, c->f->c->nc, c->subject, c->req.p, (int)c->req.n, c->timeout_ms) == NATS_OK)
        natsMsg_Destroy(msg);
    load_add(c->f, c->name, -1);
    return NULL;
}

patina_status clu_front_confirm(clu_front_t *f, uint32_t p, uint64_t rev)
{
    const double end = now_s() + f->o.deadline_ms * 1e-3;
    char (*done)[CLU_NAME_MAX + 1] = NULL;
    size_t ndone = 0, capdone = 0;
    clu_request_t rq;
    patina_status s = PATINA_OK;
    memset(&rq, 0, sizeof rq);
    rq.kind = CLU_KIND_CONFIRM;
    rq.partition = p;
    rq.revision = rev;
    /* every copy that hosts p (ready: it applies the write before it answers; loading: it notes
     * the revision and turns ready only once it applied it), then the members again, until no
     * copy is new (one that turned up meanwhile is asked too), within the deadline */
    for (;;) {
        clu_member_t *m = NULL;
        size_t nm = 0, i, j, n = 0;
        confirm_call_t *calls;
        int left = (int)((end - now_s()) * 1e3);
        if (left <= 0) break;
        if ((s = members(f, &m, &nm, 1, NULL, NULL)) != PATINA_OK) break;
        if (!(calls = calloc(nm + 1, sizeof *calls))) {
            clu_members_free(m, nm);
            s = clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
            break;
        }
        rq.timeout_ms = (uint32_t)left;
        for (i = 0; i < nm; i++) {
            confirm_call_t *c = &calls[n];
            if (!m[i].hosted[p] && !m[i].ready[p]) continue;
            for (j = 0; j < ndone && strcmp(done[j], m[i].name); j++) {}
            if (j < ndone) continue;
            if (ndone == capdone) {
                size_t cap = capdone ? 2 * capdone : 8;
                void *more = realloc(done, cap * sizeof *done);
                if (!more) break;
                done = more;
                capdone = cap;
            }
            snprintf(done[ndone++], sizeof done[0], "%s", m[i].name);
            c->f = f;
            snprintf(c->name, sizeof c->name, "%s", m[i].name);
            snprintf(c->subject, sizeof c->subject, "%s", m[i].subject);
            c->timeout_ms = left + 500;
            if (clu_request_encode(&c->req, &rq) != PATINA_OK || pthread_create(&c->th, NULL, confirm_run, c) != 0) {
                clu_buf_release(&c->req);
                continue;
            }
            n++;
        }
        for (i = 0; i < n; i++) {
            pthread_join(calls[i].th, NULL);
            clu_buf_release(&calls[i].req);
        }
        free(calls);
        clu_members_free(m, nm);
        if (!n) break; /* stable: no copy that was not asked */
    }
    free(done);
    return s;
}
