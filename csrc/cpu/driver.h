/* driver.h: what the files of the `cpu` executor's driver share (not part of the C API).
 *
 *   gemm.c     mmaemu_gemm_cpu: the tile form a plan needs, K whole or in segments, threads
 *   plan.c     the block arithmetic precomputed per GEMM, and which sum bounds a preset meets
 *   simd.c     the table of narrow kernels by name, and which of them this CPU runs
 *   features.c the CPU's instruction sets
 *   decode.c   the decoding tables and the decoders of A's rows and B's panels
 *   buffers.c  cache-line buffers, the kept buffer of decoded A rows, panels
 *   cache.c    the cache sizes the passes and segments are cut to
 *   passes.c   A's rows in passes; K whole or in segments
 *   pool.c     the threads of a pass: shared decoding, then work items
 *   tile.c     one tile's accumulators: over all of K (splits, round robin) or one segment
 *   join.c     block-wise scales joined to a tile's accumulators, per 128-k group
 *   reduce.c   the split reduction in the scheme's order
 *   store.c    the epilogue and store of a tile
 *   measure.c  the narrow kernels' speed, measured on request
 *   tiles.c    the tile-planned (row-wise, per-tile k-segments) GEMM from chain accumulators
 *
 * How it gets the reference's bits:
 *  - The block arithmetic (mm_block) is re-done by a tile kernel on operands decoded once into
 *    (alignment exponent, fp32 value) pairs, by the formula in cpu.h. Every kernel does the same
 *    exact integer arithmetic, and each output is computed by the same kernel calls in the
 *    reference's order, so the bits depend neither on the thread count nor on which kernel
 *    (portable, AVX2, AVX-512, wide) runs.
 *  - Splits, their fp32 reduction and the epilogue use the header code (mm_split_chunk, the same
 *    float adds as mm_dot, mm_epilogue, mm_store). The round-robin split layout (the ada preset
 *    with S > 1) chains each slice's tiles with the kernel (tile.c); with a K beyond the decode
 *    budgets it is computed by the reference itself.
 *  - An output whose row of A or column of B holds a NaN or Inf code is computed by
 *    mm_gemm_element, the reference itself (the kernels see those codes as zeros).
 *
 * A is decoded once for the call, by all its threads, into a buffer kept for the next call, in
 * passes of rows that fit a quarter of the last-level cache. Over all of K, each B panel (W
 * columns x K) is decoded by the thread that uses it and stays in its L2 while the thread runs
 * the pass's rows against it; work items (panel, row chunk) are handed out dynamically. K in
 * segments: segments of K are decoded in turn (A's rows and every panel of the pass, once each,
 * by all the threads) and each output's split state and reduction carried to the next segment:
 * for a K too long for the decode budgets, and with short segments for a large GEMM whose tiles
 * over all of K outgrow L2. */
#ifndef MMAEMU_CPU_DRIVER_H
#define MMAEMU_CPU_DRIVER_H

#include <fenv.h>
#include <stdatomic.h>
#include <stddef.h>

#include "cpu.h"

#pragma GCC visibility push(hidden)

/* ---- budgets (tests shrink them at build time to run the streaming paths on small GEMMs) ---- */

/* Decoded A rows at a time: at most 32 MiB (12 bytes per element). */
#ifndef MM_CPU_A_BUDGET
#define MM_CPU_A_BUDGET ((int64_t)32 << 20)
#endif
/* Largest decoded B panel per thread (mm_cpu_panel_words). A K whose panel (or mr rows of A)
 * exceeds a budget is streamed in segments of MM_CPU_STREAM_CHUNK k instead of decoded whole,
 * so memory stays bounded; a whole-K panel beyond L2 runs slower than streaming. */
#ifndef MM_CPU_PANEL_BUDGET
#define MM_CPU_PANEL_BUDGET ((int64_t)4 << 20)
#endif
/* k per segment of a streamed K (rounded down to whole blocks or promotion intervals): small, so
 * a panel stays in cache; each segment starts its threads anew, small against its kernel work. */
#ifndef MM_CPU_STREAM_CHUNK
#define MM_CPU_STREAM_CHUNK ((int64_t)16384)
#endif
/* A large GEMM in short segments (gemm.c): k per segment, and the least M. A segment costs its
 * decoding pass, its threads' start and its states' loads and stores, which a small M does not
 * repay. */
#ifndef MM_CPU_SEG_K
#define MM_CPU_SEG_K ((int64_t)256)
#endif
#ifndef MM_CPU_SEG_MIN_M
#define MM_CPU_SEG_MIN_M ((int64_t)512)
#endif

