/* mmaemu.h: the C API of the mmaemu core (no torch dependency).
 *
 * The C++ shim (torch_ops.cpp) turns tensors into these structs. Every function returns
 * MM_OK or an error code; mmaemu_error_string() says what went wrong. */
#ifndef MMAEMU_H
#define MMAEMU_H

#include "kernels/mmaemu_gemm.h"
#include "kernels/mmaemu_presets.h"
#include "kernels/mmaemu_tiles.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    MM_OK = 0,
    MM_ERR_ARGUMENT = 1,      /* a size, stride, format or plan value out of range */
    MM_ERR_FLUSH_DENORMAL = 2, /* the CPU flushes subnormals: fp32 adds would be wrong */
    MM_ERR_NO_MEMORY = 3,
    MM_ERR_UNAVAILABLE = 4,   /* the requested backend cannot run here */
    MM_ERR_CPU_SIMD = 5       /* MMAEMU_CPU_SIMD names an unknown path or one this CPU lacks */
};

const char* mmaemu_error_string(int code);

/* Preset id for a name ("hopper", "ada", "b200"), or -1. */
int mmaemu_preset_id(const char* name);

/* 1 when the calling thread flushes fp32 subnormals (x86 MXCSR FTZ/DAZ, AArch64 FPCR.FZ). */
int mmaemu_cpu_flushes_denormals(void);

/* The CPU backends compute in round to nearest whatever rounding mode the caller set (the
 * hardware's fp32 adds round to nearest; a host mode must not change a bit): each entry point
 * sets it with mmaemu_round_nearest, which returns the caller's mode, and gives that back with
 * mmaemu_round_restore. */
int mmaemu_round_nearest(void);
void mmaemu_round_restore(int mode);

/* Checks a plan's sizes, strides and enums (so no kernel indexes out of bounds). */
int mmaemu_gemm_check(const mm_gemm* g);

/* The scalar reference: every output element computed from scratch, one at a time. */
int mmaemu_gemm_reference(const mm_gemm* g);

/* The `cpu` backend: the same bits as mmaemu_gemm_reference, fast. threads: how many
 * threads it may use (the bits do not depend on it). The environment variable
 * MMAEMU_CPU_SIMD (auto, portable, avx2, avx512) forces a SIMD path. */
int mmaemu_gemm_cpu(const mm_gemm* g, int threads);

/* The SIMD paths the `cpu` backend can run here, comma-separated ("portable,avx2"). */
const char* mmaemu_cpu_simd_paths(void);
/* Which SIMD path MMAEMU_CPU_SIMD selects and why (auto: the measured rates it decides by). */
const char* mmaemu_cpu_simd_choice(void);
/* How many of A's decoded rows the `cpu` backend holds per pass, and why (the cache's size). */
const char* mmaemu_cpu_a_pass(void);

/* Checks a tile plan against g (mmaemu_gemm_check checks g itself): n_offsets = tiles + 1
 * non-decreasing offsets into n_bounds segments, each a non-empty k-iteration range in K. */
int mmaemu_tile_plan_check(const mm_gemm* g, const mm_tile_plan* tp, int64_t n_offsets,
                           int64_t n_bounds);
/* The scalar reference of a tile-planned GEMM (mmaemu_tiles.h) for rows [row0, row1): each
 * element over its tile's k-segments, then mm_epilogue_at. Checked plans only. */
int mmaemu_gemm_tiles_reference(const mm_gemm* g, const mm_tile_plan* tp, int64_t row0,
                                int64_t row1);
/* The cpu backend's form of it: the same bits, from mmaemu_gemm_cpu's chain accumulators. */
int mmaemu_gemm_tiles_cpu(const mm_gemm* g, const mm_tile_plan* tp, int threads);

/* mmaemu.mma: d[i] = the preset's chain of blocks over a[i, :] . b[i, :] starting from c[i].
 * a, b: [n, K] with row strides lda, ldb; K a multiple of the block size. */
int mmaemu_mma_reference(const uint8_t* a, int64_t lda, int fmt_a, const uint8_t* b,
                         int64_t ldb, int fmt_b, const float* c, int64_t n, int64_t K,
                         int preset_id, float* d);

#ifdef __cplusplus
}
#endif

#endif /* MMAEMU_H */
