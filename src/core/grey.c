/* An image in grey by the one colour-to-grey rule of every grey-level
 * descriptor (the formula: algo/grey.h, shared with the CUDA kernels). */
#include <stdlib.h>

#include "algo/grey.h"
#include "core/internal.h"
#include "patina/image.h"

patina_status patina_image_to_grey(uint8_t *grey, const patina_image_t *img)
{
    int x, y;
    if (!grey || !img || (img->width > 0 && img->height > 0 && !img->data))
        return patina__fail(PATINA_E_INVALID, "grey: null image or output");
    for (y = 0; y < img->height; y++) {
        const uint8_t *p = img->data + (size_t)y * img->stride;
        uint8_t *g = grey + (size_t)y * (size_t)img->width;
        for (x = 0; x < img->width; x++, p += 3)
            g[x] = grey_bt601(p[0], p[1], p[2]);
    }
    return PATINA_OK;
}
