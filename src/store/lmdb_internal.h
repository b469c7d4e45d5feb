/* What the three files of the LMDB collection store share (src/store/lmdb.c,
 * lmdb_check.c, lmdb_create.c): the on-disk format's constants, the
 * collection handle's struct, and the functions one of them defines for
 * the others (patina__store_*). Internal to those files: the API is
 * include/patina/store.h, the tests' hooks are store/store_internal.h.
 * Not here: what one file uses alone (it stays static in that file). */
#ifndef PATINA_STORE_LMDB_INTERNAL_H
#define PATINA_STORE_LMDB_INTERNAL_H

#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/internal.h"
#include "patina/store.h"

#define PATINA_FORMAT 2u      /* what new collections are and old ones become on a write */
#define PATINA_FORMAT_MIN 1u  /* format 1: no "sha" database, maybe no root */
#define SHA_FLAGS (MDB_DUPSORT | MDB_DUPFIXED) /* the "sha" database: many ids per hash */
#define ROOT_DEFAULT ".."     /* a new collection's root: the directory that holds it */
#define MAGIC "patina-collection"
#define DEFAULT_MAP_SIZE (64ull << 30)
#define MIN_DEFAULT_MAP (1ull << 30) /* the default is halved down to this if refused */
#define MAX_READERS 1024
#define KEY_INLINE_MAX 480      /* LMDB's default key limit is 511 */
#define SPEC_MAX 400            /* "desc:" + spec is a key of the main DB */
#define DESC_MAX (64u << 20)
#define REC_VERSION 1
#define REC_HEADER 72
/* Disk blocks given to lock.mdb before LMDB maps it: LMDB 0.9 keeps one
 * 64-byte slot per reader after a header of less than a page. */
#define LOCK_RESERVE ((off_t)MAX_READERS * 64 + 4096)
#define CREATE_RESERVE (64 << 10) /* blocks for a new data.mdb (it needs some 6 pages) */
#define TMP_TAG ".patina-tmp-"      /* names of directories being created */

typedef struct desc_handle {
    char *spec;
    MDB_dbi dbi;
} desc_handle_t;

/* A collection handle. The first open of a collection in a process makes
 * the shared handle: the environment, its locks and caches. LMDB must not
 * open one environment twice in a process (its locks belong to the
 * process: a second mdb_env_open would reset the reader table and the
 * mutexes under the first), so a later open of the same data.mdb (device
 * and inode) in the same process shares it: it gets the shared handle
 * itself, or an alias (`shared` set) when it asks for READONLY on a
 * writable one. `refs` counts the opens not yet closed. */
struct patina_collection {
    patina_collection_t *shared; /* an alias: the handle it stands for */
    int readonly;
    MDB_env *env;
    char *dir;
    dev_t dev;                  /* of data.mdb, with ino: the registry's key */
    ino_t ino;
    pid_t pid;                  /* the process that opened it */
    unsigned refs;              /* opens of it not yet closed (0: unregistered) */
    patina_collection_t *next;  /* in the registry */
    MDB_dbi meta, records, keys, tables;
    char *absdir;               /* the directory, absolute (realpath when opened) */
    atomic_uint format;         /* format of the collection (1 until its first write here) */
    MDB_dbi sha;                /* "sha": SHA-256 -> ids, usable once has_sha is set */
    atomic_int has_sha;
    MDB_dbi sha_new;            /* opened by the write transaction in progress (sha_pending) */
    int sha_pending;
    pthread_mutex_t mu;         /* writes and every mdb_dbi_open */
    pthread_rwlock_t maplock;   /* shared per transaction; exclusive to resize */
    pthread_mutex_t cache_mu;   /* the handle cache below */
    desc_handle_t *desc;        /* opened descriptor tables: [0, npub) usable by */
    size_t npub, ndesc, capdesc;/* anyone; [npub, ndesc) by the open write txn */
};

/* What patina__store_check_dir finds at a collection's path. */
enum { DIR_HAS_DATA, DIR_MISSING, DIR_EMPTY };

/* ---- errors, transactions, the core databases, disk space, the
 * environment (lmdb.c) */
patina_status patina__store_mdb_fail(const patina_collection_t *c, int rc, const char *what);
patina_status patina__store_private_begin(patina_collection_t *c, int write, MDB_txn **txn,
                                          const char *what);
patina_status patina__store_init_collection(patina_collection_t *c, MDB_txn *txn, int legacy);
int patina__store_is_nospace(int err);
const char *patina__store_nospace_words(int err);
patina_status patina__store_prepare_lock(const char *coll, const char *path, int readonly);
patina_status patina__store_env_open(patina_collection_t *c, const char *path, unsigned envflags,
                                     uint64_t map_size, int default_map);
patina_collection_t *patina__store_collection_alloc(const char *dir, int readonly);

/* ---- the data file's check before LMDB maps it (lmdb_check.c) */
patina_status patina__store_not_regular(const char *path);
patina_status patina__store_check_data_file(const char *path, int writable);

/* ---- atomic creation (lmdb_create.c) */
char *patina__store_path_join(const char *dir, const char *name);
patina_status patina__store_check_dir(const char *dir, int flags, int *state);
patina_status patina__store_create_collection(const char *dir, int state, uint64_t map_size,
                                              int default_map, int legacy);

#endif
