/*
 * session.c -- a token sequence and its KV state (docs/MODEL.md §8).
 *
 * Owns: the token list, the per-layer state buffers (allocated once for the
 * context size), prefix reuse (sync), chunking of evaluations, snapshots and
 * the memory estimate.  The arithmetic is the backend's (forward_cpu.c).
 * Must not: allocate per token, or leave a half-evaluated chunk visible: a
 * chunk either completes or (on error) the session is reset.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "dist/dist.h"


void ds4_session_params_default(ds4_session_params *p) {
    memset(p, 0, sizeof *p);
    p->ctx_size = 4096;
    p->prefill_chunk = 2048;
    p->no_qat = 0;
}

static int ratio_of(const ds4_model *m, int il) { return m->w.layers[il].ratio; }

static int comp_cap_of(int ctx, int R) { return R ? ctx / R + 1 : 0; }

/* Per-layer state sizes in floats. */
typedef struct {
    size_t raw, comp, st, icomp, ist;
} layer_sizes;

static layer_sizes sizes_of(const ds4_model *m, int il, int ctx, int chunk) {
    const ds4_config *c = &m->w.cfg;
    const ds4_layer_weights *lw = &m->w.layers[il];
    layer_sizes z = { 0 };
    int d = c->head_dim;
    z.raw = (size_t)(2 * c->n_swa + chunk) * d;
    if (lw->ratio) {
        int R = lw->ratio;
        z.comp = (size_t)comp_cap_of(ctx, R) * d;
        z.st = (size_t)lw->coff * R * lw->coff * d;
        if (lw->has_indexer) {
            z.icomp = (size_t)comp_cap_of(ctx, R) * c->idx_dim;
            z.ist = (size_t)2 * R * 2 * c->idx_dim;
        }
    }
    return z;
}

/* Scratch layout: one table drives both the estimate and the allocation. */
#define SCR_MAX 64
typedef struct { void **ptr; size_t bytes; } scr_item;

static size_t act_bound(int n) { return (size_t)n * 37 / 32 + 300; }

static int scratch_plan(const ds4_model *m, cpu_scratch *sc, int T, int ctx, int nth,
                        scr_item *it, int *n_it) {
    const ds4_config *c = &m->w.cfg;
    const size_t N = c->n_hc, D = c->n_embd, M = (2 + N) * N, H = c->n_head, d = c->head_dim;
    const size_t E = c->n_expert, K = c->n_expert_used, F = c->n_ff_exp;
    size_t FS = (size_t)F * (c->n_expert_shared > 0 ? c->n_expert_shared : 1);
    for (int il = 0; il < c->n_layer; il++) {
        size_t fs = m->w.layers[il].ffn_gate_shexp.ne[1];
        if (fs > FS) FS = fs;
    }
    size_t IH = c->idx_heads, ID = c->idx_dim;
    size_t G = c->o_groups, OL = c->o_lora;
    size_t comp_max = 0;
    for (int il = 0; il < c->n_layer; il++) {
        size_t cc = (size_t)comp_cap_of(ctx, ratio_of(m, il));
        if (cc > comp_max) comp_max = cc;
    }
    size_t moe_pairs = (size_t)(T < MOE_T ? T : MOE_T) * K;
    size_t gu = (moe_pairs > (size_t)T ? moe_pairs : (size_t)T) * (F > FS ? F : FS);
    size_t nin_max = N * D;
    size_t cand[] = { D, c->q_lora, H * d, G * OL, FS, F, (H / G) * d };
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++)
        if (cand[i] > nin_max) nin_max = cand[i];
    size_t qbytes = act_bound((int)nin_max) * T;
    size_t qm = act_bound((int)F) * moe_pairs;
    if (qm > qbytes) qbytes = qm;
    size_t qin = act_bound((int)D) * (T < MOE_T ? T : MOE_T);
    if (qin > qbytes) qbytes = qin;
    /* float-activation experts (F16 files, --no-qat) stage float rows */
    size_t fin = D * 4 * (size_t)(T < MOE_T ? T : MOE_T), fmid = F * 4 * moe_pairs;
    if (fin > qbytes) qbytes = fin;
    if (fmid > qbytes) qbytes = fmid;
    int k = 0;
