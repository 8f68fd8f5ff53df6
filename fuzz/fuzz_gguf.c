/*
 * fuzz_gguf.c -- libFuzzer target for the GGUF container, the DeepSeek V4
 * binder and --inspect: every input goes through gguf_open_mem(),
 * ds4_weights_bind() and ds4_inspect_gguf() (output to /dev/null).
 *
 * Owns: the fuzz entry point and its seed generator.  Must not: weaken any
 * check of the code under test.
 *
 * Build and run (from the repo root):
 *   clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
 *         -fno-sanitize-recover=undefined \
 *         -Isrc fuzz/fuzz_gguf.c src/gguf/gguf.c src/gguf/model.c src/gguf/inspect.c \
 *         src/base/hash.c src/base/buf.c -lm -o build/fuzz_gguf
 *   cc -std=c11 -D_GNU_SOURCE -DDS4_FUZZ_SEEDGEN -Isrc fuzz/fuzz_gguf.c \
 *         src/gguf/gguf.c src/gguf/model.c src/base/buf.c -lm -o build/fuzz_gguf_seeds
 *   mkdir -p build/fuzz_corpus && build/fuzz_gguf_seeds build/fuzz_corpus
 *   build/fuzz_gguf -max_total_time=60 -max_len=65536 build/fuzz_corpus
 *
 * The seed generator writes a micro DeepSeek V4 model (every tensor kind,
 * dims of a few elements, ~17 KB: small enough for the fuzzer to mutate
 * usefully) and a micro vocab-only file.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf/model.h"

#ifndef DS4_FUZZ_SEEDGEN

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static FILE *devnull;
    if (!devnull) devnull = fopen("/dev/null", "w");
    char *err = NULL;
    gguf_file *gf = gguf_open_mem(data, size, "fuzz.gguf", &err);
    free(err);
    if (!gf) return 0;
    ds4_weights w;
    err = NULL;
    if (ds4_weights_bind(gf, &w, &err) == 0) {
        (void)ds4_weights_active_bytes(&w);
        ds4_weights_free(&w);
    }
    free(err);
    err = NULL;
    ds4_inspect_gguf(gf, devnull, &err);
    free(err);
    gguf_close(gf);
    return 0;
}

#else /* seed generator */

enum { L = 3, D = 8, V = 8, H = 2, HD = 8, ROT = 4, QL = 8, OL = 8, G = 1, E = 2, K = 1,
       F = 8, NH = 1, IH = 1, ID = 4, NHC = 1 };
static const uint32_t RATIOS[L] = {0, 2, 3};   /* window, overlap+indexer, plain compressed */

static uint64_t total;
static void t(gguf_writer *w, const char *name, uint32_t nd, uint64_t a, uint64_t b, uint64_t c, uint32_t type) {
    uint64_t ne[3] = {a, b, c}, rows = 1;
    for (uint32_t d = 1; d < nd; d++) rows *= ne[d];
    total += rows * ggml_row_size(type, a);
    gguf_w_tensor(w, name, nd, ne, type);
}
static void tl(gguf_writer *w, int il, const char *s, uint32_t nd, uint64_t a, uint64_t b, uint64_t c,
               uint32_t type) {
    char n[96];
    snprintf(n, sizeof n, "blk.%d.%s", il, s);
    t(w, n, nd, a, b, c, type);
}

static void tokenizer(gguf_writer *w) {
    gguf_str toks[V] = {{"<s>", 3}, {"</s>", 4}, {"a", 1}, {"b", 1}, {"ab", 2}, {"c", 1}, {"\xc4\xa0", 2}, {"d", 1}};
    int32_t types[V] = {3, 3, 1, 1, 1, 1, 1, 1};
    gguf_str merges[1] = {{"a b", 3}};
    gguf_w_str(w, "tokenizer.ggml.model", "gpt2", 4);
    gguf_w_str(w, "tokenizer.ggml.pre", "joyai-llm", 9);
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, V);
    gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_I32, types, V);
    gguf_w_arr_str(w, "tokenizer.ggml.merges", merges, 1);
    gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 0);
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 1);
}

