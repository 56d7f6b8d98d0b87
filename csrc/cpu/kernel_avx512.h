/* kernel_avx512.h: the tile kernels (narrow and split sums) with AVX-512 (F + BW + VL), as a
 * template: kernel_avx512.c instantiates it with VPOPCNTD and VBMI, kernel_avx512_nibbles.c with
 * MM_AVX512_NIBBLES set, for CPUs without them. Each defines one kernel object.
 *
 * Pass 1 (the block maximum) is the AVX2 kernel's (kernel_avx2.c) on 64 byte columns per
 * 512-bit vector, on coded exponents that add without saturation (cpu.h, MM_CPU_E_CODED).
 * The split form (b200) and the narrow form of presets outside mm_cpu_plan.rz
 * also take its pass 2 on 16 fp32 columns per vector. Called only when the CPU reports
 * avx512f, avx512bw and avx512vl.
 *
 * The narrow form of hopper and ada (mm_cpu_plan.rz) sums a block with one FMA per product:
 *   T = M + trunc(C * 2^-grid) units, M = 1.5 * 2^(23 + grid) (grid: the block's grid, here in
 *       the biased units of A's values), so T is an fp32 in [2^23, 2^24) units of 2^grid;
 *   T = fma(a', b, T) rounded toward zero (embedded rounding, no MXCSR change) for each k,
 *       with a' = a * (1 + 2^-23) as decoded (cpu.h, MM_CPU_RZ_ENLARGE): T + a'*b is
 *       positive, so the rounding is floor, and T gains floor(a'*b / 2^grid) exactly while the
 *       running sum stays within 2^22 units (the driver's bound, plan.c fits_rz): the model's cut
 *       toward zero of a*b for a positive product, one unit below it for a negative one;
 *   S = (T - M) / unit + n, n = the block's number of negative products, counted once per
 *       block from sign words (one bit per k: popcount((A+ & B-) | (A- & B+)), negatives; for
 *       16-k blocks one and of A's window with B's paired word, cpu.h mm_cpu_sign_paired).
 * S is then mm_block's exact sum. The block result S * 2^grid is formed in floating point, an
 * integer add and one subtraction, both exact (compose_block), as S * 2^(grid - MM_CPU_A_BIAS):
 * the chain carries C scaled by 2^-MM_CPU_A_BIAS (cpu.h, MM_CPU_RZ_C_SCALED), and cuts it
 * to its keep bits at its end. Per 16 products: one
 * FMA; per 16 outputs and block: an and, a ternary logic op and a popcount (a 32-k block with no
 * zero in A: a bitwise select and a popcount; 16-k blocks: an and and a popcount), where the multiply
 * form (pass2) takes per 16 products a multiply, an exponent add, a conversion and an add.
 * The popcount is VPOPCNTD, and C's exponent bytes come from VBMI's vpmultishiftqb (fields_u8);
 * CPUs without them (Skylake-SP, Cascade Lake, Cooper Lake) run the nibbles instance:
 * popcount32 from a nibble table, the bytes by shifts and selects.
 *
 * Built with -DMMAEMU_EMULATE_AVX512, the same source compiles against SIMDe's portable
 * implementation of the intrinsics (header-only, e.g. Debian's libsimde-dev), so that its
 * logic is checked bit for bit on CPUs without AVX-512 (test/test_cpu_backend.py). */
#include "cpu.h"

/* The kernel object this instance defines. */
#if defined(MM_AVX512_NIBBLES)
#define MM_CPU_AVX512_KERNEL const mm_cpu_kernel mm_cpu_kernel_avx512_nibbles
#else
#define MM_CPU_AVX512_KERNEL const mm_cpu_kernel mm_cpu_kernel_avx512
#endif

#if defined(MMAEMU_EMULATE_AVX512)
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
/* Conversions SIMDe 0.8 lacks, from its AVX ones (test builds only). */
static inline __m512d mm_emu_cvtepi32_pd(__m256i x) {
    __m512d r = _mm512_castpd256_pd512(_mm256_cvtepi32_pd(_mm256_castsi256_si128(x)));
    return _mm512_insertf64x4(r, _mm256_cvtepi32_pd(_mm256_extracti128_si256(x, 1)), 1);
}
static inline __m256 mm_emu_cvtpd_ps(__m512d x) {
    return _mm256_set_m128(_mm256_cvtpd_ps(_mm512_extractf64x4_pd(x, 1)),
                           _mm256_cvtpd_ps(_mm512_castpd512_pd256(x)));
}
/* And the ones of the FMA form, lane by lane: the FMA under the rounding it names (toward zero
 * in the sums): the exact product (two fp32 significands fit a double) plus C, added in double
 * under that rounding, then narrowed under it (rounding twice in one direction is rounding
 * once). */
#include <fenv.h>
static inline __m512 mm_emu_fmadd_round(__m512 a, __m512 b, __m512 c, int rounding) {
    float x[16], y[16], z[16];
    _mm512_storeu_ps(x, a);
    _mm512_storeu_ps(y, b);
    _mm512_storeu_ps(z, c);
    const int mode = fegetround();
    fesetround((rounding & 3) == _MM_FROUND_TO_ZERO ? FE_TOWARDZERO : FE_TONEAREST);
    for (int l = 0; l < 16; l++) {
        volatile double sum = (double)x[l] * (double)y[l] + (double)z[l];
        volatile float f = (float)sum;
        z[l] = f;
    }
    fesetround(mode);
    return _mm512_loadu_ps(z);
}
static inline __m128i mm_emu_cvtepi32_epi8(__m512i x) {
    int32_t v[16];
    int8_t o[16];
    _mm512_storeu_si512(v, x);
    for (int l = 0; l < 16; l++) o[l] = (int8_t)v[l];
    return _mm_loadu_si128((const __m128i*)(const void*)o);
}
static inline __m512i mm_emu_cvtepu8_epi32(__m128i x) {
    uint8_t v[16] = {0};
    int32_t o[16];
    _mm_storeu_si128((__m128i*)(void*)v, x);
    for (int l = 0; l < 16; l++) o[l] = v[l];
    return _mm512_loadu_si512(o);
}
#define _mm512_cvtepi32_pd mm_emu_cvtepi32_pd
#define _mm512_cvtepu8_epi32 mm_emu_cvtepu8_epi32
#define _mm512_cvtpd_ps mm_emu_cvtpd_ps
#define _mm512_fmadd_round_ps(a, b, c, rounding) mm_emu_fmadd_round(a, b, c, rounding)
#define _mm512_cvtepi32_epi8 mm_emu_cvtepi32_epi8
/* The composition's subtraction is exact: its rounding names only the sign of a zero result,
 * +0 to nearest, which the tests run in. */
