/* mmaemu_gemm.h: the GEMM schedule around the block FMA, and the epilogue.
 *
 * Per output element (docs/semantics.md has the evidence for each step):
 *  - blocks of `block` consecutive k in ascending order from each split's origin;
 *  - fast accumulation: one chain of blocks carries the accumulator through the split;
 *  - otherwise chains of promote_k k restart from +0 and are added into an fp32
 *    register with an IEEE round-to-nearest add (CUTLASS's scheme, P = 4 x 32 = 128 k;
 *    cuBLAS's interval is inferred until probe P3 runs);
 *  - split-K, the preset's layout: contiguous (hopper) K cut on a grain of 128 into S slices of
 *    ceil(ceil(K/128)/S)*128 (the last takes the rest); round-robin (ada) 64-k tiles dealt to
 *    slice t mod S; each slice restarts from +0; the partials are reduced in fp32 in the
 *    scheme's order (serial p0 + p1 + ...; pairwise as mm_rr_pairwise_slots says);
 *  - epilogue once on the reduced sum: fma(fp32(scale_a * scale_b), acc, +0) in fp32, times
 *    scale_result for FP8 outputs, then the output conversion; row-wise scales and a
 *    bias: mm_epilogue_rowwise / mm_epilogue_bias (one fmaf each).
 * The fp32 operations here must not be contracted into FMAs: C is built with
 * -ffp-contract=off, CUDA with --fmad=false. */
#ifndef MMAEMU_GEMM_H
#define MMAEMU_GEMM_H

#include "mmaemu_block.h"

enum { MM_SCHEME_NONE = 0, MM_SCHEME_CONTIGUOUS = 1, MM_SCHEME_SERIAL = 2, MM_SCHEME_PAIRWISE = 3 };
/* Epilogue orders: H1 fp32(fp32(sa*sb)*acc), H2 fp32(fp32(acc*sa)*sb), H3 fp32(fp32(acc*sb)*sa). */
enum { MM_EPI_H1 = 0, MM_EPI_H2 = 1, MM_EPI_H3 = 2 };
/* Row-wise epilogues (torch 2.7.1's CUTLASS f8f8bf16_rowwise): bf16(fmaf(fp32(acc*sa[i]), sb[j], b[j]))
 * and, for the kernel instance that runs transposed, bf16(fmaf(fp32(acc*sb[j]), sa[i], b[j])). */
enum { MM_EPI_ROWWISE = 3, MM_EPI_ROWWISE_T = 4 };
/* Block-wise scales (one per row and 128-k group for A, one per 128 or 1 columns and group for
 * B): the accumulator takes each group's chain with its scales as it goes (mm_blockwise_dot),
 * then the output conversion. BLOCKWISE: acc = fmaf(fp32(sa * sb), chain, acc) (DeepGEMM's
 * sm90_fp8_gemm_1d2d, and CUTLASS's block-wise mainloop where a side has one scale per tile);
 * BLOCKWISE_PE: acc = fmaf(fp32(chain * sa), sb, acc) (CUTLASS with several scales per tile on
 * both sides). The grouped GEMM's epilogue (torch's CUTLASS ScaledGroupMM): ROWWISE_MUL,
 * bf16(fp32(fp32(acc * sa[i]) * sb[j])), no FMA and no bias. docs/semantics.md 8d, 8e. */
enum { MM_EPI_BLOCKWISE = 5, MM_EPI_BLOCKWISE_PE = 6, MM_EPI_ROWWISE_MUL = 7 };
#define MM_BLOCKWISE_K 128 /* the k of a block-wise scale group */
/* Bias vector types (the bias is per output column j). */
enum { MM_BIAS_NONE = 0, MM_BIAS_BF16 = 1, MM_BIAS_F16 = 2 };
#define MM_OUT_ACC 5 /* the raw fp32 accumulator, no epilogue (mmaemu.accumulate) */
#define MM_SPLIT_GRAIN 128
#define MM_MAX_SPLITS 65536
/* Largest M, N or K a plan may have. No memory holds 2^40 rows of K; the bound keeps every
 * index product here (split origins s * chunk < 2^16 * 2^41, row offsets) inside int64. */
#define MM_MAX_DIM ((int64_t)1 << 40)

/* Everything one GEMM needs. a: [M, K] with a[i*lda + k]; b: [N, K] with b[j*ldb + k]
 * (torch's mat2 is [K, N] column-major, i.e. this b); out: [M, N] row-major with ldo. */
