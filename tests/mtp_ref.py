#!/usr/bin/env python3
"""mtp_ref.py MODEL IN.txt -- an independent float64 reference of the MTP
block (docs/MTP.md) for tests/test_mtp.c.

IN.txt: line 1 the prompt token ids; line 2 the token `cur` chosen after
it and the draft tokens d1.. the engine drew; then one line per draft
step with the engine's MTP logits of that step (whitespace-separated).

The main model's final HC states come from the shared oracle's prefill
(../shared/oracle/ds4_ref.py, imported, not copied); the MTP block is
written here from docs/MTP.md, reusing the oracle's layer pieces (HC
mixing, projections, RoPE, attention with sinks, the MoE FFN) on the
mtp.0.* tensors: the block's layer is run as layer index n_layer with
compress ratio 0, so the oracle's "blk.<n_layer>." names are mapped to
"mtp.0.".  Checks, for every step: the engine's draft is the argmax (within the
tolerance) and
max |logit difference| <= 2e-3 * (1 + max |logit|).  Exit 0 = agree.
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.environ.get("DS4_SHARED", os.path.join(HERE, "..", "..", "shared"))
sys.path.insert(0, os.path.join(SHARED, "oracle"))
import ds4_ref  # noqa: E402


class MTPRef(ds4_ref.DS4Ref):
    def __init__(self, path):
        super().__init__(path, dtype=np.float64, emulate=True, qat=True)
        c = self.c
        self.L = c.n_layer
        pre = "blk.%d." % self.L
        W = self.W
        get, typ, has, exp = W.get, W.type, W.has, W.expert

        def name(n):
            return "mtp.0." + n[len(pre):] if n.startswith(pre) else n
        W.get = lambda n: get(name(n))
        W.type = lambda n: typ(name(n))
        W.has = lambda n: has(name(n))
        W.expert = lambda n, e: exp(name(n), e)
        # the block's layer: window only (dense RoPE), the model's clamp
        c.compress_ratios = list(c.compress_ratios) + [0]
        c.swiglu_clamp = list(c.swiglu_clamp) + [c.swiglu_clamp[-1]]

    def mtp_input(self, tok, hprev):
        """Steps 1-3: [n_hc, D] block input from a token and the previous state."""
        c = self.c
        e = self.W.get("token_embd.weight")[tok]
        e = self.rms_norm(e[None, :], self.W.get("mtp.0.enorm.weight"))
        E = self.mm("mtp.0.e_proj.weight", e)[0]
        if hprev is None:
            Hh = np.zeros((c.n_hc, c.n_embd))
        else:
            Hh = self.mm("mtp.0.h_proj.weight", self.rms_norm(hprev, self.W.get("mtp.0.hnorm.weight")))
        return E[None, :] + Hh

    def kv_row(self, x, pos):
        b = "blk.%d." % self.L
        cur, _, _ = self.hc_pre(x[None], b + "hc_attn")
        xn = self.rms_norm(cur, self.W.get(b + "attn_norm.weight"))
        _, _, kv = self.qkv(self.L, xn, np.array([pos]))
        return kv[0]

    def step(self, rows, x, tok, pos):
        """Step 4-5: the whole block at `pos` over the window rows; returns
        (H_out [n_hc, D], logits)."""
        c, L = self.c, self.L
        b = "blk.%d." % L
        h = x[None]
        p = np.array([pos])
        cur, post, comb = self.hc_pre(h, b + "hc_attn")
        xn = self.rms_norm(cur, self.W.get(b + "attn_norm.weight"))
        _, q, kv = self.qkv(L, xn, p)
        rows.append(kv[0])
        keys = np.stack(rows[-c.n_swa:])
        heads = self.attend(L, q, keys, np.ones((1, keys.shape[0]), dtype=bool))
        h = self.hc_post(self.attn_output(L, heads, p), h, post, comb)
        h = self.ffn(L, h, [tok])
        flat = self.rms_norm(h.reshape(1, -1))
        pre = self.mm("mtp.0.hc_head_fn.weight", flat)
        w = 1.0 / (1.0 + np.exp(-(pre * self.W.get("mtp.0.hc_head_scale.weight")[0]
                                  + self.W.get("mtp.0.hc_head_base.weight")))) + c.hc_eps
        y = np.einsum("th,thd->td", w, h)
        y = self.rms_norm(y, self.W.get("mtp.0.norm.weight"))
        return h[0], self.mm("output.weight", y)[0]


def main():
    model, inp = sys.argv[1], sys.argv[2]
    lines = open(inp).read().split("\n")
    prompt = [int(x) for x in lines[0].split()]
    chain = [int(x) for x in lines[1].split()]
    got = [np.array([float(x) for x in ln.split()]) for ln in lines[2:] if ln.strip()]
    m = MTPRef(model)
    c = m.c
    hid = []
    m.prefill(prompt, hidden_out=hid)
    H = [h for kind, il, h in hid if kind == "ffn" and il == c.n_layer - 1][0]   # [T, n_hc, D]
    n = len(prompt)
    # the window rows of the prompt's positions: (token p, main state of p-1)
    rows = []
    for p in range(max(0, n - c.n_swa), n):
        rows.append(m.kv_row(m.mtp_input(prompt[p], H[p - 1] if p > 0 else None), p))
    hprev, tok, bad = H[n - 1], chain[0], 0
    for i, g in enumerate(got):
        hout, lg = m.step(rows, m.mtp_input(tok, hprev), tok, n + i)
        err = float(np.max(np.abs(lg - g)))
        tol = 2e-3 * (1.0 + float(np.max(np.abs(lg))))
        am = int(np.argmax(lg))
        # the engine's draft is the reference's argmax up to the tolerance (near-ties)
        ok = err <= tol and lg[chain[i + 1]] >= lg[am] - tol
        print("mtp_ref: step %d: max |diff| %.3g (tol %.3g), argmax %d, engine draft %d%s"
              % (i, err, tol, am, chain[i + 1], "" if ok else "  MISMATCH"))
        bad += not ok
        hprev, tok = hout, chain[i + 1]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
