/* JPEG decoding on the GPU through nvJPEG, loaded at run time.
 *
 * libnvjpeg ships with the CUDA toolkit of the machine that runs Patina,
 * not necessarily of the one that built it, so it is opened with dlopen and
 * the few entry points used here are declared below (the types and values of
 * NVIDIA's documented C API, nvjpeg.h). Without the library every call says
 * PATINA_E_UNAVAILABLE and callers decode on the CPU.
 *
 * Backend: the hardware JPEG engines (NVJPG, A100/H100 class) when the
 * device has them, else nvJPEG's GPU Huffman backend. Either way the
 * decoded RGB stays in device memory, where the GPU descriptor kernels read
 * it in place: only the compressed bytes cross PCIe.
 *
 * The pixels are not libjpeg-turbo's: nvJPEG's IDCT, chroma upsampling and
 * colour conversion round differently (docs/images.md measures by how
 * much), so descriptors from this decoder are close to, not identical with,
 * the reference's. It is opt-in for that reason. CMYK and YCCK JPEGs are
 * never given to it: the pipeline (gpu_candidate in src/pipeline/index.c)
 * keeps every JPEG whose probe counts 4 channels on the CPU decoder, whose
 * CMYK-to-RGB rule (src/image/jpeg.c) nvJPEG does not apply. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpu/context.h"
#include "gpu/gpu.h"

/* ---- the nvJPEG C API subset (values and signatures from nvjpeg.h) ---- */

typedef int nvj_status;                 /* nvjpegStatus_t */
enum {
    NVJ_SUCCESS = 0,
    NVJ_NOT_INITIALIZED = 1,
    NVJ_INVALID_PARAMETER = 2,
    NVJ_BAD_JPEG = 3,
    NVJ_JPEG_NOT_SUPPORTED = 4,
    NVJ_ALLOCATOR_FAILURE = 5,
    NVJ_EXECUTION_FAILED = 6,
    NVJ_ARCH_MISMATCH = 7,
    NVJ_INTERNAL_ERROR = 8,
    NVJ_IMPLEMENTATION_NOT_SUPPORTED = 9,
    NVJ_INCOMPLETE_BITSTREAM = 10
};
enum { NVJ_BACKEND_GPU_HYBRID = 2, NVJ_BACKEND_HARDWARE = 3 };  /* nvjpegBackend_t */
enum { NVJ_OUTPUT_RGBI = 5 };                                    /* nvjpegOutputFormat_t */
#define NVJ_MAX_COMPONENT 4

typedef struct nvj_image {              /* nvjpegImage_t */
    unsigned char *channel[NVJ_MAX_COMPONENT];
    size_t pitch[NVJ_MAX_COMPONENT];
} nvj_image_t;

typedef void *nvj_handle;               /* nvjpegHandle_t */
typedef void *nvj_state;                /* nvjpegJpegState_t */
typedef void *nvj_stream;               /* nvjpegJpegStream_t */

typedef struct nvj_api {
    void *lib;
    char path[1024];
    nvj_status (*create_ex)(int backend, void *dev_alloc, void *pinned_alloc, unsigned flags,
                            nvj_handle *h);
    nvj_status (*destroy)(nvj_handle h);
    nvj_status (*state_create)(nvj_handle h, nvj_state *s);
    nvj_status (*state_destroy)(nvj_state s);
    nvj_status (*stream_create)(nvj_handle h, nvj_stream *js);
    nvj_status (*stream_destroy)(nvj_stream js);
    nvj_status (*stream_parse_header)(nvj_handle h, const unsigned char *data, size_t len,
                                      nvj_stream js);
    nvj_status (*stream_frame_dims)(nvj_stream js, unsigned *w, unsigned *h);
    nvj_status (*batched_supported)(nvj_handle h, nvj_stream js, int *is_supported);
    nvj_status (*batched_init)(nvj_handle h, nvj_state s, int batch, int max_cpu_threads,
                               int output_format);
    nvj_status (*batched)(nvj_handle h, nvj_state s, const unsigned char *const *data,
                          const size_t *lengths, nvj_image_t *dst, cudaStream_t stream);
} nvj_api_t;

