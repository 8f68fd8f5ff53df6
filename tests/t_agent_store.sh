#!/usr/bin/env bash
# Where ds4-agent keeps its sessions: per user, never in the project.
#  - $XDG_STATE_HOME/ds4/agent/NAME-HASH/sessions (NAME the working
#    directory's name, HASH the FNV-1a 64 of its real path), directories
#    created 0700, session files 0600, no temporary file left behind;
#    nothing written into the working directory (the line history neither);
#  - XDG_STATE_HOME unset or relative: ~/.local/state; no HOME either, or
#    a state path that cannot be a directory: a clear error, exit 1;
#  - --resume finds the sessions of the same directory from anywhere (a
#    symbolic link to it included), not those of another directory of the
#    same name;
#  - sessions of older versions in DIR/.ds4/sessions: a note at start,
#    listed and resumable, saved in the new place, the old files untouched;
#  - --sessions DIR still puts them where asked.
set -u
cd "$(dirname "$0")/.."
BD="${DS4_BIN_DIR:-.}"   # where the binaries are (build/debug/bin in the sanitizer pass)
. tests/agent/lib.sh
T=$(mktemp -d)
[ -n "${KEEP:-}" ] && echo "kept $T" || trap 'rm -rf "$T"' EXIT
agent_state "$T/state"
common=(-m "$M" --ctx 4096 --yes)

printf 'Ok.</think>First answer.' > "$T/s1"
printf 'Again.</think>Second answer.' > "$T/s2"
mode() { stat -c %a "$1"; }

