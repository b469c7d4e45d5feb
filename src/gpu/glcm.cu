/* GLCM on the GPU: the production counting path, the GLCM state of a
 * device context, the checks of a request, the counting entry points and
 * the timing of the lab and the benchmark (pgpu_glcm_time). Not here: the
 * counting kernels (glcm_kernels.cuh), the properties and Haralick
 * features of whole batches of matrices and their entry points
 * (glcm_features.cu); what crosses the two files is in glcm_internal.cuh.
 *
 * Counting (the kernels: src/gpu/glcm_kernels.cuh):
 *   - Images are staged into slots of device memory (layout in
 *     glcm_kernels.cuh): pinned sources without a mask are copied straight
 *     from the caller's memory; everything else is written by the context's
 *     host threads into the slot's pinned staging buffer (the family's own
 *     rows callback writes grey levels there directly) and copied as one
 *     block. Small images are packed many per slot and counted by one
 *     launch; an image larger than a slot is cut into tiles of first-pixel
 *     rows, each copied with pad_up = max(0, -min dy) rows above and
 *     pad_down = max(0, max dy) rows below, so every pair whose first pixel
 *     is in the tile is counted by that tile and by no other.
 *   - Slots rotate over the context's streams: while slot k's kernel runs,
 *     the host stages slot k+1 and its copy queues behind.
 *   - The kernel of a launch comes from choose_production: by the levels,
 *     the offsets and the work of a launch (first pixels per SM).
 *   - Masks: a pixel outside the mask gets bit 7 where the chosen kernel
 *     reads it (L = 32: k_count4 for 2..32 offsets, k_count3 for one), else
 *     the sentinel level L, counted with Lc = L + 1 levels (rounded up to a
 *     power of two while <= 32, so the fast kernels take it) and dropped
 *     afterwards (k_drop_level): the L x L block holds exactly the pairs
 *     whose two pixels are inside, the C reference's rule.
 *
 * Memory: every buffer belongs to the context's GLCM state (tagged
 * allocations within its budget), released with the context. Batches are
 * cut into chunks whose matrices fit a quarter of the budget; slots take at
 * most a sixteenth each (32 MiB at most: larger batches do not speed the
 * copy engine up). Nothing prints; every CUDA error becomes a status. */
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "algo/glcm_core.h"
#include "algo/grey.h"
#include "gpu/context.h"
#include "gpu/glcm.h"
#include "gpu/glcm_internal.cuh"
#include "gpu/glcm_kernels.cuh"
#include "gpu/gpu.h"
#include "patina/glcm.h"

#define SLOT_MAX ((size_t)32 << 20)   /* image bytes per slot */
#define SLOT_MIN ((size_t)1 << 20)
#define TASKS_INIT 1024               /* task table entries per slot to start with */
#define TASK_MIN ((size_t)1 << 14)    /* smallest task sized from a launch (pixels): a flush per block costs */
#define STAGE_ITEM ((size_t)256 << 10) /* bytes of rows per host staging item */
#define K_THREADS 640                 /* the shared-memory counting kernels' blocks */

#define CK(call) PGPU_CU(call)
#define CKL() CK(cudaGetLastError())

/* ------------------------------------------------------------ kernels */

/* P + P^T for nmat matrices. */
static __global__ void k_symmetrise(uint32_t *P, long long nmat, int L)
{
    const long long LL = (long long)L * L, n = nmat * LL;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
         e += (long long)gridDim.x * blockDim.x) {
        const long long m = e / LL;
        const int cell = (int)(e - m * LL), i = cell / L, j = cell - i * L;
        uint32_t *M = P + m * LL;
        if (i < j) {
            const uint32_t s = M[i * L + j] + M[j * L + i];
            M[i * L + j] = s;
            M[j * L + i] = s;
        } else if (i == j) {
            M[cell] *= 2;
        }
    }
}

/* The L x L blocks of nmat L1 x L1 matrices (L1 > L): a mask's sentinel
 * level L (and the unused levels above it) dropped. */
static __global__ void k_drop_level(const uint32_t *__restrict__ src, uint32_t *__restrict__ dst, long long nmat, int L,
                             int L1i)
{
    const long long LL = (long long)L * L, n = nmat * LL, L1 = L1i;
    for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n;
         e += (long long)gridDim.x * blockDim.x) {
        const long long m = e / LL;
        const int c = (int)(e - m * LL), i = c / L, j = c - i * L;
        dst[e] = src[m * L1 * L1 + i * L1 + j];
    }
}


/* ------------------------------------------------------------ policy */

/* The counting kernels the policy picks (instances of glcm_kernels.cuh). */
static const glcm_count_fn k4_u2[5] = {k_count4<1, 2, 0, K_THREADS>, k_count4<2, 2, 0, K_THREADS>,
                                       k_count4<3, 2, 0, K_THREADS>, k_count4<4, 2, 0, K_THREADS>,
                                       k_count4<5, 2, 0, K_THREADS>};
static const char *const k4_u2_name[5] = {"k_count4<L=2,U=2>", "k_count4<L=4,U=2>", "k_count4<L=8,U=2>",
                                          "k_count4<L=16,U=2>", "k_count4<L=32,U=2>"};
static const glcm_count_fn k4_u4[2] = {k_count4<4, 4, 0, K_THREADS>, k_count4<5, 4, 0, K_THREADS>};
static const char *const k4_u4_name[2] = {"k_count4<L=16,U=4>", "k_count4<L=32,U=4>"};
static const glcm_count_fn k4_mk[2] = {k_count4<5, 2, 0, K_THREADS, true>, k_count4<5, 4, 0, K_THREADS, true>};
static const char *const k4_mk_name[2] = {"k_count4<L=32,U=2,mask>", "k_count4<L=32,U=4,mask>"};
static const glcm_count_fn k5[2][3] = {
    {k_count5<1, 2, 0, K_THREADS>, k_count5<2, 2, 0, K_THREADS>, k_count5<3, 2, 0, K_THREADS>},
    {k_count5<1, 2, 1, K_THREADS>, k_count5<2, 2, 1, K_THREADS>, k_count5<3, 2, 1, K_THREADS>}};
static const char *const k5_name[2][3] = {{"k_count5<L=2,LD=0>", "k_count5<L=4,LD=0>", "k_count5<L=8,LD=0>"},
                                          {"k_count5<L=2,LD=1>", "k_count5<L=4,LD=1>", "k_count5<L=8,LD=1>"}};
static const glcm_count_fn k3_lo = k_count3<false, true, K_THREADS>;      /* L <= 16 */
static const glcm_count_fn k3_hi = k_count3<true, true, K_THREADS>;       /* L = 32 */
static const glcm_count_fn k3_mk = k_count3<true, true, K_THREADS, true>; /* L = 32, mask in bit 7 */
static const glcm_count_fn k2 = k_count2<true, K_THREADS>;

