/* `patina serve COLL... --cluster URL`: the HTTP API of the embedded server
 * over cluster collections (docs/cluster.md, "Front end"). The server is a
 * stateless front end: a search or identification is described here and
 * scattered to the shards by the cluster's front (clu_front_*), which merges
 * their answers exactly; writes go into the partitions' buckets through a
 * writer (clu_writer_*), answered once the bucket's quorum committed them and
 * every copy of the partition applied them. Nothing is kept here but the
 * session (connection, configuration, member cache) and counters.
 *
 * Answers are the embedded ones plus `partial`, `coverage` {partitions,
 * partitions_total, references} and `timing` {fanout_ms, wait_ms, shard_ms,
 * total_ms} (clu_coverage_t: the scatter/gather, the slowest shard request's
 * round trip and that request's time inside its shard).
 * allow_partial=false (query parameter or JSON field) turns a partial
 * answer into 503 with the coverage. An identification on partial coverage
 * answers `incomplete` (docs/cluster.md says why not `match`). */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/internal.h"

#if PATINA_HAVE_CLUSTER
#include "cluster/cluster.h"

/* Fan-out latency buckets, seconds. */
#define FAN_BUCKETS 14
static const double fan_le[FAN_BUCKETS] = {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
                                           0.1,    0.2,   0.5,   1.0,   2.0,  5.0,  10.0};

/* A latency histogram (Prometheus: cumulative buckets, sum, count). */
typedef struct fan_hist {
    atomic_ulong n[FAN_BUCKETS + 1];
    atomic_ullong us;
} fan_hist_t;

/* The histograms of an answer's fan-out: the whole scatter/gather, the
 * round trip of its slowest shard request, that request's time inside its
 * shard (clu_coverage_t); their names and help in the metrics. */
enum { FAN_ALL, FAN_REQUEST, FAN_SHARD, FAN_KINDS };
static const char *const fan_name[FAN_KINDS] = {"patina_cluster_fanout_seconds", "patina_cluster_request_seconds",
                                                "patina_cluster_shard_seconds"};
static const char *const fan_help[FAN_KINDS] = {
    "Wall time of a query's scatter and gather.",
    "Round trip of a query's slowest shard request (sent to reply received).",
    ("Time of a query's slowest shard request inside its shard (arrival, queue wait included, to reply): the "
     "round trip less this is the transport.")};

struct scluster {
    clu_session_t *s;
    clu_writer_t *w;
    atomic_ulong requests[2];           /* search, identify */
    atomic_ulong partial[2];
    fan_hist_t fan[FAN_KINDS];
    atomic_ulong writes, write_errors;
};

int scluster_open(scoll_t *sc)
{
    const serve_config_t *cfg = sc->srv->cfg;
    clu_front_opts_t fo;
    struct scluster *cl = calloc(1, sizeof *cl);
    patina_status s;
    if (!cl) return -1;
    if (!clu_name_ok(sc->name)) {
        fprintf(stderr, "patina serve: --cluster: '%s' is not a cluster collection name ([A-Za-z0-9_-]{1,%d})\n",
                sc->path, CLU_NAME_MAX);
        free(cl);
        return -1;
    }
    clu_front_opts_init(&fo);
    fo.deadline_ms = cfg->cluster_deadline_ms > 0 ? cfg->cluster_deadline_ms : 5000;
    fo.hedge_ms = cfg->cluster_hedge_ms;
    fo.allow_partial = 1; /* per request: allow_partial */
    if ((s = clu_session_open(&cl->s, cfg->cluster, sc->name, &fo)) != PATINA_OK ||
        (s = clu_writer_new(&cl->w, clu_session_conn(cl->s), clu_session_config(cl->s), clu_session_front(cl->s))) !=
            PATINA_OK) {
        fprintf(stderr, "patina serve: cluster collection %s: %s\n", sc->name, clu_last_error());
        clu_session_close(cl->s);
        free(cl);
        return -1;
    }
    sc->cl = cl;
    return 0;
}

void scluster_close(scoll_t *sc)
{
    if (!sc->cl) return;
    clu_writer_free(sc->cl->w);
    clu_session_close(sc->cl->s);
    free(sc->cl);
    sc->cl = NULL;
}

/* ------------------------------------------------------------------ info */

