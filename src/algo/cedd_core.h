/* CEDD per-block and per-image arithmetic, shared verbatim by the C
 * reference (src/features/cedd.c), the hybrid CPU stage and the CUDA kernels
 * (src/gpu/cedd.cu). This header *is* the reference for everything after the
 * block sums: one source, so CPU and GPU cannot drift.
 *
 * It follows docs/cedd-spec.md (LIRE's CEDD, commit 5fcd0a3) operation
 * for operation. Exactness rules (spec §15): binary64 everywhere a double
 * appears, no FMA contraction (-ffp-contract=off, nvcc --fmad=false),
 * expressions evaluated in the written order, truncation by (int) casts on
 * non-negative values.
 *
 * Not here: pixel access and block sums (they differ per implementation in
 * memory layout and parallel schedule, never in the order of the additions),
 * and the accumulation over blocks, which every implementation performs per
 * bin in block raster order. */
#ifndef PATINA_CEDD_CORE_H
#define PATINA_CEDD_CORE_H

#include <stdint.h>
#ifndef __CUDACC__
#include <math.h>
#endif

#ifdef __CUDACC__
#define CEDD_FN static __device__ __forceinline__
/* constexpr: the compiler sees the values, so unrolled loops index the
 * fuzzy tables with constants and the membership arrays stay in registers
 * (with __constant__ they went to local memory). Same literals, same bits. */
#define CEDD_TABLE static constexpr __device__
#else
#define CEDD_FN static inline
#define CEDD_TABLE static const
#endif

#define CEDD_BINS 144
#define CEDD_T0 14.0
#define CEDD_T1 0.68
#define CEDD_T2 0.98
#define CEDD_T3 0.98

/* Block grid of an image (spec §3). nbx*nby blocks of sx*sy pixels; the
 * scanned region is [0, nbx*sx) x [0, nby*sy), the rest is ignored. */
typedef struct cedd_geom {
    int nbx, nby;       /* blocks per row / per column (0 when W < 2 or H < 2) */
    int sx, sy;         /* block width / height in pixels, even, >= 2 */
    double quad_factor; /* 4.0 / (sx*sy), computed in double */
} cedd_geom_t;

/* The sums of one block, in the order the CPU stage hands them to the GPU
 * stage in the hybrid pipeline: 48 bytes a block, 76.8 KB for 1600 blocks.
 * q[k]: sequential double sum of Y over quadrant k (0 TL, 1 TR, 2 BL, 3 BR),
 * row-major within the quadrant. rgb[c]: integer sum of channel c over the
 * whole block. */
typedef struct cedd_block {
    double q[4];
    uint32_t rgb[3];
    uint32_t pad_;
} cedd_block_t;

/* What one block contributes (spec §4–§8): its edge categories as a bit mask
 * (bit e set for e in the block's list, e = 0 non-edge .. 5 135°) and its
 * 24-bin (or, compact, 10-bin) fuzzy colour histogram. */
typedef struct cedd_contrib {
    double colour[24];
    uint32_t edges;
} cedd_contrib_t;

/* ----------------------------------------------------------------- geometry */

/* Returns the grid for a W x H image; nbx = nby = 0 when W < 2 or H < 2. */
CEDD_FN cedd_geom_t cedd_geometry(int w, int h)
{
    cedd_geom_t g;
    int m = w < h ? w : h;
    if (w < 2 || h < 2) {
        g.nbx = g.nby = 0;
        g.sx = g.sy = 2;
    } else if (m >= 40) {
        int n = m >= 80 ? 40 : 20;
        g.sx = w / n;
        g.sy = h / n;
        if (g.sx % 2 != 0) g.sx -= 1;
        if (g.sy % 2 != 0) g.sy -= 1;
        g.nbx = g.nby = n;
    } else {                        /* "no grid": every 2x2 block */
        g.sx = g.sy = 2;
        g.nbx = w / 2;
        g.nby = h / 2;
    }
    g.quad_factor = 4.0 / (double)(g.sx * g.sy);
    return g;
}

/* Per-pixel luminance, exactly (0.114*b + 0.587*g) + 0.299*r (spec §2), from
 * channel values already converted to double (the CUDA kernel converts
 * 8-bit values exactly without the slow 64-bit conversion unit). */
CEDD_FN double cedd_luma_d(double r, double g, double b)
{
    return (0.114 * b + 0.587 * g) + 0.299 * r;
}