/* The production policy (measurements: docs/lab/glcm.md). By the work of a
 * launch, px = first pixels per SM, and L = 2^s:
 *   - 2..32 offsets, L <= 8, px >= 64 K: k_count5 (a shared atomic per two
 *     pairs), partners by 8-byte loads (LD = 1) from px >= 1 M;
 *   - 2..32 offsets, L <= 32, px >= 16 K: k_count4 (lanes carry the
 *     offsets), four groups per lane and window (U = 4) from px >= 1 M
 *     (which with L <= 8 the first rule takes), else two;
 *   - one offset, L <= 32: k_count3;
 *   - otherwise k_count2 (G offsets per block as shared memory allows, C
 *     copies each), or k_count_global when one matrix does not fit.
 * The flag-reading instances exist for L = 32 only (k_count4 and k_count3);
 * elsewhere a flagged plan is refused (PATINA_E_LIMIT, no message). */
static patina_status choose_production(const pgpu_glcm_chooser *self, glcm_plan *pl)
{
    const int L = pl->L, n = pl->noff;
    const bool pow2 = L >= 2 && (L & (L - 1)) == 0, multi = n >= 2 && n <= 32;
    const int s = pow2 ? __builtin_ctz((unsigned)L) : 0;
    const bool big = pl->px_per_sm >= ((size_t)1 << 20);
    (void)self;
    glcm_copies_plan(pl);
    pl->threads = K_THREADS;
    if (pow2 && L <= 8 && multi && pl->px_per_sm >= ((size_t)1 << 16)) {
        if (pl->flagged) return PATINA_E_LIMIT;
        pl->kind = GLCM_KIND_LANES;
        pl->fn = k5[big][s - 1];
        pl->name = k5_name[big][s - 1];
        pl->G = n;
        pl->R = glcm_lanes((n + 1) / 2);
        pl->smem = (int)(((long long)L * L * L + 2LL * L * L) * 32 * 4);
        return PATINA_OK;
    }
    if (pow2 && L <= 32 && multi && pl->px_per_sm >= ((size_t)1 << 14)) {
        if (pl->flagged && L != 32) return PATINA_E_LIMIT;
        pl->kind = GLCM_KIND_LANES;
        if (pl->flagged) {
            pl->fn = k4_mk[big];
            pl->name = k4_mk_name[big];
        } else if (big) { /* L >= 16 here: smaller L went to k_count5 */
            pl->fn = k4_u4[s - 4];
            pl->name = k4_u4_name[s - 4];
        } else {
            pl->fn = k4_u2[s - 1];
            pl->name = k4_u2_name[s - 1];
        }
        pl->G = n;
        pl->R = glcm_lanes(n);
        pl->smem = (int)((long long)L * L * (L == 32 ? 32 : 64) * 4);
        return PATINA_OK;
    }
    if (pl->kind == GLCM_KIND_GLOBAL) {
        if (pl->flagged) return PATINA_E_LIMIT;
        pl->fn = NULL;
        pl->threads = GLCM_GLOBAL_THREADS;
        pl->name = "k_count_global";
        return PATINA_OK;
    }
    if (pow2 && L <= 32 && pl->G == 1) {
        if (pl->flagged && L != 32) return PATINA_E_LIMIT;
        pl->fn = L < 32 ? k3_lo : pl->flagged ? k3_mk : k3_hi;
        pl->name = L < 32 ? "k_count3<L<=16>" : pl->flagged ? "k_count3<L=32,mask>" : "k_count3<L=32>";
        return PATINA_OK;
    }
    if (pl->flagged) return PATINA_E_LIMIT;
    pl->fn = k2;
    pl->name = "k_count2";
    return PATINA_OK;
}

/* ------------------------------------------------------------- state */

/* Its structs (slots, pieces, staging items, the state): glcm_internal.cuh. */

static void slot_close(patina_gpu_t *g, glcm_slot *s)
{
    if (s->s) (void)cudaStreamSynchronize(s->s);
    pgpu_free(g, s->d_buf);
    pgpu_free(g, s->h_stage);
    pgpu_free(g, s->d_tasks);
    pgpu_free(g, s->h_tasks);
    if (s->done) (void)cudaEventDestroy(s->done);
    memset(s, 0, sizeof *s);
}

static void glcm_release(patina_gpu_t *g, void *state)
{
    glcm_state *c = (glcm_state *)state;
    (void)cudaSetDevice(g->device);
    for (int k = 0; k < NSLOT; k++) slot_close(g, &c->sl[k]);
    if (c->zeroed) (void)cudaEventDestroy(c->zeroed);
    pgpu_free(g, c->d_counts);
    pgpu_free(g, c->d_sub);
    pgpu_free(g, c->d_feat);
    pgpu_free(g, c->d_work);
    free(c->pieces);
    free(c->items);
    (void)cudaGetLastError();
    free(c);
}

/* Lets every production kernel take the SM's opt-in shared memory. */
static patina_status set_attributes(patina_gpu_t *g)
{
    const glcm_count_fn fns[] = {k4_u2[0], k4_u2[1], k4_u2[2], k4_u2[3], k4_u2[4], k4_u4[0], k4_u4[1],
                                 k4_mk[0], k4_mk[1], k5[0][0], k5[0][1], k5[0][2], k5[1][0], k5[1][1],
                                 k5[1][2], k3_lo, k3_hi, k3_mk, k2};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        CK(cudaFuncSetAttribute(fns[i], cudaFuncAttributeMaxDynamicSharedMemorySize, g->smem_optin));
    return PATINA_OK;
}

/* g's GLCM state, made on first use. */
patina_status glcm_state_get(patina_gpu_t *g, glcm_state **out)
{
    glcm_state *c = (glcm_state *)pgpu_state(g, PGPU_FAM_GLCM);
    patina_status s = PATINA_OK;
    *out = c;
    if (c) return PATINA_OK;
    c = (glcm_state *)calloc(1, sizeof *c);
    if (!c) return patina__fail(PATINA_E_NOMEM, "gpu: glcm: out of host memory");
    pgpu_set_state(g, PGPU_FAM_GLCM, c, glcm_release);
    c->slot_plan = (size_t)(g->budget / 16);
    if (c->slot_plan > SLOT_MAX) c->slot_plan = SLOT_MAX;
    if (c->slot_plan < SLOT_MIN) c->slot_plan = SLOT_MIN;
    for (int k = 0; s == PATINA_OK && k < NSLOT; k++) {
        cudaError_t e;
        c->sl[k].s = (cudaStream_t)pgpu_stream(g, k);
        e = cudaEventCreateWithFlags(&c->sl[k].done, cudaEventDisableTiming);
        if (e != cudaSuccess) s = pgpu_fail((int)e, "cudaEventCreateWithFlags", __FILE__, __LINE__);
    }
    if (s == PATINA_OK) {
        cudaError_t e = cudaEventCreateWithFlags(&c->zeroed, cudaEventDisableTiming);
        if (e != cudaSuccess) s = pgpu_fail((int)e, "cudaEventCreateWithFlags", __FILE__, __LINE__);
    }
    if (s == PATINA_OK) s = set_attributes(g);
    if (s != PATINA_OK) {
        pgpu_drop_state(g, PGPU_FAM_GLCM);
        return s;
    }
    *out = c;
    return PATINA_OK;
}