#define ITEM(p, n) do { if (k >= SCR_MAX) abort(); /* table too small: a bug */ \
    it[k].ptr = (void **)&(p); it[k].bytes = (n); k++; } while (0)
    ITEM(sc->X, T * N * D * 4);
    ITEM(sc->X2, T * N * D * 4);
    ITEM(sc->cur, T * D * 4);
    ITEM(sc->a, T * D * 4);
    ITEM(sc->flat, T * N * D * 4);
    ITEM(sc->mix, T * (M > N ? M : N) * 4);
    ITEM(sc->post, T * N * 4);
    ITEM(sc->comb, T * N * N * 4);
    ITEM(sc->qa, T * c->q_lora * 4);
    ITEM(sc->qr, T * c->q_lora * 4);
    ITEM(sc->q, T * H * d * 4);
    ITEM(sc->kv, T * d * 4);
    ITEM(sc->ckv, T * 2 * d * 4);
    ITEM(sc->csc, T * 2 * d * 4);
    ITEM(sc->ikv, T * 2 * (ID ? ID : 1) * 4);
    ITEM(sc->isc, T * 2 * (ID ? ID : 1) * 4);
    ITEM(sc->iq, T * (IH * ID > 0 ? IH * ID : 1) * 4);
    ITEM(sc->iw, T * (IH ? IH : 1) * 4);
    ITEM(sc->heads, T * H * d * 4);
    ITEM(sc->low, T * G * OL * 4);
    ITEM(sc->y, T * D * 4);
    ITEM(sc->cs, T * (c->n_rot / 2 + 1) * 4);
    ITEM(sc->sn, T * (c->n_rot / 2 + 1) * 4);
    ITEM(sc->rlog, T * E * 4);
    ITEM(sc->sel, T * K * 4);
    ITEM(sc->wts, (T * K + moe_pairs) * 4);
    ITEM(sc->moe, T * D * 4);
    ITEM(sc->shared, T * D * 4);
    ITEM(sc->g, gu * 4);
    ITEM(sc->u, gu * 4);
    ITEM(sc->shared_g, (size_t)T * FS * 4);
    ITEM(sc->shared_u, (size_t)T * FS * 4);
    ITEM(sc->dn, moe_pairs * D * 4);
    ITEM(sc->erows, moe_pairs * 4);
    ITEM(sc->ecount, E * 4);
    ITEM(sc->eoff, E * 4);
    ITEM(sc->topk, T * (c->idx_topk ? c->idx_topk : 1) * 4);
    ITEM(sc->ntopk, T * 4);
    ITEM(sc->scores, (comp_max + 1) * 4);
    ITEM(sc->attn_w, (size_t)nth * VEC_HB * (c->n_swa + comp_max + 1) * 4);
    ITEM(sc->attn_kp, (size_t)nth * (c->n_swa + comp_max + 1) * sizeof(float *));
    ITEM(sc->qscratch, 2 * qbytes);   /* two activation kinds at once (mm_multi) */
    ITEM(sc->qscratch2, 2 * E * sizeof(mm_group));
    ITEM(sc->ylast, T * D * 4);
    ITEM(sc->logits, (size_t)c->n_vocab * 4);
#undef ITEM
    *n_it = k;
    return DS4_OK;
}

static size_t scratch_bytes(const ds4_model *m, int T, int ctx) {
    cpu_scratch tmp;
    scr_item it[SCR_MAX] = { 0 };
    int n = 0;
    scratch_plan(m, &tmp, T, ctx, ds4_pool_size(m->pool), it, &n);
    size_t b = 0;
    for (int i = 0; i < n; i++) b += it[i].bytes;
    return b;
}

int ds4_cpu_scratch_init(ds4_session *s) {
    scr_item it[SCR_MAX] = { 0 };
    int n = 0;
    scratch_plan(s->m, &s->sc, s->chunk, s->ctx, ds4_pool_size(s->m->pool), it, &n);
    for (int i = 0; i < n; i++) {
        *it[i].ptr = calloc(1, it[i].bytes ? it[i].bytes : 1);
        if (!*it[i].ptr) return DS4_ENOMEM;
        /* Commit every page now: calloc maps large blocks lazily, and the
         * first prefill chunk would otherwise pay a page fault and a page
         * clear per 4 KB of scratch (~15 % of a first 2048-token chunk at
         * the Flash shape, more in a VM).  Paying it at session creation
         * also makes the memory cost visible up front. */
        volatile uint8_t *b = *it[i].ptr;
        for (size_t o = 0; o < it[i].bytes; o += 4096) b[o] = 0;
    }
    return DS4_OK;
}

