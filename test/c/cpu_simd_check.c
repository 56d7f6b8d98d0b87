/* cpu_simd_check.c: the `cpu` backend against the reference on random GEMMs, in C.
 *
 * test_cpu_backend.py builds it with -DMMAEMU_EMULATE_AVX512 against SIMDe's portable
 * intrinsics, which runs the AVX-512 kernel on CPUs without AVX-512. Every SIMD path the
 * build can run is compared bit for bit with mmaemu_gemm_reference, with 1 and 2 threads, over
 * random shapes, formats, presets (and random preset parameters), accumulation modes, splits,
 * epilogues and output kinds, with zeros, subnormals, NaN and Inf among the codes, some GEMMs under
 * a random C rounding mode (which must change no bit) and with a row of A all +-0. Then every
 * pair of codes (both formats each side) as the second product of a block under a dominant first
 * product of several sizes and signs, alone and joined by the first block's result as C: each
 * product's cut toward zero at every grid offset and sign, which the FMA form's floors of
 * enlarged products and count of negative products (AVX-512, AVX2) must match (pairs_check).
 * Usage: cpu_simd_check [iterations] [seed]. Prints "<n> iterations, <f> failures; ...". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fenv.h>

#include "mmaemu.h"

static uint64_t rng_state;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* A random FP8 code; special = 1 allows NaN/Inf codes. Zeros and subnormals are frequent. */
static uint8_t random_code(int fmt, int special) {
    uint8_t c = (uint8_t)rnd();
    const int r = (int)(rnd() % 100);
    if (!special && fmt == MM_FMT_E4M3 && (c & 0x7F) == 0x7F) c ^= 1;
    if (!special && fmt == MM_FMT_E5M2 && (c & 0x7C) == 0x7C) c &= (uint8_t)~0x40;
    if (r < 10) c &= 0x87;
    else if (r < 15) c = (rnd() & 1) ? 0x80 : 0;
    return c;
}

/* Compares every path (1 thread) with the reference on g; returns the number of mismatches
 * and counts the paths that ran. */
static int compare_paths(mm_gemm* g, const char* const* paths, int* ran, const char* what) {
    const size_t bytes = (size_t)(g->M * g->N) * 4;
    uint32_t* ref = calloc(1, bytes);
    uint32_t* out = calloc(1, bytes);
    int failures = 0;
    g->out = ref;
    if (!ref || !out || mmaemu_gemm_reference(g) != MM_OK) {
        printf("reference failed\n");
        exit(2);
    }
    for (int pi = 0; pi < 3; pi++) {
        memset(out, 0xAB, bytes);
        g->out = out;
        const int rc = mmaemu_gemm_cpu(g, 1, paths[pi]);
        if (rc == MM_ERR_CPU_SIMD) continue;
        if (rc != MM_OK) {
            printf("cpu backend failed: %s\n", mmaemu_error_string(rc));
            exit(2);
        }
        ran[pi]++;
        if (memcmp(ref, out, bytes) == 0) continue;
        failures++;
        printf("mismatch: %s path %s\n", what, paths[pi]);
    }
    free(ref);
    free(out);
    return failures;
}

/* Rows i and columns j hold code i and code j at k = 1 and k = block (the second block: C is the
 * first block's result) after a dominant code at k = 0, zeros elsewhere; hopper and ada, with
 * and without fast accumulation, the raw accumulator out. */