#define _mm512_sub_round_ps(a, b, rounding) _mm512_sub_ps(a, b)
#ifndef _MM_FROUND_NO_EXC
#define _MM_FROUND_NO_EXC SIMDE_MM_FROUND_NO_EXC
#endif
#define MM_AVX512
#define MM_AVX512_INLINE static inline
#define MM_HAVE_AVX512_KERNEL 1
#elif (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#if defined(MM_AVX512_NIBBLES)
#define MM_AVX512_ISA "avx512f,avx512bw,avx512vl"
#else
#define MM_AVX512_ISA "avx512f,avx512bw,avx512vl,avx512vpopcntdq,avx512vbmi"
#endif
#define MM_AVX512 __attribute__((target(MM_AVX512_ISA)))
#define MM_AVX512_INLINE __attribute__((target(MM_AVX512_ISA), always_inline)) static inline
#define MM_HAVE_AVX512_KERNEL 1
#endif

#if defined(MM_HAVE_AVX512_KERNEL)

/* 4 rows x 64 columns: one 512-bit int8 vector per row in pass 1, four fp32 vectors per row in
 * the sums. Against 4 x 32 (one 256-bit int8 vector), each A value read from memory serves
 * twice the products and pass 1 takes half the instructions (benchmarks/results/cpu.md). */
enum { MR = 4, NV = 4, VL = 16, W = NV * VL, STRIDE = MM_CPU_PANEL_STRIDE(W) };

/* vpternlogd's immediates: (x & y) | z (M's bits from an exponent field and the half bit),
 * x ? y : z bit by bit, and (x & z) | y. */
enum { TERNARY_AND_OR = 0xEA, SELECT = 0xCA, SELECT_OR = 0xEC };

/* The bits of x's fp32 values times 2^e (exact where they stay normal: the scaled C of
 * cpu.h's MM_CPU_RZ_C_SCALED). */
#define MM_VI_MUL_POW2(x, e) \
    _mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(x), _mm512_castsi512_ps(_mm512_set1_epi32((127 + (e)) << 23))))
/* A tile: up to TR rows, in groups of MR that the FMA form runs block by block in turn
 * (chain_rz), so the groups after the first find the block's panel records in L1. */
enum { TR = 4 * MR };
/* M is padded to MR rows (mm_cpu_kernel.row_step), but the FMA form runs a tile's last group on
 * its live rows when they are 1 or 2 (kernel_simd_tiles.h, rz_group): small M gains most
 * (benchmarks/results/cpu.md). */

/* Byte v of every 32-bit lane of x as int32 lanes: in the panel's byte order (cpu.h,
 * MM_CPU_BYTES_WORDS), the bytes of columns [16 v, 16 v + 16), lined up with fp32 vector v. A
 * shift and a mask: the widening byte-to-dword shuffle (vpmovzxbd) of the plain order and the
 * narrowing one back (vpmovsdb and three inserts) were most of the block setup's instructions
 * (benchmarks/results/cpu.md). v is a constant once the loops are unrolled, and the switch keeps
 * each shift an immediate in every build. */
MM_AVX512_INLINE __m512i word_byte(__m512i x, int v) {
    const __m512i m = _mm512_set1_epi32(0xFF);
    switch (v) {
    case 0: return _mm512_and_si512(x, m);
    case 1: return _mm512_and_si512(_mm512_srli_epi32(x, 8), m);
    case 2: return _mm512_and_si512(_mm512_srli_epi32(x, 16), m);
    default: return _mm512_srli_epi32(x, 24);
    }
}

/* The same byte moved to bits 23..30 (an exponent field), or-ed with low (bits below 23): a
 * shift and one ternary logic op. */
MM_AVX512_INLINE __m512i word_byte_field(__m512i x, int v, __m512i low) {
    const __m512i m = _mm512_set1_epi32(0x7F800000);
    switch (v) {
    case 0: return _mm512_ternarylogic_epi32(_mm512_slli_epi32(x, 23), m, low, TERNARY_AND_OR);
    case 1: return _mm512_ternarylogic_epi32(_mm512_slli_epi32(x, 15), m, low, TERNARY_AND_OR);
    case 2: return _mm512_ternarylogic_epi32(_mm512_slli_epi32(x, 7), m, low, TERNARY_AND_OR);
    default: return _mm512_ternarylogic_epi32(_mm512_srli_epi32(x, 1), m, low, TERNARY_AND_OR);
    }
}

/* A row's byte vector (pass 1's coded block maxima) for fp32 vector v. */
MM_AVX512_INLINE __m512i lanes_u8(const uint8_t row[W], int v) {
    return word_byte(_mm512_loadu_si512((const void*)row), v);
}

/* Pass 1's block maxima, coded (cpu.h, MM_CPU_E_CODED), as exponents. */
MM_AVX512_INLINE __m512i lanes_e(const uint8_t row[W], int v) {
    return _mm512_sub_epi32(lanes_u8(row, v), _mm512_set1_epi32(2 * MM_CPU_E_CODE_OFFSET));
}

