/* passes.c: A's rows in passes that stay in the last-level cache; per pass K whole (each
 * thread decodes its panels) or in segments (every segment's A rows and panels decoded once by
 * all the threads, each output's split state carried to the next segment). */
#include <stdlib.h>
#include <string.h>

#include "driver.h"

/* The end of the segment that starts at ks: at most kc further (kc a multiple of unit), and
 * inside a split only where the split's own k (from its origin) is a multiple of unit, so the
 * next segment resumes on a block (fast) or promotion-interval boundary. Always > ks: if the
 * split holding ks + kc began at or before ks, that point is already such a multiple. */
static int64_t segment_end(int64_t K, int64_t split_chunk, int64_t ks, int64_t kc, int64_t unit) {
    if (K - ks <= kc) return K;
    const int64_t ke = ks + kc, origin = ke / split_chunk * split_chunk;
    return origin + (ke - origin) / unit * unit;
}

/* The pass of A's rows from row0: its rows (whole row steps, at most pass_rows) and sub, g with its
 * A from that row on. */
static int64_t pass_at(const mm_gemm* g, int64_t row0, int64_t pass_rows, int step, mm_gemm* sub) {
    const int64_t rows = g->M - row0 < pass_rows ? (g->M - row0 + step - 1) / step * step : pass_rows;
    *sub = *g;
    sub->a = g->a + row0 * g->lda;
    sub->M = g->M - row0 < rows ? g->M - row0 : rows;
    return rows;
}

int mm_cpu_run_whole(mm_cpu_job* job, const mm_cpu_lut* lut_a, int threads) {
    const mm_gemm* g = job->g;
    const int mr = job->kern->mr;
    const int64_t row_bytes = 4 * mm_cpu_a_stride(g->K);
    int64_t pass_rows = mm_cpu_a_pass_rows(row_bytes, mr);
    const int step = job->kern->row_step;
    const int64_t m_pad_all = (g->M + mr - 1) / mr * mr; /* a pass is whole tiles; its rows, of step */
    if (pass_rows > m_pad_all) pass_rows = m_pad_all;
    int32_t* a = mm_cpu_a_buffer_take((size_t)(pass_rows * row_bytes));
    uint8_t* row_special = malloc((size_t)pass_rows);
    int rc = a && row_special ? MM_OK : MM_ERR_NO_MEMORY;
    job->ks = 0;
    job->ke = g->K;
    job->panel0 = 0;
    job->panels = (g->N + job->kern->w - 1) / job->kern->w;
    for (int64_t row0 = 0; row0 < g->M && rc == MM_OK; row0 += pass_rows) {
        mm_gemm sub;
        const int64_t rows = pass_at(g, row0, pass_rows, step, &sub);
        memset(row_special, 0, (size_t)rows);
        mm_cpu_decode_set(job, &sub, lut_a, a, row_special, rows, 0, g->K);
        job->a = a;
        job->row_special = row_special;
        job->row0 = row0;
        job->rows = rows;
        rc = mm_cpu_run_pass(job, threads);
    }
    mm_cpu_a_buffer_give(a);
    free(row_special);
    return rc;
}

/* Decoded B panels a segmented pass holds at once (every panel of its columns, job->panel_set):
 * its columns are cut to fit. */
#ifndef MM_CPU_SEG_PANEL_BUDGET
#define MM_CPU_SEG_PANEL_BUDGET ((int64_t)16 << 20)
#endif
/* Per-output state a segmented pass keeps across segments (4 bytes per output and reduction
 * slot): the pass's columns are cut to fit. */
#ifndef MM_CPU_STATE_BUDGET
#define MM_CPU_STATE_BUDGET ((int64_t)16 << 20)
#endif

/* Per pass of rows and columns, every segment's A rows and panels are decoded once and each
 * output's split state carried to the next segment; memory is bounded by the budgets. A long K
 * takes this form so that memory stays bounded; a large GEMM takes it with short segments
 * (MM_CPU_SEG_K) so that a row chunk's decoded A stays in L2 while the pass's panels run on
 * it, where all of K read a tile's A rows from L3 or memory once per panel. */
