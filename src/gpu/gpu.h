/* The library's C view of the CUDA side. Implemented by the .cu files in src/gpu when
 * nvcc is found, and by src/gpu/nogpu.c (every call: "unavailable")
 * otherwise. CUDA errors become statuses here, at the boundary. The device
 * calls the core itself makes (enumerate, open and close a device and its
 * JPEG decoders, describe its memory) are declared in core/context.h, which
 * this header includes; src/gpu implements them too.
 *
 * A patina_gpu_t is a device context: the device, its streams, pinned
 * staging buffers and a scratch arena sized from a memory budget. One
 * context is used by one thread at a time. */
#ifndef PATINA_GPU_H
#define PATINA_GPU_H

#include <stddef.h>
#include <stdint.h>
#include "core/context.h"
#include "core/internal.h"
#include "patina/glcm.h"
#include "patina/cedd.h"
#include "patina/image.h"
#include "patina/search.h"
#include "patina/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Pinned (page-locked) host memory, for callers that want the fastest
 * host-to-device path. NULL on failure or without a GPU. */
void *patina_gpu_host_alloc(size_t bytes);
void patina_gpu_host_free(void *p);

/* GPU-only CEDD of n images (any stride): out is (n, 144) host memory.
 * Pinned host memory is copied directly, pageable memory through pinned
 * staging buffers; device memory of this context's device (see
 * patina_gpu__dev_alloc) is read in place, with no copy. st[i] per image (may
 * be NULL): invalid images get PATINA_E_INVALID and zeros, as on the CPU.
 * Batched from the budget; streams overlap copies with compute. */
patina_status patina_gpu_cedd(patina_gpu_t *g, uint8_t *out, const patina_image_t *imgs, size_t n,
                              int compact, patina_status *st);

/* The hybrid design's CPU stage: the block sums of block row `by` of img
 * into out[0 .. g->nbx) (features/cedd_ref.h: cedd_block_row_sums). */
struct cedd_block;
struct cedd_geom;
typedef void (*pgpu_cedd_rows_fn)(struct cedd_block *out, const patina_image_t *img,
                                  const struct cedd_geom *g, int by);

/* Hybrid CEDD: CPU workers of `pool` compute each image's block sums with
 * `rows` into pinned buffers while the GPU turns earlier ones into
 * descriptors; only the block sums cross PCIe. Same output. */
patina_status patina_gpu_cedd_hybrid(patina_gpu_t *g, patina_pool_t *pool, pgpu_cedd_rows_fn rows,
                                     uint8_t *out, const patina_image_t *imgs, size_t n, int compact,
                                     patina_status *st);

/* ---- JPEG decoding on the GPU (src/gpu/nvjpeg.c: nvJPEG loaded at run time) ----
 * Close to, not identical with, libjpeg-turbo's pixels: opt-in. */
/* 1 when libnvjpeg (`library`: a path or file name; NULL: the usual names)
 * can be loaded; why (may be NULL) gets its path or the reason it cannot. */
int patina_gpu_jpeg_available(const char *library, char *why, size_t size);

/* patina_gpu_jpeg_open and _close: core/context.h. */
int patina_gpu_jpeg_lanes(const patina_jpeg_gpu_t *d);
const char *patina_gpu_jpeg_backend(const patina_jpeg_gpu_t *d); /* "hardware", "gpu-hybrid" */

/* Decodes n JPEG streams into RGB images in device memory owned by d
 * (out[i].owned = 0), valid until the next call on d. st[i] = PATINA_OK for
 * the images decoded; the others (not supported by the backend, no
 * end-of-image marker, or in a batch that failed) get PATINA_E_FORMAT and
 * are left to the CPU decoder. The return value is an error only when the
 * decoder itself failed (device memory, initialisation). */
patina_status patina_gpu_jpeg_decode(patina_jpeg_gpu_t *d, patina_image_t *out,
                                     const void *const *data, const size_t *size, size_t n,
                                     patina_status *st);

/* ---- exact JPEG decoding on the GPU (src/gpu/jpeg_exact.cu) ----
 * Pixels byte-identical to the CPU path's (libjpeg-turbo as src/image/jpeg.c
 * configures it): entropy decoding by libjpeg-turbo on the CPU threads of a
 * pool (src/image/jpeg_exact.h), the integer arithmetic after it
 * (src/algo/jpeg_exact_core.h) on the device, many images per launch. */
/* patina_gpu_jpegx_open and _close: core/context.h. */

/* Decodes n JPEG streams into RGB images in device memory owned by d
 * (out[i].owned = 0, stride 3w rounded up to 128 bytes), valid until the next
 * call on d. On entry out[i].width and .height are the sizes the caller's
 * probe found (they size the arena; a stream of another size is not taken).
 * Entropy decoding runs on pool's workers (NULL: the calling thread) into
 * pinned staging, in rounds bounded by its size; the device works on one
 * round while the workers decode the next. st[i] = PATINA_OK for the images
 * decoded; the others (not taken: see jpeg_exact.h, or larger than a round)
 * get PATINA_E_FORMAT and are left to the CPU decoder, which gives the CPU
 * path's result. The return value is an error only when the decoder itself
 * failed (device memory, a CUDA error); then every st[i] is PATINA_E_FORMAT. */
patina_status patina_gpu_jpegx_decode(patina_jpegx_gpu_t *d, patina_pool_t *pool, patina_image_t *out,
                                      const void *const *data, const size_t *size, size_t n,
                                      patina_status *st);

/* patina_gpu_jpegx_decode in two halves, so that the caller can work while
 * the device finishes: _submit returns once the host stage is done and the
 * last round is launched, st[i] = PATINA_OK for the images on their way
 * (out[i] set; not readable yet) and PATINA_E_FORMAT for those not taken.
 * _finish(d, out, n, st), with the same arrays, waits for the device: the
 * images it flagged get PATINA_E_FORMAT and an empty out[i]; the others are
 * then readable. Every _submit needs its _finish before d's next call (a
 * call on d without it waits for the device and drops the unfinished call's
 * results); an error from either leaves nothing in flight and every st[i]
 * E_FORMAT. */
patina_status patina_gpu_jpegx_submit(patina_jpegx_gpu_t *d, patina_pool_t *pool, patina_image_t *out,
                                      const void *const *data, const size_t *size, size_t n,
                                      patina_status *st);
patina_status patina_gpu_jpegx_finish(patina_jpegx_gpu_t *d, patina_image_t *out, size_t n, patina_status *st);

/* Where a decoder's time went, summed over its calls since it was opened
 * (wall seconds of the calling thread). */
