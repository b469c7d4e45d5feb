/* The endpoints of `patina serve` (docs/serve.md; the contract is
 * src/serve/openapi.json). Each handler reads its parameters (JSON body,
 * multipart fields, query string), calls the library through colls.c or
 * jobs.c, and queues exactly one answer: JSON, or a problem document
 * (RFC 9457, application/problem+json) whose detail says what was wrong.
 *
 * Status codes: 400 a malformed request (bad JSON, a wrong type, a missing
 * or contradictory parameter, a broken multipart body or tar archive);
 * 401 a write without the token or with a wrong one (told apart by
 * WWW-Authenticate, RFC 6750); 404 no such collection, image, job or
 * route; 405 a method the route lacks; 409 an add of a key that exists, the
 * cancel of a finished job; 413 a body or an image over the limits; 415 a
 * body of a type the endpoint does not take (not JPEG, PNG or PNM for an
 * image); 422 a well-formed request the collection cannot answer (no such
 * table, a descriptor of the wrong size, an image that does not decode, k
 * over the limit); 429 the search queue or the job queue is full; 503 the
 * server is shutting down; 500 anything else. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "serve/internal.h"

/* ---------------------------------------------------------------- answers */

static const char *reason(unsigned status)
{
    switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 507: return "Insufficient Storage";
    default: return "Error";
    }
}

static int queue(req_t *r, unsigned status, struct MHD_Response *resp)
{
    int ok;
    if (!resp) return MHD_NO;
    if (atomic_load(&r->srv->draining)) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    if (status == 401)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                r->www_auth ? r->www_auth : "Bearer realm=\"patina\"");
    if (status == 429 || status == 503) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == 405) {
        const char *allow = "GET";
        switch (r->route) {
        case ROUTE_IMAGES: allow = "POST"; break;
        case ROUTE_IMAGE: allow = "GET, PUT, DELETE"; break;
        case ROUTE_SEARCH: case ROUTE_IDENTIFY: allow = "POST"; break;
        case ROUTE_COLL_JOBS: allow = "POST"; break;
        case ROUTE_JOB: allow = "GET, DELETE"; break;
        case ROUTE_STATIC: allow = "GET, HEAD"; break;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    }
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    {   /* answered: --request-timeout no longer applies to this request */
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        sconn_t *c = ci ? ci->socket_context : NULL;
        if (c) atomic_store(&c->receiving, 0);
    }
    ok = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    r->answered = 1;
    r->status = (int)status;
    return ok;
}

int reply_buf(req_t *r, unsigned status, const char *ctype, const void *data, size_t size)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(size, (void *)data, MHD_RESPMEM_MUST_COPY);
    if (resp && ctype) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    return queue(r, status, resp);
}

