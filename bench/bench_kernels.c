/*
 * bench_kernels.c -- `make bench-kernels`: throughput of the matmul kernels
 * and of their scheduling (cpu_matmul_groups) at the DeepSeek V4 Flash
 * shapes, against the machine's own memory bandwidth and int8/fp32 peaks.
 *
 * Owns: nothing outside this program.
 *
 * What it measures, all through the engine's real entry point
 * cpu_matmul_groups() on a ds4_pool of 1 and N threads:
 *   - decode (T = 1): a matvec per matrix.  Matrices are views into a pool
 *     of at least 1 GiB filled with valid random blocks of the format; every
 *     measurement walks the pool round-robin (continuing where the previous
 *     one stopped) until it has streamed --min-mb of weights, so the weights
 *     always come from DRAM, never from the 260 MB L3 of this machine kind.
 *     Reported as GB/s of weights streamed and as a fraction of the STREAM
 *     read bandwidth measured in the same run.
 *   - prefill (T = 32 and 256 token rows): GFLOP/s (2 * n_in * n_out * T)
 *     against the measured int8 peak (integer formats) or fp32 FMA peak
 *     (F16, F32).  Large matrices are cut to their first rows so that one
 *     measurement does about --prefill-gflop of work.
 *   - STREAM-style read (sum of a 2 GiB array with 64-byte loads, or a
 *     quarter of the free memory; tools/probe.c) and triad (a = b + s*c,
 *     counted as 12 bytes per float element, the STREAM convention); the
 *     array and the weight pool on 2 MB pages where the kernel gives them
 *     (probe_map), as the model's; the
 *     best of --reps, as STREAM reports (so the kernel ratios are
 *     conservative).
 *   - peaks: vpdpbusd zmm (AVX512-VNNI), vpdpbusd ymm (AVX-VNNI), AVX2
 *     vpmaddubsw+vpmaddwd+vpaddd, fp32 FMA (ymm and zmm), AMX-INT8 tdpbusd
 *     (full 16 x 64 tiles, four accumulators), from register-only
 *     loops with enough independent accumulators to cover the latencies;
 *     the best of --reps.
 * Every figure is the median of --reps repetitions; the machine is shared,
 * so compare variants inside one run (--kernels a,b runs several tables
 * side by side, interleaved per configuration).
 *
 *   build/bench/bench_kernels [--threads N] [--reps R] [--min-mb MB]
 *       [--prefill-gflop G] [--formats iq2_xxs,q2_k,q4_k,q8_0,mxfp4,f16,f32]
 *       [--shapes expert_up,expert_down,q_b,kv,out_a_grp,head,hc_fn]
 *       [--tokens 1,32,256] [--kernels best,avx2,scalar,...] [--csv]
 *       [--no-peaks] [--no-stream] [--cached]
 * --cached: decode over the first ~256 KiB per thread of one matrix, again
 * and again, so from cache: with the DRAM figure it tells compute-bound
 * kernels (the same speed) from memory-bound ones (%read then compares a
 * cached rate with DRAM: > 100 % is the point).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ds4.h"   /* ds4_default_threads */
#include "engine/cpu_ops.h"
#include "gguf/gguf.h"
#include "kernels/quant.h"
#include "kernels/threadpool.h"
#include "../tools/probe.h"
#include "bench_util.h"


/* ---------------------------------------------------------------------- */
/* small utilities                                                         */
/* ---------------------------------------------------------------------- */

static void *big_alloc(size_t n) {
    void *p = probe_map(n);   /* 2 MB pages, as the probe's array */
    if (!p) { perror("mmap"); exit(1); }
    return p;
}

/* ---------------------------------------------------------------------- */
/* formats and shapes                                                      */
/* ---------------------------------------------------------------------- */

typedef struct {
    const char *name;
    uint32_t type;
    int blk;          /* elements per block */
    int bytes;        /* bytes per block */
    int is_int;       /* quantized activations (int8 peak applies) */
} fmt_t;

static const fmt_t FMTS[] = {
    { "iq2_xxs", GGML_IQ2_XXS, 256, 66, 1 },
    { "q2_k", GGML_Q2_K, 256, 84, 1 },
    { "q4_k", GGML_Q4_K, 256, 144, 1 },
    { "q8_0", GGML_Q8_0, 32, 34, 1 },
    { "mxfp4", GGML_MXFP4, 32, 17, 1 },
    { "f16", GGML_F16, 1, 2, 0 },
    { "f32", GGML_F32, 1, 4, 0 },
};
#define NFMT (int)(sizeof FMTS / sizeof FMTS[0])

