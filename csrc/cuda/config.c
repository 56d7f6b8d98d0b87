/* config.c: what the caller told the loader (mmaemu_cuda_configure): where the kernel sources,
 * fatbins and cubin cache are, where the driver and NVRTC may be, and what not to load. The
 * loader reads no environment variable: the caller passes every setting here. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

mm_cu_settings mm_cu_config;
static pthread_mutex_t config_lock = PTHREAD_MUTEX_INITIALIZER;

static int set_str(char* dst, size_t n, const char* src, const char* what) {
    if (src && strlen(src) >= n) return mm_cu_fail(MM_ERR_ARGUMENT, "%s too long: %s", what, src);
    snprintf(dst, n, "%s", src ? src : "");
    return MM_OK;
}

int mmaemu_cuda_configure(const mm_cuda_config* c) {
    if (!c) return mm_cu_fail(MM_ERR_ARGUMENT, "no configuration");
    mm_cu_settings* s = &mm_cu_config;
    pthread_mutex_lock(&config_lock);
    int rc = set_str(s->kernel_dir, sizeof s->kernel_dir, c->kernel_dir, "directory name");
    if (rc == MM_OK) rc = set_str(s->fatbin_dir, sizeof s->fatbin_dir, c->fatbin_dir, "directory name");
    if (rc == MM_OK) rc = set_str(s->cache_dir, sizeof s->cache_dir, c->cache_dir, "directory name");
    if (rc == MM_OK) rc = set_str(s->libcuda_path, sizeof s->libcuda_path, c->libcuda_path, "libcuda path");
    if (rc == MM_OK) rc = set_str(s->nvrtc_path, sizeof s->nvrtc_path, c->nvrtc_path, "NVRTC path");
    if (rc == MM_OK) {
        /* the first MM_CU_MAX_LIB_DIRS that fit: the caller lists the most specific places first */
        s->n_library_dirs = 0;
        for (int i = 0; i < c->n_library_dirs && s->n_library_dirs < MM_CU_MAX_LIB_DIRS; i++)
            if (c->library_dirs[i] && strlen(c->library_dirs[i]) < MM_CU_LIB_DIR_LEN)
                snprintf(s->library_dirs[s->n_library_dirs++], MM_CU_LIB_DIR_LEN, "%s", c->library_dirs[i]);
        s->force_nvrtc = c->force_nvrtc != 0;
        s->disable_nvrtc = c->disable_nvrtc != 0;
        s->disable_cuda = c->disable_cuda != 0;
    }
    pthread_mutex_unlock(&config_lock);
    return rc;
}
