// cuda_emulated_check.cpp: runs ieee.cu, wgmma.cu and reference.cu's split reduction under
// cuda_emulator.h and compares every kernel's output with mm_gemm_element bit for bit
// (test/test_cuda_emulated.py).
#include <pthread.h>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>
#include "mmaemu_launch.h"
#include "mmaemu_presets.h"
#include "reference.cu"

thread_local mm_emu_dim3 threadIdx, blockIdx;
mm_emu_dim3 gridDim, blockDim;
static pthread_barrier_t barrier;
void __syncthreads() { pthread_barrier_wait(&barrier); }

alignas(128) static uint8_t dynamic_smem[160 * 1024];
uint8_t* mm_emu_dynamic_smem() { return dynamic_smem; }
uint32_t mm_emu_smem_addr(const void* p) {
    const uint8_t* q = (const uint8_t*)p;
    if (q < dynamic_smem || q >= dynamic_smem + sizeof dynamic_smem) { printf("smem_addr outside shared memory\n"); abort(); }
    return (uint32_t)(q - dynamic_smem);
}

/* wgmma.mma_async m64n128k32 .f32.e4m3.e4m3, A and B K-major in shared memory, no swizzle: in
   a core matrix of 8 rows x 16 bytes the rows are 16 bytes apart; SBO separates row groups,
   LBO the two 16-byte halves of k. Thread t of the warpgroup holds d[i] at row
   16*(t/32) + (t%32)/4 + 8*((i>>1)&1), column 8*(i>>2) + 2*(t%4) + (i&1). */
void mm_emu_wgmma_m64n128k32(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {
    struct desc { uint32_t start, lbo, sbo; };
    auto dec = [](uint64_t x) {
        if (x >> 62) { printf("swizzled descriptor\n"); abort(); }
        return desc{(uint32_t)(x & 0x3FFF) << 4, (uint32_t)((x >> 16) & 0x3FFF) << 4, (uint32_t)((x >> 32) & 0x3FFF) << 4};
    };
    const desc A = dec(da), B = dec(db);
    auto at = [](const desc& m, int row, int k) {
        const uint32_t off = m.start + (row / 8) * m.sbo + (row % 8) * 16 + (k / 16) * m.lbo + (k % 16);
        if (off >= sizeof dynamic_smem) { printf("descriptor reads outside shared memory\n"); abort(); }
        return dynamic_smem[off];
    };
    const int t = threadIdx.x % 128, wq = t / 32, lane = t % 32;
    const mm_preset tc = mm_preset_get(MM_PRESET_HOPPER);
    for (int i = 0; i < 64; i++) {
        const int row = 16 * wq + lane / 4 + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * (lane % 4) + (i & 1);
        uint8_t a[32], b[32];
        for (int k = 0; k < 32; k++) { a[k] = at(A, row, k); b[k] = at(B, col, k); }
        d[i] = mm_block(a, b, MM_FMT_E4M3, MM_FMT_E4M3, 32, scale_d ? d[i] : 0.0f, &tc);
    }
}

extern "C" void mmaemu_h1_gemm(mm_launch); extern "C" void mmaemu_h4_gemm(mm_launch);
extern "C" void mmaemu_v1_gemm(mm_launch); extern "C" void mmaemu_v4_gemm(mm_launch);
extern "C" void mmaemu_wgmma_hopper_gemm(mm_launch); extern "C" void mmaemu_wgmma_ada_gemm(mm_launch);
extern "C" void mmaemu_wgmma_hopper_fast_gemm(mm_launch); extern "C" void mmaemu_wgmma_ada_fast_gemm(mm_launch);

static void launch(void (*kernel)(mm_launch), mm_emu_dim3 grid, const mm_launch& p) {
    gridDim = grid;
    blockDim = {256, 1, 1};
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                pthread_barrier_init(&barrier, nullptr, 256);
                std::vector<std::thread> threads;
                for (unsigned t = 0; t < 256; t++)
                    threads.emplace_back([=, &p] { threadIdx = {t, 0, 0}; blockIdx = {x, y, z}; kernel(p); });
                for (auto& th : threads) th.join();
                pthread_barrier_destroy(&barrier);
            }
}

static uint64_t rng = 0x243F6A8885A308D3ull;
static uint32_t rnd() { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 11); }
static uint8_t code(int mode) {
    static const uint8_t special[] = {0x00, 0x80, 0x7F, 0xFF, 0x7E, 0xFE, 0x01, 0x81, 0x08};
    if (mode == 1 && rnd() % 16 == 0) return special[rnd() % 9];
    const uint8_t c = (uint8_t)rnd();
    return (c & 0x7F) == 0x7F ? c ^ 1 : c;
}

static int failures = 0, plans = 0;

struct kernel_pair { void (*promote)(mm_launch); void (*fast)(mm_launch); };