int mm_cpu_run_segments(mm_cpu_job* job, const mm_cpu_lut* lut_a, int64_t kc, int64_t unit,
                        int threads) {
    const mm_gemm* g = job->g;
    const int mr = job->kern->mr, w = job->kern->w;
    const int32_t splits = g->splits > 1 ? g->splits : 1;
    const int64_t split_chunk = mm_split_chunk(g->K, splits);
    const int step = job->kern->row_step;
    const int64_t m_pad_all = (g->M + mr - 1) / mr * mr, all_panels = (g->N + w - 1) / w; /* as mm_cpu_run_whole */
    int64_t pass_rows = mm_cpu_a_pass_rows(4 * mm_cpu_a_stride(kc), mr);
    if (pass_rows > m_pad_all) pass_rows = m_pad_all;
    job->nred = splits <= 1 ? 0 : g->scheme == MM_SCHEME_PAIRWISE ? mm_bitlen64((uint64_t)splits) : 1;
    int64_t pass_panels = MM_CPU_STATE_BUDGET / (4 * (1 + job->nred) * pass_rows * w);
    const int64_t panel_bytes = 4 * mm_cpu_panel_words(kc, w, job->signs);
    if (pass_panels > MM_CPU_SEG_PANEL_BUDGET / panel_bytes) pass_panels = MM_CPU_SEG_PANEL_BUDGET / panel_bytes;
    if (pass_panels < 1) pass_panels = 1;
    if (pass_panels > all_panels) pass_panels = all_panels;
    const int64_t outputs = pass_rows * pass_panels * w;
    job->seg_rows = mm_cpu_seg_chunk_rows(kc, mr);
    mm_cpu_panel* panel_set = calloc((size_t)pass_panels, sizeof(mm_cpu_panel));
    int panels_made = panel_set != NULL;
    for (int64_t i = 0; panels_made && i < pass_panels; i++) panels_made = mm_cpu_panel_alloc(&panel_set[i], kc, w, job->signs);
    int32_t* a = mm_cpu_a_buffer_take(sizeof(int32_t) * (size_t)(pass_rows * mm_cpu_a_stride(kc)));
    uint8_t* row_special = malloc((size_t)pass_rows);
    uint8_t* col_special = malloc((size_t)(pass_panels * w));
    float* state = mm_cpu_alloc_lines(sizeof(float) * (size_t)outputs);
    float* red = job->nred ? mm_cpu_alloc_lines(sizeof(float) * (size_t)(outputs * job->nred)) : NULL;
    int rc = a && row_special && col_special && state && (red || !job->nred) && panels_made ? MM_OK : MM_ERR_NO_MEMORY;
    job->state = state;
    job->red = red;
    job->panel_set = panel_set;
    job->col_special = col_special;
    job->a = a;
    job->row_special = row_special;
    for (int64_t row0 = 0; row0 < g->M && rc == MM_OK; row0 += pass_rows) {
        mm_gemm sub;
        const int64_t rows = pass_at(g, row0, pass_rows, step, &sub);
        job->row0 = row0;
        job->rows = rows;
        /* The rows' NaN/Inf flags gather over the first column pass's segments, complete
         * before its last segment stores anything. */
        memset(row_special, 0, (size_t)rows);
        for (int64_t p0 = 0; p0 < all_panels && rc == MM_OK; p0 += pass_panels) {
            job->panel0 = p0;
            job->panels = all_panels - p0 < pass_panels ? all_panels - p0 : pass_panels;
            memset(col_special, 0, (size_t)(job->panels * w)); /* the panels' decoders gather them */
            for (int64_t ks = 0; ks < g->K && rc == MM_OK; ks = job->ke) {
                job->ks = ks;
                job->ke = segment_end(g->K, split_chunk, ks, kc, unit);
                job->last = job->ke == g->K;
                mm_cpu_decode_set(job, &sub, lut_a, a, row_special, rows, ks, job->ke);
                rc = mm_cpu_run_pass(job, threads);
            }
        }
    }
    mm_cpu_a_buffer_give(a);
    free(row_special);
    free(col_special);
    free(state);
    free(red);
    for (int64_t i = 0; panel_set && i < pass_panels; i++) free(panel_set[i].rec);
    free(panel_set);
    return rc;
}