json_t *scluster_info(scoll_t *sc, int full)
{
    const clu_config_t *cfg = clu_session_config(sc->cl->s);
    json_t *o = json_object(), *tables = json_array();
    size_t i;
    json_object_set_new(o, "name", json_string(sc->name));
    json_object_set_new(o, "cluster", json_true());
    for (i = 0; i < cfg->ntables; i++) {
        patina_extractor_t *ex = NULL;
        json_t *t = json_object();
        json_object_set_new(t, "spec", json_string(cfg->tables[i]));
        if (patina_extractor_new(&ex, cfg->tables[i]) == PATINA_OK) {
            unsigned caps = patina_extractor_caps(ex);
            json_object_set_new(t, "family", json_string(patina_extractor_family(ex)));
            json_object_set_new(t, "distance", json_string(patina_extractor_distance_name(ex)));
            json_object_set_new(t, "descriptor_bytes", json_integer((json_int_t)patina_extractor_bytes(ex)));
            if (caps & (PATINA_CAP_SEARCH | PATINA_CAP_IDENTIFY))
                json_object_set_new(t, "use", json_string(caps & PATINA_CAP_IDENTIFY ? "identify" : "search"));
        }
        patina_extractor_free(ex);
        json_array_append_new(tables, t);
    }
    json_object_set_new(o, "tables", tables);
    json_object_set_new(o, "partitions", json_integer(cfg->partitions));
    json_object_set_new(o, "replicas", json_integer(cfg->replicas));
    if (full) {
        clu_member_t *m = NULL;
        size_t n = 0, j;
        uint32_t p, covered = 0;
        uint64_t bytes = 0;
        if (clu_members_read(clu_session_conn(sc->cl->s), cfg, &m, &n) == PATINA_OK) {
            for (p = 0; p < cfg->partitions; p++)
                for (j = 0; j < n; j++)
                    if (m[j].ready[p]) {
                        covered++;
                        break;
                    }
            for (j = 0; j < n; j++) bytes += m[j].bytes;
            json_object_set_new(o, "shards", json_integer((json_int_t)n));
            json_object_set_new(o, "partitions_ready", json_integer(covered));
            json_object_set_new(o, "bytes", json_integer((json_int_t)bytes));
            clu_members_free(m, n);
        }
    }
    return o;
}

/* -------------------------------------------------------------- answers */

static void hist_add(fan_hist_t *h, double ms)
{
    const double s = ms > 0 ? ms * 1e-3 : 0;
    int b;
    for (b = 0; b < FAN_BUCKETS && s > fan_le[b]; b++) {}
    atomic_fetch_add(&h->n[b], 1);
    atomic_fetch_add(&h->us, (unsigned long long)(s * 1e6));
}

static void observe(struct scluster *cl, int kind, const clu_coverage_t *cov)
{
    atomic_fetch_add(&cl->requests[kind], 1);
    if (cov->partial) atomic_fetch_add(&cl->partial[kind], 1);
    hist_add(&cl->fan[FAN_ALL], cov->fanout_ms);
    hist_add(&cl->fan[FAN_REQUEST], cov->wait_ms);
    hist_add(&cl->fan[FAN_SHARD], cov->shard_ms);
}

static json_t *coverage_json(const clu_coverage_t *cov)
{
    json_t *c = json_object();
    json_object_set_new(c, "partitions", json_integer(cov->partitions));
    json_object_set_new(c, "partitions_total", json_integer(cov->partitions_total));
    json_object_set_new(c, "references", json_integer((json_int_t)cov->references));
    return c;
}

/* partial, coverage and timing into o. */
static void answer_cluster(json_t *o, const clu_coverage_t *cov, double t0)
{
    json_t *t = json_object();
    json_object_set_new(o, "partial", json_boolean(cov->partial));
    json_object_set_new(o, "coverage", coverage_json(cov));
    json_object_set_new(t, "fanout_ms", json_real(cov->fanout_ms));
    json_object_set_new(t, "wait_ms", json_real(cov->wait_ms));
    json_object_set_new(t, "shard_ms", json_real(cov->shard_ms));
    json_object_set_new(t, "total_ms", json_real((serve_now() - t0) * 1e3));
    json_object_set_new(o, "timing", t);
}

/* allow_partial: a query parameter, multipart field or JSON boolean (default true); -1 after 400. */
static int param_allow_partial(params_t *p, int *allow)
{
    char buf[16];
    json_t *j = p->json ? json_object_get(p->json, "allow_partial") : NULL;
    const char *t;
    *allow = 1;
    if (j) {
        if (!json_is_boolean(j)) return reply_problem(p->r, 400, "'allow_partial' must be true or false"), -1;
        *allow = json_is_true(j);
        return 0;
    }
    if (!(t = param_text(p, "allow_partial", buf, sizeof buf))) return 0;
    if (!strcmp(t, "true") || !strcmp(t, "1")) *allow = 1;
    else if (!strcmp(t, "false") || !strcmp(t, "0")) *allow = 0;
    else return reply_problem(p->r, 400, "'allow_partial' must be true or false, not '%.20s'", t), -1;
    return 0;
}

