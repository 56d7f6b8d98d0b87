/* decode_a_avx512.c: rows of A decoded 16 k at a time with AVX-512 (F + BW).
 *
 * The scalar decoder (decode.c, mm_cpu_decode_a) takes per element two table lookups, three stores
 * and a step of the sign window, which depends on the step before it (the window is built from
 * the row's end backwards): a large share of a GEMM's time where A is as large as B (small N,
 * long K; benchmarks/results/cpu.md).
 * Here the same words come from the same tables (mm_cpu_lut_make's, mm_cpu_a_tables), so the results
 * are the scalar decoder's by construction:
 *  - a record's A word and value: two gathers from the tables, indexed by the codes;
 *  - the sign windows: the row's positive and negative elements as bit masks, 64 k at a time
 *    (membership of each code in the tables' 256-bit sets: a byte shuffle picks the set's byte,
 *    another the bit), and each element's window from the masks by a variable shift (bit i of
 *    the window of element k is element k + i's; past the row's end, none);
 *  - the three words of 16 records interleaved by two-source permutes, stored as 48 words.
 * The row's NaN/Inf flag is the OR of its codes' membership in the special set.
 * test/c/cpu_decode_check.c checks the rows word for word against the tables.
 *
 * Compiled with a target attribute; the driver calls it only where mm_cpu_decode_avx512_runs(). */
#include "cpu.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>

#define MM_DEC __attribute__((target("avx512f,avx512bw")))
#define MM_DEC_INLINE __attribute__((target("avx512f,avx512bw"), always_inline)) static inline

/* The lanes of 64 codes x that belong to the 256-bit set: bit x % 8 of byte x / 8. */
MM_DEC_INLINE __mmask64 in_set(__m512i x, const uint8_t set[32]) {
    const __m512i lo = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)(const void*)set));
    const __m512i hi = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)(const void*)(set + 16)));
    const __m512i byte = _mm512_and_si512(_mm512_srli_epi16(x, 3), _mm512_set1_epi8(0x1F)); /* x / 8 */
    const __m512i low4 = _mm512_and_si512(byte, _mm512_set1_epi8(0x0F));
    const __mmask64 upper = _mm512_test_epi8_mask(byte, _mm512_set1_epi8(0x10));
    const __m512i b = _mm512_mask_blend_epi8(upper, _mm512_shuffle_epi8(lo, low4), _mm512_shuffle_epi8(hi, low4));
    const __m512i bits = _mm512_broadcast_i32x4(_mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128));
    const __m512i bit = _mm512_shuffle_epi8(bits, _mm512_and_si512(x, _mm512_set1_epi8(7))); /* 1 << x % 8 */
    return _mm512_test_epi8_mask(b, bit);
}

/* Bits [i, i + 32) of the 128-bit mask hi:lo, 0 <= i < 64. */
static inline uint32_t mask_bits(uint64_t lo, uint64_t hi, int i) {
    return (uint32_t)(i == 0 ? lo : lo >> i | hi << (64 - i));
}

/* 16 records from rec on (n <= 16 of them stored): the A words and values of codes c (16 as
 * int32 lanes) and the sign windows of positive bits p and negative bits q (bit i: element i of
 * the 16 and on, 32 bits). */
