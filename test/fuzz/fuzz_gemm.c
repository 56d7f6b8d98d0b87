/* fuzz_gemm.c: libFuzzer harness over the C core's entry points (csrc/include/mmaemu.h).
 *
 * Each input is decoded into one call plan: formats, shapes, strides, split plan, preset
 * (named or a custom one inside the limits mmaemu_gemm_check accepts), output kind, epilogue
 * order, scales (often raw fp32 bit patterns: NaN, Inf, subnormals) and the operand bytes.
 * Every buffer is allocated at its exact size, so AddressSanitizer catches any read or write
 * outside it. What must hold:
 *  - a plan built inside the documented limits passes mmaemu_gemm_check, and a plan with one
 *    field out of range fails it with MM_ERR_ARGUMENT, in all three entry points, and no
 *    output byte is written;
 *  - mmaemu_gemm_cpu (any thread count, every SIMD kernel this CPU has) writes the same bytes
 *    as mmaemu_gemm_reference, including the gaps between output rows (which neither may
 *    touch); a SIMD kernel it does not know is refused with MM_ERR_CPU_SIMD, writing nothing;
 *  - mmaemu_mma_reference with C = +0 equals the fast-accumulation GEMM accumulator of the
 *    same row pair (the same chain of blocks, reached through a different entry point).
 * A violation prints the plan and aborts, which libFuzzer reports as a crash.
 *
 * Build and run: scripts/fuzz.sh [seconds]; FUZZ_GEMM_VERBOSE=1 prints each decoded plan. test/fuzz/replay_main.c replays inputs without
 * libFuzzer (used by test/test_fuzz_corpus.py). */
#define _POSIX_C_SOURCE 200809L /* strtok_r */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmaemu.h"

#define CANARY 0xA5u
#define WORK_BUDGET (1 << 17) /* M * N * (K + splits) per input: keeps each run in milliseconds */

/* Reads the input front to back; exhausted input reads as zeros. */
typedef struct {
    const uint8_t* p;
    size_t n, i;
} reader;

static uint32_t take8(reader* r) { return r->i < r->n ? r->p[r->i++] : 0u; }
static uint32_t take16(reader* r) { uint32_t lo = take8(r); return lo | take8(r) << 8; }
static uint32_t take32(reader* r) { uint32_t lo = take16(r); return lo | take16(r) << 16; }

static float bits_to_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* A scale: 1, a power of two, or any fp32 bit pattern. */
static float take_scale(reader* r) {
    const uint32_t sel = take8(r) % 4;
    if (sel == 0) return 1.0f;
    if (sel == 1) return bits_to_float((take8(r) % 254 + 1) << 23);
    return bits_to_float(take32(r));
}

/* A row stride for rows of `len` elements: packed, padded, 0 (every row aliases row 0),
 * or anything up to 2047 (rows may overlap; reads only). */
static int64_t take_stride(reader* r, int64_t len) {
    const uint32_t sel = take8(r) % 4;
    if (sel == 0) return len;
    if (sel == 1) return len + 1 + take8(r) % 7;
    if (sel == 2) return 0;
    return take16(r) % 2048;
}

/* Bytes of a [rows] x [len] operand with row stride ld: exactly what the kernels may read. */
static size_t operand_bytes(int64_t rows, int64_t len, int64_t ld) {
    return rows > 0 && len > 0 ? (size_t)((rows - 1) * ld + len) : 0;
}

/* An exact-size copy of the data pool (cycled), or NULL for an empty operand. */
static uint8_t* fill(size_t n, const uint8_t* pool, size_t pool_n) {
    if (n == 0) return NULL;
    uint8_t* p = (uint8_t*)malloc(n);
    if (!p) abort();
    for (size_t i = 0; i < n; i++) p[i] = pool_n ? pool[i % pool_n] : 0;
    return p;
}

static void print_plan(const char* what, const mm_gemm* g, int threads) {
    fprintf(stderr,
            "fuzz_gemm: %s\n  M=%lld N=%lld K=%lld lda=%lld ldb=%lld ldo=%lld fmt_a=%d fmt_b=%d "
            "fast=%d splits=%d scheme=%d out_kind=%d epilogue=%d has_scale_result=%d\n"
            "  scale_a=%a scale_b=%a scale_result=%a preset={block %d, frac %d, keep %d, "
            "promote %d} threads=%d\n",
            what, (long long)g->M, (long long)g->N, (long long)g->K, (long long)g->lda,
            (long long)g->ldb, (long long)g->ldo, g->fmt_a, g->fmt_b, g->fast_accum, g->splits,
            g->scheme, g->out_kind, g->epilogue_order, g->has_scale_result, (double)g->scale_a,
            (double)g->scale_b, (double)g->scale_result, g->preset.block, g->preset.frac,
            g->preset.keep, g->preset.promote_k, threads);
}