static int pairs_check(const char* const* paths, int* ran) {
    /* per format: the largest finite, 2.0, the smallest normal, zero; alternate signs */
    static const uint8_t dom[2][4] = {{0x7E, 0xC0, 0x08, 0x00}, {0x7B, 0xC0, 0x04, 0x00}};
    int failures = 0;
    for (int fa = 0; fa < 2; fa++)
        for (int fb = 0; fb < 2; fb++)
            for (int preset = MM_PRESET_HOPPER; preset <= MM_PRESET_ADA; preset++)
                for (int fast = 0; fast < 2; fast++)
                    for (int d = 0; d < 4; d++) {
                        mm_gemm g;
                        memset(&g, 0, sizeof g);
                        g.preset = mm_preset_get(preset);
                        g.M = g.N = 256;
                        g.K = 2 * g.preset.block;
                        g.lda = g.ldb = g.K;
                        g.ldo = g.N;
                        g.out_kind = MM_OUT_ACC;
                        g.fmt_a = fa;
                        g.fmt_b = fb;
                        g.fast_accum = fast;
                        g.splits = 1;
                        g.scheme = MM_SCHEME_NONE;
                        g.scale_a = g.scale_b = 1.0f;
                        uint8_t* a = calloc((size_t)(g.M * g.K), 1);
                        uint8_t* b = calloc((size_t)(g.N * g.K), 1);
                        for (int64_t i = 0; i < 256; i++) {
                            a[i * g.K] = dom[fa][d];
                            b[i * g.K] = (uint8_t)(dom[fb][d] ^ (d & 1 ? 0x80 : 0)); /* d = 1: negative */
                            a[i * g.K + 1] = b[i * g.K + 1] = (uint8_t)i;
                            a[i * g.K + g.preset.block] = b[i * g.K + g.preset.block] = (uint8_t)i;
                        }
                        g.a = a;
                        g.b = b;
                        char what[96];
                        snprintf(what, sizeof what, "pairs fmt %d/%d preset %d fast %d dominant %d", fa, fb,
                                 preset, fast, d);
                        failures += compare_paths(&g, paths, ran, what);
                        free(a);
                        free(b);
                    }
    return failures;
}

