/* patina extract: descriptors of images, printed as CSV or JSON lines (or a
 * binary stream of the records as stored) in the order given. Files are read,
 * decoded and described a window at a time by patina_extract_files (the
 * decoder choice of the indexing pipeline: on a GPU run JPEGs are decoded on
 * the GPU and stay there); code maps and glcm's full JSON description need
 * the pixels here, so for them patina_load_files decodes on the host. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"

static int run_extract(const cli_args_t *a);

static const cli_opt_t opts[] = {
    CLI_OPT_FAMILY,
    {.name = "format", .type = CLI_CHOICE, .choices = "csv|json|bin", .def = "csv",
     .help = "output format (see below)"},
    CLI_OPT_DEVICE("where descriptors are computed; auto: the GPU when one is usable"),
    {.name = "map", .type = CLI_TEXT, .arg = "DIR",
     .help = "also write each image's code map (lbp, lbp8, tlbap, lanadp) as "
             "DIR/<name without extension>.pgm (.pfm for lbp var); docs/lbp.md"},
    CLI_OPT_JOBS,
    CLI_OPT_MAX_PIXELS,
    CLI_OPT_STRICT,
    CLI_OPT_EXIF_ORIENTATION,
    CLI_OPT_BATCH_MEMORY("encoded + decoded image bytes held at once while decoding "
                         "in parallel (a single larger image is still read alone)"),
    {.name = "decoder", .type = CLI_CHOICE, .arg = "D", .choices = "libjpeg|nvjpeg|exact-gpu|auto", .def = "auto",
     .help = "JPEG decoder, as for index: libjpeg (CPU), exact-gpu (the same pixels byte for byte, "
             "decoded on the GPU and left there; needs --device gpu), nvjpeg (GPU, pixels differ "
             "slightly) or auto (exact-gpu when every family runs on the GPU and reads GPU images, "
             "else libjpeg; --map and glcm/haralick's JSON description decode with libjpeg)"},
};

const cli_command_t cli_cmd_extract = {
    .name = "extract",
    .summary = "compute descriptors of images and print them",
    .operands = "IMAGE...",
    .min_operands = 1,
    .max_operands = -1,
    .about = "Computes one descriptor per image and prints it on stdout, in the order given\n"
             "(whatever -j is). Images are read and decoded in parallel.\n",
    .opts = opts,
    .nopts = sizeof opts / sizeof opts[0],
    .notes = "output:\n"
             "  csv   one line per image: PATH,v0,...,vN-1 (rootsift: one line per keypoint,\n"
             "        PATH,COUNT,I,X,Y,SCALE,ANGLE,D0,...,D127, strongest first; an image\n"
             "        without keypoints prints PATH,0; signature: one line per centroid,\n"
             "        PATH,COUNT,I,WEIGHT,X,Y,L,A,B,CONTRAST,ENTROPY). A PATH holding a\n"
             "        comma, a double quote, CR or LF is quoted as RFC 4180 says (\"...\",\n"
             "        quotes doubled); other fields are never quoted. Lines end with LF.\n"
             "  json  one object per line: {\"path\",\"family\",\"descriptor\"} (glcm and\n"
             "        haralick: {\"path\",\"family\",\"glcm\",\"props\",\"haralick\",...};\n"
             "        rootsift: {\"path\",\"family\",\"width\",\"height\",...,\"count\",\n"
             "        \"keypoints\":[{\"x\",\"y\",\"scale\",\"angle\",\"descriptor\"},...]};\n"
             "        signature: {\"path\",\"family\",\"count\",\"alpha\",\"form\",\n"
             "        \"centroids\":[{\"weight\",\"x\",\"y\",\"L\",\"a\",\"b\",\"contrast\",\n"
             "        \"entropy\"},...]}).\n"
             "        rootsift components are printed as stored (u8 or binary16); the\n"
             "        RootSIFT value is the component / qscale (docs/rootsift.md).\n"
             "        Strings escape every control character; bytes that are not UTF-8\n"
             "        become \\udc80..\\udcff (Python's surrogateescape: os.fsencode gives\n"
             "        the path's bytes back).\n"
             "  bin   the descriptors as the collection stores them (refused on a terminal):\n"
             "        \"PATINADS\", u32 version (1), u32 L, the family spec (L bytes),\n"
             "        u32 R (record bytes), then per image u32 P, the path (P bytes) and\n"
             "        its R-byte record. u32 are little-endian; a rootsift record is its\n"
             "        documented little-endian format (docs/rootsift.md), other families'\n"
             "        elements are in the host's byte order. docs/cli.md has a reader.\n"
             "Images that cannot be read, decoded or described are reported on stderr and\n"
             "the others printed (exit status 1). A decoder warning (damaged but decodable\n"
             "data) is reported on stderr and the image printed, unless --strict.\n",
    .run = run_extract,
};

#define WINDOW 64

static void put_u32(uint32_t v)
{
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    fwrite(b, 1, 4, stdout);
}

/* The binary stream's header: magic, version, spec, record bytes. */
static void bin_header(const patina_extractor_t *ex, size_t bytes)
{
    const char *spec = patina_extractor_spec(ex);
    fwrite("PATINADS", 1, 8, stdout);
    put_u32(1);
    put_u32((uint32_t)strlen(spec));
    fwrite(spec, 1, strlen(spec), stdout);
    put_u32((uint32_t)bytes);
}

