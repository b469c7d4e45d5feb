/* patina index: add files and folders to a collection, with a progress bar. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#if PATINA_HAVE_CLUSTER
#include "cluster/cmd.h"
#endif

static int run_index(const cli_args_t *a);

static const cli_opt_t opts[] = {
    CLI_OPT_FAMILY,
    CLI_OPT_DEVICE("where descriptors are computed; auto: the GPU when one is usable"),
    CLI_OPT_JOBS,
    /* bounds and defaults: the library's table (include/patina/options.h; test_cli checks them) */
    {.name = "batch", .type = CLI_INT, .arg = "N", .min = 1, .max = PATINA_BATCH_MAX,
     .def = PATINA_STRINGIFY(PATINA_BATCH_DEFAULT),
     .help = "images per batch and per transaction"},
    CLI_OPT_MAX_PIXELS,
    CLI_OPT_BATCH_MEMORY("encoded + decoded image bytes the pipeline holds at once "
                         "(all batches in flight; a batch is cut where the next image "
                         "would pass its share, a single larger image is a batch alone)"),
    CLI_OPT_STRICT,
    CLI_OPT_EXIF_ORIENTATION,
    {.name = "decoder", .type = CLI_CHOICE, .arg = "D", .choices = "libjpeg|nvjpeg|exact-gpu|auto", .def = "auto",
     .help = "JPEG decoder: libjpeg (CPU, the reference's pixels, descriptors identical "
             "to LIRE's), exact-gpu (the same pixels byte for byte: entropy decoding on "
             "the CPU, the rest on the GPU; needs --device gpu), nvjpeg (GPU, needs "
             "--device gpu and libnvjpeg at run time; pixels differ slightly, see "
             "docs/images.md; reports no decoder warnings for the files it decodes) or "
             "auto (exact-gpu when every family runs on the GPU and reads GPU images, else libjpeg)"},
    {.name = "nvjpeg-share", .type = CLI_NUMBER, .arg = "F", .min = 0, .max = 1, .def = "1",
     .flags = CLI_OPEN_MIN | CLI_AUTO,
     .help = "fraction of the JPEGs nvJPEG decodes while the CPU decodes the rest; "
             "auto follows the measured rates; 1: all nvJPEG supports"},
    {.name = "pivots", .type = CLI_INT, .arg = "N", .min = 0, .max = PATINA_PIVOTS_MAX,
     .help = "-f signature: (re)build the collection's pivot table of N pivots for filtered "
             "SQFD search (the paper uses 32); 0 deletes the table. Without --pivots a stored "
             "table is brought up to date with the images added"},
    {.name = "views", .type = CLI_INT, .arg = "N", .min = 0, .max = 3, /* rootsift's option table: RS_VIEWS_MAX */
     .help = "-f rootsift: register N synthetic views of each reference as more rows of its item "
             "(the same as -f rootsift:views=N; the library's bounds and meaning: `patina info`, "
             "docs/identify.md); stored in the table's spec, so later writes and queries follow it"},
    {.name = "pivot-select", .type = CLI_CHOICE, .arg = "S", .choices = "farthest|random", .def = "farthest",
     .help = "how --pivots chooses pivots among the images: farthest-first or at random"},
    {.name = "root", .type = CLI_TEXT, .arg = "DIR",
     .help = "a new collection's root: keys are paths relative to it (default: the folder that "
             "holds the collection); fixed once the collection holds an image"},
    CLI_OPT_WALK_FILTERS,
    {.name = "skip-duplicates", .type = CLI_FLAG,
     .help = "do not index a file whose content (SHA-256) is stored under another key (it is "
             "reported either way)"},
    {.name = "every", .type = CLI_TEXT, .arg = "N|Ss",
     .help = "video: index one frame every N frames (--every 30), or the first frame at or after "
             "every S seconds (--every 2s, --every 0.5s; millisecond precision); default: every frame"},
    {.name = "shots", .type = CLI_FLAG,
     .help = "video: of the frames --every gives, index only those whose colour histogram differs "
             "from the last indexed frame's by at least --shot-threshold (shot changes; docs/video.md)"},
    {.name = "shot-threshold", .type = CLI_NUMBER, .arg = "D", .min = 0, .max = 1, .def = "0.3",
     .flags = CLI_OPEN_MIN,
     .help = "--shots: the histogram distance (0..1, the share of sampled pixels whose colour bin "
             "changed) that makes a frame a new shot"},
    {.name = "video-decoder", .type = CLI_CHOICE, .arg = "D", .choices = "cpu|nvdec|auto", .def = "cpu",
     .help = "video: who decodes the frames: cpu (libavcodec threads), nvdec (the GPU's video decoders, for "
             "H.264 and HEVC; the same pixels) or auto (nvdec where it opens)"},
    {.name = "max-delay", .type = CLI_TEXT, .arg = "Ss", .def = "1s",
     .help = "video: a batch of frames is stored at the latest S seconds after its first frame was "
             "decoded (0.001s .. 3600s), so a live stream's frames are searchable within about S"},
    {.name = "stdin-key", .type = CLI_TEXT, .arg = "NAME", .def = "stdin",
     .help = "the key of the video read from standard input (PATH '-'); its frames are NAME#t=..."},
    {.name = "verbose", .letter = 'v', .type = CLI_FLAG, .help = "name each file a folder walk leaves out"},
    {.name = "quiet", .letter = 'q', .type = CLI_FLAG, .help = "no progress bar and no summary"},
    CLI_OPT_CLUSTER_URL,
    {.name = "distribute", .type = CLI_FLAG,
     .help = "--cluster: put the files on the collection's work queue instead of extracting here; the "
             "workers (patina worker, patina shard) extract and write them; waits for every file's result "
             "(docs/cluster.md, \"Bulk indexing\")"},
    {.name = "send-bytes", .type = CLI_FLAG,
     .help = "--distribute: send each file's bytes in its work item (files up to the NATS server's "
             "max_payload less 16 KiB; larger ones go by path), for workers without the files; default: "
             "the path below --root, read by each worker below its own --root (shared storage)"},
    {.name = "ack-wait", .type = CLI_NUMBER, .arg = "S", .min = 1, .max = 86400,
     .help = "--distribute: seconds after which an item a worker took and did not finish (it died or "
             "stalled) goes to another worker (the queue's AckWait; default: as set, 30 when made)"},
};

