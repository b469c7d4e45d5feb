/* Collection store (src/store): SHA-256 vectors, open/format errors,
 * put/get/replace/remove/iterate/tables/load, long keys, read-only handles,
 * a full map, two writer processes, a writer killed at random moments,
 * a map grown by another process, one handle shared by threads, damaged
 * data files (truncated, overwritten, not a file; the library and the CLI),
 * files LMDB itself left short, files this user may not write, 65
 * processes creating one collection, snapshots read while records are
 * removed (and `patina search` while `patina rm` runs), and two opens of
 * one collection in a process. `test_store disk` runs the full-disk tests
 * on small tmpfs mounts in a private mount namespace.
 *
 * Child processes never call cmocka: they report through their exit code
 * (and a pipe), and the parent checks. */
#define _GNU_SOURCE
#include "store/sha256_internal.h"
#include "store/store_internal.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SPEC_A "test:a"
#define SPEC_B "test:b"
#define DA 16 /* bytes per descriptor in SPEC_A */
#define DB 8

/* ------------------------------------------------------------- helpers */

/* Ends a forked child with `code`. Through exec, so that a leak checker
 * (valgrind) does not report the parent's live allocations, copied into
 * the child, as the child's leaks. */
static void child_exit(int code)
{
    char cmd[16];
    snprintf(cmd, sizeof cmd, "exit %d", code);
    fflush(NULL);
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(code);
}

/* A deterministic descriptor derived from a key (so any process can check it). */
static void key_desc(uint8_t *out, size_t bytes, const char *key, uint32_t salt)
{
    uint8_t h[32];
    size_t i;
    patina_sha256(h, key, strlen(key));
    for (i = 0; i < bytes; i++) out[i] = (uint8_t)(h[i % 32] ^ (uint8_t)(i * 131u) ^ (uint8_t)salt);
}

static void fill_insert(patina_insert_t *it, const char *key, uint8_t *desc, size_t bytes,
                        uint32_t salt)
{
    memset(it, 0, sizeof *it);
    it->key = key;
    it->size = strlen(key) * 1000u + salt;
    patina_sha256(it->sha256, key, strlen(key));
    it->sha256[0] ^= (uint8_t)salt;
    it->mtime = 1700000000 + (int64_t)salt;
    it->width = (int32_t)(strlen(key) + salt);
    it->height = -7;
    key_desc(desc, bytes, key, salt);
    it->desc = desc;
}

static void check_record(const patina_record_t *r, const char *key, uint32_t salt)
{
    uint8_t sha[32];
    patina_sha256(sha, key, strlen(key));
    sha[0] ^= (uint8_t)salt;
    assert_string_equal(r->key, key);
    assert_int_equal(r->size, strlen(key) * 1000u + salt);
    assert_memory_equal(r->sha256, sha, 32);
    assert_int_equal(r->mtime, 1700000000 + (int64_t)salt);
    assert_int_equal(r->width, (int32_t)(strlen(key) + salt));
    assert_int_equal(r->height, -7);
    assert_true(r->added > 1600000000);
}

/* Puts n records "prefix<i>" into SPEC_A with salt; ids may be NULL. */
static patina_status put_range(patina_collection_t *c, const char *prefix, size_t first, size_t n,
                               uint32_t salt, uint64_t *ids)
{
    patina_insert_t *it = calloc(n, sizeof *it);
    char **keys = calloc(n, sizeof *keys);
    uint8_t *descs = malloc(n * DA);
    patina_status s;
    size_t i;
    for (i = 0; i < n; i++) {
        if (asprintf(&keys[i], "%s%zu", prefix, first + i) < 0) abort();
        fill_insert(&it[i], keys[i], descs + i * DA, DA, salt);
    }
    s = patina_collection_put(c, SPEC_A, DA, it, n, ids);
    for (i = 0; i < n; i++) free(keys[i]);
    free(keys);
    free(it);
    free(descs);
    return s;
}

static char *path_in(const char *dir, const char *name)
{
    char *p;
    if (asprintf(&p, "%s/%s", dir, name) < 0) abort();
    return p;
}

static void expect_error(patina_status got, patina_status want, const char *needle)
{
    if (got != want)
        fail_msg("expected %s, got %s: %s", patina_status_str(want), patina_status_str(got),
                 patina_last_error());
    if (needle && !strstr(patina_last_error(), needle))
        fail_msg("message '%s' does not contain '%s'", patina_last_error(), needle);
}

/* ------------------------------------------------------------- SHA-256 */

static void hex(char *out, const uint8_t h[32])
{
    int i;
    for (i = 0; i < 32; i++) sprintf(out + 2 * i, "%02x", h[i]);
}

static void check_sha(const void *data, size_t size, const char *want)
{
    uint8_t h[32];
    char got[65];
    patina_sha256(h, data, size);
    hex(got, h);
    assert_string_equal(got, want);
}

static void test_sha256_vectors(void **state)
{
    static const char msg448[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    static const char msg896[] = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
                                 "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    char *million = malloc(1000000);
    patina_sha256_ctx_t ctx;
    uint8_t h[32];
    char got[65];
    size_t i;
    (void)state;
    check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check_sha(NULL, 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check_sha(msg448, strlen(msg448),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    check_sha(msg896, strlen(msg896),
              "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
    memset(million, 'a', 1000000);
    check_sha(million, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    /* Streaming in uneven pieces gives the same digest. */
    patina_sha256_init(&ctx);
    for (i = 0; i < 1000000;) {
        size_t take = 1 + (i * 7919) % 131;
        if (take > 1000000 - i) take = 1000000 - i;
        patina_sha256_update(&ctx, million + i, take);
        i += take;
    }
    patina_sha256_final(&ctx, h);
    hex(got, h);
    assert_string_equal(got, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(million);
}


/* Both compressions (portable C and SHA-NI, where the CPU has it) give the
 * same digests on random data of every length to 300 bytes and on long
 * buffers streamed in uneven pieces; the known vectors above run on both. */
static void test_sha256_paths(void **state)
{
    tu_rng_t r;
    size_t len, i;
    uint8_t *buf = malloc(100000), a[32], b[32];
    int ni;
    (void)state;
    tu_rng_seed(&r, 256);
    for (i = 0; i < 100000; i++) buf[i] = (uint8_t)tu_rng_next(&r);
    ni = patina__sha256_portable(1);
    test_sha256_vectors(NULL);
    patina__sha256_portable(0);
    print_message("SHA-NI on this CPU: %s\n", ni ? "yes (both paths compared)" : "no (portable only)");
    for (len = 0; len <= 100000; len = len < 300 ? len + 1 : len * 3 + 17) {
        patina_sha256_ctx_t ctx;
        patina__sha256_portable(1);
        patina_sha256(a, buf, len);
        patina__sha256_portable(0);
        patina_sha256_init(&ctx);
        for (i = 0; i < len;) {
            size_t take = 1 + tu_rng_below(&r, 200);
            if (take > len - i) take = len - i;
            patina_sha256_update(&ctx, buf + i, take);
            i += take;
        }
        patina_sha256_final(&ctx, b);
        if (memcmp(a, b, 32) != 0) fail_msg("length %zu: portable and default digests differ", len);
        patina_sha256(b, buf, len);
        assert_memory_equal(a, b, 32);
    }
    free(buf);
}

/* Every length around the padding boundaries (55, 56, 63, 64, 119, 120, ...)
 * against coreutils' sha256sum, when present. */
static void test_sha256_lengths(void **state)
{
    char *dir = tu_tempdir("sha"), *file = path_in(dir, "m.bin"), *out = NULL;
    uint8_t buf[200], h[32];
    char got[65];
    size_t len;
    (void)state;
    if (tu_run(NULL, "command -v sha256sum >/dev/null") != 0) {
        print_message("sha256sum not found; length sweep skipped\n");
        goto done;
    }
    for (len = 0; len < sizeof buf; len++) buf[len] = (uint8_t)(len * 37 + 11);
    for (len = 0; len <= 200; len += (len < 130 ? 1 : 7)) {
        assert_int_equal(tu_write_file(file, buf, len), 0);
        assert_int_equal(tu_run(&out, "sha256sum '%s'", file), 0);
        patina_sha256(h, buf, len);
        hex(got, h);
        if (strncmp(out, got, 64) != 0) fail_msg("length %zu: %s vs sha256sum %.64s", len, got, out);
        free(out);
        out = NULL;
    }
done:
    tu_remove_tree(dir);
    free(file);
    free(dir);
}

/* ---------------------------------------------------------- open errors */

static void test_open_errors(void **state)
{
    char *dir = tu_tempdir("open"), *missing = path_in(dir, "nope"), *file = path_in(dir, "file"),
         *full = path_in(dir, "full"), *coll = path_in(dir, "coll"), *deep = path_in(dir, "a/b/c");
    patina_collection_t *c = NULL;
    (void)state;

    expect_error(patina_collection_open(&c, missing, PATINA_OPEN_READONLY, 0), PATINA_E_NOTFOUND,
                 "no such directory");
    assert_null(c);
    expect_error(patina_collection_open(&c, missing, PATINA_OPEN_WRITE, 0), PATINA_E_NOTFOUND, NULL);
    /* Opening without CREATE must not create anything. */
    assert_int_equal(access(missing, F_OK), -1);
    /* An existing directory that is not a collection. */
    expect_error(patina_collection_open(&c, dir, PATINA_OPEN_WRITE, 0), PATINA_E_FORMAT,
                 "not a patina collection");
    expect_error(patina_collection_open(&c, dir, PATINA_OPEN_READONLY, 0), PATINA_E_FORMAT,
                 "not a patina collection");
    {
        char *lock = path_in(dir, "data.mdb");
        assert_int_equal(access(lock, F_OK), -1);
        free(lock);
    }
    /* A file. */
    assert_int_equal(tu_write_file(file, "x", 1), 0);
    expect_error(patina_collection_open(&c, file, PATINA_OPEN_CREATE, 0), PATINA_E_FORMAT,
                 "not a directory");
    /* CREATE refuses a non-empty directory without a collection. */
    expect_error(patina_collection_open(&c, dir, PATINA_OPEN_CREATE, 0), PATINA_E_INVALID,
                 "not empty");
    /* CREATE creates one level only. */
    assert_int_not_equal(patina_collection_open(&c, deep, PATINA_OPEN_CREATE, 0), PATINA_OK);
    /* Bad arguments. */
    expect_error(patina_collection_open(&c, coll, 2, 0), PATINA_E_INVALID, "flags");
    expect_error(patina_collection_open(&c, "", PATINA_OPEN_CREATE, 0), PATINA_E_INVALID, NULL);
    expect_error(patina_collection_open(NULL, coll, PATINA_OPEN_CREATE, 0), PATINA_E_INVALID, NULL);

    /* An LMDB environment of another program. */
    {
        MDB_env *env;
        MDB_txn *txn;
        MDB_dbi dbi;
        MDB_val k = {3, "foo"}, v = {3, "bar"};
        assert_int_equal(mkdir(full, 0777), 0);
        assert_int_equal(mdb_env_create(&env), 0);
        assert_int_equal(mdb_env_open(env, full, 0, 0664), 0);
        assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
        assert_int_equal(mdb_dbi_open(txn, NULL, 0, &dbi), 0);
        assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
        assert_int_equal(mdb_txn_commit(txn), 0);
        mdb_env_close(env);
        expect_error(patina_collection_open(&c, full, PATINA_OPEN_WRITE, 0), PATINA_E_FORMAT,
                     "not a patina collection");
        expect_error(patina_collection_open(&c, full, PATINA_OPEN_CREATE, 0), PATINA_E_FORMAT,
                     "not a patina collection");
        expect_error(patina_collection_open(&c, full, PATINA_OPEN_READONLY, 0), PATINA_E_FORMAT,
                     "not a patina collection");
    }

    /* A collection of another format version. */
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0));
    patina_collection_close(c);
    {
        MDB_env *env;
        MDB_txn *txn;
        MDB_dbi dbi;
        uint8_t f[4] = {99, 0, 0, 0};
        MDB_val k = {6, "format"}, v = {4, f};
        assert_int_equal(mdb_env_create(&env), 0);
        assert_int_equal(mdb_env_set_maxdbs(env, 8), 0);
        assert_int_equal(mdb_env_set_mapsize(env, 1u << 20), 0); /* not the file's 64 GiB */
        assert_int_equal(mdb_env_open(env, coll, 0, 0664), 0);
        assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
        assert_int_equal(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
        assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
        assert_int_equal(mdb_txn_commit(txn), 0);
        mdb_env_close(env);
    }
    expect_error(patina_collection_open(&c, coll, PATINA_OPEN_READONLY, 0), PATINA_E_FORMAT,
                 "format 99");
    expect_error(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0), PATINA_E_FORMAT,
                 "format 99");
    assert_null(c);
    patina_collection_close(NULL);

    tu_remove_tree(dir);
    free(missing);
    free(file);
    free(full);
    free(coll);
    free(deep);
    free(dir);
}

/* ------------------------------------------------------------ basic ops */

static void test_put_get_replace_remove(void **state)
{
    char *dir = tu_tempdir("basic"), *coll = path_in(dir, "c");
    patina_collection_t *c;
    patina_record_t r;
    patina_collection_info_t info;
    uint64_t ids[10], n, id2[3];
    uint8_t d[DA], db[DB];
    patina_insert_t it[3];
    uint64_t *lids;
    uint8_t *ldescs;
    size_t ln, lbytes, i, ntab;
    char **tabs;
    (void)state;

    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0));
    TU_OK(patina_collection_count(c, &n));
    assert_int_equal(n, 0);
    TU_OK(patina_collection_tables(c, &tabs, &ntab));
    assert_int_equal(ntab, 0);
    free(tabs);
    expect_error(patina_collection_load(c, SPEC_A, &lids, &ldescs, &ln, &lbytes), PATINA_E_NOTFOUND,
                 "no table");
    TU_OK(patina_collection_put(c, SPEC_A, DA, NULL, 0, NULL)); /* n = 0: nothing */

    TU_OK(put_range(c, "img/", 0, 10, 1, ids));
    for (i = 0; i < 10; i++) assert_int_equal(ids[i], i + 1);
    TU_OK(patina_collection_count(c, &n));
    assert_int_equal(n, 10);
    TU_OK(patina_collection_get(c, 3, &r));
    assert_int_equal(r.id, 3);
    check_record(&r, "img/2", 1);
    patina_record_release(&r);
    assert_null(r.key);
    TU_OK(patina_collection_get_by_key(c, "img/7", &r));
    assert_int_equal(r.id, 8);
    check_record(&r, "img/7", 1);
    patina_record_release(&r);
    expect_error(patina_collection_get(c, 11, &r), PATINA_E_NOTFOUND, "id 11");
    expect_error(patina_collection_get_by_key(c, "img/77", &r), PATINA_E_NOTFOUND, "img/77");
    expect_error(patina_collection_get(c, 0, &r), PATINA_E_NOTFOUND, NULL);

    /* Load: ids in order, descriptors as put. */
    TU_OK(patina_collection_load(c, SPEC_A, &lids, &ldescs, &ln, &lbytes));
    assert_int_equal(ln, 10);
    assert_int_equal(lbytes, DA);
    for (i = 0; i < 10; i++) {
        char key[32];
        snprintf(key, sizeof key, "img/%zu", i);
        key_desc(d, DA, key, 1);
        assert_int_equal(lids[i], i + 1);
        assert_memory_equal(ldescs + i * DA, d, DA);
    }
    free(lids);
    free(ldescs);

    /* Replace: img/2 and img/5 again with salt 9, plus a new one; a key twice
     * in one batch: the last wins, both get the same id. */
    TU_OK(put_range(c, "img/", 2, 1, 9, &id2[0]));
    assert_int_equal(id2[0], 3);
    {
        uint8_t d0[DA], d1[DA], d2[DA];
        fill_insert(&it[0], "img/5", d0, DA, 9);
        fill_insert(&it[1], "new/0", d1, DA, 9);
        fill_insert(&it[2], "img/5", d2, DA, 10);
        TU_OK(patina_collection_put(c, SPEC_A, DA, it, 3, id2));
    }
    assert_int_equal(id2[0], 6);
    assert_int_equal(id2[1], 11);
    assert_int_equal(id2[2], 6);
    TU_OK(patina_collection_count(c, &n));
    assert_int_equal(n, 11);
    TU_OK(patina_collection_get(c, 6, &r));
    check_record(&r, "img/5", 10);
    patina_record_release(&r);
    TU_OK(patina_collection_get_by_key(c, "img/2", &r));
    check_record(&r, "img/2", 9);
    assert_int_equal(r.id, 3);
    patina_record_release(&r);
    TU_OK(patina_collection_load(c, SPEC_A, &lids, &ldescs, &ln, &lbytes));
    assert_int_equal(ln, 11);
    key_desc(d, DA, "img/5", 10);
    assert_int_equal(lids[5], 6);
    assert_memory_equal(ldescs + 5 * DA, d, DA);
    key_desc(d, DA, "img/2", 9);
    assert_memory_equal(ldescs + 2 * DA, d, DA);
    free(lids);
    free(ldescs);

    /* A second table with another size; a key put there is replaced, so its
     * descriptor leaves table A (the header's rule). */
    fill_insert(&it[0], "img/0", db, DB, 3);
    TU_OK(patina_collection_put(c, SPEC_B, DB, it, 1, id2));
    assert_int_equal(id2[0], 1);
    TU_OK(patina_collection_tables(c, &tabs, &ntab));
    assert_int_equal(ntab, 2);
    assert_string_equal(tabs[0], SPEC_A);
    assert_string_equal(tabs[1], SPEC_B);
    for (i = 0; i < ntab; i++) free(tabs[i]);
    free(tabs);
    TU_OK(patina_collection_table_info(c, SPEC_A, &ln, &lbytes));
    assert_int_equal(ln, 10);
    assert_int_equal(lbytes, DA);
    TU_OK(patina_collection_table_info(c, SPEC_B, &ln, &lbytes));
    assert_int_equal(ln, 1);
    assert_int_equal(lbytes, DB);
    expect_error(patina_collection_table_info(c, "test:none", &ln, &lbytes), PATINA_E_NOTFOUND, NULL);
    /* The size of a table is fixed; the failed batch writes nothing. */
    fill_insert(&it[0], "other/0", db, DB, 3);
    expect_error(patina_collection_put(c, SPEC_A, DB, it, 1, NULL), PATINA_E_INVALID,
                 "16-byte descriptors, not 8");
    expect_error(patina_collection_get_by_key(c, "other/0", &r), PATINA_E_NOTFOUND, NULL);
    /* Bad items. */
    it[0].key = "";
    expect_error(patina_collection_put(c, SPEC_B, DB, it, 1, NULL), PATINA_E_INVALID, "empty key");
    it[0].key = "k";
    it[0].desc = NULL;
    expect_error(patina_collection_put(c, SPEC_B, DB, it, 1, NULL), PATINA_E_INVALID, "no descriptor");
    it[0].desc = db;
    expect_error(patina_collection_put(c, "", DB, it, 1, NULL), PATINA_E_INVALID, NULL);
    expect_error(patina_collection_put(c, SPEC_B, 0, it, 1, NULL), PATINA_E_INVALID, NULL);

    /* Remove: gone from records, keys and every table; ids never reused. */
    TU_OK(patina_collection_remove(c, 1));
    TU_OK(patina_collection_remove(c, 4));
    expect_error(patina_collection_remove(c, 4), PATINA_E_NOTFOUND, NULL);
    expect_error(patina_collection_get(c, 4, &r), PATINA_E_NOTFOUND, NULL);
    expect_error(patina_collection_get_by_key(c, "img/3", &r), PATINA_E_NOTFOUND, NULL);
    TU_OK(patina_collection_table_info(c, SPEC_B, &ln, &lbytes));
    assert_int_equal(ln, 0);
    TU_OK(patina_collection_load(c, SPEC_B, &lids, &ldescs, &ln, &lbytes));
    assert_int_equal(ln, 0);
    assert_null(lids);
    assert_null(ldescs);
    assert_int_equal(lbytes, DB);
    TU_OK(patina_collection_count(c, &n));
    assert_int_equal(n, 9);
    TU_OK(put_range(c, "img/", 3, 1, 1, id2));
    assert_int_equal(id2[0], 12);

    /* Iterate: id order, DONE at the end. */
    {
        uint64_t cursor = 0, prev = 0, seen = 0;
        patina_status s;
        while ((s = patina_collection_next(c, &cursor, &r)) == PATINA_OK) {
            assert_true(r.id > prev);
            assert_int_equal(cursor, r.id);
            prev = r.id;
            seen++;
            patina_record_release(&r);
        }
        assert_int_equal(s, PATINA_DONE);
        assert_null(r.key);
        assert_int_equal(seen, 10);
        assert_int_equal(prev, 12);
        assert_int_equal(patina_collection_next(c, &cursor, &r), PATINA_DONE);
        cursor = UINT64_MAX;
        assert_int_equal(patina_collection_next(c, &cursor, &r), PATINA_DONE);
        cursor = 4; /* resumes after a removed id */
        TU_OK(patina_collection_next(c, &cursor, &r));
        assert_int_equal(r.id, 5);
        patina_record_release(&r);
    }
    TU_OK(patina_collection_info(c, &info));
    assert_int_equal(info.format, 2);
    assert_int_equal(info.records, 10);
    assert_int_equal(info.next_id, 13);
    assert_int_equal(info.tables, 2);
    assert_true(info.map_size >= (1ull << 30)); /* 64 GiB unless the system refused it */
    assert_true(info.used > 0 && info.used < info.map_size);
    assert_true(info.page_size >= 512);
    assert_true(info.max_readers >= 126);
    patina_collection_close(c);

    /* Everything survives a reopen, read-only; writes then fail clearly. */
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_READONLY, 0));
    TU_OK(patina_collection_count(c, &n));
    assert_int_equal(n, 10);
    TU_OK(patina_collection_get_by_key(c, "img/5", &r));
    check_record(&r, "img/5", 10);
    patina_record_release(&r);
    TU_OK(patina_collection_load(c, SPEC_A, &lids, &ldescs, &ln, &lbytes));
    assert_int_equal(ln, 10);
    free(lids);
    free(ldescs);
    expect_error(put_range(c, "ro/", 0, 1, 1, NULL), PATINA_E_INVALID, "read-only");
    expect_error(patina_collection_remove(c, 2), PATINA_E_INVALID, "read-only");
    TU_OK(patina_collection_get(c, 2, &r));
    patina_record_release(&r);
    patina_collection_close(c);

    tu_remove_tree(dir);
    free(coll);
    free(dir);
}

