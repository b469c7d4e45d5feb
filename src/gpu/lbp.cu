/* The LBP family on the GPU (lbp, lbp8, tlbap, lanadp; docs/lbp.md): the
 * production dispatcher over the kernels of lbp_kernels.cuh, the batched
 * family path (patina_gpu_lbp: RGB images in, histogram counts out) and the
 * internal entry on grey images (patina_gpu__lbp_grey: tests, lab, bench).
 * Codes and counts equal the C reference's (src/features/lbp.c) byte for
 * byte; the input contract is patina_gpu_lbp_conf_t (gpu/gpu.h), filled by
 * the features side.
 *
 * Dispatcher (lbp_launch). 3x3 kinds with histograms: k_fast4, in the wide
 * layout (one 16-warp block per SM) for whole-image histograms where a block
 * may have WIDE_SMEM of shared memory (H100, H200), else in 4-warp blocks;
 * grids of cells on 4-warp blocks when every cell is at least 16 columns
 * wide. k_prod3 takes narrower cells and code maps without histograms.
 * Circular LBP: k_circ8 for P = 8, R = 1, k_circ for the rest.
 *
 * Memory plan (the LBP state in the device context, pgpu_state(g,
 * PGPU_FAM_LBP)): one slot per context stream, each with pinned RGB staging,
 * device RGB and grey buffers and the batch's counts (device and pinned),
 * sized from the context's budget on the first call; the configuration's
 * tables (uploaded when they change); a grey buffer for images larger than
 * a slot, grown on demand; the kernels whose shared-memory attribute is set.
 *
 * Batches (patina_gpu_lbp). Images are taken in order while they fit a
 * slot; within a batch they are placed by size, so that each run of equal
 * sizes is one k_grey launch and one counting launch (n images per launch).
 * Pageable images are copied into the slot's pinned staging by the
 * context's host threads, and the staging goes up in one copy; pinned
 * images are copied directly. Batch k uses slot k % PGPU_STREAMS on its own
 * stream, so the host stages batch k + 1 and its copies run while the
 * kernels of batch k do; a batch's counts come back in one copy, and the
 * host waits only when it needs the slot again. An image larger than a slot
 * is counted alone: its rows go up in chunks through the slots' buffers on
 * one stream, each chunk converted into a grey buffer of the whole image,
 * then one launch. */
#include <cuda_runtime.h>

#include <stdlib.h>
#include <string.h>

#include "gpu/context.h"
#include "gpu/lbp_kernels.cuh"

#define LBP_SLOTS PGPU_STREAMS
#define STAGE_PIECE ((size_t)1 << 20) /* bytes per host staging task */
#define MiB ((size_t)1 << 20)
#define LBP_MAX_SIDE (1 << 30)       /* image sides the kernels' 32-bit offsets take */
#define LBP_MAX_UNITS 4096           /* images per batch (launch grids' z <= 65535) */

enum { MEM_DONE = 0, MEM_PAGEABLE, MEM_DIRECT }; /* DIRECT: pinned, or device memory of this GPU */

/* One image of a batch, in placement order (by size). */
struct lbp_item {
    size_t img;           /* index in the caller's array */
    int w, h;
    size_t rgb_off;       /* in the slot's RGB staging and device buffers: (h, 3w) packed */
    size_t grey_off;      /* in the slot's grey buffer: (h, pitch16(w)) */
    int mem;              /* MEM_PAGEABLE or MEM_DIRECT */
    uint32_t task0, ntask; /* host staging tasks (pageable) */
};

struct lbp_slot {
    cudaStream_t stream;  /* the context's stream of this slot */
    cudaEvent_t done;     /* after the batch's last operation */
    int busy;             /* holds a batch not yet harvested */
    uint8_t *h_stage;     /* pinned, rgb_plan bytes */
    uint8_t *d_rgb;       /* rgb_plan bytes */
    uint8_t *d_grey;      /* grey_plan + LBP_GREY_SLACK bytes */
    uint32_t *d_counts;   /* (units, dim) u32: counts_bytes */
    uint32_t *h_counts;   /* pinned, the same */
    size_t counts_bytes;
    lbp_item *items;      /* LBP_MAX_UNITS */
    size_t nitems, rgb_used, grey_used;
    uint32_t ntasks;
};

struct lbp_state {
    size_t rgb_plan, grey_plan;   /* per slot, planned from the budget */
    size_t rgb_cap, unit_cap;     /* in force (testing lowers them) */
    int narrow;                   /* testing: the 4-warp layout even where the wide one fits */
    lbp_slot slot[LBP_SLOTS];
    uint8_t *d_tab, *h_tab;       /* the configuration's tables (LBP_TAB_BYTES), device and pinned */
    size_t tab_bytes;
    int tab_kind;                 /* the configuration they are for; -1 none */
    double tab_th;
    lbp_dev_tables tabs;
    uint8_t *d_big;               /* grey of one image larger than a slot */
    size_t big_cap;
    const void *attr_done[32];    /* kernels whose dynamic shared memory limit is set */
    int nattr;
};

/* ------------------------------------------------------------ dispatcher */

typedef void (*fast_kernel)(fast_args, const uint8_t *, const uint8_t *);

/* The production k_fast4 instance and its launch shape: the wide layout
 * (whole-image histograms), or 4-warp blocks (grids of cells; GPUs whose
 * blocks cannot have WIDE_SMEM). LANADP keeps 3 rows in flight (its
 * registers allow 4 blocks per SM), the others 6. cw: code maps too; tf:
 * the TLBAP threshold as an fp16 fma. */