void ds4_cpu_scratch_free(ds4_session *s) {
    scr_item it[SCR_MAX] = { 0 };
    int n = 0;
    /* the plan only records where each pointer lives; free what is there */
    scratch_plan(s->m, &s->sc, s->chunk, s->ctx, ds4_pool_size(s->m->pool), it, &n);
    for (int i = 0; i < n; i++) {
        free(*it[i].ptr);
        *it[i].ptr = NULL;
    }
}

static int chunk_of(const ds4_session_params *p) {
    int ch = p->prefill_chunk > 0 ? p->prefill_chunk : 2048;
    if (ch > p->ctx_size) ch = p->ctx_size;
    return ch < 1 ? 1 : ch;
}

uint64_t ds4_session_memory_estimate(const ds4_model *m, int ctx_size) {
    ds4_session_params p;
    ds4_session_params_default(&p);
    p.ctx_size = ctx_size;
    int chunk = chunk_of(&p);
    uint64_t b = 0;
    for (int il = 0; il < m->w.cfg.n_layer; il++) {
        layer_sizes z = sizes_of(m, il, ctx_size, chunk);
        b += (z.raw + z.comp + 2 * z.st + z.icomp + 2 * z.ist) * sizeof(float);
    }
    b += scratch_bytes(m, chunk, ctx_size);
    b += (uint64_t)ctx_size * sizeof(int32_t) + (uint64_t)m->w.cfg.n_vocab * sizeof(float);
    return b;
}

static void state_reset(ds4_session *s) {
    const ds4_config *c = &s->m->w.cfg;
    for (int il = 0; il < c->n_layer; il++) {
        layer_state *st = &s->ls[il];
        layer_sizes z = sizes_of(s->m, il, s->ctx, s->chunk);
        st->raw_start = st->raw_len = 0;
        st->n_comp = st->n_icomp = 0;
        for (size_t i = 0; i < z.st; i++) { st->st_kv[i] = 0.0f; st->st_sc[i] = -INFINITY; }
        for (size_t i = 0; i < z.ist; i++) { st->ist_kv[i] = 0.0f; st->ist_sc[i] = -INFINITY; }
    }
    s->toks.n = 0;
    s->has_logits = 0;
    /* every checkpoint referred to rows that are gone now */
    for (int i = 0; i < DS4_SESSION_CKPTS; i++) s->ck[i].n = -1;
    ds4_dist_session_reset(s);
}

ds4_session *ds4_session_new(ds4_model *m, const ds4_session_params *p, char **err) {
    ds4_session_params def;
    if (!p) { ds4_session_params_default(&def); p = &def; }
    if (err) *err = NULL;
    if (p->ctx_size < 1 || p->ctx_size > (1 << 24)) {
        if (err) *err = strdup("context size must be between 1 and 16777216 tokens");
        return NULL;
    }
    ds4_session *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->m = m;
    s->ctx = p->ctx_size;
    s->chunk = chunk_of(p);
    s->no_qat = p->no_qat;
    const ds4_config *c = &m->w.cfg;
    s->ls = calloc((size_t)c->n_layer, sizeof *s->ls);
    s->logits = calloc((size_t)c->n_vocab, sizeof(float));
    if (!s->ls || !s->logits || ds4_tokens_reserve(&s->toks, (size_t)s->ctx)) goto oom;
    for (int il = 0; il < c->n_layer; il++) {
        layer_state *st = &s->ls[il];
        layer_sizes z = sizes_of(m, il, s->ctx, s->chunk);
        st->raw = malloc(z.raw * sizeof(float));
        st->raw_cap = (int)(z.raw / (size_t)c->head_dim);
        if (!st->raw) goto oom;
        if (z.comp) {
            st->comp = malloc(z.comp * sizeof(float));
            st->comp_cap = (int)(z.comp / (size_t)c->head_dim);
            st->st_kv = malloc(z.st * sizeof(float));
            st->st_sc = malloc(z.st * sizeof(float));
            if (!st->comp || !st->st_kv || !st->st_sc) goto oom;
        }
        if (z.icomp) {
            st->icomp = malloc(z.icomp * sizeof(float));
            st->ist_kv = malloc(z.ist * sizeof(float));
            st->ist_sc = malloc(z.ist * sizeof(float));
            if (!st->icomp || !st->ist_kv || !st->ist_sc) goto oom;
        }
    }
    if (ds4_cpu_scratch_init(s) != DS4_OK) goto oom;
    state_reset(s);
    ds4_dist_session_new(s);
    return s;
oom:
    if (err) {
        char msg[160];
        snprintf(msg, sizeof msg, "out of memory creating a session of %d tokens (needs ~%.1f MiB)",
                 p->ctx_size, ds4_session_memory_estimate(m, p->ctx_size) / 1048576.0);
        *err = strdup(msg);
    }
    ds4_session_free(s);
    return NULL;
}

