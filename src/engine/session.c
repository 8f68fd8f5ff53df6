/*
 * session.c -- a token sequence and its KV state (docs/MODEL.md §8).
 *
 * Owns: the token list, the per-layer state buffers (allocated once for the
 * context size), prefix reuse (sync), chunking of evaluations, snapshots,
 * the memory estimate, and staged passes with their exact rollback
 * (speculative decoding, docs/SPEC.md).  The arithmetic is the backend's
 * (forward_cpu.c).  Must not: allocate per token (staging buffers come
 * with the first staged pass), or leave a half-evaluated chunk visible: a
 * chunk either completes or (on error) the session is reset.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/anon_map.h"
#include "engine/imatrix.h"
#include "engine/transport.h"

void ds4_session_params_default(ds4_session_params *p) {
    memset(p, 0, sizeof *p);
    p->ctx_size = 4096;
    p->prefill_chunk = 2048;
    p->no_qat = 0;
}

static int ratio_of(const ds4_model *m, int il) { return m->w.layers[il].ratio; }

/* GLM sessions keep their state in glm_dsa.c (s->glm) or glm5_next.c
 * (s->g5n); the V4 layer state, scratch, snapshots and staged passes are
 * DeepSeek V4's only.  is_glm: either GLM family (not V4); is_g5n:
 * glm5-next, whose recurrent state needs its own checkpoints, staged
 * passes and snapshots (dispatched before the glm-dsa branches). */
static int is_glm(const ds4_session *s) { return s->m->w.cfg.arch != DS4_ARCH_DEEPSEEK4; }
static int is_g5n(const ds4_session *s) { return s->m->w.cfg.arch == DS4_ARCH_GLM5_NEXT; }

static int comp_cap_of(int ctx, int R) { return R ? ctx / R + 1 : 0; }

/* Per-layer state sizes in elements (KV rows: kv_es bytes each; the
 * frontiers st/ist: floats). */
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

/* Most key rows one query token can see in any layer: the raw window
 * plus the compressed rows (at most top_k of them where an indexer
 * selects). */
static size_t keys_max(const ds4_model *m, int ctx) {
    const ds4_config *c = &m->w.cfg;
    size_t kmax = (size_t)c->n_swa;
    for (int il = 0; il < c->n_layer; il++) {
        const ds4_layer_weights *lw = &m->w.layers[il];
        size_t cc = (size_t)comp_cap_of(ctx, lw->ratio);
        if (lw->has_indexer && c->idx_topk > 0 && cc > (size_t)c->idx_topk) cc = (size_t)c->idx_topk;
        if ((size_t)c->n_swa + cc > kmax) kmax = (size_t)c->n_swa + cc;
    }
    return kmax + 1;
}