static int reply_json_type(req_t *r, unsigned status, json_t *obj, const char *ctype)
{
    char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    struct MHD_Response *resp;
    size_t n;
    json_decref(obj);
    if (!s) return reply_buf(r, 500, "text/plain", "out of memory\n", 14);
    n = strlen(s);
    s[n] = '\0';
    resp = MHD_create_response_from_buffer(n, s, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(s);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    return queue(r, status, resp);
}

int reply_json(req_t *r, unsigned status, json_t *obj) { return reply_json_type(r, status, obj, "application/json"); }

static int reply_problem_v(req_t *r, unsigned status, json_t *extra, const char *fmt, va_list ap)
{
    char detail[2048];
    json_t *o = extra ? extra : json_object();
    vsnprintf(detail, sizeof detail, fmt, ap);
    json_object_set_new(o, "type", json_string("about:blank"));
    json_object_set_new(o, "title", json_string(reason(status)));
    json_object_set_new(o, "status", json_integer(status));
    json_object_set_new(o, "detail", wire_json_str(detail));
    if (r->path) json_object_set_new(o, "instance", wire_json_str(r->path));
    return reply_json_type(r, status, o, "application/problem+json");
}

int reply_problem(req_t *r, unsigned status, const char *fmt, ...)
{
    va_list ap;
    int rc;
    va_start(ap, fmt);
    rc = reply_problem_v(r, status, NULL, fmt, ap);
    va_end(ap);
    return rc;
}

int reply_problem_with(req_t *r, unsigned status, json_t *extra, const char *fmt, ...)
{
    va_list ap;
    int rc;
    va_start(ap, fmt);
    rc = reply_problem_v(r, status, extra, fmt, ap);
    va_end(ap);
    return rc;
}

unsigned status_http(patina_status s)
{
    switch (s) {
    case PATINA_OK: return 200;
    case PATINA_E_INVALID: return 422;
    case PATINA_E_FORMAT: return 415;
    case PATINA_E_CORRUPT: return 422;
    case PATINA_E_LIMIT: return 413;
    case PATINA_E_NOTFOUND: return 404;
    case PATINA_E_BUSY: return 409;
    case PATINA_E_FULL: return 507;
    case PATINA_E_NOMEM: case PATINA_E_UNAVAILABLE: return 503;
    default: return 500;
    }
}

/* The problem for a failed colls/jobs call: serve_msg is the detail. */
int reply_status(req_t *r, patina_status s) { return reply_problem(r, status_http(s), "%s", serve_msg); }

/* ------------------------------------------------------------- parameters */

void params_release(params_t *p)
{
    json_decref(p->json);
    wire_parts_free(p->parts, p->nparts);
    memset(p, 0, sizeof *p);
}

static const char *ctype_of(req_t *r)
{
    const char *ct = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    return ct ? ct : "";
}

static int ctype_is(const char *ct, const char *want)
{
    size_t n = strlen(want);
    return !strncasecmp(ct, want, n) && (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ');
}

static int is_image_type(const char *ct)
{
    return !strncasecmp(ct, "image/", 6) || ctype_is(ct, "application/octet-stream");
}

/* Reads the body as one of the kinds accepted; answers (and returns -1) on
 * a wrong type or a malformed body. */
int params_read(params_t *p, req_t *r, int accept)
{
    const char *ct = ctype_of(r);
    memset(p, 0, sizeof *p);
    p->r = r;
    if ((accept & BODY_JSON) && ctype_is(ct, "application/json")) {
        json_error_t e;
        p->json = json_loadb((const char *)r->body, r->len, JSON_REJECT_DUPLICATES, &e);
        if (!p->json) {
            reply_problem(r, 400, "bad JSON at line %d, column %d: %s", e.line, e.column, e.text);
            return -1;
        }
        if (!json_is_object(p->json)) {
            reply_problem(r, 400, "the JSON body must be an object");
            params_release(p);
            return -1;
        }
        return 0;
    }
    if ((accept & BODY_MULTIPART) && ctype_is(ct, "multipart/form-data")) {
        char boundary[256], err[512];
        size_t i;
        if (wire_header_param(ct, "boundary", boundary, sizeof boundary) != 0) {
            reply_problem(r, 400, "multipart/form-data without a boundary parameter");
            return -1;
        }
        if (wire_multipart_parse(&p->parts, &p->nparts, r->body ? r->body : (const uint8_t *)"", r->len, boundary, 64,
                                 err, sizeof err) != 0) {
            reply_problem(r, 400, "%s", err);
            return -1;
        }
        for (i = 0; i < p->nparts && !p->image; i++)
            if (!strcmp(p->parts[i].name, "image")) p->image = &p->parts[i];
        if (p->image) {
            p->data = p->image->data;
            p->size = p->image->size;
        }
        return 0;
    }
    if ((accept & BODY_IMAGE) && is_image_type(ct)) {
        p->data = r->body ? r->body : (const uint8_t *)"";
        p->size = r->len;
        return 0;
    }
    reply_problem(r, 415, "Content-Type '%.100s' is not accepted here; send %s%s%s", ct,
                  accept & BODY_JSON ? "application/json " : "", accept & BODY_IMAGE ? "image/* (raw image bytes) " : "",
                  accept & BODY_MULTIPART ? "multipart/form-data (part 'image')" : "");
    return -1;
}

/* A text parameter: a multipart field (copied into buf) or the query
 * string; NULL when absent. JSON parameters are read with json_object_get. */
const char *param_text(params_t *p, const char *name, char *buf, size_t size)
{
    size_t i;
    for (i = 0; i < p->nparts; i++)
        if (&p->parts[i] != p->image && !strcmp(p->parts[i].name, name)) {
            size_t n = p->parts[i].size < size - 1 ? p->parts[i].size : size - 1;
            memcpy(buf, p->parts[i].data, n);
            buf[n] = '\0';
            return buf;
        }
    return MHD_lookup_connection_value(p->r->conn, MHD_GET_ARGUMENT_KIND, name);
}

/* Numeric parameters: *out unchanged and 0 when absent; -1 after answering 400. */
int param_u64(params_t *p, const char *name, uint64_t *out, int *given)
{
    char buf[64];
    json_t *j = p->json ? json_object_get(p->json, name) : NULL;
    const char *t;
    if (given) *given = 0;
    if (j) {
        if (!json_is_integer(j) || json_integer_value(j) < 0) {
            reply_problem(p->r, 400, "'%s' must be a non-negative integer", name);
            return -1;
        }
        *out = (uint64_t)json_integer_value(j);
        if (given) *given = 1;
        return 0;
    }
    if (!(t = param_text(p, name, buf, sizeof buf))) return 0;
    {
        char *end;
        unsigned long long v;
        errno = 0;
        v = strtoull(t, &end, 10);
        if (!*t || *t == '-' || *t == '+' || *t == ' ' || errno || *end) {
            reply_problem(p->r, 400, "'%s' must be a non-negative integer, not '%.40s'", name, t);
            return -1;
        }
        *out = v;
    }
    if (given) *given = 1;
    return 0;
}

int param_num(params_t *p, const char *name, double *out, int *given)
{
    char buf[64];
    json_t *j = p->json ? json_object_get(p->json, name) : NULL;
    const char *t;
    *given = 0;
    if (j) {
        if (!json_is_number(j)) {
            reply_problem(p->r, 400, "'%s' must be a number", name);
            return -1;
        }
        *out = json_number_value(j);
        *given = 1;
        return 0;
    }
    if (!(t = param_text(p, name, buf, sizeof buf))) return 0;
    {
        char *end;
        double v;
        errno = 0;
        v = strtod(t, &end);
        if (!*t || errno || *end || !isfinite(v)) {
            reply_problem(p->r, 400, "'%s' must be a finite number, not '%.40s'", name, t);
            return -1;
        }
        *out = v;
    }
    *given = 1;
    return 0;
}

/* A string parameter of a JSON body or the text ones; -1 after answering 400. */
int param_str(params_t *p, const char *name, char *buf, size_t size, const char **out)
{
    json_t *j = p->json ? json_object_get(p->json, name) : NULL;
    *out = NULL;
    if (j) {
        if (!json_is_string(j)) {
            reply_problem(p->r, 400, "'%s' must be a string", name);
            return -1;
        }
        *out = json_string_value(j);
        return 0;
    }
    *out = param_text(p, name, buf, size);
    return 0;
}

/* Every "family" parameter (repeatable in multipart and query strings; a
 * string or an array of strings in JSON) into a new JSON array; NULL after
 * answering 400. */
typedef struct fam_collect {
    json_t *a;
} fam_collect_t;

static enum MHD_Result collect_family(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    fam_collect_t *fc = cls;
    (void)kind;
    if (key && value && !strcmp(key, "family")) json_array_append_new(fc->a, json_string(value));
    return MHD_YES;
}

json_t *param_families(params_t *p)
{
    json_t *a = json_array(), *j = p->json ? json_object_get(p->json, "family") : NULL;
    fam_collect_t fc = {a};
    size_t i;
    if (j) {
        if (json_is_string(j)) json_array_append(a, j);
        else if (json_is_array(j)) {
            json_t *v;
            json_array_foreach(j, i, v) {
                if (!json_is_string(v)) {
                    json_decref(a);
                    reply_problem(p->r, 400, "'family' must be a string or an array of strings");
                    return NULL;
                }
                json_array_append(a, v);
            }
        } else {
            json_decref(a);
            reply_problem(p->r, 400, "'family' must be a string or an array of strings");
            return NULL;
        }
    } else {
        for (i = 0; i < p->nparts; i++)
            if (!strcmp(p->parts[i].name, "family"))
                json_array_append_new(a, json_stringn((const char *)p->parts[i].data, p->parts[i].size));
        MHD_get_connection_values(p->r->conn, MHD_GET_ARGUMENT_KIND, collect_family, &fc);
    }
    for (i = 0; i < json_array_size(a); i++) {
        patina_extractor_t *ex = NULL;
        if (!json_string_value(json_array_get(a, i))) {
            json_decref(a);
            reply_problem(p->r, 400, "'family' must be UTF-8 text");
            return NULL;
        }
        if (patina_extractor_new(&ex, json_string_value(json_array_get(a, i))) != PATINA_OK) {
            reply_problem(p->r, 422, "family: %s", patina_last_error());
            json_decref(a);
            return NULL;
        }
        patina_extractor_free(ex);
    }
    return a;
}

/* ---------------------------------------------------------------- records */

static json_t *record_json(scoll_t *sc, const patina_record_t *rec)
{
    json_t *o = json_object(), *tables = json_array();
    char hex[65], **specs = NULL;
    size_t i, n = 0;
    for (i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", rec->sha256[i]);
    json_object_set_new(o, "id", json_integer((json_int_t)rec->id));
    json_object_set_new(o, "key", wire_json_str(rec->key));
    json_object_set_new(o, "size", json_integer((json_int_t)rec->size));
    json_object_set_new(o, "sha256", json_string(hex));
    json_object_set_new(o, "mtime", json_integer(rec->mtime));
    json_object_set_new(o, "added", json_integer(rec->added));
    json_object_set_new(o, "width", json_integer(rec->width));
    json_object_set_new(o, "height", json_integer(rec->height));
    if (patina_collection_tables(sc->c, &specs, &n) == PATINA_OK) {
        for (i = 0; i < n; i++) {
            size_t rows, bytes;
            uint8_t *tmp;
            if (patina_collection_table_info(sc->c, specs[i], &rows, &bytes) == PATINA_OK && (tmp = malloc(bytes))) {
                if (patina_collection_get_descriptor(sc->c, specs[i], rec->id, tmp, bytes) == PATINA_OK)
                    json_array_append_new(tables, json_string(specs[i]));
                free(tmp);
            }
            free(specs[i]);
        }
        free(specs);
    }
    json_object_set_new(o, "tables", tables);
    return o;
}

static json_t *tables_json(scoll_t *sc)
{
    json_t *a = json_array();
    char **specs = NULL;
    size_t n = 0, i;
    if (patina_collection_tables(sc->c, &specs, &n) != PATINA_OK) return a;
    for (i = 0; i < n; i++) {
        size_t rows = 0, bytes = 0;
        patina_extractor_t *ex = NULL;
        json_t *t = json_object();
        patina_collection_table_info(sc->c, specs[i], &rows, &bytes);
        json_object_set_new(t, "spec", json_string(specs[i]));
        json_object_set_new(t, "rows", json_integer((json_int_t)rows));
        json_object_set_new(t, "descriptor_bytes", json_integer((json_int_t)bytes));
        if (patina_extractor_new(&ex, specs[i]) == PATINA_OK) {
            json_object_set_new(t, "family", json_string(patina_extractor_family(ex)));
            json_object_set_new(t, "distance", json_string(patina_extractor_distance_name(ex)));
            unsigned caps = patina_extractor_caps(ex);
            if (caps & (PATINA_CAP_SEARCH | PATINA_CAP_IDENTIFY))
                json_object_set_new(t, "use", json_string(caps & PATINA_CAP_IDENTIFY ? "identify" : "search"));
        }
        patina_extractor_free(ex);
        json_array_append_new(a, t);
        free(specs[i]);
    }
    free(specs);
    return a;
}

static json_t *collection_json(scoll_t *sc, int full)
{
    json_t *o = json_object();
    patina_collection_info_t info;
    memset(&info, 0, sizeof info);
    patina_collection_info(sc->c, &info);
    json_object_set_new(o, "name", json_string(sc->name));
    json_object_set_new(o, "records", json_integer((json_int_t)info.records));
    json_object_set_new(o, "tables", tables_json(sc));
    if (full) {
        json_object_set_new(o, "next_id", json_integer((json_int_t)info.next_id));
        json_object_set_new(o, "map_size", json_integer((json_int_t)info.map_size));
        json_object_set_new(o, "used_bytes", json_integer((json_int_t)info.used));
        json_object_set_new(o, "format", json_integer(info.format));
    }
    return o;
}

/* ---------------------------------------------------------------- handlers */

static scoll_t *need_coll(req_t *r)
{
    scoll_t *sc = colls_find(r->srv, r->coll);
    if (!sc) reply_problem(r, 404, "no collection '%s' is served here (GET /v1/collections lists them)", r->coll);
    return sc;
}

static int h_collections(req_t *r)
{
    json_t *a = json_array(), *o = json_object();
    size_t i;
    for (i = 0; i < r->srv->ncolls; i++)
        json_array_append_new(a, r->srv->colls[i].cl ? scluster_info(&r->srv->colls[i], 0)
                                                     : collection_json(&r->srv->colls[i], 0));
    json_object_set_new(o, "collections", a);
    return reply_json(r, 200, o);
}

/* 1 when the resolved path `real` is dir or under it (dir a realpath). */
static int path_under(const char *real, const char *dir)
{
    size_t n = strlen(dir);
    if (!n) return 0;
    if (!strcmp(dir, "/")) return 1;
    return !strncmp(real, dir, n) && (real[n] == '/' || real[n] == '\0');
}

/* 1 when the resolved path `real` is under one of the --content-dir folders. */
static int content_dir_holds(const server_t *srv, const char *real)
{
    size_t i;
    for (i = 0; i < srv->ncontent_dirs; i++)
        if (path_under(real, srv->content_dirs[i])) return 1;
    return 0;
}

/* The file of an image, for ?content=1 and ?thumbnail=N (one rule for
 * both). The store keeps no pixels, only the key, size and SHA-256; the
 * file a key names (patina_collection_key_path: relative keys, what `patina
 * index` and folder jobs store under the collection's root, are joined to
 * the root) is served when its resolved path is under a --content-dir or
 * --import-dir and it still has the record's size and (when read) SHA-256.
 * data NULL: those checks without reading the file; else the file's bytes
 * (at most max_bytes) into *data (malloc'd, rec->size bytes). 0, or the
 * HTTP status (404, 503) with why saying what failed (uploaded images: their
 * bytes were never kept). */
static unsigned content_file(const server_t *srv, const scoll_t *sc, const patina_record_t *rec, uint64_t max_bytes,
                             uint8_t **data, char *why, size_t whysize)
{
    char real[PATH_MAX];
    uint8_t sum[32], *buf;
    struct stat st;
    ssize_t got;
    size_t done = 0;
    int fd;
    if (data) *data = NULL;
    {
        char *file = NULL;
        int found, err;
        if (patina_collection_key_path(sc->c, rec->key, &file) != PATINA_OK) {
            snprintf(why, whysize, "image '%s': %s", rec->key, patina_last_error());
            return 503;
        }
        found = realpath(file, real) != NULL;
        err = errno;
        free(file);
        if (!found) {
            snprintf(why, whysize,
                     "image '%s' of '%s': no file with its key's path (%s): its file is gone, or its key is not a "
                     "file path (uploaded images keep no content: the server keeps descriptors, not pixels)",
                     rec->key, sc->name, strerror(err));
            return 404;
        }
    }
    if (!content_dir_holds(srv, real) && !path_under(real, srv->import_dir)) {
        snprintf(why, whysize, "image '%s': its file is not under a --content-dir or --import-dir, so it is not served",
                 rec->key);
        return 404;
    }
    fd = open(real, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != rec->size) {
        if (fd >= 0) close(fd);
        snprintf(why, whysize, "image '%s': the file changed since it was indexed", rec->key);
        return 404;
    }
    if (!data) {
        close(fd);
        return 0;
    }
    if (rec->size > max_bytes) {
        close(fd);
        snprintf(why, whysize, "image '%s': its %llu bytes are more than this server reads or sends (%s)", rec->key,
                 (unsigned long long)rec->size, max_bytes == srv->cfg->max_body ? "--max-body" : "--max-body, --max-tar");
        return 404;
    }
    if (!(buf = malloc(rec->size ? rec->size : 1))) {
        close(fd);
        snprintf(why, whysize, "out of memory");
        return 503;
    }
    while (done < rec->size && (got = read(fd, buf + done, rec->size - done)) > 0) done += (size_t)got;
    close(fd);
    patina_sha256(sum, buf, done);
    if (done != rec->size || memcmp(sum, rec->sha256, 32)) {
        free(buf);
        snprintf(why, whysize, "image '%s': the file changed since it was indexed", rec->key);
        return 404;
    }
    *data = buf;
    return 0;
}

/* GET .../images/KEY?content=1: the image's original bytes (content_file's
 * rule; at most --max-body of them). */
static int h_image_content(req_t *r, scoll_t *sc, const patina_record_t *rec)
{
    char why[PATINA_KEY_MAX + 512];
    uint8_t *data;
    unsigned st = content_file(r->srv, sc, rec, r->srv->cfg->max_body, &data, why, sizeof why);
    const char *ctype;
    struct MHD_Response *resp;
    if (st) return reply_problem(r, st, "%s", why);
    switch (patina_format_sniff(data, rec->size)) {
    case PATINA_FORMAT_JPEG: ctype = "image/jpeg"; break;
    case PATINA_FORMAT_PNG: ctype = "image/png"; break;
    case PATINA_FORMAT_PNM: ctype = "image/x-portable-anymap"; break;
    default: ctype = "application/octet-stream"; break;
    }
    resp = MHD_create_response_from_buffer(rec->size, data, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(data);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    return queue(r, 200, resp);
}

/* 1 when an If-None-Match value names etag (a quoted tag, weak or strong:
 * the weak comparison of RFC 9110 8.8.3.2) or is "*". */
static int etag_matches(const char *inm, const char *etag)
{
    size_t n = strlen(etag);
    const char *p = inm;
    if (!inm) return 0;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        if (*p == '*') return 1;
        if (!strncmp(p, "W/", 2)) p += 2;
        if (!strncmp(p, etag, n) && (p[n] == '\0' || p[n] == ',' || p[n] == ' ' || p[n] == '\t')) return 1;
        while (*p && *p != ',') p++;
    }
    return 0;
}

/* A thumbnail answer: JPEG bytes (taken over) or none (304), with its tag. */
static int reply_thumb(req_t *r, unsigned status, uint8_t *jpeg, size_t size, const char *etag)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(jpeg ? size : 0, jpeg,
                                                               jpeg ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        free(jpeg);
        return MHD_NO;
    }
    if (jpeg) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "image/jpeg");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, etag);
    /* revalidated at each use (a 304 costs a lookup and a stat): a key's image can be replaced */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    return queue(r, status, resp);
}

