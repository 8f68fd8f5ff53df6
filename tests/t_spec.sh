#!/usr/bin/env bash
# Speculative decoding from the command line, on the tiny model:
#  - ds4 --lookup N prints exactly what plain decoding prints, greedy and
#    seeded sampling, over a few hundred tokens (the prompt repeats so that
#    lookups find drafts), and reports the acceptance in the run summary;
#  - --lookup out of range is a clear usage error;
#  - ds4-bench --spec N measures verification passes and checks both
#    speculative decodes (prompt lookup, always-right drafts) against plain
#    greedy decoding (it fails loudly when they differ);
#  - ds4-server: a request with "ds4_lookup": 8 returns the same text as
#    one without (greedy and seeded sampling), /metrics counts the passes,
#    an out-of-range ds4_lookup is a 400.
set -u
BD="${DS4_BIN_DIR:-.}"   # where the binaries are (build/debug/bin in the sanitizer pass)
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
    "$BD"/ds4 -m "$M" --tokens "$IDS" $mode -n 300 --ctx 1024 > "$T/plain.out" 2> "$T/plain.err"
    # shellcheck disable=SC2086
    "$BD"/ds4 -m "$M" --tokens "$IDS" $mode -n 300 --ctx 1024 --lookup 8 > "$T/spec.out" 2> "$T/spec.err"
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

"$BD"/ds4 -m "$M" --tokens 1,2,3 --lookup 99 > "$T/o" 2> "$T/e"
rc=$?
if [ "$rc" -eq 2 ] && grep -q -- "--lookup: bad value" "$T/e"; then ok "--lookup 99 refused"; else bad "--lookup 99: rc $rc"; cat "$T/e"; fi

if "$BD"/ds4-bench -m "$M" --prompt-file bench/data/italian_sample.txt -t 1 --no-warmup --no-probe \
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
LOG="$T/server.log"
"$BD"/ds4-server -m "$M" --port 0 --ctx 2048 -t 1 2> "$LOG" &
PID=$!
URL=""
for _ in $(seq 300); do
    URL=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$LOG" | head -n1)
    [ -n "$URL" ] && break
    sleep 0.1
done
if [ -z "$URL" ]; then
    bad "ds4-server did not start"; cat "$LOG"
else
    # ask NAME ENDPOINT BASE SAMP L: the request BASE (a JSON object) with
    # the sampling fields SAMP and "ds4_lookup": L; the answer in $T/NAME.L.json
    ask() {
        /usr/bin/python3 -c 'import json,sys; j=json.loads(sys.argv[1]); j.update(json.loads("{" + sys.argv[2] + "}")); j["ds4_lookup"]=int(sys.argv[3]); print(json.dumps(j))' \
            "$3" "$4" "$5" > "$T/$1.req"
        curl -s "$URL$2" -H 'content-type: application/json' -d @"$T/$1.req" > "$T/$1.$5.json"
    }
    # same_answer NAME L: the first choice of $T/NAME.0.json and NAME.L.json
    # is the same and not empty (text; or message content, reasoning, calls)
    same_answer() {
        /usr/bin/python3 -c '
import json, sys
a, b = (json.load(open(f))["choices"][0] for f in sys.argv[1:])
a, b = (c["text"] if "text" in c else c["message"] for c in (a, b))
full = len(a) > 0 if isinstance(a, str) else bool(a.get("content") or a.get("reasoning_content") or a.get("tool_calls"))
sys.exit(0 if a == b and full else 1)' "$T/$1.0.json" "$T/$1.$2.json" || { head -c 400 "$T/$1.0.json" "$T/$1.$2.json"; return 1; }
    }
    P='{"prompt": "uno due tre quattro cinque sei sette otto nove dieci uno due tre quattro cinque sei sette otto nove dieci uno due", "max_tokens": 160}'
    for samp in '"temperature": 0' '"temperature": 1, "seed": 5'; do
        for L in 0 8; do ask r /v1/completions "$P" "$samp" $L; done
        same_answer r 8 && ok "server ds4_lookup 8 ($samp): same text as plain decoding" \
            || bad "server ds4_lookup 8 ($samp): text differs"
    done
    # a tool result with numbered lines (cat -n style): its lines without
    # the numbers are a second lookup source; the text stays plain decoding's
    CHAT=$(/usr/bin/python3 - <<'PY'
import json
lines = "".join("%6d\tuno due tre %s quattro cinque\n" % (i, w) for i, w in enumerate("sei sette otto nove dieci undici dodici".split() * 3, 1))
print(json.dumps({"messages": [
    {"role": "user", "content": "Read f.txt and write it back."},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "read", "arguments": "{\"path\": \"f.txt\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": lines}],
    "tools": [{"type": "function", "function": {"name": "read", "description": "read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}],
    "max_tokens": 120}))
PY
)
    for samp in '"temperature": 0' '"temperature": 1, "seed": 7'; do
        for L in 0 4; do ask c /v1/chat/completions "$CHAT" "$samp" $L; done
        same_answer c 4 && ok "server ds4_lookup 4 with a numbered tool result ($samp): same message as plain decoding" \
            || bad "server ds4_lookup 4 with a numbered tool result ($samp): message differs"
    done
    if curl -s "$URL/metrics" | grep -q '^ds4_spec_passes_total [1-9]'; then
        ok "/metrics counts verification passes"
    else
        bad "/metrics: no ds4_spec_passes_total"
    fi
    code=$(curl -s -o "$T/bad.json" -w '%{http_code}' "$URL/v1/completions" -H 'content-type: application/json' \
        -d "${P%\}}, \"ds4_lookup\": 99}")
    if [ "$code" = 400 ] && grep -q ds4_lookup "$T/bad.json"; then ok "ds4_lookup 99 refused (400)"; else bad "ds4_lookup 99: $code"; fi
    kill "$PID"; wait "$PID" 2>/dev/null
fi

[ "$fail" -eq 0 ] && echo "t_spec: all ok" || echo "t_spec: $fail failed"
exit $((fail != 0))
