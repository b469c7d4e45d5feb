/* patina info: with a collection, its images and tables; without one (or
 * after it, with --all) the build, CPUs, GPUs, nvJPEG and the families. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static int run_info(const cli_args_t *a);

static const cli_opt_t opts[] = {
    {.name = "all", .type = CLI_FLAG,
     .help = "after the collection, also what 'patina info' alone prints: version, build, CPUs, "
             "GPUs, nvJPEG and the descriptor families"},
};

const cli_command_t cli_cmd_info = {
    .name = "info",
    .summary = "show a collection, or the build, GPUs and descriptor families",
    .operands = "[COLLECTION]",
    .min_operands = 0,
    .max_operands = 1,
    .about = "With a COLLECTION, prints its image count and descriptor tables (what each\n"
             "holds and, for identification tables, how many references fit). Without\n"
             "one, prints the version, build features, CPUs, GPUs, whether nvJPEG can\n"
             "be used, and the descriptor families with their default specs, record\n"
             "shape (elements x type: u8, u16, u32, f32, f64) and distance.\n",
    .opts = opts,
    .nopts = sizeof opts / sizeof opts[0],
    .notes = NULL,
    .run = run_info,
};

/* What the nvJPEG line says: whether `index --decoder nvjpeg` can work here,
 * and what to do when it cannot. */
static void print_nvjpeg(void)
{
    char why[256];
    const char *build = patina_build_info();
    if (strncmp(build, "cuda=yes", 8) != 0) {
        printf("nvJPEG: not in this build (index --decoder nvjpeg needs patina built with CUDA)\n");
        return;
    }
    if (patina_jpeg_gpu_available(NULL, why, sizeof why))
        printf("nvJPEG: %s (index --decoder nvjpeg --device gpu decodes JPEGs on the GPU)\n", why);
    else
        printf("nvJPEG: not found (install the CUDA runtime's libnvjpeg to decode JPEGs on the GPU with "
               "index --decoder nvjpeg)\n");
}

static void print_system(void)
{
    int i, ngpu;
    size_t f;
    printf("patina %s\nbuild: %s\ncpus: %d\n", patina_version(), patina_build_info(), patina_cpu_count());
    ngpu = patina_gpu_count();
    printf("gpus: %d\n", ngpu);
    for (i = 0; i < ngpu; i++) {
        char buf[256];
        if (patina_gpu_describe(i, buf, sizeof buf) == PATINA_OK) printf("  gpu %d: %s\n", i, buf);
    }
    print_nvjpeg();
    printf("families:\n");
    for (f = 0; f < patina_family_count(); f++) {
        patina_extractor_t *ex;
        if (patina_extractor_new(&ex, patina_family_name(f)) != PATINA_OK) continue;
        printf("  %-8s %s\n           default: %s, %zu x %s, distance %s, devices: cpu%s%s\n",
               patina_family_name(f), patina_family_help(f), patina_extractor_spec(ex), patina_extractor_dim(ex),
               cli_elem_name(patina_extractor_elem(ex)), patina_extractor_distance_name(ex),
               patina_extractor_has_device(ex, PATINA_DEVICE_GPU) ? " gpu" : "",
               patina_extractor_has_device(ex, PATINA_DEVICE_HYBRID) ? " hybrid" : "");
        patina_extractor_free(ex);
    }
}

static int print_collection(const cli_args_t *a, const char *path)
{
    patina_context_t *ctx = NULL;
    patina_collection_t *coll = NULL;
    uint64_t n = 0;
    char **specs = NULL;
    size_t ns = 0, k;
    patina_status s = patina_collection_open(&coll, path, PATINA_OPEN_READONLY, 0);
    if (s == PATINA_OK) s = patina_collection_count(coll, &n);
    if (s == PATINA_OK) s = patina_collection_tables(coll, &specs, &ns);
    if (s != PATINA_OK) {
        cli_status_error("info", s);
        patina_collection_close(coll);
        return EXIT_ERROR;
    }
    printf("collection %s: %llu image%s, %zu table%s\n", path, (unsigned long long)n, n == 1 ? "" : "s", ns,
           ns == 1 ? "" : "s");
    if (cli_context(&ctx, a) != 0) ctx = NULL;
    for (k = 0; k < ns; k++) {
        size_t rows = 0, bytes = 0;
        patina_identify_capacity_t cap;
        patina_extractor_t *tex = NULL;
        unsigned caps = 0;
        patina_collection_table_info(coll, specs[k], &rows, &bytes);
        printf("  table %s: %zu descriptor%s of %zu bytes\n", specs[k], rows, rows == 1 ? "" : "s", bytes);
        if (patina_extractor_new(&tex, specs[k]) == PATINA_OK) caps = patina_extractor_caps(tex);
        patina_extractor_free(tex);
        if ((caps & PATINA_CAP_IDENTIFY) && patina_identify_capacity(ctx, specs[k], &cap) == PATINA_OK) {
            printf("    identification: up to %zu features per reference; %zu bytes per reference in host "
                   "memory, %zu on the GPU\n",
                   cap.features, cap.record_bytes, cap.gpu_bytes);
            if (cap.rows > 1)
                printf("    reference views: %zu rows per reference (the image and %zu synthetic views): %zu rows "
                       "for %zu references, matched row by row\n",
                       cap.rows, cap.rows - 1, rows * cap.rows, rows);
            if (ctx && cap.gpu_refs)
                printf("    fit: %zu references on this GPU (its memory budget), %zu in host memory (more are "
                       "streamed from pinned host memory)\n",
                       cap.gpu_refs, cap.host_refs);
            else
                printf("    fit: %zu references in host memory (no GPU)\n", cap.host_refs);
        }
        free(specs[k]);
    }
    free(specs);
    patina_context_free(ctx);
    patina_collection_close(coll);
    return EXIT_OK;
}

static int run_info(const cli_args_t *a)
{
    int rc = EXIT_OK;
    if (a->noperands) {
        rc = print_collection(a, a->operands[0]);
        if (rc != EXIT_OK || !cli_get(a, "all")->i) return rc;
        printf("\n");
    }
    print_system();
    return rc;
}
