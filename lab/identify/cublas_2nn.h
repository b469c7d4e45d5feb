/* The paper's 2-NN matching (texture-identification-distributed-gpus,
 * Algorithm 2 with batching, section 5): per batch of references one
 * strided-batched cuBLAS GEMM S_b = R_b Q^T (fp16 inputs, the similarity
 * matrices written to device memory), then a top-2 kernel (one thread per
 * query row and reference: the best and second-best similarity, Lowe's
 * ratio test) and a scoring kernel (distinct reference rows hit: the
 * one-to-one score). The lab baseline the fused kernel of
 * src/gpu/identify.cu is measured against; never linked into libpatina.
 *
 * With fp32 outputs the similarities are the exact integer dots (u8 values
 * as binary16, products and sums below 2^24), so its scores equal the
 * library's (lab_identify --validate checks it); with fp16 outputs (the
 * paper's HGEMM, rows scaled by 2^-9 so that dots stay below 1) they are
 * rounded to 11 bits and near-ties may decide differently. */
#ifndef PATINA_LAB_CUBLAS_2NN_H
#define PATINA_LAB_CUBLAS_2NN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lab_2nn lab_2nn_t;

/* A matcher for references of m rows (rows padded to mpad = m rounded up to
 * 8), one query of at most n rows, batches of `batch` references. fp16_out:
 * 0 writes S as fp32 (exact), 1 as fp16 (the paper's HGEMM). NULL on
 * failure (why in err). */
lab_2nn_t *lab_2nn_new(size_t m, size_t n, size_t batch, int fp16_out, char *err, size_t errlen);
void lab_2nn_free(lab_2nn_t *l);

/* Uploads nref references: rows[i] (m, 128) u8 each, counts (nref). */
int lab_2nn_set_refs(lab_2nn_t *l, const uint8_t *const *rows, const uint16_t *counts, size_t nref);
/* Uploads the query: rows (qn, 128) u8. */
int lab_2nn_set_query(lab_2nn_t *l, const uint8_t *rows, size_t qn);

/* One-to-one scores of the query against every reference (ratio: Lowe's),
 * into scores (nref) on the host. Returns 0, or -1 on a CUDA error. */
int lab_2nn_run(lab_2nn_t *l, double ratio, uint32_t *scores);

/* Milliseconds of one run (median of reps after a warm-up), scores left on
 * the device: the GPU time of matching every reference. */
double lab_2nn_time(lab_2nn_t *l, double ratio, int reps);

#ifdef __cplusplus
}
#endif
#endif