/* A second family over stored images: putting the same content (same
 * SHA-256) into another table keeps the first table's descriptor and the
 * record's time added (put a second later: the image was not added
 * again); changed content drops it (stale) and is a new addition. */
static void test_second_table_same_content(void **state)
{
    char *dir = tu_tempdir("second"), *coll = path_in(dir, "c");
    patina_collection_t *c;
    patina_insert_t it;
    uint8_t da[DA], db[DB], got[DA + DB], want[DA + DB];
    uint64_t id;
    size_t ln, lbytes;
    patina_record_t rec;
    int64_t added;
    (void)state;
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0));
    fill_insert(&it, "photo.jpg", da, DA, 1);
    TU_OK(patina_collection_put(c, SPEC_A, DA, &it, 1, &id));
    TU_OK(patina_collection_get(c, 1, &rec));
    added = rec.added;
    patina_record_release(&rec);
    while ((int64_t)time(NULL) <= added) { /* the next second */
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    fill_insert(&it, "photo.jpg", db, DB, 1);               /* same content, table B */
    TU_OK(patina_collection_put(c, SPEC_B, DB, &it, 1, &id));
    assert_int_equal(id, 1);
    TU_OK(patina_collection_get(c, 1, &rec));
    assert_true(rec.added == added);
    patina_record_release(&rec);
    TU_OK(patina_collection_get_descriptor(c, SPEC_A, 1, got, DA));
    key_desc(want, DA, "photo.jpg", 1);
    assert_memory_equal(got, want, DA);
    TU_OK(patina_collection_get_descriptor(c, SPEC_B, 1, got, DB));
    key_desc(want, DB, "photo.jpg", 1);
    assert_memory_equal(got, want, DB);
    expect_error(patina_collection_get_descriptor(c, SPEC_B, 1, got, DA), PATINA_E_INVALID, NULL);
    expect_error(patina_collection_get_descriptor(c, SPEC_A, 2, got, DA), PATINA_E_NOTFOUND, NULL);
    expect_error(patina_collection_get_descriptor(c, "test:none", 1, got, DA), PATINA_E_NOTFOUND, NULL);
    fill_insert(&it, "photo.jpg", db, DB, 2);               /* changed content, table B */
    TU_OK(patina_collection_put(c, SPEC_B, DB, &it, 1, &id));
    assert_int_equal(id, 1);
    TU_OK(patina_collection_get(c, 1, &rec));
    assert_true(rec.added > added);
    patina_record_release(&rec);
    expect_error(patina_collection_get_descriptor(c, SPEC_A, 1, got, DA), PATINA_E_NOTFOUND, NULL);
    TU_OK(patina_collection_table_info(c, SPEC_A, &ln, &lbytes));
    assert_int_equal(ln, 0);
    TU_OK(patina_collection_table_info(c, SPEC_B, &ln, &lbytes));
    assert_int_equal(ln, 1);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(coll);
    free(dir);
}

/* Several tables in one transaction (patina_collection_put_tables), and the
 * version (patina_collection_version) it moves: both
 * tables' descriptors with one record each; a batch whose second table
 * fails (a wrong descriptor size for an existing table) writes nothing,
 * not even the first table's rows; replacing with new content keeps only
 * the tables given; bad arguments. */
static void test_put_tables(void **state)
{
    char *dir = tu_tempdir("tables"), *coll = path_in(dir, "c");
    static const char *const keys[3] = {"a.jpg", "b.jpg", "c.jpg"};
    patina_collection_t *c;
    patina_insert_t it[3];
    patina_table_descs_t td[2];
    uint8_t da[3][DA], db[3][DB], got[DA], want[DA], bad[3][DB + 1];
    uint64_t ids[3], n, v0, v1;
    size_t ln, lbytes;
    (void)state;
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0));
    for (int i = 0; i < 3; i++) {
        fill_insert(&it[i], keys[i], da[i], DA, 1);
        key_desc(db[i], DB, keys[i], 7);
        it[i].desc = NULL; /* ignored */
    }
    td[0] = (patina_table_descs_t){SPEC_A, DA, da};
    td[1] = (patina_table_descs_t){SPEC_B, DB, db};
    TU_OK(patina_collection_version(c, &v0));
    TU_OK(patina_collection_put_tables(c, td, 2, it, 2, ids));
    TU_OK(patina_collection_version(c, &v1));
    assert_true(v1 > v0); /* a committed write moves the version */
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 2);
    for (int i = 0; i < 2; i++) {
        TU_OK(patina_collection_get_descriptor(c, SPEC_A, ids[i], got, DA));
        assert_memory_equal(got, da[i], DA);
        TU_OK(patina_collection_get_descriptor(c, SPEC_B, ids[i], got, DB));
        assert_memory_equal(got, db[i], DB);
    }
    /* the second table fails: the third image is written to neither */
    td[1] = (patina_table_descs_t){SPEC_B, DB + 1, bad};
    memset(bad, 0, sizeof bad);
    expect_error(patina_collection_put_tables(c, td, 2, it + 2, 1, ids), PATINA_E_INVALID, "holds");
    TU_OK(patina_collection_version(c, &v0));
    assert_true(v0 == v1); /* an aborted one does not */
    TU_OK(patina_collection_count(c, &n));
    assert_int_equal(n, 2);
    TU_OK(patina_collection_table_info(c, SPEC_A, &ln, &lbytes));
    assert_int_equal(ln, 2);
    /* new content for a.jpg with table A only: its B descriptor goes */
    fill_insert(&it[0], keys[0], da[0], DA, 3);
    key_desc(want, DA, keys[0], 3);
    td[0] = (patina_table_descs_t){SPEC_A, DA, da};
    TU_OK(patina_collection_put_tables(c, td, 1, it, 1, ids));
    assert_int_equal(ids[0], 1);
    TU_OK(patina_collection_get_descriptor(c, SPEC_A, 1, got, DA));
    assert_memory_equal(got, want, DA);
    expect_error(patina_collection_get_descriptor(c, SPEC_B, 1, got, DB), PATINA_E_NOTFOUND, NULL);
    /* bad arguments */
    td[1] = (patina_table_descs_t){SPEC_A, DA, da};
    expect_error(patina_collection_put_tables(c, td, 2, it, 1, ids), PATINA_E_INVALID, "twice");
    expect_error(patina_collection_put_tables(c, td, 0, it, 1, ids), PATINA_E_INVALID, "no tables");
    td[1] = (patina_table_descs_t){SPEC_B, DB, NULL};
    expect_error(patina_collection_put_tables(c, td, 2, it, 1, ids), PATINA_E_INVALID, "no descriptors");
    TU_OK(patina_collection_put_tables(c, td, 2, it, 0, ids)); /* n = 0: nothing */
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(coll);
    free(dir);
}

