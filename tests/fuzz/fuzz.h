/* The shared harness of the libFuzzer targets in tests/fuzz (docs/fuzzing.md).
 *
 * A target is one file, fuzz_<name>.c, that defines two functions:
 *   LLVMFuzzerTestOneInput  runs one input through the library and checks
 *                           invariants with FUZZ_CHECK (a failed check
 *                           aborts, which libFuzzer reports as a crash);
 *   fuzz_write_seeds        writes the target's seed corpus (and optionally a
 *                           dictionary) with fuzz_seed / fuzz_dict.
 * harness.c supplies LLVMFuzzerInitialize: run as
 *   fuzz_<name> -patina_seeds=DIR
 * a target writes DIR/seeds/ and DIR/dict, runs every seed through
 * LLVMFuzzerTestOneInput once, and exits (the build does this; see
 * CMakeLists.txt). Seeds are generated, never third-party files. */
#ifndef PATINA_FUZZ_H
#define PATINA_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include "patina/patina.h"

typedef struct fuzz_seeds fuzz_seeds_t;

/* Defined by each target. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
void fuzz_write_seeds(fuzz_seeds_t *w);

/* Adds a seed file `name` (a plain file name) holding data[0..size). */
void fuzz_seed(fuzz_seeds_t *w, const char *name, const void *data, size_t size);
/* Adds a dictionary entry (any bytes; escaped as libFuzzer wants). */
void fuzz_dict(fuzz_seeds_t *w, const void *token, size_t size);
void fuzz_dict_str(fuzz_seeds_t *w, const char *token);

/* Prints "fuzz check failed at file:line: ..." and aborts. */
void fuzz_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
#define FUZZ_CHECK(cond, ...)                                                                  \
    do {                                                                                       \
        if (!(cond)) fuzz_fail(__FILE__, __LINE__, __VA_ARGS__);                               \
    } while (0)

/* A deterministic test pattern: (h, w, channels) samples of `depth` bits
 * (8 or 16; 16-bit samples as uint16_t), smooth gradients plus noise, so
 * that encoders give small but non-trivial data. */
void fuzz_pattern(void *out, int w, int h, int channels, int depth, uint32_t seed);

/* ------------------------------------------------------------ image targets */

/* Pixel limit of the image targets: large enough for every header path,
 * small enough that one input decodes in well under a millisecond. */
#define FUZZ_MAX_PIXELS (1u << 16)

/* Probes and decodes one input (patina_image_probe, patina_image_decode)
 * and checks that the two agree, that a decoded image is well-formed and
 * within the limit, and that a failure leaves the image empty and names the
 * input. */
void fuzz_image_input(const uint8_t *data, size_t size);

/* Adds an image seed after checking that it sniffs as `fmt` and, when
 * `valid`, that it decodes (so that the seed reaches that loader). */
void fuzz_image_seed(fuzz_seeds_t *w, const char *name, const void *data, size_t size,
                     patina_format fmt, int valid);

#endif
