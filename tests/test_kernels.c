/*
 * test_kernels.c -- tile kernels and the matmul driver.
 *
 * For every kernel table this CPU can run (scalar, avx2, avx512) and every
 * format with a tile (Q8_0 x Q8_0a, Q2_K / Q3_K / Q4_K / Q5_K / Q6_K /
 * IQ2_XXS / IQ4_XS x Q8_K, F32 / F16 x float, MXFP4 x Q8_0a), on random data:
 *   1. the tile over a whole (rows x tokens) block, and the same block cut
 *      into random sub-tiles, equal the table's single-row kernel BIT FOR
 *      BIT (the engine's prefill == decode rule), with odd row strides,
 *      scattered and repeated activation rows, tails of every length;
 *   2. the tiles stay within the tolerances of test_quant against the
 *      exact float64 dot of the dequantized values (2e-6 of sum|terms| for
 *      integer formats, (n/32 + 40) 2^-24 sum|terms| for float ones), and
 *      equal the scalar table BIT FOR BIT, every format, every table, wild
 *      scales included (the same-answer-on-every-CPU rule, quant.h and
 *      docs/NUMERICS.md);
 *   3. nothing outside the tile's outputs is written, nothing past the
 *      weights or activations is read (exact-size buffers: run under ASan,
 *      as `make DEBUG=1` does, to check), and no unwritten stack buffer is
 *      read (the stack is filled with NaN bytes before each tile call);
 *   4. cpu_matmul_groups on pools of 1..3 threads, with grouped inputs
 *      (also few rows x many tokens, which it splits by token ranges),
 *      row index lists and sizes that do not divide the strip, gives the
 *      single-row values bit for bit.
 * DS4_TEST_SEED varies the random data.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu_ops.h"
#include "gguf/gguf.h"
#include "kernels/quant.h"
#include "kernels/threadpool.h"

#include "testutil.h"

/* ---------------------------------------------------------------------- */
/* random data                                                             */
/* ---------------------------------------------------------------------- */

static uint64_t rng = 0x853c49e6748fea9bull;
static uint64_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static double urand(void) { return (double)(rnd() >> 11) * 0x1p-53; }
static double nrand(void) {
    double u = urand() + 1e-300, v = urand();
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}
static int irand(int lo, int hi) { return lo + (int)(rnd() % (uint64_t)(hi - lo + 1)); }

/* wild: scales from every regime (zero, subnormal, huge) for the
 * bit-exactness checks; otherwise typical scales for the tolerance ones */
static uint16_t rand_scale(int wild) {
    if (wild) {
        switch (rnd() % 8) {
        case 0: return 0;
        case 1: return (uint16_t)(1 + rnd() % 0x3ff);
        case 2: return 0x7bff;
        case 3: return (uint16_t)((rnd() % 0x7c00) | (rnd() & 0x8000));
        default: break;
        }
    }
    return ds4_f32_to_f16((float)(0.001 + 0.05 * urand()));
}

static void rand_bytes(void *p, size_t n) {
    uint8_t *b = p;
    for (size_t i = 0; i < n; i++) b[i] = (uint8_t)rnd();
}

static void rand_row(uint32_t t, uint8_t *w, int n, int wild) {
    switch (t) {
    case GGML_Q8_0: {
        block_q8_0 *b = (block_q8_0 *)w;
        for (int i = 0; i < n / 32; i++) {
            b[i].d = rand_scale(wild);
            rand_bytes(b[i].qs, 32);
            if (rnd() % 16 == 0) memset(b[i].qs, 0x80, 32);   /* all -128 */
            if (rnd() % 16 == 0) memset(b[i].qs, 0x7f, 32);
        }
        break;
    }
    case GGML_Q2_K: {
        block_q2_K *b = (block_q2_K *)w;
        for (int i = 0; i < n / 256; i++) {
            rand_bytes(b[i].scales, 16);
            rand_bytes(b[i].qs, 64);
            if (rnd() % 8 == 0) memset(b[i].qs, 0xff, 64);
            if (rnd() % 8 == 0) memset(b[i].scales, 0xff, 16);
            b[i].d = rand_scale(wild);
            b[i].dmin = rand_scale(wild);
        }
        break;
    }
    case GGML_Q4_K: {
        block_q4_K *b = (block_q4_K *)w;
        for (int i = 0; i < n / 256; i++) {
            rand_bytes(b[i].scales, 12);
            rand_bytes(b[i].qs, 128);
            if (rnd() % 8 == 0) memset(b[i].qs, 0xff, 128);
            if (rnd() % 8 == 0) memset(b[i].scales, 0xff, 12);
            b[i].d = rand_scale(wild);
            b[i].dmin = rand_scale(wild);
        }
        break;
    }
    case GGML_Q3_K: {
        block_q3_K *b = (block_q3_K *)w;
        for (int i = 0; i < n / 256; i++) {
            rand_bytes(b[i].hmask, 32);
            rand_bytes(b[i].qs, 64);
            rand_bytes(b[i].scales, 12);
            if (rnd() % 8 == 0) { memset(b[i].qs, 0, 64); memset(b[i].hmask, 0, 32); }   /* all -4 */
            if (rnd() % 8 == 0) memset(b[i].scales, rnd() % 2 ? 0xff : 0, 12);        /* scales 31 / -32 */
            b[i].d = rand_scale(wild);
        }
        break;
    }
    case GGML_Q5_K: {
        block_q5_K *b = (block_q5_K *)w;
        for (int i = 0; i < n / 256; i++) {
            rand_bytes(b[i].scales, 12);
            rand_bytes(b[i].qh, 32);
            rand_bytes(b[i].qs, 128);
            if (rnd() % 8 == 0) { memset(b[i].qs, 0xff, 128); memset(b[i].qh, 0xff, 32); }
            if (rnd() % 8 == 0) memset(b[i].scales, 0xff, 12);
            b[i].d = rand_scale(wild);
            b[i].dmin = rand_scale(wild);
        }
        break;
    }
    case GGML_Q6_K: {
        block_q6_K *b = (block_q6_K *)w;
        for (int i = 0; i < n / 256; i++) {
            rand_bytes(b[i].ql, 128);
            rand_bytes(b[i].qh, 64);
            rand_bytes(b[i].scales, 16);
            if (rnd() % 8 == 0) { memset(b[i].ql, 0, 128); memset(b[i].qh, 0, 64); }   /* all -32 */
            if (rnd() % 8 == 0) { memset(b[i].ql, 0xff, 128); memset(b[i].qh, 0xff, 64); }
            if (rnd() % 8 == 0) memset(b[i].scales, 0x80, 16);                          /* -128 */
            b[i].d = rand_scale(wild);
        }
        break;
    }
    case GGML_IQ4_XS: {
        block_iq4_xs *b = (block_iq4_xs *)w;
        for (int i = 0; i < n / 256; i++) {
            rand_bytes(b[i].qs, 128);
            rand_bytes(b[i].scales_l, 4);
            b[i].scales_h = (uint16_t)rnd();
            if (rnd() % 8 == 0) memset(b[i].qs, 0, 128);                                 /* all -127 */
            if (rnd() % 8 == 0) { memset(b[i].scales_l, 0, 4); b[i].scales_h = 0; }     /* -32 */
            b[i].d = rand_scale(wild);
        }
        break;
    }
    case GGML_IQ2_XXS: {
        block_iq2_xxs *b = (block_iq2_xxs *)w;
        for (int i = 0; i < n / 256; i++) {
            rand_bytes(b[i].qs, 64);
            if (rnd() % 8 == 0)   /* largest grid values, largest scales */
                for (int g = 0; g < 8; g++) { b[i].qs[4 * g + 3] |= 0xf000; }
            b[i].d = rand_scale(wild);
        }
        break;
    }
    case GGML_MXFP4: {
        /* wild: every scale byte, the subnormal (0, 1) and largest ones
         * included; otherwise weight-like scales around 2^-5 */
        block_mxfp4 *b = (block_mxfp4 *)w;
        for (int i = 0; i < n / 32; i++) {
            static const uint8_t edge[4] = { 0, 1, 2, 254 };
            b[i].e = (uint8_t)(!wild ? irand(118, 124) : rnd() % 4 == 0 ? edge[rnd() % 4] : (int)(rnd() % 255));
            rand_bytes(b[i].qs, 16);
            if (rnd() % 16 == 0) memset(b[i].qs, 0x77, 16);   /* all +12 */
            if (rnd() % 16 == 0) memset(b[i].qs, 0xff, 16);   /* all -12 */
        }
        break;
    }
    case GGML_F32: {
        float *f = (float *)w;
        for (int i = 0; i < n; i++) f[i] = (float)(nrand() * (wild ? pow(10, irand(-30, 30)) : 1.0));
        break;
    }
    case GGML_F16: {
        uint16_t *h = (uint16_t *)w;
        for (int i = 0; i < n; i++) h[i] = wild && rnd() % 4 == 0 ? (uint16_t)(rnd() % 0x7c00)
                                                                  : ds4_f32_to_f16((float)nrand());
        break;
    }
    }
}

