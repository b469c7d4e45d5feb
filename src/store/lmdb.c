/* Collection store on LMDB (include/patina/store.h): the embedded default
 * back end. This file is the on-disk format, the handle and the locking,
 * reads, writes, snapshots, roots and keys; lmdb_check.c checks data.mdb
 * before LMDB maps it and lmdb_create.c creates a collection atomically
 * (the three share store/lmdb_internal.h). It knows nothing of images or
 * descriptor families (a descriptor is opaque bytes).
 *
 * On-disk format 2. One LMDB environment in the collection directory
 * (data.mdb + lock.mdb) with these named databases:
 *
 *   "meta"        "magic"   -> "patina-collection"
 *                 "format"  -> u32 LE (PATINA_FORMAT)
 *                 "next_id" -> u64 LE, the id the next new record gets
 *                 "root"    -> the root, a path relative to the collection's
 *                              directory (absent: made before roots; file
 *                              keys are then the paths as given)
 *   "records"     id (u64 BE) -> packed record (layout at pack_record)
 *   "keys"        key form -> id (u64 BE). The key form is the key's bytes
 *                 when it has at most KEY_INLINE_MAX bytes, else 0x00 +
 *                 SHA-256(key) (33 bytes; a C string never starts with NUL,
 *                 so the two forms cannot collide). The full key is in the
 *                 record and is compared on lookup.
 *   "sha"         SHA-256 (32 bytes) -> ids (u64 BE, sorted duplicates):
 *                 the content index, kept in step by every put and remove
 *   "tables"      spec -> u64 LE descriptor size in bytes
 *   "desc:<spec>" id (u64 BE) -> descriptor bytes, one database per table
 *   "meta" also holds "aux:<name>" -> bytes, the auxiliary blobs
 *                 (patina_collection_put_aux), opaque to the store
 *
 * Format 1 (before "sha" and "root") is read as it is; the first write
 * transaction on it builds "sha" from the records and sets the format to 2
 * (sha_ready).
 *
 * Big-endian ids make cursor order id order, so iteration and loading are
 * sequential scans and new ids are appended (MDB_APPEND) to the B-trees.
 *
 * Locking. LMDB gives cross-process isolation: readers see a snapshot and
 * never block; one write transaction at a time per environment (a robust
 * process-shared mutex, so a writer killed mid-transaction frees it).
 * In the process: `mu` serialises our write transactions and every
 * mdb_dbi_open (LMDB requires a transaction that opens a handle to finish
 * before another transaction opens one). Readers look descriptor-table
 * handles up in a cache (under the short `cache_mu`, so they never wait for
 * a write) before they begin their transaction; a handle missing from the
 * cache is opened under `mu` in a short read transaction that is committed
 * (which makes the handle process-wide). Handles a write transaction opens
 * are published to readers only once it has committed. A handle is usable
 * only in transactions that began after it was published; a snapshot
 * (patina_snapshot_t) therefore opens the handles of every table it holds
 * before its transaction begins.
 * MDB_NOTLS: read transactions are tied to the transaction object, not the
 * thread, so a handle may be used from any thread (thread pools, the
 * pipeline's writer thread and search threads at once) without the
 * one-read-transaction-per-thread rule; each open read transaction takes a
 * reader slot (MAX_READERS for all processes together).
 * `maplock` (a rwlock) is held shared by every transaction (a snapshot holds
 * it for its life) and taken exclusively only to adopt a map size grown by
 * another process (MDB_MAP_RESIZED), which LMDB allows only with no
 * transaction active. Lock order: maplock, then mu, then cache_mu.
 *
 * Files. LMDB maps data.mdb read-only (no MDB_WRITEMAP: pages are written
 * with pwrite, so a full disk is an error code, never a signal) and maps
 * lock.mdb shared and writable (the reader table). Three things keep a
 * damaged or full disk from ending the process with SIGBUS, which a mapped
 * page that the file cannot back raises:
 *  - data.mdb is checked before LMDB maps it (lmdb_check.c): both meta
 *    pages, and every page up to the last one the newest meta page uses
 *    must be in the file. LMDB 0.9 can itself leave the file a few pages
 *    short (pages a transaction allocated and freed again are never
 *    written); such pages are free, so a short file is accepted when every
 *    missing page is on LMDB's free list.
 *  - lock.mdb gets its disk blocks before LMDB maps it
 *    (patina__store_prepare_lock).
 *  - A write transaction reserves blocks for what it may add to data.mdb
 *    first (reserve_space), so that a full disk shows as ENOSPC; LMDB
 *    itself reports a short write in the middle of a commit as EIO.
 * A failed commit never writes the meta page, so the last committed state
 * stays intact.
 *
 * Creation is atomic (lmdb_create.c): the new environment is built and
 * committed in a temporary directory beside the target (or inside an
 * existing empty one) and then renamed (or its data.mdb linked) into place;
 * a creator that loses the race to another one opens the winner's
 * collection. A directory therefore either holds a whole collection or none.
 *
 * Durability: default LMDB syncs (no MDB_NOSYNC / MDB_NOMETASYNC), so a
 * committed batch survives a crash of the process or the machine. */
#define _GNU_SOURCE /* fallocate, FALLOC_FL_KEEP_SIZE */
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"
#include "patina/store.h"
#include "store/lmdb_internal.h"

static patina_collection_t *shared_of(patina_collection_t *c)
{
    return c && c->shared ? c->shared : c;
}

/* ------------------------------------------------------------ byte order */

