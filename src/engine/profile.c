/*
 * profile.c -- DS4_PROFILE=1 counters and the table printed at exit
 * (profile.h says what is measured and how).
 *
 * Owns: the counters.  Must not: be read for anything but the report.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/profile.h"
#include "gguf/gguf.h"

static const char *const prof_name[PS_N] = {
    "matmul", "act quantize", "attention", "indexer", "compressor", "HC",
    "norm/rope", "router", "swiglu", "moe gather/scatter", "embed",
};
static const char *const prof_mm_name[PM_N] = { "dense", "dense float", "routed gate/up", "routed down" };
_Atomic int ds4_prof_state;
static _Atomic uint64_t prof_wall[PS_N], prof_cpu[PS_N], prof_tot_wall, prof_tot_cpu;
static _Atomic uint64_t prof_passes, prof_rows;
static _Atomic uint64_t prof_mm_wall[PM_N], prof_mm_cpu[PM_N], prof_mm_mflop[PM_N];
static _Atomic uint64_t prof_mm_idle, prof_mm_thr;
/* one-token leaves by weight type; slot PT_N: leaves mixing types */
enum { PT_N = 64 };
static _Atomic uint64_t prof_tok_wall[PT_N + 1], prof_tok_bytes[PT_N + 1], prof_tok_calls[PT_N + 1];

void ds4_prof_stage_add(int st, prof_t t0, prof_t t1) {
    atomic_fetch_add_explicit(&prof_wall[st], t1.wall - t0.wall, memory_order_relaxed);
    atomic_fetch_add_explicit(&prof_cpu[st], t1.cpu - t0.cpu, memory_order_relaxed);
}

void ds4_prof_mm_add(int pm, double flops, prof_t t0, prof_t t1) {
    atomic_fetch_add_explicit(&prof_mm_wall[pm], t1.wall - t0.wall, memory_order_relaxed);
    atomic_fetch_add_explicit(&prof_mm_cpu[pm], t1.cpu - t0.cpu, memory_order_relaxed);
    atomic_fetch_add_explicit(&prof_mm_mflop[pm], (uint64_t)(flops * 1e-6 + 0.5), memory_order_relaxed);
}

/* the weight formats' names (not gguf.c's ggml_type_name: this file is
 * linked into bench-ggml beside ggml itself, which defines that name) */
static const char *prof_type_name(int t) {
    switch (t) {
    case GGML_F32: return "F32";
    case GGML_F16: return "F16";
    case GGML_BF16: return "BF16";
    case GGML_Q8_0: return "Q8_0";
    case GGML_Q2_K: return "Q2_K";
    case GGML_Q4_K: return "Q4_K";
    case GGML_IQ2_XXS: return "IQ2_XXS";
    case GGML_Q3_K: return "Q3_K";
    case GGML_Q5_K: return "Q5_K";
    case GGML_Q6_K: return "Q6_K";
    case GGML_IQ4_XS: return "IQ4_XS";
    case GGML_MXFP4: return "MXFP4";
    default: return "other";
    }
}

void ds4_prof_mm_tok(int type, double bytes, prof_t t0, prof_t t1) {
    int k = type >= 0 && type < PT_N ? type : PT_N;
    atomic_fetch_add_explicit(&prof_tok_wall[k], t1.wall - t0.wall, memory_order_relaxed);
    atomic_fetch_add_explicit(&prof_tok_bytes[k], (uint64_t)(bytes + 0.5), memory_order_relaxed);
    atomic_fetch_add_explicit(&prof_tok_calls[k], 1, memory_order_relaxed);
}

/* Batched leaves by shape; the key is (type, n_in, n_out, ng), maxrows is
 * the largest seen.  A mutex: only DS4_PROFILE runs reach it. */
enum { PSH_N = 48 };
typedef struct {
    int type, n_in, ng, maxrows;
    long n_out;
    uint64_t calls, wall, cpu, idle, thr;
    double flops;
} prof_shape;
static prof_shape prof_shapes[PSH_N];
static int prof_nshapes;
static uint64_t prof_shape_other_wall;
static pthread_mutex_t prof_shape_mu = PTHREAD_MUTEX_INITIALIZER;

