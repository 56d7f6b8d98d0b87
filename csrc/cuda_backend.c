/* cuda_backend.c: placeholder until the driver-API loader lands: reports the CUDA backend as
 * unavailable, so CUDA tensors get a clear error instead of wrong bits. */
#include "cuda_backend.h"

int mmaemu_cuda_gemm(const mm_gemm* g, const char* backend, int device) {
    (void)g; (void)backend; (void)device;
    return MM_ERR_UNAVAILABLE;
}

const char* mmaemu_cuda_last_error(void) { return "the CUDA backend is not part of this build"; }

const char* mmaemu_cuda_status(void) { return "not built"; }
