/*
 * glm_common.h -- what the GLM graphs (glm_dsa.c, glm5_next.c) share, so
 * that both compute it with one expression and one order: the small
 * per-row steps (allocation helpers, RMSNorm over rows, the sigmoid and
 * the optionally clamped SwiGLU; static inline: the graphs' hot loops call
 * them per element), the --dist pipeline steps both layer loops take at a
 * rank boundary (the IndexShare selection that crosses it), and
 * glm_common.c's matmul wrapper and FFN layer (dense SwiGLU, or the
 * sigmoid MoE with its shared expert, resident or streamed from the expert
 * cache) with its scratch.  Must not: know either graph's state or layout
 * beyond a layer's FFN weights.
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

/* Y[t] = W x[t] for T rows (strides in floats); qs: the quantized
 * activations' scratch (T rows of W's input width) */
void glm_mm(const cpu_ctx *cc, int no_qat, void *qs, mat_t W, const float *x, size_t xs, int T, float *y,
            size_t ys);

/* one routed expert of a batch: its matrices (mapped or a cache slot's),
 * its rows elist[row0 .. row0 + n) */
typedef struct {
    mat_t g, u, d;
    int row0, n;
} glm_xexp;

/* The FFN's scratch for chunks of up to T rows (glm_ffn_new; MC =
 * max(T, n_expert_used) rows for a batch of experts). */
typedef struct {
    int T;
    float *g, *u;          /* [T][max(n_ff, shared n_ff)] gate / up, then the SwiGLU */
    float *sy;             /* [T][n_embd] the shared expert's output */
    float *rl;             /* [T][n_expert] router logits */
    float *eg, *eu;        /* [MC][n_ff_exp] a batch's gate, up rows */
    float *ed;             /* [MC][n_embd] its down rows; streamed: [T * used], one per pair */
    int *erow;             /* [MC] a batch row's token */
    int *etok;             /* [T * used] the routing's (token, k) experts */
    float *ewt;            /* [T * used] their weights (times expert_scale) */
    int *ecnt;             /* [n_expert + 1] rows per expert, then offsets */
    int *elist;            /* [T * used] the routing's pairs by expert, tokens ascending */
    mm_group *grp;         /* [2 n_expert] a batch's matmuls */
    glm_xexp *xe;          /* [n_expert] a batch's experts */
    void *qs, *qx, *qx2;   /* quantized activations: [MC] rows (every matmul's, the
                            * down inputs); the T input rows of gate and up */
} glm_ffn_buf;

/* streamed: the model streams its routed experts (m->xc): the per-pair
 * down rows */
int glm_ffn_new(glm_ffn_buf *b, const ds4_config *c, int T, int streamed);
void glm_ffn_free(glm_ffn_buf *b);

typedef struct {
    const cpu_ctx *cc;
    int no_qat;
    struct ds4_xcache *xc;   /* --ssd-streaming: the routed experts' cache, else NULL */
    const ds4_config *c;
    glm_ffn_buf *b;
} glm_ffn_ctx;

/* The FFN of layer il (il >= n_layer: the NextN block, never streamed) on
 * T rows x (stride n_embd) into out (T rows, stride n_embd, overwritten):
 * lw->dense: the SwiGLU FFN with clamp; else the MoE, the routed experts'
 * SwiGLU with clamp, the shared expert's with clamp_sh (<= 0: none).
 * Returns DS4_OK or the expert cache's error (xc_error). */
int glm_ffn(const glm_ffn_ctx *fx, const ds4_layer_weights *lw, int il, const float *x, int T, float clamp,
            float clamp_sh, float *out);

/* A GLM NextN block's input rows (both graphs; glm_ref.py mtp_input):
 * out[t] = eh_proj [enorm(embed(toks[t])); hnorm(h_t)] with h_0 = h0 and
 * h_t = hrows[t - 1] (stride n_embd) after it; a NULL h0 counts as zero
 * (position 0, or a main state not held).  tmp: [n_embd], cat: [T][2
 * n_embd] scratch; qs: glm_mm's. */
int glm_mtp_input(const cpu_ctx *cc, int no_qat, void *qs, const ds4_weights *w, const int32_t *toks,
                  const float *h0, const float *hrows, int T, float *tmp, float *cat, float *out);
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
