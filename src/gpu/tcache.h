/* Private to src/gpu: the table cache of a device context -- what the
 * search engines keep of their tables on the device and how rows move
 * there (docs/gpu.md "Table cache").
 *
 * Registry. Every table an engine holds on the device (a k-NN index's
 * copy, an SQFD index's or pivot table's copy, the identification arena)
 * is an entry: its owner (the index, pivot table or reference set's
 * serial), its layout kind, the engine's object and how to drop it. The
 * entries of every engine of a context share one least-recently-used
 * order and one device budget: an engine short of device memory
 * (tcache_dev_alloc) drops the least recently used entry of any engine,
 * never the one it is filling, and tries again. (pgpu_dev_alloc first
 * releases the states of the other families when the budget is short, so
 * what competes there is an engine's own entries; when the device itself
 * refuses, every engine's entries do.)
 *
 * Movement. A table over the budget is streamed: its layout kept in pinned
 * host memory and sent a chunk at a time through two device buffers, the
 * copy stream (context stream 1) uploading chunk j + 1 while the compute
 * stream scans chunk j (tcache_stream_t: the events that order them).
 * Rows are laid out in a fixed pseudo-random order (tcache_perm) so that a
 * copy's first rows are a uniform sample for the engines' pilots. The
 * pinned host tier is the cache's (tcache_host_t): the engines say what its
 * fields hold and fill them, but allocate and free no tier storage of
 * their own (their staging buffers, e.g. k-NN's chunk results, stay theirs).
 *
 * Updates. A copy follows its table incrementally where the engine's
 * layout allows it: rows appended, removed rows applied from the table's
 * removal log from the position the copy has seen (tcache_removed), slots
 * whose stamp is newer than the copy's clock uploaded again (the
 * identification arena). */
#ifndef PATINA_GPU_TCACHE_H
#define PATINA_GPU_TCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/context.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Layout kinds (an owner may have one entry of each). */
typedef enum tcache_kind {
    TCACHE_KNN_TC = 1,   /* k-NN, the tensor-core Tanimoto layout (gpu/knn_tc.cuh) */
    TCACHE_KNN_DEF,      /* k-NN, the definition kernels' element-major layout */
    TCACHE_SQFD,         /* SQFD rows in blocks by centroid count, with a pivot table's or not */
    TCACHE_IDENTIFY      /* the identification arena (one reference set) */
} tcache_kind;

/* Drops an engine's object: frees its memory and calls tcache_remove. */
typedef void (*tcache_drop_fn)(patina_gpu_t *g, void *obj);

/* Registers obj (an engine's table on the device) for owner `serial`;
 * it becomes the most recently used. */
patina_status tcache_add(patina_gpu_t *g, pgpu_fam fam, tcache_kind kind, uint64_t serial, void *obj,
                         tcache_drop_fn drop);
/* The object registered for owner `serial` in family fam (NULL: none). */
void *tcache_find(const patina_gpu_t *g, pgpu_fam fam, uint64_t serial);
/* Forgets obj (nothing when it is not registered). */
void tcache_remove(patina_gpu_t *g, const void *obj);
/* obj is used now (most recently used). */
void tcache_touch(patina_gpu_t *g, const void *obj);
/* Pins (pin != 0) or unpins obj: while pinned it is never chosen by
 * tcache_lru, so no allocation drops it (a call that uses several
 * entries at once pins them while it makes the others). Pins count;
 * nothing when obj is not registered. */
void tcache_pin(patina_gpu_t *g, const void *obj, int pin);
/* The least recently used object of family fam (PGPU_NFAM: of any
 * family) other than keep and not pinned; NULL when none. */
void *tcache_lru(patina_gpu_t *g, pgpu_fam fam, const void *keep);
/* Entries registered now for family fam (PGPU_NFAM: all). */
size_t tcache_count(const patina_gpu_t *g, pgpu_fam fam);
/* Frees the registry (patina_gpu_close: the engines' states are released first). */
void tcache_close(patina_gpu_t *g);

/* Device memory for family fam's table or buffers: when the budget or the
 * device is short, drops the least recently used entries (any engine's,
 * never keep) until it fits or none is left. */