typedef struct patina_jpegx_times {
    double setup;    /* allocating its staging, device buffers and arena (first use, a larger call) */
    double entropy;  /* the host stage: the workers entropy-decoding and staging each round */
    double wait;     /* waiting for the device stage of a round (in _submit and _finish) */
    uint64_t setups; /* calls that allocated */
    uint64_t gpu_entropy; /* images entropy-decoded on the device (gpu_entropy on, baseline Huffman) */
    uint64_t gpu_flagged; /* of those, flagged and left to the CPU decoder (or outside the exact range) */
    uint64_t gpu_slow;    /* of those, flagged JH_E_SLOW only for speed (chunks not in step) */
} patina_jpegx_times_t;
void patina_gpu_jpegx_times(const patina_jpegx_gpu_t *d, patina_jpegx_times_t *t); /* d NULL: zeros */

/* Entropy decoding of baseline Huffman files on the device
 * (src/gpu/jpeg_huff.cu; the CPU workers read the header and destuff the
 * scan) or, off, by libjpeg-turbo on the workers for every file; on by
 * default. Same pixels either way (files the device flags are left to the
 * CPU decoder). on: 0 the CPU workers for every file; 1 the device for
 * every baseline Huffman file (tests, timing); 2 (the default) the same,
 * except that a round in which more than 1 in 16 of the device's images
 * came back JH_E_SLOW sends the next 32 rounds' files to the CPU workers,
 * then the device is tried again. Takes effect at the next call. */
void patina_gpu_jpegx_set_gpu_entropy(patina_jpegx_gpu_t *d, int on);

/* In mode 2, images of fewer than px pixels (width x height) go to the CPU
 * workers' entropy decoding whatever the rounds say: for small images the
 * workers' libjpeg-turbo outruns the device's per-image scan setup
 * (bench_pipeline --huff-min-px measures the split). Default
 * PGPU_JPEGX_HUFF_MIN_PX; takes effect at the next call. */
#define PGPU_JPEGX_HUFF_MIN_PX 0
void patina_gpu_jpegx_set_huff_min_px(patina_jpegx_gpu_t *d, uint64_t px);

/* The Huffman kernels' chunk size in bits (one thread per chunk): 0 (the
 * default) chooses per call from its files' size (smaller chunks for calls
 * too small to fill the device); else a multiple of 8 from 512 to 65536 for
 * every call (tests, timing; anything else means 0). The coefficients do not
 * depend on it. Takes effect at the next call. */
void patina_gpu_jpegx_set_chunk_bits(patina_jpegx_gpu_t *d, uint32_t bits);

/* The same device stage on images already entropy-decoded (tests and the
 * benchmark's kernel timing): n images im[i] with coefficients coef[i]
 * ((im[i].nblocks, 64) s16 host memory) into device RGB as above;
 * st[i] = PATINA_E_FORMAT for a block outside the exact range. */
struct jx_image;
patina_status patina_gpu_jpegx_pixels(patina_jpegx_gpu_t *d, patina_image_t *out, const struct jx_image *im,
                                      const int16_t *const *coef, size_t n, patina_status *st);

/* ---- device-resident images (the decoders above leave them there) ----
 * Non-zero when img's pixels are in device memory (of any GPU): only a
 * GPU path may read them. A host pointer, or a build without CUDA: 0. */
int patina_gpu_image_on_device(const patina_image_t *img);

/* A host view of img for a family's CPU fallback (an image its kernels
 * leave, PATINA_E_LIMIT): *host = *img (borrowed, owned = 0) when the pixels
 * are in host memory, else a host copy of them (owned; patina_image_release
 * frees it). PATINA_E_NOMEM or a CUDA error (the message says which). */
patina_status patina_gpu_image_host(patina_image_t *host, const patina_image_t *img);

/* ---- exact k-NN on the GPU (src/gpu/knn.cu; src/search/knn.c prepares) ---- */

#define PGPU_KNN_MAXDIM 256 /* Tanimoto fast path: most elements */

/* An index as the GPU search sees it; the arrays are the index's, borrowed
 * for the call and uploaded once per serial (the context keeps the copy). */
typedef struct pgpu_knn_index {
    uint64_t serial;          /* unique per index (never reused in a process) */
    size_t n, dim, bytes;     /* rows, elements and bytes per row */
    patina_elem elem;
    int dist;                 /* pdist_t */
    const uint64_t *ids;      /* (n) */
    const uint8_t *descs;     /* (n, bytes) */
    /* Tanimoto fast path (t1 NULL: off): per row T1 and C3, and the
     * (ptab_rows, 8) table of v / T */
    const uint32_t *t1;
    const double *c3;
    const double *ptab;
    size_t ptab_rows;
    const double *sd;         /* std_l2: (dim) per-element sigma; else NULL */
    /* live updates: rows not removed, the removed flags (n; NULL: none),
     * and the rows removed since the index's serial began, in order
     * (rm_log[0 .. dead_gen)): a copy applies those it has not seen */
    size_t live;
    const uint8_t *dead;
    uint64_t dead_gen;
    const uint32_t *rm_log;
} pgpu_knn_index_t;

/* One search request of every engine (k-NN, SQFD): the k nearest (k >=
 * 1) or, with k = 0, every row within radius -- the nearest max_hits of
 * them when max_hits > 0 (k-NN engine; the SQFD filter's caller cuts its
 * ranked answer itself). */
typedef struct pgpu_req {
    size_t k;
    double radius;
    size_t max_hits;
} pgpu_req_t;

/* The search of nq queries on g: queries (nq, bytes) their rows (the
 * index's fast path), else qv (nq, dim), the queries' elements as doubles
 * (the definition kernels). The same order and doubles as the CPU.
 * k-NN (rq->k >= 1): hits (nq, k), counts[q] = min(k, n); the caller pads;
 * fast path: k <= PGPU_KNN_KMAX (else PATINA_E_UNAVAILABLE). Range
 * (rq->k = 0): lists[q] malloc'd (NULL when none), counts[q]. cpu (nq):
 * set to 1 for a query the GPU left to the CPU (its hits, list and count
 * untouched), else 0. The index's device copy is made on first use and
 * kept in g; an index whose copy does not fit the device budget is
 * streamed: a Tanimoto fast-path index from its layout in pinned host
 * memory (made on first use and kept in g like a copy), every other index
 * in chunks of rows (each copied, searched and dropped); answers merged.
 * paths (NULL or 5 counters, added to): queries answered by the tensor
 * cores, the float filter, the definition kernels (by the first chunk when
 * chunked), the chunks of rows streamed (0: resident) and the bytes
 * uploaded from pinned host memory. */
