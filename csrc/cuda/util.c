/* util.c: the CUDA loader's errors (one message per thread) and small file helpers. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation" /* messages are cut to their buffers on purpose */
#endif

static _Thread_local char g_error[2048];

int mm_cu_fail(int code, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_error, sizeof g_error, fmt, ap);
    va_end(ap);
    return code;
}

const char* mm_cu_error_text(void) { return g_error; }

const char* mmaemu_cuda_last_error(void) { return g_error[0] ? g_error : "no error"; }

void mm_cu_copy_str(char* dst, int n, const char* src) {
    if (!dst || n <= 0) return;
    snprintf(dst, (size_t)n, "%s", src ? src : "");
}

int mm_cu_file_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int mm_cu_dir_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

char* mm_cu_read_file(const char* path, size_t* size) {
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

int mm_cu_mkdir_p(const char* path) {
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

int mm_cu_write_file_atomic(const char* path, const void* data, size_t n) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE* f = fopen(tmp, "wb");
    if (!f) return -1;
    const int ok = fwrite(data, 1, n, f) == n;
    if (fclose(f) != 0 || !ok) { unlink(tmp); return -1; }
    if (rename(tmp, path) != 0) { unlink(tmp); return -1; }
    return 0;
}