/* One image of the binary stream: its path and record. */
static void bin_record(const char *path, const void *rec, size_t bytes)
{
    put_u32((uint32_t)strlen(path));
    fwrite(path, 1, strlen(path), stdout);
    fwrite(rec, 1, bytes, stdout);
}

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

static void print_head(const char *path, const patina_extractor_t *ex)
{
    fputs("{\"path\":", stdout);
    cli_json_string(stdout, path);
    fputs(",\"family\":", stdout);
    cli_json_string(stdout, patina_extractor_spec(ex));
}

/* One rootsift record (include/patina/rootsift.h): JSON, one object with a
 * keypoints array; CSV, one line per keypoint. Components are printed as
 * stored (u8 integers or binary16 values; RootSIFT = value / qscale). */
static patina_status print_rootsift(const char *path, const patina_extractor_t *ex, const void *rec,
                                    size_t bytes, int json)
{
    patina_rootsift_info_t info;
    float g[4], v[PATINA_ROOTSIFT_DIM];
    size_t i;
    int k;
    patina_status s = patina_rootsift_info(&info, rec, bytes);
    if (s != PATINA_OK) return s;
    if (json) {
        print_head(path, ex);
        printf(",\"width\":%u,\"height\":%u,\"detected_width\":%u,\"detected_height\":%u,"
               "\"downscale\":%.9g,\"quant\":\"%s\",\"qscale\":%.9g,\"count\":%u,\"keypoints\":[",
               (unsigned)info.orig_width, (unsigned)info.orig_height, (unsigned)info.width,
               (unsigned)info.height, (double)info.downscale, info.f16 ? "f16" : "u8", (double)info.qscale,
               (unsigned)info.count);
    } else if (info.count == 0) {
        cli_csv_field(stdout, path);
        fputs(",0\n", stdout);
    }
    for (i = 0; i < info.count; i++) {
        /* cannot fail: the header was checked and i < count */
        if ((s = patina_rootsift_feature(g, v, rec, bytes, i)) != PATINA_OK) return s;
        if (json)
            printf("%s{\"x\":%.9g,\"y\":%.9g,\"scale\":%.9g,\"angle\":%.9g,\"descriptor\":[", i ? "," : "",
                   (double)g[0], (double)g[1], (double)g[2], (double)g[3]);
        else {
            cli_csv_field(stdout, path);
            printf(",%u,%zu,%.9g,%.9g,%.9g,%.9g", (unsigned)info.count, i, (double)g[0], (double)g[1],
                   (double)g[2], (double)g[3]);
        }
        for (k = 0; k < PATINA_ROOTSIFT_DIM; k++) {
            if (json && k) fputc(',', stdout);
            if (!json) fputc(',', stdout);
            if (info.f16)
                printf("%.9g", (double)v[k]);
            else
                printf("%u", (unsigned)v[k]);
        }
        fputs(json ? "]}" : "\n", stdout);
    }
    if (json) fputs("]}\n", stdout);
    return PATINA_OK;
}

