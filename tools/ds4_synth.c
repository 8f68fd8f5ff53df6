/*
 * ds4_synth.c -- ds4-synth: writes random-weight GGUF files with the exact
 * DeepSeek V4 Flash layout (docs/GGUF.md §3, §4, §5): same tensor
 * names, order, dims, types, metadata keys and alignment as the real model,
 * at the tiny test shape, the real per-layer shape with few layers, or the
 * full 43-layer model; with --arch glm-dsa the same for GLM 5.2 / 5.3
 * (llama.cpp's names and metadata keys, those of tests/glm_gguf.py: the
 * tiny test shape or the real GLM 5.2 per-layer shape), and with --arch
 * glm5-next for GLM 5.3 Flash (tiny, or the real flash53 shape).
 *
 * Owns: the presets, `--set` overrides and their consistency checks, the
 * weight scale of every tensor family, the f32 recipe (the f16 one
 * widened), glm-dsa's and glm5-next's layer walks (dense / IndexShare /
 * KDA kinds), recipes
 * (tests/glm_gguf.py's storage) and metadata, the deterministic generators for every storage type, and the
 * streaming write (through gguf_writer, bounded buffers, progress).
 * Does not own: the GGUF container (gguf.c), the tensor layout and the
 * recipes (names, order, dims, types, checkpoint names: gguf/layout.c) or
 * the loader's validation (model.c) -- the files it writes must pass the
 * latter unchanged.
 *
 * Determinism: every tensor has a key = hash(seed, tensor name); the
 * tensor is cut into fixed "units" (one quant block, 256 float elements,
 * or one tid2eid row) and unit u draws from a splitmix64 stream seeded by
 * hash(key, u).  The bytes therefore depend only on (seed, name, shape,
 * type), never on buffer sizes or write order.
 */
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "ds4.h"
#include "common/args.h"
#include "common/signals.h"
#include "gguf/gguf.h"
#include "gguf/layout.h"
#include "gguf/safetensors.h"
#include "gguf/model.h"
#include "kernels/quant.h"

#define CHUNK_BYTES (8u << 20)   /* one generation buffer: (threads + 2) of them in flight */
#define MAX_THREADS 64
#define ALIGNMENT 32

/* The limits of every integer key are the engine's table (gguf/model.h,
 * ds4_model_limits): a file outside them would be refused by the loader,
 * and they keep every derived product far from overflow. */

#define die(...) ds4_die("ds4-synth", __VA_ARGS__)

static void usage(FILE *o) {
    fputs(
"usage: ds4-synth [--arch deepseek4|glm-dsa|glm5-next] --preset P --recipe R -o OUT.gguf\n"
"                 [--vocab VOCAB.gguf] [--layers N] [--seed S] [--mtp]\n"
"                 [--set key=value ...] [--threads N] [--dry-run [--list]] [--hf-out DIR]\n"
"       ds4-synth --limits | --help | --version\n"
"\n"
"Writes a random-weight GGUF with the exact DeepSeek V4 Flash layout (tensor\n"
"names, order, dims, types, metadata keys, 32-byte alignment).  Weights are\n"
"random but well scaled, so the forward pass is finite and non-degenerate.\n"
"The file is streamed to OUT.tmp in bounded chunks and renamed to OUT only\n"
"when complete; nothing is left behind on an error or an interrupt (SIGINT,\n"
"SIGTERM, SIGHUP).\n"
"\n"
"  --arch A        deepseek4 (default) or glm-dsa (GLM 5.2 / 5.3, llama.cpp's\n"
"                  tensor names and metadata keys; presets tiny and glm52,\n"
"                  recipes f32, f16 and q8_0; no --mtp, --hf-out or --set),\n"
"                  or glm5-next (GLM 5.3 Flash: the same, presets tiny and\n"
"                  flash53).\n"
"  --preset P      deepseek4:\n"
"                  tiny   = the golden tiny-a shape (n_embd 256, 6 layers,\n"
"                           8 heads x 256, 8 experts x 256, context 4096)\n"
"                  medium = the real Flash per-layer shape (n_embd 4096,\n"
"                           64 heads x 512, 256 experts x 2048), 4 layers\n"
"                  flash  = the real Flash model, 43 layers\n"
"                  glm-dsa:\n"
"                  tiny   = the shape of tests/glm_gguf.py (n_embd 64, 4\n"
"                           layers, 1 dense, 4 heads, 16 indexer heads x 64,\n"
"                           top-k 32, 8 experts top-2)\n"
"                  glm52  = the real GLM 5.2 model (n_embd 6144, 64 heads,\n"
"                           256 experts x 2048 top-8, 3 dense layers,\n"
"                           indexer 32 x 128 top-2048), 78 layers\n"
"                  glm5-next:\n"
"                  tiny    = the shape of tests/glm_gguf.py (n_embd 64, 6\n"
"                            layers: KDA, KDA, MLA, ..., 1 dense, 4 heads,\n"
"                            KDA head 16, k-pool 4, top-k 32, 8 experts)\n"
"                  flash53 = the real GLM 5.3 Flash model (n_embd 4096, 64\n"
"                            heads, KDA head 128, MLA every 4th layer, 288\n"
"                            experts x 2048 top-8, 3 dense), 45 layers\n"
"  --recipe R      f16 = every matrix F16;\n"
"                  f32 = the f16 recipe's model (same --seed: the same\n"
"                        values) with every F16 tensor stored as F32, for\n"
"                        engines whose exact mode needs F32 weights\n"
"                        (llama.cpp: bench/llamacpp.sh);\n"
"                  q2  = routed gate/up IQ2_XXS, routed down Q2_K,\n"
"                        attention projections, shared expert and output Q8_0;\n"
"                  q4  = as q2 with every routed expert Q4_K.\n"
"                  glm-dsa: f32, f16 (every matrix F16) or q8_0 (every\n"
"                  matrix Q8_0 where its rows are whole 32-blocks, else\n"
"                  F32); 1-D tensors F32; the storage of tests/glm_gguf.py.\n"
"                  In all other recipes the token embedding, HC, compressor,\n"
"                  indexer and router matrices are F16, 1-D tensors F32 and\n"
"                  ffn_gate_tid2eid I32 (docs/GGUF.md section 5).\n"
"  --vocab FILE    GGUF whose tokenizer.* keys are copied; vocab_size is the\n"
"                  number of its tokens.  Default: the repository's own\n"
"                  vocab/deepseek-v4-vocab.gguf (the real DeepSeek V4\n"
"                  vocabulary), looked for next to the ds4-synth binary,\n"
"                  in PREFIX/share/ds4/vocab after `make install`, then in\n"
"                  the current directory.\n"
"  -o, --output F  output file (required unless --dry-run or --hf-out).\n"
"  --hf-out DIR    also (or, without -o, only) write the same random model as a\n"
"                  Hugging Face checkpoint in DeepSeek's official layout and\n"
"                  dtypes: config.json, model-*.safetensors + index (FP8 E4M3\n"
"                  with 128x128 E8M0 block scales, FP4 routed experts with\n"
"                  per-32 E8M0 scales, BF16, F32, I64), tokenizer.json and\n"
"                  tokenizer_config.json made from --vocab.  The weights are the\n"
"                  f16 recipe's (same --seed) rounded to those formats.  Input\n"
"                  for ds4-quantize (docs/CHECKPOINT.md).\n"
"  --layers N      block_count (default: tiny 6, medium 4, flash 43; glm-dsa\n"
"                  tiny 4, glm52 78; glm5-next tiny 6, flash53 45).  The\n"
"                  compression ratios follow the Flash rule (layers 0,1: 0;\n"
"                  then even layers 4, odd layers 128) and hash_layer_count\n"
"                  is min(3, N), unless set explicitly with --set.\n"
"  --mtp           also write a random MTP block (mtp.0.*: e_proj, h_proj,\n"
"                  enorm, hnorm, norm, hc_head_*, one window-only layer), the\n"
"                  layout of docs/MTP.md, for the engine's MTP drafts.\n"
"  --seed S        64-bit seed (default 1).  Same seed and options give a\n"
"                  byte-identical file (whatever --threads is).\n"
"  --threads N     generator threads (default: $DS4_THREADS or the CPUs it\n"
"                  may use, at most 8); the calling thread writes.\n"
"                  Memory: (N + 2) x 8 MiB buffers.\n"
"  --set K=V       override a deepseek4.* key (the prefix is optional),\n"
"                  applied after the preset and --layers, before the layout\n"
"                  is derived; repeatable.  Integer keys: block_count,\n"
"                  context_length, embedding_length, attention.head_count,\n"
"                  attention.head_count_kv, attention.key_length,\n"
"                  attention.value_length, attention.q_lora_rank,\n"
"                  attention.output_lora_rank, attention.output_group_count,\n"
"                  attention.sliding_window, attention.indexer.head_count,\n"
"                  attention.indexer.key_length, attention.indexer.top_k,\n"
"                  rope.dimension_count, rope.scaling.original_context_length,\n"
"                  expert_count, expert_used_count, expert_shared_count,\n"
"                  expert_feed_forward_length, hash_layer_count,\n"
"                  hyper_connection.count, hyper_connection.sinkhorn_iterations.\n"
"                  Float keys: rope.freq_base, attention.compress_rope_freq_base,\n"
"                  attention.layer_norm_rms_epsilon, rope.scaling.factor,\n"
"                  rope.scaling.yarn_beta_fast, rope.scaling.yarn_beta_slow,\n"
"                  expert_weights_scale, hyper_connection.epsilon.\n"
"                  Bool: expert_weights_norm (true/false).  Lists (comma\n"
"                  separated, >= block_count entries): attention.compress_ratios\n"
"                  (ratio-4 layers get the overlapping compressor + indexer),\n"
"                  swiglu_clamp_exp (also a single value for every layer).\n"
"                  vocab_size comes from --vocab and cannot be set.\n",
        o);
    fputs(
"  --dry-run       print the tensor summary, the file size and the bytes read\n"
"                  per decoded token; write nothing.\n"
"  --list          with --dry-run: also list every tensor.\n"
"  --limits        print the range the engine accepts for every integer\n"
"                  deepseek4.* key (tab-separated: key, min, max, reason)\n"
"                  and exit; --set values outside it are refused.\n"
"  -h, --help      this text.\n"
"  --version       print the version and exit.\n"
"Values follow the option or are attached with = (--seed=7).\n"
"\n"
"Weights: projections have RMS ~1/sqrt(n_in) (unit-RMS outputs), RMSNorm\n"
"weights ~1, a quarter of the routed experts have 4x larger gate/up weights\n"
"(so the SwiGLU clamp is reached); quantized blocks are drawn directly in\n"
"their format with scales giving the same RMS.  Details: tools/ds4_synth.c.\n"
"\n"
"Progress (MB written, MB/s) goes to stderr when it is a terminal; a summary\n"
"line is always printed.  Exit status: 0 ok, 1 error or interrupt, 2 bad\n"
"usage or inconsistent shape.\n",
        o);
}

#define usage_error(...) ds4_args_fail("ds4-synth", __VA_ARGS__)

/* ------------------------------------------------------------------------ */
/* Configuration: presets and --set                                          */
/* ------------------------------------------------------------------------ */

typedef struct {
    int64_t ctx, n_layer, n_embd, n_head, n_head_kv, key_len, val_len;
    int64_t q_lora, o_lora, o_groups, n_swa, idx_heads, idx_dim, idx_topk;
    int64_t n_rot, rope_orig_ctx, n_expert, n_used, n_shared, n_ff, n_hash;
    int64_t n_hc, hc_iters;
    double compress_base, rms_eps, rope_base, rope_factor, beta_fast, beta_slow;
    double expert_scale, hc_eps;
    int expert_norm;
    /* Lists; n == 0 means "derive from block_count". */
    int64_t *ratios; int n_ratios;
    double *clamp; int n_clamp;
    int hash_set;
    int64_t n_vocab;
    /* --arch glm-dsa (glm != 0): its own shape; n_layer, n_embd, n_head,
     * q_lora, n_rot, idx_*, n_expert, n_used, n_shared, n_ff (one
     * expert's), rms_eps, rope_base, expert_scale, ctx are shared with
     * the fields above */
    int glm;                 /* 1 glm-dsa, 2 glm5-next */
    int64_t kv_lora, qk_nope, v_head, n_ff_dense, n_dense, idx_freq, idx_offset;
    /* --arch glm5-next (glm == 2): KDA head dim, conv kernel, k-pool, MLA
     * layers where il % dsa_every == dsa_every - 1; qk_nope is the MLA
     * head's q.k width (no RoPE: n_rot 0) */
    int64_t kda_dim, conv, kpool, dsa_every;
    double kda_lb, ln_eps, clamp10;
} config;

enum { K_INT, K_FLOAT, K_BOOL, K_RATIOS, K_CLAMP, K_VOCAB };

typedef struct { const char *key; int kind; size_t off; } keydef;

#define KI(k, f) {k, K_INT, offsetof(config, f)}
#define KF(k, f) {k, K_FLOAT, offsetof(config, f)}
static const keydef KEYS[] = {
    KI("context_length", ctx),
    KI("block_count", n_layer),
    KI("embedding_length", n_embd),
    {"vocab_size", K_VOCAB, 0},
    KI("attention.head_count", n_head),
    KI("attention.head_count_kv", n_head_kv),
    KI("attention.key_length", key_len),
    KI("attention.value_length", val_len),
    KI("attention.q_lora_rank", q_lora),
    KI("attention.output_lora_rank", o_lora),
    KI("attention.output_group_count", o_groups),
    KI("attention.sliding_window", n_swa),
    KI("attention.indexer.head_count", idx_heads),
    KI("attention.indexer.key_length", idx_dim),
    KI("attention.indexer.top_k", idx_topk),
    {"attention.compress_ratios", K_RATIOS, 0},
    KF("attention.compress_rope_freq_base", compress_base),
    KF("attention.layer_norm_rms_epsilon", rms_eps),
    KI("rope.dimension_count", n_rot),
    KF("rope.freq_base", rope_base),
    KF("rope.scaling.factor", rope_factor),
    KI("rope.scaling.original_context_length", rope_orig_ctx),
    KF("rope.scaling.yarn_beta_fast", beta_fast),
    KF("rope.scaling.yarn_beta_slow", beta_slow),
    KI("expert_count", n_expert),
    KI("expert_used_count", n_used),
    KI("expert_shared_count", n_shared),
    KI("expert_feed_forward_length", n_ff),
    KF("expert_weights_scale", expert_scale),
    {"expert_weights_norm", K_BOOL, offsetof(config, expert_norm)},
    KI("hash_layer_count", n_hash),
    {"swiglu_clamp_exp", K_CLAMP, 0},
    KI("hyper_connection.count", n_hc),
    KI("hyper_connection.sinkhorn_iterations", hc_iters),
    KF("hyper_connection.epsilon", hc_eps),
};
#define N_KEYS (sizeof KEYS / sizeof KEYS[0])

/* The real model's fixed hyper-parameters (docs/GGUF.md §3, Flash column). */
static void fixed_hparams(config *c) {
    c->ctx = 1048576;
    c->n_head_kv = 1;
    c->n_rot = 64;
    c->compress_base = 160000.0;
    c->rms_eps = 1e-6;
    c->rope_base = 10000.0;
    c->rope_factor = 16.0;
    c->rope_orig_ctx = 65536;
    c->beta_fast = 32.0;
    c->beta_slow = 1.0;
    c->expert_scale = 1.5;
    c->expert_norm = 1;
    c->n_hc = 4;
    c->hc_iters = 20;
    c->hc_eps = 1e-6;
}

