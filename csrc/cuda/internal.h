/* internal.h: what the files of the CUDA loader share (not part of the C API).
 *
 *   util.c          errors of this thread, small file helpers
 *   config.c        the caller's settings (mmaemu_cuda_configure)
 *   driver.c        libcuda.so.1 and its entry points, devices and their primary contexts
 *   nvrtc.c         libnvrtc: finding it (in the caller's directories), compiling sources
 *   modules.c       kernel sources and their hash, fatbins, the cubin cache, loaded modules
 *   kernel_table.c  the kernel table, the plans each kernel accepts, its function handles
 *   launch.c        the launch of a kernel and of the split-K reduction
 *   sha256.c        SHA-256 for the cache keys and fatbin stamps
 *
 * Each file calls only the ones listed above it (sha256.c: modules.c), never one below.
 *
 * Rules that keep PyTorch's state intact: only the primary context of a device is used (pushed
 * around our calls, never created or reset); kernels go on the stream the caller names (the
 * capture stream under CUDA graphs); nothing here allocates device memory or synchronises.
 * Module loads and NVRTC compiles happen on a kernel's first use (warm up before capturing a
 * graph). Device state is guarded by mm_cu_dev_lock. */
#ifndef MMAEMU_CUDA_INTERNAL_H
#define MMAEMU_CUDA_INTERNAL_H

#include <pthread.h>
#include <stddef.h>

#include "cuda_backend.h"

#pragma GCC visibility push(hidden)

/* ---- util.c --------------------------------------------------------------------------- */

/* Sets this thread's error (mmaemu_cuda_last_error) and returns code. */
int mm_cu_fail(int code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
const char* mm_cu_error_text(void);
void mm_cu_copy_str(char* dst, int n, const char* src);
int mm_cu_file_exists(const char* path);
int mm_cu_dir_exists(const char* path);
/* The whole file, NUL-terminated (sources go to NVRTC as strings); NULL if unreadable. */
char* mm_cu_read_file(const char* path, size_t* size);
int mm_cu_mkdir_p(const char* path);
/* Writes a temporary file and renames it: readers never see half a file. */
int mm_cu_write_file_atomic(const char* path, const void* data, size_t n);

/* ---- config.c ------------------------------------------------------------------------- */

enum { MM_CU_MAX_LIB_DIRS = 64, MM_CU_LIB_DIR_LEN = 1024 };

/* The settings of mmaemu_cuda_configure; empty strings and zeros until it is called. */
typedef struct {
    char kernel_dir[2048], fatbin_dir[2048], cache_dir[2048];
    char library_dirs[MM_CU_MAX_LIB_DIRS][MM_CU_LIB_DIR_LEN];
    int n_library_dirs;
    char libcuda_path[1024], nvrtc_path[1024];
    int force_nvrtc, disable_nvrtc, disable_cuda;
} mm_cu_settings;

extern mm_cu_settings mm_cu_config;

/* ---- driver.c ------------------------------------------------------------------------- */

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;

enum { CU_OK = 0 };
enum { CU_FUNC_ATTR_MAX_DYNAMIC_SMEM = 8 };

/* The driver entry points the loader uses (filled by cuGetProcAddress or dlsym). */
typedef struct {
    CUresult (*cuInit)(unsigned);
    CUresult (*cuDriverGetVersion)(int*);
    CUresult (*cuDeviceGetCount)(int*);
    CUresult (*cuDeviceGet)(CUdevice*, int);
    CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
    CUresult (*cuDeviceGetName)(char*, int, CUdevice);
    CUresult (*cuDeviceGetUuid)(unsigned char*, CUdevice);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
    CUresult (*cuCtxPushCurrent)(CUcontext);
    CUresult (*cuCtxPopCurrent)(CUcontext*);
    CUresult (*cuModuleLoadData)(CUmodule*, const void*);
    CUresult (*cuModuleUnload)(CUmodule);
    CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
    CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
    CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, CUstream, void**, void**);
    CUresult (*cuGetErrorName)(CUresult, const char**);
    CUresult (*cuGetErrorString)(CUresult, const char**);
} mm_cu_driver;

extern mm_cu_driver mm_cu_drv;
extern pthread_mutex_t mm_cu_dev_lock;