#define PGPU_KNN_KMAX 1024
patina_status patina_gpu_knn(patina_gpu_t *g, const pgpu_knn_index_t *idx, const uint8_t *queries,
                             const double *qv, size_t nq, const pgpu_req_t *rq, patina_hit_t *hits,
                             patina_hit_t **lists, size_t *counts, uint8_t *cpu, size_t *paths);

/* k-NN of nq queries over nt >= 2 indexes as one table (the union of
 * their rows), every index on the Tanimoto fast path with the same row
 * size and every query too: one pass of the tensor-core engine over their
 * device copies per batch of queries (one threshold per query, from a
 * pilot of the index with the most live rows), the copies' answers merged
 * by (distance, id). hits (nq, k), counts[q] = min(k, live rows of all);
 * cpu[q] = 1: the query is left to the caller (its hits and count are
 * then not an answer). *taken = 0 (and PATINA_OK): the GPU cannot take
 * these indexes together (a streamed one, copies that do not fit beside
 * each other, no index with k live rows, ...); the caller searches each on
 * its own. paths as patina_gpu_knn's. */
patina_status patina_gpu_knn_many(patina_gpu_t *g, const pgpu_knn_index_t *const *idx, size_t nt,
                                  const uint8_t *queries, size_t nq, size_t k, patina_hit_t *hits, size_t *counts,
                                  uint8_t *cpu, size_t *paths, int *taken);

/* Device copies of indexes that g holds now (for tests). */
size_t patina_gpu__knn_cached(patina_gpu_t *g);

/* ---- SQFD on signature records (src/gpu/sqfd.cu; docs/signature.md "GPU") ----
 * The GPU filters, the CPU ranks: the kernels evaluate every (query, row)
 * pair's SQFD^2 = (Sqq + Soo) - 2 Sqo with the cross term Sqo in float
 * (fp64 accumulation) and a proven bound E on its distance from the
 * reference's double; they return, per query, the rows that may belong to
 * the answer (a superset of it, ties included). The caller computes those
 * rows' distances with the reference (sig_sqfd_self) and ranks them, so
 * the answer is the CPU's exactly. The GPU side reads no record header
 * beyond the documented layout (features/signature.h). */

/* A signature index as the GPU sees it; arrays borrowed for the call. The
 * device copy (the live rows, sorted by centroid count) is kept by the
 * context and remade when serial, gen or n changes. */
typedef struct pgpu_sqfd_index {
    uint64_t serial;          /* unique per index (never reused in a process) */
    uint64_t gen;             /* changes whenever rows are removed */
    size_t n, dim;            /* records, floats per record (8 + 8 K) */
    const float *recs;        /* (n, dim) checked records */
    const double *self;       /* (n) their self terms Soo (sig_self) */
    const uint8_t *dead;      /* (n) 1 = removed (not searched), or NULL */
    /* a pivot table's (src/search/pivots.c; np = 0: none): the copy then
     * carries the table for the GPU filter (patina_gpu_sqfd_filter) */
    size_t np;
    const double *tab;        /* (n, np) row-to-pivot distances */
    const double *pp;         /* (np, np) pivot-to-pivot distances */
} pgpu_sqfd_index_t;

/* What a call did (added to): queries answered, pairs whose SQFD the
 * kernels evaluated, candidates handed back, queries left to the caller. */
typedef struct pgpu_sqfd_stats {
    size_t queries, pairs, candidates, cpu;
    size_t chunks, host_bytes; /* a copy over the device budget: chunks streamed, bytes uploaded */
} pgpu_sqfd_stats_t;

#define PGPU_SQFD_KNN_CAND 4096    /* k-NN candidates per query at most */
#define PGPU_SQFD_RANGE_CAND 16384 /* range candidates per query at most */

/* Candidates of nq queries (queries (nq, idx->dim) checked records, sqq
 * (nq) their self terms) on g for the request rq (max_hits not used): k >
 * 0, every row that may be among a query's k nearest (every row whose
 * reference distance is at most the kth smallest); k = 0, every row whose
 * reference distance may be <= radius.
 * cand[q] malloc'd host row numbers (NULL when none; the caller frees),
 * ncand[q]. cpu[q] = 1 (cand[q] NULL): the GPU leaves query q to the
 * caller -- a query of another alpha or form than the rows, data outside
 * the kernels' domain (docs/signature.md), or more candidates than
 * PGPU_SQFD_*_CAND even with the whole table as pilot. stats may be NULL. */
patina_status patina_gpu_sqfd(patina_gpu_t *g, const pgpu_sqfd_index_t *idx, const float *queries,
                              const double *sqq, size_t nq, const pgpu_req_t *rq, uint32_t **cand,
                              size_t *ncand, uint8_t *cpu, pgpu_sqfd_stats_t *stats);

/* The kernels' SQFD^2 estimate s and its bound e for every (query, row)
 * pair, (nq, n) each in host row order (removed rows get NaN): |s -
 * S_ref| <= e. The pivot tables' query-to-pivot distances (pivots.c), the
 * tests and the lab. PATINA_E_UNAVAILABLE when the data is outside the
 * kernels' domain. */
patina_status patina_gpu_sqfd_pairs(patina_gpu_t *g, const pgpu_sqfd_index_t *idx, const float *queries,
                                     const double *sqq, size_t nq, double *s, double *e);

/* ---- pivot tables on the GPU (docs/signature.md "Filter strategies") ----
 * Both take the pivot index as a pgpu_sqfd_index_t (np > 0 for the filter)
 * and the query's pivot distances as intervals [alo, ahi] that hold the
 * reference's doubles (from patina_gpu_sqfd_pairs), with eps the query's
 * slack of pivots.c. */

/* The paper's pipeline, the GPU side: keys lo <= max(S_ref, 0) <= hi for m
 * rows (host row numbers, m <= PGPU_SQFD_BLOCK) of one query, computed on
 * stream slot (0 or 1; at most one block pending per slot). _submit
 * returns once the work is queued; _wait waits for it and copies the keys
 * into lo, hi (m floats each, host). */
#define PGPU_SQFD_BLOCK 8192
patina_status patina_gpu_sqfd_block_submit(patina_gpu_t *g, const pgpu_sqfd_index_t *idx, int slot,
                                           const float *query, double sqq, const uint32_t *rows, size_t m);
patina_status patina_gpu_sqfd_block_wait(patina_gpu_t *g, int slot, float *lo, float *hi);

/* The GPU filter: the pivot bounds of pivots.c (metric; ptolemaic when
 * ptolemaic != 0) evaluated on the GPU for every (query, row), survivors
 * compacted and their SQFD filtered as patina_gpu_sqfd does (k-NN: a
 * pilot of the rows of smallest metric bound gives the radius). alo, ahi
 * (nq, np), eps (nq). Results as patina_gpu_sqfd; stats->pairs counts the
 * rows whose SQFD was evaluated (pilot included). */
