/* cpu_pipes_avx2.c: what the pieces of the AVX2 kernel's block (csrc/cpu/kernel_avx2.c) cost on
 * the machine at hand, in cycles of its measured clock, and what they share.
 *
 * Each loop is one step written in inline assembly so that the compiler adds nothing: the FMA
 * loop's k step of a 3 x 32 group as gcc compiles it (three B vectors in registers, the fourth
 * an FMA's memory operand, a broadcast A value per row), pass 1's k step (a B load, per row a
 * broadcast A word, a 32-bit add and a byte maximum), the count of one row and vector (the
 * nibble-table popcount of the sign words), and plain loads, broadcasts and integer adds alone
 * and together: what bounds a loop that mixes them. The operands stay in L1: this is the bound
 * of the instructions, not of the memory. Results: benchmarks/results/cpu.md ("The bound here").
 *
 *   gcc -O2 benchmarks/cpu_pipes_avx2.c -o /tmp/cpu_pipes_avx2 && /tmp/cpu_pipes_avx2
 *
 * The clock is measured (a chain of dependent scalar adds, one per cycle). Needs AVX2 and FMA on
 * x86-64; prints nothing useful elsewhere. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>

#if defined(__x86_64__) && defined(__GNUC__)

#include "cpu_pipes_common.h"

enum { STEPS = 20000000 };

static float buf[1024] __attribute__((aligned(64)));

#define CLOBBERS                                                                                       \
    "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15"

/* seconds per step of the loop `body`; %1: the buffer (B's record at 0, A's words from 512) */
#define STEP_LOOP(name, body)                                                                       \
    __attribute__((noinline)) static double name(void) {                                            \
        long n = STEPS;                                                                             \
        const double t0 = now();                                                                    \
        __asm__ volatile("1:\n" body "dec %0\n jnz 1b\n" : "+r"(n) : "r"(buf) : CLOBBERS);          \
        return (now() - t0) / STEPS;                                                                \
    }

/* The FMA loop's k step: sums in ymm4-15, B in ymm1-3 (and 96(%1) as a memory operand), A in ymm0 */
#define FMA_ROW(a, t0, t1, t2, t3)                                                                  \
    "vbroadcastss " #a "(%1), %%ymm0\n"                                                            \
    "vfmadd231ps %%ymm1, %%ymm0, %%ymm" #t0 "\n vfmadd231ps %%ymm2, %%ymm0, %%ymm" #t1 "\n"        \
    "vfmadd231ps %%ymm3, %%ymm0, %%ymm" #t2 "\n vfmadd231ps 96(%1), %%ymm0, %%ymm" #t3 "\n"
#define FMA_STEP                                                                                    \
    "vmovups (%1), %%ymm1\n vmovups 32(%1), %%ymm2\n vmovups 64(%1), %%ymm3\n"                   \
    FMA_ROW(512, 4, 5, 6, 7) FMA_ROW(524, 8, 9, 10, 11) FMA_ROW(536, 12, 13, 14, 15)
/* 12 FMAs, no loads */
#define FMA_ONLY(t) "vfmadd231ps %%ymm1, %%ymm0, %%ymm" #t "\n"
#define FMAS_ONLY                                                                                   \
    FMA_ONLY(4) FMA_ONLY(5) FMA_ONLY(6) FMA_ONLY(7) FMA_ONLY(8) FMA_ONLY(9) FMA_ONLY(10)             \
    FMA_ONLY(11) FMA_ONLY(12) FMA_ONLY(13) FMA_ONLY(14) FMA_ONLY(15)
/* Pass 1's k step: maxima in ymm4-6 */
#define P1_ROW(a, e) "vpbroadcastd " #a "(%1), %%ymm0\n vpaddd %%ymm1, %%ymm0, %%ymm0\n vpmaxub %%ymm0, %%ymm" #e ", %%ymm" #e "\n"
#define PASS1_STEP "vmovdqu (%1), %%ymm1\n" P1_ROW(512, 4) P1_ROW(524, 5) P1_ROW(536, 6)
/* The count of one row and vector: A's words broadcast (ymm8, ymm9), B's (ymm10, ymm11), the
 * nibble table ymm12, the low-nibble mask ymm13, ones (bytes ymm14, words ymm15) */
