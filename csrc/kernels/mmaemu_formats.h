/* mmaemu_formats.h: FP8 decoding and fp32 -> output-format rounding.
 *
 * FP8 encodings follow the OCP 8-bit spec (E4M3FN: bias 7, no Inf, NaN = S.1111.111;
 * E5M2: bias 15, Inf = S.11111.00, NaN = S.11111.{01,10,11}). A decoded value is
 * m * 2^lsb with an integer significand m (hidden bit included for normals). */
#ifndef MMAEMU_FORMATS_H
#define MMAEMU_FORMATS_H

#include "mmaemu_base.h"

enum { MM_FMT_E4M3 = 0, MM_FMT_E5M2 = 1 };
enum { MM_OUT_F32 = 0, MM_OUT_BF16 = 1, MM_OUT_F16 = 2, MM_OUT_E4M3 = 3, MM_OUT_E5M2 = 4 };
enum { MM_CLS_ZERO = 0, MM_CLS_FINITE = 1, MM_CLS_INF = 2, MM_CLS_NAN = 3 };

typedef struct {
    int cls;   /* MM_CLS_* */
    int sign;  /* 1 for negative (also for -0, -Inf) */
    int m;     /* integer significand: 0..15 (E4M3), 0..7 (E5M2) */
    int e;     /* alignment exponent: floor(log2|x|), clamped to emin for subnormals */
    int lsb;   /* exponent of the significand's least significant bit: x = m * 2^lsb */
} mm_fp8;

MMAEMU_HD mm_fp8 mm_decode_fp8(uint8_t code, int fmt) {
    mm_fp8 d;
    const int man_bits = fmt == MM_FMT_E4M3 ? 3 : 2;
    const int bias = fmt == MM_FMT_E4M3 ? 7 : 15;
    const int exp_max = fmt == MM_FMT_E4M3 ? 15 : 31;
    const int ex = (code & 0x7F) >> man_bits;
    const int man = code & ((1 << man_bits) - 1);
    d.sign = code >> 7;
    d.cls = MM_CLS_FINITE;
    if (fmt == MM_FMT_E4M3 && ex == exp_max && man == 7) d.cls = MM_CLS_NAN;
    if (fmt == MM_FMT_E5M2 && ex == exp_max) d.cls = man ? MM_CLS_NAN : MM_CLS_INF;
    if (ex == 0) {               /* zero or subnormal: exponent clamped to emin */
        d.m = man;
        d.e = 1 - bias;
        if (man == 0) d.cls = MM_CLS_ZERO;
    } else {
        d.m = (1 << man_bits) | man;
        d.e = ex - bias;
    }
    d.lsb = d.e - man_bits;
    return d;
}

/* fp32 -> bf16, round to nearest even; overflow gives Inf (what cvt.rn.bf16.f32 does;
 * inferred for cuBLASLt's epilogue until probe P8). NaN -> 0x7FFF. */
MMAEMU_HD uint16_t mm_f32_to_bf16(float f) {
    uint32_t u = mm_f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFF;
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* fp32 -> a small binary format (fp16, E4M3, E5M2), round to nearest even, with gradual
 * underflow. man_bits/bias describe the target; max_enc is the largest finite encoding
 * (sign bit excluded); sat = 1 clamps overflow and Inf to max_enc (PTX .satfinite),
 * sat = 0 gives inf_enc. nan_enc is the NaN returned for NaN inputs. */
MMAEMU_HD uint32_t mm_f32_to_small(float f, int man_bits, int bias, uint32_t max_enc,
                                   uint32_t inf_enc, uint32_t nan_enc, int sat, int sign_shift) {
    const uint32_t u = mm_f32_bits(f);
    const uint32_t sign = (u >> 31) << sign_shift;
    const uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return nan_enc;
    if (a == 0x7F800000u) return sign | (sat ? max_enc : inf_enc);
    if (a < 0x00800000u) return sign; /* fp32 subnormals are below half of every target's smallest subnormal */
    const int ex = (int)(a >> 23) - 127;
    const uint32_t sig = (a & 0x7FFFFFu) | 0x800000u;
    const int emin = 1 - bias;
    const int qexp = (ex >= emin ? ex : emin) - man_bits; /* exponent of the target's LSB here */
    const int r = qexp - (ex - 23);                      /* right shift, >= 23 - man_bits */
    uint32_t q;
    if (r >= 25) {
        q = 0;
    } else {
        /* round to nearest even without a branch on the data (which mispredicted on every other
         * output): adding half - 1 plus the kept LSB carries exactly when the rest is above half,
         * or equal to it with an odd LSB */
        q = (sig + (1u << (r - 1)) - 1u + ((sig >> r) & 1u)) >> r;
    }
    const uint64_t enc = ex >= emin ? ((uint64_t)(ex + bias - 1) << man_bits) + q : q;
    const uint32_t over = sat ? max_enc : inf_enc; /* a select, not a branch: overflow can be common */
    return sign | (enc > max_enc ? over : (uint32_t)enc);
}

/* Output conversions of the epilogue. fp16: overflow -> Inf; E4M3/E5M2: saturate to the
 * largest finite value (.satfinite). Both inferred until probe P8 is run on an H200. */
MMAEMU_HD uint16_t mm_f32_to_f16(float f) {
    return (uint16_t)mm_f32_to_small(f, 10, 15, 0x7BFFu, 0x7C00u, 0x7FFFu, 0, 15);
}
MMAEMU_HD uint8_t mm_f32_to_e4m3(float f) {
    return (uint8_t)mm_f32_to_small(f, 3, 7, 0x7Eu, 0x7Eu, 0x7Fu, 1, 7);
}
MMAEMU_HD uint8_t mm_f32_to_e5m2(float f) {
    return (uint8_t)mm_f32_to_small(f, 2, 15, 0x7Bu, 0x7Cu, 0x7Fu, 1, 7);
}

#endif /* MMAEMU_FORMATS_H */