static void test_long_keys(void **state)
{
    char *dir = tu_tempdir("keys"), *coll = path_in(dir, "c");
    patina_collection_t *c;
    patina_record_t r;
    patina_insert_t it[5];
    uint8_t d[5][DA];
    uint64_t ids[5], n;
    size_t lens[5] = {480, 481, 600, 4096, PATINA_KEY_MAX}, i;
    char *keys[5], *twin, *huge;
    (void)state;

    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0));
    for (i = 0; i < 5; i++) {
        keys[i] = malloc(lens[i] + 1);
        memset(keys[i], 'k', lens[i]);
        keys[i][lens[i]] = '\0';
        keys[i][lens[i] - 1] = (char)('0' + i);
        fill_insert(&it[i], keys[i], d[i], DA, (uint32_t)i);
    }
    TU_OK(patina_collection_put(c, SPEC_A, DA, it, 5, ids));
    for (i = 0; i < 5; i++) {
        TU_OK(patina_collection_get_by_key(c, keys[i], &r));
        assert_int_equal(r.id, ids[i]);
        assert_int_equal(strlen(r.key), lens[i]);
        check_record(&r, keys[i], (uint32_t)i);
        patina_record_release(&r);
    }
    /* A long key differing only in its last byte is another key. */
    twin = strdup(keys[3]);
    twin[lens[3] - 1] = 'x';
    expect_error(patina_collection_get_by_key(c, twin, &r), PATINA_E_NOTFOUND, NULL);
    /* Replacing a long key keeps its id. */
    fill_insert(&it[0], keys[3], d[0], DA, 42);
    TU_OK(patina_collection_put(c, SPEC_A, DA, it, 1, ids));
    TU_OK(patina_collection_count(c, &n));
    assert_int_equal(n, 5);
    TU_OK(patina_collection_get_by_key(c, keys[3], &r));
    assert_int_equal(r.id, ids[0]);
    check_record(&r, keys[3], 42);
    patina_record_release(&r);
    /* Remove by id drops the hashed key entry too. */
    TU_OK(patina_collection_remove(c, ids[0]));
    expect_error(patina_collection_get_by_key(c, keys[3], &r), PATINA_E_NOTFOUND, NULL);
    /* Over the limit. */
    huge = malloc(PATINA_KEY_MAX + 2);
    memset(huge, 'h', PATINA_KEY_MAX + 1);
    huge[PATINA_KEY_MAX + 1] = '\0';
    fill_insert(&it[0], huge, d[0], DA, 1);
    expect_error(patina_collection_put(c, SPEC_A, DA, it, 1, NULL), PATINA_E_LIMIT, "max 65535");
    expect_error(patina_collection_get_by_key(c, huge, &r), PATINA_E_LIMIT, NULL);
    expect_error(patina_collection_get_by_key(c, "", &r), PATINA_E_INVALID, NULL);
    patina_collection_close(c);
    for (i = 0; i < 5; i++) free(keys[i]);
    free(twin);
    free(huge);
    tu_remove_tree(dir);
    free(coll);
    free(dir);
}

/* ------------------------------------------------------------ full map */

static void test_map_full(void **state)
{
    char *dir = tu_tempdir("full"), *coll = path_in(dir, "c");
    patina_collection_t *c;
    patina_status s = PATINA_OK;
    patina_record_t r;
    uint64_t n, *lids;
    uint8_t *ldescs;
    size_t batches = 0, ln, lbytes, i, j;
    enum { B = 8, BIG = 3000 };
    uint8_t *descs = malloc(B * BIG);
    (void)state;

    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 1u << 20));
    for (batches = 0; batches < 1000; batches++) {
        patina_insert_t it[B];
        char keys[B][32];
        for (i = 0; i < B; i++) {
            snprintf(keys[i], sizeof keys[i], "b%zu/%zu", batches, i);
            fill_insert(&it[i], keys[i], descs + i * BIG, BIG, 5);
        }
        s = patina_collection_put(c, "big", BIG, it, B, NULL);
        if (s != PATINA_OK) break;
    }
    expect_error(s, PATINA_E_FULL, "collection map is full (1048576 bytes)");
    expect_error(s, PATINA_E_FULL, "nothing from this batch was written");
    assert_true(batches > 10);
    print_message("map full after %zu batches of %d x %d bytes\n", batches, B, BIG);

    /* Everything committed is intact; nothing of the failed batch is there. */
    for (j = 0; j < 2; j++) {
        TU_OK(patina_collection_count(c, &n));
        assert_int_equal(n, batches * B);
        TU_OK(patina_collection_load(c, "big", &lids, &ldescs, &ln, &lbytes));
        assert_int_equal(ln, batches * B);
        for (i = 0; i < ln; i++) {
            char key[32];
            uint8_t want[BIG];
            snprintf(key, sizeof key, "b%zu/%zu", i / B, i % B);
            assert_int_equal(lids[i], i + 1);
            TU_OK(patina_collection_get(c, lids[i], &r));
            check_record(&r, key, 5);
            patina_record_release(&r);
            key_desc(want, BIG, key, 5);
            assert_memory_equal(ldescs + i * BIG, want, BIG);
        }
        free(lids);
        free(ldescs);
        {
            char key[32];
            snprintf(key, sizeof key, "b%zu/0", batches);
            expect_error(patina_collection_get_by_key(c, key, &r), PATINA_E_NOTFOUND, NULL);
        }
        /* And after a reopen. */
        if (j == 0) {
            patina_collection_close(c);
            TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_WRITE, 1u << 20));
        }
    }
    /* A bigger map on reopen makes room again. */
    patina_collection_close(c);
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_WRITE, 8u << 20));
    TU_OK(put_range(c, "more/", 0, 50, 1, NULL));
    TU_OK(patina_collection_count(c, &n));
    assert_int_equal(n, batches * B + 50);
    patina_collection_close(c);
    free(descs);
    tu_remove_tree(dir);
    free(coll);
    free(dir);
}

/* ------------------------------------------------- two writer processes */

/* Child: inserts `count` records "p<who>/<i>" in batches of 5. Exit 0 = ok. */
static int writer_child(const char *coll, int who, int count)
{
    patina_collection_t *c;
    char prefix[16];
    int i;
    snprintf(prefix, sizeof prefix, "p%d/", who);
    if (patina_collection_open(&c, coll, PATINA_OPEN_WRITE, 0) != PATINA_OK) {
        fprintf(stderr, "child %d: open: %s\n", who, patina_last_error());
        return 1;
    }
    for (i = 0; i < count; i += 5)
        if (put_range(c, prefix, (size_t)i, 5, (uint32_t)who, NULL) != PATINA_OK) {
            fprintf(stderr, "child %d: put: %s\n", who, patina_last_error());
            patina_collection_close(c);
            return 2;
        }
    patina_collection_close(c);
    return 0;
}

static void test_two_writer_processes(void **state)
{
    char *dir = tu_tempdir("procs"), *coll = path_in(dir, "c");
    patina_collection_t *c;
    patina_record_t r;
    pid_t pid[2];
    int w, st, done = 0;
    uint64_t n, last = 0, cursor = 0, expect_id = 1, *lids;
    uint8_t *ldescs;
    size_t ln, lbytes, i, polls = 0;
    (void)state;

    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0));
    patina_collection_close(c);
    fflush(NULL);
    for (w = 0; w < 2; w++) {
        pid[w] = fork();
        assert_true(pid[w] >= 0);
        if (pid[w] == 0) child_exit(writer_child(coll, w, 200));
    }
    /* A reader in this process meanwhile: counts in whole batches, growing
     * but for LMDB 0.9's early look at a commit being written (see
     * COMMIT_SEEN_EARLY): at most one batch back. */
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_READONLY, 0));
    while (done < 2) {
        TU_OK(patina_collection_count(c, &n));
        assert_true(n + 5 >= last);
        assert_int_equal(n % 5, 0);
        last = n;
        polls++;
        for (w = 0; w < 2; w++)
            if (pid[w] > 0 && waitpid(pid[w], &st, WNOHANG) == pid[w]) {
                assert_true(WIFEXITED(st));
                assert_int_equal(WEXITSTATUS(st), 0);
                pid[w] = 0;
                done++;
            }
        usleep(1000);
    }
    print_message("reader polled %zu times while two processes wrote\n", polls);

    TU_OK(patina_collection_count(c, &n));
    assert_int_equal(n, 400);
    /* ids 1..400, each key maps back to its id, each has its descriptor. */
    while (patina_collection_next(c, &cursor, &r) == PATINA_OK) {
        patina_record_t byk;
        int who = r.key[1] - '0';
        assert_int_equal(r.id, expect_id);
        expect_id++;
        TU_OK(patina_collection_get_by_key(c, r.key, &byk));
        assert_int_equal(byk.id, r.id);
        check_record(&byk, r.key, (uint32_t)who);
        patina_record_release(&byk);
        patina_record_release(&r);
    }
    assert_int_equal(expect_id, 401);
    TU_OK(patina_collection_load(c, SPEC_A, &lids, &ldescs, &ln, &lbytes));
    assert_int_equal(ln, 400);
    for (i = 0; i < ln; i++) {
        uint8_t want[DA];
        TU_OK(patina_collection_get(c, lids[i], &r));
        key_desc(want, DA, r.key, (uint32_t)(r.key[1] - '0'));
        assert_memory_equal(ldescs + i * DA, want, DA);
        patina_record_release(&r);
    }
    free(lids);
    free(ldescs);
    for (w = 0; w < 2; w++) {
        char key[16];
        snprintf(key, sizeof key, "p%d/199", w);
        TU_OK(patina_collection_get_by_key(c, key, &r));
        patina_record_release(&r);
    }
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(coll);
    free(dir);
}

/* ------------------------------------------------------- crash safety */

#define CRASH_BATCH 20

/* Child: batches "b<k>/<i>" forever, reporting each committed k on fd. */
static int crash_child(const char *coll, int fd)
{
    patina_collection_t *c;
    uint32_t k;
    char prefix[24];
    if (patina_collection_open(&c, coll, PATINA_OPEN_WRITE, 0) != PATINA_OK) return 1;
    for (k = 0;; k++) {
        snprintf(prefix, sizeof prefix, "b%u/", k);
        if (put_range(c, prefix, 0, CRASH_BATCH, k, NULL) != PATINA_OK) return 2;
        if (write(fd, &k, sizeof k) != sizeof k) return 3;
    }
}

static void check_crashed_collection(const char *coll, long reported)
{
    patina_collection_t *c;
    patina_collection_info_t info;
    patina_record_t r;
    uint64_t *lids;
    uint8_t *ldescs;
    size_t ln, lbytes, i, batches;

    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_WRITE, 0));
    TU_OK(patina_collection_info(c, &info));
    /* Whole batches only, and every reported commit is there. */
    assert_int_equal(info.records % CRASH_BATCH, 0);
    batches = info.records / CRASH_BATCH;
    assert_true((long)batches >= reported + 1);
    assert_true((long)batches <= reported + 2); /* at most one unreported commit */
    assert_int_equal(info.next_id, info.records + 1);
    TU_OK(patina_collection_load(c, SPEC_A, &lids, &ldescs, &ln, &lbytes));
    assert_int_equal(ln, info.records);
    for (i = 0; i < ln; i++) {
        char key[32];
        uint8_t want[DA];
        uint32_t k = (uint32_t)(i / CRASH_BATCH);
        snprintf(key, sizeof key, "b%u/%zu", k, i % CRASH_BATCH);
        assert_int_equal(lids[i], i + 1);
        TU_OK(patina_collection_get_by_key(c, key, &r));
        assert_int_equal(r.id, i + 1);
        check_record(&r, key, k);
        patina_record_release(&r);
        key_desc(want, DA, key, k);
        assert_memory_equal(ldescs + i * DA, want, DA);
    }
    free(lids);
    free(ldescs);
    /* The writer lock of the killed process is recovered: we can write. */
    TU_OK(put_range(c, "after/", 0, 3, 1, NULL));
    patina_collection_close(c);
}

static void test_crash_safety(void **state)
{
    char *dir = tu_tempdir("crash");
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    int round;
    (void)state;
    print_message("crash test seed %u\n", seed);
    srand(seed);
    for (round = 0; round < 6; round++) {
        char *coll;
        int fds[2], st;
        pid_t pid;
        long reported = -1;
        uint32_t k;
        patina_collection_t *c;
        unsigned delay = (unsigned)(rand() % 40000); /* microseconds */
        if (asprintf(&coll, "%s/c%d", dir, round) < 0) abort();
        TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0));
        patina_collection_close(c);
        assert_int_equal(pipe(fds), 0);
        fflush(NULL);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            child_exit(crash_child(coll, fds[1]));
        }
        close(fds[1]);
        /* Wait for two commits, then kill at a random moment. */
        while (reported < 1 && read(fds[0], &k, sizeof k) == sizeof k) reported = (long)k;
        assert_true(reported >= 1);
        usleep(delay);
        kill(pid, SIGKILL);
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        while (read(fds[0], &k, sizeof k) == sizeof k) reported = (long)k;
        close(fds[0]);
        print_message("round %d: killed after %u us, %ld batches reported\n", round, delay,
                      reported + 1);
        check_crashed_collection(coll, reported);
        free(coll);
    }
    tu_remove_tree(dir);
    free(dir);
}