patina_status patina_gpu_sqfd_filter(patina_gpu_t *g, const pgpu_sqfd_index_t *idx, const float *queries,
                                     const double *sqq, size_t nq, const double *alo, const double *ahi,
                                     const double *eps, int ptolemaic, const pgpu_req_t *rq, uint32_t **cand,
                                     size_t *ncand, uint8_t *cpu, pgpu_sqfd_stats_t *stats);

/* Benchmarks and the lab: the median over reps of the scan kernel alone
 * (every pair of nq queries and the resident copy's rows evaluated, nothing
 * kept), in ms of GPU time (CUDA events); the copy is made first, not
 * timed. rows_per_thread: 1 or 2 (the kernel's variants), 0 the
 * production one. */
patina_status patina_gpu__sqfd_scan_ms(patina_gpu_t *g, const pgpu_sqfd_index_t *idx, const float *queries,
                                       const double *sqq, size_t nq, int rows_per_thread, int reps, double *ms);

/* ---- identification (src/gpu/identify.cu; docs/identify.md "GPU") ----
 * A reference set as the GPU side sees it, filled by src/identify (the GPU
 * side reads no record header): slot i's descriptor rows, count of them,
 * u8 at scale 512; count 0 is an empty or removed slot. serial names the
 * set (never reused in a process), epoch its slot layout (a change
 * renumbers slots: the mirror is rebuilt), and stamp the set's clock when
 * the slot last changed (clock: the newest). Slot i's rows are at rows[i],
 * or, with rows NULL, at base + i stride; its count and stamp at count[i
 * step], stamp[i step] (step 0 is 1): a set's items' first rows are a
 * view of every `per`-th slot without a copy. */
typedef struct pgpu_idf_refs {
    uint64_t serial, epoch, clock;
    size_t nslots;            /* slots, in increasing id order */
    size_t m;                 /* rows per record (the spec's m) */
    const uint8_t *const *rows; /* (nslots) each slot's (count, 128) rows (borrowed for the call), or NULL */
    const uint8_t *base;      /* rows NULL: slot 0's rows, slot i's stride bytes further */
    size_t stride;
    const uint16_t *count;    /* (nslots x step) */
    const uint64_t *stamp;    /* (nslots x step) */
    size_t step;
} pgpu_idf_refs_t;

/* Slot i's rows, count and stamp in refs. */
static inline const uint8_t *pgpu_idf_row(const pgpu_idf_refs_t *r, size_t i)
{
    return r->rows ? r->rows[i] : r->base + i * r->stride;
}
static inline uint16_t pgpu_idf_count(const pgpu_idf_refs_t *r, size_t i)
{
    return r->count[i * (r->step ? r->step : 1)];
}
static inline uint64_t pgpu_idf_stamp(const pgpu_idf_refs_t *r, size_t i)
{
    return r->stamp[i * (r->step ? r->step : 1)];
}

#define PGPU_IDF_INT8 0 /* integer tensor cores on the u8 rows (default) */
#define PGPU_IDF_FP16 1 /* half-precision tensor cores on the same values as binary16 */

/* Which int8 matching kernel (the candidates are the same either way). */
#define PGPU_IDF_KERNEL_AUTO 0  /* wgmma where it applies (compute capability 9.0, a build for sm_90, int8,
                                 * m <= 512, n <= 1024, its shared memory fits), else mma.sync */
#define PGPU_IDF_KERNEL_MMA 1   /* mma.sync (sm_80 and up; every shape and precision) */
#define PGPU_IDF_KERNEL_WGMMA 2 /* wgmma; PATINA_E_INVALID where it does not apply */

typedef struct pgpu_idf_opts {
    int precision;            /* PGPU_IDF_INT8 or PGPU_IDF_FP16: the same exact integers either way */
    double ratio;             /* Lowe's ratio (patina_identify_opts_t.ratio) */
    int scoring;              /* patina_identify_scoring: 0 one2one, 1 raw, 2 mutual */
    size_t ncap;              /* candidates per query, 1..1024 (10) */
    size_t arena_cap;         /* device slots at most (0: as many as the budget allows); tests
                               * force streaming from the host tier with a small value */
    int copy_only;            /* benchmarks: stream the host tier without matching it (the copy
                               * rate alone; no candidates come from it) */
    int kernel;               /* PGPU_IDF_KERNEL_* (0: AUTO); benchmarks and tests name one */
} pgpu_idf_opts_t;

/* Where the time of a call went (for benchmarks and tests). */
typedef struct pgpu_idf_stats {
    double ms_resident;       /* matching the device-resident slots (GPU time) */
    double ms_streamed;       /* copying and matching the host-tier slots (GPU time, overlapped) */
    double h2d_bytes;         /* host-tier bytes copied */
    size_t dev_slots, host_slots; /* slots matched from the device arenas, from the host tiers */
    size_t launches;          /* matching kernels launched */
    size_t syncs;             /* waits for candidate lists (one per batch of up to 256 queries with a row
                               * and per round trip: a set on its own, or all the resident sets of an
                               * identify_many call at once); a mirror's uploads are not counted */
} pgpu_idf_stats_t;

/* The best o->ncap candidates of each of nq queries against refs, on g:
 * queries' rows at queries + q * qstride (n rows of 128 u8, the first
 * qcount[q] valid); keys (nq, ncap): (score << 32) | (0xffffffff - slot),
 * descending, 0 past a query's candidates (score 0 is never a candidate).
 * Score, ratio test and tie order are the CPU matcher's exactly. g's
 * mirror of refs -- one per set, found by its serial in g's table cache
 * (gpu/tcache.h), made on the set's first call -- is brought up to date
 * first. stats may be NULL. */
patina_status patina_gpu_identify(patina_gpu_t *g, const pgpu_idf_refs_t *refs, const uint8_t *queries,
                                  size_t qstride, const uint16_t *qcount, size_t nq, size_t n,
                                  const pgpu_idf_opts_t *o, uint64_t *keys, pgpu_idf_stats_t *stats);

#define PGPU_IDF_NMAX 16384 /* query rows (n) of a patina_gpu_identify call at most */

/* patina_gpu_identify of nq pairs: query q's first qsplit[q] rows are one
 * query, its rows [qsplit[q], qcount[q]) another (its companion: the
 * half-size query beside its photograph, patina_table_identify_half);
 * their candidates into keys and keys2 (each (nq, ncap)), exactly what
 * patina_gpu_identify gives each of them. The wgmma kernel reads the
 * references once for both (int8, sm_90, one2one or raw scoring, a
 * pair's rows resident); elsewhere the two go as two calls. */
