/* The table of image loaders (loaders.h): one entry per format, in sniffing
 * order, as the family table lists the descriptor families. A new format is
 * a file with its loader and a line here. Not here: the loaders (jpeg.c,
 * png.c, pnm.c), what is done with them (image.c). */
#include <stddef.h>

#include "image/loaders.h"

const patina_image_loader_t *const patina_image__loaders[] = {
    &patina_image__loader_jpeg,
    &patina_image__loader_png,
    &patina_image__loader_pnm,
    NULL,
};

const patina_image_loader_t *patina_image__loader(patina_format f)
{
    for (const patina_image_loader_t *const *l = patina_image__loaders; *l; l++)
        if ((*l)->format == f) return *l;
    return NULL;
}
