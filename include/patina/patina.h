/* Patina: GPU-accelerated image descriptors and similarity search.
 * The whole public API; see each header for its module. */
#ifndef PATINA_H
#define PATINA_H

#include "patina/status.h"
#include "patina/image.h"
#include "patina/context.h"
#include "patina/cedd.h"
#include "patina/descriptor.h"
#include "patina/options.h"
#include "patina/glcm.h"
#include "patina/rootsift.h"
#include "patina/signature.h"
#include "patina/store.h"
#include "patina/search.h"
#include "patina/pivots.h"
#include "patina/identify.h"
#include "patina/pipeline.h"
#include "patina/table.h"
#include "patina/video.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PATINA_VERSION_MAJOR 0
#define PATINA_VERSION_MINOR 1
#define PATINA_VERSION_PATCH 0

PATINA_API const char *patina_version(void);

/* Build features: "cuda=yes sm=90 turbojpeg=yes ...". Static string. */
PATINA_API const char *patina_build_info(void);

/* Number of usable CUDA devices (0 without CUDA or without a GPU). */
PATINA_API int patina_gpu_count(void);

/* Describes GPU i ("NVIDIA H100 80GB HBM3, sm_90, 132 SMs, 79.1 GiB") into
 * buf; PATINA_E_UNAVAILABLE when there is no such GPU. */
PATINA_API patina_status patina_gpu_describe(int i, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
