/*
 * kda.c -- the KDA recurrence of one head, recurrent and chunked (kda.h).
 *
 * kda_recurrent runs a head's T tokens while its S (K x K floats, 64 KB at
 * K = 128) stays in cache, in two passes over S per token instead of four:
 * row a is decayed and then added into u (u[b] += S[a][b] k[a], a
 * ascending, from +0: the order of the per-b dot it replaces), and row a
 * is updated and then added into o the same way; the columns in blocks
 * whose sums stay in registers.  Each element of S, u
 * and o therefore sees exactly the old sequence of roundings (the build
 * has -ffp-contract=off), while the b loops vectorise.  Must not: reorder
 * any of those sums (the exactness contract, README).
 *
 * kda_chunked is the chunk form of tests/oracle/glm_ref.py kda_chunked
 * (FAMILY.md §2; the WY / UT-transform form of the chunked delta rule):
 * in a chunk of n tokens, with G_i = g_1 + ... + g_i per key channel and
 * D_ij = exp(G_i - G_j) (j <= i: never the exp of a positive number), the
 * update rows w_i = beta_i (v_i - u_i) solve the unit lower-triangular
 *   w_i + beta_i sum_{j<i} (k_i . D_ij k_j) w_j = beta_i (v_i - (k_i e^G_i) S0)
 * by forward substitution, then
 *   o_i = (q_i e^G_i) S0 + sum_{j<=i} (q_i . D_ij k_j) w_j,
 *   S   = e^G_n S0 + sum_j (k_j D_nj) w_j^T.
 * Float32 throughout; not bit-identical to the recurrent form.
 */
#include "kernels/kda.h"

/* The columns of S go in blocks of KDA_BW (u's and o's block then stays in
 * registers across the rows, so each element of S costs one load and one
 * store); within a block the rows go a = 0, 1, ... as before, so every
 * element's sum is in the same order.  The last block may be narrower. */
#define KDA_BW 64

/* decay rows by e and u[b] = sum_a S[a][b] k[a] (from +0, a ascending) */
static void decay_dot(float *restrict S, int K, const float *e, const float *k, float *restrict u) {
    int b0 = 0;
    for (; b0 + KDA_BW <= K; b0 += KDA_BW) {
        float acc[KDA_BW];
        for (int b = 0; b < KDA_BW; b++) acc[b] = 0.0f;
        for (int a = 0; a < K; a++) {
            float *restrict r = S + (size_t)a * K + b0;
            const float ea = e[a], ka = k[a];
            for (int b = 0; b < KDA_BW; b++) {
                r[b] *= ea;
                acc[b] += r[b] * ka;
            }
        }
        for (int b = 0; b < KDA_BW; b++) u[b0 + b] = acc[b];
    }
    if (b0 == K) return;
    for (int b = b0; b < K; b++) u[b] = 0.0f;
    for (int a = 0; a < K; a++) {
        float *restrict r = S + (size_t)a * K;
        const float ea = e[a], ka = k[a];
        for (int b = b0; b < K; b++) {
            r[b] *= ea;
            u[b] += r[b] * ka;
        }
    }
}

/* S[a][b] += k[a] u[b], then o[b] = sum_a S[a][b] q[a] (from +0) */
static void update_dot(float *restrict S, int K, const float *k, const float *u, const float *q, float *restrict o) {
    int b0 = 0;
    for (; b0 + KDA_BW <= K; b0 += KDA_BW) {
        float acc[KDA_BW], ub[KDA_BW];
        for (int b = 0; b < KDA_BW; b++) { acc[b] = 0.0f; ub[b] = u[b0 + b]; }
        for (int a = 0; a < K; a++) {
            float *restrict r = S + (size_t)a * K + b0;
            const float ka = k[a], qa = q[a];
            for (int b = 0; b < KDA_BW; b++) {
                r[b] += ka * ub[b];
                acc[b] += r[b] * qa;
            }
        }
        for (int b = 0; b < KDA_BW; b++) o[b0 + b] = acc[b];
    }
    if (b0 == K) return;
    for (int b = b0; b < K; b++) o[b] = 0.0f;
    for (int a = 0; a < K; a++) {
        float *restrict r = S + (size_t)a * K;
        const float ka = k[a], qa = q[a];
        for (int b = b0; b < K; b++) {
            r[b] += ka * u[b];
            o[b] += r[b] * qa;
        }
    }
}

