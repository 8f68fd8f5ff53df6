#!/usr/bin/env python3
"""glm_ref.py -- independent numpy float64 references of the GLM family's
graphs, for the cross-check against llama.cpp (tests/t_glm_ref.sh) and,
later, for ds4's own GLM graphs.  Spec: ../shared/docs/FAMILY.md §2 (GLM 5.3
Flash, glm5-next) and §3 (GLM 5.2/5.3, glm-dsa); docs/family.md says what is
covered, the tolerances and the tie rule.  Architectures (from the file's
general.architecture): glm-dsa, glm5-next, and kimi-linear (llama.cpp's
Kimi-Linear: the same KDA layer with the original gate, the independent
check of the KDA math).

  glm_ref.py MODEL.gguf --tokens-file IDS.txt -o LOGITS.f32 [--indexer IX.f32]
             [--no-indexer-relu]
  glm_ref.py MODEL.gguf --self-test [--tokens-file IDS.txt]
  glm_ref.py MODEL.gguf --tokens-file IDS.txt --mtp OUT.f32 [--mtp-drafts D1,D2,...]

-o: float32 [n_pos][n_vocab], row p = the logits after tokens[0..p] (the
layout of ds4 --dump-logits and bench/llamacpp/llama_logits).
--indexer: float32 [n_pos][n_layer][2], per position and layer the lowest
indexer score kept and the highest rejected (of rows for glm-dsa, of pools
for glm5-next; NaN where the layer selected nothing: all visible rows fit
in top-k, a shared layer, a layer without an indexer), the input of
tests/llamacpp_compare.py's tie detection.
--mtp (glm-dsa or glm5-next with a NextN layer, glm_gguf.py --set nextn=1): the NextN
block's draft logits, float32 [n_pos][n_vocab], row p from token p and the
main model's normed hidden state after p - 1 (the guess of token p + 1);
with --mtp-drafts the chain after the tokens (the last one = the token
just chosen): one row per step, step i > 0 from draft d_i (GlmDsa.mtp).
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


def moe_ffn(m, p, x, n_used, scale, norm, clamp=0.0, clamp_sh=0.0):
    """Sigmoid router; experts chosen by sigmoid(logit) + exp_probs_b (ties:
    lower expert index), weighted by the UNbiased sigmoid, normalized over
    the chosen (sum clamped below at 2^-14 as llama.cpp does), times scale;
    plus the shared expert (unscaled).  clamp / clamp_sh: the SwiGLU limit of
    the routed / shared experts (0: none)."""
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
    return out + swiglu(g, u, clamp_sh) @ m.w(p + "ffn_down_shexp.weight").T


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

    def layer(self, p, x, pos, mask, dense_ffn_layer):
        """One decoder layer on rows x [T, E] at positions pos, attending
        where mask [T, T] is true; returns the residual stream after it."""
        m = self.m
        T = x.shape[0]
        cur = rms_norm(x, m.w(p + "attn_norm.weight"), self.eps)
        qr = rms_norm(cur @ m.w(p + "attn_q_a.weight").T, m.w(p + "attn_q_a_norm.weight"), self.eps)
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
        if dense_ffn_layer:
            return x + dense_ffn(m, p, cur)
        return x + moe_ffn(m, p, cur, self.n_used, self.scale, self.norm_w)

    def forward(self, tokens):
        """Logits of every position, the indexer diagnostics, and (kept in
        self.h) the hidden state after the output norm, the NextN block's
        input."""
        m = self.m
        T = len(tokens)
        pos = np.arange(T)
        x = m.w("token_embd.weight")[np.asarray(tokens)]
        diag = np.full((T, self.L, 2), np.nan)
        mask = None
        for il in range(self.L):
            p = "blk.%d." % il
            if self.full[il]:
                cur = rms_norm(x, m.w(p + "attn_norm.weight"), self.eps)
                qr = rms_norm(cur @ m.w(p + "attn_q_a.weight").T, m.w(p + "attn_q_a_norm.weight"), self.eps)
                mask, diag[:, il] = self.select(self.indexer(p, cur, qr, pos))
            # else: a shared layer reuses the previous full layer's selection
            x = self.layer(p, x, pos, mask, il < self.n_dense)
        h = rms_norm(x, m.w("output_norm.weight"), self.eps)
        self.h = h
        out = m.w("output.weight") if m.has("output.weight") else m.w("token_embd.weight")
        return h @ out.T, diag

    # -- the NextN (MTP) block ------------------------------------------------
    # llama.cpp's glm-dsa graph_mtp (the DeepSeek-V3 NextN design): row p of
    # the block takes the token at p and the main model's hidden state after
    # p - 1 (after the output norm, llama.cpp's t_h_nextn; zero at p = 0):
    # x = eh_proj [enorm(embed(tok)); hnorm(h)], one full decoder layer at
    # position p over the block's own rows (DENSE attention: llama.cpp runs
    # the block without the DSA indexer), then shared_head_norm (fallback
    # output_norm) and the head (shared_head_head, fallback output); the
    # normed state is also the h of the next draft step.  Its logits at row
    # p guess the token at p + 1.

    def nextn_prefix(self):
        if self.m.kv("{arch}.nextn_predict_layers", 0, False) < 1:
            raise SystemExit("glm_ref: %s has no NextN layer (nextn_predict_layers)" % self.m.r.path)
        return "blk.%d." % self.L

    def mtp_input(self, tok, hprev):
        m, p = self.m, self.nextn_prefix()
        emb = m.w(p + "nextn.embed_tokens.weight") if m.has(p + "nextn.embed_tokens.weight") \
            else m.w("token_embd.weight")
        e = rms_norm(emb[np.asarray(tok)], m.w(p + "nextn.enorm.weight"), self.eps)
        h = rms_norm(hprev, m.w(p + "nextn.hnorm.weight"), self.eps)
        return np.concatenate([e, h], axis=-1) @ m.w(p + "nextn.eh_proj.weight").T

    def mtp_rows(self, X):
        """The block on input rows X [T, E] at positions 0..T-1 (causal):
        (the normed states, the logits), both [T, .]."""
        m, p = self.m, self.nextn_prefix()
        T = X.shape[0]
        y = self.layer(p, X, np.arange(T), np.tril(np.ones((T, T), dtype=bool)), False)
        nw = m.w(p + "nextn.shared_head_norm.weight") if m.has(p + "nextn.shared_head_norm.weight") \
            else m.w("output_norm.weight")
        hn = rms_norm(y, nw, self.eps)
        head = m.w(p + "nextn.shared_head_head.weight") if m.has(p + "nextn.shared_head_head.weight") \
            else m.w("output.weight") if m.has("output.weight") else m.w("token_embd.weight")
        return hn, hn @ head.T

    def mtp(self, tokens, drafts=()):
        """Draft logits.  Without drafts: row p of every position of tokens
        (from tokens[p] and the main state after p - 1).  With drafts d1..:
        the chain after tokens[:-1] evaluated, cur = tokens[-1]: step 0 at
        the last position from cur and the main state before it, step i
        from d_i and step i-1's normed state; one row per step."""
        self.forward(tokens if not drafts else tokens[:-1])
        T = len(tokens)
        H = np.zeros((T, self.h.shape[1]))
        H[1:] = self.h[:T - 1]
        X = self.mtp_input(tokens, H)
        hn, logits = self.mtp_rows(X)
        if not drafts:
            return logits
        rows = [logits[-1]]
        h = hn[-1]
        for d in drafts:
            X = np.concatenate([X, self.mtp_input([d], h[None, :])])
            hn, logits = self.mtp_rows(X)
            rows.append(logits[-1])
            h = hn[-1]
        return np.array(rows)

    def self_test(self, tokens=None):
        print("glm_ref: glm-dsa has no recurrent state; its check is the cross-check against llama.cpp")
        return 0


