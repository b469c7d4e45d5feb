/* lab_glcm: the GLCM kernel lab (docs/lab/glcm.md).
 *
 * Variants. The variant table below holds every counting-kernel instance
 * the experiments produced (src/gpu/glcm_kernels.cuh, instantiated here);
 * the lab's chooser picks one the way the experiments' variant switch did:
 *   K2 = 0  k_count2, no prefetch, 768 threads   1  prefetch, 768 threads
 *        2  prefetch, 512 threads                3  prefetch, 640 threads
 *        4  k_count3 at 640 threads where it applies (one offset per block,
 *           L = 2^s <= 32), else 3               5  the same at 768 threads
 *        6  k_count4, two groups per lane (2..32 offsets, L = 2^s <= 32),
 *           else 4                               7  the same, four groups
 *        8  6 with the first pixels by 8-byte loads
 *        9  the production rule (by the work per SM: 11 / 10 for L <= 8,
 *           7 / 6, else 4)
 *       10  k_count5 (joint pairs of offsets, L = 2^s <= 8), else 6
 *       11  10 with partners by 8-byte loads, else 7
 *   SPLIT = S: the offsets cut into S subsets whose blocks share a band
 *   (when fewer than 32 copies fit); TASKPX: fixed task pixels; TASKMIN:
 *   smallest automatic task. "-" is the library itself (no chooser).
 * The variants run through the library's driver (pgpu_glcm_counts,
 * pgpu_glcm_time with knobs), so tiles, tasks and masks are the library's.
 *
 * Schemes. The paper's three (Hong, Zheng & Pan, "Computation of gray-level
 * co-occurrence matrix based on CUDA and its optimization"), with their own
 * layouts: 1 one thread per pixel and a global atomic per pair; 2 R
 * privatised sub-GLCMs per block in shared memory, thread i votes into copy
 * i mod R; 3 Scheme 2 on K linear tiles streamed from pinned memory over two
 * streams with the paper's Pad rule.
 *
 * Modes:
 *   lab_glcm --validate [--quick]   every variant, split and task size, the
 *       masks and the schemes against the C reference and against the
 *       library's own entry point (patina_gpu_glcm_counts); exit 1 on a
 *       difference, 77 without a GPU. The CTest test lab_glcm.
 *   lab_glcm [--quick] [--max-size N]   the paper's tables: Scheme 1
 *       (Table II), Schemes 1, 2 and the production kernel (Table III),
 *       Scheme 3's copies, kernels and overlap against the production path
 *       from pinned memory (Table 3), and a mask's sentinel level against
 *       bit 7; every result checked against the CPU.
 *   lab_glcm --focus [--sizes A,B] [--kinds 0,1] [--levels 8,32]
 *       [--sets 1,2,8] [--reps R] [--variants 'K2=4;K2=6,TASKPX=65536;-']
 *       the counting kernel alone (image resident) under each variant:
 *       launches back to back and one launch alone, ms. */
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchutil.h"
#include "core/internal.h"
#include "features/glcm_ref.h"
#include "gpu/context.h"
#include "gpu/glcm.h"
#include "gpu/glcm_kernels.cuh"
#include "gpu/gpu.h"
#include "patina/glcm.h"
#include "patina/patina.h"

#define VT 640 /* threads of the variants but 0-2, 5's */

/* ------------------------------------------------------------ variants */

struct lab_kernel {
    glcm_count_fn fn;
    int threads;
    const char *name;
};

/* Entries 8..30 take C = log2(lanes) (GLCM_KIND_LANES), the others copies. */
static const lab_kernel table[32] = {
    {k_count2<false, 768>, 768, "k_count2<no prefetch,768>"}, /* 0 */
    {k_count2<true, 768>, 768, "k_count2<768>"},
    {k_count2<true, 512>, 512, "k_count2<512>"},
    {k_count2<true, VT>, VT, "k_count2<640>"},
    {k_count3<false, true, VT>, VT, "k_count3<L<=16,640>"}, /* 4 */
    {k_count3<true, true, VT>, VT, "k_count3<L=32,640>"},
    {k_count3<false, true, 768>, 768, "k_count3<L<=16,768>"},
    {k_count3<true, true, 768>, 768, "k_count3<L=32,768>"},
    {k_count4<1, 2, 0, VT>, VT, "k_count4<L=2,U=2>"}, /* 8 */
    {k_count4<2, 2, 0, VT>, VT, "k_count4<L=4,U=2>"},
    {k_count4<3, 2, 0, VT>, VT, "k_count4<L=8,U=2>"},
    {k_count4<4, 2, 0, VT>, VT, "k_count4<L=16,U=2>"},
    {k_count4<5, 2, 0, VT>, VT, "k_count4<L=32,U=2>"},
    {k_count4<1, 4, 0, VT>, VT, "k_count4<L=2,U=4>"}, /* 13 */
    {k_count4<2, 4, 0, VT>, VT, "k_count4<L=4,U=4>"},
    {k_count4<3, 4, 0, VT>, VT, "k_count4<L=8,U=4>"},
    {k_count4<4, 4, 0, VT>, VT, "k_count4<L=16,U=4>"},
    {k_count4<5, 4, 0, VT>, VT, "k_count4<L=32,U=4>"},
    {k_count4<1, 2, 1, VT>, VT, "k_count4<L=2,U=2,LD=1>"}, /* 18 */
    {k_count4<2, 2, 1, VT>, VT, "k_count4<L=4,U=2,LD=1>"},
    {k_count4<3, 2, 1, VT>, VT, "k_count4<L=8,U=2,LD=1>"},
    {k_count4<4, 2, 1, VT>, VT, "k_count4<L=16,U=2,LD=1>"},
    {k_count4<5, 2, 1, VT>, VT, "k_count4<L=32,U=2,LD=1>"},
    {k_count5<1, 2, 0, VT>, VT, "k_count5<L=2,LD=0>"}, /* 23 */
    {k_count5<2, 2, 0, VT>, VT, "k_count5<L=4,LD=0>"},
    {k_count5<3, 2, 0, VT>, VT, "k_count5<L=8,LD=0>"},
    {k_count5<1, 2, 1, VT>, VT, "k_count5<L=2,LD=1>"}, /* 26 */
    {k_count5<2, 2, 1, VT>, VT, "k_count5<L=4,LD=1>"},
    {k_count5<3, 2, 1, VT>, VT, "k_count5<L=8,LD=1>"},
    {k_count4<5, 2, 0, VT, true>, VT, "k_count4<L=32,U=2,mask>"}, /* 29 */
    {k_count4<5, 4, 0, VT, true>, VT, "k_count4<L=32,U=4,mask>"},
    {k_count3<true, true, VT, true>, VT, "k_count3<L=32,640,mask>"}, /* 31 */
};

/* A variant: K2 (0..11), SPLIT, TASKPX, TASKMIN; lib: the library itself. */
struct lab_variant {
    int lib;
    int k2, split;
    size_t task_px, task_min;
    char text[64];
};