/* GET .../images/KEY?thumbnail=N: the image's file (content_file's rule)
 * decoded with the server's limits, area-averaged down to N pixels on its
 * longer side (never enlarged), as a JPEG; ETag "SHA256-N" of the record,
 * 304 for a matching If-None-Match; encoded thumbnails are kept in the
 * server's cache by (SHA-256, N). */
static int h_image_thumbnail(req_t *r, scoll_t *sc, const patina_record_t *rec, const char *arg)
{
    server_t *srv = r->srv;
    char why[PATINA_KEY_MAX + 1024], etag[80], *end;
    uint8_t *data = NULL, *small = NULL, *jpeg = NULL;
    size_t jsize = 0;
    unsigned long n = THUMB_DEFAULT;
    unsigned st;
    int tw, th, i;
    patina_image_t img;
    patina_status s;
    if (*arg) {
        if (*arg < '0' || *arg > '9') return reply_problem(r, 400, "'thumbnail' must be a number of pixels, not '%.40s'", arg);
        errno = 0;
        n = strtoul(arg, &end, 10);
        if (*end) return reply_problem(r, 400, "'thumbnail' must be a number of pixels, not '%.40s'", arg);
        if (errno || n < THUMB_MIN || n > THUMB_MAX)
            return reply_problem(r, 422, "thumbnail=%.40s: a thumbnail is %d to %d pixels on its longer side", arg,
                                 THUMB_MIN, THUMB_MAX);
    }
    if ((st = content_file(srv, sc, rec, 0, NULL, why, sizeof why))) return reply_problem(r, st, "%s", why);
    etag[0] = '"';
    for (i = 0; i < 32; i++) snprintf(etag + 1 + 2 * i, 3, "%02x", rec->sha256[i]);
    snprintf(etag + 65, sizeof etag - 65, "-%lu\"", n);
    if (etag_matches(MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH), etag))
        return reply_thumb(r, 304, NULL, 0, etag);
    if (thumb_cache_get(srv->thumbs, rec->sha256, (int)n, &jpeg, &jsize)) return reply_thumb(r, 200, jpeg, jsize, etag);
    if ((st = content_file(srv, sc, rec, srv->limits.max_file_bytes, &data, why, sizeof why)))
        return reply_problem(r, st, "%s", why);
    s = patina_image_decode(&img, data, rec->size, &srv->limits, rec->key);
    free(data);
    if (s != PATINA_OK)
        return reply_problem(r, s == PATINA_E_NOMEM ? 503 : 422, "thumbnail of '%s': %s", rec->key, patina_last_error());
    thumb_size(img.width, img.height, (int)n, &tw, &th);
    if (!(small = malloc(3 * (size_t)tw * (size_t)th)) ||
        thumb_downscale(small, tw, th, img.data, img.width, img.height, img.stride) != 0) {
        free(small);
        patina_image_release(&img);
        return reply_problem(r, 503, "out of memory for the thumbnail of '%s'", rec->key);
    }
    patina_image_release(&img);
    if (thumb_jpeg(&jpeg, &jsize, small, tw, th, THUMB_QUALITY, why, sizeof why) != 0) {
        free(small);
        return reply_problem(r, 500, "thumbnail of '%s': %s", rec->key, why);
    }
    free(small);
    thumb_cache_put(srv->thumbs, rec->sha256, (int)n, jpeg, jsize);
    return reply_thumb(r, 200, jpeg, jsize, etag);
}