static int scratch_plan(const ds4_model *m, cpu_scratch *sc, int T, int ctx, int nth, int kv16,
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
    /* float-activation experts (F16 files, --no-qat) stage float rows:
     * only sized when some layer's experts take them (at the Flash shape
     * the float `down` inputs alone are 100 MB, twice over) */
    size_t fin = 0, fmid = 0;
    for (int il = 0; il < c->n_layer; il++) {
        const ds4_layer_weights *lw = &m->w.layers[il];
        if (act_kind_for(lw->ffn_gate_exps.type, !kv16) == ACT_F32)
            fin = D * 4 * (size_t)(T < MOE_T ? T : MOE_T);
        if (act_kind_for(lw->ffn_down_exps.type, !kv16) == ACT_F32)
            fmid = F * 4 * moe_pairs;
    }
    if (fin > qbytes) qbytes = fin;
    if (fmid > qbytes) qbytes = fmid;
    /* One block serves four buffers whose lives never overlap within a
     * sublayer (forward_cpu.c): flat (HC input norm, read only by the
     * mix projection at the start of each sublayer and in the head), q
     * (queries), heads (attention output: each (token, head block) item
     * reads its q block completely before writing the same block, so the
     * output overwrites its own queries), and dn (routed `down` outputs,
     * inside the MoE only).  At the Flash shape and chunk 2048 this is
     * 268 MB instead of 872 MB. */
    size_t qblk = (size_t)T * H * d * 4;
    if (moe_pairs * D * 4 > qblk) qblk = moe_pairs * D * 4;
    if ((size_t)T * N * D * 4 > qblk) qblk = (size_t)T * N * D * 4;
    int k = 0;
#define ITEM(p, n) do { if (k >= SCR_MAX) abort(); /* table too small: a bug */ \
    it[k].ptr = (void **)&(p); it[k].bytes = (n); k++; } while (0)
    ITEM(sc->X, T * N * D * 4);
    ITEM(sc->X2, T * N * D * 4);
    ITEM(sc->cur, T * D * 4);
    ITEM(sc->a, T * D * 4);
    ITEM(sc->mix, T * (M > N ? M : N) * 4);
    ITEM(sc->post, T * N * 4);
    ITEM(sc->comb, T * N * N * 4);
    ITEM(sc->qa, (size_t)T * c->q_lora * 4);
    ITEM(sc->qr, (size_t)T * c->q_lora * 4);
    ITEM(sc->q, qblk);              /* also flat, heads, dn: see above */
    ITEM(sc->kv, T * d * 4);
    ITEM(sc->ckv, T * 2 * d * 4);
    ITEM(sc->csc, T * 2 * d * 4);
    ITEM(sc->ikv, T * 2 * (ID ? ID : 1) * 4);
    ITEM(sc->isc, T * 2 * (ID ? ID : 1) * 4);
    ITEM(sc->iq, T * (IH * ID > 0 ? IH * ID : 1) * 4);
    ITEM(sc->iw, T * (IH ? IH : 1) * 4);
    ITEM(sc->low, T * G * OL * 4);
    ITEM(sc->y, T * D * 4);
    ITEM(sc->cs, (size_t)T * (c->n_rot / 2 + 1) * 4);
    ITEM(sc->sn, (size_t)T * (c->n_rot / 2 + 1) * 4);
    ITEM(sc->rlog, T * E * 4);
    ITEM(sc->sel, T * K * 4);
    ITEM(sc->wts, (T * K + moe_pairs) * 4);
    ITEM(sc->moe, T * D * 4);
    ITEM(sc->shared, T * D * 4);
    ITEM(sc->g, gu * 4);
    ITEM(sc->u, gu * 4);
    ITEM(sc->shared_g, (size_t)T * FS * 4);
    ITEM(sc->shared_u, (size_t)T * FS * 4);
    ITEM(sc->erows, moe_pairs * 4);
    ITEM(sc->ecount, E * 4);
    ITEM(sc->eoff, E * 4);
    ITEM(sc->topk, (size_t)T * (c->idx_topk ? c->idx_topk : 1) * 4);
    ITEM(sc->ntopk, T * 4);
    /* indexer scores, one row per thread: 1 MB each at 1M context (ratio 4) */
    sc->scores_rows = comp_max + 1;
    ITEM(sc->scores, (size_t)nth * (comp_max + 1) * 4);
    /* attention weights and key pointers: per thread, the most keys one
     * token can see (at 1M context 8.3K, not the 262K compressed rows of a
     * ratio-4 layer: the indexer keeps top_k of them) */
    const size_t kmax = keys_max(m, ctx);
    ITEM(sc->attn_w, (size_t)nth * VEC_HB * kmax * 4);
    ITEM(sc->attn_kp, (size_t)nth * kmax * sizeof(float *));
    /* f16 rows are read through float copies: a token's keys per thread
     * (converted once for all its head blocks), four indexer rows per
     * thread (a compressed row being finished is on its task's stack) */
    ITEM(sc->attn_kf, kv16 ? (size_t)nth * kmax * d * 4 : 0);
    ITEM(sc->idx_kf, kv16 ? (size_t)nth * 4 * (ID ? ID : 1) * 4 : 0);
    /* the indexer's FP4-coded queries and rows (forward_cpu.c idx_code_row:
     * integer block dots): codes, block scales and code sums of the
     * chunk's queries (a quarter of iq), and the visible rows of one item,
     * re-coded once per layer and call, 16 rows a group (at 1M context
     * 262K rows of a ratio-4 layer: 36 MB).  Only with the storage
     * roundings (kv16): without them nothing codes (idx_q_task). */
    const int coded = kv16 && IH > 0 && ID > 0 && ID % 32 == 0 && ID <= DS4_IDX_CODE_MAX;
    const size_t NB = coded ? ID / 32 : 0, ikr = coded ? (comp_max + 15) / 16 * 16 : 0;
    sc->ik_rows = ikr;
    ITEM(sc->iqc, coded ? (size_t)T * IH * ID : 0);
    ITEM(sc->iqp, coded ? (size_t)T * IH * NB * 4 : 0);
    ITEM(sc->iqs, coded ? (size_t)T * IH * NB * 4 : 0);
    ITEM(sc->iqok, coded ? (size_t)T * 4 : 0);
    ITEM(sc->ikc, ikr * ID);
    ITEM(sc->ikp, ikr * NB * 4);
    ITEM(sc->ikok, ikr);
    ITEM(sc->qscratch, 2 * qbytes);   /* two activation kinds at once (mm_multi) */
    ITEM(sc->qscratch2, 2 * E * sizeof(mm_group));
    ITEM(sc->ylast, T * D * 4);
    ITEM(sc->logits, (size_t)c->n_vocab * 4);
    ITEM(sc->ritem, (size_t)T * 4);
    ITEM(sc->rtok, (size_t)T * 4);
    ITEM(sc->hrow, (size_t)T * 4);
#undef ITEM
    *n_it = k;
    return DS4_OK;
}

/* Scratch blocks of 2 MB or more go on 2 MB pages (anon_map.h): the
 * prefill sweeps them (activations, the HC state, the MoE buffers: 1.2 GB
 * at chunk 2048 for medium q2, whose layer shape is Flash's), and on 4 KB
 * pages its 2048-token prefill ran 214-244 tok/s against 273-275
 * (docs/perf/kernels-diary.md, "The prefill by function").  sc.logits grows by
 * realloc, so it stays on calloc, as everything does under
 * AddressSanitizer (whose redzones then guard every block). */