# 1. the default place
W="$T/proj"
mkdir -p "$W"
"$AGENT" "${common[@]}" --dir "$W" --script "$T/s1" -p "first task" > "$T/o1" 2> "$T/e1" || bad "run 1: $(tail -2 "$T/e1")"
SD=$(sessdir "$W")
case "$SD" in "$T/state/ds4/agent/proj-"????????????????"/sessions") ;; *) bad "unexpected path $SD" ;; esac
ls "$SD"/*.json > /dev/null 2>&1 && ok "session saved in \$XDG_STATE_HOME/ds4/agent/proj-HASH/sessions" \
    || { bad "no session in $SD"; find "$T/state" "$W" | head; }
[ -z "$(ls -A "$W")" ] && ok "nothing written into the working directory" || bad "the project got: $(ls -A "$W")"
m=""; for d in "$T/state" "$T/state/ds4" "$T/state/ds4/agent" "$(dirname "$SD")" "$SD" "$SD/kv"; do m="$m $(mode "$d")"; done
[ "$m" = " 700 700 700 700 700 700" ] && ok "directories created 0700" || bad "modes:$m"
[ "$(mode "$(ls "$SD"/*.json)")" = 600 ] && ok "session file 0600" || bad "session file mode $(mode "$(ls "$SD"/*.json)")"
[ -z "$(find "$T/state" -name '*.tmp-*')" ] && ok "no temporary file left" || bad "temporary files: $(find "$T/state" -name '*.tmp-*')"

# 2. --resume from elsewhere, through a link; not another "proj"
mkdir -p "$T/else" "$T/other/proj"
ln -s "$W" "$T/link"
(cd "$T/else" && "$AGENT" "${common[@]}" --dir "$T/link" --script "$T/s2" --resume -p "second" > "$T/o2" 2> "$T/e2") || bad "run 2"
grep -q "resumed session .*first task" "$T/e2" && grep -qx "Second answer." "$T/o2" \
    && ok "--resume through a symbolic link, from another directory" || { bad "resume via link"; cat "$T/e2"; }
[ "$(ls "$SD"/*.json | wc -l)" = 1 ] && ok "the same session continued" || bad "sessions: $(ls "$SD")"
"$AGENT" "${common[@]}" --dir "$T/other/proj" --script "$T/s2" --resume -p "third" > /dev/null 2> "$T/e3" || bad "run 3"
grep -q "no session to resume" "$T/e3" && ok "another directory of the same name has its own sessions" || { bad "other proj"; cat "$T/e3"; }
[ "$(sessdir "$T/other/proj")" != "$SD" ] && [ -d "$(sessdir "$T/other/proj")" ] || bad "other proj: same key"

# 3. XDG_STATE_HOME unset or relative: ~/.local/state
mkdir -p "$T/home" "$T/h"
(unset XDG_STATE_HOME; HOME="$T/home" "$AGENT" "${common[@]}" --dir "$T/h" --script "$T/s1" -p x > /dev/null 2>&1) || bad "run 4"
ls "$T/home/.local/state/ds4/agent/h-"*/sessions/*.json > /dev/null 2>&1 && ok "no XDG_STATE_HOME: ~/.local/state/ds4" || bad "no file under ~/.local/state"
(XDG_STATE_HOME=rel HOME="$T/home" "$AGENT" "${common[@]}" --dir "$T/h" --script "$T/s2" --resume -p y > /dev/null 2> "$T/e5") || bad "run 5"
grep -q "resumed session" "$T/e5" && [ ! -e rel ] && [ ! -e "$T/h/rel" ] && ok "a relative XDG_STATE_HOME is ignored" || bad "relative XDG_STATE_HOME"

# 4. no place for the state: a clear error, nothing written
(unset XDG_STATE_HOME HOME; "$AGENT" "${common[@]}" --dir "$T/h" --script "$T/s1" -p x > /dev/null 2> "$T/e6"); rc=$?
[ $rc -eq 1 ] && grep -q "neither XDG_STATE_HOME nor HOME" "$T/e6" && grep -q -- "--sessions DIR" "$T/e6" \
    && ok "no HOME: clear error, exit 1" || { bad "no HOME rc=$rc"; cat "$T/e6"; }
: > "$T/afile"
XDG_STATE_HOME="$T/afile" "$AGENT" "${common[@]}" --dir "$T/h" --script "$T/s1" -p x > /dev/null 2> "$T/e7"; rc=$?
[ $rc -eq 1 ] && grep -q "cannot create the session directory $T/afile/ds4/agent/h-.*: Not a directory" "$T/e7" \
    && ok "a state path that is not a directory: clear error, exit 1" || { bad "file as state rc=$rc"; cat "$T/e7"; }

# 5. sessions of an older version, in the project's .ds4/sessions
O="$T/old"
mkdir -p "$O"
"$AGENT" "${common[@]}" --dir "$O" --sessions "$O/.ds4/sessions" --script "$T/s1" -p "old task" > /dev/null 2>&1 || bad "run 8"
[ "$(mode "$O/.ds4/sessions")" = 700 ] && ls "$O/.ds4/sessions/"*.json > /dev/null && ok "--sessions DIR: saved there" || bad "--sessions"
oldf=$(ls "$O/.ds4/sessions/"*.json); oid=$(basename "$oldf" .json); sum=$(md5sum < "$oldf")
[ -z "$(ls "$(sessdir "$O")" 2> /dev/null | grep json)" ] || bad "--sessions also wrote the default place"
printf '/list\n/quit\n' | "$AGENT" "${common[@]}" --dir "$O" --script "$T/s2" > "$T/o9" 2>&1 || bad "run 9"
grep -q "those in $O/.ds4/sessions (older versions) are still listed" "$T/o9" && ok "a note names the old location" || { bad "no note"; head -5 "$T/o9"; }
grep -q "$oid .*old task  (old location)" "$T/o9" && ok "/list shows the old session, marked" || { bad "/list"; cat "$T/o9"; }
[ -f "$(dirname "$(sessdir "$O")")/history" ] && [ ! -e "$O/.ds4/history" ] \
    && ok "the line history is kept beside the sessions, not in the project" || bad "history: $(find "$T/state" "$O" -name history)"
"$AGENT" "${common[@]}" --dir "$O" --script "$T/s2" --resume -p "continue it" > "$T/o10" 2> "$T/e10" || bad "run 10"
grep -q "resumed session $oid" "$T/e10" && grep -qx "Second answer." "$T/o10" && ok "--resume continues the old session" || { bad "old resume"; cat "$T/e10"; }
/usr/bin/python3 - "$(sessdir "$O")/$oid.json" <<'PY' && ok "it is saved in the new place, with both turns" || bad "old session not saved anew"
import json, sys
s = json.load(open(sys.argv[1]))
assert [m.get("text") for m in s["messages"] if m["kind"] == "user"] == ["old task", "continue it"], s["messages"]
PY
[ "$(md5sum < "$oldf")" = "$sum" ] && ok "the old file is untouched" || bad "the old file changed"
printf '/list\n/quit\n' | "$AGENT" "${common[@]}" --dir "$O" --script "$T/s2" > "$T/o11" 2>&1
[ "$(grep -c "^$oid" "$T/o11")" = 1 ] && ! grep -q "$oid.*(old location)" "$T/o11" && ok "/list shows it once, from the new place" || { bad "/list after"; cat "$T/o11"; }

echo "t_agent_store: $fail failure(s)"
[ "$fail" -eq 0 ]
