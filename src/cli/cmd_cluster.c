/* patina cluster and patina shard: a collection partitioned over shard
 * processes on NATS JetStream (src/cluster; docs/cluster.md). Built when
 * libnats is found (PATINA_CLUSTER); otherwise these commands say so. */
#include "cli/cli.h"
#if PATINA_HAVE_CLUSTER
#include "cluster/cmd.h"
#endif

#define CLI_OPT_CLUSTER(req)                                                                      \
    {.name = "cluster", .type = CLI_TEXT, .arg = "URL[,URL...]",                                  \
     .help = "the NATS servers (nats://HOST:PORT, comma-separated)" req}

static int run_cluster(const cli_args_t *a);
static int run_shard(const cli_args_t *a);

static const cli_opt_t cluster_opts[] = {
    CLI_OPT_CLUSTER(" (required)"),
    {.name = "partitions", .type = CLI_INT, .arg = "P", .min = 1, .max = 4096, .def = "64",
     .help = "create: partitions of the collection, fixed at creation"},
    {.name = "replicas", .type = CLI_INT, .arg = "R", .min = 1, .max = 5,
     .help = "create: JetStream replicas of every bucket (default: 3 when the NATS cluster has 3 "
             "servers or more, else 1)"},
    {.name = "family", .letter = 'f', .type = CLI_TEXT, .arg = "SPEC", .flags = CLI_REPEAT,
     .help = "create: a descriptor table of the collection (repeat for several; default cedd)"},
    {.name = "json", .type = CLI_FLAG, .help = "status: one JSON object"},
};

const cli_command_t cli_cmd_cluster = {
    .name = "cluster",
    .summary = "create a cluster collection or show its shards and partitions",
    .operands = "create|status COLLECTION",
    .min_operands = 2,
    .max_operands = 2,
    .about = "create: makes the JetStream buckets of COLLECTION ([A-Za-z0-9_-]+): its\n"
             "configuration, one KV bucket per partition (the store of record) and the\n"
             "members bucket. Creating it again with the same configuration does nothing.\n"
             "status: the live shards, the partitions with their copies (ready or not, lag),\n"
             "bytes and GPU memory.\n",
    .opts = cluster_opts,
    .nopts = sizeof cluster_opts / sizeof cluster_opts[0],
    .notes = "docs/cluster.md describes the cluster and its protocol.\n",
    .run = run_cluster,
};

static const cli_opt_t shard_opts[] = {
    CLI_OPT_CLUSTER(" (required)"),
    {.name = "name", .type = CLI_TEXT, .arg = "NAME",
     .help = "the shard's name in the cluster, [A-Za-z0-9_-]+ (default: HOST-PID)"},
    {.name = "capacity", .type = CLI_NUMBER, .arg = "W", .min = 0, .max = 1e12, .flags = CLI_OPEN_MIN,
     .help = "weight in the assignment: partitions in proportion to it (default: the references its GPU "
             "memory holds; 1 on the CPU)"},
    {.name = "copies", .type = CLI_INT, .arg = "R", .min = 1, .max = 5, .def = "2",
     .help = "copies of each partition across the shards (one active, the others standby)"},
    {.name = "device", .type = CLI_CHOICE, .arg = "D", .choices = "auto|cpu|gpu", .def = "auto",
     .help = "where searches and identification run (the same answers)"},
    {.name = "gpus", .type = CLI_TEXT, .arg = "all|LIST",
     .help = "GPUs of this process: all, or device ordinals (0,1; 0,0 = two slices on one GPU); its tables "
             "split their rows over them"},
    {.name = "gpu-mem", .type = CLI_BYTES, .arg = "BYTES", .min = 1 << 20, .max = 1e15,
     .help = "GPU memory budget of each device (default: a quarter of its free memory); partitions past it "
             "are streamed from pinned host memory"},
    {.name = "metrics-port", .type = CLI_INT, .arg = "N", .min = 1, .max = 65535,
     .help = "serve Prometheus metrics on http://0.0.0.0:N/metrics"},
    {.name = "workers", .type = CLI_INT, .arg = "N", .min = 1, .max = 256, .def = "8",
     .help = "requests answered at once (the others wait in a bounded queue)"},
    {.name = "synthetic", .type = CLI_TEXT, .arg = "N[:SEED]",
     .help = "benchmarks only: fill the partitions with N synthetic references in all (deterministic: a "
             "partition's rows depend on SEED and the partition alone) instead of loading their buckets"},
    {.name = "load-parallel", .type = CLI_INT, .arg = "N", .min = 1, .max = 256, .def = "4",
     .help = "partitions whose initial load from the buckets runs at once"},
    {.name = "drain-timeout", .type = CLI_INT, .arg = "S", .min = 0, .max = 86400, .def = "60",
     .help = "on SIGTERM: seconds at most to keep answering, announced as leaving, until every partition it "
             "holds has a ready copy on another shard (0: leave at once)"},
    {.name = "test-stall-reassign", .type = CLI_INT, .arg = "S", .min = 1, .max = 3600,
     .help = "tests only: once its partitions are ready, stall the loop that reassigns partitions for S "
             "seconds, once (the heartbeat goes on: the entry must not expire)"},
    CLI_OPT_JOBS,
    {.name = "work", .type = CLI_FLAG, .conflicts = "no-work",
     .help = "also take work items of bulk indexing (patina index --cluster --distribute): the default"},
    {.name = "no-work", .type = CLI_FLAG, .conflicts = "work", .help = "take no work items"},
    {.name = "root", .type = CLI_TEXT, .arg = "DIR",
     .help = "work items name files by their path below this folder (default: the current one)"},
    {.name = "work-batch", .type = CLI_INT, .arg = "N", .min = 1, .max = 256, .def = "8",
     .help = "work items taken at a time"},
};

