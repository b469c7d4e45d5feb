/* The family table, extractors (family + parsed options) and the execution
 * context (thread pool, lazily opened GPU, limits). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "features/family.h"
#include "gpu/gpu.h"
#include "patina/descriptor.h"

static const patina_family_t *const families[] = {
    &patina_family_cedd,
    &patina_family_lbp,
    &patina_family_lbp8,
    &patina_family_tlbap,
    &patina_family_lanadp,
    &patina_family_glcm,
    &patina_family_haralick,
};
#define NFAMILIES (sizeof families / sizeof families[0])

struct patina_extractor {
    const patina_family_t *family;
    _Alignas(16) unsigned char params[PATINA_PARAMS_MAX];
    char spec[PATINA_PARAMS_MAX + 64];
};

struct patina_context {
    patina_context_opts_t opts;
    patina_pool_t *pool;
    patina_gpu_t *gpu;
    int gpu_tried;          /* opened once, lazily */
    patina_status gpu_status;
    char gpu_error[512];
    patina_jpeg_gpu_t *jpeg[2];  /* nvJPEG decoders of the indexing pipeline, opened on first use */
};

size_t patina_family_count(void) { return NFAMILIES; }
const char *patina_family_name(size_t i) { return i < NFAMILIES ? families[i]->name : NULL; }
const char *patina_family_help(size_t i) { return i < NFAMILIES ? families[i]->help : NULL; }

const char *patina_device_name(patina_device d)
{
    switch (d) {
    case PATINA_DEVICE_AUTO: return "auto";
    case PATINA_DEVICE_CPU: return "cpu";
    case PATINA_DEVICE_GPU: return "gpu";
    case PATINA_DEVICE_HYBRID: return "hybrid";
    }
    return NULL;
}

patina_status patina_device_parse(patina_device *d, const char *name)
{
    static const patina_device all[] = {PATINA_DEVICE_AUTO, PATINA_DEVICE_CPU, PATINA_DEVICE_GPU,
                                        PATINA_DEVICE_HYBRID};
    size_t i;
    for (i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(name, patina_device_name(all[i]))) {
            *d = all[i];
            return PATINA_OK;
        }
    return patina__fail(PATINA_E_INVALID, "unknown device '%s' (auto, cpu, gpu or hybrid)",
                        name ? name : "(null)");
}

size_t patina_elem_size(patina_elem e)
{
    switch (e) {
    case PATINA_ELEM_U8: return 1;
    case PATINA_ELEM_U16: return 2;
    case PATINA_ELEM_U32: return 4;
    case PATINA_ELEM_F32: return 4;
    case PATINA_ELEM_F64: return 8;
    }
    return 0;
}

patina_status patina_extractor_new(patina_extractor_t **ex, const char *spec)
{
    const char *colon;
    size_t nlen, i;
    const patina_family_t *fam = NULL;
    patina_extractor_t *e;
    char opts[PATINA_PARAMS_MAX];

    *ex = NULL;
    if (!spec || !*spec) return patina__fail(PATINA_E_INVALID, "descriptor: empty family name");
    colon = strchr(spec, ':');
    nlen = colon ? (size_t)(colon - spec) : strlen(spec);
    for (i = 0; i < NFAMILIES; i++)
        if (strlen(families[i]->name) == nlen && !strncmp(families[i]->name, spec, nlen))
            fam = families[i];
    if (!fam) {
        char names[512] = "";
        for (i = 0; i < NFAMILIES; i++) {
            strncat(names, i ? ", " : "", sizeof names - strlen(names) - 1);
            strncat(names, families[i]->name, sizeof names - strlen(names) - 1);
        }
        return patina__fail(PATINA_E_INVALID, "descriptor: unknown family '%.*s' (known: %s)",
                            (int)nlen, spec, names);
    }
    e = calloc(1, sizeof *e);
    if (!e) return patina__fail(PATINA_E_NOMEM, "descriptor: out of memory");
    e->family = fam;
    {
        patina_status s = patina_opts_parse(e->params, fam->opts, fam->nopts,
                                            colon ? colon + 1 : NULL, fam->name);
        if (s == PATINA_OK && fam->check) s = fam->check(e->params);
        if (s != PATINA_OK) {
            free(e);
            return s;
        }
    }
    patina_opts_format(opts, sizeof opts, e->params, fam->opts, fam->nopts);
    snprintf(e->spec, sizeof e->spec, "%s%s%s", fam->name, *opts ? ":" : "", opts);
    *ex = e;
    return PATINA_OK;
}