int main(int argc, char** argv) {
    const int iters = argc > 1 ? atoi(argv[1]) : 200;
    rng_state = argc > 2 ? strtoull(argv[2], NULL, 10) : 88172645463325252ull;
    if (!rng_state) rng_state = 1;
    const char* paths[] = {"portable", "avx2", "avx512"};
    int failures = 0, ran[3] = {0, 0, 0};
    /* The caller's rounding mode changes no bit (both backends compute in round to nearest),
     * and a GEMM leaves it as it was (the AVX2 kernel's FMA form sets MXCSR's): every fourth
     * GEMM runs under a random one, the reference once more under round to nearest. */
    static const int modes[] = {FE_TONEAREST, FE_DOWNWARD, FE_UPWARD, FE_TOWARDZERO};
    for (int it = 0; it < iters; it++) {
        const int caller_mode = modes[it % 4 == 3 ? rnd() % 4 : 0];
        fesetround(caller_mode);
        mm_gemm g;
        memset(&g, 0, sizeof g);
        g.M = 1 + (int64_t)(rnd() % (rnd() % 4 ? 13 : 40)); /* AVX-512 tiles: up to 16 rows */
        g.N = 1 + (int64_t)(rnd() % 70);
        g.K = (int64_t)(rnd() % 300);
        if (rnd() % 4 == 0) g.K = (int64_t)(rnd() % 1200);
        g.fmt_a = (int32_t)(rnd() % 2);
        g.fmt_b = (int32_t)(rnd() % 2);
        g.fast_accum = (int32_t)(rnd() % 2);
        g.preset = mm_preset_get((int)(rnd() % MM_PRESET_COUNT));
        if (rnd() % 5 == 0) { /* any parameters the plan checks accept */
            g.preset.block = 1 + (int32_t)(rnd() % 64);
            g.preset.frac = (int32_t)(rnd() % 31);
            g.preset.keep = 1 + (int32_t)(rnd() % 40);
            g.preset.promote_k = g.preset.block * (1 + (int32_t)(rnd() % 6));
            g.preset.c_late = (int32_t)(rnd() % 2);
            g.preset.split_rr_tile = rnd() % 2 ? 0 : 64;
        }
        g.splits = rnd() % 3 == 0 ? 1 + (int32_t)(rnd() % 9) : 1;
        g.scheme = g.splits > 1 ? 1 + (int32_t)(rnd() % 3) : MM_SCHEME_NONE;
        if (it % 10 == 9) {
            /* ada on round-robin tiles of any size: chains of 16-k blocks that start off the
             * halves of a sign group (the AVX-512 FMA form's paired sign words, csrc/cpu/cpu.h) */
            g.preset = mm_preset_get(MM_PRESET_ADA);
            g.preset.split_rr_tile = 1 + (int32_t)(rnd() % 100);
            g.fast_accum = 1;
            g.splits = 2 + (int32_t)(rnd() % 3);
            g.scheme = MM_SCHEME_SERIAL;
            g.K = 60 + (int64_t)(rnd() % 400);
        }
        g.out_kind = (int32_t)(rnd() % 6);
        g.epilogue_order = (int32_t)(rnd() % 3);
        g.has_scale_result = (int32_t)(rnd() % 2);
        g.scale_a = 0.5f + (float)(rnd() % 100) / 37.0f;
        g.scale_b = 1.0f / (float)(1 + rnd() % 7);
        g.scale_result = 3.0f;
        const int special = rnd() % 4 == 0;
        g.lda = g.K + (int64_t)(rnd() % 3);
        g.ldb = g.K + (int64_t)(rnd() % 3);
        g.ldo = g.N;
        uint8_t* a = malloc((size_t)(g.M * g.lda + 1));
        uint8_t* b = malloc((size_t)(g.N * g.ldb + 1));
        for (int64_t i = 0; i < g.M * g.lda; i++) a[i] = random_code(g.fmt_a, special && rnd() % 50 == 0);
        for (int64_t i = 0; i < g.N * g.ldb; i++) b[i] = random_code(g.fmt_b, special && rnd() % 50 == 0);
        if (rnd() % 4 == 0) { /* a row of +-0 codes: outputs whose every block sum is 0 (+0 in any rounding) */
            const int64_t i = (int64_t)(rnd() % (uint64_t)g.M);
            for (int64_t k = 0; k < g.K; k++) a[i * g.lda + k] = (rnd() & 1) ? 0x80 : 0;
        }
        g.a = a;
        g.b = b;
        const size_t bytes = (size_t)(g.M * g.N) * 4;
        uint32_t* ref = calloc(1, bytes);
        uint32_t* out = calloc(1, bytes);
        g.out = ref;
        if (mmaemu_gemm_reference(&g) != MM_OK) {
            printf("reference failed\n");
            return 2;
        }
        if (fegetround() != FE_TONEAREST) {
            const int mode = fegetround();
            fesetround(FE_TONEAREST);
            g.out = out;
            if (mmaemu_gemm_reference(&g) != MM_OK || memcmp(out, ref, bytes) != 0) {
                printf("mismatch: iteration %d, the reference depends on the rounding mode\n", it);
                failures++;
            }
            fesetround(mode);
        }
        for (int pi = 0; pi < 3; pi++) {
            for (int threads = 1; threads <= 2; threads++) {
                memset(out, 0xAB, bytes);
                g.out = out;
                const int rc = mmaemu_gemm_cpu(&g, threads, paths[pi]);
                if (rc == MM_ERR_CPU_SIMD) continue;
                if (rc != MM_OK) {
                    printf("cpu backend failed: %s\n", mmaemu_error_string(rc));
                    return 2;
                }
                ran[pi]++;
                if (fegetround() != caller_mode) {
                    printf("mismatch: iteration %d path %s changed the caller's rounding mode\n", it, paths[pi]);
                    failures++;
                    fesetround(caller_mode);
                }
                const int sz = mm_out_size(g.out_kind);
                if (memcmp(ref, out, (size_t)(g.M * g.N * sz)) == 0) continue;
                if (++failures > 10) continue;
                printf("mismatch: iteration %d path %s threads %d M %ld N %ld K %ld fmt %d/%d fast %d "
                       "preset %d/%d/%d/%d/%d splits %d scheme %d out %d\n",
                       it, paths[pi], threads, (long)g.M, (long)g.N, (long)g.K, g.fmt_a, g.fmt_b,
                       g.fast_accum, g.preset.block, g.preset.frac, g.preset.keep,
                       g.preset.promote_k, g.preset.c_late, g.splits, g.scheme, g.out_kind);
            }
        }
        free(a);
        free(b);
        free(ref);
        free(out);
    }
    fesetround(FE_TONEAREST);
    failures += pairs_check(paths, ran);
    printf("%d iterations, %d failures; runs portable %d avx2 %d avx512 %d\n", iters, failures,
           ran[0], ran[1], ran[2]);
    /* the kernels this build runs here, and which build of each (as mmaemu._C.cpu_simd_kernels) */
    for (int i = 0; i < mmaemu_cpu_simd_count(); i++) {
        mm_cpu_simd_info info;
        mmaemu_cpu_simd_info(i, &info);
        printf("%s: %s%s%s\n", info.name, info.available ? "available" : "not available",
               info.note[0] ? "; " : "", info.note);
    }
    return failures != 0;
}
