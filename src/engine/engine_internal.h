/*
 * engine_internal.h -- the structures behind the opaque ds4_model and
 * ds4_session handles, shared by engine.c, session.c and the backends.
 *
 * Owns: the layout of a loaded model and of a session's KV state
 * (docs/MODEL.md §8.1).  Front ends never include this file.
 */
#ifndef DS4_ENGINE_INTERNAL_H
#define DS4_ENGINE_INTERNAL_H

#include <stdatomic.h>

#include "ds4.h"
#include "gguf/gguf.h"
#include "gguf/model.h"
#include "kernels/quant.h"
#include "kernels/threadpool.h"
#include "engine/cpu_ops.h"
#include "kernels/vec_ops.h"
#include "kernels/kv_rows.h"

/* Tokens per MoE sub-batch of a prefill: each routed expert sees about
 * MOE_T * n_expert_used / n_expert tokens per weight pass (48 for Flash),
 * over which the packing of its weights is amortised; the routed scratch
 * is ~400 MB at the Flash shape.  2048 against 1024: prefill +6 % on the
 * medium model (6 interleaved pairs, 2-core VM). */
#define MOE_T 2048

struct ds4_model {
    char *path;
    char *name;
    int random_weights;
    gguf_file *gf;
    gguf_file *mtp_gf;        /* --mtp sidecar (the MTP block's views point into it) */
    ds4_weights w;
    ds4_tokenizer *tok;
    ds4_pool *pool;
    const ds4_kernels *kern;
    const vec_kernels *vk;
    rope_t rope_dense, rope_comp;
    uint8_t fingerprint[20];
    uint8_t family_fp[20];
    /* --ssd-streaming (expert_cache.c): the routed-expert cache and the
     * anonymous copy of the other weights; NULL when resident */
    struct ds4_xcache *xc;
    void *resident;
    uint64_t resident_bytes;
    /* the weights' mapping lost pages under the run (ds4_model_check):
     * fault_msg is written once, before `broken` is set (release), and
     * never changes after */
    _Atomic int broken;
    char fault_msg[1024];
    /* the graph of cfg.arch (src/models/graph.h), chosen at load */
    const struct ds4_graph *graph;
};

/* engine.c: DS4_EIO once a page of the model's file mappings faulted
 * (mapguard.h: truncated or unreadable file; the page now reads as zeros,
 * so whatever used it is garbage), DS4_OK otherwise.  The first call that
 * sees the fault writes the message (file, tensor, routed expert, bytes)
 * and marks the model broken: every later evaluation fails at once with
 * it.  The forward calls it before and after each pass. */
int ds4_model_check(ds4_model *m);

/* Per-layer decode state (docs/MODEL.md §8.1).  The KV rows (raw window,
 * compressed, indexer) are stored as f16 when the session's storage
 * roundings are on (s->kv16): every row is then f16-exact by construction
 * (f16_round_row before it is stored), so f16 storage loses nothing and
 * halves the KV memory and the snapshot / disk KV size.  In --no-qat the
 * rows are not f16-exact and stay float32.  Readers go through
 * kv_rows_to_f32 (exact).  The compressor frontiers stay float32: they
 * hold unrounded partial sums. */
typedef struct {
    /* raw window: rows [raw_start, raw_start + raw_len) of `raw` are the
     * last raw_len positions in order; the buffer has room for a whole
     * chunk beyond the window so appends rarely need to compact. */
    void *raw;
    int raw_start, raw_len, raw_cap;
    /* compressed rows (ratio != 0) */
    void *comp;
    int n_comp, comp_cap;
    /* compressor frontier: [coff*R][coff*d] kv and score (+APE) */
    float *st_kv, *st_sc;
    /* indexer (ratio-4 layers) */
    void *icomp;
    int n_icomp;
    float *ist_kv, *ist_sc;    /* [2R][2*ID] */
} layer_state;