/* A driver error in words ("CUDA_ERROR_X (n): text"); the buffer is this thread's. */
const char* mm_cu_error(CUresult r);
/* MM_OK once the driver is loaded and initialised (loads it on first call). */
int mm_cu_driver_ready(void);

/* One device function, looked up on first use. */
typedef struct {
    int tried;
    CUfunction fn;
    int smem_set; /* cuFuncSetAttribute for its dynamic shared memory done */
} mm_cu_function;

/* A kernel's functions on one device, by block size and accumulation mode (the fields of
 * mm_kernel_functions). */
typedef struct {
    mm_cu_function block32, block16, block32_fast, block16_fast;
} mm_cu_kernel_handles;

enum { MM_MOD_REFERENCE = 0, MM_MOD_IEEE = 1, MM_MOD_WGMMA = 2, MM_MOD_COUNT = 3 };

typedef struct {
    int tried, ok;
    CUmodule module;
    char detail[1536]; /* how it was loaded, or why not */
} mm_cu_module;

typedef struct {
    int index;
    int tried, ok;
    char why[512];
    CUdevice dev;
    CUcontext ctx;
    int cc, sms, smem_optin;
    char name[256];
    char uuid[33];
    mm_cu_module mods[MM_MOD_COUNT];
    mm_cu_kernel_handles* handles; /* one per table entry (kernel_table.c) */
    mm_cu_function split_reduce;
} mm_cu_device;

/* The device's state, initialised on first use (mm_cu_dev_lock held). */
int mm_cu_device_get(int index, mm_cu_device** out);
int mm_cu_ctx_push(const mm_cu_device* d);
void mm_cu_ctx_pop(void);
int mm_cu_driver_version(void);

/* ---- nvrtc.c -------------------------------------------------------------------------- */

int mm_cu_nvrtc_ready(void);
int mm_cu_nvrtc_version(void);
/* The options every NVRTC compile uses besides the architecture (part of the cubin cache key). */
enum { MM_CU_NVRTC_OPTIONS = 3 };
extern const char* const mm_cu_nvrtc_options[MM_CU_NVRTC_OPTIONS];

/* A module's sources: [0] is the module's .cu, then every mmaemu_*.h (sorted). */
typedef struct {
    char* text[16];
    char* names[16];
    int count;
    char hash[65]; /* SHA-256 over (name, length, bytes) of each file in that order */
} mm_cu_sources;

/* Sources -> a cubin (arch "sm_XY[a]") or PTX (arch "compute_XY"); the log on failure. */
int mm_cu_nvrtc_build(const mm_cu_sources* s, const char* arch, char** image, size_t* size,
                      char* log, int logn);
/* The NVRTC target for a device of compute capability cc. */
int mm_cu_nvrtc_arch(int mod, int cc, char* out, size_t n);

/* ---- modules.c ------------------------------------------------------------------------ */

extern const char* const mm_cu_module_names[MM_MOD_COUNT];
int mm_cu_module_id(const char* name); /* -1 when unknown */
int mm_cu_sources_read(int mod, mm_cu_sources* s);
void mm_cu_sources_free(mm_cu_sources* s);
/* Loads a module on a device: the fatbin when it matches the sources, else NVRTC. */
int mm_cu_module_get(mm_cu_device* d, int mod);
/* A function of a module, looked up once per device. */
int mm_cu_function_get(mm_cu_device* d, int mod, const char* name, mm_cu_function* f);

/* ---- kernel_table.c ------------------------------------------------------------------------ */

const mm_cuda_kernel* mm_cu_kernel_find(const char* name);
/* Everything a launch of k for plan g needs, loading what is missing: the kernel's function
 * and, for split plans of the tiled kernels, the reduction (reduce may be NULL). */
int mm_cu_kernel_prepare(const mm_cuda_kernel* k, const mm_gemm* g, mm_cu_device* d,
                         CUfunction* fn, CUfunction* reduce);
int64_t mm_cu_workspace_bytes(const mm_cuda_kernel* k, const mm_gemm* g);

#pragma GCC visibility pop

#endif /* MMAEMU_CUDA_INTERNAL_H */
