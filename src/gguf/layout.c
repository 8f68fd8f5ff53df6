/*
 * layout.c -- the DeepSeek V4, glm-dsa and glm5-next tensor layout tables and their walk (implements
 * layout.h): names, dims, roles, layer kinds, checkpoint names and dtypes
 * of every tensor family, in the order of the files antirez/ds4 publishes
 * (docs/GGUF.md §4; the dims agree with `expect(...)` in the oracle's
 * ds4_ref.py Weights._validate, written fastest-first as GGUF stores
 * them), the recipes and the types the loader accepts per role.
 *
 * Owns: the table and the walk.  Must not: read files, or hold anything
 * per model (the walk fills the caller's arrays).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf/layout.h"

#define D1(a) {DS4_LD_##a, 0, 0}
#define D2(a, b) {DS4_LD_##a, DS4_LD_##b, 0}
#define D3(a, b, c) {DS4_LD_##a, DS4_LD_##b, DS4_LD_##c}
#define ROW(id, name, dims, role, when, opt, hf, hfx, hft) \
    {DS4_T_##id, name, dims, DS4_ROLE_##role, DS4_W_##when, opt, hf, hfx, DS4_HF_##hft}

static const ds4_layout_row HEAD[] = {
    ROW(TOKEN_EMBD, "token_embd.weight", D2(EMBD, VOCAB), EMBD, ALWAYS, 0, "embed.weight", NULL, BF16),
};

/* One transformer layer, in file order.  The MTP block's layer is the
 * same rows under "mtp.0." (window-only, learned router). */
static const ds4_layout_row LAYER[] = {
    ROW(HC_ATTN_FN, "hc_attn_fn.weight", D2(HC_DIM, HC_MIX), SMALL, ALWAYS, 0, "hc_attn_fn", NULL, F32),
    ROW(HC_ATTN_SCALE, "hc_attn_scale.weight", D1(THREE), VEC, ALWAYS, 0, "hc_attn_scale", NULL, F32),
    ROW(HC_ATTN_BASE, "hc_attn_base.weight", D1(HC_MIX), VEC, ALWAYS, 0, "hc_attn_base", NULL, F32),
    ROW(HC_FFN_FN, "hc_ffn_fn.weight", D2(HC_DIM, HC_MIX), SMALL, ALWAYS, 0, "hc_ffn_fn", NULL, F32),
    ROW(HC_FFN_SCALE, "hc_ffn_scale.weight", D1(THREE), VEC, ALWAYS, 0, "hc_ffn_scale", NULL, F32),
    ROW(HC_FFN_BASE, "hc_ffn_base.weight", D1(HC_MIX), VEC, ALWAYS, 0, "hc_ffn_base", NULL, F32),
    ROW(ATTN_NORM, "attn_norm.weight", D1(EMBD), VEC, ALWAYS, 0, "attn_norm.weight", NULL, BF16),
    ROW(ATTN_Q_A, "attn_q_a.weight", D2(EMBD, QLORA), PROJ, ALWAYS, 0, "attn.wq_a.weight", NULL, FP8),
    ROW(ATTN_Q_A_NORM, "attn_q_a_norm.weight", D1(QLORA), VEC, ALWAYS, 0, "attn.q_norm.weight", NULL, BF16),
    ROW(ATTN_Q_B, "attn_q_b.weight", D2(QLORA, Q_DIM), PROJ, ALWAYS, 0, "attn.wq_b.weight", NULL, FP8),
    ROW(ATTN_KV, "attn_kv.weight", D2(EMBD, HEAD_DIM), PROJ, ALWAYS, 0, "attn.wkv.weight", NULL, FP8),
    ROW(ATTN_KV_A_NORM, "attn_kv_a_norm.weight", D1(HEAD_DIM), VEC, ALWAYS, 0, "attn.kv_norm.weight", NULL, BF16),
    ROW(ATTN_SINKS, "attn_sinks.weight", D1(HEADS), VEC, ALWAYS, 0, "attn.attn_sink", NULL, F32),
    ROW(ATTN_OUTPUT_A, "attn_output_a.weight", D2(OUT_GROUP_DIM, OUT_LOW), PROJ, ALWAYS, 0, "attn.wo_a.weight",
        NULL, FP8),
    ROW(ATTN_OUTPUT_B, "attn_output_b.weight", D2(OUT_LOW, EMBD), PROJ, ALWAYS, 0, "attn.wo_b.weight", NULL, FP8),
    /* the compressor (ratio != 0): two lanes (COMP_DIM = 2*head_dim) on
     * indexer layers */
    ROW(COMP_APE, "attn_compressor_ape.weight", D2(COMP_DIM, RATIO), ELEM, COMP, 0, "attn.compressor.ape", NULL,
        F32),
    ROW(COMP_KV, "attn_compressor_kv.weight", D2(EMBD, COMP_DIM), SMALL, COMP, 0, "attn.compressor.wkv.weight",
        NULL, FP8),
    ROW(COMP_GATE, "attn_compressor_gate.weight", D2(EMBD, COMP_DIM), SMALL, COMP, 0,
        "attn.compressor.wgate.weight", NULL, FP8),
    ROW(COMP_NORM, "attn_compressor_norm.weight", D1(HEAD_DIM), VEC, COMP, 0, "attn.compressor.norm.weight", NULL,
        BF16),
    ROW(IDX_Q_B, "indexer.attn_q_b.weight", D2(QLORA, IDX_Q_DIM), SMALL, INDEXER, 0, "attn.indexer.wq_b.weight",
        NULL, FP8),
    ROW(IDX_PROJ, "indexer.proj.weight", D2(EMBD, IDX_HEADS), SMALL, INDEXER, 0,
        "attn.indexer.weights_proj.weight", NULL, BF16),
    ROW(IDX_COMP_APE, "indexer_compressor_ape.weight", D2(IDX_COMP_DIM, RATIO), ELEM, INDEXER, 0,
        "attn.indexer.compressor.ape", NULL, F32),
    ROW(IDX_COMP_KV, "indexer_compressor_kv.weight", D2(EMBD, IDX_COMP_DIM), SMALL, INDEXER, 0,
        "attn.indexer.compressor.wkv.weight", NULL, FP8),
    ROW(IDX_COMP_GATE, "indexer_compressor_gate.weight", D2(EMBD, IDX_COMP_DIM), SMALL, INDEXER, 0,
        "attn.indexer.compressor.wgate.weight", NULL, FP8),
    ROW(IDX_COMP_NORM, "indexer_compressor_norm.weight", D1(IDX_DIM), VEC, INDEXER, 0,
        "attn.indexer.compressor.norm.weight", NULL, BF16),
    ROW(FFN_NORM, "ffn_norm.weight", D1(EMBD), VEC, ALWAYS, 0, "ffn_norm.weight", NULL, BF16),
    ROW(FFN_GATE_INP, "ffn_gate_inp.weight", D2(EMBD, EXPERTS), SMALL, ALWAYS, 0, "ffn.gate.weight", NULL, BF16),
    /* the router bias of learned-router layers (docs/GGUF.md §4.2) */
    ROW(EXP_PROBS_B, "exp_probs_b.bias", D1(EXPERTS), VEC, LEARNED, 1, "ffn.gate.bias", NULL, F32),
    ROW(FFN_GATE_EXPS, "ffn_gate_exps.weight", D3(EMBD, FF, EXPERTS), EXP_GU, ALWAYS, 0, "ffn.experts", "w1", FP4),
    ROW(FFN_UP_EXPS, "ffn_up_exps.weight", D3(EMBD, FF, EXPERTS), EXP_GU, ALWAYS, 0, "ffn.experts", "w3", FP4),
    ROW(FFN_DOWN_EXPS, "ffn_down_exps.weight", D3(FF, EMBD, EXPERTS), EXP_DOWN, ALWAYS, 0, "ffn.experts", "w2",
        FP4),
    ROW(FFN_GATE_SHEXP, "ffn_gate_shexp.weight", D2(EMBD, SHARED_FF), SHEXP, ALWAYS, 0,
        "ffn.shared_experts.w1.weight", NULL, FP8),
    ROW(FFN_UP_SHEXP, "ffn_up_shexp.weight", D2(EMBD, SHARED_FF), SHEXP, ALWAYS, 0, "ffn.shared_experts.w3.weight",
        NULL, FP8),
    ROW(FFN_DOWN_SHEXP, "ffn_down_shexp.weight", D2(SHARED_FF, EMBD), SHEXP, ALWAYS, 0,
        "ffn.shared_experts.w2.weight", NULL, FP8),
    /* hash routing: the experts of each token id */
    ROW(TID2EID, "ffn_gate_tid2eid.weight", D2(USED, VOCAB), I32, HASH, 0, "ffn.gate.tid2eid", NULL, I64),
};

