/* decode.c: the decoding tables of a format and the decoders of the driver: A's rows and B's
 * panels into the layouts of cpu.h, by the SIMD decoders where the CPU has them (decode_a_*.c,
 * decode_b_*.c), which write the same words as the scalar loops here. */
#include <string.h>

#include "driver.h"

void mm_cpu_lut_make(mm_cpu_lut* t, int fmt, int bias, int e_code, int enlarge) {
    const float grow = 1.0f + mm_bits_f32((uint32_t)(127 - MM_CPU_RZ_ENLARGE) << 23);
    t->fmt = fmt;
    t->simd_b = bias == 0 && !enlarge && e_code == MM_CPU_E_CODED;
    for (int code = 0; code < 256; code++) {
        const mm_fp8 d = mm_decode_fp8((uint8_t)code, fmt);
        t->special[code] = d.cls == MM_CLS_NAN || d.cls == MM_CLS_INF;
        const int finite = d.cls == MM_CLS_FINITE;
        t->pos[code] = (uint8_t)(finite && !d.sign);
        t->neg[code] = (uint8_t)(finite && d.sign);
        if (!finite) {
            t->e[code] = e_code == MM_CPU_E_CODED ? 0 : MM_CPU_ZERO_EXP;
            t->v[code] = 0.0f;
        } else {
            float mag = (float)d.m * mm_bits_f32((uint32_t)(127 + d.lsb - bias) << 23);
            if (enlarge) mag = mag * grow; /* exact: 4 significant bits times 1 + 2^-23 */
            t->e[code] = e_code == MM_CPU_E_CODED ? d.e + MM_CPU_E_CODE_OFFSET : d.e;
            t->v[code] = d.sign ? -mag : mag;
        }
    }
    memset(&t->a, 0, sizeof t->a);
    for (int code = 0; code < 256; code++) {
        t->a.word[code] = mm_cpu_a_word(t->e[code]);
        t->a.value[code] = t->v[code];
        t->a.pos[code / 8] |= (uint8_t)(t->pos[code] << (code % 8));
        t->a.neg[code / 8] |= (uint8_t)(t->neg[code] << (code % 8));
        t->a.special[code / 8] |= (uint8_t)(t->special[code] << (code % 8));
    }
    t->avx512 = mm_cpu_decode_avx512_runs(); /* asked once per table, not per row or panel */
    t->avx2 = mm_cpu_has("avx2");
}

/* Each record's sign window (cpu.h) is built from the end of the row backwards. */
void mm_cpu_decode_a(const mm_gemm* g, const mm_cpu_lut* t, int64_t i0, int64_t i1, int64_t k0, int64_t k1,
                     int32_t* out, uint8_t* row_special) {
    const int64_t len = k1 - k0;
    for (int64_t i = i0; i < i1; i++) {
        int32_t* row = out + i * mm_cpu_a_stride(len);
        if ((t->avx512 || t->avx2) && i < g->M) { /* the same words (decode_a_avx512.c, decode_a_avx2.c) */
            const uint8_t* codes = g->a + i * g->lda + k0;
            row_special[i] |= (uint8_t)(t->avx512 ? mm_cpu_decode_a_row_avx512(codes, len, &t->a, row)
                                                  : mm_cpu_decode_a_row_avx2(codes, len, &t->a, row));
            continue;
        }
        uint8_t special = 0;
        uint32_t window = 0;
        const uint8_t* src = i < g->M ? g->a + i * g->lda + k0 : NULL;
        for (int64_t k = len - 1; k >= 0; k--) {
            const int code = src ? src[k] : 0; /* code 0 is +0 in both formats */
            int32_t* rec = row + MM_CPU_A_WORDS * k;
            window = ((window << 1) & 0xFFFEFFFEu) | t->pos[code] | (uint32_t)t->neg[code] << 16;
            rec[0] = mm_cpu_a_word(t->e[code]);
            rec[MM_CPU_A_SGN] = (int32_t)window;
            rec[MM_CPU_A_V] = (int32_t)mm_f32_bits(t->v[code]);
            special |= t->special[code];
        }
        row_special[i] |= special;
    }
}