/* The indexer's coded path (deepseek4.c idx_code_row) takes head dims
 * that are multiples of 32 up to this (Flash and PRO: 128); larger ones go
 * through the float path (stack buffers are sized by it). */
#define DS4_IDX_CODE_MAX 512

/* Scratch sized for the largest chunk at session creation: nothing is
 * allocated per token. */
typedef struct {
    float *X;                 /* [T][N][D] HC state */
    float *X2;                /* [T][N][D] */
    float *cur;               /* [T][D] */
    float *a;                 /* [T][D] normed sublayer input */
    float *flat;              /* [T][N*D]; flat, q, heads, dn share one block
                                 (lifetimes disjoint, session.c scratch_plan) */
    float *mix;               /* [T][hc_mix] */
    float *post, *comb;       /* [T][N], [T][N][N] */
    float *qa, *qr;           /* [T][q_lora] */
    float *q;                 /* [T][H*d] */
    float *kv;                /* [T][d] */
    float *ckv, *csc;         /* [T][coff*d] */
    float *ikv, *isc;         /* [T][2*ID] */
    float *iq;                /* [T][IH*ID] */
    float *iw;                /* [T][IH] */
    float *heads;             /* [T][H*d] */
    float *low;               /* [T][G*o_lora] */
    float *y;                 /* [T][D] */
    float *cs, *sn;           /* [T][n_rot/2] per-token RoPE */
    float *rlog;              /* [T][E] router logits */
    int *sel;                 /* [T][K] */
    float *wts;               /* [T][K] */
    float *moe;               /* [T][D] routed sum */
    float *shared;            /* [T][D] */
    float *g, *u;             /* [T*K][F] (routed, by expert) */
    float *shared_g, *shared_u; /* [T][F_shared] */
    float *dn;                /* [T*K][D] */
    int *erows;               /* [T*K] token lists by expert */
    int *ecount, *eoff;       /* [E] */
    int *topk;                /* [T][topk] selected compressed rows */
    int *ntopk;               /* [T] (-1 = all visible) */
    float *scores;            /* [nth][scores_rows] indexer scores: a token's
                                 per thread (prefill: each thread scores its
                                 own tokens), or one token's split across
                                 the threads (decode: row 0) */
    size_t scores_rows;       /* most compressed rows of a layer + 1 */
    float *attn_w;            /* [nth][VEC_HB][kf_rows] attention weights */
    float *attn_kf;           /* kv16: [nth][kf_rows][d] one token's keys as f32 */
    size_t kf_rows;           /* most keys of one token (session.c keys_max):
                                 the per-thread row count of attn_w, attn_kp
                                 and attn_kf */
    float *idx_kf;            /* kv16: [nth][4][idx_dim] indexer rows as f32 */
    /* FP4-coded indexer queries and rows (deepseek4.c idx_code_row;
     * none unless idx_dim is a multiple of 32, at most DS4_IDX_CODE_MAX) */
    int8_t *iqc;              /* [T][IH][ID] query codes */
    float *iqp;               /* [T][IH][ID/32] their block scales */
    int32_t *iqs;             /* [T][IH][ID/32] 16 x each block's code sum */
    int *iqok;                /* [T] the token's heads are all coded */
    uint8_t *ikc;             /* [ik_rows/16][ID/4][16][4] one item's rows: codes + 16 */
    float *ikp;               /* [ik_rows/16][ID/32][16] their block scales */
    uint8_t *ikok;            /* [ik_rows] the row is coded */
    size_t ik_rows;           /* rows ikc holds (a multiple of 16) */
    const float **attn_kp;    /* [nth][kf_rows] key row pointers */
    void *qscratch;           /* quantized activations */
    void *qscratch2;
    float *ylast;             /* [T][D] head input */
    float *logits;            /* [logits_rows][vocab]: a captured chunk, or
                                 one row per item of a batched pass */
    int *ritem;               /* [T] row -> item of the pass */
    int32_t *rtok;            /* [T] the rows' tokens */
    int *hrow;                /* [T] rows the head evaluates */
} cpu_scratch;

