/* CEDD (Colour and Edge Directivity Descriptor) exactly as LIRE computes it
 * (docs/cedd-spec.md): 144 bins of 3-bit values, Tanimoto distance.
 *
 * These are the direct C-reference entry points. The descriptor is also
 * registered as family "cedd" (options: compact=0|1) for the batch,
 * GPU and hybrid paths in descriptor.h. */
#ifndef PATINA_CEDD_H
#define PATINA_CEDD_H

#include <stddef.h>
#include <stdint.h>
#include "patina/image.h"
#include "patina/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PATINA_CEDD_DIM 144
#define PATINA_CEDD_PACKED_MAX 72

/* C reference: out[144] in 0..7. compact != 0 gives the compact variant
 * (bins 60..143 zero). Any image size is valid; W < 2 or H < 2 gives zeros. */
PATINA_API patina_status patina_cedd_extract(uint8_t out[PATINA_CEDD_DIM], const patina_image_t *img,
                                             int compact);

/* LIRE's Tanimoto distance (spec §13), bit for bit: 0 for identical,
 * 100 for disjoint, 0 for two empty descriptors, 100 if one is empty. */
PATINA_API double patina_cedd_tanimoto(const uint8_t a[PATINA_CEDD_DIM], const uint8_t b[PATINA_CEDD_DIM]);

/* LIRE's getByteArrayRepresentation (spec §12): two bins a byte,
 * ((h[2i]<<4)|h[2i+1]) - 128, trailing zero run trimmed. Returns the length
 * (1..72) written to out. */
PATINA_API size_t patina_cedd_pack(uint8_t out[PATINA_CEDD_PACKED_MAX], const uint8_t h[PATINA_CEDD_DIM]);

/* Inverse of patina_cedd_pack; zero-fills. Fails on n == 0 or n > 72. */
PATINA_API patina_status patina_cedd_unpack(uint8_t h[PATINA_CEDD_DIM], const uint8_t *in, size_t n);

#ifdef __cplusplus
}
#endif
#endif
