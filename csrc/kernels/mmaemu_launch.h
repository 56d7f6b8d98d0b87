/* mmaemu_launch.h: what every CUDA kernel of mmaemu receives, and the steps they share.
 *
 * The C loader (csrc/cuda/launch.c) fills one mm_launch and passes it by value as the kernels'
 * only parameter, so the struct must have the same layout under gcc (C11) and nvcc/NVRTC (C++):
 * the static assertion below checks that on both sides.
 *
 * Scales stay on the device: a kernel reads them itself (no host synchronisation, so the op can
 * be captured in a CUDA graph). */
#ifndef MMAEMU_LAUNCH_H
#define MMAEMU_LAUNCH_H

#include "mmaemu_gemm.h"

typedef struct {
    mm_gemm g;                     /* device pointers; scale values used when the *_ptr are NULL */
    const float* scale_a_ptr;      /* one fp32 on the device, or NULL */
    const float* scale_b_ptr;
    const float* scale_result_ptr; /* read only when g.has_scale_result */
    float* partials;               /* [g.splits][M][N] fp32 split partials (tiled kernels, splits > 1) */
    int64_t chunk;                 /* k per split, mm_split_chunk(K, splits) */
} mm_launch;

#if defined(__cplusplus)
static_assert(sizeof(mm_launch) == 248, "mm_launch layout differs between the C loader and the kernels");
#else
_Static_assert(sizeof(mm_launch) == 248, "mm_launch layout differs between the C loader and the kernels");
#endif

/* The plan with the scales read from the device. */
MMAEMU_HD mm_gemm mm_launch_plan(const mm_launch* p) {
    mm_gemm g = p->g;
    if (p->scale_a_ptr) g.scale_a = *p->scale_a_ptr;
    if (p->scale_b_ptr) g.scale_b = *p->scale_b_ptr;
    if (g.has_scale_result && p->scale_result_ptr) g.scale_result = *p->scale_result_ptr;
    return g;
}

/* The k range [k0, k1) of split s (the same cut as mm_dot). */
MMAEMU_HD int64_t mm_split_begin(int64_t K, int64_t chunk, int32_t s) {
    return (int64_t)s * chunk < K ? (int64_t)s * chunk : K;
}
MMAEMU_HD int64_t mm_split_end(int64_t K, int64_t chunk, int32_t s) {
    const int64_t k0 = mm_split_begin(K, chunk, s);
    return k0 + chunk < K ? k0 + chunk : K;
}

/* The reduction of split partials p[s * stride], s < splits, in the scheme's order: the same
 * additions as mm_dot in mmaemu_gemm.h (contiguous/serial: r = p0, r = r + p_s; pairwise:
 * adjacent pairs level by level, an odd one out carried up). */
MMAEMU_HD float mm_reduce_partials(const float* p, int64_t stride, int32_t splits, int32_t scheme) {
    if (splits <= 1) return p[0];
    if (scheme != MM_SCHEME_PAIRWISE) {
        float r = 0.0f;
        for (int32_t s = 0; s < splits; s++) r = s == 0 ? p[0] : r + p[(int64_t)s * stride];
        return r;
    }
    mm_pairwise acc = {{0.0f}, {0}, 0};
    for (int32_t s = 0; s < splits; s++) mm_pairwise_push(&acc, p[(int64_t)s * stride]);
    return mm_pairwise_result(&acc);
}

/* Where a finished accumulator goes: the split's partial, or the epilogue and the output. */
MMAEMU_HD void mm_finish_element(const mm_launch* p, const mm_gemm* g, int32_t split, int64_t i,
                                 int64_t j, float acc) {
    if (g->splits > 1) {
        p->partials[((int64_t)split * g->M + i) * g->N + j] = acc;
        return;
    }
    mm_store(g, i, j, mm_epilogue_at(acc, g, i, j));
}

#endif /* MMAEMU_LAUNCH_H */