static fast_kernel fast_instance(int kind, bool cw, bool tf, bool cells, bool wide, fast_shape *sh)
{
    sh->fit = true;
    if (wide) {
        sh->nw = WIDE_WARPS;
        sh->bps = 1;
        sh->wide = true;
        switch (kind) {
        case LBP_KIND_LBP8:
            return cw ? k_fast4<LBP_KIND_LBP8, true, false, 6, 1, false, true>
                      : k_fast4<LBP_KIND_LBP8, false, false, 6, 1, false, true>;
        case LBP_KIND_TLBAP:
            if (tf)
                return cw ? k_fast4<LBP_KIND_TLBAP, true, true, 6, 1, false, true>
                          : k_fast4<LBP_KIND_TLBAP, false, true, 6, 1, false, true>;
            return cw ? k_fast4<LBP_KIND_TLBAP, true, false, 6, 1, false, true>
                      : k_fast4<LBP_KIND_TLBAP, false, false, 6, 1, false, true>;
        default:
            return cw ? k_fast4<LBP_KIND_LANADP, true, false, 3, 1, false, true>
                      : k_fast4<LBP_KIND_LANADP, false, false, 3, 1, false, true>;
        }
    }
    sh->nw = FAST_WARPS;
    sh->bps = 4;
    sh->wide = false;
    if (cells) {
        switch (kind) {
        case LBP_KIND_LBP8:
            return cw ? k_fast4<LBP_KIND_LBP8, true, false, 6, 4, true>
                      : k_fast4<LBP_KIND_LBP8, false, false, 6, 4, true>;
        case LBP_KIND_TLBAP:
            if (tf)
                return cw ? k_fast4<LBP_KIND_TLBAP, true, true, 6, 4, true>
                          : k_fast4<LBP_KIND_TLBAP, false, true, 6, 4, true>;
            return cw ? k_fast4<LBP_KIND_TLBAP, true, false, 6, 4, true>
                      : k_fast4<LBP_KIND_TLBAP, false, false, 6, 4, true>;
        default:
            return cw ? k_fast4<LBP_KIND_LANADP, true, false, 3, 4, true>
                      : k_fast4<LBP_KIND_LANADP, false, false, 3, 4, true>;
        }
    }
    switch (kind) {
    case LBP_KIND_LBP8:
        return cw ? k_fast4<LBP_KIND_LBP8, true, false, 6, 4> : k_fast4<LBP_KIND_LBP8, false, false, 6, 4>;
    case LBP_KIND_TLBAP:
        if (tf) return cw ? k_fast4<LBP_KIND_TLBAP, true, true, 6, 4> : k_fast4<LBP_KIND_TLBAP, false, true, 6, 4>;
        return cw ? k_fast4<LBP_KIND_TLBAP, true, false, 6, 4> : k_fast4<LBP_KIND_TLBAP, false, false, 6, 4>;
    default:
        return cw ? k_fast4<LBP_KIND_LANADP, true, false, 3, 4> : k_fast4<LBP_KIND_LANADP, false, false, 3, 4>;
    }
}

/* Sets a kernel's dynamic shared-memory limit once per context. */
static cudaError_t attr_once(lbp_state *S, const void *k, size_t smem)
{
    for (int i = 0; i < S->nattr; i++)
        if (S->attr_done[i] == k) return cudaSuccess;
    const cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e == cudaSuccess && S->nattr < (int)(sizeof S->attr_done / sizeof S->attr_done[0]))
        S->attr_done[S->nattr++] = k;
    return e;
}

template <bool VAR, bool CODES>
static void c8_launch(dim3 grid, size_t smem, cudaStream_t s, const circ_args &a)
{
    if (a.copies == 32) k_circ8<VAR, CODES, 32><<<grid, C8_BX, smem, s>>>(a);
    else if (a.copies == 1) k_circ8<VAR, CODES, 1><<<grid, C8_BX, smem, s>>>(a);
    else k_circ8<VAR, CODES, 0><<<grid, C8_BX, smem, s>>>(a);
}

/* Whether the production kernels take a w x h image (with histograms, or
 * code maps alone). */
static bool lbp_launchable(const patina_gpu_lbp_conf_t *c, int w, int h, bool counts)
{
    int mw, mh;
    if (w > LBP_MAX_SIDE || h > LBP_MAX_SIDE) return false;
    lbp_map_wh(c, w, h, &mw, &mh);
    if (c->kind != LBP_KIND_CIRCULAR) return (counts && fast_ok(c, mw)) || prod_fits(mh);
    return circ8_ok(c) || circ_fits(h);
}

/* The production kernels on n images of w x h, grey rows `pitch` bytes
 * apart, h * pitch bytes per image: codes (3x3 kinds: rows `opitch` bytes
 * apart; circular: dense) and/or counts (n, dim), zeroed by the caller.
 * The images must be launchable (lbp_launchable); n <= 65535. */
static cudaError_t lbp_launch(const patina_gpu_t *g, lbp_state *S, const patina_gpu_lbp_conf_t *c,
                              const uint8_t *in, int pitch, int w, int h, int n, void *codes, int opitch,
                              uint32_t *counts, cudaStream_t s)
{
    int mw, mh;
    const lbp_dev_tables &t = S->tabs;
    lbp_map_wh(c, w, h, &mw, &mh);
    if (mw == 0 || mh == 0 || n == 0) return cudaSuccess;
    if (c->kind != LBP_KIND_CIRCULAR) {
        if (counts && fast_ok(c, mw)) {
            const bool cells = lbp_cells(c);
            const bool wide = !cells && !S->narrow && g->smem_optin >= (int)WIDE_SMEM;
            fast_shape sh;
            fast_args a;
            const fast_kernel k = fast_instance(c->kind, codes != NULL, t.tq_t != 0, cells, wide, &sh);
            const unsigned nb = fast_plan(a, c, t, g->sm_count, sh, in, pitch, w, h, n, codes, opitch, counts);
            const size_t smem = fast_smem(sh);
            const cudaError_t e = attr_once(S, (const void *)k, smem);
            if (e != cudaSuccess) return e;
            k<<<nb, dim3(32, sh.nw), smem, s>>>(a, t.ktab, t.btab);
            return cudaGetLastError();
        }
        return prod_launch(c, t, in, pitch, w, h, n, codes, opitch, counts, s);
    }
    circ_args a;
    circ_plan(a, c, t, in, pitch, w, h, codes, counts);
    const size_t smem = circ_smem(a);
    const bool var = c->method == LBP_M_VAR;
    if (circ8_ok(c)) {
        const dim3 grid = circ8_grid(a, n);
        if (var) codes ? c8_launch<true, true>(grid, smem, s, a) : c8_launch<true, false>(grid, smem, s, a);
        else codes ? c8_launch<false, true>(grid, smem, s, a) : c8_launch<false, false>(grid, smem, s, a);
        return cudaGetLastError();
    }
    const dim3 grid = circ_grid(w, h, n), block(CIRC_BX, CIRC_BY);
    const bool tile = a.span <= CIRC_SMAX;
    if (tile && var) k_circ<true, true><<<grid, block, smem, s>>>(a);
    else if (tile) k_circ<true, false><<<grid, block, smem, s>>>(a);
    else if (var) k_circ<false, true><<<grid, block, smem, s>>>(a);
    else k_circ<false, false><<<grid, block, smem, s>>>(a);
    return cudaGetLastError();
}

