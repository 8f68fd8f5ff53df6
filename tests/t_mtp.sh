#!/usr/bin/env bash
# MTP drafts (docs/MTP.md) from the command line, on a tiny model that
# ds4-synth writes with --mtp:
#  - ds4 --mtp-draft N prints exactly what plain decoding prints under
#    greedy decoding, 300 tokens; under seeded sampling (sampled drafts,
#    the speculative-sampling rule: same distribution, other draws) two
#    runs with the same seed print the same text, a run with another seed
#    another text; both report the acceptance in the run summary;
#  - the same block from a sidecar: the model split by tests/mtp_split.py
#    into a main file without mtp.0.* and a sidecar, loaded with --mtp FILE,
#    gives the same output;
#  - bad inputs are clear errors: --mtp-draft on a model without a block,
#    --mtp naming a file with no block, one of another shape (every
#    misshapen tensor listed), a missing file, --mtp-draft out of range;
#  - ds4-bench --mtp-draft times one MTP step and checks the MTP-drafted
#    decode against plain greedy decoding;
#  - ds4-server --mtp FILE: a greedy request with "ds4_mtp_draft": 2
#    returns the text of one with 0; a seeded sampled one (sampled drafts)
#    the same text twice; /metrics counts the passes; ds4_mtp_draft on a
#    server whose model has no block is a 400.
set -u
cd "$(dirname "$0")/.."
S="${DS4_SHARED:-../shared}"
B="${DS4_BIN_DIR:-.}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail+1)); }
N=300
MODES=("--temp 0" "--temp 1 --seed 7")
# the sanitizer pass: shorter, greedy only (the C test covers sampling)
[ "${DS4_DEBUG_BUILD:-0}" = 1 ] && { N=60; MODES=("--temp 0"); }

"$B/ds4-synth" --preset tiny --recipe q2 --mtp --seed 3 -o "$T/m.gguf" > /dev/null || { bad "ds4-synth --mtp"; exit 1; }
/usr/bin/python3 tests/mtp_split.py "$T/m.gguf" "$T/main.gguf" "$T/side.gguf" || bad "mtp_split"
M="$T/m.gguf"

IDS="$(seq -s, 100 160),$(seq -s, 100 130)"
for mode in "${MODES[@]}"; do
    # shellcheck disable=SC2086
    "$B/ds4" -m "$M" --tokens "$IDS" $mode -n $N --ctx 1024 > "$T/plain.out" 2> "$T/plain.err"
    # shellcheck disable=SC2086
    "$B/ds4" -m "$M" --tokens "$IDS" $mode -n $N --ctx 1024 --mtp-draft 2 > "$T/mtp.out" 2> "$T/mtp.err"
    if [ "$mode" = "--temp 0" ]; then
        if cmp -s "$T/plain.out" "$T/mtp.out" && [ -s "$T/plain.out" ]; then
            ok "--mtp-draft 2 ($mode): output identical to plain decoding"
        else
            bad "--mtp-draft 2 ($mode): output differs"
        fi
    else
        # shellcheck disable=SC2086
        "$B/ds4" -m "$M" --tokens "$IDS" $mode -n $N --ctx 1024 --mtp-draft 2 > "$T/mtp2.out" 2> /dev/null
        # shellcheck disable=SC2086
        "$B/ds4" -m "$M" --tokens "$IDS" ${mode/--seed 7/--seed 8} -n $N --ctx 1024 --mtp-draft 2 \
            > "$T/mtp3.out" 2> /dev/null
        if cmp -s "$T/mtp.out" "$T/mtp2.out" && [ -s "$T/mtp.out" ] && ! cmp -s "$T/mtp.out" "$T/mtp3.out"; then
            ok "--mtp-draft 2 ($mode): sampled drafts, same seed same output, other seed other output"
        else
            bad "--mtp-draft 2 ($mode): not reproducible"
        fi
    fi
    if grep -q '^\[mtp: [0-9]* passes, [0-9]* drafted, [0-9]* accepted' "$T/mtp.err"; then
        ok "--mtp-draft ($mode): acceptance in the run summary"
    else
        bad "--mtp-draft ($mode): no acceptance line"; cat "$T/mtp.err"
    fi
done
"$B/ds4" -m "$T/main.gguf" --mtp "$T/side.gguf" --tokens "$IDS" --temp 0 -n 60 --ctx 1024 \
    > "$T/side.out" 2> "$T/side.err"
"$B/ds4" -m "$M" --tokens "$IDS" --temp 0 -n 60 --ctx 1024 --mtp-draft 1 > "$T/one.out" 2> "$T/one.err"
if cmp -s "$T/side.out" "$T/one.out" && [ -s "$T/side.out" ] &&
   [ "$(grep '^\[mtp:' "$T/side.err")" = "$(grep '^\[mtp:' "$T/one.err")" ]; then
    ok "--mtp sidecar: same output and drafts as the block inside the model"
else
    bad "--mtp sidecar differs"; tail -3 "$T/side.err" "$T/one.err"
fi

expect_err() {   # expect_err NAME RC PATTERN -- command...
    local name="$1" want="$2" pat="$3"; shift 4
    "$@" > "$T/o" 2> "$T/e"
    local rc=$?
    if [ "$rc" -eq "$want" ] && grep -q -- "$pat" "$T/e"; then ok "$name"; else bad "$name: rc $rc"; cat "$T/e"; fi
}
expect_err "--mtp-draft without a block" 1 "has no MTP block" -- \
    "$B/ds4" -m "$T/main.gguf" --mtp-draft 2 --tokens 1,2 -n 2