static const ds4_layout_row TAIL[] = {
    ROW(OUTPUT_HC_BASE, "output_hc_base.weight", D1(HC), VEC, ALWAYS, 0, "hc_head_base", NULL, F32),
    ROW(OUTPUT_HC_FN, "output_hc_fn.weight", D2(HC_DIM, HC), SMALL, ALWAYS, 0, "hc_head_fn", NULL, F32),
    ROW(OUTPUT_HC_SCALE, "output_hc_scale.weight", D1(ONE), VEC, ALWAYS, 0, "hc_head_scale", NULL, F32),
    ROW(OUTPUT_NORM, "output_norm.weight", D1(EMBD), VEC, ALWAYS, 0, "norm.weight", NULL, BF16),
    ROW(OUTPUT, "output.weight", D2(EMBD, VOCAB), OUT, ALWAYS, 0, "head.weight", NULL, BF16),
};

/* The MTP block's own tensors (docs/MTP.md); its layer follows them.  Not
 * part of the checkpoint conversion (hf NULL). */
static const ds4_layout_row MTP[] = {
    ROW(MTP_E_PROJ, "mtp.0.e_proj.weight", D2(EMBD, EMBD), PROJ, ALWAYS, 0, NULL, NULL, BF16),
    ROW(MTP_H_PROJ, "mtp.0.h_proj.weight", D2(EMBD, EMBD), PROJ, ALWAYS, 0, NULL, NULL, BF16),
    ROW(MTP_ENORM, "mtp.0.enorm.weight", D1(EMBD), VEC, ALWAYS, 0, NULL, NULL, BF16),
    ROW(MTP_HNORM, "mtp.0.hnorm.weight", D1(EMBD), VEC, ALWAYS, 0, NULL, NULL, BF16),
    ROW(MTP_NORM, "mtp.0.norm.weight", D1(EMBD), VEC, ALWAYS, 0, NULL, NULL, BF16),
    ROW(MTP_HC_HEAD_BASE, "mtp.0.hc_head_base.weight", D1(HC), VEC, ALWAYS, 0, NULL, NULL, F32),
    ROW(MTP_HC_HEAD_FN, "mtp.0.hc_head_fn.weight", D2(HC_DIM, HC), SMALL, ALWAYS, 0, NULL, NULL, F32),
    ROW(MTP_HC_HEAD_SCALE, "mtp.0.hc_head_scale.weight", D1(ONE), VEC, ALWAYS, 0, NULL, NULL, F32),
};

