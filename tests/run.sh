#!/usr/bin/env bash
# Runs every test of ds4: the C unit/golden tests ($DS4_BUILD_DIR/tests/test_*)
# and the script tests (tests/t_*.sh).  Called by `make test` (and CI), once
# for the optimized tree and once for the DEBUG=1 (ASan/UBSan) tree.
# Needs ../shared (the oracles) beside the checkout; DS4_SHARED overrides.
#
# Environment (set by the Makefile):
#   DS4_BIN_DIR     where ds4, ds4-server, ... are (default .)
#   DS4_BUILD_DIR   the build tree holding tests/test_* (default build)
#   DS4_DEBUG_BUILD 1 for the sanitizer tree: UBSan reports then fail the
#                   program that hits them, and the slow parts of some
#                   script tests are trimmed (they check DS4_DEBUG_BUILD)
#   DS4_TESTS       optional: only the tests whose names match this regex
set -u
cd "$(dirname "$0")/.."
export DS4_SHARED="${DS4_SHARED:-../shared}"
export DS4_BIN_DIR="${DS4_BIN_DIR:-.}"
export DS4_BUILD_DIR="${DS4_BUILD_DIR:-build}"
export DS4_DEBUG_BUILD="${DS4_DEBUG_BUILD:-0}"
if [ ! -d "$DS4_SHARED/golden" ]; then
    echo "tests: $DS4_SHARED/golden not found (set DS4_SHARED)" >&2
    exit 1
fi
if [ "$DS4_DEBUG_BUILD" = 1 ]; then
    # A sanitizer finding must fail the test, not scroll by in a log: UBSan
    # aborts at the first report; ASan (leaks included) exits non-zero.
    export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
    export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
    # The test servers compute ~9x slower under ASan: two threads instead of
    # one (logits are the same bits at any thread count) took t_server,
    # t_server_kv and t_server_parallel from 229, 201 and 121 s to 145-166,
    # 113-130 and 71-80 s on the 2-core VM.
    export DS4_SERVER_THREADS="${DS4_SERVER_THREADS:-2}"
fi
LOGS="$DS4_BUILD_DIR/logs"
pass=0; fail=0; failed=()
run() {
    local name="$1"; shift
    if [ -n "${DS4_TESTS:-}" ] && ! [[ "$name" =~ $DS4_TESTS ]]; then return; fi
    local t0=$(date +%s)
    if "$@" > "$LOGS/$name.log" 2>&1; then
        pass=$((pass+1)); echo "PASS $name ($(( $(date +%s) - t0 ))s)"
    else
        fail=$((fail+1)); failed+=("$name"); echo "FAIL $name ($(( $(date +%s) - t0 ))s)"
        tail -n 50 "$LOGS/$name.log" | sed 's/^/    /'
    fi
}
mkdir -p "$LOGS"
echo "tests: binaries in $DS4_BIN_DIR, test programs in $DS4_BUILD_DIR/tests$([ "$DS4_DEBUG_BUILD" = 1 ] && echo ' (ASan/UBSan)')"
for t in "$DS4_BUILD_DIR"/tests/test_*; do
    [ -x "$t" ] || continue
    case "$t" in *.o|*.d) continue ;; esac
    run "$(basename "$t")" "$t"
done
skipped=()
for t in tests/t_*.sh; do
    [ -f "$t" ] || continue
    # The sanitizer pass runs the script tests that start the binaries
    # through DS4_BIN_DIR; the others would run the optimized binaries a
    # second time and check nothing new, so they run in the optimized pass
    # only (their code paths get ASan/UBSan through the C tests and the
    # scripts that do use DS4_BIN_DIR).
    # A script marked `# ds4-test: optimized-only` (with its reason) is one
    # whose sanitizer run would cost minutes of CI for code the C tests and
    # the other scripts already run under ASan/UBSan.
    if [ "$DS4_DEBUG_BUILD" = 1 ] && { ! grep -q DS4_BIN_DIR "$t" || grep -q '^# ds4-test: optimized-only' "$t"; }; then
        skipped+=("$(basename "$t" .sh)"); continue
    fi
    run "$(basename "$t" .sh)" bash "$t"
done
[ ${#skipped[@]} -eq 0 ] || echo "tests: sanitizer pass: not repeated (optimized binaries only, or marked optimized-only): ${skipped[*]}"
echo "tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ] || { echo "failed: ${failed[*]}"; exit 1; }
