/*
 * deepseek4.c -- the DeepSeek V4 graph on the CPU (docs/MODEL.md §2-§6).
 *
 * Owns: evaluating a pass of T rows through every layer and the head,
 * updating the per-layer KV state: a chunk of consecutive tokens of one
 * session, or the rows of several sessions at once (the batched step of
 * concurrent sessions: each weight read once for all of them, each row
 * attending to its own session).  Decode is simply T = 1: the same code,
 * the same kernels and the same summation order, so prefill, token-by-
 * token decode and batched decode give bit-identical logits.  The work is layer-major
 * (all T tokens through layer il, then il+1) so each weight matrix is
 * streamed once per chunk; the compressor and indexer frontiers are advanced
 * token by token with the decode functions, which is what makes a chunk
 * boundary invisible.  The MTP block (docs/MTP.md) runs its layer through
 * the same attention()/moe() as layer index n_layer, with its own input
 * (mtp_input) and HC head; mtp.c decides when.
 *
 * Must not: allocate (every buffer lives in the session scratch), or touch
 * the session's token list (session.c owns it).
 */
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/imatrix.h"
#include "kernels/vec_ops.h"
#include "engine/transport.h"
#include "engine/expert_cache.h"
#include "engine/profile.h"


/* A pass evaluates T rows that belong to one or more sessions (items):
 * item i owns rows [r0, r0 + n), consecutive positions of its session
 * from p0.  Everything that multiplies a weight runs once over all T rows;
 * what reads or writes a session's state (RoPE positions, the KV window,
 * the compressor/indexer frontiers, attention, steering) goes through the
 * row's item.  A single-session chunk is the pass with one item. */
typedef struct {
    ds4_session *s;   /* one item: its session; several: the scratch owner */
    ds4_model *m;
    cpu_scratch *sc;  /* s's scratch, shared by every row of the pass */
    const ds4_config *c;
    const ds4_weights *w;
    cpu_ctx cc;
    ds4_cpu_item *it;
    int n_it;
    const int *ritem; /* [T] row -> item */
    const int32_t *toks; /* [T] the rows' tokens */
    int T;            /* rows in this pass */
    int qat;          /* storage roundings on */
    int no_qat;
    int ik_n;         /* indexer rows coded in sc->ikc for the item being
                         scored (idx_select), 0: none */
} fwd;

/* The weights of layer il; il == n_layer names the MTP block's layer
 * (docs/MTP.md), which runs through the same code as a main layer. */
static const ds4_layer_weights *layer_w(const fwd *f, int il) {
    return il == f->c->n_layer ? &f->w->mtp.block : &f->w->layers[il];
}
static layer_state *layer_st(ds4_session *s, int il) {
    return il == s->m->w.cfg.n_layer ? &s->mtp->ls : &s->ls[il];
}

static inline ds4_cpu_item *row_item(const fwd *f, int t) { return &f->it[f->ritem[t]]; }
static inline int64_t row_pos(const fwd *f, int t) {
    const ds4_cpu_item *i = row_item(f, t);
    return i->p0 + (t - i->r0);
}

/* ---------------------------------------------------------------------- */
/* helpers                                                                 */
/* ---------------------------------------------------------------------- */

static const float *f32_of(const ds4_tensor *t) { return (const float *)t->data; }

/* Read a small float tensor (norm weights, HC scale/base, sinks) as float:
 * they are F32 in every ds4 file, but accept F16/BF16 too. */
static float tval(const ds4_tensor *t, int i) {
    switch (t->type) {
    case GGML_F32: return ((const float *)t->data)[i];
    case GGML_F16: return ds4_f16_to_f32(((const uint16_t *)t->data)[i]);
    case GGML_BF16: return ds4_bf16_to_f32(((const uint16_t *)t->data)[i]);
    }
    return 0.0f;
}


/* Several weights applied to the same input rows in one parallel section:
 * fewer synchronisations per token and better balance than one section per
 * matrix.  Each weight reads columns [col0, col0 + n_in) of the rows; the
 * rows are quantized once per activation kind (blocks never straddle col0
 * because col0 is a multiple of every block size in use). */
typedef struct {
    mat_t W;
    int col0;
    float *out;
    size_t ostride;
} mm_spec;

typedef struct {
    const ds4_kernels *kt;
    act_kind k;
    const float *x;
    size_t xs, rb;
    int n;
    uint8_t *q;
    int T;
} qrows_job;

static void qrows_task(void *ctx, int ith, int nth) {
    qrows_job *j = ctx;
    long lo, hi;
    ds4_split(j->T, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++)
        act_quantize_row(j->kt, j->k, j->x + (size_t)t * j->xs, j->n, j->q + (size_t)t * j->rb);
}

/* Quantize T activation rows; a prefill's rows are split across threads
 * (each row is quantized by one thread, so the bytes do not depend on the
 * split). */
static void quantize_rows(fwd *f, act_kind k, const float *x, size_t xs, int n, uint8_t *q,
                          size_t rb, int T) {
    qrows_job j = { f->cc.k, k, x, xs, rb, n, q, T };
    prof_t t0 = prof_now();
    if (T < 8) qrows_task(&j, 0, 1);
    else ds4_pool_run(f->cc.pool, qrows_task, &j);
    prof_add(PS_QUANT, t0);
}

static mm_spec spec(const ds4_tensor *t, float *out, size_t ostride) {
    mm_spec sp = { mat_of(t), 0, out, ostride };
    return sp;
}

/* The most groups of one mm_multi call: the attention projections (8) or
 * one per output group (the binder bounds those by DS4_MAX_OUT_GROUPS). */
#define MM_MULTI_MAX (DS4_MAX_OUT_GROUPS > 8 ? DS4_MAX_OUT_GROUPS : 8)

/* The matmul leaves: run the groups, and under DS4_PROFILE count their
 * time and FLOPs under PS_MM and the kind pm. */
static void run_mm(fwd *f, int pm, const mm_group *g, int ng) {
    prof_t t0 = prof_now();
    if (PROF_ON()) {   /* this leaf's sections' idle time only */
        uint64_t i_, t_;
        ds4_prof_mm_idle_take(&i_, &t_);
    }
    cpu_matmul_groups(&f->cc, g, ng);
    if (!PROF_ON()) return;
    /* one end time for every table, so that their rows add up */
    const prof_t t1 = prof_now();
    const double flops = mm_groups_flops(g, ng);
    ds4_prof_stage_add(PS_MM, t0, t1);
    ds4_prof_mm_add(pm, flops, t0, t1);
    /* one-token leaves: the weight bytes they streamed, by format */
    int maxrows = 0, type = -2;
    double bytes = 0;
    for (int i = 0; i < ng; i++) {
        if (g[i].n_rows <= 0) continue;
        if (g[i].n_rows > maxrows) maxrows = g[i].n_rows;
        bytes += (double)g[i].W.row_bytes * g[i].W.n_out;
        type = type == -2 || type == (int)g[i].W.type ? (int)g[i].W.type : -1;
    }
    if (maxrows == 1) ds4_prof_mm_tok(type, bytes, t0, t1);
    if (maxrows > 8) {
        long n_out = 0;
        for (int i = 0; i < ng; i++) n_out += g[i].W.n_out;
        ds4_prof_mm_shape(type, g[0].W.n_in, n_out, ng, maxrows, flops, t0, t1);
    }
}

/* pre: an activation kind whose rows the caller has already quantized at
 * the start of qscratch (ACT_F32: none) */
static void mm_multi_pre(fwd *f, const float *x, size_t xs, int nx, const mm_spec *sp, int n, act_kind pre) {
    cpu_scratch *sc = f->sc;
    mm_group g[MM_MULTI_MAX];
    uint8_t *area[3] = { NULL, NULL, NULL };
    size_t rb[3] = { 0, 0, 0 };
    uint8_t *q = sc->qscratch;
    /* more specs than the table holds run in slices (one section each)
     * rather than being dropped; every caller stays within one slice */
    for (int i0 = 0; i0 < n; i0 += MM_MULTI_MAX) {
        int ng = n - i0 < MM_MULTI_MAX ? n - i0 : MM_MULTI_MAX;
        for (int j = 0; j < ng; j++) {
            const mm_spec *s = &sp[i0 + j];
            act_kind k = act_kind_for(s->W.type, f->no_qat);
            if (k != ACT_F32 && !area[k]) {
                rb[k] = act_row_bytes(k, nx);
                area[k] = q;
                if (k != pre || q != sc->qscratch) quantize_rows(f, k, x, xs, nx, q, rb[k], f->T);
                q += (size_t)f->T * rb[k];
            }
            mm_group gg = { .W = s->W, .kind = k, .n_rows = f->T, .out = s->out,
                            .out_stride = s->ostride };
            if (k == ACT_F32) {
                gg.act = (const uint8_t *)(x + s->col0);
                gg.act_stride = xs * sizeof(float);
            } else {
                gg.act = area[k] + act_row_bytes(k, s->col0);
                gg.act_stride = rb[k];
            }
            g[j] = gg;
        }
        /* float-activation groups (the F16 compressor/indexer projections
         * beside the Q8_0 ones) run in a section of their own: one more
         * barrier, and the profile can time the two units apart */
        mm_group gf[MM_MULTI_MAX];
        int nq = 0, nf = 0;
        for (int j = 0; j < ng; j++) {
            if (g[j].kind == ACT_F32) gf[nf++] = g[j];
            else g[nq++] = g[j];
        }
        if (nq) run_mm(f, PM_DENSE, g, nq);
        if (nf) run_mm(f, PM_DENSE_F, gf, nf);
    }
}

static void mm_multi(fwd *f, const float *x, size_t xs, int nx, const mm_spec *sp, int n) {
    mm_multi_pre(f, x, xs, nx, sp, n, ACT_F32);
}

/* One weight: mm_multi with a single spec, so the activation rows are
 * quantized by the pool (cpu_matmul would quantize them all on the
 * calling thread while the others wait: ~1 % of a prefill step for
 * attn_output_b and the shared expert's down alone). */
static void mm(fwd *f, const ds4_tensor *t, const float *x, size_t xs,
               float *y, size_t ys) {
    mm_spec sp = spec(t, y, ys);
    mm_multi(f, x, xs, (int)t->ne[0], &sp, 1);
}

typedef void (*tok_fn)(fwd *f, int t, void *ud);
typedef struct { fwd *f; tok_fn fn; void *ud; int T; } tok_job;

static void tok_task(void *ctx, int ith, int nth) {
    tok_job *j = ctx;
    long lo, hi;
    ds4_split(j->T, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++) j->fn(j->f, (int)t, j->ud);
}

/* Rows up to which the per-row steps (norms, HC mixing, RoPE, routing:
 * microseconds a row) run on the calling thread: a parallel section costs
 * more than that, and a batched decode step has one row per session. */
#define FOR_TOKENS_INLINE 16

/* Run fn for every token of the chunk, in parallel when worth it (which
 * thread computes a row does not change it). */
static void for_tokens(fwd *f, tok_fn fn, void *ud) {
    tok_job j = { f, fn, ud, f->T };
    if (f->T <= FOR_TOKENS_INLINE) tok_task(&j, 0, 1);
    else ds4_pool_run(f->cc.pool, tok_task, &j);
}

/* Row-range steps: fn handles rows [t0, t0 + n), one contiguous range per
 * thread, so row helpers can work on several rows at once
 * (rms_norm_rows); a row's result does not depend on the range it is in. */
typedef void (*rows_fn)(fwd *f, int t0, int n, void *ud);
typedef struct { fwd *f; rows_fn fn; void *ud; int T; } rows_job;

static void rows_task(void *ctx, int ith, int nth) {
    rows_job *j = ctx;
    long lo, hi;
    ds4_split(j->T, ith, nth, &lo, &hi);
    if (hi > lo) j->fn(j->f, (int)lo, (int)(hi - lo), j->ud);
}

static void for_rows(fwd *f, rows_fn fn, void *ud) {
    rows_job j = { f, fn, ud, f->T };
    if (f->T <= FOR_TOKENS_INLINE) rows_task(&j, 0, 1);
    else ds4_pool_run(f->cc.pool, rows_task, &j);
}

/* min/max of a finite bound and a value, as fminf/fmaxf give them (a NaN
 * value yields the bound) but inlined: the libm calls cost more than the
 * SwiGLU they sit in.  Only for bounds that are not NaN. */
static inline float min_bound(float v, float b) { return v < b ? v : b; }
static inline float max_bound(float v, float b) { return v > b ? v : b; }

static inline float sigmoidf(float z) { return 1.0f / (1.0f + expf(-z)); }

/* ---------------------------------------------------------------------- */
/* Hyper-connections (docs/MODEL.md §3)                                    */
/* ---------------------------------------------------------------------- */

typedef struct { const ds4_tensor *fn, *scale, *base; } hc_w;

/* Whether a pass writes its HC rows (flat rows, residual) with streaming
 * stores: a prefill chunk's (256 tokens and more: 16 MB a sublayer and up
 * at n_embd 4096) leave the cache before anyone reads them, and ordinary
 * stores would first read every line (write-allocate); decode's stay. */
static int hc_stream(const fwd *f) { return f->T >= 256; }

static void hc_flat_rows(fwd *f, int t0, int nt, void *ud) {
    (void)ud;
    const ds4_config *c = f->c;
    cpu_scratch *sc = f->sc;
    int n = c->n_hc * c->n_embd;
    /* a prefill chunk's flat rows (134 MB at 2048 tokens, lines nobody
     * has) are streamed out (HC stage 0.24 -> 0.21 s, the HC products
     * that read them unchanged) */
    rms_norm_rows(f->m->vk, sc->X + (size_t)t0 * n, n, NULL, nt, n, c->rms_eps, sc->flat + (size_t)t0 * n, n,
                  hc_stream(f));
}

