/* f16_check.c: the epilogue's fp32 -> fp16 conversion (mm_f32_to_f16, whose rounding
 * mm_f32_to_e4m3 and mm_f32_to_e5m2 share) against the CPU's own (F16C `vcvtps2ph`, round to
 * nearest even, overflow to Inf) on every fp32 bit pattern but the NaNs, where the epilogue
 * gives the canonical 0x7FFF instead of the hardware's quieted payload (checked as well).
 * Prints "<n> inputs, <d> differences"; exits 77 where the CPU lacks F16C. */
#include <stdio.h>

#include "kernels/mmaemu_gemm.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

__attribute__((target("f16c"))) static uint16_t hardware_f16(float f) {
    return (uint16_t)_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0);
}

int main(void) {
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & bit_F16C)) {
        printf("no F16C: skipped\n");
        return 77;
    }
    uint64_t n = 0, differences = 0;
    for (uint64_t x = 0; x <= 0xFFFFFFFFull; x++) {
        const uint32_t u = (uint32_t)x;
        const float f = mm_bits_f32(u);
        const int nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
        const uint16_t want = nan ? 0x7FFFu : hardware_f16(f);
        if (mm_f32_to_f16(f) != want && differences++ < 5) printf("differs at 0x%08x\n", u);
        n++;
    }
    printf("%llu inputs, %llu differences\n", (unsigned long long)n, (unsigned long long)differences);
    return differences ? 1 : 0;
}
#else
int main(void) {
    printf("not x86: skipped\n");
    return 77;
}
#endif
