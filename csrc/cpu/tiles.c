/* tiles.c: the `cpu` executor's form of a tile-planned GEMM (mmaemu_tiles.h), the same bits as
 * mmaemu_gemm_tiles_reference, built from accumulator-only calls of mmaemu_gemm_cpu.
 *
 * Every chain of the plan (a fast segment, a staged group) is a chain of blocks over a k range
 * from +0: exactly the accumulator of a fast-accumulation GEMM over that range with splits = 1
 * (mm_split_acc), which the SIMD kernels compute. The group sums, the left fold of the
 * segments and the epilogue (mm_epilogue_at) are the reference's steps, element by element.
 * Work goes by tile rows; within one, by runs of adjacent tiles with the same segments (all
 * data-parallel tiles of a row are one run), so most calls are wide. */
#include <stdlib.h>
#include <string.h>

#include "driver.h"

/* The chain accumulators over k in [k0, k1) of rows [i0, i0 + rows) x columns [j0, j0 + cols),
 * into out (row stride cols). NaN comes back canonical, which no later step can tell apart:
 * the output conversions canonicalise NaN. */
static int chain_block(const mm_gemm* g, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                       int64_t k0, int64_t k1, float* out, int threads, const char* simd) {
    mm_gemm c = *g;
    c.a = g->a + i0 * g->lda + k0;
    c.b = g->b + j0 * g->ldb + k0;
    c.M = rows;
    c.N = cols;
    c.K = k1 - k0;
    c.fast_accum = 1;
    c.splits = 1;
    c.scheme = MM_SCHEME_NONE;
    c.out_kind = MM_OUT_ACC;
    c.epilogue_order = MM_EPI_H1;
    c.scale_a_vec = c.scale_b_vec = 0;
    c.bias = 0;
    c.bias_kind = MM_BIAS_NONE;
    c.has_scale_result = 0;
    c.out = out;
    c.ldo = cols;
    return mmaemu_gemm_cpu(&c, threads, simd);
}

/* One segment's accumulators into part: a chain (fast) or the staged groups of mm_staged_acc. */
static int segment_block(const mm_gemm* g, int64_t i0, int64_t rows, int64_t j0, int64_t cols,
                         int64_t k0, int64_t k1, float* part, float* group, int threads,
                         const char* simd) {
    if (g->fast_accum) return chain_block(g, i0, rows, j0, cols, k0, k1, part, threads, simd);
    const int64_t n = rows * cols;
    for (int64_t e = 0; e < n; e++) part[e] = 0.0f;
    for (int64_t k = k0, end = k0 + MM_STAGED_FIRST; k < k1; k = end, end += MM_STAGED_WIDTH) {
        const int rc = chain_block(g, i0, rows, j0, cols, k, end < k1 ? end : k1, group, threads, simd);
        if (rc != MM_OK) return rc;
        for (int64_t e = 0; e < n; e++) part[e] = part[e] + group[e];
    }
    return MM_OK;
}

/* A run of tiles with the same segments: fold the segments, then the epilogue. */
static int run_block(const mm_gemm* g, const int64_t* bounds, int64_t nseg, int64_t iter_k,
                     int64_t i0, int64_t rows, int64_t j0, int64_t cols, float* acc, float* part,
                     float* group, int threads, const char* simd) {
    const int64_t n = rows * cols;
    for (int64_t s = 0; s < nseg; s++) {
        const int64_t k0 = bounds[2 * s] * iter_k, e = bounds[2 * s + 1] * iter_k;
        float* dst = s == 0 ? acc : part;
        const int rc = segment_block(g, i0, rows, j0, cols, k0, e < g->K ? e : g->K, dst, group,
                                     threads, simd);
        if (rc != MM_OK) return rc;
        if (s > 0)
            for (int64_t x = 0; x < n; x++) acc[x] = acc[x] + part[x];
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            mm_store(g, i0 + r, j0 + c, mm_epilogue_at(acc[r * cols + c], g, i0 + r, j0 + c));
    return MM_OK;
}

static int same_segments(const mm_tile_plan* tp, int64_t t, int64_t u) {
    const int64_t n = tp->offsets[t + 1] - tp->offsets[t];
    if (tp->offsets[u + 1] - tp->offsets[u] != n) return 0;
    return memcmp(tp->bounds + 2 * tp->offsets[t], tp->bounds + 2 * tp->offsets[u],
                  (size_t)(2 * n) * sizeof(int64_t)) == 0;
}

static int gemm_tiles_cpu(const mm_gemm* g, const mm_tile_plan* tp, int threads, const char* simd) {
    if (mmaemu_cpu_flushes_denormals()) return MM_ERR_FLUSH_DENORMAL;
    if (!mm_cpu_simd_kernel(simd)) return MM_ERR_CPU_SIMD;
    if (g->M == 0 || g->N == 0) return MM_OK;
    const size_t n = (size_t)tp->tile_m * (size_t)g->N;
    float* buf = malloc(3 * n * sizeof(float));
    if (!buf) return MM_ERR_NO_MEMORY;
    int rc = MM_OK;
    for (int64_t i0 = 0; i0 < g->M && rc == MM_OK; i0 += tp->tile_m) {
        const int64_t rows = g->M - i0 < tp->tile_m ? g->M - i0 : tp->tile_m;
        const int64_t row = i0 / tp->tile_m;
        for (int64_t tn = 0; tn < tp->tiles_n && rc == MM_OK;) {
            const int64_t t = row * tp->tiles_n + tn;
            int64_t end = tn + 1;
            while (end < tp->tiles_n && same_segments(tp, t, row * tp->tiles_n + end)) end++;
            const int64_t j0 = tn * tp->tile_n;
            const int64_t j1 = end * tp->tile_n < g->N ? end * tp->tile_n : g->N;
            const size_t m = (size_t)(rows * (j1 - j0));
            rc = run_block(g, tp->bounds + 2 * tp->offsets[t], tp->offsets[t + 1] - tp->offsets[t],
                           tp->iter_k, i0, rows, j0, j1 - j0, buf, buf + m, buf + 2 * m, threads, simd);
            tn = end;
        }
    }
    free(buf);
    return rc;
}

int mmaemu_gemm_tiles_cpu(const mm_gemm* g, const mm_tile_plan* tp, int threads, const char* simd) {
    const int mode = mmaemu_round_nearest();
    const int rc = gemm_tiles_cpu(g, tp, threads, simd);
    mmaemu_round_restore(mode);
    return rc;
}
