/* Identification on the GPU: the reference cache (a device arena first,
 * pinned host memory second, the paper's hybrid cache) and the fused 2-NN
 * matching of queries against it (idf_kernels.cuh), returning each query's
 * best candidates (score, slot) -- the same candidates as the CPU matcher
 * (src/algo/rootsift_match.c), exactly.
 *
 * Mirrors. A context keeps one mirror per reference set it has matched,
 * found by the set's serial in the table cache (gpu/tcache.h: entries of
 * kind TCACHE_IDENTIFY), so that a caller alternating between sets (a
 * shard's partitions, a table's slices) uploads each set once. A mirror
 * holds its slots' descriptor rows (u8, or the same values as binary16 for
 * the fp16 kernel), m rows padded to a multiple of 8 per slot, each slot's
 * count (0: empty or removed) and nothing else (ids, geometry and records
 * stay on the host: verification is the CPU's). Slots [0, dev_cap) live in
 * the mirror's device arena, slots past it in a pinned host tier, streamed
 * through STREAMS staging buffers of the device with copies of one chunk
 * overlapping the matching of the others. Slots keep their tier: the first
 * dev_cap stay on the device and additions past it go to the host tier (the
 * paper's FIFO would instead move the oldest slot to the host at every
 * addition, a copy each time); a rebuild places them anew. The set tells
 * what changed through its serial (which set), epoch (slots renumbered:
 * rebuild) and per-slot stamps (a slot whose stamp is newer than the
 * mirror's clock is uploaded again, appended when new): an add, a removal or
 * an update is one slot's copy, visible to the next call.
 *
 * Memory. A mirror's arena is planned as if the device's other mirrors were
 * gone (they are caches) and allocated through the table cache, which drops
 * the least recently used entries -- never the mirror being filled -- until
 * it fits; a set too large for the budget keeps its tail in the host tier.
 * What every call needs whatever set it matches -- the queries, the
 * candidate lists, the upload staging and the streamed chunks' buffers --
 * is the device's, shared by all mirrors (calls on one context run one at
 * a time), so that a mirror costs its rows and counts (and its pinned host
 * tier) and nothing per set beyond them. A mirror goes when
 * the table cache drops it, when its set's owner says the set is gone
 * (patina_gpu_identify_forget) or when the context closes.
 *
 * Several sets in one pass (patina_gpu_identify_many: a shard's partitions
 * on one device). Every set's mirror is brought up to date as above and
 * pinned in the table cache (tcache_pin) so that making the next cannot
 * drop it; then, per batch of queries, the queries go to the device once,
 * the launches of all the resident mirrors are queued back to back over
 * the streams, each into its own region of the candidate lists, and ONE
 * wait and ONE copy bring every list back; each set's lists are merged as
 * a single call merges them, so its keys are a single call's exactly. A
 * mirror with a host tier, or one that finds no memory beside the pinned
 * ones, is matched on its own afterwards (a single call's round trip).
 *
 * Two int8 kernels compute the same candidates: wgmma (idf_wgmma.cuh,
 * compute capability 9.0, int8, m <= 512, n <= 1024) where it applies,
 * mma.sync (idf_kernels.cuh) everywhere else; opts->kernel can name one.
 *
 * Calls run under the context's GPU turn (core/context.h). */
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "gpu/context.h"
#include "gpu/gpu.h"
#include "gpu/idf_kernels.cuh"
#include "gpu/idf_wgmma.h" /* defined only when PATINA_HAVE_WGMMA */
#include "gpu/smem_raise.cuh"
#include "gpu/tcache.h"

#define IDF_STREAMS 3            /* streamed chunks in flight */
#define IDF_CHUNK_BYTES (64ull << 20) /* host-tier slots per streamed chunk: about this many bytes */
#define IDF_QBATCH 256           /* queries per launch at most */
#define IDF_RESERVE (96ull << 20) /* budget kept for buffers besides the arenas */

/* In patina_gpu_identify: a failed step stores its status in s and leaves. */
#define IDF_TRY(expr)                      \
    do {                                   \
        if ((s = (expr)) != PATINA_OK) goto out; \
    } while (0)

struct idf_dev;

/* One reference set's mirror (a table cache entry). */
typedef struct idf_mirror {
    struct idf_dev *dev;     /* the device state that lists it */
    struct idf_mirror *next; /* the device's next mirror */
    uint64_t serial, epoch, clock;
    int prec;                /* IDF_PREC_* of the arena */
    size_t m, mpad;          /* rows per record, per slot (multiple of 8) */
    size_t slot_bytes;       /* mpad * 128 * (1 or 2) */
    size_t nslots;           /* slots mirrored */
    size_t dev_cap;          /* slots the device arena holds */
    size_t cnt_cap;          /* entries of d_count */
    unsigned char *d_arena;  /* (dev_cap, mpad, 128) */
    tcache_host_t host;      /* the pinned host tier (the table cache's): one field, a unit one slot
                              * (slot_bytes); unit u is slot dev_cap + u; cap slots, n mirrored */
    uint16_t *d_count;       /* (cnt_cap) per slot */
    uint16_t *h_count;       /* host copy of the mirrored counts */
    size_t chunk_slots;      /* slots per upload batch (about IDF_CHUNK_BYTES) */
    size_t stream_slots;     /* slots per streamed chunk: chunk_slots, fewer for a small host tier */
    uint64_t dev_bytes;      /* device bytes it holds */
} idf_mirror_t;

/* The context's identification state (PGPU_FAM_IDENTIFY): its mirrors and
 * the buffers every call shares. */
typedef struct idf_dev {
    idf_mirror_t *mirrors;   /* every mirror of this device, newest first */
    uint64_t builds;         /* mirrors built from scratch (patina_gpu__identify_mirrors) */
    /* upload staging */
    unsigned char *h_up;     /* pinned u8 rows of one upload batch */
    unsigned char *d_up;     /* device u8 rows for the fp16 conversion */
    size_t up_cap, dup_cap;  /* their bytes */
    unsigned char *d_stage[IDF_STREAMS]; /* the streamed chunks of the mirrors with a host tier */
    size_t stage_cap;        /* bytes of each */
    /* per call */
    void *d_q;               /* (qcap, n, 128) u8 or f16 */
    unsigned char *d_q8;     /* (qcap, n, 128) u8 upload */
    uint16_t *d_qcount, *h_qcount; /* (2 qcap): the counts, then a pair call's splits */
    size_t qcap, qn;         /* queries, rows per query the buffers hold */
    uint64_t *d_out, *h_out; /* lists: (1 + STREAMS, qcap, gx, K) */
    size_t out_cap;          /* entries */
    void *ev[4];             /* cudaEvent_t: the call's timing points */
    /* verification's matches (patina_gpu_identify_nn) */
    unsigned char *h_nn, *d_nn; /* pinned in + out, device in + out */
    size_t nn_cap;           /* bytes of each */
} idf_dev_t;

/* ------------------------------------------------------------ small kernels */

/* u8 values to binary16 (exact: integers 0..255). */
__global__ void k_u8_to_f16(__half *dst, const unsigned char *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __ushort2half_rn(src[i]);
}

/* ------------------------------------------------------------------ state */

/* Frees a mirror's memory and the mirror (unlisted, unregistered). */
static void mirror_free(patina_gpu_t *g, idf_mirror_t *mi)
{
    idf_mirror_t **pp;
    tcache_remove(g, mi);
    pgpu_free_n(g, 2, &mi->d_arena, &mi->d_count);
    tcache_host_free(g, &mi->host);
    free(mi->h_count);
    for (pp = &mi->dev->mirrors; *pp; pp = &(*pp)->next)
        if (*pp == mi) {
            *pp = mi->next;
            break;
        }
    free(mi);
}

/* A mirror dropped by the table cache (another table needed the memory):
 * built again by the next call on its set. */
static void mirror_drop(patina_gpu_t *g, void *obj)
{
    (void)pgpu_sync(g);
    mirror_free(g, (idf_mirror_t *)obj);
}

static void dev_free_calls(patina_gpu_t *g, idf_dev_t *dv)
{
    pgpu_free_n(g, 6, &dv->d_q, &dv->d_q8, &dv->d_qcount, &dv->h_qcount, &dv->d_out, &dv->h_out);
    dv->qcap = dv->qn = dv->out_cap = 0;
}

