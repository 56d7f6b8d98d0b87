/* cpu_pipes_common.h: the timing both pipe benchmarks share (cpu_pipes.c, cpu_pipes_avx2.c):
 * the monotonic clock and the table of loops, each timed three times, its best step in cycles. */
#ifndef CPU_PIPES_COMMON_H
#define CPU_PIPES_COMMON_H

#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A loop: its name and a function returning seconds per loop step. */
typedef struct {
    const char* name;
    double (*run)(void);
} pipe_loop;

/* Prints each loop's best of three runs in cycles at ghz. */
static void report_loops(const pipe_loop* loops, size_t n, double ghz) {
    for (size_t i = 0; i < n; i++) {
        double best = 1e9;
        for (int rep = 0; rep < 3; rep++) {
            const double t = loops[i].run();
            if (t < best) best = t;
        }
        printf("  %-44s %6.2f\n", loops[i].name, best * ghz * 1e9);
    }
}

#endif
