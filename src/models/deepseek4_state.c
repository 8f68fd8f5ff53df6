/*
 * deepseek4_state.c -- DeepSeek V4's per-session state behind the graph
 * table (graph.h): the layer states (raw window, compressed and indexer
 * rows, compressor frontiers; docs/MODEL.md §8.1), the forward's scratch,
 * RAM checkpoints and rewinds, snapshots, the staging of speculative
 * passes and their exact rollback (docs/SPEC.md), the memory plan.
 *
 * Owns: the layout of that state and everything that reads or writes it
 * outside the forward pass (deepseek4.c, the arithmetic).  session.c keeps
 * the token list, chunking and the staged-pass bookkeeping and calls this
 * file through ds4_graph_deepseek4.  Must not: change numerics (every
 * byte of a snapshot and every rollback is bit-exact), or allocate per
 * token (staging buffers come with the first staged pass).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/graph.h"
#include "engine/anon_map.h"
#include "engine/transport.h"


static int ratio_of(const ds4_model *m, int il) { return m->w.layers[il].ratio; }


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
     * sublayer (deepseek4.c): flat (HC input norm, read only by the
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
    /* the indexer's FP4-coded queries and rows (deepseek4.c idx_code_row:
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

/* The default session's chunk (session.c chunk_of of the default
 * parameters at ctx_size). */
static int default_chunk(int ctx_size) {
    ds4_session_params p;
    ds4_session_params_default(&p);
    int ch = p.prefill_chunk > 0 ? p.prefill_chunk : 2048;
    if (ch > ctx_size) ch = ctx_size;
    return ch < 1 ? 1 : ch;
}

/* KV state and scratch of the default session at ctx_size for bound
 * weights (ds4_memory_plan): the sizing functions read only m->w, so a
 * model shell around the weights serves them. */