patina_status tcache_dev_alloc(patina_gpu_t *g, pgpu_fam fam, const void *keep, void **p, size_t bytes,
                               const char *tag);

/* A fixed pseudo-random permutation of 0 .. n-1 (xorshift from seed ^ n,
 * Fisher-Yates): a copy's rows in this order make its first rows a
 * uniform sample. */
void tcache_perm(uint32_t *perm, size_t n, uint64_t seed);

/* The two chunk buffers of a streamed table, for `*units` units (rows or
 * blocks of rows) each: nf fields, field f of per[f] bytes a unit and pad
 * units more, into *bufs[b * nf + f] (buffer b, field f). While they do
 * not fit the budget (or the device), *units is halved, down to
 * min_units; evict != 0 first drops the least recently used tables
 * (tcache_dev_alloc), else the family's allocation alone decides. On
 * failure nothing stays allocated. */
patina_status tcache_chunk_buffers(patina_gpu_t *g, pgpu_fam fam, int evict, int nf, const size_t *per, size_t pad,
                                   void **const *bufs, size_t *units, size_t min_units, const char *tag);

/* The pinned host tier of a streamed table: page-locked storage of up to
 * cap units (rows or blocks of rows) in nf fields, field f of per[f] bytes
 * a unit (the engine's layout: what goes in each field is its own), units
 * [0, n) in use; appends fill the room up to cap. Its bytes are the
 * family's pinned memory (pgpu_pin_alloc: counted and described with the
 * context's). */
#define TCACHE_HOST_FIELDS 6
typedef struct tcache_host {
    int nf;
    size_t per[TCACHE_HOST_FIELDS]; /* bytes a unit of field f */
    void *p[TCACHE_HOST_FIELDS];    /* pinned (cap, per[f]) */
    size_t n, cap;                  /* units in use; allocated */
} tcache_host_t;

/* Storage for cap units of nf fields (per[f] bytes a unit, tag[f] naming
 * field f in messages), empty (n = 0); what h held before is freed. On
 * failure h holds nothing. */
patina_status tcache_host_reserve(patina_gpu_t *g, tcache_host_t *h, pgpu_fam fam, int nf, const size_t *per,
                                  size_t cap, const char *const *tag);
/* Appends m units: src[f] (m * per[f] bytes) copied into field f, or
 * (src NULL) left for the engine to write in place (tcache_host_at).
 * Returns the first unit appended, or (size_t)-1 when they do not fit
 * (h unchanged). */
size_t tcache_host_append(tcache_host_t *h, size_t m, const void *const *src);
/* Unit u of field f. */
void *tcache_host_at(const tcache_host_t *h, int f, size_t u);
/* Frees the storage; h is empty after. */
void tcache_host_free(patina_gpu_t *g, tcache_host_t *h);

/* Double-buffered streaming of a table's chunks through two device
 * buffers: chunk j goes to buffer j & 1 on the copy stream once chunk j -
 * 2 has left it, and the compute stream starts on it once it is there. */
typedef struct tcache_stream {
    void *ev[4]; /* cudaEvent_t: uploaded[2], released[2] */
} tcache_stream_t;

patina_status tcache_stream_init(tcache_stream_t *s);
void tcache_stream_free(tcache_stream_t *s);
/* The copy stream (a cudaStream_t) of a context. */
void *tcache_copy_stream(patina_gpu_t *g);
/* Chunk j sent to its buffer (j & 1): on the copy stream, once chunk j - 2
 * has left that buffer, nf host-to-device copies (src[f] pinned, bytes[f]
 * each, into dst[f]); the compute stream cs waits for them. Returns a
 * cudaError_t. */
int tcache_chunk_send(patina_gpu_t *g, const tcache_stream_t *s, size_t j, void *cs, int nf, void *const *dst,
                      const void *const *src, const size_t *bytes);
/* After the last work on chunk j queued on cs: its buffer may be refilled. */
int tcache_chunk_done(const tcache_stream_t *s, size_t j, void *cs);

#ifdef __cplusplus
}
#endif
#endif