static void fail(const char* what, const mm_gemm* g, int threads) {
    print_plan(what, g, threads);
    abort();
}

/* Random valid plan (sizes, enums, preset); pointers and strides are set by the caller. */
static void take_plan(reader* r, mm_gemm* g) {
    memset(g, 0, sizeof *g);
    const uint32_t flags = take8(r);
    g->fmt_a = (int32_t)(flags & 1u);
    g->fmt_b = (int32_t)((flags >> 1) & 1u);
    g->fast_accum = (int32_t)((flags >> 2) & 1u);
    g->has_scale_result = (int32_t)((flags >> 3) & 1u);
    g->out_kind = (int32_t)(take8(r) % 6); /* MM_OUT_F32 .. MM_OUT_ACC */
    /* tensor-wise orders H1..H3, or a plan that reads scale vectors: block-wise (either update
     * form) or the grouped GEMM's row-wise epilogue */
    static const int32_t epilogues[6] = {MM_EPI_H1, MM_EPI_H2, MM_EPI_H3, MM_EPI_BLOCKWISE,
                                         MM_EPI_BLOCKWISE_PE, MM_EPI_ROWWISE_MUL};
    g->epilogue_order = epilogues[take8(r) % 6];
    g->scheme = (int32_t)(take8(r) % 4);
    const uint32_t s = take8(r);
    g->splits = (int32_t)(s < 160 ? 1 + s % 4 : s < 240 ? 1 + take8(r) : 1 + take16(r) % MM_MAX_SPLITS);
    const uint32_t pid = take8(r) % 4;
    if (pid < MM_PRESET_COUNT) {
        g->preset = mm_preset_get((int)pid);
    } else { /* any model inside the checked limits: the arithmetic must stay defined there */
        g->preset.block = (int32_t)(1 + take8(r) % 64);
        g->preset.frac = (int32_t)(take8(r) % 31);
        g->preset.keep = (int32_t)(1 + take8(r) % 40);
        g->preset.promote_k = g->preset.block * (int32_t)(1 + take8(r) % 8);
        g->preset.split_rr_tile = take8(r) & 1 ? 64 : 0;
    }
    g->M = take8(r) % 9;
    g->N = take8(r) % 9;
    g->K = take16(r) % 1025;
    while (g->M * g->N * (g->K + g->splits) > WORK_BUDGET) {
        if (g->M > 1) g->M /= 2;
        else if (g->N > 1) g->N /= 2;
        else g->K /= 2;
    }
    g->scale_a = take_scale(r);
    g->scale_b = take_scale(r);
    g->scale_result = take_scale(r);
    if (mm_is_blockwise(g)) { /* one chain per 128-k group: no split; a 16- or 32-bit output */
        g->splits = 1;
        if (mm_out_size(g->out_kind) == 1) g->out_kind = MM_OUT_BF16;
        g->sb_gran = take8(r) & 1 ? 1 : MM_BLOCKWISE_K;
    } else if (g->epilogue_order == MM_EPI_ROWWISE_MUL) {
        g->out_kind = take8(r) & 1 ? MM_OUT_BF16 : MM_OUT_ACC;
    }
}

/* The scale vectors a plan reads (block-wise: [rows, groups] of either layout, exact size;
 * row-wise: M and N floats); NULL where the plan reads none. */
static float* take_scales(reader* r, int64_t rows, int64_t groups, int64_t* rs, int64_t* gs) {
    const int col_major = (int)(take8(r) & 1);
    *rs = col_major ? 1 : groups;
    *gs = col_major ? rows : 1;
    const int64_t n = rows > 0 && groups > 0 ? (rows - 1) * *rs + (groups - 1) * *gs + 1 : 1;
    float* v = (float*)malloc((size_t)n * sizeof(float));
    if (!v) abort();
    for (int64_t i = 0; i < n; i++) v[i] = take_scale(r);
    return v;
}

