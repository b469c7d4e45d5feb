/* Internals of `patina serve`, shared by the files of src/serve/:
 *
 *   server.c    serve_run: settings, the listening socket, libmicrohttpd, the
 *               request life cycle (limits, auth, draining), routing, static files
 *   handlers.c  the endpoints: JSON in, JSON out, errors as problem documents
 *   colls.c     the served collections: their live tables (opened on first use),
 *               the server's writes
 *   batch.c     the search batcher: k-NN searches of a table in one call
 *   jobs.c      bulk index jobs (a server-side folder or a tar upload), one at a time
 *   wire.c      pure parsers and writers: multipart bodies, tar archives, keys as
 *               JSON strings, problem documents (no I/O: unit-testable, fuzzable)
 *   metrics.c   counters and histograms, written in Prometheus' text format
 *   thumb.c     thumbnails: the size rule, an exact area downscale, JPEG
 *               encoding, a cache bounded by bytes (no I/O: unit-testable)
 *
 * Threads. libmicrohttpd's pool runs the handlers; a handler blocks while its
 * search waits in a batch. One batcher thread per searched table; one job
 * thread. The live tables order writes against searches (a search sees every
 * write wholly or not at all, its hits' keys included); the server's own
 * writes also take turns on the collection's write_mu, so that "the key
 * exists" holds until the commit. */
#ifndef PATINA_SERVE_INTERNAL_H
#define PATINA_SERVE_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <microhttpd.h>

#include "patina/patina.h"
#include "serve/serve.h"

/* ------------------------------------------------------------------ wire.c */

/* One part of a multipart/form-data body; strings point into the body
 * (name and filename NUL-terminated copies, malloc'd). */
typedef struct wire_part {
    char *name;            /* the form field's name (Content-Disposition name=) */
    char *filename;        /* filename= or NULL */
    char *content_type;    /* the part's Content-Type or NULL */
    const uint8_t *data;   /* (size) bytes inside the body, borrowed */
    size_t size;
} wire_part_t;

/* Parses a multipart/form-data body with boundary `boundary` (RFC 7578).
 * Returns 0 with *parts (malloc'd, nparts entries; free with
 * wire_parts_free) or -1 with a message in err: no opening boundary, a part
 * without its blank line, no closing boundary (a truncated body), more than
 * max_parts parts. */
int wire_multipart_parse(wire_part_t **parts, size_t *nparts, const uint8_t *body, size_t size,
                         const char *boundary, size_t max_parts, char *err, size_t errsize);
void wire_parts_free(wire_part_t *parts, size_t n);

/* The value of parameter `param` in a header value like
 * "multipart/form-data; boundary=XYZ" (quotes removed), into out; 0 or -1. */
int wire_header_param(const char *value, const char *param, char *out, size_t size);

/* One regular file of a tar archive (ustar/pax/GNU long names). */
typedef struct wire_tar_member {
    char *name;            /* malloc'd */
    const uint8_t *data;   /* borrowed from the archive */
    size_t size;
} wire_tar_member_t;

/* Lists the regular files of a tar archive held in memory (ustar, GNU
 * long names, pax path= records; other entries are skipped). -1 with a
 * message for a bad header checksum, a size past the end, or more than
 * max_members files. Free with wire_tar_free. */
int wire_tar_parse(wire_tar_member_t **members, size_t *n, const uint8_t *tar, size_t size, size_t max_members,
                   char *err, size_t errsize);
void wire_tar_free(wire_tar_member_t *m, size_t n);

/* A key or other byte string as a JSON string: valid UTF-8 as it is, each
 * byte that is not part of valid UTF-8 as U+FFFD. New reference. */
json_t *wire_json_str(const char *s);
/* A hit on a video frame (its key "FILE#t=SECONDS&f=FRAME"): sets
 * "video": {"file", "t" (seconds, a number), "frame"} in hit h; nothing for
 * an image's key. */
void wire_video(json_t *h, const char *key);
/* 1 when s (len bytes) is valid UTF-8 without NUL. */
int wire_utf8_valid(const char *s, size_t len);
/* Decodes %XX escapes of a URL path in place; -1 for a bad escape or %00. */
int wire_percent_decode(char *s);

/* ------------------------------------------------------------------ thumb.c */

/* Thumbnails: sizes N of ?thumbnail=N, the default when N is not given. */
enum { THUMB_MIN = 32, THUMB_MAX = 1024, THUMB_DEFAULT = 256, THUMB_QUALITY = 85 };

