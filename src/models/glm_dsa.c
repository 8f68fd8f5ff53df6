/*
 * glm_dsa.c -- the glm-dsa graph (GLM 5.2 / 5.3; ../shared/docs/FAMILY.md
 * §3, docs/family.md): one residual stream; MLA with q and kv LoRA and an
 * interleaved-RoPE tail, absorbed attention over 576-wide cached rows
 * (normed latent + RoPE key) restricted to the rows the DSA lightning
 * indexer selects (IndexShare: a "shared" layer reuses the previous full
 * layer's selection), leading dense SwiGLU layers, then the sigmoid MoE
 * with the selection bias plus the shared expert (both glm_common.c's
 * glm_ffn, no clamps); final norm and head.
 * The float64 reference is tests/oracle/glm_ref.py (GlmDsa.forward).
 * The NextN (MTP) block, when bound (docs/family.md, "MTP"): its cached
 * rows follow every evaluated position (glm_mtp_rows), and one draft step
 * runs the block (ds4_glm_mtp_step, called by mtp.c).
 *
 * Owns: the glm-dsa forward pass of a chunk of tokens on a session and its
 * per-session state (ds4_glm_state: every layer's cached rows, every full
 * layer's indexer keys, the NextN block's rows, the chunk's scratch), its
 * rewinds and its snapshots ("GLMS").  Session bookkeeping (token list,
 * chunking) stays in session.c, which calls this file through
 * ds4_graph_glm_dsa (models/graph.h).  Must not: touch DeepSeek V4's state
 * or graph (deepseek4.c, deepseek4_state.c), or order anything by the
 * chunk or the threads: every row's numbers come from per-row kernels
 * (cpu_matmul and its groups are bit-identical for any row count; vec_ops'
 * dots, exp_sum and wsum4 have one order in every table) and per-token
 * items whose arithmetic does not depend on which thread runs them, so one
 * prefill, token by token, uneven chunks and any thread count agree bit
 * for bit.  Float32 storage and accumulation; no storage roundings.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "models/glm_common.h"

struct ds4_glm_state {
    float **kv;        /* [n_layer + 1] -> [ctx][kv_lora + n_rot]; [n_layer]: the
                          NextN block's rows (NULL without one) */
    float **ik;        /* [n_layer] -> [ctx][idx_dim] (full layers), else NULL */
    float *cat;        /* NextN: [T][2 n_embd] its input [enorm(e); hnorm(h)] */
    int64_t mtp_hi;    /* NextN rows [0, mtp_hi) are those of the tokens
                          s->toks.v[0 .. mtp_hi) (past toks.n after a rewind) */
    /* the chunk's scratch, T = s->chunk rows */
    float *x, *cur, *qr, *q, *kva, *iq, *iw, *lat, *o, *y;
    float *qabs;       /* [T][H][head_dim]: W_UK,h^T q_nope,h then the RoPE'd q_pe,h, one
                        * 576-wide query against the 576-wide cached rows */
    float *moe;        /* [T][D] the FFN's output */
    float *rcs, *rsn;  /* [T][n_rot / 2] the chunk's RoPE angles */
    int *sel, *nsel;   /* [T][top_k] the selected rows (ascending), [T] (-1: every visible row) */
    glm_ffn_buf ffn;   /* the FFN's scratch (glm_common.c) */
    /* per thread (nth = the pool's size) */
    float *sc;         /* [nth][VEC_HB][ctx] attention weights, or indexer scores */
    const float **kp;  /* [nth][ctx] the key rows a token attends */
    mm_group *grp;     /* [n_head] one section's matmuls */
    float *isc;        /* [ctx] one token's indexer scores, split over the threads */
    float *logits;     /* [T][vocab] */
    float *dsel;       /* --dist pipeline: [T][1 + top_k] a selection crossing a rank boundary */
    void *qs, *qx;     /* quantized activations: [T] rows; [T][H] head rows */
};


static void glm_state_free(ds4_session *s) {
    ds4_mtp_state_free(s);
    struct ds4_glm_state *g = s->glm;
    if (!g) return;
    const int L = s->m->w.cfg.n_layer;
    for (int il = 0; il <= L; il++) {
        if (g->kv) free(g->kv[il]);
        if (g->ik) free(g->ik[il]);
    }
    free(g->kv); free(g->ik); free(g->cat);
    free(g->x); free(g->cur); free(g->qr); free(g->q); free(g->kva); free(g->iq); free(g->iw);
    free(g->qabs); free(g->lat); free(g->o); free(g->y);
    free(g->moe); free(g->rcs); free(g->rsn); free(g->sel); free(g->nsel); glm_ffn_free(&g->ffn); free(g->sc);
    free(g->kp); free(g->grp); free(g->isc); free(g->logits); free(g->qs); free(g->qx);
    free(g->dsel);
    free(g);
    s->glm = NULL;
}


