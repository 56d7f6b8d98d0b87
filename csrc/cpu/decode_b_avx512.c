/* decode_b_avx512.c: the AVX-512 kernel's B panels (64 columns) decoded 32 k at a time with
 * AVX-512 (F + BW).
 *
 * The AVX2 decoder (decode_b_avx2.c) at twice the width: each 512-bit vector holds two
 * columns' 32 codes (one of each 32-column half of the panel), so the compares, the byte
 * transpose and the value arithmetic take half the instructions per element; the masks come
 * straight from compares into mask registers. Everything else is that file's, and so are the
 * results, byte for byte: the scalar decoder's panels (test/c/cpu_decode_check.c checks both
 * decoders, with and without DAZ). No floating-point instruction reads a subnormal fp32 (see
 * decode_b_avx2.c: a record whose codes hold a subnormal forms its values by an exact
 * subtraction).
 *
 * Compiled with a target attribute; the driver calls it only where mm_cpu_decode_avx512_runs()
 * (the CPU's own flags, not the driver's mm_cpu_has, which test builds point at SIMDe). */
#include "cpu.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>

#define MM_DEC __attribute__((target("avx512f,avx512bw")))
#define MM_DEC_INLINE __attribute__((target("avx512f,avx512bw"), always_inline)) static inline
/* as decode_b_avx2.c */
#ifndef MM_DEC_PREFETCH
#define MM_DEC_PREFETCH 128
#endif

enum { W = 64, Q = W / 4, STRIDE = MM_CPU_PANEL_STRIDE(W) };

/* A 16 x 16 byte transpose in each 128-bit lane (decode_b_avx2.c's transpose16). */
MM_DEC_INLINE void transpose16(__m512i x[16]) {
    for (int round = 0; round < 4; round++) {
        __m512i y[16];
        for (int i = 0; i < 8; i++) {
            y[2 * i] = _mm512_unpacklo_epi8(x[i], x[i + 8]);
            y[2 * i + 1] = _mm512_unpackhi_epi8(x[i], x[i + 8]);
        }
        for (int i = 0; i < 16; i++) x[i] = y[i];
    }
}

/* One record (64 columns in the kernels' byte order: byte 4 l + v is column Q v + l) from its
 * codes R (zeros and NaN/Inf already 0): the exponent bytes and the fp32 values, as
 * decode_b_avx2.c's store_half; subnormals: the group may hold subnormal codes. */
MM_DEC_INLINE void store_record(__m512i R, const int e4m3, int32_t* rec, const int subnormals) {
    const int man_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
    const __m512i field = _mm512_and_si512(_mm512_srli_epi16(R, man_bits), _mm512_set1_epi8(e4m3 ? 0x0F : 0x1F));
    const __m512i e = _mm512_add_epi8(_mm512_max_epu8(field, _mm512_set1_epi8(1)),
                                      _mm512_set1_epi8((char)(MM_CPU_E_CODE_OFFSET - bias)));
    const __mmask64 live = _mm512_test_epi8_mask(R, R);
    _mm512_storeu_si512((void*)rec, _mm512_maskz_mov_epi8(live, e));
    /* a subnormal code: field 0, not a zero */
    const int exact = subnormals && (_mm512_testn_epi8_mask(field, field) & live) != 0;
    const int shift = 1 + man_bits; /* the code's bits 0..6 to fp32 bits 23 - man_bits .. 29 - man_bits */
    const __m512i keep = _mm512_set1_epi32((int32_t)(0x80000000u | (0x7Fu << (23 - man_bits))));
    const __m512 unit = _mm512_castsi512_ps(_mm512_set1_epi32((127 + 127 - bias) << 23));
    const __m512i raise = _mm512_set1_epi32((128 - bias) << 23);
    mm_cpu_f32* values = mm_cpu_values(rec + Q);
    for (int v = 0; v < 4; v++) {
        /* byte v of each word to bits 24..31, then an arithmetic shift: sign copies above it */
        const __m512i top = v == 3 ? R : _mm512_slli_epi32(R, 24 - 8 * v);
        const __m512i bits = _mm512_and_si512(_mm512_srai_epi32(top, shift), keep);
        __m512 value;
        if (exact) { /* decode_b_avx2.c's subnormal_values */
            const __m512 u = _mm512_castsi512_ps(_mm512_add_epi32(bits, raise));
            const __m512i sign_exponent = _mm512_set1_epi32((int32_t)0xFF800000u);
            const __m512 one = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(u), sign_exponent));
            const __mmask16 field0 = _mm512_testn_epi32_mask(bits, _mm512_set1_epi32(0x7F800000));
            value = _mm512_mask_sub_ps(_mm512_mul_ps(u, _mm512_set1_ps(0.5f)), field0, u, one);
        } else {
            value = _mm512_mul_ps(_mm512_castsi512_ps(bits), unit);
        }
        _mm512_storeu_ps(values + Q * v, value);
    }
}