static int set_preset(config *c, const char *p) {
    fixed_hparams(c);
    if (!strcmp(p, "tiny")) {
        /* ../shared/golden/tiny-a-f16/manifest.json "metadata" */
        c->ctx = 4096;
        c->n_layer = 6; c->n_embd = 256; c->n_head = 8; c->key_len = c->val_len = 256;
        c->q_lora = 128; c->o_lora = 128; c->o_groups = 4; c->n_swa = 32;
        c->idx_heads = 4; c->idx_dim = 128; c->idx_topk = 8;
        c->n_expert = 8; c->n_used = 3; c->n_shared = 1; c->n_ff = 256;
        return 0;
    }
    if (!strcmp(p, "medium") || !strcmp(p, "flash")) {
        c->n_layer = !strcmp(p, "flash") ? 43 : 4;
        c->n_embd = 4096; c->n_head = 64; c->key_len = c->val_len = 512;
        c->q_lora = 1024; c->o_lora = 1024; c->o_groups = 8; c->n_swa = 128;
        c->idx_heads = 64; c->idx_dim = 128; c->idx_topk = 512;
        c->n_expert = 256; c->n_used = 6; c->n_shared = 1; c->n_ff = 2048;
        return 0;
    }
    return -1;
}

/* glm-dsa presets: "tiny" is tests/glm_gguf.py's GLM_DSA table, "glm52"
 * the GLM 5.2 config (FAMILY.md §3.1). */
static int set_glm_preset(config *c, const char *p) {
    c->glm = 1;
    c->rms_eps = 1e-5; c->rope_base = 8e6; c->expert_scale = 2.5; c->expert_norm = 1;
    c->ctx = 1048576; c->n_head_kv = 1; c->n_shared = 1;
    c->idx_freq = 4; c->idx_offset = 3;
    if (!strcmp(p, "tiny")) {
        c->n_embd = 64; c->n_layer = 4; c->n_dense = 1; c->n_head = 4;
        c->q_lora = 32; c->kv_lora = 32; c->qk_nope = 16; c->n_rot = 16; c->v_head = 16;
        c->idx_heads = 16; c->idx_dim = 64; c->idx_topk = 32;
        c->n_ff_dense = 96; c->n_expert = 8; c->n_used = 2; c->n_ff = 32;
        return 0;
    }
    if (!strcmp(p, "glm52")) {
        c->n_embd = 6144; c->n_layer = 78; c->n_dense = 3; c->n_head = 64;
        c->q_lora = 2048; c->kv_lora = 512; c->qk_nope = 192; c->n_rot = 64; c->v_head = 256;
        c->idx_heads = 32; c->idx_dim = 128; c->idx_topk = 2048;
        c->n_ff_dense = 12288; c->n_expert = 256; c->n_used = 8; c->n_ff = 2048;
        return 0;
    }
    return -1;
}

/* glm5-next presets: "tiny" is tests/glm_gguf.py's GLM5_NEXT table,
 * "flash53" the GLM 5.3 Flash config (FAMILY.md §2.1). */
static int set_g5n_preset(config *c, const char *p) {
    c->glm = 2;
    c->rms_eps = 1e-5; c->ln_eps = 1e-6; c->expert_scale = 2.5; c->expert_norm = 1;
    c->ctx = 1048576; c->n_head_kv = 1; c->n_shared = 1; c->n_rot = 0;
    c->n_hc = 4; c->hc_iters = 20; c->hc_eps = 1e-6; c->kda_lb = -5.0; c->clamp10 = 10.0;
    c->conv = 4; c->kpool = 4;
    if (!strcmp(p, "tiny")) {
        c->n_embd = 64; c->n_layer = 6; c->n_dense = 1; c->n_head = 4; c->dsa_every = 3; c->kda_dim = 16;
        c->q_lora = 32; c->kv_lora = 32; c->qk_nope = 16; c->v_head = 16;
        c->idx_heads = 16; c->idx_dim = 32; c->idx_topk = 32;
        c->n_ff_dense = 96; c->n_expert = 8; c->n_used = 2; c->n_ff = 32;
        return 0;
    }
    if (!strcmp(p, "flash53")) {
        c->n_embd = 4096; c->n_layer = 45; c->n_dense = 3; c->n_head = 64; c->dsa_every = 4; c->kda_dim = 128;
        c->q_lora = 1536; c->kv_lora = 512; c->qk_nope = 256; c->v_head = 256;
        c->idx_heads = 32; c->idx_dim = 128; c->idx_topk = 2048;
        c->n_ff_dense = 12288; c->n_expert = 288; c->n_used = 8; c->n_ff = 2048;
        return 0;
    }
    return -1;
}

static int g5n_mla(const config *c, int64_t il) { return il % c->dsa_every == c->dsa_every - 1; }

/* IndexShare (GLM 5.2 / 5.3): layer il has its own indexer iff
 * max(il - offset + 1, 0) % freq == 0 (tests/glm_gguf.py indexer_full). */
static int glm_full(const config *c, int64_t il) {
    int64_t x = il - c->idx_offset + 1;
    return (x > 0 ? x : 0) % c->idx_freq == 0;
}

/* --set values and list items, through the shared parsers (the caller
 * words the message: it knows the key). */
static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    return ds4_parse_i64(s, lo, hi, out, NULL, 0);
}

static int parse_f64(const char *s, double *out) {
    return ds4_parse_double(s, -DBL_MAX, DBL_MAX, out, NULL, 0);
}

/* Comma-separated list; returns the count or -1. */
static int parse_list(const char *s, int is_float, void **out) {
    int n = 1;
    for (const char *p = s; *p; p++) n += *p == ',';
    if (n > DS4_MAX_LAYER + 1) return -1;
    void *arr = calloc((size_t)n, 8);
    char *dup = strdup(s);
    if (!arr || !dup) die("out of memory");
    int i = 0;
    char *save = NULL;
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save), i++) {
        int bad = is_float ? parse_f64(tok, (double *)arr + i)
                           : parse_i64(tok, 0, DS4_MAX_RATIO, (int64_t *)arr + i);
        if (bad) { free(arr); free(dup); return -1; }
    }
    free(dup);
    if (i != n) { free(arr); return -1; }   /* empty element */
    *out = arr;
    return n;
}

static void apply_set(config *c, const char *kv) {
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv) usage_error("--set expects key=value, got \"%s\"", kv);
    size_t kl = (size_t)(eq - kv);
    const char *key = kv;
    if (kl > 10 && !strncmp(key, "deepseek4.", 10)) { key += 10; kl -= 10; }
    const char *val = eq + 1;
    const keydef *d = NULL;
    for (size_t i = 0; i < N_KEYS; i++)
        if (strlen(KEYS[i].key) == kl && !strncmp(KEYS[i].key, key, kl)) d = &KEYS[i];
    if (!d)
        usage_error("--set: unknown key \"%.*s\" (the overridable deepseek4.* keys are listed "
                    "in --help)", (int)(eq - kv), kv);
    switch (d->kind) {
    case K_VOCAB:
        usage_error("--set: vocab_size is the token count of the --vocab file and cannot be set");
    case K_INT: {
        int64_t v;
        if (parse_i64(val, 0, UINT32_MAX, &v))
            usage_error("--set %s: \"%s\" is not an integer in [0, %u]", d->key, val, UINT32_MAX);
        *(int64_t *)((char *)c + d->off) = v;
        if (!strcmp(d->key, "hash_layer_count")) c->hash_set = 1;
        break;
    }
    case K_FLOAT: {
        double v;
        if (parse_f64(val, &v)) usage_error("--set %s: \"%s\" is not a finite number", d->key, val);
        *(double *)((char *)c + d->off) = v;
        break;
    }
    case K_BOOL:
        if (!strcmp(val, "true") || !strcmp(val, "1")) c->expert_norm = 1;
        else if (!strcmp(val, "false") || !strcmp(val, "0")) c->expert_norm = 0;
        else usage_error("--set %s: \"%s\" is not true/false", d->key, val);
        break;
    case K_RATIOS: {
        void *a;
        int n = parse_list(val, 0, &a);
        if (n < 0)
            usage_error("--set %s: \"%s\" is not a comma-separated list of integers in [0, %d]",
                        d->key, val, DS4_MAX_RATIO);
        free(c->ratios);
        c->ratios = a;
        c->n_ratios = n;
        break;
    }
    case K_CLAMP: {
        void *a;
        int n = parse_list(val, 1, &a);
        if (n < 0) usage_error("--set %s: \"%s\" is not a comma-separated list of numbers", d->key, val);
        free(c->clamp);
        c->clamp = a;
        c->n_clamp = n;
        break;
    }
    }
}

/* Fills the derived lists and checks everything the loader (model.c), the
 * reference (ds4_ref.py) and the storage formats require.  Every problem
 * is reported, then the program exits. */
static void finalize_config(config *c, int quantized, const char *recipe) {
    int np = 0;
#define PROB(...) do { fprintf(stderr, "ds4-synth: " __VA_ARGS__); fputc('\n', stderr); np++; } while (0)
    /* every integer key against the engine's limits table */
    for (size_t i = 0; i < N_KEYS; i++) {
        if (KEYS[i].kind != K_INT) continue;
        const ds4_model_limit *lim = ds4_model_limit_find(KEYS[i].key);
        if (!lim) die("internal: no limit for %s", KEYS[i].key);
        int64_t v = *(const int64_t *)((const char *)c + KEYS[i].off);
        if (!strcmp(KEYS[i].key, "hash_layer_count") && !c->hash_set) continue;   /* derived below */
        if (v < lim->min || v > lim->max)
            PROB("%s = %" PRId64 " is out of range [%" PRId64 ", %" PRId64 "] (limit: %s)", KEYS[i].key, v,
                 lim->min, lim->max, lim->why);
    }
    {
        const ds4_model_limit *lim = ds4_model_limit_find("vocab_size");
        if (c->n_vocab < lim->min || c->n_vocab > lim->max)
            PROB("vocab_size = %" PRId64 " (tokens of --vocab) is out of range [%" PRId64 ", %" PRId64 "]",
                 c->n_vocab, lim->min, lim->max);
    }
    if (np) exit(2);   /* the checks below assume sane ranges */

    if (!c->hash_set) c->n_hash = c->n_layer < 3 ? c->n_layer : 3;
    if (!c->n_ratios) {
        c->n_ratios = (int)c->n_layer;
        c->ratios = calloc((size_t)c->n_layer, sizeof *c->ratios);
        if (!c->ratios) die("out of memory");
        /* ds4's rule: two dense layers, then alternating CSA (4) / HCA (128). */
        for (int il = 0; il < c->n_layer; il++) c->ratios[il] = il < 2 ? 0 : il % 2 ? 128 : 4;
    }
    if (!c->n_clamp) {
        c->n_clamp = (int)c->n_layer;
        c->clamp = calloc((size_t)c->n_layer, sizeof *c->clamp);
        if (!c->clamp) die("out of memory");
        for (int il = 0; il < c->n_layer; il++) c->clamp[il] = 10.0;
    } else if (c->n_clamp == 1 && c->n_layer > 1) {
        double v = c->clamp[0];
        free(c->clamp);
        c->clamp = malloc((size_t)c->n_layer * sizeof *c->clamp);
        if (!c->clamp) die("out of memory");
        for (int il = 0; il < c->n_layer; il++) c->clamp[il] = v;
        c->n_clamp = (int)c->n_layer;
    }

    if (c->val_len != c->key_len)
        PROB("attention.value_length = %" PRId64 " must equal key_length = %" PRId64 " (K = V)",
             c->val_len, c->key_len);
    if (c->n_rot % 2 || c->n_rot > c->key_len)
        PROB("rope.dimension_count = %" PRId64 " must be even and <= key_length = %" PRId64,
             c->n_rot, c->key_len);
    if (c->n_head % c->o_groups)
        PROB("attention.head_count = %" PRId64 " is not a multiple of output_group_count = %" PRId64,
             c->n_head, c->o_groups);
    if (c->n_used > c->n_expert)
        PROB("expert_used_count = %" PRId64 " exceeds expert_count = %" PRId64, c->n_used, c->n_expert);
    if (c->n_hash > c->n_layer)
        PROB("hash_layer_count = %" PRId64 " exceeds block_count = %" PRId64, c->n_hash, c->n_layer);
    if (c->n_ratios < c->n_layer)
        PROB("attention.compress_ratios has %d entries, fewer than block_count = %" PRId64,
             c->n_ratios, c->n_layer);
    if (c->n_clamp < c->n_layer)
        PROB("swiglu_clamp_exp has %d entries, fewer than block_count = %" PRId64, c->n_clamp, c->n_layer);
    int has_idx = 0;
    for (int il = 0; il < c->n_ratios; il++) {
        if (c->ratios[il] == 1)
            PROB("attention.compress_ratios[%d] = 1 is invalid (must be 0 or >= 2)", il);
        if (il < c->n_layer && c->ratios[il] == 4) has_idx = 1;
    }
    for (int il = 0; il < c->n_clamp; il++)
        if (c->clamp[il] < 0) PROB("swiglu_clamp_exp[%d] = %g is negative", il, c->clamp[il]);
    if (has_idx) {
        if (c->idx_dim & (c->idx_dim - 1))
            PROB("attention.indexer.key_length = %" PRId64 " is not a power of two (Hadamard rotation)",
                 c->idx_dim);
        if (c->n_rot > c->idx_dim)
            PROB("rope.dimension_count = %" PRId64 " exceeds attention.indexer.key_length = %" PRId64
                 " (the indexer ropes the tail of each head)", c->n_rot, c->idx_dim);
    }
    if (!(c->rms_eps > 0 && c->rms_eps < 1)) PROB("attention.layer_norm_rms_epsilon = %g must be in (0, 1)", c->rms_eps);
    if (!(c->hc_eps > 0 && c->hc_eps < 1)) PROB("hyper_connection.epsilon = %g must be in (0, 1)", c->hc_eps);
    if (!(c->rope_base > 0)) PROB("rope.freq_base = %g must be positive", c->rope_base);
    if (!(c->compress_base > 0)) PROB("attention.compress_rope_freq_base = %g must be positive", c->compress_base);
    if (!(c->rope_factor > 0)) PROB("rope.scaling.factor = %g must be positive", c->rope_factor);

    /* Block alignment of the quantized recipes (docs/GGUF.md §4.2):
     * expert rows (D for gate/up, F for down) are whole 256-blocks, every
     * Q8_0 row a whole number of 32-blocks. */
    if (quantized) {
        const int64_t gdim = c->o_groups ? c->n_head * c->key_len / c->o_groups : 0;
        struct { const char *what; int64_t n, blk; } al[] = {
            {"embedding_length (routed gate/up rows, Q8_0 rows)", c->n_embd, 256},
            {"expert_feed_forward_length (routed down rows)", c->n_ff, 256},
            {"attention.q_lora_rank (attn_q_b rows)", c->q_lora, 32},
            {"head_count*key_length/output_group_count (attn_output_a rows)", gdim, 32},
            {"output_group_count*output_lora_rank (attn_output_b rows)", c->o_groups * c->o_lora, 32},
            {"expert_feed_forward_length*expert_shared_count (ffn_down_shexp rows)", c->n_ff * c->n_shared, 32},
        };
        for (size_t i = 0; i < sizeof al / sizeof al[0]; i++)
            if (al[i].n % al[i].blk)
                PROB("recipe %s: %s = %" PRId64 " is not a multiple of %" PRId64 " (quantization block)",
                     recipe, al[i].what, al[i].n, al[i].blk);
    }
    if (np) exit(2);
#undef PROB
}

