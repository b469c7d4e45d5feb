/* Collections: image records and descriptor tables in an LMDB environment.
 *
 * A collection is a directory. It holds image records (id, key = path as
 * indexed, file size, SHA-256 of the content, file mtime, time added, width,
 * height) and, per descriptor spec (e.g. "cedd:compact=0"), a table of
 * descriptors keyed by image id. Every write is one LMDB transaction: a crash
 * or a full disk loses nothing that was committed, and an interrupted index
 * run resumes by skipping keys whose content hash is already stored.
 * Several processes may read while one writes; a second writer waits for the
 * lock (LMDB's writer mutex).
 *
 * Strings returned inside records are owned by the record; release them with
 * patina_record_release. */
#ifndef PATINA_STORE_H
#define PATINA_STORE_H

#include <stddef.h>
#include <stdint.h>
#include "patina/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct patina_collection patina_collection_t;

enum {
    PATINA_OPEN_READONLY = 0,
    PATINA_OPEN_WRITE = 1,  /* open an existing collection for writing */
    PATINA_OPEN_CREATE = 3  /* create the directory if missing (implies WRITE) */
};

typedef struct patina_record {
    uint64_t id;            /* 1, 2, ... assigned on insert, never reused */
    char *key;              /* owned */
    uint64_t size;          /* bytes of the file */
    uint8_t sha256[32];
    int64_t mtime;          /* seconds since the epoch, of the file */
    int64_t added;          /* seconds since the epoch, when indexed */
    int32_t width, height;
} patina_record_t;

void patina_record_release(patina_record_t *rec); /* frees key, zeroes */

/* Opens (or creates) the collection at `dir`. map_size 0 = default (64 GiB
 * of address space; the file grows as needed). */
patina_status patina_collection_open(patina_collection_t **c, const char *dir, int flags,
                                     uint64_t map_size);
void patina_collection_close(patina_collection_t *c); /* accepts NULL */

/* Number of image records. */
patina_status patina_collection_count(patina_collection_t *c, uint64_t *n);

/* Looks a record up by key or id: PATINA_E_NOTFOUND when absent. */
patina_status patina_collection_get_by_key(patina_collection_t *c, const char *key,
                                           patina_record_t *rec);
patina_status patina_collection_get(patina_collection_t *c, uint64_t id, patina_record_t *rec);

/* One image to add, with its descriptor for table `spec`. */
typedef struct patina_insert {
    const char *key;
    uint64_t size;
    uint8_t sha256[32];
    int64_t mtime;
    int32_t width, height;
    const void *desc;       /* desc_bytes bytes, borrowed */
} patina_insert_t;

/* Adds n images and their descriptors in ONE transaction. A key that exists
 * already is replaced (its old descriptors in every table are removed; it
 * keeps its id). ids (may be NULL) receives the ids. The table's descriptor
 * size is fixed by its first insert; a different size fails. */
patina_status patina_collection_put(patina_collection_t *c, const char *spec, size_t desc_bytes,
                                    const patina_insert_t *items, size_t n, uint64_t *ids);

/* Removes an image record and its descriptors in every table. */
patina_status patina_collection_remove(patina_collection_t *c, uint64_t id);

/* Iterates records in id order. Start with *cursor = 0; returns PATINA_DONE
 * at the end. rec must be released by the caller each time. */
patina_status patina_collection_next(patina_collection_t *c, uint64_t *cursor,
                                     patina_record_t *rec);

/* Names of the descriptor tables (specs) in the collection; *specs is a
 * malloc'd array of malloc'd strings (free each, then the array). */
patina_status patina_collection_tables(patina_collection_t *c, char ***specs, size_t *n);

/* Loads table `spec` into one contiguous matrix: *ids (n) and *descs
 * (n, *desc_bytes) row-major, in id order; both malloc'd, caller frees.
 * PATINA_E_NOTFOUND when the table does not exist. */
patina_status patina_collection_load(patina_collection_t *c, const char *spec, uint64_t **ids,
                                     uint8_t **descs, size_t *n, size_t *desc_bytes);

/* SHA-256 of a buffer (FIPS 180-4). */
void patina_sha256(uint8_t out[32], const void *data, size_t size);

#ifdef __cplusplus
}
#endif
#endif