static int reply_unavailable(req_t *r, scoll_t *sc, const clu_coverage_t *cov)
{
    json_t *extra = json_object();
    json_object_set_new(extra, "partial", json_true());
    json_object_set_new(extra, "coverage", coverage_json(cov));
    return reply_problem_with(r, 503, extra,
                              "cluster collection %s: %u of %u partitions answered (allow_partial=false): %s",
                              sc->name, cov->partitions, cov->partitions_total, cov->failure);
}

/* Decodes an upload with the server's limits; -1 after answering. */
static int decode_upload(req_t *r, const params_t *p, const char *what, patina_image_t *img)
{
    patina_decode_opts_t dopts;
    patina_status s;
    memset(img, 0, sizeof *img);
    patina_decode_opts_init(&dopts);
    dopts.limits = r->srv->limits;
    if (patina_format_sniff(p->data, p->size) == PATINA_FORMAT_UNKNOWN)
        return reply_problem(r, 415, "the %s is not a JPEG, PNG or PNM image", what), -1;
    if ((s = patina_image_decode_with(img, NULL, p->data, p->size, &dopts, what)) != PATINA_OK)
        return reply_status(r, serve_lib(s, "image")), -1;
    return 0;
}

/* ---------------------------------------------------------------- search */

static int hc_search(req_t *r, scoll_t *sc)
{
    struct scluster *cl = sc->cl;
    const double t0 = serve_now();
    params_t p;
    search_params_t sp;
    const char *family, *key, *source = "image";
    uint64_t k;
    double radius;
    int rgiven, allow = 1;
    json_t *desc_json, *o, *hits;
    patina_table_t *t = NULL;
    const patina_extractor_t *ex;
    uint8_t *desc = NULL;
    patina_table_query_t q;
    patina_table_results_t res;
    clu_coverage_t cov;
    patina_status s;
    size_t i, nh, cap = r->srv->cfg->max_range_hits;

    memset(&res, 0, sizeof res);
    if (params_read(&p, r, BODY_JSON | BODY_IMAGE | BODY_MULTIPART) != 0) return MHD_YES;
    if (param_allow_partial(&p, &allow) || search_params(r, &p, &sp)) goto done;
    if (sp.idgiven) {
        reply_problem(r, 422, "a cluster collection is not searched by 'id' (its buckets are keyed by image key): "
                              "give 'key'");
        goto done;
    }
    family = sp.family, key = sp.key, k = sp.k, radius = sp.radius;
    rgiven = sp.rgiven, desc_json = sp.desc_json;
    if ((s = clu_session_table(cl->s, r->srv->ctx, family, PATINA_CAP_SEARCH, &t)) != PATINA_OK) {
        reply_problem(r, s == PATINA_E_NOTFOUND ? 422 : status_http(s), "%s", clu_last_error());
        goto done;
    }
    ex = patina_table_extractor(t);
    if (!(desc = malloc(patina_extractor_bytes(ex)))) {
        reply_problem(r, 503, "out of memory");
        goto done;
    }
    if (key) {
        void *data = NULL;
        size_t n = 0;
        clu_record_t rec;
        const clu_rtable_t *rt;
        source = "key";
        if ((s = clu_writer_get(cl->w, key, &data, &n, NULL)) != PATINA_OK) {
            reply_problem(r, s == PATINA_E_NOTFOUND ? 404 : status_http(s), "%s", clu_last_error());
            goto done;
        }
        s = clu_record_decode(&rec, data, n);
        rt = s == PATINA_OK ? clu_record_table(&rec, patina_extractor_spec(ex)) : NULL;
        if (rt && rt->bytes == patina_extractor_bytes(ex)) memcpy(desc, rt->desc, rt->bytes);
        else if (s == PATINA_OK) reply_problem(r, 422, "image '%s' has no descriptor in table '%s'", key, patina_extractor_spec(ex));
        else reply_problem(r, 500, "%s", clu_last_error());
        free(data);
        if (!rt || rt->bytes != patina_extractor_bytes(ex)) goto done;
    } else if (desc_json) {
        source = "descriptor";
        if (read_descriptor(r, ex, desc_json, desc) != 0) goto done;
    } else {
        patina_image_t img;
        patina_context_t *ctx;
        patina_status one = PATINA_OK;
        if (decode_upload(r, &p, "query", &img) != 0) goto done;
        ctx = server_ctx_take(r->srv);
        s = patina_extract_batch(ctx, ex, PATINA_DEVICE_CPU, desc, &img, 1, &one);
        server_ctx_give(r->srv, ctx);
        patina_image_release(&img);
        if (s != PATINA_OK || one != PATINA_OK) {
            reply_problem(r, 422, "%s could not describe the query image (%s)", patina_extractor_spec(ex),
                          patina_status_str(s != PATINA_OK ? s : one));
            goto done;
        }
    }
    patina_table_query_init(&q);
    if (rgiven) {
        q.kind = PATINA_QUERY_RANGE;
        q.radius = radius;
        q.max_hits = cap + 1; /* one more: says whether it cut */
    } else {
        q.k = (size_t)k;
    }
    q.keys = 1;
    if ((s = clu_front_search(clu_session_front(cl->s), patina_extractor_spec(ex), desc, 1,
                              patina_extractor_bytes(ex), &q, &res, &cov)) != PATINA_OK) {
        reply_problem(r, status_http(s), "%s", clu_last_error());
        goto done;
    }
    observe(cl, 0, &cov);
    if (cov.partial && !allow) {
        reply_unavailable(r, sc, &cov);
        goto done;
    }
    o = json_object();
    hits = json_array();
    json_object_set_new(o, "collection", json_string(sc->name));
    json_object_set_new(o, "family", json_string(patina_extractor_spec(ex)));
    json_object_set_new(o, "query", json_string(source));
    nh = res.offsets[1] - res.offsets[0];
    if (rgiven) {
        json_object_set_new(o, "range", json_real(radius));
        json_object_set_new(o, "truncated", json_boolean(nh > cap));
        if (nh > cap) nh = cap;
    } else {
        json_object_set_new(o, "k", json_integer((json_int_t)k));
    }
    json_object_set_new(o, "rows", json_integer((json_int_t)res.rows));
    for (i = 0; i < nh; i++) {
        const patina_hit_t *hh = &res.hits[res.offsets[0] + i];
        const char *hk = res.keys ? res.keys[res.offsets[0] + i] : NULL;
        json_t *h = json_object();
        json_object_set_new(h, "rank", json_integer((json_int_t)i + 1));
        json_object_set_new(h, "id", json_integer((json_int_t)hh->id));
        json_object_set_new(h, "key", hk ? wire_json_str(hk) : json_null());
        json_object_set_new(h, "distance", isfinite(hh->distance) ? json_real(hh->distance) : json_null());
        json_array_append_new(hits, h);
    }
    json_object_set_new(o, "hits", hits);
    answer_cluster(o, &cov, t0);
    reply_json(r, 200, o);
done:
    patina_table_results_release(&res);
    patina_table_free(t);
    free(desc);
    params_release(&p);
    return MHD_YES;
}

