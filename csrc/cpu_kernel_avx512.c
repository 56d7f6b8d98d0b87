/* cpu_kernel_avx512.c: the tile kernels (narrow and split sums) with AVX-512 (F + BW).
 *
 * The AVX2 kernel (cpu_kernel_avx2.c) with twice the lanes: 32 int16 columns per vector in
 * pass 1, 16 fp32 columns in pass 2; zero tests use mask registers. Called only when the CPU
 * reports avx512f and avx512bw.
 *
 * Built with -DMMAEMU_EMULATE_AVX512, the same source compiles against SIMDe's portable
 * implementation of the intrinsics (header-only, e.g. Debian's libsimde-dev), so that its
 * logic is checked bit for bit on CPUs without AVX-512 (test/test_cpu_backend.py). */
#include "cpu_fast.h"

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
#define _mm512_cvtepi32_pd mm_emu_cvtepi32_pd
#define _mm512_cvtpd_ps mm_emu_cvtpd_ps
#define MM_AVX512
#define MM_AVX512_INLINE static inline
#define MM_HAVE_AVX512_KERNEL 1
#elif (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define MM_AVX512 __attribute__((target("avx512f,avx512bw")))
#define MM_AVX512_INLINE __attribute__((target("avx512f,avx512bw"), always_inline)) static inline
#define MM_HAVE_AVX512_KERNEL 1
#endif

#if defined(MM_HAVE_AVX512_KERNEL)

/* 4 rows x 32 columns (one int16 vector per row in pass 1), as the AVX2 kernel's 4 x 16. */
enum { MR = 4, NV = 2, VL = 16, W = NV * VL, STRIDE = MM_CPU_PANEL_STRIDE(W) };

/* The grid exponent E - frac of a block from its scale s = 2^(frac - E). */
MM_AVX512_INLINE __m512i grid_of(__m512 s) {
    return _mm512_sub_epi32(_mm512_set1_epi32(127), _mm512_srli_epi32(_mm512_castps_si512(s), 23));
}

/* Lanes the fast exponent arithmetic cannot compose, composed exactly (cpu_kernel_avx2.c's
 * compose_fix); called on copies, outside the hot loops. */
MM_AVX512 __attribute__((noinline)) static void compose_fix(__m512i c[MR][NV], const __m512i S[MR][NV],
                                                           const __m512i S2[MR][NV],
                                                           const __m512 s[MR][NV], int grid_hi,
                                                           const mm_cpu_plan* p) {
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) {
            int32_t s1[VL], s2[VL], gr[VL], o[VL];
            _mm512_storeu_si512(s1, S[r][v]);
            _mm512_storeu_si512(s2, S2[r][v]);
            _mm512_storeu_si512(gr, grid_of(s[r][v]));
            _mm512_storeu_si512(o, c[r][v]);
            for (int l = 0; l < VL; l++) {
                const int64_t sum = (int64_t)s1[l] + s2[l];
                if (sum != 0 && (gr[l] < MM_CPU_GRID_MIN || gr[l] > grid_hi))
                    o[l] = (int32_t)mm_cpu_compose(sum, gr[l], p->keep);
            }
            c[r][v] = _mm512_loadu_si512(o);
        }
}

MM_AVX512_INLINE void fix_lanes(__m512i c[MR][NV], __m512i S[MR][NV], __m512i (*S2)[NV],
                                __m512 s[MR][NV], int grid_hi, const mm_cpu_plan* p) {
    __m512i cc[MR][NV], SS[MR][NV], SS2[MR][NV];
    __m512 ss[MR][NV];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) {
            cc[r][v] = c[r][v];
            SS[r][v] = S[r][v];
            SS2[r][v] = S2 ? S2[r][v] : _mm512_setzero_si512();
            ss[r][v] = s[r][v];
        }
    compose_fix(cc, SS, SS2, ss, grid_hi, p);
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) c[r][v] = cc[r][v];
}

/* Pass 2 over k in [k_begin, k_end) of a block: S += trunc((a * b) * 2^-grid), the scaling
 * an integer add G to the product's exponent field (cpu_fast.h, MM_CPU_A_BIAS). */
MM_AVX512_INLINE void pass2(const int32_t* ak, int64_t as, const int32_t* bk, int k_begin,
                            int k_end, const __m512i G[MR][NV], __m512i S[MR][NV]) {
    for (int k = k_begin; k < k_end; k++) {
        const mm_cpu_f32* vb = mm_cpu_cvalues(bk + k * STRIDE + W / 2);
        __m512 bv[NV];
        for (int v = 0; v < NV; v++) bv[v] = _mm512_loadu_ps(vb + v * VL);
        for (int r = 0; r < MR; r++) {
            const __m512 av = _mm512_set1_ps(mm_bits_f32((uint32_t)ak[r * as + 2 * k + 1]));
            for (int v = 0; v < NV; v++) {
                const __m512i q = _mm512_add_epi32(_mm512_castps_si512(_mm512_mul_ps(av, bv[v])), G[r][v]);
                S[r][v] = _mm512_add_epi32(S[r][v], _mm512_cvttps_epi32(_mm512_castsi512_ps(q)));
            }
        }
    }
}