# ---------------------------------------------------------------------------
# KDA: the per-channel gated delta rule (FAMILY.md §2.2 step 5), two forms
# ---------------------------------------------------------------------------

def l2_norm(x, eps):
    """FLA's l2norm: x / sqrt(sum x^2 + eps) over the last axis (not
    x / max(|x|, eps), which ggml_l2_norm computes; at these sizes the two
    differ by eps / |x|^2)."""
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps)


def kda_recurrent(q, k, v, g, beta, S):
    """Token by token.  q, k, g: [T, H, K]; v: [T, H, V]; beta: [T, H];
    S: [H, K, V] (key x value).  For each token:
        S <- S * exp(g)[:, None];  u = S^T k;  S <- S + k (beta (v - u))^T;
        o = S^T q.
    Returns (o [T, H, V], S)."""
    S = S.copy()
    o = np.empty(v.shape, dtype=F)
    for t in range(q.shape[0]):
        S *= np.exp(g[t])[:, :, None]
        u = np.einsum("hkv,hk->hv", S, k[t])
        S += np.einsum("hk,hv->hkv", k[t], beta[t][:, None] * (v[t] - u))
        o[t] = np.einsum("hkv,hk->hv", S, q[t])
    return o, S


def kda_chunked(q, k, v, g, beta, S, C=64):
    """The same recurrence in chunks of C tokens (the form prefill kernels
    use; transformers' chunk form).  Within a chunk, with G_i = sum_{j<=i} g_j
    and D_ij = exp(G_i - G_j) (j <= i, per key channel; never exp of a
    positive number, so nothing overflows), the update vectors
    w_i = beta_i (v_i - u_i) solve the unit lower-triangular system
        w_i + beta_i sum_{j<i} (k_i . D_ij k_j) w_j = beta_i (v_i - (k_i e^{G_i}) S0)
    and then
        o_i = (q_i e^{G_i}) S0 + sum_{j<=i} (q_i . D_ij k_j) w_j,
        S_C = e^{G_C} S0 + sum_j (D_Cj k_j) w_j^T."""
    T = q.shape[0]
    S = S.copy()
    o = np.empty(v.shape, dtype=F)
    for c0 in range(0, T, C):
        sl = slice(c0, min(c0 + C, T))
        qc, kc, vc, gc, bc = q[sl], k[sl], v[sl], g[sl], beta[sl]
        n = qc.shape[0]
        G = np.cumsum(gc, axis=0)                                   # [n, H, K]
        diff = G[:, None] - G[None, :]                              # [i, j, H, K]
        low = np.tril(np.ones((n, n), dtype=bool))
        D = np.where(low[:, :, None, None], np.exp(np.where(low[:, :, None, None], diff, 0.0)), 0.0)
        A = np.einsum("ihk,ijhk,jhk->hij", kc, D, kc)               # k_i . D_ij k_j
        A = A * np.tril(np.ones((n, n)), -1)[None] * bc.T[:, :, None]
        rhs = bc.T[:, :, None] * (np.einsum("ihv->hiv", vc) -
                                  np.einsum("ihk,hkv->hiv", kc * np.exp(G), S))
        W = np.linalg.solve(np.eye(n)[None] + A, rhs)               # [H, n, V]
        Aq = np.einsum("ihk,ijhk,jhk->hij", qc, D, kc)
        o[sl] = np.einsum("hij,hjv->ihv", Aq, W) + np.einsum("ihk,hkv->ihv", qc * np.exp(G), S)
        DC = np.exp(G[-1][None] - G)                                # [j, H, K]
        S = np.exp(G[-1])[:, :, None] * S + np.einsum("jhk,hjv->hkv", DC * kc, W)
    return o, S


