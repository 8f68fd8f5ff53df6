#!/usr/bin/env bash
# ds4-agent's limits, driven by a scripted model on the tiny model:
#  - a turn cut by --max-tokens is reported as that (to the user, in the
#    trace "stopped":"max_tokens", and to the model, which continues),
#    never as a context overflow; a model that never ends its turns stops
#    after AG_CUT_TURNS_MAX (3) cut turns in a row (exit 3), not after
#    --max-turns; a turn cut by the context end still says so;
#  - compaction always succeeds: a request far larger than a small context,
#    a turn of 40 tool calls whose call block alone does not fit half the
#    context, and an interactive session of oversized messages all run to
#    their answers inside the context, with the dropped / cut parts marked;
#  - a --ctx too small for the system prompt is a clear start-up error.
set -u
cd "$(dirname "$0")/.."
BD="${DS4_BIN_DIR:-.}"   # where the binaries are (build/debug/bin in the sanitizer pass)
. tests/agent/lib.sh
T=$(mktemp -d)
[ -n "${KEEP:-}" ] && echo "kept $T" || trap 'rm -rf "$T"' EXIT
agent_state "$T/state"

# py SESSIONS_DIR CODE: CODE with `s` = the newest session file there
sess_py() {
    /usr/bin/python3 - "$1" "$2" <<'PY'
import glob, json, os, sys
fs = sorted(glob.glob(sys.argv[1] + "/*.json"), key=os.path.getmtime)
s = json.load(open(fs[-1]))
exec(sys.argv[2])
PY
}
# maxuse TRACE: the most tokens any turn had in the context
maxuse() { /usr/bin/python3 -c "import json,sys; print(max(json.loads(l)['prompt_tokens']+json.loads(l)['generated_tokens'] for l in open(sys.argv[1])))" "$1"; }
words() { /usr/bin/python3 -c "import sys; print(' '.join('%s%d' % (sys.argv[1], i) for i in range(int(sys.argv[2]))))" "$1" "$2"; }

# 1. --max-tokens 80: the first turn is cut at 80 tokens (at 3 % of the
# context), the model is told so and answers in the next turn
mkdir -p "$T/a"
{ printf 'Long.</think>'; words word 400; sep; printf 'Short.</think>Finished after the cut.'; } > "$T/sa"
"$AGENT" -m "$M" --ctx 4096 --max-tokens 80 --yes --dir "$T/a" --script "$T/sa" --trace "$T/tra" \
    -p "cut me" > "$T/oa" 2> "$T/ea"
rc=$?
[ $rc -eq 0 ] && grep -qx "Finished after the cut." "$T/oa" && ok "--max-tokens cut: the model continues and answers" \
    || { bad "--max-tokens run rc=$rc"; tail -5 "$T/ea"; }
grep -q "stopped at the --max-tokens limit of 80 tokens" "$T/ea" && ! grep -q "end of the context" "$T/ea" \
    && ok "the user is told: --max-tokens, not the context end" || { bad "note"; grep ds4-agent "$T/ea"; }
[ "$(wc -l < "$T/tra")" -eq 2 ] && sed -n 1p "$T/tra" | grep -q '"generated_tokens":81,.*"stopped":"max_tokens"' \
    && ! sed -n 2p "$T/tra" | grep -q stopped && ok "trace: 2 turns, the first \"stopped\":\"max_tokens\"" \
    || { bad "trace"; cat "$T/tra"; }
trace_check "$T/tra" && ok "trace: the next turn evaluated only its new tokens" || bad "trace check"
sess_py "$(sessdir "$T/a")" '
m = s["messages"]
assert [x["kind"] for x in m] == ["user", "assistant", "user", "assistant"], m
assert m[1].get("cut") and m[1].get("stopped") == "max_tokens", m[1]
assert m[2].get("note") and "stopped at the --max-tokens limit of 80 tokens" in m[2]["text"], m[2]
assert "end of the context" not in m[2]["text"]
assert not m[3].get("cut") and "stopped" not in m[3]
' && ok "session: the cut turn and the note the model read" || bad "session file of the cut run"