static int h_get_image(req_t *r, scoll_t *sc)
{
    patina_record_t rec;
    patina_status s = patina_collection_get_by_key(sc->c, r->rest, &rec);
    const char *content = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "content");
    const char *thumb = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "thumbnail");
    json_t *o;
    if (s == PATINA_E_NOTFOUND) return reply_problem(r, 404, "collection '%s' has no image '%s'", sc->name, r->rest);
    if (s != PATINA_OK) return reply_status(r, serve_lib(s, "lookup"));
    if (!thumb && MHD_lookup_connection_value_n(r->conn, MHD_GET_ARGUMENT_KIND, "thumbnail", 9, NULL, NULL) == MHD_YES)
        thumb = ""; /* ?thumbnail without a value: the default size */
    if (thumb) {
        int rc;
        if (content && strcmp(content, "0")) rc = reply_problem(r, 400, "give content=1 or thumbnail=N, not both");
        else rc = h_image_thumbnail(r, sc, &rec, thumb);
        patina_record_release(&rec);
        return rc;
    }
    if (content && strcmp(content, "0")) {
        int rc;
        if (strcmp(content, "1")) {
            patina_record_release(&rec);
            return reply_problem(r, 400, "'content' must be 0 or 1, not '%.40s'", content);
        }
        rc = h_image_content(r, sc, &rec);
        patina_record_release(&rec);
        return rc;
    }
    o = record_json(sc, &rec);
    patina_record_release(&rec);
    return reply_json(r, 200, o);
}