static void idf_release(patina_gpu_t *g, void *state)
{
    idf_dev_t *dv = (idf_dev_t *)state;
    (void)pgpu_sync(g);
    while (dv->mirrors) mirror_free(g, dv->mirrors);
    dev_free_calls(g, dv);
    pgpu_free_n(g, 2, &dv->h_up, &dv->d_up);
    pgpu_free_n(g, 2, &dv->h_nn, &dv->d_nn);
    for (int i = 0; i < IDF_STREAMS; i++) pgpu_free_n(g, 1, &dv->d_stage[i]);
    for (int i = 0; i < 4; i++)
        if (dv->ev[i]) cudaEventDestroy((cudaEvent_t)dv->ev[i]);
    (void)cudaGetLastError();
    free(dv);
}

static patina_status dev_state(patina_gpu_t *g, idf_dev_t **out)
{
    idf_dev_t *dv = (idf_dev_t *)pgpu_state(g, PGPU_FAM_IDENTIFY);
    *out = dv;
    if (dv) return PATINA_OK;
    dv = (idf_dev_t *)calloc(1, sizeof *dv);
    if (!dv) return patina__fail(PATINA_E_NOMEM, "gpu identify: out of memory");
    for (int i = 0; i < 4; i++) {
        cudaEvent_t ev;
        if (cudaEventCreate(&ev) != cudaSuccess) {
            patina_status s = pgpu_fail((int)cudaGetLastError(), "gpu identify: timing events", __FILE__, __LINE__);
            idf_release(g, dv);
            return s;
        }
        dv->ev[i] = ev;
    }
    pgpu_set_state(g, PGPU_FAM_IDENTIFY, dv, idf_release);
    *out = dv;
    return PATINA_OK;
}

static size_t round8(size_t m) { return (m + 7) & ~(size_t)7; }

/* Slots of sb bytes that fit free_b bytes of budget. */
static size_t slots_in(uint64_t held, const patina_gpu_t *g, size_t sb)
{
    const uint64_t free_b = g->budget > held + IDF_RESERVE ? g->budget - held - IDF_RESERVE : 0;
    return sb ? (size_t)(free_b / sb) : 0;
}

void patina_gpu__identify_capacity(const patina_gpu_t *g, size_t m, int prec, size_t *dev_slots)
{
    *dev_slots = slots_in(g->dev_bytes, g, pgpu_idf_slot_bytes(m, prec));
}

void patina_gpu_identify_forget(patina_gpu_t *g, uint64_t serial)
{
    idf_mirror_t *mi;
    if (!g || !(mi = (idf_mirror_t *)tcache_find(g, PGPU_FAM_IDENTIFY, serial))) return;
    mirror_drop(g, mi);
    (void)cudaGetLastError();
}

void patina_gpu__identify_mirrors(patina_gpu_t *g, size_t *mirrors, uint64_t *builds)
{
    const idf_dev_t *dv = g ? (const idf_dev_t *)pgpu_state(g, PGPU_FAM_IDENTIFY) : NULL;
    if (mirrors) *mirrors = g ? tcache_count(g, PGPU_FAM_IDENTIFY) : 0;
    if (builds) *builds = dv ? dv->builds : 0;
}

/* Device memory for mirror mi (or the device's buffers, keep = the mirror
 * in use): the table cache drops the least recently used entries other
 * than keep while the budget is short. Counted in mi->dev_bytes. */
static patina_status mirror_alloc(patina_gpu_t *g, idf_mirror_t *mi, void **p, size_t bytes, const char *tag)
{
    PATINA_TRY(tcache_dev_alloc(g, PGPU_FAM_IDENTIFY, mi, p, bytes, tag));
    mi->dev_bytes += bytes;
    return PATINA_OK;
}

/* The shared upload staging for u8bytes of rows (and their fp16
 * conversion on the device when fp16), grown when short. */
static patina_status staging(patina_gpu_t *g, idf_dev_t *dv, const idf_mirror_t *keep, size_t u8bytes, int fp16)
{
    if (u8bytes > dv->up_cap) {
        pgpu_free_n(g, 1, &dv->h_up);
        dv->up_cap = 0;
        PATINA_TRY(pgpu_pin_alloc(g, (void **)&dv->h_up, u8bytes, PGPU_FAM_IDENTIFY, "upload staging"));
        dv->up_cap = u8bytes;
    }
    if (fp16 && u8bytes > dv->dup_cap) {
        pgpu_free_n(g, 1, &dv->d_up);
        dv->dup_cap = 0;
        PATINA_TRY(tcache_dev_alloc(g, PGPU_FAM_IDENTIFY, keep, (void **)&dv->d_up, u8bytes, "upload conversion"));
        dv->dup_cap = u8bytes;
    }
    return PATINA_OK;
}

/* The shared staging buffers of the streamed chunks: IDF_STREAMS of bytes
 * each at least, grown when short. */
static patina_status stream_buffers(patina_gpu_t *g, idf_dev_t *dv, const idf_mirror_t *keep, size_t bytes)
{
    if (bytes <= dv->stage_cap) return PATINA_OK;
    PATINA_TRY(pgpu_sync(g)); /* no chunk in flight uses them */
    for (int i = 0; i < IDF_STREAMS; i++) pgpu_free_n(g, 1, &dv->d_stage[i]);
    dv->stage_cap = 0;
    for (int i = 0; i < IDF_STREAMS; i++)
        PATINA_TRY(tcache_dev_alloc(g, PGPU_FAM_IDENTIFY, keep, (void **)&dv->d_stage[i], bytes, "streamed chunk"));
    dv->stage_cap = bytes;
    return PATINA_OK;
}

/* --------------------------------------------------------------- uploads */

/* Copies slots [s0, s0 + ns) of the set (descriptor rows of its records)
 * into their places: the device arena or the host tier. The rows go
 * through the device's pinned staging (h_up) so that each chunk is one
 * large copy. */
static patina_status upload_slots(patina_gpu_t *g, idf_mirror_t *st, const pgpu_idf_refs_t *refs, size_t s0,
                                  size_t ns)
{
    idf_dev_t *dv = st->dev;
    cudaStream_t s = (cudaStream_t)pgpu_stream(g, 0);
    const size_t rowb8 = st->mpad * IDF_D; /* u8 bytes per slot */
    PGPU_CU(cudaStreamSynchronize(s)); /* the staging is free */
    PATINA_TRY(staging(g, dv, st, (ns < st->chunk_slots ? ns : st->chunk_slots) * rowb8,
                       st->prec == IDF_PREC_FP16));
    while (ns) {
        const size_t take = ns < st->chunk_slots ? ns : st->chunk_slots;
        /* gather the u8 rows (zero past count, zero padding rows) */
        PGPU_CU(cudaStreamSynchronize(s)); /* h_up is free again */
        for (size_t i = 0; i < take; i++) {
            const size_t slot = s0 + i;
            unsigned char *dst = dv->h_up + i * rowb8;
            const size_t cnt = pgpu_idf_count(refs, slot);
            memcpy(dst, pgpu_idf_row(refs, slot), cnt * IDF_D);
            memset(dst + cnt * IDF_D, 0, rowb8 - cnt * IDF_D);
        }
        /* destination: arena slots first, host tier after */
        size_t done = 0;
        while (done < take) {
            const size_t slot = s0 + done;
            size_t run;
            unsigned char *dst;
            int on_dev = slot < st->dev_cap;
            if (on_dev) {
                run = st->dev_cap - slot;
                dst = st->d_arena + slot * st->slot_bytes;
            } else {
                run = st->dev_cap + st->host.cap - slot;
                dst = (unsigned char *)tcache_host_at(&st->host, 0, slot - st->dev_cap);
            }
            if (run > take - done) run = take - done;
            const unsigned char *src = dv->h_up + done * rowb8;
            if (st->prec == IDF_PREC_INT8) {
                if (on_dev)
                    PGPU_CU(cudaMemcpyAsync(dst, src, run * rowb8, cudaMemcpyHostToDevice, s));
                else
                    memcpy(dst, src, run * rowb8);
            } else {
                /* to binary16: on the device (arena), or on the host (tier) */
                if (on_dev) {
                    PGPU_CU(cudaMemcpyAsync(dv->d_up, src, run * rowb8, cudaMemcpyHostToDevice, s));
                    k_u8_to_f16<<<512, 256, 0, s>>>((__half *)dst, dv->d_up, run * rowb8);
                    PGPU_CU(cudaGetLastError());
                } else {
                    __half *h = (__half *)dst;
                    for (size_t e = 0; e < run * rowb8; e++) h[e] = __ushort2half_rn(src[e]);
                }
            }
            done += run;
        }
        s0 += take;
        ns -= take;
    }
    PGPU_CU(cudaStreamSynchronize(s));
    return PATINA_OK;
}

