/*
 * ds4_quantize.c -- ds4-quantize: a DeepSeek V4, GLM 5.2 / 5.3 or GLM 5.3
 * Flash Hugging Face checkpoint (config.json, model*.safetensors + index,
 * tokenizer.json, tokenizer_config.json) -> a GGUF ds4 loads (deepseek4,
 * glm-dsa or glm5-next), with a quantization recipe.
 *
 * Owns: the family from config.json (architectures / model_type),
 * config.json -> deepseek4.*, glm-dsa.* or glm5-next.* metadata,
 * tokenizer.json -> tokenizer.* keys, the HF -> GGUF tensor mapping and the
 * expected shapes (checked before anything is written; GLM's kv_b_proj cut
 * into attn_k_b / attn_v_b, glm5-next's A_log -> ssm_a = -exp(A_log) and
 * its conv1d weights written 4-D), per-row dequantization of the
 * checkpoint dtypes, the recipes, the threaded per-tensor conversion with
 * bounded memory, progress and the final report.
 * Does not own: the safetensors container (src/gguf/safetensors.c), the
 * GGUF writer (gguf.c: temporary file + rename), the quantizers
 * (kernels/quantize.c) or the imatrix file (engine/imatrix.c).
 * Layouts and the mapping: docs/CHECKPOINT.md.  Tensor names, order, dims,
 * checkpoint names and the recipes' types come from the layout table
 * (src/gguf/layout.c), which model.c and ds4-synth read too.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ds4.h"   /* ds4_default_threads */
#include "common/args.h"
#include "common/signals.h"
#include "engine/imatrix.h"
#include "gguf/gguf.h"
#include "gguf/layout.h"
#include "gguf/model.h"
#include "gguf/safetensors.h"
#include "kernels/quant.h"
#include "kernels/quantize.h"

#define ALIGNMENT 32
#define MAX_THREADS 256
/* Floats decoded at once for non-expert tensors (per chunk, all threads). */
#define CHUNK_FLOATS (16u << 20)

#define die(...) ds4_die("ds4-quantize", __VA_ARGS__)

static void usage(FILE *o) {
    fputs(
"usage: ds4-quantize --recipe R [--imatrix FILE] [--q4-last K] [--threads N]\n"
"                    [--stats] [--stats-weights FILE] CHECKPOINT_DIR -o OUT.gguf\n"
"\n"
"Converts DeepSeek's official DeepSeek V4 checkpoint (config.json,\n"
"model*.safetensors with model.safetensors.index.json, tokenizer.json,\n"
"tokenizer_config.json) into a GGUF that ds4 loads.  FP8 E4M3 weights are\n"
"dequantized with their 128x128 E8M0 block scales, FP4 E2M1 experts with\n"
"their per-32 E8M0 scales, BF16/F16/F32 read as they are (docs/CHECKPOINT.md).\n"
"Z.ai's GLM 5.2 / 5.3 checkpoints (GlmMoeDsaForCausalLM, model_type\n"
"glm_moe_dsa) become glm-dsa GGUFs, GLM 5.3 Flash's\n"
"(Glm5NextForConditionalGeneration / Glm5NextForCausalLM, model_type\n"
"glm5_next: KDA + DSA layers, hyper-connections; the text tower only)\n"
"glm5-next GGUFs; neither's NextN layer is converted.  config.json\n"
"decides, any other architecture is refused.\n"
"\n"
"  --recipe R      f16    every matrix F16;\n"
"                  q2     routed gate/up IQ2_XXS, routed down Q2_K, attention\n"
"                         projections, shared expert and output Q8_0;\n"
"                  q4     as q2 with every routed expert Q4_K;\n"
"                  q2-q4  q2 with the last K layers' routed experts Q4_K;\n"
"                  mxfp4  as q2 with the routed experts MXFP4, copied from the\n"
"                         checkpoint's FP4 blocks without requantizing.\n"
"                  In these recipes the token embedding, HC, compressor,\n"
"                  indexer and router matrices are F16, 1-D tensors F32,\n"
"                  tid2eid I32 (GLM checkpoints take them too; glm5-next's\n"
"                  KDA projections are projections, its gate/beta/HC\n"
"                  matrices F16, its convolutions and k-pool biases F32).\n"
"                  f32, q8_0 (GLM only; f16 is the same rule): every matrix\n"
"                  F32, F16, or Q8_0 where a row is whole blocks of 32 (else\n"
"                  F32), 1-D tensors (and glm5-next's convolutions, k-pool\n"
"                  biases) F32: ds4-synth --arch glm-dsa's files.\n"
"  --q4-last K     q2-q4: how many last layers get Q4_K experts (default 6).\n"
"  --imatrix FILE  importance matrix from `ds4 --imatrix-out` (per layer and\n"
"                  expert; DeepSeek V4 only): weights of the Q2_K, Q4_K and\n"
"                  IQ2_XXS expert quantizers.  Without it Q2_K/Q4_K use ggml's reference\n"
"                  rule and IQ2_XXS the column sums of squares of each expert.\n"
"  --threads N     worker threads (default: $DS4_THREADS or the CPUs it may\n"
"                  use).\n"
"  --stats         print, per tensor class, the RMSE and relative RMSE of the\n"
"                  output against the dequantized checkpoint; for routed\n"
"                  experts also the imatrix-weighted relative RMSE\n"
"                  sqrt(sum w_c e^2 / sum w_c x^2) (weights: --imatrix).\n"
"  --stats-weights FILE  weights of that error from this imatrix instead\n"
"                  (implies --stats; lets a run without --imatrix be scored).\n"
"  -o, --output F  output file; written to F.tmp and renamed when complete.\n"
"  -h, --help      this help; --version prints the version.\n"
"\n"
"Before writing, every tensor the recipe needs is looked up and its dtype\n"
"and shape checked against config.json; a missing shard, a corrupted header,\n"
"an unknown dtype or a wrong shape stops with a message and leaves no file.\n",
        o);
}

#define usage_error(...) ds4_args_fail("ds4-quantize", __VA_ARGS__)

/* ------------------------------------------------------------------------ */
/* config.json                                                               */
/* ------------------------------------------------------------------------ */

typedef struct {
    int64_t ctx, n_layer, n_embd, n_vocab, n_head, n_head_kv, head_dim, n_rot, q_lora, o_lora, o_groups;
    int64_t n_swa, idx_heads, idx_dim, idx_topk, n_expert, n_used, n_shared, n_ff, n_hash;
    int64_t n_hc, hc_iters, rope_orig_ctx;
    double hc_eps, rms_eps, rope_base, compress_base, rope_factor, beta_fast, beta_slow;
    double expert_scale, clamp;
    int expert_norm;
    int64_t *ratios;
    int n_ratios;
    /* glm-dsa (GlmMoeDsaForCausalLM): MLA widths, the dense FFN, IndexShare;
     * glm = G_DSA, or G_NEXT for glm5-next (its KDA and k-pool fields below) */
    int glm;
    int64_t kv_lora, nope, vmla, n_ff_dense, n_dense;
    int tied;                  /* tie_word_embeddings: no lm_head */
    int *own;                  /* [n_layer] the layer runs its own indexer */
    int types_known;           /* own[] from config.json (else the loader's default) */
    /* glm5-next: KDA head width, conv kernel, gate lower bound, the k-pool;
     * kda[il]: layer il is a KDA layer (else DSA) */
    int64_t kda_dim, conv, kpool;
    double kda_lb;
    int *kda;
} hcfg;

enum { G_V4, G_DSA, G_NEXT };   /* hcfg.glm */

static const char *g_cfg_path;

/* First present key of a NULL-terminated alias list. */
static json_t *cfg_get(json_t *root, const char *const *keys, const char **found) {
    for (int i = 0; keys[i]; i++) {
        json_t *v = json_object_get(root, keys[i]);
        if (v && !json_is_null(v)) { *found = keys[i]; return v; }
    }
    return NULL;
}

static int64_t cfg_int(json_t *root, const char *const *keys, int required, int64_t def, int64_t lo,
                       int64_t hi) {
    const char *k = keys[0];
    json_t *v = cfg_get(root, keys, &k);
    if (!v) {
        if (required) die("%s: required key \"%s\" is missing", g_cfg_path, keys[0]);
        return def;
    }
    if (!json_is_integer(v)) die("%s: \"%s\" is not an integer", g_cfg_path, k);
    int64_t x = json_integer_value(v);
    if (x < lo || x > hi)
        die("%s: \"%s\" = %" PRId64 " is out of range [%" PRId64 ", %" PRId64 "]", g_cfg_path, k, x, lo, hi);
    return x;
}

static double cfg_num(json_t *root, const char *const *keys, double def) {
    const char *k = keys[0];
    json_t *v = cfg_get(root, keys, &k);
    if (!v) return def;
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        die("%s: \"%s\" is not a finite number", g_cfg_path, k);
    return json_number_value(v);
}

#define K(...) ((const char *const[]){__VA_ARGS__, NULL})

static void read_config_glm(json_t *r, const char *path, hcfg *c);
static void read_config_g5n(json_t *r, const char *path, hcfg *c);

/* The family (G_*): "architectures" (the first entry) or "model_type". */
static int config_family(json_t *r, const char *path) {
    json_t *a = json_object_get(r, "architectures"), *m = json_object_get(r, "model_type");
    const char *arch = json_is_array(a) ? json_string_value(json_array_get(a, 0)) : NULL;
    const char *mt = json_string_value(m);
    if ((arch && !strcmp(arch, "DeepseekV4ForCausalLM")) || (mt && !strcmp(mt, "deepseek_v4"))) return G_V4;
    if ((arch && !strcmp(arch, "GlmMoeDsaForCausalLM")) || (mt && !strcmp(mt, "glm_moe_dsa"))) return G_DSA;
    /* GLM 5.3 Flash: the release is the vision-language class (text tower
     * in text_config); a text-only export names the causal LM */
    if ((arch && (!strcmp(arch, "Glm5NextForConditionalGeneration") || !strcmp(arch, "Glm5NextForCausalLM"))) ||
        (mt && (!strcmp(mt, "glm5_next") || !strcmp(mt, "glm5_next_text"))))
        return G_NEXT;
    die("%s: architectures %s%s%s, model_type %s%s%s: not a checkpoint ds4-quantize converts "
        "(DeepseekV4ForCausalLM / deepseek_v4: DeepSeek V4; GlmMoeDsaForCausalLM / glm_moe_dsa: GLM 5.2 / 5.3; "
        "Glm5NextForConditionalGeneration / glm5_next: GLM 5.3 Flash)",
        path, arch ? "\"" : "", arch ? arch : "(absent)", arch ? "\"" : "", mt ? "\"" : "", mt ? mt : "(absent)",
        mt ? "\"" : "");
}

