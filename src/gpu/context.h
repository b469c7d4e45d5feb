/* Private to src/gpu: the device context behind patina_gpu_t, its memory
 * plan, and the C glue that lets the CUDA host code use the C reference's
 * geometry without copying it.
 *
 * Memory plan ("planned GPU memory", ../shared/STYLE.md §9): the context owns
 * PGPU_SLOTS slots, one CUDA stream each. A slot holds everything one batch
 * needs, allocated once at open from the budget:
 *   device: pixel input (in_cap bytes), block sums (blk_cap x 48 B), block
 *           contributions (blk_cap x 200 B), the batch's piece and segment
 *           tables, descriptors out (seg_cap x 144 B)
 *   pinned: staging for pageable pixels (in_cap), block sums for the hybrid
 *           CPU stage (blk_cap x 48 B), tables, descriptors out.
 * Batches are cut to fit a slot; an image larger than a slot is split into
 * pieces (whole block rows, or parts of one block row) that may span several
 * batches, with the 144-bin running histogram carried between them. Batch k
 * uses slot k % PGPU_SLOTS, so while the GPU works on batch k the host fills
 * the staging (or computes block sums) of batch k+1 and copies of batch k+1
 * overlap kernels of batch k. */
#ifndef PATINA_GPU_CONTEXT_H
#define PATINA_GPU_CONTEXT_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"
#include "features/cedd_core.h"
#include "gpu/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PGPU_SLOTS 3
#define PGPU_CARRY 4 /* running-histogram ring between batches (> PGPU_SLOTS) */

/* One piece of an image, as kernel 1 sees it: a rectangle of nbx x nby blocks
 * of sx x sy pixels (whole block rows, or a part of one block row), whose
 * first pixel is at src (device address) with rows `pitch` bytes apart. Its
 * block sums go to the batch's block buffer from index blk0, raster order. */
typedef struct pgpu_piece {
    const uint8_t *src;
    uint64_t pitch;
    uint64_t blk0;
    int32_t nbx, nby;
    int32_t sx, sy;
    int32_t nbc;      /* blocks per thread block (CTA) along a block row */
    int32_t nchunk;   /* CTAs per block row: ceil(nbx / nbc) */
    int32_t rows;     /* row pairs staged in shared memory per pass; 0 = read global directly */
    uint32_t task0;   /* first CTA of this piece in the launch */
} pgpu_piece_t;

/* A run of consecutive blocks of one image within a batch (kernel 2: one CTA
 * each). first: the run starts at the image's block 0 (else it continues the
 * carried histogram); last: it ends at the image's final block (then its
 * descriptor goes to row `out` of the batch's output). */
typedef struct pgpu_seg {
    uint64_t blk0;
    uint32_t nblk;
    int32_t w, h;
    int32_t first, last;
    int32_t out;
    int32_t pad_;
} pgpu_seg_t;

/* Host-side bookkeeping of a piece (not sent to the device). */
typedef struct pgpu_hpiece {
    const uint8_t *hsrc;   /* host (or device) address of the first pixel */
    size_t hstride;        /* image stride */
    size_t rowbytes;       /* bytes used per pixel row = nbx*sx*3 */
    size_t rows;           /* pixel rows = nby*sy */
    size_t doff;           /* offset in the slot's pixel input (and staging) */
    size_t dpitch;         /* pitch there: rowbytes rounded up to 16 */
    size_t img;            /* image index */
    int by0, bx0;          /* first block row / column in the image */
    int kind;              /* PGPU_MEM_* */
    uint32_t task0, ntask; /* host tasks (staging row chunks, or hybrid block rows) */
} pgpu_hpiece_t;

enum { PGPU_MEM_NONE = 0, PGPU_MEM_PAGEABLE, PGPU_MEM_PINNED, PGPU_MEM_DEVICE };

typedef struct pgpu_slot {
    void *stream;           /* cudaStream_t */
    void *done;             /* cudaEvent_t: after the batch's last operation */
    void *k2_done;          /* cudaEvent_t: after the batch's kernel 3 (accumulation) */
    void *prof[6];          /* timing events around kernels 1, 2 and 3 (profiling only) */
    int busy;               /* holds a batch not yet harvested */
    int profiled;           /* its kernels were timed */
    /* device */
    uint8_t *d_in;
    cedd_block_t *d_blk;
    cedd_contrib_t *d_con;  /* blk_cap contributions, 200 B each */
    pgpu_piece_t *d_pieces;
    pgpu_seg_t *d_segs;
    uint8_t *d_out;
    /* pinned host */
    uint8_t *h_stage;
    cedd_block_t *h_blk;
    pgpu_piece_t *h_pieces;
    pgpu_seg_t *h_segs;
    uint8_t *h_out;
    /* host */
    pgpu_hpiece_t *hp;
    size_t *out_img;        /* image of each output row */
    /* the batch in the slot */
    size_t npieces, nsegs, nout, in_used, blk_used;
    uint32_t ntasks, nhtasks;
    size_t smem;
} pgpu_slot_t;

struct patina_gpu {
    int device;
    char name[256];
    int sm_count;
    uint64_t budget;
    size_t dev_bytes, pinned_bytes;   /* allocated by the plan */
    /* planned capacities per slot, and the ones in force (<= planned) */
    size_t in_plan, blk_plan, unit_plan;
    size_t in_cap, blk_cap, unit_cap;
    pgpu_slot_t slot[PGPU_SLOTS];
    double *d_carry;                  /* PGPU_CARRY x 144 running histograms between batches */
    patina_pool_t *pool;              /* host threads for staging copies */
    /* profiling (patina_gpu__profile): kernel times summed over batches */
    int profile;
    double prof_ms[4];
    uint64_t prof_batches;
};

/* patina_status from a CUDA error code: "gpu: <what>: <message> (<name>)". */
patina_status pgpu_fail(int cuda_error, const char *what, const char *file, int line);

/* In a function returning patina_status: a failed CUDA call returns
 * pgpu_fail's status, naming the call, the file and the line. */
#define PGPU_CU(call)                                                                          \
    do {                                                                                       \
        cudaError_t pgpu_e_ = (call);                                                          \
        if (pgpu_e_ != cudaSuccess) return pgpu_fail((int)pgpu_e_, #call, __FILE__, __LINE__); \
    } while (0)

/* C glue (cedd_glue.c): the C reference's geometry and finishing, so the
 * host code of the .cu files uses the exact same functions. */
cedd_geom_t pgpu_cedd_geometry(int w, int h);
void pgpu_cedd_finish(uint8_t out[CEDD_BINS], const double hist[CEDD_BINS], int compact);

#ifdef __cplusplus
}
#endif
#endif