static void sinkhorn(float *C, int N, int iters, float eps) {
    for (int a = 0; a < N; a++) {
        float *row = C + a * N, mx = -INFINITY, sum = 0;
        for (int b = 0; b < N; b++) mx = fmaxf(mx, row[b]);
        for (int b = 0; b < N; b++) { row[b] = expf(row[b] - mx); sum += row[b]; }
        for (int b = 0; b < N; b++) row[b] = row[b] / sum + eps;
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0) {
            for (int a = 0; a < N; a++) {
                float s = 0;
                for (int b = 0; b < N; b++) s += C[a * N + b];
                for (int b = 0; b < N; b++) C[a * N + b] /= (s + eps);
            }
        }
        for (int b = 0; b < N; b++) {
            float s = 0;
            for (int a = 0; a < N; a++) s += C[a * N + b];
            for (int a = 0; a < N; a++) C[a * N + b] /= (s + eps);
        }
    }
}

/* elements of an HC row mixed at once: 64 floats = 4 zmm accumulators */
#define HC_KB 64
_Static_assert(HC_KB == 64, "hc_post_task stores HC_KB floats with rows_store64");

/* One token's HC coefficients from its mixer row m[(2+N)*N]: the stream
 * weights pre[N], the output weights post[N] and the Sinkhorn-balanced
 * mixing matrix C[N][N].  Also glm5-next's (glm5_next.c): its mHC is V4's. */
void ds4_hc_weights(const float *m, const ds4_tensor *scale, const ds4_tensor *base, int N, int iters, float eps,
                    float *pre, float *post, float *C) {
    float s0 = tval(scale, 0), s1 = tval(scale, 1), s2 = tval(scale, 2);
    for (int i = 0; i < N; i++) {
        pre[i] = sigmoidf(m[i] * s0 + tval(base, i)) + eps;
        post[i] = 2.0f * sigmoidf(m[N + i] * s1 + tval(base, N + i));
    }
    for (int i = 0; i < N * N; i++) C[i] = m[2 * N + i] * s2 + tval(base, 2 * N + i);
    sinkhorn(C, N, iters, eps);
}

static void hc_mix_task(fwd *f, int t, void *ud) {
    const hc_w *h = ud;
    const ds4_config *c = f->c;
    cpu_scratch *sc = f->sc;
    const int N = c->n_hc, D = c->n_embd, M = (2 + N) * N;
    const float *m = sc->mix + (size_t)t * M;
    float pre[DS4_MAX_HC];
    float *C = sc->comb + (size_t)t * N * N;
    ds4_hc_weights(m, h->scale, h->base, N, c->hc_iters, c->hc_eps, pre, sc->post + (size_t)t * N, C);
    const float *X = sc->X + (size_t)t * N * D;
    float *x = sc->cur + (size_t)t * D;
    /* x[k] = ((0 + pre0 X0[k]) + pre1 X1[k]) + ...: HC_KB elements at a
     * time held in registers while the streams go past (one pass over the
     * data, vectorised), the same adds in the same order for every element */
    int k0 = 0;
    for (; k0 + HC_KB <= D; k0 += HC_KB) {
        float acc[HC_KB];
        for (int i = 0; i < HC_KB; i++) acc[i] = 0.0f;
        for (int s = 0; s < N; s++) {
            const float *Xs = X + (size_t)s * D + k0, p = pre[s];
            for (int i = 0; i < HC_KB; i++) acc[i] += p * Xs[i];
        }
        memcpy(x + k0, acc, sizeof acc);
    }
    for (int k = k0; k < D; k++) {
        float acc = 0;
        for (int s = 0; s < N; s++) acc += pre[s] * X[(size_t)s * D + k];
        x[k] = acc;
    }
}

/* X -> cur (sublayer input), post, comb */
static void hc_pre(fwd *f, const hc_w *h) {
    const ds4_config *c = f->c;
    cpu_scratch *sc = f->sc;
    const int ND = c->n_hc * c->n_embd, M = (2 + c->n_hc) * c->n_hc;
    PROF(PS_HC, for_rows(f, hc_flat_rows, NULL));
    mm(f, h->fn, sc->flat, ND, sc->mix, M);
    PROF(PS_HC, for_tokens(f, hc_mix_task, (void *)h));
}

static void hc_post_task(fwd *f, int t, void *ud) {
    (void)ud;
    const int nt = hc_stream(f);
    const ds4_config *c = f->c;
    cpu_scratch *sc = f->sc;
    const int N = c->n_hc, D = c->n_embd;
    const float *X = sc->X + (size_t)t * N * D;
    float *Xn = sc->X2 + (size_t)t * N * D;
    const float *y = sc->y + (size_t)t * D;
    const float *post = sc->post + (size_t)t * N;
    const float *C = sc->comb + (size_t)t * N * N;
    /* o[k] = ((post y[k] + C0b X0[k]) + C1b X1[k]) + ...: HC_KB elements
     * at a time in registers (as hc_mix_task), each element getting the
     * same operations in the same order as a per-element loop */
    for (int b = 0; b < N; b++) {
        float *o = Xn + (size_t)b * D;
        const float pb = post[b];
        int k0 = 0;
        for (; k0 + HC_KB <= D; k0 += HC_KB) {
            float acc[HC_KB];
            for (int i = 0; i < HC_KB; i++) acc[i] = pb * y[k0 + i];
            for (int a = 0; a < N; a++) {
                const float *Xa = X + (size_t)a * D + k0, cab = C[a * N + b];
                for (int i = 0; i < HC_KB; i++) acc[i] += cab * Xa[i];
            }
            rows_store64(o + k0, acc, nt);
        }
        for (int k = k0; k < D; k++) {
            float acc = pb * y[k];
            for (int a = 0; a < N; a++) acc += C[a * N + b] * X[(size_t)a * D + k];
            o[k] = acc;
        }
    }
    rows_store_fence(nt);   /* the streamed rows visible before the pool's barrier */
}

/* Steering: the session's scaled direction added to every HC copy of
 * every token (after the FFN of the chosen layers, see hc_post).  All N
 * copies get it because the next sublayer reads a weighted sum of them
 * (hc_pre) and the copies are re-mixed by C at every hc_post: adding to one
 * copy would be diluted by weights that differ per token. */
static int steered(const ds4_session *s, int il) {
    return s->steer && il >= s->steer_l0 && il <= s->steer_l1;
}

static void steer_task(fwd *f, int t, void *ud) {
    const int *il = ud;
    const ds4_config *c = f->c;
    const ds4_session *s = row_item(f, t)->s;   /* each row its own session's */
    if (!steered(s, *il)) return;
    const float *v = s->steer;
    float *X = f->sc->X + (size_t)t * c->n_hc * c->n_embd;
    for (int b = 0; b < c->n_hc; b++)
        for (int k = 0; k < c->n_embd; k++) X[(size_t)b * c->n_embd + k] += v[k];
}

/* X' = post (x) y + C^T X, then swap buffers; steered after the FFN of a
 * steered layer; optionally captured (the capture shows the steered state). */
static void hc_post(fwd *f, int il, int which) {
    cpu_scratch *sc = f->sc;
    prof_t t0 = prof_now();
    for_tokens(f, hc_post_task, NULL);
    float *t = sc->X; sc->X = sc->X2; sc->X2 = t;
    prof_add(PS_HC, t0);
    if (il >= f->c->n_layer) return;   /* the MTP layer: no steering, no capture */
    int any = 0;
    for (int i = 0; i < f->n_it; i++) any |= steered(f->it[i].s, il);
    if (which == 1 && any) for_tokens(f, steer_task, &il);
    if (f->s->cap_hidden) {
        const ds4_config *c = f->c;
        size_t nd = (size_t)c->n_hc * c->n_embd;
        size_t per_tok = (size_t)c->n_layer * 2 * nd;
        ds4_buf *b = f->s->cap_hidden;
        /* the chunk's rows were reserved by the caller: b->n marks their start */
        float *base = (float *)(b->p + b->n);
        for (int i = 0; i < f->T; i++)
            memcpy(base + (size_t)i * per_tok + ((size_t)il * 2 + which) * nd,
                   sc->X + (size_t)i * nd, nd * sizeof(float));
    }
}

/* ---------------------------------------------------------------------- */
/* Attention (docs/MODEL.md §4)                                            */
/* ---------------------------------------------------------------------- */

/* cur -> a: the sublayer's input norm (attention and FFN alike) */
static void norm_rows(fwd *f, int t0, int nt, void *ud) {
    const ds4_tensor *w = ud;
    const ds4_config *c = f->c;
    cpu_scratch *sc = f->sc;
    int D = c->n_embd;
    /* weights are F32 by validation */
    rms_norm_rows(f->m->vk, sc->cur + (size_t)t0 * D, D, f32_of(w), nt, D, c->rms_eps, sc->a + (size_t)t0 * D, D, 0);
}

typedef struct { int il; const rope_t *rope; } layer_ud;

static void rope_tables_task(fwd *f, int t, void *ud) {
    const layer_ud *L = ud;
    cpu_scratch *sc = f->sc;
    int hr = f->c->n_rot / 2;
    rope_angles(L->rope, row_pos(f, t), sc->cs + (size_t)t * hr, sc->sn + (size_t)t * hr);
}

static void kv_post(fwd *f, int t, const ds4_layer_weights *lw);

/* the single KV head: norm, rope, FP8 on the nope dims, f16 storage */
static void kv_post(fwd *f, int t, const ds4_layer_weights *lw) {
    const ds4_config *c = f->c;
    cpu_scratch *sc = f->sc;
    const int d = c->head_dim, hr = c->n_rot / 2;
    const float *cs = sc->cs + (size_t)t * hr, *sn = sc->sn + (size_t)t * hr;
    float *kv = sc->kv + (size_t)t * d;
    rms_norm(kv, f32_of(&lw->attn_kv_a_norm), d, c->rms_eps, kv);
    rope_apply(kv, d, c->n_rot, cs, sn, 0);
    if (f->qat) {
        fp8_kv_round(kv, d - c->n_rot);
        f16_round_row(kv, d);
    }
}

/* (the queries' own norm and RoPE are done by the attention items that
 * read them, attn_task) */
static void kv_post_task(fwd *f, int t, void *ud) {
    const layer_ud *L = ud;
    kv_post(f, t, layer_w(f, L->il));
}

static void qr_norm_rows(fwd *f, int t0, int nt, void *ud) {
    const layer_ud *L = ud;
    const ds4_config *c = f->c;
    cpu_scratch *sc = f->sc;
    const size_t ql = (size_t)c->q_lora;
    rms_norm_rows(f->m->vk, sc->qa + (size_t)t0 * ql, ql, f32_of(&layer_w(f, L->il)->attn_q_a_norm), nt,
                  c->q_lora, c->rms_eps, sc->qr + (size_t)t0 * ql, ql, 0);
}

/* The compressor frontier (MODEL.md §4.4).  A layer state holds the rows
 * of the window being filled (coff 2: and of the previous, closed one);
 * when a window closes, each column j is pooled: a softmax over its rows'
 * scores weighting their kv values -- with coff 2 column j of the previous
 * window's rows and column w + j of this one's.  The model pushes rows one
 * position at a time; a chunk (one token in decode, thousands in a
 * prefill) instead pools every window that closes inside it in parallel,
 * reading the rows before the chunk from the state as the chunk found it
 * and the others from the chunk's projections (comp_close), then brings
 * the state to where pushing each row would have left it
 * (ds4_cpu_frontier_advance).  A pooled row's operations are the same whatever
 * the chunking, so its bits are too. */

/* n consecutive window rows (stride cw) from kv/sc, read at column col + j */
typedef struct { const float *kv, *sc; int n, col; } comp_run;

/* Pool one closed window, its rows in order as runs. */
static void comp_pool(const comp_run *run, int nrun, int cw, int w, float *out) {
    for (int j = 0; j < w; j++) {
        float mx = -INFINITY;
        for (int k = 0; k < nrun; k++)
            for (int r = 0; r < run[k].n; r++) mx = fmaxf(mx, run[k].sc[(size_t)r * cw + run[k].col + j]);
        float num = 0, den = 0;
        for (int k = 0; k < nrun; k++)
            for (int r = 0; r < run[k].n; r++) {
                size_t o = (size_t)r * cw + run[k].col + j;
                float e = expf(run[k].sc[o] - mx);
                num += e * run[k].kv[o];
                den += e;
            }
        out[j] = num / den;
    }
}

/* The rows of the window that closes at position p (coff * R of them, from
 * position p + 1 - coff R), as at most 4 runs: positions before p0 are
 * state rows (row q - sbase), the others rows of the chunk (row q - p0). */
static int comp_runs(const float *st_kv, const float *st_sc, int64_t sbase, const float *kv,
                     const float *sc, int64_t p0, int R, int coff, int w, int64_t p, comp_run *run) {
    const int cw = coff * w;
    int n = 0;
    for (int part = 0; part < coff; part++) {
        int64_t a = p + 1 - (int64_t)(coff - part) * R, b = a + R;
        int col = coff == 2 && part == 1 ? w : 0;
        if (a < p0) {
            int64_t e = b < p0 ? b : p0;
            size_t o = (size_t)(a - sbase) * cw;
            run[n++] = (comp_run){ st_kv + o, st_sc + o, (int)(e - a), col };
            a = e;
        }
        if (a < b) {
            size_t o = (size_t)(a - p0) * cw;
            run[n++] = (comp_run){ kv + o, sc + o, (int)(b - a), col };
        }
    }
    return n;
}