# 2. a model that never ends its turn: three cut turns in a row, then the
# user decides (exit 3), not --max-turns (50) nor the script's end
mkdir -p "$T/b"
{ for i in 1 2 3 4 5 6; do printf 'Again %d.</think>' $i; words w$i 300; sep; done; printf 'Never.</think>Never reached.'; } > "$T/sb"
"$AGENT" -m "$M" --ctx 4096 --max-tokens 40 --yes --dir "$T/b" --script "$T/sb" --trace "$T/trb" \
    -p "talk forever" > "$T/ob" 2> "$T/eb"
rc=$?
[ $rc -eq 3 ] && [ ! -s "$T/ob" ] && ok "3 cut turns in a row: exit 3, no answer on stdout" || { bad "endless rc=$rc"; tail -3 "$T/eb"; }
[ "$(wc -l < "$T/trb")" -eq 3 ] && [ "$(grep -c '"stopped":"max_tokens"' "$T/trb")" -eq 3 ] \
    && ok "exactly 3 turns ran, each cut at --max-tokens" || bad "turns: $(wc -l < "$T/trb")"
grep -q "3 turns in a row were cut" "$T/eb" && ok "the user is told why it stopped" || bad "no stop note"

# 3. a turn cut by the context end is still reported as that (optimized
# pass only: 2600 generated tokens take half a minute under ASan, and the
# stop reasons' code runs there in 1 and 2)
if [ "${DS4_DEBUG_BUILD:-0}" != 1 ]; then
mkdir -p "$T/c"
{ printf 'Long.</think>'; words word 3000; sep; printf 'Short.</think>Done after the context cut.'; } > "$T/sc"
"$AGENT" -m "$M" --ctx 4096 --yes --dir "$T/c" --script "$T/sc" --trace "$T/trc" -p "long" > "$T/oc" 2> "$T/ec"
rc=$?
[ $rc -eq 0 ] && grep -qx "Done after the context cut." "$T/oc" && sed -n 1p "$T/trc" | grep -q '"stopped":"context"' \
    && grep -q "cut by the end of the context" "$T/ec" && ! grep -q "max-tokens" "$T/ec" \
    && ok "context cut: reported as the context end, continued" || { bad "context cut rc=$rc"; tail -5 "$T/ec"; }
fi

# 4. a request of 100 KB in a 2048-token context: its middle is cut with
# a marker; the model answers
mkdir -p "$T/d"
printf 'Ok.</think>Answered the huge request.' > "$T/sd"
"$AGENT" -m "$M" --ctx 2048 --yes --dir "$T/d" --script "$T/sd" --trace "$T/trd" -p "$(words item 12000)" > "$T/od" 2> "$T/ed"
rc=$?
[ $rc -eq 0 ] && grep -qx "Answered the huge request." "$T/od" && ok "100 KB request, --ctx 2048: answered" \
    || { bad "huge request rc=$rc"; tail -3 "$T/ed"; }
mx=$(maxuse "$T/trd")
[ "$mx" -le 2048 ] && ok "it stayed in the context ($mx of 2048 tokens)" || bad "context use $mx"
sess_py "$(sessdir "$T/d")" '
m = s["messages"]
assert m[0]["text"].startswith("item0 item1") and "bytes dropped to save context" in m[0]["text"], m[0]["text"][:200]
assert m[0]["text"].rstrip().endswith("item11999"), m[0]["text"][-100:]
assert m[1].get("note") and "compacted" in m[1]["text"]
' && ok "the request keeps its head and tail around a marker" || bad "huge request transcript"

