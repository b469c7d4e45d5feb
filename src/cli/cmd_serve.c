/* patina serve: the HTTP API over one or more collections (src/serve/,
 * docs/serve.md). This file holds the option table and turns the parsed
 * options into a serve_config_t; the server itself is in src/serve/. */
#include <string.h>

#include "cli/cli.h"
#include "serve/serve.h"

static int run_serve(const cli_args_t *a);

static const cli_opt_t opts[] = {
    {.name = "listen", .type = CLI_TEXT, .arg = "HOST:PORT", .def = "127.0.0.1:8080",
     .help = "address to listen on ([::1]:8080 for IPv6; port 0 picks a free port, printed at start). "
             "An address beyond loopback needs --token-file"},
    {.name = "device", .type = CLI_CHOICE, .arg = "D", .choices = "auto|cpu|gpu", .def = "auto",
     .help = "where searches and identification run (auto: the GPU when one is usable)"},
    {.name = "gpu", .type = CLI_INT, .arg = "N", .min = 0, .max = 64, .def = "0", .help = "CUDA device ordinal"},
    CLI_OPT_GPUS,
    {.name = "token-file", .type = CLI_TEXT, .arg = "FILE",
     .help = "file whose first line is the bearer token that writes need; without it a random "
             "token is made and printed on stderr at start"},
    {.name = "web", .type = CLI_TEXT, .arg = "DIR",
     .help = "static files served at / (the web UI); default: the installed share/patina/web, "
             "else the source tree's web/"},
    {.name = "import-dir", .type = CLI_TEXT, .arg = "DIR",
     .help = "bulk index jobs may name server-side folders under DIR (without it, only tar "
             "uploads)"},
    {.name = "content-dir", .type = CLI_TEXT, .arg = "DIR", .flags = CLI_REPEAT,
     .help = "GET .../images/KEY?content=1 serves a stored image whose key is a file under DIR "
             "(or under --import-dir) while its size and SHA-256 are the record's, and "
             "?thumbnail=N a JPEG of it downscaled to N pixels on its longer side (the web UI's "
             "tiles); the store itself keeps no pixels. Give it once per folder: a file "
             "under any of them is served"},
    {.name = "thumbnail-cache", .type = CLI_BYTES, .arg = "BYTES", .min = 0, .max = 1099511627776.0, .def = "64M",
     .help = "encoded thumbnails kept in memory (least recently used dropped first; 0: none kept)"},
    {.name = "create", .type = CLI_FLAG,
     .help = "a COLLECTION path that holds no collection gets a new, empty one (without it, "
             "such a path is an error: a misspelt path does not start an empty server)"},
    {.name = "tls-cert", .type = CLI_TEXT, .arg = "FILE",
     .help = "serve HTTPS (TLS 1.2 and 1.3) with this PEM certificate, or chain, and --tls-key"},
    {.name = "tls-key", .type = CLI_TEXT, .arg = "FILE",
     .help = "the certificate's private key, PEM, not encrypted (keep the file readable by the "
             "server's user only)"},
    {.name = "jobs-file", .type = CLI_TEXT, .arg = "FILE",
     .help = "keep the bulk index jobs in FILE (rewritten atomically at each change): a restart "
             "shows the jobs it had, resumes its unfinished folder jobs (files already indexed "
             "are skipped) and ends its unfinished tar jobs as failed (archives are not kept); "
             "without it jobs live in memory"},
    {.name = "http-threads", .type = CLI_INT, .arg = "N", .min = 1, .max = 1024, .flags = CLI_AUTO, .def = "auto",
     .help = "threads serving connections; a search holds its thread until its batch answers, so "
             "they bound a batch (auto: 64 on the GPU, one per CPU and at least 8 on the CPU)"},
    CLI_OPT_JOBS,
    {.name = "job-threads", .type = CLI_INT, .arg = "N", .min = 1, .max = 1024,
     .help = "CPU threads of bulk index jobs; all CPUs when not given"},
    {.name = "max-body", .type = CLI_BYTES, .arg = "BYTES", .min = 1024, .max = 1099511627776.0, .def = "64M",
     .help = "largest request body (an image upload, a JSON query); larger ones get 413"},
    {.name = "max-tar", .type = CLI_BYTES, .arg = "BYTES", .min = 1024, .max = 1099511627776.0, .def = "1G",
     .help = "largest tar upload of a bulk index job (held in memory while it runs)"},
    CLI_OPT_MAX_PIXELS,
    {.name = "max-k", .type = CLI_INT, .arg = "K", .min = 1, .max = PATINA_K_MAX, .def = "1000",
     .help = "largest k of a search or an identification"},
    {.name = "max-range-hits", .type = CLI_INT, .arg = "N", .min = 1, .max = 10000000, .def = "10000",
     .help = "a range search returns at most the N nearest hits (and says it was cut)"},
    {.name = "timeout", .type = CLI_INT, .arg = "SECONDS", .min = 1, .max = 86400, .def = "30",
     .help = "a connection idle this long is closed (slow clients)"},
    {.name = "max-connections", .type = CLI_INT, .arg = "N", .min = 1, .max = 100000, .def = "512",
     .help = "open connections at once; more are refused"},
    {.name = "max-per-ip", .type = CLI_INT, .arg = "N", .min = 1, .max = 100000, .def = "64",
     .help = "open connections from one client address at once; more are refused at accept"},
    {.name = "request-timeout", .type = CLI_INT, .arg = "SECONDS", .min = 1, .max = 86400, .def = "60",
     .help = "a request must arrive whole (request line, headers, body) within this many seconds "
             "of its connection being ready for it; a slower one gets its connection closed "
             "(a client trickling bytes under --timeout is cut off)"},
    {.name = "max-jobs", .type = CLI_INT, .arg = "N", .min = 1, .max = 100000, .def = "16",
     .help = "bulk index jobs waiting to run; more get 429"},
    {.name = "max-queue", .type = CLI_INT, .arg = "N", .min = 1, .max = 10000000, .def = "4096",
     .help = "searches waiting for a batch; more get 429"},
    {.name = "batch-window", .type = CLI_INT, .arg = "US", .min = 0, .max = 1000000, .flags = CLI_AUTO,
     .def = "auto",
     .help = "microseconds a search batch waits for more concurrent searches of the same table "
             "(auto: 1000 on the GPU, 0 on the CPU, where searches that arrive while a batch "
             "runs form the next one)"},
    {.name = "batch-max", .type = CLI_INT, .arg = "N", .min = 1, .max = 65536, .def = "256",
     .help = "searches per batch at most"},
    {.name = "drain", .type = CLI_INT, .arg = "SECONDS", .min = 0, .max = 3600, .def = "10",
     .help = "on SIGTERM, how long requests in flight may still take"},
    {.name = "quiet", .letter = 'q', .type = CLI_FLAG, .help = "no log line per request"},
};

