/* A cluster collection's buckets: its configuration and id counter (the
 * meta bucket), its partitions (one KV bucket each: the store of record)
 * and its members (the shards' heartbeats). Writes go through clu_writer:
 * ids in blocks by compare-and-set, each image one record in its
 * partition's bucket, acknowledged by the bucket's quorum (JetStream) and
 * then by every ready copy of the partition (clu_front_confirm). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cluster/conn.h"

#define ID_BLOCK 64      /* ids taken from the counter at a time */
#define WRITE_TRIES 16   /* compare-and-set attempts before PATINA_E_BUSY */

void clu_bucket_partition(char *buf, size_t size, const char *coll, uint32_t p)
{
    snprintf(buf, size, "patina_%s_p%04u", coll, p);
}

void clu_bucket_meta(char *buf, size_t size, const char *coll) { snprintf(buf, size, "patina_%s_meta", coll); }

void clu_bucket_members(char *buf, size_t size, const char *coll)
{
    snprintf(buf, size, "patina_%s_members", coll);
}

void clu_kv_key(char out[65], const char *key)
{
    static const char hex[] = "0123456789abcdef";
    uint8_t h[32];
    int i;
    patina_sha256(h, key, strlen(key));
    for (i = 0; i < 32; i++) {
        out[2 * i] = hex[h[i] >> 4];
        out[2 * i + 1] = hex[h[i] & 15];
    }
    out[64] = '\0';
}

/* ----------------------------------------------------------- configuration */

static char *config_json(const clu_config_t *cfg)
{
    json_t *o = json_object(), *t = json_array();
    char *s;
    size_t i;
    for (i = 0; i < cfg->ntables; i++) json_array_append_new(t, json_string(cfg->tables[i]));
    json_object_set_new(o, "version", json_integer(1));
    json_object_set_new(o, "partitions", json_integer(cfg->partitions));
    json_object_set_new(o, "replicas", json_integer(cfg->replicas));
    json_object_set_new(o, "tables", t);
    s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static patina_status config_parse(clu_config_t *cfg, const char *name, const char *text, size_t n)
{
    json_error_t err;
    json_t *o = json_loadb(text, n, 0, &err), *t;
    json_int_t v, p, r;
    size_t i;
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->name, sizeof cfg->name, "%s", name);
    if (!o) return clu_fail(PATINA_E_CORRUPT, "cluster: collection %s: config is not JSON (%s)", name, err.text);
    v = json_integer_value(json_object_get(o, "version"));
    p = json_integer_value(json_object_get(o, "partitions"));
    r = json_integer_value(json_object_get(o, "replicas"));
    t = json_object_get(o, "tables");
    if (v != 1 || p < 1 || p > CLU_PARTITIONS_MAX || r < 1 || r > CLU_REPLICAS_MAX || !json_is_array(t) ||
        json_array_size(t) > CLU_TABLES_MAX) {
        json_decref(o);
        return clu_fail(PATINA_E_CORRUPT, "cluster: collection %s: config of another version or out of bounds", name);
    }
    cfg->partitions = (uint32_t)p;
    cfg->replicas = (int)r;
    for (i = 0; i < json_array_size(t); i++) {
        const char *spec = json_string_value(json_array_get(t, i));
        if (!spec || strlen(spec) > CLU_SPEC_MAX) {
            json_decref(o);
            return clu_fail(PATINA_E_CORRUPT, "cluster: collection %s: config table %zu is not a spec", name, i);
        }
        snprintf(cfg->tables[cfg->ntables++], CLU_SPEC_MAX + 1, "%s", spec);
    }
    json_decref(o);
    return PATINA_OK;
}

/* Creates the KV bucket (a JetStream stream), its transient failures retried
 * for at most CLU_START_WAIT_MS. */
