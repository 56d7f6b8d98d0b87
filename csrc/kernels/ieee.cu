// ieee.cu: the IEEE-exact tiled kernels h1, h4 (hopper preset) and v1, v4 (ada preset).
//
// E4M3 x E4M3 only, every accumulation mode, split plan and output kind. Each block FMA is
// mm_exact_* from mmaemu_exact.h: integer exponents, fp32 products (exact), round-toward-zero
// fp32 FMAs against an offset whose spacing is the block grid (exact truncation), exact fp32
// sums. No tensor core is involved, so the bits do not depend on the GPU; mmaemu_exact.h says
// why they equal mm_block's, and the self-tests compare them with the CPU model.
//
// The schedule is mm_dot's: blocks in ascending k from the split's origin; fast accumulation
// chains them; otherwise every promote_k k (whole blocks) the chain restarts from +0 and is added
// into an fp32 register. Splits are grid.z; their partials go to p.partials and
// mmaemu_split_reduce (reference.cu) adds them in the scheme's order.
//
// Tiling (both designs): a 64 x 64 output tile per 256-thread CTA, a 4 x 4 micro-tile per
// thread, k in tiles of 32. Each k tile is decoded once into shared memory: exact fp32 values
// (k-major) and the small exponent integers u of mmaemu_exact.h.
//   h1 / v1 (sm_75+): global loads prefetched into registers during the previous tile's
//     compute; exponent pass with scalar integer add + max.
//   h4 / v4 (sm_80+): a 3-stage cp.async ring of raw FP8 tiles; exponents of two consecutive k
//     packed in one 32-bit word, so one add and one 16x2 max (max.f16x2; max.u16x2 on sm_90)
//     serve two products.
#include "mmaemu_launch.h"
#include "mmaemu_exact.h"

namespace {

constexpr int kTile = 64; // rows of A and of B per CTA; 256 threads, 4 x 4 outputs each
constexpr int kBK = 32;   // k per shared-memory tile

// ---------------------------------------------------------------------------------------------
// Small PTX helpers (NVRTC has no CUDA headers, so these are spelled out).

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800 // the cp.async pipeline of h4 / v4
constexpr int kThreads = 256;
constexpr int kStages = 3;  // cp.async ring depth
constexpr int kRawRow = 48; // bytes per raw row in the ring (32 used; padded against bank conflicts)

// 16 bytes global -> shared, the bytes past src_bytes (0..16) zero-filled. (MMAEMU_EMULATE: the
// CPU execution of this file by test/test_cuda_emulated.py, where copies are synchronous.)
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
#if defined(MMAEMU_EMULATE)
    for (int u = 0; u < 16; u++) ((uint8_t*)dst)[u] = u < src_bytes ? ((const uint8_t*)src)[u] : 0;
#elif __CUDA_ARCH__ >= 800
    uint32_t a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(a), "l"(src), "r"(src_bytes)
                 : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if __CUDA_ARCH__ >= 800 && !defined(MMAEMU_EMULATE)
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if __CUDA_ARCH__ >= 800 && !defined(MMAEMU_EMULATE)
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}
#endif