typedef struct {
    const char *name;
    int n_in, n_out, groups;   /* groups: independent inputs, n_out rows each */
} shape_t;

static const shape_t SHAPES[] = {
    { "expert_up", 4096, 2048, 1 },     /* routed/shared gate and up */
    { "expert_down", 2048, 4096, 1 },   /* routed/shared down */
    { "q_b", 1024, 32768, 1 },          /* attn_q_b */
    { "kv", 4096, 512, 1 },             /* attn_kv */
    { "out_a_grp", 4096, 1024, 8 },     /* attn_output_a, 8 groups */
    { "head", 4096, 129280, 1 },        /* output */
    { "hc_fn", 16384, 24, 1 },          /* hc_attn_fn / hc_ffn_fn (F16): few rows, long ones */
};
#define NSHAPE (int)(sizeof SHAPES / sizeof SHAPES[0])

static size_t row_bytes_of(const fmt_t *f, int n) { return (size_t)(n / f->blk) * (size_t)f->bytes; }

/* A pattern of valid random blocks: scales in the range real weights use,
 * random codes.  Denormal or NaN scales would make the float parts take
 * microcode assists and measure something else. */
static void fill_pattern(const fmt_t *f, uint8_t *p, size_t nblk) {
    for (size_t b = 0; b < nblk; b++) {
        uint8_t *q = p + b * (size_t)f->bytes;
        switch (f->type) {
        case GGML_F32: { float v = bench_frand(); memcpy(q, &v, 4); break; }
        case GGML_F16: { uint16_t h = ds4_f32_to_f16(bench_frand()); memcpy(q, &h, 2); break; }
        case GGML_Q8_0: {
            block_q8_0 *x = (block_q8_0 *)q;
            x->d = ds4_f32_to_f16(0.001f + 0.01f * (bench_frand() + 1));
            /* codes in [-127, 127], as every Q8_0 quantizer makes them */
            for (int i = 0; i < 32; i++) x->qs[i] = (int8_t)((int)(bench_rnd() % 255) - 127);
            break;
        }
        case GGML_Q2_K: {
            block_q2_K *x = (block_q2_K *)q;
            for (int i = 0; i < 16; i++) x->scales[i] = (uint8_t)bench_rnd();
            for (int i = 0; i < 64; i++) x->qs[i] = (uint8_t)bench_rnd();
            x->d = ds4_f32_to_f16(0.001f + 0.01f * (bench_frand() + 1));
            x->dmin = ds4_f32_to_f16(0.001f + 0.01f * (bench_frand() + 1));
            break;
        }
        case GGML_Q4_K: {
            block_q4_K *x = (block_q4_K *)q;
            for (int i = 0; i < 12; i++) x->scales[i] = (uint8_t)bench_rnd();
            for (int i = 0; i < 128; i++) x->qs[i] = (uint8_t)bench_rnd();
            x->d = ds4_f32_to_f16(0.001f + 0.01f * (bench_frand() + 1));
            x->dmin = ds4_f32_to_f16(0.001f + 0.01f * (bench_frand() + 1));
            break;
        }
        case GGML_MXFP4: {
            block_mxfp4 *x = (block_mxfp4 *)q;
            x->e = (uint8_t)(118 + bench_rnd() % 8);   /* 2^-10 .. 2^-3 */
            for (int i = 0; i < 16; i++) x->qs[i] = (uint8_t)bench_rnd();
            break;
        }
        case GGML_IQ2_XXS: {
            block_iq2_xxs *x = (block_iq2_xxs *)q;
            x->d = ds4_f32_to_f16(0.001f + 0.01f * (bench_frand() + 1));
            for (int i = 0; i < 32; i++) x->qs[i] = (uint16_t)bench_rnd();
            break;
        }
        }
    }
}

/* ---------------------------------------------------------------------- */
/* options                                                                 */
/* ---------------------------------------------------------------------- */

static struct {
    int threads;
    int reps;
    double min_mb;
    double prefill_gflop;
    int csv;
    int peaks, stream;
    int fmt_on[NFMT], shape_on[NSHAPE];
    int tokens[8], ntokens;
    const ds4_kernels *kern[6];
    int nkern;
    int cached;     /* --cached: decode over one ~256 KiB-per-thread slice, from cache */
} opt;

