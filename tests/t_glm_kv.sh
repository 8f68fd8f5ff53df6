#!/usr/bin/env bash
# t_glm_kv.sh -- ds4-server's disk KV cache (--kv-disk-dir) with the GLM
# graphs (the tiny glm-dsa and glm5-next files of tests/glm_gguf.py over
# tests/glm_vocab.py's vocabulary), each on its own directory: a first
# server saves the prompt's state ("GLMS" / "G5NS" snapshot in a file whose
# header names the architecture), a second one on the same directory
# restores the prefix from disk (log and metrics show the hit) and answers
# the same greedy request with the same text (glm5-next: its KDA layers'
# recurrent state comes back from the file); a DeepSeek V4 server on the
# glm-dsa directory ignores the file (another architecture) and answers
# from scratch.
set -u
cd "$(dirname "$0")/.." || exit 1
PY=/usr/bin/python3
BD=${DS4_BIN_DIR:-.}
SHARED="${DS4_SHARED:-../shared}"
T=$(mktemp -d "${TMPDIR:-/tmp}/ds4-glmkv.XXXXXX")
. tests/lib/server.sh
stop() { server_stop || true; }
trap 'server_stop; rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }

mkdir -p "$T/cases"
$PY tests/glm_vocab.py "$T/vocab.gguf" "$T/cases" > /dev/null || { echo "FAIL glm_vocab.py"; exit 1; }
KNOBS=(--ctx 2048 -t 1 --kv-cache-min-tokens 32 --kv-cache-boundary-align-tokens 32
       --kv-cache-boundary-trim-tokens 8 --kv-cache-continued-interval-tokens 0)

# start MODEL LOG: a server on the cache directory $KV; URL set
start() {
    server_start "$2" "$BD"/ds4-server -m "$1" --port 0 --kv-disk-dir "$KV" "${KNOBS[@]}" ||
        { bad "ds4-server did not start"; cat "$2"; return 1; }
}
PROMPT="Tell me everything about the river, the old mill and the bridge by the village, the people who \
built them, the storms that came, the harvests and the markets, the songs of the fishermen and the \
stories of the travellers who crossed the mountains every spring to sell their wool and their cheese."
ask() {
    curl -sf "$URL/v1/chat/completions" -H 'Content-Type: application/json' \
        -d "{\"messages\":[{\"role\":\"user\",\"content\":\"$PROMPT\"}],\"max_tokens\":8,\"temperature\":0}" |
        $PY -c 'import json,sys; m = json.load(sys.stdin)["choices"][0]["message"]; print(repr((m.get("reasoning_content"), m.get("content"))))'
}
# saved: wait for the worker's save (after the answer)
saved() { for _ in $(seq 100); do grep -q "disk KV cache: saved" "$1" && return 0; sleep 0.1; done; return 1; }

# case ARCH MAGIC: the two servers on a fresh directory with ARCH's tiny file
case_arch() {
    A=$1 MAGIC=$2
    KV="$T/kv-$A"
    M="$T/$A.gguf"
    mkdir -p "$KV"
    $PY tests/glm_gguf.py "$A" "$M" --vocab "$T/vocab.gguf" > /dev/null || { bad "glm_gguf.py $A"; return 1; }
    start "$M" "$T/$A.a.log" || return 1
    a1=$(ask) && ok "$A server with --kv-disk-dir answers" || bad "$A: first request"
    saved "$T/$A.a.log" && ok "the prompt's state saved: $(grep -m1 'disk KV cache: saved' "$T/$A.a.log" | sed 's/.*saved/saved/')" \
        || { bad "$A: no save"; tail -5 "$T/$A.a.log"; }
    stop
    f=$(find "$KV" -name '*.ds4kv' | head -n1)
    if [ -n "$f" ]; then
        $PY - "$f" "$A" "$MAGIC" <<'PY' && ok "the file's header names $A, its payload is a $MAGIC snapshot" || bad "$A: file header"
import sys
b = open(sys.argv[1], 'rb').read()
text_len = int.from_bytes(b[48:56], 'little')
assert b[112:128].rstrip(b'\0') == sys.argv[2].encode(), b[112:128]
assert b[128 + text_len:128 + text_len + 4] == sys.argv[3].encode(), b[128 + text_len:128 + text_len + 4]
PY
    else
        bad "no cache file in $KV"
    fi

    start "$M" "$T/$A.b.log" || return 1
    a2=$(ask)
    grep -q "disk KV cache: restored" "$T/$A.b.log" && ok "second server: $(grep -m1 'disk KV cache: restored' "$T/$A.b.log" | sed 's/.*restored/restored/')" \
        || { bad "$A: no restore from disk"; tail -5 "$T/$A.b.log"; }
    hits=$(curl -sf "$URL/metrics" | sed -n 's/^ds4_kv_disk_hits_total \([0-9]*\)/\1/p')
    [ "${hits:-0}" -ge 1 ] && ok "metrics: ds4_kv_disk_hits_total $hits" || bad "$A: metrics: disk hits ${hits:-none}"
    [ -n "$a1" ] && [ "$a1" = "$a2" ] && ok "the same greedy answer after the restore: $a2" || bad "$A: answers differ: '$a1' vs '$a2'"
    stop
}
case_arch glm-dsa GLMS || exit 1
GLM_KV="$KV"
case_arch glm5-next G5NS || exit 1
KV="$GLM_KV"

V4="$SHARED/golden/models/tiny-a-q2.gguf"
if [ -f "$V4" ]; then
    start "$V4" "$T/c.log" || exit 1
    ask > /dev/null || bad "DeepSeek V4 request"
    grep -q "another architecture" "$T/c.log" && ! grep -q "disk KV cache: restored" "$T/c.log" \
        && ok "a DeepSeek V4 server ignores the glm-dsa file (another architecture)" \
        || { bad "V4 server on a glm-dsa cache"; tail -5 "$T/c.log"; }
    stop
else
    echo "skip the DeepSeek V4 server: $V4 missing"
fi
[ $fail -eq 0 ] && echo "t_glm_kv: all passed" || echo "t_glm_kv: $fail failed"
exit $((fail > 0))
