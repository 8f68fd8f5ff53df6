/*
 * model.h -- binding a GGUF to the DeepSeek V4 layout (and to glm-dsa's,
 * general.architecture "glm-dsa", or glm5-next's: cfg.arch says which).
 *
 * Owns: reading every shape parameter from `deepseek4.*` metadata, checking
 * them for internal consistency and sane bounds, and checking every tensor's
 * presence, dims and type against the layout (gguf/layout.h; docs/GGUF.md
 * §3, §4, §6).
 * All problems are collected and reported at once.
 * Must not: compute anything, allocate per-tensor copies, or hard-code the
 * Flash sizes (tiny test models use the same layout with small shapes).
 */
#ifndef DS4_MODEL_H
#define DS4_MODEL_H

#include <stdint.h>
#include <stdio.h>
#include "gguf/gguf.h"

/* ------------------------------------------------------------------------ */
/* Limits: the one table of the shape values the engine accepts             */
/* ------------------------------------------------------------------------ */

/* Maxima that size fixed (stack) buffers of the engine: a value above them
 * would overflow those arrays, so the binder refuses it.  The arrays are
 * declared with these names, so raising a limit resizes them. */
#define DS4_MAX_ROT_DIM    256   /* rope.dimension_count: cs/sn[DS4_MAX_ROT_DIM/2] */
#define DS4_MAX_HC         64    /* hyper_connection.count: per-stream weights */
#define DS4_MAX_OUT_GROUPS 64    /* attention.output_group_count: one matmul
                                    group per output group */
/* Sanity maxima: far above the real Flash and PRO shapes, low enough that
 * derived products (n_head*head_dim, n_hc*n_embd, o_groups*o_lora, ...)
 * fit in an int and a corrupt value cannot make anyone allocate terabytes. */
#define DS4_MAX_LAYER      1024
#define DS4_MAX_EMBD       65536
#define DS4_MAX_VOCAB      (1 << 24)
#define DS4_MAX_HEAD       4096
#define DS4_MAX_HEAD_DIM   4096
#define DS4_MAX_RANK       65536
#define DS4_MAX_EXPERT     4096
#define DS4_MAX_SHARED     64
#define DS4_MAX_FF         65536
#define DS4_MAX_WINDOW     (1 << 24)
#define DS4_MAX_TOPK       (1 << 24)
#define DS4_MAX_RATIO      4096  /* compress ratio: the compressor frontier
                                    holds coff*ratio rows per layer */
#define DS4_MAX_HC_ITERS   1000
#define DS4_MAX_CTX        (1 << 24)   /* context_length; a session's ctx_size */

/* deepseek4.expert_gating_func: the router's scoring function, numbered as
 * llama.cpp's enum (1 softmax, 2 sigmoid, 3 softmax-weight, 4 sqrt of
 * softplus).  DeepSeek V4 uses 4; the key is optional for ds4 (absent:
 * 4), written by every tool that makes a GGUF because other loaders
 * require it. */
#define DS4_EXPERT_GATING_SQRT_SOFTPLUS 4

/* One integer metadata value: `key` without the "deepseek4." prefix, its
 * accepted range, and what bounds it.  Cross-key rules (rope dims even and
 * <= key_length, head_count a multiple of output_group_count, ...) are
 * checked by the binder on top of these ranges. */
typedef struct {
    const char *key;
    int64_t min, max;
    const char *why;
} ds4_model_limit;

/* Every row, in metadata order; the binder, ds4-synth (--set and
 * --limits) and docs/models.md use this table. */
extern const ds4_model_limit ds4_model_limits[];
extern const int ds4_model_n_limits;
/* The row of `key` (with or without the "deepseek4." prefix); NULL if none. */
const ds4_model_limit *ds4_model_limit_find(const char *key);

/* A bound tensor: a view into the mapping.  For a 2-D weight, ne[0] is the
 * input width (elements per row) and ne[1] the number of output rows; a 3-D
 * expert tensor has ne[2] experts.  data == NULL means "absent" (optional
 * tensors only). */
typedef struct {
    const char *name;
    const uint8_t *data;
    uint32_t type;             /* GGML_* */
    uint64_t ne[4];
    uint64_t row_bytes;        /* bytes of one ne[0]-element row */
    uint64_t nbytes;
    int32_t e0;                /* expert tensor of an experts split part
                                * (ds4-gguf split --dist experts): the first
                                * expert it holds (ne[2] of them); else 0 */
    uint8_t q8_sym;            /* Q8_0 known to hold no -128 code (set at
                                * load, ds4_q8_0_sym): kernels may take
                                * q8_0_q8_0a_tile_sym; 0 = not known */
} ds4_tensor;

