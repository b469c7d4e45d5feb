/* patina identify: which reference of a rootsift collection each query photo
 * shows, or "unknown" (docs/identify.md; the output contract the identify
 * benchmark reads is in the --help notes). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#if PATINA_HAVE_CLUSTER
#include "cluster/cluster.h"
#endif

static int run_identify(const cli_args_t *a);

static const cli_opt_t opts[] = {
    /* bounds and defaults: the library's table (include/patina/options.h; test_cli checks them) */
    {.name = "k", .letter = 'k', .type = CLI_INT, .arg = "K", .min = 1, .max = PATINA_K_MAX,
     .def = PATINA_STRINGIFY(PATINA_IDENTIFY_K_DEFAULT),
     .help = "candidates per query (more than the references: all of them)"},
    {.name = "ratio", .type = CLI_NUMBER, .arg = "R", .min = PATINA_RATIO_MIN, .max = PATINA_RATIO_MAX,
     .flags = CLI_OPEN_MIN, .def = PATINA_STRINGIFY(PATINA_RATIO_DEFAULT),
     .help = "Lowe's ratio test: a query feature matches when its nearest reference feature is "
             "closer than R times the second nearest"},
    {.name = "scoring", .type = CLI_CHOICE, .choices = "one2one|raw|mutual", .def = "one2one",
     .help = "candidate score: distinct reference features hit (one2one), query features passing the "
             "ratio test (raw, the paper's), or one2one of mutual nearest neighbours"},
    {.name = "no-verify", .type = CLI_FLAG,
     .help = "no RANSAC verification: rank and decide on the scoring rule's matches"},
    {.name = "verify-top", .type = CLI_INT, .arg = "N", .min = 0, .max = PATINA_K_MAX,
     .def = PATINA_STRINGIFY(PATINA_VERIFY_TOP_DEFAULT),
     .help = "verify the N best candidates (by matches) with RANSAC"},
    {.name = "model", .type = CLI_CHOICE, .choices = "similarity|affine|homography", .def = "similarity",
     .help = "RANSAC model from query to reference keypoints"},
    {.name = "ransac-threshold", .type = CLI_NUMBER, .arg = "F", .min = 0, .max = 1, .flags = CLI_OPEN_MIN,
     .def = PATINA_STRINGIFY(PATINA_RANSAC_THRESHOLD_DEFAULT),
     .help = "inlier distance as a fraction of the reference image's longer side"},
    {.name = "no-shape-check", .type = CLI_FLAG,
     .help = "RANSAC inliers need not agree with the model in keypoint scale (x1.5) and orientation "
             "(30 degrees)"},
    {.name = "guided", .type = CLI_FLAG,
     .help = "guided matching after RANSAC: match again inside the neighbourhoods its model "
             "predicts, then RANSAC on those matches (more inliers for genuine and content-sharing "
             "queries alike)"},
    {.name = "guided-ratio", .type = CLI_NUMBER, .arg = "R", .min = PATINA_RATIO_MIN, .max = PATINA_RATIO_MAX,
     .flags = CLI_OPEN_MIN, .def = PATINA_STRINGIFY(PATINA_GUIDED_RATIO_DEFAULT),
     .help = "guided matching's ratio test: the nearest reference feature inside the predicted "
             "neighbourhood must be closer than R times the nearest one elsewhere"},
    {.name = "iterations", .type = CLI_INT, .arg = "N", .min = 1, .max = PATINA_ITERATIONS_MAX,
     .def = PATINA_STRINGIFY(PATINA_ITERATIONS_DEFAULT),
     .help = "RANSAC iteration cap (adaptive stopping at 99.9% confidence)"},
    /* the library takes any uint64_t; the command line reads integers exactly up to 2^53 */
    {.name = "seed", .type = CLI_INT, .arg = "S", .min = 0, .max = 9007199254740992.0, .def = "0",
     .help = "RANSAC seed (results are deterministic for a seed)"},
    {.name = "threshold", .type = CLI_NUMBER, .arg = "T", .min = 0, .max = PATINA_THRESHOLD_MAX,
     .help = "accept rank 1 when its score (see --accept; matches with --no-verify) is >= T; 0 "
             "accepts every query with a candidate. The default is --far 0.01's, the table's "
             "calibration: at most 1% of the identification benchmark's clean impostor queries "
             "accepted (with --accept significance: default " PATINA_STRINGIFY(PATINA_SIGNIFICANCE_DEFAULT)
             " without reference views, " PATINA_STRINGIFY(PATINA_SIGNIFICANCE_VIEWS1) " with views=1, "
             PATINA_STRINGIFY(PATINA_SIGNIFICANCE_VIEWS2) " with views=2, "
             PATINA_STRINGIFY(PATINA_SIGNIFICANCE_VIEWS3) " with views=3; with "
             "--accept inliers: " PATINA_STRINGIFY(PATINA_THRESHOLD_DEFAULT) " and 24; --view-candidates and "
             "--half-view-features take rows of their own, e.g. 3 and 3.9 with views=3, and --half-query "
             "the stricter of those and its own, 3.03 without views and 3.99 with views=3 and both: "
             "docs/identify.md)"},
    {.name = "accept", .type = CLI_CHOICE, .choices = "significance|inliers", .def = "significance",
     .help = "what --threshold is compared with: the a-contrario significance of rank 1's inliers, "
             "-log10 of their expected number of false alarms given its correspondences, the model "
             "and the reference's area (k inliers of few matches weigh more than k of many); or "
             "the inlier count"},
    {.name = "far", .type = CLI_NUMBER, .arg = "F", .min = PATINA_FAR_MIN, .max = 1,
     .help = "instead of --threshold: the threshold calibrated for a false-accept rate F on the "
             "identification benchmark, for --accept and the table's reference views (0.05 ... " PATINA_STRINGIFY(PATINA_FAR_MIN)
             "; 1 accepts every query)"},
    {.name = "ambiguity", .type = CLI_NUMBER, .arg = "A", .min = 0, .max = 1,
     .def = PATINA_STRINGIFY(PATINA_AMBIGUITY_DEFAULT),
     .help = "answer ambiguous (both keys) only when the verified rank 2 of another item reaches the "
             "threshold and holds at least A times rank 1's score; 0: whenever it reaches the "
             "threshold"},
    {.name = "distinct", .type = CLI_NUMBER, .arg = "D", .min = 0, .max = PATINA_THRESHOLD_MAX, .def = "0",
     .help = "accept rank 1 only when its inliers exceed the verified rank 2's by at least D, rank 2 "
             "counting 0 when the two references are siblings (--sibling-inliers); 0: off. On the "
             "identification benchmark (views=2) --accept inliers --threshold 4 --distinct 3 rejects "
             "2.75% of genuine queries at FAR 0.57%"},
    {.name = "sibling-inliers", .type = CLI_NUMBER, .arg = "S", .min = 1, .max = PATINA_THRESHOLD_MAX,
     .def = PATINA_STRINGIFY(PATINA_SIBLING_INLIERS_DEFAULT),
     .help = "--distinct: two references are siblings when one's image verifies against the other's "
             "rows with at least S inliers"},
    {.name = "view-candidates", .type = CLI_INT, .arg = "N", .min = 0, .max = PATINA_K_MAX, .def = "0",
     .help = "references with views (index --views): match the items' registered images first, "
             "then the views of the best N items by those (a third of the matching with --views 2; "
             "an item whose image ranks below N is not rescued by its views); 0: every view of every "
             "item"},
    {.name = "first-features", .type = CLI_INT, .arg = "F", .min = 0, .max = 16384, .def = "0",
     .help = "match every reference with each query's F strongest features, then the best candidates "
             "(k, --verify-top, --view-candidates) again with all of them, views included (matching "
             "costs about F / n of the full pass; a reference whose F-feature matches rank below the "
             "candidates is not rescued); 0: all features at once"},
    {.name = "half-view-features", .type = CLI_INT, .arg = "H", .min = 0, .max = 16384, .def = "0",
     .help = "with --view-candidates, over references indexed with a half-size view (--views 1 or 3): "
             "the first pass also matches each item's half-size view with the query's H strongest "
             "features, so that a photograph taken at about half the scale keeps its item among the "
             "candidates (the first pass reads the half-size views too: on one H200 about 17 ms more "
             "at a million items); 0: the first rows alone"},
    {.name = "half-query", .type = CLI_INT, .arg = "F", .min = 0, .max = 16384, .def = "0",
     .help = "also identify each photograph halved (a close-up meets its registered image at about its "
             "scale once halved), its first pass on its F strongest features, and keep its answer where "
             "its score less --half-query-margin beats the photograph's (with --first-features both share "
             "one pass over the references: on one H200 about 6 ms more at a million items; else about one "
             "more first pass of F rows; docs/identify.md \"The half-size query\"); 0: off"},
    {.name = "half-query-margin", .type = CLI_NUMBER, .arg = "M", .min = 0, .max = 1e6, .def = "10",
     .help = "the margin the half-size query's score must win by (its scores are reported less M)"},
    {.name = "table", .type = CLI_TEXT, .arg = "SPEC",
     .help = "the rootsift table, when the collection has several ('patina info' lists them)"},
    {.name = "format", .type = CLI_CHOICE, .choices = "table|csv|json", .def = "table",
     .help = "output format (see below)"},
    CLI_OPT_DEVICE("where matching runs: gpu (tensor cores), cpu, or auto (the gpu when usable); the same "
                   "answers"),
    {.name = "precision", .type = CLI_CHOICE, .choices = "int8|fp16", .def = "int8",
     .help = "GPU tensor cores: int8 (u8 rows as stored) or fp16 (an fp16 copy); exact either way"},
    CLI_OPT_JOBS,
    CLI_OPT_GPUS,
    CLI_OPT_MAX_PIXELS,
    CLI_OPT_STRICT,
    CLI_OPT_EXIF_ORIENTATION,
    CLI_OPT_WALK_FILTERS,
    {.name = "quiet", .letter = 'q', .type = CLI_FLAG, .help = "no progress line"},
    CLI_OPT_CLUSTER_URL,
    {.name = "deadline", .type = CLI_INT, .arg = "MS", .min = 1, .max = 600000, .def = "5000",
     .help = "--cluster: how long a shard may take before its partitions are asked of another copy"},
    {.name = "hedge", .type = CLI_INT, .arg = "MS", .min = 0, .max = 600000, .flags = CLI_AUTO, .def = "auto",
     .help = "--cluster: a shard that has not answered after MS has its partitions also asked of their next "
             "ready copy, the first answer winning (auto: a fifth of --deadline)"},
    {.name = "no-partial", .type = CLI_FLAG,
     .help = "--cluster: fail (exit 3) rather than answer from the partitions that have a live copy"},
};

