/*
 * inspect.c -- `ds4 --inspect`: a human-readable report of a GGUF
 * (implements ds4_inspect() of ds4.h and ds4_inspect_gguf() of model.h).
 *
 * Owns: the report format only: metadata summary, tokenizer summary, shape
 * table, per-layer kinds, tensor type histogram, weights by kind (each
 * tensor's family in the layout table, gguf/layout.h), sizes and the
 * memory estimate.  Must not: validate on its own (gguf.c and model.c do) or touch
 * tensor data.  Works on vocab-only files (no tensors).  Every key, name and
 * string taken from the file is printed through ds4_escape (GGUF_ESC,
 * gguf_print_value): the file is untrusted and the report goes to a
 * terminal.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ds4.h"
#include "base/hash.h"
#include "gguf/layout.h"
#include "gguf/model.h"

static void human(char *buf, size_t n, uint64_t b) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int i = 0;
    while (v >= 1024 && i < 4) { v /= 1024; i++; }
    if (i == 0) snprintf(buf, n, "%" PRIu64 " B", b);
    else snprintf(buf, n, "%.2f %s (%" PRIu64 " bytes)", v, u[i], b);
}

static void print_str(FILE *out, const char *p, uint64_t len) {
    gguf_kv tmp = {.key = NULL, .type = GGUF_STRING};
    tmp.v.s.p = p;
    tmp.v.s.len = len;
    gguf_print_value(out, &tmp, 0);
}

/* The text of token `id` from tokenizer.ggml.tokens, if any. */
static void print_token(FILE *out, const gguf_file *gf, const char *idkey) {
    const gguf_kv *kv = gguf_find(gf, idkey);
    if (!kv) return;
    const char *short_name = strrchr(idkey, '.') + 1;
    fprintf(out, "  %-22s ", short_name);
    gguf_print_value(out, kv, 0);
    int64_t id;
    gguf_str s;
    const gguf_kv *toks = gguf_find(gf, "tokenizer.ggml.tokens");
    if (gguf_get_i64(gf, idkey, &id) == 0 && id >= 0 && gguf_arr_str(toks, (uint64_t)id, &s) == 0) {
        fputs("  ", out);
        print_str(out, s.p, s.len);
    }
    fputc('\n', out);
}

