/*
 * glm_dsa.c -- the glm-dsa graph (GLM 5.2 / 5.3; ../shared/docs/FAMILY.md
 * §3, docs/family.md): one residual stream; MLA with q and kv LoRA and an
 * interleaved-RoPE tail, absorbed attention over 576-wide cached rows
 * (normed latent + RoPE key) restricted to the rows the DSA lightning
 * indexer selects (IndexShare: a "shared" layer reuses the previous full
 * layer's selection), leading dense SwiGLU layers, then the sigmoid MoE
 * with the selection bias plus the shared expert; final norm and head.
 * The float64 reference is tests/oracle/glm_ref.py (GlmDsa.forward).
 *
 * Owns: the glm-dsa forward pass of a chunk of tokens on a session and its
 * per-session state (ds4_glm_state: every layer's cached rows, every full
 * layer's indexer keys, the chunk's scratch), its rewinds and its
 * snapshots ("GLMS").  Session bookkeeping (token list, chunking) stays in
 * session.c, which calls this file through ds4_graph_glm_dsa
 * (models/graph.h).  Must not: touch DeepSeek V4's state or graph
 * (deepseek4.c, deepseek4_state.c), or order anything by the chunk: every row's numbers come from per-row
 * kernels (cpu_matmul is bit-identical for any row count) and per-token
 * loops, so one prefill, token by token and uneven chunks agree bit for
 * bit.  Float32 storage and accumulation; no storage roundings.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/graph.h"

typedef struct { float s; int i; } scored;

struct ds4_glm_state {
    float **kv;        /* [n_layer] -> [ctx][kv_lora + n_rot] */
    float **ik;        /* [n_layer] -> [ctx][idx_dim] (full layers), else NULL */
    /* the chunk's scratch, T = s->chunk rows */
    float *x, *cur, *qr, *q, *kva, *iq, *iw, *qabs, *lat, *o, *y;
    float *g, *u, *rl, *moe;
    int *sel, *nsel;   /* [T][top_k] the selected rows (ascending), [T] (-1: every visible row) */
    /* one token's */
    float *sc, *eg, *eu, *ed;
    scored *order;     /* [max(ctx, n_expert)] the top-k's sort */
    float *logits;     /* [T][vocab] */
    void *qs;          /* quantized activations */
};

static void *zalloc(size_t n) { return calloc(n ? n : 1, 1); }

static void glm_state_free(ds4_session *s) {
    struct ds4_glm_state *g = s->glm;
    if (!g) return;
    const int L = s->m->w.cfg.n_layer;
    for (int il = 0; il < L; il++) {
        if (g->kv) free(g->kv[il]);
        if (g->ik) free(g->ik[il]);
    }
    free(g->kv); free(g->ik);
    free(g->x); free(g->cur); free(g->qr); free(g->q); free(g->kva); free(g->iq); free(g->iw);
    free(g->qabs); free(g->lat); free(g->o); free(g->y); free(g->g); free(g->u); free(g->rl);
    free(g->moe); free(g->sel); free(g->nsel); free(g->sc); free(g->eg); free(g->eu); free(g->ed);
    free(g->order); free(g->logits); free(g->qs);
    free(g);
    s->glm = NULL;
}

static size_t mx(size_t a, size_t b) { return a > b ? a : b; }

