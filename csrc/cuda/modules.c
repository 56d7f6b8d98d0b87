/* modules.c: the kernel modules on a device. Each module ("reference", "ieee", "wgmma") is
 * one shipped .cu with the shared mmaemu_*.h headers; it is loaded from the fatbin built with
 * the package when the fatbin's stamp matches the sources, else compiled by NVRTC for the
 * device, through a cubin cache keyed by the sources, NVRTC's version, the target and the
 * options. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "sha256.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation" /* messages are cut to their buffers on purpose */
#endif

const char* const mm_cu_module_names[MM_MOD_COUNT] = {"reference", "ieee", "wgmma"};

int mm_cu_module_id(const char* name) {
    for (int i = 0; i < MM_MOD_COUNT; i++)
        if (strcmp(name, mm_cu_module_names[i]) == 0) return i;
    return -1;
}

void mm_cu_sources_free(mm_cu_sources* s) {
    for (int i = 0; i < s->count; i++) { free(s->text[i]); free(s->names[i]); }
    s->count = 0;
}

static int cmp_str(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

/* Reads module.cu and the headers, and the source hash: SHA-256 over (name, length, bytes) of
 * each file in that order. setup.py stamps each fatbin with the same hash. */
int mm_cu_sources_read(int mod, mm_cu_sources* s) {
    char path[2600];
    const char* dir = mm_cu_config.kernel_dir;
    memset(s, 0, sizeof *s);
    if (!dir[0]) return mm_cu_fail(MM_ERR_UNAVAILABLE, "kernel sources not configured (mmaemu_cuda_configure)");
    char* hdrs[15];
    int nh = 0;
    DIR* d = opendir(dir);
    if (!d) return mm_cu_fail(MM_ERR_UNAVAILABLE, "kernel sources not found (%s)", dir);
    struct dirent* e;
    while ((e = readdir(d)) != NULL && nh < 15) {
        const size_t L = strlen(e->d_name);
        if (strncmp(e->d_name, "mmaemu_", 7) == 0 && L > 2 && strcmp(e->d_name + L - 2, ".h") == 0)
            hdrs[nh++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(hdrs, (size_t)nh, sizeof hdrs[0], cmp_str);
    char cu[64];
    snprintf(cu, sizeof cu, "%s.cu", mm_cu_module_names[mod]);
    s->names[0] = strdup(cu);
    for (int i = 0; i < nh; i++) s->names[i + 1] = hdrs[i];
    s->count = nh + 1;
    mm_sha256 h;
    mm_sha256_init(&h);
    for (int i = 0; i < s->count; i++) {
        size_t n = 0;
        snprintf(path, sizeof path, "%s/%s", dir, s->names[i]);
        s->text[i] = mm_cu_read_file(path, &n);
        if (!s->text[i]) {
            mm_cu_sources_free(s);
            return mm_cu_fail(MM_ERR_UNAVAILABLE, "cannot read kernel source %s", path);
        }
        mm_sha256_field(&h, s->names[i], s->text[i], n);
    }
    mm_sha256_hex(&h, s->hash);
    return MM_OK;
}

static int load_image(const mm_cu_device* d, const void* image, CUmodule* mod, char* err, size_t n) {
    int rc = mm_cu_ctx_push(d);
    if (rc != MM_OK) { snprintf(err, n, "%s", mm_cu_error_text()); return rc; }
    CUresult r = mm_cu_drv.cuModuleLoadData(mod, image);
    mm_cu_ctx_pop();
    if (r != CU_OK) { snprintf(err, n, "%s", mm_cu_error(r)); return MM_ERR_UNAVAILABLE; }
    return MM_OK;
}

/* Loads a module on a device (mm_cu_dev_lock held): the shipped fatbin when it matches the sources,
 * else NVRTC (cubin cache first). */
int mm_cu_module_get(mm_cu_device* d, int mod) {
    mm_cu_module* m = &d->mods[mod];
    if (m->tried) return m->ok ? MM_OK : mm_cu_fail(MM_ERR_UNAVAILABLE, "%s", m->detail);
    m->tried = 1;
    char notes[1024] = "", err[1024];
    mm_cu_sources src;
    const int have_src = mm_cu_sources_read(mod, &src) == MM_OK;
    if (!have_src) snprintf(notes, sizeof notes, "%s; ", mm_cu_error_text());

    /* 1. the fatbin built with the package */
    char fatbin[2300], stamp_path[2400];
    snprintf(fatbin, sizeof fatbin, "%s/%s.fatbin", mm_cu_config.fatbin_dir, mm_cu_module_names[mod]);
    snprintf(stamp_path, sizeof stamp_path, "%s.sha256", fatbin);
    if (mm_cu_config.force_nvrtc) { /* the caller's MMAEMU_FORCE_NVRTC */
        strcat(notes, "fatbin skipped (MMAEMU_FORCE_NVRTC=1); ");
    } else if (!mm_cu_config.fatbin_dir[0] || !mm_cu_file_exists(fatbin)) {
        strcat(notes, "no fatbin in this build; ");
    } else {
        char* stamp = mm_cu_read_file(stamp_path, NULL);
        const int stale = have_src && (!stamp || strncmp(stamp, src.hash, 64) != 0);
        free(stamp);
        char* image = stale ? NULL : mm_cu_read_file(fatbin, NULL);
        if (stale) {
            strcat(notes, "fatbin built from other sources (stale); ");
        } else if (image && load_image(d, image, &m->module, err, sizeof err) == MM_OK) {
            free(image);
            if (have_src) mm_cu_sources_free(&src);
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
    char arch[32], cdir[2100], cpath[2400], key[65];
    int rc = have_src ? mm_cu_nvrtc_arch(mod, d->cc, arch, sizeof arch) : MM_ERR_UNAVAILABLE;
    if (rc != MM_OK) {
        snprintf(m->detail, sizeof m->detail, "%s%s", notes, mm_cu_error_text());
        if (have_src) mm_cu_sources_free(&src);
        return mm_cu_fail(MM_ERR_UNAVAILABLE, "%s", m->detail);
    }
    mm_sha256 h;
    mm_sha256_init(&h);
    char ver[32];
    snprintf(ver, sizeof ver, "%d", mm_cu_nvrtc_version());
    mm_sha256_field(&h, "kind", "mmaemu-nvrtc-1", 14);
    mm_sha256_field(&h, "sources", src.hash, 64);
    mm_sha256_field(&h, "nvrtc", ver, strlen(ver));
    mm_sha256_field(&h, "arch", arch, strlen(arch));
    char options[256] = "";
    for (int i = 0; i < MM_CU_NVRTC_OPTIONS; i++) {
        const size_t L = strlen(options);
        snprintf(options + L, sizeof options - L, "%s%s", i ? " " : "", mm_cu_nvrtc_options[i]);
    }
    mm_sha256_field(&h, "options", options, strlen(options));
    mm_sha256_hex(&h, key);
    snprintf(cdir, sizeof cdir, "%s/cubin", mm_cu_config.cache_dir[0] ? mm_cu_config.cache_dir : ".");
    const int ptx = strncmp(arch, "compute_", 8) == 0;
    snprintf(cpath, sizeof cpath, "%s/%s-%s-%s.%s", cdir, mm_cu_module_names[mod], arch, key, ptx ? "ptx" : "cubin");
    size_t n = 0;
    char* image = mm_cu_read_file(cpath, &n);
    if (image) {
        if (load_image(d, image, &m->module, err, sizeof err) == MM_OK) {
            free(image);
            mm_cu_sources_free(&src);
            m->ok = 1;
            snprintf(m->detail, sizeof m->detail, "%sNVRTC %s (cached %s)", notes, arch, cpath);
            return MM_OK;
        }
        free(image);
        unlink(cpath); /* corrupt or from an incompatible driver: rebuild */
    }
    image = NULL;
    rc = mm_cu_nvrtc_build(&src, arch, &image, &n, err, sizeof err);
    mm_cu_sources_free(&src);
    if (rc != MM_OK) {
        snprintf(m->detail, sizeof m->detail, "%s%s", notes, err);
        return mm_cu_fail(MM_ERR_UNAVAILABLE, "%s", m->detail);
    }
    const char* cached = mm_cu_mkdir_p(cdir) == 0 && mm_cu_write_file_atomic(cpath, image, n) == 0 ? "cached" : "not cached: cache dir unwritable";
    rc = load_image(d, image, &m->module, err, sizeof err);
    free(image);
    if (rc != MM_OK) {
        snprintf(m->detail, sizeof m->detail, "%sNVRTC %s image not loadable: %s", notes, arch, err);
        return mm_cu_fail(MM_ERR_UNAVAILABLE, "%s", m->detail);
    }
    m->ok = 1;
    snprintf(m->detail, sizeof m->detail, "%sNVRTC %s (compiled, %s)", notes, arch, cached);
    return MM_OK;
}

/* A function of a module, looked up once (mm_cu_dev_lock held). */
int mm_cu_function_get(mm_cu_device* d, int mod, const char* name, mm_cu_function* f) {
    int rc = mm_cu_module_get(d, mod);
    if (rc != MM_OK) return rc;
    if (!f->tried) {
        f->tried = 1;
        CUresult r = mm_cu_drv.cuModuleGetFunction(&f->fn, d->mods[mod].module, name);
        if (r != CU_OK) {
            f->fn = NULL;
            return mm_cu_fail(MM_ERR_UNAVAILABLE, "%s not in module %s: %s", name, mm_cu_module_names[mod], mm_cu_error(r));
        }
    }
    if (!f->fn) return mm_cu_fail(MM_ERR_UNAVAILABLE, "%s not in module %s", name, mm_cu_module_names[mod]);
    return MM_OK;
}

/* One module's shipped sources compiled by NVRTC for an architecture (no driver needed). */
int mmaemu_cuda_nvrtc_compile(const char* module, const char* arch, char* detail, int n, int64_t* bytes) {
    const int mod = module ? mm_cu_module_id(module) : -1;
    if (mod < 0 || !arch) {
        mm_cu_copy_str(detail, n, "unknown module");
        return mm_cu_fail(MM_ERR_ARGUMENT, "unknown module '%s'", module ? module : "");
    }
    mm_cu_sources src;
    int rc = mm_cu_sources_read(mod, &src);
    if (rc != MM_OK) { mm_cu_copy_str(detail, n, mm_cu_error_text()); return rc; }
    char* image = NULL;
    size_t size = 0;
    char log[8192];
    rc = mm_cu_nvrtc_build(&src, arch, &image, &size, log, sizeof log);
    mm_cu_sources_free(&src);
    free(image);
    if (bytes) *bytes = rc == MM_OK ? (int64_t)size : 0;
    mm_cu_copy_str(detail, n, rc == MM_OK ? mmaemu_cuda_nvrtc_status(NULL) : log);
    if (rc != MM_OK) mm_cu_fail(rc, "%s", log);
    return rc;
}
