#!/usr/bin/env bash
# ds4-agent --lookup (prompt-lookup drafts, docs/SPEC.md "In the agent"):
# a turn with drafts is token for token the turn without them, and leaves
# the same state.  Scripted turns (their "choice" is the forced text, so
# drafts of repeated spans are accepted: file contents written twice, a
# second DSML block whose closing tags end the block inside a pass, the
# reasoning channel closing inside a pass, a --max-tokens cut inside a
# pass) and sampled / greedy turns of the tiny model: stdout, exit status,
# the saved transcript's tokens, the saved KV state files (byte for byte),
# the written files and the trace (but its drafted/accepted counts) are
# the same with --lookup 0, 1, 4 and 16; the same for MTP drafts (--mtp-draft,
# alone and with the lookup) on a model with a random MTP block, but for
# sampled turns, where MTP drafts keep plain sampling's distribution and
# a seed its turn (docs/SPEC.md "Sampled MTP drafts").
# ds4-test: optimized-only (2 minutes under ASan; the drafting path runs under ASan in t_agent_tmux, whose scripted turns draft by default)
set -u
cd "$(dirname "$0")/.."
BD="${DS4_BIN_DIR:-.}"   # where the binaries are (build/debug/bin in the sanitizer pass)
. tests/agent/lib.sh
T=$(mktemp -d)
[ -n "${KEEP:-}" ] && echo "keeping $T"
trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT

# run NAME LOOKUP ARGS...: one agent run in $T/w (the same path each time:
# the system prompt names the directory), kept as $T/NAME.*; its sessions
# in a state directory of its own, $T/NAME.state
run() {
    local name=$1 l=$2
    shift 2
    rm -rf "$T/w"
    mkdir -p "$T/w"
    printf 'alpha beta gamma\n' > "$T/w/seed.txt"
    [ -n "${EXTRA:-}" ] && cp "$EXTRA" "$T/w/"
    agent_state "$T/$name.state"
    "$AGENT" -m "$M" --ctx 4096 --yes --lookup "$l" --dir "$T/w" --trace "$T/$name.tr" "$@" \
        > "$T/$name.out" 2> "$T/$name.err"
    echo $? > "$T/$name.rc"
    sessdir "$T/w" > "$T/$name.sess"
    mv "$T/w" "$T/$name.w"
}

# same A B: everything but the drafting counts agrees
same() {
    local a=$1 b=$2 r=0
    cmp -s "$T/$a.out" "$T/$b.out" || { echo "  stdout differs"; r=1; }
    cmp -s "$T/$a.rc" "$T/$b.rc" || { echo "  exit status differs"; r=1; }
    /usr/bin/python3 - "$T/$a" "$T/$b" <<'PY' || r=1
import glob, json, os, sys, filecmp
a, b = sys.argv[1], sys.argv[2]
def sd(p):
    return open(p + ".sess").read().strip()
def sess(p):
    fs = glob.glob(sd(p) + "/*.json")
    assert len(fs) == 1, fs
    s = json.load(open(fs[0]))
    return s["tokens"], s["state_tokens"], [m["kind"] for m in s["messages"]]
assert sess(a) == sess(b), "saved sessions differ"
ka = sorted(os.listdir(sd(a) + "/kv")); kb = sorted(os.listdir(sd(b) + "/kv"))
assert ka == kb, ("kv file names", ka, kb)
def kv(p):
    # header fields but the times (created, last_used, hits: bytes 24..43),
    # the text and the session snapshot (docs/kvcache.md "Disk KV cache"); not the
    # tools section (tool-call ids are random) nor the checksum
    import struct
    d = open(p, "rb").read()
    tl, pl = struct.unpack_from("<QQ", d, 48)
    return d[:24] + d[44:64] + d[72:128 + tl + pl]
for f in ka:
    if f.endswith(".ds4kv"):
        assert kv(sd(a) + "/kv/" + f) == kv(sd(b) + "/kv/" + f), "kv " + f
for f in glob.glob(a + ".w/*"):
    g = b + ".w/" + os.path.basename(f)
    assert os.path.isfile(g) and filecmp.cmp(f, g, shallow=False), "file " + f
def tr(p):
    out = []
    for line in open(p + ".tr"):
        j = json.loads(line)
        for k in ("drafted", "accepted", "session"): j.pop(k)
        out.append(j)
    return out
assert tr(a) == tr(b), "traces differ"
PY
    return $r
}

