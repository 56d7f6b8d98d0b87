/* cuda_backend.c: the CUDA loader and launcher (driver API through dlopen, NVRTC fallback).
 *
 * Sections: 1. errors and small utilities; 2. SHA-256 (cache keys, fatbin stamps); 3. the
 * driver (libcuda.so.1, entry points by cuGetProcAddress); 4. NVRTC (found in PyTorch's CUDA
 * wheels, MMAEMU_NVRTC_PATH or the toolkit); 5. kernel sources, fatbins and the cubin cache;
 * 6. devices and modules (primary context, fatbin first, NVRTC second); 7. the kernels and the
 * plans they accept; 8. PyTorch's current stream; 9. launch; 10. the public functions.
 *
 * Rules that keep PyTorch's state intact: only the primary context of a device is used (pushed
 * around our calls, never created or reset); kernels go on the stream PyTorch considers current
 * for the device (the capture stream under CUDA graphs); nothing here allocates device memory or
 * synchronises. Module loads and NVRTC compiles happen on a kernel's first use (warm up before
 * capturing a graph). */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "cuda_backend.h"
#include "kernels/mmaemu_launch.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation" /* messages are cut to their buffers on purpose */
#endif

#define MM_WGMMA_SMEM_BYTES 134144 /* kSmemBytes in kernels/wgmma.cu */
#define MM_MAX_DEVICES 64

/* ============================================================================================
 * 1. Errors and small utilities
 * ============================================================================================ */

static _Thread_local char g_error[2048];

static int fail(int code, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_error, sizeof g_error, fmt, ap);
    va_end(ap);
    return code;
}

static void copy_str(char* dst, int n, const char* src) {
    if (!dst || n <= 0) return;
    snprintf(dst, (size_t)n, "%s", src ? src : "");
}

static int env_flag(const char* name) {
    const char* v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

static int file_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int dir_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The whole file, NUL-terminated (so sources can be handed to NVRTC as strings). */
static char* read_file(const char* path, size_t* size) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0) { fclose(f); return NULL; }
    const long n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) { fclose(f); return NULL; }
    char* buf = (char*)malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    fclose(f);
    if (!buf) return NULL;
    buf[n] = 0;
    if (size) *size = (size_t)n;
    return buf;
}

static int mkdir_p(const char* path) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char* p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0777) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(tmp, 0777) == 0 || errno == EEXIST ? 0 : -1;
}

/* Write to a temporary file and rename: readers never see half a file. */
static int write_file_atomic(const char* path, const void* data, size_t n) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE* f = fopen(tmp, "wb");
    if (!f) return -1;
    const int ok = fwrite(data, 1, n, f) == n;
    if (fclose(f) != 0 || !ok) { unlink(tmp); return -1; }
    if (rename(tmp, path) != 0) { unlink(tmp); return -1; }
    return 0;
}

/* ============================================================================================
 * 2. SHA-256 (FIPS 180-4), for cache keys and fatbin stamps
 * ============================================================================================ */

typedef struct {
    uint32_t h[8];
    uint64_t len;
    uint8_t buf[64];
    size_t used;
} sha256_ctx;

static const uint32_t sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(sha256_ctx* c, const uint8_t* p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        const uint32_t s0 = ROTR(w[i - 15], 7) ^ ROTR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        const uint32_t s1 = ROTR(w[i - 2], 17) ^ ROTR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = c->h[0], b = c->h[1], cc = c->h[2], d = c->h[3], e = c->h[4], f = c->h[5], g = c->h[6], h = c->h[7];
    for (int i = 0; i < 64; i++) {
        const uint32_t t1 = h + (ROTR(e, 6) ^ ROTR(e, 11) ^ ROTR(e, 25)) + ((e & f) ^ (~e & g)) + sha256_k[i] + w[i];
        const uint32_t t2 = (ROTR(a, 2) ^ ROTR(a, 13) ^ ROTR(a, 22)) + ((a & b) ^ (a & cc) ^ (b & cc));
        h = g; g = f; f = e; e = d + t1; d = cc; cc = b; b = a; a = t1 + t2;
    }
    c->h[0] += a; c->h[1] += b; c->h[2] += cc; c->h[3] += d;
    c->h[4] += e; c->h[5] += f; c->h[6] += g; c->h[7] += h;
}

static void sha256_init(sha256_ctx* c) {
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, h0, sizeof h0);
    c->len = 0;
    c->used = 0;
}

static void sha256_update(sha256_ctx* c, const void* data, size_t n) {
    const uint8_t* p = (const uint8_t*)data;
    c->len += n;
    while (n > 0) {
        const size_t take = 64 - c->used < n ? 64 - c->used : n;
        memcpy(c->buf + c->used, p, take);
        c->used += take;
        p += take;
        n -= take;
        if (c->used == 64) { sha256_block(c, c->buf); c->used = 0; }
    }
}

static void sha256_hex(sha256_ctx* c, char out[65]) {
    const uint64_t bits = c->len * 8;
    const uint8_t one = 0x80, zero = 0;
    sha256_update(c, &one, 1);
    while (c->used != 56) sha256_update(c, &zero, 1);
    uint8_t lenb[8];
    for (int i = 0; i < 8; i++) lenb[i] = (uint8_t)(bits >> (56 - 8 * i));
    sha256_update(c, lenb, 8);
    for (int i = 0; i < 8; i++) snprintf(out + 8 * i, 9, "%08x", c->h[i]);
}

/* A length-prefixed field, so concatenations cannot collide. */
static void sha256_field(sha256_ctx* c, const char* name, const void* data, size_t n) {
    char head[64];
    sha256_update(c, name, strlen(name) + 1);
    const int k = snprintf(head, sizeof head, "%zu", n);
    sha256_update(c, head, (size_t)k + 1);
    sha256_update(c, data, n);
}

/* ============================================================================================
 * 3. The driver
 * ============================================================================================ */

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;

enum { CU_OK = 0, CU_ERROR_STUB_LIBRARY = 34, CU_ERROR_NO_DEVICE = 100 };
enum { CU_ATTR_SM_COUNT = 16, CU_ATTR_CC_MAJOR = 75, CU_ATTR_CC_MINOR = 76, CU_ATTR_SMEM_OPTIN = 97 };
enum { CU_FUNC_ATTR_MAX_DYNAMIC_SMEM = 8 };

static struct {
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
} drv;

/* name for cuGetProcAddress (12.0 ABI), the versioned symbol for a plain dlsym, the slot. */
static const struct {
    const char* name;
    const char* symbol;
    size_t offset;
    int optional;
} drv_symbols[] = {
#define DRV(fn, sym, opt) {#fn, sym, offsetof(__typeof__(drv), fn), opt}
    DRV(cuInit, "cuInit", 0),
    DRV(cuDriverGetVersion, "cuDriverGetVersion", 0),
    DRV(cuDeviceGetCount, "cuDeviceGetCount", 0),
    DRV(cuDeviceGet, "cuDeviceGet", 0),
    DRV(cuDeviceGetAttribute, "cuDeviceGetAttribute", 0),
    DRV(cuDeviceGetName, "cuDeviceGetName", 0),
    DRV(cuDeviceGetUuid, "cuDeviceGetUuid_v2", 1),
    DRV(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 0),
    DRV(cuCtxPushCurrent, "cuCtxPushCurrent_v2", 0),
    DRV(cuCtxPopCurrent, "cuCtxPopCurrent_v2", 0),
    DRV(cuModuleLoadData, "cuModuleLoadData", 0),
    DRV(cuModuleUnload, "cuModuleUnload", 0),
    DRV(cuModuleGetFunction, "cuModuleGetFunction", 0),
    DRV(cuFuncSetAttribute, "cuFuncSetAttribute", 0),
    DRV(cuLaunchKernel, "cuLaunchKernel", 0),
    DRV(cuGetErrorName, "cuGetErrorName", 0),
    DRV(cuGetErrorString, "cuGetErrorString", 0),
#undef DRV
};

