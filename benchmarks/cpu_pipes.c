/* cpu_pipes.c: what one k step of the AVX-512 kernel's FMA loop (csrc/cpu/kernel_avx512.c, rz_block)
 * costs on the machine at hand, piece by piece, in cycles at a nominal clock.
 *
 * Each loop below is one k step of a 4 x 64 tile, written out in inline assembly so that the
 * compiler adds nothing: the 16 FMAs (rounding toward zero) with their B and A loads, pass 1 (a
 * broadcast add and an unsigned byte maximum per row), and the per-k truncation count of the
 * kernel before the sign-word count (a broadcast add, a byte compare into a mask, a masked add;
 * "the count" below) or forms of it that write no mask register: what moved the count out of the
 * k loop. The operands stay in L1: this is the bound of the instructions, not of the memory.
 * Results: benchmarks/results/cpu.md ("What limits it").
 *
 *   gcc -O2 benchmarks/cpu_pipes.c -o /tmp/cpu_pipes && /tmp/cpu_pipes [GHz]
 *
 * GHz (default 3.56, the development machine's measured clock) converts seconds to cycles. Needs
 * AVX-512 F + BW on x86-64; prints nothing useful elsewhere. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)

#include "cpu_pipes_common.h"

enum { STEPS = 4000000 };

/* Registers (the k-step loops): sums T in zmm0-15, B values zmm16-19, A value zmm20, thresholds zmm21-24, counts
 * zmm25-28, scratch zmm29-30, the constant one zmm31. %1: B record (exponents at 0, low bytes at
 * 64, values at 128), %2: A words (row r at 64 r: exponent, low, value), %3: the next block's A. */
#define LOAD_B "vmovups 128(%1), %%zmm16\n vmovups 192(%1), %%zmm17\n vmovups 256(%1), %%zmm18\n vmovups 320(%1), %%zmm19\n"
#define ROW_FMA(r, t0, t1, t2, t3) \
    "vbroadcastss " #r "*4+8(%2), %%zmm20\n" \
    "vfmadd231ps %{rz-sae%}, %%zmm16, %%zmm20, %%zmm" #t0 "\n vfmadd231ps %{rz-sae%}, %%zmm17, %%zmm20, %%zmm" #t1 "\n" \
    "vfmadd231ps %{rz-sae%}, %%zmm18, %%zmm20, %%zmm" #t2 "\n vfmadd231ps %{rz-sae%}, %%zmm19, %%zmm20, %%zmm" #t3 "\n"
#define FMAS ROW_FMA(0, 0, 1, 2, 3) ROW_FMA(16, 4, 5, 6, 7) ROW_FMA(32, 8, 9, 10, 11) ROW_FMA(48, 12, 13, 14, 15)
/* the kernel's count: sum = A low + B low; +1 where sum < threshold (compare into k1, masked add) */
#define ROW_COUNT(r, th, cn) \
    "vpbroadcastd " #r "*4+4(%2), %%zmm29\n vpaddb 64(%1), %%zmm29, %%zmm29\n" \
    "vpcmpgtb %%zmm29, %%zmm" #th ", %%k1\n vpaddb %%zmm31, %%zmm" #cn ", %%zmm" #cn "%{%%k1%}\n"
#define COUNT ROW_COUNT(0, 21, 25) ROW_COUNT(16, 22, 26) ROW_COUNT(32, 23, 27) ROW_COUNT(48, 24, 28)
#define COUNT3 ROW_COUNT(0, 21, 25) ROW_COUNT(16, 22, 26) ROW_COUNT(32, 23, 27)
/* the same without a mask register: max(threshold, sum) - sum, at most 1, added */
#define ROW_COUNT_ALU(r, th, cn) \
    "vpbroadcastd " #r "*4+4(%2), %%zmm29\n vpaddb 64(%1), %%zmm29, %%zmm29\n" \
    "vpmaxub %%zmm29, %%zmm" #th ", %%zmm30\n vpsubb %%zmm29, %%zmm30, %%zmm30\n" \
    "vpminub %%zmm31, %%zmm30, %%zmm30\n vpaddb %%zmm30, %%zmm" #cn ", %%zmm" #cn "\n"
