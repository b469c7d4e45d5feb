/* Collection store on LMDB (include/patina/store.h): the embedded default
 * back end. This file is the on-disk format and the locking; it knows
 * nothing of images or descriptor families (a descriptor is opaque bytes).
 *
 * On-disk format 1. One LMDB environment in the collection directory
 * (data.mdb + lock.mdb) with these named databases:
 *
 *   "meta"        "magic"   -> "patina-collection"
 *                 "format"  -> u32 LE (PATINA_FORMAT)
 *                 "next_id" -> u64 LE, the id the next new record gets
 *   "records"     id (u64 BE) -> packed record (layout at pack_record)
 *   "keys"        key form -> id (u64 BE). The key form is the key's bytes
 *                 when it has at most KEY_INLINE_MAX bytes, else 0x00 +
 *                 SHA-256(key) (33 bytes; a C string never starts with NUL,
 *                 so the two forms cannot collide). The full key is in the
 *                 record and is compared on lookup.
 *   "tables"      spec -> u64 LE descriptor size in bytes
 *   "desc:<spec>" id (u64 BE) -> descriptor bytes, one database per table
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
 * are published to readers only once it has committed.
 * MDB_NOTLS: read transactions are tied to the transaction object, not the
 * thread, so a handle may be used from any thread (thread pools, the
 * pipeline's writer thread and search threads at once) without the
 * one-read-transaction-per-thread rule; each open read transaction takes a
 * reader slot (MAX_READERS for all processes together).
 * `maplock` (a rwlock) is held shared by every transaction and taken
 * exclusively only to adopt a map size grown by another process
 * (MDB_MAP_RESIZED), which LMDB allows only with no transaction active.
 *
 * Durability: default LMDB syncs (no MDB_NOSYNC / MDB_NOMETASYNC), so a
 * committed batch survives a crash of the process or the machine. */
#include <dirent.h>
#include <errno.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include "core/internal.h"
#include "patina/store.h"

#define PATINA_FORMAT 1u
#define MAGIC "patina-collection"
#define DEFAULT_MAP_SIZE (64ull << 30)
#define MIN_DEFAULT_MAP (1ull << 30) /* the default is halved down to this if refused */
#define MAX_READERS 1024
#define KEY_INLINE_MAX 480      /* LMDB's default key limit is 511 */
#define SPEC_MAX 400            /* "desc:" + spec is a key of the main DB */
#define DESC_MAX (64u << 20)
#define REC_VERSION 1
#define REC_HEADER 72

typedef struct desc_handle {
    char *spec;
    MDB_dbi dbi;
} desc_handle_t;

