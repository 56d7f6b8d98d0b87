/* cpu_fast.h: what the `cpu` backend's driver (cpu_fast.c) and its tile kernels share.
 *
 * The driver decodes every FP8 operand once and hands tiles of MR rows x W columns to a kernel,
 * which returns each output's split accumulator (what mm_split_acc returns for one split).
 * Splits, the epilogue and NaN/Inf go through the shared header code (mmaemu_gemm.h), so only
 * the block FMA (mm_block) is re-implemented, in this form:
 *
 *   E    = max(alignment exponents e_a + e_b of the non-zero products, C's exponent)
 *   grid = E - frac;  s = 2^-grid (an fp32 power of two)
 *   S    = trunc(C * s) + sum_k trunc((a_k * b_k) * s)        (integer sum)
 *   D    = S's `keep` leading bits (truncated) times 2^grid
 *
 * which is mm_block's "cut every term toward zero to the grid 2^grid, add exactly": a_k * b_k
 * is exact in fp32 (significands of at most 4 bits), scaling by a power of two is exact while
 * the result stays normal, and a result below 2^-126 is below 1, where trunc gives 0 however it
 * was rounded. fp32 -> int32 conversion truncates toward zero, the model's cut. (The AVX-512
 * narrow form gets the same S from floors and a count of the negative terms floor cuts one
 * unit lower: cpu_kernel_avx512.c.)
 *
 * Decoded element (both operands): e = the alignment exponent (mm_fp8.e), or MM_CPU_ZERO_EXP
 * for a zero (and for NaN/Inf, whose outputs the driver recomputes with the reference); v = the
 * FP8 value as fp32 (0 for zero, NaN and Inf); low = the exponent of the value's lowest set bit
 * with its sign, one byte (mm_cpu_low), which the AVX-512 kernel's truncation
 * count reads (cpu_kernel_avx512.c).
 *
 * Layouts. A (broadcast operand): row i, element k: MM_CPU_A_WORDS int32 words at
 * a[i * a_stride + MM_CPU_A_WORDS * k]: e as int8 in all four bytes (a 32-bit broadcast gives
 * int8 lanes; mm_cpu_a_exp reads it; the AVX-512 kernel's coded form: MM_CPU_E_CODED), low in
 * all four bytes, v (fp32 bits). B panel of W columns, one record of MM_CPU_PANEL_STRIDE(W)
 * int32 words per k: W int8 exponents, W low bytes, then W fp32 values (MM_CPU_PANEL_LOW,
 * MM_CPU_PANEL_V); the two byte planes in the kernel's byte order (mm_cpu_byte_pos). */
#ifndef MMAEMU_CPU_FAST_H
#define MMAEMU_CPU_FAST_H

#include "mmaemu.h"

/* Exponent of a zero factor, an int8: a zero product's sum (<= -110 + 16) stays below every real
 * product exponent (>= -28) and below MM_CPU_E_FLOOR, and the SIMD kernels' first pass adds the
 * int8 exponents with signed saturation (two zeros give -128). */
#define MM_CPU_ZERO_EXP (-110)
/* Exponent given to an accumulator C = +-0: below every product exponent, even a zero one. */
#define MM_CPU_ZERO_C_EXP (-40000)
/* E is raised to at least this before s = 2^(frac - E) is formed, so s stays a normal fp32.
 * Only a block with no non-zero product and C = 0 is raised (real product exponents are
 * >= -28, and a non-zero C, an earlier block result, is >= 2^(-28 - frac) >= 2^-58); its
 * sum is 0 whatever E is. */
#define MM_CPU_E_FLOOR (-90)

/* The exponent bytes the AVX-512 kernel reads (mm_cpu_kernel.e_code = MM_CPU_E_CODED): e +
 * MM_CPU_E_CODE_OFFSET for a non-zero value (E4M3 and E5M2 alignment exponents lie in [-16, 15],
 * so the code is in [94, 125]), 0 for a zero. Two codes add without a carry out of their byte
 * (at most 250), so its first pass is a 32-bit add with A's word as the broadcast operand and an
 * unsigned byte maximum (no saturating add, which is slow on Zen 4): a real product's sum is at
 * least 188, above the floor's code MM_CPU_E_FLOOR + 2 * offset = 130, which is above every sum
 * with a zero factor (at most 125). The other kernels read e itself (MM_CPU_E_SIGNED). */
#define MM_CPU_E_CODE_OFFSET 110
enum { MM_CPU_E_SIGNED = 0, MM_CPU_E_CODED = 1 };

/* Views of the decoded int32 words as fp32 values and int8 exponents. may_alias makes the
 * reinterpretation defined (GCC, clang); the vector loads of the kernels alias anyway. */
