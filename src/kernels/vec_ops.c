/*
 * vec_ops.c -- see vec_ops.h.
 *
 * One arithmetic for every table, so that attention gives the same bits on
 * every CPU (docs/NUMERICS.md):
 *  - dots (dot, dot4, dot4x4): element i is fused-multiply-added into lane
 *    i mod 16, in element order, lanes starting at +0; the 16 lanes are
 *    reduced as r8[l] = l[l] + l[l+8], r4[l] = r8[l] + r8[l+4],
 *    r2[l] = r4[l] + r4[l+2], r2[0] + r2[1].  A SIMD kernel runs the whole
 *    groups of 16 in registers (avx2: lanes 0..7 and 8..15 in two ymm) and
 *    hands its lanes to the same scalar tail and reduction (lanes16_finish).
 *  - axpy4 / wsum4: per output element o = fma(e_r, k_r, o) in key order
 *    (wsum4 from o = +0).
 *  - exp (vec_expf): n = nearest-even integer of (x * log2 e) (product
 *    rounded), r = fma(n, -C1, x), r = fma(n, C2, r) (Cody-Waite split
 *    ln 2 = C1 - C2), p = Horner in fma over the 6 Cephes expf coefficients,
 *    y = fma(p, r * r, r) + 1, times 2^n by adding n to the exponent
 *    field.  exp_sum adds its outputs into 16 lanes as the dots do.
 *    Not libm's expf: that one differs between libms and is scalar; this
 *    one is 8-16 lanes wide (attention softmax, SwiGLU) and pinned.
 *  - idx_score16: each block's dot an exact integer, then the float
 *    steps of vec_ops.h in its order (all exact but the block sum and the
 *    head sum), so any table, any instruction gives the scalar bits.
 *  - sumsq_rows: each row's sum of (double)x * x, one chain in element
 *    order from +0.  The double product of two floats is exact (24 + 24
 *    significand bits), so fma(x, x, s) rounds once where x * x + s does:
 *    the SIMD kernels use FMA and give the scalar bits.
 * The scalar versions write each FMA out with fmaf (the build has
 * -ffp-contract=off, so nothing else is fused).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/vec_ops.h"

/* The 16-lane reduction tree of the dots and of exp_sum. */
static inline float lanes16_tree(const float *l) {
    float r8[8], r4[4];
    for (int j = 0; j < 8; j++) r8[j] = l[j] + l[j + 8];
    for (int j = 0; j < 4; j++) r4[j] = r8[j] + r8[j + 4];
    return (r4[0] + r4[2]) + (r4[1] + r4[3]);
}

/* Finish a dot from its 16 lanes: elements i0..n-1 (fewer than a SIMD
 * group) into lane i mod 16, then the reduction tree. */
static inline float lanes16_finish(float *l, const float *a, const float *b, int i0, int n) {
    for (int i = i0; i < n; i++) l[i & 15] = fmaf(a[i], b[i], l[i & 15]);
    return lanes16_tree(l);
}

static float s_dot(const float *a, const float *b, int n) {
    float l[16] = { 0 };
    return lanes16_finish(l, a, b, 0, n);
}

static void s_dot4(const float *q, size_t qs, const float *k, int n, float *out) {
    for (int h = 0; h < VEC_HB; h++) out[h] = s_dot(q + (size_t)h * qs, k, n);
}

static void s_axpy4(float *o, size_t os, const float *e, const float *k, int n) {
    for (int h = 0; h < VEC_HB; h++) {
        float *y = o + (size_t)h * os;
        for (int i = 0; i < n; i++) y[i] = fmaf(e[h], k[i], y[i]);
    }
}

static void s_wsum4(float *o, size_t os, const float *const *keys, const float *e,
                    size_t es, int nk, int n) {
    for (int h = 0; h < VEC_HB; h++) {
        float *y = o + (size_t)h * os;
        memset(y, 0, (size_t)n * sizeof(float));
        for (int r = 0; r < nk; r++) {
            float w = e[(size_t)h * es + r];
            for (int i = 0; i < n; i++) y[i] = fmaf(w, keys[r][i], y[i]);
        }
    }
}

static void s_dot4x4(const float *q, size_t qs, const float *const *keys, int n, float *out) {
    for (int j = 0; j < 4; j++) {
        float o[4];
        s_dot4(q, qs, keys[j], n, o);
        for (int h = 0; h < 4; h++) out[h * 4 + j] = o[h];
    }
}

/* vec_expf constants: log2 e; ln 2 = C1 - C2 with C1 exact in 9 bits (n * C1
 * is exact for |n| <= 128); Cephes' expf polynomial for
 * (e^r - 1 - r) / r^2 on |r| <= ln(2)/2; the range ends. */
#define EXP_LOG2E 1.44269504088896341f
#define EXP_C1 0.693359375f
#define EXP_C2 2.12194440e-4f
#define EXP_P0 1.9875691500e-4f
#define EXP_P1 1.3981999507e-3f
#define EXP_P2 8.3334519073e-3f
#define EXP_P3 4.1665795894e-2f
#define EXP_P4 1.6666665459e-1f
#define EXP_P5 5.0000001201e-1f
#define EXP_LO -87.33654f              /* ln(FLT_MIN): below it the result would be subnormal */
#define EXP_HI 88.72283935546875f      /* 128 ln 2 rounded up: e^x overflows from here */

