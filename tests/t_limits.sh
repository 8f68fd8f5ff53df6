#!/usr/bin/env bash
# t_limits.sh -- the model limits table (src/gguf/model.h, ds4_model_limits)
# holds at both ends, run from the repo root by tests/run.sh (in the DEBUG=1
# suite the binaries are the ASan/UBSan ones, so "runs cleanly" means "no
# sanitizer report").
#  (1) every row of the table (`ds4-synth --limits`): a small model whose
#      value is patched (tests/gguf_set.py) to the maximum / minimum passes
#      the range check; one beyond is refused by the loader with a message
#      naming the key, the value and the range;
#  (2) the limits that size fixed buffers of the engine (RoPE dims, HC
#      streams, output groups, compress ratio): a model synthesized AT the
#      limit evaluates a few tokens and generates; ds4-synth refuses to
#      write one beyond it;
#  (3) cross-key rules: rope dims above the indexer head dim, a compress
#      ratio of 1.
set -u
cd "$(dirname "$0")/.."
BD="${DS4_BIN_DIR:-.}"   # where the binaries are (build/debug/bin under DEBUG=1)
SHARED="${DS4_SHARED:-../shared}"
PY=/usr/bin/python3
VOCAB="$SHARED/vocab/mini-vocab.gguf"
fail=0
ok()  { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
for b in ds4 ds4-synth; do [ -x "$BD/$b" ] || { echo "FAIL $BD/$b not built (make)"; exit 1; }; done
T=$(mktemp -d "${TMPDIR:-/tmp}/t_limits.XXXXXX")
trap 'rm -rf "$T"' EXIT

# --- (1) every row, patched into a small file ------------------------------
# 4 layers: ratios 0,0,4,128 (an indexer layer, so the indexer keys count)
BASE="$T/base.gguf"
"$BD/ds4-synth" --preset tiny --recipe f16 --vocab "$VOCAB" --layers 4 \
    --set embedding_length=64 --set expert_feed_forward_length=64 -o "$BASE" > /dev/null 2> "$T/err" ||
    { cat "$T/err"; echo "FAIL base model"; exit 1; }
"$BD/ds4-synth" --limits > "$T/limits.tsv" || { echo "FAIL ds4-synth --limits"; exit 1; }
[ "$(wc -l < "$T/limits.tsv")" -ge 20 ] && ok "ds4-synth --limits lists $(wc -l < "$T/limits.tsv") keys" ||
    bad "ds4-synth --limits: $(cat "$T/limits.tsv")"

load() {   # load FILE -> the loader's report in $T/load.txt; status 0 = accepted
    "$BD/ds4" -m "$1" --inspect > "$T/load.txt" 2>&1
}
# accepted_range KEY VALUE [INDEX]: the loader does not call VALUE out of range
accepted_range() {
    local key=$1 v=$2 idx=${3:-}
    $PY tests/gguf_set.py "$BASE" "$T/p.gguf" "$key" "$v" $idx 2> "$T/py.txt" ||
        { bad "$key = $v: cannot patch: $(cat "$T/py.txt")"; return; }
    load "$T/p.gguf"
    if grep -qE "(out of range|is invalid|AddressSanitizer|runtime error)" "$T/load.txt" &&
       grep -E "out of range|is invalid|Sanitizer|runtime error" "$T/load.txt" | grep -qF "${key}"; then
        bad "$key = $v (at the limit) refused:"; grep -F "$key" "$T/load.txt" | head -3
    elif grep -qE "AddressSanitizer|runtime error" "$T/load.txt"; then
        bad "$key = $v: sanitizer report:"; head -20 "$T/load.txt"
    else
        ok "$key = $v: within the limits"
    fi
}
# refused KEY VALUE WANT [INDEX]: refused, and the report has WANT
refused() {
    local key=$1 v=$2 want=$3 idx=${4:-}
    $PY tests/gguf_set.py "$BASE" "$T/p.gguf" "$key" "$v" $idx 2> "$T/py.txt" ||
        { bad "$key = $v: cannot patch: $(cat "$T/py.txt")"; return; }
    if load "$T/p.gguf"; then bad "$key = $v (beyond the limit) accepted"
    elif grep -qE "AddressSanitizer|runtime error" "$T/load.txt"; then
        bad "$key = $v: sanitizer report:"; head -20 "$T/load.txt"
    elif grep -qF -- "$want" "$T/load.txt"; then ok "$key = $v refused: $(grep -F -- "$want" "$T/load.txt" | head -1 | sed 's/^[^:]*: //')"
    else bad "$key = $v: refused without \"$want\":"; head -5 "$T/load.txt"; fi
}

while IFS=$'\t' read -r key min max why; do
    case "$key" in
    deepseek4.attention.compress_ratios)   # per layer, layer 3 of the base
        accepted_range "$key" "$max" 3
        refused "$key" $((max + 1)) "compress_ratios[3] = $((max + 1)) is invalid (must be 0 or 2..$max" 3
        refused "$key" 1 "compress_ratios[3] = 1 is invalid" 3
        continue ;;
    deepseek4.expert_group_count)   # optional, absent from synthesized files
        continue ;;
    esac
    accepted_range "$key" "$max"
    refused "$key" $((max + 1)) "$key = $((max + 1)) is out of range [$min, $max]"
    if [ "$min" -gt 0 ]; then
        accepted_range "$key" "$min"
        refused "$key" $((min - 1)) "$key = $((min - 1)) is out of range [$min, $max]"
    fi
