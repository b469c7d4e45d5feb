/* The cluster: partitioned collections on NATS JetStream, shard processes and
 * the front end that scatters queries to them and merges the answers.
 *
 * Part of the `patina` program, not of libpatina (libpatina never links
 * libnats). Errors follow the library's idiom: every function returns a
 * patina_status and sets a thread-local message saying what and where
 * (clu_last_error; a failed library call's message is carried into it).
 *
 * Data layout (docs/cluster.md, "Protocol"): per collection COLL the KV
 * buckets patina_COLL_meta (config, ids), patina_COLL_pNNNN (one per
 * partition: key = hex SHA-256 of the image key, value = a record,
 * clu_record_*), patina_COLL_members (shards' heartbeats, with a TTL);
 * queries by request/reply on patina.COLL.shard.NAME (clu_msg_*).
 *
 * Modules: conn.c (connection, status mapping), codec.c (records and
 * messages: pure, every length checked), rendezvous.c (assignment: pure),
 * meta.c (config, ids, buckets, writes), merge.c (the keys of merged
 * identifications), shard.c (the shard process), front.c (scatter / gather),
 * cmd.c (the CLI's entry points). */
#ifndef PATINA_CLUSTER_H
#define PATINA_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "patina/patina.h"

/* ------------------------------------------------------------- messages */

