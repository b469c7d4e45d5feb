/* patina search: nearest images in a collection for each query image. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void help(FILE *f)
{
    fprintf(f,
            "usage: patina search COLLECTION IMAGE... [-f FAMILY[:OPTS]] [-k K | --range R]\n"
            "                     [--format table|csv|json] [--device D]\n"
            "\n"
            "Ranks the collection's images by the family's distance to each query\n"
            "(CEDD: LIRE's Tanimoto, 0 = identical .. 100). Ties are ordered by id.\n"
            "  -f, --family SPEC   descriptor table to search (default: cedd)\n"
            "  -k K                the K nearest (default 10)\n"
            "      --range R       every image with distance <= R instead of -k\n"
            "      --format F      table (default), csv: QUERY,RANK,KEY,DISTANCE per hit\n"
            "                      (%%.17g distances, no header), json: one object per query\n"
            "      --device D      auto|cpu|gpu: where query descriptors are computed and,\n"
            "                      for CEDD with -k, where the k-NN runs (same results;\n"
            "                      default auto: the GPU when one is usable)\n"
            "  -j, --jobs N        CPU threads (default: all)\n"
            "  -h, --help          this help\n");
}

static void print_hits(FILE *f, int fmt, patina_collection_t *coll, const char *query,
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
        int have = patina_collection_get(coll, hits[r].id, &rec) == PATINA_OK;
        if (have) key = rec.key;
        if (fmt == 1) {
            fprintf(f, "%s,%zu,%s,%.17g\n", query, r + 1, key, hits[r].distance);
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

int cmd_search(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"family", required_argument, 0, 'f'}, {"range", required_argument, 0, 'r'},
        {"format", required_argument, 0, 'F'}, {"device", required_argument, 0, 'd'},
        {"jobs", required_argument, 0, 'j'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *family = "cedd", *format = "table";
    patina_device device = PATINA_DEVICE_AUTO;
    patina_context_opts_t copts = {0};
    patina_extractor_t *ex = NULL;
    patina_context_t *ctx = NULL;
    patina_collection_t *coll = NULL;
    patina_index_t *idx = NULL;
    unsigned char *desc = NULL;
    patina_hit_t *hits = NULL;
    long k = 10, v;
    double range = 0;
    int use_range = 0, have_k = 0, fmt, c, rc = EXIT_OK, a;
    patina_status s;

    optind = 1;
    while ((c = getopt_long(argc, argv, "f:k:j:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'f': family = optarg; break;
        case 'k':
            if (cli_parse_long("search", "-k", optarg, 1, 1000000, &k)) return EXIT_USAGE;
            have_k = 1;
            break;
        case 'r':
            if (cli_parse_double("search", "--range", optarg, &range)) return EXIT_USAGE;
            if (range < 0) {
                cli_error("search", "--range must be >= 0, got %s", optarg);
                return EXIT_USAGE;
            }
            use_range = 1;
            break;
        case 'F': format = optarg; break;
        case 'd':
            if (patina_device_parse(&device, optarg) != PATINA_OK) {
                cli_error("search", "%s", patina_last_error());
                return EXIT_USAGE;
            }
            break;
        case 'j':
            if (cli_parse_long("search", "--jobs", optarg, 1, 1024, &v)) return EXIT_USAGE;
            copts.threads = (int)v;
            break;
        case 'h': help(stdout); return EXIT_OK;
        default: help(stderr); return EXIT_USAGE;
        }
    }
    if (use_range && have_k) {
        cli_error("search", "give either -k or --range, not both");
        return EXIT_USAGE;
    }
    if (!strcmp(format, "table")) fmt = 0;
    else if (!strcmp(format, "csv")) fmt = 1;
    else if (!strcmp(format, "json")) fmt = 2;
    else {
        cli_error("search", "--format must be table, csv or json, got '%s'", format);
        return EXIT_USAGE;
    }
    if (argc - optind < 2) {
        cli_error("search", "need a collection and at least one query image");
        help(stderr);
        return EXIT_USAGE;
    }
    if ((s = patina_extractor_new(&ex, family)) != PATINA_OK) {
        cli_status_error("search", s);
        return EXIT_USAGE;
    }
    if ((s = patina_context_new(&ctx, &copts)) != PATINA_OK ||
        (s = patina_collection_open(&coll, argv[optind], PATINA_OPEN_READONLY, 0)) != PATINA_OK ||
        (s = patina_index_load(&idx, ex, coll)) != PATINA_OK) {
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
    for (a = optind + 1; a < argc; a++) {
        patina_image_t img;
        patina_status st;
        size_t n = 0;
        s = patina_image_load(&img, argv[a], patina_context_limits(ctx));
        if (s != PATINA_OK) {
            cli_status_error("search", s);
            rc = EXIT_PARTIAL;
            continue;
        }
        s = patina_extract_batch(ctx, ex, device, desc, &img, 1, &st);
        patina_image_release(&img);
        if (s == PATINA_OK) s = st;
        if (s != PATINA_OK) {
            cli_status_error("search", s);
            rc = s == PATINA_E_UNAVAILABLE ? EXIT_ERROR : EXIT_PARTIAL;
            if (rc == EXIT_ERROR) goto out;
            continue;
        }
        {
            patina_search_opts_t so;
            patina_search_opts_init(&so);
            so.device = device == PATINA_DEVICE_HYBRID ? PATINA_DEVICE_AUTO : device;
            if (use_range) {
                patina_hit_t *rh = NULL;
                so.device = PATINA_DEVICE_CPU;
                s = patina_index_range(ctx, idx, desc, 1, range, &so, &rh, &n);
                if (s == PATINA_OK) print_hits(stdout, fmt, coll, argv[a], rh, n);
                free(rh);
            } else {
                s = patina_index_knn(ctx, idx, desc, 1, (size_t)k, &so, hits, &n);
                if (s == PATINA_OK) print_hits(stdout, fmt, coll, argv[a], hits, n);
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
    patina_collection_close(coll);
    patina_context_free(ctx);
    patina_extractor_free(ex);
    return rc;
}