// Lane-wise max of two packed pairs of exponent sums (values 0..60: as fp16 patterns these are
// +0 and positive subnormals, which max.f16x2 orders like integers).
__device__ __forceinline__ uint32_t max_u16x2(uint32_t a, uint32_t b) {
    uint32_t d;
#if __CUDA_ARCH__ >= 900 && !defined(MMAEMU_EMULATE)
    asm("max.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#elif __CUDA_ARCH__ >= 800 && !defined(MMAEMU_EMULATE)
    asm("max.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#else
    const uint32_t lo = (a & 0xFFFFu) > (b & 0xFFFFu) ? (a & 0xFFFFu) : (b & 0xFFFFu);
    const uint32_t hi = (a >> 16) > (b >> 16) ? (a >> 16) : (b >> 16);
    d = lo | (hi << 16);
#endif
    return d;
}

// The sign bit of x alone. Opaque to the compiler on purpose: it would otherwise fold the
// per-operand masks into every product ((a ^ b) & sign, then ^ K: three operations per product)
// instead of the one three-input xor (sa ^ sb ^ K) they allow.
__device__ __forceinline__ uint32_t sign_bits(float x) {
#if defined(__CUDA_ARCH__) && !defined(MMAEMU_EMULATE)
    uint32_t s;
    asm("and.b32 %0, %1, 0x80000000;" : "=r"(s) : "r"(mm_f32_bits(x)));
    return s;
#else
    return mm_f32_bits(x) & MM_EXACT_SIGN;
#endif
}

// ---------------------------------------------------------------------------------------------
// Shared memory. Values are k-major so a thread reads its 4 rows (or columns) as one float4.

template <bool kPacked>
struct Decoded {
    float av[kBK][kTile];
    float bv[kBK][kTile];
    // kPacked: [k / 2][row], low half = even k, high half = odd k; else [k][row].
    uint32_t ae[kPacked ? kBK / 2 : kBK][kTile];
    uint32_t be[kPacked ? kBK / 2 : kBK][kTile];
};

// 8 consecutive codes of one row (two little-endian words) -> values and exponents at
// [kq .. kq+8) of row r.
template <bool kPacked>
__device__ __forceinline__ void decode8(Decoded<kPacked>& s, bool is_b, int r, int kq, uint32_t w0,
                                        uint32_t w1) {
    float(*v)[kTile] = is_b ? s.bv : s.av;
    uint32_t(*e)[kTile] = is_b ? s.be : s.ae;
#pragma unroll
    for (int u = 0; u < 8; u += 2) {
        const uint32_t w = u < 4 ? w0 : w1;
        const uint32_t c0 = (w >> (8 * (u % 4))) & 0xFFu, c1 = (w >> (8 * (u % 4) + 8)) & 0xFFu;
        v[kq + u][r] = mm_e4m3_value(c0);
        v[kq + u + 1][r] = mm_e4m3_value(c1);
        if (kPacked) {
            e[(kq + u) / 2][r] = mm_e4m3_u(c0) | (mm_e4m3_u(c1) << 16);
        } else {
            e[kq + u][r] = mm_e4m3_u(c0);
            e[kq + u + 1][r] = mm_e4m3_u(c1);
        }
    }
}

// 8 codes of row `row` (of `rows`) at k .. k+8 from global memory, zero past k1 and past the
// last row. `fast`: the 8 bytes are 8-aligned and inside [0, k1).
__device__ __forceinline__ void load8(const uint8_t* base, int64_t ld, int64_t rows, int64_t row,
                                      int64_t k, int64_t k1, bool aligned8, uint32_t& w0,
                                      uint32_t& w1) {
    w0 = w1 = 0;
    if (row >= rows || k >= k1) return;
    const uint8_t* src = base + row * ld + k;
    if (aligned8 && k + 8 <= k1) {
        const uint2 w = *reinterpret_cast<const uint2*>(src);
        w0 = w.x;
        w1 = w.y;
        return;
    }
    for (int u = 0; u < 8 && k + u < k1; u++) {
        const uint32_t c = src[u];
        if (u < 4) w0 |= c << (8 * u);
        else w1 |= c << (8 * (u - 4));
    }
}

// ---------------------------------------------------------------------------------------------
// The block FMAs of one k tile for a thread's 4 x 4 outputs.

struct Acc {
    float chain[4][4]; // the block chain (the accumulator of fast accumulation)
    float main[4][4];  // the promoted fp32 accumulator (promote mode)
    int chain_k;       // k of the current chain's blocks (promote mode)
};

template <int kBlock, bool kPacked>
__device__ __forceinline__ void tile_blocks(const Decoded<kPacked>& s, Acc& acc, int ty, int tx,
                                            int64_t k_tile, int64_t k1, const mm_preset& pre,
                                            bool fast) {
#pragma unroll 1
    for (int kb = 0; kb < kBK; kb += kBlock) {
        if (k_tile + kb >= k1) break; // blocks past the split's end are not executed

        // 1. block exponents: the largest u(a) + u(b) per output.
        uint32_t umax[4][4];
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int c = 0; c < 4; c++) umax[r][c] = 0;
        if (kPacked) {
#pragma unroll 2
            for (int q = 0; q < kBlock / 2; q++) {
                const int kp = kb / 2 + q;
                const uint4 ea = *reinterpret_cast<const uint4*>(&s.ae[kp][ty * 4]);
                const uint4 eb = *reinterpret_cast<const uint4*>(&s.be[kp][tx * 4]);
                const uint32_t a4[4] = {ea.x, ea.y, ea.z, ea.w}, b4[4] = {eb.x, eb.y, eb.z, eb.w};
#pragma unroll
                for (int r = 0; r < 4; r++)
#pragma unroll
                    for (int c = 0; c < 4; c++) umax[r][c] = max_u16x2(umax[r][c], a4[r] + b4[c]);
            }
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const uint32_t lo = umax[r][c] & 0xFFFFu, hi = umax[r][c] >> 16;
                    umax[r][c] = lo > hi ? lo : hi;
                }
        } else {
#pragma unroll 2
            for (int q = 0; q < kBlock; q++) {
                const int k = kb + q;
                const uint4 ea = *reinterpret_cast<const uint4*>(&s.ae[k][ty * 4]);
                const uint4 eb = *reinterpret_cast<const uint4*>(&s.be[k][tx * 4]);
                const uint32_t a4[4] = {ea.x, ea.y, ea.z, ea.w}, b4[4] = {eb.x, eb.y, eb.z, eb.w};
#pragma unroll
                for (int r = 0; r < 4; r++)
#pragma unroll
                    for (int c = 0; c < 4; c++) {
                        const uint32_t u = a4[r] + b4[c];
                        umax[r][c] = u > umax[r][c] ? u : umax[r][c];
                    }
            }
        }

        // 2. grid offsets, and C (the chain) cut to the grid: the start of each exact sum.
        uint32_t kbits[4][4];
        float S[4][4];
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                kbits[r][c] = mm_exact_offset_bits(mm_exact_block_exp(umax[r][c], acc.chain[r][c]), pre.frac);
                S[r][c] = mm_exact_c(acc.chain[r][c], kbits[r][c]);
            }

        // 3. the products, cut to the grid and added exactly.
#pragma unroll 1
        for (int q = 0; q < kBlock; q++) {
            const int k = kb + q;
            const float4 va = *reinterpret_cast<const float4*>(&s.av[k][ty * 4]);
            const float4 vb = *reinterpret_cast<const float4*>(&s.bv[k][tx * 4]);
            const float a4[4] = {va.x, va.y, va.z, va.w}, b4[4] = {vb.x, vb.y, vb.z, vb.w};
            uint32_t sa[4], sb[4];
#pragma unroll
            for (int q = 0; q < 4; q++) {
                sa[q] = sign_bits(a4[q]);
                sb[q] = sign_bits(b4[q]);
            }
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int c = 0; c < 4; c++)
                    S[r][c] += mm_exact_term(a4[r], b4[c], sa[r] ^ sb[c], kbits[r][c]);
        }

        // 4. the block results, and promotion.
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc.chain[r][c] = mm_exact_finish(S[r][c], pre.keep);
        if (!fast && (acc.chain_k += kBlock) == pre.promote_k) {
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    acc.main[r][c] = acc.main[r][c] + acc.chain[r][c];
                    acc.chain[r][c] = 0.0f;
                }
            acc.chain_k = 0;
        }
    }
}