static int in_list(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return 1;
        p += len + (e ? 1 : 0);
    }
    return 0;
}

static const ds4_kernels *kernels_named(const char *name) {
    return ds4_kernels_by_name(name);
}

static void usage(void) {
    fprintf(stderr,
            "usage: bench_kernels [--threads N] [--reps R] [--min-mb MB] [--prefill-gflop G]\n"
            "       [--formats LIST] [--shapes LIST] [--tokens LIST] [--kernels LIST]\n"
            "       [--csv] [--no-peaks] [--no-stream] [--cached]\n");
    exit(2);
}

/* ---------------------------------------------------------------------- */
/* machine figures (tools/probe.c)                                         */
/* ---------------------------------------------------------------------- */

typedef struct { double read[2], triad[2]; } stream_res;   /* [1 thread, N threads] */

static void run_stream(ds4_pool *pools[2], stream_res *r) {
    for (int k = 0; k < 2; k++) {
        probe_stream_res s = probe_stream(probe_read_size(), ds4_pool_size(pools[k]), opt.reps);
        r->read[k] = s.read_gbs;
        r->triad[k] = s.triad_gbs;
    }
}

/* GOPS per configuration: [kind][1 thread, N threads] (0 = unsupported) */
static double peaks[PROBE_NKIND][2];

static void run_peaks(ds4_pool *pools[2]) {
    for (int kind = 0; kind < PROBE_NKIND; kind++)
        for (int k = 0; k < 2; k++) peaks[kind][k] = probe_peak(kind, ds4_pool_size(pools[k]), opt.reps);
}

static double int8_peak(int k) {
    double p = 0;
    for (int kind = PROBE_VNNI512; kind <= PROBE_AVX2_I8; kind++) if (peaks[kind][k] > p) p = peaks[kind][k];
    return p;
}

static double fp32_peak(int k) {
    return peaks[PROBE_FMA512][k] > peaks[PROBE_FMA256][k] ? peaks[PROBE_FMA512][k] : peaks[PROBE_FMA256][k];
}

/* ---------------------------------------------------------------------- */
/* matmul measurements                                                     */
/* ---------------------------------------------------------------------- */

typedef struct {
    const fmt_t *f;
    const shape_t *s;
    int T, thr_idx;      /* thr_idx: 0 = 1 thread, 1 = N threads */
    double ms, gbps, gflops;
    const char *kname;
    double share;        /* process CPU time / (wall time x threads) */
} result;

static result *results;
static int nresults, capresults;

static void add_result(result r) {
    if (nresults == capresults) {
        capresults = capresults ? 2 * capresults : 256;
        results = realloc(results, (size_t)capresults * sizeof *results);
        if (!results) { perror("realloc"); exit(1); }
    }
    results[nresults++] = r;
}

/* One configuration: `rows` rows of every group (the full shape for decode,
 * a cut for large prefills), matrices taken round-robin from the pool. */
typedef struct {
    const fmt_t *f;
    const shape_t *s;
    uint8_t *pool;
    size_t fill;            /* bytes of the pool holding valid blocks */
    size_t mat_bytes;       /* one slot: groups * n_out rows */
    size_t nslots, slot;
    uint8_t *act;           /* quantized activations: [group][T] rows */
    size_t act_rb;
    act_kind kind;
    float *out;
    int sym;                /* Q8_0 without -128 codes: the engine's mark (ds4_q8_0_sym) */
} mm_cfg;

static void run_one(mm_cfg *c, const cpu_ctx *cc, int T, int rows) {
    mm_group g[8];
    const shape_t *s = c->s;
    const uint8_t *base = c->pool + c->slot * c->mat_bytes;
    if (!(opt.cached && T == 1)) c->slot = (c->slot + 1) % c->nslots;
    size_t rb = row_bytes_of(c->f, s->n_in);
    for (int gi = 0; gi < s->groups; gi++) {
        mat_t W = { base + (size_t)gi * s->n_out * rb, c->f->type, s->n_in, rows, rb, c->sym };
        mm_group x = { .W = W, .kind = c->kind, .act = c->act + (size_t)gi * T * c->act_rb,
                       .act_stride = c->act_rb, .rows = NULL, .n_rows = T,
                       .out = c->out + (size_t)gi * rows, .out_stride = (size_t)s->groups * rows };
        g[gi] = x;
    }
    cpu_matmul_groups(cc, g, s->groups);
}

