#!/usr/bin/env bash
# ds4-agent's file-tool confinement and bash containment against an
# attacker working beside it, driven by a scripted model (--script) on the
# tiny model:
#   - the swap race: a helper (tests/agent/swap.c) exchanges a directory of
#     the working tree and a symbolic link to outside with renameat2 in a
#     loop while the agent makes 60 reads and 60 writes through that
#     directory: no read returns the outside file, no file (or temp file)
#     appears outside;
#   - hard links to an outside file planted at the temp-file names a write
#     could use: the outside file is never written;
#   - FIFOs: read, search (of the FIFO, of a tree holding one, with a FIFO
#     as .gitignore), edit and write return at once with a clear error
#     (each run under `timeout`: a hang fails the test, not the suite);
#   - write/edit confirmations show the unified diff, and edit's summary
#     counts lines as the diff does (-1 +1 inside a line, -1 +0, -0 +1);
#   - processes that leave the command's session (setsid, a double-fork
#     daemon) die with it on Ctrl+C, on the time limit and when the command
#     ends -- in a cgroup of their own where the machine allows one, and
#     with the cgroup path turned off (DS4_AGENT_CGROUP=0: the subreaper
#     and /proc scan fallback).
set -u
cd "$(dirname "$0")/.."
BD="${DS4_BIN_DIR:-.}"   # where the binaries are (build/debug/bin in the sanitizer pass)
. tests/agent/lib.sh
T=$(mktemp -d)
agent_state "$T/state"   # sessions per user: this test's own (tests/agent/lib.sh)
T=$(realpath "$T")
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in $(pgrep -f "$T/ds4mark"); do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT
command -v "${CC:-cc}" > /dev/null || { echo "t_agent_confine: no C compiler for the swap helper"; exit 1; }
"${CC:-cc}" -O2 -o "$T/swap" tests/agent/swap.c || { echo "t_agent_confine: cannot build tests/agent/swap.c"; exit 1; }

