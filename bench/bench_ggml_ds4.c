/*
 * bench_ggml_ds4.c -- the ds4 side of bench_ggml: one token through the
 * engine's own entry point, cpu_matmul_groups (rows in 16-row chunks,
 * prefetch past chunk ends, the pool), with the best kernel table -- what a
 * decode step runs, not a bare kernel call.
 *
 * Owns: nothing outside bench_ggml.
 */
#include <stdlib.h>

#include "bench_ggml_ds4.h"
#include "engine/cpu_ops.h"
#include "kernels/quant.h"
#include "kernels/threadpool.h"

struct ds4_side {
    cpu_ctx cc;
    act_kind kind;
    uint32_t type;
    int n_in, n_out;
    size_t ws, arb;
    void *act;
    int sym;        /* Q8_0 weights without -128 codes, as the engine marks them */
};

ds4_side *ds4_side_new(uint32_t type, int n_in, int n_out, size_t ws, const float *x, int nth)
{
    ds4_side *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->cc.k = ds4_kernels_best();
    s->cc.pool = ds4_pool_new(nth);
    s->kind = act_kind_for(type, 0);
    s->type = type;
    s->n_in = n_in;
    s->n_out = n_out;
    s->ws = ws;
    s->arb = act_row_bytes(s->kind, n_in);
    s->act = aligned_alloc(64, (s->arb + 63) / 64 * 64);
    if (!s->cc.k || !s->cc.pool || !s->act) {
        if (s->cc.pool) ds4_pool_free(s->cc.pool);
        free(s->act);
        free(s);
        return NULL;
    }
    act_quantize_row(s->cc.k, s->kind, x, n_in, s->act);
    return s;
}

void ds4_side_scan(ds4_side *s, const uint8_t *w, size_t bytes)
{
    s->sym = s->type == GGML_Q8_0 && ds4_q8_0_sym(w, bytes / sizeof(block_q8_0));
}

void ds4_side_run(ds4_side *s, const uint8_t *w, float *y)
{
    mm_group g = { .W = { w, s->type, s->n_in, s->n_out, s->ws, s->sym }, .kind = s->kind, .act = s->act,
                   .act_stride = s->arb, .rows = NULL, .n_rows = 1, .out = y, .out_stride = (size_t)s->n_out };
    cpu_matmul_groups(&s->cc, &g, 1);
}
