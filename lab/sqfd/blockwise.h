/* The paper's block-wise SQFD kernel (Krulis, Skopal, Lokoc, Beecks,
 * "Combining CPU and GPU architectures for fast similarity search", section
 * 4): a block holds the query and N database signatures; each distance is
 * computed by one thread group of 256 threads, which stages both signatures
 * in shared memory, walks the (n+m)^2 items of the concatenated similarity
 * matrix in an irregular mapping (item t, t + 256, ... of the row-major
 * matrix), multiplies each by (w_q | -w_o)_i (w_q | -w_o)_j and adds it to
 * the thread's own partial sum; thread 0 adds the 256 partial sums and takes
 * the square root. No self terms, no pruning: the lab baseline the
 * production kernel (src/gpu/sqfd.cu) is measured against. Intermediates in
 * float (the paper's "float") or double ("double"); f = exp(-alpha d^2),
 * 1 / (alpha + d) or -d by the records' form. Never linked into libpatina. */
#ifndef PATINA_LAB_SQFD_BLOCKWISE_H
#define PATINA_LAB_SQFD_BLOCKWISE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lab_bw lab_bw_t;

/* A device copy of n signature records of dim floats (8 + 8 K; the
 * documented layout), processed in blocks of `block` signatures per launch
 * (the paper's N). NULL on failure (why in err). */
lab_bw_t *lab_bw_new(const float *recs, size_t n, size_t dim, size_t block, char *err, size_t errlen);
void lab_bw_free(lab_bw_t *l);

/* The distances of query q (a record of dim floats) to every row into d (n,
 * host), intermediates in double (dbl != 0) or float. 0, or -1 on a CUDA
 * error. */
int lab_bw_run(lab_bw_t *l, const float *q, int dbl, double *d);

/* Milliseconds of one whole pass over the rows (every block launched),
 * median of reps after a warm-up (CUDA events), distances left on the
 * device. */
double lab_bw_time(lab_bw_t *l, const float *q, int dbl, int reps);

#ifdef __cplusplus
}
#endif
#endif