/* ------------------------------------------------------------- the state */

#define DEV(p, bytes, tag) PATINA_TRY(pgpu_dev_alloc(g, (void **)&(p), (bytes), PGPU_FAM_LBP, tag))
#define PIN(p, bytes, tag) PATINA_TRY(pgpu_pin_alloc(g, (void **)&(p), (bytes), PGPU_FAM_LBP, tag))

/* Per slot: a third of the budget, at most 64 MiB of RGB (a batch of that
 * size already runs the copy engine at full speed), grey half of that
 * (a third for the pixels, the rest for rows padded to 16 bytes), 4 MiB of
 * counts to start with (grown for large descriptors). */
static patina_status lbp_plan(lbp_state *S, uint64_t budget)
{
    const size_t per_slot = (size_t)(budget / LBP_SLOTS), counts = 4 * MiB;
    size_t rgb;
    if (per_slot < counts + 2 * MiB)
        return patina__fail(PATINA_E_LIMIT,
                            "gpu: lbp: memory budget %.1f MiB is below its minimum %.1f MiB (%d slots of %zu MiB)",
                            (double)budget / (double)MiB, (double)(LBP_SLOTS * (counts + 2 * MiB)) / (double)MiB,
                            LBP_SLOTS, (counts + 2 * MiB) / MiB);
    rgb = (per_slot - counts) / 3 * 2;
    if (rgb > 64 * MiB) rgb = 64 * MiB;
    rgb &= ~(size_t)0xffff;
    S->rgb_plan = S->rgb_cap = rgb;
    S->grey_plan = rgb / 2;
    S->unit_cap = LBP_MAX_UNITS;
    return PATINA_OK;
}

static patina_status open_slot(patina_gpu_t *g, lbp_state *S, lbp_slot *s, int k)
{
    cudaEvent_t ev;
    s->stream = (cudaStream_t)pgpu_stream(g, k);
    PGPU_CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    s->done = ev;
    PIN(s->h_stage, S->rgb_plan, "RGB staging");
    DEV(s->d_rgb, S->rgb_plan, "RGB input");
    DEV(s->d_grey, S->grey_plan + LBP_GREY_SLACK, "grey input");
    s->counts_bytes = 4 * MiB;
    DEV(s->d_counts, s->counts_bytes, "histogram counts");
    PIN(s->h_counts, s->counts_bytes, "histogram counts");
    s->items = (lbp_item *)calloc(LBP_MAX_UNITS, sizeof *s->items);
    if (!s->items) return patina__fail(PATINA_E_NOMEM, "gpu: lbp: out of host memory");
    return PATINA_OK;
}

static void close_slot(patina_gpu_t *g, lbp_slot *s)
{
    if (s->stream) cudaStreamSynchronize(s->stream);
    pgpu_free_n(g, 5, &s->h_stage, &s->d_rgb, &s->d_grey, &s->d_counts, &s->h_counts);
    if (s->done) cudaEventDestroy(s->done);
    free(s->items);
    memset(s, 0, sizeof *s);
}

static void lbp_release(patina_gpu_t *g, void *state)
{
    lbp_state *S = (lbp_state *)state;
    (void)cudaSetDevice(g->device);
    for (int k = 0; k < LBP_SLOTS; k++) close_slot(g, &S->slot[k]);
    pgpu_free_n(g, 3, &S->d_tab, &S->h_tab, &S->d_big);
    (void)cudaGetLastError();
    free(S);
}

/* g's LBP state, made (planned and allocated) on first use. */
static patina_status lbp_state_of(patina_gpu_t *g, lbp_state **out)
{
    lbp_state *S = (lbp_state *)pgpu_state(g, PGPU_FAM_LBP);
    patina_status s;
    *out = S;
    if (S) return PATINA_OK;
    S = (lbp_state *)calloc(1, sizeof *S);
    if (!S) return patina__fail(PATINA_E_NOMEM, "gpu: lbp: out of host memory");
    S->tab_kind = -1;
    pgpu_set_state(g, PGPU_FAM_LBP, S, lbp_release);
    s = lbp_plan(S, g->budget);
    if (s == PATINA_OK) s = pgpu_dev_alloc(g, (void **)&S->d_tab, LBP_TAB_BYTES, PGPU_FAM_LBP, "tables");
    if (s == PATINA_OK) s = pgpu_pin_alloc(g, (void **)&S->h_tab, LBP_TAB_BYTES, PGPU_FAM_LBP, "tables");
    for (int k = 0; s == PATINA_OK && k < LBP_SLOTS; k++) s = open_slot(g, S, &S->slot[k], k);
    if (s != PATINA_OK) {
        pgpu_drop_state(g, PGPU_FAM_LBP);
        return s;
    }
    *out = S;
    return PATINA_OK;
}

