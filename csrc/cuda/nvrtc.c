/* nvrtc.c: NVRTC, loaded at run time from the path the caller configured (MMAEMU_NVRTC_PATH), a
 * copy already in the process, or the directories the caller configured (the nvidia-* wheels,
 * the toolkit), and the compile of one module's sources for one architecture. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation" /* messages are cut to their buffers on purpose */
#endif

/* --fmad=false keeps every fp32 a*b+c of the shared headers two IEEE operations, as in C. */
const char* const mm_cu_nvrtc_options[MM_CU_NVRTC_OPTIONS] = {"--fmad=false", "--std=c++17", "-DMMAEMU_NVRTC=1"};

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
    if (mm_cu_config.disable_nvrtc) { /* the caller's MMAEMU_DISABLE_NVRTC */
        snprintf(nvrtc_status, sizeof nvrtc_status, "disabled by MMAEMU_DISABLE_NVRTC=1");
        return;
    }
    const char* explicit_path = mm_cu_config.nvrtc_path; /* the caller's MMAEMU_NVRTC_PATH */
    if (*explicit_path) {
        if (mm_cu_dir_exists(explicit_path)) {
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
    /* the directories the caller named (the nvidia-* wheels, the toolkit) */
    for (int i = 0; !h && i < mm_cu_config.n_library_dirs; i++) {
        const char* dir = mm_cu_config.library_dirs[i];
        h = nvrtc_open_dir(dir, where, sizeof where);
        if (!h && strlen(tried) + strlen(dir) + 4 < sizeof tried) {
            strcat(tried, tried[0] ? ", " : "");
            strcat(tried, dir);
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

int mm_cu_nvrtc_ready(void) {
    pthread_once(&nvrtc_once, nvrtc_load);
    if (!nvrtc_ok) return mm_cu_fail(MM_ERR_UNAVAILABLE, "%s", nvrtc_status);
    return MM_OK;
}

/* NVRTC: one module's sources -> a cubin (arch "sm_XY[a]") or PTX (arch "compute_XY").
 * --fmad=false keeps every fp32 a*b+c of the shared headers two IEEE operations, as in C. */
int mm_cu_nvrtc_build(const mm_cu_sources* s, const char* arch, char** image, size_t* size, char* log, int logn) {
    int rc = mm_cu_nvrtc_ready();
    if (rc != MM_OK) { mm_cu_copy_str(log, logn, mm_cu_error_text()); return rc; }
    char opt_arch[64];
    snprintf(opt_arch, sizeof opt_arch, "--gpu-architecture=%s", arch);
    const char* opts[1 + MM_CU_NVRTC_OPTIONS] = {opt_arch};
    for (int i = 0; i < MM_CU_NVRTC_OPTIONS; i++) opts[1 + i] = mm_cu_nvrtc_options[i];
    nvrtcProgram prog = NULL;
    nvrtcResult r = nvrtc.nvrtcCreateProgram(&prog, s->text[0], s->names[0], s->count - 1,
                                             (const char* const*)s->text + 1, (const char* const*)s->names + 1);
    if (r != 0) {
        snprintf(log, (size_t)logn, "nvrtcCreateProgram: %s", nvrtc.nvrtcGetErrorString ? nvrtc.nvrtcGetErrorString(r) : "error");
        return MM_ERR_UNAVAILABLE;
    }
    r = nvrtc.nvrtcCompileProgram(prog, 1 + MM_CU_NVRTC_OPTIONS, opts);
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
int mm_cu_nvrtc_arch(int mod, int cc, char* out, size_t n) {
    int rc = mm_cu_nvrtc_ready();
    if (rc != MM_OK) return rc;
    int best = 0, has = 0;
    for (int i = 0; i < nvrtc_narchs; i++) {
        if (nvrtc_archs[i] == cc) has = 1;
        if (nvrtc_archs[i] <= cc && nvrtc_archs[i] > best) best = nvrtc_archs[i];
    }
    if (mod == MM_MOD_WGMMA) {
        if (cc != 90 || !has) return mm_cu_fail(MM_ERR_UNAVAILABLE, "wgmma needs sm_90a (device sm_%d)", cc);
        snprintf(out, n, "sm_90a");
    } else if (has) {
        snprintf(out, n, "sm_%d", cc);
    } else if (best > 0) {
        snprintf(out, n, "compute_%d", best);
    } else {
        return mm_cu_fail(MM_ERR_UNAVAILABLE, "NVRTC %d supports no architecture up to sm_%d", nvrtc_version, cc);
    }
    return MM_OK;
}

const char* mmaemu_cuda_nvrtc_status(int* version) {
    pthread_once(&nvrtc_once, nvrtc_load);
    if (version) *version = nvrtc_version;
    return nvrtc_status;
}

int mm_cu_nvrtc_version(void) { return nvrtc_version; }