static int glm_state_new(ds4_session *s) {
    const ds4_config *c = &s->m->w.cfg;
    const size_t T = (size_t)s->chunk, ctx = (size_t)s->ctx, D = (size_t)c->n_embd, H = (size_t)c->n_head;
    const size_t W = (size_t)c->head_dim, ID = (size_t)c->idx_dim, IH = (size_t)c->idx_heads;
    const size_t F = mx((size_t)c->n_ff, (size_t)c->n_ff_exp * (size_t)c->n_expert_shared);
    const size_t K = (size_t)(c->idx_topk < s->ctx ? c->idx_topk : s->ctx);
    struct ds4_glm_state *g = calloc(1, sizeof *g);
    if (!g) return DS4_ENOMEM;
    s->glm = g;
    g->kv = calloc((size_t)c->n_layer, sizeof *g->kv);
    g->ik = calloc((size_t)c->n_layer, sizeof *g->ik);
    if (!g->kv || !g->ik) return DS4_ENOMEM;
    for (int il = 0; il < c->n_layer; il++) {
        g->kv[il] = malloc(ctx * W * sizeof(float));
        if (!g->kv[il]) return DS4_ENOMEM;
        if (s->m->w.layers[il].own_indexer && !(g->ik[il] = malloc(ctx * ID * sizeof(float)))) return DS4_ENOMEM;
    }
    size_t widest = mx(mx(D, (size_t)c->q_lora), mx(H * (size_t)c->vmla, mx(F, (size_t)c->n_ff_exp)));
    widest = mx(widest, mx((size_t)c->kmla, (size_t)c->kv_lora));
    const size_t qrow = mx(act_row_bytes(ACT_Q8_0A, (int)widest), act_row_bytes(ACT_Q8_K, (int)widest));
#define A(p, n) if (!((p) = zalloc((n) * sizeof *(p)))) return DS4_ENOMEM
    A(g->x, T * D); A(g->cur, T * D); A(g->qr, T * (size_t)c->q_lora); A(g->q, T * H * (size_t)c->kmla);
    A(g->kva, T * W); A(g->iq, T * IH * ID); A(g->iw, T * IH); A(g->qabs, T * H * (size_t)c->kv_lora);
    A(g->lat, T * H * (size_t)c->kv_lora); A(g->o, T * H * (size_t)c->vmla); A(g->y, T * D);
    A(g->g, T * F); A(g->u, T * F); A(g->rl, T * (size_t)c->n_expert); A(g->moe, T * D);
    A(g->sel, T * K); A(g->nsel, T); A(g->sc, ctx); A(g->order, mx(ctx, (size_t)c->n_expert));
    A(g->eg, (size_t)c->n_ff_exp); A(g->eu, (size_t)c->n_ff_exp); A(g->ed, D);
    A(g->logits, T * (size_t)c->n_vocab);
#undef A
    if (!(g->qs = malloc(T * qrow))) return DS4_ENOMEM;
    return DS4_OK;
}

static uint64_t glm_kv_bytes(const ds4_session *s) {
    const ds4_config *c = &s->m->w.cfg;
    uint64_t b = 0;
    for (int il = 0; il < c->n_layer; il++)
        b += (uint64_t)s->toks.n * ((uint64_t)c->head_dim + (s->m->w.layers[il].own_indexer ? c->idx_dim : 0)) * 4;
    return b;
}

static uint64_t glm_plan_bytes(const ds4_weights *w, int ctx) {
    const ds4_config *c = &w->cfg;
    uint64_t b = 0;
    for (int il = 0; il < c->n_layer; il++)
        b += (uint64_t)ctx * ((uint64_t)c->head_dim + (w->layers[il].own_indexer ? c->idx_dim : 0)) * 4;
    return b;
}

typedef struct {
    ds4_session *s;
    const ds4_config *c;
    const ds4_weights *w;
    struct ds4_glm_state *g;
    cpu_ctx cc;
} glm_fwd;

/* Y[t] = W x[t] for T rows (strides in floats). */
static void mm(glm_fwd *f, mat_t W, const float *x, size_t xs, int T, float *y, size_t ys) {
    cpu_matmul(&f->cc, W, f->s->no_qat, x, xs, T, y, ys, f->g->qs);
}

static void norm_rows(const float *x, size_t xs, const ds4_tensor *w, int T, int n, float eps, float *out,
                      size_t os) {
    for (int t = 0; t < T; t++) rms_norm(x + (size_t)t * xs, (const float *)w->data, n, eps, out + (size_t)t * os);
}

static float sigm(float z) { return 1.0f / (1.0f + vec_expf(-z)); }

/* silu(g) * u in place into g (the same exp as the V4 graph's SwiGLU) */
static void swiglu_row(float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) g[i] = g[i] / (1.0f + vec_expf(-g[i])) * u[i];
}

/* The order of the top-k: higher score first, among equal scores the
 * lower index (docs/family.md, the tie rule).  A total order, so qsort
 * gives one answer. */