#if defined(__SANITIZE_ADDRESS__)
#define SCR_MAP_MIN ((size_t)-1)
#else
#define SCR_MAP_MIN ((size_t)2 << 20)
#endif

static int scr_mapped(const ds4_session *s, const scr_item *it) {
    return it->bytes >= SCR_MAP_MIN && it->ptr != (void **)&s->sc.logits;
}

int ds4_cpu_scratch_init(ds4_session *s) {
    scr_item it[SCR_MAX] = { 0 };
    int n = 0;
    scratch_plan(s->m, &s->sc, s->chunk, s->ctx, ds4_pool_size(s->m->pool), s->kv16, it, &n);
    s->sc.kf_rows = keys_max(s->m, s->ctx);
    s->sc.flat = s->sc.heads = s->sc.dn = NULL;
    for (int i = 0; i < n; i++) {
        /* Every page committed now: large blocks are mapped lazily, and
         * the first prefill chunk would otherwise pay a page fault and a
         * page clear per page of scratch (~15 % of a first 2048-token
         * chunk at the Flash shape with 4 KB pages, more in a VM).  Paying
         * it at session creation also makes the memory cost visible up
         * front, and a lack of memory an error here. */
        if (scr_mapped(s, &it[i])) {
            *it[i].ptr = ds4_anon_map(it[i].bytes, 1);
        } else {
            *it[i].ptr = calloc(1, it[i].bytes ? it[i].bytes : 1);
            volatile uint8_t *b = *it[i].ptr;
            for (size_t o = 0; b && o < it[i].bytes; o += 4096) b[o] = 0;
        }
        if (!*it[i].ptr) return DS4_ENOMEM;
    }
    s->sc.flat = s->sc.heads = s->sc.dn = s->sc.q;   /* aliases, see scratch_plan */
    return DS4_OK;
}

void ds4_cpu_scratch_free(ds4_session *s) {
    scr_item it[SCR_MAX] = { 0 };
    int n = 0;
    /* the plan only records where each pointer lives; free what is there */
    scratch_plan(s->m, &s->sc, s->chunk, s->ctx, ds4_pool_size(s->m->pool), s->kv16, it, &n);
    for (int i = 0; i < n; i++) {
        if (scr_mapped(s, &it[i])) ds4_anon_unmap(*it[i].ptr, it[i].bytes);
        else free(*it[i].ptr);
        *it[i].ptr = NULL;
    }
    s->sc.flat = s->sc.heads = s->sc.dn = NULL;
}

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
 * of the default session at ctx_size for bound weights, no loaded model.
 * The plan functions read only m->w, so a model shell around the weights
 * serves them. */
void ds4_session_plan_weights(const ds4_weights *w, int ctx_size, int nth,
                              uint64_t *kv, uint64_t *scratch) {
    if (w->cfg.arch != DS4_ARCH_DEEPSEEK4) {
        /* the cached rows (and glm5-next's recurrent state), and the
         * chunk's scratch (the head's rows lead) */
        const ds4_config *c = &w->cfg;
        int ch = ctx_size < 2048 ? ctx_size : 2048;
        *kv = w->cfg.arch == DS4_ARCH_GLM5_NEXT ? ds4_g5n_plan_bytes(w, ctx_size) : ds4_glm_plan_bytes(w, ctx_size);
        *scratch = (uint64_t)ch * ((uint64_t)c->n_vocab + 16u * (uint64_t)c->n_embd) * sizeof(float) +
                   (uint64_t)ctx_size * 16;
        /* glm5-next's chunk rows also hold the HC streams (three copies)
         * and the KDA projections */
        if (w->cfg.arch == DS4_ARCH_GLM5_NEXT)
            *scratch += (uint64_t)ch * (3u * (uint64_t)c->n_hc * c->n_embd +
                                        10u * (uint64_t)c->n_head * c->kda_dim) * sizeof(float);
        (void)nth;
        return;
    }
    ds4_model shell;
    memset(&shell, 0, sizeof shell);
    shell.w = *w;
    ds4_session_params p;
    ds4_session_params_default(&p);
    p.ctx_size = ctx_size;
    int chunk = chunk_of(&p);
    uint64_t b = 0;
    for (int il = 0; il < w->cfg.n_layer; il++) {
        layer_sizes z = sizes_of(&shell, il, ctx_size, chunk);
        b += (z.raw + z.comp + z.icomp) * 2 + (2 * z.st + 2 * z.ist) * sizeof(float);
    }
    if (w->has_mtp) {
        /* the MTP block's state (mtp.c: raw rows, kept main states, its
         * own state and logits, and the q of a sampled draft chain, which
         * is allocated only on the first sampled draft) */
        const ds4_config *c = &w->cfg;
        uint64_t nd = (uint64_t)c->n_hc * c->n_embd;
        b += (uint64_t)(c->n_swa + chunk + DS4_DRAFT_PASS_MAX) * c->head_dim * 2 +
             (uint64_t)(c->n_swa + DS4_DRAFT_PASS_MAX + 2) * (nd * sizeof(float) + 8) +
             nd * sizeof(float) + (uint64_t)c->n_vocab * sizeof(float) +
             (uint64_t)(DS4_DRAFT_PASS_MAX - 1) * c->n_vocab * sizeof(float);
    }
    *kv = b;
    cpu_scratch tmp;
    scr_item it[SCR_MAX] = { 0 };
    int n = 0;
    scratch_plan(&shell, &tmp, chunk, ctx_size, nth < 1 ? 1 : nth, 1, it, &n);
    uint64_t sb = (uint64_t)ctx_size * sizeof(int32_t) + (uint64_t)w->cfg.n_vocab * sizeof(float);
    for (int i = 0; i < n; i++) sb += it[i].bytes;
    *scratch = sb;
}

