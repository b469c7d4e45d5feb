/* Collections: image records and descriptor tables in an LMDB environment.
 *
 * A collection is a directory holding data.mdb and lock.mdb. It holds image
 * records (id, key, file size, SHA-256 of the content, file mtime, time
 * added, width, height), an index of the records by content (SHA-256) and,
 * per descriptor spec (e.g. "cedd:compact=0"), a table of descriptors keyed
 * by image id.
 *
 * Roots and keys. A collection records a root directory, kept relative to
 * the collection's own directory ("..", the directory that holds the
 * collection, unless set otherwise before its first record). The key of a
 * file (patina_collection_key, what patina_index_files stores) is its real
 * path (symbolic links resolved, no "." or "..") relative to the root when
 * it lies under the root, else that real path, absolute: every spelling of
 * one file gives one key, keys do not depend on the working directory,
 * and a collection moved together with the files under its root keeps
 * finding them (patina_collection_key_path). Collections made before roots
 * have none: their keys are the paths as they were given, and stay so.
 * Keys of records put directly (patina_collection_put, the server's
 * uploads) are whatever the caller chose; the store does not interpret them.
 *
 * Guarantees.
 *  - Every write (patina_collection_put, _remove) is one transaction: it is
 *    committed whole or not at all. A crash of the process or the machine,
 *    a full disk or a full map loses nothing that was committed; an
 *    interrupted index run resumes by skipping keys stored with the same
 *    content hash.
 *  - A full disk (ENOSPC, EDQUOT) fails the write with PATINA_E_FULL and a
 *    message saying "no space left on device"; the collection stays as it
 *    was and takes writes again once there is room.
 *  - Creating is atomic (PATINA_OPEN_CREATE): the collection is built in a
 *    temporary directory and moved into place, so the path holds either a
 *    whole, empty collection or what it held before; a creation that fails
 *    (a full disk, say) leaves nothing behind. Any number of processes may
 *    create the same collection at once: all succeed and share one.
 *  - Opening checks data.mdb before it is mapped: a truncated file, damaged
 *    meta pages or a data.mdb or lock.mdb that is not a regular file fail
 *    with PATINA_E_CORRUPT and a message naming the file (never a crash).
 *    Damage inside the B-trees of an otherwise whole file is reported by
 *    LMDB where it notices it (PATINA_E_CORRUPT); it is not checked up front.
 *  - No signal on a full disk: data.mdb is written with pwrite (never
 *    through a writable map), and lock.mdb, which LMDB maps writable, gets
 *    its disk blocks before it is mapped (with no room for them, opening
 *    fails with PATINA_E_FULL). This needs a file system with fallocate
 *    (ext4, xfs, btrfs, tmpfs, ...); elsewhere LMDB runs as it would alone.
 *
 * Concurrency. Across processes: any number of readers, one writer at a
 * time; a second writer (process or thread) blocks in patina_collection_put
 * / _remove until the first commits or aborts. Readers never block. Each
 * read call sees the last committed state as of its start (its own
 * transaction); a run of calls may therefore see records added or removed
 * between them (an iteration with _next, a load followed by record
 * lookups). (LMDB 0.9 lets a read that starts while a commit is being
 * written see that commit early, and the next read the state before it.) A snapshot (patina_snapshot_t) is one read transaction: every
 * read through it sees the same committed state, whatever is written
 * meanwhile. Within a process: one handle may be shared by any number of
 * threads; reads run in parallel, writes are serialised. Opening a
 * collection that the process has open already shares the first open's
 * environment (LMDB must open one environment once per process): the new
 * handle keeps its own mode (READONLY after a writable open fails writes)
 * but the first open's map size, and a writable open while the collection
 * is open READONLY in the process fails with PATINA_E_BUSY. Each open is
 * closed on its own. Do not use a handle in a child after fork(); open a
 * new one there.
 *
 * Strings returned inside records are owned by the record; release them
 * with patina_record_release.
 *
 * Keys. A key is a non-empty string of at most PATINA_KEY_MAX bytes. Keys
 * longer than 480 bytes (LMDB's key limit is 511) are indexed by their
 * SHA-256 and stored in full in the record, so lookups stay exact.
 *
 * Limits. PATINA_TABLES_MAX descriptor tables per collection; specs of at
 * most 400 bytes; descriptors of 1 .. 64 MiB; 1024 reader slots (read
 * transactions open at once: calls in flight and live snapshots, all
 * processes together). A full map or disk makes a write fail with
 * PATINA_E_FULL and changes nothing. */