static void put_be64(uint8_t *p, uint64_t v)
{
    int i;
    for (i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    int i;
    for (i = 0; i < 8; i++) v = v << 8 | p[i];
    return v;
}

static void put_le(uint8_t *p, uint64_t v, int bytes)
{
    int i;
    for (i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    int i;
    for (i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* ---------------------------------------------------------------- errors */

/* One LMDB return code as a status, with "store: <what> in '<dir>': ...". */
patina_status patina__store_mdb_fail(const patina_collection_t *c, int rc, const char *what)
{
    const char *dir = c ? c->dir : "?";
    switch (rc) {
    case MDB_MAP_FULL:
        return patina__fail(PATINA_E_FULL, "store: %s in '%s': collection map is full", what, dir);
    case ENOSPC:
        return patina__fail(PATINA_E_FULL, "store: %s in '%s': no space left on device", what, dir);
#ifdef EDQUOT
    case EDQUOT:
        return patina__fail(PATINA_E_FULL,
                            "store: %s in '%s': no space left on device (disk quota exceeded)",
                            what, dir);
#endif
    case MDB_PANIC:
        return patina__fail(PATINA_E_STORE,
                            "store: %s in '%s': an earlier commit failed half-way (disk full or "
                            "I/O error); close the collection and open it again",
                            what, dir);
    case ENOMEM:
        return patina__fail(PATINA_E_NOMEM, "store: %s in '%s': out of memory", what, dir);
    case MDB_READERS_FULL:
        return patina__fail(PATINA_E_BUSY, "store: %s in '%s': all %d reader slots are in use",
                            what, dir, MAX_READERS);
    case MDB_DBS_FULL:
        return patina__fail(PATINA_E_LIMIT, "store: %s in '%s': too many tables", what, dir);
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
    case MDB_BAD_TXN:
        return patina__fail(PATINA_E_CORRUPT, "store: %s in '%s': %s", what, dir, mdb_strerror(rc));
    case MDB_INVALID:
    case MDB_VERSION_MISMATCH:
        return patina__fail(PATINA_E_FORMAT, "store: '%s' is not a patina collection (%s)", dir,
                            mdb_strerror(rc));
    case EACCES:
    case EROFS:
    case EIO:
        return patina__fail(PATINA_E_IO, "store: %s in '%s': %s", what, dir, mdb_strerror(rc));
    default:
        return patina__fail(PATINA_E_STORE, "store: %s in '%s': %s", what, dir, mdb_strerror(rc));
    }
}

static patina_status corrupt(const patina_collection_t *c, const char *what)
{
    return patina__fail(PATINA_E_CORRUPT, "store: '%s' is corrupt: %s", c->dir, what);
}

static patina_status check_writable(patina_collection_t *c, const char *what)
{
    if (c->readonly)
        return patina__fail(PATINA_E_INVALID, "store: cannot %s: collection '%s' is open read-only",
                            what, shared_of(c)->dir);
    return PATINA_OK;
}

static patina_status check_spec(const char *spec)
{
    size_t len;
    if (!spec || !*spec) return patina__fail(PATINA_E_INVALID, "store: empty table name (spec)");
    len = strlen(spec);
    if (len > SPEC_MAX)
        return patina__fail(PATINA_E_LIMIT, "store: table name of %zu bytes (max %d)", len, SPEC_MAX);
    return PATINA_OK;
}

/* ------------------------------------------------------------ transactions */

/* Adopts a map grown by another process (after MDB_MAP_RESIZED; nothing of
 * this thread's held). It waits for the handle's other transactions
 * (snapshots included) to end, for at most RESIZE_WAIT seconds. */
#define RESIZE_WAIT 10
static patina_status adopt_map(patina_collection_t *c, const char *what)
{
    struct timespec until;
    int rc;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += RESIZE_WAIT;
    if (pthread_rwlock_timedwrlock(&c->maplock, &until) != 0)
        return patina__fail(PATINA_E_BUSY,
                            "store: %s in '%s': another process grew the collection's map; "
                            "this handle can adopt it only when none of its snapshots is open",
                            what, c->dir);
    rc = mdb_env_set_mapsize(c->env, 0);
    pthread_rwlock_unlock(&c->maplock);
    return rc ? patina__store_mdb_fail(c, rc, "adopting the grown map size") : PATINA_OK;
}

/* Begins a read or write transaction holding maplock shared (txn_abort
 * releases it); adopts a map grown by another process and retries. */
static patina_status txn_begin(patina_collection_t *c, int write, MDB_txn **txn, const char *what)
{
    int rc, tries;
    for (tries = 0;; tries++) {
        pthread_rwlock_rdlock(&c->maplock);
        rc = mdb_txn_begin(c->env, NULL, write ? 0 : MDB_RDONLY, txn);
        if (rc == 0) return PATINA_OK;
        pthread_rwlock_unlock(&c->maplock);
        if (rc != MDB_MAP_RESIZED || tries == 3) return patina__store_mdb_fail(c, rc, what);
        PATINA_TRY(adopt_map(c, what));
    }
}

/* txn_begin for transactions under `mu` (writes, opening table handles):
 * maplock first, then mu, the order of every thread (one that holds a
 * snapshot, and so maplock, may write). Returns holding both, the
 * transaction begun, or holding nothing; end with mdb_txn_commit or
 * mdb_txn_abort, then locked_end. */
static patina_status locked_begin(patina_collection_t *c, int write, MDB_txn **txn,
                                  const char *what)
{
    int rc, tries;
    for (tries = 0;; tries++) {
        pthread_rwlock_rdlock(&c->maplock);
        pthread_mutex_lock(&c->mu);
        rc = mdb_txn_begin(c->env, NULL, write ? 0 : MDB_RDONLY, txn);
        if (rc == 0) return PATINA_OK;
        pthread_mutex_unlock(&c->mu);
        pthread_rwlock_unlock(&c->maplock);
        if (rc != MDB_MAP_RESIZED || tries == 3) return patina__store_mdb_fail(c, rc, what);
        PATINA_TRY(adopt_map(c, what));
    }
}

/* txn_begin for a handle that no other thread can reach yet (being opened
 * or created, not registered): no maplock (the registry's mutex may be
 * held); end with mdb_txn_commit or mdb_txn_abort. */
patina_status patina__store_private_begin(patina_collection_t *c, int write, MDB_txn **txn,
                                          const char *what)
{
    int rc, tries;
    for (tries = 0;; tries++) {
        rc = mdb_txn_begin(c->env, NULL, write ? 0 : MDB_RDONLY, txn);
        if (rc == 0) return PATINA_OK;
        if (rc != MDB_MAP_RESIZED || tries == 3) return patina__store_mdb_fail(c, rc, what);
        if ((rc = mdb_env_set_mapsize(c->env, 0)) != 0)
            return patina__store_mdb_fail(c, rc, "adopting the grown map size");
    }
}

static void locked_end(patina_collection_t *c)
{
    pthread_mutex_unlock(&c->mu);
    pthread_rwlock_unlock(&c->maplock);
}

static void txn_abort(patina_collection_t *c, MDB_txn *txn)
{
    mdb_txn_abort(txn);
    pthread_rwlock_unlock(&c->maplock);
}

/* ------------------------------------------------------- descriptor tables */

/* Looks `spec` up among the published handles, or all (the writer's view). */
static int desc_find(patina_collection_t *c, const char *spec, int all, MDB_dbi *dbi)
{
    size_t i, n;
    int found = 0;
    pthread_mutex_lock(&c->cache_mu);
    n = all ? c->ndesc : c->npub;
    for (i = 0; i < n && !found; i++)
        if (strcmp(c->desc[i].spec, spec) == 0) {
            *dbi = c->desc[i].dbi;
            found = 1;
        }
    pthread_mutex_unlock(&c->cache_mu);
    return found;
}

/* Adds a handle, published at once or pending until desc_settle. */
static patina_status desc_add(patina_collection_t *c, const char *spec, MDB_dbi dbi, int publish)
{
    patina_status s = PATINA_OK;
    char *copy = strdup(spec);
    pthread_mutex_lock(&c->cache_mu);
    if (copy && c->ndesc == c->capdesc) {
        size_t cap = c->capdesc ? 2 * c->capdesc : 8;
        desc_handle_t *d = realloc(c->desc, cap * sizeof *d);
        if (d) {
            c->desc = d;
            c->capdesc = cap;
        }
    }
    if (!copy || c->ndesc == c->capdesc) {
        free(copy);
        s = patina__fail(PATINA_E_NOMEM, "store: out of memory");
    } else {
        c->desc[c->ndesc].spec = copy;
        c->desc[c->ndesc++].dbi = dbi;
        if (publish) c->npub = c->ndesc;
    }
    pthread_mutex_unlock(&c->cache_mu);
    return s;
}

/* After a write transaction (mu held): publishes the handles it opened if
 * it committed, else forgets them (LMDB closed them with the abort). */
static void desc_settle(patina_collection_t *c, int committed)
{
    pthread_mutex_lock(&c->cache_mu);
    if (committed) c->npub = c->ndesc;
    while (c->ndesc > c->npub) free(c->desc[--c->ndesc].spec);
    pthread_mutex_unlock(&c->cache_mu);
}

static void desc_name(char *name, const char *spec)
{
    snprintf(name, SPEC_MAX + 8, "desc:%s", spec);
}

/* Opens table `spec` inside a write transaction (mu held). Handles opened
 * here stay pending (seen by this transaction only) until desc_settle.
 * *found = 0 when absent and !create. */
static patina_status desc_open_in(patina_collection_t *c, MDB_txn *txn, const char *spec,
                                  int create, MDB_dbi *dbi, int *found)
{
    char name[SPEC_MAX + 8];
    int rc;
    *found = 1;
    if (desc_find(c, spec, 1, dbi)) return PATINA_OK;
    desc_name(name, spec);
    rc = mdb_dbi_open(txn, name, create ? MDB_CREATE : 0, dbi);
    if (rc == MDB_NOTFOUND && !create) {
        *found = 0;
        return PATINA_OK;
    }
    if (rc) return patina__store_mdb_fail(c, rc, "opening a descriptor table");
    return desc_add(c, spec, *dbi, 0);
}

/* For readers: the handle of table `spec` before their transaction begins.
 * *found = 0 when the table does not exist. */
static patina_status desc_open(patina_collection_t *c, const char *spec, MDB_dbi *dbi, int *found)
{
    MDB_txn *txn;
    char name[SPEC_MAX + 8];
    patina_status s = PATINA_OK;
    int rc;
    *found = 1;
    if (desc_find(c, spec, 0, dbi)) return PATINA_OK;
    PATINA_TRY(locked_begin(c, 0, &txn, "opening a descriptor table"));
    if (desc_find(c, spec, 0, dbi)) { /* opened meanwhile */
        mdb_txn_abort(txn);
    } else {
        desc_name(name, spec);
        rc = mdb_dbi_open(txn, name, 0, dbi);
        if (rc == MDB_NOTFOUND) {
            *found = 0;
            mdb_txn_abort(txn);
        } else if (rc) {
            mdb_txn_abort(txn);
            s = patina__store_mdb_fail(c, rc, "opening a descriptor table");
        } else {
            rc = mdb_txn_commit(txn); /* makes the handle process-wide */
            s = rc ? patina__store_mdb_fail(c, rc, "opening a descriptor table")
                   : desc_add(c, spec, *dbi, 1);
        }
    }
    locked_end(c);
    return s;
}

/* ----------------------------------------------------------------- records */

/* Record layout, version 1 (all little-endian):
 *    0  u8   version (1)        1  u8[3] zero
 *    4  u32  key length L       8  u64  size
 *   16  i64  mtime             24  i64  added
 *   32  i32  width             36  i32  height
 *   40  u8[32] sha256          72  key bytes (L, no NUL) */
static void pack_record(uint8_t *out, const patina_insert_t *it, size_t keylen, int64_t added)
{
    memset(out, 0, REC_HEADER);
    out[0] = REC_VERSION;
    put_le(out + 4, keylen, 4);
    put_le(out + 8, it->size, 8);
    put_le(out + 16, (uint64_t)it->mtime, 8);
    put_le(out + 24, (uint64_t)added, 8);
    put_le(out + 32, (uint32_t)it->width, 4);
    put_le(out + 36, (uint32_t)it->height, 4);
    memcpy(out + 40, it->sha256, 32);
    memcpy(out + REC_HEADER, it->key, keylen);
}

static patina_status unpack_record(const patina_collection_t *c, patina_record_t *rec, uint64_t id,
                                   const MDB_val *v)
{
    const uint8_t *p = v->mv_data;
    size_t keylen;
    memset(rec, 0, sizeof *rec);
    if (v->mv_size < REC_HEADER || p[0] != REC_VERSION) return corrupt(c, "bad record header");
    keylen = (size_t)get_le(p + 4, 4);
    if (v->mv_size != REC_HEADER + keylen) return corrupt(c, "bad record length");
    rec->key = malloc(keylen + 1);
    if (!rec->key) return patina__fail(PATINA_E_NOMEM, "store: out of memory");
    memcpy(rec->key, p + REC_HEADER, keylen);
    rec->key[keylen] = '\0';
    rec->id = id;
    rec->size = get_le(p + 8, 8);
    rec->mtime = (int64_t)get_le(p + 16, 8);
    rec->added = (int64_t)get_le(p + 24, 8);
    rec->width = (int32_t)(uint32_t)get_le(p + 32, 4);
    rec->height = (int32_t)(uint32_t)get_le(p + 36, 4);
    memcpy(rec->sha256, p + 40, 32);
    return PATINA_OK;
}

void patina_record_release(patina_record_t *rec)
{
    if (!rec) return;
    free(rec->key);
    memset(rec, 0, sizeof *rec);
}

/* The "keys" database key of a key (see the format at the top). */
typedef struct keyform {
    uint8_t hashed[33];
    MDB_val val;
} keyform_t;

static void make_keyform(keyform_t *kf, const char *key, size_t len)
{
    if (len <= KEY_INLINE_MAX) {
        kf->val.mv_data = (void *)key;
        kf->val.mv_size = len;
    } else {
        kf->hashed[0] = 0;
        patina_sha256(kf->hashed + 1, key, len);
        kf->val.mv_data = kf->hashed;
        kf->val.mv_size = sizeof kf->hashed;
    }
}

static patina_status check_key(const char *key, size_t *len)
{
    if (!key || !*key) return patina__fail(PATINA_E_INVALID, "store: empty key");
    *len = strlen(key);
    if (*len > PATINA_KEY_MAX)
        return patina__fail(PATINA_E_LIMIT, "store: key of %zu bytes (max %d)", *len, PATINA_KEY_MAX);
    return PATINA_OK;
}

/* ------------------------------------------------------------- open/close */

static patina_status read_meta(patina_collection_t *c, MDB_txn *txn, const char *name, int bytes,
                               uint64_t *out)
{
    MDB_val k = {strlen(name), (void *)name}, v;
    int rc = mdb_get(txn, c->meta, &k, &v);
    if (rc == MDB_NOTFOUND || (rc == 0 && v.mv_size != (size_t)bytes))
        return patina__fail(PATINA_E_FORMAT, "store: '%s' is not a patina collection (meta '%s')",
                            c->dir, name);
    if (rc) return patina__store_mdb_fail(c, rc, "reading meta");
    *out = get_le(v.mv_data, bytes);
    return PATINA_OK;
}

static patina_status write_meta(patina_collection_t *c, MDB_txn *txn, const char *name, int bytes,
                                uint64_t value)
{
    uint8_t buf[8];
    MDB_val k = {strlen(name), (void *)name}, v = {(size_t)bytes, buf};
    int rc;
    put_le(buf, value, bytes);
    rc = mdb_put(txn, c->meta, &k, &v, 0);
    return rc ? patina__store_mdb_fail(c, rc, "writing meta") : PATINA_OK;
}

/* Opens the four core databases in txn; checks magic and format.
 * *absent = 1 (and PATINA_OK) when there is no "meta" database at all. */
static patina_status open_core(patina_collection_t *c, MDB_txn *txn, unsigned flags, int *absent)
{
    MDB_val k = {5, "magic"}, v;
    uint64_t format = 0;
    int rc;
    *absent = 0;
    rc = mdb_dbi_open(txn, "meta", flags, &c->meta);
    if (rc == MDB_NOTFOUND) {
        *absent = 1;
        return PATINA_OK;
    }
    if (rc == MDB_INCOMPATIBLE)
        return patina__fail(PATINA_E_FORMAT, "store: '%s' is not a patina collection", c->dir);
    if (rc) return patina__store_mdb_fail(c, rc, "opening the collection");
    rc = mdb_get(txn, c->meta, &k, &v);
    if (rc == MDB_NOTFOUND || (rc == 0 && (v.mv_size != strlen(MAGIC) ||
                                          memcmp(v.mv_data, MAGIC, v.mv_size) != 0)))
        return patina__fail(PATINA_E_FORMAT, "store: '%s' is not a patina collection", c->dir);
    if (rc) return patina__store_mdb_fail(c, rc, "opening the collection");
    PATINA_TRY(read_meta(c, txn, "format", 4, &format));
    if (format < PATINA_FORMAT_MIN || format > PATINA_FORMAT)
        return patina__fail(PATINA_E_FORMAT,
                            "store: '%s' is a patina collection of format %u; this build reads "
                            "formats %u to %u",
                            c->dir, (unsigned)format, PATINA_FORMAT_MIN, PATINA_FORMAT);
    if ((rc = mdb_dbi_open(txn, "records", flags, &c->records)) ||
        (rc = mdb_dbi_open(txn, "keys", flags, &c->keys)) ||
        (rc = mdb_dbi_open(txn, "tables", flags, &c->tables)) ||
        (format >= 2 && (rc = mdb_dbi_open(txn, "sha", flags | SHA_FLAGS, &c->sha))))
        return rc == MDB_NOTFOUND ? corrupt(c, "a core database is missing")
                                  : patina__store_mdb_fail(c, rc, "opening the collection");
    atomic_store(&c->format, (unsigned)format);
    atomic_store(&c->has_sha, format >= 2);
    return PATINA_OK;
}

/* Creates the core databases and meta in an empty environment (write txn):
 * a collection of this format with the default root, or with `legacy` one
 * of format 1 without a root (what builds before roots made; for tests). */
patina_status patina__store_init_collection(patina_collection_t *c, MDB_txn *txn, int legacy)
{
    MDB_dbi main;
    MDB_stat st;
    MDB_val k = {5, "magic"}, v = {strlen(MAGIC), MAGIC};
    int absent, rc;
    rc = mdb_dbi_open(txn, NULL, 0, &main);
    if (!rc) rc = mdb_stat(txn, main, &st);
    if (rc) return patina__store_mdb_fail(c, rc, "creating the collection");
    if (st.ms_entries != 0)
        return patina__fail(PATINA_E_FORMAT,
                            "store: '%s' holds an LMDB database that is not a patina collection",
                            c->dir);
    rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &c->meta);
    if (!rc) rc = mdb_put(txn, c->meta, &k, &v, 0);
    if (rc) return patina__store_mdb_fail(c, rc, "creating the collection");
    PATINA_TRY(write_meta(c, txn, "format", 4, legacy ? 1 : PATINA_FORMAT));
    PATINA_TRY(write_meta(c, txn, "next_id", 8, 1));
    if (!legacy) {
        MDB_val rk = {4, "root"}, rv = {strlen(ROOT_DEFAULT), ROOT_DEFAULT};
        if ((rc = mdb_put(txn, c->meta, &rk, &rv, 0)) != 0)
            return patina__store_mdb_fail(c, rc, "creating the collection");
    }
    return open_core(c, txn, MDB_CREATE, &absent);
}

/* ------------------------------------------------------- disk space */

int patina__store_is_nospace(int err)
{
#ifdef EDQUOT
    if (err == EDQUOT) return 1;
#endif
    return err == ENOSPC;
}

const char *patina__store_nospace_words(int err)
{
#ifdef EDQUOT
    if (err == EDQUOT) return "no space left on device (disk quota exceeded)";
#endif
    (void)err;
    return "no space left on device";
}

/* Gives lock.mdb its disk blocks before LMDB maps it shared and writable
 * (creating it as LMDB would). The size is left alone (blocks past the end
 * are kept, FALLOC_FL_KEEP_SIZE): LMDB takes the reader count from it, and
 * another process may have it mapped. Where the file system has no
 * fallocate, LMDB goes on as it would without this. */
patina_status patina__store_prepare_lock(const char *coll, const char *path, int readonly)
{
    struct stat st;
    off_t len;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0664), err;
    if (fd < 0) {
        err = errno;
        if (err == EROFS && readonly) return PATINA_OK; /* LMDB reads without a lock file there */
        if (err == EISDIR) return patina__store_not_regular(path);
        if (patina__store_is_nospace(err))
            return patina__fail(PATINA_E_FULL, "store: cannot open '%s': %s for its lock file '%s'",
                                coll, patina__store_nospace_words(err), path);
        return patina__fail(PATINA_E_IO,
                            "store: cannot open the lock file '%s' for writing: %s (readers "
                            "register there too)",
                            path, strerror(err));
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return patina__store_not_regular(path);
    }
    len = st.st_size > LOCK_RESERVE ? st.st_size : LOCK_RESERVE;
    err = fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, len) == 0 ? 0 : errno;
    close(fd);
    if (patina__store_is_nospace(err))
        return patina__fail(PATINA_E_FULL, "store: cannot open '%s': %s for its lock file '%s'",
                            coll, patina__store_nospace_words(err), path);
    return PATINA_OK;
}

/* ------------------------------------------------------- the environment */

/* The environment of c at `path` (c->dir names it in messages). The default
 * map of 64 GiB of address space can be refused (ulimit -v, valgrind,
 * 32-bit): it is halved down to MIN_DEFAULT_MAP before failing; an explicit
 * map_size is never changed. */
patina_status patina__store_env_open(patina_collection_t *c, const char *path, unsigned envflags,
                                     uint64_t map_size, int default_map)
{
    int rc, dead;
    for (;;) {
        if ((rc = mdb_env_create(&c->env)) != 0) {
            c->env = NULL;
            return patina__store_mdb_fail(c, rc, "creating the environment");
        }
        if ((rc = mdb_env_set_maxdbs(c->env, PATINA_TABLES_MAX + 8)) ||
            (rc = mdb_env_set_maxreaders(c->env, MAX_READERS)) ||
            (rc = mdb_env_set_mapsize(c->env, (size_t)map_size)))
            return patina__store_mdb_fail(c, rc, "configuring the environment");
        rc = mdb_env_open(c->env, path, envflags, 0664);
        if ((rc == ENOMEM || rc == EINVAL) && default_map && map_size / 2 >= MIN_DEFAULT_MAP) {
            mdb_env_close(c->env);
            c->env = NULL;
            map_size /= 2;
            continue;
        }
        break;
    }
    if (rc == ENOENT)
        return patina__fail(PATINA_E_FORMAT, "store: '%s' is not a patina collection", c->dir);
    if (rc == ENOMEM || rc == EINVAL)
        return patina__fail(PATINA_E_NOMEM,
                            "store: cannot map %llu bytes for '%s' (%s); use a smaller map size",
                            (unsigned long long)map_size, c->dir, mdb_strerror(rc));
    if (rc) return patina__store_mdb_fail(c, rc, "opening");
    mdb_reader_check(c->env, &dead); /* frees slots of crashed readers */
    return PATINA_OK;
}

patina_collection_t *patina__store_collection_alloc(const char *dir, int readonly)
{
    patina_collection_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    if (!(c->dir = strdup(dir))) {
        free(c);
        return NULL;
    }
    c->readonly = readonly;
    c->absdir = realpath(dir, NULL); /* NULL while the directory is being created */
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->cache_mu, NULL);
    pthread_rwlock_init(&c->maplock, NULL);
    return c;
}

