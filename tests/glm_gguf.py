#!/usr/bin/env python3
"""glm_gguf.py -- tiny random-weight GGUFs of the GLM family in llama.cpp's
layout, the inputs of the float64 references (tests/oracle/glm_ref.py) and
of the llama.cpp cross-check (tests/t_glm_ref.sh).

  glm_gguf.py ARCH OUT.gguf [--vocab VOCAB.gguf] [--seed N] [--set KEY=VALUE]...
             [--type f32|f16|q8_0]

ARCH: glm-dsa (GLM 5.2 / 5.3: MLA + DSA indexer with IndexShare, sigmoid
MoE), glm5-next (GLM 5.3 Flash: HC, KDA + NoPE DSA with the k-pool
indexer) or kimi-linear (llama.cpp's Kimi-Linear: KDA in its original gate
form + MLA; the independent check of the KDA math).
Weights are F32, drawn from numpy's default_rng(seed) in a fixed order, so
a file is a pure function of (ARCH, seed, --set, vocabulary).  The tokenizer
keys (tokenizer.*) are copied from VOCAB (default: the shared mini test
vocabulary, 4096 ids); token ids are used directly, nothing is tokenized.
--set overrides one hyper-parameter of the shape table below (e.g.
--set top_k=16), before the tensors are drawn; glm-dsa's and glm5-next's --set nextn=1
appends a NextN (MTP) layer blk.<n_layer>.* in llama.cpp's names
(nextn.eh_proj/enorm/hnorm and a full MoE decoder layer -- glm5-next: a DSA
layer with its own indexer, no hc_* tensors; with
--set nextn_head=1 also nextn.embed_tokens/shared_head_norm/
shared_head_head), drawn after every other tensor, so the main model is
the file without it.  --type stores the matrices
(2 dims and more) as F16 or Q8_0 (Q8_0 only where a row is whole blocks of
32; the others stay F32); vectors stay F32, and so glm5-next's
convolutions and k-pool position biases (the loader takes them as F32
only).  Default F32.  --type: glm-dsa and glm5-next.

Owns: the shape tables and metadata of the tiny test files, and a minimal
GGUF v3 writer.  Must not: depend on anything but numpy; the key names and
tensor names/dims are llama.cpp's (src/llama-arch.cpp, the per-arch
load_arch_hparams / load_arch_tensors of the 2026-09 release), so a
mismatch is fixed here, never in a comparison.
"""
import argparse
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("DS4_SHARED", os.path.join(HERE, "..", "..", "shared"))

# GGUF metadata value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i",
          F32: "<f", BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}
ALIGN = 32


