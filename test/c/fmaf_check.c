/* fmaf_check.c: mm_fmaf of the shared headers on triples of fp32 bit patterns read from a file
 * (three uint32 per case); writes per case mm_fmaf's result, libm's fmaf of the same, then
 * mm_alpha_times(a, b) and mm_fmaf(a, b, +0), which it must equal. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/mmaemu_gemm.h"

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* in = fopen(argv[1], "rb");
    FILE* out = fopen(argv[2], "wb");
    if (!in || !out) return 2;
    uint32_t t[3];
    while (fread(t, sizeof t[0], 3, in) == 3) {
        const float a = mm_bits_f32(t[0]), b = mm_bits_f32(t[1]), c = mm_bits_f32(t[2]);
        const uint32_t r[4] = {mm_f32_bits(mm_fmaf(a, b, c)), mm_f32_bits(fmaf(a, b, c)),
                               mm_f32_bits(mm_alpha_times(a, b)), mm_f32_bits(mm_fmaf(a, b, 0.0f))};
        if (fwrite(r, sizeof r[0], 4, out) != 4) return 2;
    }
    fclose(in);
    return fclose(out) == 0 ? 0 : 2;
}