/* the state row of position q while its window is open (coff 2 keeps the
 * previous window in rows [0, R)) */
static inline int comp_state_row(int64_t q, int R, int coff) {
    return (int)(q % R) + (coff == 2 ? R : 0);
}

/* Positions [a, b) into their state rows, from rows (stride cw) that start
 * at position p0. */
static void comp_put_rows(float *st_kv, float *st_sc, int R, int coff, int cw, const float *kv,
                          const float *sc, int64_t p0, int64_t a, int64_t b) {
    for (int64_t q = a; q < b; q++) {
        size_t o = (size_t)comp_state_row(q, R, coff) * cw, i = (size_t)(q - p0) * cw;
        memcpy(st_kv + o, kv + i, (size_t)cw * sizeof(float));
        memcpy(st_sc + o, sc + i, (size_t)cw * sizeof(float));
    }
}

/* The rows of the window after a close: coff 2 moves the closed window to
 * "previous"; the current rows are reset so the state does not depend on
 * history. */
static void comp_roll(float *st_kv, float *st_sc, int R, int coff, int cw) {
    int first = 0;
    if (coff == 2) {
        memcpy(st_kv, st_kv + (size_t)R * cw, (size_t)R * cw * sizeof(float));
        memcpy(st_sc, st_sc + (size_t)R * cw, (size_t)R * cw * sizeof(float));
        first = R;
    }
    for (int r = first; r < first + R; r++)
        for (int j = 0; j < cw; j++) {
            st_kv[(size_t)r * cw + j] = 0.0f;
            st_sc[(size_t)r * cw + j] = -INFINITY;
        }
}

/* After a chunk's windows are pooled: the state as pushing the item's rows
 * [p0, p0 + n) (kv/sc, stride cw) one by one would leave it.  Only the
 * last closed window (coff 2) and the rows after it matter. */
void ds4_cpu_frontier_advance(float *st_kv, float *st_sc, int R, int coff, int w,
                              const float *kv, const float *sc, int64_t p0, int n) {
    const int cw = coff * w;
    const int64_t P = p0 + n, cs = P - P % R;
    int64_t q = p0;
    if (P / R > p0 / R) {
        /* a window closed in the chunk, the last one at cs - 1: its rows
         * into the current rows (those before p0 are there already), then
         * the roll of that close */
        if (coff == 2) comp_put_rows(st_kv, st_sc, R, coff, cw, kv, sc, p0, cs - R > p0 ? cs - R : p0, cs);
        comp_roll(st_kv, st_sc, R, coff, cw);
        q = cs;
    }
    comp_put_rows(st_kv, st_sc, R, coff, cw, kv, sc, p0, q, P);
}

/* Finish a pooled compressed row: norm, RoPE at the window's first
 * position, storage rounding. */
static void comp_finish(fwd *f, float *row, int w, const ds4_tensor *norm,
                        int64_t pos, int is_indexer) {
    const ds4_config *c = f->c;
    rms_norm(row, f32_of(norm), w, c->rms_eps, row);
    float cs[DS4_MAX_ROT_DIM / 2], sn[DS4_MAX_ROT_DIM / 2];
    rope_angles(&f->m->rope_comp, pos, cs, sn);
    rope_apply(row, w, c->n_rot, cs, sn, 0);
    if (f->qat) {
        if (is_indexer) indexer_qat(row, w);
        else fp8_kv_round(row, w - c->n_rot);
        f16_round_row(row, w);
    }
}

/* score += ape[pos mod R] for row t (width cw) */
static void add_ape_row(fwd *f, const ds4_tensor *ape, float *score, int t) {
    int cw = (int)ape->ne[0], R = (int)ape->ne[1];
    int p = (int)(row_pos(f, t) % R);
    float *s = score + (size_t)t * cw;
    if (ape->type == GGML_F16) {
        /* through kv_f16_to_f32 (F16C where built for it; the same exact
         * values as ds4_f16_to_f32, one call per element of which was ~1 %
         * of a long prefill) */
        const uint16_t *a = (const uint16_t *)ape->data + (size_t)p * cw;
        float buf[256];
        for (int j0 = 0; j0 < cw; j0 += 256) {
            const int nj = cw - j0 < 256 ? cw - j0 : 256;
            kv_f16_to_f32(a + j0, buf, (size_t)nj);
            for (int j = 0; j < nj; j++) s[j0 + j] += buf[j];
        }
    } else {
        for (int j = 0; j < cw; j++) s[j] += tval(ape, p * cw + j);
    }
}

/* the compressor's (and indexer's) position embeddings on row t's scores */
static void comp_ape_task(fwd *f, int t, void *ud) {
    const ds4_layer_weights *lw = ud;
    add_ape_row(f, &lw->comp_ape, f->sc->csc, t);
    if (lw->has_indexer) add_ape_row(f, &lw->idx_comp_ape, f->sc->isc, t);
}

/* Pool and finish the window of one frontier that closes at row t's
 * position pos: item it's rows of the chunk are kv/sc (stride coff w),
 * st_kv/st_sc its state as the chunk found it; the row is the item's k-th
 * close in the chunk, so it goes to stored row n_stored + k. */
static void comp_close(fwd *f, const ds4_cpu_item *it, int64_t pos, int R, int coff, int w,
                       const float *st_kv, const float *st_sc, const float *kv, const float *sc,
                       void *store, int n_stored, const ds4_tensor *norm, int is_indexer) {
    ds4_session *s = it->s;
    const int64_t p0 = it->p0, k = (pos + 1) / R - p0 / R - 1;
    const size_t off = (size_t)it->r0 * (size_t)(coff * w);
    float buf[DS4_MAX_HEAD_DIM];   /* kv16: the row is finished in float, then stored */
    comp_run run[4];
    int nrun = comp_runs(st_kv, st_sc, p0 - p0 % R - (int64_t)(coff - 1) * R, kv + off, sc + off, p0, R, coff,
                         w, pos, run);
    void *dst = kv_row(s, store, (size_t)(n_stored + k), w);
    float *row = s->kv16 ? buf : dst;
    comp_pool(run, nrun, coff * w, w, row);
    comp_finish(f, row, w, norm, pos + 1 - R, is_indexer);
    if (s->kv16) kv_put(s, row, dst, 1, w);
}

/* the windows closing at row t: the compressor's, the indexer's */
static void comp_close_task(fwd *f, int t, void *ud) {
    const ds4_layer_weights *lw = ud;
    const ds4_config *c = f->c;
    cpu_scratch *sc = f->sc;
    const int64_t pos = row_pos(f, t);
    if ((pos + 1) % lw->ratio) return;
    const ds4_cpu_item *it = row_item(f, t);
    const layer_state *st = it->st;
    comp_close(f, it, pos, lw->ratio, lw->coff, c->head_dim, st->st_kv, st->st_sc, sc->ckv, sc->csc,
               st->comp, st->n_comp, &lw->comp_norm, 0);
    if (lw->has_indexer)
        comp_close(f, it, pos, lw->ratio, 2, c->idx_dim, st->ist_kv, st->ist_sc, sc->ikv, sc->isc,
                   st->icomp, st->n_icomp, &lw->idx_comp_norm, 1);
}

/* Indexer score of one compressed row for token t (MODEL.md §4.5):
 * sum_h w_h * relu(q_h . k), heads in blocks sharing the key read.
 * The relu is a select, not a branch: the sign of a dot product is
 * random, and a mispredicted branch per (head, row) cost more than the
 * dot products (the indexer ran at ~8 % of the FMA peak).  Adding +0.0
 * for a skipped head leaves the sum's bits unchanged: it starts at +0.0
 * and a sum in round-to-nearest is never -0.0 unless both terms are. */
static inline float relu_w(float w, float d) {
    /* the product's bits masked by the comparison: GCC compiles a ?: of
     * the two to a branch */
    float p = w * d;
    uint32_t b;
    memcpy(&b, &p, 4);
    b &= (uint32_t)0 - (uint32_t)(d > 0);
    memcpy(&p, &b, 4);
    return p;
}

static float idx_score(fwd *f, int t, const float *ik) {
    const ds4_config *c = f->c;
    const vec_kernels *vk = f->m->vk;
    cpu_scratch *sc = f->sc;
    const int IH = c->idx_heads, ID = c->idx_dim;
    const float *iq = sc->iq + (size_t)t * IH * ID;
    const float *iw = sc->iw + (size_t)t * IH;
    float s = 0;
    int h = 0;
    for (; h + VEC_HB <= IH; h += VEC_HB) {
        float d4[VEC_HB];
        vk->dot4(iq + (size_t)h * ID, ID, ik, ID, d4);
        for (int k = 0; k < VEC_HB; k++) s += relu_w(iw[h + k], d4[k]);
    }
    for (; h < IH; h++) s += relu_w(iw[h], vk->dot(iq + (size_t)h * ID, ik, ID));
    return s;
}

/* The scores of four consecutive compressed rows: heads in blocks against
 * the four rows at once (dot4x4).  Per row the head order of the weighted
 * sum is the same as idx_score's. */
static void idx_score4(fwd *f, int t, const float *ik0, float *out) {
    const ds4_config *c = f->c;
    const vec_kernels *vk = f->m->vk;
    cpu_scratch *sc = f->sc;
    const int IH = c->idx_heads, ID = c->idx_dim;
    const float *iq = sc->iq + (size_t)t * IH * ID;
    const float *iw = sc->iw + (size_t)t * IH;
    const float *rows[4] = { ik0, ik0 + ID, ik0 + 2 * ID, ik0 + 3 * ID };
    float s[4] = { 0, 0, 0, 0 };
    int h = 0;
    for (; h + VEC_HB <= IH; h += VEC_HB) {
        float d16[16];
        vk->dot4x4(iq + (size_t)h * ID, ID, rows, ID, d16);
        /* per row j the heads are added in order k = 0..3, as above;
         * written k-outer so the four rows' sums go side by side */
        for (int k = 0; k < VEC_HB; k++)
            for (int j = 0; j < 4; j++) s[j] += relu_w(iw[h + k], d16[k * 4 + j]);
    }
    for (; h < IH; h++)
        for (int j = 0; j < 4; j++) s[j] += relu_w(iw[h], vk->dot(iq + (size_t)h * ID, rows[j], ID));
    memcpy(out, s, sizeof s);
}

/* Select the top_k highest scores among scores[0..n) (ties: lower index),
 * output sorted by index. */
static int select_topk(const float *scores, int n, int k, int *out) {
    /* binary min-heap of (score, -index): the root is the weakest kept */
    int hn = 0;
#define WEAKER(i, j) (scores[i] < scores[j] || (scores[i] == scores[j] && (i) > (j)))
    for (int i = 0; i < n; i++) {
        if (hn < k) {
            int p = hn++;
            out[p] = i;
            while (p > 0) {
                int q = (p - 1) / 2;
                if (WEAKER(out[p], out[q])) { int tmp = out[p]; out[p] = out[q]; out[q] = tmp; p = q; }
                else break;
            }
        } else if (WEAKER(out[0], i)) {
            out[0] = i;
            int p = 0;
            for (;;) {
                int l = 2 * p + 1, r = l + 1, m = p;
                if (l < hn && WEAKER(out[l], out[m])) m = l;
                if (r < hn && WEAKER(out[r], out[m])) m = r;
                if (m == p) break;
                int tmp = out[p]; out[p] = out[m]; out[m] = tmp; p = m;
            }
        }
    }
#undef WEAKER
    /* the kept indices in ascending order: marked in a bit set and read
     * back in order (an insertion sort of 512 indices took as long as
     * scoring 1500 rows), or, for more rows than the set holds (beyond a
     * 1M context), sorted by insertion */
    enum { SETW = 4096 };   /* 262144 rows: a 1M context at ratio 4 */
    if (n <= 64 * SETW) {
        uint64_t set[SETW];
        const int nw = (n + 63) / 64;
        memset(set, 0, (size_t)nw * sizeof set[0]);
        for (int i = 0; i < hn; i++) set[out[i] / 64] |= (uint64_t)1 << (out[i] % 64);
        int m = 0;
        for (int wi = 0; wi < nw; wi++)
            for (uint64_t b = set[wi]; b; b &= b - 1) out[m++] = 64 * wi + __builtin_ctzll(b);
        return hn;
    }
    for (int i = 1; i < hn; i++) {
        int v = out[i], j = i - 1;
        while (j >= 0 && out[j] > v) { out[j + 1] = out[j]; j--; }
        out[j + 1] = v;
    }
    return hn;
}

/* Indexer rows [r, r + nr) of a session as floats: the stored rows
 * themselves (f32 storage), or converted into kf (f16 storage: exact). */
static const float *idx_rows_f32(const ds4_session *s, const layer_state *st, long r, int nr, int ID, float *kf) {
    if (!s->kv16) return (const float *)st->icomp + (size_t)r * ID;
    kv_get(s, kv_row(s, st->icomp, (size_t)r, ID), kf, (size_t)nr, ID);
    return kf;
}

/* Scores of compressed rows [4 lo, 4 hi) of token t's n_vis into scores
 * through the float path: rows in aligned groups of four (the grouping,
 * hence every score, is the same whatever the thread count or the split);
 * kf: this thread's four float rows for f16 storage (the conversion is
 * exact). */
static void idx_score_groups(fwd *f, const ds4_session *s, const layer_state *st, int t, int n_vis,
                             long lo, long hi, float *kf, float *scores) {
    const int ID = f->c->idx_dim;
    for (long g = lo; g < hi; g++) {
        long r = 4 * g;
        int nr = n_vis - r < 4 ? (int)(n_vis - r) : 4;
        const float *rows = idx_rows_f32(s, st, r, nr, ID, kf);
        if (nr == 4) {
            idx_score4(f, t, rows, scores + r);
        } else {
            for (int k = 0; k < nr; k++)
                scores[r + k] = idx_score(f, t, rows + (size_t)k * ID);
        }
    }
}

