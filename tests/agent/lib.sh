# Helpers of the ds4-agent tests (sourced): DSML tool-call blocks for
# --script files, the tool results of a saved session, trace fields.
S="${DS4_SHARED:-../shared}"
M="$(realpath "${AGENT_MODEL:-$S/golden/models/tiny-a-q2.gguf}")"
case "${DS4_BIN_DIR:-.}" in /*) AGENT="$DS4_BIN_DIR/ds4-agent" ;; *) AGENT="$PWD/${DS4_BIN_DIR:-.}/ds4-agent" ;; esac
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail+1)); }
D='｜DSML｜'

# call NAME KEY VALUE [KEY VALUE...]: one DSML block with one invoke; a KEY
# written #KEY is a string="false" (JSON) parameter.
call() {
    local name=$1; shift
    printf '\n\n<%stool_calls>\n<%sinvoke name="%s">\n' "$D" "$D" "$name"
    local first=1
    while [ $# -gt 0 ]; do
        [ $first = 1 ] || printf '\n'
        first=0
        local k=$1 s=true
        case $k in \#*) k=${k#\#}; s=false;; esac
        printf '<%sparameter name="%s" string="%s">%s</%sparameter>' "$D" "$k" "$s" "$2" "$D"
        shift 2
    done
    printf '\n</%sinvoke>\n</%stool_calls>' "$D" "$D"
}
sep() { printf '\n---\n'; }

# The agent keeps its sessions per user, under $XDG_STATE_HOME/ds4/agent/
# NAME-HASH/sessions (docs/agent.md "Sessions = KV states"): every test points XDG_STATE_HOME
# at a directory of its own (agent_state) and reads them there (sessdir).
agent_state() { export XDG_STATE_HOME="$1"; }   # the agent creates it (0700)

# sessdir WORKDIR: the sessions directory of that working directory: NAME
# is its name (bytes other than letters, digits, '.', '_', '-' -- or a
# leading '.' -- as '_', at most 32), HASH the FNV-1a 64 of its real path.
sessdir() {
    /usr/bin/python3 - "$1" <<'PY'
import os, re, sys
p = os.path.realpath(sys.argv[1])
b = os.path.basename(p).encode()[:32]
name = "".join(chr(c) if re.match(rb"[A-Za-z0-9_-]", bytes([c])) or (c == 46 and i > 0) else "_" for i, c in enumerate(b)) or "root"
h = 0xcbf29ce484222325
for c in p.encode():
    h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff
print("%s/ds4/agent/%s-%016x/sessions" % (os.environ["XDG_STATE_HOME"], name, h))
PY
}

# results DIR: the tool results of the only (or newest) session of working
# directory DIR, one per call, separated by lines "=====".
results() {
    /usr/bin/python3 - "$(sessdir "$1")" <<'PY'
import json, sys, glob, os
fs = sorted(glob.glob(os.path.join(sys.argv[1], "*.json")), key=os.path.getmtime)
s = json.load(open(fs[-1]))
for m in s["messages"]:
    if m["kind"] == "tools":
        for c in m["calls"]:
            print("=====", c["name"], "ok" if c["ok"] else "failed")
            print(c.get("result", ""))
PY
}

# trace_check FILE: every turn after the first of a session evaluated only
# its new tokens (cached = previous prompt + generated, prefill = prompt -
# cached); prints a reason and fails otherwise.
trace_check() {
    /usr/bin/python3 - "$1" <<'PY'
import json, sys
prev = {}
bad = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    for k in ("turn", "prompt_tokens", "cached_tokens", "prefill_tokens", "generated_tokens", "tool_calls", "session"):
        if k not in r: print("missing", k); bad = 1
    if r["prefill_tokens"] != r["prompt_tokens"] - r["cached_tokens"]: print("prefill != prompt - cached", r); bad = 1
    p = prev.get(r["session"])
    if p is not None and r.get("event") is None and p.get("event") != "summary":
        if r["cached_tokens"] != p["prompt_tokens"] + p["generated_tokens"]:
            print("turn", r["turn"], "re-evaluated old tokens:", r); bad = 1
    prev[r["session"]] = r
sys.exit(bad)
PY
}
