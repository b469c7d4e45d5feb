/* serve_run and the request life cycle of `patina serve` (see internal.h).
 *
 * Start: settings checked, the token read or made, the collections opened,
 * the listening socket bound (its address printed: the first line on
 * stderr), libmicrohttpd started with a thread pool, then the main thread
 * waits for SIGTERM or SIGINT (blocked in every thread, taken by sigwait).
 *
 * A request: on its headers (the handler's first call) it is routed, and
 * refused at once when the server is draining (503), a write lacks the token
 * (401), the declared body is over the limit (413, before a byte of it is
 * read, so no 100 Continue is sent) or the body is encoded (415); then the
 * body is collected up to the limit, then the endpoint runs (handlers.c).
 *
 * Stop: /readyz and new requests answer 503, the listening socket closes,
 * requests in flight get --drain seconds, then libmicrohttpd stops, the
 * running job stops after its current batch (committed), the collections
 * close, exit 0. Every write is committed before its 2xx, so a kill -9
 * loses nothing that was answered. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "serve/internal.h"

_Thread_local char serve_msg[1024];

patina_status serve_fail(patina_status s, const char *fmt, ...)
{
    va_list ap;
    char tmp[sizeof serve_msg];
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap); /* fmt's arguments may be serve_msg itself */
    va_end(ap);
    memcpy(serve_msg, tmp, sizeof tmp);
    return s;
}

patina_status serve_lib(patina_status s, const char *what)
{
    const char *m = patina_last_error();
    return serve_fail(s, "%s: %s", what, *m ? m : patina_status_str(s));
}

double serve_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void serve_log(const char *fmt, ...)
{
    va_list ap;
    char line[2048];
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "patina serve: %s\n", line);
}

patina_context_t *server_ctx_take(server_t *srv)
{
    patina_context_t *ctx = NULL;
    pthread_mutex_lock(&srv->ctx_mu);
    if (srv->nfree_ctx) ctx = srv->free_ctx[--srv->nfree_ctx];
    pthread_mutex_unlock(&srv->ctx_mu);
    if (!ctx) {
        patina_context_opts_t o;
        patina_context_opts_init(&o);
        o.threads = 1; /* no workers: the request's own thread */
        o.limits = srv->limits;
        if (patina_context_new(&ctx, &o) != PATINA_OK) ctx = NULL;
    }
    return ctx;
}

void server_ctx_give(server_t *srv, patina_context_t *ctx)
{
    if (!ctx) return;
    pthread_mutex_lock(&srv->ctx_mu);
    if (srv->nfree_ctx == srv->cap_ctx) {
        size_t cap = srv->cap_ctx ? 2 * srv->cap_ctx : 16;
        patina_context_t **t = realloc(srv->free_ctx, cap * sizeof *t);
        if (!t) {
            pthread_mutex_unlock(&srv->ctx_mu);
            patina_context_free(ctx);
            return;
        }
        srv->free_ctx = t;
        srv->cap_ctx = cap;
    }
    srv->free_ctx[srv->nfree_ctx++] = ctx;
    pthread_mutex_unlock(&srv->ctx_mu);
}

/* ---------------------------------------------------------------- routing */

