/* driver.c: libcuda.so.1 (dlopen, entry points by cuGetProcAddress), devices and their
 * primary contexts. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation" /* messages are cut to their buffers on purpose */
#endif

#define MM_MAX_DEVICES 64

enum { CU_ERROR_STUB_LIBRARY = 34, CU_ERROR_NO_DEVICE = 100 };
enum { CU_ATTR_SM_COUNT = 16, CU_ATTR_CC_MAJOR = 75, CU_ATTR_CC_MINOR = 76, CU_ATTR_SMEM_OPTIN = 97 };

mm_cu_driver mm_cu_drv;
pthread_mutex_t mm_cu_dev_lock = PTHREAD_MUTEX_INITIALIZER;

/* name for cuGetProcAddress (12.0 ABI), the versioned symbol for a plain dlsym, the slot. */
static const struct {
    const char* name;
    const char* symbol;
    size_t offset;
    int optional;
} drv_symbols[] = {
#define DRV(fn, sym, opt) {#fn, sym, offsetof(mm_cu_driver, fn), opt}
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

const char* mm_cu_error(CUresult r) {
    static _Thread_local char buf[256];
    const char *name = NULL, *text = NULL;
    if (mm_cu_drv.cuGetErrorName) mm_cu_drv.cuGetErrorName(r, &name);
    if (mm_cu_drv.cuGetErrorString) mm_cu_drv.cuGetErrorString(r, &text);
    snprintf(buf, sizeof buf, "%s (%d): %s", name ? name : "CUDA error", r, text ? text : "");
    return buf;
}

static void driver_load(void) {
    if (mm_cu_config.disable_cuda) { /* the caller's MMAEMU_DISABLE_CUDA */
        snprintf(drv_status, sizeof drv_status, "disabled by MMAEMU_DISABLE_CUDA=1");
        return;
    }
    const char* path = mm_cu_config.libcuda_path[0] ? mm_cu_config.libcuda_path : "libcuda.so.1";
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
        memcpy((char*)&mm_cu_drv + drv_symbols[i].offset, &fn, sizeof fn);
    }
    CUresult r = mm_cu_drv.cuInit(0);
    if (r == CU_ERROR_STUB_LIBRARY) {
        snprintf(drv_status, sizeof drv_status, "no NVIDIA driver: %s is the toolkit's stub library", path);
        return;
    }
    if (r == CU_ERROR_NO_DEVICE) {
        snprintf(drv_status, sizeof drv_status, "no CUDA device (cuInit: %s)", mm_cu_error(r));
        return;
    }
    if (r != CU_OK) {
        snprintf(drv_status, sizeof drv_status, "cuInit failed: %s", mm_cu_error(r));
        return;
    }
    mm_cu_drv.cuDriverGetVersion(&drv_version);
    if (mm_cu_drv.cuDeviceGetCount(&drv_devices) != CU_OK || drv_devices <= 0) {
        snprintf(drv_status, sizeof drv_status, "no CUDA device (driver %d.%d)", drv_version / 1000,
                 drv_version % 1000 / 10);
        drv_devices = 0;
        return;
    }
    drv_ok = 1;
    snprintf(drv_status, sizeof drv_status, "driver %d.%d (%s), %d device%s", drv_version / 1000,
             drv_version % 1000 / 10, path, drv_devices, drv_devices == 1 ? "" : "s");
}

int mm_cu_driver_ready(void) {
    pthread_once(&drv_once, driver_load);
    if (!drv_ok) return mm_cu_fail(MM_ERR_UNAVAILABLE, "%s", drv_status);
    return MM_OK;
}

static mm_cu_device devices[MM_MAX_DEVICES];

int mm_cu_ctx_push(const mm_cu_device* d) {
    CUresult r = mm_cu_drv.cuCtxPushCurrent(d->ctx);
    return r == CU_OK ? MM_OK : mm_cu_fail(MM_ERR_UNAVAILABLE, "cuCtxPushCurrent: %s", mm_cu_error(r));
}
void mm_cu_ctx_pop(void) {
    CUcontext c;
    mm_cu_drv.cuCtxPopCurrent(&c);
}

int mm_cu_device_get(int index, mm_cu_device** out) {
    int rc = mm_cu_driver_ready();
    if (rc != MM_OK) return rc;
    if (index < 0 || index >= drv_devices || index >= MM_MAX_DEVICES)
        return mm_cu_fail(MM_ERR_ARGUMENT, "CUDA device %d does not exist (%d visible)", index, drv_devices);
    mm_cu_device* d = &devices[index];
    if (!d->tried) {
        d->tried = 1;
        d->index = index;
        CUresult r;
        int major = 0, minor = 0;
        unsigned char uuid[16] = {0};
        if ((r = mm_cu_drv.cuDeviceGet(&d->dev, index)) != CU_OK ||
            (r = mm_cu_drv.cuDeviceGetAttribute(&major, CU_ATTR_CC_MAJOR, d->dev)) != CU_OK ||
            (r = mm_cu_drv.cuDeviceGetAttribute(&minor, CU_ATTR_CC_MINOR, d->dev)) != CU_OK ||
            (r = mm_cu_drv.cuDeviceGetAttribute(&d->sms, CU_ATTR_SM_COUNT, d->dev)) != CU_OK ||
            (r = mm_cu_drv.cuDeviceGetName(d->name, (int)sizeof d->name, d->dev)) != CU_OK ||
            (r = mm_cu_drv.cuDevicePrimaryCtxRetain(&d->ctx, d->dev)) != CU_OK) {
            snprintf(d->why, sizeof d->why, "CUDA device %d: %s", index, mm_cu_error(r));
            return mm_cu_fail(MM_ERR_UNAVAILABLE, "%s", d->why);
        }
        if (mm_cu_drv.cuDeviceGetAttribute(&d->smem_optin, CU_ATTR_SMEM_OPTIN, d->dev) != CU_OK) d->smem_optin = 48 * 1024;
        if (mm_cu_drv.cuDeviceGetUuid && mm_cu_drv.cuDeviceGetUuid(uuid, d->dev) == CU_OK)
            for (int i = 0; i < 16; i++) snprintf(d->uuid + 2 * i, 3, "%02x", uuid[i]);
        d->cc = major * 10 + minor;
        d->ok = 1;
    }
    if (!d->ok) return mm_cu_fail(MM_ERR_UNAVAILABLE, "%s", d->why);
    *out = d;
    return MM_OK;
}


int mm_cu_driver_version(void) { return drv_version; }

const char* mmaemu_cuda_status(void) {
    pthread_once(&drv_once, driver_load);
    return drv_status;
}

int mmaemu_cuda_device_count(void) { return mm_cu_driver_ready() == MM_OK ? drv_devices : 0; }

int mmaemu_cuda_device_info(int device, char* name, int name_len, int* cc_major, int* cc_minor,
                            int* sm_count, int* driver_version, char* uuid_hex33) {
    pthread_mutex_lock(&mm_cu_dev_lock);
    mm_cu_device* d = NULL;
    int rc = mm_cu_device_get(device, &d);
    if (rc == MM_OK) {
        mm_cu_copy_str(name, name_len, d->name);
        if (cc_major) *cc_major = d->cc / 10;
        if (cc_minor) *cc_minor = d->cc % 10;
        if (sm_count) *sm_count = d->sms;
        if (driver_version) *driver_version = drv_version;
        mm_cu_copy_str(uuid_hex33, 33, d->uuid);
    }
    pthread_mutex_unlock(&mm_cu_dev_lock);
    return rc;
}