static int by_score(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->s > y->s) return -1;
    if (x->s < y->s) return 1;
    return (x->i > y->i) - (x->i < y->i);
}
static int by_index(const void *a, const void *b) {
    const int i = *(const int *)a, j = *(const int *)b;
    return (i > j) - (i < j);
}

/* The k best of sc[0..n) into out[0..k), ascending by index. */
static void top_k(const float *sc, scored *tmp, int n, int k, int *out) {
    for (int j = 0; j < n; j++) { tmp[j].s = sc[j]; tmp[j].i = j; }
    qsort(tmp, (size_t)n, sizeof *tmp, by_score);
    for (int j = 0; j < k; j++) out[j] = tmp[j].i;
    qsort(out, (size_t)k, sizeof *out, by_index);
}

/* The lightning indexer of a full layer: keys of the chunk's rows into
 * the layer's cache, then each token's selection (IndexShare: kept in
 * g->sel for the shared layers after it). */
static void indexer(glm_fwd *f, const ds4_layer_weights *lw, int il, int64_t p0, int T) {
    const ds4_config *c = f->c;
    struct ds4_glm_state *g = f->g;
    const int IH = c->idx_heads, ID = c->idx_dim, K = c->idx_topk, nr = c->n_rot;
    float cs[DS4_MAX_ROT_DIM / 2], sn[DS4_MAX_ROT_DIM / 2];
    float *ik = g->ik[il];
    mm(f, mat_of(&lw->idx_q_b), g->qr, (size_t)c->q_lora, T, g->iq, (size_t)IH * ID);
    mm(f, mat_of(&lw->idx_k), g->cur, (size_t)c->n_embd, T, ik + (size_t)p0 * ID, (size_t)ID);
    mm(f, mat_of(&lw->idx_proj), g->cur, (size_t)c->n_embd, T, g->iw, (size_t)IH);
    const float *nw = (const float *)lw->idx_k_norm.data, *nb = (const float *)lw->idx_k_norm_b.data;
    const float wsc = 1.0f / sqrtf((float)ID * (float)IH);
    for (int t = 0; t < T; t++) {
        rope_angles(&f->s->m->rope_dense, p0 + t, cs, sn);
        float *k = ik + (size_t)(p0 + t) * ID;
        /* LayerNorm with weight and bias at GLM's eps 1e-6 */
        double mean = 0, var = 0;
        for (int i = 0; i < ID; i++) mean += k[i];
        mean /= ID;
        for (int i = 0; i < ID; i++) var += ((double)k[i] - mean) * ((double)k[i] - mean);
        const float m = (float)mean, r = 1.0f / sqrtf((float)(var / ID) + 1e-6f);
        for (int i = 0; i < ID; i++) k[i] = (k[i] - m) * r * nw[i] + nb[i];
        rope_apply(k, nr, nr, cs, sn, 0);   /* the FIRST n_rot dims */
        float *q = g->iq + (size_t)t * IH * ID;
        for (int h = 0; h < IH; h++) rope_apply(q + (size_t)h * ID, nr, nr, cs, sn, 0);
        for (int h = 0; h < IH; h++) g->iw[(size_t)t * IH + h] *= wsc;
    }
    for (int t = 0; t < T; t++) {
        const int n = (int)(p0 + t) + 1;
        if (n <= K) { g->nsel[t] = -1; continue; }
        const float *q = g->iq + (size_t)t * IH * ID, *wt = g->iw + (size_t)t * IH;
        for (int j = 0; j < n; j++) {
            const float *k = ik + (size_t)j * ID;
            float acc = 0.0f;
            for (int h = 0; h < IH; h++) {
                const float *qh = q + (size_t)h * ID;
                float d = 0.0f;
                for (int i = 0; i < ID; i++) d += qh[i] * k[i];
                if (d > 0.0f) acc += d * wt[h];
            }
            g->sc[j] = acc;
        }
        top_k(g->sc, g->order, n, K, g->sel + (size_t)t * K);
        g->nsel[t] = K;
    }
}

