/*
 * glm_common.c -- what the GLM graphs (glm_dsa.c, glm5_next.c) share past
 * the per-row steps of glm_common.h: the matmul wrapper and the whole FFN
 * of a layer -- the dense SwiGLU FFN, or the sigmoid MoE (the router with
 * the selection bias, top-k by the tie rule, normalisation and route
 * scale; the routed experts batched by expert; the shared expert) with
 * the SwiGLU clamps as parameters -- and its scratch (glm_ffn_buf).  The
 * routed experts come from the weights (resident) or, under
 * --ssd-streaming, from the expert cache's slots (engine/expert_cache.c):
 * the same products on the same bytes, summed per token in the same order,
 * so the logits are the resident run's bit for bit.
 *
 * Owns: glm_mm, glm_ffn and glm_ffn_buf.  Must not: know either graph's
 * state, streams or attention, or order anything by the chunk or the
 * threads (per-row kernels: cpu_matmul and its groups are bit-identical
 * for any row count and grouping; every token's experts are added in
 * ascending expert order whatever batch or wave computed them).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/expert_cache.h"
#include "models/glm_common.h"

void glm_mm(const cpu_ctx *cc, int no_qat, void *qs, mat_t W, const float *x, size_t xs, int T, float *y,
            size_t ys) {
    cpu_matmul(cc, W, no_qat, x, xs, T, y, ys, qs);
}

int glm_ffn_new(glm_ffn_buf *b, const ds4_config *c, int T, int streamed) {
    memset(b, 0, sizeof *b);
    const size_t D = (size_t)c->n_embd, E = (size_t)c->n_expert, KU = (size_t)c->n_expert_used;
    const size_t FE = (size_t)c->n_ff_exp, FS = FE * (size_t)c->n_expert_shared;
    const size_t F = glm_mx((size_t)c->n_ff, FS), MC = glm_mx((size_t)T, KU), TT = (size_t)T;
    const size_t widest = glm_mx(glm_mx(D, F), FE);
    const size_t qrow = glm_mx(act_row_bytes(ACT_Q8_0A, (int)widest), act_row_bytes(ACT_Q8_K, (int)widest));
    b->T = T;
#define A(p, n) if (!((p) = glm_zalloc((n) * sizeof *(p)))) return DS4_ENOMEM
    A(b->g, TT * F); A(b->u, TT * F); A(b->sy, TT * D); A(b->rl, TT * E);
    A(b->eg, MC * FE); A(b->eu, MC * FE);
    /* streamed: every (token, expert) pair's `down` row is kept until the
     * experts of the layer have all arrived, in any order, and then added
     * in the resident order */
    A(b->ed, (streamed ? TT * KU : MC) * D);
    A(b->erow, MC); A(b->etok, TT * KU); A(b->ewt, TT * KU); A(b->ecnt, E + 1); A(b->elist, TT * KU);
    A(b->grp, 2 * E); A(b->xe, E);
#undef A
    if (!(b->qs = malloc(MC * qrow)) || !(b->qx = malloc(TT * qrow)) || !(b->qx2 = malloc(TT * qrow)))
        return DS4_ENOMEM;
    return DS4_OK;
}

void glm_ffn_free(glm_ffn_buf *b) {
    free(b->g); free(b->u); free(b->sy); free(b->rl); free(b->eg); free(b->eu); free(b->ed);
    free(b->erow); free(b->etok); free(b->ewt); free(b->ecnt); free(b->elist); free(b->grp); free(b->xe);
    free(b->qs); free(b->qx); free(b->qx2);
    memset(b, 0, sizeof *b);
}

/* The order of the top-k: higher score first, among equal scores the
 * lower index (docs/family.md, the tie rule).  A total order, so the k
 * best are one set whatever finds them. */
static inline int weaker(const float *sc, int i, int j) {
    return sc[i] < sc[j] || (sc[i] == sc[j] && i > j);
}
static int by_index(const void *a, const void *b) {
    const int i = *(const int *)a, j = *(const int *)b;
    return (i > j) - (i < j);
}