void ds4_session_free(ds4_session *s) {
    if (!s) return;
    ds4_dist_session_free(s);
    if (s->ls) {
        for (int il = 0; il < s->m->w.cfg.n_layer; il++) {
            layer_state *st = &s->ls[il];
            free(st->raw); free(st->comp); free(st->st_kv); free(st->st_sc);
            free(st->icomp); free(st->ist_kv); free(st->ist_sc);
        }
        ds4_cpu_scratch_free(s);
    }
    for (int i = 0; i < DS4_SESSION_CKPTS; i++) {
        session_ckpt *k = &s->ck[i];
        free(k->logits); free(k->rows); free(k->raw_len); free(k->n_comp); free(k->n_icomp);
    }
    free(s->ls);
    free(s->logits);
    ds4_tokens_free(&s->toks);
    free(s);
}

void ds4_session_reset(ds4_session *s) { state_reset(s); }
int ds4_session_n_tokens(const ds4_session *s) { return (int)s->toks.n; }
const int32_t *ds4_session_tokens(const ds4_session *s) { return s->toks.v; }
int ds4_session_ctx_size(const ds4_session *s) { return s->ctx; }
const float *ds4_session_logits(const ds4_session *s) { return s->has_logits ? s->logits : NULL; }
void ds4_session_set_decode_only(ds4_session *s, int on) { s->decode_only = on; }

void ds4_session_capture(ds4_session *s, ds4_buf *logits_rows, ds4_buf *hidden_rows) {
    s->cap_hidden = hidden_rows;
    if (logits_rows && !s->cap_logits) {
        /* all-position logits need a [chunk][vocab] head output */
        float *l = realloc(s->sc.logits, (size_t)s->chunk * s->m->w.cfg.n_vocab * sizeof(float));
        if (!l) return;
        s->sc.logits = l;
        /* the head input rows must hold a whole chunk too (already [T][D]) */
    }
    s->cap_logits = logits_rows;
}

int ds4_session_eval(ds4_session *s, const int32_t *toks, int n,
                     ds4_progress_fn progress, void *ud) {
    if (n < 0) return DS4_EINVAL;
    if (n == 0) return DS4_OK;
    if ((int64_t)s->toks.n + n > s->ctx) return DS4_ECTX;
    int nv = s->m->w.cfg.n_vocab;
    for (int i = 0; i < n; i++)
        if (toks[i] < 0 || toks[i] >= nv) return DS4_EINVAL;
    int step = s->decode_only ? 1 : s->chunk;
    int done = 0;
    while (done < n) {
        if (progress && progress(ud, done, n)) return DS4_ECANCEL;
        int k = n - done < step ? n - done : step;
        int rc = ds4_cpu_eval_chunk(s, toks + done, k);
        if (rc != DS4_OK) {
            /* a chunk that failed half way leaves layers out of step */
            state_reset(s);
            return rc;
        }
        memcpy(s->toks.v + s->toks.n, toks + done, (size_t)k * sizeof(int32_t));
        s->toks.n += (size_t)k;
        done += k;
    }
    if (progress) progress(ud, n, n);
    return DS4_OK;
}