/* The experiments' plan: the variant switch over the table. */
static patina_status lab_choose(const pgpu_glcm_chooser *self, glcm_plan *pl)
{
    const lab_variant *v = (const lab_variant *)self->arg;
    const int L = pl->L, noff = pl->noff;
    const long long LL4 = (long long)L * L * 4, budget = pl->smem_optin;
    const bool pow2 = L >= 2 && (L & (L - 1)) == 0, multi = noff >= 2 && noff <= 32;
    int k2 = v->k2;
    glcm_copies_plan(pl);
    if (pl->kind != GLCM_KIND_GLOBAL && pl->G == noff && pl->R < 32) {
        /* fewer than 32 copies: lanes collide on banks; S subsets, each with
         * more copies, in S blocks reading the same rows */
        int S = v->split > 0 ? v->split : 1;
        while (S > 1 && (S - 1) * ((noff + S - 1) / S) >= noff) S--; /* no empty subset */
        if (S > 1) {
            pl->S = S;
            pl->G = (noff + S - 1) / S;
            pl->R = glcm_pow2_floor((int)(budget / ((long long)pl->G * LL4)));
            if (pl->R > 32) pl->R = 32;
            pl->smem = (int)(pl->G * pl->R * LL4);
        }
    }
    if (k2 == 9) {
        const size_t px = pl->px_per_sm;
        k2 = px >= ((size_t)1 << 20) ? 7 : px >= ((size_t)1 << 14) ? 6 : 4;
        if (L <= 8 && px >= ((size_t)1 << 16)) k2 = px >= ((size_t)1 << 20) ? 11 : 10;
    }
    {
        const int jent = k2 == 10 ? 23 : k2 == 11 ? 26 : -1;
        int fent = k2 == 6 ? 8 : k2 == 7 ? 13 : k2 == 8 ? 18 : -1;
        if (jent >= 0 && pow2 && L <= 8 && multi) {
            pl->G = noff;
            pl->S = 1;
            pl->R = glcm_lanes((noff + 1) / 2);
            k2 = jent + __builtin_ctz((unsigned)L) - 1;
            pl->smem = (int)(((long long)L * L * L + 2LL * L * L) * 32 * 4);
        } else if ((fent >= 0 || jent >= 0) && pow2 && L <= 32 && multi) {
            if (jent >= 0) fent = k2 == 10 ? 8 : 13;
            pl->G = noff;
            pl->S = 1;
            pl->R = glcm_lanes(noff);
            k2 = fent + __builtin_ctz((unsigned)L) - 1;
            if (pl->flagged) k2 = fent == 13 ? 30 : 29;
            pl->smem = (int)((long long)L * L * (L == 32 ? 32 : 64) * 4);
        } else {
            if (k2 >= 4) k2 = pow2 && L <= 32 && pl->G == 1 ? 4 + 2 * (k2 == 5) + (L == 32) : 3;
            if (pl->flagged && k2 == 5) k2 = 31;
        }
    }
    if (pl->flagged && (k2 < 29 || L != 32)) return PATINA_E_LIMIT; /* the driver takes the sentinel */
    if (pl->kind == GLCM_KIND_GLOBAL) {
        pl->fn = NULL;
        pl->threads = GLCM_GLOBAL_THREADS;
        pl->name = "k_count_global";
        return PATINA_OK;
    }
    pl->kind = k2 >= 8 && k2 <= 30 ? GLCM_KIND_LANES : GLCM_KIND_COPIES;
    pl->fn = table[k2].fn;
    pl->threads = table[k2].threads;
    pl->name = table[k2].name;
    return PATINA_OK;
}

/* "K2=6,SPLIT=2,TASKPX=65536" or "-" */
static int parse_variant(lab_variant *v, const char *spec)
{
    char buf[128], *tok, *save = NULL;
    memset(v, 0, sizeof *v);
    v->k2 = 9;
    snprintf(v->text, sizeof v->text, "%s", spec);
    if (!strcmp(spec, "-")) {
        v->lib = 1;
        return 0;
    }
    snprintf(buf, sizeof buf, "%s", spec);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        long x;
        if (!eq) return -1;
        *eq = 0;
        x = atol(eq + 1);
        if (!strcmp(tok, "K2") && x >= 0 && x <= 11) v->k2 = (int)x;
        else if (!strcmp(tok, "SPLIT")) v->split = (int)x;
        else if (!strcmp(tok, "TASKPX")) v->task_px = (size_t)x;
        else if (!strcmp(tok, "TASKMIN")) v->task_min = (size_t)x;
        else return -1;
    }
    return 0;
}

/* The knobs of a variant (chooser points at ch, which must live as long). */
static pgpu_glcm_knobs_t variant_knobs(const lab_variant *v, pgpu_glcm_chooser *ch, size_t slot_bytes,
                                       size_t task_px)
{
    pgpu_glcm_knobs_t k;
    memset(&k, 0, sizeof k);
    ch->choose = lab_choose;
    ch->arg = v;
    k.chooser = v->lib ? NULL : ch;
    k.slot_bytes = slot_bytes;
    k.task_pixels = task_px ? task_px : v->task_px;
    k.task_min = v->task_min;
    return k;
}

/* ------------------------------------------------------------ images */

static uint64_t rng_s = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n)
{
    rng_s ^= rng_s >> 12;
    rng_s ^= rng_s << 25;
    rng_s ^= rng_s >> 27;
    return (uint32_t)(((rng_s * 0x2545F4914F6CDD1Dull) >> 32) % n);
}

/* (h, stride) levels < L, junk past w; kind 0 noise, 1 long runs, 2 smooth. */
static uint8_t *random_levels(int w, int h, size_t stride, int L, int kind, int pinned)
{
    const size_t bytes = stride * (size_t)(h > 0 ? h : 1) + 1;
    uint8_t *q = (uint8_t *)(pinned ? patina_gpu_host_alloc(bytes) : malloc(bytes));
    if (!q) return NULL;
    for (int y = 0; y < h; y++)
        for (size_t x = 0; x < stride; x++) {
            int v = kind == 0 ? (int)rnd((uint32_t)L)
                    : kind == 1 ? (int)((x / 37 + (size_t)y / 23) % (size_t)L)
                                : (int)(((x + (size_t)y) * (size_t)L) / (size_t)(w + h + 1));
            q[(size_t)y * stride + x] = (uint8_t)((int)x < w ? v : 255);
        }
    return q;
}

static void free_levels(uint8_t *q, int pinned)
{
    if (pinned)
        patina_gpu_host_free(q);
    else
        free(q);
}


/* ------------------------------------------------------------ checks */

static int g_fail, g_checks;

static void same(const uint32_t *got, const uint32_t *want, size_t n, const char *what)
{
    g_checks++;
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            if (g_fail < 20)
                printf("MISMATCH %s: element %zu: %u, reference %u\n", what, i, got[i], want[i]);
            g_fail++;
            return;
        }
}

static void ok(patina_status s, const char *what)
{
    if (s != PATINA_OK) {
        printf("FAILED %s: %s\n", what, patina_last_error());
        g_fail++;
    }
}

/* ------------------------------------------------------------ schemes */

/* Scheme 1: one thread per pixel, a global atomic per pair. */
static __global__ void k_s1(const uint8_t *__restrict__ q, int w, int h, int pitch, int L, int dy, int dx,
                            uint32_t *P)
{
    const long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (p >= (long long)w * h) return;
    const int r = (int)(p / w), c = (int)(p - (long long)r * w), rr = r + dy, cc = c + dx;
    if (rr < 0 || rr >= h || cc < 0 || cc >= w) return;
    atomicAdd(&P[q[(long long)r * pitch + c] * L + q[(long long)rr * pitch + cc]], 1u);
}