/* Activations with blocks of very different magnitude: zero blocks, ties,
 * outliers, and subnormal blocks (where Q8_0a may produce -128). */
static void rand_act(float *x, int n, int wild) {
    for (int b = 0; b < n; b += 32) {
        int kind = (int)(rnd() % 10);
        double scale = wild ? pow(10.0, -20.0 + 24.0 * urand()) : 1.0;
        for (int j = 0; j < 32 && b + j < n; j++) {
            double v = nrand() * scale;
            if (kind == 0) v = 0;
            if (kind == 1) v = j == 0 ? 127.0 / 64 : (j - 16.5) / 64;
            if (kind == 2 && rnd() % 20 == 0) v *= 100;
            if (kind == 3 && wild) v = (j == 5 ? -1.0 : nrand() * 0.9) * 1e-41;   /* subnormal */
            x[b + j] = (float)v;
        }
    }
}

/* ---------------------------------------------------------------------- */
/* formats                                                                 */
/* ---------------------------------------------------------------------- */

enum { A_Q8_0A, A_Q8_K, A_F32 };

typedef struct {
    const char *name;
    uint32_t type;
    int act, blk, bytes;
} fmt;

static const fmt FMTS[] = {
    { "q8_0", GGML_Q8_0, A_Q8_0A, 32, 34 },
    { "q2_K", GGML_Q2_K, A_Q8_K, 256, 84 },
    { "q4_K", GGML_Q4_K, A_Q8_K, 256, 144 },
    { "iq2_xxs", GGML_IQ2_XXS, A_Q8_K, 256, 66 },
    { "f32", GGML_F32, A_F32, 1, 4 },
    { "f16", GGML_F16, A_F32, 1, 2 },
    { "q3_K", GGML_Q3_K, A_Q8_K, 256, 110 },
    { "q5_K", GGML_Q5_K, A_Q8_K, 256, 176 },
    { "q6_K", GGML_Q6_K, A_Q8_K, 256, 210 },
    { "iq4_xs", GGML_IQ4_XS, A_Q8_K, 256, 136 },
    { "mxfp4", GGML_MXFP4, A_Q8_0A, 32, 17 },   /* last: FMTS[NFMT - 1] below */
};
#define NFMT 11

static size_t rb_of(const fmt *f, int n) { return (size_t)(n / f->blk) * (size_t)f->bytes; }

static size_t act_bytes(const fmt *f, int n) {
    if (f->act == A_Q8_0A) return (size_t)(n / 32) * sizeof(block_q8_0a);
    if (f->act == A_Q8_K) return (size_t)(n / 256) * sizeof(block_q8_K);
    return (size_t)n * sizeof(float);
}

static void quantize(const fmt *f, const float *x, int n, void *out) {
    if (f->act == A_Q8_0A) ds4_quantize_q8_0a(x, out, n);
    else if (f->act == A_Q8_K) ds4_quantize_q8_K(x, out, n);
    else memcpy(out, x, (size_t)n * sizeof(float));
}

typedef float (*row_fn)(int n, const void *w, const void *a);

static row_fn row_of(const ds4_kernels *k, const fmt *f) {
    switch (f->type) {
    case GGML_Q8_0: return k->q8_0_q8_0a;
    case GGML_Q2_K: return k->q2_K_q8_K;
    case GGML_Q4_K: return k->q4_K_q8_K;
    case GGML_IQ2_XXS: return k->iq2_xxs_q8_K;
    case GGML_Q3_K: return k->q3_K_q8_K;
    case GGML_Q5_K: return k->q5_K_q8_K;
    case GGML_Q6_K: return k->q6_K_q8_K;
    case GGML_IQ4_XS: return k->iq4_xs_q8_K;
    case GGML_MXFP4: return k->mxfp4_q8_0a;
    case GGML_F32: return (row_fn)(void (*)(void))k->f32_f32;
    default: return (row_fn)(void (*)(void))k->f16_f32;
    }
}

static float row_dot(const ds4_kernels *k, const fmt *f, int n, const void *w, const void *a) {
    if (f->act == A_F32) return ds4_dot_f32act(k, f->type, n, w, a);
    return row_of(k, f)(n, w, a);
}

static ds4_tile_fn tile_of(const ds4_kernels *k, const fmt *f) {
    switch (f->type) {
    case GGML_Q8_0: return k->q8_0_q8_0a_tile;
    case GGML_Q2_K: return k->q2_K_q8_K_tile;
    case GGML_Q4_K: return k->q4_K_q8_K_tile;
    case GGML_IQ2_XXS: return k->iq2_xxs_q8_K_tile;
    case GGML_Q3_K: return k->q3_K_q8_K_tile;
    case GGML_Q5_K: return k->q5_K_q8_K_tile;
    case GGML_Q6_K: return k->q6_K_q8_K_tile;
    case GGML_IQ4_XS: return k->iq4_xs_q8_K_tile;
    case GGML_MXFP4: return k->mxfp4_q8_0a_tile;
    case GGML_F32: return k->f32_f32_tile;
    default: return k->f16_f32_tile;
    }
}

/* value of activation element i */
static double act_val(const fmt *f, const void *a, int i) {
    if (f->act == A_Q8_0A) { const block_q8_0a *q = a; return (double)q[i / 32].d * q[i / 32].qs[i % 32]; }
    if (f->act == A_Q8_K) { const block_q8_K *q = a; return (double)q[i / 256].d * q[i / 256].qs[i % 256]; }
    return ((const float *)a)[i];
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }
/* across tables: the same bits, or both NaN (wild scales overflow; a NaN's
 * payload is not part of the promise) */
static int same_value(float a, float b) { return same_bits(a, b) || (a != a && b != b); }

/* Fills the stack below the caller with NaN bytes, so that a kernel that
 * reads a stack buffer it never wrote (a stash not zeroed, say) sees
 * garbage instead of the zeros of never-touched pages and fails the
 * bit-for-bit comparison (ASan does not report uninitialised reads). */