int ds4_session_sync(ds4_session *s, const int32_t *toks, int n,
                     ds4_progress_fn progress, void *ud, int *n_reused) {
    if (n_reused) *n_reused = 0;
    if (n < 0) return DS4_EINVAL;
    if (n > s->ctx) return DS4_ECTX;
    size_t lcp = 0;
    while (lcp < s->toks.n && lcp < (size_t)n && s->toks.v[lcp] == toks[lcp]) lcp++;
    if (lcp == s->toks.n && (lcp < (size_t)n || s->has_logits || n == 0)) {
        if (n_reused) *n_reused = (int)lcp;
        return ds4_session_eval(s, toks + lcp, n - (int)lcp, progress, ud);
    }
    /* The state cannot be rewound by itself: raw rows older than the window
     * are gone, compressed rows pool whole windows and the frontiers only
     * move forward.  A RAM checkpoint within the common prefix brings it
     * back exactly (below); without one, any divergence (or a shorter
     * sequence) rebuilds from the start. */
    int c = ds4_session_rewind_point(s, (int)lcp);
    if (c > 0 && ds4_session_rewind(s, c) == DS4_OK) {
        if (n_reused) *n_reused = c;
        return ds4_session_eval(s, toks + c, n - c, progress, ud);
    }
    state_reset(s);
    return ds4_session_eval(s, toks, n, progress, ud);
}

/* ---------------------------------------------------------------------- */
/* RAM checkpoints (ds4.h).  What a later evaluation changes, per layer:   */
/* the raw rows of the window (a checkpoint keeps the last min(n, n_swa),  */
/* which is all attention reads), the compressor and indexer frontiers     */
/* (fixed size), and the compressed-row counts.  Rows below those counts   */
/* are only ever appended to, so they are not copied: a checkpoint is      */
/* valid while the session still holds all of its tokens (state_reset     */
/* drops every checkpoint; a rewind drops the ones above its point).      */
/* ---------------------------------------------------------------------- */

static int raw_live(const layer_state *st, const ds4_config *c);

static size_t ckpt_floats(const ds4_session *s) {
    const ds4_config *c = &s->m->w.cfg;
    size_t f = 0;
    for (int il = 0; il < c->n_layer; il++) {
        layer_sizes z = sizes_of(s->m, il, s->ctx, s->chunk);
        f += (size_t)c->n_swa * c->head_dim + 2 * z.st + 2 * z.ist;
    }
    return f;
}

uint64_t ds4_session_checkpoint_bytes(const ds4_session *s) {
    const ds4_config *c = &s->m->w.cfg;
    return (ckpt_floats(s) + (size_t)c->n_vocab) * sizeof(float) +
           3 * (size_t)c->n_layer * sizeof(int);
}

int ds4_session_checkpoint(ds4_session *s, int slot) {
    if (slot < 0 || slot >= DS4_SESSION_CKPTS) return DS4_EINVAL;
    const ds4_config *c = &s->m->w.cfg;
    session_ckpt *k = &s->ck[slot];
    if (!k->rows) {
        k->rows = malloc(ckpt_floats(s) * sizeof(float));
        k->logits = malloc((size_t)c->n_vocab * sizeof(float));
        k->raw_len = malloc((size_t)c->n_layer * sizeof(int));
        k->n_comp = malloc((size_t)c->n_layer * sizeof(int));
        k->n_icomp = malloc((size_t)c->n_layer * sizeof(int));
        if (!k->rows || !k->logits || !k->raw_len || !k->n_comp || !k->n_icomp) {
            free(k->rows); free(k->logits); free(k->raw_len); free(k->n_comp); free(k->n_icomp);
            memset(k, 0, sizeof *k);
            k->n = -1;
            return DS4_ENOMEM;
        }
    }
    float *o = k->rows;
    for (int il = 0; il < c->n_layer; il++) {
        const layer_state *st = &s->ls[il];
        layer_sizes z = sizes_of(s->m, il, s->ctx, s->chunk);
        int live = raw_live(st, c);
        size_t rn = (size_t)live * c->head_dim;
        memcpy(o, st->raw + (size_t)(st->raw_start + st->raw_len - live) * c->head_dim,
               rn * sizeof(float));
        o += (size_t)c->n_swa * c->head_dim;
        k->raw_len[il] = live;
        k->n_comp[il] = st->n_comp;
        k->n_icomp[il] = st->n_icomp;
        if (z.st) {
            memcpy(o, st->st_kv, z.st * sizeof(float));
            memcpy(o + z.st, st->st_sc, z.st * sizeof(float));
            o += 2 * z.st;
        }
        if (z.ist) {
            memcpy(o, st->ist_kv, z.ist * sizeof(float));
            memcpy(o + z.ist, st->ist_sc, z.ist * sizeof(float));
            o += 2 * z.ist;
        }
    }
    k->has_logits = s->has_logits;
    if (s->has_logits) memcpy(k->logits, s->logits, (size_t)c->n_vocab * sizeof(float));
    k->n = (int)s->toks.n;
    ds4_dist_session_checkpoint(s, slot);
    return DS4_OK;
}

