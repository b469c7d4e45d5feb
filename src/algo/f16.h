/* The one float -> IEEE binary16 conversion of rootsift's f16 records, for
 * the C path (algo/rootsift_match.c: rs_f32_to_f16, which the CPU
 * extraction calls) and the CUDA kernels (gpu/rootsift.cu: k_desc) alike:
 * round to nearest, ties to even; overflow to infinity; subnormals kept;
 * NaN stays NaN (quiet bit set). Integer operations on the float's bits
 * only, so both sides give the same two bytes whatever the compiler or the
 * device's conversion instructions do. */
#ifndef PATINA_ALGO_F16_H
#define PATINA_ALGO_F16_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define F16_FN static __host__ __device__ __forceinline__
#else
#define F16_FN static inline
#endif

/* The binary16 bits of the binary32 value with bits u. */
F16_FN uint16_t f16_from_f32_bits(uint32_t u)
{
    const uint32_t sign = (u >> 16) & 0x8000u, mant = u & 0x7fffffu;
    int exp = (int)((u >> 23) & 0xff);
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0)); /* inf, NaN */
    exp = exp - 127 + 15;
    if (exp >= 31) return (uint16_t)(sign | 0x7c00u); /* overflow */
    if (exp <= 0) {                                   /* subnormal or zero */
        uint32_t m, shift, half, rest, q;
        if (exp < -10) return (uint16_t)sign;
        m = mant | 0x800000u;
        shift = (uint32_t)(14 - exp);
        q = m >> shift;
        rest = m & ((1u << shift) - 1);
        half = 1u << (shift - 1);
        if (rest > half || (rest == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    {
        uint32_t q = ((uint32_t)exp << 10) | (mant >> 13);
        const uint32_t rest = mant & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (q & 1))) q++; /* may carry into inf: correct */
        return (uint16_t)(sign | q);
    }
}

/* The binary16 bits of f, rounded to nearest even. */
F16_FN uint16_t f16_from_f32(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return f16_from_f32_bits(u);
}

#endif