/* The thumbnail's size for a w x h image and a longest side n: the image's
 * own when its longer side is <= n (never enlarged), else the longer side n
 * and the other in proportion (rounded, at least 1). */
void thumb_size(int w, int h, int n, int *tw, int *th);
/* The area (box) average of src ((sh, sstride) u8, RGB, rows sstride bytes
 * apart, sw x sh pixels) into dst ((dh, 3 * dw) u8, caller memory): each
 * dst pixel is the mean of the source area it covers, partly covered
 * pixels weighted by the part covered, rounded half up (exact: integer
 * weights). dw <= sw and dh <= sh. 0, or -1 for bad sizes or no memory. */
int thumb_downscale(uint8_t *dst, int dw, int dh, const uint8_t *src, int sw, int sh, size_t sstride);
/* rgb ((h, 3 * w) u8) as a baseline JPEG (4:2:0, quality 1..100) into
 * *out (malloc'd, *size bytes; free()). 0, or -1 with err. */
int thumb_jpeg(uint8_t **out, size_t *size, const uint8_t *rgb, int w, int h, int quality, char *err,
               size_t errsize);

/* Encoded thumbnails by (content SHA-256, N), at most max_bytes of them
 * (0: nothing is kept); the least recently used go first. Thread-safe. */
typedef struct thumb_cache thumb_cache_t;
typedef struct thumb_stats {
    size_t max_bytes, bytes, entries;
    unsigned long hits, misses, evictions;
} thumb_stats_t;
thumb_cache_t *thumb_cache_new(size_t max_bytes);
void thumb_cache_free(thumb_cache_t *c);   /* NULL is fine */
/* 1 with a malloc'd copy in *data (free()), or 0: a miss. Counts either. */
int thumb_cache_get(thumb_cache_t *c, const uint8_t sha[32], int n, uint8_t **data, size_t *size);
/* Keeps a copy (replacing one of the same key), dropping the least
 * recently used entries to stay within max_bytes; one larger than
 * max_bytes is not kept. */
void thumb_cache_put(thumb_cache_t *c, const uint8_t sha[32], int n, const uint8_t *data, size_t size);
void thumb_cache_stats(thumb_cache_t *c, thumb_stats_t *st);

/* --------------------------------------------------------------- metrics.c */

enum { METRIC_BUCKETS = 14 };
typedef struct metric_route {
    const char *name;
    atomic_ulong by_class[6];             /* answers by status class: 1xx..5xx (index 1..5), other */
    atomic_ulong hist[METRIC_BUCKETS + 1]; /* latency histogram (cumulative when written) */
    atomic_ulong count;
    atomic_ullong sum_us;
} metric_route_t;

/* ------------------------------------------------------------------ colls.c */

typedef struct server server_t;
typedef struct batcher batcher_t;

/* One table of a served collection: its live table and its search batcher. */
typedef struct stable {
    _Atomic(patina_table_t *) t; /* replaced (once) by one without pivots when its stored pivot
                                  * table turns out damaged; the old one is kept in retired */
    patina_table_t *retired;
    int pivots;                  /* t filters through the stored pivot table (under scoll.mu) */
    batcher_t *batcher;          /* started at the first search */
    struct stable *next;
} stable_t;

typedef struct scoll {
    char *name;                 /* the URL name: the directory's last component */
    char *path;
    patina_collection_t *c;
    pthread_mutex_t mu;         /* the list of tables */
    stable_t *tables;           /* the tables requests have used, each once; never shrinks */
    pthread_mutex_t write_mu;   /* the server's writes, one at a time (a key's existence, then the commit) */
    server_t *srv;
    struct scluster *cl;        /* serve --cluster: the cluster collection's session (c is NULL) */
} scoll_t;

/* A search's answer: hits with their keys (copied under the collection's lock). */
typedef struct shit {
    uint64_t id;
    double distance;
    char *key;                  /* malloc'd */
} shit_t;

typedef struct squery {
    const void *desc;           /* the table's descriptor bytes, borrowed */
    size_t k;                   /* k-NN; 0 with range */
    int range;
    double radius;
    /* results */
    patina_status status;
    char error[1024];
    shit_t *hits;               /* malloc'd (nhits) */
    size_t nhits;
    int truncated;              /* range: more hits than max_range_hits */
    size_t rows;                /* rows searched */
} squery_t;

int colls_open(server_t *srv);
void colls_close(server_t *srv);
scoll_t *colls_find(server_t *srv, const char *name);