static pthread_once_t drv_once = PTHREAD_ONCE_INIT;
static int drv_ok = 0;
static int drv_version = 0;
static int drv_devices = 0;
static char drv_status[1024] = "not loaded";

static const char* cu_error(CUresult r) {
    static _Thread_local char buf[256];
    const char *name = NULL, *text = NULL;
    if (drv.cuGetErrorName) drv.cuGetErrorName(r, &name);
    if (drv.cuGetErrorString) drv.cuGetErrorString(r, &text);
    snprintf(buf, sizeof buf, "%s (%d): %s", name ? name : "CUDA error", r, text ? text : "");
    return buf;
}

static void driver_load(void) {
    if (env_flag("MMAEMU_DISABLE_CUDA")) {
        snprintf(drv_status, sizeof drv_status, "disabled by MMAEMU_DISABLE_CUDA=1");
        return;
    }
    const char* path = getenv("MMAEMU_LIBCUDA_PATH");
    if (!path || !*path) path = "libcuda.so.1";
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(drv_status, sizeof drv_status, "no NVIDIA driver: cannot load %s (%s)", path, dlerror());
        return;
    }
    typedef CUresult (*get_proc_fn)(const char*, void**, int, uint64_t, int*);
    get_proc_fn get_proc = (get_proc_fn)dlsym(h, "cuGetProcAddress_v2");
    for (size_t i = 0; i < sizeof drv_symbols / sizeof drv_symbols[0]; i++) {
        void* fn = NULL;
        int status = 0;
        if (get_proc && get_proc(drv_symbols[i].name, &fn, 12000, 0, &status) != CU_OK) fn = NULL;
        if (!fn) fn = dlsym(h, drv_symbols[i].symbol);
        if (!fn && !drv_symbols[i].optional) {
            snprintf(drv_status, sizeof drv_status, "the driver at %s lacks %s (too old?)", path, drv_symbols[i].name);
            return;
        }
        memcpy((char*)&drv + drv_symbols[i].offset, &fn, sizeof fn);
    }
    CUresult r = drv.cuInit(0);
    if (r == CU_ERROR_STUB_LIBRARY) {
        snprintf(drv_status, sizeof drv_status, "no NVIDIA driver: %s is the toolkit's stub library", path);
        return;
    }
    if (r == CU_ERROR_NO_DEVICE) {
        snprintf(drv_status, sizeof drv_status, "no CUDA device (cuInit: %s)", cu_error(r));
        return;
    }
    if (r != CU_OK) {
        snprintf(drv_status, sizeof drv_status, "cuInit failed: %s", cu_error(r));
        return;
    }
    drv.cuDriverGetVersion(&drv_version);
    if (drv.cuDeviceGetCount(&drv_devices) != CU_OK || drv_devices <= 0) {
        snprintf(drv_status, sizeof drv_status, "no CUDA device (driver %d.%d)", drv_version / 1000,
                 drv_version % 1000 / 10);
        drv_devices = 0;
        return;
    }
    drv_ok = 1;
    snprintf(drv_status, sizeof drv_status, "driver %d.%d (%s), %d device%s", drv_version / 1000,
             drv_version % 1000 / 10, path, drv_devices, drv_devices == 1 ? "" : "s");
}

static int driver_ready(void) {
    pthread_once(&drv_once, driver_load);
    if (!drv_ok) return fail(MM_ERR_UNAVAILABLE, "%s", drv_status);
    return MM_OK;
}

/* ============================================================================================
 * 4. NVRTC
 * ============================================================================================ */

typedef int nvrtcResult;
typedef struct _nvrtcProgram* nvrtcProgram;

static struct {
    nvrtcResult (*nvrtcVersion)(int*, int*);
    nvrtcResult (*nvrtcGetNumSupportedArchs)(int*);
    nvrtcResult (*nvrtcGetSupportedArchs)(int*);
    nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                                      const char* const*);
    nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram*);
    nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram, int, const char* const*);
    nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram, size_t*);
    nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram, char*);
    nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram, size_t*);
    nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram, char*);
    nvrtcResult (*nvrtcGetPTXSize)(nvrtcProgram, size_t*);
    nvrtcResult (*nvrtcGetPTX)(nvrtcProgram, char*);
    const char* (*nvrtcGetErrorString)(nvrtcResult);
} nvrtc;

static pthread_once_t nvrtc_once = PTHREAD_ONCE_INIT;
static int nvrtc_ok = 0;
static int nvrtc_version = 0;
static int nvrtc_archs[64];
static int nvrtc_narchs = 0;
static char nvrtc_status[2048] = "not loaded";

/* The directory holding this library (the installed mmaemu package). */
static void self_dir(char* out, size_t n) {
    Dl_info info;
    out[0] = 0;
    if (dladdr((void*)&mmaemu_cuda_status, &info) && info.dli_fname) {
        snprintf(out, n, "%s", info.dli_fname);
        char* slash = strrchr(out, '/');
        if (slash) *slash = 0;
        else snprintf(out, n, ".");
    }
}

/* site-packages of the running torch (where the nvidia-* wheels install), from libtorch's path. */
static void torch_site_packages(char* out, size_t n) {
    out[0] = 0;
    void* h = dlopen("libtorch_cpu.so", RTLD_NOW | RTLD_NOLOAD);
    if (!h) return;
    void* sym = dlsym(h, "aoti_torch_get_current_stream");
    if (!sym) sym = dlsym(h, "aoti_torch_get_data_ptr");
    Dl_info info;
    if (sym && dladdr(sym, &info) && info.dli_fname) {
        snprintf(out, n, "%s", info.dli_fname); /* .../site-packages/torch/lib/libtorch_cpu.so */
        for (int up = 0; up < 3; up++) {
            char* slash = strrchr(out, '/');
            if (!slash) { out[0] = 0; break; }
            *slash = 0;
        }
    }
    dlclose(h);
}

/* In dir, the file whose name starts with prefix (the highest major first: .so.13 before .so.12). */
static int find_lib(const char* dir, const char* prefix, char* out, size_t n) {
    DIR* d = opendir(dir);
    if (!d) return 0;
    char best[512] = "";
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
        if (strstr(e->d_name, ".alt.")) continue;
        if (!best[0] || strcmp(e->d_name, best) > 0) snprintf(best, sizeof best, "%s", e->d_name);
    }
    closedir(d);
    if (!best[0]) return 0;
    snprintf(out, n, "%s/%s", dir, best);
    return 1;
}

