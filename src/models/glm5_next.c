/*
 * glm5_next.c -- the glm5-next graph (GLM 5.3 Flash; ../shared/docs/FAMILY.md
 * §2, docs/family.md): DeepSeek V4's hyper-connections (mHC, n_hc streams,
 * the coefficients by deepseek4.c's ds4_hc_weights) around every
 * sublayer; KDA layers (Kimi Delta Attention: q/k/v projections through
 * short causal depthwise convolutions and SiLU, q and k L2-normed, the
 * per-channel gated delta rule on a recurrent state S per head, the gate
 * g = lower_bound * sigmoid(exp(A_log) (f_b f_a h + dt_bias)), a per-head
 * RMSNorm times a sigmoid output gate) or NoPE MLA layers whose rows the
 * k-pool DSA indexer selects (keys pooled by a softmax gate over kpool
 * consecutive positions; IndexShare as glm-dsa); glm-dsa's dense and
 * sigmoid-MoE FFN (glm_common.c's glm_ffn) with the SwiGLU clamps; the
 * streams' mean, norm, head.
 * The float64 reference is tests/oracle/glm_ref.py (Glm5Next.forward).
 * The NextN (MTP) block, when bound (docs/family.md, "MTP"): its cached
 * rows (latents, indexer keys, gates, pooled keys at index n_layer) follow
 * every evaluated position (g5n_mtp_rows), and one draft step runs the
 * block (ds4_g5n_mtp_step, called by mtp.c; glm_ref.py Glm5Next.mtp).
 *
 * Owns: the glm5-next forward pass of a chunk of tokens on a session and
 * its per-session state (ds4_g5n_state: every KDA layer's recurrent state
 * -- convolution tails and S --, every MLA layer's cached rows, every full
 * layer's indexer keys, gates and pooled keys; the NextN block's rows;
 * the checkpoint slots of the recurrent state; a staged pass's saved state
 * and per-token inputs; the snapshot format "G5NS"); its table
 * ds4_graph_glm5_next (models/graph.h).
 * Session bookkeeping (token list, chunking) stays in session.c, which
 * calls the table.  Must not: touch DeepSeek
 * V4's or glm-dsa's state or graph, or order anything by the chunk: every
 * row's numbers come from per-row kernels (cpu_matmul is bit-identical for
 * any row count) and per-token loops (the KDA recurrence: kernels/kda.c's
 * kda_recurrent, token by token within each head, heads over the pool),
 * so one prefill, token by token and uneven chunks agree bit for bit.
 * Float32 storage and accumulation; no storage roundings.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "kernels/kda.h"
#include "models/glm_common.h"

/* a checkpoint slot: every KDA layer's recurrent state at n tokens */
typedef struct {
    int n;             /* -1: empty */
    int has_logits;
    float *rec;        /* [n_kda][rec_n] */
    float *logits;     /* [vocab] */
} g5n_ckpt;

struct ds4_g5n_state {
    int n_kda;
    size_t rec_n;      /* floats of one KDA layer's state: tails [3][R-1][Di], then S [H][K][K] */
    float **rec;       /* [n_layer] -> KDA layers' state, else NULL */
    float **ckv;       /* [n_layer] -> [ctx][kv_lora] (MLA layers) */
    float **ik, **ig;  /* [n_layer] -> [ctx][idx_dim] (full layers): normed keys, pool gate logits */
    float **kp;        /* [n_layer] -> [ctx / kpool + 1][idx_dim] pooled keys of the complete pools */
    /* (the four arrays have n_layer + 1 entries: index n_layer is the
     * NextN block's rows when the model has one, else NULL) */
    float *cat;        /* NextN: [T][2 n_embd] its input [enorm(e); hnorm(h)] */
    float *nx, *hn;    /* NextN: [T][n_embd] the block's residual; the main normed rows */
    int64_t mtp_hi;    /* NextN rows [0, mtp_hi) are those of the tokens
                          s->toks.v[0 .. mtp_hi) (past toks.n after a rewind) */
    g5n_ckpt ck[DS4_SESSION_CKPTS];
    /* a staged pass: the recurrent state before it, and per KDA layer and
     * token the recurrence's inputs (projections q, k, v before the
     * convolution; k, v, g after; beta) to replay the kept tokens */
    float *stg_rec;    /* [n_kda][rec_n] */
    float *stg_in;     /* [n_kda][stg_cap][6 Di + H] */
    int stg_cap;
    /* the chunk's scratch, T = s->chunk rows */
    float *X, *X2, *flat, *mix, *pre, *post, *comb, *cur, *h, *y;
    float *pq, *pk, *pv, *fa, *gg, *bt, *ga, *gt, *o;
    float *ks;         /* [ks_nth][kda_scr_n] the KDA heads' per-thread scratch */
    int ks_nth;
    float *qr, *q, *iq, *iw, *qabs, *lat, *ao;
    glm_ffn_buf ffn;   /* the FFN's scratch (glm_common.c) */
    int *pools;        /* [top_k / kpool] one token's kept pools */
    int *sel, *nsel;   /* [T][selcap] the positions attended (ascending), [T] (-1: every visible one) */
    int selcap;
    float *sc;         /* [ctx] */
    float *logits;     /* [T][vocab] */
    float *dsel;       /* --dist pipeline: [T][1 + selcap] a selection crossing a rank boundary */
    void *qs;          /* quantized activations */
};


static size_t di_of(const ds4_config *c) { return (size_t)c->n_head * (size_t)c->kda_dim; }
static size_t rec_floats(const ds4_config *c) {
    return 3 * (size_t)(c->conv - 1) * di_of(c) + (size_t)c->n_head * c->kda_dim * c->kda_dim;
}
/* floats of one thread's KDA scratch: the transposed conv weights [R][K],
 * the new tail [R-1][K], a row [K], the recurrence's [2K] */
static size_t kda_scr_n(const ds4_config *c) {
    return (2 * (size_t)c->conv + 2) * (size_t)c->kda_dim + kda_recurrent_scratch(c->kda_dim);
}
static size_t stg_row(const ds4_config *c) { return 6 * di_of(c) + (size_t)c->n_head; }

static void g5n_state_free(ds4_session *s) {
    struct ds4_g5n_state *g = s->g5n;
    if (!g) return;
    const int L = s->m->w.cfg.n_layer;
    ds4_mtp_state_free(s);
    for (int il = 0; il <= L; il++) {
        if (g->rec) free(g->rec[il]);
        if (g->ckv) free(g->ckv[il]);
        if (g->ik) free(g->ik[il]);
        if (g->ig) free(g->ig[il]);
        if (g->kp) free(g->kp[il]);
    }
    free(g->rec); free(g->ckv); free(g->ik); free(g->ig); free(g->kp);
    for (int i = 0; i < DS4_SESSION_CKPTS; i++) { free(g->ck[i].rec); free(g->ck[i].logits); }
    free(g->stg_rec); free(g->stg_in);
    free(g->X); free(g->X2); free(g->flat); free(g->mix); free(g->pre); free(g->post); free(g->comb);
    free(g->cur); free(g->h); free(g->y);
    free(g->pq); free(g->pk); free(g->pv); free(g->fa); free(g->gg); free(g->bt); free(g->ga); free(g->gt);
    free(g->o); free(g->ks);
    free(g->qr); free(g->q); free(g->iq); free(g->iw); free(g->qabs); free(g->lat); free(g->ao);
    glm_ffn_free(&g->ffn);
    free(g->pools); free(g->sel); free(g->nsel); free(g->sc); free(g->logits); free(g->qs);
    free(g->cat); free(g->nx); free(g->hn);
    free(g->dsel);
    free(g);
    s->g5n = NULL;
}

