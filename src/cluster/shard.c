/* `patina shard`: one process holding copies of some partitions of a
 * cluster collection.
 *
 * It joins the members bucket (an entry refreshed every second by a thread
 * of its own, expiring a few seconds after the process stops refreshing it:
 * hosting or dropping partitions never delays it), computes from the live
 * members which partitions weighted rendezvous gives it (the best `copies`
 * of each; members leaving are left out), and for each one it holds: a
 * detached live table per
 * table of the collection (patina_table_new), loaded from the partition's
 * bucket and kept in step with it by a KV watch (one thread per partition).
 * A partition is *ready* once the watch has delivered the bucket's state as
 * of its start; only ready partitions are answered. A partition it no
 * longer gets is dropped once every member that gets it is ready for it.
 *
 * Requests (request/reply on patina.COLL.shard.NAME, one thread each):
 * SEARCH and IDENTIFY name partitions; the reply has the merged answer of
 * those it holds ready and lists them. CONFIRM waits until a partition has
 * applied a revision; a partition that cannot within the timeout loses its
 * readiness until it has caught up again.
 *
 * SIGTERM (the caller's stop flag): a hand-over. The member entry says
 * "leaving", so the others' assignment leaves this shard out and they load
 * its partitions, while it keeps following and answering them; once every
 * partition it holds has a ready copy on another member (or after
 * --drain-timeout) it waits a moment for front ends to see those copies,
 * deletes its entry, answers a moment more (fronts whose members cache is
 * older) and finishes the requests in flight. */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cluster/conn.h"

#define HEARTBEAT_MS 1000
#define LINGER_MS 1000  /* answering on after the hand-over, before and after the entry goes (> front caches) */
#define DROP_GRACE_S 30 /* a partition no longer given is dropped after this at the latest */
#define LOAD_BATCH 4096 /* bucket entries applied to the tables in one step */
#define WARM_AFTER 1024 /* a ready copy that applies this many entries in one step warms its device copies */
#define QUEUE_MAX 4096  /* requests waiting for a worker; past it they are refused (busy) */

void clu_shard_opts_init(clu_shard_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->capacity = 0;
    o->copies = 2;
    o->device = PATINA_DEVICE_AUTO;
    o->drain_timeout_s = 60;
}

/* kv key (hex) -> image id and the tables holding its row, per partition. */
typedef struct kentry {
    char kk[65];
    uint64_t id;
    uint32_t tables; /* bit t: tables[t] holds the row */
    uint64_t vbytes; /* the record's bytes */
    struct kentry *next;
} kentry_t;

typedef struct part {
    uint32_t p;
    int hosted;                 /* a loader thread runs */
    volatile int ready;         /* caught up and answering (set under shard.mu) */
    volatile int stop;
    volatile int loaded;        /* the initial state was delivered once */
    volatile int announced;     /* a heartbeat listing it as hosted was acknowledged */
    uint64_t gen;               /* which hosting this is (shard.gens when hosted; 0: not hosted) */
    uint64_t must_apply;        /* revisions writers asked it to confirm (under shard.mu): ready needs them */
    patina_table_t *tables[CLU_TABLES_MAX];
    uint64_t applied;           /* the last revision applied */
    volatile uint64_t last;     /* the bucket's last revision, as last read (lag = last - applied) */
    uint64_t bytes;             /* record bytes held */
    size_t rows;
    time_t unassigned_since;    /* 0 while assigned */
    kentry_t *map[256];
    pthread_t th;
    char error[256];
} part_t;

typedef struct shard {
    clu_conn_t *c;
    clu_config_t cfg;
    clu_shard_opts_t o;
    char name[CLU_NAME_MAX + 1], subject[256], device[16];
    patina_context_t *ctx;
    part_t *parts;              /* (partitions) */
    volatile uint8_t *assigned; /* (partitions) 1: the last assignment gives it to this shard */
    volatile int listed;        /* the last assignment was computed with this shard's own entry read */
    volatile int leaving;       /* stopping: the entry says so, the others take its partitions */
    pthread_rwlock_t lock;      /* readers: requests, the heartbeat; writer: hosting or dropping a partition */
    uint64_t gens;              /* hostings so far (under lock, written) */
    /* the heartbeat: its own thread, so that the entry never expires while
     * the reassignment loop is busy (loading, dropping, a stalled call) */
    pthread_t hb;
    int hb_started;
    volatile int hb_stop, hb_kick; /* kick: beat now (a partition was hosted: announce it) */
    uint64_t lease_until_us;    /* (atomic) monotonic us until which its entry surely lives (CLU_MEMBER_LEASE_MS
                                 * after the last acknowledged heartbeat was sent); 0: none acknowledged yet */
    int lapsed;                 /* the lease ran out and the partitions were withdrawn (heartbeat thread) */
    unsigned long disconnects;  /* the connection's disconnects seen by the heartbeat thread */
    pthread_mutex_t mu;         /* applied revisions, for CONFIRM */
    pthread_cond_t cv;
    kvStore *members;
    int64_t started;
    sem_t load_slots;           /* initial loads running at once */
    /* requests: a queue (at most QUEUE_MAX) served by a fixed pool of workers */
    pthread_mutex_t qmu;
    pthread_cond_t qcv;
    struct req *qhead, *qtail;
    size_t qlen;
    int qstop;
    pthread_t *workers;
    int nworkers;
    volatile uint64_t gpu_mem;  /* device bytes the context holds (sampled) */
    int devices[PATINA_GPUS_MAX];
    size_t ndevices;
    pthread_t sampler;
    int sampling;
    volatile int sampler_stop;
    /* metrics */
    unsigned long long requests[4], errors;
    unsigned long long parts_answered; /* partitions answered, summed over search and identify requests */
    double request_seconds;
    double queue_seconds; /* requests' arrival to a worker taking them */
    double call_seconds;  /* requests' answers under the shard's lock (the library's call) */
    volatile int inflight;
} shard_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Whether its member entry surely still lives: a heartbeat sent less than
 * CLU_MEMBER_LEASE_MS ago was acknowledged (the entry expires
 * CLU_MEMBERS_TTL_MS after the server stored it, which is after it was
 * sent). Past the lease a writer may not see this shard and confirm its
 * write with the other copies only, so nothing is answered. */
static int leased(shard_t *sh)
{
    return now_us() < __atomic_load_n(&sh->lease_until_us, __ATOMIC_ACQUIRE);
}

/* Partition p is answered: hosted, caught up and the lease holds. */
static int answering(shard_t *sh, uint32_t p)
{
    return p < sh->cfg.partitions && sh->parts[p].hosted && sh->parts[p].ready && leased(sh);
}

