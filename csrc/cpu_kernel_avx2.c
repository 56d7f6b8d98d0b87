/* cpu_kernel_avx2.c: the tile kernels (narrow and split sums) with AVX2.
 *
 * cpu_kernel_portable.c is the same algorithm one lane at a time; read it first. Here a lane
 * is one output column: the tile is MR rows x NV vectors of 8 columns, A's values are
 * broadcast and B's panel is loaded a vector at a time, so the block maximum and the sum are
 * lane-wise (no horizontal operations). Per product and column:
 *   pass 1, int8 lanes (16 columns a 128-bit vector): saturating add, max;
 *   pass 2, fp32 lanes: a*b (exact), + G to its exponent field (times 2^-grid, exact:
 *   cpu_fast.h), truncate to int32, add.
 * The split form (presets whose block sums exceed 2^24, such as b200) sums the two halves of a
 * block separately and adds them in fp64.
 *
 * Compiled with a target attribute, so the rest of the library keeps the baseline ISA; the
 * driver calls it only when __builtin_cpu_supports("avx2"). */
#include "cpu_fast.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>

#define MM_AVX2 __attribute__((target("avx2")))
#define MM_AVX2_INLINE __attribute__((target("avx2"), always_inline)) static inline

/* 4 rows x 16 columns: pass 1 holds a row's 16 columns in one int8 vector (NV = 2 fp32
 * vectors in pass 2); 4 rows share each panel load (MR = 2 ran slower here, the panel being
 * read from L2 in pass 1). */
enum { MR = 4, NV = 2, VL = 8, W = NV * VL, STRIDE = MM_CPU_PANEL_STRIDE(W) };

/* The grid exponent E - frac of a block from its scale s = 2^(frac - E). */
MM_AVX2_INLINE __m256i grid_of(__m256 s) {
    return _mm256_sub_epi32(_mm256_set1_epi32(127), _mm256_srli_epi32(_mm256_castps_si256(s), 23));
}

/* Lanes whose fast exponent arithmetic would leave the normal range (never for FP8 operands
 * and hopper/ada/b200, kept for any preset): composed exactly from the integer sums. Called
 * rarely and outside the hot loops, so the sums stay in registers there. S2 may be NULL. */
MM_AVX2 __attribute__((noinline)) static void compose_fix(__m256i c[MR][NV], const __m256i S[MR][NV],
                                                         const __m256i* S2, const __m256 s[MR][NV],
                                                         int grid_hi, const mm_cpu_plan* p) {
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) {
            int32_t s1[VL], s2[VL], gr[VL], o[VL];
            _mm256_storeu_si256((__m256i*)s1, S[r][v]);
            _mm256_storeu_si256((__m256i*)s2, S2 ? S2[r * NV + v] : _mm256_setzero_si256());
            _mm256_storeu_si256((__m256i*)gr, grid_of(s[r][v]));
            _mm256_storeu_si256((__m256i*)o, c[r][v]);
            for (int l = 0; l < VL; l++) {
                const int64_t sum = (int64_t)s1[l] + s2[l];
                if (sum != 0 && (gr[l] < MM_CPU_GRID_MIN || gr[l] > grid_hi))
                    o[l] = (int32_t)mm_cpu_compose(sum, gr[l], p->keep);
            }
            c[r][v] = _mm256_loadu_si256((const __m256i*)o);
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

/* compose_fix on copies: the arrays of the hot loops never have their address taken, so the
 * compiler keeps them in registers. */
MM_AVX2_INLINE void fix_lanes(__m256i c[MR][NV], __m256i S[MR][NV], __m256i (*S2)[NV],
                              __m256 s[MR][NV], int grid_hi, const mm_cpu_plan* p) {
    __m256i cc[MR][NV], SS[MR][NV], SS2[MR][NV];
    __m256 ss[MR][NV];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) {
            cc[r][v] = c[r][v];
            SS[r][v] = S[r][v];
            SS2[r][v] = S2 ? S2[r][v] : _mm256_setzero_si256();
            ss[r][v] = s[r][v];
        }
    compose_fix(cc, SS, &SS2[0][0], ss, grid_hi, p);
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) c[r][v] = cc[r][v];
}

