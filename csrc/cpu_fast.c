/* cpu_fast.c: the `cpu` backend, the same bits as mmaemu_gemm_reference, fast.
 *
 * How it gets the reference's bits:
 *  - The block arithmetic (mm_block) is re-done by a tile kernel on operands decoded once into
 *    (alignment exponent, fp32 value) pairs, by the formula in cpu_fast.h. Every kernel does the
 *    same exact integer arithmetic, and each output is computed by the same kernel calls in the
 *    reference's order, so the bits depend neither on the thread count nor on which kernel
 *    (portable, AVX2, AVX-512, wide) runs.
 *  - Splits, their fp32 reduction and the epilogue use the header code (mm_split_chunk, the
 *    same float adds as mm_dot, mm_epilogue, mm_store). The round-robin split layout (the ada
 *    preset with S > 1) chains each slice's tiles with the kernel (tile_dot_round_robin); with
 *    a K beyond the decode budgets it is computed by the reference itself.
 *  - An output whose row of A or column of B holds a NaN or Inf code is computed by
 *    mm_gemm_element, the reference itself (the kernels see those codes as zeros).
 *
 * Speed: A is decoded once for the call, by all its threads, into a buffer kept for the next
 * call (a_buffer_take), in passes of rows that fit a quarter of the last-level cache
 * (a_pass_rows). Over all of K (run_whole), each B panel (W columns x K) is decoded by the thread
 * that uses it and stays in its L2 while the thread runs the pass's rows against it. Work items
 * (panel, row chunk) are handed out dynamically to `threads` pthreads; with fewer panels than
 * threads, a panel's rows are cut so that every thread has one (run_pass).
 *
 * K in segments (run_segments): segments of K are decoded in turn (A's rows and every panel of
 * the pass, once each, by all the threads) and each output's split state (the kernels' resume
 * form) and split reduction are carried from one segment to the next. A K too long for the
 * decode budgets (MM_CPU_PANEL_BUDGET) takes this form so that memory stays bounded; a large
 * GEMM whose tiles over all of K outgrow L2 takes it with short segments (MM_CPU_SEG_K), its
 * items a row chunk's tiles on one panel, the chunk's A rows in L2 for all the panels.
 *
 * MMAEMU_CPU_SIMD = auto (default) | portable | avx2 | avx512 picks the narrow kernel; a path
 * this CPU lacks or an unknown name is an error (MM_ERR_CPU_SIMD), never a silent fallback.
 * auto times each SIMD kernel once per process and takes, per GEMM, the one with the least
 * time over the GEMM's padded tiles (mmaemu_cpu_simd_choice says so).
 * Presets with more grid bits than hopper and ada (b200) run the SIMD kernels' split form (AVX2,
 * AVX-512), else the wide kernel (plain C, int64 sums, any preset). */
#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200809L
#undef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#endif
#include <fenv.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cpu_fast.h"

/* The buffers the kernels read and write with vector loads (decoded operands, accumulators),
 * on cache lines: a panel record's value vectors then never straddle two lines. With malloc's
 * 16-byte alignment the panel's placement decided it, and whole GEMMs ran 0.91x to 0.92x when it
 * was off a line (512 x 5760 x 1920, one thread; benchmarks/results/cpu.md). free() releases it. */
static void* alloc_lines(size_t bytes) {
    void* p = NULL;
    return posix_memalign(&p, 64, bytes ? bytes : 1) == 0 ? p : NULL;
}

/* The buffer of decoded A rows (up to MM_CPU_A_BUDGET, 32 MiB) outlives its call: the next
 * call takes it if it is large enough. Allocated per call, its pages were mapped anew and
 * faulted in by the decode every time (glibc maps large blocks and unmaps them on free):
 * 2048^3 on one thread spent 5.6 % of three calls' time decoding A, its third call 1.5 % with
 * the buffer kept, and whole GEMMs ran 1.00x to 1.08x faster (same-minutes medians,
 * benchmarks/results/cpu.md, "The decoded A kept between calls"). One buffer per process,
 * taken and given back by atomic exchange: concurrent calls never share it (a call that finds
 * none allocates its own, and of two given back the later is kept). Its size sits in the line
 * before the rows (KEPT_HEAD bytes, so the rows stay on cache lines). */
enum { KEPT_HEAD = 64 };
static void* _Atomic kept_a;

static int32_t* a_buffer_take(size_t bytes) {
    unsigned char* block = atomic_exchange(&kept_a, NULL);
    if (!block || *(size_t*)(void*)block < bytes) {
        free(block);
        block = alloc_lines(KEPT_HEAD + bytes);
        if (!block) return NULL;
        *(size_t*)(void*)block = bytes;
    }
    return (int32_t*)(void*)(block + KEPT_HEAD);
}

static void a_buffer_give(int32_t* a) {
    if (a) free(atomic_exchange(&kept_a, (unsigned char*)(void*)a - KEPT_HEAD));
}

/* ---- the plan -------------------------------------------------------------------------- */

static int fmt_man_bits(int fmt) { return fmt == MM_FMT_E4M3 ? 3 : 2; }
static int fmt_max_sig(int fmt) { return fmt == MM_FMT_E4M3 ? 15 : 7; }

static int plan_fits_rz(const mm_gemm* g);

static void plan_make(const mm_gemm* g, mm_cpu_plan* p) {
    const mm_preset* q = &g->preset;
    p->K = g->K;
    p->block = q->block;
    p->frac = q->frac;
    p->keep = q->keep;
    p->promote_k = q->promote_k;
    p->fast = g->fast_accum != 0;
    p->c_late = q->c_late != 0;
    p->rz = plan_fits_rz(g);
    p->keep_mask = q->keep >= 24 ? 0xFFFFFFFFu : ~((1u << (24 - q->keep)) - 1u);
}

/* The narrow kernels need every |S| < 2^24. A product term is P * 2^(sh0 - d) with P the
 * significand product, sh0 = frac - man_bits_a - man_bits_b, d >= 0; C's term is below
 * 2^(frac + 1) (a 24-bit significand times 2^(ce - 23 - grid), ce <= E). frac <= 30 is
 * implied by both bounds, and within what the kernels' exponent-add scaling needs (<= 62,
 * cpu_fast.h). */
static int plan_is_narrow(const mm_gemm* g) {
    const mm_preset* q = &g->preset;
    const int sh0 = q->frac - fmt_man_bits(g->fmt_a) - fmt_man_bits(g->fmt_b);
    const int64_t pmax = (int64_t)fmt_max_sig(g->fmt_a) * fmt_max_sig(g->fmt_b);
    const int64_t term = sh0 >= 0 ? pmax << sh0 : pmax;
    return q->frac <= 30 && (int64_t)q->block * term + ((int64_t)1 << (q->frac + 1)) < ((int64_t)1 << 24);
}

/* The FMA form (the AVX-512 and AVX2 kernels) keeps a block's running sum in an fp32 of [2^23,
 * 2^24) units (cpu_kernel_avx512.c): every partial sum of C's term and the products' floors
 * (each at most one unit below the cut toward zero) must stay within 2^22 units, a block's
 * sign bits fit one sign word (cpu_fast.h), and frac < keep, so that the keep bits can be taken
 * at the chain's end (MM_CPU_RZ_KEEP_LATE). hopper and ada: 32 * 28 801 + 2^14 < 2^20, 13 < 14. */
static int plan_fits_rz(const mm_gemm* g) {
    const mm_preset* q = &g->preset;
    const int sh0 = q->frac - fmt_man_bits(g->fmt_a) - fmt_man_bits(g->fmt_b);
    const int64_t pmax = (int64_t)fmt_max_sig(g->fmt_a) * fmt_max_sig(g->fmt_b);
    const int64_t term = sh0 >= 0 ? pmax << sh0 : pmax;
    return !q->c_late && q->frac <= MM_CPU_RZ_FRAC_MAX && q->block <= MM_CPU_SIGN_SPAN &&
           MM_CPU_RZ_KEEP_LATE(q->frac, q->keep) &&
           (int64_t)q->block * (term + 1) + ((int64_t)1 << (q->frac + 1)) <= ((int64_t)1 << 22);
}

/* The split kernels need each half-block sum below 2^31: the first ceil(block/2) terms plus
 * C's, and the rest. */
static int plan_fits_split(const mm_gemm* g) {
    const mm_preset* q = &g->preset;
    const int sh0 = q->frac - fmt_man_bits(g->fmt_a) - fmt_man_bits(g->fmt_b);
    const int64_t pmax = (int64_t)fmt_max_sig(g->fmt_a) * fmt_max_sig(g->fmt_b);
    const int64_t term = sh0 >= 0 ? pmax << sh0 : pmax;
    const int64_t h = (q->block + 1) / 2;
    return q->frac <= 30 && h * term + ((int64_t)1 << (q->frac + 1)) < ((int64_t)1 << 31);
}

/* ---- decoding -------------------------------------------------------------------------- */

/* A decoded B panel of w columns over len k: its records (cpu_fast.h), and after them, where the
 * job's kernel reads them, its sign groups. One allocation. */
typedef struct {
    int32_t* rec;
    uint32_t* sign; /* or NULL */
} mm_cpu_panel;

static int cpu_has(const char* what);