# invoke NAME KEY VALUE...: one invoke of a DSML block (block wraps them);
# a KEY written #KEY is a JSON (string="false") parameter
invoke() {
    local name=$1; shift
    printf '<%sinvoke name="%s">\n' "$D" "$name"
    local first=1
    while [ $# -gt 0 ]; do
        [ $first = 1 ] || printf '\n'
        first=0
        local k=$1 s=true
        case $k in \#*) k=${k#\#}; s=false;; esac
        printf '<%sparameter name="%s" string="%s">%s</%sparameter>' "$D" "$k" "$s" "$2" "$D"
        shift 2
    done
    printf '\n</%sinvoke>\n' "$D"
}
block_open() { printf '\n\n<%stool_calls>\n' "$D"; }
block_close() { printf '</%stool_calls>' "$D"; }

SECONDS=0
# ---------------------------------------------------------------- race
# 60 reads and 60 writes: today's main leaked 32 of 150 reads, so a leak
# rate like that cannot pass unseen (0.8^60; 0.8^20 = 1 % in the
# sanitizer pass, whose point is the memory checks)
NT=6
# under ASan a scripted turn costs ~10x: 20 reads and 20 writes there, and
# the swaps pause 10 ms (one resolution there, on a loaded machine, can
# outlast a few ms: with 300 us pauses a run once had 1 read and 0 writes
# let through of 40; with 10 ms windows each access lands whole in one
# state about 40 % of the time, so all 20 writes refused is ~4e-5)
PAUSE=0; MIN_SWAPS=1000
[ "${DS4_DEBUG_BUILD:-0}" = 1 ] && { NT=2; PAUSE=10000; MIN_SWAPS=200; }
W="$T/w"; OUT="$T/outside"
mkdir -p "$W/sw" "$OUT"
printf 'inside-%s\n' "$$" > "$W/sw/f.txt"
printf 'OUTSIDE-SECRET\n' > "$OUT/f.txt"
ln -s "$OUT" "$W/sl"
{
    for turn in $(seq 1 $NT); do
        printf 'Reads and writes, part %d.' "$turn"
        block_open
        for k in $(seq 1 10); do
            invoke read path "sw/f.txt"
            invoke write path "sw/new-$turn-$k.txt" content "written $turn $k"
        done
        block_close
        sep
    done
    printf 'Done.'
} > "$T/race.txt"
nice -n 19 "$T/swap" "$W/sw" "$W/sl" "$PAUSE" > "$T/swaps" &
SW=$!
PIDS+=("$SW")
timeout 600 "$AGENT" -m "$M" --ctx 65536 --nothink --yes --dir "$W" --script "$T/race.txt" -p "race" \
    > /dev/null 2> "$T/race.err"
rc=$?
kill -TERM "$SW"; wait "$SW"
swaps=$(cat "$T/swaps")
[ $rc -eq 0 ] && ok "race run exits 0 ($swaps swaps beside it)" || { bad "race run rc=$rc"; tail -5 "$T/race.err"; }
results "$W" > "$T/race.res"
reads_in=$(grep -c "inside-$$" "$T/race.res")
refused=$(grep -c "outside the working directory" "$T/race.res")
writes=$(grep -c "^created sw/new-" "$T/race.res")
leaks=$(grep -c "OUTSIDE-SECRET" "$T/race.res")
[ "$leaks" -eq 0 ] && ok "no read returned the outside file ($reads_in inside, $refused refused as outside)" \
    || bad "$leaks of $((NT * 10)) reads returned the file outside the working directory"
[ "$(ls -A "$OUT")" = "f.txt" ] && ok "no file created outside ($writes writes made inside)" \
    || bad "files created outside: $(ls -A "$OUT" | grep -v '^f.txt$' | wc -l) ($(ls -A "$OUT" | grep -v '^f.txt$' | head -3 | tr '\n' ' '))"
n=$(find "$T" -path "$W" -prune -o -name '*ds4tmp*' -print | wc -l)
[ "$n" -eq 0 ] && ok "no temp file outside" || bad "$n temp files outside the working directory"
n=$(find "$W" -name '*ds4tmp*' | wc -l)
[ "$n" -eq 0 ] && ok "no temp file left inside" || bad "$n temp files left inside"
[ "$swaps" -gt "$MIN_SWAPS" ] && [ "$reads_in" -gt 0 ] && [ "$writes" -gt 0 ] && ok "the race ran (swaps, reads and writes all happened)" \
    || bad "the race did not run: $swaps swaps, $reads_in reads, $writes writes"

echo "($SECONDS s)"
# ------------------------------------------------------- hard link at temp
W="$T/hl"; mkdir -p "$W/sub"
printf 'VICTIM-ORIGINAL\n' > "$OUT/victim"
printf 'old\n' > "$W/target.txt"
# $PPID of the tool's shell is the agent: every temp name a pid-only
# scheme could pick gets a hard link to the outside file
plant='for f in target.txt sub/new.txt; do for s in "" -0 -1 -00000000; do ln -f "'"$OUT"'/victim" "$f.ds4tmp-$PPID$s" 2>/dev/null; ln -f "'"$OUT"'/victim" "$(dirname $f)/.$(basename $f).ds4tmp-$PPID$s" 2>/dev/null; done; done; echo planted'
{
    printf 'Plant.'; call bash command "$plant"; sep
    printf 'Replace.'; call write path "target.txt" content "new content"; sep
    printf 'Create.'; call write path "sub/new.txt" content "fresh"; sep
    printf 'Plant again.'; call bash command "$plant"; sep
    printf 'Edit.'; call edit path "target.txt" old "new" new "edited"; sep
    printf 'Done.'
} > "$T/hl.txt"
timeout 300 "$AGENT" -m "$M" --ctx 16384 --nothink --yes --dir "$W" --script "$T/hl.txt" -p "links" > /dev/null 2> "$T/hl.err"
rc=$?
[ $rc -eq 0 ] && ok "hard-link run exits 0" || { bad "hard-link run rc=$rc"; tail -5 "$T/hl.err"; }
[ "$(cat "$OUT/victim")" = "VICTIM-ORIGINAL" ] && ok "the outside file behind the planted links is untouched" \
    || bad "the outside file was overwritten: $(head -c 60 "$OUT/victim")"
[ "$(cat "$W/target.txt")" = "edited content" ] && [ "$(cat "$W/sub/new.txt")" = "fresh" ] \
    && [ "$(stat -c %i "$W/target.txt")" != "$(stat -c %i "$OUT/victim")" ] \
    && ok "the writes and the edit went to new files of their own" || bad "target.txt / sub/new.txt wrong"

echo "($SECONDS s)"
# ------------------------------------------------------------------ FIFOs
W="$T/fifo"; mkdir -p "$W/src"
mkfifo "$W/pipe"
printf 'needle here\n' > "$W/src/a.txt"
{
    printf 'Read.'; call read path "pipe"; sep
    printf 'Search it.'; call search pattern "x" path "pipe"; sep
    printf 'Search all.'; call search pattern "needle"; sep
    printf 'Edit.'; call edit path "pipe" old "x" new "y"; sep
    printf 'Write.'; call write path "pipe" content "y"; sep
    printf 'List.'; call list; sep
    printf 'Done.'
} > "$T/fifo.txt"
timeout 60 "$AGENT" -m "$M" --ctx 16384 --nothink --yes --dir "$W" --script "$T/fifo.txt" -p "fifo" > /dev/null 2> "$T/fifo.err"
rc=$?
if [ $rc -eq 124 ]; then bad "a FIFO hung the agent (killed after 60 s)"
else
    [ $rc -eq 0 ] && ok "FIFO run exits 0 (no hang)" || { bad "FIFO run rc=$rc"; tail -5 "$T/fifo.err"; }
    results "$W" > "$T/fifo.res"
    r() { awk -v n="$1" '/^===== /{k++} k==n' "$T/fifo.res"; }
    r 1 | grep -q "not a regular file (a FIFO, socket or device); refused" && ok "read of a FIFO: clear refusal" || bad "read fifo: $(r 1)"
    r 2 | grep -q "not a regular file" && ok "search of a FIFO: clear refusal" || bad "search fifo: $(r 2)"
    r 3 | grep -q "src/a.txt:1:needle here" && r 3 | grep -q "1 special file skipped" && ok "search of the tree: the FIFO skipped and counted" || bad "search tree: $(r 3)"
    r 4 | grep -q "not a regular file" && ok "edit of a FIFO: refused" || bad "edit fifo: $(r 4)"
    r 5 | grep -q "not a regular file" && [ -p "$W/pipe" ] && ok "write over a FIFO: refused, the FIFO left" || bad "write fifo: $(r 5)"
    r 6 | grep -qP '^other\s+-\s+pipe$' && ok "list shows the FIFO as other" || bad "list: $(r 6)"
fi
W="$T/fifo2"; mkdir -p "$W"
mkfifo "$W/.gitignore"
printf 'needle\n' > "$W/b.txt"
{ printf 'Search.'; call search pattern "needle"; sep; printf 'Done.'; } > "$T/fifo2.txt"
timeout 60 "$AGENT" -m "$M" --ctx 8192 --nothink --yes --dir "$W" --script "$T/fifo2.txt" -p "fifo" > /dev/null 2> "$T/fifo2.err"
rc=$?
results "$W" > "$T/fifo2.res" 2>&1
[ $rc -eq 0 ] && grep -q "b.txt:1:needle" "$T/fifo2.res" && ok "a FIFO as .gitignore does not hang search" || bad "FIFO .gitignore rc=$rc"

echo "($SECONDS s)"
# ------------------------------------------------- diffs in confirmations
W="$T/diff"; mkdir -p "$W"
printf 'alpha\nbeta\ngamma\n' > "$W/a.txt"
printf 'a\n' > "$W/one.txt"
{
    printf 'In a line.'; call edit path "a.txt" old "beta" new ""; sep
    printf 'A whole line.'; call edit path "a.txt" old "gamma
" new ""; sep
    printf 'Add a line.'; call edit path "a.txt" old "alpha
" new "alpha
added
"; sep
    printf 'One letter.'; call edit path "one.txt" old "a" new "b"; sep
    printf 'Declined.'; call edit path "a.txt" old "added" new "nope"; sep
    printf 'New file.'; call write path "n.txt" content "one
two
"; sep
    printf 'Replace.'; call write path "n.txt" content "one
2
"; sep
    printf 'Done.'
} > "$T/diff.txt"
printf 'y\ny\ny\ny\nn\ny\ny\n' | timeout 120 "$AGENT" -m "$M" --ctx 16384 --nothink --dir "$W" --script "$T/diff.txt" \
    -p "diffs" > /dev/null 2> "$T/diff.err"
rc=$?
[ $rc -eq 0 ] && ok "diff run exits 0" || { bad "diff run rc=$rc"; tail -5 "$T/diff.err"; }
# the first confirmation: the whole diff, then the question
want1=$'--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n alpha\n-beta\n+\n gamma'
awk '/^--- a\/a.txt/{p=1} p&&/^allow /{exit} p' "$T/diff.err" > "$T/d1"
[ "$(cat "$T/d1")" = "$want1" ] && ok "edit confirmation shows the unified diff" || { bad "edit diff:"; cat "$T/d1"; }
grep -q "= ok: line 2: -1 +1 lines" "$T/diff.err" && ok "an edit inside a line: -1 +1" || bad "in-line counts: $(grep '= ok: line' "$T/diff.err" | head -1)"
grep -q "= ok: line 3: -1 +0 lines" "$T/diff.err" && ok "a deleted line: -1 +0" || bad "deleted-line counts"
grep -q "= ok: line 1: -0 +1 lines" "$T/diff.err" && ok "an added line: -0 +1" || bad "added-line counts"
grep -q "= ok: line 1: -1 +1 lines" "$T/diff.err" && ok "old=a new=b: -1 +1" || bad "a->b counts"
grep -q "^+nope$" "$T/diff.err" && grep -q "declined by the user" "$T/diff.err" && ! grep -q nope "$W/a.txt" \
    && ok "a declined edit showed its diff and changed nothing" || bad "declined edit"
grep -q -- "^--- /dev/null$" "$T/diff.err" && grep -q "^@@ -0,0 +1,2 @@$" "$T/diff.err" && ok "a new file's diff" || bad "new-file diff"
grep -q "^-two$" "$T/diff.err" && grep -q "^+2$" "$T/diff.err" && grep -q "replaced, 2 lines, 6 bytes (-1 +1 lines)" "$T/diff.err" \
    && ok "a replacing write's diff and counts" || bad "replace diff"
printf 'alpha\nadded\n\n' | cmp -s - "$W/a.txt" && [ "$(cat "$W/one.txt")" = b ] && ok "the file holds every accepted edit" || bad "a.txt: $(cat "$W/a.txt")"

echo "($SECONDS s)"
# ------------------------------------------------------ process containment
mk="$T/ds4mark-$$-sleep"
cp "$(command -v sleep)" "$mk"
alive() { pgrep -f "$mk $1" > /dev/null; }
cgmnt=$(awk '{for (i = 1; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2") print $5; break }}' /proc/self/mountinfo | head -1)
cgown=$(sed -n 's/^0:://p' /proc/self/cgroup)
[ "$cgown" = / ] && cgown=
cg_ok=0
if [ -n "$cgmnt" ] && mkdir "$cgmnt$cgown/ds4-test-probe-$$" 2> /dev/null; then
    rmdir "$cgmnt$cgown/ds4-test-probe-$$"; cg_ok=1
fi
[ $cg_ok = 1 ] || echo "note: no writable cgroup v2 here ($cgmnt$cgown): the cgroup path is not exercised, only the fallback"
W="$T/proc"; mkdir -p "$W"
for cgmode in cgroup fallback; do
    env=(); [ $cgmode = fallback ] && env=(DS4_AGENT_CGROUP=0)
    b=$([ $cgmode = cgroup ] && echo 1 || echo 2)   # distinct sleep lengths per pass
    # Ctrl+C: a daemon (setsid), a double-fork daemon, the foreground sleep
    { printf 'Start.'; call bash command "setsid $mk ${b}01 & setsid sh -c '$mk ${b}02 &'; $mk ${b}03"; sep; printf 'Stopped.'; } > "$T/int.txt"
    env "${env[@]}" "$AGENT" -m "$M" --ctx 8192 --nothink --yes --dir "$W" --script "$T/int.txt" -p "int" > /dev/null 2> "$T/int.err" &
    AP=$!
    PIDS+=("$AP")
    # the agent starts, loads the model and runs the script first: under ASan
    # on a loaded machine that took more than 10 s once
    for i in $(seq 1 600); do alive ${b}01 && alive ${b}02 && alive ${b}03 && break; sleep 0.1; done
    if alive ${b}01 && alive ${b}02 && alive ${b}03; then
        ok "$cgmode: the three processes run"
        p2=$(pgrep -f "$mk ${b}02" | head -1)
        if [ $cgmode = cgroup ] && [ $cg_ok = 1 ]; then
            grep -q "ds4-agent-$AP-" "/proc/$p2/cgroup" && ok "cgroup: the double-forked daemon is in the call's cgroup" || bad "cgroup: $(cat /proc/$p2/cgroup)"
        elif [ $cgmode = fallback ]; then
            ! grep -q "ds4-agent-" "/proc/$p2/cgroup" && ok "fallback: no cgroup used" || bad "fallback used a cgroup"
        fi
    else bad "$cgmode: the processes did not start"; fi
    kill -INT "$AP"
    for i in $(seq 1 50); do kill -0 "$AP" 2> /dev/null || break; sleep 0.1; done
    wait "$AP" 2> /dev/null
    sleep 0.2
    if alive ${b}01 || alive ${b}02 || alive ${b}03; then bad "$cgmode: a process survived Ctrl+C: $(pgrep -af "$mk" | head -3)"
    else ok "$cgmode: Ctrl+C killed the daemons and the foreground sleep"; fi
    # the time limit
    { printf 'Start.'; call bash command "setsid $mk ${b}11 & setsid sh -c '$mk ${b}12 &'; $mk ${b}13" "#timeout" 2; sep; printf 'Done.'; } > "$T/to.txt"
    env "${env[@]}" timeout 60 "$AGENT" -m "$M" --ctx 8192 --nothink --yes --dir "$W" --script "$T/to.txt" -p "to" > /dev/null 2> "$T/to.err"
    grep -q "timed out after 2 s" "$T/to.err" && ok "$cgmode: the time limit struck" || bad "$cgmode: no time limit: $(tail -3 "$T/to.err")"
    if alive ${b}11 || alive ${b}12 || alive ${b}13; then bad "$cgmode: a process survived the time limit: $(pgrep -af "$mk" | head -3)"
    else ok "$cgmode: the time limit killed everything"; fi
    # the end of the command: daemons it left behind go
    { printf 'Start.'; call bash command "setsid $mk ${b}21 > /dev/null 2>&1 & setsid sh -c '$mk ${b}22 > /dev/null 2>&1 &'; sleep 0.3; echo started"; sep; printf 'Done.'; } > "$T/end.txt"
    env "${env[@]}" timeout 60 "$AGENT" -m "$M" --ctx 8192 --nothink --yes --dir "$W" --script "$T/end.txt" -p "end" > /dev/null 2> "$T/end.err"
    results "$W" > "$T/end.res" 2>&1
    grep -q "2 background processes still running at the end were killed" "$T/end.res" \
        && ok "$cgmode: the result says two leftovers were killed" || bad "$cgmode: leftover note: $(tail -3 "$T/end.res")"
    if alive ${b}21 || alive ${b}22; then bad "$cgmode: a daemon outlived its command: $(pgrep -af "$mk" | head -3)"
    else ok "$cgmode: daemons left by a finished command were killed"; fi
    rm -rf "$(sessdir "$W")"
done
if [ $cg_ok = 1 ]; then
    # (another agent may be running: only those of agents that are gone)
    left=0
    for d in "$cgmnt$cgown"/ds4-agent-*; do
        [ -d "$d" ] || continue
        p=${d##*/ds4-agent-}; p=${p%%-*}
        kill -0 "$p" 2> /dev/null || left=$((left + 1))
    done
    [ "$left" -eq 0 ] && ok "no cgroup left behind" || bad "$left ds4-agent cgroups of finished agents left in $cgmnt$cgown"
fi

echo "t_agent_confine: $fail failure(s)"
[ "$fail" -eq 0 ]
