/* decode_b_avx2.c: B panels of the SIMD kernels decoded 32 k at a time with AVX2.
 *
 * The scalar decoder (decode.c, mm_cpu_decode_b_panel) takes a table lookup and two stores per
 * element: at small M, where each B element serves few products, that was most of a GEMM's time
 * (at M = 1 about nine tenths). Here a sign group (32 k) of the panel is decoded from 32 columns
 * of codes at once: each column's 32 codes are one vector, whose compares give its sign words and
 * its NaN/Inf flag; a byte transpose turns the columns into the 32 records, in the kernels' byte
 * order (cpu.h, MM_CPU_BYTES_WORDS); each record's exponent bytes and fp32 values come from
 * its codes by shifts, masks and one exact multiply. The results are the scalar decoder's, bit for
 * bit (mm_cpu_lut_make with no bias and no enlargement, B's decoding): zeros and NaN/Inf codes decode as
 * +0 with a zero exponent code and no sign bits, as there.
 *
 * No floating-point instruction here reads a subnormal fp32, which costs a microcode assist on
 * x86 (benchmarks/results/cpu.md: GEMMs many times slower at small M on operands with many
 * subnormal codes). The
 * multiply above reads one for each subnormal code, so where a group's columns hold one, each
 * record's half (32 codes) that does takes subnormal_values instead; test/c/cpu_decode_check.c
 * decodes with DAZ set, under which such an operand would read as zero.
 *
 * Compiled with a target attribute; the driver calls it only when the CPU reports avx2. */
#include "cpu.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>

#define MM_DEC __attribute__((target("avx2")))
#define MM_DEC_INLINE __attribute__((target("avx2"), always_inline)) static inline
/* Bytes ahead in each column's codes to prefetch: 64 columns read 32 bytes at a time outran the
 * hardware prefetcher (128 the best of 64 to 256 at M = 1; benchmarks/results/cpu.md). */
#ifndef MM_DEC_PREFETCH
#define MM_DEC_PREFETCH 128
#endif

/* A 16 x 16 byte transpose in each 128-bit lane: row i's byte j goes to row j's byte i. Four
 * rounds of the perfect shuffle (rows i and i + 8 interleaved byte by byte). */
MM_DEC_INLINE void transpose16(__m256i x[16]) {
    for (int round = 0; round < 4; round++) {
        __m256i y[16];
        for (int i = 0; i < 8; i++) {
            y[2 * i] = _mm256_unpacklo_epi8(x[i], x[i + 8]);
            y[2 * i + 1] = _mm256_unpackhi_epi8(x[i], x[i + 8]);
        }
        for (int i = 0; i < 16; i++) x[i] = y[i];
    }
}

/* The fp32 values of codes whose sign and 7 magnitude bits sit in bits as an fp32's (exponent
 * field = the code's, fraction = its mantissa; store_half), without reading a subnormal fp32:
 * with the field raised by 128 - bias the word u is a normal fp32, twice the value for a normal
 * code; for a code of field 0 (subnormal or zero) it is the value plus the implicit one, 2^(1 -
 * bias) with the code's sign, and subtracting that is exact (both of one sign, u within twice
 * it): +0 for a zero. */
MM_DEC_INLINE __m256 subnormal_values(__m256i bits, int bias) {
    const __m256i raise = _mm256_set1_epi32((128 - bias) << 23);
    const __m256 u = _mm256_castsi256_ps(_mm256_add_epi32(bits, raise));
    /* u's sign and exponent: for field 0, 2^(1 - bias) with the code's sign */
    const __m256 one = _mm256_and_ps(u, _mm256_castsi256_ps(_mm256_set1_epi32((int32_t)0xFF800000u)));
    const __m256i field0 =
        _mm256_cmpeq_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7F800000)), _mm256_setzero_si256());
    return _mm256_blendv_ps(_mm256_mul_ps(u, _mm256_set1_ps(0.5f)), _mm256_sub_ps(u, one), _mm256_castsi256_ps(field0));
}