/* -------------------------------------------------------------- identify */

static int hc_identify(req_t *r, scoll_t *sc)
{
    struct scluster *cl = sc->cl;
    const double t0 = serve_now();
    params_t p;
    patina_identify_opts_t io;
    int allow = 1, incomplete = 0;
    double far = -1;
    identify_half_t half;
    unsigned char taken = 0;
    char fbuf[512];
    const char *family = NULL;
    patina_identify_result_t res;
    patina_identify_hit_t *hits = NULL;
    char **keys = NULL;
    patina_table_t *t = NULL;
    void *query = NULL, *hquery = NULL;
    clu_coverage_t cov;
    patina_status s;
    json_t *o, *a;
    size_t i;
    if (params_read(&p, r, BODY_IMAGE | BODY_MULTIPART) != 0) return MHD_YES;
    if (param_allow_partial(&p, &allow) || param_str(&p, "family", fbuf, sizeof fbuf, &family) ||
        identify_params(r, &p, &io, &far, &half))
        goto done;
    if ((s = clu_session_table(cl->s, r->srv->ctx, family, PATINA_CAP_IDENTIFY, &t)) != PATINA_OK) {
        reply_problem(r, 422, "%s", clu_last_error());
        goto done;
    }
    if (identify_far(r, t, far, &half, &io)) goto done;
    hits = calloc(io.k, sizeof *hits);
    keys = calloc(io.k, sizeof *keys);
    query = malloc(patina_table_query_bytes(t));
    hquery = half.features ? malloc(patina_table_query_bytes(t)) : NULL;
    if (!hits || !keys || !query || (half.features && !hquery)) {
        reply_problem(r, 503, "out of memory");
        goto done;
    }
    {
        patina_image_t img;
        patina_context_t *ctx;
        patina_status one = PATINA_OK;
        if (decode_upload(r, &p, "query", &img) != 0) goto done;
        ctx = server_ctx_take(r->srv);
        s = patina_table_identify_extract(t, ctx, query, &img, 1, &one);
        if (s == PATINA_OK && one == PATINA_OK && hquery)
            s = patina_table_identify_extract_half(t, ctx, hquery, &img, 1, &one);
        server_ctx_give(r->srv, ctx);
        patina_image_release(&img);
        if (s != PATINA_OK || one != PATINA_OK) {
            reply_problem(r, 422, "could not describe the query image (%s)",
                          patina_status_str(s != PATINA_OK ? s : one));
            goto done;
        }
    }
    memset(&res, 0, sizeof res);
    s = hquery ? clu_front_identify_half(clu_session_front(cl->s), patina_extractor_spec(patina_table_extractor(t)),
                                         query, hquery, 1, patina_table_query_bytes(t), half.features, half.margin,
                                         &io, hits, &res, keys, &incomplete, &taken, &cov)
               : clu_front_identify(clu_session_front(cl->s), patina_extractor_spec(patina_table_extractor(t)), query,
                                    1, patina_table_query_bytes(t), &io, hits, &res, keys, &incomplete, &cov);
    if (s != PATINA_OK) {
        reply_problem(r, status_http(s), "%s", clu_last_error());
        goto done;
    }
    observe(cl, 1, &cov);
    if (cov.partial && !allow) {
        reply_unavailable(r, sc, &cov);
        goto done;
    }
    o = json_object();
    a = json_array();
    json_object_set_new(o, "collection", json_string(sc->name));
    json_object_set_new(o, "decision",
                        json_string(incomplete ? "incomplete" : patina_identify_decision_name(res.decision)));
    json_object_set_new(o, "features", json_integer(res.query_features));
    json_object_set_new(o, "threshold", json_real(io.threshold));
    json_object_set_new(o, "accept", json_string(io.accept == PATINA_ACCEPT_INLIERS ? "inliers" : "significance"));
    if (half.features) json_object_set_new(o, "half_query", identify_half_json(&half, taken));
    for (i = 0; i < res.nhits; i++) {
        json_t *h = json_object();
        json_object_set_new(h, "rank", json_integer((json_int_t)i + 1));
        json_object_set_new(h, "id", json_integer((json_int_t)hits[i].id));
        json_object_set_new(h, "key", keys[i] ? wire_json_str(keys[i]) : json_null());
        json_object_set_new(h, "score", json_real(hits[i].score));
        json_object_set_new(h, "matches", json_integer(hits[i].matches));
        json_object_set_new(h, "inliers", json_integer(hits[i].inliers));
        json_object_set_new(h, "verified", json_boolean(hits[i].verified));
        json_array_append_new(a, h);
    }
    json_object_set_new(o, "hits", a);
    answer_cluster(o, &cov, t0);
    reply_json(r, 200, o);
done:
    for (i = 0; keys && i < io.k; i++) free(keys[i]);
    free(keys);
    free(hits);
    free(query);
    free(hquery);
    patina_table_free(t);
    params_release(&p);
    return MHD_YES;
}