static int g5n_state_new(ds4_session *s) {
    const ds4_config *c = &s->m->w.cfg;
    const size_t T = (size_t)s->chunk, ctx = (size_t)s->ctx, E = (size_t)c->n_embd, H = (size_t)c->n_head;
    const size_t N = (size_t)c->n_hc, ND = N * E, M = (2 + N) * N, Di = di_of(c), K = (size_t)c->kda_dim;
    const size_t ID = (size_t)c->idx_dim, IH = (size_t)c->idx_heads, R = (size_t)c->kv_lora;
    const size_t F = glm_mx((size_t)c->n_ff, (size_t)c->n_ff_exp * (size_t)c->n_expert_shared);
    const size_t npool = ctx / (size_t)c->kpool + 1;
    struct ds4_g5n_state *g = calloc(1, sizeof *g);
    if (!g) return DS4_ENOMEM;
    s->g5n = g;
    g->rec_n = rec_floats(c);
    const size_t L = (size_t)c->n_layer + 1;   /* + the NextN block's slot */
    g->rec = calloc(L, sizeof *g->rec); g->ckv = calloc(L, sizeof *g->ckv);
    g->ik = calloc(L, sizeof *g->ik); g->ig = calloc(L, sizeof *g->ig); g->kp = calloc(L, sizeof *g->kp);
    if (!g->rec || !g->ckv || !g->ik || !g->ig || !g->kp) return DS4_ENOMEM;
    for (int il = 0; il < c->n_layer; il++) {
        const ds4_layer_weights *lw = &s->m->w.layers[il];
        if (lw->kda) {
            g->n_kda++;
            if (!(g->rec[il] = glm_zalloc(g->rec_n * sizeof(float)))) return DS4_ENOMEM;
            continue;
        }
        if (!(g->ckv[il] = malloc(ctx * R * sizeof(float)))) return DS4_ENOMEM;
        if (lw->own_indexer &&
            (!(g->ik[il] = malloc(ctx * ID * sizeof(float))) || !(g->ig[il] = malloc(ctx * ID * sizeof(float))) ||
             !(g->kp[il] = malloc(npool * ID * sizeof(float)))))
            return DS4_ENOMEM;
    }
    const int nextn = s->m->w.has_mtp, NL = c->n_layer;
    /* the NextN block's rows are zero until made (a restore without them
     * leaves them so: drafts then start cold, never read garbage) */
    if (nextn && (!(g->ckv[NL] = glm_zalloc(ctx * R * sizeof(float))) ||
                  !(g->ik[NL] = glm_zalloc(ctx * ID * sizeof(float))) ||
                  !(g->ig[NL] = glm_zalloc(ctx * ID * sizeof(float))) ||
                  !(g->kp[NL] = glm_zalloc(npool * ID * sizeof(float)))))
        return DS4_ENOMEM;
    for (int i = 0; i < DS4_SESSION_CKPTS; i++) g->ck[i].n = -1;
    const int keep = c->idx_topk / c->kpool;
    g->selcap = keep * c->kpool + c->kpool;
    size_t widest = glm_mx(glm_mx(ND, E), glm_mx((size_t)c->q_lora, glm_mx(Di, K)));
    widest = glm_mx(widest, glm_mx(H * (size_t)c->vmla, glm_mx(F, (size_t)c->n_ff_exp)));
    widest = glm_mx(widest, glm_mx((size_t)c->kmla, R));
    if (nextn) widest = glm_mx(widest, 2 * E);
    const size_t qrow = glm_mx(act_row_bytes(ACT_Q8_0A, (int)widest), act_row_bytes(ACT_Q8_K, (int)widest));
#define A(p, n) if (!((p) = glm_zalloc((n) * sizeof *(p)))) return DS4_ENOMEM
    A(g->X, T * ND); A(g->X2, T * ND); A(g->flat, T * ND); A(g->mix, T * M); A(g->pre, T * N);
    A(g->post, T * N); A(g->comb, T * N * N); A(g->cur, T * E); A(g->h, T * E); A(g->y, T * E);
    A(g->pq, T * Di); A(g->pk, T * Di); A(g->pv, T * Di); A(g->fa, T * K); A(g->gg, T * Di);
    A(g->bt, T * H); A(g->ga, T * K); A(g->gt, T * Di); A(g->o, T * Di);
    g->ks_nth = ds4_pool_size(s->m->pool);
    A(g->ks, (size_t)g->ks_nth * kda_scr_n(c));
    A(g->qr, T * (size_t)c->q_lora); A(g->q, T * H * (size_t)c->kmla); A(g->iq, T * IH * ID); A(g->iw, T * IH);
    A(g->qabs, T * H * R); A(g->lat, T * H * R); A(g->ao, T * H * (size_t)c->vmla);
    A(g->pools, (size_t)keep); A(g->sel, T * (size_t)g->selcap); A(g->nsel, T); A(g->sc, ctx);
    A(g->logits, T * (size_t)c->n_vocab);
    if (dist_on()) A(g->dsel, T * ((size_t)g->selcap + 1));
#undef A
    if (!(g->qs = malloc(T * qrow))) return DS4_ENOMEM;
    if (glm_ffn_new(&g->ffn, c, (int)T, s->m->xc != NULL)) return DS4_ENOMEM;
    if (nextn) {
        if (!(g->cat = glm_zalloc(T * 2 * E * sizeof(float))) || !(g->nx = glm_zalloc(T * E * sizeof(float))) ||
            !(g->hn = glm_zalloc(T * E * sizeof(float))))
            return DS4_ENOMEM;
        /* the NextN block's drafts (mtp.c; its rows are this file's) */
        if (ds4_mtp_state_new(s) != DS4_OK) return DS4_ENOMEM;
    }
    return DS4_OK;
}

/* A fresh state: the recurrent state zero, no checkpoint (the cached rows
 * are overwritten before they are read). */
static void g5n_reset(ds4_session *s) {
    struct ds4_g5n_state *g = s->g5n;
    if (!g) return;
    for (int il = 0; il < s->m->w.cfg.n_layer; il++)
        if (g->rec[il]) memset(g->rec[il], 0, g->rec_n * sizeof(float));
    for (int i = 0; i < DS4_SESSION_CKPTS; i++) g->ck[i].n = -1;
    /* the NextN block's rows no longer belong to the session's tokens */
    g->mtp_hi = 0;
    ds4_mtp_state_reset(s);
}

/* bytes per token of the NextN block's rows (latent, key, gate, a pooled
 * key per kpool tokens) */
static uint64_t nextn_row_bytes(const ds4_weights *w) {
    const ds4_config *c = &w->cfg;
    if (!w->has_mtp) return 0;
    return 4 * ((uint64_t)c->kv_lora + 2 * (uint64_t)c->idx_dim + (uint64_t)c->idx_dim / (uint64_t)c->kpool);
}

static uint64_t row_bytes_of(const ds4_weights *w, int il) {
    const ds4_config *c = &w->cfg;
    const ds4_layer_weights *lw = &w->layers[il];
    if (lw->kda) return 0;
    uint64_t b = (uint64_t)c->kv_lora;
    if (lw->own_indexer) b += 2 * (uint64_t)c->idx_dim + (uint64_t)c->idx_dim / (uint64_t)c->kpool;
    return b * 4;
}

static uint64_t g5n_kv_bytes(const ds4_session *s) {
    const ds4_weights *w = &s->m->w;
    uint64_t b = 0;
    for (int il = 0; il < w->cfg.n_layer; il++)
        b += w->layers[il].kda ? rec_floats(&w->cfg) * 4 : (uint64_t)s->toks.n * row_bytes_of(w, il);
    return b + (uint64_t)s->toks.n * nextn_row_bytes(w);
}

static uint64_t g5n_plan_bytes(const ds4_weights *w, int ctx) {
    uint64_t b = 0;
    for (int il = 0; il < w->cfg.n_layer; il++)
        b += w->layers[il].kda ? rec_floats(&w->cfg) * 4 : (uint64_t)ctx * row_bytes_of(w, il);
    return b + (uint64_t)ctx * nextn_row_bytes(w);
}

/* a default session of ctx tokens: the cached rows and the recurrent
 * state; the chunk's scratch (the head's rows lead), which also holds the
 * HC streams (three copies) and the KDA projections */
static void g5n_plan(const ds4_weights *w, int ctx, int nth, uint64_t *kv, uint64_t *scratch) {
    const ds4_config *c = &w->cfg;
    int ch = ctx < 2048 ? ctx : 2048;
    *kv = g5n_plan_bytes(w, ctx);
    *scratch = (uint64_t)ch * ((uint64_t)c->n_vocab + 16u * (uint64_t)c->n_embd) * sizeof(float) +
               (uint64_t)ctx * 16;
    *scratch += (uint64_t)ch * (3u * (uint64_t)c->n_hc * c->n_embd + 10u * (uint64_t)c->n_head * c->kda_dim) *
                sizeof(float);
    if (w->has_mtp) {
        /* the drafts' state (kept main states, the chain's, its logits and
         * q); the block's input, residual and main rows per chunk row (its
         * cached rows are in g5n_plan_bytes) */
        *kv += (uint64_t)(DS4_DRAFT_PASS_MAX + 3) * c->n_embd * sizeof(float) +
               (uint64_t)DS4_DRAFT_PASS_MAX * c->n_vocab * sizeof(float);
        *scratch += (uint64_t)ch * 4u * (uint64_t)c->n_embd * sizeof(float);
    }
    (void)nth;
}

typedef struct {
    ds4_session *s;
    const ds4_config *c;
    const ds4_weights *w;
    struct ds4_g5n_state *g;
    cpu_ctx cc;
} g5n_fwd;

/* Y[t] = W x[t] for T rows (strides in floats). */
static void mm(g5n_fwd *f, mat_t W, const float *x, size_t xs, int T, float *y, size_t ys) {
    glm_mm(&f->cc, f->s->no_qat, f->g->qs, W, x, xs, T, y, ys);
}




/* The top-k selections (indexer pools, router) are glm_common.c's
 * ds4_glm_top_k: the tie rule of docs/family.md (higher score first, among
 * equal scores the lower index) is a total order, so the k best are one
 * set, returned ascending by index. */

/* ------------------------------------------------------------------------ */
/* Hyper-connections (V4's: FAMILY.md §2.2)                                  */
/* ------------------------------------------------------------------------ */