/* ------------------------------------- a map grown by another process */

static void test_map_grown_elsewhere(void **state)
{
    char *dir = tu_tempdir("grow"), *coll = path_in(dir, "c");
    patina_collection_t *c;
    uint64_t n;
    pid_t pid;
    int st;
    (void)state;
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 256u << 10));
    TU_OK(put_range(c, "small/", 0, 10, 1, NULL));
    fflush(NULL);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* Another process with a larger map writes beyond ours. */
        patina_collection_t *c2;
        int i;
        if (patina_collection_open(&c2, coll, PATINA_OPEN_WRITE, 16u << 20) != PATINA_OK) child_exit(1);
        for (i = 0; i < 40; i++)
            if (put_range(c2, "big/", (size_t)i * 100, 100, 2, NULL) != PATINA_OK) child_exit(2);
        patina_collection_close(c2);
        child_exit(0);
    }
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    /* Our handle adopts the grown map (MDB_MAP_RESIZED) and goes on. */
    TU_OK(patina_collection_count(c, &n));
    assert_int_equal(n, 4010);
    TU_OK(put_range(c, "small/", 10, 10, 1, NULL));
    TU_OK(patina_collection_count(c, &n));
    assert_int_equal(n, 4020);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(coll);
    free(dir);
}

/* --------------------------------------------- one handle, many threads */

typedef struct {
    patina_collection_t *c;
    int id;
    int errors;
    atomic_int *stop;
    char why[256]; /* the last error, in this thread's words */
} thr_t;

static void thr_error(thr_t *t, const char *what)
{
    t->errors++;
    snprintf(t->why, sizeof t->why, "%s: %s", what, patina_last_error());
}

static void *writer_thread(void *v)
{
    thr_t *t = v;
    int b;
    for (b = 0; b < 40; b++) {
        char prefix[16];
        snprintf(prefix, sizeof prefix, "t%d/", b);
        if (put_range(t->c, prefix, 0, 10, 1, NULL) != PATINA_OK) thr_error(t, "put");
        if (b % 10 == 9) {
            /* a new table now and then: handles opened while readers run */
            patina_insert_t it;
            uint8_t d[DB];
            char key[16], spec[16];
            snprintf(key, sizeof key, "x%d", b);
            snprintf(spec, sizeof spec, "test:t%d", b);
            fill_insert(&it, key, d, DB, 1);
            if (patina_collection_put(t->c, spec, DB, &it, 1, NULL) != PATINA_OK) thr_error(t, spec);
        }
    }
    atomic_store(t->stop, 1);
    return NULL;
}

/* COMMIT_SEEN_EARLY. An LMDB 0.9 read transaction takes the id of the last
 * commit, then copies that commit's meta page; a writer two commits further
 * may be rewriting that page meanwhile, and the reader then sees the commit
 * being written (measured with LMDB 0.9.24 built in: 9-21 of the read
 * transactions of 100 runs of this test). The call after it may see the
 * commit before that one: a count one batch back. Within one transaction
 * (a call, a snapshot) the view is whole. */
static void *reader_thread(void *v)
{
    thr_t *t = v;
    uint64_t n, last = 0, *lids;
    uint8_t *ldescs;
    size_t ln, lbytes, ntab, i;
    char **tabs;
    while (!atomic_load(t->stop)) {
        if (patina_collection_count(t->c, &n) != PATINA_OK) thr_error(t, "count");
        else if (n + 11 < last || n % 10 > 4) {
            t->errors++;
            snprintf(t->why, sizeof t->why, "count %llu after %llu", (unsigned long long)n,
                     (unsigned long long)last);
        }
        last = n;
        if (patina_collection_tables(t->c, &tabs, &ntab) != PATINA_OK) {
            thr_error(t, "tables");
            continue;
        }
        for (i = 0; i < ntab; i++) {
            if (patina_collection_load(t->c, tabs[i], &lids, &ldescs, &ln, &lbytes) != PATINA_OK)
                thr_error(t, tabs[i]);
            else {
                free(lids);
                free(ldescs);
            }
            free(tabs[i]);
        }
        free(tabs);
    }
    return NULL;
}

static void test_threads_share_a_handle(void **state)
{
    char *dir = tu_tempdir("thr"), *coll = path_in(dir, "c");
    patina_collection_t *c;
    pthread_t th[4];
    thr_t t[4];
    atomic_int stop = 0;
    uint64_t n;
    int i;
    (void)state;
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0));
    for (i = 0; i < 4; i++) {
        t[i].c = c;
        t[i].id = i;
        t[i].errors = 0;
        t[i].why[0] = '\0';
        t[i].stop = &stop;
        assert_int_equal(pthread_create(&th[i], NULL, i == 0 ? writer_thread : reader_thread, &t[i]), 0);
    }
    for (i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (i = 0; i < 4; i++)
        if (t[i].errors) fail_msg("thread %d: %d errors (last: %s)", i, t[i].errors, t[i].why);
    TU_OK(patina_collection_count(c, &n));
    assert_int_equal(n, 404);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(coll);
    free(dir);
}

/* ---------------------------------------------------------- child probes */

/* Runs fn(arg, msgfd) in a child process. Returns its exit code, or minus
 * the signal that killed it; msg receives what the child wrote on msgfd. */
static int in_child(int (*fn)(void *arg, int msgfd), void *arg, char *msg, size_t size)
{
    int fds[2], st;
    size_t len = 0;
    ssize_t got;
    pid_t pid;
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* A crash must end the child (cmocka's handlers would carry on
         * with the next test in it). */
        const int sigs[] = {SIGBUS, SIGSEGV, SIGILL, SIGFPE, SIGABRT};
        int code;
        size_t k;
        for (k = 0; k < sizeof sigs / sizeof sigs[0]; k++) signal(sigs[k], SIG_DFL);
        close(fds[0]);
        code = fn(arg, fds[1]);
        close(fds[1]);
        child_exit(code);
    }
    close(fds[1]);
    while (len + 1 < size && (got = read(fds[0], msg + len, size - 1 - len)) > 0)
        len += (size_t)got;
    msg[len] = '\0';
    close(fds[0]);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFSIGNALED(st) ? -WTERMSIG(st) : WEXITSTATUS(st);
}

static void child_say(int fd, const char *what)
{
    size_t len = strlen(what);
    if (write(fd, what, len) != (ssize_t)len) { /* the parent reports the exit code anyway */ }
}

typedef struct {
    const char *coll;
    int flags;
} probe_t;

/* Child: opens the collection and reads everything in it. Exit code: the
 * status of the first call that failed (its message on msgfd), 0 if none. */
static int probe_collection(void *arg, int msgfd)
{
    probe_t *p = arg;
    patina_collection_t *c;
    patina_record_t r;
    uint64_t n, cursor = 0, *lids;
    uint8_t *ldescs;
    size_t ntab, i, ln, lbytes;
    char **tabs;
    patina_status s = patina_collection_open(&c, p->coll, p->flags, 0);
    if (s == PATINA_OK) s = patina_collection_count(c, &n);
    while (s == PATINA_OK && (s = patina_collection_next(c, &cursor, &r)) == PATINA_OK)
        patina_record_release(&r);
    if (s == PATINA_DONE) s = PATINA_OK;
    if (s == PATINA_OK && (s = patina_collection_tables(c, &tabs, &ntab)) == PATINA_OK) {
        for (i = 0; i < ntab; i++) {
            if (s == PATINA_OK && (s = patina_collection_load(c, tabs[i], &lids, &ldescs, &ln,
                                                              &lbytes)) == PATINA_OK) {
                free(lids);
                free(ldescs);
            }
            free(tabs[i]);
        }
        free(tabs);
    }
    if (s != PATINA_OK) child_say(msgfd, patina_last_error());
    patina_collection_close(c);
    return (int)s;
}

/* Expects the probe of coll to fail with `want` and a message naming `needle`. */
static void expect_probe(const char *coll, int flags, patina_status want, const char *needle)
{
    char msg[1024];
    probe_t p = {coll, flags};
    int rc = in_child(probe_collection, &p, msg, sizeof msg);
    if (rc < 0)
        fail_msg("opening '%s' (flags %d) killed the process with signal %d", coll, flags, -rc);
    if (rc != (int)want)
        fail_msg("opening '%s' (flags %d): expected %s, got %s: %s", coll, flags,
                 patina_status_str(want), patina_status_str((patina_status)rc), msg);
    if (needle && !strstr(msg, needle))
        fail_msg("opening '%s': message '%s' does not contain '%s'", coll, msg, needle);
}

static uint64_t count_of(const char *coll)
{
    patina_collection_t *c;
    uint64_t n;
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_READONLY, 0));
    TU_OK(patina_collection_count(c, &n));
    patina_collection_close(c);
    return n;
}

static void copy_file(const char *from, const char *to, off_t size)
{
    char *cmd;
    if (asprintf(&cmd, "cp '%s' '%s'", from, to) < 0) abort();
    assert_int_equal(system(cmd), 0);
    free(cmd);
    if (size >= 0) assert_int_equal(truncate(to, size), 0);
}

static off_t file_size(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_size;
}

/* A collection of 3000 records written in one transaction (few free pages:
 * cutting the file anywhere past its meta pages cuts live data). */
static void make_dense_collection(const char *coll)
{
    patina_collection_t *c;
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0));
    TU_OK(put_range(c, "dense/", 0, 3000, 3, NULL));
    patina_collection_close(c);
}

/* A copy of collection `src` at dst with data.mdb cut to `size` bytes
 * (-1: whole) or overwritten with `garbage` bytes of noise at `at`. */
static void damaged_copy(const char *src, const char *dst, off_t size, off_t at, size_t garbage)
{
    char *from = path_in(src, "data.mdb"), *to = path_in(dst, "data.mdb");
    tu_remove_tree(dst);
    assert_int_equal(mkdir(dst, 0777), 0);
    copy_file(from, to, size);
    if (garbage) {
        FILE *f = fopen(to, "r+b");
        tu_rng_t rng;
        size_t i;
        tu_rng_seed(&rng, (uint64_t)at + garbage);
        assert_non_null(f);
        assert_int_equal(fseeko(f, at, SEEK_SET), 0);
        for (i = 0; i < garbage; i++) fputc((int)(tu_rng_next(&rng) >> 56), f);
        assert_int_equal(fclose(f), 0);
    }
    free(from);
    free(to);
}

/* Truncated or overwritten data.mdb: a clear PATINA_E_CORRUPT naming the
 * file, for every open mode, never a signal (LMDB maps the file: a page
 * past its end is SIGBUS). */
static void test_corrupt_data_file(void **state)
{
    char *dir = tu_tempdir("corrupt"), *good = path_in(dir, "good"), *bad = path_in(dir, "bad"),
         *data = path_in(good, "data.mdb");
    off_t size, psize = 4096, cut;
    const int modes[3] = {PATINA_OPEN_READONLY, PATINA_OPEN_WRITE, PATINA_OPEN_CREATE};
    int m, crashes = 0, opened = 0, refused = 0;
    (void)state;
    make_dense_collection(good);
    size = file_size(data);
    assert_true(size > 40 * psize);
    {
        const off_t cuts[] = {0,          10,          100,           psize / 2,
                              psize + 10, psize + 100, 2 * psize - 1, 2 * psize,
                              3 * psize,  size / 4,    size / 2,      size * 3 / 4};
        size_t i;
        for (i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
            char *bdata = path_in(bad, "data.mdb");
            damaged_copy(good, bad, cuts[i], 0, 0);
            for (m = 0; m < 3; m++) expect_probe(bad, modes[m], PATINA_E_CORRUPT, "data.mdb");
            assert_int_equal(file_size(bdata), cuts[i]); /* nothing was written over it */
            free(bdata);
        }
    }
    /* Noise over one or both meta pages, or over the whole file. */
    damaged_copy(good, bad, -1, 0, (size_t)psize);
    expect_probe(bad, PATINA_OPEN_READONLY, PATINA_E_CORRUPT, "data.mdb");
    expect_probe(bad, PATINA_OPEN_CREATE, PATINA_E_CORRUPT, "data.mdb");
    damaged_copy(good, bad, -1, psize, (size_t)psize);
    expect_probe(bad, PATINA_OPEN_READONLY, PATINA_E_CORRUPT, "data.mdb");
    damaged_copy(good, bad, -1, 0, (size_t)size);
    expect_probe(bad, PATINA_OPEN_READONLY, PATINA_E_CORRUPT, "data.mdb");
    expect_probe(bad, PATINA_OPEN_WRITE, PATINA_E_CORRUPT, "data.mdb");
    /* Every cut at a page boundary and in between: refused or readable in
     * full, never a crash. */
    for (cut = 0; cut <= size; cut += psize / 2) {
        char msg[1024];
        probe_t p = {bad, PATINA_OPEN_READONLY};
        int rc;
        damaged_copy(good, bad, cut, 0, 0);
        rc = in_child(probe_collection, &p, msg, sizeof msg);
        if (rc < 0) {
            print_message("cut at %lld bytes: signal %d\n", (long long)cut, -rc);
            crashes++;
        } else if (rc == PATINA_OK) {
            opened++;
        } else {
            if (rc != PATINA_E_CORRUPT || !strstr(msg, "data.mdb"))
                fail_msg("cut at %lld: %s: %s", (long long)cut,
                         patina_status_str((patina_status)rc), msg);
            refused++;
        }
    }
    print_message(
        "data.mdb of %lld bytes cut every %lld bytes: %d refused, %d readable, %d crashes\n",
        (long long)size, (long long)psize / 2, refused, opened, crashes);
    assert_int_equal(crashes, 0);
    assert_true(opened >= 1); /* the whole file */

    /* A directory where data.mdb should be; a directory for lock.mdb. */
    tu_remove_tree(bad);
    assert_int_equal(mkdir(bad, 0777), 0);
    {
        char *d = path_in(bad, "data.mdb"), *l = path_in(bad, "lock.mdb"),
             *gl = path_in(good, "lock.mdb");
        assert_int_equal(mkdir(d, 0777), 0);
        for (m = 0; m < 3; m++) expect_probe(bad, modes[m], PATINA_E_CORRUPT, "data.mdb");
        assert_int_equal(rmdir(d), 0);
        copy_file(data, d, -1);
        unlink(l);
        assert_int_equal(mkdir(l, 0777), 0);
        for (m = 0; m < 3; m++) expect_probe(bad, modes[m], PATINA_E_CORRUPT, "lock.mdb");
        free(d);
        free(l);
        free(gl);
    }
    /* The good one is untouched by all this. */
    expect_probe(good, PATINA_OPEN_READONLY, PATINA_OK, NULL);
    tu_remove_tree(dir);
    free(good);
    free(bad);
    free(data);
    free(dir);
}