/* Scheme 2 (and the kernel of Scheme 3): R sub-GLCMs of L*L words in each
 * block's shared memory, thread i votes into sub-GLCM i mod R; the first
 * pixels are the linear range [s, e) of an image of width w (pitch w),
 * whose linear pixel `base` is at buf[0]. */
static __global__ void k_s2(const uint8_t *__restrict__ buf, long long base, long long s, long long e, int w, int h,
                            int L, int dy, int dx, int R, uint32_t *P)
{
    extern __shared__ uint32_t sub[];
    const int LL = L * L;
    for (int i = threadIdx.x; i < R * LL; i += blockDim.x) sub[i] = 0;
    __syncthreads();
    uint32_t *mine = sub + (threadIdx.x % R) * LL;
    const long long lin = (long long)dy * w + dx;
    for (long long p = s + blockIdx.x * (long long)blockDim.x + threadIdx.x; p < e;
         p += (long long)gridDim.x * blockDim.x) {
        const int r = (int)(p / w), c = (int)(p - (long long)r * w);
        if (r + dy < 0 || r + dy >= h || c + dx < 0 || c + dx >= w) continue;
        atomicAdd(&mine[buf[p - base] * L + buf[p + lin - base]], 1u);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < LL; i += blockDim.x) {
        uint32_t t = 0;
        for (int c = 0; c < R; c++) t += sub[c * LL + i];
        if (t) atomicAdd(&P[i], t);
    }
}

/* What a scheme run reports. */
struct scheme_run {
    int scheme;      /* 1, 2, 3 */
    int reps;        /* timed repetitions after one warm-up; the median is reported */
    int tiles;       /* scheme 3: K (default 8) */
    int block;       /* threads per block (0: the paper's choice); out: used */
    int copies;      /* scheme 2: R (0: from 48 KiB per two blocks); out: R used */
    double ms;       /* 1, 2: kernel time (image resident); 3: copies and kernels overlapped */
    double h2d_ms;   /* 3: the same tiles' copies alone */
    double kernel_ms;/* 3: the same tiles' kernels alone */
};

/* In the scheme runs: a failed CUDA call sets s and jumps to out. */
#define CU(call) PGPU_CU_GOTO(call, s, out)

/* Scheme 3: the image as one linear array of w*h pixels cut into K tiles of
 * first pixels [s_i, e_i); tile i is copied with Pad = dy*w + dx extra
 * pixels after it (before it for a negative offset), two streams alternate
 * copy -> kernel. mode 0: overlapped run; 1: copies only; 2: kernels only
 * (tiles already resident). ms: elapsed. */
static patina_status scheme3_pass(const uint8_t *hq, int w, int h, int L, patina_glcm_offset_t o, int K, int R,
                                  int block, int maxgrid, uint8_t *dbuf[2], size_t tile_cap, uint32_t *d_P,
                                  cudaStream_t st[2], int mode, double *ms)
{
    const long long N = (long long)w * h, lin = (long long)o.dy * w + o.dx;
    const long long pad_hi = lin > 0 ? lin : 0, pad_lo = lin < 0 ? -lin : 0;
    cudaEvent_t e0 = NULL, e1 = NULL, ed = NULL;
    patina_status s = PATINA_OK;
    float f = 0;
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    CU(cudaEventCreate(&ed));
    CU(cudaEventRecord(e0, st[0]));
    CU(cudaStreamWaitEvent(st[1], e0, 0));
    for (int i = 0; i < K; i++) {
        const long long s0 = N * i / K, s1 = N * (i + 1) / K;
        long long lo = s0 - pad_lo, hi = s1 + pad_hi;
        cudaStream_t ss = st[i & 1];
        if (lo < 0) lo = 0;
        if (hi > N) hi = N;
        if ((size_t)(hi - lo) > tile_cap) {
            s = patina__fail(PATINA_E_INTERNAL, "glcm lab: scheme 3 tile");
            goto out;
        }
        if (mode != 2) CU(cudaMemcpyAsync(dbuf[i & 1], hq + lo, (size_t)(hi - lo), cudaMemcpyHostToDevice, ss));
        if (mode != 1) {
            int grid = (int)((s1 - s0 + block - 1) / block);
            if (grid > maxgrid) grid = maxgrid; /* blocks loop over their part of the tile */
            if (grid < 1) grid = 1;
            k_s2<<<grid, block, (size_t)R * L * L * 4, ss>>>(dbuf[i & 1], lo, s0, s1, w, h, L, o.dy, o.dx, R, d_P);
            CU(cudaGetLastError());
        }
    }
    CU(cudaEventRecord(ed, st[1]));
    CU(cudaStreamWaitEvent(st[0], ed, 0));
    CU(cudaEventRecord(e1, st[0]));
    CU(cudaEventSynchronize(e1));
    CU(cudaEventElapsedTime(&f, e0, e1));
    *ms = f;
out:
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (ed) cudaEventDestroy(ed);
    return s;
}

/* Runs scheme r->scheme on q (w x h, stride) for noff offsets (one launch
 * per offset): counts (noff, L, L), symmetrised on the host when asked. */
