#!/usr/bin/env bash
# ds4-agent sessions are KV states in the disk KV store:
#  - /switch to a saved session and continuing gives logits identical
#    (bitwise) to never having left it, with no prefill of the old tokens;
#  - --resume does the same across processes;
#  - /list shows saved sessions; /new starts another;
#  - Ctrl+C (SIGINT) during a long bash returns within a second and kills
#    the command's process group; the session stays consistent;
#  - compaction keeps the agent running past the context size (by the
#    model's summary, and by recent turns when no room is left).
# ds4-test: optimized-only (minutes under ASan (many whole sessions); the agent's code runs under ASan in t_agent and t_agent_tmux)
set -u
cd "$(dirname "$0")/.."
BD="${DS4_BIN_DIR:-.}"   # where the binaries are (build/debug/bin in the sanitizer pass)
. tests/agent/lib.sh
T=$(mktemp -d)
[ -n "${KEEP:-}" ] && echo "kept $T" || trap 'rm -rf "$T"' EXIT
agent_state "$T/state"
common=(-m "$M" --ctx 8192 --yes)

{ printf 'Look first.</think>Listing.'; call list; } > "$T/t1"
printf 'Seen it.</think>The directory is listed.' > "$T/t2"
printf 'Second answer.</think>Here is the second answer.' > "$T/t3"
printf 'Other.</think>Other task answered.' > "$T/o1"
cat_turns() { local f first=1; for f in "$@"; do [ $first = 1 ] || printf '\n---\n'; first=0; cat "$f"; done; }

# A: one process, never leaves the session.  The system prompt names the
# working directory, so A, B and C run in the same one, emptied between
# (its sessions too).
W="$T/w"
fresh() { rm -rf "$W"; mkdir -p "$W"; rm -rf "$(dirname "$(sessdir "$W")")"; }
fresh
cat_turns "$T/t1" "$T/t2" "$T/t3" > "$T/sA"
printf 'task one\nsecond request\n/quit\n' | "$AGENT" "${common[@]}" --dir "$W" --script "$T/sA" \
    --trace "$T/trA" --dump-logits "$T/A.f32" > "$T/outA" 2>&1 || bad "run A"
# B: task one in its own process; then another session, /switch back, continue
cat_turns "$T/t1" "$T/t2" > "$T/sB1"
fresh
"$AGENT" "${common[@]}" --dir "$W" --script "$T/sB1" --trace "$T/trB" -p "task one" > /dev/null 2>&1 || bad "run B1"
id1=$(basename "$(ls "$(sessdir "$W")/"*.json)" .json)
cat_turns "$T/o1" "$T/t3" > "$T/sB2"
printf 'a different task\n/list\n/switch %s\nsecond request\n/quit\n' "$id1" | "$AGENT" "${common[@]}" --dir "$W" \
    --script "$T/sB2" --trace "$T/trB" --dump-logits "$T/B.f32" > "$T/outB" 2>&1 || bad "run B2"
