/* The integer arithmetic of a JPEG decode after entropy decoding, as
 * libjpeg-turbo does it for the CPU path (src/image/jpeg.c: tjDecompress2 to
 * RGB or CMYK, accurate integer IDCT, fancy upsampling, no DCT scaling),
 * shared verbatim by the C reference (src/image/jpeg_exact.c) and the CUDA
 * kernels (src/gpu/jpeg_exact.cu): one source per formula, so CPU and GPU
 * cannot drift. The constants are libjpeg's (jidctint.c, jdcolor.c); the
 * code is ours.
 *
 *   dequantise + "islow" IDCT  one 8x8 block of coefficients (natural order)
 *                              times its quantisation table -> 8x8 samples
 *   upsampling                 one component plane -> the sample at an output
 *                              pixel: full size, h2v1 / h1v2 / h2v2 "fancy"
 *                              triangle filters with libjpeg's biases, or
 *                              replication (any other integral ratio, and
 *                              h2v1/h2v2 when the plane is <= 2 samples wide)
 *   colour                     YCbCr -> RGB and YCCK -> CMYK with libjpeg's
 *                              fixed-point tables written as formulas, grey ->
 *                              r = g = b, CMYK -> RGB as src/image/jpeg.c does
 *
 * Exact range. libjpeg-turbo's C IDCT computes in 64-bit integers; its SIMD
 * versions (what the library runs on x86-64 and ARM) compute in 16- and
 * 32-bit lanes and agree with the C code as long as nothing overflows. So a
 * block is decoded here in 32-bit integers only inside bounds that keep every
 * one of those versions exact (no 32-bit sum can overflow, no 16-bit packing
 * saturates, no output needs the range table's wraparound):
 *   |coefficient * quantiser| <= JX_SAFE,  |pass-1 output| <= JX_SAFE,
 *   pass-2 output (before the +128 and clamping) in [-512, 511].
 * JX_SAFE = 12000: one 1-D pass multiplies its inputs by fixed-point
 * constants whose absolute values add up to at most 178219 on any path (the
 * worst output, o[1] = t11 + t2: 16384 + 24003 even, 25172 + 2*20995 +
 * 2*16069 + 4*9633 odd), and 178219 * 12000 + 2^17 < 2^31. A block outside
 * these bounds makes jx_idct return 0: the image is "not exact here" and goes
 * to libjpeg-turbo itself. Data from any 8-bit encoder stays far inside
 * (|dequantised| <= ~2200, |pass-1| <= ~6000, outputs within [-140, 140]);
 * only crafted or damaged coefficients leave it. */
#ifndef PATINA_JPEG_EXACT_CORE_H
#define PATINA_JPEG_EXACT_CORE_H

#include <stdint.h>

#ifdef __CUDACC__
#define JX_FN static __host__ __device__ __forceinline__
#else
#define JX_FN static inline
#endif

/* Upsampling methods of one component (libjpeg-turbo's jdsample.c choice). */
enum {
    JX_UP_COPY = 0, /* full size */
    JX_UP_H2V1 = 1, /* 2:1 horizontal fancy (plane wider than 2) */
    JX_UP_H1V2 = 2, /* 2:1 vertical fancy */
    JX_UP_H2V2 = 3, /* 2:1 both fancy (plane wider than 2) */
    JX_UP_REPL = 4  /* replication by (rh, rv): other integral ratios, narrow planes */
};

/* Colour spaces of the file and what the CPU path makes of them. */
enum {
    JX_CS_GREY = 1, /* 1 component: r = g = b */
    JX_CS_YCC = 2,  /* YCbCr -> RGB */
    JX_CS_RGB = 3,  /* stored RGB: copied */
    JX_CS_CMYK = 4, /* CMYK -> RGB (naive formula, Adobe inversion) */
    JX_CS_YCCK = 5  /* YCCK -> CMYK (libjpeg) -> RGB as CMYK */
};

#define JX_SAFE 12000

/* jidctint.c's multipliers, FIX(x) = round(x * 2^13). */
#define JX_F0_298 2446
#define JX_F0_390 3196
#define JX_F0_541 4433
#define JX_F0_765 6270
#define JX_F0_899 7373
#define JX_F1_175 9633
#define JX_F1_501 12299
#define JX_F1_847 15137
#define JX_F1_961 16069
#define JX_F2_053 16819
#define JX_F2_562 20995
#define JX_F3_072 25172

/* One 1-D pass of the islow IDCT on in[0], in[s], ..., in[7s] (already
 * dequantised for pass 1), results before descaling in o[0..7]. Inputs are
 * bounded by JX_SAFE, so every sum fits in 32 bits (see above). */