static void set_scale_vectors(reader* r, mm_gemm* g, float** sa, float** sb) {
    *sa = *sb = NULL;
    if (mm_is_blockwise(g)) {
        const int64_t groups = (g->K + MM_BLOCKWISE_K - 1) / MM_BLOCKWISE_K;
        const int64_t rows_b = g->N > 0 ? (g->N - 1) / g->sb_gran + 1 : 0;
        *sa = take_scales(r, g->M, groups, &g->sa_rs, &g->sa_gs);
        *sb = take_scales(r, rows_b, groups, &g->sb_rs, &g->sb_gs);
    } else if (g->epilogue_order == MM_EPI_ROWWISE_MUL) {
        int64_t unused;
        *sa = take_scales(r, g->M, 1, &unused, &unused);
        *sb = take_scales(r, g->N, 1, &unused, &unused);
    }
    g->scale_a_vec = *sa;
    g->scale_b_vec = *sb;
}

/* M, N, K of at least 1, so that the pointer and stride checks apply. */
static void make_nonempty(mm_gemm* g) {
    if (g->M < 1) g->M = 1;
    if (g->N < 1) g->N = 1;
    if (g->K < 1) g->K = 1;
}

/* Puts one field of a valid plan out of range; every entry point must then refuse it. */
static void corrupt(reader* r, mm_gemm* g) {
    switch (take8(r) % 23) {
    case 0: g->fmt_a = take8(r) & 1 ? -1 : 2; break;
    case 1: g->fmt_b = take8(r) & 1 ? -1 : 2; break;
    case 2: g->out_kind = take8(r) & 1 ? -1 : MM_OUT_ACC + 1; break;
    case 3: g->epilogue_order = take8(r) & 1 ? -1 : MM_EPI_ROWWISE_MUL + 1; break;
    case 4: g->scheme = take8(r) & 1 ? -1 : MM_SCHEME_PAIRWISE + 1; break;
    case 5: g->splits = take8(r) & 1 ? 0 : MM_MAX_SPLITS + 1; break;
    case 6: g->preset.block = take8(r) & 1 ? 0 : 65; break;
    case 7: g->preset.frac = take8(r) & 1 ? -1 : 31; break;
    case 8: g->preset.keep = take8(r) & 1 ? 0 : 41; break;
    case 9: /* no blocks, or an interval that ends inside a block */
        g->preset.promote_k = take8(r) & 1 || g->preset.block == 1 ? 0 : g->preset.block + 1;
        break;
    case 10: g->M = -1 - (int64_t)take8(r); break;
    case 11: g->N = -1 - (int64_t)take8(r); break;
    case 12: g->K = -1 - (int64_t)take8(r); break;
    case 13: g->lda = -1; make_nonempty(g); break;
    case 14: g->ldb = -1; make_nonempty(g); break;
    case 15: g->ldo = -1; make_nonempty(g); break;
    case 16: g->M = MM_MAX_DIM + 1; break;
    case 17: g->K = MM_MAX_DIM + 1; break;
    case 18: g->out = NULL; make_nonempty(g); break;
    case 19: g->a = NULL; make_nonempty(g); break;
    /* strides whose last byte offset ((rows - 1) * ld + len) * element size overflows int64 */
    case 20: g->lda = INT64_MAX / 2; make_nonempty(g); g->M = 4; break;
    case 21: g->ldb = INT64_MAX - 1; make_nonempty(g); g->N = 3; break;
    default: g->ldo = INT64_MAX / 4 / mm_out_size(g->out_kind); make_nonempty(g); g->M = 6; break;
    }
}

static void compare_outputs(const uint8_t* out_ref, const uint8_t* out_cpu, size_t out_bytes,
                            int esize, int64_t ldo, const mm_gemm* g, int threads, const char* path);

