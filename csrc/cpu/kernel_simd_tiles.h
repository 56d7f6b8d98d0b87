/* kernel_simd_tiles.h: the tile schedule of the SIMD kernels (AVX2, AVX-512).
 *
 * Included by kernel_avx2.c and kernel_avx512.h after they define
 *   MR, NV, VL, W = NV * VL, TR, STRIDE: a group's rows and vectors, a tile's most rows;
 *   MM_SIMD, MM_SIMD_INLINE: their target attributes;
 *   mm_vi, mm_vf: the integer and fp32 vector types, and the macros MM_VI_LOAD, MM_VI_STORE,
 *   MM_VI_ZERO, MM_VI_SET1, MM_VI_AND, MM_VI_MUL_POW2 (the bits of x's fp32 times 2^e), MM_VF_LOAD,
 *   MM_VF_STORE, MM_VF_ZERO, MM_VF_ADD_BITS (a + the fp32 of x's bits);
 *   MM_RZ_ENTER(), MM_RZ_LEAVE(): what the FMA form needs around it (AVX2: MXCSR's rounding);
 *   pass1_rows (a block's maxima for the first R rows of a group),
 *   rz_block_rows (a block of the FMA form for a group's first R rows) and chain_rows (the
 *   multiply and split forms' blocks of a group's first R rows over [k0, k1)).
 * Defines tile and tile_split, the kernel's mm_cpu_tile_fn pair (cpu.h). */
#ifndef MMAEMU_CPU_KERNEL_SIMD_TILES_H
#define MMAEMU_CPU_KERNEL_SIMD_TILES_H

/* rz_block_rows out of line, for a group's MR rows and for the 1 and 2 live rows of a tile's
 * last group (rz_group). Not inlined: the caller's state waits in memory, and the loop keeps its
 * sums in registers. */
MM_SIMD __attribute__((noinline)) static void rz_block(const mm_cpu_plan* p, const int32_t* ak, int64_t as,
                                                      const int32_t* bk, int n, const uint8_t E8[MR][W],
                                                      const uint32_t* bsign, int64_t kb, mm_vi c[MR][NV]) {
    rz_block_rows(p, ak, as, bk, n, E8, bsign, kb, c, MR);
}
MM_SIMD __attribute__((noinline)) static void rz_block_1(const mm_cpu_plan* p, const int32_t* ak, int64_t as,
                                                        const int32_t* bk, int n, const uint8_t E8[MR][W],
                                                        const uint32_t* bsign, int64_t kb, mm_vi c[MR][NV]) {
    rz_block_rows(p, ak, as, bk, n, E8, bsign, kb, c, 1);
}
MM_SIMD __attribute__((noinline)) static void rz_block_2(const mm_cpu_plan* p, const int32_t* ak, int64_t as,
                                                        const int32_t* bk, int n, const uint8_t E8[MR][W],
                                                        const uint32_t* bsign, int64_t kb, mm_vi c[MR][NV]) {
    rz_block_rows(p, ak, as, bk, n, E8, bsign, kb, c, 2);
}

/* The blocks rz_group_pair takes two at a time: half a sign group (ada's 16 k). */
enum { PAIR_BLOCK = MM_CPU_SIGN_SPAN / 2 };

/* Two consecutive blocks of PAIR_BLOCK for a group's MR rows in one call (rz_group_pair), the
 * block length a constant there. */
MM_SIMD __attribute__((noinline)) static void rz_block_pair(const mm_cpu_plan* p, const int32_t* ak, int64_t as,
                                                           const int32_t* bk, const uint8_t E8[2][MR][W],
                                                           const uint32_t* bsign, int64_t kb, mm_vi c[MR][NV]) {
    rz_block_rows(p, ak, as, bk, PAIR_BLOCK, E8[0], bsign, kb, c, MR);
    rz_block_rows(p, ak + MM_CPU_A_WORDS * PAIR_BLOCK, as, bk + PAIR_BLOCK * STRIDE, PAIR_BLOCK, E8[1], bsign,
                  kb + PAIR_BLOCK, c, MR);
}