/* Adds or replaces: POST .../images (key in a field or ?key=) and PUT .../images/KEY. */
static int h_add(req_t *r, scoll_t *sc, int put)
{
    params_t p;
    char kbuf[4096];
    const char *key = r->rest;
    json_t *fams, *o;
    const char **specs = NULL;
    size_t n, i;
    int created = 0;
    uint64_t id = 0;
    patina_status s;
    patina_record_t rec;
    if (params_read(&p, r, BODY_IMAGE | BODY_MULTIPART) != 0) return MHD_YES;
    if (!put && !(key = param_text(&p, "key", kbuf, sizeof kbuf))) {
        params_release(&p);
        return reply_problem(r, 400, "no key: give a multipart field 'key' or ?key=");
    }
    if (!*key || strlen(key) > PATINA_KEY_MAX || !wire_utf8_valid(key, strlen(key))) {
        params_release(&p);
        return reply_problem(r, 400, "a key is 1 to %d bytes of UTF-8", PATINA_KEY_MAX);
    }
    if (!p.data) {
        params_release(&p);
        return reply_problem(r, 400, "no image: the multipart body has no part named 'image'");
    }
    if (!p.size) {
        params_release(&p);
        return reply_problem(r, 400, "the image is empty");
    }
    if (!(fams = param_families(&p))) {
        params_release(&p);
        return MHD_YES;
    }
    n = json_array_size(fams);
    specs = n ? calloc(n, sizeof *specs) : NULL;
    for (i = 0; i < n; i++) specs[i] = json_string_value(json_array_get(fams, i));
    s = colls_add(sc, key, p.data, p.size, specs, n, !put, &created, &id);
    free(specs);
    json_decref(fams);
    params_release(&p);
    if (s != PATINA_OK) return reply_status(r, s);
    if (patina_collection_get(sc->c, id, &rec) != PATINA_OK) {
        o = json_object();
        json_object_set_new(o, "id", json_integer((json_int_t)id));
        json_object_set_new(o, "key", wire_json_str(key));
    } else {
        o = record_json(sc, &rec);
        patina_record_release(&rec);
    }
    json_object_set_new(o, "created", json_boolean(created));
    return reply_json(r, created ? 201 : 200, o);
}

static int h_delete_image(req_t *r, scoll_t *sc)
{
    uint64_t id = 0;
    json_t *o;
    patina_status s = colls_remove(sc, r->rest, &id);
    if (s != PATINA_OK) return reply_status(r, s);
    o = json_object();
    json_object_set_new(o, "id", json_integer((json_int_t)id));
    json_object_set_new(o, "key", wire_json_str(r->rest));
    json_object_set_new(o, "deleted", json_true());
    return reply_json(r, 200, o);
}

/* A JSON descriptor into the table's bytes; -1 after answering. */
int read_descriptor(req_t *r, const patina_extractor_t *ex, json_t *arr, uint8_t *out)
{
    size_t dim = patina_extractor_dim(ex), i;
    patina_elem e = patina_extractor_elem(ex);
    if (!json_is_array(arr)) return reply_problem(r, 400, "'descriptor' must be an array of numbers"), -1;
    for (i = 0; i < json_array_size(arr); i++)
        if (!json_is_number(json_array_get(arr, i))) return reply_problem(r, 400, "'descriptor'[%zu] is not a number", i), -1;
    if (json_array_size(arr) != dim)
        return reply_problem(r, 422, "'descriptor' has %zu elements; table '%s' holds %zu", json_array_size(arr),
                             patina_extractor_spec(ex), dim),
               -1;
    for (i = 0; i < dim; i++) {
        json_t *v = json_array_get(arr, i);
        double x;
        if (!json_is_number(v)) return reply_problem(r, 400, "'descriptor'[%zu] is not a number", i), -1;
        x = json_number_value(v);
        switch (e) {
        case PATINA_ELEM_U8:
        case PATINA_ELEM_U16:
        case PATINA_ELEM_U32: {
            double max = e == PATINA_ELEM_U8 ? 255 : e == PATINA_ELEM_U16 ? 65535 : 4294967295.0;
            if (!json_is_integer(v) || x < 0 || x > max)
                return reply_problem(r, 422, "'descriptor'[%zu] must be an integer in 0..%.0f", i, max), -1;
            if (e == PATINA_ELEM_U8) out[i] = (uint8_t)x;
            else if (e == PATINA_ELEM_U16) ((uint16_t *)out)[i] = (uint16_t)x;
            else ((uint32_t *)out)[i] = (uint32_t)x;
            break;
        }
        case PATINA_ELEM_F32: ((float *)out)[i] = (float)x; break;
        case PATINA_ELEM_F64: ((double *)out)[i] = x; break;
        }
    }
    return 0;
}

int search_params(req_t *r, params_t *p, search_params_t *sp)
{
    patina_status s;
    int sources;
    memset(sp, 0, sizeof *sp);
    sp->k = PATINA_SEARCH_K_DEFAULT;
    if (param_str(p, "family", sp->fbuf, sizeof sp->fbuf, &sp->family) || param_u64(p, "k", &sp->k, &sp->kgiven) ||
        param_num(p, "range", &sp->radius, &sp->rgiven) || param_str(p, "key", sp->kbuf, sizeof sp->kbuf, &sp->key) ||
        param_u64(p, "id", &sp->id, &sp->idgiven))
        return -1;
    if (p->json) sp->desc_json = json_object_get(p->json, "descriptor");
    sources = !!sp->key + sp->idgiven + !!sp->desc_json + !!p->data;
    if (sources != 1) {
        reply_problem(r, 400, "give exactly one query: 'key', 'id', 'descriptor' (JSON) or an image (%d given)", sources);
        return -1;
    }
    if (sp->kgiven && sp->rgiven) {
        reply_problem(r, 400, "give 'k' or 'range', not both");
        return -1;
    }
    /* the library's bounds (include/patina/options.h), then this server's --max-k */
    if (!sp->rgiven && (s = patina_options_check(PATINA_OPTIONS_SEARCH, "k", (double)sp->k)) != PATINA_OK) {
        reply_problem(r, s == PATINA_E_LIMIT ? 422 : 400, "%s", patina_last_error());
        return -1;
    }
    if (!sp->rgiven && sp->k > r->srv->cfg->max_k) {
        reply_problem(r, 422, "k %llu exceeds this server's limit of %zu (--max-k)", (unsigned long long)sp->k,
                      r->srv->cfg->max_k);
        return -1;
    }
    if (sp->rgiven &&
        (!isfinite(sp->radius) || patina_options_check(PATINA_OPTIONS_SEARCH, "range", sp->radius) != PATINA_OK)) {
        reply_problem(r, 400, "'range' must be a finite number >= 0");
        return -1;
    }
    return 0;
}

