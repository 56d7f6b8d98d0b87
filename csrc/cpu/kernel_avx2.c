/* kernel_avx2.c: the tile kernels (narrow and split sums) with AVX2 and FMA.
 *
 * The AVX-512 kernel (kernel_avx512.h) on 256-bit vectors; read its file comment first, and
 * kernel_portable.c for the algorithm one lane at a time. A lane is one output column: the
 * tile's groups are MR rows x NV vectors of 8 columns, A's values broadcast, B's panel loaded a
 * vector at a time, so the block maximum and the sums are lane-wise.
 *   Pass 1 (the block maximum): 32 columns per byte vector, coded exponents (cpu.h,
 *   MM_CPU_E_CODED): a 32-bit add of A's word and an unsigned byte maximum per 32 products.
 *   The narrow form of hopper and ada (mm_cpu_plan.rz): one FMA per product, rounded toward
 *   zero, floors of enlarged products and the block's number of negative products counted
 *   from sign words, as in the AVX-512 kernel. AVX2 has no embedded rounding: the FMA form
 *   runs with MXCSR's rounding control set to toward zero (chain_rz sets it and puts the
 *   caller's back), and every other floating-point operation inside that region is exact
 *   (the products' and C's scaling by powers of two, the block result's subtraction, whose
 *   exact zero is +0 toward zero as to nearest) or a truncating conversion, so no other bit
 *   depends on it.
 *   The count has no VPOPCNTD: a nibble table (vpshufb) and byte sums.
 *   The split form (b200) and the narrow form outside mm_cpu_plan.rz: per product a multiply,
 *   an exponent add (times 2^-grid, cpu.h, MM_CPU_A_BIAS), a truncating conversion and
 *   an add; the split form sums the two halves of a block separately and adds them in fp64.
 *
 * Compiled with a target attribute, so the rest of the library keeps the baseline ISA; the
 * driver calls it only when the CPU reports avx2 and fma. */
#include "cpu.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>

#define MM_AVX2 __attribute__((target("avx2,fma")))
#define MM_AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) static inline

/* 3 rows x 32 columns: one 256-bit byte vector per row in pass 1, four fp32 vectors per row in
 * the sums (12 accumulators and the broadcast A value; B's vectors where registers remain, else
 * as the FMAs' memory operands). 2 x 32, whose 8 accumulators only just cover two FMA pipes of
 * latency 4, ran slower in cache (benchmarks/results/cpu.md). */
enum { MR = 3, NV = 4, VL = 8, W = NV * VL, STRIDE = MM_CPU_PANEL_STRIDE(W) };
/* A tile: up to TR rows, in groups of MR that the FMA form runs block by block in turn
 * (chain_rz), so the groups after the first find the block's panel records in L1. */
enum { TR = 5 * MR };
/* M is padded to MR rows, but the FMA form runs a tile's last group on its live rows when they
 * are 1 or 2 (kernel_simd_tiles.h, rz_group): small M gains most (benchmarks/results/cpu.md). */

/* The bits of x's fp32 values times 2^e (exact where they stay normal: the scaled C of
 * cpu.h's MM_CPU_RZ_C_SCALED). */
#define MM_VI_MUL_POW2(x, e) \
    _mm256_castps_si256(_mm256_mul_ps(_mm256_castsi256_ps(x), _mm256_castsi256_ps(_mm256_set1_epi32((127 + (e)) << 23))))

/* ---- MXCSR's rounding control (the FMA form) ---- */

/* Read and write MXCSR. The memory clobber keeps loads and stores, and so the FMA form's
 * operands and results, on their side of the write. */
static inline unsigned mxcsr_get(void) {
    unsigned x;
    __asm__ __volatile__("stmxcsr %0" : "=m"(x) : : "memory");
    return x;
}
static inline void mxcsr_set(unsigned x) {
    __asm__ __volatile__("ldmxcsr %0" : : "m"(x) : "memory");
}
/* Rounding control (bits 13-14; 3: toward zero) and the exception masks (bits 7-12), all set in
 * the FMA form, as the AVX-512 kernel's FMAs suppress exceptions. */
enum { MXCSR_RC = 0x6000u, MXCSR_RC_TOWARD_ZERO = 0x6000u, MXCSR_MASKS = 0x1F80u };

/* Sets the FMA form's MXCSR; returns the caller's, for mxcsr_set after. */
static inline unsigned rz_enter(void) {
    const unsigned csr = mxcsr_get();
    mxcsr_set((csr & ~MXCSR_RC) | MXCSR_RC_TOWARD_ZERO | MXCSR_MASKS);
    return csr;
}

