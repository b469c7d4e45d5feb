/* What the search index object (src/search/knn.c) and the search engine
 * (src/search/knn_search.c) share: the index's struct, the engine's
 * constants, the lock helpers and the row check (patina__index_*).
 * Internal to those two files (the tests' view is search/knn.h, the API
 * include/patina/search.h). */
#ifndef PATINA_SEARCH_KNN_INTERNAL_H
#define PATINA_SEARCH_KNN_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"
#include "patina/search.h"
#include "search/distance.h"

#define TILE 256          /* rows whose distances are computed before selection */
#define QB_MAX 32         /* queries per block (a task's queries share each group of rows) */
#define QB_BYTES (256u << 10) /* a block's queries as doubles at most */
#define GPU_MIN_ROWS 4096 /* AUTO runs smaller indexes on the CPU */

struct patina_index {
    patina_extractor_t *ex;   /* owned copy of the caller's extractor */
    const pdist_def_t *dist;  /* the extractor's distance */
    pdist_t dist_id;
    patina_elem elem;
    size_t n, dim, bytes;
    uint64_t serial;          /* names the index's device copies (never reused) */
    uint64_t *ids;            /* (n) unique */
    uint8_t *descs;           /* (n, bytes) row-major */
    /* Tanimoto fast path; t1 == NULL when not used */
    uint32_t *t1;             /* (n) T1 = sum of the row's elements */
    double *c3;               /* (n) C3 = sum of p*p in element order */
    double (*ptab)[8];        /* (t_max + 1, 8): ptab[T][v] = v / T; row 0 zeros */
    size_t t_max;             /* 7 * dim */
    /* sqfd: each row's self term Soo (sig_self); NULL for other distances */
    double *self;             /* (cap) */
    /* standardised L2: per-element sigma of the live rows */
    double *sd;               /* (dim) or NULL */
    /* live updates (patina_index_put / _remove) */
    pthread_rwlock_t lock;    /* searches read; put, remove and compaction write */
    size_t cap;               /* rows allocated in ids, descs, t1, c3, dead */
    size_t live;              /* rows not removed */
    uint8_t *dead;            /* (cap) 1 = removed; NULL while nothing is */
    uint64_t dead_gen;        /* removals since the last compaction */
    uint32_t *rm_log;         /* (rm_cap) the rows removed since the last compaction, in order:
                                 a device copy applies the ones it has not seen */
    size_t rm_cap;
    uint64_t *map_id;         /* id -> row, open addressing (linear probing); */
    uint32_t *map_row;        /* built at the first change: (map_cap) */
    size_t map_cap, map_n;
};

/* The index's lock, for searches (const callers: the lock is the index's
 * own mutable state); put, remove and compaction take it to write (knn.c). */
void patina__index_rd_lock(const patina_index_t *ix);
void patina__index_rd_unlock(const patina_index_t *ix);

/* PATINA_E_INVALID naming `what` when one of the n rows (the index's
 * layout) has a NaN element (F32 / F64 families); PATINA_OK otherwise. */
patina_status patina__index_check_nan(const patina_index_t *ix, const void *rows, size_t n, const char *what);

#endif