/* ---------------------------------------------------------------- writes */

static json_t *record_json(const clu_record_t *rec)
{
    json_t *o = json_object(), *tables = json_array();
    char hex[65];
    size_t i;
    for (i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", rec->sha256[i]);
    json_object_set_new(o, "id", json_integer((json_int_t)rec->id));
    json_object_set_new(o, "key", wire_json_str(rec->key));
    json_object_set_new(o, "size", json_integer((json_int_t)rec->size));
    json_object_set_new(o, "sha256", json_string(hex));
    json_object_set_new(o, "mtime", json_integer(rec->mtime));
    json_object_set_new(o, "width", json_integer(rec->width));
    json_object_set_new(o, "height", json_integer(rec->height));
    for (i = 0; i < rec->ntables; i++) json_array_append_new(tables, json_string(rec->tables[i].spec));
    json_object_set_new(o, "tables", tables);
    return o;
}

static int hc_get(req_t *r, scoll_t *sc)
{
    void *data = NULL;
    size_t n = 0;
    clu_record_t rec;
    patina_status s = clu_writer_get(sc->cl->w, r->rest, &data, &n, NULL);
    if (s != PATINA_OK) return reply_problem(r, s == PATINA_E_NOTFOUND ? 404 : status_http(s), "%s", clu_last_error());
    if (MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "content") ||
        MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "thumbnail")) {
        free(data);
        return reply_problem(r, 501, "a cluster front end serves no image content or thumbnails");
    }
    if ((s = clu_record_decode(&rec, data, n)) != PATINA_OK) {
        free(data);
        return reply_problem(r, 500, "%s", clu_last_error());
    }
    {
        json_t *o = record_json(&rec);
        free(data);
        return reply_json(r, 200, o);
    }
}