/* The k best of sc[0..n) (k <= n) into out[0..k), ascending by index:
 * out is first a min-heap of the kept (its root the weakest), O(n log k)
 * where a sort of all n was O(n log n). */
void ds4_glm_top_k(const float *sc, int n, int k, int *out) {
    int hn = 0;
    for (int i = 0; i < n; i++) {
        int p;
        if (hn < k) {
            p = hn++;
            out[p] = i;
            while (p > 0) {
                const int q = (p - 1) / 2;
                if (!weaker(sc, out[p], out[q])) break;
                const int tmp = out[p]; out[p] = out[q]; out[q] = tmp;
                p = q;
            }
        } else if (weaker(sc, out[0], i)) {
            out[0] = i;
            for (p = 0;;) {
                const int l = 2 * p + 1, r = l + 1;
                int m = p;
                if (l < k && weaker(sc, out[l], out[m])) m = l;
                if (r < k && weaker(sc, out[r], out[m])) m = r;
                if (m == p) break;
                const int tmp = out[p]; out[p] = out[m]; out[m] = tmp;
                p = m;
            }
        }
    }
    qsort(out, (size_t)k, sizeof *out, by_index);
}

/* one MoE layer's routed products, what every batch shares */
typedef struct {
    const glm_ffn_ctx *fx;
    glm_ffn_buf *b;
    int D, FE, KU;
    float clamp;
    act_kind kg, ku, kd;
    const uint8_t *ag, *au;   /* the chunk's rows as gate's and up's activations */
    size_t sg, su, sd;        /* their row bytes; a `down` activation row's */
} moe_run;

/* gate, up, SwiGLU and down of n experts (xe[0..n): their matrices and
 * their rows elist[row0 .. row0 + n_rows)), at most MC rows in all; the
 * down rows of xe[j] go to out + o_j * D where o_j is its first row
 * counted from `base` (the batch's first row, or 0: every pair's row) */
static void experts(moe_run *m, const glm_xexp *xe, int n, int base) {
    glm_ffn_buf *b = m->b;
    const cpu_ctx *cc = m->fx->cc;
    const int FE = m->FE, D = m->D;
    mm_group *gr = b->grp;
    int ng = 0, nr = 0;
    for (int j = 0; j < n; j++) {
        const glm_xexp *x = &xe[j];
        for (int r = 0; r < x->n; r++) b->erow[nr + r] = b->elist[x->row0 + r] / m->KU;
        gr[ng++] = (mm_group){ .W = x->g, .kind = m->kg, .act = m->ag, .act_stride = m->sg, .rows = b->erow + nr,
                               .n_rows = x->n, .out = b->eg + (size_t)nr * FE, .out_stride = (size_t)FE };
        gr[ng++] = (mm_group){ .W = x->u, .kind = m->ku, .act = m->au, .act_stride = m->su, .rows = b->erow + nr,
                               .n_rows = x->n, .out = b->eu + (size_t)nr * FE, .out_stride = (size_t)FE };
        nr += x->n;
    }
    cpu_matmul_groups(cc, gr, ng);
    for (int r = 0; r < nr; r++) {
        float *row = b->eg + (size_t)r * FE;
        glm_swiglu_row(row, b->eu + (size_t)r * FE, FE, m->clamp);
        if (m->kd != ACT_F32) act_quantize_row(cc->k, m->kd, row, FE, (uint8_t *)b->qs + (size_t)r * m->sd);
    }
    const uint8_t *ad = m->kd == ACT_F32 ? (const uint8_t *)b->eg : (const uint8_t *)b->qs;
    ng = 0;
    nr = 0;
    for (int j = 0; j < n; j++) {
        const glm_xexp *x = &xe[j];
        gr[ng++] = (mm_group){ .W = x->d, .kind = m->kd, .act = ad + (size_t)nr * m->sd, .act_stride = m->sd,
                               .n_rows = x->n, .out = b->ed + (size_t)(x->row0 - base) * D,
                               .out_stride = (size_t)D };
        nr += x->n;
    }
    cpu_matmul_groups(cc, gr, ng);
}