/* libnvrtc in dir: preload its libnvrtc-builtins by absolute path (libnvrtc.so.13 has no
 * RUNPATH and would not find it otherwise), then load it. */
static void* nvrtc_open_dir(const char* dir, char* where, size_t n) {
    char lib[1024], builtins[1024];
    if (!find_lib(dir, "libnvrtc.so.", lib, sizeof lib)) return NULL;
    if (find_lib(dir, "libnvrtc-builtins.so.", builtins, sizeof builtins)) dlopen(builtins, RTLD_NOW | RTLD_GLOBAL);
    void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (h) snprintf(where, n, "%s", lib);
    return h;
}

static void nvrtc_load(void) {
    char where[1024] = "", tried[1536] = "";
    void* h = NULL;
    if (env_flag("MMAEMU_DISABLE_NVRTC")) {
        snprintf(nvrtc_status, sizeof nvrtc_status, "disabled by MMAEMU_DISABLE_NVRTC=1");
        return;
    }
    const char* explicit_path = getenv("MMAEMU_NVRTC_PATH");
    if (explicit_path && *explicit_path) {
        if (dir_exists(explicit_path)) {
            h = nvrtc_open_dir(explicit_path, where, sizeof where);
        } else {
            char dir[1024];
            snprintf(dir, sizeof dir, "%s", explicit_path);
            char* slash = strrchr(dir, '/');
            if (slash) {
                char builtins[1024];
                *slash = 0;
                if (find_lib(dir, "libnvrtc-builtins.so.", builtins, sizeof builtins))
                    dlopen(builtins, RTLD_NOW | RTLD_GLOBAL);
            }
            h = dlopen(explicit_path, RTLD_NOW | RTLD_LOCAL);
            if (h) snprintf(where, sizeof where, "%s", explicit_path);
        }
        if (!h) {
            snprintf(nvrtc_status, sizeof nvrtc_status, "MMAEMU_NVRTC_PATH=%s: no loadable libnvrtc (%s)",
                     explicit_path, dlerror());
            return;
        }
    }
    /* already loaded by PyTorch or someone else */
    const char* sonames[] = {"libnvrtc.so.13", "libnvrtc.so.12"};
    for (int i = 0; !h && i < 2; i++) {
        h = dlopen(sonames[i], RTLD_NOW | RTLD_NOLOAD);
        if (h) snprintf(where, sizeof where, "%s (already loaded)", sonames[i]);
    }
    /* the nvidia-cuda-nvrtc wheels beside torch or beside this package, then the toolkit */
    if (!h) {
        char roots[3][1024], dirs[8][1100];
        int nd = 0;
        torch_site_packages(roots[0], sizeof roots[0]);
        self_dir(roots[1], sizeof roots[1]);
        if (roots[1][0]) strcat(roots[1], "/..");
        for (int r = 0; r < 2; r++) {
            if (!roots[r][0]) continue;
            snprintf(dirs[nd++], sizeof dirs[0], "%s/nvidia/cu13/lib", roots[r]);
            snprintf(dirs[nd++], sizeof dirs[0], "%s/nvidia/cuda_nvrtc/lib", roots[r]);
        }
        const char* home = getenv("CUDA_HOME");
        if (!home || !*home) home = getenv("CUDA_PATH");
        if (home && *home) snprintf(dirs[nd++], sizeof dirs[0], "%s/lib64", home);
        snprintf(dirs[nd++], sizeof dirs[0], "/usr/local/cuda/lib64");
        for (int i = 0; !h && i < nd; i++) {
            h = nvrtc_open_dir(dirs[i], where, sizeof where);
            if (!h && strlen(tried) + strlen(dirs[i]) + 4 < sizeof tried) {
                strcat(tried, tried[0] ? ", " : "");
                strcat(tried, dirs[i]);
            }
        }
    }
    for (int i = 0; !h && i < 2; i++) {
        h = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
        if (h) snprintf(where, sizeof where, "%s (library search path)", sonames[i]);
    }
    if (!h) {
        snprintf(nvrtc_status, sizeof nvrtc_status,
                 "NVRTC not found (set MMAEMU_NVRTC_PATH, or pip install nvidia-cuda-nvrtc; looked in %s)",
                 tried[0] ? tried : "no directory");
        return;
    }
#define NV(fn) *(void**)&nvrtc.fn = dlsym(h, #fn)
    NV(nvrtcVersion); NV(nvrtcGetNumSupportedArchs); NV(nvrtcGetSupportedArchs);
    NV(nvrtcCreateProgram); NV(nvrtcDestroyProgram); NV(nvrtcCompileProgram);
    NV(nvrtcGetProgramLogSize); NV(nvrtcGetProgramLog); NV(nvrtcGetCUBINSize); NV(nvrtcGetCUBIN);
    NV(nvrtcGetPTXSize); NV(nvrtcGetPTX); NV(nvrtcGetErrorString);
#undef NV
    if (!nvrtc.nvrtcVersion || !nvrtc.nvrtcCreateProgram || !nvrtc.nvrtcCompileProgram ||
        !nvrtc.nvrtcGetCUBIN || !nvrtc.nvrtcGetPTX || !nvrtc.nvrtcGetSupportedArchs) {
        snprintf(nvrtc_status, sizeof nvrtc_status, "%s lacks NVRTC entry points (NVRTC 11.2 or newer needed)", where);
        return;
    }
    int major = 0, minor = 0;
    nvrtc.nvrtcVersion(&major, &minor);
    nvrtc_version = major * 1000 + minor * 10;
    if (nvrtc.nvrtcGetNumSupportedArchs(&nvrtc_narchs) != 0 || nvrtc_narchs <= 0 || nvrtc_narchs > 64 ||
        nvrtc.nvrtcGetSupportedArchs(nvrtc_archs) != 0) {
        snprintf(nvrtc_status, sizeof nvrtc_status, "%s: cannot list its architectures", where);
        return;
    }
    nvrtc_ok = 1;
    snprintf(nvrtc_status, sizeof nvrtc_status, "NVRTC %d.%d at %s", major, minor, where);
}

static int nvrtc_ready(void) {
    pthread_once(&nvrtc_once, nvrtc_load);
    if (!nvrtc_ok) return fail(MM_ERR_UNAVAILABLE, "%s", nvrtc_status);
    return MM_OK;
}

/* ============================================================================================
 * 5. Kernel sources, fatbins and the cubin cache
 * ============================================================================================ */

enum { MOD_REFERENCE = 0, MOD_IEEE = 1, MOD_WGMMA = 2, MOD_COUNT = 3 };
static const char* const module_names[MOD_COUNT] = {"reference", "ieee", "wgmma"};

/* The shipped sources: mmaemu/kernels in an installed package; csrc/kernels of the checkout
 * when the package is used from a source tree (so an edited kernel is what NVRTC compiles). */
static void kernel_dir(char* out, size_t n) {
    char self[2048], probe[2200];
    self_dir(self, sizeof self);
    snprintf(probe, sizeof probe, "%s/../csrc/kernels/reference.cu", self);
    if (file_exists(probe)) snprintf(out, n, "%s/../csrc/kernels", self);
    else snprintf(out, n, "%s/kernels", self);
}