static patina_status run_scheme(patina_gpu_t *g, scheme_run *r, uint32_t *counts, const uint8_t *q, int w, int h,
                                size_t stride, int L, const patina_glcm_offset_t *off, size_t noff, int symmetric)
{
    const size_t LL = (size_t)L * (size_t)L;
    const int reps = r->reps > 0 ? r->reps : 1;
    double *t = (double *)malloc(sizeof(double) * (size_t)reps);
    uint8_t *hq = NULL, *dq = NULL, *dbuf[2] = {NULL, NULL};
    uint32_t *dP = NULL;
    cudaStream_t st[2] = {NULL, NULL};
    cudaEvent_t e0 = NULL, e1 = NULL;
    patina_status s = PATINA_OK;
    float f;
    r->ms = r->h2d_ms = r->kernel_ms = 0;
    if (!t) return patina__fail(PATINA_E_NOMEM, "glcm lab: out of memory");
    CU(cudaSetDevice(g->device));
    CU(cudaEventCreate(&e0));
    CU(cudaEventCreate(&e1));
    CU(cudaMalloc((void **)&dP, noff * LL * sizeof(uint32_t)));
    CU(cudaHostAlloc((void **)&hq, (size_t)w * h, cudaHostAllocDefault)); /* pinned, pitch w, untimed */
    for (int y = 0; y < h; y++) memcpy(hq + (size_t)y * w, q + (size_t)y * stride, (size_t)w);
    if (r->scheme == 1 || r->scheme == 2) {
        const int block = r->block > 0 ? r->block : r->scheme == 1 ? 256 : (L <= 8 ? 1024 : 512);
        int R = r->copies > 0 ? r->copies : (int)(49152 / (LL * 4) / 2);
        if (R < 1) R = 1;
        if (R > block) R = block;
        if ((size_t)R * LL * 4 > (size_t)g->smem_optin) R = (int)(g->smem_optin / (LL * 4));
        if (r->scheme == 2 && R < 1) {
            s = patina__fail(PATINA_E_LIMIT, "glcm lab: scheme 2 needs L*L*4 bytes of shared memory");
            goto out;
        }
        r->copies = R;
        r->block = block;
        CU(cudaMalloc((void **)&dq, (size_t)w * h));
        CU(cudaMemcpy(dq, hq, (size_t)w * h, cudaMemcpyHostToDevice));
        if (r->scheme == 2) CU(cudaFuncSetAttribute(k_s2, cudaFuncAttributeMaxDynamicSharedMemorySize, g->smem_optin));
        for (int rep = -1; rep < reps; rep++) {
            CU(cudaMemset(dP, 0, noff * LL * sizeof(uint32_t)));
            CU(cudaEventRecord(e0));
            for (size_t o = 0; o < noff; o++) {
                if (r->scheme == 1) {
                    const long long npx = (long long)w * h;
                    k_s1<<<(unsigned)((npx + block - 1) / block), block>>>(dq, w, h, w, L, off[o].dy, off[o].dx,
                                                                        dP + o * LL);
                } else {
                    int per_sm = 0;
                    CU(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_s2, block, (size_t)R * LL * 4));
                    if (per_sm < 1) per_sm = 1;
                    k_s2<<<per_sm * g->sm_count, block, (size_t)R * LL * 4>>>(dq, 0, 0, (long long)w * h, w, h, L,
                                                                             off[o].dy, off[o].dx, R, dP + o * LL);
                }
            }
            CU(cudaGetLastError());
            CU(cudaEventRecord(e1));
            CU(cudaEventSynchronize(e1));
            CU(cudaEventElapsedTime(&f, e0, e1));
            if (rep >= 0) t[rep] = f;
        }
        r->ms = bench_median(t, reps);
    } else if (r->scheme == 3) {
        const int K = r->tiles > 0 ? r->tiles : 8;
        const int block = L <= 8 ? 1024 : 512;
        const long long N = (long long)w * h;
        int R = (int)(49152 / (LL * 4) / 2), per_sm = 0;
        long long maxpad = 0;
        double tc[3];
        size_t cap;
        if (R < 1) R = 1;
        if ((size_t)R * LL * 4 > (size_t)g->smem_optin) {
            s = patina__fail(PATINA_E_LIMIT, "glcm lab: scheme 3 needs L*L*4 bytes of shared memory");
            goto out;
        }
        CU(cudaFuncSetAttribute(k_s2, cudaFuncAttributeMaxDynamicSharedMemorySize, g->smem_optin));
        CU(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_s2, block, (size_t)R * LL * 4));
        if (per_sm < 1) per_sm = 1;
        for (size_t o = 0; o < noff; o++) {
            long long lin = (long long)off[o].dy * w + off[o].dx;
            if (lin < 0) lin = -lin;
            if (lin > maxpad) maxpad = lin;
        }
        cap = (size_t)((N + K - 1) / K + maxpad + 16);
        CU(cudaMalloc((void **)&dbuf[0], cap));
        CU(cudaMalloc((void **)&dbuf[1], cap));
        CU(cudaStreamCreateWithFlags(&st[0], cudaStreamNonBlocking));
        CU(cudaStreamCreateWithFlags(&st[1], cudaStreamNonBlocking));
        r->copies = R;
        r->block = block;
        r->tiles = K;
        for (int mode = 0; mode < 3; mode++) {
            for (int rep = -1; rep < reps; rep++) {
                double sum = 0, ms;
                CU(cudaMemset(dP, 0, noff * LL * sizeof(uint32_t)));
                CU(cudaDeviceSynchronize());
                for (size_t o = 0; o < noff; o++) {
                    s = scheme3_pass(hq, w, h, L, off[o], K, R, block, per_sm * g->sm_count, dbuf, cap, dP + o * LL,
                                     st, mode, &ms);
                    if (s != PATINA_OK) goto out;
                    sum += ms;
                }
                if (rep >= 0) t[rep] = sum;
            }
            tc[mode] = bench_median(t, reps);
            if (mode == 0) { /* the overlapped run leaves the counts */
                CU(cudaDeviceSynchronize());
                CU(cudaMemcpy(counts, dP, noff * LL * sizeof(uint32_t), cudaMemcpyDeviceToHost));
            }
        }
        r->ms = tc[0];
        r->h2d_ms = tc[1];
        r->kernel_ms = tc[2];
    } else {
        s = patina__fail(PATINA_E_INVALID, "glcm lab: unknown scheme %d", r->scheme);
        goto out;
    }
    if (r->scheme != 3) CU(cudaMemcpy(counts, dP, noff * LL * sizeof(uint32_t), cudaMemcpyDeviceToHost));
    if (symmetric) glcm_symmetrise(counts, L, noff);
out:
    if (s != PATINA_OK) (void)cudaDeviceSynchronize();
    cudaFreeHost(hq);
    cudaFree(dq);
    cudaFree(dP);
    cudaFree(dbuf[0]);
    cudaFree(dbuf[1]);
    if (st[0]) cudaStreamDestroy(st[0]);
    if (st[1]) cudaStreamDestroy(st[1]);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    free(t);
    return s;
}

/* ------------------------------------------------------------ validation */

static patina_gpu_grey_t grey_of(const uint8_t *q, int w, int h, size_t stride, const uint8_t *mask)
{
    patina_gpu_grey_t g;
    memset(&g, 0, sizeof g);
    g.q = q;
    g.w = w;
    g.h = h;
    g.stride = stride;
    g.mask = mask;
    g.mstride = mask ? (size_t)w : 0;
    return g;
}

/* n offsets in [-4, 4]^2 (first (0, 1), (1, -1)); from 3 on one taller than
 * the image, from 5 one wider leftwards, from 8 one wider rightwards. */
static void lab_offsets(patina_glcm_offset_t *off, int n, int w, int h)
{
    for (int o = 0; o < n; o++) {
        off[o].dy = (int)rnd(9) - 4;
        off[o].dx = (int)rnd(9) - 4;
    }
    if (n >= 2) {
        off[0].dy = 0;
        off[0].dx = 1;
        off[1].dy = 1;
        off[1].dx = -1;
    }
    if (n >= 3) off[n - 1].dy = h;
    if (n >= 5) off[n - 2].dx = -w - 1;
    if (n >= 8) off[n - 3].dx = w + 3;
}

/* The reference and the library's entry point for one request: ref gets the
 * C reference's counts; the library's must equal them. */
static void reference(patina_gpu_t *g, uint32_t *ref, const patina_gpu_grey_t *im, int L,
                      const patina_glcm_offset_t *off, size_t noff, int sym, const char *what)
{
    const size_t per = noff * (size_t)L * (size_t)L;
    uint32_t *lib = (uint32_t *)malloc(per * 4 + 4);
    char w2[200 + sizeof ": the library's entry point"]; /* what: a caller's char[200] */
    ok(patina_glcm_counts_ref(ref, im->q, im->w, im->h, im->stride, im->mask, im->mstride, L, off, noff, sym),
       what);
    memset(lib, 0xab, per * 4);
    ok(patina_gpu_glcm_counts(g, lib, im, 1, L, off, noff, sym), what);
    snprintf(w2, sizeof w2, "%s: the library's entry point", what);
    same(lib, ref, per, w2);
    free(lib);
}

/* Every K2 variant x offset split x task size, resident (pgpu_glcm_time)
 * and streamed (pgpu_glcm_counts). */
