/* Exact JPEG decoding on the GPU (gpu.h: patina_gpu_jpegx_*): pixels
 * byte-identical to the CPU path's. Entropy decoding: for baseline Huffman
 * files (src/image/jpeg_huff.h) on the device (src/gpu/jpeg_huff.cu: the CPU
 * workers only read the header and destuff the scan into pinned staging,
 * and the compressed bytes cross PCIe), for the others (and with
 * gpu_entropy off) by libjpeg-turbo on the CPU workers (src/image/jpeg_exact.c)
 * straight into pinned staging; the device computes what follows with the
 * shared formulas of src/algo/jpeg_exact_core.h (the C reference is
 * patina__jpegx_pixels), many images per launch:
 *
 *   jpeg_huff.cu      the Huffman-decoded images' coefficients, flagging the
 *                     images with anything libjpeg could warn about
 *   jx_idct_kernel    eight threads per 8x8 block of every image of a round:
 *                     dequantise + islow IDCT into the component planes (a
 *                     column each in the first pass, a row each in the
 *                     second, through shared memory); a block outside the
 *                     exact range flags its image
 *   jx_colour_kernel  one thread per four output pixels of a row: upsampling
 *                     of each component (fancy triangle filters) + colour
 *                     conversion into the image's RGB in the decoder's arena
 *
 * Rounds. The coefficients of one round fill a pinned staging buffer of
 * stage_bytes (from the context's budget); two buffers alternate, so the
 * workers entropy-decode round r + 1 while the device works on round r. Each
 * worker sends the coefficients of the image it has just decoded to the
 * device itself (the upload stream), so the copies of a round run under the
 * entropy decoding of its other images; the launch then waits for them on the
 * device, not on the host. The decoded RGB stays on the device (the arena,
 * sized to the call's images) for the families that read device images; only
 * coefficients cross PCIe.
 *
 * Calls. patina_gpu_jpegx_submit returns once the last round is launched;
 * patina_gpu_jpegx_finish waits for it, so a caller can do other work (the
 * pipeline: read the next window) while the device finishes. Flagged images
 * (crafted coefficients) and files not taken go back to the caller as
 * PATINA_E_FORMAT: it decodes them with libjpeg-turbo. */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "algo/jpeg_exact_core.h"
#include "gpu/context.h"
#include "gpu/gpu.h"
#include "gpu/jpeg_huff.h"
#include "image/jpeg_exact.h"
#include "image/jpeg_huff.h"

#define JXG_MIB (1024.0 * 1024.0)
#define JXG_IDCT_THREADS 256                     /* 8 per block */
#define JXG_BLOCKS_PER_CTA (JXG_IDCT_THREADS / 8)
#define JXG_WS_STRIDE 72                         /* words per block of the IDCT's workspace: blocks 8 banks apart */
#define JXG_COLOUR_THREADS 256
#define JXG_QUAD 4                               /* output pixels of a colour thread */

/* One component plane of a round, as the kernels see it. */
typedef struct jxg_plane {
    unsigned long long first; /* its first block in the round's coefficient buffer */
    unsigned long long off;   /* its first byte in the plane buffer */
    int bw, bh, pitch, img;   /* blocks per row, block rows, bytes per row (8 bw), image of the round */
    int dw, dh, up, rh, rv, pad;
    uint16_t q[64];
} jxg_plane_t;

/* One image of a round. */
typedef struct jxg_img {
    unsigned long long first_q;  /* its first group of JXG_QUAD pixels of a row in the round's */
    uint8_t *out;                /* device RGB, `stride` bytes per row (a multiple of 128) */
    unsigned long long stride;
    int width, height, cs, adobe, ncomp, plane0; /* planes plane0 .. plane0 + ncomp - 1 */
    unsigned qpr;                /* groups per row: ceil(width / JXG_QUAD) */
    int pad;
} jxg_img_t;

/* ------------------------------------------------------------- kernels */

/* The last plane (image) whose first block (pixel) is <= v: planes and
 * images are sorted by it. */
static __device__ __forceinline__ int jxg_find_plane(const jxg_plane_t *a, int n, unsigned long long v)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (a[mid].first <= v) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static __device__ __forceinline__ int jxg_find_img(const jxg_img_t *a, int n, unsigned long long v)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (a[mid].first_q <= v) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* coef: (nblocks, 64) s16 of the round; planes: (nplanes) sorted by first.
 * Block gb is done by the 8 threads 8 (gb - b0) .. + 7 of its CTA (lane j:
 * column j, then row j): jx_idct's passes (src/algo/jpeg_exact_core.h, the
 * same jx_idct_1d, descaling and range checks), split over the threads, so
 * the planes get jx_idct's samples and a block leaves the exact range here
 * exactly when it does there. */
