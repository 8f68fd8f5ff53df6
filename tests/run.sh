#!/usr/bin/env bash
# Runs every test of ds4: the C unit/golden tests ($DS4_BUILD_DIR/tests/test_*)
# and the script tests (tests/t_*.sh), several at a time.  Called by
# `make test` (and CI) for both trees at once -- the optimized build and the
# DEBUG=1 (ASan/UBSan) one -- and by `make test-opt` / `make DEBUG=1 test`
# for one of them.  Needs ../shared (the oracles) beside the checkout;
# DS4_SHARED overrides.
#
# Environment (set by the Makefile):
#   DS4_BIN_DIR     where ds4, ds4-server, ... are (default .)
#   DS4_BUILD_DIR   the build tree holding tests/test_* (default build)
#   DS4_DEBUG_BUILD 1 when that tree is the sanitizer one: UBSan reports then
#                   fail the program that hits them, and the slow parts of
#                   some script tests are trimmed (they check DS4_DEBUG_BUILD)
#   DS4_TEST_PASSES "opt debug": both trees in one run, the sanitizer tree
#                   from DS4_DEBUG_BIN_DIR / DS4_DEBUG_BUILD_DIR (default
#                   build/debug/bin, build/debug); unset: the one tree above
#   DS4_TEST_JOBS   tests run at once (default: the CPU count, at most 4)
#   DS4_TESTS       optional: only the tests whose names match this regex
#   DS4_THREADS     the engine's default thread count in the tests (default:
#                   the CPU count / DS4_TEST_JOBS, at least 1)
#
# Why in parallel: many tests are one thread for much of their time (Python
# references, Node clients waiting on a server, single-threaded C tests),
# so two at a time keep the 2-core CI machine busy.  Tests
# share nothing: temporary directories, ports (--port 0) and process names
# are their own.  The longest start first (EST below, seconds measured on a
# 2-vCPU Zen 1 VM) so that the run does not end on one long test.
set -u
cd "$(dirname "$0")/.."
export DS4_SHARED="${DS4_SHARED:-../shared}"
if [ ! -d "$DS4_SHARED/golden" ]; then
    echo "tests: $DS4_SHARED/golden not found (set DS4_SHARED)" >&2
    exit 1
fi

# the passes: kind, binaries, test programs
P_KIND=(); P_BIN=(); P_BUILD=()
if [ -n "${DS4_TEST_PASSES:-}" ]; then
    for k in $DS4_TEST_PASSES; do
        case "$k" in
            opt) P_KIND+=(opt); P_BIN+=("${DS4_BIN_DIR:-.}"); P_BUILD+=("${DS4_BUILD_DIR:-build}") ;;
            debug) P_KIND+=(debug); P_BIN+=("${DS4_DEBUG_BIN_DIR:-build/debug/bin}")
                   P_BUILD+=("${DS4_DEBUG_BUILD_DIR:-build/debug}") ;;
            *) echo "tests: unknown pass '$k' in DS4_TEST_PASSES (opt, debug)" >&2; exit 1 ;;
        esac
    done
else
    [ "${DS4_DEBUG_BUILD:-0}" = 1 ] && P_KIND+=(debug) || P_KIND+=(opt)
    P_BIN+=("${DS4_BIN_DIR:-.}"); P_BUILD+=("${DS4_BUILD_DIR:-build}")
