/* kernel_avx512.c: the AVX-512 kernel (kernel_avx512.h) for CPUs with VPOPCNTD and VBMI: its
 * count of negative products by VPOPCNTD, C's exponent bytes by vpmultishiftqb. */
#include "kernel_avx512.h"