static void read_config(const char *dir, hcfg *c) {
    static char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    g_cfg_path = path;
    json_error_t je;
    json_t *r = json_load_file(path, 0, &je);
    if (!r) die("%s: %s (line %d)", path, je.text, je.line);
    if (!json_is_object(r)) die("%s: not a JSON object", path);
    const int64_t BIG = 1 << 24;
    memset(c, 0, sizeof *c);
    const int fam = config_family(r, path);
    if (fam != G_V4) {
        if (fam == G_DSA) read_config_glm(r, path, c);
        else read_config_g5n(r, path, c);
        json_decref(r);
        return;
    }
    c->n_vocab = cfg_int(r, K("vocab_size"), 1, 0, 1, BIG);
    c->n_embd = cfg_int(r, K("hidden_size", "dim"), 1, 0, 1, 65536);
    c->n_layer = cfg_int(r, K("num_hidden_layers", "n_layers"), 1, 0, 1, 1024);
    c->n_head = cfg_int(r, K("num_attention_heads", "n_heads"), 1, 0, 1, 4096);
    c->n_head_kv = cfg_int(r, K("num_key_value_heads"), 0, 1, 1, 1);
    c->head_dim = cfg_int(r, K("head_dim"), 1, 0, 1, 4096);
    c->n_rot = cfg_int(r, K("qk_rope_head_dim", "rope_head_dim"), 1, 0, 0, 4096);
    c->q_lora = cfg_int(r, K("q_lora_rank"), 1, 0, 1, 65536);
    c->o_lora = cfg_int(r, K("o_lora_rank"), 1, 0, 1, 65536);
    c->o_groups = cfg_int(r, K("o_groups"), 1, 0, 1, 4096);
    c->n_swa = cfg_int(r, K("sliding_window", "window_size"), 1, 0, 1, BIG);
    c->idx_heads = cfg_int(r, K("index_n_heads"), 1, 0, 1, 4096);
    c->idx_dim = cfg_int(r, K("index_head_dim"), 1, 0, 1, 4096);
    c->idx_topk = cfg_int(r, K("index_topk"), 1, 0, 1, BIG);
    c->n_expert = cfg_int(r, K("n_routed_experts"), 1, 0, 1, 4096);
    c->n_used = cfg_int(r, K("num_experts_per_tok", "n_activated_experts"), 1, 0, 1, 4096);
    c->n_shared = cfg_int(r, K("n_shared_experts"), 1, 0, 1, 64);
    c->n_ff = cfg_int(r, K("moe_intermediate_size", "moe_inter_dim"), 1, 0, 1, 65536);
    c->n_hash = cfg_int(r, K("num_hash_layers", "n_hash_layers"), 1, 0, 0, 1024);
    c->n_hc = cfg_int(r, K("hc_mult"), 1, 0, 1, 64);
    c->hc_iters = cfg_int(r, K("hc_sinkhorn_iters"), 0, 20, 1, 1000);
    c->ctx = cfg_int(r, K("max_position_embeddings"), 0, 1048576, 1, UINT32_MAX);
    c->hc_eps = cfg_num(r, K("hc_eps"), 1e-6);
    c->rms_eps = cfg_num(r, K("rms_norm_eps", "norm_eps"), 1e-6);
    c->rope_base = cfg_num(r, K("rope_theta"), 10000.0);
    c->compress_base = cfg_num(r, K("compress_rope_theta"), 160000.0);
    c->expert_scale = cfg_num(r, K("routed_scaling_factor", "route_scale"), 1.5);
    c->clamp = cfg_num(r, K("swiglu_limit"), 10.0);
    json_t *nt = json_object_get(r, "norm_topk_prob");
    c->expert_norm = nt ? json_is_true(nt) : 1;
    json_t *rs = json_object_get(r, "rope_scaling");
    json_t *rso = json_is_object(rs) ? rs : json_object();
    c->rope_factor = cfg_num(rso, K("factor"), 16.0);
    c->rope_orig_ctx = cfg_int(rso, K("original_max_position_embeddings"), 0, 65536, 1, UINT32_MAX);
    c->beta_fast = cfg_num(rso, K("beta_fast"), 32.0);
    c->beta_slow = cfg_num(rso, K("beta_slow"), 1.0);
    if (rso != rs) json_decref(rso);
    json_t *cr = json_object_get(r, "compress_ratios");
    if (!json_is_array(cr)) die("%s: required array \"compress_ratios\" is missing", path);
    if (json_array_size(cr) < (size_t)c->n_layer)
        die("%s: compress_ratios has %zu entries, fewer than num_hidden_layers = %" PRId64, path,
            json_array_size(cr), c->n_layer);
    /* HF configs may carry one more entry, for the MTP layer: keep n_layer. */
    c->n_ratios = (int)c->n_layer;
    c->ratios = calloc((size_t)c->n_layer, sizeof *c->ratios);
    if (!c->ratios) die("out of memory");
    for (int i = 0; i < c->n_ratios; i++) {
        json_t *x = json_array_get(cr, (size_t)i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) == 1 ||
            json_integer_value(x) > (1 << 20))
            die("%s: compress_ratios[%d] is not 0 or an integer >= 2", path, i);
        c->ratios[i] = json_integer_value(x);
    }
    json_decref(r);
    if (c->n_head % c->o_groups) die("%s: num_attention_heads is not a multiple of o_groups", path);
    if (c->n_used > c->n_expert) die("%s: num_experts_per_tok exceeds n_routed_experts", path);
    if (c->n_hash > c->n_layer) die("%s: num_hash_layers exceeds num_hidden_layers", path);
    if (c->n_rot % 2 || c->n_rot > c->head_dim) die("%s: qk_rope_head_dim must be even and <= head_dim", path);
}

/* The MLA, MoE and indexer fields both GLM configurations name alike (GLM
 * 5.2 / 5.3 and GLM 5.3 Flash); rot_required: qk_rope_head_dim must be
 * there (glm-dsa; glm5-next is NoPE), dense_default: first_k_dense_replace
 * when absent. */
static void read_config_glm_shared(json_t *r, hcfg *c, int rot_required, int64_t dense_default) {
    const int64_t BIG = 1 << 24;
    c->n_vocab = cfg_int(r, K("vocab_size"), 1, 0, 1, BIG);
    c->n_embd = cfg_int(r, K("hidden_size"), 1, 0, 1, 65536);
    c->n_layer = cfg_int(r, K("num_hidden_layers"), 1, 0, 1, 1024);
    c->n_head = cfg_int(r, K("num_attention_heads"), 1, 0, 1, 4096);
    c->q_lora = cfg_int(r, K("q_lora_rank"), 1, 0, 1, 65536);
    c->kv_lora = cfg_int(r, K("kv_lora_rank"), 1, 0, 1, 65536);
    c->nope = cfg_int(r, K("qk_nope_head_dim"), 1, 0, 1, 4096);
    c->n_rot = cfg_int(r, K("qk_rope_head_dim"), rot_required, 0, 0, 4096);
    c->vmla = cfg_int(r, K("v_head_dim"), 1, 0, 1, 4096);
    c->n_ff_dense = cfg_int(r, K("intermediate_size"), 1, 0, 1, 1 << 20);
    c->n_ff = cfg_int(r, K("moe_intermediate_size"), 1, 0, 1, 1 << 20);
    c->n_expert = cfg_int(r, K("n_routed_experts"), 1, 0, 1, 4096);
    c->n_used = cfg_int(r, K("num_experts_per_tok"), 1, 0, 1, 4096);
    c->n_shared = cfg_int(r, K("n_shared_experts"), 1, 0, 1, 64);
    c->n_dense = cfg_int(r, K("first_k_dense_replace"), 0, dense_default, 0, 1024);
    c->idx_heads = cfg_int(r, K("index_n_heads"), 1, 0, 1, 4096);
    c->idx_dim = cfg_int(r, K("index_head_dim"), 1, 0, 1, 4096);
    c->idx_topk = cfg_int(r, K("index_topk"), 1, 0, 1, BIG);
}

/* config.json of GlmMoeDsaForCausalLM -> the glm-dsa hparams (the keys of
 * llama.cpp's converter; docs/CHECKPOINT.md "GLM 5.2 / 5.3").  The NextN
 * (MTP) layers past num_hidden_layers are left out. */
static void read_config_glm(json_t *r, const char *path, hcfg *c) {
    c->glm = G_DSA;
    read_config_glm_shared(r, c, 1, 0);
    c->ctx = cfg_int(r, K("max_position_embeddings"), 1, 0, 1, UINT32_MAX);
    c->rms_eps = cfg_num(r, K("rms_norm_eps"), 1e-6);
    c->expert_scale = cfg_num(r, K("routed_scaling_factor"), 1.0);
    c->expert_norm = json_is_true(json_object_get(r, "norm_topk_prob"));
    c->tied = json_is_true(json_object_get(r, "tie_word_embeddings"));
    /* RoPE: rope_theta at the top, or in rope_parameters (newer
     * transformers); scaling other than "default" is not implemented */
    json_t *rp = json_object_get(r, "rope_parameters");
    json_t *rpo = json_is_object(rp) ? rp : NULL;
    c->rope_base = cfg_num(r, K("rope_theta"), rpo ? cfg_num(rpo, K("rope_theta"), 10000.0) : 10000.0);
    const double prf = rpo ? cfg_num(rpo, K("partial_rotary_factor"), 1.0) : 1.0;
    if (prf != 1.0)
        die("%s: partial_rotary_factor %g: RoPE over part of qk_rope_head_dim is not implemented (ds4 "
            "rotates the whole RoPE key)", path, prf);
    json_t *rs = json_object_get(r, "rope_scaling");
    const json_t *scl[2] = {json_is_object(rs) ? rs : NULL, rpo};
    for (int i = 0; i < 2; i++) {
        if (!scl[i]) continue;
        const char *ty = json_string_value(json_object_get(scl[i], "rope_type"));
        if (!ty) ty = json_string_value(json_object_get(scl[i], "type"));
        if (ty && strcmp(ty, "default"))
            die("%s: RoPE scaling \"%s\" (%s): ds4's glm-dsa graph implements the default RoPE only", path, ty,
                i ? "rope_parameters" : "rope_scaling");
    }
    const char *sf = json_string_value(json_object_get(r, "scoring_func"));
    if (sf && strcmp(sf, "sigmoid"))
        die("%s: scoring_func \"%s\": glm-dsa's router is sigmoid, the only one ds4 implements for it", path, sf);
    if (cfg_int(r, K("n_group"), 0, 1, 1, 4096) != 1 || cfg_int(r, K("topk_group"), 0, 1, 1, 4096) != 1)
        die("%s: n_group / topk_group other than 1 (grouped expert selection) is not implemented", path);
    if (c->n_used > c->n_expert) die("%s: num_experts_per_tok exceeds n_routed_experts", path);
    if (c->n_dense > c->n_layer) die("%s: first_k_dense_replace exceeds num_hidden_layers", path);
    if (c->n_rot % 2 || c->n_rot > c->idx_dim)
        die("%s: qk_rope_head_dim = %" PRId64 " must be even and <= index_head_dim = %" PRId64, path, c->n_rot,
            c->idx_dim);
    c->head_dim = c->kv_lora + c->n_rot;
    c->n_head_kv = 1;   /* absorbed MLA is MQA over the cached row */
    /* IndexShare: indexer_types ("full" / "shared" per layer) as llama.cpp's
     * converter writes it; else index_topk_freq / index_skip_topk_offset
     * (full iff max(i - offset + 1, 0) % freq == 0, FAMILY.md §3.2); else no
     * key, and the loader's default decides by the context length. */
    c->own = calloc((size_t)c->n_layer, sizeof *c->own);
    if (!c->own) die("out of memory");
    json_t *it = json_object_get(r, "indexer_types");
    if (json_is_array(it)) {
        if (json_array_size(it) < (size_t)c->n_layer)
            die("%s: indexer_types has %zu entries, fewer than num_hidden_layers = %" PRId64, path,
                json_array_size(it), c->n_layer);
        for (int64_t i = 0; i < c->n_layer; i++) {
            const char *v = json_string_value(json_array_get(it, (size_t)i));
            if (!v || (strcmp(v, "full") && strcmp(v, "shared")))
                die("%s: indexer_types[%" PRId64 "] is not \"full\" or \"shared\"", path, i);
            c->own[i] = !strcmp(v, "full");
        }
        c->types_known = 1;
    } else if (json_object_get(r, "index_topk_freq")) {
        const int64_t freq = cfg_int(r, K("index_topk_freq"), 1, 0, 1, 1024);
        const int64_t off = cfg_int(r, K("index_skip_topk_offset"), 0, 0, 0, 1024);
        for (int64_t i = 0; i < c->n_layer; i++) c->own[i] = (i - off + 1 > 0 ? i - off + 1 : 0) % freq == 0;
        c->types_known = 1;
    } else {
        for (int64_t i = 0; i < c->n_layer; i++)
            c->own[i] = c->ctx >= 1048576 ? (i - 3 + 1 > 0 ? i - 3 + 1 : 0) % 4 == 0 : 1;
    }
    if (!c->own[0]) die("%s: layer 0 is a shared indexer layer with no full layer before it", path);
}

/* A string-array key of n_layer entries (or more: the NextN layer's) into
 * out[i] = index of the entry in vals[], or die naming the key. */
static void cfg_layer_enum(json_t *a, const char *path, const char *key, int64_t n_layer, const char *const *vals,
                           int *out) {
    if (json_array_size(a) < (size_t)n_layer)
        die("%s: %s has %zu entries, fewer than num_hidden_layers = %" PRId64, path, key, json_array_size(a),
            n_layer);
    for (int64_t i = 0; i < n_layer; i++) {
        const char *v = json_string_value(json_array_get(a, (size_t)i));
        int k = 0;
        while (v && vals[k] && strcmp(v, vals[k])) k++;
        if (!v || !vals[k]) die("%s: %s[%" PRId64 "] = %s%s%s is not one this family knows", path, key, i,
                                v ? "\"" : "", v ? v : "(not a string)", v ? "\"" : "");
        out[i] = k;
    }
}

/* A boolean switch the graph has no other setting of: absent = want. */
static void cfg_must(json_t *r, const char *path, const char *key, int want, const char *why) {
    json_t *v = json_object_get(r, key);
    if (v && !json_is_null(v) && json_is_true(v) != want)
        die("%s: %s = %s: %s", path, key, want ? "false" : "true", why);
}

/* config.json of GLM 5.3 Flash (transformers' glm5_next: the text fields
 * in text_config, or at the top level in a text-only export) -> the
 * glm5-next hparams, with the defaults of transformers' Glm5NextTextConfig
 * where a key is absent and the checks of llama.cpp's Glm5NextModel
 * converter (NoPE, mHC, the k-pool compressor with its tail, KDA and MLA
 * sharing the head count).  Layer kinds: layer_types ("linear_attention"
 * KDA, "deepseek_sparse_attention" / "full_attention" DSA; default every
 * 4th from layer 3 DSA), checked against linear_attn_config.full_attn_layers
 * when both are there.  The NextN layer past num_hidden_layers is left out. */