#define COUNT_ONE                                                                                   \
    "vpand %%ymm8, %%ymm11, %%ymm0\n vpand %%ymm9, %%ymm10, %%ymm1\n vpor %%ymm0, %%ymm1, %%ymm0\n"  \
    "vpsrld $4, %%ymm0, %%ymm1\n vpand %%ymm13, %%ymm0, %%ymm0\n vpand %%ymm13, %%ymm1, %%ymm1\n"  \
    "vpshufb %%ymm0, %%ymm12, %%ymm0\n vpshufb %%ymm1, %%ymm12, %%ymm1\n vpaddb %%ymm0, %%ymm1, %%ymm0\n" \
    "vpmaddubsw %%ymm14, %%ymm0, %%ymm0\n vpmaddwd %%ymm15, %%ymm0, %%ymm2\n"
#define ADD(i) "vpaddd %%ymm8, %%ymm9, %%ymm" #i "\n"
#define ADDS8 ADD(0) ADD(1) ADD(2) ADD(3) ADD(4) ADD(5) ADD(6) ADD(7)
#define LOADS4 "vmovdqu (%1), %%ymm10\n vmovdqu 32(%1), %%ymm11\n vmovdqu 64(%1), %%ymm12\n vmovdqu 96(%1), %%ymm13\n"
#define BCASTS4 "vpbroadcastd 512(%1), %%ymm10\n vpbroadcastd 524(%1), %%ymm11\n vpbroadcastd 536(%1), %%ymm12\n vpbroadcastd 548(%1), %%ymm13\n"

STEP_LOOP(fma_step, FMA_STEP)
STEP_LOOP(fmas_only, FMAS_ONLY)
STEP_LOOP(pass1_step, PASS1_STEP)
STEP_LOOP(count_one, COUNT_ONE)
STEP_LOOP(adds8, ADDS8)
STEP_LOOP(loads4, LOADS4)
STEP_LOOP(bcasts4, BCASTS4)
STEP_LOOP(adds8_loads4, ADDS8 LOADS4)
STEP_LOOP(adds8_bcasts4, ADDS8 BCASTS4)

/* The clock: one dependent scalar add per cycle. */
__attribute__((noinline)) static double clock_ghz(void) {
    long x = 0;
    const double t0 = now();
    __asm__ volatile("1:\n add $1, %0\n add $1, %0\n add $1, %0\n add $1, %0\n cmp %1, %0\n jb 1b\n"
                     : "+r"(x) : "r"(4L * STEPS));
    return 4.0 * STEPS / (now() - t0) * 1e-9;
}

int main(void) {
    static const pipe_loop loops[] = {
        {"FMA loop's k step (12 FMAs, 9 loads)", fma_step},
        {"12 FMAs, no loads", fmas_only},
        {"pass 1's k step (4 loads, 6 integer ops)", pass1_step},
        {"count of one row and vector (11 ops)", count_one},
        {"8 vpaddd", adds8},
        {"4 vmovdqu loads", loads4},
        {"4 vpbroadcastd loads", bcasts4},
        {"8 vpaddd + 4 vmovdqu", adds8_loads4},
        {"8 vpaddd + 4 vpbroadcastd", adds8_bcasts4},
    };
    double ghz = 0.0;
    for (int rep = 0; rep < 3; rep++) {
        const double g = clock_ghz();
        if (g > ghz) ghz = g;
    }
    printf("cycles per loop step at the measured %.2f GHz, best of 3\n", ghz);
    report_loops(loops, sizeof loops / sizeof loops[0], ghz);
    return 0;
}

#else
int main(void) {
    puts("cpu_pipes_avx2: x86-64 with GCC or clang only");
    return 0;
}
#endif