/* Device buffer *p of at least `need` elements of `elem` bytes (the old
 * contents are not kept). */
patina_status glcm_grow_dev(patina_gpu_t *g, void **p, size_t *cap, size_t need, size_t elem, const char *tag)
{
    if (*cap >= need && *p) return PATINA_OK;
    pgpu_free(g, *p);
    *p = NULL;
    *cap = 0;
    PATINA_TRY(pgpu_dev_alloc(g, p, (need ? need : 1) * elem, PGPU_FAM_GLCM, tag));
    *cap = need;
    return PATINA_OK;
}

/* Host array *p of at least `need` elements (realloc: the contents are kept). */
static patina_status grow_host(void **p, size_t *cap, size_t need, size_t elem)
{
    void *q;
    if (*cap >= need && *p) return PATINA_OK;
    q = realloc(*p, (need ? need : 1) * elem);
    if (!q) return patina__fail(PATINA_E_NOMEM, "gpu: glcm: out of host memory");
    *p = q;
    *cap = need;
    return PATINA_OK;
}

static patina_status slot_wait(glcm_slot *s)
{
    if (s->used) {
        CK(cudaEventSynchronize(s->done));
        s->used = 0;
    }
    return PATINA_OK;
}

/* Slot s with room for `bytes` of images and `tasks` tasks, idle. */
static patina_status slot_reserve(patina_gpu_t *g, glcm_slot *s, size_t bytes, size_t tasks)
{
    PATINA_TRY(slot_wait(s));
    if (s->cap < bytes || !s->d_buf) {
        pgpu_free(g, s->d_buf);
        pgpu_free(g, s->h_stage);
        s->d_buf = s->h_stage = NULL;
        s->cap = 0;
        PATINA_TRY(pgpu_dev_alloc(g, (void **)&s->d_buf, GLCM_GUARD + bytes, PGPU_FAM_GLCM, "image slot"));
        PATINA_TRY(pgpu_pin_alloc(g, (void **)&s->h_stage, GLCM_GUARD + bytes, PGPU_FAM_GLCM, "image staging"));
        CK(cudaMemsetAsync(s->d_buf, 0, GLCM_GUARD, s->s)); /* read (and masked out) by left partners */
        s->cap = bytes;
    }
    if (s->task_cap < tasks || !s->d_tasks) {
        pgpu_free(g, s->d_tasks);
        pgpu_free(g, s->h_tasks);
        s->d_tasks = s->h_tasks = NULL;
        s->task_cap = 0;
        PATINA_TRY(pgpu_dev_alloc(g, (void **)&s->d_tasks, tasks * sizeof(glcm_task), PGPU_FAM_GLCM, "task table"));
        PATINA_TRY(pgpu_pin_alloc(g, (void **)&s->h_tasks, tasks * sizeof(glcm_task), PGPU_FAM_GLCM, "task table"));
        s->task_cap = tasks;
    }
    return PATINA_OK;
}

/* Waits for every slot (on failure: drains, keeping the first error). */
patina_status glcm_sync_all(glcm_state *c)
{
    patina_status s = PATINA_OK;
    for (int j = 0; j < NSLOT; j++) {
        cudaError_t e = cudaStreamSynchronize(c->sl[j].s);
        if (e != cudaSuccess && s == PATINA_OK) s = pgpu_fail((int)e, "cudaStreamSynchronize", __FILE__, __LINE__);
        c->sl[j].used = 0;
    }
    return s;
}

/* ------------------------------------------------------------ sources */

/* The source of a request (glcm_source): glcm_internal.cuh. */

static int src_w(const glcm_source *s, size_t i) { return s->grey ? s->grey[i].w : s->src->w[i]; }
static int src_h(const glcm_source *s, size_t i) { return s->grey ? s->grey[i].h : s->src->h[i]; }

static int is_pinned(const void *p)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeHost;
}

/* Image i is not staged by host threads: 1, its levels are copied from the
 * caller's pinned memory; GLCM_DEV_RGB, they are made on the device from its
 * RGB in device memory (k_levels); 0, staged. */
static int src_direct(const glcm_source *s, size_t i)
{
    if (s->src && s->src->dev && s->src->dev[i].data) return GLCM_DEV_RGB;
    return s->grey && !s->grey[i].mask && is_pinned(s->grey[i].q);
}

/* Rows of a device RGB image (rows `stride` bytes apart, w pixels) to grey
 * levels at dst (rows `pitch` apart): the C path's rules, grey_bt601 then
 * uniform quantisation (grey * levels) >> 8 (patina_glcm_quantize). */
__global__ void k_levels(const uint8_t *__restrict__ rgb, size_t stride, int w, int rows, uint8_t *__restrict__ dst,
                         size_t pitch, int levels)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= w) return;
    for (int y = blockIdx.y; y < rows; y += gridDim.y) {
        const uint8_t *p = rgb + (size_t)y * stride + 3 * (size_t)x;
        const unsigned g = grey_bt601(p[0], p[1], p[2]);
        dst[(size_t)y * pitch + x] = (uint8_t)((g * (unsigned)levels) >> 8);
    }
}

/* Rows [r0, r1) of image i into dst (rows `pitch` apart), a mask encoded as
 * (level & out_and) | out_or. */
static patina_status src_rows(const glcm_source *s, size_t i, int r0, int r1, uint8_t *dst, size_t pitch,
                              unsigned out_and, unsigned out_or)
{
    const patina_gpu_grey_t *im;
    if (!s->grey) return s->src->rows(s->src->arg, i, r0, r1, dst, pitch, out_and, out_or);
    im = &s->grey[i];
    for (int r = r0; r < r1; r++) {
        uint8_t *d = dst + (size_t)(r - r0) * pitch;
        memcpy(d, im->q + (size_t)r * im->stride, (size_t)im->w);
        if (im->mask) {
            const uint8_t *m = im->mask + (size_t)r * im->mstride;
            for (int x = 0; x < im->w; x++)
                if (!m[x]) d[x] = (uint8_t)((d[x] & out_and) | out_or);
        }
    }
    return PATINA_OK;
}

