/* cpu_fast.h: what the `cpu` backend's driver (cpu_fast.c) and its tile kernels share.
 *
 * The driver decodes every FP8 operand once into two int32 per element and hands tiles of
 * MR rows x W columns to a kernel, which returns each output's split accumulator (what
 * mm_split_acc returns for one split). Splits, the epilogue and NaN/Inf go through the
 * shared header code (mmaemu_gemm.h), so only the block arithmetic is re-implemented here.
 *
 * Decoded element (both operands): e = the alignment exponent (mm_fp8.e), or MM_CPU_ZERO_EXP
 * for a zero (and for NaN/Inf, whose outputs the driver recomputes with the reference);
 * s = +-m << 8, the signed integer significand times 2^8 (|s| <= 15 << 8 fits int16). A product
 * s_a * s_b is then the exact significand product times 2^16.
 *
 * Layouts. A (broadcast operand): row i, element k at a[i * a_stride + 2k] (e) and [2k + 1] (s).
 * B panel of W columns: element (k, column c) at b[k * 2W + c] (e) and b[k * 2W + W + c] (s);
 * the s word holds the 16-bit two's-complement significand zero-extended to 32 bits (the form
 * vpmaddwd multiplies). Kernels read it as (int16_t)(s & 0xFFFF). */
#ifndef MMAEMU_CPU_FAST_H
#define MMAEMU_CPU_FAST_H

#include "mmaemu.h"

/* Exponent of a zero factor: far below any real product (>= -28) or fp32 exponent (>= -126)
 * so that it never wins a block maximum, and small enough that sums cannot overflow int32. */
#define MM_CPU_ZERO_EXP (-(1 << 20))
/* Exponent given to an accumulator C = +-0: below any product exponent, even a zero one. */
#define MM_CPU_ZERO_C_EXP (-(1 << 22))

/* What the block arithmetic needs, precomputed once per GEMM. */
typedef struct {
    int64_t K;
    int32_t block, frac, keep, promote_blocks;
    int32_t fast;
    /* sh0 = frac - man_bits_a - man_bits_b: a product with alignment exponent e adds
     * trunc(P * 2^(sh0 - (E - e))) to the block's integer sum (P: significand product). */
    int32_t sh0;
    /* Narrow kernels (int32 sums below 2^24): the product word s_a*s_b = P << 16 is shifted
     * right by (E - e) + prod_shift, prod_shift = 16 - sh0 >= 0; C's 24-bit significand by
     * (E - ce) + c_shift, c_shift = 23 - frac >= 0. */
    int32_t prod_shift, c_shift;
    /* Clears the fp32 mantissa bits below the block result's `keep` significant bits. */
    uint32_t keep_mask;
} mm_cpu_plan;

/* A tile kernel: the split accumulators of MR rows x W columns over k in [k0, k1).
 * a: the MR decoded rows (row r at a + r * a_stride); b: the decoded B panel;
 * acc: MR x W floats, row r at acc + r * W. */
typedef void (*mm_cpu_tile_fn)(const mm_cpu_plan* p, const int32_t* a, int64_t a_stride,
                               const int32_t* b, int64_t k0, int64_t k1, float* acc);

typedef struct {
    const char* name;
    int mr, w;            /* tile rows, tile columns (the B panel width) */
    mm_cpu_tile_fn tile;
} mm_cpu_kernel;

/* The narrow kernels, one per SIMD path; valid when mm_cpu_plan_is_narrow(). */
extern const mm_cpu_kernel mm_cpu_kernel_portable;
extern const mm_cpu_kernel mm_cpu_kernel_avx2;
extern const mm_cpu_kernel mm_cpu_kernel_avx512;
/* Any preset the plan checks accept (int64 sums): b200, or parameters not yet known. */
extern const mm_cpu_kernel mm_cpu_kernel_wide;

/* Exact result of one block whose integer sum S lies on the grid 2^grid: S's `keep` leading
 * bits (truncated), composed to fp32 (mm_block's last two steps). The fallback of the narrow
 * kernels when the fast exponent arithmetic would leave the normal range. */
static inline uint32_t mm_cpu_compose(int64_t S, int grid, int keep) {
    if (S == 0) return 0u;
    const int sign = S < 0;
    uint64_t A = (uint64_t)(sign ? -S : S);
    const int L = mm_bitlen64(A);
    if (L > keep) A = (A >> (L - keep)) << (L - keep);
    return mm_f32_bits(mm_compose_f32(sign, A, grid));
}

#endif /* MMAEMU_CPU_FAST_H */