/* The table `spec` of sc (any spelling, or a bare family name; NULL: the
 * collection's only table with the capabilities `need`, PATINA_CAP_*), opened
 * on first use (create: a table the collection lacks opens empty, for a
 * write) with its batcher when need has PATINA_CAP_SEARCH. The library's
 * status and message when there is no such table (NOTFOUND), several
 * (INVALID), or it is not for that use (INVALID). */
patina_status colls_table(scoll_t *sc, const char *spec, unsigned need, int create, stable_t **st);
/* Runs one search through the table's batcher (k-NN) or directly (range);
 * q's results are filled. 429-worthy: PATINA_E_BUSY when the queue is full. */
patina_status colls_search(scoll_t *sc, stable_t *st, squery_t *q);
void squery_release(squery_t *q);

/* Adds (or replaces) one image under key: decodes `data` with the server's
 * limits, describes it for every table named (specs, n; none: the
 * collection's tables, or "cedd" when it has none) and commits through
 * every open table of sc (patina_tables_put). *created says whether the key
 * is new; if_absent: fail with PATINA_E_BUSY when the key exists. *id
 * receives the id. The message says what failed (decoding names the key). */
patina_status colls_add(scoll_t *sc, const char *key, const void *data, size_t size, const char *const *specs,
                        size_t nspecs, int if_absent, int *created, uint64_t *id);
/* Removes key's record; PATINA_E_NOTFOUND when absent. */
patina_status colls_remove(scoll_t *sc, const char *key, uint64_t *id);
/* Identifies one uploaded photograph against the collection's identification
 * table; res/hits sized by opts->k; keys (nhits, malloc'd strings; NULL for
 * a reference removed meanwhile); pairs[i] (malloc'd,
 * (npairs[i], 4) floats: query x, y, reference x, y) the verified inlier
 * pairs of hit i (NULL and 0 when it was not verified). The caller frees
 * keys[i] and pairs[i]. */
/* An identify request's half-size query (parameters half_query F and
 * half_query_margin M; F 0: off): patina_table_identify_half's. */
typedef struct identify_half {
    size_t features;
    double margin;
} identify_half_t;
/* With half->features > 0 the photograph halved is identified too and its
 * answer kept where patina_table_identify_half's rule says (*taken 1; the
 * pairs' query points are then mapped back onto the photograph). */
patina_status colls_identify(scoll_t *sc, const void *data, size_t size, patina_identify_opts_t *opts,
                             double far, const identify_half_t *half, patina_identify_result_t *res,
                             patina_identify_hit_t *hits, char **keys, float **pairs, size_t *npairs, int *taken);

/* A search of st's table with the server's device policy and the pivot
 * metrics (res as patina_table_search fills it); query i's first `max`
 * hits of res into q, their keys taken over (colls.c, for batch.c). */
patina_status colls_table_search(scoll_t *sc, stable_t *st, const void *queries, size_t nq, patina_table_query_t *q,
                                 patina_table_results_t *res);
patina_status colls_take_hits(squery_t *q, patina_table_results_t *res, size_t i, size_t max);

/* ----------------------------------------------------------------- batch.c */

/* A table's batcher and its thread; freed (the thread joined) by batcher_free. */
batcher_t *batcher_new(scoll_t *sc, stable_t *st);
void batcher_free(batcher_t *b);
/* Queues a k-NN search and waits for its answer; PATINA_E_BUSY when
 * --max-queue searches wait already. */
patina_status batch_submit(batcher_t *b, squery_t *q);

/* Searches waiting in batchers (the queue depth metric). */
extern atomic_long colls_queue_depth;
extern atomic_ulong colls_batches, colls_batched_queries;
extern atomic_ulong colls_pivot_pruned, colls_pivot_computed; /* rows a pivot table skipped / compared */

/* ------------------------------------------------------------------- jobs.c */

typedef struct jobs jobs_t;
/* Starts the job thread; with --jobs-file, first reads the jobs kept there
 * (-1 with the reason on stderr when the file is not a jobs file: it is
 * never overwritten then). */
int jobs_start(server_t *srv);
/* Stops the job thread: the running job stops after its current batch
 * (committed); queued jobs are cancelled, or with --jobs-file kept queued
 * (and the running one queued again if it is a folder job) for the next
 * start. */
void jobs_stop(server_t *srv);
/* Queues a folder job (path under the import dir, checked by the caller)
 * or a tar job (tar: the archive, taken over: freed by the job). 0 with
 * *id, or -1: the queue is full (429). */
int jobs_submit(server_t *srv, scoll_t *sc, const char *folder, uint8_t *tar, size_t tar_size,
                wire_tar_member_t *members, size_t nmembers, json_t *families, uint64_t *id);