typedef float mm_cpu_f32 __attribute__((may_alias));
typedef int8_t mm_cpu_i8 __attribute__((may_alias));
static inline mm_cpu_f32* mm_cpu_values(int32_t* words) {
    return (mm_cpu_f32*)(void*)words;
}
static inline const mm_cpu_f32* mm_cpu_cvalues(const int32_t* words) {
    return (const mm_cpu_f32*)(const void*)words;
}

/* int32 words per k of a decoded A row, and where its low byte and value sit. */
#define MM_CPU_A_WORDS 3
#define MM_CPU_A_LOW 1
#define MM_CPU_A_V 2

/* An A word holding one byte in all four bytes (e, low). */
static inline int32_t mm_cpu_a_word(int32_t byte) { return (int32_t)(((uint32_t)byte & 0xFFu) * 0x01010101u); }

/* The exponent in an A word (its low byte). */
static inline int32_t mm_cpu_a_exp(int32_t word) { return (int32_t)(int8_t)(uint8_t)(word & 0xFF); }

/* The low bytes: for the AVX-512 kernel's count of negative products that its floor cuts one
 * unit below the model's cut toward zero. With l = (exponent of the lowest set bit of |x|)
 * + MM_CPU_LOW_OFFSET in [0, 31] (E4M3 and E5M2 values have it in [-16, 15]), a non-zero x is
 * l (x > 0) or l - 128 (x < 0), a zero is 63. Their int8 sum, wrapping, is la + lb + 32 - 128 in
 * [-128, -66] exactly when the product is negative and non-zero, and at least -65 otherwise
 * (positive: [0, 62]; a zero factor: [-65, -34] or [63, 126]). So "the product is negative and
 * not a multiple of 2^grid", i.e. la + lb < grid (a product's lowest set bit is the sum of its
 * factors'), is the signed byte compare sum < min(max(grid + 32, 0), 63) - 128. */
#define MM_CPU_LOW_OFFSET 16
static inline int32_t mm_cpu_low(int nonzero, int negative, int low) {
    return nonzero ? low + MM_CPU_LOW_OFFSET - (negative ? 128 : 0) : 63;
}

/* The grid exponents (grid = E - frac) for which the kernels' fast composition (exponent
 * field + grid) stays in the fp32 normal range: |S| < 2^24 (narrow) or < 2^40 (split) has an
 * exponent field <= 150 or <= 166. Outside, lanes are composed by mm_cpu_compose. FP8 products
 * never get there (grid lies in [-58, 62]); test builds narrow the range to run that path. */
#ifndef MM_CPU_GRID_MIN
#define MM_CPU_GRID_MIN (-126)
#endif
#ifndef MM_CPU_GRID_MAX_NARROW
#define MM_CPU_GRID_MAX_NARROW 104
#endif
#ifndef MM_CPU_GRID_MAX_SPLIT
#define MM_CPU_GRID_MAX_SPLIT 88
#endif

/* int32 words per k in a B panel of w columns (w a multiple of 4), and the word offsets of its
 * low bytes and values within a record. */
#define MM_CPU_PANEL_STRIDE(w) ((w) / 2 + (w))
#define MM_CPU_PANEL_LOW(w) ((w) / 4)
#define MM_CPU_PANEL_V(w) ((w) / 2)

/* The largest frac of the AVX-512 kernel's FMA form (mm_cpu_plan.rz), which keeps M and T normal
 * and tells which ends of the composition's exact range a block can leave (cpu_kernel_avx512.c).
 * C's term alone reaches 2^(frac + 1) units, so the 2^22 bound on the running sums implies it. */
#define MM_CPU_RZ_FRAC_MAX 21

/* What the block arithmetic needs, precomputed once per GEMM. */
typedef struct {
    int64_t K;
    int32_t block, frac, keep, promote_k;
    int32_t fast;
    /* The block's running sums stay within 2^22 units (mm_cpu_fits_rz): the AVX-512 kernel's
     * floor-accumulating FMA form (cpu_kernel_avx512.c) applies. */
    int32_t rz;
    int32_t c_late; /* C added after the block (mm_preset.c_late): split and wide kernels only */
    /* Clears the fp32 mantissa bits below the block result's `keep` significant bits. */
    uint32_t keep_mask;
} mm_cpu_plan;

/* A tile kernel: the split accumulators of MR rows x W columns over k in [k0, k1).
 * a: the MR decoded rows (row r at a + r * a_stride); b: the decoded B panel;
 * acc: MR x W floats, row r at acc + r * W.
 * resume = 0: the split starts at k0 (C = +0, promotion accumulator +0). resume = 1: acc holds
 * the state an earlier call over the same split left there, to continue from (fast: the
 * chain's C; otherwise the promotion accumulator); the caller puts k0 on a block boundary
 * (fast) or a promotion-interval boundary (otherwise), counted from the split's origin. This
 * lets the driver stream a long K in segments. */
