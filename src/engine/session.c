/*
 * session.c -- a token sequence and its KV state (docs/MODEL.md §8).
 *
 * Owns: what every model graph's session shares: the token list, prefix
 * reuse (sync), chunking of evaluations, the batched step's grouping, the
 * staged-pass bookkeeping (speculative decoding, docs/SPEC.md), the
 * checkpoint slots' validity, steering and capture settings, errors.  The
 * graph's state and arithmetic are its own, reached through the table of
 * its operations (src/models/graph.h, s->m->graph: DeepSeek V4's in
 * models/deepseek4_state.c and deepseek4.c, glm-dsa's in glm_dsa.c).
 * Must not: name a graph (no branch on the architecture here), allocate
 * per token, or leave a half-evaluated chunk visible: a chunk either
 * completes or (on error) the session is reset.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/imatrix.h"
#include "engine/transport.h"
#include "models/graph.h"

void ds4_session_params_default(ds4_session_params *p) {
    memset(p, 0, sizeof *p);
    p->ctx_size = 4096;
    p->prefill_chunk = 2048;
    p->no_qat = 0;
}

static const ds4_graph *graph_of(const ds4_session *s) { return s->m->graph; }

static int chunk_of(const ds4_session_params *p) {
    int ch = p->prefill_chunk > 0 ? p->prefill_chunk : 2048;
    if (ch > p->ctx_size) ch = p->ctx_size;
    return ch < 1 ? 1 : ch;
}

/* Default parameters (storage roundings on: f16 KV rows). */
uint64_t ds4_session_memory_estimate(const ds4_model *m, int ctx_size) {
    uint64_t kv, scr;
    ds4_session_plan_weights(&m->w, ctx_size, ds4_pool_size(m->pool), &kv, &scr);
    return kv + scr;
}

/* The session part of ds4_memory_plan (inspect.c): KV state and scratch
 * of the default session at ctx_size for bound weights, no loaded model
 * (the graph's plan). */
void ds4_session_plan_weights(const ds4_weights *w, int ctx_size, int nth,
                              uint64_t *kv, uint64_t *scratch) {
    const ds4_graph *g = ds4_graph_for(w->cfg.arch);
    if (!g) { *kv = *scratch = 0; return; }
    g->plan(w, ctx_size, nth, kv, scratch);
}

static void state_reset(ds4_session *s) {
    graph_of(s)->state_reset(s);
    s->toks.n = 0;
    s->has_logits = 0;
    /* every checkpoint referred to rows that are gone now */
    for (int i = 0; i < DS4_SESSION_CKPTS; i++) s->ck[i].n = -1;
    s->stg_n = 0;
    dist_session_reset(s);
}

void ds4_session_clear(ds4_session *s) { state_reset(s); }

ds4_session *ds4_session_new(ds4_model *m, const ds4_session_params *p, char **err) {
    ds4_session_params def;
    if (!p) { ds4_session_params_default(&def); p = &def; }
    if (err) *err = NULL;
    if (p->ctx_size < 1 || p->ctx_size > DS4_MAX_CTX) {
        ds4_set_err(err, DS4_EINVAL, "context size must be between 1 and %d tokens", DS4_MAX_CTX);
        return NULL;
    }
    const ds4_graph *g = m->graph;
    if (dist_on() && !(g->caps & DS4_GRAPH_DIST)) {
        ds4_set_err(err, DS4_EUNSUP, "--dist is not supported for %s models", g->name);
        return NULL;
    }
    if (dist_on() && !(g->caps & DS4_GRAPH_DIST_EXPERTS) && dist_experts_mode(m->w.cfg.n_expert)) {
        ds4_set_err(err, DS4_EUNSUP, "--dist experts is not supported for %s models yet: use --dist pipeline",
                    g->name);
        return NULL;
    }
    ds4_session *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->m = m;
    s->ctx = p->ctx_size;
    s->chunk = chunk_of(p);
    s->no_qat = p->no_qat;
    s->kv16 = !p->no_qat;
    const ds4_config *c = &m->w.cfg;
    s->logits = calloc((size_t)c->n_vocab, sizeof(float));
    if (!s->logits || ds4_tokens_reserve(&s->toks, (size_t)s->ctx)) goto oom;
    s->logits_rows = 1;
    if (g->state_new(s) != DS4_OK) goto oom;
    state_reset(s);
    if (g->caps & DS4_GRAPH_DIST) dist_session_new(s);
    return s;
oom:
    ds4_set_err(err, DS4_ENOMEM, "out of memory creating a session of %d tokens (needs ~%.1f MiB)",
                p->ctx_size, ds4_session_memory_estimate(m, p->ctx_size) / 1048576.0);
    ds4_session_free(s);
    return NULL;
}