/* X -> cur (the sublayer input), post, comb */
static void hc_pre(g5n_fwd *f, const ds4_tensor *fn, const ds4_tensor *scale, const ds4_tensor *base, int T) {
    const ds4_config *c = f->c;
    struct ds4_g5n_state *g = f->g;
    const int N = c->n_hc, E = c->n_embd, ND = N * E, M = (2 + N) * N;
    for (int t = 0; t < T; t++) rms_norm(g->X + (size_t)t * ND, NULL, ND, c->rms_eps, g->flat + (size_t)t * ND);
    mm(f, mat_of(fn), g->flat, (size_t)ND, T, g->mix, (size_t)M);
    for (int t = 0; t < T; t++) {
        float *pre = g->pre + (size_t)t * N;
        ds4_hc_weights(g->mix + (size_t)t * M, scale, base, N, c->hc_iters, c->hc_eps, pre, g->post + (size_t)t * N,
                       g->comb + (size_t)t * N * N);
        const float *X = g->X + (size_t)t * ND;
        float *x = g->cur + (size_t)t * E;
        for (int k = 0; k < E; k++) {
            float acc = 0.0f;
            for (int s = 0; s < N; s++) acc += pre[s] * X[(size_t)s * E + k];
            x[k] = acc;
        }
    }
}

/* X <- post (x) y + comb^T X */
static void hc_post(g5n_fwd *f, int T) {
    const ds4_config *c = f->c;
    struct ds4_g5n_state *g = f->g;
    const int N = c->n_hc, E = c->n_embd, ND = N * E;
    for (int t = 0; t < T; t++) {
        const float *X = g->X + (size_t)t * ND, *y = g->y + (size_t)t * E, *post = g->post + (size_t)t * N;
        const float *C = g->comb + (size_t)t * N * N;
        float *Xn = g->X2 + (size_t)t * ND;
        for (int b = 0; b < N; b++)
            for (int k = 0; k < E; k++) {
                float acc = post[b] * y[k];
                for (int a = 0; a < N; a++) acc += C[a * N + b] * X[(size_t)a * E + k];
                Xn[(size_t)b * E + k] = acc;
            }
    }
    float *t = g->X; g->X = g->X2; g->X2 = t;
}

/* ------------------------------------------------------------------------ */
/* KDA                                                                       */
/* ------------------------------------------------------------------------ */

/* The convolution tail [R-1][n] (oldest first) after input row x. */
static void conv_push(float *tail, const float *x, int R, int n) {
    if (R < 2) return;
    memmove(tail, tail + n, (size_t)(R - 2) * n * sizeof(float));
    memcpy(tail + (size_t)(R - 2) * n, x, (size_t)n * sizeof(float));
}

typedef struct {
    g5n_fwd *f;
    const ds4_layer_weights *lw;
    float *rec;
    int T;
} kda_job;

/* One head of a KDA layer over T tokens from t0 (the state carries on from
 * the block before): everything after the
 * projections is per head (the convolutions are depthwise, the L2 and
 * RMS norms per head, the gates per channel), so the heads split over
 * threads with no effect on any number.  Per element the same operations
 * in the same order as token by token: the convolution sums its taps
 * oldest first from +0 and adds the current tap last; SiLU, the sigmoids
 * and the L2 norm are the same expressions on vk's exp (the same bits as
 * vec_expf) and vk's row sums of squares (one chain per row in element
 * order, like l2's loop); rms_norm_rows is rms_norm's arithmetic. */
static void kda_head(kda_job *j, int h, int t0, int T, float *scr) {
    g5n_fwd *f = j->f;
    const ds4_config *c = f->c;
    struct ds4_g5n_state *g = f->g;
    const ds4_layer_weights *lw = j->lw;
    const vec_kernels *vk = f->s->m->vk;
    const int H = c->n_head, K = c->kda_dim, R = c->conv, Di = H * K;
    const size_t hK = (size_t)h * K, r0 = (size_t)t0 * Di;
    float *wT = scr, *nt = wT + (size_t)R * K, *acc = nt + (size_t)(R > 1 ? R - 1 : 0) * K;
    float *ex = acc + K, *rs = ex + K;
    float *P[3] = {g->pq + r0 + hK, g->pk + r0 + hK, g->pv + r0 + hK};
    const float *cw[3] = {(const float *)lw->conv_q.data, (const float *)lw->conv_k.data,
                          (const float *)lw->conv_v.data};
    /* the convolutions, in place from the last token down (token t reads
     * the raw rows t-R+1..t, not yet overwritten), SiLU */
    for (int i = 0; i < 3; i++) {
        float *tail = j->rec + (size_t)i * (R - 1) * Di + hK, *p = P[i];
        const float *w = cw[i] + hK * R;
        for (int jj = 0; jj < R; jj++)
            for (int ch = 0; ch < K; ch++) wT[(size_t)jj * K + ch] = w[(size_t)ch * R + jj];
        /* the rows of [tail; projections] at T .. T+R-2: the new tail */
        for (int m = 0; m < R - 1; m++) {
            const int r = T + m;
            const float *src = r >= R - 1 ? p + (size_t)(r - (R - 1)) * Di : tail + (size_t)r * Di;
            memcpy(nt + (size_t)m * K, src, (size_t)K * sizeof(float));
        }
        for (int t = T - 1; t >= 0; t--) {
            for (int ch = 0; ch < K; ch++) acc[ch] = 0.0f;
            for (int jj = 0; jj < R - 1; jj++) {
                const int r = t + jj;
                const float *row = r >= R - 1 ? p + (size_t)(r - (R - 1)) * Di : tail + (size_t)r * Di;
                const float *wj = wT + (size_t)jj * K;
                for (int ch = 0; ch < K; ch++) acc[ch] += row[ch] * wj[ch];
            }
            float *xt = p + (size_t)t * Di;
            const float *wl = wT + (size_t)(R - 1) * K;
            for (int ch = 0; ch < K; ch++) {
                acc[ch] = acc[ch] + xt[ch] * wl[ch];
                ex[ch] = -acc[ch];
            }
            vk->exp(ex, ex, K);
            for (int ch = 0; ch < K; ch++) xt[ch] = acc[ch] / (1.0f + ex[ch]);
        }
        for (int m = 0; m < R - 1; m++) memcpy(tail + (size_t)m * Di, nt + (size_t)m * K, (size_t)K * sizeof(float));
    }
    /* q, k L2-normed (q times 1/sqrt(K)): x / sqrt(sum x^2 + eps) * scale */
    const float qscale = 1.0f / sqrtf((float)K);
    for (int i = 0; i < 2; i++) {
        const float scale = i ? 1.0f : qscale;
        for (int tb = 0; tb < T; tb += 16) {
            const int nb = T - tb < 16 ? T - tb : 16;
            double ss[16];
            vk->sumsq_rows(P[i] + (size_t)tb * Di, (size_t)Di, nb, K, ss);
            for (int r = 0; r < nb; r++) {
                float *xh = P[i] + (size_t)(tb + r) * Di;
                const float rr = 1.0f / sqrtf((float)ss[r] + 1e-6f);
                for (int ch = 0; ch < K; ch++) xh[ch] = xh[ch] * rr * scale;
            }
        }
    }
    /* the gate g = lb sigmoid(exp(A_log) (f_b f_a h + dt_bias)), beta */
    const float *dt = (const float *)lw->ssm_dt_b.data + hK;
    const float a = -((const float *)lw->ssm_a.data)[h];   /* ssm_a holds -exp(A_log) */
    for (int t = 0; t < T; t++) {
        float *gv = g->gg + r0 + (size_t)t * Di + hK;
        for (int ch = 0; ch < K; ch++) ex[ch] = -(a * (gv[ch] + dt[ch]));
        vk->exp(ex, ex, K);
        for (int ch = 0; ch < K; ch++) gv[ch] = c->kda_lb * (1.0f / (1.0f + ex[ch]));
        float *bt = g->bt + (size_t)(t0 + t) * H + h;
        *bt = glm_sigmoid(*bt);
    }
    /* the recurrence, then the per-head RMSNorm times sigmoid(g_b g_a h) */
    const kda_seq x = { .q = P[0], .k = P[1], .v = P[2], .g = g->gg + r0 + hK, .beta = g->bt + (size_t)t0 * H + h,
                        .rs = (size_t)Di, .bs = (size_t)H };
    float *o = g->o + r0 + hK;
    kda_recurrent(j->rec + 3 * (size_t)(R - 1) * Di + hK * K, K, &x, T, o, (size_t)Di, rs, vk);
    rms_norm_rows(vk, o, (size_t)Di, (const float *)lw->ssm_norm.data, T, K, c->rms_eps, o, (size_t)Di, 0);
    const float *gt = g->gt + r0 + hK;
    for (int t = 0; t < T; t++) {
        float *oh = o + (size_t)t * Di;
        const float *gh = gt + (size_t)t * Di;
        for (int ch = 0; ch < K; ch++) ex[ch] = -gh[ch];
        vk->exp(ex, ex, K);
        for (int ch = 0; ch < K; ch++) oh[ch] *= 1.0f / (1.0f + ex[ch]);
    }
}

