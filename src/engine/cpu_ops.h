/*
 * cpu_ops.h -- CPU building blocks of the DeepSeek V4 graph: matrix
 * products over quantized weights (single and grouped, multithreaded),
 * norms, RoPE/YaRN tables, and the storage roundings of the KV cache
 * (FP8 E4M3, Hadamard + FP4 E2M1, f16).
 *
 * Owns: how a weight matrix meets its activations (which activation
 * quantization, which kernel, how rows are split across threads).
 * Must not: know the layer graph (deepseek4.c) or session state.
 */
#ifndef DS4_CPU_OPS_H
#define DS4_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/model.h"
#include "kernels/quant.h"
#include "kernels/threadpool.h"
#include "kernels/vec_ops.h"

#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

typedef enum { ACT_F32 = 0, ACT_Q8_0A = 1, ACT_Q8_K = 2 } act_kind;

/* A 2-D weight view (one expert of a 3-D tensor, or a row slice). */
typedef struct {
    const uint8_t *w;
    uint32_t type;
    int n_in, n_out;
    size_t row_bytes;
    int sym;                    /* Q8_0 without -128 codes (ds4_tensor.q8_sym) */
} mat_t;

mat_t mat_of(const ds4_tensor *t);
mat_t mat_expert(const ds4_tensor *t, int e);
mat_t mat_rows(mat_t m, int r0, int n);

/* Activation kind a weight type gets: Q8_0 weights see Q8_0 activations,
 * 2/4-bit K and IQ weights see Q8_K, float weights (and everything in the
 * --no-qat diagnostic) see float activations (docs/MODEL.md §7.1). */
act_kind act_kind_for(uint32_t wtype, int no_qat);
size_t act_row_bytes(act_kind k, int n);
/* elements a quantized block of kind k covers (1 for ACT_F32) */
int act_block_elems(act_kind k);
/* One activation row through the kernel table's quantizer (every table
 * gives the scalar quantizers' bytes); ACT_F32 copies the floats. */
void act_quantize_row(const ds4_kernels *k, act_kind kind, const float *x, int n, void *out);

/* One group of a grouped matmul: out[j][o] = W[o] . act[rows[j]] for
 * j < n_rows, o < W.n_out.  rows == NULL means rows 0..n_rows-1. */
typedef struct {
    mat_t W;
    act_kind kind;
    const uint8_t *act;
    size_t act_stride;          /* bytes between activation rows */
    const int *rows;
    int n_rows;
    float *out;
    size_t out_stride;          /* floats between output rows */
} mm_group;

typedef struct {
    ds4_pool *pool;
    const ds4_kernels *k;
} cpu_ctx;

/* Runs every group; work is split across threads by cost (rows x tokens),
 * and each output element is always computed by the same row-dot kernel,
 * so a batch gives bit-identical results to one token at a time. */
void cpu_matmul_groups(const cpu_ctx *c, const mm_group *g, int ng);
/* 2 * n_in * n_out * n_rows summed over the groups (DS4_PROFILE) */
double mm_groups_flops(const mm_group *g, int ng);

/* Convenience: quantize T float rows (stride xs floats) into `scratch` as
 * the weight needs, then Y[t] = W x[t]. */
void cpu_matmul(const cpu_ctx *c, mat_t W, int no_qat, const float *x,
                size_t xs, int T, float *y, size_t ys, void *scratch);

/* Row helpers. */
void rms_norm(const float *x, const float *w, int n, float eps, float *out);
float rms_scale(const float *x, int n, float eps);
/* The same per row, bit for bit, for nr rows at once (row r at x + r*xs,
 * output row r at out + r*os; out may equal x when os == xs): faster
 * because the rows' serial sums overlap, side by side in the lanes of vk's
 * sumsq_rows (cpu_ops.c).  stream: the outputs go out with streaming
 * stores (rows_store64) and are fenced at the end. */
void rms_scale_rows(const vec_kernels *vk, const float *x, size_t xs, int nr, int n, float eps, float *out);
void rms_norm_rows(const vec_kernels *vk, const float *x, size_t xs, const float *w, int nr, int n, float eps,
                   float *out, size_t os, int stream);

/* 64 floats out, with streaming stores when `stream`: for rows written
 * once and read after they have left the cache (a prefill chunk's HC
 * rows, 134 MB at 2048 tokens), whose lines ordinary stores would read
 * first (write-allocate).  A thread that streamed calls rows_store_fence
 * before the others may read.  SSE2 is in every x86-64. */
static inline void rows_store64(float *o, const float *v, int stream) {
#if defined(__SSE2__)
    if (stream && ((uintptr_t)o & 15) == 0) {
        for (int i = 0; i < 64; i += 4) _mm_stream_ps(o + i, _mm_loadu_ps(v + i));
        return;
    }
#endif
    (void)stream;
    memcpy(o, v, 64 * sizeof(float));
}

static inline void rows_store_fence(int stream) {
#if defined(__SSE2__)
    if (stream) _mm_sfence();
#endif
    (void)stream;
}

/* RoPE on the tail n_rot dims of one row, interleaved pairs. */
typedef struct {
    int n_rot;
    float step;                /* base^(-2/n_rot) in float32 */
    /* per pair: YaRN blend factor (1 without YaRN); the binder refuses
     * rope.dimension_count > DS4_MAX_ROT_DIM, so every pair has a slot */
    double mul[DS4_MAX_ROT_DIM / 2];
} rope_t;
void rope_init(rope_t *r, int n_rot, float base, int yarn, float factor,
               uint64_t orig_ctx, float beta_fast, float beta_slow);
/* cs/sn: n_rot/2 floats each for position `pos` (callers' stack arrays are
 * DS4_MAX_ROT_DIM/2 long). */
void rope_angles(const rope_t *r, int64_t pos, float *cs, float *sn);
void rope_apply(float *x, int dim, int n_rot, const float *cs,
                const float *sn, int inverse);

/* KV storage roundings (docs/MODEL.md §4.3). */
void fp8_kv_round(float *x, int n_nope);
void indexer_qat(float *x, int n);   /* Hadamard + FP4, n a power of two */
/* the normalised Sylvester-Hadamard rotation (butterflies, then times
 * 1/sqrt(n)), indexer_qat's first step */
void hadamard_rotate(float *x, int n);
void f16_round_row(float *x, int n);
float e4m3_round(float v);
float e2m1_round(float v);

#endif