static void check(const char* kname, kernel_pair kp, int tile, int preset, int64_t M,
                  int64_t N, int64_t K, int fast, int splits, int scheme, int out_kind, int pad, int mode) {
    const int64_t lda = K + pad, ldb = K + pad;
    std::vector<uint8_t> A(M * lda + 16), B(N * ldb + 16);
    for (auto& c : A) c = code(mode);
    for (auto& c : B) c = code(mode);
    const int osize = mm_out_size(out_kind);
    std::vector<uint8_t> out(M * N * osize, 0xCD), want(M * N * osize, 0);
    static float sa = 0.375f, sb = -3.0f, sr = 0.5f;
    mm_gemm g;
    memset(&g, 0, sizeof g);
    g.a = A.data(); g.b = B.data(); g.out = want.data(); g.lda = lda; g.ldb = ldb; g.ldo = N;
    g.M = M; g.N = N; g.K = K; g.fmt_a = g.fmt_b = MM_FMT_E4M3; g.fast_accum = fast; g.splits = splits;
    g.scheme = scheme; g.out_kind = out_kind; g.epilogue_order = MM_EPI_H2;
    g.has_scale_result = out_kind == MM_OUT_E4M3 || out_kind == MM_OUT_E5M2;
    g.scale_a = sa; g.scale_b = sb; g.scale_result = sr;
    g.preset = mm_preset_get(preset);
    /* The tiled kernels compute the contiguous split layout; a plan of the round-robin layout
     * (the ada preset with splits) runs on the reference kernel (kernel_accepts). */
    g.preset.split_rr_tile = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) mm_store(&g, i, j, mm_gemm_element(&g, i, j));
    mm_launch p;
    memset(&p, 0, sizeof p);
    p.g = g;
    p.g.out = out.data();
    p.g.scale_a = p.g.scale_b = p.g.scale_result = 12345.0f; /* the kernels must read the pointers */
    p.scale_a_ptr = &sa; p.scale_b_ptr = &sb; p.scale_result_ptr = &sr;
    p.chunk = mm_split_chunk(K, splits);
    std::vector<float> parts(splits > 1 ? splits * M * N : 1, -999.0f);
    p.partials = parts.data();
    const unsigned gx = (unsigned)((N + tile - 1) / tile), gy = (unsigned)((M + tile - 1) / tile);
    launch(fast ? kp.fast : kp.promote, {gx, gy, (unsigned)splits}, p);
    if (splits > 1) launch(mmaemu_split_reduce, {4, 1, 1}, p);
    plans++;
    if (memcmp(out.data(), want.data(), out.size()) != 0) {
        int64_t bad = 0, first = -1;
        for (int64_t e = 0; e < M * N; e++)
            if (memcmp(&out[e * osize], &want[e * osize], osize) != 0) { if (first < 0) first = e; bad++; }
        uint32_t got_bits = 0, want_bits = 0;
        memcpy(&got_bits, &out[first * osize], osize);
        memcpy(&want_bits, &want[first * osize], osize);
        printf("MISMATCH %s preset=%d M=%lld N=%lld K=%lld fast=%d splits=%d scheme=%d out=%d pad=%d: "
               "%lld of %lld differ, first at (%lld, %lld): got %08x want %08x\n", kname, preset,
               (long long)M, (long long)N, (long long)K, fast, splits, scheme, out_kind, pad, (long long)bad,
               (long long)(M * N), (long long)(first / N), (long long)(first % N), got_bits, want_bits);
        failures++;
    }
}

int main() {
    struct { const char* name; kernel_pair fn; int tile, preset; } ks[] = {
        {"h1", {mmaemu_h1_gemm, mmaemu_h1_gemm}, 64, MM_PRESET_HOPPER},
        {"h4", {mmaemu_h4_gemm, mmaemu_h4_gemm}, 64, MM_PRESET_HOPPER},
        {"v1", {mmaemu_v1_gemm, mmaemu_v1_gemm}, 64, MM_PRESET_ADA},
        {"v4", {mmaemu_v4_gemm, mmaemu_v4_gemm}, 64, MM_PRESET_ADA},
        {"wgmma-hopper", {mmaemu_wgmma_hopper_gemm, mmaemu_wgmma_hopper_fast_gemm}, 128, MM_PRESET_HOPPER},
        {"wgmma-ada", {mmaemu_wgmma_ada_gemm, mmaemu_wgmma_ada_fast_gemm}, 128, MM_PRESET_ADA},
    };
    for (auto& k : ks) {
        for (int fast = 0; fast < 2; fast++) {
            check(k.name, k.fn, k.tile, k.preset, 70, 135, 300, fast, 1, 0, MM_OUT_ACC, 0, 1);
            check(k.name, k.fn, k.tile, k.preset, 1, 1, 1, fast, 1, 0, MM_OUT_ACC, 0, 0);
            check(k.name, k.fn, k.tile, k.preset, 130, 9, 529, fast, 1, 0, MM_OUT_BF16, 0, 0);
            check(k.name, k.fn, k.tile, k.preset, 33, 65, 200, fast, 1, 0, MM_OUT_E4M3, 3, 1);
            check(k.name, k.fn, k.tile, k.preset, 20, 24, 700, fast, 3, MM_SCHEME_PAIRWISE, MM_OUT_F16, 0, 0);
            check(k.name, k.fn, k.tile, k.preset, 17, 5, 1000, fast, 4, MM_SCHEME_SERIAL, MM_OUT_ACC, 5, 1);
        }
        check(k.name, k.fn, k.tile, k.preset, 64, 128, 16, 1, 1, 0, MM_OUT_F32, 0, 0);
        check(k.name, k.fn, k.tile, k.preset, 129, 130, 96, 0, 1, 0, MM_OUT_E5M2, 16, 0);
    }
    printf("%d plans, %d mismatching\n", plans, failures);
    return failures != 0;
}
