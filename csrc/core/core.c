/* core.c: plan checks, error strings, the CPU's subnormal mode and the rounding mode the CPU
 * executors compute in. */
#include <fenv.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif
#include "mmaemu.h"

const char* mmaemu_error_string(int code) {
    switch (code) {
    case MM_OK: return "ok";
    case MM_ERR_ARGUMENT: return "invalid argument (size, stride, format, preset or split plan)";
    case MM_ERR_FLUSH_DENORMAL:
        return "the CPU flushes subnormal numbers to zero (torch.set_flush_denormal(True)); "
               "mmaemu refuses to run because fp32 adds would not be IEEE. "
               "Call torch.set_flush_denormal(False)";
    case MM_ERR_NO_MEMORY: return "out of memory";
    case MM_ERR_UNAVAILABLE: return "executor unavailable";
    case MM_ERR_CPU_SIMD:
        return "the SIMD kernel must be portable, avx2 or avx512 and one this CPU runs "
               "(see mmaemu._C.cpu_simd_kernels())";
    default: return "unknown error";
    }
}

int mmaemu_cpu_flushes_denormals(void) {
#if defined(__x86_64__) || defined(__i386__)
    return (_mm_getcsr() & 0x8040u) != 0; /* FTZ (bit 15) or DAZ (bit 6) */
#elif defined(__aarch64__)
    uint64_t fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    return (int)((fpcr >> 24) & 1u);
#else
    return 0;
#endif
}

int mmaemu_round_nearest(void) {
    const int mode = fegetround();
    if (mode != FE_TONEAREST) fesetround(FE_TONEAREST);
    return mode;
}

void mmaemu_round_restore(int mode) {
    if (mode != FE_TONEAREST) fesetround(mode);
}

/* 1 when the end of a [rows] x [len] operand with row stride ld and elements of esize bytes,
 * ((rows - 1) * ld + len) * esize bytes, fits in int64 (a plan beyond it cannot describe real
 * memory, and its offsets would overflow). */
static int index_fits(int64_t rows, int64_t ld, int64_t len, int64_t esize) {
    const int64_t max_index = INT64_MAX / esize;
    return len <= max_index && (rows <= 1 || ld <= (max_index - len) / (rows - 1));
}

/* The float at (rows - 1) * rs + (groups - 1) * gs, the last a block-wise plan reads of one
 * side's scales, lies at a byte offset int64 holds (strides non-negative). */
static int scale_offsets_fit(int64_t rows, int64_t rs, int64_t groups, int64_t gs) {
    const int64_t max = INT64_MAX / 4;
    if (rs < 0 || gs < 0) return 0;
    if (rows > 1 && rs > max / (rows - 1)) return 0;
    if (groups > 1 && gs > max / (groups - 1)) return 0;
    return (rows - 1) * rs <= max - (groups - 1) * gs;
}

static int blockwise_scales_fit(const mm_gemm* g) {
    const int64_t groups = (g->K + MM_BLOCKWISE_K - 1) / MM_BLOCKWISE_K;
    return scale_offsets_fit(g->M, g->sa_rs, groups, g->sa_gs) &&
           scale_offsets_fit((g->N - 1) / g->sb_gran + 1, g->sb_rs, groups, g->sb_gs);
}

int mmaemu_gemm_check(const mm_gemm* g) {
    if (!g) return MM_ERR_ARGUMENT;
    if (g->M < 0 || g->N < 0 || g->K < 0) return MM_ERR_ARGUMENT;
    if (g->M > MM_MAX_DIM || g->N > MM_MAX_DIM || g->K > MM_MAX_DIM) return MM_ERR_ARGUMENT;
    if (g->fmt_a < MM_FMT_E4M3 || g->fmt_a > MM_FMT_E5M2) return MM_ERR_ARGUMENT;
    if (g->fmt_b < MM_FMT_E4M3 || g->fmt_b > MM_FMT_E5M2) return MM_ERR_ARGUMENT;
    if (g->out_kind < MM_OUT_F32 || g->out_kind > MM_OUT_ACC) return MM_ERR_ARGUMENT;
    if (g->epilogue_order < MM_EPI_H1 || g->epilogue_order > MM_EPI_ROWWISE_MUL) return MM_ERR_ARGUMENT;
    if (g->bias_kind < MM_BIAS_NONE || g->bias_kind > MM_BIAS_F16) return MM_ERR_ARGUMENT;
    /* block-wise: no split, no bias, a 16- or 32-bit output (the kernels write bf16, fp16, fp32);
     * the row-wise epilogues write bf16 */
    if (mm_is_blockwise(g)) {
        if (g->splits != 1 || g->bias_kind != MM_BIAS_NONE || mm_out_size(g->out_kind) == 1) return MM_ERR_ARGUMENT;
        if (g->sb_gran != 1 && g->sb_gran != MM_BLOCKWISE_K) return MM_ERR_ARGUMENT;
    } else if (g->epilogue_order >= MM_EPI_ROWWISE && g->out_kind != MM_OUT_BF16 && g->out_kind != MM_OUT_ACC) {
        return MM_ERR_ARGUMENT;
    }
    if (g->scheme < MM_SCHEME_NONE || g->scheme > MM_SCHEME_PAIRWISE) return MM_ERR_ARGUMENT;
    if (g->splits < 1 || g->splits > MM_MAX_SPLITS) return MM_ERR_ARGUMENT;
    if (g->preset.block < 1 || g->preset.block > MM_MAX_BLOCK) return MM_ERR_ARGUMENT;
    /* a promotion interval ends on a block boundary: a whole, positive number of blocks */
    if (g->preset.promote_k < g->preset.block || g->preset.promote_k % g->preset.block != 0)
        return MM_ERR_ARGUMENT;
    if (g->preset.frac < 0 || g->preset.frac > MM_MAX_FRAC || g->preset.keep < 1 || g->preset.keep > MM_MAX_KEEP)
        return MM_ERR_ARGUMENT;
    if (g->preset.c_late != 0 && g->preset.c_late != 1) return MM_ERR_ARGUMENT;
    if (g->preset.split_rr_tile < 0 || g->preset.split_rr_tile > MM_MAX_SPLIT_RR_TILE) return MM_ERR_ARGUMENT;
    if (g->M > 0 && g->N > 0) {
        if (!g->out || g->ldo < 0) return MM_ERR_ARGUMENT;
        if (g->epilogue_order >= MM_EPI_ROWWISE && (!g->scale_a_vec || !g->scale_b_vec))
            return MM_ERR_ARGUMENT;
        if (mm_is_blockwise(g) && g->K > 0 && !blockwise_scales_fit(g)) return MM_ERR_ARGUMENT;
        if (g->bias_kind != MM_BIAS_NONE && !g->bias) return MM_ERR_ARGUMENT;
        if (g->K > 0 && (!g->a || !g->b || g->lda < 0 || g->ldb < 0)) return MM_ERR_ARGUMENT;
        if (!index_fits(g->M, g->ldo, g->N, mm_out_size(g->out_kind))) return MM_ERR_ARGUMENT;
        if (g->K > 0 && (!index_fits(g->M, g->lda, g->K, 1) || !index_fits(g->N, g->ldb, g->K, 1)))
            return MM_ERR_ARGUMENT;
    }
    return MM_OK;
}