static void state_reset(ds4_session *s) {
    const ds4_config *c = &s->m->w.cfg;
    for (int il = 0; il < c->n_layer && !is_glm(s); il++) {
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
    s->stg_n = 0;
    ds4_g5n_reset(s);
    ds4_mtp_state_reset(s);
    dist_session_reset(s);
}

ds4_session *ds4_session_new(ds4_model *m, const ds4_session_params *p, char **err) {
    ds4_session_params def;
    if (!p) { ds4_session_params_default(&def); p = &def; }
    if (err) *err = NULL;
    if (p->ctx_size < 1 || p->ctx_size > DS4_MAX_CTX) {
        ds4_set_err(err, DS4_EINVAL, "context size must be between 1 and %d tokens", DS4_MAX_CTX);
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
    const size_t es = kv_es(s);
    s->ls = calloc((size_t)c->n_layer, sizeof *s->ls);
    s->logits = calloc((size_t)c->n_vocab, sizeof(float));
    if (!s->ls || !s->logits || ds4_tokens_reserve(&s->toks, (size_t)s->ctx)) goto oom;
    if (is_glm(s)) {
        if (dist_on()) {
            ds4_set_err(err, DS4_EUNSUP, "--dist is not supported for %s models", is_g5n(s) ? "glm5-next" : "glm-dsa");
            ds4_session_free(s);
            return NULL;
        }
        if ((is_g5n(s) ? ds4_g5n_state_new(s) : ds4_glm_state_new(s)) != DS4_OK) goto oom;
        s->logits_rows = 1;
        state_reset(s);
        return s;
    }
    for (int il = 0; il < c->n_layer; il++) {
        layer_state *st = &s->ls[il];
        layer_sizes z = sizes_of(m, il, s->ctx, s->chunk);
        st->raw = malloc(z.raw * es);
        st->raw_cap = (int)(z.raw / (size_t)c->head_dim);
        if (!st->raw) goto oom;
        if (z.comp) {
            st->comp = malloc(z.comp * es);
            st->comp_cap = (int)(z.comp / (size_t)c->head_dim);
            st->st_kv = malloc(z.st * sizeof(float));
            st->st_sc = malloc(z.st * sizeof(float));
            if (!st->comp || !st->st_kv || !st->st_sc) goto oom;
        }
        if (z.icomp) {
            st->icomp = malloc(z.icomp * es);
            st->ist_kv = malloc(z.ist * sizeof(float));
            st->ist_sc = malloc(z.ist * sizeof(float));
            if (!st->icomp || !st->ist_kv || !st->ist_sc) goto oom;
        }
    }
    if (ds4_cpu_scratch_init(s) != DS4_OK) goto oom;
    if (m->w.has_mtp && ds4_mtp_state_new(s) != DS4_OK) goto oom;
    s->logits_rows = 1;
    state_reset(s);
    dist_session_new(s);
    return s;
oom:
    ds4_set_err(err, DS4_ENOMEM, "out of memory creating a session of %d tokens (needs ~%.1f MiB)",
                p->ctx_size, ds4_session_memory_estimate(m, p->ctx_size) / 1048576.0);
    ds4_session_free(s);
    return NULL;
}

static void stage_free(ds4_session *s);

void ds4_session_free(ds4_session *s) {
    if (!s) return;
    ds4_imatrix_free(s->imatrix);
    dist_session_free(s);
    ds4_glm_state_free(s);
    ds4_g5n_state_free(s);
    if (s->ls && !is_glm(s)) {
        for (int il = 0; il < s->m->w.cfg.n_layer; il++) {
            layer_state *st = &s->ls[il];
            free(st->raw); free(st->comp); free(st->st_kv); free(st->st_sc);
            free(st->icomp); free(st->ist_kv); free(st->ist_sc);
        }
        stage_free(s);
        ds4_cpu_scratch_free(s);
    }
    for (int i = 0; i < DS4_SESSION_CKPTS; i++) {
        session_ckpt *k = &s->ck[i];
        free(k->logits); free(k->rows); free(k->raw_len); free(k->n_comp); free(k->n_icomp);
    }
    free(s->ls);
    free(s->logits);
    free(s->steer);
    ds4_mtp_state_free(s);
    ds4_tokens_free(&s->toks);
    free(s);
}

int ds4_session_set_steering(ds4_session *s, const float *dir, float scale,
                             int layer_first, int layer_last) {
    const ds4_config *c = &s->m->w.cfg;
    if (is_glm(s) && dir && scale != 0.0f) return DS4_EUNSUP;
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
    if (is_glm(s)) return DS4_EUNSUP;
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
    s->cap_hidden = is_glm(s) ? NULL : hidden_rows;   /* glm-dsa: no hidden rows yet */
    if (is_glm(s)) { s->cap_logits = logits_rows; return; }   /* its own [chunk][vocab] rows */
    if (logits_rows && !s->cap_logits) {
        /* all-position logits need a [chunk][vocab] head output */
        float *l = realloc(s->sc.logits, (size_t)s->chunk * s->m->w.cfg.n_vocab * sizeof(float));
        if (!l) return;
        s->sc.logits = l;
        s->logits_rows = s->chunk;
        /* the head input rows must hold a whole chunk too (already [T][D]) */
    }
    s->cap_logits = logits_rows;
}

void ds4_session_capture_indexer(ds4_session *s, ds4_buf *rows) { s->cap_indexer = is_glm(s) ? NULL : rows; }

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
        int rc = is_g5n(s) ? ds4_g5n_eval_chunk(s, toks + done, k)
                 : is_glm(s) ? ds4_glm_eval_chunk(s, toks + done, k) : ds4_cpu_eval_chunk(s, toks + done, k);
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
 * (forward_cpu.c, ds4_cpu_eval_batch).  Evaluated alone, through
 * ds4_session_eval, and with the same result: an item longer than a
 * chunk (it needs several passes), a decode-only session's prefill, a
 * session that captures logits or hidden states, collects an importance
 * matrix or runs a staged pass, sessions of another model or another
 * --no-qat setting than the owner's, and everything under --dist (whose
 * pipeline and expert ranks follow one session).  Steering joins the
 * batch: it is applied per row. */
static int batchable(const ds4_session *s, int n) {
    return !is_glm(s) && n <= s->chunk && !(s->decode_only && n > 1) && !s->cap_logits && !s->cap_hidden &&
           !s->cap_indexer &&
           !s->imatrix && !s->stg_on && !dist_on();
}

/* sc.logits must hold one row per item of a pass (kept once grown) */
static int logits_rows_reserve(ds4_session *s, int rows) {
    if (s->logits_rows >= rows) return DS4_OK;
    float *l = realloc(s->sc.logits, (size_t)rows * s->m->w.cfg.n_vocab * sizeof(float));
    if (!l) return DS4_ENOMEM;
    s->sc.logits = l;
    s->logits_rows = rows;
    return DS4_OK;
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
        int rc = ds4_cpu_eval_batch(own, ci, ng);
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
    if (is_g5n(s)) return ds4_g5n_checkpoint_bytes(s);
    if (is_glm(s)) return 0;
    return (ckpt_floats(s) + (size_t)c->n_vocab) * sizeof(float) +
           3 * (size_t)c->n_layer * sizeof(int);
}

int ds4_session_checkpoint(ds4_session *s, int slot) {
    if (slot < 0 || slot >= DS4_SESSION_CKPTS) return DS4_EINVAL;
    /* glm-dsa needs none: its rows of a position never change, so any
     * point of the session is a rewind point (ds4_session_rewind_point);
     * glm5-next keeps its recurrent state in its own slots */
    if (is_g5n(s)) return ds4_g5n_checkpoint(s, slot);
    if (is_glm(s)) return DS4_OK;
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
        /* window rows are f16 in QAT mode (kv16), float32 otherwise; the
         * slot has room for n_swa float rows either way */
        const size_t rb = (size_t)c->head_dim * (s->kv16 ? sizeof(uint16_t) : sizeof(float));
        memcpy(o, (const char *)st->raw + (size_t)(st->raw_start + st->raw_len - live) * rb,
               (size_t)live * rb);
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
    dist_session_checkpoint(s, slot);
    return DS4_OK;
}

int ds4_session_checkpoint_tokens(const ds4_session *s, int slot) {
    if (slot < 0 || slot >= DS4_SESSION_CKPTS) return -1;
    if (is_g5n(s)) return ds4_g5n_checkpoint_tokens(s, slot);
    if (!s->ck[slot].rows) return -1;
    return s->ck[slot].n;
}

int ds4_session_rewind_point(const ds4_session *s, int n) {
    /* glm-dsa: any count the session holds; one token short of n, so the
     * token evaluated again gives the logits at n (no logits are kept
     * per position); glm5-next: its checkpoints (the recurrent state) */
    if (is_g5n(s)) return ds4_g5n_rewind_point(s, n);
    if (is_glm(s)) return (n < (int)s->toks.n ? n : (int)s->toks.n) - 1 > 0 ?
                          (n < (int)s->toks.n ? n : (int)s->toks.n) - 1 : 0;
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
    if (is_g5n(s)) return ds4_g5n_rewind(s, n);
    if (is_glm(s)) {
        /* truncation: the rows below n are exactly what evaluating
         * toks[0..n) left */
        if (n <= 0 || n > (int)s->toks.n) return DS4_EINVAL;
        if (n < (int)s->toks.n) s->has_logits = 0;
        s->toks.n = (size_t)n;
        s->stg_n = 0;
        return DS4_OK;
    }
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
        const size_t rb = (size_t)c->head_dim * (s->kv16 ? sizeof(uint16_t) : sizeof(float));
        memcpy(st->raw, o, (size_t)k->raw_len[il] * rb);
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
    dist_session_rewind(s, n);
    return DS4_OK;
}

/* The buffer may hold more than the window between compactions; only the
 * last n_swa rows are state. */
static int raw_live(const layer_state *st, const ds4_config *c) {
    return st->raw_len < c->n_swa ? st->raw_len : c->n_swa;
}

uint64_t ds4_session_kv_bytes(const ds4_session *s) {
    const ds4_config *c = &s->m->w.cfg;
    if (is_g5n(s)) return ds4_g5n_kv_bytes(s);
    if (is_glm(s)) return ds4_glm_kv_bytes(s);
    const uint64_t es = kv_es(s);
    uint64_t b = 0;
    for (int il = 0; il < c->n_layer; il++) {
        const layer_state *st = &s->ls[il];
        layer_sizes z = sizes_of(s->m, il, s->ctx, s->chunk);
        b += (uint64_t)raw_live(st, c) * c->head_dim * es;
        b += (uint64_t)st->n_comp * c->head_dim * es + 2 * z.st * 4;
        b += (uint64_t)st->n_icomp * c->idx_dim * es + 2 * z.ist * 4;
    }
    return b;
}

/* ---------------------------------------------------------------------- */
/* Snapshots                                                               */
/*                                                                         */
/* Little-endian, all u32 unless noted:                                    */
/*   magic "DS4S", version 2, n_layer, n_embd, head_dim, idx_dim, n_vocab, */
/*   n_swa, n_tokens, flags (bit 0: no-qat state)                          */
/*   i32 tokens[n_tokens]                                                  */
/*   f32 logits[n_vocab]   (zeros when n_tokens == 0)                      */
/*   per layer: u32 ratio, raw_len, n_comp, n_icomp;                       */
/*     kv raw[raw_len][head_dim] (oldest first)                            */
/*     ratio != 0: kv comp[n_comp][head_dim], f32 state_kv, state_score    */
/*     indexer:    kv icomp[n_icomp][idx_dim], f32 istate_kv, istate_score */
/* kv = f16 rows (flags bit 0 clear), f32 rows under --no-qat.  Version 1 */
/* (f32 rows always) is refused: the rows' storage changed.               */
/* ---------------------------------------------------------------------- */

#define SNAP_MAGIC 0x53345344u   /* "DS4S" */
#define SNAP_VERSION 2u

uint64_t ds4_session_snapshot_size(const ds4_session *s) {
    const ds4_config *c = &s->m->w.cfg;
    if (is_g5n(s)) return ds4_g5n_snapshot_size(s);
    if (is_glm(s)) return 0;   /* no snapshot (ds4_session_snapshot_write refuses) */
    const uint64_t es = kv_es(s);
    uint64_t b = 10 * 4 + s->toks.n * 4 + (uint64_t)c->n_vocab * 4;
    for (int il = 0; il < c->n_layer; il++) {
        const layer_state *st = &s->ls[il];
        layer_sizes z = sizes_of(s->m, il, s->ctx, s->chunk);
        b += 16 + (uint64_t)raw_live(st, c) * c->head_dim * es;
        if (z.comp) b += (uint64_t)st->n_comp * c->head_dim * es + 2 * z.st * 4;
        if (z.icomp) b += (uint64_t)st->n_icomp * c->idx_dim * es + 2 * z.ist * 4;
    }
    return b;
}

/* Streams the snapshot through `w` (a file writer, a buffer): nothing of
 * snapshot size is allocated. */
int ds4_session_snapshot_write(const ds4_session *s, ds4_write_fn w, void *ud) {
    const ds4_config *c = &s->m->w.cfg;
    if (dist_on()) return DS4_EUNSUP;   /* the layers' state lives on several ranks */
    if (is_g5n(s)) return ds4_g5n_snapshot_write(s, w, ud);
    if (is_glm(s)) return DS4_EUNSUP;   /* no glm-dsa snapshot format yet */
    const size_t es = kv_es(s);
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
        PUT(kv_row(s, st->raw, (size_t)(st->raw_start + st->raw_len - live), c->head_dim),
            (size_t)live * c->head_dim * es);
        if (z.comp) {
            PUT(st->comp, (size_t)st->n_comp * c->head_dim * es);
            PUT(st->st_kv, z.st * 4);
            PUT(st->st_sc, z.st * 4);
        }
        if (z.icomp) {
            PUT(st->icomp, (size_t)st->n_icomp * c->idx_dim * es);
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
    if (is_glm(s) && !is_g5n(s)) return DS4_EUNSUP;
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
    return ds4_set_err(err, DS4_EFORMAT, "%s", msg);
}

int ds4_session_restore(ds4_session *s, const void *data, size_t len, char **err) {
    const ds4_config *c = &s->m->w.cfg;
    if (is_g5n(s)) return ds4_g5n_restore(s, data, len, err);
    if (is_glm(s))
        return ds4_set_err(err, DS4_EUNSUP, "session snapshots of glm-dsa models are not supported yet");
    const size_t es = kv_es(s);
    rd r = { data, len, 0 };
    uint32_t h[10];
    if (err) *err = NULL;
    if (dist_on()) {
        if (err) *err = strdup("snapshot: not supported with --dist");
        return DS4_EUNSUP;
    }
    if (rd_take(&r, h, sizeof h)) return fail(err, "snapshot: truncated header");
    if (h[0] != SNAP_MAGIC) return fail(err, "snapshot: bad magic");
    if (h[1] == 1) return fail(err, "snapshot: version 1 (float32 KV rows, an older build): not loadable, recompute the prompt");
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
        size_t need = (size_t)lh[1] * c->head_dim * es;
        if (z.comp) need += (size_t)lh[2] * c->head_dim * es + 2 * z.st * 4;
        if (z.icomp) need += (size_t)lh[3] * c->idx_dim * es + 2 * z.ist * 4;
        if (rd_take(&r, NULL, need)) return fail(err, "snapshot: truncated layer data");
    }
    if (r.at != len) return fail(err, "snapshot: trailing bytes");

    /* Commit. */
    state_reset(s);   /* also drops a staged pass */
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
        rd_take(&r, st->raw, (size_t)lh[1] * c->head_dim * es);
        if (z.comp) {
            st->n_comp = (int)lh[2];
            rd_take(&r, st->comp, (size_t)lh[2] * c->head_dim * es);
            rd_take(&r, st->st_kv, z.st * 4);
            rd_take(&r, st->st_sc, z.st * 4);
        }
        if (z.icomp) {
            st->n_icomp = (int)lh[3];
            rd_take(&r, st->icomp, (size_t)lh[3] * c->idx_dim * es);
            rd_take(&r, st->ist_kv, z.ist * 4);
            rd_take(&r, st->ist_sc, z.ist * 4);
        }
    }
    return DS4_OK;
}

