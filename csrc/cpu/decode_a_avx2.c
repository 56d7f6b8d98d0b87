/* decode_a_avx2.c: rows of A decoded 8 k at a time with AVX2, where the CPU lacks AVX-512.
 *
 * The steps of decode_a_avx512.c on 256-bit vectors, from the same tables (mm_cpu_lut_make's,
 * mm_cpu_a_tables), so the words are the scalar decoder's by construction:
 *  - a record's A word and value: two gathers from the tables, indexed by the codes;
 *  - the sign windows: the row's positive and negative elements as bit masks, 32 codes at a
 *    time (the set's byte by a byte shuffle of each 16-byte half of the set, chosen by a blend;
 *    the bit by another shuffle; vpmovmskb), each element's window by a variable shift;
 *  - the three words of 8 records interleaved by one permute of each source and two blends
 *    (AVX2 has no two-source permute), stored as 24 words.
 * test/c/cpu_decode_check.c checks the rows word for word against the tables.
 *
 * Compiled with a target attribute; the driver calls it only where the CPU has AVX2. */
#include <string.h>

#include "cpu.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>

#define MM_DEC __attribute__((target("avx2")))
#define MM_DEC_INLINE __attribute__((target("avx2"), always_inline)) static inline

/* The lanes of 32 codes x that belong to the 256-bit set, one bit each: bit x % 8 of byte x / 8. */
MM_DEC_INLINE uint32_t in_set(__m256i x, const uint8_t set[32]) {
    const __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)(const void*)set));
    const __m256i hi = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)(const void*)(set + 16)));
    const __m256i byte = _mm256_and_si256(_mm256_srli_epi16(x, 3), _mm256_set1_epi8(0x1F)); /* x / 8 */
    /* bytes 16 to 31 of the set where x / 8 has bit 4 (moved to the blend's bit 7; each byte
     * is at most 31, so the 16-bit shift carries nothing into its neighbour) */
    const __m256i b = _mm256_blendv_epi8(_mm256_shuffle_epi8(lo, byte), _mm256_shuffle_epi8(hi, byte),
                                         _mm256_slli_epi16(byte, 3));
    const __m256i bits = _mm256_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128,
                                          1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
    const __m256i bit = _mm256_shuffle_epi8(bits, _mm256_and_si256(x, _mm256_set1_epi8(7))); /* 1 << x % 8 */
    const __m256i absent = _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), _mm256_setzero_si256());
    return ~(uint32_t)_mm256_movemask_epi8(absent);
}

/* 8 records from rec on (n <= 8 of them stored): the A words and values of codes c (8 as int32
 * lanes) and the sign windows of positive bits p and negative bits q (bit i: element i of the 8
 * and on; at least 23 bits). */
MM_DEC_INLINE void store_records(int32_t* rec, int n, __m256i c, uint32_t p, uint32_t q, const mm_cpu_a_tables* t) {
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i e = _mm256_i32gather_epi32((const int*)(const void*)t->word, c, 4);
    const __m256i v = _mm256_i32gather_epi32((const int*)(const void*)t->value, c, 4);
    /* window: bits 0..15 the positive bits from the element on, 16..31 the negative ones */
    const __m256i pw = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int32_t)p), iota), _mm256_set1_epi32(0xFFFF));
    const __m256i w = _mm256_or_si256(pw, _mm256_slli_epi32(_mm256_srlv_epi32(_mm256_set1_epi32((int32_t)q), iota), 16));
    /* word j of the 24 is element j / 3's word j % 3 (MM_CPU_A_WORDS: e, sign window, value):
     * the element of each lane from all three sources, then the window's and the value's lanes
     * blended in */
    static const int32_t element[3][8] = {{0, 0, 0, 1, 1, 1, 2, 2}, {2, 3, 3, 3, 4, 4, 4, 5}, {5, 5, 6, 6, 6, 7, 7, 7}};
    for (int o = 0; o < 3; o++) {
        const __m256i idx = _mm256_loadu_si256((const __m256i*)(const void*)element[o]);
        const __m256i pe = _mm256_permutevar8x32_epi32(e, idx), pwin = _mm256_permutevar8x32_epi32(w, idx);
        const __m256i pv = _mm256_permutevar8x32_epi32(v, idx);
        __m256i out;
        if (o == 0) out = _mm256_blend_epi32(_mm256_blend_epi32(pe, pwin, 0x92), pv, 0x24);
        else if (o == 1) out = _mm256_blend_epi32(_mm256_blend_epi32(pe, pwin, 0x24), pv, 0x49);
        else out = _mm256_blend_epi32(_mm256_blend_epi32(pe, pwin, 0x49), pv, 0x92);
        const int words = 3 * n - 8 * o; /* of this vector's 8, those that are stored */
        if (words >= 8) {
            _mm256_storeu_si256((__m256i*)(void*)(rec + 8 * o), out);
        } else if (words > 0) {
            const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(words), iota);
            _mm256_maskstore_epi32((int*)(void*)(rec + 8 * o), live, out);
        }
    }
}

/* The 32 codes from k on (len - k of them, at most 32 read; the rest 0, code +0). */
MM_DEC_INLINE __m256i load_codes(const uint8_t* codes, int64_t len, int64_t k) {
    const int64_t n = len - k;
    if (n >= 32) return _mm256_loadu_si256((const __m256i*)(const void*)(codes + k));
    uint8_t part[32] = {0};
    if (n > 0) memcpy(part, codes + k, (size_t)n);
    return _mm256_loadu_si256((const __m256i*)(const void*)part);
}

MM_DEC int mm_cpu_decode_a_row_avx2(const uint8_t* codes, int64_t len, const mm_cpu_a_tables* t, int32_t* row) {
    __m256i x = load_codes(codes, len, 0);
    uint64_t pos = in_set(x, t->pos), neg = in_set(x, t->neg);
    uint32_t special = 0;
    for (int64_t k = 0; k < len; k += 32) {
        const __m256i next = load_codes(codes, len, k + 32);
        /* the masks of these 32 codes and the next 32: a window reaches 15 elements on */
        pos |= (uint64_t)in_set(next, t->pos) << 32;
        neg |= (uint64_t)in_set(next, t->neg) << 32;
        special |= in_set(x, t->special);
        for (int i = 0; i < 32 && k + i < len; i += 8) {
            const __m128i half = i < 16 ? _mm256_castsi256_si128(x) : _mm256_extracti128_si256(x, 1);
            const __m128i part = i % 16 ? _mm_srli_si128(half, 8) : half;
            const int64_t n = len - (k + i) < 8 ? len - (k + i) : 8;
            store_records(row + MM_CPU_A_WORDS * (k + i), (int)n, _mm256_cvtepu8_epi32(part),
                          (uint32_t)(pos >> i), (uint32_t)(neg >> i), t);
        }
        x = next;
        pos >>= 32;
        neg >>= 32;
    }
    return special != 0;
}

#else
int mm_cpu_decode_a_row_avx2(const uint8_t* codes, int64_t len, const mm_cpu_a_tables* t, int32_t* row) {
    (void)codes, (void)len, (void)t, (void)row;
    return 0; /* never called: the driver calls it only where the CPU has AVX2 */
}
#endif