/* Pass 2 over k in [k_begin, k_end) of a block: S += trunc((a * b) * 2^-grid), the scaling
 * an integer add G to the product's exponent field (cpu_fast.h, MM_CPU_A_BIAS). */
MM_AVX2_INLINE void pass2(const int32_t* ak, int64_t as, const int32_t* bk, int k_begin,
                          int k_end, const __m256i G[MR][NV], __m256i S[MR][NV]) {
    for (int k = k_begin; k < k_end; k++) {
        const mm_cpu_f32* vb = mm_cpu_cvalues(bk + k * STRIDE + MM_CPU_PANEL_V(W));
        __m256 bv[NV];
        for (int v = 0; v < NV; v++) bv[v] = _mm256_loadu_ps(vb + v * VL);
        for (int r = 0; r < MR; r++) {
            const __m256 av = _mm256_broadcast_ss(mm_cpu_cvalues(ak + r * as + MM_CPU_A_WORDS * k + MM_CPU_A_V));
            for (int v = 0; v < NV; v++) {
                const __m256i q = _mm256_add_epi32(_mm256_castps_si256(_mm256_mul_ps(av, bv[v])), G[r][v]);
                S[r][v] = _mm256_add_epi32(S[r][v], _mm256_cvttps_epi32(_mm256_castsi256_ps(q)));
            }
        }
    }
}

/* Blocks over [k0, k1) continuing from the C in c; c receives the chain's fp32 bits.
 * split = 0: one int32 sum per output (narrow presets, |S| < 2^24). split = 1: the block's
 * first ceil(n/2) terms (and C's) in S, the rest in S2, each below 2^31 (the driver checks),
 * added in fp64 (presets with more grid bits, such as b200). */