/* The block result of the split form (cpu_kernel_avx2.c's compose_split, 16 lanes). */
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

MM_AVX512_INLINE void chain(const mm_cpu_plan* p, const int32_t* a, int64_t as, const int32_t* b,
                            int64_t k0, int64_t k1, __m512i c[MR][NV], const int split) {
    const __m512i zero = _mm512_setzero_si512();
    const __m512i v_ff = _mm512_set1_epi32(0xFF), v_one = _mm512_set1_epi32(1);
    const __m512i v_127 = _mm512_set1_epi32(127), v_abs = _mm512_set1_epi32(0x7FFFFFFF);
    const __m512i v_zero_c = _mm512_set1_epi32(MM_CPU_ZERO_C_EXP);
    const __m512i v_floor = _mm512_set1_epi32(MM_CPU_E_FLOOR);
    const __m512i v_scale = _mm512_set1_epi32(127 + p->frac);
    const __m512i keep_mask = _mm512_set1_epi32((int32_t)p->keep_mask);
    const __m512i grid_lo = _mm512_set1_epi32(MM_CPU_GRID_MIN), grid_hi = _mm512_set1_epi32(MM_CPU_GRID_MAX_NARROW);
    const __m512i e16_init = _mm512_set1_epi16(-32768);
    const __m512i v_frac = _mm512_set1_epi32(p->frac), v_bias = _mm512_set1_epi32(MM_CPU_A_BIAS);
    const __m512i v_glo = _mm512_set1_epi32(MM_CPU_PROD_EXP_MIN - p->frac), v_ghi = _mm512_set1_epi32(MM_CPU_PROD_EXP_MAX);
    for (int64_t kb = k0; kb < k1; kb += p->block) {
        const int n = (int)(k1 - kb < p->block ? k1 - kb : p->block);
        const int32_t* ak = a + 2 * kb;
        const int32_t* bk = b + kb * STRIDE;
        /* Pass 1: the products' largest alignment exponent, 32 columns per int16 vector; even
         * and odd k in separate maxima. */
        __m512i E16[MR], E16b[MR];
        for (int r = 0; r < MR; r++) E16[r] = E16b[r] = e16_init;
        int kp = 0;
        for (; kp + 1 < n; kp += 2) {
            const __m512i eb0 = _mm512_loadu_si512(bk + kp * STRIDE);
            const __m512i eb1 = _mm512_loadu_si512(bk + (kp + 1) * STRIDE);
            for (int r = 0; r < MR; r++) {
                const __m512i ea0 = _mm512_set1_epi32(ak[r * as + 2 * kp]);
                const __m512i ea1 = _mm512_set1_epi32(ak[r * as + 2 * kp + 2]);
                E16[r] = _mm512_max_epi16(E16[r], _mm512_add_epi16(ea0, eb0));
                E16b[r] = _mm512_max_epi16(E16b[r], _mm512_add_epi16(ea1, eb1));
            }
        }
        if (kp < n) {
            const __m512i eb0 = _mm512_loadu_si512(bk + kp * STRIDE);
            for (int r = 0; r < MR; r++)
                E16[r] = _mm512_max_epi16(E16[r], _mm512_add_epi16(_mm512_set1_epi32(ak[r * as + 2 * kp]), eb0));
        }
        for (int r = 0; r < MR; r++) E16[r] = _mm512_max_epi16(E16[r], E16b[r]);
        /* E with C's exponent, s = 2^(frac - E), S = trunc(C * s); the grid is later recovered
         * from s (as in the AVX2 kernel). */
        __m512i S[MR][NV], G[MR][NV];
        __m512 s[MR][NV];
        for (int r = 0; r < MR; r++) {
            const __m512i ep[NV] = {_mm512_cvtepi16_epi32(_mm512_castsi512_si256(E16[r])),
                                    _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(E16[r], 1))};
            for (int v = 0; v < NV; v++) {
                const __m512i cb = p->c_late ? zero : c[r][v]; /* a late C joins after the block */
                const __m512i field = _mm512_and_si512(_mm512_srli_epi32(cb, 23), v_ff);
                const __mmask16 czero = _mm512_cmpeq_epi32_mask(_mm512_and_si512(cb, v_abs), zero);
                const __m512i ce = _mm512_mask_mov_epi32(_mm512_sub_epi32(_mm512_max_epi32(field, v_one), v_127),
                                                         czero, v_zero_c);
                const __m512i ef = _mm512_max_epi32(_mm512_max_epi32(ep[v], ce), v_floor);
                s[r][v] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_sub_epi32(v_scale, ef), 23));
                S[r][v] = _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_castsi512_ps(cb), s[r][v]));
                G[r][v] = _mm512_slli_epi32(_mm512_sub_epi32(v_bias, _mm512_min_epi32(_mm512_max_epi32(
                                                _mm512_sub_epi32(ef, v_frac), v_glo), v_ghi)), 23);
            }
        }
        /* Pass 2: every product cut toward zero to the grid, summed exactly (split: the
         * second half of the block into S2). */
        const int h = split ? (n + 1) / 2 : n;
        pass2(ak, as, bk, 0, h, G, S);
        __m512i S2[MR][NV];
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) S2[r][v] = zero;
        pass2(ak, as, bk, h, n, G, S2);
        __mmask16 bad = 0;
        if (split) {
            __m512i c_old[MR][NV];
            for (int r = 0; r < MR; r++)
                for (int v = 0; v < NV; v++) {
                    c_old[r][v] = c[r][v];
                    c[r][v] = compose_split(S[r][v], S2[r][v], grid_of(s[r][v]), p, &bad);
                }
            if (bad) fix_lanes(c, S, S2, s, MM_CPU_GRID_MAX_SPLIT, p);
            if (p->c_late) /* D + C, one fp32 RN-even add (mm_block) */
                for (int r = 0; r < MR; r++)
                    for (int v = 0; v < NV; v++)
                        c[r][v] = _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(c[r][v]), _mm512_castsi512_ps(c_old[r][v])));
            continue;
        }
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) {
                const __m512i grid = grid_of(s[r][v]);
                const __m512i f = _mm512_and_si512(_mm512_castps_si512(_mm512_cvtepi32_ps(S[r][v])), keep_mask);
                const __mmask16 nz = _mm512_test_epi32_mask(S[r][v], S[r][v]);
                bad |= nz & (_mm512_cmpgt_epi32_mask(grid_lo, grid) | _mm512_cmpgt_epi32_mask(grid, grid_hi));
                c[r][v] = _mm512_maskz_add_epi32(nz, f, _mm512_slli_epi32(grid, 23));
            }
        if (bad) fix_lanes(c, S, NULL, s, MM_CPU_GRID_MAX_NARROW, p);
    }
}