void patina_extractor_free(patina_extractor_t *ex) { free(ex); }
const char *patina_extractor_spec(const patina_extractor_t *ex) { return ex->spec; }
const char *patina_extractor_family(const patina_extractor_t *ex) { return ex->family->name; }
size_t patina_extractor_dim(const patina_extractor_t *ex) { return ex->family->dim(ex->params); }
patina_elem patina_extractor_elem(const patina_extractor_t *ex)
{
    return ex->family->elem_for ? ex->family->elem_for(ex->params) : ex->family->elem;
}

size_t patina_extractor_bytes(const patina_extractor_t *ex)
{
    return patina_extractor_dim(ex) * patina_elem_size(ex->family->elem);
}

const char *patina_extractor_distance_name(const patina_extractor_t *ex)
{
    if (ex->family->distance_name_for) return ex->family->distance_name_for(ex->params);
    return ex->family->distance_name;
}

int patina_extractor_has_device(const patina_extractor_t *ex, patina_device d)
{
    switch (d) {
    case PATINA_DEVICE_AUTO:
    case PATINA_DEVICE_CPU: return 1;
    case PATINA_DEVICE_GPU: return PATINA_HAVE_CUDA && ex->family->gpu != NULL;
    case PATINA_DEVICE_HYBRID: return PATINA_HAVE_CUDA && ex->family->hybrid != NULL;
    }
    return 0;
}

double patina_extractor_distance(const patina_extractor_t *ex, const void *a, const void *b)
{
    return ex->family->distance(ex->params, a, b);
}

int patina_extractor_has_json(const patina_extractor_t *ex) { return ex->family->json != NULL; }

patina_status patina_extractor_json(const patina_extractor_t *ex, const patina_image_t *img,
                                    char **json)
{
    *json = NULL;
    if (!ex->family->json)
        return patina__fail(PATINA_E_UNAVAILABLE, "%s: no JSON description beyond the descriptor",
                            ex->family->name);
    return ex->family->json(ex->params, json, img);
}

int patina_extractor_has_codemap(const patina_extractor_t *ex)
{
    return ex && ex->family->codemap != NULL;
}

/* ------------------------------------------------------------------ context */

patina_status patina_context_new(patina_context_t **ctx, const patina_context_opts_t *opts)
{
    patina_context_t *c = calloc(1, sizeof *c);
    patina_status s;
    *ctx = NULL;
    if (!c) return patina__fail(PATINA_E_NOMEM, "context: out of memory");
    if (opts) c->opts = *opts;
    if (c->opts.limits.max_pixels == 0) c->opts.limits.max_pixels = PATINA_DEFAULT_MAX_PIXELS;
    if (c->opts.limits.max_file_bytes == 0)
        c->opts.limits.max_file_bytes = PATINA_DEFAULT_MAX_FILE_BYTES;
    if (c->opts.threads < 0) {
        int t = c->opts.threads;
        free(c);
        return patina__fail(PATINA_E_INVALID, "context: negative thread count %d", t);
    }
    s = patina_pool_new(&c->pool, c->opts.threads);
    if (s != PATINA_OK) {
        free(c);
        return s;
    }
    *ctx = c;
    return PATINA_OK;
}

void patina_context_free(patina_context_t *ctx)
{
    if (!ctx) return;
    patina_gpu_jpeg_close(ctx->jpeg[0]);
    patina_gpu_jpeg_close(ctx->jpeg[1]);
    patina_gpu_close(ctx->gpu);
    patina_pool_free(ctx->pool);
    free(ctx);
}

int patina_context_threads(const patina_context_t *ctx) { return patina_pool_size(ctx->pool); }
const patina_limits_t *patina_context_limits(const patina_context_t *ctx) { return &ctx->opts.limits; }

patina_status patina_extract_codemap(patina_context_t *ctx, const patina_extractor_t *ex,
                                     patina_codemap_t *map, const patina_image_t *img)
{
    if (map) memset(map, 0, sizeof *map);
    if (!ex || !map || !img) return patina__fail(PATINA_E_INVALID, "codemap: null argument");
    if (!ex->family->codemap)
        return patina__fail(PATINA_E_UNAVAILABLE, "%s: this family has no code maps",
                            ex->family->name);
    return ex->family->codemap(ex->params, map, img, ctx ? ctx->pool : NULL);
}

/* Internal: the context's pool, for the pipeline. */
patina_pool_t *patina__context_pool(patina_context_t *ctx);
patina_pool_t *patina__context_pool(patina_context_t *ctx) { return ctx->pool; }
int patina__extractor_reads_device(const patina_extractor_t *ex);
int patina__extractor_reads_device(const patina_extractor_t *ex) { return ex->family->gpu_reads_device; }