CEDD_FN double cedd_luma(int r, int g, int b)
{
    return cedd_luma_d((double)r, (double)g, (double)b);
}

/* ---------------------------------------------------------- texture (§4) */

/* Edge categories of a block from its quadrant sums, as a bit mask. */
CEDD_FN uint32_t cedd_edges(const double q[4], double quad_factor)
{
    const double s = 1.4142135623730951; /* Math.sqrt(2), correctly rounded */
    double a1 = (double)(int64_t)(q[0] * quad_factor);
    double a2 = (double)(int64_t)(q[1] * quad_factor);
    double a3 = (double)(int64_t)(q[2] * quad_factor);
    double a4 = (double)(int64_t)(q[3] * quad_factor);
    double m[5], mx;
    uint32_t mask = 0;
    int k;

    m[0] = fabs(((a1 * 2.0 + a2 * -2.0) + a3 * -2.0) + a4 * 2.0);
    m[1] = fabs(((a1 * 1.0 + a2 * 1.0) + a3 * -1.0) + a4 * -1.0);
    m[2] = fabs(((a1 * 1.0 + a2 * -1.0) + a3 * 1.0) + a4 * -1.0);
    m[3] = fabs(((a1 * s + a2 * 0.0) + a3 * 0.0) + a4 * -s);
    m[4] = fabs(((a1 * 0.0 + a2 * s) + a3 * -s) + a4 * 0.0);

    mx = m[0];
    for (k = 1; k < 5; k++)
        if (m[k] > mx) mx = m[k];
    if (mx < CEDD_T0)
        return 1u;                                  /* {0}: non-edge */
    if (m[0] / mx > CEDD_T1) mask |= 1u << 1;
    if (m[1] / mx > CEDD_T2) mask |= 1u << 2;
    if (m[2] / mx > CEDD_T2) mask |= 1u << 3;
    if (m[3] / mx > CEDD_T3) mask |= 1u << 4;
    if (m[4] / mx > CEDD_T3) mask |= 1u << 5;
    return mask;
}

/* ------------------------------------------------------------ colour (§5–8) */

/* Trapezoid membership (a,b,c,d), spec §7; the falling edge is (x-c)/(c-d)+1. */
CEDD_FN double cedd_trapezoid(double x, double a, double b, double c, double d)
{
    if (b <= x && x <= c) return 1.0;
    if (a <= x && x < b) return (x - a) / (b - a);
    if (c < x && x <= d) return (x - c) / (c - d) + 1.0;
    return 0.0;
}

CEDD_FN double cedd_min(double a, double b) { return a < b ? a : b; }

CEDD_TABLE double cedd_hue_trap[8][4] = {
    {0, 0, 5, 10},       {5, 10, 35, 50},     {35, 50, 70, 85},    {70, 85, 150, 165},
    {150, 165, 195, 205}, {195, 205, 265, 280}, {265, 280, 315, 330}, {315, 330, 360, 360}};
CEDD_TABLE double cedd_sat_trap[2][4] = {{0, 0, 10, 75}, {10, 75, 255, 255}};
CEDD_TABLE double cedd_val_trap[3][4] = {{0, 0, 10, 75}, {10, 75, 180, 220}, {180, 220, 255, 255}};
CEDD_TABLE double cedd_sv24_trap[2][4] = {{0, 0, 68, 188}, {68, 188, 255, 255}};

/* The 48 rules of Fuzzy10Bin, (hue, sat, val, out), in evaluation order. */
CEDD_TABLE unsigned char cedd_rules10[48][4] = {
    {0,0,0,2},{0,1,0,2},{0,0,2,0},{0,0,1,1}, {1,0,0,2},{1,1,0,2},{1,0,2,0},{1,0,1,1},
    {2,0,0,2},{2,1,0,2},{2,0,2,0},{2,0,1,1}, {3,0,0,2},{3,1,0,2},{3,0,2,0},{3,0,1,1},
    {4,0,0,2},{4,1,0,2},{4,0,2,0},{4,0,1,1}, {5,0,0,2},{5,1,0,2},{5,0,2,0},{5,0,1,1},
    {6,0,0,2},{6,1,0,2},{6,0,2,0},{6,0,1,1}, {7,0,0,2},{7,1,0,2},{7,0,2,0},{7,0,1,1},
    {0,1,1,3},{0,1,2,3},{1,1,1,4},{1,1,2,4}, {2,1,1,5},{2,1,2,5},{3,1,1,6},{3,1,2,6},
    {4,1,1,7},{4,1,2,7},{5,1,1,8},{5,1,2,8}, {6,1,1,9},{6,1,2,9},{7,1,1,3},{7,1,2,3}};

