/* replay_main.c: runs the fuzz harness on the files named on the command line, without
 * libFuzzer (any C compiler, e.g. gcc -fsanitize=address,undefined). Used by
 * test/test_fuzz_corpus.py to replay test/fuzz/corpus/ in every test run. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
    for (int i = 1; i < argc; i++) {
        FILE* f = fopen(argv[i], "rb");
        if (!f) { perror(argv[i]); return 2; }
        uint8_t* buf = NULL;
        size_t n = 0, cap = 0;
        for (;;) {
            if (n == cap) {
                cap = cap ? 2 * cap : 4096;
                uint8_t* grown = (uint8_t*)realloc(buf, cap);
                if (!grown) { free(buf); fclose(f); return 2; }
                buf = grown;
            }
            const size_t got = fread(buf + n, 1, cap - n, f);
            if (got == 0) break;
            n += got;
        }
        fclose(f);
        LLVMFuzzerTestOneInput(buf, n);
        free(buf);
    }
    printf("replayed %d inputs\n", argc - 1);
    return 0;
}