patina_status patina_gpu_identify_pair(patina_gpu_t *g, const pgpu_idf_refs_t *refs, const uint8_t *queries,
                                       size_t qstride, const uint16_t *qcount, const uint16_t *qsplit, size_t nq,
                                       size_t n, const pgpu_idf_opts_t *o, uint64_t *keys, uint64_t *keys2,
                                       pgpu_idf_stats_t *stats);

/* patina_gpu_identify over nsets reference sets (refs[0 .. nsets), one
 * view each) with the same queries and options, in one pass where it can:
 * every set's mirror brought up to date (each stays its own mirror in g's
 * table cache, as patina_gpu_identify leaves it), then -- per batch of up
 * to 256 queries -- the queries sent once, the launches of every set whose
 * mirror is resident queued back to back over the context's streams, ONE
 * wait and ONE copy of all their candidate lists back. A set whose mirror
 * streams from the host tier is matched on its own (patina_gpu_identify's
 * round trip), and so are the sets that find no device memory beside the
 * ones already made (the mirrors of a pass are pinned in the table cache
 * while the others are made; one that does not fit beside them waits for
 * the pass, then takes the memory the old way). keys (nsets, nq, ncap):
 * set j's keys at keys + j * nq * ncap, exactly patina_gpu_identify's for
 * refs[j] (empty sets: zeros). stats (may be NULL): the call's totals. */
patina_status patina_gpu_identify_many(patina_gpu_t *g, const pgpu_idf_refs_t *refs, size_t nsets,
                                       const uint8_t *queries, size_t qstride, const uint16_t *qcount, size_t nq,
                                       size_t n, const pgpu_idf_opts_t *o, uint64_t *keys, pgpu_idf_stats_t *stats);

/* Verification's matches on the GPU: for each of np (query, reference
 * record) pairs, the 2-NN of the query's rows against the record's rows
 * as idf_match_fast (src/algo/rootsift_match.c) computes them, in integer
 * dots of the u8 rows (scale 512). queries: query q's rows at queries + q *
 * qstride, qcount[q] of them (< n rows each, nq queries); pair p: its
 * query pq[p] (< nq), its record's nr[p] <= m rows at rows[p] (128 u8 each,
 * host memory). out (np, 3 n + 2 m) int32, pair p's at out + p * (3 n + 2 m):
 * best[n], s1[n], s2[n] per query row (rows past the query's count: -1),
 * then qbest[m], qs[m] per reference row (past nr[p]: -1) -- idf_match_fast's
 * values before its conversion to similarities (idf_nn_from_dots makes
 * them). PATINA_E_LIMIT when m rows do not fit a block's shared memory. */
patina_status patina_gpu_identify_nn(patina_gpu_t *g, const uint8_t *queries, size_t qstride, const uint16_t *qcount,
                                     size_t nq, size_t n, const uint32_t *pq, const uint8_t *const *rows,
                                     const uint16_t *nr, size_t np, size_t m, int32_t *out);

/* Bytes of one slot of m rows in the GPU's arena: the rows padded to a
 * multiple of 8 (the kernel's tile), 128 u8 or binary16 each. */
static inline size_t pgpu_idf_slot_bytes(size_t m, int precision)
{
    return ((m + 7) & ~(size_t)7) * 128 * (precision == PGPU_IDF_FP16 ? 2 : 1);
}

/* Slots of m rows the device arena could hold within g's budget now. */
void patina_gpu__identify_capacity(const patina_gpu_t *g, size_t m, int precision, size_t *dev_slots);

/* Drops g's mirror of the reference set `serial` (nothing when g has
 * none): its owner frees the set. */
void patina_gpu_identify_forget(patina_gpu_t *g, uint64_t serial);

/* Tests: the mirrors g holds now and how many mirrors it has built from
 * scratch since its identification state was made (a set's first call, a
 * renumbering, a mirror dropped for memory and made again). */
void patina_gpu__identify_mirrors(patina_gpu_t *g, size_t *mirrors, uint64_t *builds);

/* ---- internal: benchmarks and tests (double underscore = not public) ---- */

/* Tests: the device copies g's table cache holds now, of k-NN / range
 * indexes (search) and of SQFD tables (sqfd). */
void patina_gpu__cached(patina_gpu_t *g, size_t *search, size_t *sqfd);

/* Device memory of the context's device (cudaMalloc); NULL on failure. */
void *patina_gpu__dev_alloc(patina_gpu_t *g, size_t bytes);
void patina_gpu__dev_free(patina_gpu_t *g, void *p); /* accepts NULL */
/* Synchronous copy between host and device memory of this context. */
patina_status patina_gpu__upload(patina_gpu_t *g, void *dst, const void *src, size_t bytes);

/* Tests and benchmarks: the parallel Huffman kernels (src/gpu/jpeg_huff.cu)
 * on a batch staged in host memory (base, bytes: the images' regions; img:
 * nimg images with batch offsets, c0, iv0, flag and nblocks set, nchunk and
 * niv in all) into host coef ((blocks, 64) s16) and flags (nimg); *seconds:
 * the kernels' time (device events; NULL: not measured). Synchronous. */
struct jh_img;
patina_status patina_gpu__jpegh_decode(patina_gpu_t *g, const void *base, size_t bytes, const struct jh_img *img,
                                       uint32_t nimg, uint32_t nchunk, uint32_t niv, int16_t *coef, size_t blocks,
                                       uint32_t *flags, double *seconds);

/* Measured bandwidth in GB/s (1e9 bytes/s): the best of `reps` timed copies
 * of `bytes` after 4 warm-up copies (the hardware limit, not a typical
 * figure): kind 0 = pinned host to device (bytes moved over PCIe); kind 1 =
 * device to device (bytes read + bytes written). */
patina_status patina_gpu__bandwidth(patina_gpu_t *g, int kind, size_t bytes, int reps,
                                    double *gbps);

/* Benchmarks and tests: how a single CEDD k-NN query (k <= 64) runs.
 * PGPU_KNN_ONE_DEFAULT: the one-launch kernel (gpu/knn_tc.cuh k_tc_one:
 * the pilot and the scan by dp4a, theta from the blocks' top-k lists where
 * they fit its shared memory, the answer written by the kernel into pinned
 * host memory); PGPU_KNN_ONE_MULTI: the multi-launch path (pilot, select,
 * scan and final kernels, the batches' path), to time the two in one run;
 * PGPU_KNN_ONE_ALL: the one-launch kernel with theta selected from all the
 * pilot values (staged in shared memory when they fit, else read through
 * L2: its fallback when the lists do not fit); PGPU_KNN_ONE_L2: the same,
 * always through L2. Process-wide; the answers are the same (the tests
 * take every mode). */