/* Byte v of every 32-bit lane of x as int32 lanes: in the panel's byte order (cpu.h,
 * MM_CPU_BYTES_WORDS), the bytes of columns [8 v, 8 v + 8), lined up with fp32 vector v. */
MM_AVX2_INLINE __m256i word_byte(__m256i x, int v) {
    const __m256i m = _mm256_set1_epi32(0xFF);
    switch (v) {
    case 0: return _mm256_and_si256(x, m);
    case 1: return _mm256_and_si256(_mm256_srli_epi32(x, 8), m);
    case 2: return _mm256_and_si256(_mm256_srli_epi32(x, 16), m);
    default: return _mm256_srli_epi32(x, 24);
    }
}

/* The same byte moved to bits 23..30 (an exponent field), the other bits 0. */
MM_AVX2_INLINE __m256i word_byte_field(__m256i x, int v) {
    const __m256i m = _mm256_set1_epi32(0x7F800000);
    switch (v) {
    case 0: return _mm256_and_si256(_mm256_slli_epi32(x, 23), m);
    case 1: return _mm256_and_si256(_mm256_slli_epi32(x, 15), m);
    case 2: return _mm256_and_si256(_mm256_slli_epi32(x, 7), m);
    default: return _mm256_and_si256(_mm256_srli_epi32(x, 1), m);
    }
}

/* Pass 1's block maxima, coded (cpu.h, MM_CPU_E_CODED), as exponents, for fp32 vector v. */
MM_AVX2_INLINE __m256i lanes_e(const uint8_t row[W], int v) {
    return _mm256_sub_epi32(word_byte(_mm256_loadu_si256((const __m256i*)(const void*)row), v),
                            _mm256_set1_epi32(2 * MM_CPU_E_CODE_OFFSET));
}

/* The grid exponent E - frac of a block from its scale s = 2^(frac - E). */
MM_AVX2_INLINE __m256i grid_of(__m256 s) {
    return _mm256_sub_epi32(_mm256_set1_epi32(127), _mm256_srli_epi32(_mm256_castps_si256(s), 23));
}

/* Lanes the fast exponent arithmetic cannot compose (never for FP8 operands and the standard
 * presets; test builds narrow the range to run it), composed exactly from the integer sums S
 * (+ S2) on their grids, integer arithmetic only. Called on copies, outside the hot loops. */
MM_AVX2 __attribute__((noinline)) static void compose_fix(__m256i c[MR][NV], const __m256i S[MR][NV],
                                                         const __m256i S2[MR][NV],
                                                         const __m256i grid[MR][NV], int grid_hi,
                                                         const mm_cpu_plan* p) {
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) {
            int32_t s1[VL], s2[VL], gr[VL], o[VL];
            _mm256_storeu_si256((__m256i*)s1, S[r][v]);
            _mm256_storeu_si256((__m256i*)s2, S2[r][v]);
            _mm256_storeu_si256((__m256i*)gr, grid[r][v]);
            _mm256_storeu_si256((__m256i*)o, c[r][v]);
            mm_cpu_compose_lanes(o, s1, s2, gr, VL, grid_hi, p->keep);
            c[r][v] = _mm256_loadu_si256((const __m256i*)o);
        }
}

/* compose_fix with the grids from the scales s (the multiply form's blocks); S2 may be NULL. */
MM_AVX2_INLINE void fix_lanes(__m256i c[MR][NV], __m256i S[MR][NV], __m256i (*S2)[NV],
                              __m256 s[MR][NV], int grid_hi, const mm_cpu_plan* p) {
    __m256i cc[MR][NV], SS[MR][NV], SS2[MR][NV], gg[MR][NV];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) {
            cc[r][v] = c[r][v];
            SS[r][v] = S[r][v];
            SS2[r][v] = S2 ? S2[r][v] : _mm256_setzero_si256();
            gg[r][v] = grid_of(s[r][v]);
        }
    compose_fix(cc, SS, SS2, gg, grid_hi, p);
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) c[r][v] = cc[r][v];
}

/* The exponent C brings to the block maximum: its exponent field - 127 (C is +-0, field 0, which
 * raises nothing, or an earlier block result, never subnormal: kernel_avx512.h, c_field). */
MM_AVX2_INLINE __m256i c_exponent(__m256i cb) {
    return _mm256_sub_epi32(_mm256_and_si256(_mm256_srli_epi32(cb, 23), _mm256_set1_epi32(0xFF)),
                            _mm256_set1_epi32(127));
}


