#!/usr/bin/env bash
# ds4-agent's real terminal UI, driven through tmux and read back with
# capture-pane: the prompt and line editing, streamed reasoning and answer,
# the compact tool-call line and its result summary, the confirmation
# question, the status line, Ctrl+C during a long bash (back at the prompt
# within a second, the command's process group gone), /last, /history,
# /list, /new, /switch, /quit.
set -u
cd "$(dirname "$0")/.."
BD="${DS4_BIN_DIR:-.}"   # where the binaries are (build/debug/bin in the sanitizer pass)
. tests/agent/lib.sh
command -v tmux > /dev/null || { echo "t_agent_tmux: tmux is not installed"; exit 1; }
T=$(mktemp -d)
agent_state "$T/state"
SOCK="$T/tmux.sock"
tm() { tmux -S "$SOCK" "$@"; }
trap 'tm kill-server 2>/dev/null; rm -rf "$T"' EXIT
W="$T/w"
mkdir -p "$W"
printf 'hello from the file\n' > "$W/greeting.txt"
{
    printf 'I will read the file.</think>Reading it.'; call read path "greeting.txt"; sep
    printf 'Now a long command.</think>'; call bash command "sleep 100; echo never-tmux-$$"; sep
    printf 'The user stopped it.</think>Understood, stopped.'; sep
    printf 'New session.</think>Fresh answer.'
} > "$T/script"

screen() { tm capture-pane -p -t ag -S -200; }
# wait_for TEXT [SECONDS]: poll the screen until TEXT shows up
wait_for() {
    local i n=$(( ${2:-90} * 10 ))
    for i in $(seq 1 $n); do screen | grep -qF -- "$1" && return 0; sleep 0.1; done
    return 1
}

tm new-session -d -s ag -x 160 -y 50 -c "$W" \
    "TERM=xterm-256color XDG_STATE_HOME='$XDG_STATE_HOME' '$AGENT' -m '$M' --ctx 8192 --dir '$W' --script '$T/script'; echo AGENT-EXITED; sleep 30"
wait_for "ds4>" 30 && ok "prompt shown" || { bad "no prompt"; screen; exit 1; }
tm send-keys -t ag "please read greeting.txt" Enter
wait_for "read greeting.txt" && ok "tool call shown compactly: read greeting.txt" || bad "no read line"
wait_for "lines 1-1 of 1" && ok "result summarized (lines)" || bad "no read summary"
wait_for "[ctx " && ok "status line with context use" || bad "no status line"
wait_for "tok/s" && ok "status line with tokens/s" || bad "no speed"
wait_for "allow \$ sleep 100" && ok "confirmation asked for bash" || { bad "no confirmation"; screen | tail -20; }
tm send-keys -t ag "y" Enter
for i in $(seq 1 50); do pgrep -f "sleep 100; echo never-tmux-$$" > /dev/null && break; sleep 0.1; done
pgrep -f "sleep 100; echo never-tmux-$$" > /dev/null && ok "the command runs" || bad "the command did not start"
t0=$(date +%s%N)
tm send-keys -t ag C-c
if wait_for "interrupted" 5; then
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    [ $ms -lt 1000 ] && ok "Ctrl+C stopped the tool in $ms ms" || bad "Ctrl+C took $ms ms"
else bad "Ctrl+C did nothing"; fi
sleep 0.3
pgrep -f "sleep 100; echo never-tmux-$$" > /dev/null && bad "the command survived Ctrl+C" || ok "the command's process group was killed"
tm send-keys -t ag "/last" Enter
wait_for "interrupted by the user after" && ok "/last shows the full result" || bad "/last"
tm send-keys -t ag "ok, leave it" Enter
wait_for "Understood, stopped." && ok "the conversation continues after the interrupt" || bad "no answer after interrupt"
screen | grep -q "The user stopped it" && ok "reasoning streamed" || bad "no reasoning on screen"
tm send-keys -t ag "/history" Enter
wait_for "user: ok, leave it" && ok "/history" || bad "/history"
tm send-keys -t ag "/new" Enter
wait_for "new session" && ok "/new" || bad "/new"
tm send-keys -t ag "something else" Enter
wait_for "Fresh answer." && ok "answer in the new session" || bad "new session answer"
tm send-keys -t ag "/list" Enter
wait_for "please read greeting.txt" && wait_for "(current)" && ok "/list: both sessions, titles, current marked" || bad "/list"
id1=$(cd "$(sessdir "$W")" && ls -tr *.json | head -1 | sed 's/.json$//')
tm send-keys -t ag "/switch ${id1:0:17}" Enter
wait_for "restored without prefill" && ok "/switch by unique prefix" || bad "/switch"
tm send-keys -t ag Up
sleep 0.3
screen | grep -v "^$" | tail -1 | grep -q "ds4> /switch" && ok "history recalls the last line (Up)" || bad "line history"
tm send-keys -t ag C-u "/quit" Enter
wait_for "AGENT-EXITED" 10 && ok "/quit exits" || bad "/quit"
screen | grep -q "saved" && ok "saved on exit" || bad "no save note at exit"

echo "t_agent_tmux: $fail failure(s)"
[ "$fail" -eq 0 ]
