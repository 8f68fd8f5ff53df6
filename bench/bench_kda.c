/*
 * bench_kda.c -- `make bench-kda`: the KDA recurrence of one glm5-next
 * layer (src/kernels/kda.c) at GLM 5.3 Flash's shape (64 heads, K = 128:
 * a 4 MB state), tokens per second over T-token prefills, three forms in
 * alternating rounds (medians):
 *   old      the token-major four-pass loop glm5_next.c ran before (a copy:
 *            every token makes four passes over the whole 4 MB state)
 *   rec      kda_recurrent head-outer (a head's 64 KB stays in cache for
 *            all T tokens), on 1 thread and on the pool's N
 *   chunked  kda_chunked (chunks of 64) head-outer, 1 and N threads
 * Wall-clock medians (and the process CPU time, for a shared machine).
 * Usage: bench_kda [T ...] [-r rounds] [-t threads]   (default 512 2048, 3, 2)
 * Owns: nothing outside this program.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "kernels/kda.h"
#include "kernels/threadpool.h"

enum { H = 64, K = 128 };

static void old_step(float *S, const float *q, const float *k, const float *v, const float *g, const float *beta,
                     float *u, float *o) {
    for (int h = 0; h < H; h++) {
        float *Sh = S + (size_t)h * K * K;
        const float *kh = k + (size_t)h * K, *vh = v + (size_t)h * K, *gh = g + (size_t)h * K;
        for (int a = 0; a < K; a++) {
            const float e = vec_expf(gh[a]);
            for (int b = 0; b < K; b++) Sh[(size_t)a * K + b] *= e;
        }
        for (int b = 0; b < K; b++) {
            float acc = 0.0f;
            for (int a = 0; a < K; a++) acc += Sh[(size_t)a * K + b] * kh[a];
            u[b] = beta[h] * (vh[b] - acc);
        }
        for (int a = 0; a < K; a++)
            for (int b = 0; b < K; b++) Sh[(size_t)a * K + b] += kh[a] * u[b];
        const float *qh = q + (size_t)h * K;
        for (int b = 0; b < K; b++) {
            float acc = 0.0f;
            for (int a = 0; a < K; a++) acc += Sh[(size_t)a * K + b] * qh[a];
            o[(size_t)h * K + b] = acc;
        }
    }
}

typedef struct {
    float *S, *o, *scr;
    const float *q, *k, *v, *g, *beta;
    int T, chunked, tb;   /* tb: tokens per block, all heads a block (0: all T per head) */
    size_t scr_n;
} job;

static void task(void *ctx, int ith, int nth) {
    job *j = ctx;
    long h0, h1;
    ds4_split(H, ith, nth, &h0, &h1);
    const vec_kernels *vk = vec_kernels_best();
    const int TB = j->tb ? j->tb : j->T;
    for (int t0 = 0; t0 < j->T; t0 += TB)
        for (long h = h0; h < h1; h++) {
            const size_t off = (size_t)t0 * H * K + h * K;
            kda_seq x = { j->q + off, j->k + off, j->v + off, j->g + off, j->beta + (size_t)t0 * H + h, (size_t)H * K, H };
            float *S = j->S + (size_t)h * K * K, *o = j->o + off, *scr = j->scr + (size_t)ith * j->scr_n;
            const int n = j->T - t0 < TB ? j->T - t0 : TB;
            if (j->chunked) kda_chunked(S, K, &x, n, 64, o, (size_t)H * K, scr, vk);
            else kda_recurrent(S, K, &x, n, o, (size_t)H * K, scr, vk);
        }
}

int main(int argc, char **argv) {
    int Ts[8], nT = 0, rounds = 3, nth = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-r") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) nth = atoi(argv[++i]);
        else if (nT < 8) Ts[nT++] = atoi(argv[i]);
    }
    if (!nT) { Ts[0] = 512; Ts[1] = 2048; nT = 2; }
    if (rounds < 1 || rounds > 64) rounds = 3;
    ds4_pool *p1 = ds4_pool_new(1), *pn = ds4_pool_new(nth);
    nth = ds4_pool_size(pn);
    printf("bench_kda: H %d, K %d (state %d KB), %d rounds (medians), %d threads, exp table %s\n", H, K,
           H * K * K * 4 / 1024, rounds, nth, vec_kernels_best()->name);
    for (int it = 0; it < nT; it++) {
        const int T = Ts[it];
        const size_t n = (size_t)T * H * K, scr_n = kda_chunked_scratch(K, 64);
        float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *g = malloc(n * 4);
        float *beta = malloc((size_t)T * H * 4), *o = malloc(n * 4), *S = malloc((size_t)H * K * K * 4);
        float *scr = malloc((size_t)nth * scr_n * 4), u[K];
        uint64_t r = 1;
        for (size_t i = 0; i < (size_t)T * H; i++) {
            double sq = 0, sk = 0;
            for (int a = 0; a < K; a++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                q[i * K + a] = (float)((r >> 40) & 0xffff) / 65536.0f - 0.5f;
                k[i * K + a] = (float)((r >> 20) & 0xffff) / 65536.0f - 0.5f;
                v[i * K + a] = (float)((r >> 8) & 0xfff) / 4096.0f - 0.5f;
                g[i * K + a] = -5.0f * (float)((r >> 30) & 0x3ff) / 1024.0f;
                sq += (double)q[i * K + a] * q[i * K + a];
                sk += (double)k[i * K + a] * k[i * K + a];
            }
            for (int a = 0; a < K; a++) { q[i * K + a] /= (float)(sqrt(sq) * 11.3137); k[i * K + a] /= (float)sqrt(sk); }
            beta[i] = 0.5f;
        }
        enum { NF = 6 };
        const char *names[NF] = {"old (4 passes, token-major, 1 thread)", "kda_recurrent head-outer, 1 thread",
                                 "kda_recurrent head-outer, N threads", "kda_chunked(64) head-outer, 1 thread",
                                 "kda_chunked(64) head-outer, N threads", "kda_recurrent, blocks of 64 tokens, 1 thread"};
        double tm[NF][64], tc[NF][64];
        for (int rd = 0; rd < rounds; rd++)
            for (int f = 0; f < NF; f++) {
                memset(S, 0, (size_t)H * K * K * 4);
                const double t0 = bench_now(), c0 = bench_cpu_now();
                if (f == 0) {
                    for (int t = 0; t < T; t++)
                        old_step(S, q + (size_t)t * H * K, k + (size_t)t * H * K, v + (size_t)t * H * K,
                                 g + (size_t)t * H * K, beta + (size_t)t * H, u, o + (size_t)t * H * K);
                } else {
                    job j = { S, o, scr, q, k, v, g, beta, T, f == 3 || f == 4, f == 5 ? 64 : 0, scr_n };
                    ds4_pool_run(f == 2 || f == 4 ? pn : p1, task, &j);
                }
                tm[f][rd] = bench_now() - t0;
                tc[f][rd] = bench_cpu_now() - c0;
            }
        double base = 0;
        for (int f = 0; f < NF; f++) {
            const double m = bench_median(tm[f], rounds), cpu = bench_median(tc[f], rounds);
            if (!f) base = m;
            printf("  T %5d  %-40s %8.1f ms  %8.0f tok/s  x%.2f  (cpu %.1f ms)\n", T, names[f], m * 1e3, T / m,
                   base / m, cpu * 1e3);
        }
        free(q); free(k); free(v); free(g); free(beta); free(o); free(S); free(scr);
    }
    ds4_pool_free(p1);
    ds4_pool_free(pn);
    return 0;
}