#ifndef PATINA_STORE_H
#define PATINA_STORE_H

#include <stddef.h>
#include <stdint.h>
#include "patina/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct patina_collection patina_collection_t;

#define PATINA_KEY_MAX 65535
#define PATINA_TABLES_MAX 250

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
    int64_t added;          /* seconds since the epoch, when indexed (a put of the same content under
                             * its key, e.g. a second family's descriptor, keeps it) */
    int32_t width, height;
} patina_record_t;

PATINA_API void patina_record_release(patina_record_t *rec); /* frees key, zeroes */

/* Opens (or creates) the collection at `dir`. map_size 0 = default (64 GiB
 * of address space, halved down to 1 GiB where the system refuses that
 * much, e.g. under ulimit -v; the file grows as needed). map_size is
 * the most the collection may hold; once reached, writes fail with
 * PATINA_E_FULL. A smaller value than the data already needs is raised.
 *
 * Without PATINA_OPEN_CREATE the directory must hold a collection:
 * PATINA_E_NOTFOUND for a missing directory, PATINA_E_FORMAT ("not a patina
 * collection") for any other directory or an LMDB file of another program,
 * and PATINA_E_FORMAT for a collection of a format this build does not
 * read (it reads formats 1 and 2; a format 1 collection becomes format 2
 * on its first write, docs/store.md);
 * PATINA_E_CORRUPT for a damaged data.mdb (see Guarantees); PATINA_E_IO
 * when data.mdb cannot be opened (for writing, without READONLY) or
 * lock.mdb cannot be opened for writing (readers need it too; on a
 * read-only file system READONLY works without it); PATINA_E_FULL when
 * there is no room for lock.mdb. CREATE makes the directory (one level)
 * if missing, or fills an existing empty one (empty but for lock.mdb),
 * atomically; it refuses a non-empty directory that holds no collection
 * and never touches one that holds a damaged collection. READONLY handles
 * fail every write with PATINA_E_INVALID. */
PATINA_API patina_status patina_collection_open(patina_collection_t **c, const char *dir, int flags,
                                                uint64_t map_size);
PATINA_API void patina_collection_close(patina_collection_t *c); /* accepts NULL */

/* The collection's root as an absolute path (resolved where it exists):
 * *dir malloc'd, free it with patina_free. PATINA_E_NOTFOUND for a
 * collection made before roots (its keys are paths as given). */
PATINA_API patina_status patina_collection_root(patina_collection_t *c, char **dir);

/* Records `dir` (an existing directory; relative paths are taken from the
 * working directory) as the root, stored relative to the collection's
 * directory. Allowed only while the collection has never held a record
 * (its next id is 1), or when dir is the recorded root already (then it
 * does nothing): otherwise PATINA_E_INVALID with a message saying which
 * root it has (or that it was made before roots). PATINA_E_NOTFOUND when
 * dir does not exist. */
PATINA_API patina_status patina_collection_set_root(patina_collection_t *c, const char *dir);

/* The canonical key of the file at `path` (see "Roots and keys" above):
 * *key malloc'd, free it with patina_free. The file must exist
 * (PATINA_E_NOTFOUND / PATINA_E_IO, naming it, otherwise). A collection
 * without a root gives the path as given. */
PATINA_API patina_status patina_collection_key(patina_collection_t *c, const char *path, char **key);

/* The file a key names: a relative key joined to the root, an absolute key
 * as it is; a collection without a root gives the key as it is. *path
 * malloc'd, free it with patina_free. Says nothing of whether the file
 * exists or still has the record's content. */
PATINA_API patina_status patina_collection_key_path(patina_collection_t *c, const char *key, char **path);

/* Number of image records. */
PATINA_API patina_status patina_collection_count(patina_collection_t *c, uint64_t *n);