__attribute__((noinline)) static void dirty_stack(void) {
    volatile uint8_t junk[512 * 1024];
    memset((void *)junk, 0xff, sizeof junk);
    __asm__ volatile("" : : "r"(junk) : "memory");
}

/* Runs `tile` over ntok token rows of A (stride as: in order when `even`,
 * else scattered and repeated) into an output of a random row stride
 * guarded past its end, and compares every output with ref's single-row
 * kernel bit for bit.  Adds the writes outside the tile to *badg; returns
 * the outputs that differ. */
static long tile_vs_rows(ds4_tile_fn tile, const ds4_kernels *ref, const fmt *f, int n, const uint8_t *W, size_t ws,
                         int nrows, const uint8_t *A, size_t as, int ntok, int even, long *badg) {
    const void **ap = malloc(sizeof(void *) * (size_t)ntok);
    for (int j = 0; j < ntok; j++) ap[j] = A + (size_t)(even ? j : irand(0, ntok - 1)) * as;
    const size_t ys = (size_t)nrows + (size_t)irand(0, 3), ny = ys * (size_t)ntok + 8;
    float *Y = malloc(sizeof(float) * ny);
    const uint32_t guard = 0x7fc0dead;
    for (size_t i = 0; i < ny; i++) memcpy(&Y[i], &guard, 4);
    dirty_stack();
    tile(n, W, ws, nrows, ap, ntok, Y, ys);
    long bad = 0;
    for (int j = 0; j < ntok; j++)
        for (size_t r = 0; r < ys; r++) {
            float v = Y[(size_t)j * ys + r];
            if (r < (size_t)nrows) bad += !same_value(v, row_dot(ref, f, n, W + r * ws, ap[j]));
            else *badg += memcmp(&v, &guard, 4) != 0;
        }
    for (size_t i = ys * (size_t)ntok; i < ny; i++) *badg += memcmp(&Y[i], &guard, 4) != 0;
    free(ap);
    free(Y);
    return bad;
}

/* ---------------------------------------------------------------------- */
/* one random case                                                         */
/* ---------------------------------------------------------------------- */

#define NTAB 5   /* scalar, avx2, avx512, avx512-packed, amx */
static double worst_ratio[NTAB][NFMT];   /* [table][format]: error / tolerance */

static void one_case(int ti, const ds4_kernels *k, const fmt *f, int n, int nrows, int ntok, int wild) {
    const ds4_kernels *sk = ds4_kernels_scalar();
    ds4_tile_fn tile = tile_of(k, f);
    CHECK(tile != NULL, "%s %s: no tile", k->name, f->name);
    if (!tile) return;
    const size_t rb = rb_of(f, n);
    const size_t ws = rb + (size_t)f->bytes * (size_t)irand(0, 2) + (f->act == A_F32 ? (size_t)irand(0, 3) * f->bytes : 0);
    uint8_t *W = malloc(ws * (size_t)nrows);
    for (int r = 0; r < nrows; r++) rand_row(f->type, W + (size_t)r * ws, n, wild);
    /* a few distinct activation rows, referenced in scattered, repeated order */
    const int nact = ntok < 7 ? ntok : 7;
    const size_t ab = act_bytes(f, n);
    uint8_t *A = malloc(ab * (size_t)nact);
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int i = 0; i < nact; i++) {
        rand_act(x, n, wild);
        quantize(f, x, n, A + (size_t)i * ab);
    }
    const void **ap = malloc(sizeof(void *) * (size_t)ntok);
    for (int j = 0; j < ntok; j++) ap[j] = A + (size_t)(j < nact ? j : irand(0, nact - 1)) * ab;

    /* single-row reference of this table */
    float *ref = malloc(sizeof(float) * (size_t)nrows * ntok);
    for (int j = 0; j < ntok; j++)
        for (int r = 0; r < nrows; r++) ref[(size_t)j * nrows + r] = row_dot(k, f, n, W + (size_t)r * ws, ap[j]);

    /* whole tile, output rows strided with guard cells */
    const size_t ys = (size_t)nrows + (size_t)irand(0, 5);
    const size_t ny = ys * (size_t)ntok + 8;
    float *Y = malloc(sizeof(float) * ny);
    const uint32_t guard = 0x7fc0dead;
    for (size_t i = 0; i < ny; i++) memcpy(&Y[i], &guard, 4);
    tile(n, W, ws, nrows, ap, ntok, Y, ys);
    long bad = 0, badg = 0;
    for (int j = 0; j < ntok; j++)
        for (size_t r = 0; r < ys; r++) {
            float v = Y[(size_t)j * ys + r];
            if (r < (size_t)nrows) bad += !same_bits(v, ref[(size_t)j * nrows + r]);
            else badg += memcmp(&v, &guard, 4) != 0;
        }
    for (size_t i = ys * (size_t)ntok; i < ny; i++) badg += memcmp(&Y[i], &guard, 4) != 0;
    CHECK(bad == 0, "%s %s n=%d rows=%d tok=%d%s: %ld tile outputs differ from the single-row kernel",
          k->name, f->name, n, nrows, ntok, wild ? " wild" : "", bad);
    CHECK(badg == 0, "%s %s n=%d rows=%d tok=%d: %ld writes outside the tile", k->name, f->name, n, nrows,
          ntok, badg);

    /* the same block as random sub-tiles */
    for (size_t i = 0; i < ny; i++) memcpy(&Y[i], &guard, 4);
    for (int r0 = 0; r0 < nrows;) {
        int nr = irand(1, nrows - r0 < 40 ? nrows - r0 : 40);
        for (int j0 = 0; j0 < ntok;) {
            int nt = irand(1, ntok - j0);
            tile(n, W + (size_t)r0 * ws, ws, nr, ap + j0, nt, Y + (size_t)j0 * ys + r0, ys);
            j0 += nt;
        }
        r0 += nr;
    }
    bad = 0;
    for (int j = 0; j < ntok; j++)
        for (int r = 0; r < nrows; r++) bad += !same_bits(Y[(size_t)j * ys + r], ref[(size_t)j * nrows + r]);
    CHECK(bad == 0, "%s %s n=%d rows=%d tok=%d%s: %ld sub-tile outputs differ", k->name, f->name, n, nrows,
          ntok, wild ? " wild" : "", bad);

    /* the scalar table, bit for bit, every (row, token) */
    long bads = 0;
    for (int j = 0; j < ntok; j++)
        for (int r = 0; r < nrows; r++)
            bads += !same_value(ref[(size_t)j * nrows + r], row_dot(sk, f, n, W + (size_t)r * ws, ap[j]));
    CHECK(bads == 0, "%s %s n=%d rows=%d tok=%d%s: %ld dots differ from the scalar table", k->name, f->name,
          n, nrows, ntok, wild ? " wild" : "", bads);

    /* against the exact value */
    if (!wild) {
        float *wd = malloc(sizeof(float) * (size_t)n);
        long badt = 0;
        for (int r = 0; r < nrows; r++) {
            const uint8_t *wr = W + (size_t)r * ws;
            ds4_dequantize_row(f->type, wr, wd, n);
            for (int j = 0; j < nact && j < ntok; j++) {
                double ex = 0, abs_ = 0;
                for (int i = 0; i < n; i++) {
                    double t = (double)wd[i] * act_val(f, ap[j], i);
                    ex += t;
                    abs_ += fabs(t);
                }
                double tol = f->act == A_F32 ? ((double)n / 32 + 40) * 0x1p-24 * abs_ : 2e-6 * abs_;
                float y = ref[(size_t)j * nrows + r];
                double err = fabs((double)y - ex);
                if (abs_ == 0) badt += y != 0.0f;
                else {
                    badt += !(err <= tol);
                    if (err / tol > worst_ratio[ti][f - FMTS]) worst_ratio[ti][f - FMTS] = err / tol;
                }
            }
        }
        CHECK(badt == 0, "%s %s n=%d: %ld dots outside the tolerance", k->name, f->name, n, badt);
        free(wd);
    }
    free(W); free(A); free(x); free(ap); free(ref); free(Y);
}

