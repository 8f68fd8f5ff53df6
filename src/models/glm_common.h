/*
 * glm_common.h -- the small per-row steps the GLM graphs (glm_dsa.c,
 * glm5_next.c) share, so that both compute them with one expression and
 * one order: allocation helpers, RMSNorm over rows, the sigmoid and the
 * (optionally clamped) SwiGLU.  Static inline: the graphs' hot loops call
 * them per element.  Must not: hold state or know either graph's layout.
 */
#ifndef DS4_MODELS_GLM_COMMON_H
#define DS4_MODELS_GLM_COMMON_H

#include <stdlib.h>

#include "models/graph.h"

static inline void *glm_zalloc(size_t n) { return calloc(n ? n : 1, 1); }
static inline size_t glm_mx(size_t a, size_t b) { return a > b ? a : b; }

/* RMSNorm of T rows of n floats (strides xs / os in floats) by weight w */
static inline void glm_norm_rows(const float *x, size_t xs, const ds4_tensor *w, int T, int n, float eps,
                                 float *out, size_t os) {
    for (int t = 0; t < T; t++) rms_norm(x + (size_t)t * xs, (const float *)w->data, n, eps, out + (size_t)t * os);
}

static inline float glm_sigmoid(float z) { return 1.0f / (1.0f + vec_expf(-z)); }

/* silu(min(g, c)) * clamp(u, -c, c) in place into g; c <= 0: no clamp
 * (glm-dsa), silu(g) * u with the same exp as the V4 graph's SwiGLU */
static inline void glm_swiglu_row(float *g, const float *u, int n, float c) {
    for (int i = 0; i < n; i++) {
        float gv = g[i], uv = u[i];
        if (c > 0.0f) {
            gv = gv < c ? gv : c;
            uv = uv < -c ? -c : uv > c ? c : uv;
        }
        g[i] = gv / (1.0f + vec_expf(-gv)) * uv;
    }
}

#endif
