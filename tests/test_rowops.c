/*
 * test_rowops.c -- the multi-row helpers of the prefill step (issue 16,
 * src/engine/cpu_ops.c) against their one-row references on random data,
 * BIT FOR BIT: rms_scale_rows == rms_scale and rms_norm_rows == rms_norm
 * for every row, whatever the row count (full groups and tails), the row
 * length (1..16384, the HC width) or the stride, in place and not, with
 * and without a weight.  Values span several magnitudes so the double
 * sums round differently from row to row; a helper that reordered any
 * row's sum would be caught by some row.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu_ops.h"

static unsigned long long rs = 0x9E3779B97F4A7C15ull;
static float frand(void) {
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    float u = (float)((rs >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
    /* a spread of magnitudes: 1e-3 .. 1e3 */
    float m = (float)((rs >> 3) % 7) - 3.0f;
    return u * powf(10.0f, m);
}

static int same_rows(const float *a, const float *b, size_t n) {
    return memcmp(a, b, n * sizeof(float)) == 0;
}

int main(void) {
    int fails = 0, checks = 0;
    const int lens[] = { 1, 2, 7, 16, 127, 512, 1024, 4096, 16384 };
    const int rows[] = { 1, 3, 7, 8, 9, 15, 16, 17, 33 };
    const float eps = 1e-6f;
    const size_t maxn = 16384 + 5, maxr = 33;
    float *x = malloc(maxr * maxn * sizeof(float));
    float *w = malloc(maxn * sizeof(float));
    float *o1 = malloc(maxr * maxn * sizeof(float));
    float *o2 = malloc(maxr * maxn * sizeof(float));
    float *ip = malloc(maxr * maxn * sizeof(float));
    float sc[64];
    if (!x || !w || !o1 || !o2 || !ip) { fprintf(stderr, "out of memory\n"); return 1; }
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
            int n = lens[li], nr = rows[ri];
            if ((size_t)n * nr > 16384u * 9) continue;   /* keep the run short */
            size_t xs = (size_t)n + (n & 1 ? 0 : 3);     /* padded and unpadded strides */
            for (size_t i = 0; i < (size_t)nr * xs; i++) x[i] = frand();
            for (int i = 0; i < n; i++) w[i] = frand();
            /* scales */
            rms_scale_rows(x, xs, nr, n, eps, sc);
            for (int r = 0; r < nr; r++) {
                float ref = rms_scale(x + (size_t)r * xs, n, eps);
                checks++;
                if (memcmp(&ref, &sc[r], sizeof ref)) {
                    fails++;
                    fprintf(stderr, "FAIL rms_scale_rows n=%d rows=%d row %d: %.9g != %.9g\n", n, nr, r,
                            sc[r], ref);
                }
            }
            /* norms, with and without weight, out of place (own stride) */
            for (int wt = 0; wt < 2; wt++) {
                const float *wp = wt ? w : NULL;
                size_t os = (size_t)n + 1;
                rms_norm_rows(x, xs, wp, nr, n, eps, o2, os);
                for (int r = 0; r < nr; r++) {
                    rms_norm(x + (size_t)r * xs, wp, n, eps, o1);
                    checks++;
                    if (!same_rows(o1, o2 + (size_t)r * os, (size_t)n)) {
                        fails++;
                        fprintf(stderr, "FAIL rms_norm_rows n=%d rows=%d row %d weight %d\n", n, nr, r, wt);
                    }
                }
                /* in place (out == x, same stride), as q_post does */
                memcpy(ip, x, (size_t)nr * xs * sizeof(float));
                rms_norm_rows(ip, xs, wp, nr, n, eps, ip, xs);
                for (int r = 0; r < nr; r++) {
                    rms_norm(x + (size_t)r * xs, wp, n, eps, o1);
                    checks++;
                    if (!same_rows(o1, ip + (size_t)r * xs, (size_t)n)) {
                        fails++;
                        fprintf(stderr, "FAIL rms_norm_rows in place n=%d rows=%d row %d weight %d\n", n, nr,
                                r, wt);
                    }
                }
            }
        }
    free(x); free(w); free(o1); free(o2); free(ip);
    if (fails) { fprintf(stderr, "test_rowops: %d of %d checks failed\n", fails, checks); return 1; }
    printf("test_rowops: %d checks ok\n", checks);
    return 0;
}