/* ------------------------------------------ synthetic images for the CLI */

/* Writes a small binary PPM of random smooth content. */
static void write_ppm(const char *path, int w, int h, uint64_t seed)
{
    patina_image_t img;
    tu_rng_t rng;
    FILE *f;
    int y;
    tu_rng_seed(&rng, seed);
    tu_random_image(&img, w, h, (int)(seed % 3), &rng);
    f = fopen(path, "wb");
    assert_non_null(f);
    fprintf(f, "P6\n%d %d\n255\n", w, h);
    for (y = 0; y < h; y++)
        assert_int_equal(fwrite(img.data + (size_t)y * img.stride, 3, (size_t)w, f), (size_t)w);
    assert_int_equal(fclose(f), 0);
    patina_image_release(&img);
}

/* n images img000.ppm ... in a new folder dir/name; returns the folder. */
static char *make_images(const char *dir, const char *name, int n, uint64_t seed)
{
    char *folder = path_in(dir, name);
    int i;
    assert_int_equal(mkdir(folder, 0777), 0);
    for (i = 0; i < n; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/img%03d.ppm", folder, i);
        write_ppm(p, 24 + i % 7, 20 + i % 5, seed + (uint64_t)i);
    }
    return folder;
}

/* The CLI on a truncated collection: exit status 3, a message naming the
 * file, no signal. */
static void test_cli_corrupt_collection(void **state)
{
    char *dir = tu_tempdir("clicorrupt"), *coll = path_in(dir, "c"), *bad = path_in(dir, "bad"),
         *imgs = make_images(dir, "imgs", 40, 7), *data = path_in(coll, "data.mdb"), *out = NULL;
    off_t size;
    (void)state;
    assert_int_equal(tu_run(NULL, "%s index '%s' '%s' -q 2>/dev/null", PATINA_CLI, coll, imgs), 0);
    size = file_size(data);
    {
        const off_t cuts[] = {0, 100, 4096 + 100, 8192 + (size - 8192) / 2};
        size_t i;
        for (i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
            size_t k;
            damaged_copy(coll, bad, cuts[i], 0, 0);
            for (k = 0; k < 4; k++) {
                char args[8192];
                int rc;
                if (k == 0) snprintf(args, sizeof args, "ls '%s'", bad);
                else if (k == 1) snprintf(args, sizeof args, "info '%s'", bad);
                else if (k == 2)
                    snprintf(args, sizeof args, "search '%s' '%s/img003.ppm'", bad, imgs);
                else snprintf(args, sizeof args, "index '%s' '%s' -q", bad, imgs);
                rc = tu_run(&out, "%s %s 2>&1 >/dev/null", PATINA_CLI, args);
                if (rc != 3 || !strstr(out, "data.mdb"))
                    fail_msg("patina %s (data.mdb cut at %lld bytes): exit %d, stderr: %s", args,
                             (long long)cuts[i], rc, out);
                free(out);
            }
        }
    }
    tu_remove_tree(dir);
    free(coll);
    free(bad);
    free(imgs);
    free(data);
    free(dir);
}

/* ------------------------------------------- many creators at once */

typedef struct {
    const char *coll;
    int who;
    int gate; /* read end of a pipe closed by the parent to start everyone */
} creator_t;

static int creator_child(void *arg, int msgfd)
{
    creator_t *a = arg;
    patina_collection_t *c;
    char key[32], buf[1];
    uint8_t d[DA];
    patina_insert_t it;
    patina_status s;
    if (read(a->gate, buf, 1) < 0) return 99; /* returns 0 at EOF: go */
    snprintf(key, sizeof key, "who/%d", a->who);
    s = patina_collection_open(&c, a->coll, PATINA_OPEN_CREATE, 0);
    if (s == PATINA_OK) {
        fill_insert(&it, key, d, DA, (uint32_t)a->who);
        s = patina_collection_put(c, SPEC_A, DA, &it, 1, NULL);
        patina_collection_close(c);
    }
    if (s != PATINA_OK) child_say(msgfd, patina_last_error());
    return (int)s;
}

/* 65 processes create the same new collection at once: all succeed, each
 * one's record is there. Eight rounds: a missing directory, an empty one. */
static void test_concurrent_create(void **state)
{
    enum { N = 65 };
    char *dir = tu_tempdir("create");
    int round;
    (void)state;
    for (round = 0; round < 8; round++) {
        char *coll;
        pid_t pid[N];
        int gate[2], msgs[2], i, failed = 0;
        patina_collection_t *c;
        uint64_t n;
        if (asprintf(&coll, "%s/c%d", dir, round) < 0) abort();
        if (round % 2) assert_int_equal(mkdir(coll, 0777), 0);
        assert_int_equal(pipe(gate), 0);
        assert_int_equal(pipe(msgs), 0);
        fflush(NULL);
        for (i = 0; i < N; i++) {
            pid[i] = fork();
            assert_true(pid[i] >= 0);
            if (pid[i] == 0) {
                creator_t a = {coll, i, gate[0]};
                int code;
                close(gate[1]);
                close(msgs[0]);
                code = creator_child(&a, msgs[1]);
                if (code) child_say(msgs[1], "\n");
                child_exit(code);
            }
        }
        close(gate[0]);
        close(msgs[1]);
        close(gate[1]); /* go */
        for (i = 0; i < N; i++) {
            int st;
            assert_int_equal(waitpid(pid[i], &st, 0), pid[i]);
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) failed++;
        }
        if (failed) {
            char msg[4096];
            ssize_t got = read(msgs[0], msg, sizeof msg - 1);
            msg[got > 0 ? got : 0] = '\0';
            fail_msg("round %d: %d of %d creators failed: %s", round, failed, N, msg);
        }
        close(msgs[0]);
        TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_READONLY, 0));
        TU_OK(patina_collection_count(c, &n));
        assert_int_equal(n, N);
        for (i = 0; i < N; i++) {
            char key[32];
            patina_record_t r;
            snprintf(key, sizeof key, "who/%d", i);
            TU_OK(patina_collection_get_by_key(c, key, &r));
            check_record(&r, key, (uint32_t)i);
            patina_record_release(&r);
        }
        patina_collection_close(c);
        {   /* no temporary directory is left next to it or in it */
            char *out = NULL;
            assert_int_equal(tu_run(&out, "cd '%s' && ls -A . '%s'", dir, coll), 0);
            if (strstr(out, "patina-tmp")) fail_msg("left behind: %s", out);
            free(out);
        }
        free(coll);
    }
    tu_remove_tree(dir);
    free(dir);
}

/* The same through the CLI: 65 `patina index` runs on one new path. */
static void test_cli_concurrent_create(void **state)
{
    enum { N = 65 };
    char *dir = tu_tempdir("clicreate"), *coll = path_in(dir, "c"),
         *imgs = make_images(dir, "imgs", N, 11), *out = NULL;
    int rc;
    (void)state;
    rc = tu_run(&out,
                "cd '%s' && for i in $(seq 0 %d); do f=$(printf 'img%%03d.ppm' $i); "
                "( %s index '%s' \"$f\" -q -j 1 2>&1 || echo \"run $i failed: $?\" ) & done; wait",
                imgs, N - 1, PATINA_CLI, coll);
    assert_int_equal(rc, 0);
    if (strstr(out, "failed")) fail_msg("%s", out);
    free(out);
    rc = tu_run(&out, "%s ls '%s' --format csv | wc -l", PATINA_CLI, coll);
    assert_int_equal(rc, 0);
    assert_int_equal(atoi(out), N);
    free(out);
    tu_remove_tree(dir);
    free(coll);
    free(imgs);
    free(dir);
}

/* ------------------------------------------------- rm while searching */

/* `patina search` while `patina rm` deletes the images it finds: every hit
 * names a key (no phantom "?" from a record removed between loading the
 * index and looking the keys up). */
static void test_cli_search_during_rm(void **state)
{
    enum { N = 300 };
    char *dir = tu_tempdir("clirm"), *coll = path_in(dir, "c"),
         *imgs = make_images(dir, "imgs", N, 21), *out = NULL;
    int rc, searches = 0, hits = 0, phantoms = 0;
    (void)state;
    rc = tu_run(NULL, "%s index '%s' '%s' -q 2>/dev/null", PATINA_CLI, coll, imgs);
    assert_int_equal(rc, 0);
    /* rm removes the keys one by one (one transaction each) in the background;
     * searches for all N run until it is done. */
    rc =
        tu_run(&out,
               "cd '%s' && ( for f in img*.ppm; do echo \"%s/$f\"; done | xargs -n 10 %s rm '%s' ; "
               "touch '%s/rm.done' ) & "
               "while [ ! -e '%s/rm.done' ]; do %s search '%s' '%s/img000.ppm' -k %d --format csv "
               "-j 1 2>/dev/null; echo END; done; wait",
               imgs, imgs, PATINA_CLI, coll, dir, dir, PATINA_CLI, coll, imgs, N);
    assert_int_equal(rc, 0);
    {
        char *line, *save = NULL;
        for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            if (!strcmp(line, "END")) {
                searches++;
                continue;
            }
            hits++;
            if (strstr(line, ",?,")) phantoms++;
        }
    }
    free(out);
    print_message("%d searches during rm: %d hits, %d phantom hits\n", searches, hits, phantoms);
    assert_true(searches >= 2);
    assert_int_equal(phantoms, 0);
    tu_remove_tree(dir);
    free(coll);
    free(imgs);
    free(dir);
}

/* -------------------------------------------------------------- snapshots */

static void test_snapshot_basics(void **state)
{
    char *dir = tu_tempdir("snap"), *coll = path_in(dir, "c");
    patina_collection_t *c;
    patina_snapshot_t *s1, *s2;
    patina_record_t recs[4];
    uint64_t ids[10], want[4], *lids;
    uint8_t *ldescs, d[DB];
    size_t ln, lbytes, i;
    patina_insert_t it;
    (void)state;
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0));
    TU_OK(put_range(c, "img/", 0, 10, 1, ids));
    TU_OK(patina_snapshot_new(&s1, c));
    /* Changes after it: a removal, a replacement, a new table. */
    TU_OK(patina_collection_remove(c, ids[3]));
    TU_OK(put_range(c, "img/", 5, 1, 7, NULL));
    fill_insert(&it, "img/1", d, DB, 1);
    TU_OK(patina_collection_put(c, SPEC_B, DB, &it, 1, NULL));
    TU_OK(patina_snapshot_new(&s2, c));

    /* s1: all ten as they were, and no SPEC_B. */
    TU_OK(patina_snapshot_load(s1, SPEC_A, &lids, &ldescs, &ln, &lbytes));
    assert_int_equal(ln, 10);
    assert_int_equal(lbytes, DA);
    free(lids);
    free(ldescs);
    want[0] = ids[3];
    want[1] = ids[5];
    want[2] = ids[0];
    want[3] = ids[3];
    TU_OK(patina_snapshot_get(s1, want, 4, recs));
    check_record(&recs[0], "img/3", 1);
    check_record(&recs[1], "img/5", 1);
    check_record(&recs[2], "img/0", 1);
    check_record(&recs[3], "img/3", 1);
    for (i = 0; i < 4; i++) patina_record_release(&recs[i]);
    expect_error(patina_snapshot_load(s1, SPEC_B, &lids, &ldescs, &ln, &lbytes), PATINA_E_NOTFOUND,
                 "no table");
    assert_null(lids);

    /* s2: the changes. A missing id: NOTFOUND, the others filled. */
    TU_OK(patina_snapshot_load(s2, SPEC_A, &lids, &ldescs, &ln, &lbytes));
    assert_int_equal(ln, 9);
    free(lids);
    free(ldescs);
    TU_OK(patina_snapshot_load(s2, SPEC_B, &lids, &ldescs, &ln, &lbytes));
    assert_int_equal(ln, 1);
    assert_int_equal(lids[0], ids[1]);
    free(lids);
    free(ldescs);
    expect_error(patina_snapshot_get(s2, want, 4, recs), PATINA_E_NOTFOUND, "id 4");
    assert_null(recs[0].key);
    check_record(&recs[1], "img/5", 7);
    check_record(&recs[2], "img/0", 1);
    assert_null(recs[3].key);
    for (i = 0; i < 4; i++) patina_record_release(&recs[i]);
    TU_OK(patina_snapshot_get(s2, want, 0, NULL));

    patina_snapshot_free(s1);
    /* Bad arguments. */
    expect_error(patina_snapshot_new(NULL, c), PATINA_E_INVALID, NULL);
    expect_error(patina_snapshot_new(&s1, NULL), PATINA_E_INVALID, NULL);
    assert_null(s1);
    expect_error(patina_snapshot_get(s2, NULL, 1, recs), PATINA_E_INVALID, NULL);
    expect_error(patina_snapshot_load(s2, "", &lids, &ldescs, &ln, &lbytes), PATINA_E_INVALID,
                 NULL);
    patina_snapshot_free(NULL);
    patina_snapshot_free(s2);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(coll);
    free(dir);
}

typedef struct {
    patina_collection_t *c;
    atomic_int *stop;
    int snapshots, bad;           /* with a snapshot: must stay 0 */
    int loads, phantoms;          /* without: separate calls, for comparison */
    char why[256];
} snap_reader_t;

/* Loads both tables and looks every record up, in one snapshot: the same
 * ids in both tables, a record for each, with its descriptor. */