fi
NP=${#P_KIND[@]}

JOBS="${DS4_TEST_JOBS:-}"
if [ -z "$JOBS" ]; then
    JOBS=$(nproc 2>/dev/null || echo 2)
    [ "$JOBS" -gt 4 ] && JOBS=4
fi
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || { echo "tests: DS4_TEST_JOBS must be a positive integer" >&2; exit 1; }
# `wait -n -p` (which test ended) is bash 5.1; an older bash runs one at a time
NEWBASH=0
[ "${BASH_VERSINFO[0]}" -gt 5 ] || { [ "${BASH_VERSINFO[0]}" -eq 5 ] && [ "${BASH_VERSINFO[1]}" -ge 1 ]; } && NEWBASH=1
[ "$NEWBASH" = 1 ] || JOBS=1
# Each test's engine gets its share of the CPUs as its default thread count
# (ds4_default_threads; an explicit -t still wins): two tests' pools of
# two threads on two cores wait on descheduled threads at every section
# (t_oracle: 171 s alone, 445 s beside another test of the suite).
NCPU=$(nproc 2>/dev/null || echo 1)
export DS4_THREADS="${DS4_THREADS:-$(( NCPU / JOBS > 0 ? NCPU / JOBS : 1 ))}"

# The sanitizer pass: a finding must fail the test, not scroll by in a log:
# UBSan aborts at the first report; ASan (leaks included) exits non-zero.
SAN_UBSAN="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
SAN_ASAN="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
# The test servers compute several times slower under ASan: two threads
# instead of one (logits are the same bits at any thread count) took
# t_server, t_server_kv and t_server_parallel from 229, 201 and 121 s to
# 145-166, 113-130 and 71-80 s on the 2-core VM (an -O0 build, run alone).
SAN_THREADS="${DS4_SERVER_THREADS:-2}"

# Expected seconds of the long tests (both trees in one pool of 2 on the
# 2-vCPU VM, 2026-12-03, so with the other core busy); others 5.
declare -A EST=(
    [debug/t_oracle]=374 [debug/t_server]=341 [debug/t_server_kv]=241
    [debug/test_session]=192 [debug/t_server_parallel]=160
    [debug/test_mtp]=148 [debug/t_bench]=147 [debug/t_mtp]=107
    [debug/test_spec]=93 [debug/test_kvstore]=71 [debug/t_cli]=62
    [debug/t_kvcache]=48 [debug/t_agent_tmux]=27 [debug/t_quality]=26
    [debug/t_steer]=19 [debug/t_limits]=16 [debug/test_kernels]=14
    [debug/t_profile]=12 [debug/t_synth]=10 [debug/test_expert_cache]=10
    [debug/test_quant]=9 [debug/test_batch]=8
    [debug/t_ssd]=60 [debug/t_spec]=35 [debug/t_server_quality]=12
    [opt/t_realshape]=326 [opt/t_oracle]=290 [opt/test_mtp]=231
    [opt/test_spec]=103 [opt/t_mpi]=86 [opt/t_glm_mpi]=25 [opt/t_eval]=70 [opt/t_agent_lookup]=59
    [opt/t_server]=53 [opt/t_mtp]=53 [opt/t_agent_session]=53
    [opt/test_session]=53 [opt/t_agent]=50 [opt/t_quantize]=46 [opt/t_ssd]=42
    [opt/t_cli]=38 [opt/t_server_kv]=33 [opt/t_server_parallel]=32
    [opt/t_bench]=30 [opt/t_spec]=21 [opt/t_kvcache]=12 [opt/t_quality]=11
    [opt/t_llamacpp]=68 [debug/t_llamacpp]=122 [debug/t_agent_confine]=120
    [opt/t_agent_confine]=27 [debug/t_agent_limits]=55 [debug/t_agent_store]=32
    [opt/t_webui]=20 [debug/t_webui]=60 [opt/t_docs]=2 [debug/t_docs]=2 [opt/t_layers]=2 [debug/t_layers]=2
    [opt/t_get]=15 [debug/t_get]=20 [opt/t_glm_ref]=35 [opt/t_glm_tokenizer]=10 [debug/t_glm_tokenizer]=30
    [opt/t_glm_engine]=25 [debug/t_glm_engine]=60 [opt/t_glm_front]=25 [debug/t_glm_front]=170
    [opt/t_glm_synth]=10 [opt/t_quantize_glm]=18 [debug/t_quantize_glm]=80
    [opt/t_glm_mtp]=100 [debug/t_glm_mtp]=260 [opt/t_glm_kv]=45 [debug/t_glm_kv]=110
    [opt/t_g5n_engine]=30 [debug/t_g5n_engine]=90 [opt/t_g5n_mtp]=100 [debug/t_g5n_mtp]=260 [opt/t_kquant]=45 [debug/t_kquant]=190
)

# the queue: one entry per (pass, test)
Q_PASS=(); Q_NAME=(); Q_CMD=(); skipped=()
wanted() { [ -z "${DS4_TESTS:-}" ] || [[ "$1" =~ $DS4_TESTS ]]; }
queue() {   # queue PASS NAME CMD...
    local p="$1" name="$2"; shift 2
    wanted "$name" || return 0
    Q_PASS+=("$p"); Q_NAME+=("$name"); Q_CMD+=("$(printf '%q ' "$@")")
}
for ((p = 0; p < NP; p++)); do
    mkdir -p "${P_BUILD[p]}/logs"
    for t in "${P_BUILD[p]}"/tests/test_*; do
        [ -x "$t" ] || continue
        case "$t" in *.o|*.d) continue ;; esac
        queue "$p" "$(basename "$t")" "$t"
    done
    for t in tests/t_*.sh; do
        [ -f "$t" ] || continue
        # The sanitizer pass runs the script tests that start the binaries
        # through DS4_BIN_DIR; the others would run the optimized binaries
        # a second time and check nothing new, so they run in the optimized
        # pass only (their code paths get ASan/UBSan through the C tests and
        # the scripts that do use DS4_BIN_DIR).  A script marked
        # `# ds4-test: optimized-only` (with its reason) is one whose
        # sanitizer run would cost minutes of CI for code the C tests and
        # the other scripts already run under ASan/UBSan.
        if [ "${P_KIND[p]}" = debug ] && { ! grep -q DS4_BIN_DIR "$t" || grep -q '^# ds4-test: optimized-only' "$t"; }; then
            wanted "$(basename "$t" .sh)" && skipped+=("$(basename "$t" .sh)")
            continue
        fi
        queue "$p" "$(basename "$t" .sh)" bash "$t"
    done
