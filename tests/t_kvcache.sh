#!/usr/bin/env bash
# Disk KV cache across processes (the CLI and ds4-kv):
#  - save in one process, restart, restore, continue: logits identical to an
#    uninterrupted run;
#  - a cold checkpoint of a long first prompt is hit by the next prompt that
#    shares it, and only the suffix is evaluated;
#  - the interactive chat resumes the last conversation;
#  - a writer killed with SIGKILL at random points during saves never
#    leaves a file that verifies badly or is used;
#  - ds4-kv list / verify / rm; list and verify name the saving model's
#    architecture.
set -u
cd "$(dirname "$0")/.."
BD="${DS4_BIN_DIR:-.}"   # where the binaries are (build/debug/bin under DEBUG=1)
S="${DS4_SHARED:-../shared}"
G="$S/golden"
M="$G/models/tiny-a-q2.gguf"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail+1)); }

# 1. round trip across processes, bitwise
cut -d' ' -f1-200 "$G/sequences/seq_600a.ids.txt" > "$T/ids200.txt"
$BD/ds4 -q -m "$M" --tokens-file "$T/ids200.txt" --kv-disk-dir "$T/kv" --kv-cache-min-tokens 16 -n 0 || bad "first run"
$BD/ds4 -m "$M" --tokens-file "$G/sequences/seq_600a.ids.txt" --kv-disk-dir "$T/kv" \
    --kv-cache-min-tokens 16 -n 0 --dump-logits "$T/r.f32" > "$T/out" 2>&1 || bad "second run"
grep -q "restored 200 tokens" "$T/out" && ok "restart restores the saved 200 tokens" || { bad "no restore"; cat "$T/out"; }
$BD/ds4 -q -m "$M" --tokens-file "$G/sequences/seq_600a.ids.txt" -n 0 --dump-logits "$T/full.f32"
if tail -c $((400 * 4096 * 4)) "$T/full.f32" | cmp -s - "$T/r.f32"; then
    ok "restore + continue == uninterrupted (bitwise, 400 rows)"
else bad "logits after restore differ"; fi

# 2. cold checkpoint of a long prompt, hit by the next prompt sharing it
SYS="$(head -c 3000 bench/data/italian_sample.txt)"
i=0
for q in "Prima domanda?" "Seconda domanda, diversa."; do
    i=$((i+1))
    $BD/ds4 -m "$M" -sys "$SYS" -p "$q" -n 3 --nothink --kv-disk-dir "$T/kc" --kv-cache-min-tokens 64 \
        --kv-cache-boundary-align-tokens 64 --kv-cache-boundary-trim-tokens 32 > "$T/o_$i" 2>&1 || bad "cold run"
done
cat "$T/o_1" "$T/o_2" > "$T/cold.log"
grep -q "saved .* tokens (cold)" "$T/cold.log" && ok "cold checkpoint saved" || bad "no cold save"
grep -q "disk KV cache: restored" "$T/cold.log" && ok "second prompt restores the cold checkpoint" || { bad "no cold hit"; cat "$T/cold.log"; }
pre=$(grep -o 'prefill [0-9]* tokens' "$T/cold.log" | tail -1 | grep -o '[0-9]*')
[ -n "$pre" ] && [ "$pre" -lt 100 ] && ok "only the suffix was evaluated ($pre tokens)" || bad "suffix prefill $pre"

# 3. the chat resumes the last conversation
printf 'Hello there, how are you doing today?\n' | $BD/ds4 -m "$M" -n 4 --nothink --kv-disk-dir "$T/ki" --kv-cache-min-tokens 8 > /dev/null 2>&1
printf 'And again?\n' | $BD/ds4 -m "$M" -n 4 --nothink --kv-disk-dir "$T/ki" --kv-cache-min-tokens 8 > "$T/chat.log" 2>&1
grep -q "resumed a conversation" "$T/chat.log" && ok "chat resumes across runs" || { bad "no resume"; cat "$T/chat.log"; }