/* glm-dsa: the few checks a preset cut with --layers can still fail. */
static void finalize_glm(config *c) {
    const ds4_model_limit *lim = ds4_model_limit_find("vocab_size");
    if (c->n_vocab < lim->min || c->n_vocab > lim->max)
        die("vocab_size = %" PRId64 " (tokens of --vocab) is out of range [%" PRId64 ", %" PRId64 "]",
            c->n_vocab, lim->min, lim->max);
    if (c->n_dense > c->n_layer) c->n_dense = c->n_layer;
    if (c->n_used > c->n_expert) die("expert_used_count exceeds expert_count");
}

/* ------------------------------------------------------------------------ */
/* Layout                                                                    */
/* ------------------------------------------------------------------------ */

enum { D_NORMAL, D_UNIFORM, D_TID2EID };
/* What a decoded token reads of a tensor (mirrors ds4_weights_active_bytes). */
enum { A_ALL, A_ROW, A_EXPERTS };

typedef struct {
    char name[64];
    uint32_t nd;
    uint64_t ne[3];
    uint32_t type;
    int dist;
    float a, b;          /* D_NORMAL: mean, std; D_UNIFORM: [a, b) */
    int boost;           /* experts: a quarter of them get 4x the std */
    int round16;         /* F32 holding F16 values (recipe f32): each drawn
                          * value rounded to F16 first, so the file is the
                          * f16 recipe's model value for value */
    int layer;
    int active;
    const ds4_layout_tensor *lt;   /* its tensor of the layout (names it in --hf-out) */
    uint32_t n_choices;  /* tid2eid: expert_count */
    uint64_t nbytes;
    uint64_t units, unit_elems;
} tspec;

/* The tensors, and the layout list they were made from (t[i].lt points
 * into it). */
typedef struct { tspec *t; size_t n; ds4_layout_tensor *lt; } layout;

static tspec *normal(tspec *t, float mean, float std) { t->dist = D_NORMAL; t->a = mean; t->b = std; return t; }
static tspec *uniform(tspec *t, float lo, float hi) { t->dist = D_UNIFORM; t->a = lo; t->b = hi; return t; }
/* The usual projection scale: unit-RMS inputs give outputs of RMS ~gain. */
static tspec *proj(tspec *t, float gain) { return normal(t, 0.0f, gain / sqrtf((float)t->ne[0])); }

/*
 * Scales.  Modelled on the statistics of ../shared/golden/models/
 * tiny-a-f16.gguf (whose forward pass is known to be healthy), expressed
 * relative to the input width so that they carry over to the real shape:
 *   projections RMS 1/sqrt(n_in) (outputs ~ unit RMS for RMS-normed inputs);
 *   compressor / indexer-compressor gates and shared-expert gate/up
 *   1.5/sqrt(n_in) (sharper pooling softmax, livelier SwiGLU);
 *   router 2/sqrt(D) (sqrt(softplus) scores that actually differ);
 *   output head 3/sqrt(D) (logits with std ~3: peaked but not one-hot);
 *   routed gate/up 1/sqrt(D) with a quarter of the experts at 4x, so the
 *   SwiGLU clamp (10) is reached for some tokens; routed down 1/sqrt(F);
 *   token embedding N(0, 1); HC fn 1/sqrt(N*D); HC scale U[0.3, 1);
 *   HC base N(0, 0.5); attention sinks N(0, 1); router bias N(0, 0.3);
 *   compressor APE N(0, 0.5) (small beside the gate scores);
 *   RMSNorm weights 1 + N(0, 0.15), except the KV / compressor norms
 *   U[1, 2.5] and the indexer-compressor norm U[1, 2], as in the golden
 *   model (wider KV rows exercise the FP8 round trip).
 */
enum { S_PROJ, S_NORMAL, S_UNIFORM, S_TID2EID };
/* The scale of every family (above): S_PROJ with gain a, N(a, b), U[a, b). */
static const struct { uint8_t kind; float a, b; } SCALE[DS4_T_COUNT] = {
    [DS4_T_TOKEN_EMBD] = {S_NORMAL, 0.0f, 1.0f},
    [DS4_T_HC_ATTN_FN] = {S_PROJ, 1.0f, 0}, [DS4_T_HC_ATTN_SCALE] = {S_UNIFORM, 0.3f, 1.0f},
    [DS4_T_HC_ATTN_BASE] = {S_NORMAL, 0.0f, 0.5f}, [DS4_T_HC_FFN_FN] = {S_PROJ, 1.0f, 0},
    [DS4_T_HC_FFN_SCALE] = {S_UNIFORM, 0.3f, 1.0f}, [DS4_T_HC_FFN_BASE] = {S_NORMAL, 0.0f, 0.5f},
    [DS4_T_ATTN_NORM] = {S_NORMAL, 1.0f, 0.15f}, [DS4_T_ATTN_Q_A] = {S_PROJ, 1.0f, 0},
    [DS4_T_ATTN_Q_A_NORM] = {S_NORMAL, 1.0f, 0.15f}, [DS4_T_ATTN_Q_B] = {S_PROJ, 1.0f, 0},
    [DS4_T_ATTN_KV] = {S_PROJ, 1.0f, 0}, [DS4_T_ATTN_KV_A_NORM] = {S_UNIFORM, 1.0f, 2.5f},
    [DS4_T_ATTN_SINKS] = {S_NORMAL, 0.0f, 1.0f}, [DS4_T_ATTN_OUTPUT_A] = {S_PROJ, 1.0f, 0},
    [DS4_T_ATTN_OUTPUT_B] = {S_PROJ, 1.0f, 0},
    [DS4_T_COMP_APE] = {S_NORMAL, 0.0f, 0.5f}, [DS4_T_COMP_KV] = {S_PROJ, 1.0f, 0},
    [DS4_T_COMP_GATE] = {S_PROJ, 1.5f, 0}, [DS4_T_COMP_NORM] = {S_UNIFORM, 1.0f, 2.5f},
    [DS4_T_IDX_Q_B] = {S_PROJ, 1.0f, 0}, [DS4_T_IDX_PROJ] = {S_PROJ, 1.0f, 0},
    [DS4_T_IDX_COMP_APE] = {S_NORMAL, 0.0f, 0.5f}, [DS4_T_IDX_COMP_KV] = {S_PROJ, 1.0f, 0},
    [DS4_T_IDX_COMP_GATE] = {S_PROJ, 1.5f, 0}, [DS4_T_IDX_COMP_NORM] = {S_UNIFORM, 1.0f, 2.0f},
    [DS4_T_FFN_NORM] = {S_NORMAL, 1.0f, 0.15f}, [DS4_T_FFN_GATE_INP] = {S_PROJ, 2.0f, 0},
    [DS4_T_EXP_PROBS_B] = {S_NORMAL, 0.0f, 0.3f},
    [DS4_T_FFN_GATE_EXPS] = {S_PROJ, 1.0f, 0}, [DS4_T_FFN_UP_EXPS] = {S_PROJ, 1.0f, 0},
    [DS4_T_FFN_DOWN_EXPS] = {S_PROJ, 1.0f, 0},
    [DS4_T_FFN_GATE_SHEXP] = {S_PROJ, 1.5f, 0}, [DS4_T_FFN_UP_SHEXP] = {S_PROJ, 1.5f, 0},
    [DS4_T_FFN_DOWN_SHEXP] = {S_PROJ, 1.0f, 0},
    [DS4_T_TID2EID] = {S_TID2EID, 0, 0},
    [DS4_T_OUTPUT_HC_BASE] = {S_NORMAL, 0.0f, 0.5f}, [DS4_T_OUTPUT_HC_FN] = {S_PROJ, 1.0f, 0},
    [DS4_T_OUTPUT_HC_SCALE] = {S_UNIFORM, 0.3f, 1.0f}, [DS4_T_OUTPUT_NORM] = {S_NORMAL, 1.0f, 0.15f},
    [DS4_T_OUTPUT] = {S_PROJ, 3.0f, 0},
    [DS4_T_MTP_E_PROJ] = {S_PROJ, 1.0f, 0}, [DS4_T_MTP_H_PROJ] = {S_PROJ, 1.0f, 0},
    [DS4_T_MTP_ENORM] = {S_NORMAL, 1.0f, 0.15f}, [DS4_T_MTP_HNORM] = {S_NORMAL, 1.0f, 0.15f},
    [DS4_T_MTP_NORM] = {S_NORMAL, 1.0f, 0.15f}, [DS4_T_MTP_HC_HEAD_BASE] = {S_NORMAL, 0.0f, 0.5f},
    [DS4_T_MTP_HC_HEAD_FN] = {S_PROJ, 1.0f, 0}, [DS4_T_MTP_HC_HEAD_SCALE] = {S_UNIFORM, 0.3f, 1.0f},
    /* glm-dsa: attn_k_b maps a head's nope part to the latent, attn_v_b
     * the latent to a head's value (ne[0] is the input width of both) */
    [DS4_T_ATTN_K_B] = {S_PROJ, 1.0f, 0}, [DS4_T_ATTN_V_B] = {S_PROJ, 1.0f, 0},
    [DS4_T_ATTN_OUTPUT] = {S_PROJ, 1.0f, 0}, [DS4_T_IDX_K] = {S_PROJ, 1.0f, 0},
    [DS4_T_IDX_K_NORM] = {S_NORMAL, 1.0f, 0.15f}, [DS4_T_IDX_K_NORM_B] = {S_NORMAL, 0.0f, 0.1f},
    [DS4_T_FFN_GATE] = {S_PROJ, 1.0f, 0}, [DS4_T_FFN_UP] = {S_PROJ, 1.0f, 0},
    [DS4_T_FFN_DOWN] = {S_PROJ, 1.0f, 0},
    /* glm5-next's KDA: ssm_a = -exp(A_log) < 0 per head; the convolution
     * taps and dt bias as tests/glm_gguf.py draws them */
    [DS4_T_KDA_Q] = {S_PROJ, 1.0f, 0}, [DS4_T_KDA_K] = {S_PROJ, 1.0f, 0}, [DS4_T_KDA_V] = {S_PROJ, 1.0f, 0},
    [DS4_T_CONV_Q] = {S_NORMAL, 0.0f, 0.5f}, [DS4_T_CONV_K] = {S_NORMAL, 0.0f, 0.5f},
    [DS4_T_CONV_V] = {S_NORMAL, 0.0f, 0.5f}, [DS4_T_SSM_F_A] = {S_PROJ, 1.0f, 0}, [DS4_T_SSM_F_B] = {S_PROJ, 1.0f, 0},
    [DS4_T_SSM_BETA] = {S_PROJ, 1.0f, 0}, [DS4_T_SSM_A] = {S_UNIFORM, -1.6f, -0.6f},
    [DS4_T_SSM_DT_B] = {S_NORMAL, 0.0f, 0.5f}, [DS4_T_SSM_G_A] = {S_PROJ, 1.0f, 0},
    [DS4_T_SSM_G_B] = {S_PROJ, 1.0f, 0}, [DS4_T_SSM_NORM] = {S_NORMAL, 1.0f, 0.1f},
};

/* The glm-dsa file's tensors: the layout's head, the layers with their
 * kinds (dense FFN on the first n_dense, an own indexer on IndexShare's
 * full layers), the tail.  Returns a malloc'ed list (*n entries). */
static ds4_layout_tensor *glm_layout_list(const config *c, size_t *n) {
    const ds4_layout_arch *a = c->glm == 2 ? &ds4_layout_glm5_next : &ds4_layout_glm_dsa;
    const ds4_layout_hp hp = {
        .n_hc = c->n_hc, .kda_dim = c->kda_dim, .conv = c->conv, .kpool = c->kpool,
        .n_embd = c->n_embd, .n_vocab = c->n_vocab, .n_head = c->n_head, .q_lora = c->q_lora,
        .n_expert = c->n_expert, .n_ff = c->n_ff, .n_shared = c->n_shared, .n_used = c->n_used,
        .idx_heads = c->idx_heads, .idx_dim = c->idx_dim, .kv_lora = c->kv_lora, .n_rot = c->n_rot,
        .kmla = c->qk_nope + c->n_rot, .vmla = c->v_head, .n_ff_dense = c->n_ff_dense,
        .n_layer = c->n_layer,
    };
    const size_t cap = (size_t)(a->n[DS4_SEC_HEAD] + a->n[DS4_SEC_TAIL]) +
                       (size_t)c->n_layer * (size_t)a->n[DS4_SEC_LAYER];
    ds4_layout_tensor *L = malloc(cap * sizeof *L);
    if (!L) return NULL;
    size_t k = 0;
    k += (size_t)ds4_layout_section(a, DS4_SEC_HEAD, &hp, -1, NULL, 0, L + k);
    for (int64_t il = 0; il < c->n_layer; il++) {
        /* glm5-next: every MLA layer runs its own indexer (no indexer.types) */
        ds4_layer_kind kind = {0, c->glm == 2 ? 1 : glm_full(c, il), 0, il < c->n_dense,
                               c->glm == 2 ? !g5n_mla(c, il) : 0, 0};
        k += (size_t)ds4_layout_section(a, DS4_SEC_LAYER, &hp, (int)il, &kind, 0, L + k);
    }
    k += (size_t)ds4_layout_section(a, DS4_SEC_TAIL, &hp, -1, NULL, 0, L + k);
    *n = k;
    return L;
}

/* The glm-dsa recipes (as tests/glm_gguf.py --type): 1-D tensors F32,
 * matrices F32, F16, or Q8_0 where a row is whole 32-blocks (else F32). */
static uint32_t glm_type(const char *recipe, const ds4_layout_tensor *lt) {
    if (lt->nd < 2 || lt->row->role == DS4_ROLE_VEC || !strcmp(recipe, "f32")) return GGML_F32;
    if (!strcmp(recipe, "f16")) return GGML_F16;
    return lt->ne[0] % 32 == 0 ? GGML_Q8_0 : GGML_F32;
}

/* The layout's tensors (gguf/layout.h: names, order, dims; with `mtp` the
 * MTP block and its window-only, learned-router layer) with the recipe's
 * types and the scales above.  The MTP layer's index (block_count) keys
 * its expert boost. */
