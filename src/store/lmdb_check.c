/* The check of a collection's data.mdb before LMDB maps it (lmdb.c's header
 * comment, "Files"): both meta pages are read, and every page up to the
 * last one the newest meta page uses must be in the file, or be on LMDB's
 * free list (LMDB 0.9 can leave a file a few pages short), so that a
 * damaged or cut file is an error and never a SIGBUS. It reads the parts of
 * LMDB's file format described below, with plain reads (no mapping).
 *
 * Not here: opening the environment and the lock file (lmdb.c), creation
 * (lmdb_create.c). */
#define _GNU_SOURCE /* pread, usleep */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/internal.h"
#include "store/lmdb_internal.h"

/* ------------------------------------------------------ the data file */

/* The parts of LMDB 0.9's file format (data version 1) that the checks
 * below read. pgno_t and txnid_t are size_t. A page starts with a header
 * {pgno_t pgno; u16 pad; u16 flags; u16 lower, upper (or u32 overflow page
 * count)} followed by u16 offsets of its nodes. Pages 0 and 1 are meta
 * pages: after the header, {u32 magic; u32 version; void *address; size_t
 * mapsize; MDB_db free, main; pgno_t last_pg; txnid_t txnid}, where MDB_db
 * is {u32 pad (the page size, in the free DB's); u16 flags, depth;
 * pgno_t branch, leaf, overflow; size_t entries; pgno_t root}. A node is
 * {u16 lo, hi, flags, ksize; key; data}: in a branch page lo | hi << 16 |
 * flags << 32 is the child's page number, in a leaf page lo | hi << 16 is
 * the data size and F_BIGDATA puts the data on overflow pages (the node
 * holds their first page number). The free list is a B-tree of txnid ->
 * IDL: {pgno_t count; pgno_t pages[count]}. */
#define LMDB_MAGIC 0xBEEFC0DEu
#define LMDB_DATA_VERSION 1u
#define LP_BRANCH 0x01
#define LP_LEAF 0x02
#define LP_OVERFLOW 0x04
#define LP_META 0x08
#define LN_BIGDATA 0x01
#define LMDB_NO_PAGE ((uint64_t)(size_t)-1) /* P_INVALID: an empty tree */
#define LMDB_MAX_DEPTH 32                    /* LMDB's cursor stack */
#define PG_SZ ((size_t)sizeof(size_t))
#define PAGE_HDR (PG_SZ + 8)
#define DB_SZ (8 + 5 * PG_SZ)
#define META_OFF_DBS (PAGE_HDR + 8 + 2 * PG_SZ)
#define META_END (META_OFF_DBS + 2 * DB_SZ + 2 * PG_SZ)

typedef struct lmdb_meta {
    uint32_t magic, version, psize;
    unsigned flags;
    uint64_t free_root, main_root, last_pg, txnid;
} lmdb_meta_t;

