/* Atomic creation of a collection (lmdb.c's header comment): the new
 * environment is built and committed in a temporary directory beside the
 * target (or inside an existing empty one), then renamed (or its files
 * linked, data.mdb last) into place; a creator that loses the race finds
 * the winner's collection. Also what a path holds
 * (patina__store_check_dir), path joining, and the tests' hook that
 * creates a collection of format 1 (store/store_internal.h).
 *
 * Not here: the environment, transactions and the format, the core
 * databases' initialisation (lmdb.c), the data file's check
 * (lmdb_check.c). */
#define _GNU_SOURCE /* fallocate, renameat2 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <unistd.h>

#include "core/internal.h"
#include "patina/store.h"
#include "store/lmdb_internal.h"
#include "store/store_internal.h"

/* ------------------------------------------------------- the target path */

/* Looks through dir: 2 if it holds data.mdb (another process may have
 * just put it there), 1 if it has no entries other than LMDB's lock file
 * and directories of collections being created there, 0 if it has. */
static int dir_is_empty(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int empty = 1;
    if (!d) return 0;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, "data.mdb")) {
            empty = 2;
            break;
        }
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "lock.mdb") &&
            strncmp(e->d_name, TMP_TAG, strlen(TMP_TAG)))
            empty = 0;
    }
    closedir(d);
    return empty;
}

char *patina__store_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

patina_status patina__store_check_dir(const char *dir, int flags, int *state)
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
        *state = DIR_MISSING;
        return PATINA_OK;
    }
    if (!S_ISDIR(st.st_mode))
        return patina__fail(PATINA_E_FORMAT, "store: '%s' is not a patina collection (not a directory)",
                            dir);
    if (!(data = patina__store_path_join(dir, "data.mdb")))
        return patina__fail(PATINA_E_NOMEM, "store: out of memory");
    has_data = lstat(data, &st) == 0;
    free(data);
    *state = DIR_HAS_DATA;
    if (has_data) return PATINA_OK;
    if (flags != PATINA_OPEN_CREATE)
        return patina__fail(PATINA_E_FORMAT, "store: '%s' is not a patina collection (no data.mdb)",
                            dir);
    switch (dir_is_empty(dir)) {
    case 2: return PATINA_OK; /* created meanwhile */
    case 1: *state = DIR_EMPTY; return PATINA_OK;
    default:
        return patina__fail(PATINA_E_INVALID,
                            "store: '%s' is not empty and holds no collection; refusing to create "
                            "one there",
                            dir);
    }
}

/* ------------------------------------------- building, moving into place */

static patina_status create_fail(const char *dir, const char *what, int err)
{
    if (patina__store_is_nospace(err))
        return patina__fail(PATINA_E_FULL, "store: cannot create collection '%s': %s", dir,
                            patina__store_nospace_words(err));
    return patina__fail(PATINA_E_IO, "store: cannot create collection '%s': %s: %s", dir, what,
                        strerror(err));
}

/* A new directory for building a collection: beside `dir` (".NAME" + TMP_TAG
 * + unique) when dir is missing, inside it (TMP_TAG + unique) when it is an
 * existing empty directory. */
static patina_status make_temp_dir(const char *dir, int state, char **tmp)
{
    static atomic_uint counter;
    size_t len = strlen(dir), cut;
    char *path;
    int tries;
    while (len > 1 && dir[len - 1] == '/') len--;
    cut = len;
    while (cut > 0 && dir[cut - 1] != '/') cut--; /* dir[cut..len) is the last name */
    if (!(path = malloc(len + strlen(TMP_TAG) + 64)))
        return patina__fail(PATINA_E_NOMEM, "store: out of memory");
    for (tries = 0; tries < 100; tries++) {
        unsigned n = atomic_fetch_add(&counter, 1);
        if (state == DIR_MISSING)
            sprintf(path, "%.*s.%.*s%s%ld-%u", (int)cut, dir, (int)(len - cut), dir + cut, TMP_TAG,
                    (long)getpid(), n);
        else
            sprintf(path, "%.*s/%s%ld-%u", (int)len, dir, TMP_TAG, (long)getpid(), n);
        if (mkdir(path, 0777) == 0) {
            *tmp = path;
            return PATINA_OK;
        }
        if (errno != EEXIST) break;
    }
    free(path);
    return create_fail(
        dir, state == DIR_MISSING ? "making a directory beside it" : "making a directory in it",
        errno);
}

/* Removes what build_collection may have put in tmp, and tmp. */
static void remove_temp_dir(const char *tmp)
{
    static const char *const names[] = {"data.mdb", "lock.mdb"};
    size_t i;
    for (i = 0; i < 2; i++) {
        char *p = patina__store_path_join(tmp, names[i]);
        if (p) unlink(p);
        free(p);
    }
    rmdir(tmp);
}

static void sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        if (fsync(fd) != 0) { /* best effort: the rename itself is atomic */ }
        close(fd);
    }
}

/* Parent directory of dir (malloc'd), for syncing it after a rename. */
static char *parent_of(const char *dir)
{
    size_t len = strlen(dir);
    char *p;
    while (len > 1 && dir[len - 1] == '/') len--;
    while (len > 0 && dir[len - 1] != '/') len--;
    while (len > 1 && dir[len - 1] == '/') len--;
    if (len == 0) return strdup(".");
    if (!(p = malloc(len + 1))) return NULL;
    memcpy(p, dir, len);
    p[len] = '\0';
    return p;
}

/* Builds an empty collection in directory tmp and closes it (messages name
 * the target `dir`). Disk blocks for both files are reserved first, so that
 * a full disk shows as ENOSPC before LMDB writes anything. */
