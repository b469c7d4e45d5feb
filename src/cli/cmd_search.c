/* patina search: nearest images in a collection for each query image. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static int run_search(const cli_args_t *a);

static const cli_opt_t opts[] = {
    {.name = "family", .letter = 'f', .type = CLI_TEXT, .arg = "SPEC", .def = "cedd",
     .help = "descriptor table to search: a family and its options, as indexed "
             "('patina info COLLECTION' lists the collection's tables)"},
    {.name = "k", .letter = 'k', .type = CLI_INT, .arg = "K", .min = 1, .max = 1000000, .def = "10",
     .conflicts = "range", .help = "the K nearest"},
    {.name = "range", .type = CLI_NUMBER, .arg = "R", .min = 0, .max = HUGE_VAL, .conflicts = "k",
     .help = "every image with distance <= R instead of the K nearest"},
    {.name = "format", .type = CLI_CHOICE, .choices = "table|csv|json", .def = "table",
     .help = "output format (see below)"},
    CLI_OPT_DEVICE("where query descriptors are computed and, for CEDD with -k, where "
                   "the k-NN runs (same results; auto: the GPU when one is usable)"),
    CLI_OPT_JOBS,
    CLI_OPT_MAX_PIXELS,
    CLI_OPT_STRICT,
};

const cli_command_t cli_cmd_search = {
    .name = "search",
    .summary = "find the nearest images in a collection",
    .operands = "COLLECTION IMAGE...",
    .min_operands = 2,
    .max_operands = -1,
    .about = "Ranks the collection's images by the family's distance to each query image\n"
             "(CEDD: LIRE's Tanimoto, 0 = identical .. 100). Ties are ordered by id.\n",
    .opts = opts,
    .nopts = sizeof opts / sizeof opts[0],
    .notes = "output:\n"
             "  table  per query a header line and one line per hit (default)\n"
             "  csv    QUERY,RANK,KEY,DISTANCE per hit, no header; RANK from 1, DISTANCE\n"
             "         with %.17g. QUERY or KEY holding a comma, a double quote, CR or LF is\n"
             "         quoted as RFC 4180 says (quotes doubled); lines end with LF.\n"
             "  json   one object per query: {\"query\",\"hits\":[{\"rank\",\"id\",\"key\",\n"
             "         \"distance\"}]}; strings escape every control character, bytes that are\n"
             "         not UTF-8 become \\udc80..\\udcff (Python's surrogateescape).\n"
             "A -f whose table the collection does not have is a usage error (exit status 2;\n"
             "the message lists the collection's tables): the command line asks for\n"
             "something this collection cannot answer, nothing is wrong with the collection.\n"
             "A query that cannot be read is reported and the others answered (exit 1).\n",
    .run = run_search,
};

/* Keys come from the snapshot the index was loaded from: every hit has one. */
static void print_hits(FILE *f, int fmt, patina_snapshot_t *snap, const char *query,
                       const patina_hit_t *hits, size_t n)
{
    size_t r;
    if (fmt == 2) {
        fputs("{\"query\":", f);
        cli_json_string(f, query);
        fputs(",\"hits\":[", f);
    } else if (fmt == 0) {
        fprintf(f, "query %s: %zu hit%s\n", query, n, n == 1 ? "" : "s");
        if (n) fprintf(f, "  %4s  %-22s  %s\n", "rank", "distance", "key");
    }
    for (r = 0; r < n; r++) {
        patina_record_t rec;
        const char *key = "?";
        int have = patina_snapshot_get(snap, &hits[r].id, 1, &rec) == PATINA_OK;
        if (have) key = rec.key;
        if (fmt == 1) {
            cli_csv_field(f, query);
            fprintf(f, ",%zu,", r + 1);
            cli_csv_field(f, key);
            fprintf(f, ",%.17g\n", hits[r].distance);
        } else if (fmt == 2) {
            fprintf(f, "%s{\"rank\":%zu,\"id\":%llu,\"key\":", r ? "," : "", r + 1,
                    (unsigned long long)hits[r].id);
            cli_json_string(f, key);
            fprintf(f, ",\"distance\":%.17g}", hits[r].distance);
        } else {
            fprintf(f, "  %4zu  %-22.17g  %s\n", r + 1, hits[r].distance, key);
        }
        if (have) patina_record_release(&rec);
    }
    if (fmt == 2) fputs("]}\n", f);
}

/* Fails with a message listing the collection's tables when it has none
 * named `spec`: asking for it is a usage error, not "0 hits". */
static int check_table(patina_collection_t *coll, const char *path, const patina_extractor_t *ex)
{
    char **specs = NULL;
    size_t n = 0, rows, bytes, k, len = 0;
    char list[2048];
    patina_status s = patina_collection_table_info(coll, patina_extractor_spec(ex), &rows, &bytes);
    if (s == PATINA_OK) return EXIT_OK;
    if (s != PATINA_E_NOTFOUND) {
        cli_status_error("search", s);
        return EXIT_ERROR;
    }
    if ((s = patina_collection_tables(coll, &specs, &n)) != PATINA_OK) {
        cli_status_error("search", s);
        return EXIT_ERROR;
    }
    list[0] = '\0';
    for (k = 0; k < n; k++) {
        if (len < sizeof list)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", k ? ", " : "", specs[k]);
        free(specs[k]);
    }
    free(specs);
    if (n)
        cli_error("search", "collection '%s' has no table '%s' (-f %s); its tables: %s", path,
                  patina_extractor_spec(ex), patina_extractor_family(ex), list);
    else
        cli_error("search", "collection '%s' has no descriptor tables yet (index images into it first)",
                  path);
    return EXIT_USAGE;
}