typedef struct {
    const uint8_t* a;
    const uint8_t* b;
    void* out;
    int64_t lda, ldb, ldo;
    int64_t M, N, K;
    int32_t fmt_a, fmt_b;
    int32_t fast_accum;
    int32_t splits;
    int32_t scheme;
    int32_t out_kind;       /* MM_OUT_* or MM_OUT_ACC */
    int32_t epilogue_order; /* MM_EPI_* */
    int32_t has_scale_result;
    float scale_a, scale_b, scale_result;
    mm_preset preset;
    const float* scale_a_vec; /* MM_EPI_ROWWISE*: M fp32 row scales; MM_EPI_BLOCKWISE*: block scales */
    const float* scale_b_vec; /* MM_EPI_ROWWISE*: N fp32 column scales; MM_EPI_BLOCKWISE*: block scales */
    const void* bias;         /* N contiguous elements of bias_kind, or NULL */
    int32_t bias_kind;        /* MM_BIAS_* */
    int32_t sb_gran;          /* MM_EPI_BLOCKWISE*: columns per scale of B, 128 or 1 */
    /* MM_EPI_BLOCKWISE*: group g's scales of row i and column j are
     * scale_a_vec[i * sa_rs + g * sa_gs] and scale_b_vec[(j / sb_gran) * sb_rs + g * sb_gs] */
    int64_t sa_rs, sa_gs, sb_rs, sb_gs;
} mm_gemm;

/* Blocks over k in [k0, k1) chained from c: the instruction sequence of fast accumulation. */
MMAEMU_HD float mm_chain(const uint8_t* a, const uint8_t* b, int fa, int fb, int64_t k0,
                         int64_t k1, float c, const mm_preset* p) {
    for (int64_t k = k0; k < k1; k += p->block) {
        const int n = (int)(k1 - k < p->block ? k1 - k : p->block);
        c = mm_block(a + k, b + k, fa, fb, n, c, p);
    }
    return c;
}

/* The accumulator of one split, k in [k0, k1). */
MMAEMU_HD float mm_split_acc(const uint8_t* a, const uint8_t* b, int fa, int fb, int64_t k0,
                             int64_t k1, int fast, const mm_preset* p) {
    if (fast) return mm_chain(a, b, fa, fb, k0, k1, 0.0f, p);
    const int64_t interval = p->promote_k;
    float main_acc = 0.0f;
    for (int64_t k = k0; k < k1; k += interval) {
        const int64_t end = k1 - k < interval ? k1 : k + interval;
        main_acc = main_acc + mm_chain(a, b, fa, fb, k, end, 0.0f, p);
    }
    return main_acc;
}

/* Length of each split's k range (all but the last) in the contiguous layout. */
MMAEMU_HD int64_t mm_split_chunk(int64_t K, int32_t splits) {
    const int64_t grains = (K + MM_SPLIT_GRAIN - 1) / MM_SPLIT_GRAIN;
    return (grains + splits - 1) / splits * MM_SPLIT_GRAIN;
}

/* The accumulator of slice s of `splits` in the round-robin layout: tiles t = [t*T, t*T + T)
 * (the last may be short) with t = s mod splits, in ascending k, as one sequence. Fast: one
 * chain over the sequence from +0; otherwise chains restart from +0 every promotion interval
 * of the sequence (not of k) and are added into the fp32 main accumulator. Validated on RTX
 * 4060 recordings (test/test_hw_mini.py); the blocks start at each piece's first k. */
MMAEMU_HD float mm_rr_slice_acc(const uint8_t* a, const uint8_t* b, int fa, int fb, int64_t K,
                                int32_t s, int32_t splits, int fast, const mm_preset* p) {
    const int64_t T = p->split_rr_tile;
    const int64_t interval = fast ? ((int64_t)1 << 62) : (int64_t)p->promote_k;
    float main_acc = 0.0f, c = 0.0f;
    int64_t pos = 0;
    int open = 0;
    for (int64_t k0 = (int64_t)s * T; k0 < K; k0 += (int64_t)splits * T) {
        const int64_t k1 = K - k0 < T ? K : k0 + T;
        for (int64_t k = k0; k < k1;) {
            const int64_t room = interval - pos % interval;
            const int64_t end = k1 - k < room ? k1 : k + room;
            c = mm_chain(a, b, fa, fb, k, end, open ? c : 0.0f, p);
            open = 1;
            pos += end - k;
            k = end;
            if (!fast && pos % interval == 0) { main_acc = main_acc + c; open = 0; }
        }
    }
    if (fast) return open ? c : 0.0f;
    return open ? main_acc + c : main_acc;
}

