#!/usr/bin/env bash
# The model file truncated under a running process (docs/memory.md "The file under a running
# process" and "--ssd-streaming", docs/server.md "Errors"; test_mapguard checks the mechanism and the message's
# tensor/expert naming).  Each case copies the tiny model to a temporary
# file, makes one request that works, truncates the copy and makes
# another:
#  1. ds4-server, weights mmap'd (OpenAI route; Anthropic route; --parallel 2
#     with a stream): the request that needs the lost bytes gets an error
#     naming the file, the tensor and the bytes, in its API's error shape;
#     then the server stops by itself (exit status 1, never death by SIGBUS),
#     its log naming the file;
#  2. ds4 (interactive, the prompts through a FIFO): the second turn prints
#     the same message and ds4 exits with status 1;
#  3. --ssd-streaming (server, then ds4): the expert read fails with a
#     message naming file, layer, expert, tensor and byte range (not "I/O
#     error"); the server stays up (a read error need not be permanent) and
#     answers /health, and stops cleanly on SIGTERM.
# The truncations cut the last MiB (inside output.weight, which every
# forward pass reads) or, under --ssd-streaming, half the tensor data (the
# routed experts of the later layers, with a one-slot cache so they are
# read again).
set -u
BD="${DS4_BIN_DIR:-.}"   # where the binaries are (build/debug/bin in the sanitizer pass)
cd "$(dirname "$0")/.."
S="${DS4_SHARED:-../shared}"
M="$S/golden/models/tiny-a-q2.gguf"
THR="${DS4_SERVER_THREADS:-1}"
command -v curl >/dev/null || { echo "t_filefault: SKIP: curl not found (the server cases need an HTTP client)"; exit 0; }
T=$(mktemp -d)
SRV=""
cleanup() {
    [ -n "$SRV" ] && kill -9 "$SRV" 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
trap '' PIPE   # a writer to the FIFO of a ds4 that died gets EPIPE, not the end of this script
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail+1)); }

fresh() { rm -f "$T/m.gguf"; cp "$M" "$T/m.gguf" && chmod u+w "$T/m.gguf"; }
cut_tail() { local n; n=$(stat -c %s "$T/m.gguf"); truncate -s $((n - 1048576)) "$T/m.gguf"; }
cut_half() { local n; n=$(stat -c %s "$T/m.gguf"); truncate -s $((n / 2)) "$T/m.gguf"; }
# no sanitizer report, no death by a signal in the log
clean_log() { ! grep -qE "AddressSanitizer|runtime error|LeakSanitizer" "$1"; }

start_server() {   # start_server LOG ARGS...: sets SRV and URL
    local log="$1"; shift
    "$BD"/ds4-server -m "$T/m.gguf" --port 0 --ctx 1024 -t "$THR" "$@" 2> "$log" &
    SRV=$!
    URL=""
    for _ in $(seq 300); do
        URL=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$log" | head -n1)
        [ -n "$URL" ] && break
        kill -0 "$SRV" 2>/dev/null || break
        sleep 0.1
    done
}
wait_exit() {   # wait_exit PID SECONDS: sets STATUS (124: still running, then killed)
    STATUS=124
    for _ in $(seq $(($2 * 10))); do
        if ! kill -0 "$1" 2>/dev/null; then wait "$1"; STATUS=$?; return; fi
        sleep 0.1
    done
    kill -9 "$1" 2>/dev/null; wait "$1" 2>/dev/null
}
post() {   # post PATH BODY OUT: prints the HTTP status (000: no answer)
    curl -s -m 60 -o "$3" -w '%{http_code}' -H 'content-type: application/json' -d "$2" "$URL$1"
}
CHAT='{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":4}'
CHAT2='{"model":"m","messages":[{"role":"user","content":"something else entirely"}],"max_tokens":4}'
STREAM='{"model":"m","messages":[{"role":"user","content":"a streamed question"}],"max_tokens":4,"stream":true}'
MSGS='{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hello"}]}'
MSGS2='{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"something else entirely"}]}'

# 1. the server, weights mmap'd
server_case() {   # server_case NAME PATH BODY1 BODY2 SHAPE ARGS...
    local name="$1" path="$2" b1="$3" b2="$4" shape="$5"; shift 5
    fresh
    start_server "$T/log" "$@"
    [ -n "$URL" ] || { bad "$name: the server did not start"; cat "$T/log"; return; }
    local c1 c2
    c1=$(post "$path" "$b1" "$T/r1")
    cut_tail
    c2=$(post "$path" "$b2" "$T/r2")
    wait_exit "$SRV" 20
    SRV=""
    if [ "$c1" = 200 ] && grep -q "$shape$T/m.gguf: the model file was truncated while in use" "$T/r2" &&
       grep -q "tensor output.weight, bytes [0-9]*\.\.[0-9]*) is gone" "$T/r2" &&
       { [ "$c2" = 500 ] || [ "$c2" = 200 ]; }; then
        ok "$name: the request after the cut: HTTP $c2, $(grep -o 'm.gguf: the model file[^"]*' "$T/r2" | head -c 150)..."
    else
        bad "$name: before the cut HTTP $c1, after HTTP $c2: $(head -c 600 "$T/r2")"
    fi
    if [ "$STATUS" = 1 ] && grep -q "fatal: .*m.gguf: the model file was truncated" "$T/log" && clean_log "$T/log"; then
        ok "$name: the server then stopped by itself (exit status 1, the file named in its log)"
    else
        bad "$name: exit status $STATUS (135 = SIGBUS, 124 = still running)"; tail -n 20 "$T/log"
    fi
}
server_case "openai" /v1/chat/completions "$CHAT" "$CHAT2" '"error":{"message":"prefill failed: '
server_case "anthropic" /v1/messages "$MSGS" "$MSGS2" '"type":"error","error":{"type":"[a-z_]*","message":"prefill failed: '
server_case "--parallel 2, stream" /v1/chat/completions "$CHAT" "$STREAM" '"error":{"message":"prefill failed: ' --parallel 2