static void validate_variants(patina_gpu_t *g, int quick)
{
    static const int levels[] = {8, 32, 100, 64, 16, 2};
    static const int splits[] = {0, 1, 2, 3, 4, 8};
    static const size_t tasks[] = {0, 64, 5000};
    for (size_t li = 0; li < sizeof levels / sizeof levels[0]; li++) {
        const int L = levels[li], noff = li == 3 ? 10 : 8, w = 333 + 50 * (int)li, h = 171 + 31 * (int)li;
        const size_t stride = (size_t)w + li, per = (size_t)noff * L * L;
        uint8_t *q = random_levels(w, h, stride, L, (int)li % 3, (int)li % 2);
        uint32_t *ref = (uint32_t *)malloc(per * 4), *got = (uint32_t *)malloc(per * 4);
        patina_glcm_offset_t off[10];
        patina_gpu_grey_t im = grey_of(q, w, h, stride, NULL);
        char what[200];
        lab_offsets(off, noff, w, h);
        snprintf(what, sizeof what, "variants L=%d", L);
        reference(g, ref, &im, L, off, (size_t)noff, 0, what);
        for (int k2 = 0; k2 < 12; k2++)
            for (size_t si = 0; si < sizeof splits / sizeof splits[0]; si++)
                for (size_t ti = 0; ti < sizeof tasks / sizeof tasks[0]; ti++) {
                    lab_variant v;
                    pgpu_glcm_chooser ch;
                    pgpu_glcm_knobs_t k;
                    pgpu_glcm_timing_t t;
                    if (quick && (si > 2 || ti > 1)) continue;
                    memset(&v, 0, sizeof v);
                    v.k2 = k2;
                    v.split = splits[si];
                    v.task_px = tasks[ti];
                    k = variant_knobs(&v, &ch, 0, 0);
                    memset(&t, 0, sizeof t);
                    t.reps = 1;
                    memset(got, 0xcd, per * 4);
                    ok(pgpu_glcm_time(g, &k, &t, got, &im, 1, L, off, (size_t)noff, 0), "pgpu_glcm_time");
                    snprintf(what, sizeof what, "resident: K2=%d SPLIT=%d TASKPX=%zu L=%d (%s)", k2, splits[si],
                             tasks[ti], L, t.kernel);
                    same(got, ref, per, what);
                    if (ti == 0 && si < 3) {
                        memset(got, 0xcd, per * 4);
                        ok(pgpu_glcm_counts(g, &k, got, &im, 1, L, off, (size_t)noff, 0), "pgpu_glcm_counts");
                        snprintf(what, sizeof what, "streamed: K2=%d SPLIT=%d L=%d", k2, splits[si], L);
                        same(got, ref, per, what);
                    }
                }
        free_levels(q, (int)li % 2);
        free(ref);
        free(got);
    }
}

/* Several offsets in one pass under variants 4, 6, 7, 8, 9, 10, 11: G = 2,
 * 3, 5, 8, 13, 32 offsets, L = 2, 4, 8, 16, 32, widths not multiples of 16,
 * one row, one column; default slots and slots of 11 rows with 64-pixel
 * tasks (tiles whose padding rows split pairs, many flushes). */
static void validate_offsets(patina_gpu_t *g, int quick)
{
    static const int gs[] = {2, 3, 5, 8, 13, 32};
    static const int levels[] = {2, 8, 16, 32, 4};
    static const int sizes[][2] = {{1, 1}, {15, 3}, {17, 9}, {1, 40}, {100, 37}, {333, 171}, {1031, 97}};
    static const int k2s[] = {4, 6, 7, 8, 9, 10, 11};
    for (size_t gi = 0; gi < sizeof gs / sizeof gs[0]; gi++)
        for (size_t li = 0; li < sizeof levels / sizeof levels[0]; li++)
            for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
                const int G = gs[gi], L = levels[li], w = sizes[si][0], h = sizes[si][1];
                const size_t per = (size_t)G * L * L;
                patina_glcm_offset_t off[32];
                uint8_t *q;
                uint32_t *ref, *got;
                patina_gpu_grey_t im;
                char what[200];
                if ((li == 4 || quick) && si != 5) continue;
                q = random_levels(w, h, (size_t)w, L, (int)(si + li) % 3, (int)si % 2);
                ref = (uint32_t *)malloc(per * 4);
                got = (uint32_t *)malloc(per * 4);
                im = grey_of(q, w, h, (size_t)w, NULL);
                lab_offsets(off, G, w, h);
                snprintf(what, sizeof what, "offsets %dx%d L=%d G=%d", w, h, L, G);
                reference(g, ref, &im, L, off, (size_t)G, 0, what);
                for (size_t vi = 0; vi < sizeof k2s / sizeof k2s[0]; vi++)
                    for (int small = 0; small < 2; small++) {
                        lab_variant v;
                        pgpu_glcm_chooser ch;
                        pgpu_glcm_knobs_t k;
                        memset(&v, 0, sizeof v);
                        v.k2 = k2s[vi];
                        k = variant_knobs(&v, &ch, small ? (size_t)(w + 48) * 11 : 0, small ? 64 : 0);
                        memset(got, 0xab, per * 4);
                        ok(pgpu_glcm_counts(g, &k, got, &im, 1, L, off, (size_t)G, 0), "pgpu_glcm_counts");
                        snprintf(what, sizeof what, "offsets %dx%d L=%d G=%d K2=%d small slots %d", w, h, L, G,
                                 k2s[vi], small);
                        same(got, ref, per, what);
                    }
                free_levels(q, (int)si % 2);
                free(ref);
                free(got);
            }
}

/* Masks at L = 32 under variants 6, 7, 8 (the flagged instances for 2..32
 * offsets, k_count3's for one), resident and streamed with default and tiny
 * slots; blob, speckle, all-inside and all-outside masks. Where a variant
 * has no flagged instance (4 with several offsets: k_count2; 5 with one:
 * k_count3 at 768 threads, and k_count2 with several; 3) the driver counts the sentinel level (33
 * levels): checked through levels_counted, with the same counts. */