const cli_command_t cli_cmd_index = {
    .name = "index",
    .summary = "add images (files or folders) to a collection",
    .operands = "COLLECTION PATH...",
    .min_operands = 2,
    .max_operands = -1,
    .about = "Adds images to COLLECTION (an LMDB directory, created if missing). Folders\n"
             "are walked recursively, entries in byte order of their names, hidden ones\n"
             "skipped; symbolic links are followed, and each folder and each file (by\n"
             "device and inode) is taken once. A folder walk takes the files an image\n"
             "loader recognises by their first bytes (JPEG, PNG, Netpbm) and counts the\n"
             "others as \"other files skipped\" (-v names them); a file named on the\n"
             "command line is always tried.\n"
             "\n"
             "Keys: a file's key is its real path (links resolved) relative to the\n"
             "collection's root (--root; by default the folder that holds the collection),\n"
             "or its absolute real path when it lies outside the root. So every spelling of\n"
             "a path gives one record, and a collection moved together with its images\n"
             "keeps working. Collections made before roots keep the paths as given.\n"
             "\n"
             "Video files (MP4, MKV, WebM, AVI, MPEG-TS/PS, ...: recognised by their first\n"
             "bytes) and '-' (a video stream on standard input) are decoded with FFmpeg;\n"
             "each frame chosen by --every/--shots is a record keyed FILE#t=SECONDS&f=FRAME\n"
             "(clip.mp4#t=12.345&f=370: its time from the start in seconds with three\n"
             "decimals, its frame number from 0); docs/video.md.\n"
             "\n"
             "A file whose key is stored already with the same content (SHA-256) is\n"
             "skipped, so an interrupted run resumes where it stopped. A file under a new\n"
             "key whose content is stored under another key is reported as a duplicate\n"
             "(both keys named) and indexed as well, unless --skip-duplicates.\n",
    .opts = opts,
    .nopts = sizeof opts / sizeof opts[0],
    .notes = "Each file that fails (unreadable, not an image, corrupt, over --max-pixels) and\n"
             "each path skipped (missing, a folder that cannot be read, a broken link) is\n"
             "reported on stderr; the others are indexed and the exit status is 1. A file\n"
             "decoded with a decoder warning is reported and indexed (exit status 0), or\n"
             "fails with --strict. The summary counts all of these. Files left out by a\n"
             "folder walk and duplicates do not change the exit status.\n"
             "\n"
             "--include/--exclude: fnmatch(3) globs, case-insensitive, matched against the\n"
             "path below the walked folder and against the file's name ('*' also matches\n"
             "'/'): --exclude '*.thm' --exclude '@eaDir' --include '2024/*'.\n",
    .run = run_index,
};

