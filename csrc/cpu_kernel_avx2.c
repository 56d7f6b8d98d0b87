/* cpu_kernel_avx2.c: the narrow tile kernel with AVX2 integer SIMD.
 *
 * cpu_kernel_portable.c is the same algorithm one lane at a time; read it first. Here a lane
 * is one output column: the tile is MR rows x NV vectors of 8 columns, A's values are
 * broadcast and B's panel is loaded 8 columns at a time, so the block maximum and the sum are
 * lane-wise (no horizontal operations). Per product and lane: pass 1 add + max; pass 2 add,
 * sub (shift count), vpmaddwd (s_a * s_b), abs, vpsrlvd (cut to the grid; counts >= 32 give 0,
 * as the narrow model needs), sign, add.
 *
 * Compiled with a target attribute, so the rest of the library keeps the baseline ISA; the
 * driver calls it only when __builtin_cpu_supports("avx2"). */
#include "cpu_fast.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>

#define MM_AVX2 __attribute__((target("avx2")))
#define MM_AVX2_INLINE __attribute__((target("avx2"), always_inline)) static inline

enum { MR = 2, NV = 2, VL = 8, W = NV * VL };

/* Lanes whose fast exponent arithmetic would leave the normal range: composed exactly. */
MM_AVX2 static __m256i compose_slow(__m256i res, __m256i S, __m256i grid, __m256i bad,
                                    const mm_cpu_plan* p) {
    int32_t s[VL], gr[VL], b[VL], out[VL];
    _mm256_storeu_si256((__m256i*)s, S);
    _mm256_storeu_si256((__m256i*)gr, grid);
    _mm256_storeu_si256((__m256i*)b, bad);
    _mm256_storeu_si256((__m256i*)out, res);
    for (int l = 0; l < VL; l++)
        if (b[l]) out[l] = (int32_t)mm_cpu_compose(s[l], gr[l], p->keep);
    return _mm256_loadu_si256((const __m256i*)out);
}