/* The configuration's tables on the device, uploaded when they differ from
 * the last ones (no kernel of this state runs between calls); the TLBAP
 * threshold search (tlbap_fma_consts) runs only then. */
static patina_status tables_ready(lbp_state *S, const patina_gpu_lbp_conf_t *c, cudaStream_t st)
{
    const bool m3 = c->kind != LBP_KIND_CIRCULAR;
    const size_t nb = !m3 && c->bins ? (size_t)c->ncodes * sizeof(uint32_t) : 0;
    const size_t want = m3 ? 512 : nb ? 512 + nb : 0;
    lbp_dev_tables t;
    size_t bytes;
    bool same = S->tab_kind == c->kind && S->tab_bytes == want && (c->kind != LBP_KIND_TLBAP || S->tab_th == c->th);
    if (same && m3) {
        same = memcmp(S->h_tab, c->ktab, 256) == 0;
        for (int i = 0; same && i < 256; i++) same = S->h_tab[256 + i] == (uint8_t)c->bins[i];
    } else if (same && nb) {
        same = memcmp(S->h_tab + 512, c->bins, nb) == 0;
    }
    if (same) return PATINA_OK;
    if (nb)
        for (uint32_t i = 0; i < c->ncodes; i++)
            /* UINT32_MAX marks a code the method never produces (ror: codes
             * that are not rotation-minimal) */
            if (c->bins[i] >= (uint32_t)c->nbins && c->bins[i] != UINT32_MAX)
                return patina__fail(PATINA_E_INVALID, "gpu: lbp: bin table entry %u is %u, past %d bins", i,
                                    c->bins[i], c->nbins);
    S->tab_kind = -1;
    bytes = lbp_tables_host(S->h_tab, &t, S->d_tab, c);
    if (bytes) {
        PGPU_CU(cudaMemcpyAsync(S->d_tab, S->h_tab, bytes, cudaMemcpyHostToDevice, st));
        PGPU_CU(cudaStreamSynchronize(st));
    }
    S->tabs = t;
    S->tab_bytes = bytes;
    S->tab_kind = c->kind;
    S->tab_th = c->th;
    return PATINA_OK;
}

/* The state, the contract checked, the tables on the device. */
static patina_status lbp_ready(patina_gpu_t *g, const patina_gpu_lbp_conf_t *c, lbp_state **S)
{
    const char *why = lbp_conf_check(c);
    if (why) return patina__fail(PATINA_E_INVALID, "gpu: lbp: bad configuration: %s", why);
    PGPU_CU(cudaSetDevice(g->device));
    PATINA_TRY(lbp_state_of(g, S));
    return tables_ready(*S, c, (*S)->slot[0].stream);
}

patina_status patina_gpu__lbp_set_caps(patina_gpu_t *g, size_t rgb_bytes, size_t images, int narrow)
{
    lbp_state *S;
    if (!g) return patina__fail(PATINA_E_INVALID, "gpu: lbp: null context");
    PGPU_CU(cudaSetDevice(g->device));
    PATINA_TRY(lbp_state_of(g, &S));
    S->rgb_cap = rgb_bytes && rgb_bytes < S->rgb_plan ? rgb_bytes : S->rgb_plan;
    S->unit_cap = images && images < LBP_MAX_UNITS ? images : LBP_MAX_UNITS;
    S->narrow = narrow != 0;
    return PATINA_OK;
}

/* ------------------------------------------------------- batched family path */

struct lbp_job {
    patina_gpu_t *g;
    lbp_state *S;
    const patina_gpu_lbp_conf_t *c;
    uint32_t *out;               /* (n, dim) */
    const patina_image_t *imgs;
    size_t n;
    patina_status *st;
    unsigned char *mem;          /* per image: MEM_*; MEM_DONE once its counts (or status) are out */
    size_t next;                 /* the planner's next image */
    uint64_t batch;              /* batches issued */
};

static void finish_image(lbp_job *j, size_t i, patina_status s)
{
    if (s != PATINA_OK) memset(j->out + i * j->c->dim, 0, j->c->dim * sizeof(uint32_t));
    if (j->st) j->st[i] = s;
    j->mem[i] = MEM_DONE;
}

/* Where p lives: pageable (1), pinned host (2), device memory of this GPU
 * (3), another GPU's (-1). */
static int where(const lbp_job *j, const void *p)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
    }
    switch (a.type) {
    case cudaMemoryTypeHost: return 2;
    case cudaMemoryTypeDevice:
    case cudaMemoryTypeManaged: return a.device == j->g->device ? 3 : -1;
    default: return 1;
    }
}

/* How an image's pixels travel: MEM_DIRECT (pinned or this GPU's memory,
 * copied by the copy engine), MEM_PAGEABLE (staged by host threads), or -1
 * (another GPU's memory, or device and host memory mixed). */
static int mem_of(const lbp_job *j, const patina_image_t *im)
{
    const uint8_t *last = im->data + (size_t)(im->height - 1) * im->stride + 3 * (size_t)im->width - 1;
    const int k0 = where(j, im->data), k1 = where(j, last);
    if (k0 < 0 || k1 < 0) return -1;
    if (k0 == k1) return k0 == 1 ? MEM_PAGEABLE : MEM_DIRECT;
    return k0 != 3 && k1 != 3 ? MEM_PAGEABLE : -1; /* pinned and pageable: the host copies it */
}

/* Checks image i as the CPU path does and finishes those without a
 * launch: malformed (PATINA_E_INVALID), an empty code map (zero counts),
 * beyond the kernels (PATINA_E_LIMIT: the caller's CPU takes it). */