/* out[token] += weight * down row, for the pairs elist[r0 .. r0 + n) whose
 * down rows are ed + (r - base) * D: in elist's order (experts ascending,
 * tokens ascending), so every token gets its experts k = 0, 1, ... */
static void scatter(moe_run *m, float *out, int r0, int n, int base) {
    glm_ffn_buf *b = m->b;
    const int D = m->D;
    for (int r = r0; r < r0 + n; r++) {
        const int p = b->elist[r];
        const float s = b->ewt[p];
        float *o = out + (size_t)(p / m->KU) * D;
        const float *ed = b->ed + (size_t)(r - base) * D;
        for (int i = 0; i < D; i++) o[i] += s * ed[i];
    }
}

/* --ssd-streaming: every expert the chunk routes to is asked for at once
 * (the cache's reader threads read the misses); each wave that is in
 * memory is computed while the rest arrive, in groups of at most MC rows,
 * its down rows kept per pair; then the pairs are added in elist's order,
 * as the resident batches add them.  The NextN block's experts (il >=
 * n_layer) are not in the cache: they stay mapped. */
static int routed_streamed(moe_run *m, const ds4_layer_weights *lw, int il, float *out) {
    glm_ffn_buf *b = m->b;
    struct ds4_xcache *xc = m->fx->xc;
    const int E = m->fx->c->n_expert, MC = b->T > m->KU ? b->T : m->KU;
    const int *cnt = b->ecnt;
    int need[DS4_MAX_EXPERT], idx[DS4_MAX_EXPERT], nn = 0;
    for (int e = 0; e < E; e++)
        if (cnt[e + 1] > cnt[e]) need[nn++] = e;
    xc_begin(xc, il, need, nn);
    int got;
    while ((got = xc_next(xc, idx, nn)) > 0) {
        int nx = 0, rows = 0;
        for (int j = 0; j < got; j++) {
            const int e = need[idx[j]], n = cnt[e + 1] - cnt[e];
            if (rows + n > MC) {   /* an expert has at most T <= MC rows */
                experts(m, b->xe, nx, 0);
                nx = rows = 0;
            }
            const uint8_t *w3[3];
            xc_weights(xc, idx[j], w3);
            glm_xexp *x = &b->xe[nx++];
            x->g = mat_expert(&lw->ffn_gate_exps, 0); x->g.w = w3[0];
            x->u = mat_expert(&lw->ffn_up_exps, 0); x->u.w = w3[1];
            x->d = mat_expert(&lw->ffn_down_exps, 0); x->d.w = w3[2];
            x->row0 = cnt[e];
            x->n = n;
            rows += n;
        }
        if (nx) experts(m, b->xe, nx, 0);
        xc_release(xc, idx, got);
    }
    xc_end(xc);
    if (got < 0) return got;
    scatter(m, out, 0, cnt[E], 0);
    return DS4_OK;
}

/* Sigmoid router (selection by sigmoid + exp_probs_b, ties to the lower
 * expert; weights the unbiased sigmoid, normalized, times the scale),
 * routed experts, plus the shared expert; the sum into out.  The routed
 * experts go by expert, ascending, in batches of at most MC rows (every
 * token an expert sees, its matmuls on all of them at once); a token's
 * experts are ascending too (top_k's order), so its outputs are added in
 * the same order, k = 0, 1, ..., as one token alone. */