/* Splits r->path into a route; r->coll and r->rest point into it. */
static void route(req_t *r)
{
    char *p = r->split;
    const char *m = r->method;
    r->route = ROUTE_OTHER;
    if (!strcmp(p, "/healthz")) r->route = ROUTE_HEALTHZ;
    else if (!strcmp(p, "/readyz")) r->route = ROUTE_READYZ;
    else if (!strcmp(p, "/metrics")) r->route = ROUTE_METRICS;
    else if (!strcmp(p, "/openapi.json")) r->route = ROUTE_OPENAPI;
    else if (!strcmp(p, "/v1/collections") || !strcmp(p, "/v1/collections/")) r->route = ROUTE_COLLECTIONS;
    else if (!strncmp(p, "/v1/collections/", 16)) {
        char *c = p + 16, *slash = strchr(c, '/');
        r->coll = c;
        if (!slash) {
            r->route = ROUTE_COLLECTION;
        } else {
            *slash = '\0';
            slash++;
            if (!strcmp(slash, "images") || !strcmp(slash, "images/")) r->route = ROUTE_IMAGES;
            else if (!strncmp(slash, "images/", 7)) {
                r->route = ROUTE_IMAGE;
                r->rest = slash + 7;
            } else if (!strcmp(slash, "search")) r->route = ROUTE_SEARCH;
            else if (!strcmp(slash, "identify")) r->route = ROUTE_IDENTIFY;
            else if (!strcmp(slash, "jobs")) r->route = ROUTE_COLL_JOBS;
        }
    } else if (!strcmp(p, "/v1/jobs")) r->route = ROUTE_JOBS;
    else if (!strncmp(p, "/v1/jobs/", 9)) {
        r->route = ROUTE_JOB;
        r->rest = p + 9;
    } else if (strncmp(p, "/v1/", 4) && strcmp(p, "/v1")) r->route = ROUTE_STATIC;
    r->metric = &serve_metrics[r->route];
    r->write = (r->route == ROUTE_IMAGES && !strcmp(m, "POST")) ||
               (r->route == ROUTE_IMAGE && (!strcmp(m, "PUT") || !strcmp(m, "DELETE"))) ||
               (r->route == ROUTE_COLL_JOBS && !strcmp(m, "POST")) || (r->route == ROUTE_JOB && !strcmp(m, "DELETE"));
}

/* The Authorization header against the server's token: TOKEN_OK, TOKEN_MISSING
 * (no header, another scheme than Bearer, or an empty token: RFC 6750 §3.1
 * treats these as no authentication) or TOKEN_WRONG. Both sides are hashed
 * (SHA-256) and the digests compared without an early exit, so the time
 * taken says nothing about the token, its length included. */
enum { TOKEN_OK, TOKEN_MISSING, TOKEN_WRONG };

static int token_check(const server_t *srv, const char *auth)
{
    uint8_t want[32], got[32];
    unsigned char d = 0;
    size_t i;
    if (!auth || strncasecmp(auth, "Bearer", 6) || (auth[6] != ' ' && auth[6] != '\0')) return TOKEN_MISSING;
    auth += 6;
    while (*auth == ' ') auth++;
    if (!*auth) return TOKEN_MISSING;
    patina_sha256(want, srv->token, strlen(srv->token));
    patina_sha256(got, auth, strlen(auth));
    for (i = 0; i < sizeof want; i++) d |= (unsigned char)(want[i] ^ got[i]);
    return d == 0 ? TOKEN_OK : TOKEN_WRONG;
}

/* ------------------------------------------------- request time limit */

static sconn_t *sconn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* The connection's request is in (or answered): the time limit stops. */
static void request_arrived(struct MHD_Connection *conn)
{
    sconn_t *c = sconn_of(conn);
    if (c) atomic_store(&c->receiving, 0);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    server_t *srv = cls;
    sconn_t *c = *socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!ci || !(c = calloc(1, sizeof *c))) return; /* not watched: only --timeout applies */
        c->fd = ci->connect_fd;
        atomic_store(&c->ready, serve_now());
        atomic_store(&c->receiving, 1);
        pthread_mutex_lock(&srv->conns_mu);
        c->next = srv->conns;
        if (srv->conns) srv->conns->prev = c;
        srv->conns = c;
        pthread_mutex_unlock(&srv->conns_mu);
        *socket_context = c;
    } else if (c) {
        /* libmicrohttpd closes the socket after this call returns: the
         * reaper, holding the mutex, never shuts down a reused descriptor */
        pthread_mutex_lock(&srv->conns_mu);
        if (c->prev) c->prev->next = c->next;
        else srv->conns = c->next;
        if (c->next) c->next->prev = c->prev;
        pthread_mutex_unlock(&srv->conns_mu);
        free(c);
        *socket_context = NULL;
    }
}

/* Every 100 ms: shuts down the sockets of connections whose request has
 * been arriving for longer than --request-timeout (libmicrohttpd then sees
 * the connection end and closes it in its own thread). */