typedef struct run {
    int tty, quiet, verbose, skip_dups;
} run_t;

static void on_report(void *user, const char *path, patina_status s, const char *msg)
{
    run_t *r = user;
    if (r->tty && !r->quiet) fputs("\r\033[K", stderr);
    fprintf(stderr, "patina index: %s\n", msg && *msg ? msg : patina_status_str(s));
    (void)path;
}

/* A file a folder walk left out: named with -v only. */
static void on_other(void *user, const char *path, patina_status s, const char *msg)
{
    run_t *r = user;
    if (r->verbose) on_report(user, path, s, msg);
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
    /* files done: images (records that are not video frames), videos read, failures */
    uint64_t done = (s->indexed - s->frames) + (s->skipped - s->frames_skipped) + s->videos + s->failed +
                    (r->skip_dups ? s->duplicates : 0);
    double rate = s->seconds > 0 ? (double)done / s->seconds : 0;
    char eta[32];
    int width = 30, fill;
    if (!r->tty || r->quiet) return;
    fill = s->files ? (int)((double)width * (double)done / (double)s->files) : width;
    fmt_time(eta, sizeof eta, rate > 0 ? (double)(s->files - done) / rate : 0);
    if (s->frames || s->frames_skipped) { /* a video: frames as they come */
        fprintf(stderr, "\r\033[K%llu/%llu files, %llu frames, %.1f frames/s", (unsigned long long)done,
                (unsigned long long)s->files, (unsigned long long)(s->frames + s->frames_skipped),
                s->seconds > 0 ? (double)(s->frames + s->frames_skipped) / s->seconds : 0);
        return;
    }
    fprintf(stderr, "\r\033[K[%.*s%*s] %llu/%llu %3.0f%% %.1f img/s ETA %s", fill,
            "##############################", width - fill, "", (unsigned long long)done,
            (unsigned long long)s->files, s->files ? 100.0 * (double)done / (double)s->files : 100.0,
            rate, eta);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The pivot table (include/patina/pivots.h) after indexing, through the
 * live table: --pivots N builds one (0 deletes it); without --pivots a
 * stored one gets the rows of the images added and loses those of images
 * removed. */
static int update_pivots(const cli_args_t *a, patina_context_t *ctx, patina_collection_t *coll,
                         const patina_extractor_t *ex, int quiet)
{
    const cli_value_t *pv = cli_get(a, "pivots");
    patina_table_t *t = NULL;
    patina_status s;
    size_t changed = 0;
    double t0 = now_seconds();
    if (!pv->given && !(patina_extractor_caps(ex) & PATINA_CAP_PIVOTS)) return 0;
    s = patina_table_open(&t, ctx, coll, patina_extractor_spec(ex), NULL);
    if (s == PATINA_E_NOTFOUND && !pv->given) { /* nothing indexed into it */
        patina_clear_error();
        return 0;
    }
    if (s == PATINA_OK && pv->given) {
        patina_pivot_opts_t po;
        patina_pivot_opts_init(&po);
        po.pivots = (size_t)pv->i;
        po.select = cli_get(a, "pivot-select")->i == 1 ? PATINA_PIVOTS_RANDOM : PATINA_PIVOTS_FARTHEST;
        s = patina_table_build_pivots(t, &po);
        if (s == PATINA_OK) changed = po.pivots ? patina_table_size(t) : 0;
    } else if (s == PATINA_OK) {
        s = patina_table_save(t, &changed);
    }
    if (s != PATINA_OK) {
        cli_status_error("index", s);
        patina_table_free(t);
        return -1;
    }
    if (!quiet && changed)
        fprintf(stderr, "pivot table: %zu pivot%s, %zu row%s (%zu updated); %.2f s\n", patina_table_pivots(t),
                cli_plural(patina_table_pivots(t)), patina_table_size(t), cli_plural(patina_table_size(t)), changed,
                now_seconds() - t0);
    patina_table_free(t);
    return 0;
}

/* "S" of "Ss" (seconds, up to three decimals) in milliseconds at *ms: 0,
 * or -1 when t is not that or is over 10^9 seconds. *end: past the digits. */
static int parse_ms(const char *t, unsigned long long *ms, const char **end)
{
    unsigned long long n, frac = 0;
    char *e;
    int dec = 0;
    if (!t || !(*t >= '0' && *t <= '9')) return -1;
    errno = 0;
    n = strtoull(t, &e, 10);
    if (errno || n > 1000000000ull) return -1;
    if (*e == '.') {
        for (e++; *e >= '0' && *e <= '9'; e++) {
            if (++dec > 3) return -1;
            frac = frac * 10 + (unsigned long long)(*e - '0');
        }
        if (!dec) return -1;
    }
    for (; dec < 3; dec++) frac *= 10;
    *ms = n * 1000 + frac;
    *end = e;
    return 0;
}

/* --every N (frames) or --every S s (seconds, up to three decimals). */
static int parse_every(const cli_args_t *a, patina_index_opts_t *o)
{
    const cli_value_t *v = cli_get(a, "every");
    const char *t = v->text, *end;
    unsigned long long ms;
    if (!v->given) return 0;
    if (parse_ms(t, &ms, &end) != 0) goto bad;
    if (!*end && !strchr(t, '.')) { /* N frames */
        if (ms == 0) goto bad;
        o->video_every_frames = ms / 1000;
        return 0;
    }
    if (strcmp(end, "s") || ms == 0) goto bad;
    o->video_every_ms = ms;
    return 0;
bad:
    cli_error("index", "--every '%s': a number of frames (30) or of seconds (2s, 0.5s; at most "
                       "three decimals), more than 0", t ? t : "");
    return -1;
}

/* --max-delay S s: the library's video_max_delay_ms (whose bounds the
 * library's table holds). */
static int parse_max_delay(const cli_args_t *a, patina_index_opts_t *o)
{
    const cli_value_t *v = cli_get(a, "max-delay");
    const char *t = v->text, *end;
    unsigned long long ms;
    if (parse_ms(t, &ms, &end) != 0 || strcmp(end, "s") ||
        patina_options_check(PATINA_OPTIONS_INDEX, "video_max_delay_ms", (double)ms) != PATINA_OK) {
        cli_error("index", "--max-delay '%s': seconds (1s, 0.25s; at most three decimals), from 0.001s to 3600s",
                  t ? t : "");
        return -1;
    }
    o->video_max_delay_ms = ms;
    return 0;
}

static int run_index(const cli_args_t *a)
{
    const char *family = cli_get(a, "family")->text;
    const cli_value_t *share = cli_get(a, "nvjpeg-share");
    patina_index_opts_t iopts;
    patina_extractor_t *ex = NULL;
    patina_context_t *ctx = NULL;
    patina_collection_t *coll = NULL;
    patina_index_stats_t stats;
    run_t run = {0};
    const cli_value_t *root = cli_get(a, "root");
    patina_walk_opts_t wopts;
    patina_walk_stats_t wstats = {0};
    char dups[128] = "", others[160] = "";
    char **files = NULL;
    size_t nfiles = 0, skipped = 0, i;
    int rc = EXIT_OK;
    patina_status s;

    if (cli_get(a, "cluster")->given && cli_get(a, "views")->given) {
        cli_error("index", "--views with --cluster: give the views in the table's spec (-f rootsift:views=N)");
        return EXIT_USAGE;
    }
    if (cli_get(a, "cluster")->given) { /* a cluster collection: written through its buckets */
#if PATINA_HAVE_CLUSTER
        return clu_cli_index(a);
#else
        cli_error("index", "--cluster: this build has no cluster support (libnats-dev was not found)");
        return EXIT_ERROR;
#endif
    }

    patina_index_opts_init(&iopts);
    if (patina_device_parse(&iopts.device, cli_get(a, "device")->text) != PATINA_OK ||
        patina_jpeg_decoder_parse(&iopts.jpeg_decoder, cli_get(a, "decoder")->text) != PATINA_OK) {
        cli_status_error("index", PATINA_E_INVALID);
        return EXIT_USAGE;
    }
    iopts.batch = (size_t)cli_get(a, "batch")->i;
    iopts.batch_memory = cli_get(a, "batch-memory")->bytes;
    iopts.strict = (int)cli_get(a, "strict")->i;
    iopts.apply_orientation = (int)cli_get(a, "exif-orientation")->i;
    iopts.skip_duplicates = (int)cli_get(a, "skip-duplicates")->i;
    /* nvjpeg_share: 0 = all nvJPEG supports (the same as 1), negative = adapt */
    iopts.nvjpeg_share = share->is_auto ? -1.0 : share->num;
    run.quiet = (int)cli_get(a, "quiet")->i;
    run.verbose = (int)cli_get(a, "verbose")->i;
    run.skip_dups = iopts.skip_duplicates;
    if ((s = patina_extractor_new(&ex, family)) != PATINA_OK) {
        cli_status_error("index", s);
        return EXIT_USAGE;
    }
    if (cli_get(a, "views")->given) { /* a spec option of keypoint families: appended to the spec */
        char spec[512];
        if (!(patina_extractor_caps(ex) & PATINA_CAP_KEYPOINTS)) {
            cli_error("index", "--views: reference views are for identification tables (-f rootsift), not '%s'",
                      patina_extractor_spec(ex));
            rc = EXIT_USAGE;
            goto out;
        }
        snprintf(spec, sizeof spec, "%s%sviews=%lld", family, strchr(family, ':') ? "," : ":",
                 cli_get(a, "views")->i);
        patina_extractor_free(ex);
        ex = NULL;
        if ((s = patina_extractor_new(&ex, spec)) != PATINA_OK) {
            cli_status_error("index", s);
            return EXIT_USAGE;
        }
    }
    if (parse_every(a, &iopts) != 0 || parse_max_delay(a, &iopts) != 0) {
        rc = EXIT_USAGE;
        goto out;
    }
    if (cli_get(a, "shots")->i) iopts.video_shots = cli_get(a, "shot-threshold")->num;
    iopts.stdin_key = cli_get(a, "stdin-key")->text;
    {
        patina_video_decoder vd = PATINA_VIDEO_DECODER_CPU;
        (void)patina_video_decoder_parse(&vd, cli_get(a, "video-decoder")->text); /* a choice: parsed */
        iopts.video_decoder = (int)vd;
    }
    if (cli_get(a, "pivots")->given && cli_get(a, "pivots")->i > 0 && !(patina_extractor_caps(ex) & PATINA_CAP_PIVOTS)) {
        cli_error("index", "--pivots: pivot tables are for -f signature (SQFD), not '%s'", patina_extractor_spec(ex));
        rc = EXIT_USAGE;
        goto out;
    }
    run.tty = isatty(2);
    iopts.progress = on_progress;
    iopts.on_error = on_report;
    iopts.on_warning = on_report;
    iopts.on_duplicate = on_report;
    iopts.user = &run;
    if (root->given) { /* checked before the collection is made, so a wrong --root leaves nothing */
        struct stat st;
        if (stat(root->text, &st) != 0 || !S_ISDIR(st.st_mode)) {
            cli_error("index", "--root '%s' is not a directory", root->text);
            rc = EXIT_USAGE;
            goto out;
        }
    }
    if (cli_context(&ctx, a) != 0) {
        rc = EXIT_ERROR;
        goto out;
    }
    if ((s = patina_collection_open(&coll, a->operands[0], PATINA_OPEN_CREATE, 0)) != PATINA_OK) {
        cli_status_error("index", s);
        rc = EXIT_ERROR;
        goto out;
    }
    if (root->given && (s = patina_collection_set_root(coll, root->text)) != PATINA_OK) {
        cli_status_error("index", s);
        rc = s == PATINA_E_INVALID ? EXIT_USAGE : EXIT_ERROR;
        goto out;
    }
    patina_walk_opts_init(&wopts);
    cli_walk_filters(a, &wopts);
    wopts.on_error = on_report;
    wopts.on_other = on_other;
    wopts.user = &run;
    s = patina_walk(&files, &nfiles, a->operands + 1, a->noperands - 1, &wopts, &wstats);
    skipped = wstats.skipped;
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
        fprintf(stderr, "decoded %llu JPEG%s with nvJPEG, the others on the CPU\n",
                (unsigned long long)stats.gpu_decoded, cli_plural(stats.gpu_decoded));
    if (stats.duplicates)
        snprintf(dups, sizeof dups, "; %llu duplicate%s (%s)", (unsigned long long)stats.duplicates,
                 cli_plural(stats.duplicates), iopts.skip_duplicates ? "not indexed" : "indexed as well");
    if (wstats.others)
        snprintf(others, sizeof others, "; %zu other file%s skipped (not images, or by --include/--exclude%s)",
                 wstats.others, cli_plural(wstats.others), run.verbose ? "" : "; -v names them");
    if (!run.quiet && (stats.frames || stats.frames_skipped || stats.videos))
        fprintf(stderr, "video: %llu frame%s indexed, %llu unchanged, from %llu video%s read to the end\n",
                (unsigned long long)stats.frames, cli_plural(stats.frames), (unsigned long long)stats.frames_skipped,
                (unsigned long long)stats.videos, cli_plural(stats.videos));
    if (!run.quiet) {
        char rate[64] = ""; /* only when something was extracted: a re-run of unchanged files has no rate */
        if (stats.indexed && stats.seconds > 0)
            snprintf(rate, sizeof rate, "%.1f %s/s, ", (double)stats.indexed / stats.seconds,
                     stats.frames ? "records" : "images");
        fprintf(stderr,
                "indexed %llu, skipped %llu (unchanged), failed %llu of %llu file%s, %llu with decoder "
                "warnings; %zu path%s skipped%s%s; %.2f s (%s%s, device %s)\n",
                (unsigned long long)stats.indexed, (unsigned long long)stats.skipped,
                (unsigned long long)stats.failed, (unsigned long long)stats.files, cli_plural(stats.files),
                (unsigned long long)stats.warned, skipped, cli_plural(skipped), dups, others, stats.seconds, rate,
                patina_extractor_spec(ex), patina_device_name(stats.device));
    }
    if (stats.failed || skipped) rc = EXIT_PARTIAL;
    if (update_pivots(a, ctx, coll, ex, run.quiet) != 0) rc = EXIT_ERROR;
out:
    for (i = 0; i < nfiles; i++) free(files[i]);
    free(files);
    patina_collection_close(coll);
    patina_context_free(ctx);
    patina_extractor_free(ex);
    return rc;
}
