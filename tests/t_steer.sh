#!/usr/bin/env bash
# Steering (docs/quality.md "Steering"): ds4 --steer / ds4-steer build on a tiny model.
#  - scale 0 is bit-identical to no steering (logits and hidden states);
#  - a nonzero scale shifts the state after the FFN of each steered layer by
#    exactly S*v (float32) on every HC copy, before the next sublayer, and
#    leaves everything before it untouched;
#  - ds4-steer build reproduces the direction computed by hand from
#    ds4 --dump-hidden;
#  - bad directions and flags are refused with clear messages.
set -u
cd "$(dirname "$0")/.."
BD="${DS4_BIN_DIR:-.}"   # where the binaries are (build/debug/bin in the sanitizer pass)
S="${DS4_SHARED:-../shared}"
G="$S/golden"
PY=/usr/bin/python3
M="$G/models/tiny-a-f16.gguf"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail+1)); }

printf 'I love this, it is wonderful and bright\nWhat a great and happy day\nThe best gift ever\n' > "$T/pos.txt"
printf 'I hate this, it is awful and dark\n\nWhat a terrible sad day\n' > "$T/neg.txt"
"$BD"/ds4-steer build -m "$M" --positive "$T/pos.txt" --negative "$T/neg.txt" --layer 2 -o "$T/dir" > "$T/b.log" 2>&1 \
    && ok "ds4-steer build: $(cat "$T/b.log")" || { bad "ds4-steer build"; cat "$T/b.log"; }
V="$T/dir/direction.f32"

# --- the direction by hand --------------------------------------------------
$PY - "$M" "$T" <<'PYEOF' > "$T/c.log" 2>&1 && ok "ds4-steer build = direction from --dump-hidden by hand ($(cat "$T/c.log"))" || { bad "build vs hand"; cat "$T/c.log"; }
import json, os, subprocess, sys
import numpy as np
m, T = sys.argv[1], sys.argv[2]
side = json.load(open(T + "/dir/direction.json"))
D, L = side["n_embd"], 2
assert side["layer_first"] == side["layer_last"] == L and side["model"] == "ds4-tiny-a-f16"
def mean_of(path):
    acc = []
    for line in open(path).read().split("\n"):
        if not line:
            continue
        ids = [0] + json.loads(subprocess.run([os.path.join(os.environ.get("DS4_BIN_DIR", "."), "ds4"), "-m", m, "--tokenize", line], capture_output=True, check=True).stdout)
        subprocess.run([os.path.join(os.environ.get("DS4_BIN_DIR", "."), "ds4"), "-q", "-m", m, "--tokens", ",".join(map(str, ids)), "-n", "0",
                        "--dump-hidden", T + "/h.f32"], check=True, capture_output=True)
        h = np.fromfile(T + "/h.f32", "<f4").astype(np.float64)
        h = h.reshape(len(ids), 6, 2, -1, D)
        acc.append(h[1:, L, 1].mean(axis=(0, 1)))      # positions after BOS, HC copies
    return np.mean(acc, axis=0), len(acc)
mp, n_p = mean_of(T + "/pos.txt"); mn, n_n = mean_of(T + "/neg.txt")
d = mp - mn
want = d / np.linalg.norm(d)
got = np.fromfile(T + "/dir/direction.f32", "<f4").astype(np.float64)
assert got.shape == (D,) and side["n_positive"] == n_p == 3 and side["n_negative"] == n_n == 2
err = np.abs(got - want).max()
assert abs(np.linalg.norm(got) - 1) < 1e-6
print("max abs diff %.1e, |d| %.4g vs sidecar %.4g" % (err, np.linalg.norm(d), side["difference_norm"]))
sys.exit(0 if err <= 1e-6 and abs(np.linalg.norm(d) - side["difference_norm"]) <= 1e-6 * np.linalg.norm(d) else 1)
PYEOF

# --- scale 0: bit-identical ----------------------------------------------------
TOK="$G/sequences/seq_040.ids.txt"
dump() {  # dump NAME [flags]
    local n=$1; shift
    "$BD"/ds4 -q -m "$M" --tokens-file "$TOK" -n 0 --dump-logits "$T/$n.l" --dump-hidden "$T/$n.h" "$@" > "$T/run.log" 2>&1 \
        || { cat "$T/run.log"; return 1; }
}
dump base || bad "base run"
dump zero --steer "$V" --steer-scale 0 --steer-layers 0:5 || bad "scale 0 run"
cmp -s "$T/base.l" "$T/zero.l" && cmp -s "$T/base.h" "$T/zero.h" \
    && ok "--steer-scale 0: logits and hidden states bit-identical to no steering" || bad "--steer-scale 0 differs"
dump def --steer "$V" --steer-scale 4 || bad "default layers run"

