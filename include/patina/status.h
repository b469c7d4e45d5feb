/* Patina status codes and the thread-local last-error message.
 *
 * Every library call that can fail returns a patina_status. On failure the
 * library also sets, once and where the error is detected, a message for the
 * calling thread saying what went wrong and where, e.g.
 *   "decode: truncated JPEG data in 'x.jpg'".
 * The library never prints and never exits. */
#ifndef PATINA_STATUS_H
#define PATINA_STATUS_H

#include "patina/api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum patina_status {
    PATINA_OK = 0,
    PATINA_E_INVALID = 1,     /* bad argument or option value */
    PATINA_E_NOMEM = 2,       /* host or device allocation failed */
    PATINA_E_IO = 3,          /* read/write/open failed (errno in the message) */
    PATINA_E_FORMAT = 4,      /* unknown or unsupported image/data format */
    PATINA_E_CORRUPT = 5,     /* corrupt or truncated data */
    PATINA_E_LIMIT = 6,       /* over a configured limit (pixels, bytes, k) */
    PATINA_E_NOTFOUND = 7,    /* no such record, family or file */
    PATINA_E_UNAVAILABLE = 8, /* feature not built in or no device present */
    PATINA_E_GPU = 9,         /* CUDA runtime error */
    PATINA_E_STORE = 10,      /* storage back end error */
    PATINA_E_FULL = 11,       /* disk or map full; nothing committed was lost */
    PATINA_E_BUSY = 12,       /* resource locked by another writer */
    PATINA_E_INTERNAL = 13,   /* a bug: an invariant did not hold */
    PATINA_DONE = 14          /* an iterator is exhausted (not an error) */
} patina_status;

/* Short constant name of a status ("invalid argument"). Never NULL. */
PATINA_API const char *patina_status_str(patina_status s);

/* The calling thread's last error message ("" when none). The pointer is valid
 * until the next failing library call on this thread. */
PATINA_API const char *patina_last_error(void);

/* Clears the calling thread's last error message. */
PATINA_API void patina_clear_error(void);

/* Frees memory the library handed over as malloc'd (file buffers, strings,
 * arrays of keys or specs: the calls that say "the caller frees with
 * free()"). Plain free() is the same in a C program; a binding, or a
 * program whose free() may not be the library's (another C runtime, a
 * sanitizer's allocator in the library only), should call this. NULL is
 * a no-op. */
PATINA_API void patina_free(void *p);

#ifdef __cplusplus
}
#endif
#endif