#define PGPU_KNN_ONE_MULTI 0
#define PGPU_KNN_ONE_DEFAULT 1
#define PGPU_KNN_ONE_ALL 2
#define PGPU_KNN_ONE_L2 3
void patina_gpu__knn_one(int mode);

/* Tests and benchmarks: the scan of the tensor-core filter (the k-NN and
 * range batches of l2, std_l2, cosine and hellinger descriptors of at most
 * 256 elements). PGPU_IX_KERNEL_AUTO: the wgmma scan on a compute
 * capability 9.0 device for batches of 64 queries or more of 33 to 256
 * elements (limbs of whole 128-byte slabs), else mma.sync;
 * PGPU_IX_KERNEL_MMA: mma.sync always; PGPU_IX_KERNEL_WGMMA: wgmma
 * wherever it applies, whatever the batch. Process-wide, set between
 * calls; the answers are the same. */
#define PGPU_IX_KERNEL_AUTO 0
#define PGPU_IX_KERNEL_MMA 1
#define PGPU_IX_KERNEL_WGMMA 2
void patina_gpu__ix_kernel(int mode);

/* Benchmarks: where a single CEDD k-NN query's time goes (the one-launch
 * path). patina_gpu__knn_prof(1) turns the measurement on for the calls
 * that follow (two CUDA events around the launch, the kernel's phases from
 * its global timer, one clock reading per host step; a few microseconds a
 * call), 0 turns it off (the default: nothing is measured). Process-wide,
 * like patina_gpu__knn_one; patina_gpu__knn_prof_last gives the last
 * measured call's figures (valid 0 when it did not run k_tc_one). Times in
 * microseconds. */
typedef struct pgpu_knn_prof {
    int valid;        /* 1: the call ran k_tc_one with the measurement on */
    double kernel_us; /* the launch alone (CUDA events on the stream) */
    /* the kernel's phases (%globaltimer, as block 0 sees them): */
    double spread_us; /* the last block's start after block 0's */
    double pilot_us;  /* the pilot and the first grid barrier */
    double theta_us;  /* theta selected */
    double scan_us;   /* the filtering scan, to the last block's end */
    double sync_us;   /* from the last block's scan end to block 0 past the second barrier */
    double final_us;  /* block 0's final ranking, in steps: */
    double f_prep_us;   /* the query as the CPU prepares it (C2, its non-zero elements) */
    double f_gather_us; /* the live candidates and their t gathered */
    double f_kth_us;    /* kappa (the take-th largest t) and the survivors compacted */
    double f_ref_us;    /* the survivors' reference distances */
    double f_sort_us;   /* sorted and written */
    size_t cand;      /* the scan's candidates */
    /* the host's steps (CLOCK_MONOTONIC): */
    double begin_us;  /* device, search state, the copy found and brought up to date */
    double prep_us;   /* up to the launch: query sums, buffers, arguments */
    double launch_us; /* the launch call */
    double wait_us;   /* the download queued and the stream synchronised */
    double out_us;    /* the hits converted */
    double meas_us;   /* the measurement's own readings after the answer (in the call's time, in no step) */
    /* a batch, host clock: */
    int batch;           /* 1: a batch (nq > 1) or the call ran tc_knn_pass; the passes are CEDD's
                          * tensor-core engine's (0 for the other engines) */
    double pass_us;      /* the first pass over every query (tc_knn_pass) */
    size_t retried;      /* queries whose candidates overflowed, run again with the whole table as pilot */
    double retry_us;     /* that second pass */
    double resident_us;  /* the whole resident search (begin_us, the passes and the rest) */
} pgpu_knn_prof_t;
void patina_gpu__knn_prof(int on);
void patina_gpu__knn_prof_last(pgpu_knn_prof_t *out);

/* Profiling: on != 0 times the kernels of every batch with CUDA events from
 * now on: ms[0] block sums, ms[1] block contributions, ms[2] accumulation and
 * finishing; ms[3] host time spent checking where images live. Returns the
 * sums since the previous call and the batch count, and resets them. Kernels
 * of different batches overlap, so these are busy times, not wall time.
 * Output pointers may be NULL. */
void patina_gpu__profile(patina_gpu_t *g, int on, double ms[4], uint64_t *batches);

/* Testing: lowers CEDD's per-batch capacities (pixel bytes per batch, block
 * sums per batch, images/pieces per batch) below the planned ones, to force
 * images to be split across pieces and batches. 0 keeps a capacity. Lasts
 * as long as the context's CEDD state (another family needing the memory
 * releases it). */
patina_status patina_gpu__set_caps(patina_gpu_t *g, size_t pixel_bytes, size_t blocks, size_t units);

/* ---- local texture patterns: lbp, lbp8, tlbap, lanadp (src/gpu/lbp.cu; docs/lbp.md) ----
 * The input contract: one configuration in plain numbers and tables, filled
 * by the features side (src/features/lbp_family.c: lbp_gpu_conf) from its
 * resolved options; nothing on the GPU side reads src/features. Kinds,
 * methods and mappings are algo/lbp_core.h's LBP_KIND_*, LBP_M_*, LBP_MAP_*.
 * The tables are borrowed for the duration of a call. */
#define PGPU_LBP_MAX_P 32 /* LBP_MAX_P (algo/lbp_core.h; lbp_kernels.cuh checks) */
typedef struct patina_gpu_lbp_conf {
    int kind;                 /* LBP_KIND_* */
    int P;                    /* circular: samples, 1..32 (3x3 kinds: 8) */
    int method;               /* circular: LBP_M_* */
    int mapping;              /* LBP_MAP_*: the bin of a code without a table entry
                               * (circular, P > 16: u2 or riu2) */
    int grid_rows, grid_cols; /* cells, one histogram each, raster order */
    int nbins;                /* bins per cell */
    int vbins;                /* method var: bins of sqrt(var) over [0, 128) (= nbins) */
    size_t dim;               /* histogram elements: grid_rows * grid_cols * nbins (<= 2^22) */
    int code_bytes;           /* code-map element: 1, 2 or 4 (codes), 8 (var, binary64) */
    double th;                /* tlbap: T in (0, 1] */
    double rp[PGPU_LBP_MAX_P], cp[PGPU_LBP_MAX_P]; /* circular: scikit-image's sample offsets */
    const uint32_t *bins;     /* code -> bin, ncodes entries (3x3 kinds: 256); NULL for var
                               * and for circular codes of more than 16 bits */
    uint32_t ncodes;          /* entries of bins */
    uint8_t ktab[256];        /* tlbap: floor(fl(th * m)) for m = 0..255 */
} patina_gpu_lbp_conf_t;