expect_err "--mtp on a file with no block" 1 "no mtp.0.\* tensors" -- \
    "$B/ds4" -m "$T/main.gguf" --mtp "$T/main.gguf" --tokens 1,2 -n 2
expect_err "--mtp on a missing file" 1 "cannot open" -- \
    "$B/ds4" -m "$T/main.gguf" --mtp "$T/none.gguf" --tokens 1,2 -n 2
expect_err "--mtp-draft 99" 2 "--mtp-draft: bad value" -- \
    "$B/ds4" -m "$M" --mtp-draft 99 --tokens 1,2 -n 2
"$B/ds4-synth" --preset tiny --recipe f16 --mtp --set expert_feed_forward_length=96 -o "$T/o.gguf" > /dev/null &&
    /usr/bin/python3 tests/mtp_split.py "$T/o.gguf" "$T/o-main.gguf" "$T/o-side.gguf"
expect_err "--mtp of another shape" 1 "tensor mtp.0.ffn_gate_exps.weight has dims" -- \
    "$B/ds4" -m "$T/main.gguf" --mtp "$T/o-side.gguf" --tokens 1,2 -n 2

if "$B/ds4-bench" -m "$M" --prompt-file bench/data/italian_sample.txt -t 1 --no-warmup --no-probe \
        --ctx-start 150 --ctx-max 150 --gen-tokens 30 --mtp-draft 2 > "$T/b.csv" 2> "$T/b.err"; then
    if grep -q 'one MTP draft step' "$T/b.err" && grep -q 'mtp    drafts: 30 tokens' "$T/b.err"; then
        ok "ds4-bench --mtp-draft: MTP step cost and the MTP-drafted decode"
    else
        bad "ds4-bench --mtp-draft output"; cat "$T/b.err"
    fi
else
    bad "ds4-bench --mtp-draft failed"; cat "$T/b.err"
fi

start_server() {   # start_server LOG args...
    local log="$1"; shift
    "$B/ds4-server" --port 0 --ctx 2048 -t 1 "$@" 2> "$log" &
    PID=$!
    URL=""
    for _ in $(seq 300); do
        URL=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$log" | head -n1)
        [ -n "$URL" ] && break
        sleep 0.1
    done
}
P='"prompt": "uno due tre quattro cinque sei sette otto nove dieci", "max_tokens": 80'
start_server "$T/server.log" -m "$T/main.gguf" --mtp "$T/side.gguf" --mtp-draft 0
if [ -z "$URL" ]; then
    bad "ds4-server --mtp did not start"; cat "$T/server.log"
else
    same_text() {   # same_text A.json B.json: same non-empty text
        /usr/bin/python3 -c 'import json,sys; a,b=(json.load(open(f))["choices"][0]["text"] for f in sys.argv[1:]); sys.exit(0 if a==b and len(a)>0 else 1)' "$1" "$2"
    }
    samp='"temperature": 0'
    for D in 0 2; do
        curl -s "$URL/v1/completions" -H 'content-type: application/json' \
            -d "{$P, $samp, \"ds4_mtp_draft\": $D}" > "$T/r$D.json"
    done
    if same_text "$T/r0.json" "$T/r2.json"; then
        ok "server ds4_mtp_draft 2 ($samp): same text as plain decoding"
    else
        bad "server ds4_mtp_draft 2 ($samp): text differs"; head -c 400 "$T/r0.json" "$T/r2.json"
    fi
    # sampling: sampled MTP drafts and the speculative-sampling rule (plain
    # sampling's distribution, other draws): the same seed twice gives the
    # same text; temperature 2 without min-p so that drafts are also kept
    samp='"temperature": 2, "min_p": 0, "seed": 5'
    for i in 1 2; do
        curl -s "$URL/v1/completions" -H 'content-type: application/json' \
            -d "{$P, $samp, \"ds4_mtp_draft\": 2}" > "$T/s$i.json"
    done
    acc0=$(curl -s "$URL/metrics" | sed -n 's/^ds4_spec_accepted_tokens_total //p')
    if same_text "$T/s1.json" "$T/s2.json"; then
        ok "server ds4_mtp_draft 2 ($samp): same seed, same text (drafts kept: ${acc0:-?} in all)"
    else
        bad "server ds4_mtp_draft 2 ($samp): not reproducible"; head -c 400 "$T/s1.json" "$T/s2.json"
    fi
    if curl -s "$URL/metrics" | grep -q '^ds4_spec_drafted_tokens_total [1-9]'; then
        ok "/metrics counts MTP drafts"
    else
        bad "/metrics: no drafted tokens"
    fi
    kill "$PID"; wait "$PID" 2>/dev/null
fi
start_server "$T/server2.log" -m "$T/main.gguf"
if [ -z "$URL" ]; then
    bad "ds4-server did not start"; cat "$T/server2.log"
else
    code=$(curl -s -o "$T/bad.json" -w '%{http_code}' "$URL/v1/completions" -H 'content-type: application/json' \
        -d "{$P, \"ds4_mtp_draft\": 2}")
    if [ "$code" = 400 ] && grep -q "no MTP block" "$T/bad.json"; then
        ok "ds4_mtp_draft without a block refused (400)"
    else
        bad "ds4_mtp_draft without a block: $code"; cat "$T/bad.json"
    fi
    kill "$PID"; wait "$PID" 2>/dev/null
fi

[ "$fail" -eq 0 ] && echo "t_mtp: all ok" || echo "t_mtp: $fail failed"
exit $((fail != 0))