/* A RAM checkpoint of the session's own history (session.c): only what a
 * later evaluation overwrites -- the live window rows, the compressor and
 * indexer frontiers, the row counts and the logits.  The compressed rows
 * are append-only, so the rows below the counts stay the live session's
 * own as long as no evaluation went below the checkpoint. */
typedef struct {
    int n;                    /* token count; -1 = empty or no longer valid */
    int has_logits;
    float *logits;            /* [vocab] */
    float *rows;              /* per layer: raw[raw_len][d], st_kv, st_sc, ist_kv, ist_sc */
    int *raw_len, *n_comp, *n_icomp;  /* [n_layer] */
} session_ckpt;
/* Staged (speculative) evaluation, session.c: what a verification pass
 * must be able to undo without evaluating anything again.  Window rows and
 * compressed rows need only their counts (rejected rows sit past the end
 * and are overwritten later; the raw buffer compacts only down to the last
 * n_swa rows of the state before the pass, which is all a shorter state
 * needs).  The compressor/indexer frontiers are overwritten in place, so
 * the pass keeps their bytes from before it plus the rows it pushed, and a
 * rollback restores the bytes and pushes the accepted rows again. */
typedef struct {
    void *st_kv, *st_sc, *ist_kv, *ist_sc;   /* frontier bytes before the pass */
    float *ckv, *csc, *ikv, *isc;            /* [cap][width] rows pushed by it */
} layer_stage;

/* The MTP block's state (mtp.c, docs/MTP.md): a window-only layer whose
 * rows follow the main session, the main model's final HC state of recent
 * positions (its input), and the draft chain's own HC state.  glm-dsa
 * (one stream: n_embd floats a state): ls is unused (the NextN block's
 * rows are glm_dsa.c's), H holds the main model's normed states. */
typedef struct {
    layer_state ls;           /* raw window: rows of positions [n - raw_len, n) */
    int n;
    float *H;                 /* [hcap][n_hc*n_embd], slot pos % hcap */
    int64_t *hpos;            /* [hcap] the position each slot holds, -1 none */
    int hcap;
    float *hc;                /* [n_hc*n_embd] H_out of the last draft step */
    float *logits;            /* [vocab] the last draft step's logits */
    int64_t steps;            /* draft steps computed (for tests and stats) */
    float *q;                 /* [DS4_DRAFT_PASS_MAX - 1][vocab] the distributions
                                 the last sampled drafts were drawn from
                                 (allocated on the first sampled draft) */
    int nq;                   /* rows of q the last draft call left (0: greedy) */
} mtp_state;

struct ds4_session {
    ds4_model *m;
    int ctx, chunk, no_qat, decode_only;
    int kv16;                 /* KV rows stored as f16 (= !no_qat) */
    ds4_tokens toks;
    float *logits;            /* [vocab] after the last token */
    int has_logits;
    layer_state *ls;          /* [n_layer] */
    cpu_scratch sc;
    ds4_buf *cap_logits, *cap_hidden, *cap_indexer;
    session_ckpt ck[DS4_SESSION_CKPTS];
    struct ds4_imatrix *imatrix;   /* importance collection (imatrix.c), or NULL */
    int logits_rows;          /* rows sc.logits holds */
    /* staged pass (ds4_session_eval_draft .. ds4_session_draft_commit) */
    layer_stage *stg;         /* [n_layer], allocated on first use */
    int stg_cap, stg_on, stg_n;
    int64_t stg_p0;
    /* steering (ds4_session_set_steering): scale * direction, added to every
     * HC copy after the FFN of layers [steer_l0, steer_l1]; NULL = off */
    float *steer;
    int steer_l0, steer_l1;
    int dist_id;              /* --dist: the workers' name for it (0 = none) */
    mtp_state *mtp;           /* MTP drafts (mtp.c), NULL when the model has none */
    struct ds4_glm_state *glm; /* glm-dsa's state (glm_dsa.c); NULL for other graphs */
    struct ds4_g5n_state *g5n; /* glm5-next's state (glm5_next.c); NULL for other graphs */
};

