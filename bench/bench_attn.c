/*
 * bench_attn.c -- `make bench-attn`: throughput of the attention inner
 * kernels (src/kernels/vec_ops.c) at the DeepSeek V4 Flash shape, against
 * the machine's fp32 FMA peak.
 *
 * Owns: nothing outside this program.
 *
 * One token's attention as deepseek4.c's attn_task runs it, minus the
 * key gathering and the softmax: n_head query rows of head_dim floats
 * against nk key rows (f32, contiguous, as attn_task's converted copy of a
 * token's f16 keys), in blocks of VEC_HB heads:
 *   - scores: dot4x4 over four keys at a time, then dot4 for the rest;
 *   - values: wsum4 over all keys (values are the keys).
 * Each is 2 * n_head * nk * head_dim flops per token.  And the indexer's
 * scores of one token over --idx-rows compressed rows (64 heads x 128,
 * --idx-heads/--idx-dim): the float path (dot4x4 per four rows and four
 * heads, the weighted relu summed over the heads, as deepseek4.c's
 * idx_score4) and the coded path (idx_score16, 16 rows a call, on FP4
 * codes), against the fp32 FMA peak and the vpdpbusd zmm peak.
 * nk defaults to the
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
 *       [--idx-rows 2048] [--idx-heads 64] [--idx-dim 128]
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
            "       [--kernels LIST] [--idx-rows LIST] [--idx-heads H] [--idx-dim D]\n"
            "  one thread; the attention score (dot4x4) and value (wsum4) kernels of\n"
            "  every vector table, interleaved, GFLOP/s and %% of the fp32 FMA peak;\n"
            "  then the indexer's scores of one token over --idx-rows compressed rows\n"
            "  (default 2048), float path (dot4x4) and coded path (idx_score16, %% of\n"
            "  the vpdpbusd peak); --idx-rows 0 skips them\n");
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

/* the attention's arguments of run() */
typedef struct {
    int which, H, d, nk;
    const float *q;
    float *o, *w;
    const float *const *kp;
} attn_ctx;

static void attn_op(const vec_kernels *vk, const void *ctx, int n) {
    const attn_ctx *a = ctx;
    run(vk, a->which, a->q, a->o, a->kp, a->w, a->H, a->d, a->nk, n);
}

/* One measured operation: run it `n` times with table vk. */
typedef void (*bench_op)(const vec_kernels *vk, const void *ctx, int n);

/* med[k]: the median over `reps` of the seconds `tokens` runs of op take
 * with table k (the tables used, interleaved per repetition, after one
 * warm-up run each).  -1 when out of memory. */
static int time_tables(const vec_kernels *const tab[3], const int use[3], int reps, int tokens, bench_op op,
                       const void *ctx, double med[3]) {
    double *ms = calloc((size_t)3 * reps, sizeof(double));
    if (!ms) return -1;
    for (int k = 0; k < 3; k++)
        if (use[k]) op(tab[k], ctx, 1);
    for (int rep = 0; rep < reps; rep++)
        for (int k = 0; k < 3; k++) {
            if (!use[k]) continue;
            double t0 = bench_now();
            op(tab[k], ctx, tokens);
            ms[k * reps + rep] = bench_now() - t0;
        }
    for (int k = 0; k < 3; k++) med[k] = use[k] ? bench_median(ms + k * reps, reps) : 0;
    free(ms);
    return 0;
}

/* One op timed on every table in use (time_tables), then one result line
 * per table: GFLOP/s and, where pk[k] > 0, the fraction of that peak.
 * -1: out of memory. */
static int time_and_print(const vec_kernels *const tab[3], const int use[3], int reps, int tokens, bench_op op,
                          const void *ctx, const char *name, int n, double flop, const double pk[3]) {
    double med[3];
    if (time_tables(tab, use, reps, tokens, op, ctx, med)) return -1;
    for (int k = 0; k < 3; k++) {
        if (!use[k]) continue;
        const double gf = flop / med[k] * 1e-9;
        printf("%-8s %-10s %5d %10.1f %9.1f", tab[k]->name, name, n, med[k] / tokens * 1e6, gf);
        if (pk[k] > 0) printf("  %5.1f%%\n", 100.0 * gf / pk[k]);
        else printf("       -\n");
    }
    return 0;
}

