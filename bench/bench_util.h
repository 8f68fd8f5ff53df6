/*
 * bench_util.h -- the small helpers every benchmark program in bench/
 * needs: clocks, the median of repeated measurements, and a fixed-seed
 * random source for test data.
 *
 * Owns: nothing but these inline helpers (one copy per benchmark program;
 * each program is a single file).  Must not: depend on the engine.
 */
#ifndef DS4_BENCH_UTIL_H
#define DS4_BENCH_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* Wall clock, seconds. */
static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of the whole process (all threads), seconds: against wall time
 * x threads it shows how much of the machine a run actually had. */
static inline double bench_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of n > 0 values (sorts v in place; the mean of the two middle
 * ones when n is even). */
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* xorshift64 from a fixed seed: the same test data in every run. */
static uint64_t bench_rng_state = 0x2545f4914f6cdd1dull;
static inline uint64_t bench_rnd(void) {
    bench_rng_state ^= bench_rng_state << 13;
    bench_rng_state ^= bench_rng_state >> 7;
    bench_rng_state ^= bench_rng_state << 17;
    return bench_rng_state;
}

/* Uniform in [-1, 1). */
static inline float bench_frand(void) {
    return (float)((double)(bench_rnd() >> 11) * 0x1p-53) * 2.0f - 1.0f;
}

#endif