float vec_expf(float x) {
    if (x != x) return x;
    if (x < EXP_LO) return 0.0f;
    if (x >= EXP_HI) return INFINITY;
    const float n = nearbyintf(x * EXP_LOG2E);
    float r = fmaf(n, -EXP_C1, x);
    r = fmaf(n, EXP_C2, r);
    float p = fmaf(EXP_P0, r, EXP_P1);
    p = fmaf(p, r, EXP_P2);
    p = fmaf(p, r, EXP_P3);
    p = fmaf(p, r, EXP_P4);
    p = fmaf(p, r, EXP_P5);
    float y = fmaf(p, r * r, r) + 1.0f;
    /* y in [0.7, 1.5) and n in [-126, 128]: a normal float, scaled exactly */
    uint32_t b;
    memcpy(&b, &y, 4);
    b += (uint32_t)(int32_t)n << 23;
    memcpy(&y, &b, 4);
    return y;
}

static void s_exp(const float *x, float *y, int n) {
    for (int i = 0; i < n; i++) y[i] = vec_expf(x[i]);
}

/* Finish exp_sum from its 16 lanes: elements i0..n-1 (fewer than a SIMD
 * group) exponentiated and added into lane i mod 16, then the tree. */
static inline float exp_sum_finish(float *l, float *w, int i0, int n, float m) {
    for (int i = i0; i < n; i++) {
        w[i] = vec_expf(w[i] - m);
        l[i & 15] += w[i];
    }
    return lanes16_tree(l);
}

static float s_exp_sum(float *w, int n, float m) {
    float l[16] = { 0 };
    return exp_sum_finish(l, w, 0, n, m);
}

static void s_sumsq_rows(const float *x, size_t xs, int nr, int n, double *ss) {
    for (int r = 0; r < nr; r++) {
        const float *p = x + (size_t)r * xs;
        double s = 0;
        for (int i = 0; i < n; i++) s += (double)p[i] * p[i];
        ss[r] = s;
    }
}

/* The indexer's relu and head weight (deepseek4.c relu_w): w * d where
 * d > 0, else +0. */
static inline float idx_relu_w(float w, float d) { return d > 0 ? w * d : 0.0f; }

static void s_idx_score16(const int8_t *qc, const float *pq, const int32_t *qs, const float *w, int nh, int nb,
                          const uint8_t *kc, const float *pk, float *out) {
    (void)qs;
    for (int r = 0; r < 16; r++) {
        float s = 0.0f;
        for (int h = 0; h < nh; h++) {
            const int8_t *q = qc + (size_t)h * 32 * nb;
            float d = 0.0f;
            for (int b = 0; b < nb; b++) {
                int32_t I = 0;
                for (int i = 32 * b; i < 32 * b + 32; i++) I += q[i] * (kc[64 * (i / 4) + 4 * r + i % 4] - 16);
                const float t = ((float)I * pq[h * nb + b]) * pk[16 * b + r];
                d = b ? d + t : t;
            }
            s += idx_relu_w(w[h], d);
        }
        out[r] = s;
    }
}

static const vec_kernels k_scalar = { "scalar", s_dot4, s_axpy4, s_dot, s_dot4x4, s_wsum4, s_exp, s_exp_sum,
                                      s_sumsq_rows, s_idx_score16 };

const vec_kernels *vec_kernels_scalar(void) { return &k_scalar; }

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma")))

/* The reduction tree of lanes16_finish on lanes 0..7 (lo) and 8..15 (hi). */
AVX2 static inline float red16_avx2(__m256 lo, __m256 hi) {
    __m256 r8 = _mm256_add_ps(lo, hi);
    __m128 r4 = _mm_add_ps(_mm256_castps256_ps128(r8), _mm256_extractf128_ps(r8, 1));
    __m128 r2 = _mm_add_ps(r4, _mm_movehl_ps(r4, r4));
    return _mm_cvtss_f32(_mm_add_ss(r2, _mm_movehdup_ps(r2)));
}

/* Lanes -> result: vector tree when no element is left, else the scalar
 * tail and tree (rare: the model's lengths are multiples of 16). */
AVX2 static inline float fin16_avx2(__m256 lo, __m256 hi, const float *a, const float *b, int i, int n) {
    if (i == n) return red16_avx2(lo, hi);
    float l[16];
    _mm256_storeu_ps(l, lo);
    _mm256_storeu_ps(l + 8, hi);
    return lanes16_finish(l, a, b, i, n);
}

AVX2 static void v_dot4(const float *q, size_t qs, const float *k, int n, float *out) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 k0 = _mm256_loadu_ps(k + i), k1 = _mm256_loadu_ps(k + i + 8);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), k0, a0);
        b0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), k1, b0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + qs + i), k0, a1);
        b1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + qs + i + 8), k1, b1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 2 * qs + i), k0, a2);
        b2 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 2 * qs + i + 8), k1, b2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 3 * qs + i), k0, a3);
        b3 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 3 * qs + i + 8), k1, b3);
    }
    out[0] = fin16_avx2(a0, b0, q, k, i, n);
    out[1] = fin16_avx2(a1, b1, q + qs, k, i, n);
    out[2] = fin16_avx2(a2, b2, q + 2 * qs, k, i, n);
    out[3] = fin16_avx2(a3, b3, q + 3 * qs, k, i, n);
}

