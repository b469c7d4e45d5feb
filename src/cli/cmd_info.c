/* patina info: build features, GPUs, families; with a collection, its contents. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"


static int run_info(const cli_args_t *a);

const cli_command_t cli_cmd_info = {
    .name = "info",
    .summary = "show build features, GPUs and descriptor families",
    .operands = "[COLLECTION]",
    .min_operands = 0,
    .max_operands = 1,
    .about = "Prints the version, build features, CPUs, GPUs and descriptor families; with a\n"
             "COLLECTION, also its image count and descriptor tables.\n",
    .opts = NULL,
    .nopts = 0,
    .notes = NULL,
    .run = run_info,
};

static int run_info(const cli_args_t *a)
{
    int i, ngpu;
    size_t f;
    printf("patina %s\nbuild: %s\ncpus: %d\n", patina_version(), patina_build_info(),
           patina_cpu_count());
    ngpu = patina_gpu_count();
    printf("gpus: %d\n", ngpu);
    for (i = 0; i < ngpu; i++) {
        char buf[256];
        if (patina_gpu_describe(i, buf, sizeof buf) == PATINA_OK) printf("  gpu %d: %s\n", i, buf);
    }
    {
        char why[256];
        int ok = patina_jpeg_gpu_available(NULL, why, sizeof why);
        printf("nvjpeg: %s (%s)\n", ok ? "yes" : "no", why);
    }
    printf("families:\n");
    for (f = 0; f < patina_family_count(); f++) {
        patina_extractor_t *ex;
        if (patina_extractor_new(&ex, patina_family_name(f)) != PATINA_OK) continue;
        printf("  %-8s %s\n           default: %s, %zu x %s, distance %s, devices: cpu%s%s\n",
               patina_family_name(f), patina_family_help(f), patina_extractor_spec(ex),
               patina_extractor_dim(ex),
               patina_extractor_elem(ex) == PATINA_ELEM_U8 ? "u8" : "value",
               patina_extractor_distance_name(ex),
               patina_extractor_has_device(ex, PATINA_DEVICE_GPU) ? " gpu" : "",
               patina_extractor_has_device(ex, PATINA_DEVICE_HYBRID) ? " hybrid" : "");
        patina_extractor_free(ex);
    }
    if (a->noperands) {
        patina_context_t *ctx = NULL;
        patina_collection_t *coll;
        uint64_t n = 0;
        char **specs = NULL;
        size_t ns = 0, k;
        patina_status s = patina_collection_open(&coll, a->operands[0], PATINA_OPEN_READONLY, 0);
        if (s == PATINA_OK) s = patina_collection_count(coll, &n);
        if (s == PATINA_OK) s = patina_collection_tables(coll, &specs, &ns);
        if (s != PATINA_OK) {
            cli_status_error("info", s);
            return EXIT_ERROR;
        }
        printf("collection %s: %llu images\n", a->operands[0], (unsigned long long)n);
        if (cli_context(&ctx, a) != 0) ctx = NULL;
        for (k = 0; k < ns; k++) {
            size_t rows = 0, bytes = 0;
            patina_identify_capacity_t cap;
            patina_collection_table_info(coll, specs[k], &rows, &bytes);
            printf("  table %s: %zu descriptors of %zu bytes\n", specs[k], rows, bytes);
            patina_extractor_t *tex = NULL;
            unsigned caps = 0;
            if (patina_extractor_new(&tex, specs[k]) == PATINA_OK) caps = patina_extractor_caps(tex);
            patina_extractor_free(tex);
            if ((caps & PATINA_CAP_IDENTIFY) && patina_identify_capacity(ctx, specs[k], &cap) == PATINA_OK) {
                printf("    identification: up to %zu features per reference; %zu bytes per reference in host "
                       "memory, %zu on the GPU\n",
                       cap.features, cap.record_bytes, cap.gpu_bytes);
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
    }
    return EXIT_OK;
}