static void classify(lbp_job *j, size_t i)
{
    const patina_image_t *im = &j->imgs[i];
    int mw, mh, m;
    if (im->width < 0 || im->height < 0 ||
        (im->width > 0 && im->height > 0 && (!im->data || im->stride < 3 * (size_t)im->width))) {
        finish_image(j, i, patina__fail(PATINA_E_INVALID, "gpu: lbp: image %zu is malformed (%dx%d, stride %zu)",
                                        i, im->width, im->height, im->stride));
        return;
    }
    lbp_map_wh(j->c, im->width, im->height, &mw, &mh);
    if (mw == 0 || mh == 0) {
        memset(j->out + i * j->c->dim, 0, j->c->dim * sizeof(uint32_t));
        finish_image(j, i, PATINA_OK);
        return;
    }
    if (!lbp_launchable(j->c, im->width, im->height, true)) {
        finish_image(j, i, patina__fail(PATINA_E_LIMIT, "gpu: lbp: image %zu (%dx%d) is beyond the kernels' launch limits",
                                        i, im->width, im->height));
        return;
    }
    m = mem_of(j, im);
    if (m < 0) {
        finish_image(j, i, patina__fail(PATINA_E_INVALID,
                                        "gpu: lbp: image %zu is in another GPU's memory (or spans device and host memory)",
                                        i));
        return;
    }
    j->mem[i] = (unsigned char)m;
}

/* Bytes of an image in a slot's buffers: RGB (h, 3w) packed; grey (h,
 * pitch16(w)) and the alignment of a run of equal sizes. */
static size_t rgb_bytes(int w, int h) { return 3 * (size_t)w * (size_t)h; }
static size_t grey_bytes(int w, int h) { return (size_t)h * (size_t)lbp_pitch16(w) + 256; }

/* Whether an image fits an empty slot (else it is counted alone, in chunks). */
static bool fits_slot(const lbp_state *S, int w, int h)
{
    return rgb_bytes(w, h) <= S->rgb_cap && grey_bytes(w, h) <= S->grey_plan;
}

static int cmp_items(const void *pa, const void *pb)
{
    const lbp_item *a = (const lbp_item *)pa, *b = (const lbp_item *)pb;
    if (a->h != b->h) return a->h < b->h ? -1 : 1;
    if (a->w != b->w) return a->w < b->w ? -1 : 1;
    return a->img < b->img ? -1 : a->img > b->img;
}

/* Plans the next batch into slot s: images in order while they fit (RGB,
 * grey, counts rows); then placed by size, so that equal sizes are
 * consecutive. Returns the image that is larger than a slot when it comes
 * first (the batch is then empty), else n. */
static size_t fill(lbp_job *j, lbp_slot *s)
{
    const lbp_state *S = j->S;
    const size_t dim = j->c->dim;
    size_t rows = s->counts_bytes / (dim * sizeof(uint32_t)), rgb = 0, grey = 0;
    if (rows > S->unit_cap) rows = S->unit_cap;
    s->nitems = 0;
    s->ntasks = 0;
    while (j->next < j->n && s->nitems < rows) {
        const size_t i = j->next;
        const patina_image_t *im = &j->imgs[i];
        if (j->mem[i] == MEM_DONE) {
            j->next++;
            continue;
        }
        if (!fits_slot(S, im->width, im->height)) {
            if (s->nitems) break;
            j->next++;
            return i;
        }
        const size_t rb = rgb_bytes(im->width, im->height), gb = grey_bytes(im->width, im->height);
        if (rgb + rb > S->rgb_cap || grey + gb > S->grey_plan) break;
        lbp_item *it = &s->items[s->nitems++];
        it->img = i;
        it->w = im->width;
        it->h = im->height;
        it->mem = j->mem[i];
        rgb += rb;
        grey += gb;
        j->next++;
    }
    qsort(s->items, s->nitems, sizeof *s->items, cmp_items);
    rgb = grey = 0;
    for (size_t k = 0; k < s->nitems; k++) {
        lbp_item *it = &s->items[k];
        const bool run0 = k == 0 || it->w != it[-1].w || it->h != it[-1].h;
        if (run0) grey = (grey + 255) & ~(size_t)255;
        it->rgb_off = rgb;
        it->grey_off = grey;
        rgb += 3 * (size_t)it->w * (size_t)it->h;
        grey += (size_t)it->h * (size_t)lbp_pitch16(it->w);
        it->task0 = s->ntasks;
        it->ntask = it->mem == MEM_PAGEABLE
                        ? (uint32_t)((3 * (size_t)it->w * (size_t)it->h + STAGE_PIECE - 1) / STAGE_PIECE)
                        : 0;
        s->ntasks += it->ntask;
    }
    s->rgb_used = rgb;
    s->grey_used = grey;
    return j->n;
}

/* Host staging: rows [r0, r1) of an image (h, 3w) into dst, packed. */
static void copy_rows(uint8_t *dst, const patina_image_t *im, size_t r0, size_t r1)
{
    const size_t rb = 3 * (size_t)im->width;
    if (im->stride == rb) {
        memcpy(dst + r0 * rb, im->data + r0 * rb, (r1 - r0) * rb);
        return;
    }
    for (size_t r = r0; r < r1; r++) memcpy(dst + r * rb, im->data + r * im->stride, rb);
}

struct stage_arg {
    const lbp_job *j;
    const lbp_slot *s;
};

/* Staging task t of a batch: a share of one pageable image's rows. The
 * item with the largest task0 <= t is pageable and holds t (an item without
 * tasks has the task0 of the item after it). */
static void stage_task(void *arg, size_t t, int worker)
{
    const stage_arg *a = (const stage_arg *)arg;
    const lbp_slot *s = a->s;
    size_t lo = 0, hi = s->nitems - 1;
    (void)worker;
    while (lo < hi) {
        const size_t mid = (lo + hi + 1) / 2;
        if (s->items[mid].task0 <= t) lo = mid;
        else hi = mid - 1;
    }
    const lbp_item *it = &s->items[lo];
    const size_t c = t - it->task0, h = (size_t)it->h;
    copy_rows(s->h_stage + it->rgb_off, &a->j->imgs[it->img], h * c / it->ntask, h * (c + 1) / it->ntask);
}

