/* Internal hooks of the collection store (src/store/lmdb.c and
 * lmdb_create.c), for its tests. */
#ifndef PATINA_STORE_INTERNAL_H
#define PATINA_STORE_INTERNAL_H

#include "patina/status.h"

/* Creates an empty collection at `dir` (missing or empty) as builds before
 * roots and the content index made it: format 1, no root, no "sha"
 * database. The store's readers and writers must keep such collections
 * working (tests/test_store.c, test_cli.c). */
patina_status patina__collection_create_v1(const char *dir);

#endif
