/* patina search: nearest images in a collection for each query image. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#if PATINA_HAVE_CLUSTER
#include "cluster/cluster.h"
#endif

static int run_search(const cli_args_t *a);

static const cli_opt_t opts[] = {
    {.name = "family", .letter = 'f', .type = CLI_TEXT, .arg = "SPEC",
     .help = "descriptor table to search: a family and its options, as indexed, or a family name "
             "alone when the collection has one table of it (default: the collection's only "
             "searchable table; 'patina info COLLECTION' lists its tables)"},
    /* bounds and defaults: the library's table (include/patina/options.h; test_cli checks them) */
    {.name = "k", .letter = 'k', .type = CLI_INT, .arg = "K", .min = 1, .max = PATINA_K_MAX,
     .def = PATINA_STRINGIFY(PATINA_SEARCH_K_DEFAULT),
     .conflicts = "range", .help = "the K nearest"},
    {.name = "range", .type = CLI_NUMBER, .arg = "R", .min = 0, .max = HUGE_VAL, .conflicts = "k",
     .help = "every image with distance <= R instead of the K nearest"},
    {.name = "format", .type = CLI_CHOICE, .choices = "table|csv|json", .def = "table",
     .help = "output format (see below)"},
    {.name = "batch", .type = CLI_TEXT, .arg = "FILE",
     .help = "more queries (images or folders): one path per line of FILE ('-': standard "
             "input), after those on the command line"},
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
    CLI_OPT_GPUS,
    CLI_OPT_MAX_PIXELS,
    CLI_OPT_STRICT,
    CLI_OPT_EXIF_ORIENTATION,
    CLI_OPT_CLUSTER_URL,
    {.name = "deadline", .type = CLI_INT, .arg = "MS", .min = 1, .max = 600000, .def = "5000",
     .help = "--cluster: how long a shard may take before its partitions are asked of another copy"},
    {.name = "hedge", .type = CLI_INT, .arg = "MS", .min = 0, .max = 600000, .flags = CLI_AUTO, .def = "auto",
     .help = "--cluster: a shard that has not answered after MS has its partitions also asked of their next "
             "ready copy, the first answer winning (auto: a fifth of --deadline)"},
    {.name = "no-partial", .type = CLI_FLAG,
     .help = "--cluster: fail (exit 3) rather than answer from the partitions that have a live copy"},
};

const cli_command_t cli_cmd_search = {
    .name = "search",
    .summary = "find the nearest images in a collection",
    .operands = "COLLECTION [QUERY...]",
    .min_operands = 1,
    .max_operands = -1,
    .about = "Ranks the collection's images by the family's distance to each query image\n"
             "(CEDD: LIRE's Tanimoto, 0 = identical .. 100). Ties are ordered by id. A\n"
             "QUERY is an image file or a folder, walked as `index` walks one (its files in\n"
             "byte order of their names, recursively, hidden entries skipped).\n",
    .opts = opts,
    .nopts = sizeof opts / sizeof opts[0],
    .notes = "output:\n"
             "  table  per query a header line and one line per hit (default); distances\n"
             "         with 6 significant digits (%.6g); a video frame's key is followed\n"
             "         by its time, (H:MM:SS.mmm)\n"
             "  csv    QUERY,RANK,KEY,DISTANCE per hit, no header; RANK from 1, DISTANCE\n"
             "         with %.17g. QUERY or KEY holding a comma, a double quote, CR or LF is\n"
             "         quoted as RFC 4180 says (quotes doubled); lines end with LF.\n"
             "  json   one object per query: {\"query\",\"hits\":[{\"rank\",\"id\",\"key\",\n"
             "         \"distance\"}]}, a video frame's hit also \"video\":{\"file\",\"t\",\"frame\"}\n"
             "         after its key; strings escape every control character, bytes that are\n"
             "         not UTF-8 become \\udc80..\\udcff (Python's surrogateescape).\n"
             "A -f whose table the collection does not have is a usage error (exit status 2;\n"
             "the message lists the collection's tables): the command line asks for\n"
             "something this collection cannot answer, nothing is wrong with the collection.\n"
             "A query that cannot be read is reported and the others answered (exit 1); so\n"
             "is a folder that cannot be read.\n"
             "With a pivot table in the collection (patina index -f signature --pivots N)\n"
             "the search runs through it: the same hits, fewer SQFDs.\n"
             "Queries are decoded, described and searched in batches of 256 (one search\n"
             "call per batch); results are printed in the order the queries were given.\n",
    .run = run_search,
};