#define MM_CPU_MAX_THREADS 256

/* ---- buffers.c --------------------------------------------------------------------------- */

/* Buffers the kernels read and write with vector loads, on cache lines (so a panel record's
 * value vectors never straddle two lines); free() releases them. */
void* mm_cpu_alloc_lines(size_t bytes);
/* The buffer of decoded A rows, kept between calls: at least bytes, or NULL. */
int32_t* mm_cpu_a_buffer_take(size_t bytes);
void mm_cpu_a_buffer_give(int32_t* a);

/* A decoded B panel of w columns over len k: its records (cpu.h), and after them, where the
 * job's kernel reads them, its sign groups. One allocation. */
typedef struct {
    int32_t* rec;
    uint32_t* sign; /* or NULL */
} mm_cpu_panel;

static inline int64_t mm_cpu_sign_words(int64_t len, int w) {
    return (len + MM_CPU_SIGN_SPAN - 1) / MM_CPU_SIGN_SPAN * MM_CPU_SIGN_GROUP_WORDS(w);
}
/* A panel's words; and the most k whose panel fits `words` (a bound, w a multiple of 16: whole
 * sign groups plus one). */
static inline int64_t mm_cpu_panel_words(int64_t len, int w, int signs) {
    return MM_CPU_PANEL_STRIDE(w) * len + (signs ? mm_cpu_sign_words(len, w) : 0);
}
static inline int64_t mm_cpu_panel_k_within(int64_t words, int w, int signs) {
    const int64_t per_k = MM_CPU_PANEL_STRIDE(w) + (signs ? MM_CPU_SIGN_GROUP_WORDS(w) / MM_CPU_SIGN_SPAN : 0);
    return (words - MM_CPU_SIGN_SPAN * per_k) / per_k;
}
/* 0 when out of memory. */
int mm_cpu_panel_alloc(mm_cpu_panel* pn, int64_t len, int w, int signs);

/* ---- plan.c ------------------------------------------------------------------------------ */

void mm_cpu_plan_make(const mm_gemm* g, mm_cpu_plan* p);
/* Every block sum |S| < 2^24: the narrow tiles. */
int mm_cpu_plan_is_narrow(const mm_gemm* g);
/* Each half-block sum below 2^31: the split tiles. */
int mm_cpu_plan_fits_split(const mm_gemm* g);

/* ---- features.c, simd.c ------------------------------------------------------------------ */

/* Whether the CPU has an instruction set: "avx2" (with FMA), "avx512" (F, BW, VL),
 * "avx512vpopcntdq,vbmi". */
int mm_cpu_has(const char* what);
/* The narrow kernel of that name when this CPU runs it, else NULL. */
const mm_cpu_kernel* mm_cpu_simd_kernel(const char* name);

/* ---- decode.c ---------------------------------------------------------------------------- */

typedef struct {
    int32_t e[256];
    uint8_t pos[256], neg[256]; /* a positive, a negative value (the sign words) */
    float v[256];
    uint8_t special[256]; /* NaN or Inf */
    int fmt;
    int simd_b; /* B's table for the SIMD kernels (coded, no bias, not enlarged): AVX2 decodes it */
    mm_cpu_a_tables a; /* the same as A's rows read them (mm_cpu_decode_a) */
    int avx512;        /* the CPU runs the AVX-512 decoders (A's rows, B's 64-column panels) */
    int avx2;          /* and the AVX2 ones (A's rows without AVX-512, B's 32-column groups) */
} mm_cpu_lut;

/* Every code's decoded form; the value is m * 2^(lsb - bias), exact in fp32, times
 * (1 + 2^-MM_CPU_RZ_ENLARGE) when enlarge is set (cpu.h); e_code: the kernel's exponent bytes
 * (cpu.h, MM_CPU_E_CODED). */
void mm_cpu_lut_make(mm_cpu_lut* t, int fmt, int bias, int e_code, int enlarge);
/* Rows [i0, i1) of A over k in [k0, k1), row i at out + i * mm_cpu_a_stride(k1 - k0) (rows
 * from M on are zeros); row_special[i] |= a NaN/Inf code in that range of row i. */
void mm_cpu_decode_a(const mm_gemm* g, const mm_cpu_lut* t, int64_t i0, int64_t i1, int64_t k0, int64_t k1,
                     int32_t* out, uint8_t* row_special);