static int glm_state_new(ds4_session *s) {
    const ds4_config *c = &s->m->w.cfg;
    const size_t T = (size_t)s->chunk, ctx = (size_t)s->ctx, D = (size_t)c->n_embd, H = (size_t)c->n_head;
    const size_t W = (size_t)c->head_dim, ID = (size_t)c->idx_dim, IH = (size_t)c->idx_heads;
    const size_t F = glm_mx((size_t)c->n_ff, (size_t)c->n_ff_exp * (size_t)c->n_expert_shared);
    const size_t K = (size_t)(c->idx_topk < s->ctx ? c->idx_topk : s->ctx);
    struct ds4_glm_state *g = calloc(1, sizeof *g);
    if (!g) return DS4_ENOMEM;
    s->glm = g;
    g->kv = calloc((size_t)c->n_layer + 1, sizeof *g->kv);
    g->ik = calloc((size_t)c->n_layer + 1, sizeof *g->ik);
    if (!g->kv || !g->ik) return DS4_ENOMEM;
    const int nextn = s->m->w.has_mtp;
    if (nextn && (!(g->kv[c->n_layer] = malloc(ctx * W * sizeof(float))) ||
                  !(g->cat = malloc(T * 2 * D * sizeof(float)))))
        return DS4_ENOMEM;
    for (int il = 0; il < c->n_layer; il++) {
        g->kv[il] = malloc(ctx * W * sizeof(float));
        if (!g->kv[il]) return DS4_ENOMEM;
        if (s->m->w.layers[il].own_indexer && !(g->ik[il] = malloc(ctx * ID * sizeof(float)))) return DS4_ENOMEM;
    }
    size_t widest = glm_mx(glm_mx(D, (size_t)c->q_lora), glm_mx(H * (size_t)c->vmla, glm_mx(F, (size_t)c->n_ff_exp)));
    widest = glm_mx(widest, glm_mx((size_t)c->kmla, (size_t)c->kv_lora));
    if (nextn) widest = glm_mx(widest, 2 * D);
    const size_t qrow = glm_mx(act_row_bytes(ACT_Q8_0A, (int)widest), act_row_bytes(ACT_Q8_K, (int)widest));
    const size_t hw = glm_mx((size_t)c->kmla, (size_t)c->kv_lora);   /* a head's row of k_b / v_b */
    const size_t qhead = H * glm_mx(glm_mx(act_row_bytes(ACT_Q8_0A, (int)hw), act_row_bytes(ACT_Q8_K, (int)hw)), hw * 4);
    const size_t NT = (size_t)ds4_pool_size(s->m->pool);
#define A(p, n) if (!((p) = glm_zalloc((n) * sizeof *(p)))) return DS4_ENOMEM
    A(g->x, T * D); A(g->cur, T * D); A(g->qr, T * (size_t)c->q_lora); A(g->q, T * H * (size_t)c->kmla);
    A(g->kva, T * W); A(g->iq, T * IH * ID); A(g->iw, T * IH); A(g->qabs, T * H * W);
    A(g->lat, T * H * (size_t)c->kv_lora); A(g->o, T * H * (size_t)c->vmla); A(g->y, T * D);
    A(g->moe, T * D);
    A(g->rcs, T * (size_t)(c->n_rot / 2 + 1)); A(g->rsn, T * (size_t)(c->n_rot / 2 + 1));
    A(g->sel, T * K); A(g->nsel, T);
    A(g->sc, NT * VEC_HB * ctx); A(g->kp, NT * ctx); A(g->grp, H);
    A(g->isc, ctx);
    A(g->logits, T * (size_t)c->n_vocab);
    if (dist_on()) A(g->dsel, T * (K + 1));
#undef A
    if (!(g->qs = malloc(T * qrow)) || !(g->qx = malloc(glm_mx(T * qrow, T * qhead)))) return DS4_ENOMEM;
    if (glm_ffn_new(&g->ffn, c, (int)T, s->m->xc != NULL)) return DS4_ENOMEM;
    /* the NextN block's drafts (mtp.c; its rows are this file's) */
    if (s->m->w.has_mtp && ds4_mtp_state_new(s) != DS4_OK) return DS4_ENOMEM;
    return DS4_OK;
}

static uint64_t glm_kv_bytes(const ds4_session *s) {
    const ds4_config *c = &s->m->w.cfg;
    uint64_t b = s->m->w.has_mtp ? (uint64_t)s->toks.n * (uint64_t)c->head_dim * 4 : 0;
    for (int il = 0; il < c->n_layer; il++)
        b += (uint64_t)s->toks.n * ((uint64_t)c->head_dim + (s->m->w.layers[il].own_indexer ? c->idx_dim : 0)) * 4;
    return b;
}

void ds4_glm_plan_token(const ds4_weights *w, ds4_glm_kv_token *k) {
    const ds4_config *c = &w->cfg;
    memset(k, 0, sizeof *k);
    /* the NextN block, when bound, keeps a cached row per token too */
    k->layers = c->n_layer + (w->has_mtp ? 1 : 0);
    k->row = c->head_dim;
    k->idx_row = c->idx_dim;
    k->elem = sizeof(float);
    for (int il = 0; il < c->n_layer; il++) k->idx_layers += w->layers[il].own_indexer != 0;
    k->bytes = ((uint64_t)k->layers * (uint64_t)k->row + (uint64_t)k->idx_layers * (uint64_t)k->idx_row) * k->elem;
}

uint64_t ds4_glm_plan_bytes(const ds4_weights *w, int ctx) {
    ds4_glm_kv_token k;
    ds4_glm_plan_token(w, &k);
    return (uint64_t)ctx * k.bytes;
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
    glm_mm(&f->cc, f->s->no_qat, f->g->qs, W, x, xs, T, y, ys);
}




/* The top-k selections (indexer rows, router) are glm_common.c's
 * ds4_glm_top_k: the tie rule of docs/family.md. */

/* Y_h[t] = W_h x_h[t] for every head h of a 3-D tensor in one pool
 * section (x_h[t] at x + t * xs + h * xh, y_h[t] at y + t * ys + h * yh):
 * every output element from the same row-dot kernel as one matmul per
 * head, so the same bits, without a section per head. */
