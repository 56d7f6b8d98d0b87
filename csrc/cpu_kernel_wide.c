/* cpu_kernel_wide.c: the tile kernel for any preset the plan checks accept.
 *
 * The narrow kernels need every block sum below 2^24. Presets with more grid bits (b200:
 * frac 25, so one product term alone reaches 2^27) or parameters not known yet take this
 * kernel: the same two passes over each block, with int64 sums and the header's own
 * mm_shift_trunc / mm_compose_f32, so it is exact for frac <= 30, keep <= 40, block <= 64
 * (terms below 2^35, sums below 2^42). Plain C; compilers vectorise the lane loops. */
#include "cpu_fast.h"

enum { MR = 2, W = 16 };

static inline int32_t panel_sig(int32_t w) { return ((w & 0xFFFF) ^ 0x8000) - 0x8000; }

static inline int32_t c_exponent(uint32_t cb) {
    if ((cb & 0x7FFFFFFFu) == 0) return MM_CPU_ZERO_C_EXP;
    const int32_t field = (int32_t)((cb >> 23) & 0xFFu);
    return (field ? field : 1) - 127;
}

static void block(const mm_cpu_plan* p, const int32_t* a, int64_t as, const int32_t* b,
                  int64_t kb, int n, uint32_t c[MR][W]) {
    int32_t E[MR][W];
    int64_t S[MR][W];
    for (int r = 0; r < MR; r++)
        for (int l = 0; l < W; l++) E[r][l] = c_exponent(c[r][l]);
    for (int64_t k = kb; k < kb + n; k++) {
        const int32_t* bk = b + k * 2 * W;
        for (int r = 0; r < MR; r++) {
            const int32_t ea = a[r * as + 2 * k];
            for (int l = 0; l < W; l++) {
                const int32_t e = ea + bk[l];
                E[r][l] = e > E[r][l] ? e : E[r][l];
            }
        }
    }
    for (int r = 0; r < MR; r++)
        for (int l = 0; l < W; l++) {
            const uint32_t cb = c[r][l];
            const uint64_t cm = (cb & 0x7FFFFFu) | ((cb & 0x7F800000u) ? 0x800000u : 0u);
            const int32_t grid = E[r][l] - p->frac;
            const int64_t t = (int64_t)mm_shift_trunc(cm, c_exponent(cb) - 23 - grid);
            S[r][l] = (cb >> 31) ? -t : t;
        }
    for (int64_t k = kb; k < kb + n; k++) {
        const int32_t* bk = b + k * 2 * W;
        for (int r = 0; r < MR; r++) {
            const int32_t ea = a[r * as + 2 * k], sa = a[r * as + 2 * k + 1];
            for (int l = 0; l < W; l++) {
                const int32_t prod = sa * panel_sig(bk[W + l]); /* P << 16 */
                const uint64_t P = (uint64_t)(prod < 0 ? -prod : prod) >> 16;
                const int32_t d = E[r][l] - (ea + bk[l]);
                const int64_t t = (int64_t)mm_shift_trunc(P, p->sh0 - d);
                S[r][l] += prod < 0 ? -t : t;
            }
        }
    }
    for (int r = 0; r < MR; r++)
        for (int l = 0; l < W; l++) c[r][l] = mm_cpu_compose(S[r][l], E[r][l] - p->frac, p->keep);
}

static void chain(const mm_cpu_plan* p, const int32_t* a, int64_t as, const int32_t* b,
                  int64_t k0, int64_t k1, uint32_t c[MR][W]) {
    for (int r = 0; r < MR; r++)
        for (int l = 0; l < W; l++) c[r][l] = 0u;
    for (int64_t k = k0; k < k1; k += p->block)
        block(p, a, as, b, k, (int)(k1 - k < p->block ? k1 - k : p->block), c);
}

static void tile(const mm_cpu_plan* p, const int32_t* a, int64_t as, const int32_t* b,
                 int64_t k0, int64_t k1, float* acc) {
    uint32_t c[MR][W];
    if (p->fast) {
        chain(p, a, as, b, k0, k1, c);
        for (int r = 0; r < MR; r++)
            for (int l = 0; l < W; l++) acc[r * W + l] = mm_bits_f32(c[r][l]);
        return;
    }
    const int64_t interval = (int64_t)p->block * p->promote_blocks;
    for (int i = 0; i < MR * W; i++) acc[i] = 0.0f;
    for (int64_t k = k0; k < k1; k += interval) {
        chain(p, a, as, b, k, k1 - k < interval ? k1 : k + interval, c);
        for (int r = 0; r < MR; r++)
            for (int l = 0; l < W; l++) acc[r * W + l] = acc[r * W + l] + mm_bits_f32(c[r][l]);
    }
}

const mm_cpu_kernel mm_cpu_kernel_wide = {"wide", MR, W, tile};
