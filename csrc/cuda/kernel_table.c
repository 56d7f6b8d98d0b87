/* kernel_table.c: the CUDA kernels, once: the table below is every fact about a kernel that the
 * loader or the Python layer uses (mmaemu/runtime/registry.py builds its registry from it
 * through mmaemu._C.kernel_table()), the plans each kernel computes exactly, and its functions on a
 * device. Which kernel runs is the caller's choice; nothing here picks one. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation" /* messages are cut to their buffers on purpose */
#endif

static const mm_cuda_kernel kernels[] = {
    {.name = "reference", .module = "reference", .kind = MM_KERNEL_REFERENCE,
     .presets = {"hopper", "ada", "b200"}, .min_cc = 0, .exact = 1, .round_robin_splits = 1,
     .functions = {.block32 = "mmaemu_reference_gemm"},
     .description = "the scalar C model: every format, preset and split plan; on the tensors' device"},
    {.name = "cuda:h1", .module = "ieee", .kind = MM_KERNEL_TILED, .presets = {"hopper"},
     .min_cc = 75, .exact = 1, .tile = 64, .functions = {.block32 = "mmaemu_h1_gemm"},
     .description = "IEEE-exact tiled kernel (register-prefetched loads), hopper preset, E4M3 x E4M3"},
    {.name = "cuda:h4", .module = "ieee", .kind = MM_KERNEL_TILED, .presets = {"hopper"},
     .min_cc = 80, .exact = 1, .tile = 64, .functions = {.block32 = "mmaemu_h4_gemm"},
     .description = "IEEE-exact tiled kernel (cp.async pipeline, packed exponents), hopper preset, E4M3 x E4M3"},
    {.name = "cuda:v1", .module = "ieee", .kind = MM_KERNEL_TILED, .presets = {"ada"},
     .min_cc = 75, .exact = 1, .tile = 64, .functions = {.block16 = "mmaemu_v1_gemm"},
     .description = "IEEE-exact tiled kernel (register-prefetched loads), ada preset, E4M3 x E4M3"},
    {.name = "cuda:v4", .module = "ieee", .kind = MM_KERNEL_TILED, .presets = {"ada"},
     .min_cc = 80, .exact = 1, .tile = 64, .functions = {.block16 = "mmaemu_v4_gemm"},
     .description = "IEEE-exact tiled kernel (cp.async pipeline, packed exponents), ada preset, E4M3 x E4M3"},
    /* wgmma.mma_async exists on sm_90a only; 134144 bytes is kSmemBytes of kernels/wgmma.cu */
    {.name = "cuda:wgmma", .module = "wgmma", .kind = MM_KERNEL_WGMMA, .presets = {"hopper", "ada"},
     .min_cc = 90, .only_cc = 90, .gated = 1, .exact = 0, .tile = 128, .smem_bytes = 134144,
     .functions = {.block32 = "mmaemu_wgmma_hopper_gemm", .block16 = "mmaemu_wgmma_ada_gemm",
                   .block32_fast = "mmaemu_wgmma_hopper_fast_gemm", .block16_fast = "mmaemu_wgmma_ada_fast_gemm"},
     .description = "gated tensor-core kernel: FP8 wgmma in mmaemu's schedule (sm_90a), E4M3 x E4M3"},
};
enum { N_KERNELS = (int)(sizeof kernels / sizeof kernels[0]) };

int mmaemu_cuda_kernel_count(void) { return N_KERNELS; }

const mm_cuda_kernel* mmaemu_cuda_kernel_at(int i) { return i >= 0 && i < N_KERNELS ? &kernels[i] : NULL; }

int mmaemu_cuda_kernel_block(const mm_cuda_kernel* k) {
    if (k->kind == MM_KERNEL_REFERENCE || (k->functions.block32 && k->functions.block16)) return 0;
    return k->functions.block32 ? 32 : 16;
}

const mm_cuda_kernel* mm_cu_kernel_find(const char* name) {
    for (int i = 0; i < N_KERNELS; i++)
        if (strcmp(kernels[i].name, name) == 0) return &kernels[i];
    return NULL;
}

/* Whether the kernel can compute this plan exactly; why not in the error text. */
static int kernel_accepts(const mm_cuda_kernel* k, const mm_gemm* g) {
    if (k->kind == MM_KERNEL_REFERENCE) return MM_OK;
    if (g->fmt_a != MM_FMT_E4M3 || g->fmt_b != MM_FMT_E4M3)
        return mm_cu_fail(MM_ERR_UNAVAILABLE, "%s computes E4M3 x E4M3 only", k->name);
    const mm_preset* p = &g->preset;
    const char* fn = p->block == 32 ? k->functions.block32 : p->block == 16 ? k->functions.block16 : NULL;
    if (!fn) return mm_cu_fail(MM_ERR_UNAVAILABLE, "%s has no kernel for %d-product blocks", k->name, (int)p->block);
    if (k->kind == MM_KERNEL_TILED && (p->frac > 16 || p->keep > 24))
        return mm_cu_fail(MM_ERR_UNAVAILABLE, "%s needs frac <= 16 and keep <= 24 (got %d, %d)", k->name, (int)p->frac, (int)p->keep);
    if (k->kind == MM_KERNEL_WGMMA) {
        if (p->frac != 13 || p->keep != 14)
            return mm_cu_fail(MM_ERR_UNAVAILABLE, "%s reproduces only the tensor core's own cut (frac 13, keep 14)", k->name);
        if (!g->fast_accum && p->promote_k != 128)
            return mm_cu_fail(MM_ERR_UNAVAILABLE, "%s promotes every 128 k (preset: %d)", k->name, (int)p->promote_k);
    }
    if ((g->M + k->tile - 1) / k->tile > 65535)
        return mm_cu_fail(MM_ERR_UNAVAILABLE, "%s: M = %lld rows exceed its grid", k->name, (long long)g->M);
    if (g->splits > 1 && p->split_rr_tile > 0 && !k->round_robin_splits)
        return mm_cu_fail(MM_ERR_UNAVAILABLE, "%s computes contiguous split slices only (the preset deals %d-k tiles round-robin: the reference kernel computes it)", k->name, (int)p->split_rr_tile);
    return MM_OK;
}

