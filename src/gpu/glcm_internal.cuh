/* What the GLCM GPU files share (src/gpu/glcm.cu: the counting path, the
 * GLCM state of a device context, the checks of a request, the counting
 * entry points and the timing; glcm_features.cu: the properties and
 * Haralick features of whole batches of matrices and their entry points):
 * the state's structs, a request's image source and the functions that
 * cross the two files. Declarations only, no kernel: the counting kernels
 * are in glcm_kernels.cuh, which glcm.cu alone includes. Not a header of
 * the lab: internal to the library's CUDA side. */
#ifndef PATINA_GPU_GLCM_INTERNAL_CUH
#define PATINA_GPU_GLCM_INTERNAL_CUH

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "gpu/context.h"
#include "gpu/glcm.h"
#include "gpu/gpu.h"
#include "patina/glcm.h"

#define NSLOT PGPU_STREAMS            /* slots, one per context stream */

struct glcm_task; /* a counting task (src/gpu/glcm_kernels.cuh) */

/* ------------------------------------------------------------- state */

/* One slot: device memory for a batch of images (or a tile), its pinned
 * staging and task table, on one of the context's streams. */
struct glcm_slot {
    cudaStream_t s;
    cudaEvent_t done;          /* after the slot's last kernel */
    uint8_t *d_buf, *h_stage;  /* GLCM_GUARD + cap bytes each */
    size_t cap;
    glcm_task *d_tasks, *h_tasks;
    size_t task_cap;
    int used;                  /* done is recorded and may be pending */
};

/* A tile in a slot: rows [lo, hi) of image img at byte `off` of the slot;
 * direct: not staged: 1 copied from the caller's pinned grey levels,
 * GLCM_DEV_RGB made into levels on the device from RGB in device memory. */
#define GLCM_DEV_RGB 2
struct glcm_piece {
    size_t img;
    int lo, hi;
    size_t off;
    int direct;
};

/* Rows [r0, r1) of image img for one host thread to stage at dst. */
struct glcm_item {
    size_t img;
    int r0, r1;
    uint8_t *dst;
    size_t pitch;
    patina_status st;
};

/* The GLCM state of a device context (pgpu_state(g, PGPU_FAM_GLCM)). */
struct glcm_state {
    glcm_slot sl[NSLOT];
    cudaEvent_t zeroed;        /* a run's counts are zero */
    size_t slot_plan;          /* image bytes per slot, from the budget */
    uint32_t *d_counts;        /* a chunk's counts (elements) */
    size_t counts_cap;
    uint32_t *d_sub;           /* the same without a mask's sentinel level */
    size_t sub_cap;
    double *d_feat;            /* (matrices, 10 + 14) */
    size_t feat_cap;
    double *d_work;            /* k_mcc's scratch (doubles) */
    size_t work_cap;
    glcm_piece *pieces;        /* host: the pieces of the slot being filled */
    size_t pieces_cap;
    glcm_item *items;          /* host: a slot's staging work */
    size_t items_cap;
};
/* ------------------------------------------------------------ sources */

/* The images of a request: quantised host images (patina_gpu_grey_t) or a
 * caller's rows callback (pgpu_glcm_src_t). */
struct glcm_source {
    size_t n;
    const patina_gpu_grey_t *grey; /* or */
    const pgpu_glcm_src_t *src;
    int masked;
};
/* ------------------------------------------------- glcm.cu, for glcm_features.cu */

/* g's GLCM state, made on first use. */
patina_status glcm_state_get(patina_gpu_t *g, glcm_state **out);

/* Device buffer *p of at least `need` elements of `elem` bytes (the old
 * contents are not kept). */
patina_status glcm_grow_dev(patina_gpu_t *g, void **p, size_t *cap, size_t need, size_t elem, const char *tag);

/* Waits for every slot (on failure: drains, keeping the first error). */
patina_status glcm_sync_all(glcm_state *c);

/* The checks of a request's levels and offsets, and of image i's size. */
patina_status glcm_check_request(const patina_gpu_t *g, int levels, const patina_glcm_offset_t *off,
                                 size_t noff);
patina_status glcm_check_size(size_t i, int w, int h, int symmetric);

/* Images per chunk so that a chunk's matrices fit a quarter of the budget. */
size_t glcm_chunk_images(const patina_gpu_t *g, size_t noff, int L, int Lmax, int feats);

/* The most levels a request may be counted with (a mask's sentinel). */
int glcm_levels_max(int L, int masked);

/* Counts of images [i0, i1) at `levels` levels on the device: *d_res
 * ((i1 - i0), noff, levels, levels), queued on slot 0. */
patina_status glcm_count_chunk(patina_gpu_t *g, glcm_state *c, const pgpu_glcm_knobs_t *k,
                               const glcm_source *src, size_t i0, size_t i1, int levels,
                               const patina_glcm_offset_t *off, size_t noff, int symmetric, uint32_t **d_res,
                               patina_status *st);

#endif