#define COUNT_ALU ROW_COUNT_ALU(0, 21, 25) ROW_COUNT_ALU(16, 22, 26) ROW_COUNT_ALU(32, 23, 27) ROW_COUNT_ALU(48, 24, 28)
/* the compare's mask turned into a vector (vpmovm2b) and subtracted */
#define ROW_COUNT_MOVM(r, th, cn) \
    "vpbroadcastd " #r "*4+4(%2), %%zmm29\n vpaddb 64(%1), %%zmm29, %%zmm29\n" \
    "vpcmpgtb %%zmm29, %%zmm" #th ", %%k1\n vpmovm2b %%k1, %%zmm29\n vpsubb %%zmm29, %%zmm" #cn ", %%zmm" #cn "\n"
#define COUNT_MOVM ROW_COUNT_MOVM(0, 21, 25) ROW_COUNT_MOVM(16, 22, 26) ROW_COUNT_MOVM(32, 23, 27) ROW_COUNT_MOVM(48, 24, 28)
/* pass 1 of the next block: e = max(e, B exponents + A's exponent word) */
#define ROW_PASS1(r, e) "vpaddd " #r "*4(%3)%{1to16%}, %%zmm30, %%zmm29\n vpmaxub %%zmm29, %%zmm" #e ", %%zmm" #e "\n"
#define PASS1 "vmovdqu64 (%1), %%zmm30\n" ROW_PASS1(0, 21) ROW_PASS1(16, 22) ROW_PASS1(32, 23) ROW_PASS1(48, 24)
#define PASS1_ALONE "vmovdqu64 (%1), %%zmm30\n" ROW_PASS1(0, 25) ROW_PASS1(16, 26) ROW_PASS1(32, 27) ROW_PASS1(48, 28)

#define CLOBBERS                                                                                    \
    "memory", "k1", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",  \
        "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19",     \
        "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28", "xmm29",     \
        "xmm30", "xmm31"

static float b_rec[256] __attribute__((aligned(64))), a_words[256] __attribute__((aligned(64)));

/* seconds per step of the loop `body` */
#define STEP_LOOP(name, body)                                                                   \
    __attribute__((target("avx512f,avx512bw"), noinline)) static double name(void) {            \
        long n = STEPS;                                                                         \
        const float *b = b_rec, *a = a_words, *a_next = a_words + 128;                          \
        const double t0 = now();                                                                \
        __asm__ volatile("1:\n" body "dec %0\n jnz 1b\n" : "+r"(n) : "r"(b), "r"(a), "r"(a_next) \
                         : CLOBBERS);                                                           \
        return (now() - t0) / STEPS;                                                            \
    }

/* 16 FMAs beside 8 independent instances of one other instruction (zmm16-23 <- op(zmm29, itself)) */
#define FMAS_ONLY \
    "vfmadd231ps %{rz-sae%}, %%zmm30, %%zmm31, %%zmm0\n vfmadd231ps %{rz-sae%}, %%zmm30, %%zmm31, %%zmm1\n" \
    "vfmadd231ps %{rz-sae%}, %%zmm30, %%zmm31, %%zmm2\n vfmadd231ps %{rz-sae%}, %%zmm30, %%zmm31, %%zmm3\n" \
    "vfmadd231ps %{rz-sae%}, %%zmm30, %%zmm31, %%zmm4\n vfmadd231ps %{rz-sae%}, %%zmm30, %%zmm31, %%zmm5\n" \
    "vfmadd231ps %{rz-sae%}, %%zmm30, %%zmm31, %%zmm6\n vfmadd231ps %{rz-sae%}, %%zmm30, %%zmm31, %%zmm7\n" \
    "vfmadd231ps %{rz-sae%}, %%zmm30, %%zmm31, %%zmm8\n vfmadd231ps %{rz-sae%}, %%zmm30, %%zmm31, %%zmm9\n" \
    "vfmadd231ps %{rz-sae%}, %%zmm30, %%zmm31, %%zmm10\n vfmadd231ps %{rz-sae%}, %%zmm30, %%zmm31, %%zmm11\n" \
    "vfmadd231ps %{rz-sae%}, %%zmm30, %%zmm31, %%zmm12\n vfmadd231ps %{rz-sae%}, %%zmm30, %%zmm31, %%zmm13\n" \
    "vfmadd231ps %{rz-sae%}, %%zmm30, %%zmm31, %%zmm14\n vfmadd231ps %{rz-sae%}, %%zmm30, %%zmm31, %%zmm15\n"