void kda_recurrent(float *S, int K, const kda_seq *x, int T, float *o, size_t os, float *scr,
                   const vec_kernels *vk) {
    if (!vk) vk = vec_kernels_scalar();
    float *restrict e = scr, *restrict u = scr + K;
    for (int t = 0; t < T; t++) {
        const float *k = x->k + (size_t)t * x->rs, *v = x->v + (size_t)t * x->rs;
        const float beta = x->beta[(size_t)t * x->bs];
        vk->exp(x->g + (size_t)t * x->rs, e, K);
        decay_dot(S, K, e, k, u);
        for (int b = 0; b < K; b++) u[b] = beta * (v[b] - u[b]);
        if (x->q) {
            update_dot(S, K, k, u, x->q + (size_t)t * x->rs, o + (size_t)t * os);
            continue;
        }
        for (int a = 0; a < K; a++) {
            float *restrict r = S + (size_t)a * K;
            const float ka = k[a];
            for (int b = 0; b < K; b++) r[b] += ka * u[b];
        }
    }
}

size_t kda_chunked_scratch(int K, int C) {
    return 6 * (size_t)C * K + 2 * (size_t)C * C + 2 * (size_t)K;
}

/* rows i0 .. i0+n-1 of Y (stride K) += X[i][a] S[a][:] over a, four rows
 * per pass over S so that each row of S is loaded once for four */
static void rows_times_s(float *restrict Y, const float *X, int n, const float *S, int K) {
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        float *restrict y0 = Y + (size_t)i * K, *restrict y1 = y0 + K, *restrict y2 = y1 + K, *restrict y3 = y2 + K;
        const float *x0 = X + (size_t)i * K;
        for (int a = 0; a < K; a++) {
            const float *restrict s = S + (size_t)a * K;
            const float c0 = x0[a], c1 = x0[K + a], c2 = x0[2 * K + a], c3 = x0[3 * K + a];
            for (int b = 0; b < K; b++) {
                y0[b] += c0 * s[b];
                y1[b] += c1 * s[b];
                y2[b] += c2 * s[b];
                y3[b] += c3 * s[b];
            }
        }
    }
    for (; i < n; i++) {
        float *restrict y = Y + (size_t)i * K;
        for (int a = 0; a < K; a++) {
            const float *restrict s = S + (size_t)a * K;
            const float c = X[(size_t)i * K + a];
            for (int b = 0; b < K; b++) y[b] += c * s[b];
        }
    }
}