#define N_OF(a) ((int)(sizeof a / sizeof a[0]))
const ds4_layout_arch ds4_layout_deepseek4 = {
    .arch = "deepseek4",
    .sec = {HEAD, LAYER, TAIL, MTP},
    .n = {N_OF(HEAD), N_OF(LAYER), N_OF(TAIL), N_OF(MTP)},
};

/* ------------------------------------------------------------------------ */
/* glm-dsa (GLM 5.2 / 5.3): llama.cpp's names and dims (FAMILY.md §3, the   */
/* tiny files of tests/glm_gguf.py), and the names of Z.ai's checkpoint     */
/* (GlmMoeDsaForCausalLM, after "model.layers.N."; docs/CHECKPOINT.md), all */
/* BF16 (e_score_correction_bias F32).  attn_k_b and attn_v_b are both cut   */
/* from kv_b_proj (per head: the qk_nope rows, transposed, then the v rows;  */
/* ds4-quantize does the cut).  The NextN (MTP) block: GLM_NEXTN under      */
/* blk.<n_layer>. and a MoE layer there (docs/family.md, "MTP"); it has no  */
/* checkpoint names (ds4-quantize does not convert it).                     */
/* ------------------------------------------------------------------------ */

static const ds4_layout_row GLM_HEAD[] = {
    ROW(TOKEN_EMBD, "token_embd.weight", D2(EMBD, VOCAB), EMBD, ALWAYS, 0, "model.embed_tokens.weight", NULL, BF16),
};

#define KVB "self_attn.kv_b_proj.weight"
static const ds4_layout_row GLM_LAYER[] = {
    ROW(ATTN_NORM, "attn_norm.weight", D1(EMBD), VEC, ALWAYS, 0, "input_layernorm.weight", NULL, BF16),
    ROW(ATTN_Q_A, "attn_q_a.weight", D2(EMBD, QLORA), PROJ, ALWAYS, 0, "self_attn.q_a_proj.weight", NULL, BF16),
    ROW(ATTN_Q_A_NORM, "attn_q_a_norm.weight", D1(QLORA), VEC, ALWAYS, 0, "self_attn.q_a_layernorm.weight", NULL,
        BF16),
    ROW(ATTN_Q_B, "attn_q_b.weight", D2(QLORA, Q_MLA), PROJ, ALWAYS, 0, "self_attn.q_b_proj.weight", NULL, BF16),
    /* the latent and the shared RoPE key: one cached row */
    ROW(ATTN_KV, "attn_kv_a_mqa.weight", D2(EMBD, KV_A), PROJ, ALWAYS, 0, "self_attn.kv_a_proj_with_mqa.weight",
        NULL, BF16),
    ROW(ATTN_KV_A_NORM, "attn_kv_a_norm.weight", D1(KV_LORA), VEC, ALWAYS, 0, "self_attn.kv_a_layernorm.weight",
        NULL, BF16),
    /* per head: W_UK^T (latent x nope) and W_UV (value x latent) */
    ROW(ATTN_K_B, "attn_k_b.weight", D3(NOPE, KV_LORA, HEADS), PROJ, ALWAYS, 0, KVB, NULL, BF16),
    ROW(ATTN_V_B, "attn_v_b.weight", D3(KV_LORA, VMLA, HEADS), PROJ, ALWAYS, 0, KVB, NULL, BF16),
    ROW(ATTN_OUTPUT, "attn_output.weight", D2(ATT_OUT, EMBD), PROJ, ALWAYS, 0, "self_attn.o_proj.weight", NULL,
        BF16),
    ROW(IDX_Q_B, "indexer.attn_q_b.weight", D2(QLORA, IDX_Q_DIM), SMALL, OWN_IDX, 0,
        "self_attn.indexer.wq_b.weight", NULL, BF16),
    ROW(IDX_K, "indexer.attn_k.weight", D2(EMBD, IDX_DIM), SMALL, OWN_IDX, 0, "self_attn.indexer.wk.weight", NULL,
        BF16),
    ROW(IDX_K_NORM, "indexer.k_norm.weight", D1(IDX_DIM), VEC, OWN_IDX, 0, "self_attn.indexer.k_norm.weight", NULL,
        BF16),
    ROW(IDX_K_NORM_B, "indexer.k_norm.bias", D1(IDX_DIM), VEC, OWN_IDX, 0, "self_attn.indexer.k_norm.bias", NULL,
        BF16),
    ROW(IDX_PROJ, "indexer.proj.weight", D2(EMBD, IDX_HEADS), SMALL, OWN_IDX, 0,
        "self_attn.indexer.weights_proj.weight", NULL, BF16),
    ROW(FFN_NORM, "ffn_norm.weight", D1(EMBD), VEC, ALWAYS, 0, "post_attention_layernorm.weight", NULL, BF16),
    ROW(FFN_GATE, "ffn_gate.weight", D2(EMBD, FF_DENSE), PROJ, DENSE, 0, "mlp.gate_proj.weight", NULL, BF16),
    ROW(FFN_UP, "ffn_up.weight", D2(EMBD, FF_DENSE), PROJ, DENSE, 0, "mlp.up_proj.weight", NULL, BF16),
    ROW(FFN_DOWN, "ffn_down.weight", D2(FF_DENSE, EMBD), PROJ, DENSE, 0, "mlp.down_proj.weight", NULL, BF16),
    ROW(FFN_GATE_INP, "ffn_gate_inp.weight", D2(EMBD, EXPERTS), SMALL, MOE, 0, "mlp.gate.weight", NULL, BF16),
    ROW(EXP_PROBS_B, "exp_probs_b.bias", D1(EXPERTS), VEC, MOE, 0, "mlp.gate.e_score_correction_bias", NULL, F32),
    ROW(FFN_GATE_EXPS, "ffn_gate_exps.weight", D3(EMBD, FF, EXPERTS), EXP_GU, MOE, 0, "mlp.experts", "gate_proj",
        BF16),
    ROW(FFN_UP_EXPS, "ffn_up_exps.weight", D3(EMBD, FF, EXPERTS), EXP_GU, MOE, 0, "mlp.experts", "up_proj", BF16),
    ROW(FFN_DOWN_EXPS, "ffn_down_exps.weight", D3(FF, EMBD, EXPERTS), EXP_DOWN, MOE, 0, "mlp.experts", "down_proj",
        BF16),
    ROW(FFN_GATE_SHEXP, "ffn_gate_shexp.weight", D2(EMBD, SHARED_FF), SHEXP, MOE, 0,
        "mlp.shared_experts.gate_proj.weight", NULL, BF16),
    ROW(FFN_UP_SHEXP, "ffn_up_shexp.weight", D2(EMBD, SHARED_FF), SHEXP, MOE, 0,
        "mlp.shared_experts.up_proj.weight", NULL, BF16),
    ROW(FFN_DOWN_SHEXP, "ffn_down_shexp.weight", D2(SHARED_FF, EMBD), SHEXP, MOE, 0,
        "mlp.shared_experts.down_proj.weight", NULL, BF16),
};
#undef KVB

