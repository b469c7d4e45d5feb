/* `patina serve`: the HTTP front end over the library (docs/serve.md).
 *
 * This header is what the CLI sees of the server: the settings `patina serve`
 * parses from its option table (src/cli/cmd_serve.c) and the one call that
 * runs the server until SIGTERM or SIGINT. The server is part of the `patina`
 * program, not of libpatina: it may log to stderr. Built only when
 * libmicrohttpd and Jansson were found (PATINA_HAVE_SERVE); otherwise
 * serve_run says so and returns 3. */
#ifndef PATINA_SERVE_H
#define PATINA_SERVE_H

#include <stddef.h>
#include <stdint.h>

typedef struct serve_config {
    const char *const *collections; /* (ncollections) collection directories, borrowed */
    size_t ncollections;
    const char *listen;         /* "HOST:PORT" or "[V6]:PORT"; port 0 = any free port */
    const char *device;         /* "auto", "cpu" or "gpu": where searches and identification run */
    int gpu;                    /* CUDA device ordinal */
    const char *gpus;           /* the devices ("all", "0,1"; patina_context_opts_t.gpus); NULL: gpu */
    const char *token_file;     /* bearer token for writes; NULL: a random one, printed */
    const char *web_dir;        /* static files served at /; NULL: the built-in default */
    const char *import_dir;     /* folder jobs must name a folder under it; NULL: folder jobs off */
    const char *const *content_dirs; /* (ncontent_dirs) stored images whose key is a file under one of
                                      * them are served (?content=1, ?thumbnail=N); borrowed */
    size_t ncontent_dirs;
    int create;                 /* a collection path that holds none gets an empty collection;
                                 * 0: such a path fails the start (exit 3) */
    const char *tls_cert;       /* PEM certificate (chain) and its unencrypted PEM key: HTTPS */
    const char *tls_key;        /* (both or neither; NULL: plain HTTP) */
    const char *jobs_file;      /* bulk jobs kept here across restarts (unfinished folder jobs
                                 * resume); NULL: jobs live in memory only */
    unsigned request_timeout_s; /* a request must arrive whole (headers and body) within this */
    unsigned max_per_ip;        /* open connections per client address at most */
    int http_threads;           /* libmicrohttpd's thread pool (0: auto) */
    int workers;                /* CPU threads of the search context (0: all CPUs) */
    int job_threads;            /* CPU threads of the bulk index jobs (0: all CPUs) */
    uint64_t max_body;          /* bytes of a request body (uploads, JSON) */
    uint64_t max_tar;           /* bytes of a tar upload (bulk job) */
    uint64_t max_pixels;        /* pixels an uploaded image (or a thumbnail's file) may declare */
    uint64_t thumbnail_cache;   /* bytes of encoded thumbnails kept in memory (0: none) */
    size_t max_k;               /* k of a k-NN search or identification */
    size_t max_range_hits;      /* hits a range search returns at most */
    unsigned timeout_s;         /* a connection idle this long is closed (slow clients) */
    unsigned max_connections;   /* open connections at once; more are refused */
    size_t max_jobs;            /* bulk jobs queued (not yet running); more get 429 */
    size_t max_queue;           /* searches waiting for a batch; more get 429 */
    long batch_window_us;       /* how long a batch waits for more searches; -1: auto */
    size_t batch_max;           /* searches per batch at most */
    unsigned drain_s;           /* on SIGTERM, how long requests in flight may take */
    int quiet;                  /* no per-request log lines */
} serve_config_t;

/* Runs the server; returns the process's exit status (0 after a graceful
 * shutdown, 2 for a bad setting, 3 when it cannot start). */
int serve_run(const serve_config_t *cfg);

#endif