/* The pairwise reduction of cuBLASLt's split-K kernels with the round-robin layout (RTX 4060,
 * customOption 1), for any S: h = ceil(S/2) slots, slot i = p_i + p_(i+h) where i + h < S - 1,
 * else p_i alone; r = p_(S-1), then r = r + slot_i for i = 0 .. h-1, every add fp32 RN
 * (S = 3: (p2 + p0) + p1). Cited from mmaemu 0.1.0's GEMM plan module docstring and replayed
 * on every RTX 4060 pairwise recording, S = 2..16, 20, 24, 32 (test/test_hw_mini.py;
 * docs/semantics.md section 7). The slices are independent, so a kernel computes them in this
 * order and needs no array of S partials. */
MMAEMU_HD int32_t mm_rr_pairwise_slots(int32_t splits) { return (splits + 1) / 2; }

/* The partner slice added into slot i, or -1 where slot i holds p_i alone. */
MMAEMU_HD int32_t mm_rr_pairwise_partner(int32_t splits, int32_t i) {
    const int32_t j = i + mm_rr_pairwise_slots(splits);
    return j < splits - 1 ? j : -1;
}

/* The pairwise reduction of split partials in the contiguous layout: adjacent partials are
 * added level by level ((p0+p1)+(p2+p3))..., an odd one out carried up unchanged; a binary
 * counter, so no array of S partials (S <= MM_MAX_SPLITS = 2^16 needs 17 levels). Inferred: no
 * hardware in the tables uses it (the H100 kernels reduce serially). */
typedef struct {
    float stack[32];
    int level[32];
    int top;
} mm_pairwise;

MMAEMU_HD void mm_pairwise_push(mm_pairwise* q, float v) {
    int lv = 0;
    while (q->top > 0 && q->level[q->top - 1] == lv) { v = q->stack[--q->top] + v; lv++; }
    q->stack[q->top] = v;
    q->level[q->top++] = lv;
}

MMAEMU_HD float mm_pairwise_result(mm_pairwise* q) {
    float r = q->stack[--q->top];
    while (q->top > 0) r = q->stack[--q->top] + r;
    return r;
}

/* The reduced accumulator of the round-robin layout: serial (and contiguous) r = p0, then
 * r = fp32(r + p_s) in slice order; pairwise as mm_rr_pairwise_slots says. */
MMAEMU_HD float mm_rr_dot(const uint8_t* a, const uint8_t* b, int fa, int fb, int64_t K, int fast,
                          int32_t splits, int32_t scheme, const mm_preset* p) {
    if (scheme != MM_SCHEME_PAIRWISE) {
        float r = mm_rr_slice_acc(a, b, fa, fb, K, 0, splits, fast, p);
        for (int32_t s = 1; s < splits; s++) r = r + mm_rr_slice_acc(a, b, fa, fb, K, s, splits, fast, p);
        return r;
    }
    float r = mm_rr_slice_acc(a, b, fa, fb, K, splits - 1, splits, fast, p);
    for (int32_t i = 0; i < mm_rr_pairwise_slots(splits); i++) {
        float slot = mm_rr_slice_acc(a, b, fa, fb, K, i, splits, fast, p);
        const int32_t j = mm_rr_pairwise_partner(splits, i);
        if (j >= 0) slot = slot + mm_rr_slice_acc(a, b, fa, fb, K, j, splits, fast, p);
        r = r + slot;
    }
    return r;
}