/* Staging task t of one chunk of a large image's rows. */
struct chunk_arg {
    patina_image_t view; /* the chunk's rows */
    uint8_t *dst;
    uint32_t ntask;
};

static void chunk_task(void *arg, size_t t, int worker)
{
    const chunk_arg *a = (const chunk_arg *)arg;
    const size_t h = (size_t)a->view.height;
    (void)worker;
    copy_rows(a->dst, &a->view, h * t / a->ntask, h * (t + 1) / a->ntask);
}

/* Issues slot si's batch: staging, copies, grey, counting per run of equal
 * sizes, counts back; records the slot's event. */
static patina_status submit(lbp_job *j, int si)
{
    lbp_state *S = j->S;
    lbp_slot *s = &S->slot[si];
    const cudaStream_t st = s->stream;
    const size_t dim = j->c->dim;
    pgpu_copy_run_t run = {NULL, NULL, 0, cudaMemcpyDefault};
    stage_arg sa = {j, s};
    if (s->ntasks) patina_pool_run(j->g->pool, s->ntasks, stage_task, &sa);
    for (size_t k = 0; k < s->nitems; k++) {
        const lbp_item *it = &s->items[k];
        const patina_image_t *im = &j->imgs[it->img];
        const size_t rb = 3 * (size_t)it->w;
        if (it->mem == MEM_PAGEABLE) {
            PATINA_TRY(pgpu_copy_add(&run, s->d_rgb + it->rgb_off, s->h_stage + it->rgb_off, rb * (size_t)it->h,
                                     st));
        } else if (im->stride == rb) {
            PATINA_TRY(pgpu_copy_add(&run, s->d_rgb + it->rgb_off, im->data, rb * (size_t)it->h, st));
        } else {
            PATINA_TRY(pgpu_copy_flush(&run, st));
            PGPU_CU(cudaMemcpy2DAsync(s->d_rgb + it->rgb_off, rb, im->data, im->stride, rb, (size_t)it->h,
                                      cudaMemcpyDefault, st));
        }
    }
    PATINA_TRY(pgpu_copy_flush(&run, st));
    PGPU_CU(cudaMemsetAsync(s->d_counts, 0, s->nitems * dim * sizeof(uint32_t), st));
    for (size_t k = 0; k < s->nitems;) {
        const lbp_item *it = &s->items[k];
        size_t e = k + 1;
        while (e < s->nitems && s->items[e].w == it->w && s->items[e].h == it->h) e++;
        const int pitch = lbp_pitch16(it->w), cnt = (int)(e - k);
        const size_t rb = 3 * (size_t)it->w;
        PGPU_CU(grey_launch(s->d_rgb + it->rgb_off, rb, rb * (size_t)it->h, s->d_grey + it->grey_off, pitch,
                            (size_t)it->h * (size_t)pitch, it->w, it->h, cnt, st));
        PGPU_CU(lbp_launch(j->g, S, j->c, s->d_grey + it->grey_off, pitch, it->w, it->h, cnt, NULL, 0,
                           s->d_counts + k * dim, st));
        k = e;
    }
    PGPU_CU(cudaMemcpyAsync(s->h_counts, s->d_counts, s->nitems * dim * sizeof(uint32_t), cudaMemcpyDeviceToHost,
                            st));
    PGPU_CU(cudaEventRecord(s->done, st));
    s->busy = 1;
    j->batch++;
    return PATINA_OK;
}

/* Waits for slot si's batch and hands its counts to the caller. */
static patina_status harvest(lbp_job *j, int si)
{
    lbp_slot *s = &j->S->slot[si];
    const size_t dim = j->c->dim;
    if (!s->busy) return PATINA_OK;
    s->busy = 0;
    PGPU_CU(cudaEventSynchronize(s->done));
    for (size_t k = 0; k < s->nitems; k++) {
        memcpy(j->out + s->items[k].img * dim, s->h_counts + k * dim, dim * sizeof(uint32_t));
        finish_image(j, s->items[k].img, PATINA_OK);
    }
    return PATINA_OK;
}

/* Grows every slot's counts to hold at least one descriptor. */
static patina_status counts_room(patina_gpu_t *g, lbp_state *S, size_t dim)
{
    const size_t need = dim * sizeof(uint32_t);
    for (int k = 0; k < LBP_SLOTS; k++) {
        lbp_slot *s = &S->slot[k];
        if (s->counts_bytes >= need) continue;
        pgpu_free_n(g, 2, &s->d_counts, &s->h_counts);
        s->counts_bytes = 0;
        DEV(s->d_counts, need, "histogram counts");
        PIN(s->h_counts, need, "histogram counts");
        s->counts_bytes = need;
    }
    return PATINA_OK;
}

/* An image larger than a slot, alone: its rows go up in chunks through the
 * slots' staging and RGB buffers on one stream (chunk k in slot k % 3's,
 * once that slot's previous chunk was copied), each chunk converted into
 * S->d_big, then one launch. The other slots are idle (harvested). */
