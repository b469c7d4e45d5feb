/* Local-pattern arithmetic shared verbatim by the fast CPU path
 * (src/features/lbp_fast.c) and the CUDA kernels (src/gpu/lbp_kernels.cuh):
 * the kinds, methods and mappings, the code-map shape, the 3x3 codes (lbp8, tlbap, lanadp) from one window, and the circular-LBP code of a
 * P-bit sign pattern for each scikit-image method, written with bit
 * operations. The plain, loop-by-loop C reference is src/features/lbp.c; the
 * tests compare everything here against it.
 *
 * Neighbour order, for every family here: neighbour k (bit k) goes
 * counter-clockwise from the right, k = 0 right, 1 top-right, 2 top,
 * 3 top-left, 4 left, 5 bottom-left, 6 bottom, 7 bottom-right. For the 3x3
 * families that is the paper's weight matrix {{8,4,2},{16,0,1},{32,64,128}};
 * for circular LBP it is scikit-image's sample order (angle 2*pi*k/P, row
 * offset -R*sin, column offset R*cos). */
#ifndef PATINA_LBP_CORE_H
#define PATINA_LBP_CORE_H

#include <stdint.h>

#ifdef __CUDACC__
#define LBP_FN static __host__ __device__ __forceinline__
#else
#define LBP_FN static inline
#endif

enum { LBP_KIND_CIRCULAR = 0, LBP_KIND_LBP8, LBP_KIND_TLBAP, LBP_KIND_LANADP };
enum { LBP_M_DEFAULT = 0, LBP_M_ROR, LBP_M_UNIFORM, LBP_M_NRI, LBP_M_VAR };
/* Histogram bins of raw patterns: the code itself, scikit-image's
 * nri_uniform code of the pattern (u2), the rank of its least rotation (ri),
 * its uniform code (riu2). */
enum { LBP_MAP_NONE = 0, LBP_MAP_U2, LBP_MAP_RI, LBP_MAP_RIU2 };

#define LBP_MAX_P 32 /* circular samples */

LBP_FN int lbp_popc(uint32_t x)
{
#ifdef __CUDA_ARCH__
    return __popc(x);
#else
    return __builtin_popcount(x);
#endif
}

LBP_FN int lbp_ctz(uint32_t x) /* x != 0 */
{
#ifdef __CUDA_ARCH__
    return __ffs((int)x) - 1;
#else
    return __builtin_ctz(x);
#endif
}

/* Code-map side for an image side n: circular LBP n, the 3x3 kinds
 * max(n - 2, 0) (their windows need a border pixel on each side). */
LBP_FN int lbp_map_side(int kind, int n)
{
    if (kind != LBP_KIND_CIRCULAR) return n > 2 ? n - 2 : 0;
    return n > 0 ? n : 0;
}

/* --------------------------------------------------------------- 3x3 codes */

/* The 8 neighbours of the window centred at p (rows `stride` bytes apart),
 * in bit order. */
#define LBP_N8(p, s)                                                                           \
    { (p)[1], (p)[1 - (s)], (p)[-(s)], (p)[-1 - (s)], (p)[-1], (p)[(s)-1], (p)[(s)], (p)[(s) + 1] }

/* lbp8: bit k set when neighbour k >= centre. */
LBP_FN uint32_t lbp8_code(const int n[8], int c)
{
    uint32_t code = 0;
    int k;
    for (k = 0; k < 8; k++) code |= (uint32_t)(n[k] >= c) << k;
    return code;
}

/* TLBAP with the threshold folded into an integer: for an integer neighbour
 * n and th2 = fl(T*max) (binary64), n > th2 <=> n > floor(th2). `kmax` is
 * that floor for this window's max (see lbp_tlbap_table). */
LBP_FN uint32_t tlbap_code_k(const int n[8], int c, int kmax)
{
    uint32_t code = 0;
    int k;
    for (k = 0; k < 8; k++) code |= (uint32_t)(n[k] > c && n[k] > kmax) << k;
    return code;
}

