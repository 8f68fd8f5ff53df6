/*
 * layout.h -- the tensor layout of a model file, as data (docs/GGUF.md §4).
 *
 * Owns: one table per architecture (DeepSeek V4: `ds4_layout_deepseek4`)
 * with a row per tensor family -- its GGUF name, its dims as expressions
 * of the hparams, its role (what recipes and the loader decide by), the
 * layer kinds it exists in, whether a reader may miss it, and its name and
 * dtype in the official Hugging Face checkpoint -- plus the walk that turns
 * a table and a set of hparams into the concrete tensors in the order the
 * files hold them, the recipes (role -> storage type) and the storage
 * types each role accepts.  The loader (model.c), ds4-quantize and
 * ds4-synth all read the layout from here; none spells it again.
 * Must not: read or write files, or know the engine's weight structs (the
 * loader maps a row's id to its field).
 * Another architecture is another table of the same rows (and, if its
 * dims need them, more DS4_LD_* expressions), not another walk: glm-dsa
 * (`ds4_layout_glm_dsa`) is the second.
 */
#ifndef DS4_LAYOUT_H
#define DS4_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

/* Tensor families: a row's id, the key by which the loader binds a tensor
 * to its field and ds4-synth picks its weight scale. */
enum {
    /* globals before the layers */
    DS4_T_TOKEN_EMBD,
    /* per layer (blk.N.*, and the MTP block's layer mtp.0.*) */
    DS4_T_HC_ATTN_FN, DS4_T_HC_ATTN_SCALE, DS4_T_HC_ATTN_BASE,
    DS4_T_HC_FFN_FN, DS4_T_HC_FFN_SCALE, DS4_T_HC_FFN_BASE,
    DS4_T_ATTN_NORM, DS4_T_ATTN_Q_A, DS4_T_ATTN_Q_A_NORM, DS4_T_ATTN_Q_B,
    DS4_T_ATTN_KV, DS4_T_ATTN_KV_A_NORM, DS4_T_ATTN_SINKS,
    DS4_T_ATTN_OUTPUT_A, DS4_T_ATTN_OUTPUT_B,
    DS4_T_COMP_APE, DS4_T_COMP_KV, DS4_T_COMP_GATE, DS4_T_COMP_NORM,
    DS4_T_IDX_Q_B, DS4_T_IDX_PROJ,
    DS4_T_IDX_COMP_APE, DS4_T_IDX_COMP_KV, DS4_T_IDX_COMP_GATE, DS4_T_IDX_COMP_NORM,
    DS4_T_FFN_NORM, DS4_T_FFN_GATE_INP, DS4_T_EXP_PROBS_B,
    DS4_T_FFN_GATE_EXPS, DS4_T_FFN_UP_EXPS, DS4_T_FFN_DOWN_EXPS,
    DS4_T_FFN_GATE_SHEXP, DS4_T_FFN_UP_SHEXP, DS4_T_FFN_DOWN_SHEXP,
    DS4_T_TID2EID,
    /* globals after the layers: the HC head and the output head */
    DS4_T_OUTPUT_HC_BASE, DS4_T_OUTPUT_HC_FN, DS4_T_OUTPUT_HC_SCALE,
    DS4_T_OUTPUT_NORM, DS4_T_OUTPUT,
    /* the MTP block's own tensors (docs/MTP.md) */
    DS4_T_MTP_E_PROJ, DS4_T_MTP_H_PROJ, DS4_T_MTP_ENORM, DS4_T_MTP_HNORM, DS4_T_MTP_NORM,
    DS4_T_MTP_HC_HEAD_BASE, DS4_T_MTP_HC_HEAD_FN, DS4_T_MTP_HC_HEAD_SCALE,
    /* glm-dsa's own families (FAMILY.md §3; its kv_a_mqa binds as
     * DS4_T_ATTN_KV, its indexer q/proj as DS4_T_IDX_Q_B/_PROJ) */
    DS4_T_ATTN_K_B, DS4_T_ATTN_V_B, DS4_T_ATTN_OUTPUT,
    DS4_T_IDX_K, DS4_T_IDX_K_NORM, DS4_T_IDX_K_NORM_B,
    DS4_T_FFN_GATE, DS4_T_FFN_UP, DS4_T_FFN_DOWN,
    /* glm-dsa's NextN (MTP) block: blk.<n_layer>.nextn.* (its enorm and
     * hnorm bind as DS4_T_MTP_ENORM/_HNORM, shared_head_norm as
     * DS4_T_MTP_NORM) */
    DS4_T_NEXTN_EH_PROJ, DS4_T_NEXTN_EMBED, DS4_T_NEXTN_HEAD,
    /* glm5-next's KDA layers (FAMILY.md §2; its k-pool compressor binds
     * as DS4_T_IDX_COMP_GATE/_APE, its KDA output as DS4_T_ATTN_OUTPUT) */
    DS4_T_KDA_Q, DS4_T_KDA_K, DS4_T_KDA_V, DS4_T_CONV_Q, DS4_T_CONV_K, DS4_T_CONV_V,
    DS4_T_SSM_F_A, DS4_T_SSM_F_B, DS4_T_SSM_BETA, DS4_T_SSM_A, DS4_T_SSM_DT_B,
    DS4_T_SSM_G_A, DS4_T_SSM_G_B, DS4_T_SSM_NORM,
    DS4_T_COUNT
};

