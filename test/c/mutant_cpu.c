/* mutant_cpu.c: a cpu executor one bit wrong, which the fuzz harness must report
 * (test/test_c_lint.py: the harness is not a check that cannot fail). Linked in place of
 * csrc/cpu/gemm.c. */
#include "mmaemu.h"
/* A wrong `cpu` executor: the reference with the last output element's lowest bit flipped. */
int mmaemu_gemm_cpu(const mm_gemm* g, int threads, const char* simd) {
    (void)threads, (void)simd;
    const int rc = mmaemu_gemm_reference(g);
    if (rc == MM_OK && g->M > 0 && g->N > 0) {
        uint8_t* last = (uint8_t*)g->out + ((g->M - 1) * g->ldo + g->N - 1) * mm_out_size(g->out_kind);
        *last ^= 1u;
    }
    return rc;
}
