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
    /* bounds and defaults: the library's table (include/patina/options.h; test_cli checks them) */
    {.name = "k", .letter = 'k', .type = CLI_INT, .arg = "K", .min = 1, .max = PATINA_K_MAX,
     .def = PATINA_STRINGIFY(PATINA_SEARCH_K_DEFAULT),
     .conflicts = "range", .help = "the K nearest"},
    {.name = "range", .type = CLI_NUMBER, .arg = "R", .min = 0, .max = HUGE_VAL, .conflicts = "k",
     .help = "every image with distance <= R instead of the K nearest"},
    {.name = "format", .type = CLI_CHOICE, .choices = "table|csv|json", .def = "table",
     .help = "output format (see below)"},
    {.name = "batch", .type = CLI_TEXT, .arg = "FILE",
     .help = "more query images: one path per line of FILE ('-': standard input), after "
             "those on the command line"},
    {.name = "bound", .type = CLI_CHOICE, .arg = "B", .choices = "ptolemaic|metric|none", .def = "ptolemaic",
     .help = "-f signature with a pivot table (patina index --pivots): the lower bounds that skip "
             "distances (same results; none computes every distance)"},
    {.name = "stats", .type = CLI_FLAG,
     .help = "print on stderr how many distances were computed and how many rows were pruned"},
    CLI_OPT_DEVICE("where query descriptors are computed and the search runs (same results; "
                   "auto: the GPU when one is usable and the table is large enough)"),
    {.name = "gpu", .type = CLI_FLAG, .conflicts = "device",
     .help = "the same as --device gpu: fail rather than search on the CPU"},
    CLI_OPT_JOBS,
    CLI_OPT_MAX_PIXELS,
    CLI_OPT_STRICT,
};