# 5. 40 calls in one turn: the pending calls and results alone exceed half
# the context (the call block cannot be shortened), so after the summary
# they are dropped and the note says so
mkdir -p "$T/e"
{
    printf 'Many.</think>Running.'
    printf '\n\n<%stool_calls>' "$D"
    for i in $(seq 1 40); do
        printf '\n<%sinvoke name="bash">\n<%sparameter name="command" string="true">seq %d %d</%sparameter>\n</%sinvoke>' \
            "$D" "$D" $((i * 1000)) $((i * 1000 + 2000)) "$D" "$D"
    done
    printf '\n</%stool_calls>' "$D"
    sep; printf 'Summary.</think>We ran forty seq commands.'
    sep; printf 'Done.</think>All forty done.'
} > "$T/se"
"$AGENT" -m "$M" --ctx 4096 --yes --dir "$T/e" --script "$T/se" --trace "$T/tre" -p "forty" > "$T/oe" 2> "$T/ee"
rc=$?
[ $rc -eq 0 ] && grep -qx "All forty done." "$T/oe" && ok "40 pending calls in a 4096 context: compacted, answered" \
    || { bad "forty rc=$rc"; tail -3 "$T/ee"; }
grep -q '"event":"summary"' "$T/tre" && grep -q '"event":"compacted"' "$T/tre" && ok "by the model's summary" || bad "no summary"
mx=$(maxuse "$T/tre")
[ "$mx" -le 4096 ] && ok "it stayed in the context ($mx of 4096)" || bad "context use $mx"
sess_py "$(sessdir "$T/e")" '
m = s["messages"]
assert m[0]["text"] == "forty", m[0]
assert m[1].get("note") and "2 messages of this conversation had to be dropped" in m[1]["text"], m[1]
assert m[2].get("note") and m[2]["text"] == "We ran forty seq commands.", m[2]
assert m[3]["kind"] == "assistant" and m[3]["text"] == "All forty done.", m[3]
' && ok "the task, the note of what was dropped, the summary, the answer" || bad "forty transcript"

# 6. interactive: three oversized messages in a 2048-token context, each
# compacted (the second and third by the model's summary)
mkdir -p "$T/f"
{
    printf 'One.</think>First big one read.'; sep; printf 'Sum.</think>Read A.'; sep
    printf 'Two.</think>Second big one read.'; sep; printf 'Sum.</think>Read A and B.'; sep
    printf 'Three.</think>Third big one read.'
} > "$T/sf"
b=$(words w 4000)
printf 'A %s\nB %s\nC %s\n/quit\n' "$b" "$b" "$b" | "$AGENT" -m "$M" --ctx 2048 --yes --dir "$T/f" --script "$T/sf" \
    --trace "$T/trf" > "$T/of" 2>&1
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c 'big one read\.$' "$T/of")" -eq 3 ] && ! grep -q "cannot" "$T/of" \
    && ok "three oversized messages in --ctx 2048: three answers" || { bad "interactive rc=$rc"; grep ds4-agent "$T/of" | tail -5; }
[ "$(grep -c '"event":"compacted"' "$T/trf")" -eq 3 ] && [ "$(maxuse "$T/trf")" -le 2048 ] \
    && ok "compacted three times, always inside the context" || bad "compactions: $(grep -c compacted "$T/trf")"
sess_py "$(sessdir "$T/f")" '
m = s["messages"]
u = [x for x in m if x["kind"] == "user" and not x.get("note")]
assert u[0]["text"].startswith("A w0") and u[-1]["text"].startswith("C w0"), [x["text"][:20] for x in u]
assert "bytes dropped to save context" in u[-1]["text"]
' && ok "the task and the latest request are kept (cut with markers)" || bad "interactive transcript"

# 7. a context smaller than the system prompt needs: a clear error at start
"$AGENT" -m "$M" --ctx 1024 --yes --dir "$T/a" -p "x" > "$T/og" 2> "$T/eg"
rc=$?
[ $rc -eq 1 ] && grep -q -- "--ctx 1024 is too small: the system prompt and tool schemas take [0-9]* tokens; use --ctx [0-9]* or more" "$T/eg" \
    && ok "--ctx 1024: clear start-up error" || { bad "small ctx rc=$rc"; cat "$T/eg"; }

echo "t_agent_limits: $fail failure(s)"
[ "$fail" -eq 0 ]
