/* cpu_kernel_avx512.c: the narrow tile kernel with AVX-512 (F + BW) integer SIMD.
 *
 * The AVX2 kernel (cpu_kernel_avx2.c) with 16 lanes per vector; signs and the special lanes
 * use mask registers, as AVX-512 has no vpsignd. Called only when the CPU reports avx512f and
 * avx512bw.
 *
 * Built with -DMMAEMU_EMULATE_AVX512, the same source compiles against SIMDe's portable
 * implementation of the intrinsics (header-only, e.g. Debian's libsimde-dev), so that its
 * logic is checked bit for bit on CPUs without AVX-512 (test/test_cpu_backend.py). */
#include "cpu_fast.h"

#if defined(MMAEMU_EMULATE_AVX512)
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
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

enum { MR = 2, NV = 2, VL = 16, W = NV * VL };

MM_AVX512 static __m512i compose_slow(__m512i res, __m512i S, __m512i grid, __mmask16 bad,
                                      const mm_cpu_plan* p) {
    int32_t s[VL], gr[VL], out[VL];
    _mm512_storeu_si512(s, S);
    _mm512_storeu_si512(gr, grid);
    _mm512_storeu_si512(out, res);
    for (int l = 0; l < VL; l++)
        if ((bad >> l) & 1) out[l] = (int32_t)mm_cpu_compose(s[l], gr[l], p->keep);
    return _mm512_loadu_si512(out);
}