/* Histogram counts of n RGB images (host memory, any stride; pinned memory
 * is copied directly, pageable memory staged through pinned buffers by the
 * context's host threads): counts (n, c->dim) u32, host memory, equal to the
 * C reference's counts of each image's code map (grey by the project's rule,
 * on the device). Batched from the context's budget: images go in batches
 * of up to a few tens of MiB, each batch in a few large copies, one grey
 * conversion and one counting launch per run of equal sizes; batches
 * alternate between the context's streams so that copies of one overlap the
 * kernels of the previous; the counts of a batch come back in one copy. An
 * image larger than a batch's buffers is streamed through them in row
 * chunks into a grey buffer of its own. st[i] (may be NULL only when the
 * caller needs no per-image outcome): PATINA_OK; PATINA_E_INVALID for a
 * malformed image (zeros, as on the CPU); PATINA_E_LIMIT (zeros) for an
 * image the kernels cannot take (beyond a launch grid's limits, or its grey
 * image beyond the memory budget): the caller computes those on the CPU. */
patina_status patina_gpu_lbp(patina_gpu_t *g, const patina_gpu_lbp_conf_t *c, uint32_t *counts,
                             const patina_image_t *imgs, size_t n, patina_status *st);

/* Internal (tests, lab/lbp, bench_lbp): the production kernels on n grey
 * images (h, w) u8 stored back to back in host memory, uploaded once:
 * codes (n, mh, mw) of c->code_bytes (the code map's shape: circular h x w,
 * 3x3 kinds (h-2) x (w-2)) and/or counts (n, c->dim) u32; either may be
 * NULL. timing (may be NULL): reps launches are timed after one warm-up:
 * ms_alone is the median of single launches on an idle GPU (events around
 * each: includes the host's submission), ms_stream the time per launch of
 * reps launches queued back to back behind a busy GPU (a stream of
 * batches). The results are those of one launch. */
typedef struct patina_gpu_lbp_timing {
    int reps;
    double ms_alone, ms_stream;
} patina_gpu_lbp_timing_t;
patina_status patina_gpu__lbp_grey(patina_gpu_t *g, const patina_gpu_lbp_conf_t *c, const uint8_t *grey,
                                   int w, int h, int n, void *codes, uint32_t *counts,
                                   patina_gpu_lbp_timing_t *timing);

/* Testing: lowers patina_gpu_lbp's capacities per batch (RGB bytes, images;
 * 0 keeps the planned one) to force several batches and the row chunks of
 * large images; narrow != 0 makes the dispatcher take the 4-warp layout of
 * GPUs whose blocks cannot have the wide layout's shared memory. Lasts as
 * long as the context's LBP state (another family needing the memory
 * releases it). */
patina_status patina_gpu__lbp_set_caps(patina_gpu_t *g, size_t rgb_bytes, size_t images, int narrow);

/* ---- feature signatures (src/gpu/signature.cu; docs/signature.md "GPU extraction") ----
 * The configuration of the signature family's GPU path, filled by the
 * features side (src/features/signature.c: sig_gpu) from its options and
 * its sampling plan; the arrays are borrowed for the call. */
typedef struct patina_gpu_sig_conf {
    int samples, seeds, k, iters, minsize, bits, radius, weights, form;
    float join, drop, alpha;    /* the options as the CPU uses them (floats) */
    const float *pts;           /* (samples, 2): sig_plan's points */
    const int *seed_idx;        /* (seeds): sig_plan's initial centroids */
    const double *lin;          /* (256): the CPU's sRGB -> linear values (sig_srgb_linear) */
} patina_gpu_sig_conf_t;

/* Signatures of n images (RGB, any stride, host memory) into out (n,
 * 8 + 8 k) floats, the same bytes as the C reference (sig_extract_with).
 * Images must be valid and non-empty (the caller checks them as the CPU
 * does); st[i] (not NULL): PATINA_OK, or PATINA_E_LIMIT for an image the
 * GPU path cannot take (larger than a batch, or a plan whose per-image
 * scratch exceeds the memory budget) - its record is zeros and the caller
 * computes it on the CPU. The return value is an error only when the call
 * itself failed (then every image not done has that status). */
patina_status patina_gpu_signature(patina_gpu_t *g, const patina_gpu_sig_conf_t *c, float *out,
                                   const patina_image_t *imgs, size_t n, patina_status *st);

/* ---- GLCM (src/gpu/glcm.cu, glcm_features.cu; docs/glcm.md) ----
 * Co-occurrence counts identical to the C reference (patina_glcm_counts),
 * graycoprops properties and Haralick features of whole batches, on g's
 * device (g non-NULL). Images are packed many per launch; an image larger
 * than a slot is streamed in tiles of rows with padding rows (no pair lost
 * or counted twice); copies of one batch overlap the counting of the
 * previous one over the context's streams. Internal knobs: gpu/glcm.h. */

/* One quantised image: q (h, stride) u8 host memory, every value < levels
 * (the kernels index their tables with it). mask (may be NULL): (h,
 * mstride) u8; a pair counts only where both of its pixels are non-zero in
 * it, as in the C reference (levels <= 255). Pinned memory without a mask
 * is copied directly, the rest through pinned staging. */
typedef struct patina_gpu_grey {
    const uint8_t *q;
    int w, h;
    size_t stride;
    const uint8_t *mask;
    size_t mstride;
} patina_gpu_grey_t;

/* Counts of n images for noff offsets: counts (n, noff, levels, levels) u32
 * host memory, P + P^T when symmetric. */
patina_status patina_gpu_glcm_counts(patina_gpu_t *g, uint32_t *counts, const patina_gpu_grey_t *imgs,
                                     size_t n, int levels, const patina_glcm_offset_t *off,
                                     size_t noff, int symmetric);

/* graycoprops properties and Haralick features of nmat count matrices (host,
 * (nmat, levels, levels) u32): props (nmat, 10) and har (nmat, 14), either
 * may be NULL. Features built from integer moments equal the C reference's
 * to a few ulp; those with logarithms agree within 1e-12 relative; the 14th
 * (an eigenvalue) is the C reference's solver, bit for bit (on the GPU for
 * levels <= 64, on the context's host threads above). */
patina_status patina_gpu_glcm_features_of(patina_gpu_t *g, double *props, double *har,
                                          const uint32_t *counts, size_t nmat, int levels);

/* Writes rows [r0, r1) of image i into dst (w[i] bytes per row, rows `pitch`
 * apart): its levels (< levels) where the pixel is inside its mask (or
 * everywhere without one), (level & out_and) | out_or where it is outside
 * (the driver's encoding of the mask: a sentinel level or a flag bit).
 * Returns PATINA_OK, or why image i cannot be counted (its features are then
 * meaningless); it must still write every byte with a value < levels (e.g.
 * zeros). Called from the context's host threads, several at once. */
