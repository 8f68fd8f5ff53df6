/*
 * vec_ops.h -- float vector kernels of the attention and indexer inner
 * loops: dot products of several query heads against one shared key (the
 * model has a single KV head, so every key row is read once for a block of
 * heads) and the matching weighted accumulation.
 *
 * Owns: these kernels, the indexer's integer scores of FP4-coded rows,
 * the rows' sums of squares of the RMS norms, and the exponential of the
 * softmax and SwiGLU (vec_expf: one polynomial, the same bits in every
 * table and on every libm), a scalar reference beside
 * each SIMD version, and the run-time choice between them.  Every output
 * element is computed in a fixed order whatever the caller's batching, so
 * results are reproducible (decode == prefill).
 */
#ifndef DS4_VEC_OPS_H
#define DS4_VEC_OPS_H

#include <stddef.h>
#include <stdint.h>

#define VEC_HB 4   /* heads per block */

typedef struct {
    const char *name;
    /* out[h] = q[h*qs .. +n] . k[0..n] for h < VEC_HB */
    void (*dot4)(const float *q, size_t qs, const float *k, int n, float *out);
    /* o[h*os + i] += e[h] * k[i] for h < VEC_HB, i < n */
    void (*axpy4)(float *o, size_t os, const float *e, const float *k, int n);
    float (*dot)(const float *a, const float *b, int n);
    /* out[h*4 + j] = q[h*qs ..] . keys[j][..] for h, j < 4: four keys per
     * pass so every query load serves four products */
    void (*dot4x4)(const float *q, size_t qs, const float *const *keys, int n, float *out);
    /* o[h*os + i] = sum_r e[h*es + r] * keys[r][i] for h < VEC_HB, i < n,
     * summed in key order r = 0, 1, ... (the same per-element arithmetic as
     * axpy4 applied key by key to a zeroed o), with the outputs kept in
     * registers across the keys. */
    void (*wsum4)(float *o, size_t os, const float *const *keys, const float *e,
                  size_t es, int nk, int n);
    /* y[i] = vec_expf(x[i]) for i < n (x == y allowed) */
    void (*exp)(const float *x, float *y, int n);
    /* w[i] = vec_expf(w[i] - m) in place for i < n; returns their sum with
     * element i added into lane i mod 16 in element order and the lanes
     * reduced by the dots' tree (the softmax denominator) */
    float (*exp_sum)(float *w, int n, float m);
    /* ss[r] = sum_i (double)x[r*xs + i]^2 for r < nr: each row's sum one
     * chain in element order from +0 (rms_scale's), rows side by side in
     * the lanes so that the chains overlap */
    void (*sumsq_rows)(const float *x, size_t xs, int nr, int n, double *ss);
    /* Indexer scores of 16 compressed rows for one token, from FP4-coded
     * queries and rows (deepseek4.c idx_code_row): every value is a code
     * c (|c| <= 15) times a power of two p per block of 32, so each block's
     * dot product is an exact integer I, and for row r
     *   t_b = ((float)I[h][b][r] * pq[h][b]) * pk[b][r]  (exact: the coder
     *         keeps every p, p * p and t a normal float)
     *   dot = ((t_0 + t_1) + t_2) + ...                  (block order)
     *   out[r] = sum over heads h = 0.. in order, from +0, of
     *            w[h] * dot where dot > 0, else +0 (the float path's relu)
     * qc: [nh][32 nb] codes; pq, qs: [nh][nb], qs = 16 x the block's code
     * sum (removes kc's bias); kc: [8 nb][16][4], byte j of row r's quad s
     * (elements 4s..4s+3) at kc[64 s + 4 r + j] = code + 16; pk: [nb][16]. */
    void (*idx_score16)(const int8_t *qc, const float *pq, const int32_t *qs, const float *w, int nh, int nb,
                        const uint8_t *kc, const float *pk, float *out);
} vec_kernels;

/* The widest span of block exponents (log2 of the block scales) that two
 * coded vectors of n elements may each have for every partial sum of their
 * n products, in any order, to be exact: each product is an integer
 * |c c'| <= 225 times a block scale, and the sums stay integer multiples of
 * the smallest scale below 2^24 of them while n * 225 * 4^s < 2^24 (n =
 * 128: 4).  Within it idx_score16 gives the float path's bits. */
static inline int vec_idx_spread(int n) {
    int s = 0;
    while ((double)n * 225.0 * (double)(1L << (2 * (s + 1))) < 16777216.0) s++;
    return s;
}

/* ds4's exp, the one every table computes (vec_ops.c): within 1.01 ulp of
 * e^x (measured over every float in between), 0 below -87.33654 (no
 * subnormals), +inf from 88.72284, NaN for NaN.  The scalar reference, for callers outside
 * the tables. */
float vec_expf(float x);

const vec_kernels *vec_kernels_scalar(void);
const vec_kernels *vec_kernels_avx2(void);   /* NULL when unsupported */
const vec_kernels *vec_kernels_avx512(void); /* NULL when unsupported */
const vec_kernels *vec_kernels_best(void);   /* honours DS4_KERNELS */

#endif
