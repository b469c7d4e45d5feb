/* Metrics of `patina serve` in Prometheus' text format (version 0.0.4):
 * requests by route and status class, latency histograms by route, the
 * search queue and batches, jobs by state, collection sizes, the GPU's
 * memory (when one is used) and the process's resident memory. Counters are
 * atomics updated by the request threads; the text is written on demand. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "serve/internal.h"

/* Upper bounds of the latency buckets, seconds. */
static const double bucket_le[METRIC_BUCKETS] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                 0.025,  0.05,    0.1,    0.25,  0.5,   1.0,  5.0};

metric_route_t serve_metrics[ROUTE_COUNT] = {
    [ROUTE_OTHER] = {.name = "other"},           [ROUTE_HEALTHZ] = {.name = "healthz"},
    [ROUTE_READYZ] = {.name = "readyz"},         [ROUTE_METRICS] = {.name = "metrics"},
    [ROUTE_OPENAPI] = {.name = "openapi"},       [ROUTE_COLLECTIONS] = {.name = "collections"},
    [ROUTE_COLLECTION] = {.name = "collection"}, [ROUTE_IMAGES] = {.name = "images"},
    [ROUTE_IMAGE] = {.name = "image"},           [ROUTE_SEARCH] = {.name = "search"},
    [ROUTE_IDENTIFY] = {.name = "identify"},     [ROUTE_COLL_JOBS] = {.name = "collection_jobs"},
    [ROUTE_JOBS] = {.name = "jobs"},             [ROUTE_JOB] = {.name = "job"},
    [ROUTE_STATIC] = {.name = "static"},
};

void metrics_observe(metric_route_t *m, unsigned status, double seconds)
{
    int b;
    unsigned cls = status / 100;
    atomic_fetch_add(&m->by_class[cls >= 1 && cls <= 5 ? cls : 0], 1);
    for (b = 0; b < METRIC_BUCKETS && seconds > bucket_le[b]; b++) {
    }
    atomic_fetch_add(&m->hist[b], 1);
    atomic_fetch_add(&m->count, 1);
    atomic_fetch_add(&m->sum_us, (unsigned long long)(seconds * 1e6));
}

typedef struct buf {
    char *p;
    size_t len, cap;
} buf_t;

static void put(buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf_t *b, const char *fmt, ...)
{
    va_list ap;
    int n;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        {
            size_t cap = (b->cap ? 2 * b->cap : 16384) + (size_t)n;
            char *t = realloc(b->p, cap);
            if (!t) return;
            b->p = t;
            b->cap = cap;
        }
    }
}

/* A label value: backslash, double quote and newline escaped. */
static void put_label(buf_t *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"') put(b, "\\%c", *s);
        else if (*s == '\n') put(b, "\\n");
        else put(b, "%c", *s);
    }
}