static void test_tables(void) {
    const ds4_kernels *tabs[NTAB] = { ds4_kernels_scalar(), ds4_kernels_avx2(), ds4_kernels_avx512(),
                                      ds4_kernels_avx512_packed(), ds4_kernels_amx() };
    for (int ti = 0; ti < NTAB; ti++) {
        const ds4_kernels *k = tabs[ti];
        if (!k) { printf("info: table %d not available on this CPU\n", ti); continue; }
        int ncase = 0;
        for (int fi = 0; fi < NFMT; fi++) {
            const fmt *f = &FMTS[fi];
            static const int n_int8[] = { 32, 64, 224, 256, 288, 1024, 4096 };
            static const int n_k[] = { 256, 512, 2048 };
            static const int n_f[] = { 1, 7, 8, 31, 32, 40, 64, 100, 256, 1027, 4096 };
            const int *ns = f->blk == 32 ? n_int8 : f->blk == 256 ? n_k : n_f;
            int nn = f->blk == 32 ? 7 : f->blk == 256 ? 3 : 11;
            for (int ni = 0; ni < nn; ni++) {
                for (int trial = 0; trial < 4; trial++) {
                    int nrows = trial == 0 ? 16 : trial == 1 ? irand(1, 15) : irand(17, 70);
                    static const int toks[] = { 1, 2, 3, 5, 8, 9, 17, 33 };
                    int ntok = toks[rnd() % 8];
                    if (ti > 0 && trial == 3 && ns[ni] <= 1024 && rnd() % 3 == 0) ntok = irand(257, 300);
                    one_case(ti, k, f, ns[ni], nrows, ntok, trial & 1);
                    ncase++;
                }
            }
            /* one token (decode: the avx512 table's reduction-axis
             * kernels) at the Flash row lengths and around the limits of
             * those kernels (Q8_0: 64 blocks; K-quants, IQ2_XXS: 32), whole
             * and partial 16-row strips */
            if (f->act != A_F32) {
                static const int d_int8[] = { 32, 224, 1024, 2048, 2080, 4096 };
                static const int d_k[] = { 256, 1024, 2048, 4096, 8192, 8448 };
                const int *ds = f->blk == 32 ? d_int8 : d_k;
                for (int ni = 0; ni < 6; ni++)
                    for (int trial = 0; trial < 4; trial++) {
                        static const int rws[] = { 1, 15, 16, 17, 32, 47 };
                        int nrows = trial < 2 ? rws[rnd() % 6] : irand(48, 90);
                        one_case(ti, k, f, ds[ni], nrows, 1, trial & 1);
                        ncase++;
                    }
            }
        }
        /* batches of the K-quants at the Flash row lengths, several
         * token slices of avx2's token-lane tiles (56 tokens a slice at
         * n = 2048 for Q2_K, 24 at 4096, 8 at 8192) */
        for (int fi = 0; fi < NFMT; fi++) {
            const fmt *f = &FMTS[fi];
            if (f->blk != 256) continue;
            static const int bn[] = { 2048, 4096, 8192 };
            for (int ni = 0; ni < 3; ni++) {
                one_case(ti, k, f, bn[ni], irand(4, 40), irand(57, 90), ni & 1);
                ncase++;
            }
        }
        printf("info: %-6s %d random cases; worst error/tolerance:", k->name, ncase);
        for (int fi = 0; fi < NFMT; fi++) printf(" %s %.3f", FMTS[fi].name, worst_ratio[ti][fi]);
        printf("\n");
    }
}

/* ---------------------------------------------------------------------- */
/* MXFP4: every table equals the scalar one bit for bit, whatever the      */
/* scale bytes (subnormal 2^-128 .. 2^126) and activations (-128, zero,    */
/* subnormal blocks), for integer and float activations; the float kernel */
/* equals dequantize-then-dot (the scalar F32 kernel on ds4_dequantize_row */
/* output) bit for bit, the integer one a float64 recomputation from the  */
/* dequantized values and the activation codes.                           */
/* ---------------------------------------------------------------------- */

static void test_mxfp4(void) {
    const ds4_kernels *sk = ds4_kernels_scalar();
    const ds4_kernels *tabs[NTAB] = { sk, ds4_kernels_avx2(), ds4_kernels_avx512(), ds4_kernels_avx512_packed(),
                                      ds4_kernels_amx() };
    const fmt *f = &FMTS[NFMT - 1];
    long bad_tab = 0, bad_deq = 0, bad_int = 0, cases = 0;
    for (int rep = 0; rep < 300; rep++) {
        const int n = 32 * irand(1, rep < 200 ? 40 : 200), wild = rep & 1;
        const int nrows = irand(1, 20), ntok = irand(1, 10);
        const size_t rb = rb_of(f, n), ab = act_bytes(f, n);
        uint8_t *W = malloc(rb * (size_t)nrows), *A = malloc(ab * (size_t)ntok);
        float *X = malloc(sizeof(float) * (size_t)n * ntok), *wd = malloc(sizeof(float) * (size_t)n);
        const void **ap = malloc(sizeof(void *) * (size_t)ntok);
        for (int r = 0; r < nrows; r++) rand_row(f->type, W + (size_t)r * rb, n, wild);
        for (int j = 0; j < ntok; j++) {
            rand_act(X + (size_t)j * n, n, wild);
            ds4_quantize_q8_0a(X + (size_t)j * n, (block_q8_0a *)(A + (size_t)j * ab), n);
            if (rnd() % 4 == 0) {   /* raw codes, -128 included */
                block_q8_0a *q = (block_q8_0a *)(A + (size_t)j * ab);
                for (int b = 0; b < n / 32; b++) rand_bytes(q[b].qs, 32);
            }
            ap[j] = A + (size_t)j * ab;
        }
        float *Y = malloc(sizeof(float) * (size_t)nrows * ntok);
        for (int r = 0; r < nrows; r++) {
            const uint8_t *wr = W + (size_t)r * rb;
            ds4_dequantize_row(GGML_MXFP4, wr, wd, n);
            for (int j = 0; j < ntok; j++) {
                const float *x = X + (size_t)j * n;
                const float ys = sk->mxfp4_q8_0a(n, wr, ap[j]), yf = sk->mxfp4_f32(n, wr, x);
                /* float activations: dequantize, then the scalar F32 dot */
                bad_deq += !same_bits(yf, sk->f32_f32(n, wd, x));
                /* integer: per block the exact sum of the codes times the
                 * activation codes, the codes read back by dequantizing
                 * the block with its scale byte set to 128 (2^0: values
                 * = codes, and no overflow as with e = 254), then the
                 * float step */
                const block_q8_0a *q = ap[j];
                const block_mxfp4 *bw = (const block_mxfp4 *)wr;
                float sumf = 0.0f;
                for (int b = 0; b < n / 32; b++) {
                    block_mxfp4 unit = bw[b];
                    unit.e = 128;
                    float code[32];
                    ds4_dequantize_row(GGML_MXFP4, &unit, code, 32);
                    int si = 0;
                    for (int i = 0; i < 32; i++) si += (int)code[i] * q[b].qs[i];
                    sumf += (float)si * (ds4_e8m0_to_f32_half(bw[b].e) * q[b].d);
                }
                bad_int += !same_bits(ys, sumf);
                for (int t = 1; t < NTAB; t++) {
                    const ds4_kernels *k = tabs[t];
                    if (!k) continue;
                    bad_tab += !same_bits(k->mxfp4_q8_0a(n, wr, ap[j]), ys);
                    bad_tab += !same_bits(k->mxfp4_f32(n, wr, x), yf);
                    bad_tab += !same_bits(ds4_dot_f32act(k, GGML_MXFP4, n, wr, x), yf);
                }
                cases++;
            }
        }
        for (int t = 1; t < NTAB; t++) {
            const ds4_kernels *k = tabs[t];
            if (!k) continue;
            k->mxfp4_q8_0a_tile(n, W, rb, nrows, ap, ntok, Y, (size_t)nrows);
            for (int j = 0; j < ntok; j++)
                for (int r = 0; r < nrows; r++)
                    bad_tab += !same_bits(Y[(size_t)j * nrows + r], sk->mxfp4_q8_0a(n, W + (size_t)r * rb, ap[j]));
        }
        free(W); free(A); free(X); free(wd); free(ap); free(Y);
    }
    CHECK(bad_tab == 0, "mxfp4: %ld results of a SIMD table differ from the scalar table", bad_tab);
    CHECK(bad_deq == 0, "mxfp4: %ld float-activation dots differ from dequantize-then-dot", bad_deq);
    CHECK(bad_int == 0, "mxfp4: %ld integer dots differ from the recomputation", bad_int);
    /* the kernels see ggml's values: byte j holds value j (low nibble) and
     * j + 16 (high); kvalues doubled, scale 2^(e-128) */
    block_mxfp4 b;
    b.e = 127;
    for (int j = 0; j < 16; j++) b.qs[j] = (uint8_t)(j | (15 - j) << 4);
    float v[32];
    ds4_dequantize_row(GGML_MXFP4, &b, v, 32);
    static const float e2m1[16] = { 0, .5f, 1, 1.5f, 2, 3, 4, 6, 0, -.5f, -1, -1.5f, -2, -3, -4, -6 };
    int okv = 1;
    for (int j = 0; j < 16; j++) okv &= v[j] == e2m1[j] && v[j + 16] == e2m1[15 - j];
    CHECK(okv, "mxfp4 dequantization layout");
    CHECK(ds4_e8m0_to_f32_half(0) == 0x1p-128f && ds4_e8m0_to_f32_half(1) == 0x1p-127f &&
          ds4_e8m0_to_f32_half(2) == 0x1p-126f && ds4_e8m0_to_f32_half(254) == 0x1p126f &&
          ds4_e8m0_to_f32_half(255) == 0x1p127f, "e8m0 half scale");
    printf("info: mxfp4 %ld (row, token) cases: every table equals the scalar one\n", cases);
}

