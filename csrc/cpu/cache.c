/* cache.c: the cache sizes the driver cuts its work to (Linux's sysfs), read once. */
#include <pthread.h>
#include <stdio.h>

#include "driver.h"

/* The size in bytes of CPU 0's largest cache of a level in [lo, hi] as Linux's sysfs gives it,
 * 0 where unknown: the last-level cache (3 and above) and L2. Not sysconf's
 * _SC_LEVEL3_CACHE_SIZE: glibc can give a whole socket's L3 for one core complex's. */
static int64_t cache_bytes(int lo, int hi) {
    int64_t size = 0;
    for (int i = 0; i < 16; i++) {
        char path[96];
        int level = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE* f = fopen(path, "r");
        if (!f) continue;
        if (fscanf(f, "%d", &level) != 1) level = 0;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (level < lo || level > hi || !(f = fopen(path, "r"))) continue;
        long long n = 0;
        char unit = 0;
        const int got = fscanf(f, "%lld%c", &n, &unit);
        fclose(f);
        const int64_t bytes = got < 1 || n <= 0 ? 0
                              : unit == 'K' ? (int64_t)n << 10
                              : unit == 'M' ? (int64_t)n << 20
                              : unit == 'G' ? (int64_t)n << 30 : (int64_t)n;
        if (bytes > size) size = bytes;
    }
    return size;
}

/* Decoded A rows per pass (passes.c), in bytes: every panel of a pass reads all of them, so a
 * pass should stay in the last-level cache: a quarter of it (the rest holds the threads' panels
 * and what else shares it, on a virtual machine other guests' data too), at least
 * MM_CPU_A_PASS_MIN and at most MM_CPU_A_BUDGET (which it is where the cache's size is
 * unknown). Larger passes read their rows from memory once per panel. */
#ifndef MM_CPU_A_PASS_MIN
#define MM_CPU_A_PASS_MIN ((int64_t)4 << 20)
#endif
/* L2's size where sysfs does not say it (mm_cpu_seg_chunk_rows). */
#ifndef MM_CPU_L2_DEFAULT
#define MM_CPU_L2_DEFAULT ((int64_t)512 << 10)
#endif
static int64_t a_pass_limit, l2_size;
static char a_pass_text[160]; /* what mmaemu_cpu_a_pass says */
static pthread_once_t a_pass_once = PTHREAD_ONCE_INIT;

static void a_pass_init(void) {
#ifdef MM_CPU_L2_BYTES /* test builds: a tiny L2, so that small GEMMs take short segments */
    l2_size = MM_CPU_L2_BYTES;
#else
    const int64_t l2 = cache_bytes(2, 2);
    l2_size = l2 > 0 ? l2 : MM_CPU_L2_DEFAULT;
#endif
    const int64_t llc = cache_bytes(3, 99);
    int64_t bytes = llc > 0 ? llc / 4 : MM_CPU_A_BUDGET;
    if (bytes < MM_CPU_A_PASS_MIN) bytes = MM_CPU_A_PASS_MIN;
    a_pass_limit = bytes < MM_CPU_A_BUDGET ? bytes : MM_CPU_A_BUDGET;
    const double mib = (double)a_pass_limit / (1 << 20);
    if (llc > 0)
        snprintf(a_pass_text, sizeof a_pass_text, "A's rows decoded in passes of up to %.1f MiB (%s %.1f MiB last-level cache)",
                 mib, a_pass_limit == llc / 4 ? "a quarter of the" : "bounded; the", (double)llc / (1 << 20));
    else
        snprintf(a_pass_text, sizeof a_pass_text, "A's rows decoded in passes of up to %.1f MiB (the last-level cache's size unknown)", mib);
}

int64_t mm_cpu_a_pass_rows(int64_t row_bytes, int mr) {
    pthread_once(&a_pass_once, a_pass_init);
    const int64_t rows = a_pass_limit / row_bytes / mr * mr;
    return rows < mr ? mr : rows;
}

/* Half of L2: the other half for the panel in use and the tile's state. */
int64_t mm_cpu_seg_chunk_rows(int64_t kc, int mr) {
    pthread_once(&a_pass_once, a_pass_init);
    const int64_t rows = l2_size / 2 / (4 * mm_cpu_a_stride(kc)) / mr * mr;
    return rows < mr ? mr : rows;
}

/* Where it does not, each panel reads the tile's A rows from L3 or memory. */
int mm_cpu_whole_k_fits_l2(int64_t K, int mr, int w, int signs) {
    pthread_once(&a_pass_once, a_pass_init);
    return 4 * (mr * mm_cpu_a_stride(K) + mm_cpu_panel_words(K, w, signs)) <= l2_size / 2;
}

const char* mmaemu_cpu_a_pass(void) {
    pthread_once(&a_pass_once, a_pass_init);
    return a_pass_text;
}