__device__ __forceinline__ void acc_reset(Acc& acc) {
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++) acc.chain[r][c] = acc.main[r][c] = 0.0f;
    acc.chain_k = 0;
}

// The split's accumulators -> partials or epilogue + output.
__device__ __forceinline__ void acc_store(const mm_launch& p, const mm_gemm& g, const Acc& acc,
                                          int32_t split, bool fast, int64_t row0, int64_t col0,
                                          int ty, int tx) {
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const int64_t i = row0 + ty * 4 + r, j = col0 + tx * 4 + c;
            if (i >= g.M || j >= g.N) continue;
            float v = acc.chain[r][c];
            if (!fast) v = acc.chain_k > 0 ? acc.main[r][c] + acc.chain[r][c] : acc.main[r][c];
            mm_finish_element(&p, &g, split, i, j, v);
        }
}

// ---------------------------------------------------------------------------------------------
// h1 / v1: register-prefetched loads.

template <int kBlock>
__device__ void tiled_v1(const mm_launch& p) {
    __shared__ __align__(16) Decoded<false> s;
    const mm_gemm g = mm_launch_plan(&p);
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    const int64_t row0 = (int64_t)blockIdx.y * kTile, col0 = (int64_t)blockIdx.x * kTile;
    const bool fast = g.fast_accum != 0;
    const bool a8 = ((uint64_t)g.a % 8 == 0) && g.lda % 8 == 0;
    const bool b8 = ((uint64_t)g.b % 8 == 0) && g.ldb % 8 == 0;
    const int lr = tid / 4, lk = (tid % 4) * 8; // this thread's 8 codes of each tile

    for (int32_t split = blockIdx.z; split < g.splits; split += gridDim.z) {
        const int64_t k0 = mm_split_begin(g.K, p.chunk, split), k1 = mm_split_end(g.K, p.chunk, split);
        Acc acc;
        acc_reset(acc);
        uint32_t wa0, wa1, wb0, wb1;
        load8(g.a, g.lda, g.M, row0 + lr, k0 + lk, k1, a8, wa0, wa1);
        load8(g.b, g.ldb, g.N, col0 + lr, k0 + lk, k1, b8, wb0, wb1);
        for (int64_t k = k0; k < k1; k += kBK) {
            __syncthreads(); // the previous tile is consumed
            decode8(s, false, lr, lk, wa0, wa1);
            decode8(s, true, lr, lk, wb0, wb1);
            if (k + kBK < k1) { // next tile's loads in flight during this tile's compute
                load8(g.a, g.lda, g.M, row0 + lr, k + kBK + lk, k1, a8, wa0, wa1);
                load8(g.b, g.ldb, g.N, col0 + lr, k + kBK + lk, k1, b8, wb0, wb1);
            }
            __syncthreads();
            tile_blocks<kBlock, false>(s, acc, ty, tx, k, k1, g.preset, fast);
        }
        acc_store(p, g, acc, split, fast, row0, col0, ty, tx);
    }
}