/* glm_dsa.c (models/): what the rest of the engine needs of the glm-dsa
 * graph beyond its table (ds4_graph_glm_dsa).  What one token adds to a
 * session's state: every layer's cached row (latent + RoPE key; the NextN
 * block's too when bound) and the full IndexShare layers' indexer keys,
 * all float32.  The one place these are sized (plan.c prints them). */
typedef struct {
    int layers, row, idx_layers, idx_row, elem;   /* elem: bytes a value */
    uint64_t bytes;
} ds4_glm_kv_token;
void ds4_glm_plan_token(const ds4_weights *w, ds4_glm_kv_token *k);
/* the state bytes of a session of ctx tokens */
uint64_t ds4_glm_plan_bytes(const ds4_weights *w, int ctx);
/* the k best of sc[0..n) (k <= n) into out[0..k), ascending by index:
 * higher score first, ties to the lower index (the indexer's and the
 * router's selection; tests/test_glm_topk.c against a full sort) */
void ds4_glm_top_k(const float *sc, int n, int k, int *out);
/* for mtp.c: one step of the NextN block (w.has_mtp): the token at
 * position p (>= toks.n) and the state before it (the main model's normed
 * state, or the previous step's; NULL = zero), over the block's rows of
 * the positions before p; leaves the normed state in s->mtp->hc (n_embd
 * floats) and the draft logits in s->mtp->logits.  The block's rows of
 * evaluated positions are made by eval_chunk itself (the main states go to
 * s->mtp's ring, ds4_mtp_note_hidden). */
int ds4_glm_mtp_step(ds4_session *s, int32_t tok, const float *hprev, int64_t p);
/* glm5-next's NextN block (glm5_next.c), the same contract */
int ds4_g5n_mtp_step(ds4_session *s, int32_t tok, const float *hprev, int64_t p);

/* mtp_state.c: session hooks.  new/free with the session; note_hidden is
 * called by the forward with the final HC state of a chunk's tokens (before
 * the head); reset when the session's history is replaced wholesale. */
int ds4_mtp_state_new(ds4_session *s);
void ds4_mtp_state_free(ds4_session *s);
void ds4_mtp_note_hidden(ds4_session *s, const float *X, int64_t p0, int n);
void ds4_mtp_state_reset(ds4_session *s);
/* mtp_state.c, for mtp.c: forget the window rows of positions >= p (a
 * rollback or a rewind); the main state after position p, or NULL when not
 * held. */
void ds4_mtp_drop_from(mtp_state *ms, int64_t p);
const float *ds4_mtp_main_state(const ds4_session *s, int64_t p);
/* sampler.c, for speculative sampling (spec.c, mtp.c; is_greedy is in
 * ds4.h).  dist: the normalized distribution ds4_sample would draw from
 * (temperature, min-p, top-k, top-p), n_vocab floats, zero outside the
 * kept candidates; a point mass on the argmax where ds4_sample takes it
 * without a draw.  target: the same into the sampler's own buffer (valid
 * until the next call).  draw: one uniform of the stream, a token from
 * such a distribution.  unit: one uniform in [0, 1) of the stream. */
void ds4_sampler_dist(ds4_sampler *s, const float *logits, float *dist);
int ds4_sampler_n_vocab(const ds4_sampler *s);
const float *ds4_sampler_target(ds4_sampler *s, const float *logits);
int32_t ds4_sampler_draw(ds4_sampler *s, const float *dist);
double ds4_sampler_unit(ds4_sampler *s);