def kda_gate(m, p, h, H, K, lower_bound):
    """Per-channel log decay g [T, H, K].  y = f_b(f_a(h)) + dt_bias; ssm_a
    holds -exp(A_log) per head.  GLM 5.3 Flash (lower_bound set):
    g = lower_bound * sigmoid(exp(A_log) y), lower_bound a multiplier, not
    a clamp; Kimi-Linear (none): g = -exp(A_log) softplus(y)."""
    T = h.shape[0]
    y = ((h @ m.w(p + "ssm_f_a.weight").T) @ m.w(p + "ssm_f_b.weight").T + m.w(p + "ssm_dt.bias")).reshape(T, H, K)
    a = -m.w(p + "ssm_a").reshape(H)[None, :, None]               # exp(A_log)
    if lower_bound is not None:
        return lower_bound * sigmoid(a * y)
    return -a * softplus(y)


def kda_layer(m, p, h, ls, H, K, R, lower_bound, l2_eps, rms_eps, mode, chunk):
    """One KDA layer on the normed input h [T, E] and the layer's carried
    state ls (conv: the last R-1 projected inputs of q, k, v; S: [H, K, K]).
    q, k, v: projection -> causal depthwise conv (kernel R, tap R-1 on the
    current token) -> SiLU; q, k L2-normed (eps l2_eps), q x 1/sqrt(K); the
    gate (kda_gate), beta = sigmoid(W_b h); the recurrence (mode "chunked"
    or "recurrent"); per-head RMSNorm x sigmoid(g_b(g_a(h))); output
    projection."""
    T = h.shape[0]
    qkv = []
    for i, x in enumerate("qkv"):
        y = h @ m.w(p + "attn_%s.weight" % x).T                      # [T, Di]
        xx = np.concatenate([ls["conv"][i], y])                      # [R-1+T, Di]
        cw = m.w(p + "ssm_conv1d_%s.weight" % x).reshape(-1, R)       # [Di, R]
        out = sum(xx[j:j + T] * cw[:, j] for j in range(R))
        ls["conv"][i] = xx[T:]
        qkv.append(silu(out).reshape(T, H, K))
    q = l2_norm(qkv[0], l2_eps) / np.sqrt(K)
    k = l2_norm(qkv[1], l2_eps)
    g = kda_gate(m, p, h, H, K, lower_bound)
    beta = sigmoid(h @ m.w(p + "ssm_beta.weight").T)                 # [T, H]
    if mode == "chunked":
        o, ls["S"] = kda_chunked(q, k, qkv[2], g, beta, ls["S"], chunk)
    else:
        o, ls["S"] = kda_recurrent(q, k, qkv[2], g, beta, ls["S"])
    gate = ((h @ m.w(p + "ssm_g_a.weight").T) @ m.w(p + "ssm_g_b.weight").T).reshape(T, H, K)
    o = rms_norm(o, m.w(p + "ssm_norm.weight"), rms_eps) * sigmoid(gate)
    return o.reshape(T, H * K) @ m.w(p + "attn_output.weight").T


# ---------------------------------------------------------------------------
# mHC: DeepSeek V4's hyper-connections (FAMILY.md §2.2; the shared oracle's
# ds4_ref.py is the V4 spec this follows)
# ---------------------------------------------------------------------------

def hc_pre(X, fn, scale, base, n, iters, hc_eps, rms_eps):
    """X [T, n, E] -> (sublayer input [T, E], post [T, n], comb [T, n, n])."""
    T = X.shape[0]
    flat = X.reshape(T, -1)
    flat = flat / np.sqrt(np.mean(flat * flat, axis=1, keepdims=True) + rms_eps)
    mix = flat @ fn.T                                               # [T, (2+n)n]
    pre = sigmoid(mix[:, :n] * scale[0] + base[:n]) + hc_eps
    post = 2.0 * sigmoid(mix[:, n:2 * n] * scale[1] + base[n:2 * n])
    z = (mix[:, 2 * n:] * scale[2] + base[2 * n:]).reshape(T, n, n)
    z = np.exp(z - z.max(axis=2, keepdims=True))
    comb = z / z.sum(axis=2, keepdims=True) + hc_eps
    comb = comb / (comb.sum(axis=1, keepdims=True) + hc_eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(axis=2, keepdims=True) + hc_eps)
        comb = comb / (comb.sum(axis=1, keepdims=True) + hc_eps)
    return np.einsum("th,thd->td", pre, X), post, comb