AVX2 static void v_axpy4(float *o, size_t os, const float *e, const float *k, int n) {
    __m256 e0 = _mm256_set1_ps(e[0]), e1 = _mm256_set1_ps(e[1]);
    __m256 e2 = _mm256_set1_ps(e[2]), e3 = _mm256_set1_ps(e[3]);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 kv = _mm256_loadu_ps(k + i);
        _mm256_storeu_ps(o + i, _mm256_fmadd_ps(e0, kv, _mm256_loadu_ps(o + i)));
        _mm256_storeu_ps(o + os + i, _mm256_fmadd_ps(e1, kv, _mm256_loadu_ps(o + os + i)));
        _mm256_storeu_ps(o + 2 * os + i, _mm256_fmadd_ps(e2, kv, _mm256_loadu_ps(o + 2 * os + i)));
        _mm256_storeu_ps(o + 3 * os + i, _mm256_fmadd_ps(e3, kv, _mm256_loadu_ps(o + 3 * os + i)));
    }
    for (; i < n; i++)
        for (int h = 0; h < 4; h++) o[h * os + i] = fmaf(e[h], k[i], o[h * os + i]);
}

AVX2 static float v_dot(const float *a, const float *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    return fin16_avx2(s0, s1, a, b, i, n);
}

/* 16 output floats per head per pass: 8 accumulators stay in registers
 * while every key streams past once. */
AVX2 static void v_wsum4(float *o, size_t os, const float *const *keys, const float *e,
                         size_t es, int nk, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00;
        __m256 a20 = a00, a21 = a00, a30 = a00, a31 = a00;
        for (int r = 0; r < nk; r++) {
            const float *k = keys[r] + i;
            __m256 k0 = _mm256_loadu_ps(k), k1 = _mm256_loadu_ps(k + 8);
            __m256 w = _mm256_broadcast_ss(e + r);
            a00 = _mm256_fmadd_ps(w, k0, a00); a01 = _mm256_fmadd_ps(w, k1, a01);
            w = _mm256_broadcast_ss(e + es + r);
            a10 = _mm256_fmadd_ps(w, k0, a10); a11 = _mm256_fmadd_ps(w, k1, a11);
            w = _mm256_broadcast_ss(e + 2 * es + r);
            a20 = _mm256_fmadd_ps(w, k0, a20); a21 = _mm256_fmadd_ps(w, k1, a21);
            w = _mm256_broadcast_ss(e + 3 * es + r);
            a30 = _mm256_fmadd_ps(w, k0, a30); a31 = _mm256_fmadd_ps(w, k1, a31);
        }
        _mm256_storeu_ps(o + i, a00); _mm256_storeu_ps(o + i + 8, a01);
        _mm256_storeu_ps(o + os + i, a10); _mm256_storeu_ps(o + os + i + 8, a11);
        _mm256_storeu_ps(o + 2 * os + i, a20); _mm256_storeu_ps(o + 2 * os + i + 8, a21);
        _mm256_storeu_ps(o + 3 * os + i, a30); _mm256_storeu_ps(o + 3 * os + i + 8, a31);
    }
    /* the same per-element steps: 8-wide FMA, then fmaf */
    for (; i + 8 <= n; i += 8) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int r = 0; r < nk; r++) {
            __m256 k0 = _mm256_loadu_ps(keys[r] + i);
            a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(e + r), k0, a0);
            a1 = _mm256_fmadd_ps(_mm256_broadcast_ss(e + es + r), k0, a1);
            a2 = _mm256_fmadd_ps(_mm256_broadcast_ss(e + 2 * es + r), k0, a2);
            a3 = _mm256_fmadd_ps(_mm256_broadcast_ss(e + 3 * es + r), k0, a3);
        }
        _mm256_storeu_ps(o + i, a0);
        _mm256_storeu_ps(o + os + i, a1);
        _mm256_storeu_ps(o + 2 * os + i, a2);
        _mm256_storeu_ps(o + 3 * os + i, a3);
    }
    for (; i < n; i++)
        for (int h = 0; h < 4; h++) {
            float acc = 0;
            for (int r = 0; r < nk; r++) acc = fmaf(e[h * es + r], keys[r][i], acc);
            o[h * os + i] = acc;
        }
}

AVX2 static void v_dot4x4(const float *q, size_t qs, const float *const *keys, int n, float *out) {
    for (int j = 0; j < 4; j++) {
        float o[4];
        v_dot4(q, qs, keys[j], n, o);
        for (int h = 0; h < 4; h++) out[h * 4 + j] = o[h];
    }
}

/* vec_expf on 8 lanes: the scalar steps; the special cases by blends */
AVX2 static inline __m256 v_exp8(__m256 x) {
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(EXP_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-EXP_C1), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(EXP_C2), r);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(EXP_P0), r, _mm256_set1_ps(EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P5));
    const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    __m256 e = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(y), _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23)));
    e = _mm256_blendv_ps(e, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(EXP_LO), _CMP_LT_OQ));
    e = _mm256_blendv_ps(e, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, _mm256_set1_ps(EXP_HI), _CMP_GE_OQ));
    return _mm256_blendv_ps(e, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

AVX2 static void v_exp(const float *x, float *y, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, v_exp8(_mm256_loadu_ps(x + i)));
    s_exp(x + i, y + i, n - i);
}

