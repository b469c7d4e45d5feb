/* The rootsift family on the GPU (docs/rootsift.md "GPU"): VLFeat 0.9.21's
 * SIFT exactly as the CPU path runs it (src/features/rootsift.c), the
 * budget strongest by |DoG peak| in VLFeat's tie order, RootSIFT, the
 * record. Batches of images of any sizes; every stage on the device.
 *
 * Identity with the CPU. The operations are VLFeat's, in its order and its
 * types (float where VLFeat computes in float, double where it promotes),
 * written from VLFeat's definitions (vl/sift.c, vl/imopv.c, vl/mathop.h);
 * the build passes --fmad=false, so no multiply-add is contracted, and
 * float division and sqrt are IEEE (the defaults). Facts this rests on:
 *   - Debian's libvl is built without its SSE2 code (no _sse2 symbol, and
 *     vl_imconvcol_vf has no dispatch): the column convolution is the
 *     generic one, acc += v * c over the taps in order, clamped edges; gcc
 *     vectorised the products but adds them one by one in that order;
 *   - the Gaussian taps, fast_expn's table and the level sigmas use the
 *     host's exp/pow: the features side computes them (the conf);
 *   - vl_fast_atan2_f, vl_fast_resqrt_f (the 0x5f3759df guess, two Newton
 *     steps), vl_mod_2pi_f, vl_floor_f/_d are float/int code, reproduced;
 *   - every bin of every histogram (orientations: double; descriptors:
 *     float) is summed by one thread in VLFeat's pixel order (the threads
 *     of a warp compute the pixels' terms, each bin's owner adds them in
 *     order): no atomics on values;
 *   - the keypoints survive the cap by a sort on (|peak| descending, VLFeat
 *     order ascending) where VLFeat order is (octave, the candidate's
 *     raster position (s, y, x), orientation): arrival order never matters.
 * Not provably identical (libm of the device vs the host, used where VLFeat
 * calls libm on values computed per keypoint): a keypoint's sigma =
 * sigma0 2^(sn/S) (device exp2 vs glibc pow, then rounded to float) and the
 * descriptor's sin/cos of the angle (device vs glibc, then used in double
 * and rounded to float). Both differ from the host only when a double lands
 * within an ulp or two of a float rounding boundary.
 *
 * Memory (state PGPU_FAM_ROOTSIFT): one arena from the context's budget,
 * split between the pipeline's slots ("The pipeline" below), each holding
 * a sub-batch: its images' grey levels (computed on the host, 1 byte per
 * pixel; an image decoded on the GPU comes to the host for them first, a
 * copy of 3 bytes per pixel), its records, and per image the area downscale's row pass, the
 * float image, the current octave's S + 3 levels, a temporary level and
 * S + 2 DoG levels (the first octave's size, reused by every octave), the
 * gradients of every octave (the descriptors of the kept features need
 * them after the selection), the candidates of one octave, the keypoints,
 * the sort keys and the kept features. Pinned host staging per slot for
 * the grey levels and the records. */
#include <cuda_runtime.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algo/f16.h"
#include "algo/grey.h"
#include "gpu/context.h"
#include "gpu/warp.cuh"

#define MiB ((size_t)1 << 20)
#define NBO 8
#define NBP 4
#define RS_PI 3.141592653589793
#define RS_EPS_F 1.19209290E-07F
#define RS_EPS_D 2.220446049250313e-16
#define RS_KP_IDX_BITS 24

/* ------------------------------------------------------------ layout */

struct rs_ctr {
    unsigned cand, kp, feat, over; /* candidates (this octave), keypoints, kept features, overflow flag */
    unsigned more;                 /* late orientations: the ranks past the first round are needed (k_more) */
};

struct rs_kp {
    double peak;    /* |interpolated DoG| */
    double ang[4];  /* orientations */
    float x, y, sigma; /* VlSiftKeypoint's (octave 0 = detection image pixels) */
    int ix, iy, is, o, nang;
};

struct rs_sortkey {
    double peak;
    unsigned long long seq; /* (octave index, candidate key, keypoint index) */
};

struct rs_item {
    size_t off_grey, off_tmp, off_img, off_lev, off_temp, off_dog, off_cand, off_kp, off_sort, off_feat, off_rec;
    size_t off_grad[PGPU_RS_MAXOCT];
    size_t plane;              /* floats of one level: w0 h0 */
    int W, H, w, h, O;
    int w0, h0;                /* first octave */
    unsigned cand_cap, kp_cap;
    double sx, sy;
    float down;
};

struct rs_kconf {
    int S, omin, budget, quant, w0;
    double tp, te, sigma0;
    float qscale;
    size_t rec_bytes;
};

/* Octave dims: VL_SHIFT_LEFT(width, -o). */
__host__ __device__ static inline int oct_dim(int v, int o) { return o >= 0 ? v >> o : v << -o; }

/* ------------------------------------------------------------ VLFeat's math */

__device__ static inline long vfloor_d(double x)
{
    long xi = (long)x;
    if (x >= 0 || (double)xi == x) return xi;
    return xi - 1;
}

__device__ static inline long vfloor_f(float x)
{
    long xi = (long)x;
    if (x >= 0 || (float)xi == x) return xi;
    return xi - 1;
}

__device__ static inline float vmod2pi_f(float x)
{
    while (x > (float)(2 * RS_PI)) x -= (float)(2 * RS_PI);
    while (x < 0.0F) x += (float)(2 * RS_PI);
    return x;
}

__device__ static inline float vatan2_f(float y, float x)
{
    float angle, r;
    const float c3 = 0.1821F, c1 = 0.9675F;
    const float abs_y = fabsf(y) + RS_EPS_F;
    if (x >= 0) {
        r = (x - abs_y) / (x + abs_y);
        angle = (float)(RS_PI / 4);
    } else {
        r = (x + abs_y) / (abs_y - x);
        angle = (float)(3 * RS_PI / 4);
    }
    angle += (c3 * r * r - c1) * r;
    return (y < 0) ? -angle : angle;
}

__device__ static inline float vresqrt_f(float x)
{
    const float xhalf = 0.5f * x;
    float u = __int_as_float(0x5f3759df - (__float_as_int(x) >> 1));
    u = u * (1.5f - xhalf * u * u);
    u = u * (1.5f - xhalf * u * u);
    return u;
}

__device__ static inline float vsqrt_f(float x) { return ((double)x < 1e-8) ? 0 : x * vresqrt_f(x); }

__device__ static inline double fast_expn(const double *tab, double x)
{
    if (x > 25.0) return 0.0;
    x *= 256 / 25.0;
    const int i = (int)vfloor_d(x);
    const double r = x - i, a = tab[i], b = tab[i + 1];
    return a + r * (b - a);
}

/* ------------------------------------------------------------ input */

/* The float image (w, h) of image z from its grey levels ((H, W) u8, the
 * host's grey_bt601): the grey levels, or area-averaged when downscaled
 * (rows pass here into tmp (H, w), doubles summed in input order, as
 * area_downscale). */
__global__ void k_down_rows(uint8_t *arena, const rs_item *items)
{
    const rs_item &it = items[blockIdx.z];
    const int i = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= it.w || y >= it.H) return;
    const uint8_t *row = arena + it.off_grey + (size_t)y * it.W;
    if (it.w == it.W && it.h == it.H) { /* not downscaled: the grey levels */
        ((float *)(arena + it.off_img))[(size_t)y * it.w + i] = (float)row[i];
        return;
    }
    const double sx = (double)it.W / it.w;
    const double a = i * sx, b = (i + 1) * sx;
    const int k0 = (int)floor(a), k1 = (int)ceil(b) < it.W ? (int)ceil(b) : it.W;
    double acc = 0.0;
    for (int k = k0; k < k1; k++) {
        const double lo = a > k ? a : k, hi = b < k + 1 ? b : k + 1;
        acc += (hi - lo) * row[k];
    }
    ((float *)(arena + it.off_tmp))[(size_t)y * it.w + i] = (float)(acc / sx);
}

__global__ void k_down_cols(uint8_t *arena, const rs_item *items)
{
    const rs_item &it = items[blockIdx.z];
    const int x = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= it.w || j >= it.h || (it.w == it.W && it.h == it.H)) return;
    const float *tmp = (const float *)(arena + it.off_tmp);
    const double sy = (double)it.H / it.h;
    const double a = j * sy, b = (j + 1) * sy;
    const int k0 = (int)floor(a), k1 = (int)ceil(b) < it.H ? (int)ceil(b) : it.H;
    double acc = 0.0;
    for (int k = k0; k < k1; k++) {
        const double lo = a > k ? a : k, hi = b < k + 1 ? b : k + 1;
        acc += (hi - lo) * tmp[(size_t)k * it.w + x];
    }
    ((float *)(arena + it.off_img))[(size_t)j * it.w + x] = (float)(acc / sy);
}

/* Level s_min of the first octave before its smoothing: the image copied
 * (o_min = 0), every 2^o_min-th pixel (o_min > 0), or doubled by
 * copy_and_upsample_rows twice (o_min = -1: rows, then columns of the
 * result; a + b in float, halved). Into level plane 0, or into the
 * temporary level (to_temp) for a smoothing that cannot run in place. */
__global__ void k_first(uint8_t *arena, const rs_item *items, int omin, int to_temp)
{
    const rs_item &it = items[blockIdx.z];
    const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= it.w0 || y >= it.h0) return;
    const float *im = (const float *)(arena + it.off_img);
    float *lev = (float *)(arena + (to_temp ? it.off_temp : it.off_lev));
    float v;
    if (omin == 0) {
        v = im[(size_t)y * it.w + x];
    } else if (omin > 0) {
        v = im[((size_t)y << omin) * it.w + ((size_t)x << omin)];
    } else {
        /* the row pass: r(X, yy) for a source row yy */
        const int xs = x >> 1, ys = y >> 1;
        float r0, r1;
#define RS_UPROW(yy, out)                                                                            \
        do {                                                                                         \
            const float *row_ = im + (size_t)(yy) * it.w;                                            \
            if (xs >= it.w - 1) out = row_[it.w - 1];                                                \
            else if (x & 1) out = (float)(0.5 * (row_[xs] + row_[xs + 1]));                         \
            else out = row_[xs];                                                                     \
        } while (0)
        RS_UPROW(ys, r0);
        if (ys >= it.h - 1) v = r0;
        else if (y & 1) {
            RS_UPROW(ys + 1, r1);
            v = (float)(0.5 * (r0 + r1));
        } else v = r0;
#undef RS_UPROW
    }
    lev[(size_t)y * it.w0 + x] = v;
}

/* ------------------------------------------------------------ scale space */

/* dst = src convolved along columns (vertical) with 2 W + 1 taps, clamped
 * edges: acc = sum_k src[clamp(y - W + k)] * filt[2W - k], k ascending, in
 * float (vl_imconvcol_vf's generic loop). Planes of octave k of each image:
 * src, dst offsets (floats) from the level base. */
__global__ void k_conv_v(uint8_t *arena, const rs_item *items, int oct, int omin, size_t src_off_planes,
                         int src_is_temp, int dst_is_temp, size_t dst_off_planes, const float *filt, int W)
{
    const rs_item &it = items[blockIdx.z];
    if (oct >= it.O) return;
    const int w = oct_dim(it.w, omin + oct), h = oct_dim(it.h, omin + oct);
    const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    const float *src = (const float *)(arena + (src_is_temp ? it.off_temp : it.off_lev)) + src_off_planes * it.plane;
    float *dst = (float *)(arena + (dst_is_temp ? it.off_temp : it.off_lev)) + dst_off_planes * it.plane;
    const float *f = filt + 2 * W;
    float acc = 0.0f;
    for (int k = 0; k <= 2 * W; k++) {
        int p = y - W + k;
        p = p < 0 ? 0 : p > h - 1 ? h - 1 : p;
        acc = __fadd_rn(acc, __fmul_rn(src[(size_t)p * w + x], f[-k]));
    }
    dst[(size_t)y * w + x] = acc;
}

/* The same along rows (horizontal). */
__global__ void k_conv_h(uint8_t *arena, const rs_item *items, int oct, int omin, int src_is_temp,
                         size_t src_off_planes, int dst_is_temp, size_t dst_off_planes, const float *filt, int W)
{
    const rs_item &it = items[blockIdx.z];
    if (oct >= it.O) return;
    const int w = oct_dim(it.w, omin + oct), h = oct_dim(it.h, omin + oct);
    const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    const float *src = (const float *)(arena + (src_is_temp ? it.off_temp : it.off_lev)) + src_off_planes * it.plane +
                       (size_t)y * w;
    float *dst = (float *)(arena + (dst_is_temp ? it.off_temp : it.off_lev)) + dst_off_planes * it.plane;
    const float *f = filt + 2 * W;
    float acc = 0.0f;
    for (int k = 0; k <= 2 * W; k++) {
        int p = x - W + k;
        p = p < 0 ? 0 : p > w - 1 ? w - 1 : p;
        acc = __fadd_rn(acc, __fmul_rn(src[p], f[-k]));
    }
    dst[(size_t)y * w + x] = acc;
}

/* Both passes of one level at once (level dst_plane from level src_plane,
 * distinct planes): a block's output tile of RS_CTX x RS_CTY pixels from
 * the source's tile with W pixels of halo on each side, clamped indices, in
 * shared memory; the column pass over the tile's rows and halo columns,
 * then the row pass; no temporary level in global memory. The sums are
 * k_conv_v's and k_conv_h's, term by term in the same order: a halo column
 * of the tile is the clamped column clamp(x0 - W + cx), so the column
 * pass's value there is exactly the temporary level's at that column, and
 * the row pass reads clamp(x - W + k) as k_conv_h does. Dynamic shared
 * memory: ((RS_CTY + 2 W) + RS_CTY) (RS_CTX + 2 W) floats. */