#define OP(op, i) op " %%zmm29, %%zmm" #i ", %%zmm" #i "\n"
#define OPS8(op) OP(op, 16) OP(op, 17) OP(op, 18) OP(op, 19) OP(op, 20) OP(op, 21) OP(op, 22) OP(op, 23)
#define TOMASK(op, i) op " %%zmm" #i ", %%zmm29, %%k1\n"
#define TOMASK8(op) TOMASK(op, 16) TOMASK(op, 17) TOMASK(op, 18) TOMASK(op, 19) TOMASK(op, 20) TOMASK(op, 21) TOMASK(op, 22) TOMASK(op, 23)

STEP_LOOP(fmas, LOAD_B FMAS)
STEP_LOOP(fmas_count, LOAD_B FMAS COUNT)
STEP_LOOP(fmas_count_pass1, LOAD_B FMAS COUNT PASS1)
STEP_LOOP(fmas_pass1, LOAD_B FMAS PASS1)
STEP_LOOP(fmas_count_3rows, LOAD_B FMAS COUNT3)
STEP_LOOP(fmas_count_alu, LOAD_B FMAS COUNT_ALU)
STEP_LOOP(fmas_count_movm, LOAD_B FMAS COUNT_MOVM)
STEP_LOOP(count_alone, COUNT)
STEP_LOOP(pass1_alone, PASS1_ALONE)
STEP_LOOP(beside_none, FMAS_ONLY)
STEP_LOOP(beside_paddb, FMAS_ONLY OPS8("vpaddb") OPS8("vpaddb"))
STEP_LOOP(beside_pmaxub, FMAS_ONLY OPS8("vpmaxub"))
STEP_LOOP(beside_pandd, FMAS_ONLY OPS8("vpandd"))
STEP_LOOP(beside_pshufb, FMAS_ONLY OPS8("vpshufb"))
STEP_LOOP(beside_psubusb, FMAS_ONLY OPS8("vpsubusb"))
STEP_LOOP(beside_paddsb, FMAS_ONLY OPS8("vpaddsb"))
STEP_LOOP(beside_pcmpgtb, FMAS_ONLY TOMASK8("vpcmpgtb"))
STEP_LOOP(beside_ptestmb, FMAS_ONLY TOMASK8("vptestmb"))

int main(int argc, char** argv) {
    const double ghz = argc > 1 ? atof(argv[1]) : 3.56;
    memset(b_rec, 0, sizeof b_rec);
    memset(a_words, 0, sizeof a_words);
    static const pipe_loop loops[] = {
        {"16 FMAs with their loads", fmas},
        {"  + the count (kernel's form)", fmas_count},
        {"  + the count + pass 1 in the same loop", fmas_count_pass1},
        {"  + pass 1 only", fmas_pass1},
        {"  + the count of 3 rows of 4", fmas_count_3rows},
        {"  + the count without a mask register", fmas_count_alu},
        {"  + the count through vpmovm2b", fmas_count_movm},
        {"the count alone", count_alone},
        {"pass 1 alone", pass1_alone},
        {"16 FMAs, no loads", beside_none},
        {"  + 16 vpaddb", beside_paddb},
        {"  + 8 vpmaxub", beside_pmaxub},
        {"  + 8 vpandd", beside_pandd},
        {"  + 8 vpshufb", beside_pshufb},
        {"  + 8 vpsubusb", beside_psubusb},
        {"  + 8 vpaddsb", beside_paddsb},
        {"  + 8 vpcmpgtb into a mask", beside_pcmpgtb},
        {"  + 8 vptestmb into a mask", beside_ptestmb},
    };
    printf("cycles per k step of a 4 x 64 tile (256 products) at %.2f GHz, best of 3\n", ghz);
    report_loops(loops, sizeof loops / sizeof loops[0], ghz);
    return 0;
}

#else
int main(void) {
    puts("cpu_pipes: x86-64 with GCC or clang only");
    return 0;
}
#endif