const cli_command_t cli_cmd_search = {
    .name = "search",
    .summary = "find the nearest images in a collection",
    .operands = "COLLECTION [IMAGE...]",
    .min_operands = 1,
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
             "A query that cannot be read is reported and the others answered (exit 1).\n"
             "With -f signature and a pivot table in the collection (patina index --pivots N)\n"
             "the search runs on the CPU through the table: the same hits, fewer SQFDs.\n"
             "Queries are decoded, described and searched in batches of 256 (one search\n"
             "call per batch); results are printed in the order the queries were given.\n",
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

#define SEARCH_BATCH 256 /* queries per extraction and search call */

/* The query paths: the operands after the collection, then the lines of
 * --batch FILE (empty lines skipped; '-' reads standard input). */
static int query_list(const cli_args_t *a, char ***out, size_t *n)
{
    const cli_value_t *bv = cli_get(a, "batch");
    char **v = NULL, line[4096];
    size_t cap = 0, m = 0;
    FILE *f = NULL;
    size_t q;
    *out = NULL;
    *n = 0;
    for (q = 1; q < a->noperands; q++) {
        if (m == cap) {
            char **t = realloc(v, (cap = cap ? 2 * cap : 64) * sizeof *v);
            if (!t) goto nomem;
            v = t;
        }
        if (!(v[m] = strdup(a->operands[q]))) goto nomem;
        m++;
    }
    if (bv->given) {
        f = strcmp(bv->text, "-") ? fopen(bv->text, "r") : stdin;
        if (!f) {
            cli_error("search", "cannot read --batch %s", bv->text);
            goto fail;
        }
        while (fgets(line, sizeof line, f)) {
            size_t len = strlen(line);
            while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
            if (!len) continue;
            if (m == cap) {
                char **t = realloc(v, (cap = cap ? 2 * cap : 64) * sizeof *v);
                if (!t) goto nomem;
                v = t;
            }
            if (!(v[m] = strdup(line))) goto nomem;
            m++;
        }
        if (ferror(f)) {
            cli_error("search", "error reading --batch %s", bv->text);
            goto fail;
        }
        if (f != stdin) fclose(f);
        f = NULL;
    }
    if (m == 0) {
        cli_error("search", "no query images (give IMAGE operands or --batch FILE)");
        goto fail;
    }
    *out = v;
    *n = m;
    return 0;
nomem:
    cli_error("search", "out of memory");
fail:
    if (f && f != stdin) fclose(f);
    while (m) free(v[--m]);
    free(v);
    return -1;
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
    patina_pivot_index_t *pidx = NULL;
    patina_search_stats_t total;
    uint8_t *desc = NULL;
    patina_hit_t *hits = NULL;
    long k = (long)cli_get(a, "k")->i;
    double range = cli_get(a, "range")->num;
    int use_range = cli_get(a, "range")->given, fmt, rc = EXIT_OK;
    char **qs = NULL;
    size_t nq = 0, qi;
    patina_status s;

    fmt = !strcmp(format, "table") ? 0 : !strcmp(format, "csv") ? 1 : 2;
    if (patina_device_parse(&device, cli_get(a, "device")->text) != PATINA_OK) {
        cli_status_error("search", PATINA_E_INVALID);
        return EXIT_USAGE;
    }
    if (cli_get(a, "gpu")->given) device = PATINA_DEVICE_GPU;
    if ((s = patina_extractor_new(&ex, family)) != PATINA_OK) {
        cli_status_error("search", s);
        return EXIT_USAGE;
    }
    if (query_list(a, &qs, &nq) != 0) {
        rc = EXIT_USAGE;
        goto out;
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
    memset(&total, 0, sizeof total);
    if ((s = patina_snapshot_new(&snap, coll)) != PATINA_OK) {
        cli_status_error("search", s);
        rc = EXIT_ERROR;
        goto out;
    }
    /* a pivot table, where the collection has one for this table */
    if (!strcmp(patina_extractor_family(ex), "signature")) {
        s = patina_pivot_index_load_snapshot(&pidx, ctx, ex, snap, NULL);
        if (s != PATINA_OK && s != PATINA_E_NOTFOUND) {
            cli_status_error("search", s);
            rc = EXIT_ERROR;
            goto out;
        }
    }
    if (!pidx && cli_get(a, "bound")->given && cli_get(a, "bound")->i != 2) {
        cli_error("search", "--bound %s: collection '%s' has no pivot table for '%s' (patina index ... -f %s --pivots N)",
                  cli_get(a, "bound")->text, a->operands[0], patina_extractor_spec(ex), patina_extractor_family(ex));
        rc = EXIT_USAGE;
        goto out;
    }
    if (!pidx && (s = patina_index_load_snapshot(&idx, ex, snap)) != PATINA_OK) {
        cli_status_error("search", s);
        rc = EXIT_ERROR;
        goto out;
    }
    {
        const size_t bytes = patina_extractor_bytes(ex);
        patina_image_t *imgs = calloc(SEARCH_BATCH, sizeof *imgs);
        patina_status *sts = calloc(SEARCH_BATCH, sizeof *sts);
        size_t *pos = calloc(SEARCH_BATCH, sizeof *pos), *cnt = calloc(SEARCH_BATCH, sizeof *cnt);
        uint8_t *ok = calloc(SEARCH_BATCH, 1);
        patina_hit_t **rh = calloc(SEARCH_BATCH, sizeof *rh);
        size_t q0;
        desc = malloc(SEARCH_BATCH * bytes);
        hits = use_range ? NULL : malloc(SEARCH_BATCH * (size_t)k * sizeof *hits);
        if (!imgs || !sts || !pos || !cnt || !ok || !rh || !desc || (!use_range && !hits)) {
            cli_error("search", "out of memory");
            rc = EXIT_ERROR;
        }
        for (q0 = 0; rc != EXIT_ERROR && q0 < nq; q0 += SEARCH_BATCH) {
            const size_t m = nq - q0 < SEARCH_BATCH ? nq - q0 : SEARCH_BATCH;
            size_t i, nimg = 0;
            patina_search_opts_t so;
            /* decode; the readable ones are described in one call */
            for (i = 0; i < m; i++) {
                patina_decode_report_t report;
                ok[i] = 0;
                s = patina_image_load_with(&imgs[nimg], &report, qs[q0 + i], &dopts);
                if (s != PATINA_OK) {
                    cli_status_error("search", s);
                    rc = EXIT_PARTIAL;
                    continue;
                }
                if (report.warnings) cli_error("search", "%s", report.warning);
                pos[nimg++] = i;
            }
            s = nimg ? patina_extract_batch(ctx, ex, device, desc, imgs, nimg, sts) : PATINA_OK;
            for (i = 0; i < nimg; i++) {
                if (s == PATINA_OK && sts[i] != PATINA_OK) {
                    char msg[PATINA_ERROR_MAX];
                    cli_extract_error(msg, sizeof msg, ctx, ex, &imgs[i], qs[q0 + pos[i]], sts[i]);
                    cli_error("search", "%s", msg);
                    rc = EXIT_PARTIAL;
                } else if (s == PATINA_OK) {
                    ok[pos[i]] = 1;
                }
                patina_image_release(&imgs[i]);
            }
            if (s != PATINA_OK) {
                cli_status_error("search", s);
                rc = EXIT_ERROR;
                break;
            }
            /* the described queries, packed in order: one search call */
            {
                size_t nd = 0;
                for (i = 0; i < nimg; i++)
                    if (sts[i] == PATINA_OK) {
                        if (nd != i) memmove(desc + nd * bytes, desc + i * bytes, bytes);
                        pos[nd++] = pos[i];
                    }
                patina_search_opts_init(&so);
                so.device = device == PATINA_DEVICE_HYBRID ? PATINA_DEVICE_AUTO : device;
                s = PATINA_OK;
                if (pidx) {
                    patina_pivot_search_opts_t po;
                    patina_search_stats_t st;
                    patina_pivot_search_opts_init(&po);
                    po.bound = (patina_pivot_bound)cli_get(a, "bound")->i;
                    po.stats = &st;
                    /* the GPU filter: device gpu; auto: where the library finds it worth it */
                    po.strategy = so.device == PATINA_DEVICE_GPU    ? PATINA_PIVOT_GPU
                                  : so.device == PATINA_DEVICE_AUTO ? PATINA_PIVOT_AUTO
                                                                    : PATINA_PIVOT_CPU;
                    if (nd && use_range) s = patina_pivot_index_range(ctx, pidx, desc, nd, range, &po, rh, cnt);
                    else if (nd) s = patina_pivot_index_knn(ctx, pidx, desc, nd, (size_t)k, &po, hits, cnt);
                    if (nd && s == PATINA_OK) {
                        total.gpu_filter += st.gpu_filter;
                        total.cpu += st.cpu + st.gpu_filter; /* the queries */
                        total.pivot_dists += st.pivot_dists;
                        total.pruned += st.pruned;
                        total.computed += st.computed;
                    }
                } else {
                    patina_search_stats_t st;
                    so.stats = &st;
                    if (nd && use_range) s = patina_index_range(ctx, idx, desc, nd, range, &so, rh, cnt);
                    else if (nd) s = patina_index_knn(ctx, idx, desc, nd, (size_t)k, &so, hits, cnt);
                    if (nd && s == PATINA_OK) {
                        total.cpu += nd;
                        total.computed += nd * patina_index_size(idx);
                    }
                }
                if (s != PATINA_OK) {
                    cli_status_error("search", s);
                    rc = EXIT_ERROR;
                    break;
                }
                for (i = 0; i < nd; i++) {
                    print_hits(stdout, fmt, snap, qs[q0 + pos[i]], use_range ? rh[i] : hits + i * (size_t)k,
                               cnt[i]);
                    if (use_range) {
                        free(rh[i]);
                        rh[i] = NULL;
                    }
                }
            }
        }
        free(imgs);
        free(sts);
        free(pos);
        free(cnt);
        free(ok);
        free(rh);
    }
    if (cli_get(a, "stats")->i && (idx || pidx))
        fprintf(stderr,
                "search: %zu queries over %zu rows: %zu distances computed, %zu rows pruned, "
                "%zu query-to-pivot distances (%s)%s\n",
                total.cpu, pidx ? patina_pivot_index_size(pidx) : patina_index_size(idx), total.computed,
                total.pruned, total.pivot_dists, pidx ? "pivot table" : "no pivot table: every distance",
                pidx && total.gpu_filter ? "; filtered on the GPU" : "");
out:
    if (fflush(stdout) != 0) rc = EXIT_ERROR;
    for (qi = 0; qi < nq; qi++) free(qs[qi]);
    free(qs);
    free(desc);
    free(hits);
    patina_index_free(idx);
    patina_pivot_index_free(pidx);
    patina_snapshot_free(snap);
    patina_collection_close(coll);
    patina_context_free(ctx);
    patina_extractor_free(ex);
    return rc;
}