/* Collections open in this process (see struct patina_collection). */
static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static patina_collection_t *registry;

static void collection_destroy(patina_collection_t *c)
{
    if (!c) return;
    if (c->env) mdb_env_close(c->env); /* closes every handle */
    while (c->ndesc) free(c->desc[--c->ndesc].spec);
    free(c->desc);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->cache_mu);
    pthread_rwlock_destroy(&c->maplock);
    free(c->dir);
    free(c->absdir);
    free(c);
}

/* registry_mu held: the handle for the collection at dir when this process
 * has it open already (*out NULL when not). */
static patina_status registry_find(const char *dir, int flags, patina_collection_t **out)
{
    patina_collection_t *e;
    struct stat st;
    char *data = patina__store_path_join(dir, "data.mdb");
    int have;
    *out = NULL;
    if (!data) return patina__fail(PATINA_E_NOMEM, "store: out of memory");
    have = stat(data, &st) == 0;
    free(data);
    for (e = registry; have && e; e = e->next)
        if (e->pid == getpid() && e->dev == st.st_dev && e->ino == st.st_ino) break;
    if (!have || !e) return PATINA_OK;
    if (flags != PATINA_OPEN_READONLY && e->readonly)
        return patina__fail(PATINA_E_BUSY,
                            "store: '%s' is open read-only in this process already (as '%s'); "
                            "close that handle before opening it for writing (LMDB opens a "
                            "collection once per process)",
                            dir, e->dir);
    if (flags == PATINA_OPEN_READONLY && !e->readonly) {
        patina_collection_t *alias = calloc(1, sizeof *alias);
        if (!alias) return patina__fail(PATINA_E_NOMEM, "store: out of memory");
        alias->shared = e;
        alias->readonly = 1;
        *out = alias;
    } else {
        *out = e;
    }
    e->refs++;
    return PATINA_OK;
}

/* Opens the collection at dir, which holds data.mdb, for the first time in
 * this process. */
static patina_status open_new(patina_collection_t **out, const char *dir, int flags,
                              uint64_t map_size, int default_map)
{
    patina_collection_t *c;
    MDB_txn *txn;
    patina_status s;
    char *data = NULL, *lock = NULL;
    int rc, absent;

    if (!(data = patina__store_path_join(dir, "data.mdb")) ||
        !(lock = patina__store_path_join(dir, "lock.mdb"))) {
        free(data);
        return patina__fail(PATINA_E_NOMEM, "store: out of memory");
    }
    s = patina__store_check_data_file(data, flags != PATINA_OPEN_READONLY);
    if (s == PATINA_OK) s = patina__store_prepare_lock(dir, lock, flags == PATINA_OPEN_READONLY);
    free(data);
    free(lock);
    if (s != PATINA_OK) return s;

    if (!(c = patina__store_collection_alloc(dir, flags == PATINA_OPEN_READONLY)))
        return patina__fail(PATINA_E_NOMEM, "store: out of memory");
    s = patina__store_env_open(c, dir, MDB_NOTLS | (c->readonly ? MDB_RDONLY : 0), map_size,
                               default_map);
    if (s != PATINA_OK) goto fail;

    /* A read transaction first, so that opening never waits for a writer. */
    if ((s = patina__store_private_begin(c, 0, &txn, "opening")) != PATINA_OK) goto fail;
    s = open_core(c, txn, 0, &absent);
    if (s != PATINA_OK) {
        mdb_txn_abort(txn);
        goto fail;
    }
    if (!absent) {
        if ((rc = mdb_txn_commit(txn)) != 0) { /* commit keeps the handles */
            s = patina__store_mdb_fail(c, rc, "opening");
            goto fail;
        }
        *out = c;
        return PATINA_OK;
    }
    mdb_txn_abort(txn);
    if (flags != PATINA_OPEN_CREATE) {
        s = patina__fail(PATINA_E_FORMAT, "store: '%s' is not a patina collection (no meta)", dir);
        goto fail;
    }
    /* An empty LMDB environment (left by a creation in place before
     * creation was atomic): initialise it in one transaction, unless
     * another process has done it since our read. */
    if ((s = patina__store_private_begin(c, 1, &txn, "creating the collection")) != PATINA_OK)
        goto fail;
    s = open_core(c, txn, 0, &absent);
    if (s == PATINA_OK && absent) s = patina__store_init_collection(c, txn, 0);
    if (s != PATINA_OK) {
        mdb_txn_abort(txn);
        goto fail;
    }
    if ((rc = mdb_txn_commit(txn)) != 0) {
        s = patina__store_mdb_fail(c, rc, "creating the collection");
        goto fail;
    }
    *out = c;
    return PATINA_OK;
fail:
    collection_destroy(c);
    return s;
}

patina_status patina_collection_open(patina_collection_t **out, const char *dir, int flags,
                                     uint64_t map_size)
{
    patina_collection_t *c = NULL;
    patina_status s;
    struct stat st;
    int default_map, state = DIR_MISSING, tries, fd;

    if (!out) return patina__fail(PATINA_E_INVALID, "store: null collection pointer");
    *out = NULL;
    if (!dir || !*dir) return patina__fail(PATINA_E_INVALID, "store: empty collection path");
    if (flags != PATINA_OPEN_READONLY && flags != PATINA_OPEN_WRITE && flags != PATINA_OPEN_CREATE)
        return patina__fail(PATINA_E_INVALID, "store: bad open flags %d", flags);
    default_map = map_size == 0;
    if (default_map) map_size = DEFAULT_MAP_SIZE;
#if SIZE_MAX < UINT64_MAX
    if (map_size > SIZE_MAX)
        return patina__fail(PATINA_E_LIMIT, "store: map size %llu is over the address space",
                            (unsigned long long)map_size);
#endif
    /* A missing or empty directory gets a whole collection first; a creator
     * that lost the race to another one finds the winner's next time. */
    for (tries = 0;; tries++) {
        PATINA_TRY(patina__store_check_dir(dir, flags, &state));
        if (state == DIR_HAS_DATA) break;
        if (tries == 8)
            return patina__fail(PATINA_E_BUSY,
                                "store: cannot create collection '%s': it keeps "
                                "changing (other processes create and remove it)",
                                dir);
        PATINA_TRY(patina__store_create_collection(dir, state, map_size, default_map, 0));
    }
    /* Once per process: a collection open already is shared. */
    pthread_mutex_lock(&registry_mu);
    s = registry_find(dir, flags, &c);
    if (s == PATINA_OK && !c &&
        (s = open_new(&c, dir, flags, map_size, default_map)) == PATINA_OK) {
        if (mdb_env_get_fd(c->env, &fd) == 0 && fstat(fd, &st) == 0) {
            c->dev = st.st_dev;
            c->ino = st.st_ino;
        }
        c->pid = getpid();
        c->refs = 1;
        c->next = registry;
        registry = c;
    }
    pthread_mutex_unlock(&registry_mu);
    if (s == PATINA_OK) *out = c;
    return s;
}

void patina_collection_close(patina_collection_t *c)
{
    patina_collection_t *shared = shared_of(c), **p;
    if (!c) return;
    if (shared->refs) {
        pthread_mutex_lock(&registry_mu);
        if (c != shared) free(c); /* an alias */
        if (--shared->refs > 0) {
            pthread_mutex_unlock(&registry_mu);
            return;
        }
        for (p = &registry; *p; p = &(*p)->next)
            if (*p == shared) {
                *p = shared->next;
                break;
            }
        pthread_mutex_unlock(&registry_mu);
    }
    collection_destroy(shared);
}

/* ------------------------------------------------------------------ reads */

patina_status patina_collection_count(patina_collection_t *c, uint64_t *n)
{
    MDB_txn *txn;
    MDB_stat st;
    int rc;
    if (!c || !n) return patina__fail(PATINA_E_INVALID, "store: null argument");
    c = shared_of(c);
    *n = 0;
    PATINA_TRY(txn_begin(c, 0, &txn, "counting"));
    rc = mdb_stat(txn, c->records, &st);
    txn_abort(c, txn);
    if (rc) return patina__store_mdb_fail(c, rc, "counting");
    *n = st.ms_entries;
    return PATINA_OK;
}