/* ---------------------------------------------------------------------- */
/* Staged passes (speculative decoding, docs/SPEC.md)                      */
/*                                                                         */
/* ds4_session_eval_draft evaluates up to DS4_DRAFT_PASS_MAX tokens in one */
/* batched pass and keeps every position's logits; ds4_session_draft_     */
/* commit(n_keep) then keeps the first n_keep tokens and undoes the rest:  */
/*   - window rows: raw_len shrinks (rows are appended in order; a         */
/*     compaction during the pass kept the last n_swa rows of the state    */
/*     before it, which covers every shorter state's window);              */
/*   - compressed rows: n_comp / n_icomp = position / ratio (rows past the */
/*     count are dead and overwritten later);                              */
/*   - frontiers: the bytes from before the pass come back and the kept    */
/*     tokens' rows (staged by the forward) are pushed again -- the same   */
/*     deterministic step the forward ran, so the result is bit-identical  */
/*     to a session that never saw the rejected tokens.                    */
/* Nothing is evaluated again; the cost is a few small copies per layer.   */
/* ---------------------------------------------------------------------- */

static void stage_free(ds4_session *s) {
    if (s->stg)
        for (int il = 0; il < s->m->w.cfg.n_layer; il++) {
            layer_stage *g = &s->stg[il];
            free(g->st_kv); free(g->st_sc); free(g->ist_kv); free(g->ist_sc);
            free(g->ckv); free(g->csc); free(g->ikv); free(g->isc);
        }
    free(s->stg);
    s->stg = NULL;
    s->stg_cap = 0;
}