/* Pass 1 of a whole group without prefetches (the FMA form's): pass1_rows below, out of line, where
 * its loop has the registers to itself (inlined into the tile, it reloaded the rows' offsets from
 * the stack every k step; benchmarks/results/cpu.md). */
MM_AVX2 __attribute__((noinline)) static void pass1_group(const int32_t* a0, const int32_t* a1, const int32_t* a2,
                                                         const int32_t* bk, int n, uint8_t E8[MR][W]) {
    _Static_assert(MR == 3, "pass1_group takes three rows");
    __m256i e0 = _mm256_set1_epi8((char)(MM_CPU_E_FLOOR + 2 * MM_CPU_E_CODE_OFFSET)), e1 = e0, e2 = e0;
#pragma GCC unroll 2
    for (int k = 0; k < n; k++) {
        const __m256i eb = _mm256_loadu_si256((const __m256i*)(const void*)(bk + (int64_t)k * STRIDE));
        e0 = _mm256_max_epu8(e0, _mm256_add_epi32(eb, _mm256_set1_epi32(a0[MM_CPU_A_WORDS * k])));
        e1 = _mm256_max_epu8(e1, _mm256_add_epi32(eb, _mm256_set1_epi32(a1[MM_CPU_A_WORDS * k])));
        e2 = _mm256_max_epu8(e2, _mm256_add_epi32(eb, _mm256_set1_epi32(a2[MM_CPU_A_WORDS * k])));
    }
    _mm256_storeu_si256((__m256i*)(void*)E8[0], e0);
    _mm256_storeu_si256((__m256i*)(void*)E8[1], e1);
    _mm256_storeu_si256((__m256i*)(void*)E8[2], e2);
}

/* Pass 1: the products' largest alignment exponent over a block of n, 32 columns per byte vector,
 * raised to MM_CPU_E_FLOOR, into E8 (row r at E8[r], coded: lanes_e reads them). Both forms here
 * leave A's rows to the hardware prefetcher (a prefetch in the split form's pass 1, as the AVX-512
 * kernel has, ran slower: benchmarks/results/cpu.md). */
MM_AVX2_INLINE void pass1_rows(const int32_t* ak, int64_t as, const int32_t* bk, int n, uint8_t E8[MR][W],
                               const int R) {
    if (R == MR) {
        pass1_group(ak, ak + as, ak + 2 * as, bk, n, E8);
        return;
    }
    __m256i e[MR];
    for (int r = 0; r < R; r++) e[r] = _mm256_set1_epi8((char)(MM_CPU_E_FLOOR + 2 * MM_CPU_E_CODE_OFFSET));
    for (int k = 0; k < n; k++) {
        const __m256i eb = _mm256_loadu_si256((const __m256i*)(const void*)(bk + (int64_t)k * STRIDE));
        const int32_t* ar = ak + MM_CPU_A_WORDS * k;
        for (int r = 0; r < R; r++)
            e[r] = _mm256_max_epu8(e[r], _mm256_add_epi32(eb, _mm256_set1_epi32(ar[r * as])));
    }
    for (int r = 0; r < R; r++) _mm256_storeu_si256((__m256i*)(void*)E8[r], e[r]);
}

/* Pass 2 over k in [k_begin, k_end) of a block: S += trunc((a * b) * 2^-grid), the scaling
 * an integer add G to the product's exponent field (cpu.h, MM_CPU_A_BIAS). Row by row over
 * the block's k: a row's 4 sums and 4 scalings stay in registers, B's vectors are the multiplies'
 * memory operands (the block's records in L1); with the rows inside the k loop the 12 sums and
 * 12 scalings spilled, and every sum went through memory each k step. */
MM_AVX2_INLINE void pass2(const int32_t* ak, int64_t as, const int32_t* bk, int k_begin,
                          int k_end, const __m256i G[MR][NV], __m256i S[MR][NV], const int R) {
    for (int r = 0; r < R; r++) {
        __m256i g[NV], sum[NV];
        for (int v = 0; v < NV; v++) {
            g[v] = G[r][v];
            sum[v] = S[r][v];
        }
        const int32_t* ar = ak + r * as;
        for (int k = k_begin; k < k_end; k++) {
            const mm_cpu_f32* vb = mm_cpu_cvalues(bk + (int64_t)k * STRIDE + MM_CPU_PANEL_V(W));
            const __m256 av = _mm256_broadcast_ss(mm_cpu_cvalues(ar + MM_CPU_A_WORDS * k + MM_CPU_A_V));
            for (int v = 0; v < NV; v++) {
                const __m256i q = _mm256_add_epi32(_mm256_castps_si256(_mm256_mul_ps(av, _mm256_loadu_ps(vb + v * VL))), g[v]);
                sum[v] = _mm256_add_epi32(sum[v], _mm256_cvttps_epi32(_mm256_castsi256_ps(q)));
            }
        }
        for (int v = 0; v < NV; v++) S[r][v] = sum[v];
    }
}