static void build_layout(const config *c, const char *recipe, int mtp, layout *L) {
    const ds4_recipe *R = c->glm ? NULL : ds4_recipe_find(recipe);
    if (!R && !c->glm) die("internal: no recipe %s", recipe);
    const ds4_layout_hp hp = {
        .n_embd = c->n_embd, .n_vocab = c->n_vocab, .n_hc = c->n_hc, .n_head = c->n_head,
        .head_dim = c->key_len, .q_lora = c->q_lora, .o_lora = c->o_lora, .o_groups = c->o_groups,
        .n_expert = c->n_expert, .n_ff = c->n_ff, .n_shared = c->n_shared, .n_used = c->n_used,
        .idx_heads = c->idx_heads, .idx_dim = c->idx_dim, .n_layer = c->n_layer, .n_hash = c->n_hash,
        .ratios = c->ratios,
    };
    L->lt = c->glm ? glm_layout_list(c, &L->n) : ds4_layout_list(&ds4_layout_deepseek4, &hp, mtp, &L->n);
    L->t = calloc(L->n ? L->n : 1, sizeof *L->t);
    if (!L->lt || !L->t) die("out of memory");
    for (size_t i = 0; i < L->n; i++) {
        const ds4_layout_tensor *lt = &L->lt[i];
        const int role = lt->row->role, id = lt->row->id;
        tspec *t = &L->t[i];
        snprintf(t->name, sizeof t->name, "%s", lt->name);
        t->lt = lt;
        t->nd = lt->nd;
        for (int d = 0; d < 3; d++) t->ne[d] = lt->ne[d];
        t->type = c->glm ? glm_type(recipe, lt) : ds4_recipe_type(R, role);
        t->layer = lt->layer;
        t->nbytes = ggml_row_size(t->type, t->ne[0]) * t->ne[1] * t->ne[2];
        if (!t->nbytes) die("internal: tensor %s: bad row size", t->name);
        /* what a decoded token reads of it (ds4_weights_active_bytes) */
        t->active = role == DS4_ROLE_EMBD || role == DS4_ROLE_I32 ? A_ROW
                    : role == DS4_ROLE_EXP_GU || role == DS4_ROLE_EXP_DOWN ? A_EXPERTS : A_ALL;
        t->boost = role == DS4_ROLE_EXP_GU;
        switch (SCALE[id].kind) {
        case S_PROJ: proj(t, SCALE[id].a); break;
        case S_NORMAL: normal(t, SCALE[id].a, SCALE[id].b); break;
        case S_UNIFORM: uniform(t, SCALE[id].a, SCALE[id].b); break;
        case S_TID2EID: t->dist = D_TID2EID; t->n_choices = (uint32_t)c->n_expert; break;
        }
    }

    /* Units: the PRNG stream restarts (from hash(key, unit)) at every unit. */
    for (size_t i = 0; i < L->n; i++) {
        tspec *t = &L->t[i];
        uint64_t nel = t->ne[0] * t->ne[1] * t->ne[2];
        if (t->dist == D_TID2EID) t->unit_elems = t->ne[0];
        else if (t->type == GGML_F16 || t->type == GGML_F32) t->unit_elems = 256;
        else t->unit_elems = ggml_block_size(t->type);
        t->units = (nel + t->unit_elems - 1) / t->unit_elems;
    }
}

/* Recipe f32: the f16 layout with every F16 tensor stored as F32 holding
 * the same (F16-rounded) values; units stay 256 elements, so the draws are
 * the f16 recipe's. */
static void widen_f16(layout *L) {
    for (size_t i = 0; i < L->n; i++) {
        tspec *t = &L->t[i];
        if (t->type != GGML_F16) continue;
        t->type = GGML_F32;
        t->round16 = 1;
        t->nbytes = ggml_row_size(GGML_F32, t->ne[0]) * t->ne[1] * t->ne[2];
    }
}

/* ------------------------------------------------------------------------ */
/* Random numbers                                                            */
/* ------------------------------------------------------------------------ */

static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct { uint64_t s; } rng;

static inline uint64_t next64(rng *g) { return mix64(g->s += 0x9E3779B97F4A7C15ull); }

static inline rng unit_rng(uint64_t key, uint64_t u) {
    rng g = {mix64(key ^ mix64(u + 0xD1B54A32D192ED03ull))};
    return g;
}

static uint64_t name_key(uint64_t seed, const char *name) {
    uint64_t h = 0xCBF29CE484222325ull;   /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 0x100000001B3ull;
    return mix64(mix64(seed) ^ h);
}

/* Approximately standard normal from one draw: Irwin-Hall sum of four
 * 16-bit uniforms (exact mean 0 and variance 1, tails cut at +-3.46). */
static inline float nrm16x4(uint64_t r) {
    int32_t s = (int32_t)(r & 0xffff) + (int32_t)((r >> 16) & 0xffff) + (int32_t)((r >> 32) & 0xffff) +
                (int32_t)(r >> 48) - 131070;
    return (float)s * 2.6429e-05f;   /* sqrt(3 / (65536^2 - 1)) */
}

static inline float unif(uint64_t r) { return (float)(r >> 40) * (1.0f / 16777216.0f); }

/* f32 -> f16, round to nearest even.  F16C when the CPU has it (same
 * results as ds4_f32_to_f16, several times faster); the portable
 * conversion otherwise. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
__attribute__((target("f16c,avx"))) static void f32_to_f16_f16c(const float *x, uint16_t *y, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = ds4_f32_to_f16(x[i]);
}
static int have_f16c(void) {
    static int h = -1;
    if (h < 0) { __builtin_cpu_init(); h = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx"); }
    return h;
}
#else
static void f32_to_f16_f16c(const float *x, uint16_t *y, int n) { (void)x; (void)y; (void)n; }
static int have_f16c(void) { return 0; }
#endif

static void f32_to_f16_row(const float *x, uint16_t *y, int n) {
    if (have_f16c()) { f32_to_f16_f16c(x, y, n); return; }
    for (int i = 0; i < n; i++) y[i] = ds4_f32_to_f16(x[i]);
}

/* ------------------------------------------------------------------------ */
/* Quantized blocks                                                          */
/* ------------------------------------------------------------------------ */

/*
 * Blocks are drawn directly in the quantized domain (no float
 * quantization): random codes plus f16 scales chosen so that the
 * dequantized weights have mean ~0 and exactly the requested RMS in
 * expectation.  Each block's scale also gets a factor U[0.75, 1.25) so that
 * blocks differ as in real files; its mean square is folded into the
 * normalisation (JIT2).
 */
#define JIT2 1.0208333333333333   /* E[(0.75 + 0.5u)^2] = 0.5625 + 0.375 + 1/12 */

static inline float jitter(uint64_t r) { return 0.75f + 0.5f * unif(r); }

static int8_t q8_lut[1021];        /* sum of four random bytes -> int8, near-normal */
static double q8_ms;               /* E[q^2] under that distribution */
static double iq2_grid_ms;         /* E[grid byte^2] over the IQ2_XXS grid */
static double iq2_scale_ms;        /* E[(0.5 + s)^2], s uniform in 7..15 */
static double q4k_sc_ms;           /* E[sc^2], sc uniform in 32..63 */
#define Q2K_SC_MS 137.5            /* E[sc^2], sc uniform in 8..15 */

static void init_tables(void) {
    /* Distribution of the sum of four uniform bytes (0..1020). */
    static double p[1021], t[1021];
    memset(p, 0, sizeof p);
    for (int i = 0; i < 256; i++) p[i] = 1.0 / 256;
    for (int k = 1; k < 4; k++) {
        memset(t, 0, sizeof t);
        for (int s = 0; s <= 255 * k; s++)
            for (int b = 0; b < 256; b++) t[s + b] += p[s] / 256;
        memcpy(p, t, sizeof p);
    }
    q8_ms = 0;
    for (int s = 0; s <= 1020; s++) {
        int v = (int)lrint((s - 510) * 127.0 / 510.0);
        q8_lut[s] = (int8_t)v;
        q8_ms += p[s] * v * v;
    }
    double g = 0;
    for (int i = 0; i < 256; i++)
        for (int j = 0; j < 8; j++) {
            double b = (double)((ds4_iq2xxs_grid[i] >> (8 * j)) & 0xff);
            g += b * b;
        }
    iq2_grid_ms = g / 2048.0;
    double s2 = 0;
    for (int s = 7; s <= 15; s++) s2 += (0.5 + s) * (0.5 + s);
    iq2_scale_ms = s2 / 9.0;
    double k2 = 0;
    for (int s = 32; s <= 63; s++) k2 += (double)s * s;
    q4k_sc_ms = k2 / 32.0;
    (void)have_f16c();   /* probe once, before any generator thread runs */
}

static void gen_q8_0(block_q8_0 *b, rng *g, float std) {
    const float d0 = (float)(std / sqrt(q8_ms * JIT2));
    b->d = ds4_f32_to_f16(d0 * jitter(next64(g)));
    uint64_t r[QK8_0 / 2];
    const uint64_t s0 = g->s;   /* the next 16 draws, vectorizable */
    for (int k = 0; k < QK8_0 / 2; k++) r[k] = mix64(s0 + (uint64_t)(k + 1) * 0x9E3779B97F4A7C15ull);
    g->s = s0 + (uint64_t)(QK8_0 / 2) * 0x9E3779B97F4A7C15ull;
    for (int k = 0; k < QK8_0 / 2; k++) {
        /* SWAR: the two 4-byte sums of one draw. */
        uint64_t t = (r[k] & 0x00ff00ff00ff00ffull) + ((r[k] >> 8) & 0x00ff00ff00ff00ffull);
        t = (t & 0x0000ffff0000ffffull) + ((t >> 16) & 0x0000ffff0000ffffull);
        b->qs[2 * k] = q8_lut[t & 0xffffffffu];
        b->qs[2 * k + 1] = q8_lut[t >> 32];
    }
}

/* Q2_K: x = d*sc*v - dmin*m with v in 0..3.  m = sc and dmin = 1.5 d make
 * every 16-group zero-mean: x = d*sc*(v - 1.5), E[(v-1.5)^2] = 1.25. */
static void gen_q2_K(block_q2_K *b, rng *g, float std) {
    const float d0 = (float)(std / sqrt(1.25 * Q2K_SC_MS * JIT2));
    uint64_t r = next64(g);
    for (int i = 0; i < 16; i++) {
        unsigned sc = 8 + ((r >> (3 * i)) & 7);
        b->scales[i] = (uint8_t)(sc | sc << 4);
    }
    uint16_t dh = ds4_f32_to_f16(d0 * jitter(next64(g)));
    b->d = dh;
    b->dmin = ds4_f32_to_f16(1.5f * ds4_f16_to_f32(dh));
    for (int i = 0; i < 64; i += 8) {
        uint64_t x = next64(g);
        memcpy(b->qs + i, &x, 8);
    }
}

/* Q4_K: x = d*sc*q - dmin*m with q in 0..15.  m = sc and dmin = 7.5 d make
 * every 32-group zero-mean: x = d*sc*(q - 7.5), E[(q-7.5)^2] = 21.25. */
