/* Fuzz target: collection keys (src/store/lmdb.c). Keys are any non-empty C
 * strings of at most PATINA_KEY_MAX bytes; up to 480 bytes they are LMDB
 * keys as they are, longer ones are indexed by their SHA-256 and compared in
 * full on lookup.
 *
 * An input is a list of operations separated by NUL bytes. Each operation is
 * one op byte and the key bytes after it:
 *   op & 3         0 put, 1 get, 2 remove, 3 put the key twice in one batch
 *   (op >> 2) & 15 key length: 0 = the bytes as given, else the bytes
 *                  repeated to one of the lengths in kLengths (around the
 *                  480-byte switch to hashed keys, LMDB's 511-byte limit and
 *                  PATINA_KEY_MAX)
 *   op >> 6        the content (SHA-256 first byte and descriptor) to store
 * The target runs them on one collection in a temporary directory on tmpfs
 * (/dev/shm), keeps a model of what must be stored, and checks every answer
 * against it: a put keeps the id of an existing key and gives a new key an
 * id above every id before; get by key and by id return the stored key,
 * content and descriptor; a removed key is gone; empty and too-long keys are
 * refused. After the list it compares count and iteration with the model
 * and removes every record, so each input starts from an empty collection. */
#define _GNU_SOURCE /* nftw */

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"

#define MAX_OPS 32
#define DESC_BYTES 4
static const char kSpec[] = "fuzz:keys";
static const size_t kLengths[16] = {0,   1,   2,    31,   479,   480,   481,   482,
                                    511, 512, 1000, 4096, 16384, 65535, 65536, 65537};
static const char kPrefix[] = "patina-fuzz-keys.";

typedef struct entry {
    char *key;
    size_t len;
    uint64_t id;
    uint8_t content;
} entry_t;

static patina_collection_t *g_c;
static char g_dir[512];
static uint64_t g_last_id;      /* the largest id handed out so far */
static entry_t g_model[2 * MAX_OPS];
static size_t g_n;
static char g_key[65538];       /* the current key, NUL-terminated */

/* ------------------------------------------------------------- temp dir */

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    return remove(path);
}