done
NQ=${#Q_NAME[@]}

# longest first (stable for equal estimates)
order=$(for ((i = 0; i < NQ; i++)); do
    e=${EST[${P_KIND[${Q_PASS[i]}]}/${Q_NAME[i]}]:-5}
    printf '%d %d\n' "$e" "$i"
done | sort -k1,1nr -k2,2n | cut -d' ' -f2)

# The server tests install their Node clients when missing; do it once here
# rather than in two tests at once.
# (again when an older install lacks a package the lock file now pins)
if [ ! -d tests/server/node_modules/playwright-core ] && printf '%s\n' "${Q_NAME[@]}" | grep -qE '^t_(server|webui)'; then
    (cd tests/server && npm ci --no-audit --no-fund) > /dev/null 2>&1 ||
        echo "tests: npm ci in tests/server failed (the server tests will say why)"
fi

for ((p = 0; p < NP; p++)); do
    echo "tests: binaries in ${P_BIN[p]}, test programs in ${P_BUILD[p]}/tests$([ "${P_KIND[p]}" = debug ] && echo ' (ASan/UBSan)')"
done
echo "tests: $NQ to run, $JOBS at a time, DS4_THREADS=$DS4_THREADS"

label() {   # the name a result line shows: the pass too when there are two
    if [ "$NP" -gt 1 ]; then echo "${Q_NAME[$1]} [${P_KIND[${Q_PASS[$1]}]}]"; else echo "${Q_NAME[$1]}"; fi
}
log_of() { echo "${P_BUILD[${Q_PASS[$1]}]}/logs/${Q_NAME[$1]}.log"; }

start() {   # start queue entry $1 in the background
    local i=$1 p=${Q_PASS[$1]}
    (
        export DS4_BIN_DIR="${P_BIN[p]}" DS4_BUILD_DIR="${P_BUILD[p]}"
        if [ "${P_KIND[p]}" = debug ]; then
            export DS4_DEBUG_BUILD=1 UBSAN_OPTIONS="$SAN_UBSAN" ASAN_OPTIONS="$SAN_ASAN" DS4_SERVER_THREADS="$SAN_THREADS"
        else
            export DS4_DEBUG_BUILD=0
        fi
        eval "exec ${Q_CMD[i]}"
    ) > "$(log_of "$i")" 2>&1 < /dev/null &
    PID_OF[$!]=$i
    LAST=$!
    T0[i]=$(date +%s)
    running=$((running + 1))
}

declare -A PID_OF=()
T0=(); TIMES=(); running=0; pass=0; fail=0; failed=()
reap() {   # wait for one test to end and report it
    local pid rc i
    if [ "$NEWBASH" = 1 ]; then wait -n -p pid; rc=$?; else pid=$LAST; wait "$pid"; rc=$?; fi
    i=${PID_OF[$pid]}; unset "PID_OF[$pid]"
    running=$((running - 1))
    local secs=$(( $(date +%s) - T0[i] ))
    TIMES+=("$secs $(label "$i")")
    if [ "$rc" -eq 0 ]; then
        pass=$((pass + 1)); echo "PASS $(label "$i") (${secs}s)"
    else
        fail=$((fail + 1)); failed+=("$(label "$i")"); echo "FAIL $(label "$i") (${secs}s)"
        tail -n 50 "$(log_of "$i")" | sed 's/^/    /'
    fi
}

for i in $order; do
    while [ "$running" -ge "$JOBS" ]; do reap; done
    start "$i"
done
while [ "$running" -gt 0 ]; do reap; done

# the slowest, to keep EST above up to date
printf '%s\n' "${TIMES[@]}" | sort -k1,1nr | head -n 8 | awk '{ t = $1; $1 = ""; s = s sep substr($0, 2) " " t "s"; sep = ", " } END { if (s != "") print "tests: slowest: " s }'
[ ${#skipped[@]} -eq 0 ] || echo "tests: sanitizer pass: not repeated (optimized binaries only, or marked optimized-only): ${skipped[*]}"
echo "tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ] || { echo "failed: ${failed[*]}"; exit 1; }