def hc_post(y, X, post, comb):
    """stream b <- post_b y + sum_a comb[a, b] X_a."""
    return post[:, :, None] * y[:, None, :] + np.einsum("tab,tad->tbd", comb, X)


# ---------------------------------------------------------------------------
# glm5-next: GLM 5.3 Flash (FAMILY.md §2)
# ---------------------------------------------------------------------------

class Glm5Next:
    """HC around every sublayer; KDA layers (head_count_kv 0) and NoPE DSA
    layers with the k-pool indexer; dense lead layers and sigmoid MoE with
    the SwiGLU clamp; the streams' mean -> norm -> lm head.  forward() runs a
    chunk of tokens on a carried state, so a prefill, token by token and
    uneven chunks are the same function."""

    def __init__(self, m):
        self.m = m
        k = m.kv
        self.L = k("{arch}.block_count") - k("{arch}.nextn_predict_layers", 0, False)
        self.H = k("{arch}.attention.head_count")
        hkv = k("{arch}.attention.head_count_kv")
        hkv = [int(x) for x in hkv] if not isinstance(hkv, int) else [hkv] * self.L
        self.kda = [x == 0 for x in hkv[:self.L]]
        self.eps = k("{arch}.attention.layer_norm_rms_epsilon")
        # the indexer keys' LayerNorm: 1e-6 in the reference (llama.cpp's
        # glm5next reads attention.layer_norm_epsilon, default 1e-6)
        self.ln_eps = k("{arch}.attention.layer_norm_epsilon", 1e-6, False)
        if k("{arch}.rope.dimension_count", 0, False) != 0:
            raise SystemExit("glm_ref: glm5-next is NoPE; rope.dimension_count must be 0")
        self.K = k("{arch}.kda.head_dim")
        self.conv = k("{arch}.ssm.conv_kernel")
        self.lower_bound = k("{arch}.kda.gate_lower_bound")
        self.kv_lora = k("{arch}.attention.kv_lora_rank")
        self.qk = k("{arch}.attention.key_length_mla")
        self.vh = k("{arch}.attention.value_length_mla")
        self.IH = k("{arch}.attention.indexer.head_count")
        self.ID = k("{arch}.attention.indexer.key_length")
        self.top_k = k("{arch}.attention.indexer.top_k")
        self.r = k("{arch}.attention.indexer.kpool", 4, False)
        types = k("{arch}.attention.indexer.types", None, False)
        self.full = [bool(x) for x in types][:self.L] if types is not None else [True] * self.L
        self.n_hc = k("{arch}.hyper_connection.count")
        self.hc_iters = k("{arch}.hyper_connection.sinkhorn_iterations")
        self.hc_eps = k("{arch}.hyper_connection.epsilon")
        self.n_dense = k("{arch}.leading_dense_block_count", 0, False)
        self.n_used = k("{arch}.expert_used_count")
        self.scale = k("{arch}.expert_weights_scale", 1.0, False)
        self.norm_w = bool(k("{arch}.expert_weights_norm", False, False))

        def per_layer(key):
            v = k(key, None, False)
            if v is None:
                return [10.0] * self.L        # swiglu_limit 10 of the release (FAMILY.md §2.1)
            return [float(x) for x in v] if not isinstance(v, float) else [v] * self.L
        self.clamp = per_layer("{arch}.swiglu_clamp_exp")
        self.clamp_sh = per_layer("{arch}.swiglu_clamp_shexp")
        self.kda_mode = "chunked"
        self.chunk = 64

    def gate_name(self, p, what):
        """The k-pool compressor's tensors under either spelling."""
        for n in (p + "indexer_compressor_%s.weight" % what, p + "indexer_compressor_%s" % what,
                  p + "indexer.kpool_%s.weight" % what):
            if self.m.has(n):
                return n
        raise SystemExit("glm_ref: %s has no k-pool %s tensor" % (p, what))

    @staticmethod
    def layer_of(p):
        return int(p.split(".")[1])

    def new_state(self):
        Di = self.H * self.K
        st = {"pos": 0, "layers": []}
        for il in range(self.L):
            if self.kda[il]:
                st["layers"].append({"conv": np.zeros((3, self.conv - 1, Di)),
                                     "S": np.zeros((self.H, self.K, self.K))})
            else:
                st["layers"].append({"ckv": np.zeros((0, self.kv_lora)), "ik": np.zeros((0, self.ID)),
                                     "ig": np.zeros((0, self.ID))})
        return st

    def kda_layer(self, p, h, ls):
        return kda_layer(self.m, p, h, ls, self.H, self.K, self.conv, self.lower_bound, 1e-6,
                         self.eps, self.kda_mode, self.chunk)

    def select(self, sc, t):
        """Positions query t attends to, and (kept min, rejected max) pool
        scores (NaN when every visible pool is kept).  Candidates: the pools
        (r consecutive positions from 0) complete at t; the top
        top_k / r by score (ties: lower pool wins), expanded to their
        positions, plus the incomplete tail (the < r newest positions)."""
        r = self.r
        n_vis = (t + 1) // r
        n_keep = min(n_vis, self.top_k // r)
        tail = np.arange(n_vis * r, t + 1)
        if n_keep == n_vis:
            return np.arange(t + 1), (np.nan, np.nan)
        order = topk_rows(sc[:n_vis], n_vis)
        keep = np.sort(order[:n_keep])
        pos = (keep[:, None] * r + np.arange(r)[None]).reshape(-1)
        return np.concatenate([pos, tail]), (sc[order[n_keep - 1]], sc[order[n_keep]])

    def dsa_layer(self, p, cur, ls, pos0, prev_sel):
        m, T, r, D = self.m, cur.shape[0], self.r, self.ID
        qr = rms_norm(cur @ m.w(p + "attn_q_a.weight").T, m.w(p + "attn_q_a_norm.weight"), self.eps)
        ckv = rms_norm(cur @ m.w(p + "attn_kv_a_mqa.weight").T, m.w(p + "attn_kv_a_norm.weight"), self.eps)
        ls["ckv"] = np.concatenate([ls["ckv"], ckv])
        N = pos0 + T
        diag = np.full((T, 2), np.nan)
        il = self.layer_of(p)
        if il >= self.L or self.full[il]:          # the NextN block always has its own indexer
            ik = layer_norm(cur @ m.w(p + "indexer.attn_k.weight").T, m.w(p + "indexer.k_norm.weight"),
                            m.w(p + "indexer.k_norm.bias"), self.ln_eps)
            ls["ik"] = np.concatenate([ls["ik"], ik])
            ls["ig"] = np.concatenate([ls["ig"], cur @ m.w(self.gate_name(p, "gate")).T])
            npool = N // r
            kk = ls["ik"][:npool * r].reshape(npool, r, D)
            gg = ls["ig"][:npool * r].reshape(npool, r, D) + m.w(self.gate_name(p, "ape"))[None]
            gg = np.exp(gg - gg.max(axis=1, keepdims=True))
            Kp = np.sum(gg / gg.sum(axis=1, keepdims=True) * kk, axis=1)            # [npool, D]
            iq = (qr @ m.w(p + "indexer.attn_q_b.weight").T).reshape(T, self.IH, D)
            wts = (cur @ m.w(p + "indexer.proj.weight").T) / np.sqrt(D * self.IH)
            sc = np.einsum("tph,th->tp", np.maximum(np.einsum("thd,pd->tph", iq, Kp), 0.0), wts)
            sel = []
            for i in range(T):
                s_i, diag[i] = self.select(sc[i], pos0 + i)
                sel.append(s_i)
        elif prev_sel is None:
            raise SystemExit("glm_ref: %s is a shared indexer layer with no full DSA layer before it" % p)
        else:
            sel = prev_sel        # a shared layer: the previous full layer's selection
        mask = np.zeros((T, N), dtype=bool)
        for i in range(T):
            mask[i, sel[i]] = True
        q = (qr @ m.w(p + "attn_q_b.weight").T).reshape(T, self.H, self.qk)
        q_abs = np.einsum("hrc,thc->thr", m.w(p + "attn_k_b.weight"), q)
        s = np.einsum("thr,sr->hts", q_abs, ls["ckv"]) / np.sqrt(self.qk)
        s = np.where(mask[None], s, -np.inf)
        s = np.exp(s - s.max(axis=2, keepdims=True))
        lat = np.einsum("hts,sr->thr", s / s.sum(axis=2, keepdims=True), ls["ckv"])
        o = np.einsum("hvr,thr->thv", m.w(p + "attn_v_b.weight"), lat).reshape(T, self.H * self.vh)
        return o @ m.w(p + "attn_output.weight").T, diag, sel

    def forward(self, tokens, state=None):
        """Logits [T, V] of a chunk of tokens after the state's prefix;
        updates state (a fresh one when None)."""
        m = self.m
        st = state if state is not None else self.new_state()
        T, pos0 = len(tokens), st["pos"]
        X = np.repeat(m.w("token_embd.weight")[np.asarray(tokens)][:, None, :], self.n_hc, axis=1)
        diag = np.full((T, self.L, 2), np.nan)
        sel = None
        hcargs = (self.n_hc, self.hc_iters, self.hc_eps, self.eps)
        for il in range(self.L):
            p = "blk.%d." % il
            x, post, comb = hc_pre(X, m.w(p + "hc_attn_fn.weight"), m.w(p + "hc_attn_scale.weight"),
                                   m.w(p + "hc_attn_base.weight"), *hcargs)
            h = rms_norm(x, m.w(p + "attn_norm.weight"), self.eps)
            if self.kda[il]:
                y = self.kda_layer(p, h, st["layers"][il])
            else:
                y, diag[:, il], sel = self.dsa_layer(p, h, st["layers"][il], pos0, sel)
            X = hc_post(y, X, post, comb)
            x, post, comb = hc_pre(X, m.w(p + "hc_ffn_fn.weight"), m.w(p + "hc_ffn_scale.weight"),
                                   m.w(p + "hc_ffn_base.weight"), *hcargs)
            h = rms_norm(x, m.w(p + "ffn_norm.weight"), self.eps)
            if il < self.n_dense:
                y = dense_ffn(m, p, h, self.clamp[il])
            else:
                y = moe_ffn(m, p, h, self.n_used, self.scale, self.norm_w, self.clamp[il], self.clamp_sh[il])
            X = hc_post(y, X, post, comb)
        st["pos"] = pos0 + T
        h = rms_norm(X.mean(axis=1), m.w("output_norm.weight"), self.eps)    # no hc_head: the mean
        self.h = h                        # the NextN block's input (post-norm, as llama.cpp's t_h_nextn)
        out = m.w("output.weight") if m.has("output.weight") else m.w("token_embd.weight")
        return h @ out.T, diag

    # -- the NextN (MTP) block ------------------------------------------------
    # llama.cpp's glm5-next graph_mtp (docs/family.md "MTP"): row p takes the
    # token at p and the main model's state after p - 1 -- the streams' mean
    # AFTER the output norm (t_h_nextn; zero at p = 0): x = eh_proj
    # [enorm(embed(tok)); hnorm(h)]; then a plain-residual decoder layer (no
    # hyper-connections: the hc_* tensors are the trunk's): x += DSA(attn_norm
    # x) with the block's OWN k-pool indexer over the block's own rows (its
    # latents, keys, gates), x += MoE(ffn_norm x) with the SwiGLU clamps of
    # entry n_layer of the per-layer arrays (the last trunk layer's when the
    # arrays stop there); then shared_head_norm (fallback output_norm) and
    # the head (shared_head_head, fallback output).  The normed state is the
    # h of the next draft step.  The indexer runs at every step (llama.cpp's
    # index_share_for_mtp_iteration reuse of the first step's selection is
    # not modelled: it is the same set while every visible pool fits in
    # top_k, as in the tiny files).

    def nextn_prefix(self):
        if self.m.kv("{arch}.nextn_predict_layers", 0, False) < 1:
            raise SystemExit("glm_ref: %s has no NextN layer (nextn_predict_layers)" % self.m.r.path)
        return "blk.%d." % self.L

    mtp_input = GlmDsa.mtp_input

    def mtp_new_state(self):
        return {"ckv": np.zeros((0, self.kv_lora)), "ik": np.zeros((0, self.ID)), "ig": np.zeros((0, self.ID))}

    def mtp_rows(self, X, st, pos0):
        """The block on input rows X [T, E] at positions pos0.. after the
        rows st holds: (the normed states, the logits), both [T, .]."""
        m, p, L = self.m, self.nextn_prefix(), self.L
        h = rms_norm(X, m.w(p + "attn_norm.weight"), self.eps)
        y, _, _ = self.dsa_layer(p, h, st, pos0, None)
        X = X + y
        h = rms_norm(X, m.w(p + "ffn_norm.weight"), self.eps)
        cl = self.clamp[L] if len(self.clamp) > L else self.clamp[L - 1]
        cs = self.clamp_sh[L] if len(self.clamp_sh) > L else self.clamp_sh[L - 1]
        X = X + moe_ffn(m, p, h, self.n_used, self.scale, self.norm_w, cl, cs)
        nw = m.w(p + "nextn.shared_head_norm.weight") if m.has(p + "nextn.shared_head_norm.weight") \
            else m.w("output_norm.weight")
        hn = rms_norm(X, nw, self.eps)
        head = m.w(p + "nextn.shared_head_head.weight") if m.has(p + "nextn.shared_head_head.weight") \
            else m.w("output.weight") if m.has("output.weight") else m.w("token_embd.weight")
        return hn, hn @ head.T

    def mtp(self, tokens, drafts=()):
        """Draft logits, as GlmDsa.mtp: without drafts row p of every
        position; with drafts d1.. the chain after tokens[:-1] (cur =
        tokens[-1]), one row per step."""
        self.forward(tokens if not drafts else tokens[:-1])
        T = len(tokens)
        H = np.zeros((T, self.h.shape[1]))
        H[1:] = self.h[:T - 1]
        st = self.mtp_new_state()
        hn, logits = self.mtp_rows(self.mtp_input(tokens, H), st, 0)
        if not drafts:
            return logits
        rows = [logits[-1]]
        h = hn[-1]
        for i, d in enumerate(drafts):
            hn, logits = self.mtp_rows(self.mtp_input([d], h[None, :]), st, T + i)
            rows.append(logits[-1])
            h = hn[-1]
        return np.array(rows)

    def self_test(self, tokens=None):
        return hc_self_test(self) | kda_self_test(self, tokens)


def hc_self_test(ref, tol=1e-12):
    """glm5-next's mHC is DeepSeek V4's unchanged: hc_pre/hc_post here ==
    the shared oracle's V4 implementation (../shared/oracle/ds4_ref.py,
    checked against the original engine's golden logits) on this file's
    first layer's mixer and random streams."""
    import types
    import ds4_ref
    m, p = ref.m, "blk.0.hc_attn_"
    o = ds4_ref.DS4Ref.__new__(ds4_ref.DS4Ref)
    o.c = types.SimpleNamespace(n_hc=ref.n_hc, hc_eps=ref.hc_eps, hc_iters=ref.hc_iters, rms_eps=ref.eps)
    o.dtype, o.emulate = F, False
    o.W = types.SimpleNamespace(get=lambda n: m.w(n.replace("blk.0.hc_attn_", p)), type=lambda n: 0)
    X = np.random.default_rng(3).standard_normal((7, ref.n_hc, m.w("output_norm.weight").shape[0]))
    y = np.random.default_rng(4).standard_normal((7, X.shape[2]))
    a = hc_pre(X, m.w(p + "fn.weight"), m.w(p + "scale.weight"), m.w(p + "base.weight"),
               ref.n_hc, ref.hc_iters, ref.hc_eps, ref.eps)
    b = o.hc_pre(X, "blk.0.hc_attn")
    d = max(float(np.max(np.abs(u - v)) / max(np.max(np.abs(v)), 1e-300)) for u, v in zip(a, b))
    d = max(d, float(np.max(np.abs(hc_post(y, X, a[1], a[2]) - ds4_ref.DS4Ref.hc_post(y, X, b[1], b[2])))))
    ok = d <= tol
    print("%s hc: mHC == the shared oracle's DeepSeek V4 mHC: max rel %.2e (tol %.0e)"
          % ("ok  " if ok else "FAIL", d, tol))
    return 0 if ok else 1


def rel_rows(a, b):
    return float(np.max(np.linalg.norm(a - b, axis=1) / np.maximum(np.linalg.norm(b, axis=1), 1e-300)))


def kda_self_test(ref, tokens=None, tol=1e-9, need_indexer=True):
    """The checks of a recurrent-state model: (1) the KDA kernel's chunked
    form == its recurrent form on random inputs spanning several chunks and
    a partial one, with a nonzero initial state; (2) the model's logits: one
    prefill with the chunked form == one prefill with the recurrent form ==
    token by token with carried conv+recurrent state == uneven chunks.
    Float64 on both sides, so the tolerance is tight: 1e-9 relative (the
    measured distances are ~1e-14)."""
    if tokens is None:
        rng = np.random.default_rng(5)
        tokens = [int(x) for x in rng.integers(10, 4090, 200)]
    fail = 0

    def check(name, d):
        nonlocal fail
        ok = d <= tol
        fail += not ok
        print("%s %s: max rel %.2e (tol %.0e)" % ("ok  " if ok else "FAIL", name, d, tol))

    rng = np.random.default_rng(11)
    T, H, K, V = 150, 3, 8, 6
    q = l2_norm(rng.standard_normal((T, H, K)), 1e-6) / np.sqrt(K)
    k = l2_norm(rng.standard_normal((T, H, K)), 1e-6)
    v = rng.standard_normal((T, H, V))
    g = -5.0 * sigmoid(rng.standard_normal((T, H, K)))
    beta = sigmoid(rng.standard_normal((T, H)))
    S0 = rng.standard_normal((H, K, V))
    o1, S1 = kda_recurrent(q, k, v, g, beta, S0)
    o2, S2 = kda_chunked(q, k, v, g, beta, S0, 64)
    check("kernel: chunked (64) == recurrent, 150 tokens, initial state",
          max(rel_rows(o2.reshape(T, -1), o1.reshape(T, -1)), rel_rows(S2.reshape(H, -1), S1.reshape(H, -1))))

    n = len(tokens)
    ref.kda_mode = "chunked"
    base, dg = ref.forward(tokens)
    ref.kda_mode = "recurrent"
    rec, _ = ref.forward(tokens)
    check("model: prefill, chunked KDA == recurrent KDA (%d tokens)" % n, rel_rows(base, rec))
    st = ref.new_state()
    one = np.concatenate([ref.forward([t], st)[0] for t in tokens])
    check("model: token by token with carried state == prefill", rel_rows(one, base))
    ref.kda_mode = "chunked"
    st = ref.new_state()
    cuts = [0, 1, 6, 70, 71, 140, n]
    parts = np.concatenate([ref.forward(tokens[a:b], st)[0] for a, b in zip(cuts, cuts[1:]) if b > a])
    check("model: uneven chunks %s == prefill" % [b - a for a, b in zip(cuts, cuts[1:]) if b > a],
          rel_rows(parts, base))
    sel = int((~np.isnan(dg[:, :, 0])).any(axis=1).sum())
    if need_indexer:
        print("     %d of %d positions ran an indexer selection" % (sel, n))
    if need_indexer and sel == 0:
        print("FAIL no position ran an indexer selection: the checks do not cover it")
        fail += 1
    return 1 if fail else 0


# ---------------------------------------------------------------------------
# kimi-linear: llama.cpp's Kimi-Linear, the independent check of the KDA math
# ---------------------------------------------------------------------------

class KimiLinear:
    """As llama.cpp's kimi-linear graph computes it: one residual stream;
    KDA layers (head_count_kv 0) with the original gate
    g = -exp(A_log) softplus(f_b(f_a(h)) + dt_bias) and q/k L2 norms at the
    model's rms eps; MLA layers without q LoRA and without RoPE (k_pe and
    q_pe enter the score as they are), absorbed, scale 1/sqrt(key_length_mla),
    full causal attention; dense lead layers, sigmoid MoE (always
    normalized) + shared expert."""

    def __init__(self, m):
        self.m = m
        k = m.kv
        self.L = k("{arch}.block_count")
        self.H = k("{arch}.attention.head_count")
        hkv = k("{arch}.attention.head_count_kv")
        hkv = [int(x) for x in hkv] if not isinstance(hkv, int) else [hkv] * self.L
        self.kda = [x == 0 for x in hkv[:self.L]]
        self.eps = k("{arch}.attention.layer_norm_rms_epsilon")
        self.K = k("{arch}.kda.head_dim")
        self.conv = k("{arch}.ssm.conv_kernel")
        lb = k("{arch}.kda.gate_lower_bound", None, False)
        self.lower_bound = lb
        self.kv_lora = k("{arch}.attention.kv_lora_rank")
        self.kmla = k("{arch}.attention.key_length_mla")
        self.vmla = k("{arch}.attention.value_length_mla")
        self.n_rot = k("{arch}.rope.dimension_count")
        self.nope = self.kmla - self.n_rot
        self.n_dense = k("{arch}.leading_dense_block_count", 0, False)
        self.n_used = k("{arch}.expert_used_count")
        self.scale = k("{arch}.expert_weights_scale", 1.0, False)
        self.kda_mode = "chunked"
        self.chunk = 64

    def new_state(self):
        Di = self.H * self.K
        st = {"pos": 0, "layers": []}
        for il in range(self.L):
            if self.kda[il]:
                st["layers"].append({"conv": np.zeros((3, self.conv - 1, Di)),
                                     "S": np.zeros((self.H, self.K, self.K))})
            else:
                st["layers"].append({"ckv": np.zeros((0, self.kv_lora)), "kpe": np.zeros((0, self.n_rot))})
        return st

    def mla_layer(self, p, cur, ls, pos0):
        m, T = self.m, cur.shape[0]
        q = (cur @ m.w(p + "attn_q.weight").T).reshape(T, self.H, self.kmla)
        kvp = cur @ m.w(p + "attn_kv_a_mqa.weight").T
        ls["ckv"] = np.concatenate([ls["ckv"], rms_norm(kvp[:, :self.kv_lora], m.w(p + "attn_kv_a_norm.weight"), self.eps)])
        ls["kpe"] = np.concatenate([ls["kpe"], kvp[:, self.kv_lora:]])
        N = pos0 + T
        q_abs = np.einsum("hrc,thc->thr", m.w(p + "attn_k_b.weight"), q[..., :self.nope])
        s = (np.einsum("thr,sr->hts", q_abs, ls["ckv"]) +
             np.einsum("thd,sd->hts", q[..., self.nope:], ls["kpe"])) / np.sqrt(self.kmla)
        causal = np.arange(N)[None, :] <= (pos0 + np.arange(T))[:, None]
        s = np.where(causal[None], s, -np.inf)
        s = np.exp(s - s.max(axis=2, keepdims=True))
        lat = np.einsum("hts,sr->thr", s / s.sum(axis=2, keepdims=True), ls["ckv"])
        o = np.einsum("hvr,thr->thv", m.w(p + "attn_v_b.weight"), lat).reshape(T, self.H * self.vmla)
        return o @ m.w(p + "attn_output.weight").T

    def forward(self, tokens, state=None):
        m = self.m
        st = state if state is not None else self.new_state()
        T, pos0 = len(tokens), st["pos"]
        x = m.w("token_embd.weight")[np.asarray(tokens)]
        for il in range(self.L):
            p = "blk.%d." % il
            h = rms_norm(x, m.w(p + "attn_norm.weight"), self.eps)
            if self.kda[il]:
                # llama.cpp's kimi-linear normalizes q and k at the rms eps
                y = kda_layer(m, p, h, st["layers"][il], self.H, self.K, self.conv, self.lower_bound,
                              self.eps, self.eps, self.kda_mode, self.chunk)
            else:
                y = self.mla_layer(p, h, st["layers"][il], pos0)
            x = x + y
            h = rms_norm(x, m.w(p + "ffn_norm.weight"), self.eps)
            if il < self.n_dense:
                x = x + dense_ffn(m, p, h)
            else:
                x = x + moe_ffn(m, p, h, self.n_used, self.scale, True)
        st["pos"] = pos0 + T
        h = rms_norm(x, m.w("output_norm.weight"), self.eps)
        return h @ m.w("output.weight").T, np.full((T, self.L, 2), np.nan)

    def self_test(self, tokens=None):
        return kda_self_test(self, tokens, need_indexer=False)


ARCHS = {"glm-dsa": GlmDsa, "glm5-next": Glm5Next, "kimi-linear": KimiLinear}


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
    ap.add_argument("--mtp", metavar="OUT.f32",
                    help="glm-dsa, glm5-next: the NextN block's draft logits instead (GlmDsa.mtp, Glm5Next.mtp)")
    ap.add_argument("--mtp-drafts", metavar="D1,D2,...",
                    help="with --mtp: the draft chain after the tokens (the last one = cur)")
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
    if a.mtp:
        if m.arch not in ("glm-dsa", "glm5-next") or not a.tokens_file:
            ap.error("--mtp needs a glm-dsa or glm5-next model and --tokens-file")
        drafts = [int(t) for t in a.mtp_drafts.split(",") if t] if a.mtp_drafts else []
        ref.mtp(read_ids(a.tokens_file), drafts).astype(np.float32).tofile(a.mtp)
        return 0
    if not a.tokens_file or not a.out:
        ap.error("--tokens-file and -o are needed")
    logits, diag = ref.forward(read_ids(a.tokens_file))
    logits.astype(np.float32).tofile(a.out)
    if a.indexer:
        diag.astype(np.float32).tofile(a.indexer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