static patina_status big_image(lbp_job *j, size_t i)
{
    patina_gpu_t *g = j->g;
    lbp_state *S = j->S;
    const patina_image_t *im = &j->imgs[i];
    const int w = im->width, h = im->height, pitch = lbp_pitch16(w);
    const size_t rb = 3 * (size_t)w, need = (size_t)h * (size_t)pitch + LBP_GREY_SLACK, dim = j->c->dim;
    const size_t chunk = S->rgb_cap / rb;
    lbp_slot *s0 = &S->slot[0];
    const cudaStream_t st = s0->stream;
    int used[LBP_SLOTS] = {0};
    if (chunk == 0) {
        finish_image(j, i, patina__fail(PATINA_E_LIMIT, "gpu: lbp: image %zu: one row of %d pixels exceeds a batch",
                                        i, w));
        return PATINA_OK;
    }
    if (S->big_cap < need) {
        pgpu_free(g, S->d_big);
        S->d_big = NULL;
        S->big_cap = 0;
        if (pgpu_dev_alloc(g, (void **)&S->d_big, need, PGPU_FAM_LBP, "grey of a large image") != PATINA_OK) {
            finish_image(j, i, patina__fail(PATINA_E_LIMIT,
                                            "gpu: lbp: image %zu (%dx%d): its grey image does not fit the GPU memory "
                                            "budget (%s)",
                                            i, w, h, patina_last_error()));
            return PATINA_OK;
        }
        S->big_cap = need;
    }
    for (size_t r0 = 0, k = 0; r0 < (size_t)h; r0 += chunk, k++) {
        lbp_slot *b = &S->slot[k % LBP_SLOTS];
        const size_t rows = (size_t)h - r0 < chunk ? (size_t)h - r0 : chunk;
        if (used[k % LBP_SLOTS]) PGPU_CU(cudaEventSynchronize(b->done));
        used[k % LBP_SLOTS] = 1;
        if (j->mem[i] == MEM_PAGEABLE) {
            chunk_arg ca;
            ca.view = *im;
            ca.view.data = im->data + r0 * im->stride;
            ca.view.height = (int)rows;
            ca.dst = b->h_stage;
            ca.ntask = (uint32_t)((rows * rb + STAGE_PIECE - 1) / STAGE_PIECE);
            patina_pool_run(g->pool, ca.ntask, chunk_task, &ca);
            PGPU_CU(cudaMemcpyAsync(b->d_rgb, b->h_stage, rows * rb, cudaMemcpyHostToDevice, st));
        } else {
            PGPU_CU(cudaMemcpy2DAsync(b->d_rgb, rb, im->data + r0 * im->stride, im->stride, rb, rows,
                                      cudaMemcpyDefault, st));
        }
        PGPU_CU(grey_launch(b->d_rgb, rb, 0, S->d_big + r0 * (size_t)pitch, pitch, 0, w, (int)rows, 1, st));
        PGPU_CU(cudaEventRecord(b->done, st));
    }
    PGPU_CU(cudaMemsetAsync(s0->d_counts, 0, dim * sizeof(uint32_t), st));
    PGPU_CU(lbp_launch(g, S, j->c, S->d_big, pitch, w, h, 1, NULL, 0, s0->d_counts, st));
    PGPU_CU(cudaMemcpyAsync(s0->h_counts, s0->d_counts, dim * sizeof(uint32_t), cudaMemcpyDeviceToHost, st));
    PGPU_CU(cudaStreamSynchronize(st));
    memcpy(j->out + i * dim, s0->h_counts, dim * sizeof(uint32_t));
    finish_image(j, i, PATINA_OK);
    return PATINA_OK;
}

static patina_status run_job(lbp_job *j)
{
    lbp_state *S = j->S;
    patina_status s = PATINA_OK, s2;
    for (size_t i = 0; i < j->n; i++) classify(j, i);
    s = counts_room(j->g, S, j->c->dim);
    while (s == PATINA_OK && j->next < j->n) {
        const int si = (int)(j->batch % LBP_SLOTS);
        size_t big;
        if ((s = harvest(j, si)) != PATINA_OK) break;
        big = fill(j, &S->slot[si]);
        if (big < j->n) {
            for (int k = 0; s == PATINA_OK && k < LBP_SLOTS; k++) s = harvest(j, k);
            if (s == PATINA_OK) s = big_image(j, big);
            continue;
        }
        if (S->slot[si].nitems == 0) continue;
        s = submit(j, si);
    }
    for (int k = 0; k < LBP_SLOTS; k++) { /* oldest first */
        s2 = harvest(j, (int)((j->batch + (uint64_t)k) % LBP_SLOTS));
        if (s == PATINA_OK) s = s2;
    }
    if (s != PATINA_OK) {
        /* nothing may still read the caller's memory when we return */
        for (int k = 0; k < LBP_SLOTS; k++) {
            cudaStreamSynchronize(S->slot[k].stream);
            S->slot[k].busy = 0;
        }
        (void)cudaGetLastError();
        for (size_t i = 0; i < j->n; i++)
            if (j->mem[i] != MEM_DONE) finish_image(j, i, s);
    }
    return s;
}

patina_status patina_gpu_lbp(patina_gpu_t *g, const patina_gpu_lbp_conf_t *c, uint32_t *counts,
                             const patina_image_t *imgs, size_t n, patina_status *st)
{
    lbp_job j;
    patina_status s;
    if (!g || !c || (n && (!counts || !imgs))) return patina__fail(PATINA_E_INVALID, "gpu: lbp: null argument");
    if (n == 0) return PATINA_OK;
    memset(&j, 0, sizeof j);
    j.g = g;
    j.c = c;
    j.out = counts;
    j.imgs = imgs;
    j.n = n;
    j.st = st;
    s = lbp_ready(g, c, &j.S);
    if (s == PATINA_OK && !(j.mem = (unsigned char *)malloc(n)))
        s = patina__fail(PATINA_E_NOMEM, "gpu: lbp: out of host memory");
    if (s != PATINA_OK) { /* every image gets the status, and zeros */
        memset(counts, 0, n * c->dim * sizeof(uint32_t));
        if (st)
            for (size_t i = 0; i < n; i++) st[i] = s;
        return s;
    }
    memset(j.mem, MEM_PAGEABLE, n);
    s = run_job(&j);
    free(j.mem);
    return s;
}

/* ------------------------------------------------------ grey images (internal) */

/* The device buffers of one patina_gpu__lbp_grey call. */
struct grey_bufs {
    uint8_t *in, *codes;
    uint32_t *counts;
    cudaEvent_t e0, e1;
    double *times;
};