/* Dim expressions: what one dim of a row is, from the hparams and the
 * layer's kind.  0 ends a row's dims. */
enum {
    DS4_LD_NONE,
    DS4_LD_ONE, DS4_LD_THREE,     /* literals */
    DS4_LD_EMBD,                  /* D */
    DS4_LD_VOCAB,                 /* V */
    DS4_LD_HC,                    /* N = hyper-connection streams */
    DS4_LD_HC_DIM,                /* N*D */
    DS4_LD_HC_MIX,                /* (2+N)*N */
    DS4_LD_QLORA,
    DS4_LD_HEADS,                 /* H */
    DS4_LD_Q_DIM,                 /* H*head_dim */
    DS4_LD_HEAD_DIM,
    DS4_LD_OUT_GROUP_DIM,         /* H*head_dim / output groups */
    DS4_LD_OUT_LOW,               /* output groups * output lora rank */
    DS4_LD_COMP_DIM,              /* (indexer layer ? 2 : 1) * head_dim */
    DS4_LD_RATIO,                 /* the layer's compress ratio */
    DS4_LD_IDX_Q_DIM,             /* indexer heads * indexer dim */
    DS4_LD_IDX_HEADS,
    DS4_LD_IDX_COMP_DIM,          /* 2 * indexer dim */
    DS4_LD_IDX_DIM,
    DS4_LD_EXPERTS,               /* E */
    DS4_LD_FF,                    /* F = one expert's hidden width */
    DS4_LD_SHARED_FF,             /* F * shared experts */
    DS4_LD_USED,                  /* K = experts used per token */
    /* glm-dsa (MLA with a RoPE tail) */
    DS4_LD_KV_LORA,               /* kv_lora_rank */
    DS4_LD_KV_A,                  /* kv_lora_rank + rope dims: one cached row */
    DS4_LD_Q_MLA,                 /* H * key_length_mla */
    DS4_LD_NOPE,                  /* key_length_mla - rope dims */
    DS4_LD_VMLA,                  /* value_length_mla */
    DS4_LD_ATT_OUT,               /* H * value_length_mla */
    DS4_LD_FF_DENSE,              /* feed_forward_length (dense layers) */
    DS4_LD_EMBD2,                 /* 2 * D: the NextN block's [enorm(e); hnorm(h)] */
    /* glm5-next (KDA) */
    DS4_LD_KDA_K,                 /* kda.head_dim */
    DS4_LD_KDA_DI,                /* H * kda.head_dim */
    DS4_LD_CONV,                  /* ssm.conv_kernel */
    DS4_LD_KPOOL,                 /* attention.indexer.kpool */
};

/* Roles: what a recipe stores a tensor as, and which storage types the
 * loader accepts for it. */