static void read_config_g5n(json_t *top, const char *path, hcfg *c) {
    json_t *tc = json_object_get(top, "text_config");
    json_t *r = json_is_object(tc) ? tc : top;
    json_t *lc = json_object_get(r, "linear_attn_config");
    json_t *lin = json_is_object(lc) ? lc : NULL;
    c->glm = G_NEXT;
    read_config_glm_shared(r, c, 0, 3);
    c->kpool = cfg_int(r, K("index_kpool"), 0, 16, 1, 4096);
    c->ctx = cfg_int(r, K("max_position_embeddings"), 0, 1048576, 1, UINT32_MAX);
    c->rms_eps = cfg_num(r, K("rms_norm_eps"), 1e-5);
    c->expert_scale = cfg_num(r, K("routed_scaling_factor"), 2.5);
    json_t *nt = json_object_get(r, "norm_topk_prob");
    c->expert_norm = nt ? json_is_true(nt) : 1;
    c->tied = json_is_true(json_object_get(r, "tie_word_embeddings"));
    c->clamp = cfg_num(r, K("swiglu_limit"), 10.0);
    c->n_hc = cfg_int(r, K("hc_mult"), 0, 4, 1, 64);
    c->hc_iters = cfg_int(r, K("hc_sinkhorn_iters"), 0, 20, 1, 1000);
    c->hc_eps = cfg_num(r, K("hc_eps"), 1e-6);
    /* KDA: linear_attn_config (the release) or the flat linear_* fields */
    json_t *lr = lin ? lin : r;
    const int64_t kda_heads =
        cfg_int(lr, lin ? K("num_heads") : K("linear_num_heads"), 0, c->n_head, 1, 4096);
    c->kda_dim = cfg_int(lr, lin ? K("head_dim") : K("linear_head_dim"), 0, 128, 1, 4096);
    c->conv = cfg_int(lr, lin ? K("short_conv_kernel_size") : K("linear_conv_kernel_dim"), 0, 4, 1, 64);
    json_t *lb = json_object_get(lr, lin ? "gate_lower_bound" : "linear_lower_bound");
    if (lb && json_is_null(lb))
        die("%s: %s is null: the ungated-bound KDA form (-exp(A_log) softplus) is not implemented, glm5-next's "
            "gate is lower_bound x sigmoid", path, lin ? "linear_attn_config.gate_lower_bound" : "linear_lower_bound");
    c->kda_lb = cfg_num(lr, lin ? K("gate_lower_bound") : K("linear_lower_bound"), -5.0);
    if (c->kda_lb > 0) die("%s: KDA gate lower bound %g is positive (a decay bound must be <= 0)", path, c->kda_lb);
    if (kda_heads != c->n_head)
        die("%s: KDA heads %" PRId64 " != num_attention_heads %" PRId64 ": glm5-next's KDA and MLA layers share "
            "the head count", path, kda_heads, c->n_head);
    if (c->n_rot != 0)
        die("%s: qk_rope_head_dim = %" PRId64 ": glm5-next is NoPE (qk_rope_head_dim 0)", path, c->n_rot);
    cfg_must(r, path, "mla_use_nope", 1, "glm5-next's attention is NoPE");
    cfg_must(r, path, "mhc", 1, "glm5-next without hyper-connections is not implemented");
    cfg_must(r, path, "index_kpool_compress", 1, "the indexer without the k-pool compressor is not implemented");
    cfg_must(r, path, "index_kpool_always_select_tail", 1,
             "the indexer always keeps the incomplete pool's tokens (the only form implemented)");
    const int64_t nkv = cfg_int(r, K("num_key_value_heads"), 0, c->n_head, 1, 4096);
    if (nkv != c->n_head)
        die("%s: num_key_value_heads %" PRId64 " != num_attention_heads %" PRId64 " (MLA is MHA-shaped before "
            "absorption)", path, nkv, c->n_head);
    if (c->idx_topk % c->kpool) die("%s: index_topk %" PRId64 " is not a whole number of index_kpool = %" PRId64
                                    " pools", path, c->idx_topk, c->kpool);
    const char *sf = json_string_value(json_object_get(r, "scoring_func"));
    if (sf && strcmp(sf, "sigmoid")) die("%s: scoring_func \"%s\": glm5-next's router is sigmoid", path, sf);
    if (cfg_int(r, K("n_group"), 0, 1, 1, 4096) != 1 || cfg_int(r, K("topk_group"), 0, 1, 1, 4096) != 1)
        die("%s: n_group / topk_group other than 1 (grouped expert selection) is not implemented", path);
    if (c->n_used > c->n_expert) die("%s: num_experts_per_tok exceeds n_routed_experts", path);
    c->head_dim = c->kv_lora;
    c->n_head_kv = 1;
    c->kda = calloc((size_t)c->n_layer, sizeof *c->kda);
    c->own = calloc((size_t)c->n_layer, sizeof *c->own);
    int *tmp = calloc((size_t)c->n_layer, sizeof *tmp);
    if (!c->kda || !c->own || !tmp) die("out of memory");
    /* layer kinds */
    json_t *lt = json_object_get(r, "layer_types");
    static const char *const LT[] = {"linear_attention", "deepseek_sparse_attention", "full_attention", NULL};
    if (json_is_array(lt)) {
        cfg_layer_enum(lt, path, "layer_types", c->n_layer, LT, tmp);
        for (int64_t i = 0; i < c->n_layer; i++) c->kda[i] = tmp[i] == 0;
    } else {
        for (int64_t i = 0; i < c->n_layer; i++) c->kda[i] = i % 4 != 3;
    }
    json_t *fl = lin ? json_object_get(lin, "full_attn_layers") : NULL;
    if (json_is_array(fl)) {
        for (int64_t i = 0; i < c->n_layer; i++) tmp[i] = 0;
        size_t k;
        json_t *v;
        json_array_foreach(fl, k, v) {
            const int64_t il = json_is_integer(v) ? json_integer_value(v) : -1;
            if (il < 0) die("%s: linear_attn_config.full_attn_layers[%zu] is not a layer index", path, k);
            if (il < c->n_layer) tmp[il] = 1;
        }
        for (int64_t i = 0; i < c->n_layer; i++)
            if (tmp[i] == c->kda[i])
                die("%s: layer %" PRId64 " is %s in layer_types but %s in linear_attn_config.full_attn_layers", path,
                    i, c->kda[i] ? "KDA" : "DSA", tmp[i] ? "listed" : "not listed");
    }
    /* the FFN: mlp_layer_types must be the leading dense run */
    json_t *mt = json_object_get(r, "mlp_layer_types");
    if (json_is_array(mt)) {
        static const char *const MT[] = {"dense", "sparse", NULL};
        cfg_layer_enum(mt, path, "mlp_layer_types", c->n_layer, MT, tmp);
        int64_t nd = 0;
        while (nd < c->n_layer && tmp[nd] == 0) nd++;
        for (int64_t i = nd; i < c->n_layer; i++)
            if (tmp[i] == 0) die("%s: mlp_layer_types[%" PRId64 "] is dense after a sparse layer", path, i);
        if (json_object_get(r, "first_k_dense_replace") && nd != c->n_dense)
            die("%s: mlp_layer_types has %" PRId64 " leading dense layers, first_k_dense_replace says %" PRId64, path,
                nd, c->n_dense);
        c->n_dense = nd;
    }
    if (c->n_dense > c->n_layer) die("%s: first_k_dense_replace exceeds num_hidden_layers", path);
    /* IndexShare: indexer_types, else index_topk_freq / index_skip_topk_offset
     * (transformers' defaults 1 / 2: every layer full) */
    json_t *it = json_object_get(r, "indexer_types");
    if (json_is_array(it)) {
        static const char *const IT[] = {"shared", "full", NULL};
        cfg_layer_enum(it, path, "indexer_types", c->n_layer, IT, c->own);
    } else {
        const int64_t freq = cfg_int(r, K("index_topk_freq"), 0, 1, 1, 1024);
        const int64_t off = cfg_int(r, K("index_skip_topk_offset"), 0, 2, 0, 1024);
        for (int64_t i = 0; i < c->n_layer; i++) c->own[i] = (i - off + 1 > 0 ? i - off + 1 : 0) % freq == 0;
    }
    /* the key is written only when some DSA layer shares (llama.cpp's
     * files have every indexer full and no key) */
    int seen_full = 0;
    for (int64_t i = 0; i < c->n_layer; i++) {
        if (c->kda[i]) continue;
        if (!c->own[i]) {
            if (!seen_full) die("%s: DSA layer %" PRId64 " shares the indexer of no full DSA layer before it", path, i);
            c->types_known = 1;
        } else seen_full = 1;
    }
    free(tmp);
}

/* ------------------------------------------------------------------------ */
/* Tokenizer                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct {
    char **tok;        /* [n] */
    int32_t *type;     /* [n] */
    char **merges;
    size_t n, n_merges;
    uint32_t bos, eos, pad;
    int add_bos, add_eos;
    /* glm-dsa: the ids llama.cpp's converter adds (UINT32_MAX: none) and
     * the chat template (tokenizer_config.json or chat_template.jinja) */
    uint32_t eot, eom, unk;
    char *chat_template;
} vocab;

static const char *special_text(json_t *v) {
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v) && json_is_string(json_object_get(v, "content")))
        return json_string_value(json_object_get(v, "content"));
    return NULL;
}

/* The id of token text `txt`, or UINT32_MAX. */
static uint32_t token_id(const vocab *V, const char *txt) {
    for (size_t t = 0; t < V->n; t++)
        if (!strcmp(V->tok[t], txt)) return (uint32_t)t;
    return UINT32_MAX;
}