static void mm_heads(glm_fwd *f, const ds4_tensor *w, const float *x, size_t xs, size_t xh, int T, float *y,
                     size_t ys, size_t yh) {
    const int H = f->c->n_head;
    mm_group *gr = f->g->grp;
    const mat_t m0 = mat_expert(w, 0);
    const act_kind kind = act_kind_for(m0.type, f->s->no_qat);
    const size_t rb = act_row_bytes(kind, m0.n_in);
    uint8_t *qx = f->g->qx;
    for (int h = 0; h < H; h++) {
        gr[h] = (mm_group){ .W = mat_expert(w, h), .kind = kind, .n_rows = T, .out = y + (size_t)h * yh,
                            .out_stride = ys };
        if (kind == ACT_F32) {
            gr[h].act = (const uint8_t *)(x + (size_t)h * xh);
            gr[h].act_stride = xs * sizeof(float);
        } else {
            uint8_t *a = qx + (size_t)h * T * rb;
            for (int t = 0; t < T; t++)
                act_quantize_row(f->cc.k, kind, x + (size_t)t * xs + (size_t)h * xh, m0.n_in, a + (size_t)t * rb);
            gr[h].act = a;
            gr[h].act_stride = rb;
        }
    }
    cpu_matmul_groups(&f->cc, gr, H);
}

static inline float relu_w(float w, float d) {
    /* w * d where d > 0, else +0 (the ReLU before the head weight); the
     * product's bits masked by the comparison, no branch */
    float p = w * d;
    uint32_t b;
    memcpy(&b, &p, 4);
    b &= (uint32_t)0 - (uint32_t)(d > 0);
    memcpy(&p, &b, 4);
    return p;
}

/* The indexer scores of keys j0 .. j0 + nk - 1 (nk <= 4) for one token:
 * per key the sum over heads h = 0, 1, ... in order, from +0, of
 * relu(q_h . k) * w_h, each dot in vec_ops' lane order (dot4x4, dot4 and
 * dot give the same bits for a pair), so no grouping of keys or threads
 * changes a score. */
static void idx_scores(const vec_kernels *vk, const float *q, const float *wt, int IH, int ID, const float *ik,
                       int j0, int nk, float *out) {
    const float *rows[4];
    for (int jj = 0; jj < 4; jj++) rows[jj] = ik + (size_t)(j0 + (jj < nk ? jj : 0)) * ID;
    float s[4] = { 0, 0, 0, 0 };
    int h = 0;
    if (nk == 4) {
        for (; h + VEC_HB <= IH; h += VEC_HB) {
            float d[16];
            vk->dot4x4(q + (size_t)h * ID, ID, rows, ID, d);
            for (int k = 0; k < VEC_HB; k++)
                for (int jj = 0; jj < 4; jj++) s[jj] += relu_w(wt[h + k], d[k * 4 + jj]);
        }
    } else {
        for (; h + VEC_HB <= IH; h += VEC_HB)
            for (int jj = 0; jj < nk; jj++) {
                float d[VEC_HB];
                vk->dot4(q + (size_t)h * ID, ID, rows[jj], ID, d);
                for (int k = 0; k < VEC_HB; k++) s[jj] += relu_w(wt[h + k], d[k]);
            }
    }
    for (; h < IH; h++)
        for (int jj = 0; jj < nk; jj++) s[jj] += relu_w(wt[h], vk->dot(q + (size_t)h * ID, rows[jj], ID));
    for (int jj = 0; jj < nk; jj++) out[jj] = s[jj];
}

/* One token's scores of keys [lo, hi) into sc[lo .. hi). */
static void idx_range(glm_fwd *f, int il, int t, long lo, long hi, float *sc) {
    const ds4_config *c = f->c;
    const int IH = c->idx_heads, ID = c->idx_dim;
    const float *q = f->g->iq + (size_t)t * IH * ID, *wt = f->g->iw + (size_t)t * IH, *ik = f->g->ik[il];
    for (long j = lo; j < hi; j += 4) {
        const int nk = hi - j < 4 ? (int)(hi - j) : 4;
        idx_scores(f->s->m->vk, q, wt, IH, ID, ik, (int)j, nk, sc + j);
    }
}

typedef struct {
    glm_fwd *f;
    int il, T, t;      /* t: the one token of a split by keys */
    int64_t p0;
    atomic_int next;   /* the next token of a split by tokens */
} idx_job;

/* Split by tokens: each thread scores a whole token into its own row and
 * takes its top-k. */
static void idx_tokens_task(void *ctx, int ith, int nth) {
    idx_job *j = ctx;
    glm_fwd *f = j->f;
    struct ds4_glm_state *g = f->g;
    const int K = f->c->idx_topk;
    float *sc = g->sc + (size_t)ith * VEC_HB * f->s->ctx;
    (void)nth;
    for (;;) {
        const int t = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (t >= j->T) break;
        const int n = (int)(j->p0 + t) + 1;
        if (n <= K) continue;
        idx_range(f, j->il, t, 0, n, sc);
        ds4_glm_top_k(sc, n, K, g->sel + (size_t)t * K);
    }
}