static void *reaper_main(void *arg)
{
    server_t *srv = arg;
    while (!atomic_load(&srv->reaper_stop)) {
        double now = serve_now(), limit = (double)srv->cfg->request_timeout_s;
        sconn_t *c;
        pthread_mutex_lock(&srv->conns_mu);
        for (c = srv->conns; c; c = c->next)
            if (!c->cut && atomic_load(&c->receiving) && now - atomic_load(&c->ready) > limit) {
                c->cut = 1;
                shutdown(c->fd, SHUT_RDWR);
                serve_log("a request took longer than %u s to arrive (--request-timeout): connection closed",
                          srv->cfg->request_timeout_s);
            }
        pthread_mutex_unlock(&srv->conns_mu);
        usleep(100000);
    }
    return NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls)
{
    server_t *srv = cls;
    req_t *r = *con_cls;
    (void)version;
    if (!r) {
        const char *cl, *enc;
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        *con_cls = r;
        atomic_fetch_add(&srv->inflight, 1);
        r->srv = srv;
        r->conn = conn;
        r->method = method;
        r->t0 = serve_now();
        r->path = strdup(url);
        r->split = strdup(url);
        if (!r->path || !r->split) return MHD_NO;
        route(r);
        r->limit = r->route == ROUTE_COLL_JOBS ? srv->cfg->max_tar : srv->cfg->max_body;
        if (atomic_load(&srv->draining)) {
            reply_problem(r, 503, "the server is shutting down");
            return MHD_YES;
        }
        if (r->write) {
            int t = token_check(srv, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization"));
            if (t == TOKEN_MISSING) {
                reply_problem(r, 401, "%s needs a token: send 'Authorization: Bearer TOKEN' (the token patina "
                                      "serve printed at start, or the one in its --token-file)",
                              method);
                return MHD_YES;
            }
            if (t == TOKEN_WRONG) {
                r->www_auth = "Bearer realm=\"patina\", error=\"invalid_token\", "
                              "error_description=\"the bearer token is not valid\"";
                reply_problem(r, 401, "the bearer token is not valid: %s needs the token patina serve printed at "
                                      "start, or the one in its --token-file",
                              method);
                return MHD_YES;
            }
        }
        cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl) {
            char *end;
            unsigned long long v;
            errno = 0;
            v = strtoull(cl, &end, 10);
            if (errno || end == cl || *end) {
                reply_problem(r, 400, "bad Content-Length '%.40s'", cl);
                return MHD_YES;
            }
            if (v > r->limit) {
                reply_problem(r, 413, "the body's %llu bytes exceed this server's limit of %llu bytes (%s)", v,
                              (unsigned long long)r->limit, r->route == ROUTE_COLL_JOBS ? "--max-tar" : "--max-body");
                return MHD_YES;
            }
            if (v) {
                r->body = malloc((size_t)v + 1);
                if (!r->body) {
                    reply_problem(r, 503, "out of memory for a body of %llu bytes", v);
                    return MHD_YES;
                }
                r->cap = (size_t)v + 1;
            }
        }
        enc = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Encoding");
        if (enc && strcasecmp(enc, "identity")) {
            reply_problem(r, 415, "Content-Encoding '%.40s' is not accepted: send bodies unencoded", enc);
            return MHD_YES;
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!r->answered && !r->over) {
            if (*upload_size > r->limit - r->len) {
                /* a chunked body past the limit (a declared one is refused up
                 * front): libmicrohttpd takes a response only once the body
                 * is in, so the rest is read and dropped and the 413 follows
                 * it; --request-timeout bounds how long that may take */
                r->over = 1;
                free(r->body);
                r->body = NULL;
                r->len = r->cap = 0;
                *upload_size = 0;
                return MHD_YES;
            }
            if (r->len + *upload_size + 1 > r->cap) {
                size_t cap = r->cap ? r->cap : 65536;
                uint8_t *t;
                while (cap < r->len + *upload_size + 1) cap *= 2;
                if (!(t = realloc(r->body, cap))) return MHD_NO;
                r->body = t;
                r->cap = cap;
            }
            memcpy(r->body + r->len, upload_data, *upload_size);
            r->len += *upload_size;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    request_arrived(conn);
    if (r->answered) return MHD_YES;
    if (r->over)
        return reply_problem(r, 413, "the chunked body exceeds this server's limit of %llu bytes (%s)",
                             (unsigned long long)r->limit, r->route == ROUTE_COLL_JOBS ? "--max-tar" : "--max-body");
    if (r->body) r->body[r->len] = '\0';
    handle(r);
    if (!r->answered) reply_problem(r, 500, "the endpoint gave no answer");
    return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    server_t *srv = cls;
    req_t *r = *con_cls;
    double dt;
    if (!r) return;
    {
        sconn_t *c = sconn_of(conn);
        if (c) { /* a kept-alive connection is ready for its next request */
            atomic_store(&c->ready, serve_now());
            atomic_store(&c->receiving, 1);
        }
    }
    dt = serve_now() - r->t0;
    metrics_observe(r->metric, r->answered ? (unsigned)r->status : 0, dt);
    if (!srv->cfg->quiet)
        fprintf(stderr, "patina serve: %s %s %d %.3f ms%s\n", r->method, r->path ? r->path : "?", r->status, dt * 1e3,
                toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection ended early)");
    free(r->path);
    free(r->split);
    free(r->body);
    free(r);
    *con_cls = NULL;
    atomic_fetch_sub(&srv->inflight, 1);
}

/* ------------------------------------------------------------------ start */

/* "host:port" or "[v6]:port" into host and port; 0 or -1. */
static int split_listen(const char *s, char *host, size_t hsize, char *port, size_t psize)
{
    const char *colon;
    size_t hl;
    if (*s == '[') {
        const char *e = strchr(s, ']');
        if (!e || e[1] != ':') return -1;
        hl = (size_t)(e - s - 1);
        if (hl == 0 || hl >= hsize) return -1;
        memcpy(host, s + 1, hl);
        colon = e + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon || strchr(s, ':') != colon) return -1;
        hl = (size_t)(colon - s);
        if (hl == 0 || hl >= hsize) return -1;
        memcpy(host, s, hl);
    }
    host[hl] = '\0';
    if (!colon[1] || strlen(colon + 1) >= psize || strspn(colon + 1, "0123456789") != strlen(colon + 1)) return -1;
    strcpy(port, colon + 1);
    return atoi(port) <= 65535 ? 0 : -1;
}

static int is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a)) return 1;
        if (IN6_IS_ADDR_V4MAPPED(a)) return a->s6_addr[12] == 127;
    }
    return 0;
}

