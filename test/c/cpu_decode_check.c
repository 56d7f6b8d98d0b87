/* cpu_decode_check.c: B panels decoded with AVX2 and AVX-512 (csrc/cpu/decode_b_avx2.c,
 * csrc/cpu/decode_b_avx512.c) and A rows decoded with AVX-512 and AVX2 (csrc/cpu/decode_a_avx512.c,
 * csrc/cpu/decode_a_avx2.c) against
 * the layouts restated code by code from the decoding tables.
 *
 * Calls the driver's decoders and tables through its internal header (csrc/cpu/driver.h): the
 * driver's own code, not a copy. Random panels of both SIMD widths (32:
 * the AVX2 kernel, 64: AVX-512), both formats, with and without sign words, cut by N and by k
 * ranges that end inside a sign group (those groups take the scalar decoder), codes with zeros,
 * subnormals, NaN and Inf: mm_cpu_decode_b_panel's records, sign words and NaN/Inf flags must equal,
 * byte for byte, the panel written from mm_cpu_lut_make's tables (cpu.h's layout), and so must
 * each group decoder's alone on the whole groups (AVX2 at both widths, AVX-512 at 64 where the
 * CPU has it). Panels take turns with many subnormal codes, a few and none, so that both value
 * paths of the decoders run and alternate within a panel; every second run of 24 panels decodes
 * with DAZ set (MXCSR: subnormal operands read as zero), which changes the bits of any value
 * formed from a subnormal operand, i.e. the microcode assists the decoders must not take. Half
 * the panels with sign words ask for the paired layout (mm_cpu_sign_paired).
 * Rows of A likewise (through mm_cpu_decode_a: AVX-512 where the CPU has it, AVX2, and its
 * scalar loop): check_a_rows.
 * Usage: cpu_decode_check [panels] [seed]. Prints "<n> panels (<g> groups by SIMD; <s> of their
 * 32-column halves with subnormal codes, <z> without; alone: <a> groups by AVX2, <b> by
 * AVX-512; <p> panels with paired sign words); A: <r> rows (<v> by AVX-512, <u> by AVX2), <f> failures"; exits 77 where the CPU lacks AVX2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xmmintrin.h>

#include "driver.h"

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* The panel mm_cpu_decode_b_panel should write, from the tables alone (its sign groups in the paired
 * layout where paired is set, cpu.h: mm_cpu_sign_paired). */
static void expected_panel(const uint8_t* codes, int64_t ldb, int64_t N, int64_t j0, int w, int64_t k0,
                           int64_t len, const mm_cpu_lut* t, int paired, mm_cpu_panel* pn, uint8_t* special) {
    const int64_t stride = MM_CPU_PANEL_STRIDE(w);
    if (pn->sign) memset(pn->sign, 0, sizeof(uint32_t) * (size_t)mm_cpu_sign_words(len, w));
    memset(special, 0, (size_t)w);
    for (int64_t k = 0; k < len; k++)
        for (int c = 0; c < w; c++) {
            const uint8_t code = j0 + c < N ? codes[(j0 + c) * ldb + k0 + k] : 0;
            int32_t* rec = pn->rec + k * stride;
            ((mm_cpu_i8*)(void*)rec)[mm_cpu_byte_pos(c, w, MM_CPU_BYTES_WORDS)] = (int8_t)t->e[code];
            mm_cpu_values(rec + MM_CPU_PANEL_V(w))[c] = t->v[code];
            if (pn->sign) {
                uint32_t* group = pn->sign + k / MM_CPU_SIGN_SPAN * MM_CPU_SIGN_GROUP_WORDS(w);
                const int i = (int)(k % MM_CPU_SIGN_SPAN);
                if (paired) { /* half i / 16: negative bit i % 16, positive bit 16 + i % 16 */
                    group[i / 16 * w + c] |= (uint32_t)t->neg[code] << (i % 16) | (uint32_t)t->pos[code] << (16 + i % 16);
                } else {
                    group[c] |= (uint32_t)t->pos[code] << i;
                    group[w + c] |= (uint32_t)t->neg[code] << i;
                }
            }
            special[c] |= t->special[code];
        }
}

/* A decoder of one sign group (cpu.h: mm_cpu_decode_b_group_avx2, _avx512). */
typedef int (*group_decoder)(const uint8_t* const* cols, int w, int fmt, int32_t* rec, uint32_t* group,
                             uint8_t* col_special);

/* The panel's whole sign groups (the first len / 32) decoded by fn alone into pn, special[c] =
 * a NaN/Inf code of column c among them; returns 0 where fn declines (another width). */