/* ------------------------------------------------------------ planning */

/* One counting run over images [i0, i1): the plan, the slot size, the work
 * of a full launch, and how a mask is encoded. */
struct glcm_run {
    glcm_plan pl;
    size_t cap;                /* image bytes per slot */
    size_t launch_px;          /* first pixels of a full launch */
    int Lc;                    /* levels counted */
    unsigned out_and, out_or;  /* a pixel outside the mask: (level & out_and) | out_or */
};

/* The plan's kernel (the knobs' chooser, else the policy) and launch size.
 * PATINA_E_LIMIT without a message: a flagged plan nothing counts. */
static patina_status plan_kernel(patina_gpu_t *g, const pgpu_glcm_knobs_t *k, glcm_plan *pl)
{
    int per_sm = 0;
    patina_status s;
    pl->smem_optin = g->smem_optin;
    s = k && k->chooser ? k->chooser->choose(k->chooser, pl) : choose_production(NULL, pl);
    if (s != PATINA_OK) return s;
    if (pl->kind == GLCM_KIND_GLOBAL) {
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_count_global, GLCM_GLOBAL_THREADS, 0));
    } else {
        if (k && k->chooser) /* the policy's kernels got theirs with the state */
            CK(cudaFuncSetAttribute(pl->fn, cudaFuncAttributeMaxDynamicSharedMemorySize, g->smem_optin));
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, pl->fn, pl->threads, pl->smem));
    }
    pl->grid = (per_sm > 0 ? per_sm : 1) * g->sm_count;
    return PATINA_OK;
}

/* Plans a run over images [i0, i1) with `levels` levels; resident: the
 * images held whole in one slot, one launch (pgpu_glcm_time). */
static patina_status plan_run(patina_gpu_t *g, const glcm_state *c, const pgpu_glcm_knobs_t *k,
                              const glcm_source *src, size_t i0, size_t i1, int levels,
                              const patina_glcm_offset_t *off, size_t noff, int resident, glcm_run *r)
{
    int max_h = 0, pad_up = 0, pad_down = 0;
    size_t total = 0, px_per_sm;
    patina_status s;
    memset(r, 0, sizeof *r);
    for (size_t i = i0; i < i1; i++) {
        const int w = src_w(src, i), h = src_h(src, i);
        if (w <= 0 || h <= 0) continue;
        if (h > max_h) max_h = h;
        total += (size_t)w * (size_t)h;
    }
    for (size_t o = 0; o < noff; o++) {
        const int dy = off[o].dy;
        if (dy >= max_h || dy <= -max_h) continue; /* no pair at all */
        if (-dy > pad_up) pad_up = -dy;
        if (dy > pad_down) pad_down = dy;
    }
    r->cap = resident ? 0 : k && k->slot_bytes ? k->slot_bytes : c->slot_plan;
    for (size_t i = i0; i < i1; i++) { /* a slot holds at least one row of each image with its padding */
        const int w = src_w(src, i), h = src_h(src, i);
        if (w <= 0 || h <= 0) continue;
        if (resident) {
            r->cap += glcm_pitch(w) * (size_t)h;
        } else {
            const size_t need = glcm_pitch(w) * (size_t)(pad_up + pad_down + 1);
            if (need > r->cap) r->cap = need;
        }
    }
    r->launch_px = total < r->cap ? total : r->cap; /* a launch holds at most a slot */
    if (resident) r->launch_px = total;
    px_per_sm = k && k->policy_px ? k->policy_px : r->launch_px / (size_t)(g->sm_count > 0 ? g->sm_count : 1);
    r->Lc = levels;
    r->out_and = 0xffu;
    r->out_or = 0;
    r->pl.noff = (int)noff;
    r->pl.px_per_sm = px_per_sm;
    if (src->masked) { /* the mask in bit 7 where the kernel reads it */
        r->pl.L = levels;
        r->pl.flagged = 1;
        s = plan_kernel(g, k, &r->pl);
        if (s == PATINA_OK) {
            r->out_or = 0x80u;
        } else if (s == PATINA_E_LIMIT) { /* else the sentinel level `levels` */
            r->Lc = levels + 1;
            if (r->Lc <= 32)
                while (r->Lc & (r->Lc - 1)) r->Lc++;
            r->out_and = 0;
            r->out_or = (unsigned)levels;
            r->pl.flagged = 0;
        } else {
            return s;
        }
    }
    if (!r->pl.flagged) {
        r->pl.L = r->Lc;
        PATINA_TRY(plan_kernel(g, k, &r->pl));
    }
    r->pl.pad_up = pad_up;
    r->pl.pad_down = pad_down;
    return PATINA_OK;
}

/* Rows of a task for images of width w: one band per block (and offset
 * subset) of a full launch, so that the blocks get equal work, at least
 * task_min pixels; or the knobs' fixed size. */
static size_t rows_per_task(const patina_gpu_t *g, const pgpu_glcm_knobs_t *k, const glcm_plan *pl,
                            size_t launch_px, int w)
{
    const size_t tmin = k && k->task_min ? k->task_min : TASK_MIN;
    size_t px = k && k->task_pixels ? k->task_pixels : 0, rows;
    if (!px && pl->kind == GLCM_KIND_GLOBAL) { /* many small blocks: ~64 K-pixel tasks unless few */
        const size_t sms = (size_t)(g->sm_count > 0 ? g->sm_count : 1);
        px = (launch_px + sms - 1) / sms;
        if (px > ((size_t)1 << 16)) px = (size_t)1 << 16;
        if (px < tmin) px = tmin;
    } else if (!px) {
        const size_t blocks = (size_t)pl->grid / (size_t)pl->S > 0 ? (size_t)pl->grid / (size_t)pl->S : 1;
        px = (launch_px + blocks - 1) / blocks;
        if (px < tmin) px = tmin;
    }
    rows = (px + (size_t)w - 1) / (size_t)w;
    return rows < 1 ? 1 : rows;
}

/* ------------------------------------------------------------ counting */

/* The kernels counting `ntasks` tasks of d_tasks for every offset: one
 * launch per G * S offsets. */