#define RS_CTX 32
#define RS_CTY 16
#define RS_CBX 32 /* threads of a k_conv_vh block */
#define RS_CBY 8
__global__ void __launch_bounds__(RS_CBX * RS_CBY) k_conv_vh(uint8_t *arena, const rs_item *items, int oct, int omin,
                                                             size_t src_plane, size_t dst_plane, const float *filt,
                                                             int W)
{
    extern __shared__ float sh_conv[];
    const rs_item &it = items[blockIdx.z];
    if (oct >= it.O) return;
    const int w = oct_dim(it.w, omin + oct), h = oct_dim(it.h, omin + oct);
    const int x0 = blockIdx.x * RS_CTX, y0 = blockIdx.y * RS_CTY;
    if (x0 >= w || y0 >= h) return; /* uniform in the block */
    const int tw = RS_CTX + 2 * W, th = RS_CTY + 2 * W, nthr = RS_CBX * RS_CBY;
    const int tid = threadIdx.y * RS_CBX + threadIdx.x;
    float *tile = sh_conv, *vert = sh_conv + (size_t)th * tw; /* (th, tw), (RS_CTY, tw) */
    const float *src = (const float *)(arena + it.off_lev) + src_plane * it.plane;
    float *dst = (float *)(arena + it.off_lev) + dst_plane * it.plane;
    const float *f = filt + 2 * W;
    for (int e = tid; e < th * tw; e += nthr) {
        const int r = e / tw, cx = e % tw;
        int py = y0 - W + r, px = x0 - W + cx;
        py = py < 0 ? 0 : py > h - 1 ? h - 1 : py;
        px = px < 0 ? 0 : px > w - 1 ? w - 1 : px;
        tile[e] = src[(size_t)py * w + px];
    }
    __syncthreads();
    for (int e = tid; e < RS_CTY * tw; e += nthr) { /* column pass (k_conv_v) */
        const int ry = e / tw, cx = e % tw;
        float acc = 0.0f;
        for (int k = 0; k <= 2 * W; k++) acc = __fadd_rn(acc, __fmul_rn(tile[(ry + k) * tw + cx], f[-k]));
        vert[e] = acc;
    }
    __syncthreads();
    for (int e = tid; e < RS_CTY * RS_CTX; e += nthr) { /* row pass (k_conv_h) */
        const int ry = e / RS_CTX, tx = e % RS_CTX, x = x0 + tx, y = y0 + ry;
        if (x >= w || y >= h) continue;
        float acc = 0.0f;
        for (int k = 0; k <= 2 * W; k++) acc = __fadd_rn(acc, __fmul_rn(vert[ry * tw + tx + k], f[-k]));
        dst[(size_t)y * w + x] = acc;
    }
}

/* Both passes of one level, register-tiled (level dst_plane of the level
 * buffer from plane src_plane of the buffer src_buf: RS_SRC_LEV the levels,
 * RS_SRC_TEMP the temporary level, RS_SRC_IMG the float image, whose rows
 * are the first octave's when o_min = 0; distinct planes), W a
 * compile-time width. A block
 * of RS_STH threads makes an output tile of RS_STX x RS_STY pixels:
 *   - column pass, straight from global memory: a work item is one column
 *     cx of the tile's RS_STX + 2 W (the image column clamp(x0 - W + cx))
 *     and RS_SRY consecutive rows; it reads the RS_SRY + 2 W clamped source
 *     values of its column once, in row order, into registers, and adds
 *     each to the RS_SRY accumulators that take it. Output row r gets the
 *     value of source row r - W + k as its k-th term, k = 0 .. 2 W
 *     ascending, each term __fmul_rn(v, filt[2 W - k]) added by __fadd_rn
 *     to an accumulator that starts at 0.0f: k_conv_v's sum, term by term,
 *     in its order. The results go to shared memory, vert (RS_STY,
 *     rs_vpitch(W));
 *   - row pass: a work item is RS_SRX consecutive outputs of one row; it
 *     reads the RS_SRX + 2 W values of vert they need with float4 loads
 *     and adds them the same way, output x taking vert's value at image
 *     column clamp(x - W + k) as its k-th term: k_conv_h's sum in its
 *     order (a halo column of vert is the column pass at the clamped
 *     column, exactly the temporary level's value there).
 * So every output is the same sequence of float operations as the CPU's
 * (and k_conv_vh's); only where the operands are read from changes. The
 * taps live in registers, read once per thread. */
#define RS_STX 64  /* output tile: columns */
#define RS_STY 32  /* output tile: rows */
#define RS_SRY 16  /* rows per column-pass item */
#define RS_SRX 8   /* outputs per row-pass item */
#define RS_STH 256 /* threads of a k_smooth block: RS_STY * RS_STX / RS_SRX row items, one each */
#define RS_SMAXW 16 /* widths with a k_smooth instance (1 .. RS_SMAXW); wider ones take k_conv_vh */
#define RS_SRC_LEV 0
#define RS_SRC_TEMP 1
#define RS_SRC_IMG 2

/* Floats per row of vert: the row pass's float4 loads of its last item
 * stay inside (a multiple of 4, >= RS_STX + 2 W). */
__host__ __device__ constexpr int rs_vpitch(int W) { return RS_STX - RS_SRX + 4 * ((RS_SRX + 2 * W + 3) / 4); }

template <int W>
__global__ void __launch_bounds__(RS_STH, 2) k_smooth(uint8_t *arena, const rs_item *items, int oct, int omin,
                                                      int src_buf, size_t src_plane, size_t dst_plane,
                                                      const float *__restrict__ filt)
{
    constexpr int NT = 2 * W + 1, NCOL = RS_STX + 2 * W, VP = rs_vpitch(W);
    constexpr int NV = RS_SRX + 2 * W;          /* vert values one row item reads */
    constexpr int NV4 = (NV + 3) / 4;           /* as float4 */
    __shared__ __align__(16) float vert[RS_STY * VP];
    static_assert(RS_STY % RS_SRY == 0 && RS_STX % RS_SRX == 0 && RS_SRX % 4 == 0, "tile shape");
    static_assert(RS_STH == RS_STY * (RS_STX / RS_SRX), "one row item per thread");
    const rs_item &it = items[blockIdx.z];
    if (oct >= it.O) return;
    const int w = oct_dim(it.w, omin + oct), h = oct_dim(it.h, omin + oct);
    const int x0 = blockIdx.x * RS_STX, y0 = blockIdx.y * RS_STY;
    if (x0 >= w || y0 >= h) return; /* uniform in the block */
    const float *src = (const float *)(arena + (src_buf == RS_SRC_IMG    ? it.off_img
                                                : src_buf == RS_SRC_TEMP ? it.off_temp
                                                                         : it.off_lev)) +
                       src_plane * it.plane;
    float *dst = (float *)(arena + it.off_lev) + dst_plane * it.plane;
    float tap[NT]; /* tap[k] = filt[2 W - k]: the k-th term's weight */
#pragma unroll
    for (int k = 0; k < NT; k++) tap[k] = filt[2 * W - k];

    /* column pass */
    for (int e = threadIdx.x; e < (RS_STY / RS_SRY) * NCOL; e += RS_STH) {
        const int chunk = e / NCOL, cx = e - chunk * NCOL;
        const int r0 = y0 + chunk * RS_SRY; /* the item's first output row */
        if (r0 >= h) continue;
        int px = x0 - W + cx;
        px = px < 0 ? 0 : px > w - 1 ? w - 1 : px;
        const float *col = src + px;
        float acc[RS_SRY];
#pragma unroll
        for (int j = 0; j < RS_SRY; j++) acc[j] = 0.0f;
#pragma unroll
        for (int i = 0; i < RS_SRY + 2 * W; i++) { /* source row r0 - W + i, in row order */
            int py = r0 - W + i;
            py = py < 0 ? 0 : py > h - 1 ? h - 1 : py;
            const float v = col[(size_t)py * w];
#pragma unroll
            for (int j = 0; j < RS_SRY; j++) { /* output row r0 + j takes it as term k = i - j */
                const int k = i - j;
                if (k >= 0 && k < NT) acc[j] = __fadd_rn(acc[j], __fmul_rn(v, tap[k]));
            }
        }
#pragma unroll
        for (int j = 0; j < RS_SRY; j++) vert[(chunk * RS_SRY + j) * VP + cx] = acc[j];
    }
    __syncthreads();

    /* row pass: thread t, row t / (RS_STX / RS_SRX), outputs lx0 .. lx0 + RS_SRX - 1 of the tile */
    {
        const int ry = threadIdx.x / (RS_STX / RS_SRX), lx0 = (threadIdx.x % (RS_STX / RS_SRX)) * RS_SRX;
        const int y = y0 + ry, xs = x0 + lx0;
        if (y >= h || xs >= w) return; /* no __syncthreads after this */
        float v[4 * NV4]; /* vert columns lx0 .. : image columns clamp(xs - W + i) */
        const float4 *vr = (const float4 *)(vert + ry * VP + lx0);
#pragma unroll
        for (int q = 0; q < NV4; q++) {
            const float4 u = vr[q];
            v[4 * q] = u.x;
            v[4 * q + 1] = u.y;
            v[4 * q + 2] = u.z;
            v[4 * q + 3] = u.w;
        }
        float acc[RS_SRX];
#pragma unroll
        for (int j = 0; j < RS_SRX; j++) acc[j] = 0.0f;
#pragma unroll
        for (int i = 0; i < NV; i++) /* output xs + j takes v[i] as term k = i - j, k ascending */
#pragma unroll
            for (int j = 0; j < RS_SRX; j++) {
                const int k = i - j;
                if (k >= 0 && k < NT) acc[j] = __fadd_rn(acc[j], __fmul_rn(v[i], tap[k]));
            }
        float *out = dst + (size_t)y * w + xs;
        if (xs + RS_SRX <= w && ((uintptr_t)out & 15) == 0) {
#pragma unroll
            for (int q = 0; q < RS_SRX / 4; q++)
                ((float4 *)out)[q] = make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
        } else {
#pragma unroll
            for (int j = 0; j < RS_SRX; j++)
                if (xs + j < w) out[j] = acc[j];
        }
    }
}

/* Launches k_smooth<W> on the grid of an octave of mw x mh (the batch's
 * largest); 0 when W has no instance (the caller takes k_conv_vh). */
static int rs_smooth_launch(int W, cudaStream_t st, int mw, int mh, size_t nb, uint8_t *arena, const rs_item *items,
                            int oct, int omin, int src_buf, size_t src_plane, size_t dst_plane, const float *filt)
{
    const dim3 G((unsigned)((mw + RS_STX - 1) / RS_STX), (unsigned)((mh + RS_STY - 1) / RS_STY), (unsigned)nb);
    if (W < 1 || W > RS_SMAXW) return 0;
    switch (W) {
#define RS_SMOOTH_CASE(w_)                                                                                          \
    case w_:                                                                                                        \
        k_smooth<w_><<<G, RS_STH, 0, st>>>(arena, items, oct, omin, src_buf, src_plane, dst_plane, filt);           \
        return 1;
        RS_SMOOTH_CASE(1) RS_SMOOTH_CASE(2) RS_SMOOTH_CASE(3) RS_SMOOTH_CASE(4)
        RS_SMOOTH_CASE(5) RS_SMOOTH_CASE(6) RS_SMOOTH_CASE(7) RS_SMOOTH_CASE(8)
        RS_SMOOTH_CASE(9) RS_SMOOTH_CASE(10) RS_SMOOTH_CASE(11) RS_SMOOTH_CASE(12)
        RS_SMOOTH_CASE(13) RS_SMOOTH_CASE(14) RS_SMOOTH_CASE(15) RS_SMOOTH_CASE(16)
#undef RS_SMOOTH_CASE
    default:
        return 0;
    }
}

/* Level s_min of octave oct (> 0): level s_min + S of octave oct - 1, every
 * other pixel (copy_and_downsample; no smoothing: sa == sb, VLFeat's
 * s_best - S = s_min). Planes 0 and S differ: no overlap. */
__global__ void k_next_base(uint8_t *arena, const rs_item *items, int oct, int omin, int S)
{
    const rs_item &it = items[blockIdx.z];
    if (oct >= it.O) return;
    const int w = oct_dim(it.w, omin + oct), h = oct_dim(it.h, omin + oct);
    const int pw = oct_dim(it.w, omin + oct - 1);
    const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    const float *src = (const float *)(arena + it.off_lev) + (size_t)S * it.plane;
    float *dst = (float *)(arena + it.off_lev);
    dst[(size_t)y * w + x] = src[(size_t)(2 * y) * pw + 2 * x];
}

/* DoG (S + 2 planes: level s + 1 - level s, float) and the gradients of
 * levels s_min + 1 .. s_max - 2 (update_gradient: modulus by
 * vl_fast_sqrt_f, angle by vl_fast_atan2_f + 2 pi, mod 2 pi). */
__global__ void k_dog_grad(uint8_t *arena, const rs_item *items, int oct, int omin, int S)
{
    const rs_item &it = items[blockIdx.z];
    if (oct >= it.O) return;
    const int w = oct_dim(it.w, omin + oct), h = oct_dim(it.h, omin + oct);
    const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    const float *lev = (const float *)(arena + it.off_lev);
    float *dog = (float *)(arena + it.off_dog);
    const size_t i = (size_t)y * w + x, so = (size_t)w * h;
    for (int d = 0; d < S + 2; d++)
        dog[d * it.plane + i] = lev[(d + 1) * it.plane + i] - lev[d * it.plane + i];
    float *grad = (float *)(arena + it.off_grad[oct]);
    for (int g = 0; g < S; g++) {
        const float *src = lev + (size_t)(g + 1) * it.plane + i;
        float gx, gy;
        if (x == 0) gx = src[1] - src[0];
        else if (x == w - 1) gx = src[0] - src[-1];
        else gx = (float)(0.5 * (src[1] - src[-1]));
        if (y == 0) gy = src[w] - src[0];
        else if (y == h - 1) gy = src[0] - src[-w];
        else gy = (float)(0.5 * (src[w] - src[-w]));
        float *o = grad + 2 * ((size_t)g * so + i);
        o[0] = vsqrt_f(gx * gx + gy * gy);
        o[1] = vmod2pi_f((float)(vatan2_f(gy, gx) + 2 * RS_PI));
    }
}

