/* PATINA_CLONES: compile a hot function twice, for x86-64-v3 (AVX2, FMA,
 * BMI2) and for the baseline, and pick one when the library loads (GCC's
 * target_clones; an ifunc). Empty elsewhere, and under AddressSanitizer and
 * ThreadSanitizer, whose runtimes are not ready when ifunc resolvers run.
 * Both clones compute the same integers / the same IEEE operations in the
 * same order (the project builds with -ffp-contract=off), so results do not
 * depend on the machine. Use it on static functions only: GCC exports the
 * ifunc of an extern target_clones function whatever -fvisibility says
 * (check_exports fails). */
#ifndef PATINA_ALGO_CLONES_H
#define PATINA_ALGO_CLONES_H

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#if defined(__has_attribute)
#if __has_attribute(target_clones)
#define PATINA_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
#endif
#endif
#ifndef PATINA_CLONES
#define PATINA_CLONES
#endif

#endif