/* ---- the number of negative products of a block (cpu.h, MM_CPU_RZ_ENLARGE) ---- */

/* The positive (half 0) or negative (half 1) words of group j for fp32 vector v's columns;
 * from the paired layout (mm_cpu_sign_paired) where the plan has it: 16-bit halves blended. */
MM_AVX2_INLINE __m256i b_group_words(const uint32_t* b, int64_t j, int half, int v, int paired) {
    const uint32_t* g = mm_cpu_sign_group(b, j, W) + v * VL;
    if (!paired) return _mm256_loadu_si256((const __m256i*)(const void*)(g + half * W));
    const __m256i h0 = _mm256_loadu_si256((const __m256i*)(const void*)g);
    const __m256i h1 = _mm256_loadu_si256((const __m256i*)(const void*)(g + W));
    enum { LOW_HALVES = 0x55 }; /* the second operand's bits 0..15 of each lane */
    return half ? _mm256_blend_epi16(_mm256_slli_epi32(h1, 16), h0, LOW_HALVES)
                : _mm256_blend_epi16(h1, _mm256_srli_epi32(h0, 16), LOW_HALVES);
}

/* Column words of the panel's sign groups for the block of n k from record kb (half 0:
 * positive, 1: negative) of fp32 vector v's columns, shifted so bit i is k = kb + i
 * (kernel_avx512.h, b_sign_words). */
MM_AVX2_INLINE __m256i b_sign_words(const uint32_t* b, int64_t kb, int n, int half, int v, int paired) {
    const int64_t j = kb / MM_CPU_SIGN_SPAN;
    const int o = (int)(kb % MM_CPU_SIGN_SPAN);
    __m256i x = b_group_words(b, j, half, v, paired);
    if (o) {
        x = _mm256_srl_epi32(x, _mm_cvtsi32_si128(o));
        if (o + n > MM_CPU_SIGN_SPAN) {
            const __m256i y = b_group_words(b, j + 1, half, v, paired);
            x = _mm256_or_si256(x, _mm256_sll_epi32(y, _mm_cvtsi32_si128(MM_CPU_SIGN_SPAN - o)));
        }
    }
    return x;
}

/* The set bits of each 32-bit lane: a nibble table, then the four byte counts summed. */
MM_AVX2_INLINE __m256i popcount32(__m256i x) {
    const __m256i table = _mm256_setr_epi8(0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4,
                                           0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4);
    const __m256i low = _mm256_set1_epi8(0x0F);
    const __m256i c = _mm256_add_epi8(_mm256_shuffle_epi8(table, _mm256_and_si256(x, low)),
                                      _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi32(x, 4), low)));
    return _mm256_madd_epi16(_mm256_maddubs_epi16(c, _mm256_set1_epi8(1)), _mm256_set1_epi16(1));
}

/* The block's negative products per output: the set bits of (A+ and B-) or (A- and B+). */
MM_AVX2_INLINE __m256i negatives(__m256i ap, __m256i an, __m256i bp, __m256i bn) {
    return popcount32(_mm256_or_si256(_mm256_and_si256(ap, bn), _mm256_and_si256(an, bp)));
}

/* The composition of a block of the FMA form (rz_block_rows): the block result T + n minus M, one
 * exact subtraction (kernel_avx512.h's compose_block; the result scaled, its keep bits at the
 * chain's end, chain_rz), with M from the setup rather than from T's bits. keep_t: T is left
 * holding T + n (for compose_fix), else as it was: 12 stores per block fewer. */