/* Candidates: interior DoG samples of planes 1 .. S (s = s_min + 1 ..
 * s_max - 2) larger (smaller) than their 26 neighbours and >= 0.8 tp (<=
 * -0.8 tp). Appended in any order; their key is their raster position. */
__global__ void k_detect(uint8_t *arena, const rs_item *items, rs_ctr *ctr, int oct, int omin, int S, double tp)
{
    const rs_item &it = items[blockIdx.z];
    if (oct >= it.O) return;
    const int w = oct_dim(it.w, omin + oct), h = oct_dim(it.h, omin + oct);
    const int x = blockIdx.x * blockDim.x + threadIdx.x + 1, y = blockIdx.y * blockDim.y + threadIdx.y + 1;
    if (x >= w - 1 || y >= h - 1) return;
    const float *dog = (const float *)(arena + it.off_dog);
    const ptrdiff_t yo = w, so = (ptrdiff_t)it.plane;
    unsigned *cand = (unsigned *)(arena + it.off_cand);
    for (int d = 1; d <= S; d++) {
        const float *pt = dog + d * so + (ptrdiff_t)y * yo + x;
        const float v = *pt;
        bool mx = (double)v >= 0.8 * tp, mn = (double)v <= -0.8 * tp;
        for (int ds = -1; ds <= 1 && (mx || mn); ds++)
            for (int dy = -1; dy <= 1; dy++)
                for (int dx = -1; dx <= 1; dx++) {
                    if (!ds && !dy && !dx) continue;
                    const float u = pt[ds * so + dy * yo + dx];
                    mx = mx && v > u;
                    mn = mn && v < u;
                }
        if (mx || mn) {
            const unsigned k = atomicAdd(&ctr[blockIdx.z].cand, 1u);
            if (k < it.cand_cap) cand[k] = ((unsigned)(d - 1) * (unsigned)h + (unsigned)y) * (unsigned)w + (unsigned)x;
            else ctr[blockIdx.z].over = 1;
        }
    }
}

/* Refinement (vl_sift_detect) of one candidate: the keypoint appended
 * (orientations later, after the sort: k_orient_rank). */
__device__ static void rs_refine_one(uint8_t *arena, const rs_item &it, rs_ctr *ctr, int oct, int omin,
                                     const rs_kconf &C, unsigned ci)
{
    const int w = oct_dim(it.w, omin + oct), h = oct_dim(it.h, omin + oct);
    const int S = C.S, s_min = -1, s_max = S + 1;
    const unsigned key = ((const unsigned *)(arena + it.off_cand))[ci];
    const float *dog = (const float *)(arena + it.off_dog);
    const ptrdiff_t xo = 1, yo = w, so = (ptrdiff_t)it.plane;
    int x = (int)(key % (unsigned)w), y = (int)(key / (unsigned)w % (unsigned)h);
    const int s = (int)(key / ((unsigned)w * (unsigned)h)) + s_min + 1;
    double Dx = 0, Dy = 0, Ds = 0, Dxx = 0, Dyy = 0, Dss = 0, Dxy = 0, Dxs = 0, Dys = 0;
    double A[9], b[3];
    int dx = 0, dy = 0;
    const float *pt = dog;
#define at(dx_, dy_, ds_) (*(pt + (dx_) * xo + (dy_) * yo + (ds_) * so))
#define Aat(i_, j_) (A[(i_) + (j_) * 3])
    for (int iter = 0; iter < 5; ++iter) {
        x += dx;
        y += dy;
        pt = dog + xo * x + yo * y + so * (s - s_min);
        Dx = 0.5 * (at(+1, 0, 0) - at(-1, 0, 0));
        Dy = 0.5 * (at(0, +1, 0) - at(0, -1, 0));
        Ds = 0.5 * (at(0, 0, +1) - at(0, 0, -1));
        Dxx = (at(+1, 0, 0) + at(-1, 0, 0) - 2.0 * at(0, 0, 0));
        Dyy = (at(0, +1, 0) + at(0, -1, 0) - 2.0 * at(0, 0, 0));
        Dss = (at(0, 0, +1) + at(0, 0, -1) - 2.0 * at(0, 0, 0));
        Dxy = 0.25 * (at(+1, +1, 0) + at(-1, -1, 0) - at(-1, +1, 0) - at(+1, -1, 0));
        Dxs = 0.25 * (at(+1, 0, +1) + at(-1, 0, -1) - at(-1, 0, +1) - at(+1, 0, -1));
        Dys = 0.25 * (at(0, +1, +1) + at(0, -1, -1) - at(0, -1, +1) - at(0, +1, -1));
        Aat(0, 0) = Dxx;
        Aat(1, 1) = Dyy;
        Aat(2, 2) = Dss;
        Aat(0, 1) = Aat(1, 0) = Dxy;
        Aat(0, 2) = Aat(2, 0) = Dxs;
        Aat(1, 2) = Aat(2, 1) = Dys;
        b[0] = -Dx;
        b[1] = -Dy;
        b[2] = -Ds;
        for (int j = 0; j < 3; ++j) {
            double maxa = 0, maxabsa = 0, tmp;
            int maxi = -1;
            for (int i = j; i < 3; ++i) {
                const double a = Aat(i, j), absa = fabs(a);
                if (absa > maxabsa) {
                    maxa = a;
                    maxabsa = absa;
                    maxi = i;
                }
            }
            if (maxabsa < 1e-10f) {
                b[0] = 0;
                b[1] = 0;
                b[2] = 0;
                break;
            }
            const int i = maxi;
            for (int jj = j; jj < 3; ++jj) {
                tmp = Aat(i, jj);
                Aat(i, jj) = Aat(j, jj);
                Aat(j, jj) = tmp;
                Aat(j, jj) /= maxa;
            }
            tmp = b[j];
            b[j] = b[i];
            b[i] = tmp;
            b[j] /= maxa;
            for (int ii = j + 1; ii < 3; ++ii) {
                const double xx = Aat(ii, j);
                for (int jj = j; jj < 3; ++jj) Aat(ii, jj) -= xx * Aat(j, jj);
                b[ii] -= xx * b[j];
            }
        }
        for (int i = 2; i > 0; --i) {
            const double xx = b[i];
            for (int ii = i - 1; ii >= 0; --ii) b[ii] -= xx * Aat(ii, i);
        }
        dx = ((b[0] > 0.6 && x < w - 2) ? 1 : 0) + ((b[0] < -0.6 && x > 1) ? -1 : 0);
        dy = ((b[1] > 0.6 && y < h - 2) ? 1 : 0) + ((b[1] < -0.6 && y > 1) ? -1 : 0);
        if (dx == 0 && dy == 0) break;
    }
    const double val = at(0, 0, 0) + 0.5 * (Dx * b[0] + Dy * b[1] + Ds * b[2]);
    const double score = (Dxx + Dyy) * (Dxx + Dyy) / (Dxx * Dyy - Dxy * Dxy);
    const double xn = x + b[0], yn = y + b[1], sn = s + b[2];
    const double te = C.te, tp = C.tp;
    const bool good = fabs(val) > tp && score < (te + 1) * (te + 1) / te && score >= 0 && fabs(b[0]) < 1.5 &&
                      fabs(b[1]) < 1.5 && fabs(b[2]) < 1.5 && xn >= 0 && xn <= w - 1 && yn >= 0 && yn <= h - 1 &&
                      sn >= s_min && sn <= s_max;
#undef at
#undef Aat
    if (!good) return;
    const int o_cur = omin + oct;
    const double xper = ldexp(1.0, o_cur);
    rs_kp k;
    k.peak = fabs(val);
    k.o = o_cur;
    k.ix = x;
    k.iy = y;
    k.is = s;
    k.x = (float)(xn * xper);
    k.y = (float)(yn * xper);
    k.sigma = (float)(C.sigma0 * exp2(sn / S) * xper);
    k.nang = 0;
    k.ang[0] = k.ang[1] = k.ang[2] = k.ang[3] = 0;

    const unsigned slot = atomicAdd(&ctr->kp, 1u);
    if (slot >= it.kp_cap) {
        ctr->over = 1;
        return;
    }
    ((rs_kp *)(arena + it.off_kp))[slot] = k;
    rs_sortkey sk;
    sk.peak = k.peak;
    sk.seq = ((unsigned long long)oct << 58) | ((unsigned long long)key << RS_KP_IDX_BITS) | slot;
    ((rs_sortkey *)(arena + it.off_sort))[slot] = sk;
}

/* Orientations (vl_sift_calc_keypoint_orientations) of keypoint `slot`
 * (of octave oct), by the whole warp (uniform control flow up to the
 * histogram's rounds); lane 0 stores them in the keypoint. The histogram is
 * VLFeat's double sums in its pixel order: the warp takes the window's
 * pixels 32 at a time in raster order, each lane computing one pixel's two
 * terms ((1 - rbin) mod wgt and rbin mod wgt, VLFeat's expressions), then
 * lane l adds, pixel by pixel in raster order, the terms that fall in bins
 * l and l + 32 (each bin's pixels found with __match_any_sync). A pixel
 * adds to two distinct bins, so every bin receives exactly VLFeat's terms
 * in VLFeat's order. Lane 0 smooths and finds the peaks. */
__device__ static void rs_orient_one(uint8_t *arena, const rs_item &it, int oct, int omin, const rs_kconf &C,
                                     const double *expn, unsigned slot, int lane, double *sh_h, double (*sh_c)[32],
                                     int *sh_b)
{
    rs_kp *const kps = (rs_kp *)(arena + it.off_kp);
    rs_kp k = kps[slot];
    const int w = oct_dim(it.w, omin + oct), h = oct_dim(it.h, omin + oct);
    const int S = C.S, s_min = -1, s_max = S + 1;
    const double xper = ldexp(1.0, k.o);
    (void)S;
    /* orientations */
    {
        const double winf = 1.5;
        const double kx = k.x / xper, ky = k.y / xper, sigma = k.sigma / xper;
        const int xi = (int)(kx + 0.5), yi = (int)(ky + 0.5), si = k.is;
        const double sigmaw = winf * sigma;
        const int Wn = (int)fmax(floor(3.0 * sigmaw), 1.0);
        enum { nbins = 36 };
        double maxh;
        if (!(xi < 0 || xi > w - 1 || yi < 0 || yi > h - 1 || si < s_min + 1 || si > s_max - 2)) {
            const float *gp = (const float *)(arena + it.off_grad[oct]) +
                              2 * ((size_t)(si - s_min - 1) * (size_t)w * h + (size_t)yi * w + xi);
            const int ylo = -Wn > -yi ? -Wn : -yi, yhi = Wn < h - 1 - yi ? Wn : h - 1 - yi;
            const int xlo = -Wn > -xi ? -Wn : -xi, xhi = Wn < w - 1 - xi ? Wn : w - 1 - xi;
            const int nx = xhi - xlo + 1, ny = yhi - ylo + 1, npx = nx > 0 && ny > 0 ? nx * ny : 0;
            double ha = 0, hb = 0; /* bins lane and lane + 32 */
            for (int p0 = 0; p0 < npx; p0 += 32) {
                const int p = p0 + lane;
                int b0 = -1;
                if (p < npx) {
                    const int ys = ylo + p / nx, xs = xlo + p % nx;
                    const double ddx = (double)(xi + xs) - kx, ddy = (double)(yi + ys) - ky;
                    const double r2 = ddx * ddx + ddy * ddy;
                    if (!(r2 >= Wn * Wn + 0.6)) {
                        const double wgt = fast_expn(expn, r2 / (2 * sigmaw * sigmaw));
                        const double mod = gp[2 * (xs + (ptrdiff_t)ys * w)];
                        const double ang = gp[2 * (xs + (ptrdiff_t)ys * w) + 1];
                        const double fbin = nbins * ang / (2 * RS_PI);
                        const int bin = (int)vfloor_d(fbin - 0.5);
                        const double rbin = fbin - bin - 0.5;
                        b0 = (bin + nbins) % nbins;
                        sh_c[0][lane] = (1 - rbin) * mod * wgt;
                        sh_c[1][lane] = (rbin)*mod * wgt;
                    }
                }
                /* which of the round's pixels have first bin B: sh_b[B] (a
                 * lane mask), written by the lowest lane of each group */
                sh_b[lane] = 0;
                if (lane + 32 < nbins) sh_b[lane + 32] = 0;
                __syncwarp();
                {
                    const unsigned grp = __match_any_sync(0xffffffffu, b0);
                    if (b0 >= 0 && (grp & ((1u << lane) - 1u)) == 0) sh_b[b0] = (int)grp;
                }
                __syncwarp();
                /* bin B takes c0 of the pixels whose first bin is B and c1
                 * of those whose first bin is B - 1 (mod nbins): distinct
                 * pixels, taken in pixel order */
                for (int t = 0; t < 2; t++) {
                    const int B = lane + 32 * t;
                    if (B >= nbins) break;
                    const unsigned m0 = (unsigned)sh_b[B], m1 = (unsigned)sh_b[(B + nbins - 1) % nbins];
                    double acc = t ? hb : ha;
                    for (unsigned u = m0 | m1; u; u &= u - 1) {
                        const int q = __ffs((int)u) - 1;
                        acc += (m0 >> q & 1u) ? sh_c[0][q] : sh_c[1][q];
                    }
                    if (t) hb = acc;
                    else ha = acc;
                }
                __syncwarp();
            }
            sh_h[lane] = ha;
            if (lane + 32 < nbins) sh_h[lane + 32] = hb;
            __syncwarp();
            if (lane == 0) { /* in shared memory: a register array of 36 doubles would cap the occupancy */
                double *const hist = sh_h;
                for (int iter = 0; iter < 6; iter++) {
                    double prev = hist[nbins - 1];
                    const double first = hist[0];
                    int i;
                    for (i = 0; i < nbins - 1; i++) {
                        const double newh = (prev + hist[i] + hist[(i + 1) % nbins]) / 3.0;
                        prev = hist[i];
                        hist[i] = newh;
                    }
                    hist[i] = (prev + hist[i] + first) / 3.0;
                }
                maxh = 0;
                for (int i = 0; i < nbins; ++i) maxh = maxh > hist[i] ? maxh : hist[i];
                for (int i = 0; i < nbins && k.nang < 4; ++i) {
                    const double h0 = hist[i], hm = hist[(i - 1 + nbins) % nbins], hp = hist[(i + 1 + nbins) % nbins];
                    if (h0 > 0.8 * maxh && h0 > hm && h0 > hp) {
                        const double di = -0.5 * (hp - hm) / (hp + hm - 2 * h0);
                        k.ang[k.nang++] = 2 * RS_PI * (i + di + 0.5) / nbins;
                    }
                }
            }
            __syncwarp(); /* sh_h is free for the warp's next candidate */
        }
    }
    if (lane == 0) {
        kps[slot].nang = k.nang;
        for (int a = 0; a < 4; a++) kps[slot].ang[a] = k.ang[a];
    }
}

