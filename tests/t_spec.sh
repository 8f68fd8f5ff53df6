#!/usr/bin/env bash
# Speculative decoding from the command line, on the tiny model:
#  - ds4 --lookup N prints exactly what plain decoding prints, greedy and
#    seeded sampling, over a few hundred tokens (the prompt repeats so that
#    lookups find drafts), and reports the acceptance in the run summary;
#  - --lookup out of range is a clear usage error;
#  - ds4-bench --spec N measures verification passes and checks both
#    speculative decodes (prompt lookup, always-right drafts) against plain
#    greedy decoding (it fails loudly when they differ).
set -u
cd "$(dirname "$0")/.."
S="${DS4_SHARED:-../shared}"
M="$S/golden/models/tiny-a-q2.gguf"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail+1)); }

IDS="$(seq -s, 100 160),$(seq -s, 100 160),$(seq -s, 100 130)"
for mode in "--temp 0" "--temp 1 --seed 7" "--temp 0.7 --top-k 40 --seed 3"; do
    # shellcheck disable=SC2086
    ./ds4 -m "$M" --tokens "$IDS" $mode -n 300 --ctx 1024 > "$T/plain.out" 2> "$T/plain.err"
    # shellcheck disable=SC2086
    ./ds4 -m "$M" --tokens "$IDS" $mode -n 300 --ctx 1024 --lookup 8 > "$T/spec.out" 2> "$T/spec.err"
    if cmp -s "$T/plain.out" "$T/spec.out" && [ -s "$T/plain.out" ]; then
        ok "--lookup 8 ($mode): output identical to plain decoding"
    else
        bad "--lookup 8 ($mode): output differs"
    fi
    if grep -q '^\[lookup: [0-9]* passes, [0-9]* drafted, [0-9]* accepted' "$T/spec.err"; then
        ok "--lookup ($mode): acceptance in the run summary"
    else
        bad "--lookup ($mode): no acceptance line"; cat "$T/spec.err"
    fi
done

./ds4 -m "$M" --tokens 1,2,3 --lookup 99 > "$T/o" 2> "$T/e"
rc=$?
if [ "$rc" -eq 2 ] && grep -q -- "--lookup: bad value" "$T/e"; then ok "--lookup 99 refused"; else bad "--lookup 99: rc $rc"; cat "$T/e"; fi

if ./ds4-bench -m "$M" --prompt-file bench/data/italian_sample.txt -t 1 --no-warmup --no-probe \
        --ctx-start 150 --ctx-max 150 --gen-tokens 40 --spec 4 > "$T/b.csv" 2> "$T/b.err"; then
    n=$(grep -c 'verification pass of' "$T/b.err")
    if [ "$n" -eq 3 ] && grep -q 'oracle drafts: 40 tokens in 8 passes, 100.0 %' "$T/b.err" &&
       grep -q 'lookup drafts: 40 tokens' "$T/b.err"; then
        ok "ds4-bench --spec: pass costs and both speculative decodes"
    else
        bad "ds4-bench --spec output"; cat "$T/b.err"
    fi
else
    bad "ds4-bench --spec failed"; cat "$T/b.err"
fi
[ "$fail" -eq 0 ] && echo "t_spec: all ok" || echo "t_spec: $fail failed"
exit $((fail != 0))
