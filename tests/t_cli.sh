#!/usr/bin/env bash
# The command line as a new user meets it, on the tiny model:
#  - --version on every binary (one version string), --help of every binary
#    lists exactly the options its parser accepts, bad values get a clear
#    "--flag: bad value" message and exit status 2;
#  - a --ctx above the model's trained context warns (and only then);
#  - multi-line messages from a pipe (trailing backslash, /multi ... /end);
#  - ds4-kv list: whole UTF-8 characters only, the end of each text shown;
#  - the demo run (tools/run_main.sh) stops answers at 256 tokens;
#  - the interactive chat on a real terminal, driven through tmux and read
#    back with capture-pane: Ctrl+D during an answer leaves nothing in the
#    next line, a bracketed paste of 3 lines is one message, multi-line
#    input, one progress bar per prefill across disk-cache checkpoints,
#    /help lists every command.  Skipped (with a message) without tmux.
set -u
cd "$(dirname "$0")/.."
BD="${DS4_BIN_DIR:-.}"   # where the binaries are (build/debug/bin in the sanitizer pass)
S="${DS4_SHARED:-../shared}"
M="$S/golden/models/tiny-a-q2.gguf"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
T=$(mktemp -d)
# one tmux server (socket) per chat: a server that is still shutting down
# never meets the next session
NS=0
TM=(tmux -L "ds4t$$-0" -f /dev/null)
cleanup() {
    for i in $(seq 0 "$NS"); do tmux -L "ds4t$$-$i" kill-server 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail+1)); }
BINS=(ds4 ds4-server ds4-synth ds4-bench ds4-kv)

# prefill token count of the first "[prefill N tokens" in a file
prefill_of() { grep -ao '\[prefill [0-9]* tokens' "$1" | head -1 | grep -o '[0-9]*'; }
# the same for a one-shot answer to TEXT (same rendering as a first turn)
oneshot_prefill() {
    "$BD"/ds4 -m "$M" --nothink -n 0 -p "$1" > "$T/one.out" 2>&1
    prefill_of "$T/one.out"
}

# ---- 1. --version -------------------------------------------------------
vers=""
for b in "${BINS[@]}"; do
    out=$("$BD"/$b --version 2>&1); rc=$?
    if [ $rc -eq 0 ] && [[ "$out" =~ ^$b\ [0-9]+\.[0-9]+\.[0-9]+ ]] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ]; then
        vers="$vers${out#"$b "}"$'\n'
    else bad "$b --version: rc $rc, '$out'"; fi
done
if [ "$(printf '%s' "$vers" | sort -u | wc -l)" -eq 1 ]; then
    ok "--version: one line, one version string on all ${#BINS[@]} binaries ($(printf '%s' "$vers" | head -1))"
else bad "--version strings differ (binaries from different builds? run make): $vers"; fi

# ---- 2. --help lists what the parser accepts ------------------------------
# Options the parsers match (ds4_args_is calls; ARG() in the server; -h,
# --help and --version answered by the shared cursor) against every option
# named in --help, both ways; the shared model/runtime flags count for the
# binaries that name their DS4_MO_* groups.
if "$PY" - > "$T/help.txt" 2>&1 <<'EOF'
import os, re, subprocess, sys
bins = {"ds4": "cli/main.c", "ds4-synth": "tools/ds4_synth.c", "ds4-bench": "tools/ds4_bench.c", "ds4-eval": "tools/ds4_eval.c", "ds4-steer": "tools/ds4_steer.c",
        "ds4-kv": "tools/ds4_kv.c", "ds4-server": "server/main.c", "ds4-agent": "agent/main.c"}