static const char *nvj_str(nvj_status s)
{
    static const char *const names[] = {
        "success", "not initialized", "invalid parameter", "bad JPEG", "JPEG not supported",
        "allocator failure", "execution failed", "architecture mismatch", "internal error",
        "implementation not supported", "incomplete bitstream"};
    return s >= 0 && s <= 10 ? names[s] : "unknown nvJPEG status";
}

/* Opens the library (`path`, or the usual names when NULL) and looks up the
 * entry points into *a; on failure a->lib is NULL and err says why. dlopen
 * counts references, so each decoder holding its own table costs nothing. */
static void api_load(nvj_api_t *a, const char *path, char *err, size_t errsize)
{
    static const char *const names[] = {"libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so.11",
                                        "/usr/local/cuda/lib64/libnvjpeg.so.13",
                                        "/usr/local/cuda/lib64/libnvjpeg.so.12", "libnvjpeg.so"};
    void *lib = NULL;
    size_t i;
    memset(a, 0, sizeof *a);
    if (path && *path) {
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        snprintf(a->path, sizeof a->path, "%s", path);
    }
    for (i = 0; !lib && !(path && *path) && i < sizeof names / sizeof *names; i++) {
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib) snprintf(a->path, sizeof a->path, "%s", names[i]);
    }
    if (!lib) {
        snprintf(err, errsize, "nvjpeg: libnvjpeg could not be loaded (%s)",
                 path && *path ? path
                               : "libnvjpeg.so.13/.12/.11; name its path in the context's nvjpeg_library");
        return;
    }
#define SYM(field, name)                                                                           \
    do {                                                                                           \
        *(void **)&a->field = dlsym(lib, name);                                                    \
        if (!a->field) {                                                                           \
            snprintf(err, errsize, "nvjpeg: %s has no %s", a->path, name);                        \
            dlclose(lib);                                                                          \
            return;                                                                                \
        }                                                                                          \
    } while (0)
    SYM(create_ex, "nvjpegCreateEx");
    SYM(destroy, "nvjpegDestroy");
    SYM(state_create, "nvjpegJpegStateCreate");
    SYM(state_destroy, "nvjpegJpegStateDestroy");
    SYM(stream_create, "nvjpegJpegStreamCreate");
    SYM(stream_destroy, "nvjpegJpegStreamDestroy");
    SYM(stream_parse_header, "nvjpegJpegStreamParseHeader");
    SYM(stream_frame_dims, "nvjpegJpegStreamGetFrameDimensions");
    SYM(batched_supported, "nvjpegDecodeBatchedSupported");
    SYM(batched_init, "nvjpegDecodeBatchedInitialize");
    SYM(batched, "nvjpegDecodeBatched");
#undef SYM
    a->lib = lib;
}

/* ------------------------------------------------------------- decoder */

/* nvJPEG's batched call does its host work (parsing, Huffman set-up for the
 * engines) on the calling thread, about 60 us per VGA image: one thread
 * feeds the JPEG engines at ~16k images/s at most. A decoder therefore has
 * several lanes, each a decoding state, a parser and a stream on the one
 * (thread-safe) library handle, fed by their own threads. */
#define NVJ_LANES_MAX 16

typedef struct nvj_lane {
    nvj_state state;
    nvj_stream js;              /* header parsing for the support check */
    cudaStream_t stream;
    int batch_init;             /* batch size the state was initialised for (0: none) */
    /* this call's share: images [first, first + n) of the caller's arrays */
    struct patina_jpeg_gpu *d;
    size_t first, n;
    const void *const *data;
    const size_t *size;
    patina_image_t *out;
    patina_status *st;
    size_t off;                 /* first byte of this lane's part of the arena */
    /* scratch, grown as needed */
    size_t cap;
    const unsigned char **bits;
    size_t *len;
    nvj_image_t *dst;
    size_t *which;
} nvj_lane_t;