MM_AVX2_INLINE void chain(const mm_cpu_plan* p, const int32_t* a, int64_t as, const int32_t* b,
                          int64_t k0, int64_t k1, __m256i c[MR][NV], const int split) {
    const __m256i zero = _mm256_setzero_si256();
    const __m256i v_ff = _mm256_set1_epi32(0xFF), v_one = _mm256_set1_epi32(1);
    const __m256i v_127 = _mm256_set1_epi32(127), v_abs = _mm256_set1_epi32(0x7FFFFFFF);
    const __m256i v_zero_c = _mm256_set1_epi32(MM_CPU_ZERO_C_EXP);
    const __m256i v_floor = _mm256_set1_epi32(MM_CPU_E_FLOOR);
    const __m256i v_scale = _mm256_set1_epi32(127 + p->frac);
    const __m256i keep_mask = _mm256_set1_epi32((int32_t)p->keep_mask);
    const __m256i grid_lo = _mm256_set1_epi32(MM_CPU_GRID_MIN), grid_hi = _mm256_set1_epi32(MM_CPU_GRID_MAX_NARROW);
    const __m128i e8_init = _mm_set1_epi8(-128);
    const __m256i v_frac = _mm256_set1_epi32(p->frac), v_bias = _mm256_set1_epi32(MM_CPU_A_BIAS);
    const __m256i v_glo = _mm256_set1_epi32(MM_CPU_PROD_EXP_MIN - p->frac), v_ghi = _mm256_set1_epi32(MM_CPU_PROD_EXP_MAX);
    for (int64_t kb = k0; kb < k1; kb += p->block) {
        const int n = (int)(k1 - kb < p->block ? k1 - kb : p->block);
        const int32_t* ak = a + MM_CPU_A_WORDS * kb;
        const int32_t* bk = b + kb * STRIDE;
        /* Pass 1: the products' largest alignment exponent, 16 columns per int8 vector (the
         * sums add with signed saturation: cpu_fast.h, MM_CPU_ZERO_EXP); even and odd k in
         * separate maxima, so two max chains run at once. */
        __m128i E8[MR], E8b[MR];
        for (int r = 0; r < MR; r++) E8[r] = E8b[r] = e8_init;
        int k = 0;
        for (; k + 1 < n; k += 2) {
            const __m128i eb0 = _mm_loadu_si128((const __m128i*)(bk + k * STRIDE));
            const __m128i eb1 = _mm_loadu_si128((const __m128i*)(bk + (k + 1) * STRIDE));
            for (int r = 0; r < MR; r++) {
                const __m128i ea0 = _mm_set1_epi32(ak[r * as + MM_CPU_A_WORDS * k]);
                const __m128i ea1 = _mm_set1_epi32(ak[r * as + MM_CPU_A_WORDS * (k + 1)]);
                E8[r] = _mm_max_epi8(E8[r], _mm_adds_epi8(ea0, eb0));
                E8b[r] = _mm_max_epi8(E8b[r], _mm_adds_epi8(ea1, eb1));
            }
        }
        if (k < n) {
            const __m128i eb0 = _mm_loadu_si128((const __m128i*)(bk + k * STRIDE));
            for (int r = 0; r < MR; r++)
                E8[r] = _mm_max_epi8(E8[r], _mm_adds_epi8(_mm_set1_epi32(ak[r * as + MM_CPU_A_WORDS * k]), eb0));
        }
        for (int r = 0; r < MR; r++) E8[r] = _mm_max_epi8(E8[r], E8b[r]);
        /* E with C's exponent, s = 2^(frac - E), S = trunc(C * s). E itself is not kept: the
         * grid is recovered from s (exact unless E was raised to the floor, and then S = 0). */
        __m256i S[MR][NV], G[MR][NV];
        __m256 s[MR][NV];
        for (int r = 0; r < MR; r++) {
            const __m256i ep[NV] = {_mm256_cvtepi8_epi32(E8[r]), _mm256_cvtepi8_epi32(_mm_srli_si128(E8[r], 8))};
            for (int v = 0; v < NV; v++) {
                const __m256i cb = p->c_late ? zero : c[r][v]; /* a late C joins after the block */
                const __m256i field = _mm256_and_si256(_mm256_srli_epi32(cb, 23), v_ff);
                const __m256i ce = _mm256_blendv_epi8(_mm256_sub_epi32(_mm256_max_epi32(field, v_one), v_127), v_zero_c,
                                                      _mm256_cmpeq_epi32(_mm256_and_si256(cb, v_abs), zero));
                const __m256i ef = _mm256_max_epi32(_mm256_max_epi32(ep[v], ce), v_floor);
                s[r][v] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(v_scale, ef), 23));
                S[r][v] = _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_castsi256_ps(cb), s[r][v]));
                G[r][v] = _mm256_slli_epi32(_mm256_sub_epi32(v_bias, _mm256_min_epi32(_mm256_max_epi32(
                                                _mm256_sub_epi32(ef, v_frac), v_glo), v_ghi)), 23);
            }
        }
        /* Pass 2: every product cut toward zero to the grid, summed exactly. */
        if (split) { /* the block's second half into S2 */
            __m256i S2[MR][NV];
            for (int r = 0; r < MR; r++)
                for (int v = 0; v < NV; v++) S2[r][v] = zero;
            const int h = (n + 1) / 2;
            pass2(ak, as, bk, 0, h, G, S);
            pass2(ak, as, bk, h, n, G, S2);
            __m256i bad = zero, c_old[MR][NV];
            for (int r = 0; r < MR; r++)
                for (int v = 0; v < NV; v++) {
                    c_old[r][v] = c[r][v];
                    c[r][v] = compose_split(S[r][v], S2[r][v], grid_of(s[r][v]), p, &bad);
                }
            if (!_mm256_testz_si256(bad, bad)) fix_lanes(c, S, S2, s, MM_CPU_GRID_MAX_SPLIT, p);
            if (p->c_late) /* D + C, one fp32 RN-even add (mm_block) */
                for (int r = 0; r < MR; r++)
                    for (int v = 0; v < NV; v++)
                        c[r][v] = _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(c[r][v]), _mm256_castsi256_ps(c_old[r][v])));
            continue;
        }
        pass2(ak, as, bk, 0, n, G, S);
        /* The block result: keep bits of (float)S, exponent + grid. */
        __m256i bad = zero;
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) {
                const __m256i grid = grid_of(s[r][v]);
                const __m256i f = _mm256_and_si256(_mm256_castps_si256(_mm256_cvtepi32_ps(S[r][v])), keep_mask);
                const __m256i szero = _mm256_cmpeq_epi32(S[r][v], zero);
                const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(grid_lo, grid), _mm256_cmpgt_epi32(grid, grid_hi));
                bad = _mm256_or_si256(bad, _mm256_andnot_si256(szero, out));
                c[r][v] = _mm256_andnot_si256(szero, _mm256_add_epi32(f, _mm256_slli_epi32(grid, 23)));
            }
        if (!_mm256_testz_si256(bad, bad)) fix_lanes(c, S, NULL, s, MM_CPU_GRID_MAX_NARROW, p);
    }
}