flag_re = re.compile(r'(?<![\w-])(--?[a-zA-Z][\w-]*)')
mo_src = open("src/common/model_opts.c").read()
bad = 0
for b, f in bins.items():
    t = open(f).read()
    src = set()
    for m in re.finditer(r'ds4_args_is\(&\w+,\s*(?:NULL|"([^"]+)"),\s*"([^"]+)"\)', t):
        src.update(x for x in m.groups() if x)
    for m in re.finditer(r'ARG\("([^"]+)"\)', t):
        src.add(m.group(1))
    if "ds4_args_next" in t:
        src.update(["-h", "--help", "--version"])
    # the shared model/runtime flags (src/common/model_opts.c) of the
    # DS4_MO_* groups this binary names
    groups = set(re.findall(r'\b(DS4_MO_[A-Z]+)\b', t))
    for m in re.finditer(r'is\(o, (DS4_MO_[A-Z]+), a, (?:NULL|"([^"]+)"), "([^"]+)"\)', mo_src):
        if m.group(1) in groups:
            src.update(x for x in m.groups()[1:] if x)
    h = subprocess.run([os.path.join(os.environ.get("DS4_BIN_DIR", "."), b), "--help"], capture_output=True, text=True)
    helps = set(flag_re.findall(h.stdout))
    if h.returncode != 0 or len(src) < 4 or src != helps:
        bad += 1
        print(f"{b}: rc {h.returncode}; accepted, not in --help: {sorted(src - helps)}; "
              f"in --help, not accepted: {sorted(helps - src)}")
    else:
        print(f"{b}: {len(src)} options")
sys.exit(1 if bad else 0)
EOF
then ok "--help lists exactly the accepted options: $(tr '\n' ' ' < "$T/help.txt")"
else bad "--help vs parser: $(cat "$T/help.txt")"; fi

# The shared model/runtime flags (src/common/model_opts.c) read the same in
# every binary that takes them: the --threads entry, two lines, verbatim.
same=""
for b in ds4 ds4-server ds4-agent ds4-bench ds4-eval ds4-steer; do
    h=$("$BD"/$b --help | grep -A1 -- '-t, --threads N')
    [ -z "$same" ] && same="$h"
    [ "$h" = "$same" ] && [ -n "$h" ] || { bad "$b --help: the shared --threads entry differs: '$h'"; same=x; }
done
[ "$same" != x ] && ok "the shared flags' help reads the same in all six model-loading binaries"

# --help shows every interactive command, the same list /help prints
"$BD"/ds4 --help > "$T/dh.txt"
cmds=$(grep -o '{ "/[a-z-]*"' cli/chat.c | grep -o '/[a-z-]*')
missing=""
for c in $cmds; do grep -q -- "^  $c" "$T/dh.txt" || missing="$missing $c"; done
if [ -n "$cmds" ] && [ -z "$missing" ] && grep -q "continues on the next line" "$T/dh.txt"; then
    ok "ds4 --help lists every chat command ($(echo $cmds | wc -w)) and the input keys"
else bad "ds4 --help lacks:$missing"; fi

# ---- 3. bad values --------------------------------------------------------
expect_bad() {   # expect_bad "PATTERN" BIN ARGS...
    local pat="$1"; shift
    "$@" > "$T/bad.out" 2> "$T/bad.err"
    local rc=$?
    if [ $rc -eq 2 ] && grep -qF -- "$pat" "$T/bad.err" && [ ! -s "$T/bad.out" ]; then
        ok "bad value: $* -> exit 2, '$(head -1 "$T/bad.err")'"
    else bad "bad value: $* -> rc $rc (want 2), stderr: $(head -2 "$T/bad.err")"; fi
}
expect_bad "ds4: --ctx: bad value 'abc' (expected an integer in [16, 16777216])" "$BD"/ds4 -m "$M" --ctx abc
expect_bad "--ctx: bad value '4k'" "$BD"/ds4 -m "$M" --ctx=4k
expect_bad "--temp: bad value 'nan'" "$BD"/ds4 -m "$M" --temp nan
expect_bad "--top-p: bad value '0'" "$BD"/ds4 -m "$M" --top-p 0
expect_bad "--seed: bad value '-1'" "$BD"/ds4 -m "$M" --seed -1
expect_bad "--kv-disk-space: bad value '8XB'" "$BD"/ds4 -m "$M" --kv-disk-space 8XB
expect_bad "-n needs a value" "$BD"/ds4 -m "$M" -n
expect_bad "unknown option '--frobnicate'" "$BD"/ds4 --frobnicate
expect_bad "--older-than: bad value 'soon'" "$BD"/ds4-kv rm "$T" --older-than soon
expect_bad "--threads: bad value '0'" "$BD"/ds4-synth --preset tiny --recipe q2 --threads 0 --dry-run
expect_bad "--gen-tokens: bad value '-3'" "$BD"/ds4-bench -m "$M" --prompt-file README.md --gen-tokens=-3
# sizes are accepted in any unit
if "$BD"/ds4 -q -m "$M" --kv-disk-dir "$T/kvsz" --kv-disk-space 8GB -p hi -n 1 > /dev/null 2>&1 &&
   "$BD"/ds4 -q -m "$M" --kv-disk-dir "$T/kvsz" --kv-disk-space=512MiB -p hi -n 1 > /dev/null 2>&1; then
    ok "--kv-disk-space 8GB / =512MiB accepted"