void ds4_prof_mm_shape(int type, int n_in, long n_out, int ng, int maxrows, double flops, prof_t t0, prof_t t1) {
    uint64_t idle, thr;
    pthread_mutex_lock(&prof_shape_mu);
    prof_shape *e = NULL;
    for (int i = 0; i < prof_nshapes && !e; i++) {
        prof_shape *s = &prof_shapes[i];
        if (s->type == type && s->n_in == n_in && s->n_out == n_out && s->ng == ng) e = s;
    }
    if (!e && prof_nshapes < PSH_N) {
        e = &prof_shapes[prof_nshapes++];
        *e = (prof_shape){ .type = type, .n_in = n_in, .n_out = n_out, .ng = ng };
    }
    if (e) {
        e->calls++;
        e->wall += t1.wall - t0.wall;
        e->cpu += t1.cpu - t0.cpu;
        e->flops += flops;
        ds4_prof_mm_idle_take(&idle, &thr);
        e->idle += idle;
        e->thr += thr;
        if (maxrows > e->maxrows) e->maxrows = maxrows;
    } else {
        prof_shape_other_wall += t1.wall - t0.wall;
    }
    pthread_mutex_unlock(&prof_shape_mu);
}

static int prof_shape_cmp(const void *a, const void *b) {
    const prof_shape *x = a, *y = b;
    return x->wall < y->wall ? 1 : x->wall > y->wall ? -1 : 0;
}

/* the sections this thread ran since its last take (a leaf runs its
 * sections on the calling thread) */
static _Thread_local uint64_t prof_last_idle, prof_last_thr;

void ds4_prof_mm_idle(uint64_t idle, uint64_t total) {
    atomic_fetch_add_explicit(&prof_mm_idle, idle, memory_order_relaxed);
    atomic_fetch_add_explicit(&prof_mm_thr, total, memory_order_relaxed);
    prof_last_idle += idle;
    prof_last_thr += total;
}

void ds4_prof_mm_idle_take(uint64_t *idle, uint64_t *total) {
    *idle = prof_last_idle;
    *total = prof_last_thr;
    prof_last_idle = prof_last_thr = 0;
}