MM_AVX2_INLINE void compose_block(const mm_cpu_plan* p, const int32_t* ak, int64_t as, const uint32_t* bsign,
                                  int64_t kb, int n, __m256 T[MR][NV], const __m256i Mv[MR][NV], __m256i c[MR][NV],
                                  const int R, const int keep_t) {
    /* vector by vector, the rows inside: 16 registers hold a vector's B words, the rows' A
     * words and the constants, where the rows outside kept all of B's words and spilled */
#define MM_COMPOSE(r, v, negs)                                                                   \
    do {                                                                                         \
        const __m256i tb = _mm256_add_epi32(_mm256_castps_si256(T[r][v]), negs);                \
        if (keep_t) T[r][v] = _mm256_castsi256_ps(tb);                                           \
        c[r][v] = _mm256_castps_si256(_mm256_sub_ps(_mm256_castsi256_ps(tb),                    \
                                                    _mm256_castsi256_ps(Mv[r][v])));             \
    } while (0)
    if (p->sign_paired && kb % 16 == 0) {
        /* a 16-k block on a half of its group (kernel_avx512.h): the row's sign window,
         * its bits from n on cleared, and'ed with the half's words */
        const uint32_t* half = mm_cpu_sign_group(bsign, kb / MM_CPU_SIGN_SPAN, W) + (kb % MM_CPU_SIGN_SPAN ? W : 0);
        const uint32_t live = n >= 16 ? 0xFFFFFFFFu : ((1u << n) - 1u) * 0x10001u;
        uint32_t aw[MR];
        for (int r = 0; r < R; r++) aw[r] = (uint32_t)ak[r * as + MM_CPU_A_SGN] & live;
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            const __m256i bh = _mm256_loadu_si256((const __m256i*)(const void*)(half + v * VL));
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                MM_COMPOSE(r, v, popcount32(_mm256_and_si256(_mm256_set1_epi32((int32_t)aw[r]), bh)));
        }
    } else {
        uint32_t pos[MR], neg[MR];
        for (int r = 0; r < R; r++) mm_cpu_a_signs(ak + r * as, n, &pos[r], &neg[r]);
        /* the two-word layout (its words rebuilt where the plan has the paired one) */
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            const __m256i bp = p->sign_paired ? b_sign_words(bsign, kb, n, 0, v, 1) : b_sign_words(bsign, kb, n, 0, v, 0);
            const __m256i bn = p->sign_paired ? b_sign_words(bsign, kb, n, 1, v, 1) : b_sign_words(bsign, kb, n, 1, v, 0);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const __m256i ap = _mm256_set1_epi32((int32_t)pos[r]), an = _mm256_set1_epi32((int32_t)neg[r]);
                MM_COMPOSE(r, v, negatives(ap, an, bp, bn));
            }
        }
    }
#undef MM_COMPOSE
}

/* One block of the narrow FMA form on the group's first R rows (MR, or the live rows of a
 * tile's last group), with MXCSR rounding toward zero (chain_rz): the block result of C = c into
 * c, C scaled by 2^-MM_CPU_A_BIAS (cpu.h, MM_CPU_RZ_C_SCALED). The arithmetic, its bounds
 * and the arguments are the AVX-512 kernel's rz_block_rows (kernel_avx512.h); here F
 * (E + 127 - MM_CPU_A_BIAS) is formed per vector in the exponent field's position, and the FMAs
 * round by MXCSR. */
