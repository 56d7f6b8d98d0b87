/* mmaemu_tiles.h: GEMMs whose output tiles each accumulate over their own k-segments (the
 * stream-K decomposition of torch 2.7.1's sm_89 row-wise kernel, planned in mmaemu/planning/streamk.py).
 *
 * Per output element of tile t: for each of t's k-segments [s, e) (in k-iterations of iter_k,
 * ascending) a partial accumulator from +0, then the partials added in fp32 as a left fold
 * ((p0 + p1) + p2) + ... (cited: CUTLASS 2.x gemm_universal_streamk.h, turnstile and separate
 * reduction both). A partial is one chain of blocks over the segment with fast accumulation;
 * otherwise CUTLASS 2.x's staged accumulation for sm_89 FP8 (mma_multistage.h,
 * kStagedAccumulation): the chain restarts from +0 after the first 32 k of the segment and
 * every 64 k after that, each group added into an fp32 accumulator that starts at +0. */
#ifndef MMAEMU_TILES_H
#define MMAEMU_TILES_H

#include "mmaemu_gemm.h"

#define MM_STAGED_FIRST 32 /* one QMMA.16832's k: the group before the first promotion */
#define MM_STAGED_WIDTH 64 /* the warp tile's k: one promotion per mainloop iteration */

/* The staged accumulator of k in [k0, k1) (k1 = the segment's end clipped to K). Groups wholly
 * past K are zero-filled on the GPU: their chain is +-0, and adding it to the accumulator (never
 * -0: it starts at +0 and only sums round to it) changes nothing, so they are skipped. */
MMAEMU_HD float mm_staged_acc(const uint8_t* a, const uint8_t* b, int fa, int fb, int64_t k0,
                              int64_t k1, const mm_preset* p) {
    float acc = 0.0f;
    for (int64_t k = k0, end = k0 + MM_STAGED_FIRST; k < k1; k = end, end += MM_STAGED_WIDTH)
        acc = acc + mm_chain(a, b, fa, fb, k, end < k1 ? end : k1, 0.0f, p);
    return acc;
}

/* The accumulator of one element over nseg segments bounds[2s], bounds[2s+1] (k-iterations). */
MMAEMU_HD float mm_segments_acc(const uint8_t* a, const uint8_t* b, int fa, int fb, int64_t K,
                                int fast, const int64_t* bounds, int64_t nseg, int64_t iter_k,
                                const mm_preset* p) {
    float acc = 0.0f;
    for (int64_t s = 0; s < nseg; s++) {
        const int64_t k0 = bounds[2 * s] * iter_k, e = bounds[2 * s + 1] * iter_k;
        const int64_t k1 = e < K ? e : K;
        const float part = fast ? mm_chain(a, b, fa, fb, k0, k1, 0.0f, p)
                                : mm_staged_acc(a, b, fa, fb, k0, k1, p);
        acc = s == 0 ? part : acc + part;
    }
    return acc;
}

/* Output tiles tile_m x tile_n in row-major tile order; tile t's segments are bounds pairs
 * offsets[t] .. offsets[t + 1] - 1. */
typedef struct {
    int64_t tile_m, tile_n, iter_k, tiles_n;
    const int64_t* offsets;
    const int64_t* bounds;
} mm_tile_plan;

MMAEMU_HD uint32_t mm_tiles_element(const mm_gemm* g, const mm_tile_plan* tp, int64_t i,
                                    int64_t j) {
    const int64_t t = (i / tp->tile_m) * tp->tiles_n + j / tp->tile_n;
    const int64_t s0 = tp->offsets[t], s1 = tp->offsets[t + 1];
    const float acc = mm_segments_acc(g->a + i * g->lda, g->b + j * g->ldb, g->fmt_a, g->fmt_b,
                                      g->K, g->fast_accum, tp->bounds + 2 * s0, s1 - s0,
                                      tp->iter_k, &g->preset);
    return mm_epilogue_at(acc, g, i, j);
}

#endif /* MMAEMU_TILES_H */