struct patina_collection {
    MDB_env *env;
    char *dir;
    int readonly;
    MDB_dbi meta, records, keys, tables;
    pthread_mutex_t mu;         /* writes and every mdb_dbi_open */
    pthread_rwlock_t maplock;   /* shared per transaction; exclusive to resize */
    pthread_mutex_t cache_mu;   /* the handle cache below */
    desc_handle_t *desc;        /* opened descriptor tables: [0, npub) usable by */
    size_t npub, ndesc, capdesc;/* anyone; [npub, ndesc) by the open write txn */
};

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
static patina_status mdb_fail(const patina_collection_t *c, int rc, const char *what)
{
    const char *dir = c ? c->dir : "?";
    switch (rc) {
    case MDB_MAP_FULL:
        return patina__fail(PATINA_E_FULL, "store: %s in '%s': collection map is full", what, dir);
    case ENOSPC:
#ifdef EDQUOT
    case EDQUOT:
#endif
        return patina__fail(PATINA_E_FULL, "store: %s in '%s': disk full (%s)", what, dir,
                            mdb_strerror(rc));
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

static patina_status check_writable(const patina_collection_t *c, const char *what)
{
    if (c->readonly)
        return patina__fail(PATINA_E_INVALID, "store: cannot %s: collection '%s' is open read-only",
                            what, c->dir);
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

/* Begins a transaction holding maplock shared; adopts a map grown by
 * another process (MDB_MAP_RESIZED) and retries. */
static patina_status txn_begin(patina_collection_t *c, int write, MDB_txn **txn, const char *what)
{
    int rc, tries;
    for (tries = 0;; tries++) {
        pthread_rwlock_rdlock(&c->maplock);
        rc = mdb_txn_begin(c->env, NULL, write ? 0 : MDB_RDONLY, txn);
        if (rc == 0) return PATINA_OK;
        pthread_rwlock_unlock(&c->maplock);
        if (rc != MDB_MAP_RESIZED || tries == 3) return mdb_fail(c, rc, what);
        pthread_rwlock_wrlock(&c->maplock);
        rc = mdb_env_set_mapsize(c->env, 0);
        pthread_rwlock_unlock(&c->maplock);
        if (rc) return mdb_fail(c, rc, "adopting the grown map size");
    }
}

static void txn_abort(patina_collection_t *c, MDB_txn *txn)
{
    mdb_txn_abort(txn);
    pthread_rwlock_unlock(&c->maplock);
}

static int txn_commit(patina_collection_t *c, MDB_txn *txn)
{
    int rc = mdb_txn_commit(txn); /* frees txn, also on failure */
    pthread_rwlock_unlock(&c->maplock);
    return rc;
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
    if (rc) return mdb_fail(c, rc, "opening a descriptor table");
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
    pthread_mutex_lock(&c->mu);
    if (desc_find(c, spec, 0, dbi)) { /* opened meanwhile */
        pthread_mutex_unlock(&c->mu);
        return PATINA_OK;
    }
    s = txn_begin(c, 0, &txn, "opening a descriptor table");
    if (s != PATINA_OK) goto out;
    desc_name(name, spec);
    rc = mdb_dbi_open(txn, name, 0, dbi);
    if (rc == MDB_NOTFOUND) {
        *found = 0;
        txn_abort(c, txn);
        goto out;
    }
    if (rc) {
        txn_abort(c, txn);
        s = mdb_fail(c, rc, "opening a descriptor table");
        goto out;
    }
    rc = txn_commit(c, txn); /* makes the handle process-wide */
    s = rc ? mdb_fail(c, rc, "opening a descriptor table") : desc_add(c, spec, *dbi, 1);
out:
    pthread_mutex_unlock(&c->mu);
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
    if (rc) return mdb_fail(c, rc, "reading meta");
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
    return rc ? mdb_fail(c, rc, "writing meta") : PATINA_OK;
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
    if (rc) return mdb_fail(c, rc, "opening the collection");
    rc = mdb_get(txn, c->meta, &k, &v);
    if (rc == MDB_NOTFOUND || (rc == 0 && (v.mv_size != strlen(MAGIC) ||
                                          memcmp(v.mv_data, MAGIC, v.mv_size) != 0)))
        return patina__fail(PATINA_E_FORMAT, "store: '%s' is not a patina collection", c->dir);
    if (rc) return mdb_fail(c, rc, "opening the collection");
    PATINA_TRY(read_meta(c, txn, "format", 4, &format));
    if (format != PATINA_FORMAT)
        return patina__fail(PATINA_E_FORMAT,
                            "store: '%s' is a patina collection of format %u; this build reads "
                            "format %u",
                            c->dir, (unsigned)format, PATINA_FORMAT);
    if ((rc = mdb_dbi_open(txn, "records", flags, &c->records)) ||
        (rc = mdb_dbi_open(txn, "keys", flags, &c->keys)) ||
        (rc = mdb_dbi_open(txn, "tables", flags, &c->tables)))
        return rc == MDB_NOTFOUND ? corrupt(c, "a core database is missing")
                                  : mdb_fail(c, rc, "opening the collection");
    return PATINA_OK;
}

/* Creates the core databases and meta in an empty environment (write txn). */
static patina_status init_collection(patina_collection_t *c, MDB_txn *txn)
{
    MDB_dbi main;
    MDB_stat st;
    MDB_val k = {5, "magic"}, v = {strlen(MAGIC), MAGIC};
    int absent, rc;
    rc = mdb_dbi_open(txn, NULL, 0, &main);
    if (!rc) rc = mdb_stat(txn, main, &st);
    if (rc) return mdb_fail(c, rc, "creating the collection");
    if (st.ms_entries != 0)
        return patina__fail(PATINA_E_FORMAT,
                            "store: '%s' holds an LMDB database that is not a patina collection",
                            c->dir);
    rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &c->meta);
    if (!rc) rc = mdb_put(txn, c->meta, &k, &v, 0);
    if (rc) return mdb_fail(c, rc, "creating the collection");
    PATINA_TRY(write_meta(c, txn, "format", 4, PATINA_FORMAT));
    PATINA_TRY(write_meta(c, txn, "next_id", 8, 1));
    return open_core(c, txn, MDB_CREATE, &absent);
}

/* 1 if dir has no entries other than LMDB's lock file, 0 if it has. */
static int dir_is_empty(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int empty = 1;
    if (!d) return 0;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "lock.mdb")) {
            empty = 0;
            break;
        }
    closedir(d);
    return empty;
}