struct patina_jpeg_gpu {
    nvj_api_t api;              /* the library this decoder uses */
    int device;
    int backend;                /* NVJ_BACKEND_* in use */
    nvj_handle h;
    int nlanes;
    nvj_lane_t lane[NVJ_LANES_MAX];
    uint8_t *arena;             /* device memory the images of the last call live in */
    size_t arena_bytes;
};

int patina_gpu_jpeg_available(const char *library, char *why, size_t size)
{
    nvj_api_t a;
    char err[1200];
    api_load(&a, library, err, sizeof err);
    if (why && size) snprintf(why, size, "%s", a.lib ? a.path : err);
    if (!a.lib) return 0;
    dlclose(a.lib);
    return 1;
}

const char *patina_gpu_jpeg_backend(const patina_jpeg_gpu_t *d)
{
    return d && d->backend == NVJ_BACKEND_HARDWARE ? "hardware" : "gpu-hybrid";
}

patina_status patina_gpu_jpeg_open(patina_jpeg_gpu_t **out, patina_gpu_t *g, const char *library,
                                   int lanes)
{
    patina_jpeg_gpu_t *d;
    nvj_status s;
    int k;
    char err[1200];
    *out = NULL;
    if (!g) return patina__fail(PATINA_E_UNAVAILABLE, "nvjpeg: no GPU context");
    if (cudaSetDevice(g->device) != cudaSuccess)
        return patina__fail(PATINA_E_GPU, "nvjpeg: cannot select device %d", g->device);
    d = calloc(1, sizeof *d);
    if (!d) return patina__fail(PATINA_E_NOMEM, "nvjpeg: out of memory");
    api_load(&d->api, library, err, sizeof err);
    if (!d->api.lib) {
        free(d);
        return patina__fail(PATINA_E_UNAVAILABLE, "%s", err);
    }
    d->device = g->device;
    d->nlanes = lanes < 1 ? 1 : lanes > NVJ_LANES_MAX ? NVJ_LANES_MAX : lanes;
    /* The JPEG engines first; devices without them say "architecture
     * mismatch" (or "not supported") and get the GPU Huffman backend. */
    d->backend = NVJ_BACKEND_HARDWARE;
    s = d->api.create_ex(NVJ_BACKEND_HARDWARE, NULL, NULL, 0, &d->h);
    if (s != NVJ_SUCCESS) {
        d->backend = NVJ_BACKEND_GPU_HYBRID;
        s = d->api.create_ex(NVJ_BACKEND_GPU_HYBRID, NULL, NULL, 0, &d->h);
    }
    if (s != NVJ_SUCCESS) {
        dlclose(d->api.lib);
        free(d);
        return patina__fail(PATINA_E_GPU, "nvjpeg: cannot create a decoder: %s (%d)", nvj_str(s), s);
    }
    for (k = 0; k < d->nlanes; k++) {
        nvj_lane_t *l = &d->lane[k];
        l->d = d;
        if ((s = d->api.state_create(d->h, &l->state)) != NVJ_SUCCESS ||
            (s = d->api.stream_create(d->h, &l->js)) != NVJ_SUCCESS ||
            cudaStreamCreateWithFlags(&l->stream, cudaStreamNonBlocking) != cudaSuccess) {
            patina_gpu_jpeg_close(d);
            return patina__fail(PATINA_E_GPU, "nvjpeg: cannot create decoder state (%s)",
                                s != NVJ_SUCCESS ? nvj_str(s) : "CUDA stream");
        }
    }
    *out = d;
    return PATINA_OK;
}

void patina_gpu_jpeg_close(patina_jpeg_gpu_t *d)
{
    int k;
    if (!d) return;
    cudaSetDevice(d->device);
    for (k = 0; k < d->nlanes; k++) {
        nvj_lane_t *l = &d->lane[k];
        if (l->stream) cudaStreamSynchronize(l->stream);
        if (l->js) d->api.stream_destroy(l->js);
        if (l->state) d->api.state_destroy(l->state);
        if (l->stream) cudaStreamDestroy(l->stream);
        free(l->bits);
        free(l->len);
        free(l->dst);
        free(l->which);
    }
    if (d->h) d->api.destroy(d->h);
    cudaFree(d->arena);
    if (d->api.lib) dlclose(d->api.lib);
    free(d);
}

