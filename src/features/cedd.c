/* CEDD C reference (docs/cedd-spec.md): block sums, accumulation over
 * blocks in raster order, LIRE's Tanimoto distance and byte packing.
 * The per-block arithmetic lives in cedd_core.h, shared with CUDA. */
#include <pthread.h>
#include <string.h>

#include "core/internal.h"
#include "features/cedd_ref.h"
#include "patina/cedd.h"

size_t cedd_block_count(const cedd_geom_t *g) { return (size_t)g->nbx * (size_t)g->nby; }

/* The three products of the luma, (0.114*b + 0.587*g) + 0.299*r, as tables:
 * each entry is the same single IEEE multiplication the expression does, so
 * (tb[b] + tg[g]) + tr[r] is bit-identical to cedd_luma and costs three L1
 * loads instead of three conversions and three multiplications. */
static double luma_tb[256], luma_tg[256], luma_tr[256];
static pthread_once_t luma_once = PTHREAD_ONCE_INIT;

static void luma_tables(void)
{
    int v;
    for (v = 0; v < 256; v++) {
        luma_tb[v] = 0.114 * (double)v;
        luma_tg[v] = 0.587 * (double)v;
        luma_tr[v] = 0.299 * (double)v;
    }
}

void cedd_block_row_sums(cedd_block_t *out, const patina_image_t *img, const cedd_geom_t *g,
                         int by)
{
    const int sx = g->sx, sy = g->sy, hx = g->sx / 2, hy = g->sy / 2;
    int bx, i, j;
    pthread_once(&luma_once, luma_tables);
    memset(out, 0, sizeof *out * (size_t)g->nbx);
    for (i = 0; i < sy; i++) {
        const uint8_t *row = img->data + (size_t)(by * sy + i) * img->stride;
        int qrow = i < hy ? 0 : 2;      /* top quadrants 0,1; bottom 2,3 */
        for (bx = 0; bx < g->nbx; bx++) {
            cedd_block_t *b = &out[bx];
            const uint8_t *p = row + (size_t)bx * (size_t)sx * 3;
            uint32_t sr = 0, sg = 0, sb = 0;
            double ql = b->q[qrow], qr = b->q[qrow + 1];
            /* Sequential double sums, left half then right half of the row:
             * the spec's row-major order within each quadrant. */
            for (j = 0; j < hx; j++, p += 3) {
                ql += (luma_tb[p[2]] + luma_tg[p[1]]) + luma_tr[p[0]];
                sr += p[0];
                sg += p[1];
                sb += p[2];
            }
            for (; j < sx; j++, p += 3) {
                qr += (luma_tb[p[2]] + luma_tg[p[1]]) + luma_tr[p[0]];
                sr += p[0];
                sg += p[1];
                sb += p[2];
            }
            b->q[qrow] = ql;
            b->q[qrow + 1] = qr;
            b->rgb[0] += sr;
            b->rgb[1] += sg;
            b->rgb[2] += sb;
        }
    }
}

void cedd_block_sums(cedd_block_t *out, const patina_image_t *img, const cedd_geom_t *g)
{
    int by;
    for (by = 0; by < g->nby; by++)
        cedd_block_row_sums(out + (size_t)by * (size_t)g->nbx, img, g, by);
}

/* Adds the blocks' terms to hist, block by block (raster order per bin). */
static void accumulate(double hist[CEDD_BINS], const cedd_block_t *blocks, size_t n,
                       const cedd_geom_t *g, int compact)
{
    size_t b;
    int bin;
    const int per = compact ? 10 : 24;
    for (b = 0; b < n; b++) {
        cedd_contrib_t c = cedd_block_contrib(&blocks[b], g, compact);
        /* Only the bins of the block's edge categories get a term; the others
         * would add 0.0 (cedd_bin_term), which changes no bit. Per bin the
         * order stays block raster order. */
        for (int e = 0; e < 6; e++) {
            if (!(c.edges & (1u << e))) continue;
            for (bin = 0; bin < per; bin++)
                if (c.colour[bin] > 0.0) hist[e * per + bin] += c.colour[bin];
        }
    }
}

void cedd_from_blocks(uint8_t out[CEDD_BINS], const cedd_block_t *blocks, const cedd_geom_t *g,
                      int compact)
{
    double hist[CEDD_BINS] = {0};
    accumulate(hist, blocks, cedd_block_count(g), g, compact);
    cedd_finish(out, hist, compact);
}

patina_status patina_cedd_extract(uint8_t out[PATINA_CEDD_DIM], const patina_image_t *img,
                                  int compact)
{
    double hist[CEDD_BINS] = {0};
    cedd_geom_t g;
    cedd_block_t row[1024]; /* one block row: nbx <= 40 on the grid, W/2 otherwise */
    int by;

    if (!out || !img || (img->width > 0 && img->height > 0 && !img->data))
        return patina__fail(PATINA_E_INVALID, "cedd: null image or output");
    if (img->width < 0 || img->height < 0 || (img->width > 0 && img->stride < 3 * (size_t)img->width))
        return patina__fail(PATINA_E_INVALID, "cedd: bad image shape %dx%d stride %zu",
                            img->width, img->height, img->stride);
    g = cedd_geometry(img->width, img->height);
    for (by = 0; by < g.nby; by++) {
        /* The no-grid case (short side < 40) can have W/2 blocks per row:
         * do the row in chunks of whole blocks through a narrower view. */
        int done = 0;
        while (done < g.nbx) {
            int take = g.nbx - done < 1024 ? g.nbx - done : 1024;
            patina_image_t view = *img;
            cedd_geom_t part = g;
            view.data = img->data + (size_t)done * (size_t)g.sx * 3;
            part.nbx = take;
            cedd_block_row_sums(row, &view, &part, by);
            accumulate(hist, row, (size_t)take, &g, compact);
            done += take;
        }
    }
    cedd_finish(out, hist, compact);
    return PATINA_OK;
}