char *metrics_text(server_t *srv, size_t *len)
{
    static const char *const cls[6] = {"other", "1xx", "2xx", "3xx", "4xx", "5xx"};
    static const char *const jstate[5] = {"queued", "running", "done", "failed", "cancelled"};
    buf_t b = {0};
    unsigned long jc[5];
    size_t r, i;
    long pages = 0, rss = 0;
    FILE *f;

    put(&b, "# HELP patina_http_requests_total HTTP requests answered, by route and status class.\n"
            "# TYPE patina_http_requests_total counter\n");
    for (r = 0; r < ROUTE_COUNT; r++)
        for (i = 0; i < 6; i++) {
            unsigned long v = atomic_load(&serve_metrics[r].by_class[i]);
            if (v) put(&b, "patina_http_requests_total{route=\"%s\",code=\"%s\"} %lu\n", serve_metrics[r].name, cls[i], v);
        }
    put(&b, "# HELP patina_http_request_duration_seconds Time from a request's headers to its answer.\n"
            "# TYPE patina_http_request_duration_seconds histogram\n");
    for (r = 0; r < ROUTE_COUNT; r++) {
        metric_route_t *m = &serve_metrics[r];
        unsigned long cum = 0, count = atomic_load(&m->count);
        if (!count) continue;
        for (i = 0; i < METRIC_BUCKETS; i++) {
            cum += atomic_load(&m->hist[i]);
            put(&b, "patina_http_request_duration_seconds_bucket{route=\"%s\",le=\"%g\"} %lu\n", m->name,
                bucket_le[i], cum);
        }
        cum += atomic_load(&m->hist[METRIC_BUCKETS]);
        put(&b, "patina_http_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"} %lu\n", m->name, cum);
        put(&b, "patina_http_request_duration_seconds_sum{route=\"%s\"} %.6f\n", m->name,
            (double)atomic_load(&m->sum_us) * 1e-6);
        put(&b, "patina_http_request_duration_seconds_count{route=\"%s\"} %lu\n", m->name, cum);
    }
    put(&b, "# HELP patina_http_requests_in_flight Requests being served.\n"
            "# TYPE patina_http_requests_in_flight gauge\npatina_http_requests_in_flight %ld\n",
        atomic_load(&srv->inflight));
    put(&b, "# HELP patina_search_queue_depth Searches waiting for a batch.\n"
            "# TYPE patina_search_queue_depth gauge\npatina_search_queue_depth %ld\n",
        atomic_load(&colls_queue_depth));
    put(&b, "# HELP patina_search_batches_total Batched search calls made.\n"
            "# TYPE patina_search_batches_total counter\npatina_search_batches_total %lu\n",
        atomic_load(&colls_batches));
    put(&b, "# HELP patina_search_batched_queries_total Searches answered by batched calls.\n"
            "# TYPE patina_search_batched_queries_total counter\npatina_search_batched_queries_total %lu\n",
        atomic_load(&colls_batched_queries));
    put(&b, "# HELP patina_search_pivot_rows_total Rows of signature searches through a pivot table: skipped by "
            "its bounds (pruned) or compared (computed).\n# TYPE patina_search_pivot_rows_total counter\n"
            "patina_search_pivot_rows_total{outcome=\"pruned\"} %lu\npatina_search_pivot_rows_total{outcome=\"computed\"} %lu\n",
        atomic_load(&colls_pivot_pruned), atomic_load(&colls_pivot_computed));
    {
        thumb_stats_t ts;
        thumb_cache_stats(srv->thumbs, &ts);
        put(&b, "# HELP patina_thumbnail_cache_requests_total Thumbnails asked of the cache: found (hit) or made (miss).\n"
                "# TYPE patina_thumbnail_cache_requests_total counter\n"
                "patina_thumbnail_cache_requests_total{outcome=\"hit\"} %lu\n"
                "patina_thumbnail_cache_requests_total{outcome=\"miss\"} %lu\n",
            ts.hits, ts.misses);
        put(&b, "# HELP patina_thumbnail_cache_evictions_total Thumbnails dropped to stay within --thumbnail-cache.\n"
                "# TYPE patina_thumbnail_cache_evictions_total counter\npatina_thumbnail_cache_evictions_total %lu\n",
            ts.evictions);
        put(&b, "# HELP patina_thumbnail_cache_bytes Encoded thumbnails held, and the limit (--thumbnail-cache).\n"
                "# TYPE patina_thumbnail_cache_bytes gauge\npatina_thumbnail_cache_bytes{kind=\"held\"} %zu\n"
                "patina_thumbnail_cache_bytes{kind=\"limit\"} %zu\n",
            ts.bytes, ts.max_bytes);
    }
    jobs_counts(srv, jc);
    put(&b, "# HELP patina_jobs Bulk index jobs by state (finished ones as remembered).\n# TYPE patina_jobs gauge\n");
    for (i = 0; i < 5; i++) put(&b, "patina_jobs{state=\"%s\"} %lu\n", jstate[i], jc[i]);
    put(&b, "# HELP patina_collection_records Image records per collection.\n# TYPE patina_collection_records gauge\n");
    for (r = 0; r < srv->ncolls; r++) {
        uint64_t n = 0;
        if (patina_collection_count(srv->colls[r].c, &n) != PATINA_OK) continue;
        put(&b, "patina_collection_records{collection=\"");
        put_label(&b, srv->colls[r].name);
        put(&b, "\"} %llu\n", (unsigned long long)n);
    }
    put(&b, "# HELP patina_collection_table_rows Descriptors per table.\n# TYPE patina_collection_table_rows gauge\n");
    for (r = 0; r < srv->ncolls; r++) {
        char **specs = NULL;
        size_t n = 0, t, rows, bytes;
        if (patina_collection_tables(srv->colls[r].c, &specs, &n) != PATINA_OK) continue;
        for (t = 0; t < n; t++) {
            if (patina_collection_table_info(srv->colls[r].c, specs[t], &rows, &bytes) == PATINA_OK) {
                put(&b, "patina_collection_table_rows{collection=\"");
                put_label(&b, srv->colls[r].name);
                put(&b, "\",table=\"");
                put_label(&b, specs[t]);
                put(&b, "\"} %zu\n", rows);
            }
            free(specs[t]);
        }
        free(specs);
    }
    {
        char gm[16384];
        int have = srv->device != PATINA_DEVICE_CPU && patina_context_gpu_memory(srv->ctx, gm, sizeof gm) == PATINA_OK;
        put(&b, "# HELP patina_gpu_available Whether searches may use a GPU.\n# TYPE patina_gpu_available gauge\n"
                "patina_gpu_available %d\n", have);
        if (have) {
            /* the context's plan reads "NAME: budget B MiB; D MiB device (peak P), H MiB pinned; ...", a
             * line per device when it has several (--gpus): summed */
            const char *p;
            double budget = 0, dev = 0, pinned = 0, b1, d1, p1;
            int found = 0;
            for (p = strstr(gm, ": budget "); p; p = strstr(p + 1, ": budget "))
                if (sscanf(p, ": budget %lf MiB; %lf MiB device (peak %*f), %lf MiB pinned", &b1, &d1, &p1) == 3) {
                    budget += b1;
                    dev += d1;
                    pinned += p1;
                    found = 1;
                }
            if (found)
                put(&b, "# HELP patina_gpu_memory_bytes The search context's GPU memory (every device's summed): its budget, device and pinned bytes held.\n"
                        "# TYPE patina_gpu_memory_bytes gauge\n"
                        "patina_gpu_memory_bytes{kind=\"budget\"} %.0f\npatina_gpu_memory_bytes{kind=\"device\"} %.0f\n"
                        "patina_gpu_memory_bytes{kind=\"pinned\"} %.0f\n",
                    budget * 1048576.0, dev * 1048576.0, pinned * 1048576.0);
        }
    }
    if ((f = fopen("/proc/self/statm", "r"))) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
        fclose(f);
    }
    put(&b, "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
            "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %lld\n",
        (long long)rss * (long long)sysconf(_SC_PAGESIZE));
    put(&b, "# HELP process_uptime_seconds Seconds since the server started.\n"
            "# TYPE process_uptime_seconds gauge\nprocess_uptime_seconds %.3f\n", serve_now() - srv->started);
    *len = b.len;
    return b.p;
}