/* Tokens per block: a block's rows of every head's inputs stay in cache
 * while the heads go through it (a head's inputs are 512 B per token row
 * of 32 KB: head by head over a whole 2048-token chunk they come from
 * memory); S_h (64 KB) is reloaded once a block.  Bench (bench_kda, T
 * 2048): 478 -> 344 ms CPU.  The blocks go in token order, so any block
 * size gives the same bits. */
#define KDA_TB 64

static void kda_task(void *ctx, int ith, int nth) {
    kda_job *j = ctx;
    struct ds4_g5n_state *g = j->f->g;
    long h0, h1;
    ds4_split(j->f->c->n_head, ith, nth, &h0, &h1);
    float *scr = g->ks + (size_t)ith * kda_scr_n(j->f->c);
    for (int t0 = 0; t0 < j->T; t0 += KDA_TB)
        for (long h = h0; h < h1; h++) kda_head(j, (int)h, t0, j->T - t0 < KDA_TB ? j->T - t0 : KDA_TB, scr);
}

static int kda_index(const ds4_weights *w, int il) {
    int n = 0;
    for (int i = 0; i < il; i++) n += w->layers[i].kda;
    return n;
}

static void kda_layer(g5n_fwd *f, const ds4_layer_weights *lw, int il, int T) {
    const ds4_config *c = f->c;
    struct ds4_g5n_state *g = f->g;
    const int E = c->n_embd, H = c->n_head, K = c->kda_dim, Di = H * K;
    mm(f, mat_of(&lw->kda_q), g->h, (size_t)E, T, g->pq, (size_t)Di);
    mm(f, mat_of(&lw->kda_k), g->h, (size_t)E, T, g->pk, (size_t)Di);
    mm(f, mat_of(&lw->kda_v), g->h, (size_t)E, T, g->pv, (size_t)Di);
    mm(f, mat_of(&lw->ssm_f_a), g->h, (size_t)E, T, g->fa, (size_t)K);
    mm(f, mat_of(&lw->ssm_f_b), g->fa, (size_t)K, T, g->gg, (size_t)Di);
    mm(f, mat_of(&lw->ssm_beta), g->h, (size_t)E, T, g->bt, (size_t)H);
    mm(f, mat_of(&lw->ssm_g_a), g->h, (size_t)E, T, g->ga, (size_t)K);
    mm(f, mat_of(&lw->ssm_g_b), g->ga, (size_t)K, T, g->gt, (size_t)Di);
    const size_t row = stg_row(c);
    float *stg = f->s->stg_on ? g->stg_in + (size_t)kda_index(f->w, il) * g->stg_cap * row : NULL;
    if (stg)   /* the projections before the convolutions */
        for (int t = 0; t < T; t++)
            for (int i = 0; i < 3; i++)
                memcpy(stg + (size_t)t * row + (size_t)i * Di, (i == 0 ? g->pq : i == 1 ? g->pk : g->pv) + (size_t)t * Di,
                       (size_t)Di * sizeof(float));
    kda_job j = { .f = f, .lw = lw, .rec = g->rec[il], .T = T };
    if (ds4_pool_size(f->s->m->pool) <= g->ks_nth) ds4_pool_run(f->s->m->pool, kda_task, &j);
    else kda_task(&j, 0, 1);
    if (stg)   /* k, v, g after them, beta: the recurrence's inputs */
        for (int t = 0; t < T; t++) {
            float *r = stg + (size_t)t * row + 3 * (size_t)Di;
            memcpy(r, g->pk + (size_t)t * Di, (size_t)Di * sizeof(float));
            memcpy(r + Di, g->pv + (size_t)t * Di, (size_t)Di * sizeof(float));
            memcpy(r + 2 * (size_t)Di, g->gg + (size_t)t * Di, (size_t)Di * sizeof(float));
            memcpy(r + 3 * (size_t)Di, g->bt + (size_t)t * H, (size_t)H * sizeof(float));
        }
    mm(f, mat_of(&lw->attn_output), g->o, (size_t)Di, T, g->y, (size_t)E);
}

/* ------------------------------------------------------------------------ */
/* MLA with the k-pool DSA indexer (NoPE)                                    */
/* ------------------------------------------------------------------------ */

/* Pool p's key: per channel a softmax over its kpool positions of the gate
 * logits plus the position bias, weighting the positions' normed keys. */
static void pool_key(const ds4_config *c, const ds4_layer_weights *lw, const float *ik, const float *ig, long p,
                     float *out) {
    const int r = c->kpool, ID = c->idx_dim;
    const float *ape = (const float *)lw->idx_comp_ape.data;   /* [r][ID] */
    float e[64];
    for (int d = 0; d < ID; d++) {
        float m = -INFINITY, sum = 0.0f;
        for (int j = 0; j < r; j++) {
            e[j] = ig[(size_t)(p * r + j) * ID + d] + ape[(size_t)j * ID + d];
            if (e[j] > m) m = e[j];
        }
        for (int j = 0; j < r; j++) { e[j] = vec_expf(e[j] - m); sum += e[j]; }
        float acc = 0.0f;
        for (int j = 0; j < r; j++) acc += e[j] / sum * ik[(size_t)(p * r + j) * ID + d];
        out[d] = acc;
    }
}

/* A full layer's indexer rows: the chunk's keys (normed) and gate logits
 * into the layer's rows (inputs g->h), and the pools they complete. */
static void idx_rows(g5n_fwd *f, const ds4_layer_weights *lw, int il, int64_t p0, int T) {
    const ds4_config *c = f->c;
    struct ds4_g5n_state *g = f->g;
    const int ID = c->idx_dim, r = c->kpool, E = c->n_embd;
    float *ik = g->ik[il], *ig = g->ig[il], *kp = g->kp[il];
    mm(f, mat_of(&lw->idx_k), g->h, (size_t)E, T, ik + (size_t)p0 * ID, (size_t)ID);
    mm(f, mat_of(&lw->idx_comp_gate), g->h, (size_t)E, T, ig + (size_t)p0 * ID, (size_t)ID);
    const float *nw = (const float *)lw->idx_k_norm.data, *nb = (const float *)lw->idx_k_norm_b.data;
    for (int t = 0; t < T; t++) {
        float *k = ik + (size_t)(p0 + t) * ID;
        /* LayerNorm with weight and bias (attention.layer_norm_epsilon) */
        double mean = 0, var = 0;
        for (int i = 0; i < ID; i++) mean += k[i];
        mean /= ID;
        for (int i = 0; i < ID; i++) var += ((double)k[i] - mean) * ((double)k[i] - mean);
        const float m = (float)mean, rs = 1.0f / sqrtf((float)(var / ID) + c->ln_eps);
        for (int i = 0; i < ID; i++) k[i] = (k[i] - m) * rs * nw[i] + nb[i];
    }
    for (int t = 0; t < T; t++) {
        const int64_t pos = p0 + t;
        if ((pos + 1) % r == 0) pool_key(c, lw, ik, ig, (long)(pos / r), kp + (size_t)(pos / r) * ID);
    }
}

/* A full layer's selection over its rows (idx_rows made the chunk's): each
 * token's positions, kept in g->sel for the shared layers after it. */
static void indexer(g5n_fwd *f, const ds4_layer_weights *lw, int il, int64_t p0, int T) {
    const ds4_config *c = f->c;
    struct ds4_g5n_state *g = f->g;
    const int IH = c->idx_heads, ID = c->idx_dim, r = c->kpool, E = c->n_embd;
    const int keep = c->idx_topk / r;
    const float *kp = g->kp[il];
    mm(f, mat_of(&lw->idx_q_b), g->qr, (size_t)c->q_lora, T, g->iq, (size_t)IH * ID);
    mm(f, mat_of(&lw->idx_proj), g->h, (size_t)E, T, g->iw, (size_t)IH);
    const float wsc = 1.0f / sqrtf((float)ID * (float)IH);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < IH; h++) g->iw[(size_t)t * IH + h] *= wsc;
    for (int t = 0; t < T; t++) {
        const int64_t pos = p0 + t;
        const int nvis = (int)((pos + 1) / r), nk = nvis < keep ? nvis : keep;
        if (nk == nvis) { g->nsel[t] = -1; continue; }
        const float *q = g->iq + (size_t)t * IH * ID, *wt = g->iw + (size_t)t * IH;
        for (int p = 0; p < nvis; p++) {
            const float *kk = kp + (size_t)p * ID;
            float acc = 0.0f;
            for (int h = 0; h < IH; h++) {
                const float *qh = q + (size_t)h * ID;
                float d = 0.0f;
                for (int i = 0; i < ID; i++) d += qh[i] * kk[i];
                if (d > 0.0f) acc += d * wt[h];
            }
            g->sc[p] = acc;
        }
        int *sel = g->sel + (size_t)t * g->selcap, *pools = g->pools;
        ds4_glm_top_k(g->sc, nvis, nk, pools);
        int n = 0;
        for (int a = 0; a < nk; a++)
            for (int j = 0; j < r; j++) sel[n++] = pools[a] * r + j;
        for (int64_t j = (int64_t)nvis * r; j <= pos; j++) sel[n++] = (int)j;
        g->nsel[t] = n;
    }
}