/* deepseek4.c: the MTP block.  mtp_rows appends the window rows of
 * positions p0..p0+n-1 (inputs toks[i] and Hprev[i], the main state of the
 * previous position; NULL rows = zero) without the rest of the layer (a
 * row depends only on its own input); mtp_step runs the whole block for
 * one token at position p0 from `hprev`, leaving H_out in ms->hc and the
 * draft logits in ms->logits. */
int ds4_cpu_mtp_rows(ds4_session *s, const int32_t *toks, const float *const *Hprev, int n, int64_t p0);
int ds4_cpu_mtp_step(ds4_session *s, int32_t tok, const float *hprev, int64_t p0);

/* deepseek4.c: one token's hyper-connection coefficients from its mixer
 * row (pre, post, the Sinkhorn-balanced comb); shared with glm5_next.c */
void ds4_hc_weights(const float *m, const ds4_tensor *scale, const ds4_tensor *base, int N, int iters, float eps,
                    float *pre, float *post, float *C);
/* deepseek4.c: a compressor frontier's state after rows [p0, p0 + n)
 * (kv/score, stride coff w) are pushed in order -- the state the forward
 * leaves; the pooled rows of the windows closing there are not made. */
void ds4_cpu_frontier_advance(float *st_kv, float *st_sc, int R, int coff, int w,
                              const float *kv, const float *score, int64_t p0, int n);

/* deepseek4.c: evaluate toks[0..n) at positions n_past.. (n <= chunk);
 * updates the layer states and s->logits.  Returns DS4_OK. */
int ds4_cpu_eval_chunk(ds4_session *s, const int32_t *toks, int n);
/* One item of a batched pass: n tokens (n <= s->chunk) appended to s.
 * The fields after n are the forward's own bookkeeping. */
typedef struct {
    ds4_session *s;
    const int32_t *toks;
    int n;
    int r0;                /* its first row in the pass */
    int64_t p0;            /* position of its first token */
    layer_state *st;       /* the layer being evaluated */
    int64_t raw_base_pos;  /* absolute position of st->raw row raw_start */
} ds4_cpu_item;
/* deepseek4.c: one pass over the rows of every item (their sum <= the
 * scratch owner's chunk; distinct sessions sharing the owner's no_qat, ctx
 * at most the owner's; no capture, staging, imatrix or --dist: those are
 * single-session, see ds4_session_eval_batch).  Each item's state and
 * s->logits come out as ds4_cpu_eval_chunk of its tokens alone; the token
 * lists are the caller's.  The owner's sc.logits must hold n_items rows. */
int ds4_cpu_eval_batch(ds4_session *owner, ds4_cpu_item *items, int n_items);
int ds4_cpu_scratch_init(ds4_session *s);
/* KV row storage (f16 under the storage roundings, see layer_state).
 * Bytes per element, the address of row `r` of width w, and n rows of
 * width w from a session's storage into float rows / back (the
 * conversions are kernels/kv_rows.c's: exact both ways for the f16-exact
 * rows kv16 sessions store). */
static inline size_t kv_es(const ds4_session *s) { return s->kv16 ? 2 : 4; }
static inline void *kv_row(const ds4_session *s, void *base, size_t r, int w) {
    return (uint8_t *)base + r * (size_t)w * kv_es(s);
}
static inline void kv_get(const ds4_session *s, const void *src, float *dst, size_t n, int w) {
    kv_rows_get(s->kv16, src, dst, n, w);
}
static inline void kv_put(const ds4_session *s, const float *src, void *dst, size_t n, int w) {
    kv_rows_put(s->kv16, src, dst, n, w);
}
/* session.c: KV and scratch bytes of a default session for bound weights
 * (ds4_memory_plan) */
void ds4_session_plan_weights(const ds4_weights *w, int ctx_size, int nth,
                              uint64_t *kv, uint64_t *scratch);
void ds4_cpu_scratch_free(ds4_session *s);

#endif