MM_DEC_INLINE void store_records(int32_t* rec, int n, __m512i c, uint32_t p, uint32_t q, const mm_cpu_a_tables* t) {
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i e = _mm512_i32gather_epi32(c, (const void*)t->word, 4);
    const __m512i v = _mm512_i32gather_epi32(c, (const void*)t->value, 4);
    /* window: bits 0..15 the positive bits from the element on, 16..31 the negative ones */
    const __m512i pw = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32((int32_t)p), iota), _mm512_set1_epi32(0xFFFF));
    const __m512i w = _mm512_or_si512(pw, _mm512_slli_epi32(_mm512_srlv_epi32(_mm512_set1_epi32((int32_t)q), iota), 16));
    /* word j of the 48 is element j / 3's word j % 3 (MM_CPU_A_WORDS: e, sign window, value):
     * e and w by one two-source permute (index 16 + i: w's lane i), then v into the lanes with
     * j % 3 == 2 (vmask) */
    static const int32_t ew[3][16] = {{0, 16, 0, 1, 17, 0, 2, 18, 0, 3, 19, 0, 4, 20, 0, 5},
                                      {21, 0, 6, 22, 0, 7, 23, 0, 8, 24, 0, 9, 25, 0, 10, 26},
                                      {0, 11, 27, 0, 12, 28, 0, 13, 29, 0, 14, 30, 0, 15, 31, 0}};
    static const int32_t el[3][16] = {{0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5},
                                      {5, 5, 6, 6, 6, 7, 7, 7, 8, 8, 8, 9, 9, 9, 10, 10},
                                      {10, 11, 11, 11, 12, 12, 12, 13, 13, 13, 14, 14, 14, 15, 15, 15}};
    static const uint16_t vmask[3] = {0x4924, 0x2492, 0x9249};
    for (int o = 0; o < 3; o++) {
        __m512i out = _mm512_permutex2var_epi32(e, _mm512_loadu_si512((const void*)ew[o]), w);
        out = _mm512_mask_permutexvar_epi32(out, vmask[o], _mm512_loadu_si512((const void*)el[o]), v);
        const int words = 3 * n - 16 * o; /* of this vector's 16, those that are stored */
        if (words >= 16)
            _mm512_storeu_si512((void*)(rec + 16 * o), out);
        else if (words > 0)
            _mm512_mask_storeu_epi32(rec + 16 * o, (__mmask16)((1u << words) - 1u), out);
    }
}

/* The 64 codes from k on (len - k of them, at most 64 read; the rest 0, code +0). */
MM_DEC_INLINE __m512i load_codes(const uint8_t* codes, int64_t len, int64_t k) {
    const int64_t n = len - k;
    if (n >= 64) return _mm512_loadu_si512((const void*)(codes + k));
    if (n <= 0) return _mm512_setzero_si512();
    return _mm512_maskz_loadu_epi8((__mmask64)((1ull << n) - 1ull), codes + k);
}

MM_DEC int mm_cpu_decode_a_row_avx512(const uint8_t* codes, int64_t len, const mm_cpu_a_tables* t, int32_t* row) {
    __m512i x = load_codes(codes, len, 0);
    uint64_t pos = in_set(x, t->pos), neg = in_set(x, t->neg), special = 0;
    for (int64_t k = 0; k < len; k += 64) {
        const __m512i next = load_codes(codes, len, k + 64);
        const uint64_t pos_next = in_set(next, t->pos), neg_next = in_set(next, t->neg);
        special |= in_set(x, t->special);
        for (int i = 0; i < 64 && k + i < len; i += 16) {
            const __m128i part = i == 0 ? _mm512_extracti32x4_epi32(x, 0)
                               : i == 16 ? _mm512_extracti32x4_epi32(x, 1)
                               : i == 32 ? _mm512_extracti32x4_epi32(x, 2)
                                         : _mm512_extracti32x4_epi32(x, 3);
            const int64_t n = len - (k + i) < 16 ? len - (k + i) : 16;
            store_records(row + MM_CPU_A_WORDS * (k + i), (int)n, _mm512_cvtepu8_epi32(part),
                          mask_bits(pos, pos_next, i), mask_bits(neg, neg_next, i), t);
        }
        x = next;
        pos = pos_next;
        neg = neg_next;
    }
    return special != 0;
}

#else
int mm_cpu_decode_a_row_avx512(const uint8_t* codes, int64_t len, const mm_cpu_a_tables* t, int32_t* row) {
    (void)codes, (void)len, (void)t, (void)row;
    return 0; /* never called: mm_cpu_decode_avx512_runs() is 0 here */
}
#endif