static patina_status grey_run(patina_gpu_t *g, lbp_state *S, const patina_gpu_lbp_conf_t *c, const uint8_t *grey,
                              int w, int h, int n, void *codes, uint32_t *counts, patina_gpu_lbp_timing_t *tm,
                              grey_bufs *b)
{
    const cudaStream_t st = S->slot[0].stream;
    const int pitch = lbp_pitch16(w);
    int mw, mh, reps = tm ? (tm->reps < 1 ? 1 : tm->reps) : 0;
    lbp_map_wh(c, w, h, &mw, &mh);
    const bool m3 = c->kind != LBP_KIND_CIRCULAR;
    const int opitch = m3 ? lbp_pitch16(mw) : 0;
    const size_t in_bytes = (size_t)n * (size_t)h * (size_t)pitch + LBP_GREY_SLACK;
    const size_t code_bytes =
        m3 ? (size_t)n * (size_t)mh * (size_t)opitch : (size_t)n * (size_t)mw * (size_t)mh * (size_t)c->code_bytes;
    const size_t count_bytes = (size_t)n * c->dim * sizeof(uint32_t);
    PATINA_TRY(pgpu_dev_alloc(g, (void **)&b->in, in_bytes, PGPU_FAM_LBP, "grey images (internal entry)"));
    if (codes) PATINA_TRY(pgpu_dev_alloc(g, (void **)&b->codes, code_bytes, PGPU_FAM_LBP, "code maps (internal entry)"));
    if (counts || !codes)
        PATINA_TRY(pgpu_dev_alloc(g, (void **)&b->counts, count_bytes, PGPU_FAM_LBP, "counts (internal entry)"));
    PGPU_CU(cudaMemsetAsync(b->in, 0, in_bytes, st));
    if ((size_t)w * (size_t)h * (size_t)n > 0)
        PGPU_CU(cudaMemcpy2DAsync(b->in, (size_t)pitch, grey, (size_t)w, (size_t)w, (size_t)h * (size_t)n,
                                  cudaMemcpyHostToDevice, st));
    const auto launch = [&]() -> cudaError_t {
        return lbp_launch(g, S, c, b->in, pitch, w, h, n, b->codes, opitch, b->counts, st);
    };
    if (reps) {
        b->times = (double *)malloc(sizeof(double) * (size_t)reps);
        if (!b->times) return patina__fail(PATINA_E_NOMEM, "gpu: lbp: out of host memory");
        PGPU_CU(cudaEventCreate(&b->e0));
        PGPU_CU(cudaEventCreate(&b->e1));
    }
    for (int r = reps ? -1 : 0; r < (reps ? reps : 1); r++) {
        if (b->counts) PGPU_CU(cudaMemsetAsync(b->counts, 0, count_bytes, st));
        if (reps) PGPU_CU(cudaEventRecord(b->e0, st));
        PGPU_CU(launch());
        if (reps) {
            float f = 0.0f;
            PGPU_CU(cudaEventRecord(b->e1, st));
            PGPU_CU(cudaEventSynchronize(b->e1));
            PGPU_CU(cudaEventElapsedTime(&f, b->e0, b->e1));
            if (r >= 0) b->times[r] = (double)f;
        }
    }
    if (codes && mw > 0 && mh > 0 && n > 0) {
        if (m3)
            PGPU_CU(cudaMemcpy2DAsync(codes, (size_t)mw, b->codes, (size_t)opitch, (size_t)mw, (size_t)mh * (size_t)n,
                                      cudaMemcpyDeviceToHost, st));
        else
            PGPU_CU(cudaMemcpyAsync(codes, b->codes, code_bytes, cudaMemcpyDeviceToHost, st));
    }
    if (counts) PGPU_CU(cudaMemcpyAsync(counts, b->counts, count_bytes, cudaMemcpyDeviceToHost, st));
    PGPU_CU(cudaStreamSynchronize(st));
    if (!reps) return PATINA_OK;
    pgpu_sort_doubles(b->times, (size_t)reps);
    tm->ms_alone = b->times[reps / 2];
    tm->ms_stream = 0.0;
    if (mw > 0 && mh > 0 && n > 0) {
        /* the GPU busy for 2 ms while the host queues e0, the launches and e1 */
        float f = 0.0f;
        PGPU_CU(busy_launch(2000000, st));
        PGPU_CU(cudaEventRecord(b->e0, st));
        for (int r = 0; r < reps; r++) PGPU_CU(launch());
        PGPU_CU(cudaEventRecord(b->e1, st));
        PGPU_CU(cudaEventSynchronize(b->e1));
        PGPU_CU(cudaEventElapsedTime(&f, b->e0, b->e1));
        tm->ms_stream = (double)f / reps;
    }
    return PATINA_OK;
}

patina_status patina_gpu__lbp_grey(patina_gpu_t *g, const patina_gpu_lbp_conf_t *c, const uint8_t *grey,
                                   int w, int h, int n, void *codes, uint32_t *counts,
                                   patina_gpu_lbp_timing_t *timing)
{
    lbp_state *S;
    grey_bufs b;
    patina_status s;
    if (timing) timing->ms_alone = timing->ms_stream = 0.0;
    if (!g || !c || w < 0 || h < 0 || n < 0 || (!grey && (size_t)w * (size_t)h * (size_t)n > 0))
        return patina__fail(PATINA_E_INVALID, "gpu: lbp: bad arguments to the grey entry");
    if (n > 65535 || (size_t)n * c->dim > 0x7fffffffu || !lbp_launchable(c, w, h, counts != NULL))
        return patina__fail(PATINA_E_LIMIT, "gpu: lbp: %d images of %dx%d exceed a launch", n, w, h);
    PATINA_TRY(lbp_ready(g, c, &S));
    memset(&b, 0, sizeof b);
    s = grey_run(g, S, c, grey, w, h, n, codes, counts, timing, &b);
    if (s != PATINA_OK) {
        cudaStreamSynchronize(S->slot[0].stream);
        (void)cudaGetLastError();
    }
    pgpu_free_n(g, 3, &b.in, &b.codes, &b.counts);
    if (b.e0) cudaEventDestroy(b.e0);
    if (b.e1) cudaEventDestroy(b.e1);
    free(b.times);
    return s;
}