static const ds4_layout_row GLM_TAIL[] = {
    ROW(OUTPUT_NORM, "output_norm.weight", D1(EMBD), VEC, ALWAYS, 0, "model.norm.weight", NULL, BF16),
    /* absent: tied to the embedding (tie_word_embeddings) */
    ROW(OUTPUT, "output.weight", D2(EMBD, VOCAB), OUT, ALWAYS, 1, "lm_head.weight", NULL, BF16),
};

/* The NextN block's wiring (llama.cpp's load_arch_tensors): eh_proj
 * projects [enorm(embedding); hnorm(hidden)]; the optional embedding,
 * head norm and head fall back to token_embd, output_norm and output. */
static const ds4_layout_row GLM_NEXTN[] = {
    ROW(NEXTN_EH_PROJ, "nextn.eh_proj.weight", D2(EMBD2, EMBD), PROJ, ALWAYS, 0, NULL, NULL, BF16),
    ROW(MTP_ENORM, "nextn.enorm.weight", D1(EMBD), VEC, ALWAYS, 0, NULL, NULL, BF16),
    ROW(MTP_HNORM, "nextn.hnorm.weight", D1(EMBD), VEC, ALWAYS, 0, NULL, NULL, BF16),
    ROW(NEXTN_EMBED, "nextn.embed_tokens.weight", D2(EMBD, VOCAB), EMBD, ALWAYS, 1, NULL, NULL, BF16),
    ROW(MTP_NORM, "nextn.shared_head_norm.weight", D1(EMBD), VEC, ALWAYS, 1, NULL, NULL, BF16),
    ROW(NEXTN_HEAD, "nextn.shared_head_head.weight", D2(EMBD, VOCAB), OUT, ALWAYS, 1, NULL, NULL, BF16),
};

const ds4_layout_arch ds4_layout_glm_dsa = {
    .arch = "glm-dsa",
    .sec = {GLM_HEAD, GLM_LAYER, GLM_TAIL, GLM_NEXTN},
    .n = {N_OF(GLM_HEAD), N_OF(GLM_LAYER), N_OF(GLM_TAIL), N_OF(GLM_NEXTN)},
    .hf_layer = "model.layers.",
};

/* ------------------------------------------------------------------------ */
/* glm5-next (GLM 5.3 Flash, FAMILY.md §2): V4's hyper-connections around   */
/* every sublayer; KDA layers (head_count_kv 0) or NoPE MLA layers with the */
/* k-pool DSA indexer; glm-dsa's FFN.  Names and dims as tests/glm_gguf.py  */
/* writes them (llama.cpp's glm5next loader).  The NextN (MTP) block:      */
/* glm-dsa's GLM_NEXTN under blk.<n_layer>. and a DSA layer with its own    */
/* indexer and a MoE FFN there, without the HC rows (kind .nextn).          */
/* Checkpoint names: Z.ai's                                                 */
/* GLM-5.3-Flash release (Glm5NextForConditionalGeneration: the text tower  */
/* under "model.language_model.", lm_head at the top; docs/CHECKPOINT.md),  */
/* as llama.cpp's Glm5NextModel converter and transformers' glm5_next read  */
/* them: the KDA attention is Kimi-Linear's (q/k/v_conv1d [C, 1, kernel],   */
/* A_log -> ssm_a = -exp(A_log), dt_bias), the HC parameters and the k-pool */
/* compressor carry no ".weight".  The NextN layer is not converted.        */
/* ------------------------------------------------------------------------ */

static const ds4_layout_row G5N_HEAD[] = {
    ROW(TOKEN_EMBD, "token_embd.weight", D2(EMBD, VOCAB), EMBD, ALWAYS, 0, "model.language_model.embed_tokens.weight",
        NULL, BF16),
};