/* Builds a mirror of refs from scratch into *out (listed and registered);
 * nothing stays allocated on failure. */
static patina_status build(patina_gpu_t *g, idf_dev_t *dv, const pgpu_idf_refs_t *refs, int prec, size_t arena_cap,
                           idf_mirror_t **out)
{
    size_t want, room, devc, hostc;
    uint64_t others = 0;
    patina_status s;
    idf_mirror_t *st = (idf_mirror_t *)calloc(1, sizeof *st);
    *out = NULL;
    if (!st) return patina__fail(PATINA_E_NOMEM, "gpu identify: out of memory");
    st->dev = dv;
    st->next = dv->mirrors;
    dv->mirrors = st;
    dv->builds++;
    st->prec = prec;
    st->m = refs->m;
    st->mpad = round8(refs->m);
    st->slot_bytes = pgpu_idf_slot_bytes(refs->m, prec);
    st->chunk_slots = (size_t)(IDF_CHUNK_BYTES / st->slot_bytes);
    if (st->chunk_slots < 1) st->chunk_slots = 1;
    /* Room for growth (a quarter more slots and a chunk) where the budget
     * has it; the host tier only when the set does not fit, with the
     * staging chunks of the streaming taken out of the device's share. The
     * budget counted is the device's as if its other mirrors were dropped
     * (the table cache drops them, least recently used first, as the arena
     * needs their room). */
    for (const idf_mirror_t *o = dv->mirrors; o; o = o->next) others += o->dev_bytes;
    room = slots_in(g->dev_bytes > others ? g->dev_bytes - others : 0, g, st->slot_bytes);
    want = refs->nslots + refs->nslots / 4 + (refs->nslots + 64 < st->chunk_slots ? refs->nslots + 64 : st->chunk_slots);
    devc = arena_cap && room > arena_cap ? arena_cap : room;
    if (want <= devc) {
        devc = want;
        hostc = 0;
    } else if (refs->nslots <= devc && !arena_cap) {
        hostc = 0; /* fits without room: an addition past it rebuilds with a host tier */
    } else {
        const size_t stage = (IDF_STREAMS + (prec == IDF_PREC_FP16)) * st->chunk_slots;
        if (devc + stage > room) devc = room > stage ? room - stage : 0;
        hostc = refs->nslots > devc ? refs->nslots - devc : 0;
        hostc += hostc / 4 + st->chunk_slots;
    }
    /* a small host tier still streams in a dozen chunks, so that the
     * streams overlap copies with matching */
    st->stream_slots = (refs->nslots > devc ? refs->nslots - devc : 0) / 12;
    if (st->stream_slots < 8) st->stream_slots = 8;
    if (st->stream_slots > st->chunk_slots) st->stream_slots = st->chunk_slots;
    if (devc && (s = mirror_alloc(g, st, (void **)&st->d_arena, devc * st->slot_bytes, "reference arena")) != PATINA_OK)
        goto fail;
    if (hostc) {
        const char *const tag[1] = {"reference host tier"};
        if ((s = tcache_host_reserve(g, &st->host, PGPU_FAM_IDENTIFY, 1, &st->slot_bytes, hostc, tag)) != PATINA_OK)
            goto fail;
    }
    if (hostc && (s = stream_buffers(g, dv, st, st->stream_slots * st->slot_bytes)) != PATINA_OK) goto fail;
    st->cnt_cap = devc + hostc;
    if ((s = mirror_alloc(g, st, (void **)&st->d_count, st->cnt_cap * sizeof(uint16_t) + 2, "counts")) != PATINA_OK)
        goto fail;
    if (!(st->h_count = (uint16_t *)calloc(st->cnt_cap + 1, sizeof(uint16_t)))) {
        s = patina__fail(PATINA_E_NOMEM, "gpu identify: out of memory");
        goto fail;
    }
    st->dev_cap = devc;
    if ((s = upload_slots(g, st, refs, 0, refs->nslots)) != PATINA_OK) goto fail;
    (void)tcache_host_append(&st->host, refs->nslots > devc ? refs->nslots - devc : 0, NULL); /* fits: hostc */
    for (size_t i = 0; i < refs->nslots; i++) st->h_count[i] = pgpu_idf_count(refs, i);
    PGPU_CU_GOTO(cudaMemcpy(st->d_count, st->h_count, st->cnt_cap * sizeof(uint16_t), cudaMemcpyHostToDevice), s,
                 fail);
    st->nslots = refs->nslots;
    st->serial = refs->serial;
    st->epoch = refs->epoch;
    st->clock = refs->clock;
    if ((s = tcache_add(g, PGPU_FAM_IDENTIFY, TCACHE_IDENTIFY, refs->serial, st, mirror_drop)) != PATINA_OK) goto fail;
    *out = st;
    return PATINA_OK;
fail:
    mirror_free(g, st);
    return s;
}

/* The mirror of refs on g, up to date: built when g has none, built anew
 * when it has another layout or precision or the set outgrew it or
 * renumbered its slots; else the slots stamped since the mirror's clock
 * are uploaded again. */
static patina_status mirror_of(patina_gpu_t *g, idf_dev_t *dv, const pgpu_idf_refs_t *refs, int prec,
                               size_t arena_cap, idf_mirror_t **out)
{
    idf_mirror_t *st = (idf_mirror_t *)tcache_find(g, PGPU_FAM_IDENTIFY, refs->serial);
    size_t i, lo, hi;
    *out = NULL;
    if (st && (st->epoch != refs->epoch || st->prec != prec || st->m != refs->m || refs->nslots > st->cnt_cap ||
               refs->nslots < st->nslots || (arena_cap && st->dev_cap > arena_cap))) {
        mirror_free(g, st);
        st = NULL;
    }
    if (!st) return build(g, dv, refs, prec, arena_cap, out);
    tcache_touch(g, st);
    if (st->clock != refs->clock || st->nslots != refs->nslots) {
        /* changed slots: uploaded in runs of consecutive slots */
        for (i = 0; i < refs->nslots;) {
            patina_status s;
            if (i < st->nslots && pgpu_idf_stamp(refs, i) <= st->clock) {
                i++;
                continue;
            }
            lo = i;
            hi = i + 1;
            while (hi < refs->nslots && (hi >= st->nslots || pgpu_idf_stamp(refs, hi) > st->clock) &&
                   hi - lo < st->chunk_slots)
                hi++;
            s = upload_slots(g, st, refs, lo, hi - lo);
            if (s == PATINA_OK) {
                for (size_t j = lo; j < hi; j++) st->h_count[j] = pgpu_idf_count(refs, j);
                if (cudaMemcpy(st->d_count + lo, st->h_count + lo, (hi - lo) * sizeof(uint16_t),
                               cudaMemcpyHostToDevice) != cudaSuccess)
                    s = pgpu_fail((int)cudaGetLastError(), "gpu identify: counts", __FILE__, __LINE__);
            }
            if (s != PATINA_OK) { /* half updated: gone, built anew next time */
                mirror_free(g, st);
                return s;
            }
            i = hi;
        }
        /* slots added past the arena: the host tier's units in use (cnt_cap bounds them) */
        if (refs->nslots > st->dev_cap + st->host.n)
            (void)tcache_host_append(&st->host, refs->nslots - st->dev_cap - st->host.n, NULL);
        st->nslots = refs->nslots;
        st->clock = refs->clock;
    }
    *out = st;
    return PATINA_OK;
}

/* ---------------------------------------------------------------- matching */