int ds4_session_checkpoint_tokens(const ds4_session *s, int slot) {
    if (slot < 0 || slot >= DS4_SESSION_CKPTS || !s->ck[slot].rows) return -1;
    return s->ck[slot].n;
}

int ds4_session_rewind_point(const ds4_session *s, int n) {
    int best = 0;
    for (int i = 0; i < DS4_SESSION_CKPTS; i++) {
        const session_ckpt *k = &s->ck[i];
        if (k->rows && k->n > best && k->n <= n && k->n <= (int)s->toks.n &&
            (k->n < n || k->has_logits))
            best = k->n;
    }
    return best;
}

int ds4_session_rewind(ds4_session *s, int n) {
    const ds4_config *c = &s->m->w.cfg;
    session_ckpt *k = NULL;
    for (int i = 0; i < DS4_SESSION_CKPTS; i++)
        if (s->ck[i].rows && s->ck[i].n == n && n > 0 && n <= (int)s->toks.n) k = &s->ck[i];
    if (!k) return DS4_EINVAL;
    const float *o = k->rows;
    for (int il = 0; il < c->n_layer; il++) {
        layer_state *st = &s->ls[il];
        layer_sizes z = sizes_of(s->m, il, s->ctx, s->chunk);
        st->raw_start = 0;
        st->raw_len = k->raw_len[il];
        memcpy(st->raw, o, (size_t)k->raw_len[il] * c->head_dim * sizeof(float));
        o += (size_t)c->n_swa * c->head_dim;
        st->n_comp = k->n_comp[il];
        st->n_icomp = k->n_icomp[il];
        if (z.st) {
            memcpy(st->st_kv, o, z.st * sizeof(float));
            memcpy(st->st_sc, o + z.st, z.st * sizeof(float));
            o += 2 * z.st;
        }
        if (z.ist) {
            memcpy(st->ist_kv, o, z.ist * sizeof(float));
            memcpy(st->ist_sc, o + z.ist, z.ist * sizeof(float));
            o += 2 * z.ist;
        }
    }
    s->has_logits = k->has_logits;
    if (k->has_logits) memcpy(s->logits, k->logits, (size_t)c->n_vocab * sizeof(float));
    s->toks.n = (size_t)n;
    /* checkpoints above this point refer to rows the next evaluation
     * overwrites */
    for (int i = 0; i < DS4_SESSION_CKPTS; i++)
        if (s->ck[i].n > n) s->ck[i].n = -1;
    ds4_dist_session_rewind(s, n);
    return DS4_OK;
}

/* The buffer may hold more than the window between compactions; only the
 * last n_swa rows are state. */
static int raw_live(const layer_state *st, const ds4_config *c) {
    return st->raw_len < c->n_swa ? st->raw_len : c->n_swa;
}

uint64_t ds4_session_kv_bytes(const ds4_session *s) {
    const ds4_config *c = &s->m->w.cfg;
    uint64_t b = 0;
    for (int il = 0; il < c->n_layer; il++) {
        const layer_state *st = &s->ls[il];
        layer_sizes z = sizes_of(s->m, il, s->ctx, s->chunk);
        b += (uint64_t)raw_live(st, c) * c->head_dim * 4;
        b += (uint64_t)st->n_comp * c->head_dim * 4 + 2 * z.st * 4;
        b += (uint64_t)st->n_icomp * c->idx_dim * 4 + 2 * z.ist * 4;
    }
    return b;
}

/* ---------------------------------------------------------------------- */
/* Snapshots                                                               */
/*                                                                         */
/* Little-endian, all u32 unless noted:                                    */
/*   magic "DS4S", version 1, n_layer, n_embd, head_dim, idx_dim, n_vocab, */
/*   n_swa, n_tokens, flags (bit 0: no-qat state)                          */
/*   i32 tokens[n_tokens]                                                  */
/*   f32 logits[n_vocab]   (zeros when n_tokens == 0)                      */
/*   per layer: u32 ratio, raw_len, n_comp, n_icomp;                       */
/*     f32 raw[raw_len][head_dim] (oldest first)                           */
/*     ratio != 0: f32 comp[n_comp][head_dim], state_kv, state_score       */
/*     indexer:    f32 icomp[n_icomp][idx_dim], istate_kv, istate_score    */
/* ---------------------------------------------------------------------- */