static const ds4_layout_row G5N_TAIL[] = {
    ROW(OUTPUT_NORM, "output_norm.weight", D1(EMBD), VEC, ALWAYS, 0, "model.language_model.norm.weight", NULL, BF16),
    ROW(OUTPUT, "output.weight", D2(EMBD, VOCAB), OUT, ALWAYS, 1, "lm_head.weight", NULL, BF16),
};

#define KVB "self_attn.kv_b_proj.weight"
static const ds4_layout_row G5N_LAYER[] = {
    ROW(HC_ATTN_FN, "hc_attn_fn.weight", D2(HC_DIM, HC_MIX), SMALL, TRUNK, 0, "hc_attn_fn", NULL, F32),
    ROW(HC_ATTN_BASE, "hc_attn_base.weight", D1(HC_MIX), VEC, TRUNK, 0, "hc_attn_base", NULL, F32),
    ROW(HC_ATTN_SCALE, "hc_attn_scale.weight", D1(THREE), VEC, TRUNK, 0, "hc_attn_scale", NULL, F32),
    ROW(HC_FFN_FN, "hc_ffn_fn.weight", D2(HC_DIM, HC_MIX), SMALL, TRUNK, 0, "hc_ffn_fn", NULL, F32),
    ROW(HC_FFN_BASE, "hc_ffn_base.weight", D1(HC_MIX), VEC, TRUNK, 0, "hc_ffn_base", NULL, F32),
    ROW(HC_FFN_SCALE, "hc_ffn_scale.weight", D1(THREE), VEC, TRUNK, 0, "hc_ffn_scale", NULL, F32),
    ROW(ATTN_NORM, "attn_norm.weight", D1(EMBD), VEC, ALWAYS, 0, "input_layernorm.weight", NULL, BF16),
    /* KDA: q/k/v projections, their causal depthwise convolutions
     * (ggml {kernel, 1, channels}), the gate's and beta's projections */
    ROW(KDA_Q, "attn_q.weight", D2(EMBD, KDA_DI), PROJ, KDA, 0, "self_attn.q_proj.weight", NULL, BF16),
    ROW(KDA_K, "attn_k.weight", D2(EMBD, KDA_DI), PROJ, KDA, 0, "self_attn.k_proj.weight", NULL, BF16),
    ROW(KDA_V, "attn_v.weight", D2(EMBD, KDA_DI), PROJ, KDA, 0, "self_attn.v_proj.weight", NULL, BF16),
    ROW(CONV_Q, "ssm_conv1d_q.weight", D3(CONV, ONE, KDA_DI), VEC, KDA, 0, "self_attn.q_conv1d.weight", NULL, BF16),
    ROW(CONV_K, "ssm_conv1d_k.weight", D3(CONV, ONE, KDA_DI), VEC, KDA, 0, "self_attn.k_conv1d.weight", NULL, BF16),
    ROW(CONV_V, "ssm_conv1d_v.weight", D3(CONV, ONE, KDA_DI), VEC, KDA, 0, "self_attn.v_conv1d.weight", NULL, BF16),
    ROW(SSM_F_A, "ssm_f_a.weight", D2(EMBD, KDA_K), SMALL, KDA, 0, "self_attn.f_a_proj.weight", NULL, BF16),
    ROW(SSM_F_B, "ssm_f_b.weight", D2(KDA_K, KDA_DI), SMALL, KDA, 0, "self_attn.f_b_proj.weight", NULL, BF16),
    ROW(SSM_BETA, "ssm_beta.weight", D2(EMBD, HEADS), SMALL, KDA, 0, "self_attn.b_proj.weight", NULL, BF16),
    ROW(SSM_A, "ssm_a", D1(HEADS), VEC, KDA, 0, "self_attn.A_log", NULL, F32),
    ROW(SSM_DT_B, "ssm_dt.bias", D1(KDA_DI), VEC, KDA, 0, "self_attn.dt_bias", NULL, F32),
    ROW(SSM_G_A, "ssm_g_a.weight", D2(EMBD, KDA_K), SMALL, KDA, 0, "self_attn.g_a_proj.weight", NULL, BF16),
    ROW(SSM_G_B, "ssm_g_b.weight", D2(KDA_K, KDA_DI), SMALL, KDA, 0, "self_attn.g_b_proj.weight", NULL, BF16),
    ROW(SSM_NORM, "ssm_norm.weight", D1(KDA_K), VEC, KDA, 0, "self_attn.o_norm.weight", NULL, BF16),
    ROW(ATTN_OUTPUT, "attn_output.weight", D2(KDA_DI, EMBD), PROJ, KDA, 0, "self_attn.o_proj.weight", NULL, BF16),
    /* DSA: glm-dsa's MLA without RoPE (n_rot 0) */
    ROW(ATTN_Q_A, "attn_q_a.weight", D2(EMBD, QLORA), PROJ, DSA, 0, "self_attn.q_a_proj.weight", NULL, BF16),
    ROW(ATTN_Q_A_NORM, "attn_q_a_norm.weight", D1(QLORA), VEC, DSA, 0, "self_attn.q_a_layernorm.weight", NULL, BF16),
    ROW(ATTN_Q_B, "attn_q_b.weight", D2(QLORA, Q_MLA), PROJ, DSA, 0, "self_attn.q_b_proj.weight", NULL, BF16),
    ROW(ATTN_KV, "attn_kv_a_mqa.weight", D2(EMBD, KV_LORA), PROJ, DSA, 0,
        "self_attn.kv_a_proj_with_mqa.weight", NULL, BF16),
    ROW(ATTN_KV_A_NORM, "attn_kv_a_norm.weight", D1(KV_LORA), VEC, DSA, 0,
        "self_attn.kv_a_layernorm.weight", NULL, BF16),
    ROW(ATTN_K_B, "attn_k_b.weight", D3(NOPE, KV_LORA, HEADS), PROJ, DSA, 0, KVB, NULL, BF16),
    ROW(ATTN_V_B, "attn_v_b.weight", D3(KV_LORA, VMLA, HEADS), PROJ, DSA, 0, KVB, NULL, BF16),
    ROW(ATTN_OUTPUT, "attn_output.weight", D2(ATT_OUT, EMBD), PROJ, DSA, 0, "self_attn.o_proj.weight", NULL, BF16),
    ROW(IDX_Q_B, "indexer.attn_q_b.weight", D2(QLORA, IDX_Q_DIM), SMALL, DSA_OWN, 0,
        "self_attn.indexer.wq_b.weight", NULL, BF16),
    ROW(IDX_K, "indexer.attn_k.weight", D2(EMBD, IDX_DIM), SMALL, DSA_OWN, 0,
        "self_attn.indexer.wk.weight", NULL, BF16),
    ROW(IDX_K_NORM, "indexer.k_norm.weight", D1(IDX_DIM), VEC, DSA_OWN, 0,
        "self_attn.indexer.k_norm.weight", NULL, BF16),
    ROW(IDX_K_NORM_B, "indexer.k_norm.bias", D1(IDX_DIM), VEC, DSA_OWN, 0,
        "self_attn.indexer.k_norm.bias", NULL, BF16),
    ROW(IDX_PROJ, "indexer.proj.weight", D2(EMBD, IDX_HEADS), SMALL, DSA_OWN, 0,
        "self_attn.indexer.weights_proj.weight", NULL, BF16),
    /* the k-pool compressor: softmax gate over each pool's kpool keys */
    ROW(IDX_COMP_GATE, "indexer_compressor_gate.weight", D2(EMBD, IDX_DIM), SMALL, DSA_OWN, 0,
        "self_attn.indexer.index_kpool_compress_gate", NULL, BF16),
    ROW(IDX_COMP_APE, "indexer_compressor_ape.weight", D2(IDX_DIM, KPOOL), VEC, DSA_OWN, 0,
        "self_attn.indexer.index_kpool_compress_ape", NULL, F32),
    ROW(FFN_NORM, "ffn_norm.weight", D1(EMBD), VEC, ALWAYS, 0, "post_attention_layernorm.weight", NULL, BF16),
    ROW(FFN_GATE, "ffn_gate.weight", D2(EMBD, FF_DENSE), PROJ, DENSE, 0, "mlp.gate_proj.weight", NULL, BF16),
    ROW(FFN_UP, "ffn_up.weight", D2(EMBD, FF_DENSE), PROJ, DENSE, 0, "mlp.up_proj.weight", NULL, BF16),
    ROW(FFN_DOWN, "ffn_down.weight", D2(FF_DENSE, EMBD), PROJ, DENSE, 0, "mlp.down_proj.weight", NULL, BF16),
    ROW(FFN_GATE_INP, "ffn_gate_inp.weight", D2(EMBD, EXPERTS), SMALL, MOE, 0, "mlp.gate.weight", NULL, BF16),
    ROW(EXP_PROBS_B, "exp_probs_b.bias", D1(EXPERTS), VEC, MOE, 0, "mlp.gate.e_score_correction_bias", NULL, F32),
    ROW(FFN_GATE_EXPS, "ffn_gate_exps.weight", D3(EMBD, FF, EXPERTS), EXP_GU, MOE, 0,
        "mlp.experts", "gate_proj", BF16),
    ROW(FFN_UP_EXPS, "ffn_up_exps.weight", D3(EMBD, FF, EXPERTS), EXP_GU, MOE, 0, "mlp.experts", "up_proj", BF16),
    ROW(FFN_DOWN_EXPS, "ffn_down_exps.weight", D3(FF, EMBD, EXPERTS), EXP_DOWN, MOE, 0,
        "mlp.experts", "down_proj", BF16),
    ROW(FFN_GATE_SHEXP, "ffn_gate_shexp.weight", D2(EMBD, SHARED_FF), SHEXP, MOE, 0,
        "mlp.shared_experts.gate_proj.weight", NULL, BF16),
    ROW(FFN_UP_SHEXP, "ffn_up_shexp.weight", D2(EMBD, SHARED_FF), SHEXP, MOE, 0,
        "mlp.shared_experts.up_proj.weight", NULL, BF16),
    ROW(FFN_DOWN_SHEXP, "ffn_down_shexp.weight", D2(SHARED_FF, EMBD), SHEXP, MOE, 0,
        "mlp.shared_experts.down_proj.weight", NULL, BF16),
};
#undef KVB