/* The grid exponent E - frac of a block from its scale s = 2^(frac - E). */
MM_AVX512_INLINE __m512i grid_of(__m512 s) {
    return _mm512_sub_epi32(_mm512_set1_epi32(127), _mm512_srli_epi32(_mm512_castps_si512(s), 23));
}

/* Lanes the fast exponent arithmetic cannot compose, composed exactly (kernel_avx2.c's
 * compose_fix); called on copies, outside the hot loops. */
MM_AVX512 __attribute__((noinline)) static void compose_fix(__m512i c[MR][NV], const __m512i S[MR][NV],
                                                           const __m512i S2[MR][NV],
                                                           const __m512i grid[MR][NV], int grid_hi,
                                                           const mm_cpu_plan* p) {
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) {
            int32_t s1[VL], s2[VL], gr[VL], o[VL];
            _mm512_storeu_si512(s1, S[r][v]);
            _mm512_storeu_si512(s2, S2[r][v]);
            _mm512_storeu_si512(gr, grid[r][v]);
            _mm512_storeu_si512(o, c[r][v]);
            mm_cpu_compose_lanes(o, s1, s2, gr, VL, grid_hi, p->keep);
            c[r][v] = _mm512_loadu_si512(o);
        }
}

/* fix_lanes with the grids from the scales s (the blocks of the multiply form). */
MM_AVX512_INLINE void fix_lanes(__m512i c[MR][NV], __m512i S[MR][NV], __m512i (*S2)[NV],
                                __m512 s[MR][NV], int grid_hi, const mm_cpu_plan* p) {
    __m512i cc[MR][NV], SS[MR][NV], SS2[MR][NV], gg[MR][NV];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) {
            cc[r][v] = c[r][v];
            SS[r][v] = S[r][v];
            SS2[r][v] = S2 ? S2[r][v] : _mm512_setzero_si512();
            gg[r][v] = grid_of(s[r][v]);
        }
    compose_fix(cc, SS, SS2, gg, grid_hi, p);
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) c[r][v] = cc[r][v];
}

/* The exponent C brings to the block maximum, 16 lanes: its exponent field (c_field) - 127.
 * C is +-0 (field 0: -127, below MM_CPU_E_FLOOR, so it raises nothing, as mm_cpu_c_exponent's
 * value for it) or an earlier block result, at least 2^(-28 - frac) >= 2^-49 (cpu.h):
 * never subnormal, so the field is its exponent (in the FMA form, of C scaled by 2^-32:
 * MM_CPU_RZ_C_SCALED). */
MM_AVX512_INLINE __m512i c_field(__m512i cb) {
    return _mm512_and_si512(_mm512_srli_epi32(cb, 23), _mm512_set1_epi32(0xFF));
}
MM_AVX512_INLINE __m512i c_exponent(__m512i cb) {
    return _mm512_sub_epi32(c_field(cb), _mm512_set1_epi32(127));
}

/* The exponent fields (c_field) of a row's four C vectors as one byte vector in the panel's
 * byte order: vector v's lane l at byte v of word l. With VBMI, one vpmultishiftqb per vector:
 * each byte of a 64-bit lane takes the 8 bits from bit 23 (the low fp32's field) or 55 (the
 * high one's), the first vector into all four bytes of a word, the others into byte v only (a
 * byte mask): 4 operations where shifts and bitwise selects take 8. */
#if !defined(MM_AVX512_NIBBLES)
MM_AVX512_INLINE __m512i fields_u8(const __m512i c[NV]) {
    const __m512i from = _mm512_set1_epi64(0x3737373717171717ll); /* bit offsets 23 and 55 */
    __m512i u = _mm512_multishift_epi64_epi8(from, c[0]);
    u = _mm512_mask_multishift_epi64_epi8(u, 0x2222222222222222ull, from, c[1]);
    u = _mm512_mask_multishift_epi64_epi8(u, 0x4444444444444444ull, from, c[2]);
    return _mm512_mask_multishift_epi64_epi8(u, 0x8888888888888888ull, from, c[3]);
}
#else
MM_AVX512_INLINE __m512i fields_u8(const __m512i c[NV]) {
    __m512i u = c_field(c[0]);
    u = _mm512_ternarylogic_epi32(_mm512_srli_epi32(c[1], 15), u, _mm512_set1_epi32(0xFF00), SELECT_OR);
    u = _mm512_ternarylogic_epi32(_mm512_srli_epi32(c[2], 7), u, _mm512_set1_epi32(0xFF0000), SELECT_OR);
    return _mm512_ternarylogic_epi32(_mm512_slli_epi32(c[3], 1), u, _mm512_set1_epi32((int32_t)0xFF000000u), SELECT_OR);
}
#endif

/* Pass 2 over k in [k_begin, k_end) of a block: S += trunc((a * b) * 2^-grid), the scaling
 * an integer add G to the product's exponent field (cpu.h, MM_CPU_A_BIAS). */
MM_AVX512_INLINE void pass2(const int32_t* ak, int64_t as, const int32_t* bk, int k_begin,
                            int k_end, const __m512i G[MR][NV], __m512i S[MR][NV], const int R) {
    for (int k = k_begin; k < k_end; k++) {
        const mm_cpu_f32* vb = mm_cpu_cvalues(bk + k * STRIDE + MM_CPU_PANEL_V(W));
        __m512 bv[NV];
        for (int v = 0; v < NV; v++) bv[v] = _mm512_loadu_ps(vb + v * VL);
        for (int r = 0; r < R; r++) {
            const __m512 av = _mm512_set1_ps(mm_bits_f32((uint32_t)ak[r * as + MM_CPU_A_WORDS * k + MM_CPU_A_V]));
            for (int v = 0; v < NV; v++) {
                const __m512i q = _mm512_add_epi32(_mm512_castps_si512(_mm512_mul_ps(av, bv[v])), G[r][v]);
                S[r][v] = _mm512_add_epi32(S[r][v], _mm512_cvttps_epi32(_mm512_castsi512_ps(q)));
            }
        }
    }
}