static void fuzz_gemm(reader* r, int corrupted) {
    mm_gemm g;
    take_plan(r, &g);
    const int threads = (int)(1 + take8(r) % 4);
    g.lda = take_stride(r, g.K);
    g.ldb = take_stride(r, g.K);
    g.ldo = g.N + (take8(r) % 4 == 3 ? 1 + take8(r) % 5 : 0);
    float *sa, *sb;
    set_scale_vectors(r, &g, &sa, &sb);

    /* Exact-size buffers for the valid plan (a corrupted plan must not touch them at all). */
    const int64_t M = g.M, N = g.N, K = g.K, ldo = g.ldo;
    const int esize = mm_out_size(g.out_kind);
    const uint8_t* pool = r->p + r->i;
    const size_t pool_n = r->n - r->i;
    uint8_t* a = fill(operand_bytes(M, K, g.lda), pool, pool_n);
    uint8_t* b = fill(operand_bytes(N, K, g.ldb), pool_n > 1 ? pool + 1 : pool, pool_n > 1 ? pool_n - 1 : pool_n);
    const size_t out_bytes = M > 0 && N > 0 ? (size_t)((M - 1) * ldo + N) * (size_t)esize : 0;
    uint8_t* out_ref = (uint8_t*)malloc(out_bytes ? out_bytes : 1);
    uint8_t* out_cpu = (uint8_t*)malloc(out_bytes ? out_bytes : 1);
    if (!out_ref || !out_cpu) abort();
    memset(out_ref, CANARY, out_bytes);
    memset(out_cpu, CANARY, out_bytes);
    g.a = a;
    g.b = b;
    g.out = out_ref;
    if (corrupted) corrupt(r, &g);

    if (getenv("FUZZ_GEMM_VERBOSE")) print_plan(corrupted ? "corrupted plan" : "plan", &g, threads);
    const int rc_check = mmaemu_gemm_check(&g);
    const int rc_ref = mmaemu_gemm_reference(&g);
    if (g.out) g.out = out_cpu;
    const int rc_cpu = mmaemu_gemm_cpu(&g, threads, "portable");

    if (corrupted) {
        if (rc_check != MM_ERR_ARGUMENT || rc_ref != MM_ERR_ARGUMENT || rc_cpu != MM_ERR_ARGUMENT)
            fail("an out-of-range plan was not refused with MM_ERR_ARGUMENT", &g, threads);
        for (size_t i = 0; i < out_bytes; i++)
            if (out_ref[i] != CANARY || out_cpu[i] != CANARY)
                fail("a refused plan wrote to its output", &g, threads);
    } else {
        if (rc_check != MM_OK) {
            fprintf(stderr, "fuzz_gemm: mmaemu_gemm_check returned %d (%s)\n", rc_check,
                    mmaemu_error_string(rc_check));
            fail("a plan inside the documented limits was refused", &g, threads);
        }
        if (rc_ref != MM_OK || rc_cpu != MM_OK) fail("a checked plan failed to run", &g, threads);
        compare_outputs(out_ref, out_cpu, out_bytes, esize, ldo, &g, threads, "portable");
        /* Every other SIMD kernel this CPU has. */
        char paths[64], *rest = NULL;
        snprintf(paths, sizeof paths, "%s", mmaemu_cpu_simd_paths());
        for (char* path = strtok_r(paths, ",", &rest); path; path = strtok_r(NULL, ",", &rest)) {
            if (strcmp(path, "portable") == 0) continue;
            memset(out_cpu, CANARY, out_bytes);
            if (mmaemu_gemm_cpu(&g, threads, path) != MM_OK) fail("a checked plan failed to run", &g, threads);
            compare_outputs(out_ref, out_cpu, out_bytes, esize, ldo, &g, threads, path);
        }
        /* An unknown kernel is refused before anything is written. */
        memset(out_cpu, CANARY, out_bytes);
        if (mmaemu_gemm_cpu(&g, threads, "sse9") != MM_ERR_CPU_SIMD)
            fail("an unknown SIMD kernel was not refused with MM_ERR_CPU_SIMD", &g, threads);
        for (size_t i = 0; i < out_bytes; i++)
            if (out_cpu[i] != CANARY) fail("a refused SIMD kernel wrote to its output", &g, threads);
    }
    free(a);
    free(b);
    free(sa);
    free(sb);
    free(out_ref);
    free(out_cpu);
}

/* Fails unless the cpu backend's output bytes (SIMD path `path`) equal the reference's. */
static void compare_outputs(const uint8_t* out_ref, const uint8_t* out_cpu, size_t out_bytes,
                            int esize, int64_t ldo, const mm_gemm* g, int threads, const char* path) {
    for (size_t i = 0; i < out_bytes; i++) {
        if (out_ref[i] != out_cpu[i]) {
            const size_t e = i / (size_t)esize;
            fprintf(stderr, "fuzz_gemm: first difference at output element (%lld, %lld): "
                    "byte %zu, reference 0x%02x, cpu 0x%02x (SIMD path %s)\n", (long long)(e / (size_t)ldo),
                    (long long)(e % (size_t)ldo), i % (size_t)esize, out_ref[i], out_cpu[i], path);
            fail("mmaemu_gemm_cpu differs from mmaemu_gemm_reference", g, threads);
        }
    }
}