/* Absorbed MLA of one layer over the chunk (its rows already cached). */
static void attention(glm_fwd *f, const ds4_layer_weights *lw, int il, int64_t p0, int T) {
    const ds4_config *c = f->c;
    struct ds4_glm_state *g = f->g;
    const int H = c->n_head, KM = c->kmla, nr = c->n_rot, nope = KM - nr, R = c->kv_lora, W = c->head_dim;
    const int K = c->idx_topk;
    const float scale = 1.0f / sqrtf((float)KM);
    float cs[DS4_MAX_ROT_DIM / 2], sn[DS4_MAX_ROT_DIM / 2];
    /* q~_h = W_UK,h^T q_nope,h onto the latent */
    for (int h = 0; h < H; h++)
        mm(f, mat_expert(&lw->attn_k_b, h), g->q + (size_t)h * KM, (size_t)H * KM, T, g->qabs + (size_t)h * R,
           (size_t)H * R);
    const float *kv = g->kv[il];
    for (int t = 0; t < T; t++) {
        rope_angles(&f->s->m->rope_dense, p0 + t, cs, sn);
        const int n = (int)(p0 + t) + 1;
        const int ns = g->nsel[t] < 0 ? n : g->nsel[t];
        const int *sel = g->nsel[t] < 0 ? NULL : g->sel + (size_t)t * K;
        for (int h = 0; h < H; h++) {
            float *qp = g->q + (size_t)t * H * KM + (size_t)h * KM + nope;
            rope_apply(qp, nr, nr, cs, sn, 0);
            const float *qa = g->qabs + (size_t)t * H * R + (size_t)h * R;
            float mxs = -INFINITY;
            for (int a = 0; a < ns; a++) {
                const float *row = kv + (size_t)(sel ? sel[a] : a) * W;
                float d = 0.0f, e = 0.0f;
                for (int i = 0; i < R; i++) d += qa[i] * row[i];
                for (int i = 0; i < nr; i++) e += qp[i] * row[R + i];
                g->sc[a] = (d + e) * scale;
                if (g->sc[a] > mxs) mxs = g->sc[a];
            }
            float sum = 0.0f;
            for (int a = 0; a < ns; a++) { g->sc[a] = vec_expf(g->sc[a] - mxs); sum += g->sc[a]; }
            float *lat = g->lat + (size_t)t * H * R + (size_t)h * R;
            for (int i = 0; i < R; i++) lat[i] = 0.0f;
            for (int a = 0; a < ns; a++) {
                const float *row = kv + (size_t)(sel ? sel[a] : a) * W;
                const float p = g->sc[a] / sum;
                for (int i = 0; i < R; i++) lat[i] += p * row[i];
            }
        }
    }
    /* W_UV,h back out of the latent */
    for (int h = 0; h < H; h++)
        mm(f, mat_expert(&lw->attn_v_b, h), g->lat + (size_t)h * R, (size_t)H * R, T, g->o + (size_t)h * c->vmla,
           (size_t)H * c->vmla);
}

/* Sigmoid router (selection by sigmoid + exp_probs_b, ties to the lower
 * expert; weights the unbiased sigmoid, normalized, times the scale),
 * routed experts, plus the shared expert; the sum into g->moe. */
