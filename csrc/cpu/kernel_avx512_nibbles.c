/* kernel_avx512_nibbles.c: the AVX-512 kernel (kernel_avx512.h) for CPUs without VPOPCNTD and
 * VBMI (Skylake-SP, Cascade Lake, Cooper Lake): its count of negative products from a nibble
 * table (popcount32) and C's exponent bytes by shifts and selects (fields_u8). */
#define MM_AVX512_NIBBLES 1
#include "kernel_avx512.h"