static patina_status check_dir(const char *dir, int flags)
{
    struct stat st;
    char *data;
    int has_data;
    if (stat(dir, &st) != 0) {
        if (errno != ENOENT)
            return patina__fail(PATINA_E_IO, "store: cannot access '%s': %s", dir, strerror(errno));
        if (flags != PATINA_OPEN_CREATE)
            return patina__fail(PATINA_E_NOTFOUND, "store: no collection at '%s' (no such directory)",
                                dir);
        if (mkdir(dir, 0777) != 0 && errno != EEXIST)
            return patina__fail(PATINA_E_IO, "store: cannot create directory '%s': %s", dir,
                                strerror(errno));
        return PATINA_OK;
    }
    if (!S_ISDIR(st.st_mode))
        return patina__fail(PATINA_E_FORMAT, "store: '%s' is not a patina collection (not a directory)",
                            dir);
    data = malloc(strlen(dir) + 10);
    if (!data) return patina__fail(PATINA_E_NOMEM, "store: out of memory");
    sprintf(data, "%s/data.mdb", dir);
    has_data = stat(data, &st) == 0;
    free(data);
    if (has_data) return PATINA_OK;
    if (flags != PATINA_OPEN_CREATE)
        return patina__fail(PATINA_E_FORMAT, "store: '%s' is not a patina collection (no data.mdb)",
                            dir);
    if (!dir_is_empty(dir))
        return patina__fail(PATINA_E_INVALID,
                            "store: '%s' is not empty and holds no collection; refusing to create "
                            "one there",
                            dir);
    return PATINA_OK;
}

patina_status patina_collection_open(patina_collection_t **out, const char *dir, int flags,
                                     uint64_t map_size)
{
    patina_collection_t *c;
    MDB_txn *txn;
    patina_status s;
    int rc, absent, dead, default_map;
    unsigned envflags = MDB_NOTLS;

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
    PATINA_TRY(check_dir(dir, flags));

    c = calloc(1, sizeof *c);
    if (!c) return patina__fail(PATINA_E_NOMEM, "store: out of memory");
    c->dir = strdup(dir);
    c->readonly = flags == PATINA_OPEN_READONLY;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->cache_mu, NULL);
    pthread_rwlock_init(&c->maplock, NULL);
    if (!c->dir) {
        patina_collection_close(c);
        return patina__fail(PATINA_E_NOMEM, "store: out of memory");
    }
    if (c->readonly) envflags |= MDB_RDONLY;
    for (;;) {
        if ((rc = mdb_env_create(&c->env)) != 0) {
            c->env = NULL;
            s = mdb_fail(c, rc, "creating the environment");
            goto fail;
        }
        if ((rc = mdb_env_set_maxdbs(c->env, PATINA_TABLES_MAX + 8)) ||
            (rc = mdb_env_set_maxreaders(c->env, MAX_READERS)) ||
            (rc = mdb_env_set_mapsize(c->env, (size_t)map_size))) {
            s = mdb_fail(c, rc, "configuring the environment");
            goto fail;
        }
        rc = mdb_env_open(c->env, dir, envflags, 0664);
        /* The default 64 GiB of address space can be refused (ulimit -v,
         * valgrind, 32-bit): halve it down to MIN_DEFAULT_MAP before failing.
         * An explicit map_size is never changed. */
        if ((rc == ENOMEM || rc == EINVAL) && default_map && map_size / 2 >= MIN_DEFAULT_MAP) {
            mdb_env_close(c->env);
            c->env = NULL;
            map_size /= 2;
            continue;
        }
        break;
    }
    if (rc != 0) {
        s = rc == ENOENT ? patina__fail(PATINA_E_FORMAT, "store: '%s' is not a patina collection",
                                        dir)
          : rc == ENOMEM || rc == EINVAL
              ? patina__fail(PATINA_E_NOMEM,
                             "store: cannot map %llu bytes for '%s' (%s); use a smaller map size",
                             (unsigned long long)map_size, dir, mdb_strerror(rc))
              : mdb_fail(c, rc, "opening");
        goto fail;
    }
    mdb_reader_check(c->env, &dead); /* frees slots of crashed readers */

    /* A read transaction first, so that opening never waits for a writer. */
    if ((s = txn_begin(c, 0, &txn, "opening")) != PATINA_OK) goto fail;
    s = open_core(c, txn, 0, &absent);
    if (s != PATINA_OK) {
        txn_abort(c, txn);
        goto fail;
    }
    if (!absent) {
        if ((rc = txn_commit(c, txn)) != 0) { /* commit keeps the handles */
            s = mdb_fail(c, rc, "opening");
            goto fail;
        }
        *out = c;
        return PATINA_OK;
    }
    txn_abort(c, txn);
    if (flags != PATINA_OPEN_CREATE) {
        s = patina__fail(PATINA_E_FORMAT, "store: '%s' is not a patina collection (no meta)", dir);
        goto fail;
    }
    /* Initialise; another process may have done it since our read. */
    if ((s = txn_begin(c, 1, &txn, "creating the collection")) != PATINA_OK) goto fail;
    s = open_core(c, txn, 0, &absent);
    if (s == PATINA_OK && absent) s = init_collection(c, txn);
    if (s != PATINA_OK) {
        txn_abort(c, txn);
        goto fail;
    }
    if ((rc = txn_commit(c, txn)) != 0) {
        s = mdb_fail(c, rc, "creating the collection");
        goto fail;
    }
    *out = c;
    return PATINA_OK;
