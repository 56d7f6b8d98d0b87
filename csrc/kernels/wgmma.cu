// wgmma.cu: the gated tensor-core kernel for sm_90 (cuda:wgmma), built for sm_90a only.
//
// On Hopper the `hopper` preset *is* the FP8 wgmma instruction: a k32 wgmma is one 32-product
// block + C (validated with C = 0: 5 000 H100 vectors, 0 mismatches; C's part in the block is
// cited, not validated; docs/backends.md lists each assumption). So issuing
// wgmma.m64n128k32.f32.e4m3.e4m3 in exactly mmaemu's schedule returns the model's bits at
// tensor-core speed:
//   - blocks in ascending k from the split's origin, one wgmma per block, the accumulator
//     carried from block to block (fast accumulation);
//   - without fast accumulation, each 128-k interval starts a fresh chain (scale-d = 0) and its
//     result is added into an fp32 register with an ordinary IEEE add (main = main + chain);
//   - split partials to p.partials, reduced by mmaemu_split_reduce (reference.cu);
//   - the epilogue (scales, output rounding) in IEEE fp32 on the CUDA cores, mm_epilogue.
// The `ada` preset (16-product blocks + C) runs the same instruction with the upper 16 k of
// every wgmma pointing at zeros: a k32 block with 16 zero products is a 16-product block.
//
// Nothing here is trusted blindly: the loader runs this kernel only on compute capability 9.0,
// and backend="auto" takes it only after its self-test (mmaemu/runtime/selftest.py) matched the CPU
// model on the device. Two normalisations make the result independent of hardware behaviour
// the model leaves open: a zero accumulator is returned as +0 (the model never produces -0),
// and NaNs are canonicalised by the epilogue.
//
// Layout: a CTA of two warpgroups computes a 128 x 128 output tile (each warpgroup 64 rows).
// k tiles of 128 bytes per row (one promotion interval) stream through a 4-stage cp.async
// ring; with fast accumulation one interval's wgmmas run while the next are issued. In shared memory a k tile is 8 regions of 16 k; a region holds each row's 16 bytes in
// row order, which is wgmma's K-major "interleave" layout (no swizzle): a core matrix is 8
// rows x 16 bytes, SBO = 128 between row groups, LBO = the distance to the next 16 k.
#include "mmaemu_launch.h"

// MMAEMU_EMULATE: test/test_cuda_emulated.py executes this file on the CPU; there the PTX
// helpers below call mm_emu_* functions of the test's emulator (wgmma computed by the model,
// with the operand and fragment layouts the PTX ISA documents).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || defined(MMAEMU_EMULATE)
#define MM_WGMMA_BODY 1
#endif

namespace {
#if defined(MM_WGMMA_BODY) // sm_90a device code; elsewhere only the entry points below

constexpr int kRows = 128;                       // rows of A and of B per CTA
constexpr int kThreads = 256;                    // two warpgroups
constexpr int kStages = 4;
constexpr int kKTile = 128;                      // k per stage = one promotion interval
constexpr int kRegion = kRows * 16 + 16;         // one 16-k region, padded against bank conflicts
constexpr int kOperand = (kKTile / 16) * kRegion; // one operand's k tile
constexpr int kStage = 2 * kOperand;
constexpr int kZero = 2048;                      // zeros for the upper k of ada's wgmmas
constexpr int kSmemBytes = kStages * kStage + kZero; // 134144: smem_bytes of cuda:wgmma in csrc/cuda/kernel_table.c
static_assert(kSmemBytes == 134144, "update smem_bytes of cuda:wgmma in csrc/cuda/kernel_table.c");
static_assert(kStages == 4, "cp_async_wait_stages / _one wait for kStages - 2 / kStages - 3 pending groups");

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
#if defined(MMAEMU_EMULATE)
    return mm_emu_smem_addr(p);
#else
    uint32_t a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
#endif
}

