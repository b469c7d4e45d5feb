/* The rootsift family's records, read through the public API.
 *
 * An extractor "rootsift:..." writes one fixed-size record per image
 * (patina_extractor_bytes): a header, m quantised RootSIFT descriptors of
 * 128 components and m keypoints (x, y, scale, angle), strongest first, of
 * which `count` are valid. The byte layout is documented in docs/rootsift.md
 * (little-endian); these functions decode it on any host, so callers (the
 * CLI, bindings) never depend on it. */
#ifndef PATINA_ROOTSIFT_H
#define PATINA_ROOTSIFT_H

#include <stddef.h>
#include <stdint.h>
#include "patina/api.h"
#include "patina/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PATINA_ROOTSIFT_DIM 128

typedef struct patina_rootsift_info {
    uint32_t count;       /* valid features, <= m */
    uint32_t m;           /* rows of the record */
    int f16;              /* 0: components stored as u8, 1: as IEEE binary16 */
    float qscale;         /* stored value = RootSIFT component * qscale */
    float downscale;      /* original / detected pixel size (1: not downscaled) */
    uint32_t width, height;           /* the image features were detected in */
    uint32_t orig_width, orig_height; /* the image given; keypoints are in its pixels */
} patina_rootsift_info_t;

/* Reads the header of a record of `bytes` bytes into info (caller storage).
 * PATINA_E_CORRUPT (with the reason) when the record is malformed. */
PATINA_API patina_status patina_rootsift_info(patina_rootsift_info_t *info, const void *record, size_t bytes);

/* Feature i (< count) of a record: geom = {x, y, scale, angle} in the
 * original image's pixels (pixel centres at integers; angle in radians,
 * VLFeat's convention) and, when stored is not NULL, its 128 components as
 * stored (u8 values as integers, or the binary16 values), so the RootSIFT
 * component is stored[k] / qscale. Both are caller storage; the record is
 * only read. PATINA_E_CORRUPT for a malformed record, PATINA_E_INVALID for
 * i >= count. */
PATINA_API patina_status patina_rootsift_feature(float geom[4], float *stored, const void *record, size_t bytes,
                                                 size_t i);

#ifdef __cplusplus
}
#endif
#endif