/* LMDB writes its structures in host byte order. */
static uint64_t rd16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t get_pg(const uint8_t *p)
{
    size_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void parse_meta(lmdb_meta_t *m, const uint8_t *p)
{
    m->flags = (unsigned)rd16(p + PG_SZ + 2);
    m->magic = (uint32_t)rd32(p + PAGE_HDR);
    m->version = (uint32_t)rd32(p + PAGE_HDR + 4);
    m->psize = (uint32_t)rd32(p + META_OFF_DBS);
    m->free_root = get_pg(p + META_OFF_DBS + 8 + 4 * PG_SZ);
    m->main_root = get_pg(p + META_OFF_DBS + DB_SZ + 8 + 4 * PG_SZ);
    m->last_pg = get_pg(p + META_OFF_DBS + 2 * DB_SZ);
    m->txnid = get_pg(p + META_OFF_DBS + 2 * DB_SZ + PG_SZ);
}

static patina_status damaged(const char *path, const char *fmt, ...) PATINA_PRINTF(2, 3);
static patina_status damaged(const char *path, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return patina__fail(PATINA_E_CORRUPT, "store: '%s' is corrupt: %s", path, what);
}

patina_status patina__store_not_regular(const char *path)
{
    return patina__fail(PATINA_E_CORRUPT, "store: '%s' is not a regular file", path);
}

/* Reads meta page `which` at `off`; checks what LMDB needs of it. */
static patina_status read_meta_page(int fd, const char *path, off_t off, int which, lmdb_meta_t *m)
{
    uint8_t buf[META_END];
    ssize_t got = pread(fd, buf, META_END, off);
    if (got < 0)
        return patina__fail(PATINA_E_IO, "store: cannot read '%s': %s", path, strerror(errno));
    if ((size_t)got < META_END) {
        struct stat st;
        long long size = fstat(fd, &st) == 0 ? (long long)st.st_size : -1;
        if (size == 0)
            return damaged(path, "the file is empty (a creation that was interrupted, or a "
                                 "truncated file)");
        return damaged(path, "the file is truncated (%lld bytes) inside meta page %d", size, which);
    }
    parse_meta(m, buf);
    if (!(m->flags & LP_META) || m->magic != LMDB_MAGIC)
        return damaged(path, "meta page %d is not an LMDB meta page", which);
    if (m->version != LMDB_DATA_VERSION)
        return patina__fail(PATINA_E_FORMAT,
                            "store: '%s' is an LMDB file of data version %u; this build reads "
                            "version %u",
                            path, m->version, LMDB_DATA_VERSION);
    if (m->psize < 512 || m->psize > 65536 || (m->psize & (m->psize - 1)))
        return damaged(path, "meta page %d gives a page size of %u", which, m->psize);
    return PATINA_OK;
}

/* The walk of the free list for check_free_tail. */
typedef struct tail_walk {
    int fd;
    const char *path;
    uint32_t psize;
    uint64_t size;      /* bytes in the file */
    uint64_t have;      /* pages wholly in the file */
    uint64_t last;      /* last page in use */
    uint8_t *free_bits; /* bit i: page have + i is free */
} tail_walk_t;

/* Marks the pages of an IDL ({count; pages[count]}, `bytes` long) that
 * are missing from the file. */
static void mark_free(tail_walk_t *w, const uint8_t *idl, size_t bytes)
{
    uint64_t n, i, pg;
    if (bytes < PG_SZ) return;
    n = get_pg(idl);
    if (n > bytes / PG_SZ - 1) n = bytes / PG_SZ - 1;
    for (i = 0; i < n; i++) {
        pg = get_pg(idl + (i + 1) * PG_SZ);
        if (pg >= w->have && pg <= w->last)
            w->free_bits[(pg - w->have) >> 3] |= (uint8_t)(1u << ((pg - w->have) & 7));
    }
}

/* Marks the free pages of one free-list leaf node (data of dsize bytes at
 * node + 8 + ksize, or on overflow pages). */
static patina_status free_node(tail_walk_t *w, const uint8_t *node, size_t room, uint64_t pgno)
{
    size_t ksize = (size_t)rd16(node + 6), dsize = (size_t)(rd16(node) | rd16(node + 2) << 16);
    uint8_t hdr[PAGE_HDR], *data;
    uint64_t ov, npages;
    patina_status s = PATINA_OK;
    if (!(rd16(node + 4) & LN_BIGDATA)) {
        if (8 + ksize + dsize > room)
            return damaged(w->path, "a node of free-list page %llu is out of bounds",
                           (unsigned long long)pgno);
        mark_free(w, node + 8 + ksize, dsize);
        return PATINA_OK;
    }
    if (8 + ksize + PG_SZ > room)
        return damaged(w->path, "a node of free-list page %llu is out of bounds",
                       (unsigned long long)pgno);
    ov = get_pg(node + 8 + ksize);
    if (ov < 2 || ov >= w->have ||
        pread(w->fd, hdr, PAGE_HDR, (off_t)(ov * w->psize)) != (ssize_t)PAGE_HDR)
        return damaged(w->path,
                       "the file is truncated (%llu bytes): overflow page %llu of its free "
                       "list is past its end",
                       (unsigned long long)w->size, (unsigned long long)ov);
    npages = rd32(hdr + PG_SZ + 4);
    if (!(rd16(hdr + PG_SZ + 2) & LP_OVERFLOW) || npages == 0 ||
        dsize > npages * w->psize - PAGE_HDR)
        return damaged(w->path, "page %llu of its free list is not an overflow page",
                       (unsigned long long)ov);
    if (ov + npages > w->have)
        return damaged(w->path,
                       "the file is truncated (%llu bytes): overflow pages from %llu of its "
                       "free list are past its end",
                       (unsigned long long)w->size, (unsigned long long)ov);
    if (!(data = malloc(dsize ? dsize : 1)))
        return patina__fail(PATINA_E_NOMEM, "store: out of memory");
    if (pread(w->fd, data, dsize, (off_t)(ov * w->psize + PAGE_HDR)) != (ssize_t)dsize)
        s = patina__fail(PATINA_E_IO, "store: cannot read '%s': %s", w->path, strerror(errno));
    else
        mark_free(w, data, dsize);
    free(data);
    return s;
}

/* Walks the free-list B-tree below page pgno (read with pread, every
 * offset checked: the file is not trusted yet). */
static patina_status walk_free(tail_walk_t *w, uint64_t pgno, int depth)
{
    uint8_t *page;
    patina_status s = PATINA_OK;
    size_t nkeys, i, lower, psize = w->psize;
    unsigned flags;
    if (depth > LMDB_MAX_DEPTH)
        return damaged(w->path, "its free list is deeper than %d", LMDB_MAX_DEPTH);
    if (pgno < 2 || pgno > w->last)
        return damaged(w->path, "its free list points at page %llu", (unsigned long long)pgno);
    if (pgno >= w->have)
        return damaged(w->path, "the file is truncated (%llu bytes): page %llu of its free list "
                                "is past its end",
                       (unsigned long long)w->size, (unsigned long long)pgno);
    if (!(page = malloc(psize))) return patina__fail(PATINA_E_NOMEM, "store: out of memory");
    if (pread(w->fd, page, psize, (off_t)(pgno * psize)) != (ssize_t)psize) {
        s = patina__fail(PATINA_E_IO, "store: cannot read '%s': %s", w->path, strerror(errno));
        goto out;
    }
    flags = (unsigned)rd16(page + PG_SZ + 2);
    lower = (size_t)rd16(page + PG_SZ + 4);
    if (get_pg(page) != pgno || lower < PAGE_HDR || lower > psize ||
        !(flags & (LP_BRANCH | LP_LEAF))) {
        s = damaged(w->path, "page %llu of its free list is not a tree page",
                    (unsigned long long)pgno);
        goto out;
    }
    nkeys = (lower - PAGE_HDR) / 2;
    for (i = 0; i < nkeys && s == PATINA_OK; i++) {
        size_t at = (size_t)rd16(page + PAGE_HDR + 2 * i);
        const uint8_t *node = page + at;
        if (at < lower || at + 8 > psize) {
            s = damaged(w->path, "a node of free-list page %llu is out of bounds",
                        (unsigned long long)pgno);
        } else if (flags & LP_BRANCH) {
            uint64_t child = rd16(node) | rd16(node + 2) << 16;
            if (PG_SZ > 4) child |= rd16(node + 4) << 32;
            s = walk_free(w, child, depth + 1);
        } else {
            s = free_node(w, node, psize - at, pgno);
        }
    }
out:
    free(page);
    return s;
}

/* The file (size bytes) ends before the last page in use: fine when every
 * page missing from it is on the free list. */
static patina_status check_free_tail(int fd, const char *path, const lmdb_meta_t *m, uint64_t size)
{
    uint64_t have = size / m->psize;
    tail_walk_t w = {fd, path, m->psize, size, have, m->last_pg, NULL};
    uint64_t missing = m->last_pg + 1 - have, i;
    patina_status s;
    /* An LMDB transaction leaves a few unwritten pages at most; a bigger gap
     * is a truncated file (and would make a big bitmap). */
    if (missing > (1u << 20) || m->free_root == LMDB_NO_PAGE) goto truncated;
    if (!(w.free_bits = calloc((size_t)(missing + 7) / 8, 1)))
        return patina__fail(PATINA_E_NOMEM, "store: out of memory");
    s = walk_free(&w, m->free_root, 0);
    for (i = 0; s == PATINA_OK && i < missing; i++)
        if (!(w.free_bits[i >> 3] & (1u << (i & 7)))) break;
    free(w.free_bits);
    if (s != PATINA_OK) return s;
    if (i == missing) return PATINA_OK;
truncated:
    return damaged(path, "the file is truncated (%llu bytes; pages of %u bytes up to page %llu "
                         "are in use)",
                   (unsigned long long)size, m->psize, (unsigned long long)m->last_pg);
}

/* Checks data.mdb before LMDB maps it ("Files" in lmdb.c's header comment). */
static patina_status check_data_fd(int fd, const char *path)
{
    lmdb_meta_t m0, m1;
    const lmdb_meta_t *m;
    struct stat st;
    uint64_t have;
    if (fstat(fd, &st) != 0)
        return patina__fail(PATINA_E_IO, "store: cannot stat '%s': %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return patina__store_not_regular(path);
    PATINA_TRY(read_meta_page(fd, path, 0, 0, &m0));
    PATINA_TRY(read_meta_page(fd, path, (off_t)m0.psize, 1, &m1));
    if (m1.psize != m0.psize) return damaged(path, "its meta pages give different page sizes");
    m = m1.txnid > m0.txnid ? &m1 : &m0; /* LMDB uses the newer one */
    if (m->last_pg < 1 || m->last_pg > ((uint64_t)1 << 48) / m->psize)
        return damaged(path, "its meta page gives %llu as the last page",
                       (unsigned long long)m->last_pg);
    if ((m->free_root != LMDB_NO_PAGE && (m->free_root < 2 || m->free_root > m->last_pg)) ||
        (m->main_root != LMDB_NO_PAGE && (m->main_root < 2 || m->main_root > m->last_pg)))
        return damaged(path, "its meta page points past its last page");
    /* The size after the meta pages: a writer writes the pages of a commit
     * before its meta page, and LMDB never shrinks the file. */
    if (fstat(fd, &st) != 0)
        return patina__fail(PATINA_E_IO, "store: cannot stat '%s': %s", path, strerror(errno));
    have = (uint64_t)st.st_size / m->psize;
    if (have > m->last_pg) return PATINA_OK;
    return check_free_tail(fd, path, m, (uint64_t)st.st_size);
}

patina_status patina__store_check_data_file(const char *path, int writable)
{
    patina_status s;
    int fd, tries;
    fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) {
        if (errno == EISDIR) return patina__store_not_regular(path);
        return patina__fail(PATINA_E_IO, "store: cannot open '%s' for %s: %s", path,
                            writable ? "writing" : "reading", strerror(errno));
    }
    /* A meta page read while another process commits can be torn: a failed
     * check is repeated before it counts. */
    for (tries = 0;; tries++) {
        s = check_data_fd(fd, path);
        if (s != PATINA_E_CORRUPT || tries == 2) break;
        usleep(2000);
    }
    close(fd);
    return s;
}