static void gen_q4_K(block_q4_K *b, rng *g, float std) {
    const float d0 = (float)(std / sqrt(21.25 * q4k_sc_ms * JIT2));
    uint64_t r = next64(g);
    uint8_t sc[8];
    for (int j = 0; j < 8; j++) sc[j] = (uint8_t)(32 + ((r >> (5 * j)) & 31));
    const uint8_t *m = sc;
    for (int j = 0; j < 4; j++) {
        b->scales[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        b->scales[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
        b->scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
    uint16_t dh = ds4_f32_to_f16(d0 * jitter(r));   /* bits 40..63: unused by the scales */
    b->d = dh;
    b->dmin = ds4_f32_to_f16(7.5f * ds4_f16_to_f32(dh));
    for (int i = 0; i < QK_K / 2; i += 8) {
        uint64_t x = next64(g);
        memcpy(b->qs + i, &x, 8);
    }
}

/* IQ2_XXS: every bit pattern is a valid block (4 grid indices and 4 7-bit
 * sign indices per 32-group; the 8th sign is implied by parity, so the
 * signs are balanced).  Only the 4-bit group scale s (top of a1) is drawn
 * from 7..15, as a quantizer fitting similar-magnitude groups would give. */
static void gen_iq2_xxs(block_iq2_xxs *b, rng *g, float std) {
    const float d0 = (float)(std / sqrt(0.0625 * iq2_scale_ms * iq2_grid_ms * JIT2));
    uint64_t rs = next64(g);
    b->d = ds4_f32_to_f16(d0 * jitter(next64(g)));
    for (int k = 0; k < 8; k++) {
        uint64_t r = next64(g);
        uint32_t a0 = (uint32_t)r;
        uint32_t s = 7 + (uint32_t)(((rs >> (8 * k)) & 0xff) % 9);
        uint32_t a1 = (uint32_t)(r >> 32) & 0x0fffffffu;
        a1 |= s << 28;
        memcpy(&b->qs[4 * k], &a0, 4);
        memcpy(&b->qs[4 * k + 2], &a1, 4);
    }
}

/* ------------------------------------------------------------------------ */
/* Tensor generation                                                         */
/* ------------------------------------------------------------------------ */

/* Expert boost: gate and up of the same experts are 4x larger for exactly
 * every fourth expert, starting at an offset drawn from (seed, layer), so
 * the boosted set is keyed by seed and layer, not by tensor name. */
static int boosted(uint64_t seed, int layer, uint64_t e) {
    uint64_t off = mix64(mix64(seed ^ 0xB0057ull) + (uint64_t)layer * 0x9E3779B97F4A7C15ull) & 3;
    return (e & 3) == off;
}

typedef struct {
    uint64_t seed;
    uint32_t *perm;      /* tid2eid scratch: identity permutation [n_expert] */
    uint32_t *swaps;     /* tid2eid scratch [expert_used_count] */
} genctx;

static float unit_std(const genctx *G, const tspec *t, uint64_t first_elem) {
    if (!t->boost) return t->b;
    uint64_t e = first_elem / (t->ne[0] * t->ne[1]);
    return boosted(G->seed, t->layer, e) ? 4.0f * t->b : t->b;
}

/* Writes units [u0, u0+n) of tensor t to out; returns the bytes written. */
static size_t gen_units(const genctx *G, const tspec *t, uint64_t key, uint64_t u0, uint64_t n,
                        uint8_t *out) {
    const uint64_t nel = t->ne[0] * t->ne[1] * t->ne[2];
    const uint64_t per_exp = t->ne[0] * t->ne[1];
    uint8_t *o = out;
    for (uint64_t u = u0; u < u0 + n; u++) {
        rng g = unit_rng(key, u);
        const uint64_t e0 = u * t->unit_elems;
        uint64_t e1 = e0 + t->unit_elems;
        if (e1 > nel) e1 = nel;
        switch (t->type) {
        case GGML_F32:
        case GGML_F16: {
            /* Same draws as successive next64() calls, written so the
             * compiler can vectorize them. */
            float v[256];
            const int n_el = (int)(e1 - e0);
            const uint64_t s0 = g.s;
            if (t->dist == D_UNIFORM) {
                const float lo = t->a, w = t->b - t->a;
                for (int k = 0; k < n_el; k++)
                    v[k] = lo + w * unif(mix64(s0 + (uint64_t)(k + 1) * 0x9E3779B97F4A7C15ull));
            } else {
                const float mean = t->a, std = unit_std(G, t, e0);
                for (int k = 0; k < n_el; k++)
                    v[k] = mean + std * nrm16x4(mix64(s0 + (uint64_t)(k + 1) * 0x9E3779B97F4A7C15ull));
                /* A float unit may straddle two experts (per-expert size not
                 * a multiple of 256): rescale the tail past the boundary. */
                uint64_t b = t->boost ? (e0 / per_exp + 1) * per_exp : UINT64_MAX;
                for (; b < e1; b += per_exp) {
                    const float s2 = unit_std(G, t, b) / std;
                    const uint64_t end = b + per_exp < e1 ? b + per_exp : e1;
                    for (uint64_t k = b - e0; k < end - e0; k++) v[k] = mean + (v[k] - mean) * s2;
                }
            }
            if (t->type == GGML_F32 && t->round16) {
                uint16_t h[256];
                f32_to_f16_row(v, h, n_el);
                for (int k = 0; k < n_el; k++) v[k] = ds4_f16_to_f32(h[k]);
            }
            if (t->type == GGML_F32) { memcpy(o, v, 4 * (size_t)n_el); o += 4 * n_el; }
            else { f32_to_f16_row(v, (uint16_t *)(void *)o, n_el); o += 2 * n_el; }
            break;
        }
        case GGML_Q8_0: gen_q8_0((block_q8_0 *)o, &g, unit_std(G, t, e0)); o += sizeof(block_q8_0); break;
        case GGML_Q2_K: gen_q2_K((block_q2_K *)o, &g, unit_std(G, t, e0)); o += sizeof(block_q2_K); break;
        case GGML_Q4_K: gen_q4_K((block_q4_K *)o, &g, unit_std(G, t, e0)); o += sizeof(block_q4_K); break;
        case GGML_IQ2_XXS: gen_iq2_xxs((block_iq2_xxs *)o, &g, unit_std(G, t, e0)); o += sizeof(block_iq2_xxs); break;
        case GGML_I32: {
            /* One token's row: K distinct expert ids, the prefix of a random
             * permutation (partial Fisher-Yates, undone afterwards so the
             * scratch stays the identity). */
            const uint32_t E = t->n_choices, K = (uint32_t)t->ne[0];
            uint32_t *p = G->perm, *js = G->swaps;
            for (uint32_t i = 0; i < K; i++) {
                uint32_t j = i + (uint32_t)(((next64(&g) >> 32) * (uint64_t)(E - i)) >> 32);
                uint32_t x = p[i]; p[i] = p[j]; p[j] = x;
                js[i] = j;
                int32_t id = (int32_t)p[i];
                memcpy(o, &id, 4);
                o += 4;
            }
            for (uint32_t i = K; i-- > 0;) {
                uint32_t x = p[i]; p[i] = p[js[i]]; p[js[i]] = x;
            }
            break;
        }
        default:
            die("internal: no generator for type %s", ggml_type_name(t->type));
        }
    }
    return (size_t)(o - out);
}

/* Bytes of one unit as generated (the last unit of a tensor may be short). */
static uint64_t unit_bytes(const tspec *t) {
    switch (t->type) {
    case GGML_F32: case GGML_I32: return 4 * t->unit_elems;
    case GGML_F16: return 2 * t->unit_elems;
    default: return ggml_type_size(t->type);
    }
}

/* ------------------------------------------------------------------------ */
/* Metadata (written and/or measured)                                        */
/* ------------------------------------------------------------------------ */

/* Every entry is both handed to the writer (when there is one) and counted,
 * so --dry-run reports the exact file size and a real run can check it. */
typedef struct {
    gguf_writer *w;            /* NULL: count only */
    uint64_t bytes, n;
} meta;

static void m_count(meta *m, const char *key, uint64_t vbytes) {
    m->bytes += 8 + strlen(key) + 4 + vbytes;
    m->n++;
}
static void m_u32(meta *m, const char *key, uint64_t v) {
    m_count(m, key, 4);
    if (m->w) gguf_w_u32(m->w, key, (uint32_t)v);
}
static void m_f32(meta *m, const char *key, double v) {
    m_count(m, key, 4);
    if (m->w) gguf_w_f32(m->w, key, (float)v);
}
static void m_bool(meta *m, const char *key, int v) {
    m_count(m, key, 1);
    if (m->w) gguf_w_bool(m->w, key, v);
}
static void m_str(meta *m, const char *key, const char *s) {
    m_count(m, key, 8 + strlen(s));
    if (m->w) gguf_w_str(m->w, key, s, strlen(s));
}
static void m_arr(meta *m, const char *key, uint32_t et, const void *data, uint64_t n) {
    m_count(m, key, 12 + 4 * n);   /* u32 / f32 elements only */
    if (m->w) gguf_w_arr(m->w, key, et, data, n);
}
static void m_copy(meta *m, const gguf_kv *kv) {
    m_count(m, kv->key, gguf_kv_nbytes(kv));
    if (m->w) gguf_w_copy_kv(m->w, kv);
}

/* glm-dsa: the keys of tests/glm_gguf.py (llama.cpp's), in its order. */
static void write_meta_glm(meta *m, const config *c, const gguf_file *vocab, const char *preset,
                           const char *recipe, uint64_t seed) {
    char buf[256];
    m_str(m, "general.architecture", "glm-dsa");
    m_u32(m, "general.alignment", ALIGNMENT);
    snprintf(buf, sizeof buf, "ds4-synth-glm-dsa-%s-%s", preset, recipe);
    m_str(m, "general.name", buf);
    snprintf(buf, sizeof buf, "random-weight synthetic model (ds4-synth --arch glm-dsa --preset %s "
             "--recipe %s --seed %" PRIu64 ", %" PRId64 " layers); not a trained model", preset, recipe,
             seed, c->n_layer);
    m_str(m, "general.description", buf);
    m_u32(m, "glm-dsa.context_length", (uint64_t)c->ctx);
    m_u32(m, "glm-dsa.embedding_length", (uint64_t)c->n_embd);
    m_u32(m, "glm-dsa.block_count", (uint64_t)c->n_layer);
    m_u32(m, "glm-dsa.feed_forward_length", (uint64_t)c->n_ff_dense);
    m_u32(m, "glm-dsa.attention.head_count", (uint64_t)c->n_head);
    m_u32(m, "glm-dsa.attention.head_count_kv", 1);     /* absorbed MLA = MQA */
    m_f32(m, "glm-dsa.rope.freq_base", c->rope_base);
    m_u32(m, "glm-dsa.rope.dimension_count", (uint64_t)c->n_rot);
    m_f32(m, "glm-dsa.attention.layer_norm_rms_epsilon", c->rms_eps);
    m_u32(m, "glm-dsa.vocab_size", (uint64_t)c->n_vocab);
    m_u32(m, "glm-dsa.attention.q_lora_rank", (uint64_t)c->q_lora);
    m_u32(m, "glm-dsa.attention.kv_lora_rank", (uint64_t)c->kv_lora);
    m_u32(m, "glm-dsa.attention.key_length", (uint64_t)(c->kv_lora + c->n_rot));
    m_u32(m, "glm-dsa.attention.value_length", (uint64_t)c->kv_lora);
    m_u32(m, "glm-dsa.attention.key_length_mla", (uint64_t)(c->qk_nope + c->n_rot));
    m_u32(m, "glm-dsa.attention.value_length_mla", (uint64_t)c->v_head);
    m_u32(m, "glm-dsa.expert_count", (uint64_t)c->n_expert);
    m_u32(m, "glm-dsa.expert_used_count", (uint64_t)c->n_used);
    m_u32(m, "glm-dsa.expert_shared_count", (uint64_t)c->n_shared);
    m_u32(m, "glm-dsa.expert_feed_forward_length", (uint64_t)c->n_ff);
    m_f32(m, "glm-dsa.expert_weights_scale", c->expert_scale);
    m_bool(m, "glm-dsa.expert_weights_norm", c->expert_norm);
    m_u32(m, "glm-dsa.expert_gating_func", 2);           /* sigmoid */
    m_u32(m, "glm-dsa.leading_dense_block_count", (uint64_t)c->n_dense);
    m_u32(m, "glm-dsa.attention.indexer.head_count", (uint64_t)c->idx_heads);
    m_u32(m, "glm-dsa.attention.indexer.key_length", (uint64_t)c->idx_dim);
    m_u32(m, "glm-dsa.attention.indexer.top_k", (uint64_t)c->idx_topk);
    /* a BOOL array: 12 + 1 byte an element */
    uint8_t *full = malloc((size_t)c->n_layer);
    if (!full) die("out of memory");
    for (int64_t il = 0; il < c->n_layer; il++) full[il] = (uint8_t)glm_full(c, il);
    m_count(m, "glm-dsa.attention.indexer.types", 12 + (uint64_t)c->n_layer);
    if (m->w) gguf_w_arr(m->w, "glm-dsa.attention.indexer.types", GGUF_BOOL, full, (uint64_t)c->n_layer);
    free(full);
    for (uint64_t i = 0; i < vocab->n_kv; i++)
        if (!strncmp(vocab->kv[i].key, "tokenizer.", 10)) m_copy(m, &vocab->kv[i]);
}

/* glm5-next: the keys of tests/glm_gguf.py (llama.cpp's glm5next), in its order. */
static void write_meta_g5n(meta *m, const config *c, const gguf_file *vocab, const char *preset,
                           const char *recipe, uint64_t seed) {
    char buf[256];
    m_str(m, "general.architecture", "glm5-next");
    m_u32(m, "general.alignment", ALIGNMENT);
    snprintf(buf, sizeof buf, "ds4-synth-glm5-next-%s-%s", preset, recipe);
    m_str(m, "general.name", buf);
    snprintf(buf, sizeof buf, "random-weight synthetic model (ds4-synth --arch glm5-next --preset %s "
             "--recipe %s --seed %" PRIu64 ", %" PRId64 " layers); not a trained model", preset, recipe,
             seed, c->n_layer);
    m_str(m, "general.description", buf);
    m_u32(m, "glm5-next.context_length", (uint64_t)c->ctx);
    m_u32(m, "glm5-next.embedding_length", (uint64_t)c->n_embd);
    m_u32(m, "glm5-next.block_count", (uint64_t)c->n_layer);
    m_u32(m, "glm5-next.feed_forward_length", (uint64_t)c->n_ff_dense);
    m_u32(m, "glm5-next.attention.head_count", (uint64_t)c->n_head);
    /* 0 marks a KDA layer, 1 an MLA layer: a U32 array, 12 + 4 bytes an element */
    uint32_t *hkv = malloc((size_t)c->n_layer * sizeof *hkv);
    if (!hkv) die("out of memory");
    for (int64_t il = 0; il < c->n_layer; il++) hkv[il] = (uint32_t)g5n_mla(c, il);
    m_count(m, "glm5-next.attention.head_count_kv", 12 + 4 * (uint64_t)c->n_layer);
    if (m->w) gguf_w_arr(m->w, "glm5-next.attention.head_count_kv", GGUF_U32, hkv, (uint64_t)c->n_layer);
    free(hkv);
    m_u32(m, "glm5-next.rope.dimension_count", 0);
    m_f32(m, "glm5-next.attention.layer_norm_rms_epsilon", c->rms_eps);
    m_f32(m, "glm5-next.attention.layer_norm_epsilon", c->ln_eps);
    m_u32(m, "glm5-next.vocab_size", (uint64_t)c->n_vocab);
    m_u32(m, "glm5-next.attention.q_lora_rank", (uint64_t)c->q_lora);
    m_u32(m, "glm5-next.attention.kv_lora_rank", (uint64_t)c->kv_lora);
    m_u32(m, "glm5-next.attention.key_length", (uint64_t)c->kv_lora);
    m_u32(m, "glm5-next.attention.value_length", (uint64_t)c->kv_lora);
    m_u32(m, "glm5-next.attention.key_length_mla", (uint64_t)c->qk_nope);
    m_u32(m, "glm5-next.attention.value_length_mla", (uint64_t)c->v_head);
    m_u32(m, "glm5-next.kda.head_dim", (uint64_t)c->kda_dim);
    m_f32(m, "glm5-next.kda.gate_lower_bound", c->kda_lb);
    m_u32(m, "glm5-next.ssm.conv_kernel", (uint64_t)c->conv);
    m_u32(m, "glm5-next.attention.indexer.head_count", (uint64_t)c->idx_heads);
    m_u32(m, "glm5-next.attention.indexer.key_length", (uint64_t)c->idx_dim);
    m_u32(m, "glm5-next.attention.indexer.top_k", (uint64_t)c->idx_topk);
    m_u32(m, "glm5-next.attention.indexer.kpool", (uint64_t)c->kpool);
    m_u32(m, "glm5-next.hyper_connection.count", (uint64_t)c->n_hc);
    m_u32(m, "glm5-next.hyper_connection.sinkhorn_iterations", (uint64_t)c->hc_iters);
    m_f32(m, "glm5-next.hyper_connection.epsilon", c->hc_eps);
    m_u32(m, "glm5-next.expert_count", (uint64_t)c->n_expert);
    m_u32(m, "glm5-next.expert_used_count", (uint64_t)c->n_used);
    m_u32(m, "glm5-next.expert_shared_count", (uint64_t)c->n_shared);
    m_u32(m, "glm5-next.expert_feed_forward_length", (uint64_t)c->n_ff);
    m_f32(m, "glm5-next.expert_weights_scale", c->expert_scale);
    m_bool(m, "glm5-next.expert_weights_norm", c->expert_norm);
    m_u32(m, "glm5-next.expert_gating_func", 2);           /* sigmoid */
    m_u32(m, "glm5-next.leading_dense_block_count", (uint64_t)c->n_dense);
    float *cl = malloc((size_t)c->n_layer * sizeof *cl);
    if (!cl) die("out of memory");
    for (int64_t il = 0; il < c->n_layer; il++) cl[il] = (float)c->clamp10;
    m_count(m, "glm5-next.swiglu_clamp_exp", 12 + 4 * (uint64_t)c->n_layer);
    if (m->w) gguf_w_arr(m->w, "glm5-next.swiglu_clamp_exp", GGUF_F32, cl, (uint64_t)c->n_layer);
    m_count(m, "glm5-next.swiglu_clamp_shexp", 12 + 4 * (uint64_t)c->n_layer);
    if (m->w) gguf_w_arr(m->w, "glm5-next.swiglu_clamp_shexp", GGUF_F32, cl, (uint64_t)c->n_layer);
    free(cl);
    for (uint64_t i = 0; i < vocab->n_kv; i++)
        if (!strncmp(vocab->kv[i].key, "tokenizer.", 10)) m_copy(m, &vocab->kv[i]);
}

static void write_meta(meta *m, const config *c, const gguf_file *vocab, const char *preset,
                       const char *recipe, uint64_t seed) {
    if (c->glm == 2) { write_meta_g5n(m, c, vocab, preset, recipe, seed); return; }
    if (c->glm) { write_meta_glm(m, c, vocab, preset, recipe, seed); return; }
    char buf[256];
    m_str(m, "general.architecture", "deepseek4");
    snprintf(buf, sizeof buf, "ds4-synth-%s-%s", preset, recipe);
    m_str(m, "general.name", buf);
    m_u32(m, "general.alignment", ALIGNMENT);
    snprintf(buf, sizeof buf, "random-weight synthetic model (ds4-synth --preset %s --recipe %s "
             "--seed %" PRIu64 ", %" PRId64 " layers); not a trained model", preset, recipe, seed,
             c->n_layer);
    m_str(m, "general.description", buf);
    for (size_t i = 0; i < N_KEYS; i++) {
        const keydef *d = &KEYS[i];
        char key[96];
        snprintf(key, sizeof key, "deepseek4.%s", d->key);
        switch (d->kind) {
        case K_INT: m_u32(m, key, (uint64_t) * (const int64_t *)((const char *)c + d->off)); break;
        case K_FLOAT: m_f32(m, key, *(const double *)((const char *)c + d->off)); break;
        case K_BOOL: m_bool(m, key, c->expert_norm); break;
        case K_VOCAB: m_u32(m, key, (uint64_t)c->n_vocab); break;
        case K_RATIOS: {
            uint32_t *a = malloc((size_t)c->n_ratios * 4);
            if (!a) die("out of memory");
            for (int j = 0; j < c->n_ratios; j++) a[j] = (uint32_t)c->ratios[j];
            m_arr(m, key, GGUF_U32, a, (uint64_t)c->n_ratios);
            free(a);
            break;
        }
        case K_CLAMP: {
            float *a = malloc((size_t)c->n_clamp * 4);
            if (!a) die("out of memory");
            for (int j = 0; j < c->n_clamp; j++) a[j] = (float)c->clamp[j];
            m_arr(m, key, GGUF_F32, a, (uint64_t)c->n_clamp);
            free(a);
            break;
        }
        }
        /* Written by converters (not read by ds4); same place as in the golden files. */
        if (!strcmp(d->key, "rope.freq_base")) m_str(m, "deepseek4.rope.scaling.type", "yarn");
    }
    /* The router's scoring function, as llama.cpp's enum names it (4 =
     * sqrt(softplus), the only one DeepSeek V4 uses): ds4 knows it from the
     * architecture, other loaders require the key. */
    m_u32(m, "deepseek4.expert_gating_func", DS4_EXPERT_GATING_SQRT_SOFTPLUS);
    m_str(m, "general.quantization_source", "ds4-synth");
    for (uint64_t i = 0; i < vocab->n_kv; i++)
        if (!strncmp(vocab->kv[i].key, "tokenizer.", 10)) m_copy(m, &vocab->kv[i]);
}

/* ------------------------------------------------------------------------ */
/* Sizes and the --dry-run report                                            */
/* ------------------------------------------------------------------------ */

static uint64_t align_up(uint64_t x) { return (x + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT; }

static uint64_t file_size(const layout *L, uint64_t meta_bytes) {
    uint64_t hdr = 24 + meta_bytes;
    for (size_t i = 0; i < L->n; i++) hdr += 8 + strlen(L->t[i].name) + 4 + 8 * L->t[i].nd + 4 + 8;
    uint64_t s = align_up(hdr);
    for (size_t i = 0; i < L->n; i++) s += align_up(L->t[i].nbytes);
    return s;
}

/* Bytes a decoded token reads (same accounting as ds4_weights_active_bytes). */
static uint64_t active_bytes(const layout *L, const config *c) {
    uint64_t s = 0;
    for (size_t i = 0; i < L->n; i++) {
        const tspec *t = &L->t[i];
        if (t->active == A_ALL) s += t->nbytes;
        else if (t->active == A_ROW) s += ggml_row_size(t->type, t->ne[0]);
        else s += (uint64_t)c->n_used * (t->nbytes / t->ne[2]);
    }
    return s;
}

static const char *human(uint64_t b, char *buf, size_t n) {
    if (b >= (1ull << 30)) snprintf(buf, n, "%.2f GiB", b / 1073741824.0);
    else if (b >= (1ull << 20)) snprintf(buf, n, "%.2f MiB", b / 1048576.0);
    else if (b >= 1024) snprintf(buf, n, "%.2f KiB", b / 1024.0);
    else snprintf(buf, n, "%" PRIu64 " B", b);
    return buf;
}

static const char *dims(const tspec *t, char *buf, size_t n) {
    if (t->nd == 1) snprintf(buf, n, "[%" PRIu64 "]", t->ne[0]);
    else if (t->nd == 2) snprintf(buf, n, "[%" PRIu64 ", %" PRIu64 "]", t->ne[0], t->ne[1]);
    else snprintf(buf, n, "[%" PRIu64 ", %" PRIu64 ", %" PRIu64 "]", t->ne[0], t->ne[1], t->ne[2]);
    return buf;
}

static const char *family(const char *name) {
    if (strncmp(name, "blk.", 4)) return name;
    const char *p = strchr(name + 4, '.');
    return p ? p + 1 : name;
}

static void report(FILE *o, const layout *L, const config *c, uint64_t total, int list) {
    char b1[64], b2[64];
    if (list) {
        fprintf(o, "%-40s %-9s %-22s %16s\n", "tensor", "type", "dims", "bytes");
        for (size_t i = 0; i < L->n; i++)
            fprintf(o, "%-40s %-9s %-22s %16" PRIu64 "\n", L->t[i].name, ggml_type_name(L->t[i].type),
                    dims(&L->t[i], b1, sizeof b1), L->t[i].nbytes);
        fputc('\n', o);
    }
    /* Families in order of first appearance (a few dozen: quadratic is fine). */
    fprintf(o, "%-34s %5s %-9s %-22s %12s\n", "tensor family", "count", "type", "dims (first)", "total");
    for (size_t i = 0; i < L->n; i++) {
        const char *f = family(L->t[i].name);
        size_t j;
        for (j = 0; j < i; j++)
            if (!strcmp(family(L->t[j].name), f) && L->t[j].type == L->t[i].type) break;
        if (j < i) continue;
        uint64_t cnt = 0, bytes = 0;
        for (j = i; j < L->n; j++)
            if (!strcmp(family(L->t[j].name), f) && L->t[j].type == L->t[i].type) {
                cnt++;
                bytes += L->t[j].nbytes;
            }
        fprintf(o, "%-34s %5" PRIu64 " %-9s %-22s %12s\n", f, cnt, ggml_type_name(L->t[i].type),
                dims(&L->t[i], b1, sizeof b1), human(bytes, b2, sizeof b2));
    }
    static const uint32_t types[] = {GGML_F32, GGML_F16, GGML_Q8_0, GGML_Q2_K, GGML_Q4_K,
                                     GGML_IQ2_XXS, GGML_I32};
    fprintf(o, "\nby type:");
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        uint64_t cnt = 0, bytes = 0;
        for (size_t i = 0; i < L->n; i++)
            if (L->t[i].type == types[k]) { cnt++; bytes += L->t[i].nbytes; }
        if (cnt) fprintf(o, "  %s %" PRIu64 " (%s)", ggml_type_name(types[k]), cnt, human(bytes, b1, sizeof b1));
    }
    fprintf(o, "\ntensors: %zu\n", L->n);
    fprintf(o, "file size: %" PRIu64 " bytes (%s)\n", total, human(total, b1, sizeof b1));
    uint64_t ab = active_bytes(L, c);
    fprintf(o, "bytes read per decoded token: %" PRIu64 " (%s)\n", ab, human(ab, b1, sizeof b1));
}

/* ------------------------------------------------------------------------ */
/* Writing                                                                   */
/* ------------------------------------------------------------------------ */

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { g_stop = sig; }

static void check_space(const char *out, uint64_t need) {
    char *dir = strdup(out);
    if (!dir) die("out of memory");
    char *slash = strrchr(dir, '/');
    if (!slash) { free(dir); dir = strdup("."); }
    else if (slash == dir) slash[1] = 0;
    else *slash = 0;
    struct statvfs sv;
    if (dir && !statvfs(dir, &sv)) {
        uint64_t avail = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
        if (avail < need) {
            char b1[64], b2[64];
            die("%s needs %s but only %s is free in %s (use --dry-run to plan)", out,
                human(need, b1, sizeof b1), human(avail, b2, sizeof b2), dir);
        }
    }
    free(dir);
}

typedef struct { uint32_t tensor; uint64_t u0, n; } job;
typedef struct { uint8_t *buf; size_t bytes; uint64_t job; int ready; } slot;
typedef struct {
    const layout *L;
    const config *c;
    uint64_t seed;
    job *jobs;
    uint64_t njobs, capjobs, next_job;
    slot *slots;
    int nslots;
    int abort, oom;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} pipeline;

static void *worker(void *arg) {
    pipeline *P = arg;
    genctx G = {P->seed, calloc((size_t)P->c->n_expert, 4), calloc((size_t)P->c->n_used, 4)};
    pthread_mutex_lock(&P->mu);
    if (!G.perm || !G.swaps) {
        P->oom = 1;
        pthread_cond_broadcast(&P->cv);
    } else {
        for (uint32_t e = 0; e < (uint32_t)P->c->n_expert; e++) G.perm[e] = e;
    }
    while (!P->abort && !P->oom && P->next_job < P->njobs) {
        const uint64_t j = P->next_job++;
        slot *sl = &P->slots[j % (uint64_t)P->nslots];
        while (!P->abort && sl->job != j) pthread_cond_wait(&P->cv, &P->mu);
        if (P->abort) break;
        pthread_mutex_unlock(&P->mu);
        const job *jb = &P->jobs[j];
        const tspec *t = &P->L->t[jb->tensor];
        size_t nb = gen_units(&G, t, name_key(P->seed, t->name), jb->u0, jb->n, sl->buf);
        pthread_mutex_lock(&P->mu);
        sl->bytes = nb;
        sl->ready = 1;
        pthread_cond_broadcast(&P->cv);
    }
    pthread_mutex_unlock(&P->mu);
    free(G.perm);
    free(G.swaps);
    return NULL;
}

static void write_model(const char *out, const layout *L, const config *c, const gguf_file *vocab,
                        const char *preset, const char *recipe, uint64_t seed, uint64_t total,
                        int nthreads) {
    /* Handlers first: an interrupt from here on removes OUT.tmp. */
    ds4_catch_signals(on_signal, NULL, 1);
    char *err = NULL;
    gguf_writer *w = gguf_writer_open(out, &err);
    if (!w) die("%s", err ? err : "cannot open the output");

    meta m = {w, 0, 0};
    write_meta(&m, c, vocab, preset, recipe, seed);
    for (size_t i = 0; i < L->n; i++) gguf_w_tensor(w, L->t[i].name, L->t[i].nd, L->t[i].ne, L->t[i].type);
    gguf_writer_begin_data(w);

    /* Pipeline: worker threads generate chunks (jobs) into a ring of
     * buffers, this thread writes them in order.  Generation of job j
     * waits until the writer has consumed job j - nslots from its slot. */
    pipeline P;
    memset(&P, 0, sizeof P);
    P.L = L;
    P.c = c;
    P.seed = seed;
    for (size_t i = 0; i < L->n; i++) {
        const tspec *t = &L->t[i];
        const uint64_t per = CHUNK_BYTES / unit_bytes(t);
        for (uint64_t u = 0; u < t->units; u += per) {
            if (P.njobs == P.capjobs) {
                P.capjobs = P.capjobs ? 2 * P.capjobs : 1024;
                P.jobs = realloc(P.jobs, P.capjobs * sizeof *P.jobs);
                if (!P.jobs) { gguf_writer_abort(w); die("out of memory"); }
            }
            P.jobs[P.njobs++] = (job){(uint32_t)i, u, t->units - u < per ? t->units - u : per};
        }
    }
    P.nslots = nthreads + 2;
    P.slots = calloc((size_t)P.nslots, sizeof *P.slots);
    if (!P.slots) { gguf_writer_abort(w); die("out of memory"); }
    for (int i = 0; i < P.nslots; i++) {
        P.slots[i].buf = malloc(CHUNK_BYTES);
        P.slots[i].job = (uint64_t)i;
        if (!P.slots[i].buf) { gguf_writer_abort(w); die("out of memory"); }
    }
    pthread_mutex_init(&P.mu, NULL);
    pthread_cond_init(&P.cv, NULL);
    pthread_t *th = calloc((size_t)nthreads, sizeof *th);
    if (!th) { gguf_writer_abort(w); die("out of memory"); }
    /* Signals go to this thread (the workers block them). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int started = 0;
    for (; started < nthreads; started++)
        if (pthread_create(&th[started], NULL, worker, &P)) break;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!started) { gguf_writer_abort(w); die("cannot start a generator thread"); }

    const int tty = isatty(STDERR_FILENO);
    const double t0 = ds4_now();
    double last = t0;
    uint64_t done = 0;
    int failed = 0;
    for (uint64_t j = 0; j < P.njobs && !g_stop && !failed; j++) {
        slot *sl = &P.slots[j % (uint64_t)P.nslots];
        pthread_mutex_lock(&P.mu);
        while (!(sl->job == j && sl->ready) && !g_stop && !P.oom) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 100000000;
            if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
            pthread_cond_timedwait(&P.cv, &P.mu, &ts);
        }
        int ok = sl->job == j && sl->ready;
        pthread_mutex_unlock(&P.mu);
        if (!ok) break;
        if (gguf_writer_write(w, sl->buf, sl->bytes)) failed = 1;
        done += sl->bytes;
        pthread_mutex_lock(&P.mu);
        sl->ready = 0;
        sl->job = j + (uint64_t)P.nslots;
        pthread_cond_broadcast(&P.cv);
        pthread_mutex_unlock(&P.mu);
        double tn = ds4_now();
        if (tty && tn - last >= 0.25) {
            last = tn;
            double mbs = done / 1e6 / (tn - t0);
            fprintf(stderr, "\rds4-synth: %.0f / %.0f MB (%.1f%%), %.0f MB/s, ETA %.0f s   ",
                    done / 1e6, total / 1e6, 100.0 * done / total, mbs,
                    mbs > 0 ? (total - done) / 1e6 / mbs : 0.0);
        }
    }
    pthread_mutex_lock(&P.mu);
    P.abort = 1;
    pthread_cond_broadcast(&P.cv);
    pthread_mutex_unlock(&P.mu);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    free(th);
    for (int i = 0; i < P.nslots; i++) free(P.slots[i].buf);
    free(P.slots);
    free(P.jobs);
    pthread_mutex_destroy(&P.mu);
    pthread_cond_destroy(&P.cv);
    if (tty) fputs("\r\033[K", stderr);
    if (g_stop) {
        gguf_writer_abort(w);
        die("interrupted (signal %d); %s was not written", (int)g_stop, out);
    }
    if (P.oom) { gguf_writer_abort(w); die("out of memory"); }
    if (failed) {
        gguf_writer_close(w, &err);   /* reports the sticky error, removes OUT.tmp */
        die("%s", err ? err : "write failed");
    }
    if (tty) fputs("ds4-synth: syncing to disk...", stderr);
    int rc = gguf_writer_close(w, &err);
    if (tty) fputs("\r\033[K", stderr);
    if (rc) die("%s", err ? err : "write failed");
    double dt = ds4_now() - t0;
    struct stat st;
    if (stat(out, &st) || (uint64_t)st.st_size != total)
        die("internal: %s has %lld bytes, expected %" PRIu64, out, (long long)st.st_size, total);
    char b1[64];
    fprintf(stderr, "ds4-synth: wrote %s: %s %s, %" PRId64 " layers, %zu tensors, %" PRIu64
            " bytes (%s), seed %" PRIu64 ", %.1f s, %.0f MB/s\n",
            out, preset, recipe, c->n_layer, L->n, total, human(total, b1, sizeof b1), seed, dt,
            dt > 0 ? total / 1e6 / dt : 0.0);
}

/* ------------------------------------------------------------------------ */
/* --hf-out: the same random model as an official-layout HF checkpoint       */
/* ------------------------------------------------------------------------ */

/*
 * Writes DIR/config.json, DIR/model-XXXXX-of-YYYYY.safetensors (globals in
 * the first shard, layer il in shard il + 2), model.safetensors.index.json,
 * tokenizer.json and tokenizer_config.json (from the --vocab GGUF), in the
 * dtypes of DeepSeek's release (docs/CHECKPOINT.md): attention, shared
 * expert, compressor and indexer-q projections FP8 E4M3 with one E8M0
 * scale per 128x128 block; routed experts FP4 E2M1 (two a byte, low nibble
 * = even column) with one E8M0 scale per 32 columns; embedding, head,
 * router, indexer weights_proj and RMSNorm weights BF16; HC parameters,
 * sinks, router bias and compressor APE F32; tid2eid I64.  The values are
 * the f16 recipe's random weights (same seed, same names), then rounded to
 * these formats: the checkpoint's dequantized values are the ground truth
 * the conversion tests compare against.
 */

typedef struct {
    char name[112];
    int kind;              /* DS4_HF_*; FP8/FP4 also own a "<stem>.scale" entry */
    int gguf;              /* index into the f16 layout */
    int64_t expert;        /* -1, or the expert of a stacked GGUF tensor */
    int nd;
    uint64_t shape[2];     /* HF shape: [out, in] or [n] */
    int shard;
    uint64_t off, nbytes;  /* the weight's data span */
    uint64_t soff, snbytes; /* FP8/FP4: the scale's span */
    uint64_t sshape[2];
} hf_t;

/* E8M0 exponent byte of the power of two s = 2^ceil(log2(amax / qmax)),
 * the smallest scale that keeps every value in range (ue8m0 rounding). */
static uint8_t e8m0_for(float amax, float qmax) {
    if (!(amax > 0)) return 127;   /* all zeros: any scale; 1.0 */
    int e = (int)ceil(log2((double)amax / qmax));
    if (e < -127) e = -127;
    if (e > 127) e = 127;
    return (uint8_t)(e + 127);
}

static void hf_encode(const hf_t *h, const float *x, uint8_t *w, uint8_t *sc) {
    const uint64_t R = h->nd == 2 ? h->shape[0] : 1, C = h->nd == 2 ? h->shape[1] : h->shape[0];
    switch (h->kind) {
    case DS4_HF_F32: memcpy(w, x, 4 * R * C); break;
    case DS4_HF_BF16:
        for (uint64_t i = 0; i < R * C; i++) {
            uint16_t b = st_f32_to_bf16(x[i]);
            memcpy(w + 2 * i, &b, 2);
        }
        break;
    case DS4_HF_FP8: {
        const uint64_t SC = h->sshape[1];
        for (uint64_t br = 0; br < h->sshape[0]; br++)
            for (uint64_t bc = 0; bc < SC; bc++) {
                const uint64_t r1 = (br + 1) * 128 < R ? (br + 1) * 128 : R;
                const uint64_t c1 = (bc + 1) * 128 < C ? (bc + 1) * 128 : C;
                float amax = 0;
                for (uint64_t r = br * 128; r < r1; r++)
                    for (uint64_t c = bc * 128; c < c1; c++) amax = fmaxf(amax, fabsf(x[r * C + c]));
                const uint8_t e = e8m0_for(amax, 448.0f);
                sc[br * SC + bc] = e;
                const float s = st_e8m0_to_f32(e);
                for (uint64_t r = br * 128; r < r1; r++)
                    for (uint64_t c = bc * 128; c < c1; c++) w[r * C + c] = st_f32_to_e4m3(x[r * C + c] / s);
            }
        break;
    }
    case DS4_HF_FP4: {
        const uint64_t Cin = C * 2;   /* shape[1] is the packed width */
        for (uint64_t r = 0; r < R; r++)
            for (uint64_t b = 0; b < Cin / 32; b++) {
                const float *v = x + r * Cin + 32 * b;
                float amax = 0;
                for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(v[k]));
                const uint8_t e = e8m0_for(amax, 6.0f);
                sc[r * (Cin / 32) + b] = e;
                const float s = st_e8m0_to_f32(e);
                for (int k = 0; k < 16; k++)
                    w[r * C + 16 * b + k] = (uint8_t)(st_f32_to_e2m1(v[2 * k] / s) |
                                                      st_f32_to_e2m1(v[2 * k + 1] / s) << 4);
            }
        break;
    }
    default: break;
    }
}

static void write_json_file(const char *dir, const char *name, json_t *j) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (json_dump_file(j, path, JSON_INDENT(1) | JSON_ENSURE_ASCII) != 0) die("cannot write %s", path);
}

