/* cpu.h: what the `cpu` executor's driver (driver.h and its files) and its tile kernels share.
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
 * was rounded. fp32 -> int32 conversion truncates toward zero, the model's cut. (The FMA form
 * of the AVX-512 and AVX2 kernels gets the same S from floors of slightly enlarged products and
 * the number of negative products: kernel_avx512.h and MM_CPU_RZ_ENLARGE below.)
 *
 * Decoded element (both operands): e = the alignment exponent (mm_fp8.e), or MM_CPU_ZERO_EXP
 * for a zero (and for NaN/Inf, whose outputs the driver recomputes with the reference); v = the
 * FP8 value as fp32 (0 for zero, NaN and Inf); its sign and whether it is zero, as bits of sign
 * words (MM_CPU_A_SGN, the panel's sign groups), which the FMA form reads.
 *
 * Layouts. A (broadcast operand): row i, element k: MM_CPU_A_WORDS int32 words at
 * a[i * a_stride + MM_CPU_A_WORDS * k] (a_stride: mm_cpu_a_stride): e as int8 in all four bytes
 * (a 32-bit broadcast gives int8 lanes; mm_cpu_a_exp reads it; the AVX-512 kernel's coded form:
 * MM_CPU_E_CODED), the sign window (MM_CPU_A_SGN), v (fp32 bits). B panel of W columns, one record of
 * MM_CPU_PANEL_STRIDE(W) int32 words per k: W int8 exponents (in the kernel's byte order,
 * mm_cpu_byte_pos), then W fp32 values (MM_CPU_PANEL_V). Beside them, for the kernels that read
 * them (mm_cpu_operands): sign words (mm_cpu_a_signs, mm_cpu_sign_group). */
#ifndef MMAEMU_CPU_H
#define MMAEMU_CPU_H

#include "mmaemu.h"

/* Exponent of a zero factor, an int8: a zero product's sum (<= -110 + 16) stays below every real
 * product exponent (>= -28) and below MM_CPU_E_FLOOR, and the SIMD kernels' first pass adds the
 * int8 exponents with signed saturation (two zeros give -128). */
#define MM_CPU_ZERO_EXP (-110)
/* Exponent given to an accumulator C = +-0: below every product exponent, even a zero one. */
#define MM_CPU_ZERO_C_EXP (-40000)
/* E is raised to at least this before s = 2^(frac - E) is formed, so s stays a normal fp32.
 * Only a block with no non-zero product and C = 0 is raised (real product exponents are
 * >= -28, and a non-zero C, an earlier block result, is >= 2^(-28 - frac) >= 2^-49); its
 * sum is 0 whatever E is. High enough that the FMA form's grids, E - frac >= -85, keep its
 * scaled block results normal (MM_CPU_RZ_C_SCALED). */
#define MM_CPU_E_FLOOR (-64)

/* The exponent bytes the AVX-512 kernel reads (mm_cpu_kernel.e_code = MM_CPU_E_CODED): e +
 * MM_CPU_E_CODE_OFFSET for a non-zero value (E4M3 and E5M2 alignment exponents lie in [-16, 15],
 * so the code is in [94, 125]), 0 for a zero. Two codes add without a carry out of their byte
 * (at most 250), so its first pass is a 32-bit add with A's word as the broadcast operand and an
 * unsigned byte maximum (no saturating add, which is slow on Zen 4): a real product's sum is at
 * least 188, above the floor's code MM_CPU_E_FLOOR + 2 * offset = 156, which is above every sum
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

/* int32 words per k of a decoded A row, and where its sign window and value sit. */
#define MM_CPU_A_WORDS 3
#define MM_CPU_A_SGN 1
#define MM_CPU_A_V 2

/* The stride, in words, of decoded A rows of len k: MM_CPU_A_WORDS * len rounded up to whole
 * 64-byte lines, and to an odd number of lines, so that no two rows less than 64 apart (a tile has
 * at most 16) lie a multiple of 4 KiB apart, where the L1 set of a line repeats. Rows that did (K
 * a multiple of 1 024 without the padding, 2048^3 among them) made every k step's loads from a
 * group's rows collide, and pass 1's k step took twice as long (benchmarks/results/cpu.md). */
static inline int64_t mm_cpu_a_stride(int64_t len) {
    int64_t lines = (MM_CPU_A_WORDS * len + 15) / 16;
    lines += 1 - lines % 2;
    return 16 * lines;
}

/* The most k whose decoded A row fits `words` words (mm_cpu_a_stride). */
static inline int64_t mm_cpu_a_k_within(int64_t words) {
    return words > 31 ? (words - 31) / MM_CPU_A_WORDS : 0;
}

