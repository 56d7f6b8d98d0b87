/* fake_libcuda.c: a stand-in for libcuda.so.1 that test/test_cuda_loader.py builds and points
 * MMAEMU_LIBCUDA_PATH at. FAKE_CUDA_MODE: ok, stub (cuInit says stub library) or nodevice;
 * FAKE_CUDA_CC: the device's compute capability; FAKE_CUDA_REJECT_FATBIN: refuse fatbin images.
 * Module loads and kernel launches are logged to FAKE_CUDA_LOG instead of running. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef int CUresult;
static const char* mode(void) { const char* m = getenv("FAKE_CUDA_MODE"); return m ? m : "ok"; }
static int cc(void) { const char* c = getenv("FAKE_CUDA_CC"); return c ? atoi(c) : 89; }
static void logline(const char* fmt, ...) {
    const char* p = getenv("FAKE_CUDA_LOG");
    if (!p) return;
    FILE* f = fopen(p, "a");
    if (!f) return;
    va_list ap; va_start(ap, fmt); vfprintf(f, fmt, ap); va_end(ap);
    fputc('\n', f); fclose(f);
}
__attribute__((constructor)) static void loaded(void) { logline("loaded"); }
CUresult cuInit(unsigned flags) {
    (void)flags;
    if (!strcmp(mode(), "stub")) return 34;
    if (!strcmp(mode(), "nodevice")) return 100;
    return 0;
}
CUresult cuDriverGetVersion(int* v) { *v = 13000; return 0; }
CUresult cuDeviceGetCount(int* n) { *n = 1; return 0; }
CUresult cuDeviceGet(int* d, int i) { *d = i; return i == 0 ? 0 : 101; }
CUresult cuDeviceGetAttribute(int* v, int attr, int d) {
    (void)d;
    switch (attr) {
    case 75: *v = cc() / 10; break;
    case 76: *v = cc() % 10; break;
    case 16: *v = 24; break;
    case 97: *v = cc() == 90 ? 232448 : 101376; break;
    default: *v = 0;
    }
    return 0;
}
CUresult cuDeviceGetName(char* s, int n, int d) { (void)d; snprintf(s, n, "Fake GPU sm_%d", cc()); return 0; }
CUresult cuDeviceGetUuid_v2(unsigned char* u, int d) { (void)d; memset(u, 0xab, 16); return 0; }
static int the_ctx;
CUresult cuDevicePrimaryCtxRetain(void** c, int d) { (void)d; *c = &the_ctx; return 0; }
CUresult cuCtxPushCurrent_v2(const void* c) { return c == &the_ctx ? 0 : 201; }
CUresult cuCtxPopCurrent_v2(void** c) { *c = &the_ctx; return 0; }
CUresult cuModuleLoadData(void** m, const void* image) {
    const unsigned char* p = (const unsigned char*)image;
    if (p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F') { logline("load cubin"); *m = (void*)1; return 0; }
    if (p[0] == 0x50 && p[1] == 0xED && p[2] == 0x55 && p[3] == 0xBA) {
        if (getenv("FAKE_CUDA_REJECT_FATBIN")) return 209;
        logline("load fatbin"); *m = (void*)2; return 0;
    }
    if (strstr((const char*)image, ".version")) { logline("load ptx"); *m = (void*)3; return 0; }
    return 200;
}
CUresult cuModuleUnload(void* m) { (void)m; return 0; }
CUresult cuModuleGetFunction(void** f, void* m, const char* name) { (void)m; *f = strdup(name); return 0; }
CUresult cuFuncSetAttribute(void* f, int a, int v) { logline("attr %s %d %d", (const char*)f, a, v); return 0; }
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned smem, void* stream, void** params, void** extra) {
    (void)params; (void)extra;
    logline("launch %s grid %u %u %u block %u %u %u smem %u stream %p", (const char*)f, gx, gy, gz,
            bx, by, bz, smem, stream);
    return 0;
}
CUresult cuGetErrorName(CUresult r, const char** s) { (void)r; *s = "CUDA_ERROR_FAKE"; return 0; }
CUresult cuGetErrorString(CUresult r, const char** s) { (void)r; *s = "fake driver error"; return 0; }
static const struct { const char* name; void* fn; } procs[] = {
    {"cuInit", (void*)cuInit}, {"cuDriverGetVersion", (void*)cuDriverGetVersion},
    {"cuDeviceGetCount", (void*)cuDeviceGetCount}, {"cuDeviceGet", (void*)cuDeviceGet},
    {"cuDeviceGetAttribute", (void*)cuDeviceGetAttribute}, {"cuDeviceGetName", (void*)cuDeviceGetName},
    {"cuDeviceGetUuid", (void*)cuDeviceGetUuid_v2}, {"cuDevicePrimaryCtxRetain", (void*)cuDevicePrimaryCtxRetain},
    {"cuCtxPushCurrent", (void*)cuCtxPushCurrent_v2}, {"cuCtxPopCurrent", (void*)cuCtxPopCurrent_v2},
    {"cuModuleLoadData", (void*)cuModuleLoadData}, {"cuModuleUnload", (void*)cuModuleUnload},
    {"cuModuleGetFunction", (void*)cuModuleGetFunction}, {"cuFuncSetAttribute", (void*)cuFuncSetAttribute},
    {"cuLaunchKernel", (void*)cuLaunchKernel}, {"cuGetErrorName", (void*)cuGetErrorName},
    {"cuGetErrorString", (void*)cuGetErrorString},
};
CUresult cuGetProcAddress_v2(const char* name, void** fn, int version, unsigned long long flags, int* status) {
    (void)flags;
    *fn = NULL;
    if (version < 12000) return 1;
    for (unsigned i = 0; i < sizeof procs / sizeof procs[0]; i++)
        if (!strcmp(procs[i].name, name)) { *fn = procs[i].fn; if (status) *status = 0; return 0; }
    if (status) *status = 1;
    return 500;
}