/* Columns [j0, j0 + w) of B over k in [k0, k1) as a panel in the byte order `order`, its record
 * 0 at k0 (columns from N on are zeros), with the sign groups where pn has room for them (in
 * the paired layout where `paired` is set, mm_cpu_sign_paired); col_special[c] = column j0 + c
 * holds NaN/Inf in that range. */
void mm_cpu_decode_b_panel(const mm_gemm* g, const mm_cpu_lut* t, int64_t j0, int w, int order, int paired,
                           int64_t k0, int64_t k1, const mm_cpu_panel* pn, uint8_t* col_special);

/* ---- the job: one GEMM's state, shared by its threads ------------------------------------ */

/* What a pass's threads decode before its items, in units taken in turn: A's rows of the pass,
 * groups of per_item rows; in a segmented pass also every panel of B's columns of the pass over
 * the segment, one unit each. */
typedef struct {
    const mm_gemm* g;        /* g->a: the pass's first row; g->M: its rows of A */
    const mm_cpu_lut* lut;
    int32_t* out;
    uint8_t* row_special;
    int64_t rows, per_item, k0, k1;
    mm_cpu_panel* panels;    /* NULL, or the pass's panels (job->panels of them) */
    atomic_llong next, done;
} mm_cpu_decode_work;

/* A thread's own buffers: its B panel and its tile scratch (34 tiles of floats). */
typedef struct {
    mm_cpu_panel panel;
    float* scratch;
} mm_cpu_buffers;

/* join.c: block-wise scales into acc: acc[r * w + c] = mm_blockwise_join(acc.., chain..,
 * sa[r], sb[c], epilogue) for rows x w accumulators. */
typedef void (*mm_cpu_join_fn)(float* acc, const float* chain, const float* sa, const float* sb,
                               int rows, int w, int32_t epilogue);
/* The join that runs with the named SIMD kernel (the same bits whichever runs). */
mm_cpu_join_fn mm_cpu_join_for(const char* simd);

typedef struct {
    const mm_gemm* g;
    mm_cpu_plan plan;
    const mm_cpu_kernel* kern;
    mm_cpu_join_fn join;     /* block-wise plans (mm_is_blockwise) */
    mm_cpu_tile_fn tile;     /* kern->tile, kern->tile_split, or the wide kernel's */
    int signs;               /* tile is kern->tile in its FMA form: A enlarged, sign words */
    mm_cpu_lut lut_b;
    const int32_t* a;        /* decoded rows [row0, row0 + rows), k in [ks, ke) */
    const uint8_t* row_special;
    mm_cpu_decode_work decode; /* what the pass's threads decode first (A's rows; B's panels) */
    int64_t row0, rows;      /* the rows of this pass */
    int64_t panel0, panels;  /* the panels of this pass: columns from panel0 * w */
    int64_t chunk_rows, chunks;
    int64_t ks, ke;          /* the decoded k range: all of K, or one segment of K */
    /* K in segments only (else NULL): per tile (its first row rt, its rows r, panel p of the
     * pass) its split state, r * w floats at state + (p * rows + rt) * w, and nred slots of
     * r * w floats of split reduction at red + (p * rows + rt) * nred * w; col_special: whether
     * each of the pass's columns held a NaN/Inf code in this segment or the ones before it (the
     * panels' decoders gather them); panel_set: the pass's panels over the segment, decoded once
     * for all of its row chunks; seg_rows: rows per chunk, so a chunk's decoded A stays in L2
     * while every panel of the pass runs on it. */
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
     * freed panels resident. */
    mm_cpu_buffers* bufs;
    int nbufs;
    int64_t klen;
    atomic_int next_buf; /* the set the next thread to start takes */
    atomic_int finished; /* threads that had their buffers and ran out of items: with one, every item is done */
    fenv_t fenv;         /* the caller's, in round to nearest (mmaemu_gemm_cpu): every thread's */
} mm_cpu_job;

/* ---- reduce.c ---------------------------------------------------------------------------- */

/* Split s's finished accumulator part (n floats, overwritten) into the reduction red. */
void mm_cpu_reduce_push(int32_t scheme, int32_t s, float* part, float* red, int n);
/* The reduction after all `splits` pushes into acc. */
void mm_cpu_reduce_result(int32_t scheme, int32_t splits, const float* red, float* acc, int n);

/* ---- store.c ----------------------------------------------------------------------------- */

/* The epilogue of a tile's accumulators acc: its rows row0 + rt.. (rows of them), columns j0..;
 * an output whose row or column holds a NaN/Inf code gets the reference's bits instead. */
void mm_cpu_store_tile(const mm_cpu_job* job, int64_t rt, int rows, int64_t j0, const float* acc,
                       const uint8_t* col_special);