/* Absorbed MLA of one layer over the chunk (its rows already cached). */
static void attention(g5n_fwd *f, const ds4_layer_weights *lw, int il, int64_t p0, int T) {
    const ds4_config *c = f->c;
    struct ds4_g5n_state *g = f->g;
    const int H = c->n_head, KM = c->kmla, R = c->kv_lora;
    const float scale = 1.0f / sqrtf((float)KM);
    for (int h = 0; h < H; h++)
        mm(f, mat_expert(&lw->attn_k_b, h), g->q + (size_t)h * KM, (size_t)H * KM, T, g->qabs + (size_t)h * R,
           (size_t)H * R);
    const float *kv = g->ckv[il];
    for (int t = 0; t < T; t++) {
        const int n = (int)(p0 + t) + 1;
        const int ns = g->nsel[t] < 0 ? n : g->nsel[t];
        const int *sel = g->nsel[t] < 0 ? NULL : g->sel + (size_t)t * g->selcap;
        for (int h = 0; h < H; h++) {
            const float *qa = g->qabs + (size_t)t * H * R + (size_t)h * R;
            float mxs = -INFINITY;
            for (int a = 0; a < ns; a++) {
                const float *row = kv + (size_t)(sel ? sel[a] : a) * R;
                float d = 0.0f;
                for (int i = 0; i < R; i++) d += qa[i] * row[i];
                g->sc[a] = d * scale;
                if (g->sc[a] > mxs) mxs = g->sc[a];
            }
            float sum = 0.0f;
            for (int a = 0; a < ns; a++) { g->sc[a] = vec_expf(g->sc[a] - mxs); sum += g->sc[a]; }
            float *lat = g->lat + (size_t)t * H * R + (size_t)h * R;
            for (int i = 0; i < R; i++) lat[i] = 0.0f;
            for (int a = 0; a < ns; a++) {
                const float *row = kv + (size_t)(sel ? sel[a] : a) * R;
                const float p = g->sc[a] / sum;
                for (int i = 0; i < R; i++) lat[i] += p * row[i];
            }
        }
    }
    for (int h = 0; h < H; h++)
        mm(f, mat_expert(&lw->attn_v_b, h), g->lat + (size_t)h * R, (size_t)H * R, T, g->ao + (size_t)h * c->vmla,
           (size_t)H * c->vmla);
}

/* A DSA layer's cached rows of the chunk (inputs g->h): the normed latents
 * and, with its own indexer, the indexer's rows. */
static void dsa_rows(g5n_fwd *f, const ds4_layer_weights *lw, int il, int64_t p0, int T) {
    const ds4_config *c = f->c;
    const int E = c->n_embd, R = c->kv_lora;
    float *kv = f->g->ckv[il] + (size_t)p0 * R;
    mm(f, mat_of(&lw->attn_kv), f->g->h, (size_t)E, T, kv, (size_t)R);
    glm_norm_rows(kv, (size_t)R, &lw->attn_kv_a_norm, T, R, c->rms_eps, kv, (size_t)R);
    if (lw->own_indexer) idx_rows(f, lw, il, p0, T);
}

static void dsa_layer(g5n_fwd *f, const ds4_layer_weights *lw, int il, int64_t p0, int T) {
    const ds4_config *c = f->c;
    struct ds4_g5n_state *g = f->g;
    const int E = c->n_embd, H = c->n_head, QL = c->q_lora;
    mm(f, mat_of(&lw->attn_q_a), g->h, (size_t)E, T, g->qr, (size_t)QL);
    glm_norm_rows(g->qr, (size_t)QL, &lw->attn_q_a_norm, T, QL, c->rms_eps, g->qr, (size_t)QL);
    dsa_rows(f, lw, il, p0, T);
    if (lw->own_indexer) indexer(f, lw, il, p0, T);
    mm(f, mat_of(&lw->attn_q_b), g->qr, (size_t)QL, T, g->q, (size_t)H * c->kmla);
    attention(f, lw, il, p0, T);
    mm(f, mat_of(&lw->attn_output), g->ao, (size_t)H * c->vmla, T, g->y, (size_t)E);
}

static const float *g5n_logits(const ds4_session *s) { return s->g5n->logits; }

static int g5n_mtp_rows(g5n_fwd *f, const int32_t *toks, int64_t p0, int T);

static int g5n_eval_chunk(ds4_session *s, const int32_t *toks, int T) {
    ds4_model *m = s->m;
    g5n_fwd f = { .s = s, .c = &m->w.cfg, .w = &m->w, .g = s->g5n };
    f.cc.pool = m->pool;
    f.cc.k = m->kern;
    const ds4_config *c = f.c;
    struct ds4_g5n_state *g = f.g;
    const int D = c->n_embd, N = c->n_hc, ND = N * D;
    const int64_t p0 = (int64_t)s->toks.n;
    if (T < 1 || T > s->chunk || p0 + T > s->ctx) return DS4_EINVAL;
    if (s->stg_on && T > g->stg_cap) return DS4_EINVAL;
    /* --dist pipeline (src/mpi/, docs/distributed.md): this rank's layers
     * [lo, hi) only -- their KDA state and cached rows live here; the HC
     * streams come from the previous rank and go to the next (with the
     * selection when it crosses the boundary: glm_sel_crosses), the last
     * rank runs the head and rank 0 gets the logits.  The whole chunk goes
     * at once (no micro-batches).  Staged passes are refused: their
     * rollback (stage_commit's replay) would have to reach every rank. */
    int want_all = s->cap_logits || s->stg_on, lo = 0, hi = c->n_layer;
    if (dist_on()) {
        if (s->stg_on) return DS4_EUNSUP;
        int rc = dist_chunk_begin(s, toks, T, &want_all, &lo, &hi);
        if (rc) return rc;
    }
    const glm_ffn_ctx fx = { .cc = &f.cc, .no_qat = s->no_qat, .xc = m->xc, .c = c, .b = &g->ffn };
    if (lo == 0) {
        for (int t = 0; t < T; t++) {
            float *x = g->X + (size_t)t * ND;
            if (ds4_dequantize_row(f.w->token_embd.type,
                                   f.w->token_embd.data + (size_t)toks[t] * f.w->token_embd.row_bytes, x, D))
                return DS4_EFORMAT;
            for (int b = 1; b < N; b++) memcpy(x + (size_t)b * D, x, (size_t)D * sizeof(float));
        }
    } else {
        int rc = dist_recv_floats(g->X, T * ND);
        if (!rc && glm_sel_crosses(f.w, lo)) rc = glm_sel_recv(g->sel, g->nsel, T, g->selcap, g->dsel);
        if (rc) return rc;
    }
    for (int il = lo; il < hi; il++) {
        const ds4_layer_weights *lw = &f.w->layers[il];
        hc_pre(&f, &lw->hc_attn_fn, &lw->hc_attn_scale, &lw->hc_attn_base, T);
        glm_norm_rows(g->cur, (size_t)D, &lw->attn_norm, T, D, c->rms_eps, g->h, (size_t)D);
        if (lw->kda) kda_layer(&f, lw, il, T);
        else dsa_layer(&f, lw, il, p0, T);
        hc_post(&f, T);
        hc_pre(&f, &lw->hc_ffn_fn, &lw->hc_ffn_scale, &lw->hc_ffn_base, T);
        glm_norm_rows(g->cur, (size_t)D, &lw->ffn_norm, T, D, c->rms_eps, g->h, (size_t)D);
        /* the dense or MoE FFN (glm_common.c) with the layer's SwiGLU clamps */
        int rc = glm_ffn(&fx, lw, il, g->h, T, lw->swiglu_clamp, lw->swiglu_clamp_sh, g->y);
        if (rc) return rc;
        hc_post(&f, T);
    }
    if (hi < c->n_layer) {
        int rc = dist_send_floats(g->X, T * ND);
        if (!rc && glm_sel_crosses(f.w, hi)) rc = glm_sel_send(g->sel, g->nsel, T, g->selcap, g->dsel);
        if (!rc) rc = dist_send_done(s);
        if (rc) return rc;
    }
    /* the head: the streams' mean (no HC head), every row when the caller
     * captures them or a staged pass needs them (under --dist: rank 0
     * asked for them), else the last; the normed rows of every position
     * when the NextN block follows (its input; never under --dist) */
    const int r0 = want_all ? 0 : T - 1, nl = T - r0, rn = s->mtp ? 0 : r0, nn = T - rn;
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
    for (int t = 0; t < nn; t++) {
        const float *X = g->X + (size_t)(rn + t) * ND;
        float *x = g->cur + (size_t)t * D;
        for (int k = 0; k < D; k++) {
            float acc = 0.0f;
            for (int b = 0; b < N; b++) acc += X[(size_t)b * D + k];
            x[k] = acc / (float)N;
        }
    }
    glm_norm_rows(g->cur, (size_t)D, &f.w->output_norm, nn, D, c->rms_eps, g->h, (size_t)D);
    const ds4_tensor *out = f.w->output.data ? &f.w->output : &f.w->token_embd;
    mm(&f, mat_of(out), g->h + (size_t)(r0 - rn) * D, (size_t)D, nl, g->logits, (size_t)c->n_vocab);
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
        int rc = g5n_mtp_rows(&f, toks, p0, T);
        if (rc) return rc;
    }
    return ds4_model_check(m);
}