AVX2 static float v_exp_sum(float *w, int n, float m) {
    const __m256 mv = _mm256_set1_ps(m);
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 a = v_exp8(_mm256_sub_ps(_mm256_loadu_ps(w + i), mv));
        const __m256 b = v_exp8(_mm256_sub_ps(_mm256_loadu_ps(w + i + 8), mv));
        _mm256_storeu_ps(w + i, a);
        _mm256_storeu_ps(w + i + 8, b);
        lo = _mm256_add_ps(lo, a);
        hi = _mm256_add_ps(hi, b);
    }
    if (i == n) return red16_avx2(lo, hi);
    float l[16];
    _mm256_storeu_ps(l, lo);
    _mm256_storeu_ps(l + 8, hi);
    return exp_sum_finish(l, w, i, n, m);
}

/* Sums of squares with the rows in the lanes: 4 rows a ymm of doubles, up
 * to four such groups at once, so that four FMA chains (one per group)
 * cover the FMA latency.  8 elements of 4 rows are transposed in registers
 * (two unpack levels: vector u[j] holds element j of the rows in its low
 * 128 bits, element 4 + j in its high), and each row's squares are added
 * in element order. */
AVX2 static inline __m256d v_sq4x8(const float *p, size_t xs, __m256d acc) {
    __m256 r[4], t[4], u[4];
    for (int k = 0; k < 4; k++) r[k] = _mm256_loadu_ps(p + (size_t)k * xs);
    t[0] = _mm256_unpacklo_ps(r[0], r[1]);
    t[1] = _mm256_unpackhi_ps(r[0], r[1]);
    t[2] = _mm256_unpacklo_ps(r[2], r[3]);
    t[3] = _mm256_unpackhi_ps(r[2], r[3]);
    for (int h = 0; h < 2; h++) {
        const __m256d a = _mm256_castps_pd(t[h]), b = _mm256_castps_pd(t[h + 2]);
        u[2 * h] = _mm256_castpd_ps(_mm256_unpacklo_pd(a, b));
        u[2 * h + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(a, b));
    }
    for (int e = 0; e < 8; e++) {
        const __m128 c = e < 4 ? _mm256_castps256_ps128(u[e]) : _mm256_extractf128_ps(u[e - 4], 1);
        const __m256d d = _mm256_cvtps_pd(c);
        acc = _mm256_fmadd_pd(d, d, acc);
    }
    return acc;
}

AVX2 static void v_sumsq_rows(const float *x, size_t xs, int nr, int n, double *ss) {
    int r0 = 0;
    while (r0 + 4 <= nr) {
        int G = (nr - r0) / 4;
        if (G > 4) G = 4;
        const float *p = x + (size_t)r0 * xs;
        __m256d acc[4];
        for (int g = 0; g < 4; g++) acc[g] = _mm256_setzero_pd();
        int i = 0;
        for (; i + 8 <= n; i += 8)
            for (int g = 0; g < G; g++) acc[g] = v_sq4x8(p + (size_t)4 * g * xs + i, xs, acc[g]);
        for (; i < n; i++)
            for (int g = 0; g < G; g++) {
                const float *q = p + (size_t)4 * g * xs + i;
                const __m256d d = _mm256_cvtps_pd(_mm_setr_ps(q[0], q[xs], q[2 * xs], q[3 * xs]));
                acc[g] = _mm256_fmadd_pd(d, d, acc[g]);
            }
        for (int g = 0; g < G; g++) _mm256_storeu_pd(ss + r0 + 4 * g, acc[g]);
        r0 += 4 * G;
    }
    s_sumsq_rows(x + (size_t)r0 * xs, xs, nr - r0, n, ss + r0);
}

/* idx_score16 on 8 rows a ymm (rows 0..7, then 8..15: the low and high 32
 * bytes of each 64-byte quad): vpmaddubsw (row bytes code + 16, unsigned,
 * times the broadcast query quad: pairs <= 2 x 31 x 15 = 930, no
 * saturation) added up in 16 bits over a block's eight quads (<= 7440),
 * then vpmaddwd by ones to the block sums; four heads at once. */
#define AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) static inline
AVX2_INLINE void v_idx_heads(int nhh, const int8_t *qc, const float *pq, const int32_t *qs, const float *w,
                                    int nb, const uint8_t *kc, const float *pk, __m256 *s) {
    const __m256i ones = _mm256_set1_epi16(1);
    const size_t id = (size_t)32 * nb;
    __m256 d[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
    for (int b = 0; b < nb; b++) {
        __m256i a[4];
        for (int j = 0; j < nhh; j++) a[j] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++) {
            const __m256i kv = _mm256_loadu_si256((const __m256i *)(kc + 64 * (8 * b + q)));
            for (int j = 0; j < nhh; j++) {
                int32_t qq;
                memcpy(&qq, qc + j * id + 32 * b + 4 * q, 4);
                a[j] = _mm256_add_epi16(a[j], _mm256_maddubs_epi16(kv, _mm256_set1_epi32(qq)));
            }
        }
        const __m256 pkv = _mm256_loadu_ps(pk + 16 * b);
        for (int j = 0; j < nhh; j++) {
            const __m256i I = _mm256_sub_epi32(_mm256_madd_epi16(a[j], ones), _mm256_set1_epi32(qs[j * nb + b]));
            const __m256 t = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(I), _mm256_set1_ps(pq[j * nb + b])), pkv);
            d[j] = b ? _mm256_add_ps(d[j], t) : t;
        }
    }
    for (int j = 0; j < nhh; j++) {
        const __m256 m = _mm256_cmp_ps(d[j], _mm256_setzero_ps(), _CMP_GT_OQ);
        *s = _mm256_add_ps(*s, _mm256_and_ps(m, _mm256_mul_ps(_mm256_set1_ps(w[j]), d[j])));
    }
}