static void logf_(shard_t *sh, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(shard_t *sh, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "patina shard %s: ", sh->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* ------------------------------------------------------------- key map */

static unsigned kslot(const char *kk)
{
    unsigned v = 0;
    int i;
    for (i = 0; i < 2; i++) v = v * 16 + (unsigned)(kk[i] <= '9' ? kk[i] - '0' : kk[i] - 'a' + 10);
    return v & 255;
}

static kentry_t *kfind(part_t *pt, const char *kk)
{
    kentry_t *e;
    for (e = pt->map[kslot(kk)]; e; e = e->next)
        if (!strcmp(e->kk, kk)) return e;
    return NULL;
}

static void kfree_all(part_t *pt)
{
    int i;
    for (i = 0; i < 256; i++)
        while (pt->map[i]) {
            kentry_t *e = pt->map[i];
            pt->map[i] = e->next;
            free(e);
        }
}

/* ------------------------------------------------------------ loading */

/* The changes of a batch of bucket entries, per table, applied with one
 * patina_table_apply each (a replace under another id is a REMOVE and a
 * PUT: at most 2 changes per entry and table). */
typedef struct batch {
    kvEntry *e[LOAD_BATCH];
    size_t n;
    patina_change_t *ch[CLU_TABLES_MAX]; /* (2 LOAD_BATCH) each */
    size_t nch[CLU_TABLES_MAX];
} batch_t;

static patina_status batch_init(batch_t *b, size_t ntables)
{
    size_t t;
    memset(b, 0, sizeof *b);
    for (t = 0; t < ntables; t++)
        if (!(b->ch[t] = malloc(2 * LOAD_BATCH * sizeof *b->ch[t]))) return clu_fail(PATINA_E_NOMEM, "shard: out of memory");
    return PATINA_OK;
}

static void batch_release(batch_t *b)
{
    size_t t;
    for (t = 0; t < b->n; t++) kvEntry_Destroy(b->e[t]);
    for (t = 0; t < CLU_TABLES_MAX; t++) free(b->ch[t]);
    memset(b, 0, sizeof *b);
}

static void push(batch_t *b, size_t t, patina_change_op op, uint64_t id, const char *key, const void *desc)
{
    b->ch[t][b->nch[t]++] = (patina_change_t){op, id, key, desc};
}

/* Turns entry e of the batch into changes of the tables and updates the key
 * map (the entry's value stays alive until the batch is applied: the
 * changes borrow its key and descriptors). */
static patina_status batch_entry(shard_t *sh, part_t *pt, batch_t *b, kvEntry *e)
{
    const char *kk = kvEntry_Key(e);
    const uint64_t rev = kvEntry_Revision(e);
    kvOperation op = kvEntry_Operation(e);
    kentry_t *ke;
    size_t t;
    if (!kk || strlen(kk) != 64) return PATINA_OK; /* not an image key: ignored */
    ke = kfind(pt, kk);
    if (op == kvOp_Put) {
        clu_record_t rec;
        uint32_t had = ke ? ke->tables : 0, now = 0;
        const uint64_t vbytes = (uint64_t)kvEntry_ValueLen(e);
        if (clu_record_decode(&rec, kvEntry_Value(e), (size_t)kvEntry_ValueLen(e)) != PATINA_OK) {
            logf_(sh, "partition %u, key %s, revision %llu: %s (skipped)", pt->p, kk, (unsigned long long)rev,
                  clu_last_error());
            return PATINA_OK;
        }
        if (!ke) {
            if (!(ke = calloc(1, sizeof *ke))) return clu_fail(PATINA_E_NOMEM, "shard: out of memory");
            memcpy(ke->kk, kk, 65);
            ke->next = pt->map[kslot(kk)];
            pt->map[kslot(kk)] = ke;
        } else if (ke->id && ke->id != rec.id) {
            /* the same key under another id (deleted and added again): the old rows go */
            for (t = 0; t < sh->cfg.ntables; t++)
                if (had & (1u << t)) push(b, t, PATINA_CHANGE_REMOVE, ke->id, NULL, NULL);
            had = 0;
        }
        for (t = 0; t < sh->cfg.ntables; t++) {
            const clu_rtable_t *rt = clu_record_table(&rec, sh->cfg.tables[t]);
            if (rt && rt->bytes != patina_extractor_bytes(patina_table_extractor(pt->tables[t]))) {
                logf_(sh, "partition %u, key '%s': table %s has %zu bytes (skipped)", pt->p, rec.key,
                      sh->cfg.tables[t], rt->bytes);
                rt = NULL;
            }
            if (rt) {
                push(b, t, PATINA_CHANGE_PUT, rec.id, rec.key, rt->desc);
                now |= 1u << t;
            } else if (had & (1u << t)) {
                push(b, t, PATINA_CHANGE_REMOVE, rec.id, NULL, NULL);
            }
        }
        if (!ke->id) pt->rows++;
        pt->bytes += vbytes - (ke->id ? ke->vbytes : 0);
        ke->vbytes = vbytes;
        ke->id = rec.id;
        ke->tables = now;
    } else if (ke && ke->id) { /* delete or purge */
        for (t = 0; t < sh->cfg.ntables; t++)
            if (ke->tables & (1u << t)) push(b, t, PATINA_CHANGE_REMOVE, ke->id, NULL, NULL);
        if (pt->rows) pt->rows--;
        pt->bytes -= ke->vbytes <= pt->bytes ? ke->vbytes : pt->bytes;
        ke->tables = 0;
        ke->id = 0;
        ke->vbytes = 0;
    }
    return PATINA_OK;
}

/* Applies the batch's changes (one patina_table_apply per table; when an
 * engine refuses one, the batch again one change at a time, the refused
 * ones logged and skipped: PUT replaces and REMOVE of an absent row does
 * nothing, so applying a change twice is harmless), then destroys its
 * entries and records the last revision as applied. */
static void batch_apply(shard_t *sh, part_t *pt, batch_t *b)
{
    size_t t, i;
    uint64_t rev;
    if (!b->n) return;
    rev = kvEntry_Revision(b->e[b->n - 1]);
    for (t = 0; t < sh->cfg.ntables; t++) {
        if (!b->nch[t]) continue;
        if (patina_table_apply(pt->tables[t], b->ch[t], b->nch[t], rev, NULL) == PATINA_OK) continue;
        for (i = 0; i < b->nch[t]; i++)
            if (patina_table_apply(pt->tables[t], &b->ch[t][i], 1, rev, NULL) != PATINA_OK)
                logf_(sh, "partition %u, table %s, key '%s': %s (skipped)", pt->p, sh->cfg.tables[t],
                      b->ch[t][i].key ? b->ch[t][i].key : "", patina_last_error());
    }
    for (i = 0; i < b->n; i++) kvEntry_Destroy(b->e[i]);
    b->n = 0;
    for (t = 0; t < CLU_TABLES_MAX; t++) b->nch[t] = 0;
    pthread_mutex_lock(&sh->mu);
    if (rev > pt->applied) pt->applied = rev;
    pthread_cond_broadcast(&sh->cv);
    pthread_mutex_unlock(&sh->mu);
}

/* The bucket's last revision (its stream's last sequence), for the lag. */
static void refresh_last(shard_t *sh, part_t *pt, const char *bucket)
{
    char stream[160];
    jsStreamInfo *si = NULL;
    jsErrCode ec = 0;
    snprintf(stream, sizeof stream, "KV_%s", bucket);
    if (js_GetStreamInfo(&si, sh->c->js, stream, NULL, &ec) == NATS_OK && si) {
        pt->last = si->State.LastSeq;
        jsStreamInfo_Destroy(si);
    }
}

/* The benchmark source: partition pt filled with its synthetic references
 * (clu_synth_*), in batches of LOAD_BATCH; then ready, and nothing follows. */
static patina_status load_synthetic(shard_t *sh, part_t *pt)
{
    const uint64_t n = clu_synth_count(sh->o.synthetic, pt->p, sh->cfg.partitions);
    unsigned char *pool[CLU_TABLES_MAX] = {0}, *rows = NULL;
    patina_change_t *ch = malloc(LOAD_BATCH * sizeof *ch);
    char (*keys)[48] = malloc(LOAD_BATCH * sizeof *keys);
    patina_status s = ch && keys ? PATINA_OK : clu_fail(PATINA_E_NOMEM, "shard: out of memory");
    size_t t, desc_bytes = 0, row_bytes = 0;
    uint64_t j0;
    for (t = 0; s == PATINA_OK && t < sh->cfg.ntables; t++) {
        const size_t bytes = patina_extractor_bytes(patina_table_extractor(pt->tables[t]));
        s = clu_synth_pool(&pool[t], pt->tables[t], sh->o.synthetic_seed, pt->p, t);
        if (!pool[t] && bytes > row_bytes) row_bytes = bytes;
        desc_bytes += bytes;
    }
    if (s == PATINA_OK && row_bytes && !(rows = malloc(LOAD_BATCH * row_bytes)))
        s = clu_fail(PATINA_E_NOMEM, "shard: out of memory");
    for (j0 = 0; s == PATINA_OK && j0 < n && !pt->stop; j0 += LOAD_BATCH) {
        const size_t nb = (size_t)(n - j0 < LOAD_BATCH ? n - j0 : LOAD_BATCH);
        size_t i;
        for (i = 0; i < nb; i++) clu_synth_key(keys[i], sizeof keys[i], sh->o.synthetic_seed, pt->p, j0 + i);
        for (t = 0; s == PATINA_OK && t < sh->cfg.ntables; t++) {
            const size_t bytes = patina_extractor_bytes(patina_table_extractor(pt->tables[t]));
            for (i = 0; i < nb; i++)
                ch[i] = (patina_change_t){PATINA_CHANGE_PUT, 1 + pt->p + (j0 + i) * sh->cfg.partitions, keys[i],
                                          clu_synth_desc(pool[t], rows ? rows + i * bytes : NULL, bytes,
                                                         sh->o.synthetic_seed, pt->p, t, j0 + i)};
            if ((s = patina_table_apply(pt->tables[t], ch, nb, 0, NULL)) != PATINA_OK)
                s = clu_fail_lib(s, "shard: synthetic references of partition %u, table %s", pt->p, sh->cfg.tables[t]);
        }
        pt->rows += nb;
        pt->bytes += nb * desc_bytes;
    }
    for (t = 0; t < CLU_TABLES_MAX; t++) free(pool[t]);
    free(rows);
    free(ch);
    free(keys);
    return s;
}

/* Builds partition pt's device copies (patina_table_warm: the GPU mirrors
 * of its identification tables, the device copies of its searched ones)
 * so that the first query a copy answers
 * uploads nothing: before it turns ready, and after a large catch-up.
 * Nothing on a CPU shard. A failure is logged (the first query then builds
 * what is missing, or reports it). */
static void warm(shard_t *sh, part_t *pt)
{
    const double t0 = now_s();
    size_t t;
    if (sh->o.device == PATINA_DEVICE_CPU) return;
    for (t = 0; t < sh->cfg.ntables; t++)
        if (patina_table_warm(pt->tables[t]) != PATINA_OK)
            logf_(sh, "partition %u, table %s: warming its device copy: %s", pt->p, sh->cfg.tables[t],
                  patina_last_error());
    if (now_s() - t0 >= 0.5) logf_(sh, "partition %u: device copies built in %.1f s", pt->p, now_s() - t0);
}

/* The readiness rule: a copy turns ready once (1) the initial values were
 * delivered, (2) a heartbeat listing it as hosted was acknowledged, so that
 * a writer that commits after this point finds it among the copies to
 * confirm with, and (3) it applied the bucket's last revision read now,
 * after (1) and (2), and every revision a writer asked it to confirm. A
 * copy behind is checked again after it applied what was pending, each time
 * against a fresh last revision, until there is no gap. */
static void try_ready(shard_t *sh, part_t *pt, const char *bucket)
{
    char stream[160];
    jsStreamInfo *si = NULL;
    jsErrCode ec = 0;
    natsStatus ns;
    uint64_t last;
    int now = 0;
    if (pt->ready || !pt->loaded || !pt->announced) return;
    snprintf(stream, sizeof stream, "KV_%s", bucket);
    ns = js_GetStreamInfo(&si, sh->c->js, stream, NULL, &ec);
    if (ns != NATS_OK) {
        clu_nats_fail(ns, "shard: the last revision of bucket %s", bucket);
        snprintf(pt->error, sizeof pt->error, "%s", clu_last_error());
        return;
    }
    last = si->State.LastSeq;
    jsStreamInfo_Destroy(si);
    pt->last = last;
    pthread_mutex_lock(&sh->mu);
    now = pt->applied >= last && pt->applied >= pt->must_apply;
    pthread_mutex_unlock(&sh->mu);
    if (!now) return;
    warm(sh, pt); /* caught up: its device copies before it answers (applied changes only on this thread) */
    pthread_mutex_lock(&sh->mu);
    /* a CONFIRM may have come meanwhile, or the lease run out (the announcement withdrawn) */
    now = pt->applied >= last && pt->applied >= pt->must_apply && pt->announced && leased(sh);
    if (now) pt->ready = 1;
    pthread_mutex_unlock(&sh->mu);
    if (now)
        logf_(sh, "partition %u ready (%zu image%s, revision %llu)", pt->p, pt->rows, pt->rows == 1 ? "" : "s",
              (unsigned long long)pt->applied);
}

typedef struct loader_arg {
    shard_t *sh;
    part_t *pt;
} loader_arg_t;

/* One partition: watch its bucket from the start (the last value of every
 * key, then every change); ready at the end of the initial values. Entries
 * are applied in batches: whatever the watch has pending, up to LOAD_BATCH
 * at a time. The initial load waits for one of sh->load_slots (at most
 * that many partitions load at once; following changes needs no slot). */
static void *loader(void *arg)
{
    loader_arg_t *la = arg;
    shard_t *sh = la->sh;
    part_t *pt = la->pt;
    char bucket[128];
    kvStore *kv = NULL;
    kvWatcher *w = NULL;
    natsStatus ns;
    batch_t b;
    int slot = 0;
    double last_info = 0;
    free(la);
    clu_bucket_partition(bucket, sizeof bucket, sh->cfg.name, pt->p);
    if (batch_init(&b, sh->cfg.ntables) != PATINA_OK) {
        snprintf(pt->error, sizeof pt->error, "%s", clu_last_error());
        batch_release(&b);
        return NULL;
    }
    while (!pt->stop && !slot) {
        if (sem_trywait(&sh->load_slots) == 0) slot = 1;
        else usleep(20000);
    }
    if (sh->o.synthetic) {
        if (!pt->stop && load_synthetic(sh, pt) != PATINA_OK) {
            snprintf(pt->error, sizeof pt->error, "%s", clu_last_error());
            logf_(sh, "%s", pt->error);
        } else if (!pt->stop) {
            pt->loaded = 1;
            warm(sh, pt);
            pt->ready = 1;
            logf_(sh, "partition %u ready (%zu synthetic references)", pt->p, pt->rows);
        }
        if (slot) sem_post(&sh->load_slots);
        batch_release(&b);
        while (!pt->stop) usleep(100000);
        return NULL;
    }
    while (!pt->stop) {
        if (!kv && clu_kv_open(&kv, sh->c, bucket) != PATINA_OK) {
            snprintf(pt->error, sizeof pt->error, "%s", clu_last_error());
            usleep(500000);
            continue;
        }
        if (!w && (ns = kvStore_WatchAll(&w, kv, NULL)) != NATS_OK) {
            clu_nats_fail(ns, "shard: watching bucket %s", bucket);
            snprintf(pt->error, sizeof pt->error, "%s", clu_last_error());
            w = NULL;
            usleep(500000);
            continue;
        }
        if (now_s() - last_info >= 1.0) {
            refresh_last(sh, pt, bucket);
            last_info = now_s();
        }
        {
            kvEntry *e = NULL;
            size_t caught_up;
            int end_of_initial = 0;
            uint64_t pending = 0;
            ns = kvWatcher_Next(&e, w, 250);
            if (ns == NATS_TIMEOUT) {
                try_ready(sh, pt, bucket);
                continue;
            }
            if (ns != NATS_OK) {
                clu_nats_fail(ns, "shard: watch of bucket %s", bucket);
                snprintf(pt->error, sizeof pt->error, "%s", clu_last_error());
                usleep(100000);
                continue;
            }
            /* the batch: this entry and whatever is pending behind it */
            while (e) {
                pending = kvEntry_Delta(e);
                b.e[b.n++] = e;
                if (batch_entry(sh, pt, &b, e) != PATINA_OK) snprintf(pt->error, sizeof pt->error, "%s", clu_last_error());
                e = NULL;
                if (b.n == LOAD_BATCH || (pending == 0 && pt->loaded)) break;
                if (kvWatcher_Next(&e, w, pending ? 1000 : 50) != NATS_OK) e = NULL;
                else if (!e) end_of_initial = 1;
            }
            if (!e && !b.n) end_of_initial = 1; /* the marker came first */
            caught_up = pt->ready ? b.n : 0;
            batch_apply(sh, pt, &b);
            if (caught_up >= WARM_AFTER) warm(sh, pt); /* a large catch-up: uploaded now, not by a query */
            if (end_of_initial && !pt->loaded) { /* the initial values are in */
                pt->loaded = 1;
                if (slot) {
                    sem_post(&sh->load_slots);
                    slot = 0;
                }
                last_info = now_s();
                try_ready(sh, pt, bucket);
            } else if (pending == 0) {
                /* a copy not ready (loading, or a CONFIRM timed out) checks again once caught up */
                try_ready(sh, pt, bucket);
            }
        }
    }
    if (slot) sem_post(&sh->load_slots);
    batch_release(&b);
    if (w) {
        kvWatcher_Stop(w);
        kvWatcher_Destroy(w);
    }
    if (kv) kvStore_Destroy(kv);
    return NULL;
}

/* Partition pt stops answering until it applied `rev` (and caught up):
 * a write it could not confirm. shard.mu held. */
static void withdraw_locked(part_t *pt, uint64_t rev)
{
    pt->ready = 0;
    if (pt->must_apply < rev) pt->must_apply = rev;
}

/* Starts hosting partition p (lock held for writing). */
static patina_status host(shard_t *sh, uint32_t p)
{
    part_t *pt = &sh->parts[p];
    patina_table_opts_t to;
    loader_arg_t *la;
    size_t t;
    memset(pt, 0, sizeof *pt);
    pt->p = p;
    patina_table_opts_init(&to);
    /* synthetic keys are not hashed to their partition: no filter then */
    to.partition = sh->o.synthetic ? 0 : p;
    to.partitions = sh->o.synthetic ? 1 : sh->cfg.partitions;
    for (t = 0; t < sh->cfg.ntables; t++)
        if (patina_table_new(&pt->tables[t], sh->ctx, sh->cfg.tables[t], &to) != PATINA_OK) {
            patina_status s = clu_fail_lib(PATINA_E_INVALID, "shard: table %s of partition %u", sh->cfg.tables[t], p);
            while (t) patina_table_free(pt->tables[--t]);
            return s;
        }
    if (!(la = malloc(sizeof *la))) return clu_fail(PATINA_E_NOMEM, "shard: out of memory");
    la->sh = sh;
    la->pt = pt;
    if (pthread_create(&pt->th, NULL, loader, la) != 0) {
        free(la);
        for (t = 0; t < sh->cfg.ntables; t++) patina_table_free(pt->tables[t]);
        return clu_fail(PATINA_E_NOMEM, "shard: cannot start a thread for partition %u", p);
    }
    pt->gen = ++sh->gens;
    pt->hosted = 1;
    return PATINA_OK;
}

/* Stops hosting p: the loader first (without the lock), then the tables
 * under the write lock. */
static void drop(shard_t *sh, uint32_t p)
{
    part_t *pt = &sh->parts[p];
    size_t t;
    pt->ready = 0;
    pt->stop = 1;
    pthread_join(pt->th, NULL);
    pthread_rwlock_wrlock(&sh->lock);
    for (t = 0; t < sh->cfg.ntables; t++) patina_table_free(pt->tables[t]);
    kfree_all(pt);
    memset(pt, 0, sizeof *pt);
    pthread_rwlock_unlock(&sh->lock);
}

/* --------------------------------------------------------------- requests */

static int table_index(const shard_t *sh, const char *spec)
{
    size_t t;
    for (t = 0; spec && t < sh->cfg.ntables; t++)
        if (!strcmp(sh->cfg.tables[t], spec)) return (int)t;
    return -1;
}

/* Answers one request into reply (read lock held). */
static void answer(shard_t *sh, const clu_request_t *q, clu_reply_t *r)
{
    size_t i, np = 0;
    int t;
    patina_status s = PATINA_OK;
    r->kind = q->kind;
    if (!(r->parts = calloc(q->nparts ? q->nparts : 1, sizeof *r->parts))) {
        r->status = clu_fail(PATINA_E_NOMEM, "shard: out of memory");
        return;
    }
    if (q->kind == CLU_KIND_CONFIRM) {
        part_t *pt = q->partition < sh->cfg.partitions ? &sh->parts[q->partition] : NULL;
        struct timespec until;
        int ok;
        if (!pt || !pt->hosted) {
            r->status = clu_fail(PATINA_E_NOTFOUND, "shard %s does not hold partition %u", sh->name, q->partition);
            return;
        }
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += q->timeout_ms / 1000;
        until.tv_nsec += (long)(q->timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&sh->mu);
        if (!pt->ready || !leased(sh)) { /* loading (or lapsed): it turns ready only once it applied the revision */
            withdraw_locked(pt, q->revision);
            pthread_mutex_unlock(&sh->mu);
            r->nparts = 0;
            return;
        }
        while (pt->applied < q->revision && pthread_cond_timedwait(&sh->cv, &sh->mu, &until) == 0) {}
        ok = pt->applied >= q->revision;
        if (!ok) withdraw_locked(pt, q->revision); /* until caught up */
        pthread_mutex_unlock(&sh->mu);
        if (!ok) {
            r->status = clu_fail(PATINA_E_UNAVAILABLE, "shard %s: partition %u did not apply revision %llu in %u ms "
                                 "(withdrawn)", sh->name, q->partition, (unsigned long long)q->revision, q->timeout_ms);
            return;
        }
        r->parts[0] = q->partition;
        r->nparts = 1;
        return;
    }
    if ((t = table_index(sh, q->spec)) < 0) {
        r->status = clu_fail(PATINA_E_NOTFOUND, "shard %s: collection %s has no table '%s'", sh->name, sh->cfg.name,
                             q->spec ? q->spec : "");
        return;
    }
    for (i = 0; i < q->nparts; i++) {
        uint32_t p = q->parts[i];
        if (answering(sh, p)) r->parts[np++] = p;
    }
    r->nparts = np;
    if (q->kind == CLU_KIND_SEARCH) {
        /* the requested ready partitions in ONE call, as one table of their
         * union: one scan with one k-th distance per query across them */
        patina_table_query_t qq = q->query;
        patina_table_t **tbs = calloc(np ? np : 1, sizeof *tbs);
        qq.keys = 1;
        qq.stats = NULL;
        if (sh->o.device == PATINA_DEVICE_CPU) qq.device = PATINA_DEVICE_CPU;
        if (!tbs) s = clu_fail(PATINA_E_NOMEM, "shard: out of memory");
        for (i = 0; s == PATINA_OK && i < np; i++) {
            tbs[i] = sh->parts[r->parts[i]].tables[t];
            if (q->qbytes != patina_extractor_bytes(patina_table_extractor(tbs[i])))
                s = clu_fail(PATINA_E_INVALID, "shard: queries of %zu bytes for table %s of %zu", q->qbytes, q->spec,
                             patina_extractor_bytes(patina_table_extractor(tbs[i])));
        }
        if (s == PATINA_OK && np &&
            (s = patina_table_search_many(tbs, np, q->queries, q->nq, &qq, &r->res)) != PATINA_OK)
            s = clu_fail_lib(s, "shard %s: partitions %u.. (%zu)", sh->name, r->parts[0], np);
        if (s == PATINA_OK && !np) { /* no partition: an empty answer */
            r->res.nq = q->nq;
            if (!(r->res.offsets = calloc(q->nq + 1, sizeof *r->res.offsets)))
                s = clu_fail(PATINA_E_NOMEM, "shard: out of memory");
        }
        free(tbs);
    } else {
        /* the requested ready partitions in ONE call: matched each against
         * its own reference set (its GPU mirror), the union's best
         * candidates verified once, the keys from their partitions */
        patina_identify_opts_t o = q->iopts;
        const size_t pk = patina_identify_part_k(&q->iopts);
        patina_table_t **tbs = calloc(np ? np : 1, sizeof *tbs);
        o.k = pk;
        if (sh->o.device == PATINA_DEVICE_CPU) o.device = PATINA_DEVICE_CPU;
        if (pk == 0 || pk > PATINA_K_MAX || q->nq * pk > (1u << 24))
            s = clu_fail(PATINA_E_LIMIT, "shard: identify k %zu x %zu queries", pk, q->nq);
        if (!tbs) s = clu_fail(PATINA_E_NOMEM, "shard: out of memory");
        for (i = 0; s == PATINA_OK && i < np; i++) {
            tbs[i] = sh->parts[r->parts[i]].tables[t];
            if (q->qbytes != patina_table_query_bytes(tbs[i]))
                s = clu_fail(PATINA_E_INVALID, "shard: identify queries of %zu bytes for table %s of %zu", q->qbytes,
                             q->spec, patina_table_query_bytes(tbs[i]));
        }
        if (s == PATINA_OK) {
            r->nq = q->nq;
            r->k = pk;
            r->hits = calloc(q->nq * pk + 1, sizeof *r->hits);
            r->results = calloc(q->nq + 1, sizeof *r->results);
            r->keys = calloc(q->nq * pk + 1, sizeof *r->keys);
            if (!r->hits || !r->results || !r->keys) s = clu_fail(PATINA_E_NOMEM, "shard: out of memory");
            else if (!np && o.threshold == PATINA_THRESHOLD_CALIBRATED &&
                     (s = patina_identify_far_threshold_opts(q->spec, &o, PATINA_FAR_DEFAULT, &o.threshold)) != PATINA_OK)
                s = clu_fail_lib(s, "shard %s: identify", sh->name);
            else if (!np) /* no partition: an empty answer (the merge of none) */
                s = patina_identify_merge(NULL, NULL, 0, q->nq, &o, r->hits, r->results);
            else if ((s = patina_table_identify_many(tbs, np, q->queries, q->nq, &o, r->hits, r->results,
                                                     r->keys)) != PATINA_OK)
                s = clu_fail_lib(s, "shard %s: partitions %u.. (%zu)", sh->name, r->parts[0], np);
            for (i = 0; s == PATINA_OK && i < np; i++) r->rows += patina_table_size(tbs[i]);
        }
        free(tbs);
    }
    if (s != PATINA_OK) {
        r->status = s;
        r->nparts = 0;
    }
}

typedef struct req {
    natsConnection *nc;
    natsMsg *msg;
    double got; /* arrival (now_s) */
    struct req *next;
} req_t;

/* Publishes a reply to msg (when it asks for one). */
static void reply(shard_t *sh, natsConnection *nc, natsMsg *msg, double got, clu_reply_t *r)
{
    clu_buf_t out = {0};
    const int64_t maxp = natsConnection_GetMaxPayload(nc);
    r->shard_ms = (now_s() - got) * 1e3;
    if (r->status != PATINA_OK) {
        snprintf(r->message, sizeof r->message, "%s", clu_last_error());
        __atomic_add_fetch(&sh->errors, 1, __ATOMIC_RELAXED);
    }
    if (clu_reply_encode(&out, r) == PATINA_OK && maxp > 0 && out.n > (uint64_t)maxp) {
        /* over the server's max_payload: the publish would fail and the front end wait its deadline; it
         * splits the request on this error instead (front.c) */
        clu_fail(PATINA_E_LIMIT, "shard %s: a reply of %zu bytes (%zu queries) is over the %lld bytes of the NATS "
                 "server's max_payload", sh->name, out.n, r->kind == CLU_KIND_SEARCH ? r->res.nq : r->nq,
                 (long long)maxp);
        out.oom = 1;
        if (r->status == PATINA_OK) __atomic_add_fetch(&sh->errors, 1, __ATOMIC_RELAXED); /* answered with one */
    }
    if (out.oom) { /* too large: say so instead */
        clu_reply_t e;
        memset(&e, 0, sizeof e);
        e.kind = r->kind;
        e.status = PATINA_E_LIMIT;
        e.shard_ms = r->shard_ms;
        snprintf(e.message, sizeof e.message, "%s", clu_last_error());
        clu_buf_release(&out);
        clu_reply_encode(&out, &e);
    }
    if (natsMsg_GetReply(msg) && !out.oom) natsConnection_Publish(nc, natsMsg_GetReply(msg), out.p, (int)out.n);
    clu_buf_release(&out);
}

static void serve_request(shard_t *sh, req_t *rq)
{
    clu_request_t q;
    clu_reply_t r;
    const double t0 = now_s();
    double call = 0;
    patina_status s;
    memset(&r, 0, sizeof r);
    s = clu_request_decode(&q, natsMsg_GetData(rq->msg), (size_t)natsMsg_GetDataLength(rq->msg));
    if (s != PATINA_OK) {
        r.kind = CLU_KIND_SEARCH;
        r.status = s;
    } else {
        double c0;
        pthread_rwlock_rdlock(&sh->lock);
        c0 = now_s();
        answer(sh, &q, &r);
        call = now_s() - c0;
        pthread_rwlock_unlock(&sh->lock);
    }
    reply(sh, rq->nc, rq->msg, rq->got, &r);
    if (s == PATINA_OK) {
        __atomic_add_fetch(&sh->requests[q.kind], 1, __ATOMIC_RELAXED);
        if (q.kind != CLU_KIND_CONFIRM && r.status == PATINA_OK)
            __atomic_add_fetch(&sh->parts_answered, (unsigned long long)r.nparts, __ATOMIC_RELAXED);
        clu_request_release(&q);
    }
    clu_reply_release(&r);
    {
        double dt = now_s() - t0;
        pthread_mutex_lock(&sh->mu);
        sh->request_seconds += dt;
        sh->queue_seconds += t0 - rq->got;
        sh->call_seconds += call;
        pthread_mutex_unlock(&sh->mu);
    }
}

/* A worker of the pool: takes requests off the queue until it stops. */
static void *worker(void *arg)
{
    shard_t *sh = arg;
    for (;;) {
        req_t *rq;
        pthread_mutex_lock(&sh->qmu);
        while (!sh->qhead && !sh->qstop) pthread_cond_wait(&sh->qcv, &sh->qmu);
        if (!sh->qhead) { /* stopping and nothing left */
            pthread_mutex_unlock(&sh->qmu);
            return NULL;
        }
        rq = sh->qhead;
        sh->qhead = rq->next;
        if (!sh->qhead) sh->qtail = NULL;
        sh->qlen--;
        pthread_mutex_unlock(&sh->qmu);
        serve_request(sh, rq);
        natsMsg_Destroy(rq->msg);
        free(rq);
        __atomic_sub_fetch(&sh->inflight, 1, __ATOMIC_RELAXED);
    }
}

/* NATS's delivery thread: queues the request for the pool (a full queue
 * is answered at once: busy). */
static void on_msg(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
{
    shard_t *sh = closure;
    req_t *rq = malloc(sizeof *rq);
    int full;
    (void)sub;
    if (!rq) {
        natsMsg_Destroy(msg);
        return;
    }
    rq->nc = nc;
    rq->msg = msg;
    rq->got = now_s();
    rq->next = NULL;
    pthread_mutex_lock(&sh->qmu);
    full = sh->qlen >= QUEUE_MAX || sh->qstop;
    if (!full) {
        if (sh->qtail) sh->qtail->next = rq;
        else sh->qhead = rq;
        sh->qtail = rq;
        sh->qlen++;
        __atomic_add_fetch(&sh->inflight, 1, __ATOMIC_RELAXED);
        pthread_cond_signal(&sh->qcv);
    }
    pthread_mutex_unlock(&sh->qmu);
    if (full) {
        clu_reply_t r;
        clu_request_t q;
        memset(&r, 0, sizeof r);
        /* a CONFIRM refused is a write this copy did not confirm: the copy withdraws as if it had
         * timed out (the writer does not wait for the outcome) */
        if (clu_request_decode(&q, natsMsg_GetData(msg), (size_t)natsMsg_GetDataLength(msg)) == PATINA_OK) {
            if (q.kind == CLU_KIND_CONFIRM && q.partition < sh->cfg.partitions) {
                part_t *pt = &sh->parts[q.partition];
                pthread_rwlock_rdlock(&sh->lock);
                pthread_mutex_lock(&sh->mu);
                if (pt->hosted && pt->applied < q.revision) withdraw_locked(pt, q.revision);
                pthread_mutex_unlock(&sh->mu);
                pthread_rwlock_unlock(&sh->lock);
            }
            clu_request_release(&q);
        }
        r.kind = CLU_KIND_SEARCH;
        r.status = clu_fail(PATINA_E_BUSY, "shard %s: %d requests waiting (busy)", sh->name, QUEUE_MAX);
        reply(sh, nc, msg, rq->got, &r);
        natsMsg_Destroy(msg);
        free(rq);
    }
}

/* Device bytes the context holds: the sum of the "D MiB device" figures of
 * patina_context_gpu_memory's text ("NAME: budget B MiB; D MiB device (peak
 * P), H MiB pinned; ..."), one such part per device. */
static uint64_t gpu_mem_now(shard_t *sh)
{
    char buf[8192];
    const char *p;
    double total = 0;
    if (sh->o.device == PATINA_DEVICE_CPU || patina_context_gpu_memory(sh->ctx, buf, sizeof buf) != PATINA_OK) {
        patina_clear_error();
        return 0;
    }
    for (p = buf; (p = strstr(p, ": budget ")) != NULL; p++) {
        double budget, dev;
        if (sscanf(p, ": budget %lf MiB; %lf MiB device", &budget, &dev) == 2) total += dev;
    }
    return (uint64_t)(total * 1048576.0);
}

/* The weight of a shard given no --capacity: the references its GPU
 * memory holds. A reference costs, per device, its GPU bytes in every
 * table: rootsift tables as patina_identify_capacity counts them (their
 * references per device, times the devices), the others their descriptor
 * bytes against the sum of the devices' budgets. 1 without a GPU. */
static double default_capacity(shard_t *sh)
{
    char buf[8192];
    const char *p;
    double budget = 0, refs = -1, row_bytes = 0;
    const size_t ndev = patina_context_devices(sh->ctx, NULL, 0);
    size_t t;
    if (sh->o.device == PATINA_DEVICE_CPU || patina_context_gpu_memory(sh->ctx, buf, sizeof buf) != PATINA_OK) {
        patina_clear_error();
        return 1;
    }
    for (p = buf; (p = strstr(p, ": budget ")) != NULL; p++) {
        double b;
        if (sscanf(p, ": budget %lf MiB", &b) == 1) budget += b * 1048576.0;
    }
    for (t = 0; t < sh->cfg.ntables; t++) {
        patina_identify_capacity_t cap;
        if (patina_identify_capacity(sh->ctx, sh->cfg.tables[t], &cap) == PATINA_OK) {
            const double r = (double)cap.gpu_refs * (double)(ndev ? ndev : 1);
            if (refs < 0 || r < refs) refs = r;
        } else { /* not an identification table: its rows */
            patina_extractor_t *ex = NULL;
            patina_clear_error();
            if (patina_extractor_new(&ex, sh->cfg.tables[t]) == PATINA_OK)
                row_bytes += (double)patina_extractor_bytes(ex);
            patina_extractor_free(ex);
        }
    }
    if (row_bytes > 0 && budget > 0 && (refs < 0 || budget / row_bytes < refs)) refs = budget / row_bytes;
    return refs >= 1 ? floor(refs) : 1;
}

/* Samples gpu_mem every 2 s (apart from the heartbeat, which must not wait
 * for a long GPU call). */
static void *gpu_sampler(void *arg)
{
    shard_t *sh = arg;
    int i;
    while (!sh->sampler_stop) {
        sh->gpu_mem = gpu_mem_now(sh);
        for (i = 0; i < 40 && !sh->sampler_stop; i++) usleep(50000);
    }
    return NULL;
}

/* ------------------------------------------------------------- membership */

/* inc (partitions): the hosting (part_t.gen) of each partition listed as
 * hosted, 0 for the others. The caller holds sh->lock (reading). */
static char *member_json(shard_t *sh, uint64_t *inc)
{
    json_t *o = json_object(), *ready = json_array(), *hosted = json_array(), *lag = json_object();
    uint64_t bytes = 0;
    uint32_t p;
    char *s;
    for (p = 0; p < sh->cfg.partitions; p++) {
        part_t *pt = &sh->parts[p];
        char ps[16];
        if (!pt->hosted) continue;
        inc[p] = pt->gen;
        json_array_append_new(hosted, json_integer(p));
        if (pt->ready) json_array_append_new(ready, json_integer(p));
        bytes += pt->bytes;
        snprintf(ps, sizeof ps, "%u", p);
        json_object_set_new(lag, ps, json_integer((json_int_t)(pt->last > pt->applied ? pt->last - pt->applied : 0)));
    }
    json_object_set_new(o, "name", json_string(sh->name));
    json_object_set_new(o, "capacity", json_real(sh->o.capacity));
    json_object_set_new(o, "copies", json_integer(sh->o.copies));
    json_object_set_new(o, "device", json_string(sh->device));
    {
        json_t *dv = json_array();
        size_t d;
        for (d = 0; sh->o.device != PATINA_DEVICE_CPU && d < sh->ndevices && d < PATINA_GPUS_MAX; d++)
            json_array_append_new(dv, json_integer(sh->devices[d]));
        json_object_set_new(o, "devices", dv);
    }
    json_object_set_new(o, "ready", ready);
    json_object_set_new(o, "hosted", hosted);
    json_object_set_new(o, "lag", lag);
    json_object_set_new(o, "bytes", json_integer((json_int_t)bytes));
    json_object_set_new(o, "gpu_mem", json_integer((json_int_t)sh->gpu_mem));
    json_object_set_new(o, "inbox", json_string(sh->subject));
    json_object_set_new(o, "started", json_integer(sh->started));
    if (sh->leaving) json_object_set_new(o, "leaving", json_true());
    s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* The lease ran out (no heartbeat acknowledged for CLU_MEMBER_LEASE_MS), or
 * the connection was lost (`why` says which): every partition of a shard
 * that follows its buckets loses its readiness and its announcement, so that it
 * turns ready again only through the readiness rule -- announced by an
 * acknowledged heartbeat, then caught up with the bucket's last revision
 * read after it, which includes every write confirmed while its entry may
 * have been missing. */
static void withdraw_all(shard_t *sh, const char *why)
{
    uint32_t p, n = 0;
    pthread_rwlock_rdlock(&sh->lock);
    pthread_mutex_lock(&sh->mu);
    for (p = 0; p < sh->cfg.partitions; p++) {
        part_t *pt = &sh->parts[p];
        if (!pt->hosted || sh->o.synthetic) continue;
        n += pt->ready != 0;
        pt->ready = 0;
        pt->announced = 0;
    }
    pthread_mutex_unlock(&sh->mu);
    pthread_rwlock_unlock(&sh->lock);
    logf_(sh, "%s: %u ready partition%s withdrawn", why, n, n == 1 ? "" : "s");
}

/* One beat: the entry put (read lock held while it is written, not while
 * it is sent); once acknowledged, the partitions it listed as hosted are
 * announced -- those still in the same hosting (a partition dropped and
 * hosted again meanwhile waits for the next beat). */
static void heartbeat(shard_t *sh)
{
    uint64_t *inc = calloc(sh->cfg.partitions, sizeof *inc);
    const uint64_t sent = now_us();
    char *js;
    natsStatus ns;
    uint32_t p;
    if (!inc) return;
    pthread_rwlock_rdlock(&sh->lock);
    js = member_json(sh, inc);
    pthread_rwlock_unlock(&sh->lock);
    if (!js) {
        free(inc);
        return;
    }
    ns = kvStore_Put(NULL, sh->members, sh->name, js, (int)strlen(js));
    {
        /* the lease ran out before this beat came back (acknowledged or not): the entry may have been
         * gone meanwhile (it expires after it, CLU_MEMBERS_TTL_MS > CLU_MEMBER_LEASE_MS, so any gap
         * means a lapse), and writes committed then were not confirmed here. Also after a stall of
         * the whole process (a pause, a frozen VM), whose next beat succeeds at once. */
        const uint64_t lease = __atomic_load_n(&sh->lease_until_us, __ATOMIC_ACQUIRE);
        const unsigned long disc = __atomic_load_n(&sh->c->disconnects, __ATOMIC_ACQUIRE);
        if (lease && now_us() >= lease && !sh->lapsed) {
            sh->lapsed = 1;
            withdraw_all(sh, "no heartbeat acknowledged within its lease (its entry may have expired)");
        } else if (disc != sh->disconnects) {
            /* the requests sent while it was away, a writer's CONFIRM among them, are lost: the
             * copies come back through the readiness rule, as after a lapse */
            withdraw_all(sh, "the NATS connection was lost meanwhile");
        }
        sh->disconnects = disc;
    }
    if (ns != NATS_OK) {
        clu_nats_fail(ns, "membership entry %s", sh->name);
        logf_(sh, "%s", clu_last_error());
    } else { /* acknowledged: writers from now on see these partitions hosted here */
        __atomic_store_n(&sh->lease_until_us, sent + (uint64_t)CLU_MEMBER_LEASE_MS * 1000u, __ATOMIC_RELEASE);
        if (sh->lapsed) {
            sh->lapsed = 0;
            logf_(sh, "heartbeat acknowledged again: partitions turn ready once caught up");
        }
        pthread_rwlock_rdlock(&sh->lock);
        for (p = 0; p < sh->cfg.partitions; p++)
            if (inc[p] && sh->parts[p].hosted && sh->parts[p].gen == inc[p]) sh->parts[p].announced = 1;
        pthread_rwlock_unlock(&sh->lock);
    }
    free(js);
    free(inc);
}

/* The heartbeat's thread: a beat every HEARTBEAT_MS, or at once when
 * kicked (a partition hosted: its announcement gates its readiness). */
static void *heartbeat_thread(void *arg)
{
    shard_t *sh = arg;
    while (!sh->hb_stop) {
        int i;
        sh->hb_kick = 0;
        heartbeat(sh);
        for (i = 0; i < HEARTBEAT_MS / 50 && !sh->hb_stop && !sh->hb_kick; i++) usleep(50000);
    }
    return NULL;
}

/* The assignment from the live members that are not leaving (this shard
 * counted even before its entry is visible): hosts what it is given, drops
 * what it is no longer given once every member given it is ready (or after
 * DROP_GRACE_S). */
static void reassign(shard_t *sh)
{
    clu_member_t *m = NULL;
    clu_member_w_t *w;
    size_t n = 0, nw = 0, i, self = SIZE_MAX, out[CLU_REPLICAS_MAX * 4], nout, *plan = NULL, *idx;
    uint32_t p;
    int hosted = 0;
    if (clu_members_read(sh->c, &sh->cfg, &m, &n) != PATINA_OK) {
        logf_(sh, "%s", clu_last_error());
        return;
    }
    w = calloc(n + 1, sizeof *w);
    idx = calloc(n + 1, sizeof *idx); /* w[j] is m[idx[j]]; SIZE_MAX: this shard, not read */
    if (!w || !idx) {
        free(w);
        free(idx);
        clu_members_free(m, n);
        return;
    }
    for (i = 0; i < n; i++) {
        if (!strcmp(m[i].name, sh->name)) self = nw;
        else if (m[i].leaving) continue; /* handing over: its partitions go to the others */
        idx[nw] = i;
        w[nw++] = (clu_member_w_t){m[i].name, m[i].capacity};
    }
    sh->listed = self != SIZE_MAX;
    if (self == SIZE_MAX) {
        idx[nw] = SIZE_MAX;
        w[nw] = (clu_member_w_t){sh->name, sh->o.capacity};
        self = nw++;
    }
    {
        const size_t r = (size_t)sh->o.copies;
        if (!(plan = malloc((size_t)sh->cfg.partitions * r * sizeof *plan)) ||
            clu_assign(w, nw, sh->cfg.partitions, r, plan) != PATINA_OK) {
            logf_(sh, "assignment: out of memory");
            free(plan);
            free(w);
            free(idx);
            clu_members_free(m, n);
            return;
        }
    }
    for (p = 0; p < sh->cfg.partitions; p++) {
        int mine = 0, others_ready = 1;
        const size_t r = (size_t)sh->o.copies;
        for (nout = 0; nout < r && plan[(size_t)p * r + nout] != SIZE_MAX; nout++) out[nout] = plan[(size_t)p * r + nout];
        for (i = 0; i < nout; i++) {
            if (out[i] == self) mine = 1;
            else if (idx[out[i]] == SIZE_MAX || !m[idx[out[i]]].ready[p]) others_ready = 0;
        }
        sh->assigned[p] = (uint8_t)mine;
        if (mine && !sh->parts[p].hosted) {
            patina_status s;
            pthread_rwlock_wrlock(&sh->lock);
            s = host(sh, p);
            pthread_rwlock_unlock(&sh->lock);
            if (s != PATINA_OK) logf_(sh, "%s", clu_last_error());
            else hosted = 1;
        } else if (mine) {
            sh->parts[p].unassigned_since = 0;
        } else if (sh->parts[p].hosted) {
            if (!sh->parts[p].unassigned_since) sh->parts[p].unassigned_since = time(NULL);
            if (others_ready || time(NULL) - sh->parts[p].unassigned_since > DROP_GRACE_S) {
                logf_(sh, "partition %u handed over", p);
                drop(sh, p);
            }
        }
    }
    if (hosted) sh->hb_kick = 1; /* announce them now: their readiness waits for it */
    free(plan);
    free(w);
    free(idx);
    clu_members_free(m, n);
}

/* Partitions this shard hosts that no other member, not leaving, holds
 * ready: their number (UINT32_MAX when the members cannot be read), the
 * first few in list. */
static uint32_t uncovered(shard_t *sh, char *list, size_t size)
{
    clu_member_t *m = NULL;
    size_t n = 0, i, used = 0;
    uint32_t p, count = 0;
    if (size) list[0] = '\0';
    if (clu_members_read(sh->c, &sh->cfg, &m, &n) != PATINA_OK) return UINT32_MAX;
    for (p = 0; p < sh->cfg.partitions; p++) {
        int covered = 0;
        if (!sh->parts[p].hosted) continue;
        for (i = 0; i < n && !covered; i++)
            covered = strcmp(m[i].name, sh->name) && !m[i].leaving && m[i].ready[p];
        if (covered) continue;
        if (count < 16 && used < size) {
            int k = snprintf(list + used, size - used, "%s%u", count ? " " : "", p);
            if (k > 0) used += (size_t)k;
        }
        count++;
    }
    clu_members_free(m, n);
    return count;
}

/* The hand-over on stop: announced as leaving, it answers on until every
 * partition it hosts has a ready copy elsewhere or drain_timeout_s passes. */
static void drain(shard_t *sh)
{
    const double t0 = now_s();
    char list[128];
    uint32_t left = 0;
    sh->leaving = 1;
    sh->hb_kick = 1;
    logf_(sh, "stopping: leaving; answering until every partition it holds has a ready copy on another shard "
          "(at most %d s, --drain-timeout)", sh->o.drain_timeout_s);
    for (;;) {
        left = uncovered(sh, list, sizeof list);
        if (left == 0) {
            logf_(sh, "hand-over done in %.1f s: every partition it held has a ready copy elsewhere", now_s() - t0);
            usleep(LINGER_MS * 1000); /* front ends' members caches see those copies */
            return;
        }
        if (now_s() - t0 >= sh->o.drain_timeout_s) break;
        usleep(200000);
    }
    if (left == UINT32_MAX)
        logf_(sh, "hand-over: --drain-timeout (%d s) passed and the members cannot be read (%s): leaving",
              sh->o.drain_timeout_s, clu_last_error());
    else
        logf_(sh, "hand-over: --drain-timeout (%d s) passed: %u partition%s left uncovered (no other shard holds "
              "a ready copy: %s%s); leaving", sh->o.drain_timeout_s, left, left == 1 ? "" : "s", list,
              left > 16 ? " ..." : "");
}

/* ---------------------------------------------------------------- metrics */

/* GET /ready: 1 when the last assignment was computed with this shard's own
 * entry among the members and every partition it gives this shard is
 * hosted and ready; text says so or what is missing. */
static int readiness(shard_t *sh, char *text, size_t size)
{
    uint32_t p, assigned = 0, ready = 0, first = UINT32_MAX;
    if (sh->leaving) {
        snprintf(text, size, "not ready: shard %s is leaving (handing its partitions over)\n", sh->name);
        return 0;
    }
    if (!sh->listed) {
        snprintf(text, size, "not ready: shard %s is not among the members yet\n", sh->name);
        return 0;
    }
    for (p = 0; p < sh->cfg.partitions; p++) {
        if (!sh->assigned[p]) continue;
        assigned++;
        if (answering(sh, p)) ready++;
        else if (first == UINT32_MAX) first = p;
    }
    if (ready < assigned) {
        snprintf(text, size, "not ready: %u of the %u partitions assigned to shard %s are ready (partition %u is not)\n",
                 ready, assigned, sh->name, first);
        return 0;
    }
    snprintf(text, size, "ready: the %u partitions assigned to shard %s\n", assigned, sh->name);
    return 1;
}

/* 1 when the request is a GET of path (and nothing after it but a query). */
static int is_get(const char *req, const char *path)
{
    const size_t n = strlen(path);
    return !strncmp(req, "GET ", 4) && !strncmp(req + 4, path, n) && (req[4 + n] == ' ' || req[4 + n] == '?');
}

static void *metrics_thread(void *arg)
{
    shard_t *sh = arg;
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (fd < 0) return NULL;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)sh->o.metrics_port);
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 16) != 0) {
        logf_(sh, "metrics: cannot listen on port %d: %s", sh->o.metrics_port, strerror(errno));
        close(fd);
        return NULL;
    }
    for (;;) {
        char req[1024], *body = NULL;
        size_t blen = 0;
        FILE *f;
        int cfd = accept(fd, NULL, NULL);
        uint32_t p, hosted = 0, ready = 0;
        uint64_t rows = 0, bytes = 0;
        double secs[3]; /* request, queue and call seconds */
        ssize_t got;
        if (cfd < 0) continue;
        got = read(cfd, req, sizeof req - 1);
        if (got <= 0) {
            close(cfd);
            continue;
        }
        req[got] = '\0';
        if (is_get(req, "/ready")) { /* readiness: 200 or 503 */
            char text[256], head[256];
            const int ok = readiness(sh, text, sizeof text);
            const size_t tn = strlen(text);
            int hn = snprintf(head, sizeof head,
                              "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                              "Connection: close\r\n\r\n",
                              ok ? "200 OK" : "503 Service Unavailable", tn);
            if (write(cfd, head, (size_t)hn) == hn && write(cfd, text, tn) == (ssize_t)tn) {}
            close(cfd);
            continue;
        }
        for (p = 0; p < sh->cfg.partitions; p++)
            if (sh->parts[p].hosted) {
                hosted++;
                ready += answering(sh, p);
                rows += sh->parts[p].rows;
                bytes += sh->parts[p].bytes;
            }
        pthread_mutex_lock(&sh->mu); /* the request threads add to them */
        secs[0] = sh->request_seconds;
        secs[1] = sh->queue_seconds;
        secs[2] = sh->call_seconds;
        pthread_mutex_unlock(&sh->mu);
        f = open_memstream(&body, &blen);
        if (!f) {
            close(cfd);
            continue;
        }
        fprintf(f, "# HELP patina_shard_partitions Partitions this shard hosts (loaded or loading).\n"
                   "# TYPE patina_shard_partitions gauge\npatina_shard_partitions{collection=\"%s\",shard=\"%s\"} %u\n",
                sh->cfg.name, sh->name, hosted);
        fprintf(f, "# HELP patina_shard_partitions_ready Partitions this shard answers (caught up).\n"
                   "# TYPE patina_shard_partitions_ready gauge\npatina_shard_partitions_ready{collection=\"%s\",shard=\"%s\"} %u\n",
                sh->cfg.name, sh->name, ready);
        fprintf(f, "# HELP patina_shard_images Images held.\n# TYPE patina_shard_images gauge\n"
                   "patina_shard_images{collection=\"%s\",shard=\"%s\"} %llu\n",
                sh->cfg.name, sh->name, (unsigned long long)rows);
        fprintf(f, "# HELP patina_shard_bytes Record bytes held.\n# TYPE patina_shard_bytes gauge\n"
                   "patina_shard_bytes{collection=\"%s\",shard=\"%s\"} %llu\n",
                sh->cfg.name, sh->name, (unsigned long long)bytes);
        fprintf(f, "# HELP patina_shard_requests_total Requests answered, by kind.\n# TYPE patina_shard_requests_total counter\n");
        fprintf(f, "patina_shard_requests_total{collection=\"%s\",shard=\"%s\",kind=\"search\"} %llu\n", sh->cfg.name,
                sh->name, sh->requests[CLU_KIND_SEARCH]);
        fprintf(f, "patina_shard_requests_total{collection=\"%s\",shard=\"%s\",kind=\"identify\"} %llu\n", sh->cfg.name,
                sh->name, sh->requests[CLU_KIND_IDENTIFY]);
        fprintf(f, "patina_shard_requests_total{collection=\"%s\",shard=\"%s\",kind=\"confirm\"} %llu\n", sh->cfg.name,
                sh->name, sh->requests[CLU_KIND_CONFIRM]);
        fprintf(f, "# HELP patina_shard_partitions_answered_total Partitions answered, summed over search and "
                   "identify requests (how the front ends spread queries over copies).\n"
                   "# TYPE patina_shard_partitions_answered_total counter\n"
                   "patina_shard_partitions_answered_total{collection=\"%s\",shard=\"%s\"} %llu\n",
                sh->cfg.name, sh->name, __atomic_load_n(&sh->parts_answered, __ATOMIC_RELAXED));
        fprintf(f, "# HELP patina_shard_request_errors_total Requests answered with an error.\n"
                   "# TYPE patina_shard_request_errors_total counter\n"
                   "patina_shard_request_errors_total{collection=\"%s\",shard=\"%s\"} %llu\n",
                sh->cfg.name, sh->name, sh->errors);
        fprintf(f, "# HELP patina_shard_request_seconds_total Seconds spent answering requests.\n"
                   "# TYPE patina_shard_request_seconds_total counter\n"
                   "patina_shard_request_seconds_total{collection=\"%s\",shard=\"%s\"} %.6f\n",
                sh->cfg.name, sh->name, secs[0]);
        fprintf(f, "# HELP patina_shard_queue_seconds_total Seconds requests waited between their arrival and a "
                   "worker taking them.\n"
                   "# TYPE patina_shard_queue_seconds_total counter\n"
                   "patina_shard_queue_seconds_total{collection=\"%s\",shard=\"%s\"} %.6f\n",
                sh->cfg.name, sh->name, secs[1]);
        fprintf(f, "# HELP patina_shard_call_seconds_total Seconds of the requests' answers themselves (the "
                   "library's search or identification over the partitions; answering less this is decoding, "
                   "locking and the reply).\n"
                   "# TYPE patina_shard_call_seconds_total counter\n"
                   "patina_shard_call_seconds_total{collection=\"%s\",shard=\"%s\"} %.6f\n",
                sh->cfg.name, sh->name, secs[2]);
        fclose(f);
        {
            char head[256];
            int hn = snprintf(head, sizeof head,
                              "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %zu\r\n"
                              "Connection: close\r\n\r\n",
                              blen);
            if (write(cfd, head, (size_t)hn) == hn && write(cfd, body, blen) == (ssize_t)blen) {}
        }
        free(body);
        close(cfd);
    }
    return NULL;
}