/* Adds or replaces: POST .../images (key in a field or ?key=) and PUT .../images/KEY. */
static int hc_add(req_t *r, scoll_t *sc, int put)
{
    struct scluster *cl = sc->cl;
    const clu_config_t *cfg = clu_session_config(cl->s);
    const double t0 = serve_now();
    params_t p;
    char kbuf[4096];
    const char *key = r->rest, *specs[CLU_TABLES_MAX];
    const void *descs[CLU_TABLES_MAX];
    size_t bytes[CLU_TABLES_MAX], nt = 0, i, j;
    uint8_t *desc[CLU_TABLES_MAX] = {0};
    patina_extractor_t *ex[CLU_TABLES_MAX] = {0};
    json_t *fams = NULL, *o;
    patina_image_t img;
    patina_insert_t it;
    patina_sha256_ctx_t h;
    int created = 0, decoded = 0;
    uint64_t id = 0;
    patina_status s;
    memset(&img, 0, sizeof img);
    if (params_read(&p, r, BODY_IMAGE | BODY_MULTIPART) != 0) return MHD_YES;
    if (!put && !(key = param_text(&p, "key", kbuf, sizeof kbuf))) {
        reply_problem(r, 400, "no key: give a multipart field 'key' or ?key=");
        goto done;
    }
    if (!*key || strlen(key) > PATINA_KEY_MAX || !wire_utf8_valid(key, strlen(key))) {
        reply_problem(r, 400, "a key is 1 to %d bytes of UTF-8", PATINA_KEY_MAX);
        goto done;
    }
    if (!p.data || !p.size) {
        reply_problem(r, 400, "no image (the body, or the multipart part 'image')");
        goto done;
    }
    if (!(fams = param_families(&p))) goto done;
    /* the tables: those named (a spec or a family), else every table of the collection */
    for (i = 0; i < cfg->ntables; i++) {
        patina_extractor_t *e = NULL;
        int take = json_array_size(fams) == 0;
        if (patina_extractor_new(&e, cfg->tables[i]) != PATINA_OK) continue;
        for (j = 0; j < json_array_size(fams) && !take; j++) {
            const char *f = json_string_value(json_array_get(fams, j));
            patina_extractor_t *g = NULL;
            if (patina_extractor_new(&g, f) == PATINA_OK)
                take = !strcmp(patina_extractor_spec(g), cfg->tables[i]) ||
                       (!strchr(f, ':') && !strcmp(f, patina_extractor_family(e)));
            patina_extractor_free(g);
        }
        if (!take) {
            patina_extractor_free(e);
            continue;
        }
        ex[nt] = e;
        specs[nt] = cfg->tables[i];
        bytes[nt] = patina_extractor_bytes(e);
        if (!(desc[nt] = malloc(bytes[nt]))) {
            nt++;
            reply_problem(r, 503, "out of memory");
            goto done;
        }
        nt++;
    }
    if (!nt) {
        reply_problem(r, 422, "cluster collection %s has no such table (its tables are fixed by patina cluster create)",
                      sc->name);
        goto done;
    }
    if (decode_upload(r, &p, key, &img) != 0) goto done;
    decoded = 1;
    {
        patina_context_t *ctx = server_ctx_take(r->srv);
        for (i = 0; i < nt; i++) {
            patina_status one = PATINA_OK;
            s = patina_extract_batch(ctx, ex[i], PATINA_DEVICE_CPU, desc[i], &img, 1, &one);
            if (s != PATINA_OK || one != PATINA_OK) {
                server_ctx_give(r->srv, ctx);
                reply_problem(r, 422, "%s could not describe '%s' (%s)", specs[i], key,
                              patina_status_str(s != PATINA_OK ? s : one));
                goto done;
            }
            descs[i] = desc[i];
        }
        server_ctx_give(r->srv, ctx);
    }
    memset(&it, 0, sizeof it);
    it.key = key;
    it.size = p.size;
    patina_sha256_init(&h);
    patina_sha256_update(&h, p.data, p.size);
    patina_sha256_final(&h, it.sha256);
    it.mtime = (int64_t)time(NULL);
    it.width = img.width;
    it.height = img.height;
    s = clu_writer_put_ex(cl->w, &it, specs, descs, bytes, nt, !put, &created, &id);
    atomic_fetch_add(&cl->writes, 1);
    if (s != PATINA_OK) {
        atomic_fetch_add(&cl->write_errors, 1);
        reply_problem(r, s == PATINA_E_BUSY ? 409 : status_http(s), "%s", clu_last_error());
        goto done;
    }
    o = json_object();
    json_object_set_new(o, "id", json_integer((json_int_t)id));
    json_object_set_new(o, "key", wire_json_str(key));
    json_object_set_new(o, "created", json_boolean(created));
    {
        json_t *ta = json_array(), *tm = json_object();
        for (i = 0; i < nt; i++) json_array_append_new(ta, json_string(specs[i]));
        json_object_set_new(o, "tables", ta);
        json_object_set_new(tm, "total_ms", json_real((serve_now() - t0) * 1e3));
        json_object_set_new(o, "timing", tm);
    }
    reply_json(r, created ? 201 : 200, o);
done:
    if (decoded) patina_image_release(&img);
    for (i = 0; i < CLU_TABLES_MAX; i++) {
        free(desc[i]);
        patina_extractor_free(ex[i]);
    }
    json_decref(fams);
    params_release(&p);
    return MHD_YES;
}

