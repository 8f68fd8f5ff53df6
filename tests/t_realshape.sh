#!/usr/bin/env bash
# Fidelity at the real DeepSeek V4 Flash per-layer shape (docs/NUMERICS.md).
#
# The golden models (tests/t_oracle.sh) are tiny; this check synthesizes, at
# test time, a model with the real attention and expert dimensions (n_embd
# 4096, 64 heads x 512, q/o LoRA 1024, 8 output groups, experts 2048 wide,
# indexer 64 x 128) and the q2 recipe (IQ2_XXS / Q2_K experts, Q8_0
# attention), cut down where only the count matters: 2 layers, 4 routed
# experts (2 used).  Layer 0 has compress ratio 4 (overlapping compressor +
# indexer) and hash routing, layer 1 ratio 128 and the learned router; the
# indexer keeps 16 compressed rows (the real 512 would select everything at
# this length), and the 132 tokens pass the 128-token window and make one
# ratio-128 row.  About 420 MB on disk; the reference needs ~3 GB (float32)
# and ~5 GB (float64) of memory.
#
#  (1) QAT off: free-running logits vs the reference (float32; per position
#      rel. L2 <= 5e-5, top-1 agreement >= 99 %) and the teacher-forced
#      per-sublayer check (median <= 2e-5), as t_oracle does on tiny models.
#  (2) QAT on: per sublayer, the engine's distance to the float64 reference
#      (relative L2 of the hyper-connection state over all positions) must
#      not exceed QAT_FACTOR x the distance between the reference's own
#      float32 and float64 runs -- "no worse than another correct float32
#      engine".  With QAT on, one-ulp differences flip Q8/FP8/FP4 roundings
#      and amplify ~10^4 (docs/NUMERICS.md), so a tight tolerance cannot
#      hold; the factor is justified there (measured ratios up to ~1).
#  (3) QAT on: DS4_KERNELS=scalar|avx2|avx512|avx512-packed|amx (those this CPU
#      runs) give bit-identical logits, all 132 positions (scalar: ~20 s of
#      CPU); and a prefix run (24 tokens) gives the first 24 rows bit for
#      bit.
#
# DS4_REALSHAPE=0 skips the whole check (e.g. a machine without ~6 GB free).
set -u
cd "$(dirname "$0")/.."
if [ "${DS4_REALSHAPE:-1}" = 0 ]; then echo "t_realshape: skipped (DS4_REALSHAPE=0)"; exit 0; fi
S="${DS4_SHARED:-../shared}"
PY=/usr/bin/python3
REF=(tests/oracle/teacher.py "$S/oracle")   # ds4_ref.py with the RoPE pow fix (see that file)
QAT_FACTOR=3
NTOK=132
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail+1)); }

./ds4-synth --preset medium --recipe q2 --vocab "$S/vocab/mini-vocab.gguf" --layers 2 \
    --set attention.compress_ratios=4,128 --set hash_layer_count=1 \
    --set expert_count=4 --set expert_used_count=2 --set attention.indexer.top_k=16 \
    --threads 2 -o "$T/m.gguf" > "$T/synth.log" 2>&1 || { cat "$T/synth.log"; echo "FAIL synth"; exit 1; }
# the first NTOK ids of a golden sequence (test vocabulary, 4096 tokens)
tr -s ' ,\n' '\n' < "$S/golden/sequences/seq_300.ids.txt" | grep . | head -n $NTOK | paste -sd, > "$T/ids.txt"
head -c 1 "$T/ids.txt" > /dev/null || { echo "FAIL no token ids"; exit 1; }

eng() {   # eng OUT-PREFIX [ds4 flags]: logits OUT.f32, hidden OUT.h
    local o=$1; shift
    ./ds4 -q -m "$T/m.gguf" --tokens-file "$T/ids.txt" -n 0 --dump-logits "$o.f32" --dump-hidden "$o.h" "$@" \
        > "$T/run.log" 2>&1 || { cat "$T/run.log"; return 1; }
}
ref() {   # ref LOG [ds4_ref.py flags]
    local log=$1; shift
    $PY "${REF[@]}" "$T/m.gguf" --tokens-file "$T/ids.txt" "$@" > "$log" 2>&1
}

# The four reference runs are single-threaded numpy and take most of this
# test (1-3 minutes each here): after the two engine runs they go two at a
# time (longest first), and the checks read their results afterwards.
eng_n=0; eng "$T/n" --no-qat || eng_n=1
eng_q=0; eng "$T/q" || eng_q=1
refrc() { ref "$@"; echo $? > "$1.rc"; }   # refrc LOG FLAGS: exit status in LOG.rc
{
    [ $eng_n = 0 ] && refrc "$T/tn.log" --no-qat --dtype float32 --teacher "$T/n.h" --compare "$T/n.f32" --teacher-max-median 2e-5
    [ $eng_n = 0 ] && refrc "$T/rn.log" --no-qat --dtype float32 --out "$T/rn.f32"
} &
{
    [ $eng_q = 0 ] && refrc "$T/r64.log" --emulate-ds4 --dtype float64 --dump-hidden "$T/r64.h" --out "$T/r64.f32"
    [ $eng_q = 0 ] && refrc "$T/r32.log" --emulate-ds4 --dtype float32 --dump-hidden "$T/r32.h" --out "$T/r32.f32"
} &
wait
rc_of() { cat "$1.rc" 2>/dev/null || echo 1; }

