/* blockmath_check.c: the IEEE-exact block FMA of mmaemu_exact.h and the split reduction of
 * mmaemu_launch.h against the C model (mm_block, mm_dot), bit for bit, on exhaustive and random
 * inputs (test/test_cuda_blockmath.py). Argument: the number of random iterations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "mmaemu_exact.h"
#include "mmaemu_launch.h"
#include "mmaemu_presets.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 11); }

/* FP8 codes with a chosen spread of exponents: uniform, narrow, wide, or specials. */
static uint8_t code(int mode) {
    static const uint8_t special[] = {0x00, 0x80, 0x7F, 0xFF, 0x01, 0x81, 0x07, 0x08, 0x7E, 0xFE, 0x38, 0xB8};
    switch (mode) {
    case 0: return (uint8_t)rnd();
    case 1: return (uint8_t)((rnd() & 0x80) | (0x30 + rnd() % 24));   /* |x| around 1 */
    case 2: { uint32_t r = rnd() % 100; if (r < 3) return special[rnd() % 12]; return (uint8_t)(rnd() & 0xFE) | (uint8_t)(rnd() & 1); }
    case 3: return (rnd() % 4) ? (uint8_t)(rnd() & 0x87) : (uint8_t)rnd(); /* many subnormals / zeros */
    default: return special[rnd() % 12];
    }
}

static int fails = 0;
static void check(const char* what, const uint8_t* a, const uint8_t* b, int n, float c, float got, float want) {
    if (mm_f32_bits(got) == mm_f32_bits(want)) return;
    if (fails++ < 10) {
        printf("MISMATCH %s n=%d c=%08x got=%08x want=%08x a=", what, n, mm_f32_bits(c), mm_f32_bits(got), mm_f32_bits(want));
        for (int k = 0; k < n; k++) printf("%02x", a[k]);
        printf(" b=");
        for (int k = 0; k < n; k++) printf("%02x", b[k]);
        printf("\n");
    }
}

int main(int argc, char** argv) {
    const long iters = argc > 1 ? atol(argv[1]) : 200000;
    long checked = 0;
    /* the host fma_rz / add_rz really round toward zero */
    if (mm_add_rz(16777216.0f, 3.0f) != 16777218.0f || mm_add_rz(-16777216.0f, -3.0f) != -16777218.0f ||
        mm_fma_rz(4097.0f, 4097.0f, 0.0f) != 16785408.0f) {
        printf("the C library ignores the rounding mode\n");
        return 2;
    }
    for (int pid = 0; pid < 2; pid++) {
        const mm_preset p = mm_preset_get(pid); /* hopper, ada */
        const char* name = pid == 0 ? "hopper" : "ada";
        /* every product, with C = 0, -0 and a few accumulators */
        const float cs[] = {0.0f, -0.0f, 1.0f, -3.25f, 1024.5f, 0.0078125f, 448.0f * 448.0f * 7.0f};
        for (unsigned ci = 0; ci < sizeof cs / sizeof cs[0]; ci++)
            for (int x = 0; x < 256; x++)
                for (int y = 0; y < 256; y++) {
                    const uint8_t a = (uint8_t)x, b = (uint8_t)y;
                    check(name, &a, &b, 1, cs[ci], mm_exact_block(&a, &b, 1, cs[ci], &p),
                          mm_block(&a, &b, MM_FMT_E4M3, MM_FMT_E4M3, 1, cs[ci], &p));
                    checked++;
                }
        /* random blocks, C = the running chain (so C carries 14-bit results), restarted often */
        uint8_t a[32], b[32];
        float c = 0.0f;
        for (long it = 0; it < iters; it++) {
            const int n = 1 + (int)(rnd() % (unsigned)p.block);
            const int ma = (int)(rnd() % 5), mb = (int)(rnd() % 5);
            for (int k = 0; k < n; k++) { a[k] = code(ma); b[k] = code(mb); }
            if (rnd() % 8 == 0) c = 0.0f;
            if (rnd() % 64 == 0) c = mm_bits_f32(rnd() ^ (rnd() << 21)); /* any fp32 as C */
            const float want = mm_block(a, b, MM_FMT_E4M3, MM_FMT_E4M3, n, c, &p);
            check(name, a, b, n, c, mm_exact_block(a, b, n, c, &p), want);
            checked++;
            c = want;
            if (c != c) c = 0.0f;
        }
    }
    /* split reduction: mm_reduce_partials over mm_split_acc partials == mm_dot */
    static uint8_t A[4096], B[4096];
    for (long it = 0; it < iters / 200 + 20; it++) {
        const int64_t K = 1 + rnd() % 4096;
        const int mode = (int)(rnd() % 4);
        for (int64_t k = 0; k < K; k++) { A[k] = code(mode); B[k] = code(mode); }
        const int32_t splits = 2 + (int32_t)(rnd() % 40);
        const int32_t scheme = (int32_t)(rnd() % 4);
        const int fast = (int)(rnd() % 2);
        mm_preset p = mm_preset_get((int)(rnd() % 3));
        p.split_rr_tile = 0; /* the tiled kernels run the contiguous layout only */
        const int64_t chunk = mm_split_chunk(K, splits);
        float parts[64];
        for (int32_t s = 0; s < splits; s++) {
            const int64_t k0 = mm_split_begin(K, chunk, s), k1 = mm_split_end(K, chunk, s);
            parts[s] = k1 > k0 ? mm_split_acc(A, B, MM_FMT_E4M3, MM_FMT_E4M3, k0, k1, fast, &p) : 0.0f;
        }
        const float got = mm_reduce_partials(parts, 1, splits, scheme);
        const float want = mm_dot(A, B, MM_FMT_E4M3, MM_FMT_E4M3, K, fast, splits, scheme, &p);
        check("reduce", A, B, 0, 0.0f, got, want);
        checked++;
    }
    printf("checked %ld cases, %d mismatches\n", checked, fails);
    return fails != 0;
}