// ---------------------------------------------------------------------------------------------
// h4 / v4: a cp.async ring of raw tiles, packed exponent pairs.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800

struct Ring {
    uint8_t a[kStages][kTile][kRawRow];
    uint8_t b[kStages][kTile][kRawRow];
};

// One raw k tile into ring stage `st`: 64 rows x 2 chunks of 16 bytes per operand, one chunk per
// thread. cp.async when the source is 16-aligned (zero-filled past k1 and past the last row),
// else byte loads.
__device__ __forceinline__ void ring_load(Ring& ring, int st, const mm_gemm& g, int64_t row0,
                                          int64_t col0, int64_t k, int64_t k1, bool a16, bool b16) {
    const int tid = threadIdx.x;
    const bool is_b = tid >= kThreads / 2;
    const int t = tid % (kThreads / 2), r = t / 2, half = t % 2;
    const int64_t row = (is_b ? col0 : row0) + r, rows = is_b ? g.N : g.M;
    const int64_t kc = k + half * 16;
    const uint8_t* base = is_b ? g.b : g.a;
    const int64_t ld = is_b ? g.ldb : g.lda;
    uint8_t* dst = is_b ? &ring.b[st][r][half * 16] : &ring.a[st][r][half * 16];
    int64_t valid = row < rows ? k1 - kc : 0;
    valid = valid < 0 ? 0 : (valid > 16 ? 16 : valid);
    if (is_b ? b16 : a16) {
        cp_async16(dst, valid > 0 ? (const void*)(base + row * ld + kc) : (const void*)base, (int)valid);
    } else {
        for (int u = 0; u < 16; u++) dst[u] = u < valid ? base[row * ld + kc + u] : 0;
    }
}