static void moe(glm_fwd *f, const ds4_layer_weights *lw, int T) {
    const ds4_config *c = f->c;
    struct ds4_glm_state *g = f->g;
    const int D = c->n_embd, E = c->n_expert, KU = c->n_expert_used, FE = c->n_ff_exp;
    const int FS = FE * c->n_expert_shared;
    mm(f, mat_of(&lw->ffn_gate_inp), g->cur, (size_t)D, T, g->rl, (size_t)E);
    const float *bias = (const float *)lw->exp_probs_b.data;
    float prob[DS4_MAX_EXPERT], selv[DS4_MAX_EXPERT];
    int ids[DS4_MAX_EXPERT];
    scored *order = g->order;   /* [max(ctx, E)] */
    for (int t = 0; t < T; t++) {
        for (int e = 0; e < E; e++) {
            prob[e] = sigm(g->rl[(size_t)t * E + e]);
            selv[e] = bias ? prob[e] + bias[e] : prob[e];
        }
        top_k(selv, order, E, KU, ids);
        float wsum = 0.0f, wt[DS4_MAX_EXPERT];
        for (int k = 0; k < KU; k++) { wt[k] = prob[ids[k]]; wsum += wt[k]; }
        if (c->expert_norm) {
            if (wsum < 6.103515625e-5f) wsum = 6.103515625e-5f;
            for (int k = 0; k < KU; k++) wt[k] /= wsum;
        }
        float *out = g->moe + (size_t)t * D;
        const float *x = g->cur + (size_t)t * D;
        for (int i = 0; i < D; i++) out[i] = 0.0f;
        for (int k = 0; k < KU; k++) {
            mm(f, mat_expert(&lw->ffn_gate_exps, ids[k]), x, (size_t)D, 1, g->eg, (size_t)FE);
            mm(f, mat_expert(&lw->ffn_up_exps, ids[k]), x, (size_t)D, 1, g->eu, (size_t)FE);
            swiglu_row(g->eg, g->eu, FE);
            mm(f, mat_expert(&lw->ffn_down_exps, ids[k]), g->eg, (size_t)FE, 1, g->ed, (size_t)D);
            const float s = wt[k] * c->expert_scale;
            for (int i = 0; i < D; i++) out[i] += s * g->ed[i];
        }
    }
    mm(f, mat_of(&lw->ffn_gate_shexp), g->cur, (size_t)D, T, g->g, (size_t)FS);
    mm(f, mat_of(&lw->ffn_up_shexp), g->cur, (size_t)D, T, g->u, (size_t)FS);
    for (int t = 0; t < T; t++) swiglu_row(g->g + (size_t)t * FS, g->u + (size_t)t * FS, FS);
    mm(f, mat_of(&lw->ffn_down_shexp), g->g, (size_t)FS, T, g->y, (size_t)D);
    for (size_t i = 0; i < (size_t)T * D; i++) g->moe[i] += g->y[i];
}

static const float *glm_chunk_logits(const ds4_session *s) { return s->glm->logits; }

static int glm_eval_chunk(ds4_session *s, const int32_t *toks, int T) {
    ds4_model *m = s->m;
    glm_fwd f = { .s = s, .c = &m->w.cfg, .w = &m->w, .g = s->glm };
    f.cc.pool = m->pool;
    f.cc.k = m->kern;
    const ds4_config *c = f.c;
    struct ds4_glm_state *g = f.g;
    const int D = c->n_embd, H = c->n_head, R = c->kv_lora, W = c->head_dim, nr = c->n_rot;
    const int64_t p0 = (int64_t)s->toks.n;
    if (T < 1 || T > s->chunk || p0 + T > s->ctx) return DS4_EINVAL;
    float cs[DS4_MAX_ROT_DIM / 2], sn[DS4_MAX_ROT_DIM / 2];
    for (int t = 0; t < T; t++)
        if (ds4_dequantize_row(f.w->token_embd.type, f.w->token_embd.data + (size_t)toks[t] * f.w->token_embd.row_bytes,
                               g->x + (size_t)t * D, D))
            return DS4_EFORMAT;
    for (int il = 0; il < c->n_layer; il++) {
        const ds4_layer_weights *lw = &f.w->layers[il];
        norm_rows(g->x, (size_t)D, &lw->attn_norm, T, D, c->rms_eps, g->cur, (size_t)D);
        mm(&f, mat_of(&lw->attn_q_a), g->cur, (size_t)D, T, g->qr, (size_t)c->q_lora);
        norm_rows(g->qr, (size_t)c->q_lora, &lw->attn_q_a_norm, T, c->q_lora, c->rms_eps, g->qr, (size_t)c->q_lora);
        mm(&f, mat_of(&lw->attn_q_b), g->qr, (size_t)c->q_lora, T, g->q, (size_t)H * c->kmla);
        /* the cached rows: normed latent, then the RoPE key */
        float *kv = g->kv[il] + (size_t)p0 * W;
        mm(&f, mat_of(&lw->attn_kv), g->cur, (size_t)D, T, kv, (size_t)W);
        for (int t = 0; t < T; t++) {
            float *row = kv + (size_t)t * W;
            rms_norm(row, (const float *)lw->attn_kv_a_norm.data, R, c->rms_eps, row);
            rope_angles(&m->rope_dense, p0 + t, cs, sn);
            rope_apply(row + R, nr, nr, cs, sn, 0);
        }
        if (lw->own_indexer) indexer(&f, lw, il, p0, T);
        attention(&f, lw, il, p0, T);
        mm(&f, mat_of(&lw->attn_output), g->o, (size_t)H * c->vmla, T, g->y, (size_t)D);
        for (size_t i = 0; i < (size_t)T * D; i++) g->x[i] += g->y[i];
        norm_rows(g->x, (size_t)D, &lw->ffn_norm, T, D, c->rms_eps, g->cur, (size_t)D);
        if (lw->dense) {
            const int FF = c->n_ff;
            mm(&f, mat_of(&lw->ffn_gate), g->cur, (size_t)D, T, g->g, (size_t)FF);
            mm(&f, mat_of(&lw->ffn_up), g->cur, (size_t)D, T, g->u, (size_t)FF);
            for (int t = 0; t < T; t++) swiglu_row(g->g + (size_t)t * FF, g->u + (size_t)t * FF, FF);
            mm(&f, mat_of(&lw->ffn_down), g->g, (size_t)FF, T, g->moe, (size_t)D);
        } else {
            moe(&f, lw, T);
        }
        for (size_t i = 0; i < (size_t)T * D; i++) g->x[i] += g->moe[i];
    }
    /* the head: every row when the caller captures them or a staged pass
     * needs them (ds4_glm_logits), else the last */
    const int r0 = s->cap_logits || s->stg_on ? 0 : T - 1, nl = T - r0;
    norm_rows(g->x + (size_t)r0 * D, (size_t)D, &f.w->output_norm, nl, D, c->rms_eps, g->cur, (size_t)D);
    const ds4_tensor *out = f.w->output.data ? &f.w->output : &f.w->token_embd;
    mm(&f, mat_of(out), g->cur, (size_t)D, nl, g->logits, (size_t)c->n_vocab);
    memcpy(s->logits, g->logits + (size_t)(nl - 1) * c->n_vocab, (size_t)c->n_vocab * sizeof(float));
    s->has_logits = 1;
    if (s->cap_logits) {
        int rc = ds4_buf_append(s->cap_logits, g->logits, (size_t)nl * c->n_vocab * sizeof(float));
        if (rc) return rc;
    }
    return ds4_model_check(m);
}