typedef struct {
    int32_t e[256];
    uint8_t pos[256], neg[256]; /* a positive, a negative value (the sign words) */
    float v[256];
    uint8_t special[256]; /* NaN or Inf */
    int fmt;
    int simd_b; /* B's table for the SIMD kernels (coded, no bias, not enlarged): AVX2 decodes it */
    mm_cpu_a_tables a; /* the same as A's rows read them (decode_a) */
    int avx512;        /* the CPU runs the AVX-512 decoders (A's rows, B's 64-column panels) */
    int avx2;          /* and the AVX2 ones (A's rows without AVX-512, B's 32-column groups) */
} mm_cpu_lut;

/* Every code's decoded form; the value is m * 2^(lsb - bias), exact in fp32, times
 * (1 + 2^-MM_CPU_RZ_ENLARGE) when enlarge is set (cpu_fast.h); e_code: the kernel's exponent
 * bytes (cpu_fast.h, MM_CPU_E_CODED). */
static void lut_make(mm_cpu_lut* t, int fmt, int bias, int e_code, int enlarge) {
    const float grow = 1.0f + mm_bits_f32((uint32_t)(127 - MM_CPU_RZ_ENLARGE) << 23);
    t->fmt = fmt;
    t->simd_b = bias == 0 && !enlarge && e_code == MM_CPU_E_CODED;
    for (int code = 0; code < 256; code++) {
        const mm_fp8 d = mm_decode_fp8((uint8_t)code, fmt);
        t->special[code] = d.cls == MM_CLS_NAN || d.cls == MM_CLS_INF;
        const int finite = d.cls == MM_CLS_FINITE;
        t->pos[code] = (uint8_t)(finite && !d.sign);
        t->neg[code] = (uint8_t)(finite && d.sign);
        if (!finite) {
            t->e[code] = e_code == MM_CPU_E_CODED ? 0 : MM_CPU_ZERO_EXP;
            t->v[code] = 0.0f;
        } else {
            float mag = (float)d.m * mm_bits_f32((uint32_t)(127 + d.lsb - bias) << 23);
            if (enlarge) mag = mag * grow; /* exact: 4 significant bits times 1 + 2^-23 */
            t->e[code] = e_code == MM_CPU_E_CODED ? d.e + MM_CPU_E_CODE_OFFSET : d.e;
            t->v[code] = d.sign ? -mag : mag;
        }
    }
    memset(&t->a, 0, sizeof t->a);
    for (int code = 0; code < 256; code++) {
        t->a.word[code] = mm_cpu_a_word(t->e[code]);
        t->a.value[code] = t->v[code];
        t->a.pos[code / 8] |= (uint8_t)(t->pos[code] << (code % 8));
        t->a.neg[code / 8] |= (uint8_t)(t->neg[code] << (code % 8));
        t->a.special[code / 8] |= (uint8_t)(t->special[code] << (code % 8));
    }
    t->avx512 = mm_cpu_decode_avx512_runs(); /* asked once per table, not per row or panel */
    t->avx2 = cpu_has("avx2");
}

/* Rows [i0, i1) of A over k in [k0, k1), row i at out + i * mm_cpu_a_stride(k1 - k0) (rows
 * from M on are zeros); row_special[i] |= a NaN/Inf code in that range of row i. Each record's
 * sign window (cpu_fast.h) is built from the end of the row backwards. */
static void decode_a(const mm_gemm* g, const mm_cpu_lut* t, int64_t i0, int64_t i1, int64_t k0, int64_t k1,
                     int32_t* out, uint8_t* row_special) {
    const int64_t len = k1 - k0;
    for (int64_t i = i0; i < i1; i++) {
        int32_t* row = out + i * mm_cpu_a_stride(len);
        if ((t->avx512 || t->avx2) && i < g->M) { /* the same words (cpu_decode_a_avx512.c, _avx2.c) */
            const uint8_t* codes = g->a + i * g->lda + k0;
            row_special[i] |= (uint8_t)(t->avx512 ? mm_cpu_decode_a_row_avx512(codes, len, &t->a, row)
                                                  : mm_cpu_decode_a_row_avx2(codes, len, &t->a, row));
            continue;
        }
        uint8_t special = 0;
        uint32_t window = 0;
        const uint8_t* src = i < g->M ? g->a + i * g->lda + k0 : NULL;
        for (int64_t k = len - 1; k >= 0; k--) {
            const int code = src ? src[k] : 0; /* code 0 is +0 in both formats */
            int32_t* rec = row + MM_CPU_A_WORDS * k;
            window = ((window << 1) & 0xFFFEFFFEu) | t->pos[code] | (uint32_t)t->neg[code] << 16;
            rec[0] = mm_cpu_a_word(t->e[code]);
            rec[MM_CPU_A_SGN] = (int32_t)window;
            rec[MM_CPU_A_V] = (int32_t)mm_f32_bits(t->v[code]);
            special |= t->special[code];
        }
        row_special[i] |= special;
    }
}

static int64_t sign_words(int64_t len, int w) {
    return (len + MM_CPU_SIGN_SPAN - 1) / MM_CPU_SIGN_SPAN * MM_CPU_SIGN_GROUP_WORDS(w);
}

/* A panel's words; and the most k whose panel fits `words` (a bound, w a multiple of 16: whole
 * sign groups plus one). */
static int64_t panel_words(int64_t len, int w, int signs) {
    return MM_CPU_PANEL_STRIDE(w) * len + (signs ? sign_words(len, w) : 0);
}
static int64_t panel_k_within(int64_t words, int w, int signs) {
    const int64_t per_k = MM_CPU_PANEL_STRIDE(w) + (signs ? MM_CPU_SIGN_GROUP_WORDS(w) / MM_CPU_SIGN_SPAN : 0);
    return (words - MM_CPU_SIGN_SPAN * per_k) / per_k;
}

static int panel_alloc(mm_cpu_panel* pn, int64_t len, int w, int signs) {
    if (len < 1) len = 1;
    pn->rec = alloc_lines(sizeof(int32_t) * (size_t)panel_words(len, w, signs));
    pn->sign = pn->rec && signs ? (uint32_t*)(void*)(pn->rec + MM_CPU_PANEL_STRIDE(w) * len) : NULL;
    return pn->rec != NULL;
}

/* One B code into its panel record: its exponent byte and value; returns whether it is NaN/Inf. */
static inline uint8_t decode_b_code(const mm_cpu_lut* t, uint8_t code, mm_cpu_i8* e, mm_cpu_f32* v) {
    *e = (int8_t)t->e[code];
    *v = t->v[code];
    return t->special[code];
}

/* Columns [j0, j0 + w) of B over k in [k0, k1) as a panel, its record 0 at k0 (columns from N
 * on are zeros), with the sign groups where pn has room for them (in the paired layout where
 * halves is set, mm_cpu_sign_paired); col_special[c] = column j0 + c holds NaN/Inf in that
 * range. */
static void decode_b_panel(const mm_gemm* g, const mm_cpu_lut* t, int64_t j0, int w, int order, int paired,
                           int64_t k0, int64_t k1, const mm_cpu_panel* pn, uint8_t* col_special) {
    int32_t* panel = pn->rec;
    const int64_t len = k1 - k0, stride = MM_CPU_PANEL_STRIDE(w);
    const uint8_t* src[64] = {0};
    uint8_t pos[64] = {0}; /* column c's byte in the exponent plane */
    int real = 0; /* columns j0 .. j0 + real - 1 exist */
    for (int c = 0; c < w; c++) {
        pos[c] = (uint8_t)mm_cpu_byte_pos(c, w, order);
        col_special[c] = 0;
        if (j0 + c < g->N) {
            src[c] = g->b + (j0 + c) * g->ldb + k0;
            real = c + 1;
        }
    }
    /* By groups of MM_CPU_SIGN_SPAN k, and in a group column by column: a column's sign words
     * gather in registers, and its stores stay within the group's records, in L1 (column by
     * column across all of K, every store landed in another cache line of the panel and decoding
     * cost more than the kernel at small M: measured on Zen 4). Against record by record over K,
     * 1.06x at 64 x 5760 x 1920 and 1.2x at M = 1 (same-minutes medians, the Intel Xeon of
     * benchmarks/results/cpu.md). */
    static const uint8_t zeros[MM_CPU_SIGN_SPAN]; /* code 0 (+0): the columns from N on */
    /* whole groups of the SIMD kernels' panels: AVX-512's 64 columns where the CPU has it
     * (cpu_decode_avx512.c), else AVX2, 32 columns at a time (cpu_decode_avx2.c) */
    const int simd = order == MM_CPU_BYTES_WORDS && t->simd_b && t->avx2;
    const int simd512 = simd && w == 64 && t->avx512;
    for (int64_t kg = 0; kg < len; kg += MM_CPU_SIGN_SPAN) {
        const int span = (int)(len - kg < MM_CPU_SIGN_SPAN ? len - kg : MM_CPU_SIGN_SPAN);
        int32_t* rec = panel + kg * stride;
        uint32_t* group = pn->sign ? pn->sign + kg / MM_CPU_SIGN_SPAN * MM_CPU_SIGN_GROUP_WORDS(w) : NULL;
        if (simd && span == MM_CPU_SIGN_SPAN) {
            const uint8_t* cols[64];
            for (int c = 0; c < w; c++) cols[c] = c < real ? src[c] + kg : zeros;
            if ((simd512 && mm_cpu_decode_b_group_avx512(cols, w, t->fmt, rec, group, col_special)) ||
                mm_cpu_decode_b_group_avx2(cols, w, t->fmt, rec, group, col_special)) {
                if (group && paired) mm_cpu_sign_paired(group, w);
                continue;
            }
        }
        for (int c = 0; c < w; c++) {
            const uint8_t* col = c < real ? src[c] + kg : zeros;
            mm_cpu_i8* pe = (mm_cpu_i8*)(void*)rec + pos[c];
            mm_cpu_f32* pv = mm_cpu_values(rec + MM_CPU_PANEL_V(w)) + c;
            uint8_t special = 0;
            if (group) {
                uint32_t positive = 0, negative = 0;
                for (int i = 0; i < span; i++) {
                    const uint8_t code = col[i];
                    special |= decode_b_code(t, code, pe + i * 4 * stride, pv + i * stride);
                    positive |= (uint32_t)t->pos[code] << i;
                    negative |= (uint32_t)t->neg[code] << i;
                }
                group[c] = positive;
                group[w + c] = negative;
            } else {
                for (int i = 0; i < span; i++)
                    special |= decode_b_code(t, col[i], pe + i * 4 * stride, pv + i * stride);
            }
            col_special[c] |= special;
        }
        if (group && paired) mm_cpu_sign_paired(group, w);
    }
}