/* Rows of a measurement: the whole shape for decode; prefills cut to about
 * --prefill-gflop of work, a multiple of 64 rows. */
static int rows_for(const fmt_t *f, const shape_t *s, int T) {
    int rows = s->n_out;
    if (T == 1 && opt.cached) {
        /* ~256 KiB of weights a thread (fits L2 on every x86 core of the
         * last decade): whole 16-row strips, at least one a thread */
        double want = 262144.0 * opt.threads / ((double)s->groups * row_bytes_of(f, s->n_in));
        int r = (int)want / 16 * 16;
        if (r < 16 * opt.threads) r = 16 * opt.threads;
        return r < rows ? r : rows;
    }
    double flop_per_row = 2.0 * s->n_in * (double)T * s->groups;
    if (T > 1) {
        double want = opt.prefill_gflop * 1e9 / flop_per_row;
        if (want < rows) rows = want < 64 ? 64 : ((int)want + 63) / 64 * 64;
        if (rows > s->n_out) rows = s->n_out;
    }
    return rows;
}

static void measure(mm_cfg *c, const cpu_ctx *cc, int T, int thr_idx, const char *kname) {
    const shape_t *s = c->s;
    const int rows = rows_for(c->f, s, T);
    double flop_per_row = 2.0 * s->n_in * (double)T * s->groups;
    size_t bytes_per_call = (size_t)s->groups * rows * row_bytes_of(c->f, s->n_in);
    /* decode: enough calls to stream --min-mb; prefill: enough calls for
     * about 20 ms (one call of a few ms is dominated by wake-up and cache
     * warm-up effects) */
    int calls = 1;
    double tw = bench_now();
    run_one(c, cc, T, rows);   /* warm-up (code, pool threads, page tables) */
    tw = bench_now() - tw;
    if (T == 1) {
        double want = opt.min_mb * 1048576.0 / (double)bytes_per_call;
        calls = want < 1 ? 1 : (int)ceil(want);
    } else if (tw < 0.02) {
        calls = (int)ceil(0.02 / (tw > 1e-5 ? tw : 1e-5));
        if (calls > 50) calls = 50;
    }
    double t[32], sh[32];
    for (int rep = 0; rep < opt.reps; rep++) {
        double t0 = bench_now(), c0 = bench_cpu_now();
        for (int k = 0; k < calls; k++) run_one(c, cc, T, rows);
        double dt = bench_now() - t0;
        t[rep] = dt / calls;
        sh[rep] = (bench_cpu_now() - c0) / (dt * ds4_pool_size(cc->pool));
    }
    double tm = bench_median(t, opt.reps);
    result r = { c->f, s, T, thr_idx, tm * 1e3, (double)bytes_per_call / tm * 1e-9,
                 flop_per_row * rows / tm * 1e-9, kname, bench_median(sh, opt.reps) };
    add_result(r);
}

/* ---------------------------------------------------------------------- */
/* report                                                                  */
/* ---------------------------------------------------------------------- */

static void cpu_name(char *buf, size_t n) {
    snprintf(buf, n, "unknown cpu");
    FILE *fp = fopen("/proc/cpuinfo", "r");
    if (!fp) return;
    char line[512];
    while (fgets(line, sizeof line, fp)) {
        if (!strncmp(line, "model name", 10)) {
            char *p = strchr(line, ':');
            if (p) {
                p += 2;
                p[strcspn(p, "\n")] = 0;
                snprintf(buf, n, "%s", p);
            }
            break;
        }
    }
    fclose(fp);
}