int patina_gpu_jpeg_lanes(const patina_jpeg_gpu_t *d) { return d ? d->nlanes : 0; }

static int lane_grow(nvj_lane_t *l, size_t n)
{
    const unsigned char **bits;
    size_t *len, *which;
    nvj_image_t *dst;
    if (n <= l->cap) return 0;
    bits = realloc(l->bits, n * sizeof *bits);
    if (bits) l->bits = bits;
    len = realloc(l->len, n * sizeof *len);
    if (len) l->len = len;
    dst = realloc(l->dst, n * sizeof *dst);
    if (dst) l->dst = dst;
    which = realloc(l->which, n * sizeof *which);
    if (which) l->which = which;
    if (!bits || !len || !dst || !which) return -1;
    l->cap = n;
    return 0;
}

/* A stream the engine may decode silently although it is cut short
 * (libjpeg-turbo reports it): without an end-of-image marker near its end it
 * goes to the CPU decoder, which names the problem. */
static int has_eoi(const void *data, size_t size)
{
    const unsigned char *p = data;
    size_t i = size > 1024 ? size - 1024 : 0;
    for (; i + 1 < size; i++)
        if (p[i] == 0xFF && p[i + 1] == 0xD9) return 1;
    return 0;
}

/* Row pitch of a decoded image: 3w rounded up to 128 bytes (whole cache
 * lines for the descriptor kernels' row reads). */
static size_t pitch_of(int w) { return ((size_t)w * 3 + 127) & ~(size_t)127; }

/* Phase 1 of a lane: which of its images the backend takes (a header the
 * engine supports) and their geometry. */
static void *lane_parse(void *v)
{
    nvj_lane_t *l = v;
    size_t i;
    if (cudaSetDevice(l->d->device) != cudaSuccess) return NULL;
    for (i = l->first; i < l->first + l->n; i++) {
        unsigned w = 0, h = 0;
        int unsupported = 1;
        patina_image_t *im = &l->out[i];
        memset(im, 0, sizeof *im);
        l->st[i] = PATINA_E_FORMAT;
        if (!l->data[i] || l->size[i] < 4 || !has_eoi(l->data[i], l->size[i])) continue;
        if (l->d->api.stream_parse_header(l->d->h, l->data[i], l->size[i], l->js) != NVJ_SUCCESS ||
            l->d->api.stream_frame_dims(l->js, &w, &h) != NVJ_SUCCESS || w == 0 || h == 0 ||
            w > 65535 || h > 65535 ||
            l->d->api.batched_supported(l->d->h, l->js, &unsupported) != NVJ_SUCCESS || unsupported)
            continue;
        im->width = (int)w;
        im->height = (int)h;
        im->stride = pitch_of((int)w);
        l->st[i] = PATINA_E_GPU;    /* taken; PATINA_OK once decoded */
    }
    return NULL;
}