/* Split by keys: one token's keys over the threads (decode). */
static void idx_keys_task(void *ctx, int ith, int nth) {
    idx_job *j = ctx;
    const long n = (long)(j->p0 + j->t) + 1;
    long lo, hi;
    ds4_split((n + 3) / 4, ith, nth, &lo, &hi);
    lo *= 4; hi = hi * 4 < n ? hi * 4 : n;
    if (lo < hi) idx_range(j->f, j->il, j->t, lo, hi, j->f->g->isc);
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
    /* the tokens that select (more visible rows than top_k) */
    int nsel = 0;
    for (int t = 0; t < T; t++) {
        const int n = (int)(p0 + t) + 1;
        g->nsel[t] = n <= K ? -1 : K;
        nsel += n > K;
    }
    if (!nsel) return;
    idx_job j = { .f = f, .il = il, .T = T, .p0 = p0 };
    atomic_init(&j.next, 0);
    if (nsel >= ds4_pool_size(f->s->m->pool)) {
        ds4_pool_run(f->s->m->pool, idx_tokens_task, &j);
        return;
    }
    for (int t = 0; t < T; t++) {
        if (g->nsel[t] < 0) continue;
        j.t = t;
        ds4_pool_run(f->s->m->pool, idx_keys_task, &j);
        ds4_glm_top_k(g->isc, (int)(p0 + t) + 1, K, g->sel + (size_t)t * K);
    }
}

typedef struct {
    glm_fwd *f;
    const float *kv;   /* the layer's cached rows */
    int64_t p0;
    int T;
} att_job;

/* One item = one token's block of VEC_HB heads: the scores against the
 * token's rows (every visible one, or the indexer's selection), the
 * softmax, the weighted sum of the rows' latents.  Every head's numbers
 * depend only on its token's rows, never on the item split. */
static void att_task(void *ctx, int ith, int nth) {
    att_job *j = ctx;
    glm_fwd *f = j->f;
    const ds4_config *c = f->c;
    struct ds4_glm_state *g = f->g;
    const vec_kernels *vk = f->s->m->vk;
    const int H = c->n_head, KM = c->kmla, nr = c->n_rot, nope = KM - nr, R = c->kv_lora, W = c->head_dim;
    const int K = c->idx_topk, hr = nr / 2, nblk = (H + VEC_HB - 1) / VEC_HB;
    const size_t wcap = (size_t)f->s->ctx;
    const float scale = 1.0f / sqrtf((float)KM);
    float *wb = g->sc + (size_t)ith * VEC_HB * wcap;
    const float **kp = g->kp + (size_t)ith * wcap;
    const long nitem = (long)j->T * nblk;
    for (long it = ith; it < nitem; it += nth) {
        const int t = (int)(it / nblk), h0 = (int)(it % nblk) * VEC_HB;
        const int nh = H - h0 < VEC_HB ? H - h0 : VEC_HB;
        const int n = (int)(j->p0 + t) + 1;
        const int ns = g->nsel[t] < 0 ? n : g->nsel[t];
        const int *sel = g->nsel[t] < 0 ? NULL : g->sel + (size_t)t * K;
        /* the query: the latent part (k_b's product), then q_pe RoPE'd */
        float *q = g->qabs + ((size_t)t * H + h0) * W;
        for (int h = 0; h < nh; h++) {
            float *qp = g->q + ((size_t)t * H + h0 + h) * KM + nope;
            rope_apply(qp, nr, nr, g->rcs + (size_t)t * hr, g->rsn + (size_t)t * hr, 0);
            memcpy(q + (size_t)h * W + R, qp, (size_t)nr * sizeof(float));
        }
        for (int a = 0; a < ns; a++) kp[a] = j->kv + (size_t)(sel ? sel[a] : a) * W;
        /* scores: the heads against four rows per pass, then one by one */
        int a = 0;
        if (nh == VEC_HB)
            for (; a + 4 <= ns; a += 4) {
                float s16[16];
                vk->dot4x4(q, (size_t)W, kp + a, W, s16);
                for (int h = 0; h < VEC_HB; h++)
                    for (int jj = 0; jj < 4; jj++) wb[(size_t)h * wcap + a + jj] = s16[h * 4 + jj] * scale;
            }
        for (; a < ns; a++) {
            float s4[VEC_HB];
            if (nh == VEC_HB) vk->dot4(q, (size_t)W, kp[a], W, s4);
            else for (int h = 0; h < nh; h++) s4[h] = vk->dot(q + (size_t)h * W, kp[a], W);
            for (int h = 0; h < nh; h++) wb[(size_t)h * wcap + a] = s4[h] * scale;
        }
        /* softmax: exp_sum's 16 lanes, then each weight divided by the sum */
        for (int h = 0; h < nh; h++) {
            float *w = wb + (size_t)h * wcap, mxs = -INFINITY;
            for (int b = 0; b < ns; b++)
                if (w[b] > mxs) mxs = w[b];
            const float sum = vk->exp_sum(w, ns, mxs);
            for (int b = 0; b < ns; b++) w[b] = w[b] / sum;
        }
        /* the weighted sum of the rows' latents, row order, from +0 */
        float *lat = g->lat + ((size_t)t * H + h0) * R;
        if (nh == VEC_HB) {
            vk->wsum4(lat, (size_t)R, kp, wb, wcap, ns, R);
        } else {
            for (int h = 0; h < nh; h++) {
                float *y = lat + (size_t)h * R;
                memset(y, 0, (size_t)R * sizeof(float));
                for (int b = 0; b < ns; b++) {
                    const float e = wb[(size_t)h * wcap + b];
                    for (int i = 0; i < R; i++) y[i] = fmaf(e, kp[b][i], y[i]);
                }
            }
        }
    }
}

