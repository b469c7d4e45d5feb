/* Collection store (src/store): SHA-256 vectors, open/format errors,
 * put/get/replace/remove/iterate/tables/load, long keys, read-only handles,
 * a full map, two writer processes, a writer killed at random moments,
 * a map grown by another process, and one handle shared by threads.
 *
 * Child processes never call cmocka: they report through their exit code
 * (and a pipe), and the parent checks. */
#define _GNU_SOURCE
#include "testutil.h"

#include <errno.h>
#include <lmdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

int patina__sha256_portable(int on); /* src/store/sha256.c, tests only */

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
    assert_int_equal(info.format, 1);
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
 * SHA-256) into another table keeps the first table's descriptor; changed
 * content drops it (stale). */
static void test_second_table_same_content(void **state)
{
    char *dir = tu_tempdir("second"), *coll = path_in(dir, "c");
    patina_collection_t *c;
    patina_insert_t it;
    uint8_t da[DA], db[DB], got[DA + DB], want[DA + DB];
    uint64_t id;
    size_t ln, lbytes;
    (void)state;
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_CREATE, 0));
    fill_insert(&it, "photo.jpg", da, DA, 1);
    TU_OK(patina_collection_put(c, SPEC_A, DA, &it, 1, &id));
    fill_insert(&it, "photo.jpg", db, DB, 1);               /* same content, table B */
    TU_OK(patina_collection_put(c, SPEC_B, DB, &it, 1, &id));
    assert_int_equal(id, 1);
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
    /* A reader in this process meanwhile: counts only grow, in whole batches. */
    TU_OK(patina_collection_open(&c, coll, PATINA_OPEN_READONLY, 0));
    while (done < 2) {
        TU_OK(patina_collection_count(c, &n));
        assert_true(n >= last);
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
} thr_t;

static void *writer_thread(void *v)
{
    thr_t *t = v;
    int b;
    for (b = 0; b < 40; b++) {
        char prefix[16];
        snprintf(prefix, sizeof prefix, "t%d/", b);
        if (put_range(t->c, prefix, 0, 10, 1, NULL) != PATINA_OK) t->errors++;
        if (b % 10 == 9) {
            /* a new table now and then: handles opened while readers run */
            patina_insert_t it;
            uint8_t d[DB];
            char key[16], spec[16];
            snprintf(key, sizeof key, "x%d", b);
            snprintf(spec, sizeof spec, "test:t%d", b);
            fill_insert(&it, key, d, DB, 1);
            if (patina_collection_put(t->c, spec, DB, &it, 1, NULL) != PATINA_OK) t->errors++;
        }
    }
    atomic_store(t->stop, 1);
    return NULL;
}

static void *reader_thread(void *v)
{
    thr_t *t = v;
    uint64_t n, last = 0, *lids;
    uint8_t *ldescs;
    size_t ln, lbytes, ntab, i;
    char **tabs;
    while (!atomic_load(t->stop)) {
        if (patina_collection_count(t->c, &n) != PATINA_OK || n < last || n % 10 > 4) t->errors++;
        last = n;
        if (patina_collection_tables(t->c, &tabs, &ntab) != PATINA_OK) {
            t->errors++;
            continue;
        }
        for (i = 0; i < ntab; i++) {
            if (patina_collection_load(t->c, tabs[i], &lids, &ldescs, &ln, &lbytes) != PATINA_OK)
                t->errors++;
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
        t[i].stop = &stop;
        assert_int_equal(pthread_create(&th[i], NULL, i == 0 ? writer_thread : reader_thread, &t[i]), 0);
    }
    for (i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (i = 0; i < 4; i++)
        if (t[i].errors) fail_msg("thread %d: %d errors (last: %s)", i, t[i].errors, patina_last_error());
    TU_OK(patina_collection_count(c, &n));
    assert_int_equal(n, 404);
    patina_collection_close(c);
    tu_remove_tree(dir);
    free(coll);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_vectors),
        cmocka_unit_test(test_sha256_lengths),
        cmocka_unit_test(test_sha256_paths),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_put_get_replace_remove),
        cmocka_unit_test(test_second_table_same_content),
        cmocka_unit_test(test_long_keys),
        cmocka_unit_test(test_map_full),
        cmocka_unit_test(test_two_writer_processes),
        cmocka_unit_test(test_crash_safety),
        cmocka_unit_test(test_map_grown_elsewhere),
        cmocka_unit_test(test_threads_share_a_handle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