/* ---------------------------------------------------------------------- */
/* the driver                                                              */
/* ---------------------------------------------------------------------- */

static void test_driver(void) {
    const ds4_kernels *k = ds4_kernels_best();
    for (int nth = 1; nth <= 3; nth++) {
        ds4_pool *pool = ds4_pool_new(nth);
        cpu_ctx cc = { pool, k };
        for (int fi = 0; fi < NFMT; fi++) {
            const fmt *f = &FMTS[fi];
            for (int trial = 0; trial < 5; trial++) {
                /* trial 3: few rows, every group with the same 130-300
                 * token rows -- the leaves cpu_matmul_groups cuts into
                 * token ranges instead of row strips (HC mixing);
                 * trial 4: more rows and more than AP_MAX (256) token rows,
                 * the same in every group -- row chunks split into token
                 * ranges too (the dense products of a prefill chunk) */
                const int wide = trial >= 3, dense = trial == 4;
                const int n = f->blk == 256 ? 512 : 256;
                const int ng = dense ? irand(1, 3) : irand(1, 5);
                const int nact = dense ? irand(257, 600) : wide ? irand(130, 300) : irand(1, 12);
                const size_t ab = act_bytes(f, n), rb = rb_of(f, n);
                uint8_t *A = malloc(ab * (size_t)nact);
                float *x = malloc(sizeof(float) * (size_t)n);
                for (int i = 0; i < nact; i++) {
                    rand_act(x, n, 0);
                    quantize(f, x, n, A + (size_t)i * ab);
                }
                mm_group g[5];
                uint8_t *Ws[5];
                float *Ys[5];
                int *rows[5];
                for (int gi = 0; gi < ng; gi++) {
                    int n_out = dense ? irand(100, 260) : trial == 0 || wide ? irand(1, 40) : irand(100, 700);
                    int nr = wide ? nact : irand(1, 9);
                    Ws[gi] = malloc(rb * (size_t)n_out);
                    for (int r = 0; r < n_out; r++) rand_row(f->type, Ws[gi] + (size_t)r * rb, n, 0);
                    rows[gi] = malloc(sizeof(int) * (size_t)nr);
                    for (int j = 0; j < nr; j++) rows[gi][j] = irand(0, nact - 1);
                    Ys[gi] = calloc((size_t)nr * n_out, sizeof(float));
                    mat_t W = { Ws[gi], f->type, n, n_out, rb, 0 };
                    mm_group x1 = { .W = W, .kind = f->act == A_Q8_0A ? ACT_Q8_0A : f->act == A_Q8_K ? ACT_Q8_K : ACT_F32,
                                    .act = A, .act_stride = ab, .rows = (gi & 1) ? rows[gi] : NULL,
                                    .n_rows = (gi & 1) ? nr : (nr < nact ? nr : nact), .out = Ys[gi],
                                    .out_stride = (size_t)n_out };
                    g[gi] = x1;
                }
                cpu_matmul_groups(&cc, g, ng);
                long bad = 0;
                for (int gi = 0; gi < ng; gi++)
                    for (int j = 0; j < g[gi].n_rows; j++) {
                        const uint8_t *a = A + (size_t)(g[gi].rows ? g[gi].rows[j] : j) * ab;
                        for (int r = 0; r < g[gi].W.n_out; r++)
                            bad += !same_bits(Ys[gi][(size_t)j * g[gi].W.n_out + r],
                                              row_dot(k, f, n, Ws[gi] + (size_t)r * rb, a));
                    }
                CHECK(bad == 0, "driver %s %s threads=%d groups=%d: %ld outputs differ", k->name, f->name, nth, ng, bad);
                for (int gi = 0; gi < ng; gi++) { free(Ws[gi]); free(Ys[gi]); free(rows[gi]); }
                free(A); free(x);
            }
        }
        ds4_pool_free(pool);
    }
    /* --no-qat: float activations on quantized weights (row kernels) */
    ds4_pool *pool = ds4_pool_new(2);
    cpu_ctx cc = { pool, k };
    const fmt *q = &FMTS[0];
    const int n = 256, n_out = 300, T = 5;
    uint8_t *W = malloc(rb_of(q, n) * n_out);
    for (int r = 0; r < n_out; r++) rand_row(q->type, W + (size_t)r * rb_of(q, n), n, 0);
    float *X = malloc(sizeof(float) * n * T), *Y = malloc(sizeof(float) * n_out * T);
    for (int j = 0; j < T; j++) rand_act(X + (size_t)j * n, n, 0);
    mat_t M = { W, q->type, n, n_out, rb_of(q, n), 0 };
    cpu_matmul(&cc, M, 1, X, n, T, Y, n_out, NULL);
    long bad = 0;
    for (int j = 0; j < T; j++)
        for (int r = 0; r < n_out; r++)
            bad += !same_bits(Y[(size_t)j * n_out + r], ds4_dot_f32act(k, q->type, n, W + (size_t)r * rb_of(q, n), X + (size_t)j * n));
    CHECK(bad == 0, "driver no-qat: %ld outputs differ", bad);
    free(W); free(X); free(Y);
    ds4_pool_free(pool);
}