AVX2 static void v_idx_score16(const int8_t *qc, const float *pq, const int32_t *qs, const float *w, int nh, int nb,
                               const uint8_t *kc, const float *pk, float *out) {
    const size_t id = (size_t)32 * nb;
    for (int half = 0; half < 2; half++) {
        __m256 s = _mm256_setzero_ps();
        int h = 0;
        for (; h + 4 <= nh; h += 4)
            v_idx_heads(4, qc + h * id, pq + h * nb, qs + h * nb, w + h, nb, kc + 32 * half, pk + 8 * half, &s);
        for (; h < nh; h++)
            v_idx_heads(1, qc + h * id, pq + h * nb, qs + h * nb, w + h, nb, kc + 32 * half, pk + 8 * half, &s);
        _mm256_storeu_ps(out + 8 * half, s);
    }
}

static const vec_kernels k_avx2 = { "avx2", v_dot4, v_axpy4, v_dot, v_dot4x4, v_wsum4, v_exp, v_exp_sum,
                                    v_sumsq_rows, v_idx_score16 };

const vec_kernels *vec_kernels_avx2(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &k_avx2;
    return NULL;
}

/* ---- AVX-512F: 16 lanes; two accumulators per head hide FMA latency ---- */

#define AVX512 __attribute__((target("avx512f")))

AVX512 static inline float red16_avx512(__m512 z) {
    __m256 r8 = _mm256_add_ps(_mm512_castps512_ps256(z), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z), 1)));
    __m128 r4 = _mm_add_ps(_mm256_castps256_ps128(r8), _mm256_extractf128_ps(r8, 1));
    __m128 r2 = _mm_add_ps(r4, _mm_movehl_ps(r4, r4));
    return _mm_cvtss_f32(_mm_add_ss(r2, _mm_movehdup_ps(r2)));
}

AVX512 static inline float fin16_avx512(__m512 z, const float *a, const float *b, int i, int n) {
    if (i == n) return red16_avx512(z);
    float l[16];
    _mm512_storeu_ps(l, z);
    return lanes16_finish(l, a, b, i, n);
}

/* One 16-lane accumulator per head (the common order allows no second
 * one); four heads give four independent FMA chains. */
AVX512 static void z_dot4(const float *q, size_t qs, const float *k, int n, float *out) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 k0 = _mm512_loadu_ps(k + i);
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), k0, a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + qs + i), k0, a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(q + 2 * qs + i), k0, a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(q + 3 * qs + i), k0, a3);
    }
    out[0] = fin16_avx512(a0, q, k, i, n);
    out[1] = fin16_avx512(a1, q + qs, k, i, n);
    out[2] = fin16_avx512(a2, q + 2 * qs, k, i, n);
    out[3] = fin16_avx512(a3, q + 3 * qs, k, i, n);
}

AVX512 static float z_dot(const float *a, const float *b, int n) {
    __m512 s0 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16)
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    return fin16_avx512(s0, a, b, i, n);
}

/* Per element: o = fma(e_r, k_r, o) in key order, 16-wide, unfused scalar
 * tail -- the same arithmetic as z_wsum4 below. */
AVX512 static void z_axpy4(float *o, size_t os, const float *e, const float *k, int n) {
    __m512 e0 = _mm512_set1_ps(e[0]), e1 = _mm512_set1_ps(e[1]);
    __m512 e2 = _mm512_set1_ps(e[2]), e3 = _mm512_set1_ps(e[3]);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 kv = _mm512_loadu_ps(k + i);
        _mm512_storeu_ps(o + i, _mm512_fmadd_ps(e0, kv, _mm512_loadu_ps(o + i)));
        _mm512_storeu_ps(o + os + i, _mm512_fmadd_ps(e1, kv, _mm512_loadu_ps(o + os + i)));
        _mm512_storeu_ps(o + 2 * os + i, _mm512_fmadd_ps(e2, kv, _mm512_loadu_ps(o + 2 * os + i)));
        _mm512_storeu_ps(o + 3 * os + i, _mm512_fmadd_ps(e3, kv, _mm512_loadu_ps(o + 3 * os + i)));
    }
    for (; i < n; i++)
        for (int h = 0; h < 4; h++) o[h * os + i] = fmaf(e[h], k[i], o[h * os + i]);
}

/* 64 output floats per head per pass: 16 accumulators in registers while
 * the keys stream past (8 passes over the keys for d = 512). */
