/* patina index: add files and folders to a collection, with a progress bar. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

static void help(FILE *f)
{
    fprintf(f,
            "usage: patina index COLLECTION PATH... [-f FAMILY[:OPTS]] [--device D] [--jobs N]\n"
            "\n"
            "Adds images to COLLECTION (an LMDB directory, created if missing).\n"
            "Folders are searched recursively; hidden entries are skipped. A file\n"
            "already indexed under the same path with the same content (SHA-256) is\n"
            "skipped, so an interrupted run resumes where it stopped.\n"
            "  -f, --family SPEC   descriptor family and options (default: cedd)\n"
            "      --device D      auto|cpu|gpu|hybrid (default: auto)\n"
            "  -j, --jobs N        CPU threads for decoding and extraction (default: all)\n"
            "      --batch N       images per batch and per transaction (default: 256)\n"
            "      --max-pixels N  refuse images with more pixels (default 100000000)\n"
            "      --batch-memory BYTES  encoded + decoded image bytes held at once (default 1 GiB)\n"
            "      --strict        decoder warnings (damaged but decodable data) fail the file\n"
            "      --decoder D     JPEG decoder: libjpeg (default: the reference's pixels,\n"
            "                      descriptors identical to LIRE's) or nvjpeg (GPU, needs\n"
            "                      --device gpu and libnvjpeg at run time; pixels differ\n"
            "                      slightly, see docs/images.md)\n"
            "      --nvjpeg-share F  fraction of the JPEGs nvJPEG decodes while the CPU\n"
            "                      decodes the rest (0 < F <= 1, or auto to follow the\n"
            "                      measured rates; default 1: all nvJPEG supports)\n"
            "  -q, --quiet         no progress bar and no summary\n"
            "  -h, --help          this help\n"
            "Files that fail are reported on stderr and the exit status is 1.\n");
}

typedef struct run {
    int tty, quiet;
    double last;
} run_t;

static void on_error(void *user, const char *path, patina_status s, const char *msg)
{
    run_t *r = user;
    if (r->tty && !r->quiet) fputs("\r\033[K", stderr);
    fprintf(stderr, "patina index: %s\n", msg && *msg ? msg : patina_status_str(s));
    (void)path;
}

static void fmt_time(char *buf, size_t n, double s)
{
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

static void on_progress(void *user, const patina_index_stats_t *s)
{
    run_t *r = user;
    uint64_t done = s->indexed + s->skipped + s->failed;
    double rate = s->seconds > 0 ? (double)done / s->seconds : 0;
    char eta[32];
    int width = 30, fill;
    if (!r->tty || r->quiet) return;
    fill = s->files ? (int)((double)width * (double)done / (double)s->files) : width;
    fmt_time(eta, sizeof eta, rate > 0 ? (double)(s->files - done) / rate : 0);
    fprintf(stderr, "\r\033[K[%.*s%*s] %llu/%llu %3.0f%% %.1f img/s ETA %s", fill,
            "##############################", width - fill, "", (unsigned long long)done,
            (unsigned long long)s->files, s->files ? 100.0 * (double)done / (double)s->files : 100.0,
            rate, eta);
}

int cmd_index(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"family", required_argument, 0, 'f'}, {"device", required_argument, 0, 'd'},
        {"jobs", required_argument, 0, 'j'}, {"batch", required_argument, 0, 'b'},
        {"max-pixels", required_argument, 0, 'P'}, {"quiet", no_argument, 0, 'q'},
        {"batch-memory", required_argument, 0, 'B'}, {"strict", no_argument, 0, 'X'},
        {"decoder", required_argument, 0, 'D'}, {"nvjpeg-share", required_argument, 0, 'S'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *family = "cedd";
    patina_context_opts_t copts = {0};
    patina_index_opts_t iopts = {0};
    patina_extractor_t *ex = NULL;
    patina_context_t *ctx = NULL;
    patina_collection_t *coll = NULL;
    patina_index_stats_t stats;
    run_t run = {0};
    char **files = NULL;
    size_t nfiles = 0, missing = 0, i;
    int c, rc = EXIT_OK;
    long v;
    patina_status s;

    optind = 1;
    while ((c = getopt_long(argc, argv, "f:j:qh", longopts, NULL)) != -1) {
        switch (c) {
        case 'f': family = optarg; break;
        case 'd':
            if (patina_device_parse(&iopts.device, optarg) != PATINA_OK) {
                cli_error("index", "%s", patina_last_error());
                return EXIT_USAGE;
            }
            break;
        case 'j':
            if (cli_parse_long("index", "--jobs", optarg, 1, 1024, &v)) return EXIT_USAGE;
            copts.threads = (int)v;
            break;
        case 'b':
            if (cli_parse_long("index", "--batch", optarg, 1, 65536, &v)) return EXIT_USAGE;
            iopts.batch = (size_t)v;
            break;
        case 'P':
            if (cli_parse_long("index", "--max-pixels", optarg, 1, 1L << 40, &v)) return EXIT_USAGE;
            copts.limits.max_pixels = (uint64_t)v;
            break;
        case 'B':
            if (cli_parse_long("index", "--batch-memory", optarg, 1, 1L << 50, &v)) return EXIT_USAGE;
            iopts.batch_memory = (uint64_t)v;
            break;
        case 'D':
            if (patina_jpeg_decoder_parse(&iopts.jpeg_decoder, optarg) != PATINA_OK) {
                cli_error("index", "%s", patina_last_error());
                return EXIT_USAGE;
            }
            break;
        case 'S': {
            char *end = NULL;
            double f = strtod(optarg, &end);
            if (!strcmp(optarg, "auto")) {
                iopts.nvjpeg_share = -1;
                break;
            }
            if (!end || *end || !(f > 0 && f <= 1)) {
                cli_error("index", "--nvjpeg-share wants a number in (0, 1] or auto, not '%s'", optarg);
                return EXIT_USAGE;
            }
            iopts.nvjpeg_share = f;
            break;
        }
        case 'X': iopts.strict = 1; break;
        case 'q': run.quiet = 1; break;
        case 'h': help(stdout); return EXIT_OK;
        default: help(stderr); return EXIT_USAGE;
        }
    }
    if (argc - optind < 2) {
        cli_error("index", "need a collection and at least one path");
        help(stderr);
        return EXIT_USAGE;
    }
    if ((s = patina_extractor_new(&ex, family)) != PATINA_OK) {
        cli_status_error("index", s);
        return EXIT_USAGE;
    }
    run.tty = isatty(2);
    iopts.progress = on_progress;
    iopts.on_error = on_error;
    iopts.on_warning = on_error;
    iopts.user = &run;
    if ((s = patina_context_new(&ctx, &copts)) != PATINA_OK ||
        (s = patina_collection_open(&coll, argv[optind], PATINA_OPEN_CREATE, 0)) != PATINA_OK) {
        cli_status_error("index", s);
        rc = EXIT_ERROR;
        goto out;
    }
    s = patina_expand_paths(&files, &nfiles, (const char *const *)argv + optind + 1,
                            (size_t)(argc - optind - 1), &missing, on_error, &run);
    if (s != PATINA_OK) {
        cli_status_error("index", s);
        rc = EXIT_ERROR;
        goto out;
    }
    s = patina_index_files(ctx, coll, ex, (const char *const *)files, nfiles, &iopts, &stats);
    if (run.tty && !run.quiet) fputs("\r\033[K", stderr);
    if (s != PATINA_OK) {
        cli_status_error("index", s);
        fprintf(stderr, "patina index: stopped after %llu indexed; everything indexed so far is kept, "
                        "run the same command again to resume\n",
                (unsigned long long)stats.indexed);
        rc = EXIT_ERROR;
        goto out;
    }
    if (!run.quiet && stats.gpu_decoded)
        fprintf(stderr, "decoded %llu JPEGs with nvJPEG, the others on the CPU\n",
                (unsigned long long)stats.gpu_decoded);
    if (!run.quiet)
        fprintf(stderr,
                "indexed %llu, skipped %llu (unchanged), failed %llu of %llu files, %llu with decoder "
                "warnings; %zu paths skipped; %.2f s (%.1f images/s, %s, device %s)\n",
                (unsigned long long)stats.indexed, (unsigned long long)stats.skipped,
                (unsigned long long)stats.failed, (unsigned long long)stats.files,
                (unsigned long long)stats.warned, missing, stats.seconds, stats.seconds > 0 ? (double)stats.indexed / stats.seconds : 0.0,
                patina_extractor_spec(ex), patina_device_name(stats.device));
    if (stats.failed || missing) rc = EXIT_PARTIAL;
out:
    for (i = 0; i < nfiles; i++) free(files[i]);
    free(files);
    patina_collection_close(coll);
    patina_context_free(ctx);
    patina_extractor_free(ex);
    return rc;
}
