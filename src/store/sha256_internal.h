/* Internal hooks of the SHA-256 implementation (src/store/sha256.c), for its
 * tests. */
#ifndef PATINA_STORE_SHA256_INTERNAL_H
#define PATINA_STORE_SHA256_INTERNAL_H

/* 1 forces the portable compression, 0 goes back to the automatic choice.
 * Returns 1 when the SHA-NI path exists on this CPU. */
int patina__sha256_portable(int on);

#endif