AVX512 static void z_wsum4(float *o, size_t os, const float *const *keys, const float *e,
                           size_t es, int nk, int n) {
    int i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512 a[4][4];
        for (int h = 0; h < 4; h++)
            for (int c = 0; c < 4; c++) a[h][c] = _mm512_setzero_ps();
        for (int r = 0; r < nk; r++) {
            const float *k = keys[r] + i;
            __m512 k0 = _mm512_loadu_ps(k), k1 = _mm512_loadu_ps(k + 16);
            __m512 k2 = _mm512_loadu_ps(k + 32), k3 = _mm512_loadu_ps(k + 48);
            for (int h = 0; h < 4; h++) {
                __m512 w = _mm512_set1_ps(e[(size_t)h * es + r]);
                a[h][0] = _mm512_fmadd_ps(w, k0, a[h][0]);
                a[h][1] = _mm512_fmadd_ps(w, k1, a[h][1]);
                a[h][2] = _mm512_fmadd_ps(w, k2, a[h][2]);
                a[h][3] = _mm512_fmadd_ps(w, k3, a[h][3]);
            }
        }
        for (int h = 0; h < 4; h++)
            for (int c = 0; c < 4; c++) _mm512_storeu_ps(o + (size_t)h * os + i + 16 * c, a[h][c]);
    }
    for (; i + 16 <= n; i += 16) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int r = 0; r < nk; r++) {
            __m512 k0 = _mm512_loadu_ps(keys[r] + i);
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(e[r]), k0, a0);
            a1 = _mm512_fmadd_ps(_mm512_set1_ps(e[es + r]), k0, a1);
            a2 = _mm512_fmadd_ps(_mm512_set1_ps(e[2 * es + r]), k0, a2);
            a3 = _mm512_fmadd_ps(_mm512_set1_ps(e[3 * es + r]), k0, a3);
        }
        _mm512_storeu_ps(o + i, a0);
        _mm512_storeu_ps(o + os + i, a1);
        _mm512_storeu_ps(o + 2 * os + i, a2);
        _mm512_storeu_ps(o + 3 * os + i, a3);
    }
    for (; i < n; i++)
        for (int h = 0; h < 4; h++) {
            float acc = 0;
            for (int r = 0; r < nk; r++) acc = fmaf(e[h * es + r], keys[r][i], acc);
            o[h * os + i] = acc;
        }
}

/* red16_avx512 of 16 accumulators at once, returned as one vector
 * (lane m = the sum of a[m]): the same additions, operand for operand, as
 * 16 separate trees, but each level adds two vectors of partial sums of
 * several accumulators instead of one accumulator's halves (45 shuffles
 * and adds instead of 128).
 *   level 1: r8 of a[2p] | r8 of a[2p+1]              (256-bit halves)
 *   level 2: r4 of a[4p .. 4p+3], one per 128-bit lane
 *   level 3: r2 of two such groups, interleaved per 128-bit lane
 *   level 4: the sums; lane 4g + k = a[4k + g], put back in order. */
AVX512 static inline __m512 red16x16_avx512(const __m512 a[16]) {
    __m512 b[8], c[4], d[2];
    for (int p = 0; p < 8; p++)
        b[p] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0x44),
                             _mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0xEE));
    for (int p = 0; p < 4; p++)
        c[p] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * p], b[2 * p + 1], 0x88),
                             _mm512_shuffle_f32x4(b[2 * p], b[2 * p + 1], 0xDD));
    for (int p = 0; p < 2; p++)
        d[p] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * p], c[2 * p + 1], 0x44),
                             _mm512_shuffle_ps(c[2 * p], c[2 * p + 1], 0xEE));
    __m512 e = _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xDD));
    const __m512i back = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(back, e);
}

/* An empty asm that claims to change v: the load before it stays one
 * register load (GCC otherwise folds it into each FMA that uses it, and
 * z_dot4x4 became 20 loads per 16 FMAs: load-port bound). */
#define KEEP_IN_REG(v) __asm__("" : "+v"(v))

/* 4 heads x 4 keys per 16-lane step: 8 loads feed 16 FMAs (dot4 alone
 * needs 8 loads for 4), 16 accumulators, reduced together at the end. */
AVX512 static void z_dot4x4(const float *q, size_t qs, const float *const *keys, int n,
                            float *out) {
    __m512 a[16];
    for (int i = 0; i < 16; i++) a[i] = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 k0 = _mm512_loadu_ps(keys[0] + i), k1 = _mm512_loadu_ps(keys[1] + i);
        __m512 k2 = _mm512_loadu_ps(keys[2] + i), k3 = _mm512_loadu_ps(keys[3] + i);
        KEEP_IN_REG(k0); KEEP_IN_REG(k1); KEEP_IN_REG(k2); KEEP_IN_REG(k3);
        for (int h = 0; h < 4; h++) {
            __m512 qv = _mm512_loadu_ps(q + (size_t)h * qs + i);
            KEEP_IN_REG(qv);
            a[h * 4 + 0] = _mm512_fmadd_ps(qv, k0, a[h * 4 + 0]);
            a[h * 4 + 1] = _mm512_fmadd_ps(qv, k1, a[h * 4 + 1]);
            a[h * 4 + 2] = _mm512_fmadd_ps(qv, k2, a[h * 4 + 2]);
            a[h * 4 + 3] = _mm512_fmadd_ps(qv, k3, a[h * 4 + 3]);
        }
    }
    if (i == n) {
        _mm512_storeu_ps(out, red16x16_avx512(a));
        return;
    }
    for (int h = 0; h < 4; h++)
        for (int j = 0; j < 4; j++) out[h * 4 + j] = fin16_avx512(a[h * 4 + j], q + (size_t)h * qs, keys[j], i, n);
}