static int run_search(const cli_args_t *a)
{
    const char *family = cli_get(a, "family")->text;
    const char *format = cli_get(a, "format")->text;
    patina_device device;
    patina_decode_opts_t dopts;
    patina_extractor_t *ex = NULL;
    patina_context_t *ctx = NULL;
    patina_collection_t *coll = NULL;
    patina_snapshot_t *snap = NULL;
    patina_index_t *idx = NULL;
    unsigned char *desc = NULL;
    patina_hit_t *hits = NULL;
    long k = (long)cli_get(a, "k")->i;
    double range = cli_get(a, "range")->num;
    int use_range = cli_get(a, "range")->given, fmt, rc = EXIT_OK;
    size_t q;
    patina_status s;

    fmt = !strcmp(format, "table") ? 0 : !strcmp(format, "csv") ? 1 : 2;
    if (patina_device_parse(&device, cli_get(a, "device")->text) != PATINA_OK) {
        cli_status_error("search", PATINA_E_INVALID);
        return EXIT_USAGE;
    }
    if ((s = patina_extractor_new(&ex, family)) != PATINA_OK) {
        cli_status_error("search", s);
        return EXIT_USAGE;
    }
    if (cli_context(&ctx, a) != 0) {
        rc = EXIT_ERROR;
        goto out;
    }
    patina_decode_opts_init(&dopts);
    dopts.limits = *patina_context_limits(ctx);
    dopts.strict = (int)cli_get(a, "strict")->i;
    if ((s = patina_collection_open(&coll, a->operands[0], PATINA_OPEN_READONLY, 0)) != PATINA_OK) {
        cli_status_error("search", s);
        rc = EXIT_ERROR;
        goto out;
    }
    if ((rc = check_table(coll, a->operands[0], ex)) != EXIT_OK) goto out;
    if ((s = patina_snapshot_new(&snap, coll)) != PATINA_OK ||
        (s = patina_index_load_snapshot(&idx, ex, snap)) != PATINA_OK) {
        cli_status_error("search", s);
        rc = EXIT_ERROR;
        goto out;
    }
    desc = malloc(patina_extractor_bytes(ex));
    hits = malloc(sizeof *hits * (size_t)k);
    if (!desc || !hits) {
        cli_error("search", "out of memory");
        rc = EXIT_ERROR;
        goto out;
    }
    for (q = 1; q < a->noperands; q++) {
        const char *query = a->operands[q];
        patina_image_t img;
        patina_decode_report_t report;
        patina_status st;
        size_t n = 0;
        s = patina_image_load_with(&img, &report, query, &dopts);
        if (s != PATINA_OK) {
            cli_status_error("search", s);
            rc = EXIT_PARTIAL;
            continue;
        }
        if (report.warnings) cli_error("search", "%s", report.warning);
        s = patina_extract_batch(ctx, ex, device, desc, &img, 1, &st);
        if (s == PATINA_OK && st != PATINA_OK) {
            char msg[PATINA_ERROR_MAX];
            cli_extract_error(msg, sizeof msg, ctx, ex, &img, query, st);
            patina_image_release(&img);
            cli_error("search", "%s", msg);
            rc = EXIT_PARTIAL;
            continue;
        }
        patina_image_release(&img);
        if (s != PATINA_OK) {
            cli_status_error("search", s);
            rc = EXIT_ERROR;
            goto out;
        }
        {
            patina_search_opts_t so;
            patina_search_opts_init(&so);
            so.device = device == PATINA_DEVICE_HYBRID ? PATINA_DEVICE_AUTO : device;
            if (use_range) {
                patina_hit_t *rh = NULL;
                so.device = PATINA_DEVICE_CPU;
                s = patina_index_range(ctx, idx, desc, 1, range, &so, &rh, &n);
                if (s == PATINA_OK) print_hits(stdout, fmt, snap, query, rh, n);
                free(rh);
            } else {
                s = patina_index_knn(ctx, idx, desc, 1, (size_t)k, &so, hits, &n);
                if (s == PATINA_OK) print_hits(stdout, fmt, snap, query, hits, n);
            }
        }
        if (s != PATINA_OK) {
            cli_status_error("search", s);
            rc = EXIT_ERROR;
            goto out;
        }
    }
out:
    if (fflush(stdout) != 0) rc = EXIT_ERROR;
    free(desc);
    free(hits);
    patina_index_free(idx);
    patina_snapshot_free(snap);
    patina_collection_close(coll);
    patina_context_free(ctx);
    patina_extractor_free(ex);
    return rc;
}
