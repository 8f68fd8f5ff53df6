/*
 * kda.h -- the KDA (Kimi Delta Attention) recurrence of one head on its
 * state S [K][K] (key x value), in its two forms (../shared/docs/FAMILY.md
 * §2, tests/oracle/glm_ref.py kda_recurrent / kda_chunked):
 *
 *   per token: S <- diag(exp(g)) S;  u = S^T k;  S += k (beta (v - u))^T;
 *              o = S^T q.
 *
 * kda_recurrent is the engine's form: token by token, bit-identical to the
 * token-major four-pass loop it replaced (every element of S, u and o
 * sees the same operations in the same order), so one prefill == token by
 * token == any chunking == any thread count.  kda_chunked is the chunked
 * (WY / UT-transform) form: the same math up to float rounding (tested
 * against kda_recurrent in tests/test_kda.c), NOT bit-identical to it.
 *
 * Owns: these two loops and their scratch sizes.  Must not: know a model's
 * layout (callers pass each token's head rows by pointer and stride),
 * allocate, or thread (callers split heads).
 */
#ifndef DS4_KDA_H
#define DS4_KDA_H

#include <stddef.h>

#include "kernels/vec_ops.h"

/* One head's inputs for T tokens: token t's q, k, v, g (K floats each) at
 * x + t * rs, its beta at beta[t * bs].  q may be NULL (state only). */
typedef struct {
    const float *q, *k, *v, *g, *beta;
    size_t rs, bs;
} kda_seq;

/* floats of scratch kda_recurrent needs */
static inline size_t kda_recurrent_scratch(int K) { return 2 * (size_t)K; }

/* T tokens on S; o (if x->q): token t's K outputs at o + t * os.  vk: the
 * exp's table (NULL: the scalar vec_expf, the same bits). */
void kda_recurrent(float *S, int K, const kda_seq *x, int T, float *o, size_t os, float *scr,
                   const vec_kernels *vk);

/* floats of scratch kda_chunked needs for chunks of C tokens */
size_t kda_chunked_scratch(int K, int C);

/* The chunked form, chunks of C tokens from the first (C = 64 is the
 * usual one); the same arguments as kda_recurrent. */
void kda_chunked(float *S, int K, const kda_seq *x, int T, int C, float *o, size_t os, float *scr,
                 const vec_kernels *vk);

#endif
