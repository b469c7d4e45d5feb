/* patina extract: descriptors of images, printed as CSV or JSON lines. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"

static void help(FILE *f)
{
    fprintf(f,
            "usage: patina extract [-f FAMILY[:OPTS]] [--format csv|json] [--device D] IMAGE...\n"
            "\n"
            "Computes one descriptor per image and prints it, in the order given.\n"
            "  -f, --family SPEC   descriptor family and options (default: cedd)\n"
            "      --format F      csv: one line per image, PATH,v0,...,vN-1 (default)\n"
            "                      json: one object per line {\"path\",\"family\",\"descriptor\"}\n"
            "                      (glcm: {\"path\",\"family\",\"glcm\",\"props\",\"haralick\",...})\n"
            "      --device D      auto|cpu|gpu|hybrid (default: auto)\n"
            "      --map DIR       also write each image's code map (lbp, lbp8, tlbap, lanadp)\n"
            "                      as DIR/<name without extension>.pgm (.pfm for lbp var);\n"
            "                      see docs/lbp.md for the formats\n"
            "  -j, --jobs N        CPU threads (default: all)\n"
            "      --max-pixels N  refuse images with more pixels (default 268435456)\n"
            "  -h, --help          this help\n"
            "Images that cannot be read are reported on stderr; the others are still\n"
            "printed, and the exit status is 1.\n");
}

#define BATCH 64

/* Writes the code map of img to DIR/<basename of name without extension>.pgm
 * (.pfm for floating-point maps). */
static patina_status write_map(patina_context_t *ctx, const patina_extractor_t *ex,
                               const char *dir, const char *name, const patina_image_t *img)
{
    patina_codemap_t map;
    const char *base = strrchr(name, '/'), *dot;
    char path[4096];
    int len;
    patina_status s;
    base = base ? base + 1 : name;
    dot = strrchr(base, '.');
    len = dot && dot != base ? (int)(dot - base) : (int)strlen(base);
    s = patina_extract_codemap(ctx, ex, &map, img);
    if (s != PATINA_OK) return s;
    if (snprintf(path, sizeof path, "%s/%.*s.%s", dir, len, base,
                 map.elem == PATINA_ELEM_F64 ? "pfm" : "pgm") >= (int)sizeof path) {
        patina_codemap_release(&map);
        cli_error("extract", "'%s': map path too long", name);
        return PATINA_E_LIMIT;
    }
    s = patina_codemap_write(&map, path);
    patina_codemap_release(&map);
    return s;
}

