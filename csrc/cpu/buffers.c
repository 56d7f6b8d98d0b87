/* buffers.c: the buffers the kernels read and write, on cache lines, and the buffer of decoded A
 * rows that outlives its call. */
#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200809L
#undef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* posix_memalign */
#endif
#include <stdlib.h>

#include "driver.h"

void* mm_cpu_alloc_lines(size_t bytes) {
    void* p = NULL;
    return posix_memalign(&p, 64, bytes ? bytes : 1) == 0 ? p : NULL;
}

/* The buffer of decoded A rows (up to MM_CPU_A_BUDGET) outlives its call: the next call takes it
 * if it is large enough. Allocated per call, its pages were mapped anew and faulted in by the
 * decode every time (glibc maps large blocks and unmaps them on free). One buffer per process,
 * taken and given back by atomic exchange: concurrent calls never share it (a call that finds
 * none allocates its own, and of two given back the later is kept). Its size sits in the line
 * before the rows (KEPT_HEAD bytes, so the rows stay on cache lines). */
enum { KEPT_HEAD = 64 };
static void* _Atomic kept_a;

int32_t* mm_cpu_a_buffer_take(size_t bytes) {
    unsigned char* block = atomic_exchange(&kept_a, NULL);
    if (!block || *(size_t*)(void*)block < bytes) {
        free(block);
        block = mm_cpu_alloc_lines(KEPT_HEAD + bytes);
        if (!block) return NULL;
        *(size_t*)(void*)block = bytes;
    }
    return (int32_t*)(void*)(block + KEPT_HEAD);
}

void mm_cpu_a_buffer_give(int32_t* a) {
    if (a) free(atomic_exchange(&kept_a, (unsigned char*)(void*)a - KEPT_HEAD));
}

int mm_cpu_panel_alloc(mm_cpu_panel* pn, int64_t len, int w, int signs) {
    if (len < 1) len = 1;
    pn->rec = mm_cpu_alloc_lines(sizeof(int32_t) * (size_t)mm_cpu_panel_words(len, w, signs));
    pn->sign = pn->rec && signs ? (uint32_t*)(void*)(pn->rec + MM_CPU_PANEL_STRIDE(w) * len) : NULL;
    return pn->rec != NULL;
}