/* The reduced fp32 accumulator of one output element, before the epilogue. */
MMAEMU_HD float mm_dot(const uint8_t* a, const uint8_t* b, int fa, int fb, int64_t K, int fast,
                       int32_t splits, int32_t scheme, const mm_preset* p) {
    if (splits <= 1) return mm_split_acc(a, b, fa, fb, 0, K, fast, p);
    if (p->split_rr_tile > 0) return mm_rr_dot(a, b, fa, fb, K, fast, splits, scheme, p);
    const int64_t chunk = mm_split_chunk(K, splits);
    if (scheme != MM_SCHEME_PAIRWISE) {
        /* contiguous / serial: r = p0, then r = fp32(r + p_s) in split order. */
        float r = 0.0f;
        for (int32_t s = 0; s < splits; s++) {
            const int64_t k0 = s * chunk < K ? s * chunk : K;
            const int64_t k1 = k0 + chunk < K ? k0 + chunk : K;
            const float part = k1 > k0 ? mm_split_acc(a, b, fa, fb, k0, k1, fast, p) : 0.0f;
            r = s == 0 ? part : r + part;
        }
        return r;
    }
    mm_pairwise acc = {{0.0f}, {0}, 0};
    for (int32_t s = 0; s < splits; s++) {
        const int64_t k0 = s * chunk < K ? s * chunk : K;
        const int64_t k1 = k0 + chunk < K ? k0 + chunk : K;
        mm_pairwise_push(&acc, k1 > k0 ? mm_split_acc(a, b, fa, fb, k0, k1, fast, p) : 0.0f);
    }
    return mm_pairwise_result(&acc);
}

/* The epilogue: fp32 scaling in the chosen order, then the output conversion. Returns the
 * output's bit pattern in the low bits. */
MMAEMU_HD uint32_t mm_f32_canonical(float v) {
    const uint32_t u = mm_f32_bits(v);
    return (u & 0x7FFFFFFFu) > 0x7F800000u ? MM_F32_NAN_BITS : u;
}

MMAEMU_HD uint32_t mm_output_bits(float v, const mm_gemm* g);

/* fmaf(a, b, c): a*b + c rounded once to fp32 (round to nearest even), without libm. On the
 * GPU the instruction itself. On the host: a*b is exact in double (24 + 24 significant bits,
 * no overflow or underflow there); the double sum is rounded to odd (TwoSum's error decides
 * the last bit), and a value rounded to odd with 53 >= 24 + 2 bits rounds to fp32 exactly as
 * the exact sum would, subnormal and overflowing results included. */
MMAEMU_HD float mm_fmaf(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
    return __fmaf_rn(a, b, c);
#else
    const double p = (double)a * (double)b, cd = (double)c;
    union { double d; uint64_t u; } s;
    s.d = p + cd;
    if (s.d - s.d != 0.0) return (float)s.d; /* Inf or NaN: no rounding error to track */
    const double bv = s.d - p;
    const double err = (p - (s.d - bv)) + (cd - bv);
    if (err != 0.0 && (s.u & 1u) == 0) {
        /* s is even and the exact sum lies strictly beyond it towards err: take the odd
         * neighbour on that side (s != 0 here: a zero sum of these operands is exact). */
        if ((err > 0.0) == (s.d > 0.0)) s.u += 1u; else s.u -= 1u;
    }
    return (float)s.d;
#endif
}

/* The tensor-wise epilogue is fma(alpha, acc, +0): an exact-zero product gives +0, a non-zero
 * one that underflows keeps its sign. cuBLASLt's D = alpha * acc + beta * C with beta = 0:
 * validated on RTX 4060 recordings (test/test_hw_mini.py); inferred for the H100 (the same
 * cuBLASLt epilogue). */
MMAEMU_HD float mm_alpha_times(float alpha, float acc) {
#if defined(__CUDA_ARCH__)
    return mm_fmaf(alpha, acc, 0.0f);
#else
    /* mm_fmaf with c = +0, without its rounding-error bookkeeping (none arises): the product is
     * exact in double, + 0.0 turns an exact -0 into +0, the conversion rounds once. */
    return (float)((double)alpha * (double)acc + 0.0);
#endif
}

/* acc times the scales in the plan's order (H1: alpha = fp32(sa * sb) first). */
MMAEMU_HD float mm_scaled(float acc, const mm_gemm* g) {
    float v;
    if (g->epilogue_order == MM_EPI_H2) { v = acc * g->scale_a; v = v * g->scale_b; }
    else if (g->epilogue_order == MM_EPI_H3) { v = acc * g->scale_b; v = v * g->scale_a; }
    else v = mm_alpha_times(g->scale_a * g->scale_b, acc);
    return v;
}

MMAEMU_HD uint32_t mm_epilogue(float acc, const mm_gemm* g) {
    if (g->out_kind == MM_OUT_ACC) return mm_f32_canonical(acc);
    return mm_output_bits(mm_scaled(acc, g), g);
}