typedef struct patina_collection_info {
    uint32_t format;        /* on-disk format version */
    uint64_t records;       /* image records */
    uint64_t next_id;       /* the id the next new record gets */
    size_t tables;          /* descriptor tables */
    uint64_t map_size;      /* bytes the collection may grow to */
    uint64_t used;          /* bytes of the map in use (last page used) */
    uint32_t page_size;
    uint32_t max_readers;   /* reader slots (concurrent read transactions, all processes) */
} patina_collection_info_t;

/* A snapshot of the collection's counters and sizes. */
PATINA_API patina_status patina_collection_info(patina_collection_t *c, patina_collection_info_t *info);

/* The collection's version: a number that changes with every committed
 * write, by any process or handle (LMDB's last transaction id). A reader
 * that keeps data derived from the collection compares it with the version
 * it loaded at to see whether it is out of date. Cheap (no transaction). */
PATINA_API patina_status patina_collection_version(patina_collection_t *c, uint64_t *version);

/* Rows and descriptor size of table `spec`; PATINA_E_NOTFOUND when absent. */
PATINA_API patina_status patina_collection_table_info(patina_collection_t *c, const char *spec, size_t *n,
                                                      size_t *desc_bytes);

/* Looks a record up by key or id: PATINA_E_NOTFOUND when absent. rec is
 * overwritten (not released first); on success release it. */
PATINA_API patina_status patina_collection_get_by_key(patina_collection_t *c, const char *key,
                                                      patina_record_t *rec);
PATINA_API patina_status patina_collection_get(patina_collection_t *c, uint64_t id, patina_record_t *rec);

/* The record with content `sha256` (the lowest id when several have it):
 * PATINA_E_NOTFOUND when none. Through the content index; in a format 1
 * collection a writable handle builds the index first (one write), a
 * read-only one scans the records. rec as patina_collection_get. */
PATINA_API patina_status patina_collection_get_by_sha256(patina_collection_t *c, const uint8_t sha256[32],
                                                         patina_record_t *rec);

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
 * already is replaced and keeps its id: when its content (SHA-256) changed,
 * its old descriptors in every table are removed; with the same content the
 * other tables' descriptors stay (a second family for stored images); a key repeated within the batch: the last one wins, both
 * get the same id). ids (may be NULL) receives the ids (unspecified when the
 * call fails). The table's
 * descriptor size is fixed by its first insert; a different size fails.
 * Any failure aborts the whole batch: nothing of it is written. A full map
 * or disk gives PATINA_E_FULL. n = 0 does nothing. items and descriptors
 * are copied. */
PATINA_API patina_status patina_collection_put(patina_collection_t *c, const char *spec, size_t desc_bytes,
                                               const patina_insert_t *items, size_t n, uint64_t *ids);

/* One table's descriptors for patina_collection_put_tables: n of desc_bytes
 * each, in the items' order (borrowed). */
typedef struct patina_table_descs {
    const char *spec;
    size_t desc_bytes;
    const void *descs;
} patina_table_descs_t;

/* patina_collection_put for several tables at once: the n images and each
 * table's descriptors in ONE transaction (items[i].desc is ignored), so an
 * image is stored with all its tables or not at all. ntables >= 1, specs
 * distinct; otherwise as patina_collection_put (ids, replacement, sizes,
 * PATINA_E_FULL). */
PATINA_API patina_status patina_collection_put_tables(patina_collection_t *c, const patina_table_descs_t *tables,
                                                      size_t ntables, const patina_insert_t *items, size_t n,
                                                      uint64_t *ids);

/* Copies image id's descriptor of table `spec` (bytes must be the table's
 * size). PATINA_E_NOTFOUND when the table or the descriptor is absent. */
PATINA_API patina_status patina_collection_get_descriptor(patina_collection_t *c, const char *spec,
                                                          uint64_t id, void *out, size_t bytes);

/* Removes an image record and its descriptors in every table (one
 * transaction); PATINA_E_NOTFOUND when absent. Its id is never reused. */
PATINA_API patina_status patina_collection_remove(patina_collection_t *c, uint64_t id);

/* Iterates records in id order. Start with *cursor = 0; each call returns
 * the first record with id > *cursor and sets *cursor to its id; returns
 * PATINA_DONE (rec zeroed) at the end. rec must be released by the caller
 * each time. */