/* The prefetch of A in the multiply and split forms (chain_rows; the FMA form, and every form of
 * the AVX2 kernel, leave A to the hardware): a block of n k of an mr-row group holds
 * mr * a_lines(n) 64-byte lines of A words (MM_CPU_A_WORDS * n words per row); line i of the
 * group's block at pf, the rows taken in turn (as: the row stride in words). */
static inline int a_lines(int n) { return (MM_CPU_A_WORDS * n + 15) / 16; }
static inline void prefetch_a_line(const int32_t* pf, int64_t as, int mr, int i) {
    __builtin_prefetch(pf + (i % mr) * as + 16 * (i / mr), 0, 3);
}

/* Pass 1: the products' largest alignment exponent over a block of n, 64 columns per byte vector
 * (sums of the coded exponents, cpu.h, MM_CPU_E_CODED), raised to MM_CPU_E_FLOOR (a block of
 * zero products and a zero C takes the floor's grid, as mm_cpu_scale does), into E8 (row r at
 * E8[r], coded: lanes_e reads them); its first npf k steps prefetch A's lines from pf (chain_rows). */
MM_AVX512_INLINE void pass1_rows_prefetch(const int32_t* ak, int64_t as, const int32_t* bk, int n,
                                          uint8_t E8[MR][W], const int32_t* pf, int npf, const int R) {
    __m512i e[MR];
    for (int r = 0; r < R; r++) e[r] = _mm512_set1_epi8((char)(MM_CPU_E_FLOOR + 2 * MM_CPU_E_CODE_OFFSET));
    for (int64_t k = 0; k < n; k++) {
        if (k < npf) prefetch_a_line(pf, as, R, (int)k);
        const __m512i eb = _mm512_loadu_si512((const void*)(bk + k * STRIDE));
        const int32_t* ar = ak + MM_CPU_A_WORDS * k;
        for (int r = 0; r < R; r++)
            e[r] = _mm512_max_epu8(e[r], _mm512_add_epi32(eb, _mm512_set1_epi32(ar[r * as])));
    }
    for (int r = 0; r < R; r++) _mm512_storeu_si512((void*)E8[r], e[r]);
}

/* Pass 1 without prefetches (the FMA form's, kernel_simd_tiles.h). */
MM_AVX512_INLINE void pass1_rows(const int32_t* ak, int64_t as, const int32_t* bk, int n, uint8_t E8[MR][W],
                                 const int R) {
    pass1_rows_prefetch(ak, as, bk, n, E8, ak, 0, R);
}

/* The narrow block result of one vector: the keep bits of (float)S with grid added to the exponent
 * field; returns the lanes outside that fast range, for compose_fix. */
MM_AVX512_INLINE __mmask16 narrow_compose(__m512i* c, __m512i S, __m512i grid, __m512i keep_mask,
                                          __m512i grid_lo, __m512i grid_hi) {
    const __m512i f = _mm512_and_si512(_mm512_castps_si512(_mm512_cvtepi32_ps(S)), keep_mask);
    const __mmask16 nz = _mm512_test_epi32_mask(S, S);
    *c = _mm512_maskz_add_epi32(nz, f, _mm512_slli_epi32(grid, 23));
    return nz & (_mm512_cmpgt_epi32_mask(grid_lo, grid) | _mm512_cmpgt_epi32_mask(grid, grid_hi));
}

/* ---- the number of negative products of a block (cpu.h, MM_CPU_RZ_ENLARGE) ---- */

/* The positive (half 0) or negative (half 1) words of group j for fp32 vector v's columns;
 * from the paired layout (mm_cpu_sign_paired) where the plan has it. */
MM_AVX512_INLINE __m512i b_group_words(const uint32_t* b, int64_t j, int half, int v, int paired) {
    const uint32_t* g = mm_cpu_sign_group(b, j, W) + v * VL;
    if (!paired) return _mm512_loadu_si512((const void*)(g + half * W));
    const __m512i h0 = _mm512_loadu_si512((const void*)g), h1 = _mm512_loadu_si512((const void*)(g + W));
    const __m512i lo = _mm512_set1_epi32(0xFFFF);
    return half ? _mm512_ternarylogic_epi32(lo, h0, _mm512_slli_epi32(h1, 16), SELECT)
                : _mm512_ternarylogic_epi32(lo, _mm512_srli_epi32(h0, 16), h1, SELECT);
}

/* Column words of the panel's sign groups for the block of n k from record kb: the positive
 * (half 0) or negative (half 1) words of fp32 vector v's columns, shifted so bit i is k = kb + i.
 * A block of a standard preset starts on a group (kb a multiple of 32, or 16 with ada's
 * 16-k blocks inside one group, which the paired layout serves without these words); others take
 * the next group's bits as well. */
MM_AVX512_INLINE __m512i b_sign_words(const uint32_t* b, int64_t kb, int n, int half, int v, int paired) {
    const int64_t j = kb / MM_CPU_SIGN_SPAN;
    const int o = (int)(kb % MM_CPU_SIGN_SPAN);
    __m512i x = b_group_words(b, j, half, v, paired);
    if (o) {
        x = _mm512_srl_epi32(x, _mm_cvtsi32_si128(o));
        if (o + n > MM_CPU_SIGN_SPAN) {
            const __m512i y = b_group_words(b, j + 1, half, v, paired);
            x = _mm512_or_si512(x, _mm512_sll_epi32(y, _mm_cvtsi32_si128(MM_CPU_SIGN_SPAN - o)));
        }
    }
    return x;
}

/* The set bits of each 32-bit lane: VPOPCNTD, or (this file built with MM_AVX512_NIBBLES, for
 * CPUs without it: Skylake-SP's AVX-512) a nibble table and byte sums. */
