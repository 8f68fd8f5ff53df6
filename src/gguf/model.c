/*
 * model.c -- binds a parsed GGUF to the DeepSeek V4 layout (or glm-dsa's, glm5-next's; implements
 * model.h): shape parameters from `deepseek4.*` metadata (docs/GGUF.md §3),
 * their consistency and bounds, and every tensor's presence, dims and type
 * (docs/GGUF.md §4), walking the layout table of gguf/layout.c (names,
 * dims, roles, layer kinds: not spelled here).  docs/GGUF.md §6 lists
 * every check; keep it in step.
 *
 * Owns: ds4_config / ds4_weights construction and the per-token active
 * byte count.  Must not: compute, copy tensor data, or hard-code Flash
 * sizes: tiny test models share the layout with small shapes.
 * Every problem is collected and reported at once, one per line.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds4.h"
#include "gguf/layout.h"
#include "gguf/model.h"

#define MAX_PROBLEMS 50

/* The limits table (model.h).  `why` is printed with a refusal. */
const ds4_model_limit ds4_model_limits[] = {
    {"context_length", 1, UINT32_MAX, "informational training context"},
    {"block_count", 1, DS4_MAX_LAYER, "sanity bound"},
    {"embedding_length", 1, DS4_MAX_EMBD, "sanity bound"},
    {"vocab_size", 1, DS4_MAX_VOCAB, "sanity bound"},
    {"attention.head_count", 1, DS4_MAX_HEAD, "sanity bound"},
    {"attention.head_count_kv", 1, 1, "one shared K=V head"},
    {"attention.key_length", 1, DS4_MAX_HEAD_DIM, "sanity bound"},
    {"attention.value_length", 1, DS4_MAX_HEAD_DIM, "sanity bound; must equal key_length"},
    {"attention.q_lora_rank", 1, DS4_MAX_RANK, "sanity bound"},
    {"attention.output_lora_rank", 1, DS4_MAX_RANK, "sanity bound"},
    {"attention.output_group_count", 1, DS4_MAX_OUT_GROUPS, "per-group matmul table; divides head_count"},
    {"attention.sliding_window", 1, DS4_MAX_WINDOW, "sanity bound"},
    {"attention.indexer.head_count", 1, DS4_MAX_HEAD, "sanity bound"},
    {"attention.indexer.key_length", 1, DS4_MAX_HEAD_DIM, "sanity bound; a power of two >= rope dims"},
    {"attention.indexer.top_k", 1, DS4_MAX_TOPK, "sanity bound"},
    {"attention.compress_ratios", 0, DS4_MAX_RATIO, "per layer: 0 or 2..max; compressor state size"},
    {"rope.dimension_count", 0, DS4_MAX_ROT_DIM, "RoPE angle tables; even, <= key_length"},
    {"rope.scaling.original_context_length", 1, UINT32_MAX, "sanity bound"},
    {"expert_count", 1, DS4_MAX_EXPERT, "sanity bound"},
    {"expert_used_count", 1, DS4_MAX_EXPERT, "sanity bound; <= expert_count"},
    {"expert_shared_count", 1, DS4_MAX_SHARED, "sanity bound"},
    {"expert_feed_forward_length", 1, DS4_MAX_FF, "sanity bound"},
    {"expert_group_count", 0, DS4_MAX_EXPERT, "optional; only 0 or 1 (no group-limited routing)"},
    {"hash_layer_count", 0, DS4_MAX_LAYER, "<= block_count"},
    {"hyper_connection.count", 1, DS4_MAX_HC, "per-stream weight tables"},
    {"hyper_connection.sinkhorn_iterations", 1, DS4_MAX_HC_ITERS, "sanity bound"},
};
const int ds4_model_n_limits = (int)(sizeof ds4_model_limits / sizeof ds4_model_limits[0]);

const ds4_model_limit *ds4_model_limit_find(const char *key) {
    if (!strncmp(key, "deepseek4.", 10)) key += 10;
    for (int i = 0; i < ds4_model_n_limits; i++)
        if (!strcmp(ds4_model_limits[i].key, key)) return &ds4_model_limits[i];
    return NULL;
}

typedef struct {
    const char *path;
    ds4_buf msg;
    int n;                     /* problems found (may exceed those printed) */
    int oom;
    const char *pfx;           /* metadata prefix: "deepseek4" (NULL) or "glm-dsa" */
} problems;