JX_FN void jx_idct_1d(const int32_t *in, int s, int32_t o[8])
{
    int32_t z1, z2, z3, z4, z5, t0, t1, t2, t3, t10, t11, t12, t13;
    /* even part */
    z2 = in[2 * s];
    z3 = in[6 * s];
    z1 = (z2 + z3) * JX_F0_541;
    t2 = z1 - z3 * JX_F1_847;
    t3 = z1 + z2 * JX_F0_765;
    t0 = (in[0] + in[4 * s]) * 8192;
    t1 = (in[0] - in[4 * s]) * 8192;
    t10 = t0 + t3;
    t13 = t0 - t3;
    t11 = t1 + t2;
    t12 = t1 - t2;
    /* odd part */
    t0 = in[7 * s];
    t1 = in[5 * s];
    t2 = in[3 * s];
    t3 = in[1 * s];
    z1 = t0 + t3;
    z2 = t1 + t2;
    z3 = t0 + t2;
    z4 = t1 + t3;
    z5 = (z3 + z4) * JX_F1_175;
    t0 *= JX_F0_298;
    t1 *= JX_F2_053;
    t2 *= JX_F3_072;
    t3 *= JX_F1_501;
    z1 *= -JX_F0_899;
    z2 *= -JX_F2_562;
    z3 = z3 * -JX_F1_961 + z5;
    z4 = z4 * -JX_F0_390 + z5;
    t0 += z1 + z3;
    t1 += z2 + z4;
    t2 += z2 + z3;
    t3 += z1 + z4;
    o[0] = t10 + t3;
    o[7] = t10 - t3;
    o[1] = t11 + t2;
    o[6] = t11 - t2;
    o[2] = t12 + t1;
    o[5] = t12 - t1;
    o[3] = t13 + t0;
    o[4] = t13 - t0;
}

/* libjpeg's post-IDCT range limit: index v & 1023 of a table that is v + 128
 * for v in [-128, 127], 255 above up to 511, 0 below down to -512 (and wraps
 * beyond, which the exact range excludes). */
JX_FN uint8_t jx_range(int32_t v)
{
    int32_t j = v & 1023;
    return (uint8_t)(j < 128 ? j + 128 : j < 512 ? 255 : j < 896 ? 0 : j - 896);
}

/* Dequantises and inverse-transforms one block: coefficient k (natural
 * order) at coef[k * cs], q (64) its quantisation table; writes 8 rows of 8
 * samples at out + r * pitch. Returns 1, or 0 when the block leaves the exact
 * range (out is then unspecified). */
JX_FN int jx_idct(const int16_t *coef, int cs, const uint16_t *q, uint8_t *out, int pitch)
{
    int32_t ws[64], z[8], o[8];
    int c, r, k;
    /* pass 1: columns, results scaled by 2^2 (PASS1_BITS) */
    for (c = 0; c < 8; c++) {
        int ac = 0;
        for (k = 0; k < 8; k++) {
            int32_t v = (int32_t)coef[(k * 8 + c) * cs] * (int32_t)q[k * 8 + c];
            if (v > JX_SAFE || v < -JX_SAFE) return 0;
            z[k] = v;
            ac |= k > 0 && v != 0;
        }
        if (!ac) { /* libjpeg's shortcut, the same values as the full pass: dc << 2 */
            if (z[0] * 4 > JX_SAFE || z[0] * 4 < -JX_SAFE) return 0;
            for (k = 0; k < 8; k++) ws[k * 8 + c] = z[0] * 4;
            continue;
        }
        jx_idct_1d(z, 1, o);
        for (k = 0; k < 8; k++) {
            int32_t v = (o[k] + (1 << 10)) >> 11; /* DESCALE by CONST_BITS - PASS1_BITS */
            if (v > JX_SAFE || v < -JX_SAFE) return 0;
            ws[k * 8 + c] = v;
        }
    }
    /* pass 2: rows, descaled by 2^(13 + 2 + 3) */
    for (r = 0; r < 8; r++) {
        const int32_t *w = ws + r * 8;
        uint8_t *dst = out + (long)r * pitch;
        jx_idct_1d(w, 1, o);
        for (k = 0; k < 8; k++) {
            int32_t v = (o[k] + (1 << 17)) >> 18;
            if (v > 511 || v < -512) return 0;
            dst[k] = jx_range(v);
        }
    }
    return 1;
}

/* One component's sample at output pixel (x, y): p (dh rows of pitch bytes)
 * is the component's plane, dw x dh its samples (downsampled_width/_height);
 * up a JX_UP_ method, (rh, rv) the replication factors of JX_UP_REPL.
 * Rows above and below the plane repeat its edge rows (libjpeg's context
 * rows); columns are never read past dw - 1. */