static void v4_plan(const ds4_weights *w, int ctx_size, int nth, uint64_t *kv, uint64_t *scratch) {
    ds4_model shell;
    memset(&shell, 0, sizeof shell);
    shell.w = *w;
    int chunk = default_chunk(ctx_size);
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

/* the layer states emptied, the MTP block's rows with them */
static void v4_state_reset(ds4_session *s) {
    const ds4_config *c = &s->m->w.cfg;
    for (int il = 0; il < c->n_layer; il++) {
        layer_state *st = &s->ls[il];
        layer_sizes z = sizes_of(s->m, il, s->ctx, s->chunk);
        st->raw_start = st->raw_len = 0;
        st->n_comp = st->n_icomp = 0;
        for (size_t i = 0; i < z.st; i++) { st->st_kv[i] = 0.0f; st->st_sc[i] = -INFINITY; }
        for (size_t i = 0; i < z.ist; i++) { st->ist_kv[i] = 0.0f; st->ist_sc[i] = -INFINITY; }
    }
    ds4_mtp_state_reset(s);
}

static int v4_state_new(ds4_session *s) {
    const ds4_model *m = s->m;
    const ds4_config *c = &m->w.cfg;
    const size_t es = kv_es(s);
    s->ls = calloc((size_t)c->n_layer, sizeof *s->ls);
    if (!s->ls) return DS4_ENOMEM;
    for (int il = 0; il < c->n_layer; il++) {
        layer_state *st = &s->ls[il];
        layer_sizes z = sizes_of(m, il, s->ctx, s->chunk);
        st->raw = malloc(z.raw * es);
        st->raw_cap = (int)(z.raw / (size_t)c->head_dim);
        if (!st->raw) return DS4_ENOMEM;
        if (z.comp) {
            st->comp = malloc(z.comp * es);
            st->comp_cap = (int)(z.comp / (size_t)c->head_dim);
            st->st_kv = malloc(z.st * sizeof(float));
            st->st_sc = malloc(z.st * sizeof(float));
            if (!st->comp || !st->st_kv || !st->st_sc) return DS4_ENOMEM;
        }
        if (z.icomp) {
            st->icomp = malloc(z.icomp * es);
            st->ist_kv = malloc(z.ist * sizeof(float));
            st->ist_sc = malloc(z.ist * sizeof(float));
            if (!st->icomp || !st->ist_kv || !st->ist_sc) return DS4_ENOMEM;
        }
    }
    if (ds4_cpu_scratch_init(s) != DS4_OK) return DS4_ENOMEM;
    if (m->w.has_mtp && ds4_mtp_state_new(s) != DS4_OK) return DS4_ENOMEM;
    s->logits_rows = 1;
    return DS4_OK;
}

static void stage_free(ds4_session *s);

static void v4_state_free(ds4_session *s) {
    ds4_mtp_state_free(s);
    if (!s->ls) return;
    for (int il = 0; il < s->m->w.cfg.n_layer; il++) {
        layer_state *st = &s->ls[il];
        free(st->raw); free(st->comp); free(st->st_kv); free(st->st_sc);
        free(st->icomp); free(st->ist_kv); free(st->ist_sc);
    }
    stage_free(s);
    ds4_cpu_scratch_free(s);
    free(s->ls);
    s->ls = NULL;
}

/* sc.logits must hold `rows` rows (kept once grown): a captured chunk, a
 * staged pass, one row per item of a batched pass */
static int v4_logits_reserve(ds4_session *s, int rows) {
    if (s->logits_rows >= rows) return DS4_OK;
    float *l = realloc(s->sc.logits, (size_t)rows * s->m->w.cfg.n_vocab * sizeof(float));
    if (!l) return DS4_ENOMEM;
    s->sc.logits = l;
    s->logits_rows = rows;
    return DS4_OK;
}

static const float *v4_chunk_logits(const ds4_session *s) { return s->sc.logits; }

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

static uint64_t v4_checkpoint_bytes(const ds4_session *s) {
    const ds4_config *c = &s->m->w.cfg;
    return (ckpt_floats(s) + (size_t)c->n_vocab) * sizeof(float) +
           3 * (size_t)c->n_layer * sizeof(int);
}

static int v4_checkpoint(ds4_session *s, int slot) {
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

static int v4_rewind_point(const ds4_session *s, int n) {
    int best = 0;
    for (int i = 0; i < DS4_SESSION_CKPTS; i++) {
        const session_ckpt *k = &s->ck[i];
        if (k->rows && k->n > best && k->n <= n && k->n <= (int)s->toks.n &&
            (k->n < n || k->has_logits))
            best = k->n;
    }
    return best;
}

static int v4_rewind(ds4_session *s, int n) {
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

static uint64_t v4_kv_bytes(const ds4_session *s) {
    const ds4_config *c = &s->m->w.cfg;
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

static uint64_t v4_snapshot_size(const ds4_session *s) {
    const ds4_config *c = &s->m->w.cfg;
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
static int v4_snapshot_write(const ds4_session *s, ds4_write_fn w, void *ud) {
    const ds4_config *c = &s->m->w.cfg;
    if (dist_on()) return DS4_EUNSUP;   /* the layers' state lives on several ranks */
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

static int v4_restore(ds4_session *s, const void *data, size_t len, char **err) {
    const ds4_config *c = &s->m->w.cfg;
    const size_t es = kv_es(s);
    rd r = { data, len, 0 };
    uint32_t h[10];
    if (err) *err = NULL;
    if (dist_on()) {
        if (err) *err = strdup("snapshot: not supported with --dist");
        return DS4_EUNSUP;
    }
    if (rd_take(&r, h, sizeof h)) return fail(err, "snapshot: truncated header");
    if (h[0] == 0x534D4C47u)   /* "GLMS" (glm_dsa.c) */
        return fail(err, "snapshot: made by a glm-dsa session (GLMS), this is a DeepSeek V4 model");
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
    ds4_session_clear(s);   /* also drops a staged pass */
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
    return v4_logits_reserve(s, s->stg_cap);
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


/* before a staged pass: the frontiers' bytes (the rows it pushes are
 * staged by the forward while s->stg_on) */
static int v4_stage_begin(ds4_session *s, int n) {
    (void)n;   /* the buffers hold a whole pass */
    int rc = stage_alloc(s);
    if (rc) return rc;
    const ds4_config *c = &s->m->w.cfg;
    for (int il = 0; il < c->n_layer; il++) {
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
    return DS4_OK;
}

/* keep n_keep of the n tokens staged at p0 (n_keep < n) */
static void v4_stage_commit(ds4_session *s, int n_keep) {
    const ds4_config *c = &s->m->w.cfg;
    const int64_t p0 = s->stg_p0;
    const int n = (int)((int64_t)s->toks.n - p0);
    const int drop = n - n_keep;
    const int64_t end = p0 + n_keep;
    for (int il = 0; il < c->n_layer; il++) {
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
}

const ds4_graph ds4_graph_deepseek4 = {
    .name = "deepseek4",
    .arch = DS4_ARCH_DEEPSEEK4,
    .caps = DS4_GRAPH_STEER | DS4_GRAPH_IMATRIX | DS4_GRAPH_HIDDEN | DS4_GRAPH_INDEXER | DS4_GRAPH_DIST |
             DS4_GRAPH_DIST_EXPERTS,
    .state_new = v4_state_new,
    .state_free = v4_state_free,
    .state_reset = v4_state_reset,
    .eval_chunk = ds4_cpu_eval_chunk,
    .chunk_logits = v4_chunk_logits,
    .logits_reserve = v4_logits_reserve,
    .stage_begin = v4_stage_begin,
    .stage_commit = v4_stage_commit,
    .eval_batch = ds4_cpu_eval_batch,
    .kv_bytes = v4_kv_bytes,
    .plan = v4_plan,
    .checkpoint_bytes = v4_checkpoint_bytes,
    .checkpoint = v4_checkpoint,
    .rewind_point = v4_rewind_point,
    .rewind = v4_rewind,
    .snapshot_size = v4_snapshot_size,
    .snapshot_write = v4_snapshot_write,
    .restore = v4_restore,
};