static void *snapshot_reader(void *v)
{
    snap_reader_t *t = v;
    while (!atomic_load(t->stop)) {
        patina_snapshot_t *snap;
        uint64_t *ia = NULL, *ib = NULL;
        uint8_t *da = NULL, *db = NULL;
        size_t na, nb, ba, bb, i;
        patina_record_t *recs;
        if (patina_snapshot_new(&snap, t->c) != PATINA_OK) {
            t->bad++;
            snprintf(t->why, sizeof t->why, "snapshot: %s", patina_last_error());
            continue;
        }
        t->snapshots++;
        if (patina_snapshot_load(snap, SPEC_A, &ia, &da, &na, &ba) != PATINA_OK ||
            patina_snapshot_load(snap, SPEC_B, &ib, &db, &nb, &bb) != PATINA_OK) {
            t->bad++;
            snprintf(t->why, sizeof t->why, "load: %s", patina_last_error());
        } else if (na != nb || (na && memcmp(ia, ib, na * sizeof *ia))) {
            t->bad++;
            snprintf(t->why, sizeof t->why, "tables of %zu and %zu rows", na, nb);
        } else if ((recs = calloc(na + 1, sizeof *recs)) != NULL) {
            if (patina_snapshot_get(snap, ia, na, recs) != PATINA_OK) {
                t->bad++;
                snprintf(t->why, sizeof t->why, "get: %s", patina_last_error());
            }
            for (i = 0; i < na; i++) {
                uint8_t want[DA];
                if (recs[i].key) {
                    key_desc(want, DA, recs[i].key, 1);
                    if (memcmp(want, da + i * DA, DA)) t->bad++;
                }
                patina_record_release(&recs[i]);
            }
            free(recs);
        }
        free(ia);
        free(ib);
        free(da);
        free(db);
        patina_snapshot_free(snap);

        /* The same without a snapshot: each call its own transaction. */
        if (patina_collection_load(t->c, SPEC_A, &ia, &da, &na, &ba) == PATINA_OK) {
            t->loads++;
            for (i = 0; i < na; i++) {
                patina_record_t r;
                if (patina_collection_get(t->c, ia[i], &r) == PATINA_OK) patina_record_release(&r);
                else t->phantoms++;
            }
            free(ia);
            free(da);
        }
    }
    return NULL;
}

/* Readers load and look records up while a writer removes them (and
 * creates tables now and then): with a snapshot, never a missing record. */
static void test_snapshot_during_removals(void **state)
{
    enum { N = 600, R = 3 };
    char *dir = tu_tempdir("snaprm"), *coll = path_in(dir, "c");
    patina_collection_t *c;
    pthread_t th[R];
    snap_reader_t t[R];
    atomic_int stop = 0;
    uint64_t ids[N];
    size_t i;
    int snapshots = 0, loads = 0, phantoms = 0;
    (void)state;
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0));
    TU_OK(put_range(c, "img/", 0, N, 1, ids));
    {   /* the same ids in SPEC_B */
        patina_insert_t *it = calloc(N, sizeof *it);
        char (*keys)[16] = calloc(N, 16);
        uint8_t *d = malloc((size_t)N * DB);
        for (i = 0; i < N; i++) {
            snprintf(keys[i], 16, "img/%zu", i);
            fill_insert(&it[i], keys[i], d + i * DB, DB, 1);
        }
        TU_OK(patina_collection_put(c, SPEC_B, DB, it, N, NULL));
        free(it);
        free(keys);
        free(d);
    }
    for (i = 0; i < R; i++) {
        memset(&t[i], 0, sizeof t[i]);
        t[i].c = c;
        t[i].stop = &stop;
        assert_int_equal(pthread_create(&th[i], NULL, snapshot_reader, &t[i]), 0);
    }
    for (i = 0; i < N - 1; i++) {
        TU_OK(patina_collection_remove(c, ids[(i * 7) % N])); /* 7 and N coprime: each once */
        if (i % 100 == 50) {
            patina_insert_t it;
            uint8_t d[DB];
            char spec[32];
            snprintf(spec, sizeof spec, "test:new%zu", i);
            fill_insert(&it, "img/new", d, DB, 1);
            TU_OK(patina_collection_put(c, spec, DB, &it, 1, NULL));
            ids[(i * 7) % N] = 0;
        }
        if (i % 8 == 0) usleep(500);
    }
    atomic_store(&stop, 1);
    for (i = 0; i < R; i++) {
        pthread_join(th[i], NULL);
        if (t[i].bad) fail_msg("reader %zu: %d inconsistent snapshots (%s)", i, t[i].bad, t[i].why);
        snapshots += t[i].snapshots;
        loads += t[i].loads;
        phantoms += t[i].phantoms;
    }
    print_message("%d snapshots consistent during %d removals; without snapshots %d of the "
                  "records of %d loads had gone\n", snapshots, N - 1, phantoms, loads);
    assert_true(snapshots >= R);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(coll);
    free(dir);
}

/* A file that LMDB left a few pages short (pages a transaction allocated
 * and freed again are never written) is healthy: it opens and reads. Made
 * here with LMDB directly in a scratch table of a collection. */
static void test_short_file_with_free_tail(void **state)
{
    char *dir = tu_tempdir("short"), *coll = path_in(dir, "c"), *cut = path_in(dir, "cut"),
         *data = path_in(coll, "data.mdb");
    patina_collection_t *c;
    MDB_env *env;
    int t, short_at = -1;
    tu_rng_t rng;
    static char value[5000];
    (void)state;
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0));
    TU_OK(put_range(c, "img/", 0, 100, 1, NULL));
    patina_collection_close(c);
    tu_rng_seed(&rng, 1);
    assert_int_equal(mdb_env_create(&env), 0);
    assert_int_equal(mdb_env_set_maxdbs(env, 300), 0);
    assert_int_equal(mdb_env_set_mapsize(env, 1u << 30), 0);
    assert_int_equal(mdb_env_open(env, coll, 0, 0664), 0);
    for (t = 0; t < 2000 && short_at < 0; t++) {
        MDB_txn *txn;
        MDB_dbi dbi;
        MDB_envinfo ei;
        MDB_stat es;
        unsigned n = 1 + tu_rng_below(&rng, 400), base = tu_rng_below(&rng, 10000),
                 mode = tu_rng_below(&rng, 3), i;
        assert_int_equal(mdb_txn_begin(env, NULL, 0, &txn), 0);
        assert_int_equal(mdb_dbi_open(txn, t % 2 ? "scratch:a" : "scratch:b", MDB_CREATE, &dbi), 0);
        for (i = 0; i < n; i++) {
            char kb[16];
            MDB_val k = {8, kb}, v = {100 + 1200 * tu_rng_below(&rng, 4), value};
            snprintf(kb, sizeof kb, "%08u", base + i);
            assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
        }
        for (i = 0; mode && i < n; i++) {
            char kb[16];
            MDB_val k = {8, kb};
            snprintf(kb, sizeof kb, "%08u", base + (mode == 1 ? i : n - 1 - i));
            if (tu_rng_below(&rng, 4)) mdb_del(txn, dbi, &k, NULL);
        }
        assert_int_equal(mdb_txn_commit(txn), 0);
        assert_int_equal(mdb_env_info(env, &ei), 0);
        assert_int_equal(mdb_env_stat(env, &es), 0);
        if ((uint64_t)file_size(data) < (uint64_t)(ei.me_last_pgno + 1) * es.ms_psize) short_at = t;
    }
    mdb_env_close(env);
    if (short_at < 0) fail_msg("LMDB never left the file short in 2000 transactions");
    print_message("data.mdb short of its last page after transaction %d\n", short_at);
    expect_probe(coll, PATINA_OPEN_READONLY, PATINA_OK, NULL);
    expect_probe(coll, PATINA_OPEN_WRITE, PATINA_OK, NULL);
    assert_int_equal(count_of(coll), 100);
    /* Shorter still, into pages in use: refused. */
    damaged_copy(coll, cut, file_size(data) / 2, 0, 0);
    expect_probe(cut, PATINA_OPEN_READONLY, PATINA_E_CORRUPT, "truncated");
    tu_remove_tree(dir);
    free(coll);
    free(cut);
    free(data);
    free(dir);
}

/* Two opens of one collection in one process, while the first holds a
 * snapshot and writes: the second open must not reset LMDB's reader table
 * (the snapshot's pages would be reused under it) nor its locks. Opens of
 * one collection in a process share one environment. */
static void test_two_handles_one_process(void **state)
{
    char *dir = tu_tempdir("twice"), *coll = path_in(dir, "c");
    patina_collection_t *c1, *c2;
    patina_snapshot_t *snap;
    uint64_t *ids0, *ids1;
    uint8_t *d0, *d1;
    size_t n0, n1, b0, b1, round;
    (void)state;
    TU_OK(patina_collection_open(&c1, coll, PATINA_OPEN_CREATE, 0));
    TU_OK(put_range(c1, "img/", 0, 500, 1, NULL));
    TU_OK(patina_snapshot_new(&snap, c1));
    TU_OK(patina_snapshot_load(snap, SPEC_A, &ids0, &d0, &n0, &b0));
    /* A second open, then more of them closed again. */
    TU_OK(patina_collection_open(&c2, coll, PATINA_OPEN_READONLY, 0));
    for (round = 0; round < 3; round++) {
        patina_collection_t *c3;
        TU_OK(patina_collection_open(&c3, coll, PATINA_OPEN_WRITE, 0));
        patina_collection_close(c3);
    }
    /* Rewrite everything many times: pages freed now may be reused only
     * once the snapshot is gone. */
    for (round = 0; round < 20; round++) {
        size_t i;
        for (i = 0; i < 25; i++) TU_OK(patina_collection_remove(c1, round * 25 + i + 1));
        TU_OK(put_range(c1, "new/", round * 25, 25, 9, NULL));
    }
    TU_OK(patina_snapshot_load(snap, SPEC_A, &ids1, &d1, &n1, &b1));
    assert_int_equal(n1, n0);
    assert_memory_equal(ids1, ids0, n0 * sizeof *ids0);
    assert_memory_equal(d1, d0, n0 * DA);
    /* The second open keeps its own mode, and outlives the first. */
    expect_error(put_range(c2, "ro/", 0, 1, 1, NULL), PATINA_E_INVALID, "read-only");
    free(ids0);
    free(ids1);
    free(d0);
    free(d1);
    patina_snapshot_free(snap);
    patina_collection_close(c1);
    {
        uint64_t n;
        TU_OK(patina_collection_count(c2, &n));
        assert_int_equal(n, 500);
    }
    TU_OK(patina_collection_open(&c1, coll, PATINA_OPEN_WRITE, 0));
    TU_OK(put_range(c1, "later/", 0, 5, 1, NULL));
    patina_collection_close(c1);
    patina_collection_close(c2);
    /* Open read-only first: a writer in the same process must wait for its
     * close (the environment is mapped read-only). */
    TU_OK(patina_collection_open(&c2, coll, PATINA_OPEN_READONLY, 0));
    expect_error(patina_collection_open(&c1, coll, PATINA_OPEN_WRITE, 0), PATINA_E_BUSY,
                 "open read-only in this process");
    patina_collection_close(c2);
    TU_OK(patina_collection_open(&c1, coll, PATINA_OPEN_WRITE, 0));
    TU_OK(put_range(c1, "later/", 5, 5, 1, NULL));
    assert_int_equal(count_of(coll), 510); /* count_of opens it once more */
    patina_collection_close(c1);
    tu_remove_tree(dir);
    free(coll);
    free(dir);
}

/* ------------------------------------------------ files one cannot write */

typedef struct {
    const char *coll;
    int flags;
} as_nobody_t;

/* Child: as user nobody, opens the collection and reads it all. Exit: 77
 * when this process cannot change its user, else the probe's code. */
static int probe_as_nobody(void *arg, int msgfd)
{
    as_nobody_t *a = arg;
    probe_t p = {a->coll, a->flags};
    if (setgid(65534) != 0 || setuid(65534) != 0) return 77;
    return probe_collection(&p, msgfd);
}

static void expect_nobody(const char *coll, int flags, patina_status want, const char *needle)
{
    as_nobody_t a = {coll, flags};
    char msg[1024];
    int rc = in_child(probe_as_nobody, &a, msg, sizeof msg);
    if (rc == 77) skip();
    if (rc < 0) fail_msg("as nobody, open (flags %d): signal %d", flags, -rc);
    if (rc != (int)want || (needle && !strstr(msg, needle)))
        fail_msg("as nobody, open (flags %d): expected %s, got %s: %s", flags,
                 patina_status_str(want), patina_status_str((patina_status)rc), msg);
}

/* A lock file or data file this user may not write: a clear error naming
 * the file, nothing changed. Runs as root and drops to nobody in a child
 * (root may write anything); skipped when not root. */
static void test_unwritable_files(void **state)
{
    char *dir = tu_tempdir("perm"), *coll = path_in(dir, "c"), *lock = path_in(coll, "lock.mdb"),
         *data = path_in(coll, "data.mdb");
    patina_collection_t *c;
    (void)state;
    if (geteuid() != 0) {
        print_message("not root: cannot test files another user may not write\n");
        skip();
    }
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0));
    TU_OK(put_range(c, "img/", 0, 30, 1, NULL));
    patina_collection_close(c);
    assert_int_equal(chmod(dir, 0755), 0);
    assert_int_equal(chmod(coll, 0755), 0);
    assert_int_equal(chmod(data, 0644), 0);
    assert_int_equal(chmod(lock, 0644), 0);
    /* Readers register in the lock file: not writable, not readable. */
    expect_nobody(coll, PATINA_OPEN_READONLY, PATINA_E_IO, "lock.mdb");
    expect_nobody(coll, PATINA_OPEN_WRITE, PATINA_E_IO, "data.mdb");
    /* A writable lock file: reading works, writing needs data.mdb. */
    assert_int_equal(chmod(lock, 0666), 0);
    expect_nobody(coll, PATINA_OPEN_READONLY, PATINA_OK, NULL);
    expect_nobody(coll, PATINA_OPEN_WRITE, PATINA_E_IO, "data.mdb");
    expect_nobody(coll, PATINA_OPEN_CREATE, PATINA_E_IO, "data.mdb");
    /* No lock file, and no right to make one in the directory. */
    assert_int_equal(unlink(lock), 0);
    expect_nobody(coll, PATINA_OPEN_READONLY, PATINA_E_IO, "lock.mdb");
    /* Nothing was lost. */
    assert_int_equal(count_of(coll), 30);
    expect_probe(coll, PATINA_OPEN_WRITE, PATINA_OK, NULL);
    tu_remove_tree(dir);
    free(coll);
    free(lock);
    free(data);
    free(dir);
}