typedef patina_status (*pgpu_glcm_rows_fn)(void *arg, size_t i, int r0, int r1, uint8_t *dst,
                                           size_t pitch, unsigned out_and, unsigned out_or);

/* n images known by their sizes, whose levels rows() writes on demand. */
typedef struct pgpu_glcm_src {
    size_t n;
    const int *w, *h;       /* (n); an image of 0 pixels has nothing to count */
    int masked;             /* rows() encodes a mask (levels <= 255) */
    pgpu_glcm_rows_fn rows;
    void *arg;
    /* (n) or NULL: an image i with dev[i].data non-NULL is RGB in this GPU's
     * memory (decoded there), made into levels on the device by the C
     * reference's rules (grey by algo/grey.h, uniform quantisation to
     * dev_levels: (grey * dev_levels) >> 8; no mask); rows() is not called
     * for it. */
    const patina_image_t *dev;
    int dev_levels;
} pgpu_glcm_src_t;

/* The glcm and haralick families' primitive: the counts of src's images
 * (as patina_gpu_glcm_counts) and their features (as
 * patina_gpu_glcm_features_of), the counts staying on the device. props
 * (n * noff, 10), har (n * noff, 14), image-major; either may be NULL.
 * st (may be NULL): per image, what rows() returned. The images' rows are
 * written by the context's host threads straight into pinned staging, a
 * batch while the previous one counts. */
patina_status patina_gpu_glcm_features(patina_gpu_t *g, double *props, double *har,
                                       const pgpu_glcm_src_t *src, int levels,
                                       const patina_glcm_offset_t *off, size_t noff, int symmetric,
                                       patina_status *st);


/* ---- rootsift extraction (src/gpu/rootsift.cu; docs/rootsift.md "GPU") ----
 * VLFeat's SIFT as the CPU path runs it (features/rootsift.c), on the GPU:
 * the configuration in plain numbers and tables, filled by the features
 * side (rootsift_gpu_conf) from its options with the host's libm (the
 * Gaussian taps, fast_expn's table), so that the GPU reads no libm value it
 * would compute differently. */
#define PGPU_RS_MAXLEV 8                   /* levels per octave at most */
#define PGPU_RS_MAXTAPS 129                /* 2 W + 1 at most per filter */
#define PGPU_RS_MAXOCT 32
typedef struct patina_gpu_rootsift_conf {
    int levels;               /* S */
    int first_octave;         /* o_min, -1..3 */
    double peak, edge;        /* VLFeat's thresholds */
    double sigma0;            /* 1.6 sigmak */
    int budget;               /* rows of a record (m or n) */
    int quant;                /* 0 u8, 1 f16 */
    float qscale;             /* 512 or 1 */
    size_t rec_bytes;         /* bytes of one record */
    /* Gaussian filters (_vl_sift_smooth's taps, float): filt0 for the first
     * level of the first octave (w0 = 0: none, sa <= sb), filt[s - s_min - 1]
     * for level s = s_min + 1 .. s_max from level s - 1; width W, 2 W + 1 taps */
    int w0;
    float filt0[PGPU_RS_MAXTAPS];
    int fw[PGPU_RS_MAXLEV + 2];
    float filt[PGPU_RS_MAXLEV + 2][PGPU_RS_MAXTAPS];
    double expn[257];         /* fast_expn's table: exp(-k 25 / 256) */
} patina_gpu_rootsift_conf_t;

/* One image as the GPU path takes it: RGB host memory (any stride), the
 * detection size (w, h: the area downscale of docs/rootsift.md when it
 * differs from the original), the octaves VLFeat processes (>= 1; images
 * with none are the caller's), the geometry's scales. */
typedef struct patina_gpu_rootsift_item {
    const patina_image_t *img;
    int w, h, octaves;
    double sx, sy;            /* original / detected pixel size, per axis */
    float down;               /* the record's downscale */
    uint8_t *out;             /* where its record goes (c->rec_bytes, borrowed); NULL: out + i rec_bytes */
} patina_gpu_rootsift_item_t;

/* Records of n images, the CPU path's bytes, into items[i].out, or into
 * out (n, c->rec_bytes) for items whose out is NULL (out may be NULL when
 * every item has its own).
 * st[i] (not NULL): PATINA_OK, or PATINA_E_LIMIT (record zeros) for an
 * image the GPU leaves to the caller: larger than the memory budget allows,
 * or more extrema or keypoints than its buffers hold. The return value is
 * an error only when the call itself failed. */
patina_status patina_gpu_rootsift(patina_gpu_t *g, const patina_gpu_rootsift_conf_t *c, uint8_t *out,
                                  const patina_gpu_rootsift_item_t *items, size_t n, patina_status *st);

/* Internal (tests, bench_rootsift): stage times of the calls since the
 * previous query, in ms of GPU time (events around each stage of each
 * sub-batch on its stream; the two streams overlap, so the sum may exceed
 * the wall time): [0] upload (the grey levels, image table, zeroing), [1]
 * float image and area downscale, [2] scale space (smoothing), [3] DoG,
 * gradients, [4] detection, refinement, orientations, [5] selection, [6]
 * descriptors and records, [7] download. Calls of one image run as a
 * CUDA graph and are not timed (they count in the batches). Resets them. */
#define PGPU_RS_STAGES 8
void patina_gpu__rootsift_times(patina_gpu_t *g, double ms[PGPU_RS_STAGES], size_t *batches);

/* Internal (tests): the smoothing kernels of the context's rootsift state
 * from now on: 0 register-tiled where an instance has the filter's width
 * (the default), 1 the shared-memory tile, the fallback for wider filters,
 * at every width (so that the tests cover it); the same bytes either way.
 * Waits for the state's streams. */
patina_status patina_gpu__rootsift_smoothing(patina_gpu_t *g, int variant);

/* Internal (tests): the orientations' first round from now on: 0 the
 * first budget ranks (the default), 1 none, so that every rank goes through
 * the second, gated round (tests it); the same bytes either way. Waits for
 * the state's streams. */
patina_status patina_gpu__rootsift_orientations(patina_gpu_t *g, int variant);

/* Internal (tests): runs the GPU scale space of one image (w, h floats,
 * host memory; first octave, S + 3 levels, the DoG) and returns octave k's
 * levels (S + 3, h_k, w_k) and DoG (S + 2, h_k, w_k) in host memory (either
 * may be NULL), for the test's per-stage comparison with VLFeat. */
patina_status patina_gpu__rootsift_octave(patina_gpu_t *g, const patina_gpu_rootsift_conf_t *c, const float *im,
                                          int w, int h, int octaves, int k, float *levels, float *dog);

#ifdef __cplusplus
}
#endif
#endif