const cli_command_t cli_cmd_identify = {
    .name = "identify",
    .summary = "identify query photos against a rootsift collection, or say unknown",
    .operands = "COLLECTION QUERY...",
    .min_operands = 2,
    .max_operands = -1,
    .about = "For each query image (files, or folders walked like `index`), extracts\n"
             "RootSIFT features with the collection's rootsift spec at its query budget n,\n"
             "matches them against every reference (2-NN and Lowe's ratio test), scores the\n"
             "references, verifies the best with RANSAC (with --guided, matches again where\n"
             "its model predicts and verifies those), re-ranks them by inliers and accepts\n"
             "rank 1 when its score reaches --threshold (or --far's); otherwise: unknown.\n"
             "When rank 2 (another item) is verified, reaches it too and holds at least\n"
             "--ambiguity times rank 1's score, the query shows content of both: ambiguous.\n",
    .opts = opts,
    .nopts = sizeof opts / sizeof opts[0],
    .notes = "output:\n"
             "  table  per query a header line (decision, features), a line per candidate\n"
             "         (scores with 6 significant digits)\n"
             "  csv    header query,rank,key,score,inliers,decision; then per query one\n"
             "         row per candidate, rank 1..k in ranking order. score: verified\n"
             "         significance or inliers (--accept), else the scoring rule's\n"
             "         matches; inliers: 0 when not verified; decision: match,\n"
             "         ambiguous or unknown on rank 1, - on the other rows. A query\n"
             "         with no features or no candidate: one row QUERY,0,,0,0,unknown.\n"
             "         Fields with a comma, a double quote, CR or LF are quoted (RFC\n"
             "         4180).\n"
             "  json   one object per query: {\"query\",\"decision\",\"features\",\"hits\":\n"
             "         [{\"rank\",\"id\",\"key\",\"score\",\"matches\",\"inliers\",\"verified\"}]};\n"
             "         with --half-query also \"half_query\":{\"features\",\"margin\",\"taken\"}\n"
             "         before the hits (taken: the halved photograph's answer was kept;\n"
             "         the table format says so after the decision);\n"
             "         a video frame's hit (key FILE#t=SECONDS&f=FRAME) also has\n"
             "         \"video\":{\"file\",\"t\",\"frame\"} after its key, and its table row\n"
             "         the time (H:MM:SS.mmm) after the key\n"
             "A query that cannot be read is reported and the others answered (exit 1). A\n"
             "collection without a rootsift table cannot be identified against (exit 3).\n",
    .run = run_identify,
};