/* One signature record (include/patina/signature.h): JSON, one object with
 * a centroids array; CSV, one line per centroid. */
static patina_status print_signature(const char *path, const patina_extractor_t *ex, const void *rec,
                                     size_t bytes, int json)
{
    static const char *const forms[] = {"gaussian", "heuristic", "minus"};
    patina_signature_info_t info;
    float row[PATINA_SIGNATURE_COLS];
    patina_status s = patina_signature_info(&info, rec, bytes);
    if (s != PATINA_OK) return s;
    if (json) {
        print_head(path, ex);
        printf(",\"count\":%u,\"alpha\":%.9g,\"form\":\"%s\",\"centroids\":[", (unsigned)info.count, info.alpha,
               forms[info.form]);
    }
    for (size_t i = 0; i < info.count; i++) {
        /* cannot fail: the record was checked and i < count */
        if ((s = patina_signature_centroid(row, rec, bytes, i)) != PATINA_OK) return s;
        if (json) {
            printf("%s{\"weight\":%.9g,\"x\":%.9g,\"y\":%.9g,\"L\":%.9g,\"a\":%.9g,\"b\":%.9g,"
                   "\"contrast\":%.9g,\"entropy\":%.9g}",
                   i ? "," : "", (double)row[0], (double)row[1], (double)row[2], (double)row[3], (double)row[4],
                   (double)row[5], (double)row[6], (double)row[7]);
        } else {
            cli_csv_field(stdout, path);
            printf(",%u,%zu", (unsigned)info.count, i);
            for (int k = 0; k < PATINA_SIGNATURE_COLS; k++) printf(",%.9g", (double)row[k]);
            fputc('\n', stdout);
        }
    }
    if (json) fputs("]}\n", stdout);
    return PATINA_OK;
}

/* What prints a record: the output format and the family's layout. */
typedef struct printer {
    const patina_extractor_t *ex;
    size_t bytes, dim;
    int json, bin, rootsift, signature;
} printer_t;

/* Prints image `name`'s record d; EXIT_OK or EXIT_PARTIAL. */
static int print_record(const printer_t *p, const char *name, const unsigned char *d)
{
    size_t k;
    if (p->bin) {
        bin_record(name, d, p->bytes);
    } else if (p->rootsift || p->signature) {
        patina_status s = p->rootsift ? print_rootsift(name, p->ex, d, p->bytes, p->json)
                                      : print_signature(name, p->ex, d, p->bytes, p->json);
        if (s != PATINA_OK) {
            cli_error("extract", "'%s': %s", name, patina_last_error());
            return EXIT_PARTIAL;
        }
    } else if (p->json) {
        print_head(name, p->ex);
        fputs(",\"descriptor\":[", stdout);
        for (k = 0; k < p->dim; k++) {
            if (k) fputc(',', stdout);
            cli_print_elem(stdout, patina_extractor_elem(p->ex), d, k);
        }
        fputs("]}\n", stdout);
    } else {
        cli_csv_field(stdout, name);
        for (k = 0; k < p->dim; k++) {
            fputc(',', stdout);
            cli_print_elem(stdout, patina_extractor_elem(p->ex), d, k);
        }
        fputc('\n', stdout);
    }
    return EXIT_OK;
}

/* The images never leave the library: read, decoded (on the GPU where the
 * decoder choice says so) and described by patina_extract_files. */
