/* plan.c: the block arithmetic of a GEMM precomputed for the tile kernels, and which bounds on
 * the block sums its preset and formats meet (the narrow, split and FMA forms need them). */
#include "driver.h"

static int fmt_man_bits(int fmt) { return fmt == MM_FMT_E4M3 ? 3 : 2; }
static int fmt_max_sig(int fmt) { return fmt == MM_FMT_E4M3 ? 15 : 7; }

/* The largest product term of a block in units of its grid: P * 2^(sh0 - d) with P the
 * significand product, sh0 = frac - man_bits_a - man_bits_b, d >= 0. */
static int64_t term_max(const mm_gemm* g) {
    const int sh0 = g->preset.frac - fmt_man_bits(g->fmt_a) - fmt_man_bits(g->fmt_b);
    const int64_t pmax = (int64_t)fmt_max_sig(g->fmt_a) * fmt_max_sig(g->fmt_b);
    return sh0 >= 0 ? pmax << sh0 : pmax;
}

/* The FMA form (the AVX-512 and AVX2 kernels) keeps a block's running sum in an fp32 of [2^23,
 * 2^24) units (kernel_avx512.h): every partial sum of C's term and the products' floors (each at
 * most one unit below the cut toward zero) must stay within 2^22 units, a block's sign bits fit
 * one sign word (cpu.h), and frac < keep, so that the keep bits can be taken at the chain's end
 * (MM_CPU_RZ_KEEP_LATE). hopper and ada: 32 * 28 801 + 2^14 < 2^20, 13 < 14. */
static int fits_rz(const mm_gemm* g) {
    const mm_preset* q = &g->preset;
    return !q->c_late && q->frac <= MM_CPU_RZ_FRAC_MAX && q->block <= MM_CPU_SIGN_SPAN &&
           MM_CPU_RZ_KEEP_LATE(q->frac, q->keep) &&
           (int64_t)q->block * (term_max(g) + 1) + ((int64_t)1 << (q->frac + 1)) <= ((int64_t)1 << 22);
}

void mm_cpu_plan_make(const mm_gemm* g, mm_cpu_plan* p) {
    const mm_preset* q = &g->preset;
    p->K = g->K;
    p->block = q->block;
    p->frac = q->frac;
    p->keep = q->keep;
    p->promote_k = q->promote_k;
    p->fast = g->fast_accum != 0;
    p->c_late = q->c_late != 0;
    p->rz = fits_rz(g);
    p->keep_mask = q->keep >= 24 ? 0xFFFFFFFFu : ~((1u << (24 - q->keep)) - 1u);
}

/* C's term is below 2^(frac + 1) (a 24-bit significand times 2^(ce - 23 - grid), ce <= E).
 * frac <= 30 is implied by the bound, and within what the kernels' exponent-add scaling needs
 * (<= 62, cpu.h). */
int mm_cpu_plan_is_narrow(const mm_gemm* g) {
    const mm_preset* q = &g->preset;
    return q->frac <= 30 && (int64_t)q->block * term_max(g) + ((int64_t)1 << (q->frac + 1)) < ((int64_t)1 << 24);
}

/* The first ceil(block/2) terms plus C's, and the rest. */
int mm_cpu_plan_fits_split(const mm_gemm* g) {
    const mm_preset* q = &g->preset;
    const int64_t h = (q->block + 1) / 2;
    return q->frac <= 30 && h * term_max(g) + ((int64_t)1 << (q->frac + 1)) < ((int64_t)1 << 31);
}
