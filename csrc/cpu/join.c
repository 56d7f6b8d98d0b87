/* join.c: block-wise scales joined to a tile's accumulators (mm_blockwise_join, mmaemu_gemm.h),
 * once per 128-k group: acc = fmaf(fp32(sa * sb), chain, acc), or the per-element form
 * fmaf(fp32(chain * sa), sb, acc). The plain loop is the reference form; the AVX2 one does the
 * same IEEE operations eight lanes at a time (a hardware FMA rounds once, as fmaf does), run
 * where the plan's SIMD kernel is AVX2 or AVX-512 (CPUs that have AVX2 and FMA). */
#include <string.h>

#include "driver.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define MM_JOIN_AVX2 1
#endif

/* acc[r * w + c] joined with chain[r * w + c], A's scale sa[r], B's scale sb[c]. */
static void join_plain(float* acc, const float* chain, const float* sa, const float* sb, int rows,
                       int w, int32_t epilogue) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < w; c++)
            acc[r * w + c] = mm_blockwise_join(acc[r * w + c], chain[r * w + c], sa[r], sb[c], epilogue);
}

#ifdef MM_JOIN_AVX2
__attribute__((target("avx2,fma"))) static void join_avx2(float* acc, const float* chain,
                                                            const float* sa, const float* sb,
                                                            int rows, int w, int32_t epilogue) {
    const int pe = epilogue == MM_EPI_BLOCKWISE_PE;
    for (int r = 0; r < rows; r++) {
        const __m256 a_scale = _mm256_set1_ps(sa[r]);
        float* row = acc + r * w;
        const float* ch = chain + r * w;
        int c = 0;
        for (; c + 8 <= w; c += 8) {
            const __m256 b_scale = _mm256_loadu_ps(sb + c), x = _mm256_loadu_ps(ch + c);
            const __m256 y = _mm256_loadu_ps(row + c);
            _mm256_storeu_ps(row + c, pe ? _mm256_fmadd_ps(_mm256_mul_ps(x, a_scale), b_scale, y)
                                         : _mm256_fmadd_ps(_mm256_mul_ps(a_scale, b_scale), x, y));
        }
        for (; c < w; c++) row[c] = mm_blockwise_join(row[c], ch[c], sa[r], sb[c], epilogue);
    }
}
#endif

mm_cpu_join_fn mm_cpu_join_for(const char* simd) {
#ifdef MM_JOIN_AVX2
    if ((strcmp(simd, "avx2") == 0 || strcmp(simd, "avx512") == 0) && mm_cpu_has("avx2")) return join_avx2;
#endif
    (void)simd;
    return join_plain;
}