/* ---------------------------------------------------------------------- */
/* Few tokens (2..8: verification passes, batched steps of a few sessions) */
/* of Q8_0: the avx512 table's reduction-axis kernel for 2..8 tokens       */
/* (dn_matvec_q8_0) and the packed path past its 256-block limit equal the */
/* scalar single-row kernel bit for bit, for every T = 1..8, at the Flash  */
/* row lengths and around the limits, ragged and whole 16-row strips,      */
/* padded rows and output strides, raw activation codes (-128 included),   */
/* wild scales, repeated and scattered token rows.                         */
/* ---------------------------------------------------------------------- */

/* a random Q8_0 row whose codes avoid -128 (the q8_0_q8_0a_tile_sym contract) */
static void sym_row(uint8_t *w, int n, int wild) {
    rand_row(GGML_Q8_0, w, n, wild);
    block_q8_0 *b = (block_q8_0 *)w;
    for (int i = 0; i < n / 32; i++)
        for (int k = 0; k < 32; k++)
            if (b[i].qs[k] == -128) b[i].qs[k] = (int8_t)(rnd() % 2 ? -127 : 127);
}

/* One Q8_0 x Q8_0a tile case against the scalar single-row kernel: nrows
 * random rows (codes without -128 when sym), padded rows and activation
 * strides, ntok activations of which a third hold raw codes (-128
 * included), repeated or scattered token rows. */
static long q8_tile_case(ds4_tile_fn tile, const ds4_kernels *sk, int n, int ntok, int nrows, int wild, int sym,
                         long *badg) {
    const fmt *f = &FMTS[0];
    const size_t ws = rb_of(f, n) + (size_t)irand(0, 3) * 2, ab = act_bytes(f, n);
    const size_t as = ab + (size_t)irand(0, 2) * 4;
    uint8_t *W = malloc(ws * (size_t)nrows), *A = malloc(as * (size_t)ntok);
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int r = 0; r < nrows; r++) {
        if (sym) sym_row(W + (size_t)r * ws, n, wild);
        else rand_row(f->type, W + (size_t)r * ws, n, wild);
    }
    for (int j = 0; j < ntok; j++) {
        rand_act(x, n, wild);
        block_q8_0a *q = (block_q8_0a *)(A + (size_t)j * as);
        ds4_quantize_q8_0a(x, q, n);
        if (rnd() % 3 == 0)   /* raw codes, -128 included */
            for (int b = 0; b < n / 32; b++) rand_bytes(q[b].qs, 32);
    }
    const int even = rnd() % 2;
    long bad = tile_vs_rows(tile, sk, f, n, W, ws, nrows, A, as, ntok, even, badg);
    free(W); free(A); free(x);
    return bad;
}

static void test_few_tokens(void) {
    const ds4_kernels *sk = ds4_kernels_scalar();
    const ds4_kernels *tabs[3] = { ds4_kernels_avx512(), ds4_kernels_avx512_packed(), ds4_kernels_amx() };
    static const int ns[] = { 32, 64, 224, 1024, 2048, 4096, 8192, 8224 };
    static const int rws[] = { 1, 2, 15, 16, 17, 31, 33, 47, 64 };
    for (int ti = 0; ti < 3; ti++) {
        const ds4_kernels *k = tabs[ti];
        if (!k) continue;
        long bad = 0, badg = 0, cases = 0;
        for (int ni = 0; ni < 8; ni++)
            for (int ntok = 1; ntok <= 8; ntok++) {
                bad += q8_tile_case(k->q8_0_q8_0a_tile, sk, ns[ni], ntok, rws[rnd() % 9], (ntok + ni) & 1, 0, &badg);
                cases++;
            }
        CHECK(bad == 0, "%s q8_0 few tokens: %ld outputs differ from the scalar single-row kernel", k->name, bad);
        CHECK(badg == 0, "%s q8_0 few tokens: %ld writes outside the tile", k->name, badg);
        printf("info: %s q8_0 %ld cases of 1..8 tokens: every output equals the scalar table\n", k->name, cases);
    }
}

/* ---------------------------------------------------------------------- */
/* Q8_0 weights without -128 codes: ds4_q8_0_sym finds any -128 (one code  */
/* planted anywhere, at the Flash row lengths), and every table's          */
/* q8_0_q8_0a_tile_sym (where it has one) equals the scalar single-row     */
/* kernel bit for bit on such weights, 1..9 and 16..67 tokens, activations */
/* with raw codes (-128 included), ragged row counts, padded rows and      */
/* strides.                                                                */
/* ---------------------------------------------------------------------- */

static void test_q8_sym(void) {
    long scan_bad = 0, scans = 0;
    CHECK(ds4_q8_0_sym(NULL, 0) == 1, "ds4_q8_0_sym: no blocks is symmetric");
    static const int sn[] = { 32, 1024, 4096, 8192, 40960 };
    for (int si = 0; si < 5; si++)
        for (int rep = 0; rep < 8; rep++) {
            const int n = sn[si], nb = n / 32;
            uint8_t *w = malloc((size_t)nb * sizeof(block_q8_0));
            sym_row(w, n, rep & 1);
            scan_bad += ds4_q8_0_sym(w, (size_t)nb) != 1;
            block_q8_0 *b = (block_q8_0 *)w;
            const int bi = irand(0, nb - 1), k = irand(0, 31);
            b[bi].qs[k] = -128;
            scan_bad += ds4_q8_0_sym(w, (size_t)nb) != 0;
            memset(&b[bi].d, 0x80, 2);   /* 0x80 in a scale is not a code */
            b[bi].qs[k] = 5;
            scan_bad += ds4_q8_0_sym(w, (size_t)nb) != 1;
            scans += 3;
            free(w);
        }
    CHECK(scan_bad == 0, "ds4_q8_0_sym: %ld of %ld scans wrong", scan_bad, scans);

    const ds4_kernels *sk = ds4_kernels_scalar();
    const ds4_kernels *tabs[5] = { sk, ds4_kernels_avx2(), ds4_kernels_avx512(), ds4_kernels_avx512_packed(),
                                   ds4_kernels_amx() };
    static const int ns[] = { 32, 64, 224, 1024, 2048, 4096, 8192 };
    static const int rws[] = { 1, 7, 8, 9, 15, 16, 17, 33, 64 };
    for (int ti = 0; ti < 5; ti++) {
        const ds4_kernels *k = tabs[ti];
        if (!k || !k->q8_0_q8_0a_tile_sym) continue;
        long bad = 0, badg = 0, cases = 0;
        for (int ni = 0; ni < 7; ni++)
            for (int ntok = 1; ntok <= 9; ntok++) {
                bad += q8_tile_case(k->q8_0_q8_0a_tile_sym, sk, ns[ni], ntok, rws[rnd() % 9], (ntok + ni) & 1, 1, &badg);
                cases++;
            }
        /* batches: whole and ragged groups of 8 tokens, several token
         * slices of avx2's token-lane tile (n = 8192: 16 tokens a slice;
         * 16384: 8), and rows too long for it (16416) */
        static const int bn[] = { 1024, 4096, 8192, 16384, 16416 };
        static const int bt[] = { 16, 17, 23, 40, 67 };
        for (int bi = 0; bi < 5; bi++) {
            bad += q8_tile_case(k->q8_0_q8_0a_tile_sym, sk, bn[bi], bt[bi], rws[rnd() % 9], bi & 1, 1, &badg);
            bad += q8_tile_case(k->q8_0_q8_0a_tile_sym, sk, bn[4 - bi], bt[bi], rws[rnd() % 9], bi & 1, 1, &badg);
            cases += 2;
        }
        CHECK(bad == 0, "%s q8_0 sym tile: %ld outputs differ from the scalar single-row kernel", k->name, bad);
        CHECK(badg == 0, "%s q8_0 sym tile: %ld writes outside the tile", k->name, badg);
        printf("info: %s q8_0 sym tile, %ld cases of 1..9 and 16..67 tokens: every output equals the scalar table\n",
               k->name, cases);
    }

    /* The AVX-512 tables start as a copy of the avx2 one: an avx2 batch
     * tile left in them (q8_0_q8_0a_tile_sym once was, taking every real
     * Q8_0 matrix off the VNNI and AMX tiles at a third of their speed)
     * gives the same bits, so only this check sees it. */
    const ds4_kernels *v2 = ds4_kernels_avx2();
    for (int ti = 2; ti < 5 && v2; ti++) {
        const ds4_kernels *k = tabs[ti];
        if (!k) continue;
        const ds4_tile_fn mine[] = { k->q8_0_q8_0a_tile, k->q8_0_q8_0a_tile_sym, k->q2_K_q8_K_tile,
                                     k->q4_K_q8_K_tile, k->iq2_xxs_q8_K_tile, k->f32_f32_tile,
                                     k->f16_f32_tile, k->mxfp4_q8_0a_tile };
        const ds4_tile_fn avx2[] = { v2->q8_0_q8_0a_tile, v2->q8_0_q8_0a_tile_sym, v2->q2_K_q8_K_tile,
                                     v2->q4_K_q8_K_tile, v2->iq2_xxs_q8_K_tile, v2->f32_f32_tile,
                                     v2->f16_f32_tile, v2->mxfp4_q8_0a_tile };
        int inherited = 0;
        for (int f = 0; f < 8; f++) inherited += mine[f] && mine[f] == avx2[f];
        CHECK(inherited == 0, "%s: %d batch tile entries are the avx2 table's kernels", k->name, inherited);
    }
}