/* One block of the FMA form for a group of the tile: pass 1 and the sums on its live rows, the
 * group's MR or, in a tile's last group, 1 or 2 (rows past them are padding: left as they are). */
MM_SIMD_INLINE void rz_group(const mm_cpu_plan* p, const int32_t* ak, int64_t as, const int32_t* bk, int n,
                             const uint32_t* bsign, int64_t kb, mm_vi c[MR][NV], int live) {
    uint8_t E8[MR][W];
    if (live == 1) {
        pass1_rows(ak, as, bk, n, E8, 1);
        rz_block_1(p, ak, as, bk, n, E8, bsign, kb, c);
    } else if (live == 2) {
        pass1_rows(ak, as, bk, n, E8, 2);
        rz_block_2(p, ak, as, bk, n, E8, bsign, kb, c);
    } else {
        pass1_rows(ak, as, bk, n, E8, MR);
        rz_block(p, ak, as, bk, n, E8, bsign, kb, c);
    }
}

/* Two consecutive blocks of PAIR_BLOCK (from kb) of the FMA form for a group of the tile: both
 * passes 1, then both blocks' sums in one call, on the group's MR rows (a last group of 1 or 2
 * live rows takes its blocks one by one). */
MM_SIMD_INLINE void rz_group_pair(const mm_cpu_plan* p, const int32_t* ak, int64_t as, const int32_t* bk,
                                  const uint32_t* bsign, int64_t kb, mm_vi c[MR][NV], int live) {
    const int n = PAIR_BLOCK;
    if (live <= 2) {
        rz_group(p, ak, as, bk, n, bsign, kb, c, live);
        rz_group(p, ak + MM_CPU_A_WORDS * n, as, bk + n * STRIDE, n, bsign, kb + n, c, live);
        return;
    }
    uint8_t E8[2][MR][W];
    pass1_rows(ak, as, bk, n, E8[0], MR);
    pass1_rows(ak + MM_CPU_A_WORDS * n, as, bk + n * STRIDE, n, E8[1], MR);
    rz_block_pair(p, ak, as, bk, (const uint8_t(*)[MR][W])E8, bsign, kb, c);
}

/* The FMA form's blocks over [k0, k1) of the tile's groups of MR rows, taken in turn block by
 * block (or pair by pair): each group's block begins while the one before it finishes (its setup
 * waits on its own C only), and the groups after the first find the block's panel records in L1. */
MM_SIMD_INLINE void chain_rz(const mm_cpu_plan* p, const mm_cpu_operands* o, int64_t k0, int64_t k1,
                             mm_vi c[TR][NV]) {
    const int64_t as = o->as;
    /* C as the chain carries it (cpu.h, MM_CPU_RZ_C_SCALED) */
    for (int r = 0; r < o->rows; r++)
        for (int v = 0; v < NV; v++) c[r][v] = MM_VI_MUL_POW2(c[r][v], MM_CPU_RZ_C_SCALED);
    MM_RZ_ENTER();
    for (int64_t kb = k0; kb < k1;) {
        const int n = (int)(k1 - kb < p->block ? k1 - kb : p->block);
        /* ada's 16-k blocks two at a time, one call each: faster; hopper's 32-k blocks paired
         * ran slower (benchmarks/results/cpu.md) */
        const int pair = p->block == PAIR_BLOCK && k1 - kb >= 2 * PAIR_BLOCK;
        const int32_t* bk = o->b + kb * STRIDE;
        for (int i = 0; i < o->rows; i += MR) {
            const int32_t* ak = o->a + i * as + MM_CPU_A_WORDS * kb;
            if (pair)
                rz_group_pair(p, ak, as, bk, o->bsign, kb, c + i, o->live - i);
            else
                rz_group(p, ak, as, bk, n, o->bsign, kb, c + i, o->live - i);
        }
        kb += pair ? 2 * n : n;
    }
    MM_RZ_LEAVE();
    /* the chain's result to its keep bits, which rz_block_rows leaves to here (cpu.h,
     * MM_CPU_RZ_KEEP_LATE), and out of its scale */
    const mm_vi keep = MM_VI_SET1((int32_t)p->keep_mask);
    for (int r = 0; r < o->rows; r++)
        for (int v = 0; v < NV; v++) c[r][v] = MM_VI_MUL_POW2(MM_VI_AND(c[r][v], keep), -MM_CPU_RZ_C_SCALED);
}