MM_AVX512_INLINE void tile_impl(const mm_cpu_plan* p, const int32_t* a, int64_t as,
                                const int32_t* b, int64_t k0, int64_t k1, float* acc,
                                const int resume, const int split) {
    __m512i c[MR][NV];
    if (p->fast) {
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) c[r][v] = resume ? _mm512_loadu_si512(acc + r * W + v * VL) : _mm512_setzero_si512();
        chain(p, a, as, b, k0, k1, c, split);
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) _mm512_storeu_si512(acc + r * W + v * VL, c[r][v]);
        return;
    }
    const int64_t interval = p->promote_k;
    __m512 main_acc[MR][NV];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) main_acc[r][v] = resume ? _mm512_loadu_ps(acc + r * W + v * VL) : _mm512_setzero_ps();
    for (int64_t k = k0; k < k1; k += interval) {
        for (int r = 0; r < MR; r++) /* each promotion interval's chain starts from +0 */
            for (int v = 0; v < NV; v++) c[r][v] = _mm512_setzero_si512();
        chain(p, a, as, b, k, k1 - k < interval ? k1 : k + interval, c, split);
        for (int r = 0; r < MR; r++) /* the promotion: an IEEE fp32 add, round to nearest */
            for (int v = 0; v < NV; v++) main_acc[r][v] = _mm512_add_ps(main_acc[r][v], _mm512_castsi512_ps(c[r][v]));
    }
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(acc + r * W + v * VL, main_acc[r][v]);
}

MM_AVX512 static void tile(const mm_cpu_plan* p, const int32_t* a, int64_t as, const int32_t* b,
                           int64_t k0, int64_t k1, float* acc, int resume) {
    tile_impl(p, a, as, b, k0, k1, acc, resume, 0);
}

MM_AVX512 static void tile_split(const mm_cpu_plan* p, const int32_t* a, int64_t as,
                                 const int32_t* b, int64_t k0, int64_t k1, float* acc, int resume) {
    tile_impl(p, a, as, b, k0, k1, acc, resume, 1);
}

const mm_cpu_kernel mm_cpu_kernel_avx512 = {"avx512", MR, W, tile, tile_split, MM_CPU_A_BIAS};

#else
const mm_cpu_kernel mm_cpu_kernel_avx512 = {"avx512", 1, 1, 0, 0, 0};
#endif