/* Phase 2: decode the lane's taken images into its part of the arena. */
static void *lane_decode(void *v)
{
    nvj_lane_t *l = v;
    size_t i, nb = 0, off = l->off;
    nvj_status s;
    if (cudaSetDevice(l->d->device) != cudaSuccess) goto fail;
    for (i = l->first; i < l->first + l->n; i++) {
        patina_image_t *im = &l->out[i];
        if (l->st[i] != PATINA_E_GPU) continue;
        im->data = l->d->arena + off;
        im->owned = 0;
        off += im->stride * (size_t)im->height;
        l->which[nb] = i;
        l->bits[nb] = l->data[i];
        l->len[nb] = l->size[i];
        memset(&l->dst[nb], 0, sizeof l->dst[nb]);
        l->dst[nb].channel[0] = im->data;
        l->dst[nb].pitch[0] = im->stride;
        nb++;
    }
    if (nb == 0) return NULL;
    if (l->batch_init != (int)nb) {
        if (l->d->api.batched_init(l->d->h, l->state, (int)nb, 1, NVJ_OUTPUT_RGBI) != NVJ_SUCCESS) {
            l->batch_init = 0;
            goto fail;
        }
        l->batch_init = (int)nb;
    }
    s = l->d->api.batched(l->d->h, l->state, l->bits, l->len, l->dst, l->stream);
    if (s == NVJ_SUCCESS && cudaStreamSynchronize(l->stream) != cudaSuccess) s = NVJ_EXECUTION_FAILED;
    if (s != NVJ_SUCCESS) {
        l->batch_init = 0;
        goto fail;
    }
    for (i = 0; i < nb; i++) l->st[l->which[i]] = PATINA_OK;
    return NULL;
fail:
    /* One bad stream fails the lane's batch: its images go to the caller's
     * CPU decoder, which names the file and the reason. */
    (void)cudaGetLastError();
    for (i = l->first; i < l->first + l->n; i++)
        if (l->st[i] == PATINA_E_GPU) {
            l->st[i] = PATINA_E_FORMAT;
            memset(&l->out[i], 0, sizeof l->out[i]);
        }
    return NULL;
}

/* Runs fn on every lane with work, lanes 1.. on their own threads. */
static void lanes_run(patina_jpeg_gpu_t *d, int used, void *(*fn)(void *))
{
    pthread_t th[NVJ_LANES_MAX];
    int started[NVJ_LANES_MAX] = {0}, k;
    for (k = 1; k < used; k++) started[k] = pthread_create(&th[k], NULL, fn, &d->lane[k]) == 0;
    for (k = 0; k < used; k++)
        if (k == 0 || !started[k]) fn(&d->lane[k]);
    for (k = 1; k < used; k++)
        if (started[k]) pthread_join(th[k], NULL);
}

patina_status patina_gpu_jpeg_decode(patina_jpeg_gpu_t *d, patina_image_t *out,
                                     const void *const *data, const size_t *size, size_t n,
                                     patina_status *st)
{
    size_t i, per, bytes = 0;
    int k, used;
    if (n == 0) return PATINA_OK;
    if (cudaSetDevice(d->device) != cudaSuccess)
        return patina__fail(PATINA_E_GPU, "nvjpeg: cannot select device %d", d->device);
    /* Lanes of at least 16 images (a batch per engine submission). */
    used = (int)((n + 15) / 16);
    if (used > d->nlanes) used = d->nlanes;
    per = (n + (size_t)used - 1) / (size_t)used;
    for (k = 0; k < used; k++) {
        nvj_lane_t *l = &d->lane[k];
        l->first = (size_t)k * per;
        l->n = l->first >= n ? 0 : (n - l->first < per ? n - l->first : per);
        l->data = data;
        l->size = size;
        l->out = out;
        l->st = st;
        if (lane_grow(l, per) != 0) return patina__fail(PATINA_E_NOMEM, "nvjpeg: out of memory");
    }
    lanes_run(d, used, lane_parse);
    for (k = 0; k < used; k++) {
        nvj_lane_t *l = &d->lane[k];
        l->off = bytes;
        for (i = l->first; i < l->first + l->n; i++)
            if (st[i] == PATINA_E_GPU) bytes += out[i].stride * (size_t)out[i].height;
    }
    if (bytes == 0) return PATINA_OK;
    if (bytes > d->arena_bytes) {
        size_t want = bytes + bytes / 4;
        cudaFree(d->arena);
        d->arena = NULL;
        d->arena_bytes = 0;
        if (cudaMalloc((void **)&d->arena, want) != cudaSuccess) {
            (void)cudaGetLastError();
            for (i = 0; i < n; i++) st[i] = PATINA_E_FORMAT;
            return patina__fail(PATINA_E_NOMEM, "nvjpeg: cannot allocate %zu bytes of device memory", want);
        }
        d->arena_bytes = want;
    }
    lanes_run(d, used, lane_decode);
    return PATINA_OK;
}