static void read_tokenizer(const char *dir, int64_t n_vocab, int glm, vocab *V) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    json_error_t je;
    json_t *r = json_load_file(path, 0, &je);
    if (!r) die("%s: %s (line %d)", path, je.text, je.line);
    json_t *model = json_object_get(r, "model");
    json_t *jv = json_object_get(model, "vocab"), *jm = json_object_get(model, "merges");
    if (!json_is_object(jv) || !json_is_array(jm) ||
        strcmp(json_string_value(json_object_get(model, "type")) ? json_string_value(json_object_get(model, "type")) : "", "BPE"))
        die("%s: model is not a BPE model with vocab and merges", path);
    V->n = (size_t)n_vocab;
    V->tok = calloc(V->n, sizeof *V->tok);
    V->type = calloc(V->n, sizeof *V->type);
    if (!V->tok || !V->type) die("out of memory");
    const char *k;
    json_t *v;
    json_object_foreach(jv, k, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= n_vocab)
            die("%s: token \"%s\" has id outside [0, vocab_size = %" PRId64 ")", path, k, n_vocab);
        size_t id = (size_t)json_integer_value(v);
        if (V->tok[id]) die("%s: id %zu is assigned twice", path, id);
        V->tok[id] = strdup(k);
        V->type[id] = 1;   /* normal */
    }
    json_t *added = json_object_get(r, "added_tokens");
    size_t i;
    json_array_foreach(added, i, v) {
        json_t *id = json_object_get(v, "id"), *ct = json_object_get(v, "content");
        if (!json_is_integer(id) || !json_is_string(ct) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= n_vocab)
            die("%s: added_tokens[%zu] has no valid id/content (vocab_size %" PRId64 ")", path, i, n_vocab);
        size_t t = (size_t)json_integer_value(id);
        if (V->tok[t] && strcmp(V->tok[t], json_string_value(ct)))
            die("%s: id %zu is both \"%s\" and added token \"%s\"", path, t, V->tok[t], json_string_value(ct));
        free(V->tok[t]);
        V->tok[t] = strdup(json_string_value(ct));
        /* llama.cpp's convention: special added tokens are control (3),
         * the others user-defined (4). */
        V->type[t] = json_is_true(json_object_get(v, "special")) ? 3 : 4;
    }
    size_t gaps = 0;
    for (size_t t = 0; t < V->n; t++) {
        if (!V->tok[t]) {
            char b[32];
            snprintf(b, sizeof b, "[PAD%zu]", t);
            V->tok[t] = strdup(b);
            V->type[t] = 5;   /* unused */
            gaps++;
        }
        if (!V->tok[t]) die("out of memory");
    }
    if (gaps)
        fprintf(stderr, "ds4-quantize: warning: %zu of %zu ids have no token in %s (filled as [PADn])\n",
                gaps, V->n, path);
    V->n_merges = json_array_size(jm);
    V->merges = calloc(V->n_merges ? V->n_merges : 1, sizeof *V->merges);
    if (!V->merges) die("out of memory");
    json_array_foreach(jm, i, v) {
        if (json_is_string(v)) V->merges[i] = strdup(json_string_value(v));
        else if (json_is_array(v) && json_array_size(v) == 2 && json_is_string(json_array_get(v, 0)) &&
                 json_is_string(json_array_get(v, 1))) {
            /* newer tokenizers: ["left", "right"] pairs */
            if (asprintf(&V->merges[i], "%s %s", json_string_value(json_array_get(v, 0)),
                         json_string_value(json_array_get(v, 1))) < 0)
                V->merges[i] = NULL;
        } else die("%s: merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", path, i);
        if (!V->merges[i]) die("out of memory");
    }
    json_decref(r);

    /* tokenizer_config.json: special token ids and the add_* flags. */
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    r = json_load_file(path, 0, &je);
    if (!r) die("%s: %s (line %d)", path, je.text, je.line);
    V->add_bos = json_is_true(json_object_get(r, "add_bos_token"));
    V->add_eos = json_is_true(json_object_get(r, "add_eos_token"));
    if (glm) {
        /* GLM (llama.cpp's _set_vocab_glm): BOS [gMASK], EOT <|user|>, UNK
         * <|endoftext|>, EOM <|observation|>; EOS and PAD as
         * tokenizer_config.json says (EOS default <|endoftext|>) */
        const char *eos = special_text(json_object_get(r, "eos_token"));
        const char *pad = special_text(json_object_get(r, "pad_token"));
        V->bos = token_id(V, "[gMASK]");
        V->eot = token_id(V, "<|user|>");
        V->unk = token_id(V, "<|endoftext|>");
        V->eom = token_id(V, "<|observation|>");
        V->eos = token_id(V, eos ? eos : "<|endoftext|>");
        if (V->eos == UINT32_MAX)
            die("%s: eos_token \"%s\" is not a token of tokenizer.json", path, eos ? eos : "<|endoftext|>");
        V->pad = pad ? token_id(V, pad) : V->eos;
        if (V->pad == UINT32_MAX) die("%s: pad_token \"%s\" is not a token of tokenizer.json", path, pad);
        /* GLM's text format needs these as tokens (src/text/tokenizer.c) */
        static const char *need[] = {"<|endoftext|>", "<|user|>", "<|assistant|>", "<think>", "</think>"};
        for (size_t k = 0; k < sizeof need / sizeof need[0]; k++)
            if (token_id(V, need[k]) == UINT32_MAX)
                die("%s/tokenizer.json: no token \"%s\" (GLM's chat format needs it)", dir, need[k]);
        const char *tpl = json_string_value(json_object_get(r, "chat_template"));
        if (tpl) V->chat_template = strdup(tpl);
        json_decref(r);
        if (!tpl) {
            char tp[4096];
            snprintf(tp, sizeof tp, "%s/chat_template.jinja", dir);
            ds4_buf b = {0};
            if (!access(tp, F_OK)) {
                if (ds4_buf_read_file(&b, tp)) die("%s: %s", tp, strerror(errno));
                V->chat_template = b.p;
            }
        }
        return;
    }
    const char *names[3] = {"bos_token", "eos_token", "pad_token"};
    uint32_t *ids[3] = {&V->bos, &V->eos, &V->pad};
    for (int s = 0; s < 3; s++) {
        const char *txt = special_text(json_object_get(r, names[s]));
        if (!txt) {
            if (s < 2) die("%s: \"%s\" is missing", path, names[s]);
            V->pad = V->eos;   /* no pad token: pad with EOS, as the V4 vocabulary does */
            continue;
        }
        size_t t;
        for (t = 0; t < V->n; t++)
            if (!strcmp(V->tok[t], txt)) break;
        if (t == V->n) die("%s: %s \"%s\" is not a token of tokenizer.json", path, names[s], txt);
        *ids[s] = (uint32_t)t;
    }
    json_decref(r);
}

/* ------------------------------------------------------------------------ */
/* Layout: GGUF tensors, their HF sources and types                          */
/* ------------------------------------------------------------------------ */

enum { R_F16, R_Q2, R_Q4, R_Q2Q4, R_MXFP4, R_F32, R_Q8 };
/* S_KVB: glm-dsa's attn_k_b / attn_v_b, cut from kv_b_proj */
enum { S_PLAIN, S_EXPERT, S_TID2EID, S_KVB };
/* Tensor classes for --stats. */
enum { C_ATTN, C_SHEXP, C_GU, C_DOWN, C_OUT, C_EMBD, C_F16, C_VEC, C_N };
static const char *CLASS_NAME[C_N] = {"attention projections", "shared expert", "routed gate/up",
                                      "routed down", "output head", "token embedding",
                                      "other matrices (F16)", "vectors (F32)"};

typedef struct {
    char name[64];
    uint32_t nd;        /* as written: glm5-next's conv1d weights 4 ({kernel, 1, channels, 1}) */
    uint64_t ne[4];
    uint32_t type;
    int src;            /* S_* */
    int negexp;         /* glm5-next's ssm_a: -exp(A_log) of the checkpoint's A_log */
    char hf[96];        /* S_PLAIN, S_TID2EID, S_KVB: the checkpoint's name */
    ds4_layout_tensor lt;   /* the layout's tensor (S_EXPERT: names each expert) */
    int layer, cls;
    uint64_t nbytes;
} qtensor;

typedef struct { qtensor *t; size_t n, cap; } layout;

static void add(layout *L, const ds4_layout_tensor *lt, uint32_t type, int cls) {
    if (L->n == L->cap) {
        L->cap = L->cap ? 2 * L->cap : 256;
        L->t = realloc(L->t, L->cap * sizeof *L->t);
        if (!L->t) die("out of memory");
    }
    qtensor *t = &L->t[L->n++];
    memset(t, 0, sizeof *t);
    memcpy(t->name, lt->name, sizeof t->name);   /* both char[64], NUL-terminated */
    ds4_layout_hf_name(lt, 0, t->hf, sizeof t->hf);
    t->lt = *lt;
    t->nd = lt->nd;
    for (int d = 0; d < 3; d++) t->ne[d] = lt->ne[d];
    t->ne[3] = 1;
    const int id = lt->row->id;
    /* llama.cpp's converter writes the KDA convolutions 4-D (HF [C, 1, K]
     * reshaped to (1, C, 1, K)); the bytes are the same */
    if (id == DS4_T_CONV_Q || id == DS4_T_CONV_K || id == DS4_T_CONV_V) t->nd = 4;
    t->negexp = id == DS4_T_SSM_A;
    t->type = type;
    t->layer = lt->layer;
    t->cls = t->nd == 1 ? C_VEC : cls;
    const int role = lt->row->role;
    t->src = role == DS4_ROLE_EXP_GU || role == DS4_ROLE_EXP_DOWN ? S_EXPERT : role == DS4_ROLE_I32 ? S_TID2EID
                                                                                                     : S_PLAIN;
    if (lt->row->id == DS4_T_ATTN_K_B || lt->row->id == DS4_T_ATTN_V_B) t->src = S_KVB;
    t->nbytes = ggml_row_size(type, t->ne[0]) * t->ne[1] * t->ne[2];
    if (!t->nbytes)
        die("config.json: tensor %s: a row of %" PRIu64 " is not a whole number of %s blocks "
            "(the recipe cannot store this shape)", t->name, t->ne[0], ggml_type_name(type));
}

/* The --stats class of each role. */
static const int CLS[] = {
    [DS4_ROLE_VEC] = C_VEC, [DS4_ROLE_I32] = C_VEC, [DS4_ROLE_EMBD] = C_EMBD, [DS4_ROLE_ELEM] = C_F16,
    [DS4_ROLE_SMALL] = C_F16, [DS4_ROLE_PROJ] = C_ATTN, [DS4_ROLE_SHEXP] = C_SHEXP, [DS4_ROLE_OUT] = C_OUT,
    [DS4_ROLE_EXP_GU] = C_GU, [DS4_ROLE_EXP_DOWN] = C_DOWN,
};

/* glm-dsa's and glm5-next's tensors: the layout's (gguf/layout.h) with
 * each layer's kind (dense FFN, own indexer; glm5-next: KDA or DSA), the
 * output head unless tied; types as build_layout's, and for f32 / q8_0
 * those of ds4-synth --arch glm-dsa and tests/glm_gguf.py --type: every
 * matrix F32, or Q8_0 where a row is whole blocks of 32 (else F32); 1-D
 * tensors F32, and so the tensors the loader takes as F32 only
 * (glm5-next's convolutions and k-pool position biases). */
static void build_layout_glm(const hcfg *c, int recipe, int q4_last, layout *L) {
    /* the role recipes (f32 and q8_0 decide by shape below) */
    static const char *RNAME[] = {[R_F16] = "f16", [R_Q2] = "q2", [R_Q4] = "q4", [R_Q2Q4] = "q2",
                                  [R_MXFP4] = "mxfp4", [R_F32] = "f16", [R_Q8] = "f16"};
    const ds4_recipe *base = ds4_recipe_find(RNAME[recipe]), *q4 = ds4_recipe_find("q4");
    const ds4_layout_hp hp = {
        .n_embd = c->n_embd, .n_vocab = c->n_vocab, .n_head = c->n_head, .q_lora = c->q_lora,
        .kv_lora = c->kv_lora, .n_rot = c->n_rot, .kmla = c->nope + c->n_rot, .vmla = c->vmla,
        .n_ff_dense = c->n_ff_dense, .n_expert = c->n_expert, .n_ff = c->n_ff, .n_shared = c->n_shared,
        .n_used = c->n_used, .idx_heads = c->idx_heads, .idx_dim = c->idx_dim, .n_hc = c->n_hc,
        .kda_dim = c->kda_dim, .conv = c->conv, .kpool = c->kpool,
    };
    const ds4_layout_arch *a = c->glm == G_NEXT ? &ds4_layout_glm5_next : &ds4_layout_glm_dsa;
    ds4_layout_tensor sec[DS4_LAYOUT_MAX_ROWS];
    for (int64_t il = -1; il <= c->n_layer; il++) {
        int n;
        if (il < 0) n = ds4_layout_section(a, DS4_SEC_HEAD, &hp, -1, NULL, 0, sec);
        else if (il == c->n_layer) n = ds4_layout_section(a, DS4_SEC_TAIL, &hp, -1, NULL, 0, sec);
        else {
            ds4_layer_kind kind = {0, c->own[il], 0, il < c->n_dense, c->kda ? c->kda[il] : 0, 0};
            n = ds4_layout_section(a, DS4_SEC_LAYER, &hp, (int)il, &kind, 0, sec);
        }
        for (int i = 0; i < n; i++) {
            const ds4_layout_tensor *lt = &sec[i];
            const int role = lt->row->role;
            if (lt->row->id == DS4_T_OUTPUT && c->tied) continue;
            uint32_t type;
            if (recipe == R_F32 || lt->nd < 2 || role == DS4_ROLE_VEC) type = GGML_F32;
            else if (recipe == R_Q8) type = lt->ne[0] % 32 == 0 ? GGML_Q8_0 : GGML_F32;
            else {
                const int last = recipe == R_Q2Q4 && lt->layer >= c->n_layer - q4_last;
                type = ds4_recipe_type(last ? q4 : base, role);
            }
            add(L, lt, type, CLS[role]);
        }
    }
}

/* The layout's tensors (gguf/layout.h) with the recipe's types; q2-q4 is
 * q2 with the last q4_last layers' routed experts q4's. */
static void build_layout(const hcfg *c, int recipe, int q4_last, layout *L) {
    if (c->glm) {
        build_layout_glm(c, recipe, q4_last, L);
        return;
    }
    static const char *RNAME[] = {[R_F16] = "f16", [R_Q2] = "q2", [R_Q4] = "q4", [R_Q2Q4] = "q2", [R_MXFP4] = "mxfp4"};
    const ds4_recipe *base = ds4_recipe_find(RNAME[recipe]), *q4 = ds4_recipe_find("q4");
    const ds4_layout_hp hp = {
        .n_embd = c->n_embd, .n_vocab = c->n_vocab, .n_hc = c->n_hc, .n_head = c->n_head,
        .head_dim = c->head_dim, .q_lora = c->q_lora, .o_lora = c->o_lora, .o_groups = c->o_groups,
        .n_expert = c->n_expert, .n_ff = c->n_ff, .n_shared = c->n_shared, .n_used = c->n_used,
        .idx_heads = c->idx_heads, .idx_dim = c->idx_dim, .n_layer = c->n_layer, .n_hash = c->n_hash,
        .ratios = c->ratios,
    };
    size_t n = 0;
    ds4_layout_tensor *lt = ds4_layout_list(&ds4_layout_deepseek4, &hp, 0, &n);
    if (!lt) die("out of memory");
    for (size_t i = 0; i < n; i++) {
        const int last = recipe == R_Q2Q4 && lt[i].layer >= c->n_layer - q4_last;
        const int role = lt[i].row->role;
        add(L, &lt[i], ds4_recipe_type(last ? q4 : base, role), CLS[role]);
    }
    free(lt);
}