static patina_status build_collection(const char *tmp, const char *dir, uint64_t map_size,
                                      int default_map, int legacy)
{
    patina_collection_t *c = NULL;
    char *lock = patina__store_path_join(tmp, "lock.mdb"),
         *data = patina__store_path_join(tmp, "data.mdb");
    MDB_txn *txn;
    patina_status s;
    int fd, rc;
    if (!lock || !data) {
        s = patina__fail(PATINA_E_NOMEM, "store: out of memory");
        goto out;
    }
    if ((s = patina__store_prepare_lock(dir, lock, 0)) != PATINA_OK) goto out;
    /* An empty data.mdb: LMDB starts a new environment in it. */
    if ((fd = open(data, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0664)) < 0) {
        s = create_fail(dir, "making data.mdb", errno);
        goto out;
    }
    rc = fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, CREATE_RESERVE) == 0 ? 0 : errno;
    close(fd);
    if (patina__store_is_nospace(rc)) {
        s = create_fail(dir, "reserving space", rc);
        goto out;
    }
    if (!(c = patina__store_collection_alloc(dir, 0))) {
        s = patina__fail(PATINA_E_NOMEM, "store: out of memory");
        goto out;
    }
    if ((s = patina__store_env_open(c, tmp, MDB_NOTLS, map_size, default_map)) != PATINA_OK)
        goto out;
    if ((s = patina__store_private_begin(c, 1, &txn, "creating the collection")) != PATINA_OK)
        goto out;
    if ((s = patina__store_init_collection(c, txn, legacy)) != PATINA_OK) {
        mdb_txn_abort(txn);
        goto out;
    }
    if ((rc = mdb_txn_commit(txn)) != 0)
        s = patina__store_mdb_fail(c, rc, "creating the collection");
out:
    if (s != PATINA_OK && (s == PATINA_E_IO || s == PATINA_E_STORE)) {
        /* LMDB reports a short write as EIO: say so when the disk is full. */
        struct statvfs v;
        if (statvfs(tmp, &v) == 0 && (uint64_t)v.f_bavail * v.f_frsize < CREATE_RESERVE)
            s = create_fail(dir, "writing", ENOSPC);
    }
    patina_collection_close(c);
    free(lock);
    free(data);
    if (s == PATINA_OK) sync_dir(tmp);
    return s;
}

/* Puts file `from` at `to` unless something is there (0, or an errno:
 * EEXIST when something is): a hard link, or where the file system has
 * none, a rename that does not replace. */
static int put_in_place(const char *from, const char *to)
{
    int err;
    if (link(from, to) == 0) return 0;
    err = errno;
    if (err != EPERM && err != EOPNOTSUPP) return err;
    return renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0 ? 0 : errno;
}

/* Creates the collection `dir` atomically (state: DIR_MISSING or DIR_EMPTY).
 * PATINA_OK also when another process created it meanwhile. */
patina_status patina__store_create_collection(const char *dir, int state, uint64_t map_size,
                                              int default_map, int legacy)
{
    char *tmp = NULL, *from = NULL, *to = NULL, *parent;
    patina_status s;
    int rc;
    PATINA_TRY(make_temp_dir(dir, state, &tmp));
    s = build_collection(tmp, dir, map_size, default_map, legacy);
    if (s == PATINA_OK && state == DIR_MISSING) {
        /* rename() onto a missing name, or an empty directory, is atomic;
         * another creator's collection there makes it fail. */
        if (rename(tmp, dir) == 0) {
            if ((parent = parent_of(dir)) != NULL) sync_dir(parent);
            free(parent);
            free(tmp);
            return PATINA_OK;
        }
        if (errno != EEXIST && errno != ENOTEMPTY)
            s = create_fail(dir, "moving it into place", errno);
    } else if (s == PATINA_OK) {
        /* The directory stays (it may be a mount point, or in use): link the
         * new files into it, data.mdb last: it is the file that makes a
         * collection. The lock file first, with its blocks, so that opening
         * the new collection needs no space; one there already (left by an
         * interrupted creation, or another creator's) gets its blocks. */
        from = patina__store_path_join(tmp, "lock.mdb");
        to = patina__store_path_join(dir, "lock.mdb");
        if (!from || !to) s = patina__fail(PATINA_E_NOMEM, "store: out of memory");
        else if ((rc = put_in_place(from, to)) != 0)
            s = rc == EEXIST ? patina__store_prepare_lock(dir, to, 0)
                             : create_fail(dir, "linking lock.mdb into it", rc);
        free(from);
        free(to);
        from = patina__store_path_join(tmp, "data.mdb");
        to = patina__store_path_join(dir, "data.mdb");
        if (s == PATINA_OK && (!from || !to))
            s = patina__fail(PATINA_E_NOMEM, "store: out of memory");
        if (s == PATINA_OK) {
            if ((rc = put_in_place(from, to)) == 0) sync_dir(dir);
            else if (rc != EEXIST) s = create_fail(dir, "linking data.mdb into it", rc);
        }
    }
    remove_temp_dir(tmp);
    free(tmp);
    free(from);
    free(to);
    return s;
}

/* ------------------------------------------------------------- test hooks */

patina_status patina__collection_create_v1(const char *dir)
{
    int state = DIR_MISSING;
    PATINA_TRY(patina__store_check_dir(dir, PATINA_OPEN_CREATE, &state));
    if (state == DIR_HAS_DATA) return patina__fail(PATINA_E_INVALID, "store: '%s' holds a collection already", dir);
    return patina__store_create_collection(dir, state, DEFAULT_MAP_SIZE, 1, 1);
}