#define RS_REF_WARPS 4 /* keypoints per block of k_orient_rank at a time */
#define RS_REF_BLOCKS 256 /* blocks per image of k_refine and k_orient_rank (grid-stride) */

/* Refinement of the octave's candidates, one per thread. */
__global__ void k_refine(uint8_t *arena, const rs_item *items, rs_ctr *ctr, int oct, int omin, rs_kconf C)
{
    const rs_item &it = items[blockIdx.y];
    if (oct >= it.O) return;
    const unsigned nc = ctr[blockIdx.y].cand < it.cand_cap ? ctr[blockIdx.y].cand : it.cand_cap;
    for (unsigned ci = blockIdx.x * blockDim.x + threadIdx.x; ci < nc; ci += gridDim.x * blockDim.x)
        rs_refine_one(arena, it, ctr + blockIdx.y, oct, omin, C, ci);
}

/* ------------------------------------------------------------ selection */

__device__ static inline bool rs_better(const rs_sortkey &a, const rs_sortkey &b)
{
    return a.peak > b.peak || (a.peak == b.peak && a.seq < b.seq);
}

/* One block of RS_SEL_THREADS per image: the keypoints sorted by (|peak|
 * descending, VLFeat order), in shared memory when they fit (smem_cap
 * entries of dynamic shared memory; else in place in the
 * arena), then their orientations taken in that order up to the budget
 * (the kept features: keypoint index << 2 | orientation); the header. The
 * take is VLFeat's serial loop written as a scan: the orientation a of the
 * i-th keypoint in order is feature sum_{j < i} nang_j + a, kept when that
 * is under the budget. phase: RS_SEL_SORT the sort, its order left in the
 * arena's keys (for k_orient_rank); RS_SEL_TAKE the take from them. */
#define RS_SEL_THREADS 1024
#define RS_SEL_SORT 1 /* sort only, the order left in the arena's sort keys */
#define RS_SEL_TAKE 2 /* take only, from the arena's sorted keys */
__global__ void __launch_bounds__(RS_SEL_THREADS) k_select(uint8_t *arena, const rs_item *items, rs_ctr *ctr,
                                                             rs_kconf C, unsigned smem_cap, int phase)
{
    extern __shared__ rs_sortkey sh_sk[];
    __shared__ unsigned sh_wsum[RS_SEL_THREADS / 32];
    const rs_item &it = items[blockIdx.x];
    rs_ctr *c = &ctr[blockIdx.x];
    const unsigned n = c->kp < it.kp_cap ? c->kp : it.kp_cap;
    rs_sortkey *const gsk = (rs_sortkey *)(arena + it.off_sort);
    unsigned P = 1;
    while (P < n) P <<= 1;
    rs_sortkey *const sk = phase != RS_SEL_TAKE && P <= smem_cap ? sh_sk : gsk;
    for (unsigned i = threadIdx.x; phase != RS_SEL_TAKE && i < P; i += blockDim.x) {
        if (i >= n) {
            sk[i].peak = -1.0;
            sk[i].seq = ~0ull;
        } else if (sk != gsk) {
            sk[i] = gsk[i];
        }
    }
    __syncthreads();
    for (unsigned k = 2; phase != RS_SEL_TAKE && k <= P; k <<= 1)
        for (unsigned j = k >> 1; j > 0; j >>= 1) {
            for (unsigned i = threadIdx.x; i < P; i += blockDim.x) {
                const unsigned l = i ^ j;
                if (l > i) {
                    const rs_sortkey a = sk[i], b = sk[l];
                    const bool up = (i & k) == 0;
                    if (up ? rs_better(b, a) : rs_better(a, b)) {
                        sk[i] = b;
                        sk[l] = a;
                    }
                }
            }
            __syncthreads();
        }
    if (phase == RS_SEL_SORT) {
        if (sk != gsk)
            for (unsigned i = threadIdx.x; i < n; i += blockDim.x) gsk[i] = sk[i];
        return;
    }
    const rs_kp *kp = (const rs_kp *)(arena + it.off_kp);
    unsigned *feat = (unsigned *)(arena + it.off_feat);
    const unsigned budget = (unsigned)C.budget, lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    unsigned m = 0; /* features before this round (the same in every thread) */
    for (unsigned base = 0; base < n && m < budget; base += blockDim.x) {
        const unsigned i = base + threadIdx.x;
        unsigned idx = 0, cnt = 0, v;
        if (i < n) {
            idx = (unsigned)(sk[i].seq & ((1u << RS_KP_IDX_BITS) - 1));
            cnt = (unsigned)kp[idx].nang;
        }
        v = pgpu_warp_scan(cnt, lane); /* inclusive scan in the warp, then over the warps */
        if (lane == 31) sh_wsum[wid] = v;
        __syncthreads();
        if (wid == 0) {
            sh_wsum[lane] = pgpu_warp_scan(lane < blockDim.x / 32 ? sh_wsum[lane] : 0, lane);
        }
        __syncthreads();
        const unsigned first = m + (wid ? sh_wsum[wid - 1] : 0) + v - cnt;
        for (unsigned a = 0; a < cnt && first + a < budget; a++) feat[first + a] = idx << 2 | a;
        m += sh_wsum[blockDim.x / 32 - 1];
        __syncthreads(); /* sh_wsum is read before the next round writes it */
    }
    if (threadIdx.x != 0) return;
    m = m < budget ? m : budget;
    c->feat = m;
    uint8_t *rec = arena + it.off_rec;
    const uint32_t hdr[10] = {m, 1u, (uint32_t)C.budget, (uint32_t)C.quant, __float_as_uint(C.qscale),
                              __float_as_uint(it.down), (uint32_t)it.w, (uint32_t)it.h, (uint32_t)it.W, (uint32_t)it.H};
    for (int k = 0; k < 10; k++)
        for (int b = 0; b < 4; b++) rec[4 * k + b] = (uint8_t)(hdr[k] >> (8 * b));
}

/* Late orientations: those of the keypoints of ranks lo .. min(hi, n) - 1
 * in the sorted order (k_select's RS_SEL_SORT), one per warp at a time
 * (rs_orient_one, the keypoint's own octave); when gated, only in the
 * images whose ctr.more is set (k_more). */
__global__ void __launch_bounds__(32 * RS_REF_WARPS) k_orient_rank(uint8_t *arena, const rs_item *items,
                                                                     const rs_ctr *ctr, int omin, rs_kconf C,
                                                                     const double *expn, unsigned lo, unsigned hi,
                                                                     int gated)
{
    enum { nbins = 36 };
    __shared__ double sh_h[RS_REF_WARPS][nbins];
    __shared__ double sh_c[RS_REF_WARPS][2][32];
    __shared__ int sh_b[RS_REF_WARPS][36];
    const rs_item &it = items[blockIdx.y];
    const rs_ctr &c = ctr[blockIdx.y];
    if (gated && !c.more) return;
    const int wp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const unsigned n = c.kp < it.kp_cap ? c.kp : it.kp_cap, end = hi < n ? hi : n;
    const rs_sortkey *sk = (const rs_sortkey *)(arena + it.off_sort);
    const rs_kp *kps = (const rs_kp *)(arena + it.off_kp);
    for (unsigned r = lo + blockIdx.x * RS_REF_WARPS + wp; r < end; r += gridDim.x * RS_REF_WARPS) {
        const unsigned slot = (unsigned)(sk[r].seq & ((1u << RS_KP_IDX_BITS) - 1));
        rs_orient_one(arena, it, kps[slot].o - omin, omin, C, expn, slot, lane, sh_h[wp], sh_c[wp], sh_b[wp]);
    }
}

/* Whether an image needs the orientations of ranks k1 and on: the take
 * reads a keypoint's orientation count only while the features before it
 * are under the budget, so when ranks 0 .. k1 - 1 give budget features or
 * more, the later ranks are never read (and keep nang = 0). One block per
 * image; integer sums. */
__global__ void k_more(uint8_t *arena, const rs_item *items, rs_ctr *ctr, unsigned k1, unsigned budget)
{
    __shared__ unsigned sh_sum;
    const rs_item &it = items[blockIdx.x];
    rs_ctr *c = &ctr[blockIdx.x];
    const unsigned n = c->kp < it.kp_cap ? c->kp : it.kp_cap, end = k1 < n ? k1 : n;
    const rs_sortkey *sk = (const rs_sortkey *)(arena + it.off_sort);
    const rs_kp *kps = (const rs_kp *)(arena + it.off_kp);
    unsigned sum = 0;
    if (threadIdx.x == 0) sh_sum = 0;
    __syncthreads();
    for (unsigned r = threadIdx.x; r < end; r += blockDim.x)
        sum += (unsigned)kps[sk[r].seq & ((1u << RS_KP_IDX_BITS) - 1)].nang;
    atomicAdd(&sh_sum, sum);
    __syncthreads();
    if (threadIdx.x == 0) c->more = n > k1 && sh_sum < budget;
}

/* ------------------------------------------------------------ descriptors */

#define RS_DESC_WARPS 4 /* features per block of k_desc */

/* One kept feature per warp: vl_sift_calc_keypoint_descriptor, RootSIFT
 * in double, the quantised row and the geometry. The histogram is VLFeat's
 * float sums in its pixel order: the warp takes the window's pixels 32 at a
 * time in raster order, each lane computing one pixel's terms (the same
 * expressions as VLFeat's loop body: win * mod, the three offsets and the
 * bins), then lane l adds, pixel by pixel in raster order, the terms that
 * fall in the bins it owns, 4 l .. 4 l + 3 (one spatial bin, four
 * orientations). A pixel adds to 8 distinct bins, so every bin receives
 * exactly VLFeat's terms in VLFeat's order; the weight of each term is
 * formed as VLFeat forms it ((win * mod) * |.| * |.| * |.|, left to right).
 * The norms and the RootSIFT sum run over the 128 bins in index order. */
