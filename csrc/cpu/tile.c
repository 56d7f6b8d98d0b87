/* tile.c: one tile's accumulators: over all of K with its splits (contiguous slices or the
 * round-robin layout), or one segment of K, resuming each split's state. */
#include <string.h>

#include "driver.h"

/* Slice s of the round-robin split layout (mm_rr_slice_acc) into dst: its tiles of
 * split_rr_tile k in ascending k, chained by the kernel in fast mode (resume continues the
 * chain across tiles); without fast accumulation each chain ends every promotion interval of
 * the slice's sequence and is added into the slice's fp32 main accumulator. chain and main_acc:
 * n floats of scratch. */
static void rr_slice(const mm_cpu_job* job, const mm_cpu_operands* o, int32_t s, float* dst,
                     float* chain, float* main_acc) {
    const mm_gemm* g = job->g;
    const int n = job->kern->mr * job->kern->w;
    const int64_t T = g->preset.split_rr_tile, S = g->splits;
    const int fast = job->plan.fast;
    const int64_t interval = fast ? ((int64_t)1 << 62) : (int64_t)g->preset.promote_k;
    mm_cpu_plan chain_plan = job->plan;
    chain_plan.fast = 1;
    int64_t pos = 0;
    int open = 0;
    for (int i = 0; i < n; i++) main_acc[i] = 0.0f;
    for (int64_t k0 = (int64_t)s * T; k0 < g->K; k0 += S * T) {
        const int64_t k1 = g->K - k0 < T ? g->K : k0 + T;
        for (int64_t k = k0; k < k1;) {
            const int64_t room = interval - pos % interval;
            const int64_t end = k1 - k < room ? k1 : k + room;
            job->tile(&chain_plan, o, k, end, chain, open);
            open = 1;
            pos += end - k;
            k = end;
            if (!fast && pos % interval == 0) {
                for (int i = 0; i < n; i++) main_acc[i] = main_acc[i] + chain[i];
                open = 0;
            }
        }
    }
    for (int i = 0; i < n; i++)
        dst[i] = fast ? (open ? chain[i] : 0.0f) : (open ? main_acc[i] + chain[i] : main_acc[i]);
}

/* The round-robin split layout's reduced accumulators (mm_rr_dot): serial in slice order, or
 * pairwise in the slices' order of mm_rr_pairwise_slots. red: at least 3 slots of n floats. */
static void tile_dot_round_robin(const mm_cpu_job* job, const mm_cpu_operands* o,
                                 float* acc, float* part, float* red) {
    const int32_t S = job->g->splits;
    const int n = job->kern->mr * job->kern->w;
    float *other = red, *chain = red + n, *main_acc = red + 2 * (int64_t)n;
    if (job->g->scheme != MM_SCHEME_PAIRWISE) {
        rr_slice(job, o, 0, acc, chain, main_acc);
        for (int32_t s = 1; s < S; s++) {
            rr_slice(job, o, s, part, chain, main_acc);
            for (int i = 0; i < n; i++) acc[i] = acc[i] + part[i];
        }
        return;
    }
    rr_slice(job, o, S - 1, acc, chain, main_acc);
    for (int32_t i = 0; i < mm_rr_pairwise_slots(S); i++) {
        rr_slice(job, o, i, part, chain, main_acc);
        const int32_t j = mm_rr_pairwise_partner(S, i);
        if (j >= 0) {
            rr_slice(job, o, j, other, chain, main_acc);
            for (int e = 0; e < n; e++) part[e] = part[e] + other[e];
        }
        for (int e = 0; e < n; e++) acc[e] = acc[e] + part[e];
    }
}

void mm_cpu_tile_blockwise(const mm_cpu_job* job, const mm_cpu_operands* o, int64_t rt, int64_t j0,
                           int64_t kbase, int64_t k0, int64_t k1, float* acc, float* chain,
                           float* scales) {
    const mm_gemm* g = job->g;
    const int w = job->kern->w;
    const int64_t i0 = job->row0 + rt;
    const int cols = j0 + w <= g->N ? w : (int)(g->N - j0);
    float *sa = scales, *sb = scales + job->kern->mr;
    mm_cpu_plan chain_plan = job->plan; /* each group one chain of blocks from +0 */
    chain_plan.fast = 1;
    for (int64_t k = k0; k < k1; k += MM_BLOCKWISE_K) {
        const int64_t end = k1 - k < MM_BLOCKWISE_K ? k1 : k + MM_BLOCKWISE_K;
        const int64_t group = k / MM_BLOCKWISE_K;
        job->tile(&chain_plan, o, k - kbase, end - kbase, chain, 0);
        /* padding rows and columns: scale 0 (their outputs are never stored) */
        for (int r = 0; r < o->rows; r++) sa[r] = r < o->live ? mm_blockwise_sa(g, i0 + r, group) : 0.0f;
        for (int c = 0; c < w; c++) sb[c] = c < cols ? mm_blockwise_sb(g, j0 + c, group) : 0.0f;
        job->join(acc, chain, sa, sb, o->rows, w, g->epilogue_order);
    }
}

