/* cpu_kernel_portable.c: the narrow tile kernel in plain C.
 *
 * This is the readable form of the AVX2 and AVX-512 kernels: the same steps, one lane at a
 * time. It is the `portable` SIMD path and the model the SIMD kernels are checked against.
 *
 * Narrow arithmetic (mm_cpu_plan_is_narrow in cpu_fast.c): every block sum S fits 24 bits, so
 *  - a product term is (|s_a * s_b| >> ((E - e) + prod_shift)) with the product's sign: the
 *    exact significand product cut toward zero to the grid 2^(E - frac) (mm_block step 3);
 *  - C's term is its 24-bit significand shifted right by (E - ce) + c_shift, with C's sign;
 *  - (float)S is exact; clearing its low mantissa bits keeps `keep` leading bits (step 5),
 *    and adding grid to the exponent field gives S * 2^grid, exactly mm_compose_f32's value
 *    whenever that exponent stays normal (otherwise mm_cpu_compose computes it). */
#include "cpu_fast.h"

enum { MR = 2, W = 16 };

/* The 16-bit significand stored in a B panel's s word. */
static inline int32_t panel_sig(int32_t w) { return ((w & 0xFFFF) ^ 0x8000) - 0x8000; }

/* x >> n for n >= 0, 0 once every bit is shifted out (as vpsrlvd does). */
static inline uint32_t shr(uint32_t x, int32_t n) { return n > 31 ? 0u : x >> n; }

/* The exponent C brings to the block maximum: max(floor(log2|C|), -126), or none for +-0. */
static inline int32_t c_exponent(uint32_t cb) {
    if ((cb & 0x7FFFFFFFu) == 0) return MM_CPU_ZERO_C_EXP;
    const int32_t field = (int32_t)((cb >> 23) & 0xFFu);
    return (field ? field : 1) - 127;
}

static inline uint32_t compose(int32_t S, int32_t grid, const mm_cpu_plan* p) {
    if (S == 0) return 0u;
    if (grid < -126 || grid > 104) return mm_cpu_compose(S, grid, p->keep);
    return (mm_f32_bits((float)S) & p->keep_mask) + ((uint32_t)grid << 23);
}

/* One block of n products, k in [kb, kb + n), for the whole tile; c (fp32 bits) is the
 * incoming accumulator of each output and receives the block result. */
static void block(const mm_cpu_plan* p, const int32_t* a, int64_t as, const int32_t* b,
                  int64_t kb, int n, uint32_t c[MR][W]) {
    int32_t E[MR][W], S[MR][W];
    for (int r = 0; r < MR; r++)
        for (int l = 0; l < W; l++) E[r][l] = c_exponent(c[r][l]);
    /* Pass 1: the block's largest alignment exponent. */
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
    /* Pass 2: C's term, then every product's term, cut to the grid and summed exactly. */
    for (int r = 0; r < MR; r++)
        for (int l = 0; l < W; l++) {
            const uint32_t cb = c[r][l];
            const uint32_t cm = (cb & 0x7FFFFFu) | ((cb & 0x7F800000u) ? 0x800000u : 0u);
            const int32_t t = (int32_t)shr(cm, E[r][l] - c_exponent(cb) + p->c_shift);
            S[r][l] = (cb >> 31) ? -t : t;
        }
    for (int64_t k = kb; k < kb + n; k++) {
        const int32_t* bk = b + k * 2 * W;
        for (int r = 0; r < MR; r++) {
            const int32_t ea = a[r * as + 2 * k], sa = a[r * as + 2 * k + 1];
            for (int l = 0; l < W; l++) {
                const int32_t prod = sa * panel_sig(bk[W + l]);
                const int32_t cnt = E[r][l] + p->prod_shift - (ea + bk[l]);
                const int32_t t = (int32_t)shr((uint32_t)(prod < 0 ? -prod : prod), cnt);
                S[r][l] += prod < 0 ? -t : t;
            }
        }
    }
    for (int r = 0; r < MR; r++)
        for (int l = 0; l < W; l++) c[r][l] = compose(S[r][l], E[r][l] - p->frac, p);
}

/* Blocks over [k0, k1) from C = +0 (mm_chain). */
static void chain(const mm_cpu_plan* p, const int32_t* a, int64_t as, const int32_t* b,
                  int64_t k0, int64_t k1, uint32_t c[MR][W]) {
    for (int r = 0; r < MR; r++)
        for (int l = 0; l < W; l++) c[r][l] = 0u;
    for (int64_t k = k0; k < k1; k += p->block)
        block(p, a, as, b, k, (int)(k1 - k < p->block ? k1 - k : p->block), c);
}

/* mm_split_acc for the tile. */
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

const mm_cpu_kernel mm_cpu_kernel_portable = {"portable", MR, W, tile};