patina_status patina_collection_version(patina_collection_t *c, uint64_t *version)
{
    MDB_envinfo ei;
    int rc;
    if (!c || !version) return patina__fail(PATINA_E_INVALID, "store: null argument");
    c = shared_of(c);
    if ((rc = mdb_env_info(c->env, &ei)) != 0)
        return patina__store_mdb_fail(c, rc, "reading the version");
    *version = (uint64_t)ei.me_last_txnid;
    return PATINA_OK;
}

patina_status patina_collection_info(patina_collection_t *c, patina_collection_info_t *info)
{
    MDB_txn *txn;
    MDB_stat rs, ts, es;
    MDB_envinfo ei;
    unsigned maxr = 0;
    uint64_t next = 0;
    patina_status s;
    int rc;
    if (!c || !info) return patina__fail(PATINA_E_INVALID, "store: null argument");
    c = shared_of(c);
    memset(info, 0, sizeof *info);
    PATINA_TRY(txn_begin(c, 0, &txn, "reading info"));
    s = read_meta(c, txn, "next_id", 8, &next);
    if (s == PATINA_OK) {
        rc = mdb_stat(txn, c->records, &rs);
        if (!rc) rc = mdb_stat(txn, c->tables, &ts);
        if (!rc) rc = mdb_env_info(c->env, &ei);
        if (!rc) rc = mdb_env_stat(c->env, &es);
        if (!rc) rc = mdb_env_get_maxreaders(c->env, &maxr);
        if (rc) s = patina__store_mdb_fail(c, rc, "reading info");
    }
    txn_abort(c, txn);
    if (s != PATINA_OK) return s;
    info->format = atomic_load(&c->format);
    info->records = rs.ms_entries;
    info->next_id = next;
    info->tables = ts.ms_entries;
    info->map_size = ei.me_mapsize;
    info->used = ((uint64_t)ei.me_last_pgno + 1) * es.ms_psize;
    info->page_size = es.ms_psize;
    info->max_readers = maxr;
    return PATINA_OK;
}

static patina_status get_record(patina_collection_t *c, MDB_txn *txn, uint64_t id,
                                patina_record_t *rec)
{
    uint8_t kb[8];
    MDB_val k = {8, kb}, v;
    int rc;
    put_be64(kb, id);
    rc = mdb_get(txn, c->records, &k, &v);
    if (rc == MDB_NOTFOUND)
        return patina__fail(PATINA_E_NOTFOUND, "store: no record with id %llu in '%s'",
                            (unsigned long long)id, c->dir);
    if (rc) return patina__store_mdb_fail(c, rc, "reading a record");
    return unpack_record(c, rec, id, &v);
}

/* The id stored for a key (mu or a read txn). *found = 0 when absent. */
static patina_status lookup_key(patina_collection_t *c, MDB_txn *txn, const char *key, size_t len,
                                uint64_t *id, int *found)
{
    keyform_t kf;
    MDB_val v;
    int rc;
    make_keyform(&kf, key, len);
    rc = mdb_get(txn, c->keys, &kf.val, &v);
    *found = rc == 0;
    if (rc == MDB_NOTFOUND) return PATINA_OK;
    if (rc) return patina__store_mdb_fail(c, rc, "looking a key up");
    if (v.mv_size != 8) return corrupt(c, "bad key entry");
    *id = get_be64(v.mv_data);
    return PATINA_OK;
}

patina_status patina_collection_get_by_key(patina_collection_t *c, const char *key,
                                           patina_record_t *rec)
{
    MDB_txn *txn;
    patina_status s;
    uint64_t id = 0;
    size_t len = 0;
    int found = 0;
    if (!c || !rec) return patina__fail(PATINA_E_INVALID, "store: null argument");
    c = shared_of(c);
    memset(rec, 0, sizeof *rec);
    PATINA_TRY(check_key(key, &len));
    PATINA_TRY(txn_begin(c, 0, &txn, "reading a record"));
    s = lookup_key(c, txn, key, len, &id, &found);
    if (s == PATINA_OK && !found)
        s = patina__fail(PATINA_E_NOTFOUND, "store: no record for key '%.200s' in '%s'", key, c->dir);
    if (s == PATINA_OK) s = get_record(c, txn, id, rec);
    txn_abort(c, txn);
    if (s == PATINA_OK && strcmp(rec->key, key) != 0) {
        patina_record_release(rec); /* a SHA-256 collision or a damaged key entry */
        return corrupt(c, "key entry points at a record with another key");
    }
    if (s == PATINA_E_NOTFOUND && found) s = corrupt(c, "key entry without a record");
    return s;
}

patina_status patina_collection_get(patina_collection_t *c, uint64_t id, patina_record_t *rec)
{
    MDB_txn *txn;
    patina_status s;
    if (!c || !rec) return patina__fail(PATINA_E_INVALID, "store: null argument");
    c = shared_of(c);
    memset(rec, 0, sizeof *rec);
    PATINA_TRY(txn_begin(c, 0, &txn, "reading a record"));
    s = get_record(c, txn, id, rec);
    txn_abort(c, txn);
    return s;
}

patina_status patina_collection_next(patina_collection_t *c, uint64_t *cursor,
                                     patina_record_t *rec)
{
    MDB_txn *txn;
    MDB_cursor *cur;
    uint8_t kb[8];
    MDB_val k = {8, kb}, v;
    patina_status s;
    int rc;
    if (!c || !cursor || !rec) return patina__fail(PATINA_E_INVALID, "store: null argument");
    c = shared_of(c);
    memset(rec, 0, sizeof *rec);
    if (*cursor == UINT64_MAX) return PATINA_DONE;
    put_be64(kb, *cursor + 1);
    PATINA_TRY(txn_begin(c, 0, &txn, "iterating"));
    rc = mdb_cursor_open(txn, c->records, &cur);
    if (rc) {
        txn_abort(c, txn);
        return patina__store_mdb_fail(c, rc, "iterating");
    }
    rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    if (rc == MDB_NOTFOUND) s = PATINA_DONE;
    else if (rc) s = patina__store_mdb_fail(c, rc, "iterating");
    else if (k.mv_size != 8) s = corrupt(c, "bad record id");
    else s = unpack_record(c, rec, get_be64(k.mv_data), &v);
    mdb_cursor_close(cur);
    txn_abort(c, txn);
    if (s == PATINA_OK) *cursor = rec->id;
    return s;
}

patina_status patina_collection_tables(patina_collection_t *c, char ***specs, size_t *n)
{
    MDB_txn *txn;
    MDB_cursor *cur = NULL;
    MDB_stat st;
    MDB_val k, v;
    char **list = NULL;
    size_t cnt = 0, cap = 0;
    patina_status s = PATINA_OK;
    int rc;
    if (!c || !specs || !n) return patina__fail(PATINA_E_INVALID, "store: null argument");
    c = shared_of(c);
    *specs = NULL;
    *n = 0;
    PATINA_TRY(txn_begin(c, 0, &txn, "listing tables"));
    rc = mdb_stat(txn, c->tables, &st);
    if (!rc) rc = mdb_cursor_open(txn, c->tables, &cur);
    if (rc) {
        s = patina__store_mdb_fail(c, rc, "listing tables");
        goto out;
    }
    cap = st.ms_entries;
    if (cap && !(list = calloc(cap, sizeof *list))) {
        s = patina__fail(PATINA_E_NOMEM, "store: out of memory");
        goto out;
    }
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0 && cnt < cap;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (!(list[cnt] = malloc(k.mv_size + 1))) {
            s = patina__fail(PATINA_E_NOMEM, "store: out of memory");
            goto out;
        }
        memcpy(list[cnt], k.mv_data, k.mv_size);
        list[cnt++][k.mv_size] = '\0';
    }
    if (rc && rc != MDB_NOTFOUND) s = patina__store_mdb_fail(c, rc, "listing tables");
out:
    if (cur) mdb_cursor_close(cur);
    txn_abort(c, txn);
    if (s != PATINA_OK) {
        while (cnt) free(list[--cnt]);
        free(list);
        return s;
    }
    *specs = list;
    *n = cnt;
    return PATINA_OK;
}

/* The descriptor size of table `spec` from "tables"; *found = 0 when absent. */
static patina_status table_bytes(patina_collection_t *c, MDB_txn *txn, const char *spec,
                                 size_t *bytes, int *found)
{
    MDB_val k = {strlen(spec), (void *)spec}, v;
    int rc = mdb_get(txn, c->tables, &k, &v);
    *found = rc == 0;
    if (rc == MDB_NOTFOUND) return PATINA_OK;
    if (rc) return patina__store_mdb_fail(c, rc, "reading the table list");
    if (v.mv_size != 8) return corrupt(c, "bad table entry");
    *bytes = (size_t)get_le(v.mv_data, 8);
    if (*bytes == 0 || *bytes > DESC_MAX) return corrupt(c, "bad descriptor size in table entry");
    return PATINA_OK;
}

static patina_status no_table(const patina_collection_t *c, const char *spec)
{
    return patina__fail(PATINA_E_NOTFOUND, "store: no table '%s' in '%s'", spec, c->dir);
}

patina_status patina_collection_table_info(patina_collection_t *c, const char *spec, size_t *n,
                                           size_t *desc_bytes)
{
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_stat st;
    patina_status s;
    size_t bytes = 0;
    int found, rc;
    if (!c || !n || !desc_bytes) return patina__fail(PATINA_E_INVALID, "store: null argument");
    c = shared_of(c);
    *n = *desc_bytes = 0;
    PATINA_TRY(check_spec(spec));
    PATINA_TRY(desc_open(c, spec, &dbi, &found));
    if (!found) return no_table(c, spec);
    PATINA_TRY(txn_begin(c, 0, &txn, "reading a table"));
    s = table_bytes(c, txn, spec, &bytes, &found);
    if (s == PATINA_OK && !found) s = corrupt(c, "descriptor table without a table entry");
    if (s == PATINA_OK && (rc = mdb_stat(txn, dbi, &st)) != 0)
        s = patina__store_mdb_fail(c, rc, "reading a table");
    txn_abort(c, txn);
    if (s != PATINA_OK) return s;
    *n = st.ms_entries;
    *desc_bytes = bytes;
    return PATINA_OK;
}

/* Loads table `spec` (handle dbi) in txn: see patina_collection_load. */
static patina_status load_in(patina_collection_t *c, MDB_txn *txn, MDB_dbi dbi, const char *spec,
                             size_t bytes, uint64_t **ids_out, uint8_t **descs_out, size_t *n_out)
{
    MDB_cursor *cur = NULL;
    MDB_stat st;
    MDB_val k, v;
    uint64_t *ids = NULL;
    uint8_t *descs = NULL;
    size_t n = 0, i = 0;
    patina_status s = PATINA_OK;
    int rc;
    if ((rc = mdb_stat(txn, dbi, &st)) != 0 || (rc = mdb_cursor_open(txn, dbi, &cur)) != 0)
        return patina__store_mdb_fail(c, rc, "loading a table");
    n = st.ms_entries;
    if (n) {
        if (n > SIZE_MAX / bytes || !(ids = malloc(n * sizeof *ids)) ||
            !(descs = malloc(n * bytes))) {
            s = patina__fail(PATINA_E_NOMEM, "store: out of memory loading %zu x %zu bytes of '%s'",
                             n, bytes, spec);
            goto out;
        }
    }
    /* (n, bytes) u8 row-major, rows in id order (big-endian keys). */
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0 && i < n;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT), i++) {
        if (k.mv_size != 8 || v.mv_size != bytes) {
            s = corrupt(c, "descriptor of the wrong size");
            goto out;
        }
        ids[i] = get_be64(k.mv_data);
        memcpy(descs + i * bytes, v.mv_data, bytes);
    }
    if (rc && rc != MDB_NOTFOUND) s = patina__store_mdb_fail(c, rc, "loading a table");
    else if (i != n) s = corrupt(c, "table shorter than its count");
out:
    mdb_cursor_close(cur);
    if (s != PATINA_OK) {
        free(ids);
        free(descs);
        return s;
    }
    *ids_out = ids;
    *descs_out = descs;
    *n_out = n;
    return PATINA_OK;
}