/* One query's hits with the keys the table looked up (a record removed by
 * another process meanwhile has none: "?"). */
/* cov: a cluster's answer (partial when some partition had no live copy), else NULL. */

static void print_hits(FILE *f, int fmt, const char *query, const patina_hit_t *hits, char *const *keys, size_t n,
                       const cli_cov_t *cov)
{
    size_t r;
    if (fmt == 2) {
        fputs("{\"query\":", f);
        cli_json_string(f, query);
        if (cov) cli_json_coverage(f, cov);
        fputs(",\"hits\":[", f);
    } else if (fmt == 0) {
        fprintf(f, "query %s: %zu hit%s", query, n, n == 1 ? "" : "s");
        if (cov && cov->partial)
            fprintf(f, " (partial: %u of %u partitions, %llu references)", cov->partitions, cov->partitions_total,
                    cov->references);
        fputc('\n', f);
        if (n) fprintf(f, "  %4s  %12s  %s\n", "rank", "distance", "key");
    }
    for (r = 0; r < n; r++) {
        const char *key = keys[r] ? keys[r] : "?";
        if (fmt == 1) {
            cli_csv_field(f, query);
            fprintf(f, ",%zu,", r + 1);
            cli_csv_field(f, key);
            fprintf(f, ",%.17g\n", hits[r].distance);
        } else if (fmt == 2) {
            fprintf(f, "%s{\"rank\":%zu,\"id\":%llu,\"key\":", r ? "," : "", r + 1,
                    (unsigned long long)hits[r].id);
            cli_json_string(f, key);
            cli_video_json(f, keys[r]);
            fprintf(f, ",\"distance\":%.17g}", hits[r].distance);
        } else {
            /* 6 significant digits whatever the family's scale (CEDD 0..100, chi2 0..2, SQFD
             * near 0.1); csv and json give every digit */
            fprintf(f, "  %4zu  %12.6g  %s", r + 1, hits[r].distance, key);
            cli_video_note(f, keys[r]);
            fputc('\n', f);
        }
    }
    if (fmt == 2) fputs("]}\n", f);
}

#define SEARCH_BATCH 256 /* queries per extraction and search call */

static void on_skip(void *user, const char *path, patina_status s, const char *msg)
{
    (void)user;
    (void)path;
    (void)s;
    cli_error("search", "%s", msg);
}

/* Appends path to *v (*m used of *cap), taking it; frees it on failure. */
static int push(char ***v, size_t *m, size_t *cap, char *path)
{
    if (!path) return -1;
    if (*m == *cap) {
        size_t c = *cap ? 2 * *cap : 64;
        char **t = realloc(*v, c * sizeof *t);
        if (!t) {
            free(path);
            return -1;
        }
        *v = t;
        *cap = c;
    }
    (*v)[(*m)++] = path;
    return 0;
}

/* The query paths: the operands after the collection, then the lines of
 * --batch FILE (empty lines skipped; '-' reads standard input); each folder
 * among them replaced by the files patina_expand_paths walks in it (the
 * walk of `index` and `identify`), each other path kept as given (a query
 * given twice is answered twice; one that cannot be read is reported when
 * it is loaded). Returns EXIT_OK, EXIT_PARTIAL (the walk skipped a path,
 * reported; or the folders held no files), EXIT_USAGE (no query given) or
 * EXIT_ERROR; *out holds the paths unless EXIT_USAGE or EXIT_ERROR. */
