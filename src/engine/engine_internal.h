/*
 * engine_internal.h -- the structures behind the opaque ds4_model and
 * ds4_session handles, shared by engine.c, session.c and the backends.
 *
 * Owns: the layout of a loaded model and of a session's KV state
 * (docs/MODEL.md §8.1).  Front ends never include this file.
 */
#ifndef DS4_ENGINE_INTERNAL_H
#define DS4_ENGINE_INTERNAL_H

#include "ds4.h"
#include "gguf/gguf.h"
#include "gguf/model.h"
#include "kernels/quant.h"
#include "kernels/threadpool.h"
#include "engine/cpu_ops.h"
#include "kernels/vec_ops.h"

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
    ds4_weights w;
    ds4_tokenizer *tok;
    ds4_pool *pool;
    const ds4_kernels *kern;
    const vec_kernels *vk;
    rope_t rope_dense, rope_comp;
    uint8_t fingerprint[20];
    uint8_t family_fp[20];
};

/* Per-layer decode state (docs/MODEL.md §8.1).  Rows are float32: with
 * the roundings on they hold f16-exact values; in --no-qat they do not. */
typedef struct {
    /* raw window: rows [raw_start, raw_start + raw_len) of `raw` are the
     * last raw_len positions in order; the buffer has room for a whole
     * chunk beyond the window so appends rarely need to compact. */
    float *raw;
    int raw_start, raw_len, raw_cap;
    /* compressed rows (ratio != 0) */
    float *comp;
    int n_comp, comp_cap;
    /* compressor frontier: [coff*R][coff*d] kv and score (+APE) */
    float *st_kv, *st_sc;
    /* indexer (ratio-4 layers) */
    float *icomp;
    int n_icomp;
    float *ist_kv, *ist_sc;    /* [2R][2*ID] */
} layer_state;

/* Scratch sized for the largest chunk at session creation: nothing is
 * allocated per token. */
typedef struct {
    float *X;                 /* [T][N][D] HC state */
    float *X2;                /* [T][N][D] */
    float *cur;               /* [T][D] */
    float *a;                 /* [T][D] normed sublayer input */
    float *flat;              /* [T][N*D] */
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
    float *scores;            /* [comp_cap + 1] indexer scores of one token
                                 (tokens are scored one after another) */
    float *attn_w;            /* [nth][VEC_HB][n_swa + comp_cap] attention weights */
    const float **attn_kp;    /* [nth][n_swa + comp_cap] key row pointers */
    void *qscratch;           /* quantized activations */
    void *qscratch2;
    float *ylast;             /* [T][D] head input */
    float *logits;            /* [T][vocab] when capturing, else [1][vocab] */
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

struct ds4_session {
    ds4_model *m;
    int ctx, chunk, no_qat, decode_only;
    ds4_tokens toks;
    float *logits;            /* [vocab] after the last token */
    int has_logits;
    layer_state *ls;          /* [n_layer] */
    cpu_scratch sc;
    ds4_buf *cap_logits, *cap_hidden;
    session_ckpt ck[DS4_SESSION_CKPTS];
    int dist_id;              /* --dist: the workers' name for it (0 = none) */
};

/* forward_cpu.c: evaluate toks[0..n) at positions n_past.. (n <= chunk);
 * updates the layer states and s->logits.  Returns DS4_OK. */
int ds4_cpu_eval_chunk(ds4_session *s, const int32_t *toks, int n);
int ds4_cpu_scratch_init(ds4_session *s);
void ds4_cpu_scratch_free(ds4_session *s);

#endif