/* ------------------------------------------------------------------------ */
/* Sources: one HF matrix (or vector), resolved and checked                  */
/* ------------------------------------------------------------------------ */

enum { F_PLAIN, F_FP8, F_FP4 };

typedef struct {
    const st_tensor *w, *scale;
    int fmt;               /* F_* */
    uint64_t rows, cols;   /* logical (dequantized) shape */
    uint64_t sc_rows, sc_cols, blk_r, blk_c;   /* scale grid: FP8 128x128, FP4 1x32 */
} source;

static const st_checkpoint *g_ck;

static void shape_str(const st_tensor *t, char *b, size_t n) {
    size_t o = (size_t)snprintf(b, n, "[");
    for (int i = 0; i < t->n_dims && o < n; i++)
        o += (size_t)snprintf(b + o, n - o, "%s%" PRId64, i ? ", " : "", t->shape[i]);
    if (o < n) snprintf(b + o, n - o, "]");
}

/* HF tensor `name`; GLM 5.3 Flash's text tower is under
 * "model.language_model." in the release, under "model." in a text-only
 * export (Glm5NextForCausalLM): either is taken. */
static const st_tensor *find_hf(const char *name) {
    const st_tensor *w = st_find(g_ck, name);
    static const char LM[] = "model.language_model.";
    if (!w && !strncmp(name, LM, sizeof LM - 1)) {
        char alt[256];
        snprintf(alt, sizeof alt, "model.%s", name + sizeof LM - 1);
        w = st_find(g_ck, alt);
    }
    return w;
}

/* Resolves HF tensor `name` as a rows x cols matrix (1-D: rows = 1; 3-D,
 * glm5-next's conv1d weights: [rows, 1, cols]), with its scale sibling if
 * its dtype needs one.  Every mismatch dies naming the tensor, its shard,
 * and what config.json implies. */
static source resolve(const char *name, const char *gguf_name, uint64_t rows, uint64_t cols, int nd,
                      int allow_fp4) {
    source s;
    memset(&s, 0, sizeof s);
    s.rows = rows;
    s.cols = cols;
    s.w = find_hf(name);
    if (!s.w) die("checkpoint: tensor \"%s\" (for %s) is in no shard", name, gguf_name);
    const st_tensor *w = s.w;
    const char *shard = st_shard_path(g_ck, w->shard);
    char got[128];
    shape_str(w, got, sizeof got);
    char sname[160];
    if (w->dtype == ST_F8_E4M3 || w->dtype == ST_I8 || w->dtype == ST_U8) {
        const char *dot = strrchr(name, '.');
        size_t stem = dot && !strcmp(dot, ".weight") ? (size_t)(dot - name) : strlen(name);
        snprintf(sname, sizeof sname, "%.*s.scale", (int)stem, name);
        s.scale = find_hf(sname);
        if (!s.scale) {
            snprintf(sname, sizeof sname, "%.*s.weight_scale_inv", (int)stem, name);
            s.scale = find_hf(sname);
        }
        if (!s.scale)
            die("%s: tensor \"%s\" has dtype %s but no \"%.*s.scale\" (or .weight_scale_inv) sibling",
                shard, name, st_dtype_name(w->dtype), (int)stem, name);
        if (s.scale->dtype != ST_F8_E8M0 && s.scale->dtype != ST_F32 && s.scale->dtype != ST_BF16)
            die("%s: scale \"%s\" has dtype %s (expected F8_E8M0, F32 or BF16)",
                st_shard_path(g_ck, s.scale->shard), sname, st_dtype_name(s.scale->dtype));
        if (s.scale->n_dims != 2) die("%s: scale \"%s\" is not 2-D", st_shard_path(g_ck, s.scale->shard), sname);
        if (w->dtype == ST_F8_E4M3) {
            s.fmt = F_FP8;
            s.blk_r = s.blk_c = 128;
        } else {
            if (!allow_fp4)
                die("%s: tensor \"%s\" (for %s) is packed FP4 (%s + scale), which the checkpoint "
                    "only uses for routed experts", shard, name, gguf_name, st_dtype_name(w->dtype));
            s.fmt = F_FP4;
            s.blk_r = 1;
            s.blk_c = 32;
        }
        s.sc_rows = (rows + s.blk_r - 1) / s.blk_r;
        s.sc_cols = (cols + s.blk_c - 1) / s.blk_c;
        if (s.fmt == F_FP4 && cols % 32)
            die("%s: FP4 tensor \"%s\": %" PRIu64 " columns is not a multiple of 32", shard, name, cols);
        const uint64_t wc = s.fmt == F_FP4 ? cols / 2 : cols;
        if (w->n_dims != 2 || (uint64_t)w->shape[0] != rows || (uint64_t)w->shape[1] != wc)
            die("%s: tensor \"%s\" has shape %s, but config.json implies [%" PRIu64 ", %" PRIu64 "] "
                "(%s)", shard, name, got, rows, wc, gguf_name);
        if ((uint64_t)s.scale->shape[0] != s.sc_rows || (uint64_t)s.scale->shape[1] != s.sc_cols) {
            char sg[128];
            shape_str(s.scale, sg, sizeof sg);
            die("%s: scale \"%s\" has shape %s, expected [%" PRIu64 ", %" PRIu64 "]",
                st_shard_path(g_ck, s.scale->shard), sname, sg, s.sc_rows, s.sc_cols);
        }
        return s;
    }
    if (w->dtype != ST_F32 && w->dtype != ST_F16 && w->dtype != ST_BF16)
        die("%s: tensor \"%s\" (for %s) has dtype %s, not a weight dtype", shard, name, gguf_name,
            st_dtype_name(w->dtype));
    s.fmt = F_PLAIN;
    int ok = nd == 1 ? (w->n_dims == 1 && (uint64_t)w->shape[0] == cols)
           : nd >= 3 ? (w->n_dims == 3 && (uint64_t)w->shape[0] == rows && w->shape[1] == 1 &&
                        (uint64_t)w->shape[2] == cols)
                     : (w->n_dims == 2 && (uint64_t)w->shape[0] == rows && (uint64_t)w->shape[1] == cols);
    if (!ok) {
        if (nd == 1) die("%s: tensor \"%s\" has shape %s, but config.json implies [%" PRIu64 "] (%s)",
                         shard, name, got, cols, gguf_name);
        if (nd >= 3) die("%s: tensor \"%s\" has shape %s, but config.json implies [%" PRIu64 ", 1, %" PRIu64 "] (%s)",
                         shard, name, got, rows, cols, gguf_name);
        die("%s: tensor \"%s\" has shape %s, but config.json implies [%" PRIu64 ", %" PRIu64 "] (%s)",
            shard, name, got, rows, cols, gguf_name);
    }
    return s;
}

static float scale_at(const source *s, uint64_t r, uint64_t c) {
    const uint64_t i = (r / s->blk_r) * s->sc_cols + c / s->blk_c;
    const uint8_t *p = s->scale->data;
    switch (s->scale->dtype) {
    case ST_F8_E8M0: return st_e8m0_to_f32(p[i]);
    case ST_BF16: { uint16_t h; memcpy(&h, p + 2 * i, 2); return st_bf16_to_f32(h); }
    default: { float f; memcpy(&f, p + 4 * i, 4); return f; }
    }
}

/* Dequantizes row r of s into out[cols]. */
static void read_row(const source *s, uint64_t r, float *out) {
    const uint64_t C = s->cols;
    const uint8_t *p = s->w->data;
    switch (s->fmt) {
    case F_FP8:
        for (uint64_t c0 = 0; c0 < C; c0 += 128) {
            const float sc = scale_at(s, r, c0);
            const uint64_t c1 = c0 + 128 < C ? c0 + 128 : C;
            for (uint64_t c = c0; c < c1; c++) out[c] = st_e4m3_to_f32(p[r * C + c]) * sc;
        }
        return;
    case F_FP4:
        for (uint64_t c0 = 0; c0 < C; c0 += 32) {
            const float sc = scale_at(s, r, c0);
            for (uint64_t c = c0; c < c0 + 32; c++) {
                const uint8_t b = p[r * (C / 2) + c / 2];
                out[c] = st_e2m1_to_f32(c & 1 ? b >> 4 : b & 15) * sc;
            }
        }
        return;
    default:
        break;
    }
    switch (s->w->dtype) {
    case ST_F32: memcpy(out, p + 4 * r * C, 4 * C); break;
    case ST_F16:
        for (uint64_t c = 0; c < C; c++) { uint16_t h; memcpy(&h, p + 2 * (r * C + c), 2); out[c] = ds4_f16_to_f32(h); }
        break;
    default:
        for (uint64_t c = 0; c < C; c++) { uint16_t h; memcpy(&h, p + 2 * (r * C + c), 2); out[c] = st_bf16_to_f32(h); }
        break;
    }
}

/* FP4 row -> MXFP4 blocks: the same E2M1 codes and E8M0 exponents.  ggml
 * stores kvalues = 2 x E2M1 and halves the scale (2^(e-128)), so
 * kvalue(code) x 2^(e-128) == E2M1(code) x 2^(e-127): the byte e is kept.
 * Only the nibble order differs: HF byte j holds columns 2j (low) and
 * 2j+1 (high); a ggml block's byte j holds columns j (low) and j+16 (high). */