int main(int argc, char **argv) {
    opt.threads = ds4_default_threads();
    opt.reps = 5;
    opt.min_mb = 512;
    opt.prefill_gflop = 4.0;
    opt.peaks = opt.stream = 1;
    for (int i = 0; i < NFMT; i++) opt.fmt_on[i] = 1;
    for (int i = 0; i < NSHAPE; i++) opt.shape_on[i] = 1;
    opt.tokens[0] = 1; opt.tokens[1] = 32; opt.tokens[2] = 256; opt.ntokens = 3;
    const char *kernels = "best";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--csv")) opt.csv = 1;
        else if (!strcmp(a, "--no-peaks")) opt.peaks = 0;
        else if (!strcmp(a, "--no-stream")) opt.stream = 0;
        else if (!strcmp(a, "--cached")) opt.cached = 1;
        else if (!v) usage();
        else if (!strcmp(a, "--threads")) { opt.threads = atoi(v); i++; }
        else if (!strcmp(a, "--reps")) { opt.reps = atoi(v); i++; }
        else if (!strcmp(a, "--min-mb")) { opt.min_mb = atof(v); i++; }
        else if (!strcmp(a, "--prefill-gflop")) { opt.prefill_gflop = atof(v); i++; }
        else if (!strcmp(a, "--kernels")) { kernels = v; i++; }
        else if (!strcmp(a, "--formats")) {
            for (int k = 0; k < NFMT; k++) opt.fmt_on[k] = in_list(v, FMTS[k].name);
            i++;
        } else if (!strcmp(a, "--shapes")) {
            for (int k = 0; k < NSHAPE; k++) opt.shape_on[k] = in_list(v, SHAPES[k].name);
            i++;
        } else if (!strcmp(a, "--tokens")) {
            opt.ntokens = 0;
            for (const char *p = v; *p && opt.ntokens < 8;) {
                opt.tokens[opt.ntokens++] = atoi(p);
                const char *e = strchr(p, ',');
                if (!e) break;
                p = e + 1;
            }
            i++;
        } else usage();
    }
    if (opt.threads < 1 || opt.reps < 1 || opt.reps > 15 || opt.ntokens < 1) usage();
    for (int k = 0; k < opt.ntokens; k++)
        if (opt.tokens[k] < 1 || opt.tokens[k] > 4096) usage();
    /* kernel tables, side by side */
    {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", kernels);
        for (char *p = strtok(buf, ","); p && opt.nkern < 6; p = strtok(NULL, ",")) {
            const ds4_kernels *k = kernels_named(p);
            if (!k) { fprintf(stderr, "bench_kernels: kernel table '%s' not available\n", p); return 2; }
            opt.kern[opt.nkern++] = k;
        }
    }

    ds4_pool *pools[2] = { ds4_pool_new(1), ds4_pool_new(opt.threads) };
    int nthr[2] = { 1, ds4_pool_size(pools[1]) };

    /* the pool: 1 GiB, or more when one matrix is larger */
    size_t pool_bytes = 1ull << 30;
    for (int f = 0; f < NFMT; f++)
        for (int s = 0; s < NSHAPE; s++) {
            if (!opt.fmt_on[f] || !opt.shape_on[s]) continue;
            size_t m = (size_t)SHAPES[s].groups * SHAPES[s].n_out * row_bytes_of(&FMTS[f], SHAPES[s].n_in);
            if (m > pool_bytes) pool_bytes = m;
        }
    uint8_t *pool = big_alloc(pool_bytes + 4096);

    char cpu[256];
    cpu_name(cpu, sizeof cpu);
    time_t tt = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M", localtime(&tt));

    stream_res sr = { { 0, 0 }, { 0, 0 } };
    if (opt.stream) run_stream(pools, &sr);
    if (opt.peaks) run_peaks(pools);

    if (!opt.csv) {
        double la[3] = { 0, 0, 0 };
        FILE *lf = fopen("/proc/loadavg", "r");
        if (lf) { if (fscanf(lf, "%lf %lf %lf", &la[0], &la[1], &la[2]) != 3) la[0] = -1; fclose(lf); }
        printf("bench_kernels: %s, %d threads, %s; medians of %d; decode streams >= %.0f MiB per "
               "measurement from a %.2f GiB pool; load average at start %.2f\n",
               cpu, nthr[1], date, opt.reps, opt.min_mb, pool_bytes / 1073741824.0, la[0]);
        if (opt.stream)
            printf("STREAM  read %.1f / %.1f GB/s   triad %.1f / %.1f GB/s   (1 / %d threads)\n",
                   sr.read[0], sr.read[1], sr.triad[0], sr.triad[1], nthr[1]);
        if (opt.peaks)
            for (int kind = 0; kind < PROBE_NKIND; kind++)
                if (peaks[kind][0] > 0)
                    printf("peak    %-44s %7.1f / %7.1f GOP/s\n", probe_kind_name(kind), peaks[kind][0], peaks[kind][1]);
        if (opt.peaks && peaks[PROBE_AMX_INT8][0] > 0) {
            /* what bounds the exact Q8_0/MXFP4 tiles (quant_amx.c) */
            probe_amx_share ov = probe_amx_overlap(opt.reps);
            printf("amx     fp32 multiplies beside one tdpbusd / tilestored per 64: zmm %.0f%% / %.0f%%, "
                   "ymm %.0f%% / %.0f%% of their rate alone (1 thread)\n",
                   100 * ov.zmm_tdp, 100 * ov.zmm_store, 100 * ov.ymm_tdp, 100 * ov.ymm_store);
        }
        printf("\n");
    }

    /* activations: up to 8 groups x the most tokens of the widest input */
    int maxT = 1;
    for (int k = 0; k < opt.ntokens; k++) if (opt.tokens[k] > maxT) maxT = opt.tokens[k];
    size_t act_bytes = (size_t)8 * maxT * 4096 * sizeof(float) + 4096;
    /* 64-byte aligned, as the engine's activation rows are (its scratch
     * is page-aligned and float rows are whole lines): malloc's large
     * blocks start 16 bytes into a page, and then every 64-byte load of a
     * float row splits two lines */
    float *xf = aligned_alloc(64, act_bytes);
    uint8_t *act = aligned_alloc(64, act_bytes);
    for (size_t i = 0; i < act_bytes / sizeof(float); i++) xf[i] = bench_frand();
    size_t out_floats = 0;
    for (int s = 0; s < NSHAPE; s++)
        for (int k = 0; k < opt.ntokens; k++)
            for (int f = 0; f < NFMT; f++) {
                size_t o = (size_t)SHAPES[s].groups * (size_t)rows_for(&FMTS[f], &SHAPES[s], opt.tokens[k]) *
                           (size_t)opt.tokens[k];
                if (o > out_floats) out_floats = o;
            }
    float *out = malloc(out_floats * sizeof(float));
    if (!xf || !act || !out) { perror("malloc"); return 1; }

    for (int fi = 0; fi < NFMT; fi++) {
        if (!opt.fmt_on[fi]) continue;
        const fmt_t *f = &FMTS[fi];
        /* fill the pool with this format (pattern of ~1 MiB of blocks) */
        size_t pat_blk = (1u << 20) / (size_t)f->bytes;
        uint8_t *pat = malloc(pat_blk * (size_t)f->bytes);
        fill_pattern(f, pat, pat_blk);
        /* the engine's load-time mark (ds4_q8_0_sym): the pool only repeats the pattern */
        const int sym = f->type == GGML_Q8_0 && ds4_q8_0_sym(pat, pat_blk);
        size_t need = 0;
        for (int s = 0; s < NSHAPE; s++) {
            if (!opt.shape_on[s]) continue;
            size_t m = (size_t)SHAPES[s].groups * SHAPES[s].n_out * row_bytes_of(f, SHAPES[s].n_in);
            if (m > need) need = m;
        }
        size_t fill = need > (1ull << 30) ? need : (1ull << 30);
        if (fill > pool_bytes) fill = pool_bytes;
        for (size_t off = 0; off < fill; off += pat_blk * (size_t)f->bytes) {
            size_t n = pat_blk * (size_t)f->bytes;
            if (off + n > fill) n = fill - off;
            memcpy(pool + off, pat, n);
        }
        free(pat);
        /* read the pool once: the fill left up to 1 GiB of dirty lines whose
         * write-backs would otherwise compete with the first measurements */
        probe_read_buffer(pool, fill, ds4_pool_size(pools[1]));
        act_kind kind = act_kind_for(f->type, 0);
        for (int si = 0; si < NSHAPE; si++) {
            if (!opt.shape_on[si]) continue;
            const shape_t *s = &SHAPES[si];
            mm_cfg c = { .f = f, .s = s, .pool = pool, .fill = fill, .kind = kind, .out = out, .sym = sym };
            c.mat_bytes = (size_t)s->groups * s->n_out * row_bytes_of(f, s->n_in);
            c.nslots = fill / c.mat_bytes;
            if (c.nslots < 1) c.nslots = 1;
            c.act_rb = act_row_bytes(kind, s->n_in);
            c.act = act;
            for (int r = 0; r < s->groups * maxT; r++)
                act_quantize_row(ds4_kernels_scalar(), kind, xf + (size_t)r * s->n_in, s->n_in, act + (size_t)r * c.act_rb);
            for (int ti = 0; ti < opt.ntokens; ti++)
                for (int k = 0; k < 2; k++)
                    for (int ki = 0; ki < opt.nkern; ki++) {
                        cpu_ctx cc = { pools[k], opt.kern[ki] };
                        measure(&c, &cc, opt.tokens[ti], k, opt.kern[ki]->name);
                    }
        }
    }

    /* report */
    if (opt.csv)
        printf("cpu,date,kernels,format,shape,n_in,n_out,groups,tokens,threads,ms,gbps,gflops,"
               "stream_read_gbps,stream_triad_gbps,frac_read,frac_triad,peak_gops,frac_peak,cpu_share,gflops_per_cpu\n");
    else
        printf("%-8s %-8s %-11s %4s %3s %9s %8s %9s %7s %7s %7s %5s %9s %7s\n", "kernels", "format", "shape", "T",
               "thr", "ms", "GB/s", "GFLOP/s", "%read", "%triad", "%peak", "cpu", "GF/cpu", "%peak/c");
    for (int i = 0; i < nresults; i++) {
        result *r = &results[i];
        int k = r->thr_idx;
        double rd = sr.read[k], tr = sr.triad[k];
        /* each kernel against the peak of the unit it runs on: the amx
         * table's batched integer tiles (at or above each format's
         * threshold) use the AMX tile unit */
        int on_amx = r->f->is_int && r->T >= ds4_amx_min_tok(r->f->type) && !strcmp(r->kname, "amx");
        double pk = on_amx ? peaks[PROBE_AMX_INT8][k] : r->f->is_int ? int8_peak(k) : fp32_peak(k);
        if (opt.csv) {
            printf("\"%s\",%s,%s,%s,%s,%d,%d,%d,%d,%d,%.4f,%.3f,%.3f,%.2f,%.2f,%.4f,%.4f,%.1f,%.4f,%.3f,%.3f\n",
                   cpu, date, r->kname, r->f->name, r->s->name, r->s->n_in, r->s->n_out, r->s->groups,
                   r->T, nthr[k], r->ms, r->gbps, r->gflops, rd, tr, rd > 0 ? r->gbps / rd : 0,
                   tr > 0 ? r->gbps / tr : 0, pk, pk > 0 ? r->gflops / pk : 0, r->share,
                   r->share > 0 ? r->gflops / r->share : 0);
        } else {
            char pr[16] = "", pt[16] = "", pp[16] = "";
            if (r->T == 1) {
                if (rd > 0) snprintf(pr, sizeof pr, "%.0f%%", 100 * r->gbps / rd);
                if (tr > 0) snprintf(pt, sizeof pt, "%.0f%%", 100 * r->gbps / tr);
            } else if (pk > 0) {
                snprintf(pp, sizeof pp, "%.1f%%", 100 * r->gflops / pk);
            }
            char pc[16] = "";
            double gc = r->share > 0 ? r->gflops / r->share : 0;
            if (r->T > 1 && pk > 0) snprintf(pc, sizeof pc, "%.1f%%", 100 * gc / pk);
            printf("%-8s %-8s %-11s %4d %3d %9.3f %8.2f %9.1f %7s %7s %7s %4.0f%% %9.1f %7s%s\n", r->kname,
                   r->f->name, r->s->name, r->T, nthr[k], r->ms, r->gbps, r->gflops, pr, pt, pp, 100 * r->share,
                   gc, pc, r->share < 0.9 ? " !" : "");
        }
    }
    if (!opt.csv)
        printf("\n%%read/%%triad: decode GB/s over the STREAM figure at the same thread count;"
               " %%peak: prefill GFLOP/s over the peak of the unit the kernel uses at the same thread count:"
               " the AMX int8 tile peak (amx table, q8_0 T >= %d, mxfp4 T >= %d, q2_k T >= %d, q4_k T >= %d,"
               " iq2_xxs T >= %d),"
               " else the int8 vector peak"
               " (integer formats) or the fp32 FMA peak (f16, f32); cpu: CPU time the run got over wall time x"
               " threads (\"!\" below 90%%: other jobs took cores, the figure is low); GF/cpu, %%peak/c: GFLOP/s over"
               " that share, i.e. per CPU-second of its threads (what the kernel does while it runs; the"
               " peaks are timed on each thread's CPU clock too), and its fraction of the peak.\n", DS4_AMX_MIN_TOK,
               DS4_AMX_MIN_TOK_MXFP4, DS4_AMX_MIN_TOK_Q2_K, DS4_AMX_MIN_TOK_Q4_K, DS4_AMX_MIN_TOK_IQ2_XXS);
    ds4_pool_free(pools[0]);
    ds4_pool_free(pools[1]);
    return 0;
}
