/* reduce.c: the split reduction of the driver, in the scheme's order (mm_dot's fp32 adds). */
#include <string.h>

#include "driver.h"

/* Split s's finished accumulator part (n floats, overwritten) into the reduction red:
 * contiguous / serial r = p0, then r = fp32(r + p_s); pairwise as mm_pairwise_push, with the
 * stack kept by level (slot lv at red + lv * n): before push s, the levels in use are exactly
 * the set bits of s (a binary counter), so no per-output stack depth is needed. */
void mm_cpu_reduce_push(int32_t scheme, int32_t s, float* part, float* red, int n) {
    if (scheme != MM_SCHEME_PAIRWISE) {
        for (int i = 0; i < n; i++) red[i] = s == 0 ? part[i] : red[i] + part[i];
        return;
    }
    int lv = 0;
    for (; (s >> lv) & 1; lv++) {
        const float* below = red + (int64_t)lv * n;
        for (int i = 0; i < n; i++) part[i] = below[i] + part[i];
    }
    memcpy(red + (int64_t)lv * n, part, sizeof(float) * (size_t)n);
}

/* The reduction after all `splits` pushes into acc (pairwise: mm_pairwise_result, the slots
 * of the set bits of splits from the lowest level up). */
void mm_cpu_reduce_result(int32_t scheme, int32_t splits, const float* red, float* acc, int n) {
    if (scheme != MM_SCHEME_PAIRWISE) {
        memcpy(acc, red, sizeof(float) * (size_t)n);
        return;
    }
    int lv = 0;
    while (!((splits >> lv) & 1)) lv++;
    memcpy(acc, red + (int64_t)lv * n, sizeof(float) * (size_t)n);
    for (lv++; lv < 31; lv++) {
        if (!((splits >> lv) & 1)) continue;
        const float* below = red + (int64_t)lv * n;
        for (int i = 0; i < n; i++) acc[i] = below[i] + acc[i];
    }
}