/* FP4-coded indexer rows.  With QAT every indexer query head and
 * compressed row is, per block of 32, FP4 values (0, 0.5, .. 6) times a
 * power of two (MODEL.md §4.5), and the f16 storage of the rows keeps them
 * exactly.  With u = 2^(floor(log2 amax) - 3) each value of a block is an
 * integer c times u with |c| <= 15, so each block's dot product is an
 * exact integer (int8 products: vec_ops idx_score16, 3-4x the float
 * path's speed).  A vector codes when every value is such a multiple,
 * every u lies in [2^-60, 2^57] (a product of two u and an integer below
 * 2^13 then stays a normal float, so the kernel's scalings are exact) and
 * its non-zero blocks' exponents span at most vec_idx_spread(n): then, for a
 * coded query head and a coded row, every partial sum of their n products,
 * in any order, is an integer multiple of the smallest block product scale
 * below 2^24 of them, i.e. exact -- so the coded score and the float
 * path's (lanes, tree) both equal the exact dot, the same bits (test_vec
 * checks it at the bound).  Otherwise (no QAT; a row the f16 rounding did
 * not leave on the FP4 grid; blocks of very different sizes; inf, NaN) the
 * vector takes the float path.  x: n values (n % 32 == 0); c: n codes; p:
 * n / 32 block scales.  Returns whether the vector codes. */
static int idx_code_row(const float *x, int n, int8_t *c, float *p) {
    int ok = 1, emin = 1000, emax = -1000;
    for (int b = 0; b < n / 32; b++) {
        const float *xb = x + 32 * b;
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) {   /* comparisons, not libm fmaxf: vector code; a NaN is caught below */
            const float a = fabsf(xb[i]);
            amax = a > amax ? a : amax;
        }
        int e = 0;
        frexpf(amax, &e);   /* amax = m 2^e, m in [0.5, 1) */
        const int u = e - 4;
        if (amax == 0.0f) {
            memset(c + 32 * b, 0, 32);
            p[b] = 1.0f;
            continue;
        }
        if (!(amax < 0x1p61f) || u < -60) return 0;
        emin = e < emin ? e : emin;
        emax = e > emax ? e : emax;
        const float inv = ldexpf(1.0f, -u), pb = ldexpf(1.0f, u);
        for (int i = 0; i < 32; i++) {
            const float v = xb[i] * inv, r = rintf(v);
            float cv = r > -15.0f ? r : -15.0f;   /* NaN -> -15, then != v */
            cv = cv < 15.0f ? cv : 15.0f;
            ok &= (cv == v) & (cv * pb == xb[i]);   /* the product catches a v that underflowed */
            c[32 * b + i] = (int8_t)(int)cv;
        }
        p[b] = pb;
    }
    return ok && emax - emin <= vec_idx_spread(n);
}

/* Code rows [16 g0, 16 g1) of an item's first n indexer rows into
 * sc->ikc/ikp/ikok (rows past n: zero codes, not coded); kf: ID floats of
 * this thread (f16 storage). */
static void idx_code_groups(fwd *f, const ds4_session *s, const layer_state *st, int n, long g0, long g1,
                            float *kf) {
    cpu_scratch *sc = f->sc;
    const int ID = f->c->idx_dim, NB = ID / 32;
    int8_t c[DS4_IDX_CODE_MAX];
    float p[DS4_IDX_CODE_MAX / 32];
    for (long g = g0; g < g1; g++) {
        uint8_t *kc = sc->ikc + (size_t)g * 16 * ID;
        float *kp = sc->ikp + (size_t)g * 16 * NB;
        for (int r = 0; r < 16; r++) {
            const long row = 16 * g + r;
            int ok = 0;
            if (row < n) ok = idx_code_row(idx_rows_f32(s, st, row, 1, ID, kf), ID, c, p);
            if (!ok) {
                memset(c, 0, (size_t)ID);
                for (int b = 0; b < NB; b++) p[b] = 1.0f;
            }
            sc->ikok[row] = (uint8_t)ok;
            uint8_t cb[DS4_IDX_CODE_MAX];
            for (int i = 0; i < ID; i++) cb[i] = (uint8_t)(c[i] + 16);
            for (int q = 0; q < ID / 4; q++) memcpy(kc + 64 * q + 4 * r, cb + 4 * q, 4);
            for (int b = 0; b < NB; b++) kp[16 * b + r] = p[b];
        }
    }
}

typedef struct {
    fwd *f;
    const ds4_session *s;
    const layer_state *st;
    int n;
} idx_code_job;

static void idx_code_task(void *ctx, int ith, int nth) {
    idx_code_job *j = ctx;
    long lo, hi;
    ds4_split((j->n + 15) / 16, ith, nth, &lo, &hi);
    idx_code_groups(j->f, j->s, j->st, j->n, lo, hi, j->f->sc->idx_kf + (size_t)ith * 4 * j->f->c->idx_dim);
}

/* Whether token t's scores take the coded path: its heads coded and the
 * item's rows coded (the same for a token in prefill and in decode: a
 * function of its own data). */
static int idx_coded(const fwd *f, int t, int n_vis) {
    return f->ik_n >= n_vis && f->sc->iqok[t];   /* ik_n > 0: iqok exists */
}

/* Scores of rows [16 g0, 16 g1) of token t's n_vis through the coded
 * kernel; rows that did not code (rare with QAT) get the float path's
 * score one by one (idx_score: per row the same bits as idx_score4). */
static void idx_score_coded(fwd *f, const ds4_session *s, const layer_state *st, int t, int n_vis, long g0,
                            long g1, float *kf, float *scores) {
    const ds4_config *c = f->c;
    cpu_scratch *sc = f->sc;
    const int IH = c->idx_heads, ID = c->idx_dim, NB = ID / 32;
    const int8_t *qc = sc->iqc + (size_t)t * IH * ID;
    const float *qp = sc->iqp + (size_t)t * IH * NB, *w = sc->iw + (size_t)t * IH;
    const int32_t *qs = sc->iqs + (size_t)t * IH * NB;
    for (long g = g0; g < g1; g++) {
        const long r0 = 16 * g;
        const int nr = n_vis - r0 < 16 ? (int)(n_vis - r0) : 16;
        float out[16];
        f->m->vk->idx_score16(qc, qp, qs, w, IH, NB, sc->ikc + (size_t)g * 16 * ID, sc->ikp + (size_t)g * 16 * NB,
                              out);
        memcpy(scores + r0, out, (size_t)nr * sizeof(float));
        for (int k = 0; k < nr; k++) {
            if (!sc->ikok[r0 + k]) scores[r0 + k] = idx_score(f, t, idx_rows_f32(s, st, r0 + k, 1, ID, kf));
        }
    }
}

/* Token t's scores of row units [lo, hi): 16-row groups on the coded
 * path, else 4-row groups */
static int idx_unit(const fwd *f, int t, int n_vis) { return idx_coded(f, t, n_vis) ? 16 : 4; }
static void idx_score_rows(fwd *f, const ds4_session *s, const layer_state *st, int t, int n_vis, long lo, long hi,
                           float *kf, float *scores) {
    if (idx_coded(f, t, n_vis)) idx_score_coded(f, s, st, t, n_vis, lo, hi, kf, scores);
    else idx_score_groups(f, s, st, t, n_vis, lo, hi, kf, scores);
}

/* One token, its rows split across the threads (decode, a few tokens). */
typedef struct {
    fwd *f;
    const ds4_session *s;   /* the row's session */
    layer_state *st;
    int t;
    int n_vis;
    float *scores;
} idx_rows_job;

static void idx_rows_task(void *ctx, int ith, int nth) {
    idx_rows_job *j = ctx;
    long lo, hi;
    const int u = idx_unit(j->f, j->t, j->n_vis);
    ds4_split((j->n_vis + u - 1) / u, ith, nth, &lo, &hi);
    idx_score_rows(j->f, j->s, j->st, j->t, j->n_vis, lo, hi,
                   j->f->sc->idx_kf + (size_t)ith * 4 * j->f->c->idx_dim, j->scores);
}

/* --dump-indexer: row t's kept minimum and rejected maximum at layer il
 * (the buffer's rows for this pass were reserved by eval_pass). */
static void idx_capture(fwd *f, int il, int t, const float *scores, int n_vis) {
    ds4_buf *b = f->s->cap_indexer;
    if (!b) return;
    const ds4_config *c = f->c;
    const int k = f->sc->ntopk[t];
    const int *kept = f->sc->topk + (size_t)t * c->idx_topk;
    float lo = INFINITY, hi = -INFINITY;
    for (int i = 0, j = 0; i < n_vis; i++) {   /* kept is ascending */
        if (j < k && kept[j] == i) { lo = fminf(lo, scores[i]); j++; }
        else hi = fmaxf(hi, scores[i]);
    }
    float *row = (float *)(b->p + b->n) + ((size_t)t * c->n_layer + (size_t)il) * 2;
    row[0] = lo;
    row[1] = hi;
}

/* Many tokens (prefill): each thread takes whole tokens, scores all their
 * rows into its own score row and selects their top-k itself, instead of
 * one parallel section per token and a top-k on the calling thread while
 * the others wait (~10 % of the indexer stage at ctx 8192, medium q2, 2
 * threads).  Tokens [next, end) of one item are taken one at a time from
 * a shared counter: later tokens see more rows. */
typedef struct {
    fwd *f;
    int R, il;
    int end;
    _Atomic int next;
} idx_tok_job;

static void idx_tok_task(void *ctx, int ith, int nth) {
    (void)nth;
    idx_tok_job *j = ctx;
    fwd *f = j->f;
    const ds4_config *c = f->c;
    cpu_scratch *sc = f->sc;
    float *scores = sc->scores + (size_t)ith * sc->scores_rows;
    float *kf = sc->idx_kf + (size_t)ith * 4 * c->idx_dim;
    for (;;) {
        int t = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (t >= j->end) break;
        int n_vis = (int)((row_pos(f, t) + 1) / j->R);
        if (n_vis <= c->idx_topk) { sc->ntopk[t] = -1; continue; }
        const ds4_cpu_item *it = row_item(f, t);
        const int u = idx_unit(f, t, n_vis);
        idx_score_rows(f, it->s, it->st, t, n_vis, 0, (n_vis + u - 1) / u, kf, scores);
        sc->ntopk[t] = select_topk(scores, n_vis, c->idx_topk, sc->topk + (size_t)t * c->idx_topk);
        idx_capture(f, j->il, t, scores, n_vis);
    }
}

/* Item by item: its visible rows coded once (when its queries can use
 * them), then its tokens scored and their top-k selected. */
static void idx_select(fwd *f, int il) {
    const ds4_config *c = f->c;
    cpu_scratch *sc = f->sc;
    int R = layer_w(f, il)->ratio;
    const int nth = ds4_pool_size(f->cc.pool);
    for (int i = 0; i < f->n_it; i++) {
        const ds4_cpu_item *it = &f->it[i];
        const int nmax = (int)((it->p0 + it->n) / R);
        if (nmax <= c->idx_topk) {
            for (int t = it->r0; t < it->r0 + it->n; t++) sc->ntopk[t] = -1;
            continue;
        }
        int anyq = 0;   /* iqok exists only with the coded scratch (ik_rows) */
        if (sc->ik_rows)
            for (int t = it->r0; t < it->r0 + it->n; t++) anyq |= sc->iqok[t];
        f->ik_n = 0;
        if (anyq && (size_t)nmax <= sc->ik_rows) {
            idx_code_job cj = { f, it->s, it->st, nmax };
            if (nmax < 256) idx_code_task(&cj, 0, 1);
            else ds4_pool_run(f->cc.pool, idx_code_task, &cj);
            f->ik_n = nmax;
        }
        if (it->n >= 2 * nth && nth > 1) {
            idx_tok_job j = { .f = f, .R = R, .il = il, .end = it->r0 + it->n };
            atomic_init(&j.next, it->r0);
            ds4_pool_run(f->cc.pool, idx_tok_task, &j);
            continue;
        }
        for (int t = it->r0; t < it->r0 + it->n; t++) {
            int n_vis = (int)((row_pos(f, t) + 1) / R);
            if (n_vis <= c->idx_topk) { sc->ntopk[t] = -1; continue; }
            idx_rows_job j = { f, it->s, it->st, t, n_vis, sc->scores };
            if (n_vis < 256) idx_rows_task(&j, 0, 1);
            else ds4_pool_run(f->cc.pool, idx_rows_task, &j);
            sc->ntopk[t] = select_topk(sc->scores, n_vis, c->idx_topk,
                                       sc->topk + (size_t)t * c->idx_topk);
            idx_capture(f, il, t, sc->scores, n_vis);
        }
    }
    f->ik_n = 0;
}

/* Attention for every (token, head). */
typedef struct {
    fwd *f;
    int il;
    _Atomic long next; /* next (token, head block) item to take */
    long grab;         /* items taken at once */
    /* attn_output_a's activation kind when it is quantized (not ACT_F32):
     * each item quantizes its heads' outputs straight into row t of qa
     * (qrb bytes a row), where mm_multi would put them, instead of
     * writing the chunk's float outputs (268 MB a layer at 2048 tokens)
     * for a pass of their own to read back */
    act_kind qk;
    uint8_t *qa;
    size_t qrb;
} attn_job;