/* ---- SIMD path ------------------------------------------------------------------------- */

static int cpu_has(const char* what) {
#if defined(MMAEMU_EMULATE_AVX512) /* test builds that run the AVX-512 kernel on SIMDe */
    if (strcmp(what, "avx512") == 0) return 1;
    /* both builds of it run: MMAEMU_EMULATE_NIBBLES takes the nibble table's */
    if (strcmp(what, "avx512vpopcntdq,vbmi") == 0) return getenv("MMAEMU_EMULATE_NIBBLES") == NULL;
#endif
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    __builtin_cpu_init();
    if (strcmp(what, "avx2") == 0) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (strcmp(what, "avx512") == 0)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
    if (strcmp(what, "avx512vpopcntdq,vbmi") == 0)
        return __builtin_cpu_supports("avx512vpopcntdq") && __builtin_cpu_supports("avx512vbmi");
#endif
    (void)what;
    return 0;
}

static const mm_cpu_kernel* kernel_named(const char* name) {
    if (strcmp(name, "portable") == 0) return &mm_cpu_kernel_portable;
    if (strcmp(name, "avx2") == 0 && cpu_has("avx2") && mm_cpu_kernel_avx2.tile)
        return &mm_cpu_kernel_avx2;
    if (strcmp(name, "avx512") == 0 && cpu_has("avx512") && mm_cpu_kernel_avx512.tile)
        return cpu_has("avx512vpopcntdq,vbmi") ? &mm_cpu_kernel_avx512 : &mm_cpu_kernel_avx512_nibbles;
    return NULL;
}

const char* mmaemu_cpu_simd_paths(void) {
    static char names[64];
    strcpy(names, "portable");
    if (kernel_named("avx2")) strcat(names, ",avx2");
    if (kernel_named("avx512")) strcat(names, ",avx512");
    return names;
}

/* ---- auto: the SIMD path by measured speed ----------------------------------------------- */

/* Per SIMD kernel, its MAC/s on one thread over full tiles (hopper, fast accumulation, a
 * 1024-k panel in L1/L2), measured once per process at the first `auto` GEMM (a few ms).
 * The CPU's feature flags do not decide: on Zen 4 (AVX-512 on 256-bit units) and on CPUs that
 * lower their clock for 512-bit work the wider kernel is not always the faster one. */
enum { MM_CPU_PROBE_K = 1024, MM_CPU_PROBE_ROUNDS = 7 };
static const char* const simd_paths[] = {"avx512", "avx2"};
enum { MM_CPU_NSIMD = sizeof(simd_paths) / sizeof(simd_paths[0]) };
static const mm_cpu_kernel* simd_kernels[MM_CPU_NSIMD]; /* kernel_named(simd_paths[i]) */
static double simd_rate[MM_CPU_NSIMD]; /* MAC/s; 0: the path is not available here */
static char simd_choice_text[384];
static pthread_once_t simd_probe_once = PTHREAD_ONCE_INIT;

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Synthetic operands, decoded as a GEMM's are: E4M3 normals of mixed signs with exponents in
 * [-4, 6], so no lane takes the rare exact-composition path and the time is the hot loops'. */
typedef struct {
    int32_t* a;
    mm_cpu_panel panel;
    mm_cpu_operands o;
} mm_cpu_probe_set;

static void probe_free(mm_cpu_probe_set* ps) {
    free(ps->a);
    free(ps->panel.rec);
}

/* The operands of one tile of k's kind (hopper's FMA form where it has one); 0 if out of memory. */
static int probe_operands(const mm_cpu_kernel* k, mm_cpu_probe_set* ps) {
    memset(ps, 0, sizeof *ps);
    uint8_t* codes = malloc((size_t)(k->mr > k->w ? k->mr : k->w) * MM_CPU_PROBE_K);
    ps->a = alloc_lines(sizeof(int32_t) * (size_t)(mm_cpu_a_stride(MM_CPU_PROBE_K) * k->mr));
    if (!codes || !ps->a || !panel_alloc(&ps->panel, MM_CPU_PROBE_K, k->w, k->rz_signs)) {
        free(codes);
        probe_free(ps);
        return 0;
    }
    mm_cpu_lut lut;
    mm_gemm g;
    uint8_t special[64];
    memset(&g, 0, sizeof g);
    g.M = k->mr;
    g.N = k->w;
    g.a = g.b = codes;
    g.lda = g.ldb = MM_CPU_PROBE_K;
    for (int r = 0; r < k->mr; r++)
        for (int64_t kk = 0; kk < MM_CPU_PROBE_K; kk++)
            codes[r * MM_CPU_PROBE_K + kk] = (uint8_t)(((kk * 7 + r) % 9 + 3) << 3 | (kk % 8) | (kk & 1 ? 0x80 : 0));
    lut_make(&lut, MM_FMT_E4M3, k->a_bias, k->e_code, k->rz_signs);
    memset(special, 0, sizeof special);
    decode_a(&g, &lut, 0, k->mr, 0, MM_CPU_PROBE_K, ps->a, special);
    for (int c = 0; c < k->w; c++)
        for (int64_t kk = 0; kk < MM_CPU_PROBE_K; kk++)
            codes[c * MM_CPU_PROBE_K + kk] = (uint8_t)(((kk * 5 + c) % 11 + 3) << 3 | (c % 8) | (c & 1 ? 0 : 0x80));
    lut_make(&lut, MM_FMT_E4M3, 0, k->e_code, 0);
    decode_b_panel(&g, &lut, 0, k->w, k->byte_order, 0, 0, MM_CPU_PROBE_K, &ps->panel, special);
    free(codes);
    ps->o = (mm_cpu_operands){ps->a, mm_cpu_a_stride(MM_CPU_PROBE_K), k->mr, k->mr, ps->panel.rec, ps->panel.sign};
    return 1;
}

/* The probe's plan: what plan_make makes of a hopper fast E4M3 GEMM over the probe's K. */
static mm_cpu_plan probe_plan(void) {
    mm_gemm g;
    memset(&g, 0, sizeof g);
    g.K = MM_CPU_PROBE_K;
    g.fmt_a = g.fmt_b = MM_FMT_E4M3;
    g.fast_accum = 1;
    g.preset = mm_preset_get(MM_PRESET_HOPPER);
    mm_cpu_plan plan;
    memset(&plan, 0, sizeof plan);
    plan_make(&g, &plan);
    return plan;
}