/* ------------------------------------------------------------ full disks
 *
 * `test_store disk` runs these in a private mount namespace (unshare), each
 * on its own small tmpfs; without the rights for that it exits 77. */

/* Mounts a tmpfs of `bytes` on a new temporary directory. */
static char *small_disk(size_t bytes)
{
    char *dir = tu_tempdir("disk"), opts[64];
    snprintf(opts, sizeof opts, "size=%zu,mode=0777", bytes);
    if (mount("patina-test", dir, "tmpfs", 0, opts) != 0)
        fail_msg("mount tmpfs on %s: %s", dir, strerror(errno));
    return dir;
}

static void drop_disk(char *dir)
{
    if (umount2(dir, MNT_DETACH) != 0) fail_msg("umount %s: %s", dir, strerror(errno));
    rmdir(dir);
    free(dir);
}

static uint64_t disk_free(const char *dir)
{
    struct statvfs v;
    assert_int_equal(statvfs(dir, &v), 0);
    return (uint64_t)v.f_bavail * v.f_frsize;
}

/* Fills the disk of `dir` with the file dir/ballast until `leave` bytes are free. */
static void fill_disk(const char *dir, uint64_t leave)
{
    char *path = path_in(dir, "ballast");
    static char zeros[4096];
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    assert_true(fd >= 0);
    while (disk_free(dir) > leave)
        if (write(fd, zeros, sizeof zeros) != (ssize_t)sizeof zeros) break;
    close(fd);
    free(path);
}

static void empty_ballast(const char *dir)
{
    char *path = path_in(dir, "ballast");
    unlink(path);
    free(path);
}

typedef struct {
    const char *coll;
    int flags;
    size_t n;      /* records to put after opening (0: none) */
    int salt;
} putter_t;

/* Child: opens and puts n records "put/<i>" in one batch. Exit: the status
 * of the open, or 100 + the status of the put. */
static int put_probe(void *arg, int msgfd)
{
    putter_t *a = arg;
    patina_collection_t *c;
    patina_status s = patina_collection_open(&c, a->coll, a->flags, 0);
    int code = (int)s;
    if (s == PATINA_OK && a->n &&
        (s = put_range(c, "put/", 0, a->n, (uint32_t)a->salt, NULL)) != PATINA_OK)
        code = 100 + (int)s;
    if (s != PATINA_OK) child_say(msgfd, patina_last_error());
    patina_collection_close(c);
    return code;
}

/* Child: opens and puts batches of n records "full/<k>/<i>" until one
 * fails. Exit: its status (0 after 100000 batches). */
static int put_until_full(void *arg, int msgfd)
{
    putter_t *a = arg;
    patina_collection_t *c;
    patina_status s = patina_collection_open(&c, a->coll, a->flags, 0);
    int k;
    for (k = 0; s == PATINA_OK && k < 100000; k++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "full/%d/", k);
        s = put_range(c, prefix, 0, a->n, (uint32_t)a->salt, NULL);
    }
    if (s != PATINA_OK) child_say(msgfd, patina_last_error());
    patina_collection_close(c);
    return (int)s;
}

/* ------------------------------------------------------ roots and keys */

#define tp_in(dir, ...) tu_path(dir, __VA_ARGS__)

static void write_small(const char *path, const char *text)
{
    assert_int_equal(tu_write_file(path, text, strlen(text)), 0);
}

static char *key_of(patina_collection_t *c, const char *path)
{
    char *k = NULL;
    TU_OK(patina_collection_key(c, path, &k));
    return k;
}

/* A new collection's root is the folder that holds it; a file's key is its
 * real path relative to the root whatever the spelling (./, .., a symbolic
 * link, absolute), the absolute real path outside the root; key_path turns
 * keys back into files, also after the collection and its folder moved. */
static void test_roots_and_keys(void **state)
{
    char *dir = tu_tempdir("roots"), *real = realpath(dir, NULL), *coll = path_in(dir, "c.patina");
    char *moved = path_in(dir, "moved"), cwd[4096], *k, *p, *other = tu_tempdir("outside");
    char *oreal = realpath(other, NULL), want[8192];
    patina_collection_t *c;
    (void)state;
    assert_non_null(getcwd(cwd, sizeof cwd));
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0));
    TU_OK(patina_collection_root(c, &p));
    assert_string_equal(p, real);
    patina_free(p);
    mkdir(tp_in(dir, "photos"), 0755);
    mkdir(tp_in(dir, "photos/sub"), 0755);
    write_small(tp_in(dir, "photos/sub/a.jpg"), "a");
    assert_int_equal(symlink("photos/sub", tp_in(dir, "link")), 0);
    write_small(tp_in(other, "o.jpg"), "o");
    /* every spelling: one key */
    k = key_of(c, tp_in(dir, "photos/sub/a.jpg"));
    assert_string_equal(k, "photos/sub/a.jpg");
    patina_free(k);
    k = key_of(c, tp_in(dir, "photos/./sub/../sub/a.jpg"));
    assert_string_equal(k, "photos/sub/a.jpg");
    patina_free(k);
    k = key_of(c, tp_in(dir, "link/a.jpg"));
    assert_string_equal(k, "photos/sub/a.jpg");
    patina_free(k);
    assert_int_equal(chdir(tp_in(dir, "photos")), 0);
    k = key_of(c, "./sub/a.jpg"); /* relative to the working directory, keyed from the root */
    assert_string_equal(k, "photos/sub/a.jpg");
    patina_free(k);
    assert_int_equal(chdir(cwd), 0);
    /* outside the root: the absolute real path */
    k = key_of(c, tp_in(other, "o.jpg"));
    snprintf(want, sizeof want, "%s/o.jpg", oreal);
    assert_string_equal(k, want);
    patina_free(k);
    /* errors name the path */
    expect_error(patina_collection_key(c, tp_in(dir, "photos/none.jpg"), &k), PATINA_E_NOTFOUND, "none.jpg");
    assert_null(k);
    expect_error(patina_collection_key(c, real, &k), PATINA_E_INVALID, "root");
    /* key_path: relative keys under the root, absolute ones as they are */
    TU_OK(patina_collection_key_path(c, "photos/sub/a.jpg", &p));
    snprintf(want, sizeof want, "%s/photos/sub/a.jpg", real);
    assert_string_equal(p, want);
    patina_free(p);
    TU_OK(patina_collection_key_path(c, "/x/y.jpg", &p));
    assert_string_equal(p, "/x/y.jpg");
    patina_free(p);
    /* the root is fixed once the collection holds a record */
    TU_OK(patina_collection_set_root(c, dir)); /* the same: nothing to do */
    TU_OK(put_range(c, "k", 0, 1, 1, NULL));
    expect_error(patina_collection_set_root(c, other), PATINA_E_INVALID, "cannot change");
    expect_error(patina_collection_set_root(c, tp_in(dir, "nowhere")), PATINA_E_NOTFOUND, "nowhere");
    TU_OK(patina_collection_set_root(c, real));
    patina_collection_close(c);
    /* the collection and its folder move together: the same keys name the moved files */
    mkdir(moved, 0755);
    assert_int_equal(rename(coll, tp_in(moved, "c.patina")), 0);
    assert_int_equal(rename(tp_in(dir, "photos"), tp_in(moved, "photos")), 0);
    TU_OK(patina_collection_open(&c, tp_in(moved, "c.patina"), PATINA_OPEN_READONLY, 0));
    TU_OK(patina_collection_key_path(c, "photos/sub/a.jpg", &p));
    {
        char *mreal = realpath(moved, NULL);
        snprintf(want, sizeof want, "%s/photos/sub/a.jpg", mreal);
        free(mreal);
    }
    assert_string_equal(p, want);
    assert_int_equal(access(p, R_OK), 0);
    patina_free(p);
    k = key_of(c, tp_in(moved, "photos/sub/a.jpg"));
    assert_string_equal(k, "photos/sub/a.jpg");
    patina_free(k);
    patina_collection_close(c);
    /* another root set before the first record: keys relative to it */
    TU_OK(patina_collection_open(&c, tp_in(dir, "d.patina"), PATINA_OPEN_CREATE, 0));
    TU_OK(patina_collection_set_root(c, tp_in(moved, "photos")));
    TU_OK(patina_collection_set_root(c, other)); /* still empty: may change */
    TU_OK(patina_collection_root(c, &p));
    assert_string_equal(p, oreal);
    patina_free(p);
    k = key_of(c, tp_in(other, "o.jpg"));
    assert_string_equal(k, "o.jpg");
    patina_free(k);
    patina_collection_close(c);
    free(real);
    free(oreal);
    free(coll);
    free(moved);
    tu_remove_tree(dir);
    tu_remove_tree(other);
    free(dir);
    free(other);
}

/* A collection made before roots and the content index (format 1) keeps
 * its keys as given; its first write builds the content index and makes it
 * format 2; content lookups work before (a scan) and after. */
static void test_format1_collection(void **state)
{
    char *dir = tu_tempdir("v1"), *coll = path_in(dir, "old"), *k, *p;
    patina_collection_t *c;
    patina_collection_info_t info;
    patina_record_t r;
    uint8_t d[DA], sha[32];
    patina_insert_t it;
    (void)state;
    TU_OK(patina__collection_create_v1(coll));
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_READONLY, 0));
    TU_OK(patina_collection_info(c, &info));
    assert_int_equal(info.format, 1);
    expect_error(patina_collection_root(c, &p), PATINA_E_NOTFOUND, "before");
    TU_OK(patina_collection_key(c, "./a/../b.jpg", &k)); /* the path as given, even a missing one */
    assert_string_equal(k, "./a/../b.jpg");
    patina_free(k);
    TU_OK(patina_collection_key_path(c, "rel/x.jpg", &p));
    assert_string_equal(p, "rel/x.jpg");
    patina_free(p);
    patina_collection_close(c);
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_WRITE, 0));
    fill_insert(&it, "./mate/a.jpg", d, DA, 3);
    memcpy(sha, it.sha256, 32);
    TU_OK(patina_collection_put(c, SPEC_A, DA, &it, 1, NULL));
    TU_OK(patina_collection_info(c, &info));
    assert_int_equal(info.format, 2);
    TU_OK(patina_collection_get_by_key(c, "./mate/a.jpg", &r));
    patina_record_release(&r);
    TU_OK(patina_collection_get_by_sha256(c, sha, &r));
    assert_string_equal(r.key, "./mate/a.jpg");
    patina_record_release(&r);
    expect_error(patina_collection_set_root(c, dir), PATINA_E_INVALID, "made before");
    expect_error(patina_collection_root(c, &p), PATINA_E_NOTFOUND, "before");
    patina_collection_close(c);
    /* a read-only handle opened on a format 1 collection finds the content index that another
     * process's first write made (and the records it wrote) */
    TU_OK(patina__collection_create_v1(tp_in(dir, "old2")));
    TU_OK(patina_collection_open(&c, tp_in(dir, "old2"), PATINA_OPEN_READONLY, 0));
    {
        patina_insert_t two[2];
        uint8_t d2[2][DA];
        pid_t pid;
        int status;
        fill_insert(&two[0], "x", d2[0], DA, 5);
        fill_insert(&two[1], "y", d2[1], DA, 5);
        memcpy(sha, two[1].sha256, 32);
        expect_error(patina_collection_get_by_sha256(c, sha, &r), PATINA_E_NOTFOUND, "SHA-256"); /* a scan */
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            patina_collection_t *w;
            int ok = patina_collection_open(&w, tp_in(dir, "old2"), PATINA_OPEN_WRITE, 0) == PATINA_OK &&
                     patina_collection_put(w, SPEC_A, DA, two, 2, NULL) == PATINA_OK;
            child_exit(ok ? 0 : 1);
        }
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        TU_OK(patina_collection_get_by_sha256(c, sha, &r));
        assert_string_equal(r.key, "y");
        patina_record_release(&r);
        TU_OK(patina_collection_info(c, &info));
        assert_int_equal(info.format, 2);
    }
    patina_collection_close(c);
    free(coll);
    tu_remove_tree(dir);
    free(dir);
}

/* The content index follows puts, replacements and removals: the lowest id
 * with a content, none once its records are gone. */
static void test_content_index(void **state)
{
    char *dir = tu_tempdir("shaidx"), *coll = path_in(dir, "c");
    patina_collection_t *c, *ro;
    patina_record_t r;
    patina_insert_t it[3];
    uint8_t d[3][DA], sha[32], sha2[32];
    uint64_t ids[3];
    (void)state;
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0));
    fill_insert(&it[0], "a", d[0], DA, 1);
    fill_insert(&it[1], "b", d[1], DA, 1);
    fill_insert(&it[2], "c", d[2], DA, 1);
    memcpy(it[1].sha256, it[0].sha256, 32); /* a and b: the same content */
    memcpy(sha, it[0].sha256, 32);
    memcpy(sha2, it[2].sha256, 32);
    expect_error(patina_collection_get_by_sha256(c, sha, &r), PATINA_E_NOTFOUND, "SHA-256");
    TU_OK(patina_collection_put(c, SPEC_A, DA, it, 3, ids));
    TU_OK(patina_collection_get_by_sha256(c, sha, &r));
    assert_string_equal(r.key, "a");
    patina_record_release(&r);
    TU_OK(patina_collection_remove(c, ids[0]));
    TU_OK(patina_collection_get_by_sha256(c, sha, &r));
    assert_string_equal(r.key, "b");
    patina_record_release(&r);
    /* b changes content: its old one is gone from the index, the new one found */
    memcpy(it[1].sha256, sha2, 32);
    it[1].sha256[5] ^= 1;
    TU_OK(patina_collection_put(c, SPEC_A, DA, &it[1], 1, NULL));
    expect_error(patina_collection_get_by_sha256(c, sha, &r), PATINA_E_NOTFOUND, "SHA-256");
    TU_OK(patina_collection_get_by_sha256(c, it[1].sha256, &r));
    assert_string_equal(r.key, "b");
    patina_record_release(&r);
    TU_OK(patina_collection_open(&ro, coll, PATINA_OPEN_READONLY, 0));
    TU_OK(patina_collection_get_by_sha256(ro, sha2, &r));
    assert_string_equal(r.key, "c");
    patina_record_release(&r);
    patina_collection_close(ro);
    patina_collection_close(c);
    free(coll);
    tu_remove_tree(dir);
    free(dir);
}