MM_AVX512_INLINE __m512i popcount32(__m512i x) {
#if defined(MM_AVX512_NIBBLES)
    const __m512i table = _mm512_set4_epi32(0x04030302, 0x03020201, 0x03020201, 0x02010100);
    const __m512i low = _mm512_set1_epi8(0x0F);
    const __m512i c = _mm512_add_epi8(_mm512_shuffle_epi8(table, _mm512_and_si512(x, low)),
                                      _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi32(x, 4), low)));
    return _mm512_madd_epi16(_mm512_maddubs_epi16(c, _mm512_set1_epi8(1)), _mm512_set1_epi16(1));
#else
    return _mm512_popcnt_epi32(x);
#endif
}

/* The number of negative products of the block per output of row r, for the block's B words
 * bp, bn of vector v and row r's A words ap, an (broadcast): the set bits of
 * (A positive and B negative) or (A negative and B positive). */
MM_AVX512_INLINE __m512i negatives(__m512i ap, __m512i an, __m512i bp, __m512i bn) {
    enum { OR_AND = 0xF8 }; /* x | (y & z) */
    return popcount32(_mm512_ternarylogic_epi32(_mm512_and_si512(bn, ap), bp, an, OR_AND));
}

/* Whether none of the 32 elements from record 0 of the group's first R rows is zero (each is
 * positive or negative in its sign windows, mm_cpu_a_signs). */
MM_AVX512_INLINE int a_nonzero32(const int32_t* ak, int64_t as, const int R) {
    uint32_t all = 0xFFFFFFFFu;
    for (int r = 0; r < R; r++) {
        uint32_t pos, neg;
        mm_cpu_a_signs(ak + r * as, MM_CPU_SIGN_SPAN, &pos, &neg);
        all &= pos | neg;
    }
    return all == 0xFFFFFFFFu;
}

/* The composition of a block of the narrow FMA form (rz_block_rows): the block result of C into
 * c from its rows' sums T. T - M = (S - n) units of 2^(grid - MM_CPU_A_BIAS), n the negative
 * products, so T + n (T's bits plus n: M + S stays in T's binade, as |S| < 2^22 units) minus M
 * is S units: S * 2^(grid - MM_CPU_A_BIAS), the block result as the chain carries it (cpu.h,
 * MM_CPU_RZ_C_SCALED), one exact subtraction (both in one binade); rounded to nearest (named
 * here, though the backend always runs in it), an exact zero is +0, as mm_cpu_compose gives. M
 * (1.5 times T's power of two) comes from T's bits, one ternary op, rather than kept through the
 * loop. (The true result, an FMA with 2^MM_CPU_A_BIAS after an and and an add for M, takes one
 * operation more per 16 outputs.)
 * Its keep bits are taken at the chain's end (chain_rz; the next block reads the same from all
 * of them: cpu.h, MM_CPU_RZ_KEEP_LATE). keep_t: T is left holding T + n (for
 * compose_fix), else as it was: the usual call stores no T (16 stores per block and group
 * fewer). */
MM_AVX512_INLINE void compose_block(const mm_cpu_plan* p, const int32_t* ak, int64_t as, const uint32_t* bsign,
                                    int64_t kb, int n, __m512 T[MR][NV], __m512i c[MR][NV], const int R,
                                    const int keep_t) {
    const __m512i v_expo = _mm512_set1_epi32((int32_t)0xFF800000u), v_half = _mm512_set1_epi32(0x400000);
#define MM_COMPOSE(r, v, negs)                                                                         \
    do {                                                                                               \
        const __m512i tb = _mm512_add_epi32(_mm512_castps_si512(T[r][v]), negs);                      \
        if (keep_t) T[r][v] = _mm512_castsi512_ps(tb);                                                 \
        const __m512 m = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(tb, v_expo, v_half, TERNARY_AND_OR)); \
        c[r][v] = _mm512_castps_si512(_mm512_sub_round_ps(_mm512_castsi512_ps(tb), m,                  \
                                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); \
    } while (0)
    if (p->sign_paired && kb % 16 == 0) {
        /* a 16-k block on a half of its group: the row's sign window and'ed with the half's
         * words (mm_cpu_sign_paired), the window's bits from n on cleared */
        const uint32_t* half = mm_cpu_sign_group(bsign, kb / MM_CPU_SIGN_SPAN, W) + (kb % MM_CPU_SIGN_SPAN ? W : 0);
        const uint32_t live = n >= 16 ? 0xFFFFFFFFu : ((1u << n) - 1u) * 0x10001u;
        __m512i bh[NV];
        for (int v = 0; v < NV; v++) bh[v] = _mm512_loadu_si512((const void*)(half + v * VL));
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512i aw = _mm512_set1_epi32((int32_t)((uint32_t)ak[r * as + MM_CPU_A_SGN] & live));
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) MM_COMPOSE(r, v, popcount32(_mm512_and_si512(aw, bh[v])));
        }
    } else if (!p->sign_paired && kb % MM_CPU_SIGN_SPAN == 0 && n == MM_CPU_SIGN_SPAN && a_nonzero32(ak, as, R)) {
        /* a whole group's block (hopper's) with no zero among the rows' A elements: the negative
         * products are B's positive ones where A is negative, else B's negative ones, one
         * bitwise select of the group's words as stored (a zero in A would count as positive),
         * where the two-word form takes an and and a ternary op (B's words loaded as stored) */
        const uint32_t* g = mm_cpu_sign_group(bsign, kb / MM_CPU_SIGN_SPAN, W);
        __m512i bp[NV], bn[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            bp[v] = _mm512_loadu_si512((const void*)(g + v * VL));
            bn[v] = _mm512_loadu_si512((const void*)(g + W + v * VL));
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            uint32_t pos, neg;
            mm_cpu_a_signs(ak + r * as, MM_CPU_SIGN_SPAN, &pos, &neg);
            const __m512i an = _mm512_set1_epi32((int32_t)neg);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) MM_COMPOSE(r, v, popcount32(_mm512_ternarylogic_epi32(an, bp[v], bn[v], SELECT)));
        }
    } else {
        /* the two-word layout (its words rebuilt where the plan has the paired one) */
        __m512i bp[NV], bn[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            bp[v] = p->sign_paired ? b_sign_words(bsign, kb, n, 0, v, 1) : b_sign_words(bsign, kb, n, 0, v, 0);
            bn[v] = p->sign_paired ? b_sign_words(bsign, kb, n, 1, v, 1) : b_sign_words(bsign, kb, n, 1, v, 0);
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            uint32_t pos, neg;
            mm_cpu_a_signs(ak + r * as, n, &pos, &neg);
            const __m512i ap = _mm512_set1_epi32((int32_t)pos), an = _mm512_set1_epi32((int32_t)neg);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) MM_COMPOSE(r, v, negatives(ap, an, bp[v], bn[v]));
        }
    }
