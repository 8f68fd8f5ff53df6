#!/usr/bin/env bash
# The chat page of ds4-server in a real browser: runs
# tests/server/webui.test.mjs (Debian's Chromium, headless, driven by
# playwright-core from tests/server's pinned packages), which starts its own
# --test-mode servers on the tiny random-weight model.  Screenshots land in
# the test log directory ($DS4_BUILD_DIR/logs/webui-*.png; the log names
# them).  Skips only when Chromium is not installed (tools/deps.sh --test
# installs it).
set -u
cd "$(dirname "$0")/.."
BD="${DS4_BIN_DIR:-.}"
SHARED="${DS4_SHARED:-../shared}"
MODEL="$SHARED/golden/models/tiny-a-q2.gguf"
BIN="${DS4_SERVER_BIN:-$BD/ds4-server}"
[ -x "$BIN" ] || { echo "t_webui: $BIN not built" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "t_webui: $MODEL missing" >&2; exit 1; }
command -v node >/dev/null || { echo "t_webui: node not found" >&2; exit 1; }
if [ ! -x /usr/lib/chromium/chromium ] && [ ! -x /usr/bin/chromium ] && [ -z "${DS4_CHROMIUM:-}" ]; then
    echo "SKIP t_webui: Chromium is not installed (apt-get install chromium, or sh tools/deps.sh --test)"
    exit 0
fi
if [ ! -d tests/server/node_modules/playwright-core ]; then
    (cd tests/server && npm ci --no-audit --no-fund) || { echo "t_webui: npm ci failed" >&2; exit 1; }
fi
case "$BIN" in /*) ABS="$BIN" ;; *) ABS="$PWD/$BIN" ;; esac
SHOTS="$PWD/${DS4_BUILD_DIR:-build}/logs"
mkdir -p "$SHOTS"
export DS4_SERVER="$ABS" DS4_MODEL="$(realpath "$MODEL")" DS4_SHOT_DIR="$SHOTS"
cd tests/server
conc=""
node --help 2>/dev/null | grep -q -- --test-concurrency && conc="--test-concurrency=1"
node --test $conc --test-reporter=spec webui.test.mjs
