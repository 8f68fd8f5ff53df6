/*
 * util.c -- the agent's small helpers (util.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

double ag_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

char *ag_strndup(const char *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) { fprintf(stderr, "ds4-agent: out of memory\n"); exit(1); }
    if (n) memcpy(s, p, n);
    s[n] = 0;
    return s;
}