/* The chains of the tile's rows over [k0, k1): the FMA form's by chain_rz, the others' row
 * group by row group, a last group of 1 or 2 live rows on those alone. */
MM_SIMD_INLINE void chains(const mm_cpu_plan* p, const mm_cpu_operands* o, int64_t k0, int64_t k1,
                           mm_vi c[TR][NV], const int split) {
    if (!split && p->rz) {
        chain_rz(p, o, k0, k1, c);
        return;
    }
    for (int i = 0; i < o->rows; i += MR) {
        const int live = o->live - i;
        const mm_cpu_operands rows = {o->a + i * o->as, o->as, MR, live < MR ? live : MR, o->b, o->bsign};
        if (live == 1)
            chain_rows(p, &rows, k0, k1, c + i, split, 1);
        else if (live == 2)
            chain_rows(p, &rows, k0, k1, c + i, split, 2);
        else
            chain_rows(p, &rows, k0, k1, c + i, split, MR);
    }
}

/* mm_split_acc for the tile's rows; resume: continue from the state in acc (cpu.h). */
MM_SIMD_INLINE void tile_impl(const mm_cpu_plan* p, const mm_cpu_operands* o, int64_t k0, int64_t k1,
                              float* acc, const int resume, const int split) {
    mm_vi c[TR][NV];
    if (p->fast) {
        for (int r = 0; r < o->rows; r++)
            for (int v = 0; v < NV; v++) c[r][v] = resume ? MM_VI_LOAD(acc + r * W + v * VL) : MM_VI_ZERO();
        chains(p, o, k0, k1, c, split);
        for (int r = 0; r < o->rows; r++)
            for (int v = 0; v < NV; v++) MM_VI_STORE(acc + r * W + v * VL, c[r][v]);
        return;
    }
    const int64_t interval = p->promote_k;
    mm_vf main_acc[TR][NV];
    for (int r = 0; r < o->rows; r++)
        for (int v = 0; v < NV; v++) main_acc[r][v] = resume ? MM_VF_LOAD(acc + r * W + v * VL) : MM_VF_ZERO();
    for (int64_t k = k0; k < k1; k += interval) {
        for (int r = 0; r < o->rows; r++) /* each promotion interval's chain starts from +0 */
            for (int v = 0; v < NV; v++) c[r][v] = MM_VI_ZERO();
        chains(p, o, k, k1 - k < interval ? k1 : k + interval, c, split);
        for (int r = 0; r < o->rows; r++) /* the promotion: an IEEE fp32 add, round to nearest */
            for (int v = 0; v < NV; v++) main_acc[r][v] = MM_VF_ADD_BITS(main_acc[r][v], c[r][v]);
    }
    for (int r = 0; r < o->rows; r++)
        for (int v = 0; v < NV; v++) MM_VF_STORE(acc + r * W + v * VL, main_acc[r][v]);
}

MM_SIMD static void tile(const mm_cpu_plan* p, const mm_cpu_operands* o, int64_t k0, int64_t k1, float* acc,
                         int resume) {
    tile_impl(p, o, k0, k1, acc, resume, 0);
}

MM_SIMD static void tile_split(const mm_cpu_plan* p, const mm_cpu_operands* o, int64_t k0, int64_t k1,
                               float* acc, int resume) {
    tile_impl(p, o, k0, k1, acc, resume, 1);
}

#endif /* MMAEMU_CPU_KERNEL_SIMD_TILES_H */
