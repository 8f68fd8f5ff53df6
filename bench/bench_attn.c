/*
 * bench_attn.c -- `make bench-attn`: throughput of the attention inner
 * kernels (src/kernels/vec_ops.c) at the DeepSeek V4 Flash shape, against
 * the machine's fp32 FMA peak.
 *
 * Owns: nothing outside this program.
 *
 * One token's attention as forward_cpu.c's attn_task runs it, minus the
 * key gathering and the softmax: n_head query rows of head_dim floats
 * against nk key rows (f32, contiguous, as attn_task's converted copy of a
 * token's f16 keys), in blocks of VEC_HB heads:
 *   - scores: dot4x4 over four keys at a time, then dot4 for the rest;
 *   - values: wsum4 over all keys (values are the keys).
 * Each is 2 * n_head * nk * head_dim flops per token.  nk defaults to the
 * Flash shape's two cases: 640 (window 128 + indexer top-k 512, the
 * ratio-4 layers from ctx 2048 on) and 192 (window + 64 compressed rows of
 * a ratio-128 layer at ctx 8192).  One thread; every table the CPU has is
 * run side by side, interleaved per repetition, so compare inside one run;
 * medians of --reps.  % peak is over the fp32 FMA register-only peak of
 * the vector width the table uses (tools/probe.c, the best of --reps on
 * the thread's CPU clock; the kernels are timed on the wall clock, so a
 * busy machine lowers their fraction, never raises it).
 *
 *   build/bench/bench_attn [--reps R] [--keys 640,192] [--heads 64]
 *       [--dim 512] [--tokens N] [--kernels scalar,avx2,avx512]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/vec_ops.h"
#include "../tools/probe.h"
#include "bench_util.h"

/* name is an item of the comma-separated list */
static int in_list(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == n && !strncmp(p, name, n)) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

static void usage(int rc) {
    fprintf(rc ? stderr : stdout,
            "usage: bench_attn [--reps R] [--keys LIST] [--heads H] [--dim D] [--tokens N]\n"
            "       [--kernels LIST]\n"
            "  one thread; the attention score (dot4x4) and value (wsum4) kernels of\n"
            "  every vector table, interleaved, GFLOP/s and %% of the fp32 FMA peak\n");
    exit(rc);
}

/* One token's scores (which = 0) or weighted sums (which = 1) over all
 * head blocks, `tokens` times (fresh queries per token, so the queries
 * come from L2 like a prefill chunk's rows; the keys are shared). */
static void run(const vec_kernels *vk, int which, const float *q, float *o, const float *const *kp,
                float *w, int H, int d, int nk, int tokens) {
    for (int t = 0; t < tokens; t++) {
        const float *qt = q + (size_t)(t & 3) * H * d;
        float *ot = o + (size_t)(t & 3) * H * d;
        for (int h0 = 0; h0 < H; h0 += VEC_HB) {
            float *wb = w + (size_t)h0 * nk;
            if (which == 0) {
                int r = 0;
                for (; r + 4 <= nk; r += 4) {
                    float s16[16];
                    vk->dot4x4(qt + (size_t)h0 * d, d, kp + r, d, s16);
                    for (int h = 0; h < VEC_HB; h++)
                        for (int j = 0; j < 4; j++) wb[(size_t)h * nk + r + j] = s16[h * 4 + j];
                }
                for (; r < nk; r++) {
                    float s4[VEC_HB];
                    vk->dot4(qt + (size_t)h0 * d, d, kp[r], d, s4);
                    for (int h = 0; h < VEC_HB; h++) wb[(size_t)h * nk + r] = s4[h];
                }
            } else {
                vk->wsum4(ot + (size_t)h0 * d, d, kp, wb, (size_t)nk, nk, d);
            }
        }
    }
}