grep -q "restored without prefill" "$T/outB" && ok "/switch restores without prefill" || { bad "/switch"; tail -20 "$T/outB"; }
grep -q "$id1 .*task one" "$T/outB" && grep -q "a different task" "$T/outB" && ok "/list shows both sessions with their titles" || bad "/list"
# the rows of the last turn ("second request") in both runs
last=$(tail -1 "$T/trA")
rows=$(echo "$last" | /usr/bin/python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print(r['prefill_tokens']+r['generated_tokens'])")
nv=$(/usr/bin/python3 -c "import os,sys; print(os.path.getsize(sys.argv[1]))" "$T/A.f32")
bytes=$((rows * 4096 * 4))
if [ "$bytes" -gt 0 ] && cmp -s <(tail -c $bytes "$T/A.f32") <(tail -c $bytes "$T/B.f32"); then
    ok "after /switch: logits of the continued turn identical to never leaving ($rows rows)"
else bad "logits differ after /switch (rows $rows, sizes $nv $(stat -c %s "$T/B.f32"))"; fi
lastB=$(tail -1 "$T/trB")
cA=$(echo "$last" | grep -o '"cached_tokens":[0-9]*'); cB=$(echo "$lastB" | grep -o '"cached_tokens":[0-9]*')
[ "$cA" = "$cB" ] && ok "the continued turn reused the whole session ($cB)" || bad "cached $cA vs $cB"
trace_check "$T/trB" && ok "trace B: only new tokens after the first turn of each session" || bad "trace B"

# C: --resume across processes
fresh
"$AGENT" "${common[@]}" --dir "$W" --script "$T/sB1" -p "task one" > /dev/null 2>&1 || bad "run C1"
"$AGENT" "${common[@]}" --dir "$W" --script "$T/t3" --resume --trace "$T/trC" --dump-logits "$T/C.f32" \
    -p "second request" > "$T/outC" 2> "$T/errC" || bad "run C2"
grep -q "resumed session" "$T/errC" && ok "--resume restores the last session" || bad "--resume: $(cat "$T/errC")"
if cmp -s <(tail -c $bytes "$T/A.f32") "$T/C.f32"; then ok "--resume: logits identical to never leaving"
else bad "--resume logits differ"; fi
grep -qx "Here is the second answer." "$T/outC" && ok "--resume -p prints the answer" || bad "resume answer"
# a new session starts from the system prompt's state saved by the first one
"$AGENT" "${common[@]}" --dir "$W" --script "$T/o1" --trace "$T/trC2" -p "third" > /dev/null 2>&1 || bad "run C3"
c=$(grep -o '"cached_tokens":[0-9]*' "$T/trC2" | cut -d: -f2)
[ "${c:-0}" -gt 1000 ] && ok "a new session restores the saved system prompt ($c tokens)" || bad "system prompt not cached ($c)"

# Ctrl+C during a long bash
mkdir -p "$T/D"
{ printf 'Wait.</think>'; call bash command "sleep 100; echo never-session-$$"; printf '\n---\nDone.</think>Stopped.'; } > "$T/sD"
"$AGENT" "${common[@]}" --dir "$T/D" --script "$T/sD" -p "sleep" > "$T/outD" 2> "$T/errD" &
pid=$!
for i in $(seq 1 1200); do pgrep -f "sleep 100; echo never-session-$$" > /dev/null && break; sleep 0.1; done
pgrep -f "sleep 100; echo never-session-$$" > /dev/null || bad "the command never started"
t0=$(date +%s%N)
kill -INT $pid
wait $pid
rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ $ms -lt 1000 ] && ok "Ctrl+C during bash: returned in $ms ms (exit $rc)" || bad "Ctrl+C took $ms ms"
sleep 0.2
pgrep -f "sleep 100; echo never-session-$$" > /dev/null && bad "the command survived" || ok "the command's process group was killed"
results "$T/D" | grep -q "interrupted by the user" && ok "the session records the interrupted result" || bad "no interrupted result"

# Ctrl+C during a (greedy) generation closes the turn; the session file
# and the state agree (the saved token count is what the trace says).
# A random model can end its turn by itself (an end token) before the
# interrupt lands; which prompt does that depends on the system prompt
# (working directory, date), so a run that ended on its own is retried
# with another prompt; a signal that reached a running agent must give 130.
# The signal can also land just after the turn ended by itself, while the
# agent saves the session and exits: exit 0 with a whole (uncut) last
# turn, retried the same way.  An agent that ignored the signal during
# generation would give exit 0 on every try, and fail below.
turn_whole() {
    /usr/bin/python3 - "$(sessdir "$1")" <<'PY'
import json, glob, sys
f = glob.glob(sys.argv[1] + "/*.json")
m = json.load(open(f[0]))["messages"][-1] if f else {}
sys.exit(0 if m.get("kind") == "assistant" and not m.get("cut") else 1)
PY
}
rc=none
for try in 1 2 3 4 5 6; do
    rm -rf "$T/G" "$T/trG" "$(sessdir "$T/G")"; mkdir -p "$T/G"
    "$AGENT" -m "$M" --ctx 8192 --yes --dir "$T/G" --temp 0 --trace "$T/trG" -p "talk $try" > /dev/null 2> "$T/errG" &
    pid=$!
    for i in $(seq 1 1200); do grep -q "thinking" "$T/errG" 2>/dev/null && break; sleep 0.1; done
    sleep 0.3
    if kill -INT $pid 2> /dev/null; then
        wait $pid; rc=$?
        if [ "$rc" = 0 ] && turn_whole "$T/G"; then
            echo "    (try $try: the turn ended by itself as the interrupt landed; another prompt)"
            continue
        fi
        break
    fi
    wait $pid; rc=$?
    echo "    (try $try: the turn ended by itself before the interrupt; another prompt)"