const cli_command_t cli_cmd_shard = {
    .name = "shard",
    .summary = "hold and answer partitions of a cluster collection",
    .operands = "COLLECTION",
    .min_operands = 1,
    .max_operands = 1,
    .about = "Joins the cluster as a shard of COLLECTION: takes the partitions weighted\n"
             "rendezvous hashing gives it (--copies of each across the shards), loads them\n"
             "from their buckets, follows their changes, and answers the queries of front\n"
             "ends (patina serve/search/identify --cluster) for the partitions it holds\n"
             "ready. Runs until SIGTERM or SIGINT: it then hands over -- its member entry\n"
             "says leaving, the other shards take its partitions, and it answers until each\n"
             "has a ready copy elsewhere (at most --drain-timeout) -- then leaves the\n"
             "membership and finishes the queries in flight.\n"
             "Unless --no-work it is also a worker of bulk indexing (as patina worker).\n",
    .opts = shard_opts,
    .nopts = sizeof shard_opts / sizeof shard_opts[0],
    .notes = NULL,
    .run = run_shard,
};

static int run_worker(const cli_args_t *a);

static const cli_opt_t worker_opts[] = {
    CLI_OPT_CLUSTER(" (required)"),
    {.name = "root", .type = CLI_TEXT, .arg = "DIR",
     .help = "work items name files by their path below this folder (default: the current one)"},
    {.name = "name", .type = CLI_TEXT, .arg = "NAME",
     .help = "the worker's name in the results, [A-Za-z0-9_-]+ (default: HOST-PID)"},
    CLI_OPT_DEVICE("where descriptors are computed; auto: the GPU when one is usable"),
    {.name = "gpus", .type = CLI_TEXT, .arg = "all|LIST", .help = "GPUs of this process (all, or ordinals: 0,1)"},
    CLI_OPT_JOBS,
    CLI_OPT_MAX_PIXELS,
    {.name = "work-batch", .type = CLI_INT, .arg = "N", .min = 1, .max = 256, .def = "8",
     .help = "work items taken at a time (decoded and extracted as one batch)"},
};

const cli_command_t cli_cmd_worker = {
    .name = "worker",
    .summary = "extract and write the files of bulk indexing jobs of a cluster collection",
    .operands = "COLLECTION",
    .min_operands = 1,
    .max_operands = 1,
    .about = "Takes work items of COLLECTION's queue (put there by patina index --cluster\n"
             "--distribute), a batch at a time: reads each file below --root (or takes its\n"
             "bytes from the item), decodes it and extracts the collection's tables on\n"
             "--device, writes the record through the partition buckets (acknowledged as\n"
             "every cluster write), reports the file's result to the job and acks the item.\n"
             "A file that fails (unreadable, corrupt) is reported with its error. An item\n"
             "a worker takes and does not finish (it died, it stalled past the queue's\n"
             "AckWait) goes to another worker. Runs until SIGTERM or SIGINT (the batch in\n"
             "hand is finished first). patina shard does the same unless --no-work.\n",
    .opts = worker_opts,
    .nopts = sizeof worker_opts / sizeof worker_opts[0],
    .notes = "docs/cluster.md, \"Bulk indexing\".\n",
    .run = run_worker,
};

static int need_cluster(const cli_args_t *a, const char *cmd)
{
    if (!cli_get(a, "cluster")->given) {
        cli_error(cmd, "--cluster URL is required");
        return -1;
    }
    return 0;
}

static int run_cluster(const cli_args_t *a)
{
    if (need_cluster(a, "cluster")) return EXIT_USAGE;
#if PATINA_HAVE_CLUSTER
    return clu_cli_cluster(a);
#else
    cli_error("cluster", "this build has no cluster support (libnats-dev was not found when it was configured)");
    return EXIT_ERROR;
#endif
}

static int run_shard(const cli_args_t *a)
{
    if (need_cluster(a, "shard")) return EXIT_USAGE;
#if PATINA_HAVE_CLUSTER
    return clu_cli_shard(a);
#else
    cli_error("shard", "this build has no cluster support (libnats-dev was not found when it was configured)");
    return EXIT_ERROR;
#endif
}

static int run_worker(const cli_args_t *a)
{
    if (need_cluster(a, "worker")) return EXIT_USAGE;
#if PATINA_HAVE_CLUSTER
    return clu_cli_worker(a);
#else
    cli_error("worker", "this build has no cluster support (libnats-dev was not found when it was configured)");
    return EXIT_ERROR;
#endif
}