static int decode_groups(group_decoder fn, const uint8_t* codes, int64_t ldb, int64_t N, int64_t j0, int w,
                         int64_t k0, int64_t len, int fmt, const mm_cpu_panel* pn, uint8_t* special) {
    static const uint8_t zeros[MM_CPU_SIGN_SPAN];
    memset(special, 0, (size_t)w);
    for (int64_t kg = 0; kg + MM_CPU_SIGN_SPAN <= len; kg += MM_CPU_SIGN_SPAN) {
        const uint8_t* cols[64];
        for (int c = 0; c < w; c++) cols[c] = j0 + c < N ? codes + (j0 + c) * ldb + k0 + kg : zeros;
        uint32_t* group = pn->sign ? pn->sign + kg / MM_CPU_SIGN_SPAN * MM_CPU_SIGN_GROUP_WORDS(w) : NULL;
        if (!fn(cols, w, fmt, pn->rec + kg * MM_CPU_PANEL_STRIDE(w), group, special)) return 0;
    }
    return 1;
}

/* A GEMM whose A (a_side) or B is the n rows (columns) of codes, ld apart, over K: what the
 * decoders read of it. */
static mm_gemm operand(int a_side, const uint8_t* codes, int64_t ld, int64_t n, int64_t K, int fmt) {
    mm_gemm g;
    memset(&g, 0, sizeof g);
    if (a_side) {
        g.a = codes;
        g.lda = ld;
        g.M = n;
        g.fmt_a = fmt;
    } else {
        g.b = codes;
        g.ldb = ld;
        g.N = n;
        g.fmt_b = fmt;
    }
    g.K = K;
    return g;
}

/* The row mm_cpu_decode_a should write, from the tables alone: per k its A word, its sign window (bit i:
 * element k + i positive, bit 16 + i: negative, i < 16, none past the row) and its value. */
static void expected_a_row(const uint8_t* codes, int64_t len, const mm_cpu_lut* t, int32_t* row) {
    for (int64_t k = 0; k < len; k++) {
        uint32_t window = 0;
        for (int i = 0; i < 16 && k + i < len; i++)
            window |= (uint32_t)t->pos[codes[k + i]] << i | (uint32_t)t->neg[codes[k + i]] << (16 + i);
        row[MM_CPU_A_WORDS * k] = mm_cpu_a_word(t->e[codes[k]]);
        row[MM_CPU_A_WORDS * k + MM_CPU_A_SGN] = (int32_t)window;
        row[MM_CPU_A_WORDS * k + MM_CPU_A_V] = (int32_t)mm_f32_bits(t->v[codes[k]]);
    }
}

/* Rows of A decoded by mm_cpu_decode_a as the driver runs it (AVX-512 where the CPU has it), with AVX2
 * and with the scalar loop alone, against expected_a_row, for every table the kernels use (biased or not,
 * coded or signed exponents, enlarged or not), both formats, k ranges of any length and start:
 * each row's words, the words after its last (untouched), and its NaN/Inf flag. Returns the
 * failures; simd[0], simd[1] count the rows AVX-512 and AVX2 decoded. */
