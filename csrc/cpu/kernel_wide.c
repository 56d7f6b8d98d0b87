/* kernel_wide.c: the tile kernel for any preset the plan checks accept.
 *
 * The narrow kernels need every block sum below 2^24. Presets with more grid bits (b200:
 * frac 25, so one product term alone reaches 2^27) or parameters not known yet take this
 * kernel: the same block formula (cpu.h) with the scaling and truncation in fp64 and
 * int64 sums, exact for every preset mmaemu_gemm_check accepts (frac <= 30, block <= 64:
 * a term is below 2^32, a sum below 2^39; fp64 holds a product times a power of two exactly).
 * The result is composed by mm_cpu_compose, i.e. the header's mm_compose_f32. Presets with a
 * late C (c_late: C stays out of the block and is added to its result in fp32 RN-even, as
 * mm_block does) also run here. */
#include "cpu.h"

enum { MR = 2, W = 16, STRIDE = MM_CPU_PANEL_STRIDE(W) };

static void block(const mm_cpu_plan* p, const int32_t* a, int64_t as, const int32_t* b,
                  int64_t kb, int n, uint32_t c[MR][W]) {
    int32_t E[MR][W];
    int64_t S[MR][W];
    double s[MR][W];
    for (int r = 0; r < MR; r++)
        for (int l = 0; l < W; l++)
            E[r][l] = p->c_late ? MM_CPU_ZERO_C_EXP : mm_cpu_c_exponent(c[r][l]);
    for (int64_t k = kb; k < kb + n; k++) {
        const mm_cpu_i8* eb = (const mm_cpu_i8*)(const void*)(b + k * STRIDE);
        for (int r = 0; r < MR; r++) {
            const int32_t ea = mm_cpu_a_exp(a[r * as + MM_CPU_A_WORDS * k]);
            for (int l = 0; l < W; l++) {
                const int32_t e = ea + eb[l];
                E[r][l] = e > E[r][l] ? e : E[r][l];
            }
        }
    }
    for (int r = 0; r < MR; r++)
        for (int l = 0; l < W; l++) {
            s[r][l] = (double)mm_cpu_scale(E[r][l], p->frac);
            S[r][l] = p->c_late ? 0 : (int64_t)((double)mm_bits_f32(c[r][l]) * s[r][l]);
        }
    for (int64_t k = kb; k < kb + n; k++) {
        const mm_cpu_f32* vb = mm_cpu_cvalues(b + k * STRIDE + MM_CPU_PANEL_V(W));
        for (int r = 0; r < MR; r++) {
            const float va = mm_bits_f32((uint32_t)a[r * as + MM_CPU_A_WORDS * k + MM_CPU_A_V]);
            for (int l = 0; l < W; l++) S[r][l] += (int64_t)((double)(va * vb[l]) * s[r][l]);
        }
    }
    for (int r = 0; r < MR; r++)
        for (int l = 0; l < W; l++) {
            const uint32_t d = mm_cpu_compose(S[r][l], E[r][l] - p->frac, p->keep);
            /* A late C: one fp32 add, as mm_block (+0 + -0 gives +0 there as here). */
            c[r][l] = p->c_late ? mm_f32_bits(mm_bits_f32(d) + mm_bits_f32(c[r][l])) : d;
        }
}

#include "kernel_chain.h"

const mm_cpu_kernel mm_cpu_kernel_wide = {"wide", MR, W, MR, tile, 0, 0, MM_CPU_E_SIGNED, MM_CPU_BYTES_PLAIN, 0, 0};