static int stage_alloc_layers(ds4_session *s);

/* The staging buffers, allocated on the first staged pass (sessions that
 * never draft pay nothing); all or nothing. */
static int stage_alloc(ds4_session *s) {
    int rc = DS4_OK;
    if (!s->stg) {
        rc = stage_alloc_layers(s);
        if (rc) { stage_free(s); return rc; }
    }
    if (s->logits_rows < s->stg_cap) {
        float *l = realloc(s->sc.logits, (size_t)s->stg_cap * s->m->w.cfg.n_vocab * sizeof(float));
        if (!l) return DS4_ENOMEM;
        s->sc.logits = l;
        s->logits_rows = s->stg_cap;
    }
    return DS4_OK;
}

static int stage_alloc_layers(ds4_session *s) {
    const ds4_config *c = &s->m->w.cfg;
    int cap = DS4_DRAFT_PASS_MAX < s->chunk ? DS4_DRAFT_PASS_MAX : s->chunk;
    s->stg = calloc((size_t)c->n_layer, sizeof *s->stg);
    if (!s->stg) return DS4_ENOMEM;
    for (int il = 0; il < c->n_layer; il++) {
        const ds4_layer_weights *lw = &s->m->w.layers[il];
        layer_sizes z = sizes_of(s->m, il, s->ctx, s->chunk);
        layer_stage *g = &s->stg[il];
        if (!z.comp) continue;
        size_t cw = (size_t)lw->coff * c->head_dim;
        g->st_kv = malloc(z.st * sizeof(float));
        g->st_sc = malloc(z.st * sizeof(float));
        g->ckv = malloc((size_t)cap * cw * sizeof(float));
        g->csc = malloc((size_t)cap * cw * sizeof(float));
        if (!g->st_kv || !g->st_sc || !g->ckv || !g->csc) return DS4_ENOMEM;
        if (z.icomp) {
            size_t iw = (size_t)2 * c->idx_dim;
            g->ist_kv = malloc(z.ist * sizeof(float));
            g->ist_sc = malloc(z.ist * sizeof(float));
            g->ikv = malloc((size_t)cap * iw * sizeof(float));
            g->isc = malloc((size_t)cap * iw * sizeof(float));
            if (!g->ist_kv || !g->ist_sc || !g->ikv || !g->isc) return DS4_ENOMEM;
        }
    }
    s->stg_cap = cap;
    return DS4_OK;
}

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
    /* glm-dsa: nothing to save; every row's logits stay in the glm state
     * until the commit, which only truncates (rows of a position never
     * change) */
    int rc = is_g5n(s) ? ds4_g5n_stage_begin(s, n) : is_glm(s) ? DS4_OK : stage_alloc(s);
    if (rc) return rc;
    const ds4_config *c = &s->m->w.cfg;
    for (int il = 0; il < c->n_layer && !is_glm(s); il++) {
        layer_sizes z = sizes_of(s->m, il, s->ctx, s->chunk);
        layer_stage *g = &s->stg[il];
        layer_state *st = &s->ls[il];
        if (z.comp) {
            memcpy(g->st_kv, st->st_kv, z.st * sizeof(float));
            memcpy(g->st_sc, st->st_sc, z.st * sizeof(float));
        }
        if (z.icomp) {
            memcpy(g->ist_kv, st->ist_kv, z.ist * sizeof(float));
            memcpy(g->ist_sc, st->ist_sc, z.ist * sizeof(float));
        }
    }
    s->stg_on = 1;
    rc = is_g5n(s) ? ds4_g5n_eval_chunk(s, toks, n)
         : is_glm(s) ? ds4_glm_eval_chunk(s, toks, n) : ds4_cpu_eval_chunk(s, toks, n);
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
    if (is_g5n(s)) return ds4_g5n_logits(s) + (size_t)i * s->m->w.cfg.n_vocab;
    if (is_glm(s)) return ds4_glm_logits(s) + (size_t)i * s->m->w.cfg.n_vocab;
    return s->sc.logits + (size_t)i * s->m->w.cfg.n_vocab;
}

