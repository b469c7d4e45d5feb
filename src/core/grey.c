/* The one colour-to-grey rule of every grey-level descriptor (LBP family,
 * GLCM, ...): ITU-R BT.601 luma in 14-bit fixed point with rounding,
 *   Y = (4899 R + 9617 G + 1868 B + 8192) >> 14,
 * which is exactly OpenCV's cv::cvtColor(RGB2GRAY) on 8-bit input, and
 * gives back v for a grey pixel r = g = b = v (the weights sum to 16384). */
#include <stdlib.h>

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
            g[x] = (uint8_t)((4899u * p[0] + 9617u * p[1] + 1868u * p[2] + 8192u) >> 14);
    }
    return PATINA_OK;
}
