/*
 * util.c -- the agent's small helpers (util.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

char *ag_strndup(const char *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) { fprintf(stderr, "ds4-agent: out of memory\n"); exit(1); }
    if (n) memcpy(s, p, n);
    s[n] = 0;
    return s;
}