# ---- (1) QAT off --------------------------------------------------------
if [ $eng_n = 0 ]; then
    if [ "$(rc_of "$T/rn.log")" = 0 ]; then
        if $PY - "$T/n.f32" "$T/rn.f32" > "$T/cmp.log" 2>&1 <<'PYEOF'
import sys, numpy as np
e = np.fromfile(sys.argv[1], dtype=np.float32).astype(np.float64)
r = np.fromfile(sys.argv[2], dtype=np.float32).astype(np.float64)
V = 4096
e, r = e.reshape(-1, V), r.reshape(-1, V)
assert e.shape == r.shape, (e.shape, r.shape)
rel = np.linalg.norm(e - r, axis=1) / np.linalg.norm(r, axis=1)
top1 = np.mean(np.argmax(e, axis=1) == np.argmax(r, axis=1))
print("positions %d, rel L2 max %.3g median %.3g, top-1 %.1f %%" % (len(rel), rel.max(), np.median(rel), 100 * top1))
sys.exit(0 if rel.max() <= 5e-5 and top1 >= 0.99 else 1)
PYEOF
        then ok "(1) no-qat free-running vs reference: $(cat "$T/cmp.log")"
        else bad "(1) no-qat free-running vs reference"; sed 's/^/    /' "$T/cmp.log"; fi
    else bad "(1) reference run (no-qat)"; tail -5 "$T/rn.log"; fi
    if [ "$(rc_of "$T/tn.log")" = 0 ]; then
        ok "(1) no-qat teacher-forced ($(grep -o 'worst per-sublayer median relative error: [0-9.e+-]*' "$T/tn.log"))"
    else bad "(1) no-qat teacher-forced"; sed 's/^/    /' "$T/tn.log"; fi
else
    bad "(1) engine run (no-qat)"
fi

# ---- (2) QAT on ---------------------------------------------------------
if [ $eng_q = 0 ]; then
    [ "$(rc_of "$T/r64.log")" = 0 ] || { bad "(2) reference run (float64)"; tail -5 "$T/r64.log"; }
    [ "$(rc_of "$T/r32.log")" = 0 ] || { bad "(2) reference run (float32)"; tail -5 "$T/r32.log"; }
    if [ -s "$T/r64.h" ] && [ -s "$T/r32.h" ]; then
        if $PY - "$T/q.h" "$T/r32.h" "$T/r64.h" "$QAT_FACTOR" > "$T/cmp.log" 2>&1 <<'PYEOF'
import sys, numpy as np
eng, r32, r64 = (np.fromfile(f, dtype=np.float32).astype(np.float64) for f in sys.argv[1:4])
factor = float(sys.argv[4])
L, HC, D = 2, 4, 4096
eng, r32, r64 = (a.reshape(-1, L, 2, HC, D) for a in (eng, r32, r64))
assert eng.shape == r32.shape == r64.shape
worst, out = 0.0, []
for il in range(L):
    for s, name in ((0, "attn"), (1, "ffn")):
        ref = r64[:, il, s]
        d_eng = np.linalg.norm(eng[:, il, s] - ref) / np.linalg.norm(ref)
        d_32 = np.linalg.norm(r32[:, il, s] - ref) / np.linalg.norm(ref)
        ratio = d_eng / max(d_32, 1e-30)
        worst = max(worst, ratio)
        out.append("L%d %s: engine %.2e, ref f32 %.2e (x%.2f)" % (il, name, d_eng, d_32, ratio))
print("; ".join(out))
print("worst engine / ref-f32 distance ratio %.2f (limit %g)" % (worst, factor))
sys.exit(0 if worst <= factor else 1)
PYEOF
        then ok "(2) QAT on, distance to float64 within ${QAT_FACTOR}x the reference's float32 distance"
             sed 's/^/    /' "$T/cmp.log"
        else bad "(2) QAT on: engine farther from float64 than ${QAT_FACTOR}x the reference's float32 run"
             sed 's/^/    /' "$T/cmp.log"; fi
    fi
else
    bad "(2) engine run (QAT on)"
fi

# ---- (3) the same bits on every kernel table -----------------------------
if [ -s "$T/q.f32" ]; then
    for kt in scalar avx2 avx512 avx512-packed amx; do
        if ! ./build/tests/test_kernels --has-table "$kt" > /dev/null 2>&1; then
            echo "info: table $kt not available on this CPU"; continue
        fi
        DS4_KERNELS=$kt eng "$T/k" && cmp -s "$T/q.f32" "$T/k.f32" \
            && ok "(3) DS4_KERNELS=$kt: logits identical to the default table's" \
            || bad "(3) DS4_KERNELS=$kt: logits differ from the default table's"
    done
    cut -d, -f1-24 "$T/ids.txt" > "$T/ids24.txt"
    if ./ds4 -q -m "$T/m.gguf" --tokens-file "$T/ids24.txt" -n 0 --dump-logits "$T/p.f32" > "$T/run.log" 2>&1; then
        head -c "$(stat -c %s "$T/p.f32")" "$T/q.f32" | cmp -s - "$T/p.f32" \
            && ok "(3) 24-token prefix run == first 24 rows (bitwise)" \
            || bad "(3) 24-token prefix run differs from the first 24 rows"
    else bad "(3) prefix run"; cat "$T/run.log"; fi
fi

echo "t_realshape: $fail failure(s)"
[ "$fail" -eq 0 ]