template <int kBlock>
__device__ void tiled_v4(const mm_launch& p) {
    __shared__ __align__(16) Decoded<true> s;
    __shared__ __align__(16) Ring ring;
    const mm_gemm g = mm_launch_plan(&p);
    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    const int64_t row0 = (int64_t)blockIdx.y * kTile, col0 = (int64_t)blockIdx.x * kTile;
    const bool fast = g.fast_accum != 0;
    const bool a16 = ((uint64_t)g.a % 16 == 0) && g.lda % 16 == 0;
    const bool b16 = ((uint64_t)g.b % 16 == 0) && g.ldb % 16 == 0;
    const int lr = tid / 4, lk = (tid % 4) * 8;

    for (int32_t split = blockIdx.z; split < g.splits; split += gridDim.z) {
        const int64_t k0 = mm_split_begin(g.K, p.chunk, split), k1 = mm_split_end(g.K, p.chunk, split);
        const int64_t ntiles = (k1 - k0 + kBK - 1) / kBK;
        Acc acc;
        acc_reset(acc);
        __syncthreads(); // the ring is free (previous split done)
#pragma unroll
        for (int st = 0; st < kStages - 1; st++) {
            if (st < ntiles) ring_load(ring, st, g, row0, col0, k0 + st * kBK, k1, a16, b16);
            cp_async_commit();
        }
        for (int64_t t = 0; t < ntiles; t++) {
            cp_async_wait<kStages - 2>(); // this thread's copies of tile t have landed
            __syncthreads();              // everyone's; and tile t-1 is fully consumed
            const int st = (int)(t % kStages);
            uint2 wa = *reinterpret_cast<const uint2*>(&ring.a[st][lr][lk]);
            uint2 wb = *reinterpret_cast<const uint2*>(&ring.b[st][lr][lk]);
            decode8(s, false, lr, lk, wa.x, wa.y);
            decode8(s, true, lr, lk, wb.x, wb.y);
            if (t + kStages - 1 < ntiles)
                ring_load(ring, (int)((t + kStages - 1) % kStages), g, row0, col0,
                          k0 + (t + kStages - 1) * kBK, k1, a16, b16);
            cp_async_commit();
            __syncthreads();
            tile_blocks<kBlock, true>(s, acc, ty, tx, k0 + t * kBK, k1, g.preset, fast);
        }
        cp_async_wait<0>();
        acc_store(p, g, acc, split, fast, row0, col0, ty, tx);
    }
}
#endif

} // namespace

// The entry points. The loader launches them with 256 threads, grid (ceil(N/64), ceil(M/64),
// min(splits, 65535)), only for E4M3 x E4M3 with the matching preset, and h4 / v4 only on sm_80+.
extern "C" __global__ void __launch_bounds__(256, 2) mmaemu_h1_gemm(mm_launch p) { tiled_v1<32>(p); }
extern "C" __global__ void __launch_bounds__(256, 2) mmaemu_v1_gemm(mm_launch p) { tiled_v1<16>(p); }

extern "C" __global__ void __launch_bounds__(256, 2) mmaemu_h4_gemm(mm_launch p) {
#if __CUDA_ARCH__ >= 800 || defined(MMAEMU_EMULATE)
    tiled_v4<32>(p);
#else
    __trap();
#endif
}
extern "C" __global__ void __launch_bounds__(256, 2) mmaemu_v4_gemm(mm_launch p) {
#if __CUDA_ARCH__ >= 800 || defined(MMAEMU_EMULATE)
    tiled_v4<16>(p);
#else
    __trap();
#endif
}
