/* store.c: a tile's epilogue and store, and the prefetch of its outputs. */
#include "driver.h"

/* The epilogue of a tile's accumulators acc: its rows row0 + rt.. (rows of them), columns j0..;
 * an output whose row or column holds a NaN/Inf code gets the reference's bits instead. */
void mm_cpu_store_tile(const mm_cpu_job* job, int64_t rt, int rows, int64_t j0, const float* acc,
                       const uint8_t* col_special) {
    const mm_gemm* g = job->g;
    const int w = job->kern->w;
    const int cols = j0 + w < g->N ? w : (int)(g->N - j0);
    int special_col = 0;
    for (int c = 0; c < cols; c++) special_col |= col_special[c];
    for (int r = 0; r < rows; r++) {
        const int64_t i = job->row0 + rt + r;
        if (i >= g->M) break;
        const int special_row = job->row_special[rt + r];
        if (!special_row && !special_col && g->epilogue_order < MM_EPI_ROWWISE && g->bias_kind == MM_BIAS_NONE) {
            /* mm_epilogue_at's most common case (mm_epilogue: tensor-wise scales, no bias) with
             * its choices made once. The two 2-byte loops are alike on purpose: in each the
             * compiler knows the output kind and drops mm_epilogue's switch. */
            const float* row = acc + r * w;
            uint16_t* out16 = (uint16_t*)g->out + i * g->ldo + j0;
            if (g->out_kind == MM_OUT_BF16) {
                for (int c = 0; c < cols; c++) out16[c] = (uint16_t)mm_epilogue(row[c], g);
            } else if (g->out_kind == MM_OUT_F16) {
                for (int c = 0; c < cols; c++) out16[c] = (uint16_t)mm_epilogue(row[c], g);
            } else {
                for (int c = 0; c < cols; c++) mm_store(g, i, j0 + c, mm_epilogue(row[c], g));
            }
            continue;
        }
        for (int c = 0; c < cols; c++) {
            const uint32_t bits = special_row || col_special[c] ? mm_gemm_element(g, i, j0 + c)
                                                                : mm_epilogue_at(acc[r * w + c], g, i, j0 + c);
            mm_store(g, i, j0 + c, bits);
        }
    }
}

/* Asks for the cache lines of the tile's outputs (rows rt.., rows of them, columns j0..) with
 * intent to write, before the tile's k loop: mm_cpu_store_tile then writes to lines already fetched,
 * where a store that missed waited for its line (the outputs of a large GEMM are in no cache). */
void mm_cpu_prefetch_out(const mm_cpu_job* job, int64_t rt, int rows, int64_t j0) {
    const mm_gemm* g = job->g;
    const int size = mm_out_size(g->out_kind), w = job->kern->w;
    const int64_t cols = j0 + w < g->N ? w : g->N - j0;
    for (int r = 0; r < rows && job->row0 + rt + r < g->M; r++) {
        const char* row = (const char*)g->out + ((job->row0 + rt + r) * g->ldo + j0) * size;
        for (int64_t b = 0; b < cols * size; b += 64) __builtin_prefetch(row + b, 1, 3);
        __builtin_prefetch(row + cols * size - 1, 1, 3);
    }
}
