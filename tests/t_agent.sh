#!/usr/bin/env bash
# ds4-agent tools, driven by a scripted model (--script) on the tiny model:
# write (parent dirs), edit (unique / missing / ambiguous / changed on disk
# since read), read with ranges and binary refusal, list, search (skips
# .git, .gitignore'd outputs, binaries), bash (exit codes, time limit,
# truncation), confinement (outside paths, symlink escapes), declined
# confirmations, and the trace: every turn after the first evaluates only
# its new tokens.
# ds4-test: optimized-only (minutes under ASan; the agent's tools, turn loop and UI run under ASan in t_agent_tmux)
set -u
cd "$(dirname "$0")/.."
BD="${DS4_BIN_DIR:-.}"   # where the binaries are (build/debug/bin in the sanitizer pass)
. tests/agent/lib.sh
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
agent_state "$T/state"
W="$T/work"
mkdir -p "$W/src" "$W/build" "$W/.git" "$T/outside"
printf 'alpha\nbeta\ngamma\nbeta\n' > "$W/src/a.txt"
seq 1 30 | sed 's/^/row /' > "$W/src/rows.txt"
printf 'needle in git\n' > "$W/.git/config"
printf 'needle in build\n' > "$W/build/out.txt"
printf 'needle in source\n' > "$W/src/n.c"
printf 'needle\0binary' > "$W/src/bin.dat"
printf 'build/\n*.o\n' > "$W/.gitignore"
printf 'needle in object\n' > "$W/src/x.o"
printf 'secret\n' > "$T/outside/secret.txt"
ln -s "$T/outside" "$W/escape"

{
    printf 'Create the notes file.'; call write path "docs/notes/todo.md" content "first line
second line"; sep
    printf 'Edit a unique line.'; call edit path "src/a.txt" old "alpha" new "ALPHA"; sep
    printf 'Edit a missing text.'; call edit path "src/a.txt" old "delta" new "x"; sep
    printf 'Edit an ambiguous text.'; call edit path "src/a.txt" old "beta" new "x"; sep
    printf 'Read a range.'; call read path "src/rows.txt" "#start_line" 5 "#end_line" 7; sep
    printf 'Read the binary.'; call read path "src/bin.dat"; sep
    printf 'List.'; call list path "src"; sep
    printf 'Search.'; call search pattern "need+le in [a-z]+"; sep
    printf 'Exit code.'; call bash command "echo out; echo err >&2; exit 7"; sep
    printf 'Time limit.'; call bash command "sleep 30" "#timeout" 1; sep
    printf 'Truncation.'; call bash command "seq 1 200000"; sep
    printf 'Outside.'; call read path "../outside/secret.txt"; sep
    printf 'Absolute outside.'; call read path "$T/outside/secret.txt"; sep
    printf 'Symlink escape.'; call read path "escape/secret.txt"; sep
    printf 'Symlink write escape.'; call write path "escape/new.txt" content "x"; sep
    printf 'Read then change on disk.'; call read path "src/rows.txt" "#start_line" 1 "#end_line" 2; sep
    printf 'Change it behind my back.'; call bash command "echo row 31 >> src/rows.txt"; sep
    printf 'Stale edit.'; call edit path "src/rows.txt" old "row 1
" new "ROW 1
"; sep
    printf 'Read again.'; call read path "src/rows.txt" "#start_line" 30; sep
    printf 'Fresh edit.'; call edit path "src/rows.txt" old "row 1
" new "ROW 1
"; sep
    printf 'All done: the task is complete.'
} > "$T/s1.txt"

t0=$(date +%s)
"$AGENT" -m "$M" --ctx 65536 --nothink --yes --dir "$W" --script "$T/s1.txt" --trace "$T/tr1" \
    -p "exercise the tools" > "$T/out1" 2> "$T/err1"
