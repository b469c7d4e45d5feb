/* Extraction on a context: which device runs (patina_context_resolve), whole
 * batches on the CPU workers, the GPU or both (patina_extract_batch), and code
 * maps. The family table drives it; nothing here knows a family. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "features/family.h"
#include "patina/descriptor.h"

patina_status patina_context_resolve(patina_context_t *ctx, const patina_extractor_t *ex,
                                     patina_device want, patina_device *got)
{
    const patina_family_t *f;
    patina_gpu_t *g;
    if (!ctx || !ex || !got) return patina__fail(PATINA_E_INVALID, "resolve: null argument");
    f = ex->family;
    switch (want) {
    case PATINA_DEVICE_CPU:
        *got = PATINA_DEVICE_CPU;
        return PATINA_OK;
    case PATINA_DEVICE_AUTO:
        *got = f->gpu && patina__context_gpu_usable(ctx) ? PATINA_DEVICE_GPU : PATINA_DEVICE_CPU;
        return PATINA_OK;
    case PATINA_DEVICE_GPU:
    case PATINA_DEVICE_HYBRID:
        if ((want == PATINA_DEVICE_GPU && !f->gpu) || (want == PATINA_DEVICE_HYBRID && !f->hybrid))
            return patina__fail(PATINA_E_UNAVAILABLE, "%s: no %s implementation", f->name,
                                patina_device_name(want));
        PATINA_TRY(patina__context_gpu_acquire(ctx, &g));
        patina__context_gpu_release(ctx);
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

static patina_status extract_batch(patina_context_t *ctx, const patina_extractor_t *ex, patina_device device,
                                   void *out, const patina_image_t *images, size_t n, patina_status *status);

patina_status patina_extract_batch(patina_context_t *ctx, const patina_extractor_t *ex,
                                   patina_device device, void *out,
                                   const patina_image_t *images, size_t n,
                                   patina_status *status)
{
    size_t bytes;
    patina_status s;
    void *tmp;
    if (!ctx || !ex || (n && (!out || !images)))
        return patina__fail(PATINA_E_INVALID, "extract: null argument");
    if (n == 0) return PATINA_OK;
    bytes = patina_extractor_bytes(ex);
    if (!((uintptr_t)out & (PATINA_ROW_ALIGN(patina_elem_size(patina_extractor_elem(ex))) - 1)))
        return extract_batch(ctx, ex, device, out, images, n, status);
    /* descriptors for an address their elements cannot be stored at: written to an aligned copy first */
    if (n > SIZE_MAX / bytes) return patina__fail(PATINA_E_LIMIT, "extract: %zu descriptors of %zu bytes", n, bytes);
    if (!(tmp = malloc(n * bytes))) return patina__fail(PATINA_E_NOMEM, "extract: out of memory");
    s = extract_batch(ctx, ex, device, tmp, images, n, status);
    if (s == PATINA_OK) memcpy(out, tmp, n * bytes);
    free(tmp);
    return s;
}

static patina_status extract_batch(patina_context_t *ctx, const patina_extractor_t *ex, patina_device device,
                                   void *out, const patina_image_t *images, size_t n, patina_status *status)
{
    patina_device dev;
    patina_status s;
    patina_gpu_t *g;
    patina_pool_t *pool;
    PATINA_TRY(patina_context_resolve(ctx, ex, device, &dev));
    if (dev == PATINA_DEVICE_GPU) {
        PATINA_TRY(patina__context_gpu_acquire(ctx, &g));
        s = ex->family->gpu(g, ex->params, out, images, n, status);
        patina__context_gpu_release(ctx);
        return s;
    }
    pool = patina__context_workers_acquire(ctx);
    if (dev == PATINA_DEVICE_HYBRID) {
        s = patina__context_gpu_acquire(ctx, &g);
        if (s == PATINA_OK) {
            s = ex->family->hybrid(g, pool, ex->params, out, images, n, status);
            patina__context_gpu_release(ctx);
        }
    } else {
        cpu_job_t job = {ex, out, patina_extractor_bytes(ex), images, status};
        patina_pool_run(pool, n, cpu_one, &job);
        s = PATINA_OK;
    }
    patina__context_workers_release(ctx);
    return s;
}

patina_status patina_extract_codemap(patina_context_t *ctx, const patina_extractor_t *ex,
                                     patina_codemap_t *map, const patina_image_t *img)
{
    patina_status s;
    if (map) memset(map, 0, sizeof *map);
    if (!ex || !map || !img) return patina__fail(PATINA_E_INVALID, "codemap: null argument");
    if (!ex->family->codemap)
        return patina__fail(PATINA_E_UNAVAILABLE, "%s: this family has no code maps",
                            ex->family->name);
    if (!ctx) return ex->family->codemap(ex->params, map, img, NULL);
    s = ex->family->codemap(ex->params, map, img, patina__context_workers_acquire(ctx));
    patina__context_workers_release(ctx);
    return s;
}