static void write_hf(const char *dir, const layout *L, const config *c, const gguf_file *vocab, uint64_t seed) {
    if (mkdir(dir, 0777) && errno != EEXIST) die("--hf-out %s: %s", dir, strerror(errno));
    const int n_shards = (int)c->n_layer + 1;
    /* Plan every HF tensor: name, dtype, shape, shard and offsets. */
    hf_t *H = NULL;
    size_t nh = 0, caph = 0;
    uint64_t *shard_bytes = calloc((size_t)n_shards, sizeof *shard_bytes);
    if (!shard_bytes) die("out of memory");
    for (size_t i = 0; i < L->n; i++) {
        const tspec *t = &L->t[i];
        /* names and dtypes: the layout's (ARCHITECTURE.md §8) */
        const int kind = t->lt->row->hf_dtype;
        if (!t->lt->row->hf) die("internal: no HF name for %s", t->name);
        const int64_t ne = kind == DS4_HF_FP4 ? (int64_t)t->ne[2] : 1;
        for (int64_t e = 0; e < ne; e++) {
            if (nh == caph) {
                caph = caph ? 2 * caph : 512;
                H = realloc(H, caph * sizeof *H);
                if (!H) die("out of memory");
            }
            hf_t *h = &H[nh++];
            memset(h, 0, sizeof *h);
            h->kind = kind;
            h->gguf = (int)i;
            h->expert = kind == DS4_HF_FP4 ? e : -1;
            h->shard = t->layer < 0 ? 0 : t->layer + 1;
            ds4_layout_hf_name(t->lt, e, h->name, sizeof h->name);
            if (kind == DS4_HF_FP4 && t->ne[0] % 32)
                die("--hf-out: FP4 experts need rows of a multiple of 32 (got %" PRIu64 ")", t->ne[0]);
            h->nd = t->nd == 1 ? 1 : 2;
            if (h->nd == 1) h->shape[0] = t->ne[0];
            else { h->shape[0] = t->ne[1]; h->shape[1] = t->ne[0]; }
            uint64_t nel = h->nd == 1 ? h->shape[0] : h->shape[0] * h->shape[1];
            switch (kind) {
            case DS4_HF_F32: h->nbytes = 4 * nel; break;
            case DS4_HF_BF16: h->nbytes = 2 * nel; break;
            case DS4_HF_I64: h->nbytes = 8 * nel; break;
            case DS4_HF_FP8:
                h->nbytes = nel;
                h->sshape[0] = (h->shape[0] + 127) / 128;
                h->sshape[1] = (h->shape[1] + 127) / 128;
                h->snbytes = h->sshape[0] * h->sshape[1];
                break;
            case DS4_HF_FP4:
                h->shape[1] /= 2;
                h->nbytes = h->shape[0] * h->shape[1];
                h->sshape[0] = h->shape[0];
                h->sshape[1] = h->shape[1] * 2 / 32;
                h->snbytes = h->sshape[0] * h->sshape[1];
                break;
            }
            h->off = shard_bytes[h->shard];
            shard_bytes[h->shard] += h->nbytes;
            if (h->snbytes) {
                h->soff = shard_bytes[h->shard];
                shard_bytes[h->shard] += h->snbytes;
            }
        }
    }
    /* Headers (JSON padded with spaces to a multiple of 8, as safetensors
     * writers do) and the index. */
    json_t *wm = json_object();
    FILE **fs = calloc((size_t)n_shards, sizeof *fs);
    uint64_t *data0 = calloc((size_t)n_shards, sizeof *data0);
    char (*fname)[64] = calloc((size_t)n_shards, sizeof *fname);
    if (!wm || !fs || !data0 || !fname) die("out of memory");
    static const char *DT[] = {"F32", "BF16", "F8_E4M3", "I8", "I64"};
    for (int s = 0; s < n_shards; s++) {
        snprintf(fname[s], sizeof fname[s], "model-%05d-of-%05d.safetensors", s + 1, n_shards);
        json_t *hdr = json_object();
        json_object_set_new(hdr, "__metadata__", json_pack("{s:s}", "format", "pt"));
        for (size_t i = 0; i < nh; i++) {
            const hf_t *h = &H[i];
            if (h->shard != s) continue;
            json_t *shape = h->nd == 1 ? json_pack("[I]", (json_int_t)h->shape[0])
                                       : json_pack("[I,I]", (json_int_t)h->shape[0], (json_int_t)h->shape[1]);
            json_object_set_new(hdr, h->name, json_pack("{s:s,s:o,s:[I,I]}", "dtype", DT[h->kind], "shape", shape,
                                                        "data_offsets", (json_int_t)h->off,
                                                        (json_int_t)(h->off + h->nbytes)));
            json_object_set_new(wm, h->name, json_string(fname[s]));
            if (h->snbytes) {
                char sn[128];
                snprintf(sn, sizeof sn, "%.*s.scale", (int)(strlen(h->name) - 7), h->name);
                json_object_set_new(hdr, sn, json_pack("{s:s,s:[I,I],s:[I,I]}", "dtype", "F8_E8M0", "shape",
                                                       (json_int_t)h->sshape[0], (json_int_t)h->sshape[1],
                                                       "data_offsets", (json_int_t)h->soff,
                                                       (json_int_t)(h->soff + h->snbytes)));
                json_object_set_new(wm, sn, json_string(fname[s]));
            }
        }
        char *js = json_dumps(hdr, JSON_COMPACT | JSON_ENSURE_ASCII);
        json_decref(hdr);
        if (!js) die("out of memory");
        size_t jl = strlen(js), pad = (8 - jl % 8) % 8;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, fname[s]);
        fs[s] = fopen(path, "w+b");
        if (!fs[s]) die("%s: %s", path, strerror(errno));
        uint64_t hl = jl + pad;
        uint8_t le[8];
        for (int k = 0; k < 8; k++) le[k] = (uint8_t)(hl >> (8 * k));
        if (fwrite(le, 8, 1, fs[s]) != 1 || fwrite(js, 1, jl, fs[s]) != jl) die("%s: write failed", path);
        for (size_t k = 0; k < pad; k++) fputc(' ', fs[s]);
        data0[s] = 8 + hl;
        free(js);
    }
    uint64_t total = 0;
    for (int s = 0; s < n_shards; s++) total += shard_bytes[s];
    json_t *index = json_pack("{s:{s:I},s:o}", "metadata", "total_size", (json_int_t)total, "weight_map", wm);
    if (!index) die("out of memory");
    write_json_file(dir, "model.safetensors.index.json", index);
    json_decref(index);

    /* Data: generate each GGUF tensor's f16 values (one expert at a time
     * for the stacked experts), encode, write at the planned offsets. */
    genctx G = {seed, calloc((size_t)c->n_expert, 4), calloc((size_t)c->n_used, 4)};
    if (!G.perm || !G.swaps) die("out of memory");
    for (uint32_t e = 0; e < (uint32_t)c->n_expert; e++) G.perm[e] = e;
    for (size_t i = 0; i < nh; i++) {
        const hf_t *h = &H[i];
        const tspec *t = &L->t[h->gguf];
        const uint64_t key = name_key(seed, t->name);
        const uint64_t per = t->ne[0] * t->ne[1];   /* elements of one expert (or all) */
        const uint64_t nel = h->expert >= 0 ? per : t->ne[0] * t->ne[1] * t->ne[2];
        uint8_t *raw = malloc(nel * 4 + 16);
        float *x = malloc(nel * 4 + 16);
        uint8_t *w = malloc(h->nbytes + 16), *sc = malloc(h->snbytes + 16);
        if (!raw || !x || !w || !sc) die("out of memory");
        if (h->kind == DS4_HF_I64) {
            gen_units(&G, t, key, 0, t->units, raw);
            for (uint64_t k = 0; k < nel; k++) {
                int32_t v;
                memcpy(&v, raw + 4 * k, 4);
                int64_t v64 = v;
                memcpy(w + 8 * k, &v64, 8);
            }
        } else {
            const uint64_t e0 = h->expert >= 0 ? (uint64_t)h->expert * per : 0;
            if (e0 % t->unit_elems || (h->expert >= 0 && per % t->unit_elems))
                die("--hf-out: expert size %" PRIu64 " is not a multiple of %" PRIu64, per, t->unit_elems);
            const uint64_t u0 = e0 / t->unit_elems, nu = (nel + t->unit_elems - 1) / t->unit_elems;
            gen_units(&G, t, key, u0, nu, raw);
            for (uint64_t k = 0; k < nel; k++) {
                if (t->type == GGML_F32) memcpy(&x[k], raw + 4 * k, 4);
                else { uint16_t hv; memcpy(&hv, raw + 2 * k, 2); x[k] = ds4_f16_to_f32(hv); }
            }
            hf_encode(h, x, w, sc);
        }
        FILE *f = fs[h->shard];
        if (fseeko(f, (off_t)(data0[h->shard] + h->off), SEEK_SET) || fwrite(w, 1, h->nbytes, f) != h->nbytes ||
            (h->snbytes && (fseeko(f, (off_t)(data0[h->shard] + h->soff), SEEK_SET) ||
                            fwrite(sc, 1, h->snbytes, f) != h->snbytes)))
            die("%s/%s: write failed", dir, fname[h->shard]);
        free(raw);
        free(x);
        free(w);
        free(sc);
    }
    for (int s = 0; s < n_shards; s++)
        if (fclose(fs[s])) die("%s/%s: write failed", dir, fname[s]);
    free(G.perm);
    free(G.swaps);

    /* config.json, in the key names of DeepSeek's release. */
    json_t *ratios = json_array();
    for (int il = 0; il < c->n_layer; il++) json_array_append_new(ratios, json_integer(c->ratios[il]));
    json_t *cfg = json_pack("{s:[s],s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}",
        "architectures", "DeepseekV4ForCausalLM", "model_type", "deepseek_v4",
        "vocab_size", (json_int_t)c->n_vocab, "hidden_size", (json_int_t)c->n_embd,
        "num_hidden_layers", (json_int_t)c->n_layer, "num_attention_heads", (json_int_t)c->n_head,
        "num_key_value_heads", (json_int_t)c->n_head_kv, "head_dim", (json_int_t)c->key_len,
        "qk_rope_head_dim", (json_int_t)c->n_rot, "q_lora_rank", (json_int_t)c->q_lora,
        "o_lora_rank", (json_int_t)c->o_lora, "o_groups", (json_int_t)c->o_groups,
        "sliding_window", (json_int_t)c->n_swa, "index_n_heads", (json_int_t)c->idx_heads,
        "index_head_dim", (json_int_t)c->idx_dim, "index_topk", (json_int_t)c->idx_topk,
        "n_routed_experts", (json_int_t)c->n_expert, "num_experts_per_tok", (json_int_t)c->n_used,
        "n_shared_experts", (json_int_t)c->n_shared, "moe_intermediate_size", (json_int_t)c->n_ff,
        "num_hash_layers", (json_int_t)c->n_hash);
    json_object_set_new(cfg, "hc_mult", json_integer(c->n_hc));
    json_object_set_new(cfg, "hc_sinkhorn_iters", json_integer(c->hc_iters));
    json_object_set_new(cfg, "hc_eps", json_real(c->hc_eps));
    json_object_set_new(cfg, "rms_norm_eps", json_real(c->rms_eps));
    json_object_set_new(cfg, "rope_theta", json_real(c->rope_base));
    json_object_set_new(cfg, "compress_rope_theta", json_real(c->compress_base));
    json_object_set_new(cfg, "rope_scaling", json_pack("{s:s,s:f,s:I,s:f,s:f}", "type", "yarn", "factor",
                        c->rope_factor, "original_max_position_embeddings", (json_int_t)c->rope_orig_ctx,
                        "beta_fast", c->beta_fast, "beta_slow", c->beta_slow));
    json_object_set_new(cfg, "max_position_embeddings", json_integer(c->ctx));
    json_object_set_new(cfg, "routed_scaling_factor", json_real(c->expert_scale));
    json_object_set_new(cfg, "norm_topk_prob", json_boolean(c->expert_norm));
    json_object_set_new(cfg, "scoring_func", json_string("sqrtsoftplus"));
    json_object_set_new(cfg, "swiglu_limit", json_real(c->clamp[0]));
    json_object_set_new(cfg, "compress_ratios", ratios);
    json_object_set_new(cfg, "torch_dtype", json_string("bfloat16"));
    json_object_set_new(cfg, "expert_dtype", json_string("fp4"));
    json_object_set_new(cfg, "quantization_config",
                        json_pack("{s:s,s:s,s:s,s:[i,i]}", "quant_method", "fp8", "fmt", "e4m3", "scale_fmt",
                                  "ue8m0", "weight_block_size", 128, 128));
    for (int il = 1; il < c->n_clamp && il < c->n_layer; il++)
        if (c->clamp[il] != c->clamp[0]) die("--hf-out: config.json has one swiglu_limit for all layers");
    write_json_file(dir, "config.json", cfg);
    json_decref(cfg);

    /* Tokenizer: tokenizer.ggml.tokens/token_type/merges of --vocab. */
    const gguf_kv *tk = gguf_find(vocab, "tokenizer.ggml.tokens"), *ty = gguf_find(vocab, "tokenizer.ggml.token_type"),
                  *mg = gguf_find(vocab, "tokenizer.ggml.merges");
    if (!ty || !mg || ty->type != GGUF_ARRAY || mg->type != GGUF_ARRAY || ty->v.arr.n != tk->v.arr.n)
        die("--vocab: tokenizer.ggml.token_type / merges missing (needed for --hf-out)");
    json_t *jv = json_object(), *added = json_array(), *jm = json_array();
    char *bos = NULL, *eos = NULL, *pad = NULL;
    uint64_t ids[3] = {0, 1, 1};
    const char *idk[3] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id"};
    for (int k = 0; k < 3; k++) gguf_get_u64(vocab, idk[k], &ids[k]);
    for (uint64_t id = 0; id < tk->v.arr.n; id++) {
        gguf_str s;
        int64_t type;
        if (gguf_arr_str(tk, id, &s) || gguf_arr_i64(ty, id, &type)) die("--vocab: bad token %" PRIu64, id);
        json_t *str = json_stringn(s.p, (size_t)s.len);
        if (!str) die("--vocab: token %" PRIu64 " is not UTF-8", id);
        if (id == ids[0]) bos = strndup(s.p, (size_t)s.len);
        if (id == ids[1]) eos = strndup(s.p, (size_t)s.len);
        if (id == ids[2]) pad = strndup(s.p, (size_t)s.len);
        if (type == 3 || type == 4) {
            json_array_append_new(added, json_pack("{s:I,s:o,s:b,s:b,s:b,s:b,s:b}", "id", (json_int_t)id,
                                                   "content", str, "single_word", 0, "lstrip", 0, "rstrip", 0,
                                                   "normalized", 0, "special", type == 3));
        } else if (type == 1) {
            json_object_set_new(jv, json_string_value(str), json_integer((json_int_t)id));
            json_decref(str);
        } else {
            json_decref(str);   /* unused ids stay unassigned */
        }
    }
    for (uint64_t i = 0; i < mg->v.arr.n; i++) {
        gguf_str s;
        if (gguf_arr_str(mg, i, &s)) die("--vocab: bad merge %" PRIu64, i);
        json_array_append_new(jm, json_stringn(s.p, (size_t)s.len));
    }
    json_t *tok = json_pack("{s:s,s:n,s:n,s:o,s:n,s:n,s:n,s:n,s:{s:s,s:n,s:n,s:n,s:b,s:b,s:b,s:o,s:o}}",
                            "version", "1.0", "truncation", "padding", "added_tokens", added, "normalizer",
                            "pre_tokenizer", "post_processor", "decoder", "model", "type", "BPE", "dropout",
                            "unk_token", "continuing_subword_prefix", "fuse_unk", 0, "byte_fallback", 0,
                            "ignore_merges", 0, "vocab", jv, "merges", jm);
    if (!tok || !bos || !eos || !pad) die("--hf-out: cannot build tokenizer.json (special ids outside the vocabulary?)");
    write_json_file(dir, "tokenizer.json", tok);
    json_decref(tok);
    int ab = 0, ae = 0;
    gguf_get_bool(vocab, "tokenizer.ggml.add_bos_token", &ab);
    gguf_get_bool(vocab, "tokenizer.ggml.add_eos_token", &ae);
    json_t *tc = json_pack("{s:b,s:b,s:{s:s},s:{s:s},s:{s:s},s:s}", "add_bos_token", ab, "add_eos_token", ae,
                           "bos_token", "content", bos, "eos_token", "content", eos, "pad_token", "content", pad,
                           "tokenizer_class", "LlamaTokenizerFast");
    write_json_file(dir, "tokenizer_config.json", tc);
    json_decref(tc);
    free(bos);
    free(eos);
    free(pad);
    free(H);
    free(shard_bytes);
    free(fs);
    free(data0);
    free(fname);
    fprintf(stderr, "ds4-synth: wrote %s: HF checkpoint, %d shards, %zu tensors, %" PRIu64 " bytes of data, seed %" PRIu64 "\n",
            dir, n_shards, nh, total, seed);
}

