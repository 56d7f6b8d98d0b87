/* gemm.c: mmaemu_gemm_cpu, the `cpu` executor: the same bits as mmaemu_gemm_reference, fast
 * (driver.h says how). The caller names the narrow kernel (portable, avx2, avx512); the preset
 * decides which form of it computes the sums exactly: its narrow tiles where every block sum
 * stays below 2^24 (hopper, ada), its split tiles (AVX2, AVX-512) where each half block stays
 * below 2^31 (b200), else the wide kernel (plain C, int64 sums, any preset). */
#include <stdlib.h>

#include "driver.h"

static int gemm_cpu(const mm_gemm* g, int threads, const char* simd) {
    int rc = mmaemu_gemm_check(g);
    if (rc != MM_OK) return rc;
    if (mmaemu_cpu_flushes_denormals()) return MM_ERR_FLUSH_DENORMAL;
    const mm_cpu_kernel* narrow = mm_cpu_simd_kernel(simd);
    if (!narrow) return MM_ERR_CPU_SIMD;
    if (g->M == 0 || g->N == 0) return MM_OK;
    /* K = 0: every output is the epilogue of +0, and the operands may be NULL. */
    if (g->K == 0) return mmaemu_gemm_reference(g);

    mm_cpu_job* job = calloc(1, sizeof(mm_cpu_job));
    if (!job) return MM_ERR_NO_MEMORY;
    job->g = g;
    job->join = mm_cpu_join_for(simd);
    fegetenv(&job->fenv);
    mm_cpu_plan_make(g, &job->plan);
    if (mm_cpu_plan_is_narrow(g) && !g->preset.c_late) { /* a late C: the split and wide kernels */
        job->kern = narrow;
        job->tile = narrow->tile;
    } else if (narrow->tile_split && mm_cpu_plan_fits_split(g)) {
        job->kern = narrow;
        job->tile = narrow->tile_split;
    } else {
        job->kern = &mm_cpu_kernel_wide;
        job->tile = mm_cpu_kernel_wide.tile;
    }
    job->signs = job->kern->rz_signs && job->tile == job->kern->tile && job->plan.rz;
    job->plan.sign_paired = job->signs && job->kern->rz_paired && job->plan.block == 16;
    const int mr = job->kern->mr, w = job->kern->w;
    const int whole = (int64_t)4 * mm_cpu_panel_words(g->K, w, job->signs) <= MM_CPU_PANEL_BUDGET &&
                      (int64_t)4 * mm_cpu_a_stride(g->K) * mr <= MM_CPU_A_BUDGET;
    /* The round-robin split layout runs on whole-K tiles (tile.c); a K too long
     * for the decode budgets with it is computed by the reference (no streamed form yet). */
    if (!whole && g->splits > 1 && g->preset.split_rr_tile > 0) {
        free(job);
        return mmaemu_gemm_reference(g);
    }
    /* Block-wise groups of 128 k are chained by the kernel a group at a time: a preset whose
     * blocks do not tile a group (none known) is computed by the reference. */
    const int blockwise = mm_is_blockwise(g);
    if (blockwise && MM_BLOCKWISE_K % g->preset.block != 0) {
        free(job);
        return mmaemu_gemm_reference(g);
    }
    /* A streamed split state resumes on a block boundary (fast: one chain) or on a promotion
     * interval boundary (its chain restarts there); a segment holds at least one. A block-wise
     * state, the joined accumulator, resumes on a group boundary. */
    const int64_t unit = blockwise ? MM_BLOCKWISE_K
                       : job->plan.fast ? g->preset.block : (int64_t)g->preset.promote_k;
    int64_t kc = MM_CPU_STREAM_CHUNK; /* within both budgets, whole units */
    const int64_t panel_k = mm_cpu_panel_k_within(MM_CPU_PANEL_BUDGET / 4, w, job->signs);
    const int64_t a_k = mm_cpu_a_k_within(MM_CPU_A_BUDGET / (4 * mr));
    if (kc > panel_k) kc = panel_k;
    if (kc > a_k) kc = a_k;
    /* A large GEMM whose tiles over all of K outgrow L2 in short segments (passes.c), so a
     * row chunk's A stays in L2 (not the round-robin split layout: whole-K tiles only) */
    const int rr = g->splits > 1 && g->preset.split_rr_tile > 0;
    const int l2_segments = whole && !rr && g->K >= 2 * MM_CPU_SEG_K && g->M >= MM_CPU_SEG_MIN_M &&
                            !mm_cpu_whole_k_fits_l2(g->K, mr, w, job->signs);
    if (l2_segments) kc = MM_CPU_SEG_K;
    kc = kc / unit * unit;
    if (kc < unit) kc = unit;
    if (!whole && ((int64_t)4 * mm_cpu_panel_words(kc, w, job->signs) > MM_CPU_PANEL_BUDGET ||
                   (int64_t)4 * mm_cpu_a_stride(kc) * mr > MM_CPU_A_BUDGET)) {
        /* Without fast accumulation, a promotion interval beyond the budgets (no known preset):
         * the reference, in the operands' memory. */
        free(job);
        return mmaemu_gemm_reference(g);
    }
    mm_cpu_lut lut_a;
    mm_cpu_lut_make(&lut_a, g->fmt_a, job->kern->a_bias, job->kern->e_code, job->signs);
    mm_cpu_lut_make(&job->lut_b, g->fmt_b, 0, job->kern->e_code, 0);
    if (threads < 1) threads = 1;
    /* Small problems are not worth a thread start. */
    if ((double)g->M * (double)g->N * (double)(g->K + 1) < (double)(1 << 18)) threads = 1;
    if (threads > MM_CPU_MAX_THREADS) threads = MM_CPU_MAX_THREADS; /* mm_cpu_run_pass: no more than items */
    const int segmented = !whole || l2_segments;
    job->klen = segmented ? kc : g->K;
    job->bufs = calloc((size_t)threads, sizeof(mm_cpu_buffers));
    job->nbufs = job->bufs ? threads : 0;
    rc = !job->bufs   ? MM_ERR_NO_MEMORY
         : segmented ? mm_cpu_run_segments(job, &lut_a, kc, unit, threads)
                     : mm_cpu_run_whole(job, &lut_a, threads);
    mm_cpu_buffers_free(job);
    free(job);
    return rc;
}

int mmaemu_gemm_cpu(const mm_gemm* g, int threads, const char* simd) {
    const int mode = mmaemu_round_nearest(); /* the workers take this environment (job->fenv) */
    const int rc = gemm_cpu(g, threads, simd);
    mmaemu_round_restore(mode);
    return rc;
}