rc=$?
el=$(( $(date +%s) - t0 ))
[ $rc -eq 0 ] && ok "scripted run exits 0 (${el}s)" || { bad "run rc=$rc"; tail -20 "$T/err1"; }
grep -qx "All done: the task is complete." "$T/out1" && ok "final answer on stdout" || { bad "stdout"; cat "$T/out1"; }
results "$W" > "$T/res1"
r() { awk -v n="$1" '/^===== /{k++} k==n' "$T/res1"; }

[ "$(cat "$W/docs/notes/todo.md")" = "first line
second line" ] && ok "write created docs/notes/todo.md with its parents" || bad "write"
r 1 | grep -q "created docs/notes/todo.md: 2 lines" && ok "write result" || bad "write result: $(r 1)"
[ "$(head -1 "$W/src/a.txt")" = "ALPHA" ] && ok "edit replaced the unique text" || bad "edit unique"
r 3 | grep -q "failed" && r 3 | grep -q "not found" && ok "edit: missing text is an error" || bad "edit missing: $(r 3)"
r 4 | grep -q "occurs 2 times" && grep -c beta "$W/src/a.txt" | grep -qx 2 && ok "edit: ambiguous text is an error, file unchanged" || bad "edit ambiguous: $(r 4)"
r 5 | grep -qP '^\s+5\trow 5$' && r 5 | grep -qP '^\s+7\trow 7$' && ! r 5 | grep -q 'row 8' \
    && r 5 | grep -q "lines 5-7 of 30" && ok "read 5-7: numbered lines and the range" || bad "read range: $(r 5)"
r 6 | grep -q "binary file; refused" && ok "read refuses a binary file" || bad "binary: $(r 6)"
r 7 | grep -qP '^file\s+\d+\s+a.txt$' && r 7 | grep -q "(5 entries)" && ok "list: types and sizes" || bad "list: $(r 7)"
if r 8 | grep -q "src/n.c:1:needle in source" && ! r 8 | grep -q "git\|build\|bin.dat\|x.o"; then
    ok "search: file:line:text, skips .git, ignored outputs, binaries"
else bad "search: $(r 8)"; fi
r 9 | grep -q "^out$" && r 9 | grep -q "^err$" && r 9 | grep -q "\[exit code 7\]" && r 9 | grep -q failed \
    && ok "bash: stdout+stderr and exit code 7" || bad "bash exit: $(r 9)"
r 10 | grep -q "time limit of 1 s" && ok "bash: time limit" || bad "timeout: $(r 10)"
r 11 | grep -q "^1$" && r 11 | grep -q "^200000$" && r 11 | grep -q "bytes omitted" \
    && [ "$(r 11 | wc -c)" -lt 20000 ] && ok "bash: long output keeps head and tail" || bad "truncation"
r 12 | grep -q "outside the working directory" && ok "refuses ../ outside" || bad "outside: $(r 12)"
r 13 | grep -q "outside the working directory" && ok "refuses an absolute path outside" || bad "abs outside: $(r 13)"
r 14 | grep -q "outside the working directory" && ! r 14 | grep -q secret$ && ok "refuses a symlink escape (read)" || bad "symlink read: $(r 14)"
r 15 | grep -q "outside the working directory" && [ ! -e "$T/outside/new.txt" ] && ok "refuses a symlink escape (write)" || bad "symlink write: $(r 15)"
r 18 | grep -q "changed on disk since you last read it" && ok "edit refused: file changed since read" || bad "stale edit: $(r 18)"
head -1 "$W/src/rows.txt" | grep -qx "ROW 1" && ok "edit after a new read" || bad "fresh edit: $(r 20)"
n=$(wc -l < "$T/tr1")
[ "$n" -eq 21 ] && ok "21 model turns traced" || bad "trace has $n lines"
grep -q '"tool_calls":\[{"name":"edit","ok":false}\]' "$T/tr1" && grep -q '"tool_calls":\[{"name":"write","ok":true}\]' "$T/tr1" \
    && ok "trace: tool names and ok flags" || bad "trace tool_calls"
trace_check "$T/tr1" && ok "trace: every turn after the first evaluated only its new tokens" || bad "trace check"
pf2=$(sed -n 2p "$T/tr1" | grep -o '"prefill_tokens":[0-9]*' | cut -d: -f2)
[ "$pf2" -lt 100 ] && ok "turn 2 prefilled $pf2 tokens (the tool result only)" || bad "turn 2 prefill $pf2"

# declined confirmations: no --yes, answers from stdin
{
    printf 'Write.'; call write path "declined.txt" content "x"; sep
    printf 'Bash.'; call bash command "touch ran.txt"; sep
    printf 'Always.'; call write path "yes1.txt" content "1"; sep
    printf 'Again.'; call write path "yes2.txt" content "2"; sep
    printf 'Finished.'
} > "$T/s2.txt"
printf 'n\nno\na\n' | "$AGENT" -m "$M" --ctx 8192 --nothink --dir "$W" --script "$T/s2.txt" \
    -p "confirmations" > "$T/out2" 2> "$T/err2"
rc=$?
[ $rc -eq 0 ] && [ ! -e "$W/declined.txt" ] && [ ! -e "$W/ran.txt" ] && ok "declined write and bash did not run" || bad "decline rc=$rc"
[ -e "$W/yes1.txt" ] && [ -e "$W/yes2.txt" ] && ok "'always' allows later calls without asking" || bad "always"
results "$W" > "$T/res2"
grep -q "The user declined this write call" "$T/res2" && ok "the refusal goes back to the model" || bad "refusal result"
[ "$(grep -c 'allow ' "$T/err2")" -eq 3 ] && ok "asked three times" || bad "asked $(grep -c 'allow ' "$T/err2") times"

# errors: a missing model, an exhausted script
"$AGENT" -m "$T/none.gguf" --dir "$W" -p x > /dev/null 2>&1 && bad "missing model accepted" || ok "missing model: non-zero exit"
printf 'One call.'"$(call list)" > "$T/s3.txt"
"$AGENT" -m "$M" --ctx 8192 --nothink --dir "$W" --script "$T/s3.txt" -p "x" > /dev/null 2> "$T/err3" \
    && bad "exhausted script accepted" || { grep -q "no turn left" "$T/err3" && ok "exhausted script: clear error, non-zero exit" || bad "exhausted: $(cat "$T/err3")"; }
# the real vocabulary (a ds4-synth model): the forced DSML and </think>
# become the model's special tokens, the call runs, the next turn is fed
"$BD"/ds4-synth --preset tiny --recipe q2 --vocab vocab/deepseek-v4-vocab.gguf -o "$T/rv.gguf" > /dev/null 2>&1 || bad "ds4-synth"
mkdir -p "$T/rv"
{ printf 'Check it.</think>Listing.'; call list; sep; printf 'Done.</think>Listed.'; } > "$T/s4.txt"
"$AGENT" -m "$T/rv.gguf" --yes --ctx 4096 --dir "$T/rv" --script "$T/s4.txt" --trace "$T/tr4" -p "list" > "$T/out4" 2>&1 \
    && grep -q '"name":"list","ok":true' "$T/tr4" && ok "real vocabulary: scripted call and answer" || bad "real vocabulary run"
/usr/bin/python3 - "$(sessdir "$T/rv")" <<'PY' && ok "real vocabulary: ｜DSML｜ (128825) and </think> (128822) forced as special tokens" || bad "special ids"
import json, glob, sys
t = json.load(open(glob.glob(sys.argv[1] + "/*.json")[0]))["tokens"]
assert 128825 in t and 128822 in t and t[-1] == 1
PY
"$AGENT" --help | grep -q -- "--script FILE" && ok "--help" || bad "--help"

echo "t_agent: $fail failure(s)"
[ "$fail" -eq 0 ]