MM_AVX2_INLINE void rz_block_rows(const mm_cpu_plan* p, const int32_t* ak, int64_t as, const int32_t* bk, int n,
                                  const uint8_t E8[MR][W], const uint32_t* bsign, int64_t kb, __m256i c[MR][NV],
                                  const int R) {
    const int32_t m_field = 23 - p->frac; /* M's exponent field - F */
    const __m256i v_madd = _mm256_set1_epi32((int32_t)(((uint32_t)m_field << 23) | 0x400000u));
    /* 2^(frac - E + MM_CPU_A_BIAS), which takes the scaled C to C * 2^(frac - E) */
    const __m256i v_sadd = _mm256_set1_epi32((int32_t)((uint32_t)(254 + p->frac) << 23));
    /* pass 1's code -> F */
    const __m256i v_eoff = _mm256_set1_epi8((char)(127 - MM_CPU_A_BIAS - 2 * MM_CPU_E_CODE_OFFSET));
    const __m256i v_field = _mm256_set1_epi32(0x7F800000);
    __m256 T[MR][NV];
    /* M for the composition, kept in memory through the loop */
    __m256i Mv[MR][NV];
    /* The largest F over the tile (field position), checked once after the loop, as in the
     * AVX-512 kernel (compose_fix takes the lanes out of the composition's exact range). */
    _Static_assert(MM_CPU_GRID_MAX_NARROW + MM_CPU_RZ_FRAC_MAX + 127 - MM_CPU_A_BIAS <= 255 &&
                       MM_CPU_E_FLOOR + 127 - MM_CPU_A_BIAS >= 1,
                   "F fits its exponent field, above a zero C's");
    __m256i f_max = _mm256_setzero_si256();
#if MM_CPU_GRID_MIN + MM_CPU_RZ_FRAC_MAX >= MM_CPU_E_FLOOR
    _Static_assert(MM_CPU_GRID_MIN + 127 - MM_CPU_A_BIAS >= 0, "F's lower range check fits its field");
    __m256i f_min = v_field;
#endif
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        const __m256i f8 = _mm256_add_epi8(_mm256_loadu_si256((const __m256i*)(const void*)E8[r]), v_eoff);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            /* F = max(the products' E, C's exponent) + 127 - MM_CPU_A_BIAS, in the exponent field */
            const __m256i f23 = _mm256_max_epi32(word_byte_field(f8, v), _mm256_and_si256(c[r][v], v_field));
            f_max = _mm256_max_epi32(f_max, f23);
#if MM_CPU_GRID_MIN + MM_CPU_RZ_FRAC_MAX >= MM_CPU_E_FLOOR
            f_min = _mm256_min_epi32(f_min, f23);
#endif
            const __m256 s = _mm256_castsi256_ps(_mm256_sub_epi32(v_sadd, f23));
            const __m256i cterm = _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_castsi256_ps(c[r][v]), s));
            const __m256i m = _mm256_add_epi32(f23, v_madd);
            T[r][v] = _mm256_castsi256_ps(_mm256_add_epi32(m, cterm));
            Mv[r][v] = m;
        }
    }
    /* A's words are left to the hardware prefetcher, as in the AVX-512 kernel */
    for (int k = 0; k < n; k++) {
        const int32_t* rec = bk + (int64_t)k * STRIDE;
        _mm_prefetch((const char*)(const void*)(rec + n * STRIDE), _MM_HINT_T0); /* the next pass 1's */
        const mm_cpu_f32* vb = mm_cpu_cvalues(rec + MM_CPU_PANEL_V(W));
        __m256 bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) bv[v] = _mm256_loadu_ps(vb + v * VL);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m256 av = _mm256_broadcast_ss(mm_cpu_cvalues(ak + r * as + MM_CPU_A_WORDS * k + MM_CPU_A_V));
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) T[r][v] = _mm256_fmadd_ps(av, bv[v], T[r][v]);
        }
    }
    __m256i out_of_range =
        _mm256_cmpgt_epi32(f_max, _mm256_set1_epi32((MM_CPU_GRID_MAX_NARROW + p->frac + 127 - MM_CPU_A_BIAS) << 23));
#if MM_CPU_GRID_MIN + MM_CPU_RZ_FRAC_MAX >= MM_CPU_E_FLOOR
    out_of_range = _mm256_or_si256(
        out_of_range, _mm256_cmpgt_epi32(_mm256_set1_epi32((MM_CPU_GRID_MIN + p->frac + 127 - MM_CPU_A_BIAS) << 23), f_min));
#endif
    if (_mm256_testz_si256(out_of_range, out_of_range)) {
        compose_block(p, ak, as, bsign, kb, n, T, (const __m256i(*)[NV])Mv, c, R, 0);
        return;
    }
    compose_block(p, ak, as, bsign, kb, n, T, (const __m256i(*)[NV])Mv, c, R, 1);
    {
        /* lanes out of range (none in FP8 GEMMs; test builds narrow the range): composed exactly
         * from the integer sums (T holds n now) */
        const __m256i v_fbits = _mm256_set1_epi32(0x7FFFFF), v_half = _mm256_set1_epi32(0x400000);
        const __m256i v_mbase = _mm256_set1_epi32(127 + 23 - MM_CPU_A_BIAS); /* M's field - grid */
        __m256i S[MR][NV], G[MR][NV], zero[MR][NV];
#pragma GCC unroll 4
        for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                /* rows from R on, not run: the T of a sum 0 on grid 0, which compose_fix leaves */
                const __m256i tb = r < R ? _mm256_castps_si256(T[r][v])
                                         : _mm256_or_si256(_mm256_slli_epi32(v_mbase, 23), v_half);
                G[r][v] = _mm256_sub_epi32(_mm256_srli_epi32(tb, 23), v_mbase);
                S[r][v] = _mm256_sub_epi32(_mm256_and_si256(tb, v_fbits), v_half);
                zero[r][v] = _mm256_setzero_si256();
            }
        /* on true results: the chain's scaled C taken out of its scale and put back, exactly */
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) c[r][v] = MM_VI_MUL_POW2(c[r][v], -MM_CPU_RZ_C_SCALED);
        compose_fix(c, S, zero, G, MM_CPU_GRID_MAX_NARROW, p);
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) c[r][v] = MM_VI_MUL_POW2(c[r][v], MM_CPU_RZ_C_SCALED);
    }
}