enum {
    DS4_ROLE_VEC,        /* 1-D: F32 only */
    DS4_ROLE_I32,        /* the hash router's table: I32 */
    DS4_ROLE_EMBD,       /* token embedding (read a row at a time) */
    DS4_ROLE_ELEM,       /* compressor position biases (read value by value: no blocks) */
    DS4_ROLE_SMALL,      /* HC, compressor, indexer and router matrices: F16 in every recipe */
    DS4_ROLE_PROJ,       /* attention projections (and the MTP input projections) */
    DS4_ROLE_SHEXP,      /* shared expert */
    DS4_ROLE_OUT,        /* output head */
    DS4_ROLE_EXP_GU,     /* routed experts' gate and up */
    DS4_ROLE_EXP_DOWN,   /* routed experts' down */
};

/* The layer kinds a row exists in. */
enum {
    DS4_W_ALWAYS,
    DS4_W_COMP,          /* compress ratio != 0 */
    DS4_W_INDEXER,       /* overlapping compressor + indexer */
    DS4_W_HASH,          /* hash-routed layers (the first hash_layer_count) */
    DS4_W_LEARNED,       /* learned-router layers (a writer writes it there only) */
    DS4_W_OWN_IDX,       /* glm-dsa: a "full" IndexShare layer (its own indexer) */
    DS4_W_DENSE,         /* glm-dsa: a leading dense FFN layer */
    DS4_W_MOE,           /* glm-dsa: a MoE layer */
    DS4_W_KDA,           /* glm5-next: a KDA layer */
    DS4_W_DSA,           /* glm5-next: a DSA (MLA) layer */
    DS4_W_DSA_OWN,       /* glm5-next: a DSA layer with its own indexer */
    DS4_W_TRUNK,         /* glm5-next: a trunk layer (not the NextN block): the HC rows */
};

/* Dtypes of DeepSeek's Hugging Face release (docs/CHECKPOINT.md). */
enum { DS4_HF_F32, DS4_HF_BF16, DS4_HF_FP8, DS4_HF_FP4, DS4_HF_I64 };

typedef struct {
    int id;                 /* DS4_T_* */
    const char *name;       /* GGUF name; layer rows: after "blk.N." / "mtp.0." */
    uint8_t dim[3];         /* DS4_LD_*, fastest first; DS4_LD_NONE past the last */
    uint8_t role;           /* DS4_ROLE_* */
    uint8_t when;           /* DS4_W_* */
    uint8_t optional;       /* a reader accepts its absence, and binds it in
                               every layer where it is present */
    const char *hf;         /* checkpoint name (layer rows: after the arch's
                               hf_layer + "N.", V4's "layers.N.");
                               routed experts: the prefix of the per-expert
                               names; NULL: not in the checkpoint */
    const char *hf_expert;  /* routed experts: "w1" / "w3" / "w2" */
    uint8_t hf_dtype;       /* DS4_HF_* */
} ds4_layout_row;

/* The sections of a file, in order. */
enum { DS4_SEC_HEAD, DS4_SEC_LAYER, DS4_SEC_TAIL, DS4_SEC_MTP, DS4_SEC_COUNT };

typedef struct {
    const char *arch;                      /* general.architecture */
    const ds4_layout_row *sec[DS4_SEC_COUNT];
    int n[DS4_SEC_COUNT];
    const char *hf_layer;                  /* the checkpoint's layer prefix
                                              (then "N."); NULL: "layers." */
} ds4_layout_arch;

/* DeepSeek V4 Flash and PRO. */
extern const ds4_layout_arch ds4_layout_deepseek4;
/* GLM 5.2 / 5.3 (llama.cpp's names, Z.ai's checkpoint names).  Its MTP
 * section is the NextN block's own tensors, named blk.<n_layer>.nextn.*
 * (ds4_layout_section with il = n_layer; ds4-quantize does not convert
 * it); the block's decoder layer is the layer section at il = n_layer. */
extern const ds4_layout_arch ds4_layout_glm_dsa;
/* GLM 5.3 Flash, glm5-next (llama.cpp's names as tests/glm_gguf.py writes
 * them, the names of Z.ai's checkpoint; no MTP section). */
extern const ds4_layout_arch ds4_layout_glm5_next;