/* The fp32 values of one record's half h (store_half) from its codes R. subnormals: R holds a
 * subnormal code (file comment). */
MM_DEC_INLINE void store_values(__m256i R, int e4m3, int q, int h, int32_t* rec, const int subnormals) {
    const int man_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
    /* The code's sign and 7 magnitude bits placed as an fp32's sign, exponent and fraction
     * (exponent field = the code's, fraction = its mantissa) make the value times 2^-(127 - bias),
     * normal and subnormal alike; the multiply by 2^(127 - bias) is exact. */
    const int shift = 1 + man_bits; /* the code's bits 0..6 to fp32 bits 23 - man_bits .. 29 - man_bits */
    const __m256i keep = _mm256_set1_epi32((int32_t)(0x80000000u | (0x7Fu << (23 - man_bits))));
    const __m256 unit = _mm256_castsi256_ps(_mm256_set1_epi32((127 + 127 - bias) << 23));
    mm_cpu_f32* values = mm_cpu_values(rec + q);
    for (int v = 0; v < 4; v++) {
        /* byte v of each word to bits 24..31, then an arithmetic shift: sign copies above it */
        const __m256i top = v == 3 ? R : _mm256_slli_epi32(R, 24 - 8 * v);
        const __m256i bits = _mm256_and_si256(_mm256_srai_epi32(top, shift), keep);
        _mm256_storeu_ps(values + q * v + 8 * h,
                         subnormals ? subnormal_values(bits, bias) : _mm256_mul_ps(_mm256_castsi256_ps(bits), unit));
    }
}

/* One record's half h (32 columns in the kernels' byte order) from its 32 codes R (zeros and
 * NaN/Inf already 0): the exponent bytes (coded: e + MM_CPU_E_CODE_OFFSET, e the alignment
 * exponent, clamped to emin for subnormals; 0 for a zero) and the fp32 values of the columns
 * q v + 8 h + l, byte v of R's word l. subnormals: the group's half may hold subnormal codes. */
MM_DEC_INLINE void store_half(__m256i R, int e4m3, int q, int h, int32_t* rec, const int subnormals) {
    const int man_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
    const __m256i field = _mm256_and_si256(_mm256_srli_epi16(R, man_bits), _mm256_set1_epi8(e4m3 ? 0x0F : 0x1F));
    const __m256i e = _mm256_add_epi8(_mm256_max_epu8(field, _mm256_set1_epi8(1)),
                                      _mm256_set1_epi8((char)(MM_CPU_E_CODE_OFFSET - bias)));
    const __m256i zero = _mm256_cmpeq_epi8(R, _mm256_setzero_si256());
    _mm256_storeu_si256((__m256i*)(void*)((uint8_t*)(void*)rec + 32 * h), _mm256_andnot_si256(zero, e));
    /* a subnormal code: field 0, not a zero (testc: whether every field-0 byte is a zero) */
    if (subnormals && !_mm256_testc_si256(zero, _mm256_cmpeq_epi8(field, _mm256_setzero_si256())))
        store_values(R, e4m3, q, h, rec, 1);
    else
        store_values(R, e4m3, q, h, rec, 0);
}

/* The 32 records of a group's half h from its half-transposed rows (store_half). */
MM_DEC_INLINE void store_records(__m256i rows[2][16], int e4m3, int q, int h, int32_t* rec, int64_t stride,
                                 const int subnormals) {
    /* row j of each half-transpose: k = j in its low lane, k = 16 + j in its high lane */
    for (int j = 0; j < 16; j++) {
        store_half(_mm256_permute2x128_si256(rows[0][j], rows[1][j], 0x20), e4m3, q, h, rec + j * stride, subnormals);
        store_half(_mm256_permute2x128_si256(rows[0][j], rows[1][j], 0x31), e4m3, q, h, rec + (16 + j) * stride,
                   subnormals);
    }
}