/* The block result of the split form: D = S + S2 exactly in fp64, its `keep` leading bits
 * (fp64 mantissa masked), to fp32 (exact: at most 24 significant bits), exponent + grid.
 * Lanes the fast form cannot compose are flagged in *bad (see MM_CPU_GRID_MIN). */
MM_AVX2_INLINE __m256i compose_split(__m256i S, __m256i S2, __m256i grid, const mm_cpu_plan* p,
                                     __m256i* bad) {
    const int keep = p->keep < 24 ? p->keep : 24;
    const __m256d mask = _mm256_castsi256_pd(_mm256_set1_epi64x((int64_t)(~0ull << (53 - keep))));
    const __m256d lo = _mm256_add_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(S)),
                                     _mm256_cvtepi32_pd(_mm256_castsi256_si128(S2)));
    const __m256d hi = _mm256_add_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(S, 1)),
                                     _mm256_cvtepi32_pd(_mm256_extracti128_si256(S2, 1)));
    const __m256 f = _mm256_set_m128(_mm256_cvtpd_ps(_mm256_and_pd(hi, mask)),
                                     _mm256_cvtpd_ps(_mm256_and_pd(lo, mask)));
    const __m256i fb = _mm256_castps_si256(f), zero = _mm256_setzero_si256();
    const __m256i dzero = _mm256_cmpeq_epi32(fb, zero);
    const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(MM_CPU_GRID_MIN), grid),
                                        _mm256_cmpgt_epi32(grid, _mm256_set1_epi32(MM_CPU_GRID_MAX_SPLIT)));
    *bad = _mm256_or_si256(*bad, _mm256_andnot_si256(dzero, out));
    return _mm256_andnot_si256(dzero, _mm256_add_epi32(fb, _mm256_slli_epi32(grid, 23)));
}

/* The narrow block result of one vector in the multiply form: the keep bits of (float)S with
 * grid added to the exponent field; lanes outside that fast range flagged in *bad. */
MM_AVX2_INLINE __m256i narrow_compose(__m256i S, __m256i grid, __m256i keep_mask, __m256i* bad) {
    const __m256i f = _mm256_and_si256(_mm256_castps_si256(_mm256_cvtepi32_ps(S)), keep_mask);
    const __m256i szero = _mm256_cmpeq_epi32(S, _mm256_setzero_si256());
    const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(MM_CPU_GRID_MIN), grid),
                                        _mm256_cmpgt_epi32(grid, _mm256_set1_epi32(MM_CPU_GRID_MAX_NARROW)));
    *bad = _mm256_or_si256(*bad, _mm256_andnot_si256(szero, out));
    return _mm256_andnot_si256(szero, _mm256_add_epi32(f, _mm256_slli_epi32(grid, 23)));
}

/* The blocks over [k0, k1) of a group's first R rows (MR, or the live rows of a tile's last
 * group) in the multiply (pass2) and split forms, continuing from the C in c (mm_chain).
 * split = 0: one int32 sum per output (|S| < 2^24). split = 1: the block's first ceil(n/2)
 * terms (and C's) in S, the rest in S2, each below 2^31 (the driver checks), added in fp64
 * (presets with more grid bits, such as b200). */