done < "$T/limits.tsv"

# --- (2) at the buffer-sizing limits: evaluate and generate ---------------
lim() { awk -F'\t' -v k="deepseek4.$1" '$1 == k { print $3 }' "$T/limits.tsv"; }
ROT=$(lim rope.dimension_count); HC=$(lim hyper_connection.count)
OG=$(lim attention.output_group_count); RATIO=$(lim attention.compress_ratios)

run_at() {   # run_at LABEL synth-args...
    local label=$1; shift
    local f="$T/at.gguf"
    if ! "$BD/ds4-synth" --preset tiny --recipe f16 --vocab "$VOCAB" "$@" -o "$f" > /dev/null 2> "$T/err"; then
        bad "$label: ds4-synth refused the at-limit model:"; cat "$T/err"; return
    fi
    # a 6-token prefill, then decoded tokens (both paths use the buffers)
    if "$BD/ds4" -q -m "$f" --tokens 0,5,7,9,11,13 -n 3 --temp 0 -c 256 > "$T/run.txt" 2>&1 &&
       ! grep -qE "AddressSanitizer|runtime error|LeakSanitizer" "$T/run.txt"; then
        ok "$label: evaluates and generates"
    else
        bad "$label: run failed:"; head -30 "$T/run.txt"
    fi
    rm -f "$f"
}
run_at "rope.dimension_count = $ROT" --set rope.dimension_count=$ROT --set attention.indexer.key_length=$ROT
run_at "hyper_connection.count = $HC" --layers 3 --set hyper_connection.count=$HC --set embedding_length=32
run_at "attention.output_group_count = $OG" --layers 3 --set attention.head_count=$OG \
    --set attention.output_group_count=$OG
run_at "compress ratio $RATIO" --layers 4 --set attention.compress_ratios=0,0,4,$RATIO

synth_refuses() {   # synth_refuses WANT synth-args...
    local want=$1; shift
    if "$BD/ds4-synth" --preset tiny --recipe f16 --vocab "$VOCAB" "$@" -o "$T/no.gguf" > /dev/null 2> "$T/err"; then
        bad "ds4-synth wrote $*"
    elif grep -qF -- "$want" "$T/err" && [ ! -e "$T/no.gguf" ]; then ok "ds4-synth refuses $*"
    else bad "ds4-synth $*: no \"$want\":"; cat "$T/err"; fi
}
synth_refuses "rope.dimension_count = $((ROT + 2)) is out of range" \
    --set rope.dimension_count=$((ROT + 2)) --set attention.key_length=512 --set attention.value_length=512 \
    --set attention.indexer.key_length=512
synth_refuses "hyper_connection.count = $((HC + 1)) is out of range" --set hyper_connection.count=$((HC + 1))
synth_refuses "attention.output_group_count = $((OG * 2)) is out of range" \
    --set attention.head_count=$((OG * 2)) --set attention.output_group_count=$((OG * 2))
synth_refuses "attention.compress_ratios" --layers 4 --set attention.compress_ratios=0,0,4,$((RATIO + 1))

# --- (3) cross-key rules ------------------------------------------------------
# rope dims within the head but above the indexer's head dim (the indexer
# ropes the tail of its 128-wide heads)
refused deepseek4.rope.dimension_count "$ROT" "exceeds attention.indexer.key_length"
refused deepseek4.rope.dimension_count 63 "must be even"
refused deepseek4.attention.output_group_count 3 "is not a multiple of output_group_count"
refused deepseek4.expert_used_count 9 "exceeds expert_count"

exit $fail
