#!/usr/bin/env bash
# ds4-server with the disk KV cache, end to end: runs
# tests/server/kvcache.test.mjs, which starts its own servers (several per
# test, on fresh directories: restarts, a shared directory, fault
# injection) on the tiny random-weight model.  Run from the repository root
# (tests/run.sh does).  Needs node + npm (installs tests/server/node_modules
# with `npm ci` when missing).  DS4_SERVER_BIN runs another build of the
# server (e.g. an ASan one: every test checks that its servers exit with
# status 0 and print no sanitizer report).
set -u
cd "$(dirname "$0")/.."
BD="${DS4_BIN_DIR:-.}"   # where the binaries are (build/debug/bin under DEBUG=1)
SHARED="${DS4_SHARED:-../shared}"
MODEL="$SHARED/golden/models/tiny-a-q2.gguf"
BIN="${DS4_SERVER_BIN:-$BD/ds4-server}"
[ -x "$BIN" ] || { echo "t_server_kv: $BIN not built" >&2; exit 1; }
[ -x $BD/ds4-kv ] || { echo "t_server_kv: $BD/ds4-kv not built" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "t_server_kv: $MODEL missing" >&2; exit 1; }
command -v node >/dev/null || { echo "t_server_kv: node not found" >&2; exit 1; }
if [ ! -d tests/server/node_modules ]; then
    (cd tests/server && npm ci --no-audit --no-fund) || { echo "t_server_kv: npm ci failed" >&2; exit 1; }
fi
case "$BIN" in /*) ABS="$BIN" ;; *) ABS="$PWD/$BIN" ;; esac
export DS4_SERVER="$ABS" DS4_MODEL="$(realpath "$MODEL")" DS4_KV_TOOL="$(realpath "$BD/ds4-kv")" \
    DS4_SYNTH="$(realpath "$BD/ds4-synth")" DS4_VOCAB="$PWD/$SHARED/vocab/mini-vocab.gguf"
cd tests/server
conc=""
node --help 2>/dev/null | grep -q -- --test-concurrency && conc="--test-concurrency=1"
node --test $conc --test-reporter=spec kvcache.test.mjs