int ds4_session_draft_commit(ds4_session *s, int n_keep) {
    if (s->stg_n < 1 || n_keep < 1 || n_keep > s->stg_n) return DS4_EINVAL;
    const ds4_config *c = &s->m->w.cfg;
    const int n = s->stg_n, drop = n - n_keep;
    const int64_t p0 = s->stg_p0, end = p0 + n_keep;
    s->stg_n = 0;
    if (drop == 0) return DS4_OK;
    /* glm5-next: the recurrent state replayed over the kept tokens (its
     * rows, as glm-dsa's, by the count) */
    if (is_g5n(s)) ds4_g5n_stage_commit(s, n_keep);
    /* glm-dsa: the count alone (its rows of a position never change) */
    for (int il = 0; il < c->n_layer && !is_glm(s); il++) {
        const ds4_layer_weights *lw = &s->m->w.layers[il];
        layer_sizes z = sizes_of(s->m, il, s->ctx, s->chunk);
        layer_stage *g = &s->stg[il];
        layer_state *st = &s->ls[il];
        st->raw_len -= drop;
        if (!z.comp) continue;
        const int R = lw->ratio;
        memcpy(st->st_kv, g->st_kv, z.st * sizeof(float));
        memcpy(st->st_sc, g->st_sc, z.st * sizeof(float));
        ds4_cpu_frontier_advance(st->st_kv, st->st_sc, R, lw->coff, c->head_dim, g->ckv, g->csc, p0, n_keep);
        st->n_comp = (int)(end / R);
        if (z.icomp) {
            memcpy(st->ist_kv, g->ist_kv, z.ist * sizeof(float));
            memcpy(st->ist_sc, g->ist_sc, z.ist * sizeof(float));
            ds4_cpu_frontier_advance(st->ist_kv, st->ist_sc, R, 2, c->idx_dim, g->ikv, g->isc, p0, n_keep);
            st->n_icomp = (int)(end / R);
        }
    }
    s->toks.n = (size_t)end;
    memcpy(s->logits, (is_g5n(s) ? ds4_g5n_logits(s) : is_glm(s) ? ds4_glm_logits(s) : s->sc.logits) +
                          (size_t)(n_keep - 1) * c->n_vocab,
           (size_t)c->n_vocab * sizeof(float));
    s->has_logits = 1;
    return DS4_OK;
}