typedef struct {
    int ratio;                 /* compression ratio; 0 = sliding window only */
    int coff;                  /* 2 for overlapping compressors, else 1 */
    int has_indexer;           /* == (coff == 2): decided from the indexer
                                  tensors / a 2*head_dim compressor, not
                                  from the literal ratio 4 */
    float swiglu_clamp;

    ds4_tensor hc_attn_fn, hc_attn_scale, hc_attn_base;
    ds4_tensor attn_norm;
    ds4_tensor attn_q_a, attn_q_a_norm, attn_q_b;
    ds4_tensor attn_kv, attn_kv_a_norm;
    ds4_tensor attn_sinks;
    ds4_tensor attn_output_a, attn_output_b;
    /* ratio != 0 */
    ds4_tensor comp_ape, comp_kv, comp_gate, comp_norm;
    /* has_indexer */
    ds4_tensor idx_q_b, idx_proj;
    ds4_tensor idx_comp_ape, idx_comp_kv, idx_comp_gate, idx_comp_norm;

    ds4_tensor hc_ffn_fn, hc_ffn_scale, hc_ffn_base;
    ds4_tensor ffn_norm;
    ds4_tensor ffn_gate_inp;
    ds4_tensor exp_probs_b;    /* optional (learned-router layers) */
    ds4_tensor tid2eid;        /* hash layers only: I32 [K, vocab] */
    ds4_tensor ffn_gate_exps, ffn_up_exps, ffn_down_exps;
    ds4_tensor ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp;

    /* glm-dsa only (attn_kv holds its attn_kv_a_mqa, idx_q_b / idx_proj
     * its indexer's q and weights) */
    int own_indexer;           /* a "full" IndexShare layer */
    int dense;                 /* a leading dense FFN layer */
    ds4_tensor attn_k_b, attn_v_b, attn_output;
    ds4_tensor idx_k, idx_k_norm, idx_k_norm_b;
    ds4_tensor ffn_gate, ffn_up, ffn_down;

    /* glm5-next only (FAMILY.md §2): a KDA layer (else an MLA layer with
     * the k-pool indexer: idx_comp_gate / idx_comp_ape hold the k-pool's
     * gate and position bias), the shared expert's SwiGLU clamp */
    int kda;
    float swiglu_clamp_sh;
    ds4_tensor kda_q, kda_k, kda_v, conv_q, conv_k, conv_v;
    ds4_tensor ssm_f_a, ssm_f_b, ssm_beta, ssm_a, ssm_dt_b, ssm_g_a, ssm_g_b, ssm_norm;
} ds4_layer_weights;

/* The tensor fields of ds4_layer_weights (offsets), the routed experts'
 * excepted: for code that walks every dense tensor of a layer (the
 * --ssd-streaming copy, the Q8_0 scan at load). */
extern const size_t ds4_layer_tensor_fields[];
extern const size_t ds4_n_layer_tensor_fields;
/* The GLM graphs' fields (attention, indexer keys, dense FFN, KDA): the
 * --ssd-streaming copy walks both lists. */
extern const size_t ds4_glm_layer_tensor_fields[];
extern const size_t ds4_n_glm_layer_tensor_fields;

/* ds4_config.arch: the graph a file runs (general.architecture). */
enum { DS4_ARCH_DEEPSEEK4 = 0, DS4_ARCH_GLM_DSA = 1, DS4_ARCH_GLM5_NEXT = 2 };