__global__ void __launch_bounds__(32 * RS_DESC_WARPS) k_desc(uint8_t *arena, const rs_item *items, const rs_ctr *ctr,
                                                               int omin, rs_kconf C, const double *expn)
{
    __shared__ float sh_d[RS_DESC_WARPS][NBO * NBP * NBP];
    __shared__ float sh_t[RS_DESC_WARPS][4][32]; /* per pixel of a round: win * mod, rbinx, rbiny, rbint */
    __shared__ int sh_b[RS_DESC_WARPS][32];      /* binx + 2 | (biny + 2) << 8 | bint << 16; -1: no pixel */
    const rs_item &it = items[blockIdx.y];
    const int wp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const unsigned fi = blockIdx.x * RS_DESC_WARPS + wp;
    if (fi >= ctr[blockIdx.y].feat) return; /* the warp's feature: uniform in the warp */
    float *descr = sh_d[wp];
    const unsigned f = ((const unsigned *)(arena + it.off_feat))[fi];
    const rs_kp k = ((const rs_kp *)(arena + it.off_kp))[f >> 2];
    const double angle0 = k.ang[f & 3];
    const int oct = k.o - omin;
    const int w = oct_dim(it.w, k.o), h = oct_dim(it.h, k.o);
    const double magnif = 3.0, xper = ldexp(1.0, k.o);
    const double x = k.x / xper, y = k.y / xper, sigma = k.sigma / xper;
    const int xi = (int)(x + 0.5), yi = (int)(y + 0.5), si = k.is;
    double st0, ct0;
    sincos(angle0, &st0, &ct0);
    const double SBP = magnif * sigma + RS_EPS_D;
    const int W = (int)floor(sqrt(2.0) * SBP * (NBP + 1) / 2.0 + 0.5);
    for (int i = lane; i < NBO * NBP * NBP; i += 32) descr[i] = 0;
    __syncwarp();
    const int s_min = -1, s_max = C.S + 1;
    /* VLFeat leaves the descriptor unwritten out of these bounds; the CPU
     * path zeroes it first: zeros */
    if (!(xi < 0 || xi >= w || yi < 0 || yi >= h - 1 || si < s_min + 1 || si > s_max - 2)) {
        const float *pt = (const float *)(arena + it.off_grad[oct]) +
                          2 * ((size_t)(si - s_min - 1) * (size_t)w * h + (size_t)yi * w + xi);
        const int ylo = -W > 1 - yi ? -W : 1 - yi, yhi = W < h - yi - 2 ? W : h - yi - 2;
        const int xlo = -W > 1 - xi ? -W : 1 - xi, xhi = W < w - xi - 2 ? W : w - xi - 2;
        const int nx = xhi - xlo + 1, ny = yhi - ylo + 1, npx = nx > 0 && ny > 0 ? nx * ny : 0;
        /* the bins lane owns: spatial bin (ox, oy) (offsets from -NBP / 2), orientations ot0 .. ot0 + 3 */
        const int oy = lane >> 3, ox = (lane >> 1) & 3, ot0 = (lane & 1) * 4;
        float *mine = descr + 4 * lane;
        for (int p0 = 0; p0 < npx; p0 += 32) {
            const int p = p0 + lane;
            int code = -1;
            if (p < npx) {
                const int dyi = ylo + p / nx, dxi = xlo + p % nx;
                const float mod = pt[2 * (dxi + (ptrdiff_t)dyi * w)];
                const float angle = pt[2 * (dxi + (ptrdiff_t)dyi * w) + 1];
                const float theta = vmod2pi_f((float)(angle - angle0));
                const float dx = (float)(xi + dxi - x), dy = (float)(yi + dyi - y);
                const float nxf = (float)((ct0 * dx + st0 * dy) / SBP);
                const float nyf = (float)((-st0 * dx + ct0 * dy) / SBP);
                const float nt = (float)(NBO * theta / (2 * RS_PI));
                const float wsigma = 2; /* f->windowSize = NBP / 2 */
                const float win = (float)fast_expn(expn, (nxf * nxf + nyf * nyf) / (2.0 * wsigma * wsigma));
                const int binx = (int)vfloor_f((float)(nxf - 0.5));
                const int biny = (int)vfloor_f((float)(nyf - 0.5));
                const int bint = (int)vfloor_f(nt);
                sh_t[wp][0][lane] = win * mod;
                sh_t[wp][1][lane] = (float)(nxf - (binx + 0.5));
                sh_t[wp][2][lane] = (float)(nyf - (biny + 0.5));
                sh_t[wp][3][lane] = nt - bint;
                /* bins that can touch the descriptor: binx, biny in [-NBP/2 - 1, NBP/2 - 1], bint in [0, NBO] */
                if (binx >= -(NBP / 2) - 1 && binx < NBP / 2 && biny >= -(NBP / 2) - 1 && biny < NBP / 2)
                    code = (binx + NBP / 2 + 1) | (biny + NBP / 2 + 1) << 8 | bint << 16;
            }
            sh_b[wp][lane] = code;
            __syncwarp();
            const int np = npx - p0 < 32 ? npx - p0 : 32;
            for (int q = 0; q < np; q++) {
                const int cq = sh_b[wp][q];
                if (cq < 0) continue;
                /* dbinx = ox - binx, dbiny = oy - biny (both stored + 1) */
                const int dbinx = ox + 1 - (cq & 0xff), dbiny = oy + 1 - ((cq >> 8) & 0xff), bint = cq >> 16;
                if (dbinx < 0 || dbinx > 1 || dbiny < 0 || dbiny > 1) continue;
                const float wm = sh_t[wp][0][q], rbinx = sh_t[wp][1][q], rbiny = sh_t[wp][2][q], rbint = sh_t[wp][3][q];
                for (int dbint = 0; dbint < 2; ++dbint) {
                    const int ob = (bint + dbint) % NBO;
                    if (ob - ot0 < 0 || ob - ot0 > 3) continue;
                    const float weight = wm * fabsf(1 - dbinx - rbinx) * fabsf(1 - dbiny - rbiny) * fabsf(1 - dbint - rbint);
                    mine[ob - ot0] += weight;
                }
            }
            __syncwarp();
        }
        for (int pass = 0; pass < 2; pass++) { /* normalise, clamp at 0.2, normalise */
            float norm = 0.0f;
            for (int i = 0; i < NBO * NBP * NBP; i++) norm += descr[i] * descr[i];
            norm = vsqrt_f(norm) + RS_EPS_F;
            __syncwarp();
            for (int i = lane; i < NBO * NBP * NBP; i += 32) {
                descr[i] /= norm;
                if (pass == 0 && descr[i] > 0.2) descr[i] = 0.2;
            }
            __syncwarp();
        }
    }
    /* RootSIFT, quantisation, geometry */
    uint8_t *rec = arena + it.off_rec;
    const size_t eb = C.quant ? 2 : 1;
    uint8_t *row = rec + 64 + (size_t)fi * 128 * eb;
    double l1 = 0.0;
    for (int i = 0; i < 128; i++) l1 += descr[i];
    for (int i = lane; i < 128; i += 32) {
        const double r = l1 > 0.0 ? sqrt(descr[i] / l1) : 0.0;
        if (C.quant) {
            const uint16_t hv = f16_from_f32((float)r); /* the CPU's conversion (algo/f16.h) */
            row[2 * i] = (uint8_t)hv;
            row[2 * i + 1] = (uint8_t)(hv >> 8);
        } else {
            const double v = floor(r * 512.0f + 0.5);
            row[i] = (uint8_t)(v > 255.0 ? 255.0 : v);
        }
    }
    if (lane == 0) {
        uint8_t *geo = rec + 64 + (size_t)C.budget * 128 * eb + 16 * (size_t)fi;
        const float g4[4] = {(float)((k.x + 0.5) * it.sx - 0.5), (float)((k.y + 0.5) * it.sy - 0.5),
                             (float)(k.sigma * (double)it.down), (float)angle0};
        for (int q = 0; q < 4; q++) {
            const uint32_t u = __float_as_uint(g4[q]);
            for (int b = 0; b < 4; b++) geo[4 * q + b] = (uint8_t)(u >> (8 * b));
        }
    }
}

/* An image's RGB in device memory (rows `stride` bytes apart, 3 bytes a
 * pixel, as the GPU decoders leave them) to its grey levels at dst ((h, w)
 * u8): grey_bt601, the integer rule the host staging uses, so the bytes are
 * the CPU path's. */
__global__ void k_grey_rgb(const uint8_t *__restrict__ rgb, size_t stride, int w, int h, uint8_t *__restrict__ dst)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= w) return;
    for (int y = blockIdx.y; y < h; y += gridDim.y) {
        const uint8_t *p = rgb + (size_t)y * stride + 3 * (size_t)x;
        dst[(size_t)y * (size_t)w + (size_t)x] = grey_bt601(p[0], p[1], p[2]);
    }
}

/* ------------------------------------------------------------ host side */

/* The pipeline. A call is cut into sub-batches (at most RS_SUB_IMG images
 * and RS_SUB_PX detection pixels, within one slot's half of the arena);
 * RS_NSLOT slots, each with its stream (the context's streams 0 and 1), its
 * half of the arena, pinned staging for its images' grey levels and its
 * records, and its image table and counters, take the sub-batches in turn:
 * while the device computes sub-batch j on one slot, the context's host
 * threads convert sub-batch j + 1's RGB to grey levels (grey_bt601, the CPU
 * path's bytes) straight into the other slot's pinned staging, which then
 * travels as one copy of 1 byte per pixel, and the records of sub-batch
 * j - 1 are copied out. An image larger than half the arena runs alone on
 * the whole arena, the pipeline drained around it. Nothing is allocated in
 * a call once the buffers have grown to the calls' sizes, and the
 * configuration (filters, fast_expn's table) is uploaded only when it
 * changes. */
#define RS_NSLOT 2
#define RS_SUB_IMG 64                        /* images per sub-batch at most */
#define RS_SUB_PX ((size_t)16 << 20)         /* detection pixels per sub-batch, about */
#define RS_NEV 128                           /* stage marks of one sub-batch */
#define RS_BAND_BYTES ((size_t)256 << 10)    /* RGB bytes per host grey task, about */

struct rs_band { /* one host task: rows [r0, r1) of an image to grey levels */
    const patina_image_t *img;
    uint8_t *dst; /* (H, W) u8 of the image in the staging */
    int r0, r1;
};

struct rs_slot {
    cudaStream_t st;
    cudaEvent_t done;           /* after the sub-batch's last copy */
    uint8_t *h_grey;            /* pinned: the sub-batch's grey images back to back */
    size_t grey_cap;
    uint8_t *h_rec;             /* pinned: its records back to back */
    size_t rec_cap;
    rs_item *d_items, *h_items; /* RS_SUB_IMG */
    rs_ctr *d_ctr, *h_ctr;      /* RS_SUB_IMG */
    cudaEvent_t ev[RS_NEV];     /* stage marks */
    int ev_stage[RS_NEV], nev;
    int marks;                  /* rs_mark records (0 while a graph is captured) */
    /* the sub-batch in flight: images i0 .. i0 + nb of the call */
    size_t i0, nb;
    /* its images in this device's memory (rs_stage): their RGB, read in place
     * by k_grey_rgb (NULL: a host image, staged in h_grey) */
    const uint8_t *dsrc[RS_SUB_IMG];
    size_t dstride[RS_SUB_IMG];
    int ndev;
    int busy;
    /* the one-image call as a CUDA graph, replayed while its key holds (rs_enqueue) */
    cudaGraphExec_t gexec;
    rs_item gkey;               /* the image's layout */
    const void *gkey_ptr[3];    /* the arena, h_grey, h_rec */
    unsigned gkey_conf;         /* the configuration's generation */
    int gkeyed, gvalid;         /* a key is set; gexec is its graph */
};

/* The smoothing kernels: register-tiled k_smooth where it has an instance
 * for the filter's width, else the shared-memory tile k_conv_vh (and the
 * first octave's pre-smoothing in place by k_conv_v, k_conv_h). The same
 * bytes either way; patina_gpu__rootsift_smoothing(RS_SMOOTH_TILE) takes
 * the fallback at every width, so that the tests cover it on every image. */
#define RS_SMOOTH_REG 0
#define RS_SMOOTH_TILE 1

/* Orientations are computed after the selection's sort, for the ranks the
 * take can read: the first budget keypoints, then the rest only in images
 * where those give fewer than budget features (the gated second round).
 * patina_gpu__rootsift_orientations(1) empties the first round, so that
 * every rank goes through the gated one (tests it); the same bytes: a
 * keypoint's orientations do not depend on the round that computes them,
 * and the take never reads a count it skipped. (Computing every keypoint's
 * orientations per octave, the earlier schedule, is in docs/lab/rootsift.md.) */
#define RS_ORIENT_LATE 0
#define RS_ORIENT_LATE2 1 /* an empty first round: every rank by the gated second */

struct rs_state {
    uint8_t *d_arena;
    size_t arena_cap;
    float *d_filt, *h_filt; /* (PGPU_RS_MAXLEV + 3, PGPU_RS_MAXTAPS): filt0 then filt[] */
    double *d_expn;         /* 257 */
    cudaEvent_t conf_ev;    /* after the configuration's upload */
    patina_gpu_rootsift_conf_t conf; /* the configuration on the device */
    int conf_ok;
    unsigned conf_gen; /* uploads so far (a graph's key) */
    unsigned sel_cap; /* keypoints k_select sorts in shared memory at most (0: none) */
    int smooth;       /* the smoothing kernels: RS_SMOOTH_REG (k_smooth) or RS_SMOOTH_TILE (k_conv_vh) */
    int orient;       /* RS_ORIENT_LATE or RS_ORIENT_LATE2 */
    rs_slot sl[RS_NSLOT];
    size_t *need; /* per image of the call: arena bytes */
    size_t need_cap;
    rs_band *band;
    size_t band_cap;
    double ms[PGPU_RS_STAGES];
    size_t batches;
};

static void rs_release(patina_gpu_t *g, void *state)
{
    rs_state *S = (rs_state *)state;
    (void)cudaSetDevice(g->device);
    for (int j = 0; j < RS_NSLOT; j++) {
        rs_slot *L = &S->sl[j];
        if (L->st) (void)cudaStreamSynchronize(L->st);
        pgpu_free_n(g, 6, &L->h_grey, &L->h_rec, &L->d_items, &L->h_items, &L->d_ctr, &L->h_ctr);
        if (L->done) cudaEventDestroy(L->done);
        if (L->gexec) cudaGraphExecDestroy(L->gexec);
        for (int k = 0; k < RS_NEV; k++)
            if (L->ev[k]) cudaEventDestroy(L->ev[k]);
    }
    pgpu_free_n(g, 4, &S->d_arena, &S->d_filt, &S->h_filt, &S->d_expn);
    if (S->conf_ev) cudaEventDestroy(S->conf_ev);
    (void)cudaGetLastError();
    free(S->need);
    free(S->band);
    free(S);
}

static patina_status rs_event(cudaEvent_t *e, unsigned flags)
{
    if (cudaEventCreateWithFlags(e, flags) != cudaSuccess) {
        *e = NULL;
        (void)cudaGetLastError();
        return patina__fail(PATINA_E_GPU, "gpu: rootsift: cannot create an event");
    }
    return PATINA_OK;
}

