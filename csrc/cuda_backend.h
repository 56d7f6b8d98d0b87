/* cuda_backend.h: the CUDA side of the C core, reached through the driver API at run time.
 *
 * Nothing here links against CUDA: the extension builds against CPU-only torch. At the first
 * use, cuda_backend.c dlopens libcuda.so.1 (or MMAEMU_LIBCUDA_PATH), uses the primary context of
 * the tensors' device (the one PyTorch uses) and launches on PyTorch's current stream. Kernels
 * come from the fatbins shipped in mmaemu/_fatbin, else from the shipped sources compiled by
 * NVRTC (cubins cached under MMAEMU_CACHE_DIR). MMAEMU_DISABLE_CUDA=1: never touch the driver.
 *
 * Backend names: "reference" (mm_gemm_element, one thread per element: every format, preset and
 * plan), "cuda:h1", "cuda:h4" (IEEE-exact, 32-product blocks: the hopper preset), "cuda:v1",
 * "cuda:v4" (IEEE-exact, 16-product blocks: the ada preset), "cuda:wgmma" (gated tensor-core
 * kernel, compute capability 9.0 only), and "auto" / "cuda": the fastest IEEE-exact kernel that
 * accepts the plan and loads ("auto" ends at "reference"). Gated kernels run only when named:
 * their self-tests live in mmaemu/backends.py. */
#ifndef MMAEMU_CUDA_BACKEND_H
#define MMAEMU_CUDA_BACKEND_H

#include "mmaemu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One GEMM on a CUDA device. */
typedef struct {
    mm_gemm g;                 /* device pointers; g.scale_* are used where the pointers are NULL */
    const float* scale_a;      /* one fp32 in device memory (read by the kernel), or NULL */
    const float* scale_b;
    const float* scale_result;
    void* workspace;           /* mmaemu_cuda_workspace_bytes() bytes of device memory, or NULL */
    void* stream;              /* CUstream to launch on, or NULL: PyTorch's current stream */
    int device;                /* CUDA device ordinal (torch's device index) */
} mm_cuda_call;

/* Runs call->g on the device with the named backend. MM_OK, or an error code with the reason in
 * mmaemu_cuda_last_error(); MM_ERR_UNAVAILABLE means no launch happened (no driver, kernel not
 * loadable or not applicable to this plan). */
int mmaemu_cuda_gemm_ex(const mm_cuda_call* call, const char* backend);

/* Device workspace the backend needs for g (split partials), in bytes (0 if none). */
int mmaemu_cuda_workspace_bytes(const mm_gemm* g, const char* backend, int device, int64_t* bytes);

/* The backend that "auto" / "cuda" / a kernel name resolves to for g on the device, loading its
 * module if needed. Writes the name (e.g. "cuda:h4") to name. */
int mmaemu_cuda_resolve(const mm_gemm* g, const char* backend, int device, char* name, int n);

/* The original entry point: scales taken from g, PyTorch's current stream, no workspace (split
 * plans then need the "reference" kernel). */
int mmaemu_cuda_gemm(const mm_gemm* g, const char* backend, int device);

/* The last CUDA error of this thread, in words. */
const char* mmaemu_cuda_last_error(void);

/* One line on the loader's state (driver found or why not). */
const char* mmaemu_cuda_status(void);

/* 1 when the driver loaded and initialised (loads it on first call). */
int mmaemu_cuda_driver_ok(void);

/* Number of CUDA devices the driver sees (0 without a driver). */
int mmaemu_cuda_device_count(void);

/* Facts on one device: name, compute capability, SM count, driver version (e.g. 13000), UUID
 * as 32 hex digits. MM_OK or MM_ERR_UNAVAILABLE. */
int mmaemu_cuda_device_info(int device, char* name, int name_len, int* cc_major, int* cc_minor,
                            int* sm_count, int* driver_version, char* uuid_hex33);

/* Whether a kernel ("reference", "cuda:h4", ...) can run on the device: MM_OK once its module is
 * loaded; detail says how ("fatbin sm_90", "NVRTC sm_89 (cached)") or why not. */
int mmaemu_cuda_kernel_check(int device, const char* kernel, char* detail, int n);

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