# drafted / accepted totals of a trace
counts() {
    /usr/bin/python3 -c '
import json, sys
d = a = 0
for line in open(sys.argv[1]):
    j = json.loads(line); d += j["drafted"]; a += j["accepted"]
print(d, a)' "$T/$1.tr"
}

TEXT="one two three four five six seven eight nine ten eleven twelve"
{
    printf 'I will copy the seed. %s.</think>Writing it.' "$TEXT"
    call write path "copy.txt" content "$TEXT
$TEXT
$TEXT"
    sep
    printf 'Now the same call again: %s.</think>Again.' "$TEXT"
    call write path "copy2.txt" content "$TEXT
$TEXT"
    sep
    printf 'And an edit: %s %s.</think>Editing.' "$TEXT" "$TEXT"
    call edit path "copy.txt" old "$TEXT
$TEXT
$TEXT" new "$TEXT"
    sep
    printf 'Done with %s.</think>All done: %s, %s.' "$TEXT" "$TEXT" "$TEXT"
} > "$T/script"

# the sanitizer pass (ASan is ~10x slower) runs the scripted set with 0 and 4
LS="0 1 4 16"
[ -n "${DS4_DEBUG_BUILD:-}" ] && LS="0 4"
for l in $LS; do run "s$l" "$l" --think --script "$T/script" -p "copy things"; done
[ "$(cat "$T/s0.rc")" = 0 ] && ok "scripted run: exit 0" || bad "scripted run rc=$(cat "$T/s0.rc") $(tail -3 "$T/s0.err")"
read -r d a < <(counts s0)
[ "$d" = 0 ] && ok "--lookup 0 drafts nothing" || bad "--lookup 0 drafted $d"
for l in ${LS#0 }; do
    same s0 "s$l" && ok "scripted turns with --lookup $l: same output, transcript, KV files, files, trace" \
        || bad "scripted turns with --lookup $l differ"
done
read -r d a < <(counts s4)
# most drafts of this copy-heavy script hold: 415 of 589 (70 %) since the
# lookup history follows the text through the back-off too (53 % when the
# backed-off tokens were missing from it)
[ "$a" -gt 40 ] && [ $((100 * a)) -ge $((60 * d)) ] && ok "--lookup 4 kept drafts in copied spans ($a of $d)" \
    || bad "--lookup 4 kept $a of $d (expected >= 60 %)"
grep -q 'lookup [0-9]* of [0-9]* drafts kept' "$T/s4.err" && ok "status line reports the drafts" || bad "no lookup status"

# a file read (the tool numbers its lines) and written back unchanged: the
# drafts are also looked up in the read result without its line numbers,
# so they hold across line ends (the write turn kept 623 of 672 drafts,
# 93 %, against 568 of 808, 70 %, with the history alone, where every
# line end drafts the next line number)
/usr/bin/python3 - > "$T/poem.txt" <<'PY'
import random
random.seed(7)
w = "river stone candle morning orchard silver lantern harbor meadow thunder violet copper whisper garden winter ember glass valley feather shadow".split()
for i in range(40):
    print(" ".join(random.choice(w) for _ in range(random.randint(4, 9))))
PY
{
    printf 'Let me read the poem first.</think>Reading.'
    call read path "poem.txt"
    sep
    printf 'Now I write it back unchanged.</think>Copying.'
    call write path "poem2.txt" content "$(cat "$T/poem.txt")
"
    sep
    printf 'Copied.</think>Done.'
} > "$T/pscript"
for l in 0 4; do EXTRA="$T/poem.txt" run "p$l" "$l" --think --script "$T/pscript" -p "copy the poem"; done
same p0 p4 && ok "read + write back: same with drafts" || bad "read + write back differs"
cmp -s "$T/poem.txt" "$T/p4.w/poem2.txt" && ok "the poem was written back" || bad "poem2.txt differs from poem.txt"
read -r d a < <(/usr/bin/python3 -c '
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
print(rs[1]["drafted"], rs[1]["accepted"])' "$T/p4.tr")
[ "$a" -gt 300 ] && [ $((100 * a)) -ge $((85 * d)) ] && ok "write-back turn kept $a of $d drafts (line numbers skipped)" \
    || bad "write-back turn kept $a of $d drafts (expected >= 85 %)"

# a turn cut by --max-tokens inside a copied span
for l in 0 4; do run "c$l" "$l" --think --max-tokens 45 --max-turns 2 --script "$T/script" -p "copy things"; done
same c0 c4 && ok "turns cut by --max-tokens: same with drafts" || bad "--max-tokens cut differs"

# the tiny model's own turns: greedy and seeded sampling
for l in 0 4; do run "g$l" "$l" --nothink --temp 0 --max-tokens 300 --max-turns 1 -p "Say something."; done
same g0 g4 && ok "greedy model turn: same with drafts" || bad "greedy model turn differs"
for l in 0 4; do run "r$l" "$l" --think --temp 1 --seed 11 --max-tokens 300 --max-turns 2 -p "Say something."; done
same r0 r4 && ok "seeded sampled model turns: same with drafts" || bad "seeded sampled turns differ"
read -r d a < <(counts r4)
[ "$d" -gt 0 ] && ok "sampled turns were drafted ($d drafts, $a kept)" || bad "no drafts in the sampled turns"

# --mtp / --mtp-draft (docs/agent.md): a model with a random MTP block
# (ds4-synth --mtp); its drafts rarely hold, but every turn must be the
# turn without them, alone and with the lookup
M_PLAIN=$M
M="$T/mtp.gguf"
"$BD/ds4-synth" --preset tiny --recipe q2 --mtp --seed 3 -o "$M" > /dev/null 2>&1 || bad "ds4-synth --mtp"
run m0 0 --think --script "$T/script" -p "copy things"
run m2 0 --mtp-draft 2 --think --script "$T/script" -p "copy things"
run ml 4 --mtp-draft 2 --think --script "$T/script" -p "copy things"
same m0 m2 && ok "scripted turns with --mtp-draft 2: same output, transcript, KV files, files, trace" \
    || bad "scripted turns with --mtp-draft 2 differ"
same m0 ml && ok "scripted turns with --lookup 4 --mtp-draft 2: same" || bad "--lookup 4 --mtp-draft 2 differs"
read -r d a < <(counts m2)
[ "$d" -gt 0 ] && ok "--mtp-draft 2 drafted ($d drafts, $a kept)" || bad "--mtp-draft 2 drafted nothing"
grep -q 'mtp [0-9]* of [0-9]* drafts kept' "$T/m2.err" && ok "status line reports the MTP drafts" \
    || bad "no mtp status: $(tail -2 "$T/m2.err")"
run mg0 0 --nothink --temp 0 --max-tokens 200 --max-turns 1 -p "Say something."
run mg2 0 --mtp-draft 3 --nothink --temp 0 --max-tokens 200 --max-turns 1 -p "Say something."
same mg0 mg2 && ok "greedy model turn: same with MTP drafts" || bad "greedy model turn differs with MTP drafts"
# sampled MTP drafts keep plain sampling's distribution, not its sequence
# (docs/SPEC.md "Sampled MTP drafts"): the same seed gives the same turn,
# another seed another one
run mr2 0 --mtp-draft 2 --think --temp 1 --seed 11 --max-tokens 200 --max-turns 1 -p "Say something."
run mr2b 0 --mtp-draft 2 --think --temp 1 --seed 11 --max-tokens 200 --max-turns 1 -p "Say something."
run mr3 0 --mtp-draft 2 --think --temp 1 --seed 12 --max-tokens 200 --max-turns 1 -p "Say something."
toks() { cat "$(cat "$T/$1.sess")"/*.json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])'; }
same mr2 mr2b && [ "$(toks mr2)" != "$(toks mr3)" ] && [ -n "$(toks mr3)" ] \
    && ok "seeded sampled turn with MTP drafts: same seed same turn, other seed another" \
    || bad "sampled turns with MTP drafts are not reproducible"
M=$M_PLAIN
run mx 0 --mtp-draft 2 --nothink -p "Say something."
[ "$(cat "$T/mx.rc")" != 0 ] && grep -q 'has no MTP block' "$T/mx.err" \
    && ok "--mtp-draft on a model without an MTP block: a clear error" || bad "--mtp-draft without a block: $(cat "$T/mx.err")"

[ $fail -eq 0 ] && { echo "t_agent_lookup: all passed"; exit 0; }
echo "t_agent_lookup: $fail failed"
exit 1
