/* kernel_portable.c: the narrow tile kernel in plain C.
 *
 * This is the readable form of the AVX2 kernel and of the AVX-512 kernel's split form: the same
 * steps (cpu.h has the block formula), one lane at a time, and the `portable` SIMD path.
 * The AVX-512 narrow form reaches the same S by other steps (an FMA per product that floors, and
 * a count of where floor and the cut toward zero differ: its file says why that is S). The lane loops are
 * simple enough for a compiler to vectorise on any ISA (int16 max, fp32 multiply, fp32 -> int32
 * truncation, int32 add).
 *
 * Narrow: every block sum S is below 2^24 in magnitude (the driver checks the preset), so S
 * fits int32, (float)S is exact, and clearing its low mantissa bits keeps `keep` leading bits;
 * adding grid to its exponent field gives S * 2^grid, mm_compose_f32's value, whenever that
 * exponent stays normal (otherwise mm_cpu_compose computes it). */
#include "cpu.h"

enum { MR = 2, W = 16, STRIDE = MM_CPU_PANEL_STRIDE(W) };

static inline uint32_t compose(int32_t S, int32_t grid, const mm_cpu_plan* p) {
    if (S == 0) return 0u;
    if (grid < MM_CPU_GRID_MIN || grid > MM_CPU_GRID_MAX_NARROW) return mm_cpu_compose(S, grid, p->keep);
    return (mm_f32_bits((float)S) & p->keep_mask) + ((uint32_t)grid << 23);
}

/* One block of n products, k in [kb, kb + n), for the whole tile; c (fp32 bits) is the
 * incoming accumulator of each output and receives the block result. */
static void block(const mm_cpu_plan* p, const int32_t* a, int64_t as, const int32_t* b,
                  int64_t kb, int n, uint32_t c[MR][W]) {
    int16_t E16[MR][W];
    int32_t E[MR][W], S[MR][W];
    float s[MR][W];
    /* Pass 1: the products' largest alignment exponent (in int16: every sum of two exponents
     * fits), then C's. */
    for (int r = 0; r < MR; r++)
        for (int l = 0; l < W; l++) E16[r][l] = INT16_MIN;
    for (int64_t k = kb; k < kb + n; k++) {
        const mm_cpu_i8* eb = (const mm_cpu_i8*)(const void*)(b + k * STRIDE);
        for (int r = 0; r < MR; r++) {
            const int16_t ea = (int16_t)mm_cpu_a_exp(a[r * as + MM_CPU_A_WORDS * k]);
            for (int l = 0; l < W; l++) {
                const int16_t e = (int16_t)(ea + eb[l]);
                E16[r][l] = e > E16[r][l] ? e : E16[r][l];
            }
        }
    }
    for (int r = 0; r < MR; r++)
        for (int l = 0; l < W; l++) {
            const int32_t ce = mm_cpu_c_exponent(c[r][l]);
            E[r][l] = E16[r][l] > ce ? E16[r][l] : ce;
        }
    /* Pass 2: every term cut toward zero to the grid, summed exactly. */
    for (int r = 0; r < MR; r++)
        for (int l = 0; l < W; l++) {
            s[r][l] = mm_cpu_scale(E[r][l], p->frac);
            S[r][l] = (int32_t)(mm_bits_f32(c[r][l]) * s[r][l]);
        }
    for (int64_t k = kb; k < kb + n; k++) {
        const mm_cpu_f32* vb = mm_cpu_cvalues(b + k * STRIDE + MM_CPU_PANEL_V(W));
        for (int r = 0; r < MR; r++) {
            const float va = mm_bits_f32((uint32_t)a[r * as + MM_CPU_A_WORDS * k + MM_CPU_A_V]);
            for (int l = 0; l < W; l++) S[r][l] += (int32_t)((va * vb[l]) * s[r][l]);
        }
    }
    for (int r = 0; r < MR; r++)
        for (int l = 0; l < W; l++) c[r][l] = compose(S[r][l], E[r][l] - p->frac, p);
}

#include "kernel_chain.h"

const mm_cpu_kernel mm_cpu_kernel_portable = {"portable", MR, W, MR, tile, 0, 0, MM_CPU_E_SIGNED, MM_CPU_BYTES_PLAIN, 0, 0};
