/* cuda_backend.h: the CUDA side of the C core, reached through the driver API at run time.
 *
 * Nothing here links against CUDA, calls into PyTorch or reads the environment: the extension
 * builds against CPU-only torch, and every setting comes from the caller (mmaemu_cuda_configure).
 * At the first use the loader dlopens libcuda.so.1 (or the configured path), uses the primary
 * context of the tensors' device (the one PyTorch uses) and launches on the stream the caller
 * passes (csrc/torch/ops.cpp passes PyTorch's current stream). Kernels come from the fatbins
 * shipped with the package, else from the shipped sources compiled by NVRTC (cubins cached
 * under the configured cache directory).
 *
 * The kernels are the entries of one table (mmaemu_cuda_kernel_at): every function here takes
 * a concrete kernel name from it and runs exactly that kernel; which kernel to use is the
 * caller's plan. */
#ifndef MMAEMU_CUDA_BACKEND_H
#define MMAEMU_CUDA_BACKEND_H

#include "mmaemu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- The kernel table ---------------------------------------------------------------------- */

enum { MM_KERNEL_REFERENCE = 0, MM_KERNEL_TILED = 1, MM_KERNEL_WGMMA = 2 };
enum { MM_KERNEL_MAX_PRESETS = 4 };

/* The device functions of a kernel, by block size and accumulation mode. A NULL *_fast
 * function: the precise one computes both modes. The reference kernel's block32 function
 * computes every block size. */
typedef struct {
    const char* block32;
    const char* block16;
    const char* block32_fast;
    const char* block16_fast;
} mm_kernel_functions;

typedef struct {
    const char* name;                             /* "cuda:h4" ("reference": the executor cuda:reference) */
    const char* module;                           /* the kernel source: "reference", "ieee", "wgmma" */
    int kind;                                     /* MM_KERNEL_* */
    const char* presets[MM_KERNEL_MAX_PRESETS];   /* the presets it implements (NULL-terminated) */
    int min_cc;                                   /* oldest compute capability (75 = sm_75) */
    int only_cc;                                  /* the one compute capability it runs on, or 0 */
    int gated;                                    /* 1: not exact by construction, self-tested */
    int exact;                                    /* 1: IEEE-exact on every GPU */
    int round_robin_splits;                       /* 1: computes a split of S > 1 in the round-robin
                                                     layout (mm_preset.split_rr_tile > 0) */
    int tile;                                     /* output tile edge (0: one thread per element) */
    int smem_bytes;                               /* dynamic shared memory per block */
    mm_kernel_functions functions;
    const char* description;
} mm_cuda_kernel;

/* Number of kernels, and kernel i of the table (NULL when out of range). */
int mmaemu_cuda_kernel_count(void);
const mm_cuda_kernel* mmaemu_cuda_kernel_at(int i);

/* The block size a kernel is limited to (32 or 16), or 0 when it takes the preset's. */
int mmaemu_cuda_kernel_block(const mm_cuda_kernel* k);

/* ---- Configuration ------------------------------------------------------------------------- */

/* Every setting of the loader. NULL strings and zeros: not set. */
typedef struct {
    const char* kernel_dir;          /* the shipped kernel sources (*.cu, mmaemu_*.h) */
    const char* fatbin_dir;          /* the fatbins (*.fatbin + .sha256) */
    const char* cache_dir;           /* NVRTC cubins go to its cubin/ ("." when not set) */
    const char* const* library_dirs; /* may hold libnvrtc; searched in order after nvrtc_path
                                        and a copy already loaded (the first 64 that fit) */
    int n_library_dirs;
    const char* libcuda_path;        /* the driver library (not set: libcuda.so.1) */
    const char* nvrtc_path;          /* libnvrtc, a file or the directory holding it */
    int force_nvrtc;                 /* 1: skip the fatbins, always compile with NVRTC */
    int disable_nvrtc;               /* 1: never load NVRTC */
    int disable_cuda;                /* 1: never load the driver */
} mm_cuda_config;

/* Call before the first GEMM; later calls change only what has not been loaded yet. MM_OK, or
 * MM_ERR_ARGUMENT for a directory name or path too long. */
int mmaemu_cuda_configure(const mm_cuda_config* config);

/* ---- GEMMs --------------------------------------------------------------------------------- */

/* One GEMM on a CUDA device. */
typedef struct {
    mm_gemm g;                 /* device pointers; g.scale_* are used where the pointers are NULL */
    const float* scale_a;      /* one fp32 in device memory (read by the kernel), or NULL */
    const float* scale_b;
    const float* scale_result;
    void* workspace;           /* mmaemu_cuda_workspace_bytes() bytes of device memory, or NULL */
    void* stream;              /* CUstream to launch on (NULL: the legacy default stream) */
    int device;                /* CUDA device ordinal (torch's device index) */
} mm_cuda_call;

/* Runs call->g on the device with the named kernel. MM_OK, or an error code with the reason in
 * mmaemu_cuda_last_error(); MM_ERR_UNAVAILABLE means no launch happened (no driver, kernel not
 * loadable or not applicable to this plan); MM_ERR_ARGUMENT for a name not in the table. */
int mmaemu_cuda_gemm_ex(const mm_cuda_call* call, const char* kernel);

/* Device workspace the kernel needs for g (split partials), in bytes (0 if none), loading its
 * module if needed: MM_OK when the kernel can run g on the device. */
int mmaemu_cuda_workspace_bytes(const mm_gemm* g, const char* kernel, int device, int64_t* bytes);

/* The last CUDA error of this thread, in words. */
const char* mmaemu_cuda_last_error(void);

/* ---- The driver and devices ---------------------------------------------------------------- */

/* One line on the loader's state (driver found or why not). */
const char* mmaemu_cuda_status(void);

/* Number of CUDA devices the driver sees (0 without a driver). */
int mmaemu_cuda_device_count(void);

/* Facts on one device: name, compute capability, SM count, driver version (e.g. 13000), UUID
 * as 32 hex digits. MM_OK or MM_ERR_UNAVAILABLE. */
int mmaemu_cuda_device_info(int device, char* name, int name_len, int* cc_major, int* cc_minor,
                            int* sm_count, int* driver_version, char* uuid_hex33);

/* Whether a kernel ("reference", "cuda:h4", ...) can run on the device: MM_OK once its module is
 * loaded; detail says how ("fatbin sm_90", "NVRTC sm_89 (cached)") or why not. */
int mmaemu_cuda_kernel_check(int device, const char* kernel, char* detail, int n);

/* ---- NVRTC --------------------------------------------------------------------------------- */

/* Compiles one shipped kernel source ("reference", "ieee", "wgmma") with NVRTC for an
 * architecture ("sm_89", "sm_90a", "compute_90"), without a driver or GPU. MM_OK with the image
 * size in *bytes, or an error with the compiler log in detail. For tests and tools. */
int mmaemu_cuda_nvrtc_compile(const char* module, const char* arch, char* detail, int n,
                              int64_t* bytes);

/* Where NVRTC was found (or why not), and its version (e.g. 13000), loading it on first call. */
const char* mmaemu_cuda_nvrtc_status(int* version);

#ifdef __cplusplus
}
#endif

#endif /* MMAEMU_CUDA_BACKEND_H */
