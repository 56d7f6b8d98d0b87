/* kernel_chain.h: the chain and promotion loops of the scalar tile kernels.
 *
 * Included by kernel_portable.c and kernel_wide.c after they define MR, W and
 *   static void block(const mm_cpu_plan*, const int32_t* a, int64_t as, const int32_t* b,
 *                     int64_t k, int n, uint32_t c[MR][W]);
 * (one block FMA of every lane: c = D(block of n products from k, C = c)). Defines tile(), the
 * kernel's mm_split_acc: mm_chain over [k0, k1) with fast accumulation, else one chain per
 * promotion interval, each added to an fp32 accumulator (round to nearest); either resumable
 * from acc (cpu.h). */
#ifndef MMAEMU_CPU_KERNEL_CHAIN_H
#define MMAEMU_CPU_KERNEL_CHAIN_H

/* Blocks over [k0, k1) continuing from the C in c (mm_chain). */
static void chain(const mm_cpu_plan* p, const int32_t* a, int64_t as, const int32_t* b,
                  int64_t k0, int64_t k1, uint32_t c[MR][W]) {
    for (int64_t k = k0; k < k1; k += p->block)
        block(p, a, as, b, k, (int)(k1 - k < p->block ? k1 - k : p->block), c);
}

/* mm_split_acc for the tile; resume: continue from the state in acc (cpu.h). */
static void tile(const mm_cpu_plan* p, const mm_cpu_operands* o, int64_t k0, int64_t k1, float* acc,
                 int resume) {
    const int32_t *a = o->a, *b = o->b;
    const int64_t as = o->as;
    uint32_t c[MR][W];
    if (p->fast) {
        for (int r = 0; r < MR; r++)
            for (int l = 0; l < W; l++) c[r][l] = resume ? mm_f32_bits(acc[r * W + l]) : 0u;
        chain(p, a, as, b, k0, k1, c);
        for (int r = 0; r < MR; r++)
            for (int l = 0; l < W; l++) acc[r * W + l] = mm_bits_f32(c[r][l]);
        return;
    }
    const int64_t interval = p->promote_k;
    if (!resume)
        for (int i = 0; i < MR * W; i++) acc[i] = 0.0f;
    for (int64_t k = k0; k < k1; k += interval) {
        for (int r = 0; r < MR; r++) /* each promotion interval's chain starts from +0 */
            for (int l = 0; l < W; l++) c[r][l] = 0u;
        chain(p, a, as, b, k, k1 - k < interval ? k1 : k + interval, c);
        for (int r = 0; r < MR; r++) /* the promotion: an fp32 add, round to nearest */
            for (int l = 0; l < W; l++) acc[r * W + l] = acc[r * W + l] + mm_bits_f32(c[r][l]);
    }
}

#endif /* MMAEMU_CPU_KERNEL_CHAIN_H */