static void attn_task(void *ctx, int ith, int nth) {
    attn_job *j = ctx;
    fwd *f = j->f;
    const ds4_config *c = f->c;
    const ds4_layer_weights *lw = layer_w(f, j->il);
    const vec_kernels *vk = f->m->vk;
    cpu_scratch *sc = f->sc;
    const int d = c->head_dim, H = c->n_head, R = lw->ratio, hr = c->n_rot / 2;
    const int nblk = (H + VEC_HB - 1) / VEC_HB;
    const float scale = 1.0f / sqrtf((float)d);
    /* room for the most keys any token sees (the window plus at most top_k
     * rows where an indexer selects): not the whole compressed capacity */
    const size_t wcap = sc->kf_rows;
    float *wbuf = sc->attn_w + (size_t)ith * VEC_HB * wcap;
    /* an item's outputs when they are quantized right away (j->qk) */
    float obuf[VEC_HB * DS4_MAX_HEAD_DIM] __attribute__((aligned(64)));
    /* f16 rows: a token's keys are converted once into this thread's
     * float rows and reused while its next items are head blocks of the
     * same token (conversion is exact, so the kernels see the same
     * values as with float32 storage) */
    float *kf = f->s->kv16 ? sc->attn_kf + (size_t)ith * wcap * d : NULL;
    int kf_t = -1;
    int qn_t = -1;   /* the token whose queries this thread normalized whole */
    /* Items are taken from a shared counter, not split statically: a
     * token's key count grows with its position (compressed rows, the
     * indexer's top-k filling up), so in a first chunk the later tokens
     * cost several times the early ones.  Which thread computes an item
     * does not change its result. */
    (void)nth;
    const long nitem = (long)f->T * nblk;
    for (long tb = 0, hi = 0;; tb++) {
        if (tb >= hi) {
            tb = atomic_fetch_add_explicit(&j->next, j->grab, memory_order_relaxed);
            if (tb >= nitem) break;
            hi = tb + j->grab < nitem ? tb + j->grab : nitem;
        }
        int t = (int)(tb / nblk), h0 = (int)(tb % nblk) * VEC_HB;
        int nh = H - h0 < VEC_HB ? H - h0 : VEC_HB;
        /* the row's own session: its window, its compressed rows */
        const ds4_cpu_item *it = row_item(f, t);
        const ds4_session *s = it->s;
        layer_state *st = it->st;
        int64_t pos = row_pos(f, t);
        float *q = sc->q + ((size_t)t * H + h0) * d;
        float *o = j->qk != ACT_F32 ? obuf : sc->heads + ((size_t)t * H + h0) * d;
        /* the queries: per-head RMSNorm without weight, then RoPE on the
         * tail, here rather than in a pass of its own over the chunk's
         * queries (268 MB a layer at 2048 tokens, read from memory and
         * written back before the attention read them again); per row the
         * same operations.  A grab that holds all of a token's head blocks
         * does the token's heads at once (their serial norm sums side by
         * side: 4 heads alone wait on one 512-long add chain), otherwise
         * the item does its own heads. */
        if (qn_t != t) {
            const int whole = h0 == 0 && tb + nblk <= hi;
            const int hn = whole ? H : nh;
            rms_norm_rows(vk, q, d, NULL, hn, d, c->rms_eps, q, d, 0);
            for (int h = 0; h < hn; h++)
                rope_apply(q + (size_t)h * d, d, c->n_rot, sc->cs + (size_t)t * hr, sc->sn + (size_t)t * hr, 0);
            if (whole) qn_t = t;
        }
        /* keys: raw rows of positions (pos - n_swa, pos], then the visible
         * (or indexer-selected) compressed rows; values are the keys */
        int64_t first = pos - c->n_swa + 1;
        if (first < 0) first = 0;
        int nraw = (int)(pos - first + 1);
        const size_t raw0 = (size_t)st->raw_start + (size_t)(first - it->raw_base_pos);
        int ncomp = 0;
        const int *sel = NULL;
        if (R) {
            if (lw->has_indexer && sc->ntopk[t] >= 0) {
                ncomp = sc->ntopk[t];
                sel = sc->topk + (size_t)t * c->idx_topk;
            } else {
                ncomp = (int)((pos + 1) / R);
            }
        }
        const int nk = nraw + ncomp;
#define KEY(r) ((r) < nraw ? kv_row(s, st->raw, raw0 + (size_t)(r), d) \
                           : kv_row(s, st->comp, (size_t)(sel ? sel[(r) - nraw] : (r) - nraw), d))
        /* the key rows, gathered once for scores and values */
        const float **kp = sc->attn_kp + (size_t)ith * wcap;
        if ((size_t)nk > wcap) abort();   /* scratch sized by keys_max: a bug */
        if (!s->kv16) {
            for (int r = 0; r < nk; r++) kp[r] = KEY(r);
        } else if (kf_t != t) {
            kv_get(s, kv_row(s, st->raw, raw0, d), kf, (size_t)nraw, d);
            for (int r = nraw; r < nk; r++) kv_get(s, KEY(r), kf + (size_t)r * d, 1, d);
            for (int r = 0; r < nk; r++) kp[r] = kf + (size_t)r * d;
            kf_t = t;
        }
        /* scores: a block of heads against four keys per pass, then the
         * remaining keys one by one (the grouping depends only on the
         * token's key count, so decode and prefill compute alike) */
        int r = 0;
        if (nh == VEC_HB)
            for (; r + 4 <= nk; r += 4) {
                float s16[16];
                vk->dot4x4(q, d, kp + r, d, s16);
                for (int h = 0; h < VEC_HB; h++)
                    for (int jj = 0; jj < 4; jj++) wbuf[(size_t)h * wcap + r + jj] = s16[h * 4 + jj] * scale;
            }
        for (; r < nk; r++) {
            float s4[VEC_HB];
            if (nh == VEC_HB) vk->dot4(q, d, kp[r], d, s4);
            else for (int h = 0; h < nh; h++) s4[h] = vk->dot(q + (size_t)h * d, kp[r], d);
            for (int h = 0; h < nh; h++) wbuf[(size_t)h * wcap + r] = s4[h] * scale;
        }
        /* softmax with the sink as an extra logit that carries no value */
        float inv[VEC_HB];
        for (int h = 0; h < nh; h++) {
            float *w = wbuf + (size_t)h * wcap;
            float sink = tval(&lw->attn_sinks, h0 + h), mx = sink;
            for (int r = 0; r < nk; r++) mx = max_bound(w[r], mx);
            /* the keys' terms in 16 lanes (vec_ops exp_sum), then the sink's */
            float den = vk->exp_sum(w, nk, mx);
            den += vec_expf(sink - mx);
            inv[h] = 1.0f / den;   /* reciprocal, as the original engine */
        }
        /* values are the keys: weighted sums in key order */
        if (nh == VEC_HB) {
            vk->wsum4(o, d, kp, wbuf, wcap, nk, d);
        } else {
            for (int h = 0; h < nh; h++) {
                float *oh = o + (size_t)h * d;
                memset(oh, 0, (size_t)d * sizeof(float));
                for (int r = 0; r < nk; r++) {
                    float e = wbuf[(size_t)h * wcap + r];
                    for (int i = 0; i < d; i++) oh[i] += e * kp[r][i];
                }
            }
        }
#undef KEY
        for (int h = 0; h < nh; h++) {
            float *oh = o + (size_t)h * d;
            for (int i = 0; i < d; i++) oh[i] *= inv[h];
            /* de-rotate at the query position before the output projection */
            rope_apply(oh, d, c->n_rot, sc->cs + (size_t)t * hr, sc->sn + (size_t)t * hr, 1);
        }
        /* blocks of whole heads: the bytes a quantization of the whole row
         * gives (attention() checks the block size) */
        if (j->qk != ACT_F32)
            act_quantize_row(f->cc.k, j->qk, o, nh * d, j->qa + (size_t)t * j->qrb + act_row_bytes(j->qk, h0 * d));
    }
}

static void idx_q_task(fwd *f, int t, void *ud) {
    (void)ud;
    const ds4_config *c = f->c;
    cpu_scratch *sc = f->sc;
    const int hr = c->n_rot / 2;
    float cs[DS4_MAX_ROT_DIM / 2], sn[DS4_MAX_ROT_DIM / 2];
    (void)hr;
    rope_angles(&f->m->rope_comp, row_pos(f, t), cs, sn);
    float *iq = sc->iq + (size_t)t * c->idx_heads * c->idx_dim;
    for (int h = 0; h < c->idx_heads; h++) {
        float *qh = iq + (size_t)h * c->idx_dim;
        rope_apply(qh, c->idx_dim, c->n_rot, cs, sn, 0);
        if (f->qat) indexer_qat(qh, c->idx_dim);
    }
    /* the FP4 codes of the coded path (idx_code_row; ik_rows 0: no coded
     * scratch -- no storage roundings, or a head dim it does not take) */
    if (sc->ik_rows) {
        const int IH = c->idx_heads, ID = c->idx_dim, NB = ID / 32;
        int ok = f->qat;
        /* a head that does not code sends the token to the float path:
         * its codes are not read, so the rest is not coded */
        for (int h = 0; h < IH && ok; h++) {
            const size_t hq = (size_t)t * IH + h;
            int8_t *qc = sc->iqc + hq * ID;
            ok = idx_code_row(iq + (size_t)h * ID, ID, qc, sc->iqp + hq * NB);
            for (int b = 0; b < NB; b++) {
                int32_t sum = 0;
                for (int i = 0; i < 32; i++) sum += qc[32 * b + i];
                sc->iqs[hq * NB + b] = 16 * sum;
            }
        }
        sc->iqok[t] = ok;
    }
    float s = 1.0f / sqrtf((float)(c->idx_dim * c->idx_heads));
    float *iw = sc->iw + (size_t)t * c->idx_heads;
    for (int h = 0; h < c->idx_heads; h++) iw[h] *= s;
}

/* Make room for T more raw rows, keeping the last n_swa. */
static void raw_reserve(const ds4_session *s, layer_state *st, int d, int n_swa, int T) {
    if (st->raw_start + st->raw_len + T <= st->raw_cap) return;
    int keep = st->raw_len < n_swa ? st->raw_len : n_swa;
    memmove(st->raw, kv_row(s, st->raw, (size_t)(st->raw_start + st->raw_len - keep), d),
            (size_t)keep * d * kv_es(s));
    st->raw_start = 0;
    st->raw_len = keep;
}

/* A staged pass (speculative decoding, session.c): the compressor inputs
 * of layer `il` (scores with APE) go to the session's staging buffers, so
 * that ds4_session_draft_commit can rebuild the frontiers of the rows it
 * keeps. */
static void stage_rows(ds4_session *s, int il, const float *ckv, const float *csc, int cw,
                       const float *ikv, const float *isc, int iw, int T) {
    layer_stage *g = &s->stg[il];
    memcpy(g->ckv, ckv, (size_t)T * cw * sizeof(float));
    memcpy(g->csc, csc, (size_t)T * cw * sizeof(float));
    if (g->ikv) {
        memcpy(g->ikv, ikv, (size_t)T * iw * sizeof(float));
        memcpy(g->isc, isc, (size_t)T * iw * sizeof(float));
    }
}