static void validate_masks(patina_gpu_t *g, int quick)
{
    static const int gs[] = {1, 2, 5, 8, 32};
    static const int sizes[][2] = {{1, 1}, {17, 9}, {100, 37}, {333, 171}, {1031, 97}};
    static const int k2s[] = {6, 7, 8, 4, 5, 3};
    for (size_t gi = 0; gi < sizeof gs / sizeof gs[0]; gi++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            const int G = gs[gi], L = 32, w = sizes[si][0], h = sizes[si][1];
            const size_t per = (size_t)G * L * L, np = (size_t)w * h;
            const int mkind = (int)((gi + si) % 4);
            patina_glcm_offset_t off[32];
            uint8_t *q, *mask;
            uint32_t *ref, *got;
            patina_gpu_grey_t im;
            char what[200];
            if (quick && si != 3) continue;
            q = random_levels(w, h, (size_t)w, L, (int)(si + gi) % 3, 0);
            mask = (uint8_t *)malloc(np);
            ref = (uint32_t *)malloc(per * 4);
            got = (uint32_t *)malloc(per * 4);
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++)
                    mask[(size_t)y * w + x] = mkind == 0   ? ((x / 13 + y / 7) % 3 != 0)
                                              : mkind == 1 ? (rnd(4) != 0)
                                                           : mkind == 2;
            lab_offsets(off, G, w, h);
            if (G == 1 && si == 3) off[0].dx = w + 1;
            im = grey_of(q, w, h, (size_t)w, mask);
            snprintf(what, sizeof what, "masks %dx%d G=%d mask %d", w, h, G, mkind);
            reference(g, ref, &im, L, off, (size_t)G, 0, what);
            for (size_t vi = 0; vi < sizeof k2s / sizeof k2s[0]; vi++) {
                lab_variant v;
                pgpu_glcm_chooser ch;
                pgpu_glcm_knobs_t k;
                pgpu_glcm_timing_t t;
                const int sentinel = k2s[vi] == 3 || k2s[vi] == 5 || (k2s[vi] == 4 && G >= 2);
                memset(&v, 0, sizeof v);
                v.k2 = k2s[vi];
                k = variant_knobs(&v, &ch, 0, 0);
                memset(&t, 0, sizeof t);
                t.reps = 1;
                memset(got, 0xab, per * 4);
                ok(pgpu_glcm_time(g, &k, &t, got, &im, 1, L, off, (size_t)G, 0), "pgpu_glcm_time");
                snprintf(what, sizeof what, "masks resident %dx%d G=%d mask %d K2=%d (%s, %d levels)", w, h, G, mkind,
                         k2s[vi], t.kernel, t.levels_counted);
                same(got, ref, per, what);
                g_checks++;
                if ((t.levels_counted == 33) != sentinel) {
                    printf("MISMATCH %s: the sentinel level expected %d\n", what, sentinel);
                    g_fail++;
                }
                for (int small = 0; small < 2; small++) {
                    k = variant_knobs(&v, &ch, small ? (size_t)(w + 48) * 11 : 0, small ? 64 : 0);
                    memset(got, 0xab, per * 4);
                    ok(pgpu_glcm_counts(g, &k, got, &im, 1, L, off, (size_t)G, 0), "pgpu_glcm_counts");
                    snprintf(what, sizeof what, "masks streamed %dx%d G=%d mask %d K2=%d small %d", w, h, G, mkind,
                             k2s[vi], small);
                    same(got, ref, per, what);
                }
            }
            free(q);
            free(mask);
            free(ref);
            free(got);
        }
}

/* The paper's schemes give the reference's counts (Scheme 3 with tiles
 * that split pairs at their borders). */
static void validate_schemes(patina_gpu_t *g)
{
    for (int c = 0; c < 4; c++) {
        const int L = c == 1 ? 8 : 32, w = c == 3 ? 777 : 256 + 13 * c, h = c == 3 ? 301 : 200 + 7 * c;
        const size_t stride = (size_t)w + (size_t)c, per = 5 * (size_t)L * L;
        patina_glcm_offset_t off[5] = {{0, 1}, {1, 1}, {4, -4}, {-2, 3}, {0, -7}};
        uint8_t *q = random_levels(w, h, stride, L, c % 3, c % 2);
        uint32_t *ref = (uint32_t *)malloc(per * 4), *got = (uint32_t *)malloc(per * 4);
        patina_gpu_grey_t im = grey_of(q, w, h, stride, NULL);
        char what[200];
        for (int sym = 0; sym < 2; sym++) {
            snprintf(what, sizeof what, "schemes case %d (%dx%d) L=%d sym=%d", c, w, h, L, sym);
            reference(g, ref, &im, L, off, 5, sym, what);
            for (int scheme = 1; scheme <= 3; scheme++) {
                scheme_run r;
                memset(&r, 0, sizeof r);
                r.scheme = scheme;
                r.reps = 1;
                r.tiles = 7;
                memset(got, 0xcd, per * 4);
                ok(run_scheme(g, &r, got, q, w, h, stride, L, off, 5, sym), "scheme");
                snprintf(what, sizeof what, "scheme %d case %d (%dx%d) L=%d sym=%d", scheme, c, w, h, L, sym);
                same(got, ref, per, what);
            }
        }
        free_levels(q, c % 2);
        free(ref);
        free(got);
    }
}

/* ------------------------------------------------------------ timing */

static const struct {
    int d, angle;
} configs[4] = {{1, 0}, {1, 45}, {4, 0}, {4, 45}};

/* The production kernel (or a variant) on a resident image: ms per request
 * back to back (and one alone in *single). */
static double time_kernel(patina_gpu_t *g, const lab_variant *v, uint32_t *counts, const uint8_t *q, int n, int L,
                          const patina_glcm_offset_t *off, size_t noff, const uint8_t *mask, int reps,
                          pgpu_glcm_timing_t *out)
{
    pgpu_glcm_chooser ch;
    const pgpu_glcm_knobs_t k = variant_knobs(v, &ch, 0, 0);
    const patina_gpu_grey_t im = grey_of(q, n, n, (size_t)n, mask);
    pgpu_glcm_timing_t t;
    memset(&t, 0, sizeof t);
    t.reps = reps;
    if (pgpu_glcm_time(g, &k, &t, counts, &im, 1, L, off, noff, 0) != PATINA_OK) {
        printf("  (timing failed: %s)\n", patina_last_error());
        g_fail++;
        return -1;
    }
    if (out) *out = t;
    return t.ms_stream;
}

static double scheme_ms(patina_gpu_t *g, int scheme, uint32_t *counts, const uint8_t *q, int n, int L,
                        const patina_glcm_offset_t *off, size_t noff, int reps, int tiles, scheme_run *out)
{
    scheme_run r;
    memset(&r, 0, sizeof r);
    r.scheme = scheme;
    r.reps = reps;
    r.tiles = tiles;
    if (run_scheme(g, &r, counts, q, n, n, (size_t)n, L, off, noff, 0) != PATINA_OK) {
        printf("  (scheme %d failed: %s)\n", scheme, patina_last_error());
        return -1;
    }
    if (out) *out = r;
    return r.ms;
}