__global__ void __launch_bounds__(JXG_IDCT_THREADS)
jx_idct_kernel(const int16_t *__restrict__ coef, unsigned long long nblocks, const jxg_plane_t *__restrict__ planes,
               int nplanes, uint8_t *__restrict__ pbuf, unsigned *__restrict__ flags)
{
    __shared__ __align__(16) int32_t ws[JXG_BLOCKS_PER_CTA * JXG_WS_STRIDE];
    const int t = threadIdx.x, lb = t >> 3, j = t & 7;
    const unsigned long long gb = (unsigned long long)blockIdx.x * JXG_BLOCKS_PER_CTA + (unsigned long long)lb;
    int32_t *w = ws + lb * JXG_WS_STRIDE;
    const jxg_plane_t *p = NULL;
    unsigned long long local = 0;
    int ok = 1, live = 0;
    if (gb < nblocks) {
        p = planes + jxg_find_plane(planes, nplanes, gb);
        local = gb - p->first; /* wraps when gb < p->first */
        live = gb >= p->first && local < (unsigned long long)p->bw * (unsigned long long)p->bh; /* else a hole:
                                                          bytes reserved by a file refused afterwards */
    }
    if (live) { /* pass 1: column j, results scaled by 2^2 */
        const int16_t *c = coef + gb * 64;
        int32_t z[8], o[8];
        int ac = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            int32_t v = (int32_t)c[k * 8 + j] * (int32_t)p->q[k * 8 + j];
            ok &= v <= JX_SAFE && v >= -JX_SAFE;
            z[k] = v;
            ac |= k > 0 && v != 0;
        }
        if (!ok) /* flagged: zeros keep the sums below in 32 bits (the other lanes' too) */
#pragma unroll
            for (int k = 0; k < 8; k++) z[k] = 0;
        if (!ac) {
            ok &= z[0] * 4 <= JX_SAFE && z[0] * 4 >= -JX_SAFE;
#pragma unroll
            for (int k = 0; k < 8; k++) w[k * 8 + j] = z[0] * 4;
        } else {
            jx_idct_1d(z, 1, o);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                int32_t v = (o[k] + (1 << 10)) >> 11;
                int in = v <= JX_SAFE && v >= -JX_SAFE;
                ok &= in;
                w[k * 8 + j] = in ? v : 0;
            }
        }
    }
    __syncwarp();
    if (live) { /* pass 2: row j */
        int32_t r[8], o[8];
        const int4 *wr = (const int4 *)(w + j * 8);
        int4 a = wr[0], b = wr[1];
        uint8_t px[8];
        r[0] = a.x, r[1] = a.y, r[2] = a.z, r[3] = a.w, r[4] = b.x, r[5] = b.y, r[6] = b.z, r[7] = b.w;
        jx_idct_1d(r, 1, o);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            int32_t v = (o[k] + (1 << 17)) >> 18;
            ok &= v <= 511 && v >= -512;
            px[k] = jx_range(v);
        }
        {
            const int bx = (int)(local % (unsigned long long)p->bw), by = (int)(local / (unsigned long long)p->bw);
            uint8_t *dst = pbuf + p->off + ((unsigned long long)by * 8 + (unsigned)j) * (unsigned long long)p->pitch +
                           (unsigned)bx * 8;
            uint2 q;
            q.x = (unsigned)px[0] | (unsigned)px[1] << 8 | (unsigned)px[2] << 16 | (unsigned)px[3] << 24;
            q.y = (unsigned)px[4] | (unsigned)px[5] << 8 | (unsigned)px[6] << 16 | (unsigned)px[7] << 24;
            *(uint2 *)dst = q;
        }
        if (!ok) atomicOr(&flags[p->img], 1u); /* its samples are then unspecified */
    }
}

/* A component's sample at (x, y), or 0 for a component the image lacks. */
static __device__ __forceinline__ int jxg_sample(const jxg_img_t *im, const jxg_plane_t *planes,
                                                 const uint8_t *pbuf, int c, int x, int y)
{
    if (c >= im->ncomp) return 0;
    const jxg_plane_t *p = planes + im->plane0 + c;
    return jx_upsample(pbuf + p->off, p->pitch, p->dw, p->dh, p->up, p->rh, p->rv, x, y);
}

/* One thread per JXG_QUAD pixels of a row of the round (grid-stride):
 * jx_upsample and jx_pixel of each, stored as whole words when all four are
 * in the row (the row's first byte and 3 JXG_QUAD x are multiples of 4). */
__global__ void __launch_bounds__(JXG_COLOUR_THREADS)
jx_colour_kernel(const jxg_img_t *__restrict__ imgs, int nimgs, const jxg_plane_t *__restrict__ planes,
                 const uint8_t *__restrict__ pbuf, const unsigned *__restrict__ flags, unsigned long long nq)
{
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < nq;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const int m = jxg_find_img(imgs, nimgs, i);
        const jxg_img_t *im = imgs + m;
        const unsigned local = (unsigned)(i - im->first_q); /* < height x qpr < 2^32 (the reader's limits) */
        const int y = (int)(local / im->qpr), x0 = (int)(local - (unsigned)y * im->qpr) * JXG_QUAD;
        const int n = im->width - x0 < JXG_QUAD ? im->width - x0 : JXG_QUAD;
        uint32_t wd[3] = {0, 0, 0}; /* the JXG_QUAD pixels' bytes, little-endian (constant indices: registers) */
        uint8_t *o = im->out + (unsigned long long)y * im->stride + 3u * (unsigned)x0;
        if (flags[m]) continue;
#pragma unroll
        for (int k = 0; k < JXG_QUAD; k++) {
            if (k < n) {
                const int x = x0 + k;
                int smp[4];
                uint8_t rgb[3];
                smp[0] = jxg_sample(im, planes, pbuf, 0, x, y);
                smp[1] = jxg_sample(im, planes, pbuf, 1, x, y);
                smp[2] = jxg_sample(im, planes, pbuf, 2, x, y);
                smp[3] = jxg_sample(im, planes, pbuf, 3, x, y);
                jx_pixel(im->cs, im->adobe, smp, rgb);
#pragma unroll
                for (int e = 0; e < 3; e++) wd[(3 * k + e) >> 2] |= (uint32_t)rgb[e] << (8 * ((3 * k + e) & 3));
            }
        }
        if (n == JXG_QUAD) {
            uint32_t *o4 = (uint32_t *)o;
            o4[0] = wd[0];
            o4[1] = wd[1];
            o4[2] = wd[2];
        } else { /* the row's last pixels */
            for (int k = 0; k < 3 * n; k++)
                o[k] = (uint8_t)((k < 4 ? wd[0] : k < 8 ? wd[1] : wd[2]) >> (8 * (k & 3)));
        }
    }
}

/* ------------------------------------------------------------- decoder */

enum { JXG_PENDING = 0, JXG_STAGED, JXG_DONE, JXG_REFUSED };
enum { JXG_CPU_ROUNDS = 32 }; /* rounds on the CPU workers after a round of too many JH_E_SLOW */

