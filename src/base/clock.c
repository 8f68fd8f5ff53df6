/*
 * clock.c -- the one clock the library and the binaries time things with.
 *
 * Owns: ds4_now (seconds on CLOCK_MONOTONIC: immune to wall-clock steps,
 * so durations, timeouts and rates never go negative).  Must not: be used
 * for dates people read (those take time(2)).
 */
#include <time.h>

#include "ds4_base.h"

double ds4_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