static void print_tokenizer(FILE *out, const gguf_file *gf) {
    const gguf_kv *model = gguf_find(gf, "tokenizer.ggml.model");
    const gguf_kv *toks = gguf_find(gf, "tokenizer.ggml.tokens");
    if (!model && !toks) {
        fprintf(out, "\ntokenizer: none\n");
        return;
    }
    fprintf(out, "\ntokenizer:\n");
    const char *keys[] = {"tokenizer.ggml.model", "tokenizer.ggml.pre"};
    for (int i = 0; i < 2; i++) {
        const gguf_kv *kv = gguf_find(gf, keys[i]);
        fprintf(out, "  %-22s ", strrchr(keys[i], '.') + 1);
        if (kv) gguf_print_value(out, kv, 0); else fputs("(absent)", out);
        fputc('\n', out);
    }
    const char *arrs[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"};
    const char *label[] = {"vocab size", "merges", "token types"};
    for (int i = 0; i < 3; i++) {
        const gguf_kv *kv = gguf_find(gf, arrs[i]);
        fprintf(out, "  %-22s ", label[i]);
        if (!kv) fputs("(absent)", out);
        else if (kv->type != GGUF_ARRAY) fputs("(not an array)", out);
        else fprintf(out, "%" PRIu64, kv->v.arr.n);
        fputc('\n', out);
    }
    print_token(out, gf, "tokenizer.ggml.bos_token_id");
    print_token(out, gf, "tokenizer.ggml.eos_token_id");
    print_token(out, gf, "tokenizer.ggml.padding_token_id");
    const gguf_kv *tpl = gguf_find(gf, "tokenizer.chat_template");
    if (tpl && tpl->type == GGUF_STRING) fprintf(out, "  %-22s %" PRIu64 " bytes\n", "chat template", tpl->v.s.len);
    /* Any other tokenizer key (add_bos_token, ...), abbreviated. */
    static const char *done[] = {"tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
                                 "tokenizer.ggml.merges", "tokenizer.ggml.token_type",
                                 "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                 "tokenizer.ggml.padding_token_id", "tokenizer.chat_template"};
    for (uint64_t i = 0; i < gf->n_kv; i++) {
        const gguf_kv *kv = &gf->kv[i];
        if (strncmp(kv->key, "tokenizer.", 10)) continue;
        int skip = 0;
        for (size_t k = 0; k < sizeof done / sizeof done[0]; k++) skip |= !strcmp(kv->key, done[k]);
        if (skip) continue;
        fprintf(out, "  %-22s ", GGUF_ESC(kv->key + 10));
        gguf_print_value(out, kv, 8);
        fputc('\n', out);
    }
}

static void print_metadata(FILE *out, const gguf_file *gf) {
    fprintf(out, "\nmetadata (%" PRIu64 " keys):\n", gf->n_kv);
    for (uint64_t i = 0; i < gf->n_kv; i++) {
        const gguf_kv *kv = &gf->kv[i];
        /* The tokenizer arrays are summarised separately. */
        if (!strncmp(kv->key, "tokenizer.", 10)) continue;
        fprintf(out, "  %-50s ", GGUF_ESC(kv->key));
        gguf_print_value(out, kv, 16);
        fputc('\n', out);
    }
}

static void print_shapes(FILE *out, const ds4_config *c) {
    fprintf(out, "\nshape:\n");
    if (c->arch == DS4_ARCH_GLM5_NEXT) {
        fprintf(out, "  glm5-next: layers %d (%d dense), embedding %d, vocab %d\n", c->n_layer, c->n_dense,
                c->n_embd, c->n_vocab);
        fprintf(out, "  heads %d; KDA head dim %d, conv kernel %d, gate lower bound %g\n", c->n_head, c->kda_dim,
                c->conv, (double)c->kda_lb);
        fprintf(out, "  MLA (no RoPE): q lora %d, kv lora %d, qk head %d, v head %d\n", c->q_lora, c->kv_lora,
                c->kmla, c->vmla);
        fprintf(out, "  indexer heads %d, head dim %d, top-k %d, k-pool %d\n", c->idx_heads, c->idx_dim,
                c->idx_topk, c->kpool);
        fprintf(out, "  dense ff %d; experts %d (used %d, shared %d), expert ff %d, sigmoid router\n", c->n_ff,
                c->n_expert, c->n_expert_used, c->n_expert_shared, c->n_ff_exp);
        fprintf(out, "  hyper-connections %d, sinkhorn iters %d, hc eps %g, rms eps %g\n", c->n_hc, c->hc_iters,
                (double)c->hc_eps, (double)c->rms_eps);
        fprintf(out, "  expert weight scale %g, norm %s, training context %" PRIu64 "\n", (double)c->expert_scale,
                c->expert_norm ? "yes" : "no", c->ctx_train);
        return;
    }
    if (c->arch == DS4_ARCH_GLM_DSA) {
        fprintf(out, "  glm-dsa: layers %d (%d dense), embedding %d, vocab %d\n", c->n_layer, c->n_dense,
                c->n_embd, c->n_vocab);
        fprintf(out, "  heads %d, q lora %d, kv lora %d, rope dims %d, qk head %d, v head %d, cached row %d\n",
                c->n_head, c->q_lora, c->kv_lora, c->n_rot, c->kmla, c->vmla, c->head_dim);
        fprintf(out, "  dense ff %d; experts %d (used %d, shared %d), expert ff %d, sigmoid router\n", c->n_ff,
                c->n_expert, c->n_expert_used, c->n_expert_shared, c->n_ff_exp);
        fprintf(out, "  indexer heads %d, head dim %d, top-k %d\n", c->idx_heads, c->idx_dim, c->idx_topk);
        fprintf(out, "  rms eps %g, rope base %g\n", (double)c->rms_eps, (double)c->rope_base);
        fprintf(out, "  expert weight scale %g, norm %s, training context %" PRIu64 "\n", (double)c->expert_scale,
                c->expert_norm ? "yes" : "no", c->ctx_train);
        return;
    }
    fprintf(out, "  layers %d, embedding %d, vocab %d\n", c->n_layer, c->n_embd, c->n_vocab);
    fprintf(out, "  heads %d (kv %d), head dim %d, rope dims %d, q lora %d\n", c->n_head, c->n_head_kv,
            c->head_dim, c->n_rot, c->q_lora);
    fprintf(out, "  output groups %d x lora %d, sliding window %d\n", c->o_groups, c->o_lora, c->n_swa);
    fprintf(out, "  experts %d (used %d, shared %d), expert ff %d, hash layers %d\n", c->n_expert,
            c->n_expert_used, c->n_expert_shared, c->n_ff_exp, c->n_hash);
    if (c->idx_heads)
        fprintf(out, "  indexer heads %d, head dim %d, top-k %d\n", c->idx_heads, c->idx_dim, c->idx_topk);
    fprintf(out, "  hyper-connections %d, sinkhorn iters %d, hc eps %g, rms eps %g\n", c->n_hc, c->hc_iters,
            (double)c->hc_eps, (double)c->rms_eps);
    fprintf(out, "  rope base %g, compressed rope base %g, yarn factor %g (orig ctx %" PRIu64
            ", beta %g/%g)\n", (double)c->rope_base, (double)c->compress_rope_base, (double)c->rope_factor,
            c->rope_orig_ctx, (double)c->beta_fast, (double)c->beta_slow);
    fprintf(out, "  expert weight scale %g, norm %s, training context %" PRIu64 "\n", (double)c->expert_scale,
            c->expert_norm ? "yes" : "no", c->ctx_train);
}

static void print_layers(FILE *out, const ds4_weights *w) {
    fprintf(out, "\nlayers:\n");
    for (int il = 0; il < w->cfg.n_layer; il++) {
        const ds4_layer_weights *L = &w->layers[il];
        if (w->cfg.arch == DS4_ARCH_GLM5_NEXT) {
            fprintf(out, "  %3d  %-22s  %s\n", il,
                    L->kda ? "KDA" : L->own_indexer ? "MLA + k-pool indexer" : "MLA, shared indexer",
                    L->dense ? "dense FFN" : "MoE");
            continue;
        }
        if (w->cfg.arch == DS4_ARCH_GLM_DSA) {
            fprintf(out, "  %3d  MLA + indexer %-6s  %s", il, L->own_indexer ? "(own)" : "shared",
                    L->dense ? "dense FFN" : "MoE");
            if (!L->dense)
                fprintf(out, "  experts %s/%s/%s", ggml_type_name(L->ffn_gate_exps.type),
                        ggml_type_name(L->ffn_up_exps.type), ggml_type_name(L->ffn_down_exps.type));
            fputc('\n', out);
            continue;
        }
        const char *kind = !L->ratio ? "window" : L->has_indexer ? "window+compressed(overlap)+indexer"
                                                                 : "window+compressed";
        fprintf(out, "  %3d  ratio %-4d %-36s %s  experts %s/%s/%s  clamp %g\n", il, L->ratio, kind,
                L->tid2eid.data ? "hash  " : "router", ggml_type_name(L->ffn_gate_exps.type),
                ggml_type_name(L->ffn_up_exps.type), ggml_type_name(L->ffn_down_exps.type),
                (double)L->swiglu_clamp);
    }
}

/* Weights by kind: each tensor's row in the architecture's layout table
 * (by its name after "blk.N." / "mtp.0."), grouped by what it does. */
enum { WK_EMBD, WK_ATTN, WK_COMP, WK_IDX, WK_HC, WK_NORM, WK_DENSE, WK_ROUTER, WK_SHEXP, WK_EXPS, WK_HEAD,
       WK_MTP, WK_OTHER, WK_N };
static const char *WK_NAME[WK_N] = {"token embedding", "attention", "compressor", "indexer",
                                    "hyper-connections", "layer norms", "dense FFN", "router",
                                    "shared expert", "routed experts", "output head", "MTP block",
                                    "not in the layout"};

static int weight_kind(int id) {
    switch (id) {
    case DS4_T_TOKEN_EMBD: return WK_EMBD;
    case DS4_T_HC_ATTN_FN: case DS4_T_HC_ATTN_SCALE: case DS4_T_HC_ATTN_BASE:
    case DS4_T_HC_FFN_FN: case DS4_T_HC_FFN_SCALE: case DS4_T_HC_FFN_BASE: return WK_HC;
    case DS4_T_ATTN_NORM: case DS4_T_FFN_NORM: return WK_NORM;
    case DS4_T_COMP_APE: case DS4_T_COMP_KV: case DS4_T_COMP_GATE: case DS4_T_COMP_NORM: return WK_COMP;
    case DS4_T_IDX_Q_B: case DS4_T_IDX_PROJ: case DS4_T_IDX_COMP_APE: case DS4_T_IDX_COMP_KV:
    case DS4_T_IDX_COMP_GATE: case DS4_T_IDX_COMP_NORM: case DS4_T_IDX_K: case DS4_T_IDX_K_NORM:
    case DS4_T_IDX_K_NORM_B: return WK_IDX;
    case DS4_T_FFN_GATE: case DS4_T_FFN_UP: case DS4_T_FFN_DOWN: return WK_DENSE;
    case DS4_T_FFN_GATE_INP: case DS4_T_EXP_PROBS_B: case DS4_T_TID2EID: return WK_ROUTER;
    case DS4_T_FFN_GATE_SHEXP: case DS4_T_FFN_UP_SHEXP: case DS4_T_FFN_DOWN_SHEXP: return WK_SHEXP;
    case DS4_T_FFN_GATE_EXPS: case DS4_T_FFN_UP_EXPS: case DS4_T_FFN_DOWN_EXPS: return WK_EXPS;
    case DS4_T_OUTPUT_HC_BASE: case DS4_T_OUTPUT_HC_FN: case DS4_T_OUTPUT_HC_SCALE: case DS4_T_OUTPUT_NORM:
    case DS4_T_OUTPUT: return WK_HEAD;
    }
    return WK_ATTN;   /* the attention projections, norms and sinks */
}

/* n_layer: the trunk's layers; a GLM NextN block is blk.<n_layer>.*, its
 * wiring (nextn.*) and its decoder layer both the MTP block's */
static int tensor_kind(const ds4_layout_arch *a, const char *name, int n_layer) {
    if (!strncmp(name, "mtp.0.", 6)) return WK_MTP;   /* its own rows and its layer's */
    const char *rest = name;
    if (!strncmp(name, "blk.", 4)) {
        char *d = NULL;
        const long il = strtol(name + 4, &d, 10);
        if (!d || *d != '.' || d == name + 4) return WK_OTHER;
        rest = d + 1;
        if (!strncmp(rest, "nextn.", 6) || il >= n_layer) return WK_MTP;
    }
    for (int sec = 0; sec < DS4_SEC_COUNT; sec++) {
        if ((sec == DS4_SEC_LAYER) != (rest != name)) continue;
        for (int i = 0; i < a->n[sec]; i++)
            if (!strcmp(a->sec[sec][i].name, rest)) return weight_kind(a->sec[sec][i].id);
    }
    return WK_OTHER;
}

/* prints the table; returns the MTP block's tensor count (bound apart
 * from the trunk, by ds4_weights_bind_mtp, when drafts are asked for) */
static uint64_t print_kinds(FILE *out, const gguf_file *gf, int arch, int n_layer) {
    const ds4_layout_arch *a = arch == DS4_ARCH_GLM_DSA     ? &ds4_layout_glm_dsa
                               : arch == DS4_ARCH_GLM5_NEXT ? &ds4_layout_glm5_next
                                                            : &ds4_layout_deepseek4;
    uint64_t cnt[WK_N] = {0}, bytes[WK_N] = {0}, types[WK_N] = {0};   /* types: bit per GGML type < 64 */
    for (uint64_t i = 0; i < gf->n_tensors; i++) {
        const gguf_tensor *t = &gf->tensors[i];
        const int k = tensor_kind(a, t->name, n_layer);
        cnt[k]++;
        bytes[k] += t->nbytes;
        if (t->type < 64) types[k] |= 1ull << t->type;
    }
    fprintf(out, "\nweights by kind:\n");
    char h[64];
    for (int k = 0; k < WK_N; k++) {
        if (!cnt[k]) continue;
        human(h, sizeof h, bytes[k]);
        fprintf(out, "  %-18s %5" PRIu64 " tensors  %-32s", WK_NAME[k], cnt[k], h);
        for (uint32_t ty = 0, first = 1; ty < 64; ty++)
            if (types[k] >> ty & 1) { fprintf(out, "%s%s", first ? "" : "/", ggml_type_name(ty)); first = 0; }
        fputc('\n', out);
    }
    return cnt[WK_MTP];
}

static void print_histogram(FILE *out, const gguf_file *gf, uint64_t *total) {
    uint64_t cnt[64] = {0}, bytes[64] = {0}, other = 0, other_b = 0;
    *total = 0;
    for (uint64_t i = 0; i < gf->n_tensors; i++) {
        const gguf_tensor *t = &gf->tensors[i];
        *total += t->nbytes;
        if (t->type < 64) { cnt[t->type]++; bytes[t->type] += t->nbytes; }
        else { other++; other_b += t->nbytes; }
    }
    fprintf(out, "\ntensor types (%" PRIu64 " tensors):\n", gf->n_tensors);
    char h[64];
    for (int k = 0; k < 64; k++) {
        if (!cnt[k]) continue;
        human(h, sizeof h, bytes[k]);
        fprintf(out, "  %-8s %6" PRIu64 " tensors  %s\n", ggml_type_name((uint32_t)k), cnt[k], h);
    }
    if (other) {
        human(h, sizeof h, other_b);
        fprintf(out, "  %-8s %6" PRIu64 " tensors  %s\n", "other", other, h);
    }
}

int ds4_inspect_gguf(gguf_file *gf, FILE *out, char **err) {
    if (err) *err = NULL;
    char h[64];
    uint8_t fp[20];
    char fph[41];
    fprintf(out, "file: %s\n", gf->path);
    human(h, sizeof h, gf->size);
    fprintf(out, "  size %s, GGUF v%u, alignment %" PRIu64 ", %" PRIu64 " metadata keys, %" PRIu64
            " tensors\n", h, gf->version, gf->alignment, gf->n_kv, gf->n_tensors);
    ds4_gguf_fingerprint(gf, fp);
    ds4_hex(fp, 20, fph);
    fprintf(out, "  layout fingerprint (sha1 of header+metadata+directory) %s\n", fph);

    gguf_str s;
    fprintf(out, "  architecture ");
    if (gguf_get_str(gf, "general.architecture", &s) == 0) print_str(out, s.p, s.len);
    else fputs("(absent)", out);
    fprintf(out, ", name ");
    if (gguf_get_str(gf, "general.name", &s) == 0) print_str(out, s.p, s.len);
    else fputs("(absent)", out);
    fputc('\n', out);

    print_metadata(out, gf);
    print_tokenizer(out, gf);

    if (gf->n_tensors == 0) {
        fprintf(out, "\nvocab-only file: no tensors (usable as a tokenizer, not as a model)\n");
        return DS4_OK;
    }

    uint64_t total;
    print_histogram(out, gf, &total);
    human(h, sizeof h, total);
    fprintf(out, "  tensor data: %s\n", h);

    ds4_weights w;
    char *berr = NULL;
    int rc = ds4_weights_bind(gf, &w, &berr);
    if (rc) {
        fprintf(out, "\nthe file does not match the DeepSeek V4 layout:\n%s\n", berr ? berr : "");
        int n = 0;
        for (const char *q = berr; q && *q; q++) n += *q == '\n';
        ds4_set_err(err, rc, "%s: does not match the DeepSeek V4 layout (%d problem line%s listed in the report)",
                    gf->path, n + 1, n ? "s" : "");
        free(berr);
        return rc;
    }
    print_shapes(out, &w.cfg);
    print_layers(out, &w);
    const uint64_t n_mtp = print_kinds(out, gf, w.cfg.arch, w.cfg.n_layer);
    fprintf(out, "\n");
    if (n_mtp) fprintf(out, "MTP block: %" PRIu64 " tensors, used for drafts (--mtp-draft N)\n", n_mtp);
    if (w.n_bound + n_mtp < gf->n_tensors)
        fprintf(out, "tensors not used by ds4: %" PRIu64 "\n", gf->n_tensors - w.n_bound - n_mtp);
    uint64_t active = ds4_weights_active_bytes(&w);
    human(h, sizeof h, total);
    fprintf(out, "memory: weights (mmap'd, resident once touched) %s\n", h);
    human(h, sizeof h, active);
    fprintf(out, "        weights read per decoded token %s\n", h);
    human(h, sizeof h, total + active);
    fprintf(out, "        estimated resident (weights + per-token working set) %s, plus the KV cache\n", h);
    ds4_weights_free(&w);
    return DS4_OK;
}

int ds4_inspect(const char *path, FILE *out, char **err) {
    if (err) *err = NULL;
    gguf_file *gf = gguf_open(path, err);
    if (!gf) return access(path, R_OK) ? DS4_EIO : DS4_EFORMAT;
    int rc = ds4_inspect_gguf(gf, out, err);
    gguf_close(gf);
    return rc;
}