static int h_search(req_t *r, scoll_t *sc)
{
    params_t p;
    search_params_t sp;
    const char *family, *key;
    uint64_t k, id;
    double radius;
    int rgiven, idgiven;
    json_t *desc_json, *o, *hits;
    stable_t *st;
    const patina_extractor_t *ex;
    uint8_t *desc = NULL;
    squery_t q;
    patina_status s;
    size_t i;
    const char *source = "image";

    memset(&q, 0, sizeof q);
    if (params_read(&p, r, BODY_JSON | BODY_IMAGE | BODY_MULTIPART) != 0) return MHD_YES;
    if (search_params(r, &p, &sp)) goto done;
    family = sp.family, key = sp.key, k = sp.k, id = sp.id, radius = sp.radius;
    rgiven = sp.rgiven, idgiven = sp.idgiven, desc_json = sp.desc_json;
    if ((s = colls_table(sc, family, PATINA_CAP_SEARCH, 0, &st)) != PATINA_OK) {
        reply_problem(r, s == PATINA_E_NOTFOUND ? 422 : status_http(s), "%s", serve_msg);
        goto done;
    }
    ex = patina_table_extractor(atomic_load(&st->t));
    desc = malloc(patina_extractor_bytes(ex));
    if (!desc) {
        reply_problem(r, 503, "out of memory");
        goto done;
    }
    if (key || idgiven) {
        patina_record_t rec;
        source = key ? "key" : "id";
        s = key ? patina_collection_get_by_key(sc->c, key, &rec) : patina_collection_get(sc->c, id, &rec);
        if (s == PATINA_E_NOTFOUND) {
            if (key) reply_problem(r, 404, "collection '%s' has no image '%s'", sc->name, key);
            else reply_problem(r, 404, "collection '%s' has no image with id %llu", sc->name, (unsigned long long)id);
            goto done;
        }
        if (s != PATINA_OK) {
            reply_status(r, serve_lib(s, "lookup"));
            goto done;
        }
        id = rec.id;
        patina_record_release(&rec);
        s = patina_collection_get_descriptor(sc->c, patina_extractor_spec(ex), id, desc, patina_extractor_bytes(ex));
        if (s != PATINA_OK) {
            reply_problem(r, s == PATINA_E_NOTFOUND ? 422 : 500, "image %llu has no descriptor in table '%s'",
                          (unsigned long long)id, patina_extractor_spec(ex));
            goto done;
        }
    } else if (desc_json) {
        source = "descriptor";
        if (read_descriptor(r, ex, desc_json, desc) != 0) goto done;
    } else {
        patina_image_t img;
        patina_decode_opts_t dopts;
        patina_context_t *ctx;
        patina_status one = PATINA_OK;
        memset(&img, 0, sizeof img);
        patina_decode_opts_init(&dopts);
        dopts.limits = r->srv->limits;
        if (patina_format_sniff(p.data, p.size) == PATINA_FORMAT_UNKNOWN) {
            reply_problem(r, 415, "the query image is not a JPEG, PNG or PNM image");
            goto done;
        }
        if ((s = patina_image_decode_with(&img, NULL, p.data, p.size, &dopts, "query")) != PATINA_OK) {
            reply_status(r, serve_lib(s, "image"));
            goto done;
        }
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
    q.desc = desc;
    q.k = rgiven ? 0 : (size_t)k;
    q.range = rgiven;
    q.radius = radius;
    if ((s = colls_search(sc, st, &q)) != PATINA_OK) {
        reply_problem(r, s == PATINA_E_BUSY ? 429 : status_http(s), "%s", serve_msg);
        goto done;
    }
    o = json_object();
    hits = json_array();
    json_object_set_new(o, "collection", json_string(sc->name));
    json_object_set_new(o, "family", json_string(patina_extractor_spec(ex)));
    json_object_set_new(o, "query", json_string(source));
    if (rgiven) {
        json_object_set_new(o, "range", json_real(radius));
        json_object_set_new(o, "truncated", json_boolean(q.truncated));
    } else {
        json_object_set_new(o, "k", json_integer((json_int_t)k));
    }
    json_object_set_new(o, "rows", json_integer((json_int_t)q.rows));
    for (i = 0; i < q.nhits; i++) {
        json_t *h = json_object();
        json_object_set_new(h, "rank", json_integer((json_int_t)i + 1));
        json_object_set_new(h, "id", json_integer((json_int_t)q.hits[i].id));
        json_object_set_new(h, "key", wire_json_str(q.hits[i].key));
        wire_video(h, q.hits[i].key);
        json_object_set_new(h, "distance", isfinite(q.hits[i].distance) ? json_real(q.hits[i].distance) : json_null());
        json_array_append_new(hits, h);
    }
    json_object_set_new(o, "hits", hits);
    reply_json(r, 200, o);
done:
    squery_release(&q);
    free(desc);
    params_release(&p);
    return MHD_YES;
}

/* Identification parameter `name` (a number the library's options table
 * bounds under the same name) into *field when given: 0, or -1 after
 * answering. */
static int identify_num(req_t *r, params_t *p, const char *name, double *field)
{
    double num;
    int given;
    if (param_num(p, name, &num, &given)) return -1;
    if (!given) return 0;
    if (patina_options_check(PATINA_OPTIONS_IDENTIFY, name, num) != PATINA_OK) {
        reply_problem(r, 400, "%s", patina_last_error());
        return -1;
    }
    *field = num;
    return 0;
}

/* The identification parameters of a request -- k, verify, threshold or
 * far, accept, ratio, ambiguity, distinct, sibling_inliers, view_candidates, first_features,
 * half_view_features
 * -- and its query image,
 * checked against the library's bounds (include/patina/options.h) and the
 * server's --max-k, into io (the library's defaults first): 0, or -1 after
 * answering. The embedded and the cluster front ends read identify
 * requests through it. */
int identify_params(req_t *r, params_t *p, patina_identify_opts_t *io, double *far, identify_half_t *half)
{
    uint64_t k, verify, vc, ff, hf, hq = 0;
    double num;
    int given, far_given;
    char abuf[32];
    const char *accept;
    patina_status s;
    patina_identify_opts_init(io);
    /* accept: what the threshold is compared with (its calibration follows it) */
    if (param_str(p, "accept", abuf, sizeof abuf, &accept)) return -1;
    if (accept && strcmp(accept, "significance") && strcmp(accept, "inliers")) {
        reply_problem(r, 400, "'accept' must be significance or inliers");
        return -1;
    }
    if (accept) io->accept = !strcmp(accept, "inliers") ? PATINA_ACCEPT_INLIERS : PATINA_ACCEPT_SIGNIFICANCE;
    k = io->k;
    verify = (uint64_t)io->verify;
    vc = io->view_candidates;
    ff = io->first_features;
    hf = io->half_view_features;
    if (param_u64(p, "k", &k, NULL) || param_u64(p, "verify", &verify, NULL) ||
        param_u64(p, "view_candidates", &vc, NULL) || param_u64(p, "first_features", &ff, NULL) ||
        param_u64(p, "half_view_features", &hf, NULL) || param_u64(p, "half_query", &hq, NULL))
        return -1;
    /* the half-size query: F features of the halved photograph in its first pass (as `identify --half-query`) */
    half->features = 0;
    half->margin = PATINA_HALF_QUERY_MARGIN;
    if (hq > 16384) {
        reply_problem(r, 400, "'half_query' must be 0 (off) .. 16384 features");
        return -1;
    }
    if (param_num(p, "half_query_margin", &num, &given)) return -1;
    if (given && !(num >= 0 && num <= 1e6)) {
        reply_problem(r, 400, "'half_query_margin' must be 0 .. 1e6");
        return -1;
    }
    if (given) half->margin = num;
    half->features = (size_t)hq;
    if (param_num(p, "threshold", &num, &given)) return -1;
    if (given && patina_options_check(PATINA_OPTIONS_IDENTIFY, "threshold", num) != PATINA_OK) {
        reply_problem(r, 400, "%s", patina_last_error());
        return -1;
    }
    if (given) io->threshold = num;
    /* far: the threshold calibrated for that false-accept rate (not with threshold) */
    if (param_num(p, "far", &num, &far_given)) return -1;
    if (far_given && given) {
        reply_problem(r, 400, "'far' and 'threshold' both set the acceptance threshold: give one");
        return -1;
    }
    if (far_given && patina_identify_far_threshold_opts(NULL, io, num, &io->threshold) != PATINA_OK) { /* bounds */
        reply_problem(r, 400, "%s", patina_last_error());
        return -1;
    }
    /* without either, the default: far 0.01 of the table's calibration for the acceptance rule,
     * as `patina identify` */
    *far = far_given ? num : given ? -1 : PATINA_FAR_DEFAULT;
    if (identify_num(r, p, "ratio", &io->ratio) || identify_num(r, p, "ambiguity", &io->ambiguity) ||
        identify_num(r, p, "distinct", &io->distinct) || identify_num(r, p, "sibling_inliers", &io->sibling_inliers))
        return -1;
    if (!p->data || !p->size) {
        reply_problem(r, 400, "no query image (the body, or the multipart part 'image')");
        return -1;
    }
    if (verify > 1) {
        reply_problem(r, 400, "'verify' must be 0 or 1");
        return -1;
    }
    if ((s = patina_options_check(PATINA_OPTIONS_IDENTIFY, "k", (double)k)) != PATINA_OK) {
        reply_problem(r, s == PATINA_E_LIMIT ? 422 : 400, "%s", patina_last_error());
        return -1;
    }
    if (k > r->srv->cfg->max_k) {
        reply_problem(r, 422, "k %llu exceeds this server's limit of %zu (--max-k)", (unsigned long long)k,
                      r->srv->cfg->max_k);
        return -1;
    }
    if ((s = patina_options_check(PATINA_OPTIONS_IDENTIFY, "view_candidates", (double)vc)) != PATINA_OK) {
        reply_problem(r, 400, "%s", patina_last_error());
        return -1;
    }
    if (vc > r->srv->cfg->max_k) { /* the view pass matches that many items' views: the same bound as k */
        reply_problem(r, 422, "view_candidates %llu exceeds this server's limit of %zu (--max-k)",
                      (unsigned long long)vc, r->srv->cfg->max_k);
        return -1;
    }
    if ((s = patina_options_check(PATINA_OPTIONS_IDENTIFY, "first_features", (double)ff)) != PATINA_OK ||
        (s = patina_options_check(PATINA_OPTIONS_IDENTIFY, "half_view_features", (double)hf)) != PATINA_OK) {
        reply_problem(r, 400, "%s", patina_last_error());
        return -1;
    }
    io->k = (size_t)k;
    io->verify = (int)verify;
    io->view_candidates = (size_t)vc;
    io->first_features = (size_t)ff;
    io->half_view_features = (size_t)hf;
    return 0;
}

json_t *identify_half_json(const identify_half_t *half, int taken)
{
    return json_pack("{s:I, s:f, s:b}", "features", (json_int_t)half->features, "margin", half->margin, "taken",
                     taken);
}

int identify_far(req_t *r, const patina_table_t *t, double far, const identify_half_t *half,
                 patina_identify_opts_t *io)
{
    if (far < 0) return 0;
    if ((half->features ? patina_identify_far_threshold_half : patina_identify_far_threshold_opts)(
            patina_table_spec(t), io, far, &io->threshold) != PATINA_OK) {
        reply_problem(r, 400, "%s", patina_last_error());
        return -1;
    }
    return 0;
}

static int h_identify(req_t *r, scoll_t *sc)
{
    params_t p;
    patina_identify_opts_t io;
    patina_identify_result_t res;
    patina_identify_hit_t *hits = NULL;
    char **keys = NULL;
    float **pairs = NULL;
    size_t *npairs = NULL;
    uint64_t maxpairs = 200;
    double far = -1;
    identify_half_t half;
    int taken = 0;
    patina_status s;
    json_t *o, *a;
    size_t i;
    if (params_read(&p, r, BODY_IMAGE | BODY_MULTIPART) != 0) return MHD_YES;
    if (param_u64(&p, "pairs", &maxpairs, NULL) || identify_params(r, &p, &io, &far, &half)) goto done;
    io.device = r->srv->device;
    hits = calloc(io.k, sizeof *hits);
    keys = calloc(io.k, sizeof *keys);
    pairs = calloc(io.k, sizeof *pairs);
    npairs = calloc(io.k, sizeof *npairs);
    if (!hits || !keys || !pairs || !npairs) {
        reply_problem(r, 503, "out of memory");
        goto done;
    }
    memset(&res, 0, sizeof res);
    s = colls_identify(sc, p.data, p.size, &io, far, &half, &res, hits, keys, pairs, npairs, &taken);
    if (s != PATINA_OK) {
        reply_problem(r, s == PATINA_E_NOTFOUND ? 422 : status_http(s), "%s", serve_msg);
        goto done;
    }
    o = json_object();
    a = json_array();
    json_object_set_new(o, "collection", json_string(sc->name));
    json_object_set_new(o, "decision", json_string(patina_identify_decision_name(res.decision)));
    json_object_set_new(o, "features", json_integer(res.query_features));
    /* what rank 1's score was judged against (match: score >= threshold) */
    json_object_set_new(o, "threshold", json_real(io.threshold));
    json_object_set_new(o, "accept", json_string(io.accept == PATINA_ACCEPT_INLIERS ? "inliers" : "significance"));
    if (half.features) json_object_set_new(o, "half_query", identify_half_json(&half, taken));
    for (i = 0; i < res.nhits; i++) {
        json_t *h = json_object();
        json_object_set_new(h, "rank", json_integer((json_int_t)i + 1));
        json_object_set_new(h, "id", json_integer((json_int_t)hits[i].id));
        json_object_set_new(h, "key", keys[i] ? wire_json_str(keys[i]) : json_null());
        wire_video(h, keys[i]);
        json_object_set_new(h, "score", json_real(hits[i].score));
        json_object_set_new(h, "matches", json_integer(hits[i].matches));
        json_object_set_new(h, "inliers", json_integer(hits[i].inliers));
        json_object_set_new(h, "verified", json_boolean(hits[i].verified));
        if (hits[i].verified) {
            /* at most `pairs` of them, evenly spread over the inliers */
            json_t *pa = json_array();
            size_t j, shown = npairs[i] < maxpairs ? npairs[i] : (size_t)maxpairs;
            for (j = 0; j < shown; j++) {
                const float *q = pairs[i] + 4 * (j * npairs[i] / shown);
                json_array_append_new(pa, json_pack("[ffff]", (double)q[0], (double)q[1], (double)q[2], (double)q[3]));
            }
            json_object_set_new(h, "pairs", pa);
        }
        json_array_append_new(a, h);
    }
    json_object_set_new(o, "hits", a);
    reply_json(r, 200, o);
done:
    for (i = 0; keys && i < io.k; i++) free(keys[i]);
    for (i = 0; pairs && i < io.k; i++) free(pairs[i]);
    free(keys);
    free(pairs);
    free(npairs);
    free(hits);
    params_release(&p);
    return MHD_YES;
}

static int h_submit_job(req_t *r, scoll_t *sc)
{
    server_t *srv = r->srv;
    const char *ct = ctype_of(r);
    json_t *fams = NULL, *job;
    uint64_t id;
    int rc;
    params_t p;
    memset(&p, 0, sizeof p);
    p.r = r;
    if (ctype_is(ct, "application/x-tar")) {
        wire_tar_member_t *m = NULL;
        size_t n = 0;
        char err[512];
        if (!r->len) return reply_problem(r, 400, "empty tar archive");
        if (wire_tar_parse(&m, &n, r->body, r->len, 1000000, err, sizeof err) != 0) return reply_problem(r, 400, "%s", err);
        if (!(fams = param_families(&p))) {
            wire_tar_free(m, n);
            return MHD_YES;
        }
        rc = jobs_submit(srv, sc, NULL, r->body, r->len, m, n, fams, &id);
        if (rc == 0) r->body = NULL; /* the job owns the archive now */
        else wire_tar_free(m, n);
    } else {
        const char *folder;
        char real[PATH_MAX];
        size_t il = strlen(srv->import_dir);
        if (params_read(&p, r, BODY_JSON) != 0) return MHD_YES;
        if (param_str(&p, "folder", NULL, 0, &folder) != 0) goto out;
        if (!folder) {
            reply_problem(r, 400, "give {\"folder\": \"/path/on/the/server\"} or a tar upload (Content-Type: application/x-tar)");
            goto out;
        }
        if (!srv->import_dir[0]) {
            reply_problem(r, 403, "folder jobs are off: start patina serve with --import-dir DIR (or upload a tar archive)");
            goto out;
        }
        if (!realpath(folder, real)) {
            reply_problem(r, 422, "folder '%s': %s", folder, strerror(errno));
            goto out;
        }
        if (strncmp(real, srv->import_dir, il) || (real[il] != '/' && real[il] != '\0' && strcmp(srv->import_dir, "/"))) {
            reply_problem(r, 403, "folder '%s' is not under the import folder (--import-dir)", folder);
            goto out;
        }
        if (!(fams = param_families(&p))) goto out;
        rc = jobs_submit(srv, sc, real, NULL, 0, NULL, 0, fams, &id);
    }
    if (rc == -1) reply_problem(r, 429, "%zu jobs are queued already (--max-jobs); retry later", srv->cfg->max_jobs);
    else if (rc != 0) reply_problem(r, 503, "out of memory");
    else if ((job = jobs_get(srv, id))) {
        char loc[64];
        struct MHD_Response *resp;
        char *s = json_dumps(job, JSON_COMPACT);
        json_decref(job);
        snprintf(loc, sizeof loc, "/v1/jobs/%llu", (unsigned long long)id);
        resp = s ? MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE) : NULL;
        if (resp) {
            MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
            MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, loc);
            queue(r, 202, resp);
        } else {
            free(s);
        }
    }