LBP_FN int lbp_max9(const int n[8], int c)
{
    int m = c, k;
    for (k = 0; k < 8; k++) m = n[k] > m ? n[k] : m;
    return m;
}

/* LANADP: for neighbour k with value v, s1 = n[k+1] + n[k+2] and
 * s2 = n[k-1] + n[k-2] (indices mod 8): bit k when both means are >= v or
 * both are <= v, i.e. the sums against 2v (exact). The centre is not used. */
LBP_FN uint32_t lanadp_code(const int n[8])
{
    uint32_t code = 0;
    int k;
    for (k = 0; k < 8; k++) {
        int v2 = 2 * n[k];
        int s1 = n[(k + 1) & 7] + n[(k + 2) & 7];
        int s2 = n[(k + 7) & 7] + n[(k + 6) & 7];
        code |= (uint32_t)((s1 >= v2 && s2 >= v2) || (s1 <= v2 && s2 <= v2)) << k;
    }
    return code;
}

/* ------------------------------------------------------ circular LBP codes */

/* Rotation of a P-bit pattern one place to the right (scikit-image's
 * _bit_rotate_right, on unsigned values). */
LBP_FN uint32_t lbp_rotr1(uint32_t v, int P)
{
    return (v >> 1) | ((v & 1u) << (P - 1));
}

/* The code of sign pattern `bits` (bit k = sample k >= centre) for a method
 * other than var; exactly scikit-image 0.19's _local_binary_pattern, see
 * docs/lbp.md:
 *   default      sum of bit k * 2^k
 *   ror          the least of the P rotations
 *   uniform      number of ones when the pattern has <= 2 changes between
 *                consecutive samples 0..P-1 (scikit-image counts P-1 pairs,
 *                no wrap-around: the same set as the circular definition),
 *                else P+1
 *   nri_uniform  0 for no ones, P(P-1)+1 for all ones, P(P-1)+2 for
 *                non-uniform, else 1 + (n_ones-1)*P + rot_index */
LBP_FN uint32_t lbp_pattern_code(uint32_t bits, int P, int method)
{
    uint32_t all = P == 32 ? 0xffffffffu : ((1u << P) - 1u);
    uint32_t pairs = P == 1 ? 0u : ((1u << (P - 1)) - 1u); /* pairs (k, k+1), k < P-1 */
    int changes, ones;
    switch (method) {
    case LBP_M_DEFAULT: return bits;
    case LBP_M_ROR: {
        uint32_t best = bits, v = bits;
        int k;
        for (k = 1; k < P; k++) {
            v = lbp_rotr1(v, P);
            best = v < best ? v : best;
        }
        return best;
    }
    case LBP_M_UNIFORM:
        changes = lbp_popc((bits ^ (bits >> 1)) & pairs);
        return changes <= 2 ? (uint32_t)lbp_popc(bits) : (uint32_t)(P + 1);
    case LBP_M_NRI: {
        changes = lbp_popc((bits ^ (bits >> 1)) & pairs);
        if (changes > 2) return (uint32_t)(P * (P - 1) + 2);
        ones = lbp_popc(bits);
        if (ones == 0) return 0;
        if (ones == P) return (uint32_t)(P * (P - 1) + 1);
        {
            int first_one = lbp_ctz(bits);
            int first_zero = lbp_ctz(~bits & all);
            int rot = first_one == 0 ? ones - first_zero : P - first_one;
            return (uint32_t)(1 + (ones - 1) * P + rot);
        }
    }
    }
    return 0;
}

/* Bilinear interpolation exactly as scikit-image's bilinear_interpolation
 * (mode 'C', cval 0), given the four corner values already fetched (0 for
 * corners outside the image): top/bottom rows first, then the rows. The
 * expression order is the arithmetic; compile without FMA contraction. */
LBP_FN double lbp_bilinear(double tl, double tr, double bl, double br, double dr, double dc)
{
    double top = (1 - dc) * tl + dc * tr;
    double bottom = (1 - dc) * bl + dc * br;
    return (1 - dr) * top + dr * bottom;
}

#endif