static patina_status open_gpu(patina_context_t *ctx)
{
    if (!ctx->gpu_tried) {
        ctx->gpu_tried = 1;
        ctx->gpu_status = patina_gpu_open(&ctx->gpu, ctx->opts.gpu_index, ctx->opts.gpu_mem_budget);
        if (ctx->gpu_status != PATINA_OK)
            snprintf(ctx->gpu_error, sizeof ctx->gpu_error, "%s", patina_last_error());
    }
    if (ctx->gpu_status != PATINA_OK)
        return patina__fail(ctx->gpu_status, "%s", ctx->gpu_error);
    return PATINA_OK;
}

/* The indexing pipeline's two nvJPEG decoders (one per window in flight),
 * opened once per context: creating them costs far more than a batch. Lanes
 * (host threads feeding the JPEG engines): $PATINA_NVJPEG_LANES, default 2
 * (H100, 10,000 VGA JPEGs: 1 lane 13.2k, 2 lanes 16.7k, 4 14.4k, 8 12.4k
 * files/s end to end). */
patina_status patina__context_jpeg(patina_context_t *ctx, patina_jpeg_gpu_t *out[2]);
patina_status patina__context_jpeg(patina_context_t *ctx, patina_jpeg_gpu_t *out[2])
{
    const char *env = getenv("PATINA_NVJPEG_LANES");
    int lanes = env && atoi(env) > 0 ? atoi(env) : 2, k;
    PATINA_TRY(open_gpu(ctx));
    for (k = 0; k < 2; k++)
        if (!ctx->jpeg[k]) PATINA_TRY(patina_gpu_jpeg_open(&ctx->jpeg[k], ctx->gpu, lanes));
    out[0] = ctx->jpeg[0];
    out[1] = ctx->jpeg[1];
    return PATINA_OK;
}

patina_status patina_context_resolve(patina_context_t *ctx, const patina_extractor_t *ex,
                                     patina_device want, patina_device *got)
{
    const patina_family_t *f = ex->family;
    switch (want) {
    case PATINA_DEVICE_CPU:
        *got = PATINA_DEVICE_CPU;
        return PATINA_OK;
    case PATINA_DEVICE_AUTO:
        *got = PATINA_DEVICE_CPU;
        if (f->gpu && patina_gpu__count() > 0 && open_gpu(ctx) == PATINA_OK)
            *got = PATINA_DEVICE_GPU;
        patina_clear_error();
        return PATINA_OK;
    case PATINA_DEVICE_GPU:
    case PATINA_DEVICE_HYBRID:
        if ((want == PATINA_DEVICE_GPU && !f->gpu) || (want == PATINA_DEVICE_HYBRID && !f->hybrid))
            return patina__fail(PATINA_E_UNAVAILABLE, "%s: no %s implementation", f->name,
                                patina_device_name(want));
        PATINA_TRY(open_gpu(ctx));
        *got = want;
        return PATINA_OK;
    }
    return patina__fail(PATINA_E_INVALID, "unknown device %d", (int)want);
}

typedef struct cpu_job {
    const patina_extractor_t *ex;
    unsigned char *out;
    size_t bytes;
    const patina_image_t *images;
    patina_status *status;
} cpu_job_t;

static void cpu_one(void *arg, size_t i, int worker)
{
    cpu_job_t *j = arg;
    patina_status s;
    (void)worker;
    s = j->ex->family->cpu(j->ex->params, j->out + i * j->bytes, &j->images[i]);
    if (s != PATINA_OK) memset(j->out + i * j->bytes, 0, j->bytes);
    if (j->status) j->status[i] = s;
}

patina_status patina_extract_batch(patina_context_t *ctx, const patina_extractor_t *ex,
                                   patina_device device, void *out,
                                   const patina_image_t *images, size_t n,
                                   patina_status *status)
{
    patina_device dev;
    if (!ctx || !ex || (n && (!out || !images)))
        return patina__fail(PATINA_E_INVALID, "extract: null argument");
    if (n == 0) return PATINA_OK;
    PATINA_TRY(patina_context_resolve(ctx, ex, device, &dev));
    if (dev == PATINA_DEVICE_GPU)
        return ex->family->gpu(ctx->gpu, ex->params, out, images, n, status);
    if (dev == PATINA_DEVICE_HYBRID)
        return ex->family->hybrid(ctx->gpu, ctx->pool, ex->params, out, images, n, status);
    {
        cpu_job_t job = {ex, out, patina_extractor_bytes(ex), images, status};
        patina_pool_run(ctx->pool, n, cpu_one, &job);
    }
    return PATINA_OK;
}