/* ------------------------------------------------------------------------ */
/* main                                                                      */
/* ------------------------------------------------------------------------ */

#define DEFAULT_VOCAB "vocab/deepseek-v4-vocab.gguf"

/* The repository's vocabulary when --vocab is not given: next to the
 * binary (a build in the checkout), in ../share/ds4 beside it (make
 * install), then relative to the current directory.  Exits with the list
 * of places tried when none has it. */
static const char *default_vocab(const char *argv0) {
    /* room for the directory plus the longest suffix below */
    static char found[4096 + 64];
    char dir[4096] = "", tried[3][4096 + 64];
    ssize_t k = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (k > 0) dir[k] = 0;
    else if (strchr(argv0, '/')) snprintf(dir, sizeof dir, "%s", argv0);
    char *slash = strrchr(dir, '/');
    int n = 0;
    if (slash) {
        *slash = 0;
        snprintf(tried[n++], sizeof tried[0], "%s/%s", dir, DEFAULT_VOCAB);
        snprintf(tried[n++], sizeof tried[0], "%s/../share/ds4/%s", dir, DEFAULT_VOCAB);
    }
    snprintf(tried[n++], sizeof tried[0], "%s", DEFAULT_VOCAB);
    for (int i = 0; i < n; i++)
        if (access(tried[i], R_OK) == 0) {
            return strcpy(found, tried[i]);   /* same size: fits */
        }
    fprintf(stderr, "ds4-synth: no --vocab given and the default vocabulary %s was not found;\n"
            "looked in:\n", DEFAULT_VOCAB);
    for (int i = 0; i < n; i++) fprintf(stderr, "  %s\n", tried[i]);
    fprintf(stderr, "pass --vocab FILE (a GGUF with tokenizer.* keys)\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *preset = NULL, *recipe = NULL, *vocab_path = NULL, *out = NULL;
    const char *hf_out = NULL, *arch = "deepseek4";
    int64_t layers = -1, threads = 0;
    uint64_t seed = 1;
    int dry = 0, list = 0, mtp = 0;
    const char **sets = calloc((size_t)argc, sizeof *sets);
    int n_sets = 0;
    if (!sets) die("out of memory");

    ds4_args a;
    ds4_args_init(&a, "ds4-synth", argc, argv, usage);
    while (ds4_args_next(&a)) {
        if (ds4_args_is(&a, NULL, "--dry-run")) dry = 1;
        else if (ds4_args_is(&a, NULL, "--list")) list = 1;
        else if (ds4_args_is(&a, NULL, "--mtp")) mtp = 1;
        else if (ds4_args_is(&a, NULL, "--limits")) {
            /* the engine's table, one key a line: key min max why */
            for (int k = 0; k < ds4_model_n_limits; k++)
                printf("deepseek4.%s\t%" PRId64 "\t%" PRId64 "\t%s\n", ds4_model_limits[k].key,
                       ds4_model_limits[k].min, ds4_model_limits[k].max, ds4_model_limits[k].why);
            free(sets);
            return 0;
        }
        else if (ds4_args_is(&a, NULL, "--arch")) arch = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--preset")) preset = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--recipe")) recipe = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--vocab")) vocab_path = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--hf-out")) hf_out = ds4_args_value(&a);
        else if (ds4_args_is(&a, "-o", "--output")) out = ds4_args_value(&a);
        else if (ds4_args_is(&a, NULL, "--layers")) layers = ds4_args_i64(&a, 1, DS4_MAX_LAYER);
        else if (ds4_args_is(&a, NULL, "--seed")) seed = ds4_args_u64(&a);
        else if (ds4_args_is(&a, NULL, "--threads")) threads = ds4_args_i64(&a, 1, MAX_THREADS);
        else if (ds4_args_is(&a, NULL, "--set")) sets[n_sets++] = ds4_args_value(&a);
        else ds4_args_unknown(&a);
    }
    const int glm = !strcmp(arch, "glm-dsa") ? 1 : !strcmp(arch, "glm5-next") ? 2 : 0;
    if (!glm && strcmp(arch, "deepseek4"))
        usage_error("--arch \"%s\" is unknown (deepseek4, glm-dsa or glm5-next)", arch);
    if (glm) {
        if (!preset) usage_error("--preset is required (%s)", glm == 2 ? "glm5-next: tiny or flash53" : "glm-dsa: tiny or glm52");
        if (mtp) usage_error("--mtp is not supported with --arch %s (%s)", arch,
                             glm == 2 ? "its NextN block is not bound" : "tests/glm_gguf.py --set nextn=1 writes its NextN block");
        if (hf_out) usage_error("--hf-out is not supported with --arch %s (DeepSeek's checkpoint layout only)", arch);
        if (n_sets) usage_error("--set is not supported with --arch %s (deepseek4.* keys only)", arch);
        if (!recipe) usage_error("--recipe is required (%s: f32, f16 or q8_0)", arch);
        if (strcmp(recipe, "f32") && strcmp(recipe, "f16") && strcmp(recipe, "q8_0"))
            usage_error("--recipe \"%s\" is unknown for %s (f32, f16 or q8_0)", recipe, arch);
    }
    if (!preset) usage_error("--preset is required (tiny, medium or flash)");
    /* --hf-out alone: the checkpoint holds the f16 recipe's weights. */
    if (hf_out && !recipe && !out) recipe = "f16";
    if (hf_out && mtp) usage_error("--mtp cannot be combined with --hf-out (the checkpoint has no MTP layout)");
    if (hf_out && dry) usage_error("--hf-out cannot be combined with --dry-run");
    if (!recipe) usage_error("--recipe is required (f16, f32, q2 or q4)");
    if (!glm && strcmp(recipe, "f16") && strcmp(recipe, "f32") && strcmp(recipe, "q2") && strcmp(recipe, "q4"))
        usage_error("--recipe \"%s\" is unknown (f16, f32, q2 or q4)", recipe);
    if (!out && !dry && !hf_out) usage_error("-o OUT.gguf is required (or --dry-run, or --hf-out DIR)");
    if (list && !dry) usage_error("--list only applies to --dry-run");
    if (!vocab_path) vocab_path = default_vocab(argv[0]);

    config c;
    memset(&c, 0, sizeof c);
    if (glm == 2) {
        if (set_g5n_preset(&c, preset))
            usage_error("--preset \"%s\" is unknown for glm5-next (tiny or flash53)", preset);
    } else if (glm) {
        if (set_glm_preset(&c, preset)) usage_error("--preset \"%s\" is unknown for glm-dsa (tiny or glm52)", preset);
    } else if (set_preset(&c, preset)) usage_error("--preset \"%s\" is unknown (tiny, medium or flash)", preset);
    if (layers > 0) c.n_layer = layers;
    for (int i = 0; i < n_sets; i++) apply_set(&c, sets[i]);
    free(sets);

    char *err = NULL;
    gguf_file *vocab = gguf_open(vocab_path, &err);
    if (!vocab) die("--vocab: %s", err ? err : vocab_path);
    const gguf_kv *tok = gguf_find(vocab, "tokenizer.ggml.tokens");
    if (!tok || tok->type != GGUF_ARRAY || tok->v.arr.type != GGUF_STRING || !tok->v.arr.n)
        die("--vocab %s: no tokenizer.ggml.tokens string array (not a vocabulary GGUF)", vocab_path);
    if (tok->v.arr.n > (1u << 24)) die("--vocab %s: %" PRIu64 " tokens is too many", vocab_path, tok->v.arr.n);
    c.n_vocab = (int64_t)tok->v.arr.n;
    uint64_t vs;
    if (!gguf_get_u64(vocab, "deepseek4.vocab_size", &vs) && vs != (uint64_t)c.n_vocab)
        die("--vocab %s: deepseek4.vocab_size = %" PRIu64 " but it has %" PRId64 " tokens", vocab_path, vs,
            c.n_vocab);
    if (out) {
        struct stat so, sv;
        if (!stat(out, &so) && !stat(vocab_path, &sv) && so.st_dev == sv.st_dev && so.st_ino == sv.st_ino)
            usage_error("-o %s is the --vocab file", out);
    }

    if (!threads) {
        long nc = ds4_default_threads();
        threads = nc > 8 ? 8 : nc;
    }
    const int wide = !glm && !strcmp(recipe, "f32");
    const int quantized = strcmp(recipe, "f16") != 0 && !wide;
    if (glm) finalize_glm(&c);
    else finalize_config(&c, quantized, recipe);
    init_tables();
    layout L = {0};
    build_layout(&c, wide ? "f16" : recipe, mtp, &L);
    if (wide) widen_f16(&L);
    meta m = {NULL, 0, 0};
    write_meta(&m, &c, vocab, preset, recipe, seed);
    const uint64_t total = file_size(&L, m.bytes);

    if (hf_out) {
        /* Same weights as the f16 recipe (the GGUF layout names them). */
        layout LF = {0};
        build_layout(&c, "f16", 0, &LF);
        write_hf(hf_out, &LF, &c, vocab, seed);
        free(LF.t);
        free(LF.lt);
    }
    if (dry && glm) {
        printf("ds4-synth: arch %s, preset %s, recipe %s, %" PRId64 " layers (%" PRId64 " dense), "
               "vocab %" PRId64 " (%s), seed %" PRIu64 "\n", arch, preset, recipe, c.n_layer, c.n_dense, c.n_vocab,
               vocab_path, seed);
        report(stdout, &L, &c, total, list);
        printf("dry run: nothing written\n");
    } else if (dry) {
        printf("ds4-synth: preset %s, recipe %s, %" PRId64 " layers, ratios", preset, recipe, c.n_layer);
        for (int il = 0; il < c.n_layer && il < 8; il++) printf("%s%" PRId64, il ? "," : " ", c.ratios[il]);
        printf("%s, vocab %" PRId64 " (%s), seed %" PRIu64 "\n", c.n_layer > 8 ? ",..." : "", c.n_vocab,
               vocab_path, seed);
        report(stdout, &L, &c, total, list);
        printf("dry run: nothing written\n");
    } else if (out) {
        check_space(out, total);
        write_model(out, &L, &c, vocab, preset, recipe, seed, total, (int)threads);
    }
    gguf_close(vocab);
    free(L.t);
    free(L.lt);
    free(c.ratios);
    free(c.clamp);
    return 0;
}
