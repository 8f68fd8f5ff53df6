#!/usr/bin/env python3
"""glm_golden.py -- frozen golden logits of the GLM family's tiny test files
(tests/golden/glm/*.golden, checked by tests/t_glm_golden.sh).

  glm_golden.py make  NAME FILE.gguf IDS.txt > tests/golden/glm/NAME.golden
  glm_golden.py check GOLDEN FILE.gguf LOGITS.f32 [--tol T] [--ref-tol R]

Why a frozen copy beside the live checks: t_glm_engine.sh and
t_g5n_engine.sh compare ds4 with tests/oracle/glm_ref.py run at test time,
and both read the file tests/glm_gguf.py draws at test time.  A change that
moved the generator, the reference and the engine together (a shared
misreading of a key, a tensor drawn in another order) would pass them.  The
golden file pins all three to the day it was made: the GGUF's SHA-256 (the
generator), and per position the float64 reference's 16 largest logits
with their ids, the row's L2 norm and sum.

make: IDS.txt holds the token ids; the values are the float64 reference's
(tests/oracle/glm_ref.py's forward, imported), before any float32 rounding.

check: LOGITS.f32 is float32 [n][V] (ds4 --dump-logits, or glm_ref.py -o
for the reference itself).  Per position: the same top-1 id; each of the
16 golden ids within T * ||golden row||_2 of its golden value (default
1e-5, the live checks' relative L2 tolerance spread over one entry: a
wrong gate or a row selected otherwise moves entries by 1e-3 of the norm
and more); the row's L2 norm within T relative.  With --ref-tol R (the
reference's own float32 output) the bound is R instead.  Exit 0 when every
position passes; each failure is printed.

Owns: the golden file format (a text file, one position per line after the
header).  Must not: depend on anything but numpy.
"""
import hashlib
import os
import sys

import numpy as np

TOPN = 16


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for blk in iter(lambda: f.read(1 << 20), b""):
            h.update(blk)
    return h.hexdigest()


def make(name, gguf, ids_path):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "oracle"))
    import glm_ref
    ids = glm_ref.read_ids(ids_path)
    m = glm_ref.Model(gguf)
    ref, _diag = glm_ref.ARCHS[m.arch](m).forward(ids)
    ref = np.asarray(ref, dtype=np.float64)
    n, V = ref.shape
    out = ["# ds4 golden logits (tests/glm_golden.py): %s" % name,
           "sha256 %s" % sha256(gguf),
           "vocab %d" % V,
           "tokens %s" % " ".join(str(t) for t in ids)]
    for p in range(n):
        row = ref[p]
        top = np.argsort(-row, kind="stable")[:TOPN]
        out.append("pos %d l2 %.17g sum %.17g top %s" % (
            p, float(np.linalg.norm(row)), float(row.sum()),
            " ".join("%d:%.17g" % (int(i), float(row[i])) for i in top)))
    print("\n".join(out))


def load(path):
    g = {"pos": []}
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        key, _, rest = line.rstrip("\n").partition(" ")
        if key == "sha256":
            g["sha256"] = rest.strip()
        elif key == "vocab":
            g["vocab"] = int(rest)
        elif key == "tokens":
            g["tokens"] = [int(x) for x in rest.split()]
        elif key == "pos":
            f = rest.split()
            top = [(int(a), float(b)) for a, b in (x.split(":") for x in f[f.index("top") + 1:])]
            g["pos"].append((int(f[0]), float(f[2]), float(f[4]), top))
    return g


def check(golden, gguf, logits, tol, ref_tol):
    g = load(golden)
    bad = 0
    got = sha256(gguf)
    if got != g["sha256"]:
        print("FAIL %s: the generated file's SHA-256 %s is not the golden one %s -- tests/glm_gguf.py "
              "draws another file now; if that is intended, remake the golden file (tests/t_glm_golden.sh "
              "--remake)" % (golden, got, g["sha256"]))
        return 1
    V, n = g["vocab"], len(g["pos"])
    x = np.fromfile(logits, dtype=np.float32)
    if x.size != n * V:
        print("FAIL %s: %d values, want %d positions x %d" % (logits, x.size, n, V))
        return 1
    x = x.reshape(n, V).astype(np.float64)
    bound = ref_tol if ref_tol is not None else tol
    worst = 0.0
    for p, l2, _s, top in g["pos"]:
        row = x[p]
        if int(np.argmax(row)) != top[0][0]:
            print("FAIL position %d: top-1 %d, golden %d" % (p, int(np.argmax(row)), top[0][0]))
            bad += 1
            continue
        d = max(abs(row[i] - v) for i, v in top) / l2
        dn = abs(float(np.linalg.norm(row)) - l2) / l2
        worst = max(worst, d, dn)
        if d > bound or dn > bound:
            print("FAIL position %d: top-%d entries off by %.3g of the row norm, norm by %.3g (bound %g)"
                  % (p, TOPN, d, dn, bound))
            bad += 1
    print("%d positions, worst %.3g of the row norm (bound %g)" % (n, worst, bound))
    return 1 if bad else 0


def main():
    a = sys.argv[1:]
    if len(a) == 4 and a[0] == "make":
        make(*a[1:])
        return 0
    if len(a) >= 4 and a[0] == "check":
        tol, ref_tol = 1e-5, None
        rest = a[4:]
        while rest:
            if rest[0] == "--tol" and len(rest) > 1:
                tol = float(rest[1])
            elif rest[0] == "--ref-tol" and len(rest) > 1:
                ref_tol = float(rest[1])
            else:
                sys.exit(__doc__)
            rest = rest[2:]
        return check(a[1], a[2], a[3], tol, ref_tol)
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main())
