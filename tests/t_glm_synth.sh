#!/usr/bin/env bash
# t_glm_synth.sh -- ds4-synth --arch glm-dsa (tools/ds4_synth.c): random-weight
# GLM 5.2 / 5.3 files that ds4 and llama.cpp load.
#  1. The tiny preset has tests/glm_gguf.py's layout for f32, f16 and q8_0:
#     the same tensor names, order, dims and types, and the same glm-dsa.*
#     and tokenizer.* metadata (ds4 --inspect, general.* aside).
#  2. ds4 --inspect reads it as glm-dsa; each recipe runs 300 token ids to
#     finite logits; one prefill == token by token (--decode-only), bit for
#     bit; the bytes do not depend on --threads.
#  3. llama.cpp (bench/llamacpp/setup.sh; skipped only when it exits 3) on
#     the f32 file against ds4: 2e-5 relative L2 before the first indexer
#     tie, the same top-1, >= 200 positions with a selection (the tie
#     positions come from the float64 reference, tests/oracle/glm_ref.py).
#  4. glm52 --layers 2 --recipe q8_0 --dry-run lists the real GLM 5.2 shapes
#     and the file size.
#  4b. --arch glm5-next: tiny f32 has tests/glm_gguf.py's layout and keys;
#     f32, f16 and q8_0 run to finite logits, prefill == token by token;
#     f32 == glm_ref.py to 1e-5; flash53 --layers 4 --dry-run lists the
#     GLM 5.3 Flash shapes.
#  5. Refusals, exit 2 with one clear line: --mtp, --hf-out, --set, a
#     DeepSeek recipe or preset with glm-dsa, a glm-dsa preset with glm5-next.
# ds4-test: optimized-only (llama.cpp and the Python reference; the glm-dsa graph runs under ASan in t_glm_engine)
set -u
cd "$(dirname "$0")/.." || exit 1
BD="${DS4_BIN_DIR:-.}"
SHARED="${DS4_SHARED:-../shared}"
PY=/usr/bin/python3
VOCAB="$SHARED/vocab/mini-vocab.gguf"
T=$(mktemp -d "${TMPDIR:-/tmp}/ds4-glmsynth.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
[ -x "$BD/ds4-synth" ] && [ -x "$BD/ds4" ] || { echo "FAIL $BD/ds4-synth or $BD/ds4 not built (make)"; exit 1; }

synth() { "$BD/ds4-synth" --arch glm-dsa --vocab "$VOCAB" --threads 2 "$@"; }

# the tensor directory (name, dims, type) of a GGUF, one line a tensor
cat > "$T/dir.py" <<'EOF'
import struct, sys
sys.path.insert(0, "tests")
from glm_gguf import _skip_value
b = open(sys.argv[1], "rb").read()
_, _, nt, nkv = struct.unpack_from("<IIQQ", b, 0)
o = 24
for _ in range(nkv):
    n = struct.unpack_from("<Q", b, o)[0]
    o += 8 + n
    t = struct.unpack_from("<I", b, o)[0]
    o = _skip_value(b, o + 4, t)
for _ in range(nt):
    n = struct.unpack_from("<Q", b, o)[0]
    name = b[o + 8:o + 8 + n].decode()
    o += 8 + n
    nd = struct.unpack_from("<I", b, o)[0]
    dims = struct.unpack_from("<%dQ" % nd, b, o + 4)
    o += 4 + 8 * nd
    ty = struct.unpack_from("<I", b, o)[0]
    o += 12
    print(name, dims, ty)
EOF
# the glm-dsa.* and tokenizer.* metadata as ds4 --inspect prints them
meta() { "$BD/ds4" -m "$1" --inspect 2>&1 | grep -E '^ +(glm-dsa|tokenizer)\.' ; }

$PY -c "import random; r=random.Random(7); print(' '.join(str(r.randrange(10, 4090)) for _ in range(300)))" > "$T/ids300.txt"

# --- 1, 2: layout, load, finite, prefill == decode ---------------------------
for r in f32 f16 q8_0; do
    if ! synth --preset tiny --recipe "$r" -o "$T/$r.gguf" > "$T/$r.synthlog" 2>&1; then
        bad "$r: ds4-synth failed:"; tail -3 "$T/$r.synthlog"; continue
    fi
    $PY tests/glm_gguf.py glm-dsa "$T/py_$r.gguf" --vocab "$VOCAB" --type "$r"
    if $PY "$T/dir.py" "$T/py_$r.gguf" > "$T/py_$r.dir" && $PY "$T/dir.py" "$T/$r.gguf" > "$T/$r.dir" &&
            cmp -s "$T/py_$r.dir" "$T/$r.dir" && diff <(meta "$T/py_$r.gguf") <(meta "$T/$r.gguf") > "$T/$r.mdiff"; then
        ok "$r: tensors and metadata as tests/glm_gguf.py --type $r ($(wc -l < "$T/$r.dir") tensors)"
    else bad "$r: layout differs from tests/glm_gguf.py:"; diff "$T/py_$r.dir" "$T/$r.dir" | head -5; head -5 "$T/$r.mdiff"; fi
    if "$BD/ds4" -m "$T/$r.gguf" --inspect 2>&1 | grep -q 'architecture "glm-dsa"'; then ok "$r: ds4 --inspect: glm-dsa"
    else bad "$r: ds4 --inspect does not show glm-dsa"; fi
    if ! "$BD/ds4" -m "$T/$r.gguf" --tokens-file "$T/ids300.txt" --dump-logits "$T/$r.ds4" --ctx 512 \
            > "$T/$r.log" 2>&1; then
        bad "$r: ds4 failed:"; tail -5 "$T/$r.log"; continue
    fi
    if $PY -c "
import numpy as np, sys
x = np.fromfile('$T/$r.ds4', dtype=np.float32).reshape(300, 4096)
sys.exit(0 if np.isfinite(x).all() and x.std(axis=1).min() > 0.1 else 1)"; then
        ok "$r: 300 positions of finite, non-degenerate logits"
    else bad "$r: logits not finite or degenerate"; fi
    if "$BD/ds4" -m "$T/$r.gguf" --tokens-file "$T/ids300.txt" --dump-logits "$T/$r.dec" --ctx 512 \
            --decode-only > /dev/null 2>&1 && cmp -s "$T/$r.ds4" "$T/$r.dec"; then
        ok "$r: one prefill == token by token, bit for bit"
    else bad "$r: one prefill != token by token"; fi
done
if synth --preset tiny --recipe q8_0 --threads 1 -o "$T/q8_t1.gguf" > /dev/null 2>&1 &&
        cmp -s "$T/q8_0.gguf" "$T/q8_t1.gguf"; then
    ok "deterministic: --threads 1 == --threads 2"
else bad "the bytes depend on --threads"; fi

# --- 3: llama.cpp against ds4 on the same file -------------------------------
ENV=$(bench/llamacpp/setup.sh 2> "$T/setup.log")
rc=$?
if [ $rc = 3 ]; then
    echo "skip llama.cpp: could not be installed from npm: $(tail -n 1 "$T/setup.log")"
elif [ $rc != 0 ]; then
    cat "$T/setup.log"; bad "bench/llamacpp/setup.sh (exit $rc)"
elif [ -f "$T/f32.ds4" ]; then
    eval "$ENV"
    export GGML_BACKEND_DIR
    if ! "$LLAMA_LOGITS" logits -m "$T/f32.gguf" --tokens-file "$T/ids300.txt" -o "$T/f32.ll" -t 2 \
            > "$T/ll.log" 2>&1; then
        bad "llama.cpp failed on the ds4-synth file:"; tail -5 "$T/ll.log"
    elif ! $PY tests/oracle/glm_ref.py "$T/f32.gguf" --tokens-file "$T/ids300.txt" -o "$T/f32.ref" \
            --indexer "$T/f32.ix" > "$T/ref.log" 2>&1; then
        bad "glm_ref.py failed:"; tail -5 "$T/ref.log"
    elif $PY tests/llamacpp_compare.py "$T/f32.ds4" "$T/f32.ll" "$T/f32.ix" 4096 4 --tol 2e-5 \
            --tie-eps 1e-5 --min-selecting 200 > "$T/cmp.log" 2>&1; then
        sed 's/^/     /' "$T/cmp.log"
        ok "ds4-synth glm-dsa tiny f32: ds4 == llama.cpp before the first indexer tie (300 tokens)"
    else sed 's/^/     /' "$T/cmp.log"; bad "ds4 vs llama.cpp on the ds4-synth file"; fi
fi

# --- 4: the real GLM 5.2 shapes ---------------------------------------------
if "$BD/ds4-synth" --arch glm-dsa --preset glm52 --layers 2 --recipe q8_0 --vocab "$VOCAB" --dry-run --list \
        > "$T/g52.txt" 2>&1 &&
        grep -q '^blk.1.attn_q_b.weight  *Q8_0  *\[2048, 16384\]' "$T/g52.txt" &&
        grep -q '^blk.1.attn_kv_a_mqa.weight  *Q8_0  *\[6144, 576\]' "$T/g52.txt" &&
        grep -q '^blk.1.attn_k_b.weight  *Q8_0  *\[192, 512, 64\]' "$T/g52.txt" &&
        grep -q '^blk.1.attn_v_b.weight  *Q8_0  *\[512, 256, 64\]' "$T/g52.txt" &&
        grep -q '^blk.1.indexer.attn_q_b.weight  *Q8_0  *\[2048, 4096\]' "$T/g52.txt" &&
        grep -q '^blk.1.ffn_gate.weight  *Q8_0  *\[6144, 12288\]' "$T/g52.txt" &&
        grep -q '^file size: [0-9]* bytes' "$T/g52.txt" && grep -q 'nothing written' "$T/g52.txt"; then
    ok "glm52 --layers 2 --recipe q8_0 --dry-run: the GLM 5.2 shapes, $(grep '^file size' "$T/g52.txt")"
else bad "glm52 dry run:"; tail -5 "$T/g52.txt"; fi
if "$BD/ds4-synth" --arch glm-dsa --preset glm52 --layers 5 --recipe f16 --vocab "$VOCAB" --dry-run --list \
        > "$T/g52b.txt" 2>&1 && grep -q '^blk.3.ffn_gate_exps.weight  *F16  *\[6144, 2048, 256\]' "$T/g52b.txt" &&
        ! grep -q '^blk.3.indexer' "$T/g52b.txt" && grep -q '^blk.2.indexer.proj' "$T/g52b.txt"; then
    ok "glm52 --layers 5: MoE from layer 3, IndexShare (layer 3 shares, 0..2 own)"
else bad "glm52 --layers 5 layout"; fi

# --- 4b: glm5-next (GLM 5.3 Flash) -------------------------------------------
# tests/glm_gguf.py writes the convolutions 4-D ({kernel, 1, channels, 1}),
# ds4-synth 3-D: the same storage, the trailing 1 aside
g5meta() { "$BD/ds4" -m "$1" --inspect 2>&1 | grep -E '^ +(glm5-next|tokenizer)\.' ; }
$PY tests/glm_gguf.py glm5-next "$T/py_g5n.gguf" --vocab "$VOCAB"
for r in f32 f16 q8_0; do
    if ! "$BD/ds4-synth" --arch glm5-next --vocab "$VOCAB" --threads 2 --preset tiny --recipe "$r" \
            -o "$T/g5n_$r.gguf" > "$T/g5n_$r.synthlog" 2>&1; then
        bad "glm5-next $r: ds4-synth failed:"; tail -3 "$T/g5n_$r.synthlog"; continue
    fi
    if [ $r = f32 ]; then
        if $PY "$T/dir.py" "$T/py_g5n.gguf" | sed 's/, 1) /) /' > "$T/py_g5n.dir" &&
                $PY "$T/dir.py" "$T/g5n_$r.gguf" > "$T/g5n_$r.dir" && cmp -s "$T/py_g5n.dir" "$T/g5n_$r.dir" &&
                diff <(g5meta "$T/py_g5n.gguf") <(g5meta "$T/g5n_$r.gguf") > /dev/null; then
            ok "glm5-next f32: tensors and metadata as tests/glm_gguf.py glm5-next"
        else bad "glm5-next f32: layout differs from tests/glm_gguf.py:"; diff "$T/py_g5n.dir" "$T/g5n_$r.dir" | head -5; fi
    fi
    if "$BD/ds4" -m "$T/g5n_$r.gguf" --tokens-file "$T/ids300.txt" --dump-logits "$T/g5n_$r.ds4" --ctx 512 \
            > "$T/g5n_$r.log" 2>&1 &&
            "$BD/ds4" -m "$T/g5n_$r.gguf" --tokens-file "$T/ids300.txt" --dump-logits "$T/g5n_$r.dec" --ctx 512 \
            --decode-only > /dev/null 2>&1 && cmp -s "$T/g5n_$r.ds4" "$T/g5n_$r.dec" && $PY -c "
import numpy as np, sys
x = np.fromfile('$T/g5n_$r.ds4', dtype=np.float32).reshape(300, 4096)
sys.exit(0 if np.isfinite(x).all() and x.std(axis=1).min() > 0.1 else 1)"; then
        ok "glm5-next $r: 300 positions of finite, non-degenerate logits; prefill == token by token"
    else bad "glm5-next $r: ds4 failed, degenerate logits or prefill != decode:"; tail -3 "$T/g5n_$r.log"; fi
done
if [ -f "$T/g5n_f32.ds4" ] && $PY tests/oracle/glm_ref.py "$T/g5n_f32.gguf" --tokens-file "$T/ids300.txt" \
        -o "$T/g5n.ref" --indexer "$T/g5n.ix" > "$T/g5nref.log" 2>&1 &&
        $PY tests/llamacpp_compare.py "$T/g5n_f32.ds4" "$T/g5n.ref" "$T/g5n.ix" 4096 6 --tol 1e-5 \
        --tie-eps 1e-5 --min-selecting 200 > "$T/g5ncmp.log" 2>&1; then
    ok "ds4-synth glm5-next tiny f32: ds4 == glm_ref.py to 1e-5 before the first indexer tie"
else bad "ds4-synth glm5-next tiny f32 vs glm_ref.py:"; tail -5 "$T/g5ncmp.log" "$T/g5nref.log" 2>/dev/null; fi
if "$BD/ds4-synth" --arch glm5-next --preset flash53 --layers 4 --recipe q8_0 --vocab "$VOCAB" --dry-run --list \
        > "$T/f53.txt" 2>&1 &&
        grep -q '^blk.0.attn_q.weight  *Q8_0  *\[4096, 8192\]' "$T/f53.txt" &&
        grep -q '^blk.3.attn_q_b.weight  *Q8_0  *\[1536, 16384\]' "$T/f53.txt" &&
        grep -q '^blk.3.attn_k_b.weight  *Q8_0  *\[256, 512, 64\]' "$T/f53.txt" &&
        grep -q '^blk.3.ffn_gate_exps.weight  *Q8_0  *\[4096, 2048, 288\]' "$T/f53.txt" &&
        grep -q '^blk.3.indexer_compressor_ape.weight  *F32  *\[128, 4\]' "$T/f53.txt" &&
        grep -q 'nothing written' "$T/f53.txt"; then
    ok "glm5-next flash53 --layers 4 --dry-run: the GLM 5.3 Flash shapes, $(grep '^file size' "$T/f53.txt")"
else bad "glm5-next flash53 dry run:"; grep -E "blk.(0.attn_q|3.attn_q_b|3.attn_k_b|3.ffn_gate_exps|3.indexer_comp)" "$T/f53.txt" | head; tail -3 "$T/f53.txt"; fi

# --- 5: refusals ---------------------------------------------------------------
refuse() {   # refuse LABEL PATTERN ARGS...
    local label=$1 pat=$2; shift 2
    "$BD/ds4-synth" "$@" > "$T/r.out" 2> "$T/r.err"
    local rc=$?
    if [ $rc = 2 ] && grep -q -- "$pat" "$T/r.err" && [ ! -e "$T/r.gguf" ]; then ok "refused: $label"
    else bad "$label: exit $rc:"; cat "$T/r.err"; fi
}
refuse "glm5-next --preset glm52" "unknown for glm5-next" --arch glm5-next --preset glm52 --recipe f32 -o "$T/r.gguf"
refuse "glm5-next --mtp" "--mtp is not supported" --arch glm5-next --preset tiny --recipe f32 --mtp -o "$T/r.gguf"
refuse "--arch foo" "unknown" --arch foo --preset tiny --recipe f32 -o "$T/r.gguf"
refuse "glm-dsa --mtp" "--mtp is not supported" --arch glm-dsa --preset tiny --recipe f32 --mtp -o "$T/r.gguf"
refuse "glm-dsa --hf-out" "--hf-out is not supported" --arch glm-dsa --preset tiny --recipe f32 --hf-out "$T/hf"
refuse "glm-dsa --set" "--set is not supported" --arch glm-dsa --preset tiny --recipe f32 --set block_count=2 -o "$T/r.gguf"
refuse "glm-dsa --recipe q2" "unknown for glm-dsa" --arch glm-dsa --preset tiny --recipe q2 -o "$T/r.gguf"
refuse "glm-dsa --preset medium" "unknown for glm-dsa" --arch glm-dsa --preset medium --recipe f32 -o "$T/r.gguf"
refuse "deepseek4 --recipe q8_0" "unknown" --preset tiny --recipe q8_0 -o "$T/r.gguf"

[ $fail = 0 ] && echo "t_glm_synth: all ok" || echo "t_glm_synth: $fail failed"
[ $fail = 0 ]