/* The job as JSON (NULL: no such job); new reference. */
json_t *jobs_get(server_t *srv, uint64_t id);
json_t *jobs_list(server_t *srv);
/* Cancels a queued or running job: 0, -1 no such job, 1 already finished. */
int jobs_cancel(server_t *srv, uint64_t id);
/* Jobs by state, for /metrics: queued, running, done, failed, cancelled. */
void jobs_counts(server_t *srv, unsigned long counts[5]);

/* ----------------------------------------------------------------- server.c */

struct server {
    const serve_config_t *cfg;
    scoll_t *colls;
    size_t ncolls;
    patina_context_t *ctx;      /* searches and identification (its workers, its GPU) */
    patina_device device;       /* the tables' device policy: AUTO with a usable GPU, else CPU */
    long window_us;             /* the batching window */
    int http_threads;            /* the connection threads (resolved from --http-threads) */
    patina_limits_t limits;     /* of uploaded images */
    char token[512];
    atomic_int draining;
    atomic_long inflight;
    /* contexts of one thread each, for describing uploads in handler threads */
    pthread_mutex_t ctx_mu;
    patina_context_t **free_ctx;
    size_t nfree_ctx, cap_ctx;
    char web_dir[PATH_MAX];
    char import_dir[PATH_MAX];  /* realpath; "" when folder jobs are off */
    char (*content_dirs)[PATH_MAX]; /* (ncontent_dirs) realpaths; images whose key is a file under
                                     * one of them (or import_dir) are served by ?content=1 and
                                     * ?thumbnail=N */
    size_t ncontent_dirs;
    thumb_cache_t *thumbs;      /* encoded thumbnails (--thumbnail-cache bytes) */
    jobs_t *jobs;
    double started;
    /* open connections, for the request time limit (server.c) */
    pthread_mutex_t conns_mu;
    struct sconn *conns;
    pthread_t reaper;
    int reaper_started;
    atomic_int reaper_stop;
};

/* An open connection (libmicrohttpd's socket context): the reaper closes
 * one that has been receiving a request for longer than --request-timeout. */
typedef struct sconn {
    int fd;
    atomic_int receiving;       /* a request (line, headers, body) is arriving */
    _Atomic double ready;       /* when the connection became ready for that request */
    int cut;
    struct sconn *prev, *next;  /* under server.conns_mu */
} sconn_t;

/* The calling thread's message for the status a src/serve/ function
 * returned (the library's own is copied in by serve_lib). */