static void tables(patina_gpu_t *g, int quick, int max_size)
{
    static const int sizes[] = {1024, 4096, 8192, 16384};
    lab_variant prod;
    double d2d = 0, h2d = 0;
    parse_variant(&prod, "-");
    if (patina_gpu__bandwidth(g, 1, (size_t)256 << 20, 5, &d2d) != PATINA_OK ||
        patina_gpu__bandwidth(g, 0, (size_t)256 << 20, 5, &h2d) != PATINA_OK)
        printf("bandwidth probe failed: %s\n", patina_last_error());
    printf("\nmeasured: device copy %.0f GB/s (read + write), pinned host-to-device %.1f GB/s (best of 5)\n", d2d, h2d);

    { /* Table II: Scheme 1 on 1024^2 (the paper: GTX 1050 Ti, 0.27 - 0.96 ms) */
        const int n = 1024;
        uint8_t *v = (uint8_t *)malloc((size_t)n * n), *q = (uint8_t *)malloc((size_t)n * n);
        uint32_t *a = (uint32_t *)malloc(32 * 32 * 4), *b = (uint32_t *)malloc(32 * 32 * 4);
        printf("\n### Table II: Scheme 1 (global atomics), %d², kernel ms (median of 20)\n\n", n);
        printf("| image | L | d=1, 0° | d=1, 45° | d=4, 0° | d=4, 45° |\n|---|---|---|---|---|---|\n");
        for (int kind = 0; kind < 2; kind++) {
            bench_glcm_image(v, n, kind);
            for (int L = 8; L <= 32; L *= 4) {
                patina_glcm_quantize(q, v, (size_t)n * n, L, PATINA_GLCM_QUANT_UNIFORM);
                printf("| %s | %d |", bench_glcm_kind_name(kind), L);
                for (int ci = 0; ci < 4; ci++) {
                    const patina_glcm_offset_t o = patina_glcm_offset(configs[ci].d, configs[ci].angle);
                    const double ms = scheme_ms(g, 1, b, q, n, L, &o, 1, 20, 0, NULL);
                    patina_glcm_counts(a, q, n, n, (size_t)n, NULL, 0, L, &o, 1, 0, 0);
                    same(b, a, (size_t)L * L, "scheme 1");
                    printf(" %.3f |", ms);
                }
                printf("\n");
            }
        }
        free(v);
        free(q);
        free(a);
        free(b);
    }

    printf("\n### Table III: kernel ms (median), image resident: Schemes 1, 2 and the production kernel "
           "(launches back to back)\n\n");
    printf("| size | image | L | d | angle | Scheme 1 | Scheme 2 | production | production kernel |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (size_t si = 0; si < 4; si++) {
        const int n = sizes[si];
        const size_t N = (size_t)n * n;
        const int reps = n <= 4096 ? 20 : 5;
        uint8_t *v, *q;
        uint32_t *a, *b;
        if (n > max_size || (quick && n > 4096)) break;
        v = (uint8_t *)patina_gpu_host_alloc(N);
        q = (uint8_t *)patina_gpu_host_alloc(N);
        a = (uint32_t *)malloc(32 * 32 * 4);
        b = (uint32_t *)malloc(2 * 32 * 32 * 4);
        if (!v || !q) {
            printf("  (no pinned memory for %d²)\n", n);
            patina_gpu_host_free(v);
            patina_gpu_host_free(q);
            free(a);
            free(b);
            break;
        }
        for (int kind = 0; kind < 2; kind++) {
            bench_glcm_image(v, n, kind);
            for (int L = 8; L <= 32; L *= 4) {
                patina_glcm_quantize(q, v, N, L, PATINA_GLCM_QUANT_UNIFORM);
                for (int ci = 0; ci < 4; ci++) {
                    const patina_glcm_offset_t o = patina_glcm_offset(configs[ci].d, configs[ci].angle);
                    const double s1 = n <= 4096 || ci == 0 ? scheme_ms(g, 1, b, q, n, L, &o, 1, reps, 0, NULL) : -1;
                    const double s2 = scheme_ms(g, 2, b, q, n, L, &o, 1, reps, 0, NULL);
                    pgpu_glcm_timing_t t;
                    const double pr = time_kernel(g, &prod, b + 32 * 32, q, n, L, &o, 1, NULL, reps, &t);
                    same(b, b + 32 * 32, (size_t)L * L, "scheme 2 vs production");
                    if (n <= 4096 || ci == 0) {
                        patina_glcm_counts(a, q, n, n, (size_t)n, NULL, 0, L, &o, 1, 0, 0);
                        same(b + 32 * 32, a, (size_t)L * L, "production vs CPU");
                    }
                    printf("| %d² | %s | %d | %d | %d | ", n, bench_glcm_kind_name(kind), L, configs[ci].d,
                           configs[ci].angle);
                    if (s1 >= 0)
                        printf("%.3f", s1);
                    else
                        printf("-");
                    printf(" | %.3f | %.4f | %s |\n", s2, pr, t.kernel);
                }
            }
        }
        patina_gpu_host_free(v);
        patina_gpu_host_free(q);
        free(a);
        free(b);
    }

    printf("\n### Table 3: transfer and compute (d=1, 0°, L=32, slow image), ms\n\n");
    printf("| size | Scheme 3 copies alone | Scheme 3 kernels alone | Scheme 3 overlapped (K=8) | "
           "production from pinned host | PCIe bound (bytes / H2D GB/s) | production / bound |\n");
    printf("|---|---|---|---|---|---|---|\n");
    for (size_t si = 0; si < 4; si++) {
        const int n = sizes[si];
        const size_t N = (size_t)n * n;
        const int reps = n <= 4096 ? 10 : 3;
        const patina_glcm_offset_t o = {0, 1};
        uint8_t *v, *q;
        uint32_t a[32 * 32], b[32 * 32];
        scheme_run r3;
        double t5[10], p5, bound;
        patina_gpu_grey_t im;
        if (n > max_size || (quick && n > 4096)) break;
        v = (uint8_t *)patina_gpu_host_alloc(N);
        q = (uint8_t *)patina_gpu_host_alloc(N);
        if (!v || !q) {
            patina_gpu_host_free(v);
            patina_gpu_host_free(q);
            break;
        }
        bench_glcm_image(v, n, 0);
        patina_glcm_quantize(q, v, N, 32, PATINA_GLCM_QUANT_UNIFORM);
        scheme_ms(g, 3, a, q, n, 32, &o, 1, reps, 8, &r3);
        im = grey_of(q, n, n, (size_t)n, NULL);
        for (int rep = -1; rep < reps; rep++) { /* the production path, end to end */
            const double t0 = patina_now();
            ok(patina_gpu_glcm_counts(g, b, &im, 1, 32, &o, 1, 0), "production from pinned memory");
            if (rep >= 0) t5[rep] = (patina_now() - t0) * 1e3;
        }
        p5 = bench_median(t5, reps);
        same(a, b, 32 * 32, "scheme 3 vs production streamed");
        bound = h2d > 0 ? (double)N / (h2d * 1e9) * 1e3 : 0;
        printf("| %d² | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f |\n", n, r3.h2d_ms, r3.kernel_ms, r3.ms, p5, bound,
               bound > 0 ? p5 / bound : 0);
        patina_gpu_host_free(v);
        patina_gpu_host_free(q);
    }

    /* A mask, one offset, L = 32: bit 7 (k_count3's flagged instance, the
     * library) against the sentinel level (33 levels, k_count2: variant 3,
     * which has no flagged instance). */
    {
        const int n = max_size < 16384 ? max_size : 16384;
        const size_t N = (size_t)n * n;
        uint8_t *v = (uint8_t *)malloc(N), *q = (uint8_t *)patina_gpu_host_alloc(N), *mask = (uint8_t *)malloc(N);
        uint32_t a[32 * 32], b[32 * 32], r[32 * 32];
        lab_variant k3;
        parse_variant(&k3, "K2=3");
        printf("\n### A mask (disk over 64%% of the pixels), one offset, L = 32, %d², drastic image: kernel ms\n\n", n);
        printf("| offset | bit 7 (library) | sentinel level (33 levels) |\n|---|---|---|\n");
        if (v && q && mask && !quick) {
            bench_glcm_image(v, n, 1);
            patina_glcm_quantize(q, v, N, 32, PATINA_GLCM_QUANT_UNIFORM);
            for (int y = 0; y < n; y++)
                for (int x = 0; x < n; x++) {
                    const double dy = y - (n - 1) / 2.0, dx = x - (n - 1) / 2.0, rad = 0.45 * n;
                    mask[(size_t)y * n + x] = dy * dy + dx * dx <= rad * rad;
                }
            for (int ci = 0; ci < 4; ci += 3) {
                const patina_glcm_offset_t o = patina_glcm_offset(configs[ci].d, configs[ci].angle);
                pgpu_glcm_timing_t t1, t2;
                const double m1 = time_kernel(g, &prod, a, q, n, 32, &o, 1, mask, 5, &t1);
                const double m2 = time_kernel(g, &k3, b, q, n, 32, &o, 1, mask, 5, &t2);
                patina_glcm_counts(r, q, n, n, (size_t)n, mask, (size_t)n, 32, &o, 1, 0, 0);
                same(a, r, 32 * 32, "masked, bit 7 vs CPU");
                same(b, r, 32 * 32, "masked, sentinel vs CPU");
                printf("| d=%d, %d° | %.4f (%s) | %.4f (%s, %d levels) |\n", configs[ci].d, configs[ci].angle, m1,
                       t1.kernel, m2, t2.kernel, t2.levels_counted);
            }
        }
        free(v);
        patina_gpu_host_free(q);
        free(mask);
    }
}