static patina_status bucket_create(clu_conn_t *c, const char *bucket, int replicas, int64_t ttl_ms)
{
    kvConfig kc;
    kvStore *kv = NULL;
    clu_retry_t r;
    patina_status s;
    kvConfig_Init(&kc);
    kc.Bucket = bucket;
    kc.History = 1;
    kc.Replicas = replicas;
    kc.TTL = ttl_ms * 1000000; /* nanoseconds */
    kc.StorageType = js_FileStorage;
    clu_retry_init(&r, CLU_START_WAIT_MS);
    for (;;) {
        const natsStatus ns = js_CreateKeyValue(&kv, c->js, &kc);
        if (ns == NATS_OK) break;
        s = clu_nats_fail(ns, "cluster: creating bucket %s", bucket);
        /* only "not now" is asked again: a meta leader being elected, a timeout (creating the same
         * bucket again is then a no-op), a server JetStream counts as offline for placement */
        if (s != PATINA_E_UNAVAILABLE || !clu_retry(&r, s)) return s;
    }
    kvStore_Destroy(kv);
    return PATINA_OK;
}

/* Replicas by default: 3 when the NATS cluster has 3 servers or more, else 1. */
static int default_replicas(clu_conn_t *c)
{
    char **servers = NULL;
    int n = 0, i;
    if (natsConnection_GetServers(c->nc, &servers, &n) != NATS_OK) return 1;
    for (i = 0; i < n; i++) free(servers[i]);
    free(servers);
    return n >= 3 ? 3 : 1;
}

/* Creates key = val (n bytes) in kv, the transient failures of a bucket
 * just made (its stream may still be electing its first leader: a timeout,
 * no responders, "temporarily unavailable") retried for at most
 * CLU_START_WAIT_MS. *existed = 1 when the key has a value already (also
 * one written by an earlier try of this call that timed out), 0 when this
 * call created it. */
static patina_status kv_create(kvStore *kv, const char *bucket, const char *key, const char *val, int n, int *existed)
{
    clu_retry_t r;
    patina_status s;
    *existed = 0;
    clu_retry_init(&r, CLU_START_WAIT_MS);
    for (;;) {
        const natsStatus ns = kvStore_Create(NULL, kv, key, val, n);
        if (ns == NATS_OK) return PATINA_OK;
        s = clu_nats_fail(ns, "cluster: bucket %s, creating key %s", bucket, key);
        if (s == PATINA_E_BUSY) { /* the key exists (JetStream's wrong last sequence) */
            *existed = 1;
            return PATINA_OK;
        }
        if (!clu_retry(&r, s)) return s;
    }
}