/* The shape values the dims are made of. */
typedef struct {
    int64_t n_embd, n_vocab, n_hc, n_head, head_dim, q_lora, o_lora, o_groups;
    int64_t n_expert, n_ff, n_shared, n_used, idx_heads, idx_dim;
    /* glm-dsa */
    int64_t kv_lora, n_rot, kmla, vmla, n_ff_dense;
    /* glm5-next */
    int64_t kda_dim, conv, kpool;
    /* for ds4_layout_list only: the layer count, the hash-routed layers,
     * the per-layer compress ratios [n_layer] */
    int64_t n_layer, n_hash;
    const int64_t *ratios;
} ds4_layout_hp;

/* What kind a layer is: its rows' DS4_W_* conditions. */
/* nextn: glm5-next's NextN (MTP) block (no hyper-connection rows). */
typedef struct { int ratio, indexer, hash, dense, kda, nextn; } ds4_layer_kind;

/* The kind of layer `il` as the writers make it: the overlapping
 * compressor + indexer exactly on ratio-4 layers, hash routing on the
 * first n_hash.  (The loader reads the kind from the file instead.) */
ds4_layer_kind ds4_layout_writer_kind(int64_t ratio, int64_t il, int64_t n_hash);

/* One concrete tensor. */
typedef struct {
    char name[64];
    const ds4_layout_row *row;
    const char *hf_layer;     /* the arch's checkpoint layer prefix */
    int layer;                /* -1: global; the layer (the MTP block's: n_layer) */
    uint32_t nd;
    uint64_t ne[3];           /* fastest first; unused dims 1 */
} ds4_layout_tensor;

#define DS4_LAYOUT_MAX_ROWS 64   /* rows of one section, at most */

/* Flags of ds4_layout_section. */
#define DS4_LAYOUT_READ 1   /* a reader: optional rows whatever their condition */
#define DS4_LAYOUT_MTP  2   /* the layer section under "mtp.0." */

/* The tensors of one section of `a` (the layer section: layer `il` of
 * kind `k`; the MTP section with il >= 0: its rows under "blk.<il>.", as
 * glm-dsa names its NextN block) in file order, into
 * out[DS4_LAYOUT_MAX_ROWS]; returns their count. */
int ds4_layout_section(const ds4_layout_arch *a, int sec, const ds4_layout_hp *hp, int il,
                       const ds4_layer_kind *k, int flags, ds4_layout_tensor *out);

/* Every tensor of a whole file as the writers make it (head, the layers
 * of hp->n_layer with their writer kinds, tail, and with `mtp` the MTP
 * block and its window-only, learned-router layer).  Returns a malloc'ed
 * array (*n entries), NULL when out of memory. */
ds4_layout_tensor *ds4_layout_list(const ds4_layout_arch *a, const ds4_layout_hp *hp, int mtp, size_t *n);

/* A dim expression's value (0 for DS4_LD_NONE). */
uint64_t ds4_layout_dim(int d, const ds4_layout_hp *hp, const ds4_layer_kind *k);

/* The checkpoint name of `t` (for routed experts: expert `expert`'s);
 * "" if the tensor is not in the checkpoint. */
void ds4_layout_hf_name(const ds4_layout_tensor *t, int64_t expert, char *out, size_t n);

/* Recipes: the storage type of each role.  Only the projections and the
 * routed experts vary; the rest is fixed (docs/GGUF.md §5). */
typedef struct {
    const char *name;
    uint32_t proj;          /* DS4_ROLE_PROJ, _SHEXP, _OUT */
    uint32_t gate_up, down; /* DS4_ROLE_EXP_GU, _EXP_DOWN */
} ds4_recipe;

/* "f16", "q2", "q4", "mxfp4"; NULL if unknown. */
const ds4_recipe *ds4_recipe_find(const char *name);
/* The type a recipe gives role `role` (GGML_*). */
uint32_t ds4_recipe_type(const ds4_recipe *r, int role);

/* Whether the loader accepts storage type `type` (GGML_*) for `role`, and
 * the accepted types in words ("F32", "one of F32, F16, ..."). */
int ds4_layout_type_ok(int role, uint32_t type);
const char *ds4_layout_types_text(int role);

#endif /* DS4_LAYOUT_H */