/* One B code into its panel record: its exponent byte and value; returns whether it is NaN/Inf. */
static inline uint8_t decode_b_code(const mm_cpu_lut* t, uint8_t code, mm_cpu_i8* e, mm_cpu_f32* v) {
    *e = (int8_t)t->e[code];
    *v = t->v[code];
    return t->special[code];
}

void mm_cpu_decode_b_panel(const mm_gemm* g, const mm_cpu_lut* t, int64_t j0, int w, int order, int paired,
                           int64_t k0, int64_t k1, const mm_cpu_panel* pn, uint8_t* col_special) {
    int32_t* panel = pn->rec;
    const int64_t len = k1 - k0, stride = MM_CPU_PANEL_STRIDE(w);
    const uint8_t* src[64] = {0};
    uint8_t pos[64] = {0}; /* column c's byte in the exponent plane */
    int real = 0; /* columns j0 .. j0 + real - 1 exist */
    for (int c = 0; c < w; c++) {
        pos[c] = (uint8_t)mm_cpu_byte_pos(c, w, order);
        col_special[c] = 0;
        if (j0 + c < g->N) {
            src[c] = g->b + (j0 + c) * g->ldb + k0;
            real = c + 1;
        }
    }
    /* By groups of MM_CPU_SIGN_SPAN k, and in a group column by column: a column's sign words
     * gather in registers, and its stores stay within the group's records, in L1 (column by
     * column across all of K, every store lands in another cache line of the panel). */
    static const uint8_t zeros[MM_CPU_SIGN_SPAN]; /* code 0 (+0): the columns from N on */
    /* whole groups of the SIMD kernels' panels: AVX-512's 64 columns where the CPU has it
     * (decode_b_avx512.c), else AVX2, 32 columns at a time (decode_b_avx2.c) */
    const int simd = order == MM_CPU_BYTES_WORDS && t->simd_b && t->avx2;
    const int simd512 = simd && w == 64 && t->avx512;
    for (int64_t kg = 0; kg < len; kg += MM_CPU_SIGN_SPAN) {
        const int span = (int)(len - kg < MM_CPU_SIGN_SPAN ? len - kg : MM_CPU_SIGN_SPAN);
        int32_t* rec = panel + kg * stride;
        uint32_t* group = pn->sign ? pn->sign + kg / MM_CPU_SIGN_SPAN * MM_CPU_SIGN_GROUP_WORDS(w) : NULL;
        if (simd && span == MM_CPU_SIGN_SPAN) {
            const uint8_t* cols[64];
            for (int c = 0; c < w; c++) cols[c] = c < real ? src[c] + kg : zeros;
            if ((simd512 && mm_cpu_decode_b_group_avx512(cols, w, t->fmt, rec, group, col_special)) ||
                mm_cpu_decode_b_group_avx2(cols, w, t->fmt, rec, group, col_special)) {
                if (group && paired) mm_cpu_sign_paired(group, w);
                continue;
            }
        }
        for (int c = 0; c < w; c++) {
            const uint8_t* col = c < real ? src[c] + kg : zeros;
            mm_cpu_i8* pe = (mm_cpu_i8*)(void*)rec + pos[c];
            mm_cpu_f32* pv = mm_cpu_values(rec + MM_CPU_PANEL_V(w)) + c;
            uint8_t special = 0;
            if (group) {
                uint32_t positive = 0, negative = 0;
                for (int i = 0; i < span; i++) {
                    const uint8_t code = col[i];
                    special |= decode_b_code(t, code, pe + i * 4 * stride, pv + i * stride);
                    positive |= (uint32_t)t->pos[code] << i;
                    negative |= (uint32_t)t->neg[code] << i;
                }
                group[c] = positive;
                group[w + c] = negative;
            } else {
                for (int i = 0; i < span; i++)
                    special |= decode_b_code(t, col[i], pe + i * 4 * stride, pv + i * stride);
            }
            col_special[c] |= special;
        }
        if (group && paired) mm_cpu_sign_paired(group, w);
    }
}