static int finish(gguf_writer *w) {
    char *err = NULL;
    static const uint8_t zero[256];
    gguf_writer_begin_data(w);
    for (uint64_t left = total; left;) {
        size_t k = left < sizeof zero ? (size_t)left : sizeof zero;
        gguf_writer_write(w, zero, k);
        left -= k;
    }
    if (gguf_writer_close(w, &err)) { fprintf(stderr, "%s\n", err); free(err); return 1; }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]); return 2; }
    char path[1024];
    char *err = NULL;

    snprintf(path, sizeof path, "%s/micro-vocab.gguf", argv[1]);
    gguf_writer *w = gguf_writer_open(path, &err);
    if (!w) { fprintf(stderr, "%s\n", err); return 1; }
    gguf_w_str(w, "general.architecture", "deepseek4", 9);
    gguf_w_u32(w, "deepseek4.vocab_size", V);
    tokenizer(w);
    total = 0;
    if (finish(w)) return 1;

    snprintf(path, sizeof path, "%s/micro-model.gguf", argv[1]);
    w = gguf_writer_open(path, &err);
    if (!w) { fprintf(stderr, "%s\n", err); return 1; }
    gguf_w_str(w, "general.architecture", "deepseek4", 9);
    gguf_w_u32(w, "deepseek4.block_count", L);
    gguf_w_u32(w, "deepseek4.embedding_length", D);
    gguf_w_u32(w, "deepseek4.vocab_size", V);
    gguf_w_u32(w, "deepseek4.attention.head_count", H);
    gguf_w_u32(w, "deepseek4.attention.head_count_kv", 1);
    gguf_w_u32(w, "deepseek4.attention.key_length", HD);
    gguf_w_u32(w, "deepseek4.attention.value_length", HD);
    gguf_w_u32(w, "deepseek4.attention.q_lora_rank", QL);
    gguf_w_u32(w, "deepseek4.attention.output_lora_rank", OL);
    gguf_w_u32(w, "deepseek4.attention.output_group_count", G);
    gguf_w_u32(w, "deepseek4.attention.sliding_window", 4);
    gguf_w_u32(w, "deepseek4.attention.indexer.head_count", IH);
    gguf_w_u32(w, "deepseek4.attention.indexer.key_length", ID);
    gguf_w_u32(w, "deepseek4.attention.indexer.top_k", 2);
    gguf_w_arr(w, "deepseek4.attention.compress_ratios", GGUF_U32, RATIOS, L);
    gguf_w_f32(w, "deepseek4.attention.compress_rope_freq_base", 160000.0f);
    gguf_w_f32(w, "deepseek4.attention.layer_norm_rms_epsilon", 1e-6f);
    gguf_w_u32(w, "deepseek4.rope.dimension_count", ROT);
    gguf_w_f32(w, "deepseek4.rope.freq_base", 10000.0f);
    gguf_w_f32(w, "deepseek4.rope.scaling.factor", 16.0f);
    gguf_w_u32(w, "deepseek4.rope.scaling.original_context_length", 65536);
    gguf_w_f32(w, "deepseek4.rope.scaling.yarn_beta_fast", 32.0f);
    gguf_w_f32(w, "deepseek4.rope.scaling.yarn_beta_slow", 1.0f);
    gguf_w_u32(w, "deepseek4.expert_count", E);
    gguf_w_u32(w, "deepseek4.expert_used_count", K);
    gguf_w_u32(w, "deepseek4.expert_shared_count", 1);
    gguf_w_u32(w, "deepseek4.expert_feed_forward_length", F);
    gguf_w_f32(w, "deepseek4.expert_weights_scale", 1.5f);
    gguf_w_bool(w, "deepseek4.expert_weights_norm", 1);
    gguf_w_u32(w, "deepseek4.hash_layer_count", NH);
    float cl[L] = {10, 10, 10};
    gguf_w_arr(w, "deepseek4.swiglu_clamp_exp", GGUF_F32, cl, L);
    gguf_w_u32(w, "deepseek4.hyper_connection.count", NHC);
    gguf_w_u32(w, "deepseek4.hyper_connection.sinkhorn_iterations", 20);
    gguf_w_f32(w, "deepseek4.hyper_connection.epsilon", 1e-6f);
    tokenizer(w);
    const uint32_t M = GGML_F16, N32 = GGML_F32;
    const uint64_t hcd = NHC * D, mix = (2 + NHC) * NHC;
    total = 0;
    t(w, "token_embd.weight", 2, D, V, 0, M);
    t(w, "output_hc_fn.weight", 2, hcd, NHC, 0, M);
    t(w, "output_hc_base.weight", 1, NHC, 0, 0, N32);
    t(w, "output_hc_scale.weight", 1, 1, 0, 0, N32);
    t(w, "output_norm.weight", 1, D, 0, 0, N32);
    t(w, "output.weight", 2, D, V, 0, M);
    for (int il = 0; il < L; il++) {
        tl(w, il, "hc_attn_fn.weight", 2, hcd, mix, 0, M);
        tl(w, il, "hc_attn_scale.weight", 1, 3, 0, 0, N32);
        tl(w, il, "hc_attn_base.weight", 1, mix, 0, 0, N32);
        tl(w, il, "hc_ffn_fn.weight", 2, hcd, mix, 0, M);
        tl(w, il, "hc_ffn_scale.weight", 1, 3, 0, 0, N32);
        tl(w, il, "hc_ffn_base.weight", 1, mix, 0, 0, N32);
        tl(w, il, "attn_norm.weight", 1, D, 0, 0, N32);
        tl(w, il, "attn_q_a.weight", 2, D, QL, 0, M);
        tl(w, il, "attn_q_a_norm.weight", 1, QL, 0, 0, N32);
        tl(w, il, "attn_q_b.weight", 2, QL, H * HD, 0, M);
        tl(w, il, "attn_kv.weight", 2, D, HD, 0, M);
        tl(w, il, "attn_kv_a_norm.weight", 1, HD, 0, 0, N32);
        tl(w, il, "attn_sinks.weight", 1, H, 0, 0, N32);
        tl(w, il, "attn_output_a.weight", 2, H * HD / G, G * OL, 0, M);
        tl(w, il, "attn_output_b.weight", 2, G * OL, D, 0, M);
        uint32_t r = RATIOS[il];
        if (r) {
            uint64_t coff = il == 1 ? 2 : 1;
            tl(w, il, "attn_compressor_ape.weight", 2, coff * HD, r, 0, M);
            tl(w, il, "attn_compressor_kv.weight", 2, D, coff * HD, 0, M);
            tl(w, il, "attn_compressor_gate.weight", 2, D, coff * HD, 0, M);
            tl(w, il, "attn_compressor_norm.weight", 1, HD, 0, 0, N32);
            if (coff == 2) {
                tl(w, il, "indexer.attn_q_b.weight", 2, QL, IH * ID, 0, M);
                tl(w, il, "indexer.proj.weight", 2, D, IH, 0, M);
                tl(w, il, "indexer_compressor_ape.weight", 2, 2 * ID, r, 0, M);
                tl(w, il, "indexer_compressor_kv.weight", 2, D, 2 * ID, 0, M);
                tl(w, il, "indexer_compressor_gate.weight", 2, D, 2 * ID, 0, M);
                tl(w, il, "indexer_compressor_norm.weight", 1, ID, 0, 0, N32);
            }
        }
        tl(w, il, "ffn_norm.weight", 1, D, 0, 0, N32);
        tl(w, il, "ffn_gate_inp.weight", 2, D, E, 0, M);
        if (il >= NH) tl(w, il, "exp_probs_b.bias", 1, E, 0, 0, N32);
        else tl(w, il, "ffn_gate_tid2eid.weight", 2, K, V, 0, GGML_I32);
        tl(w, il, "ffn_gate_exps.weight", 3, D, F, E, M);
        tl(w, il, "ffn_up_exps.weight", 3, D, F, E, M);
        tl(w, il, "ffn_down_exps.weight", 3, F, D, E, M);
        tl(w, il, "ffn_gate_shexp.weight", 2, D, F, 0, M);
        tl(w, il, "ffn_up_shexp.weight", 2, D, F, 0, M);
        tl(w, il, "ffn_down_shexp.weight", 2, F, D, 0, M);
    }
    if (finish(w)) return 1;

    /* Sanity: the micro model must bind, or the fuzzer explores nothing. */
    gguf_file *gf = gguf_open(path, &err);
    if (!gf) { fprintf(stderr, "%s\n", err); return 1; }
    ds4_weights wt;
    if (ds4_weights_bind(gf, &wt, &err)) { fprintf(stderr, "%s\n", err); return 1; }
    ds4_weights_free(&wt);
    printf("%s: %llu bytes, binds\n", path, (unsigned long long)gf->size);
    gguf_close(gf);
    return 0;
}

#endif
