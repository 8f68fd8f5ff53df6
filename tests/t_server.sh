#!/usr/bin/env bash
# ds4-server end to end: starts ds4-server on the tiny random-weight model
# with --test-mode on a free port, waits for /health, runs the Node tests in
# tests/server (official openai and @anthropic-ai/sdk clients), and always
# stops the server.  Run from the repository root (tests/run.sh does).
# Needs node + npm; installs tests/server/node_modules with `npm ci` when
# missing.  DS4_SERVER_BIN runs another build of the server (e.g. an ASan
# one); DS4_TEST_FILES picks test files; DS4_SERVER_ARGS adds flags;
# DS4_SERVER_THREADS sets the servers' -t (default 1; tests/run.sh uses 2
# in the sanitizer pass).
set -u
cd "$(dirname "$0")/.."
BD="${DS4_BIN_DIR:-.}"   # where the binaries are (build/debug/bin under DEBUG=1)
SHARED="${DS4_SHARED:-../shared}"
MODEL="$SHARED/golden/models/tiny-a-q2.gguf"
BIN="${DS4_SERVER_BIN:-$BD/ds4-server}"
[ -x "$BIN" ] || { echo "t_server: $BIN not built" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "t_server: $MODEL missing" >&2; exit 1; }
command -v node >/dev/null || { echo "t_server: node not found" >&2; exit 1; }

if [ ! -d tests/server/node_modules ]; then
    (cd tests/server && npm ci --no-audit --no-fund) || { echo "t_server: npm ci failed" >&2; exit 1; }
fi

LOG=$(mktemp "${TMPDIR:-/tmp}/ds4-server-test.XXXXXX")
# --chunk 64: prefill checks for cancellation every 64 tokens (the
# cancellation test aborts in the middle of a long prefill)
"$BIN" -m "$MODEL" --port 0 --ctx 4096 --chunk 64 -t "${DS4_SERVER_THREADS:-1}" --test-mode \
    --max-body-bytes 1048576 --max-queue 32 --keepalive 1 ${DS4_SERVER_ARGS:-} 2> "$LOG" &
PID=$!
cleanup() {
    kill "$PID" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$PID" 2>/dev/null
    wait "$PID" 2>/dev/null
}
NODE_OUT=""
trap 'cleanup; rm -f "$LOG" $NODE_OUT' EXIT

URL=""
for _ in $(seq 300); do
    URL=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$LOG" | head -n1)
    [ -n "$URL" ] && break
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.1
done
if [ -z "$URL" ]; then
    echo "t_server: the server did not start" >&2
    cat "$LOG" >&2
    exit 1
fi
for _ in $(seq 100); do
    curl -sf "$URL/health" >/dev/null 2>&1 && break
    node -e "fetch('$URL/health').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))" 2>/dev/null && break
    sleep 0.1
done

case "$BIN" in /*) ABS="$BIN" ;; *) ABS="$PWD/$BIN" ;; esac
export DS4_URL="$URL" DS4_SERVER="$ABS" DS4_MODEL="$(realpath "$MODEL")"
cd tests/server
# one file at a time: the tests share the server (and its live session)
conc=""
node --help 2>/dev/null | grep -q -- --test-concurrency && conc="--test-concurrency=1"
# kvcache.test.mjs starts its own servers: tests/t_server_kv.sh runs it;
# parallel.test.mjs needs --parallel 4: tests/t_server_parallel.sh runs it;
# webui.test.mjs drives a browser: tests/t_webui.sh runs it
files="${DS4_TEST_FILES:-$(ls *.test.mjs | grep -vE '^(kvcache|parallel|webui)\.test\.mjs$')}"
NODE_OUT=$(mktemp "${TMPDIR:-/tmp}/ds4-server-node.XXXXXX")
node --test $conc --test-reporter=spec $files 2>&1 | tee "$NODE_OUT"
rc=${PIPESTATUS[0]}
cd ../..

# a clean shutdown is part of the test: SIGTERM -> exit status 0, and no
# sanitizer report in the log (when DS4_SERVER_BIN is an ASan build)
kill -TERM "$PID" 2>/dev/null
status=124
for _ in $(seq 100); do
    if ! kill -0 "$PID" 2>/dev/null; then wait "$PID"; status=$?; break; fi
    sleep 0.1
done
if [ "$status" -ne 0 ]; then
    echo "t_server: the server did not shut down cleanly (status $status)"
    rc=1
fi
if grep -qE "ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:" "$LOG"; then
    echo "t_server: sanitizer report in the server log"
    rc=1
fi
if [ $rc -ne 0 ]; then
    echo "--- server log (tail) ---"
    tail -n 60 "$LOG"
    # last, so that the tail tests/run.sh prints shows which test failed
    if [ -n "$NODE_OUT" ] && grep -q "failing tests:" "$NODE_OUT"; then
        echo "--- failing tests ---"
        sed -n '/failing tests:/,$p' "$NODE_OUT" | head -n 40
    fi
fi
exit $rc
