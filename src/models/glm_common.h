/*
 * glm_common.h -- the small per-row steps the GLM graphs (glm_dsa.c,
 * glm5_next.c) share, so that both compute them with one expression and
 * one order: allocation helpers, RMSNorm over rows, the sigmoid and the
 * (optionally clamped) SwiGLU; and the --dist pipeline steps both graphs'
 * layer loops take at a rank boundary (the selection that crosses it).
 * Static inline: the graphs' hot loops call them per element.  Must not:
 * hold state or know either graph's layout.
 */
#ifndef DS4_MODELS_GLM_COMMON_H
#define DS4_MODELS_GLM_COMMON_H

#include <stdlib.h>

#include "engine/transport.h"
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

/* --dist pipeline and IndexShare: a shared layer attends the rows its
 * previous full layer selected, so a rank boundary b crosses a selection
 * when the first attention (non-KDA) layer at or after b is a shared one
 * -- then rank r hands the chunk's selection (nsel[T], sel[T][stride])
 * to rank r+1 with the residual, and a rank whose layers before its first
 * full layer are shared (or KDA only) takes it from rank r-1 (and a rank
 * of KDA layers only passes it on untouched).  Sending it was chosen over
 * recomputing it on the next rank: recomputing needs the full layer's
 * indexer keys of every past position, i.e. that layer's input -- the
 * previous rank's residual stream at that layer, for the whole context.
 * Both ranks evaluate the same predicate on the same model, so the
 * messages pair up. */
static inline int glm_sel_crosses(const ds4_weights *w, int b) {
    for (int il = b; il < w->cfg.n_layer; il++)
        if (!w->layers[il].kda) return !w->layers[il].own_indexer;
    return 0;
}

/* The selection as floats (exact: positions and counts are at most
 * DS4_MAX_CTX = 2^24, which a float holds exactly), one row a token: nsel[t] then sel[t][0..stride)
 * (a row of -1 sends its stale entries too: fixed size, never read). */
static inline int glm_sel_send(const int *sel, const int *nsel, int T, int stride, float *buf) {
    for (int t = 0; t < T; t++) {
        float *row = buf + (size_t)t * (stride + 1);
        row[0] = (float)nsel[t];
        for (int i = 0; i < stride; i++) row[1 + i] = (float)sel[(size_t)t * stride + i];
    }
    return dist_send_floats(buf, T * (stride + 1));
}
static inline int glm_sel_recv(int *sel, int *nsel, int T, int stride, float *buf) {
    int rc = dist_recv_floats(buf, T * (stride + 1));
    if (rc) return rc;
    for (int t = 0; t < T; t++) {
        const float *row = buf + (size_t)t * (stride + 1);
        nsel[t] = (int)row[0];
        for (int i = 0; i < stride; i++) sel[(size_t)t * stride + i] = (int)row[1 + i];
    }
    return DS4_OK;
}

#endif