MM_AVX2_INLINE void chain_rows(const mm_cpu_plan* p, const mm_cpu_operands* o, int64_t k0, int64_t k1,
                               __m256i c[MR][NV], const int split, const int R) {
    const int64_t as = o->as;
    const int32_t *a = o->a, *b = o->b;
    const __m256i zero = _mm256_setzero_si256();
    const __m256i v_floor = _mm256_set1_epi32(MM_CPU_E_FLOOR);
    const __m256i v_scale = _mm256_set1_epi32(127 + p->frac);
    const __m256i keep_mask = _mm256_set1_epi32((int32_t)p->keep_mask);
    const __m256i v_frac = _mm256_set1_epi32(p->frac), v_bias = _mm256_set1_epi32(MM_CPU_A_BIAS);
    const __m256i v_glo = _mm256_set1_epi32(MM_CPU_PROD_EXP_MIN - p->frac), v_ghi = _mm256_set1_epi32(MM_CPU_PROD_EXP_MAX);
    for (int64_t kb = k0; kb < k1; kb += p->block) {
        const int n = (int)(k1 - kb < p->block ? k1 - kb : p->block);
        const int32_t* ak = a + MM_CPU_A_WORDS * kb;
        const int32_t* bk = b + kb * STRIDE;
        uint8_t E8[MR][W];
        pass1_rows(ak, as, bk, n, E8, R);
        /* E with C's exponent, s = 2^(frac - E), S = trunc(C * s). E itself is not kept: the
         * grid is recovered from s (exact unless E was raised to the floor, and then S = 0). */
        __m256i S[MR][NV], G[MR][NV];
        __m256 s[MR][NV];
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) {
                if (r >= R) { /* rows not run: a sum 0 on grid 0, which fix_lanes leaves */
                    s[r][v] = _mm256_set1_ps(1.0f);
                    S[r][v] = G[r][v] = zero;
                    continue;
                }
                const __m256i cb = p->c_late ? zero : c[r][v]; /* a late C joins after the block */
                const __m256i ef = _mm256_max_epi32(_mm256_max_epi32(lanes_e(E8[r], v), c_exponent(cb)), v_floor);
                s[r][v] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(v_scale, ef), 23));
                S[r][v] = _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_castsi256_ps(cb), s[r][v]));
                G[r][v] = _mm256_slli_epi32(_mm256_sub_epi32(v_bias, _mm256_min_epi32(_mm256_max_epi32(
                                                _mm256_sub_epi32(ef, v_frac), v_glo), v_ghi)), 23);
            }
        /* Pass 2: every product cut toward zero to the grid, summed exactly. */
        __m256i bad = zero;
        if (split) { /* the block's second half into S2 */
            __m256i S2[MR][NV], c_old[MR][NV];
            for (int r = 0; r < MR; r++)
                for (int v = 0; v < NV; v++) S2[r][v] = zero;
            const int h = (n + 1) / 2;
            pass2(ak, as, bk, 0, h, G, S, R);
            pass2(ak, as, bk, h, n, G, S2, R);
            for (int r = 0; r < R; r++)
                for (int v = 0; v < NV; v++) {
                    c_old[r][v] = c[r][v];
                    c[r][v] = compose_split(S[r][v], S2[r][v], grid_of(s[r][v]), p, &bad);
                }
            if (!_mm256_testz_si256(bad, bad)) fix_lanes(c, S, S2, s, MM_CPU_GRID_MAX_SPLIT, p);
            if (p->c_late) /* D + C, one fp32 RN-even add (mm_block) */
                for (int r = 0; r < R; r++)
                    for (int v = 0; v < NV; v++)
                        c[r][v] = _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(c[r][v]), _mm256_castsi256_ps(c_old[r][v])));
            continue;
        }
        pass2(ak, as, bk, 0, n, G, S, R);
        for (int r = 0; r < R; r++)
            for (int v = 0; v < NV; v++) c[r][v] = narrow_compose(S[r][v], grid_of(s[r][v]), keep_mask, &bad);
        if (!_mm256_testz_si256(bad, bad)) fix_lanes(c, S, NULL, s, MM_CPU_GRID_MAX_NARROW, p);
    }
}

/* The tile schedule (chain_rz, chains, tile, tile_split) on this file's vectors; the FMA form
 * runs with MXCSR rounding toward zero (file comment), the caller's MXCSR put back after. */
typedef __m256i mm_vi;
typedef __m256 mm_vf;
#define MM_SIMD MM_AVX2
#define MM_SIMD_INLINE MM_AVX2_INLINE
#define MM_VI_LOAD(p) _mm256_loadu_si256((const __m256i*)(const void*)(p))
#define MM_VI_STORE(p, x) _mm256_storeu_si256((__m256i*)(void*)(p), x)
#define MM_VI_ZERO() _mm256_setzero_si256()
#define MM_VI_SET1(x) _mm256_set1_epi32(x)
#define MM_VI_AND(a, b) _mm256_and_si256(a, b)
#define MM_VF_LOAD(p) _mm256_loadu_ps(p)
#define MM_VF_STORE(p, x) _mm256_storeu_ps(p, x)
#define MM_VF_ZERO() _mm256_setzero_ps()
#define MM_VF_ADD_BITS(a, x) _mm256_add_ps(a, _mm256_castsi256_ps(x))
#define MM_RZ_ENTER() const unsigned caller_csr = rz_enter()
#define MM_RZ_LEAVE() mxcsr_set(caller_csr)
#include "kernel_simd_tiles.h"

const mm_cpu_kernel mm_cpu_kernel_avx2 = {"avx2", TR, W, MR, tile, tile_split, MM_CPU_A_BIAS, MM_CPU_E_CODED, MM_CPU_BYTES_WORDS, 1, 1};

#else
const mm_cpu_kernel mm_cpu_kernel_avx2 = {"avx2", 1, 1, 1, 0, 0, 0, MM_CPU_E_CODED, MM_CPU_BYTES_WORDS, 0, 0};
#endif