# --- exact shift ---------------------------------------------------------------
dump l0 --steer "$V" --steer-scale 2.5 --steer-layers 0:0
dump l5 --steer "$V" --steer-scale 2.5 --steer-layers 5
dump r1 --steer "$V" --steer-scale 2.5 --steer-layers 1:1
dump r12 --steer "$V" --steer-scale 2.5 --steer-layers 1:2
dump r13 --steer "$V" --steer-scale 2.5 --steer-layers 1:3
dump neg --steer "$V" --steer-scale -2.5 --steer-layers 3:3
$PY - "$T" "$V" > "$T/c.log" 2>&1 <<'PYEOF' && ok "steering: $(cat "$T/c.log")" || { bad "steering shift"; cat "$T/c.log"; }
import sys
import numpy as np
T, V = sys.argv[1], sys.argv[2]
v = np.fromfile(V, "<f4")
D = v.size
n_pos = np.fromfile(T + "/base.l", "<f4").size // 4096          # tiny models: n_vocab 4096, 6 layers
n_hc = np.fromfile(T + "/base.h", "<f4").size // (n_pos * 6 * 2 * D)
def h(n): return np.fromfile(T + "/" + n + ".h", "<f4").reshape(n_pos, 6, 2, n_hc, D)
base = h("base")
def check(prev, cur, L, s):
    a, b = h(prev), h(cur)
    sv = (np.float32(s) * v).astype(np.float32)
    # everything before layer L's FFN output is untouched
    assert np.array_equal(a[:, :L], b[:, :L]), "layers before %d changed" % L
    assert np.array_equal(a[:, L, 0], b[:, L, 0]), "attention of layer %d changed" % L
    # after the FFN: exactly + S*v on every HC copy, every position (float32)
    want = (a[:, L, 1] + sv[None, None, :]).astype(np.float32)
    assert np.array_equal(b[:, L, 1], want), "layer %d: shift is not S*v (max err %g)" % (L, np.abs(b[:, L, 1] - want).max())
check("base", "l0", 0, 2.5)
check("base", "l5", 5, 2.5)
check("base", "r1", 1, 2.5)
check("r1", "r12", 2, 2.5)   # 1:2 = 1:1 up to layer 2's FFN, then + S*v
check("r12", "r13", 3, 2.5)
check("base", "neg", 3, -2.5)
check("base", "def", 2, 4)   # the sidecar's layer by default
assert not np.array_equal(h("r13")[:, 4], base[:, 4]), "steering had no effect downstream"
l13 = np.fromfile(T + "/r13.l", "<f4"); l0 = np.fromfile(T + "/base.l", "<f4")
print("exact S*v after the FFN of layers 0, 1, 2, 3, 5 (single and ranges, both signs); logits move by %.3g max"
      % np.abs(l13 - l0).max())
PYEOF

# generation with steering runs and differs from none at a large scale
"$BD"/ds4 -q -m "$M" --tokens 0,5,6,7 --temp 0 -n 8 > "$T/g0.txt" 2>&1
"$BD"/ds4 -q -m "$M" --tokens 0,5,6,7 --temp 0 -n 8 --steer "$V" --steer-scale 200 --steer-layers 0:5 > "$T/g1.txt" 2>&1
cmp -s "$T/g0.txt" "$T/g1.txt" && bad "a large steering scale changed nothing" || ok "generation under a large steering scale changes the output"

# --- bad input ----------------------------------------------------------------
expect_fail() {  # expect_fail LABEL FRAGMENT cmd...
    local label=$1 frag=$2; shift 2
    if "$@" > "$T/e.txt" 2>&1; then bad "$label: accepted"
    elif grep -qF -- "$frag" "$T/e.txt"; then ok "$label"
    else bad "$label: $(cat "$T/e.txt")"; fi
}
expect_fail "--steer without --steer-scale" "--steer needs --steer-scale" "$BD"/ds4 -m "$M" --tokens 1 -n 0 --steer "$V"
expect_fail "--steer-scale without --steer" "need --steer FILE" "$BD"/ds4 -m "$M" --tokens 1 -n 0 --steer-scale 1
expect_fail "--steer-layers out of range" "--steer-layers: bad value '4:9'" "$BD"/ds4 -q -m "$M" --tokens 1 -n 0 --steer "$V" --steer-scale 1 --steer-layers 4:9
expect_fail "--steer-layers reversed" "--steer-layers: bad value '3:1'" "$BD"/ds4 -q -m "$M" --tokens 1 -n 0 --steer "$V" --steer-scale 1 --steer-layers 3:1
head -c 100 "$V" > "$T/short.f32"; cp "$T/dir/direction.json" "$T/short.json"
expect_fail "truncated direction" "100 bytes, expected 1024" "$BD"/ds4 -q -m "$M" --tokens 1 -n 0 --steer "$T/short.f32" --steer-scale 1
cp "$V" "$T/alone.f32"
expect_fail "direction without its sidecar" "alone.json" "$BD"/ds4 -q -m "$M" --tokens 1 -n 0 --steer "$T/alone.f32" --steer-scale 1
expect_fail "--steer with --kv-disk-dir" "cannot be combined with --kv-disk-dir" "$BD"/ds4 -m "$M" --tokens 1 -n 0 --steer "$V" --steer-scale 1 --kv-disk-dir "$T/kv"
expect_fail "ds4-steer: layer out of range" "--layer 9: the model has 6 layers" "$BD"/ds4-steer build -m "$M" --positive "$T/pos.txt" --negative "$T/neg.txt" --layer 9 -o "$T/d2"
expect_fail "ds4-steer: identical sets" "same mean state" "$BD"/ds4-steer build -m "$M" --positive "$T/pos.txt" --negative "$T/pos.txt" --layer 1 -o "$T/d3"
[ ! -e "$T/d3/direction.f32" ] && ok "ds4-steer: no files left after a failure" || bad "ds4-steer left a file"
expect_fail "ds4-steer: missing arguments" "build needs" "$BD"/ds4-steer build -m "$M" --layer 1

echo "t_steer: $fail failure(s)"
[ "$fail" -eq 0 ]