// 16 bytes global -> shared (dst), the bytes past src_bytes zero-filled.
__device__ __forceinline__ void cp_async16(uint8_t* dst, const void* src, int src_bytes) {
#if defined(MMAEMU_EMULATE)
    for (int u = 0; u < 16; u++) dst[u] = u < src_bytes ? ((const uint8_t*)src)[u] : 0;
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(src_bytes)
                 : "memory");
#endif
}

#if defined(MMAEMU_EMULATE)
#define MM_PTX(text) ((void)0)
#else
#define MM_PTX(text) asm volatile(text ::: "memory")
#endif
__device__ __forceinline__ void cp_async_commit() { MM_PTX("cp.async.commit_group;"); }
__device__ __forceinline__ void cp_async_wait_stages() { MM_PTX("cp.async.wait_group 2;"); } // kStages - 2
__device__ __forceinline__ void cp_async_wait_one() { MM_PTX("cp.async.wait_group 1;"); }    // kStages - 3
__device__ __forceinline__ void cp_async_wait_all() { MM_PTX("cp.async.wait_group 0;"); }
__device__ __forceinline__ void fence_proxy_async() { MM_PTX("fence.proxy.async.shared::cta;"); }
__device__ __forceinline__ void wgmma_fence() { MM_PTX("wgmma.fence.sync.aligned;"); }
__device__ __forceinline__ void wgmma_commit() { MM_PTX("wgmma.commit_group.sync.aligned;"); }
__device__ __forceinline__ void wgmma_wait_all() { MM_PTX("wgmma.wait_group.sync.aligned 0;"); }
__device__ __forceinline__ void wgmma_wait_one() { MM_PTX("wgmma.wait_group.sync.aligned 1;"); }

// A K-major, no-swizzle shared-memory matrix descriptor.
__device__ __forceinline__ uint64_t desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFFu) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFFu) << 32);
}

#define MM_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), \
                 "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])

// d (64 x 128 per warpgroup, fp32) = A (64 x 32 E4M3) * B (128 x 32 E4M3)^T + (scale_d ? d : 0).
__device__ __forceinline__ void wgmma_k32(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {
#if defined(MMAEMU_EMULATE)
    mm_emu_wgmma_m64n128k32(d, da, db, scale_d);
#else
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, p, 1, 1;\n}\n"
        : MM_D8(0), MM_D8(8), MM_D8(16), MM_D8(24), MM_D8(32), MM_D8(40), MM_D8(48), MM_D8(56)
        : "l"(da), "l"(db), "r"(scale_d)
        : "memory");
#endif
}
#undef MM_D8

// The accumulators are written asynchronously: tie every later use to the wait.
__device__ __forceinline__ void fence_operands(float (&d)[64]) {
#if !defined(MMAEMU_EMULATE)
#pragma unroll
    for (int i = 0; i < 64; i++) asm volatile("" : "+f"(d[i])::"memory");
#else
    (void)d;
#endif
}

// Block s of a k tile: one wgmma. ada: region s holds the block's 16 k and the upper 16 k of the
// instruction read zeros; hopper: regions 2s, 2s+1 hold the block's 32 k.
template <bool kAda>
__device__ __forceinline__ void issue_block(float (&d)[64], uint32_t a_base, uint32_t b_base,
                                            uint32_t zero_addr, int s, bool chain_start) {
    uint64_t da, db;
    if (kAda) {
        const uint32_t aa = a_base + s * kRegion, ba = b_base + s * kRegion;
        da = desc(aa, zero_addr - aa, 128);
        db = desc(ba, zero_addr - ba, 128);
    } else {
        da = desc(a_base + 2 * s * kRegion, kRegion, 128);
        db = desc(b_base + 2 * s * kRegion, kRegion, 128);
    }
    wgmma_k32(d, da, db, chain_start ? 0 : 1);
}