const ds4_layout_arch ds4_layout_glm5_next = {
    .arch = "glm5-next",
    .sec = {G5N_HEAD, G5N_LAYER, G5N_TAIL, GLM_NEXTN},
    .n = {N_OF(G5N_HEAD), N_OF(G5N_LAYER), N_OF(G5N_TAIL), N_OF(GLM_NEXTN)},
    .hf_layer = "model.language_model.layers.",
};

ds4_layer_kind ds4_layout_writer_kind(int64_t ratio, int64_t il, int64_t n_hash) {
    ds4_layer_kind k = {(int)ratio, ratio == 4, il < n_hash, 0, 0, 0};
    return k;
}

uint64_t ds4_layout_dim(int d, const ds4_layout_hp *h, const ds4_layer_kind *k) {
    const uint64_t hd = (uint64_t)h->head_dim, N = (uint64_t)h->n_hc, H = (uint64_t)h->n_head;
    switch (d) {
    case DS4_LD_ONE: return 1;
    case DS4_LD_THREE: return 3;
    case DS4_LD_EMBD: return (uint64_t)h->n_embd;
    case DS4_LD_VOCAB: return (uint64_t)h->n_vocab;
    case DS4_LD_HC: return N;
    case DS4_LD_HC_DIM: return N * (uint64_t)h->n_embd;
    case DS4_LD_HC_MIX: return (2 + N) * N;
    case DS4_LD_QLORA: return (uint64_t)h->q_lora;
    case DS4_LD_HEADS: return H;
    case DS4_LD_Q_DIM: return H * hd;
    case DS4_LD_HEAD_DIM: return hd;
    case DS4_LD_OUT_GROUP_DIM: return h->o_groups ? H * hd / (uint64_t)h->o_groups : 0;
    case DS4_LD_OUT_LOW: return (uint64_t)h->o_groups * (uint64_t)h->o_lora;
    case DS4_LD_COMP_DIM: return (k && k->indexer ? 2 : 1) * hd;
    case DS4_LD_RATIO: return k ? (uint64_t)k->ratio : 0;
    case DS4_LD_IDX_Q_DIM: return (uint64_t)h->idx_heads * (uint64_t)h->idx_dim;
    case DS4_LD_IDX_HEADS: return (uint64_t)h->idx_heads;
    case DS4_LD_IDX_COMP_DIM: return 2 * (uint64_t)h->idx_dim;
    case DS4_LD_IDX_DIM: return (uint64_t)h->idx_dim;
    case DS4_LD_EXPERTS: return (uint64_t)h->n_expert;
    case DS4_LD_FF: return (uint64_t)h->n_ff;
    case DS4_LD_SHARED_FF: return (uint64_t)h->n_ff * (uint64_t)h->n_shared;
    case DS4_LD_USED: return (uint64_t)h->n_used;
    case DS4_LD_KV_LORA: return (uint64_t)h->kv_lora;
    case DS4_LD_KV_A: return (uint64_t)(h->kv_lora + h->n_rot);
    case DS4_LD_Q_MLA: return H * (uint64_t)h->kmla;
    case DS4_LD_NOPE: return (uint64_t)(h->kmla - h->n_rot);
    case DS4_LD_VMLA: return (uint64_t)h->vmla;
    case DS4_LD_ATT_OUT: return H * (uint64_t)h->vmla;
    case DS4_LD_FF_DENSE: return (uint64_t)h->n_ff_dense;
    case DS4_LD_EMBD2: return 2 * (uint64_t)h->n_embd;
    case DS4_LD_KDA_K: return (uint64_t)h->kda_dim;
    case DS4_LD_KDA_DI: return H * (uint64_t)h->kda_dim;
    case DS4_LD_CONV: return (uint64_t)h->conv;
    case DS4_LD_KPOOL: return (uint64_t)h->kpool;
    }
    return 0;
}