/* The group's 32 records from rec on (stride MM_CPU_PANEL_STRIDE(w)), its sign words (group:
 * w positive words, then w negative; NULL: none) and col_special[c] |= a NaN/Inf code in
 * column c; cols[c]: column c's 32 codes; e4m3: the format (else E5M2), a constant. */
MM_DEC_INLINE void decode_group(const uint8_t* const* cols, int w, const int e4m3, int32_t* rec, uint32_t* group,
                                uint8_t* col_special) {
    const int64_t stride = MM_CPU_PANEL_STRIDE(w);
    const int q = w / 4;
    const __m256i low7 = _mm256_set1_epi8(0x7F);
    /* subnormal: magnitude 1 to 7 (E4M3) or 1 to 3 (E5M2), i.e. above 127 - that as a signed
     * byte after this add (a zero stays at it, a normal code wraps negative) */
    const __m256i sub_shift = _mm256_set1_epi8((char)(127 - (e4m3 ? 7 : 3)));
    for (int h = 0; h < w / 32; h++) {
        /* rows in the order of the records' bytes: byte p = 4 l + v of a record's half h holds
         * column q v + 8 h + l (MM_CPU_BYTES_WORDS) */
        __m256i rows[2][16];
        __m256i sub_top = sub_shift;
        for (int p = 0; p < 32; p++) {
            const int c = q * (p % 4) + 8 * h + p / 4;
            const __m256i x = _mm256_loadu_si256((const __m256i*)(const void*)cols[c]);
            _mm_prefetch((const char*)cols[c] + MM_DEC_PREFETCH, _MM_HINT_T0);
            const __m256i mag = _mm256_and_si256(x, low7);
            /* NaN/Inf: magnitude 0x7F (E4M3), 0x7C and up (E5M2) */
            const __m256i special = e4m3 ? _mm256_cmpeq_epi8(mag, low7)
                                         : _mm256_cmpeq_epi8(_mm256_max_epu8(mag, _mm256_set1_epi8(0x7C)), mag);
            const __m256i dead = _mm256_or_si256(special, _mm256_cmpeq_epi8(mag, _mm256_setzero_si256()));
            if (group) {
                const uint32_t live = ~(uint32_t)_mm256_movemask_epi8(dead), sign = (uint32_t)_mm256_movemask_epi8(x);
                group[c] = live & ~sign;
                group[w + c] = live & sign;
            }
            col_special[c] |= (uint8_t)(_mm256_movemask_epi8(special) != 0);
            rows[p / 16][p % 16] = _mm256_andnot_si256(dead, x);
            sub_top = _mm256_max_epi8(sub_top, _mm256_add_epi8(mag, sub_shift));
        }
        transpose16(rows[0]);
        transpose16(rows[1]);
        if (_mm256_movemask_epi8(_mm256_cmpgt_epi8(sub_top, sub_shift)))
            store_records(rows, e4m3, q, h, rec, stride, 1);
        else
            store_records(rows, e4m3, q, h, rec, stride, 0);
    }
}

MM_DEC int mm_cpu_decode_b_group_avx2(const uint8_t* const* cols, int w, int fmt, int32_t* rec, uint32_t* group,
                                      uint8_t* col_special) {
    if ((w != 32 && w != 64) || (fmt != MM_FMT_E4M3 && fmt != MM_FMT_E5M2)) return 0;
    /* the format a constant in each body: shifts and masks as immediates, one compare for E4M3's
     * NaN (benchmarks/results/cpu.md) */
    if (fmt == MM_FMT_E4M3)
        decode_group(cols, w, 1, rec, group, col_special);
    else
        decode_group(cols, w, 0, rec, group, col_special);
    return 1;
}

#else
int mm_cpu_decode_b_group_avx2(const uint8_t* const* cols, int w, int fmt, int32_t* rec, uint32_t* group,
                               uint8_t* col_special) {
    (void)cols, (void)w, (void)fmt, (void)rec, (void)group, (void)col_special;
    return 0;
}
#endif
