/*
 * test_glm_topk.c -- glm-dsa's top-k (src/models/glm_dsa.c ds4_glm_top_k:
 * a heap of the k kept) against its reference, a full sort of every
 * index by (score descending, index ascending) then the first k ascending
 * by index, on random data: scores drawn from a few values (many exact
 * ties, +0 and -0 among them, as the indexer's ReLU gives) and from
 * continuous ones, n from 1 to 5000, k from 1 to n.  The same set, in the
 * same order, every time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

static unsigned long long rs = 0x2545F4914F6CDD1Dull;
static unsigned rnd(void) {
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (unsigned)(rs >> 33);
}

static const float *g_sc;
static int by_score(const void *a, const void *b) {
    const int i = *(const int *)a, j = *(const int *)b;
    if (g_sc[i] > g_sc[j]) return -1;
    if (g_sc[i] < g_sc[j]) return 1;
    return (i > j) - (i < j);
}
static int by_index(const void *a, const void *b) {
    const int i = *(const int *)a, j = *(const int *)b;
    return (i > j) - (i < j);
}

int main(void) {
    enum { NMAX = 5000 };
    static float sc[NMAX];
    static int ref[NMAX], got[NMAX];
    int fails = 0, checks = 0;
    for (int it = 0; it < 600; it++) {
        const int n = it < 20 ? it + 1 : 1 + (int)(rnd() % NMAX);
        const int k = it % 7 == 0 ? n : 1 + (int)(rnd() % (unsigned)n);
        const int mode = it % 3;   /* 0: few values, 1: continuous, 2: ReLU-like */
        for (int i = 0; i < n; i++) {
            if (mode == 0) sc[i] = (float)(rnd() % 5) - 2.0f;
            else if (mode == 1) sc[i] = (float)rnd() / 4294967296.0f - 0.25f;
            else sc[i] = rnd() % 3 ? (rnd() % 2 ? 0.0f : -0.0f) : (float)(rnd() % 100) * 0.125f;
        }
        for (int i = 0; i < n; i++) ref[i] = i;
        g_sc = sc;
        qsort(ref, (size_t)n, sizeof *ref, by_score);
        qsort(ref, (size_t)k, sizeof *ref, by_index);
        ds4_glm_top_k(sc, n, k, got);
        checks++;
        if (memcmp(ref, got, (size_t)k * sizeof *ref)) {
            fails++;
            fprintf(stderr, "FAIL top_k n=%d k=%d mode %d: differs from the full sort\n", n, k, mode);
        }
    }
    printf("test_glm_topk: %d checks, %d failures\n", checks, fails);
    return fails ? 1 : 0;
}