else bad "--kv-disk-space with a unit refused"; fi

# ---- 4. --ctx above the trained context ----------------------------------
ctx_train=$("$BD"/ds4 --inspect -m "$M" | awk '$1 == "deepseek4.context_length" {print $2}')
"$BD"/ds4 -m "$M" --ctx $((ctx_train * 2)) -p hi -n 1 > /dev/null 2> "$T/w1"
"$BD"/ds4 -m "$M" --ctx "$ctx_train" -p hi -n 1 > /dev/null 2> "$T/w2"
if [ -n "$ctx_train" ] && grep -q "warning: a context of $((ctx_train * 2)) tokens exceeds the $ctx_train" "$T/w1" &&
   ! grep -q "warning" "$T/w2"; then
    ok "--ctx $((ctx_train * 2)) > context_length $ctx_train warns; --ctx $ctx_train does not"
else bad "ctx warning: $(cat "$T/w1" "$T/w2" | grep -i warn)"; fi
printf '/ctx %s\n' $((ctx_train + 1)) | "$BD"/ds4 -m "$M" > /dev/null 2> "$T/w3"
grep -q "warning: a context of $((ctx_train + 1)) tokens exceeds" "$T/w3" &&
    ok "/ctx $((ctx_train + 1)) warns too" || bad "/ctx: no warning: $(cat "$T/w3")"

# ---- 5. multi-line messages from a pipe ----------------------------------
want=$(oneshot_prefill "$(printf 'first line\nsecond line\nthird')")
printf 'first line\\\nsecond line\\\nthird\n' | "$BD"/ds4 -m "$M" --nothink -n 1 > "$T/p1" 2>&1
got=$(prefill_of "$T/p1")
[ -n "$want" ] && [ "$got" = "$want" ] && [ "$(grep -c '\[prefill' "$T/p1")" -eq 1 ] &&
    ok "pipe: lines ending in \\ make one message ($got tokens, as -p)" ||
    bad "pipe backslash: $got tokens, one-shot $want"
printf '/multi\nfirst line\nsecond line\nthird\n/end\n' | "$BD"/ds4 -m "$M" --nothink -n 1 > "$T/p2" 2>&1
got=$(prefill_of "$T/p2")
[ -n "$want" ] && [ "$got" = "$want" ] && [ "$(grep -c '\[prefill' "$T/p2")" -eq 1 ] &&
    ok "pipe: /multi ... /end is one message ($got tokens, as -p)" ||
    bad "pipe /multi: $got tokens, one-shot $want"

# ---- 6. ds4-kv list --------------------------------------------------------
SYS="$(head -c 1500 bench/data/italian_sample.txt)"
for q in "Prima domanda: perché? 日本語のテキストです" "Seconda domanda: 中文文本很长很长很长"; do
    "$BD"/ds4 -q -m "$M" -sys "$SYS" -p "$q" -n 2 --nothink --temp 0 --kv-disk-dir "$T/kl" \
        --kv-cache-min-tokens 64 --kv-cache-boundary-align-tokens 64 > /dev/null 2>&1
done
"$BD"/ds4-kv list "$T/kl" > "$T/list.txt"
if "$PY" -c 'import sys; open(sys.argv[1], "rb").read().decode("utf-8", "strict")' "$T/list.txt" 2>/dev/null &&
   grep -q "日本語のテキストです<｜Assistant｜></think>" "$T/list.txt" &&
   grep -q "中文文本很长很长很长<｜Assistant｜></think>" "$T/list.txt" &&
   ! grep -q "begin▁of▁sentence" "$T/list.txt"; then
    ok "ds4-kv list: valid UTF-8, shows the ends that tell files apart"
else bad "ds4-kv list:"; cat "$T/list.txt"; fi

# ---- 7. the demo run answers briefly --------------------------------------
if [ -f ./ds4flash.gguf ]; then
    echo "skip run_main.sh demo check: ./ds4flash.gguf is present (the demo model is not used)"
