/* Entropy decoding of baseline Huffman JPEGs without libjpeg, in parallel
 * pieces (src/algo/jpeg_huff_core.h): the host side (which files, their
 * tables and geometry, the scan destuffed and cut at its restart markers) and
 * the C reference of the algorithm the GPU runs (src/gpu/jpeg_huff.cu), the
 * same steps in a loop. The coefficients equal jpeg_read_coefficients' for
 * every file taken and not flagged; everything else is left to libjpeg-turbo
 * (patina__jpegx_read), per file.
 *
 * Taken (patina__jpegx_huff): a file patina__jpegx_open took that is 8-bit
 * sequential Huffman (SOF0/SOF1) with one scan holding all its components
 * (interleaved, or the one component of a grey image), Ss..Se 0..63 without
 * successive approximation, every table present and valid, at most 10 blocks
 * an MCU; then (patina__jpegh_destuff) its scan runs to its restart markers
 * in order, as many intervals as its MCUs need, and ends at the end-of-image
 * marker. Flagged (by the decode): see jpeg_huff_core.h. */
#ifndef PATINA_IMAGE_JPEG_HUFF_H
#define PATINA_IMAGE_JPEG_HUFF_H

#include <stddef.h>
#include <stdint.h>

#include "algo/jpeg_huff_core.h"
#include "core/internal.h"
#include "image/jpeg_exact.h"

#ifdef __cplusplus
extern "C" {
#endif

#define JH_MAX_TABLES 8
#define JH_MAX_SEGMENT ((size_t)256 << 20) /* larger scans are left to libjpeg (bit offsets stay in 32 bits) */

/* One file as the Huffman decoder takes it. */
typedef struct jh_file {
    jh_scan_t sc;
    jh_table_t tab[JH_MAX_TABLES]; /* the tables its scan uses (sc.bdc, sc.bac index them) */
    int32_t ntab;
    uint32_t niv;                  /* restart intervals its MCUs make (1 without restarts) */
    const uint8_t *seg;            /* its entropy-coded bytes from after SOS to the end of the file (borrowed) */
    size_t seg_size;
} jh_file_t;

/* Fills f (and im's quantisation tables) from reader r just opened by
 * patina__jpegx_open on data; PATINA_OK when the Huffman decoder takes the
 * file, else PATINA_E_FORMAT with the reason (r stays usable for
 * patina__jpegx_read). Defined in jpeg_exact.c (it reads libjpeg's header
 * state). */
patina_status patina__jpegx_huff(patina_jpegx_reader_t *r, jx_image_t *im, jh_file_t *f);

/* One image's region of a batch (the GPU's staging, the reference's
 * buffer): its tables, intervals, chunk map and destuffed scan, each 8-byte
 * aligned. patina__jpegh_region_bound: the bytes it may need. */
size_t patina__jpegh_region_bound(const jh_file_t *f);

/* Stages f into region (cap bytes, 8-byte aligned): destuffs its scan, cuts
 * it into intervals and chunks, and fills im's scan, niv, nc and offsets
 * (tab, iv, civ, data: from the region's first byte; the caller adds the
 * region's place in its batch and sets coef, c0, iv0, flag). *used: bytes
 * written. NULL, or why the file is not taken (a marker out of place, the
 * restart markers out of order or too few or too many, no end of image). */
const char *patina__jpegh_stage(const jh_file_t *f, uint8_t *region, size_t cap, jh_img_t *im, size_t *used);

/* The C reference: the steps of jpeg_huff_core.h, each over every chunk (or
 * interval) before the next, as the kernels run them, on the batch of the
 * one image staged in region (im from patina__jpegh_stage) into coef,
 * (nblocks, 64) s16, which must be all zero on entry (only non-zero
 * coefficients are written). JH_OK, the JH_E_* flags (coef then
 * unspecified), or -1: out of memory. */
int patina__jpegh_decode(const uint8_t *region, const jh_img_t *im, int16_t *coef);

/* The steps on nimg images staged at base (img: their descriptions, by c0
 * and iv0; nchunk chunks and niv intervals in all), with the scratch arrays
 * made here: coef (the images' blocks, 64 s16 each, all zero on entry) and
 * flags (nimg, zero on entry) as the kernels fill them. 0, or -1: out of
 * memory. `rounds` and rev as for patina__jpegh_steps. */
int patina__jpegh_run(const uint8_t *base, const jh_img_t *img, uint32_t nimg, uint32_t nchunk, uint32_t niv,
                      int rounds, int rev, int16_t *coef, uint32_t *flags);

/* The steps on a batch whose st, dirty, g0 and dc arrays are set, `rounds`
 * Jacobi rounds, chunks (intervals) visited backwards when rev (tests: the
 * kernels' order of threads cannot matter). */
void patina__jpegh_steps(const jh_batch_t *b, int rounds, int rev);

/* All of it for one file read by r (just opened), in chunks of chunk_bits
 * (0: JH_CHUNK_BITS): PATINA_OK and coef filled; PATINA_E_FORMAT when not
 * taken or flagged (the message says which; the caller goes on with
 * patina__jpegx_read on the same r), PATINA_E_NOMEM. */
patina_status patina__jpegh_read(patina_jpegx_reader_t *r, jx_image_t *im, int16_t *coef, const char *name,
                                 uint32_t chunk_bits);

#ifdef __cplusplus
}
#endif
#endif