/* Absorbed MLA of one layer over the chunk (its rows already cached). */
static void attention(glm_fwd *f, const ds4_layer_weights *lw, int il, int64_t p0, int T) {
    const ds4_config *c = f->c;
    struct ds4_glm_state *g = f->g;
    const int H = c->n_head, KM = c->kmla, R = c->kv_lora, W = c->head_dim, hr = c->n_rot / 2;
    /* q~_h = W_UK,h^T q_nope,h onto the latent: the first R of each head's
     * W-wide query row */
    mm_heads(f, &lw->attn_k_b, g->q, (size_t)H * KM, (size_t)KM, T, g->qabs, (size_t)H * W, (size_t)W);
    for (int t = 0; t < T; t++) rope_angles(&f->s->m->rope_dense, p0 + t, g->rcs + (size_t)t * hr, g->rsn + (size_t)t * hr);
    att_job j = { .f = f, .kv = g->kv[il], .p0 = p0, .T = T };
    ds4_pool_run(f->s->m->pool, att_task, &j);
    /* W_UV,h back out of the latent */
    mm_heads(f, &lw->attn_v_b, g->lat, (size_t)H * R, (size_t)R, T, g->o, (size_t)H * c->vmla, (size_t)c->vmla);
}

/* The cached rows of layer il for positions p0.. from its normed input
 * rows `in` (stride n_embd): the normed latent, then the RoPE key. */
static void kv_rows(glm_fwd *f, const ds4_layer_weights *lw, int il, const float *in, int64_t p0, int T) {
    const ds4_config *c = f->c;
    const int R = c->kv_lora, W = c->head_dim, nr = c->n_rot;
    float cs[DS4_MAX_ROT_DIM / 2], sn[DS4_MAX_ROT_DIM / 2];
    float *kv = f->g->kv[il] + (size_t)p0 * W;
    mm(f, mat_of(&lw->attn_kv), in, (size_t)c->n_embd, T, kv, (size_t)W);
    for (int t = 0; t < T; t++) {
        float *row = kv + (size_t)t * W;
        rms_norm(row, (const float *)lw->attn_kv_a_norm.data, R, c->rms_eps, row);
        rope_angles(&f->s->m->rope_dense, p0 + t, cs, sn);
        rope_apply(row + R, nr, nr, cs, sn, 0);
    }
}

/* One decoder layer over the chunk's residual rows g->x (positions
 * p0..): its cached rows into g->kv[il], attention, the FFN.  dense_attn:
 * every visible row (the NextN block, which llama.cpp runs without the
 * indexer); else the layer's own indexer's selection, or the previous
 * full layer's (IndexShare). */
static int layer(glm_fwd *f, const ds4_layer_weights *lw, int il, int64_t p0, int T, int dense_attn) {
    const ds4_config *c = f->c;
    struct ds4_glm_state *g = f->g;
    const int D = c->n_embd, H = c->n_head;
    glm_norm_rows(g->x, (size_t)D, &lw->attn_norm, T, D, c->rms_eps, g->cur, (size_t)D);
    mm(f, mat_of(&lw->attn_q_a), g->cur, (size_t)D, T, g->qr, (size_t)c->q_lora);
    glm_norm_rows(g->qr, (size_t)c->q_lora, &lw->attn_q_a_norm, T, c->q_lora, c->rms_eps, g->qr, (size_t)c->q_lora);
    mm(f, mat_of(&lw->attn_q_b), g->qr, (size_t)c->q_lora, T, g->q, (size_t)H * c->kmla);
    kv_rows(f, lw, il, g->cur, p0, T);
    if (dense_attn) for (int t = 0; t < T; t++) g->nsel[t] = -1;
    else if (lw->own_indexer) indexer(f, lw, il, p0, T);
    attention(f, lw, il, p0, T);
    mm(f, mat_of(&lw->attn_output), g->o, (size_t)H * c->vmla, T, g->y, (size_t)D);
    for (size_t i = 0; i < (size_t)T * D; i++) g->x[i] += g->y[i];
    glm_norm_rows(g->x, (size_t)D, &lw->ffn_norm, T, D, c->rms_eps, g->cur, (size_t)D);
    /* the dense or MoE FFN, no SwiGLU clamps */
    const glm_ffn_ctx fx = { .cc = &f->cc, .no_qat = f->s->no_qat, .xc = f->s->m->xc, .c = c, .b = &g->ffn };
    int rc = glm_ffn(&fx, lw, il, g->cur, T, 0.0f, 0.0f, g->moe);
    if (rc) return rc;
    for (size_t i = 0; i < (size_t)T * D; i++) g->x[i] += g->moe[i];
    return DS4_OK;
}

static int glm_mtp_rows(glm_fwd *f, const int32_t *toks, int64_t p0, int T);

static const float *glm_chunk_logits(const ds4_session *s) { return s->glm->logits; }