else
    PROMPT="Hello" timeout 300 tools/run_main.sh > "$T/run.out" 2>&1
    n=$(grep -ao 'generated [0-9]* tokens' "$T/run.out" | grep -o '[0-9]*')
    if grep -q "answers are cut at 256 tokens" "$T/run.out" && [ -n "$n" ] && [ "$n" -le 256 ]; then
        ok "make run (demo model): $n tokens generated (-n 256)"
    else bad "run_main.sh: $(tail -3 "$T/run.out")"; fi
fi

# ---- 8. the interactive chat on a terminal (tmux) -------------------------
if ! command -v tmux > /dev/null; then
    echo "SKIP interactive terminal tests: tmux is not installed (apt-get install tmux)"
    echo "t_cli: $fail failure(s)"
    [ "$fail" -eq 0 ]; exit
fi
export TERM=xterm-256color   # tmux itself needs a terminal type
screen() { "${TM[@]}" capture-pane -p -J -S -300 -t chat 2>/dev/null; }
# the sanitizer build (ASan, -O1) runs the model several times slower:
# waits stretch by SLOW there (they are limits, not timings)
SLOW=1; [ "${DS4_DEBUG_BUILD:-0}" = 1 ] && SLOW=4
wait_for() {   # wait_for PATTERN SECONDS: the pane shows PATTERN (grep -E)
    local end=$((SECONDS + $2 * SLOW))
    while [ $SECONDS -lt $end ]; do
        screen | grep -aqE -- "$1" && return 0
        sleep 0.2
    done
    return 1
}
count() { screen | grep -acE -- "$1"; }
# start ARGS...: a fresh chat in a 200x60 pane; "__EXIT rc" when it ends
start() {
    "${TM[@]}" kill-server 2>/dev/null
    NS=$((NS + 1))
    TM=(tmux -L "ds4t$$-$NS" -f /dev/null)
    "${TM[@]}" new-session -d -s chat -x 200 -y 60 \
        "$BD/ds4 -m $M --nothink --temp 0 $*; echo __EXIT \$?; sleep 120" &&
        wait_for '^> ' 20 && return 0
    bad "tmux: the chat ($*) did not start"
    screen | tail -5
    return 1
}
keys() { "${TM[@]}" send-keys -t chat "$@"; }

# (a) Ctrl+D and other keys during an answer: typed text is kept for the
# next prompt, Ctrl+D is dropped (the chat goes on, no ^D on screen).
if start -n 100000; then
    keys "Hello" Enter
    wait_for '^> Hello$' 10; sleep 0.5
    keys C-d "/he" C-d "lp" C-d
    sleep 0.5
    keys C-c
    if wait_for '\[interrupted\]' 20 && wait_for '^> /help$' 10; then
        keys Enter
        if wait_for '^  /multi ' 10 && ! screen | grep -aq '\^D' && ! screen | grep -aq '__EXIT'; then
            ok "tmux: Ctrl+D during an answer: dropped; typed '/help' reaches the next prompt and runs"
        else bad "tmux: after Ctrl+D:"; screen | tail -15; fi
        keys C-d
        wait_for '__EXIT 0' 10 && ok "tmux: Ctrl+D on an empty line quits (exit 0)" ||
            { bad "tmux: Ctrl+D at the prompt did not quit"; screen | tail -5; }
    else bad "tmux: no prompt after the interrupted answer:"; screen | tail -15; fi
fi

# (b) a bracketed paste of 3 lines is one message
want=$(oneshot_prefill "$(printf 'line one\nline two\nline three and more')")
if start -n 2; then
    printf 'line one\nline two\nline three' | "${TM[@]}" load-buffer -
    "${TM[@]}" paste-buffer -p -t chat
    if wait_for '^> \[paste #1: 3 lines\]' 10; then
        keys " and more" Enter
        wait_for '\[prefill [0-9]+ tokens' 20
        got=$(screen | grep -ao '\[prefill [0-9]* tokens' | grep -o '[0-9]*' | tr '\n' ' ')
        if [ "$got" = "$want " ]; then
            ok "tmux: a bracketed paste of 3 lines + typed text is one message ($want tokens, as -p)"
        else bad "tmux: paste gave prefills '$got', one-shot $want"; screen | tail -8; fi
    else bad "tmux: no paste tag"; screen | tail -5; fi
fi