void ds4_session_free(ds4_session *s) {
    if (!s) return;
    ds4_imatrix_free(s->imatrix);
    dist_session_free(s);
    graph_of(s)->state_free(s);
    for (int i = 0; i < DS4_SESSION_CKPTS; i++) {
        session_ckpt *k = &s->ck[i];
        free(k->logits); free(k->rows); free(k->raw_len); free(k->n_comp); free(k->n_icomp);
    }
    free(s->logits);
    free(s->steer);
    ds4_tokens_free(&s->toks);
    free(s);
}

int ds4_session_set_steering(ds4_session *s, const float *dir, float scale,
                             int layer_first, int layer_last) {
    const ds4_config *c = &s->m->w.cfg;
    if (!(graph_of(s)->caps & DS4_GRAPH_STEER) && dir && scale != 0.0f) return DS4_EUNSUP;
    if (!dir || scale == 0.0f) {   /* off: the forward pass is untouched */
        free(s->steer);
        s->steer = NULL;
        return DS4_OK;
    }
    if (layer_first < 0 || layer_last >= c->n_layer || layer_first > layer_last || !isfinite(scale))
        return DS4_EINVAL;
    float *v = malloc((size_t)c->n_embd * sizeof *v);
    if (!v) return DS4_ENOMEM;
    /* the product is rounded once here, so the shift is exactly this
     * float vector: what --dump-hidden shows and the test checks */
    for (int k = 0; k < c->n_embd; k++) {
        v[k] = scale * dir[k];
        if (!isfinite(v[k])) { free(v); return DS4_EINVAL; }
    }
    free(s->steer);
    s->steer = v;
    s->steer_l0 = layer_first;
    s->steer_l1 = layer_last;
    return DS4_OK;
}

void ds4_session_reset(ds4_session *s) { state_reset(s); }
int ds4_session_n_tokens(const ds4_session *s) { return (int)s->toks.n; }
int ds4_session_no_qat(const ds4_session *s) { return s->no_qat; }
const int32_t *ds4_session_tokens(const ds4_session *s) { return s->toks.v; }
int ds4_session_ctx_size(const ds4_session *s) { return s->ctx; }
const float *ds4_session_logits(const ds4_session *s) { return s->has_logits ? s->logits : NULL; }
void ds4_session_set_decode_only(ds4_session *s, int on) { s->decode_only = on; }

int ds4_session_imatrix_begin(ds4_session *s) {
    const ds4_config *c = &s->m->w.cfg;
    if (!(graph_of(s)->caps & DS4_GRAPH_IMATRIX)) return DS4_EUNSUP;
    ds4_imatrix_free(s->imatrix);
    s->imatrix = ds4_imatrix_alloc((uint32_t)c->n_layer, (uint32_t)c->n_expert, (uint32_t)c->n_embd,
                                   (uint32_t)c->n_ff_exp);
    return s->imatrix ? DS4_OK : DS4_ENOMEM;
}

int ds4_session_imatrix_save(const ds4_session *s, const char *path, char **err) {
    if (!s->imatrix) {
        *err = strdup("no importance matrix is being collected (ds4_session_imatrix_begin)");
        return -1;
    }
    return ds4_imatrix_save(s->imatrix, path, err);
}

void ds4_session_capture(ds4_session *s, ds4_buf *logits_rows, ds4_buf *hidden_rows) {
    const ds4_graph *g = graph_of(s);
    s->cap_hidden = g->caps & DS4_GRAPH_HIDDEN ? hidden_rows : NULL;   /* else: none yet */
    /* all-position logits need a [chunk][vocab] head output (a graph
     * without logits_reserve always has one) */
    if (logits_rows && !s->cap_logits && g->logits_reserve && g->logits_reserve(s, s->chunk) != DS4_OK)
        return;
    s->cap_logits = logits_rows;
}