out:
    json_decref(fams);
    params_release(&p);
    return MHD_YES;
}

static int h_job(req_t *r)
{
    uint64_t id;
    char *end;
    json_t *o;
    errno = 0;
    id = strtoull(r->rest, &end, 10);
    if (!*r->rest || errno || *end || *r->rest == '-') return reply_problem(r, 404, "no job '%s'", r->rest);
    if (!strcmp(r->method, "DELETE")) {
        int rc = jobs_cancel(r->srv, id);
        if (rc < 0) return reply_problem(r, 404, "no job %llu", (unsigned long long)id);
        if (rc > 0) return reply_problem(r, 409, "job %llu has finished already", (unsigned long long)id);
    }
    if (!(o = jobs_get(r->srv, id))) return reply_problem(r, 404, "no job %llu", (unsigned long long)id);
    return reply_json(r, 200, o);
}

/* --------------------------------------------------------------- static */

static const char *mime_of(const char *path)
{
    static const char *const map[][2] = {
        {".html", "text/html; charset=utf-8"}, {".js", "text/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},   {".json", "application/json"},
        {".svg", "image/svg+xml"},             {".png", "image/png"},
        {".jpg", "image/jpeg"},                {".ico", "image/x-icon"},
        {".txt", "text/plain; charset=utf-8"}, {".wasm", "application/wasm"},
    };
    const char *dot = strrchr(path, '.');
    size_t i;
    for (i = 0; dot && i < sizeof map / sizeof map[0]; i++)
        if (!strcasecmp(dot, map[i][0])) return map[i][1];
    return "application/octet-stream";
}

static int h_static(req_t *r)
{
    char full[PATH_MAX * 2];
    const char *p = r->path;
    struct stat st;
    struct MHD_Response *resp;
    int fd;
    if (strstr(p, "/..") || strchr(p, '\\')) return reply_problem(r, 404, "no such file");
    if (!strcmp(p, "/")) p = "/index.html";
    snprintf(full, sizeof full, "%s%s", r->srv->web_dir, p);
    fd = open(full, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0) close(fd);
        return reply_problem(r, 404, "no such file or endpoint: %s", r->path);
    }
    resp = MHD_create_response_from_fd((uint64_t)st.st_size, fd);
    if (!resp) {
        close(fd);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, mime_of(full));
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    return queue(r, 200, resp);
}