/* mm_split_acc for the tile; resume: continue from the state in acc (cpu_fast.h). */
MM_AVX2_INLINE void tile_impl(const mm_cpu_plan* p, const int32_t* a, int64_t as, const int32_t* b,
                              int64_t k0, int64_t k1, float* acc, const int resume,
                              const int split) {
    __m256i c[MR][NV];
    if (p->fast) {
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) c[r][v] = resume ? _mm256_loadu_si256((const __m256i*)(acc + r * W + v * VL)) : _mm256_setzero_si256();
        chain(p, a, as, b, k0, k1, c, split);
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) _mm256_storeu_si256((__m256i*)(acc + r * W + v * VL), c[r][v]);
        return;
    }
    const int64_t interval = p->promote_k;
    __m256 main_acc[MR][NV];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) main_acc[r][v] = resume ? _mm256_loadu_ps(acc + r * W + v * VL) : _mm256_setzero_ps();
    for (int64_t k = k0; k < k1; k += interval) {
        for (int r = 0; r < MR; r++) /* each promotion interval's chain starts from +0 */
            for (int v = 0; v < NV; v++) c[r][v] = _mm256_setzero_si256();
        chain(p, a, as, b, k, k1 - k < interval ? k1 : k + interval, c, split);
        for (int r = 0; r < MR; r++) /* the promotion: an IEEE fp32 add, round to nearest */
            for (int v = 0; v < NV; v++) main_acc[r][v] = _mm256_add_ps(main_acc[r][v], _mm256_castsi256_ps(c[r][v]));
    }
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) _mm256_storeu_ps(acc + r * W + v * VL, main_acc[r][v]);
}

MM_AVX2 static void tile(const mm_cpu_plan* p, const mm_cpu_operands* o, int64_t k0, int64_t k1, float* acc,
                         int resume) {
    tile_impl(p, o->a, o->as, o->b, k0, k1, acc, resume, 0);
}

MM_AVX2 static void tile_split(const mm_cpu_plan* p, const mm_cpu_operands* o, int64_t k0, int64_t k1,
                               float* acc, int resume) {
    tile_impl(p, o->a, o->as, o->b, k0, k1, acc, resume, 1);
}

const mm_cpu_kernel mm_cpu_kernel_avx2 = {"avx2", MR, W, MR, tile, tile_split, MM_CPU_A_BIAS, MM_CPU_E_SIGNED, MM_CPU_BYTES_PLAIN, 0};

#else
const mm_cpu_kernel mm_cpu_kernel_avx2 = {"avx2", 1, 1, 1, 0, 0, 0, MM_CPU_E_SIGNED, MM_CPU_BYTES_PLAIN, 0};
#endif