static patina_status launch_count(cudaStream_t st, const glcm_plan *pl, const glcm_task *d_tasks, int ntasks,
                                  const patina_glcm_offset_t *off, size_t noff, uint32_t *d_out)
{
    const size_t per_launch = (size_t)pl->G * (size_t)pl->S;
    const int C = pl->kind == GLCM_KIND_LANES ? __builtin_ctz((unsigned)pl->R) : pl->R;
    for (size_t o0 = 0; o0 < noff; o0 += per_launch) {
        glcm_offs ko;
        int grid = ntasks < pl->grid ? ntasks : pl->grid;
        memset(&ko, 0, sizeof ko);
        ko.n = (int)(noff - o0 < per_launch ? noff - o0 : per_launch);
        ko.o0 = (int)o0;
        ko.noff_total = (int)noff;
        for (int o = 0; o < ko.n; o++) {
            ko.dy[o] = off[o0 + (size_t)o].dy;
            ko.dx[o] = off[o0 + (size_t)o].dx;
        }
        if (grid < 1) grid = 1;
        if (pl->kind == GLCM_KIND_GLOBAL)
            k_count_global<<<grid, GLCM_GLOBAL_THREADS, 0, st>>>(d_tasks, ntasks, ko, pl->L, d_out);
        else
            pl->fn<<<grid, pl->threads, pl->smem, st>>>(d_tasks, ntasks, ko, pl->G, pl->L, C, d_out);
        CKL();
    }
    return PATINA_OK;
}

static int launches_of(const glcm_plan *pl, size_t noff)
{
    const size_t per = (size_t)pl->G * (size_t)pl->S;
    return (int)((noff + per - 1) / per);
}

/* P + P^T of nmat matrices (L x L) on stream st. */
static patina_status symmetrise(patina_gpu_t *g, cudaStream_t st, uint32_t *d, size_t nmat, int L)
{
    const long long nm = (long long)nmat, LL = (long long)L * L;
    long long blocks = (nm * LL + 255) / 256;
    if (blocks > 8LL * g->sm_count) blocks = 8LL * g->sm_count;
    if (blocks < 1) blocks = 1;
    k_symmetrise<<<(unsigned)blocks, 256, 0, st>>>(d, nm, L);
    CKL();
    return PATINA_OK;
}

typedef struct stage_job {
    const glcm_source *src;
    glcm_item *items;
    unsigned out_and, out_or;
} stage_job_t;

static void stage_task(void *arg, size_t j, int worker)
{
    const stage_job_t *jb = (const stage_job_t *)arg;
    glcm_item *it = &jb->items[j];
    (void)worker;
    it->st = src_rows(jb->src, it->img, it->r0, it->r1, it->dst, it->pitch, jb->out_and, jb->out_or);
}

/* Brings the first npieces pieces of c->pieces into slot s: the context's
 * host threads stage those not copied directly, then one copy per run of
 * staged pieces and one per direct piece, on the slot's stream. st[img]
 * (may be NULL) gets an image's first staging failure. */
static patina_status slot_fill(patina_gpu_t *g, glcm_state *c, const glcm_source *src, glcm_slot *s,
                               const glcm_run *run, size_t npieces, patina_status *st)
{
    size_t nitems = 0, r_lo = 0, r_hi = 0;
    for (size_t p = 0; p < npieces; p++) {
        const glcm_piece *pc = &c->pieces[p];
        const size_t pitch = glcm_pitch(src_w(src, pc->img));
        const int rpi = (int)(STAGE_ITEM / pitch > 0 ? STAGE_ITEM / pitch : 1);
        if (pc->direct) continue;
        PATINA_TRY(grow_host((void **)&c->items, &c->items_cap, nitems + (size_t)((pc->hi - pc->lo) / rpi) + 1,
                             sizeof *c->items));
        for (int r = pc->lo; r < pc->hi; r += rpi) {
            glcm_item *it = &c->items[nitems++];
            it->img = pc->img;
            it->r0 = r;
            it->r1 = r + rpi < pc->hi ? r + rpi : pc->hi;
            it->dst = s->h_stage + GLCM_GUARD + pc->off + (size_t)(r - pc->lo) * pitch;
            it->pitch = pitch;
            it->st = PATINA_OK;
        }
    }
    if (nitems) {
        stage_job_t job = {src, c->items, run->out_and, run->out_or};
        if (nitems > 1 && g->pool)
            patina_pool_run(g->pool, nitems, stage_task, &job);
        else
            for (size_t j = 0; j < nitems; j++) stage_task(&job, j, 0);
        for (size_t j = 0; j < nitems; j++)
            if (c->items[j].st != PATINA_OK && st && st[c->items[j].img] == PATINA_OK)
                st[c->items[j].img] = c->items[j].st;
    }
    for (size_t p = 0; p <= npieces; p++) { /* staged pieces lie back to back: one copy per run */
        const glcm_piece *pc = p < npieces ? &c->pieces[p] : NULL;
        const size_t bytes = pc ? glcm_pitch(src_w(src, pc->img)) * (size_t)(pc->hi - pc->lo) : 0;
        if (pc && !pc->direct && r_hi > r_lo && pc->off == r_hi) {
            r_hi += bytes;
            continue;
        }
        if (r_hi > r_lo)
            CK(cudaMemcpyAsync(s->d_buf + GLCM_GUARD + r_lo, s->h_stage + GLCM_GUARD + r_lo, r_hi - r_lo,
                               cudaMemcpyHostToDevice, s->s));
        r_lo = r_hi = 0;
        if (!pc) break;
        if (pc->direct == GLCM_DEV_RGB) {
            const patina_image_t *im = &src->src->dev[pc->img];
            const int rows = pc->hi - pc->lo;
            const dim3 grid((unsigned)((im->width + 127) / 128), (unsigned)(rows < 65535 ? rows : 65535));
            if (rows > 0) {
                k_levels<<<grid, 128, 0, s->s>>>(im->data + (size_t)pc->lo * im->stride, im->stride, im->width, rows,
                                                 s->d_buf + GLCM_GUARD + pc->off, glcm_pitch(im->width),
                                                 src->src->dev_levels);
                CK(cudaGetLastError());
            }
        } else if (pc->direct) {
            const patina_gpu_grey_t *im = &src->grey[pc->img];
            CK(cudaMemcpy2DAsync(s->d_buf + GLCM_GUARD + pc->off, glcm_pitch(im->w),
                                 im->q + (size_t)pc->lo * im->stride, im->stride, (size_t)im->w,
                                 (size_t)(pc->hi - pc->lo), cudaMemcpyHostToDevice, s->s));
        } else {
            r_lo = pc->off;
            r_hi = pc->off + bytes;
        }
    }
    return PATINA_OK;
}

/* Counts images [i0, i1) of src into d_out ((i1 - i0), noff, Lc, Lc),
 * zeroed here, symmetrised when asked. The work is queued so that the
 * context's first stream (slot 0) holds the end of it: the caller queues
 * what follows there and synchronises. */