/* The reduced accumulators of one tile (mm_dot over the splits) into acc; red: 31 slots of n
 * floats for the split reduction. */
void mm_cpu_tile_dot(const mm_cpu_job* job, const mm_cpu_operands* o, float* acc,
                     float* part, float* red) {
    const mm_gemm* g = job->g;
    const int n = job->kern->mr * job->kern->w;
    if (g->splits <= 1) {
        job->tile(&job->plan, o, 0, g->K, acc, 0);
        return;
    }
    if (g->preset.split_rr_tile > 0) {
        tile_dot_round_robin(job, o, acc, part, red);
        return;
    }
    const int64_t chunk = mm_split_chunk(g->K, g->splits);
    for (int32_t s = 0; s < g->splits; s++) {
        const int64_t k0 = s * chunk < g->K ? s * chunk : g->K;
        const int64_t k1 = k0 + chunk < g->K ? k0 + chunk : g->K;
        if (k1 > k0) job->tile(&job->plan, o, k0, k1, part, 0);
        else for (int i = 0; i < n; i++) part[i] = 0.0f;
        mm_cpu_reduce_push(g->scheme, s, part, red, n);
    }
    mm_cpu_reduce_result(g->scheme, g->splits, red, acc, n);
}

/* One segment [ks, ke) of the tile at row rt, panel p of the pass: each split's piece in the
 * segment continues that split's state, a split that ends in it joins the reduction, and the
 * last segment stores the outputs (col_special: the panel's columns that hold NaN/Inf in K). */
void mm_cpu_tile_segment(const mm_cpu_job* job, int64_t rt, int64_t p, const mm_cpu_operands* o,
                         float* acc, float* scratch, const uint8_t* col_special) {
    const mm_gemm* g = job->g;
    const int w = job->kern->w, n = o->rows * w;
    if (mm_is_blockwise(g)) { /* the state is the joined accumulator; chains restart per group */
        const int64_t j0 = (job->panel0 + p) * w;
        float* state = job->state + (p * job->rows + rt) * w;
        if (job->ks == 0) for (int i = 0; i < n; i++) state[i] = 0.0f;
        mm_cpu_tile_blockwise(job, o, rt, j0, job->ks, job->ks, job->ke, state, acc, scratch);
        if (job->last) mm_cpu_store_tile(job, rt, o->rows, j0, state, col_special);
        return;
    }
    const int32_t splits = g->splits > 1 ? g->splits : 1;
    const int64_t chunk = mm_split_chunk(g->K, splits), at = p * job->rows + rt;
    const int64_t ks = job->ks, ke = job->ke;
    float* state = job->state + at * w;
    float* red = job->red ? job->red + at * job->nred * w : NULL;
    int32_t s = (int32_t)(ks / chunk);
    for (; s < splits && s * chunk < ke; s++) {
        const int64_t k0 = s * chunk, k1 = k0 + chunk < g->K ? k0 + chunk : g->K;
        const int split_ends = k1 <= ke;
        const int64_t p0 = k0 > ks ? k0 : ks, p1 = split_ends ? k1 : ke;
        job->tile(&job->plan, o, p0 - ks, p1 - ks, state, p0 > k0);
        if (split_ends && splits > 1) mm_cpu_reduce_push(g->scheme, s, state, red, n);
    }
    if (!job->last) return;
    if (splits > 1) {
        for (; s < splits; s++) { /* splits whose range is empty add +0 (mm_dot) */
            for (int i = 0; i < n; i++) state[i] = 0.0f;
            mm_cpu_reduce_push(g->scheme, s, state, red, n);
        }
        mm_cpu_reduce_result(g->scheme, splits, red, acc, n);
    } else {
        memcpy(acc, state, sizeof(float) * (size_t)n);
    }
    mm_cpu_store_tile(job, rt, o->rows, (job->panel0 + p) * w, acc, col_special);
}
