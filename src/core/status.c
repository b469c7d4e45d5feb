/* Status names, the thread-local last-error message, and patina_free. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

#define MSG_MAX 1024

static _Thread_local char last_msg[MSG_MAX];

const char *patina_status_str(patina_status s)
{
    switch (s) {
    case PATINA_OK: return "ok";
    case PATINA_E_INVALID: return "invalid argument";
    case PATINA_E_NOMEM: return "out of memory";
    case PATINA_E_IO: return "i/o error";
    case PATINA_E_FORMAT: return "unsupported format";
    case PATINA_E_CORRUPT: return "corrupt data";
    case PATINA_E_LIMIT: return "over limit";
    case PATINA_E_NOTFOUND: return "not found";
    case PATINA_E_UNAVAILABLE: return "unavailable";
    case PATINA_E_GPU: return "gpu error";
    case PATINA_E_STORE: return "store error";
    case PATINA_E_FULL: return "storage full";
    case PATINA_E_BUSY: return "busy";
    case PATINA_E_INTERNAL: return "internal error";
    case PATINA_DONE: return "done";
    }
    return "unknown status";
}

const char *patina_last_error(void) { return last_msg; }

void patina_clear_error(void) { last_msg[0] = '\0'; }

void patina_free(void *p) { free(p); }

patina_status patina__fail(patina_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_msg, sizeof last_msg, fmt, ap);
    va_end(ap);
    return s;
}

void patina__prefix_error(const char *fmt, ...)
{
    char old[MSG_MAX];
    size_t n;
    va_list ap;
    memcpy(old, last_msg, sizeof old);
    va_start(ap, fmt);
    n = (size_t)vsnprintf(last_msg, sizeof last_msg, fmt, ap);
    va_end(ap);
    if (n + 3 < sizeof last_msg) {
        size_t ol = strnlen(old, sizeof last_msg - n - 3);
        memcpy(last_msg + n, ": ", 2);
        memcpy(last_msg + n + 2, old, ol);
        last_msg[n + 2 + ol] = '\0';
    }
}

patina_status patina__rows(const void **p, size_t n, size_t size, size_t align, void **tmp, const char *what)
{
    *tmp = NULL;
    if (!*p || !n || !size || !((uintptr_t)*p & (align - 1))) return PATINA_OK;
    if (n > SIZE_MAX / size) return patina__fail(PATINA_E_LIMIT, "%s: %zu rows of %zu bytes", what, n, size);
    if (!(*tmp = malloc(n * size)))
        return patina__fail(PATINA_E_NOMEM, "%s: out of memory for an aligned copy of %zu bytes", what, n * size);
    memcpy(*tmp, *p, n * size);
    *p = *tmp;
    return PATINA_OK;
}
