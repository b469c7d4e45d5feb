/* Indexing pipeline: files -> decode workers -> batches -> extract (CPU, GPU
 * or hybrid) -> one store transaction per batch.
 *
 * Paths may be files or directories (recursed, sorted, hidden entries
 * skipped). A file whose key (the path as given/walked) is already stored
 * with the same SHA-256 is skipped, so an interrupted run resumes. A file
 * that fails (unreadable, corrupt, unsupported, over limit) is reported
 * through on_error and counted; the others still succeed. */
#ifndef PATINA_PIPELINE_H
#define PATINA_PIPELINE_H

#include <stddef.h>
#include <stdint.h>
#include "patina/descriptor.h"
#include "patina/status.h"
#include "patina/store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct patina_index_stats {
    uint64_t files;      /* files found */
    uint64_t indexed;    /* newly stored (or replaced) */
    uint64_t skipped;    /* already stored with the same content */
    uint64_t failed;     /* could not be read, decoded or stored */
    uint64_t bytes;      /* encoded bytes read */
    uint64_t pixels;     /* decoded pixels */
    double seconds;      /* wall time so far */
    patina_device device;/* device the descriptors were computed on */
    uint64_t gpu_decoded;/* images decoded by nvJPEG (PATINA_JPEG_NVJPEG) */
    /* Wall seconds per stage, summed over batches. read + decode run on the
     * producer side, overlapping extract + store when the device is the GPU;
     * wait is the time the store side waited for the producer. */
    double t_read, t_decode, t_extract, t_store, t_wait;
} patina_index_stats_t;

/* Who decodes JPEG files. libjpeg-turbo gives the reference's pixels (LIRE's
 * descriptors to the bit); nvJPEG decodes on the GPU (the JPEG engines where
 * the device has them) straight into device memory, close to but not
 * identical with those pixels (docs/images.md), and needs --device gpu and
 * a family whose GPU path reads device memory (cedd). Files nvJPEG does not
 * take (progressive, CMYK, not JPEG, damaged) are decoded on the CPU. */
typedef enum patina_jpeg_decoder {
    PATINA_JPEG_LIBJPEG = 0,
    PATINA_JPEG_NVJPEG = 1
} patina_jpeg_decoder;

/* 1 when nvJPEG can be loaded at run time with the context's nvjpeg_library
 * setting (ctx NULL: the default names); why (may be NULL) gets the
 * library's name or the reason it cannot be used. */
PATINA_API int patina_jpeg_gpu_available(const patina_context_t *ctx, char *why, size_t size);

/* Opens the context's nvJPEG decoders now rather than in the first
 * patina_index_files call that asks for them (creating them takes a large
 * fraction of a second; they stay open until patina_context_free). */
PATINA_API patina_status patina_jpeg_gpu_prepare(patina_context_t *ctx);

/* Parses "libjpeg" or "nvjpeg". */
PATINA_API patina_status patina_jpeg_decoder_parse(patina_jpeg_decoder *d, const char *name);

typedef struct patina_index_opts {
    patina_device device;    /* default AUTO */
    int jobs;                /* decode workers; 0 = context threads */
    size_t batch;            /* images per extraction batch and transaction; 0 = 256 */
    uint64_t max_batch_pixels; /* decoded pixels one batch may hold (x3 bytes; two batches
                                  are in flight with the GPU); 0 = 256 Mpixel */
    /* Called from the calling thread after each batch (may be NULL). */
    void (*progress)(void *user, const patina_index_stats_t *s);
    /* Called once per failed file, from the calling thread (may be NULL). */
    void (*on_error)(void *user, const char *path, patina_status s, const char *message);
    void *user;
    patina_jpeg_decoder jpeg_decoder; /* default PATINA_JPEG_LIBJPEG */
    /* With nvJPEG: the fraction of each batch's JPEGs it decodes while the
     * CPU workers decode the rest. 0 = all it supports (the fastest on an
     * H100: CPU decoders slow down the threads that feed the JPEG engines);
     * negative = adapt the share to the rates measured per batch. */
    double nvjpeg_share;
} patina_index_opts_t;

/* Expands paths (files and directories) into a sorted list of files;
 * *files is malloc'd with malloc'd strings. Missing paths are reported
 * through on_error (if given) and counted in *missing. */
PATINA_API patina_status patina_expand_paths(char ***files, size_t *n, const char *const *paths,
                                             size_t npaths, size_t *missing,
                                             void (*on_error)(void *, const char *, patina_status, const char *),
                                             void *user);

/* Indexes files into the collection with the extractor. Returns PATINA_OK
 * when the run completed (stats->failed says how many files failed), or the
 * status of an error that stopped the whole run (store full, GPU failure). */
PATINA_API patina_status patina_index_files(patina_context_t *ctx, patina_collection_t *c,
                                            const patina_extractor_t *ex, const char *const *files,
                                            size_t n, const patina_index_opts_t *opts,
                                            patina_index_stats_t *stats);

#ifdef __cplusplus
}
#endif
#endif
