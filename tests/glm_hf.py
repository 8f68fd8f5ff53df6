#!/usr/bin/env python3
"""glm_hf.py -- a tiny GLM 5.2-style Hugging Face checkpoint (Z.ai's
GlmMoeDsaForCausalLM layout) and the same weights as a glm-dsa GGUF written
directly by tests/glm_gguf.py: the input and the expected output of
ds4-quantize on GLM checkpoints (tests/t_quantize_glm.sh).

  glm_hf.py CK_DIR REF.gguf [--vocab VOCAB.gguf] [--seed N] [--set KEY=VALUE]...
            [--type f32|f16|q8_0] [--dtype bf16|f32] [--shards N]
            [--types-key] [--mtp] [--drop HF_NAME]

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
--drop leaves one tensor out (a broken checkpoint).

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


def bf16_round(a):
    """Round-to-nearest-even to BF16, kept as float32."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(np.float32)


def hf_tensors(tensors, c):
    """{HF name: float32 array} from glm_gguf's (GGUF name, numpy array)
    list (numpy order = HF's [out, in])."""
    T = dict(tensors)
    out = {}
    for name, a in tensors:
        if name in GLOBAL:
            out[GLOBAL[name]] = a
            continue
        _, il, rest = name.split(".", 2)
        p = "model.layers.%s." % il
        if rest in LAYER:
            out[p + LAYER[rest]] = a
        elif rest in EXPERTS:
            for e in range(a.shape[0]):
                out[p + "mlp.experts.%d.%s.weight" % (e, EXPERTS[rest])] = a[e]
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
    """tensors: [(name, float32 array)]; dtype "BF16" or "F32" (1-D
    e_score_correction_bias stays F32, as Z.ai's files have it)."""
    header, blobs, off = {}, [], 0
    for name, a in tensors:
        dt = "F32" if dtype == "F32" or name.endswith("e_score_correction_bias") else "BF16"
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
    a = ap.parse_args(argv)
    c = dict(G.GLM_DSA)
    G.parse_set(c, a.set)
    tok_kv, n_vocab = G.tokenizer_kv(a.vocab)

    captured = []
    write = G.Writer.write

    def capture(self, path):
        if a.dtype == "bf16":
            self.tensors = [(n, bf16_round(x)) for n, x in self.tensors]
        captured.extend(self.tensors)
        write(self, path)

    G.Writer.write = capture
    G.write_glm_dsa(a.ref, c, tok_kv, n_vocab, a.seed, a.type)
    G.Writer.write = write

    os.makedirs(a.ck, exist_ok=True)
    hf = hf_tensors(captured, c)
    if a.mtp:
        # a NextN layer (its names only matter: ds4-quantize must not read it)
        p = "model.layers.%d." % c["n_layer"]
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
        json.dump(config_json(c, n_vocab, a.types_key, a.mtp), f, indent=1)
    write_tokenizer(a.ck, a.vocab)
    return 0


if __name__ == "__main__":
    sys.exit(main())