static int extract_direct(patina_context_t *ctx, const printer_t *p, const cli_args_t *a,
                          const patina_index_opts_t *io, unsigned char *descs)
{
    patina_input_t in[WINDOW];
    patina_extract_result_t *res = malloc(WINDOW * sizeof *res);
    void *out[1] = {descs};
    const patina_extractor_t *exs[1] = {p->ex};
    int rc = EXIT_OK;
    size_t f, i;
    if (!res) {
        cli_error("extract", "out of memory");
        return EXIT_ERROR;
    }
    for (f = 0; f < a->noperands;) {
        size_t want = a->noperands - f < WINDOW ? a->noperands - f : WINDOW, n = 0;
        patina_status s;
        memset(in, 0, sizeof in);
        for (i = 0; i < want; i++) in[i].path = a->operands[f + i];
        s = patina_extract_files(ctx, exs, 1, out, res, &n, in, want, io);
        if (s != PATINA_OK) {
            cli_status_error("extract", s);
            free(res);
            return EXIT_ERROR;
        }
        for (i = 0; i < n; i++) { /* messages and records in input order */
            const char *name = a->operands[f + i];
            if (res[i].report.warnings && res[i].status == PATINA_OK) cli_error("extract", "%s", res[i].report.warning);
            if (res[i].status != PATINA_OK) {
                cli_error("extract", "%s", res[i].error);
                rc = EXIT_PARTIAL;
                continue;
            }
            if (print_record(p, name, descs + i * p->bytes) != EXIT_OK) rc = EXIT_PARTIAL;
        }
        f += n;
    }
    free(res);
    return rc;
}

/* Code maps and glcm's full JSON description read the pixels here: the
 * images come to the host (patina_load_files, libjpeg-turbo). */
static int extract_on_host(patina_context_t *ctx, const printer_t *p, const cli_args_t *a,
                           const patina_index_opts_t *io, const char *mapdir, unsigned char *descs)
{
    patina_load_opts_t lopts;
    patina_image_t imgs[WINDOW], batch[WINDOW];
    patina_load_result_t *res = malloc(WINDOW * sizeof *res);
    size_t where[WINDOW];   /* batch index -> window index */
    patina_status st[WINDOW];
    int rc = EXIT_OK;
    size_t i, f;
    patina_status s;
    if (!res) {
        cli_error("extract", "out of memory");
        return EXIT_ERROR;
    }
    patina_load_opts_init(&lopts);
    lopts.strict = io->strict;
    lopts.apply_orientation = io->apply_orientation;
    lopts.batch_memory = io->batch_memory;
    for (f = 0; f < a->noperands;) {
        const char *const *names = a->operands + f;
        size_t want = a->noperands - f < WINDOW ? a->noperands - f : WINDOW, n = 0, nb = 0;
        s = patina_load_files(ctx, imgs, res, &n, names, want, &lopts);
        if (s != PATINA_OK) {
            cli_status_error("extract", s);
            free(res);
            return EXIT_ERROR;
        }
        /* Messages in input order; the decoded images form the batch. */
        for (i = 0; i < n; i++) {
            if (res[i].report.warnings && res[i].status == PATINA_OK)
                cli_error("extract", "%s", res[i].report.warning);
            if (res[i].status != PATINA_OK) {
                cli_error("extract", "%s", res[i].error);
                rc = EXIT_PARTIAL;
                continue;
            }
            if (mapdir && write_map(ctx, p->ex, mapdir, names[i], &imgs[i]) != PATINA_OK) {
                cli_error("extract", "'%s': code map: %s", names[i], patina_last_error());
                rc = EXIT_PARTIAL;
            }
            where[nb] = i;
            batch[nb++] = imgs[i];
        }
        if (p->json && patina_extractor_has_json(p->ex)) {
            /* Families with a full description (glcm: counts, properties,
             * Haralick features) print it instead of the vector. */
            for (i = 0; i < nb; i++) {
                char *members = NULL;
                const char *name = names[where[i]];
                s = patina_extractor_json(p->ex, &batch[i], &members);
                if (s != PATINA_OK) {
                    cli_error("extract", "'%s': %s", name, patina_last_error());
                    rc = EXIT_PARTIAL;
                    continue;
                }
                print_head(name, p->ex);
                fputc(',', stdout);
                fputs(members, stdout);
                fputs("}\n", stdout);
                free(members);
            }
        } else if (nb) {
            s = patina_extract_batch(ctx, p->ex, io->device, descs, batch, nb, st);
            if (s != PATINA_OK) {
                cli_status_error("extract", s);
                for (i = 0; i < n; i++) patina_image_release(&imgs[i]);
                free(res);
                return EXIT_ERROR;
            }
            for (i = 0; i < nb; i++) {
                const char *name = names[where[i]];
                if (st[i] != PATINA_OK) {
                    char msg[PATINA_ERROR_MAX];
                    cli_extract_error(msg, sizeof msg, ctx, p->ex, &batch[i], name, st[i]);
                    cli_error("extract", "%s", msg);
                    rc = EXIT_PARTIAL;
                    continue;
                }
                if (print_record(p, name, descs + i * p->bytes) != EXIT_OK) rc = EXIT_PARTIAL;
            }
        }
        for (i = 0; i < n; i++) patina_image_release(&imgs[i]);
        f += n;
    }
    free(res);
    return rc;
}