/* the KV and scratch bytes of a default session of ctx tokens: the cached
 * rows, and the chunk's scratch (the head's rows lead) */
static void glm_plan(const ds4_weights *w, int ctx, int nth, uint64_t *kv, uint64_t *scratch) {
    const ds4_config *c = &w->cfg;
    int ch = ctx < 2048 ? ctx : 2048;
    *kv = glm_plan_bytes(w, ctx);
    *scratch = (uint64_t)ch * ((uint64_t)c->n_vocab + 16u * (uint64_t)c->n_embd) * sizeof(float) +
               (uint64_t)ctx * 16;
    (void)nth;
}

/* nothing to empty: the rows past the token count are dead */
static void glm_state_reset(ds4_session *s) { (void)s; }

/* No checkpoints needed: the rows of a position never change, so any
 * point of the session is a rewind point. */
static uint64_t glm_checkpoint_bytes(const ds4_session *s) { (void)s; return 0; }
static int glm_checkpoint(ds4_session *s, int slot) { (void)s; (void)slot; return DS4_OK; }

/* any count the session holds; one token short of n, so the token
 * evaluated again gives the logits at n (no logits are kept per
 * position) */
static int glm_rewind_point(const ds4_session *s, int n) {
    int k = n < (int)s->toks.n ? n : (int)s->toks.n;
    return k - 1 > 0 ? k - 1 : 0;
}

/* truncation: the rows below n are exactly what evaluating toks[0..n)
 * left */
static int glm_rewind(ds4_session *s, int n) {
    if (n <= 0 || n > (int)s->toks.n) return DS4_EINVAL;
    if (n < (int)s->toks.n) s->has_logits = 0;
    s->toks.n = (size_t)n;
    s->stg_n = 0;
    return DS4_OK;
}