typedef struct {
    char* text[16];
    char* names[16];
    int count; /* [0] is the module's .cu, then every mmaemu_*.h (sorted) */
    char hash[65];
} sources;

static void sources_free(sources* s) {
    for (int i = 0; i < s->count; i++) { free(s->text[i]); free(s->names[i]); }
    s->count = 0;
}

static int cmp_str(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

/* Reads module.cu and the headers, and the source hash: SHA-256 over (name, length, bytes) of
 * each file in that order. setup.py stamps each fatbin with the same hash. */
static int sources_read(int mod, sources* s) {
    char dir[2300], path[2600];
    memset(s, 0, sizeof *s);
    kernel_dir(dir, sizeof dir);
    char* hdrs[15];
    int nh = 0;
    DIR* d = opendir(dir);
    if (!d) return fail(MM_ERR_UNAVAILABLE, "kernel sources not found (%s)", dir);
    struct dirent* e;
    while ((e = readdir(d)) != NULL && nh < 15) {
        const size_t L = strlen(e->d_name);
        if (strncmp(e->d_name, "mmaemu_", 7) == 0 && L > 2 && strcmp(e->d_name + L - 2, ".h") == 0)
            hdrs[nh++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(hdrs, (size_t)nh, sizeof hdrs[0], cmp_str);
    char cu[64];
    snprintf(cu, sizeof cu, "%s.cu", module_names[mod]);
    s->names[0] = strdup(cu);
    for (int i = 0; i < nh; i++) s->names[i + 1] = hdrs[i];
    s->count = nh + 1;
    sha256_ctx h;
    sha256_init(&h);
    for (int i = 0; i < s->count; i++) {
        size_t n = 0;
        snprintf(path, sizeof path, "%s/%s", dir, s->names[i]);
        s->text[i] = read_file(path, &n);
        if (!s->text[i]) {
            sources_free(s);
            return fail(MM_ERR_UNAVAILABLE, "cannot read kernel source %s", path);
        }
        sha256_field(&h, s->names[i], s->text[i], n);
    }
    sha256_hex(&h, s->hash);
    return MM_OK;
}

static void cache_dir(char* out, size_t n) {
    const char* d = getenv("MMAEMU_CACHE_DIR");
    if (d && *d) { snprintf(out, n, "%s", d); return; }
    const char* x = getenv("XDG_CACHE_HOME");
    if (x && *x) { snprintf(out, n, "%s/mmaemu", x); return; }
    const char* home = getenv("HOME");
    snprintf(out, n, "%s/.cache/mmaemu", home && *home ? home : "/tmp");
}

/* NVRTC: one module's sources -> a cubin (arch "sm_XY[a]") or PTX (arch "compute_XY").
 * --fmad=false keeps every fp32 a*b+c of the shared headers two IEEE operations, as in C. */
static int nvrtc_build(const sources* s, const char* arch, char** image, size_t* size, char* log, int logn) {
    int rc = nvrtc_ready();
    if (rc != MM_OK) { copy_str(log, logn, g_error); return rc; }
    char opt_arch[64];
    snprintf(opt_arch, sizeof opt_arch, "--gpu-architecture=%s", arch);
    const char* opts[] = {opt_arch, "--fmad=false", "--std=c++17", "-DMMAEMU_NVRTC=1"};
    nvrtcProgram prog = NULL;
    nvrtcResult r = nvrtc.nvrtcCreateProgram(&prog, s->text[0], s->names[0], s->count - 1,
                                             (const char* const*)s->text + 1, (const char* const*)s->names + 1);
    if (r != 0) {
        snprintf(log, (size_t)logn, "nvrtcCreateProgram: %s", nvrtc.nvrtcGetErrorString ? nvrtc.nvrtcGetErrorString(r) : "error");
        return MM_ERR_UNAVAILABLE;
    }
    r = nvrtc.nvrtcCompileProgram(prog, 4, opts);
    if (r != 0) {
        size_t ln = 0;
        char* text = NULL;
        if (nvrtc.nvrtcGetProgramLogSize && nvrtc.nvrtcGetProgramLogSize(prog, &ln) == 0 && ln > 0 &&
            (text = (char*)malloc(ln + 1)) != NULL && nvrtc.nvrtcGetProgramLog(prog, text) == 0) {
            text[ln] = 0;
            snprintf(log, (size_t)logn, "NVRTC could not compile %s for %s: %s", s->names[0], arch, text);
        } else {
            snprintf(log, (size_t)logn, "NVRTC could not compile %s for %s", s->names[0], arch);
        }
        free(text);
        nvrtc.nvrtcDestroyProgram(&prog);
        return MM_ERR_UNAVAILABLE;
    }
    const int ptx = strncmp(arch, "compute_", 8) == 0;
    size_t n = 0;
    r = ptx ? nvrtc.nvrtcGetPTXSize(prog, &n) : nvrtc.nvrtcGetCUBINSize(prog, &n);
    char* buf = r == 0 && n > 0 ? (char*)malloc(n) : NULL;
    if (!buf || (ptx ? nvrtc.nvrtcGetPTX(prog, buf) : nvrtc.nvrtcGetCUBIN(prog, buf)) != 0) {
        free(buf);
        nvrtc.nvrtcDestroyProgram(&prog);
        snprintf(log, (size_t)logn, "NVRTC produced no image for %s", arch);
        return MM_ERR_UNAVAILABLE;
    }
    nvrtc.nvrtcDestroyProgram(&prog);
    *image = buf;
    *size = n;
    return MM_OK;
}

/* The NVRTC target for a device: its own sm_XY when NVRTC knows it, else PTX for the newest
 * architecture NVRTC knows (the driver compiles it); wgmma needs exactly sm_90a. */
static int nvrtc_arch(int mod, int cc, char* out, size_t n) {
    int rc = nvrtc_ready();
    if (rc != MM_OK) return rc;
    int best = 0, has = 0;
    for (int i = 0; i < nvrtc_narchs; i++) {
        if (nvrtc_archs[i] == cc) has = 1;
        if (nvrtc_archs[i] <= cc && nvrtc_archs[i] > best) best = nvrtc_archs[i];
    }
    if (mod == MOD_WGMMA) {
        if (cc != 90 || !has) return fail(MM_ERR_UNAVAILABLE, "wgmma needs sm_90a (device sm_%d)", cc);
        snprintf(out, n, "sm_90a");
    } else if (has) {
        snprintf(out, n, "sm_%d", cc);
    } else if (best > 0) {
        snprintf(out, n, "compute_%d", best);
    } else {
        return fail(MM_ERR_UNAVAILABLE, "NVRTC %d supports no architecture up to sm_%d", nvrtc_version, cc);
    }
    return MM_OK;
}

/* ============================================================================================
 * 6. Devices and modules
 * ============================================================================================ */

typedef struct {
    int tried, ok;
    CUmodule module;
    char detail[1536]; /* how it was loaded, or why not */
    int via_nvrtc;
} module_state;

typedef struct {
    int tried, ok;
    char why[512];
    CUdevice dev;
    CUcontext ctx;
    int cc, sms, smem_optin;
    char name[256];
    char uuid[33];
    module_state mods[MOD_COUNT];
    CUfunction fns[16];
    int fn_tried[16];
    int fn_smem_set[16];
} device_state;

static device_state devices[MM_MAX_DEVICES];
static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;

static int ctx_push(device_state* d) {
    CUresult r = drv.cuCtxPushCurrent(d->ctx);
    return r == CU_OK ? MM_OK : fail(MM_ERR_UNAVAILABLE, "cuCtxPushCurrent: %s", cu_error(r));
}
static void ctx_pop(void) {
    CUcontext c;
    drv.cuCtxPopCurrent(&c);
}

/* Called with dev_lock held. */
static int device_get(int index, device_state** out) {
    int rc = driver_ready();
    if (rc != MM_OK) return rc;
    if (index < 0 || index >= drv_devices || index >= MM_MAX_DEVICES)
        return fail(MM_ERR_ARGUMENT, "CUDA device %d does not exist (%d visible)", index, drv_devices);
    device_state* d = &devices[index];
    if (!d->tried) {
        d->tried = 1;
        CUresult r;
        int major = 0, minor = 0;
        unsigned char uuid[16] = {0};
        if ((r = drv.cuDeviceGet(&d->dev, index)) != CU_OK ||
            (r = drv.cuDeviceGetAttribute(&major, CU_ATTR_CC_MAJOR, d->dev)) != CU_OK ||
            (r = drv.cuDeviceGetAttribute(&minor, CU_ATTR_CC_MINOR, d->dev)) != CU_OK ||
            (r = drv.cuDeviceGetAttribute(&d->sms, CU_ATTR_SM_COUNT, d->dev)) != CU_OK ||
            (r = drv.cuDeviceGetName(d->name, (int)sizeof d->name, d->dev)) != CU_OK ||
            (r = drv.cuDevicePrimaryCtxRetain(&d->ctx, d->dev)) != CU_OK) {
            snprintf(d->why, sizeof d->why, "CUDA device %d: %s", index, cu_error(r));
            return fail(MM_ERR_UNAVAILABLE, "%s", d->why);
        }
        if (drv.cuDeviceGetAttribute(&d->smem_optin, CU_ATTR_SMEM_OPTIN, d->dev) != CU_OK) d->smem_optin = 48 * 1024;
        if (drv.cuDeviceGetUuid && drv.cuDeviceGetUuid(uuid, d->dev) == CU_OK)
            for (int i = 0; i < 16; i++) snprintf(d->uuid + 2 * i, 3, "%02x", uuid[i]);
        d->cc = major * 10 + minor;
        d->ok = 1;
    }
    if (!d->ok) return fail(MM_ERR_UNAVAILABLE, "%s", d->why);
    *out = d;
    return MM_OK;
}

static int load_image(device_state* d, const void* image, CUmodule* mod, char* err, size_t n) {
    int rc = ctx_push(d);
    if (rc != MM_OK) { snprintf(err, n, "%s", g_error); return rc; }
    CUresult r = drv.cuModuleLoadData(mod, image);
    ctx_pop();
    if (r != CU_OK) { snprintf(err, n, "%s", cu_error(r)); return MM_ERR_UNAVAILABLE; }
    return MM_OK;
}

/* Loads a module on a device (dev_lock held): the shipped fatbin when it matches the sources,
 * else NVRTC (cubin cache first). */
static int module_get(device_state* d, int mod) {
    module_state* m = &d->mods[mod];
    if (m->tried) return m->ok ? MM_OK : fail(MM_ERR_UNAVAILABLE, "%s", m->detail);
    m->tried = 1;
    char notes[1024] = "", err[1024];
    sources src;
    const int have_src = sources_read(mod, &src) == MM_OK;
    if (!have_src) snprintf(notes, sizeof notes, "%s; ", g_error);

    /* 1. the fatbin built with the package */
    char self[2048], fatbin[2300], stamp_path[2400];
    const char* fatbin_dir = getenv("MMAEMU_FATBIN_DIR"); /* tests and tools; default: the package's */
    self_dir(self, sizeof self);
    if (fatbin_dir && *fatbin_dir) snprintf(fatbin, sizeof fatbin, "%s/%s.fatbin", fatbin_dir, module_names[mod]);
    else snprintf(fatbin, sizeof fatbin, "%s/_fatbin/%s.fatbin", self, module_names[mod]);
    snprintf(stamp_path, sizeof stamp_path, "%s.sha256", fatbin);
    if (env_flag("MMAEMU_FORCE_NVRTC")) {
        strcat(notes, "fatbin skipped (MMAEMU_FORCE_NVRTC=1); ");
    } else if (!file_exists(fatbin)) {
        strcat(notes, "no fatbin in this build; ");
    } else {
        char* stamp = read_file(stamp_path, NULL);
        const int stale = have_src && (!stamp || strncmp(stamp, src.hash, 64) != 0);
        free(stamp);
        char* image = stale ? NULL : read_file(fatbin, NULL);
        if (stale) {
            strcat(notes, "fatbin built from other sources (stale); ");
        } else if (image && load_image(d, image, &m->module, err, sizeof err) == MM_OK) {
            free(image);
            if (have_src) sources_free(&src);
            m->ok = 1;
            snprintf(m->detail, sizeof m->detail, "fatbin %s", fatbin);
            return MM_OK;
        } else {
            const size_t L = strlen(notes);
            snprintf(notes + L, sizeof notes - L, "fatbin not loadable on sm_%d (%s); ", d->cc, image ? err : "unreadable");
        }
        free(image);
    }

    /* 2. NVRTC, through the cache */
    char arch[32], cdir[2048], cpath[2400], key[65];
    int rc = have_src ? nvrtc_arch(mod, d->cc, arch, sizeof arch) : MM_ERR_UNAVAILABLE;
    if (rc != MM_OK) {
        snprintf(m->detail, sizeof m->detail, "%s%s", notes, g_error);
        if (have_src) sources_free(&src);
        return fail(MM_ERR_UNAVAILABLE, "%s", m->detail);
    }
    sha256_ctx h;
    sha256_init(&h);
    char ver[32];
    snprintf(ver, sizeof ver, "%d", nvrtc_version);
    sha256_field(&h, "kind", "mmaemu-nvrtc-1", 14);
    sha256_field(&h, "sources", src.hash, 64);
    sha256_field(&h, "nvrtc", ver, strlen(ver));
    sha256_field(&h, "arch", arch, strlen(arch));
    sha256_field(&h, "options", "--fmad=false --std=c++17 -DMMAEMU_NVRTC=1", 42);
    sha256_hex(&h, key);
    cache_dir(cdir, sizeof cdir);
    strcat(cdir, "/cubin");
    const int ptx = strncmp(arch, "compute_", 8) == 0;
    snprintf(cpath, sizeof cpath, "%s/%s-%s-%s.%s", cdir, module_names[mod], arch, key, ptx ? "ptx" : "cubin");
    size_t n = 0;
    char* image = read_file(cpath, &n);
    if (image) {
        if (load_image(d, image, &m->module, err, sizeof err) == MM_OK) {
            free(image);
            sources_free(&src);
            m->ok = m->via_nvrtc = 1;
            snprintf(m->detail, sizeof m->detail, "%sNVRTC %s (cached %s)", notes, arch, cpath);
            return MM_OK;
        }
        free(image);
        unlink(cpath); /* corrupt or from an incompatible driver: rebuild */
    }
    image = NULL;
    rc = nvrtc_build(&src, arch, &image, &n, err, sizeof err);
    sources_free(&src);
    if (rc != MM_OK) {
        snprintf(m->detail, sizeof m->detail, "%s%s", notes, err);
        return fail(MM_ERR_UNAVAILABLE, "%s", m->detail);
    }
    const char* cached = mkdir_p(cdir) == 0 && write_file_atomic(cpath, image, n) == 0 ? "cached" : "not cached: cache dir unwritable";
    rc = load_image(d, image, &m->module, err, sizeof err);
    free(image);
    if (rc != MM_OK) {
        snprintf(m->detail, sizeof m->detail, "%sNVRTC %s image not loadable: %s", notes, arch, err);
        return fail(MM_ERR_UNAVAILABLE, "%s", m->detail);
    }
    m->ok = m->via_nvrtc = 1;
    snprintf(m->detail, sizeof m->detail, "%sNVRTC %s (compiled, %s)", notes, arch, cached);
    return MM_OK;
}

/* ============================================================================================
 * 7. The kernels and the plans they accept
 * ============================================================================================ */

enum { KIND_REFERENCE, KIND_TILED, KIND_WGMMA };

typedef struct {
    const char* name;
    int module;
    const char* fn32; /* function for 32-product blocks (or any block: reference) */
    const char* fn16; /* function for 16-product blocks */
    const char* fn32_fast, *fn16_fast; /* separate fast-accumulation functions (wgmma), or NULL */
    int min_cc, only_cc, kind, tile;
} kernel_desc;

static const kernel_desc kernels[] = {
    {"reference", MOD_REFERENCE, "mmaemu_reference_gemm", "mmaemu_reference_gemm", NULL, NULL, 0, 0, KIND_REFERENCE, 0},
    {"cuda:h1", MOD_IEEE, "mmaemu_h1_gemm", NULL, NULL, NULL, 75, 0, KIND_TILED, 64},
    {"cuda:h4", MOD_IEEE, "mmaemu_h4_gemm", NULL, NULL, NULL, 80, 0, KIND_TILED, 64},
    {"cuda:v1", MOD_IEEE, NULL, "mmaemu_v1_gemm", NULL, NULL, 75, 0, KIND_TILED, 64},
    {"cuda:v4", MOD_IEEE, NULL, "mmaemu_v4_gemm", NULL, NULL, 80, 0, KIND_TILED, 64},
    {"cuda:wgmma", MOD_WGMMA, "mmaemu_wgmma_hopper_gemm", "mmaemu_wgmma_ada_gemm",
     "mmaemu_wgmma_hopper_fast_gemm", "mmaemu_wgmma_ada_fast_gemm", 90, 90, KIND_WGMMA, 128},
};
#define N_KERNELS ((int)(sizeof kernels / sizeof kernels[0]))
#define FN_SPLIT_REDUCE 15 /* slot of mmaemu_split_reduce in device_state.fns */
#define FN_FAST_BASE 12    /* slots of the fast-accumulation functions (wgmma only) */

static const kernel_desc* kernel_find(const char* name) {
    for (int i = 0; i < N_KERNELS; i++)
        if (strcmp(kernels[i].name, name) == 0) return &kernels[i];
    return NULL;
}

/* Whether the kernel can compute this plan exactly; why not in g_error. */
static int kernel_accepts(const kernel_desc* k, const mm_gemm* g) {
    if (k->kind == KIND_REFERENCE) return MM_OK;
    if (g->fmt_a != MM_FMT_E4M3 || g->fmt_b != MM_FMT_E4M3)
        return fail(MM_ERR_UNAVAILABLE, "%s computes E4M3 x E4M3 only", k->name);
    const mm_preset* p = &g->preset;
    const char* fn = p->block == 32 ? k->fn32 : p->block == 16 ? k->fn16 : NULL;
    if (!fn) return fail(MM_ERR_UNAVAILABLE, "%s has no kernel for %d-product blocks", k->name, (int)p->block);
    if (k->kind == KIND_TILED && (p->frac > 16 || p->keep > 24))
        return fail(MM_ERR_UNAVAILABLE, "%s needs frac <= 16 and keep <= 24 (got %d, %d)", k->name, (int)p->frac, (int)p->keep);
    if (k->kind == KIND_WGMMA) {
        if (p->frac != 13 || p->keep != 14)
            return fail(MM_ERR_UNAVAILABLE, "%s reproduces only the tensor core's own cut (frac 13, keep 14)", k->name);
        if (!g->fast_accum && p->block * p->promote_blocks != 128)
            return fail(MM_ERR_UNAVAILABLE, "%s promotes every 128 k (preset: %d)", k->name, (int)(p->block * p->promote_blocks));
    }
    if ((g->M + k->tile - 1) / k->tile > 65535)
        return fail(MM_ERR_UNAVAILABLE, "%s: M = %lld rows exceed its grid", k->name, (long long)g->M);
    if (g->splits > 1 && p->split_rr_tile > 0)
        return fail(MM_ERR_UNAVAILABLE, "%s computes contiguous split slices only (the preset deals %d-k tiles round-robin: the reference kernel computes it)", k->name, (int)p->split_rr_tile);
    return MM_OK;
}

static int kernel_on_device(const kernel_desc* k, const device_state* d) {
    if (k->only_cc && d->cc != k->only_cc)
        return fail(MM_ERR_UNAVAILABLE, "%s runs on sm_%d only (device %d: sm_%d)", k->name, k->only_cc, (int)(d - devices), d->cc);
    if (d->cc < k->min_cc)
        return fail(MM_ERR_UNAVAILABLE, "%s needs sm_%d or newer (device %d: sm_%d)", k->name, k->min_cc, (int)(d - devices), d->cc);
    if (k->kind == KIND_WGMMA && d->smem_optin < MM_WGMMA_SMEM_BYTES)
        return fail(MM_ERR_UNAVAILABLE, "%s needs %d bytes of shared memory per block", k->name, MM_WGMMA_SMEM_BYTES);
    return MM_OK;
}

/* A function of a loaded module (dev_lock held). */
static int function_get(device_state* d, int mod, const char* fn, int slot, CUfunction* out) {
    int rc = module_get(d, mod);
    if (rc != MM_OK) return rc;
    if (!d->fn_tried[slot]) {
        d->fn_tried[slot] = 1;
        CUresult r = drv.cuModuleGetFunction(&d->fns[slot], d->mods[mod].module, fn);
        if (r != CU_OK) {
            d->fns[slot] = NULL;
            return fail(MM_ERR_UNAVAILABLE, "%s not in module %s: %s", fn, module_names[mod], cu_error(r));
        }
    }
    if (!d->fns[slot]) return fail(MM_ERR_UNAVAILABLE, "%s not in module %s", fn, module_names[mod]);
    *out = d->fns[slot];
    return MM_OK;
}

static int kernel_slot(const kernel_desc* k, int block, int fast) {
    if (fast && k->fn32_fast) return FN_FAST_BASE + (block == 16);
    return (int)(k - kernels) * 2 + (block == 16);
}

static const char* kernel_function(const kernel_desc* k, int block, int fast) {
    if (fast && k->fn32_fast) return block == 16 ? k->fn16_fast : k->fn32_fast;
    return block == 16 ? k->fn16 : k->fn32;
}

/* Everything a launch of kernel k for plan g needs, loading what is missing (dev_lock held). */
static int kernel_prepare(const kernel_desc* k, const mm_gemm* g, device_state* d, CUfunction* fn,
                          CUfunction* reduce) {
    int rc;
    if ((rc = kernel_on_device(k, d)) != MM_OK || (rc = kernel_accepts(k, g)) != MM_OK) return rc;
    const int block = k->kind == KIND_REFERENCE ? 32 : (int)g->preset.block;
    const char* name = kernel_function(k, block, g->fast_accum != 0);
    const int slot = kernel_slot(k, block, g->fast_accum != 0);
    if ((rc = function_get(d, k->module, name, slot, fn)) != MM_OK) return rc;
    if (k->kind == KIND_WGMMA && !d->fn_smem_set[slot]) {
        if ((rc = ctx_push(d)) != MM_OK) return rc;
        CUresult r = drv.cuFuncSetAttribute(*fn, CU_FUNC_ATTR_MAX_DYNAMIC_SMEM, MM_WGMMA_SMEM_BYTES);
        ctx_pop();
        if (r != CU_OK) return fail(MM_ERR_UNAVAILABLE, "%s: cannot allow %d bytes of shared memory: %s", k->name, MM_WGMMA_SMEM_BYTES, cu_error(r));
        d->fn_smem_set[slot] = 1;
    }
    if (reduce && k->kind != KIND_REFERENCE && g->splits > 1)
        return function_get(d, MOD_REFERENCE, "mmaemu_split_reduce", FN_SPLIT_REDUCE, reduce);
    return MM_OK;
}

/* "auto" / "cuda" / a kernel name -> the kernel to run (dev_lock held). */
static int kernel_choose(const char* backend, const mm_gemm* g, device_state* d, const kernel_desc** out) {
    if (strcmp(backend, "auto") != 0 && strcmp(backend, "cuda") != 0) {
        const kernel_desc* k = kernel_find(backend);
        if (!k) return fail(MM_ERR_ARGUMENT, "unknown CUDA backend '%s'", backend);
        int rc = kernel_prepare(k, g, d, &(CUfunction){0}, NULL);
        if (rc != MM_OK) return rc;
        *out = k;
        return MM_OK;
    }
    /* the IEEE-exact kernels, fastest first; gated kernels only when named */
    static const char* const order[] = {"cuda:h4", "cuda:v4", "cuda:h1", "cuda:v1", "reference"};
    char why[2048] = "";
    for (int i = 0; i < 5; i++) {
        const kernel_desc* k = kernel_find(order[i]);
        if (k->kind == KIND_REFERENCE && strcmp(backend, "cuda") == 0) break;
        if (kernel_prepare(k, g, d, &(CUfunction){0}, NULL) == MM_OK) { *out = k; return MM_OK; }
        const size_t L = strlen(why);
        snprintf(why + L, sizeof why - L, "%s%s", L ? "; " : "", g_error);
    }
    return fail(MM_ERR_UNAVAILABLE, "no CUDA kernel for this plan: %s", why);
}

/* ============================================================================================
 * 8. PyTorch's current stream
 * ============================================================================================ */

typedef int32_t (*aoti_cuda_stream_fn)(int32_t, void**);
typedef int32_t (*aoti_stream_fn)(int32_t, void**);
typedef int32_t (*aoti_native_fn)(void*, void**);
typedef int32_t (*aoti_delete_fn)(void*);

static pthread_once_t stream_once = PTHREAD_ONCE_INIT;
static aoti_cuda_stream_fn get_cuda_stream = NULL;
static aoti_stream_fn get_stream = NULL;
static aoti_native_fn stream_native = NULL;
static aoti_delete_fn stream_delete = NULL;

static void stream_api_load(void) {
    /* libtorch_cuda's AOTI shim (every CUDA build of torch); not linked: CPU torch has none */
    void* h = dlopen("libtorch_cuda.so", RTLD_NOW | RTLD_NOLOAD);
    if (h) get_cuda_stream = (aoti_cuda_stream_fn)dlsym(h, "aoti_torch_get_current_cuda_stream");
    /* torch >= 2.13: the device-generic stream of libtorch_cpu and its native handle */
    void* c = dlopen("libtorch_cpu.so", RTLD_NOW | RTLD_NOLOAD);
    if (c) {
        get_stream = (aoti_stream_fn)dlsym(c, "aoti_torch_get_current_stream");
        stream_native = (aoti_native_fn)dlsym(c, "torch_stream_native_handle");
        stream_delete = (aoti_delete_fn)dlsym(c, "aoti_torch_delete_stream");
    }
}

static int current_stream(int device, CUstream* out) {
    pthread_once(&stream_once, stream_api_load);
    void* s = NULL;
    if (get_cuda_stream) {
        if (get_cuda_stream(device, &s) == 0) { *out = (CUstream)s; return MM_OK; }
    }
    if (get_stream && stream_native && stream_delete) {
        void* handle = NULL;
        if (get_stream(device, &handle) == 0 && handle) {
            const int32_t r = stream_native(handle, &s);
            stream_delete(handle);
            if (r == 0) { *out = (CUstream)s; return MM_OK; }
        }
    }
    return fail(MM_ERR_UNAVAILABLE, "PyTorch's current CUDA stream is not reachable (no libtorch_cuda.so "
                                    "with aoti_torch_get_current_cuda_stream in this process)");
}

/* ============================================================================================
 * 9. Launch
 * ============================================================================================ */

static int launch(device_state* d, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned smem,
                  CUstream stream, mm_launch* p) {
    void* params[] = {p};
    CUresult r = drv.cuLaunchKernel(f, gx, gy, gz, 256, 1, 1, smem, stream, params, NULL);
    (void)d;
    return r == CU_OK ? MM_OK : fail(MM_ERR_UNAVAILABLE, "cuLaunchKernel: %s", cu_error(r));
}

static unsigned elementwise_grid(const device_state* d, int64_t total) {
    int64_t blocks = (total + 255) / 256, cap = (int64_t)d->sms * 32;
    if (blocks > cap) blocks = cap;
    return (unsigned)(blocks < 1 ? 1 : blocks);
}

static int64_t workspace_bytes(const kernel_desc* k, const mm_gemm* g) {
    if (k->kind == KIND_REFERENCE || g->splits <= 1) return 0;
    return (int64_t)g->splits * g->M * g->N * (int64_t)sizeof(float);
}

static int run(const mm_cuda_call* call, const char* backend) {
    const mm_gemm* g = &call->g;
    int rc = mmaemu_gemm_check(g);
    if (rc != MM_OK) return fail(rc, "%s", mmaemu_error_string(rc));
    if (g->M == 0 || g->N == 0) return MM_OK;
    CUstream stream = (CUstream)call->stream;
    if (!stream && (rc = current_stream(call->device, &stream)) != MM_OK) return rc;

    pthread_mutex_lock(&dev_lock);
    device_state* d = NULL;
    const kernel_desc* k = NULL;
    CUfunction fn = NULL, reduce = NULL;
    if ((rc = device_get(call->device, &d)) == MM_OK && (rc = kernel_choose(backend, g, d, &k)) == MM_OK)
        rc = kernel_prepare(k, g, d, &fn, &reduce);
    pthread_mutex_unlock(&dev_lock);
    if (rc != MM_OK) return rc;

    const int64_t ws = workspace_bytes(k, g);
    if (ws > 0 && !call->workspace)
        return fail(MM_ERR_ARGUMENT, "%s needs a %lld-byte device workspace for %d splits", k->name, (long long)ws, (int)g->splits);

    mm_launch p;
    memset(&p, 0, sizeof p);
    p.g = *g;
    p.scale_a_ptr = call->scale_a;
    p.scale_b_ptr = call->scale_b;
    p.scale_result_ptr = call->scale_result;
    p.partials = (float*)call->workspace;
    p.chunk = mm_split_chunk(g->K, g->splits > 0 ? g->splits : 1);
    if (g->out_kind == MM_OUT_ACC) p.scale_a_ptr = p.scale_b_ptr = p.scale_result_ptr = NULL;

    if ((rc = ctx_push(d)) != MM_OK) return rc;
    if (k->kind == KIND_REFERENCE) {
        rc = launch(d, fn, elementwise_grid(d, g->M * g->N), 1, 1, 0, stream, &p);
    } else {
        const unsigned gx = (unsigned)((g->N + k->tile - 1) / k->tile), gy = (unsigned)((g->M + k->tile - 1) / k->tile);
        const unsigned gz = (unsigned)(g->splits < 65535 ? g->splits : 65535);
        rc = launch(d, fn, gx, gy, gz, k->kind == KIND_WGMMA ? MM_WGMMA_SMEM_BYTES : 0, stream, &p);
        if (rc == MM_OK && g->splits > 1) rc = launch(d, reduce, elementwise_grid(d, g->M * g->N), 1, 1, 0, stream, &p);
    }
    ctx_pop();
    return rc;
}

/* ============================================================================================
 * 10. The public functions
 * ============================================================================================ */

int mmaemu_cuda_gemm_ex(const mm_cuda_call* call, const char* backend) {
    if (!call || !backend) return fail(MM_ERR_ARGUMENT, "no plan");
    return run(call, backend);
}

int mmaemu_cuda_gemm(const mm_gemm* g, const char* backend, int device) {
    if (!g) return fail(MM_ERR_ARGUMENT, "no plan");
    mm_cuda_call call;
    memset(&call, 0, sizeof call);
    call.g = *g;
    call.device = device;
    return run(&call, backend ? backend : "auto");
}

int mmaemu_cuda_resolve(const mm_gemm* g, const char* backend, int device, char* name, int n) {
    if (!g || !backend) return fail(MM_ERR_ARGUMENT, "no plan");
    int rc = mmaemu_gemm_check(g);
    if (rc != MM_OK) return fail(rc, "%s", mmaemu_error_string(rc));
    pthread_mutex_lock(&dev_lock);
    device_state* d = NULL;
    const kernel_desc* k = NULL;
    if ((rc = device_get(device, &d)) == MM_OK) rc = kernel_choose(backend, g, d, &k);
    pthread_mutex_unlock(&dev_lock);
    if (rc == MM_OK) copy_str(name, n, k->name);
    return rc;
}

int mmaemu_cuda_workspace_bytes(const mm_gemm* g, const char* backend, int device, int64_t* bytes) {
    char name[64];
    *bytes = 0;
    int rc = mmaemu_cuda_resolve(g, backend, device, name, sizeof name);
    if (rc == MM_OK) *bytes = workspace_bytes(kernel_find(name), g);
    return rc;
}

const char* mmaemu_cuda_last_error(void) { return g_error[0] ? g_error : "no error"; }

const char* mmaemu_cuda_status(void) {
    pthread_once(&drv_once, driver_load);
    return drv_status;
}

int mmaemu_cuda_driver_ok(void) { return driver_ready() == MM_OK; }

int mmaemu_cuda_device_count(void) { return driver_ready() == MM_OK ? drv_devices : 0; }

int mmaemu_cuda_device_info(int device, char* name, int name_len, int* cc_major, int* cc_minor,
                            int* sm_count, int* driver_version, char* uuid_hex33) {
    pthread_mutex_lock(&dev_lock);
    device_state* d = NULL;
    int rc = device_get(device, &d);
    if (rc == MM_OK) {
        copy_str(name, name_len, d->name);
        if (cc_major) *cc_major = d->cc / 10;
        if (cc_minor) *cc_minor = d->cc % 10;
        if (sm_count) *sm_count = d->sms;
        if (driver_version) *driver_version = drv_version;
        copy_str(uuid_hex33, 33, d->uuid);
    }
    pthread_mutex_unlock(&dev_lock);
    return rc;
}

int mmaemu_cuda_kernel_check(int device, const char* kernel, char* detail, int n) {
    const kernel_desc* k = kernel ? kernel_find(kernel) : NULL;
    if (!k) {
        copy_str(detail, n, "unknown kernel");
        return fail(MM_ERR_ARGUMENT, "unknown kernel '%s'", kernel ? kernel : "");
    }
    pthread_mutex_lock(&dev_lock);
    device_state* d = NULL;
    int rc = device_get(device, &d);
    if (rc == MM_OK) rc = kernel_on_device(k, d);
    CUfunction f;
    if (rc == MM_OK) rc = function_get(d, k->module, k->fn32 ? k->fn32 : k->fn16, kernel_slot(k, k->fn32 ? 32 : 16, 0), &f);
    if (rc == MM_OK) copy_str(detail, n, d->mods[k->module].detail);
    else copy_str(detail, n, g_error);
    pthread_mutex_unlock(&dev_lock);
    return rc;
}

int mmaemu_cuda_nvrtc_compile(const char* module, const char* arch, char* detail, int n, int64_t* bytes) {
    int mod = -1;
    for (int i = 0; i < MOD_COUNT; i++)
        if (module && strcmp(module, module_names[i]) == 0) mod = i;
    if (mod < 0 || !arch) {
        copy_str(detail, n, "unknown module");
        return fail(MM_ERR_ARGUMENT, "unknown module '%s'", module ? module : "");
    }
    sources src;
    int rc = sources_read(mod, &src);
    if (rc != MM_OK) { copy_str(detail, n, g_error); return rc; }
    char* image = NULL;
    size_t size = 0;
    char log[8192];
    rc = nvrtc_build(&src, arch, &image, &size, log, sizeof log);
    sources_free(&src);
    free(image);
    if (bytes) *bytes = rc == MM_OK ? (int64_t)size : 0;
    copy_str(detail, n, rc == MM_OK ? nvrtc_status : log);
    if (rc != MM_OK) fail(rc, "%s", log);
    return rc;
}

const char* mmaemu_cuda_nvrtc_status(int* version) {
    pthread_once(&nvrtc_once, nvrtc_load);
    if (version) *version = nvrtc_version;
    return nvrtc_status;
}