typedef struct jxg_item {
    jx_image_t im;
    int state;
    int buf;               /* JXG_STAGED: the staging buffer */
    size_t off;            /* JXG_STAGED: first coefficient (s16 units) in it */
    int huff;              /* JXG_STAGED: entropy decoding on the device, from jimg */
    jh_img_t jimg;         /* its region in h_huff[buf] (offsets from the buffer's start) */
} jxg_item_t;

struct patina_jpegx_gpu {
    patina_gpu_t *g;
    cudaStream_t stream;           /* tables, kernels, flags */
    cudaStream_t upload;           /* the workers' coefficient copies */
    cudaEvent_t copied[2];         /* the copies of buffer b's round, recorded at its launch */
    size_t stage_bytes;            /* coefficient bytes of one round */
    int16_t *h_coef[2], *d_coef[2];/* (stage_bytes) pinned, device; buffer 1 once a call needs two rounds */
    uint8_t *d_pbuf;               /* (stage_bytes / 2) component planes of one round */
    size_t desc_cap;               /* images per round the descriptor buffers hold */
    jxg_img_t *h_img[2], *d_img[2];
    jxg_plane_t *h_plane[2], *d_plane[2];
    unsigned *h_flags[2], *d_flags[2];
    int *round_items[2];           /* item index of each image of the round (host) */
    cudaEvent_t done[2];
    int inflight[2];               /* images of the round launched on buffer b, not yet collected */
    uint8_t *arena;                /* the RGB images of the last call */
    size_t arena_bytes;
    jxg_item_t *items;
    size_t items_cap;
    size_t open_n;                 /* images of the submitted call not finished yet (0: none) */
    patina_jpegx_times_t times;    /* since open */
    int gpu_entropy;               /* baseline Huffman files entropy-decoded on the device: 0 never, 1 always,
                                      2 (default) unless the last rounds came back slow (cpu_rounds) */
    int cpu_rounds;                /* rounds left with the entropy stage on the CPU workers (jxg_collect) */
    uint64_t huff_min_px;          /* mode 2: images of fewer pixels are entropy-decoded on the CPU workers */
    uint32_t chunk_bits;           /* the Huffman kernels' chunks (0: by the call's size, jxg_chunk_bits) */
    size_t huff_bytes;             /* bytes of one round's staged scans */
    uint8_t *h_huff[2], *d_huff[2];/* (huff_bytes) pinned, device: the scans of buffer b's round */
    size_t huff_used[2];           /* bytes of h_huff[b] the round's workers reserved */
    jh_img_t *h_jimg[2], *d_jimg[2];/* (desc_cap) their images */
    jhg_scratch_t jscratch;        /* the Huffman kernels' state */
};

static size_t jxg_pitch(int w) { return ((size_t)w * 3 + 127) & ~(size_t)127; }

/* The decoder's memory comes straight from CUDA, not from the context's
 * tagged allocator: the indexing pipeline decodes the next window on its
 * producer thread while the main thread extracts on the same context, and
 * the allocator is not thread-safe. Its size is bounded all the same: the
 * staging from the budget, the arena by the caller's batch. */