void ds4_session_capture_indexer(ds4_session *s, ds4_buf *rows) {
    s->cap_indexer = graph_of(s)->caps & DS4_GRAPH_INDEXER ? rows : NULL;
}

int ds4_session_eval(ds4_session *s, const int32_t *toks, int n,
                     ds4_progress_fn progress, void *ud) {
    if (n < 0) return DS4_EINVAL;
    if (n == 0) return DS4_OK;
    if ((int64_t)s->toks.n + n > s->ctx) return DS4_ECTX;
    s->stg_n = 0;   /* a staged pass is now final */
    int nv = s->m->w.cfg.n_vocab;
    for (int i = 0; i < n; i++)
        if (toks[i] < 0 || toks[i] >= nv) return DS4_EINVAL;
    int step = s->decode_only ? 1 : s->chunk;
    int done = 0;
    while (done < n) {
        if (progress && progress(ud, done, n)) return DS4_ECANCEL;
        int k = n - done < step ? n - done : step;
        int rc = graph_of(s)->eval_chunk(s, toks + done, k);
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

/* The batched step (ds4.h).  Items that can share a forward pass are
 * packed into passes over the scratch of one of them (the owner: the
 * largest context, so its attention and indexer buffers fit every item's
 * keys); each pass reads every weight once for all of its rows
 * (deepseek4.c, ds4_cpu_eval_batch).  Evaluated alone, through
 * ds4_session_eval, and with the same result: an item longer than a
 * chunk (it needs several passes), a decode-only session's prefill, a
 * session that captures logits or hidden states, collects an importance
 * matrix or runs a staged pass, sessions of another model or another
 * --no-qat setting than the owner's, and everything under --dist (whose
 * pipeline and expert ranks follow one session).  Steering joins the
 * batch: it is applied per row. */
static int batchable(const ds4_session *s, int n) {
    return graph_of(s)->eval_batch && n <= s->chunk && !(s->decode_only && n > 1) && !s->cap_logits && !s->cap_hidden &&
           !s->cap_indexer &&
           !s->imatrix && !s->stg_on && !dist_on();
}

/* the owner's logits must hold one row per item of a pass (kept once
 * grown) */
static int logits_rows_reserve(ds4_session *s, int rows) {
    const ds4_graph *g = graph_of(s);
    return g->logits_reserve ? g->logits_reserve(s, rows) : DS4_OK;
}

int ds4_session_eval_batch(ds4_batch_item *items, int n_items) {
    if (n_items < 0 || (n_items > 0 && !items)) return DS4_EINVAL;
    for (int i = 0; i < n_items; i++)
        for (int j = 0; j < i; j++)
            if (items[i].s && items[i].s == items[j].s) return DS4_EINVAL;
    /* pending[i]: 1 = waits for a batched pass, 0 = done (rc set); bi[g]:
     * the batch index of a pass's item g.  Without them (no memory) every
     * item is evaluated alone, with the same results. */
    size_t na = (size_t)(n_items > 0 ? n_items : 1);
    ds4_cpu_item *ci = malloc(na * sizeof *ci);
    int *bi = malloc(na * sizeof *bi);
    char *pending = calloc(na, 1);
    int grouped = ci && bi && pending;
    for (int i = 0; i < n_items; i++) {
        ds4_batch_item *b = &items[i];
        ds4_session *s = b->s;
        b->rc = DS4_OK;
        if (!s) { b->rc = DS4_EINVAL; continue; }
        /* what ds4_session_eval refuses up front, refused here (state
         * untouched, the other items go on) */
        if (b->n < 0 || (b->n > 0 && !b->toks)) { b->rc = DS4_EINVAL; continue; }
        if (b->n == 0) continue;
        if ((int64_t)s->toks.n + b->n > s->ctx) { b->rc = DS4_ECTX; continue; }
        s->stg_n = 0;   /* a staged pass is now final (as ds4_session_eval) */
        int nv = s->m->w.cfg.n_vocab;
        for (int t = 0; t < b->n; t++)
            if (b->toks[t] < 0 || b->toks[t] >= nv) { b->rc = DS4_EINVAL; break; }
        if (b->rc != DS4_OK) continue;
        if (grouped && batchable(s, b->n)) pending[i] = 1;
        else b->rc = ds4_session_eval(s, b->toks, b->n, NULL, NULL);
    }
    while (grouped) {
        /* the owner of the next pass: the pending session with the largest
         * context (then chunk) */
        int o = -1;
        for (int i = 0; i < n_items; i++) {
            if (!pending[i]) continue;
            const ds4_session *s = items[i].s;
            if (o < 0 || s->ctx > items[o].s->ctx ||
                (s->ctx == items[o].s->ctx && s->chunk > items[o].s->chunk))
                o = i;
        }
        if (o < 0) break;
        ds4_session *own = items[o].s;
        /* the owner first, then the others in order while their rows fit */
        int ng = 0, rows = 0;
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < n_items; i++) {
                if (!pending[i] || (pass == 0) != (i == o)) continue;
                ds4_session *s = items[i].s;
                if (s->m != own->m || s->no_qat != own->no_qat) continue;
                if (rows + items[i].n > own->chunk) continue;
                ci[ng] = (ds4_cpu_item){ .s = s, .toks = items[i].toks, .n = items[i].n };
                bi[ng++] = i;
                rows += items[i].n;
                pending[i] = 0;
            }
        if (ng == 1 || logits_rows_reserve(own, ng) != DS4_OK) {
            /* one item (or no room for the logits rows): evaluated alone */
            for (int g = 0; g < ng; g++)
                items[bi[g]].rc = ds4_session_eval(ci[g].s, ci[g].toks, ci[g].n, NULL, NULL);
            continue;
        }
        int rc = graph_of(own)->eval_batch(own, ci, ng);
        for (int g = 0; g < ng; g++) {
            ds4_session *s = ci[g].s;
            if (rc != DS4_OK) {
                state_reset(s);   /* layers out of step, as in ds4_session_eval */
            } else {
                memcpy(s->toks.v + s->toks.n, ci[g].toks, (size_t)ci[g].n * sizeof(int32_t));
                s->toks.n += (size_t)ci[g].n;
            }
            items[bi[g]].rc = rc;
        }
    }
    free(ci);
    free(bi);
    free(pending);
    int first = DS4_OK;
    for (int i = 0; i < n_items; i++)
        if (items[i].rc != DS4_OK && first == DS4_OK) first = items[i].rc;
    return first;
}

int ds4_session_sync(ds4_session *s, const int32_t *toks, int n,
                     ds4_progress_fn progress, void *ud, int *n_reused) {
    if (n_reused) *n_reused = 0;
    if (n < 0) return DS4_EINVAL;
    if (n > s->ctx) return DS4_ECTX;
    s->stg_n = 0;
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
/* RAM checkpoints and rewinds (ds4.h): the graph's (a graph whose rows of */
/* a position never change needs none and rewinds by truncation).         */
/* ---------------------------------------------------------------------- */

uint64_t ds4_session_checkpoint_bytes(const ds4_session *s) { return graph_of(s)->checkpoint_bytes(s); }

int ds4_session_checkpoint(ds4_session *s, int slot) {
    if (slot < 0 || slot >= DS4_SESSION_CKPTS) return DS4_EINVAL;
    return graph_of(s)->checkpoint(s, slot);
}

int ds4_session_checkpoint_tokens(const ds4_session *s, int slot) {
    if (slot < 0 || slot >= DS4_SESSION_CKPTS) return -1;
    if (graph_of(s)->checkpoint_tokens) return graph_of(s)->checkpoint_tokens(s, slot);
    if (!s->ck[slot].rows) return -1;
    return s->ck[slot].n;
}

int ds4_session_rewind_point(const ds4_session *s, int n) { return graph_of(s)->rewind_point(s, n); }
int ds4_session_rewind(ds4_session *s, int n) { return graph_of(s)->rewind(s, n); }
uint64_t ds4_session_kv_bytes(const ds4_session *s) { return graph_of(s)->kv_bytes(s); }

/* ---------------------------------------------------------------------- */
/* Snapshots: the graph's format (each starts with its own magic, so one  */
/* graph's snapshot is refused by another's restore).                     */
/* ---------------------------------------------------------------------- */

uint64_t ds4_session_snapshot_size(const ds4_session *s) { return graph_of(s)->snapshot_size(s); }

/* Streams the snapshot through `w` (a file writer, a buffer): nothing of
 * snapshot size is allocated. */
int ds4_session_snapshot_write(const ds4_session *s, ds4_write_fn w, void *ud) {
    return graph_of(s)->snapshot_write(s, w, ud);
}

static int buf_writer(void *ud, const void *p, size_t n) {
    return ds4_buf_append(ud, p, n);
}

int ds4_session_snapshot(const ds4_session *s, ds4_buf *out) {
    if (ds4_buf_reserve(out, ds4_session_snapshot_size(s))) return DS4_ENOMEM;
    return ds4_session_snapshot_write(s, buf_writer, out);
}

/* Validates everything before touching the live state (the graph's). */
int ds4_session_restore(ds4_session *s, const void *data, size_t len, char **err) {
    if (err) *err = NULL;
    return graph_of(s)->restore(s, data, len, err);
}

/* ---------------------------------------------------------------------- */
/* Staged passes (speculative decoding, docs/SPEC.md)                      */
/*                                                                         */
/* ds4_session_eval_draft evaluates up to DS4_DRAFT_PASS_MAX tokens in one */
/* batched pass and keeps every position's logits; ds4_session_draft_     */
/* commit(n_keep) then keeps the first n_keep tokens and undoes the rest:  */
/* the graph's stage_begin saves what its rollback needs and stage_commit */
/* undoes (DeepSeek V4: deepseek4_state.c; a graph whose rows of a        */
/* position never change has nothing to save: the count alone).           */
/* Nothing is evaluated again.                                             */
/* ---------------------------------------------------------------------- */

int ds4_session_draft_capacity(const ds4_session *s) {
    return DS4_DRAFT_PASS_MAX < s->chunk ? DS4_DRAFT_PASS_MAX : s->chunk;
}

int ds4_session_eval_draft(ds4_session *s, const int32_t *toks, int n) {
    if (n < 1 || n > ds4_session_draft_capacity(s)) return DS4_EINVAL;
    if ((int64_t)s->toks.n + n > s->ctx) return DS4_ECTX;
    int nv = s->m->w.cfg.n_vocab;
    for (int i = 0; i < n; i++)
        if (toks[i] < 0 || toks[i] >= nv) return DS4_EINVAL;
    s->stg_n = 0;
    const ds4_graph *g = graph_of(s);
    int rc = g->stage_begin ? g->stage_begin(s, n) : DS4_OK;
    if (rc) return rc;
    s->stg_on = 1;
    rc = g->eval_chunk(s, toks, n);
    s->stg_on = 0;
    if (rc != DS4_OK) {
        state_reset(s);
        return rc;
    }
    s->stg_p0 = (int64_t)s->toks.n;
    s->stg_n = n;
    memcpy(s->toks.v + s->toks.n, toks, (size_t)n * sizeof(int32_t));
    s->toks.n += (size_t)n;
    return DS4_OK;
}

const float *ds4_session_draft_logits(const ds4_session *s, int i) {
    if (i < 0 || i >= s->stg_n) return NULL;
    return graph_of(s)->chunk_logits(s) + (size_t)i * s->m->w.cfg.n_vocab;
}

int ds4_session_draft_commit(ds4_session *s, int n_keep) {
    if (s->stg_n < 1 || n_keep < 1 || n_keep > s->stg_n) return DS4_EINVAL;
    const ds4_config *c = &s->m->w.cfg;
    const ds4_graph *g = graph_of(s);
    const int n = s->stg_n, drop = n - n_keep;
    const int64_t p0 = s->stg_p0, end = p0 + n_keep;
    s->stg_n = 0;
    if (drop == 0) return DS4_OK;
    if (g->stage_commit) g->stage_commit(s, n_keep);   /* s->toks.n still p0 + n */
    s->toks.n = (size_t)end;
    memcpy(s->logits, g->chunk_logits(s) + (size_t)(n_keep - 1) * c->n_vocab, (size_t)c->n_vocab * sizeof(float));
    s->has_logits = 1;
    return DS4_OK;
}