static void rm_tree(const char *path) { nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static void cleanup(void)
{
    patina_collection_close(g_c);
    g_c = NULL;
    if (g_dir[0]) rm_tree(g_dir);
}

/* Collections left by runs that crashed (their process is gone). */
static void remove_stale(const char *base)
{
    DIR *d = opendir(base);
    struct dirent *e;
    char path[1024];
    if (!d) return;
    while ((e = readdir(d)) != NULL) {
        long pid;
        char *end;
        if (strncmp(e->d_name, kPrefix, sizeof kPrefix - 1) != 0) continue;
        pid = strtol(e->d_name + sizeof kPrefix - 1, &end, 10);
        if (*end || pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        snprintf(path, sizeof path, "%s/%s", base, e->d_name);
        rm_tree(path);
    }
    closedir(d);
}

static void open_collection(void)
{
    struct stat st;
    const char *base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
    patina_status s;
    remove_stale(base);
    snprintf(g_dir, sizeof g_dir, "%s/%s%ld", base, kPrefix, (long)getpid());
    rm_tree(g_dir);
    s = patina_collection_open(&g_c, g_dir, PATINA_OPEN_CREATE, 256ull << 20);
    FUZZ_CHECK(s == PATINA_OK, "cannot create a collection in '%s'", g_dir);
    atexit(cleanup);
}

/* ---------------------------------------------------------------- model */

static entry_t *find(const char *key, size_t len)
{
    size_t i;
    for (i = 0; i < g_n; i++)
        if (g_model[i].len == len && memcmp(g_model[i].key, key, len) == 0) return &g_model[i];
    return NULL;
}

static void drop(entry_t *e)
{
    free(e->key);
    *e = g_model[--g_n];
}

static int key_ok(size_t len) { return len >= 1 && len <= PATINA_KEY_MAX; }

static void expect_refused(patina_status s, size_t len, const char *what)
{
    FUZZ_CHECK(s == (len == 0 ? PATINA_E_INVALID : PATINA_E_LIMIT), "%s of a %zu-byte key returned %d",
               what, len, (int)s);
}

/* The stored record of `key` is (id, content), by key and by id. */
static void verify(const char *key, size_t len, uint64_t id, uint8_t content)
{
    patina_record_t rec;
    uint8_t desc[DESC_BYTES];
    patina_status s = patina_collection_get_by_key(g_c, key, &rec);
    FUZZ_CHECK(s == PATINA_OK, "get_by_key of a stored %zu-byte key returned %d", len, (int)s);
    FUZZ_CHECK(rec.id == id, "get_by_key gave id %llu, not %llu", (unsigned long long)rec.id,
               (unsigned long long)id);
    FUZZ_CHECK(rec.key && strlen(rec.key) == len && memcmp(rec.key, key, len) == 0,
               "get_by_key gave another key");
    FUZZ_CHECK(rec.sha256[0] == content && rec.width == 1 && rec.height == 2 &&
                   rec.size == (uint64_t)len,
               "get_by_key gave other content");
    patina_record_release(&rec);
    s = patina_collection_get(g_c, id, &rec);
    FUZZ_CHECK(s == PATINA_OK && rec.id == id && rec.key && strlen(rec.key) == len &&
                   memcmp(rec.key, key, len) == 0 && rec.sha256[0] == content,
               "get by id %llu disagrees (%d)", (unsigned long long)id, (int)s);
    patina_record_release(&rec);
    s = patina_collection_get_descriptor(g_c, kSpec, id, desc, sizeof desc);
    FUZZ_CHECK(s == PATINA_OK && desc[0] == content && desc[1] == (uint8_t)len,
               "descriptor of id %llu (%d)", (unsigned long long)id, (int)s);
}

static void fill_insert(patina_insert_t *it, uint8_t *desc, const char *key, size_t len, uint8_t content)
{
    memset(it, 0, sizeof *it);
    it->key = key;
    it->size = len;
    it->sha256[0] = content;
    it->width = 1;
    it->height = 2;
    desc[0] = content;
    desc[1] = (uint8_t)len;
    desc[2] = 0xA5;
    desc[3] = 0x5A;
    it->desc = desc;
}

/* A put of one key (twice = the same key twice in one batch, the second with
 * content ^ 1, which must win). */
static void op_put(const char *key, size_t len, uint8_t content, int twice)
{
    patina_insert_t it[2];
    uint8_t desc[2][DESC_BYTES];
    uint64_t ids[2] = {0, 0};
    entry_t *e;
    patina_status s;
    fill_insert(&it[0], desc[0], key, len, content);
    if (twice) fill_insert(&it[1], desc[1], key, len, content ^ 1);
    s = patina_collection_put(g_c, kSpec, DESC_BYTES, it, twice ? 2 : 1, ids);
    if (!key_ok(len)) {
        expect_refused(s, len, "put");
        return;
    }
    FUZZ_CHECK(s == PATINA_OK, "put of a %zu-byte key returned %d", len, (int)s);
    if (twice) {
        FUZZ_CHECK(ids[0] == ids[1], "one key twice in a batch got ids %llu and %llu",
                   (unsigned long long)ids[0], (unsigned long long)ids[1]);
        content ^= 1;
    }
    e = find(key, len);
    if (e) {
        FUZZ_CHECK(ids[0] == e->id, "a stored key changed id %llu -> %llu", (unsigned long long)e->id,
                   (unsigned long long)ids[0]);
    } else {
        FUZZ_CHECK(ids[0] > g_last_id, "a new key got id %llu, not above %llu",
                   (unsigned long long)ids[0], (unsigned long long)g_last_id);
        g_last_id = ids[0];
        e = &g_model[g_n++];
        e->key = malloc(len + 1);
        FUZZ_CHECK(e->key != NULL, "out of memory");
        memcpy(e->key, key, len + 1);
        e->len = len;
        e->id = ids[0];
    }
    e->content = content;
    verify(key, len, e->id, content);
}

static void op_get(const char *key, size_t len)
{
    patina_record_t rec;
    entry_t *e;
    patina_status s;
    if (!key_ok(len)) {
        expect_refused(patina_collection_get_by_key(g_c, key, &rec), len, "get_by_key");
        return;
    }
    e = find(key, len);
    if (e) {
        verify(key, len, e->id, e->content);
        return;
    }
    s = patina_collection_get_by_key(g_c, key, &rec);
    FUZZ_CHECK(s == PATINA_E_NOTFOUND, "get_by_key of an absent %zu-byte key returned %d", len, (int)s);
}

static void expect_gone(const char *key, uint64_t id)
{
    patina_record_t rec;
    uint8_t desc[DESC_BYTES];
    FUZZ_CHECK(patina_collection_get_by_key(g_c, key, &rec) == PATINA_E_NOTFOUND, "a removed key is found");
    FUZZ_CHECK(patina_collection_get(g_c, id, &rec) == PATINA_E_NOTFOUND, "a removed id is found");
    FUZZ_CHECK(patina_collection_get_descriptor(g_c, kSpec, id, desc, sizeof desc) == PATINA_E_NOTFOUND,
               "a removed id still has a descriptor");
    FUZZ_CHECK(patina_collection_remove(g_c, id) == PATINA_E_NOTFOUND, "a removed id is removed again");
}

static void op_remove(const char *key, size_t len)
{
    entry_t *e = key_ok(len) ? find(key, len) : NULL;
    patina_status s;
    uint64_t id;
    if (!e) {
        s = patina_collection_remove(g_c, g_last_id + 1);
        FUZZ_CHECK(s == PATINA_E_NOTFOUND, "removing an id never given returned %d", (int)s);
        return;
    }
    id = e->id;
    s = patina_collection_remove(g_c, id);
    FUZZ_CHECK(s == PATINA_OK, "removing a stored id returned %d", (int)s);
    expect_gone(key, id);
    drop(e);
}

/* After an input: count and iteration agree with the model; then empty. */
static void check_and_clear(void)
{
    uint64_t n = 0, cursor = 0, seen = 0;
    patina_record_t rec;
    patina_status s;
    FUZZ_CHECK(patina_collection_count(g_c, &n) == PATINA_OK && n == g_n, "count %llu, model %zu",
               (unsigned long long)n, g_n);
    while ((s = patina_collection_next(g_c, &cursor, &rec)) == PATINA_OK) {
        entry_t *e = rec.key ? find(rec.key, strlen(rec.key)) : NULL;
        FUZZ_CHECK(e && e->id == rec.id && rec.id == cursor, "iteration gave a record the model lacks");
        patina_record_release(&rec);
        seen++;
    }
    FUZZ_CHECK(s == PATINA_DONE && seen == g_n, "iteration ended with %d after %llu of %zu records", (int)s,
               (unsigned long long)seen, g_n);
    while (g_n) {
        entry_t *e = &g_model[g_n - 1];
        FUZZ_CHECK(patina_collection_remove(g_c, e->id) == PATINA_OK, "cleanup remove failed");
        drop(e);
    }
    FUZZ_CHECK(patina_collection_count(g_c, &n) == PATINA_OK && n == 0, "not empty after cleanup");
}

/* The key of one operation in g_key; returns its length. */
static size_t make_key(const uint8_t *p, size_t n, unsigned cls)
{
    size_t want = kLengths[cls], i;
    if (cls == 0) {
        memcpy(g_key, p, n);
        g_key[n] = '\0';
        return n;
    }
    if (n == 0) p = (const uint8_t *)"k", n = 1;
    i = n < want ? n : want;
    memcpy(g_key, p, i);
    for (; i < want; i *= 2) memcpy(g_key + i, g_key, want - i < i ? want - i : i); /* doubling */
    g_key[want] = '\0';
    return want;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *p = data, *end = data + size;
    int ops = 0;
    if (!g_c) open_collection();
    while (p < end && ops < MAX_OPS) {
        const uint8_t *z = memchr(p, 0, (size_t)(end - p));
        const uint8_t *stop = z ? z : end;
        size_t n = (size_t)(stop - p);
        if (n > 0) {
            uint8_t op = p[0];
            size_t klen = n - 1 < sizeof g_key - 1 ? n - 1 : sizeof g_key - 1;
            size_t len = make_key(p + 1, klen, (op >> 2) & 15u);
            switch (op & 3) {
            case 0: op_put(g_key, len, (uint8_t)(op >> 6), 0); break;
            case 1: op_get(g_key, len); break;
            case 2: op_remove(g_key, len); break;
            default: op_put(g_key, len, (uint8_t)(op >> 6), 1); break;
            }
            ops++;
        }
        p = stop + 1;
    }
    check_and_clear();
    return 0;
}

/* ------------------------------------------------------------------ seeds */

/* op byte: action | length class << 2 | content << 6 */
#define OP(act, cls, content) (char)((act) | (cls) << 2 | (content) << 6)

void fuzz_write_seeds(fuzz_seeds_t *w)
{
    /* Each seed is a list of "op byte + key" separated by NUL. */
    static const struct {
        const char *name;
        const char bytes[64];
        size_t size;
    } seeds[] = {
        {"put-get-remove", {OP(0, 0, 1), 'a', 0, OP(1, 0, 0), 'a', 0, OP(2, 0, 0), 'a', 0, OP(1, 0, 0), 'a'}, 11},
        {"replace", {OP(0, 0, 1), 'k', 'e', 'y', 0, OP(0, 0, 2), 'k', 'e', 'y', 0, OP(0, 0, 2), 'k', 'e', 'y'}, 14},
        {"batch-twice", {OP(3, 0, 0), 'd', 'u', 'p', 0, OP(1, 0, 0), 'd', 'u', 'p'}, 9},
        {"long-480-481", {OP(0, 5, 1), 'x', 0, OP(0, 6, 1), 'x', 0, OP(1, 5, 0), 'x', 0, OP(2, 6, 0), 'x'}, 11},
        {"hashed-keys", {OP(0, 10, 0), 'a', 'b', 0, OP(0, 10, 1), 'a', 'c', 0, OP(1, 10, 0), 'a', 'b'}, 11},
        {"key-max", {OP(0, 13, 3), 'z', 0, OP(0, 14, 3), 'z', 0, OP(1, 13, 0), 'z'}, 8},
        {"empty-key", {OP(0, 0, 0), 0, OP(1, 0, 0), 0, OP(2, 0, 0)}, 5},
        {"bytes", {OP(0, 0, 1), '\x01', '\xff', '\x80', '\n', ',', '"', 0, OP(2, 0, 0), '\x01', '\xff', '\x80', '\n', ',', '"'}, 15},
        {"remove-absent", {OP(2, 0, 0), 'n', 'o', 0, OP(2, 7, 0), 'n', 'o'}, 7},
    };
    size_t i;
    for (i = 0; i < sizeof seeds / sizeof seeds[0]; i++) fuzz_seed(w, seeds[i].name, seeds[i].bytes, seeds[i].size);
}