// One k tile (128 rows x 128 bytes per operand) into stage memory: 16-byte chunks, 8 per thread,
// 8 consecutive threads per row (coalesced). cp.async where the source is 16-aligned, zero-fill
// past k1 and past the last row; byte loads otherwise.
__device__ __forceinline__ void load_tile(uint8_t* stage, const mm_gemm& g, int64_t row0,
                                          int64_t col0, int64_t k, int64_t k1, bool a16, bool b16) {
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int q = threadIdx.x + i * kThreads;
        const bool is_b = q >= kRows * 8;
        const int r = (q % (kRows * 8)) / 8, c = q % 8;
        const int64_t row = (is_b ? col0 : row0) + r, rows = is_b ? g.N : g.M;
        const int64_t kc = k + c * 16;
        const uint8_t* base = is_b ? g.b : g.a;
        const int64_t ld = is_b ? g.ldb : g.lda;
        uint8_t* dst = stage + (is_b ? kOperand : 0) + c * kRegion + r * 16;
        int64_t valid = row < rows ? k1 - kc : 0;
        valid = valid < 0 ? 0 : (valid > 16 ? 16 : valid);
        if (is_b ? b16 : a16) {
            cp_async16(dst, valid > 0 ? (const void*)(base + row * ld + kc) : (const void*)base,
                       (int)valid);
        } else {
            for (int u = 0; u < 16; u++) dst[u] = u < valid ? base[row * ld + kc + u] : 0;
        }
    }
}