typedef void (*mm_cpu_tile_fn)(const mm_cpu_plan* p, const int32_t* a, int64_t a_stride,
                               const int32_t* b, int64_t k0, int64_t k1, float* acc, int resume);

typedef struct {
    const char* name;
    int mr, w;                /* tile rows, tile columns (the B panel width) */
    mm_cpu_tile_fn tile;      /* narrow presets: every |S| < 2^24 (hopper, ada) */
    mm_cpu_tile_fn tile_split; /* or NULL: two int32 half-block sums, each < 2^31 (b200) */
    int a_bias;               /* A's decoded values are v * 2^-a_bias (0 or MM_CPU_A_BIAS) */
    int e_code;               /* the exponent bytes it reads: MM_CPU_E_SIGNED or MM_CPU_E_CODED */
    int byte_order;           /* its panels' byte planes: MM_CPU_BYTES_PLAIN or MM_CPU_BYTES_WORDS */
} mm_cpu_kernel;

/* Where column c of a panel w wide sits in its exponent and low-byte planes. PLAIN: byte c.
 * WORDS (the AVX-512 kernel): its fp32 vector v holds columns [v w/4, (v + 1) w/4), and column
 * v w/4 + l sits at byte v of 32-bit word l, so that a shift and a mask give a vector's bytes
 * as 32-bit lanes, and four vectors' bytes pack into one byte vector, without a shuffle
 * (cpu_kernel_avx512.c, word_byte). */
enum { MM_CPU_BYTES_PLAIN = 0, MM_CPU_BYTES_WORDS = 1 };
static inline int mm_cpu_byte_pos(int c, int w, int order) {
    return order == MM_CPU_BYTES_WORDS ? 4 * (c % (w / 4)) + c / (w / 4) : c;
}

/* The SIMD kernels scale a product by 2^-grid with an integer add to its exponent field
 * instead of a multiply: q = a * b is formed with A's values decoded times 2^-MM_CPU_A_BIAS,
 * then G = (MM_CPU_A_BIAS - grid') << 23 is added to q's bits, grid' = grid clamped to
 * [MM_CPU_PROD_EXP_MIN - frac, MM_CPU_PROD_EXP_MAX]. Why that is exact:
 *  - a non-zero FP8 product (E4M3, E5M2) has 2^-32 <= |a * b| < 2^32 (smallest subnormals
 *    2^-9 and 2^-16, largest values below 2^9 and 2^16), so q >= 2^-64 is normal and the
 *    add is q * 2^(bias - grid') exactly while the result stays normal (>= 2^-64);
 *  - the clamp changes no truncated term: grid > 32 cuts every product to 0 as grid' = 32
 *    does, and grid < -32 - frac means E < -32, i.e. no non-zero product in the block;
 *  - a zero product (+-0 bits) becomes +-2^(G - 127) with 0 <= G <= 64 + frac < 127, below 1,
 *    so it truncates to 0 without a mask. That needs frac <= 62: every preset the narrow and
 *    split bounds admit has frac <= 31 (the driver checks both). */
#define MM_CPU_A_BIAS 32
#define MM_CPU_PROD_EXP_MIN (-32)
#define MM_CPU_PROD_EXP_MAX 32

/* The kernels of the SIMD paths. tile needs every block sum |S| < 2^24 (int32 sums, (float)S
 * exact); tile_split needs the sum of each half block below 2^31. The driver checks which
 * bound the preset and formats meet. */
extern const mm_cpu_kernel mm_cpu_kernel_portable;
extern const mm_cpu_kernel mm_cpu_kernel_avx2;
extern const mm_cpu_kernel mm_cpu_kernel_avx512;
/* Any preset the plan checks accept (int64 sums): what neither bound covers. */
extern const mm_cpu_kernel mm_cpu_kernel_wide;

/* fp32 2^(frac - E), E raised to MM_CPU_E_FLOOR: the scale s of a block. */
static inline float mm_cpu_scale(int32_t E, int32_t frac) {
    const int32_t e = E < MM_CPU_E_FLOOR ? MM_CPU_E_FLOOR : E;
    return mm_bits_f32((uint32_t)(127 + frac - e) << 23);
}

/* The exponent C brings to the block maximum: max(floor(log2|C|), -126), or none for +-0. */
static inline int32_t mm_cpu_c_exponent(uint32_t cb) {
    if ((cb & 0x7FFFFFFFu) == 0) return MM_CPU_ZERO_C_EXP;
    const int32_t field = (int32_t)((cb >> 23) & 0xFFu);
    return (field ? field : 1) - 127;
}

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