static patina_status jxg_dev(void **p, size_t bytes, const char *tag)
{
    if (cudaMalloc(p, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        *p = NULL;
        return patina__fail(PATINA_E_NOMEM, "jpegx: cannot allocate %.1f MiB of device memory for %s",
                            (double)bytes / JXG_MIB, tag);
    }
    return PATINA_OK;
}

static patina_status jxg_pin(void **p, size_t bytes, const char *tag)
{
    if (cudaHostAlloc(p, bytes, cudaHostAllocDefault) != cudaSuccess) {
        (void)cudaGetLastError();
        *p = NULL;
        return patina__fail(PATINA_E_NOMEM, "jpegx: cannot allocate %.1f MiB of pinned memory for %s",
                            (double)bytes / JXG_MIB, tag);
    }
    return PATINA_OK;
}

#define JXG_FREE_DEV(p) (cudaFree(p), (p) = NULL)
#define JXG_FREE_PIN(p) (cudaFreeHost(p), (p) = NULL)

patina_status patina_gpu_jpegx_open(patina_jpegx_gpu_t **out, patina_gpu_t *g)
{
    patina_jpegx_gpu_t *d;
    *out = NULL;
    if (!g) return patina__fail(PATINA_E_UNAVAILABLE, "jpegx: no GPU context");
    PGPU_CU(cudaSetDevice(g->device));
    d = (patina_jpegx_gpu_t *)calloc(1, sizeof *d);
    if (!d) return patina__fail(PATINA_E_NOMEM, "jpegx: out of memory");
    d->g = g;
    if (cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaStreamCreateWithFlags(&d->upload, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&d->done[0], cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&d->done[1], cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&d->copied[0], cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&d->copied[1], cudaEventDisableTiming) != cudaSuccess) {
        (void)cudaGetLastError();
        patina_gpu_jpegx_close(d);
        return patina__fail(PATINA_E_GPU, "jpegx: cannot create a CUDA stream or event");
    }
    /* a round's coefficients (a 12 MP 4:2:0 photograph has 36 MB of them):
     * a 16th of the budget within 64..256 MiB, or a 64th up to 1 GiB where
     * that is more. Rounds of camera photographs are few images, and the
     * entropy kernels (a thread per 4096 bits) then leave most of a large
     * GPU idle: 1 GiB against 256 MiB on an H200, 288 photographs of
     * 1.3-4.1 MP, CEDD end to end 2,721 against 1,900 images/s (docs/images.md) */
    {
        size_t a = (size_t)(g->budget / 16), b = (size_t)(g->budget / 64);
        if (a < ((size_t)64 << 20)) a = (size_t)64 << 20;
        if (a > ((size_t)256 << 20)) a = (size_t)256 << 20;
        if (b > ((size_t)1024 << 20)) b = (size_t)1024 << 20;
        d->stage_bytes = a > b ? a : b;
    }
    /* compressed scans are 5-20x smaller than their coefficients */
    d->huff_bytes = d->stage_bytes / 4;
    d->gpu_entropy = 2;
    d->huff_min_px = PGPU_JPEGX_HUFF_MIN_PX;
    *out = d;
    return PATINA_OK;
}

static void jxg_free_desc(patina_jpegx_gpu_t *d)
{
    for (int b = 0; b < 2; b++) {
        JXG_FREE_PIN(d->h_img[b]);
        JXG_FREE_DEV(d->d_img[b]);
        JXG_FREE_PIN(d->h_plane[b]);
        JXG_FREE_DEV(d->d_plane[b]);
        JXG_FREE_PIN(d->h_flags[b]);
        JXG_FREE_DEV(d->d_flags[b]);
        JXG_FREE_PIN(d->h_jimg[b]);
        JXG_FREE_DEV(d->d_jimg[b]);
        free(d->round_items[b]);
        d->round_items[b] = NULL;
    }
    d->desc_cap = 0;
}

void patina_gpu_jpegx_close(patina_jpegx_gpu_t *d)
{
    if (!d) return;
    cudaSetDevice(d->g->device);
    if (d->upload) cudaStreamSynchronize(d->upload);
    if (d->stream) cudaStreamSynchronize(d->stream);
    jxg_free_desc(d);
    for (int b = 0; b < 2; b++) {
        JXG_FREE_PIN(d->h_coef[b]);
        JXG_FREE_DEV(d->d_coef[b]);
        JXG_FREE_PIN(d->h_huff[b]);
        JXG_FREE_DEV(d->d_huff[b]);
        if (d->done[b]) cudaEventDestroy(d->done[b]);
        if (d->copied[b]) cudaEventDestroy(d->copied[b]);
    }
    JXG_FREE_DEV(d->d_pbuf);
    JXG_FREE_DEV(d->arena);
    patina__jhg_free(&d->jscratch);
    if (d->upload) cudaStreamDestroy(d->upload);
    if (d->stream) cudaStreamDestroy(d->stream);
    free(d->items);
    free(d);
}

/* Staging buffer b (pinned and device; with gpu_entropy its scans' too),
 * made when a call first needs it: a call whose images fit in one round
 * uses buffer 0 only. */
static int jxg_has_buffer(const patina_jpegx_gpu_t *d, int b)
{
    return d->h_coef[b] && d->d_coef[b] && (!d->gpu_entropy || (d->h_huff[b] && d->d_huff[b]));
}

static patina_status jxg_stage_buffer(patina_jpegx_gpu_t *d, int b)
{
    if (!d->h_coef[b]) PATINA_TRY(jxg_pin((void **)&d->h_coef[b], d->stage_bytes, "jpegx coefficient staging"));
    if (!d->d_coef[b]) PATINA_TRY(jxg_dev((void **)&d->d_coef[b], d->stage_bytes, "jpegx coefficients"));
    if (d->gpu_entropy && !d->h_huff[b]) PATINA_TRY(jxg_pin((void **)&d->h_huff[b], d->huff_bytes, "jpegx scan staging"));
    if (d->gpu_entropy && !d->d_huff[b]) PATINA_TRY(jxg_dev((void **)&d->d_huff[b], d->huff_bytes, "jpegx scans"));
    return PATINA_OK;
}

/* Staging buffer 0, the plane buffer and descriptors for `n` images per round. */
static patina_status jxg_reserve(patina_jpegx_gpu_t *d, size_t n)
{
    PATINA_TRY(jxg_stage_buffer(d, 0));
    if (!d->d_pbuf) PATINA_TRY(jxg_dev((void **)&d->d_pbuf, d->stage_bytes / 2 + 64, "jpegx component planes"));
    if (n > d->desc_cap) {
        size_t cap = n < 64 ? 64 : n;
        jxg_free_desc(d);
        for (int b = 0; b < 2; b++) {
            PATINA_TRY(jxg_pin((void **)&d->h_img[b], cap * sizeof(jxg_img_t), "jpegx image table"));
            PATINA_TRY(jxg_dev((void **)&d->d_img[b], cap * sizeof(jxg_img_t), "jpegx image table"));
            PATINA_TRY(jxg_pin((void **)&d->h_plane[b], 4 * cap * sizeof(jxg_plane_t), "jpegx plane table"));
            PATINA_TRY(jxg_dev((void **)&d->d_plane[b], 4 * cap * sizeof(jxg_plane_t), "jpegx plane table"));
            PATINA_TRY(jxg_pin((void **)&d->h_flags[b], cap * sizeof(unsigned), "jpegx flags"));
            PATINA_TRY(jxg_dev((void **)&d->d_flags[b], cap * sizeof(unsigned), "jpegx flags"));
            PATINA_TRY(jxg_pin((void **)&d->h_jimg[b], cap * sizeof(jh_img_t), "jpegx scan table"));
            PATINA_TRY(jxg_dev((void **)&d->d_jimg[b], cap * sizeof(jh_img_t), "jpegx scan table"));
            d->round_items[b] = (int *)malloc(cap * sizeof(int));
            if (!d->round_items[b]) return patina__fail(PATINA_E_NOMEM, "jpegx: out of memory");
        }
        d->desc_cap = cap;
    }
    if (n > d->items_cap) {
        jxg_item_t *it = (jxg_item_t *)realloc(d->items, n * sizeof *it);
        if (!it) return patina__fail(PATINA_E_NOMEM, "jpegx: out of memory");
        d->items = it;
        d->items_cap = n;
    }
    return PATINA_OK;
}

/* Phase A of a round: the workers stage pending images into buffer `buf`. */
typedef struct jxg_stage_job {
    patina_jpegx_gpu_t *d;
    int buf;
    size_t used;                  /* bytes of the buffer reserved (atomic) */
    size_t hused;                 /* bytes of its scan buffer reserved (atomic) */
    const void *const *data;      /* JPEG streams (decode), or NULL */
    const size_t *size;
    const patina_image_t *want;   /* the sizes the caller expects */
    const jx_image_t *im;         /* already decoded images (pixels), or NULL */
    const int16_t *const *coef;
    int cuda_error;               /* a worker's copy failed: its cudaError_t (atomic; 0: none) */
    int huff;                     /* this round's baseline Huffman scans go to the device */
    uint32_t chunk_bits;          /* their chunks' size */
} jxg_stage_job_t;

/* Reserves `bytes` of a buffer of cap bytes whose *used are taken: the
 * offset, or (size_t)-1 when full. */
static size_t jxg_take_of(size_t *usedp, size_t cap, size_t bytes)
{
    size_t used = __atomic_load_n(usedp, __ATOMIC_RELAXED);
    for (;;) {
        if (bytes > cap - used) return (size_t)-1;
        if (__atomic_compare_exchange_n(usedp, &used, used + bytes, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            return used;
    }
}

static size_t jxg_take(jxg_stage_job_t *j, size_t bytes) { return jxg_take_of(&j->used, j->d->stage_bytes, bytes); }

/* Stages item it (reader r open, its coefficients' place reserved) for
 * entropy decoding on the device: its scan destuffed into the job's scan
 * buffer (jxg_launch sends the round's scans in one copy: a copy per file
 * from every worker serialised on the driver, ~16 us a file on an H200
 * host). 1 when staged; 0 when the Huffman decoder does not take the file
 * (or the round's scan buffer is full): libjpeg then reads it as before. */
static int jxg_stage_huff(jxg_stage_job_t *j, jxg_item_t *it, patina_jpegx_reader_t *r)
{
    jh_file_t *f = (jh_file_t *)malloc(sizeof *f);
    size_t bound, hoff, used = 0;
    int ok = 0;
    if (!f) return 0;
    if (patina__jpegx_huff(r, &it->im, f) == PATINA_OK) {
        f->sc.chunk_bits = j->chunk_bits;
        bound = (patina__jpegh_region_bound(f) + 15) & ~(size_t)15;
        hoff = jxg_take_of(&j->hused, j->d->huff_bytes, bound);
        if (hoff != (size_t)-1 && !patina__jpegh_stage(f, j->d->h_huff[j->buf] + hoff, bound, &it->jimg, &used)) {
            it->jimg.tab += hoff;
            it->jimg.iv += hoff;
            it->jimg.civ += hoff;
            it->jimg.data += hoff;
            it->jimg.nblocks = (uint32_t)it->im.nblocks;
            ok = 1;
        }
    }
    free(f);
    return ok;
}

static void jxg_stage_one(void *arg, size_t i, int worker)
{
    jxg_stage_job_t *j = (jxg_stage_job_t *)arg;
    jxg_item_t *it = &j->d->items[i];
    patina_jpegx_reader_t *r = NULL;
    size_t bytes, off;
    (void)worker;
    if (it->state != JXG_PENDING) return;
    if (j->im) {
        it->im = j->im[i];
    } else if (patina__jpegx_open(&r, &it->im, j->data[i], j->size[i], "<jpegx>") != PATINA_OK) {
        it->state = JXG_REFUSED;
        return;
    }
    bytes = (size_t)it->im.nblocks * 64 * sizeof(int16_t);
    if (bytes == 0 || bytes > j->d->stage_bytes || it->im.width != j->want[i].width ||
        it->im.height != j->want[i].height) {
        it->state = JXG_REFUSED;
        patina__jpegx_close(r);
        return;
    }
    off = jxg_take(j, bytes);
    if (off == (size_t)-1) { /* the next round */
        patina__jpegx_close(r);
        return;
    }
    it->off = off / sizeof(int16_t);
    it->buf = j->buf;
    it->huff = 0;
    if (!j->im && j->huff &&
        (j->d->gpu_entropy != 2 || (uint64_t)it->im.width * (uint64_t)it->im.height >= j->d->huff_min_px)) {
        if (jxg_stage_huff(j, it, r)) {
            patina__jpegx_close(r);
            it->huff = 1;
            it->state = JXG_STAGED;
            return;
        }
    }
    if (j->im) {
        memcpy(j->d->h_coef[j->buf] + it->off, j->coef[i], bytes);
    } else if (patina__jpegx_read(r, &it->im, j->d->h_coef[j->buf] + it->off) != PATINA_OK) {
        it->state = JXG_REFUSED; /* its reserved bytes stay unused this round */
        patina__jpegx_close(r);
        return;
    }
    patina__jpegx_close(r);
    /* Its coefficients to the device now, under the other workers' entropy
     * decoding (the buffer's previous round was collected before this one
     * was staged, so its device copy is free). The worker's current device
     * is set here: pool threads serve every caller. */
    {
        cudaError_t e = cudaSetDevice(j->d->g->device);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(j->d->d_coef[j->buf] + it->off, j->d->h_coef[j->buf] + it->off, bytes,
                                cudaMemcpyHostToDevice, j->d->upload);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            __atomic_store_n(&j->cuda_error, (int)e, __ATOMIC_RELAXED);
            it->state = JXG_REFUSED;
            return;
        }
    }
    it->state = JXG_STAGED;
}

/* Phase B: the staged images of buffer b to the device and through the two
 * kernels, asynchronously on d->stream. */
static patina_status jxg_launch(patina_jpegx_gpu_t *d, int b, size_t n, const patina_image_t *out)
{
    jxg_img_t *hi = d->h_img[b];
    jxg_plane_t *hp = d->h_plane[b];
    jh_img_t *hj = d->h_jimg[b];
    size_t ni = 0, np = 0, coef_end = 0, nh = 0;
    uint32_t nchunk = 0, niv = 0;
    unsigned long long nq = 0, pbytes = 0;
    int blocks;
    for (size_t i = 0; i < n; i++) {
        jxg_item_t *it = &d->items[i];
        const jx_image_t *im = &it->im;
        if (it->state != JXG_STAGED || it->buf != b) continue;
        hi[ni].first_q = nq;
        hi[ni].qpr = (unsigned)((im->width + JXG_QUAD - 1) / JXG_QUAD);
        hi[ni].pad = 0;
        hi[ni].out = out[i].data;
        hi[ni].stride = out[i].stride;
        hi[ni].width = im->width;
        hi[ni].height = im->height;
        hi[ni].cs = im->cs;
        hi[ni].adobe = im->adobe;
        hi[ni].ncomp = im->ncomp;
        hi[ni].plane0 = (int)np;
        for (int c = 0; c < im->ncomp; c++) {
            const jx_comp_t *k = &im->comp[c];
            jxg_plane_t *p = &hp[np++];
            p->first = it->off / 64 + k->first;
            p->off = pbytes;
            p->bw = k->bw;
            p->bh = k->bh;
            p->pitch = k->bw * 8;
            p->img = (int)ni;
            p->dw = k->dw;
            p->dh = k->dh;
            p->up = k->up;
            p->rh = k->rh;
            p->rv = k->rv;
            p->pad = 0;
            memcpy(p->q, k->q, sizeof p->q);
            pbytes += (unsigned long long)k->bw * (unsigned long long)k->bh * 64;
        }
        if (it->off + (size_t)im->nblocks * 64 > coef_end) coef_end = it->off + (size_t)im->nblocks * 64;
        d->round_items[b][ni] = (int)i;
        if (it->huff) { /* entropy decoding on the device (its place: it->off) */
            jh_img_t *j = &hj[nh++];
            *j = it->jimg;
            j->coef = it->off / 64;
            j->c0 = nchunk;
            j->iv0 = niv;
            j->flag = (uint32_t)ni;
            nchunk += j->nc;
            niv += j->niv;
        }
        nq += (unsigned long long)hi[ni].qpr * (unsigned long long)im->height;
        ni++;
    }
    d->inflight[b] = (int)ni;
    if (ni == 0) return PATINA_OK;
    /* Planes in the order of their first blocks (the IDCT kernel searches
     * them): images were staged at increasing offsets only per worker, so sort. */
    for (size_t a = 1; a < np; a++) { /* insertion sort on a nearly sorted table */
        jxg_plane_t t = hp[a];
        size_t c = a;
        while (c > 0 && hp[c - 1].first > t.first) {
            hp[c] = hp[c - 1];
            c--;
        }
        hp[c] = t;
    }
    /* the image table refers to planes by index: re-point plane0 after the sort */
    for (size_t a = 0; a < np; a++) {
        jxg_plane_t *p = &hp[a];
        if (a == 0 || hp[a - 1].img != p->img) hi[p->img].plane0 = (int)a;
    }
    /* The coefficient buffer may have holes (bytes reserved by a file
     * refused afterwards): the IDCT kernel covers [0, coef_end) and skips
     * the blocks of no plane. */
    memset(d->h_flags[b], 0, ni * sizeof(unsigned));
    cudaStream_t s = d->stream;
    /* the workers' copies of this round's coefficients (issued on the upload
     * stream before this point) come before the kernels */
    PGPU_CU(cudaEventRecord(d->copied[b], d->upload));
    PGPU_CU(cudaStreamWaitEvent(s, d->copied[b], 0));
    PGPU_CU(cudaMemcpyAsync(d->d_img[b], hi, ni * sizeof(jxg_img_t), cudaMemcpyHostToDevice, s));
    PGPU_CU(cudaMemcpyAsync(d->d_plane[b], hp, np * sizeof(jxg_plane_t), cudaMemcpyHostToDevice, s));
    PGPU_CU(cudaMemsetAsync(d->d_flags[b], 0, ni * sizeof(unsigned), s));
    if (nh) { /* the Huffman decode of this round's baseline files, into d_coef[b] */
        jh_batch_t jb;
        memset(&jb, 0, sizeof jb);
        /* the round's scans in one copy (h_huff[b] is not written again
         * before done[b], which jxg_collect waits for) */
        PGPU_CU(cudaMemcpyAsync(d->d_huff[b], d->h_huff[b], d->huff_used[b], cudaMemcpyHostToDevice, s));
        PGPU_CU(cudaMemcpyAsync(d->d_jimg[b], hj, nh * sizeof(jh_img_t), cudaMemcpyHostToDevice, s));
        jb.base = d->d_huff[b];
        jb.img = d->d_jimg[b];
        jb.coef = d->d_coef[b];
        jb.flags = d->d_flags[b];
        jb.nimg = (uint32_t)nh;
        jb.nchunk = nchunk;
        jb.niv = niv;
        PATINA_TRY(patina__jhg_run(&d->jscratch, &jb, s, d->g->sm_count));
    }
    blocks = (int)((coef_end / 64 + JXG_BLOCKS_PER_CTA - 1) / JXG_BLOCKS_PER_CTA);
    jx_idct_kernel<<<blocks, JXG_IDCT_THREADS, 0, s>>>(d->d_coef[b], coef_end / 64, d->d_plane[b], (int)np,
                                                          d->d_pbuf, d->d_flags[b]);
    PGPU_CU(cudaGetLastError());
    {
        unsigned long long want = (nq + JXG_COLOUR_THREADS - 1) / JXG_COLOUR_THREADS;
        unsigned cap = (unsigned)d->g->sm_count * 16u;
        unsigned grid = want < cap ? (unsigned)want : cap;
        jx_colour_kernel<<<grid ? grid : 1, JXG_COLOUR_THREADS, 0, s>>>(d->d_img[b], (int)ni, d->d_plane[b], d->d_pbuf,
                                                                       d->d_flags[b], nq);
        PGPU_CU(cudaGetLastError());
    }
    PGPU_CU(cudaMemcpyAsync(d->h_flags[b], d->d_flags[b], ni * sizeof(unsigned), cudaMemcpyDeviceToHost, s));
    PGPU_CU(cudaEventRecord(d->done[b], s));
    return PATINA_OK;
}

/* Waits for buffer b's round and gives its images their status. */
static patina_status jxg_collect(patina_jpegx_gpu_t *d, int b, patina_status *st)
{
    double t0;
    int huff = 0, slow = 0;
    if (!d->inflight[b]) return PATINA_OK;
    t0 = patina_now();
    PGPU_CU(cudaEventSynchronize(d->done[b]));
    d->times.wait += patina_now() - t0;
    for (int k = 0; k < d->inflight[b]; k++) {
        int i = d->round_items[b][k];
        if (d->items[i].huff) {
            d->times.gpu_entropy++;
            d->times.gpu_flagged += d->h_flags[b][k] != 0;
            d->times.gpu_slow += (d->h_flags[b][k] & JH_E_SLOW) != 0;
            huff++;
            slow += (d->h_flags[b][k] & JH_E_SLOW) != 0;
        }
        d->items[i].state = d->h_flags[b][k] ? JXG_REFUSED : JXG_DONE;
        st[i] = d->h_flags[b][k] ? PATINA_E_FORMAT : PATINA_OK;
    }
    d->inflight[b] = 0;
    /* Images whose chunks did not fall in step (JH_E_SLOW) are decoded again
     * on the CPU; when they are more than 1 in 16 of a round's, such files
     * (photographs without restart markers, mostly) are better entropy-decoded
     * on the CPU workers from the start: the next JXG_CPU_ROUNDS rounds are,
     * then the device is tried again. */
    if (d->gpu_entropy == 2 && huff >= 8 && slow * 16 > huff) d->cpu_rounds = JXG_CPU_ROUNDS;
    return PATINA_OK;
}

/* After a failure: nothing of the call stays in flight, every image is
 * left to the caller. */
static void jxg_abandon(patina_jpegx_gpu_t *d, patina_image_t *out, size_t n, patina_status *st)
{
    (void)cudaStreamSynchronize(d->upload);
    (void)cudaStreamSynchronize(d->stream);
    (void)cudaGetLastError();
    d->inflight[0] = d->inflight[1] = 0;
    d->open_n = 0;
    for (size_t i = 0; i < n; i++) {
        st[i] = PATINA_E_FORMAT;
        memset(&out[i], 0, sizeof out[i]);
    }
}

/* Waits for the call's rounds still on the device; the images they flagged
 * get PATINA_E_FORMAT, and every image not decoded an empty out[i]. */
static patina_status jxg_finish(patina_jpegx_gpu_t *d, patina_image_t *out, size_t n, patina_status *st)
{
    patina_status s = PATINA_OK;
    if (!d->open_n) return PATINA_OK;
    PGPU_CU(cudaSetDevice(d->g->device));
    if (n != d->open_n)
        return patina__fail(PATINA_E_INVALID, "jpegx: finishing %zu images of a call of %zu", n, d->open_n);
    for (int b = 0; b < 2 && s == PATINA_OK; b++) s = jxg_collect(d, b, st);
    if (s != PATINA_OK) {
        jxg_abandon(d, out, n, st);
        return s;
    }
    d->open_n = 0;
    for (size_t i = 0; i < n; i++)
        if (st[i] != PATINA_OK) memset(&out[i], 0, sizeof out[i]);
    return PATINA_OK;
}

/* The Huffman kernels' chunk size for a call of n files: one thread per
 * chunk, and a thread decodes its chunk serially (latency-bound), so a call
 * with few bits gets smaller chunks to fill the device: the largest of
 * JH_CHUNK_BITS, 2048 and 1024 bits that still gives JXG_CHUNKS_PER_SM
 * chunks per SM (bench_pipeline --chunk-bits measures the sizes; smaller
 * chunks fall in step later, so they cost more rounds). */
#define JXG_CHUNKS_PER_SM 512
static uint32_t jxg_chunk_bits(const patina_jpegx_gpu_t *d, const size_t *size, size_t n)
{
    uint64_t bits = 0, want = (uint64_t)(d->g->sm_count > 0 ? d->g->sm_count : 1) * JXG_CHUNKS_PER_SM;
    uint32_t cb = JH_CHUNK_BITS;
    if (d->chunk_bits) return d->chunk_bits;
    for (size_t i = 0; size && i < n; i++) bits += (uint64_t)size[i] * 8;
    while (cb > 1024 && bits / cb < want) cb /= 2;
    return cb;
}

/* Both entry points: stage (decode or copy), launch, collect, in rounds; the
 * last round is left on the device (open_n) for jxg_finish. */
static patina_status jxg_submit(patina_jpegx_gpu_t *d, patina_pool_t *pool, patina_image_t *out,
                                const void *const *data, const size_t *size, const jx_image_t *im,
                                const int16_t *const *coef, size_t n, patina_status *st)
{
    patina_status s = PATINA_OK;
    size_t i, bytes = 0, pending = n, off = 0;
    int b = 0, alloc;
    uint32_t cb = data ? jxg_chunk_bits(d, size, n) : JH_CHUNK_BITS;
    double t0;
    for (i = 0; i < n; i++) st[i] = PATINA_E_FORMAT;
    PGPU_CU(cudaSetDevice(d->g->device));
    if (d->open_n) { /* a call never finished: its results are dropped */
        PGPU_CU(cudaStreamSynchronize(d->stream));
        d->inflight[0] = d->inflight[1] = 0;
        d->open_n = 0;
    }
    if (n == 0) return PATINA_OK;
    for (i = 0; i < n; i++) {
        int w = im ? im[i].width : out[i].width, h = im ? im[i].height : out[i].height;
        if (w <= 0 || h <= 0) return patina__fail(PATINA_E_INVALID, "jpegx: image %zu has no size", i);
        bytes += jxg_pitch(w) * (size_t)h;
    }
    t0 = patina_now();
    alloc = !jxg_has_buffer(d, 0) || !d->d_pbuf || n > d->desc_cap || n > d->items_cap ||
            bytes > d->arena_bytes;
    PATINA_TRY(jxg_reserve(d, n));
    if (bytes > d->arena_bytes) {
        size_t want = bytes + bytes / 4;
        JXG_FREE_DEV(d->arena);
        d->arena_bytes = 0;
        PATINA_TRY(jxg_dev((void **)&d->arena, want, "jpegx decoded images"));
        d->arena_bytes = want;
    }
    if (alloc) {
        d->times.setup += patina_now() - t0;
        d->times.setups++;
    }
    for (i = 0; i < n; i++) {
        int w = im ? im[i].width : out[i].width, h = im ? im[i].height : out[i].height;
        memset(&d->items[i], 0, sizeof d->items[i]);
        out[i].width = w;
        out[i].height = h;
        out[i].stride = jxg_pitch(w);
        out[i].data = d->arena + off;
        out[i].owned = 0;
        off += out[i].stride * (size_t)h;
    }
    d->inflight[0] = d->inflight[1] = 0;
    d->open_n = n;
    while (pending > 0 && s == PATINA_OK) {
        jxg_stage_job_t job;
        memset(&job, 0, sizeof job);
        job.d = d;
        job.buf = b;
        job.data = data;
        job.size = size;
        job.want = out;
        job.im = im;
        job.coef = coef;
        job.huff = d->gpu_entropy == 1 || (d->gpu_entropy == 2 && d->cpu_rounds == 0);
        job.chunk_bits = cb;
        if (d->cpu_rounds > 0) d->cpu_rounds--;
        if (!jxg_has_buffer(d, b)) { /* a second round: the other buffer, first use */
            t0 = patina_now();
            s = jxg_stage_buffer(d, b);
            d->times.setup += patina_now() - t0;
            d->times.setups++;
            if (s != PATINA_OK) break;
        }
        /* buffer b is free: its last round was collected before the previous launch */
        t0 = patina_now();
        patina_pool_run(pool, n, jxg_stage_one, &job);
        d->huff_used[b] = job.hused;
        d->times.entropy += patina_now() - t0;
        if (job.cuda_error) s = pgpu_fail(job.cuda_error, "cudaMemcpyAsync(coefficients to the device)", __FILE__, __LINE__);
        if (s == PATINA_OK) s = jxg_collect(d, 1 - b, st); /* round r - 1 finished while the workers staged round r */
        if (s == PATINA_OK) s = jxg_launch(d, b, n, out);
        pending = 0;
        for (i = 0; i < n; i++) pending += d->items[i].state == JXG_PENDING;
        b = 1 - b;
    }
    if (s != PATINA_OK) {
        jxg_abandon(d, out, n, st);
        return s;
    }
    /* on their way: OK unless the device flags them (jxg_finish) */
    for (i = 0; i < n; i++) st[i] = d->items[i].state == JXG_STAGED || d->items[i].state == JXG_DONE ? PATINA_OK
                                                                                                   : PATINA_E_FORMAT;
    return PATINA_OK;
}

patina_status patina_gpu_jpegx_submit(patina_jpegx_gpu_t *d, patina_pool_t *pool, patina_image_t *out,
                                      const void *const *data, const size_t *size, size_t n,
                                      patina_status *st)
{
    if (!d || (n && (!out || !data || !size || !st))) return patina__fail(PATINA_E_INVALID, "jpegx: NULL argument");
    return jxg_submit(d, pool, out, data, size, NULL, NULL, n, st);
}

patina_status patina_gpu_jpegx_finish(patina_jpegx_gpu_t *d, patina_image_t *out, size_t n, patina_status *st)
{
    if (!d || (n && (!out || !st))) return patina__fail(PATINA_E_INVALID, "jpegx: NULL argument");
    return jxg_finish(d, out, n, st);
}

patina_status patina_gpu_jpegx_decode(patina_jpegx_gpu_t *d, patina_pool_t *pool, patina_image_t *out,
                                      const void *const *data, const size_t *size, size_t n,
                                      patina_status *st)
{
    if (!d || (n && (!out || !data || !size || !st))) return patina__fail(PATINA_E_INVALID, "jpegx: NULL argument");
    PATINA_TRY(jxg_submit(d, pool, out, data, size, NULL, NULL, n, st));
    return jxg_finish(d, out, n, st);
}

patina_status patina_gpu_jpegx_pixels(patina_jpegx_gpu_t *d, patina_image_t *out, const struct jx_image *im,
                                      const int16_t *const *coef, size_t n, patina_status *st)
{
    if (!d || (n && (!out || !im || !coef || !st))) return patina__fail(PATINA_E_INVALID, "jpegx: NULL argument");
    PATINA_TRY(jxg_submit(d, NULL, out, NULL, NULL, im, coef, n, st));
    return jxg_finish(d, out, n, st);
}

void patina_gpu_jpegx_set_gpu_entropy(patina_jpegx_gpu_t *d, int on)
{
    if (d) d->gpu_entropy = on <= 0 ? 0 : on >= 2 ? 2 : 1;
}

void patina_gpu_jpegx_set_chunk_bits(patina_jpegx_gpu_t *d, uint32_t bits)
{
    if (d) d->chunk_bits = bits >= JH_CHUNK_MIN && bits <= JH_CHUNK_MAX && bits % 8 == 0 ? bits : 0;
}

void patina_gpu_jpegx_set_huff_min_px(patina_jpegx_gpu_t *d, uint64_t px)
{
    if (d) d->huff_min_px = px;
}

void patina_gpu_jpegx_times(const patina_jpegx_gpu_t *d, patina_jpegx_times_t *t)
{
    if (!t) return;
    if (d) *t = d->times;
    else memset(t, 0, sizeof *t);
}