/* The indexer data of one token: float queries and rows holding FP4
 * values times powers of two, and the same as codes for idx_score16 (rows
 * in 16-row groups, vec_ops.h's layout). */
typedef struct {
    int IH, ID, nb, n;
    float *qf, *kf, *w, *pq, *pk;
    int8_t *qc;
    int32_t *qs;
    uint8_t *kc;
} idx_data;

static int idx_data_init(idx_data *x, int IH, int ID, int n) {
    const int nb = ID / 32, ng = (n + 15) / 16;
    *x = (idx_data){ IH, ID, nb, n, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL };
    x->qf = aligned_alloc(64, (size_t)IH * ID * sizeof(float));
    x->kf = aligned_alloc(64, (size_t)ng * 16 * ID * sizeof(float));
    x->w = malloc((size_t)IH * sizeof(float));
    x->pq = malloc((size_t)IH * nb * sizeof(float));
    x->pk = malloc((size_t)ng * 16 * nb * sizeof(float));
    x->qc = malloc((size_t)IH * ID);
    x->qs = malloc((size_t)IH * nb * sizeof(int32_t));
    x->kc = aligned_alloc(64, (size_t)ng * 16 * ID);
    if (!x->qf || !x->kf || !x->w || !x->pq || !x->pk || !x->qc || !x->qs || !x->kc) return -1;
    for (int h = 0; h < IH; h++) {
        x->w[h] = bench_frand();
        for (int b = 0; b < nb; b++) {
            int32_t sum = 0;
            x->pq[h * nb + b] = b % 2 ? 0.25f : 0.125f;
            for (int i = 32 * b; i < 32 * b + 32; i++) {
                const int c = (int)(bench_frand() * 15.9f);
                x->qc[h * ID + i] = (int8_t)c;
                x->qf[h * ID + i] = (float)c * x->pq[h * nb + b];
                sum += c;
            }
            x->qs[h * nb + b] = 16 * sum;
        }
    }
    for (int r = 0; r < ng * 16; r++)
        for (int b = 0; b < nb; b++) {
            const float p = r % 3 ? 0.5f : 1.0f;
            x->pk[(r / 16) * 16 * nb + 16 * b + r % 16] = p;
            for (int i = 32 * b; i < 32 * b + 32; i++) {
                const int c = (int)(bench_frand() * 15.9f);
                x->kf[(size_t)r * ID + i] = (float)c * p;
                x->kc[(size_t)(r / 16) * 16 * ID + 64 * (i / 4) + 4 * (r % 16) + i % 4] = (uint8_t)(c + 16);
            }
        }
    return 0;
}

static void idx_data_free(idx_data *x) {
    free(x->qf); free(x->kf); free(x->w); free(x->pq); free(x->pk); free(x->qc); free(x->qs); free(x->kc);
}

/* One token's indexer scores over all rows: the float path (which = 0) or
 * the coded one (which = 1) */
static void run_idx(const vec_kernels *vk, int which, const idx_data *x, float *out) {
    const int IH = x->IH, ID = x->ID;
    if (which == 1) {
        for (int g = 0; g < (x->n + 15) / 16; g++)
            vk->idx_score16(x->qc, x->pq, x->qs, x->w, IH, x->nb, x->kc + (size_t)g * 16 * ID,
                            x->pk + (size_t)g * 16 * x->nb, out + 16 * g);
        return;
    }
    for (int r = 0; r + 4 <= x->n; r += 4) {
        const float *rows[4] = { x->kf + (size_t)r * ID, x->kf + (size_t)(r + 1) * ID, x->kf + (size_t)(r + 2) * ID,
                                 x->kf + (size_t)(r + 3) * ID };
        float s[4] = { 0, 0, 0, 0 };
        for (int h = 0; h + VEC_HB <= IH; h += VEC_HB) {
            float d16[16];
            vk->dot4x4(x->qf + (size_t)h * ID, ID, rows, ID, d16);
            for (int k = 0; k < VEC_HB; k++)
                for (int j = 0; j < 4; j++) s[j] += d16[k * 4 + j] > 0 ? x->w[h + k] * d16[k * 4 + j] : 0.0f;
        }
        memcpy(out + r, s, sizeof s);
    }
}

typedef struct {
    int which;
    const idx_data *x;
    float *out;
} idx_ctx;

static void idx_op(const vec_kernels *vk, const void *ctx, int n) {
    const idx_ctx *c = ctx;
    for (int t = 0; t < n; t++) run_idx(vk, c->which, c->x, c->out);
}

