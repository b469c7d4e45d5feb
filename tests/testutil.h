/* Helpers shared by the test programs: deterministic random images, file
 * helpers, and the GPU skip convention (exit 77 = skipped in CTest). */
#ifndef PATINA_TESTUTIL_H
#define PATINA_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "patina/patina.h"

/* xorshift64*: the same sequence on every machine. */
typedef struct { uint64_t s; } tu_rng_t;
void tu_rng_seed(tu_rng_t *r, uint64_t seed);
uint64_t tu_rng_next(tu_rng_t *r);
uint32_t tu_rng_below(tu_rng_t *r, uint32_t n);

/* Fills a new owned image. kind 0: uniform noise; 1: smooth gradients with
 * noise; 2: flat patches with sharp edges (many edge blocks); 3: grey. */
void tu_random_image(patina_image_t *img, int w, int h, int kind, tu_rng_t *r);

/* A w x h JPEG (4:2:0, quality 1..100) of tu_random_image(kind) with an rng
 * seeded by seed; free with tjFree (turbojpeg.h). */
unsigned char *tu_make_jpeg(unsigned long *size, int w, int h, int kind, int quality, uint64_t seed);
/* The same, written to path. */
void tu_write_jpeg(const char *path, int w, int h, int kind, int quality, uint64_t seed);

/* "<dir>/<printf>" in one of 32 rotating buffers: valid until 32 more calls. */
const char *tu_path(const char *dir, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Writes data to path; returns 0 on success. */
int tu_write_file(const char *path, const void *data, size_t size);
/* A fresh empty directory under $TMPDIR (malloc'd path). */
char *tu_tempdir(const char *tag);
/* A collection `c` in a new temporary directory (returned, malloc'd) with
 * one table `spec` of n images: tu_random_image(w x w, kind) from a
 * generator seeded with seed (re-seed to make the same images as queries),
 * described on the CPU; keys "img/000.jpg", ..., ids 1..n. *descs (n,
 * *bytes) malloc'd; bytes may be NULL. */
char *tu_table_collection(patina_context_t *ctx, const char *spec, size_t n, int w, int kind, uint64_t seed,
                          uint8_t **descs, size_t *bytes);
/* A context of `threads` CPU workers (the process's default GPU when it
 * has one); fails the test when it cannot be made. */
patina_context_t *tu_context(int threads);
/* rm -rf */
void tu_remove_tree(const char *path);
/* The Python of a peer test: $PATINA_PYTHON when set, else the first of
 * venv (may be NULL), /usr/bin/python3 and python3 on which the Python
 * statement `probe` runs (e.g. "import numpy, skimage.feature"); NULL when
 * none does (the test then skips). The result may point to static storage. */
const char *tu_find_python(const char *probe, const char *venv);
/* The whole file, malloc'd with a NUL after its *size bytes; fails the
 * test when it cannot be read. */
void *tu_read_file(const char *path, size_t *size);

/* Lists regular files under dir (recursive) whose names end in one of the
 * extensions ("jpg,png"); sorted; malloc'd array of malloc'd paths. */
size_t tu_list_files(const char *dir, const char *exts, char ***out);
void tu_free_list(char **list, size_t n);

/* Runs a shell command, captures stdout into a malloc'd string (may be NULL),
 * returns the exit status (or -1). */
int tu_run(char **out, const char *fmt, ...);

/* Makes this process subject to file permission checks even as root: drops
 * CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (effective, permitted,
 * inheritable and bounding sets, so programs it runs lose them too). Returns
 * 0 when a chmod 000 directory can then no longer be opened, else -1 with
 * the reason on stderr (the caller skips what needs it). Irreversible: call
 * it in a child, or in a test program that needs no privilege afterwards. */
int tu_drop_privileges(void);

/* Runs argv (NULL-terminated; argv[0] a path) without a shell, capturing
 * stdout into *out and stderr into *err (malloc'd strings; either pointer may
 * be NULL to discard). With TU_UNPRIVILEGED the child first calls
 * tu_drop_privileges. With timeout_s > 0 the child is killed after that many
 * seconds. Returns the exit status, 124 when killed for time, 128 + n for
 * another signal n, -2 when dropping privileges failed, -1 when it could not
 * run. */
enum { TU_UNPRIVILEGED = 1 };
int tu_exec(char **out, char **err, int flags, int timeout_s, const char *const *argv);
/* tu_exec for binary output: *outlen receives stdout's length. */
int tu_exec_len(char **out, size_t *outlen, char **err, int flags, int timeout_s, const char *const *argv);

/* Asserts a library status is PATINA_OK, printing the last error if not. */
#define TU_OK(expr)                                                                            \
    do {                                                                                       \
        patina_status tu_s_ = (expr);                                                          \
        if (tu_s_ != PATINA_OK)                                                                \
            fail_msg("%s:%d: %s -> %s: %s", __FILE__, __LINE__, #expr,                        \
                     patina_status_str(tu_s_), patina_last_error());                           \
    } while (0)

/* For GPU tests: exits 77 with a visible message when no GPU is usable. */
void tu_require_gpu(void);

/* On SIGSEGV, SIGBUS, SIGFPE, SIGILL or SIGABRT: the backtrace on stderr,
 * then the default action. Call it inside a cmocka test (cmocka installs
 * its own handlers, which catch the signal and print no stack, while it
 * runs a group) to see where a crash happened. */
void tu_crash_backtrace(void);

#endif