static int glm_eval_chunk(ds4_session *s, const int32_t *toks, int T) {
    ds4_model *m = s->m;
    glm_fwd f = { .s = s, .c = &m->w.cfg, .w = &m->w, .g = s->glm };
    f.cc.pool = m->pool;
    f.cc.k = m->kern;
    const ds4_config *c = f.c;
    struct ds4_glm_state *g = f.g;
    const int D = c->n_embd;
    const int64_t p0 = (int64_t)s->toks.n;
    if (T < 1 || T > s->chunk || p0 + T > s->ctx) return DS4_EINVAL;
    /* --dist pipeline (src/mpi/, docs/distributed.md): this rank's layers
     * [lo, hi) only; the residual rows come from the previous rank and go
     * to the next (with the selection when it crosses the boundary:
     * glm_sel_crosses), the last rank runs the head and rank 0 gets the
     * logits.  The whole chunk goes at once (no micro-batches: the ranks
     * take turns, prefill does not overlap them).  Staged passes are
     * refused: their rollback would have to reach every rank. */
    int want_all = s->cap_logits || s->stg_on, lo = 0, hi = c->n_layer;
    if (dist_on()) {
        if (s->stg_on) return DS4_EUNSUP;
        int rc = dist_chunk_begin(s, toks, T, &want_all, &lo, &hi);
        if (rc) return rc;
    }
    const int K = c->idx_topk < s->ctx ? c->idx_topk : s->ctx;   /* g->sel's stride when it selects */
    if (lo == 0) {
        for (int t = 0; t < T; t++)
            if (ds4_dequantize_row(f.w->token_embd.type,
                                   f.w->token_embd.data + (size_t)toks[t] * f.w->token_embd.row_bytes,
                                   g->x + (size_t)t * D, D))
                return DS4_EFORMAT;
    } else {
        int rc = dist_recv_floats(g->x, T * D);
        if (!rc && glm_sel_crosses(f.w, lo)) rc = glm_sel_recv(g->sel, g->nsel, T, K, g->dsel);
        if (rc) return rc;
    }
    for (int il = lo; il < hi; il++) {
        int rc = layer(&f, &f.w->layers[il], il, p0, T, 0);
        if (rc) return rc;
    }
    if (hi < c->n_layer) {
        int rc = dist_send_floats(g->x, T * D);
        if (!rc && glm_sel_crosses(f.w, hi)) rc = glm_sel_send(g->sel, g->nsel, T, K, g->dsel);
        if (!rc) rc = dist_send_done(s);
        if (rc) return rc;
    }
    /* the head: every row when the caller captures them or a staged pass
     * needs them (ds4_glm_logits; under --dist: rank 0 asked for them),
     * else the last; the normed rows of every position when the NextN
     * block follows (its input; never under --dist) */
    const int r0 = want_all ? 0 : T - 1, nl = T - r0, rn = s->mtp ? 0 : r0;
    if (hi < c->n_layer || (dist_on() && !dist_runs_head())) {
        /* rank 0 takes the head rank's logits; the ranks between are done */
        if (!dist_is_root()) return ds4_model_check(m);
        dist_logits(s, g->logits, nl);
        memcpy(s->logits, g->logits + (size_t)(nl - 1) * c->n_vocab, (size_t)c->n_vocab * sizeof(float));
        s->has_logits = 1;
        if (s->cap_logits) {
            int rc = ds4_buf_append(s->cap_logits, g->logits, (size_t)nl * c->n_vocab * sizeof(float));
            if (rc) return rc;
        }
        return ds4_model_check(m);
    }
    glm_norm_rows(g->x + (size_t)rn * D, (size_t)D, &f.w->output_norm, T - rn, D, c->rms_eps, g->cur + (size_t)rn * D,
              (size_t)D);
    const ds4_tensor *out = f.w->output.data ? &f.w->output : &f.w->token_embd;
    mm(&f, mat_of(out), g->cur + (size_t)r0 * D, (size_t)D, nl, g->logits, (size_t)c->n_vocab);
    if (dist_on()) {
        /* the head rank (a worker): the rows go to rank 0 */
        dist_logits(s, g->logits, nl);
        return ds4_model_check(m);
    }
    memcpy(s->logits, g->logits + (size_t)(nl - 1) * c->n_vocab, (size_t)c->n_vocab * sizeof(float));
    s->has_logits = 1;
    if (s->cap_logits) {
        int rc = ds4_buf_append(s->cap_logits, g->logits, (size_t)nl * c->n_vocab * sizeof(float));
        if (rc) return rc;
    }
    if (s->mtp) {
        int rc = glm_mtp_rows(&f, toks, p0, T);
        if (rc) return rc;
    }
    return ds4_model_check(m);
}

/* ---------------------------------------------------------------------- */
/* The NextN (MTP) block (docs/family.md, "MTP"; glm_ref.py GlmDsa.mtp)    */
/* ---------------------------------------------------------------------- */

/* The block's input rows into g->x (glm_common.c's glm_mtp_input). */
static int mtp_input(glm_fwd *f, const int32_t *toks, const float *h0, const float *hrows, int T) {
    return glm_mtp_input(&f->cc, f->s->no_qat, f->g->qs, f->w, toks, h0, hrows, T, f->g->y, f->g->cat, f->g->x);
}

/* After the main pass of toks[0..T) at p0 (normed rows in g->cur): the
 * block's cached rows of those positions, row p from the token at p and
 * the main state after p - 1 (only up to the KV head: a row depends on
 * its own input alone).  Rows still held for the same tokens (after a
 * rewind or a rolled-back staged pass: the prefix is the same, so they
 * are) are kept, so a row is made again only from a state the session
 * holds; the main states go to the MTP state's ring (mtp_state.c) for
 * the next chunk and the drafts. */