/* Block mean RGB (integer floor division) -> HSV ints (spec §6). */
CEDD_FN void cedd_hsv(int hsv[3], int r, int g, int b)
{
    double dr = r, dg = g, db = b;
    double mx = dr, mn = dr, d;
    if (dg > mx) mx = dg;
    if (db > mx) mx = db;
    if (dg < mn) mn = dg;
    if (db < mn) mn = db;
    hsv[2] = (int)mx;
    hsv[1] = mx == 0.0 ? 0 : (int)(255.0 - 255.0 * (mn / mx));
    if (mx == mn) {
        hsv[0] = 0;
        return;
    }
    d = mx - mn;
    if (mx == dr && g >= b)
        hsv[0] = (int)((double)(60 * (g - b)) / d);
    else if (mx == dr)
        hsv[0] = (int)(359.0 + (double)(60 * (g - b)) / d);
    else if (mx == dg)
        hsv[0] = (int)(119.0 + (double)(60 * (b - r)) / d);
    else
        hsv[0] = (int)(239.0 + (double)(60 * (r - g)) / d);
}

/* Fuzzy10Bin, method 2 (spec §7): f10[0..9] from H, S, V. */
CEDD_FN void cedd_fuzzy10(double f10[10], int h, int s, int v)
{
    double mh[8], ms[2], mv[3];
    int k;
    for (k = 0; k < 8; k++)
        mh[k] = cedd_trapezoid((double)h, cedd_hue_trap[k][0], cedd_hue_trap[k][1],
                               cedd_hue_trap[k][2], cedd_hue_trap[k][3]);
    for (k = 0; k < 2; k++)
        ms[k] = cedd_trapezoid((double)s, cedd_sat_trap[k][0], cedd_sat_trap[k][1],
                               cedd_sat_trap[k][2], cedd_sat_trap[k][3]);
    for (k = 0; k < 3; k++)
        mv[k] = cedd_trapezoid((double)v, cedd_val_trap[k][0], cedd_val_trap[k][1],
                               cedd_val_trap[k][2], cedd_val_trap[k][3]);
    for (k = 0; k < 10; k++)
        f10[k] = 0.0;
    for (k = 0; k < 48; k++) {
        double a = mh[cedd_rules10[k][0]], b = ms[cedd_rules10[k][1]], c = mv[cedd_rules10[k][2]];
        if (a > 0.0 && b > 0.0 && c > 0.0)
            f10[cedd_rules10[k][3]] += cedd_min(a, cedd_min(b, c));
    }
}

/* Fuzzy24Bin, method 2 (spec §8): f24[0..23] from f10 and S, V. */
CEDD_FN void cedd_fuzzy24(double f24[24], const double f10[10], int s, int v)
{
    double s0 = cedd_trapezoid((double)s, cedd_sv24_trap[0][0], cedd_sv24_trap[0][1],
                               cedd_sv24_trap[0][2], cedd_sv24_trap[0][3]);
    double s1 = cedd_trapezoid((double)s, cedd_sv24_trap[1][0], cedd_sv24_trap[1][1],
                               cedd_sv24_trap[1][2], cedd_sv24_trap[1][3]);
    double v0 = cedd_trapezoid((double)v, cedd_sv24_trap[0][0], cedd_sv24_trap[0][1],
                               cedd_sv24_trap[0][2], cedd_sv24_trap[0][3]);
    double v1 = cedd_trapezoid((double)v, cedd_sv24_trap[1][0], cedd_sv24_trap[1][1],
                               cedd_sv24_trap[1][2], cedd_sv24_trap[1][3]);
    double rk[3] = {0.0, 0.0, 0.0};
    double t = 0.0;
    int i, k;
    for (i = 3; i < 10; i++)
        t += f10[i];
    if (t > 0.0) {
        if (s1 > 0.0 && v1 > 0.0) rk[1] += cedd_min(s1, v1);
        if (s0 > 0.0 && v0 > 0.0) rk[2] += cedd_min(s0, v0);
        if (s0 > 0.0 && v1 > 0.0) rk[0] += cedd_min(s0, v1);
        if (s1 > 0.0 && v0 > 0.0) rk[2] += cedd_min(s1, v0);
    }
    f24[0] = f10[0];
    f24[1] = f10[1];
    f24[2] = f10[2];
    for (i = 3; i < 10; i++)
        for (k = 0; k < 3; k++)
            f24[3 * (i - 2) + k] = f10[i] * rk[k];
}