static int moe(const glm_ffn_ctx *fx, const ds4_layer_weights *lw, int il, const float *x, int T, float clamp,
               float clamp_sh, float *out) {
    const ds4_config *c = fx->c;
    glm_ffn_buf *b = fx->b;
    const int D = c->n_embd, E = c->n_expert, KU = c->n_expert_used, FE = c->n_ff_exp;
    const int FS = FE * c->n_expert_shared, MC = T > KU ? T : KU;
    glm_mm(fx->cc, fx->no_qat, b->qs, mat_of(&lw->ffn_gate_inp), x, (size_t)D, T, b->rl, (size_t)E);
    const float *bias = (const float *)lw->exp_probs_b.data;
    float prob[DS4_MAX_EXPERT], selv[DS4_MAX_EXPERT];
    int ids[DS4_MAX_EXPERT];
    int *cnt = b->ecnt;
    memset(cnt, 0, ((size_t)E + 1) * sizeof *cnt);
    for (int t = 0; t < T; t++) {
        for (int e = 0; e < E; e++) {
            prob[e] = glm_sigmoid(b->rl[(size_t)t * E + e]);
            selv[e] = bias ? prob[e] + bias[e] : prob[e];
        }
        ds4_glm_top_k(selv, E, KU, ids);
        float wsum = 0.0f, wt[DS4_MAX_EXPERT];
        for (int k = 0; k < KU; k++) { wt[k] = prob[ids[k]]; wsum += wt[k]; }
        if (c->expert_norm) {
            if (wsum < 6.103515625e-5f) wsum = 6.103515625e-5f;
            for (int k = 0; k < KU; k++) wt[k] /= wsum;
        }
        for (int k = 0; k < KU; k++) {
            b->etok[(size_t)t * KU + k] = ids[k];
            b->ewt[(size_t)t * KU + k] = wt[k] * c->expert_scale;
            cnt[ids[k] + 1]++;
        }
    }
    /* cnt[e] = the first row of expert e in elist, tokens ascending */
    for (int e = 0; e < E; e++) cnt[e + 1] += cnt[e];
    for (int t = 0; t < T * KU; t++) {
        const int e = b->etok[t];
        b->elist[cnt[e]++] = t;
    }
    for (int e = E; e > 0; e--) cnt[e] = cnt[e - 1];
    cnt[0] = 0;
    /* the chunk's rows as gate's and up's activations, quantized once */
    moe_run m = { .fx = fx, .b = b, .D = D, .FE = FE, .KU = KU, .clamp = clamp };
    const mat_t g0 = mat_expert(&lw->ffn_gate_exps, 0), u0 = mat_expert(&lw->ffn_up_exps, 0);
    const mat_t d0 = mat_expert(&lw->ffn_down_exps, 0);
    m.kg = act_kind_for(g0.type, fx->no_qat);
    m.ku = act_kind_for(u0.type, fx->no_qat);
    m.kd = act_kind_for(d0.type, fx->no_qat);
    m.ag = m.au = (const uint8_t *)x;
    m.sg = m.su = (size_t)D * sizeof(float);
    if (m.kg != ACT_F32) {
        m.sg = act_row_bytes(m.kg, D);
        for (int t = 0; t < T; t++)
            act_quantize_row(fx->cc->k, m.kg, x + (size_t)t * D, D, (uint8_t *)b->qx + (size_t)t * m.sg);
        m.ag = b->qx;
    }
    if (m.ku == m.kg) { m.au = m.ag; m.su = m.sg; }
    else if (m.ku != ACT_F32) {
        m.su = act_row_bytes(m.ku, D);
        for (int t = 0; t < T; t++)
            act_quantize_row(fx->cc->k, m.ku, x + (size_t)t * D, D, (uint8_t *)b->qx2 + (size_t)t * m.su);
        m.au = b->qx2;
    }
    m.sd = m.kd == ACT_F32 ? (size_t)FE * sizeof(float) : act_row_bytes(m.kd, FE);
    memset(out, 0, (size_t)T * D * sizeof(float));
    if (fx->xc && il < c->n_layer) {
        int rc = routed_streamed(&m, lw, il, out);
        if (rc) return rc;
    } else {
        for (int e0 = 0; e0 < E;) {
            /* the batch: experts e0 .. e1 - 1, at most MC rows (an expert
             * has at most T) */
            int e1 = e0, nx = 0;
            while (e1 < E && cnt[e1 + 1] - cnt[e0] <= MC) e1++;
            for (int e = e0; e < e1; e++) {
                const int n = cnt[e + 1] - cnt[e];
                if (!n) continue;
                b->xe[nx++] = (glm_xexp){ .g = mat_expert(&lw->ffn_gate_exps, e), .u = mat_expert(&lw->ffn_up_exps, e),
                                          .d = mat_expert(&lw->ffn_down_exps, e), .row0 = cnt[e], .n = n };
            }
            experts(&m, b->xe, nx, cnt[e0]);
            scatter(&m, out, cnt[e0], cnt[e1] - cnt[e0], cnt[e0]);
            e0 = e1;
        }
    }
    glm_mm(fx->cc, fx->no_qat, b->qs, mat_of(&lw->ffn_gate_shexp), x, (size_t)D, T, b->g, (size_t)FS);
    glm_mm(fx->cc, fx->no_qat, b->qs, mat_of(&lw->ffn_up_shexp), x, (size_t)D, T, b->u, (size_t)FS);
    for (int t = 0; t < T; t++) glm_swiglu_row(b->g + (size_t)t * FS, b->u + (size_t)t * FS, FS, clamp_sh);
    glm_mm(fx->cc, fx->no_qat, b->qs, mat_of(&lw->ffn_down_shexp), b->g, (size_t)FS, T, b->sy, (size_t)D);
    for (size_t i = 0; i < (size_t)T * D; i++) out[i] += b->sy[i];
    return DS4_OK;
}