JX_FN int jx_upsample(const uint8_t *p, long pitch, int dw, int dh, int up, int rh, int rv, int x, int y)
{
    int i, near, far, bias, a, b, c;
    const uint8_t *r0, *r1;
    switch (up) {
    case JX_UP_COPY:
        return p[(long)y * pitch + x];
    case JX_UP_H2V1:
        r0 = p + (long)y * pitch;
        i = x >> 1;
        if (x & 1) return i == dw - 1 ? r0[i] : (3 * r0[i] + r0[i + 1] + 2) >> 2;
        return i == 0 ? r0[0] : (3 * r0[i] + r0[i - 1] + 1) >> 2;
    case JX_UP_H1V2:
        i = y >> 1;
        near = p[(long)i * pitch + x];
        if (y & 1) far = p[(long)(i + 1 < dh ? i + 1 : dh - 1) * pitch + x], bias = 2;
        else far = p[(long)(i > 0 ? i - 1 : 0) * pitch + x], bias = 1;
        return (3 * near + far + bias) >> 2;
    case JX_UP_H2V2:
        i = y >> 1;
        r0 = p + (long)i * pitch;
        r1 = p + (long)((y & 1) ? (i + 1 < dh ? i + 1 : dh - 1) : (i > 0 ? i - 1 : 0)) * pitch;
        i = x >> 1;
        a = 3 * r0[i] + r1[i]; /* this column's vertical sum */
        if (x & 1) {
            if (i == dw - 1) return (a * 4 + 7) >> 4;
            b = 3 * r0[i + 1] + r1[i + 1];
            return (a * 3 + b + 7) >> 4;
        }
        if (i == 0) return (a * 4 + 8) >> 4;
        c = 3 * r0[i - 1] + r1[i - 1];
        return (a * 3 + c + 8) >> 4;
    default: /* JX_UP_REPL */
        return p[(long)(y / rv) * pitch + x / rh];
    }
}

JX_FN uint8_t jx_clamp(int v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

/* jdcolor.c's tables as formulas (SCALEBITS 16, ONE_HALF 2^15):
 * Cr_r = (FIX(1.40200) x + 1/2) >> 16, Cb_b = (FIX(1.77200) x + 1/2) >> 16,
 * green = (-FIX(0.34414) cb' + 1/2 - FIX(0.71414) cr') >> 16, with x = c - 128.
 * FIX(1.40200) = 91881, FIX(1.77200) = 116130, FIX(0.71414) = 46802,
 * FIX(0.34414) = 22554. */
JX_FN void jx_ycc_terms(int cb, int cr, int *rr, int *gg, int *bb)
{
    int xb = cb - 128, xr = cr - 128;
    *rr = (91881 * xr + 32768) >> 16;
    *bb = (116130 * xb + 32768) >> 16;
    *gg = (-22554 * xb + 32768 - 46802 * xr) >> 16;
}

JX_FN void jx_ycc_rgb(int y, int cb, int cr, uint8_t *rgb)
{
    int rr, gg, bb;
    jx_ycc_terms(cb, cr, &rr, &gg, &bb);
    rgb[0] = jx_clamp(y + rr);
    rgb[1] = jx_clamp(y + gg);
    rgb[2] = jx_clamp(y + bb);
}

/* CMYK as libjpeg gives it (for YCCK, after its conversion) to RGB, as
 * src/image/jpeg.c's cmyk_to_rgb: with the Adobe marker the stored values are
 * 255 - ink and R = round(C K / 255); without it R = round((255-C)(255-K)/255). */
JX_FN void jx_cmyk_rgb(int c, int m, int y, int k, int adobe, uint8_t *rgb)
{
    if (!adobe) c = 255 - c, m = 255 - m, y = 255 - y, k = 255 - k;
    rgb[0] = (uint8_t)((c * k + 127) / 255);
    rgb[1] = (uint8_t)((m * k + 127) / 255);
    rgb[2] = (uint8_t)((y * k + 127) / 255);
}

/* One output pixel from the components' samples s[0..3] in colour space cs. */
JX_FN void jx_pixel(int cs, int adobe, const int *s, uint8_t *rgb)
{
    int rr, gg, bb;
    switch (cs) {
    case JX_CS_GREY:
        rgb[0] = rgb[1] = rgb[2] = (uint8_t)s[0];
        break;
    case JX_CS_YCC:
        jx_ycc_rgb(s[0], s[1], s[2], rgb);
        break;
    case JX_CS_RGB:
        rgb[0] = (uint8_t)s[0], rgb[1] = (uint8_t)s[1], rgb[2] = (uint8_t)s[2];
        break;
    case JX_CS_CMYK:
        jx_cmyk_rgb(s[0], s[1], s[2], s[3], adobe, rgb);
        break;
    default: /* JX_CS_YCCK: libjpeg's ycck_cmyk_convert, then as CMYK */
        jx_ycc_terms(s[1], s[2], &rr, &gg, &bb);
        jx_cmyk_rgb(jx_clamp(255 - (s[0] + rr)), jx_clamp(255 - (s[0] + gg)), jx_clamp(255 - (s[0] + bb)), s[3],
                    adobe, rgb);
        break;
    }
}

#endif
