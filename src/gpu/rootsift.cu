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
 *   - every histogram (orientations: double; descriptors: float) is filled
 *     by one thread in VLFeat's pixel order: no atomics on values;
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
 * Memory (state PGPU_FAM_ROOTSIFT): one arena from the context's budget
 * holding a batch: per image its RGB, the area downscale's row pass, the
 * float image, the current octave's S + 3 levels, a temporary level and
 * S + 2 DoG levels (the first octave's size, reused by every octave), the
 * gradients of every octave (the descriptors of the kept features need
 * them after the selection), the candidates of one octave, the keypoints,
 * the sort keys, the kept features and the record. */
#include <cuda_runtime.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algo/f16.h"
#include "algo/grey.h"
#include "gpu/context.h"

#define MiB ((size_t)1 << 20)
#define RS_BATCH_MAX 1024
#define NBO 8
#define NBP 4
#define RS_PI 3.141592653589793
#define RS_EPS_F 1.19209290E-07F
#define RS_EPS_D 2.220446049250313e-16
#define RS_KP_IDX_BITS 24

/* ------------------------------------------------------------ layout */

struct rs_ctr {
    unsigned cand, kp, feat, over; /* candidates (this octave), keypoints, kept features, overflow flag */
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
    size_t off_rgb, off_tmp, off_img, off_lev, off_temp, off_dog, off_cand, off_kp, off_sort, off_feat, off_rec;
    size_t off_grad[PGPU_RS_MAXOCT];
    size_t rgb_pitch;          /* bytes per RGB row (3 W) */
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

/* The float image (w, h) of image z: the grey levels, area-averaged when
 * downscaled (rows pass here into tmp (H, w), doubles summed in input
 * order, as area_downscale). */
__global__ void k_down_rows(uint8_t *arena, const rs_item *items)
{
    const rs_item &it = items[blockIdx.z];
    const int i = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (i >= it.w || y >= it.H) return;
    const uint8_t *row = arena + it.off_rgb + (size_t)y * it.rgb_pitch;
    if (it.w == it.W && it.h == it.H) { /* not downscaled: the grey levels */
        const uint8_t *p = row + 3 * (size_t)i;
        ((float *)(arena + it.off_img))[(size_t)y * it.w + i] = (float)grey_bt601(p[0], p[1], p[2]);
        return;
    }
    const double sx = (double)it.W / it.w;
    const double a = i * sx, b = (i + 1) * sx;
    const int k0 = (int)floor(a), k1 = (int)ceil(b) < it.W ? (int)ceil(b) : it.W;
    double acc = 0.0;
    for (int k = k0; k < k1; k++) {
        const double lo = a > k ? a : k, hi = b < k + 1 ? b : k + 1;
        const uint8_t *p = row + 3 * (size_t)k;
        acc += (hi - lo) * grey_bt601(p[0], p[1], p[2]);
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
 * result; a + b in float, halved). */
__global__ void k_first(uint8_t *arena, const rs_item *items, int omin)
{
    const rs_item &it = items[blockIdx.z];
    const int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= it.w0 || y >= it.h0) return;
    const float *im = (const float *)(arena + it.off_img);
    float *lev = (float *)(arena + it.off_lev);
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

/* Refinement (vl_sift_detect), then orientations
 * (vl_sift_calc_keypoint_orientations) of one candidate per thread. */
__global__ void k_refine(uint8_t *arena, const rs_item *items, rs_ctr *ctr, int oct, int omin, rs_kconf C,
                         const double *expn)
{
    const rs_item &it = items[blockIdx.y];
    if (oct >= it.O) return;
    const unsigned ci = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned nc = ctr[blockIdx.y].cand < it.cand_cap ? ctr[blockIdx.y].cand : it.cand_cap;
    if (ci >= nc) return;
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

    /* orientations */
    {
        const double winf = 1.5;
        const double kx = k.x / xper, ky = k.y / xper, sigma = k.sigma / xper;
        const int xi = (int)(kx + 0.5), yi = (int)(ky + 0.5), si = k.is;
        const double sigmaw = winf * sigma;
        const int Wn = (int)fmax(floor(3.0 * sigmaw), 1.0);
        enum { nbins = 36 };
        double hist[nbins], maxh;
        if (!(xi < 0 || xi > w - 1 || yi < 0 || yi > h - 1 || si < s_min + 1 || si > s_max - 2)) {
            const float *gp = (const float *)(arena + it.off_grad[oct]) +
                              2 * ((size_t)(si - s_min - 1) * (size_t)w * h + (size_t)yi * w + xi);
            for (int i = 0; i < nbins; i++) hist[i] = 0;
            const int ylo = -Wn > -yi ? -Wn : -yi, yhi = Wn < h - 1 - yi ? Wn : h - 1 - yi;
            const int xlo = -Wn > -xi ? -Wn : -xi, xhi = Wn < w - 1 - xi ? Wn : w - 1 - xi;
            for (int ys = ylo; ys <= yhi; ++ys)
                for (int xs = xlo; xs <= xhi; ++xs) {
                    const double ddx = (double)(xi + xs) - kx, ddy = (double)(yi + ys) - ky;
                    const double r2 = ddx * ddx + ddy * ddy;
                    if (r2 >= Wn * Wn + 0.6) continue;
                    const double wgt = fast_expn(expn, r2 / (2 * sigmaw * sigmaw));
                    const double mod = gp[2 * (xs + (ptrdiff_t)ys * w)];
                    const double ang = gp[2 * (xs + (ptrdiff_t)ys * w) + 1];
                    const double fbin = nbins * ang / (2 * RS_PI);
                    const int bin = (int)vfloor_d(fbin - 0.5);
                    const double rbin = fbin - bin - 0.5;
                    hist[(bin + nbins) % nbins] += (1 - rbin) * mod * wgt;
                    hist[(bin + 1) % nbins] += (rbin)*mod * wgt;
                }
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
    }
    const unsigned slot = atomicAdd(&ctr[blockIdx.y].kp, 1u);
    if (slot >= it.kp_cap) {
        ctr[blockIdx.y].over = 1;
        return;
    }
    ((rs_kp *)(arena + it.off_kp))[slot] = k;
    rs_sortkey sk;
    sk.peak = k.peak;
    sk.seq = ((unsigned long long)oct << 58) | ((unsigned long long)key << RS_KP_IDX_BITS) | slot;
    ((rs_sortkey *)(arena + it.off_sort))[slot] = sk;
}

/* ------------------------------------------------------------ selection */

__device__ static inline bool rs_better(const rs_sortkey &a, const rs_sortkey &b)
{
    return a.peak > b.peak || (a.peak == b.peak && a.seq < b.seq);
}

/* One block per image: the keypoints sorted by (|peak| descending, VLFeat
 * order), then their orientations taken in that order up to the budget
 * (the kept features: keypoint index << 2 | orientation); the header. */
__global__ void k_select(uint8_t *arena, const rs_item *items, rs_ctr *ctr, rs_kconf C)
{
    const rs_item &it = items[blockIdx.x];
    rs_ctr *c = &ctr[blockIdx.x];
    const unsigned n = c->kp < it.kp_cap ? c->kp : it.kp_cap;
    rs_sortkey *sk = (rs_sortkey *)(arena + it.off_sort);
    unsigned P = 1;
    while (P < n) P <<= 1;
    for (unsigned i = n + threadIdx.x; i < P; i += blockDim.x) {
        sk[i].peak = -1.0;
        sk[i].seq = ~0ull;
    }
    __syncthreads();
    for (unsigned k = 2; k <= P; k <<= 1)
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
    if (threadIdx.x != 0) return;
    const rs_kp *kp = (const rs_kp *)(arena + it.off_kp);
    unsigned *feat = (unsigned *)(arena + it.off_feat);
    unsigned m = 0;
    for (unsigned i = 0; i < n && m < (unsigned)C.budget; i++) {
        const unsigned idx = (unsigned)(sk[i].seq & ((1u << RS_KP_IDX_BITS) - 1));
        for (int a = 0; a < kp[idx].nang && m < (unsigned)C.budget; a++) feat[m++] = idx << 2 | (unsigned)a;
    }
    c->feat = m;
    uint8_t *rec = arena + it.off_rec;
    const uint32_t hdr[10] = {m, 1u, (uint32_t)C.budget, (uint32_t)C.quant, __float_as_uint(C.qscale),
                              __float_as_uint(it.down), (uint32_t)it.w, (uint32_t)it.h, (uint32_t)it.W, (uint32_t)it.H};
    for (int k = 0; k < 10; k++)
        for (int b = 0; b < 4; b++) rec[4 * k + b] = (uint8_t)(hdr[k] >> (8 * b));
}

/* ------------------------------------------------------------ descriptors */

/* One kept feature per thread: vl_sift_calc_keypoint_descriptor (float
 * histogram filled in VLFeat's pixel and bin order), RootSIFT in double,
 * the quantised row and the geometry. */
__global__ void k_desc(uint8_t *arena, const rs_item *items, const rs_ctr *ctr, int omin, rs_kconf C,
                       const double *expn)
{
    const rs_item &it = items[blockIdx.y];
    const unsigned fi = blockIdx.x * blockDim.x + threadIdx.x;
    if (fi >= ctr[blockIdx.y].feat) return;
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
    const int binto = 1, binyo = NBO * NBP, binxo = NBO;
    float descr[NBO * NBP * NBP];
    for (int i = 0; i < NBO * NBP * NBP; i++) descr[i] = 0;
    const int s_min = -1, s_max = C.S + 1;
    /* VLFeat leaves the descriptor unwritten out of these bounds; the CPU
     * path zeroes it first: zeros */
    if (!(xi < 0 || xi >= w || yi < 0 || yi >= h - 1 || si < s_min + 1 || si > s_max - 2)) {
        const float *pt = (const float *)(arena + it.off_grad[oct]) +
                          2 * ((size_t)(si - s_min - 1) * (size_t)w * h + (size_t)yi * w + xi);
        float *dpt = descr + (NBP / 2) * binyo + (NBP / 2) * binxo;
        const int ylo = -W > 1 - yi ? -W : 1 - yi, yhi = W < h - yi - 2 ? W : h - yi - 2;
        const int xlo = -W > 1 - xi ? -W : 1 - xi, xhi = W < w - xi - 2 ? W : w - xi - 2;
        for (int dyi = ylo; dyi <= yhi; ++dyi)
            for (int dxi = xlo; dxi <= xhi; ++dxi) {
                const float mod = pt[2 * (dxi + (ptrdiff_t)dyi * w)];
                const float angle = pt[2 * (dxi + (ptrdiff_t)dyi * w) + 1];
                const float theta = vmod2pi_f((float)(angle - angle0));
                const float dx = (float)(xi + dxi - x), dy = (float)(yi + dyi - y);
                const float nx = (float)((ct0 * dx + st0 * dy) / SBP);
                const float ny = (float)((-st0 * dx + ct0 * dy) / SBP);
                const float nt = (float)(NBO * theta / (2 * RS_PI));
                const float wsigma = 2; /* f->windowSize = NBP / 2 */
                const float win = (float)fast_expn(expn, (nx * nx + ny * ny) / (2.0 * wsigma * wsigma));
                const int binx = (int)vfloor_f((float)(nx - 0.5));
                const int biny = (int)vfloor_f((float)(ny - 0.5));
                const int bint = (int)vfloor_f(nt);
                const float rbinx = (float)(nx - (binx + 0.5));
                const float rbiny = (float)(ny - (biny + 0.5));
                const float rbint = nt - bint;
                for (int dbinx = 0; dbinx < 2; ++dbinx)
                    for (int dbiny = 0; dbiny < 2; ++dbiny)
                        for (int dbint = 0; dbint < 2; ++dbint)
                            if (binx + dbinx >= -(NBP / 2) && binx + dbinx < (NBP / 2) &&
                                biny + dbiny >= -(NBP / 2) && biny + dbiny < (NBP / 2)) {
                                const float weight = win * mod * fabsf(1 - dbinx - rbinx) *
                                                     fabsf(1 - dbiny - rbiny) * fabsf(1 - dbint - rbint);
                                dpt[((bint + dbint) % NBO) * binto + (biny + dbiny) * binyo +
                                    (binx + dbinx) * binxo] += weight;
                            }
            }
        for (int pass = 0; pass < 2; pass++) { /* normalise, clamp at 0.2, normalise */
            float norm = 0.0f;
            for (int i = 0; i < NBO * NBP * NBP; i++) norm += descr[i] * descr[i];
            norm = vsqrt_f(norm) + RS_EPS_F;
            for (int i = 0; i < NBO * NBP * NBP; i++) descr[i] /= norm;
            if (pass == 0)
                for (int i = 0; i < NBO * NBP * NBP; i++)
                    if (descr[i] > 0.2) descr[i] = 0.2;
        }
    }
    /* RootSIFT, quantisation, geometry */
    uint8_t *rec = arena + it.off_rec;
    const size_t eb = C.quant ? 2 : 1;
    uint8_t *row = rec + 64 + (size_t)fi * 128 * eb;
    double l1 = 0.0;
    for (int i = 0; i < 128; i++) l1 += descr[i];
    for (int i = 0; i < 128; i++) {
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
    uint8_t *geo = rec + 64 + (size_t)C.budget * 128 * eb + 16 * (size_t)fi;
    const float g4[4] = {(float)((k.x + 0.5) * it.sx - 0.5), (float)((k.y + 0.5) * it.sy - 0.5),
                         (float)(k.sigma * (double)it.down), (float)angle0};
    for (int q = 0; q < 4; q++) {
        const uint32_t u = __float_as_uint(g4[q]);
        for (int b = 0; b < 4; b++) geo[4 * q + b] = (uint8_t)(u >> (8 * b));
    }
}

/* ------------------------------------------------------------ host side */

#define RS_NEV 512

struct rs_state {
    uint8_t *d_arena;
    size_t arena_cap;
    rs_item *d_items, *h_items;
    rs_ctr *d_ctr, *h_ctr;
    float *d_filt;  /* (PGPU_RS_MAXLEV + 3, PGPU_RS_MAXTAPS): filt0 then filt[] */
    double *d_expn; /* 257 */
    cudaEvent_t ev[RS_NEV];     /* stage marks of one batch */
    int ev_stage[RS_NEV], nev;
    double ms[PGPU_RS_STAGES];
    size_t batches;
};

static void rs_release(patina_gpu_t *g, void *state)
{
    rs_state *S = (rs_state *)state;
    (void)cudaSetDevice(g->device);
    (void)cudaStreamSynchronize((cudaStream_t)pgpu_stream(g, 0));
    pgpu_free_n(g, 7, &S->d_arena, &S->d_items, &S->h_items, &S->d_ctr, &S->h_ctr, &S->d_filt, &S->d_expn);
    for (int k = 0; k < RS_NEV; k++)
        if (S->ev[k]) cudaEventDestroy(S->ev[k]);
    (void)cudaGetLastError();
    free(S);
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
    for (int k = 0; k < RS_NEV && s == PATINA_OK; k++)
        if (cudaEventCreate(&S->ev[k]) != cudaSuccess) {
            S->ev[k] = NULL;
            s = patina__fail(PATINA_E_GPU, "gpu: rootsift: cannot create an event");
        }
    if (s == PATINA_OK)
        s = pgpu_dev_alloc(g, (void **)&S->d_items, RS_BATCH_MAX * sizeof(rs_item), PGPU_FAM_ROOTSIFT, "image table");
    if (s == PATINA_OK)
        s = pgpu_pin_alloc(g, (void **)&S->h_items, RS_BATCH_MAX * sizeof(rs_item), PGPU_FAM_ROOTSIFT, "image table");
    if (s == PATINA_OK)
        s = pgpu_dev_alloc(g, (void **)&S->d_ctr, RS_BATCH_MAX * sizeof(rs_ctr), PGPU_FAM_ROOTSIFT, "counters");
    if (s == PATINA_OK)
        s = pgpu_pin_alloc(g, (void **)&S->h_ctr, RS_BATCH_MAX * sizeof(rs_ctr), PGPU_FAM_ROOTSIFT, "counters");
    if (s == PATINA_OK)
        s = pgpu_dev_alloc(g, (void **)&S->d_filt, (PGPU_RS_MAXLEV + 3) * PGPU_RS_MAXTAPS * sizeof(float),
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

/* The layout of one image from offset `base`; returns its bytes. */
static size_t rs_layout(rs_item *it, const patina_gpu_rootsift_conf_t *c, const patina_gpu_rootsift_item_t *in,
                        size_t base)
{
    const patina_image_t *img = in->img;
    const int S = c->levels, omin = c->first_octave;
    size_t off = base;
    memset(it, 0, sizeof *it);
    it->W = img->width;
    it->H = img->height;
    it->w = in->w;
    it->h = in->h;
    it->O = in->octaves;
    it->sx = in->sx;
    it->sy = in->sy;
    it->down = in->down;
    it->w0 = oct_dim(it->w, omin);
    it->h0 = oct_dim(it->h, omin);
    it->plane = (size_t)it->w0 * (size_t)it->h0;
    it->rgb_pitch = 3 * (size_t)it->W;
#define TAKE(field, bytes)           \
    do {                             \
        it->field = off;             \
        off += al256((size_t)(bytes)); \
    } while (0)
    TAKE(off_rgb, it->rgb_pitch * (size_t)it->H);
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
    TAKE(off_rec, c->rec_bytes);
#undef TAKE
    return off - base;
}

#define RS_BX 32
#define RS_BY 8

static dim3 grid2(int w, int h, size_t nz) { return dim3((unsigned)((w + RS_BX - 1) / RS_BX), (unsigned)((h + RS_BY - 1) / RS_BY), (unsigned)nz); }


/* Marks the start of a stage of the batch on st (the previous one ends). */
static void rs_mark(rs_state *S, int stage, cudaStream_t st)
{
    if (S->nev >= RS_NEV) return;
    cudaEventRecord(S->ev[S->nev], st);
    S->ev_stage[S->nev++] = stage;
}

/* After the batch's sync: the marks' intervals added to their stages. */
static void rs_collect(rs_state *S)
{
    for (int k = 0; k + 1 < S->nev; k++) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, S->ev[k], S->ev[k + 1]) == cudaSuccess && S->ev_stage[k] >= 0)
            S->ms[S->ev_stage[k]] += ms;
    }
    (void)cudaGetLastError();
    S->nev = 0;
}

/* Levels, DoG and gradients of octave k of the batch's images. */
static void rs_scale_space(rs_state *St, const patina_gpu_rootsift_conf_t *c, const rs_item *hit, size_t nb, int k,
                           cudaStream_t st, int *mw_out, int *mh_out)
{
    const int S = c->levels, omin = c->first_octave;
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
    rs_item *I = St->d_items;
    const float *F = St->d_filt; /* filt0, then filt[0 ..] */
    rs_mark(St, 1, st);
    if (k == 0) {
        int w0 = 0, h0 = 0;
        for (size_t i = 0; i < nb; i++) {
            w0 = hit[i].w0 > w0 ? hit[i].w0 : w0;
            h0 = hit[i].h0 > h0 ? hit[i].h0 : h0;
        }
        k_first<<<grid2(w0, h0, nb), B, 0, st>>>(A, I, omin);
        if (c->w0 > 0) {
            k_conv_v<<<G, B, 0, st>>>(A, I, 0, omin, 0, 0, 1, 0, F, c->w0);
            k_conv_h<<<G, B, 0, st>>>(A, I, 0, omin, 1, 0, 0, 0, F, c->w0);
        }
    } else {
        k_next_base<<<G, B, 0, st>>>(A, I, k, omin, S);
    }
    for (int l = 1; l <= S + 2; l++) { /* level s = s_min + l from level s - 1 */
        const float *f = F + (size_t)l * PGPU_RS_MAXTAPS;
        const int W = c->fw[l - 1];
        k_conv_v<<<G, B, 0, st>>>(A, I, k, omin, (size_t)(l - 1), 0, 1, 0, f, W);
        k_conv_h<<<G, B, 0, st>>>(A, I, k, omin, 1, 0, 0, (size_t)l, f, W);
    }
    rs_mark(St, 2, st);
    k_dog_grad<<<G, B, 0, st>>>(A, I, k, omin, S);
}

/* Detection, refinement and orientations of octave k. */
static void rs_detect(rs_state *St, const patina_gpu_rootsift_conf_t *c, const rs_item *hit, size_t nb, int k,
                      const rs_kconf *C, cudaStream_t st, int mw, int mh)
{
    unsigned cap = 0;
    if (mw == 0) return;
    for (size_t i = 0; i < nb; i++)
        if (k < hit[i].O && hit[i].cand_cap > cap) cap = hit[i].cand_cap;
    rs_mark(St, 3, st);
    /* zero the candidate counters (the first field of each rs_ctr) */
    k_detect<<<grid2(mw - 2 > 0 ? mw - 2 : 1, mh - 2 > 0 ? mh - 2 : 1, nb), dim3(RS_BX, RS_BY), 0, st>>>(
        St->d_arena, St->d_items, St->d_ctr, k, c->first_octave, c->levels, c->peak);
    k_refine<<<dim3((cap + 127) / 128, (unsigned)nb), 128, 0, st>>>(St->d_arena, St->d_items, St->d_ctr, k,
                                                                    c->first_octave, *C, St->d_expn);
}

__global__ void k_reset_cand(rs_ctr *ctr, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) ctr[i].cand = 0;
}

/* One batch: hit[0 .. nb) laid out in the arena, images in[]. */
static patina_status rs_batch(patina_gpu_t *g, rs_state *St, const patina_gpu_rootsift_conf_t *c,
                              const patina_gpu_rootsift_item_t *in, size_t nb, size_t bytes, uint8_t *const *outs,
                              patina_status *sts)
{
    cudaStream_t st = (cudaStream_t)pgpu_stream(g, 0);
    rs_item *hit = St->h_items;
    rs_kconf C;
    int Omax = 0;
    memset(&C, 0, sizeof C);
    C.S = c->levels;
    C.omin = c->first_octave;
    C.budget = c->budget;
    C.quant = c->quant;
    C.w0 = c->w0;
    C.tp = c->peak;
    C.te = c->edge;
    C.sigma0 = c->sigma0;
    C.qscale = c->qscale;
    C.rec_bytes = c->rec_bytes;
    St->nev = 0;
    rs_mark(St, 0, st);
    PGPU_CU(cudaMemcpyAsync(St->d_items, hit, nb * sizeof(rs_item), cudaMemcpyHostToDevice, st));
    PGPU_CU(cudaMemsetAsync(St->d_ctr, 0, nb * sizeof(rs_ctr), st));
    for (size_t i = 0; i < nb; i++) {
        const patina_image_t *img = in[i].img;
        /* host or device memory (an image decoded on the GPU): the copy engine reads either */
        PGPU_CU(cudaMemcpy2DAsync(St->d_arena + hit[i].off_rgb, hit[i].rgb_pitch, img->data, img->stride,
                                  hit[i].rgb_pitch, (size_t)img->height, cudaMemcpyDefault, st));
        PGPU_CU(cudaMemsetAsync(St->d_arena + hit[i].off_rec, 0, c->rec_bytes, st));
        Omax = hit[i].O > Omax ? hit[i].O : Omax;
    }
    {
        int mw = 0, mh = 0, mW = 0, mH = 0;
        for (size_t i = 0; i < nb; i++) {
            mw = hit[i].w > mw ? hit[i].w : mw;
            mh = hit[i].h > mh ? hit[i].h : mh;
            mH = hit[i].H > mH ? hit[i].H : mH;
            mW = hit[i].W > mW ? hit[i].W : mW;
        }
        (void)mW;
        k_down_rows<<<grid2(mw, mH, nb), dim3(RS_BX, RS_BY), 0, st>>>(St->d_arena, St->d_items);
        k_down_cols<<<grid2(mw, mh, nb), dim3(RS_BX, RS_BY), 0, st>>>(St->d_arena, St->d_items);
    }
    for (int k = 0; k < Omax; k++) {
        int mw, mh;
        rs_scale_space(St, c, hit, nb, k, st, &mw, &mh);
        k_reset_cand<<<(unsigned)((nb + 127) / 128), 128, 0, st>>>(St->d_ctr, (int)nb);
        rs_detect(St, c, hit, nb, k, &C, st, mw, mh);
    }
    rs_mark(St, 4, st);
    k_select<<<(unsigned)nb, 1024, 0, st>>>(St->d_arena, St->d_items, St->d_ctr, C);
    rs_mark(St, 5, st);
    k_desc<<<dim3((unsigned)((c->budget + 63) / 64), (unsigned)nb), 64, 0, st>>>(St->d_arena, St->d_items, St->d_ctr,
                                                                               c->first_octave, C, St->d_expn);
    PGPU_CU(cudaGetLastError());
    rs_mark(St, 6, st);
    PGPU_CU(cudaMemcpyAsync(St->h_ctr, St->d_ctr, nb * sizeof(rs_ctr), cudaMemcpyDeviceToHost, st));
    for (size_t i = 0; i < nb; i++)
        PGPU_CU(cudaMemcpyAsync(outs[i], St->d_arena + hit[i].off_rec, c->rec_bytes, cudaMemcpyDeviceToHost, st));
    rs_mark(St, -1, st);
    PGPU_CU(cudaStreamSynchronize(st));
    rs_collect(St);
    St->batches++;
    for (size_t i = 0; i < nb; i++) {
        sts[i] = PATINA_OK;
        if (St->h_ctr[i].over) {
            sts[i] = PATINA_E_LIMIT;
            memset(outs[i], 0, c->rec_bytes);
        }
    }
    (void)bytes;
    return PATINA_OK;
}

static patina_status rs_upload_conf(rs_state *St, const patina_gpu_rootsift_conf_t *c, cudaStream_t st)
{
    float *h = (float *)calloc((PGPU_RS_MAXLEV + 3) * PGPU_RS_MAXTAPS, sizeof(float));
    patina_status s = PATINA_OK;
    if (!h) return patina__fail(PATINA_E_NOMEM, "gpu: rootsift: out of host memory");
    memcpy(h, c->filt0, sizeof c->filt0);
    for (int l = 0; l < c->levels + 2; l++) memcpy(h + (size_t)(l + 1) * PGPU_RS_MAXTAPS, c->filt[l], sizeof c->filt[l]);
    if (cudaMemcpyAsync(St->d_filt, h, (PGPU_RS_MAXLEV + 3) * PGPU_RS_MAXTAPS * sizeof(float), cudaMemcpyHostToDevice,
                        st) != cudaSuccess ||
        cudaMemcpyAsync(St->d_expn, c->expn, sizeof c->expn, cudaMemcpyHostToDevice, st) != cudaSuccess ||
        cudaStreamSynchronize(st) != cudaSuccess)
        s = pgpu_fail((int)cudaGetLastError(), "rootsift: uploading the filters", __FILE__, __LINE__);
    free(h);
    return s;
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

extern "C" patina_status patina_gpu_rootsift(patina_gpu_t *g, const patina_gpu_rootsift_conf_t *c, uint8_t *out,
                                             const patina_gpu_rootsift_item_t *items, size_t n, patina_status *st)
{
    rs_state *St;
    size_t *need = NULL, cap;
    uint8_t **outs = NULL;
    patina_status s;
    if (!g || !out || !st || (n && !items)) return patina__fail(PATINA_E_INVALID, "gpu: rootsift: null argument");
    PATINA_TRY(rs_check_conf(c));
    if (n == 0) return PATINA_OK;
    PGPU_CU(cudaSetDevice(g->device));
    PATINA_TRY(rs_state_of(g, &St));
    need = (size_t *)malloc(n * sizeof *need);
    outs = (uint8_t **)malloc(RS_BATCH_MAX * sizeof *outs);
    if (!need || !outs) {
        free(need);
        free(outs);
        return patina__fail(PATINA_E_NOMEM, "gpu: rootsift: out of host memory");
    }
    /* the arena: what the call needs, within half the budget */
    {
        rs_item tmp;
        size_t total = 0;
        for (size_t i = 0; i < n; i++) {
            need[i] = rs_layout(&tmp, c, &items[i], 0);
            total += need[i];
        }
        cap = (size_t)(g->budget / 2);
        if (total < cap) cap = total;
    }
    s = rs_upload_conf(St, c, (cudaStream_t)pgpu_stream(g, 0));
    if (s == PATINA_OK && St->arena_cap < cap) {
        pgpu_free(g, St->d_arena);
        St->d_arena = NULL;
        St->arena_cap = 0;
        s = pgpu_dev_alloc(g, (void **)&St->d_arena, cap, PGPU_FAM_ROOTSIFT, "arena");
        if (s == PATINA_OK) St->arena_cap = cap;
    }
    for (size_t i0 = 0; s == PATINA_OK && i0 < n;) {
        size_t nb = 0, used = 0, i = i0;
        while (i < n && nb < RS_BATCH_MAX) {
            if (need[i] > St->arena_cap) { /* never fits: the caller's */
                if (nb == 0) {
                    st[i] = PATINA_E_LIMIT;
                    memset(out + i * c->rec_bytes, 0, c->rec_bytes);
                    i0 = ++i;
                    continue;
                }
                break;
            }
            if (used + need[i] > St->arena_cap) break;
            used += rs_layout(&St->h_items[nb], c, &items[i], used);
            outs[nb] = out + i * c->rec_bytes;
            nb++;
            i++;
        }
        if (nb == 0) continue;
        s = rs_batch(g, St, c, items + i0, nb, used, outs, st + i0);
        i0 = i;
    }
    free(need);
    free(outs);
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

/* Test hook: one image's float input (w, h) through the first octave's
 * levels and the following ones up to octave k; levels and DoG of octave k
 * copied back. */
extern "C" patina_status patina_gpu__rootsift_octave(patina_gpu_t *g, const patina_gpu_rootsift_conf_t *c,
                                                     const float *im, int w, int h, int octaves, int k, float *levels,
                                                     float *dog)
{
    rs_state *St;
    patina_gpu_rootsift_item_t in;
    patina_image_t fake;
    rs_item *it;
    size_t bytes;
    cudaStream_t st;
    int mw, mh;
    if (!g || !im || w < 1 || h < 1 || k < 0 || k >= octaves || octaves > PGPU_RS_MAXOCT)
        return patina__fail(PATINA_E_INVALID, "gpu: rootsift: bad octave request");
    PATINA_TRY(rs_check_conf(c));
    PGPU_CU(cudaSetDevice(g->device));
    PATINA_TRY(rs_state_of(g, &St));
    st = (cudaStream_t)pgpu_stream(g, 0);
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
    it = St->h_items;
    bytes = rs_layout(it, c, &in, 0);
    if (St->arena_cap < bytes) {
        pgpu_free(g, St->d_arena);
        St->d_arena = NULL;
        St->arena_cap = 0;
        PATINA_TRY(pgpu_dev_alloc(g, (void **)&St->d_arena, bytes, PGPU_FAM_ROOTSIFT, "arena"));
        St->arena_cap = bytes;
    }
    PATINA_TRY(rs_upload_conf(St, c, st));
    PGPU_CU(cudaMemcpyAsync(St->d_items, it, sizeof *it, cudaMemcpyHostToDevice, st));
    PGPU_CU(cudaMemcpyAsync(St->d_arena + it->off_img, im, (size_t)w * h * sizeof(float), cudaMemcpyHostToDevice, st));
    St->nev = 0;
    for (int o = 0; o <= k; o++) rs_scale_space(St, c, it, 1, o, st, &mw, &mh);
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
    St->nev = 0;
    return PATINA_OK;
}