/* ---------------------------------------------------------------------- */
/* Few tokens of F16 and F32 (3..8: ftile_few, which slices the reduction  */
/* axis when the tokens' activations pass 16 KB and keeps the partial      */
/* sums in a stash between slices) equal the same table's single-row       */
/* kernel bit for bit, T = 1..9, at the Flash row lengths (1024: indexer   */
/* q_b; 4096: compressor, gate; 16384: HC) and around the slice and        */
/* 32-element limits, ragged and whole 16-row strips, padded rows and      */
/* output strides, repeated token rows.                                    */
/* ---------------------------------------------------------------------- */

static void test_few_tokens_float(void) {
    const ds4_kernels *tabs[4] = { ds4_kernels_avx2(), ds4_kernels_avx512(), ds4_kernels_avx512_packed(),
                                   ds4_kernels_amx() };
    static const int ns[] = { 8, 31, 32, 100, 1024, 1027, 1344, 1376, 2048, 4096, 4104, 16384 };
    static const int rws[] = { 1, 2, 3, 15, 16, 17, 31, 33, 47, 64 };
    for (int ti = 0; ti < 4; ti++) {
        const ds4_kernels *k = tabs[ti];
        if (!k) continue;
        long bad = 0, badg = 0, cases = 0;
        for (int fi = 4; fi <= 5; fi++) {
            const fmt *f = &FMTS[fi];
            for (int ni = 0; ni < 12; ni++)
                for (int ntok = 1; ntok <= 9; ntok++) {
                    const int n = ns[ni], nrows = rws[rnd() % 10];
                    const size_t ws = rb_of(f, n) + (size_t)irand(0, 3) * 4, as = (size_t)n * 4 + (size_t)irand(0, 2) * 4;
                    uint8_t *W = malloc(ws * (size_t)nrows), *A = malloc(as * (size_t)ntok);
                    for (int r = 0; r < nrows; r++) rand_row(f->type, W + (size_t)r * ws, n, 0);
                    for (int j = 0; j < ntok; j++) rand_act((float *)(A + (size_t)j * as), n, (j + ni) & 1);
                    const int even = rnd() % 2;
                    bad += tile_vs_rows(tile_of(k, f), k, f, n, W, ws, nrows, A, as, ntok, even, &badg);
                    cases++;
                    free(W); free(A);
                }
        }
        CHECK(bad == 0, "%s f16/f32 few tokens: %ld outputs differ from the single-row kernel", k->name, bad);
        CHECK(badg == 0, "%s f16/f32 few tokens: %ld writes outside the tile", k->name, badg);
        printf("info: %s f16/f32 %ld cases of 1..9 tokens: every output equals the single-row kernel\n", k->name, cases);
    }
}

/* ---------------------------------------------------------------------- */
/* The amx table's tile paths (batches at or above each format's threshold; */
/* the random cases above mostly stay below): Q8_0 and MXFP4 x Q8_0a, Q2_K, */
/* Q4_K and IQ2_XXS x Q8_K (raw codes and bsums too), token rows           */
/* evenly spaced (read in place by tileloadd) and scattered (staged),      */
/* token counts around DS4_AMX_MIN_TOK, the 16-token tiles and the 256-token groups, row   */
/* lengths around the 32-block K chunks, partial 16-row strips, raw -128   */
/* activation codes and wild scales: every output equals the scalar        */
/* single-row kernel bit for bit, and nothing outside the tile is written. */
/* ---------------------------------------------------------------------- */

