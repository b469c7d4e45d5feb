/* Library-internal services: error setting, thread pool, option tables.
 * Not installed; never included by users. */
#ifndef PATINA_INTERNAL_H
#define PATINA_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "patina/context.h"
#include "patina/options.h"
#include "patina/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define PATINA_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define PATINA_PRINTF(a, b)
#endif

/* Sets the thread's last-error message (printf-style) and returns s. Call it
 * once, where the error is detected; callers only propagate the status. */
patina_status patina__fail(patina_status s, const char *fmt, ...) PATINA_PRINTF(2, 3);

/* Prefixes the current message with "what: " (used when a lower layer's
 * message needs the caller's context, e.g. the file name). */
void patina__prefix_error(const char *fmt, ...) PATINA_PRINTF(1, 2);

#define PATINA_TRY(expr)                                                                       \
    do {                                                                                       \
        patina_status try_s_ = (expr);                                                         \
        if (try_s_ != PATINA_OK) return try_s_;                                                \
    } while (0)

/* ------------------------------------------------------------ callers' rows */

/* Descriptors, records and queries passed in may sit at any address (a
 * network message, a packed file). The library reads their elements with
 * typed loads, which C allows only at aligned addresses, so each public
 * entry point takes its rows through patina__rows: *p stays when it is
 * aligned to `align` (a power of two); otherwise its n rows of `size`
 * bytes are copied into *tmp, which the caller frees, and *p points there
 * (*tmp is NULL when no copy was made). Fails only for want of memory or
 * when n x size overflows. */
patina_status patina__rows(const void **p, size_t n, size_t size, size_t align, void **tmp, const char *what);

/* The alignment the readers of a descriptor of element size `elem` need:
 * 8 for doubles, 4 for everything else (records of byte elements hold
 * floats and 32-bit counts in their headers). */
#define PATINA_ROW_ALIGN(elem) ((elem) >= 8 ? (size_t)8 : (size_t)4)

/* ---------------------------------------------------------------- threads */

typedef struct patina_pool patina_pool_t;

/* A fixed pool of `threads` workers (0 = online CPUs). */
patina_status patina_pool_new(patina_pool_t **pool, int threads);
void patina_pool_free(patina_pool_t *pool); /* accepts NULL */
int patina_pool_size(const patina_pool_t *pool);

/* Calls fn(arg, i, worker) for i in [0, n), spread dynamically over the
 * workers and the calling thread (worker ids 0 .. size-1); returns when all
 * are done. Not re-entrant on one pool. */
typedef void (*patina_task_fn)(void *arg, size_t i, int worker);
void patina_pool_run(patina_pool_t *pool, size_t n, patina_task_fn fn, void *arg);

/* Monotonic seconds. */
double patina_now(void);

/* ---------------------------------------------------------------- options */

typedef enum patina_opt_type {
    PATINA_OPT_INT,    /* int field */
    PATINA_OPT_DOUBLE, /* double field */
    PATINA_OPT_BOOL,   /* int field, 0/1 (also true/false/yes/no) */
    PATINA_OPT_ENUM,   /* int field: index into choices "a|b|c" */
    PATINA_OPT_STRING  /* char[PATINA_OPT_STRMAX] field: raw text, may contain ',' */
} patina_opt_type;

#define PATINA_OPT_STRMAX 256

/* One option of a family: its name, type, bounds, default and help. */
typedef struct patina_optdef {
    const char *name;
    patina_opt_type type;
    double min, max;     /* bounds for INT and DOUBLE (inclusive) */
    const char *def;     /* default as text */
    const char *choices; /* ENUM: "a|b|c" */
    const char *help;
    size_t offset;       /* offsetof(params struct, field) */
} patina_optdef_t;

/* Parses "key=value,key=value" into params (defaults first). A token with no
 * '=' continues the previous value (so "d=1,2,angles=0,45" works). Errors
 * name the option and the family `what`. */
patina_status patina_opts_parse(void *params, const patina_optdef_t *defs, size_t ndefs,
                                const char *text, const char *what);

/* Writes "key=value,..." for every option in table order; those at index
 * terse_from or later (0: none) only when their value's text differs from
 * their default's. */
void patina_opts_format(char *buf, size_t size, const void *params, const patina_optdef_t *defs,
                        size_t ndefs, size_t terse_from);

/* The option tables of include/patina/options.h (src/core/optsets.c). */
/* Fills the struct of `set` (patina_search_opts_t, patina_identify_opts_t,
 * patina_index_opts_t) with the table's defaults; the caller zeroes it
 * first (fields the table does not hold stay 0). */
void patina__options_init(patina_option_set set, void *opts);
/* Checks every field of that struct the table holds against its bounds
 * and choices (patina_options_check's statuses and messages); fields whose
 * 0 stands for the default accept 0. */
patina_status patina__options_validate(patina_option_set set, const void *opts);

/* A reader-writer lock that prefers writers where the C library can
 * (src/core/rwlock.c); pthread_rwlock_init's result. */
int patina__rwlock_init(pthread_rwlock_t *l);

#ifdef __cplusplus
}
#endif
#endif