/* ------------------------------------------------------------------------ */
/* The NextN (MTP) block (docs/family.md, "MTP"; glm_ref.py Glm5Next.mtp):  */
/* x = eh_proj [enorm(embed(tok)); hnorm(h)] with h the main model's state  */
/* after the output norm; a plain-residual DSA layer (no hyper-connections) */
/* with its own k-pool indexer over the block's rows, a MoE FFN; then      */
/* shared_head_norm (fallback output_norm) and the head.                    */
/* ------------------------------------------------------------------------ */

/* The block's input rows into g->nx (glm_common.c's glm_mtp_input). */
static int mtp_input(g5n_fwd *f, const int32_t *toks, const float *h0, const float *hrows, int T) {
    return glm_mtp_input(&f->cc, f->s->no_qat, f->g->qs, f->w, toks, h0, hrows, T, f->g->y, f->g->cat, f->g->nx);
}

/* After the main pass of toks[0..T) at p0 (normed rows in g->h): the
 * block's cached rows of those positions, row p from the token at p and
 * the main state after p - 1 (a row depends on its own input alone, so
 * only the latent and the indexer's rows are made).  Rows still held for
 * the same tokens (after a rewind or a rolled-back staged pass: the prefix
 * is the same, so they are) are kept; the main states go to the MTP
 * state's ring (mtp_state.c) for the next chunk and the drafts. */
static int g5n_mtp_rows(g5n_fwd *f, const int32_t *toks, int64_t p0, int T) {
    ds4_session *s = f->s;
    struct ds4_g5n_state *g = f->g;
    const ds4_config *c = f->c;
    const int D = c->n_embd, L = c->n_layer;
    memcpy(g->hn, g->h, (size_t)T * D * sizeof(float));
    int k = 0;
    while (k < T && p0 + k < g->mtp_hi && s->toks.v[p0 + k] == toks[k]) k++;
    const int64_t hi = g->mtp_hi;
    if (g->mtp_hi > p0 + k) g->mtp_hi = p0 + k;
    if (k < T) {
        const float *h0 = k ? g->hn + (size_t)(k - 1) * D : ds4_mtp_main_state(s, p0 - 1);
        int rc = mtp_input(f, toks + k, h0, g->hn + (size_t)k * D, T - k);
        if (rc) return rc;
        glm_norm_rows(g->nx, (size_t)D, &f->w->mtp.block.attn_norm, T - k, D, c->rms_eps, g->h, (size_t)D);
        dsa_rows(f, &f->w->mtp.block, L, p0 + k, T - k);
        g->mtp_hi = p0 + T;
    } else if (hi > p0 + T) {
        g->mtp_hi = hi;
    }
    ds4_mtp_note_hidden(s, g->hn, p0, T);
    return DS4_OK;
}

int ds4_g5n_mtp_step(ds4_session *s, int32_t tok, const float *hprev, int64_t p) {
    ds4_model *m = s->m;
    g5n_fwd f = { .s = s, .c = &m->w.cfg, .w = &m->w, .g = s->g5n };
    f.cc.pool = m->pool;
    f.cc.k = m->kern;
    const ds4_config *c = f.c;
    const ds4_mtp_weights *mw = &f.w->mtp;
    const ds4_layer_weights *lw = &mw->block;
    struct ds4_g5n_state *g = f.g;
    mtp_state *ms = s->mtp;
    const int D = c->n_embd;
    if (!ms || !g || !f.w->has_mtp || p < 0 || p >= s->ctx || tok < 0 || tok >= c->n_vocab) return DS4_EINVAL;
    int rc = ds4_model_check(m);
    if (rc) return rc;
    /* the draft's row p replaces whatever the block held there */
    if (g->mtp_hi > p) g->mtp_hi = p;
    rc = mtp_input(&f, &tok, hprev, NULL, 1);
    if (rc) return rc;
    glm_norm_rows(g->nx, (size_t)D, &lw->attn_norm, 1, D, c->rms_eps, g->h, (size_t)D);
    dsa_layer(&f, lw, c->n_layer, p, 1);
    for (int i = 0; i < D; i++) g->nx[i] += g->y[i];
    glm_norm_rows(g->nx, (size_t)D, &lw->ffn_norm, 1, D, c->rms_eps, g->h, (size_t)D);
    const glm_ffn_ctx fx = { .cc = &f.cc, .no_qat = s->no_qat, .xc = m->xc, .c = c, .b = &g->ffn };
    rc = glm_ffn(&fx, lw, c->n_layer, g->h, 1, lw->swiglu_clamp, lw->swiglu_clamp_sh, g->y);
    if (rc) return rc;
    for (int i = 0; i < D; i++) g->nx[i] += g->y[i];
    const ds4_tensor *nw = mw->norm.data ? &mw->norm : &f.w->output_norm;
    rms_norm(g->nx, (const float *)nw->data, D, c->rms_eps, ms->hc);
    const ds4_tensor *head = mw->head.data ? &mw->head : f.w->output.data ? &f.w->output : &f.w->token_embd;
    mm(&f, mat_of(head), ms->hc, (size_t)D, 1, ms->logits, (size_t)c->n_vocab);
    ms->steps++;
    return ds4_model_check(m);
}

/* ------------------------------------------------------------------------ */
/* The recurrent state in the session: checkpoints, rewind, staged passes   */
/*                                                                           */
/* The cached rows of an MLA layer (and a full layer's keys, gates and      */
/* pooled keys) of a position never change, so for them a rewind is the    */
/* token count; a KDA layer's state (convolution tails and S) is a function */
/* of every token before, so a rewind needs it as it was at that count: a   */
/* checkpoint slot holds every KDA layer's state, and a staged pass saves   */
/* the state before it plus each token's recurrence inputs, restored and    */
/* replayed through kda_recurrent / conv_push (the forward's own ones) for */
/* the kept tokens at the commit: bit-identical to never having seen the    */
/* rejected ones.                                                            */
/* ------------------------------------------------------------------------ */

static void rec_save(const ds4_session *s, float *dst) {
    const struct ds4_g5n_state *g = s->g5n;
    for (int il = 0; il < s->m->w.cfg.n_layer; il++)
        if (g->rec[il]) { memcpy(dst, g->rec[il], g->rec_n * sizeof(float)); dst += g->rec_n; }
}

static void rec_load(ds4_session *s, const float *src) {
    struct ds4_g5n_state *g = s->g5n;
    for (int il = 0; il < s->m->w.cfg.n_layer; il++)
        if (g->rec[il]) { memcpy(g->rec[il], src, g->rec_n * sizeof(float)); src += g->rec_n; }
}

static uint64_t g5n_checkpoint_bytes(const ds4_session *s) {
    const struct ds4_g5n_state *g = s->g5n;
    return ((uint64_t)g->n_kda * g->rec_n + (uint64_t)s->m->w.cfg.n_vocab) * sizeof(float);
}

static int g5n_checkpoint(ds4_session *s, int slot) {
    struct ds4_g5n_state *g = s->g5n;
    g5n_ckpt *k = &g->ck[slot];
    if (!k->logits) {
        k->rec = glm_zalloc((size_t)g->n_kda * g->rec_n * sizeof(float));
        k->logits = malloc((size_t)s->m->w.cfg.n_vocab * sizeof(float));
        if (!k->rec || !k->logits) {
            free(k->rec); free(k->logits);
            k->rec = k->logits = NULL;
            k->n = -1;
            return DS4_ENOMEM;
        }
    }
    rec_save(s, k->rec);
    k->has_logits = s->has_logits;
    if (s->has_logits) memcpy(k->logits, s->logits, (size_t)s->m->w.cfg.n_vocab * sizeof(float));
    k->n = (int)s->toks.n;
    dist_session_checkpoint(s, slot);   /* --dist: every rank keeps its layers' state */
    return DS4_OK;
}

static int g5n_checkpoint_tokens(const ds4_session *s, int slot) {
    const g5n_ckpt *k = &s->g5n->ck[slot];
    return k->logits ? k->n : -1;
}

static int g5n_rewind_point(const ds4_session *s, int n) {
    int best = 0;
    for (int i = 0; i < DS4_SESSION_CKPTS; i++) {
        const g5n_ckpt *k = &s->g5n->ck[i];
        if (k->logits && k->n > best && k->n <= n && k->n <= (int)s->toks.n && (k->n < n || k->has_logits))
            best = k->n;
    }
    return best;
}

static int g5n_rewind(ds4_session *s, int n) {
    struct ds4_g5n_state *g = s->g5n;
    const g5n_ckpt *k = NULL;
    for (int i = 0; i < DS4_SESSION_CKPTS; i++)
        if (g->ck[i].logits && g->ck[i].n == n && n > 0 && n <= (int)s->toks.n) k = &g->ck[i];
    if (!k) return DS4_EINVAL;
    rec_load(s, k->rec);
    s->has_logits = k->has_logits;
    if (k->has_logits) memcpy(s->logits, k->logits, (size_t)s->m->w.cfg.n_vocab * sizeof(float));
    s->toks.n = (size_t)n;
    s->stg_n = 0;
    /* checkpoints above this point describe tokens that are gone */
    for (int i = 0; i < DS4_SESSION_CKPTS; i++)
        if (g->ck[i].n > n) g->ck[i].n = -1;
    dist_session_rewind(s, n);   /* --dist: every rank to the same slot */
    return DS4_OK;
}