static int query_list(const cli_args_t *a, char ***out, size_t *n)
{
    const cli_value_t *bv = cli_get(a, "batch");
    char **raw = NULL, **v = NULL, line[4096];
    size_t rcap = 0, nraw = 0, cap = 0, m = 0, skipped = 0, i;
    FILE *f = NULL;
    int rc = EXIT_ERROR;
    *out = NULL;
    *n = 0;
    for (i = 1; i < a->noperands; i++)
        if (push(&raw, &nraw, &rcap, strdup(a->operands[i])) != 0) goto nomem;
    if (bv->given) {
        f = strcmp(bv->text, "-") ? fopen(bv->text, "r") : stdin;
        if (!f) {
            cli_error("search", "cannot read --batch %s", bv->text);
            rc = EXIT_USAGE;
            goto fail;
        }
        while (fgets(line, sizeof line, f)) {
            size_t len = strlen(line);
            while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
            if (!len) continue;
            if (push(&raw, &nraw, &rcap, strdup(line)) != 0) goto nomem;
        }
        if (ferror(f)) {
            cli_error("search", "error reading --batch %s", bv->text);
            rc = EXIT_USAGE;
            goto fail;
        }
        if (f != stdin) fclose(f);
        f = NULL;
    }
    if (nraw == 0) {
        cli_error("search", "no query images (give QUERY operands or --batch FILE)");
        rc = EXIT_USAGE;
        goto fail;
    }
    for (i = 0; i < nraw; i++) {
        struct stat st;
        char **files = NULL;
        size_t nf = 0, k;
        patina_status s;
        if (stat(raw[i], &st) != 0 || !S_ISDIR(st.st_mode)) {
            char *p = raw[i];
            raw[i] = NULL;
            if (push(&v, &m, &cap, p) != 0) goto nomem;
            continue;
        }
        s = patina_expand_paths(&files, &nf, (const char *const *)&raw[i], 1, &skipped, on_skip, NULL);
        if (s != PATINA_OK) {
            cli_status_error("search", s);
            goto fail;
        }
        for (k = 0; k < nf; k++)
            if (push(&v, &m, &cap, files[k]) != 0) {
                while (++k < nf) free(files[k]);
                free(files);
                goto nomem;
            }
        free(files);
    }
    if (m == 0) cli_error("search", "no query images in the folders given");
    rc = m == 0 || skipped ? EXIT_PARTIAL : EXIT_OK;
    for (i = 0; i < nraw; i++) free(raw[i]);
    free(raw);
    *out = v;
    *n = m;
    return rc;
nomem:
    cli_error("search", "out of memory");
    rc = EXIT_ERROR;
fail:
    if (f && f != stdin) fclose(f);
    for (i = 0; i < nraw; i++) free(raw[i]);
    free(raw);
    while (m) free(v[--m]);
    free(v);
    return rc;
}

