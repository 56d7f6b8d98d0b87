/* cpu_tile_share.c: a whole GEMM's rate as a share of the in-cache tile's, in the same moments.
 *
 * The shared machines these benchmarks ran on change speed by up to 1.5x within seconds, so a
 * whole GEMM timed in one minute and the probe's tile in another say little about each other.
 * This program alternates them every few tens of milliseconds: the tile that
 * mmaemu_cpu_simd_measure times (csrc/cpu/measure.c, mm_cpu_probe_operands: one tile of the
 * kernel, K = 1 024, its operands in L2), then the whole GEMM through the driver
 * (mmaemu_gemm_cpu: decoding, threads,
 * segments), hopper fast, bf16 output, E4M3 codes at random; each pair's ratio of the GEMM's
 * GMAC/s to the tile's (times the threads) is one sample, and the median of the samples is the
 * share. Results: benchmarks/results/cpu.md ("Where the time goes").
 *
 * Reads the driver's probe through its internal header (csrc/cpu/driver.h):
 *
 *   gcc -O3 -std=c11 -ffp-contract=off -Icsrc/include -Icsrc -Icsrc/cpu benchmarks/cpu_tile_share.c \
 *       csrc/core/[a-z]*.c csrc/cpu/[a-z]*.c -pthread -lm -o /tmp/cpu_tile_share
 *   /tmp/cpu_tile_share 512 5760 1920 20 [threads] [kernel]
 *
 * kernel: avx2 (default), avx512 or portable; prints the tile's and the GEMM's best and median
 * GMAC/s and the share's median and quartiles. */
#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200809L
#undef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver.h"

enum { TILE_REPS = 300, MAX_PAIRS = 1000 };

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int by_value(const void* x, const void* y) {
    const double a = *(const double*)x, b = *(const double*)y;
    return a < b ? -1 : a > b;
}

/* Finite E4M3 codes of both signs (0x7F and 0xFF, NaN, left out), from a 64-bit LCG. */
static void random_codes(uint8_t* c, int64_t n, uint64_t seed) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        c[i] = (uint8_t)(((seed >> 33) % 0x7F) | (seed >> 63 ? 0x80 : 0));
    }
}

/* Alternates the tile and the GEMM g `pairs` times; prints the rates and the share. */
static int run_pairs(const char* simd, const mm_cpu_kernel* k, const mm_cpu_probe_set* ps, float* acc,
                     const mm_gemm* g, int pairs, int threads) {
    const mm_cpu_plan plan = mm_cpu_probe_plan();
    int rc = mmaemu_gemm_cpu(g, threads, simd); /* the first call: buffers and page faults */
    static double tile_rate[MAX_PAIRS], gemm_rate[MAX_PAIRS], share[MAX_PAIRS];
    const double tile_macs = (double)TILE_REPS * k->mr * k->w * MM_CPU_PROBE_K;
    for (int i = 0; i < pairs && !rc; i++) {
        double t0 = now_seconds();
        for (int rep = 0; rep < TILE_REPS; rep++) k->tile(&plan, &ps->o, 0, MM_CPU_PROBE_K, acc, 0);
        const double t_tile = now_seconds() - t0;
        t0 = now_seconds();
        rc = mmaemu_gemm_cpu(g, threads, simd);
        const double t_gemm = now_seconds() - t0;
        tile_rate[i] = tile_macs / t_tile * 1e-9 * threads;
        gemm_rate[i] = (double)g->M * g->N * g->K / t_gemm * 1e-9;
        share[i] = gemm_rate[i] / tile_rate[i];
    }
    if (rc) {
        fprintf(stderr, "mmaemu_gemm_cpu: %s\n", mmaemu_error_string(rc));
        return 1;
    }
    qsort(tile_rate, (size_t)pairs, sizeof(double), by_value);
    qsort(gemm_rate, (size_t)pairs, sizeof(double), by_value);
    qsort(share, (size_t)pairs, sizeof(double), by_value);
    printf("%s, %d thread(s), %lld x %lld x %lld, %d pairs: tile x threads best %.2f median %.2f GMAC/s; "
           "GEMM best %.2f median %.2f; share median %.3f (quartiles %.3f, %.3f)\n",
           k->name, threads, (long long)g->M, (long long)g->N, (long long)g->K, pairs, tile_rate[pairs - 1],
           tile_rate[pairs / 2], gemm_rate[pairs - 1], gemm_rate[pairs / 2], share[pairs / 2], share[pairs / 4],
           share[3 * pairs / 4]);
    return 0;
}

int main(int argc, char** argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s M N K pairs [threads] [kernel]\n", argv[0]);
        return 2;
    }
    const int64_t M = atoll(argv[1]), N = atoll(argv[2]), K = atoll(argv[3]);
    const int pairs = atoi(argv[4]), threads = argc > 5 ? atoi(argv[5]) : 1;
    const char* simd = argc > 6 ? argv[6] : "avx2";
    const mm_cpu_kernel* k = mm_cpu_simd_kernel(simd);
    if (M < 1 || N < 1 || K < 1 || pairs < 1 || pairs > MAX_PAIRS || threads < 1 || !k) {
        fprintf(stderr, "bad arguments, or the kernel is not available here\n");
        return 2;
    }
    mm_cpu_probe_set ps;
    if (!mm_cpu_probe_operands(k, &ps)) return 1;
    float* acc = malloc(sizeof(float) * (size_t)(k->mr * k->w));
    uint8_t *a = malloc((size_t)(M * K)), *b = malloc((size_t)(N * K));
    uint16_t* out = malloc(sizeof(uint16_t) * (size_t)(M * N));
    int status = 1;
    if (acc && a && b && out) {
        random_codes(a, M * K, 1);
        random_codes(b, N * K, 2);
        mm_gemm g;
        memset(&g, 0, sizeof g);
        g.a = a; g.b = b; g.out = out; g.lda = K; g.ldb = K; g.ldo = N; g.M = M; g.N = N; g.K = K;
        g.fmt_a = MM_FMT_E4M3; g.fmt_b = MM_FMT_E4M3; g.fast_accum = 1; g.splits = 1;
        g.out_kind = MM_OUT_BF16; g.scale_a = 1; g.scale_b = 1; g.scale_result = 1;
        g.preset = mm_preset_get(MM_PRESET_HOPPER);
        status = run_pairs(simd, k, &ps, acc, &g, pairs, threads);
    }
    mm_cpu_probe_free(&ps);
    free(acc); free(a); free(b); free(out);
    return status;
}
