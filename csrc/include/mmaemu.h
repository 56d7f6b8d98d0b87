/* mmaemu.h: the C API of the mmaemu core (no torch dependency).
 *
 * The C++ shim (csrc/torch/ops.cpp) turns tensors into these structs and runs exactly the
 * executor the caller names. Every function returns MM_OK or an error code;
 * mmaemu_error_string() says what went wrong. Nothing here reads the environment or picks an
 * executor: that is the caller's plan. */
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
    MM_ERR_UNAVAILABLE = 4,   /* the requested executor cannot run here */
    MM_ERR_CPU_SIMD = 5       /* the named SIMD kernel is unknown or not available on this CPU */
};

const char* mmaemu_error_string(int code);

/* The ranges of a preset's parameters that mmaemu_gemm_check accepts (MM_MAX_SPLITS,
 * MM_SPLIT_GRAIN and MM_MAX_DIM: kernels/mmaemu_gemm.h). */
#define MM_MAX_BLOCK 64
#define MM_MAX_FRAC 30
#define MM_MAX_KEEP 40
#define MM_MAX_SPLIT_RR_TILE 4096

/* ---- Names and limits, defined once (core/enums.c) ------------------------------------------ */

/* One name of an enumeration and its value (an id, or a limit's number). */
typedef struct {
    const char* name;
    int64_t value;
} mm_enum_item;

/* A named enumeration: "split_schemes", "epilogues", "outputs", "fp8_formats", "biases",
 * "presets", "limits", "errors". */
typedef struct {
    const char* name;
    const mm_enum_item* items;
    int count;
} mm_enum;

int mmaemu_enum_count(void);
const mm_enum* mmaemu_enum_at(int i); /* NULL when out of range */
/* The value of `name` in the enumeration `enumeration`, or -1 when either is unknown. */
int64_t mmaemu_enum_value(const char* enumeration, const char* name);

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

/* The `cpu` executor: the same bits as mmaemu_gemm_reference, fast. threads: how many
 * threads it may use (the bits do not depend on it). simd: the narrow SIMD kernel it runs
 * ("portable", "avx2", "avx512"); an unknown name or one this CPU lacks is MM_ERR_CPU_SIMD. */
int mmaemu_gemm_cpu(const mm_gemm* g, int threads, const char* simd);

/* The narrow SIMD kernels of the `cpu` executor, available here or not. */
typedef struct {
    const char* name;     /* "portable", "avx2", "avx512": mmaemu_gemm_cpu's simd */
    int available;        /* this build has it and this CPU runs it */
    int mr;               /* tile rows, at most */
    int row_step;         /* a tile's rows are a multiple of it: M is padded to it */
    int w;                /* tile columns (the B panel's width): N is padded to it */
    const char* note;     /* which build of it runs here, or "" */
    const char* decode_a; /* how A's rows are decoded on this CPU */
    const char* decode_b; /* how its B panels are decoded on this CPU */
} mm_cpu_simd_info;

int mmaemu_cpu_simd_count(void);
/* Kernel i's facts; MM_ERR_ARGUMENT when i is out of range. */
int mmaemu_cpu_simd_info(int i, mm_cpu_simd_info* info);
/* The available kernels' names, comma-separated ("portable,avx2"). */
const char* mmaemu_cpu_simd_paths(void);
/* Measures each available kernel on this machine now (one thread, full tiles of a hopper
 * fast-accumulation E4M3 GEMM, a few milliseconds): rates[i] = kernel i's MAC/s, 0 where it is
 * not available, for i < min(n, mmaemu_cpu_simd_count()). */
int mmaemu_cpu_simd_measure(double* rates, int n);
/* How many of A's decoded rows the `cpu` executor holds per pass, and why (the cache's size). */
const char* mmaemu_cpu_a_pass(void);

/* Checks a tile plan against g (mmaemu_gemm_check checks g itself): n_offsets = tiles + 1
 * non-decreasing offsets into n_bounds segments, each a non-empty k-iteration range in K. */
int mmaemu_tile_plan_check(const mm_gemm* g, const mm_tile_plan* tp, int64_t n_offsets,
                           int64_t n_bounds);
/* The scalar reference of a tile-planned GEMM (mmaemu_tiles.h) for rows [row0, row1): each
 * element over its tile's k-segments, then mm_epilogue_at. Checked plans only. */
int mmaemu_gemm_tiles_reference(const mm_gemm* g, const mm_tile_plan* tp, int64_t row0,
                                int64_t row1);
/* The `cpu` executor's form of it: the same bits, from mmaemu_gemm_cpu's chain accumulators
 * with the named SIMD kernel. */
int mmaemu_gemm_tiles_cpu(const mm_gemm* g, const mm_tile_plan* tp, int threads, const char* simd);

/* mmaemu.mma: d[i] = the preset's chain of blocks over a[i, :] . b[i, :] starting from c[i].
 * a, b: [n, K] with row strides lda, ldb; K a multiple of the block size. */
int mmaemu_mma_reference(const uint8_t* a, int64_t lda, int fmt_a, const uint8_t* b,
                         int64_t ldb, int fmt_b, const float* c, int64_t n, int64_t K,
                         int preset_id, float* d);

#ifdef __cplusplus
}
#endif

#endif /* MMAEMU_H */