const cli_command_t cli_cmd_serve = {
    .name = "serve",
    .summary = "serve collections over HTTP (search, identify, add, delete, bulk jobs)",
    .operands = "COLLECTION...",
    .min_operands = 1,
    .max_operands = -1,
    .about = "Serves the collections (each named by its directory's last component) over\n"
             "HTTP/1.1 with a JSON API: /v1/collections, images, search, identify, bulk\n"
             "index jobs, /healthz, /readyz, /metrics, /openapi.json (docs/serve.md).\n"
             "Writes need 'Authorization: Bearer TOKEN'. SIGTERM or SIGINT drains the\n"
             "requests in flight, stops the jobs after their current batch and exits 0.\n",
    .opts = opts,
    .nopts = sizeof opts / sizeof opts[0],
    .notes = "Everything a write answered with 2xx is committed: a crash or kill -9 loses\n"
             "none of it. The first line on stderr says where the server listens.\n",
    .run = run_serve,
};

#if !PATINA_HAVE_SERVE
int serve_run(const serve_config_t *cfg)
{
    (void)cfg;
    cli_error("serve", "this patina was built without the HTTP server (libmicrohttpd and Jansson were not "
                       "found): install libmicrohttpd-dev and libjansson-dev (scripts/bootstrap.sh) and rebuild");
    return EXIT_ERROR;
}
#endif

static int run_serve(const cli_args_t *a)
{
    serve_config_t c;
    const cli_value_t *bw = cli_get(a, "batch-window");
    memset(&c, 0, sizeof c);
    c.collections = a->operands;
    c.ncollections = a->noperands;
    c.listen = cli_get(a, "listen")->text;
    c.device = cli_get(a, "device")->text;
    c.gpu = (int)cli_get(a, "gpu")->i;
    c.gpus = cli_get(a, "gpus")->set ? cli_get(a, "gpus")->text : NULL;
    c.token_file = cli_get(a, "token-file")->set ? cli_get(a, "token-file")->text : NULL;
    c.web_dir = cli_get(a, "web")->set ? cli_get(a, "web")->text : NULL;
    c.import_dir = cli_get(a, "import-dir")->set ? cli_get(a, "import-dir")->text : NULL;
    c.content_dirs = cli_get(a, "content-dir")->all;
    c.ncontent_dirs = cli_get(a, "content-dir")->count;
    c.create = (int)cli_get(a, "create")->i;
    c.jobs_file = cli_get(a, "jobs-file")->set ? cli_get(a, "jobs-file")->text : NULL;
    c.tls_cert = cli_get(a, "tls-cert")->set ? cli_get(a, "tls-cert")->text : NULL;
    c.tls_key = cli_get(a, "tls-key")->set ? cli_get(a, "tls-key")->text : NULL;
    c.request_timeout_s = (unsigned)cli_get(a, "request-timeout")->i;
    c.max_per_ip = (unsigned)cli_get(a, "max-per-ip")->i;
    c.http_threads = cli_get(a, "http-threads")->is_auto ? 0 : (int)cli_get(a, "http-threads")->i;
    c.workers = cli_get(a, "jobs")->set ? (int)cli_get(a, "jobs")->i : 0;
    c.job_threads = cli_get(a, "job-threads")->set ? (int)cli_get(a, "job-threads")->i : 0;
    c.max_body = cli_get(a, "max-body")->bytes;
    c.max_tar = cli_get(a, "max-tar")->bytes;
    c.max_pixels = (uint64_t)cli_get(a, "max-pixels")->i;
    c.thumbnail_cache = cli_get(a, "thumbnail-cache")->bytes;
    c.max_k = (size_t)cli_get(a, "max-k")->i;
    c.max_range_hits = (size_t)cli_get(a, "max-range-hits")->i;
    c.timeout_s = (unsigned)cli_get(a, "timeout")->i;
    c.max_connections = (unsigned)cli_get(a, "max-connections")->i;
    c.max_jobs = (size_t)cli_get(a, "max-jobs")->i;
    c.max_queue = (size_t)cli_get(a, "max-queue")->i;
    c.batch_window_us = bw->is_auto ? -1 : (long)bw->i;
    c.batch_max = (size_t)cli_get(a, "batch-max")->i;
    c.drain_s = (unsigned)cli_get(a, "drain")->i;
    c.quiet = (int)cli_get(a, "quiet")->i;
    return serve_run(&c);
}