# (c) multi-line input on a terminal: trailing backslash, then /multi
want=$(oneshot_prefill "$(printf 'alpha\nbeta\ngamma')")
if start -n 2; then
    keys 'alpha\' Enter 'beta\' Enter gamma Enter
    wait_for '\[prefill [0-9]+ tokens' 20
    g1=$(screen | grep -ao '\[prefill [0-9]* tokens' | grep -o '[0-9]*' | tr '\n' ' ')
    keys /clear Enter
    wait_for '^new conversation' 10
    keys /multi Enter alpha Enter beta Enter gamma Enter /end Enter
    for i in $(seq 100); do [ "$(count '\[prefill [0-9]+ tokens')" -ge 2 ] && break; sleep 0.2; done
    g2=$(screen | grep -ao '\[prefill [0-9]* tokens' | grep -o '[0-9]*' | tail -1)
    if [ "$g1" = "$want " ] && screen | grep -aq '^\.\.\. beta' && [ "$g2" = "$want" ]; then
        ok "tmux: 'line\\' continuation and /multi ... /end each give one message ($want tokens)"
    else bad "tmux: multi-line: '$g1' / '$g2', one-shot $want"; screen | tail -12; fi
fi

# (d) one progress bar per prefill, even when disk-cache checkpoints split
# it into several engine calls
# (~900 tokens: 64-token chunks, a checkpoint every 256 tokens)
head -c 2000 bench/data/italian_sample.txt > "$T/long.txt"
if start -n 1 --chunk 64 --kv-disk-dir "$T/kvp" --kv-cache-min-tokens 64 \
        --kv-cache-boundary-align-tokens 64 --kv-cache-continued-interval-tokens 256; then
    keys "/read $T/long.txt" Enter
    if wait_for '\[prefill [0-9]+ tokens' 240; then
        bars=$(count '^prefill [0-9]+/[0-9]+ \[')
        saves=$(count 'disk KV cache: saved [0-9]+ tokens \((cold|continued)\)')
        if [ "$bars" -eq 1 ] && [ "$saves" -ge 2 ] && screen | grep -aqE '^prefill ([0-9]+)/\1 \[#+\] 100%'; then
            ok "tmux: one progress bar (ending at 100%) across $saves checkpoint saves"
        else bad "tmux: $bars progress bars, $saves saves"; screen | grep -a 'prefill\|saved' | head; fi
    else bad "tmux: the long prefill did not finish"; screen | tail -5; fi
fi

# (e) /help lists every command
if start -n 1; then
    keys /help Enter
    wait_for '^  /quit ' 10
    missing=""
    for c in $cmds; do screen | grep -aq -- "^  $c" || missing="$missing $c"; done
    [ -z "$missing" ] && ok "tmux: /help lists every command" || bad "tmux: /help lacks:$missing"
fi

# (f) stdin a terminal, stdout a file (no line editing): Ctrl+D during an
# answer is dropped too, the chat goes on and quits on Ctrl+D at the prompt
NLONG=4000; [ "$SLOW" -gt 1 ] && NLONG=1000
"${TM[@]}" kill-server 2>/dev/null
NS=$((NS + 1))
TM=(tmux -L "ds4t$$-$NS" -f /dev/null)
"${TM[@]}" new-session -d -s chat -x 200 -y 60 \
    "$BD/ds4 -m $M --nothink --temp 0 -n $NLONG > $T/f.out; echo __EXIT \$?; sleep 120"
if wait_for 'Ctrl\+D to quit' 20; then
    # 4000 tokens take seconds even on a fast machine: the Ctrl+D lands
    # inside the answer (300 took 0.3 s, and then it reached the prompt)
    keys "Hello" Enter
    sleep 0.3
    keys C-d
    wait_for "generated $NLONG tokens" 90
    keys "/help" Enter
    for i in $(seq 50); do grep -q '^  /multi ' "$T/f.out" && break; sleep 0.2; done
    keys C-d
    if wait_for '__EXIT 0' 10 && grep -q '^  /multi ' "$T/f.out"; then
        ok "tmux, stdout a file: Ctrl+D during an answer is dropped; /help runs; Ctrl+D quits"
    else bad "tmux, stdout a file:"; screen | tail -6; fi
else bad "tmux: the chat (stdout a file) did not start"; fi

echo "t_cli: $fail failure(s)"
[ "$fail" -eq 0 ]