int main(int argc, char **argv) {
    int reps = 7, H = 64, d = 512, tokens = 16;
    const char *keys = "640,192", *kernels = NULL, *idx_rows = "2048";
    int IH = 64, ID = 128;
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
        else if (!strcmp(a, "--idx-rows")) { idx_rows = v; i++; }
        else if (!strcmp(a, "--idx-heads")) { IH = atoi(v); i++; }
        else if (!strcmp(a, "--idx-dim")) { ID = atoi(v); i++; }
        else usage(2);
    }
    if (reps < 1 || reps > 1000 || H < VEC_HB || H % VEC_HB || d < 1 || d > 65536 || tokens < 1 ||
        IH < VEC_HB || IH % VEC_HB || IH > 4096 || ID < 32 || ID % 32 || ID > 4096)
        usage(2);

    const vec_kernels *tab[3] = { vec_kernels_scalar(), vec_kernels_avx2(), vec_kernels_avx512() };
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
    /* each table's fp32 FMA peak: none for scalar, ymm for avx2, zmm for avx512 */
    const double fma_pk[3] = { 0, peak256, peak512 };

    time_t tnow = time(NULL);
    char date[32];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M", localtime(&tnow));
    printf("bench_attn: 1 thread, %s; %d heads x head_dim %d, %d tokens per measurement, medians of %d\n",
           date, H, d, tokens, reps);
    printf("peak    fp32 fma ymm %.1f GFLOP/s, zmm %.1f GFLOP/s\n\n", peak256, peak512);
    printf("kernels  op          keys   us/token   GFLOP/s   %%peak\n");

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
            const attn_ctx a = { which, H, d, nk, q, o, w, kp };
            if (time_and_print(tab, use, reps, tokens, attn_op, &a, which ? "wsum4" : "dot4x4", nk, flop, fma_pk)) {
                fprintf(stderr, "bench_attn: out of memory\n");
                return 1;
            }
        }
        free(kf); free(q); free(o); free(w); free(kp);
    }
    /* the indexer: float path against the FMA peak, coded path against
     * the int8 dot peak of the instructions the table uses (avx512:
     * vpdpbusd zmm where the CPU has VNNI, avx2: vpmaddubsw) */
    const double vnni = probe_peak(PROBE_VNNI512, 1, reps);
    /* the avx2 coded kernel adds its vpmaddubsw pairs in 16 bits (two
     * instructions per 32 multiply-adds): the three-instruction avx2
     * probe is no peak for it */
    const double int8_pk[3] = { 0, 0, probe_kind_supported(PROBE_VNNI512) ? vnni : 0 };
    snprintf(buf, sizeof buf, "%s", idx_rows);
    int idx_header = 0;
    for (char *save = NULL, *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        const int n = atoi(p);
        if (n == 0) continue;
        if (n < 4 || n > 1 << 20) usage(2);
        if (!idx_header) {
            printf("\nindexer: %d heads x %d, one token; peak int8 dot: vpdpbusd zmm %.1f GOP/s\n", IH, ID, vnni);
            printf("kernels  op         rows   us/token   GFLOP/s   %%peak\n");
            idx_header = 1;
        }
        idx_data x;
        float *out = malloc((size_t)(n + 15) / 16 * 16 * sizeof(float));
        if (!out || idx_data_init(&x, IH, ID, n)) { fprintf(stderr, "bench_attn: out of memory\n"); return 1; }
        const double flop = 2.0 * IH * (double)n * ID * tokens;
        for (int which = 0; which < 2; which++) {
            const idx_ctx ic = { which, &x, out };
            if (time_and_print(tab, use, reps, tokens, idx_op, &ic, which ? "idx-int8" : "idx-f32", n, flop,
                               which ? int8_pk : fma_pk)) {
                fprintf(stderr, "bench_attn: out of memory\n");
                return 1;
            }
        }
        idx_data_free(&x);
        free(out);
    }
    printf("\nflops: 2 x heads x keys x head_dim per token for each op; %%peak over the\n"
           "fp32 FMA peak of the table's vector width (avx2: ymm, avx512: zmm), one thread;\n"
           "the indexer's coded path over the vpdpbusd zmm peak (avx512 table on a VNNI CPU;\n"
           "none given for avx2, whose kernel has no probe of its own).\n");
    return 0;
}