static void test_amx_tiles(void) {
    const ds4_kernels *k = ds4_kernels_amx(), *sk = ds4_kernels_scalar();
    if (!k) { printf("info: amx table not available on this CPU\n"); return; }
    static const int ns8[] = { 32, 992, 1024, 1056, 2048, 4096 };
    /* K-quants: 256-element blocks, 4-block K chunks */
    static const int nsk[] = { 256, 768, 1024, 1280, 2048, 4096 };
    long bad = 0, badg = 0, cases = 0;
    /* Q8_0, MXFP4, Q2_K, Q4_K, IQ2_XXS */
    const int fidx[5] = { 0, NFMT - 1, 1, 2, 3 };
    for (int fi = 0; fi < 5; fi++) {
        const fmt *f = &FMTS[fidx[fi]];
        const int kq = f->act == A_Q8_K;
        ds4_tile_fn tile = fi == 0 ? k->q8_0_q8_0a_tile : fi == 1 ? k->mxfp4_q8_0a_tile
                           : fi == 2 ? k->q2_K_q8_K_tile : fi == 3 ? k->q4_K_q8_K_tile : k->iq2_xxs_q8_K_tile;
        const int mt = ds4_amx_min_tok(f->type);
        const int toks[13] = { mt - 1, mt, mt + 1, 31, 48, 79, 80, 100, 255, 256, 257, 300, 511 };
        for (int rep = 0; rep < 24; rep++) {
            const int n = (kq ? nsk : ns8)[rep % 6], ntok = toks[rnd() % 13], wild = rep & 1;
            const int nrows = rep % 3 == 0 ? 16 : irand(1, 50), even = (rep >> 1) & 1;
            /* padded rows stay 2-byte aligned: Q8_0 blocks hold an f16 (rows
             * of a GGUF file are, 34 bytes a block) */
            const size_t ws = rb_of(f, n) + (size_t)irand(0, 3) * 2, ab = act_bytes(f, n);
            const size_t as = ab + (size_t)irand(0, 2) * 4;   /* even spacing, maybe padded */
            uint8_t *W = malloc(ws * (size_t)nrows), *A = malloc(as * (size_t)ntok);
            float *x = malloc(sizeof(float) * (size_t)n);
            for (int r = 0; r < nrows; r++) rand_row(f->type, W + (size_t)r * ws, n, wild);
            for (int j = 0; j < ntok; j++) {
                rand_act(x, n, wild);
                if (kq) {
                    block_q8_K *q = (block_q8_K *)(A + (size_t)j * as);
                    ds4_quantize_q8_K(x, q, n);
                    if (rnd() % 4 == 0)   /* raw codes (never -128) and bsums taken as given */
                        for (int b = 0; b < n / 256; b++) {
                            rand_bytes(q[b].qs, 256);
                            for (int i = 0; i < 256; i++) if (q[b].qs[i] == -128) q[b].qs[i] = -127;
                            for (int i = 0; i < 16; i++) q[b].bsums[i] = (int16_t)irand(-2032, 2032);
                        }
                } else {
                    block_q8_0a *q = (block_q8_0a *)(A + (size_t)j * as);
                    ds4_quantize_q8_0a(x, q, n);
                    if (rnd() % 4 == 0)   /* raw codes, -128 included */
                        for (int b = 0; b < n / 32; b++) rand_bytes(q[b].qs, 32);
                }
            }
            const long b = tile_vs_rows(tile, sk, f, n, W, ws, nrows, A, as, ntok, even, &badg);
            if (b) printf("amx %s n=%d ntok=%d nrows=%d: %ld differ\n", f->name, n, ntok, nrows, b);
            bad += b;
            cases++;
            free(W); free(A); free(x);
        }
    }
    CHECK(bad == 0, "amx tiles: %ld outputs differ from the scalar single-row kernel", bad);
    CHECK(badg == 0, "amx tiles: %ld writes outside the tile", badg);
    printf("info: amx %ld batched cases (Q8_0, MXFP4, Q2_K, Q4_K, IQ2_XXS around their thresholds .. 511 tokens): "
           "every output equals the scalar table\n", cases);
}

/* ---------------------------------------------------------------------- */
/* Streamed outputs (ds4_stream_out): a product with output rows of 16384+ */
/* floats and 256+ tokens writes its whole 16-row strips with streaming    */
/* stores (amx, one K chunk).  Every table against the scalar single-row  */
/* kernel, a ragged last strip (masked stores), outputs past nrows in each */
/* row untouched, and the same call on an unaligned y (no streaming).     */
/* ---------------------------------------------------------------------- */
static void test_stream_out(void) {
    const ds4_kernels *tabs[NTAB] = { ds4_kernels_scalar(), ds4_kernels_avx2(), ds4_kernels_avx512(),
                                      ds4_kernels_avx512_packed(), ds4_kernels_amx() };
    const ds4_kernels *sk = ds4_kernels_scalar();
    long bad = 0, badg = 0, cases = 0;
    const int ntok = 260, nrows = 40;
    const size_t ys = DS4_STREAM_OUT_ROW;
    const size_t ny = ys * (size_t)ntok + 32;
    float *Y = NULL;
    if (posix_memalign((void **)&Y, 64, sizeof(float) * ny)) { CHECK(0, "stream test: out of memory"); return; }
    /* Q8_0 and MXFP4 with one K chunk (streamed by the amx table) and two
     * (sums through y, prefetched for writing), Q2_K */
    const int fidx[5] = { 0, 0, NFMT - 1, NFMT - 1, 1 };
    for (int fi = 0; fi < 5; fi++) {
        const fmt *f = &FMTS[fidx[fi]];
        const int n = f->blk == 32 ? (fi & 1 ? 1056 : 1024) : 512;
        const size_t ws = rb_of(f, n), ab = act_bytes(f, n);
        uint8_t *W = malloc(ws * nrows), *A = malloc(ab * ntok);
        float *x = malloc(sizeof(float) * n);
        const void **ap = malloc(sizeof(void *) * ntok);
        for (int r = 0; r < nrows; r++) rand_row(f->type, W + (size_t)r * ws, n, 0);
        for (int j = 0; j < ntok; j++) {
            rand_act(x, n, 0);
            if (f->act == A_Q8_K) ds4_quantize_q8_K(x, (block_q8_K *)(A + (size_t)j * ab), n);
            else ds4_quantize_q8_0a(x, (block_q8_0a *)(A + (size_t)j * ab), n);
            ap[j] = A + (size_t)j * ab;
        }
        float *ref = malloc(sizeof(float) * (size_t)nrows * ntok);
        for (int j = 0; j < ntok; j++)
            for (int r = 0; r < nrows; r++) ref[(size_t)j * nrows + r] = row_dot(sk, f, n, W + (size_t)r * ws, ap[j]);
        for (int ti = 0; ti < NTAB; ti++) {
            if (!tabs[ti]) continue;
            for (int off = 0; off < 2; off++) {   /* aligned (streamed), then 4 bytes off */
                float *y = Y + off;
                const uint32_t guard = 0x7fc0dead;
                for (size_t i = 0; i < ny; i++) memcpy(&Y[i], &guard, 4);
                CHECK(ds4_stream_out(y, ys, ntok) == !off, "stream test: ds4_stream_out(off %d)", off);
                tile_of(tabs[ti], f)(n, W, ws, nrows, (const void *const *)ap, ntok, y, ys);
                for (size_t i = 0; i < ny; i++) {
                    const long p = (long)i - off, j = p / (long)ys, r = p % (long)ys;
                    if (p >= 0 && j < ntok && r < nrows) bad += !same_value(Y[i], ref[(size_t)j * nrows + r]);
                    else badg += memcmp(&Y[i], &guard, 4) != 0;
                }
                cases++;
            }
        }
        free(W); free(A); free(x); free(ap); free(ref);
    }
    free(Y);
    CHECK(bad == 0, "streamed outputs: %ld differ from the scalar single-row kernel", bad);
    CHECK(badg == 0, "streamed outputs: %ld writes outside the outputs", badg);
    printf("info: %ld streamed-output cases (Q8_0, MXFP4, Q2_K; %d tokens, rows of %zu floats, aligned and not)\n",
           cases, ntok, ys);
}

int main(int argc, char **argv) {
    /* `test_kernels --has-table NAME`: exit 0 when this CPU runs that table
     * (tests/t_realshape.sh asks before comparing tables end to end) */
    if (argc == 3 && !strcmp(argv[1], "--has-table")) return ds4_kernels_by_name(argv[2]) ? 0 : 1;
    if (argc > 1) {
        fprintf(stderr, "usage: test_kernels [--has-table scalar|avx2|avx512|avx512-packed|amx]\n");
        return 2;
    }
    const char *seed = getenv("DS4_TEST_SEED");
    if (seed && *seed) rng ^= strtoull(seed, NULL, 0) * 0xbf58476d1ce4e5b9ull;
    if (!rng) rng = 1;
    printf("info: best table: %s\n", ds4_kernels_best()->name);
    test_tables();
    test_mxfp4();
    test_few_tokens();
    test_q8_sym();
    test_few_tokens_float();
    test_amx_tiles();
    test_stream_out();
    test_driver();
    printf("test_kernels: %d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