/* ---------------------------------------------------------------------- */
/* Snapshots                                                               */
/*                                                                         */
/* Little-endian, all u32 unless noted (the first ten words keep the       */
/* places of DeepSeek V4's "DS4S" header that readers of any snapshot use: */
/* n_tokens at word 8, flags at word 9, the tokens right after -- the disk */
/* KV store's token check reads them there):                              */
/*   magic "GLMS", version 1, n_layer, n_embd, head_dim (kv_lora + n_rot), */
/*   idx_dim, n_vocab, kv_lora, n_tokens, flags (bit 0: --no-qat           */
/*   activations, bit 1: the logits are valid)                             */
/*   i32 tokens[n_tokens]                                                  */
/*   f32 logits[n_vocab]   (zeros when not valid)                          */
/*   per layer: u32 kind (1: full layer, own indexer keys; 0: shared);     */
/*     f32 rows[n_tokens][head_dim]; full layers: f32 keys[n_tokens][idx_dim] */
/* The rows of a position never change, so the rows below n_tokens are    */
/* the whole state.  Another magic (a DS4S snapshot) is refused by name.   */
/* ---------------------------------------------------------------------- */

#define GLM_SNAP_MAGIC 0x534D4C47u   /* "GLMS" */
#define GLM_SNAP_V4_MAGIC 0x53345344u   /* "DS4S": DeepSeek V4's, refused */
#define GLM_SNAP_VERSION 1u
#define GLM_SNAP_HDR 10

static uint64_t glm_snapshot_size(const ds4_session *s) {
    const ds4_config *c = &s->m->w.cfg;
    const uint64_t n = s->toks.n;
    uint64_t b = GLM_SNAP_HDR * 4 + n * 4 + (uint64_t)c->n_vocab * 4;
    for (int il = 0; il < c->n_layer; il++)
        b += 4 + n * ((uint64_t)c->head_dim + (s->m->w.layers[il].own_indexer ? c->idx_dim : 0)) * 4;
    return b;
}

static void glm_snap_header(const ds4_session *s, uint32_t h[GLM_SNAP_HDR]) {
    const ds4_config *c = &s->m->w.cfg;
    h[0] = GLM_SNAP_MAGIC;
    h[1] = GLM_SNAP_VERSION;
    h[2] = (uint32_t)c->n_layer;
    h[3] = (uint32_t)c->n_embd;
    h[4] = (uint32_t)c->head_dim;
    h[5] = (uint32_t)c->idx_dim;
    h[6] = (uint32_t)c->n_vocab;
    h[7] = (uint32_t)c->kv_lora;
    h[8] = (uint32_t)s->toks.n;
    h[9] = (s->no_qat ? 1u : 0u) | (s->has_logits ? 2u : 0u);
}

/* Streams the snapshot through `w`: nothing of snapshot size is
 * allocated. */
static int glm_snapshot_write(const ds4_session *s, ds4_write_fn w, void *ud) {
    const ds4_config *c = &s->m->w.cfg;
    const struct ds4_glm_state *g = s->glm;
    const size_t n = s->toks.n;
    uint32_t hdr[GLM_SNAP_HDR];
    glm_snap_header(s, hdr);
#define PUT(p, k) do { int rc_ = w(ud, (p), (k)); if (rc_) return rc_; } while (0)
    PUT(hdr, sizeof hdr);
    PUT(s->toks.v, n * 4);
    if (s->has_logits) {
        PUT(s->logits, (size_t)c->n_vocab * 4);
    } else {
        static const float zeros[256];
        for (size_t left = (size_t)c->n_vocab * 4; left > 0;) {
            size_t k = left < sizeof zeros ? left : sizeof zeros;
            PUT(zeros, k);
            left -= k;
        }
    }
    for (int il = 0; il < c->n_layer; il++) {
        const uint32_t kind = s->m->w.layers[il].own_indexer ? 1u : 0u;
        PUT(&kind, 4);
        PUT(g->kv[il], n * (size_t)c->head_dim * 4);
        if (kind) PUT(g->ik[il], n * (size_t)c->idx_dim * 4);
    }
#undef PUT
    return DS4_OK;
}

static int snap_fail(char **err, const char *msg) {
    return ds4_set_err(err, DS4_EFORMAT, "snapshot: %s", msg);
}