patina_status patina_collection_load(patina_collection_t *c, const char *spec, uint64_t **ids_out,
                                     uint8_t **descs_out, size_t *n_out, size_t *desc_bytes)
{
    MDB_txn *txn;
    MDB_dbi dbi;
    size_t bytes = 0;
    patina_status s;
    int found;
    if (!c || !ids_out || !descs_out || !n_out || !desc_bytes)
        return patina__fail(PATINA_E_INVALID, "store: null argument");
    c = shared_of(c);
    *ids_out = NULL;
    *descs_out = NULL;
    *n_out = *desc_bytes = 0;
    PATINA_TRY(check_spec(spec));
    PATINA_TRY(desc_open(c, spec, &dbi, &found));
    if (!found) return no_table(c, spec);
    PATINA_TRY(txn_begin(c, 0, &txn, "loading a table"));
    s = table_bytes(c, txn, spec, &bytes, &found);
    if (s == PATINA_OK && !found) s = corrupt(c, "descriptor table without a table entry");
    if (s == PATINA_OK) s = load_in(c, txn, dbi, spec, bytes, ids_out, descs_out, n_out);
    txn_abort(c, txn);
    if (s == PATINA_OK) *desc_bytes = bytes;
    return s;
}

/* -------------------------------------------------------------- snapshots */

struct patina_snapshot {
    patina_collection_t *c;
    MDB_txn *txn;          /* one read transaction for the snapshot's life */
    size_t npub;           /* handles desc[0, npub) were published before it began */
    pthread_mutex_t mu;    /* LMDB: one thread at a time in a transaction */
};

/* Looks `spec` up among the first npub published handles. */
static int desc_find_before(patina_collection_t *c, const char *spec, size_t npub, MDB_dbi *dbi)
{
    size_t i;
    int found = 0;
    pthread_mutex_lock(&c->cache_mu);
    for (i = 0; i < npub && i < c->npub && !found; i++)
        if (strcmp(c->desc[i].spec, spec) == 0) {
            *dbi = c->desc[i].dbi;
            found = 1;
        }
    pthread_mutex_unlock(&c->cache_mu);
    return found;
}

/* In snapshot txn: *ready = 1 when every table it holds has a handle among
 * the first npub (a handle opened after a transaction began is not valid
 * in it). */
static patina_status snapshot_ready(patina_collection_t *c, MDB_txn *txn, size_t npub, int *ready)
{
    MDB_cursor *cur;
    MDB_val k, v;
    MDB_dbi dbi;
    char spec[SPEC_MAX + 1];
    patina_status s = PATINA_OK;
    int rc;
    *ready = 1;
    if ((rc = mdb_cursor_open(txn, c->tables, &cur)) != 0)
        return patina__store_mdb_fail(c, rc, "taking a snapshot");
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0 && *ready;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size == 0 || k.mv_size > SPEC_MAX) {
            s = corrupt(c, "bad table name");
            break;
        }
        memcpy(spec, k.mv_data, k.mv_size);
        spec[k.mv_size] = '\0';
        *ready = desc_find_before(c, spec, npub, &dbi);
    }
    mdb_cursor_close(cur);
    if (s == PATINA_OK && rc && rc != MDB_NOTFOUND)
        s = patina__store_mdb_fail(c, rc, "taking a snapshot");
    return s;
}

/* Opens (publishes) the handle of every table (no transaction of ours open). */
static patina_status open_all_handles(patina_collection_t *c)
{
    char **specs;
    size_t n, i;
    patina_status s;
    MDB_dbi dbi;
    int found;
    PATINA_TRY(patina_collection_tables(c, &specs, &n));
    for (i = 0, s = PATINA_OK; i < n; i++) {
        if (s == PATINA_OK) s = desc_open(c, specs[i], &dbi, &found);
        free(specs[i]);
    }
    free(specs);
    return s;
}

patina_status patina_snapshot_new(patina_snapshot_t **out, patina_collection_t *c)
{
    patina_snapshot_t *snap;
    patina_status s = PATINA_OK;
    int tries, ready = 0;
    if (!out) return patina__fail(PATINA_E_INVALID, "store: null snapshot pointer");
    *out = NULL;
    if (!c) return patina__fail(PATINA_E_INVALID, "store: null collection");
    c = shared_of(c);
    if (!(snap = calloc(1, sizeof *snap)))
        return patina__fail(PATINA_E_NOMEM, "store: out of memory");
    snap->c = c;
    pthread_mutex_init(&snap->mu, NULL);
    /* Usually once; again only when a table was created since its handle
     * was last looked for. */
    for (tries = 0; tries < 8 && !ready; tries++) {
        pthread_mutex_lock(&c->cache_mu);
        snap->npub = c->npub;
        pthread_mutex_unlock(&c->cache_mu);
        if ((s = txn_begin(c, 0, &snap->txn, "taking a snapshot")) != PATINA_OK) break;
        s = snapshot_ready(c, snap->txn, snap->npub, &ready);
        if (s == PATINA_OK && ready) break;
        txn_abort(c, snap->txn);
        snap->txn = NULL;
        if (s == PATINA_OK) s = open_all_handles(c);
        if (s != PATINA_OK) break;
    }
    if (s == PATINA_OK && !ready)
        s = patina__fail(PATINA_E_BUSY, "store: cannot take a snapshot of '%s': tables keep being "
                                        "created", c->dir);
    if (s != PATINA_OK) {
        pthread_mutex_destroy(&snap->mu);
        free(snap);
        return s;
    }
    *out = snap;
    return PATINA_OK;
}

void patina_snapshot_free(patina_snapshot_t *snap)
{
    if (!snap) return;
    txn_abort(snap->c, snap->txn);
    pthread_mutex_destroy(&snap->mu);
    free(snap);
}

patina_status patina_snapshot_get(patina_snapshot_t *snap, const uint64_t *ids, size_t n,
                                  patina_record_t *recs)
{
    patina_status s = PATINA_OK;
    size_t i, missing = 0, first = 0;
    if (!snap || (n && (!ids || !recs)))
        return patina__fail(PATINA_E_INVALID, "store: null argument");
    pthread_mutex_lock(&snap->mu);
    for (i = 0; i < n && s == PATINA_OK; i++) {
        s = get_record(snap->c, snap->txn, ids[i], &recs[i]);
        if (s == PATINA_E_NOTFOUND) {
            if (!missing++) first = i;
            s = PATINA_OK;
        }
    }
    pthread_mutex_unlock(&snap->mu);
    if (s != PATINA_OK) {
        while (i) patina_record_release(&recs[--i]);
        return s;
    }
    if (missing)
        return patina__fail(PATINA_E_NOTFOUND, "store: no record with id %llu in '%s'%s",
                            (unsigned long long)ids[first], snap->c->dir,
                            missing > 1 ? " (and others of the batch)" : "");
    return PATINA_OK;
}

patina_status patina_snapshot_load(patina_snapshot_t *snap, const char *spec, uint64_t **ids,
                                   uint8_t **descs, size_t *n, size_t *desc_bytes)
{
    patina_collection_t *c;
    MDB_dbi dbi = 0;
    size_t bytes = 0;
    patina_status s;
    int found;
    if (!snap || !ids || !descs || !n || !desc_bytes)
        return patina__fail(PATINA_E_INVALID, "store: null argument");
    *ids = NULL;
    *descs = NULL;
    *n = *desc_bytes = 0;
    PATINA_TRY(check_spec(spec));
    c = snap->c;
    pthread_mutex_lock(&snap->mu);
    s = table_bytes(c, snap->txn, spec, &bytes, &found);
    if (s == PATINA_OK && !found) s = no_table(c, spec);
    if (s == PATINA_OK && !desc_find_before(c, spec, snap->npub, &dbi))
        s = patina__fail(PATINA_E_INTERNAL, "store: snapshot of '%s' has no handle for table '%s'",
                         c->dir, spec);
    if (s == PATINA_OK) s = load_in(c, snap->txn, dbi, spec, bytes, ids, descs, n);
    pthread_mutex_unlock(&snap->mu);
    if (s == PATINA_OK) *desc_bytes = bytes;
    return s;
}

/* ----------------------------------------------------------------- writes */

/* Deletes id from every descriptor table (write txn, mu held). */
static patina_status delete_descriptors(patina_collection_t *c, MDB_txn *txn, uint64_t id)
{
    MDB_cursor *cur;
    MDB_val k, v;
    uint8_t kb[8];
    MDB_val idk = {8, kb};
    char spec[SPEC_MAX + 1];
    patina_status s = PATINA_OK;
    int rc;
    put_be64(kb, id);
    if ((rc = mdb_cursor_open(txn, c->tables, &cur)) != 0)
        return patina__store_mdb_fail(c, rc, "removing");
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        MDB_dbi dbi;
        int found;
        if (k.mv_size == 0 || k.mv_size > SPEC_MAX) {
            s = corrupt(c, "bad table name");
            break;
        }
        memcpy(spec, k.mv_data, k.mv_size);
        spec[k.mv_size] = '\0';
        if ((s = desc_open_in(c, txn, spec, 0, &dbi, &found)) != PATINA_OK) break;
        if (!found) {
            s = corrupt(c, "table entry without a descriptor table");
            break;
        }
        rc = mdb_del(txn, dbi, &idk, NULL);
        if (rc && rc != MDB_NOTFOUND) {
            s = patina__store_mdb_fail(c, rc, "removing a descriptor");
            break;
        }
        rc = 0;
    }
    mdb_cursor_close(cur);
    if (s == PATINA_OK && rc && rc != MDB_NOTFOUND) s = patina__store_mdb_fail(c, rc, "removing");
    return s;
}

/* Reserves disk blocks for `bytes` more of data.mdb and for the pages that
 * the file should hold but may lack (write txn held), so that a full disk
 * shows as ENOSPC here rather than as a short write (EIO) inside the
 * commit. Blocks past the end of the file are kept (FALLOC_FL_KEEP_SIZE):
 * its size stays LMDB's. Returns 0, or the errno of a full disk or quota
 * (the transaction goes on: it may fit in free pages). */
static int reserve_space(patina_collection_t *c, uint64_t bytes)
{
    MDB_envinfo ei;
    MDB_stat es;
    struct stat st;
    off_t used, from;
    int fd, err;
    if (mdb_env_get_fd(c->env, &fd) || fstat(fd, &st) || mdb_env_info(c->env, &ei) ||
        mdb_env_stat(c->env, &es))
        return 0;
    used = (off_t)(ei.me_last_pgno + 1) * es.ms_psize;
    from = st.st_size < used ? st.st_size : used;
    err = fallocate(fd, FALLOC_FL_KEEP_SIZE, from, used - from + (off_t)bytes) == 0 ? 0 : errno;
    return patina__store_is_nospace(err) ? err : 0;
}

/* Disk bytes a write may take beyond its data: copies of the B-tree paths
 * it changes (leaf to root in each database) and the free list. */
#define WRITE_OVERHEAD (64u << 12)

/* What a batch may add to data.mdb: pages are at least half full, and a
 * value over half a page gets overflow pages of its own. */
static uint64_t batch_bytes(const patina_insert_t *items, size_t n, size_t desc_bytes)
{
    uint64_t total = WRITE_OVERHEAD;
    size_t i;
    for (i = 0; i < n; i++) {
        uint64_t key = strlen(items[i].key), rec = REC_HEADER + key;
        total += 2 * (rec + (key < KEY_INLINE_MAX ? key : 33) + desc_bytes + 3 * 24);
        if (desc_bytes > 2000) total += desc_bytes + 4096;
        if (rec > 2000) total += rec + 4096;
    }
    return total;
}

/* The errno or LMDB code that makes a failed write "full", or 0. LMDB
 * reports a short write as EIO: that counts as full when the reservation
 * before it failed for space, or the file system has next to nothing left. */
static int full_code(patina_collection_t *c, int rc, int nospace)
{
    struct statvfs v;
    int fd;
    if (rc == MDB_MAP_FULL || patina__store_is_nospace(rc)) return rc;
    if (rc != EIO) return 0;
    if (nospace) return nospace;
    if (mdb_env_get_fd(c->env, &fd) == 0 && fstatvfs(fd, &v) == 0 &&
        (uint64_t)v.f_bavail * v.f_frsize < (1u << 20))
        return ENOSPC;
    return 0;
}

/* Message for a write that did not commit because the map or disk is full. */
static patina_status write_full(patina_collection_t *c, int rc, const char *what)
{
    MDB_envinfo ei;
    if (rc == MDB_MAP_FULL) {
        mdb_env_info(c->env, &ei);
        return patina__fail(PATINA_E_FULL,
                            "store: collection map is full (%llu bytes) in '%s'; nothing from this "
                            "%s was written (open with a larger map size)",
                            (unsigned long long)ei.me_mapsize, c->dir, what);
    }
    return patina__fail(PATINA_E_FULL, "store: %s writing '%s'; nothing from this %s was written",
                        patina__store_nospace_words(rc), c->dir, what);
}

