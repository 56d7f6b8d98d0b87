/* reference.c: the scalar reference backend. One output element at a time, straight from the
 * shared arithmetic headers: obviously correct, and the yardstick for every fast kernel. */
#include "mmaemu.h"

static int gemm_reference(const mm_gemm* g) {
    int rc = mmaemu_gemm_check(g);
    if (rc != MM_OK) return rc;
    if (mmaemu_cpu_flushes_denormals()) return MM_ERR_FLUSH_DENORMAL;
    for (int64_t i = 0; i < g->M; i++)
        for (int64_t j = 0; j < g->N; j++)
            mm_store(g, i, j, mm_gemm_element(g, i, j));
    return MM_OK;
}

int mmaemu_gemm_reference(const mm_gemm* g) {
    const int mode = mmaemu_round_nearest();
    const int rc = gemm_reference(g);
    mmaemu_round_restore(mode);
    return rc;
}

static int mma_reference(const uint8_t* a, int64_t lda, int fmt_a, const uint8_t* b, int64_t ldb,
                         int fmt_b, const float* c, int64_t n, int64_t K, int preset_id, float* d) {
    if (preset_id < 0 || preset_id >= MM_PRESET_COUNT || n < 0 || K < 0) return MM_ERR_ARGUMENT;
    if (n > MM_MAX_DIM || K > MM_MAX_DIM) return MM_ERR_ARGUMENT;
    if (fmt_a < MM_FMT_E4M3 || fmt_a > MM_FMT_E5M2 || fmt_b < MM_FMT_E4M3 || fmt_b > MM_FMT_E5M2)
        return MM_ERR_ARGUMENT;
    const mm_preset p = mm_preset_get(preset_id);
    if (K % p.block != 0) return MM_ERR_ARGUMENT;
    if (n > 0 && (!c || !d || (K > 0 && (!a || !b || lda < 0 || ldb < 0)))) return MM_ERR_ARGUMENT;
    if (mmaemu_cpu_flushes_denormals()) return MM_ERR_FLUSH_DENORMAL;
    for (int64_t i = 0; i < n; i++) {
        /* With K = 0, a and b may be NULL: form no pointer from them (C forbids NULL + 0). */
        const float acc = K > 0 ? mm_chain(a + i * lda, b + i * ldb, fmt_a, fmt_b, 0, K, c[i], &p) : c[i];
        d[i] = mm_bits_f32(mm_f32_canonical(acc));
    }
    return MM_OK;
}

int mmaemu_mma_reference(const uint8_t* a, int64_t lda, int fmt_a, const uint8_t* b,
                         int64_t ldb, int fmt_b, const float* c, int64_t n, int64_t K,
                         int preset_id, float* d) {
    const int mode = mmaemu_round_nearest();
    const int rc = mma_reference(a, lda, fmt_a, b, ldb, fmt_b, c, n, K, preset_id, d);
    mmaemu_round_restore(mode);
    return rc;
}

int mmaemu_tile_plan_check(const mm_gemm* g, const mm_tile_plan* tp, int64_t n_offsets,
                           int64_t n_bounds) {
    if (!tp || tp->tile_m < 1 || tp->tile_n < 1 || tp->iter_k < 1) return MM_ERR_ARGUMENT;
    if (tp->iter_k % g->preset.block != 0) return MM_ERR_ARGUMENT;
    const int64_t tiles_m = (g->M + tp->tile_m - 1) / tp->tile_m;
    if (tp->tiles_n != (g->N + tp->tile_n - 1) / tp->tile_n) return MM_ERR_ARGUMENT;
    if (n_offsets != tiles_m * tp->tiles_n + 1 || !tp->offsets || tp->offsets[0] != 0)
        return MM_ERR_ARGUMENT;
    const int64_t iters = (g->K + tp->iter_k - 1) / tp->iter_k;
    for (int64_t t = 0; t + 1 < n_offsets; t++) {
        if (tp->offsets[t + 1] < tp->offsets[t] || tp->offsets[t + 1] > n_bounds) return MM_ERR_ARGUMENT;
        for (int64_t s = tp->offsets[t]; s < tp->offsets[t + 1]; s++) {
            const int64_t lo = tp->bounds[2 * s], hi = tp->bounds[2 * s + 1];
            if (lo < 0 || hi <= lo || hi > iters) return MM_ERR_ARGUMENT;
        }
    }
    return MM_OK;
}

int mmaemu_gemm_tiles_reference(const mm_gemm* g, const mm_tile_plan* tp, int64_t row0,
                                int64_t row1) {
    if (mmaemu_cpu_flushes_denormals()) return MM_ERR_FLUSH_DENORMAL;
    const int mode = mmaemu_round_nearest();
    for (int64_t i = row0; i < row1; i++)
        for (int64_t j = 0; j < g->N; j++)
            mm_store(g, i, j, mm_tiles_element(g, tp, i, j));
    mmaemu_round_restore(mode);
    return MM_OK;
}