static void prof_report(void) {
    double tw = (double)prof_tot_wall * 1e-9, tc = (double)prof_tot_cpu * 1e-9, sw = 0, sc = 0;
    fprintf(stderr, "ds4 profile (DS4_PROFILE): %llu passes, %llu rows, wall %.3f s, CPU %.3f s\n",
            (unsigned long long)prof_passes, (unsigned long long)prof_rows, tw, tc);
    fprintf(stderr, "  %-20s %10s %7s %10s %7s\n", "stage", "wall s", "wall %", "CPU s", "CPU %");
    for (int i = 0; i <= PS_N; i++) {
        double w, c;
        if (i < PS_N) { w = (double)prof_wall[i] * 1e-9; c = (double)prof_cpu[i] * 1e-9; sw += w; sc += c; }
        else { w = tw - sw; c = tc - sc; }
        fprintf(stderr, "  %-20s %10.3f %6.1f%% %10.3f %6.1f%%\n", i < PS_N ? prof_name[i] : "other",
                w, tw > 0 ? 100 * w / tw : 0, c, tc > 0 ? 100 * c / tc : 0);
    }
    double mw = (double)prof_wall[PS_MM] * 1e-9, mc = (double)prof_cpu[PS_MM] * 1e-9;
    fprintf(stderr, "  outside the matmuls: %.1f%% of wall, %.1f%% of CPU\n",
            tw > 0 ? 100 * (tw - mw) / tw : 0, tc > 0 ? 100 * (tc - mc) / tc : 0);
    /* GFLOP/s over wall time (what the step got) and per CPU-second (what
     * the kernels do while they run, as bench_kernels' GF/cpu) */
    fprintf(stderr, "  %-20s %10s %7s %10s %10s %10s\n", "matmul by kind", "wall s", "GFLOP", "GFLOP/s",
            "CPU s", "GF/cpu-s");
    double fl = 0;
    for (int i = 0; i <= PM_N; i++) {
        double w, c, g;
        if (i < PM_N) {
            w = (double)prof_mm_wall[i] * 1e-9; c = (double)prof_mm_cpu[i] * 1e-9;
            g = (double)prof_mm_mflop[i] * 1e-3; fl += g;
        } else { w = mw; c = mc; g = fl; }
        fprintf(stderr, "  %-20s %10.3f %7.1f %10.1f %10.3f %10.1f\n", i < PM_N ? prof_mm_name[i] : "all",
                w, g, w > 0 ? g / w : 0, c, c > 0 ? g / c : 0);
    }
    fprintf(stderr, "  matmul thread idle: %.1f%% of the parallel sections' thread time (%.3f of %.3f s)\n",
            prof_mm_thr ? 100.0 * (double)prof_mm_idle / (double)prof_mm_thr : 0, (double)prof_mm_idle * 1e-9,
            (double)prof_mm_thr * 1e-9);
    if (prof_nshapes) {
        /* batched leaves by shape, slowest first: where the step's figures
         * and bench_kernels' (one shape, one call) part */
        qsort(prof_shapes, (size_t)prof_nshapes, sizeof prof_shapes[0], prof_shape_cmp);
        fprintf(stderr, "  %-30s %7s %7s %10s %8s %10s %10s %7s\n", "batched matmul by shape", "calls", "tokens",
                "wall s", "GFLOP", "GFLOP/s", "GF/cpu-s", "idle %");
        for (int i = 0; i < prof_nshapes; i++) {
            const prof_shape *e = &prof_shapes[i];
            char name[64];
            snprintf(name, sizeof name, "%s %dx%ld%s", e->type < 0 ? "mixed" : prof_type_name(e->type), e->n_in,
                     e->n_out, e->ng > 1 ? " grp" : "");
            if (e->ng > 1) snprintf(name + strlen(name), sizeof name - strlen(name), "%d", e->ng);
            const double w = (double)e->wall * 1e-9, c = (double)e->cpu * 1e-9, g = e->flops * 1e-9;
            fprintf(stderr, "  %-30s %7llu %7d %10.3f %8.1f %10.1f %10.1f %6.1f%%\n", name,
                    (unsigned long long)e->calls, e->maxrows, w, g, w > 0 ? g / w : 0, c > 0 ? g / c : 0,
                    e->thr ? 100.0 * (double)e->idle / (double)e->thr : 0);
        }
        if (prof_shape_other_wall)
            fprintf(stderr, "  (further shapes: %.3f s)\n", (double)prof_shape_other_wall * 1e-9);
    }
    /* one-token leaves (decode) by weight format: weight bytes over wall
     * time, to set beside a read-bandwidth probe (ds4-bench prints one) */
    uint64_t calls = 0, bytes = 0, wall = 0;
    for (int i = 0; i <= PT_N; i++) calls += prof_tok_calls[i];
    if (!calls) return;
    fprintf(stderr, "  %-20s %10s %7s %10s %10s\n", "one-token by format", "wall s", "calls", "MB", "GB/s");
    for (int i = 0; i <= PT_N + 1; i++) {
        uint64_t w, b, c;
        const char *name;
        if (i <= PT_N) {
            if (!prof_tok_calls[i]) continue;
            w = prof_tok_wall[i]; b = prof_tok_bytes[i]; c = prof_tok_calls[i];
            wall += w; bytes += b;
            name = i < PT_N ? prof_type_name(i) : "mixed";
        } else { w = wall; b = bytes; c = calls; name = "all"; }
        fprintf(stderr, "  %-20s %10.3f %7llu %10.3f %10.2f\n", name, (double)w * 1e-9, (unsigned long long)c,
                (double)b * 1e-6, w ? (double)b / (double)w : 0);
    }
}

prof_t prof_pass_begin(void) {
    if (!atomic_load_explicit(&ds4_prof_state, memory_order_relaxed)) {
        const char *e = getenv("DS4_PROFILE");
        int want = e && *e && strcmp(e, "0") ? 2 : 1, expect = 0;
        if (atomic_compare_exchange_strong(&ds4_prof_state, &expect, want) && want == 2) atexit(prof_report);
    }
    return prof_now();
}

void prof_pass_end(prof_t t0, int rows) {
    if (!PROF_ON()) return;
    prof_t t = prof_now();
    atomic_fetch_add_explicit(&prof_tot_wall, t.wall - t0.wall, memory_order_relaxed);
    atomic_fetch_add_explicit(&prof_tot_cpu, t.cpu - t0.cpu, memory_order_relaxed);
    atomic_fetch_add_explicit(&prof_passes, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&prof_rows, (uint64_t)rows, memory_order_relaxed);
}