/* ------------------------------------------------------ the content index */

/* "sha" maps a SHA-256 (32 bytes) to the ids of the records with that
 * content (u64 BE, sorted duplicates: the first is the lowest id). Format 1
 * collections lack it; the first write here builds it. */

/* The "sha" database for write transaction txn (mu held): the published
 * handle; in a collection of format 1, the one another process's write
 * made since this handle opened, or one made here: created, filled from
 * the records and the format set to 2, all in txn. sha_settle publishes
 * it once txn has committed. */
static patina_status sha_ready(patina_collection_t *c, MDB_txn *txn, MDB_dbi *dbi)
{
    MDB_cursor *cur;
    MDB_val k, v;
    int rc;
    if (atomic_load(&c->has_sha)) {
        *dbi = c->sha;
        return PATINA_OK;
    }
    if (c->sha_pending) {
        *dbi = c->sha_new;
        return PATINA_OK;
    }
    rc = mdb_dbi_open(txn, "sha", SHA_FLAGS, dbi);
    if (rc == MDB_NOTFOUND) {
        if ((rc = mdb_dbi_open(txn, "sha", MDB_CREATE | SHA_FLAGS, dbi)) != 0 ||
            (rc = mdb_cursor_open(txn, c->records, &cur)) != 0)
            return patina__store_mdb_fail(c, rc, "building the content index");
        for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
            uint8_t hash[32], id[8];
            MDB_val hk = {32, hash}, hv = {8, id};
            if (k.mv_size != 8 || v.mv_size < REC_HEADER) {
                mdb_cursor_close(cur);
                return corrupt(c, "bad record header");
            }
            memcpy(hash, (const uint8_t *)v.mv_data + 40, 32);
            memcpy(id, k.mv_data, 8);
            if ((rc = mdb_put(txn, *dbi, &hk, &hv, MDB_NODUPDATA)) != 0 && rc != MDB_KEYEXIST) break;
        }
        mdb_cursor_close(cur);
        if (rc != MDB_NOTFOUND) return patina__store_mdb_fail(c, rc, "building the content index");
        PATINA_TRY(write_meta(c, txn, "format", 4, PATINA_FORMAT));
    } else if (rc) {
        return patina__store_mdb_fail(c, rc, "opening the content index");
    }
    c->sha_new = *dbi;
    c->sha_pending = 1;
    return PATINA_OK;
}

/* After a write transaction (mu held): a content index it made or opened
 * is published when it committed, dropped (LMDB closed it) when not. */
static void sha_settle(patina_collection_t *c, int committed)
{
    if (!c->sha_pending) return;
    c->sha_pending = 0;
    if (!committed) return;
    c->sha = c->sha_new;
    atomic_store(&c->format, PATINA_FORMAT);
    atomic_store(&c->has_sha, 1);
}

/* Adds (hash, id) to the content index: 0 or an LMDB error. */
static int sha_add(MDB_txn *txn, MDB_dbi dbi, const uint8_t hash[32], uint64_t id)
{
    uint8_t ib[8];
    MDB_val k = {32, (void *)hash}, v = {8, ib};
    int rc;
    put_be64(ib, id);
    rc = mdb_put(txn, dbi, &k, &v, MDB_NODUPDATA);
    return rc == MDB_KEYEXIST ? 0 : rc;
}