/* Everything one block contributes, from its sums (spec §4–§8). `pixels` is
 * sx*sy. compact: colour[0..9] is the 10-bin histogram, colour[10..] = 0. */
CEDD_FN cedd_contrib_t cedd_block_contrib(const cedd_block_t *blk, const cedd_geom_t *g,
                                          int compact)
{
    cedd_contrib_t out;
    uint32_t pixels = (uint32_t)g->sx * (uint32_t)g->sy;
    int hsv[3];
    double f10[10];
    int k;
    out.edges = cedd_edges(blk->q, g->quad_factor);
    cedd_hsv(hsv, (int)(blk->rgb[0] / pixels), (int)(blk->rgb[1] / pixels),
             (int)(blk->rgb[2] / pixels));
    cedd_fuzzy10(f10, hsv[0], hsv[1], hsv[2]);
    if (compact) {
        for (k = 0; k < 10; k++) out.colour[k] = f10[k];
        for (k = 10; k < 24; k++) out.colour[k] = 0.0;
    } else {
        cedd_fuzzy24(out.colour, f10, hsv[1], hsv[2]);
    }
    return out;
}

/* What a block adds to histogram bin `bin` (0.0 when nothing): spec §9/§14.
 * Adding 0.0 to a non-negative running sum changes no bit, so every
 * implementation may add this for every block. */
CEDD_FN double cedd_bin_term(const cedd_contrib_t *c, int bin, int compact)
{
    int per = compact ? 10 : 24;
    int e = bin / per, col = bin % per;
    if (e > 5 || !(c->edges & (1u << e))) return 0.0;
    return c->colour[col] > 0.0 ? c->colour[col] : 0.0;
}

/* ------------------------------------------------------- quantisation (§11) */

CEDD_TABLE double cedd_qtab[4][8] = {
    {180.19686541079636, 23730.024499150866, 61457.152912541605, 113918.55437576842,
     179122.46400035513, 260980.3325940354, 341795.93301552488, 554729.98648386425},
    {209.25176965926232, 22490.5872862417345, 60250.8935141849988, 120705.788057580583,
     181128.08709063051, 234132.081356900555, 325660.617733105708, 520702.175858657472},
    {405.4642173212585, 4877.9763319071481, 10882.170090625908, 18167.239081219657,
     27043.385568785292, 38129.413201299016, 52675.221316293857, 79555.402607004813},
    {968.88475977695578, 10725.159033657819, 24161.205360376698, 41555.917344385321,
     62895.628446402261, 93066.271379694881, 136976.13317822068, 262897.86056221306}};

/* Which quantisation table bin i uses. */
CEDD_FN int cedd_qtable_of(int bin, int compact)
{
    if (compact) return bin < 10 ? 0 : bin < 20 ? 1 : bin < 40 ? 2 : 3;
    return bin < 24 ? 0 : bin < 48 ? 1 : bin < 96 ? 2 : 3;
}

/* Nearest centre by |v - L/1e6|, strict <, ties to the lower index; NaN -> 0. */
CEDD_FN uint8_t cedd_quantise(double v, int table)
{
    double best = 1.0;
    uint8_t q = 0;
    int j;
    for (j = 0; j < 8; j++) {
        double d = fabs(v - cedd_qtab[table][j] / 1000000.0);
        if (d < best) {
            best = d;
            q = (uint8_t)j;
        }
    }
    return q;
}

/* Normalise (sequential sum, true division) and quantise a 144-bin histogram
 * (spec §10–§11). Zero blocks give Sum = 0, NaNs, and an all-zero result. */
CEDD_FN void cedd_finish(uint8_t out[CEDD_BINS], const double hist[CEDD_BINS], int compact)
{
    double sum = 0.0;
    int i;
    for (i = 0; i < CEDD_BINS; i++)
        sum += hist[i];
    for (i = 0; i < CEDD_BINS; i++)
        out[i] = cedd_quantise(hist[i] / sum, cedd_qtable_of(i, compact));
}

#endif
