#!/usr/bin/env python3
"""glm_hf.py -- a tiny GLM 5.2-style Hugging Face checkpoint (Z.ai's
GlmMoeDsaForCausalLM layout), or with --arch glm5-next a GLM 5.3 Flash one
(Glm5NextForConditionalGeneration), and the same weights as a glm-dsa /
glm5-next GGUF written directly by tests/glm_gguf.py: the input and the
expected output of ds4-quantize on GLM checkpoints (tests/t_quantize_glm.sh).

  glm_hf.py CK_DIR REF.gguf [--vocab VOCAB.gguf] [--seed N] [--set KEY=VALUE]...
            [--type f32|f16|q8_0] [--dtype bf16|f32] [--shards N]
            [--types-key] [--mtp] [--drop HF_NAME]
            [--arch glm-dsa|glm5-next] [--flat] [--shared N]...

The weights are glm_gguf.py's (its shape table, --set, --seed), rounded to
BF16 first with --dtype bf16 (the default, as Z.ai publishes GLM 5.2) so
the checkpoint holds them exactly; REF.gguf is glm_gguf.py's file of those
values with --type.  The checkpoint: config.json (the IndexShare pattern as
index_topk_freq / index_skip_topk_offset, or with --types-key as
indexer_types), model-0000K-of-0000N.safetensors with the index,
tokenizer.json and tokenizer_config.json built from VOCAB's tokenizer keys
(model.vocab, merges, added_tokens for the control tokens).  Names and
shapes: docs/CHECKPOINT.md ("GLM 5.2 / 5.3"); kv_b_proj is attn_k_b and
attn_v_b put back together (per head the qk_nope rows of K, i.e. attn_k_b
transposed, then the v rows).  --mtp adds a NextN layer past
num_hidden_layers (num_nextn_predict_layers 1) that ds4-quantize must skip;
--drop leaves one tensor out (a broken checkpoint).  --fp8 stores the
matrices FP8 releases quantize (MLA q_a/q_b/kv_a/o -- kv_b_proj stays BF16
-- and the dense, shared and routed FFN) as F8_E4M3 with an F32
weight_scale_inv per 128x128 block (max|x| / 448); REF.gguf holds code x
scale, one F32 multiply, as ds4-quantize decodes it.

glm5-next (docs/CHECKPOINT.md "GLM 5.3 Flash"): config.json with the text
fields in text_config (--flat: at the top level, a text-only
Glm5NextForCausalLM export) and the tensors under "model.language_model."
(--flat: "model."); KDA as Kimi-Linear's q/k/v_proj, q/k/v_conv1d [C, 1,
kernel], f_a/f_b/g_a/g_b/b_proj, A_log, dt_bias, o_norm; the HC and
k-pool compressor parameters without ".weight"; the F32_NAMES F32, the
rest BF16 (--dtype bf16).  The checkpoint holds A_log = log(-ssm_a) in F32
and REF.gguf's ssm_a is -exp(A_log) in double rounded to F32 (what
ds4-quantize computes).  --shared N makes DSA layer N share the previous
full layer's indexer (indexer_types "shared"; REF.gguf drops its indexer
tensors and carries attention.indexer.types).

Owns: the GGUF -> checkpoint name map of the test and a minimal
safetensors writer.  Must not: depend on anything but numpy and the test
helpers (glm_gguf.py, the shared gguf_reader).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import glm_gguf as G  # noqa: E402

sys.path.insert(0, os.path.join(G.SHARED, "oracle"))
import gguf_reader  # noqa: E402

LAYER = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q_a.weight": "self_attn.q_a_proj.weight",
    "attn_q_a_norm.weight": "self_attn.q_a_layernorm.weight",
    "attn_q_b.weight": "self_attn.q_b_proj.weight",
    "attn_kv_a_mqa.weight": "self_attn.kv_a_proj_with_mqa.weight",
    "attn_kv_a_norm.weight": "self_attn.kv_a_layernorm.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "indexer.attn_q_b.weight": "self_attn.indexer.wq_b.weight",
    "indexer.attn_k.weight": "self_attn.indexer.wk.weight",
    "indexer.k_norm.weight": "self_attn.indexer.k_norm.weight",
    "indexer.k_norm.bias": "self_attn.indexer.k_norm.bias",
    "indexer.proj.weight": "self_attn.indexer.weights_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "ffn_gate_inp.weight": "mlp.gate.weight",
    "exp_probs_b.bias": "mlp.gate.e_score_correction_bias",
    "ffn_gate_shexp.weight": "mlp.shared_experts.gate_proj.weight",
    "ffn_up_shexp.weight": "mlp.shared_experts.up_proj.weight",
    "ffn_down_shexp.weight": "mlp.shared_experts.down_proj.weight",
}
EXPERTS = {"ffn_gate_exps.weight": "gate_proj", "ffn_up_exps.weight": "up_proj",
           "ffn_down_exps.weight": "down_proj"}
GLOBAL = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
          "output.weight": "lm_head.weight"}

# glm5-next (GLM 5.3 Flash, transformers' glm5_next; llama.cpp's
# Glm5NextModel converter maps these back): glm-dsa's names plus the
# Kimi-Linear KDA attention, the HC parameters and the k-pool compressor
# (bare names, no ".weight")
G5N_LAYER = dict(LAYER)
G5N_LAYER.update({
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "ssm_f_a.weight": "self_attn.f_a_proj.weight",
    "ssm_f_b.weight": "self_attn.f_b_proj.weight",
    "ssm_beta.weight": "self_attn.b_proj.weight",
    "ssm_dt.bias": "self_attn.dt_bias",
    "ssm_g_a.weight": "self_attn.g_a_proj.weight",
    "ssm_g_b.weight": "self_attn.g_b_proj.weight",
    "ssm_norm.weight": "self_attn.o_norm.weight",
    "indexer_compressor_gate.weight": "self_attn.indexer.index_kpool_compress_gate",
    "indexer_compressor_ape.weight": "self_attn.indexer.index_kpool_compress_ape",
})
for _s in ("attn", "ffn"):
    for _k in ("fn", "base", "scale"):
        G5N_LAYER["hc_%s_%s.weight" % (_s, _k)] = "hc_%s_%s" % (_s, _k)
# F32 in the release (the rest BF16): the router bias, the KDA decay
# parameters, the HC mixers, the k-pool position bias
F32_NAMES = ("e_score_correction_bias", ".weight_scale_inv", ".A_log", ".dt_bias", "index_kpool_compress_ape",
             ".hc_attn_fn", ".hc_attn_base", ".hc_attn_scale", ".hc_ffn_fn", ".hc_ffn_base", ".hc_ffn_scale")


# FP8 E4M3 (OCP, bias 7, no infinities; code 0x7F is NaN): the values of
# codes 0..126, ascending
E4M3 = np.array([(m / 8.0) * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
                 for e in range(16) for m in range(8)][:127], dtype=np.float64)
FP8 = {}     # GGUF name -> (codes uint8, scales float32 [..., ceil(R/128), ceil(C/128)])


def fp8_round(a):
    """a [..., R, C] float32 -> (the values FP8 E4M3 with one F32 scale per
    128x128 block holds, codes, scales).  The scale is max|x| / 448 of the
    block (as the releases' weight_scale_inv); a value is code x scale in
    one F32 multiply, what ds4-quantize computes."""
    a = np.asarray(a, dtype=np.float32)
    R, C = a.shape[-2:]
    nr, nc = -(-R // 128), -(-C // 128)
    pad = np.zeros(a.shape[:-2] + (nr * 128, nc * 128), np.float32)
    pad[..., :R, :C] = a
    blk = pad.reshape(a.shape[:-2] + (nr, 128, nc, 128))
    sc = (np.abs(blk).max(axis=(-3, -1)) / np.float32(448.0)).astype(np.float32)
    sc = np.where(sc > 0, sc, np.float32(1.0)).astype(np.float32)
    full = np.repeat(np.repeat(sc, 128, axis=-2), 128, axis=-1)[..., :R, :C]
    y = np.abs(a.astype(np.float64) / full.astype(np.float64))
    i = np.clip(np.searchsorted(E4M3, y), 1, 126)
    code = np.where(y - E4M3[i - 1] <= E4M3[i] - y, i - 1, i).astype(np.uint8)
    code = np.where(y > E4M3[126], 126, code).astype(np.uint8)
    val = E4M3[code].astype(np.float32) * full
    neg = a < 0
    return np.where(neg, -val, val).astype(np.float32), (code | (neg * 0x80)).astype(np.uint8), sc


def bf16_round(a):
    """Round-to-nearest-even to BF16, kept as float32."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(np.float32)


A_LOG = {}   # GGUF ssm_a name -> the checkpoint's A_log (set by main)
# --fp8: the GGUF tensors FP8 releases store as E4M3 + weight_scale_inv
FP8_MLA = ("attn_q_a.weight", "attn_q_b.weight", "attn_kv_a_mqa.weight", "attn_output.weight")
FP8_FFN = ("ffn_gate.weight", "ffn_up.weight", "ffn_down.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight",
           "ffn_down_exps.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight")


def hf_tensors(tensors, c, g5n=False, lm="model."):
    """{HF name: float32 array} from glm_gguf's (GGUF name, numpy array)
    list (numpy order = HF's [out, in]).  g5n: glm5-next's names, under
    `lm` ("model.language_model." as the release, or "model."); its
    conv1d weights become [C, 1, kernel] and ssm_a (-exp(A_log)) A_log."""
    T = dict(tensors)
    out = {}
    layer = G5N_LAYER if g5n else LAYER

    def put(hf_name, name, a, e=None):
        """a tensor, or (FP8) its codes and weight_scale_inv"""
        if name not in FP8:
            out[hf_name] = a
            return
        code, sc = FP8[name]
        if e is not None:
            code, sc = code[e], sc[e]
        out[hf_name] = ("F8_E4M3", code)
        out[hf_name[:-len(".weight")] + ".weight_scale_inv"] = sc
    for name, a in tensors:
        if name in GLOBAL:
            out[GLOBAL[name].replace("model.", lm, 1)] = a
            continue
        _, il, rest = name.split(".", 2)
        p = "%slayers.%s." % (lm, il)
        if rest in layer:
            put(p + layer[rest], name, a)
        elif g5n and rest.startswith("ssm_conv1d_"):
            x = rest[len("ssm_conv1d_")]
            out[p + "self_attn.%s_conv1d.weight" % x] = a.reshape(a.shape[1], 1, a.shape[3])
        elif g5n and rest == "ssm_a":
            out[p + "self_attn.A_log"] = A_LOG[name]
        elif rest in EXPERTS:
            for e in range(a.shape[0]):
                put(p + "mlp.experts.%d.%s.weight" % (e, EXPERTS[rest]), name, a[e], e)
        elif rest == "attn_k_b.weight":
            kb, vb = a, T["blk.%s.attn_v_b.weight" % il]      # (H, kv_lora, nope), (H, v, kv_lora)
            rows = []
            for h in range(kb.shape[0]):
                rows.append(kb[h].T)
                rows.append(vb[h])
            out[p + "self_attn.kv_b_proj.weight"] = np.concatenate(rows, axis=0)
        elif rest == "attn_v_b.weight":
            pass
        else:
            sys.exit("glm_hf: no checkpoint name for %s" % name)
    return out


def write_safetensors(path, tensors, dtype):
    """tensors: [(name, float32 array)]; dtype "BF16" or "F32" (the
    F32_NAMES stay F32, as Z.ai's files have them)."""
    header, blobs, off = {}, [], 0
    for name, a in tensors:
        if isinstance(a, tuple):                # (dtype, raw array): FP8 codes
            dt, a = a
            b = np.ascontiguousarray(a).tobytes()
        else:
            dt = "F32" if dtype == "F32" or name.endswith(F32_NAMES) else "BF16"
            a = np.ascontiguousarray(a, dtype=np.float32)
            b = a.tobytes() if dt == "F32" else (a.view(np.uint32) >> 16).astype("<u2").tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def write_tokenizer(ck, vocab_path):
    r = gguf_reader.GGUFReader(vocab_path)
    toks = r.kv["tokenizer.ggml.tokens"]
    types = [int(x) for x in r.kv["tokenizer.ggml.token_type"]]
    merges = r.kv["tokenizer.ggml.merges"]
    vocab, added = {}, []
    for i, (t, ty) in enumerate(zip(toks, types)):
        if ty in (3, 4):
            added.append({"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": ty == 3})
        else:
            vocab[t] = i
    tj = {"version": "1.0", "added_tokens": added,
          "pre_tokenizer": {"type": "Sequence", "pretokenizers": []},
          "model": {"type": "BPE", "dropout": None, "unk_token": None, "byte_fallback": False,
                    "vocab": vocab, "merges": [m.split(" ", 1) for m in merges]}}
    with open(os.path.join(ck, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    tc = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>",
          "pad_token": "<|endoftext|>", "chat_template": "[gMASK]<sop>{% for m in messages %}"
          "<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>"}
    with open(os.path.join(ck, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tc, f, ensure_ascii=False)


def config_json(c, n_vocab, types_key, mtp):
    L = c["n_layer"]
    cfg = {
        "architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa",
        "vocab_size": n_vocab, "hidden_size": c["n_embd"], "num_hidden_layers": L,
        "num_attention_heads": c["n_head"], "num_key_value_heads": c["n_head"],
        "q_lora_rank": c["q_lora"], "kv_lora_rank": c["kv_lora"], "qk_nope_head_dim": c["qk_nope"],
        "qk_rope_head_dim": c["qk_rope"], "qk_head_dim": c["qk_nope"] + c["qk_rope"], "v_head_dim": c["v_head"],
        "intermediate_size": c["n_ff"], "moe_intermediate_size": c["n_ff_exp"],
        "n_routed_experts": c["n_expert"], "num_experts_per_tok": c["n_used"],
        "n_shared_experts": c["n_shared"], "first_k_dense_replace": c["n_dense"],
        "routed_scaling_factor": c["route_scale"], "norm_topk_prob": True, "scoring_func": "sigmoid",
        "topk_method": "noaux_tc", "n_group": 1, "topk_group": 1,
        "rms_norm_eps": c["rms_eps"], "rope_theta": c["rope_theta"], "rope_interleave": True,
        "max_position_embeddings": c["ctx"], "tie_word_embeddings": False, "hidden_act": "silu",
        "index_n_heads": c["idx_head"], "index_head_dim": c["idx_dim"], "index_topk": c["top_k"],
        "num_nextn_predict_layers": 1 if mtp else 0, "torch_dtype": "bfloat16",
    }
    full = G.indexer_full(L, c["idx_freq"], c["idx_offset"])
    if types_key:
        cfg["indexer_types"] = ["full" if x else "shared" for x in full]
    else:
        cfg["index_topk_freq"] = c["idx_freq"]
        cfg["index_skip_topk_offset"] = c["idx_offset"]
    return cfg


def config_json_g5n(c, n_vocab, mtp, flat, shared):
    """transformers' glm5_next config: the text fields in text_config
    (Glm5NextForConditionalGeneration, as the release), or at the top level
    (flat: a text-only Glm5NextForCausalLM export); the KDA fields in
    linear_attn_config as the release has them.  shared: DSA layers whose
    indexer_types entry is "shared" (the others "full")."""
    L = c["n_layer"]
    dsa = [i % c["dsa_every"] == c["dsa_every"] - 1 for i in range(L)]
    tc = {
        "model_type": "glm5_next_text",
        "vocab_size": n_vocab, "hidden_size": c["n_embd"], "num_hidden_layers": L,
        "num_attention_heads": c["n_head"], "num_key_value_heads": c["n_head"], "head_dim": 0,
        "q_lora_rank": c["q_lora"], "kv_lora_rank": c["kv_lora"], "qk_nope_head_dim": c["qk_head"],
        "qk_rope_head_dim": 0, "v_head_dim": c["v_head"], "mla_use_nope": True,
        "intermediate_size": c["n_ff"], "moe_intermediate_size": c["n_ff_exp"],
        "n_routed_experts": c["n_expert"], "num_experts_per_tok": c["n_used"],
        "n_shared_experts": c["n_shared"], "first_k_dense_replace": c["n_dense"],
        "mlp_layer_types": ["dense" if i < c["n_dense"] else "sparse" for i in range(L)],
        "layer_types": ["deepseek_sparse_attention" if x else "linear_attention" for x in dsa],
        "linear_attn_config": {
            "num_heads": c["n_head"], "head_dim": c["kda_dim"], "short_conv_kernel_size": c["conv"],
            "gate_lower_bound": c["lower_bound"],
            "kda_layers": [i for i in range(L) if not dsa[i]], "full_attn_layers": [i for i in range(L) if dsa[i]],
        },
        "routed_scaling_factor": c["route_scale"], "norm_topk_prob": True, "scoring_func": "sigmoid",
        "topk_method": "noaux_tc", "n_group": 1, "topk_group": 1, "swiglu_limit": c["clamp"],
        "rms_norm_eps": c["rms_eps"], "max_position_embeddings": c["ctx"], "tie_word_embeddings": False,
        "hidden_act": "silu",
        "index_n_heads": c["idx_head"], "index_head_dim": c["idx_dim"], "index_topk": c["top_k"],
        "index_kpool": c["kpool"], "index_kpool_compress": True, "index_kpool_always_select_tail": True,
        "index_share_for_mtp_iteration": True, "indexer_rope_interleave": True,
        "indexer_types": ["shared" if i in shared else "full" for i in range(L)],
        "mhc": True, "hc_mult": c["hc"], "hc_eps": c["hc_eps"], "hc_sinkhorn_iters": c["hc_iters"],
        "num_nextn_predict_layers": 1 if mtp else 0, "torch_dtype": "bfloat16",
    }
    if flat:
        tc.pop("model_type")
        return dict(tc, architectures=["Glm5NextForCausalLM"], model_type="glm5_next")
    return {"architectures": ["Glm5NextForConditionalGeneration"], "model_type": "glm5_next",
            "text_config": tc, "vision_config": {"depth": 2, "hidden_size": 32}, "tie_word_embeddings": False}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ck")
    ap.add_argument("ref")
    ap.add_argument("--vocab", required=True, help="a GLM (glm4 pre-tokenizer) vocabulary GGUF")
    ap.add_argument("--seed", type=int, default=46)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--type", choices=("f32", "f16", "q8_0"), default="f32")
    ap.add_argument("--dtype", choices=("bf16", "f32"), default="bf16")
    ap.add_argument("--shards", type=int, default=3)
    ap.add_argument("--types-key", action="store_true")
    ap.add_argument("--mtp", action="store_true")
    ap.add_argument("--drop", action="append", default=[])
    ap.add_argument("--arch", choices=("glm-dsa", "glm5-next"), default="glm-dsa")
    ap.add_argument("--flat", action="store_true",
                    help="glm5-next: a text-only export (config fields at the top, names under model.)")
    ap.add_argument("--shared", action="append", type=int, default=[],
                    help="glm5-next: DSA layer N shares the previous full layer's indexer")
    ap.add_argument("--fp8", action="store_true",
                    help="FP8 E4M3 + F32 weight_scale_inv (128x128) for the FP8 release's matrices")
    a = ap.parse_args(argv)
    g5n = a.arch == "glm5-next"
    c = dict(G.GLM5_NEXT if g5n else G.GLM_DSA)
    G.parse_set(c, a.set)
    tok_kv, n_vocab = G.tokenizer_kv(a.vocab)

    captured = []
    write = G.Writer.write

    def capture(self, path):
        if a.dtype == "bf16":
            self.tensors = [(n, bf16_round(x)) for n, x in self.tensors]
        # glm5-next: the checkpoint holds A_log (F32); ssm_a is -exp(A_log)
        # in double rounded to F32 once, as ds4-quantize computes it
        for i, (n, x) in enumerate(self.tensors):
            if n.endswith(".ssm_a"):
                A_LOG[n] = np.log(-x.astype(np.float64)).astype(np.float32)
                self.tensors[i] = (n, (-np.exp(A_LOG[n].astype(np.float64))).astype(np.float32))
        if a.fp8:
            # the FP8 release's matrices: MLA's q_a/q_b/kv_a/o (not kv_b),
            # the dense, shared and routed FFN; KDA, indexer, router BF16
            dsa_layers = {n.split(".")[1] for n, _ in self.tensors if n.endswith(".attn_q_a.weight")}
            for i, (n, x) in enumerate(self.tensors):
                parts = n.split(".")
                rest = ".".join(parts[2:])
                if len(parts) > 2 and (rest in FP8_FFN or (rest in FP8_MLA and parts[1] in dsa_layers)):
                    v, code, sc = fp8_round(x)
                    FP8[n] = (code, sc)
                    self.tensors[i] = (n, v)
        if shared:
            # a shared DSA layer has no indexer tensors (and the file says which)
            drop = tuple("blk.%d.%s" % (il, x) for il in shared for x in (
                "indexer.", "indexer_compressor_"))
            self.tensors = [(n, x) for n, x in self.tensors if not n.startswith(drop)]
            L = c["n_layer"]
            self.add("{arch}.attention.indexer.types", G.ARR, (G.BOOL, [i not in shared for i in range(L)]))
        captured.extend(self.tensors)
        write(self, path)

    shared = set(a.shared)
    G.Writer.write = capture
    if g5n:
        G.write_glm5_next(a.ref, c, tok_kv, n_vocab, a.seed, a.type)
    else:
        G.write_glm_dsa(a.ref, c, tok_kv, n_vocab, a.seed, a.type)
    G.Writer.write = write

    os.makedirs(a.ck, exist_ok=True)
    lm = "model.language_model." if g5n and not a.flat else "model."
    hf = hf_tensors(captured, c, g5n, lm)
    if a.mtp:
        # a NextN layer (its names only matter: ds4-quantize must not read it)
        p = "%slayers.%d." % (lm, c["n_layer"])
        hf[p + "eh_proj.weight"] = np.zeros((c["n_embd"], 2 * c["n_embd"]), np.float32)
        hf[p + "enorm.weight"] = np.ones(c["n_embd"], np.float32)
        hf[p + "self_attn.q_a_proj.weight"] = np.zeros((c["q_lora"], c["n_embd"]), np.float32)
    for x in a.drop:
        if x not in hf:
            sys.exit("glm_hf: --drop %s: no such tensor" % x)
        del hf[x]
    names = list(hf)
    n = max(1, min(a.shards, len(names)))
    wmap = {}
    for k in range(n):
        part = names[k::n]
        fn = "model-%05d-of-%05d.safetensors" % (k + 1, n)
        write_safetensors(os.path.join(a.ck, fn), [(x, hf[x]) for x in part], a.dtype.upper())
        for x in part:
            wmap[x] = fn
    with open(os.path.join(a.ck, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wmap}, f, indent=1)
    with open(os.path.join(a.ck, "config.json"), "w") as f:
        cfg = config_json_g5n(c, n_vocab, a.mtp, a.flat, shared) if g5n else \
            config_json(c, n_vocab, a.types_key, a.mtp)
        json.dump(cfg, f, indent=1)
    write_tokenizer(a.ck, a.vocab)
    return 0


if __name__ == "__main__":
    sys.exit(main())
