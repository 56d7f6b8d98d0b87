/* measure.c: the narrow kernels' speed on this machine, measured when asked
 * (mmaemu_cpu_simd_measure): MAC/s on one thread over full tiles of a hopper fast E4M3 GEMM, a
 * 1024-k panel in L1/L2. The caller decides what to make of them; the GEMM path never times. */
#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200809L
#undef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#endif
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver.h"

enum { ROUNDS = 7, REPS = 8, ACC_FLOATS = 4096, MAX_KERNELS = 8 };

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void mm_cpu_probe_free(mm_cpu_probe_set* ps) {
    free(ps->a);
    free(ps->panel.rec);
}

int mm_cpu_probe_operands(const mm_cpu_kernel* k, mm_cpu_probe_set* ps) {
    memset(ps, 0, sizeof *ps);
    uint8_t* codes = malloc((size_t)(k->mr > k->w ? k->mr : k->w) * MM_CPU_PROBE_K);
    ps->a = mm_cpu_alloc_lines(sizeof(int32_t) * (size_t)(mm_cpu_a_stride(MM_CPU_PROBE_K) * k->mr));
    if (!codes || !ps->a || !mm_cpu_panel_alloc(&ps->panel, MM_CPU_PROBE_K, k->w, k->rz_signs)) {
        free(codes);
        mm_cpu_probe_free(ps);
        return 0;
    }
    mm_cpu_lut lut;
    mm_gemm g;
    uint8_t special[64];
    memset(&g, 0, sizeof g);
    g.M = k->mr;
    g.N = k->w;
    g.a = g.b = codes;
    g.lda = g.ldb = MM_CPU_PROBE_K;
    for (int r = 0; r < k->mr; r++)
        for (int64_t kk = 0; kk < MM_CPU_PROBE_K; kk++)
            codes[r * MM_CPU_PROBE_K + kk] = (uint8_t)(((kk * 7 + r) % 9 + 3) << 3 | (kk % 8) | (kk & 1 ? 0x80 : 0));
    mm_cpu_lut_make(&lut, MM_FMT_E4M3, k->a_bias, k->e_code, k->rz_signs);
    memset(special, 0, sizeof special);
    mm_cpu_decode_a(&g, &lut, 0, k->mr, 0, MM_CPU_PROBE_K, ps->a, special);
    for (int c = 0; c < k->w; c++)
        for (int64_t kk = 0; kk < MM_CPU_PROBE_K; kk++)
            codes[c * MM_CPU_PROBE_K + kk] = (uint8_t)(((kk * 5 + c) % 11 + 3) << 3 | (c % 8) | (c & 1 ? 0 : 0x80));
    mm_cpu_lut_make(&lut, MM_FMT_E4M3, 0, k->e_code, 0);
    mm_cpu_decode_b_panel(&g, &lut, 0, k->w, k->byte_order, 0, 0, MM_CPU_PROBE_K, &ps->panel, special);
    free(codes);
    ps->o = (mm_cpu_operands){ps->a, mm_cpu_a_stride(MM_CPU_PROBE_K), k->mr, k->mr, ps->panel.rec, ps->panel.sign};
    return 1;
}

mm_cpu_plan mm_cpu_probe_plan(void) {
    mm_gemm g;
    memset(&g, 0, sizeof g);
    g.K = MM_CPU_PROBE_K;
    g.fmt_a = g.fmt_b = MM_FMT_E4M3;
    g.fast_accum = 1;
    g.preset = mm_preset_get(MM_PRESET_HOPPER);
    mm_cpu_plan plan;
    memset(&plan, 0, sizeof plan);
    mm_cpu_plan_make(&g, &plan);
    return plan;
}

int mmaemu_cpu_simd_measure(double* rates, int n) {
    if (!rates || n < 0) return MM_ERR_ARGUMENT;
    if (n > mmaemu_cpu_simd_count()) n = mmaemu_cpu_simd_count();
    if (n > MAX_KERNELS) n = MAX_KERNELS;
    const mm_cpu_plan plan = mm_cpu_probe_plan();
    const mm_cpu_kernel* kern[MAX_KERNELS] = {0};
    mm_cpu_probe_set set[MAX_KERNELS];
    double best[MAX_KERNELS];
    float acc[ACC_FLOATS];
    for (int i = 0; i < n; i++) {
        mm_cpu_simd_info info;
        mmaemu_cpu_simd_info(i, &info);
        memset(&set[i], 0, sizeof set[i]);
        best[i] = 0.0;
        kern[i] = mm_cpu_simd_kernel(info.name);
        if (kern[i] && kern[i]->mr * kern[i]->w <= ACC_FLOATS && mm_cpu_probe_operands(kern[i], &set[i])) best[i] = 1e30;
    }
    /* Rounds alternate the kernels, so a busy moment of the machine slows all of them; the best
     * round of each counts. */
    for (int round = 0; round < ROUNDS; round++)
        for (int i = 0; i < n; i++) {
            if (best[i] == 0.0) continue;
            const double t0 = now_seconds();
            for (int rep = 0; rep < REPS; rep++) kern[i]->tile(&plan, &set[i].o, 0, MM_CPU_PROBE_K, acc, 0);
            const double t = now_seconds() - t0;
            if (t < best[i]) best[i] = t;
        }
    for (int i = 0; i < n; i++) {
        const int timed = best[i] > 0.0 && best[i] < 1e30;
        rates[i] = timed ? (double)REPS * kern[i]->mr * kern[i]->w * MM_CPU_PROBE_K / best[i] : 0.0;
        mm_cpu_probe_free(&set[i]);
    }
    return MM_OK;
}
