#!/usr/bin/env bash
# ds4-server --parallel 4 end to end: tests/t_server.sh (the same server
# start, clean-shutdown and sanitizer checks) on tests/server/parallel.test.mjs
# with four live sessions, 32-token steps and 64-token prefill chunks (a
# long prompt then takes many steps, during which the other streams must
# keep flowing).  Honours DS4_BIN_DIR / DS4_SERVER_BIN like t_server.sh.
set -u
cd "$(dirname "$0")/.."
DS4_TEST_FILES=parallel.test.mjs \
DS4_SERVER_ARGS="--parallel 4 --step-tokens 32 ${DS4_SERVER_ARGS:-}" \
    exec bash tests/t_server.sh