double patina_cedd_tanimoto(const uint8_t a[PATINA_CEDD_DIM], const uint8_t b[PATINA_CEDD_DIM])
{
    double t1 = 0.0, t2 = 0.0, c1 = 0.0, c2 = 0.0, c3 = 0.0;
    int i;
    for (i = 0; i < PATINA_CEDD_DIM; i++) {
        t1 += (double)b[i];
        t2 += (double)a[i];
    }
    if (t1 == 0.0 && t2 == 0.0) return 0.0;
    if (t1 == 0.0 || t2 == 0.0) return 100.0;
    for (i = 0; i < PATINA_CEDD_DIM; i++) {
        double p = (double)b[i] / t1, q = (double)a[i] / t2;
        c1 += p * q;
        c2 += q * q;
        c3 += p * p;
    }
    return 100.0 - 100.0 * (c1 / ((c2 + c3) - c1));
}

size_t patina_cedd_pack(uint8_t out[PATINA_CEDD_PACKED_MAX], const uint8_t h[PATINA_CEDD_DIM])
{
    int p = PATINA_CEDD_DIM - 1, i;
    size_t len;
    if (h[p] == 0) {
        while (p > 0 && h[p - 1] == 0) p--;     /* first index of the final zero run */
    }
    len = (size_t)(p / 2 + 1);
    for (i = 0; i < (int)len; i++)
        out[i] = (uint8_t)(((h[2 * i] << 4) | h[2 * i + 1]) - 128);
    return len;
}

patina_status patina_cedd_unpack(uint8_t h[PATINA_CEDD_DIM], const uint8_t *in, size_t n)
{
    size_t i;
    if (!in || n == 0 || n > PATINA_CEDD_PACKED_MAX)
        return patina__fail(PATINA_E_INVALID, "cedd: packed length %zu not in 1..%d", n,
                            PATINA_CEDD_PACKED_MAX);
    memset(h, 0, PATINA_CEDD_DIM);
    for (i = 0; i < n; i++) {
        int v = (int)in[i] + 128;   /* two's complement byte back to 0..255 */
        v &= 0xff;
        h[2 * i] = (uint8_t)(v >> 4);
        h[2 * i + 1] = (uint8_t)(v & 15);
        if (h[2 * i] > 7 || h[2 * i + 1] > 7)
            return patina__fail(PATINA_E_CORRUPT, "cedd: packed byte %zu holds a bin value > 7", i);
    }
    return PATINA_OK;
}

/* ------------------------------------------------------------ registry entry */

#include <stddef.h>

#include "features/family.h"

typedef struct cedd_params {
    int compact;
} cedd_params_t;

static const patina_optdef_t cedd_opts[] = {
    {"compact", PATINA_OPT_BOOL, 0, 1, "0", NULL,
     "1: compact CEDD (10 colours x 6 edges = 60 bins used of 144)", offsetof(cedd_params_t, compact)},
};

static size_t cedd_dim(const void *params)
{
    (void)params;
    return PATINA_CEDD_DIM;
}

static patina_status cedd_cpu(const void *params, void *out, const patina_image_t *img)
{
    return patina_cedd_extract(out, img, ((const cedd_params_t *)params)->compact);
}

static patina_status cedd_gpu(patina_gpu_t *g, const void *params, void *out,
                              const patina_image_t *imgs, size_t n, patina_status *st)
{
    return patina_gpu_cedd(g, out, imgs, n, ((const cedd_params_t *)params)->compact, st);
}

static patina_status cedd_hybrid(patina_gpu_t *g, patina_pool_t *pool, const void *params,
                                 void *out, const patina_image_t *imgs, size_t n,
                                 patina_status *st)
{
    return patina_gpu_cedd_hybrid(g, pool, cedd_block_row_sums, out, imgs, n,
                                  ((const cedd_params_t *)params)->compact, st);
}

const patina_family_t patina_family_cedd = {
    .name = "cedd",
    .uses = PATINA_CAP_SEARCH,
    .help = "CEDD colour and edge directivity descriptor, 144 bins of 0..7, exactly as LIRE",
    .opts = cedd_opts,
    .nopts = sizeof cedd_opts / sizeof cedd_opts[0],
    .elem = PATINA_ELEM_U8,
    .dim = cedd_dim,
    .check = NULL,
    .distance = PDIST_TANIMOTO,
    .cpu = cedd_cpu,
    .gpu = cedd_gpu,
    .hybrid = cedd_hybrid,
    .gpu_reads_device = 1,
};