static patina_status run_counts(patina_gpu_t *g, glcm_state *c, const pgpu_glcm_knobs_t *k,
                                const glcm_source *src, size_t i0, size_t i1, const glcm_run *run,
                                const patina_glcm_offset_t *off, size_t noff, int symmetric, uint32_t *d_out,
                                patina_status *st)
{
    const glcm_plan *pl = &run->pl;
    const size_t LL = (size_t)run->Lc * (size_t)run->Lc, cap = run->cap;
    size_t used = 0, ntasks = 0, npieces = 0;
    int ks = 0;
    glcm_slot *s;
    for (int j = 0; j < NSLOT; j++) PATINA_TRY(slot_reserve(g, &c->sl[j], cap, TASKS_INIT));
    s = &c->sl[0];
    CK(cudaMemsetAsync(d_out, 0, (i1 - i0) * noff * LL * sizeof(uint32_t), s->s));
    CK(cudaEventRecord(c->zeroed, s->s));
    for (int j = 1; j < NSLOT; j++) CK(cudaStreamWaitEvent(c->sl[j].s, c->zeroed, 0));
    for (size_t i = i0; i <= i1; i++) {
        const int last = i == i1, w = last ? 0 : src_w(src, i), h = last ? 0 : src_h(src, i);
        const size_t pitch = last ? 0 : glcm_pitch(w);
        const int rows_cap = last ? 0 : (int)(cap / pitch);
        const int tile = !last && h <= rows_cap ? h : rows_cap - pl->pad_up - pl->pad_down;
        /* src_direct's value, not a truth value: GLCM_DEV_RGB and 1 differ */
        const int direct = !last && w > 0 && h > 0 ? src_direct(src, i) : 0;
        int t0 = 0;
        if (!last && (w <= 0 || h <= 0)) continue;
        for (;;) {
            int t1 = 0, lo = 0, hi = 0;
            size_t bytes = 0, rows_task = 1, need_tasks = 0;
            if (!last) {
                t1 = t0 + tile < h ? t0 + tile : h;
                lo = t0 - pl->pad_up > 0 ? t0 - pl->pad_up : 0;
                hi = t1 + pl->pad_down < h ? t1 + pl->pad_down : h;
                bytes = pitch * (size_t)(hi - lo);
                rows_task = rows_per_task(g, k, pl, run->launch_px, w);
                need_tasks = ((size_t)(t1 - t0) + rows_task - 1) / rows_task * (size_t)pl->S;
            }
            /* the slot goes when this tile does not fit, and at the end */
            if (last || used + bytes > cap || ntasks + need_tasks > s->task_cap) {
                if (ntasks) {
                    PATINA_TRY(slot_fill(g, c, src, s, run, npieces, st));
                    CK(cudaMemcpyAsync(s->d_tasks, s->h_tasks, ntasks * sizeof(glcm_task), cudaMemcpyHostToDevice,
                                       s->s));
                    PATINA_TRY(launch_count(s->s, pl, s->d_tasks, (int)ntasks, off, noff, d_out));
                    CK(cudaEventRecord(s->done, s->s));
                    s->used = 1;
                    ks = (ks + 1) % NSLOT;
                    s = &c->sl[ks];
                    PATINA_TRY(slot_wait(s));
                }
                used = ntasks = npieces = 0;
                if (last) break;
                if (need_tasks > s->task_cap) PATINA_TRY(slot_reserve(g, s, cap, need_tasks + TASKS_INIT));
            }
            PATINA_TRY(grow_host((void **)&c->pieces, &c->pieces_cap, npieces + 1, sizeof *c->pieces));
            {
                glcm_piece *pc = &c->pieces[npieces++];
                uint8_t *dst = s->d_buf + GLCM_GUARD + used;
                pc->img = i;
                pc->lo = lo;
                pc->hi = hi;
                pc->off = used;
                pc->direct = direct;
                for (int r = t0; r < t1; r += (int)rows_task)
                    for (int sub = 0; sub < pl->S; sub++) { /* a band's subsets run side by side */
                        glcm_task *tk = &s->h_tasks[ntasks++];
                        tk->base = dst;
                        tk->row0 = lo;
                        tk->pitch = (int)pitch;
                        tk->w = w;
                        tk->h = h;
                        tk->r0 = r;
                        tk->r1 = r + (int)rows_task < t1 ? r + (int)rows_task : t1;
                        tk->out = (int)(i - i0);
                        tk->sub = sub;
                    }
            }
            used += bytes;
            t0 = t1;
            if (t0 >= h) break;
        }
    }
    /* every slot's kernels finish before what follows on slot 0 */
    for (int j = 1; j < NSLOT; j++)
        if (c->sl[j].used) CK(cudaStreamWaitEvent(c->sl[0].s, c->sl[j].done, 0));
    if (symmetric) PATINA_TRY(symmetrise(g, c->sl[0].s, d_out, (i1 - i0) * noff, run->Lc));
    return PATINA_OK;
}

/* Images per chunk so that a chunk's matrices (counts at up to Lmax
 * levels, the L-level copy of a masked request, features) take at most a
 * quarter of the budget; at least one. */
size_t glcm_chunk_images(const patina_gpu_t *g, size_t noff, int L, int Lmax, int feats)
{
    const size_t per = noff * ((size_t)Lmax * Lmax * 4 + (Lmax != L ? (size_t)L * L * 4 : 0) +
                               (feats ? (GLCM_NPROPS + GLCM_NHAR) * sizeof(double) : 0));
    const size_t m = per ? (size_t)(g->budget / 4) / per : 1;
    return m ? m : 1;
}

/* The most levels a request may be counted with (a mask's sentinel). */
int glcm_levels_max(int L, int masked)
{
    int Lc = L + (masked ? 1 : 0);
    if (masked && Lc <= 32)
        while (Lc & (Lc - 1)) Lc++;
    return Lc;
}

/* Counts of images [i0, i1) at `levels` levels on the device: *d_res
 * ((i1 - i0), noff, levels, levels), queued on slot 0 (see run_counts). */
patina_status glcm_count_chunk(patina_gpu_t *g, glcm_state *c, const pgpu_glcm_knobs_t *k,
                               const glcm_source *src, size_t i0, size_t i1, int levels,
                               const patina_glcm_offset_t *off, size_t noff, int symmetric, uint32_t **d_res,
                               patina_status *st)
{
    const size_t nmat = (i1 - i0) * noff;
    glcm_run run;
    *d_res = NULL;
    PATINA_TRY(plan_run(g, c, k, src, i0, i1, levels, off, noff, 0, &run));
    PATINA_TRY(glcm_grow_dev(g, (void **)&c->d_counts, &c->counts_cap, nmat * (size_t)run.Lc * run.Lc,
                             sizeof(uint32_t), "counts"));
    PATINA_TRY(run_counts(g, c, k, src, i0, i1, &run, off, noff, symmetric, c->d_counts, st));
    *d_res = c->d_counts;
    if (run.Lc != levels) { /* the sentinel level out */
        PATINA_TRY(glcm_grow_dev(g, (void **)&c->d_sub, &c->sub_cap, nmat * (size_t)levels * levels,
                                 sizeof(uint32_t), "counts without the mask level"));
        k_drop_level<<<256, 256, 0, c->sl[0].s>>>(c->d_counts, c->d_sub, (long long)nmat, levels, run.Lc);
        CKL();
        *d_res = c->d_sub;
    }
    return PATINA_OK;
}