/* ------------------------------------------------------------------- run */

patina_status clu_shard_run(const char *urls, const char *coll, const clu_shard_opts_t *o, volatile int *stop)
{
    shard_t *sh = calloc(1, sizeof *sh);
    natsSubscription *sub = NULL;
    clu_work_t *work = NULL;
    patina_context_opts_t co;
    char bucket[128];
    natsStatus ns;
    patina_status s;
    uint32_t p;
    int i;
    double t_open;
    if (!sh) return clu_fail(PATINA_E_NOMEM, "shard: out of memory");
    sh->o = *o;
    if (o->name) snprintf(sh->name, sizeof sh->name, "%s", o->name);
    else {
        char host[64] = "shard";
        gethostname(host, sizeof host);
        host[sizeof host - 1] = '\0';
        for (i = 0; host[i]; i++)
            if (!((host[i] >= 'a' && host[i] <= 'z') || (host[i] >= 'A' && host[i] <= 'Z') ||
                  (host[i] >= '0' && host[i] <= '9') || host[i] == '-'))
                host[i] = '-';
        snprintf(sh->name, sizeof sh->name, "%.40s-%d", host, (int)getpid());
    }
    if (!clu_name_ok(sh->name)) {
        free(sh);
        return clu_fail(PATINA_E_INVALID, "shard: name '%s' is not [A-Za-z0-9_-]{1,%d}", o->name, CLU_NAME_MAX);
    }
    snprintf(sh->device, sizeof sh->device, "%s", patina_device_name(o->device));
    pthread_rwlock_init(&sh->lock, NULL);
    pthread_mutex_init(&sh->mu, NULL);
    pthread_cond_init(&sh->cv, NULL);
    pthread_mutex_init(&sh->qmu, NULL);
    pthread_cond_init(&sh->qcv, NULL);
    sem_init(&sh->load_slots, 0, (unsigned)(o->load_parallel > 0 ? o->load_parallel : 4));
    sh->started = (int64_t)time(NULL);
    patina_context_opts_init(&co);
    co.threads = o->threads;
    co.gpus = o->gpus;
    co.gpu_mem_budget = o->gpu_mem;
    if ((s = patina_context_new(&sh->ctx, &co)) != PATINA_OK) {
        s = clu_fail_lib(s, "shard: context");
        goto out;
    }
    sh->ndevices = patina_context_devices(sh->ctx, sh->devices, sizeof sh->devices / sizeof sh->devices[0]);
    if ((s = clu_connect(&sh->c, urls)) != PATINA_OK) goto out;
    t_open = now_s();
    if ((s = clu_collection_config(sh->c, coll, &sh->cfg)) != PATINA_OK) goto out;
    if (!(sh->o.capacity > 0)) sh->o.capacity = default_capacity(sh);
    if (!(sh->parts = calloc(sh->cfg.partitions, sizeof *sh->parts)) ||
        !(sh->assigned = calloc(sh->cfg.partitions, 1))) {
        s = clu_fail(PATINA_E_NOMEM, "shard: out of memory");
        goto out;
    }
    clu_bucket_members(bucket, sizeof bucket, coll);
    if ((s = clu_kv_open_wait(&sh->members, sh->c, bucket, CLU_START_WAIT_MS)) != PATINA_OK) goto out;
    if (now_s() - t_open >= 1.0) /* JetStream was recovering (servers restarted) */
        logf_(sh, "waited %.1f s for JetStream to answer about the collection's buckets", now_s() - t_open);
    snprintf(sh->subject, sizeof sh->subject, "patina.%s.shard.%s", coll, sh->name);
    ns = natsConnection_Subscribe(&sub, sh->c->nc, sh->subject, on_msg, sh);
    if (ns != NATS_OK) {
        s = clu_nats_fail(ns, "shard: subscribing to %s", sh->subject);
        goto out;
    }
    natsSubscription_SetPendingLimits(sub, -1, -1);
    sh->nworkers = o->workers > 0 ? o->workers : 8;
    if (!(sh->workers = calloc((size_t)sh->nworkers, sizeof *sh->workers))) {
        s = clu_fail(PATINA_E_NOMEM, "shard: out of memory");
        goto out;
    }
    for (i = 0; i < sh->nworkers; i++)
        if (pthread_create(&sh->workers[i], NULL, worker, sh) != 0) {
            s = clu_fail(PATINA_E_NOMEM, "shard: cannot start request worker %d", i);
            sh->nworkers = i;
            goto out;
        }
    if (o->device != PATINA_DEVICE_CPU) sh->sampling = pthread_create(&sh->sampler, NULL, gpu_sampler, sh) == 0;
    if (o->metrics_port > 0) {
        pthread_t mt;
        if (pthread_create(&mt, NULL, metrics_thread, sh) == 0) pthread_detach(mt);
    }
    logf_(sh, "collection %s: %u partitions, %zu tables, copies %d, capacity %g, device %s (%zu slice%s); answering on %s",
          coll, sh->cfg.partitions, sh->cfg.ntables, o->copies, sh->o.capacity, sh->device, sh->ndevices,
          sh->ndevices == 1 ? "" : "s", sh->subject);
    if (o->work && !o->synthetic) { /* bulk indexing: a worker thread with its own context and connection */
        clu_worker_opts_t wo = o->work_opts;
        wo.name = sh->name;
        wo.device = o->device;
        if (clu_work_start(&work, urls, coll, &wo) != PATINA_OK) logf_(sh, "no work items taken: %s", clu_last_error());
    }
    if (pthread_create(&sh->hb, NULL, heartbeat_thread, sh) != 0) {
        s = clu_fail(PATINA_E_NOMEM, "shard: cannot start the heartbeat thread");
        goto out;
    }
    sh->hb_started = 1;
    {
        int stalled = 0;
        while (!*stop) {
            char why[256];
            reassign(sh);
            if (sh->o.test_stall_reassign_s > 0 && !stalled && readiness(sh, why, sizeof why)) {
                const double until = now_s() + sh->o.test_stall_reassign_s;
                logf_(sh, "test: the reassignment loop stalls for %d s (--test-stall-reassign)",
                      sh->o.test_stall_reassign_s);
                while (now_s() < until && !*stop) usleep(50000);
                logf_(sh, "test: the reassignment loop goes on");
                stalled = 1;
            }
            for (i = 0; i < HEARTBEAT_MS / 50 && !*stop; i++) usleep(50000);
        }
    }
    clu_work_stop(work); /* the batch in hand is finished (its writes confirmed by the copies, this one too) */
    drain(sh);
    /* out of the members, then a moment more for fronts whose cache still lists it, then the requests in flight */
    sh->hb_stop = 1;
    pthread_join(sh->hb, NULL);
    sh->hb_started = 0;
    logf_(sh, "stopping: withdrawing from membership");
    kvStore_Delete(sh->members, sh->name);
    natsConnection_FlushTimeout(sh->c->nc, 1000);
    usleep(LINGER_MS * 1000);
    for (i = 0; i < 50 && sh->inflight; i++) usleep(20000);
    natsSubscription_Unsubscribe(sub);
    s = PATINA_OK;
out:
    if (sh->hb_started) {
        sh->hb_stop = 1;
        pthread_join(sh->hb, NULL);
    }
    if (sub) natsSubscription_Destroy(sub);
    /* the workers finish what is queued, then stop */
    pthread_mutex_lock(&sh->qmu);
    sh->qstop = 1;
    pthread_cond_broadcast(&sh->qcv);
    pthread_mutex_unlock(&sh->qmu);
    for (i = 0; i < sh->nworkers; i++) pthread_join(sh->workers[i], NULL);
    free(sh->workers);
    for (p = 0; sh->parts && p < sh->cfg.partitions; p++)
        if (sh->parts[p].hosted) drop(sh, p);
    free(sh->parts);
    free((void *)sh->assigned);
    if (sh->members) kvStore_Destroy(sh->members);
    clu_disconnect(sh->c);
    if (sh->sampling) {
        sh->sampler_stop = 1;
        pthread_join(sh->sampler, NULL);
    }
    patina_context_free(sh->ctx);
    free(sh);
    return s;
}