/* Binds and listens; fills where ("http://host:port", or https with
 * TLS). -1 (message printed) or the socket. */
static int open_listener(const serve_config_t *cfg, char *where, size_t wsize, int *loopback)
{
    const char *scheme = cfg->tls_cert ? "https" : "http";
    char host[256], port[16], addr[INET6_ADDRSTRLEN];
    struct addrinfo hints, *ai = NULL, *p;
    int fd = -1, rc, one = 1;
    if (split_listen(cfg->listen, host, sizeof host, port, sizeof port) != 0) {
        fprintf(stderr, "patina serve: --listen '%s': expected HOST:PORT or [IPV6]:PORT\n", cfg->listen);
        return -2;
    }
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    if ((rc = getaddrinfo(host, port, &hints, &ai)) != 0) {
        fprintf(stderr, "patina serve: --listen '%s': %s\n", cfg->listen, gai_strerror(rc));
        return -2;
    }
    for (p = ai; p; p = p->ai_next) {
        if (!is_loopback(p->ai_addr) && !cfg->token_file) {
            fprintf(stderr, "patina serve: --listen '%s' reaches beyond this machine: give --token-file FILE "
                            "(a random token is made only for loopback addresses)\n",
                    cfg->listen);
            freeaddrinfo(ai);
            return -2;
        }
    }
    for (p = ai; p && fd < 0; p = p->ai_next) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        fd = socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
        if (fd < 0) continue;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, p->ai_addr, p->ai_addrlen) != 0 || listen(fd, 1024) != 0 ||
            getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
            fprintf(stderr, "patina serve: cannot listen on %s: %s\n", cfg->listen, strerror(errno));
            close(fd);
            fd = -1;
            continue;
        }
        *loopback = is_loopback((struct sockaddr *)&ss);
        if (ss.ss_family == AF_INET6) {
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, addr, sizeof addr);
            snprintf(where, wsize, "%s://[%s]:%u", scheme, addr, ntohs(((struct sockaddr_in6 *)&ss)->sin6_port));
        } else {
            inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, addr, sizeof addr);
            snprintf(where, wsize, "%s://%s:%u", scheme, addr, ntohs(((struct sockaddr_in *)&ss)->sin_port));
        }
    }
    freeaddrinfo(ai);
    return fd;
}

