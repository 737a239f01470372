/* bench/bench_time.h - the benchmarks' clock, comparison and median (header-only: each bench is one .c file). */
#ifndef KILN_BENCH_TIME_H
#define KILN_BENCH_TIME_H

#include <stdlib.h>
#include <time.h>

/* Milliseconds on clock id (CLOCK_MONOTONIC: wall time; CLOCK_THREAD_CPUTIME_ID: the calling thread's CPU). */
static inline double bench_clock_ms(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static inline double bench_now_ms(void) { return bench_clock_ms(CLOCK_MONOTONIC); }

/* qsort's comparison of doubles, ascending. */
static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n), n >= 1 (sorts v). */
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
