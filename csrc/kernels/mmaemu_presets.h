/* mmaemu_presets.h: the instruction models by name.
 *
 * hopper: wgmma FP8 on sm_90, 32 products + C per block, grid 2^(E-13), 14-bit truncated
 *         result. Validated: 5 000 H100 E4M3 vectors (C = 0), 0 mismatches (test/data).
 * ada:    mma.sync m16n8k32 FP8 on sm_89, 16 products + C, same cut. Validated: 5 000 Ada
 *         E4M3 vectors with C != 0, 0 mismatches.
 * b200:   experimental, from the published B200 model (MATLAB-tensor-core models/B200TC.m:
 *         fma 32, neab 2, frmode rz): grid 2^(E-25), 24-bit truncated result.
 * promote_blocks = 128 k per promotion interval without fast accumulation (CUTLASS's default
 * and DeepSeek's N_C; cuBLAS's own interval is inferred until probe P3 runs). */
#ifndef MMAEMU_PRESETS_H
#define MMAEMU_PRESETS_H

#include "mmaemu_block.h"

enum { MM_PRESET_HOPPER = 0, MM_PRESET_ADA = 1, MM_PRESET_B200 = 2, MM_PRESET_COUNT = 3 };

MMAEMU_HD mm_preset mm_preset_get(int id) {
    mm_preset p;
    p.block = 32; p.frac = 13; p.keep = 14; p.promote_blocks = 4;   /* hopper */
    if (id == MM_PRESET_ADA) { p.block = 16; p.promote_blocks = 8; }
    if (id == MM_PRESET_B200) { p.frac = 25; p.keep = 24; }
    return p;
}

#endif /* MMAEMU_PRESETS_H */
