/*
 * test_rowops.c -- the multi-row helpers of the prefill step (issue 16,
 * src/engine/cpu_ops.c) against their one-row references on random data,
 * BIT FOR BIT: rms_scale_rows == rms_scale and rms_norm_rows == rms_norm
 * for every row and every vector table (their sums of squares run one row
 * per SIMD lane), whatever the row count (full groups and tails), the row
 * length (1..16384, the HC width) or the stride, in place and not, with
 * and without a weight.  Values span several magnitudes so the double
 * sums round differently from row to row; a helper that reordered any
 * row's sum would be caught by some row.  And every kernel table's
 * activation quantizers (the avx512 table's are AVX-512, in
 * src/kernels/quant_vnni.c) against the scalar table's (the definition)
 * byte for byte, Q8_0a and Q8_K, on random rows and on blocks built to
 * hit every branch: all zero, -0, subnormals, infinities, NaNs, ties of +a and -a for the largest
 * magnitude, exact halves after scaling, one huge value among tiny ones.
 * And indexer_qat (its FP4 step written for vectorization) against the
 * plain form with libm fmaxf/fminf and e2m1_round (test_qat).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
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

/* Fill one 256-element stretch with a pattern that stresses one branch. */
static void edge_block(float *x, int kind) {
    for (int j = 0; j < 256; j++) x[j] = frand();
    switch (kind) {
    case 0: memset(x, 0, 256 * sizeof(float)); break;
    case 1: for (int j = 0; j < 256; j++) x[j] = j & 1 ? -0.0f : 0.0f; break;
    case 2: for (int j = 0; j < 256; j++) x[j] = frand() * 1e-40f; break;          /* subnormal */
    case 3: x[17] = INFINITY; break;
    case 4: x[3] = -INFINITY; x[40] = NAN; break;
    case 5: x[5] = NAN; x[100] = NAN; break;
    case 6: x[9] = 1000.0f; x[30] = -1000.0f; x[200] = 1000.0f; break;         /* ties */
    case 7: x[2] = -1000.0f; x[31] = 1000.0f; break;
    case 8: for (int j = 0; j < 256; j++) x[j] = (float)((j % 255) - 127) * 0.5f; break; /* halves */
    case 9: for (int j = 0; j < 256; j++) x[j] = frand() * 1e-30f; x[77] = 3e30f; break;
    case 10: for (int j = 0; j < 256; j++) x[j] = (float)(j % 7) * 127.0f / 6.0f; break;
    case 11: for (int j = 0; j < 256; j++) x[j] = -3.0f; break;                 /* all equal */
    }
}

/* One row through a table's quantizer against the scalar table's bytes. */
static int quant_row_differs(const ds4_kernels *kt, act_kind k, const float *x, int n) {
    static uint8_t q1[8192 * 2], q2[8192 * 2];
    size_t rb = act_row_bytes(k, n);
    memset(q1, 0xA5, rb);
    memset(q2, 0x5A, rb);
    act_quantize_row(ds4_kernels_scalar(), k, x, n, q1);
    act_quantize_row(kt, k, x, n, q2);
    return memcmp(q1, q2, rb) != 0;
}

static int test_quant(const ds4_kernels *kt, int *checks) {
    int fails = 0;
    enum { NMAX = 8192 };
    static float x[NMAX];
    const act_kind kinds[2] = { ACT_Q8_0A, ACT_Q8_K };
    for (int ki = 0; ki < 2; ki++) {
        act_kind k = kinds[ki];
        /* random rows of the widths the model quantizes (multiples of 256) */
        const int widths[] = { 256, 512, 1024, 2048, 4096, 8192 };
        for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++)
            for (int rep = 0; rep < 20; rep++) {
                int n = widths[wi];
                for (int j = 0; j < n; j++) x[j] = frand();
                (*checks)++;
                if (quant_row_differs(kt, k, x, n)) {
                    fails++;
                    fprintf(stderr, "FAIL %s act_quantize_row kind %d n=%d rep %d\n", kt->name, (int)k, n, rep);
                }
            }
        /* edge blocks, each at several offsets of a 1024-wide row */
        for (int e = 0; e < 12; e++)
            for (int off = 0; off < 1024; off += 256) {
                for (int j = 0; j < 1024; j++) x[j] = frand();
                edge_block(x + off, e);
                (*checks)++;
                if (quant_row_differs(kt, k, x, 1024)) {
                    fails++;
                    fprintf(stderr, "FAIL %s act_quantize_row kind %d edge case %d at %d\n", kt->name, (int)k, e,
                            off);
                }
            }
    }
    return fails;
}

