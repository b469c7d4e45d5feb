/* PATINA_API marks the functions of the public API: the only symbols the
 * shared library exports (it is built with -fvisibility=hidden; the test
 * check_exports compares the exported symbols with these declarations). */
#ifndef PATINA_API_H
#define PATINA_API_H

#if defined(PATINA_STATIC_ONLY)
#define PATINA_API
#elif defined(__GNUC__) || defined(__clang__)
#define PATINA_API __attribute__((visibility("default")))
#else
#define PATINA_API
#endif

#endif
