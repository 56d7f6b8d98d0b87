/* cpu_fast.c: the `cpu` backend. */
#include "mmaemu.h"

int mmaemu_gemm_cpu(const mm_gemm* g, int threads) {
    (void)threads;
    return mmaemu_gemm_reference(g);
}