/* indexer_qat against its plain form (the same rotation, then per block of 32
 * fmaxf for the largest magnitude, x / scale clamped by fminf/fmaxf and
 * e2m1_round) bit for bit, on random rows of every magnitude and rows with
 * zeros, -0, subnormals, infinities, NaNs and values on the E2M1 ties. */
static void qat_plain(float *x, int n) {
    hadamard_rotate(x, n);
    for (int off = 0; off < n; off += 32) {
        int end = off + 32 < n ? off + 32 : n;
        float amax = 0;
        for (int i = off; i < end; i++) amax = fmaxf(amax, fabsf(x[i]));
        amax = fmaxf(amax, 7.052966104933725e-38f);
        int e;
        float m = frexpf(amax / 6.0f, &e);
        float scale = ldexpf(1.0f, m == 0.5f ? e - 1 : e);
        for (int i = off; i < end; i++) {
            float v = x[i] / scale;
            v = fminf(fmaxf(v, -6.0f), 6.0f);
            x[i] = e2m1_round(v) * scale;
        }
    }
}

static int test_qat(int *checks) {
    int fails = 0;
    enum { N = 128 };
    float a[N], b[N], src[N];
    const float ties[] = { 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 0.5f, 3.0f };   /* all below the 6 of the block max */
    for (int rep = 0; rep < 20000; rep++) {
        const int n = rep % 4 == 3 ? 32 : N;
        for (int i = 0; i < n; i++) {
            src[i] = frand() * powf(10.0f, (float)(rep % 13) * 3.0f - 18.0f);
            if (rep % 5 == 1 && i % 7 == 0) src[i] = 0.0f;
            if (rep % 5 == 2 && i % 9 == 0) src[i] = -0.0f;
        }
        if (rep % 97 == 5) src[rep % n] = INFINITY;
        if (rep % 89 == 6) src[rep % n] = NAN;
        if (rep % 83 == 7) for (int i = 0; i < n; i++) src[i] = 1e-44f * (float)(i % 5);
        memcpy(a, src, sizeof(float) * (size_t)n);
        memcpy(b, src, sizeof(float) * (size_t)n);
        int m = n;
        /* every E2M1 tie, +-, after the rotation: for n = 64 the rotation
         * is H x / 8 (H the +-1 Sylvester matrix, H H = 64 I), so the row
         * H t / 8, exact in float for these t, rotates back to t exactly;
         * t holds 6 * 2^k (the block's scale is then 2^k) and ties * 2^k */
        if (rep % 11 == 4) {
            m = 64;
            double t[64], u[64];
            const int k = rep % 17 - 8;
            for (int i = 0; i < 64; i++)
                t[i] = ldexp(i % 32 == 0 ? 6.0 : (i & 1 ? -1.0 : 1.0) * ties[(i + rep) % 9], k);
            for (int i = 0; i < 64; i++) {
                u[i] = 0;
                for (int j = 0; j < 64; j++) u[i] += (__builtin_popcount((unsigned)(i & j)) & 1 ? -t[j] : t[j]);
                a[i] = b[i] = (float)(u[i] / 8.0);
            }
        }
        indexer_qat(a, m);
        qat_plain(b, m);
        for (int i = 0; i < m; i++) {
            (*checks)++;
            if (memcmp(&a[i], &b[i], sizeof(float)) && !(isnan(a[i]) && isnan(b[i]))) {
                fails++;
                if (fails < 10) printf("indexer_qat rep %d [%d]: %.9g, plain %.9g\n", rep, i, a[i], b[i]);
            }
        }
    }
    return fails;
}