void kda_chunked(float *S, int K, const kda_seq *x, int T, int C, float *o, size_t os, float *scr,
                 const vec_kernels *vk) {
    if (!vk) vk = vec_kernels_scalar();
    const size_t CK = (size_t)C * K;
    float *G = scr, *kg = G + CK, *qg = kg + CK, *kd = qg + CK, *W = kd + CK, *Y = W + CK;
    float *A = Y + CK, *Aq = A + (size_t)C * C, *d = Aq + (size_t)C * C, *dk = d + K;
    for (int c0 = 0; c0 < T; c0 += C) {
        const int n = T - c0 < C ? T - c0 : C;
        const float *k0 = x->k + (size_t)c0 * x->rs, *v0 = x->v + (size_t)c0 * x->rs;
        const float *q0 = x->q ? x->q + (size_t)c0 * x->rs : NULL, *g0 = x->g + (size_t)c0 * x->rs;
        const float *b0 = x->beta + (size_t)c0 * x->bs;
        /* G, and k, q scaled by e^G */
        for (int i = 0; i < n; i++) {
            float *Gi = G + (size_t)i * K;
            const float *gi = g0 + (size_t)i * x->rs, *ki = k0 + (size_t)i * x->rs;
            for (int a = 0; a < K; a++) Gi[a] = i ? Gi[a - K] + gi[a] : gi[a];
            vk->exp(Gi, d, K);
            for (int a = 0; a < K; a++) kg[(size_t)i * K + a] = ki[a] * d[a];
            if (q0) {
                const float *qi = q0 + (size_t)i * x->rs;
                for (int a = 0; a < K; a++) qg[(size_t)i * K + a] = qi[a] * d[a];
            }
        }
        /* A_ij = beta_i k_i . D_ij k_j (j < i), Aq_ij = q_i . D_ij k_j (j <= i) */
        for (int i = 0; i < n; i++) {
            const float *Gi = G + (size_t)i * K, *ki = k0 + (size_t)i * x->rs;
            const float bi = b0[(size_t)i * x->bs];
            for (int j = 0; j <= i; j++) {
                const float *Gj = G + (size_t)j * K, *kj = k0 + (size_t)j * x->rs;
                for (int a = 0; a < K; a++) d[a] = Gi[a] - Gj[a];
                vk->exp(d, d, K);
                for (int a = 0; a < K; a++) dk[a] = d[a] * kj[a];
                A[(size_t)i * C + j] = j < i ? bi * vk->dot(ki, dk, K) : 0.0f;
                if (q0) Aq[(size_t)i * C + j] = vk->dot(q0 + (size_t)i * x->rs, dk, K);
            }
        }
        /* W: the right-hand side beta_i (v_i - kg_i S0), then the forward
         * substitution (rows j < i are final when row i starts) */
        for (size_t i = 0; i < (size_t)n * K; i++) Y[i] = 0.0f;
        rows_times_s(Y, kg, n, S, K);
        for (int i = 0; i < n; i++) {
            float *restrict w = W + (size_t)i * K;
            const float *vi = v0 + (size_t)i * x->rs, *y = Y + (size_t)i * K;
            const float bi = b0[(size_t)i * x->bs];
            for (int b = 0; b < K; b++) w[b] = bi * (vi[b] - y[b]);
            for (int j = 0; j < i; j++) {
                const float *restrict wj = W + (size_t)j * K;
                const float c = A[(size_t)i * C + j];
                for (int b = 0; b < K; b++) w[b] -= c * wj[b];
            }
        }
        /* o_i = qg_i S0 + sum_{j<=i} Aq_ij w_j */
        if (q0) {
            for (size_t i = 0; i < (size_t)n * K; i++) Y[i] = 0.0f;
            rows_times_s(Y, qg, n, S, K);
            for (int i = 0; i < n; i++) {
                float *restrict oi = o + (size_t)(c0 + i) * os;
                const float *y = Y + (size_t)i * K;
                for (int b = 0; b < K; b++) oi[b] = y[b];
                for (int j = 0; j <= i; j++) {
                    const float *restrict wj = W + (size_t)j * K;
                    const float c = Aq[(size_t)i * C + j];
                    for (int b = 0; b < K; b++) oi[b] += c * wj[b];
                }
            }
        }
        /* S = e^G_n S0 + sum_j (k_j D_nj) w_j^T */
        const float *Gn = G + (size_t)(n - 1) * K;
        for (int j = 0; j < n; j++) {
            const float *Gj = G + (size_t)j * K, *kj = k0 + (size_t)j * x->rs;
            for (int a = 0; a < K; a++) d[a] = Gn[a] - Gj[a];
            vk->exp(d, d, K);
            for (int a = 0; a < K; a++) kd[(size_t)j * K + a] = kj[a] * d[a];
        }
        vk->exp(Gn, d, K);
        for (int a = 0; a < K; a++) {
            float *restrict r = S + (size_t)a * K;
            const float ea = d[a];
            for (int b = 0; b < K; b++) r[b] *= ea;
            int j = 0;
            for (; j + 4 <= n; j += 4) {
                const float c0 = kd[(size_t)j * K + a], c1 = kd[(size_t)(j + 1) * K + a];
                const float c2 = kd[(size_t)(j + 2) * K + a], c3 = kd[(size_t)(j + 3) * K + a];
                const float *restrict w0 = W + (size_t)j * K, *restrict w1 = w0 + K, *restrict w2 = w1 + K,
                                      *restrict w3 = w2 + K;
                for (int b = 0; b < K; b++) r[b] += c0 * w0[b] + c1 * w1[b] + c2 * w2[b] + c3 * w3[b];
            }
            for (; j < n; j++) {
                const float c = kd[(size_t)j * K + a];
                const float *restrict w = W + (size_t)j * K;
                for (int b = 0; b < K; b++) r[b] += c * w[b];
            }
        }
    }
}