#undef MM_COMPOSE
}

/* One block of the narrow FMA form (file comment) on the group's first R rows (MR, or the live
 * rows of a tile's last group): the block result of C = c into c. E8: the products' block
 * maxima (pass 1, at least MM_CPU_E_FLOOR); bsign, kb: the panel's sign groups and the block's
 * first k (the count of negative products, taken in the composition); c: C scaled by
 * 2^-MM_CPU_A_BIAS (MM_CPU_RZ_C_SCALED). E (the block maximum with C's exponent) lies in
 * [-64, 127] and frac is at most MM_CPU_RZ_FRAC_MAX, so M = 1.5 * 2^(23 + E - frac -
 * MM_CPU_A_BIAS) and T are normal and finite; the constants below are those expressions with
 * E's part added in the loops. The setup and the composition are unrolled in full (GCC's
 * pragma): rolled, gcc kept their sums on the stack (benchmarks/results/cpu.md). */
MM_AVX512_INLINE void rz_block_rows(const mm_cpu_plan* p, const int32_t* ak, int64_t as, const int32_t* bk, int n,
                                   const uint8_t E8[MR][W], const uint32_t* bsign, int64_t kb, __m512i c[MR][NV],
                                   const int R) {
    /* In the setup, F = E + 127 - MM_CPU_A_BIAS (the scaled C's exponent field where C sets E),
     * so the constants below take E's 127 and the bias in. */
    const int32_t m_field = 23 - p->frac; /* M's exponent field - F */
    const __m512i v_m8 = _mm512_set1_epi8((char)m_field);
    const __m512i v_half = _mm512_set1_epi32(0x400000);
    /* C's term takes 2^(frac - E + MM_CPU_A_BIAS) = (254 + frac - F) << 23, the scaled C times
     * it being C * 2^(frac - E): taken from M's bits ((F + m_field) << 23 | half) */
    const __m512i v_sadd = _mm512_set1_epi32((int32_t)(((uint32_t)(254 + p->frac + m_field) << 23) | 0x400000u));
    /* pass 1's code -> F */
    const __m512i v_eoff = _mm512_set1_epi8((char)(127 - MM_CPU_A_BIAS - 2 * MM_CPU_E_CODE_OFFSET));
    __m512 T[MR][NV];
    /* The largest F over the tile, checked once after the loop: a lane above the range the
     * composition below is exact in sends the tile to compose_fix, which checks each lane. (E is
     * at least MM_CPU_E_FLOOR, above that range's lower end unless a test build narrows it.) */
    _Static_assert(MM_CPU_GRID_MAX_NARROW + MM_CPU_RZ_FRAC_MAX + 127 - MM_CPU_A_BIAS <= 255,
                   "the range check of F compares bytes");
    _Static_assert(MM_CPU_E_FLOOR + 127 - MM_CPU_A_BIAS >= 1,
                   "F is a byte above a zero C's exponent field, 0");
    _Static_assert(MM_CPU_E_FLOOR + 127 + 23 - MM_CPU_A_BIAS - MM_CPU_RZ_FRAC_MAX >= 1,
                   "M's exponent field, F + m_field, is a byte of at least 1");
    __m512i f_max = _mm512_setzero_si512();
#if MM_CPU_GRID_MIN + MM_CPU_RZ_FRAC_MAX >= MM_CPU_E_FLOOR
    _Static_assert(MM_CPU_GRID_MIN + 127 - MM_CPU_A_BIAS >= 0, "the range check of F compares bytes");
    __m512i f_min = _mm512_set1_epi8((char)0xFF);
#endif
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        /* F = max(the products' E, C's exponent) + 127 - MM_CPU_A_BIAS, four vectors' lanes in
         * one byte vector */
        const __m512i f8 = _mm512_max_epu8(_mm512_add_epi8(_mm512_loadu_si512((const void*)E8[r]), v_eoff),
                                           fields_u8(c[r]));
        f_max = _mm512_max_epu8(f_max, f8);
#if MM_CPU_GRID_MIN + MM_CPU_RZ_FRAC_MAX >= MM_CPU_E_FLOOR
        f_min = _mm512_min_epu8(f_min, f8);
#endif
        /* M's exponent fields, F + m_field in [33, 245] (F >= 31: E >= MM_CPU_E_FLOOR), bytes */
        const __m512i m8 = _mm512_add_epi8(f8, v_m8);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            const __m512i mb = word_byte_field(m8, v, v_half); /* M's bits */
            const __m512 s = _mm512_castsi512_ps(_mm512_sub_epi32(v_sadd, mb));
            const __m512i cterm = _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_castsi512_ps(c[r][v]), s));
            T[r][v] = _mm512_castsi512_ps(_mm512_add_epi32(mb, cterm));
        }
    }
    /* A's words are left to the hardware prefetcher: a line of the next block fetched per k
     * step here cost more in scalar address work beside the FMAs than it saved
     * (benchmarks/results/cpu.md). The loop unrolled by two halves its address and loop
     * instructions, which share the FMAs' ports. */
