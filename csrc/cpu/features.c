/* features.c: the instruction sets of the CPU the process runs on. */
#include <string.h>

#include "driver.h"

int mm_cpu_has(const char* what) {
#if defined(MMAEMU_EMULATE_AVX512) /* test builds that run the AVX-512 kernel on SIMDe */
    if (strcmp(what, "avx512") == 0) return 1;
    /* both builds of it run: -DMMAEMU_EMULATE_NIBBLES takes the nibble table's */
#if defined(MMAEMU_EMULATE_NIBBLES)
    if (strcmp(what, "avx512vpopcntdq,vbmi") == 0) return 0;
#else
    if (strcmp(what, "avx512vpopcntdq,vbmi") == 0) return 1;
#endif
#endif
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    __builtin_cpu_init();
    if (strcmp(what, "avx2") == 0) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (strcmp(what, "avx512") == 0)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
    if (strcmp(what, "avx512vpopcntdq,vbmi") == 0)
        return __builtin_cpu_supports("avx512vpopcntdq") && __builtin_cpu_supports("avx512vbmi");
#endif
    (void)what;
    return 0;
}