/* An A word holding one byte in all four bytes (e). */
static inline int32_t mm_cpu_a_word(int32_t byte) { return (int32_t)(((uint32_t)byte & 0xFFu) * 0x01010101u); }

/* The exponent in an A word (its low byte). */
static inline int32_t mm_cpu_a_exp(int32_t word) { return (int32_t)(int8_t)(uint8_t)(word & 0xFF); }

/* The sign words of the FMA form, one bit per k: bit i of a positive word is set when
 * element k0 + i is positive (not zero), of a negative word when it is negative. So the number
 * of negative products of a block at k0 is popcount((P_a & N_b) | (N_a & P_b)).
 *  - A: an A row's record k holds the window of the 16 elements from k (fewer at the row's
 *    end): positive bits in bits 0..15, negative in 16..31. Any block start, any block of at
 *    most 32 (two windows) reads its words from it.
 *  - B: a panel's group j covers its records [32 j, 32 j + 32): w positive words (column c's
 *    at c) then w negative words (mm_cpu_operands.bsign). */
#define MM_CPU_SIGN_SPAN 32
#define MM_CPU_SIGN_GROUP_WORDS(w) (2 * (w))
static inline const uint32_t* mm_cpu_sign_group(const uint32_t* bsign, int64_t j, int w) {
    return bsign + j * MM_CPU_SIGN_GROUP_WORDS(w);
}

/* The paired layout of a group (mm_cpu_plan.sign_paired: 16-k blocks on the AVX-512 kernel):
 * for each half h of the group's 32 k (k from 32 j + 16 h), w words of column c at h w + c:
 * the column's negative bits in bits 0..15 and its positive bits in 16..31. An A row's sign
 * window (positive bits in 0..15, negative in 16..31) and'ed with it leaves the block's
 * negative products: one and and one popcount per output, where the two-word layout takes
 * three operations. Made in place from the two-word layout. */
static inline void mm_cpu_sign_paired(uint32_t* group, int w) {
    for (int c = 0; c < w; c++) {
        const uint32_t p = group[c], n = group[w + c];
        group[c] = (n & 0xFFFFu) | p << 16;
        group[w + c] = n >> 16 | (p & 0xFFFF0000u);
    }
}

/* An A row's positive and negative words for the block of n <= 32 elements whose first record
 * is rec (bits from n on cleared): its window, and the next window's for n > 16. */
