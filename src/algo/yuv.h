/* The one Y'CbCr -> RGB rule of video frames (docs/video.md, "Colour"), for
 * the C path (src/image/video.c) and any GPU path that decodes video frames
 * (a CUDA kernel includes this header; the functions are __host__
 * __device__ there): integers only, no lookup table, so both give the same
 * byte for every input.
 *
 * With Kr, Kb the luma weights of the stream's matrix and Kg = 1 - Kr - Kb:
 *   R = Y + 2(1-Kr) Cr,  G = Y - 2Kb(1-Kb)/Kg Cb - 2Kr(1-Kr)/Kg Cr,  B = Y + 2(1-Kb) Cb
 * on Y in [0, 1] and Cb, Cr in [-1/2, 1/2]. 8-bit samples Y', Cb', Cr' map
 * to those as Y = (Y'-16)/219, C = (C'-128)/224 (limited, "TV" range) or
 * Y = Y'/255, C = (C'-128)/255 (full, "PC"/JPEG range); RGB is 255 x the
 * result. Each product's factor is round(65536 x coefficient), listed in
 * patina_yuv_coefs (tests/test_video.c checks every one against the formula
 * in doubles), and each channel is
 *   clamp(floor((sum + 32768) / 65536), 0, 255)
 * i.e. rounded half up from 16 fractional bits, then clamped. The largest
 * |sum| is below 2^26, so int32 arithmetic is exact.
 * Chroma subsampling is not here: the caller gives the chroma sample of
 * each pixel (video.c: the sample whose area covers it, replicated). */
#ifndef PATINA_ALGO_YUV_H
#define PATINA_ALGO_YUV_H

#include <stdint.h>

#ifdef __CUDACC__
#define YUV_FN static __host__ __device__ __forceinline__
#else
#define YUV_FN static inline
#endif

/* The colour matrices read (ITU-R BT.601, BT.709, BT.2020 non-constant
 * luminance). */
typedef enum patina_yuv_matrix { PATINA_YUV_BT601 = 0, PATINA_YUV_BT709 = 1, PATINA_YUV_BT2020 = 2 } patina_yuv_matrix;

/* One (matrix, range) in 16-bit fixed point: the factors of the formula
 * above, all positive (G's are subtracted), and Y's offset (16 or 0). */
typedef struct patina_yuv_coefs {
    int32_t y, rv, gu, gv, bu, yoff;
} patina_yuv_coefs_t;

/* Kr, Kb: BT.601 0.299, 0.114; BT.709 0.2126, 0.0722; BT.2020 0.2627, 0.0593. */
YUV_FN patina_yuv_coefs_t patina_yuv_coefs(patina_yuv_matrix m, int full_range)
{
    patina_yuv_coefs_t c;
    if (full_range) {
        c.y = 65536;   /* 1 */
        c.yoff = 0;
        if (m == PATINA_YUV_BT709) { c.rv = 103206; c.gu = 12276; c.gv = 30679; c.bu = 121609; }
        else if (m == PATINA_YUV_BT2020) { c.rv = 96639; c.gu = 10784; c.gv = 37444; c.bu = 123299; }
        else { c.rv = 91881; c.gu = 22553; c.gv = 46802; c.bu = 116130; }
    } else {
        c.y = 76309;   /* 255/219 */
        c.yoff = 16;   /* chroma factors carry 255/224 */
        if (m == PATINA_YUV_BT709) { c.rv = 117489; c.gu = 13975; c.gv = 34925; c.bu = 138438; }
        else if (m == PATINA_YUV_BT2020) { c.rv = 110014; c.gu = 12277; c.gv = 42626; c.bu = 140363; }
        else { c.rv = 104597; c.gu = 25675; c.gv = 53279; c.bu = 132201; }
    }
    return c;
}

/* floor((acc + 2^15) / 2^16) clamped to 0..255, without shifting a
 * negative number. */
YUV_FN uint8_t patina_yuv_clamp(int32_t acc)
{
    int32_t r = acc + 32768;
    if (r < 0) return 0;
    r >>= 16;
    return (uint8_t)(r > 255 ? 255 : r);
}

/* The formula in two halves, so that a loop computes each chroma sample's
 * terms once for the pixels that share it: the chroma terms of (Cb', Cr')
 * -> t[0..2] (R, G, B), then a pixel's Y' with them -> rgb[0..2]. The sums
 * are the same, so the bytes are. */
YUV_FN void patina_yuv_chroma(const patina_yuv_coefs_t *c, unsigned cb, unsigned cr, int32_t *t)
{
    int32_t u = (int32_t)cb - 128, v = (int32_t)cr - 128;
    t[0] = c->rv * v;
    t[1] = -c->gu * u - c->gv * v;
    t[2] = c->bu * u;
}

YUV_FN void patina_yuv_pixel(const patina_yuv_coefs_t *c, unsigned y, const int32_t *t, uint8_t *rgb)
{
    int32_t yy = c->y * ((int32_t)y - c->yoff);
    rgb[0] = patina_yuv_clamp(yy + t[0]);
    rgb[1] = patina_yuv_clamp(yy + t[1]);
    rgb[2] = patina_yuv_clamp(yy + t[2]);
}

/* One pixel: 8-bit Y', Cb', Cr' -> rgb[0..2]. */
YUV_FN void patina_yuv_to_rgb(const patina_yuv_coefs_t *c, unsigned y, unsigned cb, unsigned cr, uint8_t *rgb)
{
    int32_t t[3];
    patina_yuv_chroma(c, cb, cr, t);
    patina_yuv_pixel(c, y, t, rgb);
}

#endif