static void attention(fwd *f, int il) {
    const ds4_config *c = f->c;
    const ds4_layer_weights *lw = layer_w(f, il);
    cpu_scratch *sc = f->sc;
    const int T = f->T, D = c->n_embd, d = c->head_dim;
    layer_ud L = { il, lw->ratio ? &f->m->rope_comp : &f->m->rope_dense };

    hc_w h = { &lw->hc_attn_fn, &lw->hc_attn_scale, &lw->hc_attn_base };
    hc_pre(f, &h);
    PROF(PS_NORM, for_rows(f, norm_rows, (void *)&lw->attn_norm));
    PROF(PS_NORM, for_tokens(f, rope_tables_task, &L));

    /* every projection of the normed input in one section: queries'
     * low-rank path, the KV head, the compressors */
    mm_spec sp[8];
    int ns = 0;
    const int cwid = lw->coff * d, iw2 = 2 * c->idx_dim;
    sp[ns++] = spec(&lw->attn_q_a, sc->qa, c->q_lora);
    sp[ns++] = spec(&lw->attn_kv, sc->kv, d);
    if (lw->ratio) {
        sp[ns++] = spec(&lw->comp_kv, sc->ckv, cwid);
        sp[ns++] = spec(&lw->comp_gate, sc->csc, cwid);
        if (lw->has_indexer) {
            sp[ns++] = spec(&lw->idx_comp_kv, sc->ikv, iw2);
            sp[ns++] = spec(&lw->idx_comp_gate, sc->isc, iw2);
        }
    }
    mm_multi(f, sc->a, D, D, sp, ns);
    PROF(PS_NORM, for_rows(f, qr_norm_rows, &L));
    /* the indexer's queries (a 16 MB matrix in Flash) only when some token
     * of the chunk sees more compressed rows than top_k */
    int need_idx = 0;
    for (int i = 0; i < f->n_it && lw->has_indexer; i++)
        need_idx |= (f->it[i].p0 + f->it[i].n) / lw->ratio > c->idx_topk;
    ns = 0;
    sp[ns++] = spec(&lw->attn_q_b, sc->q, (size_t)c->n_head * d);
    if (need_idx) sp[ns++] = spec(&lw->idx_q_b, sc->iq, (size_t)c->idx_heads * c->idx_dim);
    mm_multi(f, sc->qr, c->q_lora, c->q_lora, sp, ns);
    if (need_idx) mm(f, &lw->idx_proj, sc->a, D, sc->iw, c->idx_heads);
    PROF(PS_NORM, for_tokens(f, kv_post_task, &L));

    /* append each item's new raw rows to its session's window */
    prof_t t0 = prof_now();
    for (int i = 0; i < f->n_it; i++) {
        ds4_cpu_item *it = &f->it[i];
        layer_state *st = it->st = layer_st(it->s, il);
        raw_reserve(it->s, st, d, c->n_swa, it->n);
        it->raw_base_pos = it->p0 - st->raw_len;   /* position of row raw_start */
        kv_put(it->s, sc->kv + (size_t)it->r0 * d,
               kv_row(it->s, st->raw, (size_t)(st->raw_start + st->raw_len), d), (size_t)it->n, d);
        st->raw_len += it->n;
    }
    prof_add(PS_ATTN, t0);

    if (lw->ratio) {
        t0 = prof_now();
        const int R = lw->ratio, cw = cwid;
        for_tokens(f, comp_ape_task, (void *)lw);
        if (f->s->stg_on)   /* speculative pass (one item): keep the rows for a rollback */
            stage_rows(f->s, il, sc->ckv, sc->csc, cw, sc->ikv, sc->isc, iw2, T);
        /* the windows that close in the chunk, in parallel; then each
         * item's frontier as its rows, pushed in order, leave it */
        for_tokens(f, comp_close_task, (void *)lw);
        for (int i = 0; i < f->n_it; i++) {
            const ds4_cpu_item *it = &f->it[i];
            layer_state *st = it->st;
            const int nclose = (int)((it->p0 + it->n) / R - it->p0 / R);
            ds4_cpu_frontier_advance(st->st_kv, st->st_sc, R, lw->coff, d, sc->ckv + (size_t)it->r0 * cw,
                                     sc->csc + (size_t)it->r0 * cw, it->p0, it->n);
            st->n_comp += nclose;
            if (lw->has_indexer) {
                ds4_cpu_frontier_advance(st->ist_kv, st->ist_sc, R, 2, c->idx_dim,
                                         sc->ikv + (size_t)it->r0 * iw2, sc->isc + (size_t)it->r0 * iw2, it->p0,
                                         it->n);
                st->n_icomp += nclose;
            }
        }
        prof_add(PS_COMP, t0);
        if (lw->has_indexer) {
            t0 = prof_now();
            if (need_idx) {
                for_tokens(f, idx_q_task, NULL);
                idx_select(f, il);
            } else {
                for (int t = 0; t < T; t++) sc->ntopk[t] = -1;
            }
            prof_add(PS_IDX, t0);
        }
    }

    attn_job j = { .f = f, .il = il };
    {
        /* a few items per grab; one at a time when there are few (decode) */
        long nitem = (long)T * ((c->n_head + VEC_HB - 1) / VEC_HB);
        long g = nitem / (8L * ds4_pool_size(f->cc.pool)), nblk = (c->n_head + VEC_HB - 1) / VEC_HB;
        /* at most one token's head blocks: a thread then converts an f16
         * token's keys once rather than each thread converting them for
         * its share of the token's blocks */
        j.grab = g < 1 ? 1 : g > nblk ? nblk : g;
        atomic_init(&j.next, 0);
        /* attn_output_a's activations quantized by the items, when its
         * blocks are whole heads (each item quantizes whole blocks) */
        act_kind k = act_kind_for(lw->attn_output_a.type, f->no_qat);
        j.qk = k != ACT_F32 && d % act_block_elems(k) == 0 ? k : ACT_F32;
        j.qa = sc->qscratch;
        j.qrb = act_row_bytes(k, c->n_head * d);
    }
    PROF(PS_ATTN, ds4_pool_run(f->cc.pool, attn_task, &j));

    /* grouped low-rank output: group g maps its heads through rows
     * [g*o_lora, (g+1)*o_lora) of attn_output_a */
    const int G = c->o_groups, gdim = (c->n_head / G) * d;
    mm_spec og[DS4_MAX_OUT_GROUPS];   /* G <= DS4_MAX_OUT_GROUPS (binder) */
    for (int g = 0; g < G; g++) {
        og[g].W = mat_rows(mat_of(&lw->attn_output_a), g * c->o_lora, c->o_lora);
        og[g].W.n_in = gdim;
        og[g].col0 = g * gdim;
        og[g].out = sc->low + (size_t)g * c->o_lora;
        og[g].ostride = (size_t)G * c->o_lora;
    }
    mm_multi_pre(f, sc->heads, (size_t)c->n_head * d, c->n_head * d, og, G, j.qk);
    mm(f, &lw->attn_output_b, sc->low, (size_t)G * c->o_lora, sc->y, D);
    hc_post(f, il, 0);
}

/* ---------------------------------------------------------------------- */
/* MoE FFN (docs/MODEL.md §5)                                             */
/* ---------------------------------------------------------------------- */

static float softplus_stable(float x) {
    if (x > 20.0f) return x;
    if (x < -20.0f) return expf(x);
    return log1pf(expf(x));
}

typedef struct { int il; const int32_t *toks; } route_ud;

static void route_task(fwd *f, int t, void *ud) {
    const route_ud *r = ud;
    const ds4_config *c = f->c;
    const ds4_layer_weights *lw = layer_w(f, r->il);
    cpu_scratch *sc = f->sc;
    const int E = c->n_expert, K = c->n_expert_used;
    float *lg = sc->rlog + (size_t)t * E;
    for (int e = 0; e < E; e++) lg[e] = sqrtf(softplus_stable(lg[e]));   /* p_e */
    int *sel = sc->sel + (size_t)t * K;
    if (r->il < c->n_hash) {
        const int32_t *row = (const int32_t *)lw->tid2eid.data + (size_t)r->toks[t] * K;
        for (int k = 0; k < K; k++) sel[k] = row[k];
    } else {
        const float *bias = lw->exp_probs_b.data ? f32_of(&lw->exp_probs_b) : NULL;
        /* top-K of p + bias, ties to the lower expert index */
        for (int k = 0; k < K; k++) sel[k] = -1;
        for (int k = 0; k < K; k++) {
            int best = -1;
            float bv = -INFINITY;
            for (int e = 0; e < E; e++) {
                int used = 0;
                for (int q = 0; q < k; q++) used |= sel[q] == e;
                if (used) continue;
                float v = lg[e] + (bias ? bias[e] : 0.0f);
                if (best < 0 || v > bv) { best = e; bv = v; }
            }
            sel[k] = best;
        }
    }
    float *w = sc->wts + (size_t)t * K, sum = 0;
    for (int k = 0; k < K; k++) { w[k] = lg[sel[k]]; sum += w[k]; }
    if (c->expert_norm) {
        float den = fmaxf(sum, 6.103515625e-5f);
        for (int k = 0; k < K; k++) w[k] /= den;
    }
    for (int k = 0; k < K; k++) w[k] *= c->expert_scale;
}

typedef struct {
    fwd *f;
    float clamp;
    float *g, *u;
    int n, F;
    const float *wrow;   /* per-row weight or NULL */
    act_kind qk;         /* with q: each finished row is also quantized */
    uint8_t *q;          /* ... into q + r * rb (the `down` input), or NULL */
    size_t rb;
} swiglu_job;

/* Per element: clamp, m = g / (1 + exp(-g)) * u (siluf), times the row's
 * routing weight.  Done in blocks of SWIGLU_BLK: the exponentials in one
 * call of the vec table's exp (vec_expf, the same bits in every table:
 * libm's scalar expf was more than half of this stage), everything else
 * in loops the compiler vectorises (the division above all), each element
 * getting exactly the operations of the one-loop form. */
#define SWIGLU_BLK 256

static void swiglu_task(void *ctx, int ith, int nth) {
    swiglu_job *j = ctx;
    long lo, hi;
    ds4_split(j->n, ith, nth, &lo, &hi);
    const float c = j->clamp;
    const int clamped = c > 1e-6f;
    const vec_kernels *vk = j->f->m->vk;
    float gv[SWIGLU_BLK], ex[SWIGLU_BLK];
    for (long r = lo; r < hi; r++) {
        float *g = j->g + (size_t)r * j->F;
        const float *u = j->u + (size_t)r * j->F;
        const float wt = j->wrow ? j->wrow[r] : 1.0f;
        for (int i0 = 0; i0 < j->F; i0 += SWIGLU_BLK) {
            const int nb = j->F - i0 < SWIGLU_BLK ? j->F - i0 : SWIGLU_BLK;
            if (clamped) for (int i = 0; i < nb; i++) gv[i] = min_bound(g[i0 + i], c);
            else for (int i = 0; i < nb; i++) gv[i] = g[i0 + i];
            for (int i = 0; i < nb; i++) ex[i] = -gv[i];
            vk->exp(ex, ex, nb);
            for (int i = 0; i < nb; i++) {
                float uv = u[i0 + i];
                if (clamped) uv = min_bound(max_bound(uv, -c), c);
                float m = gv[i] / (1.0f + ex[i]) * uv;
                g[i0 + i] = j->wrow ? m * wt : m;
            }
        }
        /* the row is still in L1/L2: quantizing it here spares a second
         * pass over all the rows from DRAM (100 MB per layer at chunk
         * 2048); the bytes are the same as quantize_rows' */
        if (j->q) act_quantize_row(j->f->cc.k, j->qk, g, j->F, j->q + (size_t)r * j->rb);
    }
}

/* SwiGLU of n rows in place in g; with q, each row is then quantized as
 * `qk` into q + r * rb (counted under "swiglu" by DS4_PROFILE). */
static void swiglu_q(fwd *f, float *g, float *u, int n, int F, float clamp, const float *wrow,
                     act_kind qk, uint8_t *q, size_t rb) {
    swiglu_job j = { f, clamp, g, u, n, F, wrow, qk, q, rb };
    prof_t t0 = prof_now();
    if ((long)n * F < 65536) swiglu_task(&j, 0, 1);
    else ds4_pool_run(f->cc.pool, swiglu_task, &j);
    prof_add(PS_SWIGLU, t0);
}

static void swiglu(fwd *f, float *g, float *u, int n, int F, float clamp, const float *wrow) {
    swiglu_q(f, g, u, n, F, clamp, wrow, ACT_F32, NULL, 0);
}

/* --ssd-streaming (expert_cache.c): the routed products of one MoE
 * sub-batch on the cache's copies of the experts.  All of this rank's
 * experts are asked for at once (the cache's threads read the misses),
 * and each batch already in memory is computed while the rest arrive.
 * gate/up, SwiGLU, quantization and down of an expert touch only its own
 * rows and see the same kernels on the same bytes, so batching changes
 * nothing in the numbers, and the caller sums the experts per token in
 * ascending expert order as the resident path does.  With fewer slots
 * than experts this simply runs in more batches (waves).  The quantized
 * `down` inputs go after the gate/up inputs in qscratch (sized 2x the
 * larger of the two, session.c), since later batches still need `ain`. */
static int moe_streamed(fwd *f, int il, int nt, act_kind kin, act_kind kdn, const uint8_t *ain,
                        size_t rb_in, size_t rb_dn, const float *wrow, int e_lo, int e_hi) {
    const ds4_layer_weights *lw = layer_w(f, il);
    cpu_scratch *sc = &f->s->sc;
    struct ds4_xcache *xc = f->s->m->xc;
    const int D = f->c->n_embd, F = f->c->n_ff_exp;
    mm_group *grp = (mm_group *)sc->qscratch2;   /* 2*E groups fit (sized at init) */
    uint8_t *amid = (uint8_t *)ain + (size_t)nt * rb_in;
    int need[DS4_MAX_EXPERT], idx[DS4_MAX_EXPERT], nn = 0;
    for (int e = e_lo; e < e_hi; e++)
        if (sc->ecount[e]) need[nn++] = e;
    xc_begin(xc, il, need, nn);
    int got;
    while ((got = xc_next(xc, idx, nn)) > 0) {
        const uint8_t *w3[3];
        int ng = 0;
        for (int j = 0; j < got; j++) {
            int e = need[idx[j]];
            xc_weights(xc, idx[j], w3);
            mm_group gg = { .W = mat_expert(&lw->ffn_gate_exps, 0), .kind = kin, .act = ain,
                            .act_stride = rb_in, .rows = sc->erows + sc->eoff[e],
                            .n_rows = sc->ecount[e], .out = sc->g + (size_t)sc->eoff[e] * F,
                            .out_stride = F };
            gg.W.w = w3[0];
            grp[ng++] = gg;
            gg.W = mat_expert(&lw->ffn_up_exps, 0);
            gg.W.w = w3[1];
            gg.out = sc->u + (size_t)sc->eoff[e] * F;
            grp[ng++] = gg;
        }
        run_mm(f, PM_GATEUP, grp, ng);
        ng = 0;
        for (int j = 0; j < got; j++) {
            int e = need[idx[j]], r0 = sc->eoff[e], n = sc->ecount[e];
            xc_weights(xc, idx[j], w3);
            swiglu_q(f, sc->g + (size_t)r0 * F, sc->u + (size_t)r0 * F, n, F, lw->swiglu_clamp, wrow + r0,
                     kdn, amid + (size_t)r0 * rb_dn, rb_dn);
            mm_group gd = { .W = mat_expert(&lw->ffn_down_exps, 0), .kind = kdn,
                            .act = amid + (size_t)r0 * rb_dn, .act_stride = rb_dn,
                            .rows = NULL, .n_rows = n, .out = sc->dn + (size_t)r0 * D, .out_stride = D };
            gd.W.w = w3[2];
            grp[ng++] = gd;
        }
        run_mm(f, PM_DOWN, grp, ng);
        xc_release(xc, idx, got);
    }
    xc_end(xc);
    return got < 0 ? got : DS4_OK;
}

