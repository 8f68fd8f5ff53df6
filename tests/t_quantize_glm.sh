#!/usr/bin/env bash
# t_quantize_glm.sh -- ds4-quantize on GLM 5.2 / 5.3 checkpoints
# (GlmMoeDsaForCausalLM -> glm-dsa) and GLM 5.3 Flash ones
# (Glm5NextForConditionalGeneration -> glm5-next; tools/ds4_quantize.c,
# docs/CHECKPOINT.md), and what ds4 --inspect --ctx says of the result.
#
#  1. tests/glm_hf.py writes a tiny GLM checkpoint (BF16 shards + index,
#     config.json, tokenizer files from the synthetic GLM vocabulary of
#     tests/glm_vocab.py) and the same weights as a glm-dsa GGUF written
#     directly by tests/glm_gguf.py.  For the recipes f32, f16 and q8_0 the
#     converted file equals the direct one: every tensor's name, order,
#     dims, type and bytes (kv_b_proj cut into attn_k_b / attn_v_b, the
#     IndexShare layers without indexer tensors), every glm-dsa.* key
#     (attention.indexer.types from index_topk_freq / _offset); its
#     tokenizer keys are the vocabulary's with pre = glm4 and llama.cpp's
#     GLM ids; so ds4's logits over 100 token ids are the same bit for bit.
#     Exact because the values are BF16 (exact in F32 and F16) and the Q8_0
#     of both is ggml's reference rule.
#  2. An F32 checkpoint in one shard, IndexShare as indexer_types, with a
#     NextN (MTP) layer past num_hidden_layers: the same file (the NextN
#     layer skipped).  An FP8 one (glm_hf.py --fp8: E4M3 codes with an F32
#     weight_scale_inv per 128x128 block, the reference holding code x
#     scale in one F32 multiply, as ds4-quantize decodes): the same file.
#  3. q2, q4, q2-q4 and mxfp4 on a shape whose rows are whole 256-blocks:
#     the recipe's types (routed experts IQ2_XXS/Q2_K, Q4_K, MXFP4; the
#     projections Q8_0), and ds4 runs the file to finite logits.
#  4. Refusals, no output file left: a tensor missing, a shape config.json
#     does not imply, an unknown model_type, the GLM-only recipes on a
#     DeepSeek V4 checkpoint, --imatrix with a GLM checkpoint.
#  5. ds4 --inspect --ctx N on the converted file: the weights by kind
#     (attention, indexer tensors of the full IndexShare layers only, dense
#     FFN, routed experts), the memory plan's KV bytes per token (the cached
#     latent + RoPE row of every layer, the indexer keys of the full
#     IndexShare layers, f32) and its total; on a DeepSeek V4 file with an
#     MTP block, V4's kinds (compressor, hyper-connections, MTP block).
#  6. GLM 5.3 Flash (Glm5NextForConditionalGeneration -> glm5-next): the
#     release layout (text_config, "model.language_model." names, KDA as
#     Kimi-Linear's q/k/v_conv1d [C, 1, kernel], A_log, dt_bias, bare hc_*
#     and index_kpool_compress_* names; BF16 with the F32 ones F32) ->
#     the file glm_gguf.py glm5-next --type writes, f32 / f16 / q8_0: every
#     tensor (ssm_a = -exp(A_log), the conv1d weights 4-D as llama.cpp
#     writes them, kv_b_proj cut), every glm5-next.* key, same logits bit
#     for bit (A_log is the F32 the checkpoint holds; ssm_a is -exp of it
#     in double, rounded once, on both sides).  A text-only export
#     (Glm5NextForCausalLM: flat config, "model." names), F32, one shard,
#     a NextN layer (skipped) and a shared-indexer DSA layer
#     (attention.indexer.types): the same file, same logits; and the FP8
#     layout (MLA q_a/q_b/kv_a/o and the FFNs E4M3, the rest BF16).
#  7. glm5-next q2, q4, q2-q4 and mxfp4 on 256-wide rows: the recipe's
#     expert types per layer, ds4 -p ... -n 8 generates, and the logits over
#     100 ids correlate with the F32 file's (Pearson r >= 0.5 for the 2-bit
#     recipes, 0.75 mxfp4, 0.85 q4: random weights quantize badly, this
#     catches a misplaced tensor, not a precision loss).
#  8. glm5-next refusals: RoPE dims, layer_types against
#     linear_attn_config.full_attn_layers, mhc false.
set -u
cd "$(dirname "$0")/.." || exit 1
BD="${DS4_BIN_DIR:-.}"
SHARED="${DS4_SHARED:-../shared}"
export DS4_SHARED="$SHARED"
PY=/usr/bin/python3
fail=0
ok()  { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
for b in ds4 ds4-quantize ds4-synth; do
    [ -x "$BD/$b" ] || { echo "FAIL $BD/$b not built (make)"; exit 1; }
done
T=$(mktemp -d "${TMPDIR:-/tmp}/ds4-qglm.XXXXXX")
trap 'rm -rf "$T"' EXIT

mkdir -p "$T/cases"
$PY tests/glm_vocab.py "$T/vocab.gguf" "$T/cases" > /dev/null || { echo "FAIL glm_vocab.py"; exit 1; }
$PY -c "import random; r=random.Random(7); print(' '.join(str(r.randrange(10, 1750)) for _ in range(100)))" \
    > "$T/ids.txt"

# same A.gguf B.gguf VOCAB: tensors and B's arch keys (glm-dsa.* or
# glm5-next.*) identical; A's
# tokenizer arrays are VOCAB's, pre glm4, with the GLM special ids
cat > "$T/same.py" <<'EOF'
import os, sys
sys.path.insert(0, os.path.join(os.environ["DS4_SHARED"], "oracle"))
import gguf_reader as g
import numpy as np
a, b, v = (g.GGUFReader(p) for p in sys.argv[1:4])
arch = b.kv["general.architecture"]     # glm-dsa or glm5-next
p = []
if a.tensor_order != b.tensor_order:
    p.append("tensor lists differ: %s" % sorted(set(a.tensor_order) ^ set(b.tensor_order))[:6])
for n in a.tensor_order:
    if n not in b.tensors:
        continue
    (da, ta, _), (db, tb, _) = a.tensors[n], b.tensors[n]
    if da != db or ta != tb:
        p.append("%s: dims %s type %d, expected %s type %d" % (n, da, ta, db, tb))
    elif bytes(a.tensor(n).raw()) != bytes(b.tensor(n).raw()):
        p.append("%s: bytes differ" % n)
def same(x, y):
    if isinstance(x, (np.ndarray, list)) or isinstance(y, (np.ndarray, list)):
        return x is not None and y is not None and np.array_equal(np.asarray(x), np.asarray(y))
    return x == y
for k in sorted(k for k in set(a.kv) | set(b.kv) if k.startswith(arch + ".")):
    if not same(a.kv.get(k), b.kv.get(k)):
        p.append("key %s: %r, expected %r" % (k, a.kv.get(k), b.kv.get(k)))
for k in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges"):
    if not same(a.kv.get(k), v.kv.get(k)):
        p.append("key %s differs from the vocabulary's" % k)
tok = list(v.kv["tokenizer.ggml.tokens"])
want = {"tokenizer.ggml.pre": "glm4", "tokenizer.ggml.bos_token_id": tok.index("[gMASK]"),
        "tokenizer.ggml.eos_token_id": tok.index("<|endoftext|>"),
        "tokenizer.ggml.eot_token_id": tok.index("<|user|>"),
        "tokenizer.ggml.eom_token_id": tok.index("<|observation|>"),
        "general.architecture": arch}
for k, x in want.items():
    if a.kv.get(k) != x:
        p.append("key %s = %r, expected %r" % (k, a.kv.get(k), x))
if arch + ".nextn_predict_layers" in a.kv:
    p.append("nextn_predict_layers written (the NextN block is not converted)")
if not str(a.kv.get("tokenizer.chat_template", "")).startswith("[gMASK]<sop>"):
    p.append("no tokenizer.chat_template from tokenizer_config.json")
print("\n".join(p))
sys.exit(1 if p else 0)
EOF

# convert NAME RECIPE [glm_hf.py args]: checkpoint + direct file, then
# ds4-quantize; compares both and their logits
convert() {
    local name=$1 recipe=$2 type=$2
    shift 2
    [ "$recipe" = q8_0 ] || [ "$recipe" = f16 ] || type=f32
    if ! $PY tests/glm_hf.py "$T/$name.ck" "$T/$name.ref.gguf" --vocab "$T/vocab.gguf" --type "$type" "$@" \
            > "$T/$name.gen" 2>&1; then
        bad "$name: glm_hf.py:"; cat "$T/$name.gen"; return 1
    fi
    if ! "$BD/ds4-quantize" --recipe "$recipe" "$T/$name.ck" -o "$T/$name.gguf" > "$T/$name.qlog" 2>&1; then
        bad "$name: ds4-quantize --recipe $recipe:"; cat "$T/$name.qlog"; return 1
    fi
    if ! $PY "$T/same.py" "$T/$name.gguf" "$T/$name.ref.gguf" "$T/vocab.gguf" > "$T/$name.cmp" 2>&1; then
        bad "$name: the converted file differs from glm_gguf.py's:"; head -8 "$T/$name.cmp"; return 1
    fi
    for f in "$name" "$name.ref"; do
        if ! "$BD/ds4" -m "$T/$f.gguf" --tokens-file "$T/ids.txt" --dump-logits "$T/$f.logits" --ctx 256 \
                > "$T/$f.log" 2>&1; then
            bad "$f: ds4 failed:"; tail -3 "$T/$f.log"; return 1
        fi
    done
    cmp -s "$T/$name.logits" "$T/$name.ref.logits" || { bad "$name: logits differ from the direct file's"; return 1; }
    return 0
}

# --- 1. f32, f16, q8_0 from a BF16 checkpoint --------------------------------
for r in f32 f16 q8_0; do
    convert "$r" "$r" && ok "recipe $r: BF16 checkpoint -> the file glm_gguf.py writes (tensors, metadata), same logits bit for bit"
done

# --- 2. F32, one shard, indexer_types, a NextN layer -------------------------
convert var f32 --dtype f32 --shards 1 --types-key --mtp &&
    ok "F32 checkpoint, one shard, indexer_types, a NextN layer (skipped): the same file, same logits"
convert fp8 f16 --fp8 &&
    ok "FP8 checkpoint (E4M3 + F32 weight_scale_inv per 128x128 block: MLA q_a/q_b/kv_a/o, the FFNs): the same file, same logits"

# --- 3. the expert recipes ----------------------------------------------------
BIG=(--set n_embd=256 --set n_ff_exp=256 --set qk_nope=32)
if $PY tests/glm_hf.py "$T/big.ck" "$T/big.ref.gguf" --vocab "$T/vocab.gguf" "${BIG[@]}" > "$T/big.gen" 2>&1; then
    for spec in "q2 IQ2_XXS/IQ2_XXS/Q2_K" "q4 Q4_K/Q4_K/Q4_K" "q2-q4 Q4_K/Q4_K/Q4_K" "mxfp4 MXFP4/MXFP4/MXFP4"; do
        # shellcheck disable=SC2086
        set -- $spec
        extra=()
        [ "$1" = q2-q4 ] && extra=(--q4-last 1)
        if ! "$BD/ds4-quantize" --recipe "$1" "${extra[@]}" "$T/big.ck" -o "$T/big-$1.gguf" > "$T/big-$1.log" 2>&1; then
            bad "recipe $1:"; cat "$T/big-$1.log"; continue
        fi
        "$BD/ds4" -m "$T/big-$1.gguf" --inspect > "$T/big-$1.insp" 2>&1
        if ! grep -q "^    3  .*experts $2\$" "$T/big-$1.insp" ||
                ! grep -q "Q8_0 " "$T/big-$1.insp"; then
            bad "recipe $1: not the types expected (layer 3 experts $2, projections Q8_0):"
            grep -E "^ +[0-9]+  MLA|Q8_0" "$T/big-$1.insp"; continue
        fi
        if ! "$BD/ds4" -m "$T/big-$1.gguf" --tokens-file "$T/ids.txt" --dump-logits "$T/big-$1.logits" --ctx 256 \
                > "$T/big-$1.run" 2>&1; then
            bad "recipe $1: ds4 failed:"; tail -3 "$T/big-$1.run"; continue
        fi
        if $PY -c "import sys, numpy as np; a = np.fromfile(sys.argv[1], np.float32); sys.exit(0 if a.size and np.isfinite(a).all() else 1)" \
                "$T/big-$1.logits"; then
            ok "recipe $1: experts $2 (layer 3), projections Q8_0; ds4 runs it to finite logits"
        else bad "recipe $1: non-finite logits"; fi
    done
else bad "glm_hf.py (256-wide):"; cat "$T/big.gen"; fi

# --- 4. refusals ----------------------------------------------------------------
# refuse WHAT PATTERN CK [ds4-quantize args]: exit != 0, PATTERN on stderr, no output
refuse() {
    local what=$1 pat=$2 ck=$3
    shift 3
    rm -f "$T/out.gguf" "$T/out.gguf".tmp*
    if "$BD/ds4-quantize" "$@" "$ck" -o "$T/out.gguf" > "$T/ref.out" 2> "$T/ref.err"; then
        bad "$what: converted"
    elif ! grep -q -- "$pat" "$T/ref.err"; then
        bad "$what: refused without \"$pat\":"; cat "$T/ref.err"
    elif [ -e "$T/out.gguf" ] || ls "$T/out.gguf".tmp* > /dev/null 2>&1; then
        bad "$what: an output file was left"
    else ok "$what: refused ($(head -c 150 "$T/ref.err" | head -1))"; fi
}
if $PY tests/glm_hf.py "$T/drop.ck" "$T/drop.ref.gguf" --vocab "$T/vocab.gguf" \
        --drop model.layers.2.mlp.experts.5.up_proj.weight > "$T/drop.gen" 2>&1; then
    refuse "a missing expert tensor" 'tensor "model.layers.2.mlp.experts.5.up_proj.weight" (for blk.2.ffn_up_exps.weight) is in no shard' \
        "$T/drop.ck" --recipe f16
else bad "glm_hf.py --drop:"; cat "$T/drop.gen"; fi
if [ -d "$T/f16.ck" ]; then
    cp -r "$T/f16.ck" "$T/shape.ck"
    $PY - "$T/shape.ck/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["v_head_dim"] = 24
json.dump(c, open(sys.argv[1], "w"))
EOF
    refuse "a kv_b_proj config.json does not imply" 'tensor "model.layers.0.self_attn.kv_b_proj.weight" has shape \[128, 32\], but config.json implies \[160, 32\]' \
        "$T/shape.ck" --recipe f16
    cp -r "$T/f16.ck" "$T/mt.ck"
    $PY - "$T/mt.ck/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["architectures"] = ["Glm4MoeForCausalLM"]
c["model_type"] = "glm4_moe"
json.dump(c, open(sys.argv[1], "w"))
EOF
    refuse "an unknown model_type" 'model_type "glm4_moe": not a checkpoint ds4-quantize converts' "$T/mt.ck" --recipe f16
    refuse "--imatrix with a GLM checkpoint" "not a GLM checkpoint's" "$T/f16.ck" --recipe q2 --imatrix /dev/null
fi
if "$BD/ds4-synth" --preset tiny --seed 7 --vocab "$SHARED/vocab/mini-vocab.gguf" --hf-out "$T/v4.ck" > /dev/null 2>&1; then
    refuse "--recipe q8_0 with a DeepSeek V4 checkpoint" "is for GLM checkpoints" "$T/v4.ck" --recipe q8_0
else bad "ds4-synth --hf-out"; fi

# --- 5. the memory plan ---------------------------------------------------------
if [ -f "$T/f32.gguf" ]; then
    "$BD/ds4" -m "$T/f32.gguf" --inspect --ctx 1000 > "$T/plan.txt" 2>&1
    # 4 layers x (32 + 16) f32 + 3 full indexer layers x 64 f32 = 1536 bytes a token
    if grep -q "KV per token .*1536 bytes: 4 layers x 48 f32 (latent + rope) + 3 indexer layers x 64 f32 keys" "$T/plan.txt" &&
            grep -q "KV state *1.5 MiB" "$T/plan.txt" &&
            grep -q "^  indexer *15 tensors  445.50 KiB (456192 bytes) *F32\$" "$T/plan.txt" &&
            grep -q "^  routed experts *9 tensors  576.00 KiB" "$T/plan.txt" &&
            grep -q "^  dense FFN *3 tensors" "$T/plan.txt" &&
            grep -q "^  attention *32 tensors" "$T/plan.txt"; then
        ok "ds4 --inspect --ctx 1000: weights by kind (indexer: 3 full layers x 5 tensors), KV 1536 bytes a token (4 cached rows of 48, 3 indexer keys of 64), 1.5 MiB"
    else bad "ds4 --inspect --ctx: not the KV figures expected:"; sed -n '/memory plan/,$p' "$T/plan.txt"; fi
fi

# DeepSeek V4 (with an MTP block): its own kinds, the MTP block's apart, and
# no per-token KV line (its state does not grow by a fixed amount a token)
if "$BD/ds4-synth" --preset tiny --seed 7 --vocab "$SHARED/vocab/mini-vocab.gguf" --recipe f16 --mtp \
        -o "$T/v4.gguf" > /dev/null 2>&1 && "$BD/ds4" -m "$T/v4.gguf" --inspect --ctx 1000 > "$T/v4.txt" 2>&1; then
    if grep -q "^  compressor *16 tensors" "$T/v4.txt" && grep -q "^  hyper-connections *36 tensors" "$T/v4.txt" &&
            grep -q "^  routed experts *18 tensors" "$T/v4.txt" && grep -q "^  MTP block *32 tensors" "$T/v4.txt" &&
            grep -q "^MTP block: 32 tensors, used for drafts" "$T/v4.txt" &&
            ! grep -q "^  not in the layout\|KV per token\|not used by ds4" "$T/v4.txt"; then
        ok "ds4 --inspect on DeepSeek V4 + MTP: weights by kind (compressor, HC, experts, the MTP block's 32)"
    else bad "ds4 --inspect on DeepSeek V4:"; sed -n '/^weights by kind/,/^$/p' "$T/v4.txt"; fi
else bad "ds4-synth --mtp / ds4 --inspect"; fi

# --- 6. GLM 5.3 Flash: f32, f16, q8_0 from the release layout ---------------
for r in f32 f16 q8_0; do
    convert "g5n-$r" "$r" --arch glm5-next &&
        ok "glm5-next recipe $r: BF16 release layout -> the file glm_gguf.py writes (tensors, metadata), same logits bit for bit"
done
convert g5n-fp8 q8_0 --arch glm5-next --fp8 &&
    ok "glm5-next FP8 release layout (E4M3 + F32 weight_scale_inv: MLA q_a/q_b/kv_a/o, the FFNs; KDA, kv_b, indexer BF16): the same file, same logits"
convert g5n-var f32 --arch glm5-next --flat --dtype f32 --shards 1 --mtp --shared 5 &&
    grep -q "5  MLA, shared indexer" <("$BD/ds4" -m "$T/g5n-var.gguf" --inspect 2>&1) &&
    ok "glm5-next text-only export (flat config, model. names), F32, one shard, NextN layer skipped, layer 5 a shared indexer: the same file, same logits"

# --- 7. glm5-next's expert recipes ---------------------------------------------
G5BIG=(--arch glm5-next --set n_embd=256 --set n_ff_exp=256 --set qk_head=32)
# exptypes.py FILE: "LAYER:GATE/UP/DOWN" of every MoE layer's routed experts,
# then the types of the attention (KDA q, MLA q_b, outputs) and shared
# expert projections
cat > "$T/exptypes.py" <<'PYEOF'
import os, sys
sys.path.insert(0, os.path.join(os.environ["DS4_SHARED"], "oracle"))
import gguf_reader as g
r = g.GGUFReader(sys.argv[1])
N = {0: "F32", 1: "F16", 8: "Q8_0", 10: "Q2_K", 12: "Q4_K", 16: "IQ2_XXS", 39: "MXFP4"}
out = []
for il in range(int(r.kv["glm5-next.block_count"])):
    ts = [r.tensors.get("blk.%d.ffn_%s_exps.weight" % (il, x)) for x in ("gate", "up", "down")]
    if ts[0]:
        out.append("%d:%s" % (il, "/".join(N.get(t[1], str(t[1])) for t in ts)))
projs = {N.get(r.tensors[n][1]) for n in r.tensor_order
         if n.split(".", 2)[-1] in ("attn_q.weight", "attn_q_b.weight", "attn_output.weight", "ffn_up_shexp.weight")}
print(" ".join(out), "proj:" + "/".join(sorted(projs)))
PYEOF
if $PY tests/glm_hf.py "$T/g5big.ck" "$T/g5big.ref.gguf" --vocab "$T/vocab.gguf" "${G5BIG[@]}" > "$T/g5big.gen" 2>&1 &&
        "$BD/ds4" -m "$T/g5big.ref.gguf" --tokens-file "$T/ids.txt" --dump-logits "$T/g5big.ref.logits" --ctx 256 \
            > "$T/g5big.ref.run" 2>&1; then
    M="1 2 3 4 5"   # the MoE layers (layer 0 dense)
    for spec in "q2 IQ2_XXS/IQ2_XXS/Q2_K - 0.5" "q4 Q4_K/Q4_K/Q4_K - 0.85" "q2-q4 IQ2_XXS/IQ2_XXS/Q2_K Q4_K/Q4_K/Q4_K 0.5" \
            "mxfp4 MXFP4/MXFP4/MXFP4 - 0.75"; do
        # shellcheck disable=SC2086
        set -- $spec
        extra=() want=""
        [ "$1" = q2-q4 ] && extra=(--q4-last 1)
        for il in $M; do
            if [ "$1" = q2-q4 ] && [ "$il" = 5 ]; then want="$want $il:$3"; else want="$want $il:$2"; fi
        done
        want="${want# } proj:Q8_0"
        f="$T/g5big-$1"
        if ! "$BD/ds4-quantize" --recipe "$1" "${extra[@]}" "$T/g5big.ck" -o "$f.gguf" > "$f.log" 2>&1; then
            bad "glm5-next recipe $1:"; cat "$f.log"; continue
        fi
        got=$($PY "$T/exptypes.py" "$f.gguf")
        [ "$got" = "$want" ] || { bad "glm5-next recipe $1: types $got, expected $want"; continue; }
        # seeded; 1-8 tokens: a random-weight model may sample its end token early
        if ! "$BD/ds4" -m "$f.gguf" -p "hello world" -n 8 --seed 3 > "$f.gen" 2> "$f.generr" ||
                ! grep -Eq "generated [1-8] tokens" "$f.generr"; then
            bad "glm5-next recipe $1: ds4 -p -n 8 failed:"; tail -3 "$f.generr"; continue
        fi
        if ! "$BD/ds4" -m "$f.gguf" --tokens-file "$T/ids.txt" --dump-logits "$f.logits" --ctx 256 > "$f.run" 2>&1; then
            bad "glm5-next recipe $1: ds4 failed:"; tail -3 "$f.run"; continue
        fi
        if r=$($PY -c "
import sys, numpy as np
a, b = np.fromfile(sys.argv[1], np.float32), np.fromfile(sys.argv[2], np.float32)
ok = a.size == b.size and a.size > 0 and np.isfinite(a).all()
r = np.corrcoef(a, b)[0, 1] if ok else -1.0
print('%.3f' % r)
sys.exit(0 if ok and r >= float(sys.argv[3]) else 1)" "$f.logits" "$T/g5big.ref.logits" "$4"); then
            ok "glm5-next recipe $1: experts ${want% proj:*}, projections Q8_0; ds4 -p -n 8 runs; logits finite, r = $r against F32 (>= $4)"
        else bad "glm5-next recipe $1: logits r = $r against the F32 file's (want >= $4, finite)"; fi
    done
else bad "glm_hf.py --arch glm5-next (256-wide) or its F32 run:"; cat "$T/g5big.gen"; tail -3 "$T/g5big.ref.run"; fi

# --- 8. glm5-next refusals --------------------------------------------------------
if [ -d "$T/g5n-f16.ck" ]; then
    # g5edit NAME PYTHON: a copy of the f16 checkpoint, config.json edited (c: text_config)
    g5edit() {
        rm -rf "$T/$1.ck"; cp -r "$T/g5n-f16.ck" "$T/$1.ck"
        $PY - "$T/$1.ck/config.json" "$2" <<'PYEOF'
import json, sys
top = json.load(open(sys.argv[1]))
c = top["text_config"]
exec(sys.argv[2])
json.dump(top, open(sys.argv[1], "w"))
PYEOF
    }
    g5edit rope 'c["qk_rope_head_dim"] = 8'
    refuse "glm5-next with RoPE dims" "glm5-next is NoPE" "$T/rope.ck" --recipe f16
    g5edit lt 'c["layer_types"][1] = "deepseek_sparse_attention"'
    refuse "glm5-next layer_types against full_attn_layers" \
        "layer 1 is DSA in layer_types but not listed in linear_attn_config.full_attn_layers" "$T/lt.ck" --recipe f16
    g5edit mhc 'c["mhc"] = False'
    refuse "glm5-next without mHC" "mhc = false" "$T/mhc.ck" --recipe f16
fi

[ $fail = 0 ] || { echo "t_quantize_glm: $fail failed"; exit 1; }
echo "t_quantize_glm: all passed"