fail:
    patina_collection_close(c);
    return s;
}

void patina_collection_close(patina_collection_t *c)
{
    if (!c) return;
    if (c->env) mdb_env_close(c->env); /* closes every handle */
    while (c->ndesc) free(c->desc[--c->ndesc].spec);
    free(c->desc);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->cache_mu);
    pthread_rwlock_destroy(&c->maplock);
    free(c->dir);
    free(c);
}

/* ------------------------------------------------------------------ reads */

patina_status patina_collection_count(patina_collection_t *c, uint64_t *n)
{
    MDB_txn *txn;
    MDB_stat st;
    int rc;
    if (!c || !n) return patina__fail(PATINA_E_INVALID, "store: null argument");
    *n = 0;
    PATINA_TRY(txn_begin(c, 0, &txn, "counting"));
    rc = mdb_stat(txn, c->records, &st);
    txn_abort(c, txn);
    if (rc) return mdb_fail(c, rc, "counting");
    *n = st.ms_entries;
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
    memset(info, 0, sizeof *info);
    PATINA_TRY(txn_begin(c, 0, &txn, "reading info"));
    s = read_meta(c, txn, "next_id", 8, &next);
    if (s == PATINA_OK) {
        rc = mdb_stat(txn, c->records, &rs);
        if (!rc) rc = mdb_stat(txn, c->tables, &ts);
        if (!rc) rc = mdb_env_info(c->env, &ei);
        if (!rc) rc = mdb_env_stat(c->env, &es);
        if (!rc) rc = mdb_env_get_maxreaders(c->env, &maxr);
        if (rc) s = mdb_fail(c, rc, "reading info");
    }
    txn_abort(c, txn);
    if (s != PATINA_OK) return s;
    info->format = PATINA_FORMAT;
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
    if (rc) return mdb_fail(c, rc, "reading a record");
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
    if (rc) return mdb_fail(c, rc, "looking a key up");
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
    memset(rec, 0, sizeof *rec);
    if (*cursor == UINT64_MAX) return PATINA_DONE;
    put_be64(kb, *cursor + 1);
    PATINA_TRY(txn_begin(c, 0, &txn, "iterating"));
    rc = mdb_cursor_open(txn, c->records, &cur);
    if (rc) {
        txn_abort(c, txn);
        return mdb_fail(c, rc, "iterating");
    }
    rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    if (rc == MDB_NOTFOUND) s = PATINA_DONE;
    else if (rc) s = mdb_fail(c, rc, "iterating");
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
    *specs = NULL;
    *n = 0;
    PATINA_TRY(txn_begin(c, 0, &txn, "listing tables"));
    rc = mdb_stat(txn, c->tables, &st);
    if (!rc) rc = mdb_cursor_open(txn, c->tables, &cur);
    if (rc) {
        s = mdb_fail(c, rc, "listing tables");
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
    if (rc && rc != MDB_NOTFOUND) s = mdb_fail(c, rc, "listing tables");
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
    if (rc) return mdb_fail(c, rc, "reading the table list");
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
    *n = *desc_bytes = 0;
    PATINA_TRY(check_spec(spec));
    PATINA_TRY(desc_open(c, spec, &dbi, &found));
    if (!found) return no_table(c, spec);
    PATINA_TRY(txn_begin(c, 0, &txn, "reading a table"));
    s = table_bytes(c, txn, spec, &bytes, &found);
    if (s == PATINA_OK && !found) s = corrupt(c, "descriptor table without a table entry");
    if (s == PATINA_OK && (rc = mdb_stat(txn, dbi, &st)) != 0) s = mdb_fail(c, rc, "reading a table");
    txn_abort(c, txn);
    if (s != PATINA_OK) return s;
    *n = st.ms_entries;
    *desc_bytes = bytes;
    return PATINA_OK;
}

patina_status patina_collection_load(patina_collection_t *c, const char *spec, uint64_t **ids_out,
                                     uint8_t **descs_out, size_t *n_out, size_t *desc_bytes)
{
    MDB_txn *txn;
    MDB_dbi dbi;
    MDB_cursor *cur = NULL;
    MDB_stat st;
    MDB_val k, v;
    uint64_t *ids = NULL;
    uint8_t *descs = NULL;
    size_t bytes = 0, n = 0, i = 0;
    patina_status s;
    int found, rc;
    if (!c || !ids_out || !descs_out || !n_out || !desc_bytes)
        return patina__fail(PATINA_E_INVALID, "store: null argument");
    *ids_out = NULL;
    *descs_out = NULL;
    *n_out = *desc_bytes = 0;
    PATINA_TRY(check_spec(spec));
    PATINA_TRY(desc_open(c, spec, &dbi, &found));
    if (!found) return no_table(c, spec);
    PATINA_TRY(txn_begin(c, 0, &txn, "loading a table"));
    s = table_bytes(c, txn, spec, &bytes, &found);
    if (s == PATINA_OK && !found) s = corrupt(c, "descriptor table without a table entry");
    if (s != PATINA_OK) goto out;
    if ((rc = mdb_stat(txn, dbi, &st)) != 0 || (rc = mdb_cursor_open(txn, dbi, &cur)) != 0) {
        s = mdb_fail(c, rc, "loading a table");
        goto out;
    }
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
    if (rc && rc != MDB_NOTFOUND) s = mdb_fail(c, rc, "loading a table");
    else if (i != n) s = corrupt(c, "table shorter than its count");
out:
    if (cur) mdb_cursor_close(cur);
    txn_abort(c, txn);
    if (s != PATINA_OK) {
        free(ids);
        free(descs);
        return s;
    }
    *ids_out = ids;
    *descs_out = descs;
    *n_out = n;
    *desc_bytes = bytes;
    return PATINA_OK;
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
    if ((rc = mdb_cursor_open(txn, c->tables, &cur)) != 0) return mdb_fail(c, rc, "removing");
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
            s = mdb_fail(c, rc, "removing a descriptor");
            break;
        }
        rc = 0;
    }
    mdb_cursor_close(cur);
    if (s == PATINA_OK && rc && rc != MDB_NOTFOUND) s = mdb_fail(c, rc, "removing");
    return s;
}

