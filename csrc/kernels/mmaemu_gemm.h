/* mmaemu_gemm.h: the GEMM schedule around the block FMA, and the epilogue.
 *
 * Per output element (docs/semantics.md has the evidence for each step):
 *  - blocks of `block` consecutive k in ascending order from each split's origin;
 *  - fast accumulation: one chain of blocks carries the accumulator through the split;
 *  - otherwise chains of promote_blocks blocks restart from +0 and are added into an fp32
 *    register with an IEEE round-to-nearest add (CUTLASS's scheme, P = 4 x 32 = 128 k;
 *    cuBLAS's interval is inferred until probe P3 runs);
 *  - split-K: K cut on a grain of 128 into S slices of ceil(ceil(K/128)/S)*128 (the last
 *    takes the rest), each restarting from +0, reduced in fp32 in the scheme's order;
 *  - epilogue once on the reduced sum: acc * scale_a * scale_b in fp32 (order inferred),
 *    times scale_result for FP8 outputs, then the output conversion.
 * The fp32 operations here must not be contracted into FMAs: C is built with
 * -ffp-contract=off, CUDA with --fmad=false. */
#ifndef MMAEMU_GEMM_H
#define MMAEMU_GEMM_H

#include "mmaemu_block.h"

enum { MM_SCHEME_NONE = 0, MM_SCHEME_CONTIGUOUS = 1, MM_SCHEME_SERIAL = 2, MM_SCHEME_PAIRWISE = 3 };
/* Epilogue orders: H1 fp32(fp32(sa*sb)*acc), H2 fp32(fp32(acc*sa)*sb), H3 fp32(fp32(acc*sb)*sa). */
enum { MM_EPI_H1 = 0, MM_EPI_H2 = 1, MM_EPI_H3 = 2 };
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
    const int64_t interval = (int64_t)p->block * p->promote_blocks;
    float main_acc = 0.0f;
    for (int64_t k = k0; k < k1; k += interval) {
        const int64_t end = k1 - k < interval ? k1 : k + interval;
        main_acc = main_acc + mm_chain(a, b, fa, fb, k, end, 0.0f, p);
    }
    return main_acc;
}

/* Length of each split's k range (all but the last). */
MMAEMU_HD int64_t mm_split_chunk(int64_t K, int32_t splits) {
    const int64_t grains = (K + MM_SPLIT_GRAIN - 1) / MM_SPLIT_GRAIN;
    return (grains + splits - 1) / splits * MM_SPLIT_GRAIN;
}

/* The pairwise reduction of split partials: adjacent partials are added level by level
 * ((p0+p1)+(p2+p3))..., an odd one out carried up unchanged; a binary counter, so no array of
 * S partials (S <= MM_MAX_SPLITS = 2^16 needs 17 levels). */
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

/* The reduced fp32 accumulator of one output element, before the epilogue. */
MMAEMU_HD float mm_dot(const uint8_t* a, const uint8_t* b, int fa, int fb, int64_t K, int fast,
                       int32_t splits, int32_t scheme, const mm_preset* p) {
    if (splits <= 1) return mm_split_acc(a, b, fa, fb, 0, K, fast, p);
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

MMAEMU_HD uint32_t mm_epilogue(float acc, const mm_gemm* g) {
    if (g->out_kind == MM_OUT_ACC) return mm_f32_canonical(acc);
    float v;
    if (g->epilogue_order == MM_EPI_H2) { v = acc * g->scale_a; v = v * g->scale_b; }
    else if (g->epilogue_order == MM_EPI_H3) { v = acc * g->scale_b; v = v * g->scale_a; }
    else { const float alpha = g->scale_a * g->scale_b; v = alpha * acc; }
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
    const float acc = mm_dot(a, b, g->fmt_a, g->fmt_b, g->K, g->fast_accum, g->splits, g->scheme,
                             &g->preset);
    return mm_epilogue(acc, g);
}

#endif /* MMAEMU_GEMM_H */