static patina_status call_buffers(patina_gpu_t *g, idf_dev_t *st, const idf_mirror_t *keep, size_t nq, size_t n,
                                  size_t outn, int prec)
{
    if (nq > st->qcap || n > st->qn || (prec == IDF_PREC_FP16) != (st->d_q8 != NULL)) {
        pgpu_free_n(g, 4, &st->d_q, &st->d_q8, &st->d_qcount, &st->h_qcount);
        st->qcap = st->qn = 0;
        PATINA_TRY(tcache_dev_alloc(g, PGPU_FAM_IDENTIFY, keep, &st->d_q,
                                    nq * n * IDF_D * (prec == IDF_PREC_FP16 ? 2 : 1), "queries"));
        if (prec == IDF_PREC_FP16)
            PATINA_TRY(tcache_dev_alloc(g, PGPU_FAM_IDENTIFY, keep, (void **)&st->d_q8, nq * n * IDF_D, "query upload"));
        /* the counts, then (pairs) the splits */
        PATINA_TRY(tcache_dev_alloc(g, PGPU_FAM_IDENTIFY, keep, (void **)&st->d_qcount, 2 * nq * sizeof(uint16_t),
                                    "query counts"));
        PATINA_TRY(pgpu_pin_alloc(g, (void **)&st->h_qcount, 2 * nq * sizeof(uint16_t), PGPU_FAM_IDENTIFY,
                                  "query counts"));
        st->qcap = nq;
        st->qn = n;
    }
    if (outn > st->out_cap) {
        pgpu_free_n(g, 2, &st->d_out, &st->h_out);
        st->out_cap = 0;
        PATINA_TRY(tcache_dev_alloc(g, PGPU_FAM_IDENTIFY, keep, (void **)&st->d_out, outn * sizeof(uint64_t),
                                    "candidate lists"));
        PATINA_TRY(pgpu_pin_alloc(g, (void **)&st->h_out, outn * sizeof(uint64_t), PGPU_FAM_IDENTIFY,
                                  "candidate lists"));
        st->out_cap = outn;
    }
    return PATINA_OK;
}

template <int PREC, typename KT>
static patina_status launch_one(const idf_launch_t &L, dim3 grid, int warps, size_t smem, cudaStream_t s, int dev)
{
    static std::atomic<int> raised[PGPU_SMEM_DEVICES];
    static_assert(sizeof(KT) == 4 || sizeof(KT) == 8, "key");
    PATINA_TRY(pgpu_smem_raise((const void *)k_idf_match<PREC, KT>, raised, dev, smem));
    k_idf_match<PREC, KT><<<grid, warps * 32, smem, s>>>(L);
    PGPU_CU(cudaGetLastError());
    return PATINA_OK;
}

/* One launch of the chosen kernel (wg: the wgmma one); smem is that
 * kernel's. */
static patina_status launch(const idf_launch_t &L, int prec, dim3 grid, int warps, size_t smem, cudaStream_t s,
                            int dev, int wg)
{
    const bool big = L.m > IDF_SEG;
#if PATINA_HAVE_WGMMA
    if (wg) return patina__idf_wg_launch(&L, grid.x, grid.y, smem, s, dev);
#else
    (void)wg;
#endif
    if (prec == IDF_PREC_INT8)
        return big ? launch_one<IDF_PREC_INT8, unsigned long long>(L, grid, warps, smem, s, dev)
                   : launch_one<IDF_PREC_INT8, uint32_t>(L, grid, warps, smem, s, dev);
    return big ? launch_one<IDF_PREC_FP16, unsigned long long>(L, grid, warps, smem, s, dev)
               : launch_one<IDF_PREC_FP16, uint32_t>(L, grid, warps, smem, s, dev);
}

/* Whether this call's launches use the wgmma kernel: o->kernel, the device,
 * the shape and its shared memory (*wsmem). */
static int use_wgmma(const patina_gpu_t *g, const pgpu_idf_opts_t *o, int prec, size_t mpad, size_t n, size_t K,
                     int pair, size_t *wsmem)
{
    *wsmem = 0;
    if (o->kernel == PGPU_IDF_KERNEL_MMA) return 0;
#if PATINA_HAVE_WGMMA
    if (g->cc != 90 || !patina__idf_wg_applies(prec, (int)mpad, (int)n)) return 0;
    /* mutual scoring: mma.sync is faster (identify_wg.cu), unless wgmma is asked for */
    if (o->scoring == IDF_SCORE_MUTUAL && o->kernel != PGPU_IDF_KERNEL_WGMMA) return 0;
    *wsmem = patina__idf_wg_smem((int)mpad, (int)n, (int)K, o->scoring, pair);
    return *wsmem <= (size_t)g->smem_optin;
#else
    (void)g;
    (void)prec;
    (void)mpad;
    (void)n;
    (void)K;
    (void)pair;
    return 0;
#endif
}

