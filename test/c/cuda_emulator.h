/* cuda_emulator.h: just enough of CUDA to run the kernels' device code as C++ on the CPU
 * (test/test_cuda_emulated.py force-includes it): one OS thread per CUDA thread, a barrier for
 * __syncthreads, __shared__ as block-shared storage; cuda_emulated_check.cpp implements it. */
#pragma once
#include <cstdint>
#include <cstdlib>
#define MMAEMU_EMULATE 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
struct mm_emu_dim3 { unsigned x, y, z; };
extern thread_local mm_emu_dim3 threadIdx, blockIdx;
extern mm_emu_dim3 gridDim, blockDim;
void __syncthreads();
[[noreturn]] inline void __trap() { abort(); }
struct alignas(8) uint2 { uint32_t x, y; };
struct alignas(16) uint4 { uint32_t x, y, z, w; };
struct alignas(16) float4 { float x, y, z, w; };
uint8_t* mm_emu_dynamic_smem();
uint32_t mm_emu_smem_addr(const void* p);
void mm_emu_wgmma_m64n128k32(float (&d)[64], uint64_t da, uint64_t db, int scale_d);