// The kernel. kAda: the ada preset (16-product blocks), else hopper (32). kFast: fast
// accumulation (one chain through the split), else promotion every 128 k.
template <bool kAda, bool kFast>
__device__ void wgmma_gemm(const mm_launch& p) {
#if defined(MMAEMU_EMULATE)
    uint8_t* smem = mm_emu_dynamic_smem();
#else
    extern __shared__ __align__(128) uint8_t smem[];
#endif
    constexpr int kBlock = kAda ? 16 : 32;
    // Tiles loaded ahead: promotion waits for each interval's chain before the next, so 3 tiles
    // can be in flight; fast accumulation keeps one interval's wgmmas running while the next is
    // issued, so the stage being overwritten must be two intervals old.
    constexpr int kAhead = kFast ? kStages - 2 : kStages - 1;
    const mm_gemm g = mm_launch_plan(&p);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wg = warp / 4, wq = warp % 4;
    const int64_t row0 = (int64_t)blockIdx.y * kRows, col0 = (int64_t)blockIdx.x * kRows;
    const bool a16 = ((uint64_t)g.a % 16 == 0) && g.lda % 16 == 0;
    const bool b16 = ((uint64_t)g.b % 16 == 0) && g.ldb % 16 == 0;
    uint8_t* zero = smem + kStages * kStage;
    for (int i = tid; i < kZero; i += kThreads) zero[i] = 0;
    const uint32_t zero_addr = smem_addr(zero);
    float* out_tile = reinterpret_cast<float*>(smem); // [128][128] staging for the epilogue

    float d[64], acc[64];
    for (int32_t split = blockIdx.z; split < g.splits; split += gridDim.z) {
        const int64_t k0 = mm_split_begin(g.K, p.chunk, split), k1 = mm_split_end(g.K, p.chunk, split);
        const int64_t ntiles = (k1 - k0 + kKTile - 1) / kKTile;
#pragma unroll
        for (int i = 0; i < 64; i++) d[i] = acc[i] = 0.0f;
        __syncthreads(); // the ring (and the staging tile) are free
#pragma unroll
        for (int st = 0; st < kAhead; st++) {
            if (st < ntiles) load_tile(smem + st * kStage, g, row0, col0, k0 + st * kKTile, k1, a16, b16);
            cp_async_commit();
        }
        for (int64_t t = 0; t < ntiles; t++) {
            // Groups committed so far: tiles 0 .. t+kAhead-1; tile t has landed once at most
            // kAhead - 1 newer groups are pending.
            if (kFast) cp_async_wait_one();
            else cp_async_wait_stages();
            fence_proxy_async(); // generic-proxy writes (cp.async, stores) -> wgmma reads
            __syncthreads();     // tile t visible to all; every thread is past the previous wait
            // Overwrites the stage of tile t + kAhead - kStages: its wgmmas are complete (promotion:
            // waited for in the previous interval; fast: the wait_group(1) after tile t-1 covered
            // tile t-2, for both warpgroups, by the barrier above).
            if (t + kAhead < ntiles)
                load_tile(smem + ((t + kAhead) % kStages) * kStage, g, row0, col0,
                          k0 + (t + kAhead) * kKTile, k1, a16, b16);
            cp_async_commit();

            const uint8_t* st = smem + (t % kStages) * kStage;
            const uint32_t a_base = smem_addr(st) + wg * 64 * 16, b_base = smem_addr(st + kOperand);
            // One promotion interval: a fixed sequence of wgmmas, the first starting from +0 unless
            // the chain continues (fast accumulation). In the split's last interval the blocks past
            // k1 read zeros: a block of zero products returns C unchanged, since C carries at most
            // 14 significant bits (the model's identity; SageAttention2 reports the same for
            // hardware, and the self-test checks K that are not multiples of 128).
            const bool chain_start = !kFast || t == 0;
            if (!kFast) fence_operands(d);
            wgmma_fence();
#pragma unroll
            for (int s = 0; s < kKTile / kBlock; s++)
                issue_block<kAda>(d, a_base, b_base, zero_addr, s, s == 0 && chain_start);
            wgmma_commit();
            if (kFast) {
                wgmma_wait_one(); // the previous interval's wgmmas are done; this one may run on
            } else {
                wgmma_wait_all();
                fence_operands(d);
#pragma unroll
                for (int i = 0; i < 64; i++) acc[i] = acc[i] + d[i]; // promotion: an IEEE fp32 add
            }
        }
        wgmma_wait_all();
        fence_operands(d);
        cp_async_wait_all();
        __syncthreads(); // every warpgroup is done with the ring: reuse it to stage the results

        // Fragment layout of m64nNk32 f32: row 16*wq + lane/4 (+8), column 8*(i/4) + 2*(lane%4) (+1).
#pragma unroll
        for (int i = 0; i < 64; i++) {
            const int r = wg * 64 + wq * 16 + lane / 4 + 8 * ((i >> 1) & 1);
            const int c = 8 * (i >> 2) + 2 * (lane % 4) + (i & 1);
            float v = kFast ? d[i] : acc[i];
            if ((mm_f32_bits(v) & 0x7FFFFFFFu) == 0) v = 0.0f; // the model's zero is +0
            out_tile[r * kRows + c] = v;
        }
        __syncthreads();
        for (int idx = tid; idx < kRows * kRows; idx += kThreads) {
            const int64_t r = row0 + idx / kRows, c = col0 + idx % kRows;
            if (r < g.M && c < g.N) mm_finish_element(&p, &g, split, r, c, out_tile[idx]);
        }
    }
}
#endif

} // namespace

// Entry points: the preset's block size and the accumulation mode are template parameters, so
// each kernel issues its wgmmas in one straight sequence (the loader picks by plan).
#if defined(MM_WGMMA_BODY)
#define MM_WGMMA_ENTRY(name, ada, fast) \
    extern "C" __global__ void __launch_bounds__(256, 1) name(mm_launch p) { wgmma_gemm<ada, fast>(p); }
#else
#define MM_WGMMA_ENTRY(name, ada, fast) \
    extern "C" __global__ void __launch_bounds__(256, 1) name(mm_launch p) { __trap(); } // sm_90a only
#endif
MM_WGMMA_ENTRY(mmaemu_wgmma_hopper_gemm, false, false)
MM_WGMMA_ENTRY(mmaemu_wgmma_hopper_fast_gemm, false, true)
MM_WGMMA_ENTRY(mmaemu_wgmma_ada_gemm, true, false)
MM_WGMMA_ENTRY(mmaemu_wgmma_ada_fast_gemm, true, true)