static void simd_probe(void) {
    const mm_cpu_plan plan = probe_plan();
    mm_cpu_probe_set set[MM_CPU_NSIMD];
    float acc[4096];
    double best[MM_CPU_NSIMD];
    for (int i = 0; i < MM_CPU_NSIMD; i++) {
        const mm_cpu_kernel* k = simd_kernels[i] = kernel_named(simd_paths[i]);
        best[i] = 0.0;
        memset(&set[i], 0, sizeof set[i]);
        if (!k || k->mr * k->w > 4096 || !probe_operands(k, &set[i])) continue;
        best[i] = 1e30;
    }
    /* Rounds alternate the kernels, so a busy moment of the machine slows all of them; the
     * best round of each counts. A round: 8 tiles (about 1 to 4 ms on a recent x86-64 core). */
    for (int round = 0; round < MM_CPU_PROBE_ROUNDS; round++)
        for (int i = 0; i < MM_CPU_NSIMD; i++) {
            if (best[i] == 0.0) continue;
            const mm_cpu_kernel* k = simd_kernels[i];
            const double t0 = now_seconds();
            for (int rep = 0; rep < 8; rep++) k->tile(&plan, &set[i].o, 0, MM_CPU_PROBE_K, acc, 0);
            const double t = now_seconds() - t0;
            if (t < best[i]) best[i] = t;
        }
    int len = snprintf(simd_choice_text, sizeof simd_choice_text,
                       "auto: per GEMM the path with the least measured time for its padded tiles; "
                       "measured here (one thread, hopper fast):");
    int any = 0;
    for (int i = 0; i < MM_CPU_NSIMD; i++) {
        const mm_cpu_kernel* k = simd_kernels[i];
        simd_rate[i] = k && best[i] > 0.0 && best[i] < 1e30 ? 8.0 * k->mr * k->w * MM_CPU_PROBE_K / best[i] : 0.0;
        if (simd_rate[i] > 0.0 && len > 0 && len < (int)sizeof simd_choice_text) {
            len += snprintf(simd_choice_text + len, sizeof simd_choice_text - (size_t)len, "%s %s %.1f GMAC/s (%d x %d tiles%s)",
                            any ? "," : "", k->name, simd_rate[i] * 1e-9, k->mr, k->w,
                            k == &mm_cpu_kernel_avx512_nibbles ? "; no VPOPCNTD and VBMI here: its nibble-table build" : "");
            any = 1;
        }
        probe_free(&set[i]);
    }
    if (any && len > 0 && len < (int)sizeof simd_choice_text && cpu_has("avx2"))
        snprintf(simd_choice_text + len, sizeof simd_choice_text - (size_t)len,
                 mm_cpu_decode_avx512_runs() ? "; their B panels decoded 32 k at a time, with AVX-512 (64 columns) "
                                               "and AVX2 (32 columns); A's rows 16 k at a time with AVX-512"
                                             : "; their B panels decoded with AVX2, 32 columns at a time; A's rows "
                                               "8 k at a time with AVX2");
    if (!any)
        snprintf(simd_choice_text, sizeof simd_choice_text, "auto: portable (no AVX2 or AVX-512 kernel on this CPU)");
}

const char* mmaemu_cpu_simd_choice(void) {
    const char* env = getenv("MMAEMU_CPU_SIMD");
    if (env && *env && strcmp(env, "auto") != 0) {
        static _Thread_local char forced[160];
        snprintf(forced, sizeof forced, "%s (MMAEMU_CPU_SIMD=%s)%s", env, env,
                 kernel_named(env) ? "" : ": not available on this CPU, an error");
        return forced;
    }
    pthread_once(&simd_probe_once, simd_probe);
    return simd_choice_text;
}

/* The narrow kernel MMAEMU_CPU_SIMD asks for, or (auto) the SIMD kernel whose measured rate
 * gives g the least time over its padded tiles (rows to row_step, columns to w); NULL for a bad
 * request. */
static const mm_cpu_kernel* narrow_kernel(const mm_gemm* g) {
    const char* env = getenv("MMAEMU_CPU_SIMD");
    if (env && *env && strcmp(env, "auto") != 0) return kernel_named(env);
    pthread_once(&simd_probe_once, simd_probe);
    const mm_cpu_kernel* pick = &mm_cpu_kernel_portable;
    double pick_time = 0.0;
    for (int i = 0; i < MM_CPU_NSIMD; i++) {
        if (simd_rate[i] <= 0.0) continue;
        const mm_cpu_kernel* k = simd_kernels[i];
        const double rows = (double)((g->M + k->row_step - 1) / k->row_step * k->row_step);
        const double cols = (double)((g->N + k->w - 1) / k->w * k->w);
        const double t = rows * cols / simd_rate[i];
        if (pick == &mm_cpu_kernel_portable || t < pick_time) {
            pick = k;
            pick_time = t;
        }
    }
    return pick;
}

/* ---- the work -------------------------------------------------------------------------- */

/* What the pass's threads decode before its items (decode_share), in units taken in turn: A's
 * rows of the pass, groups of per_item rows; in a segmented pass (run_segments) also every panel
 * of B's columns of the pass over the segment, one unit each. */
typedef struct {
    const mm_gemm* g;        /* g->a: the pass's first row; g->M: its rows of A */
    const mm_cpu_lut* lut;
    int32_t* out;
    uint8_t* row_special;
    int64_t rows, per_item, k0, k1;
    mm_cpu_panel* panels;    /* NULL, or the pass's panels (job->panels of them) */
    atomic_llong next, done;
} mm_cpu_decode;

/* A thread's own buffers: its B panel and its tile scratch (34 tiles of floats). */
typedef struct {
    mm_cpu_panel panel;
    float* scratch;
} mm_cpu_buffers;

typedef struct {
    const mm_gemm* g;
    mm_cpu_plan plan;
    const mm_cpu_kernel* kern;
    mm_cpu_tile_fn tile;     /* kern->tile, kern->tile_split, or the wide kernel's */
    int signs;               /* tile is kern->tile in its FMA form: A enlarged, sign words */
    mm_cpu_lut lut_b;
    const int32_t* a;        /* decoded rows [row0, row0 + rows), k in [ks, ke) */
    const uint8_t* row_special;
    mm_cpu_decode decode;    /* what the pass's threads decode first (A's rows; B's panels) */
    int64_t row0, rows;      /* the rows of this pass */
    int64_t panel0, panels;  /* the panels of this pass: columns from panel0 * w */
    int64_t chunk_rows, chunks;
    int64_t ks, ke;          /* the decoded k range: all of K, or one segment of K */
    /* K in segments (run_segments) only (else NULL): per tile (its first row rt, its rows r,
     * panel p of the pass) its split state, r * w floats at state + (p * rows + rt) * w, and
     * nred slots of r * w floats of split reduction at red + (p * rows + rt) * nred * w;
     * col_special: whether each of the pass's columns held a NaN/Inf code in this segment or
     * the ones before it (the panels' decoders gather them); panel_set: the pass's panels over the
     * segment, decoded once for all of its row chunks; seg_rows: rows per chunk, so a chunk's
     * decoded A stays in L2 while every panel of the pass runs on it. */
    float* state;
    float* red;
    int64_t nred;
    uint8_t* col_special;
    mm_cpu_panel* panel_set;
    int64_t seg_rows;
    int last;                /* the segment ends at K: the outputs are stored */
    atomic_llong next_item;
    /* One set per thread, kept for the whole GEMM, for k ranges of up to klen (all of K, or a
     * segment): a streamed K starts its threads anew per segment, and buffers allocated per
     * segment came from whichever malloc arena the new thread was given, each arena keeping its
     * freed panels resident (16 x 16 x 4 194 304 on two threads: the peak RSS grew by 4.1 to
     * 21.5 MiB from run to run, once 29.4 in CI; with one set per thread, 0.1 to 9.5). */
    mm_cpu_buffers* bufs;
    int nbufs;
    int64_t klen;
    atomic_int next_buf; /* the set the next thread to start takes */
    atomic_int finished; /* threads that had their buffers and ran out of items: with one, every item is done */
    fenv_t fenv;         /* the caller's, in round to nearest (mmaemu_gemm_cpu): every thread's */
} mm_cpu_job;

/* ---- split reduction ------------------------------------------------------------------- */

/* Split s's finished accumulator part (n floats, overwritten) into the reduction red:
 * contiguous / serial r = p0, then r = fp32(r + p_s); pairwise as mm_pairwise_push, with the
 * stack kept by level (slot lv at red + lv * n): before push s, the levels in use are exactly
 * the set bits of s (a binary counter), so no per-output stack depth is needed. */