/* Message for a batch that did not commit because the map or disk is full. */
static patina_status batch_full(patina_collection_t *c, int rc)
{
    MDB_envinfo ei;
    if (rc == MDB_MAP_FULL) {
        mdb_env_info(c->env, &ei);
        return patina__fail(PATINA_E_FULL,
                            "store: collection map is full (%llu bytes) in '%s'; nothing from this "
                            "batch was written (open with a larger map size)",
                            (unsigned long long)ei.me_mapsize, c->dir);
    }
    return patina__fail(PATINA_E_FULL,
                        "store: disk full writing '%s' (%s); nothing from this batch was written",
                        c->dir, mdb_strerror(rc));
}

static int is_full(int rc)
{
#ifdef EDQUOT
    if (rc == EDQUOT) return 1;
#endif
    return rc == MDB_MAP_FULL || rc == ENOSPC;
}

/* The body of put (write txn, mu held). *full receives an LMDB code when
 * the failure was a full map or disk. */
static patina_status put_batch(patina_collection_t *c, MDB_txn *txn, const char *spec,
                               size_t desc_bytes, const patina_insert_t *items, size_t n,
                               uint64_t *ids, int *full)
{
    MDB_dbi dbi;
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

    for (i = 0; i < n; i++) {
        const patina_insert_t *it = &items[i];
        size_t keylen = strlen(it->key);
        keyform_t kf;
        MDB_val k = {8, kb}, v;
        uint64_t id = 0;
        unsigned flags = MDB_APPEND; /* a new id is the largest */
        if ((s = lookup_key(c, txn, it->key, keylen, &id, &found)) != PATINA_OK) goto out;
        if (found) {
            /* Replace; the id stays. Changed content makes the descriptors of
             * every table stale: they go. The same content keeps them, so a
             * second family can be added to images already stored. */
            patina_record_t old;
            if ((s = get_record(c, txn, id, &old)) != PATINA_OK) goto out;
            if (memcmp(old.sha256, it->sha256, 32) != 0 &&
                (s = delete_descriptors(c, txn, id)) != PATINA_OK) {
                patina_record_release(&old);
                goto out;
            }
            patina_record_release(&old);
            flags = 0;
        } else {
            id = next_id++;
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
        pack_record(rec, it, keylen, added);
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
    if (is_full(rc)) *full = rc;
    s = rc == MDB_KEYEXIST ? corrupt(c, "an id at or above next_id exists")
                           : mdb_fail(c, rc, "writing a batch");
out:
    free(rec);
    return s;
}

patina_status patina_collection_put(patina_collection_t *c, const char *spec, size_t desc_bytes,
                                    const patina_insert_t *items, size_t n, uint64_t *ids)
{
    MDB_txn *txn;
    patina_status s;
    size_t i, len;
    int rc, full = 0;
    if (!c) return patina__fail(PATINA_E_INVALID, "store: null collection");
    PATINA_TRY(check_writable(c, "add records"));
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

    pthread_mutex_lock(&c->mu);
    s = txn_begin(c, 1, &txn, "writing a batch");
    if (s == PATINA_OK) {
        s = put_batch(c, txn, spec, desc_bytes, items, n, ids, &full);
        if (s != PATINA_OK) {
            txn_abort(c, txn);
        } else if ((rc = txn_commit(c, txn)) != 0) {
            if (is_full(rc)) full = rc;
            s = mdb_fail(c, rc, "committing a batch");
        }
        if (s == PATINA_E_FULL) s = batch_full(c, full ? full : MDB_MAP_FULL);
    }
    desc_settle(c, s == PATINA_OK);
    pthread_mutex_unlock(&c->mu);
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
    int rc = 0;
    if (!c) return patina__fail(PATINA_E_INVALID, "store: null collection");
    PATINA_TRY(check_writable(c, "remove records"));
    pthread_mutex_lock(&c->mu);
    s = txn_begin(c, 1, &txn, "removing");
    if (s != PATINA_OK) goto out;
    s = get_record(c, txn, id, &rec);
    if (s == PATINA_OK) {
        /* The key entry goes only if it points here (it always should). */
        uint64_t kid = 0;
        int found;
        size_t len = strlen(rec.key);
        s = len ? lookup_key(c, txn, rec.key, len, &kid, &found) : corrupt(c, "empty key");
        if (s == PATINA_OK && found && kid == id) {
            make_keyform(&kf, rec.key, len);
            rc = mdb_del(txn, c->keys, &kf.val, NULL);
        }
        patina_record_release(&rec);
    }
    put_be64(kb, id);
    if (s == PATINA_OK && !rc) rc = mdb_del(txn, c->records, &k, NULL);
    if (s == PATINA_OK && rc) s = mdb_fail(c, rc, "removing a record");
    if (s == PATINA_OK) s = delete_descriptors(c, txn, id);
    if (s != PATINA_OK) {
        txn_abort(c, txn);
    } else if ((rc = txn_commit(c, txn)) != 0) {
        s = mdb_fail(c, rc, "committing a removal");
    }
out:
    desc_settle(c, s == PATINA_OK);
    pthread_mutex_unlock(&c->mu);
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
        s = mdb_fail(c, rc, "reading a descriptor");
    else if (v.mv_size != bytes)
        s = patina__fail(PATINA_E_INVALID, "store: '%s' descriptors are %zu bytes, not %zu", spec,
                         (size_t)v.mv_size, bytes);
    else
        memcpy(out, v.mv_data, bytes);
    txn_abort(c, txn);
    return s;
}
