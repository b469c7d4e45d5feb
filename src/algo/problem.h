/* The one helper of the algo modules' record checks (sqfd.c,
 * rootsift_match.c): writes why a record is malformed into the caller's
 * buffer (when there is one) and returns 1 ("malformed"), so a check reads
 * `return algo_problem(msg, cap, "...", ...)`. No error state: the callers
 * above algo/ turn the text into a status and a message. */
#ifndef PATINA_ALGO_PROBLEM_H
#define PATINA_ALGO_PROBLEM_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static inline int algo_problem(char *msg, size_t cap, const char *fmt, ...)
{
    if (msg && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, cap, fmt, ap);
        va_end(ap);
    }
    return 1;
}

#endif