int cmd_extract(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"family", required_argument, 0, 'f'}, {"format", required_argument, 0, 'F'},
        {"device", required_argument, 0, 'd'}, {"jobs", required_argument, 0, 'j'},
        {"max-pixels", required_argument, 0, 'P'}, {"help", no_argument, 0, 'h'},
        {"map", required_argument, 0, 'M'}, {0, 0, 0, 0}};
    const char *family = "cedd", *format = "csv", *mapdir = NULL;
    patina_device device = PATINA_DEVICE_AUTO;
    patina_context_opts_t copts = {0};
    patina_extractor_t *ex = NULL;
    patina_context_t *ctx = NULL;
    patina_image_t imgs[BATCH];
    const char *names[BATCH];
    patina_status st[BATCH];
    unsigned char *descs = NULL;
    int c, rc = EXIT_OK, json;
    long v;
    size_t bytes, dim, i;
    patina_status s;

    optind = 1;
    while ((c = getopt_long(argc, argv, "f:j:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'f': family = optarg; break;
        case 'F': format = optarg; break;
        case 'M': mapdir = optarg; break;
        case 'd':
            if (patina_device_parse(&device, optarg) != PATINA_OK) {
                cli_error("extract", "%s", patina_last_error());
                return EXIT_USAGE;
            }
            break;
        case 'j':
            if (cli_parse_long("extract", "--jobs", optarg, 1, 1024, &v)) return EXIT_USAGE;
            copts.threads = (int)v;
            break;
        case 'P':
            if (cli_parse_long("extract", "--max-pixels", optarg, 1, 1L << 40, &v)) return EXIT_USAGE;
            copts.limits.max_pixels = (uint64_t)v;
            break;
        case 'h': help(stdout); return EXIT_OK;
        default: help(stderr); return EXIT_USAGE;
        }
    }
    if (strcmp(format, "csv") && strcmp(format, "json")) {
        cli_error("extract", "--format must be csv or json, got '%s'", format);
        return EXIT_USAGE;
    }
    json = !strcmp(format, "json");
    if (optind >= argc) {
        cli_error("extract", "no images given");
        help(stderr);
        return EXIT_USAGE;
    }
    if ((s = patina_extractor_new(&ex, family)) != PATINA_OK) {
        cli_status_error("extract", s);
        return EXIT_USAGE;
    }
    if (mapdir && !patina_extractor_has_codemap(ex)) {
        cli_error("extract", "--map: family '%s' has no code maps (lbp, lbp8, tlbap and lanadp do)",
                  patina_extractor_family(ex));
        patina_extractor_free(ex);
        return EXIT_USAGE;
    }
    if (mapdir && mkdir(mapdir, 0777) != 0 && errno != EEXIST) {
        cli_error("extract", "--map: cannot create '%s': %s", mapdir, strerror(errno));
        patina_extractor_free(ex);
        return EXIT_ERROR;
    }
    if ((s = patina_context_new(&ctx, &copts)) != PATINA_OK) {
        cli_status_error("extract", s);
        patina_extractor_free(ex);
        return EXIT_ERROR;
    }
    bytes = patina_extractor_bytes(ex);
    dim = patina_extractor_dim(ex);
    descs = malloc(BATCH * bytes);
    if (!descs) {
        cli_error("extract", "out of memory");
        rc = EXIT_ERROR;
        goto out;
    }
    for (int a = optind; a < argc;) {
        size_t n = 0;
        for (; a < argc && n < BATCH; a++) {
            s = patina_image_load(&imgs[n], argv[a], patina_context_limits(ctx));
            if (s != PATINA_OK) {
                cli_status_error("extract", s);
                rc = EXIT_PARTIAL;
                continue;
            }
            names[n++] = argv[a];
        }
        for (i = 0; mapdir && i < n; i++) {
            s = write_map(ctx, ex, mapdir, names[i], &imgs[i]);
            if (s != PATINA_OK) {
                cli_error("extract", "'%s': code map: %s", names[i], patina_last_error());
                rc = EXIT_PARTIAL;
            }
        }
        if (json && patina_extractor_has_json(ex)) {
            /* Families with a full description (glcm: counts, properties,
             * Haralick features) print it instead of the vector. */
            for (i = 0; i < n; i++) {
                char *members = NULL;
                s = patina_extractor_json(ex, &imgs[i], &members);
                patina_image_release(&imgs[i]);
                if (s != PATINA_OK) {
                    cli_error("extract", "'%s': %s", names[i], patina_last_error());
                    rc = EXIT_PARTIAL;
                    continue;
                }
                fputs("{\"path\":", stdout);
                cli_json_string(stdout, names[i]);
                fputs(",\"family\":", stdout);
                cli_json_string(stdout, patina_extractor_spec(ex));
                fputc(',', stdout);
                fputs(members, stdout);
                fputs("}\n", stdout);
                free(members);
            }
            continue;
        }
        s = patina_extract_batch(ctx, ex, device, descs, imgs, n, st);
        if (s != PATINA_OK) {
            cli_status_error("extract", s);
            for (i = 0; i < n; i++) patina_image_release(&imgs[i]);
            rc = EXIT_ERROR;
            goto out;
        }
        for (i = 0; i < n; i++) {
            const unsigned char *d = descs + i * bytes;
            size_t k;
            patina_image_release(&imgs[i]);
            if (st[i] != PATINA_OK) {
                cli_error("extract", "'%s': %s", names[i], patina_status_str(st[i]));
                rc = EXIT_PARTIAL;
                continue;
            }
            if (json) {
                fputs("{\"path\":", stdout);
                cli_json_string(stdout, names[i]);
                fputs(",\"family\":", stdout);
                cli_json_string(stdout, patina_extractor_spec(ex));
                fputs(",\"descriptor\":[", stdout);
                for (k = 0; k < dim; k++) {
                    if (k) fputc(',', stdout);
                    cli_print_elem(stdout, patina_extractor_elem(ex), d, k);
                }
                fputs("]}\n", stdout);
            } else {
                fputs(names[i], stdout);
                for (k = 0; k < dim; k++) {
                    fputc(',', stdout);
                    cli_print_elem(stdout, patina_extractor_elem(ex), d, k);
                }
                fputc('\n', stdout);
            }
        }
    }
out:
    if (fflush(stdout) != 0) {
        cli_error("extract", "cannot write the output");
        rc = EXIT_ERROR;
    }
    free(descs);
    patina_context_free(ctx);
    patina_extractor_free(ex);
    return rc;
}