/* Adding the routed outputs into their tokens' rows: pair i (sorted by
 * expert) goes to token erows[i].  Threads take column ranges and each
 * walks every pair in order, so every element still gets its experts in
 * ascending expert order (the same adds as one thread); ~200 MB of `down`
 * rows per layer at chunk 2048 no longer stream through one core while
 * the others wait. */
typedef struct { cpu_scratch *sc; int t0, npairs, D; } moe_scatter_job;

static void moe_scatter_task(void *ctx, int ith, int nth) {
    moe_scatter_job *j = ctx;
    cpu_scratch *sc = j->sc;
    long k0, k1;
    /* 16-float column blocks: threads share at most the lines at a range edge */
    ds4_split((j->D + 15) / 16, ith, nth, &k0, &k1);
    k0 *= 16;
    k1 = k1 * 16 < j->D ? k1 * 16 : j->D;
    for (int i = 0; i < j->npairs; i++) {
        float *o = sc->moe + (size_t)(j->t0 + sc->erows[i]) * j->D;
        const float *dv = sc->dn + (size_t)i * j->D;
        for (long k = k0; k < k1; k++) o[k] += dv[k];
    }
}

/* y = routed + shared */
static void moe_out_rows(fwd *f, int t0, int nt, void *ud) {
    (void)ud;
    cpu_scratch *sc = f->sc;
    const size_t D = (size_t)f->c->n_embd;
    for (size_t i = (size_t)t0 * D; i < (size_t)(t0 + nt) * D; i++) sc->y[i] = sc->moe[i] + sc->shared[i];
}

static int moe(fwd *f, int il, const int32_t *toks) {
    const ds4_config *c = f->c;
    const ds4_layer_weights *lw = layer_w(f, il);
    cpu_scratch *sc = f->sc;
    const int T = f->T, D = c->n_embd, E = c->n_expert, K = c->n_expert_used, F = c->n_ff_exp;

    hc_w h = { &lw->hc_ffn_fn, &lw->hc_ffn_scale, &lw->hc_ffn_base };
    hc_pre(f, &h);
    PROF(PS_NORM, for_rows(f, norm_rows, (void *)&lw->ffn_norm));

    /* router and the shared expert's gate/up read the same input */
    int FS = (int)lw->ffn_gate_shexp.ne[1];
    mm_spec sp[3] = { spec(&lw->ffn_gate_inp, sc->rlog, E),
                      spec(&lw->ffn_gate_shexp, sc->shared_g, FS),
                      spec(&lw->ffn_up_shexp, sc->shared_u, FS) };
    mm_multi(f, sc->a, D, D, sp, 3);
    route_ud r = { il, toks };
    PROF(PS_ROUTE, for_tokens(f, route_task, &r));

    /* routed experts in sub-batches of MOE_T tokens, grouped by expert */
    PROF(PS_MOEGS, memset(sc->moe, 0, (size_t)T * D * sizeof(float)));
    act_kind kin = act_kind_for(lw->ffn_gate_exps.type, f->no_qat);
    act_kind kdn = act_kind_for(lw->ffn_down_exps.type, f->no_qat);
    size_t rb_in = act_row_bytes(kin, D), rb_dn = act_row_bytes(kdn, F);
    mm_group *grp = (mm_group *)sc->qscratch2;   /* 2*E groups fit (sized at init) */
    /* --dist experts (src/mpi/): this rank computes experts [e_lo, e_hi) */
    int e_lo = 0, e_hi = E;
    if (dist_on()) dist_expert_range(E, &e_lo, &e_hi);
    for (int t0 = 0; t0 < T; t0 += MOE_T) {
        int nt = T - t0 < MOE_T ? T - t0 : MOE_T;
        /* quantize this sub-batch's inputs once for gate and up */
        uint8_t *ain = sc->qscratch;
        quantize_rows(f, kin, sc->a + (size_t)t0 * D, D, D, ain, rb_in, nt);
        /* bucket (token, slot) pairs by expert, tokens ascending */
        prof_t tb = prof_now();
        memset(sc->ecount, 0, (size_t)E * sizeof(int));
        for (int t = 0; t < nt; t++)
            for (int k = 0; k < K; k++) sc->ecount[sc->sel[(size_t)(t0 + t) * K + k]]++;
        int acc = 0;
        for (int e = 0; e < E; e++) { sc->eoff[e] = acc; acc += sc->ecount[e]; sc->ecount[e] = 0; }
        float *wrow = sc->wts + (size_t)T * K;   /* spare space after wts: [MOE_T*K] */
        for (int t = 0; t < nt; t++)
            for (int k = 0; k < K; k++) {
                int e = sc->sel[(size_t)(t0 + t) * K + k];
                int i = sc->eoff[e] + sc->ecount[e]++;
                sc->erows[i] = t;
                wrow[i] = sc->wts[(size_t)(t0 + t) * K + k];
            }
        int npairs = nt * K;
        prof_add(PS_MOEGS, tb);
        /* this rank's (token, slot) rows: experts are contiguous in them */
        int r_lo = e_lo < E ? sc->eoff[e_lo] : npairs, r_hi = e_hi < E ? sc->eoff[e_hi] : npairs;
        if (f->s->m->xc && il < c->n_layer) {
            /* --ssd-streaming: the same products on the cache's copies (the
             * MTP layer's experts are not streamed: they stay resident) */
            int rc = moe_streamed(f, il, nt, kin, kdn, ain, rb_in, rb_dn, wrow, e_lo, e_hi);
            if (rc) return rc;
            if (f->s->imatrix && il < c->n_layer)
                ds4_imatrix_add_moe(f->s->imatrix, il, sc->a + (size_t)t0 * D, sc->g, sc->erows, sc->eoff,
                                    sc->ecount);
        } else {
            int ng = 0;
            for (int e = e_lo; e < e_hi; e++) {
                if (!sc->ecount[e]) continue;
                mm_group gg = { .W = mat_expert(&lw->ffn_gate_exps, e), .kind = kin, .act = ain,
                                .act_stride = rb_in, .rows = sc->erows + sc->eoff[e],
                                .n_rows = sc->ecount[e], .out = sc->g + (size_t)sc->eoff[e] * F,
                                .out_stride = F };
                grp[ng++] = gg;
                gg.W = mat_expert(&lw->ffn_up_exps, e);
                gg.out = sc->u + (size_t)sc->eoff[e] * F;
                grp[ng++] = gg;
            }
            run_mm(f, PM_GATEUP, grp, ng);
            /* the routed weight multiplies the hidden vector before `down`;
             * each row is quantized for `down` as soon as it is done */
            uint8_t *amid = sc->qscratch;
            swiglu_q(f, sc->g + (size_t)r_lo * F, sc->u + (size_t)r_lo * F, r_hi - r_lo, F,
                     lw->swiglu_clamp, wrow + r_lo, kdn, amid + (size_t)r_lo * rb_dn, rb_dn);
            /* importance collection: reads the inputs of gate/up and down
             * (single process: --imatrix-out is not offered under --dist) */
            if (f->s->imatrix && il < c->n_layer)
                ds4_imatrix_add_moe(f->s->imatrix, il, sc->a + (size_t)t0 * D, sc->g, sc->erows, sc->eoff,
                                    sc->ecount);
            ng = 0;
            for (int e = e_lo; e < e_hi; e++) {
                if (!sc->ecount[e]) continue;
                mm_group gd = { .W = mat_expert(&lw->ffn_down_exps, e), .kind = kdn,
                                .act = amid + (size_t)sc->eoff[e] * rb_dn, .act_stride = rb_dn,
                                .rows = NULL, .n_rows = sc->ecount[e],
                                .out = sc->dn + (size_t)sc->eoff[e] * D, .out_stride = D };
                grp[ng++] = gd;
            }
            run_mm(f, PM_DOWN, grp, ng);
        }
        /* every rank gets every rank's rows, then sums them exactly as one
         * process does (not MPI_SUM): the results stay bit-identical */
        if (dist_on() && e_hi - e_lo < E) {
            int rc = dist_gather_rows(sc->dn, D, sc->eoff, E, npairs);
            if (rc) return rc;
        }
        /* per token, experts are added in ascending expert order whatever
         * the batch, so decode and prefill sum identically */
        moe_scatter_job sj = { sc, t0, npairs, D };
        tb = prof_now();
        if (npairs < 64) moe_scatter_task(&sj, 0, 1);
        else ds4_pool_run(f->cc.pool, moe_scatter_task, &sj);
        prof_add(PS_MOEGS, tb);
    }

    /* shared expert: same SwiGLU and clamp, no routing weight */
    swiglu(f, sc->shared_g, sc->shared_u, T, FS, lw->swiglu_clamp, NULL);
    mm(f, &lw->ffn_down_shexp, sc->shared_g, FS, sc->shared, D);
    PROF(PS_MOEGS, for_rows(f, moe_out_rows, NULL));
    hc_post(f, il, 1);
    return DS4_OK;
}

/* ---------------------------------------------------------------------- */
/* Embedding and head (docs/MODEL.md §2, §6)                               */
/* ---------------------------------------------------------------------- */

/* rows [t0, t0 + nt): a chunk's HC state is 128 MB at 2048 tokens, too
 * much to write from the calling thread alone */
static void embed_rows(fwd *f, int t0, int nt, void *ud) {
    const int32_t *toks = ud;
    const ds4_config *c = f->c;
    cpu_scratch *sc = f->sc;
    const ds4_tensor *E = &f->w->token_embd;
    const int D = c->n_embd, N = c->n_hc;
    for (int t = t0; t < t0 + nt; t++) {
        float *X = sc->X + (size_t)t * N * D;
        ds4_dequantize_row(E->type, E->data + (size_t)toks[t] * E->row_bytes, X, D);
        for (int s = 1; s < N; s++) memcpy(X + (size_t)s * D, X, (size_t)D * sizeof(float));
    }
}

static void embed(fwd *f, const int32_t *toks) {
    for_rows(f, embed_rows, (void *)toks);
}

/* An HC output head: the main model's output_hc_* / output_norm, or the
 * MTP block's hc_head_* / norm (docs/MTP.md step 5); both end in the main
 * output matrix.  The head evaluates the rows listed in sc->hrow; output
 * row t of it (mix, cur, ylast, logits) belongs to source row hrow[t]. */
typedef struct { const ds4_tensor *fn, *scale, *base, *norm; } head_w;

static void head_mix_task(fwd *f, int t, void *ud) {
    const head_w *hw = ud;
    const ds4_config *c = f->c;
    cpu_scratch *sc = f->sc;
    const int N = c->n_hc, D = c->n_embd;
    int tt = sc->hrow[t];
    const float *m = sc->mix + (size_t)t * N;
    const float *X = sc->X + (size_t)tt * N * D;
    float wgt[DS4_MAX_HC];
    float s0 = tval(hw->scale, 0);
    for (int s = 0; s < N; s++)
        wgt[s] = sigmoidf(m[s] * s0 + tval(hw->base, s)) + c->hc_eps;
    float *y = sc->cur + (size_t)t * D;
    for (int k = 0; k < D; k++) {
        float acc = 0;
        for (int s = 0; s < N; s++) acc += wgt[s] * X[(size_t)s * D + k];
        y[k] = acc;
    }
    rms_norm(y, f32_of(hw->norm), D, c->rms_eps, sc->ylast + (size_t)t * D);
}

static void head_flat_task(fwd *f, int t, void *ud) {
    (void)ud;
    const ds4_config *c = f->c;
    cpu_scratch *sc = f->sc;
    int n = c->n_hc * c->n_embd;
    rms_norm(sc->X + (size_t)sc->hrow[t] * n, NULL, n, c->rms_eps, sc->flat + (size_t)t * n);
}

/* Logits of the nh rows in sc->hrow into sc->logits rows [0, nh). */
static void head(fwd *f, int nh, const head_w *hw) {
    const ds4_config *c = f->c;
    const ds4_weights *w = f->w;
    cpu_scratch *sc = f->sc;
    int T = f->T;
    f->T = nh;
    PROF(PS_HC, for_tokens(f, head_flat_task, NULL));
    mm(f, hw->fn, sc->flat, (size_t)c->n_hc * c->n_embd, sc->mix, c->n_hc);
    PROF(PS_HC, for_tokens(f, head_mix_task, (void *)hw));
    mm(f, &w->output, sc->ylast, c->n_embd, sc->logits, c->n_vocab);
    f->T = T;
}

/* ---------------------------------------------------------------------- */
/* The MTP block (docs/MTP.md)                                             */
/* ---------------------------------------------------------------------- */

/* A one-item pass of n rows of s at positions p0.. (the MTP layer's). */
static fwd fwd_one(ds4_session *s, ds4_cpu_item *it, const int32_t *toks, int n, int64_t p0) {
    *it = (ds4_cpu_item){ .s = s, .toks = toks, .n = n, .r0 = 0, .p0 = p0 };
    memset(s->sc.ritem, 0, (size_t)n * sizeof(*s->sc.ritem));
    fwd f = { .s = s, .m = s->m, .sc = &s->sc, .c = &s->m->w.cfg, .w = &s->m->w, .it = it, .n_it = 1,
              .ritem = s->sc.ritem, .toks = toks, .T = n, .qat = !s->no_qat, .no_qat = s->no_qat };
    f.cc.pool = s->m->pool;
    f.cc.k = s->m->kern;
    return f;
}

/* Steps 1-3: X[t][s] = e_proj(enorm(embed(tok_t))) + h_proj(hnorm(Hprev_t[s]))
 * (a missing Hprev row counts as zero: position 0, or a state the session
 * did not see being computed). */