/* Whether a row exists in a layer of kind k. */
static int row_in(const ds4_layout_row *r, const ds4_layer_kind *k) {
    switch (r->when) {
    case DS4_W_COMP: return k->ratio != 0;
    case DS4_W_INDEXER: return k->ratio != 0 && k->indexer;
    case DS4_W_HASH: return k->hash;
    case DS4_W_LEARNED: return !k->hash;
    case DS4_W_OWN_IDX: return k->indexer;
    case DS4_W_DENSE: return k->dense;
    case DS4_W_MOE: return !k->dense;
    case DS4_W_KDA: return k->kda;
    case DS4_W_DSA: return !k->kda;
    case DS4_W_DSA_OWN: return !k->kda && k->indexer;
    case DS4_W_TRUNK: return !k->nextn;
    }
    return 1;
}

int ds4_layout_section(const ds4_layout_arch *a, int sec, const ds4_layout_hp *hp, int il,
                       const ds4_layer_kind *k, int flags, ds4_layout_tensor *out) {
    static const ds4_layer_kind none = {0, 0, 0, 0, 0, 0};
    const int layer = sec == DS4_SEC_LAYER;
    /* glm-dsa's NextN rows live under the block's layer number */
    const int blk = layer || (sec == DS4_SEC_MTP && il >= 0);
    if (!layer) k = &none;
    int n = 0;
    for (int i = 0; i < a->n[sec]; i++) {
        const ds4_layout_row *r = &a->sec[sec][i];
        if (!row_in(r, k) && !(r->optional && (flags & DS4_LAYOUT_READ))) continue;
        ds4_layout_tensor *t = &out[n++];
        memset(t, 0, sizeof *t);
        t->row = r;
        t->hf_layer = a->hf_layer ? a->hf_layer : "layers.";
        t->layer = blk ? il : -1;
        if (!blk) snprintf(t->name, sizeof t->name, "%s", r->name);
        else if (flags & DS4_LAYOUT_MTP) snprintf(t->name, sizeof t->name, "mtp.0.%s", r->name);
        else snprintf(t->name, sizeof t->name, "blk.%d.%s", il, r->name);
        t->nd = 0;
        for (int d = 0; d < 3; d++) {
            t->ne[d] = r->dim[d] ? ds4_layout_dim(r->dim[d], hp, k) : 1;
            if (r->dim[d]) t->nd = (uint32_t)d + 1;
        }
    }
    return n;
}