/* Blocks over [k0, k1) from C = +0 for the tile; c receives the chain's fp32 bits. */
MM_AVX2_INLINE void chain(const mm_cpu_plan* p, const int32_t* a, int64_t as, const int32_t* b,
                          int64_t k0, int64_t k1, __m256i c[MR][NV]) {
    const __m256i zero = _mm256_setzero_si256();
    const __m256i v_ff = _mm256_set1_epi32(0xFF), v_one = _mm256_set1_epi32(1);
    const __m256i v_127 = _mm256_set1_epi32(127), v_abs = _mm256_set1_epi32(0x7FFFFFFF);
    const __m256i v_mant = _mm256_set1_epi32(0x7FFFFF), v_hidden = _mm256_set1_epi32(0x800000);
    const __m256i v_zero_c = _mm256_set1_epi32(MM_CPU_ZERO_C_EXP);
    const __m256i keep_mask = _mm256_set1_epi32((int32_t)p->keep_mask);
    const __m256i prod_shift = _mm256_set1_epi32(p->prod_shift);
    const __m256i c_shift = _mm256_set1_epi32(p->c_shift), frac = _mm256_set1_epi32(p->frac);
    const __m256i grid_lo = _mm256_set1_epi32(-126), grid_hi = _mm256_set1_epi32(104);
    const int64_t bs = 2 * W;
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) c[r][v] = zero;
    for (int64_t kb = k0; kb < k1; kb += p->block) {
        const int n = (int)(k1 - kb < p->block ? k1 - kb : p->block);
        const int32_t* ak = a + 2 * kb;
        const int32_t* bk = b + kb * bs;
        __m256i E[MR][NV], ce[MR][NV], S[MR][NV];
        /* C's exponent max(floor(log2|C|), -126), or below everything for C = +-0. */
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) {
                const __m256i field = _mm256_and_si256(_mm256_srli_epi32(c[r][v], 23), v_ff);
                const __m256i e = _mm256_sub_epi32(_mm256_max_epi32(field, v_one), v_127);
                const __m256i czero = _mm256_cmpeq_epi32(_mm256_and_si256(c[r][v], v_abs), zero);
                ce[r][v] = _mm256_blendv_epi8(e, v_zero_c, czero);
                E[r][v] = ce[r][v];
            }
        /* Pass 1: the block maximum of the alignment exponents. */
        for (int k = 0; k < n; k++) {
            __m256i eb[NV];
            for (int v = 0; v < NV; v++) eb[v] = _mm256_loadu_si256((const __m256i*)(bk + k * bs + v * VL));
            for (int r = 0; r < MR; r++) {
                const __m256i ea = _mm256_set1_epi32(ak[r * as + 2 * k]);
                for (int v = 0; v < NV; v++)
                    E[r][v] = _mm256_max_epi32(E[r][v], _mm256_add_epi32(ea, eb[v]));
            }
        }
        /* Pass 2: C's term, then the products' terms. */
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) {
                const __m256i cb = c[r][v];
                const __m256i subnormal = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_srli_epi32(cb, 23), v_ff), zero);
                const __m256i cm = _mm256_or_si256(_mm256_and_si256(cb, v_mant), _mm256_andnot_si256(subnormal, v_hidden));
                const __m256i cnt = _mm256_add_epi32(_mm256_sub_epi32(E[r][v], ce[r][v]), c_shift);
                S[r][v] = _mm256_sign_epi32(_mm256_srlv_epi32(cm, cnt), cb);
                E[r][v] = _mm256_add_epi32(E[r][v], prod_shift); /* shift count = this - e */
            }
        for (int k = 0; k < n; k++) {
            __m256i eb[NV], sb[NV];
            for (int v = 0; v < NV; v++) {
                eb[v] = _mm256_loadu_si256((const __m256i*)(bk + k * bs + v * VL));
                sb[v] = _mm256_loadu_si256((const __m256i*)(bk + k * bs + W + v * VL));
            }
            for (int r = 0; r < MR; r++) {
                const __m256i ea = _mm256_set1_epi32(ak[r * as + 2 * k]);
                const __m256i sa = _mm256_set1_epi32(ak[r * as + 2 * k + 1]);
                for (int v = 0; v < NV; v++) {
                    const __m256i cnt = _mm256_sub_epi32(E[r][v], _mm256_add_epi32(ea, eb[v]));
                    const __m256i prod = _mm256_madd_epi16(sa, sb[v]);
                    const __m256i t = _mm256_srlv_epi32(_mm256_abs_epi32(prod), cnt);
                    S[r][v] = _mm256_add_epi32(S[r][v], _mm256_sign_epi32(t, prod));
                }
            }
        }
        /* The block result: keep bits of (float)S, exponent + grid. */
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) {
                const __m256i grid = _mm256_sub_epi32(_mm256_sub_epi32(E[r][v], prod_shift), frac);
                const __m256i f = _mm256_and_si256(_mm256_castps_si256(_mm256_cvtepi32_ps(S[r][v])), keep_mask);
                const __m256i szero = _mm256_cmpeq_epi32(S[r][v], zero);
                __m256i res = _mm256_andnot_si256(szero, _mm256_add_epi32(f, _mm256_slli_epi32(grid, 23)));
                const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(grid_lo, grid), _mm256_cmpgt_epi32(grid, grid_hi));
                const __m256i bad = _mm256_andnot_si256(szero, out);
                if (!_mm256_testz_si256(bad, bad)) res = compose_slow(res, S[r][v], grid, bad, p);
                c[r][v] = res;
            }
    }
}

/* mm_split_acc for the tile. */
MM_AVX2 static void tile(const mm_cpu_plan* p, const int32_t* a, int64_t as, const int32_t* b,
                         int64_t k0, int64_t k1, float* acc) {
    __m256i c[MR][NV];
    if (p->fast) {
        chain(p, a, as, b, k0, k1, c);
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) _mm256_storeu_si256((__m256i*)(acc + r * W + v * VL), c[r][v]);
        return;
    }
    const int64_t interval = (int64_t)p->block * p->promote_blocks;
    __m256 main_acc[MR][NV];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) main_acc[r][v] = _mm256_setzero_ps();
    for (int64_t k = k0; k < k1; k += interval) {
        chain(p, a, as, b, k, k1 - k < interval ? k1 : k + interval, c);
        for (int r = 0; r < MR; r++) /* the promotion: an IEEE fp32 add, round to nearest */
            for (int v = 0; v < NV; v++) main_acc[r][v] = _mm256_add_ps(main_acc[r][v], _mm256_castsi256_ps(c[r][v]));
    }
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) _mm256_storeu_ps(acc + r * W + v * VL, main_acc[r][v]);
}

const mm_cpu_kernel mm_cpu_kernel_avx2 = {"avx2", MR, W, tile};

#else
const mm_cpu_kernel mm_cpu_kernel_avx2 = {"avx2", 1, 1, 0};
#endif