static int hc_delete(req_t *r, scoll_t *sc)
{
    void *data = NULL;
    size_t n = 0;
    clu_record_t rec;
    uint64_t id = 0;
    json_t *o;
    patina_status s = clu_writer_get(sc->cl->w, r->rest, &data, &n, NULL);
    if (s == PATINA_OK && clu_record_decode(&rec, data, n) == PATINA_OK) id = rec.id;
    free(data);
    if (s == PATINA_OK) s = clu_writer_delete(sc->cl->w, r->rest);
    atomic_fetch_add(&sc->cl->writes, 1);
    if (s != PATINA_OK) {
        if (s != PATINA_E_NOTFOUND) atomic_fetch_add(&sc->cl->write_errors, 1);
        return reply_problem(r, status_http(s), "%s", clu_last_error());
    }
    o = json_object();
    json_object_set_new(o, "id", json_integer((json_int_t)id));
    json_object_set_new(o, "key", wire_json_str(r->rest));
    json_object_set_new(o, "deleted", json_true());
    return reply_json(r, 200, o);
}

/* ------------------------------------------------------------- dispatch */

int scluster_handle(req_t *r, scoll_t *sc)
{
    const char *m = r->method;
    int get = !strcmp(m, "GET") || !strcmp(m, "HEAD"), post = !strcmp(m, "POST"), put = !strcmp(m, "PUT"),
        del = !strcmp(m, "DELETE");
    switch (r->route) {
    case ROUTE_COLLECTION:
        if (get) return reply_json(r, 200, scluster_info(sc, 1));
        break;
    case ROUTE_IMAGES:
        if (post) return hc_add(r, sc, 0);
        break;
    case ROUTE_IMAGE:
        if (!*r->rest) return reply_problem(r, 404, "no image key in the path");
        if (get) return hc_get(r, sc);
        if (put) return hc_add(r, sc, 1);
        if (del) return hc_delete(r, sc);
        break;
    case ROUTE_SEARCH:
        if (post) return hc_search(r, sc);
        break;
    case ROUTE_IDENTIFY:
        if (post) return hc_identify(r, sc);
        break;
    case ROUTE_COLL_JOBS:
        return reply_problem(r, 501, "bulk jobs are not served for cluster collections: patina index COLL "
                                     "--cluster URL (docs/cluster.md)");
    default:
        return reply_problem(r, 404, "no endpoint %s (GET /openapi.json lists them)", r->path);
    }
    return reply_problem(r, 405, "%s is not allowed on %s", m, r->path);
}

/* -------------------------------------------------------------- metrics */