static int glm_mtp_rows(glm_fwd *f, const int32_t *toks, int64_t p0, int T) {
    ds4_session *s = f->s;
    struct ds4_glm_state *g = f->g;
    const ds4_config *c = f->c;
    const int D = c->n_embd, L = c->n_layer;
    int k = 0;
    while (k < T && p0 + k < g->mtp_hi && s->toks.v[p0 + k] == toks[k]) k++;
    const int64_t hi = g->mtp_hi;
    if (g->mtp_hi > p0 + k) g->mtp_hi = p0 + k;
    if (k < T) {
        const float *h0 = k ? g->cur + (size_t)(k - 1) * D : ds4_mtp_main_state(s, p0 - 1);
        int rc = mtp_input(f, toks + k, h0, g->cur + (size_t)k * D, T - k);
        if (rc) return rc;
        glm_norm_rows(g->x, (size_t)D, &f->w->mtp.block.attn_norm, T - k, D, c->rms_eps, g->moe, (size_t)D);
        kv_rows(f, &f->w->mtp.block, L, g->moe, p0 + k, T - k);
        g->mtp_hi = p0 + T;
    } else if (hi > p0 + T) {
        g->mtp_hi = hi;
    }
    ds4_mtp_note_hidden(s, g->cur, p0, T);
    return DS4_OK;
}

int ds4_glm_mtp_step(ds4_session *s, int32_t tok, const float *hprev, int64_t p) {
    ds4_model *m = s->m;
    glm_fwd f = { .s = s, .c = &m->w.cfg, .w = &m->w, .g = s->glm };
    f.cc.pool = m->pool;
    f.cc.k = m->kern;
    const ds4_config *c = f.c;
    const ds4_mtp_weights *mw = &f.w->mtp;
    mtp_state *ms = s->mtp;
    if (!ms || !f.w->has_mtp || p < 0 || p >= s->ctx || tok < 0 || tok >= c->n_vocab) return DS4_EINVAL;
    int rc = ds4_model_check(m);
    if (rc) return rc;
    /* the draft's row p replaces whatever the block held there */
    if (f.g->mtp_hi > p) f.g->mtp_hi = p;
    rc = mtp_input(&f, &tok, hprev, NULL, 1);
    if (rc) return rc;
    rc = layer(&f, &mw->block, c->n_layer, p, 1, 1);
    if (rc) return rc;
    const ds4_tensor *nw = mw->norm.data ? &mw->norm : &f.w->output_norm;
    rms_norm(f.g->x, (const float *)nw->data, c->n_embd, c->rms_eps, ms->hc);
    const ds4_tensor *head = mw->head.data ? &mw->head : f.w->output.data ? &f.w->output : &f.w->token_embd;
    mm(&f, mat_of(head), ms->hc, (size_t)c->n_embd, 1, ms->logits, (size_t)c->n_vocab);
    ms->steps++;
    return ds4_model_check(m);
}

/* the KV and scratch bytes of a default session of ctx tokens: the cached
 * rows, and the chunk's scratch (the head's rows lead) */
static void glm_plan(const ds4_weights *w, int ctx, int nth, uint64_t *kv, uint64_t *scratch) {
    const ds4_config *c = &w->cfg;
    int ch = ctx < 2048 ? ctx : 2048;
    *kv = ds4_glm_plan_bytes(w, ctx);
    if (w->has_mtp)   /* the drafts' state: kept main states, the chain's, its logits and q */
        *kv += (uint64_t)(DS4_DRAFT_PASS_MAX + 3) * c->n_embd * sizeof(float) +
               (uint64_t)DS4_DRAFT_PASS_MAX * c->n_vocab * sizeof(float);
    *scratch = (uint64_t)ch * ((uint64_t)c->n_vocab + 16u * (uint64_t)c->n_embd) * sizeof(float) +
               (uint64_t)ctx * 16;
    (void)nth;
}

/* nothing to empty: the rows past the token count are dead; the NextN
 * block's rows no longer belong to the session's tokens */
static void glm_state_reset(ds4_session *s) {
    if (s->glm) s->glm->mtp_hi = 0;
    ds4_mtp_state_reset(s);
}

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
 * left (--dist: on every rank, for its layers) */
static int glm_rewind(ds4_session *s, int n) {
    if (n <= 0 || n > (int)s->toks.n) return DS4_EINVAL;
    if (n < (int)s->toks.n) s->has_logits = 0;
    s->toks.n = (size_t)n;
    s->stg_n = 0;
    dist_session_rewind(s, n);
    return DS4_OK;
}

/* ---------------------------------------------------------------------- */
/* Snapshots                                                               */
/*                                                                         */
/* Little-endian, all u32 unless noted (the first ten words keep the       */
/* places of DeepSeek V4's "DS4S" header that readers of any snapshot use: */
/* n_tokens at word 8, flags at word 9, the tokens right after -- the disk */
/* KV store's token check reads them there):                              */
/*   magic "GLMS", version 2, n_layer, n_embd, head_dim (kv_lora + n_rot), */
/*   idx_dim, n_vocab, kv_lora, n_tokens, flags (bit 0: --no-qat           */
/*   activations, bit 1: the logits are valid, bit 2: the NextN section    */
/*   follows the layers, bit 3: its main state is valid)                   */
/*   i32 tokens[n_tokens]                                                  */
/*   f32 logits[n_vocab]   (zeros when not valid)                          */
/*   per layer: u32 kind (1: full layer, own indexer keys; 0: shared);     */
/*     f32 rows[n_tokens][head_dim]; full layers: f32 keys[n_tokens][idx_dim] */
/*   the NextN section (bit 2; written by a session with the block): u32 m */
/*     (its rows held, <= n_tokens), f32 the main model's normed state     */
/*     after position n_tokens - 1 [n_embd] (zeros unless bit 3), f32 the  */
/*     block's rows [m][head_dim] -- so a restored session drafts what the */
/*     saving one would                                                     */
/* The rows of a position never change, so the rows below n_tokens are    */
/* the whole state.  Another magic (a DS4S snapshot) is refused by name.   */
/* Version 1 (no NextN section, no bits 2-3) is read as before: the        */
/* block's rows then start cold (drafts differ, never the output).         */
/* ---------------------------------------------------------------------- */