PATINA_API patina_status patina_collection_next(patina_collection_t *c, uint64_t *cursor,
                                                patina_record_t *rec);

/* Names of the descriptor tables (specs) in the collection; *specs is a
 * malloc'd array of malloc'd strings (free each, then the array). */
PATINA_API patina_status patina_collection_tables(patina_collection_t *c, char ***specs, size_t *n);

/* Loads table `spec` into one contiguous matrix: *ids (n) and *descs
 * (n, *desc_bytes) row-major, in id order; both malloc'd, caller frees.
 * PATINA_E_NOTFOUND when the table does not exist. An empty table gives
 * n = 0 and NULL arrays. */
PATINA_API patina_status patina_collection_load(patina_collection_t *c, const char *spec, uint64_t **ids,
                                                uint8_t **descs, size_t *n, size_t *desc_bytes);

/* Auxiliary data: named blobs a collection keeps beside its tables (e.g.
 * a pivot table, include/patina/pivots.h), one transaction per write.
 * Names are non-empty strings of at most 400 bytes; a blob holds up to
 * PATINA_AUX_MAX bytes. put with bytes = 0 deletes the blob (absent: no
 * error). get copies it into *data (malloc'd, the caller frees; NULL when
 * bytes is 0): PATINA_E_NOTFOUND when absent. The store does not read or
 * update a blob when records change: its owner keeps it valid. */
#define PATINA_AUX_MAX ((size_t)1 << 31)
PATINA_API patina_status patina_collection_put_aux(patina_collection_t *c, const char *name, const void *data,
                                                   size_t bytes);
PATINA_API patina_status patina_collection_get_aux(patina_collection_t *c, const char *name, void **data,
                                                   size_t *bytes);

/* Snapshots: consistent reads across calls.
 *
 * A snapshot is one LMDB read transaction on a collection: loads and
 * record lookups through it all see the state committed when it was taken,
 * so the records of the ids a load returned are there to look up however
 * much is removed meanwhile (a search reports keys from the snapshot its
 * index was loaded from). A snapshot borrows the collection (free it
 * before closing the collection), takes a reader slot, and keeps the pages
 * of its state from being reused: writers grow the file while it lives, so
 * free it once done. It may be shared by threads; calls on one snapshot
 * are serialised. */
typedef struct patina_snapshot patina_snapshot_t;

PATINA_API patina_status patina_snapshot_new(patina_snapshot_t **snap, patina_collection_t *c);
PATINA_API void patina_snapshot_free(patina_snapshot_t *snap); /* accepts NULL */

/* The records of n ids in the snapshot, into recs[0, n) (caller memory,
 * overwritten, not released first). PATINA_E_NOTFOUND when some id has no
 * record: those recs are zeroed (key NULL), the others are filled. On
 * PATINA_OK and PATINA_E_NOTFOUND release every recs[i] (zeroed ones
 * too); on any other failure none is filled. */
PATINA_API patina_status patina_snapshot_get(patina_snapshot_t *snap, const uint64_t *ids, size_t n,
                                             patina_record_t *recs);

/* patina_collection_load in the snapshot. */
PATINA_API patina_status patina_snapshot_load(patina_snapshot_t *snap, const char *spec,
                                              uint64_t **ids, uint8_t **descs, size_t *n,
                                              size_t *desc_bytes);

/* patina_collection_get_aux in the snapshot. */
PATINA_API patina_status patina_snapshot_get_aux(patina_snapshot_t *snap, const char *name, void **data,
                                                 size_t *bytes);

/* SHA-256 of a buffer (FIPS 180-4). */
PATINA_API void patina_sha256(uint8_t out[32], const void *data, size_t size);

/* Streaming SHA-256 in caller storage: init, update any number of times,
 * final (which wipes the context). */
typedef struct patina_sha256_ctx {
    uint32_t h[8];
    uint64_t bytes;
    uint8_t buf[64];
} patina_sha256_ctx_t;
PATINA_API void patina_sha256_init(patina_sha256_ctx_t *ctx);
PATINA_API void patina_sha256_update(patina_sha256_ctx_t *ctx, const void *data, size_t size);
PATINA_API void patina_sha256_final(patina_sha256_ctx_t *ctx, uint8_t out[32]);

#ifdef __cplusplus
}
#endif
#endif