#define SNAP_MAGIC 0x53345344u   /* "DS4S" */
#define SNAP_VERSION 1u

uint64_t ds4_session_snapshot_size(const ds4_session *s) {
    const ds4_config *c = &s->m->w.cfg;
    uint64_t b = 10 * 4 + s->toks.n * 4 + (uint64_t)c->n_vocab * 4;
    for (int il = 0; il < c->n_layer; il++) {
        const layer_state *st = &s->ls[il];
        layer_sizes z = sizes_of(s->m, il, s->ctx, s->chunk);
        b += 16 + (uint64_t)raw_live(st, c) * c->head_dim * 4;
        b += (uint64_t)st->n_comp * c->head_dim * 4 + 2 * z.st * 4;
        b += (uint64_t)st->n_icomp * c->idx_dim * 4 + 2 * z.ist * 4;
    }
    return b;
}

/* Streams the snapshot through `w` (a file writer, a buffer): nothing of
 * snapshot size is allocated. */
int ds4_session_snapshot_write(const ds4_session *s, ds4_write_fn w, void *ud) {
    const ds4_config *c = &s->m->w.cfg;
    if (ds4_dist_on()) return DS4_EUNSUP;   /* the layers' state lives on several ranks */
    uint32_t hdr[10] = { SNAP_MAGIC, SNAP_VERSION, (uint32_t)c->n_layer, (uint32_t)c->n_embd,
                         (uint32_t)c->head_dim, (uint32_t)c->idx_dim, (uint32_t)c->n_vocab,
                         (uint32_t)c->n_swa, (uint32_t)s->toks.n, s->no_qat ? 1u : 0u };
#define PUT(p, n) do { int rc_ = w(ud, (p), (n)); if (rc_) return rc_; } while (0)
    PUT(hdr, sizeof hdr);
    PUT(s->toks.v, s->toks.n * 4);
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
        const layer_state *st = &s->ls[il];
        layer_sizes z = sizes_of(s->m, il, s->ctx, s->chunk);
        int live = raw_live(st, c);
        uint32_t lh[4] = { (uint32_t)s->m->w.layers[il].ratio, (uint32_t)live,
                           (uint32_t)st->n_comp, (uint32_t)st->n_icomp };
        PUT(lh, sizeof lh);
        PUT(st->raw + (size_t)(st->raw_start + st->raw_len - live) * c->head_dim,
            (size_t)live * c->head_dim * 4);
        if (z.comp) {
            PUT(st->comp, (size_t)st->n_comp * c->head_dim * 4);
            PUT(st->st_kv, z.st * 4);
            PUT(st->st_sc, z.st * 4);
        }
        if (z.icomp) {
            PUT(st->icomp, (size_t)st->n_icomp * c->idx_dim * 4);
            PUT(st->ist_kv, z.ist * 4);
            PUT(st->ist_sc, z.ist * 4);
        }
    }
#undef PUT
    return DS4_OK;
}

static int buf_writer(void *ud, const void *p, size_t n) {
    return ds4_buf_append(ud, p, n);
}

int ds4_session_snapshot(const ds4_session *s, ds4_buf *out) {
    if (ds4_buf_reserve(out, ds4_session_snapshot_size(s))) return DS4_ENOMEM;
    return ds4_session_snapshot_write(s, buf_writer, out);
}

typedef struct { const uint8_t *p; size_t n, at; } rd;

static int rd_take(rd *r, void *dst, size_t n) {
    if (n > r->n - r->at) return -1;
    if (dst) memcpy(dst, r->p + r->at, n);
    r->at += n;
    return 0;
}

static int fail(char **err, const char *msg) {
    if (err) *err = strdup(msg);
    return DS4_EFORMAT;
}