/* ------------------------------------------------------------ checks */

patina_status glcm_check_request(const patina_gpu_t *g, int levels, const patina_glcm_offset_t *off,
                                 size_t noff)
{
    if (!g) return patina__fail(PATINA_E_INVALID, "gpu: glcm: no device context");
    if (levels < 2 || levels > PATINA_GLCM_MAX_LEVELS)
        return patina__fail(PATINA_E_INVALID, "gpu: glcm: levels=%d is out of range [2, 256]", levels);
    if (noff > PATINA_GLCM_MAX_OFFSETS)
        return patina__fail(PATINA_E_LIMIT, "gpu: glcm: %zu offsets (at most %d)", noff, PATINA_GLCM_MAX_OFFSETS);
    if (noff && !off) return patina__fail(PATINA_E_INVALID, "gpu: glcm: null offsets");
    return PATINA_OK;
}

patina_status glcm_check_size(size_t i, int w, int h, int symmetric)
{
    if (w < 0 || h < 0) return patina__fail(PATINA_E_INVALID, "gpu: glcm: image %zu: bad size %dx%d", i, w, h);
    if (!glcm_size_fits(w, h, symmetric))
        return patina__fail(PATINA_E_LIMIT, "gpu: glcm: image %zu: %dx%d pixels could overflow 32-bit counts", i, w,
                            h);
    return PATINA_OK;
}

/* Checks n grey images; *masked: one of them has a mask. */
static patina_status check_grey(const patina_gpu_grey_t *imgs, size_t n, int levels, int symmetric, int *masked)
{
    *masked = 0;
    for (size_t i = 0; i < n; i++) {
        const patina_gpu_grey_t *im = &imgs[i];
        PATINA_TRY(glcm_check_size(i, im->w, im->h, symmetric));
        if (im->w == 0 || im->h == 0) continue;
        if (!im->q || im->stride < (size_t)im->w)
            return patina__fail(PATINA_E_INVALID, "gpu: glcm: image %zu: null pixels or stride %zu < width %d", i,
                                im->stride, im->w);
        if (im->mask && im->mstride < (size_t)im->w)
            return patina__fail(PATINA_E_INVALID, "gpu: glcm: image %zu: mask stride %zu < width %d", i,
                                im->mstride, im->w);
        if (im->mask) *masked = 1;
    }
    if (*masked && levels > 255)
        return patina__fail(PATINA_E_INVALID, "gpu: glcm: a mask needs levels <= 255 (a spare level) on the GPU");
    return PATINA_OK;
}

/* ------------------------------------------------------------ entry points */

/* What the entry points on grey images share: checks the images, selects
 * the device, gets the state and describes the images as the source. */
static patina_status grey_request(patina_gpu_t *g, const patina_gpu_grey_t *imgs, size_t n, int levels,
                                  int symmetric, glcm_state **c, glcm_source *src)
{
    int masked;
    PATINA_TRY(check_grey(imgs, n, levels, symmetric, &masked));
    CK(cudaSetDevice(g->device));
    PATINA_TRY(glcm_state_get(g, c));
    memset(src, 0, sizeof *src);
    src->n = n;
    src->grey = imgs;
    src->masked = masked;
    return PATINA_OK;
}

extern "C" patina_status pgpu_glcm_counts(patina_gpu_t *g, const pgpu_glcm_knobs_t *k, uint32_t *counts,
                                          const patina_gpu_grey_t *imgs, size_t n, int levels,
                                          const patina_glcm_offset_t *off, size_t noff, int symmetric)
{
    const size_t per = noff * (size_t)levels * (size_t)levels;
    glcm_state *c;
    glcm_source src;
    patina_status s = PATINA_OK;
    size_t chunk;
    PATINA_TRY(glcm_check_request(g, levels, off, noff));
    if (n == 0 || noff == 0) return PATINA_OK;
    if (!counts || !imgs) return patina__fail(PATINA_E_INVALID, "gpu: glcm: null counts or images");
    PATINA_TRY(grey_request(g, imgs, n, levels, symmetric, &c, &src));
    chunk = glcm_chunk_images(g, noff, levels, glcm_levels_max(levels, src.masked), 0);
    for (size_t i0 = 0; s == PATINA_OK && i0 < n; i0 += chunk) {
        const size_t i1 = n - i0 < chunk ? n : i0 + chunk;
        uint32_t *d = NULL;
        s = glcm_count_chunk(g, c, k, &src, i0, i1, levels, off, noff, symmetric, &d, NULL);
        if (s == PATINA_OK) {
            cudaError_t e = cudaMemcpyAsync(counts + i0 * per, d, (i1 - i0) * per * sizeof(uint32_t),
                                            cudaMemcpyDeviceToHost, c->sl[0].s);
            if (e != cudaSuccess) s = pgpu_fail((int)e, "copy counts back", __FILE__, __LINE__);
        }
        if (s == PATINA_OK)
            s = glcm_sync_all(c);
        else
            (void)glcm_sync_all(c);
    }
    return s;
}

extern "C" patina_status patina_gpu_glcm_counts(patina_gpu_t *g, uint32_t *counts, const patina_gpu_grey_t *imgs,
                                                size_t n, int levels, const patina_glcm_offset_t *off, size_t noff,
                                                int symmetric)
{
    return pgpu_glcm_counts(g, NULL, counts, imgs, n, levels, off, noff, symmetric);
}

/* ------------------------------------------------------------ timing */