static int run_search(const cli_args_t *a)
{
    const cli_value_t *fam = cli_get(a, "family");
    const char *format = cli_get(a, "format")->text;
    patina_device device;
    patina_decode_opts_t dopts;
    const patina_extractor_t *ex;
    patina_context_t *ctx = NULL;
    patina_collection_t *coll = NULL;
    patina_table_t *table = NULL;
    patina_table_opts_t topts;
    patina_table_query_t query;
    patina_search_stats_t total, st;
    uint8_t *desc = NULL;
    int fmt, rc = EXIT_OK, pivots;
    char **qs = NULL;
    size_t nq = 0, qi, rows = 0;
    patina_status s;
    cli_cov_t scov = {0, 0, 0, 0};
#if PATINA_HAVE_CLUSTER
    clu_session_t *cs = NULL;
#else
    void *cs = NULL;
#endif

    fmt = !strcmp(format, "table") ? 0 : !strcmp(format, "csv") ? 1 : 2;
    if (patina_device_parse(&device, cli_get(a, "device")->text) != PATINA_OK) {
        cli_status_error("search", PATINA_E_INVALID);
        return EXIT_USAGE;
    }
    if (cli_get(a, "gpu")->given) device = PATINA_DEVICE_GPU;
    if (fam->given) {
        patina_extractor_t *check = NULL;
        if ((s = patina_extractor_new(&check, fam->text)) != PATINA_OK) {
            cli_status_error("search", s);
            return EXIT_USAGE;
        }
        patina_extractor_free(check);
    }
    rc = query_list(a, &qs, &nq);
    if (rc == EXIT_USAGE || rc == EXIT_ERROR) goto out;
    {
        const int crc = cli_context(&ctx, a); /* rc keeps query_list's EXIT_PARTIAL */
        if (crc != 0) {
            rc = crc;
            goto out;
        }
    }
    patina_decode_opts_init(&dopts);
    dopts.limits = *patina_context_limits(ctx);
    dopts.strict = (int)cli_get(a, "strict")->i;
    dopts.apply_orientation = (int)cli_get(a, "exif-orientation")->i;
    patina_table_opts_init(&topts);
    topts.need = PATINA_CAP_SEARCH;
    if (cli_get(a, "cluster")->given) {
        /* a cluster collection: the table only describes the queries; the shards search */
#if PATINA_HAVE_CLUSTER
        clu_front_opts_t fo;
        clu_front_opts_init(&fo);
        fo.deadline_ms = (int)cli_get(a, "deadline")->i;
        fo.allow_partial = !cli_get(a, "no-partial")->i;
        fo.hedge_ms = cli_get(a, "hedge")->is_auto ? -1 : (int)cli_get(a, "hedge")->i;
        if ((s = clu_session_open(&cs, cli_get(a, "cluster")->text, a->operands[0], &fo)) != PATINA_OK ||
            (s = clu_session_table(cs, ctx, fam->given ? fam->text : NULL, PATINA_CAP_SEARCH, &table)) != PATINA_OK) {
            cli_error("search", "%s", clu_last_error());
            rc = s == PATINA_E_NOTFOUND || s == PATINA_E_INVALID ? EXIT_USAGE : EXIT_ERROR;
            goto out;
        }
#else
        cli_error("search", "--cluster: this build has no cluster support (libnats-dev was not found)");
        rc = EXIT_ERROR;
        goto out;
#endif
    } else if ((s = patina_collection_open(&coll, a->operands[0], PATINA_OPEN_READONLY, 0)) != PATINA_OK) {
        cli_status_error("search", s);
        rc = EXIT_ERROR;
        goto out;
    }
    /* the table: -f names it (a bare family name: the collection's only table of that family),
     * else the collection's only searchable table; one it lacks is a usage error listing its tables */
    if (!table && (s = patina_table_open(&table, ctx, coll, fam->given ? fam->text : NULL, &topts)) != PATINA_OK) {
        cli_error("search", "collection '%s': %s", a->operands[0], patina_last_error());
        rc = s == PATINA_E_NOTFOUND || s == PATINA_E_INVALID ? EXIT_USAGE : EXIT_ERROR;
        goto out;
    }
    ex = patina_table_extractor(table);
    if ((s = patina_table_refresh(table, NULL)) != PATINA_OK) {
        cli_status_error("search", s);
        rc = EXIT_ERROR;
        goto out;
    }
    pivots = patina_table_pivots(table) > 0;
    if (!pivots && cli_get(a, "bound")->given && cli_get(a, "bound")->i != 2) {
        cli_error("search", "--bound %s: collection '%s' has no pivot table for '%s' (patina index ... -f %s --pivots N)",
                  cli_get(a, "bound")->text, a->operands[0], patina_extractor_spec(ex), patina_extractor_family(ex));
        rc = EXIT_USAGE;
        goto out;
    }
    patina_table_query_init(&query);
    if (cli_get(a, "range")->given) {
        query.kind = PATINA_QUERY_RANGE;
        query.radius = cli_get(a, "range")->num;
    } else {
        query.k = (size_t)cli_get(a, "k")->i;
    }
    /* HYBRID describes queries; the search itself runs where AUTO says */
    query.device = device == PATINA_DEVICE_HYBRID ? PATINA_DEVICE_AUTO : device;
    query.bound = (patina_pivot_bound)cli_get(a, "bound")->i;
    query.keys = 1;
    query.stats = &st;
    memset(&total, 0, sizeof total);
    {
        const size_t bytes = patina_extractor_bytes(ex);
        patina_image_t *imgs = calloc(SEARCH_BATCH, sizeof *imgs);
        patina_status *sts = calloc(SEARCH_BATCH, sizeof *sts);
        size_t *pos = calloc(SEARCH_BATCH, sizeof *pos);
        size_t q0, searched = 0;
        desc = malloc(SEARCH_BATCH * bytes);
        if (!imgs || !sts || !pos || !desc) {
            cli_error("search", "out of memory");
            rc = EXIT_ERROR;
        }
        for (q0 = 0; rc != EXIT_ERROR && q0 < nq; q0 += SEARCH_BATCH) {
            const size_t m = nq - q0 < SEARCH_BATCH ? nq - q0 : SEARCH_BATCH;
            size_t i, nimg = 0, nd = 0;
            patina_table_results_t res;
            /* decode; the readable ones are described in one call */
            for (i = 0; i < m; i++) {
                patina_decode_report_t report;
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
                }
                patina_image_release(&imgs[i]);
            }
            if (s != PATINA_OK) {
                cli_status_error("search", s);
                rc = EXIT_ERROR;
                break;
            }
            /* the described queries, packed in order: one search call */
            for (i = 0; i < nimg; i++)
                if (sts[i] == PATINA_OK) {
                    if (nd != i) memmove(desc + nd * bytes, desc + i * bytes, bytes);
                    pos[nd++] = pos[i];
                }
            if (!nd) continue;
#if PATINA_HAVE_CLUSTER
            if (cs) {
                clu_coverage_t cov;
                s = clu_front_search(clu_session_front(cs), patina_table_spec(table), desc, nd, bytes, &query, &res,
                                     &cov);
                if (s != PATINA_OK) {
                    cli_error("search", "%s", clu_last_error());
                    rc = EXIT_ERROR;
                    break;
                }
                scov.partitions = cov.partitions;
                scov.partitions_total = cov.partitions_total;
                scov.references = (unsigned long long)cov.references;
                scov.partial = cov.partial;
                if (cov.partial) {
                    cli_error("search", "partial answer: %u of %u partitions, %llu references (%s)", cov.partitions,
                              cov.partitions_total, scov.references, cov.failure);
                    rc = EXIT_PARTIAL;
                }
                if (cli_get(a, "stats")->i)
                    fprintf(stderr, "search: fan-out %.3f ms (slowest shard request %.3f ms, %.3f of them in the "
                            "shard), %u of %u partitions, %llu references\n", cov.fanout_ms, cov.wait_ms,
                            cov.shard_ms, cov.partitions, cov.partitions_total, scov.references);
                memset(&st, 0, sizeof st);
                st.computed = nd * res.rows;
            } else
#endif
            if ((s = patina_table_search(table, desc, nd, &query, &res)) != PATINA_OK) {
                cli_status_error("search", s);
                rc = EXIT_ERROR;
                break;
            }
            rows = res.rows;
            searched += nd;
            total.gpu_filter += st.gpu_filter;
            total.pivot_dists += st.pivot_dists;
            total.pruned += st.pruned;
            total.computed += pivots ? st.computed : nd * res.rows;
            for (i = 0; i < nd; i++)
                print_hits(stdout, fmt, qs[q0 + pos[i]], res.hits + res.offsets[i], res.keys + res.offsets[i],
                           res.offsets[i + 1] - res.offsets[i], cs ? &scov : NULL);
            patina_table_results_release(&res);
        }
        free(imgs);
        free(sts);
        free(pos);
        if (cli_get(a, "stats")->i)
            fprintf(stderr,
                    "search: %zu quer%s over %zu row%s: %zu distance%s computed, %zu row%s pruned, "
                    "%zu query-to-pivot distance%s (%s)%s\n",
                    searched, searched == 1 ? "y" : "ies", rows, cli_plural(rows), total.computed,
                    cli_plural(total.computed), total.pruned, cli_plural(total.pruned), total.pivot_dists,
                    cli_plural(total.pivot_dists),
                    pivots ? "pivot table" : "no pivot table: every distance",
                    pivots && total.gpu_filter ? "; filtered on the GPU" : "");
    }
out:
    if (fflush(stdout) != 0) rc = EXIT_ERROR;
    for (qi = 0; qi < nq; qi++) free(qs[qi]);
    free(qs);
    free(desc);
    patina_table_free(table);
    patina_collection_close(coll);
#if PATINA_HAVE_CLUSTER
    clu_session_close(cs);
#endif
    patina_context_free(ctx);
    return rc;
}