int main(void) {
    int fails = 0, checks = 0;
    fails += test_qat(&checks);
    /* every table the CPU has (the avx512 table's quantizers are AVX-512;
     * the others use the scalar ones and must match trivially) */
    const ds4_kernels *tabs[] = { ds4_kernels_avx2(), ds4_kernels_avx512(), ds4_kernels_avx512_packed(),
                                  ds4_kernels_amx() };
    for (size_t ti = 0; ti < sizeof tabs / sizeof tabs[0]; ti++)
        if (tabs[ti]) fails += test_quant(tabs[ti], &checks);
    const int lens[] = { 1, 2, 7, 16, 127, 512, 1024, 4096, 16384 };
    const int rows[] = { 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 40, 65 };
    const float eps = 1e-6f;
    const size_t maxn = 16384 + 5, maxr = 65;
    float *x = malloc(maxr * maxn * sizeof(float));
    float *w = malloc(maxn * sizeof(float));
    float *o1 = malloc(maxr * maxn * sizeof(float));
    float *o2 = malloc(maxr * maxn * sizeof(float));
    float *ip = malloc(maxr * maxn * sizeof(float));
    float sc[65];   /* maxr */
    if (!x || !w || !o1 || !o2 || !ip) { fprintf(stderr, "out of memory\n"); return 1; }
    const vec_kernels *vts[] = { vec_kernels_scalar(), vec_kernels_avx2(), vec_kernels_avx512() };
    for (size_t vi = 0; vi < sizeof vts / sizeof vts[0]; vi++) {
    const vec_kernels *vk = vts[vi];
    if (!vk) continue;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
            int n = lens[li], nr = rows[ri];
            if ((size_t)n * nr > 16384u * 9) continue;   /* keep the run short */
            size_t xs = (size_t)n + (n & 1 ? 0 : 3);     /* padded and unpadded strides */
            for (size_t i = 0; i < (size_t)nr * xs; i++) x[i] = frand();
            for (int i = 0; i < n; i++) w[i] = frand();
            /* scales */
            rms_scale_rows(vk, x, xs, nr, n, eps, sc);
            for (int r = 0; r < nr; r++) {
                float ref = rms_scale(x + (size_t)r * xs, n, eps);
                checks++;
                if (memcmp(&ref, &sc[r], sizeof ref)) {
                    fails++;
                    fprintf(stderr, "FAIL rms_scale_rows (%s) n=%d rows=%d row %d: %.9g != %.9g\n", vk->name, n, nr, r,
                            sc[r], ref);
                }
            }
            /* norms, with and without weight, out of place (own stride),
             * stored plainly and streamed (rows_store64: 16-byte aligned
             * rows when n is a multiple of 4, the plain fallback else) */
            for (int wt = 0; wt < 2; wt++) {
                const float *wp = wt ? w : NULL;
                for (int st = 0; st < 2; st++) {
                    size_t os = (size_t)n + (st ? 4 : 1);
                    rms_norm_rows(vk, x, xs, wp, nr, n, eps, o2, os, st);
                    for (int r = 0; r < nr; r++) {
                        rms_norm(x + (size_t)r * xs, wp, n, eps, o1);
                        checks++;
                        if (!same_rows(o1, o2 + (size_t)r * os, (size_t)n)) {
                            fails++;
                            fprintf(stderr, "FAIL rms_norm_rows (%s) n=%d rows=%d row %d weight %d stream %d\n",
                                    vk->name, n, nr, r, wt, st);
                        }
                    }
                }
                /* in place (out == x, same stride), as the attention's query norm does */
                memcpy(ip, x, (size_t)nr * xs * sizeof(float));
                rms_norm_rows(vk, ip, xs, wp, nr, n, eps, ip, xs, 0);
                for (int r = 0; r < nr; r++) {
                    rms_norm(x + (size_t)r * xs, wp, n, eps, o1);
                    checks++;
                    if (!same_rows(o1, ip + (size_t)r * xs, (size_t)n)) {
                        fails++;
                        fprintf(stderr, "FAIL rms_norm_rows in place (%s) n=%d rows=%d row %d weight %d\n", vk->name,
                                n, nr, r, wt);
                    }
                }
            }
        }
    }
    free(x); free(w); free(o1); free(o2); free(ip);
    if (fails) { fprintf(stderr, "test_rowops: %d of %d checks failed\n", fails, checks); return 1; }
    printf("test_rowops: %d checks ok\n", checks);
    return 0;
}