static int fp4_row_to_mxfp4(const source *s, uint64_t r, uint8_t *out) {
    const uint8_t *p = s->w->data + r * (s->cols / 2);
    for (uint64_t b = 0; b < s->cols / 32; b++) {
        const uint8_t e = s->scale->dtype == ST_F8_E8M0 ? s->scale->data[r * s->sc_cols + b] : 0;
        if (s->scale->dtype != ST_F8_E8M0 || e == 255) return -1;   /* caller requantizes or fails */
        uint8_t code[32];
        for (int j = 0; j < 16; j++) {
            code[2 * j] = p[16 * b + j] & 15;
            code[2 * j + 1] = p[16 * b + j] >> 4;
        }
        uint8_t *o = out + 17 * b;
        o[0] = e;
        for (int j = 0; j < 16; j++) o[1 + j] = (uint8_t)(code[j] | code[j + 16] << 4);
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Conversion                                                                */
/* ------------------------------------------------------------------------ */

typedef struct {
    const qtensor *t;
    source src;            /* the current matrix (one expert for S_EXPERT) */
    uint64_t r0, nr;       /* rows of this chunk (within src) */
    uint64_t ncols;
    float *f;              /* [nr][ncols] scratch */
    uint8_t *out;          /* [nr] rows of the target type */
    const float *imat;     /* quantizer weights or NULL */
    const float *statw;    /* --stats: weights of the weighted error, or NULL */
    int native_mx;         /* MXFP4 from FP4 without requantizing */
    int negexp;            /* store -exp(x) (glm5-next's ssm_a from A_log) */
    /* S_KVB: the whole kv_b_proj decoded ([H*(nope+v)][kv_lora]) and the
     * cut: the K part (rows h*kv_lora + l of nope values, transposed) or
     * the V part (rows h*v + j of kv_lora values) */
    const float *kvb;
    int kvb_v;
    uint64_t nope, vd, kvl;
    /* per-thread results */
    const char *err;
    char errbuf[256];
    double se, sref, swe, swref;   /* sums of squared error / reference (plain and weighted) */
    int stats;
} work;

typedef struct { work *w; int tid, nth; } targ;

/* Row r of attn_k_b or attn_v_b from the decoded kv_b_proj: per head h
 * its rows are the qk_nope rows of K (HF [nope, kv_lora]) then the v rows
 * of V (llama.cpp's converter: view (H, nope + v, kv_lora), split, K
 * transposed), so attn_k_b's row (h, l) holds column l of K's rows and
 * attn_v_b's row (h, j) is V's row j as it is. */
static void kvb_row(const work *w, uint64_t r, float *out) {
    const uint64_t per = w->nope + w->vd;
    if (!w->kvb_v) {
        const uint64_t h = r / w->kvl, l = r % w->kvl;
        const float *k = w->kvb + h * per * w->kvl;
        for (uint64_t n = 0; n < w->nope; n++) out[n] = k[n * w->kvl + l];
    } else {
        const uint64_t h = r / w->vd, j = r % w->vd;
        memcpy(out, w->kvb + (h * per + w->nope + j) * w->kvl, w->kvl * sizeof *out);
    }
}

static void *convert_rows(void *arg) {
    targ *a = arg;
    work *w = a->w;
    const uint64_t per = (w->nr + (uint64_t)a->nth - 1) / (uint64_t)a->nth;
    const uint64_t b = per * (uint64_t)a->tid, e = b + per < w->nr ? b + per : w->nr;
    if (b >= e) return NULL;
    const uint64_t C = w->ncols, rb = ggml_row_size(w->t->type, C);
    work *res = &w[1 + a->tid];   /* per-thread results after the shared work */
    float *deq = w->stats ? malloc(C * sizeof *deq) : NULL;
    if (w->stats && !deq) { res->err = "out of memory"; return NULL; }
    for (uint64_t i = b; i < e; i++) {
        float *x = w->f + i * C;
        uint8_t *o = w->out + i * rb;
        if (w->native_mx) {
            if (fp4_row_to_mxfp4(&w->src, w->r0 + i, o)) { res->err = "FP4 scale not E8M0 or NaN (255)"; break; }
            if (!w->stats) continue;
        }
        if (w->kvb) kvb_row(w, w->r0 + i, x);
        else read_row(&w->src, w->r0 + i, x);
        /* in double, rounded once: as tests/glm_hf.py derives its file */
        if (w->negexp)
            for (uint64_t c = 0; c < C; c++) x[c] = (float)-exp((double)x[c]);
        for (uint64_t c = 0; c < C; c++)
            if (!isfinite(x[c])) {
                snprintf(res->errbuf, sizeof res->errbuf, "row %" PRIu64 " column %" PRIu64
                         " dequantizes to a non-finite value (NaN code or scale)", w->r0 + i, c);
                res->err = res->errbuf;
                goto out;
            }
        if (w->native_mx) {
            /* nothing to quantize */
        } else if (w->t->type == GGML_F32) {
            memcpy(o, x, 4 * C);
        } else if (w->t->type == GGML_F16) {
            for (uint64_t c = 0; c < C; c++) {
                if (fabsf(x[c]) > 65504.0f) {
                    snprintf(res->errbuf, sizeof res->errbuf, "value %g at row %" PRIu64
                             " is outside the F16 range", (double)x[c], w->r0 + i);
                    res->err = res->errbuf;
                    goto out;
                }
                uint16_t h = ds4_f32_to_f16(x[c]);
                memcpy(o + 2 * c, &h, 2);
            }
        } else {
            const char *qerr = NULL;
            if (!ds4_quantize(w->t->type, x, o, 1, (int64_t)C, w->imat, &qerr)) { res->err = qerr; break; }
        }
        if (w->stats) {
            ds4_dequantize_row(w->t->type, o, deq, (int64_t)C);
            for (uint64_t c = 0; c < C; c++) {
                const double d = (double)deq[c] - x[c], ww = w->statw ? w->statw[c] : 1.0;
                res->se += d * d;
                res->sref += (double)x[c] * x[c];
                res->swe += ww * d * d;
                res->swref += ww * x[c] * x[c];
            }
        }
    }
out:
    free(deq);
    return NULL;
}

typedef struct {
    double se[C_N], sref[C_N], swe[C_N], swref[C_N];
    uint64_t n[C_N];
} statsum;

static int g_threads;
static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { g_stop = sig; }

/* Runs one chunk over g_threads threads; returns an error or NULL. */
static const char *run_chunk(work *w, statsum *S) {
    const int nth = g_threads;
    pthread_t th[MAX_THREADS];
    targ args[MAX_THREADS];
    for (int i = 0; i < nth; i++) {
        w[1 + i].err = NULL;
        w[1 + i].se = w[1 + i].sref = w[1 + i].swe = w[1 + i].swref = 0;
        args[i] = (targ){w, i, nth};
    }
    int started = 0;
    for (; started < nth; started++)
        if (pthread_create(&th[started], NULL, convert_rows, &args[started])) break;
    if (started < nth) {   /* run what could not get a thread here */
        for (int i = started; i < nth; i++) convert_rows(&args[i]);
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    const char *err = NULL;
    for (int i = 0; i < nth; i++) {
        if (w[1 + i].err && !err) err = w[1 + i].err;
        const int cl = w->t->cls;
        S->se[cl] += w[1 + i].se;
        S->sref[cl] += w[1 + i].sref;
        S->swe[cl] += w[1 + i].swe;
        S->swref[cl] += w[1 + i].swref;
    }
    S->n[w->t->cls] += w->nr * w->ncols;
    return err;
}

static const char *human(double b, char *buf, size_t n) {
    if (b >= 1073741824.0) snprintf(buf, n, "%.2f GiB", b / 1073741824.0);
    else if (b >= 1048576.0) snprintf(buf, n, "%.2f MiB", b / 1048576.0);
    else snprintf(buf, n, "%.0f KiB", b / 1024.0);
    return buf;
}

/* The tokenizer.* keys: byte-level BPE ("gpt2") with pre-tokenizer `pre`
 * (DeepSeek V4: joyai-llm; GLM: glm4, src/text/tokenizer.c). */
static void write_tokenizer(gguf_writer *w, const vocab *V, const char *pre) {
    gguf_w_str(w, "tokenizer.ggml.model", "gpt2", 4);
    gguf_w_str(w, "tokenizer.ggml.pre", pre, strlen(pre));
    gguf_str *items = malloc((V->n > V->n_merges ? V->n : V->n_merges + 1) * sizeof *items);
    if (!items) die("out of memory");
    for (size_t i = 0; i < V->n; i++) items[i] = (gguf_str){V->tok[i], strlen(V->tok[i])};
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", items, V->n);
    gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_I32, V->type, V->n);
    for (size_t i = 0; i < V->n_merges; i++) items[i] = (gguf_str){V->merges[i], strlen(V->merges[i])};
    gguf_w_arr_str(w, "tokenizer.ggml.merges", items, V->n_merges);
    free(items);
    if (V->bos != UINT32_MAX) gguf_w_u32(w, "tokenizer.ggml.bos_token_id", V->bos);
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", V->eos);
    gguf_w_u32(w, "tokenizer.ggml.padding_token_id", V->pad);
    gguf_w_bool(w, "tokenizer.ggml.add_bos_token", V->add_bos);
    gguf_w_bool(w, "tokenizer.ggml.add_eos_token", V->add_eos);
    if (!strcmp(pre, "glm4")) {
        if (V->eot != UINT32_MAX) gguf_w_u32(w, "tokenizer.ggml.eot_token_id", V->eot);
        if (V->unk != UINT32_MAX) gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", V->unk);
        if (V->eom != UINT32_MAX) gguf_w_u32(w, "tokenizer.ggml.eom_token_id", V->eom);
        if (V->chat_template)
            gguf_w_str(w, "tokenizer.chat_template", V->chat_template, strlen(V->chat_template));
    }
}

/* glm-dsa's metadata: the keys and order of tests/glm_gguf.py and
 * ds4-synth --arch glm-dsa (llama.cpp's names, read by model.c); no
 * nextn_predict_layers (the NextN block is not converted). */
static void write_meta_glm(gguf_writer *w, const hcfg *c, const vocab *V, const char *recipe, const char *dir) {
    char buf[512];
    gguf_w_str(w, "general.architecture", "glm-dsa", 7);
    gguf_w_u32(w, "general.alignment", ALIGNMENT);
    snprintf(buf, sizeof buf, "GLM-DSA %s (ds4-quantize)", recipe);
    gguf_w_str(w, "general.name", buf, strlen(buf));
    const char *base = strrchr(dir, '/') && strrchr(dir, '/')[1] ? strrchr(dir, '/') + 1 : dir;
    snprintf(buf, sizeof buf, "converted by ds4-quantize --recipe %s from %s", recipe, base);
    gguf_w_str(w, "general.description", buf, strlen(buf));
#define U(k, v) gguf_w_u32(w, "glm-dsa." k, (uint32_t)(v))
#define FL(k, v) gguf_w_f32(w, "glm-dsa." k, (float)(v))
    U("context_length", c->ctx);
    U("embedding_length", c->n_embd);
    U("block_count", c->n_layer);
    U("feed_forward_length", c->n_ff_dense);
    U("attention.head_count", c->n_head);
    U("attention.head_count_kv", 1);   /* MLA absorbed = MQA */
    FL("rope.freq_base", c->rope_base);
    U("rope.dimension_count", c->n_rot);
    FL("attention.layer_norm_rms_epsilon", c->rms_eps);
    U("vocab_size", c->n_vocab);
    U("attention.q_lora_rank", c->q_lora);
    U("attention.kv_lora_rank", c->kv_lora);
    U("attention.key_length", c->kv_lora + c->n_rot);
    U("attention.value_length", c->kv_lora);
    U("attention.key_length_mla", c->nope + c->n_rot);
    U("attention.value_length_mla", c->vmla);
    U("expert_count", c->n_expert);
    U("expert_used_count", c->n_used);
    U("expert_shared_count", c->n_shared);
    U("expert_feed_forward_length", c->n_ff);
    FL("expert_weights_scale", c->expert_scale);
    gguf_w_bool(w, "glm-dsa.expert_weights_norm", c->expert_norm);
    U("expert_gating_func", 2);   /* sigmoid */
    U("leading_dense_block_count", c->n_dense);
    U("attention.indexer.head_count", c->idx_heads);
    U("attention.indexer.key_length", c->idx_dim);
    U("attention.indexer.top_k", c->idx_topk);
#undef U
#undef FL
    if (c->types_known) {
        uint8_t *b = malloc((size_t)c->n_layer);
        if (!b) die("out of memory");
        for (int64_t i = 0; i < c->n_layer; i++) b[i] = (uint8_t)(c->own[i] != 0);
        gguf_w_arr(w, "glm-dsa.attention.indexer.types", GGUF_BOOL, b, (uint64_t)c->n_layer);
        free(b);
    }
    gguf_w_str(w, "general.quantization_source", "ds4-quantize", 12);
    write_tokenizer(w, V, "glm4");
}

/* glm5-next's metadata: the keys and order of tests/glm_gguf.py (llama.cpp's
 * Glm5NextModel converter's keys, read by model.c): head_count_kv per layer
 * (0 marks KDA), rope.dimension_count 0, the indexer's LayerNorm epsilon
 * (1e-6, fixed in the model), the per-layer SwiGLU clamps from
 * swiglu_limit; attention.indexer.types only when a DSA layer shares its
 * selection; no nextn_predict_layers (the NextN block is not converted). */
static void write_meta_g5n(gguf_writer *w, const hcfg *c, const vocab *V, const char *recipe, const char *dir) {
    char buf[512];
    const size_t L = (size_t)c->n_layer;
    gguf_w_str(w, "general.architecture", "glm5-next", 9);
    gguf_w_u32(w, "general.alignment", ALIGNMENT);
    snprintf(buf, sizeof buf, "GLM5-Next %s (ds4-quantize)", recipe);
    gguf_w_str(w, "general.name", buf, strlen(buf));
    const char *base = strrchr(dir, '/') && strrchr(dir, '/')[1] ? strrchr(dir, '/') + 1 : dir;
    snprintf(buf, sizeof buf, "converted by ds4-quantize --recipe %s from %s", recipe, base);
    gguf_w_str(w, "general.description", buf, strlen(buf));
    uint32_t *hkv = malloc(L * sizeof *hkv);
    float *cl = malloc(L * sizeof *cl);
    uint8_t *own = malloc(L);
    if (!hkv || !cl || !own) die("out of memory");
    for (size_t i = 0; i < L; i++) {
        hkv[i] = c->kda[i] ? 0 : 1;   /* absorbed MLA is MQA over the cached row */
        cl[i] = (float)c->clamp;
        own[i] = (uint8_t)(c->own[i] != 0);
    }
#define U(k, v) gguf_w_u32(w, "glm5-next." k, (uint32_t)(v))
#define FL(k, v) gguf_w_f32(w, "glm5-next." k, (float)(v))
    U("context_length", c->ctx);
    U("embedding_length", c->n_embd);
    U("block_count", c->n_layer);
    U("feed_forward_length", c->n_ff_dense);
    U("attention.head_count", c->n_head);
    gguf_w_arr(w, "glm5-next.attention.head_count_kv", GGUF_U32, hkv, (uint64_t)L);
    U("rope.dimension_count", 0);
    FL("attention.layer_norm_rms_epsilon", c->rms_eps);
    FL("attention.layer_norm_epsilon", 1e-6);
    U("vocab_size", c->n_vocab);
    U("attention.q_lora_rank", c->q_lora);
    U("attention.kv_lora_rank", c->kv_lora);
    U("attention.key_length", c->kv_lora);
    U("attention.value_length", c->kv_lora);
    U("attention.key_length_mla", c->nope);
    U("attention.value_length_mla", c->vmla);
    U("kda.head_dim", c->kda_dim);
    FL("kda.gate_lower_bound", c->kda_lb);
    U("ssm.conv_kernel", c->conv);
    U("attention.indexer.head_count", c->idx_heads);
    U("attention.indexer.key_length", c->idx_dim);
    U("attention.indexer.top_k", c->idx_topk);
    U("attention.indexer.kpool", c->kpool);
    U("hyper_connection.count", c->n_hc);
    U("hyper_connection.sinkhorn_iterations", c->hc_iters);
    FL("hyper_connection.epsilon", c->hc_eps);
    U("expert_count", c->n_expert);
    U("expert_used_count", c->n_used);
    U("expert_shared_count", c->n_shared);
    U("expert_feed_forward_length", c->n_ff);
    FL("expert_weights_scale", c->expert_scale);
    gguf_w_bool(w, "glm5-next.expert_weights_norm", c->expert_norm);
    U("expert_gating_func", 2);   /* sigmoid */
    U("leading_dense_block_count", c->n_dense);
#undef U
#undef FL
    gguf_w_arr(w, "glm5-next.swiglu_clamp_exp", GGUF_F32, cl, (uint64_t)L);
    gguf_w_arr(w, "glm5-next.swiglu_clamp_shexp", GGUF_F32, cl, (uint64_t)L);
    if (c->types_known) gguf_w_arr(w, "glm5-next.attention.indexer.types", GGUF_BOOL, own, (uint64_t)L);
    free(hkv);
    free(cl);
    free(own);
    gguf_w_str(w, "general.quantization_source", "ds4-quantize", 12);
    write_tokenizer(w, V, "glm4");
}

static void write_meta(gguf_writer *w, const hcfg *c, const vocab *V, const char *recipe, const char *dir,
                       const char *imatrix_path, const ds4_imatrix *im) {
    char buf[512];
    gguf_w_str(w, "general.architecture", "deepseek4", 9);
    snprintf(buf, sizeof buf, "DeepSeek-V4 %s (ds4-quantize)", recipe);
    gguf_w_str(w, "general.name", buf, strlen(buf));
    gguf_w_u32(w, "general.alignment", ALIGNMENT);
    const char *base = strrchr(dir, '/') && strrchr(dir, '/')[1] ? strrchr(dir, '/') + 1 : dir;
    snprintf(buf, sizeof buf, "converted by ds4-quantize --recipe %s from %s", recipe, base);
    gguf_w_str(w, "general.description", buf, strlen(buf));
#define U(k, v) gguf_w_u32(w, "deepseek4." k, (uint32_t)(v))
#define FL(k, v) gguf_w_f32(w, "deepseek4." k, (float)(v))
    /* Same keys and order as ds4-synth (ARCHITECTURE.md §3). */
    U("context_length", c->ctx);
    U("block_count", c->n_layer);
    U("embedding_length", c->n_embd);
    U("vocab_size", c->n_vocab);
    U("attention.head_count", c->n_head);
    U("attention.head_count_kv", c->n_head_kv);
    U("attention.key_length", c->head_dim);
    U("attention.value_length", c->head_dim);
    U("attention.q_lora_rank", c->q_lora);
    U("attention.output_lora_rank", c->o_lora);
    U("attention.output_group_count", c->o_groups);
    U("attention.sliding_window", c->n_swa);
    U("attention.indexer.head_count", c->idx_heads);
    U("attention.indexer.key_length", c->idx_dim);
    U("attention.indexer.top_k", c->idx_topk);
    uint32_t *ra = malloc((size_t)c->n_layer * 4);
    float *ca = malloc((size_t)c->n_layer * 4);
    if (!ra || !ca) die("out of memory");
    for (int i = 0; i < c->n_layer; i++) { ra[i] = (uint32_t)c->ratios[i]; ca[i] = (float)c->clamp; }
    gguf_w_arr(w, "deepseek4.attention.compress_ratios", GGUF_U32, ra, (uint64_t)c->n_layer);
    FL("attention.compress_rope_freq_base", c->compress_base);
    FL("attention.layer_norm_rms_epsilon", c->rms_eps);
    U("rope.dimension_count", c->n_rot);
    FL("rope.freq_base", c->rope_base);
    gguf_w_str(w, "deepseek4.rope.scaling.type", "yarn", 4);
    FL("rope.scaling.factor", c->rope_factor);
    U("rope.scaling.original_context_length", c->rope_orig_ctx);
    FL("rope.scaling.yarn_beta_fast", c->beta_fast);
    FL("rope.scaling.yarn_beta_slow", c->beta_slow);
    U("expert_count", c->n_expert);
    U("expert_used_count", c->n_used);
    U("expert_shared_count", c->n_shared);
    U("expert_feed_forward_length", c->n_ff);
    FL("expert_weights_scale", c->expert_scale);
    gguf_w_bool(w, "deepseek4.expert_weights_norm", c->expert_norm);
    U("hash_layer_count", c->n_hash);
    gguf_w_arr(w, "deepseek4.swiglu_clamp_exp", GGUF_F32, ca, (uint64_t)c->n_layer);
    U("hyper_connection.count", c->n_hc);
    U("hyper_connection.sinkhorn_iterations", c->hc_iters);
    FL("hyper_connection.epsilon", c->hc_eps);
    /* the router's scoring function: other loaders (llama.cpp) require it;
     * last of the deepseek4.* keys, as ds4-synth writes it */
    U("expert_gating_func", DS4_EXPERT_GATING_SQRT_SOFTPLUS);
#undef U
#undef FL
    free(ra);
    free(ca);
    gguf_w_str(w, "general.quantization_source", "ds4-quantize", 12);
    if (imatrix_path) {
        gguf_w_str(w, "quantize.imatrix.file", imatrix_path, strlen(imatrix_path));
        gguf_w_u64(w, "quantize.imatrix.tokens", im->n_tokens);
    }
    write_tokenizer(w, V, "joyai-llm");
}

static gguf_writer *g_w;
static void fail_out(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fail_out(const char *fmt, ...) {
    if (g_w) gguf_writer_abort(g_w);   /* removes OUT.tmp */
    va_list ap;
    va_start(ap, fmt);
    fputs("ds4-quantize: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

/* One run: the options, the inputs, the output's progress. */
typedef struct {
    const char *recipe_s, *imatrix_path, *out, *dir, *statw_path;
    int q4_last, stats, q4_set, recipe;
    long threads;
    double t0;
    hcfg c;
    vocab V;
    st_checkpoint *ck;
    ds4_imatrix *im, *sw;      /* --imatrix; the --stats weights (im unless --stats-weights) */
    layout L;
    uint64_t in_bytes, done_in;
    work *w;
    float *imat, *statw, *fbuf;
    uint8_t *obuf;
    size_t fcap, ocap;
    uint64_t out_total;        /* bytes of tensor data the output gets */
    statsum S;
    int tty;
    double last;               /* the last progress line */
} qrun;

/* The command line, checked before anything is read. */
static void parse_args(qrun *q, int argc, char **argv) {
    q->q4_last = 6;
    ds4_args ar;
    ds4_args_init(&ar, "ds4-quantize", argc, argv, usage);
    while (ds4_args_next(&ar)) {
        if (ds4_args_is(&ar, NULL, "--stats")) q->stats = 1;
        else if (ds4_args_is(&ar, NULL, "--recipe")) q->recipe_s = ds4_args_value(&ar);
        else if (ds4_args_is(&ar, NULL, "--imatrix")) q->imatrix_path = ds4_args_value(&ar);
        else if (ds4_args_is(&ar, NULL, "--stats-weights")) { q->statw_path = ds4_args_value(&ar); q->stats = 1; }
        else if (ds4_args_is(&ar, "-o", "--output")) q->out = ds4_args_value(&ar);
        else if (ds4_args_is(&ar, NULL, "--q4-last")) { q->q4_last = ds4_args_int(&ar, 0, 1024); q->q4_set = 1; }
        else if (ds4_args_is(&ar, NULL, "--threads")) q->threads = ds4_args_int(&ar, 1, MAX_THREADS);
        else if (!ds4_args_positional(&ar)) ds4_args_unknown(&ar);
        else if (!q->dir) q->dir = ar.cur;
        else usage_error("unexpected argument \"%s\" (one CHECKPOINT_DIR)", ar.cur);
    }
    if (!q->recipe_s) usage_error("--recipe is required (f16, q2, q4, q2-q4 or mxfp4; for GLM also f32, q8_0)");
    if (!strcmp(q->recipe_s, "f16")) q->recipe = R_F16;
    else if (!strcmp(q->recipe_s, "q2")) q->recipe = R_Q2;
    else if (!strcmp(q->recipe_s, "q4")) q->recipe = R_Q4;
    else if (!strcmp(q->recipe_s, "q2-q4")) q->recipe = R_Q2Q4;
    else if (!strcmp(q->recipe_s, "mxfp4")) q->recipe = R_MXFP4;
    else if (!strcmp(q->recipe_s, "f32")) q->recipe = R_F32;
    else if (!strcmp(q->recipe_s, "q8_0")) q->recipe = R_Q8;
    else usage_error("--recipe \"%s\" is unknown (f16, q2, q4, q2-q4 or mxfp4; for GLM also f32, q8_0)",
                     q->recipe_s);
    if (q->q4_set && q->recipe != R_Q2Q4) usage_error("--q4-last only applies to --recipe q2-q4");
    if (!q->dir) usage_error("CHECKPOINT_DIR is required");
    if (!q->out) usage_error("-o OUT.gguf is required");
    if (!q->threads) {
        long nc = ds4_default_threads();
        q->threads = nc > MAX_THREADS ? MAX_THREADS : nc;
    }
    g_threads = (int)q->threads;
}

/* config.json, the tokenizer, the checkpoint's shards, the importance
 * matrices, and the tensor layout of the recipe. */
static void open_inputs(qrun *q) {
    char *err = NULL;
    read_config(q->dir, &q->c);
    if (!q->c.glm && (q->recipe == R_F32 || q->recipe == R_Q8))
        usage_error("--recipe %s is for GLM checkpoints (glm-dsa, glm5-next); DeepSeek V4's recipes are f16, q2, q4, "
                    "q2-q4 and mxfp4", q->recipe_s);
    if (q->c.glm && (q->imatrix_path || q->statw_path))
        usage_error("--imatrix / --stats-weights: ds4 --imatrix-out collects DeepSeek V4's experts only, "
                    "not a GLM checkpoint's");
    if (q->recipe == R_Q2Q4 && q->q4_last > q->c.n_layer)
        usage_error("--q4-last %d exceeds the %" PRId64 " layers", q->q4_last, q->c.n_layer);
    memset(&q->V, 0, sizeof q->V);
    read_tokenizer(q->dir, q->c.n_vocab, q->c.glm, &q->V);
    q->ck = st_open_dir(q->dir, &err);
    if (!q->ck) die("%s", err ? err : "cannot open the checkpoint");
    g_ck = q->ck;
    if (q->imatrix_path) {
        q->im = ds4_imatrix_load(q->imatrix_path, &err);
        if (!q->im) die("--imatrix %s", err ? err : q->imatrix_path);
        if (q->im->n_layer != (uint32_t)q->c.n_layer || q->im->n_expert != (uint32_t)q->c.n_expert ||
            q->im->n_embd != (uint32_t)q->c.n_embd || q->im->n_ff != (uint32_t)q->c.n_ff)
            die("--imatrix %s: made for %u layers x %u experts, D %u, F %u; the checkpoint has "
                "%" PRId64 " x %" PRId64 ", D %" PRId64 ", F %" PRId64, q->imatrix_path, q->im->n_layer,
                q->im->n_expert, q->im->n_embd, q->im->n_ff, q->c.n_layer, q->c.n_expert, q->c.n_embd, q->c.n_ff);
    }
    q->sw = q->im;   /* weights of the --q->stats weighted error */
    if (q->statw_path) {
        q->sw = ds4_imatrix_load(q->statw_path, &err);
        if (!q->sw) die("--stats-weights %s", err ? err : q->statw_path);
        if (q->sw->n_layer != (uint32_t)q->c.n_layer || q->sw->n_expert != (uint32_t)q->c.n_expert ||
            q->sw->n_embd != (uint32_t)q->c.n_embd || q->sw->n_ff != (uint32_t)q->c.n_ff)
            die("--stats-weights %s: its dimensions do not match the checkpoint", q->statw_path);
    }
    build_layout(&q->c, q->recipe, q->q4_last, &q->L);

}

/* Rows of a plain tensor: 3-D and 4-D ones (the conv1d weights) are
 * ne[1] x ne[2] rows of ne[0]. */
static uint64_t plain_rows(const qtensor *t) { return t->nd >= 3 ? t->ne[1] * t->ne[2] : t->ne[1]; }

/* Check every source before writing anything (and count the bytes the
 * progress line measures against). */
static void check_sources(qrun *q) {
    for (size_t i = 0; i < q->L.n; i++) {
        const qtensor *t = &q->L.t[i];
        if (t->src == S_PLAIN) {
            source s = resolve(t->hf, t->name, plain_rows(t), t->ne[0], (int)t->nd, 0);
            q->in_bytes += s.w->nbytes + (s.scale ? s.scale->nbytes : 0);
        } else if (t->src == S_KVB) {
            source s = resolve(t->hf, t->name, (uint64_t)(q->c.n_head * (q->c.nope + q->c.vmla)),
                               (uint64_t)q->c.kv_lora, 2, 0);
            q->in_bytes += s.w->nbytes + (s.scale ? s.scale->nbytes : 0);
        } else if (t->src == S_EXPERT) {
            for (uint64_t e = 0; e < t->ne[2]; e++) {
                char hn[160];
                ds4_layout_hf_name(&t->lt, (int64_t)e, hn, sizeof hn);
                source s = resolve(hn, t->name, t->ne[1], t->ne[0], 2, 1);
                q->in_bytes += s.w->nbytes + (s.scale ? s.scale->nbytes : 0);
            }
        } else {
            const st_tensor *w = st_find(q->ck, t->hf);
            if (!w) die("checkpoint: tensor \"%s\" (for %s) is in no shard", t->hf, t->name);
            if ((w->dtype != ST_I64 && w->dtype != ST_I32) || w->n_dims != 2 ||
                (uint64_t)w->shape[0] != t->ne[1] || (uint64_t)w->shape[1] != t->ne[0]) {
                char got[128];
                shape_str(w, got, sizeof got);
                die("%s: tensor \"%s\" is %s %s, expected I64 [%" PRIu64 ", %" PRIu64 "] (%s)",
                    st_shard_path(q->ck, w->shard), t->hf, st_dtype_name(w->dtype), got, t->ne[1],
                    t->ne[0], t->name);
            }
            q->in_bytes += w->nbytes;
        }
    }

}

/* The output's header (metadata and every tensor's entry) and the
 * per-run buffers. */
static void open_output(qrun *q) {
    char *err = NULL;
    g_w = gguf_writer_open(q->out, &err);
    if (!g_w) die("%s", err ? err : "cannot open the output");
    if (q->c.glm == G_NEXT) write_meta_g5n(g_w, &q->c, &q->V, q->recipe_s, q->dir);
    else if (q->c.glm) write_meta_glm(g_w, &q->c, &q->V, q->recipe_s, q->dir);
    else write_meta(g_w, &q->c, &q->V, q->recipe_s, q->dir, q->imatrix_path, q->im);
    for (size_t i = 0; i < q->L.n; i++) {
        gguf_w_tensor(g_w, q->L.t[i].name, q->L.t[i].nd, q->L.t[i].ne, q->L.t[i].type);
        q->out_total += q->L.t[i].nbytes;
    }
    gguf_writer_begin_data(g_w);

    q->w = calloc((size_t)g_threads + 1, sizeof *q->w);
    q->imat = malloc((size_t)(q->c.n_embd > q->c.n_ff ? q->c.n_embd : q->c.n_ff) * sizeof *q->imat);
    q->statw = malloc((size_t)(q->c.n_embd > q->c.n_ff ? q->c.n_embd : q->c.n_ff) * sizeof *q->statw);
    if (!q->w || !q->imat || !q->statw) fail_out("out of memory");
    memset(&q->S, 0, sizeof q->S);
    q->tty = isatty(STDERR_FILENO);
}

/* One tensor of the layout: converted (whole experts, other tensors in
 * chunks), quantized on the worker threads, written in order. */
static void write_tensor(qrun *q, size_t ti) {
    const qtensor *t = &q->L.t[ti];
    if (t->src == S_TID2EID) {
        const st_tensor *s = st_find(q->ck, t->hf);
        const uint64_t n = t->ne[0] * t->ne[1];
        int32_t *o = malloc(n * 4);
        if (!o) fail_out("out of memory");
        for (uint64_t k = 0; k < n; k++) {
            int64_t x;
            if (s->dtype == ST_I64) memcpy(&x, s->data + 8 * k, 8);
            else { int32_t y; memcpy(&y, s->data + 4 * k, 4); x = y; }
            if (x < 0 || x >= q->c.n_expert)
                fail_out("%s: %s[%" PRIu64 "][%" PRIu64 "] = %" PRId64 " is not an expert id in [0, %" PRId64 ")",
                         st_shard_path(q->ck, s->shard), t->hf, k / t->ne[0], k % t->ne[0], x, q->c.n_expert);
            o[k] = (int32_t)x;
        }
        gguf_writer_write(g_w, o, n * 4);
        free(o);
        q->done_in += s->nbytes;
        st_release(s);
        return;
    }
    const uint64_t n_mat = t->src == S_EXPERT ? t->ne[2] : 1, C = t->ne[0];
    const uint64_t rows = t->src == S_KVB ? t->ne[1] * t->ne[2] : t->src == S_PLAIN ? plain_rows(t) : t->ne[1];
    float *kvb = NULL;
    const uint64_t rb = ggml_row_size(t->type, C);
    for (uint64_t e = 0; e < n_mat && !g_stop; e++) {
        work *W = &q->w[0];
        memset(W, 0, sizeof *W);
        W->t = t;
        W->ncols = C;
        W->stats = q->stats;
        if (t->src == S_EXPERT) {
            char hn[160];
            ds4_layout_hf_name(&t->lt, (int64_t)e, hn, sizeof hn);
            W->src = resolve(hn, t->name, rows, C, 2, 1);
        } else if (t->src == S_KVB) {
            const uint64_t hr = (uint64_t)(q->c.n_head * (q->c.nope + q->c.vmla)), kl = (uint64_t)q->c.kv_lora;
            W->src = resolve(t->hf, t->name, hr, kl, 2, 0);
            kvb = malloc(hr * kl * sizeof *kvb);
            if (!kvb) fail_out("out of memory (%" PRIu64 " floats for %s)", hr * kl, t->hf);
            for (uint64_t r = 0; r < hr; r++) read_row(&W->src, r, kvb + r * kl);
            W->kvb = kvb;
            W->kvb_v = t->lt.row->id == DS4_T_ATTN_V_B;
            W->nope = (uint64_t)q->c.nope;
            W->vd = (uint64_t)q->c.vmla;
            W->kvl = kl;
        } else {
            W->src = resolve(t->hf, t->name, rows, C, (int)t->nd, 0);
        }
        W->negexp = t->negexp;
        W->native_mx = t->type == GGML_MXFP4 && W->src.fmt == F_FP4 && W->src.scale->dtype == ST_F8_E8M0;
        /* Expert matrices are converted whole (their importance is per
         * expert); other tensors in chunks of CHUNK_FLOATS. */
        uint64_t chunk = t->src == S_EXPERT ? rows : (CHUNK_FLOATS / C ? CHUNK_FLOATS / C : 1);
        if (chunk > rows) chunk = rows;
        if (chunk * C > q->fcap) {
            free(q->fbuf);
            q->fcap = chunk * C;
            q->fbuf = malloc(q->fcap * sizeof *q->fbuf);
            if (!q->fbuf) fail_out("out of memory (%" PRIu64 " floats for %s)", q->fcap, t->name);
        }
        if (chunk * rb > q->ocap) {
            free(q->obuf);
            q->ocap = chunk * rb;
            q->obuf = malloc(q->ocap);
            if (!q->obuf) fail_out("out of memory");
        }
        /* Importance: the imatrix's per-expert means, else (IQ2_XXS,
         * which requires one) the expert's column sums of squares. */
        const double *iv = NULL, *sv = NULL;
        if (t->src == S_EXPERT) {
            if (q->im) iv = t->cls == C_GU ? ds4_imatrix_gu(q->im, t->layer, (int)e) : ds4_imatrix_dn(q->im, t->layer, (int)e);
            if (q->sw) sv = t->cls == C_GU ? ds4_imatrix_gu(q->sw, t->layer, (int)e) : ds4_imatrix_dn(q->sw, t->layer, (int)e);
        }
        const int takes_imat = t->type == GGML_Q2_K || t->type == GGML_Q4_K || t->type == GGML_IQ2_XXS;
        int need_default = 0;
        if (iv && takes_imat) {
            for (uint64_t k = 0; k < C; k++) q->imat[k] = (float)iv[k];
            W->imat = q->imat;
        } else if (t->type == GGML_IQ2_XXS) {
            need_default = 1;
        }
        if (q->stats && sv) {
            for (uint64_t k = 0; k < C; k++) q->statw[k] = (float)sv[k];
            W->statw = q->statw;
        }
        for (uint64_t r0 = 0; r0 < rows && !g_stop; r0 += chunk) {
            W->r0 = r0;
            W->nr = rows - r0 < chunk ? rows - r0 : chunk;
            W->f = q->fbuf;
            W->out = q->obuf;
            if (need_default) {
                /* whole expert in this chunk: decode it first */
                for (uint64_t r = 0; r < W->nr; r++) read_row(&W->src, r, q->fbuf + r * C);
                ds4_quantize_default_imatrix(q->fbuf, (int64_t)W->nr, (int64_t)C, q->imat);
                W->imat = q->imat;
            }
            const char *cerr = run_chunk(q->w, &q->S);
            if (cerr) {
                fail_out("%s: tensor \"%s\" (for %s): %s", st_shard_path(q->ck, W->src.w->shard),
                         W->src.w->name, t->name, cerr);
            }
            if (gguf_writer_write(g_w, q->obuf, W->nr * rb)) break;
            /* drop the rows just read from the resident set (kv_b_proj:
             * read whole above, released below) */
            const uint64_t in_row = W->src.w->nbytes / rows;
            if (!kvb) st_release_range(W->src.w, r0 * in_row, W->nr * in_row);
        }
        q->done_in += W->src.w->nbytes + (W->src.scale ? W->src.scale->nbytes : 0);
        st_release(W->src.w);
        if (W->src.scale) st_release(W->src.scale);
        const double tn = ds4_now();
        if (q->tty && tn - q->last >= 0.25) {
            q->last = tn;
            const double el = tn - q->t0, rate = q->done_in / (el > 0 ? el : 1e-9);
            fprintf(stderr, "\rds4-quantize: %5.1f%% %s  %.0f MB/s  ETA %.0f s   ",
                    100.0 * q->done_in / (q->in_bytes ? q->in_bytes : 1), t->name, rate / 1e6,
                    rate > 0 ? (q->in_bytes - q->done_in) / rate : 0.0);
        }
    }
    free(kvb);
}

/* Close the output (renamed into place only now) and say what was done;
 * then free everything. */
static void finish(qrun *q) {
    char *err = NULL;
    if (q->tty) fputs("\r\033[K", stderr);
    if (g_stop) fail_out("interrupted (signal %d); %s was not written", (int)g_stop, q->out);
    int rc = gguf_writer_close(g_w, &err);
    g_w = NULL;
    if (rc) die("%s", err ? err : "write failed");
    const double dt = ds4_now() - q->t0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    char b1[64], b2[64], b3[64];
    fprintf(stderr, "ds4-quantize: wrote %s: recipe %s%s, %zu tensors, %s from %s of checkpoint "
            "in %.1f s (%.3f GB/s of input, %d threads), peak RSS %s\n",
            q->out, q->recipe_s, q->im ? " + imatrix" : "", q->L.n, human((double)q->out_total, b1, sizeof b1),
            human((double)q->in_bytes, b2, sizeof b2), dt, q->in_bytes / 1e9 / (dt > 0 ? dt : 1e-9), g_threads,
            human(ru.ru_maxrss * 1024.0, b3, sizeof b3));
    if (q->stats) {
        printf("%-28s %14s %12s %12s%s\n", "class", "elements", "RMSE", "rel.RMSE",
               q->sw ? "  imatrix-weighted rel.RMSE" : "");
        for (int k = 0; k < C_N; k++) {
            if (!q->S.n[k]) continue;
            printf("%-28s %14" PRIu64 " %12.4g %12.4g", CLASS_NAME[k], q->S.n[k], sqrt(q->S.se[k] / q->S.n[k]),
                   q->S.sref[k] > 0 ? sqrt(q->S.se[k] / q->S.sref[k]) : 0.0);
            if (q->sw && (k == C_GU || k == C_DOWN))
                printf("  %12.4g", q->S.swref[k] > 0 ? sqrt(q->S.swe[k] / q->S.swref[k]) : 0.0);
            putchar('\n');
        }
    }
    free(q->fbuf);
    free(q->obuf);
    free(q->w);
    free(q->imat);
    free(q->statw);
    if (q->sw != q->im) ds4_imatrix_free(q->sw);
    free(q->L.t);
    free(q->c.ratios);
    free(q->c.own);
    free(q->c.kda);
    free(q->V.chat_template);
    ds4_imatrix_free(q->im);
    st_close(q->ck);
    for (size_t i = 0; i < q->V.n; i++) free(q->V.tok[i]);
    for (size_t i = 0; i < q->V.n_merges; i++) free(q->V.merges[i]);
    free(q->V.tok);
    free(q->V.type);
    free(q->V.merges);
}

int main(int argc, char **argv) {
    static qrun Q;   /* zeroed; one per process */
    qrun *q = &Q;
    parse_args(q, argc, argv);
    q->t0 = ds4_now();
    open_inputs(q);
    check_sources(q);

    ds4_catch_signals(on_signal, NULL, 1);
    open_output(q);
    for (size_t ti = 0; ti < q->L.n && !g_stop; ti++) write_tensor(q, ti);
    finish(q);
    return 0;
}