# 2. the CLI: two turns through a FIFO, the file cut between them
fresh
mkfifo "$T/in"
"$BD"/ds4 -m "$T/m.gguf" --ctx 1024 -n 4 -t "$THR" < "$T/in" > "$T/out" 2> "$T/err" &
CLI=$!
exec 3> "$T/in"
echo "hello" >&3
for _ in $(seq 600); do grep -q '^\[prefill' "$T/err" && break; kill -0 "$CLI" 2>/dev/null || break; sleep 0.1; done
grep -q '^\[prefill' "$T/err" || bad "ds4: the first turn did not complete"
cut_tail
echo "something else entirely" >&3
echo "a third turn that must not run" >&3
exec 3>&-
wait_exit "$CLI" 60
if [ "$STATUS" = 1 ] && grep -q "^ds4: $T/m.gguf: the model file was truncated while in use: byte [0-9]* (tensor output.weight, bytes" "$T/err" &&
   [ "$(grep -c '^\[prefill' "$T/err")" = 1 ] && clean_log "$T/err"; then
    ok "ds4: the turn after the cut prints the file, tensor and bytes, and ds4 exits with status 1"
else
    bad "ds4: exit status $STATUS (135 = SIGBUS)"; cat "$T/err"
fi

# 3. --ssd-streaming: the expert read fails with the details
fresh
start_server "$T/log" --ssd-streaming-cache-experts 1B
if [ -n "$URL" ]; then
    c1=$(post /v1/chat/completions "$CHAT" "$T/r1")
    cut_half
    c2=$(post /v1/chat/completions "$CHAT2" "$T/r2")
    h=$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$URL/health")
    pat='m.gguf: cannot read routed expert [0-9]* of layer [0-9]* (tensor blk\.[0-9]*\.ffn_[a-z]*_exps\.weight, bytes [0-9]*\.\.[0-9]*): the file ends at byte [0-9]*: it was truncated or replaced while in use'
    if [ "$c1" = 200 ] && [ "$c2" = 500 ] && grep -q "prefill failed: $T/$pat" "$T/r2" && [ "$h" = 200 ]; then
        ok "--ssd-streaming server: HTTP 500 '$(grep -o 'm.gguf: cannot read[^"]*' "$T/r2" | head -c 170)', /health still 200"
    else
        bad "--ssd-streaming server: HTTP $c1 then $c2, /health $h: $(head -c 600 "$T/r2")"
    fi
    kill -TERM "$SRV"
    wait_exit "$SRV" 20
    SRV=""
    [ "$STATUS" = 0 ] && clean_log "$T/log" && ok "--ssd-streaming server: SIGTERM, exit status 0" \
        || { bad "--ssd-streaming server: exit status $STATUS"; tail -n 20 "$T/log"; }
else
    bad "--ssd-streaming: the server did not start"; cat "$T/log"
fi
fresh
rm -f "$T/in"; mkfifo "$T/in"
"$BD"/ds4 -m "$T/m.gguf" --ssd-streaming-cache-experts 1B --ctx 1024 -n 4 -t "$THR" < "$T/in" > "$T/out" 2> "$T/err" &
CLI=$!
exec 3> "$T/in"
echo "hello" >&3
for _ in $(seq 600); do grep -q '^\[prefill' "$T/err" && break; kill -0 "$CLI" 2>/dev/null || break; sleep 0.1; done
cut_half
echo "something else entirely" >&3
exec 3>&-
wait_exit "$CLI" 60
if grep -q "^ds4: $T/$pat" "$T/err" && clean_log "$T/err" && [ "$STATUS" != 124 ] && [ "$STATUS" -lt 128 ]; then
    ok "--ssd-streaming ds4: '$(grep -o 'm.gguf: cannot read.*' "$T/err" | head -c 120)...'"
else
    bad "--ssd-streaming ds4: exit status $STATUS"; cat "$T/err"
fi

[ "$fail" = 0 ] && echo "t_filefault: all passed" || echo "t_filefault: $fail failed"
[ "$fail" = 0 ]