#pragma GCC unroll 2
    for (int64_t k = 0; k < n; k++) {
        const int32_t* rec = bk + k * STRIDE;
        _mm_prefetch((const char*)(const void*)(rec + n * STRIDE), _MM_HINT_T0); /* the next pass 1's */
        const mm_cpu_f32* vb = mm_cpu_cvalues(rec + MM_CPU_PANEL_V(W));
        __m512 bv[NV];
        for (int v = 0; v < NV; v++) bv[v] = _mm512_loadu_ps(vb + v * VL);
        for (int r = 0; r < R; r++) {
            const __m512 av = _mm512_set1_ps(mm_bits_f32((uint32_t)ak[r * as + MM_CPU_A_WORDS * k + MM_CPU_A_V]));
            for (int v = 0; v < NV; v++)
                T[r][v] = _mm512_fmadd_round_ps(av, bv[v], T[r][v], _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        }
    }
    __mmask64 out_of_range =
        _mm512_cmpgt_epu8_mask(f_max, _mm512_set1_epi8((char)(MM_CPU_GRID_MAX_NARROW + p->frac + 127 - MM_CPU_A_BIAS)));
#if MM_CPU_GRID_MIN + MM_CPU_RZ_FRAC_MAX >= MM_CPU_E_FLOOR
    out_of_range |= _mm512_cmplt_epu8_mask(f_min, _mm512_set1_epi8((char)(MM_CPU_GRID_MIN + p->frac + 127 - MM_CPU_A_BIAS)));
#endif
    if (!out_of_range) {
        compose_block(p, ak, as, bsign, kb, n, T, c, R, 0);
        return;
    }
    /* lanes out of range (none in FP8 GEMMs; test builds narrow the range): composed exactly
     * from the integer sums in T, which the composition keeps (T + n) */
    compose_block(p, ak, as, bsign, kb, n, T, c, R, 1);
    const __m512i v_fbits = _mm512_set1_epi32(0x7FFFFF);
    const __m512i v_mbase = _mm512_set1_epi32(127 + 23 - MM_CPU_A_BIAS); /* M's field - grid */
    __m512i S[MR][NV], G[MR][NV], zero[MR][NV];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) {
            /* rows from R on, not run: the T of a sum 0 on grid 0, which compose_fix leaves */
            const __m512i tb = r < R ? _mm512_castps_si512(T[r][v])
                                     : _mm512_or_si512(_mm512_slli_epi32(v_mbase, 23), v_half);
            G[r][v] = _mm512_sub_epi32(_mm512_srli_epi32(tb, 23), v_mbase);
            S[r][v] = _mm512_sub_epi32(_mm512_and_si512(tb, v_fbits), v_half);
            zero[r][v] = _mm512_setzero_si512();
        }
    /* compose_fix composes true results: the chain's scaled C (MM_CPU_RZ_C_SCALED) is taken out
     * of its scale and put back, both exact */
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) c[r][v] = MM_VI_MUL_POW2(c[r][v], -MM_CPU_RZ_C_SCALED);
    compose_fix(c, S, zero, G, MM_CPU_GRID_MAX_NARROW, p);
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) c[r][v] = MM_VI_MUL_POW2(c[r][v], MM_CPU_RZ_C_SCALED);
}

/* The block result of the split form (kernel_avx2.c's compose_split, 16 lanes). */
MM_AVX512_INLINE __m512i compose_split(__m512i S, __m512i S2, __m512i grid, const mm_cpu_plan* p,
                                       __mmask16* bad) {
    const int keep = p->keep < 24 ? p->keep : 24;
    const __m512i mask = _mm512_set1_epi64((int64_t)(~0ull << (53 - keep)));
    const __m512d lo = _mm512_add_pd(_mm512_cvtepi32_pd(_mm512_castsi512_si256(S)),
                                     _mm512_cvtepi32_pd(_mm512_castsi512_si256(S2)));
    const __m512d hi = _mm512_add_pd(_mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(S, 1)),
                                     _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(S2, 1)));
    const __m256 flo = _mm512_cvtpd_ps(_mm512_castsi512_pd(_mm512_and_si512(_mm512_castpd_si512(lo), mask)));
    const __m256 fhi = _mm512_cvtpd_ps(_mm512_castsi512_pd(_mm512_and_si512(_mm512_castpd_si512(hi), mask)));
    const __m512i fb = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_castps_si256(flo)),
                                          _mm256_castps_si256(fhi), 1);
    const __mmask16 nz = _mm512_test_epi32_mask(fb, fb);
    *bad |= nz & (_mm512_cmpgt_epi32_mask(_mm512_set1_epi32(MM_CPU_GRID_MIN), grid) |
                  _mm512_cmpgt_epi32_mask(grid, _mm512_set1_epi32(MM_CPU_GRID_MAX_SPLIT)));
    return _mm512_maskz_add_epi32(nz, fb, _mm512_slli_epi32(grid, 23));
}

/* The blocks over [k0, k1) of a group's first R rows (MR, or the live rows of a tile's last
 * group) in the multiply (pass2) and split forms, continuing from the C in c (mm_chain). */