static int kernel_on_device(const mm_cuda_kernel* k, const mm_cu_device* d) {
    if (k->only_cc && d->cc != k->only_cc)
        return mm_cu_fail(MM_ERR_UNAVAILABLE, "%s runs on sm_%d only (device %d: sm_%d)", k->name, k->only_cc, d->index, d->cc);
    if (d->cc < k->min_cc)
        return mm_cu_fail(MM_ERR_UNAVAILABLE, "%s needs sm_%d or newer (device %d: sm_%d)", k->name, k->min_cc, d->index, d->cc);
    if (k->smem_bytes > d->smem_optin)
        return mm_cu_fail(MM_ERR_UNAVAILABLE, "%s needs %d bytes of shared memory per block", k->name, k->smem_bytes);
    return MM_OK;
}

/* The function for a block size and accumulation mode: its name and its handle on d. */
static int kernel_function(const mm_cuda_kernel* k, mm_cu_device* d, int block, int fast,
                           const char** name, mm_cu_function** handle) {
    if (!d->handles && !(d->handles = (mm_cu_kernel_handles*)calloc(N_KERNELS, sizeof *d->handles)))
        return mm_cu_fail(MM_ERR_NO_MEMORY, "no memory for the kernel handles");
    mm_cu_kernel_handles* h = &d->handles[k - kernels];
    const mm_kernel_functions* f = &k->functions;
    if (k->kind == MM_KERNEL_REFERENCE || block == 32) {
        const int own_fast = fast && f->block32_fast;
        *name = own_fast ? f->block32_fast : f->block32;
        *handle = own_fast ? &h->block32_fast : &h->block32;
    } else {
        const int own_fast = fast && f->block16_fast;
        *name = own_fast ? f->block16_fast : f->block16;
        *handle = own_fast ? &h->block16_fast : &h->block16;
    }
    return MM_OK;
}

int mm_cu_kernel_prepare(const mm_cuda_kernel* k, const mm_gemm* g, mm_cu_device* d, CUfunction* fn,
                         CUfunction* reduce) {
    int rc;
    if ((rc = kernel_on_device(k, d)) != MM_OK || (rc = kernel_accepts(k, g)) != MM_OK) return rc;
    const char* name = NULL;
    mm_cu_function* f = NULL;
    const int mod = mm_cu_module_id(k->module);
    if ((rc = kernel_function(k, d, (int)g->preset.block, g->fast_accum != 0, &name, &f)) != MM_OK ||
        (rc = mm_cu_function_get(d, mod, name, f)) != MM_OK)
        return rc;
    if (k->smem_bytes > 0 && !f->smem_set) {
        if ((rc = mm_cu_ctx_push(d)) != MM_OK) return rc;
        CUresult r = mm_cu_drv.cuFuncSetAttribute(f->fn, CU_FUNC_ATTR_MAX_DYNAMIC_SMEM, k->smem_bytes);
        mm_cu_ctx_pop();
        if (r != CU_OK) return mm_cu_fail(MM_ERR_UNAVAILABLE, "%s: cannot allow %d bytes of shared memory: %s", k->name, k->smem_bytes, mm_cu_error(r));
        f->smem_set = 1;
    }
    *fn = f->fn;
    if (reduce && k->kind != MM_KERNEL_REFERENCE && g->splits > 1) {
        if ((rc = mm_cu_function_get(d, MM_MOD_REFERENCE, "mmaemu_split_reduce", &d->split_reduce)) != MM_OK) return rc;
        *reduce = d->split_reduce.fn;
    }
    return MM_OK;
}

int64_t mm_cu_workspace_bytes(const mm_cuda_kernel* k, const mm_gemm* g) {
    if (k->kind == MM_KERNEL_REFERENCE || g->splits <= 1) return 0;
    return (int64_t)g->splits * g->M * g->N * (int64_t)sizeof(float);
}

int mmaemu_cuda_kernel_check(int device, const char* kernel, char* detail, int n) {
    const mm_cuda_kernel* k = kernel ? mm_cu_kernel_find(kernel) : NULL;
    if (!k) {
        mm_cu_copy_str(detail, n, "unknown kernel");
        return mm_cu_fail(MM_ERR_ARGUMENT, "unknown kernel '%s'", kernel ? kernel : "");
    }
    pthread_mutex_lock(&mm_cu_dev_lock);
    mm_cu_device* d = NULL;
    const char* name = NULL;
    mm_cu_function* f = NULL;
    const int mod = mm_cu_module_id(k->module);
    int rc = mm_cu_device_get(device, &d);
    if (rc == MM_OK) rc = kernel_on_device(k, d);
    if (rc == MM_OK) rc = kernel_function(k, d, k->functions.block32 ? 32 : 16, 0, &name, &f);
    if (rc == MM_OK) rc = mm_cu_function_get(d, mod, name, f);
    mm_cu_copy_str(detail, n, rc == MM_OK ? d->mods[mod].detail : mm_cu_error_text());
    pthread_mutex_unlock(&mm_cu_dev_lock);
    return rc;
}