/* The output conversion of the scaled fp32 value v (times scale_result for FP8 outputs). */
MMAEMU_HD uint32_t mm_output_bits(float v, const mm_gemm* g) {
    switch (g->out_kind) {
    case MM_OUT_BF16: return mm_f32_to_bf16(v);
    case MM_OUT_F16: return mm_f32_to_f16(v);
    case MM_OUT_E4M3:
        if (g->has_scale_result) v = v * g->scale_result;
        return mm_f32_to_e4m3(v);
    case MM_OUT_E5M2:
        if (g->has_scale_result) v = v * g->scale_result;
        return mm_f32_to_e5m2(v);
    default: return mm_f32_canonical(v);
    }
}

/* fp16 bits -> fp32 (exact). */
MMAEMU_HD float mm_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, ex = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    if (ex == 0x1Fu) return mm_bits_f32(sign | 0x7F800000u | (man << 13));
    if (ex != 0) return mm_bits_f32(sign | ((ex + 112u) << 23) | (man << 13));
    const float mag = (float)man * mm_bits_f32(0x33800000u); /* man * 2^-24, exact */
    return sign ? -mag : mag;
}

/* The bias of output column j as fp32 (exact), or +0 without a bias: the kernels add +0 then,
 * so a -0 product becomes +0 (row-wise: cited, SASS; tensor-wise: inferred). */
MMAEMU_HD float mm_bias_at(const mm_gemm* g, int64_t j) {
    if (g->bias_kind == MM_BIAS_BF16)
        return mm_bits_f32((uint32_t)((const uint16_t*)g->bias)[j] << 16);
    if (g->bias_kind == MM_BIAS_F16) return mm_f16_to_f32(((const uint16_t*)g->bias)[j]);
    return 0.0f;
}

/* Row-wise scales, torch 2.7.1 f8f8bf16_rowwise (cited: SASS FMUL then FFMA, then
 * F2FP.BF16.F32): bf16_rn(fmaf(fp32(acc * s1), s2, bias[j])) with (s1, s2) = (sa[i], sb[j]),
 * exchanged for the transposed instance. */
MMAEMU_HD uint32_t mm_epilogue_rowwise(float acc, const mm_gemm* g, int64_t i, int64_t j) {
    const float sa = g->scale_a_vec[i], sb = g->scale_b_vec[j];
    const int t = g->epilogue_order == MM_EPI_ROWWISE_T;
    const float v = acc * (t ? sb : sa);
    return mm_f32_to_bf16(mm_fmaf(v, t ? sa : sb, mm_bias_at(g, j)));
}

/* Tensor-wise scales with a bias (cuBLASLt EPILOGUE_BIAS): fmaf(scale, acc, bias[j]) in the
 * epilogue order's scale form, then the output conversion (scale_result after the bias).
 * Inferred: one rounding of scale*acc + bias, as the tensor-wise epilogue's fma(alpha, acc, 0);
 * probe rowwise_epilogue_order of mmaemu_tools/probe_hopper.py settles it. */
MMAEMU_HD uint32_t mm_epilogue_bias(float acc, const mm_gemm* g, int64_t j) {
    const float b = mm_bias_at(g, j);
    float v;
    if (g->epilogue_order == MM_EPI_H2) v = mm_fmaf(acc * g->scale_a, g->scale_b, b);
    else if (g->epilogue_order == MM_EPI_H3) v = mm_fmaf(acc * g->scale_b, g->scale_a, b);
    else v = mm_fmaf(g->scale_a * g->scale_b, acc, b);
    return mm_output_bits(v, g);
}

/* The epilogue of output (i, j): row-wise, tensor-wise with bias, or mm_epilogue. */
MMAEMU_HD int mm_is_blockwise(const mm_gemm* g) {
    return g->epilogue_order == MM_EPI_BLOCKWISE || g->epilogue_order == MM_EPI_BLOCKWISE_PE;
}

/* The scales of group `group` of row i (A) and column j (B), block-wise. */
MMAEMU_HD float mm_blockwise_sa(const mm_gemm* g, int64_t i, int64_t group) {
    return g->scale_a_vec[i * g->sa_rs + group * g->sa_gs];
}

MMAEMU_HD float mm_blockwise_sb(const mm_gemm* g, int64_t j, int64_t group) {
    return g->scale_b_vec[(j / g->sb_gran) * g->sb_rs + group * g->sb_gs];
}

