/* cpu_kernel_avx512_nibbles.c: the AVX-512 kernel for CPUs without VPOPCNTD (Skylake-SP, Cascade
 * Lake): the same source, its count of negative products from a nibble table (popcount32). */
#define MM_AVX512_NIBBLES 1
#include "cpu_kernel_avx512.c"