static patina_status rs_state_of(patina_gpu_t *g, rs_state **out)
{
    rs_state *S = (rs_state *)pgpu_state(g, PGPU_FAM_ROOTSIFT);
    patina_status s = PATINA_OK;
    *out = S;
    if (S) return PATINA_OK;
    S = (rs_state *)calloc(1, sizeof *S);
    if (!S) return patina__fail(PATINA_E_NOMEM, "gpu: rootsift: out of host memory");
    pgpu_set_state(g, PGPU_FAM_ROOTSIFT, S, rs_release);
    s = rs_event(&S->conf_ev, cudaEventDisableTiming);
    { /* k_select's shared sort: up to 8192 keys (128 KiB), what the SM lets a block opt in to */
        const size_t room = g->smem_optin > 1024 ? (size_t)g->smem_optin - 1024 : 0;
        unsigned cap = 8192;
        while (cap && cap * sizeof(rs_sortkey) > room) cap >>= 1;
        if (cap && cap * sizeof(rs_sortkey) > 48 * 1024 &&
            cudaFuncSetAttribute(k_select, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)(cap * sizeof(rs_sortkey))) != cudaSuccess) {
            (void)cudaGetLastError();
            cap = 48 * 1024 / sizeof(rs_sortkey);
        }
        S->sel_cap = cap;
    }
    for (int j = 0; j < RS_NSLOT && s == PATINA_OK; j++) {
        rs_slot *L = &S->sl[j];
        L->st = (cudaStream_t)pgpu_stream(g, j);
        L->marks = 1;
        s = rs_event(&L->done, cudaEventDisableTiming);
        for (int k = 0; k < RS_NEV && s == PATINA_OK; k++) s = rs_event(&L->ev[k], cudaEventDefault);
        if (s == PATINA_OK)
            s = pgpu_dev_alloc(g, (void **)&L->d_items, RS_SUB_IMG * sizeof(rs_item), PGPU_FAM_ROOTSIFT, "image table");
        if (s == PATINA_OK)
            s = pgpu_pin_alloc(g, (void **)&L->h_items, RS_SUB_IMG * sizeof(rs_item), PGPU_FAM_ROOTSIFT, "image table");
        if (s == PATINA_OK)
            s = pgpu_dev_alloc(g, (void **)&L->d_ctr, RS_SUB_IMG * sizeof(rs_ctr), PGPU_FAM_ROOTSIFT, "counters");
        if (s == PATINA_OK)
            s = pgpu_pin_alloc(g, (void **)&L->h_ctr, RS_SUB_IMG * sizeof(rs_ctr), PGPU_FAM_ROOTSIFT, "counters");
    }
    if (s == PATINA_OK)
        s = pgpu_dev_alloc(g, (void **)&S->d_filt, (PGPU_RS_MAXLEV + 3) * PGPU_RS_MAXTAPS * sizeof(float),
                           PGPU_FAM_ROOTSIFT, "filters");
    if (s == PATINA_OK)
        s = pgpu_pin_alloc(g, (void **)&S->h_filt, (PGPU_RS_MAXLEV + 3) * PGPU_RS_MAXTAPS * sizeof(float),
                           PGPU_FAM_ROOTSIFT, "filters");
    if (s == PATINA_OK) s = pgpu_dev_alloc(g, (void **)&S->d_expn, 257 * sizeof(double), PGPU_FAM_ROOTSIFT, "exp table");
    if (s != PATINA_OK) {
        pgpu_drop_state(g, PGPU_FAM_ROOTSIFT);
        return s;
    }
    *out = S;
    return PATINA_OK;
}

static size_t al256(size_t v) { return (v + 255) & ~(size_t)255; }

/* An image's sizes and scales (no offsets yet). */
static void rs_item_init(rs_item *it, const patina_gpu_rootsift_conf_t *c, const patina_gpu_rootsift_item_t *in)
{
    const int omin = c->first_octave;
    memset(it, 0, sizeof *it);
    it->W = in->img->width;
    it->H = in->img->height;
    it->w = in->w;
    it->h = in->h;
    it->O = in->octaves;
    it->sx = in->sx;
    it->sy = in->sy;
    it->down = in->down;
    it->w0 = oct_dim(it->w, omin);
    it->h0 = oct_dim(it->h, omin);
    it->plane = (size_t)it->w0 * (size_t)it->h0;
}

/* The image's own buffers from offset `base` (256-aligned), after its grey
 * levels and record (laid out per sub-batch); returns their bytes (each
 * buffer 256-aligned, so the bytes do not depend on base). */
static size_t rs_layout_own(rs_item *it, const patina_gpu_rootsift_conf_t *c, size_t base)
{
    const int S = c->levels, omin = c->first_octave;
    size_t off = base;
#define TAKE(field, bytes)             \
    do {                               \
        it->field = off;               \
        off += al256((size_t)(bytes)); \
    } while (0)
    TAKE(off_tmp, (it->w == it->W && it->h == it->H) ? 0 : (size_t)it->H * it->w * sizeof(float));
    TAKE(off_img, (size_t)it->w * it->h * sizeof(float));
    TAKE(off_lev, (size_t)(S + 3) * it->plane * sizeof(float));
    TAKE(off_temp, it->plane * sizeof(float));
    TAKE(off_dog, (size_t)(S + 2) * it->plane * sizeof(float));
    for (int k = 0; k < it->O; k++) {
        const size_t pl = (size_t)oct_dim(it->w, omin + k) * (size_t)oct_dim(it->h, omin + k);
        TAKE(off_grad[k], 2 * (size_t)S * pl * sizeof(float));
    }
    {
        size_t cc = (size_t)S * it->plane / 16 + 4096, kc = it->plane / 8 + 4096, p2 = 1;
        if (kc > ((size_t)1 << RS_KP_IDX_BITS)) kc = (size_t)1 << RS_KP_IDX_BITS;
        while (p2 < kc) p2 <<= 1;
        kc = p2;
        it->cand_cap = (unsigned)cc;
        it->kp_cap = (unsigned)kc;
        TAKE(off_cand, cc * sizeof(unsigned));
        TAKE(off_kp, kc * sizeof(rs_kp));
        TAKE(off_sort, kc * sizeof(rs_sortkey));
    }
    TAKE(off_feat, (size_t)c->budget * sizeof(unsigned));
#undef TAKE
    return off - base;
}

/* Arena bytes one image adds to a sub-batch, at most (its grey levels, its
 * record, its buffers, and the alignment of the two shared blocks). */
static size_t rs_need(const patina_gpu_rootsift_conf_t *c, const patina_gpu_rootsift_item_t *in)
{
    rs_item it;
    rs_item_init(&it, c, in);
    return (size_t)it.W * (size_t)it.H + c->rec_bytes + rs_layout_own(&it, c, 0) + 512;
}

/* Lays out images in[0 .. nb) from offset base: their grey levels back to
 * back ((H, W) u8 each, the staging's layout), their records back to back,
 * then each image's buffers. Returns the bytes; *grey: the grey block's. */
static size_t rs_layout_batch(rs_item *hit, const patina_gpu_rootsift_conf_t *c, const patina_gpu_rootsift_item_t *in,
                              size_t nb, size_t base, size_t *grey)
{
    size_t off = base;
    for (size_t b = 0; b < nb; b++) {
        rs_item_init(&hit[b], c, &in[b]);
        hit[b].off_grey = off;
        off += (size_t)hit[b].W * (size_t)hit[b].H;
    }
    *grey = off - base;
    off = al256(off);
    for (size_t b = 0; b < nb; b++) hit[b].off_rec = off + b * c->rec_bytes;
    off = al256(off + nb * c->rec_bytes);
    for (size_t b = 0; b < nb; b++) off += rs_layout_own(&hit[b], c, off);
    return off - base;
}

#define RS_BX 32
#define RS_BY 8

static dim3 grid2(int w, int h, size_t nz) { return dim3((unsigned)((w + RS_BX - 1) / RS_BX), (unsigned)((h + RS_BY - 1) / RS_BY), (unsigned)nz); }


/* Marks the start of a stage of the slot's sub-batch (the previous one ends). */
static void rs_mark(rs_slot *L, int stage)
{
    if (!L->marks || L->nev >= RS_NEV) return;
    cudaEventRecord(L->ev[L->nev], L->st);
    L->ev_stage[L->nev++] = stage;
}

/* After the sub-batch's end: the marks' intervals added to their stages. */
static void rs_collect(rs_state *S, rs_slot *L)
{
    for (int k = 0; k + 1 < L->nev; k++) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, L->ev[k], L->ev[k + 1]) == cudaSuccess && L->ev_stage[k] >= 0)
            S->ms[L->ev_stage[k]] += ms;
    }
    (void)cudaGetLastError();
    L->nev = 0;
}

/* Levels, DoG and gradients of octave k of the slot's images. */
static void rs_scale_space(rs_state *St, rs_slot *L, const patina_gpu_rootsift_conf_t *c, size_t nb, int k,
                           int *mw_out, int *mh_out)
{
    const int S = c->levels, omin = c->first_octave;
    const rs_item *hit = L->h_items;
    const cudaStream_t st = L->st;
    int mw = 0, mh = 0;
    for (size_t i = 0; i < nb; i++)
        if (k < hit[i].O) {
            mw = oct_dim(hit[i].w, omin + k) > mw ? oct_dim(hit[i].w, omin + k) : mw;
            mh = oct_dim(hit[i].h, omin + k) > mh ? oct_dim(hit[i].h, omin + k) : mh;
        }
    *mw_out = mw;
    *mh_out = mh;
    if (mw == 0) return;
    const dim3 B(RS_BX, RS_BY), G = grid2(mw, mh, nb);
    uint8_t *A = St->d_arena;
    rs_item *I = L->d_items;
    const float *F = St->d_filt; /* filt0, then filt[0 ..] */
    rs_mark(L, 2);
    if (k == 0) {
        int w0 = 0, h0 = 0;
        for (size_t i = 0; i < nb; i++) {
            w0 = hit[i].w0 > w0 ? hit[i].w0 : w0;
            h0 = hit[i].h0 > h0 ? hit[i].h0 : h0;
        }
        /* the pre-smoothing (filt0) cannot run in place in one kernel: at
         * o_min = 0 k_smooth reads the float image itself (k_first's copy
         * of it is the identity), else k_first writes the temporary level
         * and k_smooth brings it back */
        const int reg0 = St->smooth == RS_SMOOTH_REG && c->w0 >= 1 && c->w0 <= RS_SMAXW;
        if (reg0 && omin == 0) {
            rs_smooth_launch(c->w0, st, mw, mh, nb, A, I, 0, omin, RS_SRC_IMG, 0, 0, F);
        } else if (reg0) {
            k_first<<<grid2(w0, h0, nb), B, 0, st>>>(A, I, omin, 1);
            rs_smooth_launch(c->w0, st, mw, mh, nb, A, I, 0, omin, RS_SRC_TEMP, 0, 0, F);
        } else if (c->w0 > 0) {
            k_first<<<grid2(w0, h0, nb), B, 0, st>>>(A, I, omin, 0);
            k_conv_v<<<G, B, 0, st>>>(A, I, 0, omin, 0, 0, 1, 0, F, c->w0);
            k_conv_h<<<G, B, 0, st>>>(A, I, 0, omin, 1, 0, 0, 0, F, c->w0);
        } else {
            k_first<<<grid2(w0, h0, nb), B, 0, st>>>(A, I, omin, 0);
        }
    } else {
        k_next_base<<<G, B, 0, st>>>(A, I, k, omin, S);
    }
    for (int l = 1; l <= S + 2; l++) { /* level s = s_min + l from level s - 1 */
        const float *f = F + (size_t)l * PGPU_RS_MAXTAPS;
        const int W = c->fw[l - 1];
        const size_t smem = (size_t)(2 * RS_CTY + 2 * W) * (size_t)(RS_CTX + 2 * W) * sizeof(float);
        if (St->smooth == RS_SMOOTH_REG &&
            rs_smooth_launch(W, st, mw, mh, nb, A, I, k, omin, RS_SRC_LEV, (size_t)(l - 1), (size_t)l, f)) {
            /* both passes, register-tiled (distinct planes) */
        } else if (smem <= 48 * 1024) { /* both passes in one kernel (distinct planes) */
            const dim3 Gt((unsigned)((mw + RS_CTX - 1) / RS_CTX), (unsigned)((mh + RS_CTY - 1) / RS_CTY), (unsigned)nb);
            k_conv_vh<<<Gt, dim3(RS_CBX, RS_CBY), smem, st>>>(A, I, k, omin, (size_t)(l - 1), (size_t)l, f, W);
        } else {
            k_conv_v<<<G, B, 0, st>>>(A, I, k, omin, (size_t)(l - 1), 0, 1, 0, f, W);
            k_conv_h<<<G, B, 0, st>>>(A, I, k, omin, 1, 0, 0, (size_t)l, f, W);
        }
    }
    rs_mark(L, 3);
    k_dog_grad<<<G, B, 0, st>>>(A, I, k, omin, S);
}

__global__ void k_reset_cand(rs_ctr *ctr, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) ctr[i].cand = 0;
}

/* Detection and refinement of octave k. */
static void rs_detect(rs_state *St, rs_slot *L, const patina_gpu_rootsift_conf_t *c, size_t nb, int k,
                      const rs_kconf *C, int mw, int mh)
{
    const rs_item *hit = L->h_items;
    unsigned cap = 0;
    if (mw == 0) return;
    for (size_t i = 0; i < nb; i++)
        if (k < hit[i].O && hit[i].cand_cap > cap) cap = hit[i].cand_cap;
    rs_mark(L, 4);
    k_reset_cand<<<(unsigned)((nb + 127) / 128), 128, 0, L->st>>>(L->d_ctr, (int)nb);
    k_detect<<<grid2(mw - 2 > 0 ? mw - 2 : 1, mh - 2 > 0 ? mh - 2 : 1, nb), dim3(RS_BX, RS_BY), 0, L->st>>>(
        St->d_arena, L->d_items, L->d_ctr, k, c->first_octave, c->levels, c->peak);
    const unsigned blocks = (cap + 127) / 128 < RS_REF_BLOCKS ? (cap + 127) / 128 : RS_REF_BLOCKS;
    k_refine<<<dim3(blocks, (unsigned)nb), 128, 0, L->st>>>(St->d_arena, L->d_items, L->d_ctr, k, c->first_octave, *C);
}

static void rs_kconf_of(rs_kconf *C, const patina_gpu_rootsift_conf_t *c)
{
    memset(C, 0, sizeof *C);
    C->S = c->levels;
    C->omin = c->first_octave;
    C->budget = c->budget;
    C->quant = c->quant;
    C->w0 = c->w0;
    C->tp = c->peak;
    C->te = c->edge;
    C->sigma0 = c->sigma0;
    C->qscale = c->qscale;
    C->rec_bytes = c->rec_bytes;
}

/* Queues the slot's sub-batch (its image table laid out, its grey levels
 * staged in h_grey, grey bytes of them) on the slot's stream, up to its
 * records and counters in the slot's pinned buffers. */