/* The 32 records of the group from its half-transposed rows (store_record). */
MM_DEC_INLINE void store_records(__m512i rows[2][16], const int e4m3, int32_t* rec, const int subnormals) {
    /* Row j of each half-transpose: 128-bit lane 0 holds half 0's codes at k = j, lane 1 at
     * k = 16 + j, lanes 2 and 3 half 1's; a record is half 0 (rows[0], then rows[1]) and half 1. */
    const __m512i at_j = _mm512_set_epi64(13, 12, 5, 4, 9, 8, 1, 0);
    const __m512i at_16j = _mm512_set_epi64(15, 14, 7, 6, 11, 10, 3, 2);
    for (int j = 0; j < 16; j++) {
        store_record(_mm512_permutex2var_epi64(rows[0][j], at_j, rows[1][j]), e4m3, rec + j * STRIDE, subnormals);
        store_record(_mm512_permutex2var_epi64(rows[0][j], at_16j, rows[1][j]), e4m3, rec + (16 + j) * STRIDE,
                     subnormals);
    }
}

/* The group's 32 records from rec on, its sign words (group: 64 positive words, then 64
 * negative; NULL: none) and col_special[c] |= a NaN/Inf code in column c; cols[c]: column c's
 * 32 codes; e4m3: the format (else E5M2), a constant. */
MM_DEC_INLINE void decode_group(const uint8_t* const* cols, const int e4m3, int32_t* rec, uint32_t* group,
                                uint8_t* col_special) {
    const __m512i low7 = _mm512_set1_epi8(0x7F);
    /* subnormal: as decode_b_avx2.c (a signed maximum past 127 - the largest subnormal) */
    const __m512i sub_shift = _mm512_set1_epi8((char)(127 - (e4m3 ? 7 : 3)));
    __m512i rows[2][16];
    __m512i sub_top = sub_shift;
    for (int p = 0; p < 32; p++) {
        /* vector p: byte p of half 0's records (column Q v + l, p = 4 l + v) in its low 256 bits,
         * of half 1's (that column + 8) in its high 256 */
        const int c = Q * (p % 4) + p / 4;
        const __m256i lo = _mm256_loadu_si256((const __m256i*)(const void*)cols[c]);
        const __m256i hi = _mm256_loadu_si256((const __m256i*)(const void*)cols[c + 8]);
        _mm_prefetch((const char*)cols[c] + MM_DEC_PREFETCH, _MM_HINT_T0);
        _mm_prefetch((const char*)cols[c + 8] + MM_DEC_PREFETCH, _MM_HINT_T0);
        const __m512i x = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        const __m512i mag = _mm512_and_si512(x, low7);
        /* NaN/Inf: magnitude 0x7F (E4M3), 0x7C and up (E5M2) */
        const __mmask64 special = e4m3 ? _mm512_cmpeq_epi8_mask(mag, low7)
                                       : _mm512_cmpge_epu8_mask(mag, _mm512_set1_epi8(0x7C));
        const __mmask64 live = _mm512_test_epi8_mask(x, low7) & ~special;
        if (group) {
            const __mmask64 negative = _mm512_movepi8_mask(x);
            const uint64_t pos = live & ~negative, neg = live & negative;
            group[c] = (uint32_t)pos;
            group[c + 8] = (uint32_t)(pos >> 32);
            group[W + c] = (uint32_t)neg;
            group[W + c + 8] = (uint32_t)(neg >> 32);
        }
        col_special[c] |= (uint8_t)((uint32_t)special != 0);
        col_special[c + 8] |= (uint8_t)((special >> 32) != 0);
        rows[p / 16][p % 16] = _mm512_maskz_mov_epi8(live, x);
        sub_top = _mm512_max_epi8(sub_top, _mm512_add_epi8(mag, sub_shift));
    }
    transpose16(rows[0]);
    transpose16(rows[1]);
    if (_mm512_cmpgt_epi8_mask(sub_top, sub_shift))
        store_records(rows, e4m3, rec, 1);
    else
        store_records(rows, e4m3, rec, 0);
}

MM_DEC static int decode_group_any(const uint8_t* const* cols, int fmt, int32_t* rec, uint32_t* group,
                                   uint8_t* col_special) {
    if (fmt == MM_FMT_E4M3)
        decode_group(cols, 1, rec, group, col_special);
    else
        decode_group(cols, 0, rec, group, col_special);
    return 1;
}

int mm_cpu_decode_avx512_runs(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}

int mm_cpu_decode_b_group_avx512(const uint8_t* const* cols, int w, int fmt, int32_t* rec, uint32_t* group,
                                 uint8_t* col_special) {
    if (w != W || (fmt != MM_FMT_E4M3 && fmt != MM_FMT_E5M2)) return 0;
    return decode_group_any(cols, fmt, rec, group, col_special);
}

#else
int mm_cpu_decode_avx512_runs(void) { return 0; }

int mm_cpu_decode_b_group_avx512(const uint8_t* const* cols, int w, int fmt, int32_t* rec, uint32_t* group,
                                 uint8_t* col_special) {
    (void)cols, (void)w, (void)fmt, (void)rec, (void)group, (void)col_special;
    return 0;
}
#endif