patina_status clu_collection_create(clu_conn_t *c, clu_config_t *cfg)
{
    char bucket[128], *json;
    kvStore *kv = NULL;
    patina_status s;
    uint32_t p;
    size_t i;
    int existed;
    if (!clu_name_ok(cfg->name))
        return clu_fail(PATINA_E_INVALID, "cluster: collection name '%s' is not [A-Za-z0-9_-]{1,%d}", cfg->name,
                        CLU_NAME_MAX);
    if (cfg->partitions < 1 || cfg->partitions > CLU_PARTITIONS_MAX)
        return clu_fail(PATINA_E_INVALID, "cluster: %u partitions (1 .. %d)", cfg->partitions, CLU_PARTITIONS_MAX);
    if (cfg->replicas <= 0) cfg->replicas = default_replicas(c);
    if (cfg->replicas > CLU_REPLICAS_MAX)
        return clu_fail(PATINA_E_INVALID, "cluster: %d replicas (1 .. %d)", cfg->replicas, CLU_REPLICAS_MAX);
    for (i = 0; i < cfg->ntables; i++) { /* canonical specs, as the library spells them */
        patina_extractor_t *ex = NULL;
        if (patina_extractor_new(&ex, cfg->tables[i]) != PATINA_OK)
            return clu_fail_lib(PATINA_E_INVALID, "cluster: table '%s'", cfg->tables[i]);
        snprintf(cfg->tables[i], CLU_SPEC_MAX + 1, "%s", patina_extractor_spec(ex));
        patina_extractor_free(ex);
    }
    clu_bucket_meta(bucket, sizeof bucket, cfg->name);
    if ((s = bucket_create(c, bucket, cfg->replicas, 0)) != PATINA_OK) return s;
    if ((s = clu_kv_open(&kv, c, bucket)) != PATINA_OK) return s;
    if (!(json = config_json(cfg))) {
        kvStore_Destroy(kv);
        return clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
    }
    s = kv_create(kv, bucket, "config", json, (int)strlen(json), &existed);
    free(json);
    if (s != PATINA_OK) {
        kvStore_Destroy(kv);
        return s;
    }
    if (existed) { /* there already: the same configuration is fine */
        clu_config_t had;
        kvStore_Destroy(kv);
        if ((s = clu_collection_config(c, cfg->name, &had)) != PATINA_OK) return s;
        if (had.partitions != cfg->partitions || had.ntables != cfg->ntables)
            return clu_fail(PATINA_E_INVALID, "cluster: collection %s exists with %u partitions and %zu tables",
                            cfg->name, had.partitions, had.ntables);
        for (i = 0; i < had.ntables; i++)
            if (strcmp(had.tables[i], cfg->tables[i]))
                return clu_fail(PATINA_E_INVALID, "cluster: collection %s exists with table '%s'", cfg->name,
                                had.tables[i]);
        cfg->replicas = had.replicas;
        kv = NULL;
        if ((s = clu_kv_open(&kv, c, bucket)) != PATINA_OK) return s;
    }
    s = kv_create(kv, bucket, "ids", "0", 1, &existed); /* exists already after a repeated create: fine */
    kvStore_Destroy(kv);
    if (s != PATINA_OK) return s;
    for (p = 0; p < cfg->partitions; p++) {
        clu_bucket_partition(bucket, sizeof bucket, cfg->name, p);
        if ((s = bucket_create(c, bucket, cfg->replicas, 0)) != PATINA_OK) return s;
    }
    clu_bucket_members(bucket, sizeof bucket, cfg->name);
    return bucket_create(c, bucket, cfg->replicas, CLU_MEMBERS_TTL_MS);
}

static patina_status config_read(clu_conn_t *c, const char *name, clu_config_t *cfg)
{
    char bucket[128];
    kvStore *kv = NULL;
    natsMsg *m = NULL;
    natsStatus ns;
    patina_status s;
    memset(cfg, 0, sizeof *cfg);
    if (!clu_name_ok(name))
        return clu_fail(PATINA_E_INVALID, "cluster: collection name '%s' is not [A-Za-z0-9_-]{1,%d}", name,
                        CLU_NAME_MAX);
    clu_bucket_meta(bucket, sizeof bucket, name);
    if ((s = clu_kv_open(&kv, c, bucket)) != PATINA_OK) {
        if (s == PATINA_E_NOTFOUND)
            return clu_fail(s, "cluster: no collection %s (no bucket %s: patina cluster create %s)", name, bucket, name);
        return s;
    }
    kvStore_Destroy(kv);
    ns = clu_kv_latest(&m, c, bucket, "config");
    if (ns != NATS_OK) return clu_nats_fail(ns, "cluster: bucket %s, key config", bucket);
    s = config_parse(cfg, name, natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m));
    natsMsg_Destroy(m);
    return s;
}

patina_status clu_collection_config(clu_conn_t *c, const char *name, clu_config_t *cfg)
{
    clu_retry_t r;
    patina_status s;
    clu_retry_init(&r, CLU_START_WAIT_MS);
    while ((s = config_read(c, name, cfg)) != PATINA_OK && clu_retry(&r, s)) {}
    return s;
}

/* ----------------------------------------------------------------- writer */

struct clu_writer {
    clu_conn_t *c;
    clu_config_t cfg;
    clu_front_t *front;
    kvStore *meta;
    kvStore **parts; /* (partitions) opened on first use */
    uint64_t next, end; /* ids [next, end) are this writer's */
    pthread_mutex_t mu; /* the ids and the buckets opened: a writer is shared by threads */
};