/* Asks for the cache lines of the tile's outputs with intent to write, before its k loop. */
void mm_cpu_prefetch_out(const mm_cpu_job* job, int64_t rt, int rows, int64_t j0);

/* ---- tile.c ------------------------------------------------------------------------------ */

/* The reduced accumulators of one tile over all of K (mm_dot over the splits) into acc; part:
 * n floats, red: 31 slots of n floats of scratch (n = mr * w). */
void mm_cpu_tile_dot(const mm_cpu_job* job, const mm_cpu_operands* o, float* acc, float* part, float* red);
/* One segment [job->ks, job->ke) of the tile at row rt, panel p of the pass: each split's piece
 * continues that split's state, a split that ends in it joins the reduction, and the last
 * segment stores the outputs (col_special: the panel's columns that hold NaN/Inf in K). */
void mm_cpu_tile_segment(const mm_cpu_job* job, int64_t rt, int64_t p, const mm_cpu_operands* o,
                         float* acc, float* scratch, const uint8_t* col_special);
/* Block-wise scales (mm_blockwise_dot): the 128-k groups of [k0, k1) (k counted from K's start,
 * the decoded operands from kbase's) of the tile at rows row0 + rt.., columns j0.., each chained
 * from +0 by the kernel into chain and joined to acc with its scales; scales: mr + w floats. */
void mm_cpu_tile_blockwise(const mm_cpu_job* job, const mm_cpu_operands* o, int64_t rt, int64_t j0,
                           int64_t kbase, int64_t k0, int64_t k1, float* acc, float* chain,
                           float* scales);

/* ---- pool.c ------------------------------------------------------------------------------ */

/* What the next pass's threads decode first: A's rows [0, rows) of sub over k in [k0, k1), and
 * (K in segments) the pass's panels over the same k. */
void mm_cpu_decode_set(mm_cpu_job* job, const mm_gemm* sub, const mm_cpu_lut* lut, int32_t* a,
                       uint8_t* row_special, int64_t rows, int64_t k0, int64_t k1);
/* Decodes the pass's rows of A (and, K in segments, its panels) on its threads and runs its
 * items (panel, row chunk); MM_ERR_NO_MEMORY if no thread had its buffers. */
int mm_cpu_run_pass(mm_cpu_job* job, int threads);
void mm_cpu_buffers_free(mm_cpu_job* job);

/* ---- cache.c ----------------------------------------------------------------------------- */

/* Rows of A per pass, rows of row_bytes decoded bytes in tiles of mr: whole tiles, at least one. */
int64_t mm_cpu_a_pass_rows(int64_t row_bytes, int mr);
/* Rows per row chunk of a segmented pass: as many whole tiles of decoded A rows of kc k as half
 * of L2 holds, at least one tile. */
int64_t mm_cpu_seg_chunk_rows(int64_t kc, int mr);
/* Whether a tile over all of K keeps its working set (its A rows and its panel) in half of L2. */
int mm_cpu_whole_k_fits_l2(int64_t K, int mr, int w, int signs);

/* ---- passes.c ---------------------------------------------------------------------------- */

/* All of K decoded at once: rows of A in passes. */
int mm_cpu_run_whole(mm_cpu_job* job, const mm_cpu_lut* lut_a, int threads);
/* K in segments of at most kc (a multiple of unit, the k a resumed split state must start on). */
int mm_cpu_run_segments(mm_cpu_job* job, const mm_cpu_lut* lut_a, int64_t kc, int64_t unit, int threads);

/* ---- measure.c --------------------------------------------------------------------------- */

/* Synthetic operands of one tile, decoded as a GEMM's are (E4M3 normals of mixed signs with
 * exponents in [-4, 6], so no lane takes the rare exact-composition path). */
enum { MM_CPU_PROBE_K = 1024 };
typedef struct {
    int32_t* a;
    mm_cpu_panel panel;
    mm_cpu_operands o;
} mm_cpu_probe_set;

/* The operands of one tile of k's kind (hopper's FMA form where it has one); 0 if out of memory. */
int mm_cpu_probe_operands(const mm_cpu_kernel* k, mm_cpu_probe_set* ps);
void mm_cpu_probe_free(mm_cpu_probe_set* ps);
/* What mm_cpu_plan_make makes of a hopper fast E4M3 GEMM over MM_CPU_PROBE_K. */
mm_cpu_plan mm_cpu_probe_plan(void);

#pragma GCC visibility pop

#endif /* MMAEMU_CPU_DRIVER_H */
