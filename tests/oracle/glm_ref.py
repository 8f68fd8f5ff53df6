#!/usr/bin/env python3
"""glm_ref.py -- independent numpy float64 references of the GLM family's
graphs, for the cross-check against llama.cpp (tests/t_glm_ref.sh) and,
later, for ds4's own GLM graphs.  Spec: ../shared/docs/FAMILY.md §2 (GLM 5.3
Flash, glm5-next) and §3 (GLM 5.2/5.3, glm-dsa); docs/family.md says what is
covered, the tolerances and the tie rule.

  glm_ref.py MODEL.gguf --tokens-file IDS.txt -o LOGITS.f32 [--indexer IX.f32]
             [--no-indexer-relu]
  glm_ref.py MODEL.gguf --self-test [--tokens-file IDS.txt]

-o: float32 [n_pos][n_vocab], row p = the logits after tokens[0..p] (the
layout of ds4 --dump-logits and bench/llamacpp/llama_logits).
--indexer: float32 [n_pos][n_layer][2], per position and layer the lowest
indexer score kept and the highest rejected (NaN where the layer selected
nothing: all visible rows fit in top-k, a shared layer, a layer without an
indexer), the input of tests/llamacpp_compare.py's tie detection.
--self-test (glm5-next, kimi-linear): the KDA recurrent and chunked forms
agree, and one prefill == token by token with carried state == uneven
chunks.

The tie rule of every top-k here: the higher score wins, and among equal
scores the LOWER index (row / expert) wins.  llama.cpp breaks ties with
std::partial_sort (unspecified order), so at an exact tie the two may
select different rows; the comparison reports such positions.

Owns: the reference math only.  Must not: import anything of ds4 or
llama.cpp (facts only were read from them), or use anything but numpy and
the shared oracle's GGUF reader.
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("DS4_SHARED", os.path.join(HERE, "..", "..", "..", "shared"))
sys.path.insert(0, os.path.join(SHARED, "oracle"))
from gguf_reader import GGUFReader  # noqa: E402

F = np.float64


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def silu(x):
    return x * sigmoid(x)


def softplus(x):
    return np.logaddexp(0.0, x)


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def layer_norm(x, w, b, eps):
    m = x.mean(axis=-1, keepdims=True)
    v = ((x - m) ** 2).mean(axis=-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * w + b


def rope_interleaved(x, pos, n_rot, theta):
    """RoPE on the first n_rot dims of the last axis, adjacent pairs
    (2i, 2i+1) rotated by pos * theta^(-2i/n_rot) (ggml's NORM mode).
    x: [T, ..., D]; pos: [T]."""
    if n_rot == 0:
        return x
    i = np.arange(n_rot // 2, dtype=F)
    ang = pos.astype(F)[:, None] * theta ** (-2.0 * i / n_rot)      # [T, n_rot/2]
    shape = (x.shape[0],) + (1,) * (x.ndim - 2) + (n_rot // 2,)
    c, s = np.cos(ang).reshape(shape), np.sin(ang).reshape(shape)
    out = x.copy()
    x0, x1 = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
    out[..., 0:n_rot:2] = x0 * c - x1 * s
    out[..., 1:n_rot:2] = x0 * s + x1 * c
    return out


def topk_rows(scores, k):
    """Indices of the k best entries of a 1-D array: higher score first,
    ties to the lower index (a stable sort of -score)."""
    return np.argsort(-scores, kind="stable")[:k]


class Model:
    """Metadata and F32 weights (as float64) of one GGUF."""

    def __init__(self, path):
        self.r = GGUFReader(path)
        self.arch = self.r.get("general.architecture")
        self._cache = {}

    def kv(self, key, default=None, required=True):
        v = self.r.get(key.replace("{arch}", self.arch))
        if v is None:
            if required and default is None:
                raise SystemExit("glm_ref: %s lacks %s" % (self.r.path, key.replace("{arch}", self.arch)))
            return default
        return v

    def has(self, name):
        return self.r.has(name)

    def w(self, name):
        a = self._cache.get(name)
        if a is None:
            a = self.r.tensor(name).array().astype(F)
            self._cache[name] = a
        return a


# ---------------------------------------------------------------------------
# shared pieces: the sigmoid MoE with selection bias (DeepSeek V3 router)
# ---------------------------------------------------------------------------

def swiglu(g, u, clamp=0.0):
    """silu(gate) * up; with clamp > 0 (glm5-next, V4) the gate is clamped
    above at clamp and up to [-clamp, clamp] first."""
    if clamp > 0:
        g = np.minimum(g, clamp)
        u = np.clip(u, -clamp, clamp)
    return silu(g) * u


def dense_ffn(m, p, x, clamp=0.0):
    g = x @ m.w(p + "ffn_gate.weight").T
    u = x @ m.w(p + "ffn_up.weight").T
    return swiglu(g, u, clamp) @ m.w(p + "ffn_down.weight").T


def moe_ffn(m, p, x, n_used, scale, norm, clamp=0.0):
    """Sigmoid router; experts chosen by sigmoid(logit) + exp_probs_b (ties:
    lower expert index), weighted by the UNbiased sigmoid, normalized over
    the chosen (sum clamped below at 2^-14 as llama.cpp does), times scale;
    plus the shared expert."""
    probs = sigmoid(x @ m.w(p + "ffn_gate_inp.weight").T)         # [T, X]
    sel = probs + m.w(p + "exp_probs_b.bias") if m.has(p + "exp_probs_b.bias") else probs
    out = np.zeros_like(x)
    gate_e = m.w(p + "ffn_gate_exps.weight")
    up_e = m.w(p + "ffn_up_exps.weight")
    down_e = m.w(p + "ffn_down_exps.weight")
    for t in range(x.shape[0]):
        ids = topk_rows(sel[t], n_used)
        wts = probs[t, ids]
        if norm:
            wts = wts / max(wts.sum(), 6.103515625e-5)
        wts = wts * scale
        for e, wt in zip(ids, wts):
            h = swiglu(gate_e[e] @ x[t], up_e[e] @ x[t], clamp)
            out[t] += wt * (down_e[e] @ h)
    g = x @ m.w(p + "ffn_gate_shexp.weight").T
    u = x @ m.w(p + "ffn_up_shexp.weight").T
    return out + swiglu(g, u, clamp) @ m.w(p + "ffn_down_shexp.weight").T


# ---------------------------------------------------------------------------
# glm-dsa: GLM 5.2 / 5.3 (FAMILY.md §3)
# ---------------------------------------------------------------------------

class GlmDsa:
    """MLA with RoPE on a 64-dim tail, absorbed attention, the DSA lightning
    indexer with IndexShare, dense lead layers, sigmoid MoE.  One residual
    stream (no HC)."""

    def __init__(self, m):
        self.m = m
        k = m.kv
        self.L = k("{arch}.block_count") - k("{arch}.nextn_predict_layers", 0, False)
        self.H = k("{arch}.attention.head_count")
        self.eps = k("{arch}.attention.layer_norm_rms_epsilon")
        self.theta = k("{arch}.rope.freq_base", 10000.0, False)
        self.n_rot = k("{arch}.rope.dimension_count")
        self.kv_lora = k("{arch}.attention.kv_lora_rank")
        self.kmla = k("{arch}.attention.key_length_mla")
        self.vmla = k("{arch}.attention.value_length_mla")
        self.nope = self.kmla - self.n_rot
        self.n_dense = k("{arch}.leading_dense_block_count", 0, False)
        self.n_used = k("{arch}.expert_used_count")
        self.scale = k("{arch}.expert_weights_scale", 1.0, False)
        self.norm_w = bool(k("{arch}.expert_weights_norm", False, False))
        self.IH = k("{arch}.attention.indexer.head_count")
        self.ID = k("{arch}.attention.indexer.key_length")
        self.top_k = k("{arch}.attention.indexer.top_k")
        # IndexShare.  llama.cpp reads {arch}.attention.indexer.types (one
        # bool per layer, true = "full": runs its own indexer); without it,
        # files with context_length >= 2^20 (GLM 5.2 on) get GLM 5.2's
        # pattern, full iff max(i - offset + 1, 0) % freq == 0 with freq 4
        # and offset 3, and older ones (GLM 5 / 5.1) are all full.
        types = k("{arch}.attention.indexer.types", None, False)
        if types is not None:
            self.full = [bool(x) for x in types][:self.L]
        elif k("{arch}.context_length") >= 1048576:
            self.full = [max(i - 3 + 1, 0) % 4 == 0 for i in range(self.L)]
        else:
            self.full = [True] * self.L
        if not self.full[0]:
            raise SystemExit("glm_ref: layer 0 is a shared indexer layer with no full layer before it")
        # The kq scale as llama.cpp computes it: mscale^2 / sqrt(key_length_mla)
        # with mscale = 1 without YaRN (these files carry no rope scaling).
        self.kq_scale = 1.0 / np.sqrt(self.kmla)
        # The indexer keys' LayerNorm: GLM's config says eps 1e-6.  (llama.cpp
        # normalizes with hparams.f_norm_eps, which glm-dsa never loads; the
        # difference is eps / variance of the keys, far below the tolerance.)
        self.ln_eps = 1e-6
        # FAMILY.md §3.3 flags it: the HF glm_moe_dsa revision read there has
        # no ReLU on the indexer's q.k; llama.cpp and DeepSeek's DSA have it.
        # We follow llama.cpp; --no-indexer-relu is the other reading (the
        # cross-check shows it disagrees).
        self.relu = True

    def indexer(self, p, cur, qr, pos):
        """Scores [T, T] (query t, key s), -inf above the diagonal.
        q_I = W_Iqb c_q -> IH x ID, k = LayerNorm(W_Ik h); RoPE (interleaved)
        on the first n_rot dims of both; score = sum_h ReLU(q_h . k) w_h with
        w = W_Iproj h / sqrt(ID * IH).  The Hadamard rotation of q and k in
        the checkpoint's reference is orthogonal and only ranks through
        these dot products, so float mode drops it (as it drops the FP8)."""
        m, T = self.m, cur.shape[0]
        q = (qr @ m.w(p + "indexer.attn_q_b.weight").T).reshape(T, self.IH, self.ID)
        q = rope_interleaved(q, pos, self.n_rot, self.theta)
        k = layer_norm(cur @ m.w(p + "indexer.attn_k.weight").T,
                       m.w(p + "indexer.k_norm.weight"), m.w(p + "indexer.k_norm.bias"), self.ln_eps)
        k = rope_interleaved(k, pos, self.n_rot, self.theta)
        wts = (cur @ m.w(p + "indexer.proj.weight").T) / np.sqrt(self.ID * self.IH)   # [T, IH]
        dots = np.einsum("thd,sd->tsh", q, k)                                        # [T, T, IH]
        if self.relu:
            dots = np.maximum(dots, 0.0)
        s = np.einsum("tsh,th->ts", dots, wts)
        s[np.triu(np.ones((T, T), dtype=bool), 1)] = -np.inf
        return s

    def select(self, scores):
        """Visible-and-selected mask [T, T] and (kept min, rejected max)."""
        T = scores.shape[0]
        mask = np.tril(np.ones((T, T), dtype=bool))
        diag = np.full((T, 2), np.nan)
        for t in range(T):
            if t + 1 <= self.top_k:
                continue
            order = topk_rows(scores[t, :t + 1], t + 1)
            keep = order[:self.top_k]
            mask[t] = False
            mask[t, keep] = True
            diag[t] = scores[t, keep[-1]], scores[t, order[self.top_k]]
        return mask, diag

    def forward(self, tokens):
        m = self.m
        T = len(tokens)
        pos = np.arange(T)
        x = m.w("token_embd.weight")[np.asarray(tokens)]
        diag = np.full((T, self.L, 2), np.nan)
        mask = None
        for il in range(self.L):
            p = "blk.%d." % il
            cur = rms_norm(x, m.w(p + "attn_norm.weight"), self.eps)
            qr = rms_norm(cur @ m.w(p + "attn_q_a.weight").T, m.w(p + "attn_q_a_norm.weight"), self.eps)
            if self.full[il]:
                mask, diag[:, il] = self.select(self.indexer(p, cur, qr, pos))
            # else: a shared layer reuses the previous full layer's selection
            q = (qr @ m.w(p + "attn_q_b.weight").T).reshape(T, self.H, self.kmla)
            q_nope, q_pe = q[..., :self.nope], q[..., self.nope:]
            q_pe = rope_interleaved(q_pe, pos, self.n_rot, self.theta)
            kvp = cur @ m.w(p + "attn_kv_a_mqa.weight").T
            ckv = rms_norm(kvp[:, :self.kv_lora], m.w(p + "attn_kv_a_norm.weight"), self.eps)
            k_pe = rope_interleaved(kvp[:, self.kv_lora:], pos, self.n_rot, self.theta)
            # absorbed: q~_h = W_UK,h^T q_nope,h over the latent; V = c_kv
            q_abs = np.einsum("hrc,thc->thr", m.w(p + "attn_k_b.weight"), q_nope)
            sc = (np.einsum("thr,sr->hts", q_abs, ckv) + np.einsum("thd,sd->hts", q_pe, k_pe)) * self.kq_scale
            sc = np.where(mask[None], sc, -np.inf)
            sc = np.exp(sc - sc.max(axis=2, keepdims=True))
            pr = sc / sc.sum(axis=2, keepdims=True)
            lat = np.einsum("hts,sr->thr", pr, ckv)
            o = np.einsum("hvr,thr->thv", m.w(p + "attn_v_b.weight"), lat).reshape(T, self.H * self.vmla)
            x = x + o @ m.w(p + "attn_output.weight").T
            cur = rms_norm(x, m.w(p + "ffn_norm.weight"), self.eps)
            if il < self.n_dense:
                x = x + dense_ffn(m, p, cur)
            else:
                x = x + moe_ffn(m, p, cur, self.n_used, self.scale, self.norm_w)
        h = rms_norm(x, m.w("output_norm.weight"), self.eps)
        out = m.w("output.weight") if m.has("output.weight") else m.w("token_embd.weight")
        return h @ out.T, diag


ARCHS = {"glm-dsa": GlmDsa}


def read_ids(path):
    with open(path) as f:
        return [int(t) for t in f.read().replace(",", " ").split()]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--tokens-file")
    ap.add_argument("-o", "--out")
    ap.add_argument("--indexer")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--no-indexer-relu", action="store_true",
                    help="glm-dsa: score with the raw q.k (HF's reading), for the cross-check's negative case")
    a = ap.parse_args(argv)
    m = Model(a.model)
    if m.arch not in ARCHS:
        raise SystemExit("glm_ref: architecture %s is not covered (%s)" % (m.arch, ", ".join(ARCHS)))
    ref = ARCHS[m.arch](m)
    if a.no_indexer_relu:
        ref.relu = False
    if a.self_test:
        return ref.self_test(read_ids(a.tokens_file) if a.tokens_file else None)
    if not a.tokens_file or not a.out:
        ap.error("--tokens-file and -o are needed")
    logits, diag = ref.forward(read_ids(a.tokens_file))
    logits.astype(np.float32).tofile(a.out)
    if a.indexer:
        diag.astype(np.float32).tofile(a.indexer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