/* One 128-k group's chain joined to the accumulator, in the kernel's form (MM_EPI_BLOCKWISE*:
 * one rounding for the product and the add; the scales' product, or the chain times A's scale,
 * rounded to fp32 first). */
MMAEMU_HD float mm_blockwise_join(float acc, float chain, float sa, float sb, int32_t epilogue) {
    if (epilogue == MM_EPI_BLOCKWISE_PE) return mm_fmaf(chain * sa, sb, acc);
    return mm_fmaf(sa * sb, chain, acc);
}

/* The block-wise accumulator of output (i, j): 128-k groups in ascending k, each one chain of
 * the preset's blocks from +0, joined to the accumulator (from +0) with its scales. */
MMAEMU_HD float mm_blockwise_dot(const uint8_t* a, const uint8_t* b, const mm_gemm* g, int64_t i,
                                 int64_t j) {
    float acc = 0.0f;
    for (int64_t k0 = 0; k0 < g->K; k0 += MM_BLOCKWISE_K) {
        const int64_t k1 = g->K - k0 < MM_BLOCKWISE_K ? g->K : k0 + MM_BLOCKWISE_K;
        const int64_t group = k0 / MM_BLOCKWISE_K;
        const float part = mm_chain(a, b, g->fmt_a, g->fmt_b, k0, k1, 0.0f, &g->preset);
        acc = mm_blockwise_join(acc, part, mm_blockwise_sa(g, i, group),
                                mm_blockwise_sb(g, j, group), g->epilogue_order);
    }
    return acc;
}

/* The grouped row-wise epilogue: bf16(fp32(fp32(acc * sa[i]) * sb[j])). */
MMAEMU_HD uint32_t mm_epilogue_rowwise_mul(float acc, const mm_gemm* g, int64_t i, int64_t j) {
    const float v = acc * g->scale_a_vec[i];
    return mm_f32_to_bf16(v * g->scale_b_vec[j]);
}

MMAEMU_HD uint32_t mm_epilogue_at(float acc, const mm_gemm* g, int64_t i, int64_t j) {
    if (g->out_kind != MM_OUT_ACC) {
        if (mm_is_blockwise(g)) return mm_output_bits(acc, g);   /* the scales are in acc */
        if (g->epilogue_order == MM_EPI_ROWWISE_MUL) return mm_epilogue_rowwise_mul(acc, g, i, j);
        if (g->epilogue_order >= MM_EPI_ROWWISE) return mm_epilogue_rowwise(acc, g, i, j);
        if (g->bias_kind != MM_BIAS_NONE) return mm_epilogue_bias(acc, g, j);
    }
    return mm_epilogue(acc, g);
}

MMAEMU_HD int mm_out_size(int32_t out_kind) {
    return out_kind == MM_OUT_F32 || out_kind == MM_OUT_ACC ? 4
         : out_kind == MM_OUT_BF16 || out_kind == MM_OUT_F16 ? 2 : 1;
}

/* Stores one output element's bits at (i, j). */
MMAEMU_HD void mm_store(const mm_gemm* g, int64_t i, int64_t j, uint32_t bits) {
    const int64_t idx = i * g->ldo + j;
    switch (mm_out_size(g->out_kind)) {
    case 4: ((uint32_t*)g->out)[idx] = bits; break;
    case 2: ((uint16_t*)g->out)[idx] = (uint16_t)bits; break;
    default: ((uint8_t*)g->out)[idx] = (uint8_t)bits; break;
    }
}

/* One output element, computed from scratch: the scalar reference. With K = 0 the operands
 * may be NULL (nothing is read), so no row pointer is formed from them (C forbids NULL + 0). */
MMAEMU_HD uint32_t mm_gemm_element(const mm_gemm* g, int64_t i, int64_t j) {
    const uint8_t* a = g->K > 0 ? g->a + i * g->lda : g->a;
    const uint8_t* b = g->K > 0 ? g->b + j * g->ldb : g->b;
    const float acc = mm_is_blockwise(g)
                          ? mm_blockwise_dot(a, b, g, i, j)
                          : mm_dot(a, b, g->fmt_a, g->fmt_b, g->K, g->fast_accum, g->splits,
                                   g->scheme, &g->preset);
    return mm_epilogue_at(acc, g, i, j);
}

#endif /* MMAEMU_GEMM_H */