/* vec_expf on 16 lanes */
AVX512 static inline __m512 z_exp16(__m512 x) {
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(EXP_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-EXP_C1), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(EXP_C2), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(EXP_P0), r, _mm512_set1_ps(EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P5));
    const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    __m512 e = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(y), _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23)));
    e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_LO), _CMP_LT_OQ), e, _mm512_setzero_ps());
    e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_HI), _CMP_GE_OQ), e, _mm512_set1_ps(INFINITY));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), e, x);
}

AVX512 static void z_exp(const float *x, float *y, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, z_exp16(_mm512_loadu_ps(x + i)));
    s_exp(x + i, y + i, n - i);
}

AVX512 static float z_exp_sum(float *w, int n, float m) {
    const __m512 mv = _mm512_set1_ps(m);
    __m512 acc = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 a = z_exp16(_mm512_sub_ps(_mm512_loadu_ps(w + i), mv));
        _mm512_storeu_ps(w + i, a);
        acc = _mm512_add_ps(acc, a);
    }
    if (i == n) return red16_avx512(acc);
    float l[16];
    _mm512_storeu_ps(l, acc);
    return exp_sum_finish(l, w, i, n, m);
}

/* Sums of squares with the rows in the lanes: 8 rows a zmm of doubles, up
 * to four such groups at once (four FMA chains cover the latency).  16
 * elements of 8 rows are transposed in registers: two unpack levels give,
 * per 128-bit lane L, element 4L + j of rows 0-3 (u[j]) and of rows 4-7
 * (u[4 + j]); a two-source permute pairs them, lanes 0 and 1 into w[j]
 * (elements j and 4 + j of the 8 rows, one per 256-bit half), lanes 2 and
 * 3 into w[4 + j] (elements 8 + j and 12 + j).  Each row's squares are
 * then added in element order. */
AVX512 static inline __m512d z_sq8x16(const float *p, size_t xs, __m512d acc) {
    __m512 r[8], t[8], u[8], w[8];
    for (int k = 0; k < 8; k++) r[k] = _mm512_loadu_ps(p + (size_t)k * xs);
    for (int k = 0; k < 4; k++) {
        t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    for (int h = 0; h < 2; h++)
        for (int q = 0; q < 2; q++) {
            const __m512d a = _mm512_castps_pd(t[4 * h + q]), b = _mm512_castps_pd(t[4 * h + q + 2]);
            u[4 * h + 2 * q] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
            u[4 * h + 2 * q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        }
    const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i hi = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    for (int j = 0; j < 4; j++) {
        w[j] = _mm512_permutex2var_ps(u[j], lo, u[4 + j]);
        w[4 + j] = _mm512_permutex2var_ps(u[j], hi, u[4 + j]);
    }
    for (int e = 0; e < 16; e++) {
        const __m512 v = w[(e / 8) * 4 + e % 4];
        const __m256 c = (e / 4) % 2 ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))
                                     : _mm512_castps512_ps256(v);
        const __m512d d = _mm512_cvtps_pd(c);
        acc = _mm512_fmadd_pd(d, d, acc);
    }
    return acc;
}

AVX512 static void z_sumsq_rows(const float *x, size_t xs, int nr, int n, double *ss) {
    int r0 = 0;
    while (r0 + 8 <= nr) {
        int G = (nr - r0) / 8;
        if (G > 4) G = 4;
        const float *p = x + (size_t)r0 * xs;
        __m512d acc[4];
        for (int g = 0; g < 4; g++) acc[g] = _mm512_setzero_pd();
        int i = 0;
        for (; i + 16 <= n; i += 16)
            for (int g = 0; g < G; g++) acc[g] = z_sq8x16(p + (size_t)8 * g * xs + i, xs, acc[g]);
        for (; i < n; i++)
            for (int g = 0; g < G; g++) {
                const float *q = p + (size_t)8 * g * xs + i;
                const __m512d d = _mm512_cvtps_pd(_mm256_setr_ps(q[0], q[xs], q[2 * xs], q[3 * xs], q[4 * xs],
                                                                 q[5 * xs], q[6 * xs], q[7 * xs]));
                acc[g] = _mm512_fmadd_pd(d, d, acc[g]);
            }
        for (int g = 0; g < G; g++) _mm512_storeu_pd(ss + r0 + 8 * g, acc[g]);
        r0 += 8 * G;
    }
    /* the last 1-7 rows (an attention item's 4 heads): 4 a ymm, then
     * scalar (every AVX-512 CPU has AVX2 and FMA) */
    v_sumsq_rows(x + (size_t)r0 * xs, xs, nr - r0, n, ss + r0);
}

/* idx_score16 with AVX-512 VNNI, the 16 rows in the lanes: vpdpbusd of
 * each row quad (code + 16, unsigned) with the broadcast query quad
 * (signed).  NH heads x NU blocks at a time, all constants so that GCC
 * keeps the NH x NU accumulators in registers (4 x 2 = eight independent
 * chains of eight: enough to cover vpdpbusd's latency). */
#define ZVNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))
#define ZVNNI_INLINE __attribute__((target("avx512f,avx512bw,avx512vnni"), always_inline)) static inline

/* the integer sums of blocks b .. b + NU - 1 of NH heads, then their float
 * terms added to d[] in block order */
