#!/usr/bin/env bash
# t_glm_front.sh -- a glm-dsa model through the three front ends, unchanged
# for their clients (docs/family.md, "In the front ends").  The model: the
# tiny glm-dsa file of tests/glm_gguf.py over the synthetic GLM vocabulary
# of tests/glm_vocab.py (GLM's chat and tool-call tags as control tokens).
#
#  1. ds4: --dump-tokens renders the GLM prompt ([gMASK]<sop>, the effort
#     line, <|user|>, <|assistant|><think> or <think></think> under
#     --nothink); -p generates; the interactive chat's second turn appends
#     only "<|user|>TEXT<|assistant|><think></think>" to the live session.
#  2. ds4-server --test-mode (tests/glm_front.py): a chat completion, a
#     streamed one, a GLM call forced through X-DS4-Test-Output coming back
#     as OpenAI tool_calls and Anthropic tool_use (plain and streamed), a
#     Responses function_call; the next request replaying the call reuses
#     the live session (cached tokens cover the first prompt: the exact
#     call text came back from the tool memory); a named tool_choice runs.
#  3. ds4-agent --script: a GLM call turn runs the read tool, the result is
#     rendered <|observation|><tool_response>..., the final answer is
#     printed; the session's tokens hold GLM's markers, no EOS between
#     turns.  The session's KV state is saved in the disk KV store.
#     Its own (sampled) turns run too, each on top of the live session.
set -u
cd "$(dirname "$0")/.." || exit 1
PY=/usr/bin/python3
BD=${DS4_BIN_DIR:-.}
T=$(mktemp -d "${TMPDIR:-/tmp}/ds4-glmfront.XXXXXX")
. tests/lib/server.sh
trap 'server_stop; rm -rf "$T"' EXIT
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }

mkdir -p "$T/cases"
$PY tests/glm_vocab.py "$T/vocab.gguf" "$T/cases" || { echo "FAIL glm_vocab.py"; exit 1; }
M="$T/m.gguf"
$PY tests/glm_gguf.py glm-dsa "$M" --vocab "$T/vocab.gguf" || { echo "FAIL glm_gguf.py"; exit 1; }

# --- 1. ds4 ---------------------------------------------------------------
# the token texts of --dump-tokens (third column), joined
toks() { "$BD"/ds4 -m "$M" --dump-tokens "$@" 2>/dev/null | cut -f3 | tr -d '\n'; }
p=$(toks -p "hello")
case "$p" in
    "[gMASK]<sop><|system|>Reasoning Effort: High<|user|>hello<|assistant|><think>") ok "ds4 -p renders the GLM prompt" ;;
    *) bad "ds4 --dump-tokens: $p" ;;
esac
p=$(toks -p "hello" --nothink)
[ "$p" = "[gMASK]<sop><|user|>hello<|assistant|><think></think>" ] && ok "--nothink: <think></think>" || bad "--nothink: $p"
"$BD"/ds4 -m "$M" --dump-tokens -p "hi" 2>/dev/null | grep -q "<|user|>" && \
    [ "$("$BD"/ds4 -m "$M" --dump-tokens -p "hi" 2>/dev/null | awk -F'\t' '$3=="<|user|>"' | wc -l)" -eq 1 ] \
    && ok "chat markers are single special tokens" || bad "markers not special tokens"
# random weights: the sampled answer may end at any of GLM's end tokens,
# so any count from 1 to the -n limit is a run
"$BD"/ds4 -m "$M" -p "hello" -n 8 --ctx 512 --seed 3 > "$T/o1" 2> "$T/e1" && grep -Eq "generated [1-8] tokens" "$T/e1" \
    && ok "ds4 -p generates" || { bad "ds4 -p"; tail -5 "$T/e1"; }
printf 'hello\nhow are you\n' | "$BD"/ds4 -m "$M" --nothink -n 4 --ctx 1024 > "$T/o2" 2>&1
n2=$(sed -n 's/.*\[prefill \([0-9]*\) tokens.*/\1/p' "$T/o2" | sed -n 2p)
# "<|user|>" + "how are you" + "<|assistant|><think></think>": the text's
# tokens plus 4 markers, counted from the one-shot rendering (less [gMASK]<sop>)
n1=$("$BD"/ds4 -m "$M" --dump-tokens -p "how are you" --nothink 2>/dev/null | wc -l)
[ -n "$n2" ] && [ "$n2" -eq $((n1 - 2)) ] && ok "chat: the second turn appends <|user|>..<|assistant|><think></think> ($n2 tokens)" \
    || { bad "chat second turn prefill ${n2:-none}, want $((n1 - 2))"; cat "$T/o2"; }

