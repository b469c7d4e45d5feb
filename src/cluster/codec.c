/* The cluster's binary formats: records (the values of the partition
 * buckets) and request/reply messages between front ends and shards.
 * Little-endian, versioned, length-prefixed. Pure: no I/O, no NATS. Every
 * decoder checks every length against what is left and fails with a message
 * naming the field; it never reads past its input (fuzz-friendly: the
 * decoders take any bytes). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"

/* -------------------------------------------------------------- messages */

static _Thread_local char clu_msg[1024];

const char *clu_last_error(void) { return clu_msg; }

patina_status clu_fail(patina_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(clu_msg, sizeof clu_msg, fmt, ap);
    va_end(ap);
    return s;
}

patina_status clu_fail_lib(patina_status s, const char *fmt, ...)
{
    char pre[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    snprintf(clu_msg, sizeof clu_msg, "%s: %s", pre, patina_last_error());
    return s;
}

int clu_name_ok(const char *name)
{
    size_t i;
    if (!name || !*name) return 0;
    for (i = 0; name[i]; i++) {
        char ch = name[i];
        if (i >= CLU_NAME_MAX) return 0;
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
              ch == '-'))
            return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------- writer */

void clu_buf_release(clu_buf_t *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

void clu_put_raw(clu_buf_t *b, const void *p, size_t n)
{
    if (b->oom) return;
    if (n > CLU_MSG_MAX - b->n) {
        b->oom = 1;
        return;
    }
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        uint8_t *q;
        while (cap < b->n + n) cap *= 2;
        if (!(q = realloc(b->p, cap))) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}

void clu_put_u8(clu_buf_t *b, uint8_t v) { clu_put_raw(b, &v, 1); }

void clu_put_u16(clu_buf_t *b, uint16_t v)
{
    uint8_t x[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    clu_put_raw(b, x, 2);
}

void clu_put_u32(clu_buf_t *b, uint32_t v)
{
    uint8_t x[4];
    int i;
    for (i = 0; i < 4; i++) x[i] = (uint8_t)(v >> (8 * i));
    clu_put_raw(b, x, 4);
}

void clu_put_u64(clu_buf_t *b, uint64_t v)
{
    uint8_t x[8];
    int i;
    for (i = 0; i < 8; i++) x[i] = (uint8_t)(v >> (8 * i));
    clu_put_raw(b, x, 8);
}

void clu_put_f64(clu_buf_t *b, double v)
{
    uint64_t u;
    memcpy(&u, &v, 8);
    clu_put_u64(b, u);
}

void clu_put_str(clu_buf_t *b, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n >= UINT32_MAX) {
        b->oom = 1;
        return;
    }
    clu_put_u32(b, (uint32_t)(n + 1));
    clu_put_raw(b, s ? s : "", n + 1);
}

void clu_put_blob(clu_buf_t *b, const void *p, size_t n)
{
    if (n > UINT32_MAX) {
        b->oom = 1;
        return;
    }
    clu_put_u32(b, (uint32_t)n);
    clu_put_raw(b, p, n);
}

/* ---------------------------------------------------------------- reader */

void clu_rd_init(clu_rd_t *r, const void *p, size_t n)
{
    r->p = p;
    r->n = p ? n : 0;
    r->off = 0;
    r->bad = NULL;
}

const void *clu_get_raw(clu_rd_t *r, size_t n, const char *what)
{
    const void *p;
    if (r->bad) return NULL;
    if (n > r->n - r->off) {
        r->bad = what;
        return NULL;
    }
    p = r->p + r->off;
    r->off += n;
    return p;
}

uint8_t clu_get_u8(clu_rd_t *r, const char *what)
{
    const uint8_t *p = clu_get_raw(r, 1, what);
    return p ? p[0] : 0;
}

uint16_t clu_get_u16(clu_rd_t *r, const char *what)
{
    const uint8_t *p = clu_get_raw(r, 2, what);
    return p ? (uint16_t)(p[0] | (p[1] << 8)) : 0;
}

uint32_t clu_get_u32(clu_rd_t *r, const char *what)
{
    const uint8_t *p = clu_get_raw(r, 4, what);
    uint32_t v = 0;
    int i;
    for (i = 3; p && i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

uint64_t clu_get_u64(clu_rd_t *r, const char *what)
{
    const uint8_t *p = clu_get_raw(r, 8, what);
    uint64_t v = 0;
    int i;
    for (i = 7; p && i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

double clu_get_f64(clu_rd_t *r, const char *what)
{
    uint64_t u = clu_get_u64(r, what);
    double v;
    memcpy(&v, &u, 8);
    return v;
}

const char *clu_get_str(clu_rd_t *r, size_t max, const char *what)
{
    uint32_t n = clu_get_u32(r, what);
    const char *s;
    if (r->bad) return NULL;
    if (n == 0 || n - 1 > max) {
        r->bad = what;
        return NULL;
    }
    if (!(s = clu_get_raw(r, n, what))) return NULL;
    if (s[n - 1] != '\0' || memchr(s, 0, n - 1)) {
        r->bad = what;
        return NULL;
    }
    return s;
}

const void *clu_get_blob(clu_rd_t *r, size_t *n, size_t max, const char *what)
{
    uint32_t len = clu_get_u32(r, what);
    const void *p;
    *n = 0;
    if (r->bad) return NULL;
    if (len > max) {
        r->bad = what;
        return NULL;
    }
    p = clu_get_raw(r, len, what);
    if (p) *n = len;
    return p;
}

/* The reader's verdict: OK when nothing failed and everything was read. */
static patina_status rd_done(clu_rd_t *r, const char *what)
{
    if (r->bad)
        return clu_fail(PATINA_E_CORRUPT, "%s: truncated or malformed at byte %zu (%s)", what, r->off, r->bad);
    if (r->off != r->n)
        return clu_fail(PATINA_E_CORRUPT, "%s: %zu bytes after the end", what, r->n - r->off);
    return PATINA_OK;
}

/* --------------------------------------------------------------- records */

patina_status clu_record_encode(clu_buf_t *out, const clu_record_t *rec)
{
    size_t t;
    if (!rec->key || !*rec->key || rec->ntables > CLU_TABLES_MAX)
        return clu_fail(PATINA_E_INVALID, "record: no key, or more than %d tables", CLU_TABLES_MAX);
    clu_put_raw(out, "PTR1", 4);
    clu_put_u32(out, CLU_RECORD_VERSION);
    clu_put_u64(out, rec->id);
    clu_put_str(out, rec->key);
    clu_put_u64(out, rec->size);
    clu_put_raw(out, rec->sha256, 32);
    clu_put_u64(out, (uint64_t)rec->mtime);
    clu_put_u32(out, (uint32_t)rec->width);
    clu_put_u32(out, (uint32_t)rec->height);
    clu_put_u32(out, (uint32_t)rec->ntables);
    for (t = 0; t < rec->ntables; t++) {
        clu_put_str(out, rec->tables[t].spec);
        clu_put_blob(out, rec->tables[t].desc, rec->tables[t].bytes);
    }
    return out->oom ? clu_fail(PATINA_E_NOMEM, "record '%s': out of memory or over %u bytes", rec->key, CLU_MSG_MAX)
                    : PATINA_OK;
}

patina_status clu_record_decode(clu_record_t *rec, const void *data, size_t n)
{
    clu_rd_t r;
    const uint8_t *magic, *sha;
    uint32_t version, nt, t;
    memset(rec, 0, sizeof *rec);
    clu_rd_init(&r, data, n);
    magic = clu_get_raw(&r, 4, "magic");
    if (!magic || memcmp(magic, "PTR1", 4))
        return clu_fail(PATINA_E_FORMAT, "record: not a patina record (magic)");
    version = clu_get_u32(&r, "version");
    if (r.bad || version != CLU_RECORD_VERSION)
        return clu_fail(PATINA_E_FORMAT, "record: version %u (this build reads %u)", version, CLU_RECORD_VERSION);
    rec->id = clu_get_u64(&r, "id");
    rec->key = clu_get_str(&r, PATINA_KEY_MAX, "key");
    rec->size = clu_get_u64(&r, "size");
    sha = clu_get_raw(&r, 32, "sha256");
    if (sha) memcpy(rec->sha256, sha, 32);
    rec->mtime = (int64_t)clu_get_u64(&r, "mtime");
    rec->width = (int32_t)clu_get_u32(&r, "width");
    rec->height = (int32_t)clu_get_u32(&r, "height");
    nt = clu_get_u32(&r, "ntables");
    if (!r.bad && nt > CLU_TABLES_MAX) r.bad = "ntables";
    for (t = 0; !r.bad && t < nt; t++) {
        rec->tables[t].spec = clu_get_str(&r, CLU_SPEC_MAX, "table spec");
        rec->tables[t].desc = clu_get_blob(&r, &rec->tables[t].bytes, 64u << 20, "descriptor");
    }
    if (!r.bad && rec->id == 0) r.bad = "id 0";
    rec->ntables = r.bad ? 0 : nt;
    {
        patina_status s = rd_done(&r, "record");
        if (s != PATINA_OK) memset(rec, 0, sizeof *rec);
        return s;
    }
}

const clu_rtable_t *clu_record_table(const clu_record_t *rec, const char *spec)
{
    size_t t;
    for (t = 0; t < rec->ntables; t++)
        if (!strcmp(rec->tables[t].spec, spec)) return &rec->tables[t];
    return NULL;
}

/* -------------------------------------------------------------- messages */

static void put_header(clu_buf_t *b, const char *magic, clu_kind kind)
{
    clu_put_raw(b, magic, 4);
    clu_put_u16(b, CLU_MSG_VERSION);
    clu_put_u16(b, (uint16_t)kind);
}

/* Reads and checks the header; *kind receives the kind. */
static patina_status get_header(clu_rd_t *r, const char *magic, const char *what, clu_kind *kind)
{
    const uint8_t *m = clu_get_raw(r, 4, "magic");
    uint16_t v, k;
    if (!m || memcmp(m, magic, 4)) return clu_fail(PATINA_E_FORMAT, "%s: bad magic (not a patina %s)", what, what);
    v = clu_get_u16(r, "version");
    k = clu_get_u16(r, "kind");
    if (r->bad) return clu_fail(PATINA_E_CORRUPT, "%s: truncated header", what);
    if (v != CLU_MSG_VERSION)
        return clu_fail(PATINA_E_FORMAT, "%s: version %u (this build speaks %u)", what, v, CLU_MSG_VERSION);
    if (k < CLU_KIND_SEARCH || k > CLU_KIND_CONFIRM) return clu_fail(PATINA_E_FORMAT, "%s: unknown kind %u", what, k);
    *kind = (clu_kind)k;
    return PATINA_OK;
}

static void put_parts(clu_buf_t *b, const uint32_t *parts, size_t n)
{
    size_t i;
    clu_put_u32(b, (uint32_t)n);
    for (i = 0; i < n; i++) clu_put_u32(b, parts[i]);
}

static uint32_t *get_parts(clu_rd_t *r, size_t *n)
{
    uint32_t np = clu_get_u32(r, "partitions"), i;
    uint32_t *v;
    *n = 0;
    if (r->bad) return NULL;
    if (np > CLU_PARTITIONS_MAX || (size_t)np * 4 > r->n - r->off) {
        r->bad = "partitions";
        return NULL;
    }
    if (!(v = malloc((np ? np : 1) * sizeof *v))) {
        r->bad = "partitions (out of memory)";
        return NULL;
    }
    for (i = 0; i < np; i++) {
        v[i] = clu_get_u32(r, "partition");
        if (v[i] >= CLU_PARTITIONS_MAX) r->bad = "partition";
    }
    *n = np;
    return v;
}

void clu_request_release(clu_request_t *q)
{
    free(q->parts);
    memset(q, 0, sizeof *q);
}

patina_status clu_request_encode(clu_buf_t *b, const clu_request_t *q)
{
    put_header(b, "PQ1", q->kind);
    if (q->kind == CLU_KIND_CONFIRM) {
        clu_put_u32(b, q->partition);
        clu_put_u64(b, q->revision);
        clu_put_u32(b, q->timeout_ms);
    } else {
        clu_put_str(b, q->spec);
        if (q->kind == CLU_KIND_SEARCH) {
            clu_put_u8(b, (uint8_t)q->query.kind);
            clu_put_u64(b, q->query.k);
            clu_put_f64(b, q->query.radius);
            clu_put_u64(b, q->query.max_hits);
            clu_put_u8(b, (uint8_t)q->query.device);
            clu_put_u8(b, (uint8_t)q->query.bound);
        } else {
            const patina_identify_opts_t *o = &q->iopts;
            clu_put_u64(b, o->k);
            clu_put_f64(b, o->ratio);
            clu_put_u8(b, (uint8_t)o->scoring);
            clu_put_u8(b, (uint8_t)o->verify);
            clu_put_u64(b, o->verify_top);
            clu_put_u8(b, (uint8_t)o->model);
            clu_put_f64(b, o->ransac_threshold);
            clu_put_u32(b, (uint32_t)o->iterations);
            clu_put_u8(b, (uint8_t)o->shape_check);
            clu_put_u64(b, o->seed);
            clu_put_f64(b, o->threshold);
            clu_put_u8(b, (uint8_t)o->device);
            clu_put_u8(b, (uint8_t)o->precision);
            clu_put_u8(b, (uint8_t)o->guided);
            clu_put_f64(b, o->guided_ratio);
            clu_put_f64(b, o->ambiguity);
            clu_put_u8(b, (uint8_t)o->accept);
            clu_put_u64(b, o->view_candidates);
            clu_put_u64(b, o->first_features);
            clu_put_u64(b, o->half_view_features);
        }
        put_parts(b, q->parts, q->nparts);
        clu_put_u32(b, (uint32_t)q->nq);
        clu_put_u64(b, q->qbytes);
        clu_put_raw(b, q->queries, q->nq * q->qbytes);
    }
    return b->oom ? clu_fail(PATINA_E_LIMIT, "request: out of memory or over %u bytes", CLU_MSG_MAX) : PATINA_OK;
}

patina_status clu_request_decode(clu_request_t *q, const void *data, size_t n)
{
    clu_rd_t r;
    patina_status s;
    memset(q, 0, sizeof *q);
    clu_rd_init(&r, data, n);
    if ((s = get_header(&r, "PQ1", "request", &q->kind)) != PATINA_OK) return s;
    if (q->kind == CLU_KIND_CONFIRM) {
        q->partition = clu_get_u32(&r, "partition");
        q->revision = clu_get_u64(&r, "revision");
        q->timeout_ms = clu_get_u32(&r, "timeout");
        if (!r.bad && q->partition >= CLU_PARTITIONS_MAX) r.bad = "partition";
    } else {
        uint32_t nq;
        uint64_t qbytes;
        q->spec = clu_get_str(&r, CLU_SPEC_MAX, "spec");
        if (q->kind == CLU_KIND_SEARCH) {
            uint8_t kind, dev, bound;
            patina_table_query_init(&q->query);
            kind = clu_get_u8(&r, "query kind");
            q->query.k = (size_t)clu_get_u64(&r, "k");
            q->query.radius = clu_get_f64(&r, "radius");
            q->query.max_hits = (size_t)clu_get_u64(&r, "max_hits");
            dev = clu_get_u8(&r, "device");
            bound = clu_get_u8(&r, "bound");
            if (!r.bad && (kind > PATINA_QUERY_RANGE || dev > PATINA_DEVICE_GPU + 1 || bound > 2)) r.bad = "query";
            q->query.kind = (patina_query_kind)kind;
            q->query.device = (patina_device)dev;
            q->query.bound = (patina_pivot_bound)bound;
        } else {
            patina_identify_opts_t *o = &q->iopts;
            patina_identify_opts_init(o);
            o->k = (size_t)clu_get_u64(&r, "k");
            o->ratio = clu_get_f64(&r, "ratio");
            o->scoring = (patina_identify_scoring)clu_get_u8(&r, "scoring");
            o->verify = clu_get_u8(&r, "verify");
            o->verify_top = (size_t)clu_get_u64(&r, "verify_top");
            o->model = (patina_identify_model)clu_get_u8(&r, "model");
            o->ransac_threshold = clu_get_f64(&r, "ransac_threshold");
            o->iterations = (int)clu_get_u32(&r, "iterations");
            o->shape_check = clu_get_u8(&r, "shape_check");
            o->seed = clu_get_u64(&r, "seed");
            o->threshold = clu_get_f64(&r, "threshold");
            o->device = (patina_device)clu_get_u8(&r, "device");
            o->precision = (patina_identify_precision)clu_get_u8(&r, "precision");
            o->guided = clu_get_u8(&r, "guided");
            o->guided_ratio = clu_get_f64(&r, "guided_ratio");
            o->ambiguity = clu_get_f64(&r, "ambiguity");
            o->accept = (patina_identify_accept)clu_get_u8(&r, "accept");
            o->view_candidates = (size_t)clu_get_u64(&r, "view_candidates");
            o->first_features = (size_t)clu_get_u64(&r, "first_features");
            o->half_view_features = (size_t)clu_get_u64(&r, "half_view_features");
            /* the values themselves are checked by the library (the options table) */
        }
        q->parts = get_parts(&r, &q->nparts);
        nq = clu_get_u32(&r, "queries");
        qbytes = clu_get_u64(&r, "query bytes");
        if (!r.bad && (nq > CLU_QUERIES_MAX || qbytes > CLU_MSG_MAX || (uint64_t)nq * qbytes != r.n - r.off))
            r.bad = "queries";
        q->nq = nq;
        q->qbytes = (size_t)qbytes;
        q->queries = clu_get_raw(&r, q->nq * q->qbytes, "query data");
    }
    if ((s = rd_done(&r, "request")) != PATINA_OK) clu_request_release(q);
    return s;
}

void clu_reply_release(clu_reply_t *r)
{
    size_t i;
    free(r->parts);
    patina_table_results_release(&r->res);
    if (r->keys)
        for (i = 0; i < r->nq * r->k; i++) free(r->keys[i]);
    free(r->keys);
    free(r->hits);
    free(r->results);
    memset(r, 0, sizeof *r);
}

patina_status clu_reply_encode(clu_buf_t *b, const clu_reply_t *r)
{
    size_t q, i;
    put_header(b, "PR1", r->kind);
    clu_put_u32(b, (uint32_t)r->status);
    clu_put_str(b, r->message);
    put_parts(b, r->parts, r->nparts);
    clu_put_f64(b, r->shard_ms);
    if (r->status == PATINA_OK && r->kind == CLU_KIND_SEARCH) {
        const patina_table_results_t *res = &r->res;
        clu_put_u64(b, res->rows);
        clu_put_u32(b, (uint32_t)res->nq);
        for (q = 0; q < res->nq; q++) {
            clu_put_u32(b, (uint32_t)(res->offsets[q + 1] - res->offsets[q]));
            for (i = res->offsets[q]; i < res->offsets[q + 1]; i++) {
                clu_put_u64(b, res->hits[i].id);
                clu_put_f64(b, res->hits[i].distance);
                clu_put_str(b, res->keys ? res->keys[i] : NULL);
            }
        }
    } else if (r->status == PATINA_OK && r->kind == CLU_KIND_IDENTIFY) {
        clu_put_u32(b, (uint32_t)r->nq);
        clu_put_u32(b, (uint32_t)r->k);
        clu_put_u64(b, r->rows);
        for (q = 0; q < r->nq; q++) {
            const patina_identify_result_t *res = &r->results[q];
            clu_put_u32(b, (uint32_t)res->decision);
            clu_put_u32(b, res->query_features);
            clu_put_u32(b, (uint32_t)res->nhits);
            for (i = 0; i < res->nhits; i++) {
                const patina_identify_hit_t *h = &r->hits[q * r->k + i];
                clu_put_u64(b, h->id);
                clu_put_f64(b, h->score);
                clu_put_u32(b, h->matches);
                clu_put_u32(b, h->inliers);
                clu_put_u8(b, (uint8_t)h->verified);
                clu_put_str(b, r->keys ? r->keys[q * r->k + i] : NULL);
            }
        }
    }
    return b->oom ? clu_fail(PATINA_E_LIMIT, "reply: out of memory or over %u bytes", CLU_MSG_MAX) : PATINA_OK;
}

patina_status clu_reply_decode(clu_reply_t *r, const void *data, size_t n)
{
    clu_rd_t rd;
    patina_status s;
    const char *msg;
    uint32_t st;
    size_t filled = 0; /* search: hits (and keys) written */
    memset(r, 0, sizeof *r);
    clu_rd_init(&rd, data, n);
    if ((s = get_header(&rd, "PR1", "reply", &r->kind)) != PATINA_OK) return s;
    st = clu_get_u32(&rd, "status");
    msg = clu_get_str(&rd, 4096, "message");
    if (!rd.bad && st >= PATINA_DONE) rd.bad = "status";
    r->status = (patina_status)st;
    if (msg) snprintf(r->message, sizeof r->message, "%s", msg);
    r->parts = get_parts(&rd, &r->nparts);
    r->shard_ms = clu_get_f64(&rd, "shard time");
    if (!rd.bad && !(r->shard_ms >= 0.0 && r->shard_ms <= 1e9)) rd.bad = "shard time"; /* NaN too */
    if (!rd.bad && r->status == PATINA_OK && r->kind == CLU_KIND_SEARCH) {
        patina_table_results_t *res = &r->res;
        size_t cap = 0, q;
        res->rows = (size_t)clu_get_u64(&rd, "rows");
        res->nq = clu_get_u32(&rd, "queries");
        if (!rd.bad && res->nq > CLU_QUERIES_MAX) rd.bad = "queries";
        if (!rd.bad && !(res->offsets = calloc(res->nq + 1, sizeof *res->offsets))) rd.bad = "out of memory";
        for (q = 0; !rd.bad && q < res->nq; q++) {
            uint32_t nh = clu_get_u32(&rd, "hits"), i;
            /* every hit takes at least 21 bytes: a count the rest cannot hold is malformed */
            if (!rd.bad && (size_t)nh > (rd.n - rd.off) / 21) rd.bad = "hits";
            if (!rd.bad && filled + nh > cap) {
                size_t nc = cap ? cap : 64;
                patina_hit_t *h;
                char **k;
                while (nc < filled + nh) nc *= 2;
                h = realloc(res->hits, nc * sizeof *h);
                if (h) res->hits = h;
                k = realloc(res->keys, nc * sizeof *k);
                if (k) res->keys = k;
                if (!h || !k) rd.bad = "out of memory";
                else cap = nc;
            }
            for (i = 0; !rd.bad && i < nh; i++) {
                const char *key;
                res->hits[filled].id = clu_get_u64(&rd, "id");
                res->hits[filled].distance = clu_get_f64(&rd, "distance");
                key = clu_get_str(&rd, PATINA_KEY_MAX, "key");
                res->keys[filled] = key ? strdup(key) : NULL;
                filled++;
                if (key && !res->keys[filled - 1]) rd.bad = "out of memory";
            }
            res->offsets[q + 1] = filled;
        }
    } else if (!rd.bad && r->status == PATINA_OK && r->kind == CLU_KIND_IDENTIFY) {
        size_t q, i;
        r->nq = clu_get_u32(&rd, "queries");
        r->k = clu_get_u32(&rd, "k");
        r->rows = clu_get_u64(&rd, "rows");
        if (!rd.bad && (r->nq > CLU_QUERIES_MAX || r->nq > (rd.n - rd.off) / 12 || r->k > PATINA_K_MAX ||
                        r->nq * r->k > (1u << 24)))
            rd.bad = "queries x k";
        if (!rd.bad) {
            r->hits = calloc(r->nq * r->k + 1, sizeof *r->hits);
            r->results = calloc(r->nq + 1, sizeof *r->results);
            r->keys = calloc(r->nq * r->k + 1, sizeof *r->keys);
            if (!r->hits || !r->results || !r->keys) rd.bad = "out of memory";
        }
        for (q = 0; !rd.bad && q < r->nq; q++) {
            patina_identify_result_t *res = &r->results[q];
            uint32_t dec = clu_get_u32(&rd, "decision");
            res->decision = (patina_identify_decision)dec;
            res->query_features = clu_get_u32(&rd, "query features");
            res->nhits = clu_get_u32(&rd, "hits");
            if (!rd.bad && (dec > PATINA_DECISION_AMBIGUOUS || res->nhits > r->k)) rd.bad = "identify result";
            for (i = 0; !rd.bad && i < res->nhits; i++) {
                patina_identify_hit_t *h = &r->hits[q * r->k + i];
                const char *key;
                h->id = clu_get_u64(&rd, "id");
                h->score = clu_get_f64(&rd, "score");
                h->matches = clu_get_u32(&rd, "matches");
                h->inliers = clu_get_u32(&rd, "inliers");
                h->verified = clu_get_u8(&rd, "verified");
                key = clu_get_str(&rd, PATINA_KEY_MAX, "key");
                if (key && !(r->keys[q * r->k + i] = strdup(key))) rd.bad = "out of memory";
            }
            if (rd.bad) res->nhits = 0;
        }
    }
    if ((s = rd_done(&rd, "reply")) != PATINA_OK) {
        if (r->res.keys) {
            size_t i;
            for (i = 0; i < filled; i++) free(r->res.keys[i]);
            free(r->res.keys);
            r->res.keys = NULL;
        }
        clu_reply_release(r);
    }
    return s;
}
