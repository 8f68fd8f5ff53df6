#!/usr/bin/env bash
# t_llamacpp.sh -- ds4 against llama.cpp, an engine nobody here wrote
# (its 2026-09 release: prebuilt CPU libraries from the npm package
# node-llama-cpp@3.22.1, driven by bench/llamacpp/llama_logits.c; see
# bench/llamacpp/setup.sh).  Skips, saying so, only when npm or its
# registry cannot be reached.
#
#  1. Logits cross-check, exact mode: a tiny F32 model (ds4-synth --recipe
#     f32, 16 indexer heads, the mini test vocabulary) and 1024 tokens;
#     llama.cpp with F32 weights, flash attention off, F32 KV, no repack;
#     ds4 --no-qat with --dump-indexer.  Every position before the first
#     indexer tie must agree to 5e-5 (relative L2, the oracle's tight
#     --no-qat tolerance) with the same top-1, and at least 512 of them
#     must have run an indexer selection; the ties are reported
#     (tests/llamacpp_compare.py says why they end the strict check).
#  2. Ties are found: the same check on the 4-head tiny model, where exact
#     ties (two rows scoring 0: every head's ReLU at 0) are common; they
#     must be detected and reported, the positions before the first one
#     must still agree.
#  3. Our files load in llama.cpp: ds4-synth's f16/q2/q4 and ds4-quantize's
#     f16/q2/q4/q2-q4/mxfp4 outputs (all carry
#     deepseek4.expert_gating_func); each runs 32 tokens to finite logits.
#     The golden files (written before the key existed) load with the key
#     supplied as an override, and ds4-gguf split adds it to its parts.
#  4. ds4 refuses a file whose deepseek4.expert_gating_func is not 4.
set -u
cd "$(dirname "$0")/.."
BD="${DS4_BIN_DIR:-.}"
S="${DS4_SHARED:-../shared}"
VOCAB="$S/vocab/mini-vocab.gguf"
T=$(mktemp -d "${TMPDIR:-/tmp}/ds4-llamacpp.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
for b in ds4 ds4-synth ds4-quantize ds4-gguf; do
    [ -x "$BD/$b" ] || { echo "t_llamacpp: $BD/$b not built" >&2; exit 1; }
done

. tests/lib/llamacpp.sh
llamacpp_setup t_llamacpp "$T/setup.log"
ok "llama.cpp from node-llama-cpp@3.22.1 ($GGML_BACKEND_DIR)"

# deterministic token ids of the mini vocabulary (4096 tokens)
ids() { /usr/bin/python3 -c "import random,sys; r=random.Random($2); print(' '.join(str(r.randrange(10, 4090)) for _ in range($1)))"; }
ids 1024 7 > "$T/ids1024.txt"
ids 32 3 > "$T/ids32.txt"

# cross MODEL IDS NAME [compare args...]: both engines on MODEL, compared
cross() {
    local m=$1 idf=$2 name=$3; shift 3
    if ! "$LL" logits -m "$m" --tokens-file "$idf" -o "$T/$name.ll" -t 2 > "$T/$name.lllog" 2>&1; then
        bad "$name: llama.cpp failed:"; tail -5 "$T/$name.lllog"; return 1
    fi
    if ! "$BD"/ds4 -m "$m" --tokens-file "$idf" --no-qat --dump-logits "$T/$name.ds" \
            --dump-indexer "$T/$name.ix" > "$T/$name.dslog" 2>&1; then
        bad "$name: ds4 failed:"; tail -5 "$T/$name.dslog"; return 1
    fi
    /usr/bin/python3 tests/llamacpp_compare.py "$T/$name.ds" "$T/$name.ll" "$T/$name.ix" 4096 6 "$@" \
        > "$T/$name.cmp" 2>&1
    local r=$?
    sed 's/^/     /' "$T/$name.cmp"
    return $r
}

# --- 1. exact mode, 16 indexer heads -----------------------------------
if "$BD"/ds4-synth --preset tiny --recipe f32 --vocab "$VOCAB" --set attention.indexer.head_count=16 \
        -o "$T/h16-f32.gguf" > /dev/null 2>&1; then
    if cross "$T/h16-f32.gguf" "$T/ids1024.txt" h16 --min-selecting 512; then
        ok "logits: ds4 --no-qat == llama.cpp exact mode before the first indexer tie (1024 tokens, 16 indexer heads)"
    else bad "logits: ds4 --no-qat vs llama.cpp (16 indexer heads)"; fi
else bad "ds4-synth --recipe f32"; fi

# --- 2. ties are detected and reported --------------------------------
if "$BD"/ds4-synth --preset tiny --recipe f32 --vocab "$VOCAB" -o "$T/h4-f32.gguf" > /dev/null 2>&1; then
    if cross "$T/h4-f32.gguf" "$T/ids1024.txt" h4 --min-selecting 0; then
        if grep -q '^indexer ties (kept and rejected within .*): [1-9][0-9]* positions, first: ' "$T/h4.cmp"; then
            ok "ties: found and reported on the 4-head model; the positions before the first agree"
        else bad "ties: none reported on the 4-head model (exact zero ties are expected there)"; fi
    else bad "logits: ds4 --no-qat vs llama.cpp before the first tie (4 indexer heads)"; fi
else bad "ds4-synth --recipe f32 (4 heads)"; fi

# --- 3. our files load in llama.cpp --------------------------------------
loads() {   # loads FILE NAME [llama_logits args]: 32 tokens, finite logits
    local f=$1 name=$2; shift 2
    if "$LL" logits -m "$f" --tokens-file "$T/ids32.txt" -o "$T/$name.l32" -t 2 "$@" > "$T/$name.l32log" 2>&1 &&
       /usr/bin/python3 -c "import numpy as np,sys; x=np.fromfile(sys.argv[1],dtype=np.float32); sys.exit(0 if x.size == 32*4096 and np.isfinite(x).all() else 1)" "$T/$name.l32"; then
        ok "llama.cpp loads and runs $name"
    else bad "llama.cpp on $name:"; tail -5 "$T/$name.l32log"; fi
}
for r in f16 q2 q4; do
    if "$BD"/ds4-synth --preset tiny --recipe $r --vocab "$VOCAB" -o "$T/synth-$r.gguf" > /dev/null 2>&1; then
        loads "$T/synth-$r.gguf" "ds4-synth --recipe $r"
    else bad "ds4-synth --recipe $r"; fi
done
CK="$T/ck"
if "$BD"/ds4-synth --preset tiny --seed 7 --vocab "$VOCAB" --hf-out "$CK" > /dev/null 2>&1; then
    for r in f16 q2 q4 q2-q4 mxfp4; do
        extra=""; [ $r = q2-q4 ] && extra="--q4-last 2"
        # shellcheck disable=SC2086
        if "$BD"/ds4-quantize --recipe $r $extra "$CK" -o "$T/quant-$r.gguf" > /dev/null 2>&1; then
            loads "$T/quant-$r.gguf" "ds4-quantize --recipe $r"
        else bad "ds4-quantize --recipe $r"; fi
    done
else bad "ds4-synth --hf-out"; fi
for m in "$S"/golden/models/tiny-a-*.gguf; do
    loads "$m" "golden $(basename "$m") (key supplied by --gating-override)" --gating-override
done
if "$BD"/ds4-gguf split --dist experts --ranks 2 -m "$S/golden/models/tiny-a-q2.gguf" -o "$T/part" > /dev/null 2>&1 &&
   "$BD"/ds4 -m "$T/part-rank0.gguf" --inspect 2>/dev/null | grep -q 'deepseek4.expert_gating_func  *4$'; then
    ok "ds4-gguf split adds deepseek4.expert_gating_func to files that lack it"
else bad "ds4-gguf split: no deepseek4.expert_gating_func in the part"; fi

# --- 4. a router ds4 does not implement is refused -----------------------
/usr/bin/python3 tests/gguf_set.py "$T/synth-q2.gguf" "$T/sigmoid.gguf" deepseek4.expert_gating_func 2 2> /dev/null
if "$BD"/ds4 -m "$T/sigmoid.gguf" -p hi -n 1 > "$T/sig.out" 2>&1; then
    bad "ds4 ran a model whose expert_gating_func is 2 (sigmoid)"
elif grep -q 'expert_gating_func = 2 (sigmoid)' "$T/sig.out"; then
    ok "ds4 refuses deepseek4.expert_gating_func = 2 with a clear message"
else bad "ds4 on expert_gating_func = 2: unclear message:"; head -5 "$T/sig.out"; fi

[ $fail = 0 ] && echo "t_llamacpp: all passed" || echo "t_llamacpp: $fail failed"
[ $fail = 0 ]