int main(int argc, char **argv) {
    int reps = 7, H = 64, d = 512, tokens = 16;
    const char *keys = "640,192", *kernels = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) usage(0);
        else if (!v) usage(2);
        else if (!strcmp(a, "--reps")) { reps = atoi(v); i++; }
        else if (!strcmp(a, "--keys")) { keys = v; i++; }
        else if (!strcmp(a, "--heads")) { H = atoi(v); i++; }
        else if (!strcmp(a, "--dim")) { d = atoi(v); i++; }
        else if (!strcmp(a, "--tokens")) { tokens = atoi(v); i++; }
        else if (!strcmp(a, "--kernels")) { kernels = v; i++; }
        else usage(2);
    }
    if (reps < 1 || reps > 1000 || H < VEC_HB || H % VEC_HB || d < 1 || d > 65536 || tokens < 1)
        usage(2);

    const vec_kernels *tab[3] = { vec_kernels_scalar(), vec_kernels_avx2(), vec_kernels_avx512() };
    const int width[3] = { 0, 256, 512 };
    int use[3] = { 0, 0, 0 };
    for (int k = 0; k < 3; k++) {
        if (!tab[k]) continue;
        /* default: the SIMD tables (the scalar one is 10x slower) */
        use[k] = kernels ? in_list(kernels, tab[k]->name) : k > 0;
    }
    if (!use[0] && !use[1] && !use[2]) {
        fprintf(stderr, "bench_attn: none of the tables '%s' is available on this CPU "
                "(scalar, avx2, avx512)\n", kernels ? kernels : "avx2,avx512");
        return 2;
    }
    double peak256 = probe_peak(PROBE_FMA256, 1, reps), peak512 = probe_peak(PROBE_FMA512, 1, reps);

    time_t tnow = time(NULL);
    char date[32];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M", localtime(&tnow));
    printf("bench_attn: 1 thread, %s; %d heads x head_dim %d, %d tokens per measurement, medians of %d\n",
           date, H, d, tokens, reps);
    printf("peak    fp32 fma ymm %.1f GFLOP/s, zmm %.1f GFLOP/s\n\n", peak256, peak512);
    printf("kernels  op       keys   us/token   GFLOP/s   %%peak\n");

    char buf[256];
    snprintf(buf, sizeof buf, "%s", keys);
    for (char *save = NULL, *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        int nk = atoi(p);
        if (nk < 1 || nk > 1 << 20) usage(2);
        /* 64-byte aligned, as the engine's scratch rows are: malloc's
         * large blocks start 16 bytes into a page, and every 64-byte load
         * of such a row splits two cache lines */
        float *kf = aligned_alloc(64, (((size_t)nk * d * sizeof(float)) + 63) & ~(size_t)63);
        float *q = aligned_alloc(64, (size_t)4 * H * d * sizeof(float));
        float *o = aligned_alloc(64, (size_t)4 * H * d * sizeof(float));
        float *w = malloc((size_t)H * nk * sizeof(float));
        const float **kp = malloc((size_t)nk * sizeof(*kp));
        if (!kf || !q || !o || !w || !kp) { fprintf(stderr, "bench_attn: out of memory\n"); return 1; }
        for (size_t i = 0; i < (size_t)nk * d; i++) kf[i] = bench_frand();
        for (size_t i = 0; i < (size_t)4 * H * d; i++) q[i] = bench_frand();
        for (size_t i = 0; i < (size_t)H * nk; i++) w[i] = 0.5f + 0.5f * bench_frand();
        for (int r = 0; r < nk; r++) kp[r] = kf + (size_t)r * d;
        double flop = 2.0 * H * (double)nk * d * tokens;
        for (int which = 0; which < 2; which++) {
            double *ms[3];
            for (int k = 0; k < 3; k++)
                if (!(ms[k] = calloc((size_t)reps, sizeof(double)))) {
                    fprintf(stderr, "bench_attn: out of memory\n");
                    return 1;
                }
            for (int k = 0; k < 3; k++)   /* warm-up */
                if (use[k]) run(tab[k], which, q, o, kp, w, H, d, nk, 1);
            for (int rep = 0; rep < reps; rep++)
                for (int k = 0; k < 3; k++) {
                    if (!use[k]) continue;
                    double t0 = bench_now();
                    run(tab[k], which, q, o, kp, w, H, d, nk, tokens);
                    ms[k][rep] = bench_now() - t0;
                }
            for (int k = 0; k < 3; k++) {
                if (!use[k]) continue;
                double s = bench_median(ms[k], reps), gf = flop / s * 1e-9;
                double pk = width[k] == 512 ? peak512 : width[k] == 256 ? peak256 : 0;
                printf("%-8s %-8s %5d %10.1f %9.1f", tab[k]->name, which ? "wsum4" : "dot4x4", nk,
                       s / tokens * 1e6, gf);
                if (pk > 0) printf("  %5.1f%%\n", 100.0 * gf / pk);
                else printf("       -\n");
            }
            for (int k = 0; k < 3; k++) free(ms[k]);
        }
        free(kf); free(q); free(o); free(w); free(kp);
    }
    printf("\nflops: 2 x heads x keys x head_dim per token for each op; %%peak over the\n"
           "fp32 FMA peak of the table's vector width (avx2: ymm, avx512: zmm), one thread.\n");
    return 0;
}
