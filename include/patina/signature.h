/* The signature family's records, read and compared through the public API.
 *
 * An extractor "signature:..." writes one fixed-size record per image
 * (patina_extractor_bytes; F32 elements in the host's byte order): a header
 * and k rows of PATINA_SIGNATURE_COLS floats - weight, x, y, L, a, b,
 * contrast, entropy (OpenCV's PCTSignatures column order) - of which
 * `count` are used. The layout is documented in docs/signature.md; these
 * functions read it, so callers (the CLI, bindings) never depend on it. */
#ifndef PATINA_SIGNATURE_H
#define PATINA_SIGNATURE_H

#include <stddef.h>
#include <stdint.h>
#include "patina/api.h"
#include "patina/descriptor.h"
#include "patina/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PATINA_SIGNATURE_COLS 8

typedef enum patina_signature_form {
    PATINA_SIGNATURE_GAUSSIAN = 0,  /* f = exp(-alpha d^2) */
    PATINA_SIGNATURE_HEURISTIC = 1, /* f = 1 / (alpha + d) */
    PATINA_SIGNATURE_MINUS = 2      /* f = -d */
} patina_signature_form;

typedef struct patina_signature_info {
    uint32_t count; /* centroids used, 1 <= count <= k */
    uint32_t k;     /* rows of the record */
    double alpha;   /* the SQFD similarity parameter (a float's value) */
    int form;       /* patina_signature_form */
} patina_signature_info_t;

/* Reads and checks a record of `bytes` bytes into info (caller storage).
 * PATINA_E_INVALID, saying why, for a malformed record: an empty signature
 * (count 0), a count over k, a NaN or negative weight, a non-finite
 * feature, alpha <= 0, an unknown form. */
PATINA_API patina_status patina_signature_info(patina_signature_info_t *info, const void *record, size_t bytes);

/* Centroid i (< count) of a record into row (caller storage): weight, x,
 * y, L, a, b, contrast, entropy. Checks the record as patina_signature_info. */
PATINA_API patina_status patina_signature_centroid(float row[PATINA_SIGNATURE_COLS], const void *record,
                                                   size_t bytes, size_t i);

/* Writes a record of extractor ex (a "signature:..." one; alpha, form and
 * k come from its options) from n rows (n, PATINA_SIGNATURE_COLS) given by
 * the caller - e.g. signatures computed elsewhere - into record
 * (patina_extractor_bytes(ex) bytes, caller storage; rows are copied).
 * n = 0 (an empty signature) or a bad row fails with PATINA_E_INVALID,
 * n > k with PATINA_E_LIMIT. */
PATINA_API patina_status patina_signature_pack(const patina_extractor_t *ex, void *record, const float *rows,
                                               size_t n);

/* The Signature Quadratic Form Distance of two records of `bytes` bytes
 * each (the family's distance; docs/signature.md gives the definition):
 * *d receives it (NaN on failure). Both records are checked as
 * patina_signature_info; records of different alpha or form fail with
 * PATINA_E_INVALID. */
PATINA_API patina_status patina_signature_sqfd(double *d, const void *query, const void *other, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
