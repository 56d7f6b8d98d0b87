// reference.cu: the scalar reference on the GPU, and the split-K reduction of the tiled kernels.
//
// mmaemu_reference_gemm is mmaemu_gemm_reference (csrc/core/reference.c) with one thread per output
// element instead of a loop: every element is mm_gemm_element from the shared header, so it
// covers every format pair, preset, accumulation mode, split plan and output kind, and its bits
// are the C model's by construction (same source, fp32 adds compiled with --fmad=false).
// Slow (no data reuse), like its CPU twin; it exists so that backend="reference" on CUDA
// tensors runs on their device, and as the yardstick of the fast kernels' self-tests.
#include "mmaemu_launch.h"

extern "C" __global__ void __launch_bounds__(256) mmaemu_reference_gemm(mm_launch p) {
    const mm_gemm g = mm_launch_plan(&p);
    const int64_t total = g.M * g.N;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += step) {
        const int64_t i = idx / g.N, j = idx % g.N;
        mm_store(&g, i, j, mm_gemm_element(&g, i, j));
    }
}

// The tiled kernels write one fp32 partial per split and output element; this adds them in the
// split scheme's order (mm_reduce_partials, the additions of mm_dot) and applies the epilogue.
extern "C" __global__ void __launch_bounds__(256) mmaemu_split_reduce(mm_launch p) {
    const mm_gemm g = mm_launch_plan(&p);
    const int64_t total = g.M * g.N;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += step) {
        const float acc = mm_reduce_partials(p.partials + idx, total, g.splits, g.scheme);
        mm_store(&g, idx / g.N, idx % g.N, mm_epilogue_at(acc, &g, idx / g.N, idx % g.N));
    }
}
