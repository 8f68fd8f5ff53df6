/*
 * profile.h -- DS4_PROFILE=1: where a forward pass's time goes, by stage
 * (issue 16).
 *
 * Owns: the per-stage wall/CPU counters and their report at exit.  Each
 * leaf step of a pass (a parallel section, or a serial loop on the calling
 * thread) adds its wall time and the process's CPU time (all threads: what
 * the pool's workers used, idle spinning included) to its stage; the
 * passes' totals less the stages is "other" (dispatch, bookkeeping, --dist
 * transfers, SSD reads).  Off, each leaf costs one predictable branch; on,
 * two clock reads per leaf (a few hundred per layer), which slows decode
 * by ~1 % and a 2048-token chunk by far less.
 *
 * Must not: change what a pass computes (tests/t_profile.sh checks the
 * logits are the same bits with it on) or allocate.
 */
#ifndef DS4_PROFILE_H
#define DS4_PROFILE_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

enum {
    PS_MM,       /* cpu_matmul_groups: every weight product */
    PS_QUANT,    /* activation rows quantized for the matmuls */
    PS_ATTN,     /* attention over the window and compressed rows, window append */
    PS_IDX,      /* indexer queries, scores, top-k */
    PS_COMP,     /* compressor frontiers: ape, pooling, finishing rows */
    PS_HC,       /* hyper-connections: HC input norm, mix, Sinkhorn, post; head mix */
    PS_NORM,     /* sublayer norms, q/kv norms, RoPE, KV roundings */
    PS_ROUTE,    /* router: softplus, top-k, weights */
    PS_SWIGLU,   /* SwiGLU of routed and shared experts */
    PS_MOEGS,    /* MoE gather (bucketing by expert) and scatter (sums), y */
    PS_EMBED,    /* token embedding, MTP input */
    PS_N
};

/* The matmul stage by kind of weight product, with the FLOPs each did
 * (2 * n_in * n_out per token row), so the report gives the step's own
 * GFLOP/s beside the kernels' benchmark figures. */
enum {
    PM_DENSE,    /* attention, shared expert, output head, MTP: every token row */
    PM_DENSE_F,  /* the same with float activations, on the fp32 units: the
                    F16/F32/BF16 weights (compressor, indexer, router, HC),
                    and every dense product under --no-qat */
    PM_GATEUP,   /* routed experts' gate and up */
    PM_DOWN,     /* routed experts' down */
    PM_N
};

typedef struct { uint64_t wall, cpu; } prof_t;

/* 0 not read yet, 1 off, 2 on (set by the first pass, prof_pass_begin) */
extern _Atomic int ds4_prof_state;
void ds4_prof_stage_add(int st, prof_t t0, prof_t t1);

#define PROF_ON() (atomic_load_explicit(&ds4_prof_state, memory_order_relaxed) == 2)

static inline uint64_t prof_clk_ns(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline prof_t prof_now(void) {
    prof_t t = { 0, 0 };
    if (PROF_ON()) {
        t.wall = prof_clk_ns(CLOCK_MONOTONIC);
        t.cpu = prof_clk_ns(CLOCK_PROCESS_CPUTIME_ID);
    }
    return t;
}

/* stage st took the time since t0 */
static inline void prof_add(int st, prof_t t0) {
    if (PROF_ON()) ds4_prof_stage_add(st, t0, prof_now());
}

/* a matmul leaf of kind pm that did `flops` from t0 to t1 (the caller,
 * run_mm, also counts it under PS_MM with the same t0, t1) */
void ds4_prof_mm_add(int pm, double flops, prof_t t0, prof_t t1);

/* A one-token matmul leaf (decode: every group has at most one token
 * row) whose groups all have weight type `type` (GGML_*; -1 when they
 * mix types): `bytes` of weights streamed in the time since t0 -- the
 * per-format GB/s of the decode step, beside the read probe.  Counted in
 * addition to prof_mm. */
void ds4_prof_mm_tok(int type, double bytes, prof_t t0, prof_t t1);

/* A batched matmul leaf (some group has more than 8 token rows): its
 * shape -- weight type (-1: mixed), row length n_in, output rows summed
 * over the ng groups, the most token rows of a group -- with its time and
 * FLOPs since t0, for the report's per-shape table (where the kernels'
 * bench figures and the step's differ), and its sections' thread idle time
 * (ds4_prof_mm_idle_take).  Counted in addition to prof_mm. */
void ds4_prof_mm_shape(int type, int n_in, long n_out, int ng, int maxrows, double flops, prof_t t0, prof_t t1);

/* a parallel matmul section: its threads spent `idle` ns of `total`
 * (wall x threads) not in their share: waking up, or waiting for the last
 * chunk */
void ds4_prof_mm_idle(uint64_t idle, uint64_t total);

/* The idle and total thread time of the sections this thread ran since
 * the last call (the leaf's own share, for the per-shape table); resets. */
void ds4_prof_mm_idle_take(uint64_t *idle, uint64_t *total);

/* time one leaf statement */
#define PROF(st, stmt) do { prof_t pt0_ = prof_now(); stmt; prof_add((st), pt0_); } while (0)

/* A pass begins (reads DS4_PROFILE once; the first pass registers the
 * report) / ends with `rows` rows. */
prof_t prof_pass_begin(void);
void prof_pass_end(prof_t t0, int rows);

#endif