# --- 2. ds4-server ------------------------------------------------------------
if ! server_start "$T/srv.log" "$BD"/ds4-server -m "$M" --port 0 --ctx 4096 -t 1 --test-mode; then
    bad "ds4-server did not start"; cat "$T/srv.log"
else
    if $PY tests/glm_front.py "$URL" > "$T/front.out" 2>&1; then
        sed 's/^/  /' "$T/front.out"; ok "ds4-server: chat, stream, GLM tool calls, replay"
    else
        sed 's/^/  /' "$T/front.out"; bad "ds4-server (tests/glm_front.py)"; tail -20 "$T/srv.log"
    fi
    server_stop
    st=$?
    [ $st -eq 0 ] && ok "ds4-server: clean shutdown" || bad "ds4-server exit $st"
fi

# --- 3. ds4-agent ---------------------------------------------------------------
mkdir -p "$T/aw" "$T/state"
echo "hello file" > "$T/aw/a.txt"
printf '%s\n---\n%s' 'Read it.</think>Reading.<tool_call>read<arg_key>path</arg_key><arg_value>a.txt</arg_value></tool_call>' \
    'Got it.</think>The file says hello.' > "$T/s.txt"
XDG_STATE_HOME="$T/state" "$BD"/ds4-agent -m "$M" --yes --ctx 4096 --dir "$T/aw" --script "$T/s.txt" \
    --trace "$T/tr" -p "read a.txt" > "$T/aout" 2> "$T/aerr"
rc=$?
[ $rc -eq 0 ] && grep -qx "The file says hello." "$T/aout" && ok "ds4-agent --script: the GLM call turn and the answer" \
    || { bad "ds4-agent rc=$rc"; tail -20 "$T/aerr"; }
grep -q '"tool_calls":\[{"name":"read","ok":true}\]' "$T/tr" && ok "ds4-agent ran the read tool" || bad "trace: $(cat "$T/tr")"
kvf=$(find "$T/state" -name '*.ds4kv' | head -n1)
[ -n "$kvf" ] && $PY -c 'import sys; b = open(sys.argv[1], "rb").read(); sys.exit(b[112:119] != b"glm-dsa")' "$kvf" \
    && ok "ds4-agent: the session's KV state saved in the disk store (a glm-dsa file)" \
    || { bad "no glm-dsa KV file in the agent's store"; find "$T/state" | head; }
f=$(find "$T/state" -name '*.json' | head -n1)
"$BD"/ds4 -m "$M" --dump-tokens --tokens "$($PY -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['tokens'])))" "$f" 2>/dev/null)" \
    2>/dev/null | cut -f3 | tr -d '\n' > "$T/sess.txt"
grep -qF '</tool_call><|observation|><tool_response>' "$T/sess.txt" && grep -qF '</tool_response><|assistant|><think>Got it.</think>' "$T/sess.txt" \
    && ! grep -qF '<|endoftext|>' "$T/sess.txt" \
    && ok "ds4-agent session: the call, <|observation|><tool_response>, the next turn; no EOS" \
    || { bad "agent session tokens"; head -c 600 "$T/sess.txt"; echo; }

# the model's own turns (noise, seeded): three turns cut at --max-tokens end
# the run (exit 3); each next turn reuses the live session whole (no EOS
# added).  Random weights may also end a turn at one of GLM's end tokens:
# then that turn is the answer (exit 0) and the turns before it were cut.
mkdir -p "$T/aw2"
XDG_STATE_HOME="$T/state" "$BD"/ds4-agent -m "$M" --yes --nothink --ctx 4096 --max-tokens 16 --dir "$T/aw2" \
    --seed 3 --trace "$T/tr2" -p "hi" > "$T/aout2" 2> "$T/aerr2"
rc=$?
$PY - "$T/tr2" "$rc" <<'PY' && ok "ds4-agent: the model's own turns run, each reusing the live session" \
    || { bad "ds4-agent own turns rc=$rc"; cat "$T/tr2"; tail -5 "$T/aerr2"; }
import json, sys
t = [json.loads(l) for l in open(sys.argv[1])]
rc = int(sys.argv[2])
assert all(x.get("stopped") == "max_tokens" for x in t[:-1]), t
if rc == 3:
    assert len(t) == 3 and t[-1].get("stopped") == "max_tokens", t
else:
    assert rc == 0 and len(t) <= 3 and "stopped" not in t[-1], (rc, t)
for a, b in zip(t, t[1:]):
    assert b["cached_tokens"] == a["prompt_tokens"] + a["generated_tokens"], (a, b)
PY

[ $fail -eq 0 ] && echo "t_glm_front: all passed" || echo "t_glm_front: $fail failed"
[ $fail -eq 0 ]