# 4. SIGKILL during saves (DS4_KV_FAULT=slow widens the write window)
mkdir -p "$T/kk"
for i in $(seq 1 25); do
    n=$((40 + (i * 37) % 500))
    cut -d' ' -f1-$n "$G/sequences/seq_600a.ids.txt" > "$T/ids.txt"
    DS4_KV_FAULT=slow $BD/ds4 -q -m "$M" --tokens-file "$T/ids.txt" --kv-disk-dir "$T/kk" \
        --kv-cache-min-tokens 8 -n 0 > /dev/null 2>&1 &
    pid=$!
    sleep "0.$(( (RANDOM % 40) + 5 ))"
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
done
if $BD/ds4-kv verify "$T/kk" -m "$M" > "$T/verify.log"; then
    ok "after 25 SIGKILLs: $(tail -1 "$T/verify.log")"
else bad "SIGKILL left a bad file"; cat "$T/verify.log"; fi
ls -a "$T/kk" | grep -q '^\.tmp-' && echo "note: temp files of killed writers remain until the next open"
$BD/ds4 -q -m "$M" --tokens-file "$T/ids.txt" --kv-disk-dir "$T/kk" --kv-cache-min-tokens 8 -n 0 > /dev/null 2>&1
ls -a "$T/kk" | grep -q '^\.tmp-' && bad "stale temp files not swept" || ok "stale temp files swept at open"

# 5. ds4-kv
$BD/ds4-kv list "$T/kv" > "$T/list" && grep -q "manual" "$T/list" && ok "ds4-kv list" || bad "ds4-kv list"
f=$(ls "$T/kv" | grep ds4kv | head -1)
# the architecture of the saving model (header bytes 112..127): the tiny
# DeepSeek V4 file's, and a copy whose field says glm5-next (list reads
# the header only; the copy fails verify, as the damaged file below does)
cp "$T/kv/$f" "$T/kv/0arch.ds4kv"
printf 'glm5-next\0\0\0\0\0\0\0' | dd of="$T/kv/0arch.ds4kv" bs=1 seek=112 conv=notrunc 2>/dev/null
$BD/ds4-kv list "$T/kv" > "$T/la"
$BD/ds4-kv verify "$T/kv" > "$T/va"
if grep -q "^0arch\.ds4kv .* glm5-next " "$T/la" && grep -q "^${f:0:12} .* deepseek4 " "$T/la" &&
        grep -q "^ok   $f: deepseek4, " "$T/va"; then
    ok "ds4-kv list / verify print the saving model's architecture (deepseek4; glm5-next from the header field)"
else bad "ds4-kv: no architecture column:"; cat "$T/la" "$T/va"; fi
rm -f "$T/kv/0arch.ds4kv"
printf 'x' | dd of="$T/kv/$f" bs=1 seek=200 conv=notrunc 2>/dev/null
$BD/ds4-kv verify "$T/kv" > "$T/v2" && bad "verify missed a damaged file" || ok "ds4-kv verify finds a damaged file"
# a planted file whose name carries an ESC sequence is named escaped
printf 'junk' > "$T/kv/$(printf 'x\033[2J\033]0;t\007').ds4kv"
$BD/ds4-kv list "$T/kv" > "$T/l3"; $BD/ds4-kv verify "$T/kv" > "$T/v3"
if grep -q "$(printf '[\033\007]')" "$T/l3" "$T/v3"; then bad "ds4-kv prints control bytes of a file name"
elif grep -qF 'x\x1b[2J' "$T/v3"; then ok "ds4-kv names files escaped"
else bad "ds4-kv escaped name missing"; cat "$T/v3"; fi
$BD/ds4-kv rm "$T/kv" --all > /dev/null && [ -z "$(ls "$T/kv" | grep ds4kv)" ] && ok "ds4-kv rm --all" || bad "ds4-kv rm"
$BD/ds4-kv bogus "$T/kv" > /dev/null 2>&1 && bad "bad command accepted" || ok "bad command refused"

echo "t_kvcache: $fail failure(s)"
[ "$fail" -eq 0 ]