int ds4_session_restore(ds4_session *s, const void *data, size_t len, char **err) {
    const ds4_config *c = &s->m->w.cfg;
    rd r = { data, len, 0 };
    uint32_t h[10];
    if (err) *err = NULL;
    if (ds4_dist_on()) {
        if (err) *err = strdup("snapshot: not supported with --dist");
        return DS4_EUNSUP;
    }
    if (rd_take(&r, h, sizeof h)) return fail(err, "snapshot: truncated header");
    if (h[0] != SNAP_MAGIC) return fail(err, "snapshot: bad magic");
    if (h[1] != SNAP_VERSION) return fail(err, "snapshot: unsupported version");
    if (h[2] != (uint32_t)c->n_layer || h[3] != (uint32_t)c->n_embd ||
        h[4] != (uint32_t)c->head_dim || h[5] != (uint32_t)c->idx_dim ||
        h[6] != (uint32_t)c->n_vocab || h[7] != (uint32_t)c->n_swa)
        return fail(err, "snapshot: made for a different model shape");
    if ((h[9] & 1u) != (s->no_qat ? 1u : 0u))
        return fail(err, "snapshot: numerics mode (--no-qat) differs from this session's");
    uint32_t n = h[8];
    if (n > (uint32_t)s->ctx) return fail(err, "snapshot: more tokens than this session's context");
    /* Validate everything before touching the live state. */
    size_t tok_at = r.at;
    if (rd_take(&r, NULL, (size_t)n * 4)) return fail(err, "snapshot: truncated tokens");
    for (uint32_t i = 0; i < n; i++) {
        int32_t t;
        memcpy(&t, r.p + tok_at + 4 * (size_t)i, 4);
        if (t < 0 || t >= c->n_vocab) return fail(err, "snapshot: token id out of range");
    }
    size_t logit_at = r.at;
    if (rd_take(&r, NULL, (size_t)c->n_vocab * 4)) return fail(err, "snapshot: truncated logits");
    size_t layer_at = r.at;
    for (int il = 0; il < c->n_layer; il++) {
        layer_sizes z = sizes_of(s->m, il, s->ctx, s->chunk);
        uint32_t lh[4];
        if (rd_take(&r, lh, sizeof lh)) return fail(err, "snapshot: truncated layer header");
        int R = s->m->w.layers[il].ratio;
        uint32_t want_raw = n < (uint32_t)c->n_swa ? n : (uint32_t)c->n_swa;
        if (lh[0] != (uint32_t)R || lh[1] != want_raw ||
            lh[2] != (R ? n / (uint32_t)R : 0) ||
            lh[3] != (z.icomp ? n / (uint32_t)R : 0))
            return fail(err, "snapshot: layer state does not match its token count");
        size_t need = (size_t)lh[1] * c->head_dim * 4;
        if (z.comp) need += (size_t)lh[2] * c->head_dim * 4 + 2 * z.st * 4;
        if (z.icomp) need += (size_t)lh[3] * c->idx_dim * 4 + 2 * z.ist * 4;
        if (rd_take(&r, NULL, need)) return fail(err, "snapshot: truncated layer data");
    }
    if (r.at != len) return fail(err, "snapshot: trailing bytes");

    /* Commit. */
    state_reset(s);
    memcpy(s->toks.v, r.p + tok_at, (size_t)n * 4);
    s->toks.n = n;
    memcpy(s->logits, r.p + logit_at, (size_t)c->n_vocab * 4);
    s->has_logits = n > 0;
    r.at = layer_at;
    for (int il = 0; il < c->n_layer; il++) {
        layer_state *st = &s->ls[il];
        layer_sizes z = sizes_of(s->m, il, s->ctx, s->chunk);
        uint32_t lh[4];
        rd_take(&r, lh, sizeof lh);
        st->raw_start = 0;
        st->raw_len = (int)lh[1];
        rd_take(&r, st->raw, (size_t)lh[1] * c->head_dim * 4);
        if (z.comp) {
            st->n_comp = (int)lh[2];
            rd_take(&r, st->comp, (size_t)lh[2] * c->head_dim * 4);
            rd_take(&r, st->st_kv, z.st * 4);
            rd_take(&r, st->st_sc, z.st * 4);
        }
        if (z.icomp) {
            st->n_icomp = (int)lh[3];
            rd_take(&r, st->icomp, (size_t)lh[3] * c->idx_dim * 4);
            rd_take(&r, st->ist_kv, z.ist * 4);
            rd_take(&r, st->ist_sc, z.ist * 4);
        }
    }
    return DS4_OK;
}