typedef struct out_ctx {
    int fmt;              /* 0 table, 1 csv, 2 json */
    size_t half_features; /* --half-query (0: off) */
    double half_margin;   /* --half-query-margin */
} out_ctx_t;

/* One query's answer; keys[r] as the table looked it up (NULL: removed meanwhile, "?"); cov: a
 * cluster's answer, else NULL; taken: the half-size query's answer was kept (--half-query). */
static void print_query(const out_ctx_t *oc, const char *query, const patina_identify_hit_t *hits,
                        char *const *keys, const patina_identify_result_t *res, int incomplete,
                        const cli_cov_t *cov, int taken)
{
    FILE *f = stdout;
    /* a cluster's answer from some partitions only is never "unknown" (nor a match that a missing
     * partition could change): "incomplete" */
    const char *dec = incomplete ? "incomplete" : patina_identify_decision_name(res->decision);
    size_t r;
    if (oc->fmt == 1 && res->nhits == 0) {
        cli_csv_field(f, query);
        fputs(",0,,0,0,unknown\n", f);
        return;
    }
    if (oc->fmt == 2) {
        fputs("{\"query\":", f);
        cli_json_string(f, query);
        if (cov) cli_json_coverage(f, cov);
        fprintf(f, ",\"decision\":\"%s\",\"features\":%u,", dec, (unsigned)res->query_features);
        if (oc->half_features)
            fprintf(f, "\"half_query\":{\"features\":%zu,\"margin\":%.17g,\"taken\":%s},", oc->half_features,
                    oc->half_margin, taken ? "true" : "false");
        fputs("\"hits\":[", f);
    } else if (oc->fmt == 0) {
        fprintf(f, "query %s: %s (%u feature%s, %zu candidate%s%s)\n", query, dec, (unsigned)res->query_features,
                cli_plural(res->query_features), res->nhits, cli_plural(res->nhits),
                taken ? "; answered by the photograph halved" : "");
        if (res->nhits) fprintf(f, "  %4s  %7s  %7s  %7s  %s\n", "rank", "score", "inliers", "matches", "key");
    }
    for (r = 0; r < res->nhits; r++) {
        const char *key = keys[r] ? keys[r] : "?";
        if (oc->fmt == 1) {
            cli_csv_field(f, query);
            fprintf(f, ",%zu,", r + 1);
            cli_csv_field(f, key);
            fprintf(f, ",%.17g,%u,%s\n", hits[r].score, (unsigned)hits[r].inliers, r ? "-" : dec);
        } else if (oc->fmt == 2) {
            fprintf(f, "%s{\"rank\":%zu,\"id\":%llu,\"key\":", r ? "," : "", r + 1, (unsigned long long)hits[r].id);
            cli_json_string(f, key);
            cli_video_json(f, keys[r]);
            fprintf(f, ",\"score\":%.17g,\"matches\":%u,\"inliers\":%u,\"verified\":%s}", hits[r].score,
                    (unsigned)hits[r].matches, (unsigned)hits[r].inliers, hits[r].verified ? "true" : "false");
        } else {
            fprintf(f, "  %4zu  %7.6g  %7u  %7u  %s", r + 1, hits[r].score, (unsigned)hits[r].inliers,
                    (unsigned)hits[r].matches, key);
            cli_video_note(f, keys[r]);
            fputc('\n', f);
        }
    }
    if (oc->fmt == 2) fputs("]}\n", f);
}

