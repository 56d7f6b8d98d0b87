/* simd.c: the narrow tile kernels of the `cpu` executor by name, and which of them this CPU runs.
 * The caller names one (mmaemu_gemm_cpu's simd argument); nothing here picks one. */
#include <stdio.h>
#include <string.h>

#include "driver.h"

enum { N_SIMD = 3 };
static const char* const simd_names[N_SIMD] = {"portable", "avx2", "avx512"};

/* The kernel object entry i runs on this CPU: the AVX-512 kernel's nibble-table build where the
 * CPU lacks VPOPCNTD and VBMI. */
static const mm_cpu_kernel* kernel_object(int i) {
    if (i == 0) return &mm_cpu_kernel_portable;
    if (i == 1) return &mm_cpu_kernel_avx2;
    return mm_cpu_has("avx512vpopcntdq,vbmi") ? &mm_cpu_kernel_avx512 : &mm_cpu_kernel_avx512_nibbles;
}

/* Entry i is in this build (a kernel without a tile function is not) and the CPU runs it. */
static int runs(int i) {
    return kernel_object(i)->tile && (i == 0 || mm_cpu_has(simd_names[i]));
}

const mm_cpu_kernel* mm_cpu_simd_kernel(const char* name) {
    for (int i = 0; name && i < N_SIMD; i++)
        if (strcmp(name, simd_names[i]) == 0) return runs(i) ? kernel_object(i) : NULL;
    return NULL;
}

int mmaemu_cpu_simd_count(void) { return N_SIMD; }

/* How the operands of entry i are decoded on this CPU (decode.c): A's rows by the widest A
 * decoder the CPU runs, for every kernel; B's panels 32 k at a time only in the SIMD kernels'
 * byte order. */
static const char* a_decoder(void) {
    if (mm_cpu_decode_avx512_runs()) return "A's rows decoded 16 k at a time with AVX-512";
    if (mm_cpu_has("avx2")) return "A's rows decoded 8 k at a time with AVX2";
    return "A's rows decoded code by code";
}

static const char* b_decoder(int i) {
    if (i == 0 || !mm_cpu_has("avx2")) return "B's panels decoded code by code";
    if (i == 2 && mm_cpu_decode_avx512_runs()) return "B's 64-column panels decoded 32 k at a time with AVX-512";
    return i == 2 ? "B's 64-column panels decoded 32 k at a time with AVX2, 32 columns at a time"
                  : "B's 32-column panels decoded 32 k at a time with AVX2";
}

int mmaemu_cpu_simd_info(int i, mm_cpu_simd_info* info) {
    if (i < 0 || i >= N_SIMD || !info) return MM_ERR_ARGUMENT;
    const mm_cpu_kernel* k = kernel_object(i);
    info->name = simd_names[i];
    info->available = runs(i);
    info->mr = k->mr;
    info->row_step = k->row_step;
    info->w = k->w;
    info->note = info->available && k == &mm_cpu_kernel_avx512_nibbles ? "nibble-table build: no VPOPCNTD and VBMI here" : "";
    info->decode_a = a_decoder();
    info->decode_b = b_decoder(i);
    return MM_OK;
}

const char* mmaemu_cpu_simd_paths(void) {
    static _Thread_local char names[64];
    names[0] = 0;
    for (int i = 0; i < N_SIMD; i++)
        if (runs(i)) snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", names[0] ? "," : "", simd_names[i]);
    return names;
}