static void prob(problems *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void prob(problems *p, const char *fmt, ...) {
    p->n++;
    if (p->n > MAX_PROBLEMS) return;
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (ds4_buf_printf(&p->msg, "%s%s: %s", p->msg.n ? "\n" : "", p->path, tmp)) p->oom = 1;
}

/* ------------------------------------------------------------------------ */
/* Metadata                                                                  */
/* ------------------------------------------------------------------------ */

static const char *vt_name(uint32_t t) {
    static const char *n[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                              "bool", "string", "array", "u64", "i64", "f64"};
    return t < GGUF_NTYPES ? n[t] : "?";
}

static int is_int_type(uint32_t t) {
    return t == GGUF_U8 || t == GGUF_I8 || t == GGUF_U16 || t == GGUF_I16 || t == GGUF_U32 ||
           t == GGUF_I32 || t == GGUF_U64 || t == GGUF_I64;
}

static void key_of(const problems *p, char *buf, size_t n, const char *suffix) {
    snprintf(buf, n, "%s.%s", p->pfx ? p->pfx : "deepseek4", suffix);
}

/* glm-dsa's integer keys (without the "glm-dsa." prefix) beyond the V4
 * table's rows that it shares (block_count, embedding_length, ...). */
static const ds4_model_limit glm_limits[] = {
    {"attention.kv_lora_rank", 1, DS4_MAX_RANK, "sanity bound"},
    {"attention.key_length_mla", 1, DS4_MAX_HEAD_DIM, "sanity bound; > rope dims"},
    {"attention.value_length_mla", 1, DS4_MAX_HEAD_DIM, "sanity bound"},
    {"feed_forward_length", 1, DS4_MAX_FF, "sanity bound"},
    {"leading_dense_block_count", 0, DS4_MAX_LAYER, "<= block_count"},
    {"nextn_predict_layers", 0, DS4_MAX_LAYER, "< block_count"},
    /* glm5-next */
    {"kda.head_dim", 1, DS4_MAX_HEAD_DIM, "sanity bound"},
    {"ssm.conv_kernel", 1, 16, "sanity bound (the release: 4)"},
    {"attention.indexer.kpool", 1, 64, "sanity bound (the release: 4)"},
};

static const ds4_model_limit *limit_of(const char *suffix) {
    const ds4_model_limit *l = ds4_model_limit_find(suffix);
    for (size_t i = 0; !l && i < sizeof glm_limits / sizeof glm_limits[0]; i++)
        if (!strcmp(glm_limits[i].key, suffix)) l = &glm_limits[i];
    return l;
}

/* Reads an integer key into its range (the limits table; every key read
 * here has a row).  Returns 1 if a valid value was
 * stored, 0 if absent (and not required), -1 on a reported problem. */
static int meta_int(problems *p, const gguf_file *gf, const char *suffix, int required,
                    int64_t *out) {
    const ds4_model_limit *lim = limit_of(suffix);
    const int64_t lo = lim->min, hi = lim->max;
    char key[128];
    key_of(p, key, sizeof key, suffix);
    const gguf_kv *kv = gguf_find(gf, key);
    if (!kv) {
        if (!required) return 0;
        prob(p, "missing metadata %s", key);
        return -1;
    }
    if (!is_int_type(kv->type)) {
        prob(p, "metadata %s has type %s, expected an integer", key, vt_name(kv->type));
        return -1;
    }
    int64_t v;
    if (gguf_get_i64(gf, key, &v) || v < lo || v > hi) {
        if (kv->type == GGUF_U64 || kv->type == GGUF_U32 || kv->type == GGUF_U16 || kv->type == GGUF_U8)
            prob(p, "metadata %s = %" PRIu64 " is out of range [%" PRId64 ", %" PRId64 "] (limit: %s)", key,
                 kv->v.u, lo, hi, lim->why);
        else
            prob(p, "metadata %s = %" PRId64 " is out of range [%" PRId64 ", %" PRId64 "] (limit: %s)", key,
                 kv->v.i, lo, hi, lim->why);
        return -1;
    }
    *out = v;
    return 1;
}

static int meta_int32(problems *p, const gguf_file *gf, const char *suffix, int required,
                      int *out, int *bad) {
    int64_t v = 0;
    int r = meta_int(p, gf, suffix, required, &v);
    if (r == 1) *out = (int)v;
    if (r < 0) *bad = 1;
    return r;
}

static int check_float(problems *p, const char *key, double v, double lo, double hi) {
    if (isnan(v)) { prob(p, "metadata %s is NaN", key); return -1; }
    if (isinf(v)) { prob(p, "metadata %s is infinite", key); return -1; }
    if (v < lo || v > hi) {
        prob(p, "metadata %s = %g is out of range [%g, %g]", key, v, lo, hi);
        return -1;
    }
    return 0;
}

/* Float key (f32/f64; an integer value is accepted too). */
static int meta_float(problems *p, const gguf_file *gf, const char *suffix, int required,
                      double lo, double hi, float *out, int *bad) {
    char key[128];
    key_of(p, key, sizeof key, suffix);
    const gguf_kv *kv = gguf_find(gf, key);
    if (!kv) {
        if (!required) return 0;
        prob(p, "missing metadata %s", key);
        *bad = 1;
        return -1;
    }
    double v;
    if (gguf_get_f64(gf, key, &v)) {
        prob(p, "metadata %s has type %s, expected a float", key, vt_name(kv->type));
        *bad = 1;
        return -1;
    }
    if (check_float(p, key, v, lo, hi)) { *bad = 1; return -1; }
    *out = (float)v;
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct {
    problems *p;
    const gguf_file *gf;
    uint64_t n_bound;
    /* a per-rank part of a pipeline split (ds4-gguf split, src/mpi/):
     * only layers [lo, hi), the embeddings when lo == 0 and the head when
     * hi == n_layer must be present */
    int part, lo, hi, n_layer;
    /* a per-rank part of an experts split: every layer, and of each
     * routed expert tensor only the experts [e_lo, e_hi) */
    int xpart, e_lo, e_hi;
    int mtp;          /* binding the MTP block: layer names are "mtp.0.*" */
    const ds4_layout_arch *arch;   /* NULL: DeepSeek V4's */
} binder;

/* Whether a part file must hold tensor `name` (always for a whole file). */
static int part_needs(const binder *b, const char *name) {
    if (!b->part) return 1;
    if (!strncmp(name, "blk.", 4)) {
        int il = atoi(name + 4);
        return il >= b->lo && il < b->hi;
    }
    if (!strncmp(name, "token_embd.", 11)) return b->lo == 0;
    return b->hi == b->n_layer;
}

/* This rank's range [*lo, *hi) of `what` (layers or experts, n of them)
 * from the ds4.split keys of a part file: ds4.split.rank, ds4.split.ranks
 * and the array `key` of ranks + 1 boundaries.  1 = set, 0 = malformed (a
 * problem). */
static int split_range(problems *p, const gguf_file *gf, const char *key, const char *what, int n,
                       int *lo, int *hi) {
    uint32_t rank = 0, ranks = 0;
    const gguf_kv *k = gguf_find(gf, key);
    if (gguf_get_u32(gf, "ds4.split.rank", &rank) || gguf_get_u32(gf, "ds4.split.ranks", &ranks) ||
        rank >= ranks || !k || k->type != GGUF_ARRAY || k->v.arr.type != GGUF_U32 ||
        k->v.arr.n != (uint64_t)ranks + 1) {
        prob(p, "malformed ds4.split metadata (ds4.split.rank, ranks, %s)", key + strlen("ds4.split."));
        return 0;
    }
    uint32_t a, z;
    memcpy(&a, k->v.arr.data + 4 * (size_t)rank, 4);
    memcpy(&z, k->v.arr.data + 4 * (size_t)rank + 4, 4);
    if (a >= z || z > (uint32_t)n) {
        prob(p, "%s gives rank %u the %s %u..%u of %d", key, rank, what, a, z, n);
        return 0;
    }
    *lo = (int)a;
    *hi = (int)z;
    return 1;
}

/* Reads the ds4.split keys of a pipeline part: 1 = a part (lo/hi set), 0 =
 * a whole file (or an experts part); a malformed split is a problem. */
static int part_of(problems *p, const gguf_file *gf, int L, int *lo, int *hi) {
    if (!gguf_find(gf, "ds4.split.ranks") || gguf_find(gf, "ds4.split.experts")) return 0;
    return split_range(p, gf, "ds4.split.first", "layers", L, lo, hi);
}

/* The ds4.split.experts key of an experts split part (ds4-gguf split
 * --dist experts): 1 = a part (its experts [*e_lo, *e_hi) of E), 0 = not
 * one; a malformed key is a problem.  Which rank may run it is the
 * distributed runtime's check (src/mpi/). */
static int xpart_of(problems *p, const gguf_file *gf, int E, int *e_lo, int *e_hi) {
    if (!gguf_find(gf, "ds4.split.experts")) return 0;
    return split_range(p, gf, "ds4.split.experts", "experts", E, e_lo, e_hi);
}

static void fmt_dims(char *buf, size_t n, uint32_t nd, const uint64_t *ne) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (uint32_t d = 0; d < nd && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%" PRIu64, d ? ", " : "", ne[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* Looks up layout tensor `lt`, checks dims (trailing 1s are insignificant:
 * they do not change the storage) and type (the types its role accepts),
 * and fills `dst`.  Returns 1 if bound. */
static int bind_t(binder *b, ds4_tensor *dst, const ds4_layout_tensor *lt) {
    const char *name = lt->name;
    const int role = lt->row->role;
    memset(dst, 0, sizeof *dst);
    const gguf_tensor *t = gguf_find_tensor(b->gf, name);
    if (!t) {
        if (!lt->row->optional && part_needs(b, name)) prob(b->p, "missing tensor %s", name);
        return 0;
    }
    uint64_t want[4] = {lt->ne[0], lt->ne[1], lt->ne[2], 1};
    int ok = 1;
    for (int d = 0; d < 4; d++) ok &= t->ne[d] == want[d];
    if (!ok) {
        char g[128], w[128];
        fmt_dims(g, sizeof g, t->n_dims, t->ne);
        fmt_dims(w, sizeof w, lt->nd, want);
        prob(b->p, "tensor %s has dims %s, expected %s", name, g, w);
    }
    if (!ds4_layout_type_ok(role, t->type)) {
        prob(b->p, "tensor %s has type %s, expected %s", name, ggml_type_name(t->type), ds4_layout_types_text(role));
        ok = 0;
    }
    dst->name = t->name;
    dst->data = t->data;
    dst->type = t->type;
    for (int d = 0; d < 4; d++) dst->ne[d] = t->ne[d];
    dst->row_bytes = ggml_row_size(t->type, t->ne[0]);
    dst->nbytes = t->nbytes;
    b->n_bound++;
    return ok;
}

/* Where each family is bound: 1 + its offset in the struct its section
 * fills (ds4_weights for the head and tail, ds4_layer_weights for a
 * layer, ds4_mtp_weights for the MTP block's own tensors). */
#define AT(s, f) (offsetof(s, f) + 1)
#define LW(f) AT(ds4_layer_weights, f)
static const size_t FIELD[DS4_T_COUNT] = {
    [DS4_T_TOKEN_EMBD] = AT(ds4_weights, token_embd),
    [DS4_T_HC_ATTN_FN] = LW(hc_attn_fn), [DS4_T_HC_ATTN_SCALE] = LW(hc_attn_scale),
    [DS4_T_HC_ATTN_BASE] = LW(hc_attn_base), [DS4_T_HC_FFN_FN] = LW(hc_ffn_fn),
    [DS4_T_HC_FFN_SCALE] = LW(hc_ffn_scale), [DS4_T_HC_FFN_BASE] = LW(hc_ffn_base),
    [DS4_T_ATTN_NORM] = LW(attn_norm), [DS4_T_ATTN_Q_A] = LW(attn_q_a), [DS4_T_ATTN_Q_A_NORM] = LW(attn_q_a_norm),
    [DS4_T_ATTN_Q_B] = LW(attn_q_b), [DS4_T_ATTN_KV] = LW(attn_kv), [DS4_T_ATTN_KV_A_NORM] = LW(attn_kv_a_norm),
    [DS4_T_ATTN_SINKS] = LW(attn_sinks), [DS4_T_ATTN_OUTPUT_A] = LW(attn_output_a),
    [DS4_T_ATTN_OUTPUT_B] = LW(attn_output_b),
    [DS4_T_COMP_APE] = LW(comp_ape), [DS4_T_COMP_KV] = LW(comp_kv), [DS4_T_COMP_GATE] = LW(comp_gate),
    [DS4_T_COMP_NORM] = LW(comp_norm), [DS4_T_IDX_Q_B] = LW(idx_q_b), [DS4_T_IDX_PROJ] = LW(idx_proj),
    [DS4_T_IDX_COMP_APE] = LW(idx_comp_ape), [DS4_T_IDX_COMP_KV] = LW(idx_comp_kv),
    [DS4_T_IDX_COMP_GATE] = LW(idx_comp_gate), [DS4_T_IDX_COMP_NORM] = LW(idx_comp_norm),
    [DS4_T_FFN_NORM] = LW(ffn_norm), [DS4_T_FFN_GATE_INP] = LW(ffn_gate_inp), [DS4_T_EXP_PROBS_B] = LW(exp_probs_b),
    [DS4_T_FFN_GATE_EXPS] = LW(ffn_gate_exps), [DS4_T_FFN_UP_EXPS] = LW(ffn_up_exps),
    [DS4_T_FFN_DOWN_EXPS] = LW(ffn_down_exps), [DS4_T_FFN_GATE_SHEXP] = LW(ffn_gate_shexp),
    [DS4_T_FFN_UP_SHEXP] = LW(ffn_up_shexp), [DS4_T_FFN_DOWN_SHEXP] = LW(ffn_down_shexp),
    [DS4_T_TID2EID] = LW(tid2eid),
    [DS4_T_OUTPUT_HC_BASE] = AT(ds4_weights, output_hc_base), [DS4_T_OUTPUT_HC_FN] = AT(ds4_weights, output_hc_fn),
    [DS4_T_OUTPUT_HC_SCALE] = AT(ds4_weights, output_hc_scale), [DS4_T_OUTPUT_NORM] = AT(ds4_weights, output_norm),
    [DS4_T_OUTPUT] = AT(ds4_weights, output),
    [DS4_T_MTP_E_PROJ] = AT(ds4_mtp_weights, e_proj), [DS4_T_MTP_H_PROJ] = AT(ds4_mtp_weights, h_proj),
    [DS4_T_MTP_ENORM] = AT(ds4_mtp_weights, enorm), [DS4_T_MTP_HNORM] = AT(ds4_mtp_weights, hnorm),
    [DS4_T_MTP_NORM] = AT(ds4_mtp_weights, norm), [DS4_T_MTP_HC_HEAD_BASE] = AT(ds4_mtp_weights, hc_head_base),
    [DS4_T_MTP_HC_HEAD_FN] = AT(ds4_mtp_weights, hc_head_fn),
    [DS4_T_MTP_HC_HEAD_SCALE] = AT(ds4_mtp_weights, hc_head_scale),
    [DS4_T_ATTN_K_B] = LW(attn_k_b), [DS4_T_ATTN_V_B] = LW(attn_v_b), [DS4_T_ATTN_OUTPUT] = LW(attn_output),
    [DS4_T_IDX_K] = LW(idx_k), [DS4_T_IDX_K_NORM] = LW(idx_k_norm), [DS4_T_IDX_K_NORM_B] = LW(idx_k_norm_b),
    [DS4_T_FFN_GATE] = LW(ffn_gate), [DS4_T_FFN_UP] = LW(ffn_up), [DS4_T_FFN_DOWN] = LW(ffn_down),
    [DS4_T_NEXTN_EH_PROJ] = AT(ds4_mtp_weights, eh_proj), [DS4_T_NEXTN_EMBED] = AT(ds4_mtp_weights, embd),
    [DS4_T_NEXTN_HEAD] = AT(ds4_mtp_weights, head),
    [DS4_T_KDA_Q] = LW(kda_q), [DS4_T_KDA_K] = LW(kda_k), [DS4_T_KDA_V] = LW(kda_v),
    [DS4_T_CONV_Q] = LW(conv_q), [DS4_T_CONV_K] = LW(conv_k), [DS4_T_CONV_V] = LW(conv_v),
    [DS4_T_SSM_F_A] = LW(ssm_f_a), [DS4_T_SSM_F_B] = LW(ssm_f_b), [DS4_T_SSM_BETA] = LW(ssm_beta),
    [DS4_T_SSM_A] = LW(ssm_a), [DS4_T_SSM_DT_B] = LW(ssm_dt_b), [DS4_T_SSM_G_A] = LW(ssm_g_a),
    [DS4_T_SSM_G_B] = LW(ssm_g_b), [DS4_T_SSM_NORM] = LW(ssm_norm),
};
#undef LW
#undef AT

static ds4_layout_hp hp_of(const ds4_config *c) {
    ds4_layout_hp h = {
        .n_embd = c->n_embd, .n_vocab = c->n_vocab, .n_hc = c->n_hc, .n_head = c->n_head,
        .head_dim = c->head_dim, .q_lora = c->q_lora, .o_lora = c->o_lora, .o_groups = c->o_groups,
        .n_expert = c->n_expert, .n_ff = c->n_ff_exp, .n_shared = c->n_expert_shared,
        .n_used = c->n_expert_used, .idx_heads = c->idx_heads, .idx_dim = c->idx_dim,
        .n_layer = c->n_layer, .n_hash = c->n_hash,
        .kv_lora = c->kv_lora, .n_rot = c->n_rot, .kmla = c->kmla, .vmla = c->vmla, .n_ff_dense = c->n_ff,
        .kda_dim = c->kda_dim, .conv = c->conv, .kpool = c->kpool,
    };
    return h;
}

/* Binds every tensor of one section of the layout (a layer: layer `il` of
 * kind `k`) into the struct at `base`, in file order. */
static void bind_section(binder *b, const ds4_layout_hp *hp, int sec, int il, const ds4_layer_kind *k,
                         void *base) {
    ds4_layout_tensor lt[DS4_LAYOUT_MAX_ROWS];
    const int flags = DS4_LAYOUT_READ | (sec == DS4_SEC_LAYER && b->mtp ? DS4_LAYOUT_MTP : 0);
    const int n = ds4_layout_section(b->arch ? b->arch : &ds4_layout_deepseek4, sec, hp, il, k, flags, lt);
    int ok[DS4_T_COUNT] = {0};
    for (int i = 0; i < n; i++) {
        const ds4_layout_row *r = lt[i].row;
        /* missing indexer metadata is reported with the layer kinds */
        if (r->when == DS4_W_INDEXER && !(hp->idx_heads && hp->idx_dim)) continue;
        const int expert = r->role == DS4_ROLE_EXP_GU || r->role == DS4_ROLE_EXP_DOWN;
        /* an experts split part holds a slice of the routed experts */
        if (expert && b->xpart) lt[i].ne[2] = (uint64_t)(b->e_hi - b->e_lo);
        ds4_tensor *dst = (ds4_tensor *)((char *)base + FIELD[r->id] - 1);
        ok[r->id] = bind_t(b, dst, &lt[i]);
        if (r->id == DS4_T_FFN_DOWN_EXPS) {
            ds4_layer_weights *L = base;
            if (b->xpart) L->ffn_gate_exps.e0 = L->ffn_up_exps.e0 = L->ffn_down_exps.e0 = b->e_lo;
            if (ok[DS4_T_FFN_GATE_EXPS] && ok[DS4_T_FFN_UP_EXPS] && L->ffn_gate_exps.type != L->ffn_up_exps.type)
                prob(b->p, "tensor %s has type %s, expected the type of %s (%s)", L->ffn_up_exps.name,
                     ggml_type_name(L->ffn_up_exps.type), L->ffn_gate_exps.name,
                     ggml_type_name(L->ffn_gate_exps.type));
        }
    }
}

static int has_l(const gguf_file *gf, int il, const char *suffix) {
    char name[160];
    snprintf(name, sizeof name, "blk.%d.%s", il, suffix);
    return gguf_find_tensor(gf, name) != NULL;
}

/* ------------------------------------------------------------------------ */
/* Config                                                                    */
/* ------------------------------------------------------------------------ */

/* Reads every shape parameter.  *shape_bad is set when an integer shape
 * value is unusable (then tensor checks would only produce noise). */
static void read_config(problems *p, const gguf_file *gf, ds4_config *c, int *shape_bad,
                        int *need_idx_meta) {
    int bad = 0, fbad = 0;
    int64_t v64;
    meta_int32(p, gf, "block_count", 1, &c->n_layer, &bad);
    meta_int32(p, gf, "embedding_length", 1, &c->n_embd, &bad);
    meta_int32(p, gf, "vocab_size", 1, &c->n_vocab, &bad);
    meta_int32(p, gf, "attention.head_count", 1, &c->n_head, &bad);
    meta_int32(p, gf, "attention.head_count_kv", 1, &c->n_head_kv, &bad);
    meta_int32(p, gf, "attention.key_length", 1, &c->head_dim, &bad);
    int vlen = 0;
    if (meta_int32(p, gf, "attention.value_length", 1, &vlen, &bad) == 1 &&
        c->head_dim && vlen != c->head_dim) {
        prob(p, "metadata deepseek4.attention.value_length = %d must equal key_length = %d (K = V)",
             vlen, c->head_dim);
        bad = 1;
    }
    meta_int32(p, gf, "rope.dimension_count", 1, &c->n_rot, &bad);
    meta_int32(p, gf, "attention.q_lora_rank", 1, &c->q_lora, &bad);
    meta_int32(p, gf, "attention.output_lora_rank", 1, &c->o_lora, &bad);
    meta_int32(p, gf, "attention.output_group_count", 1, &c->o_groups, &bad);
    meta_int32(p, gf, "attention.sliding_window", 1, &c->n_swa, &bad);
    meta_int32(p, gf, "expert_count", 1, &c->n_expert, &bad);
    meta_int32(p, gf, "expert_used_count", 1, &c->n_expert_used, &bad);
    meta_int32(p, gf, "expert_shared_count", 1, &c->n_expert_shared, &bad);
    meta_int32(p, gf, "expert_feed_forward_length", 1, &c->n_ff_exp, &bad);
    meta_int32(p, gf, "hash_layer_count", 1, &c->n_hash, &bad);
    meta_int32(p, gf, "hyper_connection.count", 1, &c->n_hc, &bad);
    meta_int32(p, gf, "hyper_connection.sinkhorn_iterations", 1, &c->hc_iters, &fbad);
    /* The indexer keys are needed only if an indexer layer exists (checked
     * with the layer kinds); here they are read if present. */
    int ib = 0;
    int ih = meta_int32(p, gf, "attention.indexer.head_count", 0, &c->idx_heads, &ib);
    int id = meta_int32(p, gf, "attention.indexer.key_length", 0, &c->idx_dim, &ib);
    int it = meta_int32(p, gf, "attention.indexer.top_k", 0, &c->idx_topk, &ib);
    if (ib) bad = 1;
    /* 1 = not all present and valid; the indexer applies a Hadamard
     * rotation, so its head dim must also be a power of two (checked only
     * if an indexer layer exists, in ds4_weights_bind). */
    *need_idx_meta = !(ih == 1 && id == 1 && it == 1);
    if (meta_int(p, gf, "rope.scaling.original_context_length", 1, &v64) == 1)
        c->rope_orig_ctx = (uint64_t)v64;
    if (meta_int(p, gf, "context_length", 0, &v64) == 1) c->ctx_train = (uint64_t)v64;
    int64_t g = 0;
    if (meta_int(p, gf, "expert_group_count", 0, &g) == 1 && g > 1)
        prob(p, "metadata deepseek4.expert_group_count = %" PRId64 ": group-limited routing is not supported", g);

    meta_float(p, gf, "attention.layer_norm_rms_epsilon", 1, 0.0, 1.0, &c->rms_eps, &fbad);
    meta_float(p, gf, "hyper_connection.epsilon", 1, 0.0, 1.0, &c->hc_eps, &fbad);
    meta_float(p, gf, "rope.freq_base", 1, 1e-6, 1e30, &c->rope_base, &fbad);
    meta_float(p, gf, "attention.compress_rope_freq_base", 1, 1e-6, 1e30, &c->compress_rope_base, &fbad);
    meta_float(p, gf, "rope.scaling.factor", 1, 1e-6, 1e30, &c->rope_factor, &fbad);
    meta_float(p, gf, "rope.scaling.yarn_beta_fast", 1, -1e30, 1e30, &c->beta_fast, &fbad);
    meta_float(p, gf, "rope.scaling.yarn_beta_slow", 1, -1e30, 1e30, &c->beta_slow, &fbad);
    meta_float(p, gf, "expert_weights_scale", 1, -1e30, 1e30, &c->expert_scale, &fbad);
    {
        int r = gguf_get_bool(gf, "deepseek4.expert_weights_norm", &c->expert_norm);
        if (r == -1) prob(p, "missing metadata deepseek4.expert_weights_norm");
        if (r == -2) prob(p, "metadata deepseek4.expert_weights_norm is not a bool");
    }

    {
        /* other loaders require it; ds4 implements only the V4 router */
        const gguf_kv *kv = gguf_find(gf, "deepseek4.expert_gating_func");
        int64_t gfn;
        if (kv && (!is_int_type(kv->type) || gguf_get_i64(gf, "deepseek4.expert_gating_func", &gfn)))
            prob(p, "metadata deepseek4.expert_gating_func has type %s, expected an integer", vt_name(kv->type));
        else if (kv && gfn != DS4_EXPERT_GATING_SQRT_SOFTPLUS)
            prob(p, "metadata deepseek4.expert_gating_func = %" PRId64 " (%s): DeepSeek V4's router scores "
                 "experts with sqrt(softplus) (4), the only function ds4 implements", gfn,
                 gfn == 1 ? "softmax" : gfn == 2 ? "sigmoid" : gfn == 3 ? "softmax of the weights" : "unknown");
    }

    /* Internal consistency of what was read. */
    if (c->n_head && c->o_groups && c->n_head % c->o_groups) {
        prob(p, "metadata deepseek4.attention.head_count = %d is not a multiple of output_group_count = %d",
             c->n_head, c->o_groups);
        bad = 1;
    }
    if (c->head_dim && (c->n_rot > c->head_dim || c->n_rot % 2)) {
        prob(p, "metadata deepseek4.rope.dimension_count = %d must be even and <= key_length = %d",
             c->n_rot, c->head_dim);
        bad = 1;
    }
    if (c->n_expert && c->n_expert_used > c->n_expert) {
        prob(p, "metadata deepseek4.expert_used_count = %d exceeds expert_count = %d",
             c->n_expert_used, c->n_expert);
        bad = 1;
    }
    if (c->n_layer && c->n_hash > c->n_layer) {
        prob(p, "metadata deepseek4.hash_layer_count = %d exceeds block_count = %d", c->n_hash, c->n_layer);
        bad = 1;
    }

    /* Per-layer arrays (need n_layer). */
    if (c->n_layer > 0) {
        c->compress_ratios = calloc((size_t)c->n_layer, sizeof *c->compress_ratios);
        c->swiglu_clamp = calloc((size_t)c->n_layer, sizeof *c->swiglu_clamp);
        if (!c->compress_ratios || !c->swiglu_clamp) { p->oom = 1; *shape_bad = 1; return; }
        const char *rk = "deepseek4.attention.compress_ratios";
        const gguf_kv *kv = gguf_find(gf, rk);
        if (!kv) {
            prob(p, "missing metadata %s", rk);
            bad = 1;
        } else if (kv->type != GGUF_ARRAY || !is_int_type(kv->v.arr.type)) {
            prob(p, "metadata %s has type %s, expected an integer array", rk,
                 kv->type == GGUF_ARRAY ? vt_name(kv->v.arr.type) : vt_name(kv->type));
            bad = 1;
        } else if (kv->v.arr.n < (uint64_t)c->n_layer) {
            prob(p, "metadata %s has %" PRIu64 " entries, fewer than block_count = %d", rk, kv->v.arr.n,
                 c->n_layer);
            bad = 1;
        } else {
            for (int il = 0; il < c->n_layer; il++) {
                int64_t r = -1;
                if (gguf_arr_i64(kv, (uint64_t)il, &r) || r < 0 || r == 1 || r > DS4_MAX_RATIO) {
                    prob(p, "metadata %s[%d] = %" PRId64 " is invalid (must be 0 or 2..%d; limit: "
                         "compressor state size)", rk, il, r, DS4_MAX_RATIO);
                    bad = 1;
                } else {
                    c->compress_ratios[il] = (int)r;
                }
            }
        }
        const char *ck = "deepseek4.swiglu_clamp_exp";
        kv = gguf_find(gf, ck);
        if (!kv) {
            prob(p, "missing metadata %s", ck);
            fbad = 1;
        } else if (kv->type != GGUF_ARRAY) {
            double v;   /* a scalar applies to every layer */
            if (gguf_get_f64(gf, ck, &v)) {
                prob(p, "metadata %s has type %s, expected a float array", ck, vt_name(kv->type));
                fbad = 1;
            } else if (!check_float(p, ck, v, 0.0, 1e30)) {
                for (int il = 0; il < c->n_layer; il++) c->swiglu_clamp[il] = (float)v;
            }
        } else if (kv->v.arr.type == GGUF_STRING || kv->v.arr.type == GGUF_BOOL) {
            prob(p, "metadata %s has element type %s, expected a float array", ck, vt_name(kv->v.arr.type));
            fbad = 1;
        } else if (kv->v.arr.n < (uint64_t)c->n_layer) {
            prob(p, "metadata %s has %" PRIu64 " entries, fewer than block_count = %d", ck, kv->v.arr.n,
                 c->n_layer);
            fbad = 1;
        } else {
            for (int il = 0; il < c->n_layer; il++) {
                double v = 0;
                char nm[96];
                gguf_arr_f64(kv, (uint64_t)il, &v);
                snprintf(nm, sizeof nm, "%s[%d]", ck, il);
                if (check_float(p, nm, v, 0.0, 1e30)) fbad = 1;
                else c->swiglu_clamp[il] = (float)v;
            }
        }
    }
    (void)fbad;   /* bad float values are reported but do not block the tensor checks */
    *shape_bad = bad;
}

/* ------------------------------------------------------------------------ */
/* Bind                                                                      */
/* ------------------------------------------------------------------------ */

void ds4_weights_free(ds4_weights *w) {
    if (!w) return;
    free(w->layers);
    free(w->cfg.compress_ratios);
    /* w->mtp holds views into a mapping only */
    free(w->cfg.swiglu_clamp);
    free(w->cfg.swiglu_clamp_sh);
    memset(w, 0, sizeof *w);
}

static void bind_layer(binder *b, const ds4_config *c, const ds4_layout_hp *hp, int il, ds4_layer_weights *L,
                       int *needs_idx) {
    const gguf_file *gf = b->gf;
    const uint64_t hd = (uint64_t)c->head_dim;
    /* the MTP block is a window-only layer (docs/MTP.md); its SwiGLU clamp
     * is the model's (one value in DeepSeek's config: the last layer's) */
    int ratio = b->mtp ? 0 : c->compress_ratios[il];
    L->ratio = ratio;
    L->swiglu_clamp = c->swiglu_clamp[b->mtp ? c->n_layer - 1 : il];
    L->coff = 1;
    L->has_indexer = 0;
    if (ratio) {
        /* Overlapping (two-lane) compressor + indexer is recognised by the
         * indexer tensors, or by a compressor of width 2*head_dim
         * (docs/GGUF.md §4.2); the literal ratio 4 is not used. */
        int overlap = has_l(gf, il, "indexer.attn_q_b.weight");
        if (!overlap) {
            char nm[96];
            snprintf(nm, sizeof nm, "blk.%d.attn_compressor_kv.weight", il);
            const gguf_tensor *t = gguf_find_tensor(gf, nm);
            overlap = t && t->n_dims >= 2 && t->ne[1] == 2 * hd;
        }
        L->coff = overlap ? 2 : 1;
        L->has_indexer = overlap;
        if (overlap) *needs_idx = 1;
    }
    const ds4_layer_kind k = {ratio, L->has_indexer, il < c->n_hash, 0, 0, 0};
    bind_section(b, hp, DS4_SEC_LAYER, il, &k, L);
}

/* A file without tensors: a vocabulary-only GGUF (a tokenizer), or only
 * metadata.  One problem line that says what it is and what it is for. */
static void not_a_model(problems *p, const gguf_file *gf, const gguf_str *arch, int ds4_arch) {
    const gguf_kv *toks = gguf_find(gf, "tokenizer.ggml.tokens");
    char fam[320] = "";
    if (arch && !ds4_arch)
        snprintf(fam, sizeof fam, ", architecture \"%s\"", gguf_esc(arch->p, arch->len > 64 ? 64 : (size_t)arch->len).s);
    if (!toks || toks->type != GGUF_ARRAY) {
        prob(p, "a GGUF with no tensors and no tokenizer (metadata only%s): it cannot run as a model; -m needs a "
             "DeepSeek V4 model GGUF (such as ds4flash.gguf)", fam);
        return;
    }
    gguf_str tm;
    char model[320] = "";
    if (gguf_get_str(gf, "tokenizer.ggml.model", &tm) == 0)
        snprintf(model, sizeof model, "tokenizer \"%s\", ", gguf_esc(tm.p, tm.len > 32 ? 32 : (size_t)tm.len).s);
    prob(p, "a vocabulary-only GGUF (%s%" PRIu64 " tokens%s, no weights): it cannot run as a model. "
         "Such a file is a tokenizer (%s; ds4 --inspect shows it); -m needs a DeepSeek V4 model GGUF "
         "(such as ds4flash.gguf)", model, toks->v.arr.n, fam,
         ds4_arch ? "ds4-synth --vocab builds random-weight test models around it"
                  : "of another model family: not DeepSeek V4's either");
}

/* ------------------------------------------------------------------------ */
/* glm-dsa (GLM 5.2 / 5.3, FAMILY.md §3; keys and names as llama.cpp's)      */
/* ------------------------------------------------------------------------ */

/* Reads glm-dsa's shape parameters into c (cfg.arch = DS4_ARCH_GLM_DSA) and
 * the per-layer IndexShare kinds into own[] (allocated here, n_layer
 * entries; 1 its own indexer, 2 shared: g5n_read_config's kinds).
 * *shape_bad as read_config's. */
/* The GLM families' router keys, ARCH.expert_weights_norm (a bool,
 * default false) and ARCH.expert_gating_func (2 = sigmoid, the default and
 * the only router ds4 implements for them). */
static void glm_router_keys(problems *p, const gguf_file *gf, const char *arch, ds4_config *c) {
    char key[96];
    snprintf(key, sizeof key, "%s.expert_weights_norm", arch);
    int r = gguf_get_bool(gf, key, &c->expert_norm);
    if (r == -1) c->expert_norm = 0;
    if (r == -2) prob(p, "metadata %s is not a bool", key);
    snprintf(key, sizeof key, "%s.expert_gating_func", arch);
    const gguf_kv *kv = gguf_find(gf, key);
    int64_t gfn = 2;
    if (kv && (!is_int_type(kv->type) || gguf_get_i64(gf, key, &gfn)))
        prob(p, "metadata %s has type %s, expected an integer", key, vt_name(kv->type));
    else if (gfn != 2)
        prob(p, "metadata %s = %" PRId64 ": %s's router is sigmoid (2), the only function ds4 implements for it",
             key, gfn, arch);
}

static void glm_read_config(problems *p, const gguf_file *gf, ds4_config *c, int **own, int *shape_bad) {
    int bad = 0, fbad = 0, n_block = 0, nextn = 0, kv_len = 0;
    int64_t v64;
    c->arch = DS4_ARCH_GLM_DSA;
    meta_int32(p, gf, "block_count", 1, &n_block, &bad);
    meta_int32(p, gf, "nextn_predict_layers", 0, &nextn, &bad);
    meta_int32(p, gf, "embedding_length", 1, &c->n_embd, &bad);
    meta_int32(p, gf, "attention.head_count", 1, &c->n_head, &bad);
    meta_int32(p, gf, "attention.head_count_kv", 1, &c->n_head_kv, &bad);
    meta_int32(p, gf, "rope.dimension_count", 1, &c->n_rot, &bad);
    meta_int32(p, gf, "attention.q_lora_rank", 1, &c->q_lora, &bad);
    meta_int32(p, gf, "attention.kv_lora_rank", 1, &c->kv_lora, &bad);
    meta_int32(p, gf, "attention.key_length", 1, &kv_len, &bad);
    meta_int32(p, gf, "attention.key_length_mla", 1, &c->kmla, &bad);
    meta_int32(p, gf, "attention.value_length_mla", 1, &c->vmla, &bad);
    meta_int32(p, gf, "feed_forward_length", 1, &c->n_ff, &bad);
    meta_int32(p, gf, "leading_dense_block_count", 0, &c->n_dense, &bad);
    meta_int32(p, gf, "expert_count", 1, &c->n_expert, &bad);
    meta_int32(p, gf, "expert_used_count", 1, &c->n_expert_used, &bad);
    meta_int32(p, gf, "expert_shared_count", 1, &c->n_expert_shared, &bad);
    meta_int32(p, gf, "expert_feed_forward_length", 1, &c->n_ff_exp, &bad);
    meta_int32(p, gf, "attention.indexer.head_count", 1, &c->idx_heads, &bad);
    meta_int32(p, gf, "attention.indexer.key_length", 1, &c->idx_dim, &bad);
    meta_int32(p, gf, "attention.indexer.top_k", 1, &c->idx_topk, &bad);
    if (meta_int32(p, gf, "vocab_size", 0, &c->n_vocab, &bad) == 0) {
        /* llama.cpp's converters may leave it out: the embedding says */
        const gguf_tensor *t = gguf_find_tensor(gf, "token_embd.weight");
        if (t && t->n_dims == 2 && t->ne[1] >= 1 && t->ne[1] <= DS4_MAX_VOCAB) c->n_vocab = (int)t->ne[1];
        else { prob(p, "missing metadata glm-dsa.vocab_size (and no usable token_embd.weight)"); bad = 1; }
    }
    if (meta_int(p, gf, "context_length", 0, &v64) == 1) c->ctx_train = (uint64_t)v64;
    c->rope_base = 10000.0f;
    meta_float(p, gf, "rope.freq_base", 0, 1e-6, 1e30, &c->rope_base, &fbad);
    meta_float(p, gf, "attention.layer_norm_rms_epsilon", 1, 0.0, 1.0, &c->rms_eps, &fbad);
    c->expert_scale = 1.0f;
    meta_float(p, gf, "expert_weights_scale", 0, -1e30, 1e30, &c->expert_scale, &fbad);
    {
        float f = 1.0f;
        if (meta_float(p, gf, "rope.scaling.factor", 0, 1e-6, 1e30, &f, &fbad) == 1 && f != 1.0f)
            prob(p, "metadata glm-dsa.rope.scaling.factor = %g: RoPE scaling (YaRN) of glm-dsa is not "
                 "supported yet", f);
    }
    glm_router_keys(p, gf, "glm-dsa", c);
    if (bad) { *shape_bad = 1; return; }
    c->n_layer = n_block - nextn;
    c->n_head_kv = 1;
    c->head_dim = c->kv_lora + c->n_rot;
    if (c->n_layer < 1) {
        prob(p, "metadata glm-dsa.nextn_predict_layers = %d leaves no layer of block_count = %d", nextn, n_block);
        bad = 1;
    }
    if (kv_len != c->kv_lora + c->n_rot) {
        prob(p, "metadata glm-dsa.attention.key_length = %d must equal kv_lora_rank + rope.dimension_count = %d "
             "(one cached row: the latent and the RoPE key)", kv_len, c->kv_lora + c->n_rot);
        bad = 1;
    }
    if (c->n_rot % 2 || c->n_rot >= c->kmla || c->n_rot > c->idx_dim) {
        prob(p, "metadata glm-dsa.rope.dimension_count = %d must be even, < key_length_mla = %d and <= "
             "attention.indexer.key_length = %d", c->n_rot, c->kmla, c->idx_dim);
        bad = 1;
    }
    if (c->n_expert_used > c->n_expert) {
        prob(p, "metadata glm-dsa.expert_used_count = %d exceeds expert_count = %d", c->n_expert_used, c->n_expert);
        bad = 1;
    }
    if (c->n_dense > c->n_layer) {
        prob(p, "metadata glm-dsa.leading_dense_block_count = %d exceeds the %d layers", c->n_dense, c->n_layer);
        bad = 1;
    }
    if (bad) { *shape_bad = 1; return; }
    c->compress_ratios = calloc((size_t)c->n_layer, sizeof *c->compress_ratios);
    c->swiglu_clamp = calloc((size_t)c->n_layer, sizeof *c->swiglu_clamp);
    *own = calloc((size_t)c->n_layer, sizeof **own);
    if (!c->compress_ratios || !c->swiglu_clamp || !*own) { p->oom = 1; *shape_bad = 1; return; }
    /* IndexShare as llama.cpp reads it: attention.indexer.types, one bool
     * per layer (true: the layer runs its own indexer, else it reuses the
     * previous full layer's selection); without it, files of context >=
     * 2^20 take GLM 5.2's pattern (full iff max(i - 3 + 1, 0) % 4 == 0),
     * older ones are all full (docs/family.md). */
    const char *tk = "glm-dsa.attention.indexer.types";
    const gguf_kv *kv = gguf_find(gf, tk);
    if (kv) {
        if (kv->type != GGUF_ARRAY || (kv->v.arr.type != GGUF_BOOL && !is_int_type(kv->v.arr.type))) {
            prob(p, "metadata %s has type %s, expected a bool array", tk,
                 kv->type == GGUF_ARRAY ? vt_name(kv->v.arr.type) : vt_name(kv->type));
            *shape_bad = 1;
            return;
        }
        if (kv->v.arr.n < (uint64_t)c->n_layer) {
            prob(p, "metadata %s has %" PRIu64 " entries, fewer than the %d layers", tk, kv->v.arr.n, c->n_layer);
            *shape_bad = 1;
            return;
        }
        for (int il = 0; il < c->n_layer; il++) {
            int64_t v = 0;
            gguf_arr_i64(kv, (uint64_t)il, &v);
            (*own)[il] = v != 0 ? 1 : 2;
        }
    } else {
        for (int il = 0; il < c->n_layer; il++)
            (*own)[il] = c->ctx_train < 1048576 || (il - 3 + 1 > 0 ? il - 3 + 1 : 0) % 4 == 0 ? 1 : 2;
    }
    if ((*own)[0] != 1) {
        prob(p, "metadata %s: layer 0 is a shared indexer layer with no full layer before it", tk);
        *shape_bad = 1;
    }
    (void)fbad;
}

/* ------------------------------------------------------------------------ */
/* glm5-next (GLM 5.3 Flash, FAMILY.md §2; keys and names as llama.cpp's    */
/* glm5next loader, as tests/glm_gguf.py writes them)                       */
/* ------------------------------------------------------------------------ */

/* A per-layer float key (an array of >= n_layer, or one scalar for every
 * layer) into out[n_layer]; absent: def.  0 = read, -1 = a problem. */
static int layer_floats(problems *p, const gguf_file *gf, const char *suffix, int n_layer, float def, float *out) {
    char key[128];
    key_of(p, key, sizeof key, suffix);
    const gguf_kv *kv = gguf_find(gf, key);
    for (int il = 0; il < n_layer; il++) out[il] = def;
    if (!kv) return 0;
    if (kv->type != GGUF_ARRAY) {
        double v;
        if (gguf_get_f64(gf, key, &v)) {
            prob(p, "metadata %s has type %s, expected a float array", key, vt_name(kv->type));
            return -1;
        }
        if (check_float(p, key, v, 0.0, 1e30)) return -1;
        for (int il = 0; il < n_layer; il++) out[il] = (float)v;
        return 0;
    }
    if (kv->v.arr.type == GGUF_STRING || kv->v.arr.type == GGUF_BOOL || kv->v.arr.n < (uint64_t)n_layer) {
        prob(p, "metadata %s must be a float array of at least %d entries", key, n_layer);
        return -1;
    }
    int bad = 0;
    for (int il = 0; il < n_layer; il++) {
        double v = 0;
        char nm[160];
        gguf_arr_f64(kv, (uint64_t)il, &v);
        snprintf(nm, sizeof nm, "%s[%d]", key, il);
        if (check_float(p, nm, v, 0.0, 1e30)) bad = 1;
        else out[il] = (float)v;
    }
    return bad ? -1 : 0;
}

/* A per-layer integer key (an array of >= n_layer, or one scalar) into
 * out[n_layer]; absent: def. */
static int layer_ints(problems *p, const gguf_file *gf, const char *suffix, int n_layer, int def, int *out) {
    char key[128];
    key_of(p, key, sizeof key, suffix);
    const gguf_kv *kv = gguf_find(gf, key);
    for (int il = 0; il < n_layer; il++) out[il] = def;
    if (!kv) return 0;
    if (kv->type != GGUF_ARRAY) {
        int64_t v;
        if (!is_int_type(kv->type) || gguf_get_i64(gf, key, &v)) {
            prob(p, "metadata %s has type %s, expected an integer array", key, vt_name(kv->type));
            return -1;
        }
        for (int il = 0; il < n_layer; il++) out[il] = (int)v;
        return 0;
    }
    if ((kv->v.arr.type != GGUF_BOOL && !is_int_type(kv->v.arr.type)) || kv->v.arr.n < (uint64_t)n_layer) {
        prob(p, "metadata %s must be an integer array of at least %d entries", key, n_layer);
        return -1;
    }
    for (int il = 0; il < n_layer; il++) {
        int64_t v = 0;
        gguf_arr_i64(kv, (uint64_t)il, &v);
        out[il] = v < INT32_MIN ? INT32_MIN : v > INT32_MAX ? INT32_MAX : (int)v;
    }
    return 0;
}

/* Reads glm5-next's shape parameters into c (cfg.arch = DS4_ARCH_GLM5_NEXT),
 * its per-layer kinds into kinds[] (allocated here: 0 KDA, 1 DSA with its
 * own indexer, 2 DSA sharing the previous full layer's selection).
 * *shape_bad as read_config's. */
static void g5n_read_config(problems *p, const gguf_file *gf, ds4_config *c, int **kinds, int *shape_bad) {
    int bad = 0, fbad = 0, n_block = 0, nextn = 0, kv_len = 0, n_rot = 0;
    int64_t v64;
    c->arch = DS4_ARCH_GLM5_NEXT;
    meta_int32(p, gf, "block_count", 1, &n_block, &bad);
    meta_int32(p, gf, "nextn_predict_layers", 0, &nextn, &bad);
    meta_int32(p, gf, "embedding_length", 1, &c->n_embd, &bad);
    meta_int32(p, gf, "attention.head_count", 1, &c->n_head, &bad);
    meta_int32(p, gf, "rope.dimension_count", 0, &n_rot, &bad);
    meta_int32(p, gf, "attention.q_lora_rank", 1, &c->q_lora, &bad);
    meta_int32(p, gf, "attention.kv_lora_rank", 1, &c->kv_lora, &bad);
    meta_int32(p, gf, "attention.key_length", 1, &kv_len, &bad);
    meta_int32(p, gf, "attention.key_length_mla", 1, &c->kmla, &bad);
    meta_int32(p, gf, "attention.value_length_mla", 1, &c->vmla, &bad);
    meta_int32(p, gf, "feed_forward_length", 1, &c->n_ff, &bad);
    meta_int32(p, gf, "leading_dense_block_count", 0, &c->n_dense, &bad);
    meta_int32(p, gf, "expert_count", 1, &c->n_expert, &bad);
    meta_int32(p, gf, "expert_used_count", 1, &c->n_expert_used, &bad);
    meta_int32(p, gf, "expert_shared_count", 1, &c->n_expert_shared, &bad);
    meta_int32(p, gf, "expert_feed_forward_length", 1, &c->n_ff_exp, &bad);
    meta_int32(p, gf, "attention.indexer.head_count", 1, &c->idx_heads, &bad);
    meta_int32(p, gf, "attention.indexer.key_length", 1, &c->idx_dim, &bad);
    meta_int32(p, gf, "attention.indexer.top_k", 1, &c->idx_topk, &bad);
    c->kpool = 4;
    meta_int32(p, gf, "attention.indexer.kpool", 0, &c->kpool, &bad);
    meta_int32(p, gf, "kda.head_dim", 1, &c->kda_dim, &bad);
    meta_int32(p, gf, "ssm.conv_kernel", 1, &c->conv, &bad);
    meta_int32(p, gf, "hyper_connection.count", 1, &c->n_hc, &bad);
    meta_int32(p, gf, "hyper_connection.sinkhorn_iterations", 1, &c->hc_iters, &bad);
    if (meta_int32(p, gf, "vocab_size", 0, &c->n_vocab, &bad) == 0) {
        const gguf_tensor *t = gguf_find_tensor(gf, "token_embd.weight");
        if (t && t->n_dims == 2 && t->ne[1] >= 1 && t->ne[1] <= DS4_MAX_VOCAB) c->n_vocab = (int)t->ne[1];
        else { prob(p, "missing metadata glm5-next.vocab_size (and no usable token_embd.weight)"); bad = 1; }
    }
    if (meta_int(p, gf, "context_length", 0, &v64) == 1) c->ctx_train = (uint64_t)v64;
    meta_float(p, gf, "attention.layer_norm_rms_epsilon", 1, 0.0, 1.0, &c->rms_eps, &fbad);
    c->ln_eps = 1e-6f;
    meta_float(p, gf, "attention.layer_norm_epsilon", 0, 0.0, 1.0, &c->ln_eps, &fbad);
    meta_float(p, gf, "hyper_connection.epsilon", 1, 0.0, 1.0, &c->hc_eps, &fbad);
    meta_float(p, gf, "kda.gate_lower_bound", 1, -1e6, 0.0, &c->kda_lb, &fbad);
    c->expert_scale = 1.0f;
    meta_float(p, gf, "expert_weights_scale", 0, -1e30, 1e30, &c->expert_scale, &fbad);
    glm_router_keys(p, gf, "glm5-next", c);
    if (bad) { *shape_bad = 1; return; }
    c->n_layer = n_block - nextn;
    c->n_rot = 0;
    c->n_head_kv = 1;
    c->head_dim = c->kv_lora;
    if (c->n_layer < 1) {
        prob(p, "metadata glm5-next.nextn_predict_layers = %d leaves no layer of block_count = %d", nextn, n_block);
        bad = 1;
    }
    if (n_rot != 0) {
        prob(p, "metadata glm5-next.rope.dimension_count = %d: glm5-next has no RoPE (NoPE), it must be 0", n_rot);
        bad = 1;
    }
    if (kv_len != c->kv_lora) {
        prob(p, "metadata glm5-next.attention.key_length = %d must equal kv_lora_rank = %d (one cached row: the "
             "normed latent)", kv_len, c->kv_lora);
        bad = 1;
    }
    if (c->n_expert_used > c->n_expert) {
        prob(p, "metadata glm5-next.expert_used_count = %d exceeds expert_count = %d", c->n_expert_used,
             c->n_expert);
        bad = 1;
    }
    if (c->n_dense > c->n_layer) {
        prob(p, "metadata glm5-next.leading_dense_block_count = %d exceeds the %d layers", c->n_dense, c->n_layer);
        bad = 1;
    }
    if (c->idx_topk < c->kpool) {
        prob(p, "metadata glm5-next.attention.indexer.top_k = %d is below kpool = %d (no pool could be kept)",
             c->idx_topk, c->kpool);
        bad = 1;
    }
    /* the per-layer keys below are checked (and named) whatever the above
     * found; only a missing layer count stops here */
    if (c->n_layer < 1) { *shape_bad = 1; return; }
    c->compress_ratios = calloc((size_t)c->n_layer, sizeof *c->compress_ratios);
    c->swiglu_clamp = calloc((size_t)c->n_layer, sizeof *c->swiglu_clamp);
    c->swiglu_clamp_sh = calloc((size_t)c->n_layer, sizeof *c->swiglu_clamp_sh);
    int *hkv = calloc((size_t)c->n_layer, sizeof *hkv), *own = calloc((size_t)c->n_layer, sizeof *own);
    *kinds = calloc((size_t)c->n_layer, sizeof **kinds);
    if (!c->compress_ratios || !c->swiglu_clamp || !c->swiglu_clamp_sh || !hkv || !own || !*kinds) {
        free(hkv); free(own);
        p->oom = 1; *shape_bad = 1; return;
    }
    /* swiglu_limit 10 of the release when the keys are absent (FAMILY.md §2.1) */
    if (layer_floats(p, gf, "swiglu_clamp_exp", c->n_layer, 10.0f, c->swiglu_clamp)) fbad = 1;
    if (layer_floats(p, gf, "swiglu_clamp_shexp", c->n_layer, 10.0f, c->swiglu_clamp_sh)) fbad = 1;
    /* head_count_kv 0 marks a KDA layer; an MLA layer has 1 */
    {
        char key[96];
        key_of(p, key, sizeof key, "attention.head_count_kv");
        int hbad = 0;
        if (!gguf_find(gf, key)) { prob(p, "missing metadata %s (0 marks the KDA layers)", key); hbad = 1; }
        else if (layer_ints(p, gf, "attention.head_count_kv", c->n_layer, 0, hkv)) hbad = 1;
        for (int il = 0; il < c->n_layer && !hbad; il++)
            if (hkv[il] != 0 && hkv[il] != 1) {
                prob(p, "metadata %s[%d] = %d: 0 (a KDA layer) or 1 (an MLA layer) expected", key, il, hkv[il]);
                hbad = 1;
            }
        bad |= hbad;
    }
    /* IndexShare: attention.indexer.types (true: its own indexer); absent:
     * every DSA layer runs its own */
    if (layer_ints(p, gf, "attention.indexer.types", c->n_layer, 1, own)) bad = 1;
    int full_seen = 0, kbad = bad;
    for (int il = 0; il < c->n_layer && !kbad; il++) {
        if (!hkv[il]) { (*kinds)[il] = 0; continue; }
        (*kinds)[il] = own[il] ? 1 : 2;
        if (own[il]) full_seen = 1;
        else if (!full_seen) {
            prob(p, "metadata glm5-next.attention.indexer.types: layer %d is a shared indexer layer with no full "
                 "DSA layer before it", il);
            bad = 1;
        }
    }
    free(hkv);
    free(own);
    if (bad) *shape_bad = 1;
    (void)fbad;
}

/* The GLM families' binder: the family's config reader (its shape keys and
 * per-layer kinds: 0 KDA, 1 attention with its own indexer, 2 attention
 * sharing the previous full layer's selection), then every tensor of its
 * layout table. */
typedef void (*glm_reader)(problems *, const gguf_file *, ds4_config *, int **, int *);

static int bind_glm(gguf_file *gf, ds4_weights *w, problems *P, const char *pfx, const ds4_layout_arch *a,
                    glm_reader read) {
    int shape_bad = 0, *kinds = NULL;
    P->pfx = pfx;
    read(P, gf, &w->cfg, &kinds, &shape_bad);
    if (P->oom) { free(kinds); return DS4_ENOMEM; }
    if (shape_bad) {
        free(kinds);
        prob(P, "tensor checks skipped until the shape metadata above is fixed");
        return DS4_EFORMAT;
    }
    const ds4_config *c = &w->cfg;
    w->gf = gf;
    w->layers = calloc((size_t)c->n_layer, sizeof *w->layers);
    if (!w->layers) { free(kinds); return DS4_ENOMEM; }
    binder B = {.p = P, .gf = gf, .n_layer = c->n_layer, .arch = a};
    /* a pipeline part holds its layers (the GLM graphs run --dist
     * pipeline); the experts mode is V4's only */
    if (gguf_find(gf, "ds4.split.experts"))
        prob(P, "an experts split part of a %s model: --dist experts is not supported for %s", pfx, pfx);
    else
        B.part = part_of(P, gf, c->n_layer, &B.lo, &B.hi);
    const ds4_layout_hp hp = hp_of(c);
    bind_section(&B, &hp, DS4_SEC_HEAD, -1, NULL, w);
    bind_section(&B, &hp, DS4_SEC_TAIL, -1, NULL, w);
    for (int il = 0; il < c->n_layer; il++) {
        ds4_layer_weights *L = &w->layers[il];
        L->kda = kinds[il] == 0;
        L->own_indexer = kinds[il] == 1;
        L->dense = il < c->n_dense;
        L->swiglu_clamp = c->swiglu_clamp[il];
        L->swiglu_clamp_sh = c->swiglu_clamp_sh ? c->swiglu_clamp_sh[il] : 0.0f;
        const ds4_layer_kind k = {0, L->own_indexer, 0, L->dense, L->kda, 0};
        bind_section(&B, &hp, DS4_SEC_LAYER, il, &k, L);
    }
    free(kinds);
    w->n_bound = B.n_bound;
    if (P->oom) return DS4_ENOMEM;
    return P->n ? DS4_EFORMAT : DS4_OK;
}

int ds4_weights_bind(gguf_file *gf, ds4_weights *w, char **err) {
    memset(w, 0, sizeof *w);
    if (err) *err = NULL;
    problems P = {.path = gf->path};
    int rc = DS4_EFORMAT;

    gguf_str arch;
    int r = gguf_get_str(gf, "general.architecture", &arch);
    const int ds4_arch = r == 0 && arch.len == 9 && !memcmp(arch.p, "deepseek4", 9);
    /* Not a model at all, or another family: one line that says what the
     * file is, not the dozens of missing keys every later check would list */
    if (gf->n_tensors == 0) {
        not_a_model(&P, gf, r == 0 ? &arch : NULL, ds4_arch);
        goto fail;
    }
    if (r == 0 && arch.len == 7 && !memcmp(arch.p, "glm-dsa", 7)) {
        rc = bind_glm(gf, w, &P, "glm-dsa", &ds4_layout_glm_dsa, glm_read_config);
        if (rc == DS4_OK) return DS4_OK;
        goto fail;
    }
    if (r == 0 && arch.len == 9 && !memcmp(arch.p, "glm5-next", 9)) {
        rc = bind_glm(gf, w, &P, "glm5-next", &ds4_layout_glm5_next, g5n_read_config);
        if (rc == DS4_OK) return DS4_OK;
        goto fail;
    }
    if (r == -1) prob(&P, "missing metadata general.architecture (expected \"deepseek4\"): not a DeepSeek V4 "
                      "model file (ds4 runs only GGUFs of architecture \"deepseek4\": DeepSeek V4 Flash and PRO)");
    else if (r == -2) prob(&P, "metadata general.architecture is not a string");
    else if (!ds4_arch) {
        size_t n = arch.len > 64 ? 64 : (size_t)arch.len;
        gguf_str name;
        char nm[320] = "";
        if (gguf_get_str(gf, "general.name", &name) == 0)
            snprintf(nm, sizeof nm, " (\"%s\")", gguf_esc(name.p, name.len > 64 ? 64 : (size_t)name.len).s);
        prob(&P, "general.architecture is \"%s\"%s, expected \"deepseek4\": this is a model of another family%s; "
             "ds4 runs only GGUFs of architecture \"deepseek4\" (DeepSeek V4 Flash and PRO)",
             gguf_esc(arch.p, n).s, arch.len > 64 ? "..." : "", nm);
    }
    if (P.n) goto fail;   /* another family: every other check would be noise */

    int shape_bad = 0, idx_meta_missing = 0;
    read_config(&P, gf, &w->cfg, &shape_bad, &idx_meta_missing);
    if (P.oom) { rc = DS4_ENOMEM; goto fail; }
    if (shape_bad) {
        prob(&P, "tensor checks skipped until the shape metadata above is fixed");
        goto fail;
    }
    const ds4_config *c = &w->cfg;
    w->gf = gf;
    w->layers = calloc((size_t)c->n_layer, sizeof *w->layers);
    if (!w->layers) { rc = DS4_ENOMEM; goto fail; }

    binder B = {.p = &P, .gf = gf, .n_layer = c->n_layer};
    B.part = part_of(&P, gf, c->n_layer, &B.lo, &B.hi);
    B.xpart = xpart_of(&P, gf, c->n_expert, &B.e_lo, &B.e_hi);
    const ds4_layout_hp hp = hp_of(c);
    bind_section(&B, &hp, DS4_SEC_HEAD, -1, NULL, w);
    bind_section(&B, &hp, DS4_SEC_TAIL, -1, NULL, w);
    int needs_idx = 0;
    for (int il = 0; il < c->n_layer; il++) {
        int before = needs_idx;
        bind_layer(&B, c, &hp, il, &w->layers[il], &needs_idx);
        if (needs_idx && !before && idx_meta_missing)
            prob(&P, "layer %d needs the indexer but deepseek4.attention.indexer.head_count/key_length/top_k "
                 "are missing or invalid", il);
        if (needs_idx && !before && c->idx_dim & (c->idx_dim - 1))
            prob(&P, "metadata deepseek4.attention.indexer.key_length = %d is not a power of two "
                 "(the indexer of layer %d applies a Hadamard rotation)", c->idx_dim, il);
        if (needs_idx && !before && !idx_meta_missing && c->n_rot > c->idx_dim)
            prob(&P, "metadata deepseek4.rope.dimension_count = %d exceeds attention.indexer.key_length = %d "
                 "(the indexer of layer %d ropes the tail of each head)", c->n_rot, c->idx_dim, il);
    }
    w->n_bound = B.n_bound;
    if (P.oom) { rc = DS4_ENOMEM; goto fail; }
    if (!P.n) return DS4_OK;

fail:
    if (P.n > MAX_PROBLEMS) ds4_buf_printf(&P.msg, "\n%s: ... and %d more problems", P.path, P.n - MAX_PROBLEMS);
    if (rc == DS4_ENOMEM && !P.msg.n) ds4_buf_printf(&P.msg, "%s: out of memory", P.path);
    if (err) *err = P.msg.p ? P.msg.p : strdup("model binding failed");
    else ds4_buf_free(&P.msg);
    ds4_weights_free(w);
    return rc;
}

/* Entry il of a per-layer float array key when the array has one (the
 * NextN block's entry past the trunk's), else def. */
static float layer_float_at(const gguf_file *gf, const char *key, int il, float def) {
    const gguf_kv *kv = gguf_find(gf, key);
    double v;
    if (!kv) return def;
    if (kv->type != GGUF_ARRAY) return gguf_get_f64(gf, key, &v) ? def : (float)v;
    if (kv->v.arr.type == GGUF_STRING || kv->v.arr.type == GGUF_BOOL || kv->v.arr.n <= (uint64_t)il) return def;
    if (gguf_arr_f64(kv, (uint64_t)il, &v) || !(v >= 0.0 && v <= 1e30)) return def;
    return (float)v;
}

/* The MTP block: its own tensors plus one layer of the main layout, bound
 * under the "mtp.0." prefix with the main model's shapes.  glm-dsa: the
 * NextN block at blk.<n_layer> (llama.cpp's names: the nextn.* wiring
 * and a MoE decoder layer; an indexer there is not bound -- the block
 * attends densely, as llama.cpp runs it).  glm5-next: the same wiring at
 * blk.<n_layer> and a DSA layer with its own k-pool indexer and a MoE FFN,
 * no HC rows (llama.cpp's glm5-next graph_mtp runs that indexer); its
 * SwiGLU clamps are entry n_layer of the per-layer arrays, else the last
 * trunk layer's. */
int ds4_weights_bind_mtp(gguf_file *gf, ds4_weights *w, int required, char **err) {
    if (err) *err = NULL;
    w->has_mtp = 0;
    memset(&w->mtp, 0, sizeof w->mtp);
    const ds4_config *c = &w->cfg;
    const int g5n = c->arch == DS4_ARCH_GLM5_NEXT;
    const int glm = c->arch == DS4_ARCH_GLM_DSA || g5n;
    char pre[32];
    if (glm) snprintf(pre, sizeof pre, "blk.%d.", c->n_layer);
    else snprintf(pre, sizeof pre, "mtp.0.");
    const size_t np = strlen(pre);
    int any = 0;
    for (uint64_t i = 0; i < gf->n_tensors && !any; i++) any = !strncmp(gf->tensors[i].name, pre, np);
    if (!any && !required) return DS4_OK;
    problems P = {.path = gf->path};
    if (!any) {
        if (glm) prob(&P, "no blk.%d.* tensors: not a file holding the NextN (MTP) block of this model", c->n_layer);
        else prob(&P, "no mtp.0.* tensors: not an MTP file");
    } else if (g5n) {
        binder B = {.p = &P, .gf = gf, .n_layer = c->n_layer, .arch = &ds4_layout_glm5_next};
        const ds4_layout_hp hp = hp_of(c);
        ds4_mtp_weights *m = &w->mtp;
        bind_section(&B, &hp, DS4_SEC_MTP, c->n_layer, NULL, m);
        const ds4_layer_kind k = {0, 1, 0, 0, 0, 1};
        ds4_layer_weights *L = &m->block;
        L->own_indexer = 1;
        char key[96];
        snprintf(key, sizeof key, "glm5-next.swiglu_clamp_exp");
        L->swiglu_clamp = layer_float_at(gf, key, c->n_layer, c->swiglu_clamp[c->n_layer - 1]);
        snprintf(key, sizeof key, "glm5-next.swiglu_clamp_shexp");
        L->swiglu_clamp_sh = layer_float_at(gf, key, c->n_layer, c->swiglu_clamp_sh[c->n_layer - 1]);
        bind_section(&B, &hp, DS4_SEC_LAYER, c->n_layer, &k, L);
    } else if (glm) {
        binder B = {.p = &P, .gf = gf, .n_layer = c->n_layer, .arch = &ds4_layout_glm_dsa};
        const ds4_layout_hp hp = hp_of(c);
        ds4_mtp_weights *m = &w->mtp;
        bind_section(&B, &hp, DS4_SEC_MTP, c->n_layer, NULL, m);
        const ds4_layer_kind k = {0, 0, 0, 0, 0, 0};
        bind_section(&B, &hp, DS4_SEC_LAYER, c->n_layer, &k, &m->block);
    } else {
        binder B = {.p = &P, .gf = gf, .n_layer = c->n_layer, .mtp = 1};
        const ds4_layout_hp hp = hp_of(c);
        ds4_mtp_weights *m = &w->mtp;
        bind_section(&B, &hp, DS4_SEC_MTP, -1, NULL, m);
        int needs_idx = 0;
        bind_layer(&B, c, &hp, c->n_layer, &m->block, &needs_idx);
    }
    if (P.oom) {
        ds4_buf_free(&P.msg);
        memset(&w->mtp, 0, sizeof w->mtp);
        return ds4_set_err(err, DS4_ENOMEM, "%s: out of memory", gf->path);
    }
    if (!P.n) { w->has_mtp = 1; return DS4_OK; }
    if (P.n > MAX_PROBLEMS) ds4_buf_printf(&P.msg, "\n%s: ... and %d more problems", P.path, P.n - MAX_PROBLEMS);
    if (err) *err = P.msg.p ? P.msg.p : strdup("MTP binding failed");
    else ds4_buf_free(&P.msg);
    memset(&w->mtp, 0, sizeof w->mtp);
    return DS4_EFORMAT;
}

/* ------------------------------------------------------------------------ */
/* Bytes read per decoded token                                              */
/* ------------------------------------------------------------------------ */

static uint64_t tb(const ds4_tensor *t) { return t->data ? t->nbytes : 0; }

/* One expert's slice of a 3-D expert tensor. */
static uint64_t expert_bytes(const ds4_tensor *t) { return t->data && t->ne[2] ? t->nbytes / t->ne[2] : 0; }

uint64_t ds4_weights_active_bytes(const ds4_weights *w) {
    if (!w->layers) return 0;
    uint64_t s = 0;
    s += w->token_embd.data ? w->token_embd.row_bytes : 0;      /* one embedding row */
    s += tb(&w->output_hc_fn) + tb(&w->output_hc_base) + tb(&w->output_hc_scale);
    s += tb(&w->output_norm) + tb(&w->output);
    const uint64_t K = (uint64_t)w->cfg.n_expert_used;
    for (int il = 0; il < w->cfg.n_layer; il++) {
        const ds4_layer_weights *L = &w->layers[il];
        const ds4_tensor *dense[] = {
            &L->hc_attn_fn, &L->hc_attn_scale, &L->hc_attn_base, &L->attn_norm, &L->attn_q_a,
            &L->attn_q_a_norm, &L->attn_q_b, &L->attn_kv, &L->attn_kv_a_norm, &L->attn_sinks,
            &L->attn_output_a, &L->attn_output_b, &L->comp_ape, &L->comp_kv, &L->comp_gate,
            &L->comp_norm, &L->idx_q_b, &L->idx_proj, &L->idx_comp_ape, &L->idx_comp_kv,
            &L->idx_comp_gate, &L->idx_comp_norm, &L->hc_ffn_fn, &L->hc_ffn_scale, &L->hc_ffn_base,
            &L->ffn_norm, &L->ffn_gate_inp, &L->exp_probs_b, &L->ffn_gate_shexp, &L->ffn_up_shexp,
            &L->ffn_down_shexp,
            /* glm-dsa's own (absent in V4 layers) */
            &L->attn_k_b, &L->attn_v_b, &L->attn_output, &L->idx_k, &L->idx_k_norm, &L->idx_k_norm_b,
            &L->ffn_gate, &L->ffn_up, &L->ffn_down,
            /* glm5-next's KDA layers */
            &L->kda_q, &L->kda_k, &L->kda_v, &L->conv_q, &L->conv_k, &L->conv_v, &L->ssm_f_a, &L->ssm_f_b,
            &L->ssm_beta, &L->ssm_a, &L->ssm_dt_b, &L->ssm_g_a, &L->ssm_g_b, &L->ssm_norm,
        };
        for (size_t i = 0; i < sizeof dense / sizeof dense[0]; i++) s += tb(dense[i]);
        s += L->tid2eid.data ? L->tid2eid.row_bytes : 0;          /* one token's expert ids */
        s += K * (expert_bytes(&L->ffn_gate_exps) + expert_bytes(&L->ffn_up_exps) +
                  expert_bytes(&L->ffn_down_exps));
    }
    return s;
}

/* Multiply-adds of the layer matmuls per token: every weight matrix a token
 * goes through once (projections, compressor and indexer projections, HC
 * mixing, router, shared expert, the K routed experts).  The output head
 * is left out (prefill computes it for the last token only), and so are the
 * attention products, which grow with the context. */
static uint64_t macs(const ds4_tensor *t) { return t->data ? t->ne[0] * t->ne[1] : 0; }

uint64_t ds4_weights_layer_macs(const ds4_weights *w) {
    if (!w->layers) return 0;
    uint64_t s = 0;
    const uint64_t K = (uint64_t)w->cfg.n_expert_used;
    for (int il = 0; il < w->cfg.n_layer; il++) {
        const ds4_layer_weights *L = &w->layers[il];
        const ds4_tensor *mat[] = {
            &L->hc_attn_fn, &L->attn_q_a, &L->attn_q_b, &L->attn_kv, &L->attn_output_a,
            &L->attn_output_b, &L->comp_kv, &L->comp_gate, &L->idx_q_b, &L->idx_proj,
            &L->idx_comp_kv, &L->idx_comp_gate, &L->hc_ffn_fn, &L->ffn_gate_inp,
            &L->ffn_gate_shexp, &L->ffn_up_shexp, &L->ffn_down_shexp,
            &L->attn_output, &L->idx_k, &L->ffn_gate, &L->ffn_up, &L->ffn_down,
            &L->idx_comp_gate, &L->kda_q, &L->kda_k, &L->kda_v, &L->ssm_f_a, &L->ssm_f_b, &L->ssm_beta,
            &L->ssm_g_a, &L->ssm_g_b,
        };
        for (size_t i = 0; i < sizeof mat / sizeof mat[0]; i++) s += macs(mat[i]);
        /* glm-dsa's per-head absorption matrices (ne[2] heads; V4: absent) */
        s += macs(&L->attn_k_b) * L->attn_k_b.ne[2] + macs(&L->attn_v_b) * L->attn_v_b.ne[2];
        s += K * (macs(&L->ffn_gate_exps) + macs(&L->ffn_up_exps) + macs(&L->ffn_down_exps));
    }
    return s;
}

/* model.h: every tensor field of ds4_layer_weights but the routed experts */
const size_t ds4_layer_tensor_fields[] = {
    offsetof(ds4_layer_weights, hc_attn_fn), offsetof(ds4_layer_weights, hc_attn_scale),
    offsetof(ds4_layer_weights, hc_attn_base), offsetof(ds4_layer_weights, attn_norm),
    offsetof(ds4_layer_weights, attn_q_a), offsetof(ds4_layer_weights, attn_q_a_norm),
    offsetof(ds4_layer_weights, attn_q_b), offsetof(ds4_layer_weights, attn_kv),
    offsetof(ds4_layer_weights, attn_kv_a_norm), offsetof(ds4_layer_weights, attn_sinks),
    offsetof(ds4_layer_weights, attn_output_a), offsetof(ds4_layer_weights, attn_output_b),
    offsetof(ds4_layer_weights, comp_ape), offsetof(ds4_layer_weights, comp_kv),
    offsetof(ds4_layer_weights, comp_gate), offsetof(ds4_layer_weights, comp_norm),
    offsetof(ds4_layer_weights, idx_q_b), offsetof(ds4_layer_weights, idx_proj),
    offsetof(ds4_layer_weights, idx_comp_ape), offsetof(ds4_layer_weights, idx_comp_kv),
    offsetof(ds4_layer_weights, idx_comp_gate), offsetof(ds4_layer_weights, idx_comp_norm),
    offsetof(ds4_layer_weights, hc_ffn_fn), offsetof(ds4_layer_weights, hc_ffn_scale),
    offsetof(ds4_layer_weights, hc_ffn_base), offsetof(ds4_layer_weights, ffn_norm),
    offsetof(ds4_layer_weights, ffn_gate_inp), offsetof(ds4_layer_weights, exp_probs_b),
    offsetof(ds4_layer_weights, tid2eid), offsetof(ds4_layer_weights, ffn_gate_shexp),
    offsetof(ds4_layer_weights, ffn_up_shexp), offsetof(ds4_layer_weights, ffn_down_shexp),
};
const size_t ds4_n_layer_tensor_fields = sizeof ds4_layer_tensor_fields / sizeof ds4_layer_tensor_fields[0];
/* the GLM graphs' own fields (not in the list above: the Q8_0 scan at
 * load has not been measured on them and stays as it was) */
const size_t ds4_glm_layer_tensor_fields[] = {
    offsetof(ds4_layer_weights, attn_k_b), offsetof(ds4_layer_weights, attn_v_b),
    offsetof(ds4_layer_weights, attn_output), offsetof(ds4_layer_weights, idx_k),
    offsetof(ds4_layer_weights, idx_k_norm), offsetof(ds4_layer_weights, idx_k_norm_b),
    offsetof(ds4_layer_weights, ffn_gate), offsetof(ds4_layer_weights, ffn_up),
    offsetof(ds4_layer_weights, ffn_down), offsetof(ds4_layer_weights, kda_q),
    offsetof(ds4_layer_weights, kda_k), offsetof(ds4_layer_weights, kda_v),
    offsetof(ds4_layer_weights, conv_q), offsetof(ds4_layer_weights, conv_k),
    offsetof(ds4_layer_weights, conv_v), offsetof(ds4_layer_weights, ssm_f_a),
    offsetof(ds4_layer_weights, ssm_f_b), offsetof(ds4_layer_weights, ssm_beta),
    offsetof(ds4_layer_weights, ssm_a), offsetof(ds4_layer_weights, ssm_dt_b),
    offsetof(ds4_layer_weights, ssm_g_a), offsetof(ds4_layer_weights, ssm_g_b),
    offsetof(ds4_layer_weights, ssm_norm),
};
const size_t ds4_n_glm_layer_tensor_fields =
    sizeof ds4_glm_layer_tensor_fields / sizeof ds4_glm_layer_tensor_fields[0];