char *scluster_metrics(server_t *srv)
{
    static const char *const kind[2] = {"search", "identify"};
    char *text = NULL;
    size_t len = 0, i;
    int b, k;
    FILE *f;
    int any = 0;
    for (i = 0; i < srv->ncolls; i++) any |= srv->colls[i].cl != NULL;
    if (!any || !(f = open_memstream(&text, &len))) return NULL;
    fprintf(f, "# HELP patina_cluster_requests_total Queries scattered to the shards, by collection and kind.\n"
               "# TYPE patina_cluster_requests_total counter\n");
    for (i = 0; i < srv->ncolls; i++)
        for (k = 0; srv->colls[i].cl && k < 2; k++)
            fprintf(f, "patina_cluster_requests_total{collection=\"%s\",kind=\"%s\"} %lu\n", srv->colls[i].name,
                    kind[k], atomic_load(&srv->colls[i].cl->requests[k]));
    fprintf(f, "# HELP patina_cluster_partial_answers_total Answers with partitions missing (no live copy).\n"
               "# TYPE patina_cluster_partial_answers_total counter\n");
    for (i = 0; i < srv->ncolls; i++)
        for (k = 0; srv->colls[i].cl && k < 2; k++)
            fprintf(f, "patina_cluster_partial_answers_total{collection=\"%s\",kind=\"%s\"} %lu\n", srv->colls[i].name,
                    kind[k], atomic_load(&srv->colls[i].cl->partial[k]));
    for (k = 0; k < FAN_KINDS; k++) {
        fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", fan_name[k], fan_help[k], fan_name[k]);
        for (i = 0; i < srv->ncolls; i++) {
            const fan_hist_t *h = srv->colls[i].cl ? &srv->colls[i].cl->fan[k] : NULL;
            unsigned long cum = 0;
            if (!h) continue;
            for (b = 0; b < FAN_BUCKETS; b++) {
                cum += atomic_load(&h->n[b]);
                fprintf(f, "%s_bucket{collection=\"%s\",le=\"%g\"} %lu\n", fan_name[k], srv->colls[i].name, fan_le[b],
                        cum);
            }
            cum += atomic_load(&h->n[FAN_BUCKETS]);
            fprintf(f, "%s_bucket{collection=\"%s\",le=\"+Inf\"} %lu\n", fan_name[k], srv->colls[i].name, cum);
            fprintf(f, "%s_sum{collection=\"%s\"} %.6f\n", fan_name[k], srv->colls[i].name,
                    (double)atomic_load(&h->us) * 1e-6);
            fprintf(f, "%s_count{collection=\"%s\"} %lu\n", fan_name[k], srv->colls[i].name, cum);
        }
    }
    fprintf(f, "# HELP patina_cluster_shard_requests_total Requests sent to shards: all of them (sent), hedged "
               "(their partitions also sent to another copy), retried (partitions asked again after a failure), "
               "failed.\n# TYPE patina_cluster_shard_requests_total counter\n");
    for (i = 0; i < srv->ncolls; i++) {
        clu_front_stats_t st;
        if (!srv->colls[i].cl) continue;
        clu_front_stats(clu_session_front(srv->colls[i].cl->s), &st);
        fprintf(f, "patina_cluster_shard_requests_total{collection=\"%s\",outcome=\"sent\"} %llu\n", srv->colls[i].name, st.calls);
        fprintf(f, "patina_cluster_shard_requests_total{collection=\"%s\",outcome=\"hedged\"} %llu\n", srv->colls[i].name, st.hedges);
        fprintf(f, "patina_cluster_shard_requests_total{collection=\"%s\",outcome=\"retried\"} %llu\n", srv->colls[i].name, st.retries);
        fprintf(f, "patina_cluster_shard_requests_total{collection=\"%s\",outcome=\"failed\"} %llu\n", srv->colls[i].name, st.failures);
    }
    fprintf(f, "# HELP patina_cluster_writes_total Writes (add, replace, delete) through this front end, and those "
               "that failed.\n# TYPE patina_cluster_writes_total counter\n");
    for (i = 0; i < srv->ncolls; i++)
        if (srv->colls[i].cl) {
            fprintf(f, "patina_cluster_writes_total{collection=\"%s\",outcome=\"all\"} %lu\n", srv->colls[i].name,
                    atomic_load(&srv->colls[i].cl->writes));
            fprintf(f, "patina_cluster_writes_total{collection=\"%s\",outcome=\"failed\"} %lu\n", srv->colls[i].name,
                    atomic_load(&srv->colls[i].cl->write_errors));
        }
    fclose(f);
    return text;
}

#else /* no cluster in this build */

int scluster_open(scoll_t *sc)
{
    (void)sc;
    fprintf(stderr, "patina serve: --cluster: this build has no cluster support (libnats-dev was not found)\n");
    return -1;
}
void scluster_close(scoll_t *sc) { (void)sc; }
int scluster_handle(req_t *r, scoll_t *sc)
{
    (void)sc;
    return reply_problem(r, 501, "no cluster support in this build");
}
json_t *scluster_info(scoll_t *sc, int full)
{
    (void)sc;
    (void)full;
    return json_object();
}
char *scluster_metrics(server_t *srv)
{
    (void)srv;
    return NULL;
}
#endif