static int run_extract(const cli_args_t *a)
{
    const char *family = cli_get(a, "family")->text;
    const char *mapdir = cli_get(a, "map")->set ? cli_get(a, "map")->text : NULL;
    int json = cli_get(a, "format")->i == 1, bin = cli_get(a, "format")->i == 2, on_host;
    patina_index_opts_t io;
    patina_extractor_t *ex = NULL;
    patina_context_t *ctx = NULL;
    unsigned char *descs = NULL;
    printer_t pr;
    int rc = EXIT_OK;
    size_t bytes;
    patina_status s;

    patina_index_opts_init(&io);
    if (patina_device_parse(&io.device, cli_get(a, "device")->text) != PATINA_OK ||
        patina_jpeg_decoder_parse(&io.jpeg_decoder, cli_get(a, "decoder")->text) != PATINA_OK) {
        cli_status_error("extract", PATINA_E_INVALID);
        return EXIT_USAGE;
    }
    io.strict = (int)cli_get(a, "strict")->i;
    io.apply_orientation = (int)cli_get(a, "exif-orientation")->i;
    io.batch_memory = cli_get(a, "batch-memory")->bytes;
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
    on_host = mapdir || (json && patina_extractor_has_json(ex));
    if (on_host && io.jpeg_decoder != PATINA_JPEG_AUTO && io.jpeg_decoder != PATINA_JPEG_LIBJPEG) {
        cli_error("extract", "--decoder %s: %s reads the decoded pixels on the host; use libjpeg or auto",
                  cli_get(a, "decoder")->text, mapdir ? "--map" : "the JSON description of this family");
        patina_extractor_free(ex);
        return EXIT_USAGE;
    }
    if (mapdir && mkdir(mapdir, 0777) != 0 && errno != EEXIST) {
        cli_error("extract", "--map: cannot create '%s': %s", mapdir, strerror(errno));
        patina_extractor_free(ex);
        return EXIT_ERROR;
    }
    if (bin && isatty(STDOUT_FILENO)) {
        cli_error("extract", "--format bin writes binary records; redirect the output to a file or pipe");
        patina_extractor_free(ex);
        return EXIT_USAGE;
    }
    if (cli_context(&ctx, a) != 0) {
        patina_extractor_free(ex);
        return EXIT_ERROR;
    }
    bytes = patina_extractor_bytes(ex);
    if (bytes > UINT32_MAX) {
        cli_error("extract", "records of %zu bytes do not fit the output formats", bytes);
        rc = EXIT_ERROR;
        goto out;
    }
    if (bin) bin_header(ex, bytes);
    memset(&pr, 0, sizeof pr);
    pr.ex = ex;
    pr.bytes = bytes;
    pr.dim = patina_extractor_dim(ex);
    pr.json = json;
    pr.bin = bin;
    pr.rootsift = (patina_extractor_caps(ex) & PATINA_CAP_KEYPOINTS) != 0;
    pr.signature = (patina_extractor_caps(ex) & PATINA_CAP_CENTROIDS) != 0;
    descs = malloc(WINDOW * (bytes ? bytes : 1));
    if (!descs) {
        cli_error("extract", "out of memory");
        rc = EXIT_ERROR;
        goto out;
    }
    rc = on_host ? extract_on_host(ctx, &pr, a, &io, mapdir, descs) : extract_direct(ctx, &pr, a, &io, descs);
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