extern _Thread_local char serve_msg[1024];
patina_status serve_fail(patina_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s with "WHAT: <the library's message>" as the thread's message. */
patina_status serve_lib(patina_status s, const char *what);

/* A single-threaded context for the calling thread's extraction; give it back. */
patina_context_t *server_ctx_take(server_t *srv);
void server_ctx_give(server_t *srv, patina_context_t *ctx);
double serve_now(void);
void serve_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* --------------------------------------------------------------- handlers.c */

/* A request in flight (libmicrohttpd's per-connection request pointer). */
typedef struct req {
    server_t *srv;
    struct MHD_Connection *conn;
    const char *method;
    char *path;                 /* the URL path (percent-decoded by libmicrohttpd), copied */
    char *split;                /* another copy, cut into the route's parts */
    int route;                  /* ROUTE_* */
    const char *coll;           /* the route's collection name (in path), or NULL */
    const char *rest;           /* the route's key or job id (in path), or NULL */
    int write;                  /* the route and method need the token */
    const char *www_auth;       /* a 401's WWW-Authenticate (static text); NULL: the plain challenge */
    metric_route_t *metric;
    uint8_t *body;
    size_t len, cap, limit;
    int answered;               /* a response is queued (before or after the body) */
    int over;                   /* a chunked body passed the limit: the rest is dropped, then 413 */
    int status;
    double t0;
} req_t;

enum {
    ROUTE_OTHER = 0,
    ROUTE_HEALTHZ,
    ROUTE_READYZ,
    ROUTE_METRICS,
    ROUTE_OPENAPI,
    ROUTE_COLLECTIONS,
    ROUTE_COLLECTION,
    ROUTE_IMAGES,
    ROUTE_IMAGE,
    ROUTE_SEARCH,
    ROUTE_IDENTIFY,
    ROUTE_COLL_JOBS,
    ROUTE_JOBS,
    ROUTE_JOB,
    ROUTE_STATIC,
    ROUTE_COUNT
};
extern metric_route_t serve_metrics[ROUTE_COUNT];

/* Queues a JSON answer (steals obj) / a problem document (RFC 9457; _with:
 * the members of extra added, extra stolen). */
int reply_json(req_t *r, unsigned status, json_t *obj);
int reply_problem(req_t *r, unsigned status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int reply_problem_with(req_t *r, unsigned status, json_t *extra, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The problem for a failed colls/jobs call: serve_msg is the detail. */
int reply_status(req_t *r, patina_status s);

/* A request's parameters (handlers.c): a JSON object body, multipart
 * fields, the query string (in that order of precedence for the same name). */
typedef struct params {
    req_t *r;
    json_t *json;
    wire_part_t *parts;
    size_t nparts;
    const wire_part_t *image;   /* the uploaded image: the part "image", or the raw body */
    const uint8_t *data;        /* its bytes */
    size_t size;
} params_t;

enum { BODY_JSON = 1, BODY_IMAGE = 2, BODY_MULTIPART = 4 };

/* Reads the body as one of the kinds accepted; answers (and returns -1) on
 * a wrong type or a malformed body. */
int params_read(params_t *p, req_t *r, int accept);
void params_release(params_t *p);
/* A text parameter: a multipart field (copied into buf) or the query string; NULL when absent. */
const char *param_text(params_t *p, const char *name, char *buf, size_t size);
/* Numeric and string parameters (JSON body first): 0, or -1 after answering 400. */
int param_u64(params_t *p, const char *name, uint64_t *out, int *given);
int param_num(params_t *p, const char *name, double *out, int *given);
int param_str(params_t *p, const char *name, char *buf, size_t size, const char **out);
/* A search request's parameters (handlers.c search_params): the table
 * (family), k or range, and exactly one query source -- key, id, a JSON
 * descriptor or an image (the body) -- checked against the library's bounds
 * and the server's --max-k. Strings point into the struct or the request. */
typedef struct search_params {
    char fbuf[512], kbuf[4096];
    const char *family, *key; /* NULL when not given */
    uint64_t k, id;
    double radius;
    int kgiven, rgiven, idgiven;
    json_t *desc_json;        /* borrowed from the request's JSON body */
} search_params_t;
/* 0, or -1 after answering. */
int search_params(req_t *r, params_t *p, search_params_t *sp);
/* An identify request's k, verify, threshold or far, ratio and image into io
 * (defaults first), its half-size query into *half, checked: 0, or -1 after answering (handlers.c). *far:
 * the false-accept rate asked for, 0.01 when neither it nor a threshold was
 * (-1: a threshold), whose threshold the caller takes from the table's
 * calibration (identify_far). */
int identify_params(req_t *r, params_t *p, patina_identify_opts_t *io, double *far, identify_half_t *half);
/* The answer's "half_query" object: features, margin, taken (whether the
 * half-size query's answer is the one reported: its scores are less the
 * margin). */
json_t *identify_half_json(const identify_half_t *half, int taken);
/* io->threshold from table t's calibration for *far (its reference views
 * have their own; with the half-size query patina_identify_far_threshold_half)
 * when far >= 0: 0, or -1 after answering 400. */
int identify_far(req_t *r, const patina_table_t *t, double far, const identify_half_t *half,
                 patina_identify_opts_t *io);
/* Every "family" parameter into a new JSON array; NULL after answering 400. */
json_t *param_families(params_t *p);
/* A JSON descriptor into the table's bytes; -1 after answering. */
int read_descriptor(req_t *r, const patina_extractor_t *ex, json_t *arr, uint8_t *out);

/* ---------------------------------------------------------------- cluster.c */

/* A cluster collection served by this front end (serve --cluster): opened
 * by colls_open, its requests answered by scluster_handle. */
int scluster_open(scoll_t *sc);
void scluster_close(scoll_t *sc);
int scluster_handle(req_t *r, scoll_t *sc);
json_t *scluster_info(scoll_t *sc, int full);
/* The front ends' metrics (fan-out latency, partial answers, hedges), malloc'd text or NULL. */
char *scluster_metrics(server_t *srv);
int reply_buf(req_t *r, unsigned status, const char *ctype, const void *data, size_t size);
/* The problem status for a library status. */
unsigned status_http(patina_status s);

/* The endpoint of r's route; called once the body is in. */
int handle(req_t *r);

/* Writes the metrics text into a malloc'd buffer. */
char *metrics_text(server_t *srv, size_t *len);
void metrics_observe(metric_route_t *m, unsigned status, double seconds);

extern const unsigned char serve_openapi_json[];
extern const size_t serve_openapi_json_len;

#endif