static void fuzz_mma(reader* r) {
    const uint32_t flags = take8(r);
    const int fmt_a = (int)(flags & 1u), fmt_b = (int)((flags >> 1) & 1u);
    const int zero_c = (int)((flags >> 2) & 1u);
    int preset_id = (int)(take8(r) % 5) - 1; /* -1 and 3 are unknown ids */
    const int valid_id = preset_id >= 0 && preset_id < MM_PRESET_COUNT;
    const int block = valid_id ? mm_preset_get(preset_id).block : 32;
    const int64_t n = take8(r) % 9;
    int64_t K = block * (int64_t)(take8(r) % 17);
    const int ragged = take8(r) % 8 == 0 && K > 0; /* K not a multiple of the block: refused */
    if (ragged) K -= 1;
    const int64_t lda = take_stride(r, K), ldb = take_stride(r, K);
    const uint8_t* pool = r->p + r->i;
    const size_t pool_n = r->n - r->i;
    uint8_t* a = fill(operand_bytes(n, K, lda), pool, pool_n);
    uint8_t* b = fill(operand_bytes(n, K, ldb), pool_n > 2 ? pool + 2 : pool, pool_n > 2 ? pool_n - 2 : pool_n);
    float* c = (float*)malloc((size_t)n * sizeof(float) + 1);
    float* d = (float*)malloc((size_t)n * sizeof(float) + 1);
    if (!c || !d) abort();
    for (int64_t i = 0; i < n; i++) c[i] = zero_c ? 0.0f : take_scale(r);
    memset(d, CANARY, (size_t)n * sizeof(float));

    const int rc = mmaemu_mma_reference(a, lda, fmt_a, b, ldb, fmt_b, c, n, K, preset_id, d);
    mm_gemm g;
    memset(&g, 0, sizeof g);
    g.M = n; g.N = n; g.K = K; g.lda = lda; g.ldb = ldb;
    g.fmt_a = fmt_a; g.fmt_b = fmt_b;
    if (!valid_id || ragged) {
        if (rc != MM_ERR_ARGUMENT) fail("mmaemu_mma_reference accepted an invalid preset or K", &g, 1);
        for (size_t i = 0; i < (size_t)n * sizeof(float); i++)
            if (((const uint8_t*)d)[i] != CANARY) fail("a refused mma call wrote its output", &g, 1);
    } else {
        if (rc != MM_OK) fail("mmaemu_mma_reference refused a valid call", &g, 1);
        if (zero_c && K > 0) {
            /* d[i] must be the accumulator of the 1 x 1 GEMM of row pair i (fast, no split). */
            g.M = 1; g.N = 1; g.ldo = 1; g.fast_accum = 1; g.splits = 1;
            g.scheme = MM_SCHEME_NONE; g.out_kind = MM_OUT_ACC; g.preset = mm_preset_get(preset_id);
            for (int64_t i = 0; i < n; i++) {
                uint32_t acc = 0;
                g.a = a + i * lda;
                g.b = b + i * ldb;
                g.out = &acc;
                if (mmaemu_gemm_reference(&g) != MM_OK) fail("1 x 1 accumulator GEMM failed", &g, 1);
                uint32_t di;
                memcpy(&di, &d[i], 4);
                if (di != acc) {
                    fprintf(stderr, "fuzz_gemm: row %lld: mma 0x%08x, accumulate 0x%08x\n",
                            (long long)i, di, acc);
                    fail("mmaemu_mma_reference(C = 0) differs from the GEMM accumulator", &g, 1);
                }
            }
        }
    }
    free(a);
    free(b);
    free(c);
    free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    reader r = {data, size, 0};
    if (mmaemu_gemm_check(NULL) != MM_ERR_ARGUMENT) abort();
    const uint32_t mode = take8(&r) % 8;
    if (mode < 6) fuzz_gemm(&r, 0);
    else if (mode == 6) fuzz_gemm(&r, 1);
    else fuzz_mma(&r);
    return 0;
}