MM_AVX512_INLINE void chain_rows(const mm_cpu_plan* p, const mm_cpu_operands* o, int64_t k0, int64_t k1,
                                 __m512i c[MR][NV], const int split, const int R) {
    const int64_t as = o->as;
    const int32_t *a = o->a, *b = o->b;
    const __m512i zero = _mm512_setzero_si512();
    const __m512i v_floor = _mm512_set1_epi32(MM_CPU_E_FLOOR);
    const __m512i v_scale = _mm512_set1_epi32(127 + p->frac);
    const __m512i keep_mask = _mm512_set1_epi32((int32_t)p->keep_mask);
    const __m512i grid_lo = _mm512_set1_epi32(MM_CPU_GRID_MIN), grid_hi = _mm512_set1_epi32(MM_CPU_GRID_MAX_NARROW);
    const __m512i v_frac = _mm512_set1_epi32(p->frac), v_bias = _mm512_set1_epi32(MM_CPU_A_BIAS);
    const __m512i v_glo = _mm512_set1_epi32(MM_CPU_PROD_EXP_MIN - p->frac), v_ghi = _mm512_set1_epi32(MM_CPU_PROD_EXP_MAX);
    for (int64_t kb = k0; kb < k1; kb += p->block) {
        const int n = (int)(k1 - kb < p->block ? k1 - kb : p->block);
        const int32_t* ak = a + MM_CPU_A_WORDS * kb;
        const int32_t* bk = b + kb * STRIDE;
        /* A's rows come from L3 or memory (each is read once per panel) in four streams the
         * hardware prefetcher lags on: this form fetches the block after next from pass 1 (the
         * FMA form, chain_rz, leaves its tile's rows to the hardware: rz_block_rows). */
        uint8_t E8[MR][W];
        const int npf = kb + 2 * p->block < k1 ? R * a_lines(p->block) : 0;
        const int32_t* pf = ak + MM_CPU_A_WORDS * 2 * p->block;
        for (int i = n; i < npf; i++) prefetch_a_line(pf, as, R, i); /* more lines than k steps */
        pass1_rows_prefetch(ak, as, bk, n, E8, pf, npf, R);
        /* E with C's exponent, s = 2^(frac - E), S = trunc(C * s); the grid is later recovered
         * from s (as in the AVX2 kernel). */
        __m512i S[MR][NV], G[MR][NV];
        __m512 s[MR][NV];
        for (int r = 0; r < MR; r++) {
            for (int v = 0; v < NV; v++) {
                if (r >= R) { /* rows not run: a sum 0 on grid 0, which fix_lanes leaves */
                    s[r][v] = _mm512_set1_ps(1.0f);
                    S[r][v] = G[r][v] = zero;
                    continue;
                }
                const __m512i cb = p->c_late ? zero : c[r][v]; /* a late C joins after the block */
                const __m512i ef = _mm512_max_epi32(_mm512_max_epi32(lanes_e(E8[r], v), c_exponent(cb)), v_floor);
                s[r][v] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_sub_epi32(v_scale, ef), 23));
                S[r][v] = _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_castsi512_ps(cb), s[r][v]));
                G[r][v] = _mm512_slli_epi32(_mm512_sub_epi32(v_bias, _mm512_min_epi32(_mm512_max_epi32(
                                                _mm512_sub_epi32(ef, v_frac), v_glo), v_ghi)), 23);
            }
        }
        /* Pass 2: every product cut toward zero to the grid, summed exactly (split: the
         * second half of the block into S2). */
        const int h = split ? (n + 1) / 2 : n;
        pass2(ak, as, bk, 0, h, G, S, R);
        __m512i S2[MR][NV];
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) S2[r][v] = zero;
        pass2(ak, as, bk, h, n, G, S2, R);
        __mmask16 bad = 0;
        if (split) {
            __m512i c_old[MR][NV];
            for (int r = 0; r < R; r++)
                for (int v = 0; v < NV; v++) {
                    c_old[r][v] = c[r][v];
                    c[r][v] = compose_split(S[r][v], S2[r][v], grid_of(s[r][v]), p, &bad);
                }
            if (bad) fix_lanes(c, S, S2, s, MM_CPU_GRID_MAX_SPLIT, p);
            if (p->c_late) /* D + C, one fp32 RN-even add (mm_block) */
                for (int r = 0; r < R; r++)
                    for (int v = 0; v < NV; v++)
                        c[r][v] = _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(c[r][v]), _mm512_castsi512_ps(c_old[r][v])));
            continue;
        }
        for (int r = 0; r < R; r++)
            for (int v = 0; v < NV; v++)
                bad |= narrow_compose(&c[r][v], S[r][v], grid_of(s[r][v]), keep_mask, grid_lo, grid_hi);
        if (bad) fix_lanes(c, S, NULL, s, MM_CPU_GRID_MAX_NARROW, p);
    }
}

/* The tile schedule (chain_rz, chains, tile, tile_split) on this file's vectors. */
typedef __m512i mm_vi;
typedef __m512 mm_vf;
#define MM_SIMD MM_AVX512
#define MM_SIMD_INLINE MM_AVX512_INLINE
#define MM_VI_LOAD(p) _mm512_loadu_si512(p)
#define MM_VI_STORE(p, x) _mm512_storeu_si512(p, x)
#define MM_VI_ZERO() _mm512_setzero_si512()
#define MM_VI_SET1(x) _mm512_set1_epi32(x)
#define MM_VI_AND(a, b) _mm512_and_si512(a, b)
#define MM_VF_LOAD(p) _mm512_loadu_ps(p)
#define MM_VF_STORE(p, x) _mm512_storeu_ps(p, x)
#define MM_VF_ZERO() _mm512_setzero_ps()
#define MM_VF_ADD_BITS(a, x) _mm512_add_ps(a, _mm512_castsi512_ps(x))
#define MM_RZ_ENTER() /* the FMAs name their rounding */
#define MM_RZ_LEAVE()
#include "kernel_simd_tiles.h"

MM_CPU_AVX512_KERNEL = {"avx512", TR, W, MR, tile, tile_split, MM_CPU_A_BIAS, MM_CPU_E_CODED, MM_CPU_BYTES_WORDS, 1, 1};

#else
MM_CPU_AVX512_KERNEL = {"avx512", 1, 1, 1, 0, 0, 0, MM_CPU_E_CODED, MM_CPU_BYTES_WORDS, 0, 0};
#endif