static void mtp_input(fwd *f, const int32_t *toks, const float *const *Hprev) {
    const ds4_config *c = f->c;
    const ds4_mtp_weights *mw = &f->w->mtp;
    cpu_scratch *sc = f->sc;
    const int D = c->n_embd, N = c->n_hc, T = f->T;
    const ds4_tensor *E = &f->w->token_embd;
    prof_t t0 = prof_now();
    for (int t = 0; t < T; t++) {
        ds4_dequantize_row(E->type, E->data + (size_t)toks[t] * E->row_bytes, sc->cur + (size_t)t * D, D);
        rms_norm(sc->cur + (size_t)t * D, f32_of(&mw->enorm), D, c->rms_eps, sc->a + (size_t)t * D);
        for (int s = 0; s < N; s++) {
            float *o = sc->flat + ((size_t)t * N + s) * D;
            if (Hprev[t]) rms_norm(Hprev[t] + (size_t)s * D, f32_of(&mw->hnorm), D, c->rms_eps, o);
            else memset(o, 0, (size_t)D * sizeof(float));
        }
    }
    prof_add(PS_EMBED, t0);
    mm(f, &mw->e_proj, sc->a, D, sc->y, D);
    /* h_proj applies to every stream: T*N rows of width D (the flat and X2
     * blocks hold T rows of N*D) */
    f->T = T * N;
    mm(f, &mw->h_proj, sc->flat, D, sc->X2, D);
    f->T = T;
    t0 = prof_now();
    for (int t = 0; t < T; t++)
        for (int s = 0; s < N; s++) {
            float *x = sc->X + ((size_t)t * N + s) * D;
            const float *e = sc->y + (size_t)t * D, *h = sc->X2 + ((size_t)t * N + s) * D;
            for (int k = 0; k < D; k++) x[k] = e[k] + h[k];
        }
    prof_add(PS_EMBED, t0);
}

static int mtp_rows(ds4_session *s, const int32_t *toks, const float *const *Hprev, int n, int64_t p0) {
    ds4_cpu_item it;
    fwd f = fwd_one(s, &it, toks, n, p0);
    const ds4_config *c = f.c;
    cpu_scratch *sc = f.sc;
    const int il = c->n_layer, d = c->head_dim, D = c->n_embd;
    const ds4_layer_weights *lw = layer_w(&f, il);
    layer_state *st = layer_st(s, il);
    mtp_input(&f, toks, Hprev);
    /* the attention sublayer's input up to the KV head, as attention() */
    hc_w h = { &lw->hc_attn_fn, &lw->hc_attn_scale, &lw->hc_attn_base };
    hc_pre(&f, &h);
    PROF(PS_NORM, for_rows(&f, norm_rows, (void *)&lw->attn_norm));
    layer_ud L = { il, &s->m->rope_dense };
    PROF(PS_NORM, for_tokens(&f, rope_tables_task, &L));
    mm(&f, &lw->attn_kv, sc->a, D, sc->kv, d);
    PROF(PS_NORM, for_tokens(&f, kv_post_task, &L));
    prof_t t0 = prof_now();
    raw_reserve(s, st, d, c->n_swa, n);
    kv_put(s, sc->kv, kv_row(s, st->raw, (size_t)(st->raw_start + st->raw_len), d), (size_t)n, d);
    prof_add(PS_ATTN, t0);
    st->raw_len += n;
    return DS4_OK;
}

static int mtp_step(ds4_session *s, int32_t tok, const float *hprev, int64_t p0) {
    ds4_cpu_item it;
    fwd f = fwd_one(s, &it, &tok, 1, p0);
    const ds4_config *c = f.c;
    const ds4_mtp_weights *mw = &f.w->mtp;
    const float *hp[1] = { hprev };
    mtp_input(&f, &tok, hp);
    attention(&f, c->n_layer);
    int rc = moe(&f, c->n_layer, &tok);
    if (rc) return rc;
    memcpy(s->mtp->hc, s->sc.X, (size_t)c->n_hc * c->n_embd * sizeof(float));
    head_w hw = { &mw->hc_head_fn, &mw->hc_head_scale, &mw->hc_head_base, &mw->norm };
    s->sc.hrow[0] = 0;
    head(&f, 1, &hw);
    memcpy(s->mtp->logits, s->sc.logits, (size_t)c->n_vocab * sizeof(float));
    s->mtp->steps++;
    return DS4_OK;
}

/* Every pass checks the weights' mapping before (a broken model fails at
 * once) and after (pages lost during the pass read as zeros: its result
 * is garbage and must not be used), engine.c ds4_model_check. */
int ds4_cpu_mtp_rows(ds4_session *s, const int32_t *toks, const float *const *Hprev, int n, int64_t p0) {
    int rc = ds4_model_check(s->m);
    if (rc) return rc;
    prof_t t0 = prof_pass_begin();
    rc = mtp_rows(s, toks, Hprev, n, p0);
    prof_pass_end(t0, n);
    int frc = ds4_model_check(s->m);
    return frc ? frc : rc;
}

int ds4_cpu_mtp_step(ds4_session *s, int32_t tok, const float *hprev, int64_t p0) {
    int rc = ds4_model_check(s->m);
    if (rc) return rc;
    prof_t t0 = prof_pass_begin();
    rc = mtp_step(s, tok, hprev, p0);
    prof_pass_end(t0, 1);
    int frc = ds4_model_check(s->m);
    return frc ? frc : rc;
}

/* The layers of one pass.  `single` passes (one item) also serve the
 * session-only features: --dist, logits/hidden capture, staged passes. */
static int eval_pass(fwd *f) {
    ds4_session *s = f->s;
    cpu_scratch *sc = f->sc;
    const ds4_config *c = f->c;
    const int n = f->T, single = f->n_it == 1;

    if (!single && (s->cap_hidden || s->cap_logits || s->cap_indexer || s->stg_on || s->imatrix ||
                    dist_on()))
        return DS4_EINVAL;   /* the caller keeps those sessions out of a batch */
    if (s->cap_hidden) {
        /* hc_post writes this chunk's rows past the end of the buffer */
        size_t per_tok = (size_t)c->n_layer * 2 * c->n_hc * c->n_embd * sizeof(float);
        if (ds4_buf_reserve(s->cap_hidden, per_tok * (size_t)n)) return DS4_ENOMEM;
    }
    if (s->cap_indexer) {
        /* idx_capture fills the selecting layers; the rest stay NaN */
        size_t nf = (size_t)c->n_layer * 2 * (size_t)n;
        if (ds4_buf_reserve(s->cap_indexer, nf * sizeof(float))) return DS4_ENOMEM;
        float *r = (float *)(s->cap_indexer->p + s->cap_indexer->n);
        for (size_t i = 0; i < nf; i++) r[i] = NAN;
    }

    int want_all = s->cap_logits != NULL || s->stg_on;
    int lo = 0, hi = c->n_layer;
    /* --dist pipeline (src/mpi/): this rank's layers only; the HC state
     * comes from the previous rank and goes to the next */
    if (dist_on()) {
        int rc = dist_chunk_begin(s, f->toks, n, &want_all, &lo, &hi);
        if (rc) return rc;
        if (want_all && !dist_is_root() && dist_runs_head() && !s->cap_logits &&
            s->logits_rows < s->chunk) {
            /* a worker running the head computes every row's logits for
             * rank 0 (rank 0's own session holds the rows it asked for) */
            float *l = realloc(sc->logits, (size_t)s->chunk * c->n_vocab * sizeof(float));
            if (!l) return DS4_ENOMEM;
            sc->logits = l;
            s->logits_rows = s->chunk;
        }
    }
    if (lo == 0) PROF(PS_EMBED, embed(f, f->toks));
    if (s->imatrix) s->imatrix->n_tokens += (uint64_t)n;
    /* --dist pipeline: the chunk goes through this rank's layers in
     * micro-batches (dist_microbatch), so rank r+1 works on micro-batch
     * m-1 while rank r works on m.  A micro-batch is evaluated exactly as
     * a chunk of its tokens would be (the per-token math does not depend on
     * the chunk size); the KV rows of m-1 are already in this rank's
     * layers.  Single process, a batch of sessions (never under --dist), a
     * draft pass (its staged rows are one pass's) or a capture: one
     * micro-batch, the whole pass. */
    int mb = single && dist_on() && !s->stg_on && !s->cap_hidden ? dist_microbatch(s, n) : n;
    float *X0 = sc->X, *X20 = sc->X2;
    size_t nd = (size_t)c->n_hc * c->n_embd;
    for (int t0 = 0; t0 < n; t0 += mb) {
        int nt = n - t0 < mb ? n - t0 : mb;
        fwd fm = *f;
        ds4_cpu_item mi;
        if (nt < n) {
            /* the micro-batch as a pass of its own: rows [t0, t0+nt) of
             * the one item, their HC state, tokens and positions */
            mi = f->it[0];
            mi.r0 = 0;
            mi.n = nt;
            mi.p0 = f->it[0].p0 + t0;
            if (mi.toks) mi.toks += t0;
            fm.it = &mi;
            fm.T = nt;
            fm.toks = f->toks + t0;
            /* each layer swaps X and X2 twice (hc_post): X ends where it
             * started */
            sc->X = X0 + (size_t)t0 * nd;
            sc->X2 = X20 + (size_t)t0 * nd;
        }
        if (lo > 0) dist_recv_x(s, sc->X, nt);
        for (int il = lo; il < hi; il++) {
            attention(&fm, il);
            int rc = moe(&fm, il, fm.toks);
            if (rc) { sc->X = X0; sc->X2 = X20; return rc; }
            if (dist_on()) dist_progress();   /* sends of earlier micro-batches */
        }
        if (hi < c->n_layer) dist_send_x(s, sc->X, nt);
    }
    sc->X = X0;
    sc->X2 = X20;
    if (hi < c->n_layer) dist_send_done(s);
    /* head rows: every row (capture, staging), else each item's last */
    int nl = 0;
    if (want_all) for (int t = 0; t < n; t++) sc->hrow[nl++] = t;
    else for (int i = 0; i < f->n_it; i++) sc->hrow[nl++] = f->it[i].r0 + f->it[i].n - 1;
    if (hi == c->n_layer && (!dist_on() || dist_runs_head())) {
        /* the MTP drafts start from the final HC state (mtp.c) */
        for (int i = 0; i < f->n_it; i++)
            if (f->it[i].s->mtp)
                ds4_mtp_note_hidden(f->it[i].s, sc->X + (size_t)f->it[i].r0 * nd, f->it[i].p0, f->it[i].n);
        const ds4_weights *w = f->w;
        head_w hw = { &w->output_hc_fn, &w->output_hc_scale, &w->output_hc_base, &w->output_norm };
        head(f, nl, &hw);
    }
    if (dist_on()) {
        dist_logits(s, sc->logits, nl);
        if (!dist_is_root()) return DS4_OK;   /* rank 0 keeps the logits */
    }
    if (single) {
        memcpy(s->logits, sc->logits + (size_t)(nl - 1) * c->n_vocab, (size_t)c->n_vocab * sizeof(float));
        s->has_logits = 1;
    } else {
        for (int i = 0; i < f->n_it; i++) {
            ds4_session *si = f->it[i].s;
            memcpy(si->logits, sc->logits + (size_t)i * c->n_vocab, (size_t)c->n_vocab * sizeof(float));
            si->has_logits = 1;
        }
    }
    if (s->cap_logits) {
        int rc = ds4_buf_append(s->cap_logits, sc->logits, (size_t)n * c->n_vocab * sizeof(float));
        if (rc) return rc;
    }
    if (s->cap_hidden)
        s->cap_hidden->n += (size_t)c->n_layer * 2 * c->n_hc * c->n_embd * sizeof(float) * n;
    if (s->cap_indexer) s->cap_indexer->n += (size_t)c->n_layer * 2 * sizeof(float) * n;
    return DS4_OK;
}

int ds4_cpu_eval_batch(ds4_session *owner, ds4_cpu_item *items, int n_items) {
    ds4_model *m = owner->m;
    cpu_scratch *sc = &owner->sc;
    fwd f = { .s = owner, .m = m, .sc = sc, .c = &m->w.cfg, .w = &m->w, .it = items,
              .n_it = n_items, .ritem = sc->ritem, .toks = sc->rtok,
              .qat = !owner->no_qat, .no_qat = owner->no_qat };
    f.cc.pool = m->pool;
    f.cc.k = m->kern;
    int T = 0;
    for (int i = 0; i < n_items; i++) {
        ds4_cpu_item *it = &items[i];
        /* a bug in the caller, not bad input: ds4_session_eval_batch checks */
        if (it->n < 1 || it->n > it->s->chunk || T + it->n > owner->chunk ||
            it->s->no_qat != owner->no_qat || it->s->ctx > owner->ctx)
            return DS4_EINVAL;
        it->r0 = T;
        it->p0 = (int64_t)it->s->toks.n;
        for (int t = 0; t < it->n; t++) {
            sc->ritem[T + t] = i;
            sc->rtok[T + t] = it->toks[t];
        }
        T += it->n;
    }
    if (n_items > owner->logits_rows) return DS4_EINVAL;
    int rc = ds4_model_check(m);   /* before and after: see ds4_cpu_mtp_rows */
    if (rc) return rc;
    f.T = T;
    prof_t p0 = prof_pass_begin();
    rc = eval_pass(&f);
    prof_pass_end(p0, T);
    int frc = ds4_model_check(m);
    return frc ? frc : rc;
}

int ds4_cpu_eval_chunk(ds4_session *s, const int32_t *toks, int n) {
    ds4_cpu_item it = { .s = s, .toks = toks, .n = n };
    return ds4_cpu_eval_batch(s, &it, 1);
}