patina_status clu_writer_new(clu_writer_t **out, clu_conn_t *c, const clu_config_t *cfg, clu_front_t *front)
{
    clu_writer_t *w = calloc(1, sizeof *w);
    char bucket[128];
    patina_status s;
    *out = NULL;
    if (!w || !(w->parts = calloc(cfg->partitions, sizeof *w->parts))) {
        free(w);
        return clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
    }
    w->c = c;
    w->cfg = *cfg;
    w->front = front;
    pthread_mutex_init(&w->mu, NULL);
    clu_bucket_meta(bucket, sizeof bucket, cfg->name);
    if ((s = clu_kv_open_wait(&w->meta, c, bucket, CLU_START_WAIT_MS)) != PATINA_OK) {
        clu_writer_free(w);
        return s;
    }
    *out = w;
    return PATINA_OK;
}

void clu_writer_free(clu_writer_t *w)
{
    uint32_t p;
    if (!w) return;
    for (p = 0; w->parts && p < w->cfg.partitions; p++)
        if (w->parts[p]) kvStore_Destroy(w->parts[p]);
    free(w->parts);
    if (w->meta) kvStore_Destroy(w->meta);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

/* One id from this writer's block; a new block by compare-and-set on the
 * counter when it is used up. */
static patina_status alloc_id_locked(clu_writer_t *w, uint64_t *id)
{
    char bucket[128];
    int tries;
    if (w->next < w->end) {
        *id = w->next++;
        return PATINA_OK;
    }
    clu_bucket_meta(bucket, sizeof bucket, w->cfg.name);
    for (tries = 0; tries < WRITE_TRIES * 4; tries++) {
        natsMsg *e = NULL;
        char buf[32], val[32];
        unsigned long long v;
        uint64_t rev;
        natsStatus ns = clu_kv_latest(&e, w->c, bucket, "ids");
        int n;
        if (ns != NATS_OK) return clu_nats_fail(ns, "cluster: collection %s: id counter", w->cfg.name);
        n = natsMsg_GetDataLength(e);
        snprintf(val, sizeof val, "%.*s", n < 31 ? n : 31, natsMsg_GetData(e));
        rev = natsMsg_GetSequence(e);
        natsMsg_Destroy(e);
        if (sscanf(val, "%llu", &v) != 1) return clu_fail(PATINA_E_CORRUPT, "cluster: collection %s: id counter '%s'", w->cfg.name, val);
        snprintf(buf, sizeof buf, "%llu", v + ID_BLOCK);
        ns = kvStore_Update(NULL, w->meta, "ids", buf, (int)strlen(buf), rev);
        if (ns == NATS_OK) {
            w->next = v + 1;
            w->end = v + ID_BLOCK + 1;
            *id = w->next++;
            return PATINA_OK;
        }
        {
            patina_status s = clu_nats_fail(ns, "cluster: collection %s: id counter", w->cfg.name);
            if (s != PATINA_E_BUSY) return s;
        }
    }
    return clu_fail(PATINA_E_BUSY, "cluster: collection %s: id counter contended %d times", w->cfg.name, WRITE_TRIES * 4);
}

static patina_status alloc_id(clu_writer_t *w, uint64_t *id)
{
    patina_status s;
    pthread_mutex_lock(&w->mu);
    s = alloc_id_locked(w, id);
    pthread_mutex_unlock(&w->mu);
    return s;
}

static patina_status part_kv(clu_writer_t *w, uint32_t p, kvStore **kv)
{
    patina_status s = PATINA_OK;
    pthread_mutex_lock(&w->mu);
    if (!w->parts[p]) {
        char bucket[128];
        clu_bucket_partition(bucket, sizeof bucket, w->cfg.name, p);
        s = clu_kv_open(&w->parts[p], w->c, bucket);
    }
    *kv = w->parts[p];
    pthread_mutex_unlock(&w->mu);
    return s;
}

patina_status clu_writer_put(clu_writer_t *w, const patina_insert_t *item, const char *const *specs,
                             const void *const *descs, const size_t *bytes, size_t nt, uint64_t *id_out)
{
    return clu_writer_put_ex(w, item, specs, descs, bytes, nt, 0, NULL, id_out);
}

patina_status clu_writer_put_ex(clu_writer_t *w, const patina_insert_t *item, const char *const *specs,
                                const void *const *descs, const size_t *bytes, size_t nt, int if_absent,
                                int *created, uint64_t *id_out)
{
    const uint32_t p = patina_key_partition(item->key, w->cfg.partitions);
    char kk[65], bucket[128];
    kvStore *kv;
    int tries;
    size_t t;
    clu_kv_key(kk, item->key);
    clu_bucket_partition(bucket, sizeof bucket, w->cfg.name, p);
    for (t = 0; t < nt; t++) {
        size_t i;
        for (i = 0; i < w->cfg.ntables && strcmp(w->cfg.tables[i], specs[t]); i++) {}
        if (i == w->cfg.ntables)
            return clu_fail(PATINA_E_INVALID, "cluster: collection %s has no table '%s' (patina cluster create ... -f)",
                            w->cfg.name, specs[t]);
    }
    PATINA_TRY_CLU(part_kv(w, p, &kv));
    for (tries = 0; tries < WRITE_TRIES; tries++) {
        natsMsg *e = NULL;
        clu_record_t old, rec;
        clu_buf_t buf = {0};
        uint64_t rev = 0, newrev = 0;
        natsStatus ns = clu_kv_latest(&e, w->c, bucket, kk);
        patina_status s;
        int have = 0;
        if (ns == NATS_OK) {
            if ((s = clu_record_decode(&old, natsMsg_GetData(e), (size_t)natsMsg_GetDataLength(e))) != PATINA_OK) {
                natsMsg_Destroy(e);
                return clu_fail(s, "cluster: bucket %s, key %s ('%s'): %s", bucket, kk, item->key, clu_last_error());
            }
            rev = natsMsg_GetSequence(e);
            have = 1;
            if (if_absent) {
                natsMsg_Destroy(e);
                return clu_fail(PATINA_E_BUSY, "cluster: collection %s has an image '%s' already", w->cfg.name,
                                item->key);
            }
        } else if (ns != NATS_NOT_FOUND) {
            return clu_nats_fail(ns, "cluster: bucket %s, key %s", bucket, kk);
        }
        memset(&rec, 0, sizeof rec);
        rec.key = item->key;
        rec.size = item->size;
        memcpy(rec.sha256, item->sha256, 32);
        rec.mtime = item->mtime;
        rec.width = item->width;
        rec.height = item->height;
        for (t = 0; t < nt; t++) rec.tables[rec.ntables++] = (clu_rtable_t){specs[t], descs[t], bytes[t]};
        if (have) {
            rec.id = old.id;
            /* the same content: the other tables' descriptors stay */
            if (!memcmp(old.sha256, item->sha256, 32))
                for (t = 0; t < old.ntables; t++) {
                    size_t j;
                    for (j = 0; j < nt && strcmp(specs[j], old.tables[t].spec); j++) {}
                    if (j == nt && rec.ntables < CLU_TABLES_MAX) rec.tables[rec.ntables++] = old.tables[t];
                }
        } else if ((s = alloc_id(w, &rec.id)) != PATINA_OK) {
            return s;
        }
        s = clu_record_encode(&buf, &rec);
        if (s == PATINA_OK) {
            ns = have ? kvStore_Update(&newrev, kv, kk, buf.p, (int)buf.n, rev)
                      : kvStore_Create(&newrev, kv, kk, buf.p, (int)buf.n);
            if (ns != NATS_OK) s = clu_nats_fail(ns, "cluster: bucket %s, key %s ('%s')", bucket, kk, item->key);
        }
        clu_buf_release(&buf);
        natsMsg_Destroy(e);
        if (s == PATINA_E_BUSY) continue; /* another writer came first: read again */
        if (s != PATINA_OK) return s;
        if (id_out) *id_out = rec.id;
        if (created) *created = !have;
        return w->front ? clu_front_confirm(w->front, p, newrev) : PATINA_OK;
    }
    return clu_fail(PATINA_E_BUSY, "cluster: bucket %s, key %s ('%s'): contended %d times", bucket, kk, item->key,
                    WRITE_TRIES);
}

patina_status clu_writer_get(clu_writer_t *w, const char *key, void **data, size_t *n, uint64_t *rev)
{
    return clu_record_get(w->c, &w->cfg, key, data, n, rev);
}

patina_status clu_record_get(clu_conn_t *c, const clu_config_t *cfg, const char *key, void **data, size_t *n,
                             uint64_t *rev)
{
    const uint32_t p = patina_key_partition(key, cfg->partitions);
    char kk[65], bucket[128];
    natsMsg *e = NULL;
    natsStatus ns;
    *data = NULL;
    *n = 0;
    clu_kv_key(kk, key);
    clu_bucket_partition(bucket, sizeof bucket, cfg->name, p);
    ns = clu_kv_latest(&e, c, bucket, kk);
    if (ns == NATS_NOT_FOUND) return clu_fail(PATINA_E_NOTFOUND, "cluster: collection %s has no image '%s'", cfg->name, key);
    if (ns != NATS_OK) return clu_nats_fail(ns, "cluster: partition %u, key %s", p, kk);
    *n = (size_t)natsMsg_GetDataLength(e);
    if (rev) *rev = natsMsg_GetSequence(e);
    if (!(*data = malloc(*n ? *n : 1))) {
        natsMsg_Destroy(e);
        return clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
    }
    memcpy(*data, natsMsg_GetData(e), *n);
    natsMsg_Destroy(e);
    return PATINA_OK;
}

patina_status clu_writer_delete(clu_writer_t *w, const char *key)
{
    const uint32_t p = patina_key_partition(key, w->cfg.partitions);
    char kk[65], bucket[128], subj[256];
    natsMsg *m = NULL;
    jsPubAck *pa = NULL;
    jsErrCode ec = 0;
    natsStatus ns;
    uint64_t rev;
    clu_kv_key(kk, key);
    clu_bucket_partition(bucket, sizeof bucket, w->cfg.name, p);
    ns = clu_kv_latest(&m, w->c, bucket, kk);
    if (ns == NATS_NOT_FOUND) return clu_fail(PATINA_E_NOTFOUND, "cluster: collection %s has no image '%s'", w->cfg.name, key);
    if (ns != NATS_OK) return clu_nats_fail(ns, "cluster: bucket %s, key %s", bucket, kk);
    natsMsg_Destroy(m);
    m = NULL;
    /* a KV delete is a message with the header KV-Operation: DEL on the key's subject; published
     * directly so that its revision (the stream sequence) is known for the confirmation */
    snprintf(subj, sizeof subj, "$KV.%s.%s", bucket, kk);
    ns = natsMsg_Create(&m, subj, NULL, NULL, 0);
    if (ns == NATS_OK) ns = natsMsgHeader_Set(m, "KV-Operation", "DEL");
    if (ns == NATS_OK) ns = js_PublishMsg(&pa, w->c->js, m, NULL, &ec);
    natsMsg_Destroy(m);
    if (ns != NATS_OK) return clu_nats_fail(ns, "cluster: deleting key %s from bucket %s", kk, bucket);
    rev = pa->Sequence;
    jsPubAck_Destroy(pa);
    return w->front ? clu_front_confirm(w->front, p, rev) : PATINA_OK;
}

/* ---------------------------------------------------------------- members */

static void member_release(clu_member_t *m)
{
    free(m->ready);
    free(m->hosted);
    free(m->lag);
}

void clu_members_free(clu_member_t *m, size_t n)
{
    size_t i;
    for (i = 0; m && i < n; i++) member_release(&m[i]);
    free(m);
}

static int member_parse(clu_member_t *m, const clu_config_t *cfg, const char *text, size_t n)
{
    json_t *o = json_loadb(text, n, 0, NULL), *a, *lag;
    const char *s;
    size_t i;
    memset(m, 0, sizeof *m);
    if (!o) return -1;
    m->ready = calloc(cfg->partitions, 1);
    m->hosted = calloc(cfg->partitions, 1);
    m->lag = calloc(cfg->partitions, sizeof *m->lag);
    if (!m->ready || !m->hosted || !m->lag || !(s = json_string_value(json_object_get(o, "name"))) || !clu_name_ok(s)) {
        member_release(m);
        json_decref(o);
        return -1;
    }
    snprintf(m->name, sizeof m->name, "%s", s);
    s = json_string_value(json_object_get(o, "inbox"));
    snprintf(m->subject, sizeof m->subject, "%s", s ? s : "");
    s = json_string_value(json_object_get(o, "device"));
    snprintf(m->device, sizeof m->device, "%s", s ? s : "");
    m->capacity = json_number_value(json_object_get(o, "capacity"));
    m->copies = (int)json_integer_value(json_object_get(o, "copies"));
    m->started = (int64_t)json_integer_value(json_object_get(o, "started"));
    m->bytes = (uint64_t)json_integer_value(json_object_get(o, "bytes"));
    m->gpu_mem = (uint64_t)json_integer_value(json_object_get(o, "gpu_mem"));
    m->leaving = json_is_true(json_object_get(o, "leaving"));
    a = json_object_get(o, "ready");
    for (i = 0; i < json_array_size(a); i++) {
        json_int_t p = json_integer_value(json_array_get(a, i));
        if (p >= 0 && p < cfg->partitions) m->ready[p] = 1;
    }
    a = json_object_get(o, "hosted");
    for (i = 0; i < json_array_size(a); i++) {
        json_int_t p = json_integer_value(json_array_get(a, i));
        if (p >= 0 && p < cfg->partitions) m->hosted[p] = 1;
    }
    lag = json_object_get(o, "lag");
    if (json_is_object(lag)) {
        const char *k;
        json_t *v;
        json_object_foreach(lag, k, v) {
            long p = strtol(k, NULL, 10);
            if (p >= 0 && p < (long)cfg->partitions) m->lag[p] = (uint64_t)json_integer_value(v);
        }
    }
    json_decref(o);
    if (!(m->capacity > 0) || !m->subject[0]) {
        member_release(m);
        return -1;
    }
    return 0;
}

patina_status clu_members_read(clu_conn_t *c, const clu_config_t *cfg, clu_member_t **out, size_t *nout)
{
    char bucket[128];
    kvStore *kv = NULL;
    kvKeysList keys;
    clu_member_t *m;
    natsStatus ns;
    int i;
    size_t n = 0;
    *out = NULL;
    *nout = 0;
    clu_bucket_members(bucket, sizeof bucket, cfg->name);
    PATINA_TRY_CLU(clu_kv_open(&kv, c, bucket));
    memset(&keys, 0, sizeof keys);
    ns = kvStore_Keys(&keys, kv, NULL);
    if (ns == NATS_NOT_FOUND) { /* no member */
        kvStore_Destroy(kv);
        return PATINA_OK;
    }
    if (ns != NATS_OK) {
        kvStore_Destroy(kv);
        return clu_nats_fail(ns, "cluster: bucket %s: listing members", bucket);
    }
    if (!(m = calloc(keys.Count ? (size_t)keys.Count : 1, sizeof *m))) {
        kvKeysList_Destroy(&keys);
        kvStore_Destroy(kv);
        return clu_fail(PATINA_E_NOMEM, "cluster: out of memory");
    }
    kvStore_Destroy(kv);
    /* each entry from the stream's leader (clu_kv_latest): a lagging replica's older entry could
     * leave out a partition a member hosts now, and a writer would not confirm with it */
    for (i = 0; i < keys.Count; i++) {
        natsMsg *e = NULL;
        ns = clu_kv_latest(&e, c, bucket, keys.Keys[i]);
        if (ns == NATS_NOT_FOUND) continue; /* gone meanwhile */
        if (ns != NATS_OK) {
            patina_status s = clu_nats_fail(ns, "cluster: bucket %s: member %s", bucket, keys.Keys[i]);
            kvKeysList_Destroy(&keys);
            clu_members_free(m, n);
            return s;
        }
        if (member_parse(&m[n], cfg, natsMsg_GetData(e), (size_t)natsMsg_GetDataLength(e)) == 0) n++;
        natsMsg_Destroy(e);
    }
    kvKeysList_Destroy(&keys);
    *out = m;
    *nout = n;
    return PATINA_OK;
}