/* A PEM file (--tls-cert, --tls-key) read whole into a malloc'd string;
 * NULL with a message on stderr. */
static char *read_pem(const char *option, const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long size;
    if (!f || fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fprintf(stderr, "patina serve: %s %s: %s\n", option, path, strerror(errno));
        if (f) fclose(f);
        return NULL;
    }
    if (size == 0 || size > (1 << 20) || !(buf = malloc((size_t)size + 1)) ||
        fread(buf, 1, (size_t)size, f) != (size_t)size) {
        fprintf(stderr, "patina serve: %s %s: %s\n", option, path,
                size == 0 ? "empty" : size > (1 << 20) ? "over 1 MiB: not a PEM file" : "cannot read it");
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    buf[size] = '\0';
    if (!strstr(buf, "-----BEGIN ")) {
        fprintf(stderr, "patina serve: %s %s: not a PEM file (no -----BEGIN line)\n", option, path);
        free(buf);
        return NULL;
    }
    if (strstr(buf, "ENCRYPTED")) {
        fprintf(stderr, "patina serve: %s %s: an encrypted key; give it unencrypted (openssl pkey -in KEY -out KEY2)\n",
                option, path);
        free(buf);
        return NULL;
    }
    return buf;
}

static int read_token(server_t *srv, const char *path)
{
    FILE *f = fopen(path, "r");
    size_t n;
    if (!f) {
        fprintf(stderr, "patina serve: --token-file %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (!fgets(srv->token, sizeof srv->token, f)) srv->token[0] = '\0';
    fclose(f);
    n = strcspn(srv->token, "\r\n");
    srv->token[n] = '\0';
    if (n < 16 || strspn(srv->token, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/=") != n) {
        fprintf(stderr, "patina serve: --token-file %s: the first line must be a token of 16 to %zu characters "
                        "(letters, digits, -._~+/=)\n",
                path, sizeof srv->token - 2);
        return -1;
    }
    return 0;
}

static int make_token(server_t *srv)
{
    unsigned char b[24];
    size_t i;
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        fprintf(stderr, "patina serve: no random bytes for a token: %s\n", strerror(errno));
        return -1;
    }
    for (i = 0; i < sizeof b; i++) snprintf(srv->token + 2 * i, 3, "%02x", b[i]);
    return 0;
}

static void pick_web_dir(server_t *srv)
{
    struct stat st;
    if (srv->cfg->web_dir) snprintf(srv->web_dir, sizeof srv->web_dir, "%s", srv->cfg->web_dir);
    else if (stat(PATINA_WEB_DIR_INSTALLED, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(srv->web_dir, sizeof srv->web_dir, "%s", PATINA_WEB_DIR_INSTALLED);
    else snprintf(srv->web_dir, sizeof srv->web_dir, "%s", PATINA_WEB_DIR_SOURCE);
}

/* The --content-dir folders, each resolved (realpath) once: 0, or -1 after
 * saying which one is missing. */
static int content_dirs(server_t *srv)
{
    const serve_config_t *cfg = srv->cfg;
    size_t i;
    if (!cfg->ncontent_dirs) return 0;
    if (!(srv->content_dirs = calloc(cfg->ncontent_dirs, sizeof *srv->content_dirs))) {
        fprintf(stderr, "patina serve: out of memory\n");
        return -1;
    }
    for (i = 0; i < cfg->ncontent_dirs; i++)
        if (!realpath(cfg->content_dirs[i], srv->content_dirs[i])) {
            fprintf(stderr, "patina serve: --content-dir %s: %s\n", cfg->content_dirs[i], strerror(errno));
            free(srv->content_dirs);
            srv->content_dirs = NULL;
            return -1;
        }
    srv->ncontent_dirs = cfg->ncontent_dirs;
    return 0;
}

int serve_run(const serve_config_t *cfg)
{
    server_t srv;
    patina_context_opts_t copts;
    patina_device got = PATINA_DEVICE_CPU;
    struct MHD_Daemon *d = NULL;
    sigset_t set;
    char where[512], *cert = NULL, *key = NULL;
    struct MHD_OptionItem tls[4];
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    int fd, loopback = 1, sig = 0, rc = 0;
    patina_status s;
    double t;
    size_t i;

    memset(&srv, 0, sizeof srv);
    srv.cfg = cfg;
    srv.started = serve_now();
    pthread_mutex_init(&srv.ctx_mu, NULL);
    pthread_mutex_init(&srv.conns_mu, NULL);
    patina_limits_init(&srv.limits);
    srv.limits.max_pixels = cfg->max_pixels;
    srv.limits.max_file_bytes = cfg->max_body > cfg->max_tar ? cfg->max_body : cfg->max_tar;
    if (patina_device_parse(&srv.device, cfg->device) != PATINA_OK || srv.device == PATINA_DEVICE_HYBRID) {
        fprintf(stderr, "patina serve: --device %s: expected auto, cpu or gpu\n", cfg->device);
        return 2;
    }
    if (cfg->token_file ? read_token(&srv, cfg->token_file) : make_token(&srv)) return 2;
    if (cfg->import_dir && !realpath(cfg->import_dir, srv.import_dir)) {
        fprintf(stderr, "patina serve: --import-dir %s: %s\n", cfg->import_dir, strerror(errno));
        return 2;
    }
    pick_web_dir(&srv);
    /* HTTPS: the certificate and key held for the daemon's life; TLS 1.2 and 1.3 only */
    memset(tls, 0, sizeof tls);
    tls[0].option = MHD_OPTION_END;
    if (!cfg->tls_cert != !cfg->tls_key) {
        fprintf(stderr, "patina serve: HTTPS needs both --tls-cert and --tls-key\n");
        return 2;
    }
    if (cfg->tls_cert) {
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
            fprintf(stderr, "patina serve: --tls-cert: this libmicrohttpd was built without TLS\n");
            return 2;
        }
        if (!(cert = read_pem("--tls-cert", cfg->tls_cert)) || !(key = read_pem("--tls-key", cfg->tls_key))) {
            free(cert);
            return 2;
        }
        flags |= MHD_USE_TLS;
        tls[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, cert};
        tls[1] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, key};
        tls[2] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0,
                                         (void *)"NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"};
        tls[3].option = MHD_OPTION_END;
    }

    if (content_dirs(&srv) != 0) {
        free(cert);
        free(key);
        return 2;
    }

    /* SIGTERM and SIGINT go to sigwait below; no thread dies of SIGPIPE */
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    fd = open_listener(cfg, where, sizeof where, &loopback);
    if (fd < 0) {
        free(cert);
        free(key);
        free(srv.content_dirs);
        return fd == -2 ? 2 : 3;
    }
    patina_context_opts_init(&copts);
    copts.threads = cfg->workers;
    copts.gpu_index = cfg->gpu;
    copts.gpus = cfg->gpus;
    copts.limits = srv.limits;
    if ((s = patina_context_new(&srv.ctx, &copts)) != PATINA_OK) {
        fprintf(stderr, "patina serve: %s%s\n", s == PATINA_E_INVALID && cfg->gpus ? "--gpus: " : "",
                patina_last_error());
        free(srv.content_dirs);
        close(fd);
        return s == PATINA_E_INVALID ? 2 : 3;
    }
    if (srv.device != PATINA_DEVICE_CPU) { /* a usable GPU: the context opens it */
        char plan[512];
        if (patina_context_gpu_memory(srv.ctx, plan, sizeof plan) == PATINA_OK) {
            got = PATINA_DEVICE_GPU;
        } else if (srv.device == PATINA_DEVICE_GPU) {
            fprintf(stderr, "patina serve: --device %s: %s\n", cfg->device, patina_last_error());
            rc = 3;
            goto out;
        } else {
            patina_clear_error();
        }
    }
    /* the tables' device policy: AUTO (each call where the library finds it worth it) with a GPU */
    srv.device = got == PATINA_DEVICE_GPU ? PATINA_DEVICE_AUTO : PATINA_DEVICE_CPU;
    srv.window_us = cfg->batch_window_us >= 0 ? cfg->batch_window_us : got == PATINA_DEVICE_GPU ? 1000 : 0;
    /* auto: on the GPU enough connection threads to fill batches (each waits for its batch), on
     * the CPU one per CPU (at least 8) */
    srv.http_threads = cfg->http_threads > 0 ? cfg->http_threads
                       : got == PATINA_DEVICE_GPU ? 64
                       : patina_cpu_count() > 8 ? patina_cpu_count() : 8;
    if (!(srv.thumbs = thumb_cache_new((size_t)cfg->thumbnail_cache))) {
        fprintf(stderr, "patina serve: out of memory for the thumbnail cache\n");
        rc = 3;
        goto out;
    }
    if (colls_open(&srv) != 0 || jobs_start(&srv) != 0) {
        rc = 3;
        goto out;
    }
    d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, &srv,
                         MHD_OPTION_ARRAY, tls,
                         MHD_OPTION_LISTEN_SOCKET, fd,
                         MHD_OPTION_THREAD_POOL_SIZE, (unsigned)srv.http_threads,
                         MHD_OPTION_CONNECTION_LIMIT, cfg->max_connections,
                         MHD_OPTION_PER_IP_CONNECTION_LIMIT, cfg->max_per_ip,
                         MHD_OPTION_NOTIFY_CONNECTION, on_connection, &srv,
                         MHD_OPTION_CONNECTION_TIMEOUT, cfg->timeout_s,
                         MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)65536,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, &srv,
                         MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "patina serve: cannot start the HTTP server on %s%s\n", where,
                cert ? " (is --tls-cert a PEM certificate and --tls-key its private key?)" : "");
        rc = 3;
        goto out;
    }
    if (pthread_create(&srv.reaper, NULL, reaper_main, &srv) == 0) srv.reaper_started = 1;
    else serve_log("no request-time watcher thread: only --timeout applies");
    fprintf(stderr, "patina serve: listening on %s\n", where);
    if (!loopback && !cert)
        fprintf(stderr, "patina serve: plain HTTP beyond loopback: the token and the images cross the network "
                        "in clear (--tls-cert and --tls-key, or a TLS proxy in front)\n");
    for (i = 0; i < srv.ncolls; i++)
        fprintf(stderr, "patina serve: collection '%s' (%s) at %s/v1/collections/%s\n", srv.colls[i].name,
                srv.colls[i].path, where, srv.colls[i].name);
    if (!cfg->token_file) fprintf(stderr, "patina serve: write token (Authorization: Bearer ...): %s\n", srv.token);
    fprintf(stderr, "patina serve: searches on %s, batching window %ld us, %d connection threads; web UI from %s\n",
            patina_device_name(got), srv.window_us, srv.http_threads, srv.web_dir);
    fflush(stderr);

    while (sigwait(&set, &sig) != 0) {
    }
    serve_log("%s: draining (up to %u s), then exiting", sig == SIGTERM ? "SIGTERM" : "SIGINT", cfg->drain_s);
    atomic_store(&srv.draining, 1);
    {
        MHD_socket lfd = MHD_quiesce_daemon(d);
        if (lfd != MHD_INVALID_SOCKET) close(lfd);
    }
    for (t = serve_now(); atomic_load(&srv.inflight) > 0 && serve_now() - t < cfg->drain_s;) usleep(10000);
    if (atomic_load(&srv.inflight) > 0) serve_log("%ld requests still in flight are cut off", atomic_load(&srv.inflight));
out:
    if (srv.reaper_started) {
        atomic_store(&srv.reaper_stop, 1);
        pthread_join(srv.reaper, NULL);
    }
    if (d) MHD_stop_daemon(d);
    else if (fd >= 0 && rc) close(fd);
    jobs_stop(&srv);
    colls_close(&srv);
    while (srv.nfree_ctx) patina_context_free(srv.free_ctx[--srv.nfree_ctx]);
    free(srv.free_ctx);
    patina_context_free(srv.ctx);
    thumb_cache_free(srv.thumbs);
    free(cert);
    free(key);
    free(srv.content_dirs);
    pthread_mutex_destroy(&srv.ctx_mu);
    pthread_mutex_destroy(&srv.conns_mu);
    if (!rc) serve_log("stopped");
    return rc;
}