typedef struct {
    int arch;                  /* DS4_ARCH_* */
    int n_layer, n_embd, n_vocab;
    int n_head, n_head_kv, head_dim, n_rot;
    int q_lora, o_lora, o_groups;
    int n_expert, n_expert_used, n_expert_shared, n_ff_exp;
    int n_hash;
    int n_swa;
    int idx_heads, idx_dim, idx_topk;
    int n_hc, hc_iters;
    float hc_eps, rms_eps;
    float rope_base, compress_rope_base;
    float rope_factor, beta_fast, beta_slow;
    uint64_t rope_orig_ctx;
    uint64_t ctx_train;        /* deepseek4.context_length (informational) */
    float expert_scale;
    int expert_norm;
    int *compress_ratios;      /* [n_layer] */
    float *swiglu_clamp;       /* [n_layer] */
    /* glm-dsa (FAMILY.md §3): head_dim above is the cached row's width
     * kv_lora + n_rot; kmla / vmla the per-head q.k and value widths of
     * the MLA; n_dense the leading dense layers (width n_ff) */
    int kv_lora, kmla, vmla, n_dense, n_ff;
    /* glm5-next (FAMILY.md §2; also the glm-dsa fields above, n_rot 0, and
     * n_hc / hc_iters / hc_eps): the KDA head dim (value dim the same),
     * the convolution kernel, the gate's lower bound, the indexer's pool
     * size, the indexer keys' LayerNorm eps; per-layer shared-expert
     * SwiGLU clamps [n_layer] */
    int kda_dim, conv, kpool;
    float kda_lb, ln_eps;
    float *swiglu_clamp_sh;
} ds4_config;

/* The optional MTP block (docs/MTP.md): `mtp.0.*` tensors, in the main
 * file or in a sidecar GGUF (`--mtp FILE`).  `block` is one full layer of
 * the main layout (compress ratio 0: sliding window only, score routing).
 * glm-dsa's NextN block (docs/family.md, "MTP"): blk.<n_layer>.nextn.*
 * (eh_proj, enorm, hnorm; norm = shared_head_norm, embd = embed_tokens,
 * head = shared_head_head, each optional: absent, the main model's
 * output_norm / token_embd / output) and a MoE decoder layer `block`. */
typedef struct {
    ds4_tensor e_proj, h_proj, enorm, hnorm, norm;
    ds4_tensor hc_head_fn, hc_head_scale, hc_head_base;
    ds4_tensor eh_proj, embd, head;   /* glm-dsa */
    ds4_layer_weights block;
} ds4_mtp_weights;

typedef struct {
    gguf_file *gf;
    ds4_config cfg;
    ds4_tensor token_embd;
    ds4_tensor output_hc_fn, output_hc_base, output_hc_scale;
    ds4_tensor output_norm, output;
    ds4_layer_weights *layers;  /* [n_layer] */
    int has_mtp;                /* mtp holds a bound MTP block */
    ds4_mtp_weights mtp;
    uint64_t n_bound;           /* tensors of the file bound by the layout
                                   (the rest are ignored, e.g. MTP tensors) */
} ds4_weights;

/* Bind and validate.  `gf` stays owned by the caller.  On failure returns a
 * negative DS4_E* code and a message listing every problem, one per line,
 * each prefixed with the file name, e.g.
 * "model.gguf: tensor blk.3.attn_q_b.weight has dims [128, 2048], expected [128, 2304]". */
int ds4_weights_bind(gguf_file *gf, ds4_weights *w, char **err);
/* (On failure *w is left zeroed; ds4_weights_free on it is harmless.  At
 * most 50 problems are listed, then "... and N more problems".  Tensors the
 * layout does not name are ignored: w->n_bound < gf->n_tensors.) */
void ds4_weights_free(ds4_weights *w);

/* Binds the MTP block (`mtp.0.*`; glm-dsa: `blk.<n_layer>.*` with its
 * nextn.* tensors) of `gf` against the shapes of the bound
 * main weights `w` (cfg from the main file) into w->mtp and sets
 * w->has_mtp.  `required` = 0: a file with no block tensor at all is
 * fine (returns DS4_OK, has_mtp stays 0); a partial or misshapen block is
 * an error listing every problem, like ds4_weights_bind.  `required` = 1
 * (a sidecar named by --mtp): the block must be there. */
int ds4_weights_bind_mtp(gguf_file *gf, ds4_weights *w, int required, char **err);

/* Bytes of weights read to decode one token (attention, shared expert,
 * n_expert_used routed experts per layer, router, HC, head; the embedding
 * row only). */
uint64_t ds4_weights_active_bytes(const ds4_weights *w);
/* multiply-adds of the layer matmuls per token (head and attention excluded) */
uint64_t ds4_weights_layer_macs(const ds4_weights *w);

/* The body of ds4_inspect() (inspect.c) on an already opened file, for
 * callers that hold one (the fuzzer, tests).  Same output and status. */
int ds4_inspect_gguf(gguf_file *gf, FILE *out, char **err);

#endif /* DS4_MODEL_H */
