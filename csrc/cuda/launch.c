/* launch.c: one GEMM on the device with the kernel the caller names: the kernel over its
 * grid (grid.z = the split slices), then for split plans of the tiled kernels the reduction of
 * the partials in the scheme's order (mmaemu_split_reduce), both on the caller's stream. */
#include <string.h>

#include "internal.h"
#include "kernels/mmaemu_launch.h"

enum { THREADS = 256 };

static int launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned smem, CUstream stream,
                  mm_launch* p) {
    void* params[] = {p};
    CUresult r = mm_cu_drv.cuLaunchKernel(f, gx, gy, gz, THREADS, 1, 1, smem, stream, params, NULL);
    return r == CU_OK ? MM_OK : mm_cu_fail(MM_ERR_UNAVAILABLE, "cuLaunchKernel: %s", mm_cu_error(r));
}

/* One thread per output element, at most 32 blocks per SM (the threads loop). */
static unsigned elementwise_grid(const mm_cu_device* d, int64_t total) {
    int64_t blocks = (total + THREADS - 1) / THREADS, cap = (int64_t)d->sms * 32;
    if (blocks > cap) blocks = cap;
    return (unsigned)(blocks < 1 ? 1 : blocks);
}

static const mm_cuda_kernel* find(const char* kernel) {
    const mm_cuda_kernel* k = kernel ? mm_cu_kernel_find(kernel) : NULL;
    if (!k) mm_cu_fail(MM_ERR_ARGUMENT, "unknown CUDA backend '%s' (the loader runs the kernel it is named: one of its table)", kernel ? kernel : "");
    return k;
}

int mmaemu_cuda_workspace_bytes(const mm_gemm* g, const char* kernel, int device, int64_t* bytes) {
    *bytes = 0;
    if (!g) return mm_cu_fail(MM_ERR_ARGUMENT, "no plan");
    const mm_cuda_kernel* k = find(kernel);
    if (!k) return MM_ERR_ARGUMENT;
    int rc = mmaemu_gemm_check(g);
    if (rc != MM_OK) return mm_cu_fail(rc, "%s", mmaemu_error_string(rc));
    pthread_mutex_lock(&mm_cu_dev_lock);
    mm_cu_device* d = NULL;
    CUfunction fn = NULL;
    if ((rc = mm_cu_device_get(device, &d)) == MM_OK) rc = mm_cu_kernel_prepare(k, g, d, &fn, NULL);
    pthread_mutex_unlock(&mm_cu_dev_lock);
    if (rc == MM_OK) *bytes = mm_cu_workspace_bytes(k, g);
    return rc;
}

int mmaemu_cuda_gemm_ex(const mm_cuda_call* call, const char* kernel) {
    if (!call) return mm_cu_fail(MM_ERR_ARGUMENT, "no plan");
    const mm_cuda_kernel* k = find(kernel);
    if (!k) return MM_ERR_ARGUMENT;
    const mm_gemm* g = &call->g;
    int rc = mmaemu_gemm_check(g);
    if (rc != MM_OK) return mm_cu_fail(rc, "%s", mmaemu_error_string(rc));
    if (g->M == 0 || g->N == 0) return MM_OK;
    CUstream stream = (CUstream)call->stream;

    pthread_mutex_lock(&mm_cu_dev_lock);
    mm_cu_device* d = NULL;
    CUfunction fn = NULL, reduce = NULL;
    if ((rc = mm_cu_device_get(call->device, &d)) == MM_OK) rc = mm_cu_kernel_prepare(k, g, d, &fn, &reduce);
    pthread_mutex_unlock(&mm_cu_dev_lock);
    if (rc != MM_OK) return rc;

    const int64_t ws = mm_cu_workspace_bytes(k, g);
    if (ws > 0 && !call->workspace)
        return mm_cu_fail(MM_ERR_ARGUMENT, "%s needs a %lld-byte device workspace for %d splits", k->name, (long long)ws, (int)g->splits);

    mm_launch p;
    memset(&p, 0, sizeof p);
    p.g = *g;
    p.scale_a_ptr = call->scale_a;
    p.scale_b_ptr = call->scale_b;
    p.scale_result_ptr = call->scale_result;
    p.partials = (float*)call->workspace;
    p.chunk = mm_split_chunk(g->K, g->splits > 0 ? g->splits : 1);
    if (g->out_kind == MM_OUT_ACC) p.scale_a_ptr = p.scale_b_ptr = p.scale_result_ptr = NULL;

    if ((rc = mm_cu_ctx_push(d)) != MM_OK) return rc;
    if (k->kind == MM_KERNEL_REFERENCE) {
        rc = launch(fn, elementwise_grid(d, g->M * g->N), 1, 1, 0, stream, &p);
    } else {
        const unsigned gx = (unsigned)((g->N + k->tile - 1) / k->tile), gy = (unsigned)((g->M + k->tile - 1) / k->tile);
        const unsigned gz = (unsigned)(g->splits < 65535 ? g->splits : 65535);
        rc = launch(fn, gx, gy, gz, (unsigned)k->smem_bytes, stream, &p);
        if (rc == MM_OK && g->splits > 1) rc = launch(reduce, elementwise_grid(d, g->M * g->N), 1, 1, 0, stream, &p);
    }
    mm_cu_ctx_pop();
    return rc;
}
