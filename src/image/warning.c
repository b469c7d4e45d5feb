/* The decoder-warning service of the loaders (loaders.h): a warning is kept
 * in the caller's decode report, or with strict decoding becomes the error.
 * Not here: the loaders themselves, sniffing, limits (image.c). */
#include <stdarg.h>
#include <stdio.h>

#include "core/internal.h"
#include "image/loaders.h"

patina_status patina_image__warning(const patina_image_src_t *src, const char *fmt, ...)
{
    patina_decode_report_t *r = src->report;
    char msg[PATINA_WARNING_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r) {
        if (r->warnings == 0) snprintf(r->warning, sizeof r->warning, "%s", msg);
        r->warnings++;
    }
    if (src->strict) return patina__fail(PATINA_E_CORRUPT, "%s; strict decoding rejects it", msg);
    return PATINA_OK;
}