static void reduce_push(int32_t scheme, int32_t s, float* part, float* red, int n) {
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
static void reduce_result(int32_t scheme, int32_t splits, const float* red, float* acc, int n) {
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

/* Slice s of the round-robin split layout (mm_rr_slice_acc) into dst: its tiles of
 * split_rr_tile k in ascending k, chained by the kernel in fast mode (resume continues the
 * chain across tiles); without fast accumulation each chain ends every promotion interval of
 * the slice's sequence and is added into the slice's fp32 main accumulator. chain and main_acc:
 * n floats of scratch. */
static void rr_slice(const mm_cpu_job* job, const mm_cpu_operands* o, int32_t s, float* dst,
                     float* chain, float* main_acc) {
    const mm_gemm* g = job->g;
    const int n = job->kern->mr * job->kern->w;
    const int64_t T = g->preset.split_rr_tile, S = g->splits;
    const int fast = job->plan.fast;
    const int64_t interval = fast ? ((int64_t)1 << 62) : (int64_t)g->preset.promote_k;
    mm_cpu_plan chain_plan = job->plan;
    chain_plan.fast = 1;
    int64_t pos = 0;
    int open = 0;
    for (int i = 0; i < n; i++) main_acc[i] = 0.0f;
    for (int64_t k0 = (int64_t)s * T; k0 < g->K; k0 += S * T) {
        const int64_t k1 = g->K - k0 < T ? g->K : k0 + T;
        for (int64_t k = k0; k < k1;) {
            const int64_t room = interval - pos % interval;
            const int64_t end = k1 - k < room ? k1 : k + room;
            job->tile(&chain_plan, o, k, end, chain, open);
            open = 1;
            pos += end - k;
            k = end;
            if (!fast && pos % interval == 0) {
                for (int i = 0; i < n; i++) main_acc[i] = main_acc[i] + chain[i];
                open = 0;
            }
        }
    }
    for (int i = 0; i < n; i++)
        dst[i] = fast ? (open ? chain[i] : 0.0f) : (open ? main_acc[i] + chain[i] : main_acc[i]);
}

/* The round-robin split layout's reduced accumulators (mm_rr_dot): serial in slice order, or
 * pairwise in the slices' order of mm_rr_pairwise_slots. red: at least 3 slots of n floats. */
static void tile_dot_round_robin(const mm_cpu_job* job, const mm_cpu_operands* o,
                                 float* acc, float* part, float* red) {
    const int32_t S = job->g->splits;
    const int n = job->kern->mr * job->kern->w;
    float *other = red, *chain = red + n, *main_acc = red + 2 * (int64_t)n;
    if (job->g->scheme != MM_SCHEME_PAIRWISE) {
        rr_slice(job, o, 0, acc, chain, main_acc);
        for (int32_t s = 1; s < S; s++) {
            rr_slice(job, o, s, part, chain, main_acc);
            for (int i = 0; i < n; i++) acc[i] = acc[i] + part[i];
        }
        return;
    }
    rr_slice(job, o, S - 1, acc, chain, main_acc);
    for (int32_t i = 0; i < mm_rr_pairwise_slots(S); i++) {
        rr_slice(job, o, i, part, chain, main_acc);
        const int32_t j = mm_rr_pairwise_partner(S, i);
        if (j >= 0) {
            rr_slice(job, o, j, other, chain, main_acc);
            for (int e = 0; e < n; e++) part[e] = part[e] + other[e];
        }
        for (int e = 0; e < n; e++) acc[e] = acc[e] + part[e];
    }
}

/* The reduced accumulators of one tile (mm_dot over the splits) into acc; red: 31 slots of n
 * floats for the split reduction. */
static void tile_dot(const mm_cpu_job* job, const mm_cpu_operands* o, float* acc,
                     float* part, float* red) {
    const mm_gemm* g = job->g;
    const int n = job->kern->mr * job->kern->w;
    if (g->splits <= 1) {
        job->tile(&job->plan, o, 0, g->K, acc, 0);
        return;
    }
    if (g->preset.split_rr_tile > 0) {
        tile_dot_round_robin(job, o, acc, part, red);
        return;
    }
    const int64_t chunk = mm_split_chunk(g->K, g->splits);
    for (int32_t s = 0; s < g->splits; s++) {
        const int64_t k0 = s * chunk < g->K ? s * chunk : g->K;
        const int64_t k1 = k0 + chunk < g->K ? k0 + chunk : g->K;
        if (k1 > k0) job->tile(&job->plan, o, k0, k1, part, 0);
        else for (int i = 0; i < n; i++) part[i] = 0.0f;
        reduce_push(g->scheme, s, part, red, n);
    }
    reduce_result(g->scheme, g->splits, red, acc, n);
}

/* ---- long K: segments ------------------------------------------------------------------ */

/* The end of the segment that starts at ks: at most kc further (kc a multiple of unit), and
 * inside a split only where the split's own k (from its origin) is a multiple of unit, so the
 * next segment resumes on a block (fast) or promotion-interval boundary. Always > ks: if the
 * split holding ks + kc began at or before ks, that point is already such a multiple. */
static int64_t segment_end(int64_t K, int64_t split_chunk, int64_t ks, int64_t kc, int64_t unit) {
    if (K - ks <= kc) return K;
    const int64_t ke = ks + kc, origin = ke / split_chunk * split_chunk;
    return origin + (ke - origin) / unit * unit;
}

/* ---- storing ----------------------------------------------------------------------------- */

/* The epilogue of a tile's accumulators acc: its rows row0 + rt.. (rows of them), columns j0..;
 * an output whose row or column holds a NaN/Inf code gets the reference's bits instead. */
static void store_tile(const mm_cpu_job* job, int64_t rt, int rows, int64_t j0, const float* acc,
                       const uint8_t* col_special) {
    const mm_gemm* g = job->g;
    const int w = job->kern->w;
    const int cols = j0 + w < g->N ? w : (int)(g->N - j0);
    int special_col = 0;
    for (int c = 0; c < cols; c++) special_col |= col_special[c];
    for (int r = 0; r < rows; r++) {
        const int64_t i = job->row0 + rt + r;
        if (i >= g->M) break;
        const int special_row = job->row_special[rt + r];
        if (!special_row && !special_col && g->epilogue_order < MM_EPI_ROWWISE && g->bias_kind == MM_BIAS_NONE) {
            /* mm_epilogue_at's most common case (mm_epilogue: tensor-wise scales, no bias) with
             * its choices made once (the epilogue was 7 % of a 512 x 5760 x 1920 GEMM's time;
             * bf16 out 1.035x). The two 2-byte loops are alike on purpose: in each the compiler
             * knows the output kind and drops mm_epilogue's switch (one loop for both: 0.95x). */
            const float* row = acc + r * w;
            uint16_t* out16 = (uint16_t*)g->out + i * g->ldo + j0;
            if (g->out_kind == MM_OUT_BF16) {
                for (int c = 0; c < cols; c++) out16[c] = (uint16_t)mm_epilogue(row[c], g);
            } else if (g->out_kind == MM_OUT_F16) {
                for (int c = 0; c < cols; c++) out16[c] = (uint16_t)mm_epilogue(row[c], g);
            } else {
                for (int c = 0; c < cols; c++) mm_store(g, i, j0 + c, mm_epilogue(row[c], g));
            }
            continue;
        }
        for (int c = 0; c < cols; c++) {
            const uint32_t bits = special_row || col_special[c] ? mm_gemm_element(g, i, j0 + c)
                                                                : mm_epilogue_at(acc[r * w + c], g, i, j0 + c);
            mm_store(g, i, j0 + c, bits);
        }
    }
}

/* Asks for the cache lines of the tile's outputs (rows rt.., rows of them, columns j0..) with
 * intent to write, before the tile's k loop: store_tile then writes to lines already fetched,
 * where a store that missed waited for its line (the outputs of a large GEMM are in no cache). */
static void prefetch_out(const mm_cpu_job* job, int64_t rt, int rows, int64_t j0) {
    const mm_gemm* g = job->g;
    const int size = mm_out_size(g->out_kind), w = job->kern->w;
    const int64_t cols = j0 + w < g->N ? w : g->N - j0;
    for (int r = 0; r < rows && job->row0 + rt + r < g->M; r++) {
        const char* row = (const char*)g->out + ((job->row0 + rt + r) * g->ldo + j0) * size;
        for (int64_t b = 0; b < cols * size; b += 64) __builtin_prefetch(row + b, 1, 3);
        __builtin_prefetch(row + cols * size - 1, 1, 3);
    }
}

/* One segment [ks, ke) of the tile at row rt, panel p of the pass: each split's piece in the
 * segment continues that split's state, a split that ends in it joins the reduction, and the
 * last segment stores the outputs (col_special: the panel's columns that hold NaN/Inf in K). */
static void tile_segment(const mm_cpu_job* job, int64_t rt, int64_t p, const mm_cpu_operands* o,
                         float* acc, const uint8_t* col_special) {
    const mm_gemm* g = job->g;
    const int w = job->kern->w, n = o->rows * w;
    const int32_t splits = g->splits > 1 ? g->splits : 1;
    const int64_t chunk = mm_split_chunk(g->K, splits), at = p * job->rows + rt;
    const int64_t ks = job->ks, ke = job->ke;
    float* state = job->state + at * w;
    float* red = job->red ? job->red + at * job->nred * w : NULL;
    int32_t s = (int32_t)(ks / chunk);
    for (; s < splits && s * chunk < ke; s++) {
        const int64_t k0 = s * chunk, k1 = k0 + chunk < g->K ? k0 + chunk : g->K;
        const int split_ends = k1 <= ke;
        const int64_t p0 = k0 > ks ? k0 : ks, p1 = split_ends ? k1 : ke;
        job->tile(&job->plan, o, p0 - ks, p1 - ks, state, p0 > k0);
        if (split_ends && splits > 1) reduce_push(g->scheme, s, state, red, n);
    }
    if (!job->last) return;
    if (splits > 1) {
        for (; s < splits; s++) { /* splits whose range is empty add +0 (mm_dot) */
            for (int i = 0; i < n; i++) state[i] = 0.0f;
            reduce_push(g->scheme, s, state, red, n);
        }
        reduce_result(g->scheme, splits, red, acc, n);
    } else {
        memcpy(acc, state, sizeof(float) * (size_t)n);
    }
    store_tile(job, rt, o->rows, (job->panel0 + p) * w, acc, col_special);
}

/* ---- threads ----------------------------------------------------------------------------- */

#define MM_CPU_MAX_THREADS 256

/* A thread's buffers for k ranges of up to klen (its panel: all of K only; K in segments decodes
 * the pass's panels once, job->panels), allocated by the thread that first takes the set
 * (so from its own malloc arena, where a freed panel stays for the next GEMM's thread: allocated
 * by the caller instead, glibc gave the panels back to the system on free and every call touched
 * fresh pages: 1 x 4096 x 4096 ran 0.81x); 0 when memory runs out. */
static int buffers_make(mm_cpu_buffers* b, const mm_cpu_job* job) {
    if (b->scratch) return 1;
    b->scratch = alloc_lines(sizeof(float) * (size_t)(34 * job->kern->mr * job->kern->w));
    if (b->scratch && (job->state || panel_alloc(&b->panel, job->klen, job->kern->w, job->signs))) return 1;
    free(b->scratch);
    b->scratch = NULL;
    return 0;
}

static void buffers_free(mm_cpu_job* job) {
    for (int t = 0; t < job->nbufs; t++) {
        if (!job->bufs[t].scratch) continue;
        free(job->bufs[t].panel.rec);
        free(job->bufs[t].scratch);
    }
    free(job->bufs);
}

/* A thread's share of what the pass decodes first (job->decode): groups of A's rows, then (K in
 * segments) B's panels, until none is left; then it waits until every unit is done (the items
 * read all of them). A panel's decoder adds its columns' NaN/Inf flags to col_special. */
static void decode_share(mm_cpu_job* job) {
    mm_cpu_decode* d = &job->decode;
    const int w = job->kern->w;
    const int64_t groups = (d->rows + d->per_item - 1) / d->per_item;
    const int64_t units = groups + (d->panels ? job->panels : 0);
    for (;;) {
        const int64_t i = atomic_fetch_add(&d->next, 1);
        if (i >= units) break;
        if (i < groups) {
            const int64_t i0 = i * d->per_item, i1 = i0 + d->per_item < d->rows ? i0 + d->per_item : d->rows;
            decode_a(d->g, d->lut, i0, i1, d->k0, d->k1, d->out, d->row_special);
        } else {
            const int64_t p = i - groups;
            uint8_t found[64];
            decode_b_panel(job->g, &job->lut_b, (job->panel0 + p) * w, w, job->kern->byte_order, job->plan.sign_paired,
                           d->k0, d->k1, &d->panels[p], found);
            for (int c = 0; c < w; c++) job->col_special[p * w + c] |= found[c];
        }
        atomic_fetch_add(&d->done, 1);
    }
    while (atomic_load(&d->done) < units) sched_yield();
}

static void* worker(void* arg) {
    mm_cpu_job* job = (mm_cpu_job*)arg;
    fesetenv(&job->fenv);
    decode_share(job);
    const mm_gemm* g = job->g;
    const int mr = job->kern->mr, w = job->kern->w, n = mr * w;
    const int64_t klen = job->ke - job->ks, as = mm_cpu_a_stride(klen);
    mm_cpu_buffers* buf = &job->bufs[atomic_fetch_add(&job->next_buf, 1)]; /* run_pass: one per thread */
    if (!buffers_make(buf, job)) return NULL; /* the other threads take this one's share */
    const mm_cpu_panel panel = buf->panel; /* all of K only */
    float* scratch = buf->scratch;
    uint8_t col_special[64];
    float *acc = scratch, *part = scratch + n, *red = scratch + 2 * n;
    const int64_t items = job->panels * job->chunks;
    int64_t have_panel = -1;
    for (;;) {
        const int64_t item = atomic_fetch_add(&job->next_item, 1);
        if (item >= items) break;
        /* K in segments: a row chunk's items in turn, one per panel (its A rows stay in L2);
         * all of K: a panel's items in turn, one per row chunk (the thread's panel is kept) */
        const int64_t p = job->state ? item % job->panels : item / job->chunks;
        const int64_t ci = job->state ? item / job->panels : item % job->chunks;
        const int64_t j0 = (job->panel0 + p) * w;
        const mm_cpu_panel* pn = job->state ? &job->panel_set[p] : &panel;
        if (!job->state && p != have_panel) {
            decode_b_panel(g, &job->lut_b, j0, w, job->kern->byte_order, job->plan.sign_paired, job->ks, job->ke,
                           &panel, col_special);
            have_panel = p;
        }
        const int64_t r0 = ci * job->chunk_rows;
        const int64_t r1 = r0 + job->chunk_rows < job->rows ? r0 + job->chunk_rows : job->rows;
        for (int64_t rt = r0; rt < r1; rt += mr) {
            const int rows = (int)(r1 - rt < mr ? r1 - rt : mr);
            const int64_t left = g->M - (job->row0 + rt); /* rows of A from rt on */
            const mm_cpu_operands o = {job->a + rt * as, as, rows, left < rows ? (int)left : rows, pn->rec, pn->sign};
            if (job->state) {
                tile_segment(job, rt, p, &o, acc, job->col_special + p * w);
                continue;
            }
            prefetch_out(job, rt, rows, j0);
            tile_dot(job, &o, acc, part, red);
            store_tile(job, rt, rows, j0, acc, col_special);
        }
    }
    atomic_fetch_add(&job->finished, 1);
    return NULL;
}

/* Runs the job's items on up to `threads` threads (the caller is one of them; at most
 * MM_CPU_MAX_THREADS, gemm_cpu). */
static void run_threads(mm_cpu_job* job, int threads) {
    pthread_t tid[MM_CPU_MAX_THREADS];
    int started = 0;
    for (int t = 1; t < threads; t++)
        if (pthread_create(&tid[started], NULL, worker, job) == 0) started++;
    worker(job); /* fewer threads than asked only changes the speed, never the bits */
    for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
}

/* What run_pass's threads decode first: A's rows [0, rows) of sub over k in [k0, k1), and (K in
 * segments) the pass's panels over the same k. */
static void decode_set(mm_cpu_job* job, const mm_gemm* sub, const mm_cpu_lut* lut, int32_t* a,
                       uint8_t* row_special, int64_t rows, int64_t k0, int64_t k1) {
    mm_cpu_decode* d = &job->decode;
    d->panels = job->panel_set;
    d->g = sub;
    d->lut = lut;
    d->out = a;
    d->row_special = row_special;
    d->rows = rows;
    d->k0 = k0;
    d->k1 = k1;
}

/* Decodes the pass's rows of A (and, K in segments, its panels) on its threads (job->decode) and
 * runs its items (panel, row chunk); MM_ERR_NO_MEMORY if no thread had its buffers. */
static int run_pass(mm_cpu_job* job, int threads) {
    const int mr = job->kern->mr, step = job->kern->row_step;
    int64_t chunks, unit;
    if (job->state && job->panels >= threads) {
        /* K in segments: chunks of seg_rows (whole tiles), each item one panel of its chunk */
        chunks = (job->rows + job->seg_rows - 1) / job->seg_rows;
        unit = mr;
    } else if (job->panels >= threads) {
        /* Enough items for dynamic balancing (4 per thread), but whole panels when possible:
         * each item decodes its panel unless the thread's previous item had the same one. */
        chunks = (4 * (int64_t)threads + job->panels - 1) / job->panels;
        if (chunks > job->rows / mr) chunks = job->rows / mr;
        unit = mr;
    } else {
        /* Fewer panels than threads (small N): each panel's rows cut into as many chunks of
         * whole groups as give every thread an item (each decodes the panel again; 16 x 16 x
         * 4 194 304 ran on one thread of two before). */
        chunks = (threads + job->panels - 1) / job->panels;
        if (chunks > job->rows / step) chunks = job->rows / step;
        unit = step;
    }
    if (chunks < 1) chunks = 1;
    job->chunk_rows = ((job->rows + chunks - 1) / chunks + unit - 1) / unit * unit;
    job->chunks = (job->rows + job->chunk_rows - 1) / job->chunk_rows;
    atomic_store(&job->next_item, 0);
    atomic_store(&job->next_buf, 0);
    atomic_store(&job->finished, 0);
    const int64_t items = job->panels * job->chunks;
    if (threads > items) threads = (int)items;
    if (threads > job->nbufs) threads = job->nbufs;
    mm_cpu_decode* d = &job->decode;
    d->per_item = (d->rows + 4 * threads - 1) / (4 * threads); /* 4 groups of rows per thread */
    atomic_store(&d->next, 0);
    atomic_store(&d->done, 0);
    run_threads(job, threads);
    return atomic_load(&job->finished) == 0 ? MM_ERR_NO_MEMORY : MM_OK;
}

/* Decoded A rows at a time: at most 32 MiB (12 bytes per element). */
#ifndef MM_CPU_A_BUDGET
#define MM_CPU_A_BUDGET ((int64_t)32 << 20)
#endif
/* Largest decoded B panel per thread (panel_words). A K whose panel (or mr rows of A) exceeds
 * a budget (above 12 481 k for the AVX-512 FMA form, 13 107 for its split form, 24 964 and
 * 26 214 for AVX2's, 52 428 for the portable kernels) is streamed in segments of MM_CPU_STREAM_CHUNK k instead of decoded whole, so memory
 * stays bounded. 4 MiB rather than more: measured on 2-core Zen 3 (AVX2), a whole-K panel
 * beyond L2 ran slower than streaming (256 x 256 x 65 536: 12.2 vs 15.3 GMAC/s). The
 * budgets (and the two below) may be set at build time: tests shrink them to run the streaming
 * path on small GEMMs. */
#ifndef MM_CPU_PANEL_BUDGET
#define MM_CPU_PANEL_BUDGET ((int64_t)4 << 20)
#endif
/* k per segment of a streamed K (rounded down to whole blocks or promotion intervals): small,
 * so a panel (1.3 MiB at W = 16, 2.6 MiB at AVX2's W = 32 with its sign words) stays in cache;
 * each segment starts its threads anew (tens of microseconds), small against its kernel work. */
#ifndef MM_CPU_STREAM_CHUNK
#define MM_CPU_STREAM_CHUNK ((int64_t)16384)
#endif
/* A large GEMM in short segments (run_segments, gemm_cpu's l2_segments): k per segment, and the
 * least M. On the 2-core Zen 3 of benchmarks/results/cpu.md (512 KiB L2), against all of K
 * (medians of the ratios of alternating runs): 512 x 5760 x 1920 0.98x (2 threads) and 1.16x
 * (one), 2048^3 1.09x and 1.29x, 4096 x 5760 x 1920 1.19x; at M = 256 0.96x and 0.98x, 128 0.89x,
 * 64 0.92x, 16 0.85x: a segment costs its decoding pass, its threads' start and its states'
 * loads and stores, which a small M does not repay. */
#ifndef MM_CPU_SEG_K
#define MM_CPU_SEG_K ((int64_t)256)
#endif
#ifndef MM_CPU_SEG_MIN_M
#define MM_CPU_SEG_MIN_M ((int64_t)512)
#endif
/* Per-output state a segmented pass keeps across segments (4 bytes per output and reduction
 * slot): the pass's columns are cut to fit. */
#ifndef MM_CPU_STATE_BUDGET
#define MM_CPU_STATE_BUDGET ((int64_t)16 << 20)
#endif

/* The size in bytes of CPU 0's largest cache of a level in [lo, hi] as Linux's sysfs gives it,
 * 0 where unknown: the last-level cache (3 and above) and L2. Not sysconf's
 * _SC_LEVEL3_CACHE_SIZE: glibc gave 256 MiB for the 32 MiB L3 of the Zen 3 machine of
 * benchmarks/results/cpu.md (its whole socket's). */
static int64_t cache_bytes(int lo, int hi) {
    int64_t size = 0;
    for (int i = 0; i < 16; i++) {
        char path[96];
        int level = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE* f = fopen(path, "r");
        if (!f) continue;
        if (fscanf(f, "%d", &level) != 1) level = 0;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (level < lo || level > hi || !(f = fopen(path, "r"))) continue;
        long long n = 0;
        char unit = 0;
        const int got = fscanf(f, "%lld%c", &n, &unit);
        fclose(f);
        const int64_t bytes = got < 1 || n <= 0 ? 0
                              : unit == 'K' ? (int64_t)n << 10
                              : unit == 'M' ? (int64_t)n << 20
                              : unit == 'G' ? (int64_t)n << 30 : (int64_t)n;
        if (bytes > size) size = bytes;
    }
    return size;
}

/* Decoded A rows per pass (run_whole, run_segments), in bytes: every panel of a pass reads all of
 * them, so a pass should stay in the last-level cache: a quarter of it (the rest holds the
 * threads' panels and what else shares it, on a virtual machine other guests' data too), at
 * least MM_CPU_A_PASS_MIN and at most MM_CPU_A_BUDGET (which it is where the cache's size is
 * unknown). On the 2-core Zen 3 of benchmarks/results/cpu.md (32 MiB L3), passes of 8 MiB ran
 * 2048^3 1.24x (two threads) and 1.34x (one), 512 x 5760 x 1920 1.20x and 4096 x 5760 x 1920
 * 1.16x (two) faster than passes of 32 MiB, whose rows came from memory once per panel
 * (same-minutes medians). */
#ifndef MM_CPU_A_PASS_MIN
#define MM_CPU_A_PASS_MIN ((int64_t)4 << 20)
#endif
/* L2's size where sysfs does not say it (seg_chunk_rows). */
#ifndef MM_CPU_L2_DEFAULT
#define MM_CPU_L2_DEFAULT ((int64_t)512 << 10)
#endif
static int64_t a_pass_limit, l2_size;
static char a_pass_text[160]; /* what mmaemu_cpu_a_pass says */
static pthread_once_t a_pass_once = PTHREAD_ONCE_INIT;

static void a_pass_init(void) {
#ifdef MM_CPU_L2_BYTES /* test builds: a tiny L2, so that small GEMMs take short segments */
    l2_size = MM_CPU_L2_BYTES;
#else
    const int64_t l2 = cache_bytes(2, 2);
    l2_size = l2 > 0 ? l2 : MM_CPU_L2_DEFAULT;
#endif
    const int64_t llc = cache_bytes(3, 99);
    int64_t bytes = llc > 0 ? llc / 4 : MM_CPU_A_BUDGET;
    if (bytes < MM_CPU_A_PASS_MIN) bytes = MM_CPU_A_PASS_MIN;
    a_pass_limit = bytes < MM_CPU_A_BUDGET ? bytes : MM_CPU_A_BUDGET;
    const double mib = (double)a_pass_limit / (1 << 20);
    if (llc > 0)
        snprintf(a_pass_text, sizeof a_pass_text, "A's rows decoded in passes of up to %.1f MiB (%s %.1f MiB last-level cache)",
                 mib, a_pass_limit == llc / 4 ? "a quarter of the" : "bounded; the", (double)llc / (1 << 20));
    else
        snprintf(a_pass_text, sizeof a_pass_text, "A's rows decoded in passes of up to %.1f MiB (the last-level cache's size unknown)", mib);
}

/* Rows of A per pass, rows of row_bytes decoded bytes in tiles of mr: as many whole tiles as
 * a pass's bytes hold, at least one. */
static int64_t a_pass_rows(int64_t row_bytes, int mr) {
    pthread_once(&a_pass_once, a_pass_init);
    const int64_t rows = a_pass_limit / row_bytes / mr * mr;
    return rows < mr ? mr : rows;
}

/* Rows per row chunk of a segmented pass (run_segments): as many whole tiles of decoded A rows
 * of kc k as half of L2 holds (the other half for the panel in use and the tile's state), at
 * least one tile. */
static int64_t seg_chunk_rows(int64_t kc, int mr) {
    pthread_once(&a_pass_once, a_pass_init);
    const int64_t rows = l2_size / 2 / (4 * mm_cpu_a_stride(kc)) / mr * mr;
    return rows < mr ? mr : rows;
}

/* Whether a tile over all of K keeps its working set (its A rows and its panel) in half of L2;
 * where it does not, each panel reads the tile's A rows from L3 or memory. */
static int whole_k_fits_l2(int64_t K, int mr, int w, int signs) {
    pthread_once(&a_pass_once, a_pass_init);
    return 4 * (mr * mm_cpu_a_stride(K) + panel_words(K, w, signs)) <= l2_size / 2;
}

const char* mmaemu_cpu_a_pass(void) {
    pthread_once(&a_pass_once, a_pass_init);
    return a_pass_text;
}

/* All of K decoded at once: rows of A in passes (a_pass_rows). */
static int run_whole(mm_cpu_job* job, const mm_cpu_lut* lut_a, int threads) {
    const mm_gemm* g = job->g;
    const int mr = job->kern->mr;
    const int64_t row_bytes = 4 * mm_cpu_a_stride(g->K);
    int64_t pass_rows = a_pass_rows(row_bytes, mr);
    const int step = job->kern->row_step;
    const int64_t m_pad_all = (g->M + mr - 1) / mr * mr; /* a pass is whole tiles; its rows, of step */
    if (pass_rows > m_pad_all) pass_rows = m_pad_all;
    int32_t* a = a_buffer_take((size_t)(pass_rows * row_bytes));
    uint8_t* row_special = malloc((size_t)pass_rows);
    int rc = a && row_special ? MM_OK : MM_ERR_NO_MEMORY;
    job->ks = 0;
    job->ke = g->K;
    job->panel0 = 0;
    job->panels = (g->N + job->kern->w - 1) / job->kern->w;
    for (int64_t row0 = 0; row0 < g->M && rc == MM_OK; row0 += pass_rows) {
        const int64_t rows = g->M - row0 < pass_rows ? (g->M - row0 + step - 1) / step * step : pass_rows;
        mm_gemm sub = *g;
        sub.a = g->a + row0 * g->lda;
        sub.M = g->M - row0 < rows ? g->M - row0 : rows;
        memset(row_special, 0, (size_t)rows);
        decode_set(job, &sub, lut_a, a, row_special, rows, 0, g->K);
        job->a = a;
        job->row_special = row_special;
        job->row0 = row0;
        job->rows = rows;
        rc = run_pass(job, threads);
    }
    a_buffer_give(a);
    free(row_special);
    return rc;
}

/* Decoded B panels a segmented pass holds at once (every panel of its columns, job->panel_set):
 * its columns are cut to fit. */
#ifndef MM_CPU_SEG_PANEL_BUDGET
#define MM_CPU_SEG_PANEL_BUDGET ((int64_t)16 << 20)
#endif

/* K in segments of at most kc (a multiple of unit, the k a resumed split state must start on):
 * per pass of rows and columns, every segment's A rows and panels are decoded once and each
 * output's split state carried to the next segment; memory is bounded by the budgets. A long
 * K takes this form so that memory stays bounded; a large GEMM takes it with short segments
 * (segment_k) so that a row chunk's decoded A stays in L2 while the pass's panels run on it,
 * where all of K read a tile's A rows from L3 or memory once per panel. */
static int run_segments(mm_cpu_job* job, const mm_cpu_lut* lut_a, int64_t kc, int64_t unit,
                        int threads) {
    const mm_gemm* g = job->g;
    const int mr = job->kern->mr, w = job->kern->w;
    const int32_t splits = g->splits > 1 ? g->splits : 1;
    const int64_t split_chunk = mm_split_chunk(g->K, splits);
    const int step = job->kern->row_step;
    const int64_t m_pad_all = (g->M + mr - 1) / mr * mr, all_panels = (g->N + w - 1) / w; /* as run_whole */
    int64_t pass_rows = a_pass_rows(4 * mm_cpu_a_stride(kc), mr);
    if (pass_rows > m_pad_all) pass_rows = m_pad_all;
    job->nred = splits <= 1 ? 0 : g->scheme == MM_SCHEME_PAIRWISE ? mm_bitlen64((uint64_t)splits) : 1;
    int64_t pass_panels = MM_CPU_STATE_BUDGET / (4 * (1 + job->nred) * pass_rows * w);
    const int64_t panel_bytes = 4 * panel_words(kc, w, job->signs);
    if (pass_panels > MM_CPU_SEG_PANEL_BUDGET / panel_bytes) pass_panels = MM_CPU_SEG_PANEL_BUDGET / panel_bytes;
    if (pass_panels < 1) pass_panels = 1;
    if (pass_panels > all_panels) pass_panels = all_panels;
    const int64_t outputs = pass_rows * pass_panels * w;
    job->seg_rows = seg_chunk_rows(kc, mr);
    mm_cpu_panel* panel_set = calloc((size_t)pass_panels, sizeof(mm_cpu_panel));
    int panels_made = panel_set != NULL;
    for (int64_t i = 0; panels_made && i < pass_panels; i++) panels_made = panel_alloc(&panel_set[i], kc, w, job->signs);
    int32_t* a = a_buffer_take(sizeof(int32_t) * (size_t)(pass_rows * mm_cpu_a_stride(kc)));
    uint8_t* row_special = malloc((size_t)pass_rows);
    uint8_t* col_special = malloc((size_t)(pass_panels * w));
    float* state = alloc_lines(sizeof(float) * (size_t)outputs);
    float* red = job->nred ? alloc_lines(sizeof(float) * (size_t)(outputs * job->nred)) : NULL;
    int rc = a && row_special && col_special && state && (red || !job->nred) && panels_made ? MM_OK : MM_ERR_NO_MEMORY;
    job->state = state;
    job->red = red;
    job->panel_set = panel_set;
    job->col_special = col_special;
    job->a = a;
    job->row_special = row_special;
    for (int64_t row0 = 0; row0 < g->M && rc == MM_OK; row0 += pass_rows) {
        const int64_t rows = g->M - row0 < pass_rows ? (g->M - row0 + step - 1) / step * step : pass_rows;
        mm_gemm sub = *g;
        sub.a = g->a + row0 * g->lda;
        sub.M = g->M - row0 < rows ? g->M - row0 : rows;
        job->row0 = row0;
        job->rows = rows;
        /* The rows' NaN/Inf flags gather over the first column pass's segments, complete
         * before its last segment stores anything. */
        memset(row_special, 0, (size_t)rows);
        for (int64_t p0 = 0; p0 < all_panels && rc == MM_OK; p0 += pass_panels) {
            job->panel0 = p0;
            job->panels = all_panels - p0 < pass_panels ? all_panels - p0 : pass_panels;
            memset(col_special, 0, (size_t)(job->panels * w)); /* the panels' decoders gather them */
            for (int64_t ks = 0; ks < g->K && rc == MM_OK; ks = job->ke) {
                job->ks = ks;
                job->ke = segment_end(g->K, split_chunk, ks, kc, unit);
                job->last = job->ke == g->K;
                decode_set(job, &sub, lut_a, a, row_special, rows, ks, job->ke);
                rc = run_pass(job, threads);
            }
        }
    }
    a_buffer_give(a);
    free(row_special);
    free(col_special);
    free(state);
    free(red);
    for (int64_t i = 0; panel_set && i < pass_panels; i++) free(panel_set[i].rec);
    free(panel_set);
    return rc;
}

static int gemm_cpu(const mm_gemm* g, int threads) {
    int rc = mmaemu_gemm_check(g);
    if (rc != MM_OK) return rc;
    if (mmaemu_cpu_flushes_denormals()) return MM_ERR_FLUSH_DENORMAL;
    const mm_cpu_kernel* narrow = narrow_kernel(g);
    if (!narrow) return MM_ERR_CPU_SIMD;
    if (g->M == 0 || g->N == 0) return MM_OK;
    /* K = 0: every output is the epilogue of +0, and the operands may be NULL. */
    if (g->K == 0) return mmaemu_gemm_reference(g);

    mm_cpu_job* job = calloc(1, sizeof(mm_cpu_job));
    if (!job) return MM_ERR_NO_MEMORY;
    job->g = g;
    fegetenv(&job->fenv);
    plan_make(g, &job->plan);
    if (plan_is_narrow(g) && !g->preset.c_late) { /* a late C: the split and wide kernels */
        job->kern = narrow;
        job->tile = narrow->tile;
    } else if (narrow->tile_split && plan_fits_split(g)) {
        job->kern = narrow;
        job->tile = narrow->tile_split;
    } else {
        job->kern = &mm_cpu_kernel_wide;
        job->tile = mm_cpu_kernel_wide.tile;
    }
    job->signs = job->kern->rz_signs && job->tile == job->kern->tile && job->plan.rz;
    job->plan.sign_paired = job->signs && job->kern->rz_paired && job->plan.block == 16;
    const int mr = job->kern->mr, w = job->kern->w;
    const int whole = (int64_t)4 * panel_words(g->K, w, job->signs) <= MM_CPU_PANEL_BUDGET &&
                      (int64_t)4 * mm_cpu_a_stride(g->K) * mr <= MM_CPU_A_BUDGET;
    /* The round-robin split layout runs on whole-K tiles (tile_dot_round_robin); a K too long
     * for the decode budgets with it is computed by the reference (no streamed form yet). */
    if (!whole && g->splits > 1 && g->preset.split_rr_tile > 0) {
        free(job);
        return mmaemu_gemm_reference(g);
    }
    /* A streamed split state resumes on a block boundary (fast: one chain) or on a promotion
     * interval boundary (its chain restarts there); a segment holds at least one. */
    const int64_t unit = job->plan.fast ? g->preset.block : (int64_t)g->preset.promote_k;
    int64_t kc = MM_CPU_STREAM_CHUNK; /* within both budgets, whole units */
    if (kc > panel_k_within(MM_CPU_PANEL_BUDGET / 4, w, job->signs)) kc = panel_k_within(MM_CPU_PANEL_BUDGET / 4, w, job->signs);
    if (kc > mm_cpu_a_k_within(MM_CPU_A_BUDGET / (4 * mr))) kc = mm_cpu_a_k_within(MM_CPU_A_BUDGET / (4 * mr));
    /* A large GEMM whose tiles over all of K outgrow L2 in short segments (run_segments), so a
     * row chunk's A stays in L2 (not the round-robin split layout: whole-K tiles only) */
    const int rr = g->splits > 1 && g->preset.split_rr_tile > 0;
    const int l2_segments = whole && !rr && g->K >= 2 * MM_CPU_SEG_K && g->M >= MM_CPU_SEG_MIN_M &&
                            !whole_k_fits_l2(g->K, mr, w, job->signs);
    if (l2_segments) kc = MM_CPU_SEG_K;
    kc = kc / unit * unit;
    if (kc < unit) kc = unit;
    if (!whole && ((int64_t)4 * panel_words(kc, w, job->signs) > MM_CPU_PANEL_BUDGET ||
                   (int64_t)4 * mm_cpu_a_stride(kc) * mr > MM_CPU_A_BUDGET)) {
        /* Without fast accumulation, a promotion interval beyond the budgets (above 12 481 k;
         * no known preset): the reference, in the operands' memory. */
        free(job);
        return mmaemu_gemm_reference(g);
    }
    mm_cpu_lut lut_a;
    lut_make(&lut_a, g->fmt_a, job->kern->a_bias, job->kern->e_code, job->signs);
    lut_make(&job->lut_b, g->fmt_b, 0, job->kern->e_code, 0);
    if (threads < 1) threads = 1;
    /* Small problems are not worth a thread start (tens of microseconds). */
    if ((double)g->M * (double)g->N * (double)(g->K + 1) < (double)(1 << 18)) threads = 1;
    if (threads > MM_CPU_MAX_THREADS) threads = MM_CPU_MAX_THREADS; /* run_pass: no more than items */
    const int segmented = !whole || l2_segments;
    job->klen = segmented ? kc : g->K;
    job->bufs = calloc((size_t)threads, sizeof(mm_cpu_buffers));
    job->nbufs = job->bufs ? threads : 0;
    rc = !job->bufs   ? MM_ERR_NO_MEMORY
         : segmented ? run_segments(job, &lut_a, kc, unit, threads)
                     : run_whole(job, &lut_a, threads);
    buffers_free(job);
    free(job);
    return rc;
}

int mmaemu_gemm_cpu(const mm_gemm* g, int threads) {
    const int mode = mmaemu_round_nearest(); /* the workers take this environment (job->fenv) */
    const int rc = gemm_cpu(g, threads);
    mmaemu_round_restore(mode);
    return rc;
}
