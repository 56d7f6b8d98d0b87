/* mmaemu_exact.h: the block FMA of mmaemu_block.h rebuilt from IEEE fp32 operations, for the
 * IEEE-exact tiled CUDA kernels (h1, h4, v1, v4 in ieee.cu).
 *
 * Scope: E4M3 x E4M3 operands, frac <= 16, keep <= 24, at most 32 products per block (the
 * hopper and ada presets). The loader sends nothing else to these kernels.
 *
 * Why the result is bit-identical to mm_block (each step is plain IEEE arithmetic, checked on
 * the CPU against mm_block by test/test_cuda_blockmath.py):
 *  1. A product of two E4M3 values has at most 8 significant bits and lies in [2^-18, 2^18):
 *     a * b is exact in fp32.
 *  2. The block exponent E = max(e_a + e_b) over non-zero products (and C's exponent) comes from
 *     small integers: u(x) = e_x + 22 for non-zero codes, 0 otherwise, so u(a) + u(b) >= 32 exactly
 *     for the non-zero products and E = max(u(a) + u(b)) - 44.
 *  3. With the grid g = E - frac and K = 2^(g+23) carrying the product's sign, |K + a*b| lies in
 *     [2^(g+23), 2^(g+24)), where fp32 values are spaced 2^g: fma_rz(a, b, K) = K + (a*b cut
 *     toward zero to the grid), and subtracting K again is exact (Sterbenz). C is cut the same
 *     way with add_rz.
 *  4. The <= 33 cut terms are multiples of 2^g below 2^(g + frac + 8) in sum: every fp32 add of
 *     them is exact, in any order.
 *  5. Keeping `keep` significant bits of the exact sum (truncated) is clearing the low
 *     24 - keep mantissa bits of its fp32 pattern; an exact zero gives +0, a NaN the model's NaN.
 * E4M3 has no infinities and a block sum stays below 2^23, so no Inf can arise here. */
#ifndef MMAEMU_EXACT_H
#define MMAEMU_EXACT_H

#include "mmaemu_block.h"

#if !defined(__CUDACC__)
#include <fenv.h>
#include <math.h>
#endif

#define MM_EXACT_SIGN 0x80000000u
#define MM_EXACT_U_MIN_PRODUCT 32 /* u(a) + u(b) of a non-zero product is at least 2 * 16 */
#define MM_EXACT_U_BIAS 44        /* u(a) + u(b) = e_a + e_b + 44 */

/* E4M3 code -> its exact fp32 value (NaN codes -> a NaN). */
MMAEMU_HD float mm_e4m3_value(uint32_t code) {
    const uint32_t sign = (code & 0x80u) << 24, ex = (code >> 3) & 0xFu, man = code & 7u;
    if ((code & 0x7Fu) == 0x7Fu) return mm_bits_f32(MM_F32_NAN_BITS);
    if (ex == 0) return mm_bits_f32(sign | mm_f32_bits((float)man * 0.001953125f)); /* man * 2^-9 */
    return mm_bits_f32(sign | ((ex + 120u) << 23) | (man << 20));                  /* 2^(ex-7) * 1.man */
}

/* E4M3 code -> u = e + 22 in [16, 30] (e = the alignment exponent of mm_decode_fp8), or 0 for
 * zeros and NaNs, which take no part in the block exponent. */
MMAEMU_HD uint32_t mm_e4m3_u(uint32_t code) {
    const uint32_t ex = (code >> 3) & 0xFu;
    if ((code & 0x7Fu) == 0 || (code & 0x7Fu) == 0x7Fu) return 0;
    return ex == 0 ? 16u : ex + 15u;
}

/* The block exponent from the largest u(a) + u(b) of the block and the incoming C. Returns a value
 * safe for mm_exact_offset_bits even when C is NaN (then every result is NaN anyway). */
MMAEMU_HD int mm_exact_block_exp(uint32_t umax, float c) {
    const uint32_t cb = mm_f32_bits(c);
    int have = umax >= MM_EXACT_U_MIN_PRODUCT;
    int E = have ? (int)umax - MM_EXACT_U_BIAS : 0;
    if (cb & 0x7FFFFFFFu) {
        int ec = (int)((cb >> 23) & 0xFFu) - 127;
        if (ec < -126) ec = -126;
        if (!have || ec > E) E = ec;
    }
    return E > 100 ? 100 : E;
}

/* fp32 bits of K = 2^(E - frac + 23), the offset whose spacing is the block grid. */
MMAEMU_HD uint32_t mm_exact_offset_bits(int E, int frac) {
    return (uint32_t)(E - frac + 23 + 127) << 23;
}

#if defined(__CUDA_ARCH__)
MMAEMU_HD float mm_fma_rz(float a, float b, float c) { return __fmaf_rz(a, b, c); }
MMAEMU_HD float mm_add_rz(float a, float b) { return __fadd_rz(a, b); }
#elif !defined(__CUDACC__)
/* Host versions for the CPU check of this header (compile with -frounding-math). */
static inline float mm_fma_rz(float a, float b, float c) {
    const int old = fegetround();
    fesetround(FE_TOWARDZERO);
    volatile float r = fmaf(a, b, c);
    fesetround(old);
    return r;
}
static inline float mm_add_rz(float a, float b) {
    const int old = fegetround();
    fesetround(FE_TOWARDZERO);
    volatile float r = a + b;
    fesetround(old);
    return r;
}
#endif

/* One product cut toward zero to the grid: fma_rz(a, b, ck) - ck, where ck = K with the
 * product's sign (sign_ab: the xor of the operands' sign bits, in bit 31). */
MMAEMU_HD float mm_exact_term(float a, float b, uint32_t sign_ab, uint32_t kbits) {
    const float ck = mm_bits_f32(sign_ab ^ kbits);
    return mm_fma_rz(a, b, ck) - ck;
}

/* C cut toward zero to the grid. */
MMAEMU_HD float mm_exact_c(float c, uint32_t kbits) {
    const float ck = mm_bits_f32((mm_f32_bits(c) & MM_EXACT_SIGN) | kbits);
    return mm_add_rz(c, ck) - ck;
}

/* The block result from the exact sum S of the cut terms. */
MMAEMU_HD float mm_exact_finish(float S, int keep) {
    const uint32_t u = mm_f32_bits(S);
    if ((u & 0x7FFFFFFFu) == 0) return 0.0f;
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return mm_bits_f32(MM_F32_NAN_BITS);
    return mm_bits_f32(u & ~((1u << (24 - keep)) - 1u));
}

/* A whole block the way the tiled kernels compute it (E pass, then the cut sum), from codes:
 * the composition that test/test_cuda_blockmath.py compares with mm_block. */
MMAEMU_HD float mm_exact_block(const uint8_t* a, const uint8_t* b, int n, float c,
                               const mm_preset* p) {
    uint32_t umax = 0;
    for (int k = 0; k < n; k++) {
        const uint32_t u = mm_e4m3_u(a[k]) + mm_e4m3_u(b[k]);
        umax = u > umax ? u : umax;
    }
    const uint32_t kbits = mm_exact_offset_bits(mm_exact_block_exp(umax, c), p->frac);
    float S = mm_exact_c(c, kbits);
    for (int k = 0; k < n; k++) {
        const float x = mm_e4m3_value(a[k]), y = mm_e4m3_value(b[k]);
        S += mm_exact_term(x, y, (mm_f32_bits(x) ^ mm_f32_bits(y)) & MM_EXACT_SIGN, kbits);
    }
    return mm_exact_finish(S, p->keep);
}

#endif /* MMAEMU_EXACT_H */