/* Descending keys. */
static int cmp_key_desc(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The checks of a call's options. */
static patina_status check_opts(const pgpu_idf_opts_t *o)
{
    if (o->precision != IDF_PREC_INT8 && o->precision != IDF_PREC_FP16)
        return patina__fail(PATINA_E_INVALID, "gpu identify: unknown precision %d", o->precision);
    if (o->kernel < PGPU_IDF_KERNEL_AUTO || o->kernel > PGPU_IDF_KERNEL_WGMMA)
        return patina__fail(PATINA_E_INVALID, "gpu identify: unknown kernel %d", o->kernel);
    if (o->ncap < 1 || o->ncap > IDF_KMAX)
        return patina__fail(PATINA_E_LIMIT, "gpu identify: %zu candidates per query (the GPU keeps at most %d)",
                            o->ncap, IDF_KMAX);
    return PATINA_OK;
}

/* The checks of one set of a call (queries of n rows). */
static patina_status check_set(const pgpu_idf_refs_t *refs, size_t n)
{
    if (refs->m < 1 || refs->m > 4096 || n < 1 || n > PGPU_IDF_NMAX)
        return patina__fail(PATINA_E_INVALID, "gpu identify: m = %zu, n = %zu out of range", refs->m, n);
    if (refs->nslots > 0xfffffff0u)
        return patina__fail(PATINA_E_LIMIT, "gpu identify: %zu slots (shard the set)", refs->nslots);
    return PATINA_OK;
}

/* How the kernel runs queries of at most qmax rows (n per query) against
 * mirror st: warps per block, passes over the query rows, which kernel
 * (wg: the wgmma one) and its shared memory. */
typedef struct idf_shape {
    int warps, npass, wg;
    size_t smem;
} idf_shape_t;

static patina_status launch_shape(const patina_gpu_t *g, const pgpu_idf_opts_t *o, const idf_mirror_t *st, size_t n,
                                  size_t qmax, int pair, idf_shape_t *sh)
{
    const int prec = st->prec;
    const size_t K = o->ncap, rpw = prec == IDF_PREC_FP16 ? 32 : 64;
    size_t wsmem;
    sh->warps = (int)((qmax + rpw - 1) / rpw);
    if (sh->warps > IDF_MAXW) sh->warps = IDF_MAXW;
    sh->npass = (int)((qmax + (size_t)sh->warps * rpw - 1) / ((size_t)sh->warps * rpw));
    sh->smem = idf_smem_bytes(prec, (int)st->mpad, (int)n, (int)K, o->scoring);
    sh->wg = use_wgmma(g, o, prec, st->mpad, n, K, pair, &wsmem);
    if (pair && !sh->wg) /* patina_gpu_identify_pair checks first */
        return patina__fail(PATINA_E_INVALID, "gpu identify: a pair call without the wgmma kernel");
    if (o->kernel == PGPU_IDF_KERNEL_WGMMA && !sh->wg)
        return patina__fail(PATINA_E_INVALID, "gpu identify: the wgmma kernel does not apply (device %s, "
                                              "precision %d, m = %zu, n = %zu, %zu bytes of shared memory; it needs "
                                              "compute capability 9.0, a build for sm_90, int8, m <= %d, n <= %d)",
                            g->name, prec, st->m, n, wsmem, IDF_SEG, IDFW_QMAX);
    if (sh->wg) sh->smem = wsmem;
    else if (sh->smem > (size_t)g->smem_optin)
        return patina__fail(PATINA_E_LIMIT, "gpu identify: %zu bytes of shared memory per block (the device "
                                            "allows %d): fewer query rows or candidates", sh->smem, g->smem_optin);
    return PATINA_OK;
}

/* Queries [q0, q0 + bq) to the device buffers on s0 (their first count
 * rows: the rest is never read; binary16 for the fp16 kernel) with their
 * counts, and the first outn entries of the candidate lists cleared. */
static patina_status send_queries(idf_dev_t *dv, int prec, const uint8_t *queries, size_t qstride,
                                  const uint16_t *qcount, const uint16_t *qsplit, size_t q0, size_t bq, size_t n,
                                  size_t outn, cudaStream_t s0)
{
    const size_t qbytes = n * IDF_D, nc = qsplit ? 2 * bq : bq;
    unsigned char *dq8 = prec == IDF_PREC_FP16 ? dv->d_q8 : (unsigned char *)dv->d_q;
    for (size_t q = 0; q < bq; q++) dv->h_qcount[q] = qcount[q0 + q];
    for (size_t q = 0; qsplit && q < bq; q++) dv->h_qcount[bq + q] = qsplit[q0 + q];
    PGPU_CU(cudaMemcpy2DAsync(dq8, qbytes, queries + q0 * qstride, qstride, qbytes, bq, cudaMemcpyHostToDevice, s0));
    PGPU_CU(cudaMemcpyAsync(dv->d_qcount, dv->h_qcount, nc * sizeof(uint16_t), cudaMemcpyHostToDevice, s0));
    if (prec == IDF_PREC_FP16) {
        k_u8_to_f16<<<512, 256, 0, s0>>>((__half *)dv->d_q, dq8, bq * qbytes);
        PGPU_CU(cudaGetLastError());
    }
    PGPU_CU(cudaMemsetAsync(dv->d_out, 0, outn * sizeof(uint64_t), s0));
    return PATINA_OK;
}

/* The launch parameters common to every launch of a batch (the region
 * matched and the lists written are the caller's). */
static idf_launch_t launch_params(const idf_dev_t *dv, const idf_mirror_t *st, size_t n, const idf_shape_t *sh,
                                  const pgpu_idf_opts_t *o)
{
    idf_launch_t L;
    memset(&L, 0, sizeof L);
    L.m = (int)st->mpad;
    L.queries = dv->d_q;
    L.qcount = dv->d_qcount;
    L.n = (int)n;
    L.npass = sh->npass;
    L.K = (int)o->ncap;
    L.scoring = o->scoring;
    L.rr = o->ratio * o->ratio;
    L.inv_scale2 = 1.0f / 262144.0f;
    return L;
}

/* The matching of nq queries against mirror st (up to date), resident
 * slots and streamed host tier, into keys (nq, ncap; zero on entry): a
 * round trip (launches, one wait, the lists' copy back) per batch of
 * IDF_QBATCH queries. qsplit (nq, or NULL): pairs, query q's rows from
 * qsplit[q] on its companion's, whose candidates go to keys2 (the wgmma
 * kernel: the caller checked it applies). */
static patina_status match_mirror(patina_gpu_t *g, idf_dev_t *dv, idf_mirror_t *st, const uint8_t *queries,
                                  size_t qstride, const uint16_t *qcount, const uint16_t *qsplit, size_t nq,
                                  size_t n, const pgpu_idf_opts_t *o, uint64_t *keys, uint64_t *keys2,
                                  pgpu_idf_stats_t *stats)
{
    const int prec = st->prec;
    const size_t K = o->ncap;
    const size_t ndev = st->nslots < st->dev_cap ? st->nslots : st->dev_cap;
    const size_t nhost = st->nslots - ndev;
    cudaEvent_t ev[4];
    patina_status s = PATINA_OK;
    size_t qb = nq < IDF_QBATCH ? nq : IDF_QBATCH;
    for (int i = 0; i < 4; i++) ev[i] = (cudaEvent_t)dv->ev[i];
    if (nhost) IDF_TRY(stream_buffers(g, dv, st, st->stream_slots * st->slot_bytes));

    for (size_t q0 = 0; q0 < nq; q0 += qb) {
        const size_t bq = nq - q0 < qb ? nq - q0 : qb;
        size_t qmax = 0, gx, gxs, outn, outt, nl;
        idf_shape_t sh;
        for (size_t q = 0; q < bq; q++) qmax = qcount[q0 + q] > qmax ? qcount[q0 + q] : qmax;
        if (qmax == 0) continue; /* no query of the batch has a row: no candidates */
        /* blocks per query: two waves of one block per SM over all queries */
        gx = idf_blocks_per_query(bq, (size_t)g->sm_count, (ndev + 7) / 8);
        gxs = idf_blocks_per_query(bq, (size_t)g->sm_count, (st->stream_slots + 7) / 8);
        nl = gx > gxs ? gx : gxs; /* list blocks per query and region */
        outn = (size_t)(1 + IDF_STREAMS) * bq * nl * K;
        outt = qsplit ? 2 * outn : outn; /* pairs: the companions' lists after the queries' */
        IDF_TRY(call_buffers(g, dv, st, bq, n, outt, prec));
        IDF_TRY(launch_shape(g, o, st, n, qmax, qsplit != NULL, &sh));
        cudaStream_t s0 = (cudaStream_t)pgpu_stream(g, 0);
        IDF_TRY(send_queries(dv, prec, queries, qstride, qcount, qsplit, q0, bq, n, outt, s0));
        idf_launch_t L = launch_params(dv, st, n, &sh, o);
        if (qsplit) L.qsplit = dv->d_qcount + bq;
        PGPU_CU_GOTO(cudaEventRecord(ev[0], s0), s, out);
        /* resident slots: one launch */
        if (ndev) {
            L.refs = st->d_arena;
            L.count = st->d_count;
            L.slot0 = 0;
            L.nref = (uint32_t)ndev;
            L.out = dv->d_out;
            if (qsplit) L.out2 = L.out + outn;
            IDF_TRY(launch(L, prec, dim3((unsigned)gx, (unsigned)bq), sh.warps, sh.smem, s0, g->device, sh.wg));
            if (stats) stats->launches++;
        }
        PGPU_CU_GOTO(cudaEventRecord(ev[1], s0), s, out);
        /* streamed slots: chunks over the streams; each stream's lists
         * accumulate in its own region (the kernel starts from them) */
        if (nhost) {
            size_t c0;
            int k = 0;
            for (int i = 0; i < IDF_STREAMS; i++)
                PGPU_CU_GOTO(cudaStreamWaitEvent((cudaStream_t)pgpu_stream(g, i), ev[0], 0), s, out);
            for (c0 = 0; c0 < nhost; c0 += st->stream_slots, k = (k + 1) % IDF_STREAMS) {
                const size_t cn = nhost - c0 < st->stream_slots ? nhost - c0 : st->stream_slots;
                cudaStream_t sk = (cudaStream_t)pgpu_stream(g, k);
                PGPU_CU_GOTO(cudaMemcpyAsync(dv->d_stage[k], tcache_host_at(&st->host, 0, c0), cn * st->slot_bytes,
                                             cudaMemcpyHostToDevice, sk),
                             s, out);
                L.refs = dv->d_stage[k];
                L.count = st->d_count + ndev + c0;
                L.slot0 = (uint32_t)(ndev + c0);
                L.nref = (uint32_t)cn;
                L.out = dv->d_out + (size_t)(1 + k) * bq * nl * K;
                if (qsplit) L.out2 = L.out + outn;
                L.accumulate = 1;
                if (!o->copy_only) {
                    IDF_TRY(launch(L, prec, dim3((unsigned)gxs, (unsigned)bq), sh.warps, sh.smem, sk, g->device,
                                   sh.wg));
                    if (stats) stats->launches++;
                }
                if (stats) stats->h2d_bytes += (double)(cn * st->slot_bytes);
            }
            for (int i = 1; i < IDF_STREAMS; i++) {
                PGPU_CU_GOTO(cudaEventRecord(ev[3], (cudaStream_t)pgpu_stream(g, i)), s, out);
                PGPU_CU_GOTO(cudaStreamWaitEvent(s0, ev[3], 0), s, out);
            }
        }
        PGPU_CU_GOTO(cudaEventRecord(ev[2], s0), s, out);
        PGPU_CU_GOTO(cudaMemcpyAsync(dv->h_out, dv->d_out, outt * sizeof(uint64_t), cudaMemcpyDeviceToHost, s0), s,
                     out);
        PGPU_CU_GOTO(cudaStreamSynchronize(s0), s, out);
        if (stats) {
            float a = 0, b = 0;
            cudaEventElapsedTime(&a, ev[0], ev[1]);
            cudaEventElapsedTime(&b, ev[1], ev[2]);
            stats->ms_resident += a;
            stats->ms_streamed += b;
            stats->syncs++;
        }
        /* merge: per query, the lists of the resident launch (gx blocks)
         * and of each stream's region (gxs blocks) */
        {
            uint64_t *tmp = (uint64_t *)malloc((1 + IDF_STREAMS) * nl * K * sizeof *tmp);
            if (!tmp) {
                s = patina__fail(PATINA_E_NOMEM, "gpu identify: out of memory merging candidates");
                goto out;
            }
            for (size_t q = 0; q < (qsplit ? 2 : 1) * bq; q++) { /* pairs: the companions' from outn on */
                const uint64_t *h = dv->h_out + (q < bq ? 0 : outn);
                uint64_t *kq = (q < bq ? keys : keys2) + (q0 + q % bq) * K;
                size_t t = 0;
                for (int r = 0; r <= IDF_STREAMS; r++) {
                    const size_t blocks = r == 0 ? (ndev ? gx : 0) : (nhost ? gxs : 0);
                    const uint64_t *src = h + ((size_t)r * bq * nl + (q % bq) * (r == 0 ? gx : gxs)) * K;
                    for (size_t b = 0; b < blocks * K; b++)
                        if (src[b]) tmp[t++] = src[b];
                }
                qsort(tmp, t, sizeof *tmp, cmp_key_desc);
                for (size_t j = 0; j < K && j < t; j++) kq[j] = tmp[j];
            }
            free(tmp);
        }
    }
out:
    if (stats) {
        stats->dev_slots += ndev;
        stats->host_slots += nhost;
    }
    return s;
}

patina_status patina_gpu_identify(patina_gpu_t *g, const pgpu_idf_refs_t *refs, const uint8_t *queries,
                                  size_t qstride, const uint16_t *qcount, size_t nq, size_t n,
                                  const pgpu_idf_opts_t *o, uint64_t *keys, pgpu_idf_stats_t *stats)
{
    idf_dev_t *dv;
    idf_mirror_t *st;
    if (stats) memset(stats, 0, sizeof *stats);
    if (!g || !refs || !o || (nq && (!queries || !qcount || !keys)))
        return patina__fail(PATINA_E_INVALID, "gpu identify: null argument");
    PATINA_TRY(check_opts(o));
    PATINA_TRY(check_set(refs, n));
    for (size_t q = 0; q < nq * o->ncap; q++) keys[q] = 0;
    PGPU_CU(cudaSetDevice(g->device));
    PATINA_TRY(dev_state(g, &dv));
    PATINA_TRY(mirror_of(g, dv, refs, o->precision, o->arena_cap, &st));
    if (nq == 0 || refs->nslots == 0) return PATINA_OK;
    return match_mirror(g, dv, st, queries, qstride, qcount, NULL, nq, n, o, keys, NULL, stats);
}

patina_status patina_gpu_identify_pair(patina_gpu_t *g, const pgpu_idf_refs_t *refs, const uint8_t *queries,
                                       size_t qstride, const uint16_t *qcount, const uint16_t *qsplit, size_t nq,
                                       size_t n, const pgpu_idf_opts_t *o, uint64_t *keys, uint64_t *keys2,
                                       pgpu_idf_stats_t *stats)
{
    idf_dev_t *dv;
    idf_mirror_t *st;
    size_t wsmem;
    patina_status s;
    if (stats) memset(stats, 0, sizeof *stats);
    if (!g || !refs || !o || (nq && (!queries || !qcount || !qsplit || !keys || !keys2)))
        return patina__fail(PATINA_E_INVALID, "gpu identify: null argument");
    PATINA_TRY(check_opts(o));
    PATINA_TRY(check_set(refs, n));
    for (size_t q = 0; q < nq * o->ncap; q++) keys[q] = keys2[q] = 0;
    for (size_t q = 0; q < nq; q++)
        if (qsplit[q] > qcount[q])
            return patina__fail(PATINA_E_INVALID, "gpu identify: pair %zu splits %u rows at %u", q, qcount[q],
                                qsplit[q]);
    PGPU_CU(cudaSetDevice(g->device));
    PATINA_TRY(dev_state(g, &dv));
    PATINA_TRY(mirror_of(g, dv, refs, o->precision, o->arena_cap, &st));
    if (nq == 0 || refs->nslots == 0) return PATINA_OK;
    if (o->scoring != IDF_SCORE_MUTUAL && use_wgmma(g, o, st->prec, st->mpad, n, o->ncap, 1, &wsmem))
        return match_mirror(g, dv, st, queries, qstride, qcount, qsplit, nq, n, o, keys, keys2, stats);
    /* no fused kernel here (mma.sync; mutual scoring's column maxima would mix the two): the queries, then
     * their companions moved to the front of their rows, as two calls */
    {
        uint16_t *c = (uint16_t *)malloc(2 * nq * sizeof *c);
        uint8_t *b = (uint8_t *)malloc(nq * qstride + 1);
        if (!c || !b) {
            free(c);
            free(b);
            return patina__fail(PATINA_E_NOMEM, "gpu identify: out of memory for %zu companions", nq);
        }
        for (size_t q = 0; q < nq; q++) {
            c[q] = qsplit[q];
            c[nq + q] = (uint16_t)(qcount[q] - qsplit[q]);
            memcpy(b + q * qstride, queries + q * qstride + (size_t)qsplit[q] * IDF_D, (size_t)c[nq + q] * IDF_D);
        }
        s = match_mirror(g, dv, st, queries, qstride, c, NULL, nq, n, o, keys, NULL, stats);
        if (s == PATINA_OK) s = match_mirror(g, dv, st, b, qstride, c + nq, NULL, nq, n, o, keys2, NULL, NULL);
        free(c);
        free(b);
        return s;
    }
}

/* ------------------------------------------------------ several sets at once */

/* The matching of nq queries against nb resident mirrors (every slot in
 * the device arena), mirror b's candidates into keys + set[b] * nq * ncap
 * (zero on entry): per batch of IDF_QBATCH queries, the queries sent once,
 * every mirror's launch queued back to back (over the streams, each into
 * its own region of the lists), one wait and one copy of all the lists
 * back, then each mirror's lists merged as match_mirror merges them. The
 * mirrors are pinned in the table cache by the caller: the buffers
 * allocated here cannot drop them. */
static patina_status match_batch(patina_gpu_t *g, idf_dev_t *dv, idf_mirror_t *const *mi, const size_t *set,
                                 size_t nb, const uint8_t *queries, size_t qstride, const uint16_t *qcount, size_t nq,
                                 size_t n, const pgpu_idf_opts_t *o, uint64_t *keys, pgpu_idf_stats_t *stats)
{
    const int prec = o->precision;
    const size_t K = o->ncap, qb = nq < IDF_QBATCH ? nq : IDF_QBATCH;
    const int nstreams = nb < IDF_STREAMS ? (int)nb : IDF_STREAMS;
    cudaStream_t s0 = (cudaStream_t)pgpu_stream(g, 0);
    cudaEvent_t ev[4];
    patina_status s = PATINA_OK;
    size_t *gx = (size_t *)malloc(2 * nb * sizeof *gx), *off = gx + nb;
    uint64_t *tmp = NULL;
    if (!gx) return patina__fail(PATINA_E_NOMEM, "gpu identify: out of memory for %zu sets", nb);
    for (int i = 0; i < 4; i++) ev[i] = (cudaEvent_t)dv->ev[i];
    for (size_t q0 = 0; q0 < nq; q0 += qb) {
        const size_t bq = nq - q0 < qb ? nq - q0 : qb;
        size_t qmax = 0, outn = 0, gmax = 0;
        for (size_t q = 0; q < bq; q++) qmax = qcount[q0 + q] > qmax ? qcount[q0 + q] : qmax;
        if (qmax == 0) continue; /* no query of the batch has a row: no candidates */
        /* mirror b's lists: bq * gx[b] blocks of K at off[b] (its resident launch's, as match_mirror's) */
        for (size_t b = 0; b < nb; b++) {
            gx[b] = idf_blocks_per_query(bq, (size_t)g->sm_count, (mi[b]->nslots + 7) / 8);
            off[b] = outn;
            outn += bq * gx[b] * K;
            gmax = gx[b] > gmax ? gx[b] : gmax;
        }
        IDF_TRY(call_buffers(g, dv, mi[0], bq, n, outn, prec));
        free(tmp);
        if (!(tmp = (uint64_t *)malloc(gmax * K * sizeof *tmp))) {
            s = patina__fail(PATINA_E_NOMEM, "gpu identify: out of memory merging candidates");
            goto out;
        }
        IDF_TRY(send_queries(dv, prec, queries, qstride, qcount, NULL, q0, bq, n, outn, s0));
        PGPU_CU_GOTO(cudaEventRecord(ev[0], s0), s, out);
        for (int i = 1; i < nstreams; i++)
            PGPU_CU_GOTO(cudaStreamWaitEvent((cudaStream_t)pgpu_stream(g, i), ev[0], 0), s, out);
        for (size_t b = 0; b < nb; b++) {
            idf_shape_t sh;
            cudaStream_t sk = (cudaStream_t)pgpu_stream(g, (int)(b % (size_t)nstreams));
            IDF_TRY(launch_shape(g, o, mi[b], n, qmax, 0, &sh));
            idf_launch_t L = launch_params(dv, mi[b], n, &sh, o);
            L.refs = mi[b]->d_arena;
            L.count = mi[b]->d_count;
            L.slot0 = 0;
            L.nref = (uint32_t)mi[b]->nslots;
            L.out = dv->d_out + off[b];
            IDF_TRY(launch(L, prec, dim3((unsigned)gx[b], (unsigned)bq), sh.warps, sh.smem, sk, g->device, sh.wg));
            if (stats) stats->launches++;
        }
        for (int i = 1; i < nstreams; i++) {
            PGPU_CU_GOTO(cudaEventRecord(ev[3], (cudaStream_t)pgpu_stream(g, i)), s, out);
            PGPU_CU_GOTO(cudaStreamWaitEvent(s0, ev[3], 0), s, out);
        }
        PGPU_CU_GOTO(cudaEventRecord(ev[1], s0), s, out);
        PGPU_CU_GOTO(cudaMemcpyAsync(dv->h_out, dv->d_out, outn * sizeof(uint64_t), cudaMemcpyDeviceToHost, s0), s,
                     out);
        PGPU_CU_GOTO(cudaStreamSynchronize(s0), s, out);
        if (stats) {
            float a = 0;
            cudaEventElapsedTime(&a, ev[0], ev[1]);
            stats->ms_resident += a;
            stats->syncs++;
        }
        for (size_t b = 0; b < nb; b++) {
            uint64_t *kb = keys + set[b] * nq * K;
            for (size_t q = 0; q < bq; q++) {
                const uint64_t *src = dv->h_out + off[b] + q * gx[b] * K;
                size_t t = 0;
                for (size_t e = 0; e < gx[b] * K; e++)
                    if (src[e]) tmp[t++] = src[e];
                qsort(tmp, t, sizeof *tmp, cmp_key_desc);
                for (size_t j = 0; j < K && j < t; j++) kb[(q0 + q) * K + j] = tmp[j];
            }
        }
    }
out:
    free(gx);
    free(tmp);
    return s;
}

/* A failure that less device memory in use may avoid. */
static int short_of_memory(patina_status s) { return s == PATINA_E_LIMIT || s == PATINA_E_NOMEM; }

patina_status patina_gpu_identify_many(patina_gpu_t *g, const pgpu_idf_refs_t *refs, size_t nsets,
                                       const uint8_t *queries, size_t qstride, const uint16_t *qcount, size_t nq,
                                       size_t n, const pgpu_idf_opts_t *o, uint64_t *keys, pgpu_idf_stats_t *stats)
{
    idf_dev_t *dv;
    idf_mirror_t **batch = NULL;
    size_t *bset = NULL, nb = 0, npinned = 0, j;
    unsigned char *alone = NULL; /* (nsets) 1: matched on its own (match_mirror) */
    patina_status s = PATINA_OK;
    if (stats) memset(stats, 0, sizeof *stats);
    if (!g || !o || (nsets && !refs) || (nsets && nq && (!queries || !qcount || !keys)))
        return patina__fail(PATINA_E_INVALID, "gpu identify: null argument");
    PATINA_TRY(check_opts(o));
    for (j = 0; j < nsets; j++) PATINA_TRY(check_set(&refs[j], n));
    for (size_t e = 0; e < nsets * nq * o->ncap; e++) keys[e] = 0;
    if (nsets == 0) return PATINA_OK;
    PGPU_CU(cudaSetDevice(g->device));
    PATINA_TRY(dev_state(g, &dv));
    batch = (idf_mirror_t **)malloc(nsets * sizeof *batch);
    bset = (size_t *)malloc(nsets * sizeof *bset);
    alone = (unsigned char *)calloc(nsets, 1);
    if (!batch || !bset || !alone) {
        s = patina__fail(PATINA_E_NOMEM, "gpu identify: out of memory for %zu sets", nsets);
        goto out;
    }
    /* 1. Every set's mirror up to date, the resident ones pinned into the
     * batch (the making of the next cannot drop them); a mirror with a host
     * tier is matched on its own, as are the sets past a mirror that did
     * not fit beside the pinned ones. */
    for (j = 0; j < nsets; j++) {
        idf_mirror_t *st = NULL;
        for (size_t b = 0; b < nb && !st; b++) /* the same set again: its mirror */
            if (refs[bset[b]].serial == refs[j].serial) st = batch[b];
        if (!st && (s = mirror_of(g, dv, &refs[j], o->precision, o->arena_cap, &st)) != PATINA_OK) {
            if (!short_of_memory(s) || nb == 0) goto out;
            patina_clear_error();
            s = PATINA_OK;
            memset(alone + j, 1, nsets - j);
            break;
        }
        if (nq == 0 || refs[j].nslots == 0) continue; /* nothing to match */
        if (st->nslots > st->dev_cap) {
            alone[j] = 1; /* streams from the host tier */
            continue;
        }
        tcache_pin(g, st, 1);
        npinned++;
        batch[nb] = st;
        bset[nb++] = j;
    }
    /* 2. The batch in one pass; short of memory for its lists, its sets on their own. */
    if (nb) {
        s = match_batch(g, dv, batch, bset, nb, queries, qstride, qcount, nq, n, o, keys, stats);
        for (size_t b = 0; b < nb; b++) tcache_pin(g, batch[b], 0);
        npinned = 0;
        if (short_of_memory(s) && nb > 1) {
            patina_clear_error();
            s = PATINA_OK;
            for (size_t b = 0; b < nb; b++) {
                alone[bset[b]] = 1;
                memset(keys + bset[b] * nq * o->ncap, 0, nq * o->ncap * sizeof *keys);
            }
            if (stats) stats->dev_slots = 0;
        } else if (s != PATINA_OK) {
            goto out;
        } else if (stats) {
            for (size_t b = 0; b < nb; b++) stats->dev_slots += batch[b]->nslots;
        }
    }
    /* 3. The others, one at a time (mirror_of again: one of them may have been dropped since) */
    for (j = 0; j < nsets; j++) {
        idf_mirror_t *st;
        if (!alone[j]) continue;
        if ((s = mirror_of(g, dv, &refs[j], o->precision, o->arena_cap, &st)) != PATINA_OK) goto out;
        if (nq == 0 || refs[j].nslots == 0) continue;
        if ((s = match_mirror(g, dv, st, queries, qstride, qcount, NULL, nq, n, o, keys + j * nq * o->ncap, NULL,
                              stats)) !=
            PATINA_OK)
            goto out;
    }
out:
    for (size_t b = 0; b < npinned; b++) tcache_pin(g, batch[b], 0);
    free(batch);
    free(bset);
    free(alone);
    return s;
}

/* ------------------------------------------------- verification's matches */

#define NN_THREADS 256   /* query rows per block, one per thread */
#define NN_PAIRS 128     /* pairs per round */
#define NN_SMEM_MAX (200u << 10) /* a record's rows in one block's shared memory */

/* k_idf_nn: block (p, y) matches query rows [y NN_THREADS, (y + 1)
 * NN_THREADS) of pair p's query against its record's rows, held in shared
 * memory. Each thread keeps its row's top 2 over the reference rows in
 * increasing order (TOP2_UPDATE of rootsift_match.c: the lower index wins
 * a tie, s2 = s1 on a tie), so best, s1 and s2 are idf_match_fast's. A
 * reference row's best query row is a maximum over every thread of the
 * pair: each warp's best key (dot << 32 | ~j: the larger dot, then the
 * lower j) goes to key[p][i] by a 64-bit atomicMax, which also picks the
 * lower j on ties (idf_match_fast visits query rows in increasing order and
 * replaces only on a larger dot). Dots are exact: 128 u8 x u8 < 2^23. */
__global__ void __launch_bounds__(NN_THREADS)
    k_idf_nn(const unsigned char *q, size_t qbytes, const uint16_t *qcount, const uint32_t *pq,
             const unsigned char *rows, const uint16_t *nr, int n, int m, int32_t *out, unsigned long long *key)
{
    extern __shared__ uint4 sr[];
    const int p = blockIdx.x, j = blockIdx.y * NN_THREADS + threadIdx.x, lane = threadIdx.x & 31;
    const int cnt = nr[p], qc = qcount[pq[p]];
    const uint4 *src = (const uint4 *)(rows + (size_t)p * m * IDF_D);
    for (int t = threadIdx.x; t < cnt * (IDF_D / 16); t += NN_THREADS) sr[t] = src[t];
    __syncthreads();
    if ((int)(blockIdx.y * NN_THREADS) >= qc) return; /* the whole block past the query's rows */
    const bool on = j < qc;
    uint32_t qr[IDF_D / 4];
    {
        const uint4 *qs = (const uint4 *)(q + pq[p] * qbytes + (size_t)(on ? j : 0) * IDF_D);
#pragma unroll
        for (int k = 0; k < IDF_D / 16; k++) {
            const uint4 v = qs[k];
            qr[4 * k] = on ? v.x : 0;
            qr[4 * k + 1] = on ? v.y : 0;
            qr[4 * k + 2] = on ? v.z : 0;
            qr[4 * k + 3] = on ? v.w : 0;
        }
    }
    int b = -1, s1 = -1, s2 = -1;
    const unsigned long long low = 0xffffffffu - (uint32_t)j;
    unsigned long long *kp = key + (size_t)p * m;
    for (int i = 0; i < cnt; i++) {
        const uint4 *r = sr + i * (IDF_D / 16);
        uint32_t d = 0;
#pragma unroll
        for (int k = 0; k < IDF_D / 16; k++) {
            const uint4 v = r[k];
            d = __dp4a(qr[4 * k], v.x, d);
            d = __dp4a(qr[4 * k + 1], v.y, d);
            d = __dp4a(qr[4 * k + 2], v.z, d);
            d = __dp4a(qr[4 * k + 3], v.w, d);
        }
        const int di = (int)d;
        if (di > s1) {
            s2 = s1;
            s1 = di;
            b = i;
        } else if (di > s2) {
            s2 = di;
        }
        unsigned long long kk = on ? ((unsigned long long)d << 32 | low) : 0ull;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const unsigned long long x = __shfl_xor_sync(0xffffffffu, kk, o);
            kk = x > kk ? x : kk;
        }
        if (lane == 0 && kk) atomicMax(kp + i, kk);
    }
    if (on) {
        int32_t *o = out + (size_t)p * 3 * n;
        o[j] = b;
        o[n + j] = s1;
        o[2 * n + j] = s2;
    }
}