extern "C" patina_status pgpu_glcm_time(patina_gpu_t *g, const pgpu_glcm_knobs_t *k, pgpu_glcm_timing_t *t,
                                        uint32_t *counts, const patina_gpu_grey_t *imgs, size_t n, int levels,
                                        const patina_glcm_offset_t *off, size_t noff, int symmetric)
{
    const int reps = t && t->reps > 0 ? t->reps : 1;
    glcm_state *c;
    glcm_source src;
    glcm_run run;
    glcm_slot *sl;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double *ts = NULL;
    size_t ntasks = 0, need_tasks = 0, used = 0, nmat = n * noff;
    uint32_t *d_res;
    patina_status s = PATINA_OK;
    PATINA_TRY(glcm_check_request(g, levels, off, noff));
    if (!t || !counts || !imgs || n == 0 || noff == 0)
        return patina__fail(PATINA_E_INVALID, "gpu: glcm: timing needs images, offsets and outputs");
    PATINA_TRY(grey_request(g, imgs, n, levels, symmetric, &c, &src));
    PATINA_TRY(plan_run(g, c, k, &src, 0, n, levels, off, noff, 1, &run));
    for (size_t i = 0; i < n; i++)
        if (imgs[i].w > 0 && imgs[i].h > 0) {
            const size_t rt = rows_per_task(g, k, &run.pl, run.launch_px, imgs[i].w);
            need_tasks += ((size_t)imgs[i].h + rt - 1) / rt * (size_t)run.pl.S;
        }
    sl = &c->sl[0];
    PATINA_TRY(slot_reserve(g, sl, run.cap, need_tasks ? need_tasks : 1));
    PATINA_TRY(glcm_grow_dev(g, (void **)&c->d_counts, &c->counts_cap, nmat * (size_t)run.Lc * run.Lc,
                             sizeof(uint32_t), "counts"));
    /* the images into the slot, whole (untimed), and their tasks */
    PATINA_TRY(grow_host((void **)&c->pieces, &c->pieces_cap, n, sizeof *c->pieces));
    for (size_t i = 0; i < n; i++) {
        const patina_gpu_grey_t *im = &imgs[i];
        const size_t pitch = glcm_pitch(im->w);
        size_t rt;
        if (im->w <= 0 || im->h <= 0) continue;
        rt = rows_per_task(g, k, &run.pl, run.launch_px, im->w);
        for (size_t r = 0; r < (size_t)im->h; r += rt)
            for (int sub = 0; sub < run.pl.S; sub++) {
                glcm_task *tk = &sl->h_tasks[ntasks++];
                tk->base = sl->d_buf + GLCM_GUARD + used;
                tk->row0 = 0;
                tk->pitch = (int)pitch;
                tk->w = im->w;
                tk->h = im->h;
                tk->r0 = (int)r;
                tk->r1 = (int)(r + rt < (size_t)im->h ? r + rt : (size_t)im->h);
                tk->out = (int)i;
                tk->sub = sub;
            }
        used += pitch * (size_t)im->h;
    }
    {
        size_t np = 0, off_b = 0;
        for (size_t i = 0; i < n; i++) {
            if (imgs[i].w <= 0 || imgs[i].h <= 0) continue;
            c->pieces[np].img = i;
            c->pieces[np].lo = 0;
            c->pieces[np].hi = imgs[i].h;
            c->pieces[np].off = off_b;
            c->pieces[np].direct = src_direct(&src, i);
            off_b += glcm_pitch(imgs[i].w) * (size_t)imgs[i].h;
            np++;
        }
        PATINA_TRY(slot_fill(g, c, &src, sl, &run, np, NULL));
    }
    CK(cudaMemcpyAsync(sl->d_tasks, sl->h_tasks, ntasks * sizeof(glcm_task), cudaMemcpyHostToDevice, sl->s));
    ts = (double *)malloc((size_t)reps * sizeof *ts);
    if (!ts) return patina__fail(PATINA_E_NOMEM, "gpu: glcm: out of host memory");
#define T_CK(call) PGPU_CU_GOTO(call, s, out)
#define T_TRY(expr)                                                                \
    do {                                                                           \
        s = (expr);                                                                \
        if (s != PATINA_OK) goto out;                                              \
    } while (0)
    T_CK(cudaEventCreate(&e0));
    T_CK(cudaEventCreate(&e1));
    {
        const size_t bytes = nmat * (size_t)run.Lc * run.Lc * sizeof(uint32_t);
        float f = 0;
        /* back to back, behind a warm-up request: the counts pile up (unused) */
        T_CK(cudaMemsetAsync(c->d_counts, 0, bytes, sl->s));
        T_TRY(launch_count(sl->s, &run.pl, sl->d_tasks, (int)ntasks, off, noff, c->d_counts));
        T_CK(cudaEventRecord(e0, sl->s));
        for (int r = 0; r < reps; r++)
            T_TRY(launch_count(sl->s, &run.pl, sl->d_tasks, (int)ntasks, off, noff, c->d_counts));
        T_CK(cudaEventRecord(e1, sl->s));
        T_CK(cudaEventSynchronize(e1));
        T_CK(cudaEventElapsedTime(&f, e0, e1));
        t->ms_stream = f / reps;
        /* one request at a time; the last one's counts are the answer */
        for (int r = 0; r < reps; r++) {
            T_CK(cudaMemsetAsync(c->d_counts, 0, bytes, sl->s));
            T_CK(cudaEventRecord(e0, sl->s));
            T_TRY(launch_count(sl->s, &run.pl, sl->d_tasks, (int)ntasks, off, noff, c->d_counts));
            T_CK(cudaEventRecord(e1, sl->s));
            T_CK(cudaEventSynchronize(e1));
            T_CK(cudaEventElapsedTime(&f, e0, e1));
            ts[r] = f;
        }
        pgpu_sort_doubles(ts, (size_t)reps);
        t->ms_single = ts[reps / 2];
    }
    if (symmetric) T_TRY(symmetrise(g, sl->s, c->d_counts, nmat, run.Lc));
    d_res = c->d_counts;
    if (run.Lc != levels) {
        T_TRY(glcm_grow_dev(g, (void **)&c->d_sub, &c->sub_cap, nmat * (size_t)levels * levels,
                            sizeof(uint32_t), "counts without the mask level"));
        k_drop_level<<<256, 256, 0, sl->s>>>(c->d_counts, c->d_sub, (long long)nmat, levels, run.Lc);
        T_CK(cudaGetLastError());
        d_res = c->d_sub;
    }
    T_CK(cudaMemcpyAsync(counts, d_res, nmat * (size_t)levels * levels * sizeof(uint32_t), cudaMemcpyDeviceToHost,
                         sl->s));
    T_CK(cudaStreamSynchronize(sl->s));
    t->launches = launches_of(&run.pl, noff);
    t->threads = run.pl.threads;
    t->copies = run.pl.kind == GLCM_KIND_GLOBAL ? 0 : run.pl.R;
    t->levels_counted = run.Lc;
    snprintf(t->kernel, sizeof t->kernel, "%s", run.pl.name ? run.pl.name : "?");
out:
#undef T_CK
#undef T_TRY
    if (s != PATINA_OK) (void)glcm_sync_all(c);
    if (e0) (void)cudaEventDestroy(e0);
    if (e1) (void)cudaEventDestroy(e1);
    free(ts);
    return s;
}