/* Focused mode: sets 1 = (d=1, 0°), 2 = (d=1, 45°), 3 = (d=4, 0°), 8 = d =
 * 1, 4 x 0/45/90/135° in one pass. */
static int parse_list(const char *s, int *v, int max)
{
    int n = 0;
    while (s && *s && n < max) {
        v[n++] = atoi(s);
        s = strchr(s, ',');
        if (s) s++;
    }
    return n;
}

static void focus(patina_gpu_t *g, const char *sizes_s, const char *kinds_s, const char *levels_s,
                  const char *sets_s, int reps_arg, const char *variants)
{
    int sizes[8], kinds[2], levels[8], sets[8], nv = 0;
    const int ns = parse_list(sizes_s, sizes, 8), nk = parse_list(kinds_s, kinds, 2);
    const int nl = parse_list(levels_s, levels, 8), nt = parse_list(sets_s, sets, 8);
    lab_variant vs[16];
    char vbuf[1024], *save = NULL;
    snprintf(vbuf, sizeof vbuf, "%s", variants);
    for (char *tok = strtok_r(vbuf, ";", &save); tok && nv < 16; tok = strtok_r(NULL, ";", &save))
        if (parse_variant(&vs[nv], tok) == 0)
            nv++;
        else
            printf("(variant '%s' not understood)\n", tok);
    printf("\n## Focus: counting kernel ms (median), image resident: launches back to back / one launch alone\n\n"
           "| size | image | L | offsets |");
    for (int v = 0; v < nv; v++) printf(" %s |", vs[v].text);
    printf("\n|---|---|---|---|");
    for (int v = 0; v < nv; v++) printf("---|");
    printf("\n");
    for (int si = 0; si < ns; si++) {
        const int n = sizes[si];
        const size_t N = (size_t)n * n;
        const int reps = reps_arg > 0 ? reps_arg : n <= 4096 ? 20 : 7;
        uint8_t *v = (uint8_t *)malloc(N), *q = (uint8_t *)patina_gpu_host_alloc(N);
        uint32_t *ref = (uint32_t *)malloc(8 * 256 * 256 * 4), *got = (uint32_t *)malloc(8 * 256 * 256 * 4);
        if (!v || !q || !ref || !got) {
            printf("  (no memory for %d²)\n", n);
            break;
        }
        for (int ki = 0; ki < nk; ki++) {
            bench_glcm_image(v, n, kinds[ki]);
            for (int li = 0; li < nl; li++) {
                const int L = levels[li];
                patina_glcm_quantize(q, v, N, L, PATINA_GLCM_QUANT_UNIFORM);
                for (int ti = 0; ti < nt; ti++) {
                    patina_glcm_offset_t off[8];
                    const size_t noff = sets[ti] == 8 ? 8 : 1;
                    if (sets[ti] == 8)
                        for (int d = 0; d < 2; d++)
                            for (int a = 0; a < 4; a++) off[d * 4 + a] = patina_glcm_offset(d ? 4 : 1, 45.0 * a);
                    else
                        off[0] = patina_glcm_offset(sets[ti] == 3 ? 4 : 1, sets[ti] == 2 ? 45 : 0);
                    patina_glcm_counts(ref, q, n, n, (size_t)n, NULL, 0, L, off, noff, 0, 0);
                    printf("| %d² | %s | %d | %s |", n, bench_glcm_kind_name(kinds[ki]), L,
                           sets[ti] == 8   ? "8 (d=1,4 x 4 angles)"
                           : sets[ti] == 2 ? "d=1 45°"
                           : sets[ti] == 3 ? "d=4 0°"
                                           : "d=1 0°");
                    for (int vi = 0; vi < nv; vi++) {
                        pgpu_glcm_timing_t t;
                        char what[160];
                        memset(got, 0xab, noff * (size_t)L * L * 4);
                        const double ms = time_kernel(g, &vs[vi], got, q, n, L, off, noff, NULL, reps, &t);
                        snprintf(what, sizeof what, "focus %d %s L=%d set=%d variant %s", n,
                                 bench_glcm_kind_name(kinds[ki]), L, sets[ti], vs[vi].text);
                        same(got, ref, noff * (size_t)L * L, what);
                        printf(" %.4f / %.4f (%s, C=%d, %d thr) |", ms, t.ms_single, t.kernel, t.copies, t.threads);
                        fflush(stdout);
                    }
                    printf("\n");
                }
            }
        }
        free(v);
        patina_gpu_host_free(q);
        free(ref);
        free(got);
    }
}

int main(int argc, char **argv)
{
    int validate = 0, quick = 0, do_focus = 0, reps = 0, max_size = 16384;
    const char *sizes = "1024,4096,16384", *kinds = "0,1", *levels = "8,32", *sets = "1,2,8", *variants = "-";
    patina_gpu_t *g = NULL;
    char desc[256];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--validate")) validate = 1;
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--focus")) do_focus = 1;
        else if (!strcmp(argv[i], "--max-size") && i + 1 < argc) max_size = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) sizes = argv[++i];
        else if (!strcmp(argv[i], "--kinds") && i + 1 < argc) kinds = argv[++i];
        else if (!strcmp(argv[i], "--levels") && i + 1 < argc) levels = argv[++i];
        else if (!strcmp(argv[i], "--sets") && i + 1 < argc) sets = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--variants") && i + 1 < argc) variants = argv[++i];
        else {
            fprintf(stderr, "usage: lab_glcm [--validate] [--quick] [--max-size N] | --focus [--sizes A,B] "
                            "[--kinds 0,1] [--levels 8,32] [--sets 1,2,8] [--reps R] "
                            "[--variants 'K2=4;K2=6,SPLIT=2,TASKPX=65536;-']\n");
            return 2;
        }
    }
    if (getenv("PATINA_TEST_QUICK") && atoi(getenv("PATINA_TEST_QUICK")) > 0) quick = 1;
    if (patina_gpu_count() == 0) {
        fprintf(stderr, "SKIPPED: lab_glcm: no usable CUDA GPU on this machine (%s)\n", patina_build_info());
        return 77;
    }
    if (patina_gpu_open(&g, 0, 0) != PATINA_OK) {
        fprintf(stderr, "lab_glcm: %s\n", patina_last_error());
        return 1;
    }
    patina_gpu_describe(0, desc, sizeof desc);
    printf("# lab_glcm%s (%s; %s)\n", validate ? " --validate" : do_focus ? " --focus" : "", desc, patina_build_info());
    if (validate) {
        validate_variants(g, quick);
        validate_offsets(g, quick);
        validate_masks(g, quick);
        validate_schemes(g);
        printf("%d checks, %d failed\n", g_checks, g_fail);
    } else if (do_focus) {
        focus(g, sizes, kinds, levels, sets, reps, variants);
    } else {
        tables(g, quick, max_size);
    }
    patina_gpu_close(g);
    if (g_fail) printf("FAILED: some GPU counts differ from the reference\n");
    return g_fail ? 1 : 0;
}