/* ------------------------------------------------------------- dispatch */

int handle(req_t *r)
{
    server_t *srv = r->srv;
    const char *m = r->method;
    int get = !strcmp(m, "GET") || !strcmp(m, "HEAD"), post = !strcmp(m, "POST"), put = !strcmp(m, "PUT"),
        del = !strcmp(m, "DELETE");
    scoll_t *sc = NULL;
    if (r->coll && r->route != ROUTE_OTHER && !(sc = need_coll(r))) return MHD_YES;
    if (sc && sc->cl) return scluster_handle(r, sc); /* a cluster collection: its own endpoints */
    switch (r->route) {
    case ROUTE_HEALTHZ:
        if (!get) break;
        {
            json_t *o = json_object();
            json_object_set_new(o, "status", json_string("ok"));
            return reply_json(r, 200, o);
        }
    case ROUTE_READYZ:
        if (!get) break;
        if (atomic_load(&srv->draining)) return reply_problem(r, 503, "the server is shutting down");
        {
            json_t *o = json_object();
            json_object_set_new(o, "status", json_string("ready"));
            json_object_set_new(o, "collections", json_integer((json_int_t)srv->ncolls));
            return reply_json(r, 200, o);
        }
    case ROUTE_METRICS:
        if (!get) break;
        {
            size_t len = 0;
            char *text = metrics_text(srv, &len);
            struct MHD_Response *resp;
            if (!text) return reply_problem(r, 503, "out of memory");
            resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
            if (!resp) {
                free(text);
                return MHD_NO;
            }
            MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
            return queue(r, 200, resp);
        }
    case ROUTE_OPENAPI:
        if (!get) break;
        return reply_buf(r, 200, "application/json", serve_openapi_json, serve_openapi_json_len);
    case ROUTE_COLLECTIONS:
        if (!get) break;
        return h_collections(r);
    case ROUTE_COLLECTION:
        if (!get) break;
        return reply_json(r, 200, collection_json(sc, 1));
    case ROUTE_IMAGES:
        if (!post) break;
        return h_add(r, sc, 0);
    case ROUTE_IMAGE:
        if (!*r->rest) return reply_problem(r, 404, "no image key in the path");
        if (get) return h_get_image(r, sc);
        if (put) return h_add(r, sc, 1);
        if (del) return h_delete_image(r, sc);
        break;
    case ROUTE_SEARCH:
        if (!post) break;
        return h_search(r, sc);
    case ROUTE_IDENTIFY:
        if (!post) break;
        return h_identify(r, sc);
    case ROUTE_COLL_JOBS:
        if (!post) break;
        return h_submit_job(r, sc);
    case ROUTE_JOBS:
        if (!get) break;
        {
            json_t *o = json_object();
            json_object_set_new(o, "jobs", jobs_list(srv));
            return reply_json(r, 200, o);
        }
    case ROUTE_JOB:
        if (!get && !del) break;
        return h_job(r);
    case ROUTE_STATIC:
        if (!get) break;
        return h_static(r);
    default:
        return reply_problem(r, 404, "no endpoint %s (GET /openapi.json lists them)", r->path);
    }
    return reply_problem(r, 405, "%s is not allowed on %s", m, r->path);
}