static patina_status rs_enqueue_ops(rs_state *St, rs_slot *L, const patina_gpu_rootsift_conf_t *c, size_t grey)
{
    const cudaStream_t st = L->st;
    const rs_item *hit = L->h_items;
    const size_t nb = L->nb;
    rs_kconf C;
    int Omax = 0, mw = 0, mh = 0, mH = 0;
    rs_kconf_of(&C, c);
    L->nev = 0;
    rs_mark(L, 0);
    PGPU_CU(cudaMemcpyAsync(L->d_items, hit, nb * sizeof(rs_item), cudaMemcpyHostToDevice, st));
    PGPU_CU(cudaMemsetAsync(L->d_ctr, 0, nb * sizeof(rs_ctr), st));
    if (!L->ndev) {
        PGPU_CU(cudaMemcpyAsync(St->d_arena + hit[0].off_grey, L->h_grey, grey, cudaMemcpyHostToDevice, st));
    } else { /* runs of host images copied from the staging; device images converted in place */
        size_t b0 = 0;
        for (size_t b = 0; b <= nb; b++) {
            if (b < nb && !L->dsrc[b]) continue;
            if (b > b0) {
                const size_t o0 = hit[b0].off_grey - hit[0].off_grey,
                             o1 = (b < nb ? hit[b].off_grey - hit[0].off_grey : grey);
                PGPU_CU(cudaMemcpyAsync(St->d_arena + hit[b0].off_grey, L->h_grey + o0, o1 - o0,
                                        cudaMemcpyHostToDevice, st));
            }
            if (b < nb) {
                const int w = hit[b].W, h = hit[b].H;
                k_grey_rgb<<<dim3((unsigned)((w + 255) / 256), (unsigned)(h < 1024 ? h : 1024)), 256, 0, st>>>(
                    L->dsrc[b], L->dstride[b], w, h, St->d_arena + hit[b].off_grey);
            }
            b0 = b + 1;
        }
        PGPU_CU(cudaGetLastError());
    }
    PGPU_CU(cudaMemsetAsync(St->d_arena + hit[0].off_rec, 0, nb * c->rec_bytes, st));
    for (size_t i = 0; i < nb; i++) {
        Omax = hit[i].O > Omax ? hit[i].O : Omax;
        mw = hit[i].w > mw ? hit[i].w : mw;
        mh = hit[i].h > mh ? hit[i].h : mh;
        mH = hit[i].H > mH ? hit[i].H : mH;
    }
    rs_mark(L, 1);
    k_down_rows<<<grid2(mw, mH, nb), dim3(RS_BX, RS_BY), 0, st>>>(St->d_arena, L->d_items);
    k_down_cols<<<grid2(mw, mh, nb), dim3(RS_BX, RS_BY), 0, st>>>(St->d_arena, L->d_items);
    for (int k = 0; k < Omax; k++) {
        int kw, kh;
        rs_scale_space(St, L, c, nb, k, &kw, &kh);
        rs_detect(St, L, c, nb, k, &C, kw, kh);
    }
    rs_mark(L, 5);
    { /* sort; orientations of the ranks the take reads (timed as stage 4); take */
        const unsigned k1 = St->orient == RS_ORIENT_LATE2 ? 0u : (unsigned)c->budget;
        const unsigned b1 = (k1 + RS_REF_WARPS - 1) / RS_REF_WARPS;
        k_select<<<(unsigned)nb, RS_SEL_THREADS, St->sel_cap * sizeof(rs_sortkey), st>>>(
            St->d_arena, L->d_items, L->d_ctr, C, St->sel_cap, RS_SEL_SORT);
        rs_mark(L, 4);
        if (b1)
            k_orient_rank<<<dim3(b1 < RS_REF_BLOCKS ? b1 : RS_REF_BLOCKS, (unsigned)nb), 32 * RS_REF_WARPS, 0, st>>>(
                St->d_arena, L->d_items, L->d_ctr, c->first_octave, C, St->d_expn, 0u, k1, 0);
        k_more<<<(unsigned)nb, 256, 0, st>>>(St->d_arena, L->d_items, L->d_ctr, k1, (unsigned)c->budget);
        k_orient_rank<<<dim3(RS_REF_BLOCKS, (unsigned)nb), 32 * RS_REF_WARPS, 0, st>>>(
            St->d_arena, L->d_items, L->d_ctr, c->first_octave, C, St->d_expn, k1, ~0u, 1);
        rs_mark(L, 5);
        k_select<<<(unsigned)nb, RS_SEL_THREADS, 0, st>>>(St->d_arena, L->d_items, L->d_ctr, C, St->sel_cap,
                                                         RS_SEL_TAKE);
    }
    rs_mark(L, 6);
    k_desc<<<dim3((unsigned)((c->budget + RS_DESC_WARPS - 1) / RS_DESC_WARPS), (unsigned)nb), 32 * RS_DESC_WARPS, 0,
             st>>>(St->d_arena, L->d_items, L->d_ctr, c->first_octave, C, St->d_expn);
    PGPU_CU(cudaGetLastError());
    rs_mark(L, 7);
    PGPU_CU(cudaMemcpyAsync(L->h_ctr, L->d_ctr, nb * sizeof(rs_ctr), cudaMemcpyDeviceToHost, st));
    PGPU_CU(cudaMemcpyAsync(L->h_rec, St->d_arena + hit[0].off_rec, nb * c->rec_bytes, cudaMemcpyDeviceToHost, st));
    rs_mark(L, -1);
    return PATINA_OK;
}

/* Whether the slot's key (the last one-image call's) is the one-image
 * sub-batch now laid out. */
static int rs_graph_key_same(const rs_state *St, const rs_slot *L)
{
    return L->gkeyed && L->nb == 1 && L->gkey_conf == St->conf_gen && L->gkey_ptr[0] == St->d_arena &&
           L->gkey_ptr[1] == L->h_grey && L->gkey_ptr[2] == L->h_rec && !memcmp(&L->gkey, &L->h_items[0], sizeof L->gkey);
}

/* The key of the one-image sub-batch now laid out, without a graph yet. */
static void rs_graph_key_set(const rs_state *St, rs_slot *L)
{
    if (L->gexec) {
        (void)cudaGraphExecDestroy(L->gexec);
        L->gexec = NULL;
    }
    L->gvalid = 0;
    L->gkeyed = 1;
    L->gkey = L->h_items[0];
    L->gkey_ptr[0] = St->d_arena;
    L->gkey_ptr[1] = L->h_grey;
    L->gkey_ptr[2] = L->h_rec;
    L->gkey_conf = St->conf_gen;
}

/* The one-image sub-batch captured as the slot's graph (no stage marks in
 * it); 0 when capture or instantiation fails (the caller queues the
 * operations directly, and the key is dropped). */
