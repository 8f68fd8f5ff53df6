#!/usr/bin/env bash
# Runs every test of ds4: the C unit/golden tests (build/tests/test_*) and
# the script tests (tests/t_*.sh).  Called by `make test` (and CI).
# Needs ../shared (the oracles) beside the checkout; DS4_SHARED overrides.
set -u
cd "$(dirname "$0")/.."
export DS4_SHARED="${DS4_SHARED:-../shared}"
if [ ! -d "$DS4_SHARED/golden" ]; then
    echo "tests: $DS4_SHARED/golden not found (set DS4_SHARED)" >&2
    exit 1
fi
pass=0; fail=0; failed=()
run() {
    local name="$1"; shift
    local t0=$(date +%s)
    if "$@" > "build/logs/$name.log" 2>&1; then
        pass=$((pass+1)); echo "PASS $name ($(( $(date +%s) - t0 ))s)"
    else
        fail=$((fail+1)); failed+=("$name"); echo "FAIL $name ($(( $(date +%s) - t0 ))s)"
        tail -n 30 "build/logs/$name.log" | sed 's/^/    /'
    fi
}
mkdir -p build/logs
for t in build/tests/test_*; do
    [ -x "$t" ] || continue
    run "$(basename "$t")" "$t"
done
for t in tests/t_*.sh; do
    [ -f "$t" ] || continue
    run "$(basename "$t" .sh)" bash "$t"
done
echo "tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ] || { echo "failed: ${failed[*]}"; exit 1; }