MM_AVX512_INLINE void chain(const mm_cpu_plan* p, const int32_t* a, int64_t as, const int32_t* b,
                            int64_t k0, int64_t k1, __m512i c[MR][NV]) {
    const __m512i zero = _mm512_setzero_si512();
    const __m512i v_ff = _mm512_set1_epi32(0xFF), v_one = _mm512_set1_epi32(1);
    const __m512i v_127 = _mm512_set1_epi32(127), v_abs = _mm512_set1_epi32(0x7FFFFFFF);
    const __m512i v_exp = _mm512_set1_epi32(0x7F800000);
    const __m512i v_mant = _mm512_set1_epi32(0x7FFFFF), v_hidden = _mm512_set1_epi32(0x800000);
    const __m512i v_zero_c = _mm512_set1_epi32(MM_CPU_ZERO_C_EXP);
    const __m512i keep_mask = _mm512_set1_epi32((int32_t)p->keep_mask);
    const __m512i prod_shift = _mm512_set1_epi32(p->prod_shift);
    const __m512i c_shift = _mm512_set1_epi32(p->c_shift), frac = _mm512_set1_epi32(p->frac);
    const __m512i grid_lo = _mm512_set1_epi32(-126), grid_hi = _mm512_set1_epi32(104);
    const int64_t bs = 2 * W;
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) c[r][v] = zero;
    for (int64_t kb = k0; kb < k1; kb += p->block) {
        const int n = (int)(k1 - kb < p->block ? k1 - kb : p->block);
        const int32_t* ak = a + 2 * kb;
        const int32_t* bk = b + kb * bs;
        __m512i E[MR][NV], ce[MR][NV], S[MR][NV];
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) {
                const __m512i field = _mm512_and_si512(_mm512_srli_epi32(c[r][v], 23), v_ff);
                const __m512i e = _mm512_sub_epi32(_mm512_max_epi32(field, v_one), v_127);
                const __mmask16 czero = _mm512_cmpeq_epi32_mask(_mm512_and_si512(c[r][v], v_abs), zero);
                ce[r][v] = _mm512_mask_mov_epi32(e, czero, v_zero_c);
                E[r][v] = ce[r][v];
            }
        for (int k = 0; k < n; k++) {
            __m512i eb[NV];
            for (int v = 0; v < NV; v++) eb[v] = _mm512_loadu_si512(bk + k * bs + v * VL);
            for (int r = 0; r < MR; r++) {
                const __m512i ea = _mm512_set1_epi32(ak[r * as + 2 * k]);
                for (int v = 0; v < NV; v++)
                    E[r][v] = _mm512_max_epi32(E[r][v], _mm512_add_epi32(ea, eb[v]));
            }
        }
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) {
                const __m512i cb = c[r][v];
                const __mmask16 normal = _mm512_test_epi32_mask(cb, v_exp);
                const __m512i cm = _mm512_mask_or_epi32(_mm512_and_si512(cb, v_mant), normal,
                                                        _mm512_and_si512(cb, v_mant), v_hidden);
                const __m512i cnt = _mm512_add_epi32(_mm512_sub_epi32(E[r][v], ce[r][v]), c_shift);
                const __m512i t = _mm512_srlv_epi32(cm, cnt);
                S[r][v] = _mm512_mask_sub_epi32(t, _mm512_cmpgt_epi32_mask(zero, cb), zero, t);
                E[r][v] = _mm512_add_epi32(E[r][v], prod_shift);
            }
        for (int k = 0; k < n; k++) {
            __m512i eb[NV], sb[NV];
            for (int v = 0; v < NV; v++) {
                eb[v] = _mm512_loadu_si512(bk + k * bs + v * VL);
                sb[v] = _mm512_loadu_si512(bk + k * bs + W + v * VL);
            }
            for (int r = 0; r < MR; r++) {
                const __m512i ea = _mm512_set1_epi32(ak[r * as + 2 * k]);
                const __m512i sa = _mm512_set1_epi32(ak[r * as + 2 * k + 1]);
                for (int v = 0; v < NV; v++) {
                    const __m512i cnt = _mm512_sub_epi32(E[r][v], _mm512_add_epi32(ea, eb[v]));
                    const __m512i prod = _mm512_madd_epi16(sa, sb[v]);
                    const __m512i t = _mm512_srlv_epi32(_mm512_abs_epi32(prod), cnt);
                    const __mmask16 neg = _mm512_cmpgt_epi32_mask(zero, prod);
                    S[r][v] = _mm512_add_epi32(S[r][v], _mm512_mask_sub_epi32(t, neg, zero, t));
                }
            }
        }
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) {
                const __m512i grid = _mm512_sub_epi32(_mm512_sub_epi32(E[r][v], prod_shift), frac);
                const __m512i f = _mm512_and_si512(_mm512_castps_si512(_mm512_cvtepi32_ps(S[r][v])), keep_mask);
                const __mmask16 nz = _mm512_test_epi32_mask(S[r][v], S[r][v]);
                __m512i res = _mm512_maskz_add_epi32(nz, f, _mm512_slli_epi32(grid, 23));
                const __mmask16 bad = nz & (_mm512_cmpgt_epi32_mask(grid_lo, grid) |
                                            _mm512_cmpgt_epi32_mask(grid, grid_hi));
                if (bad) res = compose_slow(res, S[r][v], grid, bad, p);
                c[r][v] = res;
            }
    }
}

MM_AVX512 static void tile(const mm_cpu_plan* p, const int32_t* a, int64_t as, const int32_t* b,
                           int64_t k0, int64_t k1, float* acc) {
    __m512i c[MR][NV];
    if (p->fast) {
        chain(p, a, as, b, k0, k1, c);
        for (int r = 0; r < MR; r++)
            for (int v = 0; v < NV; v++) _mm512_storeu_si512(acc + r * W + v * VL, c[r][v]);
        return;
    }
    const int64_t interval = (int64_t)p->block * p->promote_blocks;
    __m512 main_acc[MR][NV];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) main_acc[r][v] = _mm512_setzero_ps();
    for (int64_t k = k0; k < k1; k += interval) {
        chain(p, a, as, b, k, k1 - k < interval ? k1 : k + interval, c);
        for (int r = 0; r < MR; r++) /* the promotion: an IEEE fp32 add, round to nearest */
            for (int v = 0; v < NV; v++) main_acc[r][v] = _mm512_add_ps(main_acc[r][v], _mm512_castsi512_ps(c[r][v]));
    }
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(acc + r * W + v * VL, main_acc[r][v]);
}

const mm_cpu_kernel mm_cpu_kernel_avx512 = {"avx512", MR, W, tile};

#else
const mm_cpu_kernel mm_cpu_kernel_avx512 = {"avx512", 1, 1, 0};
#endif