/* Removes (hash, id) from the content index (absent: nothing to do). */
static int sha_del(MDB_txn *txn, MDB_dbi dbi, const uint8_t hash[32], uint64_t id)
{
    uint8_t ib[8];
    MDB_val k = {32, (void *)hash}, v = {8, ib};
    int rc;
    put_be64(ib, id);
    rc = mdb_del(txn, dbi, &k, &v);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* The body of put (write txn, mu held). *full receives the LMDB code of a
 * failed LMDB call (full_code tells whether it means a full map or disk). */
static patina_status put_batch(patina_collection_t *c, MDB_txn *txn, const char *spec,
                               size_t desc_bytes, const patina_insert_t *items, size_t n,
                               uint64_t *ids, int *full)
{
    MDB_dbi dbi, shadb;
    MDB_stat st;
    uint8_t kb[8], tb[8];
    uint8_t *rec = NULL;
    size_t reccap = 0, have_bytes = 0, i;
    uint64_t next_id;
    int64_t added = (int64_t)time(NULL);
    int found, rc = 0;
    patina_status s;
    MDB_val tk = {strlen(spec), (void *)spec}, tv = {8, tb};

    /* The table: its descriptor size is fixed by its first insert. */
    PATINA_TRY(table_bytes(c, txn, spec, &have_bytes, &found));
    if (found && have_bytes != desc_bytes)
        return patina__fail(PATINA_E_INVALID,
                            "store: table '%s' holds %zu-byte descriptors, not %zu", spec,
                            have_bytes, desc_bytes);
    if (!found) {
        if ((rc = mdb_stat(txn, c->tables, &st)) != 0) goto lmdb_error;
        if (st.ms_entries >= PATINA_TABLES_MAX)
            return patina__fail(PATINA_E_LIMIT, "store: '%s' has %d tables already (max)", c->dir,
                                PATINA_TABLES_MAX);
        put_le(tb, desc_bytes, 8);
        if ((rc = mdb_put(txn, c->tables, &tk, &tv, 0)) != 0) goto lmdb_error;
    }
    PATINA_TRY(desc_open_in(c, txn, spec, 1, &dbi, &found));
    PATINA_TRY(read_meta(c, txn, "next_id", 8, &next_id));
    PATINA_TRY(sha_ready(c, txn, &shadb));

    for (i = 0; i < n; i++) {
        const patina_insert_t *it = &items[i];
        size_t keylen = strlen(it->key);
        keyform_t kf;
        MDB_val k = {8, kb}, v;
        uint64_t id = 0;
        unsigned flags = MDB_APPEND; /* a new id is the largest */
        int64_t when = added;
        if ((s = lookup_key(c, txn, it->key, keylen, &id, &found)) != PATINA_OK) goto out;
        if (found) {
            /* Replace; the id stays. Changed content makes the descriptors of
             * every table stale: they go. The same content keeps them, so a
             * second family can be added to images already stored, and its
             * time added: the image was not added again. */
            patina_record_t old;
            if ((s = get_record(c, txn, id, &old)) != PATINA_OK) goto out;
            if (memcmp(old.sha256, it->sha256, 32) == 0) when = old.added;
            if (memcmp(old.sha256, it->sha256, 32) != 0) {
                if ((s = delete_descriptors(c, txn, id)) != PATINA_OK) {
                    patina_record_release(&old);
                    goto out;
                }
                if ((rc = sha_del(txn, shadb, old.sha256, id)) != 0 ||
                    (rc = sha_add(txn, shadb, it->sha256, id)) != 0) {
                    patina_record_release(&old);
                    goto lmdb_error;
                }
            }
            patina_record_release(&old);
            flags = 0;
        } else {
            id = next_id++;
            if ((rc = sha_add(txn, shadb, it->sha256, id)) != 0) goto lmdb_error;
        }
        if (REC_HEADER + keylen > reccap) {
            uint8_t *r = realloc(rec, REC_HEADER + keylen);
            if (!r) {
                s = patina__fail(PATINA_E_NOMEM, "store: out of memory");
                goto out;
            }
            rec = r;
            reccap = REC_HEADER + keylen;
        }
        pack_record(rec, it, keylen, when);
        put_be64(kb, id);
        v.mv_size = REC_HEADER + keylen;
        v.mv_data = rec;
        if ((rc = mdb_put(txn, c->records, &k, &v, flags)) != 0) goto lmdb_error;
        make_keyform(&kf, it->key, keylen);
        v.mv_size = 8;
        v.mv_data = kb;
        if ((rc = mdb_put(txn, c->keys, &kf.val, &v, 0)) != 0) goto lmdb_error;
        v.mv_size = desc_bytes;
        v.mv_data = (void *)it->desc;
        if ((rc = mdb_put(txn, dbi, &k, &v, flags)) != 0) goto lmdb_error;
        if (ids) ids[i] = id;
    }
    s = write_meta(c, txn, "next_id", 8, next_id);
    goto out;
lmdb_error:
    *full = rc;
    s = rc == MDB_KEYEXIST ? corrupt(c, "an id at or above next_id exists")
                           : patina__store_mdb_fail(c, rc, "writing a batch");
out:
    free(rec);
    return s;
}

/* Ends a batch's write transaction (locked_begin's): aborted after a
 * failure s, else committed; a full map or disk becomes PATINA_E_FULL; the
 * tables opened in it are published or dropped. Returns the outcome. */
static patina_status batch_end(patina_collection_t *c, MDB_txn *txn, patina_status s, int full, int nospace)
{
    int rc;
    if (s != PATINA_OK) {
        mdb_txn_abort(txn);
        if ((full = full_code(c, full, nospace)) != 0) s = write_full(c, full, "batch");
    } else if ((rc = mdb_txn_commit(txn)) != 0) {
        s = (full = full_code(c, rc, nospace)) != 0
                ? write_full(c, full, "batch")
                : patina__store_mdb_fail(c, rc, "committing a batch");
    }
    desc_settle(c, s == PATINA_OK);
    sha_settle(c, s == PATINA_OK);
    locked_end(c);
    return s;
}

patina_status patina_collection_put(patina_collection_t *c, const char *spec, size_t desc_bytes,
                                    const patina_insert_t *items, size_t n, uint64_t *ids)
{
    MDB_txn *txn;
    patina_status s;
    size_t i, len;
    int full = 0, nospace;
    if (!c) return patina__fail(PATINA_E_INVALID, "store: null collection");
    PATINA_TRY(check_writable(c, "add records"));
    c = shared_of(c);
    PATINA_TRY(check_spec(spec));
    if (desc_bytes == 0 || desc_bytes > DESC_MAX)
        return patina__fail(PATINA_E_INVALID, "store: descriptor size %zu not in 1..%u", desc_bytes,
                            DESC_MAX);
    if (n && !items) return patina__fail(PATINA_E_INVALID, "store: null items");
    for (i = 0; i < n; i++) {
        if (!items[i].key || !*items[i].key)
            return patina__fail(PATINA_E_INVALID, "store: item %zu has an empty key", i);
        if ((len = strlen(items[i].key)) > PATINA_KEY_MAX)
            return patina__fail(PATINA_E_LIMIT, "store: item %zu has a key of %zu bytes (max %d)", i,
                                len, PATINA_KEY_MAX);
        if (!items[i].desc)
            return patina__fail(PATINA_E_INVALID, "store: item %zu ('%.200s') has no descriptor", i,
                                items[i].key);
    }
    if (n == 0) return PATINA_OK;

    PATINA_TRY(locked_begin(c, 1, &txn, "writing a batch"));
    nospace = reserve_space(c, batch_bytes(items, n, desc_bytes));
    s = put_batch(c, txn, spec, desc_bytes, items, n, ids, &full);
    s = batch_end(c, txn, s, full, nospace);
    return s;
}

patina_status patina_collection_put_tables(patina_collection_t *c, const patina_table_descs_t *tables,
                                           size_t ntables, const patina_insert_t *items, size_t n, uint64_t *ids)
{
    MDB_txn *txn;
    patina_insert_t *view = NULL;
    patina_status s = PATINA_OK;
    size_t t, i, len, bytes = 0;
    int full = 0, nospace;
    if (!c) return patina__fail(PATINA_E_INVALID, "store: null collection");
    PATINA_TRY(check_writable(c, "add records"));
    c = shared_of(c);
    if (ntables == 0 || !tables) return patina__fail(PATINA_E_INVALID, "store: no tables");
    if (n && !items) return patina__fail(PATINA_E_INVALID, "store: null items");
    for (t = 0; t < ntables; t++) {
        PATINA_TRY(check_spec(tables[t].spec));
        if (tables[t].desc_bytes == 0 || tables[t].desc_bytes > DESC_MAX)
            return patina__fail(PATINA_E_INVALID, "store: descriptor size %zu not in 1..%u", tables[t].desc_bytes,
                                DESC_MAX);
        if (n && !tables[t].descs)
            return patina__fail(PATINA_E_INVALID, "store: table '%.200s' has no descriptors", tables[t].spec);
        for (i = 0; i < t; i++)
            if (!strcmp(tables[i].spec, tables[t].spec))
                return patina__fail(PATINA_E_INVALID, "store: table '%.200s' given twice", tables[t].spec);
    }
    for (i = 0; i < n; i++) {
        if (!items[i].key || !*items[i].key)
            return patina__fail(PATINA_E_INVALID, "store: item %zu has an empty key", i);
        if ((len = strlen(items[i].key)) > PATINA_KEY_MAX)
            return patina__fail(PATINA_E_LIMIT, "store: item %zu has a key of %zu bytes (max %d)", i, len,
                                PATINA_KEY_MAX);
    }
    if (n == 0) return PATINA_OK;
    if (!(view = malloc(n * sizeof *view))) return patina__fail(PATINA_E_NOMEM, "store: out of memory");
    memcpy(view, items, n * sizeof *view);
    for (t = 0; t < ntables; t++) bytes += batch_bytes(items, n, tables[t].desc_bytes);
    if ((s = locked_begin(c, 1, &txn, "writing a batch")) != PATINA_OK) {
        free(view);
        return s;
    }
    nospace = reserve_space(c, bytes);
    /* table by table in the one transaction: the first makes (or replaces) the records, the
     * others find them with the same content and add their descriptors */
    for (t = 0; t < ntables && s == PATINA_OK; t++) {
        for (i = 0; i < n; i++) view[i].desc = (const uint8_t *)tables[t].descs + i * tables[t].desc_bytes;
        s = put_batch(c, txn, tables[t].spec, tables[t].desc_bytes, view, n, t == 0 ? ids : NULL, &full);
    }
    s = batch_end(c, txn, s, full, nospace);
    free(view);
    return s;
}

patina_status patina_collection_remove(patina_collection_t *c, uint64_t id)
{
    MDB_txn *txn;
    patina_record_t rec;
    keyform_t kf;
    uint8_t kb[8];
    MDB_val k = {8, kb};
    patina_status s;
    int rc = 0, nospace = 0;
    if (!c) return patina__fail(PATINA_E_INVALID, "store: null collection");
    PATINA_TRY(check_writable(c, "remove records"));
    c = shared_of(c);
    PATINA_TRY(locked_begin(c, 1, &txn, "removing"));
    {
        MDB_stat ts;
        nospace = reserve_space(c, WRITE_OVERHEAD + (mdb_stat(txn, c->tables, &ts) == 0
                                                         ? (uint64_t)ts.ms_entries * (4u << 12)
                                                         : 0));
    }
    s = get_record(c, txn, id, &rec);
    if (s == PATINA_OK) {
        /* The key entry goes only if it points here (it always should). */
        uint64_t kid = 0;
        int found;
        size_t len = strlen(rec.key);
        MDB_dbi shadb;
        s = len ? lookup_key(c, txn, rec.key, len, &kid, &found) : corrupt(c, "empty key");
        if (s == PATINA_OK && found && kid == id) {
            make_keyform(&kf, rec.key, len);
            rc = mdb_del(txn, c->keys, &kf.val, NULL);
        }
        if (s == PATINA_OK && !rc && (s = sha_ready(c, txn, &shadb)) == PATINA_OK)
            rc = sha_del(txn, shadb, rec.sha256, id);
        patina_record_release(&rec);
    }
    put_be64(kb, id);
    if (s == PATINA_OK && !rc) rc = mdb_del(txn, c->records, &k, NULL);
    if (s == PATINA_OK && rc) s = patina__store_mdb_fail(c, rc, "removing a record");
    if (s == PATINA_OK) s = delete_descriptors(c, txn, id);
    if (s != PATINA_OK) {
        mdb_txn_abort(txn);
    } else if ((rc = mdb_txn_commit(txn)) != 0) {
        int full = full_code(c, rc, nospace);
        s = full ? write_full(c, full, "removal")
                 : patina__store_mdb_fail(c, rc, "committing a removal");
    }
    desc_settle(c, s == PATINA_OK);
    sha_settle(c, s == PATINA_OK);
    locked_end(c);
    return s;
}

patina_status patina_collection_get_descriptor(patina_collection_t *c, const char *spec,
                                               uint64_t id, void *out, size_t bytes)
{
    MDB_txn *txn;
    MDB_dbi dbi;
    uint8_t kb[8];
    MDB_val k = {8, kb}, v;
    patina_status s = PATINA_OK;
    int found, rc;
    if (!c || !out) return patina__fail(PATINA_E_INVALID, "store: null argument");
    c = shared_of(c);
    PATINA_TRY(check_spec(spec));
    PATINA_TRY(desc_open(c, spec, &dbi, &found));
    if (!found) return no_table(c, spec);
    PATINA_TRY(txn_begin(c, 0, &txn, "reading a descriptor"));
    put_be64(kb, id);
    rc = mdb_get(txn, dbi, &k, &v);
    if (rc == MDB_NOTFOUND)
        s = patina__fail(PATINA_E_NOTFOUND, "store: image %llu has no '%s' descriptor in '%s'",
                         (unsigned long long)id, spec, c->dir);
    else if (rc)
        s = patina__store_mdb_fail(c, rc, "reading a descriptor");
    else if (v.mv_size != bytes)
        s = patina__fail(PATINA_E_INVALID, "store: '%s' descriptors are %zu bytes, not %zu", spec,
                         (size_t)v.mv_size, bytes);
    else
        memcpy(out, v.mv_data, bytes);
    txn_abort(c, txn);
    return s;
}

/* ------------------------------------------------------ auxiliary blobs */

#define AUX_PREFIX "aux:"

static patina_status aux_key(char *buf, size_t cap, const char *name, MDB_val *k)
{
    size_t len;
    if (!name || !*name) return patina__fail(PATINA_E_INVALID, "store: empty auxiliary blob name");
    if ((len = strlen(name)) > SPEC_MAX)
        return patina__fail(PATINA_E_LIMIT, "store: auxiliary blob name of %zu bytes (max %d)", len, SPEC_MAX);
    snprintf(buf, cap, AUX_PREFIX "%s", name);
    k->mv_size = strlen(buf);
    k->mv_data = buf;
    return PATINA_OK;
}

patina_status patina_collection_put_aux(patina_collection_t *c, const char *name, const void *data,
                                        size_t bytes)
{
    char kb[SPEC_MAX + sizeof AUX_PREFIX];
    MDB_val k, v = {bytes, (void *)data};
    MDB_txn *txn;
    patina_status s = PATINA_OK;
    int rc, nospace;
    if (!c || (bytes && !data)) return patina__fail(PATINA_E_INVALID, "store: null argument");
    PATINA_TRY(check_writable(c, "write auxiliary data"));
    c = shared_of(c);
    PATINA_TRY(aux_key(kb, sizeof kb, name, &k));
    if (bytes > PATINA_AUX_MAX)
        return patina__fail(PATINA_E_LIMIT, "store: auxiliary blob '%s' of %zu bytes (max %zu)", name, bytes,
                            (size_t)PATINA_AUX_MAX);
    PATINA_TRY(locked_begin(c, 1, &txn, "writing auxiliary data"));
    nospace = reserve_space(c, WRITE_OVERHEAD + 2 * (uint64_t)bytes + 4096);
    rc = bytes ? mdb_put(txn, c->meta, &k, &v, 0) : mdb_del(txn, c->meta, &k, NULL);
    if (rc == MDB_NOTFOUND && !bytes) rc = 0;
    if (rc) {
        int full = full_code(c, rc, nospace);
        s = full ? write_full(c, full, "auxiliary write")
                 : patina__store_mdb_fail(c, rc, "writing auxiliary data");
        mdb_txn_abort(txn);
    } else if ((rc = mdb_txn_commit(txn)) != 0) {
        int full = full_code(c, rc, nospace);
        s = full ? write_full(c, full, "auxiliary write")
                 : patina__store_mdb_fail(c, rc, "committing auxiliary data");
    }
    locked_end(c);
    return s;
}

static patina_status aux_get_in(patina_collection_t *c, MDB_txn *txn, const char *name, const MDB_val *k,
                                void **data, size_t *bytes)
{
    MDB_val v;
    int rc = mdb_get(txn, c->meta, (MDB_val *)k, &v);
    if (rc == MDB_NOTFOUND)
        return patina__fail(PATINA_E_NOTFOUND, "store: no auxiliary blob '%s' in '%s'", name, c->dir);
    if (rc) return patina__store_mdb_fail(c, rc, "reading auxiliary data");
    if (v.mv_size) {
        if (!(*data = malloc(v.mv_size)))
            return patina__fail(PATINA_E_NOMEM, "store: out of memory reading '%s' (%zu bytes)", name,
                                (size_t)v.mv_size);
        memcpy(*data, v.mv_data, v.mv_size);
    }
    *bytes = v.mv_size;
    return PATINA_OK;
}

patina_status patina_collection_get_aux(patina_collection_t *c, const char *name, void **data, size_t *bytes)
{
    char kb[SPEC_MAX + sizeof AUX_PREFIX];
    MDB_val k;
    MDB_txn *txn;
    patina_status s;
    if (!c || !data || !bytes) return patina__fail(PATINA_E_INVALID, "store: null argument");
    *data = NULL;
    *bytes = 0;
    c = shared_of(c);
    PATINA_TRY(aux_key(kb, sizeof kb, name, &k));
    PATINA_TRY(txn_begin(c, 0, &txn, "reading auxiliary data"));
    s = aux_get_in(c, txn, name, &k, data, bytes);
    txn_abort(c, txn);
    return s;
}

patina_status patina_snapshot_get_aux(patina_snapshot_t *snap, const char *name, void **data, size_t *bytes)
{
    char kb[SPEC_MAX + sizeof AUX_PREFIX];
    MDB_val k;
    patina_status s;
    if (!snap || !data || !bytes) return patina__fail(PATINA_E_INVALID, "store: null argument");
    *data = NULL;
    *bytes = 0;
    PATINA_TRY(aux_key(kb, sizeof kb, name, &k));
    pthread_mutex_lock(&snap->mu);
    s = aux_get_in(snap->c, snap->txn, name, &k, data, bytes);
    pthread_mutex_unlock(&snap->mu);
    return s;
}

/* ------------------------------------------------- content lookups */

/* The lowest id with content `hash` in txn (*found 0 when none): through
 * the content index, or in a collection without one by a scan of the records. */
static patina_status sha_lookup(patina_collection_t *c, MDB_txn *txn, int indexed, const uint8_t hash[32],
                                uint64_t *id, int *found)
{
    MDB_val k = {32, (void *)hash}, v;
    MDB_cursor *cur;
    int rc;
    *found = 0;
    if (indexed) {
        rc = mdb_get(txn, c->sha, &k, &v); /* the first duplicate: the lowest id */
        if (rc == MDB_NOTFOUND) return PATINA_OK;
        if (rc) return patina__store_mdb_fail(c, rc, "looking content up");
        if (v.mv_size != 8) return corrupt(c, "bad content index entry");
        *id = get_be64(v.mv_data);
        *found = 1;
        return PATINA_OK;
    }
    if ((rc = mdb_cursor_open(txn, c->records, &cur)) != 0)
        return patina__store_mdb_fail(c, rc, "looking content up");
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
        if (k.mv_size == 8 && v.mv_size >= REC_HEADER && !memcmp((const uint8_t *)v.mv_data + 40, hash, 32)) {
            *id = get_be64(k.mv_data);
            *found = 1;
            break;
        }
    mdb_cursor_close(cur);
    return rc == 0 || rc == MDB_NOTFOUND ? PATINA_OK
                                         : patina__store_mdb_fail(c, rc, "looking content up");
}

/* Makes the content index usable by readers of this handle when the
 * collection has one (another process's write may have made it since this
 * handle opened), or, on a writable handle, builds it. Leaves has_sha 0 only
 * for a read-only handle of a collection without one. */
static patina_status sha_publish(patina_collection_t *c, int writable)
{
    MDB_txn *txn;
    MDB_dbi dbi;
    patina_status s;
    int rc;
    if (atomic_load(&c->has_sha)) return PATINA_OK;
    if (writable) {
        int nospace;
        PATINA_TRY(locked_begin(c, 1, &txn, "building the content index"));
        nospace = reserve_space(c, WRITE_OVERHEAD);
        s = sha_ready(c, txn, &dbi);
        if (s != PATINA_OK) {
            mdb_txn_abort(txn);
        } else if ((rc = mdb_txn_commit(txn)) != 0) {
            int full = full_code(c, rc, nospace);
            s = full ? write_full(c, full, "content index")
                     : patina__store_mdb_fail(c, rc, "committing the content index");
        }
        sha_settle(c, s == PATINA_OK);
        locked_end(c);
        return s;
    }
    /* A handle opened in a committed read transaction is process-wide. */
    PATINA_TRY(locked_begin(c, 0, &txn, "opening the content index"));
    rc = atomic_load(&c->has_sha) ? 0 : mdb_dbi_open(txn, "sha", SHA_FLAGS, &dbi);
    if (rc == 0 && !atomic_load(&c->has_sha)) {
        if ((rc = mdb_txn_commit(txn)) == 0) {
            c->sha = dbi;
            atomic_store(&c->format, PATINA_FORMAT);
            atomic_store(&c->has_sha, 1);
        }
    } else {
        mdb_txn_abort(txn);
    }
    locked_end(c);
    return rc == 0 || rc == MDB_NOTFOUND
               ? PATINA_OK
               : patina__store_mdb_fail(c, rc, "opening the content index");
}

patina_status patina_collection_get_by_sha256(patina_collection_t *c, const uint8_t sha256[32],
                                              patina_record_t *rec)
{
    MDB_txn *txn;
    patina_status s;
    uint64_t id = 0;
    int found = 0, writable;
    if (!c || !sha256 || !rec) return patina__fail(PATINA_E_INVALID, "store: null argument");
    writable = !c->readonly;
    c = shared_of(c);
    memset(rec, 0, sizeof *rec);
    PATINA_TRY(sha_publish(c, writable));
    PATINA_TRY(txn_begin(c, 0, &txn, "looking content up"));
    s = sha_lookup(c, txn, atomic_load(&c->has_sha), sha256, &id, &found);
    if (s == PATINA_OK && !found) {
        char hex[65];
        for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", sha256[i]);
        s = patina__fail(PATINA_E_NOTFOUND, "store: no record with SHA-256 %s in '%s'", hex, c->dir);
    } else if (s == PATINA_OK) {
        s = get_record(c, txn, id, rec);
        if (s == PATINA_E_NOTFOUND) s = corrupt(c, "content index entry without a record");
    }
    txn_abort(c, txn);
    return s;
}

/* ------------------------------------------------------- roots and keys */

#define ROOT_MAX 4096 /* bytes of a recorded root (a relative path) */

/* The root recorded in the collection, relative to its directory: *rel
 * malloc'd, NULL when the collection has none (made before roots). */
static patina_status root_read(patina_collection_t *c, char **rel)
{
    MDB_txn *txn;
    MDB_val k = {4, "root"}, v;
    patina_status s = PATINA_OK;
    int rc;
    *rel = NULL;
    PATINA_TRY(txn_begin(c, 0, &txn, "reading the root"));
    rc = mdb_get(txn, c->meta, &k, &v);
    if (rc == 0 && (v.mv_size == 0 || v.mv_size > ROOT_MAX || memchr(v.mv_data, 0, v.mv_size)))
        s = corrupt(c, "bad root entry");
    else if (rc == 0 && !(*rel = strndup(v.mv_data, v.mv_size)))
        s = patina__fail(PATINA_E_NOMEM, "store: out of memory");
    else if (rc && rc != MDB_NOTFOUND)
        s = patina__store_mdb_fail(c, rc, "reading the root");
    txn_abort(c, txn);
    return s;
}

/* `path` (absolute) with "." and ".." components and repeated slashes
 * removed, lexically (malloc'd; NULL when out of memory). */
static char *normalise(const char *path)
{
    size_t len = strlen(path), o = 0, i = 0;
    char *out = malloc(len + 2);
    if (!out) return NULL;
    while (i < len) {
        size_t j = i, n;
        while (j < len && path[j] != '/') j++;
        n = j - i;
        if (n == 0 || (n == 1 && path[i] == '.')) {
            /* nothing */
        } else if (n == 2 && path[i] == '.' && path[i + 1] == '.') {
            while (o > 0 && out[o - 1] != '/') o--;
            if (o > 0) o--; /* the slash before the dropped component */
        } else {
            out[o++] = '/';
            memcpy(out + o, path + i, n);
            o += n;
        }
        i = j + 1;
    }
    if (o == 0) out[o++] = '/';
    out[o] = '\0';
    return out;
}

/* The absolute root: the collection's directory joined to rel, resolved
 * (realpath) when it exists, else normalised lexically. */
static patina_status root_abs(patina_collection_t *c, const char *rel, char **abs)
{
    char *joined, *r;
    if (!c->absdir) return patina__fail(PATINA_E_IO, "store: cannot resolve the directory of '%s'", c->dir);
    if (rel[0] == '/') joined = strdup(rel);
    else if (asprintf(&joined, "%s/%s", c->absdir, rel) < 0) joined = NULL;
    if (!joined) return patina__fail(PATINA_E_NOMEM, "store: out of memory");
    r = realpath(joined, NULL);
    if (!r) r = normalise(joined);
    free(joined);
    if (!r) return patina__fail(PATINA_E_NOMEM, "store: out of memory");
    *abs = r;
    return PATINA_OK;
}

/* The path of absolute, normalised `to` relative to directory `from` (the
 * same), e.g. "..", "../photos", "." (malloc'd; NULL when out of memory). */
static char *relative_to(const char *from, const char *to)
{
    size_t i = 0, common = 0, up = 0, len;
    const char *rest;
    char *out, *o;
    /* the longest common prefix that ends at a component boundary */
    while (from[i] && from[i] == to[i]) {
        i++;
        if ((from[i] == '/' || !from[i]) && (to[i] == '/' || !to[i])) common = i;
    }
    if (!strcmp(from, "/")) common = 0;
    for (i = common; from[i]; i++)
        if (from[i] == '/' && from[i + 1]) up++;
    rest = to + common;
    while (*rest == '/') rest++;
    len = 3 * up + strlen(rest) + 2;
    if (!(out = malloc(len))) return NULL;
    o = out;
    for (i = 0; i < up; i++) o += sprintf(o, i + 1 < up || *rest ? "../" : "..");
    o += sprintf(o, "%s", rest);
    if (o == out) strcpy(out, ".");
    return out;
}

patina_status patina_collection_root(patina_collection_t *c, char **dir)
{
    char *rel;
    patina_status s;
    if (!c || !dir) return patina__fail(PATINA_E_INVALID, "store: null argument");
    *dir = NULL;
    c = shared_of(c);
    PATINA_TRY(root_read(c, &rel));
    if (!rel)
        return patina__fail(PATINA_E_NOTFOUND,
                            "store: '%s' has no root (it was made before collections recorded one: its "
                            "keys are paths as they were given)",
                            c->dir);
    s = root_abs(c, rel, dir);
    free(rel);
    return s;
}

patina_status patina_collection_set_root(patina_collection_t *c, const char *dir)
{
    char *real = NULL, *rel = NULL, *old = NULL, *oldabs = NULL;
    MDB_txn *txn;
    MDB_val k = {4, "root"}, v;
    struct stat st;
    uint64_t next = 0;
    patina_status s;
    int rc;
    if (!c || !dir || !*dir) return patina__fail(PATINA_E_INVALID, "store: null or empty root");
    PATINA_TRY(check_writable(c, "set the root"));
    c = shared_of(c);
    if (!(real = realpath(dir, NULL)))
        return patina__fail(errno == ENOENT ? PATINA_E_NOTFOUND : PATINA_E_IO, "store: root '%s': %s", dir,
                            strerror(errno));
    if (stat(real, &st) != 0 || !S_ISDIR(st.st_mode)) {
        free(real);
        return patina__fail(PATINA_E_INVALID, "store: root '%s' is not a directory", dir);
    }
    if (!c->absdir || !(rel = relative_to(c->absdir, real))) {
        free(real);
        return c->absdir ? patina__fail(PATINA_E_NOMEM, "store: out of memory")
                         : patina__fail(PATINA_E_IO, "store: cannot resolve the directory of '%s'", c->dir);
    }
    if (strlen(rel) > ROOT_MAX) {
        s = patina__fail(PATINA_E_LIMIT, "store: root '%s' is %zu bytes away from the collection (max %d)", dir,
                         strlen(rel), ROOT_MAX);
        goto out;
    }
    if ((s = locked_begin(c, 1, &txn, "setting the root")) != PATINA_OK) goto out;
    rc = mdb_get(txn, c->meta, &k, &v);
    if (rc == 0 && !(old = strndup(v.mv_data, v.mv_size))) s = patina__fail(PATINA_E_NOMEM, "store: out of memory");
    else if (rc && rc != MDB_NOTFOUND) s = patina__store_mdb_fail(c, rc, "reading the root");
    if (s == PATINA_OK) s = read_meta(c, txn, "next_id", 8, &next);
    if (s == PATINA_OK && old && (s = root_abs(c, old, &oldabs)) == PATINA_OK && !strcmp(oldabs, real)) {
        mdb_txn_abort(txn); /* the same root: nothing to write */
        locked_end(c);
        goto out;
    }
    if (s == PATINA_OK && next != 1)
        s = old ? patina__fail(PATINA_E_INVALID,
                               "store: the root of '%s' is '%s'; it was fixed when the collection was made "
                               "(its keys are relative to it) and cannot change to '%s'",
                               c->dir, oldabs, real)
                : patina__fail(PATINA_E_INVALID,
                               "store: '%s' was made before collections recorded a root: its keys are paths "
                               "as they were given, and it keeps them (a root cannot be added to it)",
                               c->dir);
    v.mv_size = strlen(rel);
    v.mv_data = rel;
    if (s == PATINA_OK && (rc = mdb_put(txn, c->meta, &k, &v, 0)) != 0)
        s = patina__store_mdb_fail(c, rc, "setting the root");
    if (s != PATINA_OK) mdb_txn_abort(txn);
    else if ((rc = mdb_txn_commit(txn)) != 0)
        s = patina__store_mdb_fail(c, rc, "committing the root");
    locked_end(c);
out:
    free(real);
    free(rel);
    free(old);
    free(oldabs);
    return s;
}

/* 1 when absolute `real` lies under directory `root` (both resolved). */
static int under_root(const char *real, const char *root)
{
    size_t n = strlen(root);
    if (!strcmp(root, "/")) return real[0] == '/';
    return !strncmp(real, root, n) && (real[n] == '/' || real[n] == '\0');
}

patina_status patina_collection_key(patina_collection_t *c, const char *path, char **key)
{
    char *rel = NULL, *root = NULL, *real = NULL;
    patina_status s;
    if (!c || !path || !key) return patina__fail(PATINA_E_INVALID, "store: null argument");
    *key = NULL;
    if (!*path) return patina__fail(PATINA_E_INVALID, "store: empty path");
    c = shared_of(c);
    PATINA_TRY(root_read(c, &rel));
    if (!rel) { /* made before roots: the path as given */
        if (!(*key = strdup(path))) return patina__fail(PATINA_E_NOMEM, "store: out of memory");
        return PATINA_OK;
    }
    s = root_abs(c, rel, &root);
    free(rel);
    if (s != PATINA_OK) return s;
    if (!(real = realpath(path, NULL))) {
        int err = errno;
        free(root);
        return patina__fail(err == ENOENT ? PATINA_E_NOTFOUND : err == ENOMEM ? PATINA_E_NOMEM : PATINA_E_IO,
                            "store: cannot resolve '%s': %s", path, strerror(err));
    }
    if (!strcmp(real, root)) {
        s = patina__fail(PATINA_E_INVALID, "store: '%s' is the root of '%s', not a file", path, c->dir);
    } else if (under_root(real, root)) {
        size_t skip = strcmp(root, "/") ? strlen(root) + 1 : 1;
        if (!(*key = strdup(real + skip))) s = patina__fail(PATINA_E_NOMEM, "store: out of memory");
    } else {
        *key = real;
        real = NULL;
    }
    free(real);
    free(root);
    return s;
}

patina_status patina_collection_key_path(patina_collection_t *c, const char *key, char **path)
{
    char *rel = NULL, *root = NULL;
    patina_status s = PATINA_OK;
    if (!c || !key || !path) return patina__fail(PATINA_E_INVALID, "store: null argument");
    *path = NULL;
    if (!*key) return patina__fail(PATINA_E_INVALID, "store: empty key");
    c = shared_of(c);
    PATINA_TRY(root_read(c, &rel));
    if (!rel || key[0] == '/') {
        *path = strdup(key);
    } else {
        s = root_abs(c, rel, &root);
        if (s == PATINA_OK && asprintf(path, "%s%s%s", root, strcmp(root, "/") ? "/" : "", key) < 0) *path = NULL;
    }
    free(rel);
    free(root);
    if (s == PATINA_OK && !*path) s = patina__fail(PATINA_E_NOMEM, "store: out of memory");
    return s;
}
