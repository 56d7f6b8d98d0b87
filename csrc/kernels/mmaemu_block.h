/* mmaemu_block.h: one tensor-core block FMA, D = sum of n FP8 products + C.
 *
 * The model (validated against hardware vectors, see docs/semantics.md):
 *  1. products are exact; a product's alignment exponent is e_a + e_b, the exponent of the
 *     unnormalised product (significand in [0, 4)); products with a zero factor are dropped;
 *  2. C (fp32) joins the block with exponent max(floor(log2|C|), -126); C = +-0 is dropped;
 *  3. E = the largest alignment exponent; every term is cut toward zero to the grid 2^(E - frac);
 *  4. the terms are added exactly; an exact zero gives +0;
 *  5. the sum keeps its `keep` most significant bits, truncated toward zero.
 * With c_late, C stays out of steps 2-5 and is added to the block's fp32 result with an
 * fp32 round-to-nearest-even add.
 * hopper (32 products, frac 13, keep 14) is validated on H100/H200 vectors with C = 0;
 * ada (16, 13, 14) on Ada vectors with C != 0; b200 (32, 25, 24, c_late) on B200 E4M3 and
 * E5M2 vectors with C != 0. NaN/Inf handling (any NaN, Inf * 0 or
 * +Inf with -Inf gives NaN, otherwise Inf wins) follows the published model and is
 * inferred for hardware until probe P8 runs. */
#ifndef MMAEMU_BLOCK_H
#define MMAEMU_BLOCK_H

#include "mmaemu_formats.h"

/* An instruction model. block: products per hardware block; frac: grid bits below the block
 * exponent; keep: significant bits of the block result (truncated); promote_k: k per
 * promotion interval without fast accumulation, a whole number of blocks (mmaemu_gemm_check
 * refuses others); c_late: 0 = C is aligned and added with the products, 1 = C is added
 * afterwards with an fp32 RN-even add (last, so that a positional initialiser without it keeps
 * the old meaning); split_rr_tile: the split-K layout
 * of the library kernels the preset stands for (mmaemu_gemm.h): 0 = contiguous slices on the
 * 128-k grain, > 0 = tiles of this many k dealt round-robin to the slices (after c_late for
 * the same reason: 0 is the old meaning). */
typedef struct {
    int32_t block;
    int32_t frac;
    int32_t keep;
    int32_t promote_k;
    int32_t c_late;
    int32_t split_rr_tile;
} mm_preset;

/* Exact fp32 value of sign * A * 2^x, truncated toward zero to fp32 precision (the block
 * result's rounding), with gradual underflow; magnitudes from 2^128 up give Inf. */
MMAEMU_HD float mm_compose_f32(int sign, uint64_t A, int x) {
    const uint32_t s = (uint32_t)sign << 31;
    const int L = mm_bitlen64(A);
    if (L == 0) return mm_bits_f32(s);
    const int ex = x + L - 1;
    if (ex > 127) return mm_bits_f32(s | 0x7F800000u);
    if (ex >= -126) {
        if (L > 24) { A >>= (L - 24); }
        const uint32_t mant = (uint32_t)(L > 24 ? A : A << (24 - L)) & 0x7FFFFFu;
        return mm_bits_f32(s | ((uint32_t)(ex + 127) << 23) | mant);
    }
    const int sh = x + 149; /* units of 2^-149, the fp32 subnormal LSB */
    uint64_t units = sh >= 0 ? A << sh : (-sh >= 64 ? 0 : A >> -sh);
    return mm_bits_f32(s | (uint32_t)units);
}

/* Magnitude m * 2^sh on the integer grid, truncated toward zero. */
MMAEMU_HD uint64_t mm_shift_trunc(uint64_t m, int sh) {
    if (sh >= 0) return m << sh;
    return -sh >= 64 ? 0 : m >> -sh;
}

/* The block FMA. a, b: n consecutive FP8 codes each (n <= p->block; a short block behaves as
 * one padded with zero products). */
MMAEMU_HD float mm_block(const uint8_t* a, const uint8_t* b, int fa, int fb, int n, float c,
                         const mm_preset* p) {
    int nan = 0, pinf = 0, ninf = 0, have = 0, E = 0;
    const uint32_t cb = mm_f32_bits(c);
    const uint32_t cexp = (cb >> 23) & 0xFFu;
    const int csign = (int)(cb >> 31);
    if (cexp == 0xFFu) {
        if (cb & 0x7FFFFFu) nan = 1;
        else if (csign) ninf = 1;
        else pinf = 1;
    }
    for (int k = 0; k < n; k++) {
        const mm_fp8 x = mm_decode_fp8(a[k], fa), y = mm_decode_fp8(b[k], fb);
        if (x.cls == MM_CLS_NAN || y.cls == MM_CLS_NAN) { nan = 1; continue; }
        if (x.cls == MM_CLS_INF || y.cls == MM_CLS_INF) {
            if (x.cls == MM_CLS_ZERO || y.cls == MM_CLS_ZERO) nan = 1;
            else if (x.sign ^ y.sign) ninf = 1;
            else pinf = 1;
            continue;
        }
        if (x.cls == MM_CLS_ZERO || y.cls == MM_CLS_ZERO) continue;
        const int e = x.e + y.e;
        if (!have || e > E) E = e;
        have = 1;
    }
    if (nan || (pinf && ninf)) return mm_bits_f32(MM_F32_NAN_BITS);
    if (pinf) return mm_bits_f32(0x7F800000u);
    if (ninf) return mm_bits_f32(0xFF800000u);

    /* C as a term: significand with hidden bit, exponent clamped at -126 for subnormals. */
    const int c_nonzero = (cb & 0x7FFFFFFFu) != 0;
    const int c_joins = c_nonzero && !p->c_late;
    const uint64_t cm = (cb & 0x7FFFFFu) | (cexp ? 0x800000u : 0u);
    const int ce = cexp ? (int)cexp - 127 : -126;
    if (c_joins && (!have || ce > E)) E = ce;

    float d = 0.0f;
    if (have || c_joins) {
        const int grid = E - p->frac; /* exponent of the grid's LSB */
        int64_t S = 0;
        for (int k = 0; k < n; k++) {
            const mm_fp8 x = mm_decode_fp8(a[k], fa), y = mm_decode_fp8(b[k], fb);
            if (x.cls == MM_CLS_ZERO || y.cls == MM_CLS_ZERO) continue;
            const int64_t v = (int64_t)mm_shift_trunc((uint64_t)(x.m * y.m), x.lsb + y.lsb - grid);
            S += (x.sign ^ y.sign) ? -v : v;
        }
        if (c_joins) {
            const int64_t v = (int64_t)mm_shift_trunc(cm, ce - 23 - grid);
            S += csign ? -v : v;
        }
        if (S != 0) {
            const int sign = S < 0;
            uint64_t A = (uint64_t)(sign ? -S : S);
            const int L = mm_bitlen64(A);
            if (L > p->keep) A = (A >> (L - p->keep)) << (L - p->keep);
            d = mm_compose_f32(sign, A, grid);
        }
    }
    /* A late C: one fp32 RN-even add (no contraction: -ffp-contract=off / --fmad=false). */
    return p->c_late ? d + c : d;
}

#endif /* MMAEMU_BLOCK_H */