/* The last failure's message on this thread ("" when none). */
const char *clu_last_error(void);
/* Sets the message (printf) and returns s. */
patina_status clu_fail(patina_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sets the message to "<prefix>: <the library's last error>" and returns s. */
patina_status clu_fail_lib(patina_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Returns the status of expr when it is not PATINA_OK. */
#define PATINA_TRY_CLU(expr)                                                                   \
    do {                                                                                       \
        patina_status try_s_ = (expr);                                                         \
        if (try_s_ != PATINA_OK) return try_s_;                                                \
    } while (0)

/* ---------------------------------------------------------------- limits */

#define CLU_NAME_MAX 64          /* collection and shard names: [A-Za-z0-9_-]{1,64} */
#define CLU_PARTITIONS_MAX 4096  /* partitions of a collection */
#define CLU_REPLICAS_MAX 5       /* JetStream replicas of a bucket */
#define CLU_TABLES_MAX 16        /* descriptor tables of a cluster collection */
#define CLU_SPEC_MAX 400         /* bytes of a table spec */
#define CLU_MSG_MAX (64u << 20)  /* bytes of a request or reply */
#define CLU_QUERIES_MAX 65536    /* queries in one request */

/* 1 when name is [A-Za-z0-9_-]{1,CLU_NAME_MAX}. */
int clu_name_ok(const char *name);

/* ----------------------------------------------------------------- codec */

/* A growing output buffer; oom is set (and further writes ignored) when an
 * allocation fails or CLU_MSG_MAX would be passed. */
typedef struct clu_buf {
    uint8_t *p;
    size_t n, cap;
    int oom;
} clu_buf_t;

void clu_buf_release(clu_buf_t *b);
void clu_put_u8(clu_buf_t *b, uint8_t v);
void clu_put_u16(clu_buf_t *b, uint16_t v);
void clu_put_u32(clu_buf_t *b, uint32_t v);
void clu_put_u64(clu_buf_t *b, uint64_t v);
void clu_put_f64(clu_buf_t *b, double v);
void clu_put_raw(clu_buf_t *b, const void *p, size_t n);
/* u32 length (with the NUL), the bytes, a NUL. NULL writes "". */
void clu_put_str(clu_buf_t *b, const char *s);
/* u32 length, the bytes. */
void clu_put_blob(clu_buf_t *b, const void *p, size_t n);

/* A reader over borrowed bytes: every get checks the length left; the
 * first failure sets bad (what it was reading) and later gets return 0. */
typedef struct clu_rd {
    const uint8_t *p;
    size_t n, off;
    const char *bad;
} clu_rd_t;

void clu_rd_init(clu_rd_t *r, const void *p, size_t n);
uint8_t clu_get_u8(clu_rd_t *r, const char *what);
uint16_t clu_get_u16(clu_rd_t *r, const char *what);
uint32_t clu_get_u32(clu_rd_t *r, const char *what);
uint64_t clu_get_u64(clu_rd_t *r, const char *what);
double clu_get_f64(clu_rd_t *r, const char *what);
const void *clu_get_raw(clu_rd_t *r, size_t n, const char *what);
/* A string written by clu_put_str: borrowed, NUL-terminated, no inner NUL,
 * at most max bytes (NULL on failure). */
const char *clu_get_str(clu_rd_t *r, size_t max, const char *what);
/* A blob: borrowed, *n its length (at most max). */
const void *clu_get_blob(clu_rd_t *r, size_t *n, size_t max, const char *what);

/* A record: one image of a partition bucket. Layout (little-endian):
 *   "PTR1", u32 version (1), u64 id, str key, u64 size, 32 bytes sha256,
 *   i64 mtime, i32 width, i32 height, u32 ntables,
 *   ntables x (str spec, blob descriptor)
 * and nothing after. Decoded records borrow the buffer's bytes. */
#define CLU_RECORD_VERSION 1u
typedef struct clu_rtable {
    const char *spec;
    const void *desc;
    size_t bytes;
} clu_rtable_t;
typedef struct clu_record {
    uint64_t id;
    const char *key;
    uint64_t size;
    uint8_t sha256[32];
    int64_t mtime;
    int32_t width, height;
    size_t ntables;
    clu_rtable_t tables[CLU_TABLES_MAX];
} clu_record_t;

patina_status clu_record_encode(clu_buf_t *out, const clu_record_t *rec);
/* PATINA_E_CORRUPT (a short, long or malformed record) or PATINA_E_FORMAT
 * (another magic or version), naming what; never reads past n. */
patina_status clu_record_decode(clu_record_t *rec, const void *data, size_t n);
/* The table of rec with spec (NULL when it has none). */
const clu_rtable_t *clu_record_table(const clu_record_t *rec, const char *spec);

/* Messages: an 8-byte header {magic "PQ1\0" request | "PR1\0" reply, u16
 * version, u16 kind}, then the kind's fields. */
#define CLU_MSG_VERSION 5u /* 2: an identify reply carries its references (rows); 3: every reply its shard time;
                            * 4: an identify request carries guided, guided_ratio and ambiguity; 5: and accept,
                            * view_candidates, first_features and half_view_features (a build of 4 misread them) */
typedef enum clu_kind {
    CLU_KIND_SEARCH = 1,   /* k-NN or range over named partitions */
    CLU_KIND_IDENTIFY = 2, /* identification over named partitions */
    CLU_KIND_CONFIRM = 3   /* has partition p applied revision r? */
} clu_kind;

typedef struct clu_request {
    clu_kind kind;
    const char *spec;            /* SEARCH, IDENTIFY: the table (canonical spec) */
    patina_table_query_t query;  /* SEARCH: kind, k, radius, max_hits, device */
    patina_identify_opts_t iopts;/* IDENTIFY (k is the per-part k) */
    size_t nparts;
    uint32_t *parts;             /* (nparts) malloc'd by the decoder */
    size_t nq, qbytes;
    const void *queries;         /* (nq, qbytes), borrowed */
    uint32_t partition;          /* CONFIRM */
    uint64_t revision;           /* CONFIRM */
    uint32_t timeout_ms;         /* CONFIRM */
} clu_request_t;

void clu_request_release(clu_request_t *q);
patina_status clu_request_encode(clu_buf_t *out, const clu_request_t *q);
patina_status clu_request_decode(clu_request_t *q, const void *data, size_t n);

/* A reply: status and message, the partitions answered, the shard's time
 * on the request, then the kind's answer. Decoded replies own everything
 * (malloc). */
typedef struct clu_reply {
    clu_kind kind;
    patina_status status;
    char message[512];
    size_t nparts;
    uint32_t *parts;
    double shard_ms;             /* from the request's arrival at the shard to its reply's encoding (queue
                                  * wait included): what the fan-out's time spent inside the shard */
    /* SEARCH */
    patina_table_results_t res;  /* keys filled */
    /* IDENTIFY: (nq, k) hits and keys, (nq) results; rows: the references of the partitions
     * answered (the answer's coverage) */
    size_t nq, k;
    uint64_t rows;
    patina_identify_hit_t *hits;
    patina_identify_result_t *results;
    char **keys;
} clu_reply_t;

void clu_reply_release(clu_reply_t *r);
patina_status clu_reply_encode(clu_buf_t *out, const clu_reply_t *r);
patina_status clu_reply_decode(clu_reply_t *r, const void *data, size_t n);

/* ------------------------------------------------------------ rendezvous */

typedef struct clu_member_w {
    const char *name;
    double weight; /* > 0 */
} clu_member_w_t;

/* Weighted rendezvous hashing: the score of member m for partition p is
 * -w / ln(U), U in (0, 1) from the SHA-256 of "name/p"; out receives the
 * indices of the min(r, n) highest scores, best first (ties by name). Pure. */
size_t clu_rendezvous(const clu_member_w_t *m, size_t n, uint32_t p, size_t r, size_t *out);

/* The assignment the shards follow: copy k (0 = the active one) of every
 * partition 0 .. P-1 in out[p * r + k] (a member index; SIZE_MAX when there
 * are fewer members than r), rendezvous scores with bounded load -- each
 * member holds its weight's share of each rank, rounded by largest
 * remainder: with equal weights floor or ceil of P / n copies of each rank
 * and of P r / n in all; copies of a partition on distinct members. Pure
 * and deterministic in the members (any order). PATINA_E_NOMEM only. */
patina_status clu_assign(const clu_member_w_t *m, size_t n, uint32_t P, size_t r, size_t *out);

/* ----------------------------------------------------------- merge */

/* Shallow copies of answers about to be merged: a part without hits and
 * without keys gets an empty keys array (static: never released), so that
 * patina_table_results_merge carries the others' keys. */
void clu_results_keys_empty(patina_table_results_t *parts, size_t np);

/* Partial answers are merged by the library (patina_table_results_merge,
 * patina_identify_part_k, patina_identify_merge); this fills the keys of a
 * merged identification (hits (nq, k), results (nq)) from its parts'
 * (part_hits[p] and part_keys[p] (nq, part_k), part_keys[p] may be NULL):
 * keys (nq, k) receives malloc'd copies, NULL past nhits or when no part
 * names the hit. */
patina_status clu_identify_keys(const patina_identify_hit_t *const *part_hits,
                                const patina_identify_result_t *const *part_results, char *const *const *part_keys,
                                size_t np, size_t nq, size_t part_k, const patina_identify_hit_t *hits,
                                const patina_identify_result_t *results, size_t k, char **keys);

/* ------------------------------------------------------------ connection */

typedef struct clu_conn clu_conn_t;

/* How long a process waits at its start for JetStream to answer about the
 * collection's buckets (clu_collection_config, the members and meta
 * buckets a shard or a writer opens, `patina cluster status`): after the
 * NATS servers restart, JetStream recovers its streams and elects their
 * leaders, and until then its requests time out or find no responder.
 * Such failures are retried with a backoff (100 ms doubling to 2 s) for at
 * most this long; a bucket that does not exist fails at once. */
#define CLU_START_WAIT_MS 60000

/* A member entry lives this long after its last put (the members bucket's
 * TTL). A shard whose heartbeats have not been acknowledged for nearly this
 * long (CLU_MEMBER_LEASE_MS) stops answering and withdraws its partitions:
 * its entry may be gone, and a writer that does not see it confirms with
 * the other copies only. */
#define CLU_MEMBERS_TTL_MS 5000
#define CLU_MEMBER_LEASE_MS 4000

/* Connects to a comma-separated list of nats:// URLs (reconnecting for
 * ever) and opens a JetStream context. */
patina_status clu_connect(clu_conn_t **c, const char *urls);
void clu_disconnect(clu_conn_t *c); /* accepts NULL */

/* ------------------------------------------------------------ collection */

typedef struct clu_config {
    char name[CLU_NAME_MAX + 1];
    uint32_t partitions;
    int replicas;
    size_t ntables;
    char tables[CLU_TABLES_MAX][CLU_SPEC_MAX + 1]; /* canonical specs */
} clu_config_t;

/* Creates the buckets of collection cfg->name (partitions, replicas, tables
 * set; specs canonicalised in place). PATINA_E_INVALID when it exists with
 * another configuration; the same configuration again is PATINA_OK. */
patina_status clu_collection_create(clu_conn_t *c, clu_config_t *cfg);
/* Reads the configuration; PATINA_E_NOTFOUND for a collection never created.
 * JetStream not answering is retried for CLU_START_WAIT_MS. */
patina_status clu_collection_config(clu_conn_t *c, const char *name, clu_config_t *cfg);

/* The bucket name of partition p / the meta / the members bucket. */
void clu_bucket_partition(char *buf, size_t size, const char *coll, uint32_t p);
void clu_bucket_meta(char *buf, size_t size, const char *coll);
void clu_bucket_members(char *buf, size_t size, const char *coll);
/* The KV key of an image key: lowercase hex SHA-256 (65 bytes with NUL). */
void clu_kv_key(char out[65], const char *key);

/* A writer of one collection: ids allocated in blocks from the meta
 * bucket's counter (CAS), records put into the partitions' buckets, each
 * write confirmed by the partition's copies (clu_front_confirm) before the
 * call returns. Thread-safe: the threads of a server share one. */
typedef struct clu_writer clu_writer_t;
typedef struct clu_front clu_front_t;

/* front may be NULL: writes are then acknowledged at the bucket's quorum
 * only (no ready copy asked). */
patina_status clu_writer_new(clu_writer_t **w, clu_conn_t *c, const clu_config_t *cfg, clu_front_t *front);
void clu_writer_free(clu_writer_t *w);

/* Puts image `item` with the descriptors of the tables specs[0 .. nt)
 * (descs[t]: each table's bytes). An existing key keeps its id; with the
 * same content its other tables stay, with other content they go. *id
 * (may be NULL) receives the id. */
patina_status clu_writer_put(clu_writer_t *w, const patina_insert_t *item, const char *const *specs,
                             const void *const *descs, const size_t *bytes, size_t nt, uint64_t *id);
/* clu_writer_put, and: if_absent: PATINA_E_BUSY when the key exists (nothing
 * written); *created (may be NULL): 1 when the key was new. */
patina_status clu_writer_put_ex(clu_writer_t *w, const patina_insert_t *item, const char *const *specs,
                                const void *const *descs, const size_t *bytes, size_t nt, int if_absent,
                                int *created, uint64_t *id);
/* The record of key as stored (*data malloc'd, *n bytes: clu_record_decode
 * reads it; *rev (may be NULL) its revision). PATINA_E_NOTFOUND when absent. */
patina_status clu_writer_get(clu_writer_t *w, const char *key, void **data, size_t *n, uint64_t *rev);
/* The same read for any holder of a connection and the collection's config
 * (a front end reading references for the sibling check). */
patina_status clu_record_get(clu_conn_t *c, const clu_config_t *cfg, const char *key, void **data, size_t *n,
                             uint64_t *rev);
/* Deletes the image of key (PATINA_E_NOTFOUND when absent). */
patina_status clu_writer_delete(clu_writer_t *w, const char *key);

/* ---------------------------------------------------------------- ingest */

/* Indexing into a cluster collection (ingest.c): items decoded, extracted
 * with the collection's tables on a context's device, written through a
 * writer. What `patina index --cluster` does locally and what the workers
 * of bulk indexing do with the items they take. */
#define CLU_INGEST_MAX 256 /* items in one clu_ingest_run */

typedef struct clu_ingest_opts {
    const char *family;      /* NULL or "": every table of the collection; a spec: that table; a family
                              * name alone: the tables of that family (borrowed during clu_ingest_new) */
    patina_device device;    /* where descriptors are computed (AUTO) */
    int strict;              /* decoder warnings fail the file */
    int apply_orientation;   /* JPEGs turned by their EXIF orientation */
    uint64_t batch_memory;   /* patina_index_opts_t's (0: its default) */
    patina_jpeg_decoder decoder; /* the indexing pipeline's choice (AUTO: the exact GPU decoder on a GPU run) */
} clu_ingest_opts_t;

typedef struct clu_ingest clu_ingest_t;

/* One image to index: a file (path) or its bytes (data, size; path NULL). */
typedef struct clu_ingest_item {
    const char *name;   /* for messages (the path as given) */
    const char *path;   /* the file to read; NULL: data */
    const void *data;   /* (size) the file's content when path is NULL; borrowed */
    size_t size;
    const char *key;    /* the image key */
    int64_t mtime;      /* data items: the file's modification time */
} clu_ingest_item_t;

typedef struct clu_ingest_result {
    patina_status status;                /* PATINA_OK: written (id set) */
    int retry;                           /* the failure is not the file's (the store or the device
                                          * failed): another try may succeed */
    char error[PATINA_ERROR_MAX];        /* when not OK: the message, naming the file */
    char warning[PATINA_WARNING_MAX];    /* a decoder warning ("" when none); the file is written */
    uint64_t id;
} clu_ingest_result_t;

void clu_ingest_opts_init(clu_ingest_opts_t *o);
/* ctx and w are borrowed (w writes to cfg's collection); PATINA_E_INVALID
 * when o->family names no table of the collection. */
patina_status clu_ingest_new(clu_ingest_t **g, patina_context_t *ctx, clu_writer_t *w, const clu_config_t *cfg,
                             const clu_ingest_opts_t *o);
void clu_ingest_free(clu_ingest_t *g); /* accepts NULL */
/* The tables written (borrowed canonical specs into specs[CLU_TABLES_MAX], may be NULL); their count. */
size_t clu_ingest_tables(const clu_ingest_t *g, const char **specs);
/* Indexes items[0 .. n) (n <= CLU_INGEST_MAX), one result each. Returns
 * PATINA_OK when every item was tried (each result says how it fared), or
 * the status of a failure that stopped the run (the device; the items not
 * done then have retry set). Calls on one context must not overlap. */
patina_status clu_ingest_run(clu_ingest_t *g, const clu_ingest_item_t *items, size_t n, clu_ingest_result_t *res);

/* ------------------------------------------------------------------ work */

/* Bulk indexing (work.c; docs/cluster.md, "Bulk indexing"): one message
 * per file on the work-queue stream, pulled by the workers through one
 * durable consumer; each file's result on patina.COLL.job.JOBID. */
typedef struct clu_work_names {
    char stream[128];        /* patina_COLL_work: WorkQueue retention */
    char subject[128];       /* patina.COLL.work */
    char consumer[128];      /* patina_COLL_workers: durable pull consumer */
    char jobs[128];          /* patina_COLL_jobs: the results, kept a day */
    char jobs_subjects[128]; /* patina.COLL.job.> */
    char advisory[320];      /* JetStream's advisory of an item delivered MaxDeliver times */
} clu_work_names_t;

void clu_work_names(clu_work_names_t *n, const char *coll);
void clu_work_job_subject(char *buf, size_t size, const char *coll, const char *job);

/* Makes the work and jobs streams and the workers' consumer when missing
 * (replicas as the collection's buckets). ack_wait_ms > 0 sets the
 * consumer's AckWait (made with it, or updated); 0 keeps it (30 s when
 * made). *ack_wait_out (may be NULL) receives the AckWait in force. */
patina_status clu_work_setup(clu_conn_t *c, const clu_config_t *cfg, int64_t ack_wait_ms, int64_t *ack_wait_out);

/* Messages: header {"PW1\0", u16 version, u16 kind}, then the kind's fields. */
#define CLU_WORK_VERSION 1u
#define CLU_WORK_ITEM 1u
#define CLU_WORK_RESULT 2u

/* A work item: str job, u64 index, str key, str path, u8 has_data, blob
 * data, u64 mtime, str family, u8 strict, u8 orientation. Decoded items
 * borrow the message's bytes. */
typedef struct clu_work_item {
    const char *job;         /* [A-Za-z0-9_-]{1,64} */
    uint64_t index;          /* the file's number in the job */
    const char *key;         /* the image key */
    const char *path;        /* relative to a worker's --root (no "..", not absolute); "" with data */
    int has_data;            /* 1: data holds the file's bytes (--send-bytes) */
    const void *data;
    size_t size;
    int64_t mtime;           /* of the file, when has_data */
    const char *family;      /* "" every table of the collection, else -f's value */
    int strict, apply_orientation;
} clu_work_item_t;

/* A file's result: str job, u64 index, u32 status, str message, str
 * warning, u64 id, u32 delivered (the item's deliveries, this one
 * included), str worker. */
typedef struct clu_work_result {
    const char *job;
    uint64_t index;
    patina_status status;
    const char *message, *warning;
    uint64_t id;
    uint32_t delivered;
    const char *worker;
} clu_work_result_t;

/* 1 when p is a relative path that stays below the root (not empty, not
 * absolute, no ".." component). */
int clu_work_path_ok(const char *p);
patina_status clu_work_item_encode(clu_buf_t *b, const clu_work_item_t *it);
/* PATINA_E_CORRUPT / PATINA_E_FORMAT naming what; never reads past n. */
patina_status clu_work_item_decode(clu_work_item_t *it, const void *data, size_t n);
patina_status clu_work_result_encode(clu_buf_t *b, const clu_work_result_t *r);
patina_status clu_work_result_decode(clu_work_result_t *r, const void *data, size_t n);

typedef struct clu_worker_opts {
    const char *name;        /* in the results (NULL: HOST-PID) */
    const char *root;        /* path items are read below it (default ".") */
    patina_device device;    /* where descriptors are computed (AUTO) */
    const char *gpus;        /* the context's device list (NULL: one) */
    int threads;             /* CPU workers (0: all) */
    uint64_t max_pixels;     /* 0: the library's default */
    int batch;               /* items taken at a time (8) */
} clu_worker_opts_t;

void clu_worker_opts_init(clu_worker_opts_t *o);
/* Takes work items of collection coll until *stop becomes non-zero (the
 * items of the batch in hand are finished first). Messages go to stderr. */
patina_status clu_worker_run(const char *urls, const char *coll, const clu_worker_opts_t *o, volatile int *stop);

/* clu_worker_run on a thread of its own (patina shard); stop finishes the
 * batch in hand and joins it. */
typedef struct clu_work clu_work_t;
patina_status clu_work_start(clu_work_t **w, const char *urls, const char *coll, const clu_worker_opts_t *o);
void clu_work_stop(clu_work_t *w); /* accepts NULL */

/* --------------------------------------------------------------- members */

typedef struct clu_member {
    char name[CLU_NAME_MAX + 1];
    double capacity;
    int copies;
    char device[16];
    char subject[256];
    int64_t started;
    uint64_t bytes, gpu_mem;
    int leaving;       /* stopping: answers what it holds until other copies are ready; left out of
                        * the assignment */
    uint8_t *ready;    /* (partitions) 1 = ready */
    uint8_t *hosted;   /* (partitions) 1 = loaded or loading */
    uint64_t *lag;     /* (partitions) revisions behind */
} clu_member_t;

/* Reads every live member of collection cfg (those whose entry has not
 * expired). *m malloc'd, release with clu_members_free. */
patina_status clu_members_read(clu_conn_t *c, const clu_config_t *cfg, clu_member_t **m, size_t *n);
void clu_members_free(clu_member_t *m, size_t n);

/* ------------------------------------------------------------------ front */

typedef struct clu_front_opts {
    int deadline_ms;     /* a shard's request fails after this (default 5000); its partitions go to their next copy */
    int hedge_ms;        /* a request not answered after this is hedged: its partitions are also sent to their
                          * next ready copy, the first answer wins (< 0, the default: deadline_ms / 5) */
    int allow_partial;   /* 1 (default): partial answers; 0: PATINA_E_UNAVAILABLE */
} clu_front_opts_t;

void clu_front_opts_init(clu_front_opts_t *o);
patina_status clu_front_new(clu_front_t **f, clu_conn_t *c, const clu_config_t *cfg, const clu_front_opts_t *o);
void clu_front_free(clu_front_t *f);

/* What an answer covered. */
typedef struct clu_coverage {
    uint32_t partitions, partitions_total;
    uint64_t references;  /* rows of the table searched in the partitions answered */
    int partial;
    double fanout_ms;     /* the scatter/gather's wall time */
    double wait_ms;       /* the slowest accepted request's round trip (sent to its reply received) */
    double shard_ms;      /* that request's time inside its shard (clu_reply_t.shard_ms): wait_ms - shard_ms
                           * is the transport (NATS, both ends' decoding); fanout_ms - wait_ms the front end's
                           * own planning, encoding and merging */
    char failure[512];    /* partial: why (the last shard failure, or the partitions no shard holds ready) */
} clu_coverage_t;

/* Batches: a request holds as many queries as fit the connection's max
 * payload (the NATS server's max_payload); a larger batch goes as several
 * requests of consecutive queries, scattered at once, their answers
 * stitched back in order (coverage: the fewest partitions and references
 * of any request, partial when any is; fanout_ms: the whole call's). A
 * shard refuses a reply over the max payload (PATINA_E_LIMIT): the request
 * is then split in two and asked again. One query whose request or reply
 * does not fit: PATINA_E_LIMIT naming the sizes.
 *
 * k-NN / range of nq descriptors of table spec over every partition;
 * res as patina_table_search (keys filled). */
patina_status clu_front_search(clu_front_t *f, const char *spec, const void *queries, size_t nq, size_t qbytes,
                               const patina_table_query_t *q, patina_table_results_t *res, clu_coverage_t *cov);
/* Identification: hits (nq, opts->k), results (nq), keys (nq, opts->k,
 * malloc'd, may be NULL). On partial coverage a query's decision is never
 * UNKNOWN: clu_front_identify sets *incomplete (nq, may be NULL) to 1 for it. */
patina_status clu_front_identify(clu_front_t *f, const char *spec, const void *queries, size_t nq,
                                 size_t qbytes, const patina_identify_opts_t *opts, patina_identify_hit_t *hits,
                                 patina_identify_result_t *results, char **keys, int *incomplete,
                                 clu_coverage_t *cov);
/* clu_front_identify with the half-size query (patina_table_identify_half's
 * rule): the queries with opts, their half-size queries (half_queries, from
 * patina_table_identify_extract_half) with patina_identify_half_opts(opts,
 * half_features), each merged over the partitions, then
 * patina_identify_fuse_half with margin; keys follow their hits; taken (nq,
 * may be NULL) as patina_table_identify_half's; incomplete where either
 * answer was; cov the lesser coverage of the two calls (fanout_ms their
 * sum). The calibrated default threshold is
 * patina_identify_far_threshold_half's. */
patina_status clu_front_identify_half(clu_front_t *f, const char *spec, const void *queries,
                                      const void *half_queries, size_t nq, size_t qbytes, size_t half_features,
                                      double margin, const patina_identify_opts_t *opts,
                                      patina_identify_hit_t *hits, patina_identify_result_t *results, char **keys,
                                      int *incomplete, unsigned char *taken, clu_coverage_t *cov);
/* After a write of revision rev to partition p: asks every copy that hosts
 * p to confirm it (a ready copy answers once it applied it, or withdraws
 * its readiness; a copy still loading notes rev and turns ready only once
 * it applied it), then reads the members again and asks any copy not asked
 * yet, until none is new or deadline_ms has passed. */
patina_status clu_front_confirm(clu_front_t *f, uint32_t p, uint64_t rev);

/* Counters of a front since clu_front_new. */
typedef struct clu_front_stats {
    unsigned long long scatters;  /* queries batches scattered */
    unsigned long long calls;     /* requests sent to shards (hedges and retries included) */
    unsigned long long hedges;    /* requests hedged (their partitions sent to another copy while outstanding) */
    unsigned long long retries;   /* partitions asked again after a failed request */
    unsigned long long failures;  /* requests failed (gone, error, deadline) */
    unsigned long long partial;   /* answers with partitions missing */
    unsigned long long split;     /* batches sent as several requests (over the connection's max payload) */
} clu_front_stats_t;
void clu_front_stats(clu_front_t *f, clu_front_stats_t *st);

/* ---------------------------------------------------------------- session */

/* What a front end holds: a connection, the collection's configuration and
 * a front (clu_front_*) over them. */
typedef struct clu_session clu_session_t;

patina_status clu_session_open(clu_session_t **s, const char *urls, const char *coll, const clu_front_opts_t *o);
void clu_session_close(clu_session_t *s); /* accepts NULL */
clu_conn_t *clu_session_conn(clu_session_t *s);
clu_front_t *clu_session_front(clu_session_t *s);
const clu_config_t *clu_session_config(clu_session_t *s);
/* A detached, empty table of the collection's table `spec` for describing
 * queries (the rows are the shards'): spec NULL picks the only table with
 * the capabilities need (identification tables only when need asks for
 * them), a family name alone its only table of that family, as
 * patina_table_open does. PATINA_E_NOTFOUND / PATINA_E_INVALID as it. */
patina_status clu_session_table(clu_session_t *s, patina_context_t *ctx, const char *spec, unsigned need,
                                patina_table_t **t);

/* ------------------------------------------------------------------ shard */

typedef struct clu_shard_opts {
    const char *name;      /* NULL: host-pid */
    double capacity;       /* weight; 0 (the default): references the GPU memory holds (its
                            * budget over the tables' GPU bytes per reference, rootsift tables
                            * by patina_identify_capacity), 1 without a GPU */
    int copies;            /* R (2) */
    patina_device device;  /* where searches run (AUTO): CPU answers every request on the CPU, whatever
                            * device it asks, and builds no GPU mirrors; AUTO, GPU: the request's device */
    const char *gpus;      /* the context's device list (patina_context_opts_t.gpus; NULL: one) */
    uint64_t gpu_mem;      /* each device's memory budget (0: the library's default); past it
                            * the tables' caches stream from pinned host memory */
    int metrics_port;      /* 0: none */
    int threads;           /* CPU workers (0: all) */
    int workers;           /* requests answered at once (0: 8); more wait in a bounded queue */
    int load_parallel;     /* partitions whose initial load runs at once (0: 4) */
    uint64_t synthetic;    /* > 0: benchmarks: partitions filled with this many synthetic
                            * references in all (clu_synth_*) instead of their buckets */
    uint64_t synthetic_seed;
    int work;              /* 1: also a worker of bulk indexing (clu_work_start; its own context) */
    clu_worker_opts_t work_opts; /* its options (name, device: the shard's) */
    int drain_timeout_s;   /* on stop: seconds at most to wait, announced as leaving, for every partition
                            * it holds to have a ready copy on another shard (60; 0: leave at once) */
    int test_stall_reassign_s; /* tests only: once every partition assigned to it is ready, the
                            * reassignment loop stalls this long, once (0: never); the heartbeat,
                            * on its own thread, goes on */
} clu_shard_opts_t;

void clu_shard_opts_init(clu_shard_opts_t *o);

/* Synthetic references (benchmarks; synth.c): partition p of `partitions`
 * holds clu_synth_count(n, p, partitions) references, reference j with id
 * 1 + p + j * partitions, key clu_synth_key and descriptor clu_synth_desc
 * (pool, ..., j): a pure function of (seed, p, table index, j). pool is
 * clu_synth_pool's: for an identification table a malloc'd pool of
 * CLU_SYNTH_POOL records (record j is pool[j % CLU_SYNTH_POOL]), for any
 * other table NULL (each row drawn on its own, into row, `bytes` long). */
#define CLU_SYNTH_POOL 256
uint64_t clu_synth_count(uint64_t n, uint32_t p, uint32_t partitions);
void clu_synth_key(char *buf, size_t size, uint64_t seed, uint32_t p, uint64_t j);
patina_status clu_synth_pool(unsigned char **pool, const patina_table_t *t, uint64_t seed, uint32_t p, size_t table);
const unsigned char *clu_synth_desc(const unsigned char *pool, unsigned char *row, size_t bytes, uint64_t seed,
                                    uint32_t p, size_t table, uint64_t j);
/* Runs a shard of collection coll until *stop becomes non-zero (a signal
 * handler sets it): joins, loads and follows its partitions, answers
 * queries. On stop it hands over: its member entry says "leaving" (the
 * others' assignment leaves it out, so they take its partitions) while it
 * keeps following and answering them, until every partition it holds has a
 * ready copy on another member or drain_timeout_s has passed; then it
 * withdraws from membership and finishes the requests in flight. Messages
 * go to stderr. */
patina_status clu_shard_run(const char *urls, const char *coll, const clu_shard_opts_t *o,
                            volatile int *stop);

#endif