static int check_a_rows(int cases, int64_t* rows_checked, int64_t simd[2]) {
    int failures = 0;
    for (int it = 0; it < cases; it++) {
        const int fmt = it % 2 ? MM_FMT_E5M2 : MM_FMT_E4M3;
        const int bias = (it / 2) % 2 ? MM_CPU_A_BIAS : 0, e_code = (it / 4) % 2, enlarge = (it / 8) % 2;
        const int64_t M = 1 + (int64_t)(rnd() % 5), K = 1 + (int64_t)(rnd() % (it % 7 ? 300 : 3000));
        const int64_t lda = K + (int64_t)(rnd() % 70);
        const int64_t k0 = (int64_t)(rnd() % (uint64_t)K), k1 = k0 + 1 + (int64_t)(rnd() % (uint64_t)(K - k0));
        const int64_t len = k1 - k0, rows = M + (int64_t)(rnd() % 3); /* rows past M: padding */
        uint8_t* codes = malloc((size_t)(M * lda));
        for (int64_t i = 0; i < M * lda; i++) {
            const int r = (int)(rnd() % 100);
            codes[i] = r < 20 ? (uint8_t)(rnd() & 0x80) : r < 22 ? (uint8_t)(rnd() | 0x7C) : (uint8_t)rnd();
        }
        mm_cpu_lut t;
        mm_cpu_lut_make(&t, fmt, bias, e_code, enlarge);
        const mm_gemm g = operand(1, codes, lda, M, K, fmt);
        const int64_t words = mm_cpu_a_stride(len) * rows, guard = 64;
        int32_t* want = malloc(sizeof(int32_t) * (size_t)words);
        int32_t* got = malloc(sizeof(int32_t) * (size_t)(words + guard));
        static const uint8_t zeros[4096];
        memset(want, 0xAB, sizeof(int32_t) * (size_t)words); /* the rows' padding: never written */
        for (int64_t i = 0; i < rows; i++)
            expected_a_row(i < M ? codes + i * lda + k0 : zeros, len, &t, want + i * mm_cpu_a_stride(len));
        static const char* const runs[3] = {"as run", "avx2", "scalar"};
        for (int run = 0; run < 3; run++) {
            mm_cpu_lut u = t;
            if (run >= 1) u.avx512 = 0;
            if (run == 2) u.avx2 = 0;
            if (u.avx512) simd[0] += M;
            else if (u.avx2) simd[1] += M;
            memset(got, 0xAB, sizeof(int32_t) * (size_t)(words + guard));
            uint8_t special[8] = {0};
            mm_cpu_decode_a(&g, &u, 0, rows, k0, k1, got, special);
            int bad = memcmp(got, want, sizeof(int32_t) * (size_t)words) != 0;
            for (int64_t i = 0; i < guard; i++) bad |= got[words + i] != (int32_t)0xABABABABu;
            for (int64_t i = 0; i < rows; i++) {
                uint8_t any = 0;
                for (int64_t k = 0; i < M && k < len; k++) any |= t.special[codes[i * lda + k0 + k]];
                bad |= special[i] != any;
            }
            if (bad && ++failures <= 10)
                printf("mismatch: A case %d (%s) fmt %d bias %d e_code %d enlarge %d M %ld k [%ld, %ld)\n", it,
                       runs[run], fmt, bias, e_code, enlarge, (long)M, (long)k0, (long)k1);
        }
        *rows_checked += rows;
        free(want);
        free(got);
        free(codes);
    }
    return failures;
}