def _str(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def _value(t, v):
    if t == STR:
        return _str(v)
    if t == ARR:
        et, items = v
        body = b"".join(_value(et, x) for x in items)
        return struct.pack("<IQ", et, len(items)) + body
    return struct.pack(SCALAR[t], v)


def _skip_value(b, o, t):
    """Offset just past one value of type t starting at o."""
    if t == STR:
        n = struct.unpack_from("<Q", b, o)[0]
        return o + 8 + n
    if t == ARR:
        et, n = struct.unpack_from("<IQ", b, o)
        o += 12
        if et in SCALAR:
            return o + n * struct.calcsize(SCALAR[et])
        for _ in range(n):
            o = _skip_value(b, o, et)
        return o
    return o + struct.calcsize(SCALAR[t])


def tokenizer_kv(vocab_path):
    """The raw (key, type, body bytes) of every tokenizer.* key of VOCAB,
    and its vocabulary size."""
    b = open(vocab_path, "rb").read()
    magic, ver, _n_t, n_kv = struct.unpack_from("<IIQQ", b, 0)
    if magic != 0x46554747 or ver != 3:
        sys.exit("glm_gguf: %s is not a GGUF v3 file" % vocab_path)
    o = 24
    out, n_vocab = [], None
    for _ in range(n_kv):
        n = struct.unpack_from("<Q", b, o)[0]
        key = b[o + 8:o + 8 + n].decode()
        o += 8 + n
        t = struct.unpack_from("<I", b, o)[0]
        o += 4
        end = _skip_value(b, o, t)
        if key.startswith("tokenizer."):
            out.append((key, t, b[o:end]))
            if key == "tokenizer.ggml.tokens":
                n_vocab = struct.unpack_from("<Q", b, o + 4)[0]
        o = end
    if n_vocab is None:
        sys.exit("glm_gguf: %s has no tokenizer.ggml.tokens" % vocab_path)
    return out, n_vocab


def q8_0_bytes(a):
    """ggml's Q8_0 of a float array whose rows are whole blocks of 32:
    per block an f16 scale d = max|x| / 127 and 32 int8 roundf(x / d)
    (ties away from zero, as ggml's quantize_row_q8_0_ref: byte for byte
    what ds4-quantize writes)."""
    x = a.astype(np.float32).reshape(-1, 32)
    d = np.abs(x).max(axis=1) / 127.0
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0).astype(np.float32)
    v = (x * inv[:, None]).astype(np.float64)
    q = np.clip(np.sign(v) * np.floor(np.abs(v) + 0.5), -127, 127).astype(np.int8)
    out = np.empty((x.shape[0], 34), dtype=np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


class Writer:
    """Minimal GGUF v3 writer: metadata, then F32 tensors (matrices as
    F16 or Q8_0 with wtype)."""

    def __init__(self, arch):
        self.arch = arch
        self.wtype = "f32"
        # names (suffixes) the loader takes as F32 only whatever their dims
        # (glm5-next's convolutions and k-pool position biases)
        self.keep_f32 = ()
        self.kv = []          # (key, type, body bytes)
        self.tensors = []     # (name, numpy array in numpy order)
        self.add("general.architecture", STR, arch)
        self.add("general.alignment", U32, ALIGN)

    def add(self, key, t, v):
        key = key.replace("{arch}", self.arch)
        self.kv.append((key, t, _value(t, v)))

    def raw(self, key, t, body):
        self.kv.append((key, t, body))

    def tensor(self, name, arr):
        self.tensors.append((name, np.ascontiguousarray(arr, dtype=np.float32)))

    def write(self, path):
        head = [struct.pack("<IIQQ", 0x46554747, 3, len(self.tensors), len(self.kv))]
        for k, t, body in self.kv:
            head.append(_str(k) + struct.pack("<I", t) + body)
        off = 0
        for name, a in self.tensors:
            dims = list(reversed(a.shape))           # ggml order: fastest first
            t, nb = self._stored(name, a)
            head.append(_str(name) + struct.pack("<I", len(dims)) +
                        b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", t, off))
            off += (len(nb) + ALIGN - 1) // ALIGN * ALIGN
        h = b"".join(head)
        h += b"\0" * ((-len(h)) % ALIGN)
        with open(path + ".tmp", "wb") as f:
            f.write(h)
            for name, a in self.tensors:
                nb = self._stored(name, a)[1]
                f.write(nb)
                f.write(b"\0" * ((-len(nb)) % ALIGN))
        os.replace(path + ".tmp", path)

    def _stored(self, name, a):
        """(GGML type, bytes) of one tensor under wtype."""
        if name.endswith(self.keep_f32):
            return 0, a.tobytes()
        if a.ndim >= 2 and self.wtype == "f16":
            return 1, a.astype(np.float16).tobytes()
        if a.ndim >= 2 and self.wtype == "q8_0" and a.shape[-1] % 32 == 0:
            return 8, q8_0_bytes(a)
        return 0, a.tobytes()


# ---------------------------------------------------------------------------
# shape tables (small enough for a numpy float64 pass over a few hundred
# tokens in seconds; every dimension that llama.cpp constrains is noted)
# ---------------------------------------------------------------------------

GLM_DSA = dict(
    n_embd=64, n_layer=4, n_dense=1, n_head=4,
    q_lora=32, kv_lora=32, qk_nope=16, qk_rope=16, v_head=16,
    # the indexer head must be a multiple of 64: llama.cpp's lightning
    # indexer rotates q and k by a Hadamard matrix of the head's size
    # 16 indexer heads: with few heads a row's score is exactly 0 (every
    # head's ReLU at 0) too often, and exact ties at the top-k boundary
    # end the strict comparison (FAMILY.md §7)
    idx_head=16, idx_dim=64, top_k=32,
    # IndexShare (GLM 5.2/5.3): full iff max(i - offset + 1, 0) % freq == 0;
    # write_types=False leaves attention.indexer.types out (llama.cpp's
    # defaults then: the GLM 5.2 pattern when context_length >= 2^20, else
    # every layer full)
    idx_freq=4, idx_offset=3, write_types=True,
    n_ff=96, n_expert=8, n_used=2, n_ff_exp=32, n_shared=1,
    rope_theta=8e6, rms_eps=1e-5, route_scale=2.5, ctx=1048576,
    # NextN (MTP) layers appended after the n_layer main ones (llama.cpp:
    # block_count counts them, nextn_predict_layers says how many); with
    # nextn_head=1 the optional nextn.shared_head_norm / shared_head_head /
    # embed_tokens are written too (else the block falls back to
    # output_norm, output and token_embd)
    nextn=0, nextn_head=0,
)


def indexer_full(n_layer, freq, offset):
    return [max(i - offset + 1, 0) % freq == 0 for i in range(n_layer)]


class Draw:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def lin(self, n_out, n_in, gain=1.0):
        """A weight of y = W x: numpy (n_out, n_in), ggml {n_in, n_out}."""
        return self.rng.standard_normal((n_out, n_in)) * (gain / np.sqrt(n_in))

    def norm(self, n):
        return 1.0 + 0.1 * self.rng.standard_normal(n)

    def small(self, *shape, s=0.1):
        return s * self.rng.standard_normal(shape)


def common_moe_keys(w, c):
    w.add("{arch}.expert_count", U32, c["n_expert"])
    w.add("{arch}.expert_used_count", U32, c["n_used"])
    w.add("{arch}.expert_shared_count", U32, c["n_shared"])
    w.add("{arch}.expert_feed_forward_length", U32, c["n_ff_exp"])
    w.add("{arch}.expert_weights_scale", F32, c["route_scale"])
    w.add("{arch}.expert_weights_norm", BOOL, True)
    w.add("{arch}.expert_gating_func", U32, 2)          # sigmoid
    w.add("{arch}.leading_dense_block_count", U32, c["n_dense"])


def ffn_tensors(w, d, c, il, p):
    E = c["n_embd"]
    if il < c["n_dense"]:
        w.tensor(p + "ffn_gate.weight", d.lin(c["n_ff"], E))
        w.tensor(p + "ffn_up.weight", d.lin(c["n_ff"], E))
        w.tensor(p + "ffn_down.weight", d.lin(E, c["n_ff"]))
        return
    X, F = c["n_expert"], c["n_ff_exp"]
    w.tensor(p + "ffn_gate_inp.weight", d.lin(X, E, gain=2.0))
    w.tensor(p + "exp_probs_b.bias", d.small(X, s=0.2))
    w.tensor(p + "ffn_gate_exps.weight", np.stack([d.lin(F, E) for _ in range(X)]))
    w.tensor(p + "ffn_up_exps.weight", np.stack([d.lin(F, E) for _ in range(X)]))
    w.tensor(p + "ffn_down_exps.weight", np.stack([d.lin(E, F) for _ in range(X)]))
    S = F * c["n_shared"]
    w.tensor(p + "ffn_gate_shexp.weight", d.lin(S, E))
    w.tensor(p + "ffn_up_shexp.weight", d.lin(S, E))
    w.tensor(p + "ffn_down_shexp.weight", d.lin(E, S))


def write_glm_dsa(path, c, tok_kv, n_vocab, seed, wtype="f32"):
    w = Writer("glm-dsa")
    w.wtype = wtype
    w.add("general.name", STR, "glm-dsa tiny random TEST model (seed %d)" % seed)
    E, H, L = c["n_embd"], c["n_head"], c["n_layer"]
    w.add("{arch}.context_length", U32, c["ctx"])
    w.add("{arch}.embedding_length", U32, E)
    w.add("{arch}.block_count", U32, L + c["nextn"])
    if c["nextn"]:
        w.add("{arch}.nextn_predict_layers", U32, c["nextn"])
    w.add("{arch}.feed_forward_length", U32, c["n_ff"])
    w.add("{arch}.attention.head_count", U32, H)
    w.add("{arch}.attention.head_count_kv", U32, 1)     # MLA absorbed = MQA
    w.add("{arch}.rope.freq_base", F32, c["rope_theta"])
    w.add("{arch}.rope.dimension_count", U32, c["qk_rope"])
    w.add("{arch}.attention.layer_norm_rms_epsilon", F32, c["rms_eps"])
    w.add("{arch}.vocab_size", U32, n_vocab)
    w.add("{arch}.attention.q_lora_rank", U32, c["q_lora"])
    w.add("{arch}.attention.kv_lora_rank", U32, c["kv_lora"])
    w.add("{arch}.attention.key_length", U32, c["kv_lora"] + c["qk_rope"])
    w.add("{arch}.attention.value_length", U32, c["kv_lora"])
    w.add("{arch}.attention.key_length_mla", U32, c["qk_nope"] + c["qk_rope"])
    w.add("{arch}.attention.value_length_mla", U32, c["v_head"])
    common_moe_keys(w, c)
    w.add("{arch}.attention.indexer.head_count", U32, c["idx_head"])
    w.add("{arch}.attention.indexer.key_length", U32, c["idx_dim"])
    w.add("{arch}.attention.indexer.top_k", U32, c["top_k"])
    full = indexer_full(L, c["idx_freq"], c["idx_offset"])
    if c["write_types"]:
        w.add("{arch}.attention.indexer.types", ARR, (BOOL, full))
    elif c["ctx"] < 1048576:
        full = [True] * L                   # pre-5.2 files: every layer has an indexer
    for k, t, body in tok_kv:
        w.raw(k, t, body)

    d = Draw(seed)
    w.tensor("token_embd.weight", d.rng.standard_normal((n_vocab, E)))
    for il in range(L):
        glm_dsa_layer(w, d, c, il, full[il])
    w.tensor("output_norm.weight", d.norm(E))
    w.tensor("output.weight", d.lin(n_vocab, E))
    # the NextN layers (blk.L.. after the output tensors, as the converter
    # appends them): the llama.cpp names of load_arch_tensors, a full
    # decoder layer (MoE, with an indexer as GLM's checkpoint has one)
    # plus the nextn.* wiring
    for il in range(L, L + c["nextn"]):
        p = "blk.%d." % il
        w.tensor(p + "nextn.eh_proj.weight", d.lin(E, 2 * E))      # ggml {2E, E}: [enorm(e); hnorm(h)]
        w.tensor(p + "nextn.enorm.weight", d.norm(E))
        w.tensor(p + "nextn.hnorm.weight", d.norm(E))
        if c["nextn_head"]:
            w.tensor(p + "nextn.embed_tokens.weight", d.rng.standard_normal((n_vocab, E)))
            w.tensor(p + "nextn.shared_head_norm.weight", d.norm(E))
            w.tensor(p + "nextn.shared_head_head.weight", d.lin(n_vocab, E))
        glm_dsa_layer(w, d, c, il, True)
    w.write(path)


def glm_dsa_layer(w, d, c, il, full):
    """The tensors of decoder layer il (blk.il.*) in file order."""
    E, H = c["n_embd"], c["n_head"]
    kmla = c["qk_nope"] + c["qk_rope"]
    p = "blk.%d." % il
    w.tensor(p + "attn_norm.weight", d.norm(E))
    w.tensor(p + "attn_q_a.weight", d.lin(c["q_lora"], E))
    w.tensor(p + "attn_q_a_norm.weight", d.norm(c["q_lora"]))
    w.tensor(p + "attn_q_b.weight", d.lin(H * kmla, c["q_lora"]))
    w.tensor(p + "attn_kv_a_mqa.weight", d.lin(c["kv_lora"] + c["qk_rope"], E))
    w.tensor(p + "attn_kv_a_norm.weight", d.norm(c["kv_lora"]))
    # ggml {qk_nope, kv_lora, n_head}: per head W_UK^T (kv_lora x qk_nope)
    w.tensor(p + "attn_k_b.weight", np.stack([d.lin(c["kv_lora"], c["qk_nope"]) for _ in range(H)]))
    # ggml {kv_lora, v_head, n_head}: per head W_UV (v_head x kv_lora)
    w.tensor(p + "attn_v_b.weight", np.stack([d.lin(c["v_head"], c["kv_lora"]) for _ in range(H)]))
    w.tensor(p + "attn_output.weight", d.lin(E, H * c["v_head"]))
    if full:
        D, IH = c["idx_dim"], c["idx_head"]
        w.tensor(p + "indexer.attn_q_b.weight", d.lin(IH * D, c["q_lora"]))
        w.tensor(p + "indexer.attn_k.weight", d.lin(D, E))
        w.tensor(p + "indexer.k_norm.weight", d.norm(D))
        w.tensor(p + "indexer.k_norm.bias", d.small(D))
        w.tensor(p + "indexer.proj.weight", d.lin(IH, E))
    w.tensor(p + "ffn_norm.weight", d.norm(E))
    ffn_tensors(w, d, c, il, p)


GLM5_NEXT = dict(
    n_embd=64, n_layer=6, n_dense=1, n_head=4,
    # DSA layers where i % dsa_every == dsa_every - 1 (the release: 4 -> 3, 7, ..., 43);
    # the others are KDA (head_count_kv 0)
    dsa_every=3,
    kda_dim=16, conv=4, lower_bound=-5.0,
    q_lora=32, kv_lora=32, qk_head=16, v_head=16,          # NoPE MLA
    idx_head=16, idx_dim=32, top_k=32, kpool=4,
    n_ff=96, n_expert=8, n_used=2, n_ff_exp=32, n_shared=1,
    hc=4, hc_iters=20, hc_eps=1e-6, clamp=10.0,
    rms_eps=1e-5, ln_eps=1e-6, route_scale=2.5, ctx=1048576,
    # the NextN (MTP) block after the n_layer trunk layers, as glm-dsa's
    # (blk.<n_layer>: nextn.* wiring + a DSA layer with its own indexer and
    # a MoE FFN, no hc_* tensors; llama.cpp's glm5-next load_arch_tensors)
    nextn=0, nextn_head=0,
)


def hc_tensors(w, d, c, p):
    """DeepSeek V4's mHC mixer (FAMILY.md §2.2), one per sublayer."""
    n, E = c["hc"], c["n_embd"]
    for sub in ("attn", "ffn"):
        w.tensor(p + "hc_%s_fn.weight" % sub, d.lin((2 + n) * n, n * E))
        w.tensor(p + "hc_%s_base.weight" % sub, d.small((2 + n) * n, s=0.5))
        w.tensor(p + "hc_%s_scale.weight" % sub, 0.5 + 0.5 * d.rng.random(3))


def kda_tensors(w, d, c, p, a_4d=False):
    """A KDA layer in llama.cpp's names (kimi-linear / glm5-next)."""
    E, H, K, R = c["n_embd"], c["n_head"], c["kda_dim"], c["conv"]
    Di = H * K
    for x in "qkv":
        w.tensor(p + "attn_%s.weight" % x, d.lin(Di, E))
    for x in "qkv":
        # ggml {d_conv, 1, d_inner, 1}: tap j of channel c at [.., c, .., j];
        # tap d_conv-1 multiplies the current input
        cw = d.rng.standard_normal((Di, R)) * 0.5
        w.tensor(p + "ssm_conv1d_%s.weight" % x, cw.reshape(1, Di, 1, R))
    w.tensor(p + "ssm_f_a.weight", d.lin(K, E))
    w.tensor(p + "ssm_f_b.weight", d.lin(Di, K))
    w.tensor(p + "ssm_beta.weight", d.lin(H, E))
    # ssm_a = -exp(A_log), per head (llama.cpp's convention); glm5-next {H},
    # kimi-linear {1, H, 1, 1}
    a = -np.exp(d.small(H, s=0.5))
    w.tensor(p + "ssm_a", a.reshape(1, 1, H, 1) if a_4d else a)
    w.tensor(p + "ssm_dt.bias", d.small(Di, s=0.5))
    w.tensor(p + "ssm_g_a.weight", d.lin(K, E))
    w.tensor(p + "ssm_g_b.weight", d.lin(Di, K))
    w.tensor(p + "ssm_norm.weight", d.norm(K))
    w.tensor(p + "attn_output.weight", d.lin(E, Di))


def write_glm5_next(path, c, tok_kv, n_vocab, seed, wtype="f32"):
    """GLM 5.3 Flash.  Names and keys: FAMILY.md §2.3 and llama.cpp's
    glm5next loader (a later release than the one t_glm_ref runs, which has
    no glm5-next graph): KDA layers carry head_count_kv 0, the KDA head count
    is attention.head_count, ssm_a has no .weight suffix, the k-pool
    compressor is indexer_compressor_{gate,ape}.weight (other converters
    spell them indexer.kpool_{gate,ape}.weight; glm_ref.py reads both)."""
    w = Writer("glm5-next")
    w.wtype = wtype
    w.keep_f32 = ("ssm_conv1d_q.weight", "ssm_conv1d_k.weight", "ssm_conv1d_v.weight",
                  "indexer_compressor_ape.weight")
    w.add("general.name", STR, "glm5-next tiny random TEST model (seed %d)" % seed)
    E, H, L = c["n_embd"], c["n_head"], c["n_layer"]
    dsa = [i % c["dsa_every"] == c["dsa_every"] - 1 for i in range(L)]
    NL = L + c["nextn"]                   # the per-layer arrays cover the NextN block too
    dsa += [True] * c["nextn"]            # (a DSA layer)
    w.add("{arch}.context_length", U32, c["ctx"])
    w.add("{arch}.embedding_length", U32, E)
    w.add("{arch}.block_count", U32, NL)
    if c["nextn"]:
        w.add("{arch}.nextn_predict_layers", U32, c["nextn"])
    w.add("{arch}.feed_forward_length", U32, c["n_ff"])
    w.add("{arch}.attention.head_count", U32, H)
    # 0 marks a KDA layer; a DSA layer has 1 (absorbed MLA is MQA: llama.cpp
    # sizes the K cache row as key_length x head_count_kv)
    w.add("{arch}.attention.head_count_kv", ARR, (U32, [1 if x else 0 for x in dsa]))
    w.add("{arch}.rope.dimension_count", U32, 0)          # NoPE: must be written as 0
    w.add("{arch}.attention.layer_norm_rms_epsilon", F32, c["rms_eps"])
    w.add("{arch}.attention.layer_norm_epsilon", F32, c["ln_eps"])
    w.add("{arch}.vocab_size", U32, n_vocab)
    w.add("{arch}.attention.q_lora_rank", U32, c["q_lora"])
    w.add("{arch}.attention.kv_lora_rank", U32, c["kv_lora"])
    w.add("{arch}.attention.key_length", U32, c["kv_lora"])
    w.add("{arch}.attention.value_length", U32, c["kv_lora"])
    w.add("{arch}.attention.key_length_mla", U32, c["qk_head"])
    w.add("{arch}.attention.value_length_mla", U32, c["v_head"])
    w.add("{arch}.kda.head_dim", U32, c["kda_dim"])
    w.add("{arch}.kda.gate_lower_bound", F32, c["lower_bound"])
    w.add("{arch}.ssm.conv_kernel", U32, c["conv"])
    w.add("{arch}.attention.indexer.head_count", U32, c["idx_head"])
    w.add("{arch}.attention.indexer.key_length", U32, c["idx_dim"])
    w.add("{arch}.attention.indexer.top_k", U32, c["top_k"])
    w.add("{arch}.attention.indexer.kpool", U32, c["kpool"])
    w.add("{arch}.hyper_connection.count", U32, c["hc"])
    w.add("{arch}.hyper_connection.sinkhorn_iterations", U32, c["hc_iters"])
    w.add("{arch}.hyper_connection.epsilon", F32, c["hc_eps"])
    common_moe_keys(w, c)
    w.add("{arch}.swiglu_clamp_exp", ARR, (F32, [c["clamp"]] * NL))
    w.add("{arch}.swiglu_clamp_shexp", ARR, (F32, [c["clamp"]] * NL))
    for k, t, body in tok_kv:
        w.raw(k, t, body)

    d = Draw(seed)
    w.tensor("token_embd.weight", d.rng.standard_normal((n_vocab, E)))
    D, IH, R = c["idx_dim"], c["idx_head"], c["kpool"]
    for il in range(NL):
        p = "blk.%d." % il
        if il == L:
            # the trunk's tail first (the converter appends the NextN
            # layers after it), then the block's wiring
            w.tensor("output_norm.weight", d.norm(E))
            w.tensor("output.weight", d.lin(n_vocab, E))
        if il >= L:
            w.tensor(p + "nextn.eh_proj.weight", d.lin(E, 2 * E))      # ggml {2E, E}: [enorm(e); hnorm(h)]
            w.tensor(p + "nextn.enorm.weight", d.norm(E))
            w.tensor(p + "nextn.hnorm.weight", d.norm(E))
            if c["nextn_head"]:
                w.tensor(p + "nextn.embed_tokens.weight", d.rng.standard_normal((n_vocab, E)))
                w.tensor(p + "nextn.shared_head_norm.weight", d.norm(E))
                w.tensor(p + "nextn.shared_head_head.weight", d.lin(n_vocab, E))
        else:
            hc_tensors(w, d, c, p)              # HC: trunk layers only
        w.tensor(p + "attn_norm.weight", d.norm(E))
        if not dsa[il]:
            kda_tensors(w, d, c, p)
        else:
            w.tensor(p + "attn_q_a.weight", d.lin(c["q_lora"], E))
            w.tensor(p + "attn_q_a_norm.weight", d.norm(c["q_lora"]))
            w.tensor(p + "attn_q_b.weight", d.lin(H * c["qk_head"], c["q_lora"]))
            w.tensor(p + "attn_kv_a_mqa.weight", d.lin(c["kv_lora"], E))
            w.tensor(p + "attn_kv_a_norm.weight", d.norm(c["kv_lora"]))
            w.tensor(p + "attn_k_b.weight", np.stack([d.lin(c["kv_lora"], c["qk_head"]) for _ in range(H)]))
            w.tensor(p + "attn_v_b.weight", np.stack([d.lin(c["v_head"], c["kv_lora"]) for _ in range(H)]))
            w.tensor(p + "attn_output.weight", d.lin(E, H * c["v_head"]))
            w.tensor(p + "indexer.attn_q_b.weight", d.lin(IH * D, c["q_lora"]))
            w.tensor(p + "indexer.attn_k.weight", d.lin(D, E))
            w.tensor(p + "indexer.k_norm.weight", d.norm(D))
            w.tensor(p + "indexer.k_norm.bias", d.small(D))
            w.tensor(p + "indexer.proj.weight", d.lin(IH, E))
            w.tensor(p + "indexer_compressor_gate.weight", d.lin(D, E))
            w.tensor(p + "indexer_compressor_ape.weight", d.small(R, D, s=0.5))   # ggml {D, kpool}
        w.tensor(p + "ffn_norm.weight", d.norm(E))
        ffn_tensors(w, d, c, il, p)
    if NL == L:
        w.tensor("output_norm.weight", d.norm(E))
        w.tensor("output.weight", d.lin(n_vocab, E))
    w.write(path)


KIMI_LINEAR = dict(
    n_embd=64, n_layer=4, n_dense=1, n_head=4,
    mla_layers=(2,),                  # the others are KDA (head_count_kv 0)
    kda_dim=16, conv=4,
    kv_lora=32, qk_nope=16, qk_rope=8, v_head=16,         # MLA, no q LoRA, no RoPE
    n_ff=96, n_expert=8, n_used=2, n_ff_exp=32, n_shared=1,
    rms_eps=1e-5, route_scale=2.5, ctx=4096,
)


def write_kimi_linear(path, c, tok_kv, n_vocab, seed):
    """llama.cpp's Kimi-Linear (its 2026-09 release loads and runs it): KDA
    with the original gate -exp(A_log) softplus(.) (no gate_lower_bound key)
    beside MLA layers, one residual stream, sigmoid MoE.  The independent
    check of glm_ref.py's KDA math."""
    w = Writer("kimi-linear")
    w.add("general.name", STR, "kimi-linear tiny random TEST model (seed %d)" % seed)
    E, H, L = c["n_embd"], c["n_head"], c["n_layer"]
    mla = [i in c["mla_layers"] for i in range(L)]
    kmla = c["qk_nope"] + c["qk_rope"]
    w.add("{arch}.context_length", U32, c["ctx"])
    w.add("{arch}.embedding_length", U32, E)
    w.add("{arch}.block_count", U32, L)
    w.add("{arch}.feed_forward_length", U32, c["n_ff"])
    w.add("{arch}.attention.head_count", U32, H)
    # 0 marks a KDA layer; an MLA layer has 1 (absorbed MLA is MQA: llama.cpp
    # sizes the K cache row as key_length x head_count_kv)
    w.add("{arch}.attention.head_count_kv", ARR, (U32, [1 if x else 0 for x in mla]))
    w.add("{arch}.rope.dimension_count", U32, c["qk_rope"])
    w.add("{arch}.attention.layer_norm_rms_epsilon", F32, c["rms_eps"])
    w.add("{arch}.vocab_size", U32, n_vocab)
    w.add("{arch}.attention.kv_lora_rank", U32, c["kv_lora"])
    w.add("{arch}.attention.key_length", U32, c["kv_lora"] + c["qk_rope"])
    w.add("{arch}.attention.value_length", U32, c["kv_lora"])
    w.add("{arch}.attention.key_length_mla", U32, kmla)
    w.add("{arch}.attention.value_length_mla", U32, c["v_head"])
    w.add("{arch}.kda.head_dim", U32, c["kda_dim"])
    w.add("{arch}.ssm.conv_kernel", U32, c["conv"])
    common_moe_keys(w, c)
    for k, t, body in tok_kv:
        w.raw(k, t, body)

    d = Draw(seed)
    w.tensor("token_embd.weight", d.rng.standard_normal((n_vocab, E)))
    for il in range(L):
        p = "blk.%d." % il
        w.tensor(p + "attn_norm.weight", d.norm(E))
        if not mla[il]:
            kda_tensors(w, d, c, p, a_4d=True)
        else:
            w.tensor(p + "attn_q.weight", d.lin(H * kmla, E))
            w.tensor(p + "attn_kv_a_mqa.weight", d.lin(c["kv_lora"] + c["qk_rope"], E))
            w.tensor(p + "attn_kv_a_norm.weight", d.norm(c["kv_lora"]))
            w.tensor(p + "attn_k_b.weight", np.stack([d.lin(c["kv_lora"], c["qk_nope"]) for _ in range(H)]))
            w.tensor(p + "attn_v_b.weight", np.stack([d.lin(c["v_head"], c["kv_lora"]) for _ in range(H)]))
            w.tensor(p + "attn_output.weight", d.lin(E, H * c["v_head"]))
        w.tensor(p + "ffn_norm.weight", d.norm(E))
        ffn_tensors(w, d, c, il, p)
    w.tensor("output_norm.weight", d.norm(E))
    w.tensor("output.weight", d.lin(n_vocab, E))
    w.write(path)


ARCHS = {"glm-dsa": (GLM_DSA, write_glm_dsa), "glm5-next": (GLM5_NEXT, write_glm5_next),
         "kimi-linear": (KIMI_LINEAR, write_kimi_linear)}


def parse_set(c, items):
    for it in items:
        k, _, v = it.partition("=")
        if k not in c:
            sys.exit("glm_gguf: unknown parameter %s (known: %s)" % (k, ", ".join(sorted(c))))
        c[k] = type(c[k])(float(v)) if not isinstance(c[k], bool) else v in ("1", "true")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("arch", choices=sorted(ARCHS))
    ap.add_argument("out")
    ap.add_argument("--vocab", default=os.path.join(SHARED, "vocab", "mini-vocab.gguf"))
    ap.add_argument("--seed", type=int, default=46)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--type", choices=("f32", "f16", "q8_0"), default="f32",
                    help="matrix storage (glm-dsa and glm5-next)")
    a = ap.parse_args(argv)
    table, fn = ARCHS[a.arch]
    c = dict(table)
    parse_set(c, a.set)
    tok_kv, n_vocab = tokenizer_kv(a.vocab)
    if a.type != "f32" and a.arch == "kimi-linear":
        sys.exit("glm_gguf: --type is implemented for glm-dsa and glm5-next only")
    if a.type != "f32":
        fn(a.out, c, tok_kv, n_vocab, a.seed, a.type)
    else:
        fn(a.out, c, tok_kv, n_vocab, a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