ds4_layout_tensor *ds4_layout_list(const ds4_layout_arch *a, const ds4_layout_hp *hp, int mtp, size_t *n) {
    const size_t cap = (size_t)(a->n[DS4_SEC_HEAD] + a->n[DS4_SEC_TAIL] + a->n[DS4_SEC_MTP]) +
                       (size_t)(hp->n_layer + 1) * (size_t)a->n[DS4_SEC_LAYER];
    ds4_layout_tensor *L = malloc(cap * sizeof *L);
    if (!L) return NULL;
    size_t k = 0;
    k += (size_t)ds4_layout_section(a, DS4_SEC_HEAD, hp, -1, NULL, 0, L + k);
    for (int64_t il = 0; il < hp->n_layer; il++) {
        ds4_layer_kind kind = ds4_layout_writer_kind(hp->ratios[il], il, hp->n_hash);
        k += (size_t)ds4_layout_section(a, DS4_SEC_LAYER, hp, (int)il, &kind, 0, L + k);
    }
    k += (size_t)ds4_layout_section(a, DS4_SEC_TAIL, hp, -1, NULL, 0, L + k);
    if (mtp) {
        /* window-only (ratio 0), learned router */
        ds4_layer_kind kind = {0, 0, 0, 0, 0, 0};
        k += (size_t)ds4_layout_section(a, DS4_SEC_MTP, hp, -1, NULL, 0, L + k);
        k += (size_t)ds4_layout_section(a, DS4_SEC_LAYER, hp, (int)hp->n_layer, &kind, DS4_LAYOUT_MTP, L + k);
    }
    *n = k;
    return L;
}

void ds4_layout_hf_name(const ds4_layout_tensor *t, int64_t expert, char *out, size_t n) {
    const ds4_layout_row *r = t->row;
    if (!r->hf) snprintf(out, n, "%s", "");
    else if (t->layer < 0) snprintf(out, n, "%s", r->hf);
    else if (r->hf_expert)
        snprintf(out, n, "%s%d.%s.%" PRId64 ".%s.weight", t->hf_layer, t->layer, r->hf, expert, r->hf_expert);
    else snprintf(out, n, "%s%d.%s", t->hf_layer, t->layer, r->hf);
}

/* ------------------------------------------------------------------------ */
/* Recipes and accepted types                                               */
/* ------------------------------------------------------------------------ */

static const ds4_recipe RECIPES[] = {
    {"f16", GGML_F16, GGML_F16, GGML_F16},
    {"q2", GGML_Q8_0, GGML_IQ2_XXS, GGML_Q2_K},
    {"q4", GGML_Q8_0, GGML_Q4_K, GGML_Q4_K},
    {"mxfp4", GGML_Q8_0, GGML_MXFP4, GGML_MXFP4},
};

const ds4_recipe *ds4_recipe_find(const char *name) {
    for (size_t i = 0; i < sizeof RECIPES / sizeof RECIPES[0]; i++)
        if (!strcmp(RECIPES[i].name, name)) return &RECIPES[i];
    return NULL;
}

uint32_t ds4_recipe_type(const ds4_recipe *r, int role) {
    switch (role) {
    case DS4_ROLE_VEC: return GGML_F32;
    case DS4_ROLE_I32: return GGML_I32;
    case DS4_ROLE_PROJ: case DS4_ROLE_SHEXP: case DS4_ROLE_OUT: return r->proj;
    case DS4_ROLE_EXP_GU: return r->gate_up;
    case DS4_ROLE_EXP_DOWN: return r->down;
    }
    return GGML_F16;   /* embedding, position biases, the small matrices */
}

/* Type classes: the embedding is read one row at a time by
 * dequantization; position biases one value at a time, so no block
 * formats; matrices take every format the kernels implement; routed
 * experts may also be MXFP4 (the only place GGUF producers put it). */
#define MATRIX_TYPES "one of F32, F16, BF16, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ4_XS"
static int is_matrix_type(uint32_t t) {
    return t == GGML_F32 || t == GGML_F16 || t == GGML_BF16 || t == GGML_Q8_0 || t == GGML_Q2_K ||
           t == GGML_Q3_K || t == GGML_Q4_K || t == GGML_Q5_K || t == GGML_Q6_K ||
           t == GGML_IQ2_XXS || t == GGML_IQ4_XS;
}

int ds4_layout_type_ok(int role, uint32_t t) {
    switch (role) {
    case DS4_ROLE_VEC: return t == GGML_F32;
    case DS4_ROLE_I32: return t == GGML_I32;
    /* llama.cpp's K-quant mixes store token_embd as Q6_K, Q4_K, ...: any
     * block format ds4_dequantize_row knows (the rows are dequantized). */
    case DS4_ROLE_EMBD: return is_matrix_type(t);
    case DS4_ROLE_ELEM: return t == GGML_F32 || t == GGML_F16 || t == GGML_BF16;
    case DS4_ROLE_EXP_GU: case DS4_ROLE_EXP_DOWN: return is_matrix_type(t) || t == GGML_MXFP4;
    }
    return is_matrix_type(t);
}

const char *ds4_layout_types_text(int role) {
    switch (role) {
    case DS4_ROLE_VEC: return "F32";
    case DS4_ROLE_I32: return "I32";
    case DS4_ROLE_EMBD: return MATRIX_TYPES;
    case DS4_ROLE_ELEM: return "one of F32, F16, BF16";
    case DS4_ROLE_EXP_GU: case DS4_ROLE_EXP_DOWN: return MATRIX_TYPES ", MXFP4";
    }
    return MATRIX_TYPES;
}