patina_status patina_gpu_identify_nn(patina_gpu_t *g, const uint8_t *queries, size_t qstride, const uint16_t *qcount,
                                     size_t nq, size_t n, const uint32_t *pq, const uint8_t *const *rows,
                                     const uint16_t *nr, size_t np, size_t m, int32_t *out)
{
    static std::atomic<int> raised[PGPU_SMEM_DEVICES]; /* k_idf_nn's shared memory limits */
    const size_t qb = n * IDF_D, rb = m * IDF_D, per = 3 * n + 2 * m;
    const size_t R = np < NN_PAIRS ? np : NN_PAIRS;
    /* one buffer on each side: in = the queries' rows and counts (sent once),
     * then a round's rows, pair queries and counts; out = its lists, keys */
    const size_t o_qc = nq * qb, o_rows = (o_qc + nq * 2 + 15) & ~(size_t)15, o_pq = o_rows + R * rb,
                 o_nr = o_pq + R * 4, o_lists = (o_nr + R * 2 + 15) & ~(size_t)15,
                 o_key = (o_lists + R * 3 * n * 4 + 15) & ~(size_t)15, bytes = o_key + R * m * 8;
    idf_dev_t *dv;
    cudaStream_t s0;
    if (!g || (np && (!queries || !qcount || !pq || !rows || !nr || !out)))
        return patina__fail(PATINA_E_INVALID, "gpu identify nn: null argument");
    if (np == 0) return PATINA_OK;
    if (n == 0 || m == 0 || n > 65535 || m > 65535)
        return patina__fail(PATINA_E_INVALID, "gpu identify nn: %zu query rows, %zu reference rows", n, m);
    if (rb > NN_SMEM_MAX)
        return patina__fail(PATINA_E_LIMIT, "gpu identify nn: %zu reference rows do not fit shared memory", m);
    for (size_t p = 0; p < np; p++)
        if (pq[p] >= nq || nr[p] > m || qcount[pq[p]] > n)
            return patina__fail(PATINA_E_INVALID, "gpu identify nn: pair %zu is out of range", p);
    PGPU_CU(cudaSetDevice(g->device));
    PATINA_TRY(dev_state(g, &dv));
    s0 = (cudaStream_t)pgpu_stream(g, 0);
    if (bytes > dv->nn_cap) {
        pgpu_free_n(g, 2, &dv->h_nn, &dv->d_nn);
        dv->nn_cap = 0;
        PATINA_TRY(pgpu_pin_alloc(g, (void **)&dv->h_nn, bytes, PGPU_FAM_IDENTIFY, "verification staging"));
        PATINA_TRY(tcache_dev_alloc(g, PGPU_FAM_IDENTIFY, NULL, (void **)&dv->d_nn, bytes, "verification matches"));
        dv->nn_cap = bytes;
    }
    PATINA_TRY(pgpu_smem_raise((const void *)k_idf_nn, raised, g->device, rb));
    memcpy(dv->h_nn + o_qc, qcount, nq * 2);
    PGPU_CU(cudaMemcpy2DAsync(dv->d_nn, qb, queries, qstride, qb, nq, cudaMemcpyHostToDevice, s0));
    PGPU_CU(cudaMemcpyAsync(dv->d_nn + o_qc, dv->h_nn + o_qc, nq * 2, cudaMemcpyHostToDevice, s0));
    for (size_t p0 = 0; p0 < np; p0 += R) {
        const size_t bp = np - p0 < R ? np - p0 : R;
        uint32_t *hpq = (uint32_t *)(dv->h_nn + o_pq);
        uint16_t *hnr = (uint16_t *)(dv->h_nn + o_nr);
        const int32_t *hl = (const int32_t *)(dv->h_nn + o_lists);
        const unsigned long long *hk = (const unsigned long long *)(dv->h_nn + o_key);
        for (size_t p = 0; p < bp; p++) {
            memcpy(dv->h_nn + o_rows + p * rb, rows[p0 + p], (size_t)nr[p0 + p] * IDF_D);
            hpq[p] = pq[p0 + p];
            hnr[p] = nr[p0 + p];
        }
        PGPU_CU(cudaMemcpyAsync(dv->d_nn + o_rows, dv->h_nn + o_rows, o_lists - o_rows, cudaMemcpyHostToDevice, s0));
        PGPU_CU(cudaMemsetAsync(dv->d_nn + o_key, 0, bp * m * 8, s0));
        k_idf_nn<<<dim3((unsigned)bp, (unsigned)((n + NN_THREADS - 1) / NN_THREADS)), NN_THREADS, rb, s0>>>(
            dv->d_nn, qb, (const uint16_t *)(dv->d_nn + o_qc), (const uint32_t *)(dv->d_nn + o_pq),
            dv->d_nn + o_rows, (const uint16_t *)(dv->d_nn + o_nr), (int)n, (int)m, (int32_t *)(dv->d_nn + o_lists),
            (unsigned long long *)(dv->d_nn + o_key));
        PGPU_CU(cudaGetLastError());
        PGPU_CU(cudaMemcpyAsync(dv->h_nn + o_lists, dv->d_nn + o_lists, bytes - o_lists, cudaMemcpyDeviceToHost, s0));
        PGPU_CU(cudaStreamSynchronize(s0));
        for (size_t p = 0; p < bp; p++) {
            int32_t *o = out + (p0 + p) * per;
            const size_t qc = qcount[pq[p0 + p]];
            memcpy(o, hl + p * 3 * n, 3 * n * sizeof *o);
            for (size_t j = qc; j < n; j++) o[j] = o[n + j] = o[2 * n + j] = -1;
            for (size_t i = 0; i < m; i++) {
                const unsigned long long kk = i < nr[p0 + p] ? hk[p * m + i] : 0;
                o[3 * n + i] = kk ? (int32_t)(0xffffffffu - (uint32_t)kk) : -1;
                o[3 * n + m + i] = kk ? (int32_t)(kk >> 32) : -1;
            }
        }
    }
    return PATINA_OK;
}
