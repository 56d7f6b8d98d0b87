/* cpu_kernel_avx512_nibbles.c: the AVX-512 kernel for CPUs without VPOPCNTD and VBMI (Skylake-SP,
 * Cascade Lake, Cooper Lake): the same source, its count of negative products from a nibble table
 * (popcount32) and C's exponent bytes by shifts and selects (fields_u8). */
#define MM_AVX512_NIBBLES 1
#include "cpu_kernel_avx512.c"