#define Z_IDX_BLOCKS(NH, NU)                                                                            \
    do {                                                                                                \
        __m512i a[NH][NU];                                                                              \
        for (int j = 0; j < NH; j++) /* from -qs: the bias of the row codes taken off */                \
            for (int u = 0; u < NU; u++) a[j][u] = _mm512_set1_epi32(-qs[j * nb + b + u]);              \
        _Pragma("GCC unroll 8") for (int q = 0; q < 8; q++)                                              \
        {                                                                                               \
            for (int u = 0; u < NU; u++) {                                                              \
                const __m512i kv = _mm512_loadu_si512(kc + 64 * (8 * (b + u) + q));                     \
                for (int j = 0; j < NH; j++) {                                                          \
                    int32_t qq;                                                                         \
                    memcpy(&qq, qc + j * id + 32 * (b + u) + 4 * q, 4);                                 \
                    a[j][u] = _mm512_dpbusd_epi32(a[j][u], kv, _mm512_set1_epi32(qq));                  \
                }                                                                                       \
            }                                                                                           \
        }                                                                                               \
        for (int u = 0; u < NU; u++) {                                                                  \
            const __m512 pkv = _mm512_loadu_ps(pk + 16 * (b + u));                                      \
            for (int j = 0; j < NH; j++) {                                                              \
                const int k = j * nb + b + u;                                                           \
                const __m512 t = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(a[j][u]), _mm512_set1_ps(pq[k])), pkv); \
                d[j] = b + u ? _mm512_add_ps(d[j], t) : t;                                              \
            }                                                                                           \
        }                                                                                               \
    } while (0)

/* NH heads: their dots over all blocks, then their weighted relu added to
 * *s in head order */
#define Z_IDX_HEADS(NH)                                                                                 \
    do {                                                                                                \
        __m512 d[NH];                                                                                   \
        for (int j = 0; j < NH; j++) d[j] = _mm512_setzero_ps();                                        \
        int b = 0;                                                                                      \
        for (; b + 2 <= nb; b += 2) Z_IDX_BLOCKS(NH, 2);                                                \
        if (b < nb) Z_IDX_BLOCKS(NH, 1);                                                                \
        for (int j = 0; j < NH; j++) {                                                                  \
            const __mmask16 m = _mm512_cmp_ps_mask(d[j], _mm512_setzero_ps(), _CMP_GT_OQ);             \
            *s = _mm512_mask_add_ps(*s, m, *s, _mm512_mul_ps(_mm512_set1_ps(w[j]), d[j]));              \
        }                                                                                               \
    } while (0)

ZVNNI_INLINE void z_idx_heads4(const int8_t *qc, const float *pq, const int32_t *qs, const float *w, int nb,
                               const uint8_t *kc, const float *pk, __m512 *s) {
    const size_t id = (size_t)32 * nb;
    Z_IDX_HEADS(4);
}

ZVNNI_INLINE void z_idx_heads1(const int8_t *qc, const float *pq, const int32_t *qs, const float *w, int nb,
                               const uint8_t *kc, const float *pk, __m512 *s) {
    const size_t id = (size_t)32 * nb;
    Z_IDX_HEADS(1);
}

ZVNNI static void z_idx_score16_vnni(const int8_t *qc, const float *pq, const int32_t *qs, const float *w, int nh,
                                     int nb, const uint8_t *kc, const float *pk, float *out) {
    const size_t id = (size_t)32 * nb;
    __m512 s = _mm512_setzero_ps();
    int h = 0;
    for (; h + 4 <= nh; h += 4) z_idx_heads4(qc + h * id, pq + h * nb, qs + h * nb, w + h, nb, kc, pk, &s);
    for (; h < nh; h++) z_idx_heads1(qc + h * id, pq + h * nb, qs + h * nb, w + h, nb, kc, pk, &s);
    _mm512_storeu_ps(out, s);
}

/* The avx512 table in two builds that differ only in idx_score16, chosen
 * once: the VNNI kernel, or on AVX-512F without VNNI (Skylake-X) the avx2
 * one (same bits). */
#define K_AVX512(idx) { "avx512", z_dot4, z_axpy4, z_dot, z_dot4x4, z_wsum4, z_exp, z_exp_sum, z_sumsq_rows, idx }
static const vec_kernels k_avx512_vnni = K_AVX512(z_idx_score16_vnni);
static const vec_kernels k_avx512 = K_AVX512(v_idx_score16);

const vec_kernels *vec_kernels_avx512(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f")) return NULL;
    return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") ? &k_avx512_vnni : &k_avx512;
}
#else
const vec_kernels *vec_kernels_avx2(void) { return NULL; }
const vec_kernels *vec_kernels_avx512(void) { return NULL; }
#endif

/* DS4_KERNELS forces a table as for the matmuls: scalar, avx2, or the
 * avx512 one for avx512 and avx512-packed (the two matmul tables differ only
 * in their int8 tiles). */
const vec_kernels *vec_kernels_best(void) {
    const char *e = getenv("DS4_KERNELS");
    if (e && !strcmp(e, "scalar")) return &k_scalar;
    const vec_kernels *k = NULL;
    if (!(e && !strcmp(e, "avx2"))) k = vec_kernels_avx512();
    if (!k) k = vec_kernels_avx2();
    return k ? k : &k_scalar;
}