static int g5n_stage_begin(ds4_session *s, int n) {
    struct ds4_g5n_state *g = s->g5n;
    const ds4_config *c = &s->m->w.cfg;
    const int cap = DS4_DRAFT_PASS_MAX < s->chunk ? DS4_DRAFT_PASS_MAX : s->chunk;
    if (n > cap) return DS4_EINVAL;
    if (!g->stg_rec) {
        g->stg_rec = glm_zalloc((size_t)g->n_kda * g->rec_n * sizeof(float));
        g->stg_in = glm_zalloc((size_t)g->n_kda * cap * stg_row(c) * sizeof(float));
        if (!g->stg_rec || !g->stg_in) {
            free(g->stg_rec); free(g->stg_in);
            g->stg_rec = g->stg_in = NULL;
            return DS4_ENOMEM;
        }
        g->stg_cap = cap;
    }
    rec_save(s, g->stg_rec);
    return DS4_OK;
}

static void g5n_stage_commit(ds4_session *s, int n_keep) {
    struct ds4_g5n_state *g = s->g5n;
    const ds4_config *c = &s->m->w.cfg;
    const int H = c->n_head, K = c->kda_dim, R = c->conv, Di = H * K;
    /* a checkpoint taken inside the pass holds rejected tokens */
    for (int i = 0; i < DS4_SESSION_CKPTS; i++)
        if (g->ck[i].n > (int)s->stg_p0 + n_keep) g->ck[i].n = -1;
    rec_load(s, g->stg_rec);
    int ik = 0;
    for (int il = 0; il < c->n_layer; il++) {
        if (!g->rec[il]) continue;
        float *rec = g->rec[il], *S = rec + 3 * (size_t)(R - 1) * Di;
        const float *in = g->stg_in + (size_t)ik++ * g->stg_cap * stg_row(c);
        for (int t = 0; t < n_keep; t++)
            for (int i = 0; i < 3; i++)
                conv_push(rec + (size_t)i * (R - 1) * Di, in + (size_t)t * stg_row(c) + (size_t)i * Di, R, Di);
        for (int h = 0; h < H; h++) {
            const float *kk = in + 3 * (size_t)Di + (size_t)h * K;
            const kda_seq x = { .k = kk, .v = kk + Di, .g = kk + 2 * (size_t)Di,
                                .beta = in + 6 * (size_t)Di + h, .rs = stg_row(c), .bs = stg_row(c) };
            kda_recurrent(S + (size_t)h * K * K, K, &x, n_keep, NULL, 0, g->ks, s->m->vk);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Snapshots                                                                 */
/*                                                                           */
/* Little-endian, u32 unless noted (the first ten words keep the places     */
/* every snapshot format shares, models/graph.h: n_tokens at word 8, flags  */
/* at word 9, the tokens right after -- the disk KV store reads them there):*/
/*   magic "G5NS", version 3, n_layer, n_embd, n_head, kda_dim, n_vocab,     */
/*   kv_lora, n_tokens, flags (bit 0: --no-qat activations, bit 1: the      */
/*   logits are valid, bit 2: the NextN section follows the layers, bit 3:  */
/*   its main state is valid)                                                */
/*   i32 tokens[n_tokens]                                                    */
/*   u32 conv, idx_dim, kpool (the rest of the shape)                        */
/*   f32 logits[n_vocab] (zeros when not valid)                              */
/*   per layer: u32 kind (0 KDA, 1 MLA with its own indexer, 2 MLA shared);  */
/*     KDA: f32 conv tails [3][conv-1][H*kda_dim], S [H][kda_dim][kda_dim]   */
/*     MLA: f32 rows [n_tokens][kv_lora]; kind 1 also keys and gate logits   */
/*          [n_tokens][idx_dim] each (pooled keys are recomputed)            */
/*   the NextN section (bit 2; written by a session with the block): u32 m  */
/*     (its rows held, <= n_tokens), f32 the main model's normed state      */
/*     after position n_tokens - 1 [n_embd] (zeros unless bit 3), the      */
/*     block's rows [m][kv_lora], keys and gate logits [m][idx_dim] each -- */
/*     so a restored session drafts what the saving one would               */
/*   u64 XXH64 of every byte before it                                       */
/* Version 2 (no NextN section, no bits 2-3) is read as before: the block's */
/* rows then start cold (drafts differ, never the output).                  */
/* ------------------------------------------------------------------------ */

#define G5N_MAGIC 0x534e3547u   /* "G5NS" */
#define G5N_VERSION 3u
#define G5N_HDR 10
#define G5N_SHAPE 3

static uint32_t kind_of(const ds4_layer_weights *lw) { return lw->kda ? 0u : lw->own_indexer ? 1u : 2u; }

static uint64_t layer_snap_bytes(const ds4_config *c, const ds4_layer_weights *lw, uint64_t n) {
    if (lw->kda) return rec_floats(c) * 4;
    return n * (uint64_t)c->kv_lora * 4 + (lw->own_indexer ? 2 * n * (uint64_t)c->idx_dim * 4 : 0);
}

static uint64_t snap_bytes(const ds4_session *s, uint64_t n) {
    const ds4_config *c = &s->m->w.cfg;
    uint64_t b = (G5N_HDR + G5N_SHAPE) * 4 + n * 4 + (uint64_t)c->n_vocab * 4 + 8;
    for (int il = 0; il < c->n_layer; il++) b += 4 + layer_snap_bytes(c, &s->m->w.layers[il], n);
    return b;
}

/* the NextN rows a snapshot carries: those of the session's tokens */
static uint32_t nextn_snap_rows(const ds4_session *s) {
    const int64_t hi = s->g5n->mtp_hi, n = (int64_t)s->toks.n;
    return (uint32_t)(hi < n ? hi : n);
}

static uint64_t nextn_snap_bytes(const ds4_config *c, uint64_t m) {
    return 4 + (uint64_t)c->n_embd * 4 + m * ((uint64_t)c->kv_lora + 2 * (uint64_t)c->idx_dim) * 4;
}

static uint64_t g5n_snapshot_size(const ds4_session *s) {
    return snap_bytes(s, s->toks.n) + (s->mtp ? nextn_snap_bytes(&s->m->w.cfg, nextn_snap_rows(s)) : 0);
}

/* the main state the next draft starts from, or NULL */
static const float *nextn_main(const ds4_session *s) {
    return s->mtp && s->toks.n > 0 ? ds4_mtp_main_state(s, (int64_t)s->toks.n - 1) : NULL;
}

static void snap_header(const ds4_session *s, uint32_t h[G5N_HDR], uint32_t sh[G5N_SHAPE]) {
    const ds4_config *c = &s->m->w.cfg;
    h[0] = G5N_MAGIC;
    h[1] = G5N_VERSION;
    h[2] = (uint32_t)c->n_layer;
    h[3] = (uint32_t)c->n_embd;
    h[4] = (uint32_t)c->n_head;
    h[5] = (uint32_t)c->kda_dim;
    h[6] = (uint32_t)c->n_vocab;
    h[7] = (uint32_t)c->kv_lora;
    h[8] = (uint32_t)s->toks.n;
    h[9] = (s->no_qat ? 1u : 0u) | (s->has_logits ? 2u : 0u) | (s->mtp ? 4u : 0u) | (nextn_main(s) ? 8u : 0u);
    sh[0] = (uint32_t)c->conv;
    sh[1] = (uint32_t)c->idx_dim;
    sh[2] = (uint32_t)c->kpool;
}

typedef struct { ds4_write_fn w; void *ud; ds4_xxh64_ctx h; } hashed_writer;

static int hput(hashed_writer *hw, const void *p, size_t n) {
    ds4_xxh64_update(&hw->h, p, n);
    return hw->w(hw->ud, p, n);
}

static int hzeros(hashed_writer *hw, size_t n) {
    static const float zeros[256];
    for (size_t left = n; left > 0;) {
        size_t k = left < sizeof zeros ? left : sizeof zeros;
        int rc = hput(hw, zeros, k);
        if (rc) return rc;
        left -= k;
    }
    return 0;
}

static int g5n_snapshot_write(const ds4_session *s, ds4_write_fn w, void *ud) {
    if (dist_on()) return DS4_EUNSUP;   /* the layers' state lives on several ranks */
    const ds4_config *c = &s->m->w.cfg;
    const struct ds4_g5n_state *g = s->g5n;
    const size_t n = s->toks.n;
    hashed_writer hw;
    hw.w = w;
    hw.ud = ud;
    ds4_xxh64_init(&hw.h, 0);
    uint32_t hdr[G5N_HDR], shape[G5N_SHAPE];
    snap_header(s, hdr, shape);
#define PUT(p, k) do { int rc_ = hput(&hw, (p), (k)); if (rc_) return rc_; } while (0)
    PUT(hdr, sizeof hdr);
    PUT(s->toks.v, n * 4);
    PUT(shape, sizeof shape);
    if (s->has_logits) {
        PUT(s->logits, (size_t)c->n_vocab * 4);
    } else {
        int rc = hzeros(&hw, (size_t)c->n_vocab * 4);
        if (rc) return rc;
    }
    for (int il = 0; il < c->n_layer; il++) {
        const ds4_layer_weights *lw = &s->m->w.layers[il];
        const uint32_t kind = kind_of(lw);
        PUT(&kind, 4);
        if (lw->kda) { PUT(g->rec[il], g->rec_n * 4); continue; }
        PUT(g->ckv[il], n * (size_t)c->kv_lora * 4);
        if (lw->own_indexer) {
            PUT(g->ik[il], n * (size_t)c->idx_dim * 4);
            PUT(g->ig[il], n * (size_t)c->idx_dim * 4);
        }
    }
    if (s->mtp) {
        const uint32_t mr = nextn_snap_rows(s);
        const float *h = nextn_main(s);
        const int L = c->n_layer;
        PUT(&mr, 4);
        if (h) PUT(h, (size_t)c->n_embd * 4);
        else {
            int rc = hzeros(&hw, (size_t)c->n_embd * 4);
            if (rc) return rc;
        }
        PUT(g->ckv[L], (size_t)mr * c->kv_lora * 4);
        PUT(g->ik[L], (size_t)mr * c->idx_dim * 4);
        PUT(g->ig[L], (size_t)mr * c->idx_dim * 4);
    }
#undef PUT
    const uint64_t sum = ds4_xxh64_digest(&hw.h);
    return w(ud, &sum, 8);
}

static int snap_fail(char **err, const char *msg) { return ds4_set_err(err, DS4_EFORMAT, "snapshot: %s", msg); }

static int g5n_restore(ds4_session *s, const void *data, size_t len, char **err) {
    const ds4_config *c = &s->m->w.cfg;
    struct ds4_g5n_state *g = s->g5n;
    const uint8_t *p = data;
    uint32_t h[G5N_HDR], want[G5N_HDR], sh[G5N_SHAPE], wsh[G5N_SHAPE];
    if (err) *err = NULL;
    if (dist_on()) return ds4_set_err(err, DS4_EUNSUP, "snapshot: not supported with --dist");
    if (len < sizeof h) return snap_fail(err, "truncated header");
    memcpy(h, p, sizeof h);
    if (h[0] != G5N_MAGIC) return snap_fail(err, "bad magic (not a glm5-next session snapshot)");
    if (h[1] != G5N_VERSION && h[1] != 2u) return snap_fail(err, "unsupported version");
    snap_header(s, want, wsh);
    for (int i = 2; i < 8; i++)
        if (h[i] != want[i]) return snap_fail(err, "made for a different model shape");
    if ((h[9] & 1u) != (want[9] & 1u)) return snap_fail(err, "numerics mode (--no-qat) differs from this session's");
    if (h[9] & (h[1] == 2u ? ~3u : ~15u)) return snap_fail(err, "unknown flags");
    if ((h[9] & 8u) && !(h[9] & 4u)) return snap_fail(err, "a NextN main state without the NextN section");
    const uint32_t n = h[8];
    if (n > (uint32_t)s->ctx) return snap_fail(err, "more tokens than this session's context");
    if (n == 0 && (h[9] & 2u)) return snap_fail(err, "logits without tokens");
    /* the exact size first (no arithmetic on unchecked offsets), then the
     * shape, the checksum, then the contents: all before the live state is
     * touched */
    const uint64_t base = snap_bytes(s, n);
    uint64_t need = base;
    uint32_t mr = 0;
    if (h[9] & 4u) {
        /* the NextN section's row count sits where the checksum would */
        if ((uint64_t)len < base + 4) return snap_fail(err, "truncated");
        memcpy(&mr, p + base - 8, 4);
        if (mr > n) return snap_fail(err, "more NextN rows than tokens");
        need += nextn_snap_bytes(c, mr);
    }
    if ((uint64_t)len < need) return snap_fail(err, "truncated");
    if ((uint64_t)len > need) return snap_fail(err, "trailing bytes");
    const size_t tok_at = sizeof h, shape_at = tok_at + (size_t)n * 4;
    memcpy(sh, p + shape_at, sizeof sh);
    for (int i = 0; i < G5N_SHAPE; i++)
        if (sh[i] != wsh[i]) return snap_fail(err, "made for a different model shape");
    uint64_t sum;
    memcpy(&sum, p + len - 8, 8);
    if (ds4_xxh64(p, len - 8, 0) != sum) return snap_fail(err, "checksum mismatch (damaged)");
    for (uint32_t i = 0; i < n; i++) {
        int32_t t;
        memcpy(&t, p + tok_at + 4 * (size_t)i, 4);
        if (t < 0 || t >= c->n_vocab) return snap_fail(err, "token id out of range");
    }
    const size_t logit_at = shape_at + sizeof sh, layer_at = logit_at + (size_t)c->n_vocab * 4;
    size_t at = layer_at;
    for (int il = 0; il < c->n_layer; il++) {
        const ds4_layer_weights *lw = &s->m->w.layers[il];
        uint32_t kind;
        memcpy(&kind, p + at, 4);
        if (kind != kind_of(lw)) return snap_fail(err, "layer kinds differ from this model's");
        at += 4 + (size_t)layer_snap_bytes(c, lw, n);
    }
    /* commit */
    ds4_session_clear(s);   /* the recurrent state zero, no checkpoint, no staged pass */
    memcpy(s->toks.v, p + tok_at, (size_t)n * 4);
    s->toks.n = n;
    memcpy(s->logits, p + logit_at, (size_t)c->n_vocab * 4);
    s->has_logits = (h[9] & 2u) != 0;
    at = layer_at;
    for (int il = 0; il < c->n_layer; il++) {
        const ds4_layer_weights *lw = &s->m->w.layers[il];
        at += 4;
        if (lw->kda) {
            memcpy(g->rec[il], p + at, g->rec_n * 4);
            at += g->rec_n * 4;
            continue;
        }
        memcpy(g->ckv[il], p + at, (size_t)n * c->kv_lora * 4);
        at += (size_t)n * c->kv_lora * 4;
        if (!lw->own_indexer) continue;
        memcpy(g->ik[il], p + at, (size_t)n * c->idx_dim * 4);
        at += (size_t)n * c->idx_dim * 4;
        memcpy(g->ig[il], p + at, (size_t)n * c->idx_dim * 4);
        at += (size_t)n * c->idx_dim * 4;
        for (long q = 0; q < (long)(n / (uint32_t)c->kpool); q++)
            pool_key(c, lw, g->ik[il], g->ig[il], q, g->kp[il] + (size_t)q * c->idx_dim);
    }
    /* the NextN section: into the block's rows when this session has the
     * block (else skipped: nothing reads it) */
    const int L = c->n_layer;
    if ((h[9] & 4u) && s->mtp && g->ckv[L]) {
        at += 4;
        const float *hm = (const float *)(const void *)(p + at);
        if (h[9] & 8u) {
            float *row = malloc((size_t)c->n_embd * sizeof(float));   /* aligned copy */
            if (row) {
                memcpy(row, hm, (size_t)c->n_embd * 4);
                ds4_mtp_note_hidden(s, row, (int64_t)n - 1, 1);
                free(row);
            }
        }
        at += (size_t)c->n_embd * 4;
        const size_t rb = (size_t)mr * c->kv_lora * 4, ib = (size_t)mr * c->idx_dim * 4;
        memcpy(g->ckv[L], p + at, rb);
        at += rb;
        memcpy(g->ik[L], p + at, ib);
        at += ib;
        memcpy(g->ig[L], p + at, ib);
        for (long q = 0; q < (long)(mr / (uint32_t)c->kpool); q++)
            pool_key(c, &s->m->w.mtp.block, g->ik[L], g->ig[L], q, g->kp[L] + (size_t)q * c->idx_dim);
        g->mtp_hi = mr;
    }
    return DS4_OK;
}

const ds4_graph ds4_graph_glm5_next = {
    .name = "glm5-next",
    .arch = DS4_ARCH_GLM5_NEXT,
    .caps = DS4_GRAPH_DIST,
    .state_new = g5n_state_new,
    .state_free = g5n_state_free,
    .state_reset = g5n_reset,
    .eval_chunk = g5n_eval_chunk,
    .chunk_logits = g5n_logits,
    .stage_begin = g5n_stage_begin,
    .stage_commit = g5n_stage_commit,
    .kv_bytes = g5n_kv_bytes,
    .plan = g5n_plan,
    .checkpoint_bytes = g5n_checkpoint_bytes,
    .checkpoint = g5n_checkpoint,
    .checkpoint_tokens = g5n_checkpoint_tokens,
    .rewind_point = g5n_rewind_point,
    .rewind = g5n_rewind,
    .snapshot_size = g5n_snapshot_size,
    .snapshot_write = g5n_snapshot_write,
    .restore = g5n_restore,
};
