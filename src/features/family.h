/* The descriptor-family table entry. One per family, defined beside its C
 * reference (e.g. src/features/cedd.c) and listed in registry.c; the
 * extractor (a family and its options) that every other module holds. */
#ifndef PATINA_FAMILY_H
#define PATINA_FAMILY_H

#include <stddef.h>
#include "algo/distance_ids.h"
#include "core/internal.h"
#include "gpu/gpu.h"
#include "patina/descriptor.h"

#define PATINA_PARAMS_MAX 2048 /* bytes of parsed options a family may use */

typedef struct patina_family {
    const char *name;
    const char *help;
    /* What the family's records are for: PATINA_CAP_SEARCH, _IDENTIFY,
     * _PIVOTS (include/patina/descriptor.h); the extraction capabilities
     * (_GPU, _HYBRID, _CODEMAP, _JSON) follow from the functions below. */
    unsigned uses;
    const patina_optdef_t *opts;
    size_t nopts;
    /* Options opts[terse_from ..] (0: none) are written in the canonical
     * spec only when they differ from their defaults: options added after
     * tables were stored under their specs, so that those keep their names. */
    size_t terse_from;
    patina_elem elem;
    /* Elements per descriptor for these params. */
    size_t (*dim)(const void *params);
    /* Cross-option checks after parsing (NULL: none). */
    patina_status (*check)(const void *params);
    /* The distance search uses (algo/distance_ids.h; the definitions are the
     * search engine's distance table). */
    pdist_t distance;
    /* C reference for one image: out has dim*elem bytes. */
    patina_status (*cpu)(const void *params, void *out, const patina_image_t *img);
    /* Whole batch on the GPU, and hybrid CPU+GPU; NULL when the family has none. */
    patina_status (*gpu)(patina_gpu_t *g, const void *params, void *out,
                         const patina_image_t *imgs, size_t n, patina_status *st);
    patina_status (*hybrid)(patina_gpu_t *g, patina_pool_t *pool, const void *params, void *out,
                            const patina_image_t *imgs, size_t n, patina_status *st);
    /* Optional hooks (NULL for families that do not need them). */
    /* Element type when it depends on the options (else .elem). */
    patina_elem (*elem_for)(const void *params);
    /* The distance when it depends on the options (else .distance). */
    pdist_t (*distance_for)(const void *params);
    /* Code map of one image on the CPU (pool may be NULL); see
     * patina_extract_codemap. */
    patina_status (*codemap)(const void *params, patina_codemap_t *map, const patina_image_t *img,
                             patina_pool_t *pool);
    /* Full JSON description of one image for `extract --format json`, as
     * object members without braces ("\"glcm\":[...],\"props\":{...}") in
     * a malloc'd string the caller frees (NULL: the descriptor vector). */
    patina_status (*json)(const void *params, char **out, const patina_image_t *img);
    /* Non-zero when .gpu takes images in device memory of the context's GPU
     * (decoded there: the exact decoder, nvJPEG) beside host images. Only
     * an image its kernels leave to the C reference comes back to the host
     * (patina_gpu_image_host), and glcm/haralick's with a mask or
     * quant=none, whose levels are made on the host. */
    int gpu_reads_device;
} patina_family_t;

/* An extractor: a family and its parsed options (registry.c). */
struct patina_extractor {
    const patina_family_t *family;
    _Alignas(16) unsigned char params[PATINA_PARAMS_MAX];
    char spec[PATINA_PARAMS_MAX + 64];
};

/* Non-zero when the extractor's GPU path takes images in device memory
 * (decoded on the GPU). */
int patina__extractor_reads_device(const patina_extractor_t *ex);

extern const patina_family_t patina_family_cedd;
extern const patina_family_t patina_family_lbp;
extern const patina_family_t patina_family_lbp8;
extern const patina_family_t patina_family_tlbap;
extern const patina_family_t patina_family_lanadp;
extern const patina_family_t patina_family_glcm;
extern const patina_family_t patina_family_haralick;
extern const patina_family_t patina_family_rootsift;
extern const patina_family_t patina_family_signature;

#endif
