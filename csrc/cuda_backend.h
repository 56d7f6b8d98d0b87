/* cuda_backend.h: the CUDA side of the C core, reached through the driver API at run time.
 * Nothing here links against CUDA: the extension builds against CPU-only torch. */
#ifndef MMAEMU_CUDA_BACKEND_H
#define MMAEMU_CUDA_BACKEND_H

#include "mmaemu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs g (device pointers) on CUDA device `device` with the named backend
 * ("auto", "reference", "cuda", "cuda:h4", ...). Returns MM_OK or an error code. */
int mmaemu_cuda_gemm(const mm_gemm* g, const char* backend, int device);

/* The last CUDA error of this thread, in words. */
const char* mmaemu_cuda_last_error(void);

/* One line on the loader's state (driver found or why not). */
const char* mmaemu_cuda_status(void);

#ifdef __cplusplus
}
#endif

#endif /* MMAEMU_CUDA_BACKEND_H */
