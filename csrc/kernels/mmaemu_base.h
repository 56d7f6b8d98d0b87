/* mmaemu_base.h: integer types, the host/device qualifier and fp32 bit casts.
 *
 * Every arithmetic header of mmaemu includes this one. The headers are plain C11 and compile
 * unchanged with gcc/clang (the CPU kernels), nvcc and NVRTC (the CUDA kernels), so the bits
 * are defined once. NVRTC has no system headers, so the fixed-width types are declared here. */
#ifndef MMAEMU_BASE_H
#define MMAEMU_BASE_H

/* Fast-math rewrites (reassociation, flushed subnormals, contraction) change the bits:
 * build with csrc/flags.txt. gcc/clang define __FAST_MATH__ under -ffast-math; NVRTC 13 defines
 * __USE_FAST_MATH__ as 1 under --use_fast_math and 0 otherwise. */
#if defined(__FAST_MATH__) || (defined(__USE_FAST_MATH__) && __USE_FAST_MATH__)
#error "mmaemu's arithmetic must not be compiled with -ffast-math / --use_fast_math (csrc/flags.txt)"
#endif

#if defined(__CUDACC_RTC__)
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#else
#include <stdint.h>
#endif

#if defined(__CUDACC__)
#define MMAEMU_HD static __host__ __device__ __forceinline__
#else
#define MMAEMU_HD static inline
#endif

MMAEMU_HD uint32_t mm_f32_bits(float f) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    union { float f; uint32_t u; } v;
    v.f = f;
    return v.u;
#endif
}

MMAEMU_HD float mm_bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    union { float f; uint32_t u; } v;
    v.u = u;
    return v.f;
#endif
}

/* Number of significant bits of x (0 for x == 0). */
MMAEMU_HD int mm_bitlen64(uint64_t x) {
    int n = 0;
    while (x) { x >>= 1; n++; }
    return n;
}

/* The canonical NaN of fp32 results (0x7FFFFFFF, what NVIDIA's fp32 arithmetic returns;
 * inferred for the tensor-core path until probe P8 records it). */
#define MM_F32_NAN_BITS 0x7FFFFFFFu

#endif /* MMAEMU_BASE_H */