int glm_ffn(const glm_ffn_ctx *fx, const ds4_layer_weights *lw, int il, const float *x, int T, float clamp,
            float clamp_sh, float *out) {
    if (!lw->dense) return moe(fx, lw, il, x, T, clamp, clamp_sh, out);
    const ds4_config *c = fx->c;
    glm_ffn_buf *b = fx->b;
    const int D = c->n_embd, FF = c->n_ff;
    glm_mm(fx->cc, fx->no_qat, b->qs, mat_of(&lw->ffn_gate), x, (size_t)D, T, b->g, (size_t)FF);
    glm_mm(fx->cc, fx->no_qat, b->qs, mat_of(&lw->ffn_up), x, (size_t)D, T, b->u, (size_t)FF);
    for (int t = 0; t < T; t++) glm_swiglu_row(b->g + (size_t)t * FF, b->u + (size_t)t * FF, FF, clamp);
    glm_mm(fx->cc, fx->no_qat, b->qs, mat_of(&lw->ffn_down), b->g, (size_t)FF, T, out, (size_t)D);
    return DS4_OK;
}

int glm_mtp_input(const cpu_ctx *cc, int no_qat, void *qs, const ds4_weights *w, const int32_t *toks,
                  const float *h0, const float *hrows, int T, float *tmp, float *cat, float *out) {
    const ds4_config *c = &w->cfg;
    const ds4_mtp_weights *mw = &w->mtp;
    const int D = c->n_embd;
    const ds4_tensor *E = mw->embd.data ? &mw->embd : &w->token_embd;
    for (int t = 0; t < T; t++) {
        float *e = cat + (size_t)t * 2 * D;
        if (ds4_dequantize_row(E->type, E->data + (size_t)toks[t] * E->row_bytes, tmp, D)) return DS4_EFORMAT;
        rms_norm(tmp, (const float *)mw->enorm.data, D, c->rms_eps, e);
        const float *h = t ? hrows + (size_t)(t - 1) * D : h0;
        if (h) rms_norm(h, (const float *)mw->hnorm.data, D, c->rms_eps, e + D);
        else memset(e + D, 0, (size_t)D * sizeof(float));
    }
    glm_mm(cc, no_qat, qs, mat_of(&mw->eh_proj), cat, 2 * (size_t)D, T, out, (size_t)D);
    return DS4_OK;
}