/* Everything is validated before the live state is touched. */
static int glm_restore(ds4_session *s, const void *data, size_t len, char **err) {
    const ds4_config *c = &s->m->w.cfg;
    struct ds4_glm_state *g = s->glm;
    const uint8_t *p = data;
    uint32_t h[GLM_SNAP_HDR], want[GLM_SNAP_HDR];
    if (len < sizeof h) return snap_fail(err, "truncated header");
    memcpy(h, p, sizeof h);
    if (h[0] == GLM_SNAP_V4_MAGIC)
        return snap_fail(err, "made by a DeepSeek V4 session (DS4S), this is a glm-dsa model");
    if (h[0] != GLM_SNAP_MAGIC) return snap_fail(err, "bad magic");
    if (h[1] != GLM_SNAP_VERSION) return snap_fail(err, "unsupported version");
    glm_snap_header(s, want);
    for (int i = 2; i < 8; i++)
        if (h[i] != want[i]) return snap_fail(err, "made for a different model shape");
    if ((h[9] & 1u) != (want[9] & 1u)) return snap_fail(err, "numerics mode (--no-qat) differs from this session's");
    if (h[9] & ~3u) return snap_fail(err, "unknown flags");
    const uint32_t n = h[8];
    if (n > (uint32_t)s->ctx) return snap_fail(err, "more tokens than this session's context");
    if (n == 0 && (h[9] & 2u)) return snap_fail(err, "logits without tokens");
    size_t at = sizeof h;
    const size_t tok_at = at;
    if ((size_t)n * 4 > len - at) return snap_fail(err, "truncated tokens");
    for (uint32_t i = 0; i < n; i++) {
        int32_t t;
        memcpy(&t, p + tok_at + 4 * (size_t)i, 4);
        if (t < 0 || t >= c->n_vocab) return snap_fail(err, "token id out of range");
    }
    at += (size_t)n * 4;
    const size_t logit_at = at;
    if ((size_t)c->n_vocab * 4 > len - at) return snap_fail(err, "truncated logits");
    at += (size_t)c->n_vocab * 4;
    const size_t layer_at = at;
    for (int il = 0; il < c->n_layer; il++) {
        uint32_t kind;
        if (4 > len - at) return snap_fail(err, "truncated layer header");
        memcpy(&kind, p + at, 4);
        at += 4;
        const int own = s->m->w.layers[il].own_indexer;
        if (kind != (own ? 1u : 0u)) return snap_fail(err, "layer kinds (full / shared indexer) differ from this model's");
        const size_t need = (size_t)n * ((size_t)c->head_dim + (own ? (size_t)c->idx_dim : 0)) * 4;
        if (need > len - at) return snap_fail(err, "truncated layer data");
        at += need;
    }
    if (at != len) return snap_fail(err, "trailing bytes");

    /* Commit. */
    ds4_session_clear(s);   /* also drops a staged pass and the checkpoints */
    memcpy(s->toks.v, p + tok_at, (size_t)n * 4);
    s->toks.n = n;
    memcpy(s->logits, p + logit_at, (size_t)c->n_vocab * 4);
    s->has_logits = (h[9] & 2u) != 0;
    at = layer_at;
    for (int il = 0; il < c->n_layer; il++) {
        at += 4;
        const size_t kb = (size_t)n * (size_t)c->head_dim * 4;
        memcpy(g->kv[il], p + at, kb);
        at += kb;
        if (s->m->w.layers[il].own_indexer) {
            const size_t ib = (size_t)n * (size_t)c->idx_dim * 4;
            memcpy(g->ik[il], p + at, ib);
            at += ib;
        }
    }
    return DS4_OK;
}

const ds4_graph ds4_graph_glm_dsa = {
    .name = "glm-dsa",
    .arch = DS4_ARCH_GLM_DSA,
    .caps = 0,
    .state_new = glm_state_new,
    .state_free = glm_state_free,
    .state_reset = glm_state_reset,
    .eval_chunk = glm_eval_chunk,
    .chunk_logits = glm_chunk_logits,
    .kv_bytes = glm_kv_bytes,
    .plan = glm_plan,
    .checkpoint_bytes = glm_checkpoint_bytes,
    .checkpoint = glm_checkpoint,
    .rewind_point = glm_rewind_point,
    .rewind = glm_rewind,
    .snapshot_size = glm_snapshot_size,
    .snapshot_write = glm_snapshot_write,
    .restore = glm_restore,
};