static void on_skip(void *user, const char *path, patina_status s, const char *msg)
{
    (void)user;
    (void)path;
    (void)s;
    cli_error("identify", "%s", msg);
}

static int run_identify(const cli_args_t *a)
{
    const char *format = cli_get(a, "format")->text;
    patina_identify_opts_t io;
    patina_device device;
    patina_context_t *ctx = NULL;
    patina_collection_t *coll = NULL;
    patina_table_t *table = NULL;
    patina_table_opts_t topts;
    char **keys = NULL;
    patina_load_opts_t lopts;
    char **files = NULL;
    size_t nfiles = 0, skipped = 0, done = 0, qbytes, i;
    patina_walk_opts_t wopts;
    patina_walk_stats_t wstats;
    patina_image_t *images = NULL;
    patina_load_result_t *lres = NULL;
    unsigned char *qrec = NULL, *hrec = NULL, *htaken = NULL; /* htaken: --half-query's answers kept */
    size_t half_features;
    double half_margin;
    patina_status *st = NULL;
    patina_identify_hit_t *hits = NULL;
    patina_identify_result_t *res = NULL;
    size_t *slot = NULL;
    out_ctx_t oc;
    int rc = EXIT_OK, progress, *incomplete = NULL;
    cli_cov_t icov = {0, 0, 0, 0};
#if PATINA_HAVE_CLUSTER
    clu_session_t *cs = NULL;
#else
    void *cs = NULL;
#endif
    patina_status s;

    oc.fmt = !strcmp(format, "table") ? 0 : !strcmp(format, "csv") ? 1 : 2;
    oc.half_features = 0;
    oc.half_margin = 0;
    patina_identify_opts_init(&io);
    io.k = (size_t)cli_get(a, "k")->i;
    io.ratio = cli_get(a, "ratio")->num;
    io.scoring = (patina_identify_scoring)cli_get(a, "scoring")->i;
    io.verify = !cli_get(a, "no-verify")->i;
    io.verify_top = (size_t)cli_get(a, "verify-top")->i;
    io.model = (patina_identify_model)cli_get(a, "model")->i;
    io.ransac_threshold = cli_get(a, "ransac-threshold")->num;
    io.iterations = (int)cli_get(a, "iterations")->i;
    io.seed = (uint64_t)cli_get(a, "seed")->i;
    io.threshold = cli_get(a, "threshold")->given ? cli_get(a, "threshold")->num : PATINA_THRESHOLD_CALIBRATED;
    io.shape_check = !cli_get(a, "no-shape-check")->i;
    io.guided = (int)cli_get(a, "guided")->i;
    io.guided_ratio = cli_get(a, "guided-ratio")->num;
    io.ambiguity = cli_get(a, "ambiguity")->num;
    io.distinct = cli_get(a, "distinct")->num;
    io.sibling_inliers = cli_get(a, "sibling-inliers")->num;
    io.accept = (patina_identify_accept)cli_get(a, "accept")->i;
    io.view_candidates = (size_t)cli_get(a, "view-candidates")->i;
    io.first_features = (size_t)cli_get(a, "first-features")->i;
    io.half_view_features = (size_t)cli_get(a, "half-view-features")->i;
    half_features = (size_t)cli_get(a, "half-query")->i;
    half_margin = cli_get(a, "half-query-margin")->num;
    oc.half_features = half_features;
    oc.half_margin = half_margin;
    if (cli_get(a, "far")->given) {
        if (cli_get(a, "threshold")->given) {
            cli_error("identify", "--far and --threshold both set the acceptance threshold: give one");
            return EXIT_USAGE;
        }
        if (patina_identify_far_threshold_opts(NULL, &io, cli_get(a, "far")->num, &io.threshold) != PATINA_OK) {
            cli_error("identify", "%s", patina_last_error());
            return EXIT_USAGE;
        }
    }
    io.precision = (patina_identify_precision)cli_get(a, "precision")->i;
    if (patina_device_parse(&device, cli_get(a, "device")->text) != PATINA_OK || device == PATINA_DEVICE_HYBRID) {
        cli_error("identify", "--device %s is not an identification device (cpu, gpu, auto)",
                  cli_get(a, "device")->text);
        return EXIT_USAGE;
    }
    io.device = device;
    progress = !cli_get(a, "quiet")->i && isatty(2);
    if ((rc = cli_context(&ctx, a)) != 0) return rc;
    if (cli_get(a, "cluster")->given) {
#if PATINA_HAVE_CLUSTER
        clu_front_opts_t fo;
        clu_front_opts_init(&fo);
        fo.deadline_ms = (int)cli_get(a, "deadline")->i;
        fo.allow_partial = !cli_get(a, "no-partial")->i;
        fo.hedge_ms = cli_get(a, "hedge")->is_auto ? -1 : (int)cli_get(a, "hedge")->i;
        if ((s = clu_session_open(&cs, cli_get(a, "cluster")->text, a->operands[0], &fo)) != PATINA_OK ||
            (s = clu_session_table(cs, ctx, cli_get(a, "table")->set ? cli_get(a, "table")->text : NULL,
                                   PATINA_CAP_IDENTIFY, &table)) != PATINA_OK) {
            cli_error("identify", "%s", clu_last_error());
            rc = s == PATINA_E_NOTFOUND || s == PATINA_E_INVALID ? EXIT_USAGE : EXIT_ERROR;
            goto out;
        }
#else
        cli_error("identify", "--cluster: this build has no cluster support (libnats-dev was not found)");
        rc = EXIT_ERROR;
        goto out;
#endif
    } else if ((s = patina_collection_open(&coll, a->operands[0], PATINA_OPEN_READONLY, 0)) != PATINA_OK) {
        cli_status_error("identify", s);
        rc = EXIT_ERROR;
        goto out;
    }
    /* the identification table: --table, else the collection's only one; a collection without one
     * (or with several and no --table) is a usage error, as `search -f` is */
    patina_table_opts_init(&topts);
    topts.need = PATINA_CAP_IDENTIFY;
    s = table ? PATINA_OK
              : patina_table_open(&table, ctx, coll, cli_get(a, "table")->set ? cli_get(a, "table")->text : NULL, &topts);
    if (s == PATINA_OK) s = patina_table_refresh(table, NULL);
    if (s != PATINA_OK) {
        cli_error("identify", "collection '%s': %s", a->operands[0], patina_last_error());
        rc = s == PATINA_E_NOTFOUND || s == PATINA_E_INVALID ? EXIT_USAGE : EXIT_ERROR;
        goto out;
    }
    /* the table's calibration (its reference views have their own): --far's, and without
     * --threshold the default's (far 0.01: the default threshold for a table without views) */
    if (!cli_get(a, "threshold")->given &&
        (half_features ? patina_identify_far_threshold_half : patina_identify_far_threshold_opts)(
            patina_table_spec(table), &io, cli_get(a, "far")->given ? cli_get(a, "far")->num : PATINA_FAR_DEFAULT,
            &io.threshold) != PATINA_OK) {
        cli_error("identify", "%s", patina_last_error());
        rc = EXIT_USAGE;
        goto out;
    }
    patina_walk_opts_init(&wopts);
    cli_walk_filters(a, &wopts);
    wopts.on_error = on_skip;
    s = patina_walk(&files, &nfiles, (const char *const *)a->operands + 1, a->noperands - 1, &wopts, &wstats);
    skipped = wstats.skipped;
    if (s != PATINA_OK) {
        cli_status_error("identify", s);
        rc = EXIT_ERROR;
        goto out;
    }
    if (skipped) rc = EXIT_PARTIAL;
    qbytes = patina_table_query_bytes(table);
    images = calloc(nfiles + 1, sizeof *images);
    lres = calloc(nfiles + 1, sizeof *lres);
    qrec = malloc((nfiles + 1) * qbytes);
    hrec = half_features ? malloc((nfiles + 1) * qbytes) : NULL;
    st = calloc(nfiles + 1, sizeof *st);
    hits = calloc((nfiles + 1) * io.k, sizeof *hits);
    res = calloc(nfiles + 1, sizeof *res);
    slot = calloc(nfiles + 1, sizeof *slot);
    keys = calloc((nfiles + 1) * io.k, sizeof *keys);
    incomplete = calloc(nfiles + 1, sizeof *incomplete);
    htaken = calloc(nfiles + 1, 1);
    if (!incomplete || !htaken || !images || !lres || !qrec || !st || !hits || !res || !slot || !keys || (half_features && !hrec)) {
        cli_error("identify", "out of memory for %zu queries", nfiles);
        rc = EXIT_ERROR;
        goto out;
    }
    patina_load_opts_init(&lopts);
    lopts.strict = (int)cli_get(a, "strict")->i;
    lopts.apply_orientation = (int)cli_get(a, "exif-orientation")->i;
    if (oc.fmt == 1) fputs("query,rank,key,score,inliers,decision\n", stdout);
    while (done < nfiles) {
        size_t taken = 0, nq = 0;
        /* decode a batch (bounded by the batch memory), extract, identify */
        if ((s = patina_load_files(ctx, images, lres, &taken, (const char *const *)files + done, nfiles - done,
                                   &lopts)) != PATINA_OK) {
            cli_status_error("identify", s);
            rc = EXIT_ERROR;
            goto out;
        }
        for (i = 0; i < taken; i++) {
            if (lres[i].status != PATINA_OK) {
                cli_error("identify", "%s", lres[i].error);
                rc = EXIT_PARTIAL;
                continue;
            }
            if (lres[i].report.warnings) cli_error("identify", "%s", lres[i].report.warning);
            images[nq] = images[i];
            slot[nq++] = i;
        }
        s = patina_table_identify_extract(table, NULL, qrec, images, nq, st);
        if (s == PATINA_OK && half_features) s = patina_table_identify_extract_half(table, NULL, hrec, images, nq, NULL);
        for (i = 0; i < nq; i++) patina_image_release(&images[i]);
#if PATINA_HAVE_CLUSTER
        if (cs && s == PATINA_OK) {
            clu_coverage_t cov;
            s = half_features ? clu_front_identify_half(clu_session_front(cs), patina_table_spec(table), qrec, hrec,
                                                        nq, qbytes, half_features, half_margin, &io, hits, res, keys,
                                                        incomplete, htaken, &cov)
                              : clu_front_identify(clu_session_front(cs), patina_table_spec(table), qrec, nq, qbytes,
                                                   &io, hits, res, keys, incomplete, &cov);
            if (s != PATINA_OK) {
                cli_error("identify", "%s", clu_last_error());
                rc = EXIT_ERROR;
                goto out;
            }
            icov = (cli_cov_t){cov.partitions, cov.partitions_total, (unsigned long long)cov.references,
                               cov.partial};
            if (cov.partial) {
                cli_error("identify", "partial answer: %u of %u partitions, %llu references (%s)", cov.partitions,
                          cov.partitions_total, (unsigned long long)cov.references, cov.failure);
                rc = EXIT_PARTIAL;
            }
        } else
#endif
        if (s == PATINA_OK)
            s = half_features ? patina_table_identify_half(table, qrec, hrec, nq, half_features, half_margin, &io, hits,
                                                           res, keys, htaken)
                              : patina_table_identify(table, qrec, nq, &io, hits, res, keys);
        if (s != PATINA_OK) {
            cli_status_error("identify", s);
            rc = EXIT_ERROR;
            goto out;
        }
        if (progress) fputs("\r\033[K", stderr);
        for (i = 0; i < nq; i++) {
            const char *q = files[done + slot[i]];
            if (st[i] != PATINA_OK) {
                cli_error("identify", "'%s': extraction failed (%s); answered as a query without features", q,
                          patina_status_str(st[i]));
                rc = EXIT_PARTIAL;
            }
            print_query(&oc, q, hits + i * io.k, keys + i * io.k, &res[i], incomplete[i], cs ? &icov : NULL,
                        htaken[i]);
        }
        for (i = 0; i < nq * io.k; i++) {
            free(keys[i]);
            keys[i] = NULL;
        }
        fflush(stdout);
        done += taken;
        if (progress) fprintf(stderr, "identify: %zu/%zu queries against %zu references (%zu rows)", done, nfiles,
                              patina_table_size(table), patina_table_matched_rows(table));
    }
    if (progress) fputs("\r\033[K", stderr);
out:
    if (fflush(stdout) != 0) rc = EXIT_ERROR;
    for (i = 0; i < nfiles; i++) free(files[i]);
    free(files);
    free(images);
    free(lres);
    free(qrec);
    free(hrec);
    free(st);
    free(hits);
    free(res);
    free(slot);
    free(keys);
    free(incomplete);
    free(htaken);
    patina_table_free(table);
    patina_collection_close(coll);
#if PATINA_HAVE_CLUSTER
    clu_session_close(cs);
#endif
    patina_context_free(ctx);
    return rc;
}
