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
} patina_index_stats_t;

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
} patina_index_opts_t;

/* Expands paths (files and directories) into a sorted list of files;
 * *files is malloc'd with malloc'd strings. Missing paths are reported
 * through on_error (if given) and counted in *missing. */
patina_status patina_expand_paths(char ***files, size_t *n, const char *const *paths,
                                  size_t npaths, size_t *missing,
                                  void (*on_error)(void *, const char *, patina_status, const char *),
                                  void *user);

/* Indexes files into the collection with the extractor. Returns PATINA_OK
 * when the run completed (stats->failed says how many files failed), or the
 * status of an error that stopped the whole run (store full, GPU failure). */
patina_status patina_index_files(patina_context_t *ctx, patina_collection_t *c,
                                 const patina_extractor_t *ex, const char *const *files,
                                 size_t n, const patina_index_opts_t *opts,
                                 patina_index_stats_t *stats);

#ifdef __cplusplus
}
#endif
#endif