static int rs_graph_make(rs_state *St, rs_slot *L, const patina_gpu_rootsift_conf_t *c, size_t grey)
{
    cudaGraph_t gr = NULL;
    patina_status s;
    cudaError_t e;
    if (cudaStreamBeginCapture(L->st, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        (void)cudaGetLastError();
        L->gkeyed = 0;
        return 0;
    }
    L->marks = 0;
    s = rs_enqueue_ops(St, L, c, grey);
    L->marks = 1;
    e = cudaStreamEndCapture(L->st, &gr);
    if (s == PATINA_OK && e == cudaSuccess && gr && cudaGraphInstantiate(&L->gexec, gr, 0) == cudaSuccess) {
        L->gvalid = 1;
    } else {
        L->gexec = NULL;
        L->gkeyed = 0;
    }
    if (gr) (void)cudaGraphDestroy(gr);
    (void)cudaGetLastError();
    return L->gvalid;
}

/* Queues the slot's sub-batch and its done event. A call of one image (the
 * query's latency case) whose layout, buffers and configuration are those
 * of the slot's previous one-image call runs as a CUDA graph, captured the
 * second time and replayed from then on: one launch instead of about a
 * hundred (its stages are not timed). A one-image call unlike the previous
 * one is queued directly and becomes the key, so that images of ever
 * changing sizes never pay for a capture. */
static patina_status rs_enqueue(rs_state *St, rs_slot *L, const patina_gpu_rootsift_conf_t *c, size_t grey, int graph)
{
    L->nev = 0;
    if (graph && L->nb == 1) {
        if (rs_graph_key_same(St, L)) {
            if (L->gvalid || rs_graph_make(St, L, c, grey)) {
                PGPU_CU(cudaGraphLaunch(L->gexec, L->st));
                PGPU_CU(cudaEventRecord(L->done, L->st));
                L->busy = 1;
                return PATINA_OK;
            }
        } else {
            rs_graph_key_set(St, L);
        }
    }
    PATINA_TRY(rs_enqueue_ops(St, L, c, grey));
    PGPU_CU(cudaEventRecord(L->done, L->st));
    L->busy = 1;
    return PATINA_OK;
}

/* Where image i's record goes (patina_gpu_rootsift). */
static uint8_t *rs_out(uint8_t *out, const patina_gpu_rootsift_item_t *items, size_t i, size_t rec_bytes)
{
    return items[i].out ? items[i].out : out + i * rec_bytes;
}

/* Waits for the slot's sub-batch and hands its records and statuses to the
 * call's outputs and st. */
static patina_status rs_finish(rs_state *St, rs_slot *L, const patina_gpu_rootsift_conf_t *c, uint8_t *out,
                               const patina_gpu_rootsift_item_t *items, patina_status *sts)
{
    if (!L->busy) return PATINA_OK;
    L->busy = 0;
    PGPU_CU(cudaEventSynchronize(L->done));
    rs_collect(St, L);
    St->batches++;
    for (size_t b = 0; b < L->nb; b++) {
        uint8_t *o = rs_out(out, items, L->i0 + b, c->rec_bytes);
        if (L->h_ctr[b].over) {
            sts[L->i0 + b] = PATINA_E_LIMIT;
            memset(o, 0, c->rec_bytes);
        } else {
            sts[L->i0 + b] = PATINA_OK;
            memcpy(o, L->h_rec + b * c->rec_bytes, c->rec_bytes);
        }
    }
    return PATINA_OK;
}

/* Every slot finished (the first error kept; the others still waited for). */
static patina_status rs_drain(rs_state *St, const patina_gpu_rootsift_conf_t *c, uint8_t *out,
                              const patina_gpu_rootsift_item_t *items, patina_status *sts)
{
    patina_status s = PATINA_OK;
    for (int j = 0; j < RS_NSLOT; j++) {
        patina_status sj = rs_finish(St, &St->sl[j], c, out, items, sts);
        if (s == PATINA_OK) s = sj;
    }
    return s;
}

/* Pinned buffer *p of at least `need` bytes (contents not kept). */
static patina_status rs_grow_pinned(patina_gpu_t *g, uint8_t **p, size_t *cap, size_t need, const char *tag)
{
    if (*p && *cap >= need) return PATINA_OK;
    pgpu_free(g, *p);
    *p = NULL;
    *cap = 0;
    need += need / 4; /* room for the next sizes */
    PATINA_TRY(pgpu_pin_alloc(g, (void **)p, need, PGPU_FAM_ROOTSIFT, tag));
    *cap = need;
    return PATINA_OK;
}

static void rs_grey_task(void *arg, size_t j, int worker)
{
    const rs_band *b = &((const rs_band *)arg)[j];
    const patina_image_t *img = b->img;
    (void)worker;
    for (int y = b->r0; y < b->r1; y++) {
        const uint8_t *p = img->data + (size_t)y * img->stride;
        uint8_t *q = b->dst + (size_t)y * (size_t)img->width;
        for (int x = 0; x < img->width; x++, p += 3) q[x] = grey_bt601(p[0], p[1], p[2]);
    }
}

/* Whether img's pixels are in memory kernels on g's device can read: its
 * device memory, or managed memory. */
static int rs_dev_image(const patina_gpu_t *g, const patina_image_t *img)
{
    cudaPointerAttributes a;
    if (!img || !img->data) return 0;
    if (cudaPointerGetAttributes(&a, img->data) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return (a.type == cudaMemoryTypeDevice && a.device == g->device) || a.type == cudaMemoryTypeManaged;
}

/* The grey levels of in[0 .. nb) into the slot's h_grey (rs_layout_batch's
 * grey block), by the context's host threads in bands of rows; an image in
 * this device's memory is not staged: the slot's dsrc names it, and
 * rs_enqueue_ops makes its grey levels on the device (k_grey_rgb). An image
 * in another device's memory is copied to the host first. */
static patina_status rs_stage(patina_gpu_t *g, rs_state *St, rs_slot *L, const patina_gpu_rootsift_item_t *in,
                              size_t nb)
{
    uint8_t *const h_grey = L->h_grey;
    size_t nbands = 0, off = 0;
    patina_image_t *hv = NULL; /* host views of images decoded on another GPU (the bands read host memory) */
    L->ndev = 0;
    for (size_t b = 0; b < nb; b++) {
        const patina_image_t *img = in[b].img;
        L->dsrc[b] = NULL;
        if (rs_dev_image(g, img)) {
            L->dsrc[b] = img->data;
            L->dstride[b] = img->stride;
            L->ndev++;
            off += (size_t)img->width * (size_t)img->height;
            continue;
        }
        if (patina_gpu_image_on_device(img)) {
            patina_status s;
            if (!hv && !(hv = (patina_image_t *)calloc(nb, sizeof *hv)))
                return patina__fail(PATINA_E_NOMEM, "gpu: rootsift: out of host memory");
            if ((s = patina_gpu_image_host(&hv[b], img)) != PATINA_OK) {
                for (size_t i = 0; i < b; i++) patina_image_release(&hv[i]);
                free(hv);
                return s;
            }
            img = &hv[b];
        }
        const size_t rows = RS_BAND_BYTES / (3 * (size_t)img->width) > 0 ? RS_BAND_BYTES / (3 * (size_t)img->width) : 1;
        const size_t need = nbands + ((size_t)img->height + rows - 1) / rows;
        if (need > St->band_cap) {
            rs_band *q = (rs_band *)realloc(St->band, 2 * need * sizeof *q);
            if (!q) {
                for (size_t i = 0; hv && i < nb; i++) patina_image_release(&hv[i]);
                free(hv);
                return patina__fail(PATINA_E_NOMEM, "gpu: rootsift: out of host memory");
            }
            St->band = q;
            St->band_cap = 2 * need;
        }
        for (size_t r = 0; r < (size_t)img->height; r += rows) {
            rs_band *bd = &St->band[nbands++];
            bd->img = img;
            bd->dst = h_grey + off;
            bd->r0 = (int)r;
            bd->r1 = (int)(r + rows < (size_t)img->height ? r + rows : (size_t)img->height);
        }
        off += (size_t)img->width * (size_t)img->height;
    }
    if (nbands > 1 && g->pool)
        patina_pool_run(g->pool, nbands, rs_grey_task, St->band);
    else
        for (size_t j = 0; j < nbands; j++) rs_grey_task(St->band, j, 0);
    for (size_t i = 0; hv && i < nb; i++) patina_image_release(&hv[i]);
    free(hv);
    return PATINA_OK;
}

/* The configuration on the device, uploaded when it differs from the last
 * one (every slot idle). The slots' streams wait for it. */
static patina_status rs_upload_conf(rs_state *St, const patina_gpu_rootsift_conf_t *c)
{
    const cudaStream_t st = St->sl[0].st;
    float *h = St->h_filt;
    if (St->conf_ok && !memcmp(&St->conf, c, sizeof *c)) return PATINA_OK;
    St->conf_ok = 0;
    PGPU_CU(cudaStreamSynchronize(st)); /* h_filt is free */
    memset(h, 0, (PGPU_RS_MAXLEV + 3) * PGPU_RS_MAXTAPS * sizeof(float));
    memcpy(h, c->filt0, sizeof c->filt0);
    for (int l = 0; l < c->levels + 2; l++) memcpy(h + (size_t)(l + 1) * PGPU_RS_MAXTAPS, c->filt[l], sizeof c->filt[l]);
    memcpy(&St->conf, c, sizeof *c);
    St->conf_gen++;
    PGPU_CU(cudaMemcpyAsync(St->d_filt, h, (PGPU_RS_MAXLEV + 3) * PGPU_RS_MAXTAPS * sizeof(float),
                            cudaMemcpyHostToDevice, st));
    PGPU_CU(cudaMemcpyAsync(St->d_expn, St->conf.expn, sizeof c->expn, cudaMemcpyHostToDevice, st));
    PGPU_CU(cudaEventRecord(St->conf_ev, st));
    for (int j = 1; j < RS_NSLOT; j++) PGPU_CU(cudaStreamWaitEvent(St->sl[j].st, St->conf_ev, 0));
    St->conf_ok = 1;
    return PATINA_OK;
}

static patina_status rs_check_conf(const patina_gpu_rootsift_conf_t *c)
{
    if (!c || c->levels < 1 || c->levels > PGPU_RS_MAXLEV || c->first_octave < -1 || c->first_octave > 3 ||
        c->budget < 1 || c->w0 < 0 || 2 * c->w0 + 1 > PGPU_RS_MAXTAPS)
        return patina__fail(PATINA_E_INVALID, "gpu: rootsift: bad configuration");
    for (int l = 0; l < c->levels + 2; l++)
        if (c->fw[l] < 1 || 2 * c->fw[l] + 1 > PGPU_RS_MAXTAPS)
            return patina__fail(PATINA_E_INVALID, "gpu: rootsift: filter %d of width %d", l, c->fw[l]);
    return PATINA_OK;
}

/* The arena a call wants: two slots' worth of its largest sub-batch (cut by
 * RS_SUB_IMG and RS_SUB_PX alone), no more than its images need together,
 * within half the budget. */
static size_t rs_arena_want(const rs_state *St, const patina_gpu_rootsift_item_t *items, size_t n, size_t half_budget)
{
    size_t total = 0, best = 0, cur = 0, px = 0, cnt = 0;
    for (size_t i = 0; i < n; i++) {
        const size_t p = (size_t)items[i].w * (size_t)items[i].h;
        if (cnt == RS_SUB_IMG || (cnt && px + p > RS_SUB_PX)) {
            best = cur > best ? cur : best;
            cur = px = cnt = 0;
        }
        cur += St->need[i];
        px += p;
        cnt++;
        total += St->need[i];
    }
    best = cur > best ? cur : best;
    best *= RS_NSLOT;
    if (total < best) best = total;
    return best < half_budget ? best : half_budget;
}

/* The call's sub-batches through the slots (see "The pipeline"). */
static patina_status rs_run(patina_gpu_t *g, rs_state *St, const patina_gpu_rootsift_conf_t *c, uint8_t *out,
                            const patina_gpu_rootsift_item_t *items, size_t n, patina_status *sts)
{
    const size_t half = St->arena_cap / RS_NSLOT & ~(size_t)255;
    int k = 0;
    for (size_t i = 0; i < n;) {
        rs_slot *L;
        size_t nb = 0, bytes = 0, px = 0, base, limit, grey;
        int wide;
        if (St->need[i] > St->arena_cap) { /* never fits: the caller's */
            sts[i] = PATINA_E_LIMIT;
            memset(rs_out(out, items, i, c->rec_bytes), 0, c->rec_bytes);
            i++;
            continue;
        }
        wide = St->need[i] > half;
        if (wide) PATINA_TRY(rs_drain(St, c, out, items, sts));
        L = &St->sl[k];
        PATINA_TRY(rs_finish(St, L, c, out, items, sts));
        base = wide ? 0 : (size_t)k * half;
        limit = wide ? St->arena_cap : half;
        while (i + nb < n && nb < RS_SUB_IMG) {
            const size_t p = (size_t)items[i + nb].w * (size_t)items[i + nb].h;
            if (St->need[i + nb] > half && !wide) break;
            if (nb && (bytes + St->need[i + nb] > limit || px + p > RS_SUB_PX)) break;
            bytes += St->need[i + nb];
            px += p;
            nb++;
        }
        rs_layout_batch(L->h_items, c, items + i, nb, base, &grey);
        PATINA_TRY(rs_grow_pinned(g, &L->h_grey, &L->grey_cap, grey, "grey staging"));
        PATINA_TRY(rs_grow_pinned(g, &L->h_rec, &L->rec_cap, nb * c->rec_bytes, "records"));
        PATINA_TRY(rs_stage(g, St, L, items + i, nb));
        L->i0 = i;
        L->nb = nb;
        /* a graph replays its copy from h_grey: none for a device image */
        PATINA_TRY(rs_enqueue(St, L, c, grey, n == 1 && !L->ndev));
        if (wide) PATINA_TRY(rs_finish(St, L, c, out, items, sts));
        i += nb;
        k = (k + 1) % RS_NSLOT;
    }
    return rs_drain(St, c, out, items, sts);
}

extern "C" patina_status patina_gpu_rootsift(patina_gpu_t *g, const patina_gpu_rootsift_conf_t *c, uint8_t *out,
                                             const patina_gpu_rootsift_item_t *items, size_t n, patina_status *st)
{
    rs_state *St;
    size_t cap;
    patina_status s;
    if (!g || !st || (n && !items)) return patina__fail(PATINA_E_INVALID, "gpu: rootsift: null argument");
    for (size_t i = 0; !out && i < n; i++)
        if (!items[i].out) return patina__fail(PATINA_E_INVALID, "gpu: rootsift: no output for image %zu", i);
    PATINA_TRY(rs_check_conf(c));
    if (n == 0) return PATINA_OK;
    PGPU_CU(cudaSetDevice(g->device));
    PATINA_TRY(rs_state_of(g, &St));
    if (St->need_cap < n) {
        size_t *q = (size_t *)realloc(St->need, n * sizeof *q);
        if (!q) return patina__fail(PATINA_E_NOMEM, "gpu: rootsift: out of host memory");
        St->need = q;
        St->need_cap = n;
    }
    for (size_t i = 0; i < n; i++) St->need[i] = rs_need(c, &items[i]);
    cap = rs_arena_want(St, items, n, (size_t)(g->budget / 2));
    s = rs_upload_conf(St, c);
    if (s == PATINA_OK && St->arena_cap < cap) {
        pgpu_free(g, St->d_arena);
        St->d_arena = NULL;
        St->arena_cap = 0;
        s = pgpu_dev_alloc(g, (void **)&St->d_arena, cap, PGPU_FAM_ROOTSIFT, "arena");
        if (s == PATINA_OK) St->arena_cap = cap;
    }
    if (s == PATINA_OK) s = rs_run(g, St, c, out, items, n, st);
    if (s != PATINA_OK) { /* nothing left in flight */
        for (int j = 0; j < RS_NSLOT; j++) {
            (void)cudaStreamSynchronize(St->sl[j].st);
            St->sl[j].busy = 0;
            St->sl[j].nev = 0;
        }
        (void)cudaGetLastError();
    }
    return s;
}

extern "C" void patina_gpu__rootsift_times(patina_gpu_t *g, double ms[PGPU_RS_STAGES], size_t *batches)
{
    rs_state *S = g ? (rs_state *)pgpu_state(g, PGPU_FAM_ROOTSIFT) : NULL;
    for (int k = 0; k < PGPU_RS_STAGES; k++) {
        ms[k] = S ? S->ms[k] : 0.0;
        if (S) S->ms[k] = 0.0;
    }
    if (batches) *batches = S ? S->batches : 0;
    if (S) S->batches = 0;
}

extern "C" patina_status patina_gpu__rootsift_orientations(patina_gpu_t *g, int variant)
{
    rs_state *St;
    if (!g || (variant != RS_ORIENT_LATE && variant != RS_ORIENT_LATE2))
        return patina__fail(PATINA_E_INVALID, "gpu: rootsift: no orientation variant %d", variant);
    PGPU_CU(cudaSetDevice(g->device));
    PATINA_TRY(rs_state_of(g, &St));
    for (int j = 0; j < RS_NSLOT; j++) PGPU_CU(cudaStreamSynchronize(St->sl[j].st));
    if (St->orient != variant) St->conf_gen++; /* the one-image graphs hold the other kernels */
    St->orient = variant;
    return PATINA_OK;
}

extern "C" patina_status patina_gpu__rootsift_smoothing(patina_gpu_t *g, int variant)
{
    rs_state *St;
    if (!g || (variant != RS_SMOOTH_REG && variant != RS_SMOOTH_TILE))
        return patina__fail(PATINA_E_INVALID, "gpu: rootsift: no smoothing variant %d", variant);
    PGPU_CU(cudaSetDevice(g->device));
    PATINA_TRY(rs_state_of(g, &St));
    for (int j = 0; j < RS_NSLOT; j++) PGPU_CU(cudaStreamSynchronize(St->sl[j].st));
    if (St->smooth != variant) St->conf_gen++; /* the one-image graphs hold the other kernels */
    St->smooth = variant;
    return PATINA_OK;
}

/* Test hook: one image's float input (w, h) through the first octave's
 * levels and the following ones up to octave k; levels and DoG of octave k
 * copied back. */
extern "C" patina_status patina_gpu__rootsift_octave(patina_gpu_t *g, const patina_gpu_rootsift_conf_t *c,
                                                     const float *im, int w, int h, int octaves, int k, float *levels,
                                                     float *dog)
{
    rs_state *St;
    rs_slot *L;
    patina_gpu_rootsift_item_t in;
    patina_image_t fake;
    rs_item *it;
    size_t bytes, grey;
    cudaStream_t st;
    int mw, mh;
    if (!g || !im || w < 1 || h < 1 || k < 0 || k >= octaves || octaves > PGPU_RS_MAXOCT)
        return patina__fail(PATINA_E_INVALID, "gpu: rootsift: bad octave request");
    PATINA_TRY(rs_check_conf(c));
    PGPU_CU(cudaSetDevice(g->device));
    PATINA_TRY(rs_state_of(g, &St));
    L = &St->sl[0];
    st = L->st;
    memset(&fake, 0, sizeof fake);
    fake.width = w;
    fake.height = h;
    fake.stride = 3 * (size_t)w;
    memset(&in, 0, sizeof in);
    in.img = &fake;
    in.w = w;
    in.h = h;
    in.octaves = octaves;
    in.sx = in.sy = 1.0;
    in.down = 1.0f;
    it = L->h_items;
    bytes = rs_layout_batch(it, c, &in, 1, 0, &grey);
    if (St->arena_cap < bytes) {
        pgpu_free(g, St->d_arena);
        St->d_arena = NULL;
        St->arena_cap = 0;
        PATINA_TRY(pgpu_dev_alloc(g, (void **)&St->d_arena, bytes, PGPU_FAM_ROOTSIFT, "arena"));
        St->arena_cap = bytes;
    }
    PATINA_TRY(rs_upload_conf(St, c));
    PGPU_CU(cudaMemcpyAsync(L->d_items, it, sizeof *it, cudaMemcpyHostToDevice, st));
    PGPU_CU(cudaMemcpyAsync(St->d_arena + it->off_img, im, (size_t)w * h * sizeof(float), cudaMemcpyHostToDevice, st));
    L->nev = 0;
    for (int o = 0; o <= k; o++) rs_scale_space(St, L, c, 1, o, &mw, &mh);
    {
        const int ow = oct_dim(w, c->first_octave + k), oh = oct_dim(h, c->first_octave + k);
        const size_t pl = (size_t)ow * oh;
        for (int l = 0; levels && l < c->levels + 3; l++)
            PGPU_CU(cudaMemcpyAsync(levels + l * pl, (float *)(St->d_arena + it->off_lev) + l * it->plane,
                                    pl * sizeof(float), cudaMemcpyDeviceToHost, st));
        for (int l = 0; dog && l < c->levels + 2; l++)
            PGPU_CU(cudaMemcpyAsync(dog + l * pl, (float *)(St->d_arena + it->off_dog) + l * it->plane,
                                    pl * sizeof(float), cudaMemcpyDeviceToHost, st));
    }
    PGPU_CU(cudaStreamSynchronize(st));
    L->nev = 0;
    return PATINA_OK;
}