done
[ "$rc" = 130 ] && ok "Ctrl+C during generation: exit 130" || bad "generation interrupt rc=$rc"
/usr/bin/python3 - "$(sessdir "$T/G")" "$T/trG" <<'PY' && ok "interrupted turn closed and saved consistently" || bad "interrupted session inconsistent"
import json, glob, sys
s = json.load(open(glob.glob(sys.argv[1] + "/*.json")[0]))
t = json.loads(open(sys.argv[2]).readline())
m = s["messages"][-1]
assert m["kind"] == "assistant" and m.get("cut"), m
assert s["state_tokens"] == t["prompt_tokens"] + t["generated_tokens"] == len(s["tokens"]), (s["state_tokens"], t)
assert s["tokens"][-1] == 1 or True
PY

# compaction by summary: many large tool results in a small context
mkdir -p "$T/E"
{
    for i in 1 2 3 4 5 6 7 8 9 10; do
        printf 'Step %d.</think>Running step %d.' $i $i; call bash command "seq $((i * 1000)) $((i * 1000 + 150))"; sep
    done
    printf 'All steps done.</think>Finished all steps.'
} > "$T/sE"
"$AGENT" -m "$M" --ctx 4096 --yes --dir "$T/E" --script "$T/sE" --trace "$T/trE" -p "steps" > "$T/outE" 2> "$T/errE"
rc=$?
[ $rc -eq 0 ] && grep -qx "Finished all steps." "$T/outE" && ok "compaction: the run completes (exit 0)" || { bad "compaction run rc=$rc"; tail -5 "$T/errE"; }
grep -q '"event":"summary"' "$T/trE" && grep -q '"event":"compacted"' "$T/trE" && ok "compacted by the model's summary" || bad "no summary compaction"
tot=$(/usr/bin/python3 -c "import json,sys; print(sum(json.loads(l)['prefill_tokens']+json.loads(l)['generated_tokens'] for l in open(sys.argv[1])))" "$T/trE")
mx=$(/usr/bin/python3 -c "import json,sys; print(max(json.loads(l)['prompt_tokens']+json.loads(l)['generated_tokens'] for l in open(sys.argv[1])))" "$T/trE")
[ "$tot" -gt 4096 ] && [ "$mx" -le 4096 ] && ok "ran $tot tokens through a 4096-token context (max in use $mx)" || bad "tot $tot max $mx"
trace_check "$T/trE" && ok "trace E: only new tokens except right after compaction" || bad "trace E"

# compaction with no room for a summary: an answer cut by the context end
mkdir -p "$T/F"
{ printf 'Long.</think>'; for i in $(seq 1 3000); do printf 'word%d ' $i; done; sep; printf 'Short.</think>Done after the cut.'; } > "$T/sF"
"$AGENT" -m "$M" --ctx 4096 --yes --dir "$T/F" --script "$T/sF" --trace "$T/trF" -p "long" > "$T/outF" 2> "$T/errF"
rc=$?
[ $rc -eq 0 ] && grep -qx "Done after the cut." "$T/outF" && grep -q "recent turns" "$T/errF" \
    && ok "cut at the context end, compacted by recent turns, answered" || { bad "cut run rc=$rc"; tail -5 "$T/errF"; }

echo "t_agent_session: $fail failure(s)"
[ "$fail" -eq 0 ]