/* No space at all: opening never dies of SIGBUS (LMDB's lock file is a
 * shared writable map: a page of it the disk cannot back is SIGBUS); it
 * fails with PATINA_E_FULL, or reads when the lock file has its blocks. */
static void test_disk_open_when_full(void **state)
{
    char *disk = small_disk(1u << 20), *coll = path_in(disk, "c"),
         *lock = path_in(coll, "lock.mdb"), msg[1024];
    patina_collection_t *c;
    putter_t a = {coll, PATINA_OPEN_READONLY, 0, 1};
    uint64_t n;
    int rc;
    (void)state;
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0));
    TU_OK(put_range(c, "img/", 0, 20, 1, NULL));
    patina_collection_close(c);

    /* No lock file and no space for one. */
    assert_int_equal(unlink(lock), 0);
    fill_disk(disk, 0);
    assert_int_equal(disk_free(disk), 0);
    for (a.flags = PATINA_OPEN_READONLY; a.flags <= PATINA_OPEN_WRITE; a.flags++) {
        rc = in_child(put_probe, &a, msg, sizeof msg);
        if (rc < 0) fail_msg("open (flags %d) on a full disk: signal %d", a.flags, -rc);
        if (rc != PATINA_E_FULL || !strstr(msg, "no space left on device") ||
            !strstr(msg, "lock.mdb"))
            fail_msg("open (flags %d) on a full disk: %s: %s", a.flags,
                     patina_status_str((patina_status)rc), msg);
    }
    /* With room for the lock file once, it keeps its blocks. */
    empty_ballast(disk);
    assert_int_equal(count_of(coll), 20);
    fill_disk(disk, 0);
    expect_probe(coll, PATINA_OPEN_READONLY, PATINA_OK, NULL);
    expect_probe(coll, PATINA_OPEN_WRITE, PATINA_OK, NULL);
    /* Writes fail cleanly (once the blocks reserved earlier are used up)
     * and lose nothing. */
    a.flags = PATINA_OPEN_WRITE;
    a.n = 200;
    rc = in_child(put_until_full, &a, msg, sizeof msg);
    if (rc != PATINA_E_FULL || !strstr(msg, "no space left on device"))
        fail_msg("put on a full disk: %d (%s): %s", rc,
                 rc >= 0 ? patina_status_str((patina_status)rc) : "signal", msg);
    n = count_of(coll);
    assert_int_equal(n % 200, 20);
    empty_ballast(disk);
    assert_int_equal(count_of(coll), n);
    drop_disk(disk);
    free(coll);
    free(lock);
}

/* Creating a collection with 0 .. 512 KiB free: it either works (and the
 * collection is whole) or fails with PATINA_E_FULL "no space left on
 * device" and leaves nothing behind; never a signal, never a half-made
 * collection. For a missing directory and for an empty one. */
static void test_disk_create_when_full(void **state)
{
    char *disk = small_disk(1u << 20), *coll = path_in(disk, "c"), msg[1024], *out = NULL;
    const unsigned leave_kib[] = {0,  4,   8,   16,  24,  32,  48,  64,  80,
                                  96, 112, 128, 144, 160, 192, 256, 384, 512};
    size_t i;
    int variant, made = 0, refused = 0;
    (void)state;
    for (variant = 0; variant < 2; variant++)
        for (i = 0; i < sizeof leave_kib / sizeof leave_kib[0]; i++) {
            putter_t a = {coll, PATINA_OPEN_CREATE, 1, 2};
            int rc;
            tu_remove_tree(coll);
            if (variant) assert_int_equal(mkdir(coll, 0777), 0);
            fill_disk(disk, (uint64_t)leave_kib[i] << 10);
            rc = in_child(put_probe, &a, msg, sizeof msg);
            if (rc < 0) fail_msg("create with %u KiB free: signal %d", leave_kib[i], -rc);
            if (rc != PATINA_OK && ((rc != PATINA_E_FULL && rc != 100 + PATINA_E_FULL) ||
                                    !strstr(msg, "no space left on device")))
                fail_msg("create with %u KiB free: %d: %s", leave_kib[i], rc, msg);
            empty_ballast(disk);
            if (rc == PATINA_E_FULL) {
                /* The creation failed: the path is as it was. */
                if (variant) {
                    assert_int_equal(rmdir(coll), 0); /* still there, and empty */
                } else if (access(coll, F_OK) == 0) {
                    fail_msg("create with %u KiB free failed (%s) but left %s", leave_kib[i], msg,
                             coll);
                }
                refused++;
            } else {
                /* Created (a put may have failed after): whole and usable. */
                expect_probe(coll, PATINA_OPEN_READONLY, PATINA_OK, NULL);
                expect_probe(coll, PATINA_OPEN_WRITE, PATINA_OK, NULL);
                assert_int_equal(count_of(coll), rc == PATINA_OK ? 1 : 0);
                made++;
            }
            assert_int_equal(tu_run(&out, "ls -AR '%s'", disk), 0);
            if (strstr(out, "patina-tmp"))
                fail_msg("create with %u KiB free left: %s", leave_kib[i], out);
            free(out);
        }
    print_message("creating with 0..512 KiB free: %d made, %d refused (nothing left)\n", made,
                  refused);
    assert_true(made > 0 && refused > 0);
    drop_disk(disk);
    free(coll);
}

/* The disk fills up while batches are written: "no space left on device",
 * everything committed before is intact, and writing resumes once there is
 * room again. */
static void test_disk_fill_while_writing(void **state)
{
    enum { B = 20, D = 400 };
    char *disk = small_disk(2u << 20), *coll = path_in(disk, "c");
    patina_collection_t *c;
    patina_status s = PATINA_OK;
    uint64_t *lids, n;
    uint8_t *ldescs, descs[B * D];
    size_t batches, i, ln, lbytes;
    (void)state;
    fill_disk(disk, 1u << 20); /* 1 MiB of it is ballast, freed at the end */
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0));
    for (batches = 0; batches < 100000; batches++) {
        patina_insert_t it[B];
        char keys[B][32];
        for (i = 0; i < B; i++) {
            snprintf(keys[i], sizeof keys[i], "f%zu/%zu", batches, i);
            fill_insert(&it[i], keys[i], descs + i * D, D, 4);
        }
        if ((s = patina_collection_put(c, "fill", D, it, B, NULL)) != PATINA_OK) break;
    }
    expect_error(s, PATINA_E_FULL, "no space left on device");
    if (strstr(patina_last_error(), "I/O error")) fail_msg("%s", patina_last_error());
    print_message("disk full after %zu batches: %s\n", batches, patina_last_error());
    assert_true(batches > 5);
    /* The same handle still reads, and fails the same batch again. */
    TU_OK(patina_collection_count(c, &n));
    assert_int_equal(n, batches * B);
    {
        patina_insert_t it[B];
        char keys[B][32];
        for (i = 0; i < B; i++) {
            snprintf(keys[i], sizeof keys[i], "f%zu/%zu", batches, i);
            fill_insert(&it[i], keys[i], descs + i * D, D, 4);
        }
        expect_error(patina_collection_put(c, "fill", D, it, B, NULL), PATINA_E_FULL,
                     "no space left on device");
    }
    patina_collection_close(c);

    expect_probe(coll, PATINA_OPEN_READONLY, PATINA_OK, NULL);
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_WRITE, 0));
    TU_OK(patina_collection_load(c, "fill", &lids, &ldescs, &ln, &lbytes));
    assert_int_equal(ln, batches * B);
    for (i = 0; i < ln; i++) {
        char key[32];
        patina_record_t r;
        uint8_t want[D];
        snprintf(key, sizeof key, "f%zu/%zu", i / B, i % B);
        TU_OK(patina_collection_get(c, lids[i], &r));
        check_record(&r, key, 4);
        patina_record_release(&r);
        key_desc(want, D, key, 4);
        assert_memory_equal(ldescs + i * D, want, D);
    }
    free(lids);
    free(ldescs);
    empty_ballast(disk);
    TU_OK(put_range(c, "again/", 0, 50, 1, NULL));
    TU_OK(patina_collection_count(c, &n));
    assert_int_equal(n, batches * B + 50);
    patina_collection_close(c);
    drop_disk(disk);
    free(coll);
}

/* `patina index` into a collection whose disk fills up: exit 3, "no space
 * left on device", and `patina ls` lists what was committed. */
static void test_disk_cli_index_full(void **state)
{
    char *disk = small_disk(1u << 20), *coll = path_in(disk, "c"), *dir = tu_tempdir("diskimgs"),
         *imgs = make_images(dir, "imgs", 600, 5), *out = NULL;
    int rc, listed;
    (void)state;
    fill_disk(disk, 256u << 10);
    rc = tu_run(&out, "%s index '%s' '%s' --batch 16 -j 1 2>&1 >/dev/null", PATINA_CLI, coll, imgs);
    if (rc != 3 || !strstr(out, "no space left on device"))
        fail_msg("index on a full disk: exit %d: %s", rc, out);
    free(out);
    rc = tu_run(&out, "%s ls '%s' --format csv | wc -l", PATINA_CLI, coll);
    assert_int_equal(rc, 0);
    listed = atoi(out);
    free(out);
    print_message("the disk filled after %d images\n", listed);
    assert_true(listed > 0 && listed < 600);
    empty_ballast(disk);
    assert_int_equal(tu_run(NULL, "%s index '%s' '%s' -q", PATINA_CLI, coll, imgs), 0);
    rc = tu_run(&out, "%s ls '%s' --format csv | wc -l", PATINA_CLI, coll);
    assert_int_equal(atoi(out), 600);
    free(out);
    drop_disk(disk);
    tu_remove_tree(dir);
    free(coll);
    free(imgs);
    free(dir);
}

/* A read-only file system: READONLY handles read (LMDB goes without a lock
 * file there), writers get a clear error. */
static void test_disk_read_only_fs(void **state)
{
    char *disk = small_disk(1u << 20), *coll = path_in(disk, "c"),
         *lock = path_in(coll, "lock.mdb");
    patina_collection_t *c;
    (void)state;
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0));
    TU_OK(put_range(c, "img/", 0, 30, 1, NULL));
    patina_collection_close(c);
    assert_int_equal(unlink(lock), 0);
    if (mount(NULL, disk, NULL, MS_REMOUNT | MS_RDONLY, NULL) != 0)
        fail_msg("remount ro: %s", strerror(errno));
    expect_probe(coll, PATINA_OPEN_READONLY, PATINA_OK, NULL);
    expect_probe(coll, PATINA_OPEN_WRITE, PATINA_E_IO, "data.mdb");
    assert_int_equal(count_of(coll), 30);
    assert_int_equal(mount(NULL, disk, NULL, MS_REMOUNT, NULL), 0);
    drop_disk(disk);
    free(coll);
    free(lock);
}

/* Enters a private mount namespace so that tmpfs mounts stay ours; exits
 * 77 (skipped) when this process may not. */
static void enter_mount_namespace(void)
{
    char *probe;
    if (unshare(CLONE_NEWNS) != 0) {
        printf("SKIPPED: the full-disk tests need a private mount namespace for small tmpfs "
               "mounts (root or CAP_SYS_ADMIN): unshare: %s\n", strerror(errno));
        exit(77);
    }
    /* EINVAL here: / is not a mount point (a chroot into a folder), so its
     * propagation cannot be made private. */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        if (errno == EINVAL)
            printf("SKIPPED: the full-disk tests make / private in their mount namespace, but / is not "
                   "a mount point here (a chroot into a folder?)\n");
        else
            printf("SKIPPED: the full-disk tests cannot make / private in their mount namespace: %s\n",
                   strerror(errno));
        exit(77);
    }
    probe = tu_tempdir("diskprobe");
    if (!probe || mount("patina-test", probe, "tmpfs", 0, "size=64k") != 0) {
        printf("SKIPPED: cannot mount a tmpfs for the full-disk tests: %s\n", strerror(errno));
        exit(77);
    }
    umount2(probe, MNT_DETACH);
    rmdir(probe);
    free(probe);
}

/* test_store [PATTERN]: the tests whose names match PATTERN (default all).
 * test_store disk [PATTERN]: the full-disk tests. */
int main(int argc, char **argv)
{
    const struct CMUnitTest disk_tests[] = {
        cmocka_unit_test(test_disk_open_when_full),
        cmocka_unit_test(test_disk_create_when_full),
        cmocka_unit_test(test_disk_fill_while_writing),
        cmocka_unit_test(test_disk_cli_index_full),
        cmocka_unit_test(test_disk_read_only_fs),
    };
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_vectors),
        cmocka_unit_test(test_sha256_lengths),
        cmocka_unit_test(test_sha256_paths),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_put_get_replace_remove),
        cmocka_unit_test(test_second_table_same_content),
        cmocka_unit_test(test_put_tables),
        cmocka_unit_test(test_long_keys),
        cmocka_unit_test(test_map_full),
        cmocka_unit_test(test_two_writer_processes),
        cmocka_unit_test(test_crash_safety),
        cmocka_unit_test(test_map_grown_elsewhere),
        cmocka_unit_test(test_threads_share_a_handle),
        cmocka_unit_test(test_corrupt_data_file),
        cmocka_unit_test(test_cli_corrupt_collection),
        cmocka_unit_test(test_concurrent_create),
        cmocka_unit_test(test_cli_concurrent_create),
        cmocka_unit_test(test_cli_search_during_rm),
        cmocka_unit_test(test_snapshot_basics),
        cmocka_unit_test(test_snapshot_during_removals),
        cmocka_unit_test(test_short_file_with_free_tail),
        cmocka_unit_test(test_unwritable_files),
        cmocka_unit_test(test_two_handles_one_process),
        cmocka_unit_test(test_roots_and_keys),
        cmocka_unit_test(test_format1_collection),
        cmocka_unit_test(test_content_index),
    };
    if (argc > 1 && !strcmp(argv[1], "disk")) {
        enter_mount_namespace();
        if (argc > 2) cmocka_set_test_filter(argv[2]);
        return cmocka_run_group_tests_name("full disks", disk_tests, NULL, NULL);
    }
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