#define GLM_SNAP_MAGIC 0x534D4C47u   /* "GLMS" */
#define GLM_SNAP_V4_MAGIC 0x53345344u   /* "DS4S": DeepSeek V4's, refused */
#define GLM_SNAP_VERSION 2u
#define GLM_SNAP_HDR 10

/* the NextN rows a snapshot carries: those of the session's tokens */
static uint32_t nextn_snap_rows(const ds4_session *s) {
    const int64_t hi = s->glm->mtp_hi, n = (int64_t)s->toks.n;
    return (uint32_t)(hi < n ? hi : n);
}

/* the main state the next draft starts from, or NULL */
static const float *nextn_main(const ds4_session *s) {
    return s->mtp && s->toks.n > 0 ? ds4_mtp_main_state(s, (int64_t)s->toks.n - 1) : NULL;
}

static uint64_t glm_snapshot_size(const ds4_session *s) {
    const ds4_config *c = &s->m->w.cfg;
    const uint64_t n = s->toks.n;
    uint64_t b = GLM_SNAP_HDR * 4 + n * 4 + (uint64_t)c->n_vocab * 4;
    for (int il = 0; il < c->n_layer; il++)
        b += 4 + n * ((uint64_t)c->head_dim + (s->m->w.layers[il].own_indexer ? c->idx_dim : 0)) * 4;
    if (s->mtp) b += 4 + (uint64_t)c->n_embd * 4 + (uint64_t)nextn_snap_rows(s) * c->head_dim * 4;
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
    h[9] = (s->no_qat ? 1u : 0u) | (s->has_logits ? 2u : 0u) | (s->mtp ? 4u : 0u) | (nextn_main(s) ? 8u : 0u);
}

/* Streams the snapshot through `w`: nothing of snapshot size is
 * allocated. */
static int glm_snapshot_write(const ds4_session *s, ds4_write_fn w, void *ud) {
    if (dist_on()) return DS4_EUNSUP;   /* the layers' rows live on several ranks */
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
    if (s->mtp) {
        static const float zeros[256];
        const uint32_t mr = nextn_snap_rows(s);
        const float *h = nextn_main(s);
        PUT(&mr, 4);
        if (h) PUT(h, (size_t)c->n_embd * 4);
        else
            for (size_t left = (size_t)c->n_embd * 4; left > 0;) {
                size_t k = left < sizeof zeros ? left : sizeof zeros;
                PUT(zeros, k);
                left -= k;
            }
        PUT(g->kv[c->n_layer], (size_t)mr * c->head_dim * 4);
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
    if (dist_on()) return ds4_set_err(err, DS4_EUNSUP, "snapshot: not supported with --dist");
    if (len < sizeof h) return snap_fail(err, "truncated header");
    memcpy(h, p, sizeof h);
    if (h[0] == GLM_SNAP_V4_MAGIC)
        return snap_fail(err, "made by a DeepSeek V4 session (DS4S), this is a glm-dsa model");
    if (h[0] != GLM_SNAP_MAGIC) return snap_fail(err, "bad magic");
    if (h[1] != GLM_SNAP_VERSION && h[1] != 1u) return snap_fail(err, "unsupported version");
    glm_snap_header(s, want);
    for (int i = 2; i < 8; i++)
        if (h[i] != want[i]) return snap_fail(err, "made for a different model shape");
    if ((h[9] & 1u) != (want[9] & 1u)) return snap_fail(err, "numerics mode (--no-qat) differs from this session's");
    if (h[9] & (h[1] == 1u ? ~3u : ~15u)) return snap_fail(err, "unknown flags");
    if ((h[9] & 8u) && !(h[9] & 4u)) return snap_fail(err, "a NextN main state without the NextN section");
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
    const size_t nextn_at = at;
    uint32_t mr = 0;
    if (h[9] & 4u) {
        if (4 > len - at) return snap_fail(err, "truncated NextN section");
        memcpy(&mr, p + at, 4);
        at += 4;
        if (mr > n) return snap_fail(err, "more NextN rows than tokens");
        const size_t need = (size_t)c->n_embd * 4 + (size_t)mr * c->head_dim * 4;
        if (need > len - at) return snap_fail(err, "truncated NextN section");
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
    /* the NextN section: into the block's rows when this session has the
     * block (else skipped: nothing reads it) */
    if ((h[9] & 4u) && s->mtp && g->kv[c->n_layer]) {
        at = nextn_at + 4;
        if (h[9] & 8u) {
            float *row = malloc((size_t)c->n_embd * sizeof(float));   /* aligned copy */
            if (row) {
                memcpy(row, p + at, (size_t)c->n_embd * 4);
                ds4_mtp_note_hidden(s, row, (int64_t)n - 1, 1);
                free(row);
            }
        }
        at += (size_t)c->n_embd * 4;
        memcpy(g->kv[c->n_layer], p + at, (size_t)mr * c->head_dim * 4);
        g->mtp_hi = mr;
    }
    return DS4_OK;
}

const ds4_graph ds4_graph_glm_dsa = {
    .name = "glm-dsa",
    .arch = DS4_ARCH_GLM_DSA,
    .caps = DS4_GRAPH_DIST,
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