static inline void mm_cpu_a_signs(const int32_t* rec, int n, uint32_t* pos, uint32_t* neg) {
    const uint32_t w0 = (uint32_t)rec[MM_CPU_A_SGN];
    const uint32_t w1 = n > 16 ? (uint32_t)rec[MM_CPU_A_WORDS * 16 + MM_CPU_A_SGN] : 0u;
    const uint32_t mask = n >= 32 ? 0xFFFFFFFFu : (1u << n) - 1u;
    *pos = ((w0 & 0xFFFFu) | w1 << 16) & mask;
    *neg = (w0 >> 16 | (w1 & 0xFFFF0000u)) & mask;
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

/* int32 words per k in a B panel of w columns (w a multiple of 4), and the word offset of its
 * values within a record. */
#define MM_CPU_PANEL_STRIDE(w) ((w) / 4 + (w))
#define MM_CPU_PANEL_V(w) ((w) / 4)

/* The largest frac of the kernels' FMA form (mm_cpu_plan.rz), which keeps M and T normal
 * and tells which ends of the composition's exact range a block can leave (kernel_avx512.h).
 * C's term alone reaches 2^(frac + 1) units, so the 2^22 bound on the running sums implies it. */
#define MM_CPU_RZ_FRAC_MAX 21

/* The FMA form's enlarged products: A's values are decoded times (1 + 2^-MM_CPU_RZ_ENLARGE)
 * (exact: at most 4 significant bits become 24), so each product p = x * 2^e (x its integer
 * significand, below 2^8) becomes p' = p + p * 2^-23, moved away from zero by less than 2^e. In
 * units of the grid, where every term is below 2^22 (plan.c, fits_rz):
 *  - a positive p keeps its floor: on the grid (n units), p' gains n * 2^-23 < 1; off it, p and
 *    the grid's multiples are all multiples of 2^e, so p' cannot reach the next multiple;
 *  - a negative p's floor is one below its cut toward zero, on the grid or not (on it, p' is
 *    below p; off it, floor already was).
 * So the floors of the p' of a block sum to the model's sum minus the number of negative
 * products, which does not depend on the grid: the kernel counts it from sign bits once per
 * block. */
#define MM_CPU_RZ_ENLARGE 23

/* The FMA form cuts a chain's block results to their `keep` bits once, at the chain's end, not
 * after every block, where frac < keep (plan.c, fits_rz): what the next block reads of its C does not
 * depend on the bits below them. C's exponent field is the same with or without them; and C's
 * term, trunc(C * 2^-grid), cuts C at grid = E - frac >= e_C - (keep - 1), where e_C <= E is C's
 * exponent, i.e. at the cut of the keep bits or above it, one power of two a multiple of the
 * other: truncating at the finer cut first changes nothing at the coarser one. */
#define MM_CPU_RZ_KEEP_LATE(frac, keep) ((frac) < (keep))

/* What the block arithmetic needs, precomputed once per GEMM. */
typedef struct {
    int64_t K;
    int32_t block, frac, keep, promote_k;
    int32_t fast;
    /* The block's running sums stay within 2^22 units (plan.c, fits_rz): the AVX-512
     * and AVX2 kernels' floor-accumulating FMA form (kernel_avx512.h) applies. */
    int32_t rz;
    int32_t c_late; /* C added after the block (mm_preset.c_late): split and wide kernels only */
    /* Clears the fp32 mantissa bits below the block result's `keep` significant bits. */
    uint32_t keep_mask;
    /* The panels' sign groups are in the paired layout (mm_cpu_sign_paired): set by the driver
     * for 16-k blocks when the kernel reads it (mm_cpu_kernel.rz_paired). */
    int32_t sign_paired;
} mm_cpu_plan;

/* A tile kernel's operands. a: the tile's decoded rows (row r at a + r * as), rows of them (a
 * multiple of mm_cpu_kernel.row_step, at most its mr), the first live of them rows of A (1 to
 * rows; the others padding, zeros whose outputs are not used: a kernel may leave their
 * accumulators as they are); b: the decoded B panel (its record 0 at b); bsign: the panel's sign
 * groups (mm_cpu_sign_group) where the kernel's FMA form runs (mm_cpu_kernel.rz_signs and
 * mm_cpu_plan.rz), else NULL. Pointers and k are counted from the decoded range's first k. */
typedef struct {
    const int32_t* a;
    int64_t as;
    int rows, live;
    const int32_t* b;
    const uint32_t* bsign;
} mm_cpu_operands;

/* A tile kernel: the split accumulators of o->rows rows x W columns over k in [k0, k1) of the
 * operands o; acc: rows x W floats, row r at acc + r * W.
 * resume = 0: the split starts at k0 (C = +0, promotion accumulator +0). resume = 1: acc holds
 * the state an earlier call over the same split left there, to continue from (fast: the
 * chain's C; otherwise the promotion accumulator); the caller puts k0 on a block boundary
 * (fast) or a promotion-interval boundary (otherwise), counted from the split's origin. This
 * lets the driver stream a long K in segments. */
typedef void (*mm_cpu_tile_fn)(const mm_cpu_plan* p, const mm_cpu_operands* o, int64_t k0, int64_t k1,
                               float* acc, int resume);

typedef struct {
    const char* name;
    int mr, w;                /* tile rows (at most), tile columns (the B panel width) */
    int row_step;             /* a tile's rows are a multiple of it: M is padded to it */
    mm_cpu_tile_fn tile;      /* narrow presets: every |S| < 2^24 (hopper, ada) */
    mm_cpu_tile_fn tile_split; /* or NULL: two int32 half-block sums, each < 2^31 (b200) */
    int a_bias;               /* A's decoded values are v * 2^-a_bias (0 or MM_CPU_A_BIAS) */
    int e_code;               /* the exponent bytes it reads: MM_CPU_E_SIGNED or MM_CPU_E_CODED */
    int byte_order;           /* its panels' byte planes: MM_CPU_BYTES_PLAIN or MM_CPU_BYTES_WORDS */
    /* 1: its narrow tile runs the FMA form when mm_cpu_plan.rz: A's values enlarged
     * (MM_CPU_RZ_ENLARGE), A's sign windows and the panel's sign groups (mm_cpu_sign_group) */
    int rz_signs;
    /* 1: and it reads 16-k blocks' sign groups in the paired layout (mm_cpu_plan.sign_paired) */
    int rz_paired;
} mm_cpu_kernel;

/* Where column c of a panel w wide sits in its exponent plane. PLAIN: byte c.
 * WORDS (the AVX-512 kernel): its fp32 vector v holds columns [v w/4, (v + 1) w/4), and column
 * v w/4 + l sits at byte v of 32-bit word l, so that a shift and a mask give a vector's bytes
 * as 32-bit lanes, and four vectors' bytes pack into one byte vector, without a shuffle
 * (kernel_avx512.h, word_byte). */
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

/* Inside a chain of the FMA form, C is carried as C * 2^-MM_CPU_A_BIAS: the block result in the
 * units of the block's sums T (kernel_avx512.h), so it is (T + n) - M, one exact subtraction,
 * where the true result took an FMA by 2^MM_CPU_A_BIAS; the next block's setup reads the scaled
 * C with its constants moved by MM_CPU_A_BIAS (exponent field and C's term alike). chain_rz
 * scales C on entry and back at the chain's end, both exact: a non-zero C is at least 2^-49 and
 * below 2^128, and a block's result is S * 2^(grid - MM_CPU_A_BIAS) with grid >=
 * MM_CPU_E_FLOOR - MM_CPU_RZ_FRAC_MAX, a normal fp32. The value: the exponent C is scaled by. */
#define MM_CPU_RZ_C_SCALED (-MM_CPU_A_BIAS)
_Static_assert(MM_CPU_E_FLOOR - MM_CPU_RZ_FRAC_MAX - MM_CPU_A_BIAS >= -126,
               "the FMA form's scaled block results are normal fp32 values");

/* The kernels of the SIMD paths. tile needs every block sum |S| < 2^24 (int32 sums, (float)S
 * exact); tile_split needs the sum of each half block below 2^31. The driver checks which
 * bound the preset and formats meet. */
extern const mm_cpu_kernel mm_cpu_kernel_portable;
extern const mm_cpu_kernel mm_cpu_kernel_avx2;
extern const mm_cpu_kernel mm_cpu_kernel_avx512;
/* The same kernel for CPUs without VPOPCNTD and VBMI (kernel_avx512_nibbles.c). */
extern const mm_cpu_kernel mm_cpu_kernel_avx512_nibbles;
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

/* One sign group (32 k) of a B panel of the SIMD kernels' layout (MM_CPU_E_CODED,
 * MM_CPU_BYTES_WORDS, w = 32 or 64) decoded with AVX2 (decode_b_avx2.c), as the scalar
 * decoder would: its records from rec on, its sign words into group (or none: NULL), and
 * col_special[c] |= 1 where column c holds a NaN/Inf code; cols[c]: column c's 32 codes (fmt).
 * Returns 0, doing nothing, for a layout or format it does not cover. Call only where the CPU
 * has AVX2. */
int mm_cpu_decode_b_group_avx2(const uint8_t* const* cols, int w, int fmt, int32_t* rec, uint32_t* group,
                               uint8_t* col_special);

/* The same for the 64-column panel of the AVX-512 kernel, with AVX-512 F and BW
 * (decode_b_avx512.c); returns 0, doing nothing, for another width or format. Call only where
 * mm_cpu_decode_avx512_runs(). */
int mm_cpu_decode_b_group_avx512(const uint8_t* const* cols, int w, int fmt, int32_t* rec, uint32_t* group,
                                 uint8_t* col_special);
/* Whether it runs on this CPU. */
int mm_cpu_decode_avx512_runs(void);

/* The decoding tables of A's rows, per code (decode.c, mm_cpu_lut_make): its A word (e in all four
 * bytes), its fp32 value, and whether it is positive, negative (the sign windows) or NaN/Inf, as
 * 256-bit sets (bit code % 8 of byte code / 8). */
typedef struct {
    int32_t word[256];
    float value[256];
    uint8_t pos[32], neg[32], special[32];
} mm_cpu_a_tables;

/* A row of len codes decoded into its records from row on (MM_CPU_A_WORDS words per k, the sign
 * windows as decode.c's mm_cpu_decode_a builds them) with AVX-512 (F, BW; decode_a_avx512.c),
 * word for word mm_cpu_decode_a's; returns whether the row holds a NaN/Inf code. Call only where
 * mm_cpu_decode_avx512_runs(). */
int mm_cpu_decode_a_row_avx512(const uint8_t* codes, int64_t len, const mm_cpu_a_tables* t, int32_t* row);
/* The same with AVX2, 8 k at a time (decode_a_avx2.c); call only where the CPU has AVX2. */
int mm_cpu_decode_a_row_avx2(const uint8_t* codes, int64_t len, const mm_cpu_a_tables* t, int32_t* row);

/* compose_fix of the SIMD kernels, on one vector's lanes stored to memory: the lanes whose grid
 * lies outside [MM_CPU_GRID_MIN, grid_hi] get mm_cpu_compose of their integer sum s1 + s2 (+0
 * where it is 0); the others keep the fast composition in o. */
static inline void mm_cpu_compose_lanes(int32_t* o, const int32_t* s1, const int32_t* s2, const int32_t* grid,
                                        int lanes, int grid_hi, int keep) {
    for (int l = 0; l < lanes; l++)
        if (grid[l] < MM_CPU_GRID_MIN || grid[l] > grid_hi)
            o[l] = (int32_t)mm_cpu_compose((int64_t)s1[l] + s2[l], grid[l], keep);
}

#endif /* MMAEMU_CPU_H */