int main(int argc, char** argv) {
    if (!mm_cpu_has("avx2")) {
        printf("no AVX2: skipped\n");
        return 77;
    }
    const int panels = argc > 1 ? atoi(argv[1]) : 400;
    if (argc > 2) rng = strtoull(argv[2], NULL, 10) | 1u;
    int failures = 0;
    int64_t simd_groups = 0, halves[2] = {0, 0}; /* without, with subnormal codes */
    int64_t paired_panels = 0;
    int64_t by[2] = {0, 0}; /* whole groups decoded by each decoder alone: AVX2, AVX-512 */
    const group_decoder decoders[2] = {mm_cpu_decode_b_group_avx2, mm_cpu_decode_b_group_avx512};
    for (int it = 0; it < panels; it++) {
        const int fmt = it % 2 ? MM_FMT_E5M2 : MM_FMT_E4M3, w = (it / 2) % 2 ? 64 : 32, signs = (it / 4) % 2;
        const int paired = signs && (it / 8) % 2;
        paired_panels += paired;
        const int64_t N = 1 + (int64_t)(rnd() % (uint64_t)(2 * w)), K = 1 + (int64_t)(rnd() % 300);
        const int64_t ldb = K + (int64_t)(rnd() % 5), j0 = N > w && rnd() % 2 ? w : 0;
        const int64_t k0 = (int64_t)(rnd() % (uint64_t)K), k1 = k0 + 1 + (int64_t)(rnd() % (uint64_t)(K - k0));
        uint8_t* codes = malloc((size_t)(N * ldb));
        const int sub_max = fmt == MM_FMT_E4M3 ? 7 : 3, subnormals = it % 3; /* 0: none, 1: few, 2: many */
        for (int64_t i = 0; i < N * ldb; i++) {
            const int r = (int)(rnd() % 100);
            codes[i] = r < 10 ? (uint8_t)(rnd() & 0x80) : r < 15 ? (uint8_t)(rnd() & 0x87) : (uint8_t)rnd();
            const int mag = codes[i] & 0x7F;
            if (mag >= 1 && mag <= sub_max && (subnormals == 0 || (subnormals == 1 && rnd() % 64)))
                codes[i] &= 0x80; /* a signed zero instead */
        }
        mm_cpu_lut t;
        mm_cpu_lut_make(&t, fmt, 0, MM_CPU_E_CODED, 0);
        const int64_t len = k1 - k0, bytes = 4 * mm_cpu_panel_words(len, w, signs);
        mm_cpu_panel got, want;
        if (!mm_cpu_panel_alloc(&got, len, w, signs) || !mm_cpu_panel_alloc(&want, len, w, signs)) {
            printf("out of memory\n");
            return 2;
        }
        memset(got.rec, 0xAB, (size_t)bytes);
        memset(want.rec, 0xAB, (size_t)bytes);
        const mm_gemm g = operand(0, codes, ldb, N, K, fmt);
        uint8_t special_got[64], special_want[64];
        const unsigned csr = _mm_getcsr();
        if ((it / 24) % 2) _mm_setcsr(csr | 0x0040); /* DAZ */
        mm_cpu_decode_b_panel(&g, &t, j0, w, MM_CPU_BYTES_WORDS, paired, k0, k1, &got, special_got);
        _mm_setcsr(csr);
        /* the decoders alone write the two-word layout; the panel, paired's */
        mm_cpu_panel want_alone;
        uint8_t special_unused[64];
        if (!mm_cpu_panel_alloc(&want_alone, len, w, signs)) {
            printf("out of memory\n");
            return 2;
        }
        expected_panel(codes, ldb, N, j0, w, k0, len, &t, paired, &want, special_want);
        expected_panel(codes, ldb, N, j0, w, k0, len, &t, 0, &want_alone, special_unused);
        /* each decoder alone on the whole groups: their records, sign words and NaN/Inf flags */
        const int64_t whole = len / MM_CPU_SIGN_SPAN * MM_CPU_SIGN_SPAN;
        uint8_t special_whole[64] = {0};
        for (int c = 0; c < w && j0 + c < N; c++)
            for (int64_t k = 0; k < whole; k++) special_whole[c] |= t.special[codes[(j0 + c) * ldb + k0 + k]];
        const int here = mm_cpu_decode_avx512_runs() ? 2 : 1; /* AVX-512's only where the CPU has it */
        for (int d = 0; d < here && whole; d++) {
            mm_cpu_panel alone;
            uint8_t special_alone[64];
            if (!mm_cpu_panel_alloc(&alone, len, w, signs)) {
                printf("out of memory\n");
                return 2;
            }
            if ((it / 24) % 2) _mm_setcsr(csr | 0x0040);
            const int ran = decode_groups(decoders[d], codes, ldb, N, j0, w, k0, len, fmt, &alone, special_alone);
            _mm_setcsr(csr);
            if (ran) {
                by[d] += whole / MM_CPU_SIGN_SPAN;
                const size_t rec_bytes = 4 * (size_t)(whole * MM_CPU_PANEL_STRIDE(w));
                const size_t sign_bytes = 4 * (size_t)(whole / MM_CPU_SIGN_SPAN * MM_CPU_SIGN_GROUP_WORDS(w));
                if (memcmp(alone.rec, want.rec, rec_bytes) != 0 ||
                    (signs && memcmp(alone.sign, want_alone.sign, sign_bytes) != 0) ||
                    memcmp(special_alone, special_whole, (size_t)w) != 0) {
                    if (++failures <= 10)
                        printf("mismatch: %s alone, panel %d fmt %d w %d signs %d\n", d ? "AVX-512" : "AVX2", it,
                               fmt, w, signs);
                }
            }
            free(alone.rec);
        }
        simd_groups += len / MM_CPU_SIGN_SPAN;
        for (int64_t kg = 0; kg + MM_CPU_SIGN_SPAN <= len; kg += MM_CPU_SIGN_SPAN) /* the halves' codes */
            for (int h = 0; h < w / 32; h++) {
                int any = 0;
                for (int c = 32 * h; c < 32 * h + 32 && j0 + c < N; c++)
                    for (int i = 0; i < MM_CPU_SIGN_SPAN; i++) {
                        const int mag = codes[(j0 + c) * ldb + k0 + kg + i] & 0x7F;
                        any |= mag >= 1 && mag <= sub_max;
                    }
                halves[any]++;
            }
        if (memcmp(got.rec, want.rec, (size_t)bytes) != 0 || memcmp(special_got, special_want, (size_t)w) != 0) {
            if (++failures <= 10)
                printf("mismatch: panel %d fmt %d w %d signs %d paired %d daz %d N %ld j0 %ld k [%ld, %ld)\n", it,
                       fmt, w, signs, paired, (it / 24) % 2, (long)N, (long)j0, (long)k0, (long)k1);
        }
        free(want_alone.rec);
        free(got.rec);
        free(want.rec);
        free(codes);
    }
    int64_t a_rows = 0, a_simd[2] = {0, 0};
    failures += check_a_rows(panels, &a_rows, a_simd);
    printf("%d panels (%ld groups by SIMD; %ld of their 32-column halves with subnormal codes, %ld without; "
           "alone: %ld groups by AVX2, %ld by AVX-512; %ld panels with paired sign words); A: %ld rows (%ld by AVX-512, %ld by AVX2), %d failures\n", panels,
           (long)simd_groups, (long)halves[1], (long)halves[0], (long)by[0], (long)by[1], (long)paired_panels, (long)a_rows,
           (long)a_simd[0], (long)a_simd[1], failures);
    return failures ? 1 : 0;
}
