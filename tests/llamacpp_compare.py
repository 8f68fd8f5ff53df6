#!/usr/bin/env python3
"""llamacpp_compare.py -- ds4 --no-qat logits against llama.cpp's exact mode
(tests/t_llamacpp.sh).

  llamacpp_compare.py DS4.f32 LLAMA.f32 INDEXER.f32 N_VOCAB N_LAYER
                      [--tol T] [--tie-eps E] [--min-selecting N]

DS4.f32 / LLAMA.f32: float32 [n_pos][n_vocab] (row p = logits after
tokens[0..p]).  INDEXER.f32: ds4 --dump-indexer, float32
[n_pos][n_layer][2] = the lowest indexer score kept and the highest
rejected at each layer (NaN where the layer selects nothing).

A position is an indexer tie when at some layer the kept and the rejected
scores are within E (relative, default 1e-4) of each other: the two
engines break ties differently (ds4: the lower row index wins; llama.cpp:
std::partial_sort, not stable) and their scores differ in the last bits,
so from the first such position on they may attend to different rows and
every later position may differ.  Before it, every position must agree to
T (relative L2 over the whole row, default 5e-5: the oracle's tight
--no-qat tolerance) with the same top-1.  The tie positions are printed,
and the agreement after the first one is reported (not checked).
--min-selecting N: at least N positions before the first tie must have
run an indexer selection (so the check covers the indexer, not only the
window), default 8.
"""
import argparse
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ds4")
    ap.add_argument("llama")
    ap.add_argument("indexer")
    ap.add_argument("n_vocab", type=int)
    ap.add_argument("n_layer", type=int)
    ap.add_argument("--tol", type=float, default=5e-5)
    ap.add_argument("--tie-eps", type=float, default=1e-4)
    ap.add_argument("--min-selecting", type=int, default=8)
    a = ap.parse_args()

    d = np.fromfile(a.ds4, dtype=np.float32).reshape(-1, a.n_vocab).astype(np.float64)
    l = np.fromfile(a.llama, dtype=np.float32).reshape(-1, a.n_vocab).astype(np.float64)
    ix = np.fromfile(a.indexer, dtype=np.float32).reshape(-1, a.n_layer, 2).astype(np.float64)
    n = d.shape[0]
    if l.shape[0] != n or ix.shape[0] != n:
        print(f"FAIL positions: ds4 {n}, llama.cpp {l.shape[0]}, indexer dump {ix.shape[0]}")
        return 1
    if not np.isfinite(l).all():
        print("FAIL llama.cpp produced non-finite logits")
        return 1

    kept, rej = ix[:, :, 0], ix[:, :, 1]
    selecting = ~np.isnan(kept)
    scale = np.maximum(np.maximum(np.abs(kept), np.abs(rej)), 1e-30)
    tie_layer = selecting & ((kept - rej) <= a.tie_eps * scale)
    ties = np.nonzero(tie_layer.any(axis=1))[0]
    first_tie = int(ties[0]) if len(ties) else n

    rel = np.linalg.norm(d - l, axis=1) / np.maximum(np.linalg.norm(d, axis=1), 1e-30)
    top_d, top_l = d.argmax(axis=1), l.argmax(axis=1)
    n_sel = int(selecting[:first_tie].any(axis=1).sum())

    print(f"positions {n}; indexer selections start at position "
          f"{int(np.nonzero(selecting.any(axis=1))[0][0]) if selecting.any() else -1}")
    if len(ties):
        shown = ", ".join(f"{p} (layer{'s' if tie_layer[p].sum() > 1 else ''} "
                          f"{','.join(str(x) for x in np.nonzero(tie_layer[p])[0])})" for p in ties[:12])
        print(f"indexer ties (kept and rejected within {a.tie_eps:g}): {len(ties)} positions, first: {shown}"
              f"{' ...' if len(ties) > 12 else ''}")
    else:
        print("indexer ties: none")
    bad = 0
    if first_tie > 0:
        worst = int(rel[:first_tie].argmax())
        agree = float((top_d[:first_tie] == top_l[:first_tie]).mean())
        print(f"before the first tie (positions 0..{first_tie - 1}, {n_sel} with an indexer selection): "
              f"max rel L2 {rel[:first_tie].max():.2e} at {worst}, median {np.median(rel[:first_tie]):.2e}, "
              f"top-1 agreement {agree * 100:.1f} %")
        over = np.nonzero(rel[:first_tie] > a.tol)[0]
        if len(over):
            print(f"FAIL {len(over)} positions before the first tie exceed rel L2 {a.tol:g}: "
                  f"{', '.join(f'{p} ({rel[p]:.2e})' for p in over[:10])}")
            bad = 1
        diff_top = np.nonzero(top_d[:first_tie] != top_l[:first_tie])[0]
        if len(diff_top):
            print(f"FAIL top-1 differs before the first tie at {', '.join(str(p) for p in diff_top[:10])}")
            bad = 1
    if n_sel < a.min_selecting:
        print(f"FAIL only {n_sel} positions with an indexer selection before the first tie "
              f"(need {a.min_selecting}): the check would not cover the indexer")
        bad = 1
    if first_tie < n:
        after = slice(first_tie, n)
        print(f"from the first tie on (reported, not checked): median rel L2 {np.median(rel[after]):.2e}, "
              f"max {rel[after].max():.2e}, top-1 agreement {float((top_d[after] == top_l[after]).mean()) * 100:.1f} %")
    if not bad:
        print("ok")
    return bad


if __name__ == "__main__":
    sys.exit(main())
